// fp8_host_check.cpp: the kernels' f32 -> e4m3 / e5m2 rounding (templates/
// common.cuh, attn_f32_to_fp8: what FP8 outputs store and what fwd_sm80 and
// the decode kernel round P with), compiled for the host from the template's
// own text (fp8_host_check.sh extracts it), against the CPU reference's
// dtype_e4m3_bits / dtype_e5m2_bits on a stride through every f32 bit pattern
// and on the values next to each FP8 rounding boundary.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

extern "C" {
uint8_t dtype_e4m3_bits(double x);
uint8_t dtype_e5m2_bits(double x);
}

#define __device__
#define __forceinline__ inline
#include "cuda_bits.h"
#include FP8_TEXT

static long checked, bad;
static void check(float x) {
  const unsigned char g4 = attn_f32_to_e4m3(x), r4 = dtype_e4m3_bits((double)x);
  const unsigned char g5 = attn_f32_to_e5m2(x), r5 = dtype_e5m2_bits((double)x);
  ++checked;
  if (g4 != r4 || g5 != r5) {
    if (bad++ < 10)
      std::printf("FAIL: %a (0x%08x): e4m3 %02x, reference %02x; e5m2 %02x, reference %02x\n", x,
                  __float_as_uint(x), g4, r4, g5, r5);
  }
}

int main() {
  for (unsigned long long u = 0; u <= 0xffffffffull; u += 4099) check(__uint_as_float((unsigned)u));
  // Each FP8 value's neighbours and the midpoints between them, both signs.
  for (int b = 0; b < 256; ++b)
    for (int s = -2; s <= 2; ++s) {
      const float e4 = __uint_as_float(__float_as_uint((float)(b < 128 ? 1 : -1) *
                                                       std::ldexp(1.0f + (b & 7) / 8.0f, (b >> 3) % 16 - 7)) +
                                       s);
      check(e4);
    }
  for (float m = 0; m < 500.0f; m += 1.0f / 1024) check(m), check(-m);
  std::printf("%s: fp8 rounding, %ld values, %ld differ\n", bad ? "FAIL" : "PASS", checked, bad);
  return bad != 0;
}
