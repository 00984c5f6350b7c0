/*
 * tmpl_decode.c: the configuration of the split-KV decode template,
 * templates/decode.cuh.
 *
 * The kernel reads each K/V tile once per 16 packed query rows and does
 * little arithmetic on it, so what matters is the bytes in flight per SM:
 * 64-key tiles (four warps of 16 keys) in as many cp.async stages as keep
 * about 96 KB a CTA in flight, two CTAs an SM where they fit (at head dim
 * 256 one CTA of two 64 KB stages). Shared memory, 16-bit elements:
 *
 *     smem = 2 * (16 * d_qk + stages * 64 * (d_qk + d_v))   bytes
 *
 * as abi/attn_layout.h defines it for the template too (the combine at
 * the end reuses it). An 8-bit K/V cache (e4m3, e5m2) streams half the
 * bytes: stages of 8-bit tiles, each converted once into one 16-bit K/V
 * tile the MMAs read (q's type; the conversion is exact).
 *
 * A paged cache keeps about 64 KB a CTA in flight instead: its refill
 * (a table lookup and 64-bit addresses a row) lengthens each warp's
 * instruction stream, and at two CTAs an SM (two warps a scheduler) that
 * stream, not DRAM, was the limit (bench/RESULTS.md, session 20: ncu at
 * 73% of DRAM peak against 90% dense). Three CTAs an SM of two stages:
 * MHA paged decode 0.75-0.88x -> 0.90-0.96x dense; the dense kernel
 * itself runs best at three stages (4% slower at two).
 */
#include "attn_abi.h"
#include "attn_layout.h"
#include "attnc.h"

/* Shared memory an SM shares among its CTAs (Ampere's A100 and Hopper:
 * 164 / 228 KB; a paged decode's wave counts Hopper's). */
#define DECODE_SM_SMEM (228 * 1024)
#define DECODE_BN 64

int tmpl_decode_config(int d_qk, int d_v, int in_bytes, int kv_bytes, bool dropout, bool paged,
                       int ntensors, DecodeConfig *out) {
  if (!out || in_bytes != 2 || (kv_bytes != 2 && kv_bytes != 1) || dropout) return -1;
  if (!attn_head_dim_ok(d_qk) || !attn_head_dim_ok(d_v)) return -1;
  /* 8-bit rows must be whole 16-byte chunks (cp.async's unit). */
  if (kv_bytes == 1 && (d_qk % 16 != 0 || d_v % 16 != 0)) return -1;
  d_qk = attn_head_tile(d_qk); /* the tiles' dims from here on */
  d_v = attn_head_tile(d_v);
  /* 8-bit rows of 64 bytes have too few 16-byte chunks for the swizzle. */
  if (kv_bytes == 1 && (d_qk < 128 || d_v < 128)) return -1;
  if (ntensors + 2 > ATTN_MAX_TENSORS) return -1;
  const int stage = DECODE_BN * (d_qk + d_v) * kv_bytes;
  /* Paged: about 64 KB a CTA with an 8-bit cache's 16-bit tile counted
   * in, so that three CTAs an SM run at D 128 as with 16 bits (e4m3 at D
   * 128: two stages, 68 KB, where four stages and two CTAs took 1.44x the
   * dense time and 1.46x FlashInfer's, H100 session 30). */
  const int conv = kv_bytes == 1 ? DECODE_BN * (d_qk + d_v) * 2 : 0;
  int stages = paged ? (64 * 1024 - conv) / stage : 96 * 1024 / stage;
  if (stages > 4) stages = 4;
  if (stages < 2) stages = 2;
  const attn_dec_layout l = attn_dec_layout_of(DECODE_BN, stages, d_qk, d_v, kv_bytes);
  *out = (DecodeConfig){.on = true,
                        .bn = DECODE_BN,
                        .stages = stages,
                        .threads = DECODE_BN / 16 * 32,
                        .smem_bytes = l.total,
                        .wave = paged ? DECODE_SM_SMEM / (l.total + 1024) : 1,
                        .partial_o = ntensors,
                        .partial_lse = ntensors + 1};
  if (out->wave < 1) out->wave = 1;
  return 0;
}
