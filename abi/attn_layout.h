/*
 * attn_layout.h: the shared-memory layout of each kernel template, defined
 * once. The compiler reads it to size a launch's dynamic shared memory
 * (compiler/tmpl_sm80.c, tmpl_sm90.c, match_bwd.c) and the templates read
 * it to place their tiles (templates/fwd_sm80.cuh, fwd_sm90.cuh,
 * bwd_sm80.cuh, bwd_sm90.cuh), so the two cannot disagree; the emitted unit
 * still static_asserts the backward's total against the plan's.
 *
 * Plain C that is also C++ constexpr (the templates evaluate it at
 * compile time; NVRTC sees it as text pasted after attn_abi.h): every
 * function fills a struct of byte sizes and offsets from the tile shape.
 * Offsets are from the dynamic shared-memory base after it is rounded up
 * to 1024 bytes, the period of the 128-byte swizzle; `total` includes
 * those 1024 bytes of slack where a template rounds its base.
 */
#ifndef ATTN_LAYOUT_H
#define ATTN_LAYOUT_H

#ifdef __cplusplus
#define ATTN_LAYOUT_FN [[maybe_unused]] static constexpr
#else
#define ATTN_LAYOUT_FN static inline
#endif

/* Head dims. Every template takes a head dim d that is a multiple of 8 (rows
 * of whole 16-byte chunks: the cp.async and TMA unit) from 8 to 256, and
 * builds its tiles for attn_head_tile(d), d rounded up to whole 64-element
 * (128-byte) swizzle blocks: the columns past d are loaded as zeros (TMA's
 * out-of-bounds fill, cp.async's zero source size) and never stored, and
 * the Q K^T products stop at d's last 16-column step. Every layout below
 * takes tile dims. */
ATTN_LAYOUT_FN int attn_head_dim_ok(int d) { return d >= 8 && d <= 256 && d % 8 == 0; }
ATTN_LAYOUT_FN int attn_head_tile(int d) { return (d + 63) / 64 * 64; }
/* The backward's tiles come in fewer widths: 64, 128, and 256 for both
 * (bwd_sm90's split-D mode) once either head dim passes 128; d is the one
 * to tile, other the graph's other head dim. The f32 accumulators of dQ,
 * dK and dV have rows of these widths (their padding stays zero). */
ATTN_LAYOUT_FN int attn_bwd_head_tile(int d, int other) {
  return d > 128 || other > 128 ? 256 : d > 64 ? 128 : 64;
}

/* fwd_sm80: the Q tile (16-bit, the MMA type), then two stages of (K
 * tile, V tile) of k and v's element size (q_el, kv_el: 2, or 1 for FP8);
 * with FP8 k and v, one 16-bit (K, V) tile pair the current stage is
 * converted into, and with an FP8 q, the 8-bit Q tile it is converted
 * from. No barriers (cp.async groups), no rounding. */
typedef struct attn_fwd80_layout {
  int q_bytes, k_bytes, v_bytes, stage_bytes, conv_offset, conv_k_bytes, conv_bytes, q8_offset,
      total;
} attn_fwd80_layout;

ATTN_LAYOUT_FN attn_fwd80_layout attn_fwd80_layout_of(int bm, int bn, int dqk, int dv, int q_el,
                                                      int kv_el) {
  attn_fwd80_layout l = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  l.q_bytes = bm * dqk * 2;
  l.k_bytes = bn * dqk * kv_el;
  l.v_bytes = bn * dv * kv_el;
  l.stage_bytes = l.k_bytes + l.v_bytes;
  l.conv_offset = l.q_bytes + 2 * l.stage_bytes;
  l.conv_k_bytes = kv_el == 2 ? 0 : bn * dqk * 2;
  l.conv_bytes = kv_el == 2 ? 0 : bn * (dqk + dv) * 2;
  l.q8_offset = l.conv_offset + l.conv_bytes;
  l.total = l.q8_offset + (q_el == 2 ? 0 : bm * dqk);
  return l;
}

