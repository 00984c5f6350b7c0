/*
 * match_bwd.c: decides whether the backward templates (templates/
 * bwd_sm80.cuh, and bwd_sm90.cuh's main kernel on sm_90a) can run a
 * graph's derived backward, which main kernel runs it, and where its
 * extra tensors live in the parameter block.
 *
 * The template recomputes P from the forward's scores and the saved lse,
 * so the graph must output lse; it holds K, V, Q and dO tiles of 64 rows
 * in shared memory, in tiles of 64 or 128 columns (256 on sm_90a:
 * attn_bwd_head_tile) holding any head dim that is a multiple of 8; a bias gradient (a grad
 * tensor other than q, k, v) needs the bias read as t[b, h, i, j] (some
 * indices left out, literal-1 dims broadcast) and is written directly,
 * through f32 atomics, or summed per warp (BwdBiasMode). Each refusal is a
 * located error naming what to change.
 */
#include <string.h>

#include "attn_abi.h"
#include "attn_layout.h"
#include "attnc.h"

static int find_lse_output(const IrGraph *g) {
  for (int k = 0; k < g->noutputs; k++) {
    const IrNode *v = g->outputs[k].value;
    if (v->op == IR_LOGSUMEXP && v->src[0] == g->softmax->src[0]) return k;
  }
  return -1;
}

/* How grad tensor t is read: every load of it a bias read the same way
 * (bwd_bias_axes). false when it is never read or read two ways. */
static bool bias_read(const IrGraph *g, int t, int axis[IR_MAX_RANK], unsigned *keep) {
  bool seen = false;
  for (int id = 0; id < g->nnodes; id++) {
    const IrNode *n = g->nodes[id];
    if (n->op != IR_LOAD || n->ref != t) continue;
    int ax[IR_MAX_RANK] = {0, 0, 0, 0};
    unsigned kp = 0;
    if (!bwd_bias_axes(g, n, ax, &kp)) return false;
    if (seen && memcmp(ax, axis, sizeof ax)) return false;
    memcpy(axis, ax, sizeof ax);
    *keep = kp;
    seen = true;
  }
  return seen;
}

/* A block value that is its leaf times or over values fixed for the call. */
static bool grad_value_linear(const IrGradBlock *gb, int which) {
  return !gb->v[which].leaf || ir_scales(gb->v[which].value, gb->v[which].leaf, ~0u);
}

static bool bias_dtype_ok(DType t) { return t == DT_F32 || t == DT_BF16 || t == DT_F16; }

/* The grad tensors other than q, k, v, in tensor order; -1 when one of
 * them cannot be computed (its index in *bad). */
static int bias_list(const IrGraph *g, BwdSlots *s, int *bad) {
  s->nbias = 0;
  *bad = -1;
  for (int t = 0; t < g->ntensors; t++) {
    if (!g->tensors[t].grad || t == g->q || t == g->k || t == g->v) continue;
    int axis[IR_MAX_RANK] = {0, 0, 0, 0};
    unsigned keep = 0;
    /* The softmax's sink read directly (bwd_derive refuses other reads of
     * it): a gradient over b and h at most, summed by the dsink kernel. */
    const IrNode *sk = ir_sink(g->softmax);
    const bool sink = sk && sk->op == IR_LOAD && sk->ref == t;
    if (s->nbias == BWD_MAX_BIAS || !bias_dtype_ok(g->tensors[t].type) ||
        !(sink ? bwd_bias_axes(g, sk, axis, &keep) && !(keep & (DOM_I | DOM_J))
               : bias_read(g, t, axis, &keep))) {
      *bad = t;
      return -1;
    }
    int r = s->nbias++;
    s->bias[r] = t;
    memcpy(s->bias_axis[r], axis, sizeof axis);
    s->bias_keep[r] = keep;
    const IrTensor *it = &g->tensors[t];
    bool direct = it->ndims == 4 && axis[0] == DOM_B && axis[1] == DOM_H && axis[2] == DOM_I &&
                  axis[3] == DOM_J;
    s->bias_mode[r] = sink     ? BWD_BIAS_SINK
                      : direct ? BWD_BIAS_DIRECT
                      : (keep & (DOM_I | DOM_J)) == 0 ? BWD_BIAS_REDUCED
                                                      : BWD_BIAS_ATOMIC;
  }
  return 0;
}

