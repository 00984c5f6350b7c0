/*
 * template_sm80_test.cu: the portable forward template on its own, with
 * hand-written hooks, against a double-precision CPU reference.
 *
 * Each kernel variant pastes templates/fwd_sm80.cuh into its own namespace
 * (as the emitter does, which also proves the template can be included
 * several times in one translation unit). Every case draws fresh random
 * inputs, poisons the outputs with 0xff bytes (NaN in every output type),
 * and checks: relative L2 error of O, lse, fully masked rows (O exactly 0,
 * lse exactly -inf), strided padding untouched, and the number of key
 * tiles the CTAs loaded. Then it times large plain and causal problems.
 *
 * Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a
 *        -gencode=arch=compute_80,code=sm_80
 *        -o build/gpu/template_sm80_test tests/gpu/template_sm80_test.cu
 */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
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
#include "../../templates/softmax.cuh"

/* The emitter's tile table, compiled here as C++ to check it against the
 * template ( _Noreturn is a C11 keyword C++ lacks). */
#define _Noreturn
extern "C" {
#include "../../compiler/attnc.h"
}
#include "../../compiler/tmpl_sm80.c"

#define CHECK(call)                                                            \
  do {                                                                         \
    cudaError_t err_ = (call);                                                 \
    if (err_ != cudaSuccess) {                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,            \
              cudaGetErrorString(err_));                                       \
      exit(2);                                                                 \
    }                                                                          \
  } while (0)

/* ------------------------------------------------------------ the masks */

/* Element predicates shared by the device hooks and the CPU reference;
 * the tile-level hooks (bounds, classes) are the device's own. Scalars:
 * s[0] scale, s[1] window, s[2] softcap, s[3] output factor. */
enum MaskKind { MK_PLAIN, MK_CAUSAL, MK_WINDOW, MK_SOFTCAP, MK_INNER };
static const char *mask_name[] = {"plain", "causal", "sink+window", "softcap",
                                  "inner-inf"};

namespace tmask {
constexpr int sink = 16; /* keys always visible in the window mask */
__host__ __device__ inline bool causal_keep(int i, int j, int off) {
  return j <= i + off;
}
__host__ __device__ inline bool window_keep(int i, int j, int off, int w) {
  if (i % 5 == 2)
    return false; /* a dead row: every key masked */
  return j < sink || (j >= i + off - w && j <= i + off + w);
}
__host__ __device__ inline bool inner_dead(int i) { return i % 7 == 3; }
} // namespace tmask

/* The hooks of one mask kind, as the emitter would write them. */
#define HOOKS_COMMON                                                           \
  __device__ __forceinline__ float attn_out(float o, int b, int h, int i,      \
                                            int d, const attn_params &p) {     \
    return o * p.s[3].f;                                                       \
  }                                                                            \
  __device__ __forceinline__ attn_bh attn_bh_load(int, int,                    \
                                                  const attn_params &) {       \
    return attn_bh{};                                                          \
  }                                                                            \
  __device__ __forceinline__ float attn_score_bh(                              \
      float acc, const attn_bh &, int b, int h, int i, int j,                  \
      const attn_params &p) {                                                  \
    return attn_score(acc, b, h, i, j, p);                                     \
  }                                                                            \
  __device__ __forceinline__ bool attn_keep_bh(const attn_bh &, int b, int h,  \
                                               int i, int j,                   \
                                               const attn_params &p) {         \
    return attn_keep(b, h, i, j, p);                                           \
  }

#define HOOKS_PLAIN_BOUNDS                                                     \
  __device__ __forceinline__ bool attn_keep(int b, int h, int i, int j,        \
                                            const attn_params &p) {            \
    return true;                                                               \
  }                                                                            \
  __device__ __forceinline__ void attn_kv_bounds(                              \
      int b, int h, int i0, int i1, const attn_params &p, int &lo, int &hi) {  \
    lo = 0, hi = p.Skv;                                                        \
  }                                                                            \
  __device__ __forceinline__ int attn_tile_class(                              \
      int b, int h, int i0, int i1, int j0, int j1, const attn_params &p) {    \
    return 2;                                                                  \
  }

#define HOOKS_PLAIN                                                            \
  HOOKS_COMMON HOOKS_PLAIN_BOUNDS __device__ __forceinline__ float attn_score( \
      float acc, int b, int h, int i, int j, const attn_params &p) {           \
    return acc * p.s[0].f;                                                     \
  }

#define HOOKS_SOFTCAP                                                          \
  HOOKS_COMMON HOOKS_PLAIN_BOUNDS __device__ __forceinline__ float attn_score( \
      float acc, int b, int h, int i, int j, const attn_params &p) {           \
    return p.s[2].f * tanhf(acc * p.s[0].f / p.s[2].f);                        \
  }

#define HOOKS_INNER                                                            \
  HOOKS_COMMON HOOKS_PLAIN_BOUNDS __device__ __forceinline__ float attn_score( \
      float acc, int b, int h, int i, int j, const attn_params &p) {           \
    return tmask::inner_dead(i) ? __int_as_float(0xff800000) : acc * p.s[0].f;    \
  }