/* fwd_sm90: Q, then per stage a K and a V tile (each a multiple of 1024
 * bytes, stored as D/64 blocks of [rows][64] as the TMA boxes land), then
 * the mbarriers (q full, k full, v full, k empty, q empty, v empty: 2 + 4
 * per stage), then the producer's 8-byte slots (the work tile, then one
 * per stage). `fp8` says which tensors are FP8 (ATTN_FWD90_*):
 * - ATTN_FWD90_QKV8, FP8 q, k and v: Q and K are 8-bit tiles of blocks of
 *   [rows][128] (dqk then a multiple of 128: attn_head_tile8); each stage
 *   also holds V's 8-bit tile (dv8 columns) after the 16-bit V tile it is
 *   converted into, one more mbarrier per stage (v converted) and one more
 *   slot per stage (the converters' word).
 * - ATTN_FWD90_KV8, an FP8 KV cache under a 16-bit q: Q, K and V tiles of
 *   16 bits as without FP8; each stage also holds V's and then K's 8-bit
 *   tiles they are converted from, two more mbarriers per stage (v and k
 *   converted) and the converters' word.
 * - ATTN_FWD90_KV8E, the same with the 8-bit tiles refilled as soon as the
 *   converters have read them (the kv8_early variant): two more mbarriers
 *   per stage (k and v staging free) and the stage slots twice (by phase:
 *   the producer then writes a stage's next slot while the consumers may
 *   still read its last).
 * - ATTN_FWD90_QKV8T, FP8 q, k and v with FP8 P V (the fp8_vt8 variant):
 *   as ATTN_FWD90_QKV8, but the tile V is transposed into (V^T, dv rows of
 *   bn key bytes) takes 8 bits an element, not the 16 of the converted V
 *   it stands in for; at dv 256 that makes two stages of 128 keys fit. */
enum {
  ATTN_FWD90_16 = 0,
  ATTN_FWD90_QKV8 = 1,
  ATTN_FWD90_KV8 = 2,
  ATTN_FWD90_KV8E = 3,
  ATTN_FWD90_QKV8T = 4
};
typedef struct attn_fwd90_layout {
  int q_bytes, k_bytes, v_bytes, v8_bytes, k8_bytes, stage_bytes, bar_offset, nbars, slot_bytes,
      total;
} attn_fwd90_layout;

/* FP8 tiles' head dims: whole 128-column (128-byte) swizzle blocks. */
ATTN_LAYOUT_FN int attn_head_tile8(int d) { return (d + 127) / 128 * 128; }

ATTN_LAYOUT_FN attn_fwd90_layout attn_fwd90_layout_of(int bm, int bn, int stages, int dqk,
                                                      int dv, int fp8) {
  attn_fwd90_layout l = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const int el = fp8 == ATTN_FWD90_QKV8 || fp8 == ATTN_FWD90_QKV8T ? 1 : 2;
  l.q_bytes = bm * dqk * el;
  l.k_bytes = bn * dqk * el;
  l.v_bytes = bn * dv * (fp8 == ATTN_FWD90_QKV8T ? 1 : 2);
  l.v8_bytes = fp8 ? bn * attn_head_tile8(dv) : 0;
  const int kv8 = fp8 == ATTN_FWD90_KV8 || fp8 == ATTN_FWD90_KV8E;
  l.k8_bytes = kv8 ? bn * attn_head_tile8(dqk) : 0;
  l.stage_bytes = l.k_bytes + l.v_bytes + l.v8_bytes + l.k8_bytes;
  l.bar_offset = l.q_bytes + stages * l.stage_bytes;
  l.nbars = 2 + (fp8 == ATTN_FWD90_KV8E ? 8 : kv8 ? 6 : fp8 ? 5 : 4) * stages;
  l.slot_bytes = 8 * (1 + (fp8 == ATTN_FWD90_KV8E ? 3 : fp8 ? 2 : 1) * stages);
  l.total = l.bar_offset + 8 * l.nbars + l.slot_bytes + 1024;
  return l;
}

