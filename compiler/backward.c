/*
 * backward.c: derives a graph's backward pass from its score chain.
 *
 * Flash attention's backward has a fixed part that does not depend on the
 * graph: with x the softmax's input, P = exp(x - lse) recomputed, Pd = P
 * through dropout's mask (survivors scaled by 256 / (256 - T)), O = Pd V,
 *   dV = Pd^T dO,  dPd = dO V^T,  dP = dPd through the same mask,
 *   delta = rowsum(dO * O) (= sum_j P dP),  dS = P * (dP - delta),
 * dS being the gradient at x. What depends on the graph is the pointwise
 * chain from q @ k^T (and from the bias reads) up to x. That part is
 * derived here by reverse-mode differentiation on the IR: nodes are visited
 * from x down in reverse topological order, each passing its adjoint to
 * its operands through the op's partial derivatives, built as new IR nodes
 * (tanh: adj * (1 - t*t); exp: adj * e; a mask: where(c, adj, 0); ...).
 * The adjoint reaching q @ k^T is dRaw, from which dQ = dRaw K and
 * dK = dRaw^T Q; the adjoints reaching the loads of a grad tensor, summed
 * over the axes it broadcasts, are its gradient.
 *
 * Mask conditions, integer values, comparisons and floor/ceil pass no
 * gradient. Every derived value is linear in dS (a sum of products with
 * dS as one factor), so wherever dS is 0 every gradient is 0: evaluators
 * use that to keep fully masked rows exactly 0 rather than 0 * inf.
 *
 * The builders fold constants and drop multiplications by 1 and additions
 * of 0, so `attnc ir --backward` reads close to what one would derive by
 * hand (tests/golden/backward/).
 */
#include "attnc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct Deriver {
  BwdGraph *bg;
  const IrGraph *g;
  Arena *a;
  Diag *d;
  int cap;
  IrNode **adj;  /* per forward node: its adjoint so far, or NULL (zero) */
  IrNode **first; /* per min/max node: its "first operand wins" condition */
  bool *dep;     /* per forward node: differentiable and depends on a
                    differentiated leaf (q @ k^T or a grad load) */
  Loc loc;       /* the forward node being differentiated */
} Deriver;

/* ----------------------------------------------------------- builders */

static bool is_const(const IrNode *n, double v) {
  return n->op == IR_CONST && n->type == DT_F32 && n->fval == v;
}

/* A float constant's value as evaluators see it: a forward constant is
 * the f32 the device receives (0.1 is 0.1f); a derived one is exact. */
static double cval(const Deriver *dv, const IrNode *n) {
  return bwd_is_forward(dv->bg, n) ? (double)(float)n->fval : n->fval;
}

static IrNode *take(Deriver *dv, IrNode *n) {
  BwdGraph *bg = dv->bg;
  if (bg->nnodes == dv->cap) {
    dv->cap = dv->cap ? 2 * dv->cap : 32;
    IrNode **grown = arena_alloc(dv->a, (size_t)dv->cap * sizeof *grown);
    if (bg->nnodes)
      memcpy(grown, bg->nodes, (size_t)bg->nnodes * sizeof *grown);
    bg->nodes = grown;
  }
  n->id = bg->nnodes;
  bg->nodes[bg->nnodes++] = n;
  return n;
}

static IrNode *fconst(Deriver *dv, double v) {
  return ir_const_float(dv->a, dv->loc, v);
}

/* A new derived node of op over its operands' axes. Constant operands
 * are not numbered: the dump prints them inline. */
static IrNode *mk(Deriver *dv, IrOp op, DType type, int nsrc,
                  IrNode *const *src) {
  unsigned dom = 0;
  for (int k = 0; k < nsrc; k++)
    dom |= src[k]->dom;
  return take(dv, ir_node(dv->a, op, dv->loc, type, dom, nsrc, src));
}

static IrNode *mk1(Deriver *dv, IrOp op, IrNode *x) {
  return mk(dv, op, DT_F32, 1, &x);
}

static IrNode *mk2(Deriver *dv, IrOp op, IrNode *x, IrNode *y) {
  IrNode *src[2] = {x, y};
  DType t = op == IR_LT || op == IR_LE || op == IR_GT || op == IR_GE ||
                    op == IR_EQ || op == IR_NE
                ? DT_BOOL
                : DT_F32;
  return mk(dv, op, t, 2, src);
}

static IrNode *b_neg(Deriver *dv, IrNode *x) {
  if (x->op == IR_CONST && x->type == DT_F32)
    return fconst(dv, -cval(dv, x));
  if (x->op == IR_NEG && !bwd_is_forward(dv->bg, x))
    return x->src[0];
  return mk1(dv, IR_NEG, x);
}

