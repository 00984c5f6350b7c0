/*
 * bwd_sm80.cuh: the portable backward flash-attention template (sm_80 and
 * later, Hopper included), FlashAttention-2 style, mma.sync m16n8k16.
 *
 * Device-only text for NVRTC: it includes nothing. Pasted like the forward
 * templates, inside a graph's namespace after the ATTN_* definitions (it
 * may share the namespace with a forward template: its own names carry the
 * bwd80_ prefix, the hooks are only declared again).
 *
 * Three kernels (docs/language.md, "Gradients", has the math):
 * - attn_bwd_sm80_delta: delta_i = rowsum(dO_i * O_i), a few threads per
 *   query row in 16-byte vectors; they also zero the row of the f32 dQ
 *   accumulator.
 * - attn_bwd_sm80_main: one CTA per (key tile of 64, head, batch), four
 *   warps of 16 keys. K and V stay in shared memory; the query tiles (64
 *   rows of Q and dO, with lse and delta) the masks let through stream
 *   past. Per query tile, with the roles of the forward swapped (keys are
 *   the M dimension):
 *     S^T = K Q^T -> attn_score, masks -> P^T = exp(S^T - lse) (masked 0)
 *     dV += Pd^T dO               (Pd: P times dropout's factor)
 *     dP^T = V dO^T
 *     dS^T = P^T o (dP^T * factor - delta)
 *     dRaw^T = attn_bwd_draw(dS^T, ...) (the derived chain rule)
 *     dK += dRaw^T Q
 *     dQ += dRaw K    (dRaw^T through shared memory, f32 atomics)
 *   dK and dV are stored at the end (f32 atomics into accumulators when
 *   several query heads share a K/V head).
 * - attn_bwd_sm80_convert: dQ's accumulator to dq's dtype, times the
 *   folded scale; attn_bwd_sm80_convert_kv does dK/dV's for GQA.
 * Everything computed is linear in dS, and P of a masked element or a
 * fully masked row is exactly 0, so such rows give exact zeros, never NaN.
 *
 * Shared-memory tiles are rows of 16-byte chunks swizzled by (row & 7)
 * like the forward's; every tile row is a multiple of 128 bytes.
 */

/* ------------------------------------------------------ configuration */

#if !defined(ATTN_D_QK) || !defined(ATTN_D_V)
#error "bwd_sm80.cuh needs ATTN_D_QK, ATTN_D_V"
#endif
#if !defined(ATTN_TQ) || !defined(ATTN_TK) || !defined(ATTN_TV) ||         \
    !defined(ATTN_TO) || !defined(ATTN_TLSE) || !defined(ATTN_TDO) ||       \
    !defined(ATTN_TDELTA) || !defined(ATTN_TDQA) || !defined(ATTN_TDQ) ||   \
    !defined(ATTN_TDK) || !defined(ATTN_TDV) || !defined(ATTN_TDKA) ||      \
    !defined(ATTN_TDVA)
#error "bwd_sm80.cuh needs the slots ATTN_TQ/TK/TV/TO/TLSE/TDO/TDELTA/TDQA/TDQ/TDK/TDV/TDKA/TDVA"
#endif

/* The tiles' widths (attn_layout.h, attn_bwd_head_tile: 64, 128 or 256),
 * which the f32 accumulators' rows share (their padding stays zero); loads
 * from and stores to the graph's tensors take ATTN_D_QK / ATTN_D_V
 * columns, the rest of a tile being zeros. */
constexpr int bwd80_dqk = attn_bwd_head_tile(ATTN_D_QK, ATTN_D_V);
constexpr int bwd80_dv = attn_bwd_head_tile(ATTN_D_V, ATTN_D_QK);
constexpr int bwd80_bn = 64; /* keys per CTA, 16 per warp */
constexpr int bwd80_bm = 64; /* queries per streamed tile */
[[maybe_unused]] constexpr int bwd80_warps = 4; /* (unused at D 256: no main kernel) */
[[maybe_unused]] constexpr int bwd80_threads = 128;
/* q, k, v and dO as the kernels read them: 16-bit (ATTN_BWD_T*: the
 * graph's own tensors, or the FP8 backward's copies of FP8 ones). */
[[maybe_unused]] constexpr int bwd80_tq = ATTN_BWD_TQ, bwd80_tk = ATTN_BWD_TK,
                               bwd80_tv = ATTN_BWD_TV;
constexpr int bwd80_to = ATTN_TO, bwd80_tlse = ATTN_TLSE, bwd80_tdo = ATTN_BWD_TDO;
constexpr int bwd80_tdelta = ATTN_TDELTA, bwd80_tdqa = ATTN_TDQA, bwd80_tdq = ATTN_TDQ;
/* dK / dV slots: -1 when the graph has no such gradient. The f32
 * accumulators (TDKA/TDVA) are used only when H != Hk. */
constexpr int bwd80_tdk = ATTN_TDK, bwd80_tdv = ATTN_TDV;
constexpr int bwd80_tdka = ATTN_TDKA, bwd80_tdva = ATTN_TDVA;

/* Element types (hooks.cuh); O's is read by the delta pre-pass. The
 * MMAs' type is the forward's (ATTN_BWD_IN_BF16), but bf16 in the FP8
 * backward: every FP8 value is exact in it, and its range keeps dS and the
 * descaled gradients, which can be tiny, off f16's subnormals. The
 * gradients' storage (attn_store_pair's kinds: 0 bf16, 1 f16, 2 f32, 3
 * e4m3, 4 e5m2) is the 16-bit input type but in the FP8 backward. */
constexpr bool bwd80_in_bf16 = ATTN_BWD_IN_BF16 != 0;
constexpr int bwd80_out_kind = attn_out_kind;
[[maybe_unused]] constexpr int bwd80_dq_kind = ATTN_BWD_DQ_KIND;
[[maybe_unused]] constexpr int bwd80_dk_kind = ATTN_BWD_DK_KIND;
[[maybe_unused]] constexpr int bwd80_dv_kind = ATTN_BWD_DV_KIND;

/* The FP8 backward (compiler/match_bwd.c; docs/language.md "FP8
 * gradients"): FP8 q, k, v or o, P scaled or rounded before P V, o
 * scaled, a grad block. Its kernels read 16-bit copies of the FP8 tensors
 * (attn_bwd_sm80_convert8 writes them, exactly) and O in FP8 where it is
 * stored so, and call the hooks below (compiler/emit_bwd.c writes them
 * after this text): dP's, dV's and delta's factors (P's scale, o's scale,
 * dO's descale, fixed per (b, h)), P rounded again for dV as P V read it
 * (attn_p_value, from the normalized P), dS and each stored gradient as
 * the grad block makes them, and the block's amax outputs, maxed per warp
 * into their f32[1] (bits of |x|: attn_amax_bits). Dense tensors and the
 * default (atomic) mode only. */
struct bwd80_factors {
  float dp, dv, delta;
};
#define BWD80_AMAX_MAX 8
#if defined(ATTN_BWD_FP8)
constexpr bool bwd80_fp8 = true;
enum : int {
  bwd80_namax_do = ATTN_BWD_NAMAX_DO, bwd80_namax_ds = ATTN_BWD_NAMAX_DS,
  bwd80_namax_dq = ATTN_BWD_NAMAX_DQ, bwd80_namax_dk = ATTN_BWD_NAMAX_DK,
  bwd80_namax_dv = ATTN_BWD_NAMAX_DV
};
static __device__ __forceinline__ float attn_bwd_do_value(float x, const attn_params &p);
static __device__ __forceinline__ bwd80_factors attn_bwd_factors(int b, int h,
                                                                 const attn_params &p);
static __device__ __forceinline__ float attn_bwd_ds_value(float x, const attn_params &p);
static __device__ __forceinline__ float attn_bwd_ds_post(const attn_params &p);
#if defined(ATTN_BWD_FP8_MMA)
static __device__ __forceinline__ float attn_bwd_ds_unrounded(float x, const attn_params &p);
#endif
static __device__ __forceinline__ float attn_bwd_store_dq(float x, const attn_params &p);
static __device__ __forceinline__ float attn_bwd_store_dk(float x, const attn_params &p);
static __device__ __forceinline__ float attn_bwd_store_dv(float x, const attn_params &p);
#define BWD80_AMAX_DECL(tag)                                                                  \
  static __device__ __forceinline__ void attn_bwd_amax_##tag(float x,                      \
                                                             unsigned(&m)[BWD80_AMAX_MAX], \
                                                             const attn_params &p);        \
  static __device__ __forceinline__ void attn_bwd_amax_commit_##tag(                       \
      const unsigned(&m)[BWD80_AMAX_MAX], const attn_params &p);
BWD80_AMAX_DECL(do)
BWD80_AMAX_DECL(ds)
BWD80_AMAX_DECL(dq)
BWD80_AMAX_DECL(dk)
BWD80_AMAX_DECL(dv)
#undef BWD80_AMAX_DECL
#if defined(ATTN_BWD_FP8_MMA)
/* bwd_sm90's FP8 mode: dS's value is R(a dS) b, a and b fixed for the call
 * (bwd_fp8_mma_refusal). Where no amax output needs dS itself (every amax
 * of dS is amax(ds), or there is none), a is folded into dP's factor and
 * delta (the delta pass), so the kernel computes a dS directly: one
 * multiply an element less (bwd80_ds), the amax outputs over |a dS| divided
 * by |a| once before their commit (bwd80_amax_unscale). a is taken nonzero
 * and finite (docs/language.md). */
constexpr bool bwd80_ds_fold = ATTN_BWD_NAMAX_DS == 0 || ATTN_BWD_AMAX_DS_BARE;
#endif
#else
constexpr bool bwd80_fp8 = false;
enum : int {
  bwd80_namax_do = 0, bwd80_namax_ds = 0, bwd80_namax_dq = 0, bwd80_namax_dk = 0,
  bwd80_namax_dv = 0
};
#endif
#if !defined(ATTN_BWD_FP8_MMA)
constexpr bool bwd80_ds_fold = false;
#endif
/* dS's scale a where bwd80_ds_fold folds it, else 1. */
[[maybe_unused]] static __device__ __forceinline__ float bwd80_ds_fold_factor(const attn_params &p) {
#if defined(ATTN_BWD_FP8_MMA)
  if constexpr (bwd80_ds_fold)
    return attn_bwd_ds_unrounded(1.f, p);
#endif
  (void)p;
  return 1.f;
}
/* The gradients' running maxima (per thread) start at 0 (unused but in
 * the FP8 backward). */
#define BWD80_AMAX_ZERO(m) [[maybe_unused]] unsigned m[BWD80_AMAX_MAX] = {}

/* The main kernel and the ordered dQ tiles take head dims 64 and 128
 * (their accumulators); at 256 (bwd_sm90's split-D mode) this text
 * provides only the row kernels, hooks and helpers. */
#define BWD80_MAIN (ATTN_D_QK <= 128 && ATTN_D_V <= 128)
static_assert(attn_head_dim_ok(ATTN_D_QK) && attn_head_dim_ok(ATTN_D_V),
              "head dims: multiples of 8 up to 256");

/* Shared memory: K, V (the CTA's keys), Q, dO (the streamed query tile),
 * dRaw^T (keys x queries, for dQ), then lse and delta of the query tile. */