/* fwd_sm90's o_smem: each consumer warp stages its 16 rows of O in
 * `slots` slots of 64 columns (16-bit elements, [16 rows][128 bytes] in the
 * 128-byte swizzle a TMA box of 64 x 16 reads: 2048 bytes), a block of the
 * V tile at a time, and stores them by TMA; after the slots, on a
 * 1024-byte boundary. The total replaces the layout's: bm rows of slots. */
ATTN_LAYOUT_FN int attn_fwd90_ostage_offset(attn_fwd90_layout l) {
  return (l.bar_offset + 8 * l.nbars + l.slot_bytes + 1023) / 1024 * 1024;
}
ATTN_LAYOUT_FN int attn_fwd90_total_ostage(attn_fwd90_layout l, int bm, int slots) {
  return attn_fwd90_ostage_offset(l) + bm / 16 * slots * 2048 + 1024;
}

/* bwd_sm80 (64 keys per CTA, 64-query tiles): K, V (the CTA's keys), Q, dO
 * (the streamed query tile), dRaw^T (keys x queries, for dQ), then the
 * tile's lse and delta (f32). */
typedef struct attn_bwd80_layout {
  int k_bytes, v_bytes, q_bytes, do_bytes, ds_bytes, total;
} attn_bwd80_layout;

ATTN_LAYOUT_FN attn_bwd80_layout attn_bwd80_layout_of(int bn, int bm, int dqk, int dv) {
  attn_bwd80_layout l = {0, 0, 0, 0, 0, 0};
  l.k_bytes = bn * dqk * 2;
  l.v_bytes = bn * dv * 2;
  l.q_bytes = bm * dqk * 2;
  l.do_bytes = bm * dv * 2;
  l.ds_bytes = bn * bm * 2;
  l.total = l.k_bytes + l.v_bytes + l.q_bytes + l.do_bytes + l.ds_bytes + 2 * bm * 4;
  return l;
}

/* bwd_sm90: K, V (bn keys), `stages` stages of Q and of dO (bm queries),
 * two buffers of dRaw^T [keys][queries] and, split-D, of Pd^T, dQ's f32
 * buffer (bm x D_QK; none split-D, where the stage holds dQ), per stage
 * the query tile's {delta, lse log2 e} pairs, then mbarriers and slots
 * (128 bytes split-D, else 256). */
typedef struct attn_bwd90_layout {
  int k_bytes, v_bytes, q_bytes, do_bytes, ds_bytes, pt_bytes, dq_bytes;
  int off_v, off_q, off_do, off_ds, off_pt, off_dqs, off_stats, off_bars, bars_bytes, total;
  /* The FP8 tensor-core mode's K^T (per CTA) and Q^T with dO^T (per
   * stage); 0 elsewhere. */
  int kt_bytes, qdt_bytes, off_kt, off_qdt;
} attn_bwd90_layout;

ATTN_LAYOUT_FN attn_bwd90_layout attn_bwd90_layout_of(int bn, int bm, int stages, int dqk,
                                                      int dv, int split_d) {
  attn_bwd90_layout l = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  l.k_bytes = bn * dqk * 2;
  l.v_bytes = bn * dv * 2;
  l.q_bytes = bm * dqk * 2;
  l.do_bytes = bm * dv * 2;
  l.ds_bytes = bn * bm * 2;
  l.pt_bytes = split_d ? bn * bm * 2 : 0;
  l.dq_bytes = split_d ? 0 : bm * dqk * 4;
  l.off_v = l.k_bytes;
  l.off_q = l.off_v + l.v_bytes;
  l.off_do = l.off_q + stages * l.q_bytes;
  l.off_ds = l.off_do + stages * l.do_bytes;
  l.off_pt = l.off_ds + 2 * l.ds_bytes;
  l.off_dqs = l.off_pt + 2 * l.pt_bytes;
  l.off_stats = l.off_dqs + l.dq_bytes;
  l.off_bars = l.off_stats + stages * bm * 8;
  l.bars_bytes = split_d ? 128 : 256;
  l.total = l.off_bars + l.bars_bytes + 1024;
  return l;
}

