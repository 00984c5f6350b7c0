/*
 * fwd_sm90.cuh: the Hopper forward flash-attention template (sm_90a only),
 * FlashAttention-3 style: TMA loads, mbarriers, wgmma, warp specialization.
 *
 * Device-only text for NVRTC: it includes nothing. The emitter pastes it,
 * once per graph, inside that graph's namespace, after attn_abi.h and the
 * graph's ATTN_* definitions, exactly like fwd_sm80.cuh; it calls the same
 * five hooks with the same contract (docs/templates.md).
 *
 * Shape of the computation:
 * - A CTA owns 128 query rows of one (batch, head) and has three
 *   warpgroups (192 rows and four in the wg3 variant: head dims <= 64,
 *   and FP8 P V at 128).
 *   Warpgroup 0 is the producer: one thread issues every TMA
 *   copy (Q once, then K and V tiles of ATTN_BN keys through ATTN_STAGES
 *   shared-memory stages), each completing on an mbarrier; the warpgroup
 *   gives its registers away (setmaxnreg.dec). The others are the
 *   consumers, 64 query rows each, with 232 registers a thread (160 with
 *   three, 152 with FP8 P V).
 * - The runtime builds one tensor map per operand (runtime/tmap.c) over
 *   the 4-D tensor as bound (any 16-byte strides), boxes of 64 columns
 *   (128 bytes) by the tile's rows, 128-byte swizzle. Rows beyond Sq/Skv
 *   and columns beyond a head dim that is not a multiple of 64 come back
 *   zero-filled, as the sm80 template's loads do.
 * - S = Q K^T: wgmma m64nBNk16 with Q and K both from shared memory
 *   (K-major descriptors). O += P V: wgmma m64nDVk16 with P from registers
 *   (the S accumulators packed to 16 bits: the accumulator layout is the A
 *   fragment layout) and V from shared memory through an MN-major
 *   (transposed) descriptor, so V needs no transpose in memory.
 * - The consumer warpgroups take turns at the tensor cores (named
 *   barriers, "ping-pong"; a ring of three with wg3): while one runs its
 *   softmax another's GEMMs run, so the exponentials hide behind matrix
 *   work.
 * - Softmax, masks and hooks are the sm80 template's, on the same
 *   per-thread fragment (rows g and g+8 of a warp's 16, two columns per
 *   eight): a fully masked row ends with O = 0 and lse = -inf.
 */

/* ------------------------------------------------------ configuration */

#if !defined(ATTN_D_QK) || !defined(ATTN_D_V) || !defined(ATTN_BM) ||     \
    !defined(ATTN_BN) || !defined(ATTN_STAGES)
#error "fwd_sm90.cuh needs ATTN_D_QK, ATTN_D_V, ATTN_BM, ATTN_BN, ATTN_STAGES"
#endif
#if !defined(ATTN_TQ) || !defined(ATTN_TK) || !defined(ATTN_TV) ||         \
    !defined(ATTN_TO) || !defined(ATTN_TLSE)
#error "fwd_sm90.cuh needs the tensor slots ATTN_TQ/TK/TV/TO/TLSE"
#endif

/* FP8 q, k and v (hooks.cuh: attn_q_fp8, attn_kv_fp8): Q and K stay
 * 8-bit and the S GEMM runs FP8 wgmma (k 32); V lands 8-bit and the
 * producer warpgroup's other three warps convert it (exactly) into the
 * 16-bit V tile P V reads, so P keeps its 16 bits. */
constexpr bool fwd90_fp8 = attn_q_fp8 != 0;
/* The kv_copy variant (tmpl_sm90.c): the plan's widen_kv step has widened
 * an FP8 k and v into 16-bit workspace copies (attn_fwd90_widen_kv, at the
 * end), which the tensor maps read: K and V are 16-bit here, while the
 * decode kernel beside this one keeps reading the FP8 cache. */
#if defined(ATTN_KV_COPY)
constexpr int fwd90_kv_fp8 = 0;
#else
constexpr int fwd90_kv_fp8 = attn_kv_fp8;
#endif
static_assert(!fwd90_fp8 || fwd90_kv_fp8 != 0, "FP8 q takes FP8 k and v");
/* An FP8 KV cache under a 16-bit q (FlashInfer's and vLLM's FP8 cache):
 * K and V land 8-bit and the same three warps widen both into 16-bit f16
 * K and V tiles, one cvt a pair (both FP8 types are exact in f16), so both
 * GEMMs are the 16-bit kernel's and only the loads and two barriers a stage
 * differ (match.c sends such graphs here where the tiles fit: not D 256). */
constexpr bool fwd90_kv8 = fwd90_kv_fp8 != 0 && !fwd90_fp8;
/* The kv8_early variant (tmpl_sm90.c; measured no faster than the default,
 * session 30): TMA refills a
 * stage's 8-bit K or V tile as soon as the converters have read it, and the
 * converters wait for the consumers to free the 16-bit tile before they
 * write it, so TMA's latency leaves the path from a freed tile to the next
 * S GEMM. The producer then writes a stage's slot while the consumers may
 * still read its previous use's, so the stage slots are kept per phase. */
#if defined(ATTN_KV8_EARLY)
constexpr bool fwd90_kv8_early = true;
static_assert(fwd90_kv_fp8 != 0 && !fwd90_fp8, "kv8_early: an FP8 KV cache under a 16-bit q");
#else
constexpr bool fwd90_kv8_early = false;
#endif
/* The GEMMs run in f16 there even under a bf16 q: widening FP8 into bf16
 * took ~100 instructions a 16-byte chunk of bit work (attn_fp8x4_cvt), and
 * those converters, not the tensor cores, set kv8's pace (bench/NOTES-sm90.md,
 * session 28). A bf16 Q is rewritten in place as f16 by the consumers, each
 * row times a power of two (fwd90_q_to_f16), whose inverse joins the
 * score's factor. Not where P is scaled but not rounded before P V
 * (`(p * 1000) @ v`): such a P may pass f16's range, so those GEMMs stay in
 * bf16 and the converters widen into bf16 (attn_fp8x4_cvt). */
constexpr bool fwd90_q_rescale =
    fwd90_kv8 && attn_in_bf16 && !(attn_has_p_scale && attn_p_round == 0);
/* Either: the converter warps run, and V (with kv8 also K) is staged 8-bit. */
constexpr bool fwd90_conv = fwd90_fp8 || fwd90_kv8;
/* FP8 P V, where the graph rounds P to FP8 (`e4m3(p * scale_s) @ v`,
 * hooks.cuh's ATTN_P_ROUND) and key tiles are 128 or 64 (one 128- or
 * 64-byte swizzled row of keys): P packs straight from the S accumulators into FP8 A fragments
 * (k 32), and the converter warps transpose V into a K-major tile V^T
 * instead of widening it (FP8 wgmma reads no MN-major operand). The keys
 * of each 32 go in the order the accumulators hold them: thread t of a
 * quad has keys 8c + 2t + x (c = 0..3, x = 0, 1) of a row, and A's k
 * columns 4t..4t+3 and 16+4t..16+4t+3, so key 16h + 8c + 2t + x (c, h =
 * 0, 1) is V^T's column 16h + 4t + 2c + x: no shuffles. Elsewhere P is
 * rounded in f32 and P V runs in f16 (the same values: FP8 is exact in
 * f16). */
#if defined(ATTN_FP8_PV) /* the compiler's choice (tmpl_sm90.c) */
constexpr bool fwd90_p8 = true;
static_assert(fwd90_fp8 && attn_p_round != 0 && (ATTN_BN == 128 || ATTN_BN == 64),
              "FP8 P V: FP8 q, k, v, P rounded to FP8, key tiles of 64 or 128");
#else
constexpr bool fwd90_p8 = false;
#endif
/* ATTN_FP8_VT8 (the fp8_vt8 variant): V^T takes the 8 bits an element it
 * needs in shared memory, not the converted 16-bit V tile's room
 * (attn_layout.h, ATTN_FWD90_QKV8T), so head tiles of 256 take key tiles
 * of 128. */
#if defined(ATTN_FP8_VT8)
constexpr bool fwd90_vt8 = true;
static_assert(fwd90_p8, "ATTN_FP8_VT8: FP8 P V");
#else
constexpr bool fwd90_vt8 = false;
#endif
/* V^T's rows: BN key bytes, 128- or 64-byte swizzle (the descriptor's
 * layout 1 or 2; 8-row groups 1024 or 512 bytes apart). */
constexpr int fwd90_vt_row = ATTN_BN;
static __device__ __forceinline__ unsigned fwd90_vt_chunk(int c, int d) {
  return fwd90_vt_row == 128 ? (unsigned)(c ^ (d & 7)) : (unsigned)(c ^ ((d >> 1) & 3));
}
/* P's A fragments per key tile: 16 keys each (16-bit), or 32 (FP8). */
constexpr int fwd90_pa_steps = fwd90_p8 ? ATTN_BN / 32 : ATTN_BN / 16;
/* Elements of a 128-byte swizzle row, and of the S GEMM's k steps. */
constexpr int fwd90_blk = fwd90_fp8 ? 128 : 64;
constexpr int fwd90_kstep = fwd90_fp8 ? 32 : 16;
/* The tiles' head dims (attn_layout.h, attn_head_tile): whole 64-column
 * blocks (128-column for FP8 Q and K), the columns past the graph's own
 * head dims zero-filled by TMA. */
constexpr int fwd90_dqk = fwd90_fp8 ? attn_head_tile8(ATTN_D_QK) : attn_head_tile(ATTN_D_QK);
constexpr int fwd90_dv = attn_head_tile(ATTN_D_V);
constexpr int fwd90_dv8 = fwd90_conv ? attn_head_tile8(ATTN_D_V) : 0; /* V's 8-bit tile */
constexpr int fwd90_dk8 = fwd90_kv8 ? attn_head_tile8(ATTN_D_QK) : 0; /* kv8: K's */
/* The S GEMM's k steps: those holding some of q's columns. Either way
 * four of them (32 bytes each) make a 128-byte row. */
constexpr int fwd90_qk_steps = (ATTN_D_QK + fwd90_kstep - 1) / fwd90_kstep;
constexpr int fwd90_bm = ATTN_BM;
constexpr int fwd90_bn = ATTN_BN;
constexpr int fwd90_stages = ATTN_STAGES;
/* 128 (1 + fwd90_wgs) threads: the producer and the consumer warpgroups.
 * q, k and v are read through the tensor maps (built from slots
 * ATTN_TQ/TK/TV by the runtime). */
constexpr int fwd90_to = ATTN_TO;
constexpr int fwd90_tlse = ATTN_TLSE;
/* ATTN_PERSISTENT 1: the kernel walks (query tile, head, batch) work
 * tiles with a stride of the grid's size (the runtime launches at most one
 * CTA per SM), loading the next tile's Q and first K/V while the consumers
 * store O. Correct under any grid: with one CTA per tile it runs once. */
#if defined(ATTN_PERSISTENT) && ATTN_PERSISTENT
constexpr bool fwd90_persistent = true;
#else
constexpr bool fwd90_persistent = false;
#endif

/* A paged KV cache (hooks.cuh, attn_kv_paged): the
 * runtime's K and V maps are over the caches as (D, page rows, Hk, pages)
 * (runtime/tmap.c), with boxes of fwd90_page_box rows, a power of two
 * dividing both the page size and BN, so no box crosses a page; the
 * producer warp's lanes look up a tile's pages and issue a box each. A
 * page id outside [0, pages), and rows past the view, lie outside the map:
 * TMA fills them with zeros, as decode.cuh and fwd_sm80 read them. 16-bit
 * caches, or FP8 ones under a 16-bit q (kv8: their 8-bit tiles, boxes of
 * 128 columns); with an FP8 q, paged caches run fwd_sm80 (match.c). */
constexpr bool fwd90_paged = attn_kv_paged;
static_assert(!fwd90_paged || !fwd90_fp8, "paged caches under a 16-bit q");
static __device__ __forceinline__ int fwd90_page_box(int page_size) {
  return min(page_size & -page_size, fwd90_bn & -fwd90_bn);
}

/* Element types: the MMAs' 16-bit type (q's, but f16 where a bf16 q's
 * rows are rescaled), attn_out_kind (hooks.cuh). */
constexpr bool fwd90_in_bf16 = attn_in_bf16 && !fwd90_q_rescale;
constexpr int fwd90_out_kind = attn_out_kind;

/* Head dims: multiples of 8 up to 256, in tiles of whole 64-column
 * (128-byte) swizzle blocks. BN: an S GEMM of m64n64, m64n80 or m64n128,
 * or m64n176 (FA3's key tile at head tiles of 128, tmpl_sm90.c: 16-bit q,
 * k and v, dense, no mask reading memory, two warpgroups).
 * BM: two or three consumer warpgroups of 64 rows. */
static_assert(attn_head_dim_ok(ATTN_D_QK) && attn_head_dim_ok(ATTN_D_V),
              "head dims: multiples of 8 up to 256");
static_assert(fwd90_bm == 128 || fwd90_bm == 192, "two or three consumer warpgroups of 64 rows");
static_assert(fwd90_bn == 64 || fwd90_bn == 80 || fwd90_bn == 128 || fwd90_bn == 176,
              "BN: 64, 80, 128 or 176");
static_assert(fwd90_bn != 176 || (!fwd90_fp8 && !fwd90_kv8 && !fwd90_paged && !attn_keep_reads &&
                                  fwd90_bm == 128 && ATTN_D_QK <= 128 && ATTN_D_V <= 128),
              "BN 176: 16-bit q, k and v, dense, no mask reading memory, two warpgroups, "
              "head tiles up to 128");
static_assert(fwd90_stages >= 2 && fwd90_stages <= 4, "2 to 4 K/V stages");

/* Shared memory: Q, then per stage a K and a V tile, then the mbarriers;
 * every tile is a multiple of 1024 bytes, so each stays on the 1024-byte
 * boundary the 128-byte swizzle repeats on. Each tile is stored as
 * D/64 blocks of [rows][64] elements, as the TMA boxes land. The layout
 * is abi/attn_layout.h's, which compiler/tmpl_sm90.c sizes launches by. */