static IrNode *b_mul(Deriver *dv, IrNode *x, IrNode *y) {
  if (is_const(x, 0) || is_const(y, 0))
    return fconst(dv, 0); /* exact: every derived value is linear in dS */
  if (is_const(x, 1))
    return y;
  if (is_const(y, 1))
    return x;
  if (is_const(x, -1))
    return b_neg(dv, y);
  if (is_const(y, -1))
    return b_neg(dv, x);
  if (x->op == IR_CONST && y->op == IR_CONST && x->type == DT_F32 &&
      y->type == DT_F32)
    return fconst(dv, cval(dv, x) * cval(dv, y));
  /* Constants go right, and two constant factors merge:
   * (a * 2) * 3 -> a * 6. */
  if (x->op == IR_CONST && x->type == DT_F32) {
    IrNode *t = x;
    x = y;
    y = t;
  }
  bool xcf = x->op == IR_MUL && !bwd_is_forward(dv->bg, x) &&
             x->src[1]->op == IR_CONST && x->src[1]->type == DT_F32;
  if (xcf && y->op == IR_CONST && y->type == DT_F32)
    return b_mul(dv, x->src[0],
                 fconst(dv, cval(dv, x->src[1]) * cval(dv, y)));
  /* (a * c) * y -> (a * y) * c: constants float outward, where a later
   * division can cancel them. x is left unused (removed at the end). */
  if (xcf)
    return b_mul(dv, b_mul(dv, x->src[0], y), x->src[1]);
  return mk2(dv, IR_MUL, x, y);
}

static IrNode *b_div(Deriver *dv, IrNode *x, IrNode *y) {
  if (is_const(x, 0))
    return x;
  if (is_const(y, 1))
    return x;
  bool ycon = y->op == IR_CONST && y->type == DT_F32 && cval(dv, y) != 0;
  if (ycon && x->op == IR_CONST && x->type == DT_F32)
    return fconst(dv, cval(dv, x) / cval(dv, y));
  /* (z * c) / y -> z * (c / y): softcap's 30 * ... / 30 cancels. */
  if (ycon && x->op == IR_MUL && !bwd_is_forward(dv->bg, x) &&
      x->src[1]->op == IR_CONST && x->src[1]->type == DT_F32)
    return b_mul(dv, x->src[0], fconst(dv, cval(dv, x->src[1]) / cval(dv, y)));
  return mk2(dv, IR_DIV, x, y);
}

static IrNode *b_add(Deriver *dv, IrNode *x, IrNode *y) {
  if (is_const(x, 0))
    return y;
  if (is_const(y, 0))
    return x;
  if (x->op == IR_CONST && y->op == IR_CONST && x->type == DT_F32 &&
      y->type == DT_F32)
    return fconst(dv, cval(dv, x) + cval(dv, y));
  return mk2(dv, IR_ADD, x, y);
}

static IrNode *b_sub(Deriver *dv, IrNode *x, IrNode *y) {
  if (is_const(y, 0))
    return x;
  if (is_const(x, 0))
    return b_neg(dv, y);
  return mk2(dv, IR_SUB, x, y);
}

/* where(c, x, 0) or where(c, 0, x): x where the condition holds (or not). */
static IrNode *b_select(Deriver *dv, IrNode *c, IrNode *x, bool when) {
  if (is_const(x, 0))
    return x;
  if (c->op == IR_CONST && c->type == DT_BOOL)
    return (c->ival != 0) == when ? x : fconst(dv, 0);
  IrNode *zero = fconst(dv, 0);
  IrNode *src[3] = {c, when ? x : zero, when ? zero : x};
  return mk(dv, IR_WHERE, DT_F32, 3, src);
}

/* f32(x) for a bool x. */
static IrNode *b_to_f32(Deriver *dv, IrNode *x) {
  return mk(dv, IR_CAST, DT_F32, 1, &x);
}

/* ------------------------------------------------------ the chain rule */

static void accumulate(Deriver *dv, IrNode *to, IrNode *contrib) {
  if (!dv->dep[to->id] || is_const(contrib, 0))
    return;
  IrNode *prev = dv->adj[to->id];
  dv->adj[to->id] = prev ? b_add(dv, prev, contrib) : contrib;
}

/* Reads of a grad tensor must be t[b, h, i, j] with some indices left out
 * (indices in increasing order); a literal-1 dimension broadcasts, so its
 * subscript does not matter. Fills the tensor's axis map. */