#define HOOKS_CAUSAL                                                           \
  HOOKS_COMMON __device__ __forceinline__ float attn_score(                    \
      float acc, int b, int h, int i, int j, const attn_params &p) {           \
    return acc * p.s[0].f;                                                     \
  }                                                                            \
  __device__ __forceinline__ bool attn_keep(int b, int h, int i, int j,        \
                                            const attn_params &p) {            \
    return tmask::causal_keep(i, j, p.Skv - p.Sq);                                \
  }                                                                            \
  __device__ __forceinline__ void attn_kv_bounds(                              \
      int b, int h, int i0, int i1, const attn_params &p, int &lo, int &hi) {  \
    lo = 0, hi = i1 + (p.Skv - p.Sq) + 1;                                      \
  }                                                                            \
  __device__ __forceinline__ int attn_tile_class(                              \
      int b, int h, int i0, int i1, int j0, int j1, const attn_params &p) {    \
    int off = p.Skv - p.Sq;                                                    \
    return j0 > i1 + off ? 0 : j1 <= i0 + off ? 2 : 1;                         \
  }

/* Sink + sliding window: the bounds start at 0 (the sink), so the tiles
 * between the sink and the window are skipped by attn_tile_class alone. */
#define HOOKS_WINDOW                                                           \
  HOOKS_COMMON __device__ __forceinline__ float attn_score(                    \
      float acc, int b, int h, int i, int j, const attn_params &p) {           \
    return acc * p.s[0].f;                                                     \
  }                                                                            \
  __device__ __forceinline__ bool attn_keep(int b, int h, int i, int j,        \
                                            const attn_params &p) {            \
    return tmask::window_keep(i, j, p.Skv - p.Sq, p.s[1].i);                      \
  }                                                                            \
  __device__ __forceinline__ void attn_kv_bounds(                              \
      int b, int h, int i0, int i1, const attn_params &p, int &lo, int &hi) {  \
    lo = 0, hi = i1 + (p.Skv - p.Sq) + p.s[1].i + 1;                           \
  }                                                                            \
  __device__ __forceinline__ int attn_tile_class(                              \
      int b, int h, int i0, int i1, int j0, int j1, const attn_params &p) {    \
    int off = p.Skv - p.Sq, w = p.s[1].i;                                      \
    if (j0 < tmask::sink)                                                         \
      return 1;                                                                \
    return (j0 > i1 + off + w || j1 < i0 + off - w) ? 0 : 1;                   \
  }

/* ------------------------------------------------------ kernel variants */

/* What the host needs to know about one compiled variant. */
struct Variant {
  const char *name;
  const void *kernel;
  int dqk, dv, in_bf16, out_kind, has_lse, bm, bn, warps, smem, table_sm;
  MaskKind mask;
};

#define ATTN_TQ 0
#define ATTN_TK 1
#define ATTN_TV 2
#define ATTN_TO 4

/* Each variant: the ATTN_* defines, the template, the hooks, the kernel,
 * its description; then the per-variant defines are dropped so the next
 * namespace can define its own (as the emitter does per graph). */
#define VARIANT_TAIL(NAME, MASK, SM)                                           \
  __global__ void __launch_bounds__(ATTN_WARPS * 32)                           \
      kernel(const __grid_constant__ attn_params p) {                          \
    attn_fwd_sm80(p);                                                          \
  }                                                                            \
  const Variant info = {NAME, (const void *)kernel, fwd80_dqk, fwd80_dv,       \
                        fwd80_in_bf16, fwd80_out_kind, fwd80_tlse >= 0,        \
                        fwd80_bm, fwd80_bn, fwd80_warps,                       \
                        attn_fwd_sm80_smem_bytes, SM, MASK};

namespace plain_d64 {
#define ATTN_D_QK 64
#define ATTN_D_V 64
#define ATTN_IN_BF16 1
#define ATTN_OUT_BF16 1
#define ATTN_BM 128
#define ATTN_BN 128
#define ATTN_WARPS 8
#define ATTN_TLSE 5
#include "../../templates/hooks.cuh"
struct attn_bh {}; /* no per-(b, h) values: the hooks take none */
constexpr bool attn_score_reads = false;
#include "../../templates/fwd_sm80.cuh"
HOOKS_PLAIN
VARIANT_TAIL("plain_d64", MK_PLAIN, 90)
#undef ATTN_D_QK
#undef ATTN_D_V
#undef ATTN_IN_BF16
#undef ATTN_OUT_BF16
#undef ATTN_BM
#undef ATTN_BN
#undef ATTN_WARPS
#undef ATTN_TLSE
} // namespace plain_d64

