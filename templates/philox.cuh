/*
 * philox.cuh: Philox-4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random
 * numbers: as easy as 1, 2, 3", SC'11), the counter-based generator behind
 * dropout. The same text compiles as C17 (reference/philox.c includes it for
 * the CPU reference) and as CUDA (pasted into the NVRTC unit), so the host
 * and the device draw the same bits: plain 32-bit unsigned arithmetic, no
 * headers, no types beyond unsigned and unsigned long long.
 *
 * Dropout's byte for element (b, h, i, j), H query heads and Sq queries:
 *   key     = { lo32(seed), hi32(seed) }
 *   counter = { ((j >> 4) << 2) | ((j >> 1) & 3),
 *               lo32((b * H + h) * Sq + (i & ~9)), lo32(offset), hi32(offset) }
 *   word    = philox(counter, key)[2 * ((i >> 3) & 1) + ((j >> 3) & 1)]
 *   byte    = (word >> 8 * (2 * (i & 1) + (j & 1))) & 0xff
 * kept iff byte >= the rate in 256ths (docs/language.md). One call serves
 * the 16 elements (i + di, j + dj), di and dj in {0, 1, 8, 9}, of the
 * group whose base (i, j) has bits 0 and 3 clear. In every template's
 * accumulator fragments a thread holds 8 of them (rows g and g + 8 and a
 * pair of columns, or the transpose) and lane ^ 4 the other 8, so two
 * lanes draw two groups and swap halves: one Philox call per 16 of a
 * thread's elements (templates/hooks.cuh, attn_dropout_pair).
 * Defines nothing else at global scope; guarded so a unit can paste it once
 * per graph.
 */
#ifndef ATTN_PHILOX_CUH
#define ATTN_PHILOX_CUH

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTN_PHILOX_FN static __device__ __forceinline__
#else
#define ATTN_PHILOX_FN static inline
#endif

/* The round multipliers and the Weyl key increments of Philox-4x32. */
#define ATTN_PHILOX_M0 0xD2511F53u
#define ATTN_PHILOX_M1 0xCD9E8D57u
#define ATTN_PHILOX_W0 0x9E3779B9u
#define ATTN_PHILOX_W1 0xBB67AE85u

ATTN_PHILOX_FN unsigned attn_philox_mulhi(unsigned a, unsigned b) {
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  return __umulhi(a, b);
#else
  return (unsigned)(((unsigned long long)a * b) >> 32);
#endif
}

/* Ten rounds on c (in place) under key (k0, k1). */
ATTN_PHILOX_FN void attn_philox4x32_10(unsigned c[4], unsigned k0, unsigned k1) {
  for (int r = 0; r < 10; r++) {
    unsigned hi0 = attn_philox_mulhi(ATTN_PHILOX_M0, c[0]);
    unsigned lo0 = ATTN_PHILOX_M0 * c[0];
    unsigned hi1 = attn_philox_mulhi(ATTN_PHILOX_M1, c[2]);
    unsigned lo1 = ATTN_PHILOX_M1 * c[2];
    unsigned n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
    k0 += ATTN_PHILOX_W0;
    k1 += ATTN_PHILOX_W1;
  }
}

/* The four words of the group at (i, j), bits 0 and 3 of both clear:
 * word 2 (di >> 3) + (dj >> 3) holds element (i + di, j + dj) in its byte
 * 2 (di & 1) + (dj & 1). `row_base` is (b * H + h) * Sq + i; j's bits 0
 * and 3 are ignored. The counter's word 0 is computed in 64 bits and
 * truncated, like row_base. */
ATTN_PHILOX_FN void attn_philox_dropout_words(unsigned long long seed, unsigned long long offset,
                                       unsigned long long row_base, long long j,
                                       unsigned out[4]) {
  const unsigned long long uj = (unsigned long long)j;
  out[0] = (unsigned)(((uj >> 4) << 2) | ((uj >> 1) & 3));
  out[1] = (unsigned)row_base;
  out[2] = (unsigned)offset;
  out[3] = (unsigned)(offset >> 32);
  attn_philox4x32_10(out, (unsigned)seed, (unsigned)(seed >> 32));
}

/* Bytes at or above this are kept: the rate in 256ths, rounded to the
 * nearest and at least 1 for a positive rate; 0 keeps all (rate 0 or
 * NaN), 256 none (rate >= 1). */
ATTN_PHILOX_FN unsigned attn_dropout_keep_from(float rate) {
  if (!(rate > 0.f))
    return 0u;
  if (rate >= 1.f)
    return 256u;
  /* rate * 256 is exact, so host and device (fused or not) round alike. */
  float t = rate * 256.f + 0.5f;
  unsigned k = (unsigned)t;
  return k < 1u ? 1u : k > 255u ? 255u : k;
}

#endif
