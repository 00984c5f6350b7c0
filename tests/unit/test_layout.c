/*
 * test_layout.c: the templates' shared-memory layouts (abi/attn_layout.h),
 * which the compiler sizes launches by and the templates place tiles by.
 * The totals are checked against the formulas the compiler used before the
 * layouts were shared (and that docs/templates.md quotes), written out
 * independently here, and the offsets against the order the templates
 * document: each region starts where the one before it ends, and every
 * TMA-written tile stays on a 1024-byte boundary.
 */
#include <criterion/criterion.h>

#include "attn_layout.h"
#include "attnc.h"

Test(layout, fwd80_totals) {
  const int bm[] = {64, 128}, bn[] = {32, 64, 128}, d[] = {64, 128, 256};
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int k = 0; k < 3; k++)
        for (int v = 0; v < 3; v++) {
          attn_fwd80_layout l = attn_fwd80_layout_of(bm[a], bn[b], d[k], d[v], 2, 2);
          cr_assert_eq(l.total, 2 * (bm[a] * d[k] + 2 * bn[b] * (d[k] + d[v])));
          cr_assert_eq(l.stage_bytes, l.k_bytes + l.v_bytes);
          cr_assert_eq(l.conv_bytes, 0);
        }
}

/* FP8 q and k/v: 8-bit stages, one 16-bit (K, V) pair converted into, and
 * the 8-bit Q tile, each region after the one before. */
Test(layout, fwd80_fp8_regions) {
  const int d[] = {64, 128, 256};
  for (int k = 0; k < 3; k++)
    for (int v = 0; v < 3; v++)
      for (int q_el = 1; q_el <= 2; q_el++) {
        attn_fwd80_layout l = attn_fwd80_layout_of(128, 64, d[k], d[v], q_el, 1);
        cr_assert_eq(l.q_bytes, 2 * 128 * d[k]);
        cr_assert_eq(l.stage_bytes, 64 * (d[k] + d[v]));
        cr_assert_eq(l.conv_offset, l.q_bytes + 2 * l.stage_bytes);
        cr_assert_eq(l.conv_k_bytes, 2 * 64 * d[k]);
        cr_assert_eq(l.conv_bytes, 2 * 64 * (d[k] + d[v]));
        cr_assert_eq(l.q8_offset, l.conv_offset + l.conv_bytes);
        cr_assert_eq(l.total, l.q8_offset + (q_el == 1 ? 128 * d[k] : 0));
        cr_assert_eq(l.conv_offset % 16, 0);
      }
}

Test(layout, fwd90_totals_and_alignment) {
  const int bn[] = {64, 80, 128}, d[] = {64, 128, 256};
  for (int b = 0; b < 3; b++)
    for (int st = 2; st <= 4; st++)
      for (int k = 0; k < 3; k++)
        for (int v = 0; v < 3; v++) {
          attn_fwd90_layout l = attn_fwd90_layout_of(128, bn[b], st, d[k], d[v], 0);
          cr_assert_eq(l.total,
                       2 * (128 * d[k] + st * bn[b] * (d[k] + d[v])) + 8 * (3 + 5 * st) + 1024);
          cr_assert_eq(l.q_bytes % 1024, 0);
          cr_assert_eq(l.k_bytes % 1024, 0, "BN %d D %d", bn[b], d[k]);
          cr_assert_eq(l.v_bytes % 1024, 0);
          cr_assert_eq(l.bar_offset % 8, 0);
        }
}

Test(layout, bwd80_total) {
  for (int k = 64; k <= 128; k += 64)
    for (int v = 64; v <= 128; v += 64)
      cr_assert_eq(attn_bwd80_layout_of(64, 64, k, v).total,
                   64 * (k + v) * 2 * 2 + 64 * 64 * 2 + 2 * 64 * 4);
}

Test(layout, bwd90_totals_and_order) {
  /* 128 keys: three stages of 64 queries at D 128, two of 128 (wide) at
   * D 64; split-D: 64 keys, two stages, no dQ buffer. */
  struct {
    int bn, bm, stages, d, split, total;
  } c[] = {
      {128, 64, 3, 128, 0, 640 * 256 + 256 * 128 + 35584},
      {128, 128, 2, 64, 0, 199936},
      {64, 64, 2, 256, 1, 384 * 512 + 34944},
  };
  for (int n = 0; n < 3; n++) {
    attn_bwd90_layout l =
        attn_bwd90_layout_of(c[n].bn, c[n].bm, c[n].stages, c[n].d, c[n].d, c[n].split);
    cr_assert_eq(l.total, c[n].total, "case %d: %d", n, l.total);
    cr_assert_eq(l.total, l.off_bars + l.bars_bytes + 1024);
    cr_assert_eq(l.off_q, l.off_v + l.v_bytes);
    cr_assert_eq(l.off_do, l.off_q + c[n].stages * l.q_bytes);
    cr_assert_eq(l.off_ds, l.off_do + c[n].stages * l.do_bytes);
    cr_assert_eq(l.off_pt, l.off_ds + 2 * l.ds_bytes);
    cr_assert_eq(l.dq_bytes == 0, c[n].split != 0);
    const int tma[] = {l.off_v, l.off_q, l.off_do, l.off_ds, l.off_pt, l.off_dqs};
    for (int t = 0; t < 6; t++) cr_assert_eq(tma[t] % 1024, 0, "case %d region %d", n, t);
    cr_assert(l.total <= 227 * 1024);
  }
}

/* Head dims: multiples of 8 up to 256, tiled in whole 64-column blocks
 * (the backward: 64, 128, or 256 for both). */