namespace plain_d128 {
#define ATTN_D_QK 128
#define ATTN_D_V 128
#define ATTN_IN_BF16 1
#define ATTN_OUT_BF16 1
#define ATTN_BM 128
#define ATTN_BN 128
#define ATTN_WARPS 8
#define ATTN_TLSE 5
#include "../../templates/hooks.cuh"
struct attn_bh {}; /* no per-(b, h) values: the hooks take none */
constexpr bool attn_score_reads = false;
#include "../../templates/fwd_sm80.cuh"
HOOKS_PLAIN
VARIANT_TAIL("plain_d128", MK_PLAIN, 90)
#undef ATTN_D_QK
#undef ATTN_D_V
#undef ATTN_IN_BF16
#undef ATTN_OUT_BF16
#undef ATTN_BM
#undef ATTN_BN
#undef ATTN_WARPS
#undef ATTN_TLSE
} // namespace plain_d128

namespace plain_d128_bn64 {
#define ATTN_D_QK 128
#define ATTN_D_V 128
#define ATTN_IN_BF16 1
#define ATTN_OUT_BF16 1
#define ATTN_BM 128
#define ATTN_BN 64
#define ATTN_WARPS 8
#define ATTN_TLSE 5
#include "../../templates/hooks.cuh"
struct attn_bh {}; /* no per-(b, h) values: the hooks take none */
constexpr bool attn_score_reads = false;
#include "../../templates/fwd_sm80.cuh"
HOOKS_PLAIN
VARIANT_TAIL("plain_d128_bn64", MK_PLAIN, 0)
#undef ATTN_D_QK
#undef ATTN_D_V
#undef ATTN_IN_BF16
#undef ATTN_OUT_BF16
#undef ATTN_BM
#undef ATTN_BN
#undef ATTN_WARPS
#undef ATTN_TLSE
} // namespace plain_d128_bn64

namespace plain_d256 {
#define ATTN_D_QK 256
#define ATTN_D_V 256
#define ATTN_IN_BF16 1
#define ATTN_OUT_BF16 1
#define ATTN_BM 128
#define ATTN_BN 64
#define ATTN_WARPS 8
#define ATTN_TLSE 5
#include "../../templates/hooks.cuh"
struct attn_bh {}; /* no per-(b, h) values: the hooks take none */
constexpr bool attn_score_reads = false;
#include "../../templates/fwd_sm80.cuh"
HOOKS_PLAIN
VARIANT_TAIL("plain_d256", MK_PLAIN, 90)
#undef ATTN_D_QK
#undef ATTN_D_V
#undef ATTN_IN_BF16
#undef ATTN_OUT_BF16
#undef ATTN_BM
#undef ATTN_BN
#undef ATTN_WARPS
#undef ATTN_TLSE
} // namespace plain_d256

namespace plain_d256_sm86 {
#define ATTN_D_QK 256
#define ATTN_D_V 256
#define ATTN_IN_F16 1
#define ATTN_OUT_BF16 1
#define ATTN_BM 64
#define ATTN_BN 32
#define ATTN_WARPS 4
#define ATTN_TLSE 5
#include "../../templates/hooks.cuh"
struct attn_bh {}; /* no per-(b, h) values: the hooks take none */
constexpr bool attn_score_reads = false;
#include "../../templates/fwd_sm80.cuh"
HOOKS_PLAIN
VARIANT_TAIL("plain_d256_sm86", MK_PLAIN, 86)
#undef ATTN_D_QK
#undef ATTN_D_V
#undef ATTN_IN_F16
#undef ATTN_OUT_BF16
#undef ATTN_BM
#undef ATTN_BN
#undef ATTN_WARPS
#undef ATTN_TLSE
} // namespace plain_d256_sm86

namespace causal_d128 {
#define ATTN_D_QK 128
#define ATTN_D_V 128
#define ATTN_IN_BF16 1
#define ATTN_OUT_BF16 1
#define ATTN_BM 128
#define ATTN_BN 128
#define ATTN_WARPS 8
#define ATTN_TLSE 5
#include "../../templates/hooks.cuh"
struct attn_bh {}; /* no per-(b, h) values: the hooks take none */
constexpr bool attn_score_reads = false;
#include "../../templates/fwd_sm80.cuh"
HOOKS_CAUSAL
VARIANT_TAIL("causal_d128", MK_CAUSAL, 90)
#undef ATTN_D_QK
#undef ATTN_D_V
#undef ATTN_IN_BF16
#undef ATTN_OUT_BF16
#undef ATTN_BM
#undef ATTN_BN
#undef ATTN_WARPS
#undef ATTN_TLSE
} // namespace causal_d128

namespace causal_d64_f16_f32out {
#define ATTN_D_QK 64
#define ATTN_D_V 64
#define ATTN_IN_F16 1
#define ATTN_OUT_F32 1
#define ATTN_BM 128
#define ATTN_BN 128
#define ATTN_WARPS 8
#define ATTN_TLSE 5
#include "../../templates/hooks.cuh"
struct attn_bh {}; /* no per-(b, h) values: the hooks take none */
constexpr bool attn_score_reads = false;
#include "../../templates/fwd_sm80.cuh"
HOOKS_CAUSAL
VARIANT_TAIL("causal_d64_f16_f32out", MK_CAUSAL, 90)
#undef ATTN_D_QK
#undef ATTN_D_V
#undef ATTN_IN_F16
#undef ATTN_OUT_F32
#undef ATTN_BM
#undef ATTN_BN
#undef ATTN_WARPS
#undef ATTN_TLSE
} // namespace causal_d64_f16_f32out

