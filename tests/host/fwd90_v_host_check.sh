#!/usr/bin/env bash
# fwd90_v_host_check.sh: fwd_sm90's FP8 V converters (widen to f16, transpose
# into V^T) from the template's own text, run on the host over a simulated shared
# memory and checked against the TMA and wgmma layouts
# (tests/host/fwd90_v_host_check.cpp), for key tiles of 64, 80 (widening only) and 128, head dims
# 64 to 256, e4m3 and e5m2, with the transpose's shared-memory instructions and wavefronts;
# then an FP8 KV cache's widening to f16, and to bf16 where the GEMMs stay in bf16 (the same
# function for K and V)
# (FWD90=FILE: another version of the template). No GPU needed. Run from the repository root.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
f=${FWD90:-templates/fwd_sm90.cuh}
{
  sed -n '/^constexpr int fwd90_vt_row = ATTN_BN;/,/^}/p' "$f"
  sed -n '/^\/\* FP8 V: the 8-bit tile at v8/,/^__device__ __forceinline__ void attn_fwd_sm90(/p' "$f" | sed '$d'
} >"$tmp/v.inc"
grep -q fwd90_transpose_v "$tmp/v.inc" && grep -q fwd90_convert_v "$tmp/v.inc" ||
  { echo "FAIL: the converters' text was not found in $f"; exit 1; }
fail=0
for bn in 64 80 128; do
  for dv in 64 128 192 256; do
    for e4 in 1 0; do
      g++ -std=c++17 -O1 -g -w -fsanitize=address,undefined -DATTN_BN=$bn -DDV=$dv -DKV_E4M3=$e4 \
        -DV_TEXT="\"$tmp/v.inc\"" -o "$tmp/check" tests/host/fwd90_v_host_check.cpp
      "$tmp/check" || fail=1
    done
  done
done
for bn in 80 128; do
  for d in 64 192; do
    for e4 in 1 0; do
      for bf in 0 1; do
        g++ -std=c++17 -O1 -g -w -fsanitize=address,undefined -DATTN_BN=$bn -DDV=$d -DKV_E4M3=$e4 \
          -DKV8=1 -DBF16=$bf -DV_TEXT="\"$tmp/v.inc\"" -o "$tmp/check" tests/host/fwd90_v_host_check.cpp
        "$tmp/check" || fail=1
      done
    done
  done
done
exit $fail
