/*
 * bwd_sm90.cuh: the Hopper backward flash-attention kernel (sm_90a only),
 * wgmma for every product. FlashAttention-3's backward is the model.
 *
 * Device-only text for NVRTC: it includes nothing. compiler/emit_bwd.c
 * pastes it inside a graph's namespace right after templates/bwd_sm80.cuh,
 * whose delta pre-pass, convert kernels, deterministic dQ tiles, hook
 * declarations and store helpers it reuses: only the main kernel is new.
 * It calls the same hooks as bwd_sm80's main kernel (attn_score,
 * attn_keep, attn_tile_class, attn_dropout_words, attn_bwd_draw or, with
 * bias gradients, attn_bwd_draw_bias and attn_bwd_bias_flush).
 *
 * attn_bwd_sm90_main: CTAs of three warpgroups, each CTA taking work
 * items (key tile of 128, head, batch) from a queue, at most one CTA per
 * SM (persistent; one CTA per item in deterministic mode and at D 256):
 * two consumers (256 threads, 240 registers each by setmaxnreg;
 * warpgroup w owns keys 64w..64w+63 of the tile) and a producer (24
 * registers; two warps work). K and V are loaded by the consumers once
 * per item and stay in shared memory. The producer walks the items and
 * their query tiles the masks let through (its lanes classify 32 at once)
 * and streams each through three stages (two at D 64 and 256): Q and
 * dO (64 rows, 128 at D 64) by TMA, the rows' {delta, lse log2 e} by its
 * lanes, the tile's index and class in a slot, all
 * completing on the stage's `full` mbarrier; a consumer warp frees the
 * stage (`empty`) once its last wgmma reading it has completed. Per query
 * tile, keys as the M dimension of every warpgroup's products:
 *   S^T  = K Q^T          wgmma m64n64, both operands from shared memory
 *   dP^T = V dO^T         the same
 *   P^T, dS^T, dRaw^T     per element in the accumulators (the hooks)
 *   dV  += Pd^T dO        wgmma, A = Pd^T from registers (the accumulator
 *                         layout is the A fragment layout), B = dO through
 *                         an MN-major (transposed) descriptor
 *   dK  += dRaw^T Q       the same with Q
 *   dQ  += dRaw K         dRaw^T written to shared memory [key][query]
 *                         (two buffers, by tile parity); wgmma with A and
 *                         B both MN-major; warpgroup w computes half of
 *                         dQ's columns (D/2 from D/2 w) over all 128 keys.
 *                         The 64 x D/2 results go into one f32 buffer in
 *                         shared memory, which the producer's second warp
 *                         adds into dQ's accumulator by TMA (bulk
 *                         reduce-add at L2), so the consumers only store:
 *                         17% faster than element atomics at D 128 (H200,
 *                         bench/NOTES-sm90.md, session 6). At D 256 the
 *                         stage's own dO and Q blocks are the buffer
 *                         (bwd90_dq_in_stage): 30% faster there.
 * One barrier between the consumers per query tile (named barrier 1,
 * before dQ: both warpgroups' dRaw^T are written; with two dRaw^T buffers
 * it also orders every buffer's reuse after the other warpgroup's dQ);
 * two mbarriers with the dQ warp (dq full: the buffer holds a tile, every
 * consumer thread arriving; dq free: it may be rewritten, every dQ-warp
 * lane arriving; at D 256 per-stage mbarriers instead, below).
 * dK and dV are stored at the end as bwd_sm80 stores them (f32 atomics
 * or per-head accumulators with GQA). Deterministic mode: as bwd_sm80,
 * extra CTAs past the key tiles run bwd80_dq_tile (the consumers' first
 * four warps, named barrier 1; the producer leaves) and the key-tile CTAs
 * skip dQ. Split-D mode (head dim 256) and wide mode (head dim 64: query
 * tiles of 128, worked as two halves of 64 with one dQ per tile): below.
 *
 * Shared-memory tiles are laid out as the forward's TMA boxes land: D/64
 * blocks of [rows][64 elements], 16-byte chunk c of row r at (c ^ (r & 7))
 * (the 128-byte swizzle), every block 1024-byte aligned, so the wgmma
 * descriptors (templates/wgmma.cuh, shared with fwd_sm90) are the
 * forward's.
 */

/* ------------------------------------------------------ configuration */

#if !defined(ATTN_D_QK) || !defined(ATTN_D_V)
#error "bwd_sm90.cuh needs ATTN_D_QK, ATTN_D_V"
#endif

/* The tiles' widths, as bwd_sm80's (attn_bwd_head_tile): the graph's head
 * dims rounded up to 64, 128 or (both) 256; K and V are loaded with zeros
 * past ATTN_D_QK / ATTN_D_V columns, Q and dO come zero-filled from their
 * tensor maps, and dK, dV stop at the graph's columns. */
constexpr int bwd90_dqk = bwd80_dqk;
constexpr int bwd90_dv = bwd80_dv;
/* Split-D mode (head dim 256): one warpgroup cannot hold dK and dV of 64
 * keys at D 256 (256 accumulator registers per thread), so a CTA takes 64
 * keys, both warpgroups work on all of them, and warpgroup w owns columns
 * D/2 w.. of dK, dV and dQ. S^T and dP^T are split by queries instead
 * (warpgroup w: the tile's queries 32 w..), so each is computed once; the
 * two halves of Pd^T and dRaw^T meet in shared memory, where dV's and dK's
 * GEMMs read them. The deterministic mode's ordered dQ tiles (bwd_sm80's)
 * do not exist at D 256; the runtime refuses that mode there. */
#if !defined(ATTN_BWD_SPLIT_D) || !defined(ATTN_BWD_WIDE) || !defined(ATTN_BWD_PERSISTENT) || \
    !defined(ATTN_BWD_BM80)
#error "bwd_sm90.cuh needs its modes declared: ATTN_BWD_SPLIT_D, ATTN_BWD_WIDE, ATTN_BWD_PERSISTENT, ATTN_BWD_BM80"
#endif
constexpr bool bwd90_split_d = ATTN_BWD_SPLIT_D;
#define BWD90_SPLIT_D ATTN_BWD_SPLIT_D /* for #if */
static_assert(bwd90_split_d ? bwd90_dqk == 256 && bwd90_dv == 256
                            : bwd90_dqk % 64 == 0 && bwd90_dv % 64 == 0 && bwd90_dqk <= 128 &&
                                  bwd90_dv <= 128,
              "D_QK, D_V: 64 or 128 each, or both 256 in split-D mode");
/* Wide mode (head dim 64): 128-query tiles instead of 64, worked as two
 * halves of 64 queries (the element work and dV, dK as below, unrolled)
 * and then one barrier, one dQ GEMM and one dQ hand-over per 128 queries,
 * so a tile's fixed costs are paid once per 128 queries; each warpgroup
 * computes dQ for its half of the tile's queries over all D columns
 * (m64n64, not two m64n32 halves by columns). H200, D 64: 0.94 -> 1.02 of
 * cuDNN's backward (bench/NOTES-sm90.md, session 8). S^T and dP^T as
 * m64n128 products (128 registers beside dK and dV) made ptxas serialize
 * every wgmma for want of registers, and a rolled half loop did too; at D
 * 128 dK and dV alone hold 128 registers, so only D 64 takes this mode. */
constexpr bool bwd90_wide = ATTN_BWD_WIDE;
static_assert(!bwd90_wide || (!bwd90_split_d && bwd90_dqk == 64 && bwd90_dv == 64),
              "wide mode is for head dim 64");
/* BM-80 mode (head dims 128, backward_template 93-95 while measured): query tiles
 * of 80 rows instead of 64, as FlashAttention-3's and -4's sm90 backward
 * take at D 128 (64 under a causal mask), so a tile's fixed costs (its
 * barrier, its dQ hand-over, the GEMM chain's fill) are paid per 80
 * queries. S^T and dP^T are m64n80 products (40 accumulators each beside
 * dK's and dV's 128); dQ's M cannot be 80, so it is computed transposed,
 * dQ^T = K^T dS^T (warpgroup w: D's rows 64 w.., N the 80 queries, k the
 * 128 keys; A = K read MN-major, B = dS [query][key] K-major, which
 * stmatrix.trans writes from the accumulators), and stored transposed
 * into dQ's buffer. Boxes of 80 rows (Q, dO, dQ's accumulator), two
 * stages (three do not fit: 231936 bytes with two). */
constexpr bool bwd90_bm80 = ATTN_BWD_BM80 != 0;
#define BWD90_BM80 (ATTN_BWD_BM80 != 0) /* for #if */
/* ATTN_BWD_BM80 2 (backward_template 94): dV's GEMM reads Pd^T from
 * shared memory instead of registers, so that dP^T need not wait for it
 * (bwd90_dv_smem, below). */
constexpr bool bwd90_dv_smem = ATTN_BWD_BM80 == 2;
/* ATTN_BWD_BM80 3 (backward_template 95): S^T and dP^T issued together
 * and both waited for, then one pass (P^T, dS^T, dRaw^T: the order a dRaw
 * that reads the score takes), and dV's and dK's GEMMs issued only after
 * it, so Pd^T's fragments never meet dP^T's accumulators: two waits a
 * tile before dQ^T instead of form 1's four. What makes the pass fit
 * beside both accumulators is its stats, 3 registers a lane of each,
 * shuffled to the lanes that need them, instead of 20 loads
 * (bwd90_late_dkv). (P^T computed while dP^T is still in flight, as
 * FlashAttention-3 does, made ptxas serialize the wgmma, C7514.) */
constexpr bool bwd90_late_dkv = ATTN_BWD_BM80 == 3;
static_assert(ATTN_BWD_BM80 >= 0 && ATTN_BWD_BM80 <= 3, "ATTN_BWD_BM80: 0 to 3");
static_assert(!bwd90_bm80 || (!bwd90_split_d && !bwd90_wide && bwd90_dqk == 128 && bwd90_dv == 128),
              "BM-80 mode is for head dims 128");
#if ATTN_BWD_BM80 && defined(ATTN_DROPOUT)
#error "BM-80 mode takes no dropout (its keep bits are 32 a thread)"
#endif
constexpr int bwd90_bn = bwd90_split_d ? 64 : 128; /* keys per CTA */
constexpr int bwd90_key_wg = bwd90_split_d ? 0 : 64; /* warpgroup w's keys start at w times this */
constexpr int bwd90_dk_cols = bwd90_split_d ? bwd90_dqk / 2 : bwd90_dqk; /* a warpgroup's dK columns */
constexpr int bwd90_dv_cols = bwd90_split_d ? bwd90_dv / 2 : bwd90_dv;
/* Queries in a warpgroup's S^T and dP^T (split-D: half the tile). */
constexpr int bwd90_bm = bwd90_wide ? 128 : bwd90_bm80 ? 80 : 64; /* queries per streamed tile */
constexpr int bwd90_qn = bwd90_split_d ? 32 : bwd90_bm80 ? 80 : 64;
/* TMA boxes (Q, dO, dQ's accumulator) have 64 rows (BM-80: 80): a wide
 * tile takes two. */
constexpr int bwd90_box_rows = bwd90_bm80 ? 80 : 64;
constexpr int bwd90_halves = bwd90_bm / bwd90_box_rows;
/* Wide mode: one warpgroup's 64 rows of dQ's buffer (D/32 boxes). */
constexpr int bwd90_dq_half_bytes = bwd90_dqk / 32 * bwd90_box_rows * 128;
constexpr int bwd90_threads = 256; /* two consumer warpgroups (+ the producer's 128) */
constexpr bool bwd90_in_bf16 = ATTN_BWD_IN_BF16 != 0; /* (bwd_sm80's) */

/* The FP8 tensor-core mode (ATTN_BWD_FP8_MMA; compiler/match_bwd.c,
 * bwd_fp8_mma_refusal: head dims 128, FP8 q, k, v and dO, P and dS rounded
 * to FP8, a dRaw that only masks dS). Every product is an FP8 wgmma (k 32)
 * over FP8 tiles, which wgmma reads only K-major, so the products whose
 * k is the queries or the keys need transposes, which the transpose8 step
 * writes to the workspace (attn_bwd_sm90_transpose8, below):
 *   S^T  = K Q^T     A: K [key][d], B: Q [query][d], both as they land
 *   dP^T = V dO^T    the same with V and dO
 *   dV  += P^T dO    A: P^T from registers in FP8 (P's type), B: dO^T
 *                    [d][query] from the stage's transposed tile
 *   dK  += dS^T Q    A: dS^T in FP8 (dS's type), B: Q^T likewise
 *   dQ  += dS K      A: dS [query][key] (bytes stored transposed from the
 *                    accumulators), B: K^T [d][key], loaded with K and V
 * The accumulators' columns of a 32-query step are not the A fragment's k
 * order (thread t4 holds columns 8c + 2 t4 + x, the fragment wants k 4 t4
 * .. 4 t4 + 3 and 16 + 4 t4 ..), so transpose8 stores Q^T's and dO^T's
 * queries in the accumulators' order, as fwd_sm90's V^T stores keys:
 * query 16h + 8c + 2t + x of each 32 at column 16h + 4t + 2c + x
 * (bwd90_row_at). dS is stored [query][key] with the keys of each 16 in
 * that same order (so a thread stores 4 bytes at once), and K^T's keys
 * alike. Tiles: K, V, K^T and Q, dO as 128-byte rows (128-byte swizzle), Q^T with dO^T as one TMA
 * box of 256 rows of 64 bytes (64-byte swizzle). P and dS are FP8 values
 * there (P's rounding, dS's value R(ds a)), so nothing rounds twice. */
#if defined(ATTN_BWD_FP8_MMA)
constexpr bool bwd90_f8 = true;
constexpr bool bwd90_q_e4 = ATTN_BWD_Q8 == 1, bwd90_kv_e4 = ATTN_BWD_KV8 == 1,
               bwd90_do_e4 = ATTN_BWD_DO8 == 1, bwd90_ds_e4 = ATTN_BWD_DS8 == 1,
               bwd90_p_e4 = attn_p_round == 1;
static_assert(!bwd90_split_d && !bwd90_wide && bwd90_dqk == 128 && bwd90_dv == 128 &&
                  attn_p_round != 0 && ATTN_BWD_DS8 != 0,
              "the FP8 tensor-core mode: head dims 128, P and dS in FP8");
/* The row (query or key) at position kp of a transposed FP8 row, the one
 * order the mode's operands share: in each 16, rows g, g + 1, g + 8, g + 9
 * (g even) at 4 (g / 2).. That is the accumulators' column order (query
 * 16h + 8c + 2t + x at position 16h + 4t + 2c + x: Q^T's and dO^T's
 * queries) and the key rows a quad pair holds (dS's keys and K^T's,
 * bwd_sm90's dS stores). */
static __device__ __forceinline__ constexpr int bwd90_row_at(int kp) {
  return (kp & ~15) + 8 * ((kp >> 1) & 1) + 2 * ((kp >> 2) & 3) + (kp & 1);
}
/* P times its scale s_p straight from exp2 (the delta step subtracts
 * log2 s_p from the stats' lse log2 e and divides delta by s_p; dP's
 * factor is over s_p): no multiply per element before P's FP8 packing, and
 * dS = (s_p P)(dP f / s_p - delta / s_p), which differs from P (dP f -
 * delta) in rounding only. s_p is taken as positive and finite. */
constexpr bool bwd90_p_fold = true;
#else
constexpr bool bwd90_f8 = false;
constexpr bool bwd90_p_fold = false;
[[maybe_unused]] constexpr bool bwd90_q_e4 = false, bwd90_kv_e4 = false, bwd90_do_e4 = false,
                                bwd90_ds_e4 = false, bwd90_p_e4 = false;
#endif
/* Bytes per element of the K, V, Q and dO tiles, and the elements of a
 * 16-byte chunk and of a 128-byte row block; the S and dP GEMMs' k step. */