Test(layout, head_dim_tiles) {
  for (int d = 0; d <= 300; d++) {
    const bool ok = d >= 8 && d <= 256 && d % 8 == 0;
    cr_assert_eq(attn_head_dim_ok(d) != 0, ok, "d %d", d);
    if (!ok) continue;
    const int t = attn_head_tile(d);
    cr_assert(t % 64 == 0 && t >= d && t - d < 64, "d %d tile %d", d, t);
    for (int o = 8; o <= 256; o += 8) {
      const int b = attn_bwd_head_tile(d, o);
      cr_assert(b >= d && (b == 64 || b == 128 || b == 256), "d %d other %d tile %d", d, o, b);
      cr_assert_eq(b == 256, d > 128 || o > 128, "d %d other %d", d, o);
      cr_assert_eq(b == 256, attn_bwd_head_tile(o, d) == 256, "split-D for both or neither");
    }
  }
}

/* Every head dim the tiles take has a forward configuration on both
 * templates and a decode one; the others are refused (-1); 8-bit K/V needs
 * rows of whole 16-byte chunks and more than 64 columns. */
Test(layout, head_dim_configs) {
  for (int k = 0; k <= 264; k += 4)
    for (int v = 0; v <= 264; v += 4) {
      const bool ok = attn_head_dim_ok(k) && attn_head_dim_ok(v);
      Sm90Config h;
      Sm80Config p;
      DecodeConfig dc;
      cr_assert_eq(tmpl_sm90_config(k, v, 2, 2, false, true, false, 0, &h) == 0, ok, "sm90 %d %d", k, v);
      cr_assert_eq(tmpl_sm80_config(k, v, 2, 2, 90, &p) == 0, ok, "sm80 %d %d", k, v);
      cr_assert_eq(tmpl_decode_config(k, v, 2, 2, false, false, 4, &dc) == 0, ok, "decode %d %d",
                   k, v);
      DecodeConfig pc; /* paged: about 64 KB of stages a CTA, so three CTAs an SM at D 128 */
      cr_assert_eq(tmpl_decode_config(k, v, 2, 2, false, true, 4, &pc) == 0, ok, "paged %d %d",
                   k, v);
      if (ok) cr_assert_leq(pc.stages, dc.stages);
      if (k == 128 && v == 128) cr_assert(pc.stages == 2 && 228 * 1024 / (pc.smem_bytes + 1024) == 3 && dc.stages == 3);
      /* the splits' wave: the resident CTAs over a paged cache, one over a dense one */
      if (k == 128 && v == 128) cr_assert(pc.wave == 3 && dc.wave == 1);
      if (ok) {
        const int fit = 228 * 1024 / (pc.smem_bytes + 1024);
        cr_assert_eq(pc.wave, fit > 0 ? fit : 1, "paged %d %d", k, v);
      }
      if (ok) {
        cr_assert_leq(h.smem_bytes, 227 * 1024);
        cr_assert_eq(h.smem_bytes,
                     attn_fwd90_layout_of(h.bm, h.bn, h.stages, attn_head_tile(k),
                                          attn_head_tile(v), 0).total);
        /* (masked: three consumer warpgroups at head tiles up to 64) */
        const bool three = attn_head_tile(k) <= 64 && attn_head_tile(v) <= 64;
        cr_assert_eq(h.bm, three ? 192 : 128, "sm90 %d %d", k, v);
      }
      const bool ok8 = ok && k % 16 == 0 && v % 16 == 0 && k > 64 && v > 64;
      cr_assert_eq(tmpl_decode_config(k, v, 2, 1, false, false, 4, &dc) == 0, ok8,
                   "decode8 %d %d", k, v);
      /* an 8-bit paged cache: three CTAs an SM at D 128 too (its 16-bit tile counted in) */
      cr_assert_eq(tmpl_decode_config(k, v, 2, 1, false, true, 4, &pc) == 0, ok8,
                   "paged8 %d %d", k, v);
      if (ok8) cr_assert_leq(pc.stages, dc.stages);
      if (k == 128 && v == 128) cr_assert(pc.stages == 2 && 228 * 1024 / (pc.smem_bytes + 1024) == 3 && dc.stages == 4);
      if (k == 128 && v == 128) cr_assert(pc.wave == 3 && dc.wave == 1);
    }
}

/* FP8 q, k, v on fwd_sm90: 8-bit Q/K/V tiles; where P is rounded to FP8,
 * P V in FP8 (V^T rows of 128 keys, or 64 at head dims above 128) unless
 * the variant f16_pv (5) keeps it in f16. */
Test(layout, fwd90_fp8_configs) {
  Sm90Config h;
  cr_assert_eq(tmpl_sm90_config(128, 128, 1, 1, true, true, false, 0, &h), 0);
  cr_assert(h.fp8_pv && h.bn == 128);
  cr_assert_eq(h.smem_bytes, attn_fwd90_layout_of(128, 128, h.stages, 128, 128, 1).total);
  cr_assert_eq(tmpl_sm90_config(256, 256, 1, 1, true, true, false, 0, &h), 0);
  cr_assert(h.fp8_pv && h.bn == 64);
  cr_assert_leq(h.smem_bytes, 227 * 1024);
  cr_assert_eq(tmpl_sm90_config(256, 256, 1, 1, true, true, false, 5, &h), 0);
  cr_assert(!h.fp8_pv && h.bn == 80);
  cr_assert_eq(tmpl_sm90_config(64, 64, 1, 1, false, true, false, 0, &h), 0);
  cr_assert(!h.fp8_pv);
  cr_assert_eq(tmpl_sm90_config(80, 80, 1, 1, false, true, false, 0, &h), 0);
  cr_assert_eq(tmpl_sm90_config(72, 72, 1, 1, false, true, false, 0, &h), -1, "8-bit rows of whole 16 bytes");
  for (int d = 16; d <= 256; d += 16)
    cr_assert_eq(tmpl_sm90_config(d, d, 1, 1, true, true, false, 0, &h), 0, "D %d", d);
}

