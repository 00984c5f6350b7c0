/*
 * ring.cuh: the element-wise kernels of partial results (runtime/partials.c):
 * for context parallelism (runtime/ring.c) folding one shard's partial
 * (O, lse) into the running result, adding a shard's gradients into f32
 * accumulators and storing f32 results in the caller's type; for
 * attn_merge_partials, merging up to RING_MAX_PARTS partials at once. A
 * program of its own (NVRTC, through the kernel cache), loaded once per
 * context and target on first use. No #include.
 *
 * Every tensor is dense [P][S][D] (P: the leading dims flattened, S: the
 * shard's positions, D: the last dim; lse and the other row statistics
 * have D 1), and a kernel works on rows lo .. lo + m - 1 of every p: one
 * piece of a zigzag shard, or all of a contiguous one. Element types:
 * RING_F32, RING_BF16, RING_F16 (attn_dtype's codes).
 */
#define RING_F16 1
#define RING_BF16 2
#define RING_F32 3
#define RING_MAX_PARTS 16 /* attn.h's ATTN_MERGE_MAX_PARTS */

static __device__ __forceinline__ float ring_load(const void *p, int type, long long i) {
  if (type == RING_F32) return ((const float *)p)[i];
  unsigned short h = ((const unsigned short *)p)[i];
  if (type == RING_BF16) return __uint_as_float((unsigned)h << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

static __device__ __forceinline__ void ring_store(void *p, int type, long long i, float x) {
  if (type == RING_F32) {
    ((float *)p)[i] = x;
    return;
  }
  unsigned short h;
  if (type == RING_BF16) asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  else asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  ((unsigned short *)p)[i] = h;
}

/* One warp per row (p, lo + r): the partial (o_part, lse_part) of a shard
 * folded into the running (o_acc, lse_acc), both normalized:
 *   lse = log(exp(lse_acc) + exp(lse_part)),
 *   o   = exp(lse_acc - lse) o_acc + exp(lse_part - lse) o_part,
 * computed from the larger of the two so nothing overflows. A side with
 * lse -inf (no key reached the row) has weight 0 and its O is not read,
 * so a row no shard reaches stays o 0, lse -inf. */
extern "C" __global__ void attn_ring_merge(float *o_acc, float *lse_acc, const void *o_part,
                                           int o_type, const float *lse_part, long long P,
                                           long long S, long long D, long long lo, long long m) {
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const float ninf = -__int_as_float(0x7f800000);
  /* Warps stride over the rows: any number of rows in one grid. */
  for (long long row = (long long)blockIdx.x * warps + threadIdx.x / 32; row < P * m;
       row += (long long)gridDim.x * warps) {
    const long long at = (row / m) * S + lo + row % m; /* the row in [P][S] */
    const float la = lse_acc[at], lp = lse_part[at];
    const float top = fmaxf(la, lp);
    if (top == ninf) continue; /* both empty */
    const float wa = la == ninf ? 0.f : expf(la - top);
    const float wp = lp == ninf ? 0.f : expf(lp - top);
    const float sum = wa + wp;
    const float ca = wa / sum, cp = wp / sum;
    float *oa = o_acc + at * D;
    const long long base = at * D;
    for (long long d = lane; d < D; d += 32) {
      float x = ca > 0.f ? ca * oa[d] : 0.f;
      if (cp > 0.f) x += cp * ring_load(o_part, o_type, base + d);
      oa[d] = x;
    }
    __syncwarp();
    if (lane == 0) lse_acc[at] = top + logf(sum);
    __syncwarp(); /* (the next row's reads are of other cells; kept for clarity) */
  }
}

/* acc[p, lo + r, :] += part[p, lo + r, :] (a shard's gradient into f32). */
extern "C" __global__ void attn_ring_add(float *acc, const void *part, int type, long long P,
                                         long long S, long long D, long long lo, long long m) {
  const long long n = P * m * D;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n;
       e += (long long)gridDim.x * blockDim.x) {
    const long long row = e / D, d = e % D;
    const long long i = ((row / m) * S + lo + row % m) * D + d;
    acc[i] += ring_load(part, type, i);
  }
}

/* out[i] = src[i] in out's type, for n elements (the results home). */
extern "C" __global__ void attn_ring_store(void *out, int type, const float *src, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    ring_store(out, type, i, src[i]);
}

/* The partials of attn_merge_partials, by value (kernel parameters). */
struct RingParts {
  const void *o[RING_MAX_PARTS];
  const float *lse[RING_MAX_PARTS];
};

/* One warp per row: n partials (o_i, lse_i) of attention over disjoint key
 * sets merged into the attention over their union (the same weights as
 * attn_ring_merge, all parts at once). Each lane reads every part's
 * elements before writing its own, and lane 0 writes lse after the warp
 * has read them, so o and lse may be the first part's buffers. */
extern "C" __global__ void attn_ring_merge_n(RingParts parts, int n, int part_type, void *o,
                                             int o_type, float *lse, long long rows,
                                             long long D) {
  const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const float ninf = -__int_as_float(0x7f800000);
  for (long long row = (long long)blockIdx.x * warps + threadIdx.x / 32; row < rows;
       row += (long long)gridDim.x * warps) {
    float l[RING_MAX_PARTS], top = ninf;
    for (int i = 0; i < n; i++) {
      l[i] = parts.lse[i][row];
      top = fmaxf(top, l[i]);
    }
    float sum = 0.f;
    for (int i = 0; i < n; i++) {
      l[i] = top == ninf || l[i] == ninf ? 0.f : expf(l[i] - top); /* now the weight */
      sum += l[i];
    }
    for (long long d = lane; d < D; d += 32) {
      float x = 0.f;
      for (int i = 0; i < n; i++)
        if (l[i] > 0.f) x += l[i] * ring_load(parts.o[i], part_type, row * D + d);
      ring_store(o, o_type, row * D + d, sum > 0.f ? x / sum : 0.f);
    }
    __syncwarp();
    if (lane == 0 && lse) lse[row] = sum > 0.f ? top + logf(sum) : ninf;
  }
}
