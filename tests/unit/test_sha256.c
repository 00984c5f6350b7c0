/* test_sha256.c: runtime/sha256.c against the FIPS 180-2 example vectors,
 * and chunked updates against one-shot hashing. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

static void hex_of(const void *data, size_t len, char out[SHA256_HEX]) {
  unsigned char d[SHA256_BYTES];
  sha256(data, len, d);
  sha256_hex(d, out);
}

static void expect(const char *msg, const char *want) {
  char got[SHA256_HEX];
  hex_of(msg, strlen(msg), got);
  cr_assert_str_eq(got, want, "sha256(\"%s\")", msg);
}

Test(sha256, empty) {
  expect("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  /* No bytes may come as a NULL pointer (cache entries with an empty log). */
  Sha256 s;
  sha256_init(&s);
  sha256_update(&s, "ab", 2);
  sha256_update(&s, NULL, 0);
  sha256_update(&s, "c", 1);
  unsigned char d[SHA256_BYTES];
  sha256_final(&s, d);
  char got[SHA256_HEX];
  sha256_hex(d, got);
  cr_assert_str_eq(got, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

Test(sha256, abc) {
  expect("abc",
         "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

Test(sha256, two_blocks_448_bits) {
  expect("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

Test(sha256, long_896_bits) {
  expect("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
         "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

Test(sha256, million_a) {
  size_t n = 1000000;
  char *a = malloc(n);
  cr_assert_not_null(a);
  memset(a, 'a', n);
  char got[SHA256_HEX];
  hex_of(a, n, got);
  free(a);
  cr_assert_str_eq(
      got, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* Lengths around the padding boundaries (55, 56, 63, 64 bytes) fed in
 * every chunk size must match the one-shot digest. */
Test(sha256, chunked_updates_match_one_shot) {
  unsigned char buf[200];
  for (int i = 0; i < 200; i++) buf[i] = (unsigned char)(i * 7 + 3);
  size_t lens[] = {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 200};
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    unsigned char want[SHA256_BYTES];
    sha256(buf, lens[li], want);
    for (size_t chunk = 1; chunk <= 70; chunk += 3) {
      Sha256 s;
      sha256_init(&s);
      for (size_t off = 0; off < lens[li]; off += chunk) {
        size_t n = lens[li] - off < chunk ? lens[li] - off : chunk;
        sha256_update(&s, buf + off, n);
      }
      unsigned char got[SHA256_BYTES];
      sha256_final(&s, got);
      cr_assert(memcmp(got, want, SHA256_BYTES) == 0,
                "length %zu in chunks of %zu", lens[li], chunk);
    }
  }
}

Test(sha256, hex_is_lowercase_and_terminated) {
  unsigned char d[SHA256_BYTES];
  for (int i = 0; i < SHA256_BYTES; i++) d[i] = (unsigned char)(0xf0 + (i & 15));
  char h[SHA256_HEX];
  memset(h, 'x', sizeof h);
  sha256_hex(d, h);
  cr_assert_eq(strlen(h), 64);
  cr_assert_eq(strncmp(h, "f0f1f2f3", 8), 0);
}

/* The SHA-extension path (sha256_x86.c, where this CPU has it) and the
 * portable loop agree on every length around the block boundaries, whole
 * and in odd chunks, and the vectors above hold on whichever path ran. */
Test(sha256, both_block_functions_agree) {
  if (!sha256_x86_available()) cr_log_info("no SHA extensions here: the portable loop twice");
  unsigned char buf[1100];
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)(i * 131 + 7);
  for (size_t len = 0; len <= sizeof buf; len += len < 200 ? 1 : 37) {
    unsigned char fast[SHA256_BYTES], slow[SHA256_BYTES], chunked[SHA256_BYTES];
    sha256_use_portable(false);
    sha256(buf, len, fast);
    Sha256 s;
    sha256_init(&s);
    for (size_t off = 0; off < len; off += 13)
      sha256_update(&s, buf + off, len - off < 13 ? len - off : 13);
    sha256_final(&s, chunked);
    sha256_use_portable(true);
    sha256(buf, len, slow);
    sha256_use_portable(false);
    cr_assert(memcmp(fast, slow, SHA256_BYTES) == 0, "length %zu", len);
    cr_assert(memcmp(chunked, slow, SHA256_BYTES) == 0, "length %zu in chunks", len);
  }
}