/* An FP8 KV cache under a 16-bit q on fwd_sm90 (in_bytes 2, kv_bytes 1):
 * 16-bit Q, K and V tiles plus K's and V's 8-bit tiles a stage, two more
 * barriers a stage than 16-bit tiles; every head dim that is a multiple of
 * 16 up to 192 fits, D 256 does not (the graph then runs fwd_sm80),
 * 8-bit rows stay whole 16-byte chunks, and two consumer warpgroups but
 * in the wg3 variant. */
Test(layout, fwd90_kv8_configs) {
  Sm90Config h;
  const attn_fwd90_layout plain = attn_fwd90_layout_of(128, 128, 2, 128, 128, ATTN_FWD90_16);
  const attn_fwd90_layout kv8 = attn_fwd90_layout_of(128, 128, 2, 128, 128, ATTN_FWD90_KV8);
  cr_assert_eq(kv8.q_bytes, plain.q_bytes);
  cr_assert_eq(kv8.k8_bytes, 128 * 128);
  cr_assert_eq(kv8.stage_bytes, plain.stage_bytes + 2 * 128 * 128);
  cr_assert_eq(kv8.nbars, plain.nbars + 2 * 2);
  cr_assert_eq(kv8.k8_bytes % 1024, 0, "TMA's 128-byte swizzle: 1024-byte tiles");
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 1, false, true, false, 0, &h), 0);
  cr_assert(h.bm == 128 && h.bn == 128 && h.stages == 2 && !h.fp8_pv);
  cr_assert_eq(h.smem_bytes, attn_fwd90_layout_of(128, 128, 2, 128, 128, ATTN_FWD90_KV8).total);
  cr_assert_leq(h.smem_bytes, 227 * 1024);
  for (int d = 16; d <= 192; d += 16)
    cr_assert_eq(tmpl_sm90_config(d, d, 2, 1, false, true, false, 0, &h), 0, "D %d", d);
  cr_assert_eq(tmpl_sm90_config(256, 256, 2, 1, false, true, false, 0, &h), -1, "D 256 does not fit");
  cr_assert_eq(tmpl_sm90_config(72, 72, 2, 1, false, true, false, 0, &h), -1, "8-bit rows of whole 16 bytes");
  cr_assert_eq(tmpl_sm90_config(128, 128, 1, 2, false, true, false, 0, &h), -1, "FP8 q over 16-bit k and v");
  cr_assert_eq(tmpl_sm90_config(64, 64, 2, 1, false, false, false, 0, &h), 0);
  cr_assert(h.bm == 192 && h.threads == 512, "by default wg3 with a dense FP8 cache, unmasked");
  cr_assert_eq(h.smem_bytes, attn_fwd90_layout_of(192, h.bn, h.stages, 64, 64, ATTN_FWD90_KV8).total);
  cr_assert_eq(tmpl_sm90_config(64, 64, 2, 1, false, false, true, 0, &h), 0);
  cr_assert(h.bm == 128 && h.threads == 384,
            "no wg3 with a paged FP8 cache by default (its converters' addresses spill)");
  cr_assert_eq(h.smem_bytes, attn_fwd90_layout_of(128, h.bn, h.stages, 64, 64, ATTN_FWD90_KV8).total);
  cr_assert_eq(tmpl_sm90_config(64, 64, 2, 1, false, true, true, 6, &h), 0);
  cr_assert(h.bm == 192 && h.threads == 512, "the wg3 variant takes it, masked and paged too");
  cr_assert_eq(h.smem_bytes, attn_fwd90_layout_of(192, h.bn, h.stages, 64, 64, ATTN_FWD90_KV8).total);
  cr_assert_leq(h.smem_bytes, 227 * 1024);
}

/* The kv8_early variant (7): an FP8 cache's layout with two more mbarriers
 * a stage (its 8-bit K and V read) and the stage slots twice (by phase);
 * graphs without an FP8 cache under a 16-bit q are as auto makes them. */
Test(layout, fwd90_kv8_early_configs) {
  Sm90Config h;
  const attn_fwd90_layout kv8 = attn_fwd90_layout_of(128, 128, 2, 128, 128, ATTN_FWD90_KV8);
  const attn_fwd90_layout e = attn_fwd90_layout_of(128, 128, 2, 128, 128, ATTN_FWD90_KV8E);
  cr_assert_eq(e.stage_bytes, kv8.stage_bytes);
  cr_assert_eq(e.bar_offset, kv8.bar_offset);
  cr_assert_eq(e.nbars, kv8.nbars + 2 * 2);
  cr_assert_eq(e.slot_bytes, kv8.slot_bytes + 8 * 2);
  cr_assert_eq(tmpl_sm90_variant_index("kv8_early"), 7);
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 1, false, true, false, 7, &h), 0);
  cr_assert(h.kv8_early && h.bm == 128 && h.bn == 128 && h.stages == 2);
  cr_assert_eq(h.smem_bytes, e.total);
  cr_assert_leq(h.smem_bytes, 227 * 1024);
  for (int d = 16; d <= 192; d += 16)
    cr_assert_eq(tmpl_sm90_config(d, d, 2, 1, false, true, false, 7, &h), 0, "D %d", d);
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, true, false, 7, &h), 0);
  cr_assert(!h.kv8_early, "a 16-bit cache");
  cr_assert_eq(tmpl_sm90_config(128, 128, 1, 1, true, true, false, 7, &h), 0);
  cr_assert(!h.kv8_early, "FP8 q, k and v");
}

