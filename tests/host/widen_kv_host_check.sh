#!/usr/bin/env bash
# widen_kv_host_check.sh: fwd_sm90's kv_copy widening step (templates/fwd_sm90.cuh,
# attn_fwd90_widen_kv) from the template's own text, run on the host over its whole grid
# (tests/host/widen_kv_host_check.cpp): every element lands at its place in the 16-bit
# copies, nothing is written past them, and nothing is read outside the FP8 tensors. Head
# dims 64 to 256, equal and not. No GPU needed; AddressSanitizer and UBSan. Run from the
# repository root (FWD90=FILE: another version of the template).
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
f=${FWD90:-templates/fwd_sm90.cuh}
sed -n '/^template <int D>$/{N;/fwd90_widen_rows/!d};/fwd90_widen_rows(const attn_tensor_arg/,/^#endif/p' "$f" |
  sed '$d' | sed 's/static __device__ __forceinline__/static inline/; s/^__device__ __forceinline__/inline/' \
  >"$tmp/widen.inc"
grep -q 'attn_fwd90_widen_kv' "$tmp/widen.inc" ||
  { echo "FAIL: the widening step's text was not found in $f"; exit 1; }
fail=0
for dims in "64 64" "128 128" "192 192" "256 256" "128 64" "64 192"; do
  set -- $dims
  g++ -std=c++17 -O1 -g -w -fsanitize=address,undefined -DDQK=$1 -DDV=$2 \
    -DWIDEN_TEXT="\"$tmp/widen.inc\"" -o "$tmp/check" tests/host/widen_kv_host_check.cpp
  "$tmp/check" || fail=1
done
exit $fail