/* (abi/attn_layout.h, which compiler/match_bwd.c sizes launches by.) */
constexpr attn_bwd80_layout bwd80_layout =
    attn_bwd80_layout_of(bwd80_bn, bwd80_bm, bwd80_dqk, bwd80_dv);
constexpr int bwd80_k_bytes = bwd80_layout.k_bytes;
constexpr int bwd80_v_bytes = bwd80_layout.v_bytes;
constexpr int bwd80_q_bytes = bwd80_layout.q_bytes;
constexpr int bwd80_do_bytes = bwd80_layout.do_bytes;
constexpr int bwd80_ds_bytes = bwd80_layout.ds_bytes;
constexpr int attn_bwd_sm80_smem_bytes = bwd80_layout.total;

/* The hooks: templates/hooks.cuh (pasted before this text), and these. */

/* dRaw for one score element from dS (the gradient at the softmax's
 * input) and the raw q.k product, by the derived chain rule; a factor
 * fixed for the whole graph is left out and given by attn_bwd_scale.
 * Also accumulates any bias gradients of the element. */
__device__ __forceinline__ float attn_bwd_draw(float ds, float acc, int b, int h,
                                               int i, int j, const attn_params &p);
__device__ __forceinline__ float attn_bwd_scale(const attn_params &p);

/* Deterministic mode (attn_call_set_deterministic): the runtime leaves dQ's
 * accumulator slot null. Then the main kernel's grid has ceil(Sq / 64)
 * extra CTAs, each of which computes one query tile's dQ by visiting the
 * key tiles in order (no atomics), and with GQA the dK/dV accumulators are
 * per query head, [B, H, Skv, D], summed in head order by convert_kv. */
static __device__ __forceinline__ bool bwd80_deterministic(const attn_params &p) {
  return p.t[bwd80_tdqa].ptr == nullptr;
}

/* dQ's accumulator row of query row i. bwd_sm90's FP8 mode stores an odd
 * row of each 8 four rows over (its 8-byte stores then hit 32 banks a
 * half-warp without trading registers; bwd_sm90.cuh, store_dq): row i ^ 4
 * for odd i, within the 8 rows, so the accumulator has Sq rounded up to 8
 * rows (compiler/plan.c). The delta pass zeroes and the convert pass
 * reads through it. */
static __device__ __forceinline__ int bwd80_dq_row(int i) {
#if defined(ATTN_BWD_FP8_MMA)
  return i ^ ((i & 1) << 2);
#else
  return i;
#endif
}

/* Row (b, h, 0) of a dense workspace slice [B, heads, rows, cols] (bound
 * by the runtime: launch.c, bind_slice) through its strides, so the
 * same code addresses a packed launch's view of it (below: batch stride
 * 0, rows from a sequence's first). */
template <class T>
static __device__ __forceinline__ T *bwd80_slice_rows(const attn_tensor_arg &t, int b, int h) {
  return (T *)t.ptr + b * t.stride[0] + h * t.stride[1];
}

#if defined(ATTN_PACKED_Q)
/* A row pass's parameters: every token row (bwd80_rows_view). */
#define BWD80_ROWS_VIEW(p_in) const attn_params p = bwd80_rows_view(p_in)
/* Packed sequences (hooks.cuh): q, o, lse, dO and dq hold the sequences'
 * query rows, k, v, dk and dv their key rows; the workspace slices
 * (delta, dQ's accumulator, GQA's dK/dV accumulators) are [1, heads,
 * tokens, cols]. Sequence b (query rows q0.., lq of them, key rows k0..,
 * lk) as one dense batch entry of Sq = lq, Skv = lk, every tensor
 * rebased: the kernels then run unchanged, masks and dropout seeing the
 * sequence's own positions. A null slot (dQ's accumulator in
 * deterministic mode, the dK/dV accumulators without GQA) stays null. */
static __device__ __forceinline__ void bwd80_slice_from(attn_tensor_arg &t, int row0, int rows) {
  if (t.ptr == nullptr)
    return;
  t.ptr = (float *)t.ptr + row0 * t.stride[2];
  t.stride[0] = 0, t.size[0] = 1, t.size[2] = rows;
}

static __device__ __forceinline__ attn_params bwd80_packed_view(const attn_params &p, int q0,
                                                                int lq, int k0, int lk) {
  attn_params v = p;
  v.Sq = lq;
  v.Skv = lk;
  /* One tensor in two roles is rebased once (hooks.cuh, attn_packed_work). */
  attn_packed_rows<2>(v.t[bwd80_tq], q0, lq);
  if (bwd80_tk != bwd80_tq)
    attn_packed_rows<2>(v.t[bwd80_tk], k0, lk);
  if (bwd80_tv != bwd80_tk && bwd80_tv != bwd80_tq)
    attn_packed_rows<2>(v.t[bwd80_tv], k0, lk);
  attn_packed_rows<bwd80_out_kind == 2 ? 4 : 2>(v.t[bwd80_to], q0, lq);
  attn_packed_rows<4, true>(v.t[bwd80_tlse], q0, lq);
  attn_packed_rows<2>(v.t[bwd80_tdo], q0, lq);
  if constexpr (bwd80_tdq >= 0)
    attn_packed_rows<2>(v.t[bwd80_tdq >= 0 ? bwd80_tdq : 0], q0, lq);
  if constexpr (bwd80_tdk >= 0)
    attn_packed_rows<2>(v.t[bwd80_tdk >= 0 ? bwd80_tdk : 0], k0, lk);
  if constexpr (bwd80_tdv >= 0)
    attn_packed_rows<2>(v.t[bwd80_tdv >= 0 ? bwd80_tdv : 0], k0, lk);
  bwd80_slice_from(v.t[bwd80_tdelta], q0, lq);
  bwd80_slice_from(v.t[bwd80_tdqa], q0, lq);
  if constexpr (bwd80_tdka >= 0)
    bwd80_slice_from(v.t[bwd80_tdka >= 0 ? bwd80_tdka : 0], k0, lk);
  if constexpr (bwd80_tdva >= 0)
    bwd80_slice_from(v.t[bwd80_tdva >= 0 ? bwd80_tdva : 0], k0, lk);
  return v;
}

/* The row passes (delta, convert, convert_kv) need no sequence: every
 * token row as one batch entry (their grid's batch dimension is 1). */
static __device__ __forceinline__ attn_params bwd80_rows_view(const attn_params &p) {
  return bwd80_packed_view(p, 0, p.Sq, 0, p.Skv);
}

/* Sequence b's view (the sink gradient's rows). */
static __device__ __forceinline__ attn_params bwd80_seq_view(const attn_params &p, int b) {
  int q0, lq, k0, lk;
  attn_seq_rows(p.t[ATTN_PACKED_Q], b, p.Sq, q0, lq);
  attn_seq_rows(p.t[ATTN_PACKED_KV], b, p.Skv, k0, lk);
  return bwd80_packed_view(p, q0, lq, k0, lk);
}

/* The main kernel's CTA x of a packed launch: key tiles of BN over k's
 * sequences (attn_packed_find), then, in deterministic mode, dQ's query
 * tiles of 64 over q's. Its sequence b, the tile within it (key tile,
 * or *dq_tile's query tile), the sequence's first query row q0 (bwd_sm90's
 * TMA coordinates) and its view; false when no sequence owns the tile
 * (the CTA has nothing to do). */
template <int BN>
static __device__ __forceinline__ bool bwd80_packed_item(int x, const attn_params &p, int &b,
                                                         int &tile, bool &dq_tile, int &q0,
                                                         attn_params &v) {
  const int n_key = (p.Skv + BN - 1) / BN + p.B;
  int lq, k0, lk;
  dq_tile = x >= n_key;
  if (!dq_tile) {
    tile = attn_packed_find<BN>(x, p.t[ATTN_PACKED_KV], p.Skv, p.B, b, k0, lk);
    attn_seq_rows(p.t[ATTN_PACKED_Q], b, p.Sq, q0, lq);
    if (p.B <= 0 || tile < 0 || tile * BN >= lk)
      return false;
  } else {
    tile = attn_packed_find<64>(x - n_key, p.t[ATTN_PACKED_Q], p.Sq, p.B, b, q0, lq);
    attn_seq_rows(p.t[ATTN_PACKED_KV], b, p.Skv, k0, lk);
    if (p.B <= 0 || tile < 0 || tile * 64 >= lq)
      return false;
  }
  v = bwd80_packed_view(p, q0, lq, k0, lk);
  return true;
}
#else
#define BWD80_ROWS_VIEW(p_in) const attn_params &p = p_in
#endif

#if defined(ATTN_BWD_BIAS)
/* Bias gradients (emitted by compiler/emit_bwd.c after this text, for the
 * graphs that declare grad on a bias). ATTN_BWD_NRED: how many of them are
 * summed in registers (biases over b and h only). */
constexpr int bwd80_nred = ATTN_BWD_NRED > 0 ? ATTN_BWD_NRED : 1;
/* attn_bwd_draw, plus the element's contribution to every bias gradient:
 * stored (direct), atomically added, or added to red. */
static __device__ __forceinline__ float attn_bwd_draw_bias(float ds, float acc, int b, int h,
                                                           int i, int j, const attn_params &p,
                                                           float (&red)[bwd80_nred]);
/* Lane 0 of each warp, at the end of the main kernel: red summed over the
 * warp, added to the scratch. */
static __device__ __forceinline__ void attn_bwd_bias_flush(const float (&red)[bwd80_nred], int b,
                                                           int h, const attn_params &p);
/* A warp's end of a key tile: its partial sums of the biases over b and h
 * only summed over the warp, added by lane 0 (not in deterministic mode,
 * where the hook stored every element's contribution). */
static __device__ __forceinline__ void bwd80_flush_red(float (&red)[bwd80_nred], int b, int h,
                                                       int lane, bool det, const attn_params &p) {
#if ATTN_BWD_NRED > 0
#pragma unroll
  for (int r = 0; r < bwd80_nred; ++r)
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      red[r] += __shfl_xor_sync(0xffffffffu, red[r], o);
  if (lane == 0 && !det)
    attn_bwd_bias_flush(red, b, h, p);
#else
  (void)red, (void)b, (void)h, (void)lane, (void)det, (void)p;
#endif
}
/* Warp (b, h, i) of the delta pre-pass: zeroes row (b, h, i) of every
 * directly written bias gradient. */
static __device__ __forceinline__ void attn_bwd_bias_init(int b, int h, int i, int lane,
                                                          const attn_params &p);
/* Warp (b, h, i) of the convert pass: the scratch of the accumulated bias
 * gradients to their tensors (in deterministic mode: summed in order). */
static __device__ __forceinline__ void attn_bwd_bias_finish(int b, int h, int i, int lane,
                                                            const attn_params &p);
#endif

/* PTX wrappers: templates/ptx.cuh (once per unit), plus these. */

[[maybe_unused]] static __device__ __forceinline__ void bwd80_cp_async_wait_all() {
  attn_cp_async_commit();
  attn_cp_async_wait<0>();
}

