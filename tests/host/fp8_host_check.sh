#!/usr/bin/env bash
# fp8_host_check.sh [LIBATTN_A]: the kernels' FP8 rounding (templates/common.cuh,
# from "f32 to OCP FP8" to the rounding casts) compiled for the host and compared
# with the CPU reference's (tests/host/fp8_host_check.cpp). No GPU needed; runs
# under AddressSanitizer and UBSan. Run from the repository root.
set -eu
lib=${1:-build/libattn.a}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -n '/^\/\* f32 to OCP FP8 as the CPU reference rounds/,/^\/\* x rounded to a storage type/p' \
  templates/common.cuh | sed '$d' >"$tmp/fp8.inc"
[ -s "$tmp/fp8.inc" ] || { echo "FAIL: no FP8 rounding text in templates/common.cuh"; exit 1; }
g++ -std=c++17 -O1 -g -w -fsanitize=address,undefined -DFP8_TEXT="\"$tmp/fp8.inc\"" \
  -o "$tmp/check" tests/host/fp8_host_check.cpp "$lib" -ldl -lm -lpthread
"$tmp/check"