bool bwd_bias_axes(const IrGraph *g, const IrNode *ld, int axis[],
                   unsigned *keep) {
  const IrTensor *t = &g->tensors[ld->ref];
  unsigned last = 0;
  *keep = 0;
  for (int k = 0; k < t->ndims; k++) {
    axis[k] = 0;
    if (t->dim_sym[k] < 0 && t->dim_val[k] == 1)
      continue;
    const IrNode *x = ld->src[k];
    if (x->op != IR_INDEX || (unsigned)x->ival <= last)
      return false;
    last = (unsigned)x->ival;
    axis[k] = (int)x->ival;
    *keep |= last;
  }
  return true;
}

static BwdBias *bias_entry(Deriver *dv, int tensor) {
  BwdGraph *bg = dv->bg;
  for (int k = 0; k < bg->nbias; k++)
    if (bg->bias[k].tensor == tensor)
      return &bg->bias[k];
  return NULL;
}

static int derive_load(Deriver *dv, IrNode *n, IrNode *adj) {
  BwdBias e = {.tensor = n->ref};
  if (!bwd_bias_axes(dv->g, n, e.axis, &e.keep)) {
    const IrTensor *t = &dv->g->tensors[n->ref];
    diag_error(dv->d, n->loc, "the gradient of '%s' needs it read as %s[b, "
               "h, i, j] (indices in order; some may be left out, and "
               "literal-1 dimensions broadcast)", t->name, t->name);
    diag_note(dv->d, t->loc, "'%s' is declared with grad", t->name);
    return -1;
  }
  BwdBias *have = bias_entry(dv, n->ref);
  if (have) {
    if (memcmp(have->axis, e.axis, sizeof e.axis)) {
      diag_error(dv->d, n->loc, "'%s' is read here with other subscripts "
                 "than elsewhere in the score chain; its gradient needs one "
                 "way of reading it", dv->g->tensors[n->ref].name);
      return -1;
    }
    have->value = b_add(dv, have->value, adj);
    return 0;
  }
  e.value = adj;
  dv->bg->bias[dv->bg->nbias++] = e;
  return 0;
}

/* ops.def's derivative columns in the builders' terms: adj is the
 * incoming adjoint, A B C the operands, R the node itself. first_le/ge:
 * min's and max's "the first operand wins" condition, built once per node
 * and shared by both operands' terms. */
#define A (n->src[0])
#define B (n->src[1])
#define C (n->src[2])
#define R n
#define NODIFF NULL
#define neg(x) b_neg(dv, x)
#define add(x, y) b_add(dv, x, y)
#define sub(x, y) b_sub(dv, x, y)
#define mul(x, y) b_mul(dv, x, y)
#define div(x, y) b_div(dv, x, y)
#define sel(c, x, when) b_select(dv, c, x, when)
#define konst(v) fconst(dv, v)
#define one() fconst(dv, 1)
#define zero() fconst(dv, 0)
#define to_f32(x) b_to_f32(dv, x)
#define gt(x, y) mk2(dv, IR_GT, x, y)
#define lt(x, y) mk2(dv, IR_LT, x, y)
#define sigmoid(x) mk1(dv, IR_SIGMOID, x)
#define first_le() b_first(dv, n, IR_LE)
#define first_ge() b_first(dv, n, IR_GE)

static IrNode *b_first(Deriver *dv, IrNode *n, IrOp op) {
  if (!dv->first[n->id]) dv->first[n->id] = mk2(dv, op, n->src[0], n->src[1]);
  return dv->first[n->id];
}

/* Operand k gets `grad` when it carries gradient and the op passes it. */
#define PASS(k, grad)                                                         \
  do {                                                                        \
    if ((k) < n->nsrc && dv->dep[n->src[k]->id]) {                            \
      IrNode *g_ = (grad);                                                    \
      if (g_) accumulate(dv, n->src[k], g_);                                  \
    }                                                                         \
  } while (0)

/* Passes node n's adjoint to its operands. */
static int derive_node(Deriver *dv, IrNode *n, IrNode *adj) {
  dv->loc = n->loc;
  switch (n->op) {
  case IR_QK:
    dv->bg->draw = adj;
    return 0;
  case IR_LOAD:
    return derive_load(dv, n, adj);
#define OP(e, ir, fn, arity, ty, cpu, dev, devi, d0, d1, d2)                  \
  case IR_##e:                                                                \
    PASS(0, d0);                                                              \
    PASS(1, d1);                                                              \
    PASS(2, d2);                                                              \
    return 0;
#include "ops.def"
#undef OP
  default:
    diag_error(dv->d, n->loc, "the backward pass cannot differentiate '%s'",
               ir_op_name(n->op));
    return -1;
  }
}
#undef A
#undef B
#undef C
#undef R
#undef NODIFF
#undef neg
#undef add
#undef sub
#undef mul
#undef div
#undef sel
#undef konst
#undef one
#undef zero
#undef to_f32
#undef gt
#undef lt
#undef sigmoid
#undef first_le
#undef first_ge
#undef PASS