constexpr attn_fwd90_layout fwd90_layout =
    attn_fwd90_layout_of(fwd90_bm, fwd90_bn, fwd90_stages, fwd90_dqk, fwd90_dv,
                         fwd90_vt8         ? ATTN_FWD90_QKV8T
                         : fwd90_fp8       ? ATTN_FWD90_QKV8
                         : fwd90_kv8_early ? ATTN_FWD90_KV8E
                         : fwd90_kv8       ? ATTN_FWD90_KV8
                                           : ATTN_FWD90_16);
constexpr int fwd90_q_bytes = fwd90_layout.q_bytes;
constexpr int fwd90_k_bytes = fwd90_layout.k_bytes;
constexpr int fwd90_v_bytes = fwd90_layout.v_bytes;
constexpr int fwd90_v8_bytes = fwd90_layout.v8_bytes; /* after V's 16-bit tile */
constexpr int fwd90_k8_bytes = fwd90_layout.k8_bytes; /* kv8: after V's 8-bit tile */
constexpr int fwd90_stage_bytes = fwd90_layout.stage_bytes;
constexpr int fwd90_bar_offset = fwd90_layout.bar_offset;
/* q full, k full, v full, k empty, q empty, v empty. K and V of a stage
 * are freed apart: K when the S GEMM that read it is done, V one softmax
 * later when P V is, so the next K load starts a whole key tile sooner
 * (it mattered at D 256, two stages of 80 KB: bench/NOTES-sm90.md). */
constexpr int fwd90_nbars = fwd90_layout.nbars;
/* Consumer warpgroups: two, or three (tmpl_sm90.c's wg3 variant: head
 * dims up to 64, S, O and P in 128 of a consumer's 160 registers; FP8 P V
 * at 128 with key tiles of 64). */
constexpr int fwd90_wgs = fwd90_bm / 64;
constexpr int fwd90_consumer_threads = 128 * fwd90_wgs;
static_assert(fwd90_wgs == 2 || (ATTN_D_QK <= 64 && ATTN_D_V <= 64) || (fwd90_p8 && ATTN_BN == 64),
              "three consumer warpgroups: head dims up to 64, or FP8 P V with key tiles of 64");
/* Registers a thread after setmaxnreg: the producer's, the consumers'
 * (128 x 40 + 256 x 232 and 128 x 32 + 384 x 160 of the SM's 65536; FA3's
 * budgets). With FP8 P V the producer's warps 1-3 transpose V (which
 * spilled at 32 and 40) and a consumer's P takes 16 registers, not 32:
 * 48 and 152 (with 16-bit P, 152 made ptxas serialize the wgmma). */
constexpr bool fwd90_vt8_wide = fwd90_vt8 && fwd90_bn == 128 && fwd90_dv > 128;
constexpr int fwd90_producer_regs = fwd90_wgs == 2 ? (fwd90_vt8_wide ? 24 : 40) : fwd90_p8 ? 48 : 32;
constexpr int fwd90_consumer_regs = fwd90_wgs == 2 ? (fwd90_vt8_wide ? 240 : 232) : fwd90_p8 ? 152 : 160;
static_assert(128 * fwd90_producer_regs + fwd90_consumer_threads * fwd90_consumer_regs <= 65536,
              "the SM's registers");
/* After the barriers, 8-byte slots the producer fills for the consumers:
 * the work tile (its index for the persistent kernel, fwd90_next_tile,
 * and whether it has any live key tile), then one per stage (the key
 * tile's index and class): fwd90_layout.slot_bytes. */
/* With 1024 bytes for rounding the dynamic shared-memory base up. */
constexpr int attn_fwd_sm90_smem_bytes = fwd90_layout.total;
static_assert(attn_fwd_sm90_smem_bytes <= 227 * 1024, "tiles exceed shared memory");

/* The S tile per thread: BN/8 fragments of 4; O: DV/8 fragments of 4. */
constexpr int fwd90_s_regs = fwd90_bn / 2;
/* A score that is a chain times a factor per (b, h) (attn_score_folded:
 * most graphs, `(q @ k^T) * scale` under masks, and softcaps' `cap *
 * tanh(...)`) is scored per element without the factor, which goes into
 * the softmax's exp2 (attn_softmax_tile_qk): one multiply an element less.
 * Where the chain is q.k itself (attn_score_scaled_qk) the tile is not
 * scored at all. */
constexpr bool fwd90_fold = attn_score_folded;
/* Rows keep a stale maximum until a tile's is 2^8 above it
 * (attn_softmax_tile's STALE), where P is neither rounded nor scaled
 * before P V, and in f16 not by dropout either (P up to 2^8 times a
 * factor could pass f16's 65504; bf16's range takes any). */
#if defined(ATTN_DROPOUT)
constexpr bool fwd90_stale_drop_ok = fwd90_in_bf16;
#else
constexpr bool fwd90_stale_drop_ok = true;
#endif
constexpr bool fwd90_stale = attn_p_round == 0 && attn_p_mod == 0 && fwd90_stale_drop_ok;
/* ATTN_EXP2_FMA (0-4, the compiler's exp2_fma choice): that many of every
 * four key blocks' exponentials on the FMA pipe (softmax.cuh). Not where P
 * is rounded to FP8 (its roundings follow ex2's values, as the reference's
 * do). */
#if defined(ATTN_EXP2_FMA)
constexpr int fwd90_exp2_fma = ATTN_EXP2_FMA;
#else
constexpr int fwd90_exp2_fma = 0;
#endif
static_assert(fwd90_exp2_fma >= 0 && fwd90_exp2_fma <= 4 &&
                  (fwd90_exp2_fma == 0 || attn_p_round == 0),
              "ATTN_EXP2_FMA: 0 to 4 quarters, and none where P is rounded");
constexpr int fwd90_o_regs = fwd90_dv / 2;

/* The hooks: templates/hooks.cuh, pasted before this text. */

/* ------------------------------------------------------ PTX wrappers */

static __device__ __forceinline__ unsigned fwd90_pack_in(float lo, float hi) {
  return attn_pack2<fwd90_in_bf16>(lo, hi);
}

/* Dispatch on the tile widths (templates, so the untaken branches are
 * never instantiated). */
template <int N>
static __device__ __forceinline__ void fwd90_gemm_qk(float (&d)[N / 2], unsigned long long da,
                                                     unsigned long long db, int scale_d) {
  constexpr bool qe4 = attn_q_fp8 == 1, ke4 = fwd90_kv_fp8 == 1;
  if constexpr (fwd90_fp8 && N == 128)
    attn_wgmma_ss128_fp8<qe4, ke4>(d, da, db, scale_d);
  else if constexpr (fwd90_fp8 && N == 80)
    attn_wgmma_ss80_fp8<qe4, ke4>(d, da, db, scale_d);
  else if constexpr (fwd90_fp8)
    attn_wgmma_ss64_fp8<qe4, ke4>(d, da, db, scale_d);
  else if constexpr (N == 176)
    attn_wgmma_ss176_kk<fwd90_in_bf16>(d, da, db, scale_d);
  else if constexpr (N == 128)
    attn_wgmma_ss128_kk<fwd90_in_bf16>(d, da, db, scale_d);
  else if constexpr (N == 80)
    attn_wgmma_ss80_kk<fwd90_in_bf16>(d, da, db, scale_d);
  else
    attn_wgmma_ss64_kk<fwd90_in_bf16>(d, da, db, scale_d);
}
/* Four k steps of the S GEMM in one statement (wgmma.cuh's _x4). */
template <int N>
static __device__ __forceinline__ void fwd90_gemm_qk4(float (&d)[N / 2], const unsigned long long *da,
                                                      const unsigned long long *db, int scale_d) {
  constexpr bool qe4 = attn_q_fp8 == 1, ke4 = fwd90_kv_fp8 == 1;
  if constexpr (fwd90_fp8 && N == 128)
    attn_wgmma_ss128_fp8_x4<qe4, ke4>(d, da, db, scale_d);
  else if constexpr (fwd90_fp8 && N == 80)
    attn_wgmma_ss80_fp8_x4<qe4, ke4>(d, da, db, scale_d);
  else if constexpr (fwd90_fp8)
    attn_wgmma_ss64_fp8_x4<qe4, ke4>(d, da, db, scale_d);
  else if constexpr (N == 176)
    attn_wgmma_ss176_kk_x4<fwd90_in_bf16>(d, da, db, scale_d);
  else if constexpr (N == 128)
    attn_wgmma_ss128_kk_x4<fwd90_in_bf16>(d, da, db, scale_d);
  else if constexpr (N == 80)
    attn_wgmma_ss80_kk_x4<fwd90_in_bf16>(d, da, db, scale_d);
  else
    attn_wgmma_ss64_kk_x4<fwd90_in_bf16>(d, da, db, scale_d);
}
/* Four k steps of P V in one statement: V's 64, 128 or 256 columns (192,
 * two shapes a step, goes a step at a time). */
template <int N>
static __device__ __forceinline__ void fwd90_gemm_pv4(float (&d)[N / 2], const unsigned (*a)[4],
                                                      const unsigned long long *db) {
  constexpr bool pe4 = attn_p_round == 1, ve4 = fwd90_kv_fp8 == 1;
  static_assert(N == 256 || N == 128 || N == 64, "one wgmma shape a step");
  if constexpr (fwd90_p8 && N == 256)
    attn_wgmma_rs256_fp8_x4<pe4, ve4>(d, a, db);
  else if constexpr (fwd90_p8 && N == 128)
    attn_wgmma_rs128_fp8_x4<pe4, ve4>(d, a, db);
  else if constexpr (fwd90_p8)
    attn_wgmma_rs64_fp8_x4<pe4, ve4>(d, a, db);
  else if constexpr (N == 256)
    attn_wgmma_rs256_x4<fwd90_in_bf16>(d, a, db);
  else if constexpr (N == 128)
    attn_wgmma_rs128_x4<fwd90_in_bf16>(d, a, db);
  else
    attn_wgmma_rs64_x4<fwd90_in_bf16>(d, a, db);
}
template <int N>
static __device__ __forceinline__ void fwd90_gemm_pv(float (&d)[N / 2], const unsigned (&a)[4],
                                                     unsigned long long db) {
  if constexpr (N == 256) {
    attn_wgmma_rs256<fwd90_in_bf16>(d, a, db);
  } else if constexpr (N == 192) {
    /* Columns 0-127, then 128-191: V's third 64-column block, two blocks
     * (of fwd90_bn rows of 128 bytes) further on. */
    attn_wgmma_rs128<fwd90_in_bf16>(*reinterpret_cast<float(*)[64]>(&d[0]), a, db);
    attn_wgmma_rs64<fwd90_in_bf16>(*reinterpret_cast<float(*)[32]>(&d[64]), a,
                                   attn_wgmma_desc_add(db, 2 * fwd90_bn * 128));
  } else if constexpr (N == 128)
    attn_wgmma_rs128<fwd90_in_bf16>(d, a, db);
  else
    attn_wgmma_rs64<fwd90_in_bf16>(d, a, db);
}

/* O += P V with FP8 P (a: 4 registers of 4 keys' bytes) and the K-major
 * V^T tile (rows of 128 keys' bytes, one per output column). */
template <int N>
static __device__ __forceinline__ void fwd90_gemm_pv8(float (&d)[N / 2], const unsigned (&a)[4],
                                                      unsigned long long db) {
  constexpr bool pe4 = attn_p_round == 1, ve4 = fwd90_kv_fp8 == 1;
  if constexpr (N == 256) {
    attn_wgmma_rs256_fp8<pe4, ve4>(d, a, db);
  } else if constexpr (N == 192) { /* columns 0-127, then 128-191: rows 128.. of V^T */
    attn_wgmma_rs128_fp8<pe4, ve4>(*reinterpret_cast<float(*)[64]>(&d[0]), a, db);
    attn_wgmma_rs64_fp8<pe4, ve4>(*reinterpret_cast<float(*)[32]>(&d[64]), a,
                                  attn_wgmma_desc_add(db, 128 * fwd90_vt_row));
  } else if constexpr (N == 128)
    attn_wgmma_rs128_fp8<pe4, ve4>(d, a, db);
  else
    attn_wgmma_rs64_fp8<pe4, ve4>(d, a, db);
}

/* Two f32 of P rounded to P's FP8 type (satfinite, the reference's
 * rounding) and widened back, exactly, to the MMAs' 16-bit type: two
 * conversions, where attn_p_value's portable rounding costs tens of
 * instructions an element. */
static __device__ __forceinline__ unsigned fwd90_pack_p16(float x0, float x1) {
  unsigned short h;
  unsigned w;
  if constexpr (attn_p_round == 1) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(x1), "f"(x0));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(w) : "h"(h));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(h) : "f"(x1), "f"(x0));
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(w) : "h"(h));
  }
  if constexpr (fwd90_in_bf16) /* f16 -> bf16, exact for FP8 values */
    asm("{ .reg .b16 l, u; .reg .f32 fl, fu;\n"
        "  mov.b32 {l, u}, %1; cvt.f32.f16 fl, l; cvt.f32.f16 fu, u;\n"
        "  cvt.rn.bf16x2.f32 %0, fu, fl; }"
        : "=r"(w)
        : "r"(w));
  return w;
}

/* O *= alpha per row (rows g and g + 8 of the lane), the rescale a softmax
 * leaves for O. Skipped where every row of the warp keeps its maximum
 * (alpha exactly 1: a multiply by 1 changes nothing); alpha is 1 after. Where: right after the
 * softmax (once the previous P V is done), or with fwd90_rescale_late
 * just before the next P V is issued, after this warpgroup's S GEMM
 * (FA3 does so above head dim 128; auto here only at head tiles of 64
 * under two consumer warpgroups, where it measured +3-10% on the H100). ptxas then waits for S before the
 * multiplies (C7517: it lets no instruction touch a GMMA's registers while
 * a GMMA group is outstanding), so the multiplies leave the softmax's path
 * but delay the other warpgroup's turn by them. */