/* The wg3 variant (6): three consumer warpgroups (BM 192, 512 threads)
 * for graphs whose head tiles are at most 64, masked or not, FP8 too (the
 * default takes masked ones of 16-bit q, k and v only, auto36 none:
 * fwd90_wg3_default); everything else keeps two. Names map to numbers for the attnc command and the GPU tests
 * (ATTN_SM90_VARIANT). */
Test(layout, fwd90_wg3_configs) {
  Sm90Config h;
  cr_assert_eq(tmpl_sm90_variant_index("wg3"), 6);
  cr_assert_eq(tmpl_sm90_variant_index("auto"), 0);
  cr_assert_eq(tmpl_sm90_variant_index("nonesuch"), -1);
  cr_assert_eq(tmpl_sm90_variant_index(NULL), -1);
  for (int d = 8; d <= 64; d += 8) {
    cr_assert_eq(tmpl_sm90_config(d, d, 2, 2, false, true, false, 6, &h), 0, "D %d", d);
    cr_assert(h.bm == 192 && h.threads == 512 && h.persistent, "D %d", d);
    cr_assert_eq(h.smem_bytes, attn_fwd90_layout_of(192, h.bn, h.stages, 64, 64, 0).total);
    if (d % 16) continue; /* (FP8 rows: whole 16-byte chunks) */
    cr_assert_eq(tmpl_sm90_config(d, d, 1, 1, true, true, false, 6, &h), 0);
    cr_assert(h.bm == 192, "D %d masked FP8", d);
    cr_assert_eq(tmpl_sm90_config(d, d, 1, 1, true, true, false, 0, &h), 0);
    cr_assert(h.bm == 128 && h.threads == 384, "D %d masked FP8, by default", d);
  }
  cr_assert_eq(tmpl_sm90_config(64, 128, 2, 2, false, true, false, 6, &h), 0);
  cr_assert(h.bm == 128 && h.threads == 384, "a head tile of 128 keeps two");
  cr_assert_eq(tmpl_sm90_config(64, 64, 1, 1, true, true, false, 6, &h), 0);
  cr_assert(h.bm == 192 && h.threads == 512 && h.fp8_pv, "FP8 at D 64 too");
  cr_assert_eq(h.smem_bytes, attn_fwd90_layout_of(192, h.bn, h.stages, 128, 64, 1).total);
  cr_assert_eq(tmpl_sm90_config(128, 128, 1, 1, true, true, false, 6, &h), 0);
  cr_assert(h.bm == 192 && h.threads == 512 && h.bn == 64 && h.fp8_pv, "FP8 P V at D 128: BN 64");
  cr_assert_leq(h.smem_bytes, 227 * 1024);
  cr_assert_eq(tmpl_sm90_config(128, 128, 1, 1, false, true, false, 6, &h), 0);
  cr_assert(h.bm == 128 && h.threads == 384, "FP8 with P in 16 bits at D 128 keeps two");
  cr_assert_eq(tmpl_sm90_config(256, 256, 1, 1, true, true, false, 6, &h), 0);
  cr_assert(h.bm == 128, "D 256 keeps two");
}

/* The default (auto) takes three warpgroups at head tiles up to 64 in
 * graphs without a mask (measured faster at every S there) and, since
 * session 37, in masked dense graphs of 16-bit q, k and v (D 64 causal:
 * +5-18% at S 2k-16k, -3% at 1k), packed ones too since session 38; masked
 * FP8 and paged graphs keep two (paged decode on three never timed), as does auto36 (session
 * 36's auto) in every masked graph; never for FP8 P V at 128 (slower) nor
 * for a paged FP8 KV cache under a 16-bit q (its converters spill). */
Test(layout, fwd90_wg3_default) {
  Sm90Config h;
  const int a36 = tmpl_sm90_variant_index("auto36");
  cr_assert_eq(a36, 19);
  for (int d = 8; d <= 64; d += 8) {
    cr_assert_eq(tmpl_sm90_config(d, d, 2, 2, false, false, false, 0, &h), 0, "D %d", d);
    cr_assert(h.bm == 192 && h.threads == 512, "D %d unmasked", d);
    for (int paged = 0; paged < 2; paged++) {
      cr_assert_eq(tmpl_sm90_config(d, d, 2, 2, false, SM90_MASKED | SM90_PLAIN, paged, 0, &h), 0,
                   "D %d", d);
      cr_assert_eq(h.bm, paged ? 128 : 192, "D %d masked, paged %d", d, paged);
      cr_assert(!h.rescale_late, "D %d masked", d);
      cr_assert_eq(tmpl_sm90_config(d, d, 2, 2, false, SM90_MASKED, paged, a36, &h), 0, "D %d", d);
      cr_assert(h.bm == 128 && h.threads == 384, "D %d masked, auto36", d);
    }
    if (d % 16) continue; /* (FP8 rows: whole 16-byte chunks) */
    cr_assert_eq(tmpl_sm90_config(d, d, 1, 1, true, SM90_MASKED, false, 0, &h), 0, "D %d", d);
    cr_assert(h.bm == 128, "D %d masked FP8", d);
    cr_assert_eq(tmpl_sm90_config(d, d, 2, 1, false, SM90_MASKED, false, 0, &h), 0, "D %d", d);
    cr_assert(h.bm == 128, "D %d masked, an FP8 KV cache", d);
  }
  cr_assert_eq(tmpl_sm90_config(64, 128, 2, 2, false, SM90_MASKED, false, 0, &h), 0);
  cr_assert(h.bm == 128, "masked, a head tile of 128");
  cr_assert_eq(tmpl_sm90_config(64, 64, 1, 1, true, false, false, 0, &h), 0);
  cr_assert(h.bm == 192 && h.fp8_pv, "FP8 at D 64");
  cr_assert_eq(tmpl_sm90_config(128, 128, 1, 1, true, false, false, 0, &h), 0);
  cr_assert(h.bm == 128 && h.bn == 128, "FP8 P V at D 128 keeps two");
  cr_assert_eq(tmpl_sm90_config(64, 64, 2, 1, false, false, false, 0, &h), 0);
  cr_assert(h.bm == 192, "a dense FP8 KV cache takes three");
  cr_assert_eq(tmpl_sm90_config(64, 64, 2, 1, false, false, true, 0, &h), 0);
  cr_assert(h.bm == 128, "a paged FP8 KV cache keeps two");
  cr_assert_eq(tmpl_sm90_config(64, 64, 2, 2, false, false, false, 1, &h), 0);
  cr_assert(h.bm == 128, "the base variant keeps two");
}

