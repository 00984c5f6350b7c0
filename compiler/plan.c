/*
 * plan.c: launch plans (attnc.h, "plan.c"). A graph's plan lists, per pass,
 * the kernels to launch in order and the workspace slices they share, with
 * every launch fact; the runtime runs any plan with one loop
 * (runtime/launch.c), so a new kernel is a new step here and a template,
 * not new launch code.
 *
 * The plans of today's templates:
 *
 *   forward   [prep]  [amax_init]  (zeroes an amax output the kernels max into)
 *                     [widen_kv]  (the kv_copy variant: an FP8 k and v widened
 *                     into 16-bit workspace copies the forward reads)
 *                     forward (fwd_sm80, or fwd_sm90 with q/k/v tensor
 *                     maps, persistent with a tile queue)
 *                     or, where few packed rows share a K/V head (the
 *                     launch fact `decode`), decode [merge] (decode.cuh:
 *                     split-KV, the merge when the keys are split)
 *   backward  [prep]  [amax_init  convert8: the FP8 backward's]  delta  main
 *             [convert]  [convert_kv]
 *             (main: bwd_sm80, or bwd_sm90 with q/dO/dQ-accumulator maps
 *             and a producer warpgroup; persistent at 128-key tiles; in
 *             deterministic mode a second main step with dQ's extra CTAs)
 *
 * and their slices: the separable masks' range table, the forward's and
 * the backward's work queues, the decode's partial rows and lse, delta,
 * dQ's f32 accumulator, GQA's dK/dV accumulators, the bias gradients'
 * scratch and the FP8 backward's 16-bit copies of FP8 tensors, each with the launch-time facts (deterministic mode, GQA,
 * decode, split) under which it exists.
 *
 * The text form is line-oriented, one record a line, `key=value` fields;
 * plan_read validates every field against the bounds the runtime relies
 * on, since an embedded module's plan is data from a file.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "attn_abi.h"
#include "attnc.h"

/* ------------------------------------------------------------ building */

const char *plan_entry(Arena *a, const char *graph, const char *role) {
  return arena_printf(a, "attn_%s_%s", graph, role);
}

static PlanDim pd(PlanDimKind k) { return (PlanDim){k, 0}; }
static PlanDim pconst(int n) { return (PlanDim){PD_CONST, n}; }

static PlanStep *add_step(PassPlan *p, const char *role, const char *entry, int threads,
                          int smem) {
  PlanStep *s = &p->steps[p->nsteps++];
  memset(s, 0, sizeof *s);
  s->role = role;
  s->entry = entry;
  s->threads = threads;
  s->smem_bytes = smem;
  s->grid.y = pd(PD_H);
  s->grid.z = pd(PD_B);
  return s;
}

/* One CTA of 32 threads that zeroes amax outputs the kernels after it
 * atomically max into (the forward's and the backward's grad block's). */
static void add_amax_init(PassPlan *p, const char *entry) {
  PlanStep *z = add_step(p, "amax_init", entry, 32, 0);
  z->grid.x0 = pconst(1);
  z->grid.div0 = 1;
  z->grid.y = z->grid.z = pconst(1);
}

static PlanSlice *add_slice(PassPlan *p, const char *name, PlanBind bind, int slot, int elem,
                            PlanDim d0, PlanDim d1, PlanDim d2, PlanDim d3, PlanZero zero) {
  PlanSlice *s = &p->slices[p->nslices++];
  *s = (PlanSlice){.name = name, .bind = bind, .slot = slot, .elem = elem,
                   .dims = {d0, d1, d2, d3}, .zero = zero};
  return s;
}

static void add_map(PlanStep *s, int index, int slot, DType t, int cols, int rows,
                    const char *what) {
  s->maps[s->nmaps++] = (PlanMap){index, slot, t, cols, rows, what};
}

/* The separable masks' prep kernel and its range table, first in a pass. */
static void add_prep(PassPlan *p, const GraphPlan *gp, const char *entry) {
  bool any = false, per_h = gp->sep_cells[SEP_REGION_IBH] || gp->sep_cells[SEP_REGION_JBH];
  for (int r = 0; r < SEP_NREGIONS; r++) any |= gp->sep_cells[r] != 0;
  if (!any) return;
  add_slice(p, "mask_ranges", PB_MASK_RANGES, -1, 1, pd(PD_SEP_BYTES), pconst(1), pconst(1),
            pconst(1), PZ_NEVER);
  /* CTA (side, h, b); per-head regions need a CTA per head. */
  PlanStep *s = add_step(p, "prep", entry, SEP_PREP_THREADS, 0);
  s->grid.x0 = pconst(2);
  s->grid.div0 = 1;
  if (!per_h) s->grid.y = pconst(1);
}

/* The decode alternative of the forward (templates/decode.cuh): where the
 * packed rows of a K/V head are few (PLAN_IF_DECODE) the decode kernel
 * runs instead of `fwd`, one CTA per (key split, 16 packed rows of a K/V
 * head, batch); over several splits (PLAN_IF_SPLIT) it leaves normalized
 * partial rows and their lse in the workspace, [split][b][h][i], and the
 * merge step combines them into O and lse. */
static void plan_decode(GraphPlan *gp, PassPlan *p, PlanStep *fwd, const KernelSpec *f,
                        const DecodeConfig *dc, Arena *a) {
  const IrGraph *g = f->g;
  gp->decode_bn = dc->bn;
  gp->decode_wave = dc->wave;
  if (fwd) fwd->deny |= PLAN_IF_DECODE;
  for (int k = 0; k < p->nslices; k++) /* the forward's work queue */
    if (p->slices[k].bind == PB_TILE_QUEUE) p->slices[k].deny |= PLAN_IF_DECODE;
  add_slice(p, "partial_o", PB_SLOT, dc->partial_o, 4 * f->d_v, pd(PD_SPLITS), pd(PD_B), pd(PD_H),
            pd(PD_SQ), PZ_NEVER)->need = PLAN_IF_DECODE | PLAN_IF_SPLIT;
  add_slice(p, "partial_lse", PB_SLOT, dc->partial_lse, 4, pd(PD_SPLITS), pd(PD_B), pd(PD_H),
            pd(PD_SQ), PZ_NEVER)->need = PLAN_IF_DECODE | PLAN_IF_SPLIT;
  PlanStep *s = add_step(p, "decode", plan_entry(a, g->name, "decode"), dc->threads,
                         dc->smem_bytes);
  s->grid.x0 = pd(PD_SPLITS);
  s->grid.div0 = 1;
  s->grid.y = pd(PD_DECODE_ROWS);
  s->need = PLAN_IF_DECODE;
  s = add_step(p, "merge", plan_entry(a, g->name, "decode_merge"), DECODE_MERGE_THREADS, 0);
  s->grid.x0 = pd(PD_SQ);
  s->grid.div0 = 1;
  s->need = PLAN_IF_DECODE | PLAN_IF_SPLIT;
}