#ifndef ATTN_RESCALE_LATE
#define ATTN_RESCALE_LATE 0
#endif
constexpr bool fwd90_rescale_late = ATTN_RESCALE_LATE != 0;
/* P V's group committed inside the branch that issues it (and an empty one
 * in the other), instead of once after the branch. With the one commit,
 * ptxas closes P V's group at the branch's end and makes the commit a
 * third, empty group (a dummy HGMMA.64x8x16 issued every tile); groups
 * complete in order, so the consumer's wait<1> for S then also waits for
 * the previous tile's P V, which the schedule means to overlap with the
 * softmax (SASS and ncu of session 34: the dummy HGMMA and that wait hold
 * 21% of the forward's stall samples at D 128). Auto's for 16-bit q, k
 * and v since session 35 (H100: +1-8%) and for FP8 P V at head tiles up to
 * 128 since session 41 (+1-12%; D 256 keeps the one commit: 0.96-1.00x;
 * tmpl_sm90.c says where each is taken). */
#ifndef ATTN_PV_OVERLAP
#define ATTN_PV_OVERLAP 0
#endif
constexpr bool fwd90_pv_overlap = ATTN_PV_OVERLAP != 0;
/* When a consumer thread tells the producer that Q's buffer is free: after
 * the work tile's last P V, or, in work tiles of at most
 * fwd90_q_early_tiles key tiles, as soon as its warpgroup's last S GEMM of
 * the tile is done, the last read of Q (P V reads V and P; the store reads
 * registers). bar_q_empty counts every consumer thread, so the producer
 * still waits for the slowest warpgroup, but the next tile's Q then loads
 * under the last softmax, the last P V and O's store rather than after
 * them: the consumers find it landed instead of waiting a load's latency
 * at the next work tile's start. That latency matters in short work tiles;
 * in long ones the early release measured 1-3% slower (H100, session 36:
 * bench/NOTES-sm90.md), hence the bound (a work tile's length is known at
 * its last key tile, so the choice is the warpgroup's, uniform). 0: never
 * (auto before session 36); the q_early variant: every tile. */
#ifndef ATTN_Q_EARLY
#define ATTN_Q_EARLY 0
#endif
constexpr int fwd90_q_early_tiles = ATTN_Q_EARLY;
/* Whether a consumer warpgroup whose rows all lie past the sequence's end
 * (in the last query tile of a length that is not a multiple of BM: at
 * S 1k with 192-row tiles, two of the last tile's three warpgroups) skips
 * the tile's GEMMs and softmax instead of running them on Q's zero rows
 * (auto's since session 36: +5.5% at D 64 S 1k on the H100). */
#ifndef ATTN_SKIP_IDLE
#define ATTN_SKIP_IDLE 0
#endif
constexpr bool fwd90_skip_idle = ATTN_SKIP_IDLE != 0;
/* Whether a softcap's tanh (attn_score_tanh_qk) runs on the FMA pipe
 * (attn_tanh_poly) for the tiles whose arguments all lie in [-1, 1] (the
 * tanh_poly variant): MUFU then does one op a score instead of two. */
#ifndef ATTN_TANH_POLY
#define ATTN_TANH_POLY 0
#endif
constexpr bool fwd90_tanh_poly = ATTN_TANH_POLY != 0;
/* Whether a sequence whose length BM does not divide has its short query
 * tile first (rows [0, r), r = Sq - (ceil(Sq / BM) - 1) BM) rather than
 * last (the partial_first variant). Under a causal mask the last rows see
 * the most keys, so a short last tile runs the most key tiles with the
 * fewest rows (at S 1k on 192-row tiles: 8 key tiles on one warpgroup of
 * three); first, it runs one. The rows of the short tile's live
 * warpgroups past r are real rows of the next tile: they are computed
 * over the short tile's keys and not stored. */
#ifndef ATTN_PARTIAL_FIRST
#define ATTN_PARTIAL_FIRST 0
#endif
constexpr bool fwd90_partial_first = ATTN_PARTIAL_FIRST != 0;
/* The ring_closed variant (tmpl_sm90.c): the consumers' turn ring closed
 * at each work tile's end, as before session 40 (see the consumers). */
#ifndef ATTN_RING_PER_TILE
#define ATTN_RING_PER_TILE 0
#endif
constexpr bool fwd90_ring_per_tile = ATTN_RING_PER_TILE != 0;
/* The q_before_v variant (tmpl_sm90.c): at a later work tile's start the
 * producer issues Q's load between the first key tile's K and V copies
 * (see the producer). */
#ifndef ATTN_Q_BEFORE_V
#define ATTN_Q_BEFORE_V 0
#endif
constexpr bool fwd90_q_before_v = ATTN_Q_BEFORE_V != 0;
/* The pv_wait_next variant (tmpl_sm90.c): the wait for a key tile's P V,
 * O's rescale and P's packing at the top of the next key tile instead of
 * after this one's softmax (see the consumers). */
#ifndef ATTN_PV_WAIT_NEXT
#define ATTN_PV_WAIT_NEXT 0
#endif
constexpr bool fwd90_pv_wait_next = ATTN_PV_WAIT_NEXT != 0;
/* The o_smem variant (tmpl_sm90.c): each consumer warp writes its 16 rows
 * of O into shared memory (attn_fwd90_ostage_*, after the slots, swizzled)
 * and stores them by TMA, 128 bytes of the rows a box, instead of 32
 * four-byte stores a thread (64 two-byte ones for an 8-bit O; session 41's
 * profile of D 128 S 1k: those held 13% of the stall samples, on a full
 * LSU queue). match.c allows it for a 16- or 8-bit O, dense rows, no
 * dropout, and tmpl_sm90.c for tiles whose rows all belong to them (no
 * partial_first), where the plan adds O's map (ATTN_TMAP_O). */
#ifndef ATTN_O_SMEM
#define ATTN_O_SMEM 0
#endif
/* ATTN_O_SMEM: the staging slots a warp has, each 128 bytes of its 16
 * rows (2048 bytes: 64 columns of a 16-bit O, 128 of an 8-bit one), up
 * to a slot a block of O's columns. */
constexpr int fwd90_o_slots = ATTN_O_SMEM;
constexpr bool fwd90_o_smem = fwd90_o_slots > 0;
constexpr int fwd90_o_cols = fwd90_out_kind >= 3 ? 128 : 64; /* a block's columns */
constexpr int fwd90_o_blocks = (ATTN_D_V + fwd90_o_cols - 1) / fwd90_o_cols;
static_assert(fwd90_o_slots >= 0 && fwd90_o_slots <= fwd90_o_blocks, "a slot a block at most");
static_assert(!fwd90_o_smem ||
                  attn_fwd90_total_ostage(fwd90_layout, fwd90_bm, fwd90_o_slots) <= 227 * 1024,
              "o_smem: the staging exceeds shared memory");
static_assert(!fwd90_o_smem || fwd90_out_kind != 2, "o_smem: a 16- or 8-bit O (match.c)");
/* Packed sequences (session 43): a warp whose 16 rows all belong to the
 * sequence stores each block by a TMA box, as a dense O does; at a
 * sequence's end, where a box would write the next sequence's rows, the
 * warp's lanes copy the rows it owns one 16-byte chunk at a time
 * (attn_bulk_store: 16-bit O, whose column blocks are whole chunks since
 * head dims are multiples of 8). Every lane then commits and waits on its
 * own bulk group. */
constexpr bool fwd90_o_rows = fwd90_o_smem && attn_packed != 0;
static_assert(!fwd90_o_rows || fwd90_out_kind < 2, "o_smem rows: a 16-bit O (match.c)");
static_assert(ATTN_D_V % 8 == 0, "O's rows are whole 16-byte chunks (attn_head_dim_ok)");
/* The byte offset of chunk ch (16 bytes) of the warp's row r in a staging
 * slot: [16 rows][128 bytes], chunk ch at ch ^ (r & 7) (attn_stage_off's
 * 128-byte swizzle). */
static __device__ __forceinline__ unsigned fwd90_stage_chunk(int r, int ch) {
  return (unsigned)(r * 128 + ((ch ^ (r & 7)) << 4));
}
/* Query tile m's rows of a sequence of Sq queries: [i0, i_end). Every i0
 * is a multiple of 16: a lane's rows i and i + 8 must share a dropout
 * group (hooks.cuh: rows i & ~9), so under partial_first the short first
 * tile holds r rows rounded up to 16, and the last tile may end up to 15
 * rows short (a dropout example at Sq 200 failed on the H100, session 38,
 * with the first tile's r unrounded). */
static __device__ __forceinline__ void fwd90_rows(int m, int Sq, int &i0, int &i_end) {
  if constexpr (fwd90_partial_first) {
    const int r = Sq - (max(Sq - 1, 0) / fwd90_bm) * fwd90_bm; /* Sq's remainder: 1 .. BM */
    const int first = (r + 15) / 16 * 16;                     /* the first tile's rows */
    i0 = m == 0 ? 0 : first + (m - 1) * fwd90_bm;
    i_end = min(first + m * fwd90_bm, Sq);
  } else {
    i0 = m * fwd90_bm;
    i_end = min(i0 + fwd90_bm, Sq);
  }
}
static __device__ __forceinline__ void fwd90_rescale_o(float (&o)[fwd90_dv / 2], float (&alpha)[2]) {
  /* (Late, the multiplies are not skipped: ptxas puts its wait for S in
   * front of them, and a wgmma wait or fence is .aligned, for every warp of
   * the warpgroup or none, which a warp's own vote cannot promise.) */
  if (!fwd90_rescale_late && !__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f))
    return;
#pragma unroll
  for (int nb = 0; nb < fwd90_dv / 8; ++nb) {
    o[nb * 4 + 0] *= alpha[0];
    o[nb * 4 + 1] *= alpha[0];
    o[nb * 4 + 2] *= alpha[1];
    o[nb * 4 + 3] *= alpha[1];
  }
  alpha[0] = alpha[1] = 1.f;
}

/* O += P V over one key tile: 16-bit P against V's MN-major tile at vs,
 * or FP8 P against V^T (K-major, stored where the 16-bit tile would be). */
static __device__ __forceinline__ void fwd90_pv(float (&o)[fwd90_dv / 2],
                                                const unsigned (&pa)[fwd90_pa_steps][4],
                                                unsigned vs) {
  /* The tile's descriptor once, then each step's as an add to its start
   * field (one uniform add an HGMMA, where a whole descriptor is five). */
  unsigned long long dv0;
  if constexpr (fwd90_p8) {
    dv0 = attn_wgmma_desc(vs, 16, 8 * fwd90_vt_row);
    if constexpr (fwd90_vt_row == 64) /* layout 2: the 64-byte swizzle */
      dv0 = (dv0 & ~(3ull << 62)) | (2ull << 62);
  } else {
    dv0 = attn_wgmma_desc(vs, fwd90_bn * 128, 1024);
  }
  unsigned long long dv[fwd90_pa_steps];
#pragma unroll
  for (int kk = 0; kk < fwd90_pa_steps; ++kk)
    dv[kk] = attn_wgmma_desc_add(dv0, fwd90_p8 ? kk * 32 : kk * 16 * 128);
  /* Four steps a statement, the rest one at a time (192 columns, two
   * shapes a step, all one at a time: not even instantiated, as the
   * kernel is no template and would instantiate a dead call; session 26's
   * compile sweep found every D_v 129-192 graph refused by NVRTC). */
  constexpr int by4 = fwd90_dv == 192 ? 0 : fwd90_pa_steps / 4 * 4;
  if constexpr (by4 > 0) {
#pragma unroll
    for (int kk = 0; kk < by4; kk += 4)
      fwd90_gemm_pv4<fwd90_dv == 192 ? 128 : fwd90_dv>(
          *reinterpret_cast<float(*)[(fwd90_dv == 192 ? 128 : fwd90_dv) / 2]>(&o[0]), &pa[kk],
          &dv[kk]);
  }
#pragma unroll
  for (int kk = by4; kk < fwd90_pa_steps; ++kk) {
    if constexpr (fwd90_p8)
      fwd90_gemm_pv8<fwd90_dv>(o, pa[kk], dv[kk]);
    else
      fwd90_gemm_pv<fwd90_dv>(o, pa[kk], dv[kk]);
  }
}

/* Four f32 as four FP8 bytes (P's type, satfinite: the reference's
 * rounding), lo first. */
static __device__ __forceinline__ unsigned fwd90_pack_p8(float x0, float x1, float x2, float x3) {
  return attn_fp8x4<attn_p_round == 1>(x0, x1, x2, x3);
}

/* ------------------------------------------------------- the kernel body */

/* How a tile's elements are tested (class 2 tiles away from the edges
 * are not): against the bounds and attn_keep (class 1, and class 2 at an
 * edge), or through keep bits computed beforehand (a mask that reads
 * memory: fwd90_keep_bits). */
enum fwd90_test { FWD90_KEEP, FWD90_BITS };

/* The tile's tests as bits (bit nb*4 + e), for masks that read memory
 * (attn_keep_reads): nothing here depends on S, so the consumers compute
 * them at the top of a key tile, where S is dead (registers to spare) and
 * the reads overlap the other warpgroup's turn at the tensor cores. For
 * masks without reads the tests inline in fwd90_mask measured faster
 * (plain D 64 +4%). */
static_assert(!attn_keep_reads || fwd90_s_regs <= 64, "one keep bit per S element");
template <bool MASK>
static __device__ __forceinline__ unsigned long long
fwd90_keep_bits(const attn_bh &c, int b, int h, int i_row, int j_col, const attn_params &p) {
  unsigned long long bits = 0;
#pragma unroll
  for (int nb = 0; nb < fwd90_bn / 8; ++nb)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      bits |= (unsigned long long)attn_keep_in_bh<MASK>(c, b, h, i_row + (e >> 1) * 8,
                                                        j_col + nb * 8 + (e & 1), p)
              << (nb * 4 + e);
  return bits;
}

/* The score chain on a whole S tile (flat: fragment nb, element e at
 * nb*4 + e), under its factor where fwd90_fold (attn_score_inner_bh: the
 * whole chain where it does not fold), tested elements or not: written
 * once in the kernel, where a copy per test cost NVRTC 4-30% of a kernel's
 * time (issue 19). A chain
 * that reads memory per element (a bias[b, h, i, j]: attn_score_reads)
 * reads at the positions clamped into the tensors, as attn_keep_in_bh tests
 * and decode.cuh reads, so the elements past the edges read valid memory;
 * fwd90_mask then makes them -inf. */
