/* sha256.c: SHA-256 as FIPS 180-4 specifies it, written for clarity: the
 * cache keys (a module's key text, a few kilobytes since session 19; the
 * entries' checksum is CRC-32C, crc32c.c).
 * Whole blocks go to sha256_x86.c's SHA-extension loop where the CPU has
 * one (checked once per process), else to the portable loop here. */
#include <string.h>

#include "rt.h"

static const uint32_t sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static uint32_t sha256_rotr(uint32_t x, int n) {
  return (x >> n) | (x << (32 - n));
}

/* One 64-byte block into the state (FIPS 180-4, 6.2.2). */
static void sha256_block(uint32_t h[8], const unsigned char *p) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++)
    w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 |
           (uint32_t)p[4 * t + 2] << 8 | (uint32_t)p[4 * t + 3];
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = sha256_rotr(w[t - 15], 7) ^ sha256_rotr(w[t - 15], 18) ^
                  (w[t - 15] >> 3);
    uint32_t s1 = sha256_rotr(w[t - 2], 17) ^ sha256_rotr(w[t - 2], 19) ^
                  (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
  uint32_t e = h[4], f = h[5], g = h[6], hh = h[7];
  for (int t = 0; t < 64; t++) {
    uint32_t S1 = sha256_rotr(e, 6) ^ sha256_rotr(e, 11) ^ sha256_rotr(e, 25);
    uint32_t ch = (e & f) ^ (~e & g);
    uint32_t t1 = hh + S1 + ch + sha256_k[t] + w[t];
    uint32_t S0 = sha256_rotr(a, 2) ^ sha256_rotr(a, 13) ^ sha256_rotr(a, 22);
    uint32_t maj = (a & b) ^ (a & c) ^ (b & c);
    uint32_t t2 = S0 + maj;
    hh = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a;
  h[1] += b;
  h[2] += c;
  h[3] += d;
  h[4] += e;
  h[5] += f;
  h[6] += g;
  h[7] += hh;
}

/* 0: not yet asked, 1: the SHA extensions, 2: portable. A race between
 * threads writes the same answer. */
static int sha256_impl;

void sha256_use_portable(bool portable) { sha256_impl = portable ? 2 : 0; }

static void sha256_blocks(uint32_t h[8], const unsigned char *p, size_t n) {
  if (sha256_impl == 0) sha256_impl = sha256_x86_available() ? 1 : 2;
  if (sha256_impl == 1) {
    sha256_x86_blocks(h, p, n, sha256_k);
    return;
  }
  for (; n > 0; n--, p += 64) sha256_block(h, p);
}

void sha256_init(Sha256 *s) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372,
                                 0xa54ff53a, 0x510e527f, 0x9b05688c,
                                 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, iv, sizeof iv);
  s->nbytes = 0;
  s->nblock = 0;
}

void sha256_update(Sha256 *s, const void *data, size_t len) {
  const unsigned char *p = data;
  if (len == 0) return; /* data may be NULL then, which memcpy may not take */
  s->nbytes += len;
  if (s->nblock > 0) { /* top up the partial block first */
    size_t take = 64 - s->nblock;
    if (take > len) take = len;
    memcpy(s->block + s->nblock, p, take);
    s->nblock += take;
    p += take;
    len -= take;
    if (s->nblock < 64) return;
    sha256_blocks(s->h, s->block, 1);
    s->nblock = 0;
  }
  if (len >= 64) { /* whole blocks straight from the input */
    sha256_blocks(s->h, p, len / 64);
    p += len / 64 * 64;
    len %= 64;
  }
  memcpy(s->block, p, len);
  s->nblock = len;
}

/* Padding: a 1 bit, zeros, then the message length in bits, big-endian,
 * ending on a block boundary. */
void sha256_final(Sha256 *s, unsigned char out[SHA256_BYTES]) {
  uint64_t bits = s->nbytes * 8;
  unsigned char pad[72] = {0x80};
  size_t npad = (s->nblock < 56 ? 56 : 120) - s->nblock;
  for (int i = 0; i < 8; i++)
    pad[npad + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
  sha256_update(s, pad, npad + 8);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (unsigned char)(s->h[i] >> 24);
    out[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
    out[4 * i + 2] = (unsigned char)(s->h[i] >> 8);
    out[4 * i + 3] = (unsigned char)s->h[i];
  }
}

void sha256(const void *data, size_t len, unsigned char out[SHA256_BYTES]) {
  Sha256 s;
  sha256_init(&s);
  sha256_update(&s, data, len);
  sha256_final(&s, out);
}

void sha256_hex(const unsigned char digest[SHA256_BYTES],
                char out[SHA256_HEX]) {
  static const char hex[] = "0123456789abcdef";
  for (int i = 0; i < SHA256_BYTES; i++) {
    out[2 * i] = hex[digest[i] >> 4];
    out[2 * i + 1] = hex[digest[i] & 15];
  }
  out[64] = '\0';
}