constexpr int bwd90_eb = bwd90_f8 ? 1 : 2;
constexpr int bwd90_blk_cols = 128 / bwd90_eb;
constexpr int bwd90_kstep = bwd90_f8 ? 32 : 16;
template <bool F8> struct bwd90_elem {
  using t = unsigned short;
};
template <> struct bwd90_elem<true> {
  using t = unsigned char;
};
using bwd90_el = bwd90_elem<bwd90_f8>::t;

/* Shared memory, from a base rounded up to 1024 bytes: K, V (the CTA's
 * keys), three stages of Q and of dO (two at D 64 and 256), two buffers of
 * dRaw^T [keys][64 queries] (and at D 256 of Pd^T), per stage the query
 * tile's {delta, lse log2 e} pairs, the mbarriers and slots.
 * abi/attn_layout.h gives the total (for compiler/match_bwd.c too: 640 (D_QK + D_V) + 256
 * D_QK + 35584 with dQ's buffer; D 64: 199936; D 256: 384 (D_QK + D_V) + 34944). Three
 * stages, not two: with two, a tile's copy (issued one tile ahead) had often not
 * landed when the tile began (ncu: a quarter of the stall samples; with
 * the producer warpgroup four stages at D 64 measured 3% slower). */
constexpr int bwd90_stages = bwd90_split_d || bwd90_wide || bwd90_bm80 ? 2 : 3; /* (three do not fit) */
/* The layout itself is abi/attn_layout.h's, which compiler/match_bwd.c
 * sizes launches by. */
constexpr attn_bwd90_layout bwd90_layout =
    bwd90_f8 ? attn_bwd90_layout_fp8(bwd90_bn, bwd90_bm, bwd90_stages, bwd90_dqk, bwd90_dv)
             : attn_bwd90_layout_of(bwd90_bn, bwd90_bm, bwd90_stages, bwd90_dqk, bwd90_dv,
                                    bwd90_split_d ? 1 : 0);
constexpr int bwd90_q_bytes = bwd90_layout.q_bytes;
constexpr int bwd90_do_bytes = bwd90_layout.do_bytes;
constexpr int bwd90_ds_bytes = bwd90_layout.ds_bytes;
constexpr int bwd90_pt_bytes = bwd90_layout.pt_bytes; /* Pd^T, split-D */
/* dQ's reduction (D <= 128): the consumers store a tile's 64 x D_QK f32
 * part into one buffer of its own laid out as the accumulator's TMA boxes
 * land (D/32 blocks of [64 rows][32 f32], 128-byte swizzle) and the
 * producer warpgroup's second warp adds it into the accumulator by TMA
 * (bulk reduce-add, done at L2). At D 256 there is no room for it, and
 * the stage serves instead (bwd90_dq_in_stage).
 * At D 256 the stage itself is the buffer: once a warpgroup's dV and dK
 * GEMMs have read its column blocks of dO and Q (its 128 columns: 2 x 8 KB
 * of each), nothing else reads them, so its 64 x 128 f32 dQ goes there,
 * one pass of 64 columns into its dO blocks and the other into its Q
 * blocks (a block of [64 rows][32 f32] per 8 KB, as the accumulator's TMA
 * boxes land). Warpgroup w's own warp of the producer (9 + w) adds them
 * into the accumulator by TMA and frees the stage once the copies have
 * read it: the consumers do not release split-D stages themselves. The
 * element atomics this replaced kept L2 83% busy; H200, D 256: 4.75 ->
 * 3.33 ms (bench/NOTES-sm90.md, session 6). */
constexpr bool bwd90_dq_in_stage = bwd90_split_d;
static_assert(bwd90_layout.dq_bytes == (bwd90_dq_in_stage ? 0 : bwd90_bm * bwd90_dqk * 4),
              "dQ's buffer: none where the stage holds dQ");
constexpr int bwd90_off_v = bwd90_layout.off_v;
constexpr int bwd90_off_q = bwd90_layout.off_q;
constexpr int bwd90_off_do = bwd90_layout.off_do;
constexpr int bwd90_off_ds = bwd90_layout.off_ds;
/* dRaw^T and Pd^T: two buffers each, by tile parity, so a warpgroup may
 * write the next tile's while the other still reads this one's in its dQ
 * GEMM (the barrier before dQ orders every reuse after that). */
constexpr int bwd90_off_pt = bwd90_layout.off_pt;
/* (FP8 mode) K^T, and per stage Q^T with dO^T. */
constexpr int bwd90_off_kt = bwd90_layout.off_kt;
constexpr int bwd90_off_qdt = bwd90_layout.off_qdt;
constexpr int bwd90_qdt_bytes = bwd90_layout.qdt_bytes;
constexpr int bwd90_off_dqs = bwd90_layout.off_dqs;
constexpr int bwd90_off_stats = bwd90_layout.off_stats;
/* Per stage: mbarriers `full` (the producer's 32 lanes and its copies)
 * and `empty` (the 8 consumer warps), and the tile slot: {m, class | key
 * tile << 2, work item, b << 16 | h} (16 bytes; the runtime keeps H and B
 * below 2^16), or in split-D mode, one item per CTA, {m, class}; then the
 * dQ buffer's slot {first query row of the tile it holds, b << 16 | h}. */
constexpr int bwd90_off_bars = bwd90_layout.off_bars;
constexpr int bwd90_slot_bytes = bwd90_split_d ? 8 : 16;
constexpr int bwd90_bars_bytes = bwd90_layout.bars_bytes;
/* After the stages' mbarriers and slots, the dQ slot (8 bytes); then at
 * D 256 (two stages) per stage, pass and warpgroup an mbarrier `dq ready`
 * (128 arrivals: the warpgroup's dQ pass is in the stage), else the dQ
 * buffer's two mbarriers (dq full, dq free) and K/V's (kv full:
 * bwd90_kv_tma). */
/* Then per consumer warp the item it works on {key tile, b << 16 | h},
 * for the item's end (kept in shared memory, not in registers across the
 * loop: the split-D and dropout kernels had none to spare). */
constexpr int bwd90_off_item_words = bwd90_stages * (16 + bwd90_slot_bytes) + 8 +
                                     (bwd90_dq_in_stage ? bwd90_stages * 4 * 8 : 3 * 8);
static_assert(bwd90_off_item_words + (bwd90_split_d ? 0 : 8 * 8) <= bwd90_bars_bytes,
              "barriers and slots");
/* Then (not split-D) a word per amax(dS) output of the FP8 backward: each
 * tile's maxima, reduced over the warp, go there (red.shared.max) instead
 * of into a register held across the whole loop. That one register made
 * ptxas serialize every wgmma of the D 88-128 kernels (C7512; compile
 * sweep seed 146, graphs 335 and 396). Split-D's 128 bytes have no room
 * left; it keeps the register (no serialization seen there). */
constexpr bool bwd90_amax_ds_shared = bwd80_namax_ds > 0 && !bwd90_split_d;
constexpr int bwd90_off_amax_ds = bwd90_off_item_words + 8 * 8;
static_assert(bwd90_split_d || bwd90_off_amax_ds + 4 * BWD80_AMAX_MAX <= bwd90_bars_bytes,
              "amax(dS) words");
/* With 1024 bytes for rounding the dynamic shared-memory base up. */
constexpr int attn_bwd_sm90_smem_bytes = bwd90_layout.total;
static_assert(attn_bwd_sm90_smem_bytes <= 227 * 1024, "tiles exceed shared memory");
/* The deterministic dQ tiles run bwd_sm80's code in the same memory. */
static_assert(bwd90_split_d || attn_bwd_sm90_smem_bytes >= attn_bwd_sm80_smem_bytes,
              "bwd80_dq_tile's tiles");
static_assert((bwd90_bn * bwd90_dqk / 8) % bwd90_threads == 0 &&
                  (bwd90_bm * bwd90_dv / 8) % bwd90_threads == 0 &&
                  (bwd90_bm * bwd90_dqk / 8) % bwd90_threads == 0,
              "whole copy rounds");

/* ------------------------------------------------------- work items */

/* Whether the kernel can walk several work items per CTA (persistent,
 * D <= 128). Split-D keeps one CTA per key tile, its item fixed by
 * blockIdx as before: with the walk's per-item state its consumers ran
 * out of registers (spills in the tile loop, 7-25% slower on the H200,
 * bench/NOTES-sm90.md, session 7), and it gained nothing persistent. */
constexpr bool bwd90_items = ATTN_BWD_PERSISTENT;
static_assert(!(bwd90_items && bwd90_split_d), "split-D keeps one CTA per key tile");
/* The persistent kernel's K and V of each item by TMA (ATTN_TMAP_BK, BV:
 * boxes of 64 columns by the 128 keys, 128-byte swizzle, which is
 * bwd90_at's layout), issued by one thread once both warpgroups are done
 * with the last item's, and waited for on an mbarrier (kv full). The
 * stamps (bench/bwd_stamps.py, H100, session 45) put issuing the 64 KB
 * of cp.async copies at 1.7-2.1 us an item at D 128. The FP8
 * tensor-core mode (K^T too) keeps the copies. */
constexpr bool bwd90_kv_tma = bwd90_items && !bwd90_f8;

/* One work item of the main kernel: key tile kt of (batch b, head h). */
struct bwd90_item {
  int kt, h, b;
};

/* Work item t of the persistent walk (p.tile_queue set: a grid of at most
 * one CTA per SM takes items from the queue, attn_next_work). Heads go in
 * sections whose Q and dO together fit comfortably in L2 (16 MB), so the
 * CTAs running at once share their query tiles; inside a section the key
 * tiles go from the first (the heaviest under a causal mask: every query
 * tile sees it) to the last, across the section's heads, so light items
 * fill the tail. */
static __device__ __forceinline__ int bwd90_section_heads(const attn_params &p) {
  const long long q_bytes = (long long)max(p.Sq, 1) * (bwd90_dqk + bwd90_dv) * 2;
  return (int)max(1LL, min((long long)p.H * p.B, (16LL << 20) / q_bytes));
}
/* (heads: bwd90_section_heads, computed once per CTA.) */
static __device__ __forceinline__ bwd90_item bwd90_item_of(int t, int n_kt, int heads,
                                                           const attn_params &p) {
  const int hb = p.H * p.B;
  const int sec_items = heads * n_kt;
  const int sec = t / sec_items, w = t - sec * sec_items;
  const int in_sec = min(heads, hb - sec * heads);
  const int bh = sec * heads + w % in_sec;
  bwd90_item r;
  r.kt = w / in_sec;
  r.h = bh % p.H;
  r.b = bh / p.H;
  return r;
}

/* ------------------------------------------------------ item stamps */

/* A diagnostic (ATTN_BWD_STAMPS: attnc's bwd_template 92): where the
 * consumers' time goes between work items, which no profiler shows as
 * one stall. Thread 0 reads the global timer (ns, low 32 bits) at an
 * item's switch points and writes, once the item's dK rows are stored,
 * these words over the start of its first dK row (the gradient is then
 * wrong there; bench/bwd_stamps.py reads them): */
enum {
  BWD90_ST_WHO,    /* %smid << 16 | blockIdx.x */
  BWD90_ST_TILES,  /* the item's query tiles worked */
  BWD90_ST_BEGIN,  /* its K/V landed (its first tile's GEMMs may start) */
  BWD90_ST_FIRST,  /* the loop's top after its first tile */
  BWD90_ST_END,    /* the loop's top after its last tile */
  BWD90_ST_SWITCH, /* the next item's first tile had landed (its stage full) */
  BWD90_ST_MET,    /* both warpgroups met before the next item's K/V copies */
  BWD90_ST_ISSUED, /* the next item's K/V copies issued */
  BWD90_ST_STORED, /* this item's dK/dV stores issued (finish_item) */
  BWD90_ST_NEXT,   /* the next item's K/V landed (its BEGIN); the last item's: STORED */
  BWD90_NST
};
static __device__ __forceinline__ unsigned bwd90_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return (unsigned)t;
}

/* ------------------------------------------------------ PTX wrappers */

/* x, y added to the two f32 at ptr (8-byte aligned), one instruction. */
static __device__ __forceinline__ void bwd90_red_add2(float *ptr, float x, float y) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(ptr), "f"(x), "f"(y)
               : "memory");
}

/* d += A B with N = D (64 or 128) columns. */
template <int D>
static __device__ __forceinline__ void bwd90_rs(float (&d)[D / 2], const unsigned (&a)[4],
                                                unsigned long long db) {
  if constexpr (D == 128)
    attn_wgmma_rs128<bwd90_in_bf16>(d, a, db);
  else
    attn_wgmma_rs64<bwd90_in_bf16>(d, a, db);
}


/* d += A B over a query tile (k: its queries in KS 16-query steps), A
 * from registers (step kk's fragment a[kk]), B MN-major from shared memory
 * at db (16 rows of 128 bytes per step), N = D columns: one commit group. */
template <int N, int KS>
static __device__ __forceinline__ void bwd90_rs_tile(float (&d)[N / 2], const unsigned (&a)[KS][4],
                                                     unsigned long long db) {
  attn_wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < KS; ++kk)
    bwd90_rs<N>(d, a[kk], attn_wgmma_desc_add(db, kk * 16 * 128));
  attn_wgmma_commit();
}

/* d (+)= A B with N columns (32 or 64), A and B from shared memory, both
 * K-major or (MN) both MN-major. */
template <int N, bool MN>
static __device__ __forceinline__ void bwd90_ss(float (&d)[N / 2], unsigned long long da,
                                                unsigned long long db, int scale_d) {
  static_assert(N == 64 || N == 32 || (N == 80 && !MN), "m64n64, m64n32 or (K-major) m64n80");
  if constexpr (N == 80)
    attn_wgmma_ss80_kk<bwd90_in_bf16>(d, da, db, scale_d);
  else if constexpr (MN && N == 64)
    attn_wgmma_ss64_mn<bwd90_in_bf16>(d, da, db, scale_d);
  else if constexpr (MN)
    attn_wgmma_ss32_mn<bwd90_in_bf16>(d, da, db, scale_d);
  else if constexpr (N == 64)
    attn_wgmma_ss64_kk<bwd90_in_bf16>(d, da, db, scale_d);
  else
    attn_wgmma_ss32_kk<bwd90_in_bf16>(d, da, db, scale_d);
}

/* A bool as a type, for generic lambdas' compile-time branches. */
template <bool B> struct bwd90_bool {
  static constexpr bool value = B;
};
/* An int as a type, likewise. */
template <int N> struct bwd90_int {
  static constexpr int value = N;
};


/* d += A B over a 64-query step pair in FP8 (A: two 32-query fragments
 * from registers; B at db, k-major, 32 bytes a step): one commit group. */
template <bool A_E4M3, bool B_E4M3>
[[maybe_unused]] static __device__ __forceinline__ void bwd90_rs8(float (&d)[64],
                                                                  const unsigned (&a)[2][4],
                                                                  unsigned long long db) {
  attn_wgmma_fence();
#pragma unroll
  for (int kb = 0; kb < 2; ++kb)
    attn_wgmma_rs128_fp8<A_E4M3, B_E4M3>(d, a[kb], attn_wgmma_desc_add(db, kb * 32));
  attn_wgmma_commit();
}

/* ------------------------------------------------ shared-memory tiles */

/* Byte address of element (r, c) of a tile of ROWS rows stored as blocks
 * of [ROWS][64] (c a multiple of 2 for 4-byte accesses). */
template <int ROWS>
static __device__ __forceinline__ unsigned bwd90_at(unsigned tile, int r, int c) {
  return tile + (unsigned)((c >> 6) * ROWS * 128 + r * 128 + ((((c >> 3) & 7) ^ (r & 7)) << 4) +
                           (c & 7) * 2);
}