/* Two floats to two 16-bit values in one register, lo in the low half. */
static __device__ __forceinline__ unsigned bwd80_pack(float lo, float hi) {
  return attn_pack2<bwd80_in_bf16>(lo, hi);
}

static __device__ __forceinline__ float bwd80_to_f32(unsigned short x) {
  if constexpr (bwd80_in_bf16)
    return __uint_as_float((unsigned)x << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
  return f;
}

static __device__ __forceinline__ unsigned short bwd80_from_f32(float x) {
  return (unsigned short)(bwd80_pack(x, 0.f) & 0xffffu);
}

/* Element off of a gradient tensor of the named dtype (bias gradients). */
[[maybe_unused]] static __device__ __forceinline__ void bwd80_st_f32(void *ptr, long long off,
                                                                     float v) {
  ((float *)ptr)[off] = v;
}
[[maybe_unused]] static __device__ __forceinline__ void bwd80_st_bf16(void *ptr, long long off,
                                                                      float v) {
  unsigned short r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(v));
  ((unsigned short *)ptr)[off] = r;
}
[[maybe_unused]] static __device__ __forceinline__ void bwd80_st_f16(void *ptr, long long off,
                                                                     float v) {
  unsigned short r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(v));
  ((unsigned short *)ptr)[off] = r;
}

/* ------------------------------------------------ shared-memory tiles */

/* Byte address of element (r, c) of a swizzled tile with rows of
 * row_bytes (a multiple of 128); c a multiple of 8 for ldmatrix rows. */
[[maybe_unused]] static __device__ __forceinline__ unsigned bwd80_at(unsigned tile, int r, int c,
                                                                     int row_bytes) {
  return tile + (unsigned)(r * row_bytes + ((((c >> 3) ^ (r & 7))) << 4) + (c & 7) * 2);
}

/* Copies ROWS rows of D elements (the tile's width; the tensor has
 * D_REAL) starting at row0 into a swizzled tile; rows at or beyond
 * row_end and columns past D_REAL are zero-filled (garbage could be NaN). */
template <int ROWS, int D, int D_REAL>
static __device__ __forceinline__ void bwd80_load(unsigned dst, const unsigned short *base,
                                                  long long row_stride, int row0,
                                                  int row_end, int tid) {
  constexpr int chunks = D / 8;
#pragma unroll
  for (int e = tid; e < ROWS * chunks; e += bwd80_threads) {
    const int r = e / chunks, c = e % chunks;
    const bool in = row0 + r < row_end && (D_REAL == D || c * 8 < D_REAL);
    const unsigned short *src = base + (in ? (long long)(row0 + r) * row_stride + c * 8 : 0);
    attn_cp_async16(bwd80_at(dst, r, c * 8, D * 2), src, in ? 16 : 0);
  }
}

#if BWD80_MAIN /* (the mma.sync kernels' only) */
/* Fragment loads for one m16n8k16 step (lane l; docs/templates.md has the
 * register maps). A 16x16 from a tile stored [m][k]: */
static __device__ __forceinline__ void bwd80_a_mk(unsigned (&r)[4], unsigned tile, int m0,
                                                  int k0, int row_bytes, int lane) {
  attn_ldsm_x4(r, bwd80_at(tile, m0 + (lane & 15), k0 + (lane >> 4) * 8, row_bytes));
}
/* A 16x16 from a tile stored [k][m] (transposed on the way): */
static __device__ __forceinline__ void bwd80_a_km(unsigned (&r)[4], unsigned tile, int m0,
                                                  int k0, int row_bytes, int lane) {
  attn_ldsm_x4_trans(r, bwd80_at(tile, k0 + (lane & 7) + (lane >> 4) * 8,
                              m0 + ((lane >> 3) & 1) * 8, row_bytes));
}
/* B for two n8 tiles (n0.., n0+8..) from a tile stored [n][k]: r[0..1]
 * are the first tile's b0, b1, r[2..3] the second's. */
static __device__ __forceinline__ void bwd80_b_nk(unsigned (&r)[4], unsigned tile, int n0,
                                                  int k0, int row_bytes, int lane) {
  attn_ldsm_x4(r, bwd80_at(tile, n0 + (lane & 7) + (lane >> 4) * 8,
                            k0 + ((lane >> 3) & 1) * 8, row_bytes));
}
/* The same from a tile stored [k][n]: */
static __device__ __forceinline__ void bwd80_b_kn(unsigned (&r)[4], unsigned tile, int n0,
                                                  int k0, int row_bytes, int lane) {
  attn_ldsm_x4_trans(r, bwd80_at(tile, k0 + (lane & 7) + ((lane >> 3) & 1) * 8,
                              n0 + (lane >> 4) * 8, row_bytes));
}
#endif

/* ------------------------------------------------- the row passes */

/* The delta pre-pass and the convert passes take ATTN_BWD_ROWS_PER_CTA
 * rows of one (b, h) per CTA (grid (ceil(rows / that), heads, B)), and
 * blockDim.x / ATTN_BWD_ROWS_PER_CTA consecutive threads per row (bwd_sm80's
 * 128: 4, bwd_sm90's 256: 8), each moving whole 16-byte vectors of eight
 * elements (rows are 16-byte aligned, bind.c; head dims are multiples of
 * 64). One row per warp with 2-byte loads (sessions 1-6) left the H200 at
 * 2.2 TB/s: too few bytes in flight per warp at D 64. */
struct bwd80_row_slot {
  int row;   /* this thread's row in the (b, h) slice */
  int col;   /* its first element: 8 x its rank in the row */
  int step;  /* elements between its vectors: 8 x threads per row */
  int group; /* threads per row (a power of two, at most 32) */
};

static __device__ __forceinline__ bwd80_row_slot bwd80_row_of_thread() {
  const int group = (int)blockDim.x / ATTN_BWD_ROWS_PER_CTA;
  return {(int)blockIdx.x * ATTN_BWD_ROWS_PER_CTA + (int)threadIdx.x / group,
          8 * ((int)threadIdx.x % group), 8 * group, group};
}

/* Warps run the bias hooks one row per warp (their loops are warp-wide):
 * row r0 + w, r0 + w + warps, ... of the CTA's rows below n. */
#define BWD80_EACH_WARP_ROW(n, row, lane, body)                                      \
  do {                                                                               \
    const int lane = threadIdx.x & 31;                                               \
    for (int r_ = threadIdx.x >> 5; r_ < ATTN_BWD_ROWS_PER_CTA; r_ += blockDim.x >> 5) { \
      const int row = (int)blockIdx.x * ATTN_BWD_ROWS_PER_CTA + r_;                 \
      if (row < (n)) {                                                               \
        body;                                                                        \
      }                                                                              \
    }                                                                                \
  } while (0)

/* A 16-bit element of the input (bf16 = true) or f16 dtype as a float. */
template <bool bf16> static __device__ __forceinline__ float bwd80_half_to_f32(unsigned x) {
  if constexpr (bf16)
    return __uint_as_float(x << 16);
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)x));
  return f;
}

/* Eight 16-bit elements (one 16-byte vector) as floats. */
template <bool bf16>
static __device__ __forceinline__ void bwd80_ld8_half(const unsigned short *src, float (&x)[8]) {
  const uint4 v = *(const uint4 *)src;
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    x[2 * k] = bwd80_half_to_f32<bf16>(w[k] & 0xffffu);
    x[2 * k + 1] = bwd80_half_to_f32<bf16>(w[k] >> 16);
  }
}

/* Eight f32 elements (two 16-byte vectors). */
static __device__ __forceinline__ void bwd80_ld8_f32(const float *src, float (&x)[8]) {
  const float4 a = ((const float4 *)src)[0], c = ((const float4 *)src)[1];
  x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
  x[4] = c.x, x[5] = c.y, x[6] = c.z, x[7] = c.w;
}

/* Eight floats stored as one 16-byte vector of the input dtype. */
static __device__ __forceinline__ void bwd80_st8_half(unsigned short *dst, const float (&x)[8]) {
  *(uint4 *)dst = make_uint4(bwd80_pack(x[0], x[1]), bwd80_pack(x[2], x[3]),
                             bwd80_pack(x[4], x[5]), bwd80_pack(x[6], x[7]));
}

/* Sum over the threads of a row (aligned groups of `group` lanes). */
static __device__ __forceinline__ float bwd80_row_sum(float x, int group) {
  for (int s = group >> 1; s > 0; s >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, s);
  return x;
}

/* The factor dQ and dK take after their products: the chain rule's folded
 * scale, and in the FP8 backward what dS's value left for after them
 * (attn_bwd_ds_post: its products read an FP8-exact dS). */
static __device__ __forceinline__ float bwd80_draw_scale(const attn_params &p) {
#if defined(ATTN_BWD_FP8)
  return attn_bwd_scale(p) * attn_bwd_ds_post(p);
#else
  return attn_bwd_scale(p);
#endif
}

/* dP's, dV's and delta's factors for (b, h): the FP8 backward's
 * (attn_bwd_factors), 1 elsewhere. */
static __device__ __forceinline__ bwd80_factors bwd80_factors_at(int b, int h,
                                                                 const attn_params &p) {
#if defined(ATTN_BWD_FP8)
  return attn_bwd_factors(b, h, p);
#else
  (void)b, (void)h, (void)p;
  return {1.f, 1.f, 1.f};
#endif
}

/* dS = P (dP f - delta) at one element of either main kernel (f: dP's
 * factor, attn_bwd_factors, in the FP8 backward). In the FP8 backward
 * dS's amax outputs see it first, then it becomes the grad block's value,
 * which dQ's and dK's products read (a zero dS, or one where P is 0,
 * stays as it is). PACKED (bwd_sm90's FP8 mode): the value before its FP8
 * rounding, which the caller's packing does. No branch: a branch per
 * element cost more than the conversion it skipped (and made ptxas load
 * the scale again in each). */
template <bool PACKED = false>
static __device__ __forceinline__ float bwd80_ds(float pe, float dpe, float delta, float f,
                                                 unsigned (&m)[BWD80_AMAX_MAX],
                                                 const attn_params &p) {
#if defined(ATTN_BWD_FP8)
  const float ds = pe * (dpe * f - delta);
#if defined(ATTN_BWD_FP8_MMA)
  if constexpr (PACKED) {
    /* The FP8 mode's dS value is dS times values fixed for the call
     * (bwd_fp8_mma_refusal), 0 where dS is (its scale finite): no test.
     * Its amax outputs skip only P's zeros (where dP - delta may not be
     * finite); a zero dS elsewhere changes no amax(ds), so bare ones
     * (ATTN_BWD_AMAX_DS_BARE) test P alone. One compare an element of
     * ~21 (was two: H200 ncu, session 25). With bwd80_ds_fold, f and delta
     * carry dS's scale a: ds is a dS already. */
    if constexpr (bwd80_namax_ds > 0)
      if (ATTN_BWD_AMAX_DS_BARE ? pe != 0.f : pe != 0.f && ds != 0.f)
        attn_bwd_amax_ds(ds, m, p);
    return bwd80_ds_fold ? ds : attn_bwd_ds_unrounded(ds, p);
  }
#endif
  const bool live = pe != 0.f && ds != 0.f;
  if constexpr (bwd80_namax_ds > 0)
    if (live)
      attn_bwd_amax_ds(ds, m, p);
  return live ? attn_bwd_ds_value(ds, p) : ds;
#else
  (void)f, (void)m, (void)p;
  return pe * (dpe - delta);
#endif
}

