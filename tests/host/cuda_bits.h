// cuda_bits.h: CUDA's bit-cast and byte-permute intrinsics for the host checks
// that compile template text for the host (memcpy: exact, no aliasing questions).
#ifndef ATTN_CUDA_BITS_H
#define ATTN_CUDA_BITS_H
#include <cstring>
[[maybe_unused]] static unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, 4);
  return u;
}
[[maybe_unused]] static float __uint_as_float(unsigned u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}
[[maybe_unused]] static float __int_as_float(int i) {
  float x;
  std::memcpy(&x, &i, 4);
  return x;
}
// PRMT: byte k of the result is byte (s >> 4k) & 7 of {y, x} (x the low word).
[[maybe_unused]] static unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const unsigned long long v = x | ((unsigned long long)y << 32);
  unsigned r = 0;
  for (int k = 0; k < 4; ++k) r |= (unsigned)((v >> (8 * ((s >> (4 * k)) & 7))) & 0xff) << (8 * k);
  return r;
}
#endif
