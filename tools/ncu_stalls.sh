#!/usr/bin/env bash
# ncu_stalls.sh KERNEL_REGEX COUNT COMMAND...: on the GPU machine, why the first COUNT launches
# of the kernels whose names match KERNEL_REGEX stall while COMMAND runs (Nsight Compute, clocks
# left alone). Prints per kernel the warps stalled per issued instruction by reason (what
# session 29 read: bench/RESULTS.md "Session 29"), its instruction count and issue activity;
# SOURCE=1 adds the SourceCounters section, which places the stall samples at SASS lines (the
# question session 29 left open: which barrier or load). The whole report goes to
# ${OUT:-/tmp}/ncu-stalls.log. Example (the FP8 cache's forward at D 128 S 8k):
#   SOURCE=1 bash tools/ncu_stalls.sh attn_kv_fwd 1 python3 bench/fp8_kv.py --dims 128 \
#     --seqs 8192 --lib build/libattn.so --out /tmp
set -u
re=${1:?usage: ncu_stalls.sh KERNEL_REGEX COUNT COMMAND...}
count=${2:?usage: ncu_stalls.sh KERNEL_REGEX COUNT COMMAND...}
shift 2
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -x "$NCU" ] || { echo "ncu_stalls: no ncu"; exit 1; }
log=${OUT:-/tmp}/ncu-stalls.log
metrics="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
metrics+=",smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active"
# The pipes' shares of their peaks (MUFU is xu, the wgmma's tensor pipe one of the sm__pipe_*):
# whether the softmax's MUFU or issue, or the tensor cores, set the pace. Regexes, so a name
# this ncu lacks matches nothing instead of failing the run.
metrics+=",regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active"
metrics+=",regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active"
sections=()
rep=${OUT:-/tmp}/ncu-stalls
[ "${SOURCE:-0}" = 1 ] && sections=(--section SourceCounters --section WarpStateStats -f -o "$rep")
"$NCU" --clock-control none -k "regex:$re" --launch-count "$count" --metrics "$metrics" \
  "${sections[@]}" "$@" >"$log" 2>&1
rc=$?
# With SOURCE=1 the report is kept, and its source page (every SASS instruction with its stall
# samples, as CSV) goes beside the log: read it on the dev machine (which has no ncu), e.g.
# with tools/ncu_source_top.py, to find the instructions the warps wait at.
if [ "${SOURCE:-0}" = 1 ] && [ -f "$rep.ncu-rep" ]; then
  "$NCU" -i "$rep.ncu-rep" --page details >>"$log" 2>&1
  "$NCU" -i "$rep.ncu-rep" --page source --csv --print-source sass >"${OUT:-/tmp}/ncu-source.csv" 2>&1
fi
# The kernels' lines and every reason above 0.05 warps an instruction, names shortened.
grep -E "^  [a-zA-Z_0-9]+ \(|stalled|inst_executed|issue_active" "$log" |
  awk '/^  [a-zA-Z_0-9]+ \(/ || $NF + 0 > 0.05' |
  sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
# The pipes above 1% of their peaks.
grep -E "sm__(inst_executed_)?pipe_" "$log" | awk '$NF + 0 > 1'
[ "${SOURCE:-0}" = 1 ] && grep -A40 "Section: Source Counters" "$log" | head -80
echo "ncu_stalls: rc $rc; the report: $log"
exit $rc
