// fp8_cvt_host_check.cpp: templates/ptx.cuh's attn_fp8x4_cvt on the host (its text from
// fp8_cvt_host_check.sh), for every byte value in every position of a word and each of
// e4m3/e5m2 into bf16/f16, against the FP8 formats' definitions. The multiplies and the
// f16 -> bf16 conversion the template does in PTX are given exact host versions here:
// FP8 values and their products by 2^8 or 2^120 are exact in f32, f16 and bf16.
#include <cmath>
#include <cstdio>
#include <cstring>

#include "cuda_bits.h"
#include "f16_bits.h"

static unsigned attn_bf16x2_times_2p120(unsigned f) {
  unsigned r = 0;
  for (int k = 0; k < 2; ++k) {
    const float x = __uint_as_float(((f >> (16 * k)) & 0xffff) << 16) * std::ldexp(1.f, 120) + -0.f;
    r |= (__float_as_uint(x) >> 16) << (16 * k);
  }
  return r;
}
static unsigned attn_f16x2_times_2p8(unsigned f) {
  unsigned r = 0;
  for (int k = 0; k < 2; ++k) r |= (unsigned)f16_rn((float)f16_value((f >> (16 * k)) & 0xffff) * 256.f) << (16 * k);
  return r;
}
static unsigned attn_f16x2_to_bf16x2(unsigned h) {
  unsigned r = 0;
  for (int k = 0; k < 2; ++k) r |= (__float_as_uint((float)f16_value((h >> (16 * k)) & 0xffff)) >> 16) << (16 * k);
  return r;
}
#include CVT_TEXT

static double fp8_value(unsigned b, bool e4m3) {
  const double s = (b & 0x80) ? -1 : 1;
  if (e4m3) {
    const int e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    return e == 0 ? s * std::ldexp(m, -9) : s * std::ldexp(8 + m, e - 10);
  }
  const int e = (b >> 2) & 31, m = b & 3;
  if (e == 31) return m ? NAN : s * INFINITY;
  return e == 0 ? s * std::ldexp(m, -16) : s * std::ldexp(4 + m, e - 17);
}

static int failures;
template <bool E4M3, bool BF16> static void check(const char *what) {
  int checked = 0;
  for (unsigned b = 0; b < 256; ++b)
    for (int pos = 0; pos < 4; ++pos) {
      const unsigned other = 0x3a5c91e7u * (b + 1) + 0x1234567u * pos; // the other bytes vary
      const unsigned x = (other & ~(0xffu << (8 * pos))) | (b << (8 * pos));
      unsigned lo, hi;
      attn_fp8x4_cvt<E4M3, BF16>(x, lo, hi);
      for (int q = 0; q < 4; ++q) {
        const unsigned byte = (x >> (8 * q)) & 0xff;
        const unsigned short g = (unsigned short)(((q < 2 ? lo : hi) >> (16 * (q & 1))) & 0xffff);
        const double got = BF16 ? (double)__uint_as_float((unsigned)g << 16) : f16_value(g);
        const double want = fp8_value(byte, E4M3);
        const bool ok = std::isnan(want) ? std::isnan(got)
                                         : got == want && std::signbit(got) == std::signbit(want);
        checked++;
        if (!ok && failures++ < 8)
          std::printf("FAIL: %s byte %#04x (position %d): %g (bits %#06x), want %g\n", what, byte, q,
                      got, g, want);
      }
    }
  std::printf("  %s: %d values\n", what, checked);
}

int main() {
  check<true, true>("e4m3 -> bf16");
  check<true, false>("e4m3 -> f16");
  check<false, true>("e5m2 -> bf16");
  check<false, false>("e5m2 -> f16");
  std::printf("%s: attn_fp8x4_cvt, every FP8 byte in every position, both 16-bit types\n",
              failures ? "FAIL" : "PASS");
  return failures != 0;
}