DType bwd_grad_type(const IrGraph *g, int which) {
  const IrGradBlock *gb = g->grad;
  if (gb && gb->v[which].type != DT_NONE) return gb->v[which].type;
  if (which != IR_GRAD_DO) {
    const int t = which == IR_GRAD_DQ ? g->q : which == IR_GRAD_DK ? g->k : g->v;
    return g->tensors[t].type;
  }
  const int o = ir_attention_output(g);
  return dtype_is_fp8(g->tensors[g->q].type) && o >= 0 ? g->tensors[g->outputs[o].tensor].type
                                                       : g->tensors[g->q].type;
}

DType bwd_tensor_grad_type(const IrGraph *g, int t) {
  if (t == g->v) return bwd_grad_type(g, IR_GRAD_DV);
  if (t == g->k) return bwd_grad_type(g, IR_GRAD_DK);
  if (t == g->q) return bwd_grad_type(g, IR_GRAD_DQ);
  return g->tensors[t].type;
}

bool bwd_is_fp8(const IrGraph *g) {
  const int ao = ir_attention_output(g);
  const IrPChain pc = g->pv && g->softmax ? ir_p_chain(g) : (IrPChain){0};
  return dtype_is_fp8(g->tensors[g->q].type) || dtype_is_fp8(g->tensors[g->k].type) ||
         dtype_is_fp8(g->tensors[g->v].type) ||
         (ao >= 0 && (dtype_is_fp8(g->tensors[g->outputs[ao].tensor].type) ||
                      g->outputs[ao].value != g->pv)) ||
         pc.scale || pc.round || g->grad;
}

int bwd_slots(const IrGraph *g, BwdSlots *s) {
  int o = ir_attention_output(g), lse = find_lse_output(g);
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
  int bad;
  if (bias_list(g, s, &bad)) s->nbias = 0;
  for (int r = 0; r < s->nbias; r++) {
    s->dbias[r] = next++;
    s->dbias_acc[r] = bwd_bias_accumulated(s->bias_mode[r]) ? next++ : -1;
  }
  s->q16 = dtype_is_fp8(g->tensors[g->q].type) ? next++ : -1;
  s->k16 = dtype_is_fp8(g->tensors[g->k].type) ? next++ : -1;
  s->v16 = dtype_is_fp8(g->tensors[g->v].type) ? next++ : -1;
  s->do16 = dtype_is_fp8(bwd_grad_type(g, IR_GRAD_DO)) ? next++ : -1;
  s->namax = g->grad ? g->grad->namax : 0;
  if (s->namax > BWD_MAX_AMAX) s->namax = BWD_MAX_AMAX; /* (ir_grad.c refuses more) */
  for (int r = 0; r < s->namax; r++) s->amax[r] = next++;
  s->end = next;
  return s->o >= 0 && s->lse >= 0 ? 0 : -1;
}

int bwd_sink_entry(const BwdSlots *s) {
  for (int r = 0; r < s->nbias; r++)
    if (s->bias_mode[r] == BWD_BIAS_SINK) return r;
  return -1;
}

int bwd_unsupported_grad(const IrGraph *g) {
  BwdSlots s;
  int bad;
  bias_list(g, &s, &bad);
  return bad;
}

IrNode *bwd_ds_split(const BwdSpec *s, IrNode **outer, bool *over, int *n) {
  const IrGradBlock *gb = s->g->grad;
  IrNode *inner = gb ? gb->v[IR_GRAD_DS].value : NULL;
  const bool bias_reads_ds = s->slots.nbias - (bwd_sink_entry(&s->slots) >= 0) > 0;
  *n = 0;
  /* (A factor fixed for the call has no axes, so it reads no leaf.) */
  while (inner && !bias_reads_ds && *n < 16) {
    if (inner->op == IR_MUL && inner->src[1]->dom == 0) {
      outer[*n] = inner->src[1], over[(*n)++] = false, inner = inner->src[0];
    } else if (inner->op == IR_MUL && inner->src[0]->dom == 0) {
      outer[*n] = inner->src[0], over[(*n)++] = false, inner = inner->src[1];
    } else if (inner->op == IR_DIV && inner->src[1]->dom == 0) {
      outer[*n] = inner->src[1], over[(*n)++] = true, inner = inner->src[0];
    } else {
      break;
    }
  }
  return inner;
}

