#!/usr/bin/env bash
# softmax_host_check.sh: templates/softmax.cuh's online softmax tiles (the
# code from attn_stale_log2 to attn_softmax_tile_qk's end), with ptx.cuh's
# attn_exp2_fma for the EXP2_FMA variants, compiled for the host and checked
# against float64 (tests/host/softmax_host_check.cpp).
# No GPU needed; runs under AddressSanitizer and UBSan. From the repository root.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -n '/^constexpr float attn_stale_log2/,/^\/\* The row.s normalizer/p' templates/softmax.cuh |
  sed '$d' >"$tmp/softmax_text.inc"
grep -q attn_softmax_tile_qk "$tmp/softmax_text.inc" || { echo "FAIL: softmax.cuh's text not found"; exit 1; }
# (the FMA pipe's exp2 the EXP2_FMA variants take, ptx.cuh's own text)
. tests/lib/device_fn.sh
device_fn templates/ptx.cuh attn_exp2_fma "$tmp/exp2_fma.inc" || exit 1
# Tiles of 8, 11 and 22 blocks of 8 keys (22: fwd_sm90's key tiles of 176).
# fma contraction where the CPU has fma, as NVVM contracts the template's a * b - c (a
# difference that is exactly 0 unfused is not fused: attn_alpha exists for that).
contract=
grep -qw fma /proc/cpuinfo 2>/dev/null && contract="-mfma -ffp-contract=fast"
for n in 8 11 22; do
  g++ -std=c++17 -O2 -g -w $contract -fsanitize=address,undefined -DSOFTMAX_TEXT="\"$tmp/softmax_text.inc\"" \
    -DEXP2_FMA_TEXT="\"$tmp/exp2_fma.inc\"" -DSOFTMAX_N=$n -Itests/host \
    -o "$tmp/check$n" tests/host/softmax_host_check.cpp -lm
  printf 'N %s: ' "$n"
  "$tmp/check$n"
done
