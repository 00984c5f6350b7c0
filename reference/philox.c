/*
 * philox.c: dropout's generator on the host. The algorithm lives in
 * templates/philox.cuh, which the kernels paste too, so the CPU reference
 * and the GPU draw bit-identical masks; this file only adapts it to the
 * compiler's types (see attnc.h for the bit layout).
 */
#include "ref.h"

#include "../templates/philox.cuh"

void philox_4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                    uint32_t out[4]) {
  unsigned c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  attn_philox4x32_10(c, key[0], key[1]);
  for (int k = 0; k < 4; k++)
    out[k] = c[k];
}

uint32_t philox_dropout_byte(uint64_t seed, uint64_t offset, int64_t b,
                             int64_t h, int64_t i, int64_t j, int64_t H,
                             int64_t Sq) {
  unsigned w[4];
  /* The group's base row has bits 0 and 3 clear; (i, j)'s word is the one
   * its row half (bit 3 of i) and column half (bit 3 of j) select, its
   * byte the one bits 0 select. */
  uint64_t row_base = ((uint64_t)b * (uint64_t)H + (uint64_t)h) * (uint64_t)Sq +
                      ((uint64_t)i & ~(uint64_t)9);
  attn_philox_dropout_words(seed, offset, row_base, j, w);
  uint32_t word = w[2 * (((uint64_t)i >> 3) & 1) + (((uint64_t)j >> 3) & 1)];
  return (word >> (8 * (2 * ((uint64_t)i & 1) + ((uint64_t)j & 1)))) & 0xffu;
}

uint32_t philox_keep_threshold(double rate) {
  /* The kernels take the rate as an f32 and so does this. */
  return attn_dropout_keep_from((float)rate);
}

double philox_kept_scale(uint32_t keep_from) {
  return keep_from >= 256 ? 0.0 : 256.0 / (256.0 - keep_from);
}
