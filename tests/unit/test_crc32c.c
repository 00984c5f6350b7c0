/* test_crc32c.c: the cache entries' checksum (runtime/crc32c.c) against the
 * standard check value, the crc32 instruction's path against the table's on
 * every length up to 300 and every start alignment, and continuation
 * (the CRC of a then b from a's). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

Test(crc32c, check_value) {
  /* CRC-32C's catalogue check value, and the empty message. */
  for (int portable = 0; portable < 2; portable++) {
    crc32c_use_portable(portable);
    cr_assert_eq(crc32c(0, "123456789", 9), 0xE3069283u, "portable %d", portable);
    cr_assert_eq(crc32c(0, "", 0), 0u);
  }
  crc32c_use_portable(false);
}

Test(crc32c, both_paths_agree_and_continue) {
  unsigned char buf[320];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 131 + 7);
  for (size_t off = 0; off < 8; off++)
    for (size_t n = 0; n + off <= 300; n++) {
      crc32c_use_portable(true);
      const uint32_t table = crc32c(0, buf + off, n);
      crc32c_use_portable(false);
      const uint32_t fast = crc32c(0, buf + off, n);
      cr_assert_eq(fast, table, "offset %zu length %zu", off, n);
      const size_t half = n / 3;
      cr_assert_eq(crc32c(crc32c(0, buf + off, half), buf + off + half, n - half), fast,
                   "continued at %zu of %zu", half, n);
    }
}
