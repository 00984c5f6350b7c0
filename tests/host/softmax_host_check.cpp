// softmax_host_check.cpp: templates/softmax.cuh's online softmax tiles
// (attn_softmax_tile and attn_softmax_tile_qk, with and without STALE, and
// with some or all exponentials through ptx.cuh's attn_exp2_fma),
// compiled for the host and run as the forward templates run them, tile by
// tile with O rescaled by each row's alpha, against a float64 softmax of
// the whole row. A "quad" of one lane holds whole rows (the shuffles return
// the lane's own value), so this checks the arithmetic, not the lane map,
// which the two functions share with the code before them. Cases: factors
// positive, negative, 0 and tiny; masked elements, fully masked rows. Run
// by softmax_host_check.sh; no GPU needed.
#include <math.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#define __device__
#define __forceinline__ inline
#include "cuda_bits.h"
static float __shfl_xor_sync(unsigned, float v, int) { return v; }
static float attn_exp2(float x) { return std::exp2(x); }
#include EXP2_FMA_TEXT

#include SOFTMAX_TEXT

namespace {
/* 8-key blocks a tile (16 keys a row a tile at 8): the .sh also builds 11
 * and 22 (fwd_sm90's key tiles of 176), where the rows' maxima reduce as
 * unbalanced trees (attn_row_tree). */
#ifndef SOFTMAX_N
#define SOFTMAX_N 8
#endif
constexpr int N = SOFTMAX_N;
constexpr int T = 7;     /* tiles a row */
constexpr int DV = 4;    /* O's columns */
int failures = 0;

struct Row {
  double acc[T * 2 * N];
  bool keep[T * 2 * N];
  double v[T * 2 * N][DV];
};

/* float64 softmax of c acc over the kept keys: O and lse (-inf, O = 0 for
 * a row that keeps nothing). */
static void reference(const Row &r, double c, double o[DV], double &lse) {
  double m = -INFINITY;
  for (int j = 0; j < T * 2 * N; j++)
    if (r.keep[j]) m = std::fmax(m, c * (double)(float)r.acc[j]);
  for (int d = 0; d < DV; d++) o[d] = 0;
  if (m == -INFINITY) {
    lse = -INFINITY;
    return;
  }
  double l = 0;
  for (int j = 0; j < T * 2 * N; j++) {
    if (!r.keep[j]) continue;
    const double p = std::exp(c * (double)(float)r.acc[j] - m);
    l += p;
    for (int d = 0; d < DV; d++) o[d] += p * r.v[j][d];
  }
  for (int d = 0; d < DV; d++) o[d] /= l;
  lse = m + std::log(l);
}

/* The kernel's way: QK selects attn_softmax_tile_qk (the tile holds acc,
 * masked elements at the fill) or attn_softmax_tile (c acc, -inf). */
/* PS: the exponentials carry P's scale 448 (fwd_sm90's FP8 P: PLOG, the
 * sums divided by it at the end). */
/* QS: the rows' acc carry 2^9 and 2^-5 (fwd_sm90's kv8 under a bf16 q scales Q's rows apart,
 * fwd90_q_to_f16) and their factors 2^-9 and 2^5. */
/* F: EXP2_FMA, the 8-key blocks of every four whose exponentials take
 * attn_exp2_fma. */
template <bool QK, bool STALE, bool PS = false, bool QS = false, int F = 0>
static void online(const Row (&rows)[2], float c, float o[2][DV], float lse[2], int &rescales,
                   float &p_max) {
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.f, 0.f};
  for (int r = 0; r < 2; r++)
    for (int d = 0; d < DV; d++) o[r][d] = 0.f;
  /* fwd_sm90's per-tile setup (fwd90_fold) */
  const float up[2] = {QS ? 512.f : 1.f, QS ? 1.f / 32.f : 1.f};
  const bool neg = c < 0.f;
  float sc[2], sc_log2[2];
  for (int r = 0; r < 2; r++) {
    sc[r] = c / up[r];
    sc[r] = sc[r] == 0.f ? (neg ? -1.17549435e-38f : 1.17549435e-38f) : sc[r];
    sc_log2[r] = sc[r] * 1.4426950408889634f;
  }
  const float fill = QK && neg ? INFINITY : -INFINITY;
  for (int t = 0; t < T; t++) {
    float s[N][4]; /* frag(n, 2r + x): row r, key 16t + 2n + x */
    for (int n = 0; n < N; n++)
      for (int r = 0; r < 2; r++)
        for (int x = 0; x < 2; x++) {
          const int j = t * 2 * N + 2 * n + x;
          const float a = (float)rows[r].acc[j];
          s[n][2 * r + x] = !rows[r].keep[j] ? fill : QK ? a * up[r] : a * c;
        }
    float alpha[2];
    const float max_before[2] = {row_max[0], row_max[1]};
    auto frag = [&](int n, int k) -> float & { return s[n][k]; };
    auto on_row = [&](int r, float al) { alpha[r] = al; };
    if constexpr (QK)
      attn_softmax_tile_qk<N, false, STALE, PS, F>(frag, row_max, row_sum, sc, sc_log2, neg,
                                                   on_row, PS ? std::log2(448.f) : 0.f);
    else
      attn_softmax_tile<N, false, STALE, F>(frag, row_max, row_sum, on_row);
    rescales += alpha[0] != 1.f || alpha[1] != 1.f;
    /* A row whose maximum stays must get alpha exactly 1: fwd_sm90 skips
     * O's rescale only then. (Built with fma contraction, as NVVM builds
     * the template: exp2(old log2 e - base) contracted into an fma gave
     * 1 + a few ulps, and the skip never fired; session 34.) */
    for (int r = 0; r < 2; r++)
      if (row_max[r] == max_before[r] && alpha[r] != 1.f) {
        failures++;
        std::printf("FAIL: row %d kept its maximum %g but alpha is %.9g\n", r, row_max[r],
                    alpha[r]);
      }
    for (int r = 0; r < 2; r++) {
      for (int d = 0; d < DV; d++) o[r][d] *= alpha[r];
      for (int n = 0; n < N; n++)
        for (int x = 0; x < 2; x++) {
          const int j = t * 2 * N + 2 * n + x;
          const float p = s[n][2 * r + x];
          p_max = std::fmax(p_max, p);
          for (int d = 0; d < DV; d++) o[r][d] += p * (float)rows[r].v[j][d];
        }
    }
  }
  for (int r = 0; r < 2; r++) {
    const float l = PS ? row_sum[r] / 448.f : row_sum[r];
    /* (with PS, O carries 448 as the kernel's does: its output hook's
     * `descale_v / 448` takes it out) */
    for (int d = 0; d < DV; d++) o[r][d] = l > 0.f ? o[r][d] / l / (PS ? 448.f : 1.f) : 0.f;
    lse[r] = l > 0.f ? row_max[r] + std::log(l) : -INFINITY;
  }
}

