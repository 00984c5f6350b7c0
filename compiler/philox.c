/*
 * philox.c: dropout's generator on the host. The algorithm lives in
 * templates/philox.cuh, which the kernels paste too, so the CPU reference
 * and the GPU draw bit-identical masks; this file only adapts it to the
 * compiler's types (see attnc.h for the bit layout).
 */
#include "attnc.h"

#include <math.h>

#include "../templates/philox.cuh"

void philox_4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                    uint32_t out[4]) {
  unsigned c[4] = {ctr[0], ctr[1], ctr[2], ctr[3]};
  attn_philox4x32_10(c, key[0], key[1]);
  for (int k = 0; k < 4; k++)
    out[k] = c[k];
}

uint32_t philox_dropout_bits(uint64_t seed, uint64_t offset, int64_t b,
                             int64_t h, int64_t i, int64_t j, int64_t H,
                             int64_t Sq) {
  unsigned w[4];
  /* The group's base row has bit 3 clear; (i, j)'s word is the one its
   * row half (bit 3 of i) and column half (bit 3 of j) select. */
  uint64_t row_base = ((uint64_t)b * (uint64_t)H + (uint64_t)h) * (uint64_t)Sq +
                      ((uint64_t)i & ~(uint64_t)8);
  attn_dropout_bits4(seed, offset, row_base, j, w);
  return w[2 * (((uint64_t)i >> 3) & 1) + (((uint64_t)j >> 3) & 1)];
}

uint64_t philox_keep_threshold(double rate) {
  if (!(rate > 0)) /* NaN keeps everything, like rate 0 */
    return 0;
  if (rate >= 1)
    return UINT64_C(1) << 32;
  /* rate is an f32, so rate * 2^32 is exact in double. */
  return (uint64_t)ceil(rate * 4294967296.0);
}
