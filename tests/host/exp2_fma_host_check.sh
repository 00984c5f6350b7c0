#!/usr/bin/env bash
# exp2_fma_host_check.sh: templates/ptx.cuh's attn_exp2_fma (2^x on the FMA pipe) compiled for
# the host from the template's own text and checked against exp2 in double
# (tests/host/exp2_fma_host_check.cpp). No GPU needed; AddressSanitizer and UBSan. Run from
# the repository root.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. tests/lib/device_fn.sh
device_fn templates/ptx.cuh attn_exp2_fma "$tmp/exp2.inc" || exit 1
g++ -std=c++17 -O1 -g -w -ffp-contract=off -fsanitize=address,undefined -DEXP2_TEXT="\"$tmp/exp2.inc\"" \
  -o "$tmp/check" tests/host/exp2_fma_host_check.cpp -lm
"$tmp/check"