/* Element x of Pd (P after dropout) as dV's product reads it: in the FP8
 * backward scaled and rounded as P V read it (attn_p_value). */
static __device__ __forceinline__ float bwd80_pd(float x, float p_scale) {
#if defined(ATTN_BWD_FP8)
  if constexpr (attn_p_mod != 0)
    return attn_p_value(x, p_scale);
#endif
  (void)p_scale;
  return x;
}

/* An amax output's running maximum (attn_amax_bits) from this thread,
 * maxed over the warp's active lanes, into the f32[1] in slot `slot` (its
 * unsigned order is |x|'s, NaN above every number). */
[[maybe_unused]] static __device__ __forceinline__ void bwd80_amax_commit(unsigned bits, int slot,
                                                                          const attn_params &p) {
  const unsigned active = __activemask();
  bits = __reduce_max_sync(active, bits);
  if ((threadIdx.x & 31) == __ffs(active) - 1 && bits != 0u)
    attn_amax_atomic((unsigned *)p.t[slot].ptr, bits);
}

/* The first N running maxima (attn_amax_fold's bits of |x|) over |a|: an
 * amax of a x back to one of x (bwd80_ds_fold). NaN stays NaN. */
template <int N>
[[maybe_unused]] static __device__ __forceinline__ void bwd80_amax_unscale(
    unsigned (&m)[BWD80_AMAX_MAX], float a) {
#pragma unroll
  for (int k = 0; k < N; ++k)
    m[k] = __float_as_uint(__uint_as_float(m[k]) / fabsf(a));
}

#if defined(ATTN_BWD_FP8)
/* dK's and dV's amax outputs from this thread's running maxima (both main
 * kernels, after their stores; with GQA nothing was maxed there, and a
 * zero commits nothing). */
static __device__ __forceinline__ void bwd80_amax_commit_kv(const unsigned (&mdk)[BWD80_AMAX_MAX],
                                                            const unsigned (&mdv)[BWD80_AMAX_MAX],
                                                            const attn_params &p) {
  if constexpr (bwd80_namax_dk > 0)
    attn_bwd_amax_commit_dk(mdk, p);
  if constexpr (bwd80_namax_dv > 0)
    attn_bwd_amax_commit_dv(mdv, p);
}
#endif

/* Eight FP8 elements (8 bytes; e4m3 when E4M3 else e5m2) as floats. */
template <bool E4M3>
[[maybe_unused]] static __device__ __forceinline__ void bwd80_ld8_fp8(const unsigned char *src,
                                                                      float (&x)[8]) {
  const uint2 v = *(const uint2 *)src;
  const unsigned w[2] = {v.x, v.y};
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const unsigned char c = (unsigned char)(w[k >> 2] >> (8 * (k & 3)));
    x[k] = E4M3 ? attn_e4m3_to_f32(c) : attn_e5m2_to_f32(c);
  }
}

/* A gradient's element pair (x0, x1) at element offset off of its row, as
 * the FP8 backward stores it: the grad block's value (STORE), maxed into
 * its amax outputs (AMAX), in its storage type. */
template <int KIND, typename Store, typename Amax>
[[maybe_unused]] static __device__ __forceinline__ void
bwd80_store_grad(void *base, long long off, float x0, float x1, unsigned (&m)[BWD80_AMAX_MAX],
                 const attn_params &p, Store store, Amax amax) {
  amax(x0, m, p);
  amax(x1, m, p);
  attn_store_pair<KIND>(base, off, store(x0, p), store(x1, p));
}

/* Eight elements at off (a multiple of 8: rows are 16-byte aligned,
 * runtime/bind.c) likewise; FP8 ones as one 8-byte store from sm_89 on
 * (not four 2-byte ones). */
template <int KIND, typename Store, typename Amax>
[[maybe_unused]] static __device__ __forceinline__ void
bwd80_store_grad8(void *base, long long off, const float (&x)[8], unsigned (&m)[BWD80_AMAX_MAX],
                  const attn_params &p, Store store, Amax amax) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if constexpr (KIND == 3 || KIND == 4) {
    float y[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      amax(x[e], m, p);
      y[e] = store(x[e], p);
    }
    *(uint2 *)((unsigned char *)base + off) =
        make_uint2(attn_fp8x4<KIND == 3>(y[0], y[1], y[2], y[3]),
                   attn_fp8x4<KIND == 3>(y[4], y[5], y[6], y[7]));
    return;
  }
#endif
#pragma unroll
  for (int e = 0; e < 8; e += 2)
    bwd80_store_grad<KIND>(base, off + e, x[e], x[e + 1], m, p, store, amax);
}

/* Grid (ceil(Sq / ATTN_BWD_ROWS_PER_CTA), H, B): per query row
 * {delta = rowsum(dO o O), lse log2(e)}, dQ's accumulator row zeroed, and
 * the directly written bias gradients' rows zeroed. In the FP8 backward,
 * delta carries dO's descale (attn_bwd_factors), O may be FP8, and dO's
 * amax outputs are maxed here (every element of dO is read once). */