/* Copies ROWS rows of D elements starting at row0 into a tile; rows at or
 * beyond row_end are zero-filled (garbage could be NaN, and 0 * NaN is
 * NaN). Since the producer warpgroup (session 5) it loads only K and V,
 * once per CTA; the two address forms below were measured when it also
 * loaded every query tile's Q and dO, and one form would now do (a change
 * of SASS, so left for a run on the GPU). */
template <int ROWS, int D, int D_REAL, typename T = unsigned short>
static __device__ __forceinline__ void bwd90_load(unsigned dst, const T *base,
                                                  long long row_stride, int row0, int row_end,
                                                  int tid) {
  /* (T: 16-bit elements, or bytes in the FP8 mode; a chunk is 16 bytes,
   * placed as the 16-bit chunk of the same index.) */
  constexpr int per_chunk = 16 / (int)sizeof(T);
  constexpr int chunks = D / per_chunk;
  static_assert(bwd90_threads % chunks == 0, "whole rows per round");
  constexpr int rows_per_round = bwd90_threads / chunks;
  /* Two ways to form the addresses, each the faster where it is used (H200,
   * bench/NOTES-sm90.md, session 5): at D 128 and 256 one source pointer
   * advanced per round (D 256: 192 bytes of spills to 12, -18% time; D 128
   * with dropout: 72 to 52, -4%); at D 64 one address per copy (the one
   * pointer made D 64 16% slower, with no spills either way). */
  if constexpr (D >= 128) {
    /* Thread tid copies chunk c of rows r0, r0 + rows_per_round, ...: one
     * source pointer advanced by a row step (not one 64-bit address per
     * copy, which the compiler would keep live across the caller's loop). */
    const int r0 = tid / chunks, c = tid % chunks;
    const bool col_in = D_REAL == D || c * per_chunk < D_REAL;
    const T *src = base + (long long)(row0 + r0) * row_stride + c * per_chunk;
    const long long step = (long long)rows_per_round * row_stride;
#pragma unroll
    for (int k = 0; k < ROWS / rows_per_round; ++k) {
      const int r = r0 + k * rows_per_round;
      const bool in = col_in && row0 + r < row_end;
      attn_cp_async16(bwd90_at<ROWS>(dst, r, c * 8), in ? src : base, in ? 16 : 0);
      src += step;
    }
  } else {
#pragma unroll
    for (int k = 0; k < ROWS * chunks / bwd90_threads; ++k) {
      const int e = tid + k * bwd90_threads;
      const int r = e / chunks, c = e % chunks;
      const bool in = row0 + r < row_end && (D_REAL == D || c * per_chunk < D_REAL);
      const T *src = base + (in ? (long long)(row0 + r) * row_stride + c * per_chunk : 0);
      attn_cp_async16(bwd90_at<ROWS>(dst, r, c * 8), src, in ? 16 : 0);
    }
  }
}

/* ------------------------------------------------------------- masks */

/* Which elements of a thread's S^T fragment survive (bit r for fragment
 * element r: query i0 + 8 (r >> 2) + 2 t4 + (r & 1), key j + 8 ((r >> 1)
 * & 1)), by hooks.cuh's attn_keep_in_bh: straight-line, so a mask's reads
 * merge (doc[b, j] once per key, doc[b, i] once per query). */
/* (BM-80: 40 elements, so 64-bit words) */
template <bool WIDE> struct bwd90_bits_of {
  using t = unsigned;
};
template <> struct bwd90_bits_of<true> {
  using t = unsigned long long;
};
using bwd90_keep_t = bwd90_bits_of<(bwd90_qn / 2 > 32)>::t;
static_assert(bwd90_qn / 2 <= 64, "one keep bit per S^T element");
template <bool MASK>
static __device__ __forceinline__ bwd90_keep_t bwd90_keep_bits(int b, int h, int i0, int j, int t4,
                                                               const attn_params &p) {
  bwd90_keep_t bits = 0u;
  /* The masks' values fixed per (b, h) (a kv_len[b]), read once here, not
   * once per element (the element-wise reads did not merge). */
  const attn_bh c = attn_bh_load(b, h, p);
#pragma unroll
  for (int r = 0; r < bwd90_qn / 2; ++r) {
    const int ii = i0 + (r >> 2) * 8 + 2 * t4 + (r & 1);
    const int jj = j + 8 * ((r >> 1) & 1);
    bits |= (bwd90_keep_t)attn_keep_in_bh<MASK>(c, b, h, ii, jj, p) << r;
  }
  return bits;
}

/* Columns 32 q .. 32 q + 31 of row r (key row + 8 r) of a quad's dK or dV
 * fragment (times scale, packed to 16 bits) as 16-byte pieces: the four
 * lanes of the quad hold 4 bytes of each of the group's four 8-column
 * blocks; two xor-shuffle rounds transpose them, so that lane t4 returns
 * block t4 whole in w (columns 32 q + 8 t4 ..). Round mm swaps bit mm of
 * the block index with bit mm of the lane. The quad's lanes alone take
 * part (a quad may skip a row the others store). */
template <int N>
static __device__ __forceinline__ void bwd90_quad_block16(const float (&x)[N / 2], int r, int q,
                                                          float scale, int t4, unsigned (&w)[4]) {
  const unsigned quad = 0xfu << (threadIdx.x & 28);
#pragma unroll
  for (int k = 0; k < 4; ++k)
    w[k] = attn_pack2<bwd90_in_bf16>(x[(4 * q + k) * 4 + 2 * r] * scale,
                                     x[(4 * q + k) * 4 + 2 * r + 1] * scale);
#pragma unroll
  for (int mm = 1; mm <= 2; mm <<= 1) {
    const bool hi = t4 & mm;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (k & mm)
        continue;
      const unsigned got = __shfl_xor_sync(quad, hi ? w[k] : w[k ^ mm], mm);
      if (hi)
        w[k] = got;
      else
        w[k ^ mm] = got;
    }
  }
}

/* Row r (key row + 8 r) of a thread's dK or dV fragment (N columns from
 * col0 of a D-wide row, D the tile's width, of which the tensor has
 * D_REAL), times scale, to where it goes: the 16-bit output row (b, hk,
 * j), or with GQA the f32 accumulator row acc_row, by atomics or, in
 * deterministic mode, plain stores into per-head rows. The FP8 backward
 * (KV: 1 dK, 2 dV) stores the output row as the grad block says: its
 * values, storage type and amax outputs (maxed into m).
 *
 * A 16-bit output row whose rows start on 16 bytes (vec16) goes out in
 * 16-byte stores (bwd90_quad_block16): a warp's store writes 64 whole
 * bytes of each of its 8 rows (two full sectors) instead of 16 (half a
 * sector). The quad's lanes share j, so a quad that skips a row (j >=
 * Skv) skips it whole. */
template <int N, int D, int D_REAL, int KV>
static __device__ __forceinline__ void bwd90_store_row(const float (&x)[N / 2], int r, float scale,
                                                       const attn_tensor_arg &to, float *acc_base,
                                                       long long acc_row, int col0, int b, int hk,
                                                       int j, int t4, bool shared_kv, bool det,
                                                       unsigned (&m)[BWD80_AMAX_MAX],
                                                       const attn_params &p, bool vec16) {
  float *acc = acc_base + acc_row * D + col0;
  const long long roff =
      b * to.stride[0] + hk * to.stride[1] + (long long)j * to.stride[2] + col0;
  [[maybe_unused]] unsigned short *row = (unsigned short *)to.ptr + roff;
#if !defined(ATTN_BWD_FP8)
  static_assert(N % 32 == 0, "groups of four 8-column blocks");
  if (!shared_kv && vec16) {
#pragma unroll
    for (int q = 0; q < N / 32; ++q) {
      unsigned w[4];
      bwd90_quad_block16<N>(x, r, q, scale, t4, w);
      const int c = 32 * q + 8 * t4;
      if (D_REAL == D || col0 + c < D_REAL)
        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(row + c), "r"(w[0]),
                     "r"(w[1]), "r"(w[2]), "r"(w[3])
                     : "memory");
    }
    return;
  }
#endif
#pragma unroll
  for (int nb = 0; nb < N / 8; ++nb) {
    const int d = nb * 8 + 2 * t4;
    if (D_REAL != D && col0 + nb * 8 >= D_REAL)
      break; /* (D_REAL is a multiple of 8) */
    const float x0 = x[nb * 4 + 2 * r] * scale, x1 = x[nb * 4 + 2 * r + 1] * scale;
    if (shared_kv && det)
      *(float2 *)(acc + d) = make_float2(x0, x1);
    else if (shared_kv)
      bwd90_red_add2(acc + d, x0, x1);
    else {
#if defined(ATTN_BWD_FP8)
      if constexpr (KV == 1)
        bwd80_store_grad<bwd80_dk_kind>(to.ptr, roff + d, x0, x1, m, p, attn_bwd_store_dk,
                                        attn_bwd_amax_dk);
      else
        bwd80_store_grad<bwd80_dv_kind>(to.ptr, roff + d, x0, x1, m, p, attn_bwd_store_dv,
                                        attn_bwd_amax_dv);
#else
      *(unsigned *)(row + d) = attn_pack2<bwd90_in_bf16>(x0, x1);
#endif
    }
  }
  (void)m, (void)p;
}

/* ---------------------------------------------------- the main kernel */

/* Grid (ceil(Skv / BN) [+ ceil(Sq / 64) in deterministic mode], H, B):
 * one CTA per work item; or, persistent (p.tile_queue set, never in
 * deterministic mode), at most one CTA per SM, each taking items from the
 * queue. 384 threads (two consumer warpgroups, then the producer's),
 * attn_bwd_sm90_smem_bytes of dynamic shared memory; tm: the q and dO
 * tensor maps (64 x 64 boxes) and dQ's accumulator's. The scratch tensors
 * are bwd_sm80's (delta, dQ's accumulator, GQA's dK/dV accumulators).
 *
 * Persistent: the producer's walk runs on across items, its stage slots
 * saying which item a tile belongs to; the consumers finish an item (dK,
 * dV stored, accumulators reset) when the item changes and load the next
 * one's K and V, while the stages hold its first query tiles already. An
 * item whose query tiles the masks all skip still owes zero dK and dV, so
 * the producer posts it as a slot with no tile (m = -2). Short sequences
 * gained most: one CTA per item paid its launch, K/V load, first tile's
 * wait and last stores with nothing to overlap them (bench/NOTES-sm90.md,
 * session 7). */