/* Which forward nodes carry gradient: q @ k^T, loads of grad tensors, and
 * f32 values computed from them by differentiable ops. Integer and bool
 * values never do, so neither do mask conditions or subscripts. */
static void mark_deps(Deriver *dv) {
  const IrGraph *g = dv->g;
  for (int id = 0; id < g->nnodes; id++) {
    const IrNode *n = g->nodes[id];
    bool dep = false;
    switch (n->op) {
    case IR_QK:
      dep = true;
      break;
    case IR_LOAD:
      dep = g->tensors[n->ref].grad && n->type == DT_F32;
      break;
    default: /* a pointwise op that passes gradient (ops.def) */
      for (int s = 0; op_info(n->op) && op_info(n->op)->diff && s < n->nsrc &&
                      n->type == DT_F32; s++)
        dep |= dv->dep[n->src[s]->id];
      break;
    }
    dv->dep[id] = dep;
  }
}

static bool fixed_per_bh(const IrNode *n) {
  return !(n->dom & (DOM_I | DOM_J | DOM_D)) && dtype_is_float(n->type);
}

/* n as (p @ v) times values fixed per (b, h): true with the product of
 * those values in *f (a constant 1 when there are none). */
static bool pv_factor(Deriver *dv, IrNode *n, IrNode **f) {
  if (n == dv->g->pv) {
    *f = fconst(dv, 1);
    return true;
  }
  for (int s = 0; n->op == IR_MUL && s < 2; s++)
    if (fixed_per_bh(n->src[1 - s]) && pv_factor(dv, n->src[s], f)) {
      *f = b_mul(dv, *f, n->src[1 - s]);
      return true;
    }
  if (n->op == IR_DIV && fixed_per_bh(n->src[1]) && pv_factor(dv, n->src[0], f)) {
    *f = b_div(dv, *f, n->src[1]);
    return true;
  }
  return false;
}

/* The landmarks the fixed part needs: the attention output (p @ v, times
 * values fixed per (b, h)), dropout, lse, and P's scale and rounding. */
static int find_landmarks(Deriver *dv) {
  const IrGraph *g = dv->g;
  BwdGraph *bg = dv->bg;
  bg->score = g->softmax->src[0];
  bg->o_output = bg->lse_output = -1;
  const IrPChain pc = ir_p_chain(g);
  if (pc.bad) {
    diag_error(dv->d, pc.bad->loc, "the backward differentiates P through dropout, one scale "
               "fixed per (b, h) and one rounding, in that order; this is more");
    return -1;
  }
  bg->dropout = pc.dropout;
  bg->p_round = pc.round ? pc.round->type : DT_NONE;
  bg->p_scale = pc.scale;
  for (int k = 0; k < g->noutputs; k++) {
    IrNode *v = g->outputs[k].value, *f;
    dv->loc = g->outputs[k].loc;
    if (bg->o_output < 0 && (v->dom & DOM_D) && pv_factor(dv, v, &f)) {
      bg->o_output = k;
      bg->o_scale = is_const(f, 1) ? NULL : f;
    } else if (v->op == IR_LOGSUMEXP && v->src[0] == bg->score &&
               bg->lse_output < 0) {
      bg->lse_output = k;
      bg->lse = g->outputs[k].value;
    }
  }
  if (bg->o_output < 0) {
    for (int k = 0; k < g->noutputs; k++)
      if (g->outputs[k].value->dom & DOM_D) {
        diag_error(dv->d, g->outputs[k].loc, "the backward pass needs p @ v, or p @ v times "
                   "values fixed per (b, h), as an output; '%s' applies other ops to it",
                   g->outputs[k].name);
        return -1;
      }
    diag_error(dv->d, g->loc, "the backward pass needs p @ v as an output");
    return -1;
  }
  return 0;
}

static bool used_elsewhere(const BwdGraph *bg, const IrNode *r) {
  for (int id = 0; id < bg->nnodes; id++)
    for (int s = 0; s < bg->nodes[id]->nsrc; s++)
      if (bg->nodes[id]->src[s] == r)
        return true;
  for (int k = 0; k < bg->nbias; k++)
    if (bg->bias[k].value == r)
      return true;
  return bg->o_scale == r;
}