static void plan_forward(GraphPlan *gp, const KernelSpec *f, const FwdConfig *c, Arena *a) {
  const IrGraph *g = f->g;
  PassPlan *p = &gp->pass[PLAN_FORWARD];
  p->present = true;
  add_prep(p, gp, plan_entry(a, g->name, "prep"));
  if (f->amax_output >= 0) add_amax_init(p, plan_entry(a, g->name, "amax_init"));
  if (c->kv_copy) {
    /* The kv_copy variant: the FP8 k and v widened into 16-bit copies
     * [B, Hk, Skv, D] (q's type, exact) that the forward reads; the
     * decode kernel reads the FP8 cache itself. */
    add_slice(p, "k16", PB_SLOT, c->copy_k, 2, pd(PD_B), pd(PD_HK), pd(PD_SKV), pconst(f->d_qk),
              PZ_NEVER)->deny = PLAN_IF_DECODE;
    add_slice(p, "v16", PB_SLOT, c->copy_v, 2, pd(PD_B), pd(PD_HK), pd(PD_SKV), pconst(f->d_v),
              PZ_NEVER)->deny = PLAN_IF_DECODE;
    PlanStep *w = add_step(p, "widen_kv", plan_entry(a, g->name, "widen_kv"), FWD_WIDEN_THREADS, 0);
    w->grid.x0 = pd(PD_SKV);
    w->grid.div0 = FWD_WIDEN_ROWS;
    w->grid.y = pd(PD_HK);
    w->deny = PLAN_IF_DECODE;
  }
  PlanStep *s = add_step(p, "forward", plan_entry(a, g->name, "fwd"), c->threads, c->smem_bytes);
  s->grid.x0 = pd(PD_SQ);
  s->grid.div0 = c->bm;
  if (f->packed) {
    /* Packed sequences: Sq is the query tokens, and B sequences add at
     * most one partial tile each: ceil(Sq / BM) + B query tiles a head,
     * whose sequence each CTA finds (hooks.cuh, attn_packed_work). */
    s->grid.x1 = pd(PD_B);
    s->grid.div1 = 1;
    s->grid.z = pconst(1);
  }
  if (c->persistent) {
    s->persistent = true;
    add_slice(p, "tile_queue", PB_TILE_QUEUE, -1, 4, pconst(2), pconst(1), pconst(1), pconst(1),
              PZ_NEW);
  }
  if (c->kind == TMPL_FWD_SM90) { /* TMA boxes of 128 bytes by the tile's rows */
    const int q_cols = dtype_is_fp8(f->in_type) ? 128 : 64;
    const int kv_cols = dtype_is_fp8(f->kv_type) ? 128 : 64;
    add_map(s, ATTN_TMAP_Q, g->q, f->in_type, q_cols, c->bm, "q");
    if (c->kv_copy) { /* the widened copies, 16-bit */
      add_map(s, ATTN_TMAP_K, c->copy_k, f->in_type, 64, c->bn, "k16");
      add_map(s, ATTN_TMAP_V, c->copy_v, f->in_type, 64, c->bn, "v16");
    } else {
      add_map(s, ATTN_TMAP_K, g->k, f->kv_type, kv_cols, c->bn, "k");
      add_map(s, ATTN_TMAP_V, g->v, f->kv_type, kv_cols, c->bn, "v");
    }
    if (c->o_smem) /* the o_smem variant's stores: 128 bytes by a warp's 16 rows */
      add_map(s, ATTN_TMAP_O, g->outputs[f->o_output].tensor, f->out_type,
              dtype_size(f->out_type) == 1 ? 128 : 64, 16, "o");
  }
  if (c->decode.on) plan_decode(gp, p, s, f, &c->decode, a);
}

