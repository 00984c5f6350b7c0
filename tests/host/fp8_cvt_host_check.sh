#!/usr/bin/env bash
# fp8_cvt_host_check.sh: templates/ptx.cuh's attn_fp8x4_cvt (four e4m3 or e5m2 bytes as
# bf16 or f16, the converter of the decode kernel's, fwd_sm80's and fwd_sm90's FP8 tiles),
# its bit work compiled for the host from the template's own text, with exact host versions
# of the multiplies it ends with (tests/host/fp8_cvt_host_check.cpp): every byte value in
# every position of a word, each type pair, against the FP8 formats' definitions (NaN a NaN,
# -0 a -0). No GPU needed; AddressSanitizer and UBSan. Run from the repository root.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# (attn_fp8x4_cvt alone: the chunk converter after it shares its template line)
awk '/^template <bool E4M3, bool BF16>$/ { t = $0; next }
     t != "" { if ($0 ~ /attn_fp8x4_cvt\(unsigned/) { print t; on = 1 } t = "" }
     on { print } on && /^}/ { on = 0 }' templates/ptx.cuh |
  sed 's/static __device__ __forceinline__/static inline/' >"$tmp/cvt.inc"
grep -q 'attn_fp8x4_cvt(' "$tmp/cvt.inc" || { echo "FAIL: attn_fp8x4_cvt's text was not found in templates/ptx.cuh"; exit 1; }
g++ -std=c++17 -O1 -g -w -fsanitize=address,undefined -DCVT_TEXT="\"$tmp/cvt.inc\"" \
  -o "$tmp/check" tests/host/fp8_cvt_host_check.cpp -lm
"$tmp/check"
