/*
 * template_bwd_test.cu: the backward template (templates/bwd_sm80.cuh) on
 * its own, with hand-written hooks, against a double-precision CPU
 * backward. Variants: plain (D 64), causal + softcap (D 128: exercises the
 * chain-rule hook and masked tiles), GQA (D 128, H = 2 Hk: the dK/dV
 * accumulators). Shapes with Sq != Skv and non-multiples of the tiles.
 * Checks the relative L2 error of dQ, dK, dV (bf16: 2e-2), no NaN, and
 * that fully masked rows (causal with Sq > Skv... none here) stay finite.
 *
 * Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a
 *        -gencode=arch=compute_80,code=sm_80
 *        -o build/tests/gpu/template_bwd_test tests/gpu/template_bwd_test.cu
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

extern "C" {
#include "../../abi/attn_abi.h"
#include "../../abi/attn_layout.h"
}
/* The shared PTX wrappers, once, as the emitter pastes them. */
#include "../../templates/common.cuh"
#include "../../templates/ptx.cuh"

#define CHECK(call)                                                                      \
  do {                                                                                   \
    cudaError_t err_ = (call);                                                           \
    if (err_ != cudaSuccess) {                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,                      \
              cudaGetErrorString(err_));                                                 \
      exit(2);                                                                           \
    }                                                                                    \
  } while (0)

enum { SQ_, SK_, SV_, SO_, SLSE_, SDO_, SDELTA_, SDQA_, SDQ_, SDK_, SDV_, SDKA_, SDVA_ };
#define ATTN_TQ 0
#define ATTN_TK 1
#define ATTN_TV 2
#define ATTN_TO 3
#define ATTN_TLSE 4
#define ATTN_TDO 5
#define ATTN_TDELTA 6
#define ATTN_TDQA 7
#define ATTN_TDQ 8
#define ATTN_TDK 9
#define ATTN_TDV 10
#define ATTN_TDKA 11
#define ATTN_TDVA 12
/* (the slots the kernels read q, k, v, dO from, and the gradients' kinds:
 * the graph's own, bf16; emit_bwd.c writes them) */
#define ATTN_BWD_TQ ATTN_TQ
#define ATTN_BWD_TK ATTN_TK
#define ATTN_BWD_TV ATTN_TV
#define ATTN_BWD_TDO ATTN_TDO
#define ATTN_BWD_IN_BF16 1
#define ATTN_BWD_DQ_KIND 0
#define ATTN_BWD_DK_KIND 0
#define ATTN_BWD_DV_KIND 0
#define ATTN_IN_BF16 1
#define ATTN_OUT_BF16 1

#define PLAIN_HOOKS                                                                       \
  static __device__ __forceinline__ float attn_score(float acc, int, int, int, int,       \
                                                     const attn_params &p) {              \
    return acc * p.s[0].f;                                                                \
  }                                                                                       \
  static __device__ __forceinline__ bool attn_keep(int, int, int, int, const attn_params &) { \
    return true;                                                                          \
  }                                                                                       \
  static __device__ __forceinline__ int attn_tile_class(int, int, int, int, int, int,     \
                                                        const attn_params &) {            \
    return 2;                                                                             \
  }                                                                                       \
  static __device__ __forceinline__ float attn_bwd_draw(float ds, float, int, int, int, int, \
                                                        const attn_params &) {            \
    return ds;                                                                            \
  }                                                                                       \
  static __device__ __forceinline__ float attn_bwd_scale(const attn_params &p) { return p.s[0].f; }

/* The per-(b, h) hooks (emit.c: attn_bh holds the values the score and
 * the masks fix per (b, h); these hooks fix none). */
#define BH_HOOKS                                                                          \
  struct attn_bh {};                                                                      \
  static __device__ __forceinline__ attn_bh attn_bh_load(int, int, const attn_params &) { \
    return attn_bh{};                                                                     \
  }                                                                                       \
  static __device__ __forceinline__ float attn_score_bh(float acc, const attn_bh &, int b, \
                                                        int h, int i, int j,              \
                                                        const attn_params &p) {           \
    return attn_score(acc, b, h, i, j, p);                                                \
  }                                                                                       \
  static __device__ __forceinline__ bool attn_keep_bh(const attn_bh &, int b, int h, int i, \
                                                      int j, const attn_params &p) {      \
    return attn_keep(b, h, i, j, p);                                                      \
  }

