#!/usr/bin/env bash
# tanh_poly_host_check.sh: templates/common.cuh's attn_tanh_poly (tanh on the FMA pipe, fwd_sm90's
# ATTN_TANH_POLY) compiled for the host from the template's own text and checked against tanh in
# double (tests/host/tanh_poly_host_check.cpp). No GPU needed; AddressSanitizer and UBSan. fma
# contraction off: the text's fmaf calls are the fused operations the GPU runs. Run from the
# repository root.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. tests/lib/device_fn.sh
device_fn templates/common.cuh attn_tanh_poly "$tmp/tanh.inc" || exit 1
g++ -std=c++17 -O1 -g -w -ffp-contract=off -fsanitize=address,undefined -DTANH_TEXT="\"$tmp/tanh.inc\"" \
  -o "$tmp/check" tests/host/tanh_poly_host_check.cpp -lm
"$tmp/check"