/* Whether x depends on tensor data (a score, an input or a load) rather
 * than on indices, dims and scalars alone; deep expressions count as
 * data (a bound on the walk: the conditions in question are small). */
static bool reads_data(const IrNode *x, int depth) {
  if (depth > 32 || x->op == IR_QK || x->op == IR_PV || x->op == IR_LOAD || x->op == IR_INPUT)
    return true;
  for (int k = 0; k < x->nsrc; k++)
    if (reads_data(x->src[k], depth + 1)) return true;
  return false;
}

/* Whether x is dS itself, or masks of it: where(c, x', 0) or where(c, 0,
 * x') of such an x' (a selection keeps dS's FP8 values FP8); by_index:
 * every condition c on indices alone (a mask's where(j <= i, dS, 0), not
 * max(s, c)'s where(s > c, dS, 0)). */
static bool selects_ds(const IrNode *x, const IrNode *ds, bool by_index) {
  if (x == ds) return true;
  if (x->op != IR_WHERE || (by_index && reads_data(x->src[0], 0))) return false;
  const IrNode *a = x->src[1], *b = x->src[2];
  const bool a0 = a->op == IR_CONST && a->fval == 0.0, b0 = b->op == IR_CONST && b->fval == 0.0;
  return (b0 && selects_ds(a, ds, by_index)) || (a0 && selects_ds(b, ds, by_index));
}

const char *bwd_fp8_mma_refusal(const BwdSpec *s, DType *ds8) {
  const IrGraph *g = s->g;
  *ds8 = DT_NONE;
  if (!s->fp8 || !s->sm90 || s->split_d) return "it is bwd_sm90's, for the FP8 backward";
  if (s->d_qk != 128 || s->d_v != 128) return "it takes head dims of 128";
  if (!dtype_is_fp8(g->tensors[g->q].type) || !dtype_is_fp8(g->tensors[g->k].type) ||
      !dtype_is_fp8(g->tensors[g->v].type) || !dtype_is_fp8(bwd_grad_type(g, IR_GRAD_DO)))
    return "it takes FP8 q, k, v and dO";
  if (!dtype_is_fp8(s->bg->p_round)) return "it takes P rounded to FP8 before p @ v";
  if (s->slots.nbias > 0) return "it computes no bias or sink gradient";
  if (!s->bg->draw || !selects_ds(s->bg->draw, s->bg->ds, false))
    return "it takes a score whose gradient only masks dS (no softcap or other function)";
  IrNode *outer[16];
  bool over[16];
  int n;
  const IrNode *inner = bwd_ds_split(s, outer, over, &n);
  if (!inner || inner->op != IR_CAST || !dtype_is_fp8(inner->type))
    return "it takes dS's value as an FP8 rounding, times or over values fixed for the call";
  /* ... of dS itself times or over such values, so the rounding's
   * argument is a dS, 0 where dS is (bwd80_ds: no test per element, and
   * a folded into dP's factor and delta). */
  const IrNode *arg = inner->src[0];
  while ((arg->op == IR_MUL && (arg->src[0]->dom == 0 || arg->src[1]->dom == 0)) ||
         (arg->op == IR_DIV && arg->src[1]->dom == 0))
    arg = arg->op == IR_MUL && arg->src[0]->dom == 0 ? arg->src[1] : arg->src[0];
  if (arg != s->g->grad->v[IR_GRAD_DS].leaf)
    return "it takes dS's value as an FP8 rounding of dS times or over values fixed for the call";
  *ds8 = inner->type;
  return NULL;
}