static __device__ __forceinline__ void fwd90_score_tile(float (&s)[fwd90_s_regs],
                                                        const attn_bh &c, int b, int h,
                                                        int i_row, int j_col,
                                                        const attn_params &p) {
#pragma unroll
  for (int nb = 0; nb < fwd90_bn / 8; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      int i = i_row + (e >> 1) * 8, j = j_col + nb * 8 + (e & 1);
      if constexpr (attn_score_reads) {
        i = min(i, p.Sq - 1);
        j = min(j, p.Skv - 1);
      }
      s[nb * 4 + e] = attn_score_inner_bh(s[nb * 4 + e], c, b, h, i, j, p);
    }
  }
}

/* fwd90_tanh_poly: the softcap's inner chain tanh(acc k) over the tile,
 * by attn_tanh_poly where every argument of the warp's tile lies in
 * [-1, 1] (a warp-uniform branch: eight partial maxima of |x|, then a
 * vote), else by tanh.approx as attn_score_inner_bh does. The arguments
 * are the chain's own (k is attn_bh's product); a NaN argument takes the
 * polynomial (fmaxf drops it) and stays NaN either way. */
static __device__ __forceinline__ void fwd90_tanh_tile(float (&s)[fwd90_s_regs], float k) {
  float m[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int r = 0; r < fwd90_s_regs; ++r) {
    s[r] *= k;
    m[r & 7] = fmaxf(m[r & 7], fabsf(s[r]));
  }
  const float mx = fmaxf(fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3])),
                         fmaxf(fmaxf(m[4], m[5]), fmaxf(m[6], m[7])));
  if (__all_sync(0xffffffffu, mx <= 1.f)) {
#pragma unroll
    for (int r = 0; r < fwd90_s_regs; ++r)
      s[r] = attn_tanh_poly(s[r]);
  } else {
#pragma unroll
    for (int r = 0; r < fwd90_s_regs; ++r)
      s[r] = attn_tanh(s[r]);
  }
}

/* Makes the elements of an S tile failing TEST `fill`: -inf, or with
 * fwd90_fold and a negative factor +inf (the tile then holds the chain
 * under the factor). */
template <int TEST>
static __device__ __forceinline__ void fwd90_mask(float (&s)[fwd90_s_regs], const attn_bh &c, int b,
                                                  int h, int i_row, int j_col,
                                                  unsigned long long bits, float fill,
                                                  const attn_params &p) {
#pragma unroll
  for (int nb = 0; nb < fwd90_bn / 8; ++nb) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = i_row + (e >> 1) * 8;
      const int j = j_col + nb * 8 + (e & 1);
      bool keep;
      if constexpr (TEST == FWD90_BITS)
        keep = (bits >> (nb * 4 + e)) & 1ull;
      else
        keep = attn_keep_in_bh<true>(c, b, h, i, j, p);
      s[nb * 4 + e] = keep ? s[nb * 4 + e] : fill;
    }
  }
}

/* One work tile: a query tile of one (batch, head). */
struct fwd90_tile {
  int m_block, h, b;
};

/* Work tile t of the persistent walk. Heads are taken in sections whose
 * K and V together fit comfortably in L2 (16 MB), so the CTAs running at
 * once share their keys; inside a section the query tiles go from the
 * last (heaviest under a causal mask: it sees the most keys) to the first,
 * across the section's heads, so the light tiles fill the tail. */
static __device__ __forceinline__ fwd90_tile fwd90_tile_of(int t, int n_mb,
                                                           const attn_params &p) {
  const int hb = p.H * (attn_packed ? 1 : p.B); /* packed: B's tiles are n_mb's */
  const long long kv_bytes = (long long)max(p.Skv, 1) * (fwd90_dqk + fwd90_dv) * (fwd90_kv8 ? 1 : 2);
  const int heads = (int)max(1LL, min((long long)hb, (16LL << 20) / kv_bytes));
  const int sec_tiles = heads * n_mb;
  const int sec = t / sec_tiles, w = t - sec * sec_tiles;
  const int in_sec = min(heads, hb - sec * heads);
  const int bh = sec * heads + w % in_sec;
  fwd90_tile r;
  r.m_block = n_mb - 1 - w / in_sec;
  r.h = bh % p.H;
  r.b = bh / p.H;
  return r;
}

/* The persistent kernel's next work tile after t. With the runtime's
 * queue (p.tile_queue, two zeroed words per call), tiles past the first
 * wave go to whichever CTA asks first, in fwd90_tile_of's heavy-first
 * order: causal tiles differ in work up to Sq/BM-fold, and a static
 * stride left whole SMs idle at the end (bench/NOTES-sm90.md). The CTA
 * that takes the last end marker zeroes the queue for the next launch on
 * the stream; no CTA reads it after its end marker. Without a queue (an
 * embedded kernel launched one CTA per tile), a static stride. */
static __device__ __forceinline__ int fwd90_next_tile(int t, int n_ctas, int n_tiles,
                                                      const attn_params &p) {
  if (!p.tile_queue)
    return t + n_ctas;
  const int next = n_ctas + (int)atomicAdd(p.tile_queue, 1u);
  if (next >= n_tiles && atomicAdd(p.tile_queue + 1, 1u) == (unsigned)n_ctas - 1) {
    p.tile_queue[0] = 0;
    p.tile_queue[1] = 0;
  }
  return next;
}

/* kv8 under a bf16 q (fwd90_q_rescale): one warp's 16 rows of the Q tile
 * (q_rows: the first of them, in blocks of [BM rows][64 elements])
 * rewritten in place as f16 rows times powers of two (ptx.cuh,
 * attn_rows_bf16_to_f16: lane l's k-th chunk is chunk l & 7 of row
 * (l >> 3) + 4 (k & 3) in block k >> 2); qinv gets 2^-e of the lane's rows
 * of S, g and g + 8. */
static __device__ __forceinline__ void fwd90_q_to_f16(unsigned q_rows, int lane,
                                                      float (&qinv)[2]) {
  attn_rows_bf16_to_f16<fwd90_dqk / 64 * 4>(
      [&](int k) {
        return q_rows + (k >> 2) * fwd90_bm * 128 + ((lane >> 3) + 4 * (k & 3)) * 128 +
               (lane & 7) * 16;
      },
      lane, qinv);
}

/* FP8 V: the 8-bit tile at v8 (blocks of [BN][128 bytes] as TMA landed
 * them) into the 16-bit tile at v16 (blocks of [BN][64 elements], the
 * layout a TMA box of f16 would have), by the 96 threads ct of producer
 * warps 1-3: each takes 16-byte chunks (8 lanes read one swizzled row),
 * cvt.rn.f16x2 of e4m3 (exact) or e5m2 (its bytes are the top bytes of
 * f16). Only the D columns of the 16-bit tile are converted. With kv8 (an
 * FP8 cache under a 16-bit q) the same for K and V, or, where the GEMMs
 * stay in bf16 (fwd90_q_rescale), into bf16 by attn_fp8x4_cvt (exact). */
template <int D>
static __device__ __forceinline__ void fwd90_convert(unsigned v8, unsigned v16, int ct) {
  /* Thread ct's chunks are ct + 96 i: as a row holds D / 16 chunks (4, 8,
   * 12 or 16, each dividing 96) they are one column cc of rows r0 + STEP i.
   * The swizzle's r & 7 then repeats every PERIOD rows' steps, so the
   * addresses of a GROUP of consecutive chunks (PERIOD, at least 2) are set
   * once and each later group is theirs plus GROUP * STEP rows: no
   * per-chunk index arithmetic (35 instructions a chunk with it at D 128,
   * session 29's SASS). Chunks go two at a time, both loads first: the
   * shared-memory accesses are volatile asm, kept in program order, so
   * load, convert, store chunk by chunk left one load in flight a thread
   * (ncu: the converters' short-scoreboard stalls, session 29). Four in
   * flight (one address a chunk: its halves differ in bit 4) measured no
   * faster, D 128-192 1-3% slower (H100, session 30): the loads' latency
   * is the shared pipe's queue behind the consumers' wgmma reads, which
   * more loads in flight only lengthen. */
  constexpr int row_chunks = D / 16;
  static_assert(96 % row_chunks == 0, "a row's chunks divide the 96 converter threads");
  constexpr int step = 96 / row_chunks;
  constexpr int period = step % 8 == 0 ? 1 : step % 4 == 0 ? 2 : step % 2 == 0 ? 4 : 8;
  constexpr int group = period < 2 ? 2 : period;
  const int cc = ct % row_chunks, r0 = ct / row_chunks;
  unsigned src[group], dst[group][2];
#pragma unroll
  for (int j = 0; j < group; ++j) {
    const int r = r0 + j * step;
    src[j] = v8 + (cc >> 3) * fwd90_bn * 128 + r * 128 + (((cc & 7) ^ (r & 7)) << 4);
#pragma unroll
    for (int half = 0; half < 2; ++half)
      dst[j][half] = v16 + (cc >> 2) * fwd90_bn * 128 + r * 128 +
                     (((2 * (cc & 3) + half) ^ (r & 7)) << 4);
  }
  auto widen = [&](const unsigned (&x)[4], unsigned d0, unsigned d1) {
    unsigned y[8];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      if constexpr (fwd90_kv8 && fwd90_in_bf16) {
        attn_fp8x4_cvt<fwd90_kv_fp8 == 1, true>(x[w], y[2 * w], y[2 * w + 1]);
      } else if constexpr (fwd90_kv_fp8 == 1) {
        attn_e4m3x4_to_f16(x[w], y[2 * w], y[2 * w + 1]);
      } else {
        y[2 * w] = __byte_perm(x[w], 0u, 0x1404u);
        y[2 * w + 1] = __byte_perm(x[w], 0u, 0x3424u);
      }
    }
    attn_sts128(d0, y[0], y[1], y[2], y[3]);
    attn_sts128(d1, y[4], y[5], y[6], y[7]);
  };
#pragma unroll 1
  for (int rb = r0, off = 0; rb < fwd90_bn; rb += group * step, off += group * step * 128) {
#pragma unroll
    for (int j = 0; j < group; j += 2) {
      /* (chunk 0 of a group is in the tile by the loop's test; a later one
       * where its row is) */
      const bool has0 = j == 0 || rb + j * step < fwd90_bn;
      const bool has1 = rb + (j + 1) * step < fwd90_bn;
      unsigned x0[4], x1[4];
      if (has0)
        attn_lds128(src[j] + off, x0);
      if (has1)
        attn_lds128(src[j + 1] + off, x1);
      if (has0)
        widen(x0, dst[j][0] + off, dst[j][1] + off);
      if (has1)
        widen(x1, dst[j + 1][0] + off, dst[j + 1][1] + off);
    }
  }
}
static __device__ __forceinline__ void fwd90_convert_v(unsigned v8, unsigned v16, int ct) {
  fwd90_convert<fwd90_dv>(v8, v16, ct);
}

/* A 4x4 byte transpose: y[c] = byte c of x0, x1, x2, x3 (in that order). */
static __device__ __forceinline__ void fwd90_transpose4(unsigned x0, unsigned x1, unsigned x2,
                                                        unsigned x3, unsigned (&y)[4]) {
  const unsigned lo01 = __byte_perm(x0, x1, 0x5140u), hi01 = __byte_perm(x0, x1, 0x7362u);
  const unsigned lo23 = __byte_perm(x2, x3, 0x5140u), hi23 = __byte_perm(x2, x3, 0x7362u);
  y[0] = __byte_perm(lo01, lo23, 0x5410u);
  y[1] = __byte_perm(lo01, lo23, 0x7632u);
  y[2] = __byte_perm(hi01, hi23, 0x5410u);
  y[3] = __byte_perm(hi01, hi23, 0x7632u);
}

/* FP8 P V: the 8-bit V tile at v8 (blocks of [BN][128 bytes]) into V^T
 * at vt ([DV rows][BN key bytes], 128- or 64-byte swizzle), keys permuted
 * as fwd90_p8 says (V^T's key byte 16G + 4t + 2x + y holds key 16G + 8x +
 * 2t + y), by the 96 threads ct of producer warps 1-3. */
