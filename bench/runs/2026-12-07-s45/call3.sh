#!/usr/bin/env bash
# (Not run: no machine came for session 45's third call. The next session runs the same checks
# through tools/device_check.sh FIRST_S45 after applying kv_tma.patch.)
# Session 45, call 3: the K/V-by-TMA build (build/kvtma) and the 16-byte dK/dV stores build
# (build), their tests, then the backward main kernel beside cuDNN for the build before both
# (build/base), the stores build and the TMA build, then the TMA build's stamps.
export PYTHONUNBUFFERED=1
L=${OUT:-/tmp/s45c3}; mkdir -p "$L"
run() { local name=$1; shift; "$@" > "$L/$name.log" 2>&1; echo "$name (rc $?): $(grep -v '^\s*$' "$L/$name.log" | tail -1)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run kv_bwd90 env ATTN_BWD_TEMPLATE=sm90 ATTN_PERSISTENT_CTAS=3 timeout 120 build/kvtma/tests/gpu/test_backward backward
run kv_fp8_copies env ATTN_BWD_TEMPLATE=sm90 ATTN_PERSISTENT_CTAS=3 timeout 90 build/kvtma/tests/gpu/test_backward fp8
for b in base kvtma; do
  run "breakdown_$b" python3 bench/bwd_breakdown.py --lib build/$b/libattn.so --dims 64,128 --seqs 1024,4096
done
run v4_bwd90 env ATTN_BWD_TEMPLATE=sm90 ATTN_PERSISTENT_CTAS=3 timeout 120 build/tests/gpu/test_backward backward
run breakdown_v4 python3 bench/bwd_breakdown.py --lib build/libattn.so --dims 64,128 --seqs 1024,4096
run kv_head_dims80 timeout 60 build/kvtma/tests/gpu/test_head_dims hd_80
run kv_bwd90_full_grid env ATTN_BWD_TEMPLATE=sm90 timeout 90 build/kvtma/tests/gpu/test_backward backward
run v4_fp8_copies env ATTN_BWD_TEMPLATE=sm90 ATTN_PERSISTENT_CTAS=3 timeout 90 build/tests/gpu/test_backward fp8
run stamps_kv python3 bench/bwd_stamps.py --lib build/kvtma/libattn.so --dims 128,64 --seqs 1024,4096
for f in "$L"/breakdown_*.log; do echo "== $f"; awk '/^## D/{h=$0} /bwd_main/{print h " | " $1}' "$f"; done
