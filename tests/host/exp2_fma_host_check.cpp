/* exp2_fma_host_check.cpp: templates/ptx.cuh's attn_exp2_fma (2^x on the FMA pipe, fwd_sm90's
 * ATTN_EXP2_FMA exponentials), compiled for the host from the template's own text
 * (exp2_fma_host_check.sh extracts it), against exp2 in double: relative error at most 3e-6
 * for x in [-126, 8] (a dense sweep, finer around the integers and the half-integers where the
 * rounding to the nearest integer switches), exactly 2^x at integers, exactly 0 below -126 and at
 * -inf, NaN for NaN, and monotone
 * (P's order across the keys is what the softmax keeps). */
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "cuda_bits.h"
#include EXP2_TEXT

int main() {
  long checked = 0, bad = 0;
  double worst = 0, worst_x = 0;
  auto check = [&](float x) {
    const float y = attn_exp2_fma(x);
    const double want = std::exp2((double)x);
    const double e = std::fabs(y / want - 1.0);
    checked++;
    if (!(e <= 3e-6)) {
      if (bad++ < 10) printf("FAIL: 2^%.9g: %.9g, want %.9g (rel err %.3g)\n", x, y, want, e);
    }
    if (e > worst) worst = e, worst_x = x;
  };
  /* A dense sweep over the softmax's range, steps of 2^-20 within 1/64 of each integer in
   * [-8, 8] (where the rounding to the nearest integer switches), and every f32 next to the
   * half-integers there (ties). */
  for (float x = -126.f; x <= 8.f; x += 1.f / 4096) check(x);
  for (int j = -8; j <= 8; j++) {
    for (int k = -(1 << 14); k <= 1 << 14; k++) check((float)j + (float)k * 0x1p-20f);
    float x = (float)j + 0.5f;
    for (int k = 0; k < 64; k++) x = std::nextafter(x, -1e9f);
    for (int k = 0; k < 128; k++, x = std::nextafter(x, 1e9f)) check(x);
  }
  for (int j = -126; j <= 8; j++)
    if (attn_exp2_fma((float)j) != std::ldexp(1.f, j)) {
      if (bad++ < 10) printf("FAIL: 2^%d is not exact: %.9g\n", j, attn_exp2_fma((float)j));
    }
  const float zeros[] = {-126.5f, -127.f, -200.f, -1e30f, -INFINITY};
  for (float x : zeros)
    if (attn_exp2_fma(x) != 0.f || std::signbit(attn_exp2_fma(x))) {
      if (bad++ < 10) printf("FAIL: 2^%g is %g, want +0\n", x, attn_exp2_fma(x));
    }
  if (!std::isnan(attn_exp2_fma(NAN)) || !std::isnan(attn_exp2_fma(-NAN))) {
    bad++;
    printf("FAIL: 2^NaN is not NaN\n");
  }
  float prev = 0.f;
  long nonmono = 0;
  for (float x = -126.f; x <= 8.f; x += 1.f / 1024) {
    const float y = attn_exp2_fma(x);
    if (y < prev) nonmono++;
    prev = y;
  }
  if (nonmono) {
    bad++;
    printf("FAIL: %ld decreasing steps\n", nonmono);
  }
  printf("%s: attn_exp2_fma, %ld values, worst relative error %.3g at %.9g, %ld failures\n",
         bad ? "FAIL" : "PASS", checked, worst, worst_x, bad);
  return bad ? 1 : 0;
}
