/* backward.c: what the backward checks before its plan runs (launch.c):
 * the graph has a GPU backward, its dO and gradients are bound (by name,
 * through bind.c, into the extra parameter slots bwd_slots assigns) with
 * the shapes of o, q, k, v and the biases, and the deterministic mode
 * exists for its head dims. The kernels, their grids and their f32
 * scratch (delta, dQ's accumulator, GQA's dK/dV accumulators, the bias
 * gradients') are the graph's backward plan (compiler/plan.c; `attnc plan`
 * shows it):
 *
 *   [prep]  [amax_init  convert8]  delta (also zeroes dQ's accumulator)  main  [convert]
 *   [convert_kv]
 *
 * (amax_init and convert8: the FP8 backward's, a grad block's amax outputs
 * zeroed and 16-bit copies of its FP8 tensors made.)
 *
 * Bias gradients (d<name>, BwdBiasMode): written directly by the main
 * kernel (rows zeroed by the delta pass first), or accumulated in an f32
 * scratch of the bias's shape that the convert pass writes out.
 *
 * Deterministic mode (attn_call_set_deterministic): no f32 atomics. The
 * dQ accumulator slot stays null, which tells the kernels; the main grid
 * gets ceil(Sq/64) more CTAs that compute dQ per query tile in key order;
 * GQA's dK/dV accumulators become per query head [B, H, Skv, D] (summed in
 * head order by convert_kv); accumulated bias gradients get a full f32
 * [B, H, Sq, Skv] scratch, one element per score, summed in a fixed order
 * by the convert pass. */
#include <stdio.h>
#include <string.h>

#include "rt.h"

/* The deterministic mode's ordered dQ tiles exist for head dims up to
 * 128 (bwd_sm90's split-D mode at 256 has none; the plan says so):
 * refused at once, by the call that asks for it, and again at launch. */
static attn_status bwd_check_det(attn_call *c) {
  const IrGraph *g = c->g->ir;
  const PassPlan *pp = &c->g->plan->pass[PLAN_BACKWARD];
  if (!pp->present || pp->det_ok || g->q < 0 || g->v < 0) return ATTN_SUCCESS; /* launch says why */
  if (bwd_is_fp8(g))
    return rt_fail(c->g->m->ctx, ATTN_ERROR_UNSUPPORTED,
                   "graph '%s': the FP8 backward has no deterministic mode yet "
                   "(attn_call_set_deterministic(call, 0) runs the default backward)", g->name);
  const int dqk = (int)g->tensors[g->q].dim_val[3], dv = (int)g->tensors[g->v].dim_val[3];
  return rt_fail(c->g->m->ctx, ATTN_ERROR_UNSUPPORTED,
                  "graph '%s': the deterministic backward takes head dimensions up to 128; "
                  "this graph has %d (q, k) and %d (v) (attn_call_set_deterministic(call, 0) "
                  "runs the default backward)", g->name, dqk, dv);
}

static attn_status call_set_deterministic_impl(attn_call *c, int on) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  rt_clear_error(c->g->m->ctx);
  attn_status st = on ? bwd_check_det(c) : ATTN_SUCCESS;
  if (st) return st;
  c->deterministic = on != 0;
  return ATTN_SUCCESS;
}

/* dO and each gradient: bound, and shaped like o / q / k / v / the bias
 * now (the forward's tensors may have been rebound since). A bias's kept
 * dimensions must span the problem (B, H, Sq or Skv): the kernels index
 * its gradient by the score element. */