__device__ __forceinline__ void attn_bwd_sm90_main(const attn_params &p_in, const attn_tmaps &tm) {
  extern __shared__ __align__(1024) unsigned char bwd90_smem[];
  /* Packed sequences (bwd_sm80.cuh, bwd80_packed_item; never persistent):
   * the CTA's sequence (pk_b), its key tile or deterministic dQ tile
   * (pk_tile), its first query row (pk_q0: the tensor maps see every
   * token as rows of one batch entry) and the sequence's view p. */
#if defined(ATTN_PACKED_Q)
  attn_params p;
  int pk_b, pk_tile, pk_q0;
  bool pk_dq;
  if (!bwd80_packed_item<bwd90_bn>((int)blockIdx.x, p_in, pk_b, pk_tile, pk_dq, pk_q0, p))
    return;
#else
  const attn_params &p = p_in;
  constexpr int pk_q0 = 0;
#endif
  /* A tensor map's batch coordinate for batch entry (or sequence) b. */
  auto tma_b = [](int b) { return attn_packed ? 0 : b; };
  const float neg_inf = __int_as_float(0xff800000);
  const float log2e = 1.4426950408889634f;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  /* Through a shuffle, so the compiler knows it is warp-uniform: 0 and 1
   * the consumers, 2 the producer. */
  const int wgi = __shfl_sync(0xffffffffu, tid / 128, 0);
  /* Split-D's one item, this CTA's key tile (!bwd90_items; unused else):
   * its head, batch, K/V head and keys. */
#if defined(ATTN_PACKED_Q)
  const int cta_h = blockIdx.y, cta_b = pk_b, cta_kt = pk_tile;
#else
  const int cta_h = blockIdx.y, cta_b = blockIdx.z, cta_kt = blockIdx.x;
#endif
  const int cta_hk = cta_h / (p.H / p.Hk);
  const int cta_j0 = cta_kt * bwd90_bn;
  const int cta_j_last = min(cta_j0 + bwd90_bn, p.Skv) - 1;
  /* The work items: this CTA's (one per CTA), or, persistent, item
   * `first` and then those the queue hands out (an index >= n_items ends
   * the walk). */
  const int n_key_tiles = (p.Skv + bwd90_bn - 1) / bwd90_bn;
  const bool persistent = bwd90_items && p.tile_queue != nullptr;
  const int n_items = persistent ? n_key_tiles * p.H * p.B : 1;
  const int first = persistent ? (int)blockIdx.x : 0;
  const int n_ctas = persistent ? (int)gridDim.x : 1;
  /* Only the producer's walker decodes items; it posts each tile's
   * (key tile, h, b) in its slot. */
  auto item_at = [&](int t, int heads) {
    if (persistent)
      return bwd90_item_of(t, n_key_tiles, heads, p);
    bwd90_item r;
    r.kt = cta_kt, r.h = cta_h, r.b = cta_b;
    return r;
  };
  /* Deterministic mode: CTAs past the key tiles compute dQ per query
   * tile of 64 (uniform per CTA; never in split-D mode, which the runtime
   * refuses before a launch, nor persistent). */
#if defined(ATTN_PACKED_Q)
  const bool dq_cta = !bwd90_split_d && pk_dq;
#else
  const bool dq_cta = !bwd90_split_d && !persistent && (int)blockIdx.x >= n_key_tiles;
#endif
  const bool det = !bwd90_split_d && bwd80_deterministic(p);

  const attn_tensor_arg &tk = p.t[bwd80_tk], &tv = p.t[bwd80_tv];
  /* (Split-D's one item:) its K/V rows and rows of {delta, lse log2 e}. */
  const bwd90_el *cta_kg = (const bwd90_el *)tk.ptr + cta_b * tk.stride[0] + cta_hk * tk.stride[1];
  const bwd90_el *cta_vg = (const bwd90_el *)tv.ptr + cta_b * tv.stride[0] + cta_hk * tv.stride[1];
  const float *cta_deltag = bwd80_slice_rows<const float>(p.t[bwd80_tdelta], cta_b, cta_h);

  /* Tiles on 1024-byte boundaries: round the dynamic base up. */
  const unsigned raw_base = attn_smem_addr(bwd90_smem);
  const unsigned base = (raw_base + 1023u) & ~1023u;
  const unsigned sk = base, sv = base + bwd90_off_v;
  const unsigned sq0 = base + bwd90_off_q, sdo0 = base + bwd90_off_do;
  const unsigned sds0 = base + bwd90_off_ds, spt0 = base + bwd90_off_pt;
  [[maybe_unused]] const unsigned skt = base + bwd90_off_kt, sqdt0 = base + bwd90_off_qdt;
  const unsigned sdqs = base + bwd90_off_dqs;
  const unsigned sstats = base + bwd90_off_stats, bars = base + bwd90_off_bars;
  const float2 *s_stats = (const float2 *)(bwd90_smem + (base - raw_base) + bwd90_off_stats);
  auto bar_full = [&](int st) { return bars + 8u * st; };
  auto bar_empty = [&](int st) { return bars + 8u * (bwd90_stages + st); };
  auto tile_slot = [&](int st) {
    return bars + 16u * bwd90_stages + (unsigned)bwd90_slot_bytes * st;
  };
  const unsigned dq_slot = bars + (16u + bwd90_slot_bytes) * bwd90_stages;
  /* (split-D) dQ pass c of warpgroup w is in stage st. */
  auto bar_dq_ready = [&](int st, int c, int w) {
    return dq_slot + 8u * (1 + (st * 2 + c) * 2 + w);
  };
  /* (split-D) Where warpgroup w's dQ pass c goes in stage st: its dO
   * blocks (pass 0) or its Q blocks (pass 1). */
  auto dq_region = [&](int st, int c, int w) {
    return (c == 0 ? base + bwd90_off_do + st * bwd90_do_bytes
                   : base + bwd90_off_q + st * bwd90_q_bytes) +
           (unsigned)(w * 2 * bwd90_bm * 128);
  };
  /* The dQ buffer's mbarriers (not split-D), after the slot: full takes
   * an arrive from each of the 256 consumer threads after its stores, free
   * one from each lane of the dQ warp after its reads. Every thread
   * arriving itself, as for the stages: a named barrier's bar.arrive
   * orders the same accesses in PTX, but compute-sanitizer's racecheck
   * reports it (tests/gpu/racecheck_control.cu, mode named), and this
   * keeps the kernel clean under it. */
  const unsigned bar_dq_full = dq_slot + 8u, bar_dq_free = dq_slot + 16u;
  const unsigned bar_kv_full = dq_slot + 24u; /* (bwd90_kv_tma) */
  const int n_m = (p.Sq + bwd90_bm - 1) / bwd90_bm;

  if (tid == 0) {
    for (int st = 0; st < bwd90_stages; ++st) {
      attn_mbar_init(bar_full(st), 33); /* lane 0's expect_tx, then all 32 lanes */
      /* An arrive from every thread of the consumer warps (split-D: of the
       * dQ warps), each after its own reads of the stage's slot and rows
       * (an elected lane's would order only its own:
       * tests/gpu/racecheck_control.cu). */
      attn_mbar_init(bar_empty(st), 32 * (bwd90_dq_in_stage && !det ? 2 : 8));
      if constexpr (bwd90_dq_in_stage)
        for (int k = 0; k < 4; ++k)
          attn_mbar_init(bar_dq_ready(st, k >> 1, k & 1), 128);
    }
    if constexpr (!bwd90_dq_in_stage) {
      attn_mbar_init(bar_dq_full, bwd90_threads);
      attn_mbar_init(bar_dq_free, 32);
    }
    if constexpr (bwd90_kv_tma)
      attn_mbar_init(bar_kv_full, 1); /* the issuing thread's expect_tx */
    if constexpr (bwd90_amax_ds_shared)
      for (int k = 0; k < bwd80_namax_ds; ++k)
        asm volatile("st.shared.u32 [%0], 0;\n" ::"r"(bars + bwd90_off_amax_ds + 4 * k) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  }
  __syncthreads();

  if (wgi == 2) {
    /* ---------------------------------------------------- producer */
    /* 24 and the consumers' 240 balance exactly: the CTA launches with
     * 168 x 384 registers, and the consumers' increase takes from what
     * the producer frees; at 32 (session 7) the increase never completed
     * and the kernel hung. */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    /* A dQ warp's lane 0: n boxes of [64 rows][32 f32] from buf added into
     * the accumulator at columns col0.. and rows row0.., as one bulk group. */
    const attn_tmap *mdq = &tm.m[ATTN_TMAP_DQA];
    auto reduce_dq = [&](unsigned buf, int n, int col0, int row0, int h, int b) {
      for (int x = 0; x < n; ++x)
        attn_tma_reduce_add4(mdq, buf + x * bwd90_box_rows * 128, col0 + x * 32, pk_q0 + row0, h,
                             tma_b(b));
      attn_bulk_commit();
    };
    if (bwd90_dq_in_stage && (warp == 9 || warp == 10) && !det) {
      /* Split-D (one item per CTA, !bwd90_items): warpgroup w's dQ warp.
       * Per tile (the stages in the consumers' order; the producer's slot
       * says which tile, -1 ends): each pass once its `dq ready`
       * completes, lane 0 adds its two boxes into the accumulator by TMA;
       * once both have been read, the stage is free. */
      static_assert(!bwd90_dq_in_stage || !bwd90_items, "split-D takes one item per CTA");
      const int w = warp - 9;
      if (lane == 0)
        attn_prefetch_tmap(mdq);
      for (int it = 0;; ++it) {
        const int st = it % bwd90_stages, ph = (it / bwd90_stages) & 1;
        attn_mbar_wait(bar_full(st), ph);
        int m;
        asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(m) : "r"(tile_slot(st)) : "memory");
        if (m < 0)
          break;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          attn_mbar_wait(bar_dq_ready(st, c, w), ph);
          if (lane == 0)
            reduce_dq(dq_region(st, c, w), 2, w * 128 + c * 64, m * bwd90_bm, cta_h, cta_b);
        }
        if (lane == 0) /* the reductions have read the stage */
          attn_bulk_wait<0, true>();
        attn_mbar_arrive(bar_empty(st));
        __syncwarp();
      }
      if (lane == 0)
        attn_bulk_wait<0, false>(); /* the last adds, before the CTA ends */
      return;
    }
    if (warp == 9 && !bwd90_dq_in_stage && !dq_cta && !det) {
      /* The dQ warp: per tile the consumers hand over (bar_dq_full, the
       * tile's first query row in dq_slot), lane 0 adds the buffer into
       * the accumulator by TMA, one box of 32 columns at a time, and
       * waits only until the copies have read it before freeing it
       * (bar_dq_free; the adds finish in L2 on their own). A row of -1
       * ends the loop. */
      if (lane == 0)
        attn_prefetch_tmap(mdq);
      for (int round = 0;; ++round) {
        attn_mbar_wait(bar_dq_full, round & 1);
        int i0, bh;
        asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n"
                     : "=r"(i0), "=r"(bh)
                     : "r"(dq_slot)
                     : "memory");
        if (i0 < 0)
          break;
        if (lane == 0) {
          /* Wide mode: warpgroup w's 64 queries from i0 + 64 w, each in
           * D/32 boxes of its own. */
#pragma unroll
          for (int w = 0; w < bwd90_halves; ++w)
            if (w == 0 || i0 + w * bwd90_box_rows < p.Sq)
              reduce_dq(sdqs + w * bwd90_dq_half_bytes, bwd90_dqk / 32, 0,
                        i0 + w * bwd90_box_rows, bh & 0xffff, bh >> 16);
          attn_bulk_wait<0, true>();
        }
        attn_mbar_arrive(bar_dq_free);
      }
      if (lane == 0)
        attn_bulk_wait<0, false>(); /* the last adds, before the CTA ends */
      return;
    }
    if (dq_cta || warp != 8)
      return;
    /* One warp walks the items and, per item, the query tiles (its lanes
     * classify 32 at once); per live tile, after the consumers free a
     * stage: lane 0 the tile's slot and its Q and dO boxes by TMA, every
     * lane two rows of {delta, lse log2 e} (plain loads: 8-byte rows,
     * which TMA cannot box); then each lane arrives. A slot of m = -2: an
     * item without live tiles; m = -1 ends the walk. */
    const attn_tmap *mq = &tm.m[ATTN_TMAP_Q], *mdo = &tm.m[ATTN_TMAP_DO];
    [[maybe_unused]] const attn_tmap *mqdt = &tm.m[ATTN_TMAP_QDT];
    if (lane == 0) {
      attn_prefetch_tmap(mq);
      attn_prefetch_tmap(mdo);
      if constexpr (bwd90_f8)
        attn_prefetch_tmap(mqdt);
    }
    int it = 0; /* stage uses, over all items */
    /* Slot {m, cls | kt << 2, item t, b << 16 | h} (split-D: {m, cls}) into
     * the next stage, with its Q and dO boxes and rows when m >= 0. */
    auto post = [&](int m, int cls, int t, int kt, int h, int b, const float *deltag) {
      const int st = it % bwd90_stages, ph = (it / bwd90_stages) & 1;
      ++it;
      attn_mbar_wait(bar_empty(st), ph ^ 1);
      if (lane == 0) {
        if constexpr (bwd90_items)
          asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(tile_slot(st)),
                       "r"(m), "r"(cls | kt << 2), "r"(t), "r"(b << 16 | h)
                       : "memory");
        else
          asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(tile_slot(st)), "r"(m),
                       "r"(cls)
                       : "memory");
        if (m >= 0) {
          const int i0 = m * bwd90_bm;
          attn_mbar_expect_tx(bar_full(st), bwd90_q_bytes + bwd90_do_bytes + bwd90_qdt_bytes);
          /* Boxes of 64 rows of 128 bytes: a wide tile's second half lands
           * 64 rows in. */
#pragma unroll
          for (int x = 0; x < bwd90_halves; ++x) {
            const unsigned rows = x * bwd90_box_rows * 128;
#pragma unroll
            for (int c = 0; c < bwd90_dqk / bwd90_blk_cols; ++c)
              attn_tma_load4(sq0 + st * bwd90_q_bytes + c * bwd90_bm * 128 + rows, mq,
                             bar_full(st), c * bwd90_blk_cols, pk_q0 + i0 + x * bwd90_box_rows, h,
                             tma_b(b));
#pragma unroll
            for (int c = 0; c < bwd90_dv / bwd90_blk_cols; ++c)
              attn_tma_load4(sdo0 + st * bwd90_do_bytes + c * bwd90_bm * 128 + rows, mdo,
                             bar_full(st), c * bwd90_blk_cols, pk_q0 + i0 + x * bwd90_box_rows, h,
                             tma_b(b));
          }
          /* FP8: the tile's Q^T and dO^T (transpose8's), one box at its
           * first query. */
          if constexpr (bwd90_f8)
            attn_tma_load4(sqdt0 + st * bwd90_qdt_bytes, mqdt, bar_full(st), i0, 0, h, b);
        } else {
          attn_mbar_arrive(bar_full(st));
        }
      }
      if (m >= 0) {
        /* Rows past Sq: {0, 0}, as Q and dO are zero there (TMA's fill):
         * their products are 0 whatever P is. */
        if constexpr (bwd90_f8) {
          /* The FP8 mode's order, per pair of queries {lse, lse', delta,
           * delta'} (stat_pair below): this lane's two rows. */
          static_assert(!bwd90_f8 || bwd90_bm == 64, "two rows a lane");
          const int i = m * bwd90_bm + 2 * lane;
          const float2 v0 = i < p.Sq ? *(const float2 *)(deltag + 2 * i) : make_float2(0.f, 0.f);
          const float2 v1 =
              i + 1 < p.Sq ? *(const float2 *)(deltag + 2 * i + 2) : make_float2(0.f, 0.f);
          asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(
                           sstats + (unsigned)((st * bwd90_bm + 2 * lane) * 8)),
                       "f"(v0.y), "f"(v1.y), "f"(v0.x), "f"(v1.x)
                       : "memory");
        } else {
          /* Row `row` of the tile: lane l takes rows l bm / 32 .. (BM-80:
           * l, l + 32 and, for 16 lanes, l + 64). */
          auto stat_row = [&](int row) {
            const int i = m * bwd90_bm + row;
            const float2 v = i < p.Sq ? *(const float2 *)(deltag + 2 * i) : make_float2(0.f, 0.f);
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(
                             sstats + (unsigned)((st * bwd90_bm + row) * 8)),
                         "f"(v.x), "f"(v.y)
                         : "memory");
          };
          if constexpr (bwd90_bm80) {
#pragma unroll
            for (int r = 0; r < 3; ++r)
              if (lane + 32 * r < bwd90_bm)
                stat_row(lane + 32 * r);
          } else {
#pragma unroll
            for (int r = 0; r < bwd90_bm / 32; ++r)
              stat_row(bwd90_bm / 32 * lane + r);
          }
        }
      }
      attn_mbar_arrive(bar_full(st));
    };
    /* The query tiles of keys j0..j_last of (b, h) the masks let through,
     * in order, 32 classified at once by the lanes: each call gives the
     * next (m, its class) or false after the last. */
    struct tile_cursor {
      int chunk, base_m;
      unsigned live, fullm;
    };
    auto pop = [&](tile_cursor &cu, int b, int h, int j0, int j_last, int &m, int &cls) {
      while (cu.live == 0 && cu.chunk < n_m) {
        const int c = cu.chunk + lane;
        int k = 0;
        if (c < n_m) {
          const int i0 = c * bwd90_bm;
          k = attn_tile_class(b, h, i0, min(i0 + bwd90_bm, p.Sq) - 1, j0, j_last, p);
        }
        cu.live = __ballot_sync(0xffffffffu, k != 0);
        cu.fullm = __ballot_sync(0xffffffffu, k == 2);
        cu.base_m = cu.chunk;
        cu.chunk += 32;
      }
      if (cu.live == 0)
        return false;
      const int bit = __ffs(cu.live) - 1;
      m = cu.base_m + bit;
      cls = (cu.fullm >> bit) & 1u ? 2 : 1;
      cu.live &= cu.live - 1u;
      return true;
    };
    if constexpr (bwd90_items) {
      const int heads = persistent ? bwd90_section_heads(p) : 1;
      for (int t = first; t < n_items;) {
        const bwd90_item wi = item_at(t, heads);
        const int h = wi.h, b = wi.b, hk = h / (p.H / p.Hk);
        const int j0 = wi.kt * bwd90_bn, j_last = min(j0 + bwd90_bn, p.Skv) - 1;
        /* Rows of {delta, lse * log2(e)} (attn_bwd_sm80_delta). */
        const float *deltag = bwd80_slice_rows<const float>(p.t[bwd80_tdelta], b, h);
        if (persistent) {
          /* The item's K and V rows toward L2 while the consumers finish the
           * previous item (they load them once its first slot arrives). */
          const unsigned char *kb = (const unsigned char *)tk.ptr + bwd90_eb * (b * tk.stride[0] +
                                    hk * tk.stride[1]);
          const unsigned char *vb = (const unsigned char *)tv.ptr + bwd90_eb * (b * tv.stride[0] +
                                    hk * tv.stride[1]);
          for (int r = lane; r < j_last + 1 - j0; r += 32) {
#pragma unroll
            for (int c = 0; c < ATTN_D_QK * bwd90_eb; c += 128)
              asm volatile("prefetch.global.L2 [%0];\n" ::"l"(kb + bwd90_eb * (j0 + r) * tk.stride[2] +
                                                                 c));
#pragma unroll
            for (int c = 0; c < ATTN_D_V * bwd90_eb; c += 128)
              asm volatile("prefetch.global.L2 [%0];\n" ::"l"(vb + bwd90_eb * (j0 + r) * tv.stride[2] +
                                                                 c));
          }
        }
        tile_cursor cu = {0, 0, 0u, 0u};
        int posted = 0, m, cls;
        for (; pop(cu, b, h, j0, j_last, m, cls); ++posted)
          post(m, cls, t, wi.kt, h, b, deltag);
        if (posted == 0 && bwd90_items) /* zero dK and dV are still stored */
          post(-2, 0, t, wi.kt, h, b, deltag);
        int tn = 0;
        if (lane == 0)
          tn = attn_next_work(persistent ? p.tile_queue : nullptr, t, n_ctas, n_items);
        t = __shfl_sync(0xffffffffu, tn, 0);
      }
      post(-1, 0, -1, 0, 0, 0, nullptr);
      return;
    } else {
      /* Split-D: this CTA's key tile alone (slots {m, cls}). */
      const int h = cta_h, b = cta_b, j0 = cta_j0, j_last = cta_j_last;
      const float *deltag = cta_deltag;
      tile_cursor cu = {0, 0, 0u, 0u};
      for (;;) {
        int m = -1, cls = 0;
        const bool have = pop(cu, b, h, j0, j_last, m, cls);
        post(m, cls, 0, 0, h, b, deltag);
        if (!have)
          return;
      }
    }
  }

  /* ------------------------------------------------------ consumers */
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
#if !BWD90_SPLIT_D
  if (dq_cta) {
#if defined(ATTN_PACKED_Q)
    bwd80_dq_tile<true>(p, pk_tile, pk_b);
#else
    bwd80_dq_tile<true>(p, (int)blockIdx.x - n_key_tiles, (int)blockIdx.z);
#endif
    return;
  }