/* The bn176 variant (9): key tiles of 176 with two stages at head tiles of
 * 128 for dense, unmasked 16-bit graphs (FA3's tile there); masked, paged,
 * FP8 graphs and other head tiles are as auto makes them. */
Test(layout, fwd90_bn176_configs) {
  const int v = tmpl_sm90_variant_index("bn176");
  cr_assert_eq(v, 9);
  Sm90Config h, a;
  for (int d = 72; d <= 128; d += 8) {
    cr_assert_eq(tmpl_sm90_config(d, d, 2, 2, false, false, false, v, &h), 0, "D %d", d);
    cr_assert(h.bm == 128 && h.bn == 176 && h.stages == 2 && h.threads == 384, "D %d", d);
    cr_assert_eq(h.smem_bytes, attn_fwd90_layout_of(128, 176, 2, 128, 128, ATTN_FWD90_16).total);
    cr_assert_leq(h.smem_bytes, 227 * 1024);
  }
  static const struct {
    int d, in, kv;
    bool masked, paged;
  } same[] = {{128, 2, 2, true, false}, {128, 2, 2, false, true}, {128, 1, 1, false, false},
              {128, 2, 1, false, false}, {64, 2, 2, false, false}, {256, 2, 2, false, false},
              {192, 2, 2, false, false}};
  for (size_t k = 0; k < sizeof same / sizeof same[0]; k++) {
    cr_assert_eq(tmpl_sm90_config(same[k].d, same[k].d, same[k].in, same[k].kv, false,
                                  same[k].masked, same[k].paged, v, &h),
                 0, "case %zu", k);
    cr_assert_eq(tmpl_sm90_config(same[k].d, same[k].d, same[k].in, same[k].kv, false,
                                  same[k].masked, same[k].paged, 0, &a),
                 0, "case %zu", k);
    cr_assert(h.bn == a.bn && h.stages == a.stages && h.bm == a.bm, "case %zu", k);
    cr_assert_neq(h.bn, 176, "case %zu", k);
  }
  /* auto takes 176 too, but not where the score chain reads memory per
   * element (a bias: it spilled at 176); the variant takes it there too,
   * bn128 never. */
  const int b128 = tmpl_sm90_variant_index("bn128");
  cr_assert_eq(b128, 12);
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, 0, false, 0, &a), 0);
  cr_assert_eq(a.bn, 176);
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, SM90_SCORE_READS, false, 0, &a), 0);
  cr_assert(a.bn == 128 && a.stages == 3);
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, SM90_SCORE_READS, false, v, &h), 0);
  cr_assert_eq(h.bn, 176);
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, 0, false, b128, &h), 0);
  cr_assert(h.bn == 128 && h.stages == 3);
}

/* The fp8_vt8 variant (10): where FP8 q, k and v run P V in FP8, V^T takes
 * 8 bits an element (ATTN_FWD90_QKV8T), so head tiles of 256 take two
 * stages of 128 keys and tiles up to 128 four stages; FP8 graphs that run
 * P V in f16, and 16-bit ones, are as auto makes them. */
Test(layout, fwd90_fp8_vt8_configs) {
  const int v = tmpl_sm90_variant_index("fp8_vt8");
  cr_assert_eq(v, 10);
  const attn_fwd90_layout t = attn_fwd90_layout_of(128, 128, 2, 256, 256, ATTN_FWD90_QKV8T);
  const attn_fwd90_layout q = attn_fwd90_layout_of(128, 128, 2, 256, 256, ATTN_FWD90_QKV8);
  cr_assert_eq(t.v_bytes * 2, q.v_bytes);
  cr_assert_eq(t.v_bytes, 128 * 256);
  cr_assert_eq(t.v8_bytes, q.v8_bytes);
  cr_assert_eq(t.nbars, q.nbars);
  cr_assert_eq(t.v_bytes % 1024, 0);
  Sm90Config h, a;
  cr_assert_eq(tmpl_sm90_config(256, 256, 1, 1, true, false, false, v, &h), 0);
  cr_assert(h.vt8 && h.fp8_pv && h.bm == 128 && h.bn == 128 && h.stages == 2);
  cr_assert_eq(h.smem_bytes, t.total);
  cr_assert_leq(h.smem_bytes, 227 * 1024);
  cr_assert_eq(tmpl_sm90_config(256, 256, 1, 1, true, false, false, 0, &a), 0);
  cr_assert(!a.vt8 && a.bn == 64, "auto keeps 64 at 256");
  cr_assert_eq(tmpl_sm90_config(128, 128, 1, 1, true, true, false, v, &h), 0);
  cr_assert(h.vt8 && h.bn == 128 && h.stages == 4);
  cr_assert_leq(h.smem_bytes, 227 * 1024);
  cr_assert_eq(tmpl_sm90_config(256, 256, 1, 1, false, false, false, v, &h), 0);
  cr_assert(!h.vt8, "FP8 without a rounded P: P V in f16");
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, false, false, v, &h), 0);
  cr_assert(!h.vt8, "16-bit");
}