__device__ __forceinline__ void attn_bwd_sm80_delta(const attn_params &p_in) {
  BWD80_ROWS_VIEW(p_in);
  const bwd80_row_slot rs = bwd80_row_of_thread();
  const int i = rs.row, h = blockIdx.y, b = blockIdx.z;
  const bool live = i < p.Sq; /* every lane reaches the shuffles */
  const attn_tensor_arg &tdo = p.t[bwd80_tdo], &to = p.t[bwd80_to];
  float acc = 0.f;
  BWD80_AMAX_ZERO(mdo);
  if (live) {
#if defined(ATTN_BWD_FP8_MMA) /* (bwd_sm90's FP8 mode reads the FP8 dO itself) */
    const unsigned char *dor = (const unsigned char *)tdo.ptr + b * tdo.stride[0] +
                               h * tdo.stride[1] + (long long)i * tdo.stride[2];
#else
    const unsigned short *dor = (const unsigned short *)tdo.ptr + b * tdo.stride[0] +
                                h * tdo.stride[1] + (long long)i * tdo.stride[2];
#endif
    const long long oo = b * to.stride[0] + h * to.stride[1] + (long long)i * to.stride[2];
    for (int d = rs.col; d < ATTN_D_V; d += rs.step) {
      float g[8], o[8];
#if defined(ATTN_BWD_FP8_MMA)
      bwd80_ld8_fp8<ATTN_BWD_DO8 == 1>(dor + d, g);
#else
      bwd80_ld8_half<bwd80_in_bf16>(dor + d, g);
#endif
      if constexpr (bwd80_out_kind == 2)
        bwd80_ld8_f32((const float *)to.ptr + oo + d, o);
      else if constexpr (bwd80_out_kind >= 3)
        bwd80_ld8_fp8<bwd80_out_kind == 3>((const unsigned char *)to.ptr + oo + d, o);
      else
        bwd80_ld8_half<bwd80_out_kind == 0>((const unsigned short *)to.ptr + oo + d, o);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc += g[e] * o[e];
#if defined(ATTN_BWD_FP8)
      if constexpr (bwd80_namax_do > 0)
#pragma unroll
        for (int e = 0; e < 8; ++e)
          attn_bwd_amax_do(g[e], mdo, p);
#endif
    }
  }
  acc = bwd80_row_sum(acc, rs.group);
#if defined(ATTN_BWD_FP8)
  acc *= attn_bwd_factors(b, h, p).delta;
#if defined(ATTN_BWD_FP8_MMA)
  /* bwd_sm90's FP8 mode computes P times its scale s_p from the stats
   * (lse log2 e - log2 s_p), so that P's FP8 operand needs no multiply per
   * element, and dS as (s_p P)(dP f / s_p - delta / s_p): delta here over
   * s_p, f in the main kernel (bwd90_p_fold). */
  const float p_fold = attn_p_scale_value(b, h, p);
  acc = acc / p_fold * bwd80_ds_fold_factor(p); /* (and dS's scale: bwd80_ds_fold) */
#endif
  if constexpr (bwd80_namax_do > 0)
    attn_bwd_amax_commit_do(mdo, p);
#endif
  if (live) {
    /* Row i's {delta, lse * log2(e)}; a fully masked row's lse (-inf) is
     * stored as +inf, so exp2(x * log2(e) - it) is 0 for every x, -inf
     * included (bwd_sm90 tests nothing per element). */
    const attn_tensor_arg &tdl = p.t[bwd80_tdelta], &tl = p.t[bwd80_tlse];
    if (rs.col == 0) {
      const float lse = ((const float *)tl.ptr)[b * tl.stride[0] + h * tl.stride[1] +
                                                (long long)i * tl.stride[2]];
      float lse2 = lse == __int_as_float(0xff800000) ? __int_as_float(0x7f800000)
                                                      : lse * 1.4426950408889634f;
#if defined(ATTN_BWD_FP8_MMA)
      lse2 -= log2f(p_fold);
#endif
      *(float2 *)(bwd80_slice_rows<float>(tdl, b, h) + 2 * (long long)i) = make_float2(acc, lse2);
    }
    if (!bwd80_deterministic(p)) {
      float *dqa =
          bwd80_slice_rows<float>(p.t[bwd80_tdqa], b, h) + (long long)bwd80_dq_row(i) * bwd80_dqk;
      for (int d = rs.col; d < bwd80_dqk; d += rs.step) {
        ((float4 *)(dqa + d))[0] = make_float4(0.f, 0.f, 0.f, 0.f);
        ((float4 *)(dqa + d))[1] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
  }
#if defined(ATTN_BWD_BIAS)
  BWD80_EACH_WARP_ROW(p.Sq, row, lane, attn_bwd_bias_init(b, h, row, lane, p));
#endif
}

/* ------------------------------------- deterministic dQ (extra CTAs) */

#if BWD80_MAIN
/* dQ of query tile m (64 rows, 16 per warp) in a fixed order: the key
 * tiles the masks let through, in increasing order, each recomputing S,
 * P, dP and dRaw as the main kernel does (with queries as the M
 * dimension), dQ += dRaw K in registers, stored once at the end. Uses the
 * main kernel's shared memory: K, V (the current key tile), Q, dO, lse,
 * delta of the query tile. */
/* NAMED: run by bwd_sm90's two consumer warpgroups (their named barrier
 * 1 of 256 threads; the producer warpgroup has left), else by the whole
 * CTA (__syncthreads). */
template <bool NAMED = false>
static __device__ __forceinline__ void bwd80_cta_sync() {
  if constexpr (NAMED)
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
  else
    __syncthreads();
}

/* (b: the batch entry, or a packed launch's sequence, whose view p is.) */
template <bool NAMED = false>
static __device__ __forceinline__ void bwd80_dq_tile(const attn_params &p, int m, int b) {
#if defined(ATTN_BWD_FP8)
  /* The FP8 backward has no deterministic mode (its plan and the runtime
   * refuse it): this path lacks its dS hooks, so it must never run. */
  (void)p, (void)m, (void)b;
  __trap();
#else
  extern __shared__ __align__(128) unsigned char bwd80_smem[];
  const float neg_inf = __int_as_float(0xff800000);
  const float log2e = 1.4426950408889634f;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y;
  const int hk = h / (p.H / p.Hk);
  const int i0 = m * bwd80_bm;
  const int i_last = min(i0 + bwd80_bm, p.Sq) - 1;
  if (bwd80_tdq < 0 || i0 >= p.Sq)
    return;

  const attn_tensor_arg &tq = p.t[bwd80_tq], &tk = p.t[bwd80_tk], &tv = p.t[bwd80_tv];
  const attn_tensor_arg &tdo = p.t[bwd80_tdo];
  const unsigned short *qg = (const unsigned short *)tq.ptr + b * tq.stride[0] + h * tq.stride[1];
  const unsigned short *kg = (const unsigned short *)tk.ptr + b * tk.stride[0] + hk * tk.stride[1];
  const unsigned short *vg = (const unsigned short *)tv.ptr + b * tv.stride[0] + hk * tv.stride[1];
  const unsigned short *dog =
      (const unsigned short *)tdo.ptr + b * tdo.stride[0] + h * tdo.stride[1];
  const attn_tensor_arg &tl = p.t[bwd80_tlse];
  const float *lseg = (const float *)tl.ptr + b * tl.stride[0] + h * tl.stride[1];
  /* Rows of {delta, lse * log2(e)} (attn_bwd_sm80_delta). */
  const float *deltag = bwd80_slice_rows<const float>(p.t[bwd80_tdelta], b, h);

  const unsigned sk = attn_smem_addr(bwd80_smem);
  const unsigned sv = sk + bwd80_k_bytes;
  const unsigned sq = sv + bwd80_v_bytes;
  const unsigned sdo = sq + bwd80_q_bytes;
  float *s_lse = (float *)(bwd80_smem + bwd80_k_bytes + bwd80_v_bytes + bwd80_q_bytes +
                           bwd80_do_bytes + bwd80_ds_bytes);
  float *s_delta = s_lse + bwd80_bm;

  /* A larger CTA (bwd_sm90's 256 threads) runs this with its first four
   * warps; the others only take part in the barriers. */
  const bool active = warp < bwd80_warps;
  if (active) {
    bwd80_load<bwd80_bm, bwd80_dqk, ATTN_D_QK>(sq, qg, tq.stride[2], i0, p.Sq, tid);
    bwd80_load<bwd80_bm, bwd80_dv, ATTN_D_V>(sdo, dog, tdo.stride[2], i0, p.Sq, tid);
  }
  if (tid < bwd80_bm) {
    const int i = i0 + tid;
    s_lse[tid] = i < p.Sq ? lseg[(long long)i * tl.stride[2]] : 0.f;
    s_delta[tid] = i < p.Sq ? deltag[2 * i] : 0.f;
  }

  float dq[bwd80_dqk / 8][4];
#pragma unroll
  for (int nt = 0; nt < bwd80_dqk / 8; ++nt)
    dq[nt][0] = dq[nt][1] = dq[nt][2] = dq[nt][3] = 0.f;

  const int row0 = warp * 16; /* this warp's queries within the tile */
  const int n_key_tiles = (p.Skv + bwd80_bn - 1) / bwd80_bn;
  for (int n = 0; n < n_key_tiles; ++n) {
    const int j0 = n * bwd80_bn;
    const int j_last = min(j0 + bwd80_bn, p.Skv) - 1;
    const int cls = attn_tile_class(b, h, i0, i_last, j0, j_last, p);
    if (cls == 0)
      continue; /* uniform across the CTA */

    bwd80_cta_sync<NAMED>(); /* the previous key tile is consumed */
    if (active) {
      bwd80_load<bwd80_bn, bwd80_dqk, ATTN_D_QK>(sk, kg, tk.stride[2], j0, p.Skv, tid);
      bwd80_load<bwd80_bn, bwd80_dv, ATTN_D_V>(sv, vg, tv.stride[2], j0, p.Skv, tid);
    }
    bwd80_cp_async_wait_all(); /* also Q, dO on the first visit */
    bwd80_cta_sync<NAMED>();
    if (!active)
      continue; /* to the next tile's barriers */

    /* S = Q K^T and dP = dO V^T: 16 queries x 64 keys per warp. */
    float s[bwd80_bn / 8][4], dp[bwd80_bn / 8][4];
#pragma unroll
    for (int nt = 0; nt < bwd80_bn / 8; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
      dp[nt][0] = dp[nt][1] = dp[nt][2] = dp[nt][3] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < bwd80_dqk / 16; ++kk) {
      unsigned a[4];
      bwd80_a_mk(a, sq, row0, kk * 16, bwd80_dqk * 2, lane);
#pragma unroll
      for (int np = 0; np < bwd80_bn / 16; ++np) {
        unsigned bb[4];
        bwd80_b_nk(bb, sk, np * 16, kk * 16, bwd80_dqk * 2, lane);
        attn_mma16816<bwd80_in_bf16>(s[2 * np], a, bb[0], bb[1]);
        attn_mma16816<bwd80_in_bf16>(s[2 * np + 1], a, bb[2], bb[3]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < bwd80_dv / 16; ++kk) {
      unsigned a[4];
      bwd80_a_mk(a, sdo, row0, kk * 16, bwd80_dv * 2, lane);
#pragma unroll
      for (int np = 0; np < bwd80_bn / 16; ++np) {
        unsigned bb[4];
        bwd80_b_nk(bb, sv, np * 16, kk * 16, bwd80_dv * 2, lane);
        attn_mma16816<bwd80_in_bf16>(dp[2 * np], a, bb[0], bb[1]);
        attn_mma16816<bwd80_in_bf16>(dp[2 * np + 1], a, bb[2], bb[3]);
      }
    }

    /* dRaw = chain rule of dS = P o (dP * factor - delta); 0 where P is.
     * Element (nt, e) is query row0 + g + 8 (e >> 1), key nt * 8 + 2t +
     * (e & 1) (the forward's layout). Walked by dropout group: for 16-key
     * block m and x, query i0 + row0 + g and key j0 + 16 m + 2t + x (bit 3
     * of both clear) head the 2x2 group whose element q is query + 8
     * (q >> 1), key + 8 (q & 1): nt = 2m + (q & 1), e = 2 (q >> 1) + x.
     * Dropout: block m holds this lane's half of the 16-element group at
     * (i0 + row0 + (g & ~1), j0 + 16 m + 2t), element (nt, e) in byte
     * (e & 1) + 2 (nt & 1) of dw[m][e >> 1] (hooks.cuh). */
#if defined(ATTN_DROPOUT)
    const attn_dropout_t drop_t = attn_dropout_params(p);
    unsigned dw[bwd80_bn / 16][2];
#pragma unroll
    for (int m = 0; m < bwd80_bn / 16; m += 2)
      attn_dropout_pair<false>(b, h, i0 + row0 + g, j0 + 16 * m + 2 * t, i0 + row0 + g,
                               j0 + 16 * m + 16 + 2 * t, p, dw[m], dw[m + 1]);
#endif
    /* The score chain's and the masks' values fixed per (b, h), read once
     * here (element by element behind the branch, they were read again). */
    const attn_bh bhc = attn_bh_load(b, h, p);
#pragma unroll
    for (int m = 0; m < bwd80_bn / 16; ++m) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int nt = 2 * m + (q & 1), e = 2 * (q >> 1) + x;
          const int il = row0 + g + (e >> 1) * 8, jl = nt * 8 + 2 * t + (e & 1);
          const int i = i0 + il, j = j0 + jl;
          float xs = neg_inf;
          if (i < p.Sq && j < p.Skv && (cls == 2 || attn_keep_bh(bhc, b, h, i, j, p)))
            xs = attn_score_bh(s[nt][e], bhc, b, h, i, j, p);
          const float pe = xs == neg_inf ? 0.f : exp2f((xs - s_lse[il]) * log2e);
          float dpe = dp[nt][e];
#if defined(ATTN_DROPOUT)
          dpe = attn_dropout_apply(dpe, dw[m][q >> 1], x + 2 * (q & 1), drop_t);
#endif
          const float ds = pe * (dpe - s_delta[il]);
          dp[nt][e] = pe != 0.f ? attn_bwd_draw(ds, s[nt][e], b, h, i, j, p) : 0.f;
        }
      }
    }

    /* dQ += dRaw K: dRaw's accumulators are the A fragments (k: keys). */
#pragma unroll
    for (int kk = 0; kk < bwd80_bn / 16; ++kk) {
      unsigned a[4];
      a[0] = bwd80_pack(dp[2 * kk][0], dp[2 * kk][1]);
      a[1] = bwd80_pack(dp[2 * kk][2], dp[2 * kk][3]);
      a[2] = bwd80_pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
      a[3] = bwd80_pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
      for (int np = 0; np < bwd80_dqk / 16; ++np) {
        unsigned bb[4];
        bwd80_b_kn(bb, sk, np * 16, kk * 16, bwd80_dqk * 2, lane);
        attn_mma16816<bwd80_in_bf16>(dq[2 * np], a, bb[0], bb[1]);
        attn_mma16816<bwd80_in_bf16>(dq[2 * np + 1], a, bb[2], bb[3]);
      }
    }
  }

  bwd80_cp_async_wait_all(); /* Q and dO, when no key tile was visited */
  if (!active)
    return;

  /* Rows row0 + g (+ 8), times the folded scale, in dq's dtype. */
  const float sc = bwd80_draw_scale(p);
  const attn_tensor_arg &to = p.t[bwd80_tdq >= 0 ? bwd80_tdq : 0];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = i0 + row0 + g + 8 * r;
    if (i >= p.Sq)
      continue;
    unsigned short *row = (unsigned short *)to.ptr + b * to.stride[0] + h * to.stride[1] +
                          (long long)i * to.stride[2];
#pragma unroll
    for (int nt = 0; nt < ATTN_D_QK / 8; ++nt)
      *(unsigned *)(row + nt * 8 + 2 * t) = bwd80_pack(dq[nt][2 * r] * sc, dq[nt][2 * r + 1] * sc);
  }
#endif
}

#endif /* BWD80_MAIN */

/* ---------------------------------------------------- the main kernel */

/* Grid (ceil(Skv / 64), H, B), 128 threads, attn_bwd_sm80_smem_bytes of
 * dynamic shared memory. delta and the dQ accumulator are dense f32
 * [B, H, Sq] and [B, H, Sq, D_QK]; with H != Hk so are the dK/dV
 * accumulators ([B, Hk, Skv, D]), zeroed by the caller. */
#if defined(ATTN_DROPOUT)
/* Dropout's words of NB 16-query blocks in the transposed layout (keys as
 * rows: this lane's key j, queries from i0): dw[m][k] for block m, query
 * half k (hooks.cuh, attn_dropout_pair with the key's parity fixed). */
template <int NB>
static __device__ __forceinline__ void bwd80_dropout_words(int b, int h, int i0, int j, int t,
                                                           const attn_params &p,
                                                           unsigned (&dw)[NB][2]) {
  static_assert(NB % 2 == 0, "blocks in pairs");
#pragma unroll
  for (int m = 0; m < NB; m += 2)
    attn_dropout_pair<true>(b, h, i0 + 16 * m + 2 * t, j, i0 + 16 * m + 16 + 2 * t, j, p, dw[m],
                            dw[m + 1]);
}
#endif

