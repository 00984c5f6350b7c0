#!/usr/bin/env bash
# profile_device.sh BUILD: on the GPU machine, time bench/kernel_costs.py's graphs
# and profile them with Nsight Compute (hardware counters, clocks left
# alone). Logs under $OUT (or /tmp/attnc-profile).
set -u
B=${1:-build}
L=${OUT:-/tmp/attnc-profile}
mkdir -p "$L"
export ATTN_CACHE_DIR=$L/../attnc-cache PYTHONUNBUFFERED=1
python3 bench/kernel_costs.py --lib "$B/libattn.so" >"$L/times.log" 2>&1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU" >"$L/ncu.log"
"$NCU" --clock-control none -k regex:attn_ \
  --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section Occupancy --section LaunchStats \
  --metrics sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
  python3 bench/kernel_costs.py --once --lib "$B/libattn.so" >>"$L/ncu.log" 2>&1
echo "ncu rc $?" >>"$L/ncu.log"
tail -3 "$L/times.log"; grep -c "attn_" "$L/ncu.log"; tail -2 "$L/ncu.log"