static void plan_backward(GraphPlan *gp, const BwdSpec *b, Arena *a) {
  const IrGraph *g = b->g;
  const BwdSlots *sl = &b->slots;
  PassPlan *p = &gp->pass[PLAN_BACKWARD];
  p->present = true;
  /* The ordered dQ tiles exist up to head dim 128 (split-D has none), and
   * not in the FP8 backward (its stores go through the grad block's hooks
   * in the convert passes). */
  p->det_ok = b->tile_qk <= 128 && b->tile_v <= 128 && !b->fp8;
  add_prep(p, gp, plan_entry(a, g->name, "prep"));
  /* The FP8 backward: its amax outputs zeroed (the kernels max into them),
   * and 16-bit copies of the FP8 q, k, v and dO that its kernels read,
   * written by convert8 (bwd_sm80.cuh). */
  if (sl->namax > 0) add_amax_init(p, plan_entry(a, g->name, "bwd_amax_init"));
  if (b->fp8_mma) {
    /* bwd_sm90's FP8 tensor-core mode reads the FP8 tensors themselves and
     * the transposes its products need (bwd_sm90.cuh, transpose8): Q^T
     * and dO^T of each 64 queries as one TMA box (rows d, then dO's d;
     * the queries of each 32 in the accumulators' order), K^T per 128
     * keys, padded with zeros to whole tiles. */
    add_slice(p, "qdt", PB_SLOT, sl->q16, 1, pd(PD_B), pd(PD_H), pconst(b->d_qk + b->d_v),
              (PlanDim){PD_SQ_PAD, 64}, PZ_NEVER);
    add_slice(p, "kt", PB_SLOT, sl->k16, 1, pd(PD_B), pd(PD_HK), pconst(b->d_qk),
              (PlanDim){PD_SKV_PAD, 128}, PZ_NEVER);
    PlanStep *c = add_step(p, "transpose8", plan_entry(a, g->name, "bwd_transpose8"), b->threads,
                           0);
    c->grid.x0 = pd(PD_SQ);
    c->grid.div0 = 64;
    c->grid.x1 = pd(PD_SKV); /* the grid's x: query tiles, then key tiles */
    c->grid.div1 = 128;
  } else if (sl->q16 >= 0 || sl->k16 >= 0 || sl->v16 >= 0 || sl->do16 >= 0) {
    /* (k and v per batch entry even where they broadcast over it: their
     * bound batch stride is then 0, which convert8 reads through.) */
    if (sl->q16 >= 0)
      add_slice(p, "q16", PB_SLOT, sl->q16, 2, pd(PD_B), pd(PD_H), pd(PD_SQ), pconst(b->d_qk),
                PZ_NEVER);
    if (sl->k16 >= 0)
      add_slice(p, "k16", PB_SLOT, sl->k16, 2, pd(PD_B), pd(PD_HK), pd(PD_SKV), pconst(b->d_qk),
                PZ_NEVER);
    if (sl->v16 >= 0)
      add_slice(p, "v16", PB_SLOT, sl->v16, 2, pd(PD_B), pd(PD_HK), pd(PD_SKV), pconst(b->d_v),
                PZ_NEVER);
    if (sl->do16 >= 0)
      add_slice(p, "do16", PB_SLOT, sl->do16, 2, pd(PD_B), pd(PD_H), pd(PD_SQ), pconst(b->d_v),
                PZ_NEVER);
    PlanStep *c = add_step(p, "convert8", plan_entry(a, g->name, "bwd_convert8"), b->threads, 0);
    c->grid.x0 = pd(PD_SQ);
    c->grid.x1 = pd(PD_SKV); /* the grid's x: q's and dO's rows, then k's and v's */
    c->grid.div0 = c->grid.div1 = ATTN_BWD_ROWS_PER_CTA;
  }
  /* Packed sequences (bwd_sm80.cuh, bwd80_packed_view): Sq and Skv are
   * the token counts, the workspace slices one batch entry of every
   * token's rows, the row passes one grid over the tokens; the main
   * kernel's key tiles (and deterministic dQ tiles) number across the
   * sequences, B partial tiles more than the tokens' own. */
  const bool packed = ir_packed(g);
  const PlanDim sb = packed ? pconst(1) : pd(PD_B);

  /* Per query row {delta, lse * log2(e)}, written by the delta pass, which
   * also zeroes dQ's accumulator (absent in deterministic mode: the null
   * slot is the kernels' deterministic flag). */
  add_slice(p, "delta", PB_SLOT, sl->delta, 4, sb, pd(PD_H), pd(PD_SQ), pconst(2), PZ_NEVER);
  /* (bwd_sm90's FP8 mode trades dQ's rows within each 8, bwd80_dq_row:
   * whole 8-row groups.) */
  add_slice(p, "dq_acc", PB_SLOT, sl->dqa, 4, sb, pd(PD_H),
            b->fp8_mma ? (PlanDim){PD_SQ_PAD, 8} : pd(PD_SQ), pconst(b->tile_qk),
            PZ_NEVER)->deny = PLAN_IF_DET;
  /* GQA: dK/dV summed over a group's query heads, by f32 atomics (zeroed
   * first) or, deterministic, one slice per query head summed in head
   * order by convert_kv. Without GQA the slots stay null. */
  const int acc_slot[2] = {sl->dka, sl->dva}, acc_d[2] = {b->tile_qk, b->tile_v};
  static const char *const acc_name[2][2] = {{"dk_acc", "dk_acc_det"}, {"dv_acc", "dv_acc_det"}};
  for (int r = 0; r < 2; r++) {
    if (acc_slot[r] < 0) continue;
    PlanSlice *x = add_slice(p, acc_name[r][0], PB_SLOT, acc_slot[r], 4, sb, pd(PD_HK),
                             pd(PD_SKV), pconst(acc_d[r]), PZ_EACH);
    x->need = PLAN_IF_GQA;
    x->deny = PLAN_IF_DET;
    if (p->det_ok)
      add_slice(p, acc_name[r][1], PB_SLOT, acc_slot[r], 4, sb, pd(PD_H), pd(PD_SKV),
                pconst(acc_d[r]), PZ_NEVER)->need = PLAN_IF_GQA | PLAN_IF_DET;
  }
  /* Accumulated bias gradients: f32 scratch of the bias's shape (atomics),
   * or deterministic one element per score summed by the convert pass. */
  bool finish_always = false;
  for (int r = 0; r < sl->nbias; r++) {
    if (!bwd_bias_accumulated(sl->bias_mode[r])) continue;
    finish_always = true;
    const char *name = arena_printf(a, "d%s_acc", g->tensors[sl->bias[r]].name);
    add_slice(p, name, PB_SLOT, sl->dbias_acc[r], 4, pconst(1), pconst(1), pconst(1),
              (PlanDim){PD_NUMEL, sl->bias[r]}, PZ_EACH)->deny = PLAN_IF_DET;
    if (p->det_ok)
      add_slice(p, arena_printf(a, "%s_det", name), PB_SLOT, sl->dbias_acc[r], 4, pd(PD_B),
                pd(PD_H), pd(PD_SQ), pd(PD_SKV), PZ_EACH)->need = PLAN_IF_DET;
  }

  const int rows = ATTN_BWD_ROWS_PER_CTA;
  PlanStep *s = add_step(p, "delta", plan_entry(a, g->name, "bwd_delta"), b->threads, 0);
  s->grid.x0 = pd(PD_SQ);
  s->grid.div0 = rows;
  s->grid.z = sb;
  /* The sink's gradient from the rows' delta and lse: one CTA per element
   * of it (per head, per batch where it keeps them), summing its rows in
   * a fixed order, so every mode gives the same bits. */
  const int sink = bwd_sink_entry(sl);
  if (sink >= 0) {
    s = add_step(p, "dsink", plan_entry(a, g->name, "bwd_dsink"), 128, 0);
    s->grid.x0 = pconst(1);
    s->grid.div0 = 1;
    s->grid.y = sl->bias_keep[sink] & DOM_H ? pd(PD_H) : pconst(1);
    s->grid.z = sl->bias_keep[sink] & DOM_B ? pd(PD_B) : pconst(1);
  }

  /* The main kernel: one CTA per block_n keys. bwd_sm90 runs a producer
   * warpgroup beyond its consumers and takes q, dO and dQ's accumulator
   * as tensor maps; it is persistent where match_bwd declared it (128-key
   * tiles, D <= 128; split-D measured 7-23% slower so).
   * Deterministic mode adds one CTA per 64 queries that computes dQ in
   * key order (bwd80_dq_tile) and is never persistent. */
  const char *main_entry = plan_entry(a, g->name, "bwd_main");
  const int main_threads = b->threads + (b->sm90 ? 128 : 0);
  for (int det = 0; det <= (p->det_ok ? 1 : 0); det++) {
    s = add_step(p, "main", main_entry, main_threads, b->smem_bytes);
    s->grid.x0 = pd(PD_SKV);
    s->grid.div0 = b->block_n;
    if (packed) {
      s->grid.x2 = pd(PD_B);
      s->grid.mul2 = 1;
      s->grid.z = pconst(1);
    }
    if (det) {
      s->need = PLAN_IF_DET;
      if (sl->dq >= 0) {
        s->grid.x1 = pd(PD_SQ);
        s->grid.div1 = 64;
        if (packed) s->grid.mul2 = 2; /* partial tiles of both kinds */
      }
    } else {
      s->deny = p->det_ok ? PLAN_IF_DET : 0;
      s->persistent = b->persistent;
    }
    if (b->fp8_mma) {
      /* FP8 Q and dO as they are (128-byte rows), Q^T with dO^T (64-byte
       * rows of 64 queries, d_qk + d_v of them). */
      add_map(s, ATTN_TMAP_Q, g->q, g->tensors[g->q].type, 128, 64, "q");
      add_map(s, ATTN_TMAP_DO, sl->dout, bwd_grad_type(g, IR_GRAD_DO), 128, 64, "dO");
      add_map(s, ATTN_TMAP_DQA, sl->dqa, DT_F32, 32, 64, "dQ_accumulator");
      add_map(s, ATTN_TMAP_QDT, sl->q16, g->tensors[g->q].type, 64, b->d_qk + b->d_v,
              "qdt");
    } else if (b->sm90) {
      /* q and dO as the MMAs read them: the FP8 backward's 16-bit copies
       * where it makes them; dO in its own type, which is the MMAs' (not
       * o's: an f32 o takes a 16-bit dO). */
      const int tile_rows = b->bm80 ? 80 : 64; /* (a query tile's, or half a wide one's) */
      if (sl->q16 >= 0)
        add_map(s, ATTN_TMAP_Q, sl->q16, b->mma_type, 64, tile_rows, "q16");
      else
        add_map(s, ATTN_TMAP_Q, g->q, b->in_type, 64, tile_rows, "q");
      add_map(s, ATTN_TMAP_DO, sl->do16 >= 0 ? sl->do16 : sl->dout, b->mma_type, 64, tile_rows,
              sl->do16 >= 0 ? "do16" : "dO");
      add_map(s, ATTN_TMAP_DQA, sl->dqa, DT_F32, 32, tile_rows, "dQ_accumulator");
      /* The persistent kernel's K and V, by TMA at each item's start (the
       * tensors the kernel reads: the 16-bit copies where it makes them),
       * boxes of 64 columns by the CTA's keys (bwd_sm90.cuh, bwd90_kv_tma). */
      if (b->persistent) {
        const bool kc = sl->k16 >= 0, vc = sl->v16 >= 0;
        add_map(s, ATTN_TMAP_BK, kc ? sl->k16 : g->k, kc ? b->mma_type : b->in_type, 64,
                b->block_n, kc ? "k16" : "k");
        add_map(s, ATTN_TMAP_BV, vc ? sl->v16 : g->v, vc ? b->mma_type : b->in_type, 64,
                b->block_n, vc ? "v16" : "v");
      }
    }
  }
  if (b->persistent)
    add_slice(p, "tile_queue", PB_TILE_QUEUE, -1, 4, pconst(2), pconst(1), pconst(1), pconst(1),
              PZ_NEW)->deny = PLAN_IF_DET;

  /* dQ to dq's dtype (deterministic mode writes dq directly), and the
   * accumulated bias gradients out of their scratch. */
  if (finish_always || sl->dq >= 0) {
    s = add_step(p, "convert", plan_entry(a, g->name, "bwd_convert"), b->threads, 0);
    s->grid.x0 = pd(PD_SQ);
    s->grid.div0 = rows;
    s->grid.z = sb;
    if (!finish_always) s->deny = PLAN_IF_DET;
  }
  /* GQA: dK/dV from their accumulators to the kv heads. */
  if (sl->dk >= 0 || sl->dv >= 0) {
    s = add_step(p, "convert_kv", plan_entry(a, g->name, "bwd_convert_kv"), b->threads, 0);
    s->grid.x0 = pd(PD_SKV);
    s->grid.div0 = rows;
    s->grid.y = pd(PD_HK);
    s->grid.z = sb;
    s->need = PLAN_IF_GQA;
  }
}