static __device__ __forceinline__ void fwd90_transpose_v(unsigned v8, unsigned vt, int ct) {
  if constexpr (fwd90_vt_row == 128 && fwd90_dv <= 256) {
    /* Key tiles of 128 (the kernel's choice up to DV 128; at 256 too with
     * fwd90_vt8). An item is the 8 keys of key byte
     * run 16G + 8tp.. (keys 16G + 4tp + {0..3, 8..11}) by the 8 columns
     * d0 = 8cb..: eight 8-byte reads (one a key), four 4x4 byte transposes,
     * eight 8-byte writes (one a column). 8-byte accesses are served a
     * half-warp at a time, one wavefront when its 16 lanes hit distinct
     * 8-byte slots of the 32 banks. A half-warp's lanes take G (3 bits)
     * and tp, the halves j, and column block cb = 2G + h + 2 it with h =
     * j ^ tp (DV 128) or j ^ tp ^ G / 4 (DV 64): its reads (rows alike mod
     * 8 across G, so the 16-byte chunks differ with G mod DV / 16, the
     * 8-byte halves with tp and, at DV 64, with G / 4) and its writes (the swizzle moves a row's
     * chunk by d mod 8, alike across lanes: the chunks differ with G,
     * the halves with tp) each take one wavefront.
     * tests/host/fwd90_v_host_check.sh counts them: against the 4-byte
     * items (BN 128, DV 128: 256 instructions, 512 wavefronts; DV 64: 128,
     * 256), half the instructions and wavefronts (128, 256; 64, 128), and
     * a quarter of the address arithmetic (session 18; not yet measured on
     * the GPU). */
    constexpr int nb = fwd90_dv / 8, iters = nb / 2; /* (DV: 64 to 256, the tile's width) */
    const int lane = ct & 31;
    const int G = lane & 7, tp = (lane >> 3) & 1, j = lane >> 4;
#pragma unroll 1
    for (int it = ct >> 5; it < iters; it += 3) {
      const int d0 = 8 * ((2 * G + (j ^ tp ^ (nb == 8 ? G >> 2 : 0)) + 2 * it) % nb);
      unsigned a[8], b[8]; /* key e's columns d0..d0+3 and d0+4..d0+7 */
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int r = 16 * G + 4 * tp + (e & 3) + 8 * (e >> 2);
        /* (past 128 columns, v8's next [BN][128 bytes] block: the same
         * banks, so still one wavefront a half-warp) */
        const unsigned blk = fwd90_dv > 128 ? (unsigned)(d0 >> 7) * fwd90_bn * 128 : 0u;
        attn_lds64(v8 + blk + r * 128 + ((((d0 & 127) >> 4) ^ (r & 7)) << 4) + (d0 & 15), a[e],
                   b[e]);
      }
      /* Column c's 8 bytes: keys +0, +1, +8, +9 (key e = 0, 1, 4, 5), then
       * +2, +3, +10, +11 (e = 2, 3, 6, 7). */
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const unsigned *x = half ? b : a;
        unsigned lo[4], hi[4];
        fwd90_transpose4(x[0], x[1], x[4], x[5], lo);
        fwd90_transpose4(x[2], x[3], x[6], x[7], hi);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int d = d0 + 4 * half + c;
          attn_sts64(vt + d * 128 + ((G ^ (d & 7)) << 4) + 8 * tp, lo[c], hi[c]);
        }
      }
    }
  } else if constexpr (fwd90_vt_row == 64 && fwd90_dv % 64 == 0) {
    /* Key tiles of 64 (the kernel's choice above DV 128; V^T rows of 64
     * key bytes, the 64-byte swizzle): the same 8-key x 8-column items, a
     * half-warp's 16 lanes on the 8 key runs (G: 16 keys, tp: the run's
     * half) and two column parities p. Combo k (W = k / 4, a = k % 4; the
     * half-warp's, taken by halves j, warps and iterations) gives lane
     * columns d0 = 64 W + 16 (G ^ a) + 8 p, so a run meets every 8-column
     * block once over the 4 DV / 64 combos. Reads: the 16 lanes' 8-byte
     * halves of a v8 row differ in chunk (G ^ a; tp flips its bit 2 through
     * the row's swizzle) and half (p). Writes: lanes of odd p store their
     * columns in pair-swapped order (c ^ 1: the transposes' selectors
     * swapped, no extra instruction), so a step's V^T rows differ in parity
     * (64 bytes apart) by p and in chunk by G: one wavefront each way a
     * half-warp (tests/host/fwd90_v_host_check.sh counts them). */
    constexpr int combos = 4 * (fwd90_dv / 64);
    const int lane = ct & 31;
    const int G = lane & 3, tp = (lane >> 2) & 1, pp = (lane >> 3) & 1, j = lane >> 4;
    const unsigned sel_even = pp ? 0x7632u : 0x5410u, sel_odd = pp ? 0x5410u : 0x7632u;
#pragma unroll 1
    for (int k = j + 2 * (ct >> 5); k < combos; k += 6) {
      const int d0 = 64 * (k >> 2) + 16 * (G ^ (k & 3)) + 8 * pp;
      unsigned a[8], b[8]; /* key e's columns d0..d0+3 and d0+4..d0+7 */
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int r = 16 * G + 4 * tp + (e & 3) + 8 * (e >> 2);
        attn_lds64(v8 + (d0 >> 7) * fwd90_bn * 128 + r * 128 +
                       ((((d0 & 127) >> 4) ^ (r & 7)) << 4) + (d0 & 15),
                   a[e], b[e]);
      }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const unsigned *x = half ? b : a;
        /* y[c]: column c ^ pp of keys +0, +1, +8, +9 (lo) or +2, +3, +10,
         * +11 (hi): fwd90_transpose4 with the pair order chosen by pp. */
        unsigned lo[4], hi[4];
#pragma unroll
        for (int w = 0; w < 2; ++w) {
          const unsigned *xx = w ? x + 2 : x; /* keys +0, +1, +8, +9, or +2, +3, +10, +11 */
          unsigned *y = w ? hi : lo;
          const unsigned l01 = __byte_perm(xx[0], xx[1], 0x5140u), h01 = __byte_perm(xx[0], xx[1], 0x7362u);
          const unsigned l23 = __byte_perm(xx[4], xx[5], 0x5140u), h23 = __byte_perm(xx[4], xx[5], 0x7362u);
          y[0] = __byte_perm(l01, l23, sel_even);
          y[1] = __byte_perm(l01, l23, sel_odd);
          y[2] = __byte_perm(h01, h23, sel_even);
          y[3] = __byte_perm(h01, h23, sel_odd);
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int d = d0 + 4 * half + (c ^ pp);
          attn_sts64(vt + d * 64 + ((G ^ ((d >> 1) & 3)) << 4) + 8 * tp, lo[c], hi[c]);
        }
      }
    }
  } else {
    /* Key tiles of 128 with V tiles wider than 128. An item is 4 keys (16g + 2t
     * + {0, 1, 8, 9}) by 4 columns d0..d0+3: four words read, a 4x4 byte
     * transpose, four words written to rows d0.. at key byte 16g + 4t. A
     * warp's 32 lanes take t (2 bits), d0's low bits (2) and g's low bit,
     * so both its reads and its writes fall on 16 banks. */
    constexpr int groups = fwd90_bn / 16, items = groups * 4 * (fwd90_dv / 4);
#pragma unroll 2
    for (int it = ct; it < items; it += 96) {
      const int lane = it & 31, rest = it >> 5;
      const int t = lane & 3, w = (lane >> 2) & 3, g0 = lane >> 4;
      const int gh = rest % (groups / 2), q = rest / (groups / 2);
      const int g = 2 * gh + g0, d0 = 16 * q + 4 * w;
      unsigned x[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = 16 * g + 2 * t + (e & 1) + 8 * (e >> 1);
        x[e] = attn_lds32(v8 + (d0 >> 7) * fwd90_bn * 128 + r * 128 +
                          ((((d0 & 127) >> 4) ^ (r & 7)) << 4) + (d0 & 15));
      }
      unsigned y[4];
      fwd90_transpose4(x[0], x[1], x[2], x[3], y);
      const int kb = 16 * g + 4 * t; /* the key byte in V^T's row */
#pragma unroll
      for (int xx = 0; xx < 4; ++xx) {
        const int d = d0 + xx;
        attn_sts32(vt + d * fwd90_vt_row + (fwd90_vt_chunk(kb >> 4, d) << 4) + (kb & 15), y[xx]);
      }
    }
  }
}

__device__ __forceinline__ void attn_fwd_sm90(const attn_params &p, const attn_tmaps &tm) {
  extern __shared__ __align__(1024) unsigned char fwd90_smem[];
  const float neg_inf = __int_as_float(0xff800000);

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;

  /* The work: one tile per CTA (grid = query tiles x H x B, query tiles
   * in reverse blockIdx.x order, heavy first), or, persistent, tile
   * `first` and then those fwd90_next_tile hands out, in fwd90_tile_of's
   * order; the producer publishes each to the consumers in shared memory
   * (an index >= n_tiles ends the loop). Tile counts fit
   * an int: Sq*H*B/128 tiles of q need far more than any GPU's memory
   * before they reach 2^31. */
  /* Packed sequences: ceil(Sq / BM) + B query tiles a head, each finding
   * its sequence (hooks.cuh, attn_packed_work). */
  const int n_mb = (p.Sq + fwd90_bm - 1) / fwd90_bm + (attn_packed ? p.B : 0);
  const int n_tiles = fwd90_persistent ? n_mb * p.H * (attn_packed ? 1 : p.B) : 1;
  const int first =
      fwd90_persistent ? (int)(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z))
                       : 0;
  const int n_ctas = fwd90_persistent ? (int)(gridDim.x * gridDim.y * gridDim.z) : 1;
  auto tile_at = [&](int t) {
    fwd90_tile r;
    if constexpr (fwd90_persistent) {
      r = fwd90_tile_of(t, n_mb, p);
    } else {
      r.m_block = (int)gridDim.x - 1 - (int)blockIdx.x;
      r.h = blockIdx.y;
      r.b = blockIdx.z;
    }
    return r;
  };

  /* Tiles on 1024-byte boundaries: round the dynamic base up. */
  const unsigned base = (attn_smem_addr(fwd90_smem) + 1023u) & ~1023u;
  const unsigned sq = base;
  const unsigned skv = base + fwd90_q_bytes; /* stage s at skv + s*stage */
  const unsigned bars = base + fwd90_bar_offset;
  const unsigned bar_q = bars;
  auto bar_k = [&](int s) { return bars + 8u * (1 + s); };
  auto bar_v = [&](int s) { return bars + 8u * (1 + fwd90_stages + s); };
  auto bar_empty = [&](int s) { return bars + 8u * (1 + 2 * fwd90_stages + s); }; /* K */
  auto bar_empty_v = [&](int s) { return bars + 8u * (2 + 3 * fwd90_stages + s); };
  const unsigned bar_q_empty = bars + 8u * (1 + 3 * fwd90_stages);
  /* FP8: V converted to 16 bits (by the three converter warps); kv8: K too. */
  auto bar_v16 = [&](int s) { return bars + 8u * (2 + 4 * fwd90_stages + s); };
  auto bar_k16 = [&](int s) { return bars + 8u * (2 + 5 * fwd90_stages + s); };
  /* kv8_early: the stage's 8-bit K or V tile read by the converters. */
  auto bar_k8_free = [&](int s) { return bars + 8u * (2 + 6 * fwd90_stages + s); };
  auto bar_v8_free = [&](int s) { return bars + 8u * (2 + 7 * fwd90_stages + s); };
  /* Where the consumers' S GEMM finds K: its 16-bit tile once converted
   * (kv8), else as TMA landed it. (The stage's slot is read after it too:
   * the converters waited for bar_k before their arrive.) */
  auto bar_k_ready = [&](int s) { return fwd90_kv8 ? bar_k16(s) : bar_k(s); };
  auto bar_v_ready = [&](int s) { return fwd90_conv ? bar_v16(s) : bar_v(s); };
  const unsigned tile_slot = bars + 8u * fwd90_nbars;
  /* (kv8_early: per phase, the odd phase's after the converters' words) */
  auto stage_slot = [&](int s, int ph) {
    return tile_slot + 8u * (1 + s + (fwd90_kv8_early && ph ? 2 * fwd90_stages : 0));
  };
  /* FP8: the converters' word per stage, written with each V copy (kv8:
   * each K copy): 1, or 0 when no copy comes (the producer is done). */
  auto conv_slot = [&](int s) { return tile_slot + 8u * (1 + fwd90_stages + s); };

  if (tid == 0) {
    attn_mbar_init(bar_q, 1);
    /* The consumers' empties take an arrive from every consumer thread,
     * each after its own reads of the slots (an elected lane's arrive
     * orders only that lane's reads: tests/gpu/racecheck_control.cu). */
    attn_mbar_init(bar_q_empty, fwd90_consumer_threads);
    for (int s = 0; s < fwd90_stages; ++s) {
      attn_mbar_init(bar_k(s), 1);
      attn_mbar_init(bar_v(s), 1);
      attn_mbar_init(bar_empty(s), fwd90_consumer_threads);
      attn_mbar_init(bar_empty_v(s), fwd90_consumer_threads);
      if constexpr (fwd90_conv)
        attn_mbar_init(bar_v16(s), 96); /* every converter thread (warps 1-3) */
      if constexpr (fwd90_kv8)
        attn_mbar_init(bar_k16(s), 96);
      if constexpr (fwd90_kv8_early) {
        attn_mbar_init(bar_k8_free(s), 96);
        attn_mbar_init(bar_v8_free(s), 96);
      }
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  /* The warpgroup index through a shuffle, so the compiler knows it is
   * uniform across each warp (wgmma in a "divergent" path is serialized). */
  const int wgi = __shfl_sync(0xffffffffu, tid / 128, 0);
  if (wgi == 0) {
    /* ---------------------------------------------------- producer */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(fwd90_producer_regs) : "memory");
    /* Warp 0 walks the key tiles (its lanes classify 32 candidates at
     * once); lane 0 issues the copies and the barrier arrivals. With FP8,
     * warps 1-3 convert each V tile (kv8: each K tile, then V) as it
     * lands, in the producer's order of stage uses, until the producer's
     * word says no copy comes. */
    if (warp != 0) {
      if constexpr (fwd90_kv8) {
        for (int u = 0;; ++u) {
          const int st = u % fwd90_stages, ph = (u / fwd90_stages) & 1;
          const unsigned ks = skv + st * fwd90_stage_bytes, vs = ks + fwd90_k_bytes;
          attn_mbar_wait(bar_k(st), ph);
          unsigned more;
          asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(more) : "r"(conv_slot(st)) : "memory");
          if (!more)
            break;
          /* kv8_early: the producer loaded this 8-bit K once its last one
           * was read, so wait for the consumers to free the 16-bit tile
           * (without it, its load waited for that itself) */
          if constexpr (fwd90_kv8_early)
            attn_mbar_wait(bar_empty(st), ph ^ 1);
          fwd90_convert<fwd90_dqk>(vs + fwd90_v_bytes + fwd90_v8_bytes, ks, tid - 32);
          attn_fence_proxy_async(); /* (as below; before TMA's next write too) */
          attn_mbar_arrive(bar_k16(st));
          if constexpr (fwd90_kv8_early)
            attn_mbar_arrive(bar_k8_free(st));
          attn_mbar_wait(bar_v(st), ph);
          if constexpr (fwd90_kv8_early)
            attn_mbar_wait(bar_empty_v(st), ph ^ 1);
          fwd90_convert_v(vs + fwd90_v_bytes, vs, tid - 32);
          attn_fence_proxy_async();
          attn_mbar_arrive(bar_v16(st));
          if constexpr (fwd90_kv8_early)
            attn_mbar_arrive(bar_v8_free(st));
        }
      } else if constexpr (fwd90_fp8) {
        for (int u = 0;; ++u) {
          const int st = u % fwd90_stages, ph = (u / fwd90_stages) & 1;
          attn_mbar_wait(bar_v(st), ph);
          unsigned more;
          asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(more) : "r"(conv_slot(st)) : "memory");
          if (!more)
            break;
          const unsigned vs = skv + st * fwd90_stage_bytes + fwd90_k_bytes;
          if constexpr (fwd90_p8)
            fwd90_transpose_v(vs + fwd90_v_bytes, vs, tid - 32);
          else
            fwd90_convert_v(vs + fwd90_v_bytes, vs, tid - 32);
          /* Each thread fences its own writes for wgmma's async proxy and
           * arrives itself: its arrive also orders its read of conv_slot
           * before the producer rewrites it (an elected lane's arrive
           * would order only that lane's accesses). */
          attn_fence_proxy_async();
          attn_mbar_arrive(bar_v16(st));
        }
      }
      return;
    }
    const attn_tmap *mq = &tm.m[ATTN_TMAP_Q];
    const attn_tmap *mk = &tm.m[ATTN_TMAP_K];
    const attn_tmap *mv = &tm.m[ATTN_TMAP_V];
    if (lane == 0) {
      attn_prefetch_tmap(mq);
      attn_prefetch_tmap(mk);
      attn_prefetch_tmap(mv);
    }
    unsigned long long visited = 0;
    int it = 0, tq = 0; /* K/V stage uses and Q loads, over all tiles */
    for (int t = first;; ++tq) {
      if (tq > 0) {
        if constexpr (!fwd90_persistent)
          break;
        int tn = 0;
        if (lane == 0)
          tn = fwd90_next_tile(t, n_ctas, n_tiles, p);
        t = __shfl_sync(0xffffffffu, tn, 0);
      }
      if (t >= n_tiles) {
        if constexpr (fwd90_persistent) { /* the end marker, as a Q phase */
          attn_mbar_wait(bar_q_empty, (tq & 1) ^ 1);
          if (lane == 0) {
            asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(tile_slot), "r"(t) : "memory");
            attn_mbar_arrive(bar_q);
          }
        }
        break;
      }
      const fwd90_tile tl = tile_at(t);