template <bool QK, bool STALE, bool PS = false, bool QS = false, int F = 0>
static void check(const char *name, const Row (&rows)[2], float c, int &rescales_total) {
  float o[2][DV], lse[2], p_max = 0.f;
  int rescales = 0;
  online<QK, STALE, PS, QS, F>(rows, c, o, lse, rescales, p_max);
  rescales_total += rescales;
  for (int r = 0; r < 2; r++) {
    double ro[DV], rl;
    reference(rows[r], (double)c, ro, rl);
    bool ok = std::isinf(rl) ? std::isinf(lse[r]) && lse[r] < 0 : std::fabs(lse[r] - rl) <= 1e-4 * (1 + std::fabs(rl));
    for (int d = 0; d < DV; d++) ok &= std::fabs(o[r][d] - ro[d]) <= 1e-4 * (1 + std::fabs(ro[d]));
    if (!ok) {
      failures++;
      std::printf("FAIL %s c=%g row %d: lse %g vs %g, o0 %g vs %g\n", name, c, r, lse[r], rl,
                  o[r][0], ro[0]);
    }
  }
  /* STALE exponentials stay under 2^8 (up to exp2's rounding); others 1 */
  const float bound = (STALE ? 256.f : 1.f) * (PS ? 448.f : 1.f) * 1.0001f;
  if (!(p_max <= bound)) {
    failures++;
    std::printf("FAIL %s c=%g: an exponential of %g\n", name, c, p_max);
  }
}
} // namespace

int main() {
  std::mt19937_64 rng(12345);
  std::normal_distribution<double> gauss(0.0, 1.0);
  const float factors[] = {0.088f, 1.f, 2.5f, -0.4f, -3.f, 0.f, 1e-30f};
  int stale_rescales = 0, exact_rescales = 0, cases = 0;
  for (int trial = 0; trial < 300; trial++) {
    Row rows[2];
    const int kind = trial % 5; /* 0: all kept, 1: random mask, 2: causal-like, 3: row 1 fully masked, 4: growing scores */
    for (int r = 0; r < 2; r++)
      for (int j = 0; j < T * 2 * N; j++) {
        rows[r].acc[j] = 8.0 * gauss(rng) + (kind == 4 ? 0.5 * j : 0.0);
        rows[r].keep[j] = kind == 0 || kind == 4   ? true
                          : kind == 1              ? (rng() % 3) != 0
                          : kind == 2              ? j <= 40 + 17 * r
                                                   : r == 0;
        for (int d = 0; d < DV; d++) rows[r].v[j][d] = gauss(rng);
      }
    for (float c : factors) {
      int dummy = 0;
      check<false, false>("tile", rows, c, dummy);
      check<false, true>("tile stale", rows, c, dummy);
      check<true, false>("tile_qk", rows, c, exact_rescales);
      check<true, true>("tile_qk stale", rows, c, stale_rescales);
      check<true, false, true>("tile_qk P scale", rows, c, dummy);
      check<true, true, false, true>("tile_qk row scales", rows, c, dummy);
      check<false, true, false, false, 2>("tile stale, half on FMA", rows, c, dummy);
      check<true, true, false, false, 2>("tile_qk stale, half on FMA", rows, c, dummy);
      check<true, false, false, false, 4>("tile_qk, all on FMA", rows, c, dummy);
      cases++;
    }
  }
  std::printf("%s: softmax tiles against float64, %d cases x 9 variants; rescaled tiles: %d "
              "exact, %d stale (of %d)\n",
              failures ? "FAIL" : "PASS", cases, exact_rescales, stale_rescales, cases * T);
  return failures ? 1 : 0;
}
