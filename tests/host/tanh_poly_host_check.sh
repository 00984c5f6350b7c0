#!/usr/bin/env bash
# tanh_poly_host_check.sh: templates/common.cuh's attn_tanh_poly (tanh on the FMA pipe, fwd_sm90's
# ATTN_TANH_POLY) compiled for the host from the template's own text and checked against tanh in
# double (tests/host/tanh_poly_host_check.cpp). No GPU needed; AddressSanitizer and UBSan. fma
# contraction off: the text's fmaf calls are the fused operations the GPU runs. Run from the
# repository root.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk '/attn_tanh_poly\(float x\) \{/ { on = 1 } on { print } on && /^}/ { on = 0 }' templates/common.cuh |
  sed 's/^\[\[maybe_unused\]\] static __device__ __forceinline__/static inline/' >"$tmp/tanh.inc"
grep -q 'attn_tanh_poly(' "$tmp/tanh.inc" || { echo "FAIL: attn_tanh_poly's text was not found in templates/common.cuh"; exit 1; }
g++ -std=c++17 -O1 -g -w -ffp-contract=off -fsanitize=address,undefined -DTANH_TEXT="\"$tmp/tanh.inc\"" \
  -o "$tmp/check" tests/host/tanh_poly_host_check.cpp -lm
"$tmp/check"