void plan_graph(GraphPlan *gp, const KernelSpec *fwd, const FwdConfig *c, const BwdSpec *bwd,
                Arena *a) {
  memset(gp, 0, sizeof *gp);
  gp->graph = fwd->g->name;
  sep_cell_bytes(fwd, gp->sep_cells);
  plan_forward(gp, fwd, c, a);
  if (bwd) plan_backward(gp, bwd, a);
  /* Every entry begins with attn_entry_wait (emit_entry), which waits on
   * sm_90 and later only. */
  for (int pass = 0; pass < PLAN_NPASSES; pass++)
    for (int k = 0; k < gp->pass[pass].nsteps; k++)
      gp->pass[pass].steps[k].entry_waits = fwd->sm >= 90;
}

/* ----------------------------------------------------------- evaluating */

static long long cdiv(long long a, long long b) { return b > 0 ? (a + b - 1) / b : 0; }

/* The decode's work items: (16 packed rows of a K/V head, batch). */
static long long decode_items(const PlanProblem *pr) {
  const long long group = pr->Hk > 0 ? pr->H / pr->Hk : 0;
  return pr->B * pr->Hk * cdiv(group * pr->Sq, 16);
}

long long plan_decode_splits(const GraphPlan *gp, const PlanProblem *pr) {
  if (gp->decode_bn <= 0) return 1;
  const long long tiles = cdiv(pr->Skv, gp->decode_bn);
  if (tiles <= 1) return 1;
  const long long cap = tiles < DECODE_MAX_SPLITS ? tiles : DECODE_MAX_SPLITS;
  if (pr->force_splits > 0) return pr->force_splits < cap ? pr->force_splits : cap;
  const long long items = decode_items(pr);
  const long long sms = pr->sms > 0 ? pr->sms : 1;
  long long n;
  if (gp->decode_wave > 1) {
    /* A paged cache: splits for two CTAs an SM (of the wave resident: its
     * per-page boxes keep fewer bytes in flight a CTA than a dense
     * cache's, so one an SM is too few). H100, page 64, the split sweep
     * (bench/decode.py --split-sweep --paged, session 48): the fastest
     * count made about 256 CTAs at every B 1 and B 8 shape: GQA 32:8 B 1
     * 8k keys 24.5 us over 32 splits against 27.3 over a full wave's 49
     * (26.2 over one CTA an SM's 16), 32k 57.5 against 60.9; MHA B 1 8k
     * 56.8 over 8 against 57.5 over 12; GQA B 8 8k 100.2 over 4 against
     * 102.7 over 6. */
    const long long slots = sms * 2; /* (decode_wave > 1 here: two fit) */
    if (items <= 0 || items >= slots) return 1;
    n = slots / items;
  } else {
    /* A dense cache: one CTA an SM at most, and a split only where it at
     * least triples the CTAs. Measured on the H100 (session 44,
     * bench/decode.py --split-sweep, D 128): one CTA an SM streams K and V
     * about as fast as two (64 unsplit CTAs of B 8, GQA 32:8 read 2.8 TB/s
     * at 8k keys), while the merge and the partial rows cost a few
     * microseconds, so B 8 GQA ran 1.18x faster at 1k keys unsplit than
     * over the 4 splits of two CTAs an SM, and B 1 MHA 1.08x faster over 4
     * splits than over 8. */
    if (items <= 0 || items * 3 > sms) return 1;
    n = sms / items;
  }
  const long long most = tiles / 2 < cap ? tiles / 2 : cap; /* two tiles a split at least */
  if (n > most) n = most;
  return n < 1 ? 1 : n;
}