#if BWD80_MAIN
/* Key tile kt of (blockIdx.y, b): b the batch entry, or a packed
 * launch's sequence, whose view p is. */
static __device__ __forceinline__ void bwd80_key_tile(const attn_params &p, int kt, int b) {
  extern __shared__ __align__(128) unsigned char bwd80_smem[];
  const float neg_inf = __int_as_float(0xff800000);
  const float log2e = 1.4426950408889634f;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int h = blockIdx.y;
  const int hk = h / (p.H / p.Hk);
  const int j0 = kt * bwd80_bn;
  const int j_last = min(j0 + bwd80_bn, p.Skv) - 1;

  const attn_tensor_arg &tq = p.t[bwd80_tq], &tk = p.t[bwd80_tk], &tv = p.t[bwd80_tv];
  const attn_tensor_arg &tdo = p.t[bwd80_tdo];
  const unsigned short *qg = (const unsigned short *)tq.ptr + b * tq.stride[0] + h * tq.stride[1];
  const unsigned short *kg = (const unsigned short *)tk.ptr + b * tk.stride[0] + hk * tk.stride[1];
  const unsigned short *vg = (const unsigned short *)tv.ptr + b * tv.stride[0] + hk * tv.stride[1];
  const unsigned short *dog =
      (const unsigned short *)tdo.ptr + b * tdo.stride[0] + h * tdo.stride[1];
  const attn_tensor_arg &tl = p.t[bwd80_tlse];
  const float *lseg = (const float *)tl.ptr + b * tl.stride[0] + h * tl.stride[1];
  /* Rows of {delta, lse * log2(e)} (attn_bwd_sm80_delta). */
  const float *deltag = bwd80_slice_rows<const float>(p.t[bwd80_tdelta], b, h);
  float *dqa = bwd80_slice_rows<float>(p.t[bwd80_tdqa], b, h);

  const unsigned sk = attn_smem_addr(bwd80_smem);
  const unsigned sv = sk + bwd80_k_bytes;
  const unsigned sq = sv + bwd80_v_bytes;
  const unsigned sdo = sq + bwd80_q_bytes;
  const unsigned sds = sdo + bwd80_do_bytes;
  float *s_lse = (float *)(bwd80_smem + bwd80_k_bytes + bwd80_v_bytes + bwd80_q_bytes +
                           bwd80_do_bytes + bwd80_ds_bytes);
  float *s_delta = s_lse + bwd80_bm;

  bwd80_load<bwd80_bn, bwd80_dqk, ATTN_D_QK>(sk, kg, tk.stride[2], j0, p.Skv, tid);
  bwd80_load<bwd80_bn, bwd80_dv, ATTN_D_V>(sv, vg, tv.stride[2], j0, p.Skv, tid);
  /* The FP8 backward's factors for (b, h) and P's scale (1 elsewhere). */
  [[maybe_unused]] const bwd80_factors fx = bwd80_factors_at(b, h, p);
  const float dp_factor = fx.dp, p_scale = attn_p_scale_value(b, h, p);
  BWD80_AMAX_ZERO(mds);

  float dk[bwd80_dqk / 8][4], dv[bwd80_dv / 8][4];
#pragma unroll
  for (int nt = 0; nt < bwd80_dqk / 8; ++nt)
    dk[nt][0] = dk[nt][1] = dk[nt][2] = dk[nt][3] = 0.f;
#pragma unroll
  for (int nt = 0; nt < bwd80_dv / 8; ++nt)
    dv[nt][0] = dv[nt][1] = dv[nt][2] = dv[nt][3] = 0.f;

  const int key0 = warp * 16; /* this warp's keys within the tile */
  const int n_tiles = (p.Sq + bwd80_bm - 1) / bwd80_bm;
#if defined(ATTN_DROPOUT)
  const attn_dropout_t drop_t = attn_dropout_params(p);
#endif
#if defined(ATTN_BWD_BIAS)
  float red[bwd80_nred];
#pragma unroll
  for (int r = 0; r < bwd80_nred; ++r)
    red[r] = 0.f;
#endif
  for (int m = 0; m < n_tiles; ++m) {
    const int i0 = m * bwd80_bm;
    const int i_last = min(i0 + bwd80_bm, p.Sq) - 1;
    const int cls = attn_tile_class(b, h, i0, i_last, j0, j_last, p);
    if (cls == 0)
      continue; /* uniform across the CTA: no thread skips a barrier alone */

    __syncthreads(); /* the previous tile's Q, dO and dRaw are consumed */
    bwd80_load<bwd80_bm, bwd80_dqk, ATTN_D_QK>(sq, qg, tq.stride[2], i0, p.Sq, tid);
    bwd80_load<bwd80_bm, bwd80_dv, ATTN_D_V>(sdo, dog, tdo.stride[2], i0, p.Sq, tid);
    if (tid < bwd80_bm) {
      const int i = i0 + tid;
      s_lse[tid] = i < p.Sq ? lseg[(long long)i * tl.stride[2]] : 0.f;
      s_delta[tid] = i < p.Sq ? deltag[2 * i] : 0.f;
    }
    bwd80_cp_async_wait_all();
    __syncthreads();

    /* S^T = K Q^T: 16 keys x 64 queries per warp. */
    float s[bwd80_bm / 8][4];
#pragma unroll
    for (int nt = 0; nt < bwd80_bm / 8; ++nt)
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < bwd80_dqk / 16; ++kk) {
      unsigned a[4];
      bwd80_a_mk(a, sk, key0, kk * 16, bwd80_dqk * 2, lane);
#pragma unroll
      for (int np = 0; np < bwd80_bm / 16; ++np) {
        unsigned bb[4];
        bwd80_b_nk(bb, sq, np * 16, kk * 16, bwd80_dqk * 2, lane);
        attn_mma16816<bwd80_in_bf16>(s[2 * np], a, bb[0], bb[1]);
        attn_mma16816<bwd80_in_bf16>(s[2 * np + 1], a, bb[2], bb[3]);
      }
    }

    /* P^T (kept in s; the raw products in raw for the chain rule) and
     * Pd^T packed as the A operand of dV += Pd^T dO. */
    float raw[bwd80_bm / 8][4];
    unsigned pd[bwd80_bm / 16][4];
    const attn_bh bhc = attn_bh_load(b, h, p); /* once, not per element */
#pragma unroll
    for (int nt = 0; nt < bwd80_bm / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int jl = key0 + g + (e >> 1) * 8, il = nt * 8 + 2 * t + (e & 1);
        const int j = j0 + jl, i = i0 + il;
        raw[nt][e] = s[nt][e];
        float x = neg_inf;
        if (i < p.Sq && j < p.Skv && (cls == 2 || attn_keep_bh(bhc, b, h, i, j, p)))
          x = attn_score_bh(s[nt][e], bhc, b, h, i, j, p);
        /* exp(x - lse); a masked element (or a fully masked row, whose
         * lse is -inf) gives exactly 0. */
        s[nt][e] = x == neg_inf ? 0.f : exp2f((x - s_lse[il]) * log2e);
      }
    }
#if defined(ATTN_DROPOUT)
    /* Dropout: 16-query block m holds this lane's half of the 16-element
     * group at (i0 + 16 m + 2t, j0 + key0 + (g & ~1)) (bit 3 of both
     * clear), query half k in dw[m][k], byte (query & 1) + 2 (key half)
     * (hooks.cuh, attn_dropout_pair with the key's parity fixed). Drawn
     * here and again for dS (cheaper than holding them across dP^T). */
    unsigned dw[bwd80_bm / 16][2];
    bwd80_dropout_words(b, h, i0, j0 + key0 + g, t, p, dw);
#endif
#pragma unroll
    for (int kk = 0; kk < bwd80_bm / 16; ++kk) {
      float f[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        f[e] = s[2 * kk + (e >> 2)][e & 3];
#if defined(ATTN_DROPOUT)
      /* f[e] is query i0 + 16 kk + 8 (e >> 2) + 2t + (e & 1), key j0 +
       * key0 + g + 8 ((e >> 1) & 1): byte e & 3 of dw[kk][e >> 2]. */
#pragma unroll
      for (int e = 0; e < 8; ++e)
        f[e] = attn_dropout_apply(f[e], dw[kk][e >> 2], e & 3, drop_t);
#endif
#pragma unroll
      for (int e = 0; e < 8; ++e) /* P as P V read it: what dV's product takes */
        f[e] = bwd80_pd(f[e], p_scale);
      pd[kk][0] = bwd80_pack(f[0], f[1]);
      pd[kk][1] = bwd80_pack(f[2], f[3]);
      pd[kk][2] = bwd80_pack(f[4], f[5]);
      pd[kk][3] = bwd80_pack(f[6], f[7]);
    }

    /* dV += Pd^T dO (k: the 64 queries). */
#pragma unroll
    for (int kk = 0; kk < bwd80_bm / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < bwd80_dv / 16; ++np) {
        unsigned bb[4];
        bwd80_b_kn(bb, sdo, np * 16, kk * 16, bwd80_dv * 2, lane);
        attn_mma16816<bwd80_in_bf16>(dv[2 * np], pd[kk], bb[0], bb[1]);
        attn_mma16816<bwd80_in_bf16>(dv[2 * np + 1], pd[kk], bb[2], bb[3]);
      }
    }

    /* dP^T = V dO^T (k: the value dims). */
    float dp[bwd80_bm / 8][4];
#pragma unroll
    for (int nt = 0; nt < bwd80_bm / 8; ++nt)
      dp[nt][0] = dp[nt][1] = dp[nt][2] = dp[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < bwd80_dv / 16; ++kk) {
      unsigned a[4];
      bwd80_a_mk(a, sv, key0, kk * 16, bwd80_dv * 2, lane);
#pragma unroll
      for (int np = 0; np < bwd80_bm / 16; ++np) {
        unsigned bb[4];
        bwd80_b_nk(bb, sdo, np * 16, kk * 16, bwd80_dv * 2, lane);
        attn_mma16816<bwd80_in_bf16>(dp[2 * np], a, bb[0], bb[1]);
        attn_mma16816<bwd80_in_bf16>(dp[2 * np + 1], a, bb[2], bb[3]);
      }
    }

    /* dS^T = P^T o (dP^T * factor - delta), then dRaw^T by the chain rule
     * (0 wherever P is 0, so masked elements never reach the hook). */
    /* Element (nt, e) is key key0 + g + 8 (e >> 1), query nt * 8 + 2t +
     * (e & 1). Walked by dropout group: for 16-query block m and x, query
     * i0 + 16 m + 2t + x and key j0 + key0 + g (bit 3 of both clear) head
     * the 2x2 group whose element q is query + 8 (q >> 1), key + 8
     * (q & 1): nt = 2m + (q >> 1), e = 2 (q & 1) + x; its dropout byte is
     * e of dw[m][q >> 1]. */
#if defined(ATTN_DROPOUT)
    bwd80_dropout_words(b, h, i0, j0 + key0 + g, t, p, dw);
#endif
    unsigned dr[bwd80_bm / 16][4];
