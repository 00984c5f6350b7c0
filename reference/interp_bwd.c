/*
 * interp_bwd.c: the CPU reference of the backward pass, in double. It
 * evaluates what backward.c derived, the same way for every graph:
 *
 *   per (b, h): the forward's score chain as dense [Sq][Skv] arrays (every
 *   node, whatever its domain, to keep indexing trivial), P by a plain
 *   row softmax, dropout's keep mask from philox.c, O = Pd V,
 *   delta = rowsum(dO * O), dP, dS = P (dP - delta), then the derived
 *   nodes element by element, and finally the matmuls into dQ, dK, dV and
 *   the sums into each bias gradient.
 *
 * P and O are recomputed here rather than read from a forward run, so the
 * reference needs nothing from the device. Since every derived value is
 * linear in dS, an element with dS = 0 (masked, dropped, or in a fully
 * masked row) contributes exactly 0, even where the chain holds inf.
 *
 * Slow but obviously right; meant for the small shapes of tests.
 */
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct BwdRef {
  RefArgs *args;
  const BwdGraph *bg;
  const IrGraph *g;
  StrBuf *err;
  int64_t *dimval;
  int64_t B, H, Hk, Sq, Skv, D, Dv;
  int64_t b, h;
  /* Packed sequences: per b, q's and k's first rows and lengths (q0, lq,
   * k0, lk), Sq and Skv being the pair's lengths while it is evaluated;
   * NULL for dense tensors. */
  int64_t *seq;
  /* Given row statistics (ref_backward_given; NULL: recomputed): each
   * row's lse [B, H, Sq] and O [B, H, Sq, Dv], for P = exp(s - lse) and
   * delta = rowsum(dO * O) (a shard's part of the whole's gradient). */
  const double *lse_given, *o_given;
  bool *need;   /* forward nodes the sweep evaluates */
  double **fv;  /* forward node values, [Sq][Skv] */
  double **dvv; /* derived node values, [Sq][Skv] */
  /* The FP8 recipe's edges (BwdGraph p_scale, p_round, o_scale; the grad
   * block): this pair's P scale and o scale (1 without), and the amax
   * outputs so far (NULL: not asked for). */
  double p_scale, o_scale;
  double *amax;
  bool block_failed; /* a one-element read of the grad block was out of range */
} BwdRef;