static attn_status bwd_check_bound(attn_call *c, const BwdSlots *sl) {
  const IrGraph *g = c->g->ir;
  const BindState *b = &c->bind;
  int slot[4 + BWD_MAX_BIAS] = {sl->dout, sl->dq, sl->dk, sl->dv};
  int like[4 + BWD_MAX_BIAS] = {sl->o, g->q, g->k, g->v};
  for (int r = 0; r < sl->nbias; r++) {
    slot[4 + r] = sl->dbias[r];
    like[4 + r] = sl->bias[r];
    const int64_t want[5] = {0, b->params.B, b->params.H, b->params.Sq, b->params.Skv};
    for (int k = 0; k < g->tensors[sl->bias[r]].ndims; k++) {
      int ax = sl->bias_axis[r][k];
      int w = ax == DOM_B ? 1 : ax == DOM_H ? 2 : ax == DOM_I ? 3 : ax == DOM_J ? 4 : 0;
      if (w && b->shape[sl->bias[r]][k] != want[w])
        return rt_fail(c->g->m->ctx, ATTN_ERROR_UNSUPPORTED,
                        "graph '%s': the gradient of '%s' needs its dimension %d to be %lld "
                        "(the scores' %s), not %lld", g->name, g->tensors[sl->bias[r]].name, k,
                        (long long)want[w], w == 1 ? "batch" : w == 2 ? "heads" : w == 3 ? "Sq" : "Skv",
                        (long long)b->shape[sl->bias[r]][k]);
    }
  }
  for (int k = 0; k < sl->namax; k++) /* a grad block's amax outputs */
    if (!b->tensor_bound[sl->amax[k]])
      return rt_fail(c->g->m->ctx, ATTN_ERROR_INCOMPLETE,
                     "graph '%s': the backward needs output '%s' bound", g->name,
                     g->grad->amax[k].name);
  for (int r = 0; r < 4 + sl->nbias; r++) {
    if (slot[r] < 0) continue;
    const char *name = g->tensors[like[r]].name;
    if (!b->tensor_bound[slot[r]])
      return rt_fail(c->g->m->ctx, ATTN_ERROR_INCOMPLETE, "graph '%s': the backward needs %s 'd%s' bound",
                      g->name, r ? "output" : "tensor", name);
    for (int i = 0; i < 4; i++)
      if (b->shape[slot[r]][i] != b->shape[like[r]][i])
        return rt_fail(c->g->m->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                        "graph '%s': 'd%s' has size %lld in dimension %d, but '%s' has %lld",
                        g->name, name, (long long)b->shape[slot[r]][i], i, name,
                        (long long)b->shape[like[r]][i]);
  }
  return ATTN_SUCCESS;
}

/* Why the graph has no GPU backward, written into why; true when it has
 * one, with its slots in *sl. */
bool rt_backward_supported(const attn_graph *gr, BwdSlots *sl, char *why, size_t len) {
  const IrGraph *g = gr->ir;
  if (!bwd_has_grad(g)) {
    snprintf(why, len, "graph '%s' declares no grad, so it has no backward (add `grad q, k, v;`)",
             g->name);
    return false;
  }
  int bad = bwd_unsupported_grad(g);
  if (bad >= 0) {
    snprintf(why, len,
             "graph '%s': the GPU backward computes the gradients of q, k, v and of at most %d "
             "f32/bf16/f16 biases read as t[b, h, i, j]; '%s' (%s:%d:%d) is declared with grad",
             g->name, BWD_MAX_BIAS, g->tensors[bad].name,
             g->tensors[bad].loc.src ? g->tensors[bad].loc.src->name : "?",
             g->tensors[bad].loc.line, g->tensors[bad].loc.col);
    return false;
  }
  if (!gr->plan->pass[PLAN_BACKWARD].present) {
    snprintf(why, len, "graph '%s': the module holds no backward kernels for it", g->name);
    return false;
  }
  if (bwd_slots(g, sl) != 0 || sl->end > ATTN_MAX_TENSORS) {
    snprintf(why, len, "graph '%s' saves no lse for the backward", g->name);
    return false;
  }
  return true;
}

attn_status rt_backward_ready(attn_call *c) {
  char why[512];
  BwdSlots sl;
  if (!rt_backward_supported(c->g, &sl, why, sizeof why))
    return rt_fail(c->g->m->ctx, ATTN_ERROR_UNSUPPORTED, "%s", why);
  attn_status st = bind_finish(&c->bind, &c->g->m->ctx->error);
  if (st || (st = bwd_check_bound(c, &sl))) return st;
  return c->deterministic ? bwd_check_det(c) : ATTN_SUCCESS;
}

attn_status attn_call_set_deterministic(attn_call *c, int on) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(c->g->m->ctx, call_set_deterministic_impl(c, on));
}