/* Whether bwd_sm90's wide mode (D 64, 128-query tiles) keeps its wgmma
 * pipelined: only for graphs whose dRaw merely masks dS by indices, whose masks read
 * no tensor and are tile-classified (affine, separable or disjunctions of
 * affine conjunctions), and which take no bias gradient. Anything more (a padding or
 * document mask's keep bits, a log-sigmoid or softcap score, a bias
 * gradient) and ptxas serialized every wgmma of the wide kernel (C7511,
 * C7514, C7520: tools/compile_sweep.py, session 26), which the 64-query
 * kernel does not; wide mode was worth 8% where it fits (bench/NOTES-sm90.md,
 * session 8). A dRaw that masks dS by the score's value (`max(s, c)`,
 * `min`, a clamp: where(s > c, dS, 0)) serialized it too under most masks
 * (C7511, C7514 with causal-and-window, window and causal-or-sink masks,
 * and a clamp under a causal one; compile sweep seed 146, session 38;
 * tests/nvrtc/bwd_d64_clamp_window.attn). */
static bool bwd_wide_fits(const BwdSpec *s, const KernelSpec *fwd, Arena *a) {
  if (s->slots.nbias - (bwd_sink_entry(&s->slots) >= 0) > 0) return false; /* (a sink's fits) */
  if (s->bg->draw && !selects_ds(s->bg->draw, s->bg->ds, true)) return false;
  /* Which nodes read a tensor below them (ids are a topological order). */
  const IrGraph *g = fwd->g;
  bool *loads = arena_alloc(a, (size_t)(g->nnodes + 1) * sizeof *loads); /* zeroed */
  for (int id = 0; id < g->nnodes; id++) {
    const IrNode *n = g->nodes[id];
    loads[id] = n->op == IR_LOAD;
    for (int k = 0; k < n->nsrc && !loads[id]; k++) loads[id] = loads[n->src[k]->id];
  }
  for (int m = 0; m < fwd->nmasks; m++) {
    const MaskTerm *t = &fwd->masks[m];
    if (loads[t->cond->id]) return false;
    /* A general predicate (not affine, not separable, not a disjunction of
     * affine conjunctions) is evaluated per element: `i % 2 == 0` made
     * ptxas serialize the wide kernel too (C7511, compile sweep seed 31),
     * `(i + j) % 3 == 0` did not. Rather than trust which, none. */
    if (!t->affine && !t->sep && t->nalt == 0) return false;
  }
  return true;
}

/* Which main kernel (attnc.h, match_bwd): the forward's choice of the
 * Hopper template says the target is sm_90a; the bwd_template option
 * overrides it (the library never fails on a tuning knob: other values
 * are the default). */
static bool bwd_use_sm90(const KernelSpec *fwd, const CompileOptions *o) {
  if (o->bwd_template == 80) return false;
  if (o->bwd_template >= 90 && o->bwd_template <= 95) return fwd->sm == 90;
  return fwd->tmpl == TMPL_FWD_SM90;
}