/* bwd_sm90's FP8 tensor-core mode (not split-D): K, V (bn rows of dqk /
 * dv bytes, 128-byte swizzle), K^T (dqk rows of bn bytes), then per stage
 * Q and dO (bm rows of bytes) and Q^T with dO^T (dqk + dv rows of bm
 * bytes, 64-byte swizzle at bm 64), two dS buffers [bm][bn] of bytes,
 * dQ's f32 buffer, the stats and the mbarriers as above. Every part a
 * multiple of 1024 bytes. */
ATTN_LAYOUT_FN attn_bwd90_layout attn_bwd90_layout_fp8(int bn, int bm, int stages, int dqk,
                                                       int dv) {
  attn_bwd90_layout l = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  l.k_bytes = bn * dqk;
  l.v_bytes = bn * dv;
  l.kt_bytes = dqk * bn;
  l.q_bytes = bm * dqk;
  l.do_bytes = bm * dv;
  l.qdt_bytes = (dqk + dv) * bm;
  l.ds_bytes = bm * bn;
  l.dq_bytes = bm * dqk * 4;
  l.off_v = l.k_bytes;
  l.off_kt = l.off_v + l.v_bytes;
  l.off_q = l.off_kt + l.kt_bytes;
  l.off_do = l.off_q + stages * l.q_bytes;
  l.off_qdt = l.off_do + stages * l.do_bytes;
  l.off_ds = l.off_qdt + stages * l.qdt_bytes;
  l.off_pt = l.off_ds + 2 * l.ds_bytes;
  l.off_dqs = l.off_pt;
  l.off_stats = l.off_dqs + l.dq_bytes;
  l.off_bars = l.off_stats + stages * bm * 8;
  l.bars_bytes = 256;
  l.total = l.off_bars + l.bars_bytes + 1024;
  return l;
}

/* decode (split-KV): the Q block of 16 packed rows (16-bit), then
 * `stages` stages of (K tile, V tile) of kv_bytes-wide elements, then,
 * for 8-bit K/V, the one 16-bit (K tile, V tile) each stage is converted
 * into; no rounding. After the key loop the same memory holds each warp's
 * partial (row maxima, row sums, O rows in f32) for the CTA's combine, so
 * total covers the larger of the two. */
typedef struct attn_dec_layout {
  int q_bytes, k_bytes, v_bytes, stage_bytes, conv_offset, conv_k_bytes, conv_bytes,
      combine_bytes, total;
} attn_dec_layout;

ATTN_LAYOUT_FN attn_dec_layout attn_dec_layout_of(int bn, int stages, int dqk, int dv,
                                                  int kv_bytes) {
  attn_dec_layout l = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  const int warps = bn / 16, rows = 16;
  l.q_bytes = rows * dqk * 2;
  l.k_bytes = bn * dqk * kv_bytes;
  l.v_bytes = bn * dv * kv_bytes;
  l.stage_bytes = l.k_bytes + l.v_bytes;
  l.conv_offset = l.q_bytes + stages * l.stage_bytes;
  l.conv_k_bytes = kv_bytes == 2 ? 0 : bn * dqk * 2;
  l.conv_bytes = kv_bytes == 2 ? 0 : bn * (dqk + dv) * 2;
  l.combine_bytes = warps * rows * (dv + 2) * 4;
  l.total = l.conv_offset + l.conv_bytes;
  if (l.combine_bytes > l.total) l.total = l.combine_bytes;
  return l;
}

#undef ATTN_LAYOUT_FN
#endif /* ATTN_LAYOUT_H */