unsigned plan_facts(const GraphPlan *gp, const PlanProblem *pr) {
  unsigned f = pr->H != pr->Hk ? PLAN_IF_GQA : 0u;
  const long long group = pr->Hk > 0 ? pr->H / pr->Hk : 0;
  if (gp->decode_bn > 0 && !pr->no_decode && group > 0 && group * pr->Sq <= DECODE_MAX_ROWS) {
    f |= PLAN_IF_DECODE;
    if (plan_decode_splits(gp, pr) > 1) f |= PLAN_IF_SPLIT;
  }
  return f;
}

bool plan_applies(unsigned need, unsigned deny, unsigned facts) {
  return (facts & need) == need && (facts & deny) == 0;
}

long long plan_dim(const GraphPlan *gp, PlanDim d, const PlanProblem *pr) {
  switch (d.kind) {
  case PD_CONST: return d.n;
  case PD_B: return pr->B;
  case PD_H: return pr->H;
  case PD_HK: return pr->Hk;
  case PD_SQ: return pr->Sq;
  case PD_SKV: return pr->Skv;
  case PD_NUMEL: {
    long long n = 1;
    for (int k = 0; k < pr->ndims[d.n]; k++) n *= (long long)pr->shape[d.n][k];
    return n;
  }
  case PD_SEP_BYTES:
    return (long long)sep_workspace_bytes(gp->sep_cells, pr->B, pr->H, pr->Sq, pr->Skv, NULL);
  case PD_SPLITS: return plan_decode_splits(gp, pr);
  case PD_DECODE_ROWS: return pr->B > 0 ? decode_items(pr) / pr->B : 0;
  case PD_SQ_PAD: return d.n > 0 ? cdiv(pr->Sq, d.n) * d.n : 0;
  case PD_SKV_PAD: return d.n > 0 ? cdiv(pr->Skv, d.n) * d.n : 0;
  }
  return 0;
}

size_t plan_slice_bytes(const GraphPlan *gp, const PlanSlice *s, const PlanProblem *pr) {
  size_t n = (size_t)s->elem;
  for (int k = 0; k < 4; k++) n *= (size_t)plan_dim(gp, s->dims[k], pr);
  return n;
}

/* -------------------------------------------------------------- writing */

static const char *const dim_names[] = {
    [PD_B] = "B",          [PD_H] = "H",          [PD_HK] = "Hk",
    [PD_SQ] = "Sq",        [PD_SKV] = "Skv",      [PD_SEP_BYTES] = "sep",
    [PD_SPLITS] = "splits", [PD_DECODE_ROWS] = "decode_rows"};
static const char *const bind_names[] = {[PB_SLOT] = "slot", [PB_MASK_RANGES] = "ranges",
                                         [PB_TILE_QUEUE] = "queue"};
static const char *const zero_names[] = {[PZ_NEVER] = "never", [PZ_EACH] = "each",
                                         [PZ_NEW] = "new"};
static const char *const pass_names[] = {[PLAN_FORWARD] = "forward", [PLAN_BACKWARD] = "backward"};

const char *plan_pass_name(PlanPass pass) { return pass_names[pass]; }

/* Launch facts by name, PLAN_IF_* in bit order; "-" is none. */
static const char *const fact_names[] = {"det", "gqa", "decode", "split"};

void plan_fact_names(StrBuf *out, unsigned facts) {
  for (unsigned k = 0, first = 1; k < sizeof fact_names / sizeof *fact_names; k++)
    if (facts & 1u << k) {
      sb_printf(out, "%s%s", first ? "" : ",", fact_names[k]);
      first = 0;
    }
}

static void put_facts(StrBuf *out, const char *key, unsigned facts) {
  sb_printf(out, " %s=", key);
  if (!facts) sb_putc(out, '-');
  plan_fact_names(out, facts);
}

static void put_dim(StrBuf *out, PlanDim d) {
  if (d.kind == PD_CONST) sb_printf(out, "%d", d.n);
  else if (d.kind == PD_NUMEL) sb_printf(out, "numel:%d", d.n);
  else if (d.kind == PD_SQ_PAD || d.kind == PD_SKV_PAD)
    sb_printf(out, "%s:%d", d.kind == PD_SQ_PAD ? "Sq_pad" : "Skv_pad", d.n);
  else sb_puts(out, dim_names[d.kind]);
}

