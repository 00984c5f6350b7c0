#!/usr/bin/env bash
# Session 48's first device call: session 47's two parts cut to fit one call (~450 s), since
# starts were scarce. The BM-80 forms' correctness (test_backward d128 under each of options
# 93-95) and the main kernel's A/B at D 128 (bwd_breakdown.py under sm90 and the three forms,
# tabled by bench/bwd_ab.py), then plan format 4's paged decode rule as the plan's choice.
# Carry: build/libattn.so, build/install, build/tests/gpu/test_backward, .fi.
# Left for a later call: the 3-CTA and packed tests, sanitize_cases' BM-80 cases, the backward
# table beside FA4 under the winning form, the paged split sweep.
B=build
O=${OUT:-/tmp/out}; mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/$B/install/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ATTN_CACHE_DIR=/tmp/attnc-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$O/gpu.txt"
run() { local n=$1; shift; local t0=$(date +%s); "$@" > "$O/$n.log" 2>&1; echo "$n rc=$? $(( $(date +%s) - t0 ))s: $(grep -v '^\s*$' "$O/$n.log" | tail -1)" >> "$O/summary.txt"; }
for f in sm90bm80 sm90bm80s sm90bm80late; do
  run t_d128_$f env ATTN_BWD_TEMPLATE=$f timeout 60 $B/tests/gpu/test_backward d128
done
for f in sm90 sm90bm80 sm90bm80s sm90bm80late; do
  run bd_$f env ATTN_BWD_TEMPLATE=$f timeout 60 python3 bench/bwd_breakdown.py --lib $B/libattn.so --dims 128
done
python3 bench/bwd_ab.py "$O/bd_sm90.log" "$O/bd_sm90bm80.log" "$O/bd_sm90bm80s.log" "$O/bd_sm90bm80late.log" > "$O/bd_ab.md" 2>&1
if [ -f .fi/site_fi.tar.xz ]; then
  mkdir -p /tmp/site_fi && tar xJf .fi/site_fi.tar.xz -C /tmp/site_fi && export PYTHONPATH=/tmp/site_fi FLASHINFER_DISABLE_JIT=1
fi
mkdir -p "$O/dec" && run decode_paged timeout 120 python3 bench/decode.py --paged --quick --lib $B/libattn.so --out "$O/dec"