#if defined(ATTN_PACKED_Q)
      /* The tile's sequence, seen as a dense batch entry (its own p);
       * TMA addresses its rows from q0 and k0 of the packed tensors. */
      int b, m_block, q0, k0;
      bool owned;
      const attn_params p_seq = attn_packed_work<fwd90_bm>(tl.m_block, p, b, m_block, q0, k0, owned);
      const attn_params &p = p_seq;
      const int tb = 0;
#else
      const int b = tl.b, m_block = tl.m_block, q0 = 0, k0 = 0, tb = b;
#endif
      const int h = tl.h, hk = h / (p.H / p.Hk);
      int i0, i_end;
      fwd90_rows(m_block, p.Sq, i0, i_end);
      const int i_last = i_end - 1;
      int n_begin, n_end;
      attn_key_tiles<fwd90_bn>(b, h, i0, i_last, p, n_begin, n_end);
      /* The live key tiles in order, classified 32 candidates at a time
       * (one per lane; the masks are warp-uniform): the consumers read
       * each tile's index and class from its stage and never classify.
       * For separable masks a class is a few dependent L2 reads, and a
       * per-candidate walk in every warp cost more than the tiles it
       * skipped (bench/NOTES-sm90.md). */
      int chunk = n_begin, base_n = 0;
      unsigned live = 0, full = 0;
      auto pop = [&](int &n, int &cls) {
        while (live == 0 && chunk < n_end) {
          const int c = chunk + lane;
          int k = 0;
          if (c < n_end) {
            const int j0 = c * fwd90_bn;
            k = attn_tile_class(b, h, i0, i_last, j0, min(j0 + fwd90_bn, p.Skv) - 1, p);
          }
          live = __ballot_sync(0xffffffffu, k != 0);
          full = __ballot_sync(0xffffffffu, k == 2);
          base_n = chunk;
          chunk += 32;
        }
        if (live == 0)
          return false;
        const int bit = __ffs(live) - 1;
        n = base_n + bit;
        cls = (full >> bit) & 1u ? 2 : 1;
        live &= live - 1u;
        return true;
      };
      /* Paged K/V: tile n's boxes of page_box rows, one per lane (and
       * lane + 32, ...), each from its page (or zeros: an id outside the
       * cache, or rows past the view, lie outside the map). */
      auto load_pages = [&](unsigned dst, const attn_tmap *m, unsigned bar, int blocks, int n_,
                            int block_cols) {
        if constexpr (fwd90_paged) {
          const attn_pages pages = attn_pages_of(p, b);
          const int box = fwd90_page_box(pages.size);
          for (int x = lane; x < fwd90_bn / box; x += 32) {
            const int j = n_ * fwd90_bn + x * box;
            int id = -1, row = 0;
            if (j < p.Skv) {
              const int pg = j / pages.size; /* (a box a lane: a division costs little here) */
              row = j - pg * pages.size;
              id = __ldg(pages.table + pg * pages.step);
            }
            for (int c = 0; c < blocks; ++c)
              attn_tma_load4(dst + c * fwd90_bn * 128 + x * box * 128, m, bar, c * block_cols,
                             row, hk, id);
          }
        }
      };
      /* One pop a pass: a pass issues the tile the pass before popped
       * (this pop says whether it is the last), then Q when it is due: on
       * the first work tile at once, before any K/V; on later ones after
       * the first K/V copy, which needs only a free stage and so may start
       * before the consumers release Q (the Q load waits for them). One
       * call site for pop and one compiled site for the Q load: each was
       * inlined two or three times, NVRTC time (issue 19). The Q load is a
       * macro with two sites, of which fwd90_q_before_v compiles the one
       * between the first key tile's K and V copies (V's copy waits for
       * the last warpgroup's P V of the tile before last, after its last
       * softmax; a short tile releases Q after its last S GEMM, about a
       * softmax earlier) and the default the one after both. A macro, not
       * a lambda: with a lambda the producer's registers moved. */
#define FWD90_SEND_Q()                                                                            \
  if (!q_sent && (tq == 0 || have || !got)) {                                                     \
    attn_mbar_wait(bar_q_empty, (tq & 1) ^ 1);                                                    \
    /* The consumers read the slot after this phase of bar_q, which the                        \
     * arrive below releases; they read the last value before their q-empty                    \
     * arrive, so overwriting it now is safe. */                                                 \
    if (lane == 0) {                                                                              \
      asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(tile_slot), "r"(t),                 \
                   "r"(any ? 1 : 0)                                                               \
                   : "memory");                                                                   \
      attn_mbar_expect_tx(bar_q, fwd90_q_bytes);                                                  \
      _Pragma("unroll") for (int c = 0; c < fwd90_dqk / fwd90_blk; ++c)                           \
        attn_tma_load4(sq + c * fwd90_bm * 128, mq, bar_q, c * fwd90_blk, q0 + i0, h, tb);       \
    }                                                                                             \
    q_sent = true;                                                                                \
  }
      int n = 0, cls = 0;
      bool have = false, any = false, q_sent = false;
      for (bool first_pop = true;; first_pop = false) {
        int nn = 0, ncls = 0;
        const bool got = pop(nn, ncls);
        if (first_pop)
          any = got;
        if (have) {
          const int st = it % fwd90_stages, ph = (it / fwd90_stages) & 1;
          /* (kv8_early: the 8-bit staging's last use read, not the 16-bit
           * tile freed: the converters wait for that) */
          attn_mbar_wait(fwd90_kv8_early ? bar_k8_free(st) : bar_empty(st), ph ^ 1);
          const unsigned ks = skv + st * fwd90_stage_bytes;
          const unsigned vs = ks + fwd90_k_bytes;
          const unsigned ks8 = vs + fwd90_v_bytes + fwd90_v8_bytes; /* kv8 */
          if (lane == 0) {
            /* The tile's index and class (4: the work tile's last), read
             * by the consumers after this phase of bar_k(st). */
            asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(stage_slot(st, ph)), "r"(n),
                         "r"(cls | (got ? 0 : 4))
                         : "memory");
            if constexpr (fwd90_kv8) { /* the 8-bit tile, for the converters */
              asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(conv_slot(st)), "r"(1u) : "memory");
              attn_mbar_expect_tx(bar_k(st), fwd90_k8_bytes);
            } else {
              attn_mbar_expect_tx(bar_k(st), fwd90_k_bytes);
            }
            if constexpr (fwd90_kv8 && !fwd90_paged) {
#pragma unroll
              for (int c = 0; c < fwd90_dk8 / 128; ++c)
                attn_tma_load4(ks8 + c * fwd90_bn * 128, mk, bar_k(st), c * 128,
                               k0 + n * fwd90_bn, hk, tb);
            } else if constexpr (!fwd90_paged) {
#pragma unroll
              for (int c = 0; c < fwd90_dqk / fwd90_blk; ++c)
                attn_tma_load4(ks + c * fwd90_bn * 128, mk, bar_k(st), c * fwd90_blk,
                               k0 + n * fwd90_bn, hk, tb);
            }
          }
          if constexpr (fwd90_paged) { /* after the expect_tx: a box per lane */
            __syncwarp();
            if constexpr (fwd90_kv8)
              load_pages(ks8, mk, bar_k(st), fwd90_dk8 / 128, n, 128);
            else
              load_pages(ks, mk, bar_k(st), fwd90_dqk / fwd90_blk, n, 64);
          }
          if constexpr (fwd90_q_before_v)
            FWD90_SEND_Q();
          attn_mbar_wait(fwd90_kv8_early ? bar_v8_free(st) : bar_empty_v(st), ph ^ 1);
          if constexpr (fwd90_paged) {
            if (lane == 0)
              attn_mbar_expect_tx(bar_v(st), fwd90_kv8 ? fwd90_v8_bytes : fwd90_v_bytes);
            __syncwarp();
            if constexpr (fwd90_kv8)
              load_pages(vs + fwd90_v_bytes, mv, bar_v(st), fwd90_dv8 / 128, n, 128);
            else
              load_pages(vs, mv, bar_v(st), fwd90_dv / 64, n, 64);
          } else if (lane == 0) {
            if constexpr (fwd90_conv) { /* the 8-bit tile, for the converters */
              if constexpr (fwd90_fp8) /* (kv8: written with K's) */
                asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(conv_slot(st)), "r"(1u) : "memory");
              attn_mbar_expect_tx(bar_v(st), fwd90_v8_bytes);
#pragma unroll
              for (int c = 0; c < fwd90_dv8 / 128; ++c)
                attn_tma_load4(vs + fwd90_v_bytes + c * fwd90_bn * 128, mv, bar_v(st), c * 128,
                               k0 + n * fwd90_bn, hk, tb);
            } else {
              attn_mbar_expect_tx(bar_v(st), fwd90_v_bytes);
#pragma unroll
              for (int c = 0; c < fwd90_dv / 64; ++c)
                attn_tma_load4(vs + c * fwd90_bn * 128, mv, bar_v(st), c * 64, k0 + n * fwd90_bn, hk,
                               tb);
            }
          }
          ++visited;
          ++it;
        }
        FWD90_SEND_Q(); /* (q_before_v: the first tile's, and a tile's without key tiles) */
        if (!got)
          break;
        n = nn;
        cls = ncls;
        have = true;
      }
#undef FWD90_SEND_Q
    }
    if constexpr (fwd90_conv) { /* tells the converters no copy comes */
      const int st = it % fwd90_stages, ph = (it / fwd90_stages) & 1;
      /* (kv8: the converters wait for K's barrier first) */
      attn_mbar_wait(fwd90_kv8_early ? bar_k8_free(st) : fwd90_kv8 ? bar_empty(st) : bar_empty_v(st),
                     ph ^ 1);
      if (lane == 0) {
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(conv_slot(st)), "r"(0u) : "memory");
        attn_mbar_arrive(fwd90_kv8 ? bar_k(st) : bar_v(st));
      }
    }
    if (p.tiles_visited && lane == 0)
      atomicAdd(p.tiles_visited, visited);
    return;
  }

  /* ------------------------------------------------------ consumers */
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(fwd90_consumer_regs) : "memory");
  const int wg = wgi - 1; /* rows 64*wg.. of the tile */
  const int ww = warp & 3;        /* 16 rows per warp */
  const int g = lane >> 2, t4 = lane & 3;
  /* The turns at the tensor cores, a ring: warpgroup wg waits on barrier
   * 1 + wg (bar.sync, 256 threads: its own and the one arriving) and
   * hands over on the next one's. One ring for the whole kernel, not one
   * a work tile: the last warpgroup opens it once, before the first tile,
   * and hands over after every key tile, the work tile's last included, so
   * warpgroup 0 takes the next tile's first turn as soon as the last one
   * has issued this tile's last GEMMs, and its S GEMM and softmax run
   * under the others' last softmax, P V and O's store (FA3 keeps its
   * scheduler barrier across tiles too). Each warpgroup takes one turn a
   * key tile of every work tile, so the next turn at a tile's start is
   * always warpgroup 0's. The ring closed at each tile's end until session
   * 40: warpgroup 0 then waited for the last one's whole epilogue, about
   * two key tiles' time a work tile by the grid's S 1k-4k figures. The
   * token left at the end (on warpgroup 0's barrier) is taken by
   * warpgroup 0 after its last tile, so every barrier sees as many
   * arrives as waits. fwd90_ring_per_tile (the ring_closed variant) keeps
   * the old ring for measuring against: opened by the last warpgroup at
   * each tile's start, no hand-over after the tile's last key tile. */
  const int my_turn = 1 + wg; /* named barrier ids */
  const int next_turn = fwd90_wgs == 2 ? 2 - wg : 1 + (wg + 1) % fwd90_wgs;
  const bool last_wg = wg == fwd90_wgs - 1;
  const unsigned q_wg = sq + wg * 64 * 128;
  /* Waits for K of stage st (phase ph), then reads the key tile the
   * producer loaded there, its class and whether it is the work tile's last
   * (before this warp's K-empty arrive, after which the producer may
   * rewrite it); the full path and fwd90_skip_idle's alike. */
  auto key_tile_at = [&](int st, int ph, int &n, int &tag) {
    attn_mbar_wait(bar_k_ready(st), ph);
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n"
                 : "=r"(n), "=r"(tag)
                 : "r"(stage_slot(st, ph))
                 : "memory");
  };

  float o[fwd90_o_regs];
  float s[fwd90_s_regs];
  unsigned pa[fwd90_pa_steps][4];
  int git = 0, tq = 0; /* K/V stage uses and Q loads, over all tiles */
  unsigned amax = 0;   /* an amax output's running max, over all tiles */
  if (!fwd90_ring_per_tile && last_wg)
    attn_named_arrive(1); /* the ring opens: warpgroup 0 goes first */
  for (int t = first;; ++tq) {
    if (!fwd90_persistent && tq > 0)
      break;
    /* The work tile and whether any of its key tiles is live. */
    int any = 0;
    attn_mbar_wait(bar_q, tq & 1);
    {
      int slot_t;
      asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n"
                   : "=r"(slot_t), "=r"(any)
                   : "r"(tile_slot)
                   : "memory");
      if constexpr (fwd90_persistent) {
        t = slot_t;
        if (t >= n_tiles)
          break;
      }
    }
    const fwd90_tile tl = tile_at(t);