/* Whether two configurations take the same tiles, stages and launch shape. */
static bool same_tiles(const Sm90Config *x, const Sm90Config *y) {
  return x->bm == y->bm && x->bn == y->bn && x->stages == y->stages &&
         x->smem_bytes == y->smem_bytes && x->threads == y->threads;
}

/* The late rescale's narrow rule (RESCALE_LATE_NARROW2: auto's until
 * session 36, auto36's now) only at head dims of exactly 64: at 32, 48 and
 * 56 (a 64-wide tile over fewer columns) ptxas serialized the plain causal
 * graph's wgmmas under it (C7511, session 36). Auto itself runs those
 * graphs on three warpgroups, where the rule never applies. */
Test(layout, fwd90_rescale_late_only_d64) {
  static const int dims[] = {32, 48, 56, 64};
  const int a36 = tmpl_sm90_variant_index("auto36");
  for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
    Sm90Config a, o;
    cr_assert_eq(tmpl_sm90_config(dims[k], dims[k], 2, 2, false, SM90_MASKED | SM90_PLAIN, false,
                                  a36, &o), 0);
    cr_assert_eq(o.rescale_late, dims[k] == 64, "D %d", dims[k]);
    cr_assert(o.pv_overlap, "D %d", dims[k]);
    cr_assert_eq(tmpl_sm90_config(dims[k], dims[k], 2, 2, false, SM90_MASKED | SM90_PLAIN, false,
                                  0, &a), 0);
    cr_assert(!a.rescale_late && a.pv_overlap && a.bm == 192, "D %d", dims[k]);
  }
  Sm90Config m;
  cr_assert_eq(tmpl_sm90_config(64, 32, 2, 2, false, SM90_MASKED | SM90_PLAIN, false, a36, &m), 0);
  cr_assert(!m.rescale_late, "D 64 / Dv 32");
}

/* The rescale_late (13), pv_overlap (14) and pv_once (15) variants and
 * auto's choice between them (session 35's measurements): every one takes
 * auto's tiles; auto commits P V in its branch (ATTN_PV_OVERLAP) for
 * 16-bit q, k and v only; auto36 rescales O late (ATTN_RESCALE_LATE, which
 * takes the branch commits) only at head tiles of 64 under two consumer
 * warpgroups (a mask) in plain graphs (SM90_PLAIN), which auto no longer
 * runs on two (three since session 37); rescale_late and pv_overlap do
 * theirs everywhere, pv_once neither. */
/* The o_smem variant (and auto where O is 16-bit): auto's key tiles, and staging (a warp's 16
 * rows of 64 columns, 16-bit) in the room they leave, on a 1024-byte
 * boundary after the slots, or a stage fewer where that makes room: at D
 * 128 beside key tiles of 176 one slot for two blocks, beside a mask's
 * key tiles of 128 two stages (not three) and both slots, none at D 256
 * (key tiles of 80; 64 would make room), all three at D 192, one at D 64. */
