#!/usr/bin/env bash
# Session 47's device steps (written for the next session: no machine was lent in 47).
#   bash bench/runs/2026-12-07-s47/call1.sh [bm80|decode|all]     (default: bm80)
# bm80 (~500 s): the BM-80 backward (backward_template 93; 94 with dV's GEMM from shared
#   memory; 95 with dV and dK after one pass) checked against the CPU reference and timed beside the 64-query kernel and beside
#   cuDNN and FA4; carry build/libattn.so, build/install, build/tests/gpu/test_backward,
#   build/tests/gpu/sanitize_cases, .fa4.
# decode (~300 s): plan format 4's paged decode rule as the plan's choice, then the paged
#   split sweep; carry build/libattn.so, build/install, .fi.
# Each step's log lands in $OUT as it ends (a call cut short keeps them); summary.txt lists
# every step's exit status, seconds and last line.
PART=${1:-bm80}
B=build
O=${OUT:-/tmp/out}; mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/$B/install/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ATTN_CACHE_DIR=/tmp/attnc-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/gpu.txt"
run() { local n=$1; shift; local t0=$(date +%s); "$@" > "$O/$n.log" 2>&1; echo "$n rc=$? $(( $(date +%s) - t0 ))s: $(grep -v '^\s*$' "$O/$n.log" | tail -1)" >> "$O/summary.txt"; }
if [ "$PART" = bm80 ] || [ "$PART" = all ]; then
  if ls .fa4/*.tar.xz >/dev/null 2>&1; then
    mkdir -p /tmp/fa4 && for f in .fa4/*.tar.xz; do tar xJf "$f" -C /tmp/fa4; done && export ATTN_FA4=/tmp/fa4
  fi
  run t_d128_bm80 env ATTN_BWD_TEMPLATE=sm90bm80 timeout 120 $B/tests/gpu/test_backward d128
  run t_d128_bm80_c3 env ATTN_BWD_TEMPLATE=sm90bm80 ATTN_PERSISTENT_CTAS=3 timeout 120 $B/tests/gpu/test_backward d128
  run t_d128_bm80s env ATTN_BWD_TEMPLATE=sm90bm80s timeout 120 $B/tests/gpu/test_backward d128
  run t_d128_bm80late env ATTN_BWD_TEMPLATE=sm90bm80late timeout 120 $B/tests/gpu/test_backward d128
  # The main kernel's A/B (per-kernel times, one process each): 64-query tiles, then both BM-80 forms.
  run bd_sm90 env ATTN_BWD_TEMPLATE=sm90 timeout 120 python3 bench/bwd_breakdown.py --lib $B/libattn.so --dims 128
  run bd_bm80 env ATTN_BWD_TEMPLATE=sm90bm80 timeout 120 python3 bench/bwd_breakdown.py --lib $B/libattn.so --dims 128
  run bd_bm80s env ATTN_BWD_TEMPLATE=sm90bm80s timeout 120 python3 bench/bwd_breakdown.py --lib $B/libattn.so --dims 128
  run bd_bm80late env ATTN_BWD_TEMPLATE=sm90bm80late timeout 120 python3 bench/bwd_breakdown.py --lib $B/libattn.so --dims 128
  python3 bench/bwd_ab.py "$O/bd_sm90.log" "$O/bd_bm80.log" "$O/bd_bm80s.log" "$O/bd_bm80late.log" > "$O/bd_ab.md" 2>&1
  run t_packed_bm80 env ATTN_BWD_TEMPLATE=sm90bm80 timeout 150 $B/tests/gpu/test_backward packed
  # BENCH_FORM=none skips the table (session 48 ran it in a later call under the winning form).
  [ "${BENCH_FORM:-sm90bm80}" != none ] && mkdir -p "$O/bm80" && run bench_bwd_bm80 env ATTN_BWD_TEMPLATE=${BENCH_FORM:-sm90bm80} timeout 200 python3 bench/bench.py --lib $B/libattn.so --backward --dims 128 --out "$O/bm80"
  # Under compute-sanitizer (the new shared-memory traffic: stmatrix dS and Pd^T, dQ^T's stores,
  # 94's named barriers): sanitize_cases' two BM-80 cases, every tool.
  run sanitize_bm80 env L="$O/sanitize" CASES=BM-80 TOOLS="${SAN_TOOLS:-memcheck racecheck synccheck initcheck}" \
    timeout ${SAN_TIMEOUT:-300} bash tools/sanitize_device.sh $B
fi
if [ "$PART" = decode ] || [ "$PART" = all ]; then
  if [ -f .fi/site_fi.tar.xz ]; then
    mkdir -p /tmp/site_fi && tar xJf .fi/site_fi.tar.xz -C /tmp/site_fi && export PYTHONPATH=/tmp/site_fi FLASHINFER_DISABLE_JIT=1
  fi
  mkdir -p "$O/dec" && run decode_paged timeout 150 python3 bench/decode.py --paged --quick --lib $B/libattn.so --out "$O/dec"
  run sweep_paged timeout 150 python3 bench/decode.py --split-sweep --paged --lib $B/libattn.so --out "$O/dec"
fi