namespace causal_d256_sm80 {
#define ATTN_D_QK 256
#define ATTN_D_V 256
#define ATTN_IN_BF16 1
#define ATTN_OUT_BF16 1
#define ATTN_BM 64
#define ATTN_BN 64
#define ATTN_WARPS 4
#define ATTN_TLSE 5
#include "../../templates/hooks.cuh"
struct attn_bh {}; /* no per-(b, h) values: the hooks take none */
constexpr bool attn_score_reads = false;
#include "../../templates/fwd_sm80.cuh"
HOOKS_CAUSAL
VARIANT_TAIL("causal_d256_sm80", MK_CAUSAL, 80)
#undef ATTN_D_QK
#undef ATTN_D_V
#undef ATTN_IN_BF16
#undef ATTN_OUT_BF16
#undef ATTN_BM
#undef ATTN_BN
#undef ATTN_WARPS
#undef ATTN_TLSE
} // namespace causal_d256_sm80

namespace softcap_d128_f16 {
#define ATTN_D_QK 128
#define ATTN_D_V 128
#define ATTN_IN_F16 1
#define ATTN_OUT_F16 1
#define ATTN_BM 128
#define ATTN_BN 128
#define ATTN_WARPS 8
#define ATTN_TLSE 5
#include "../../templates/hooks.cuh"
struct attn_bh {}; /* no per-(b, h) values: the hooks take none */
constexpr bool attn_score_reads = false;
#include "../../templates/fwd_sm80.cuh"
HOOKS_SOFTCAP
VARIANT_TAIL("softcap_d128_f16", MK_SOFTCAP, 90)
#undef ATTN_D_QK
#undef ATTN_D_V
#undef ATTN_IN_F16
#undef ATTN_OUT_F16
#undef ATTN_BM
#undef ATTN_BN
#undef ATTN_WARPS
#undef ATTN_TLSE
} // namespace softcap_d128_f16

namespace window_d64 {
#define ATTN_D_QK 64
#define ATTN_D_V 64
#define ATTN_IN_BF16 1
#define ATTN_OUT_BF16 1
#define ATTN_BM 128
#define ATTN_BN 128
#define ATTN_WARPS 8
#define ATTN_TLSE 5
#include "../../templates/hooks.cuh"
struct attn_bh {}; /* no per-(b, h) values: the hooks take none */
constexpr bool attn_score_reads = false;
#include "../../templates/fwd_sm80.cuh"
HOOKS_WINDOW
VARIANT_TAIL("window_d64", MK_WINDOW, 90)
#undef ATTN_D_QK
#undef ATTN_D_V
#undef ATTN_IN_BF16
#undef ATTN_OUT_BF16
#undef ATTN_BM
#undef ATTN_BN
#undef ATTN_WARPS
#undef ATTN_TLSE
} // namespace window_d64

namespace inner_d128v64_nolse {
#define ATTN_D_QK 128
#define ATTN_D_V 64
#define ATTN_IN_BF16 1
#define ATTN_OUT_F32 1
#define ATTN_BM 128
#define ATTN_BN 128
#define ATTN_WARPS 8
#define ATTN_TLSE -1
#include "../../templates/hooks.cuh"
struct attn_bh {}; /* no per-(b, h) values: the hooks take none */
constexpr bool attn_score_reads = false;
#include "../../templates/fwd_sm80.cuh"
HOOKS_INNER
VARIANT_TAIL("inner_d128v64_nolse", MK_INNER, 90)
#undef ATTN_D_QK
#undef ATTN_D_V
#undef ATTN_IN_BF16
#undef ATTN_OUT_F32
#undef ATTN_BM
#undef ATTN_BN
#undef ATTN_WARPS
#undef ATTN_TLSE
} // namespace inner_d128v64_nolse

static const Variant *variants[] = {
    &plain_d64::info,         &plain_d128::info,
    &plain_d256::info,        &plain_d256_sm86::info,
    &causal_d128::info,       &causal_d64_f16_f32out::info,
    &causal_d256_sm80::info,  &softcap_d128_f16::info,
    &window_d64::info,        &inner_d128v64_nolse::info,
};

/* Tile candidates the table does not pick (table_sm 0): checked for
 * correctness and timed beside the table's choice. */
static const Variant *candidates[] = {&plain_d128_bn64::info};

/* --------------------------------------------------------- host tensors */

/* One [B, heads, S, D] tensor, BHSD contiguous or BSHD with each sequence
 * position padded by 8 elements (a sliced view); pad elements are part of
 * the allocation so the test can check they stay untouched. */