Test(layout, fwd90_o_smem_configs) {
  const int os = tmpl_sm90_variant_index("o_smem");
  const int rg = tmpl_sm90_variant_index("o_regs");
  Sm90Config h, a;
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, SM90_PLAIN | SM90_O_TMA, false, os, &h), 0);
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, SM90_PLAIN | SM90_O_TMA, false, rg, &a), 0);
  cr_assert(a.bn == 176 && h.bn == a.bn && h.stages == a.stages && h.bm == 128, "bn %d", h.bn);
  cr_assert_eq(h.o_smem, 1);
  cr_assert_eq(a.o_smem, 0);
  const attn_fwd90_layout l = attn_fwd90_layout_of(h.bm, h.bn, h.stages, 128, 128, ATTN_FWD90_16);
  cr_assert_eq(attn_fwd90_ostage_offset(l) % 1024, 0);
  cr_assert_geq(attn_fwd90_ostage_offset(l), l.bar_offset + 8 * l.nbars + l.slot_bytes);
  cr_assert_eq(h.smem_bytes, attn_fwd90_ostage_offset(l) + 8 * 2048 + 1024);
  cr_assert_leq(h.smem_bytes, 227 * 1024);
  cr_assert_gt(h.smem_bytes + 8 * 2048, 227 * 1024); /* (a second slot would not fit) */
  /* auto stages a 16-bit O as the variant does (session 43) */
  Sm90Config u;
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, SM90_PLAIN | SM90_O_TMA, false, 0, &u), 0);
  cr_assert(u.bn == h.bn && u.stages == h.stages && u.o_smem == h.o_smem &&
            u.smem_bytes == h.smem_bytes);
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, SM90_MASKED | SM90_O_TMA, false, os, &h), 0);
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, SM90_MASKED | SM90_O_TMA, false, rg, &a),
               0);
  cr_assert(a.bn == 128 && a.stages == 3 && a.o_smem == 0);
  cr_assert(h.bn == 128 && h.stages == 2 && h.o_smem == 2, "stages %d", h.stages);
  cr_assert_leq(h.smem_bytes, 227 * 1024);
  cr_assert_eq(tmpl_sm90_config(256, 256, 2, 2, false, SM90_PLAIN | SM90_O_TMA, false, os, &h), 0);
  cr_assert_eq(h.o_smem, 0);
  cr_assert_eq(tmpl_sm90_config(192, 192, 2, 2, false, SM90_PLAIN | SM90_O_TMA, false, os, &h), 0);
  cr_assert_eq(h.o_smem, 3);
  cr_assert_leq(h.smem_bytes, 227 * 1024);
  cr_assert_eq(tmpl_sm90_config(64, 64, 2, 2, false, SM90_O_TMA, false, os, &h), 0);
  cr_assert(h.o_smem == 1 && h.bm == 192);
  /* none where O is not a TMA box's (SM90_O_TMA: an f32 O, a packed
   * 8-bit one, dropout), nor in auto under a short first tile
   * (partial_first: masked, wg3) */
  cr_assert_eq(tmpl_sm90_config(64, 64, 2, 2, false, 0, false, os, &h), 0);
  cr_assert_eq(h.o_smem, 0);
  cr_assert_eq(tmpl_sm90_config(64, 64, 2, 2, false, SM90_MASKED | SM90_O_TMA, false, 0, &h), 0);
  cr_assert(h.partial_first && h.o_smem == 0);
  /* (the variant stages under partial_first too: its warps past a short
   * first tile's rows store nothing) */
  cr_assert_eq(tmpl_sm90_config(64, 64, 2, 2, false, SM90_MASKED | SM90_O_TMA, false, os, &h), 0);
  cr_assert(h.partial_first && h.o_smem == 1 && h.bm == 192);
  /* Over a paged cache auto stages O too (since session 44: the stage
   * trade measured +1-6% on paged prefill at D 128, page 64), as the
   * variant does; o_regs does not. */
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, SM90_MASKED | SM90_O_TMA, true, 0, &h), 0);
  cr_assert(h.o_smem == 2 && h.stages == 2, "stages %d", h.stages);
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, SM90_MASKED | SM90_O_TMA, true, os, &h), 0);
  cr_assert(h.o_smem == 2 && h.stages == 2, "stages %d", h.stages);
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, SM90_MASKED | SM90_O_TMA, true,
                                tmpl_sm90_variant_index("o_regs"), &h), 0);
  cr_assert(h.o_smem == 0 && h.stages == 3, "stages %d", h.stages);
  /* An 8-bit O (SM90_O_BYTE): a slot holds 128 columns; FP8 D 128 keeps
   * its three stages beside its one slot, D 256 trades one for two. */
  const unsigned o8 = SM90_PLAIN | SM90_O_TMA | SM90_O_BYTE;
  cr_assert_eq(tmpl_sm90_config(128, 128, 1, 1, true, o8, false, os, &h), 0);
  cr_assert_eq(tmpl_sm90_config(128, 128, 1, 1, true, o8, false, 0, &a), 0);
  cr_assert(h.bn == a.bn && h.stages == a.stages && h.o_smem == 1, "stages %d", h.stages);
  cr_assert_eq(a.o_smem, 0); /* (auto leaves an 8-bit O in registers: -9% at FP8 D 128 S 16k) */
  cr_assert_leq(h.smem_bytes, 227 * 1024);
  cr_assert_eq(tmpl_sm90_config(256, 256, 1, 1, true, o8, false, os, &h), 0);
  cr_assert(h.bn == 64 && h.stages == 2 && h.o_smem == 2, "stages %d", h.stages);
}