#pragma unroll
    for (int m = 0; m < bwd80_bm / 16; ++m) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int nt = 2 * m + (q >> 1), e = 2 * (q & 1) + x;
          const int jl = key0 + g + (e >> 1) * 8, il = nt * 8 + 2 * t + (e & 1);
          const int j = j0 + jl, i = i0 + il;
          float dpe = dp[nt][e];
#if defined(ATTN_DROPOUT)
          dpe = attn_dropout_apply(dpe, dw[m][q >> 1], e, drop_t);
#endif
          /* (dP's factor: through P's scale and o's, dO's descale) */
          const float ds = bwd80_ds(s[nt][e], dpe, s_delta[il], dp_factor, mds, p);
#if defined(ATTN_BWD_BIAS)
          dp[nt][e] =
              s[nt][e] != 0.f ? attn_bwd_draw_bias(ds, raw[nt][e], b, h, i, j, p, red) : 0.f;
#else
          dp[nt][e] = s[nt][e] != 0.f ? attn_bwd_draw(ds, raw[nt][e], b, h, i, j, p) : 0.f;
#endif
        }
      }
    }
#pragma unroll
    for (int kk = 0; kk < bwd80_bm / 16; ++kk) {
      dr[kk][0] = bwd80_pack(dp[2 * kk][0], dp[2 * kk][1]);
      dr[kk][1] = bwd80_pack(dp[2 * kk][2], dp[2 * kk][3]);
      dr[kk][2] = bwd80_pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
      dr[kk][3] = bwd80_pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
      /* dRaw^T to shared memory, [key][query], for dQ. */
      const int q0 = kk * 16 + 2 * t;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(bwd80_at(sds, key0 + g, q0, bwd80_bm * 2)),
                   "r"(dr[kk][0]));
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(bwd80_at(sds, key0 + g + 8, q0, bwd80_bm * 2)),
                   "r"(dr[kk][1]));
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(bwd80_at(sds, key0 + g, q0 + 8, bwd80_bm * 2)),
                   "r"(dr[kk][2]));
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(bwd80_at(sds, key0 + g + 8, q0 + 8, bwd80_bm * 2)),
                   "r"(dr[kk][3]));
    }

    /* dK += dRaw^T Q (k: the 64 queries). */
#pragma unroll
    for (int kk = 0; kk < bwd80_bm / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < bwd80_dqk / 16; ++np) {
        unsigned bb[4];
        bwd80_b_kn(bb, sq, np * 16, kk * 16, bwd80_dqk * 2, lane);
        attn_mma16816<bwd80_in_bf16>(dk[2 * np], dr[kk], bb[0], bb[1]);
        attn_mma16816<bwd80_in_bf16>(dk[2 * np + 1], dr[kk], bb[2], bb[3]);
      }
    }
    __syncthreads(); /* every warp's dRaw^T is in shared memory */

    /* dQ += dRaw K: warp w takes queries 16w.. of the tile, k: the 64
     * keys; f32 atomics into the accumulator, times the folded scale.
     * (Deterministic mode: the extra CTAs compute dQ instead.) */
    if (!bwd80_deterministic(p)) {
      float dq[bwd80_dqk / 8][4];
#pragma unroll
      for (int nt = 0; nt < bwd80_dqk / 8; ++nt)
        dq[nt][0] = dq[nt][1] = dq[nt][2] = dq[nt][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < bwd80_bn / 16; ++kk) {
        unsigned a[4];
        bwd80_a_km(a, sds, warp * 16, kk * 16, bwd80_bm * 2, lane);
#pragma unroll
        for (int np = 0; np < bwd80_dqk / 16; ++np) {
          unsigned bb[4];
          bwd80_b_kn(bb, sk, np * 16, kk * 16, bwd80_dqk * 2, lane);
          attn_mma16816<bwd80_in_bf16>(dq[2 * np], a, bb[0], bb[1]);
          attn_mma16816<bwd80_in_bf16>(dq[2 * np + 1], a, bb[2], bb[3]);
        }
      }
      const float sc = bwd80_draw_scale(p);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int i = i0 + warp * 16 + g + 8 * r;
        if (i < p.Sq) {
#pragma unroll
          for (int nt = 0; nt < bwd80_dqk / 8; ++nt) {
            atomicAdd(dqa + (long long)i * bwd80_dqk + nt * 8 + 2 * t, dq[nt][2 * r] * sc);
            atomicAdd(dqa + (long long)i * bwd80_dqk + nt * 8 + 2 * t + 1,
                      dq[nt][2 * r + 1] * sc);
          }
        }
      }
    }
  }

#if defined(ATTN_BWD_BIAS)
  bwd80_flush_red(red, b, h, lane, bwd80_deterministic(p), p); /* one atomic per warp */
#endif
#if defined(ATTN_BWD_FP8)
  if constexpr (bwd80_namax_ds > 0)
    attn_bwd_amax_commit_ds(mds, p);
  /* dV's factor (o's scale, dO's descale), before GQA's heads are summed:
   * it may differ by head. */
#pragma unroll
  for (int nt = 0; nt < bwd80_dv / 8; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dv[nt][e] *= fx.dv;
#endif

  /* Store dK (times the folded scale) and dV: rows key0 + g (+ 8). With
   * GQA, f32 atomics into the [B, Hk, Skv, D] accumulators, or in
   * deterministic mode plain stores into per-head [B, H, Skv, D] ones. */
  const float sc = bwd80_draw_scale(p);
  const bool shared_kv = p.H != p.Hk;
  /* The FP8 backward stores dK and dV (without GQA) as the grad block says:
   * its values, storage types and amax; with GQA convert_kv does. */
  BWD80_AMAX_ZERO(mdk);
  BWD80_AMAX_ZERO(mdv);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = j0 + key0 + g + 8 * r;
    if (j >= p.Skv)
      continue;
    if constexpr (bwd80_tdk >= 0) {
      const attn_tensor_arg &to = p.t[bwd80_tdk >= 0 ? bwd80_tdk : 0];
      float *acc = bwd80_slice_rows<float>(p.t[bwd80_tdka >= 0 ? bwd80_tdka : 0], b,
                                           bwd80_deterministic(p) ? h : hk) +
                   (long long)j * bwd80_dqk;
      const long long roff = b * to.stride[0] + hk * to.stride[1] + (long long)j * to.stride[2];
      [[maybe_unused]] unsigned short *row = (unsigned short *)to.ptr + roff;
#pragma unroll
      for (int nt = 0; nt < ATTN_D_QK / 8; ++nt) {
        const int d = nt * 8 + 2 * t;
        if (shared_kv && bwd80_deterministic(p)) {
          *(float2 *)(acc + d) = make_float2(dk[nt][2 * r] * sc, dk[nt][2 * r + 1] * sc);
        } else if (shared_kv) {
          atomicAdd(acc + d, dk[nt][2 * r] * sc);
          atomicAdd(acc + d + 1, dk[nt][2 * r + 1] * sc);
        } else {
#if defined(ATTN_BWD_FP8)
          bwd80_store_grad<bwd80_dk_kind>(to.ptr, roff + d, dk[nt][2 * r] * sc,
                                          dk[nt][2 * r + 1] * sc, mdk, p, attn_bwd_store_dk,
                                          attn_bwd_amax_dk);
#else
          *(unsigned *)(row + d) = bwd80_pack(dk[nt][2 * r] * sc, dk[nt][2 * r + 1] * sc);
#endif
        }
      }
    }
    if constexpr (bwd80_tdv >= 0) {
      const attn_tensor_arg &to = p.t[bwd80_tdv >= 0 ? bwd80_tdv : 0];
      float *acc = bwd80_slice_rows<float>(p.t[bwd80_tdva >= 0 ? bwd80_tdva : 0], b,
                                           bwd80_deterministic(p) ? h : hk) +
                   (long long)j * bwd80_dv;
      const long long roff = b * to.stride[0] + hk * to.stride[1] + (long long)j * to.stride[2];
      [[maybe_unused]] unsigned short *row = (unsigned short *)to.ptr + roff;
#pragma unroll
      for (int nt = 0; nt < ATTN_D_V / 8; ++nt) {
        const int d = nt * 8 + 2 * t;
        if (shared_kv && bwd80_deterministic(p)) {
          *(float2 *)(acc + d) = make_float2(dv[nt][2 * r], dv[nt][2 * r + 1]);
        } else if (shared_kv) {
          atomicAdd(acc + d, dv[nt][2 * r]);
          atomicAdd(acc + d + 1, dv[nt][2 * r + 1]);
        } else {
#if defined(ATTN_BWD_FP8)
          bwd80_store_grad<bwd80_dv_kind>(to.ptr, roff + d, dv[nt][2 * r], dv[nt][2 * r + 1],
                                          mdv, p, attn_bwd_store_dv, attn_bwd_amax_dv);
#else
          *(unsigned *)(row + d) = bwd80_pack(dv[nt][2 * r], dv[nt][2 * r + 1]);
#endif
        }
      }
    }
  }
#if defined(ATTN_BWD_FP8)
  bwd80_amax_commit_kv(mdk, mdv, p);
#endif
}

/* The CTA's work (uniform per CTA): a key tile, or in deterministic mode,
 * past the key tiles, one query tile's dQ. Packed sequences number both
 * kinds across the sequences (bwd80_packed_item). */
__device__ __forceinline__ void attn_bwd_sm80_main(const attn_params &p) {
#if defined(ATTN_PACKED_Q)
  attn_params v;
  int b, tile, q0;
  bool dq_tile;
  if (!bwd80_packed_item<bwd80_bn>((int)blockIdx.x, p, b, tile, dq_tile, q0, v))
    return;
  if (dq_tile)
    bwd80_dq_tile(v, tile, b);
  else
    bwd80_key_tile(v, tile, b);
#else
  const int n_key_tiles = (p.Skv + bwd80_bn - 1) / bwd80_bn;
  if ((int)blockIdx.x >= n_key_tiles)
    bwd80_dq_tile(p, (int)blockIdx.x - n_key_tiles, (int)blockIdx.z);
  else
    bwd80_key_tile(p, (int)blockIdx.x, (int)blockIdx.z);
#endif
}

#endif /* BWD80_MAIN */

/* ---------------------------------------------------- the post-passes */

/* Grid (ceil(Sq / ATTN_BWD_ROWS_PER_CTA), H, B): dq = dQ's accumulator,
 * in dq's dtype (the folded scale is already in), and the accumulated
 * bias gradients to their tensors. */