struct HostTensor {
  int B, heads, S, D, elem; /* elem: bytes per element */
  bool bshd;
  long long stride[4];
  size_t count; /* elements in the allocation */
  std::vector<unsigned char> bytes;
  void *dev = nullptr;

  void init(int b, int hh, int s, int d, int el, bool bs) {
    B = b, heads = hh, S = s, D = d, elem = el, bshd = bs;
    if (bshd) {
      stride[3] = 1, stride[1] = d, stride[2] = (long long)hh * d + 8;
      stride[0] = stride[2] * s;
    } else {
      stride[3] = 1, stride[2] = d, stride[1] = (long long)s * d;
      stride[0] = stride[1] * hh;
    }
    count = (size_t)(stride[0] * b);
    bytes.assign(count * el, 0xff);
    CHECK(cudaMalloc(&dev, count * el));
  }
  long long at(int b, int h, int s, int d) const {
    return b * stride[0] + h * stride[1] + s * stride[2] + d;
  }
  attn_tensor_arg arg() const {
    attn_tensor_arg a;
    a.ptr = dev;
    for (int k = 0; k < 4; k++)
      a.stride[k] = stride[k];
    a.size[0] = B, a.size[1] = heads, a.size[2] = S, a.size[3] = D;
    return a;
  }
  void release() {
    if (dev)
      CHECK(cudaFree(dev));
    dev = nullptr;
  }
};

static unsigned short to16(float x, bool bf16) {
  unsigned short r;
  if (bf16) {
    __nv_bfloat16 v = __float2bfloat16_rn(x);
    memcpy(&r, &v, 2);
  } else {
    __half v = __float2half_rn(x);
    memcpy(&r, &v, 2);
  }
  return r;
}

static double from16(unsigned short r, bool bf16) {
  if (bf16) {
    __nv_bfloat16 v;
    memcpy(&v, &r, 2);
    return __bfloat162float(v);
  }
  __half v;
  memcpy(&v, &r, 2);
  return __half2float(v);
}

static double out_value(const HostTensor &t, long long idx, int kind) {
  if (kind == 2) {
    float f;
    memcpy(&f, &t.bytes[idx * 4], 4);
    return f;
  }
  unsigned short r;
  memcpy(&r, &t.bytes[idx * 2], 2);
  return from16(r, kind == 0);
}

/* Fills a 16-bit input with uniform values in [-mag, mag]; the pads too,
 * with garbage that must never be read as a key. */
static void fill_input(HostTensor &t, bool bf16, float mag, std::mt19937 &rng) {
  std::uniform_real_distribution<float> u(-mag, mag);
  for (size_t k = 0; k < t.count; k++) {
    unsigned short r = to16(u(rng), bf16);
    memcpy(&t.bytes[k * 2], &r, 2);
  }
  CHECK(cudaMemcpy(t.dev, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice));
}

/* ------------------------------------------------------ the CPU oracle */

struct Case {
  const Variant *v;
  int B, H, Hk, Sq, Skv;
  bool bshd;
  float mag;       /* input magnitude */
  int window;      /* MK_WINDOW half-width */
  float softcap;   /* MK_SOFTCAP cap */
  float out_scale; /* attn_out factor */
};

/* Whether key j survives for row i, and its final score. */
static bool ref_score(const Case &c, int i, int j, double dot, double &s) {
  double scale = 1.0 / sqrt((double)c.v->dqk);
  int off = c.Skv - c.Sq;
  switch (c.v->mask) {
  case MK_PLAIN:
    s = dot * scale;
    return true;
  case MK_CAUSAL:
    s = dot * scale;
    return tmask::causal_keep(i, j, off);
  case MK_WINDOW:
    s = dot * scale;
    return tmask::window_keep(i, j, off, c.window);
  case MK_SOFTCAP:
    s = c.softcap * tanh(dot * scale / c.softcap);
    return true;
  case MK_INNER:
    s = dot * scale;
    return !tmask::inner_dead(i);
  }
  return false;
}

/* Reference O [B,H,Sq,Dv] (dense) and lse [B,H,Sq]; lse -inf marks rows
 * with no kept key. */
