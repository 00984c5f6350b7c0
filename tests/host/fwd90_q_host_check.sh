#!/usr/bin/env bash
# fwd90_q_host_check.sh: fwd_sm90's in-place rewrite of a bf16 Q tile into f16 rows times
# powers of two (fwd90_q_to_f16 over ptx.cuh's attn_rows_bf16_to_f16: an FP8 KV cache under a
# bf16 q), from the templates' own text, run on the host by 32 threads as one warp (tests/host/fwd90_q_host_check.cpp), for
# head-dim tiles 64-256 and query tiles of 128 and 192 rows, under ASan and UBSan
# (FWD90=FILE, PTX=FILE: other versions of the templates). No GPU needed. Run from the repository root.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
f=${FWD90:-templates/fwd_sm90.cuh}
x=${PTX:-templates/ptx.cuh}
{
  sed -n '/^\/\* bf16 rows into f16, each row times a power of two/,/^\/\* 2^x in one instruction/p' "$x" |
    sed '$d'
  sed -n '/^\/\* kv8 under a bf16 q (fwd90_q_rescale): one warp/,/^}/p' "$f"
} >"$tmp/q.inc"
grep -q 'void attn_rows_bf16_to_f16' "$tmp/q.inc" && grep -q 'void fwd90_q_to_f16' "$tmp/q.inc" ||
  { echo "FAIL: the rewrite's text was not found in $x and $f"; exit 1; }
fail=0
for bm in 128 192; do
  for d in 64 128 192 256; do
    g++ -std=c++20 -O1 -g -w -pthread -fsanitize=address,undefined -DBM=$bm -DDQK=$d \
      -DQ_TEXT="\"$tmp/q.inc\"" -o "$tmp/check" tests/host/fwd90_q_host_check.cpp
    "$tmp/check" || fail=1
  done
done
exit $fail