#endif
  const int wg = wgi;
  const int ww = warp & 3; /* 16 rows of the warpgroup's 64 per warp */
  const int g = lane >> 2, t4 = lane & 3;

  /* An item's K and V (keys j0.. of the rows at kg, vg of (b, hk)), by the
   * consumers, visible to wgmma once both warpgroups have passed. The FP8
   * mode also takes the keys' K^T (transpose8's: rows d of the padded
   * keys, zeros past Skv). */
  auto load_kv_rows = [&](const bwd90_el *kg, const bwd90_el *vg, int j0, int b, int hk) {
    bwd90_load<bwd90_bn, bwd90_dqk, ATTN_D_QK>(sk, kg, tk.stride[2], j0, p.Skv, tid);
    bwd90_load<bwd90_bn, bwd90_dv, ATTN_D_V>(sv, vg, tv.stride[2], j0, p.Skv, tid);
#if defined(ATTN_BWD_FP8_MMA)
    const attn_tensor_arg &tkt = p.t[ATTN_BWD_TKT];
    bwd90_load<bwd90_dqk, bwd90_bn, bwd90_bn, unsigned char>(
        skt, (const unsigned char *)tkt.ptr + b * tkt.stride[0] + hk * tkt.stride[1] + j0,
        tkt.stride[2], 0, bwd90_dqk, tid);
#else
    (void)b, (void)hk;
#endif
    attn_cp_async_commit();
  };
  /* The copies landed, for wgmma (the async proxy) and both warpgroups
   * (bwd90_kv_tma: the item's TMA boxes, kv_phase the parity of the
   * item's use of the mbarrier). */
  int kv_phase = 0;
  auto kv_landed = [&]() {
    if constexpr (bwd90_kv_tma) {
      attn_mbar_wait(bar_kv_full, kv_phase);
      kv_phase ^= 1;
    } else {
      attn_cp_async_wait<0>();
      attn_fence_proxy_async();
      attn_named_sync(1);
    }
  };
  if constexpr (!bwd90_items) { /* split-D's one item, before the loop */
    load_kv_rows(cta_kg, cta_vg, cta_j0, cta_b, cta_hk);
    kv_landed();
  }

  /* The item being worked on (its index t; -1 before the first) and, in
   * this warp's item word, its key tile and b << 16 | h, from the slot of
   * its first tile; every tile's slot says them again. */
  int cur = -1;
  const unsigned item_word = bars + bwd90_off_item_words + 8u * warp;
  auto begin_item = [&](int t, int kt, int hb) {
    cur = t;
    asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(item_word), "r"(kt), "r"(hb)
                 : "memory");
    __syncwarp(); /* every lane wrote the same word; ordered before any reads it */
  };
  /* A walked item's K and V copies, issued. A previous item's may still be
   * read (dQ's GEMMs read all of K), so both warpgroups first meet (before
   * the walk's first item too: measured so). kv_landed waits for them. */
#if defined(ATTN_BWD_STAMPS)
  unsigned st_met = 0; /* (BWD90_ST_MET of the switch under way) */
#endif
  auto load_kv = [&](int j0, int hb) {
    const int h = hb & 0xffff, b = hb >> 16, hk = h / (p.H / p.Hk);
    attn_named_sync(1);
#if defined(ATTN_BWD_STAMPS)
    st_met = bwd90_now();
#endif
    if constexpr (bwd90_kv_tma) {
      if (tid == 0) {
        attn_mbar_expect_tx(bar_kv_full, bwd90_bn * (bwd90_dqk + bwd90_dv) * 2);
#pragma unroll
        for (int c = 0; c < bwd90_dqk / 64; ++c)
          attn_tma_load4(sk + c * bwd90_bn * 128, &tm.m[ATTN_TMAP_BK], bar_kv_full, c * 64, j0,
                         hk, b);
#pragma unroll
        for (int c = 0; c < bwd90_dv / 64; ++c)
          attn_tma_load4(sv + c * bwd90_bn * 128, &tm.m[ATTN_TMAP_BV], bar_kv_full, c * 64, j0,
                         hk, b);
      }
      return;
    }
    load_kv_rows((const bwd90_el *)tk.ptr + b * tk.stride[0] + hk * tk.stride[1],
                 (const bwd90_el *)tv.ptr + b * tv.stride[0] + hk * tv.stride[1], j0, b, hk);
  };
  float dk[bwd90_dk_cols / 2], dv[bwd90_dv_cols / 2];
  /* dQ's and dK's factor (with the FP8 backward's dS post factor). The FP8
   * mode leaves dQ's to the convert step (a multiply per element of every
   * tile's dQ there, once per element of the accumulator here). */
  const float sc = bwd80_draw_scale(p);
  const float sc_dq = bwd90_f8 ? 1.f : sc;
  /* The FP8 backward's amax of dS: over a tile, then into the CTA's words
   * (bwd90_amax_ds_shared), or over every tile (split-D); committed at the
   * end. */
  BWD80_AMAX_ZERO(mds);
  auto flush_amax_ds = [&]() {
    if constexpr (bwd90_amax_ds_shared) {
#pragma unroll
      for (int k = 0; k < bwd80_namax_ds; ++k) {
        const unsigned v = __reduce_max_sync(0xffffffffu, mds[k]);
        if (lane == 0 && v != 0u)
          asm volatile("red.shared.max.u32 [%0], %1;\n" ::"r"(bars + bwd90_off_amax_ds + 4 * k),
                       "r"(v)
                       : "memory");
        mds[k] = 0u;
      }
    }
  };
  /* A tile's dQ part (times the folded scale) into shared memory for a
   * producer warp's TMA reduction: at D <= 128 into the dQ buffer (after
   * the warp has freed the tile's stage, release_stage below), at D 256
   * into the stage (bwd90_dq_in_stage). */
  /* Columns per GEMM pass: split-D 64 of its 128; else half of D, or in
   * wide mode all of them (each warpgroup its half of the queries). */
  constexpr int dq_cols = bwd90_split_d ? 64 : bwd90_wide ? bwd90_dqk : bwd90_dqk / 2;
  constexpr int dq_passes = bwd90_split_d ? 2 : 1;
  /* A pass's accumulators a thread (BM-80: dQ^T's 64 rows of D by the 80
   * queries). */
  constexpr int dq_regs = bwd90_bm80 ? bwd90_bm * 64 / 128 : dq_cols / 2;
  /* Fragment dq (rows 16 ww + g and + 8, columns col0 + 8 nb + 2 t4) into
   * a buffer of [64 rows][32 f32] blocks from its column 0: block col /
   * 32, the row's 128 bytes, 16-byte chunk (col % 32) / 4 swizzled by row
   * & 7 (= g), as the accumulator's TMA boxes land. Rows g and g ^ 1
   * would hit the same banks (the swizzle maps their column pairs onto the
   * same chunks), so lanes of odd g store the block's other 16 columns
   * (fragment nb ^ 2) in the same instruction: one wavefront per 128
   * bytes. The FP8 mode instead stores row g of each 8 as row g ^ 4 when
   * g is odd (bwd80_dq_row: the accumulator keeps that order, the convert
   * pass reads it back), so the 16 lanes of a half-warp store rows 0, 5, 2,
   * 7 (4, 1, 6, 3) of their 8, whose swizzles put every lane on banks of
   * its own with its own fragment: no FSEL pair a register (32 a tile). Then
   * the fence that makes the stores visible to TMA. */
  auto store_dq = [&](const float (&dq)[dq_regs], unsigned buf, int col0) {
    if constexpr (bwd90_bm80) {
      /* dQ^T's fragment (D row 64 wg + 16 ww + g + 8 ((e >> 1) & 1),
       * query 8 nb + 2 t4 + (e & 1)) into the [80 rows][32 f32] boxes at
       * its row's place: one 4-byte store an element. A warp's store
       * covers 8 rows of D (4 of them a chunk, two chunks) by 4 queries
       * (the swizzle's row bits 1, 2): 8 distinct chunks, 32 banks. */
#pragma unroll
      for (int nb = 0; nb < dq_regs / 4; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int d = wg * 64 + ww * 16 + g + 8 * ((e >> 1) & 1), q = 8 * nb + 2 * t4 + (e & 1);
          const unsigned at = buf + (unsigned)((d >> 5) * bwd90_box_rows * 128 + q * 128 +
                                               ((((d & 31) >> 2) ^ (q & 7)) << 4) + (d & 3) * 4);
          asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(at), "f"(dq[nb * 4 + e] * sc_dq)
                       : "memory");
        }
      attn_fence_proxy_async();
      (void)col0;
      return;
    }
    constexpr bool rows_traded = bwd90_f8;
    const bool odd = g & 1;
    const int gl = rows_traded ? g ^ (odd ? 4 : 0) : g; /* the row's place in its 8 */
    const int row = ww * 16 + gl;
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int nb = 0; nb < dq_cols / 8; ++nb) {
        const bool swap = !rows_traded && odd;
        const int nbs = swap ? nb ^ 2 : nb;
        const int col = col0 + nbs * 8 + 2 * t4;
        const unsigned at = buf + (unsigned)((col >> 5) * bwd90_box_rows * 128 + (row + 8 * r) * 128 +
                                             ((((col & 31) >> 2) ^ gl) << 4) + (col & 3) * 4);
        const float x0 = swap ? dq[(nb ^ 2) * 4 + 2 * r] : dq[nb * 4 + 2 * r];
        const float x1 = swap ? dq[(nb ^ 2) * 4 + 2 * r + 1] : dq[nb * 4 + 2 * r + 1];
        asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at), "f"(x0 * sc_dq),
                     "f"(x1 * sc_dq)
                     : "memory");
      }
    attn_fence_proxy_async();
  };
  /* Pass c (columns dcol..) of the tile at row i0 in stage st, to the
   * producer's dQ warp. */
  /* (not split-D) The buffer's uses so far: use u waits for the dQ warp's
   * round u - 1 to free it (parity (u & 1) ^ 1, so the first passes). */
  int dq_round = 0;
  auto put_dq = [&](const float (&dq)[dq_regs], int dcol, int i0, int hb, int st, int c) {
    if constexpr (bwd90_dq_in_stage) {
      store_dq(dq, dq_region(st, c, wg), 0);
      attn_mbar_arrive(bar_dq_ready(st, c, wg));
    } else {
      attn_mbar_wait(bar_dq_free, (dq_round++ & 1) ^ 1);
      if constexpr (bwd90_wide) /* this warpgroup's queries in boxes of their own */
        store_dq(dq, sdqs + wg * bwd90_dq_half_bytes, 0);
      else if constexpr (bwd90_bm80) /* (its rows of D: their own boxes) */
        store_dq(dq, sdqs, 0);
      else
        store_dq(dq, sdqs, dcol);
      if (tid == 0)
        asm volatile("st.shared.v2.u32 [%0], {%1, %2};\n" ::"r"(dq_slot), "r"(i0),
                     "r"(hb)
                     : "memory");
      attn_mbar_arrive(bar_dq_full);
    }
  };
#if defined(ATTN_BWD_BIAS)
  float red[bwd80_nred];
#endif
  /* dK, dV and the bias partial sums at zero: before the first item and
   * after each. */
  auto zero_acc = [&]() {
#pragma unroll
    for (int r = 0; r < bwd90_dk_cols / 2; ++r)
      dk[r] = 0.f;
#pragma unroll
    for (int r = 0; r < bwd90_dv_cols / 2; ++r)
      dv[r] = 0.f;
#if defined(ATTN_BWD_BIAS)
#pragma unroll
    for (int r = 0; r < bwd80_nred; ++r)
      red[r] = 0.f;
#endif
  };
  zero_acc();

  const unsigned k_wg = sk + wg * bwd90_key_wg * 128, v_wg = sv + wg * bwd90_key_wg * 128;
  /* Descriptors fixed for the CTA: this warpgroup's K and V rows
   * (K-major), dRaw^T and, per dQ pass, the K columns col0.. it computes
   * (MN-major): col0 = D/2 w + 64 pass, in column block col0 / 64, (col0 %
   * 64) 2 bytes into its rows (D 64: 32 w, 64 bytes in). */
  const unsigned long long dk_k = attn_wgmma_desc(k_wg, 16, 1024);
  const unsigned long long dv_k = attn_wgmma_desc(v_wg, 16, 1024);
  const unsigned long long dds_mn0 = attn_wgmma_desc(sds0, bwd90_bn * 128, 1024);
  unsigned long long dkq_mn[dq_passes];
#pragma unroll
  for (int c = 0; c < dq_passes; ++c) {
    const int col0 = bwd90_wide ? 0 : wg * (bwd90_dqk / 2) + 64 * c;
    dkq_mn[c] = attn_wgmma_desc(sk + (col0 >> 6) * bwd90_bn * 128 + (col0 & 63) * 2,
                                bwd90_bn * 128, 1024);
  }
#if BWD90_SPLIT_D
  /* The 64-column blocks of dO and Q this warpgroup's dV and dK take
   * (byte offset of its first block in a stage). */
  const unsigned dv_blk = wg * (bwd90_dv_cols / 64) * bwd90_bm * 128;
  const unsigned dk_blk = wg * (bwd90_dk_cols / 64) * bwd90_bm * 128;
#endif
  const int jl_row = wg * bwd90_key_wg + ww * 16 + g; /* this lane's first key row in the tile */
  /* The first of this warpgroup's queries in S^T and dP^T (split-D: its
   * half of the tile). */
  const int q_off = bwd90_split_d ? wg * bwd90_qn : 0;
  /* Split-D: A descriptors of Pd^T and dRaw^T as K-major operands (dV's
   * and dK's GEMMs, k: the tile's 64 queries). */
  const unsigned long long dpt_k0 = attn_wgmma_desc(spt0, 16, 1024);
  const unsigned long long dds_k0 = attn_wgmma_desc(sds0, 16, 1024);
  /* dRaw at one element by the derived chain rule, with the bias
   * gradients. */
  auto draw_at = [&](float ds, float acc, int b, int h, int i, int j) {
#if defined(ATTN_BWD_BIAS)
    return attn_bwd_draw_bias(ds, acc, b, h, i, j, p, red);
#else
    return attn_bwd_draw(ds, acc, b, h, i, j, p);
#endif
  };
  /* An item's end: its bias gradients' partial sums flushed, its dK
   * (times the folded scale) and dV rows stored, the accumulators reset
   * for the next item. */
  auto finish_item = [&]() {
    int kt = 0, hb = 0;
    if constexpr (bwd90_items)
      asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(kt), "=r"(hb) : "r"(item_word)
                   : "memory");
    const int h = bwd90_items ? hb & 0xffff : cta_h, b = bwd90_items ? hb >> 16 : cta_b;
    const int hk = bwd90_items ? h / (p.H / p.Hk) : cta_hk;
    const int j0 = bwd90_items ? kt * bwd90_bn : cta_j0;
#if defined(ATTN_BWD_BIAS)
    bwd80_flush_red(red, b, h, lane, det, p); /* one atomic per warp */
#endif

    /* Store dK (times the folded scale) and dV: key rows jl_row (+ 8). With
     * GQA, f32 atomics into the [B, Hk, Skv, D] accumulators, or in
     * deterministic mode plain stores into per-head [B, H, Skv, D] ones. */
    const bool shared_kv = p.H != p.Hk;
    /* (16-byte stores where every output row starts on 16 bytes) */
    auto rows16 = [](const attn_tensor_arg &t) {
      return (((unsigned long long)t.ptr & 15) | (t.stride[0] & 7) | (t.stride[1] & 7) |
              (t.stride[2] & 7)) == 0;
    };
#if defined(ATTN_BWD_FP8)
    /* dV's factor (o's scale, dO's descale), before GQA's heads are
     * summed: it may differ by head. */
    const float dv_factor = attn_bwd_factors(b, h, p).dv;