void plan_write(StrBuf *out, const GraphPlan *plans, int n) {
  sb_printf(out, "attnc-plan %d\n", PLAN_FORMAT);
  for (int gi = 0; gi < n; gi++) {
    const GraphPlan *gp = &plans[gi];
    sb_printf(out, "graph %s sep=%d,%d,%d,%d decode=%d wave=%d\n", gp->graph, gp->sep_cells[0],
              gp->sep_cells[1], gp->sep_cells[2], gp->sep_cells[3], gp->decode_bn,
              gp->decode_wave);
    for (int pi = 0; pi < PLAN_NPASSES; pi++) {
      const PassPlan *p = &gp->pass[pi];
      if (!p->present) continue;
      sb_printf(out, "pass %s det=%d", pass_names[pi], p->det_ok ? 1 : 0);
      put_facts(out, "need", p->need);
      sb_putc(out, '\n');
      for (int k = 0; k < p->nslices; k++) {
        const PlanSlice *s = &p->slices[k];
        sb_printf(out, "  slice %s bind=%s slot=%d elem=%d dims=", s->name, bind_names[s->bind],
                  s->slot, s->elem);
        for (int d = 0; d < 4; d++) {
          if (d) sb_putc(out, ',');
          put_dim(out, s->dims[d]);
        }
        sb_printf(out, " zero=%s", zero_names[s->zero]);
        put_facts(out, "need", s->need);
        put_facts(out, "deny", s->deny);
        sb_putc(out, '\n');
      }
      for (int k = 0; k < p->nsteps; k++) {
        const PlanStep *s = &p->steps[k];
        sb_printf(out, "  step %s entry=%s threads=%d smem=%d grid=", s->role, s->entry,
                  s->threads, s->smem_bytes);
        put_dim(out, s->grid.x0);
        sb_printf(out, "/%d", s->grid.div0);
        if (s->grid.div1 > 0) {
          sb_putc(out, '+');
          put_dim(out, s->grid.x1);
          sb_printf(out, "/%d", s->grid.div1);
        }
        if (s->grid.mul2 > 0) {
          sb_printf(out, "+%d*", s->grid.mul2);
          put_dim(out, s->grid.x2);
        }
        sb_putc(out, ',');
        put_dim(out, s->grid.y);
        sb_putc(out, ',');
        put_dim(out, s->grid.z);
        sb_printf(out, " persistent=%d", s->persistent ? 1 : 0);
        if (s->entry_waits) sb_puts(out, " waits=1");
        put_facts(out, "need", s->need);
        put_facts(out, "deny", s->deny);
        sb_putc(out, '\n');
        for (int m = 0; m < s->nmaps; m++) {
          const PlanMap *x = &s->maps[m];
          sb_printf(out, "    map index=%d slot=%d dtype=%s box=%dx%d what=%s\n", x->index,
                    x->slot, dtype_name(x->dtype), x->box_cols, x->box_rows, x->what);
        }
      }
    }
  }
  sb_puts(out, "end\n");
}

/* -------------------------------------------------------------- reading */

/* One line cut into whitespace-separated words (at most 16). */
typedef struct PlanLine {
  char *w[16];
  int n;
} PlanLine;

typedef struct PlanReader {
  Arena *a;
  StrBuf *err;
  int lineno;
} PlanReader;

static int rd_fail(PlanReader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rd_fail(PlanReader *r, const char *fmt, ...) {
  sb_printf(r->err, "launch plan, line %d: ", r->lineno);
  va_list ap;
  va_start(ap, fmt);
  sb_vprintf(r->err, fmt, ap);
  va_end(ap);
  return -1;
}

/* A decimal integer in [lo, hi]. */
static int rd_int(PlanReader *r, const char *s, long lo, long hi, long *out) {
  char *end;
  if (!*s || !(isdigit((unsigned char)*s) || *s == '-')) return rd_fail(r, "'%s' is no number", s);
  long v = strtol(s, &end, 10);
  if (*end || v < lo || v > hi) return rd_fail(r, "'%s' is outside [%ld, %ld]", s, lo, hi);
  *out = v;
  return 0;
}

/* The value of field `key` among the words after the first; NULL when absent. */
static const char *rd_field(const PlanLine *l, const char *key) {
  size_t n = strlen(key);
  for (int k = 1; k < l->n; k++)
    if (!strncmp(l->w[k], key, n) && l->w[k][n] == '=') return l->w[k] + n + 1;
  return NULL;
}

static int rd_need_int(PlanReader *r, const PlanLine *l, const char *key, long lo, long hi,
                       long *out) {
  const char *v = rd_field(l, key);
  if (!v) return rd_fail(r, "'%s' has no %s=", l->w[0], key);
  return rd_int(r, v, lo, hi, out);
}

static int rd_name(PlanReader *r, const char *s, const char **out) {
  if (!is_c_ident(s)) return rd_fail(r, "'%s' is not an identifier", s);
  *out = arena_strdup(r->a, s);
  return 0;
}

static int rd_dim(PlanReader *r, const char *s, PlanDim *d) {
  for (int k = 0; k < (int)(sizeof dim_names / sizeof *dim_names); k++)
    if (dim_names[k] && !strcmp(s, dim_names[k])) {
      *d = (PlanDim){(PlanDimKind)k, 0};
      return 0;
    }
  long v;
  if (!strncmp(s, "numel:", 6)) {
    if (rd_int(r, s + 6, 0, ATTN_MAX_TENSORS - 1, &v)) return -1;
    *d = (PlanDim){PD_NUMEL, (int)v};
    return 0;
  }
  if (!strncmp(s, "Sq_pad:", 7) || !strncmp(s, "Skv_pad:", 8)) {
    const bool q = s[1] == 'q';
    if (rd_int(r, s + (q ? 7 : 8), 1, 1 << 12, &v)) return -1;
    *d = (PlanDim){q ? PD_SQ_PAD : PD_SKV_PAD, (int)v};
    return 0;
  }
  if (rd_int(r, s, 1, 1 << 20, &v)) return -1;
  *d = (PlanDim){PD_CONST, (int)v};
  return 0;
}

static int rd_enum(PlanReader *r, const char *s, const char *const *names, int n, int *out) {
  for (int k = 0; k < n; k++)
    if (names[k] && !strcmp(s, names[k])) {
      *out = k;
      return 0;
    }
  return rd_fail(r, "unknown value '%s'", s ? s : "");
}

/* "-" or names of facts, comma-separated. */
static int rd_facts(PlanReader *r, const PlanLine *l, const char *key, unsigned *out) {
  const char *v = rd_field(l, key);
  *out = 0;
  if (!v) return rd_fail(r, "'%s' has no %s=", l->w[0], key);
  if (!strcmp(v, "-")) return 0;
  char buf[64];
  snprintf(buf, sizeof buf, "%s", v);
  char *save = NULL;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int k = 0;
    if (rd_enum(r, t, fact_names, (int)(sizeof fact_names / sizeof *fact_names), &k)) return -1;
    *out |= 1u << k;
  }
  return 0;
}