/* Folds a factor over no axes out of dRaw: dRaw = core * f gives
 * dQ = (core K) * f, one multiply per row of dQ instead of per score. */
static void fold_draw_scale(BwdGraph *bg) {
  IrNode *r = bg->draw;
  if (!r || r->op != IR_MUL || bwd_is_forward(bg, r) || r == bg->ds ||
      r->src[1]->dom != 0 || r->src[1]->type != DT_F32 ||
      used_elsewhere(bg, r))
    return;
  bg->draw = r->src[0];
  bg->draw_scale = r->src[1];
  int n = 0;
  for (int id = 0; id < bg->nnodes; id++)
    if (bg->nodes[id] != r) {
      bg->nodes[n] = bg->nodes[id];
      bg->nodes[n]->id = n;
      n++;
    }
  bg->nnodes = n;
}

/* Drops derived nodes nothing reaches (left behind by rewrites) and
 * renumbers the rest, keeping their order. */
static void drop_unused(BwdGraph *bg, const IrGraph *g) {
  bool *live = mem_calloc((size_t)bg->nnodes + 1, 1);
  if (!live)
    mem_oom();
  IrNode *roots[3] = {bg->draw, bg->draw_scale, bg->o_scale};
  for (int r = 0; r < 3 + bg->nbias; r++) {
    IrNode *n = r < 3 ? roots[r] : bg->bias[r - 3].value;
    if (n && n != bg->ds && !bwd_is_forward(bg, n) && n->id >= 0 &&
        n->id < bg->nnodes && bg->nodes[n->id] == n)
      live[n->id] = true;
  }
  for (int id = bg->nnodes - 1; id >= 0; id--)
    for (int s = 0; live[id] && s < bg->nodes[id]->nsrc; s++) {
      IrNode *x = bg->nodes[id]->src[s];
      if (x != bg->ds && !bwd_is_forward(bg, x) && x->id >= 0 &&
          x->id < bg->nnodes && bg->nodes[x->id] == x)
        live[x->id] = true;
    }
  int n = 0;
  for (int id = 0; id < bg->nnodes; id++) {
    IrNode *x = bg->nodes[id];
    if (!live[id]) {
      x->id = -1 - g->nnodes; /* neither a forward id nor a derived one */
      continue;
    }
    x->id = n;
    bg->nodes[n++] = x;
  }
  bg->nnodes = n;
  mem_free(live);
}

bool bwd_has_grad(const IrGraph *g) {
  for (int k = 0; k < g->ntensors; k++)
    if (g->tensors[k].grad)
      return true;
  return false;
}

bool bwd_is_forward(const BwdGraph *bg, const IrNode *n) {
  return n != bg->ds && n->id >= 0 && n->id < bg->g->nnodes &&
         bg->g->nodes[n->id] == n;
}

/* A softmax sink is a constant of the score chain: the saved lse includes
 * it, so P = exp(s - lse) and dS = P (dP - delta) need nothing more. Its
 * own gradient, -sum_i exp(sink - lse_i) delta_i (BwdGraph.sink_tensor),
 * exists when the sink is a tensor with grad read directly over b and h
 * and nowhere else; a sink that reads one otherwise is refused here. */
static bool sink_reads_grad(const IrGraph *g, const IrNode *n, Diag *d) {
  if (n->op == IR_LOAD && g->tensors[n->ref].grad) {
    diag_error(d, n->loc, "the gradient of a softmax sink is computed when the sink is the "
               "tensor read directly, as %s[h] or %s[b, h]; '%s' is declared with grad",
               g->tensors[n->ref].name, g->tensors[n->ref].name, g->tensors[n->ref].name);
    diag_note(d, g->tensors[n->ref].loc, "'%s' is declared here", g->tensors[n->ref].name);
    return true;
  }
  for (int k = 0; k < n->nsrc; k++)
    if (sink_reads_grad(g, n->src[k], d)) return true;
  return false;
}

/* The sink as a direct read of a grad tensor over b and h (fills bg's
 * sink fields), or whatever sink_reads_grad says of it. Another read of
 * the same tensor elsewhere in the graph is refused: its gradient would
 * have two parts, and the kernels compute only this one. */