Test(layout, fwd90_rescale_late_configs) {
  const int late = tmpl_sm90_variant_index("rescale_late");
  const int pv = tmpl_sm90_variant_index("pv_overlap");
  const int once = tmpl_sm90_variant_index("pv_once");
  cr_assert_eq(late, 13);
  cr_assert_eq(pv, 14);
  cr_assert_eq(once, 15);
  static const int dims[] = {64, 128, 256};
  for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++)
    for (unsigned traits = 0; traits <= (SM90_MASKED | SM90_SCORE_READS | SM90_PLAIN); traits++)
      for (int fp8 = 0; fp8 < 2; fp8++) {
        const int bytes = fp8 ? 1 : 2;
        Sm90Config a, h;
        cr_assert_eq(tmpl_sm90_config(dims[k], dims[k], bytes, bytes, fp8, traits, false, 0, &a),
                     0);
        const bool narrow2 =
            !fp8 && dims[k] == 64 && (traits & SM90_MASKED) && (traits & SM90_PLAIN);
        cr_assert(!a.rescale_late, "auto D %d traits %u fp8 %d", dims[k], traits, fp8);
        /* FP8 P V commits in its branch too at head tiles up to 128 (session 41) */
        cr_assert_eq(a.pv_overlap, !fp8 || (a.fp8_pv && dims[k] <= 128),
                     "auto D %d traits %u fp8 %d", dims[k], traits, fp8);
        if (fp8) cr_assert_eq(a.pv_overlap, dims[k] <= 128, "auto FP8 D %d", dims[k]);
        Sm90Config o;
        cr_assert_eq(tmpl_sm90_config(dims[k], dims[k], bytes, bytes, fp8, traits, false,
                                      tmpl_sm90_variant_index("auto36"), &o), 0);
        cr_assert_eq(o.rescale_late, narrow2, "auto36 D %d traits %u fp8 %d", dims[k], traits, fp8);
        if (narrow2) cr_assert_eq(o.bm, 128, "two consumer warpgroups");
        const int vs[] = {late, pv, once};
        for (int w = 0; w < 3; w++) {
          cr_assert_eq(
              tmpl_sm90_config(dims[k], dims[k], bytes, bytes, fp8, traits, false, vs[w], &h), 0);
          cr_assert_eq(h.rescale_late, vs[w] == late, "variant %d D %d", vs[w], dims[k]);
          cr_assert_eq(h.pv_overlap, vs[w] != once, "variant %d D %d", vs[w], dims[k]);
          cr_assert(same_tiles(&h, &a), "variant %d D %d", vs[w], dims[k]);
        }
      }
  /* Q's early release and the idle warpgroups' skip: auto's (Q early in
   * work tiles of up to 16 key tiles) in every "auto, but" variant; q_early
   * (16) releases Q early in every tile; auto35 (17) and the four old
   * scheduling variants (base .. persist_bn80) neither; tanh_poly (18) is
   * the only one with the softcap's polynomial, partial_first (20) the only
   * one with a sequence's short query tile first on two warpgroups (auto
   * and its "auto, but" variants put it first in masked graphs on three:
   * 192-row tiles, dense 16-bit masked graphs here; wg3's FP8 too).
   * Otherwise q_early,
   * auto35, tanh_poly, partial_first, ring_closed and q_before_v have auto's tiles and commits
   * (auto35 here, masked FP8: two warpgroups like auto). */
  const int qe = tmpl_sm90_variant_index("q_early");
  const int a35 = tmpl_sm90_variant_index("auto35");
  const int tp = tmpl_sm90_variant_index("tanh_poly");
  cr_assert_eq(qe, 16);
  cr_assert_eq(a35, 17);
  cr_assert_eq(tp, 18);
  const int pf = tmpl_sm90_variant_index("partial_first");
  cr_assert_eq(tmpl_sm90_variant_index("auto36"), 19);
  cr_assert_eq(pf, 20);
  const int rc = tmpl_sm90_variant_index("ring_closed");
  cr_assert_eq(rc, 21);
  const int qv = tmpl_sm90_variant_index("q_before_v");
  cr_assert_eq(qv, 22);
  const int pw = tmpl_sm90_variant_index("pv_wait_next");
  cr_assert_eq(pw, 23);
  const int os = tmpl_sm90_variant_index("o_smem");
  cr_assert_eq(os, 24);
  const int orr = tmpl_sm90_variant_index("o_regs");
  cr_assert_eq(orr, SM90_NVARIANTS - 1);
  cr_assert_eq(tmpl_sm90_variant_index("idle_wg"), -1);
  for (int w = 0; w < SM90_NVARIANTS; w++)
    for (int fp8 = 0; fp8 < 2; fp8++) {
      const int bytes = fp8 ? 1 : 2;
      const bool old = w == a35 || (w >= 1 && w <= 4);
      Sm90Config a, h;
      cr_assert_eq(
          tmpl_sm90_config(64, 64, bytes, bytes, fp8, SM90_MASKED | SM90_O_TMA, false, w, &h), 0);
      cr_assert_eq(h.q_early_tiles, !h.persistent || old ? 0 : w == qe ? 1 << 20 : 16,
                   "variant %d", w);
      cr_assert_eq(h.skip_idle, !old, "variant %d", w);
      cr_assert_eq(h.tanh_poly, w == tp, "variant %d", w);
      cr_assert_eq(h.ring_per_tile, w == rc, "variant %d", w);
      cr_assert_eq(h.q_before_v, w == qv && h.persistent, "variant %d", w);
      cr_assert_eq(h.pv_wait_next, w == pw, "variant %d", w);
      /* (a 16-bit O's staging is auto's since session 43: every "auto,
       * but" variant stages it, the old snapshots and o_regs do not) */
      cr_assert_eq(h.o_smem > 0,
                   w == os || (!h.partial_first && !old && w != tmpl_sm90_variant_index("auto36") &&
                               w != orr),
                   "variant %d", w);
      const bool auto_but = !old && w != tmpl_sm90_variant_index("auto36");
      cr_assert_eq(h.partial_first, w == pf || (auto_but && h.bm == 192), "variant %d fp8 %d", w,
                   fp8);
      if (auto_but) cr_assert_eq(h.bm, w == tmpl_sm90_variant_index("wg3") || !fp8 ? 192 : 128);
      /* Unmasked, three warpgroups everywhere but the short tile first only
       * under partial_first (every row costs the same there). */
      Sm90Config u;
      cr_assert_eq(tmpl_sm90_config(64, 64, bytes, bytes, fp8, 0u, false, w, &u), 0);
      cr_assert_eq(u.partial_first, w == pf, "variant %d fp8 %d unmasked", w, fp8);
      if (w != qe && w != a35 && w != tp && w != pf && w != rc && w != qv) continue;
      /* (auto35 against auto36 in 16 bits, against o_regs (auto's tiles, O
       * from registers) in FP8; partial_first against o_regs too: a short
       * first tile stores O from registers) */
      const int ref = w == pf               ? orr
                      : w != a35 ? 0
                      : fp8      ? orr
                                 : tmpl_sm90_variant_index("auto36");
      cr_assert_eq(
          tmpl_sm90_config(64, 64, bytes, bytes, fp8, SM90_MASKED | SM90_O_TMA, false, ref, &a), 0);
      cr_assert(same_tiles(&h, &a) && h.rescale_late == a.rescale_late &&
                h.pv_overlap == a.pv_overlap, "variant %d fp8 %d", w, fp8);
    }
  /* A paged cache keeps O's rescale early under the narrow rule (ptxas
   * serialized the wgmmas under the late one: compile sweep seed 135). */
  Sm90Config pg;
  cr_assert_eq(tmpl_sm90_config(64, 64, 2, 2, false, SM90_MASKED | SM90_PLAIN, true,
                                tmpl_sm90_variant_index("auto36"), &pg), 0);
  cr_assert(!pg.rescale_late && pg.pv_overlap);
  /* An FP8 KV cache under a 16-bit q keeps the single commit (not
   * measured with the branch commits). */
  Sm90Config c;
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 1, false, 0, false, 0, &c), 0);
  cr_assert(!c.pv_overlap && !c.rescale_late);
}
