/* crc32c.c: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the cache
 * entries' checksum. A warm module load reads its entry (cubin, log and
 * meta: about 110 KB for examples/sdpa.attn) and checked it with SHA-256
 * until session 19, 0.1 ms of a 1 ms load at 1.07 GB/s on the dev machine;
 * the checksum guards against torn or rotted files, not against other
 * users (the cache's ownership checks do that), so a CRC serves. On x86
 * with SSE 4.2 the crc32 instruction takes 8 bytes at a time; elsewhere a
 * byte table. crc32c_use_portable(true) keeps to the table (the unit tests
 * compare both on every length). */
#include "rt.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

static bool crc32c_x86_available(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 20)); /* ECX bit 20: SSE4.2 */
}

__attribute__((target("sse4.2"))) static uint32_t crc32c_x86(uint32_t crc, const unsigned char *p,
                                                             size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    __builtin_memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
  }
  uint32_t c32 = (uint32_t)c;
  for (; n > 0; n--, p++) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}
#else
static bool crc32c_x86_available(void) { return false; }
static uint32_t crc32c_x86(uint32_t crc, const unsigned char *p, size_t n) {
  (void)p, (void)n;
  return crc;
}
#endif

static uint32_t crc32c_table[256];

static void crc32c_make_table(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    crc32c_table[i] = c;
  }
}

/* 0: not yet asked, 1: the crc32 instruction, 2: the table. A race
 * between threads writes the same answer (the table too: the same bytes). */
static int crc32c_impl;

void crc32c_use_portable(bool portable) { crc32c_impl = portable ? 2 : 0; }

uint32_t crc32c(uint32_t crc, const void *data, size_t len) {
  const unsigned char *p = data;
  if (crc32c_impl == 0) crc32c_impl = crc32c_x86_available() ? 1 : 2;
  crc = ~crc;
  if (crc32c_impl == 1) {
    crc = crc32c_x86(crc, p, len);
  } else {
    if (crc32c_table[1] == 0) crc32c_make_table();
    for (; len > 0; len--, p++) crc = crc32c_table[(crc ^ *p) & 0xff] ^ (crc >> 8);
  }
  return ~crc;
}