static bool sink_grad(const IrGraph *g, BwdGraph *bg, Diag *d) {
  const IrNode *s = ir_sink(g->softmax);
  bg->sink_tensor = -1;
  if (!s) return false;
  if (s->op != IR_LOAD || !g->tensors[s->ref].grad) return sink_reads_grad(g, s, d);
  const IrTensor *t = &g->tensors[s->ref];
  if (!bwd_bias_axes(g, s, bg->sink_axis, &bg->sink_keep) ||
      (bg->sink_keep & ~(unsigned)(DOM_B | DOM_H))) {
    diag_error(d, s->loc, "the gradient of a softmax sink needs it read as %s[h] or %s[b, h] "
               "(one value per batch and head)", t->name, t->name);
    diag_note(d, t->loc, "'%s' is declared with grad", t->name);
    return true;
  }
  for (int id = 0; id < g->nnodes; id++) {
    const IrNode *n = g->nodes[id];
    if (n->op == IR_LOAD && n->ref == s->ref && n != s) {
      diag_error(d, n->loc, "'%s' is the softmax's sink and is read here too; its gradient "
                 "is computed for the sink alone", t->name);
      diag_note(d, s->loc, "the sink reads it here");
      return true;
    }
  }
  bg->sink_tensor = s->ref;
  return false;
}

BwdGraph *bwd_derive(const IrGraph *g, Arena *a, Diag *d) {
  if (!g->qk || !g->softmax || !g->pv || g->q < 0 || g->k < 0 || g->v < 0)
    die("bwd_derive: graph '%s' has not been checked", g->name);
  BwdGraph *bg = arena_alloc(a, sizeof *bg);
  Deriver dv = {.bg = bg, .g = g, .a = a, .d = d, .loc = g->loc};
  bg->g = g;
  bg->dq = g->tensors[g->q].grad;
  bg->dk = g->tensors[g->k].grad;
  bg->dv = g->tensors[g->v].grad;
  bg->bias = arena_alloc(a, (size_t)(g->ntensors + 1) * sizeof *bg->bias);
  int before = d->nerrors;
  bg->gb = g->grad;
  bg->p_round = DT_NONE;
  if (sink_grad(g, bg, d))
    return NULL;
  if (find_landmarks(&dv))
    return NULL;
  dv.adj = arena_alloc(a, ((size_t)g->nnodes + 1) * sizeof *dv.adj);
  dv.dep = arena_alloc(a, ((size_t)g->nnodes + 1) * sizeof *dv.dep);
  dv.first = arena_alloc(a, ((size_t)g->nnodes + 1) * sizeof *dv.first);
  mark_deps(&dv);
  bg->ds = ir_node(a, IR_INPUT, bg->score->loc, DT_F32,
                   DOM_B | DOM_H | DOM_I | DOM_J, 0, NULL);
  bg->ds->name = "ds";
  if (dv.dep[bg->score->id])
    dv.adj[bg->score->id] = bg->ds;
  for (int id = bg->score->id; id >= 0; id--) {
    IrNode *n = g->nodes[id];
    if (dv.adj[id] && dv.dep[id] && derive_node(&dv, n, dv.adj[id]))
      break;
  }
  if (d->nerrors > before)
    return NULL;
  drop_unused(bg, g);
  fold_draw_scale(bg);
  return bg;
}

/* --------------------------------------------------------------- dump */

static void put_float(StrBuf *out, double v) {
  char buf[40];
  if (v == floor(v) && fabs(v) < 1e15) {
    snprintf(buf, sizeof buf, "%.1f", v);
    sb_puts(out, buf);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v)
      break;
  }
  sb_puts(out, buf);
  if (!strpbrk(buf, ".e"))
    sb_puts(out, ".0");
}

/* An operand: %N for forward nodes, $N for derived ones, constants
 * inline, `ds` for the leaf. */
static void put_ref(StrBuf *out, const BwdGraph *bg, const IrNode *n) {
  if (n == bg->ds)
    sb_puts(out, "ds");
  else if (n->op == IR_CONST && n->type == DT_F32)
    put_float(out, n->fval);
  else if (n->op == IR_CONST)
    sb_printf(out, "%lld", (long long)n->ival);
  else if (bwd_is_forward(bg, n))
    sb_printf(out, "%%%d", n->id);
  else
    sb_printf(out, "$%d", n->id);
}

static void put_shape(StrBuf *out, const IrGraph *g, const IrTensor *t) {
  sb_printf(out, "[");
  for (int k = 0; k < t->ndims; k++) {
    if (k)
      sb_puts(out, ", ");
    if (t->dim_sym[k] >= 0)
      sb_puts(out, g->dims[t->dim_sym[k]].name);
    else
      sb_printf(out, "%lld", (long long)t->dim_val[k]);
  }
  sb_putc(out, ']');
}