static int rd_conditions(PlanReader *r, const PlanLine *l, unsigned *need, unsigned *deny) {
  return rd_facts(r, l, "need", need) || rd_facts(r, l, "deny", deny) ? -1 : 0;
}

static int rd_slice(PlanReader *r, const PlanLine *l, PassPlan *p) {
  if (p->nslices == PLAN_MAX_SLICES) return rd_fail(r, "more than %d slices", PLAN_MAX_SLICES);
  PlanSlice *s = &p->slices[p->nslices];
  memset(s, 0, sizeof *s);
  long slot, elem;
  int bind = 0, zero = 0;
  if (l->n < 2 || rd_name(r, l->w[1], &s->name) ||
      rd_enum(r, rd_field(l, "bind"), bind_names, (int)(sizeof bind_names / sizeof *bind_names),
              &bind) ||
      rd_need_int(r, l, "slot", -1, ATTN_MAX_TENSORS - 1, &slot) ||
      rd_need_int(r, l, "elem", 1, 4 * 1024, &elem) ||
      rd_enum(r, rd_field(l, "zero"), zero_names, (int)(sizeof zero_names / sizeof *zero_names),
              &zero) ||
      rd_conditions(r, l, &s->need, &s->deny))
    return -1;
  s->bind = (PlanBind)bind;
  s->zero = (PlanZero)zero;
  s->slot = (int)slot;
  s->elem = (int)elem;
  if ((s->bind == PB_SLOT) != (s->slot >= 0))
    return rd_fail(r, "slice '%s': a slot exactly when bound to one", s->name);
  const char *dims = rd_field(l, "dims");
  if (!dims) return rd_fail(r, "slice '%s' has no dims=", s->name);
  char buf[128];
  snprintf(buf, sizeof buf, "%s", dims);
  char *save = NULL, *tok = strtok_r(buf, ",", &save);
  for (int d = 0; d < 4; d++, tok = strtok_r(NULL, ",", &save))
    if (!tok || rd_dim(r, tok, &s->dims[d])) return tok ? -1 : rd_fail(r, "dims need four sizes");
  if (tok) return rd_fail(r, "dims take four sizes");
  p->nslices++;
  return 0;
}

/* "Sq/128+Sq/64,H,B", "Skv/64+Sq/64+2*B,H,1": x's terms SIZE/DIVISOR
 * (one or two), then at most one MUL*SIZE. */
static int rd_grid(PlanReader *r, const char *s, PlanGrid *g) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", s ? s : "");
  char *parts[3], *save = NULL;
  int n = 0;
  for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    if (n == 3) return rd_fail(r, "a grid has three dimensions");
    parts[n++] = t;
  }
  if (n != 3) return rd_fail(r, "a grid has three dimensions");
  char *terms[3] = {parts[0], NULL, NULL};
  for (int k = 1; k < 3; k++) {
    char *plus = strchr(terms[k - 1], '+');
    if (!plus) break;
    *plus++ = '\0';
    terms[k] = plus;
  }
  if (strchr(terms[2] ? terms[2] : "", '+')) return rd_fail(r, "grid x has at most three terms");
  PlanDim *dims[2] = {&g->x0, &g->x1};
  int *divs[2] = {&g->div0, &g->div1};
  for (int k = 0, nd = 0; k < 3 && terms[k]; k++) {
    char *star = strchr(terms[k], '*');
    if (star && k > 0 && (k == 2 || !terms[k + 1])) { /* the last term: MUL*SIZE */
      long mul;
      *star = '\0';
      if (rd_int(r, terms[k], 1, 64, &mul) || rd_dim(r, star + 1, &g->x2)) return -1;
      g->mul2 = (int)mul;
      continue;
    }
    char *slash = strchr(terms[k], '/');
    long div;
    if (!slash || nd == 2) return rd_fail(r, "grid x is SIZE/DIVISOR[+SIZE/DIVISOR][+MUL*SIZE]");
    *slash = '\0';
    if (rd_dim(r, terms[k], dims[nd]) || rd_int(r, slash + 1, 1, 1 << 20, &div)) return -1;
    *divs[nd++] = (int)div;
  }
  return rd_dim(r, parts[1], &g->y) || rd_dim(r, parts[2], &g->z) ? -1 : 0;
}

static int rd_step(PlanReader *r, const PlanLine *l, PassPlan *p) {
  if (p->nsteps == PLAN_MAX_STEPS) return rd_fail(r, "more than %d steps", PLAN_MAX_STEPS);
  PlanStep *s = &p->steps[p->nsteps];
  memset(s, 0, sizeof *s);
  long threads, smem, pers, waits = 0;
  const char *entry = rd_field(l, "entry");
  if (l->n < 2 || rd_name(r, l->w[1], &s->role) || !entry || rd_name(r, entry, &s->entry) ||
      rd_need_int(r, l, "threads", 1, 1024, &threads) ||
      rd_need_int(r, l, "smem", 0, 1 << 20, &smem) ||
      rd_need_int(r, l, "persistent", 0, 1, &pers) || rd_grid(r, rd_field(l, "grid"), &s->grid) ||
      rd_conditions(r, l, &s->need, &s->deny) ||
      (rd_field(l, "waits") && rd_need_int(r, l, "waits", 0, 1, &waits)))
    return -1;
  s->entry_waits = waits != 0;
  s->threads = (int)threads;
  s->smem_bytes = (int)smem;
  s->persistent = pers != 0;
  p->nsteps++;
  return 0;
}

