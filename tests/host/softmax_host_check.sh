#!/usr/bin/env bash
# softmax_host_check.sh: templates/softmax.cuh's online softmax tiles (the
# code from attn_stale_log2 to attn_softmax_tile_qk's end), compiled for the
# host and checked against float64 (tests/host/softmax_host_check.cpp).
# No GPU needed; runs under AddressSanitizer and UBSan. From the repository root.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -n '/^constexpr float attn_stale_log2/,/^\/\* The row.s normalizer/p' templates/softmax.cuh |
  sed '$d' >"$tmp/softmax_text.inc"
grep -q attn_softmax_tile_qk "$tmp/softmax_text.inc" || { echo "FAIL: softmax.cuh's text not found"; exit 1; }
g++ -std=c++17 -O1 -g -w -fsanitize=address,undefined -DSOFTMAX_TEXT="\"$tmp/softmax_text.inc\"" \
  -o "$tmp/check" tests/host/softmax_host_check.cpp -lm
"$tmp/check"