__device__ __forceinline__ void attn_bwd_sm80_convert(const attn_params &p_in) {
  BWD80_ROWS_VIEW(p_in);
  const bwd80_row_slot rs = bwd80_row_of_thread();
  const int i = rs.row, h = blockIdx.y, b = blockIdx.z;
#if defined(ATTN_BWD_BIAS)
  BWD80_EACH_WARP_ROW(p.Sq, row, lane, attn_bwd_bias_finish(b, h, row, lane, p));
#endif
  if (bwd80_tdq < 0 || bwd80_deterministic(p) || i >= p.Sq)
    return; /* deterministic mode: dq is already stored */
  const attn_tensor_arg &to = p.t[bwd80_tdq >= 0 ? bwd80_tdq : 0];
  const float *acc =
      bwd80_slice_rows<const float>(p.t[bwd80_tdqa], b, h) + (long long)bwd80_dq_row(i) * bwd80_dqk;
  const long long roff = b * to.stride[0] + h * to.stride[1] + (long long)i * to.stride[2];
  [[maybe_unused]] unsigned short *row = (unsigned short *)to.ptr + roff;
  BWD80_AMAX_ZERO(mdq); /* (the FP8 backward's dq: the grad block's values, type and amax) */
#if defined(ATTN_BWD_FP8_MMA)
  /* bwd_sm90's FP8 mode adds dQ's tiles without their factor. */
  const float dq_factor = bwd80_draw_scale(p);
#endif
  for (int d = rs.col; d < ATTN_D_QK; d += rs.step) {
    float x[8];
    bwd80_ld8_f32(acc + d, x);
#if defined(ATTN_BWD_FP8_MMA)
#pragma unroll
    for (int e = 0; e < 8; ++e)
      x[e] *= dq_factor;
#endif
#if defined(ATTN_BWD_FP8)
    bwd80_store_grad8<bwd80_dq_kind>(to.ptr, roff + d, x, mdq, p, attn_bwd_store_dq,
                                     attn_bwd_amax_dq);
#else
    bwd80_st8_half(row + d, x);
#endif
  }
#if defined(ATTN_BWD_FP8)
  if constexpr (bwd80_namax_dq > 0)
    attn_bwd_amax_commit_dq(mdq, p);
#endif
}

/* dK's or dV's row j of (b, hk), D columns, from its f32 accumulator rows
 * (of the tile's width), summed over the `group` query heads they came
 * from (head_step floats apart). */
/* The FP8 backward (KV: 1 dK, 2 dV) stores it as the grad block says. */
template <int D, int KV = 0>
static __device__ __forceinline__ void bwd80_convert_kv_row(const attn_tensor_arg &to,
                                                            const float *acc, int group,
                                                            long long head_step, int b, int hk,
                                                            int j, const bwd80_row_slot &rs,
                                                            const attn_params &p) {
  const long long roff = b * to.stride[0] + hk * to.stride[1] + (long long)j * to.stride[2];
  [[maybe_unused]] unsigned short *row = (unsigned short *)to.ptr + roff;
  BWD80_AMAX_ZERO(m);
  for (int d = rs.col; d < D; d += rs.step) {
    float sum[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int x = 0; x < group; ++x) {
      float v[8];
      bwd80_ld8_f32(acc + x * head_step + d, v);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        sum[e] += v[e];
    }
#if defined(ATTN_BWD_FP8)
    if constexpr (KV == 1)
      bwd80_store_grad8<bwd80_dk_kind>(to.ptr, roff + d, sum, m, p, attn_bwd_store_dk,
                                       attn_bwd_amax_dk);
    else
      bwd80_store_grad8<bwd80_dv_kind>(to.ptr, roff + d, sum, m, p, attn_bwd_store_dv,
                                       attn_bwd_amax_dv);
#else
    bwd80_st8_half(row + d, sum);
#endif
  }
#if defined(ATTN_BWD_FP8)
  if constexpr (KV == 1 && bwd80_namax_dk > 0)
    attn_bwd_amax_commit_dk(m, p);
  if constexpr (KV == 2 && bwd80_namax_dv > 0)
    attn_bwd_amax_commit_dv(m, p);
#endif
  (void)p;
}

/* Grid (ceil(Skv / ATTN_BWD_ROWS_PER_CTA), Hk, B), only when H != Hk: dK
 * and dV from their accumulators (summed over the query heads of a group). */
__device__ __forceinline__ void attn_bwd_sm80_convert_kv(const attn_params &p_in) {
  BWD80_ROWS_VIEW(p_in);
  const bwd80_row_slot rs = bwd80_row_of_thread();
  const int j = rs.row, hk = blockIdx.y, b = blockIdx.z;
  if (j >= p.Skv)
    return;
  /* Deterministic mode: per-head accumulators, summed in head order. */
  const bool det = bwd80_deterministic(p);
  const int group = det ? p.H / p.Hk : 1;
  /* The accumulators' first head of the group, [B, Hk or H, Skv, D]. */
  const int h0 = det ? hk * group : hk;
  if constexpr (bwd80_tdk >= 0) {
    const attn_tensor_arg &acc = p.t[bwd80_tdka >= 0 ? bwd80_tdka : 0];
    bwd80_convert_kv_row<ATTN_D_QK, 1>(p.t[bwd80_tdk >= 0 ? bwd80_tdk : 0],
                                       bwd80_slice_rows<const float>(acc, b, h0) +
                                           (long long)j * bwd80_dqk,
                                       group, acc.stride[1], b, hk, j, rs, p);
  }
  if constexpr (bwd80_tdv >= 0) {
    const attn_tensor_arg &acc = p.t[bwd80_tdva >= 0 ? bwd80_tdva : 0];
    bwd80_convert_kv_row<ATTN_D_V, 2>(p.t[bwd80_tdv >= 0 ? bwd80_tdv : 0],
                                      bwd80_slice_rows<const float>(acc, b, h0) +
                                          (long long)j * bwd80_dv,
                                      group, acc.stride[1], b, hk, j, rs, p);
  }
}

#if defined(ATTN_BWD_FP8)
/* Row r of (b, h) of an FP8 tensor (FP8: 1 e4m3, 2 e5m2), D columns, as
 * 16-bit values of the MMAs' type into the same row of its copy (exact). */
template <int FP8, int D>
static __device__ __forceinline__ void bwd80_convert8_row(const attn_tensor_arg &src,
                                                          const attn_tensor_arg &dst, int b, int h,
                                                          int r, const bwd80_row_slot &rs) {
  const unsigned char *in = (const unsigned char *)src.ptr + b * src.stride[0] +
                            h * src.stride[1] + (long long)r * src.stride[2];
  unsigned short *out = (unsigned short *)dst.ptr + b * dst.stride[0] + h * dst.stride[1] +
                        (long long)r * dst.stride[2];
  for (int d = rs.col; d < D; d += rs.step) {
    const uint2 v = *(const uint2 *)(in + d);
    uint4 w;
    attn_fp8x4_cvt<FP8 == 1, bwd80_in_bf16>(v.x, w.x, w.y);
    attn_fp8x4_cvt<FP8 == 1, bwd80_in_bf16>(v.y, w.z, w.w);
    *(uint4 *)(out + d) = w;
  }
}

/* Grid (ceil(Sq / R) + ceil(Skv / R), H, B), R = ATTN_BWD_ROWS_PER_CTA:
 * the first part's rows copy q and dO where they are FP8, the second's
 * k and v (heads below Hk). */
__device__ __forceinline__ void attn_bwd_sm80_convert8(const attn_params &p) {
  const bwd80_row_slot rs = bwd80_row_of_thread();
  const int n_q = (p.Sq + ATTN_BWD_ROWS_PER_CTA - 1) / ATTN_BWD_ROWS_PER_CTA;
  const int h = blockIdx.y, b = blockIdx.z;
  if ((int)blockIdx.x < n_q) {
    if (rs.row >= p.Sq)
      return;
    if constexpr (ATTN_BWD_SRC_Q >= 0)
      bwd80_convert8_row<ATTN_BWD_Q8, ATTN_D_QK>(p.t[ATTN_BWD_SRC_Q >= 0 ? ATTN_BWD_SRC_Q : 0],
                                                 p.t[bwd80_tq], b, h, rs.row, rs);
    if constexpr (ATTN_BWD_SRC_DO >= 0)
      bwd80_convert8_row<ATTN_BWD_DO8, ATTN_D_V>(p.t[ATTN_BWD_SRC_DO >= 0 ? ATTN_BWD_SRC_DO : 0],
                                                 p.t[bwd80_tdo], b, h, rs.row, rs);
  } else {
    const int j = rs.row - n_q * ATTN_BWD_ROWS_PER_CTA;
    if (j >= p.Skv || h >= p.Hk)
      return;
    if constexpr (ATTN_BWD_SRC_K >= 0)
      bwd80_convert8_row<ATTN_BWD_KV8, ATTN_D_QK>(p.t[ATTN_BWD_SRC_K >= 0 ? ATTN_BWD_SRC_K : 0],
                                                  p.t[bwd80_tk], b, h, j, rs);
    if constexpr (ATTN_BWD_SRC_V >= 0)
      bwd80_convert8_row<ATTN_BWD_KV8, ATTN_D_V>(p.t[ATTN_BWD_SRC_V >= 0 ? ATTN_BWD_SRC_V : 0],
                                                 p.t[bwd80_tv], b, h, j, rs);
  }
}
#endif

#if defined(ATTN_BWD_DSINK)
/* The softmax sink's gradient (compiler/emit_bwd.c writes the store hook
 * after this text). The sink joins each row's denominator with share
 * p_sink,i = exp(sink - lse_i) and adds nothing to O, so dO . dO/dsink =
 * -p_sink,i (dO_i . O_i) = -p_sink,i delta_i. Grid (1, H or 1, B or 1):
 * one CTA per element of the gradient (the axes it does not keep walked
 * inside), each thread summing every 128th row in order, then a fixed
 * tree: the same bits in every mode. Rows of a -inf sink add nothing; so
 * do fully masked rows without one (their lse, stored +inf, makes the
 * share 0). */
static __device__ __forceinline__ void attn_bwd_dsink_store(int b, int h, float v,
                                                            const attn_params &p);

__device__ __forceinline__ void attn_bwd_sm80_dsink(const attn_params &p) {
  __shared__ float part[32];
  const float log2e = 1.4426950408889634f;
  const int tid = threadIdx.x;
  const int h0 = blockIdx.y, b0 = blockIdx.z;
  const int h_end = gridDim.y == 1 ? p.H : h0 + 1, b_end = gridDim.z == 1 ? p.B : b0 + 1;
  float acc = 0.f;
  for (int b = gridDim.z == 1 ? 0 : b0; b < b_end; ++b)
    for (int h = gridDim.y == 1 ? 0 : h0; h < h_end; ++h) {
      const float sink = attn_sink_value(b, h, p);
      if (sink == __int_as_float(0xff800000))
        continue;
      const float s2 = sink * log2e;
      /* Rows of {delta, lse log2(e)} (attn_bwd_sm80_delta); packed, those
       * of sequence b. */
#if defined(ATTN_PACKED_Q)
      const attn_params ps = bwd80_seq_view(p, b);
#else
      const attn_params &ps = p;
#endif
      const float2 *rows =
          (const float2 *)bwd80_slice_rows<const float>(ps.t[bwd80_tdelta], b, h);
      for (int i = tid; i < ps.Sq; i += blockDim.x) {
        const float2 x = rows[i];
        acc += x.x * exp2f(s2 - x.y);
      }
    }
  acc = bwd80_row_sum(acc, 32);
  if ((tid & 31) == 0)
    part[tid >> 5] = acc;
  __syncthreads();
  if (tid == 0) {
    float v = 0.f;
    for (int w = 0; w < (int)(blockDim.x >> 5); ++w)
      v += part[w];
    attn_bwd_dsink_store(b0, h0, -v, p);
  }
}
#endif

#undef BWD80_MAIN