static void reference(const Case &c, const HostTensor &q, const HostTensor &k,
                      const HostTensor &v, std::vector<double> &o,
                      std::vector<double> &lse) {
  const Variant &va = *c.v;
  bool bf16 = va.in_bf16;
  o.assign((size_t)c.B * c.H * c.Sq * va.dv, 0.0);
  lse.assign((size_t)c.B * c.H * c.Sq, -INFINITY);
  std::vector<double> qd(va.dqk), s(c.Skv), acc(va.dv);
  std::vector<char> kept(c.Skv);
  for (int b = 0; b < c.B; b++)
    for (int h = 0; h < c.H; h++) {
      int hk = h / (c.H / c.Hk);
      for (int i = 0; i < c.Sq; i++) {
        for (int d = 0; d < va.dqk; d++) {
          unsigned short r;
          memcpy(&r, &q.bytes[q.at(b, h, i, d) * 2], 2);
          qd[d] = from16(r, bf16);
        }
        double mx = -INFINITY;
        for (int j = 0; j < c.Skv; j++) {
          double dot = 0;
          for (int d = 0; d < va.dqk; d++) {
            unsigned short r;
            memcpy(&r, &k.bytes[k.at(b, hk, j, d) * 2], 2);
            dot += qd[d] * from16(r, bf16);
          }
          kept[j] = ref_score(c, i, j, dot, s[j]);
          if (kept[j])
            mx = std::max(mx, s[j]);
        }
        if (mx == -INFINITY)
          continue; /* all masked: O stays 0, lse -inf */
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j < c.Skv; j++) {
          if (!kept[j])
            continue;
          double pj = exp(s[j] - mx);
          sum += pj;
          for (int d = 0; d < va.dv; d++) {
            unsigned short r;
            memcpy(&r, &v.bytes[v.at(b, hk, j, d) * 2], 2);
            acc[d] += pj * from16(r, bf16);
          }
        }
        size_t row = ((size_t)b * c.H + h) * c.Sq + i;
        for (int d = 0; d < va.dv; d++)
          o[row * va.dv + d] = acc[d] / sum * c.out_scale;
        lse[row] = mx + log(sum);
      }
    }
}

/* The key tiles the CTAs should load, from host copies of the tile hooks
 * and the template's visiting rule. */
static unsigned long long expected_tiles(const Case &c) {
  const Variant &va = *c.v;
  int off = c.Skv - c.Sq;
  unsigned long long total = 0;
  int mblocks = (c.Sq + va.bm - 1) / va.bm;
  for (int m = 0; m < mblocks; m++) {
    int i0 = m * va.bm, i1 = std::min(i0 + va.bm, c.Sq) - 1;
    int lo = 0, hi = c.Skv;
    if (va.mask == MK_CAUSAL)
      hi = i1 + off + 1;
    if (va.mask == MK_WINDOW)
      hi = i1 + off + c.window + 1;
    lo = std::max(lo, 0), hi = std::min(hi, c.Skv);
    if (hi <= lo)
      continue;
    for (int n = lo / va.bn; n < (hi + va.bn - 1) / va.bn; n++) {
      int j0 = n * va.bn, j1 = std::min(j0 + va.bn, c.Skv) - 1;
      bool dead = false;
      if (va.mask == MK_CAUSAL)
        dead = j0 > i1 + off;
      if (va.mask == MK_WINDOW)
        dead = j0 >= tmask::sink &&
               (j0 > i1 + off + c.window || j1 < i0 + off - c.window);
      total += !dead;
    }
  }
  return total * c.B * c.H;
}

/* ------------------------------------------------------------ one case */

struct Buffers {
  HostTensor q, k, v, o, lse;
  unsigned long long *visited = nullptr;
  void release() {
    q.release(), k.release(), v.release(), o.release(), lse.release();
    if (visited)
      CHECK(cudaFree(visited));
    visited = nullptr;
  }
};

static attn_params make_params(const Case &c, const Buffers &bf) {
  attn_params p;
  memset(&p, 0, sizeof p);
  p.t[ATTN_TQ] = bf.q.arg();
  p.t[ATTN_TK] = bf.k.arg();
  p.t[ATTN_TV] = bf.v.arg();
  p.t[ATTN_TO] = bf.o.arg();
  if (c.v->has_lse) {
    /* lse is [B, H, Sq]: the (b, h, s) strides of its [B, H, Sq, 1] */
    p.t[5].ptr = bf.lse.dev;
    p.t[5].stride[0] = bf.lse.stride[0];
    p.t[5].stride[1] = bf.lse.stride[1];
    p.t[5].stride[2] = bf.lse.stride[2];
  }
  p.s[0].f = 1.0f / sqrtf((float)c.v->dqk);
  p.s[1].i = c.window;
  p.s[2].f = c.softcap;
  p.s[3].f = c.out_scale;
  p.B = c.B, p.H = c.H, p.Hk = c.Hk, p.Sq = c.Sq, p.Skv = c.Skv;
  p.tiles_visited = bf.visited;
  return p;
}

static void alloc_buffers(const Case &c, Buffers &bf, std::mt19937 &rng) {
  const Variant &va = *c.v;
  bf.q.init(c.B, c.H, c.Sq, va.dqk, 2, c.bshd);
  bf.k.init(c.B, c.Hk, c.Skv, va.dqk, 2, c.bshd);
  bf.v.init(c.B, c.Hk, c.Skv, va.dv, 2, c.bshd);
  bf.o.init(c.B, c.H, c.Sq, va.dv, va.out_kind == 2 ? 4 : 2, c.bshd);
  bf.lse.init(c.B, c.H, c.Sq, 1, 4, false); /* [B, H, Sq, 1] */
  fill_input(bf.q, va.in_bf16, c.mag, rng);
  fill_input(bf.k, va.in_bf16, c.mag, rng);
  fill_input(bf.v, va.in_bf16, 1.0f, rng);
  CHECK(cudaMalloc(&bf.visited, sizeof *bf.visited));
}