#pragma unroll
    for (int r = 0; r < bwd90_dv_cols / 2; ++r)
      dv[r] *= dv_factor;
#endif
    BWD80_AMAX_ZERO(mdk);
    BWD80_AMAX_ZERO(mdv);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int j = j0 + jl_row + 8 * r;
      if (j >= p.Skv)
        continue;
      /* The accumulators' rows of (b, h) or (b, hk), through their strides. */
      const attn_tensor_arg &tka = p.t[bwd80_tdka >= 0 ? bwd80_tdka : 0];
      const attn_tensor_arg &tva = p.t[bwd80_tdva >= 0 ? bwd80_tdva : 0];
      const int acc_h = det ? h : hk;
      /* Split-D: this warpgroup's half of the row. */
      if constexpr (bwd80_tdk >= 0)
        bwd90_store_row<bwd90_dk_cols, bwd90_dqk, ATTN_D_QK, 1>(
            dk, r, sc, p.t[bwd80_tdk >= 0 ? bwd80_tdk : 0], bwd80_slice_rows<float>(tka, b, acc_h), j,
            bwd90_split_d ? wg * bwd90_dk_cols : 0, b, hk, j, t4, shared_kv, det, mdk, p,
            rows16(p.t[bwd80_tdk >= 0 ? bwd80_tdk : 0]));
      if constexpr (bwd80_tdv >= 0)
        bwd90_store_row<bwd90_dv_cols, bwd90_dv, ATTN_D_V, 2>(
            dv, r, 1.f, p.t[bwd80_tdv >= 0 ? bwd80_tdv : 0], bwd80_slice_rows<float>(tva, b, acc_h), j,
            bwd90_split_d ? wg * bwd90_dv_cols : 0, b, hk, j, t4, shared_kv, det, mdv, p,
            rows16(p.t[bwd80_tdv >= 0 ? bwd80_tdv : 0]));
    }
#if defined(ATTN_BWD_FP8)
    bwd80_amax_commit_kv(mdk, mdv, p);
#endif
    zero_acc();
  };
#if defined(ATTN_DROPOUT)
  const attn_dropout_t drop_t = attn_dropout_params(p);
#endif
  int n_tiles_done = 0;
#if defined(ATTN_BWD_STAMPS)
  /* (BWD90_ST_*: the item being worked on's stamps so far) */
  unsigned st_begin = 0, st_first = 0, st_tiles = 0;
  /* The words of the item that ended (key tile kt of b << 16 | h), once
   * every consumer's stores of its rows are ordered before (a named
   * barrier since). Where dK has rows per query head of 16 or 32 bits. */
  auto stamp = [&](int kt, int hb, unsigned end, unsigned sw, unsigned issued, unsigned stored,
                   unsigned next) {
    if constexpr (bwd80_tdk >= 0 && bwd80_dk_kind <= 2) {
      const attn_tensor_arg &to = p.t[bwd80_tdk >= 0 ? bwd80_tdk : 0];
      if (tid == 0 && p.H == p.Hk) {
        const long long off = (hb >> 16) * to.stride[0] + (hb & 0xffff) * to.stride[1] +
                              (long long)kt * bwd90_bn * to.stride[2];
        unsigned *w = (unsigned *)((unsigned char *)to.ptr + off * (bwd80_dk_kind == 2 ? 4 : 2));
        unsigned smid;
        asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
        const unsigned v[BWD90_NST] = {smid << 16 | blockIdx.x, st_tiles, st_begin, st_first, end,
                                       sw, st_met, issued, stored, next};
#pragma unroll
        for (int k = 0; k < BWD90_NST; ++k)
          w[k] = v[k];
      }
    }
  };
#endif
  for (int it = 0;; ++it) {
    const int st = it % bwd90_stages;
#if defined(ATTN_BWD_STAMPS)
    const unsigned st_top = bwd90_now();
    if (st_tiles == 1 && st_first == 0)
      st_first = st_top;
#endif
    /* The stage's tile has landed (its copies and the producer's slot
     * and row stores). */
    attn_mbar_wait(bar_full(st), (it / bwd90_stages) & 1);
    int m, cls, t = 0, hb = 0;
    if constexpr (bwd90_items)
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(m), "=r"(cls), "=r"(t), "=r"(hb)
                   : "r"(tile_slot(st))
                   : "memory");
    else
      asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n"
                   : "=r"(m), "=r"(cls)
                   : "r"(tile_slot(st))
                   : "memory");
    /* One item a CTA (split-D, packed sequences): its slots carry no
     * b << 16 | h, the dQ warp still needs it with each tile (it was left
     * 0 once, so every head's dQ went to head 0's rows: session 19). */
    if constexpr (!bwd90_items)
      hb = cta_b << 16 | cta_h;
    if (bwd90_items && t != cur) { /* a new item, or the end (m = -1, t = -1) */
      /* The next item's K and V copies are issued before this item's dK and
       * dV stores, so that the loads fly while the stores drain (each is 64
       * KB a CTA at D 128, and the tensor cores wait for both). finish_item
       * reads the item word, so the new item begins after it. */
#if defined(ATTN_BWD_STAMPS)
      const bool had = cur >= 0;
      const unsigned s_sw = bwd90_now();
      int pkt = 0, phb = 0; /* the ending item's, from this warp's item word */
      if (had)
        asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(pkt), "=r"(phb) : "r"(item_word)
                     : "memory");
#endif
      if (m >= 0)
        load_kv((cls >> 2) * bwd90_bn, hb);
#if defined(ATTN_BWD_STAMPS)
      const unsigned s_ld = bwd90_now();
#endif
      if (cur >= 0)
        finish_item();
#if defined(ATTN_BWD_STAMPS)
      const unsigned s_fin = bwd90_now();
      if (m == -1) {
        if (had) {
          attn_named_sync(1);
          stamp(pkt, phb, st_top, s_sw, s_ld, s_fin, s_fin);
        }
        break;
      }
#endif
      if (m == -1)
        break;
      begin_item(t, cls >> 2, hb);
      if (m >= 0)
        kv_landed();
#if defined(ATTN_BWD_STAMPS)
      const unsigned s_kv = bwd90_now();
      if (had) {
        if (m < 0) /* (no kv_landed, whose barrier orders the stores) */
          attn_named_sync(1);
        stamp(pkt, phb, st_top, s_sw, s_ld, s_fin, s_kv);
      }
      st_begin = s_kv, st_first = 0, st_tiles = 0;
#endif
    }
    if (bwd90_items ? m == -1 : m < 0) /* the end (items: or a CTA without any) */
      break;
    const int h = hb & 0xffff, b = hb >> 16;
    const int j0 = bwd90_items ? (cls >> 2) * bwd90_bn : cta_j0;
    /* The FP8 backward's dP factor for (b, h) and P's scale (1 elsewhere).
     * The FP8 mode's P is already P times its scale (bwd90_p_fold): its dP
     * factor is over the scale, and P's operand takes 1. */
    const float p_scale_bh = attn_p_scale_value(b, h, p);
    const float dp_factor = bwd80_factors_at(b, h, p).dp / (bwd90_p_fold ? p_scale_bh : 1.f) *
                            bwd80_ds_fold_factor(p); /* (and dS's scale: bwd80_ds_fold) */
    const float p_scale = bwd90_p_fold ? 1.f : p_scale_bh;
    /* A score that is q.k times a factor c per (b, h) (attn_score_scaled_qk)
     * is not scored per element: P = exp2(acc c log2 e - lse log2 e), one
     * fma, where masked elements (acc at `sc_fill`, +inf if c < 0) give 0;
     * c = 0 is taken as the smallest normal number (every P then exp(-lse)
     * to f32 precision, as at 0). */
    float sc_log2 = 1.4426950408889634f, sc_fill = neg_inf;
    if constexpr (attn_score_scaled_qk) {
      float sc = attn_score_factor(attn_bh_load(b, h, p), b, h, p);
      sc = sc == 0.f ? 1.17549435e-38f : sc;
      sc_log2 = sc * 1.4426950408889634f;
      sc_fill = sc < 0.f ? -neg_inf : neg_inf;
    }
    if constexpr (bwd90_items)
      cls &= 3;
    if (bwd90_items && m == -2) { /* an item without tiles: the stage is free at once */
      attn_mbar_arrive(bar_empty(st));
      continue;
    }
#if defined(ATTN_BWD_STAMPS)
    ++st_tiles;
#endif
    /* This warp is done with the stage: every wgmma that reads it has
     * completed (called after a wait for all of them). */
    auto release_stage = [&]() { attn_mbar_arrive(bar_empty(st)); };
    /* This tile's dRaw^T and Pd^T buffers (by the parity of the tiles
     * worked on: slots without a tile do not count). */
    const unsigned buf = (unsigned)((bwd90_items ? n_tiles_done++ : it) & 1);
    const unsigned sds = sds0 + buf * bwd90_ds_bytes, spt = spt0 + buf * bwd90_pt_bytes;
    const unsigned long long dds_mn = attn_wgmma_desc_add(dds_mn0, buf * bwd90_ds_bytes);
    [[maybe_unused]] const unsigned long long dds_k =
        attn_wgmma_desc_add(dds_k0, buf * bwd90_ds_bytes);
    [[maybe_unused]] const unsigned long long dpt_k =
        attn_wgmma_desc_add(dpt_k0, buf * bwd90_pt_bytes);

    const unsigned sq = sq0 + st * bwd90_q_bytes, sdo = sdo0 + st * bwd90_do_bytes;
    const float2 *s_row = s_stats + st * bwd90_bm; /* {delta, lse log2 e} per query */
    /* The FP8 mode keeps a stage's {delta, lse log2 e} per pair of queries
     * as {lse, lse', delta, delta'} (the producer's stores), so that the
     * two queries of a thread's column pair (il = qo + 8c + 2t4 + x, x = 0,
     * 1) take one 8-byte load for both lse and one for both delta: 16
     * loads a tile instead of 32. stat_pair(c, 0) is {lse, lse'}, (c, 1)
     * {delta, delta'}. */
    auto stat_pair = [&](int qo, int c, int which) -> float2 {
      return s_row[2 * ((qo >> 1) + 4 * c + t4) + which];
    };
    const int i0 = m * bwd90_bm;
    const int i_last = min(i0 + bwd90_bm, p.Sq) - 1;
    const bool full = cls == 2 && i0 + bwd90_bm <= p.Sq && j0 + bwd90_bn <= p.Skv;

    /* The K-major descriptors of this stage's Q and dO (16-element k
     * steps: 32 bytes inside a 64-column block, then the next block) and
     * the MN-major ones (16 queries: 16 rows of 128 bytes). */
    const unsigned long long dq_k = attn_wgmma_desc(sq, 16, 1024);
    const unsigned long long ddo_k = attn_wgmma_desc(sdo, 16, 1024);
    const unsigned long long dq_mn = attn_wgmma_desc(sq, bwd90_bm * 128, 1024);
    const unsigned long long ddo_mn = attn_wgmma_desc(sdo, bwd90_bm * 128, 1024);

    /* The A fragments of the 16-query steps (Pd^T's and dRaw^T's). */
    unsigned pa[bwd90_qn / 16][4], ra[bwd90_qn / 16][4];
    /* (BM-80) A fragments free for reuse: fenced after the wait under
     * which the GEMM reading them completed. */
    [[maybe_unused]] auto free_frags = [](unsigned (&f)[bwd90_qn / 16][4]) {
#pragma unroll
      for (int kk = 0; kk < bwd90_qn / 16; ++kk)
#pragma unroll
        for (int x = 0; x < 4; ++x)
          attn_fence_reg(f[kk][x]);
    };
    /* (BM-80) dK's GEMM's fragments, and with late_dkv dV's too, once the
     * wait before dQ^T (or, deterministic, the tile's last) completed them. */
    [[maybe_unused]] auto free_dkv_frags = [&]() {
      free_frags(ra);
      if constexpr (bwd90_late_dkv)
        free_frags(pa);
    };
    /* FP8: P^T's and dS^T's FP8 A fragments per 32-query step, and the
     * descriptors of this stage's Q^T and dO^T (K-major, 64-byte swizzle:
     * 8-row groups 512 bytes apart, layout 2). */
    [[maybe_unused]] unsigned pa8[bwd90_qn / 32][4], ra8[bwd90_qn / 32][4];
    [[maybe_unused]] const unsigned long long dqt_k =
        (attn_wgmma_desc(sqdt0 + st * bwd90_qdt_bytes, 16, 512) & ~(3ull << 62)) | (2ull << 62);
    [[maybe_unused]] const unsigned long long ddot_k = attn_wgmma_desc_add(dqt_k, bwd90_dqk * 64);
    /* Per 64 queries of the tile (wide mode: two halves, queries qh..;
     * a half wholly past Sq is skipped: its dRaw^T columns are read only
     * for dQ rows that are never stored). */
