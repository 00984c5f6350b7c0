/* sha256_x86.c: SHA-256's block function on the x86 SHA extensions
 * (sha256rnds2, sha256msg1/2), about 8x the portable loop in sha256.c. A warm
 * module load hashed its emitted source (a cache key, 100-250 KB) and the
 * cached entry (a checksum) until session 19: with the portable loop that was
 * two thirds of the load's host time (now a key text of a few KB, and the
 * checksum is CRC-32C). sha256.c picks this path when cpuid says the CPU has
 * SHA, SSSE3 and SSE4.1; the unit tests compare both on every length.
 *
 * Register layout (Intel's): the state is two registers, ABEF (A in the
 * highest dword, F in the lowest) and CDGH. sha256rnds2(cdgh, abef, wk) runs
 * two rounds with wk's low two dwords and returns the new ABEF; the old ABEF
 * is then the new CDGH, so the two registers swap roles every two rounds. */
#include "rt.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>

bool sha256_x86_available(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  bool ssse3 = c & (1u << 9), sse41 = c & (1u << 19);
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return ssse3 && sse41 && (b & (1u << 29)); /* EBX bit 29: SHA */
}

__attribute__((target("sha,sse4.1,ssse3"))) void sha256_x86_blocks(uint32_t h[8],
                                                                   const unsigned char *p,
                                                                   size_t nblocks,
                                                                   const uint32_t k[64]) {
  /* The message words are big-endian: swap the bytes of each dword. */
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  /* h[0..3] = A B C D and h[4..7] = E F G H (lowest dword first) into ABEF, CDGH. */
  __m128i abcd = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[0]), 0xB1); /* B A D C */
  __m128i efgh = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&h[4]), 0x1B); /* H G F E */
  __m128i abef = _mm_alignr_epi8(abcd, efgh, 8);    /* F E B A */
  __m128i cdgh = _mm_blend_epi16(efgh, abcd, 0xF0); /* H G D C */
  for (; nblocks > 0; nblocks--, p += 64) {
    const __m128i abef0 = abef, cdgh0 = cdgh;
    __m128i w[4]; /* the last four groups of four message words */
    for (int g = 0; g < 16; g++) {
      __m128i m;
      if (g < 4) {
        m = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), bswap);
      } else { /* W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four at a time */
        __m128i t = _mm_sha256msg1_epu32(w[g % 4], w[(g + 1) % 4]);
        t = _mm_add_epi32(t, _mm_alignr_epi8(w[(g + 3) % 4], w[(g + 2) % 4], 4));
        m = _mm_sha256msg2_epu32(t, w[(g + 3) % 4]);
      }
      w[g % 4] = m;
      __m128i wk = _mm_add_epi32(m, _mm_loadu_si128((const __m128i *)&k[4 * g]));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk); /* rounds 4g, 4g+1: the new ABEF */
      wk = _mm_shuffle_epi32(wk, 0x0E);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, wk); /* rounds 4g+2, 4g+3 */
    }
    abef = _mm_add_epi32(abef, abef0);
    cdgh = _mm_add_epi32(cdgh, cdgh0);
  }
  __m128i t = _mm_shuffle_epi32(abef, 0x1B); /* A B E F */
  cdgh = _mm_shuffle_epi32(cdgh, 0xB1);      /* G H C D */
  _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(t, cdgh, 0xF0)); /* A B C D */
  _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(cdgh, t, 8));    /* E F G H */
}

#else

bool sha256_x86_available(void) { return false; }

void sha256_x86_blocks(uint32_t h[8], const unsigned char *p, size_t nblocks,
                       const uint32_t k[64]) {
  (void)h, (void)p, (void)nblocks, (void)k;
}

#endif
