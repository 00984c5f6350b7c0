#!/usr/bin/env bash
# swz_host_check.sh: templates/ptx.cuh's attn_swz (the swizzled offset of a tile's
# 16-byte chunk, which the cp.async copies, ldmatrix reads and FP8 converters of
# fwd_sm80, decode.cuh and bwd_sm80 share), compiled for the host from the
# template's own text: for every row width a tile can have (16-bit rows of 128 to
# 512 bytes, 8-bit rows of 64 to 256) and 256 rows, each row's chunks must land on
# that row's own chunks, one each. 8-bit rows of 192 bytes once sent chunks 8-11
# into the next row (session 28). No GPU needed. Run from the repository root.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -n '/static __device__ __forceinline__ unsigned attn_swz(/,/^}/p' templates/ptx.cuh |
  sed 's/\[\[maybe_unused\]\] static __device__ __forceinline__/static inline/' >"$tmp/swz.inc"
grep -q attn_swz "$tmp/swz.inc" || { echo "FAIL: attn_swz's text was not found in templates/ptx.cuh"; exit 1; }
cat >"$tmp/check.cpp" <<'CPP'
#include <cstdio>
#include <vector>
#include "swz.inc"
int main() {
  int failures = 0;
  for (int row_bytes = 64; row_bytes <= 512; row_bytes += 64) {
    for (int r = 0; r < 256; ++r) {
      std::vector<int> seen(row_bytes / 16, 0);
      for (int c = 0; c < row_bytes / 16; ++c) {
        const unsigned off = attn_swz(r, c, row_bytes);
        const long in_row = (long)off - (long)r * row_bytes;
        if (off % 16 != 0 || in_row < 0 || in_row >= row_bytes || seen[in_row / 16]++) {
          if (failures++ < 8)
            std::printf("FAIL: rows of %d bytes: row %d chunk %d at offset %u (row starts at %d)\n",
                        row_bytes, r, c, off, r * row_bytes);
        }
      }
    }
  }
  std::printf("%s: attn_swz keeps every chunk in its row, one each (rows of 64-512 bytes)\n",
              failures ? "FAIL" : "PASS");
  return failures != 0;
}
CPP
g++ -std=c++17 -O1 -g -w -fsanitize=address,undefined -I"$tmp" -o "$tmp/check" "$tmp/check.cpp"
"$tmp/check"