#pragma unroll
    for (int hq = 0; hq < bwd90_halves; ++hq) {
      const int qh = hq * 64, qo = q_off + qh;
      if (hq > 0 && i0 + qh >= p.Sq)
        break;
      /* S^T = K Q^T and dP^T = V dO^T: this warpgroup's 64 keys x 64
       * queries each (split-D: x its 32 queries, rows qo.. of Q and dO),
       * two wgmma groups so P^T can be computed while dP^T is still in the
       * tensor cores. */
      float s[bwd90_qn / 2], dp[bwd90_qn / 2];
      /* acc = (keys' rows at dkv) (rows qo.. at drow)^T over D columns (16
       * per k step: 32 bytes inside a 64-column block, then the next
       * block), one commit group. */
      /* (FP8: k steps of 32 bytes, the operands' FP8 kinds A_E4, B_E4.) */
      auto issue_rows = [&](auto d_t, auto a_e4, auto b_e4, float (&acc)[bwd90_qn / 2],
                            unsigned long long dkv, unsigned long long drow) {
        constexpr int D = decltype(d_t)::value;
#pragma unroll
        for (int kk = 0; kk < D / bwd90_kstep; ++kk) {
          const unsigned long long da =
              attn_wgmma_desc_add(dkv, (kk >> 2) * bwd90_bn * 128 + (kk & 3) * 32);
          const unsigned long long db =
              attn_wgmma_desc_add(drow, qo * 128 + (kk >> 2) * bwd90_bm * 128 + (kk & 3) * 32);
          if constexpr (bwd90_f8)
            attn_wgmma_ss64_fp8<decltype(a_e4)::value, decltype(b_e4)::value>(acc, da, db, kk > 0);
          else
            bwd90_ss<bwd90_qn, false>(acc, da, db, kk > 0);
        }
        attn_wgmma_commit();
      };
      /* A dRaw that reads the raw score needs S^T and dP^T together; else P^T
       * overwrites S^T and dP^T is waited for only after it. Not in split-D
       * mode: with its m64n32 GEMMs, reading S^T while dP^T is in flight
       * made ptxas serialize every wgmma of the kernel (its warning C7514). */
      constexpr bool split = !attn_bwd_draw_reads_acc && !bwd90_split_d && !bwd90_late_dkv;
      /* BM-80: dP^T is issued after dV's GEMM (once it has completed, or
       * with Pd^T in shared memory at once), not beside S^T, so that its 40
       * accumulators are held neither while P^T is computed nor beside
       * Pd^T's fragments (either way ptxas serialized every wgmma for want
       * of registers, C7512). */
      constexpr bool dp_late = bwd90_bm80 && split; /* (split is never late_dkv's) */
      auto issue_dp = [&]() {
        issue_rows(bwd90_int<bwd90_dv>(), bwd90_bool<bwd90_kv_e4>(), bwd90_bool<bwd90_do_e4>(), dp,
                   dv_k, ddo_k);
      };
      attn_wgmma_fence();
      issue_rows(bwd90_int<bwd90_dqk>(), bwd90_bool<bwd90_kv_e4>(), bwd90_bool<bwd90_q_e4>(), s,
                 dk_k, dq_k);
      if constexpr (!dp_late)
        issue_dp();
      /* Whether dRaw may run only where P is not 0 (it touches memory, or
       * its factor of the raw score could be infinite where P is 0). */
      constexpr bool guard = attn_bwd_draw_guarded || attn_bwd_draw_reads_acc;
      if constexpr (split && !dp_late)
        attn_wgmma_wait<1>();
      else
        attn_wgmma_wait<0>();
#pragma unroll
      for (int r = 0; r < bwd90_qn / 2; ++r) {
        attn_fence_reg(s[r]);
        if constexpr (bwd90_late_dkv) /* (dP^T's too: the pass reads both) */
          attn_fence_reg(dp[r]);
      }

      /* Per element (fragment nb, element e: key row jl_row + 8 (e >> 1),
       * query nb * 8 + 2 t4 + (e & 1)): P^T = exp2(score log2 e - lse log2 e)
       * (0 for a masked element, whose score is -inf, and in a fully masked
       * row, whose second term is +inf), dS^T = P^T o (dP^T * factor -
       * delta), dRaw^T by the chain rule. Walked by 16-query block mq and
       * x: query i = i0 + 16 mq + 2 t4 + x and key j = j0 + jl_row (bit 3 of
       * both clear: jl_row is 64 wg + 16 ww + g), element q query i + 8
       * (q >> 1), key j + 8 (q & 1): fragment 2 mq + (q >> 1), element
       * 2 (q & 1) + x.
       * Dropout: block mq holds this lane's half of the 16-element group at
       * (i0 + 16 mq + 2 t4, j0 + (jl_row & ~1)); element r's byte is r & 3
       * of dw[r >> 3][(r >> 2) & 1] (hooks.cuh, attn_dropout_pair with the
       * key's parity fixed), drawn while dP^T is still in the tensor cores. */
#if defined(ATTN_DROPOUT)
      /* As bits (bit r: element r is kept): one register across the dV
       * GEMM instead of eight. */
      unsigned dkeep = 0u;
      {
        unsigned dw[bwd90_qn / 16][2];
        bwd80_dropout_words(b, h, i0 + qo, j0 + jl_row, t4, p, dw);
#pragma unroll
        for (int r = 0; r < bwd90_qn / 2; ++r)
          dkeep |= (unsigned)attn_dropout_keeps(dw[r >> 3][(r >> 2) & 1], r & 3, drop_t) << r;
      }
      /* Element r of Pd^T or dP^T times its dropout factor. */
      auto dropped = [&](float x, int r) { return (dkeep >> r) & 1u ? x * drop_t.kept : 0.f; };
#else
      auto dropped = [](float x, int) { return x; };
#endif
      /* Pass 1 (split) or the only pass: s becomes P^T (split) or Pd^T,
       * dp dRaw^T (not split). MASKED: some element of the tile may be
       * masked (tested from keep bits, bwd90_keep_bits). */
      /* (late_dkv) One of the stats (0 delta, 1 lse log2 e) of this thread's
       * queries: the 8 lanes of a t4 share their 20 queries (k = 2 c + x:
       * query qo + 8 c + 2 t4 + x), lane (g, t4) loads those of k = g + 8 m
       * (m < 3) into st3, and query k's comes from lane 4 (k % 8) + t4. */
      [[maybe_unused]] auto load_st3 = [&](float (&st3)[3], int which) {
#pragma unroll
        for (int m = 0; m < 3; ++m) {
          const int k = g + 8 * m;
          const float2 row = s_row[qo + 8 * (k >> 1) + 2 * t4 + (k & 1)];
          st3[m] = k < bwd90_qn / 4 ? (which ? row.y : row.x) : 0.f;
        }
      };
      [[maybe_unused]] auto st_of = [&](const float (&st3)[3], int k) {
        /* (the source lane's bits 0-1 are this lane's: shfl's segment mask
         * 3, so the index is the constant 4 (k % 8), no register a k) */
        float v;
        asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x31f, 0xffffffff;\n"
                     : "=f"(v)
                     : "f"(st3[k >> 3]), "r"((k & 7) * 4));
        return v;
      };
      auto pass1 = [&](auto masked_t) {
        constexpr bool masked = decltype(masked_t)::value;
        bwd90_keep_t keep = ~(bwd90_keep_t)0;
        if constexpr (masked)
          keep = cls != 2 ? bwd90_keep_bits<true>(b, h, i0 + qo, j0 + jl_row, t4, p)
                          : bwd90_keep_bits<false>(b, h, i0 + qo, j0 + jl_row, t4, p);
        /* Query il's stats, il = qo + 8c + 2t4 + x (FP8 mode: column block
         * c's pairs, stat_pair, loaded first). Loaded before the GEMM wait
         * instead (ncu put ~6% of the stall samples at the FFMAs waiting
         * for them) they measured 0-4% slower (H100, session 30). */
#if defined(ATTN_BWD_FP8_MMA)
        float2 lse2[bwd90_qn / 8], delta2[bwd90_qn / 8];
#pragma unroll
        for (int c = 0; c < bwd90_qn / 8; ++c) {
          lse2[c] = stat_pair(qo, c, 0);
          if constexpr (!split)
            delta2[c] = stat_pair(qo, c, 1);
        }
#else
        [[maybe_unused]] float lse3[3], delta3[3];
        if constexpr (bwd90_late_dkv) {
          load_st3(lse3, 1);
          load_st3(delta3, 0);
        }
#endif
#pragma unroll
        for (int mq = 0; mq < bwd90_qn / 16; ++mq) {
#pragma unroll
          for (int x = 0; x < 2; ++x) {
#pragma unroll
            for (int q = 0; q < 4; ++q) {
              const int r = (2 * mq + (q >> 1)) * 4 + 2 * (q & 1) + x;
              const int c = 2 * mq + (q >> 1); /* the column block: il = qo + 8c + 2t4 + x */
              const int il = qo + 8 * c + 2 * t4 + x;
              const int i = i0 + il, j = j0 + jl_row + 8 * (q & 1);
              const float acc = s[r];
              /* The score, or where it is q.k times a factor (sc_log2
               * above) q.k itself, masked elements at sc_fill. */
              float xs = attn_score_scaled_qk ? acc : attn_score(acc, b, h, i, j, p);
              if constexpr (masked)
                xs = (keep >> r) & 1u ? xs : sc_fill;
#if defined(ATTN_BWD_FP8_MMA)
              const float lse = x ? lse2[c].y : lse2[c].x;
              [[maybe_unused]] const float delta = split ? 0.f : x ? delta2[c].y : delta2[c].x;
#else
              const float2 row = bwd90_late_dkv
                                     ? make_float2(st_of(delta3, 2 * c + x), st_of(lse3, 2 * c + x))
                                     : s_row[il];
              const float lse = row.y;
              [[maybe_unused]] const float delta = row.x;
#endif
              const float pe =
                  attn_exp2(attn_score_scaled_qk ? fmaf(xs, sc_log2, -lse) : xs * log2e - lse);
              if constexpr (split) {
                s[r] = pe;
              } else {
                const float dpe = dropped(dp[r], r), pd = dropped(pe, r);
                const float ds = bwd80_ds<bwd90_f8>(pe, dpe, delta, dp_factor, mds, p);
                dp[r] = pe != 0.f ? draw_at(ds, acc, b, h, i, j) : 0.f;
                s[r] = pd;
              }
            }
          }
        }
      };
      if (full)
        pass1(bwd90_bool<false>());
      else
        pass1(bwd90_bool<true>());
      if constexpr (!split)
        flush_amax_ds();

      /* The A fragments of the 16-query steps: accumulator fragments 2kk
       * and 2kk + 1, packed to 16 bits (fwd_sm90's P). */
      /* Element r of Pd^T. */
      auto pd_at = [&](int r) {
        if constexpr (!split)
          return bwd80_pd(s[r], p_scale);
        else
          return bwd80_pd(dropped(s[r], r), p_scale);
      };
      /* (late_dkv: after dRaw^T) */
      auto pack_pa = [&]() {
#pragma unroll
        for (int kk = 0; kk < bwd90_qn / 16; ++kk)
#pragma unroll
          for (int x = 0; x < 4; ++x)
            pa[kk][x] =
                attn_pack2<bwd90_in_bf16>(pd_at(8 * kk + 2 * x), pd_at(8 * kk + 2 * x + 1));
      };
      if constexpr (bwd90_f8) {
        /* 32-query step kb: a0/a1 rows g/g+8 of fragments 4kb, 4kb + 1, a2/a3
         * of 4kb + 2, 4kb + 3 (transpose8's query order; fwd_sm90's P). */
#pragma unroll
        for (int kb = 0; kb < bwd90_qn / 32; ++kb)
#pragma unroll
          for (int h2 = 0; h2 < 2; ++h2)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int e = 16 * kb + 8 * h2 + 2 * r;
              /* (attn_fp8x4's satfinite conversion is P's rounding itself:
               * bwd80_pd's would round first to the same value; P is
               * already scaled, bwd90_p_fold) */
              auto pd8 = [&](int x) { return split ? dropped(s[x], x) : s[x]; };
              pa8[kb][2 * h2 + r] = attn_fp8x4<bwd90_p_e4>(pd8(e), pd8(e + 1), pd8(e + 4), pd8(e + 5));
            }
      } else if constexpr (!bwd90_late_dkv) {
        pack_pa();
      }
      /* Pair x of 16-query step kk (fragment 2kk + (x >> 1), key row + 8 (x
       * & 1)) to its place in a [key][query] tile. */
      auto store_pair = [&](unsigned tile, int kk, int x, unsigned v) {
        const unsigned at = bwd90_at<bwd90_bn>(tile, jl_row + 8 * (x & 1),
                                               qo + (2 * kk + (x >> 1)) * 8 + 2 * t4);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(v) : "memory");
      };
      /* (The FP8 mode's branches are #if, not if constexpr: the kernel is
       * no template, so a discarded branch would still be checked, and its
       * m64n128 products do not take other head dims' accumulators.) */
#if defined(ATTN_BWD_FP8_MMA)
      bwd90_rs8<bwd90_p_e4, bwd90_do_e4>(dv, pa8, ddot_k); /* dV += Pd^T dO, in FP8 */
#else
      if constexpr (!bwd90_split_d) {
        /* dV += Pd^T dO (k: the 64 queries; dO read transposed through an
         * MN-major descriptor), in the tensor cores while dRaw^T is
         * computed. */
#if ATTN_BWD_BM80 == 2 /* (#if: at other head dims dv is no m64n128 accumulator) */
        {
          /* Pd^T into this warpgroup's half of the tile's dS buffer (its 64
           * keys' 10240 bytes, which dS overwrites only after the wait that
           * this GEMM completes under) as five [64 keys][16 queries] blocks
           * of 32-byte rows, 32-byte swizzle (chunk c of row r at c ^ (r >> 2
           * & 1): a matrix's 8 rows on 32 banks), by stmatrix; then dV's
           * GEMM reads it there (A K-major), and Pd^T's registers are free. */
          const int xm = lane >> 3, prow = ww * 16 + 8 * (xm & 1) + (lane & 7);
          const unsigned pt_half = sds + (unsigned)(wg * (bwd90_ds_bytes / 2));
          const unsigned pt_at =
              pt_half + (unsigned)(prow * 32 + (((xm >> 1) ^ ((prow >> 2) & 1)) << 4));
#pragma unroll
          for (int kk = 0; kk < bwd90_qn / 16; ++kk)
            attn_stsm_x4(pt_at + kk * 64 * 32, pa[kk]);
          attn_fence_proxy_async();
          attn_bar_sync<128>(2 + wg); /* the warpgroup's four warps' rows */
          const unsigned long long dpt32 =
              (attn_wgmma_desc(pt_half, 16, 256) & ~(3ull << 62)) | (3ull << 62);
          attn_wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < bwd90_qn / 16; ++kk)
            attn_wgmma_ss128_kmn<bwd90_in_bf16>(dv, attn_wgmma_desc_add(dpt32, kk * 64 * 32),
                                                attn_wgmma_desc_add(ddo_mn, kk * 16 * 128), 1);
          attn_wgmma_commit();
        }
#else
        if constexpr (!bwd90_late_dkv)
          bwd90_rs_tile<bwd90_dv_cols>(dv, pa, attn_wgmma_desc_add(ddo_mn, qh * 128));
#endif
      } else {
        /* This warpgroup's half of Pd^T, for dV's GEMM after the barrier. */
#pragma unroll
        for (int kk = 0; kk < bwd90_qn / 16; ++kk)
#pragma unroll
          for (int x = 0; x < 4; ++x)
            store_pair(spt, kk, x, pa[kk][x]);
      }
#endif

      if constexpr (dp_late) {
        /* dV's GEMM done first (unless it reads Pd^T from shared memory):
         * Pd^T's 20 fragment registers and dP^T's 40 accumulators together
         * were what serialized the wgmma. */
        if constexpr (!bwd90_dv_smem) {
          attn_wgmma_wait<0>();
          free_frags(pa);
        }
        attn_wgmma_fence();
        issue_dp();
      }
      if constexpr (split) {
        /* Pass 2: dP^T (the older group; dp_late: the newer, after dV's)
         * has landed; dp becomes dRaw^T. */
        if constexpr (dp_late)
          attn_wgmma_wait<0>();
        else
          attn_wgmma_wait<1>();
#pragma unroll
        for (int r = 0; r < bwd90_qn / 2; ++r)
          attn_fence_reg(dp[r]);
#if defined(ATTN_BWD_FP8_MMA)
        float2 delta2[bwd90_qn / 8];
#pragma unroll
        for (int c = 0; c < bwd90_qn / 8; ++c)
          delta2[c] = stat_pair(qo, c, 1);
#endif
#pragma unroll
        for (int r = 0; r < bwd90_qn / 2; ++r) {
          /* Fragment r >> 2, element r & 3 (as in pass 1): column block c. */
          const int c = 2 * (r >> 3) + ((r >> 2) & 1);
          const int il = qo + 8 * c + 2 * t4 + (r & 1);
#if defined(ATTN_BWD_FP8_MMA)
          const float delta = r & 1 ? delta2[c].y : delta2[c].x;
#else
          const float delta = s_row[il].x;
#endif
          const int i = i0 + il, j = j0 + jl_row + 8 * ((r >> 1) & 1);
          const float pe = s[r];
          const float ds = bwd80_ds<bwd90_f8>(pe, dropped(dp[r], r), delta, dp_factor, mds, p);
          dp[r] = !guard || pe != 0.f ? draw_at(ds, 0.f, b, h, i, j) : 0.f;
        }
        flush_amax_ds();
      }

      /* dRaw^T's A fragments, and dRaw^T to shared memory, [key][query],
       * for dQ (split-D: each warpgroup its queries' half, for dK too). */