static int rd_map(PlanReader *r, const PlanLine *l, PassPlan *p) {
  if (p->nsteps == 0) return rd_fail(r, "a map before any step");
  PlanStep *s = &p->steps[p->nsteps - 1];
  if (s->nmaps == PLAN_MAX_MAPS) return rd_fail(r, "more than %d maps", PLAN_MAX_MAPS);
  PlanMap *m = &s->maps[s->nmaps];
  long index, slot, cols, rows;
  const char *dt = rd_field(l, "dtype"), *box = rd_field(l, "box"), *what = rd_field(l, "what");
  if (rd_need_int(r, l, "index", 0, PLAN_MAX_MAPS - 1, &index) ||
      rd_need_int(r, l, "slot", 0, ATTN_MAX_TENSORS - 1, &slot))
    return -1;
  if (!what) return rd_fail(r, "a map has no what=");
  if (rd_name(r, what, &m->what)) return -1;
  m->dtype = DT_NONE;
  for (int t = 1; t < DT_COUNT && dt; t++)
    if (!strcmp(dt, dtype_name((DType)t))) m->dtype = (DType)t;
  if (m->dtype != DT_BF16 && m->dtype != DT_F16 && m->dtype != DT_F32 && !dtype_is_fp8(m->dtype))
    return rd_fail(r, "a tensor map is bf16, f16, f32, e4m3 or e5m2, not '%s'", dt ? dt : "");
  char *x = box ? strchr(box, 'x') : NULL;
  if (!x) return rd_fail(r, "a map's box is COLSxROWS");
  char cbuf[16];
  snprintf(cbuf, sizeof cbuf, "%.*s", (int)(x - box), box);
  if (rd_int(r, cbuf, 1, 256, &cols) || rd_int(r, x + 1, 1, 256, &rows)) return -1;
  m->index = (int)index;
  m->slot = (int)slot;
  m->box_cols = (int)cols;
  m->box_rows = (int)rows;
  s->nmaps++;
  return 0;
}

int plan_read(const char *text, Arena *a, GraphPlan **plans, int *n, StrBuf *err) {
  PlanReader r = {.a = a, .err = err};
  *plans = NULL;
  *n = 0;
  int cap = 0;
  GraphPlan *gp = NULL;
  PassPlan *pass = NULL;
  bool ended = false;
  const char *p = text ? text : "";
  while (*p && !ended) {
    const char *eol = strchr(p, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    r.lineno++;
    if (len > (1u << 20)) return rd_fail(&r, "line too long");
    char *line = arena_strndup(a, p, len);
    p += len + (eol ? 1 : 0);
    PlanLine l = {.n = 0};
    char *save = NULL;
    for (char *w = strtok_r(line, " \t", &save); w; w = strtok_r(NULL, " \t", &save)) {
      if (l.n == 16) return rd_fail(&r, "too many fields");
      l.w[l.n++] = w;
    }
    if (l.n == 0) continue;
    const char *kind = l.w[0];
    if (r.lineno == 1) {
      long v;
      if (strcmp(kind, "attnc-plan") || l.n != 2 || rd_int(&r, l.w[1], 0, 1 << 20, &v))
        return rd_fail(&r, "not a launch plan");
      if (v != PLAN_FORMAT)
        return rd_fail(&r, "plan format %ld; this libattn reads %d", v, PLAN_FORMAT);
      continue;
    }
    if (!strcmp(kind, "end")) {
      ended = true;
    } else if (!strcmp(kind, "graph")) {
      if (*n == cap) {
        cap = cap ? 2 * cap : 4;
        GraphPlan *grown = arena_alloc(a, (size_t)cap * sizeof *grown);
        if (*n) memcpy(grown, *plans, (size_t)*n * sizeof *grown);
        *plans = grown;
      }
      gp = &(*plans)[(*n)++];
      memset(gp, 0, sizeof *gp);
      pass = NULL;
      const char *sep = rd_field(&l, "sep");
      if (l.n < 2 || rd_name(&r, l.w[1], &gp->graph) || !sep ||
          sscanf(sep, "%d,%d,%d,%d", &gp->sep_cells[0], &gp->sep_cells[1], &gp->sep_cells[2],
                 &gp->sep_cells[3]) != 4)
        return rd_fail(&r, "a graph line is `graph NAME sep=A,B,C,D decode=N wave=W`");
      for (int k = 0; k < SEP_NREGIONS; k++)
        if (gp->sep_cells[k] < 0 || gp->sep_cells[k] > 1024)
          return rd_fail(&r, "a range cell of %d bytes", gp->sep_cells[k]);
      const char *dec = rd_field(&l, "decode");
      char *end = NULL;
      const long bn = dec && isdigit((unsigned char)*dec) ? strtol(dec, &end, 10) : -1;
      if (bn < 0 || *end || bn > 256)
        return rd_fail(&r, "a graph's decode= is KEYS, 0 to 256 (0 without a decode kernel)");
      gp->decode_bn = (int)bn;
      long wave;
      if (rd_need_int(&r, &l, "wave", 0, 64, &wave)) return -1;
      if ((wave > 0) != (bn > 0))
        return rd_fail(&r, "a graph's wave= is 1 to 64 with a decode kernel, else 0");
      gp->decode_wave = (int)wave;
    } else if (!gp) {
      return rd_fail(&r, "'%s' before any graph", kind);
    } else if (!strcmp(kind, "pass")) {
      int which = 0;
      long det;
      unsigned need;
      if (l.n < 2 || rd_enum(&r, l.w[1], pass_names, PLAN_NPASSES, &which) ||
          rd_need_int(&r, &l, "det", 0, 1, &det) || rd_facts(&r, &l, "need", &need))
        return -1;
      pass = &gp->pass[which];
      if (pass->present) return rd_fail(&r, "pass %s twice", l.w[1]);
      pass->present = true;
      pass->det_ok = det != 0;
      pass->need = need;
    } else if (!pass) {
      return rd_fail(&r, "'%s' before any pass", kind);
    } else if (!strcmp(kind, "slice")) {
      if (rd_slice(&r, &l, pass)) return -1;
    } else if (!strcmp(kind, "step")) {
      if (rd_step(&r, &l, pass)) return -1;
    } else if (!strcmp(kind, "map")) {
      if (rd_map(&r, &l, pass)) return -1;
    } else {
      return rd_fail(&r, "unknown record '%s'", kind);
    }
  }
  if (r.lineno == 0) return rd_fail(&r, "not a launch plan (no text)");
  if (!ended) return rd_fail(&r, "the plan has no end");
  return 0;
}
