/* tanh_poly_host_check.cpp: templates/common.cuh's attn_tanh_poly (tanh on the FMA pipe for
 * |x| <= 1, fwd_sm90's ATTN_TANH_POLY), compiled for the host from the template's own text
 * (tanh_poly_host_check.sh extracts it), against tanh in double: relative error at most 8.5e-5
 * over [-1, 1] (every f32 near 0 and a dense sweep), odd (y(-x) = -y(x) bit for bit), 0 at 0,
 * monotone, |y| below tanh(1) + its error, NaN for NaN. tanh.approx, which it replaces, is
 * within 2^-10.9 = 4.9e-4. */
#include <cmath>
#include <cstdint>
#include <cstdio>

#include "cuda_bits.h"
#include TANH_TEXT

int main() {
  long checked = 0, bad = 0;
  double worst = 0, worst_x = 0;
  auto check = [&](float x) {
    const float y = attn_tanh_poly(x);
    const double want = std::tanh((double)x);
    const double e = x == 0.f ? (y == 0.f ? 0.0 : 1.0) : std::fabs(y / want - 1.0);
    checked++;
    if (!(e <= 8.5e-5)) {
      if (bad++ < 10) printf("FAIL: tanh(%.9g): %.9g, want %.9g (rel err %.3g)\n", x, y, want, e);
    }
    if (attn_tanh_poly(-x) != -y) {
      if (bad++ < 10) printf("FAIL: not odd at %.9g\n", x);
    }
    if (e > worst) worst = e, worst_x = x;
  };
  for (float x = -1.f; x <= 1.f; x += 1.f / (1 << 20)) check(x);
  for (float x = 1e-30f; x < 1e-3f; x *= 1.001f) check(x), check(-x);
  check(1.f);
  check(-1.f);
  float prev = attn_tanh_poly(-1.f);
  long nonmono = 0;
  for (float x = -1.f; x <= 1.f; x += 1.f / (1 << 16)) {
    const float y = attn_tanh_poly(x);
    if (y < prev) nonmono++;
    prev = y;
  }
  if (nonmono) {
    bad++;
    printf("FAIL: %ld decreasing steps\n", nonmono);
  }
  if (!(std::fabs(attn_tanh_poly(1.f)) <= std::tanh(1.0) * (1 + 8.5e-5))) {
    bad++;
    printf("FAIL: |tanh(1)| too large: %.9g\n", attn_tanh_poly(1.f));
  }
  if (!std::isnan(attn_tanh_poly(NAN))) {
    bad++;
    printf("FAIL: tanh(NaN) is not NaN\n");
  }
  if (bad) {
    printf("attn_tanh_poly: %ld of %ld checks failed\n", bad, checked);
    return 1;
  }
  printf("PASS: attn_tanh_poly: %ld points, worst relative error %.3g at %.9g\n", checked, worst,
         worst_x);
  return 0;
}