#if defined(ATTN_BWD_FP8_MMA)
      {
        /* dS^T's FP8 fragments (packing rounds dS's values to its FP8
         * type), and dS to shared memory [query][key] for dQ, 4 bytes a
         * store. Byte j of ra8[kb][2 h2 + rr] is query 32kb + 16h2 +
         * 8(j >> 1) + 2t4 + (j & 1) of key row jl_row + 8rr; lanes g and
         * g ^ 1 trade halves (one shuffle a pair of words), so that each
         * holds, for two of the queries (even lanes the even ones), keys
         * g, g + 1, g + 8, g + 9 of its 16 (g even, as they lie in a row:
         * transpose8 orders K^T's keys alike, bwd90_row_at), stored as
         * one word in the 128-byte swizzle's chunk: rows 2t4 + odd (+ 8),
         * 32 banks, no conflict. (Byte stores took 32 stores and about
         * 100 instructions a thread a tile.) */
        const bool odd = g & 1;
        const unsigned sel_keep = odd ? 0x7531u : 0x6420u, sel_send = odd ? 0x6420u : 0x7531u;
        /* Row q's word takes keep's byte 0 (2) and then got's, odd lanes got's first. */
        const unsigned sel_q = odd ? 0x2604u : 0x6240u, sel_q8 = odd ? 0x3715u : 0x7351u;
        const unsigned ds_row0 = sds + (unsigned)((2 * t4 + odd) * 128 +
                                                  ((((jl_row >> 4) ^ (2 * t4 + odd)) & 7) << 4) +
                                                  4 * ((g >> 1) & 3));
#pragma unroll
        for (int kb = 0; kb < bwd90_qn / 32; ++kb)
#pragma unroll
          for (int h2 = 0; h2 < 2; ++h2) {
            const int e = 16 * kb + 8 * h2;
            const unsigned w0 = attn_fp8x4<bwd90_ds_e4>(dp[e], dp[e + 1], dp[e + 4], dp[e + 5]);
            const unsigned w1 =
                attn_fp8x4<bwd90_ds_e4>(dp[e + 2], dp[e + 3], dp[e + 6], dp[e + 7]);
            ra8[kb][2 * h2] = w0;
            ra8[kb][2 * h2 + 1] = w1;
            const unsigned keep = __byte_perm(w0, w1, sel_keep);
            const unsigned got = __shfl_xor_sync(0xffffffffu, __byte_perm(w0, w1, sel_send), 4);
            const unsigned at = ds_row0 + (unsigned)((32 * kb + 16 * h2) * 128);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(__byte_perm(keep, got, sel_q))
                         : "memory");
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at + 8 * 128),
                         "r"(__byte_perm(keep, got, sel_q8))
                         : "memory");
          }
        bwd90_rs8<bwd90_ds_e4, bwd90_q_e4>(dk, ra8, dqt_k); /* dK += dS^T Q, in FP8 */
      }
#else
#pragma unroll
      for (int kk = 0; kk < bwd90_qn / 16; ++kk) {
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          ra[kk][x] = attn_pack2<bwd90_in_bf16>(dp[8 * kk + 2 * x], dp[8 * kk + 2 * x + 1]);
          if constexpr (!bwd90_bm80)
            store_pair(sds, kk, x, ra[kk][x]);
        }
        if constexpr (bwd90_bm80) {
          /* dRaw [query][key] (dQ^T's K-major B), by stmatrix.trans: the
           * step's four 8 x 8 fragments (keys + 8 (x & 1), queries + 8 (x
           * >> 1)), lane 8 x + c giving query row c's 8 keys' 16 bytes,
           * one 128-byte swizzle chunk (8 rows, 8 chunks: no conflict). */
          const int xm = lane >> 3;
          const int q = qo + (2 * kk + (xm >> 1)) * 8 + (lane & 7);
          attn_stsm_x4_trans(
              bwd90_at<bwd90_bm>(sds, q, wg * bwd90_key_wg + ww * 16 + 8 * (xm & 1)), ra[kk]);
        }
      }

      if constexpr (!bwd90_split_d) {
        if constexpr (bwd90_late_dkv) { /* dV += Pd^T dO now (its fragments packed here) */
          pack_pa();
          bwd90_rs_tile<bwd90_dv_cols>(dv, pa, attn_wgmma_desc_add(ddo_mn, qh * 128));
        }
        /* dK += dRaw^T Q (Q read transposed likewise). */
        bwd90_rs_tile<bwd90_dk_cols>(dk, ra, attn_wgmma_desc_add(dq_mn, qh * 128));
      }
#endif

    }

    if (!det) {
      /* dQ += dRaw K (M: the 64 queries). A = dRaw from dRaw^T [key]
       * [query], B = K [key][d]: both MN-major. */
      if constexpr (bwd90_bm80) {
        /* dK's GEMM first, so that dRaw^T's fragments are free before dQ^T's
         * 40 accumulators are taken. */
        attn_wgmma_wait<0>();
        free_dkv_frags();
      }
      attn_fence_proxy_async(); /* the st.shared above, for wgmma */
      attn_named_sync(1); /* both warpgroups' dRaw^T (and Pd^T) */
      /* Warpgroup w: dQ's columns D/2 w.. (half of them) over all the
       * CTA's keys, so each element of the tile is added to the
       * accumulator once; at D 256 in two passes of 64 columns. */
      float dq[dq_passes][dq_regs];
      /* Wide mode: this warpgroup's queries, dRaw^T's column block wg. */
      constexpr unsigned dq_a_blk = bwd90_wide ? bwd90_bn * 128 : 0;
      const unsigned dq_a_off = wg * dq_a_blk;
      auto issue_dq = [&](int c) {
        attn_wgmma_fence();
#if defined(ATTN_BWD_FP8_MMA)
        /* A = dS [query][key] (K-major, 128-byte rows), B = this
         * warpgroup's 64 rows of K^T [d][key]: 32 keys a step. */
        const unsigned long long dds8 = attn_wgmma_desc(sds, 16, 1024);
        const unsigned long long dkt8 = attn_wgmma_desc(skt + wg * dq_cols * 128, 16, 1024);
#pragma unroll
        for (int kk = 0; kk < bwd90_bn / 32; ++kk)
          attn_wgmma_ss64_fp8<bwd90_ds_e4, bwd90_kv_e4>(
              dq[c], attn_wgmma_desc_add(dds8, kk * 32), attn_wgmma_desc_add(dkt8, kk * 32),
              kk > 0);
#else
#if BWD90_BM80
        /* dQ^T = K^T dS^T: A = this warpgroup's 64 columns of K read
         * MN-major (rows of D by 16 keys a step), B = dRaw [query][key]
         * K-major (16 keys: 32 bytes in a 64-key block, then the next). */
        (void)dq_a_off;
#pragma unroll
        for (int kk = 0; kk < bwd90_bn / 16; ++kk)
          attn_wgmma_ss80_mnk<bwd90_in_bf16>(
              dq[c], attn_wgmma_desc_add(dkq_mn[c], kk * 16 * 128),
              attn_wgmma_desc_add(dds_k, (kk >> 2) * bwd90_bm * 128 + (kk & 3) * 32), kk > 0);
#else
#pragma unroll
        for (int kk = 0; kk < bwd90_bn / 16; ++kk)
          bwd90_ss<dq_cols, true>(dq[c], attn_wgmma_desc_add(dds_mn, dq_a_off + kk * 16 * 128),
                                  attn_wgmma_desc_add(dkq_mn[c], kk * 16 * 128), kk > 0);
#endif
#endif
        attn_wgmma_commit();
      };
      auto done_dq = [&](int c) {
#pragma unroll
        for (int r = 0; r < dq_regs; ++r)
          attn_fence_reg(dq[c][r]);
      };
      issue_dq(0);
#if BWD90_SPLIT_D
      /* dV += Pd^T dO and dK += dRaw^T Q over the tile's 64 queries (A:
       * both halves, K-major, from shared memory; B: this warpgroup's
       * column blocks, MN-major), then dQ's second pass; once dV and dK
       * have read this warpgroup's blocks of dO and Q, the first pass
       * goes there while the second runs, then the second. */
      static_assert(bwd90_dv_cols == 128 && bwd90_dk_cols == 128, "m64n128 steps");
#pragma unroll
      for (int kk = 0; kk < bwd90_bm / 16; ++kk)
        attn_wgmma_ss128_kmn<bwd90_in_bf16>(dv, attn_wgmma_desc_add(dpt_k, kk * 32),
                                            attn_wgmma_desc_add(ddo_mn, dv_blk + kk * 16 * 128),
                                            1);
#pragma unroll
      for (int kk = 0; kk < bwd90_bm / 16; ++kk)
        attn_wgmma_ss128_kmn<bwd90_in_bf16>(dk, attn_wgmma_desc_add(dds_k, kk * 32),
                                            attn_wgmma_desc_add(dq_mn, dk_blk + kk * 16 * 128),
                                            1);
      attn_wgmma_commit();
      issue_dq(1);
      attn_wgmma_wait<1>(); /* dQ's first pass, dV, dK */
      done_dq(0);
      put_dq(dq[0], wg * (bwd90_dqk / 2), i0, hb, st, 0);
      attn_wgmma_wait<0>();
      done_dq(1);
      put_dq(dq[1], wg * (bwd90_dqk / 2) + 64, i0, hb, st, 1);
#else
      attn_wgmma_wait<0>();
      done_dq(0);
      release_stage(); /* before the tile's dQ goes out */
      put_dq(dq[0], wg * (bwd90_dqk / 2), i0, hb, st, 0);
#endif
    } else {
      attn_wgmma_wait<0>();
      if constexpr (bwd90_bm80) /* (dK's GEMM done: its fragments, as above) */
        free_dkv_frags();
      release_stage();
    }
#pragma unroll
    for (int r = 0; r < bwd90_dk_cols / 2; ++r)
      attn_fence_reg(dk[r]);
#pragma unroll
    for (int r = 0; r < bwd90_dv_cols / 2; ++r)
      attn_fence_reg(dv[r]);
    if constexpr (bwd90_f8) {
#pragma unroll
      for (int kb = 0; kb < bwd90_qn / 32; ++kb)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          attn_fence_reg(pa8[kb][x]);
          attn_fence_reg(ra8[kb][x]);
        }
    } else {
#pragma unroll
      for (int kk = 0; kk < bwd90_qn / 16; ++kk)
#pragma unroll
        for (int x = 0; x < 4; ++x) {
          if constexpr (!bwd90_bm80) { /* (BM-80: fenced once their GEMMs completed) */
            attn_fence_reg(pa[kk][x]);
            attn_fence_reg(ra[kk][x]);
          }
        }
    }
  }
  if (!bwd90_dq_in_stage && !det) {
    /* The dQ warp's last round: the end mark in the slot. */
    attn_mbar_wait(bar_dq_free, (dq_round++ & 1) ^ 1);
    if (tid == 0)
      asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(dq_slot), "r"(-1) : "memory");
    attn_mbar_arrive(bar_dq_full);
  }
  if constexpr (!bwd90_items)
    finish_item();
#if defined(ATTN_BWD_FP8)
  if constexpr (bwd80_namax_ds > 0) {
    if constexpr (bwd90_amax_ds_shared) {
      /* Every consumer warp's last tile is in the words; warp 0 commits
       * them (the other warps' mds are 0: nothing to commit). */
      attn_named_sync(1);
      if (warp == 0) {
#pragma unroll
        for (int k = 0; k < bwd80_namax_ds; ++k)
          asm volatile("ld.shared.u32 %0, [%1];\n"
                       : "=r"(mds[k])
                       : "r"(bars + bwd90_off_amax_ds + 4 * k)
                       : "memory");
      }
    }
    if constexpr (bwd80_ds_fold) /* maxima of |a dS| */
      bwd80_amax_unscale<bwd80_namax_ds>(mds, bwd80_ds_fold_factor(p));
    attn_bwd_amax_commit_ds(mds, p);
  }
#endif
}

#if defined(ATTN_BWD_FP8_MMA)
/* The FP8 tensor-core mode's transposes (plan step transpose8; grid
 * (ceil(Sq / 64) + ceil(Skv / 128), H, B), 256 threads). A CTA of the first
 * part takes 64 queries of (b, h): Q^T and dO^T into the workspace tensor
 * at ATTN_BWD_TQDT, [B, H, 256, Sq rounded up to 64], rows d of Q^T then d
 * of dO^T, the tile's 64 queries at columns 64m.., each 32 of them in the
 * accumulators' order (query 16h + 8c + 2t + x at column 16h + 4t + 2c +
 * x, bwd90_f8's comment); a CTA of the second, 128 keys of (b, hk) for hk
 * < Hk: K^T into ATTN_BWD_TKT, [B, Hk, 128, Skv rounded up to 128], each
 * 16 keys in the same order (bwd90_row_at). Rows past Sq or Skv are zeros
 * (FP8 bytes past them would be garbage, and 0 times a NaN byte is NaN). */
__device__ __forceinline__ void attn_bwd_sm90_transpose8(const attn_params &p) {
  __shared__ __align__(16) unsigned char t8[2][128][128 + 16]; /* [tensor][row][byte] */
  const int tid = threadIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int n_q = (p.Sq + 63) / 64;
  const bool keys = (int)blockIdx.x >= n_q;
  if (keys && h >= p.Hk)
    return;
  const int row0 = keys ? ((int)blockIdx.x - n_q) * 128 : blockIdx.x * 64;
  const int row_end = keys ? p.Skv : p.Sq;
  /* 128 rows of 128 bytes in (64 of Q and 64 of dO, or 128 of K), 16 bytes
   * a thread a round, every load issued before the first store (zeros
   * past the end). */
  {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int e = tid + 256 * k, r = e >> 3, c = e & 7; /* tile row r (of 128) */
      const int src = keys ? 0 : r >> 6, row = keys ? r : r & 63;
      const attn_tensor_arg &t = p.t[keys ? bwd80_tk : src == 0 ? bwd80_tq : bwd80_tdo];
      v[k] = make_uint4(0u, 0u, 0u, 0u);
      if (row0 + row < row_end)
        v[k] = *(const uint4 *)((const unsigned char *)t.ptr + b * t.stride[0] + h * t.stride[1] +
                                (long long)(row0 + row) * t.stride[2] + c * 16);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int e = tid + 256 * k, r = e >> 3, c = e & 7;
      *(uint4 *)&t8[keys ? 0 : r >> 6][keys ? r : r & 63][c * 16] = v[k];
    }
  }
  __syncthreads();
  /* Thread (warp w, lane l): output rows d0 = 4l .. 4l + 3 (columns d0.. of
   * the tile: a warp reads whole 128-byte rows, no bank conflict), 16
   * output bytes each, positions 16 grp .. 16 grp + 15, position kp from
   * tile row bwd90_row_at(kp); 4 x 4 byte blocks transposed by byte permutes. */
  const int lane = tid & 31, warp = tid >> 5, d0 = 4 * lane;
  auto gather = [&](unsigned char *out, long long out_stride, int src, int grp) {
    unsigned o[4][4]; /* [output row k][word u] */
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      unsigned w[4];
#pragma unroll
      for (int y = 0; y < 4; ++y)
        w[y] = *(const unsigned *)&t8[src][bwd90_row_at(16 * grp + 4 * u + y)][d0];
      const unsigned t0 = __byte_perm(w[0], w[1], 0x5140u), t1 = __byte_perm(w[0], w[1], 0x7362u);
      const unsigned t2 = __byte_perm(w[2], w[3], 0x5140u), t3 = __byte_perm(w[2], w[3], 0x7362u);
      o[0][u] = __byte_perm(t0, t2, 0x5410u);
      o[1][u] = __byte_perm(t0, t2, 0x7632u);
      o[2][u] = __byte_perm(t1, t3, 0x5410u);
      o[3][u] = __byte_perm(t1, t3, 0x7632u);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k)
      *(uint4 *)(out + (long long)k * out_stride + 16 * grp) =
          make_uint4(o[k][0], o[k][1], o[k][2], o[k][3]);
  };
  if (!keys) {
    /* Warp w: tile src = w >> 2 (Q, then dO at output rows 128..), positions
     * 16 (w & 3).. of the 64 queries. */
    const attn_tensor_arg &o = p.t[ATTN_BWD_TQDT];
    const int src = warp >> 2;
    gather((unsigned char *)o.ptr + b * o.stride[0] + h * o.stride[1] +
               (long long)(128 * src + d0) * o.stride[2] + row0,
           o.stride[2], src, warp & 3);
  } else {
    /* Warp w: K^T's positions 16 w.. of the tile's 128 keys. */
    const attn_tensor_arg &o = p.t[ATTN_BWD_TKT];
    gather((unsigned char *)o.ptr + b * o.stride[0] + h * o.stride[1] +
               (long long)d0 * o.stride[2] + row0,
           o.stride[2], 0, warp);
  }
}
#endif

#undef BWD90_SPLIT_D
#undef BWD90_BM80