static int bref_fail(BwdRef *c, const IrNode *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int bref_fail(BwdRef *c, const IrNode *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ref_verror(c->err, n, fmt, ap);
  va_end(ap);
  return -1;
}

/* ------------------------------------------------------------ binding */

/* Packed q [Tq, H, D], k [Tk, Hk, D], v [Tk, Hk, Dv] and the sequences'
 * rows from the offsets; Sq and Skv the longest sequence's (the sweep
 * sets each pair's own). */
static int bref_bind_packed(BwdRef *c) {
  const IrGraph *g = c->g;
  const RefTensor *ts = c->args->tensors;
  const RefTensor *q = &ts[g->q], *k = &ts[g->k], *v = &ts[g->v];
  const RefTensor *oq = &ts[g->tensors[g->q].seq_offsets], *ok = &ts[g->tensors[g->k].seq_offsets];
  if (q->ndims != 3 || k->ndims != 3 || v->ndims != 3 || oq->shape[0] != ok->shape[0] ||
      oq->shape[0] < 1)
    return bref_fail(c, NULL, "packed q, k and v have 3 dimensions, and their offsets B + 1 "
                     "entries each");
  c->B = oq->shape[0] - 1;
  c->H = q->shape[1];
  c->D = q->shape[2];
  c->Hk = k->shape[1];
  c->Dv = v->shape[2];
  if (k->shape[2] != c->D || v->shape[0] != k->shape[0] || v->shape[1] != c->Hk ||
      c->H % c->Hk != 0)
    return bref_fail(c, NULL, "q, k and v have inconsistent shapes");
  ref_seq_table(c->args, c->B, c->seq, &c->Sq, &c->Skv);
  if (c->Sq * c->Skv > (INT64_C(1) << 26))
    return bref_fail(c, NULL, "%lld x %lld scores are too many for the CPU backward",
                     (long long)c->Sq, (long long)c->Skv);
  return 0;
}

static int bref_bind(BwdRef *c) {
  const IrGraph *g = c->g;
  RefTensor *ts = c->args->tensors;
  if (!ts || (g->nscalars > 0 && !c->args->scalars))
    return bref_fail(c, NULL, "no tensors or scalars given");
  for (int t = 0; t < g->ntensors; t++) {
    const IrTensor *it = &g->tensors[t];
    if (it->is_output)
      continue;
    if (ts[t].ndims != it->ndims || !ts[t].data)
      return bref_fail(c, NULL, "tensor '%s' is missing or has %d "
                       "dimensions, not %d", it->name, ts[t].ndims, it->ndims);
    for (int k = 0; k < it->ndims; k++) {
      int64_t size = ts[t].shape[k];
      int sym = it->dim_sym[k];
      if (size < 1 || (sym < 0 && size != it->dim_val[k]))
        return bref_fail(c, NULL, "tensor '%s': dimension %d has size %lld",
                         it->name, k + 1, (long long)size);
      if (sym >= 0 && c->dimval[sym] == 0)
        c->dimval[sym] = size;
      else if (sym >= 0 && c->dimval[sym] != size)
        return bref_fail(c, NULL, "tensor '%s': dimension %d (%s) is %lld, "
                         "but %s is bound to %lld", it->name, k + 1,
                         g->dims[sym].name, (long long)size,
                         g->dims[sym].name, (long long)c->dimval[sym]);
    }
  }
  const RefTensor *q = &ts[g->q], *k = &ts[g->k], *v = &ts[g->v];
  if (c->seq) return bref_bind_packed(c);
  if (q->ndims != 4 || k->ndims != 4 || v->ndims != 4)
    return bref_fail(c, NULL, "q, k and v must have 4 dimensions");
  c->B = q->shape[0];
  c->H = q->shape[1];
  c->Sq = q->shape[2];
  c->D = q->shape[3];
  c->Hk = k->shape[1];
  c->Skv = k->shape[2];
  c->Dv = v->shape[3];
  if (k->shape[3] != c->D || v->shape[1] != c->Hk || v->shape[2] != c->Skv ||
      c->H % c->Hk != 0 || (k->shape[0] != c->B && k->shape[0] != 1) ||
      v->shape[0] != k->shape[0])
    return bref_fail(c, NULL, "q, k and v have inconsistent shapes");
  if (c->Sq * c->Skv > (INT64_C(1) << 26))
    return bref_fail(c, NULL, "%lld x %lld scores are too many for the CPU "
                     "backward", (long long)c->Sq, (long long)c->Skv);
  return 0;
}

/* Forward nodes the sweep needs: the score chain and dropout's operands. */
static void bref_plan(BwdRef *c) {
  const IrGraph *g = c->g;
  c->need[c->bg->score->id] = true;
  if (ir_sink(g->softmax))
    c->need[ir_sink(g->softmax)->id] = true;
  if (c->bg->dropout)
    for (int s = 1; s < 4; s++)
      c->need[c->bg->dropout->src[s]->id] = true;
  if (c->bg->p_scale)
    c->need[c->bg->p_scale->id] = true;
  if (c->bg->o_scale && bwd_is_forward(c->bg, c->bg->o_scale))
    c->need[c->bg->o_scale->id] = true;
  for (int id = 0; id < c->bg->nnodes; id++) /* e.g. o_scale's factors */
    for (int s = 0; s < c->bg->nodes[id]->nsrc; s++)
      if (bwd_is_forward(c->bg, c->bg->nodes[id]->src[s]))
        c->need[c->bg->nodes[id]->src[s]->id] = true;
  for (int id = g->nnodes - 1; id >= 0; id--) {
    const IrNode *n = g->nodes[id];
    if (!c->need[id])
      continue;
    if (n->op == IR_INPUT || n->op == IR_TRANSPOSE) {
      c->need[id] = false;
      continue;
    }
    for (int s = 0; s < n->nsrc; s++)
      c->need[n->src[s]->id] = true;
  }
  for (int id = 0; id < g->nnodes; id++)
    if (g->nodes[id]->op == IR_INPUT || g->nodes[id]->op == IR_TRANSPOSE)
      c->need[id] = false;
}

/* ----------------------------------------------------- forward values */

/* Element offsets of row i of the pair's q (or dq: D columns) or of its
 * dO (Dv columns), and of key row j of its k or dk (D) or its v or dv
 * (Dv): dense [B (or 1), heads, S, cols], or packed [tokens, heads, cols]
 * from the sequence's first row. */
static int64_t bref_qrow(const BwdRef *c, int64_t i, int64_t cols) {
  if (c->seq) return ((c->seq[4 * c->b] + i) * c->H + c->h) * cols;
  return ((c->b * c->H + c->h) * c->Sq + i) * cols;
}
static int64_t bref_krow(const BwdRef *c, const RefTensor *t, int64_t j, int64_t cols) {
  const int64_t hk = c->h / (c->H / c->Hk);
  if (c->seq) return ((c->seq[4 * c->b + 2] + j) * c->Hk + hk) * cols;
  const int64_t kb = t->shape[0] == 1 ? 0 : c->b;
  return ((kb * c->Hk + hk) * c->Skv + j) * cols;
}
/* Both are affine in the row: row r's offset is at + r * step. The loops
 * over every (i, j) take them so, not per element (bref_krow's division
 * was 15% of a backward's reference time). */
typedef struct BrefRowMap {
  int64_t at, step;
} BrefRowMap;
static BrefRowMap bref_qmap(const BwdRef *c, int64_t cols) {
  const int64_t at = bref_qrow(c, 0, cols);
  return (BrefRowMap){at, bref_qrow(c, 1, cols) - at};
}
static BrefRowMap bref_kmap(const BwdRef *c, const RefTensor *t, int64_t cols) {
  const int64_t at = bref_krow(c, t, 0, cols);
  return (BrefRowMap){at, bref_krow(c, t, 1, cols) - at};
}
static inline int64_t bref_row(BrefRowMap m, int64_t r) { return m.at + r * m.step; }

static double bref_leaf(const BwdRef *c, const IrNode *n, int64_t i,
                        int64_t j) {
  switch (n->op) {
  case IR_CONST:
    return dtype_is_float(n->type) ? dtype_round(n->type, n->fval)
                                   : (double)n->ival;
  case IR_SCALAR:
    return dtype_round(c->g->scalars[n->ref].type, c->args->scalars[n->ref]);
  case IR_DIM: /* (a packed sequence's lengths: the pair's Sq and Skv) */
    return n->ref == IR_SEQLEN_Q ? (double)c->Sq
           : n->ref == IR_SEQLEN_K ? (double)c->Skv : (double)c->dimval[n->ref];
  case IR_INDEX:
    return n->ival == DOM_B   ? (double)c->b
           : n->ival == DOM_H ? (double)c->h
           : n->ival == DOM_I ? (double)i
                              : (double)j;
  default:
    die("bref_leaf: %s", ir_op_name(n->op));
  }
}

static int bref_load(BwdRef *c, const IrNode *n, double *out) {
  const IrTensor *t = &c->g->tensors[n->ref];
  const RefTensor *rt = &c->args->tensors[n->ref];
  for (int64_t e = 0; e < c->Sq * c->Skv; e++) {
    int64_t off = 0;
    for (int k = 0; k < t->ndims; k++) {
      off *= rt->shape[k];
      if (t->dim_sym[k] < 0 && t->dim_val[k] == 1)
        continue;
      double x = c->fv[n->src[k]->id][e];
      if (!(x >= 0 && x < (double)rt->shape[k]))
        return bref_fail(c, n, "subscript %d of '%s' is %.17g, outside "
                         "[0, %lld) at b=%lld h=%lld i=%lld j=%lld", k + 1,
                         t->name, x, (long long)rt->shape[k],
                         (long long)c->b, (long long)c->h,
                         (long long)(e / c->Skv), (long long)(e % c->Skv));
      off += (int64_t)x;
    }
    out[e] = rt->data[off];
  }
  return 0;
}

/* A grad block expression (IrGradBlock) at one element whose gradient
 * (leaf) is x: its other leaves are fixed for the call (constants,
 * scalars, dimensions, one-element reads). */
static double bref_block(BwdRef *c, const IrNode *n, const IrNode *leaf, double x) {
  if (n == leaf) return x;
  if (n->op == IR_LOAD) {
    const IrTensor *t = &c->g->tensors[n->ref];
    const RefTensor *rt = &c->args->tensors[n->ref];
    int64_t off = 0;
    for (int k = 0; k < t->ndims; k++) {
      const double at = bref_block(c, n->src[k], leaf, x);
      off *= rt->shape[k];
      if (t->dim_sym[k] < 0 && t->dim_val[k] == 1) continue;
      if (!(at >= 0 && at < (double)rt->shape[k])) {
        if (!c->block_failed)
          bref_fail(c, n, "subscript %d of '%s' is %.17g, outside [0, %lld)", k + 1, t->name,
                    at, (long long)rt->shape[k]);
        c->block_failed = true;
        return 0;
      }
      off += (int64_t)at;
    }
    return rt->data[off];
  }
  if (n->nsrc == 0) return bref_leaf(c, n, 0, 0);
  double v[IR_MAX_SRC] = {0};
  for (int s = 0; s < n->nsrc; s++) v[s] = bref_block(c, n->src[s], leaf, x);
  return ref_apply_op(n, v);
}

/* max |f(x)| into *m, NaN sticking (as the forward's amax). */
static void bref_amax_add(double *m, double fx) {
  if (isnan(*m)) return;
  *m = isnan(fx) ? fx : fmax(*m, fabs(fx));
}

/* The amax outputs of gradient `of` over n values xs: dS's over its
 * nonzero elements (a zero dS, masked or dropped, stays zero whatever the
 * block says), the others' over all. */
static void bref_amax_over(BwdRef *c, int of, const double *xs, int64_t n) {
  const IrGradBlock *gb = c->bg->gb;
  for (int k = 0; c->amax && gb && k < gb->namax; k++) {
    if (gb->amax[k].of != of) continue;
    const IrNode *leaf = gb->v[of].leaf;
    for (int64_t e = 0; e < n; e++)
      if (of != IR_GRAD_DS || xs[e] != 0)
        bref_amax_add(&c->amax[k], bref_block(c, gb->amax[k].value, leaf, xs[e]));
  }
}

/* A gradient's value as its block statement makes it, in place. */
static void bref_block_apply(BwdRef *c, int of, double *xs, int64_t n, bool keep_zero) {
  const IrGradBlock *gb = c->bg->gb;
  if (!gb || !gb->v[of].leaf || gb->v[of].value == gb->v[of].leaf) return;
  for (int64_t e = 0; e < n; e++)
    if (!(keep_zero && xs[e] == 0)) xs[e] = bref_block(c, gb->v[of].value, gb->v[of].leaf, xs[e]);
}

/* The large loops below run their rows on threads (ref_parallel_rows):
 * each output element is written by one thread, summed in the order one
 * thread would, so the bits do not depend on the thread count. */
typedef struct BwdWork BwdWork;
typedef struct BrefRows {
  const BwdRef *c;
  BwdWork *w;
  RefTensor *grads;
  const double *dout;
  double *out, *delta;
  double inv, scale;
  const double *dr;
} BrefRows;

static void bref_qk_rows(void *arg, int64_t lo, int64_t hi) {
  const BrefRows *a = arg;
  const BwdRef *c = a->c;
  const RefTensor *q = &c->args->tensors[c->g->q];
  const RefTensor *k = &c->args->tensors[c->g->k];
  const BrefRowMap qm = bref_qmap(c, c->D), km = bref_kmap(c, k, c->D);
  const int64_t Skv = c->Skv, D = c->D;
  for (int64_t i = lo; i < hi; i++)
    ref_dots(q->data + bref_row(qm, i), k->data + km.at, km.step, Skv, D, a->out + i * Skv);
}

static void bref_qk(const BwdRef *c, double *out) {
  BrefRows a = {.c = c, .out = out};
  ref_parallel_rows(c->Sq, (double)c->Skv * (double)c->D, bref_qk_rows, &a);
}

/* One node over [Sq][Skv]: a forward node (round = true: its float
 * constants are the f32s the device sees) or a derived one. */
static int bref_eval(BwdRef *c, const IrNode *n, double **vals, bool fwd,
                     double *out) {
  int64_t cnt = c->Sq * c->Skv;
  if (n->op == IR_QK) {
    bref_qk(c, out);
    return 0;
  }
  if (n->op == IR_LOAD)
    return bref_load(c, n, out);
  if (n->op == IR_CONST && !fwd) {
    for (int64_t e = 0; e < cnt; e++)
      out[e] = n->fval;
    return 0;
  }
  if (n->nsrc == 0) {
    for (int64_t e = 0; e < cnt; e++)
      out[e] = bref_leaf(c, n, e / c->Skv, e % c->Skv);
    return 0;
  }
  double x[IR_MAX_SRC] = {0};
  for (int64_t e = 0; e < cnt; e++) {
    for (int s = 0; s < n->nsrc; s++)
      x[s] = vals[n->src[s]->id][e];
    out[e] = ref_apply_op(n, x);
  }
  return 0;
}

/* A derived node's operand: derived values by id, forward ones by id in
 * fv, constants and ds built on the fly into `tmp`. */
static int bref_eval_derived(BwdRef *c, const IrNode *n, const double *ds,
                             double *out, double **tmp) {
  const BwdGraph *bg = c->bg;
  int64_t cnt = c->Sq * c->Skv;
  double *src[IR_MAX_SRC];
  for (int s = 0; s < n->nsrc; s++) {
    const IrNode *x = n->src[s];
    if (x == bg->ds) {
      src[s] = (double *)ds;
    } else if (bwd_is_forward(bg, x)) {
      src[s] = c->fv[x->id];
    } else if (x->op == IR_CONST) {
      for (int64_t e = 0; e < cnt; e++)
        tmp[s][e] = x->type == DT_F32 ? x->fval : (double)x->ival;
      src[s] = tmp[s];
    } else {
      src[s] = c->dvv[x->id];
    }
    if (!src[s])
      die("bref: operand %d of derived $%d has no value", s, n->id);
  }
  double x[IR_MAX_SRC] = {0};
  for (int64_t e = 0; e < cnt; e++) {
    for (int s = 0; s < n->nsrc; s++)
      x[s] = src[s][e];
    out[e] = ref_apply_op(n, x);
  }
  return 0;
}

/* The value array of an operand of the final sums (draw, a bias value):
 * derived, forward, ds or a constant (then filled into buf). */
static const double *bref_value(BwdRef *c, const IrNode *n, const double *ds,
                                double *buf) {
  if (n == c->bg->ds)
    return ds;
  if (bwd_is_forward(c->bg, n))
    return c->fv[n->id];
  if (n->op == IR_CONST) {
    for (int64_t e = 0; e < c->Sq * c->Skv; e++)
      buf[e] = n->fval;
    return buf;
  }
  return c->dvv[n->id];
}

/* ------------------------------------------------------ one (b, h) pair */

struct BwdWork {
  double *p, *pd, *keep, *dsv, *tmp[IR_MAX_SRC], *buf;
  double *pr; /* P as p @ v reads it: pd * p_scale, rounded to p_round */
  double *psink; /* per row: the sink's share of the denominator */
};

/* P row by row, with the softmax's sink (a constant of this (b, h), or
 * -inf) in each denominator, as the forward reference computes it; and
 * the sink's own share of each row, exp(sink - lse_i), in psink. */
static void bref_softmax(const BwdRef *c, const double *x, double sink, double *p,
                         double *psink) {
  if (c->lse_given) { /* the whole's normalizer: this pair's keys are a part of its row */
    const double *lse = c->lse_given + (c->b * c->H + c->h) * c->Sq;
    for (int64_t i = 0; i < c->Sq; i++) {
      const double *row = x + i * c->Skv;
      for (int64_t j = 0; j < c->Skv; j++)
        p[i * c->Skv + j] = lse[i] == -INFINITY ? 0.0 : exp(row[j] - lse[i]);
      psink[i] = lse[i] == -INFINITY || sink == -INFINITY ? 0.0 : exp(sink - lse[i]);
    }
    return;
  }
  for (int64_t i = 0; i < c->Sq; i++) {
    const double *row = x + i * c->Skv;
    double m = sink, sum = 0;
    for (int64_t j = 0; j < c->Skv; j++)
      m = row[j] > m ? row[j] : m;
    if (m != -INFINITY) {
      for (int64_t j = 0; j < c->Skv; j++)
        sum += exp(row[j] - m);
      sum += exp(sink - m);
    }
    for (int64_t j = 0; j < c->Skv; j++)
      p[i * c->Skv + j] = m == -INFINITY ? 0.0 : exp(row[j] - m) / sum;
    psink[i] = m == -INFINITY || sink == -INFINITY ? 0.0 : exp(sink - m) / sum;
  }
}

static uint64_t bref_u64(double x) {
  return x < 0 ? (uint64_t)(int64_t)x : (uint64_t)x;
}

/* dq[i] += sum_j r_ij k[j] (rows i), in order of j. */
static void bref_dq_rows(void *arg, int64_t lo, int64_t hi) {
  const BrefRows *a = arg;
  const BwdRef *c = a->c;
  const IrGraph *g = c->g;
  const RefTensor *ts = c->args->tensors;
  const int64_t Skv = c->Skv, D = c->D;
  const BrefRowMap qm = bref_qmap(c, D), km = bref_kmap(c, &ts[g->k], D);
  for (int64_t i = lo; i < hi; i++) {
    double *restrict dq = a->grads[g->q].data + bref_row(qm, i);
    for (int64_t j = 0; j < Skv; j++) {
      const int64_t e = i * Skv + j;
      if (a->w->dsv[e] == 0) continue;
      const double r = a->dr[e] * a->scale;
      const double *restrict kp = ts[g->k].data + bref_row(km, j);
      for (int64_t d = 0; d < D; d++)
        dq[d] += r * kp[d];
    }
  }
}

/* dk[j] += sum_i r_ij q[i] and dv[j] += sum_i pd_ij dO[i] (rows j), in
 * order of i. */
static void bref_dkv_rows(void *arg, int64_t lo, int64_t hi) {
  const BrefRows *a = arg;
  const BwdRef *c = a->c;
  const IrGraph *g = c->g;
  const BwdGraph *bg = c->bg;
  const RefTensor *ts = c->args->tensors;
  const int64_t Sq = c->Sq, Skv = c->Skv, D = c->D, Dv = c->Dv;
  const BrefRowMap qm = bref_qmap(c, D), km = bref_kmap(c, &ts[g->k], D);
  const BrefRowMap om = bref_qmap(c, Dv), vm = bref_kmap(c, &ts[g->v], Dv);
  /* Up to four key rows at a time, so each row of q and dO is read once
   * for them; every element still sums over i in order. */
  for (int64_t j0 = lo; j0 < hi; j0 += 4) {
    const int64_t nj = hi - j0 < 4 ? hi - j0 : 4;
    if (bg->dk && a->dr)
      for (int64_t i = 0; i < Sq; i++) {
        const double *restrict qp = ts[g->q].data + bref_row(qm, i);
        for (int64_t x = 0; x < nj; x++) {
          const int64_t e = i * Skv + j0 + x;
          if (a->w->dsv[e] == 0) continue;
          const double r = a->dr[e] * a->scale;
          double *restrict dk = a->grads[g->k].data + bref_row(km, j0 + x);
          for (int64_t d = 0; d < D; d++)
            dk[d] += r * qp[d];
        }
      }
    if (bg->dv)
      for (int64_t i = 0; i < Sq; i++) {
        const double *restrict dop = a->dout + bref_row(om, i);
        for (int64_t x = 0; x < nj; x++) {
          const double pd = a->w->pr[i * Skv + j0 + x] * c->o_scale;
          double *restrict dv = a->grads[g->v].data + bref_row(vm, j0 + x);
          for (int64_t d = 0; d < Dv; d++)
            dv[d] += pd * dop[d];
        }
      }
  }
}

static void bref_accumulate(BwdRef *c, BwdWork *w, RefTensor *grads,
                            const double *dout) {
  const BwdGraph *bg = c->bg;
  int64_t Sq = c->Sq, Skv = c->Skv, D = c->D, Dv = c->Dv;
  double scale = 1;
  if (bg->draw_scale)
    scale = bref_value(c, bg->draw_scale, w->dsv, w->buf)[0];
  const double *dr = bg->draw ? bref_value(c, bg->draw, w->dsv, w->buf) : NULL;
  BrefRows rows = {.c = c, .w = w, .grads = grads, .dout = dout, .scale = scale, .dr = dr};
  if (bg->dq && dr) ref_parallel_rows(Sq, (double)Skv * (double)D, bref_dq_rows, &rows);
  if ((bg->dk && dr) || bg->dv)
    ref_parallel_rows(Skv, (double)Sq * (double)(D + Dv), bref_dkv_rows, &rows);
  for (int x = 0; x < bg->nbias; x++) {
    const BwdBias *bb = &bg->bias[x];
    RefTensor *gt = &grads[bb->tensor];
    const double *val = bref_value(c, bb->value, w->dsv, w->buf);
    for (int64_t i = 0; i < Sq; i++)
      for (int64_t j = 0; j < Skv; j++) {
        int64_t e = i * Skv + j, off = 0;
        if (w->dsv[e] == 0)
          continue;
        for (int k = 0; k < gt->ndims; k++) {
          int a = bb->axis[k];
          int64_t at = a == DOM_B ? c->b : a == DOM_H ? c->h
                       : a == DOM_I ? i : a == DOM_J ? j : 0;
          off = off * gt->shape[k] + at;
        }
        gt->data[off] += val[e];
      }
  }
}

/* Row i: delta_i = rowsum(dO * O) (O given, or recomputed as (Pr V) times
 * o's scale), then dS_ij = P_ij (dP_ij - delta_i) with dP through
 * dropout's mask and P's and o's scales. */
static void bref_ds_rows(void *arg, int64_t lo, int64_t hi) {
  const BrefRows *a = arg;
  const BwdRef *c = a->c;
  BwdWork *w = a->w;
  const int64_t Skv = c->Skv, Dv = c->Dv;
  const RefTensor *vt = &c->args->tensors[c->g->v];
  const BrefRowMap om = bref_qmap(c, Dv), vm = bref_kmap(c, vt, Dv);
  for (int64_t i = lo; i < hi; i++) {
    const double *dop = a->dout + bref_row(om, i);
    /* O's row: recomputed by the caller (a->out), or given */
    const double *orow = a->out ? a->out + i * Dv : NULL;
    double delta = 0;
    for (int64_t d = 0; d < Dv; d++) {
      const double o = orow ? orow[d] * c->o_scale : c->o_given[bref_row(om, i) + d];
      delta += o * dop[d];
    }
    a->delta[i] = delta;
    /* dO . V for every key into the row of dS, then dS from it in place */
    double *dsrow = w->dsv + i * Skv;
    ref_dots(dop, vt->data + vm.at, vm.step, Skv, Dv, dsrow);
    for (int64_t j = 0; j < Skv; j++) {
      const int64_t e = i * Skv + j;
      /* dP through the same mask (Pd = keep * P * inv), then through P's
       * scale (its rounding passes the gradient straight) and o's. */
      const double dp = w->keep[e] != 0 ? dsrow[j] * a->inv * (c->p_scale * c->o_scale) : 0.0;
      dsrow[j] = w->p[e] == 0 ? 0.0 : w->p[e] * (dp - delta);
    }
  }
}

static int bref_pair(BwdRef *c, BwdWork *w, const double *dout,
                     RefTensor *grads) {
  const IrGraph *g = c->g;
  const BwdGraph *bg = c->bg;
  int64_t Sq = c->Sq, Skv = c->Skv, Dv = c->Dv;
  for (int id = 0; id < g->nnodes; id++)
    if (c->need[id] && bref_eval(c, g->nodes[id], c->fv, true, c->fv[id]))
      return -1;
  const IrNode *sink = ir_sink(g->softmax);
  bref_softmax(c, c->fv[bg->score->id], sink ? c->fv[sink->id][0] : -INFINITY, w->p, w->psink);
  double inv = 1;
  uint64_t seed = 0, offset = 0;
  uint32_t thresh = 0;
  if (bg->dropout) {
    double rate = c->fv[bg->dropout->src[1]->id][0];
    seed = bref_u64(c->fv[bg->dropout->src[2]->id][0]);
    offset = bref_u64(c->fv[bg->dropout->src[3]->id][0]);
    thresh = philox_keep_threshold(rate);
    inv = philox_kept_scale(thresh);
  }
  /* P's and o's scales for this pair: o_scale's derived nodes come first
   * (bwd_derive builds them before the chain), and read no dS. */
  c->p_scale = bg->p_scale ? c->fv[bg->p_scale->id][0] : 1.0;
  const int early = bg->o_scale && !bwd_is_forward(bg, bg->o_scale) &&
                    bg->o_scale->op != IR_CONST ? bg->o_scale->id + 1 : 0;
  for (int id = 0; id < early; id++)
    if (bref_eval_derived(c, bg->nodes[id], w->dsv, c->dvv[id], w->tmp))
      return -1;
  c->o_scale = bg->o_scale ? bref_value(c, bg->o_scale, w->dsv, w->buf)[0] : 1.0;
  for (int64_t i = 0; i < Sq; i++)
    for (int64_t j = 0; j < Skv; j++) {
      bool keep = !bg->dropout ||
                  philox_dropout_byte(seed, offset, c->b, c->h, i, j, c->H,
                                      Sq) >= thresh;
      const int64_t e = i * Skv + j;
      w->keep[e] = keep;
      w->pd[e] = keep ? w->p[e] * inv : 0.0;
      w->pr[e] = bg->p_round != DT_NONE ? dtype_round(bg->p_round, w->pd[e] * c->p_scale)
                                        : w->pd[e] * c->p_scale;
    }
  /* delta and dS by rows on threads; the sink's gradient (one sum over
   * the rows) after, in row order. */
  double *delta = malloc((size_t)(Sq + 1) * sizeof *delta);
  double *orows = c->o_given ? NULL : malloc((size_t)(Sq * Dv + 1) * sizeof *orows);
  if (!delta || (!c->o_given && !orows)) {
    free(delta);
    free(orows);
    return bref_fail(c, NULL, "out of memory");
  }
  if (orows) { /* O = Pr V, without o's scale (bref_ds_rows applies it) */
    const BrefRowMap vm = bref_kmap(c, &c->args->tensors[g->v], Dv);
    ref_pv(w->pr, Skv, 1, c->args->tensors[g->v].data + vm.at, vm.step, Sq, Skv, Dv, orows);
  }
  BrefRows a = {.c = c, .w = w, .grads = grads, .dout = dout, .out = orows, .delta = delta,
                .inv = inv};
  ref_parallel_rows(Sq, (double)Skv * (double)Dv, bref_ds_rows, &a);
  free(orows);
  if (bg->sink_tensor >= 0) { /* dsink = -sum_i p_sink,i delta_i */
    RefTensor *gt = &grads[bg->sink_tensor];
    int64_t off = 0;
    for (int k = 0; k < gt->ndims; k++) {
      const int ax = bg->sink_axis[k];
      off = off * gt->shape[k] + (ax == DOM_B ? c->b : ax == DOM_H ? c->h : 0);
    }
    for (int64_t i = 0; i < Sq; i++) gt->data[off] -= w->psink[i] * delta[i];
  }
  free(delta);
  /* The grad block's dS: its amax of dS as computed, then dS as the
   * products read it (where dS is 0, masked or dropped, it stays 0). */
  bref_amax_over(c, IR_GRAD_DS, w->dsv, Sq * Skv);
  bref_block_apply(c, IR_GRAD_DS, w->dsv, Sq * Skv, true);
  if (c->block_failed) return -1;
  for (int id = early; id < bg->nnodes; id++)
    if (bref_eval_derived(c, bg->nodes[id], w->dsv, c->dvv[id], w->tmp))
      return -1;
  bref_accumulate(c, w, grads, dout);
  return 0;
}

/* ------------------------------------------------------------ the entry */

int ref_backward(RefArgs *args, const BwdGraph *bg, const double *dout,
                 RefTensor *grads, StrBuf *err) {
  return ref_backward_full(args, bg, dout, NULL, NULL, grads, NULL, err);
}

int ref_backward_given(RefArgs *args, const BwdGraph *bg, const double *dout, const double *lse,
                       const double *o, RefTensor *grads, StrBuf *err) {
  return ref_backward_full(args, bg, dout, lse, o, grads, NULL, err);
}

/* The grad block's edges around the sweep: the incoming gradient's value
 * (into *dov, a copy, when the block changes it), and after the sweep
 * each gradient's amax and stored value. */
static int bref_given_dout(BwdRef *c, const double *dout, const double **dov, double **owned) {
  const IrGradBlock *gb = c->bg->gb;
  const RefTensor *q = &c->args->tensors[c->g->q];
  const int64_t rows = c->seq ? q->shape[0] * c->H : c->B * c->H * c->Sq;
  const int64_t n = rows * c->Dv;
  *dov = dout;
  bref_amax_over(c, IR_GRAD_DO, dout, n);
  if (!gb || gb->v[IR_GRAD_DO].value == gb->v[IR_GRAD_DO].leaf) return c->block_failed ? -1 : 0;
  *owned = malloc((size_t)(n + 1) * sizeof **owned);
  if (!*owned) return bref_fail(c, NULL, "out of memory");
  memcpy(*owned, dout, (size_t)n * sizeof **owned);
  bref_block_apply(c, IR_GRAD_DO, *owned, n, false);
  *dov = *owned;
  return c->block_failed ? -1 : 0;
}

static int bref_store_grads(BwdRef *c, RefTensor *grads) {
  const IrGraph *g = c->g;
  const int qkv[3] = {g->q, g->k, g->v};
  for (int r = 0; c->bg->gb && r < 3; r++) {
    if (!g->tensors[qkv[r]].grad) continue;
    RefTensor *t = &grads[qkv[r]];
    bref_amax_over(c, IR_GRAD_DQ + r, t->data, ref_numel(t));
    bref_block_apply(c, IR_GRAD_DQ + r, t->data, ref_numel(t), false);
  }
  return c->block_failed ? -1 : 0;
}

int ref_backward_full(RefArgs *args, const BwdGraph *bg, const double *dout, const double *lse,
                      const double *o, RefTensor *grads, double *amax, StrBuf *err) {
  BwdRef c = {.args = args, .bg = bg, .g = bg->g, .err = err, .lse_given = lse, .o_given = o,
              .amax = amax};
  double *dout_owned = NULL;
  for (int k = 0; amax && bg->gb && k < bg->gb->namax; k++) amax[k] = 0;
  if (args->g != bg->g)
    return bref_fail(&c, NULL, "the arguments are for another graph");
  if (!dout || !grads)
    return bref_fail(&c, NULL, "no dO or no gradient slots given");
  if ((lse == NULL) != (o == NULL))
    return bref_fail(&c, NULL, "the given row statistics need both lse and O");
  const IrGraph *g = bg->g;
  if (lse && g->q >= 0 && g->q < g->ntensors && g->tensors[g->q].packed)
    return bref_fail(&c, NULL, "given row statistics with packed sequences are not supported");
  if (g->k >= 0 && g->k < g->ntensors && g->tensors[g->k].paged)
    return bref_fail(&c, NULL, "the CPU reference has no backward through a paged KV cache");
  int rc = -1;
  BwdWork w = {0};
  c.dimval = calloc((size_t)g->ndims + 1, sizeof *c.dimval);
  c.need = calloc((size_t)g->nnodes + 1, sizeof *c.need);
  c.fv = calloc((size_t)g->nnodes + 1, sizeof *c.fv);
  c.dvv = calloc((size_t)bg->nnodes + 1, sizeof *c.dvv);
  const bool packed = g->q >= 0 && g->q < g->ntensors && g->tensors[g->q].packed &&
                      g->tensors[g->q].seq_offsets < g->ntensors &&
                      args->tensors[g->tensors[g->q].seq_offsets].ndims == 1;
  if (packed) c.seq = calloc((size_t)(4 * args->tensors[g->tensors[g->q].seq_offsets].shape[0] + 4),
                             sizeof *c.seq);
  if (!c.dimval || !c.need || !c.fv || !c.dvv || (packed && !c.seq)) {
    bref_fail(&c, NULL, "out of memory");
    goto done;
  }
  for (int s = 0; args->scalar_unset && s < g->nscalars; s++)
    if (args->scalar_unset[s]) {
      bref_fail(&c, NULL, "scalar '%s' has no value", g->scalars[s].name);
      goto done;
    }
  if (bref_bind(&c))
    goto done;
  bref_plan(&c);
  if (bref_given_dout(&c, dout, &dout, &dout_owned))
    goto done;
  size_t cnt = (size_t)(c.Sq * c.Skv), bytes = (cnt + 1) * sizeof(double);
  bool ok = true;
  for (int id = 0; id < g->nnodes; id++)
    if (c.need[id])
      ok &= (c.fv[id] = malloc(bytes)) != NULL;
  for (int id = 0; id < bg->nnodes; id++)
    ok &= (c.dvv[id] = malloc(bytes)) != NULL;
  ok &= (w.p = malloc(bytes)) && (w.pd = malloc(bytes)) && (w.pr = malloc(bytes)) &&
        (w.keep = malloc(bytes)) &&
        (w.dsv = malloc(bytes)) && (w.buf = malloc(bytes)) &&
        (w.psink = malloc((size_t)(c.Sq > 0 ? c.Sq : 1) * sizeof(double)));
  for (int s = 0; s < IR_MAX_SRC; s++)
    ok &= (w.tmp[s] = malloc(bytes)) != NULL;
  for (int t = 0; ok && t < g->ntensors; t++) {
    if (!g->tensors[t].grad)
      continue;
    RefTensor *gt = &grads[t];
    free(gt->data);
    *gt = args->tensors[t];
    gt->data = calloc((size_t)ref_numel(gt), sizeof(double));
    ok &= gt->data != NULL;
  }
  if (!ok) {
    bref_fail(&c, NULL, "out of memory");
    goto done;
  }
  for (c.b = 0; c.b < c.B; c.b++)
    for (c.h = 0; c.h < c.H; c.h++) {
      if (c.seq) { /* the sequence's own lengths; without queries, no gradient */
        c.Sq = c.seq[4 * c.b + 1];
        c.Skv = c.seq[4 * c.b + 3];
        if (c.Sq == 0) continue;
      }
      if (bref_pair(&c, &w, dout, grads))
        goto done;
    }
  if (bref_store_grads(&c, grads))
    goto done;
  rc = 0;
done:
  if (rc && grads)
    for (int t = 0; t < g->ntensors; t++)
      if (g->tensors[t].grad) {
        free(grads[t].data);
        grads[t].data = NULL;
      }
  for (int id = 0; c.fv && id < g->nnodes; id++)
    free(c.fv[id]);
  for (int id = 0; c.dvv && id < bg->nnodes; id++)
    free(c.dvv[id]);
  free(dout_owned);
  free(w.p);
  free(w.pd);
  free(w.pr);
  free(w.keep);
  free(w.dsv);
  free(w.buf);
  free(w.psink);
  for (int s = 0; s < IR_MAX_SRC; s++)
    free(w.tmp[s]);
  free(c.seq);
  free(c.dimval);
  free(c.need);
  free(c.fv);
  free(c.dvv);
  return rc;
}