#if defined(ATTN_PACKED_Q)
    int b, m_block, q0, k0;
    bool owned;
    const attn_params p_seq = attn_packed_work<fwd90_bm>(tl.m_block, p, b, m_block, q0, k0, owned);
    const attn_params &p = p_seq;
#else
    const int b = tl.b, m_block = tl.m_block;
    [[maybe_unused]] const int q0 = 0; /* (o_smem's packed rows) */
#endif
    const int h = tl.h;
    int i0, i_end;
    fwd90_rows(m_block, p.Sq, i0, i_end);
    /* The rows from row_end on are not stored and a warpgroup wholly past
     * it idles (partial_first's short tile computes rows past its end;
     * otherwise the tile ends at Sq or holds BM rows, so Sq serves). */
    const int row_end = fwd90_partial_first ? i_end : p.Sq;
    const int i_row = i0 + 64 * wg + 16 * ww + g;
    /* fwd90_skip_idle: a warpgroup whose 64 rows all lie past the sequence's
     * last query runs no GEMM, softmax or store on them; it only keeps the
     * barriers' counts and its place in the turn ring, as the full path
     * does: K released once its slot is read, V one key tile later and at
     * the tile's end, Q at the end. No arrive lands in a barrier's next
     * phase early: K of key tile u + stages is loaded only after K of u was
     * released by everyone; and this warpgroup's turn at key tile u +
     * stages waits (the ring, warpgroup 0 always live) until the live ones
     * have handed over there, so they have finished tile u + stages - 1
     * and released V of u (stages >= 2) before this arrives on V's
     * barrier again. */
    if constexpr (fwd90_skip_idle)
      if (i0 + 64 * wg >= row_end) {
        if (fwd90_ring_per_tile && last_wg && any)
          attn_named_arrive(1);
        int vst = -1; /* the stage whose V is released next */
        for (bool more = any; more; ++git) {
          const int st = git % fwd90_stages, ph = (git / fwd90_stages) & 1;
          int n, tag;
          key_tile_at(st, ph, n, tag);
          more = !(tag & 4);
          attn_named_sync(my_turn);
          if (!(fwd90_ring_per_tile && last_wg && !more))
            attn_named_arrive(next_turn);
          attn_mbar_arrive(bar_empty(st));
          if (vst >= 0)
            attn_mbar_arrive(bar_empty_v(vst));
          vst = st;
        }
        if (vst >= 0)
          attn_mbar_arrive(bar_empty_v(vst));
        attn_mbar_arrive(bar_q_empty);
        continue;
      }
    const attn_bh bhc = attn_bh_load(b, h, p); /* once per work tile */
    const float p_sc = attn_p_scale_value(b, h, p); /* P's scale before P V */
    /* fwd90_q_rescale: this warp's rows of Q into f16 (each warpgroup's
     * S GEMM reads all four warps' rows: a warpgroup barrier, ids 4.. as
     * the turns take 1-3), and 2^-e of the lane's rows g and g + 8, which
     * the score's factor carries (or, unfolded, S itself). */
    float qinv[2] = {1.f, 1.f};
    if constexpr (fwd90_q_rescale)
      if (any) {
        fwd90_q_to_f16(q_wg + ww * 16 * 128, lane, qinv);
        attn_fence_proxy_async(); /* for the S GEMM's reads (async proxy) */
        attn_bar_sync<128>(4 + wg);
      }
    /* fwd90_fold: the score's factor c (0 taken as the smallest normal
     * number, attn_softmax_tile_qk), c log2 e, and the masked elements'
     * fill (+inf where c < 0, so that neither extreme sees them); then,
     * where the tile holds q.k itself, per row times qinv (a product that
     * underflows taken as the smallest normal number too; a tile scored
     * by the inner chain takes qinv before it). */
    float sc = 1.f, sc_log2 = 1.4426950408889634f, fill = neg_inf;
    bool sc_neg = false;
    if constexpr (fwd90_fold) {
      sc = attn_score_factor(bhc, b, h, p);
      sc = sc == 0.f ? 1.17549435e-38f : sc;
      sc_log2 = sc * 1.4426950408889634f;
      sc_neg = sc < 0.f;
      fill = sc_neg ? -neg_inf : neg_inf;
    }
    float sc_row[2] = {sc, sc}, sc_log2_row[2] = {sc_log2, sc_log2};
    if constexpr (attn_score_scaled_qk && fwd90_q_rescale) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        sc_row[r] = sc * qinv[r];
        sc_row[r] = sc_row[r] == 0.f ? (sc_neg ? -1.17549435e-38f : 1.17549435e-38f) : sc_row[r];
        sc_log2_row[r] = sc_row[r] * 1.4426950408889634f;
      }
    }
    /* P rounded before P V with a positive finite scale p_sc (`e4m3(p *
     * 448)`), and the score folded: the exponentials come out times p_sc
     * (log2 p_sc added in the exp2, attn_softmax_tile_qk's p_log2), so
     * P's packing multiplies nothing; the row sums then carry p_sc and are
     * divided by it before the store. Any other scale multiplies as before. */
    [[maybe_unused]] bool p_folded = false;
    [[maybe_unused]] float p_log2 = 0.f;
    if constexpr (fwd90_fold && attn_p_round != 0) {
      p_folded = p_sc > 0.f && p_sc < -neg_inf;
      p_log2 = p_folded ? log2f(p_sc) : 0.f;
    }
    const bool row_edge = i0 + fwd90_bm > p.Sq;
#if defined(ATTN_DROPOUT)
    const attn_dropout_t drop_t = attn_dropout_params(p);
#endif