BwdSpec *match_bwd(const KernelSpec *fwd, const CompileOptions *o, Arena *a, Diag *d) {
  const IrGraph *g = fwd->g;
  /* The FP8 recipe's backward (docs/language.md "FP8 gradients"): either
   * main kernel with the grad block's hooks, its MMAs in bf16 over 16-bit
   * copies of FP8 tensors. */
  const bool fp8 = bwd_is_fp8(g);
  if (fp8 && ir_packed(g)) {
    diag_error(d, g->tensors[g->q].loc, "graph '%s': the FP8 backward (FP8 tensors, a scaled or "
               "rounded P or output, a grad block) takes dense tensors, not packed sequences",
               g->name);
    return NULL;
  }
  if (fp8 && g->grad && !grad_value_linear(g->grad, IR_GRAD_DO)) {
    const IrGradValue *v = &g->grad->v[IR_GRAD_DO];
    diag_error(d, v->loc, "graph '%s': the GPU backward takes the incoming gradient's value as "
               "'%s' times values fixed for the call (its products read the stored numbers)",
               g->name, v->leaf->name);
    return NULL;
  }
  if (g->tensors[g->k].paged) {
    diag_error(d, g->tensors[g->k].loc,
               "graph '%s': no backward through a paged KV cache (pages serve inference; "
               "train on dense k and v)", g->name);
    return NULL;
  }
  int bad = bwd_unsupported_grad(g);
  if (bad >= 0) {
    diag_error(d, g->tensors[bad].loc,
               "graph '%s': the GPU backward computes the gradient of '%s' only for at most "
               "%d f32/bf16/f16 biases read as %s[b, h, i, j] the same way everywhere",
               g->name, g->tensors[bad].name, BWD_MAX_BIAS, g->tensors[bad].name);
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
  const bool packed = ir_packed(g);
  if (lse->ndims != (packed ? 2 : 3) || lse->type != DT_F32) {
    diag_error(d, lse->loc,
               "graph '%s': the backward reads lse as f32[%s]; '%s' is declared "
               "with %d dimensions", g->name, packed ? "H, Tq" : "B, H, Sq", lse->name,
               lse->ndims);
    return NULL;
  }
  /* Packed sequences: the sink's gradient, not yet a bias's (their
   * gradients' rows are the batch's, not the sequences'). */
  for (int r = 0; packed && r < s->slots.nbias; r++)
    if (s->slots.bias_mode[r] != BWD_BIAS_SINK) {
      const IrTensor *t = &g->tensors[s->slots.bias[r]];
      diag_error(d, t->loc,
                 "graph '%s': no gradient of '%s' with packed sequences yet (the gradients of "
                 "q, k, v and a softmax sink are computed; drop '%s' from grad)",
                 g->name, t->name, t->name);
      return NULL;
    }
  s->in_type = fwd->in_type;
  s->out_type = g->tensors[s->slots.o].type;
  s->d_qk = fwd->d_qk;
  s->d_v = fwd->d_v;
  s->fp8 = fp8;
  s->mma_type = fp8 ? DT_BF16 : fwd->mma_type;
  /* The FP8 backward's MMAs take bf16: its copies convert FP8 tensors,
   * but a 16-bit one is read as it is, so it must be bf16. */
  const int qkv[3] = {g->q, g->k, g->v};
  for (int r = 0; fp8 && r < 3; r++)
    if (g->tensors[qkv[r]].type == DT_F16) {
      diag_error(d, g->tensors[qkv[r]].loc, "graph '%s': the FP8 backward takes q, k and v in "
                 "bf16 or FP8, not f16 ('%s')", g->name, g->tensors[qkv[r]].name);
      return NULL;
    }
  s->sm90 = bwd_use_sm90(fwd, o);
  /* dO is read as the MMAs' type, or converted from FP8 (convert8). */
  const DType dt = bwd_grad_type(g, IR_GRAD_DO);
  if (!dtype_is_fp8(dt) && dt != s->mma_type) {
    const Loc at = g->grad && g->grad->v[IR_GRAD_DO].type != DT_NONE ? g->grad->v[IR_GRAD_DO].loc
                                                                     : g->tensors[s->slots.o].loc;
    diag_error(d, at, "graph '%s': the GPU backward takes the incoming gradient as %s or FP8, "
               "not %s", g->name, dtype_name(s->mma_type), dtype_name(dt));
    return NULL;
  }
  /* Tiles of 64 or 128 columns each, or of 256 for both (bwd_sm90's
   * split-D mode, sm_90a only) once either head dim passes 128. */
  s->tile_qk = attn_bwd_head_tile(s->d_qk, s->d_v);
  s->tile_v = attn_bwd_head_tile(s->d_v, s->d_qk);
  const bool split_d = s->sm90 && s->tile_qk == 256;
  if (!attn_head_dim_ok(s->d_qk) || !attn_head_dim_ok(s->d_v) ||
      (!split_d && s->tile_qk == 256)) {
    diag_error(d, g->tensors[g->q].loc,
               "graph '%s': the backward takes head dimensions that are multiples of 8 up to "
               "%d on %s; this graph has %d (q, k) and %d (v)",
               g->name, s->sm90 ? 256 : 128,
               s->sm90 ? "sm_90a" : "this target (256 on sm_90a)",
               s->d_qk, s->d_v);
    return NULL;
  }
  if (s->slots.end > ATTN_MAX_TENSORS) {
    diag_error(d, g->loc,
               "graph '%s': its %d tensors and the backward's %d extra ones (dO, delta, "
               "accumulators, gradients) exceed the %d tensor slots of a kernel",
               g->name, g->ntensors, s->slots.end - g->ntensors, ATTN_MAX_TENSORS);
    return NULL;
  }
  if (split_d) {
    /* bwd_sm90.cuh, split-D: 64 keys per CTA, both warpgroups on all of
     * them; K, V (64 rows), two stages of Q and dO, two buffers each of
     * dRaw^T and Pd^T (64 x 64), two stages of the rows' {delta, lse log2
     * e}, the stages' mbarriers and tile slots (128 bytes), 1024 bytes of
     * alignment. (threads: the consumers; a producer warpgroup runs
     * beyond them, KernelInfo.bwd_tma_rows.) */
    s->threads = 256;
    s->block_n = 64;
    s->split_d = true; /* never persistent: 7-23% slower (bench/NOTES-sm90.md, session 7) */
    s->smem_bytes = attn_bwd90_layout_of(64, 64, 2, s->tile_qk, s->tile_v, 1).total;
    return s;
  }
  /* The FP8 tensor-core mode wherever it applies, but under option 90
   * (bwd_sm90 with bf16 MMAs over copies): H200, D 128 S 4k, 560 TFLOP/s
   * against the copies' 406 (bench/RESULTS.md, session 25). */
  if (s->sm90 && o->bwd_template != 90 && o->bwd_template != 92 &&
      !bwd_fp8_mma_refusal(s, &s->ds8)) {
    /* bwd_sm90.cuh's FP8 tensor-core mode (D 128): K, V and K^T (128
     * rows of 128 bytes), three stages of Q, dO (64 rows of 128 bytes) and
     * Q^T with dO^T (256 rows of 64 bytes), two dS buffers (64 x 128
     * bytes), dQ's f32 buffer, the stats, the mbarriers and slots. */
    s->threads = 256;
    s->block_n = 128;
    s->fp8_mma = true;
    s->persistent = true;
    s->smem_bytes = attn_bwd90_layout_fp8(128, 64, 3, 128, 128).total;
    return s;
  }
  if (s->sm90) {
    /* bwd_sm90.cuh: 128 keys per CTA in two warpgroups; K, V (128 rows),
     * three stages of Q and dO (64 rows), two buffers of dRaw^T (128 x
     * 64), dQ's f32 buffer (64 x D_QK), three stages of the rows' {delta,
     * lse log2 e}, the stages' mbarriers and tile slots (256 bytes), and
     * 1024 bytes to align the base. Wide mode (D 64 for q, k and v):
     * 128-query tiles in two stages (bwd90_wide). */
    const bool wide = s->tile_qk == 64 && s->tile_v == 64 && bwd_wide_fits(s, fwd, a);
    /* BM-80 (bwd_template 93, while it is measured against 64): head dims
     * 128, no dropout (its keep bits are 32 a thread), and what keeps the
     * wide kernel's wgmma pipelined (S^T and dP^T take 80 accumulators a
     * thread beside dK's and dV's 128). */
    const bool bm80 = o->bwd_template >= 93 && o->bwd_template <= 95 && s->tile_qk == 128 &&
                      s->tile_v == 128 && !fwd->dropout && bwd_wide_fits(s, fwd, a);
    const int bm = wide ? 128 : bm80 ? 80 : 64, stages = wide || bm80 ? 2 : 3;
    s->threads = 256;
    s->block_n = 128;
    s->wide = wide;
    s->bm80 = bm80 ? o->bwd_template - 92 : 0; /* 93, 94, 95: forms 1, 2, 3 */
    /* Packed sequences: one CTA per key tile of a sequence
     * (bwd80_packed_item), never persistent. */
    s->persistent = !packed;
    /* (the stamps need the item walk: persistent kernels; the template
     * writes them where dK has rows of its own per head, 16 or 32 bits) */
    s->stamps = o->bwd_template == 92 && s->persistent;
    s->smem_bytes = attn_bwd90_layout_of(128, bm, stages, s->tile_qk, s->tile_v, 0).total;
    return s;
  }
  /* bwd_sm80.cuh: 64 keys per CTA in four warps, 64-row query tiles; K, V,
   * Q, dO and dRaw^T tiles of 16-bit elements, then lse and delta. */
  s->threads = 128;
  s->block_n = 64;
  s->smem_bytes = attn_bwd80_layout_of(64, 64, s->tile_qk, s->tile_v).total;
  return s;
}