static void launch(const Case &c, const attn_params &p) {
  const Variant &va = *c.v;
  CHECK(cudaFuncSetAttribute(va.kernel,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             va.smem));
  dim3 grid((c.Sq + va.bm - 1) / va.bm, c.H, c.B);
  void *args[] = {(void *)&p};
  CHECK(cudaLaunchKernel(va.kernel, grid, dim3(va.warps * 32), args,
                         (size_t)va.smem, 0));
  CHECK(cudaGetLastError());
}

static bool run_case(const Case &c, std::mt19937 &rng) {
  const Variant &va = *c.v;
  Buffers bf;
  alloc_buffers(c, bf, rng);
  CHECK(cudaMemset(bf.o.dev, 0xff, bf.o.bytes.size()));
  CHECK(cudaMemset(bf.lse.dev, 0xff, bf.lse.bytes.size()));
  CHECK(cudaMemset(bf.visited, 0, sizeof *bf.visited));
  attn_params p = make_params(c, bf);
  launch(c, p);
  CHECK(cudaDeviceSynchronize());
  unsigned long long visited = 0;
  CHECK(cudaMemcpy(bf.o.bytes.data(), bf.o.dev, bf.o.bytes.size(), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(bf.lse.bytes.data(), bf.lse.dev, bf.lse.bytes.size(), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&visited, bf.visited, sizeof visited, cudaMemcpyDeviceToHost));

  std::vector<double> ro, rl;
  reference(c, bf.q, bf.k, bf.v, ro, rl);

  /* Every valid element written and finite; masked rows exact. */
  double num = 0, den = 0, lse_err = 0;
  long long bad = 0, dead_rows = 0, dead_bad = 0;
  std::vector<char> valid(bf.o.count, 0);
  for (int b = 0; b < c.B; b++)
    for (int h = 0; h < c.H; h++)
      for (int i = 0; i < c.Sq; i++) {
        size_t row = ((size_t)b * c.H + h) * c.Sq + i;
        bool dead = std::isinf(rl[row]);
        dead_rows += dead;
        for (int d = 0; d < va.dv; d++) {
          long long idx = bf.o.at(b, h, i, d);
          valid[idx] = 1;
          double x = out_value(bf.o, idx, va.out_kind), r = ro[row * va.dv + d];
          if (!std::isfinite(x))
            bad++;
          else if (dead && x != 0.0)
            dead_bad++;
          num += (x - r) * (x - r), den += r * r;
        }
        if (va.has_lse) {
          float l;
          memcpy(&l, &bf.lse.bytes[(size_t)bf.lse.at(b, h, i, 0) * 4], 4);
          if (dead) {
            if (!(std::isinf(l) && l < 0))
              dead_bad++;
          } else if (!std::isfinite(l)) {
            bad++;
          } else {
            lse_err = std::max(lse_err, fabs(l - rl[row]));
          }
        }
      }
  /* Pads between sequence positions must still hold the poison. */
  long long pad_bad = 0;
  for (size_t k = 0; k < bf.o.count; k++)
    if (!valid[k])
      for (int e = 0; e < bf.o.elem; e++)
        pad_bad += bf.o.bytes[k * bf.o.elem + e] != 0xff;

  double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  unsigned long long want = expected_tiles(c);
  bool ok = bad == 0 && dead_bad == 0 && pad_bad == 0 && rel <= 2e-2 &&
            lse_err <= 1e-2 && visited == want;
  printf("%s %-22s %-11s B=%d H=%d Hk=%d Sq=%d Skv=%d %s: rel_l2=%.2e "
         "lse_err=%.1e dead_rows=%lld tiles=%llu/%llu nonfinite=%lld "
         "dead_bad=%lld pad_bad=%lld\n",
         ok ? "PASS" : "FAIL", va.name, mask_name[va.mask], c.B, c.H, c.Hk,
         c.Sq, c.Skv, c.bshd ? "bshd" : "bhsd", rel, lse_err, dead_rows,
         visited, want, bad, dead_bad, pad_bad);
  bf.release();
  return ok;
}

/* ----------------------------------------------------------- timing */

static void time_case(const Case &c, std::mt19937 &rng) {
  const Variant &va = *c.v;
  Buffers bf;
  alloc_buffers(c, bf, rng);
  attn_params p = make_params(c, bf);
  p.tiles_visited = nullptr;
  for (int w = 0; w < 3; w++)
    launch(c, p);
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int r = 0; r < 20; r++) {
    CHECK(cudaEventRecord(e0));
    launch(c, p);
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  double med = ms[ms.size() / 2];
  double flops = 2.0 * c.B * c.H * (double)c.Sq * c.Skv * (va.dqk + va.dv);
  if (va.mask == MK_CAUSAL)
    flops /= 2;
  printf("TIME %-22s B=%d H=%d S=%d D=%d %s: median %.3f ms (min %.3f) "
         "%.1f TFLOP/s\n",
         va.name, c.B, c.H, c.Sq, va.dqk, mask_name[va.mask], med, ms[0],
         flops / (med * 1e-3) / 1e12);
  CHECK(cudaEventDestroy(e0));
  CHECK(cudaEventDestroy(e1));
  bf.release();
}

/* ------------------------------------------------------------- main */

int main(int argc, char **argv) {
  int dev = 0, ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("SKIP: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  printf("device: %s, sm_%d%d, %d SMs, %zu bytes smem/block opt-in\n",
         prop.name, prop.major, prop.minor, prop.multiProcessorCount,
         prop.sharedMemPerBlockOptin);
  std::mt19937 rng(argc > 1 ? (unsigned)atoi(argv[1]) : 12345u);

  /* The emitter's table must pick these tiles and count the same bytes. */
  int passed = 0, failed = 0;
  for (const Variant *v : variants) {
    Sm80Config cfg;
    int r = tmpl_sm80_config(v->dqk, v->dv, 2, 2, v->table_sm, &cfg);
    bool ok = r == 0 && cfg.bm == v->bm && cfg.bn == v->bn &&
              cfg.warps == v->warps && cfg.smem_bytes == v->smem;
    printf("%s table %-22s sm_%d: bm=%d bn=%d warps=%d smem=%d (template %d)\n",
           ok ? "PASS" : "FAIL", v->name, v->table_sm, cfg.bm, cfg.bn,
           cfg.warps, cfg.smem_bytes, v->smem);
    ok ? passed++ : failed++;
  }

  const Case cases[] = {
      /* v, B, H, Hk, Sq, Skv, bshd, mag, window, softcap, out_scale */
      {&plain_d64::info, 2, 3, 3, 200, 333, false, 1.f, 0, 0, 1.f},
      {&plain_d64::info, 1, 2, 1, 1, 77, true, 2.f, 0, 0, 1.f},
      {&plain_d128::info, 1, 4, 2, 257, 130, true, 1.f, 0, 0, 1.f},
      {&plain_d128::info, 2, 2, 2, 64, 1500, false, 2.f, 0, 0, 0.5f},
      {&plain_d256::info, 2, 2, 1, 150, 411, false, 1.f, 0, 0, 1.f},
      {&plain_d256_sm86::info, 1, 2, 2, 130, 300, true, 1.f, 0, 0, 1.f},
      {&causal_d128::info, 2, 4, 4, 333, 333, false, 1.f, 0, 0, 1.f},
      {&causal_d128::info, 1, 4, 1, 190, 450, true, 1.f, 0, 0, 1.f},
      {&causal_d128::info, 1, 2, 2, 300, 100, false, 1.f, 0, 0, 1.f},
      {&causal_d64_f16_f32out::info, 1, 8, 2, 513, 700, true, 1.f, 0, 0, 1.f},
      {&causal_d256_sm80::info, 1, 2, 2, 200, 200, false, 1.f, 0, 0, 1.f},
      {&causal_d256_sm80::info, 1, 2, 1, 100, 37, true, 1.f, 0, 0, 1.f},
      {&softcap_d128_f16::info, 2, 2, 2, 100, 1000, false, 3.f, 0, 30.f, 0.75f},
      {&window_d64::info, 1, 2, 2, 400, 600, false, 1.f, 40, 0, 1.f},
      {&window_d64::info, 1, 2, 1, 700, 700, true, 1.f, 100, 0, 1.f},
      {&inner_d128v64_nolse::info, 1, 3, 3, 77, 999, false, 1.f, 0, 0, 1.f},
      {&plain_d128_bn64::info, 1, 4, 2, 257, 300, true, 1.f, 0, 0, 1.f},
  };
  for (const Case &c : cases) {
    if ((size_t)c.v->smem > prop.sharedMemPerBlockOptin) {
      printf("SKIP %s: needs %d bytes of shared memory\n", c.v->name, c.v->smem);
      continue;
    }
    run_case(c, rng) ? passed++ : failed++;
  }

  const Case big[] = {
      {&plain_d128::info, 4, 16, 16, 4096, 4096, false, 1.f, 0, 0, 1.f},
      {&causal_d128::info, 4, 16, 16, 4096, 4096, false, 1.f, 0, 0, 1.f},
      {&plain_d64::info, 4, 16, 16, 4096, 4096, false, 1.f, 0, 0, 1.f},
      {&plain_d256::info, 4, 16, 16, 4096, 4096, false, 1.f, 0, 0, 1.f},
      {candidates[0], 4, 16, 16, 4096, 4096, false, 1.f, 0, 0, 1.f},
      {&plain_d128::info, 4, 16, 16, 4096, 4096, false, 1.f, 0, 0, 1.f},
  };
  if (getenv("ATTN_NO_TIMING") == nullptr)
    for (const Case &c : big)
      time_case(c, rng);

  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