#define ATTN_D_QK 64
#define ATTN_D_V 64
namespace vplain {
PLAIN_HOOKS
BH_HOOKS
#include "../../templates/hooks.cuh"
#include "../../templates/bwd_sm80.cuh"
}
#undef ATTN_D_QK
#undef ATTN_D_V

#define ATTN_D_QK 128
#define ATTN_D_V 128
namespace vgqa {
PLAIN_HOOKS
BH_HOOKS
#include "../../templates/hooks.cuh"
#include "../../templates/bwd_sm80.cuh"
}
namespace vcausal {
static __device__ __forceinline__ float attn_score(float acc, int, int, int, int,
                                                   const attn_params &p) {
  return 30.f * tanhf(acc * p.s[0].f / 30.f);
}
static __device__ __forceinline__ bool attn_keep(int, int, int i, int j, const attn_params &) {
  return j <= i;
}
static __device__ __forceinline__ int attn_tile_class(int, int, int i0, int i1, int j0, int j1,
                                                      const attn_params &) {
  return j0 > i1 ? 0 : j1 <= i0 ? 2 : 1;
}
static __device__ __forceinline__ float attn_bwd_draw(float ds, float acc, int, int, int, int,
                                                      const attn_params &p) {
  const float t = tanhf(acc * p.s[0].f / 30.f);
  return ds * (1.f - t * t);
}
static __device__ __forceinline__ float attn_bwd_scale(const attn_params &p) { return p.s[0].f; }
BH_HOOKS
#include "../../templates/hooks.cuh"
#include "../../templates/bwd_sm80.cuh"
}

#define KERNELS(ns)                                                                       \
  extern "C" __global__ void __launch_bounds__(128) ns##_delta(const __grid_constant__ attn_params p) { \
    ns::attn_bwd_sm80_delta(p);                                                           \
  }                                                                                       \
  extern "C" __global__ void __launch_bounds__(128) ns##_main(const __grid_constant__ attn_params p) { \
    ns::attn_bwd_sm80_main(p);                                                            \
  }                                                                                       \
  extern "C" __global__ void __launch_bounds__(128) ns##_conv(const __grid_constant__ attn_params p) { \
    ns::attn_bwd_sm80_convert(p);                                                         \
  }                                                                                       \
  extern "C" __global__ void __launch_bounds__(128) ns##_convkv(const __grid_constant__ attn_params p) { \
    ns::attn_bwd_sm80_convert_kv(p);                                                      \
  }
KERNELS(vplain)
KERNELS(vgqa)
KERNELS(vcausal)

typedef void (*Kern)(attn_params);
struct Variant {
  const char *name;
  Kern delta, main, conv, convkv;
  int smem, D;
  bool causal;
  int H, Hk;
};

static double bf(double x) { return (double)__bfloat162float(__float2bfloat16((float)x)); }

static int passed, failed;

