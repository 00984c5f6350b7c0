#!/usr/bin/env bash
# stage_host_check.sh: templates/softmax.cuh's attn_stage_off (where fwd_sm90's o_smem variant
# stages a warp's 16 rows of O for its TMA stores), compiled for the host from the template's
# own text. For every V tile width (64-256 columns): each pair of columns of each row lands on its
# own four bytes inside the warp's staging (16 rows x the width x 2 bytes); the byte address is
# where a TMA box of 64 columns x 16 rows with the 128-byte swizzle reads that element (block
# col / 64 at 2048 bytes each, row r at 128 r, 16-byte chunk (col % 64) / 8 XOR r % 8); and the
# 32 lanes of a warp (row g = lane / 4 of a half, t = lane % 4) storing one column block hit 32
# distinct banks. No GPU needed. Run from the repository root.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -n '/static __device__ __forceinline__ int attn_stage_off(/,/^}/p' templates/softmax.cuh |
  sed 's/static __device__ __forceinline__/static inline/' >"$tmp/stage.inc"
grep -q attn_stage_off "$tmp/stage.inc" ||
  { echo "FAIL: attn_stage_off's text was not found in templates/softmax.cuh"; exit 1; }
cat >"$tmp/check.cpp" <<'CPP'
#include <cstdio>
#include <vector>
#include "stage.inc"
int main() {
  int failures = 0;
  auto fail = [&](const char *what, int dv, int r, int nb, int t) {
    if (failures++ < 8) std::printf("FAIL: %s: width %d row %d nb %d t %d\n", what, dv, r, nb, t);
  };
  for (int dv = 64; dv <= 256; dv += 64) {
    std::vector<int> seen(16 * dv / 2, 0);
    for (int r = 0; r < 16; ++r)
      for (int nb = 0; nb < dv / 8; ++nb)
        for (int t = 0; t < 4; ++t) {
          const int off = attn_stage_off(r, nb, t), col = 8 * nb + 2 * t;
          if (off < 0 || off >= 16 * dv || off % 2 != 0 || seen[off / 2]++) {
            fail("outside the staging, odd or taken twice", dv, r, nb, t);
            continue;
          }
          const int tma = (col / 64) * 2048 + r * 128 + ((((col % 64) / 8) ^ (r % 8)) * 16) +
                          (col % 8) * 2;
          if (2 * off != tma) fail("not where the TMA box reads it", dv, r, nb, t);
        }
    for (int half = 0; half < 2; ++half)
      for (int nb = 0; nb < dv / 8; ++nb) {
        std::vector<int> bank(32, 0);
        for (int lane = 0; lane < 32; ++lane)
          if (bank[(2 * attn_stage_off(lane / 4 + 8 * half, nb, lane % 4) / 4) % 32]++)
            fail("bank conflict", dv, lane / 4 + 8 * half, nb, lane % 4);
      }
  }
  std::printf("%s: attn_stage_off puts each pair once, where TMA's 128-byte swizzle reads it, "
              "conflict-free (widths 64-256)\n", failures ? "FAIL" : "PASS");
  return failures != 0;
}
CPP
g++ -std=c++17 -O1 -g -w -fsanitize=address,undefined -I"$tmp" -o "$tmp/check" "$tmp/check.cpp"
"$tmp/check"
