#!/usr/bin/env bash
# stage_host_check.sh: templates/softmax.cuh's attn_stage_off and attn_stage_off8 (where fwd_sm90's
# o_smem variant stages a warp's 16 rows of a 16- or 8-bit O for its TMA stores), compiled for
# the host from the template's own text. For every V tile width (64-256 columns): each pair of
# columns of each row lands on its own four bytes (two for 8 bits) inside the warp's staging; the
# byte address is where a TMA box of 128 bytes x 16 rows with the 128-byte swizzle reads that
# element (block at 2048 bytes each, row r at 128 r, 16-byte chunk XOR r % 8); and the 32 lanes
# of a warp (row g = lane / 4 of a half, t = lane % 4) storing one column block hit 32 distinct
# banks (8 bits: 16 distinct words, two lanes a word); and fwd_sm90's fwd90_stage_chunk (where a
# packed sequence's end copies a staged row's 16-byte chunks from) agrees with attn_stage_off. A
# mutant without the swizzle fails it. No GPU needed. Run from the repository root.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in attn_stage_off attn_stage_off8; do
  sed -n "/static __device__ __forceinline__ int $f(/,/^}/p" templates/softmax.cuh |
    sed 's/static __device__ __forceinline__/static inline/' >>"$tmp/stage.inc"
  grep -q "int $f(" "$tmp/stage.inc" ||
    { echo "FAIL: $f's text was not found in templates/softmax.cuh"; exit 1; }
done
# fwd_sm90's chunk of a staged row (a packed sequence's end is copied 16 bytes at a time from it)
sed -n "/static __device__ __forceinline__ unsigned fwd90_stage_chunk(/,/^}/p" templates/fwd_sm90.cuh |
  sed 's/static __device__ __forceinline__/static inline/' >>"$tmp/stage.inc"
grep -q "unsigned fwd90_stage_chunk(" "$tmp/stage.inc" ||
  { echo "FAIL: fwd90_stage_chunk's text was not found in templates/fwd_sm90.cuh"; exit 1; }
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
  /* attn_stage_off8 (an 8-bit O): byte offsets in blocks of [16][128] bytes, a TMA box of
   * 128 columns x 16 rows with the 128-byte swizzle (block col / 128 at 2048 bytes, row r at
   * 128 r, 16-byte chunk (col % 128) / 16 XOR r % 8); a warp's two-byte stores of one nb touch
   * 16 distinct four-byte words (two lanes a word) in 16 distinct banks. */
  for (int dv = 64; dv <= 256; dv += 64) {
    const int bytes = (dv + 127) / 128 * 2048;
    std::vector<int> seen(bytes / 2, 0);
    for (int r = 0; r < 16; ++r)
      for (int nb = 0; nb < dv / 8; ++nb)
        for (int t = 0; t < 4; ++t) {
          const int off = attn_stage_off8(r, nb, t), col = 8 * nb + 2 * t;
          if (off < 0 || off >= bytes || off % 2 != 0 || seen[off / 2]++) {
            fail("8-bit: outside the staging, odd or taken twice", dv, r, nb, t);
            continue;
          }
          const int tma = (col / 128) * 2048 + r * 128 + ((((col % 128) / 16) ^ (r % 8)) * 16) +
                          col % 16;
          if (off != tma) fail("8-bit: not where the TMA box reads it", dv, r, nb, t);
        }
    for (int half = 0; half < 2; ++half)
      for (int nb = 0; nb < dv / 8; ++nb) {
        std::vector<int> word_bank(32, -1);
        for (int lane = 0; lane < 32; ++lane) {
          const int word = attn_stage_off8(lane / 4 + 8 * half, nb, lane % 4) / 4;
          int &w = word_bank[word % 32];
          if (w >= 0 && w != word) fail("8-bit: bank conflict", dv, lane / 4 + 8 * half, nb, lane % 4);
          w = word;
        }
      }
  }
  /* fwd90_stage_chunk (a 16-bit O's row copied by 16-byte bulk copies at a packed sequence's
   * end): chunk ch of row r holds columns 8 ch .. 8 ch + 7 of the slot's 64-column block, in
   * order: the pair at columns 8 ch + 2 t, + 1 four bytes a t further on. */
  for (int r = 0; r < 16; ++r)
    for (int ch = 0; ch < 8; ++ch)
      for (int t = 0; t < 4; ++t)
        if (2 * attn_stage_off(r, ch, t) != (int)fwd90_stage_chunk(r, ch) + 4 * t)
          fail("fwd90_stage_chunk: not where attn_stage_off put the pair", 64, r, ch, t);
  std::printf("%s: attn_stage_off and attn_stage_off8 put each pair once, where TMA's 128-byte "
              "swizzle reads it, conflict-free (widths 64-256); fwd90_stage_chunk finds each "
              "row's 16-byte chunks\n", failures ? "FAIL" : "PASS");
  return failures != 0;
}
CPP
g++ -std=c++17 -O1 -g -w -fsanitize=address,undefined -I"$tmp" -o "$tmp/check" "$tmp/check.cpp"
"$tmp/check"