static void run(const Variant &v, int B, int Sq, int Skv, unsigned seed) {
  const int H = v.H, Hk = v.Hk, D = v.D;
  const double scale = 1.0 / std::sqrt((double)D);
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  auto fill = [&](std::vector<double> &x, size_t n) {
    x.resize(n);
    for (auto &e : x) e = bf(nd(rng));
  };
  std::vector<double> q, k, vv, dO;
  fill(q, (size_t)B * H * Sq * D);
  fill(k, (size_t)B * Hk * Skv * D);
  fill(vv, (size_t)B * Hk * Skv * D);
  fill(dO, (size_t)B * H * Sq * D);
  std::vector<double> o((size_t)B * H * Sq * D), lse((size_t)B * H * Sq);
  std::vector<double> dq(q.size(), 0), dk(k.size(), 0), dv(vv.size(), 0);
  const int grp = H / Hk;
  std::vector<double> acc(Skv), P(Skv), dp(Skv);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++) {
      const int hk = h / grp;
      const double *K = &k[((size_t)b * Hk + hk) * Skv * D], *V = &vv[((size_t)b * Hk + hk) * Skv * D];
      for (int i = 0; i < Sq; i++) {
        const double *Q = &q[(((size_t)b * H + h) * Sq + i) * D];
        const double *G = &dO[(((size_t)b * H + h) * Sq + i) * D];
        double m = -INFINITY;
        std::vector<double> x(Skv);
        for (int j = 0; j < Skv; j++) {
          double a = 0;
          for (int d = 0; d < D; d++) a += Q[d] * K[(size_t)j * D + d];
          acc[j] = a;
          x[j] = v.causal ? (j <= i ? 30.0 * std::tanh(a * scale / 30.0) : -INFINITY) : a * scale;
          m = std::max(m, x[j]);
        }
        double sum = 0;
        for (int j = 0; j < Skv; j++) sum += (P[j] = m == -INFINITY ? 0 : std::exp(x[j] - m));
        const size_t row = ((size_t)b * H + h) * Sq + i;
        lse[row] = sum > 0 ? m + std::log(sum) : -INFINITY;
        for (int j = 0; j < Skv; j++) P[j] = sum > 0 ? P[j] / sum : 0;
        double *O = &o[row * D];
        for (int d = 0; d < D; d++) {
          double s = 0;
          for (int j = 0; j < Skv; j++) s += P[j] * V[(size_t)j * D + d];
          O[d] = bf(s); /* the kernel reads O as stored */
        }
        double delta = 0;
        for (int d = 0; d < D; d++) delta += G[d] * O[d];
        for (int j = 0; j < Skv; j++) {
          double s = 0;
          for (int d = 0; d < D; d++) s += G[d] * V[(size_t)j * D + d];
          double ds = P[j] * (s - delta);
          double draw = ds;
          if (v.causal) {
            double t = std::tanh(acc[j] * scale / 30.0);
            draw = ds * (1 - t * t);
          }
          draw *= scale;
          for (int d = 0; d < D; d++) {
            dq[row * D + d] += draw * K[(size_t)j * D + d];
            dk[(((size_t)b * Hk + hk) * Skv + j) * D + d] += draw * Q[d];
            dv[(((size_t)b * Hk + hk) * Skv + j) * D + d] += P[j] * G[d];
          }
        }
      }
    }

  /* Device buffers. */
  auto up16 = [&](const std::vector<double> &x) {
    std::vector<__nv_bfloat16> h16(x.size());
    for (size_t e = 0; e < x.size(); e++) h16[e] = __float2bfloat16((float)x[e]);
    void *d;
    CHECK(cudaMalloc(&d, x.size() * 2 + 16));
    CHECK(cudaMemcpy(d, h16.data(), x.size() * 2, cudaMemcpyHostToDevice));
    return d;
  };
  auto alloc = [&](size_t bytes, int fill_byte) {
    void *d;
    CHECK(cudaMalloc(&d, bytes + 16));
    CHECK(cudaMemset(d, fill_byte, bytes + 16));
    return d;
  };
  attn_params p;
  memset(&p, 0, sizeof p);
  auto set = [&](int slot, void *ptr, int n1, int n2, int n3) {
    p.t[slot].ptr = ptr;
    p.t[slot].size[0] = B, p.t[slot].size[1] = n1, p.t[slot].size[2] = n2, p.t[slot].size[3] = n3;
    p.t[slot].stride[3] = 1;
    p.t[slot].stride[2] = n3;
    p.t[slot].stride[1] = (long long)n2 * n3;
    p.t[slot].stride[0] = (long long)n1 * n2 * n3;
  };
  std::vector<float> lsef(lse.begin(), lse.end());
  void *dlse = alloc(lsef.size() * 4, 0);
  CHECK(cudaMemcpy(dlse, lsef.data(), lsef.size() * 4, cudaMemcpyHostToDevice));
  set(SQ_, up16(q), H, Sq, D);
  set(SK_, up16(k), Hk, Skv, D);
  set(SV_, up16(vv), Hk, Skv, D);
  set(SO_, up16(o), H, Sq, D);
  set(SLSE_, dlse, H, Sq, 1);
  p.t[SLSE_].stride[2] = 1, p.t[SLSE_].stride[1] = Sq, p.t[SLSE_].stride[0] = (long long)H * Sq;
  set(SDO_, up16(dO), H, Sq, D);
  set(SDELTA_, alloc((size_t)B * H * Sq * 8, 0xff), H, Sq, 2); /* {delta, lse log2 e} per row */
  set(SDQA_, alloc(q.size() * 4, 0xff), H, Sq, D);
  set(SDQ_, alloc(q.size() * 2, 0xff), H, Sq, D);
  set(SDK_, alloc(k.size() * 2, 0xff), Hk, Skv, D);
  set(SDV_, alloc(vv.size() * 2, 0xff), Hk, Skv, D);
  set(SDKA_, alloc(k.size() * 4, 0), Hk, Skv, D);
  set(SDVA_, alloc(vv.size() * 4, 0), Hk, Skv, D);
  p.s[0].f = (float)scale;
  p.B = B, p.H = H, p.Hk = Hk, p.Sq = Sq, p.Skv = Skv;

  CHECK(cudaFuncSetAttribute((const void *)v.main, cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem));
  const int rows = ATTN_BWD_ROWS_PER_CTA; /* the row passes' rows per CTA */
  v.delta<<<dim3((Sq + rows - 1) / rows, H, B), 128>>>(p);
  v.main<<<dim3((Skv + 63) / 64, H, B), 128, v.smem>>>(p);
  v.conv<<<dim3((Sq + rows - 1) / rows, H, B), 128>>>(p);
  if (H != Hk) v.convkv<<<dim3((Skv + rows - 1) / rows, Hk, B), 128>>>(p);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  auto down = [&](int slot, size_t n) {
    std::vector<__nv_bfloat16> h16(n);
    CHECK(cudaMemcpy(h16.data(), p.t[slot].ptr, n * 2, cudaMemcpyDeviceToHost));
    std::vector<double> r(n);
    for (size_t e = 0; e < n; e++) r[e] = __bfloat162float(h16[e]);
    return r;
  };
  const char *names[3] = {"dq", "dk", "dv"};
  const std::vector<double> *want[3] = {&dq, &dk, &dv};
  int slots[3] = {SDQ_, SDK_, SDV_};
  char line[512];
  int len = snprintf(line, sizeof line, "bwd template %s B=%d H=%d Hk=%d Sq=%d Skv=%d D=%d:", v.name,
                     B, H, Hk, Sq, Skv, D);
  bool ok = true;
  for (int g = 0; g < 3; g++) {
    std::vector<double> got = down(slots[g], want[g]->size());
    double num = 0, den = 0;
    size_t nonfinite = 0;
    for (size_t e = 0; e < got.size(); e++) {
      if (!std::isfinite(got[e])) { nonfinite++; continue; }
      num += (got[e] - (*want[g])[e]) * (got[e] - (*want[g])[e]);
      den += (*want[g])[e] * (*want[g])[e];
    }
    double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    len += snprintf(line + len, sizeof line - len, " %s rel_l2 %.2e nonfinite %zu;", names[g], rel, nonfinite);
    if (!(rel <= 2e-2) || nonfinite) ok = false;
  }
  printf("%s: %s\n", ok ? "PASS" : "FAIL", line);
  if (ok) passed++; else failed++;
  for (int s = 0; s <= SDVA_; s++) CHECK(cudaFree(p.t[s].ptr));
}

int main() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("SKIP: no GPU\n");
    return 0;
  }
  const Variant vars[] = {
      {"plain", vplain_delta, vplain_main, vplain_conv, vplain_convkv, vplain::attn_bwd_sm80_smem_bytes, 64, false, 2, 2},
      {"causal+softcap", vcausal_delta, vcausal_main, vcausal_conv, vcausal_convkv, vcausal::attn_bwd_sm80_smem_bytes, 128, true, 2, 2},
      {"gqa", vgqa_delta, vgqa_main, vgqa_conv, vgqa_convkv, vgqa::attn_bwd_sm80_smem_bytes, 128, false, 4, 2},
  };
  const int shapes[][3] = {{1, 128, 128}, {2, 77, 201}, {1, 200, 64}};
  unsigned seed = 1;
  for (const auto &v : vars)
    for (const auto &s : shapes) run(v, s[0], s[1], s[2], seed++);
  printf("bwd template: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