#pragma unroll
    for (int r = 0; r < fwd90_o_regs; ++r)
      o[r] = 0.f;
    float row_max[2] = {neg_inf, neg_inf}; /* natural-log units */
    float row_sum[2] = {0.f, 0.f};         /* this lane's partial sums */
    float o_alpha[2] = {1.f, 1.f};         /* O's pending rescale per row */

    /* The previous P V is done: O takes the factor of the last softmax
     * (o_alpha) and P is packed for the next P V. At the end of a key
     * tile (default) or at the top of the next one, before its turn
     * (fwd90_pv_wait_next: ptxas hoists this wait above the softmax's
     * exponentials when it follows them in the same block); release_v:
     * the V that P V read may be refilled (stage v_st). */
    auto settle = [&](bool release_v, int v_st) {
      attn_wgmma_wait<0>();
#pragma unroll
      for (int r = 0; r < fwd90_o_regs; ++r)
        attn_fence_reg(o[r]);
#pragma unroll
      for (int kk = 0; kk < fwd90_pa_steps; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          asm volatile("" : "+r"(pa[kk][e])::"memory");
      if (release_v)
        attn_mbar_arrive(bar_empty_v(v_st)); /* its V may be refilled */
      if constexpr (!fwd90_rescale_late)
        fwd90_rescale_o(o, o_alpha);
      if constexpr (fwd90_p8) {
        /* P for the next round, in FP8: 32-key step kb holds fragments
         * 4kb..4kb+3; a0/a1 take rows g/g+8 of fragments 4kb, 4kb+1, and
         * a2/a3 of 4kb+2, 4kb+3 (fwd90_p8's key order). */
        auto pack = [&](float m) {
#pragma unroll
          for (int kb = 0; kb < fwd90_pa_steps; ++kb) {
            const float *f = &s[16 * kb];
#pragma unroll
            for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
              for (int r = 0; r < 2; ++r)
                pa[kb][2 * h2 + r] =
                    fwd90_pack_p8(f[8 * h2 + 2 * r] * m, f[8 * h2 + 2 * r + 1] * m,
                                  f[8 * h2 + 4 + 2 * r] * m, f[8 * h2 + 4 + 2 * r + 1] * m);
          }
        };
        if (p_folded) /* (uniform: a branch, no select per element) */
          pack(1.f);
        else
          pack(p_sc);
      } else if constexpr (attn_p_round != 0) {
        /* P rounded to FP8 (hooks.cuh: `e4m3(p * scale) @ v`), in 16 bits
         * (p_sc is 1 without a scale). */
        auto pack = [&](float m) {
#pragma unroll
          for (int kk = 0; kk < fwd90_bn / 16; ++kk)
#pragma unroll
            for (int x = 0; x < 4; ++x)
              pa[kk][x] = fwd90_pack_p16(s[8 * kk + 2 * x] * m, s[8 * kk + 2 * x + 1] * m);
        };
        if (p_folded)
          pack(1.f);
        else
          pack(p_sc);
      } else {
        /* P as P V reads it (a scale without a rounding: hooks.cuh). */
        if constexpr (attn_p_mod != 0) {
#pragma unroll
          for (int r = 0; r < fwd90_s_regs; ++r)
            s[r] = attn_p_value(s[r], p_sc);
        }
        /* P for the next round: fragments 2kk and 2kk+1 of S are the A
         * operand of the kk-th 16-key step. */
#pragma unroll
        for (int kk = 0; kk < fwd90_bn / 16; ++kk) {
          pa[kk][0] = fwd90_pack_in(s[8 * kk + 0], s[8 * kk + 1]);
          pa[kk][1] = fwd90_pack_in(s[8 * kk + 2], s[8 * kk + 3]);
          pa[kk][2] = fwd90_pack_in(s[8 * kk + 4], s[8 * kk + 5]);
          pa[kk][3] = fwd90_pack_in(s[8 * kk + 6], s[8 * kk + 7]);
        }
      }
    };
    if (fwd90_ring_per_tile && last_wg && any)
      attn_named_arrive(1); /* warpgroup 0 goes first */
    int it = 0, pst = 0, pph = 0; /* it: this tile's key tiles so far */
    [[maybe_unused]] int pst2 = 0; /* pv_wait_next: the stage of the P V in flight */
    for (bool more = any; more;) {
      /* pv_wait_next: the last key tile's P, packed once its previous P V
       * is done (P V of key tile it - 2, issued in the last turn) */
      if constexpr (fwd90_pv_wait_next)
        if (it > 0)
          settle(it > 1, pst2);
      const int st = git % fwd90_stages, ph = (git / fwd90_stages) & 1;
      const unsigned ks = skv + st * fwd90_stage_bytes;
      int n, tag;
      key_tile_at(st, ph, n, tag);
      const int cls = tag & 3;
      more = !(tag & 4);

      /* Class 2 away from the edges needs no test; attn_keep runs only
       * on class 1 tiles. A mask that reads memory is evaluated here,
       * before the S GEMM (fwd90_keep_bits says why). */
      const int j0 = n * fwd90_bn;
      const bool edge = row_edge || j0 + fwd90_bn > p.Skv;
      unsigned long long keep = 0;
      if constexpr (attn_keep_reads) {
        if (cls != 2)
          keep = fwd90_keep_bits<true>(bhc, b, h, i_row, j0 + 2 * t4, p);
        else if (edge)
          keep = fwd90_keep_bits<false>(bhc, b, h, i_row, j0 + 2 * t4, p);
      }

      /* Our turn at the tensor cores: S = Q K^T, and O += P V of the
       * previous tile, both asynchronous. */
      attn_named_sync(my_turn);
      attn_wgmma_fence();
      {
        unsigned long long dq[fwd90_qk_steps], dk[fwd90_qk_steps];
        const unsigned long long dk0 = attn_wgmma_desc(ks, 16, 1024);
#pragma unroll
        for (int kk = 0; kk < fwd90_qk_steps; ++kk) {
          dq[kk] = attn_wgmma_desc(q_wg + (kk >> 2) * fwd90_bm * 128 + (kk & 3) * 32, 16, 1024);
          dk[kk] = attn_wgmma_desc_add(dk0, (kk >> 2) * fwd90_bn * 128 + (kk & 3) * 32);
        }
        /* Four steps a statement, the rest one at a time. */
        constexpr int by4 = fwd90_qk_steps / 4 * 4;
#pragma unroll
        for (int kk = 0; kk < by4; kk += 4)
          fwd90_gemm_qk4<fwd90_bn>(s, &dq[kk], &dk[kk], kk > 0);
#pragma unroll
        for (int kk = by4; kk < fwd90_qk_steps; ++kk)
          fwd90_gemm_qk<fwd90_bn>(s, dq[kk], dk[kk], kk > 0);
      }
      attn_wgmma_commit();
      if (it > 0) {
        const unsigned vs = skv + pst * fwd90_stage_bytes + fwd90_k_bytes;
        /* The previous softmax's rescale of O, while S runs (off the path
         * from one softmax to the next: this warp would wait for S here). */
        if constexpr (fwd90_rescale_late) {
          fwd90_rescale_o(o, o_alpha);
          /* O's registers may have been written: before P V reads them. By
           * every warp of the warpgroup whatever its own vote said (the
           * fence is .aligned: a warp skipping it hung the kernel, session
           * 34's first run of this order). */
          attn_wgmma_fence();
        }
        attn_mbar_wait(bar_v_ready(pst), pph);
        fwd90_pv(o, pa, vs);
        if constexpr (fwd90_pv_overlap)
          attn_wgmma_commit();
      } else if constexpr (fwd90_pv_overlap) {
        attn_wgmma_commit();
      }
      /* Always a second group (empty in the first round), so one wait<1>
       * below means "S is done" on every path (fwd90_pv_overlap: committed
       * in each branch). */
      if constexpr (!fwd90_pv_overlap)
        attn_wgmma_commit();
      if (!(fwd90_ring_per_tile && last_wg && !more))
        attn_named_arrive(next_turn);

      attn_wgmma_wait<1>(); /* S is done; P V may still run */
#pragma unroll
      for (int r = 0; r < fwd90_s_regs; ++r)
        attn_fence_reg(s[r]);
      attn_mbar_arrive(bar_empty(st)); /* its K may be refilled */
      if constexpr (fwd90_q_early_tiles > 0)
        if (!more && it < fwd90_q_early_tiles) /* a short tile's last S is done: Q is read no more */
          attn_mbar_arrive(bar_q_empty);

      /* The score chain, then the tests (masked elements become -inf):
       * none in class 2 tiles away from the edges; class 2 tiles at an
       * edge take the mask's test too (exact there, and one tested copy
       * in the kernel). */
      const int jc = j0 + 2 * t4;
      if constexpr (!attn_score_scaled_qk && fwd90_q_rescale) {
#pragma unroll
        for (int r = 0; r < fwd90_s_regs; ++r)
          s[r] *= qinv[(r >> 1) & 1];
      }
      if constexpr (fwd90_tanh_poly && attn_score_tanh_qk)
        fwd90_tanh_tile(s, attn_tanh_qk_factor(bhc));
      else if constexpr (!attn_score_scaled_qk) /* folded: the chain under the factor */
        fwd90_score_tile(s, bhc, b, h, i_row, jc, p);
      if (cls != 2 || edge) {
        if constexpr (attn_keep_reads)
          fwd90_mask<FWD90_BITS>(s, bhc, b, h, i_row, jc, keep, fill, p);
        else
          fwd90_mask<FWD90_KEEP>(s, bhc, b, h, i_row, jc, 0, fill, p);
      }

      /* Online softmax of rows g (r = 0) and g + 8 (r = 1), overlapping
       * the previous tile's P V. */
      float alpha[2];
      auto s_frag = [&](int nb, int k) -> float & { return s[nb * 4 + k]; };
      auto on_row = [&](int r, float a) { alpha[r] = a; };
      if constexpr (fwd90_fold)
        attn_softmax_tile_qk<fwd90_bn / 8, attn_p_round != 0, fwd90_stale, attn_p_round != 0,
                             fwd90_exp2_fma>(s_frag, row_max, row_sum, sc_row, sc_log2_row,
                                             sc_neg, on_row, p_log2);
      else
        attn_softmax_tile<fwd90_bn / 8, attn_p_round != 0, fwd90_stale, fwd90_exp2_fma>(
            s_frag, row_max, row_sum, on_row);
#if defined(ATTN_DROPOUT)
      /* After the row sums: dropout changes what P V adds, not the
       * normalizer. Masked elements are 0 whatever the factor.
       * s[nb * 4 + 2r + x] is (i_row + 8r, j0 + 8nb + 2t4 + x); i_row =
       * i0 + 64 wg + 16 ww + g and j0 (a multiple of BN: 64, 80 or 128)
       * have bit 3 clear, so 16-key block m holds this lane's half of the
       * group at (i_row & ~1, j0 + 16m + 2t4): rows r, bytes x + 2 n1 for
       * s[(2m + n1) * 4 + 2r + x] (hooks.cuh, attn_dropout_pair). */
      {
        auto drop = [&](int m, const unsigned (&wd)[2]) {
#pragma unroll
          for (int n1 = 0; n1 < 2; ++n1)
#pragma unroll
            for (int r = 0; r < 2; ++r)
#pragma unroll
              for (int x = 0; x < 2; ++x) {
                float &e = s[(2 * m + n1) * 4 + 2 * r + x];
                e = attn_dropout_apply(e, wd[r], x + 2 * n1, drop_t);
              }
        };
#pragma unroll
        for (int m = 0; m + 1 < fwd90_bn / 16; m += 2) {
          unsigned wa[2], wb[2];
          attn_dropout_pair<false>(b, h, i_row, j0 + 16 * m + 2 * t4, i_row,
                                   j0 + 16 * m + 16 + 2 * t4, p, wa, wb);
          drop(m, wa);
          drop(m + 1, wb);
        }
        if constexpr (fwd90_bn / 16 % 2 == 1) { /* BN 80 and 176 */
          unsigned wa[2];
          attn_dropout_one<false>(b, h, i_row, j0 + fwd90_bn - 16 + 2 * t4, p, wa);
          drop(fwd90_bn / 16 - 1, wa);
        }
      }
#endif

      o_alpha[0] = alpha[0];
      o_alpha[1] = alpha[1];
      if constexpr (!fwd90_pv_wait_next)
        settle(it > 0, pst);
      pst2 = pst;
      pst = st;
      pph = ph;
      ++it;
      ++git;
    }
    if (it > 0) { /* the last tile's P V */
      if constexpr (fwd90_pv_wait_next)
        settle(it > 1, pst2);
      const unsigned vs = skv + pst * fwd90_stage_bytes + fwd90_k_bytes;
      if constexpr (fwd90_rescale_late)
        fwd90_rescale_o(o, o_alpha);
      attn_mbar_wait(bar_v_ready(pst), pph);
      attn_wgmma_fence();
      fwd90_pv(o, pa, vs);
      attn_wgmma_commit();
      attn_wgmma_wait<0>();
#pragma unroll
      for (int r = 0; r < fwd90_o_regs; ++r)
        attn_fence_reg(o[r]);
      attn_mbar_arrive(bar_empty_v(pst));
    }
    /* Every GEMM that read this tile's Q is done: the producer may load
     * the next one while we store O (a work tile of 1 to
     * fwd90_q_early_tiles key tiles did so in the loop already; `it`
     * counts them now). */
    if (it == 0 || it > fwd90_q_early_tiles)
      attn_mbar_arrive(bar_q_empty);

    if constexpr (fwd90_fold && attn_p_round != 0)
      if (p_folded) { /* the sums carried P's scale */
        row_sum[0] /= p_sc;
        row_sum[1] /= p_sc;
      }
    /* Normalize and store, straight from the accumulators (softmax.cuh);
     * o_smem: a block of 128 bytes of the rows at a time into this warp's
     * staging slots, each stored by TMA from lane 0 (rows past Sq are
     * clipped).
     * A slot is rewritten only once its last store has read it: the last
     * tile's at the start, and with fewer slots than blocks (the room the
     * tiles leave, tmpl_sm90.c) this tile's a block earlier. */
    [[maybe_unused]] unsigned stage = 0;
    void *staged = nullptr;
    if constexpr (fwd90_o_smem) {
      stage = base + attn_fwd90_ostage_offset(fwd90_layout) +
              (unsigned)((4 * wg + ww) * fwd90_o_slots * 2048);
      staged = fwd90_smem + (stage - attn_smem_addr(fwd90_smem));
      if (fwd90_o_rows || lane == 0)
        attn_bulk_wait<0, true>();
      __syncwarp();
    }
    /* (0 where not staged: the function then takes no closure, and the
     * register stores compile as they did before o_smem) */
    auto store_block = [&] {
      if constexpr (fwd90_o_smem)
        return [&](int c) {
          constexpr int in_flight = fwd90_o_slots > 1 ? fwd90_o_slots - 1 : 0;
          attn_fence_proxy_async(); /* the block's stores, for TMA's async proxy */
          __syncwarp();
          if constexpr (fwd90_o_rows) {
            const unsigned slot = stage + (c % fwd90_o_slots) * 2048;
            const int row0 = i0 + 64 * wg + 16 * ww; /* the warp's first row */
            /* (the packed tensor's rows: the sequence's from q0 on, batch 0) */
            const int rows = min(row_end - row0, 16);
            if (rows == 16 && lane == 0)
              attn_tma_store4(&tm.m[ATTN_TMAP_O], slot, c * fwd90_o_cols, q0 + row0, h, 0);
            if (rows > 0 && rows < 16) {
              const attn_tensor_arg &to = p.t[fwd90_to];
              const int chunks = min(fwd90_o_cols, ATTN_D_V - c * fwd90_o_cols) / 8;
              unsigned char *o0 = (unsigned char *)to.ptr +
                                  2 * (b * to.stride[0] + h * to.stride[1] +
                                       (long long)row0 * to.stride[2] + c * fwd90_o_cols);
              for (int k = lane; k < rows * chunks; k += 32) {
                const int r = k / chunks, ch = k - r * chunks;
                attn_bulk_store(o0 + 2 * r * to.stride[2] + 16 * ch, slot + fwd90_stage_chunk(r, ch),
                                16);
              }
            }
          } else if (lane == 0) {
            /* Under partial_first (the o_smem variant only) a short first
             * tile holds rows [0, r), r a multiple of 16, so a warp's 16
             * rows lie wholly inside it or wholly past it; a warp past it
             * stores no box (it would write rows the next tile stores). */
            const int row0 = i0 + 64 * wg + 16 * ww; /* the warp's first row */
            if (!fwd90_partial_first || row0 < row_end)
              attn_tma_store4(&tm.m[ATTN_TMAP_O], stage + (c % fwd90_o_slots) * 2048,
                              c * fwd90_o_cols, row0, h, b);
          }
          /* (every lane of a packed sequence's warp: each waits on its own copies) */
          if (fwd90_o_rows || lane == 0) {
            attn_bulk_commit();
            if (c + 1 < fwd90_o_blocks && c + 1 >= fwd90_o_slots) /* c + 1 reuses a slot */
              attn_bulk_wait<in_flight, true>();
          }
          __syncwarp();
        };
      else
        return 0;
    }();
    amax = max(amax, attn_softmax_store<ATTN_D_V / 8, fwd90_out_kind, (fwd90_tlse >= 0),
                                        (attn_has_sink != 0), (attn_has_amax != 0), fwd90_o_slots>(
                         [&](int nb, int k) -> float & { return o[nb * 4 + k]; }, row_max,
                         row_sum, i_row, t4, b, h, fwd90_to, fwd90_tlse >= 0 ? fwd90_tlse : 0, p,
                         row_end,
                         [&](float x, int i, int d) { return attn_out(x, b, h, i, d, p); },
                         attn_sink_value(b, h, p),
                         [&](float x, int i, int d) { return attn_amax_value(x, b, h, i, d, p); },
                         staged, store_block));
  }
  if constexpr (fwd90_o_smem) /* the stores have read shared memory, which ends with the CTA */
    if (fwd90_o_rows || lane == 0)
      attn_bulk_wait<0, false>();
  if (!fwd90_ring_per_tile && wg == 0)
    attn_named_sync(1); /* the ring's last hand-over (or its opening, where no key tile ran) */
  if constexpr (attn_has_amax) /* one atomic a consumer warp */
    attn_amax_commit(amax, p);
  (void)amax;
}


#if defined(ATTN_KV_COPY)
/* The kv_copy variant's widen_kv step (plan.c): rows [x * ATTN_WIDEN_ROWS,
 * + ATTN_WIDEN_ROWS) of (b = blockIdx.z, hk = blockIdx.y)'s FP8 k and v,
 * widened exactly into q's 16-bit type in the workspace copies ATTN_TK16
 * and ATTN_TV16 (dense [B, Hk, Skv, D]), by ATTN_WIDEN_THREADS threads. A
 * thread takes 16-byte chunks of the FP8 rows (bind.c guarantees 16-byte
 * aligned rows, unit inner stride) and writes two 16-byte chunks
 * (attn_fp8x16_cvt, the converters' own). */
template <int D>
static __device__ __forceinline__ void fwd90_widen_rows(const attn_tensor_arg &src,
                                                        const attn_tensor_arg &dst, int b, int hk,
                                                        int r0, int r1) {
  constexpr int chunks = D / 16; /* (an FP8 cache's head dims are multiples of 16: match.c) */
  /* A thread's chunks, all loaded before any is stored: the stores might
   * alias the loads for all the compiler knows, so a load-convert-store
   * loop would keep one load in flight a thread. */
  constexpr int per = (ATTN_WIDEN_ROWS * chunks + ATTN_WIDEN_THREADS - 1) / ATTN_WIDEN_THREADS;
  const unsigned char *s8 =
      (const unsigned char *)src.ptr + (long long)b * src.stride[0] + (long long)hk * src.stride[1];
  unsigned short *d16 =
      (unsigned short *)dst.ptr + (long long)b * dst.stride[0] + (long long)hk * dst.stride[1];
  const int n = (r1 - r0) * chunks;
  uint4 x[per];
#pragma unroll
  for (int k = 0; k < per; ++k) {
    const int c = (int)threadIdx.x + k * ATTN_WIDEN_THREADS;
    if (c < n)
      x[k] = __ldg((const uint4 *)(s8 + (long long)(r0 + c / chunks) * src.stride[2]) + c % chunks);
  }
#pragma unroll
  for (int k = 0; k < per; ++k) {
    const int c = (int)threadIdx.x + k * ATTN_WIDEN_THREADS;
    if (c >= n)
      break;
    const unsigned w[4] = {x[k].x, x[k].y, x[k].z, x[k].w};
    unsigned y[8];
    attn_fp8x16_cvt<attn_kv_fp8 == 1, attn_in_bf16 != 0>(w, y);
    uint4 *row = (uint4 *)(d16 + (long long)(r0 + c / chunks) * dst.stride[2]) + 2 * (c % chunks);
    row[0] = make_uint4(y[0], y[1], y[2], y[3]);
    row[1] = make_uint4(y[4], y[5], y[6], y[7]);
  }
}

__device__ __forceinline__ void attn_fwd90_widen_kv(const attn_params &p) {
  static_assert(attn_kv_fp8 != 0 && !fwd90_fp8, "kv_copy: an FP8 KV cache under a 16-bit q");
  const int b = blockIdx.z, hk = blockIdx.y;
  const int r0 = blockIdx.x * ATTN_WIDEN_ROWS, r1 = min(r0 + ATTN_WIDEN_ROWS, p.Skv);
  fwd90_widen_rows<ATTN_D_QK>(p.t[ATTN_TK], p.t[ATTN_TK16], b, hk, r0, r1);
  fwd90_widen_rows<ATTN_D_V>(p.t[ATTN_TV], p.t[ATTN_TV16], b, hk, r0, r1);
}
#endif
