/*
 * match_bwd.c: decides whether the backward template (templates/
 * bwd_sm80.cuh) can run a graph's derived backward, and where its extra
 * tensors live in the parameter block.
 *
 * The template recomputes P from the forward's scores and the saved lse,
 * so the graph must output lse; it holds K, V, Q and dO tiles of 64 rows
 * in shared memory, so head dims are 64 or 128; and dBias (a gradient
 * summed into a tensor other than q, k, v) is not accumulated yet. Each
 * refusal is a located error naming what to change.
 */
#include <string.h>

#include "attn_abi.h"
#include "attnc.h"

static int find_o_output(const IrGraph *g) {
  for (int k = 0; k < g->noutputs; k++)
    if (g->outputs[k].value == g->pv) return k;
  return -1;
}

static int find_lse_output(const IrGraph *g) {
  for (int k = 0; k < g->noutputs; k++) {
    const IrNode *v = g->outputs[k].value;
    if (v->op == IR_LOGSUMEXP && v->src[0] == g->softmax->src[0]) return k;
  }
  return -1;
}

int bwd_slots(const IrGraph *g, BwdSlots *s) {
  int o = find_o_output(g), lse = find_lse_output(g);
  s->o = o >= 0 ? g->outputs[o].tensor : -1;
  s->lse = lse >= 0 ? g->outputs[lse].tensor : -1;
  int next = g->ntensors;
  s->dout = next++;
  s->delta = next++;
  s->dqa = next++;
  s->dq = g->tensors[g->q].grad ? next++ : -1;
  s->dk = g->tensors[g->k].grad ? next++ : -1;
  s->dv = g->tensors[g->v].grad ? next++ : -1;
  s->dka = s->dk >= 0 ? next++ : -1;
  s->dva = s->dv >= 0 ? next++ : -1;
  s->end = next;
  return s->o >= 0 && s->lse >= 0 ? 0 : -1;
}

int bwd_unsupported_grad(const IrGraph *g) {
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].grad && t != g->q && t != g->k && t != g->v) return t;
  return -1;
}

static bool head_dim_ok(int d) { return d == 64 || d == 128; }

BwdSpec *match_bwd(const KernelSpec *fwd, Arena *a, Diag *d) {
  const IrGraph *g = fwd->g;
  int bad = bwd_unsupported_grad(g);
  if (bad >= 0) {
    diag_error(d, g->tensors[bad].loc,
               "graph '%s': the GPU backward computes the gradients of q, k and v only; "
               "'%s' is declared with grad (dBias is not accumulated yet)",
               g->name, g->tensors[bad].name);
    return NULL;
  }
  BwdGraph *bg = bwd_derive(g, a, d);
  if (!bg) return NULL;
  BwdSpec *s = arena_alloc(a, sizeof *s);
  s->g = g;
  s->bg = bg;
  if (bwd_slots(g, &s->slots) != 0) {
    diag_error(d, g->softmax->loc,
               "graph '%s' declares grad, so its forward must save the softmax's "
               "logsumexp: add `output lse = logsumexp(...)` of the softmax's input",
               g->name);
    return NULL;
  }
  const IrTensor *lse = &g->tensors[s->slots.lse];
  if (lse->ndims != 3 || lse->type != DT_F32) {
    diag_error(d, lse->loc,
               "graph '%s': the backward reads lse as f32[B, H, Sq]; '%s' is declared "
               "with %d dimensions", g->name, lse->name, lse->ndims);
    return NULL;
  }
  s->in_type = fwd->in_type;
  s->out_type = g->tensors[s->slots.o].type;
  s->d_qk = fwd->d_qk;
  s->d_v = fwd->d_v;
  if (!head_dim_ok(s->d_qk) || !head_dim_ok(s->d_v)) {
    diag_error(d, g->tensors[g->q].loc,
               "graph '%s': the backward template takes head dimensions 64 or 128; this "
               "graph has %d (q, k) and %d (v)", g->name, s->d_qk, s->d_v);
    return NULL;
  }
  if (s->slots.end > ATTN_MAX_TENSORS) {
    diag_error(d, g->loc,
               "graph '%s': its %d tensors and the backward's %d extra ones (dO, delta, "
               "accumulators, gradients) exceed the %d tensor slots of a kernel",
               g->name, g->ntensors, s->slots.end - g->ntensors, ATTN_MAX_TENSORS);
    return NULL;
  }
  /* bwd_sm80.cuh: 64 keys per CTA in four warps, 64-row query tiles; K, V,
   * Q, dO and dRaw^T tiles of 16-bit elements, then lse and delta. */
  s->threads = 128;
  s->block_n = 64;
  s->smem_bytes = 64 * (s->d_qk + s->d_v) * 2 * 2 + 64 * 64 * 2 + 2 * 64 * 4;
  return s;
}
