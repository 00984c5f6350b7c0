// f16_bits.h: f16 values for the host checks that compile template text for the host: an
// f16's value from its bits, and f32 to f16 bits rounded to nearest even (cvt.rn.f16.f32),
// subnormals, signed zeros, infinities, overflow and NaN included. Exact values convert exactly.
#ifndef ATTN_F16_BITS_H
#define ATTN_F16_BITS_H
#include <algorithm>
#include <cmath>

#include "cuda_bits.h"

[[maybe_unused]] static double f16_value(unsigned short h) {
  const unsigned e = (h >> 10) & 31, m = h & 1023;
  const double s = h & 0x8000 ? -1.0 : 1.0;
  if (e == 31) return m ? NAN : s * INFINITY;
  return s * (e ? std::ldexp(1024.0 + m, (int)e - 25) : std::ldexp((double)m, -24));
}
[[maybe_unused]] static unsigned short f16_rn(float f) {
  const unsigned short sign = (unsigned short)((__float_as_uint(f) >> 16) & 0x8000u);
  if (std::isnan(f)) return (unsigned short)(sign | 0x7e00u);
  const double a = std::fabs((double)f);
  if (a >= 65520.0) return (unsigned short)(sign | 0x7c00u); // rounds past 65504
  // a on the grid of its f16 ulp (at least 2^-24, the subnormals'), rounded to even
  int ex;
  std::frexp(a, &ex); // a in [2^(ex-1), 2^ex)
  const int ulp_exp = std::max(ex - 11, -24); // f16: 11 significant bits
  const double v = std::ldexp(std::nearbyint(std::ldexp(a, -ulp_exp)), ulp_exp);
  if (v == 0) return sign;
  int e2;
  std::frexp(v, &e2);
  if (e2 - 1 < -14) return (unsigned short)(sign | (unsigned)std::ldexp(v, 24)); // subnormal
  const unsigned mant = (unsigned)std::ldexp(v, 11 - e2) - 1024u;
  return (unsigned short)(sign | ((unsigned)(e2 - 1 + 15) << 10) | mant);
}
#endif
