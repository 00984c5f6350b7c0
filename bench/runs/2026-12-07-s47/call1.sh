#!/usr/bin/env bash
# Session 47, device call 1: the BM-80 backward (backward_template 93; 94 with dV's GEMM
# from shared memory) checked and timed beside the 64-query kernel, then plan format 4's
# paged decode rule. Each step's log lands in $OUT as it ends (a call cut short keeps them).
B=build
O=${OUT:-/tmp/out}; mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/$B/install/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ATTN_CACHE_DIR=/tmp/attnc-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/gpu.txt"
mkdir -p /tmp/fa4 && for f in .fa4/*.tar.xz; do tar xJf "$f" -C /tmp/fa4; done && export ATTN_FA4=/tmp/fa4
mkdir -p /tmp/site_fi && tar xJf .fi/site_fi.tar.xz -C /tmp/site_fi && export PYTHONPATH=/tmp/site_fi FLASHINFER_DISABLE_JIT=1
run() { local n=$1; shift; local t0=$(date +%s); "$@" > "$O/$n.log" 2>&1; echo "$n rc=$? $(( $(date +%s) - t0 ))s: $(grep -v '^\s*$' "$O/$n.log" | tail -1)" >> "$O/summary.txt"; }
run t_d128_bm80 env ATTN_BWD_TEMPLATE=sm90bm80 timeout 120 $B/tests/gpu/test_backward d128
run t_d128_bm80_c3 env ATTN_BWD_TEMPLATE=sm90bm80 ATTN_PERSISTENT_CTAS=3 timeout 120 $B/tests/gpu/test_backward d128
run t_packed_bm80 env ATTN_BWD_TEMPLATE=sm90bm80 timeout 150 $B/tests/gpu/test_backward packed
run bd_sm90 env ATTN_BWD_TEMPLATE=sm90 timeout 120 python3 bench/bwd_breakdown.py --lib $B/libattn.so --dims 128
run bd_bm80 env ATTN_BWD_TEMPLATE=sm90bm80 timeout 120 python3 bench/bwd_breakdown.py --lib $B/libattn.so --dims 128
run t_d128_bm80s env ATTN_BWD_TEMPLATE=sm90bm80s timeout 120 $B/tests/gpu/test_backward d128
run bd_bm80s env ATTN_BWD_TEMPLATE=sm90bm80s timeout 120 python3 bench/bwd_breakdown.py --lib $B/libattn.so --dims 128
mkdir -p "$O/bm80" && run bench_bwd_bm80 env ATTN_BWD_TEMPLATE=sm90bm80 timeout 200 python3 bench/bench.py --lib $B/libattn.so --backward --dims 128 --out "$O/bm80"
# The BM-80 kernel under compute-sanitizer (its new shared-memory traffic: stmatrix.trans dS, dQ^T's stores).
run san_mem_bm80 env ATTN_BWD_TEMPLATE=sm90bm80 timeout 200 ${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)} --tool memcheck $B/tests/gpu/test_backward d128
run san_race_bm80 env ATTN_BWD_TEMPLATE=sm90bm80 timeout 200 ${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)} --tool racecheck $B/tests/gpu/test_backward d128
# Plan format 4's paged decode rule as the plan's choice, then the paged split sweep.
mkdir -p "$O/dec" && run decode_paged timeout 150 python3 bench/decode.py --paged --quick --lib $B/libattn.so --out "$O/dec"
run sweep_paged timeout 150 python3 bench/decode.py --split-sweep --paged --lib $B/libattn.so --out "$O/dec"
