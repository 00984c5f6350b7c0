/*
 * philox.cuh: Philox-4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random
 * numbers: as easy as 1, 2, 3", SC'11), the counter-based generator behind
 * dropout. The same text compiles as C17 (compiler/philox.c includes it for
 * the CPU reference) and as CUDA (pasted into the NVRTC unit), so the host
 * and the device draw the same bits: plain 32-bit unsigned arithmetic, no
 * headers, no types beyond unsigned and unsigned long long.
 *
 * Dropout's bits for element (b, h, i, j), H query heads and Sq queries:
 *   key     = { lo32(seed), hi32(seed) }
 *   counter = { ((j >> 4) << 3) | (j & 7), lo32((b * H + h) * Sq + (i & ~8)),
 *               lo32(offset), hi32(offset) }
 *   bits    = philox(counter, key)[2 * ((i >> 3) & 1) + ((j >> 3) & 1)]
 * kept iff bits >= ceil(rate * 2^32). One call serves the 2x2 group
 * (i, j), (i, j + 8), (i + 8, j), (i + 8, j + 8) with bit 3 of i and j
 * clear: the four elements one thread holds in an mma/wgmma accumulator
 * fragment (rows g and g + 8, columns in 8-blocks n and n + 1), so each
 * thread runs one Philox call per four of its elements.
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

/* The four words of the group at (i, j), (i & 8) == 0 and (j & 8) == 0:
 * out[0] is (i, j)'s, out[1] (i, j + 8)'s, out[2] (i + 8, j)'s and out[3]
 * (i + 8, j + 8)'s. `row_base` is (b * H + h) * Sq + i; j's bit 3 is
 * ignored. The counter's word 0 is computed in 64 bits and truncated, like
 * row_base. */
ATTN_PHILOX_FN void attn_dropout_bits4(unsigned long long seed, unsigned long long offset,
                                       unsigned long long row_base, long long j,
                                       unsigned out[4]) {
  const unsigned long long uj = (unsigned long long)j;
  out[0] = (unsigned)(((uj >> 4) << 3) | (uj & 7));
  out[1] = (unsigned)row_base;
  out[2] = (unsigned)offset;
  out[3] = (unsigned)(offset >> 32);
  attn_philox4x32_10(out, (unsigned)seed, (unsigned)(seed >> 32));
}

#endif