static void put_grad_line(StrBuf *out, const BwdGraph *bg, int tensor,
                          const char *expr) {
  const IrTensor *t = &bg->g->tensors[tensor];
  sb_printf(out, "  d%s = %s : f32", t->name, expr);
  put_shape(out, bg->g, t);
  const IrGradValue *gv = NULL;
  for (int r = 0; bg->gb && r < 3; r++)
    if (tensor == (r == 0 ? bg->g->q : r == 1 ? bg->g->k : bg->g->v))
      gv = &bg->gb->v[IR_GRAD_DQ + r];
  if (gv && (gv->value != gv->leaf || gv->type != DT_NONE)) {
    sb_printf(out, ", stored as &%d : %s", gv->value->id,
              dtype_name(gv->type != DT_NONE ? gv->type : t->type));
  }
  sb_putc(out, '\n');
}

/* " * F" for each factor P V's gradient carries: P's scale and o's. */
static void put_pv_factors(StrBuf *out, const BwdGraph *bg) {
  if (bg->p_scale) {
    sb_puts(out, " * ");
    put_ref(out, bg, bg->p_scale);
  }
  if (bg->o_scale) {
    sb_puts(out, " * ");
    put_ref(out, bg, bg->o_scale);
  }
}

void bwd_dump(StrBuf *out, const BwdGraph *bg) {
  const IrGraph *g = bg->g;
  const char *q = g->tensors[g->q].name, *k = g->tensors[g->k].name,
             *v = g->tensors[g->v].name;
  char axes[8];
  sb_printf(out, "backward %s  # %s:%d:%d\n", g->name,
            g->loc.src ? g->loc.src->name : "?", g->loc.line, g->loc.col);
  sb_puts(out, "  grad");
  for (int t = 0, n = 0; t < g->ntensors; t++)
    if (g->tensors[t].grad)
      sb_printf(out, "%s %s", n++ ? "," : "", g->tensors[t].name);
  sb_putc(out, '\n');
  if (bg->gb) ir_dump_grad(out, g); /* the &N the lines below name */
  const IrOutput *o = &g->outputs[bg->o_output];
  const IrGradValue *gdo = bg->gb ? &bg->gb->v[IR_GRAD_DO] : NULL;
  sb_printf(out, "  given do : %s", gdo && gdo->type != DT_NONE ? dtype_name(gdo->type) : "f32");
  put_shape(out, g, &g->tensors[o->tensor]);
  sb_printf(out, " (the gradient of %s)", o->name);
  if (gdo && gdo->value != gdo->leaf) sb_printf(out, ", read as &%d", gdo->value->id);
  sb_putc(out, '\n');

  if (bg->lse)
    sb_printf(out, "  saved %s = %%%d, %s = %%%d\n",
              g->outputs[bg->o_output].name, o->value->id,
              g->outputs[bg->lse_output].name, bg->lse->id);
  else
    sb_printf(out, "  saved %s = %%%d; no logsumexp output, so the GPU "
              "backward cannot run (add output lse = logsumexp(...))\n",
              g->outputs[bg->o_output].name, o->value->id);
  if (bg->o_scale) { /* what dO is the gradient of, per unit of p @ v */
    sb_printf(out, "  %s = %%%d * ", o->name, g->pv->id);
    put_ref(out, bg, bg->o_scale);
    sb_putc(out, '\n');
  }
  sb_printf(out, "  p = exp(%%%d - lse) : f32 [bhij]\n", bg->score->id);
  if (bg->dropout) {
    sb_printf(out, "  keep = philox_byte(seed %%%d, offset %%%d, b, h, i, j) >= "
              "T = rate %%%d in 256ths : bool [bhij]  # dropout %%%d\n",
              bg->dropout->src[2]->id, bg->dropout->src[3]->id,
              bg->dropout->src[1]->id, bg->dropout->id);
    sb_puts(out, "  pd = where(keep, p * 256 / (256 - T), 0) : f32 [bhij]\n");
    sb_printf(out, "  dp = where(keep, (do @ %s^T) * 256 / (256 - T), 0)", v);
  } else if (bg->p_scale || bg->o_scale) {
    sb_printf(out, "  dp = (do @ %s^T)", v);
  } else {
    sb_printf(out, "  dp = do @ %s^T", v);
  }
  put_pv_factors(out, bg);
  sb_puts(out, " : f32 [bhij]\n");
  const char *pr = bg->dropout ? "pd" : "p";
  if (bg->p_scale || bg->p_round != DT_NONE) {
    sb_puts(out, "  pr = ");
    if (bg->p_round != DT_NONE) sb_printf(out, "%s(", dtype_name(bg->p_round));
    sb_puts(out, pr);
    if (bg->p_scale) {
      sb_puts(out, " * ");
      put_ref(out, bg, bg->p_scale);
    }
    sb_printf(out, "%s : f32 [bhij]  (P as p @ v reads it)\n",
              bg->p_round != DT_NONE ? ")" : "");
    pr = "pr";
  }
  sb_printf(out, "  delta = rowsum(do * %s) : f32 [bhi]\n", o->name);
  sb_printf(out, "  ds = p * (dp - delta) : f32 [bhij]  # d%%%d\n",
            bg->score->id);
  const IrGradValue *gds = bg->gb ? &bg->gb->v[IR_GRAD_DS] : NULL;
  if (gds && gds->value != gds->leaf)
    sb_printf(out, "  ds = &%d where ds != 0 (the grad block's; what dq and dk read)\n",
              gds->value->id);
  for (int id = 0; id < bg->nnodes; id++) {
    const IrNode *n = bg->nodes[id];
    sb_printf(out, "  $%d = %s", id, ir_op_name(n->op));
    for (int s = 0; s < n->nsrc; s++) {
      sb_puts(out, s ? ", " : " ");
      put_ref(out, bg, n->src[s]);
    }
    sb_printf(out, " : %s [%s]  # %d:%d\n", dtype_name(n->type),
              ir_dom_letters(n->dom, axes), n->loc.line, n->loc.col);
  }
  StrBuf e = {0};
  if (bg->draw) {
    sb_puts(out, "  draw = ");
    put_ref(out, bg, bg->draw);
    sb_printf(out, " : f32 [bhij]  # d%%%d", g->qk->id);
    if (bg->draw_scale) {
      sb_puts(out, ", times ");
      put_ref(out, bg, bg->draw_scale);
      sb_puts(out, " (folded into dq and dk)");
    }
    sb_putc(out, '\n');
  } else {
    sb_printf(out, "  draw = 0.0  # d%%%d: the scores do not depend on "
              "q @ k^T\n", g->qk->id);
  }
  if (bg->draw_scale) {
    sb_puts(&e, "(draw @ ");
    sb_puts(&e, k);
    sb_puts(&e, ") * ");
    put_ref(&e, bg, bg->draw_scale);
  } else {
    sb_printf(&e, "draw @ %s", k);
  }
  if (bg->dq)
    put_grad_line(out, bg, g->q, e.data);
  e.len = 0;
  if (bg->draw_scale) {
    sb_printf(&e, "(draw^T @ %s) * ", q);
    put_ref(&e, bg, bg->draw_scale);
  } else {
    sb_printf(&e, "draw^T @ %s", q);
  }
  sb_puts(&e, ", summed over each group's query heads");
  if (bg->dk)
    put_grad_line(out, bg, g->k, e.data);
  e.len = 0;
  if (bg->o_scale) {
    sb_printf(&e, "(%s^T @ do) * ", pr);
    put_ref(&e, bg, bg->o_scale);
  } else {
    sb_printf(&e, "%s^T @ do", pr);
  }
  sb_puts(&e, ", summed over each group's query heads");
  if (bg->dv)
    put_grad_line(out, bg, g->v, e.data);
  for (int t = 0; t < g->ntensors; t++) {
    if (!g->tensors[t].grad || t == g->q || t == g->k || t == g->v)
      continue;
    const BwdBias *bb = NULL;
    for (int x = 0; x < bg->nbias; x++)
      if (bg->bias[x].tensor == t)
        bb = &bg->bias[x];
    e.len = 0;
    if (t == bg->sink_tensor) {
      sb_puts(&e, "-rowsum(exp(sink - lse) * delta), the softmax sink's gradient");
      unsigned sum = (DOM_B | DOM_H | DOM_I) & ~bg->sink_keep;
      sb_printf(&e, ", summed over %s", ir_dom_letters(sum, axes));
    } else if (!bb) {
      sb_puts(&e, "0.0 (the scores do not read it)");
    } else {
      put_ref(&e, bg, bb->value);
      unsigned sum = (DOM_B | DOM_H | DOM_I | DOM_J) & ~bb->keep;
      if (sum)
        sb_printf(&e, ", summed over %s", ir_dom_letters(sum, axes));
    }
    put_grad_line(out, bg, t, e.data);
  }
  for (int x = 0; bg->gb && x < bg->gb->namax; x++)
    sb_printf(out, "  %s = max |&%d| over %s : f32[1]\n", bg->gb->amax[x].name,
              bg->gb->amax[x].value->id, bg->gb->v[bg->gb->amax[x].of].leaf->name);
  sb_free(&e);
  sb_putc(out, '\n');
}
