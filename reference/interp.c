/*
 * interp.c: the CPU reference. It evaluates one IR graph naively, in double
 * precision, and is the oracle every GPU test compares against, so it
 * favours being obviously right over being fast.
 *
 * The graph is evaluated once per (b, h) pair: for a fixed pair every node
 * is a dense array over the axes of its domain among i, j and d (Sq, Skv
 * and v's head dim), laid out [i][j][d]. An operand that does not vary over
 * an axis is read with stride 0 there, which is all the broadcasting the IR
 * needs. Nodes are visited in id order (a topological order) and an array
 * is freed right after its last consumer, so a 1024 x 1024 score chain
 * costs a few arrays of 8 MiB at a time.
 *
 * amax(x) reduces over every (b, h), so nothing that consumes it can run in
 * the same sweep. Each node gets a level: the number of amax nodes on its
 * deepest path to the inputs. Sweep L computes the outputs and amax nodes
 * of level L, reading the finished amax values of lower levels.
 */
#include "ref.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define REF_AXES (DOM_I | DOM_J | DOM_D)
#define REF_ALL_AXES (DOM_B | DOM_H | DOM_I | DOM_J | DOM_D)

/* Where one output's values go: which axis each declared dimension holds. */
typedef struct RefOutPlan {
  const IrNode *node;
  RefTensor *t;
  bool fill_all; /* a value with no axes copied into every element */
  bool packed;   /* rows of sequence b from its first query row on (RefCtx.seq) */
  int64_t size[5], stride[5]; /* by axis: B H I J D; size 0 = absent */
} RefOutPlan;

typedef struct RefCtx {
  RefArgs *args;
  const IrGraph *g;
  StrBuf *err;
  int64_t *dimval; /* g->ndims bound sizes, 0 = unbound */
  int *dimfrom;    /* the tensor that bound each dim */
  int *dimpos;     /* and its position there */
  int64_t B, H, Hk, Sq, Skv, Dq, Dv;
  /* k and v as [B (or 1), Hk, Skv, D]: the inputs, or for paged caches
   * kview and vview, gathered from their pages (ref_gather_pages). */
  const RefTensor *q, *k, *v;
  RefTensor qview, kview, vview;
  /* Packed sequences: per b, the first rows and lengths of its queries
   * and keys (q0, lq, k0, lk), and Sq and Skv are the pair's lengths while
   * it is evaluated (the views' rows are the longest's); else NULL. */
  int64_t *seq;
  int64_t b, h;     /* the pair being evaluated */
  /* p @ v's rounding of P (ir_p_chain), evaluated in the flash form the
   * kernels compute (ref_eval_p_round); NULL without one. */
  const IrNode *p_round;
  int *level;       /* per node */
  int maxlevel;
  bool *live;       /* reachable from an output */
  bool *needed;     /* evaluated in this sweep */
  int *last_use;    /* id of the last consumer in this sweep */
  double **val;     /* per node: its array for this (b, h) */
  bool *owned;      /* val[id] was malloc'ed here (not an amax cell) */
  double *amax;     /* per node: the amax accumulators */
  RefOutPlan *plans; /* per output */
} RefCtx;

/* ------------------------------------------------------------- errors */

static int ref_fail(RefCtx *c, const IrNode *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

int ref_verror(StrBuf *err, const IrNode *n, const char *fmt, va_list ap) {
  if (err->len > 0)
    sb_putc(err, '\n');
  if (n && n->loc.src)
    sb_printf(err, "%s:%d:%d: ", n->loc.src->name, n->loc.line, n->loc.col);
  sb_vprintf(err, fmt, ap);
  return -1;
}

/* Returns -1, so callers can write `return ref_fail(...)`. */
static int ref_fail(RefCtx *c, const IrNode *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ref_verror(c->err, n, fmt, ap);
  va_end(ap);
  return -1;
}

/* " at b=0 h=1 i=5 j=7": i and j only where the node varies over them. */
static void ref_where(RefCtx *c, unsigned dom, int64_t i, int64_t j) {
  sb_printf(c->err, " at b=%lld h=%lld", (long long)c->b, (long long)c->h);
  if (dom & DOM_I)
    sb_printf(c->err, " i=%lld", (long long)i);
  if (dom & DOM_J)
    sb_printf(c->err, " j=%lld", (long long)j);
}

/* --------------------------------------------------- shapes and layout */

/* The axes a node's value array has. amax is one number whatever the
 * builder recorded. */
static unsigned ref_vdom(const IrNode *n) {
  return n->op == IR_AMAX ? 0u : (n->dom & REF_ALL_AXES);
}

static int64_t ref_extent(const RefCtx *c, unsigned axis) {
  switch (axis) {
  case DOM_B: return c->B;
  case DOM_H: return c->H;
  case DOM_I: return c->Sq;
  case DOM_J: return c->Skv;
  case DOM_D: return c->Dv;
  }
  die("bad axis %u", axis);
}

/* Strides of an [i][j][d] array over dom's axes; 0 where dom lacks one. */
static void ref_strides(const RefCtx *c, unsigned dom, int64_t st[3]) {
  int64_t nd = (dom & DOM_D) ? c->Dv : 1;
  int64_t nj = (dom & DOM_J) ? c->Skv : 1;
  st[2] = (dom & DOM_D) ? 1 : 0;
  st[1] = (dom & DOM_J) ? nd : 0;
  st[0] = (dom & DOM_I) ? nj * nd : 0;
}

static void ref_counts(const RefCtx *c, unsigned dom, int64_t n[3]) {
  n[0] = (dom & DOM_I) ? c->Sq : 1;
  n[1] = (dom & DOM_J) ? c->Skv : 1;
  n[2] = (dom & DOM_D) ? c->Dv : 1;
}

/* -------------------------------------------------- checking the graph */

static bool ref_is_tensor_operand(IrOp op) {
  return op == IR_INPUT || op == IR_TRANSPOSE;
}

static int ref_check_node_refs(RefCtx *c, const IrNode *n) {
  const IrGraph *g = c->g;
  switch (n->op) {
  case IR_SCALAR:
    if (n->ref < 0 || n->ref >= g->nscalars)
      return ref_fail(c, n, "malformed IR: scalar %d of %d", n->ref,
                      g->nscalars);
    break;
  case IR_DIM:
    if ((n->ref == IR_SEQLEN_Q || n->ref == IR_SEQLEN_K) && ir_packed(g)) break;
    if (n->ref < 0 || n->ref >= g->ndims)
      return ref_fail(c, n, "malformed IR: dim %d of %d", n->ref, g->ndims);
    break;
  case IR_INPUT:
  case IR_LOAD:
    if (n->ref < 0 || n->ref >= g->ntensors || g->tensors[n->ref].is_output)
      return ref_fail(c, n, "malformed IR: %s of tensor %d",
                      ir_op_name(n->op), n->ref);
    if (n->op == IR_LOAD && n->nsrc != g->tensors[n->ref].ndims)
      return ref_fail(c, n, "malformed IR: %d subscripts for '%s'", n->nsrc,
                      g->tensors[n->ref].name);
    break;
  case IR_INDEX:
    if (n->ival != DOM_B && n->ival != DOM_H && n->ival != DOM_I &&
        n->ival != DOM_J)
      return ref_fail(c, n, "malformed IR: index of axis %lld",
                      (long long)n->ival);
    if ((n->ival & REF_AXES) && !(n->dom & n->ival))
      return ref_fail(c, n, "malformed IR: index outside its domain");
    break;
  default:
    break;
  }
  return 0;
}

/* The operands' axes must be the node's, except where the op reduces. */
static int ref_check_node_dom(RefCtx *c, const IrNode *n) {
  unsigned dom = ref_vdom(n), allowed = dom;
  switch (n->op) {
  case IR_QK:
    if ((dom & (DOM_I | DOM_J | DOM_D)) != (DOM_I | DOM_J))
      return ref_fail(c, n, "malformed IR: q @ k^T must vary over i, j");
    return 0;
  case IR_PV:
    if ((dom & (DOM_J | DOM_D)) != DOM_D)
      return ref_fail(c, n, "malformed IR: p @ v must vary over d, not j");
    allowed |= DOM_J;
    break;
  case IR_LOGSUMEXP:
  case IR_SOFTMAX:
    allowed |= DOM_J;
    break;
  case IR_AMAX:
    allowed = REF_ALL_AXES;
    break;
  case IR_TRANSPOSE:
    return 0;
  default:
    break;
  }
  for (int s = 0; s < n->nsrc; s++) {
    const IrNode *x = n->src[s];
    if (n->op == IR_PV && s == 1)
      continue;
    if (ref_vdom(x) & REF_AXES & ~allowed)
      return ref_fail(c, n, "malformed IR: operand %d of %s varies over "
                      "axes its result does not", s + 1, ir_op_name(n->op));
  }
  return 0;
}

/* q, k and v appear only as matmul operands (k possibly transposed). */
static int ref_check_tensor_uses(RefCtx *c, const IrNode *n) {
  const IrGraph *g = c->g;
  for (int s = 0; s < n->nsrc; s++) {
    const IrNode *x = n->src[s];
    bool ok;
    if (n->op == IR_QK && s == 0)
      ok = x->op == IR_INPUT && x->ref == g->q;
    else if (n->op == IR_QK && s == 1)
      ok = (x->op == IR_INPUT && x->ref == g->k) ||
           (x->op == IR_TRANSPOSE && x->src[0]->op == IR_INPUT &&
            x->src[0]->ref == g->k);
    else if (n->op == IR_PV && s == 1)
      ok = x->op == IR_INPUT && x->ref == g->v;
    else if (n->op == IR_TRANSPOSE)
      ok = x->op == IR_INPUT;
    else
      ok = !ref_is_tensor_operand(x->op);
    if (!ok)
      return ref_fail(c, n, "the CPU reference cannot evaluate operand %d of "
                      "%s (%s)", s + 1, ir_op_name(n->op),
                      ir_op_name(x->op));
  }
  return 0;
}

static int ref_check_graph(RefCtx *c) {
  const IrGraph *g = c->g;
  if (g->q < 0 || g->k < 0 || g->v < 0 || g->q >= g->ntensors ||
      g->k >= g->ntensors || g->v >= g->ntensors)
    return ref_fail(c, NULL, "graph '%s' has no complete q @ k^T ... @ v "
                    "chain", g->name);
  for (int id = 0; id < g->nnodes; id++) {
    const IrNode *n = g->nodes[id];
    if (!n || n->id != id || (int)n->op < 0 || n->op >= IR_OP_COUNT ||
        n->nsrc < 0 || n->nsrc > IR_MAX_SRC)
      return ref_fail(c, n, "malformed IR: node %d", id);
    if (ir_op_arity(n->op) >= 0 && n->nsrc != ir_op_arity(n->op))
      return ref_fail(c, n, "malformed IR: %s with %d operands",
                      ir_op_name(n->op), n->nsrc);
    for (int s = 0; s < n->nsrc; s++)
      if (!n->src[s] || n->src[s]->id < 0 || n->src[s]->id >= id ||
          g->nodes[n->src[s]->id] != n->src[s])
        return ref_fail(c, n, "malformed IR: operand %d of node %d", s + 1,
                        id);
    if (ref_check_node_refs(c, n) || ref_check_tensor_uses(c, n) ||
        ref_check_node_dom(c, n))
      return -1;
  }
  for (int k = 0; k < g->noutputs; k++) {
    const IrOutput *o = &g->outputs[k];
    if (!o->value || o->value->id < 0 || o->value->id >= g->nnodes ||
        g->nodes[o->value->id] != o->value || o->tensor < 0 ||
        o->tensor >= g->ntensors || !g->tensors[o->tensor].is_output)
      return ref_fail(c, NULL, "malformed IR: output '%s'", o->name);
    if (ref_is_tensor_operand(o->value->op))
      return ref_fail(c, o->value, "output '%s' is a whole input tensor; "
                      "the CPU reference evaluates score chains", o->name);
  }
  return 0;
}

/* ------------------------------------------------------- binding dims */

static int ref_bind_tensor(RefCtx *c, int ti) {
  const IrGraph *g = c->g;
  const IrTensor *t = &g->tensors[ti];
  const RefTensor *rt = &c->args->tensors[ti];
  if (rt->ndims != t->ndims)
    return ref_fail(c, NULL, "tensor '%s' has %d dimensions; its "
                    "declaration has %d", t->name, rt->ndims, t->ndims);
  if (!rt->data)
    return ref_fail(c, NULL, "tensor '%s' has no data", t->name);
  for (int k = 0; k < t->ndims; k++) {
    int64_t size = rt->shape[k];
    int sym = t->dim_sym[k];
    if (size < 1)
      return ref_fail(c, NULL, "tensor '%s': dimension %d has size %lld; "
                      "sizes must be at least 1", t->name, k + 1,
                      (long long)size);
    if (sym < 0) {
      if (size != t->dim_val[k])
        return ref_fail(c, NULL, "tensor '%s': dimension %d is declared "
                        "%lld but has size %lld", t->name, k + 1,
                        (long long)t->dim_val[k], (long long)size);
    } else if (c->dimval[sym] == 0) {
      c->dimval[sym] = size;
      c->dimfrom[sym] = ti;
      c->dimpos[sym] = k;
    } else if (c->dimval[sym] != size) {
      return ref_fail(c, NULL, "tensor '%s': dimension %d (%s) has size "
                      "%lld, but tensor '%s' bound %s = %lld (dimension %d)",
                      t->name, k + 1, g->dims[sym].name, (long long)size,
                      g->tensors[c->dimfrom[sym]].name, g->dims[sym].name,
                      (long long)c->dimval[sym], c->dimpos[sym] + 1);
    }
  }
  int64_t n = 1;
  for (int k = 0; k < t->ndims; k++) {
    if (rt->shape[k] > (INT64_C(1) << 40) / n)
      return ref_fail(c, NULL, "tensor '%s' is too large", t->name);
    n *= rt->shape[k];
  }
  return 0;
}

/* The logical [B, Hk, MaxPages * PageSize, D] of a paged cache: key j of
 * sequence b is row j % PageSize of page table[b, j / PageSize]; a page
 * id outside [0, Pages) reads as zeros (as on the GPU). */
static int ref_gather_pages(RefCtx *c, int ti, RefTensor *out) {
  const IrTensor *t = &c->g->tensors[ti];
  const RefTensor *cache = &c->args->tensors[ti], *table = &c->args->tensors[t->page_table];
  const int64_t pages = cache->shape[0], P = cache->shape[ir_page_dim(t)];
  const int64_t Hk = cache->shape[3 - ir_page_dim(t)], D = cache->shape[3];
  const int64_t B = table->shape[0], maxp = table->shape[1], Skv = maxp * P;
  out->ndims = 4;
  out->shape[0] = B, out->shape[1] = Hk, out->shape[2] = Skv, out->shape[3] = D;
  if (B * Hk * Skv * D > (INT64_C(1) << 28))
    return ref_fail(c, NULL, "the paged cache '%s' is too large for the CPU reference", t->name);
  out->data = calloc((size_t)(B * Hk * Skv * D) + 1, sizeof(double));
  if (!out->data) return ref_fail(c, NULL, "out of memory");
  for (int64_t b = 0; b < B; b++)
    for (int64_t j = 0; j < Skv; j++) {
      const double id = table->data[b * maxp + j / P];
      if (!(id >= 0 && id < (double)pages)) continue;
      const int64_t pg = (int64_t)id, r = j % P;
      for (int64_t h = 0; h < Hk; h++) {
        const int64_t row = t->paged_hnd ? (pg * Hk + h) * P + r : (pg * P + r) * Hk + h;
        memcpy(out->data + ((b * Hk + h) * Skv + j) * D, cache->data + row * D,
               (size_t)D * sizeof(double));
      }
    }
  return 0;
}

/* Sequence b's rows of a packed tensor of `total` rows: offsets[b] ..
 * offsets[b + 1], clamped into [0, total] (the end to no less than the
 * start), as the kernels read them. */
static void ref_seq_rows(const RefTensor *off, int64_t b, int64_t total, int64_t *start,
                         int64_t *len) {
  const double lo = fmin(fmax(off->data[b], 0), (double)total);
  const double hi = fmin(fmax(off->data[b + 1], lo), (double)total);
  *start = (int64_t)lo;
  *len = (int64_t)hi - (int64_t)lo;
}

void ref_seq_table(const RefArgs *args, int64_t B, int64_t *seq, int64_t *max_q, int64_t *max_k) {
  const IrGraph *g = args->g;
  const RefTensor *ts = args->tensors;
  const IrTensor *k = &g->tensors[g->k];
  const RefTensor *oq = &ts[g->tensors[g->q].seq_offsets];
  const RefTensor *ok = k->paged ? NULL : &ts[k->seq_offsets];
  /* Packed q against a paged cache: every sequence's keys are its pages'
   * whole view (MaxPages * PageSize; a length mask bounds them). */
  const int64_t view = k->paged ? ts[k->page_table].shape[1] * ts[g->k].shape[ir_page_dim(k)] : 0;
  *max_q = *max_k = 0;
  for (int64_t b = 0; b < B; b++) {
    int64_t *s = &seq[4 * b];
    ref_seq_rows(oq, b, ts[g->q].shape[0], &s[0], &s[1]);
    if (ok)
      ref_seq_rows(ok, b, ts[g->k].shape[0], &s[2], &s[3]);
    else
      s[2] = 0, s[3] = view;
    *max_q = s[1] > *max_q ? s[1] : *max_q;
    *max_k = s[3] > *max_k ? s[3] : *max_k;
  }
}

/* A packed [tokens, heads, D] tensor as [B, heads, rows, D]: sequence b's
 * rows first (from c->seq at column col: its first row, then length),
 * zeros after them. */
static int ref_gather_packed(RefCtx *c, int ti, int col, int64_t rows, RefTensor *out) {
  const RefTensor *x = &c->args->tensors[ti];
  const int64_t B = c->B, Hx = x->shape[1], D = x->shape[2];
  out->ndims = 4;
  out->shape[0] = B, out->shape[1] = Hx, out->shape[2] = rows, out->shape[3] = D;
  if (B * Hx * rows * D > (INT64_C(1) << 28))
    return ref_fail(c, NULL, "the packed tensor '%s' is too large for the CPU reference",
                    c->g->tensors[ti].name);
  out->data = calloc((size_t)(B * Hx * rows * D) + 1, sizeof(double));
  if (!out->data) return ref_fail(c, NULL, "out of memory");
  for (int64_t b = 0; b < B; b++)
    for (int64_t r = 0; r < c->seq[4 * b + col + 1]; r++)
      for (int64_t h = 0; h < Hx; h++)
        memcpy(out->data + ((b * Hx + h) * rows + r) * D,
               x->data + ((c->seq[4 * b + col] + r) * Hx + h) * D, (size_t)D * sizeof(double));
  return 0;
}

/* Packed q, and k and v packed too or paged: the sequences' rows from the
 * offsets, q (and packed k, v) gathered as dense [B, heads, longest, D]
 * views; paged k and v from the table's rows (one a sequence), each
 * sequence's keys its pages' whole view. */
static int ref_packed_views(RefCtx *c) {
  const IrGraph *g = c->g;
  const IrTensor *q = &g->tensors[g->q], *k = &g->tensors[g->k];
  const RefTensor *oq = &c->args->tensors[q->seq_offsets];
  const int64_t nk = k->paged ? c->args->tensors[k->page_table].shape[0] + 1
                              : c->args->tensors[k->seq_offsets].shape[0];
  if (oq->ndims != 1 || oq->shape[0] != nk || oq->shape[0] < 1)
    return ref_fail(c, NULL, k->paged ? "the offsets '%s' must hold one entry more than the page "
                    "table '%s' has rows (B + 1 and B)" : "the offsets '%s' and '%s' must hold B + 1 "
                    "entries each", g->tensors[q->seq_offsets].name,
                    g->tensors[k->paged ? k->page_table : k->seq_offsets].name);
  if (c->args->tensors[g->q].ndims != 3 ||
      (!k->paged && (c->args->tensors[g->k].ndims != 3 || c->args->tensors[g->v].ndims != 3)))
    return ref_fail(c, NULL, "packed q, k and v have 3 dimensions [tokens, heads, head dim]");
  c->B = oq->shape[0] - 1;
  c->seq = calloc((size_t)(4 * c->B + 4), sizeof *c->seq);
  if (!c->seq) return ref_fail(c, NULL, "out of memory");
  int64_t lq, lk;
  ref_seq_table(c->args, c->B, c->seq, &lq, &lk);
  if (ref_gather_packed(c, g->q, 0, lq, &c->qview) ||
      (k->paged ? ref_gather_pages(c, g->k, &c->kview) || ref_gather_pages(c, g->v, &c->vview)
                : ref_gather_packed(c, g->k, 2, lk, &c->kview) ||
                      ref_gather_packed(c, g->v, 2, lk, &c->vview)))
    return -1;
  c->q = &c->qview;
  c->k = &c->kview;
  c->v = &c->vview;
  return 0;
}

/* q, k and v as the attention reads them: a paged pair gathered, packed
 * sequences gathered, else the inputs themselves. */
static int ref_kv_views(RefCtx *c) {
  const IrGraph *g = c->g;
  c->q = &c->args->tensors[g->q];
  c->k = &c->args->tensors[g->k];
  c->v = &c->args->tensors[g->v];
  if (ir_packed(g)) return ref_packed_views(c);
  if (!g->tensors[g->k].paged) return 0;
  if (ref_gather_pages(c, g->k, &c->kview) || ref_gather_pages(c, g->v, &c->vview)) return -1;
  c->k = &c->kview;
  c->v = &c->vview;
  return 0;
}

/* A size of q, k or v, or a message naming who disagrees. */
static int ref_check_qkv(RefCtx *c) {
  const IrGraph *g = c->g;
  if (ref_kv_views(c)) return -1;
  const RefTensor *q = c->q, *k = c->k, *v = c->v;
  const char *qn = g->tensors[g->q].name, *kn = g->tensors[g->k].name,
             *vn = g->tensors[g->v].name;
  if (q->ndims != 4 || k->ndims != 4 || v->ndims != 4)
    return ref_fail(c, NULL, "q, k and v must have 4 dimensions [batch, "
                    "heads, sequence, head dim]");
  c->B = q->shape[0];
  c->H = q->shape[1];
  c->Sq = q->shape[2];
  c->Dq = q->shape[3];
  c->Hk = k->shape[1];
  c->Skv = k->shape[2];
  c->Dv = v->shape[3];
  for (int t = 0; t < 2; t++) {
    const RefTensor *x = t ? v : k;
    const int xi = t ? g->v : g->k;
    if (x->shape[0] != c->B && !c->seq &&
        !(x->shape[0] == 1 && g->tensors[xi].dim_sym[0] < 0))
      return ref_fail(c, NULL, "'%s' has batch size %lld but '%s' has %lld",
                      g->tensors[xi].name, (long long)x->shape[0], qn,
                      (long long)c->B);
  }
  if (k->shape[3] != c->Dq)
    return ref_fail(c, NULL, "head dims differ: '%s' has %lld, '%s' has "
                    "%lld", qn, (long long)c->Dq, kn,
                    (long long)k->shape[3]);
  if (v->shape[1] != c->Hk || v->shape[2] != c->Skv)
    return ref_fail(c, NULL, "'%s' is [.., %lld, %lld, ..] but '%s' is "
                    "[.., %lld, %lld, ..]: kv heads and keys must agree",
                    vn, (long long)v->shape[1], (long long)v->shape[2], kn,
                    (long long)c->Hk, (long long)c->Skv);
  if (c->H % c->Hk != 0)
    return ref_fail(c, NULL, "the kv head count %lld (dimension 2 of '%s') "
                    "does not divide the query head count %lld (dimension "
                    "2 of '%s')", (long long)c->Hk, kn, (long long)c->H, qn);
  return 0;
}

static int ref_bind_dims(RefCtx *c) {
  const IrGraph *g = c->g;
  if (!c->args->tensors)
    return ref_fail(c, NULL, "no tensors given");
  if (g->nscalars > 0 && !c->args->scalars)
    return ref_fail(c, NULL, "no scalar values given");
  for (int ti = 0; ti < g->ntensors; ti++)
    if (!g->tensors[ti].is_output && ref_bind_tensor(c, ti))
      return -1;
  if (ref_check_qkv(c))
    return -1;
  for (int s = 0; s < g->nscalars; s++)
    if (c->args->scalar_unset && c->args->scalar_unset[s])
      return ref_fail(c, NULL, "scalar '%s' has no default; pass --set "
                      "%s=VALUE", g->scalars[s].name, g->scalars[s].name);
  return 0;
}

/* ------------------------------------------------------------ outputs */

static int ref_axis_slot(unsigned axis) {
  switch (axis) {
  case DOM_B: return 0;
  case DOM_H: return 1;
  case DOM_I: return 2;
  case DOM_J: return 3;
  default: return 4;
  }
}

/* Does the declared shape read as `axes`, one per dimension? A dimension
 * the value does not vary over may be 1 or the full extent (the value is
 * copied along it). */
static bool ref_try_frame(const RefCtx *c, RefOutPlan *p, unsigned vdom,
                          const unsigned *axes, int naxes) {
  const RefTensor *t = p->t;
  unsigned covered = 0;
  if (naxes != t->ndims)
    return false;
  for (int k = 0; k < naxes; k++) {
    int64_t ext = ref_extent(c, axes[k]);
    if (t->shape[k] != ext && ((axes[k] & vdom) || t->shape[k] != 1))
      return false;
    covered |= axes[k];
  }
  if (vdom & ~covered)
    return false;
  memset(p->size, 0, sizeof p->size);
  int64_t stride = 1;
  for (int k = naxes - 1; k >= 0; k--) {
    int slot = ref_axis_slot(axes[k]);
    p->size[slot] = t->shape[k];
    p->stride[slot] = stride;
    stride *= t->shape[k];
  }
  return true;
}

static int ref_plan_frame(RefCtx *c, RefOutPlan *p, const IrOutput *o) {
  static const unsigned frames[][5] = {
      {DOM_B, DOM_H, DOM_I},
      {DOM_B, DOM_H, DOM_I, DOM_D},
      {DOM_B, DOM_H, DOM_I, DOM_J},
      {DOM_B, DOM_H, DOM_I, DOM_J, DOM_D},
  };
  static const int nframe[] = {3, 4, 4, 5};
  unsigned vdom = ref_vdom(o->value), own[5];
  int nown = 0;
  for (unsigned a = DOM_B; a <= DOM_D; a <<= 1)
    if (vdom & a)
      own[nown++] = a;
  if (ref_try_frame(c, p, vdom, own, nown))
    return 0;
  for (int f = 0; f < 4; f++)
    if (ref_try_frame(c, p, vdom, frames[f], nframe[f]))
      return 0;
  if (vdom == 0) {
    p->fill_all = true;
    return 0;
  }
  StrBuf axes = {0};
  for (int k = 0; k < nown; k++)
    sb_printf(&axes, "%s%c", k ? ", " : "", "bhijd"[ref_axis_slot(own[k])]);
  StrBuf shape = {0};
  for (int k = 0; k < p->t->ndims; k++)
    sb_printf(&shape, "%s%lld", k ? ", " : "", (long long)p->t->shape[k]);
  ref_fail(c, o->value, "output '%s' has shape [%s], which does not fit a "
           "value that varies over %s", o->name, shape.data ? shape.data : "",
           axes.data);
  sb_free(&axes);
  sb_free(&shape);
  return -1;
}

/* A packed output: o [tokens, H, Dv] or a row statistic [H, tokens]. */
static int ref_plan_packed(RefCtx *c, RefOutPlan *p, const IrOutput *o) {
  const RefTensor *t = p->t;
  const bool rows = (ref_vdom(o->value) & DOM_D) != 0;
  memset(p->size, 0, sizeof p->size);
  p->packed = true;
  if (rows && t->ndims == 3 && t->shape[1] == c->H && t->shape[2] == c->Dv) {
    p->size[0] = c->B, p->size[1] = c->H, p->size[2] = t->shape[0], p->size[4] = c->Dv;
    p->stride[1] = c->Dv, p->stride[2] = c->H * c->Dv, p->stride[4] = 1;
    return 0;
  }
  if (!rows && t->ndims == 2 && t->shape[0] == c->H) {
    p->size[0] = c->B, p->size[1] = c->H, p->size[2] = t->shape[1];
    p->stride[1] = t->shape[1], p->stride[2] = 1;
    return 0;
  }
  return ref_fail(c, o->value, "packed output '%s' must be %s", o->name,
                  rows ? "[tokens, heads, head dim]" : "[heads, tokens]");
}

/* Computes each output's shape from the bound dims and allocates it. */
static int ref_plan_outputs(RefCtx *c) {
  const IrGraph *g = c->g;
  for (int k = 0; k < g->noutputs; k++) {
    const IrOutput *o = &g->outputs[k];
    const IrTensor *t = &g->tensors[o->tensor];
    RefTensor *rt = &c->args->tensors[o->tensor];
    RefOutPlan *p = &c->plans[k];
    p->node = o->value;
    p->t = rt;
    free(rt->data);
    rt->data = NULL;
    if (t->ndims < 0 || t->ndims > IR_MAX_RANK)
      return ref_fail(c, NULL, "malformed IR: output '%s' rank", o->name);
    rt->ndims = t->ndims;
    for (int d = 0; d < t->ndims; d++) {
      int sym = t->dim_sym[d];
      if (sym >= g->ndims)
        return ref_fail(c, NULL, "malformed IR: output '%s' dim", o->name);
      if (sym >= 0 && c->dimval[sym] == 0)
        return ref_fail(c, NULL, "dimension %s of output '%s' is not bound "
                        "by any input tensor", g->dims[sym].name, o->name);
      rt->shape[d] = sym >= 0 ? c->dimval[sym] : t->dim_val[d];
      if (rt->shape[d] < 1)
        return ref_fail(c, NULL, "output '%s': dimension %d has size %lld",
                        o->name, d + 1, (long long)rt->shape[d]);
    }
    if (t->packed && c->seq) {
      if (ref_plan_packed(c, p, o))
        return -1;
    } else if (ref_plan_frame(c, p, o)) {
      return -1;
    }
    rt->data = malloc((size_t)ref_numel(rt) * sizeof(double));
    if (!rt->data)
      return ref_fail(c, NULL, "out of memory for output '%s'", o->name);
    /* Rows no sequence covers are not written: NaN here, as the tests
     * poison the GPU's outputs. */
    for (int64_t e = 0; p->packed && e < ref_numel(rt); e++)
      rt->data[e] = NAN;
  }
  return 0;
}

/* Copies the (b, h) slice of a node's array into an output. */
static void ref_write_output(const RefCtx *c, const RefOutPlan *p) {
  const double *v = c->val[p->node->id];
  if (p->fill_all) {
    int64_t n = ref_numel(p->t);
    for (int64_t e = 0; e < n; e++)
      p->t->data[e] = v[0];
    return;
  }
  int64_t base = 0;
  if (p->size[0] > 1)
    base += c->b * p->stride[0];
  if (p->size[1] > 1)
    base += c->h * p->stride[1];
  int64_t n[3], os[3], vs[3];
  for (int a = 0; a < 3; a++) {
    n[a] = p->size[2 + a] ? p->size[2 + a] : 1;
    os[a] = p->size[2 + a] ? p->stride[2 + a] : 0;
  }
  if (p->packed) { /* sequence b's rows, from its first */
    base += c->seq[4 * c->b] * p->stride[2];
    n[0] = c->Sq;
  }
  ref_strides(c, ref_vdom(p->node), vs);
  for (int64_t i = 0; i < n[0]; i++)
    for (int64_t j = 0; j < n[1]; j++)
      for (int64_t d = 0; d < n[2]; d++)
        p->t->data[base + i * os[0] + j * os[1] + d * os[2]] =
            v[i * vs[0] + j * vs[1] + d * vs[2]];
}

/* -------------------------------------------------------- node kinds */

static double ref_leaf(const RefCtx *c, const IrNode *n) {
  switch (n->op) {
  /* A constant or scalar is a value of its declared type: the device
   * receives 0.35 as the f32 0.35f, so the reference does too. */
  case IR_CONST:
    return dtype_is_float(n->type) ? dtype_round(n->type, n->fval)
                                   : (double)n->ival;
  case IR_SCALAR:
    return dtype_round(c->g->scalars[n->ref].type, c->args->scalars[n->ref]);
  case IR_DIM: /* (a packed sequence's lengths: the pair's Sq and Skv) */
    return n->ref == IR_SEQLEN_Q ? (double)c->Sq
           : n->ref == IR_SEQLEN_K ? (double)c->Skv : (double)c->dimval[n->ref];
  case IR_INDEX:
    return n->ival == DOM_B ? (double)c->b : (double)c->h;
  default:
    die("ref_leaf: %s", ir_op_name(n->op));
  }
}

static int ref_eval_leaf(RefCtx *c, const IrNode *n, double *out) {
  int64_t cnt[3], st[3];
  ref_counts(c, ref_vdom(n), cnt);
  ref_strides(c, ref_vdom(n), st);
  if (n->op == IR_INDEX && (n->ival & REF_AXES)) {
    for (int64_t i = 0; i < cnt[0]; i++)
      for (int64_t j = 0; j < cnt[1]; j++)
        for (int64_t d = 0; d < cnt[2]; d++)
          out[i * st[0] + j * st[1] + d * st[2]] =
              (double)(n->ival == DOM_I ? i : j);
    return 0;
  }
  if (n->op == IR_DIM && n->ref >= 0 && c->dimval[n->ref] == 0)
    return ref_fail(c, n, "dimension %s is not bound by any input tensor",
                    c->g->dims[n->ref].name);
  double x = ref_leaf(c, n);
  for (int64_t e = 0; e < cnt[0] * cnt[1] * cnt[2]; e++)
    out[e] = x;
  return 0;
}

/* A pointwise op over its domain, rows on threads (each element by one
 * thread: the same bits). */
typedef struct RefPointwise {
  const IrNode *n;
  int64_t cnt[3], st[IR_MAX_SRC][3];
  const double *src[IR_MAX_SRC];
  double *out;
} RefPointwise;

static void ref_pointwise_rows(void *arg, int64_t lo, int64_t hi) {
  const RefPointwise *a = arg;
  const IrNode *n = a->n;
  int64_t e = lo * a->cnt[1] * a->cnt[2];
  double x[IR_MAX_SRC] = {0};
  for (int64_t i = lo; i < hi; i++)
    for (int64_t j = 0; j < a->cnt[1]; j++)
      for (int64_t d = 0; d < a->cnt[2]; d++) {
        for (int s = 0; s < n->nsrc; s++)
          x[s] = a->src[s][i * a->st[s][0] + j * a->st[s][1] + d * a->st[s][2]];
        a->out[e++] = ref_apply_op(n, x);
      }
}

static int ref_eval_pointwise(RefCtx *c, const IrNode *n, double *out) {
  RefPointwise a = {.n = n, .out = out};
  ref_counts(c, ref_vdom(n), a.cnt);
  for (int s = 0; s < n->nsrc; s++) {
    a.src[s] = c->val[n->src[s]->id];
    ref_strides(c, ref_vdom(n->src[s]), a.st[s]);
  }
  /* (an element costs about as much as 16 multiply-adds) */
  ref_parallel_rows(a.cnt[0], 16.0 * (double)(a.cnt[1] * a.cnt[2]), ref_pointwise_rows, &a);
  return 0;
}

/* tensor[subscripts...]; a dimension declared as literal 1 broadcasts. */
static int ref_eval_load(RefCtx *c, const IrNode *n, double *out) {
  const IrTensor *t = &c->g->tensors[n->ref];
  const RefTensor *rt = &c->args->tensors[n->ref];
  unsigned dom = ref_vdom(n);
  int64_t cnt[3], st[IR_MAX_RANK][3], tstride[IR_MAX_RANK];
  const double *src[IR_MAX_RANK];
  ref_counts(c, dom, cnt);
  int64_t stride = 1;
  for (int k = t->ndims - 1; k >= 0; k--) {
    tstride[k] = stride;
    stride *= rt->shape[k];
    src[k] = c->val[n->src[k]->id];
    ref_strides(c, ref_vdom(n->src[k]), st[k]);
  }
  int64_t e = 0;
  for (int64_t i = 0; i < cnt[0]; i++)
    for (int64_t j = 0; j < cnt[1]; j++)
      for (int64_t d = 0; d < cnt[2]; d++) {
        int64_t off = 0;
        for (int k = 0; k < t->ndims; k++) {
          if (t->dim_sym[k] < 0 && t->dim_val[k] == 1)
            continue;
          double x = src[k][i * st[k][0] + j * st[k][1] + d * st[k][2]];
          if (!(x >= 0 && x < (double)rt->shape[k])) {
            ref_fail(c, n, "subscript %d of '%s' is %.17g, outside [0, %lld)",
                     k + 1, t->name, x, (long long)rt->shape[k]);
            ref_where(c, dom, i, j);
            return -1;
          }
          off += (int64_t)x * tstride[k];
        }
        out[e++] = rt->data[off];
      }
  return 0;
}

/* s[i][j] = sum_d q[b, h, i, d] * k[b, h / (H / Hk), j, d]: rows of s on
 * threads (ref_parallel_rows), four columns at a time with an accumulator
 * each (every sum still runs over d in order: the same bits). */
typedef struct RefQk {
  const double *qp, *kp;
  double *out;
  int64_t Skv, D;
} RefQk;

static void ref_qk_rows(void *arg, int64_t lo, int64_t hi) {
  const RefQk *a = arg;
  const int64_t Skv = a->Skv, D = a->D;
  for (int64_t i = lo; i < hi; i++) {
    ref_dots(a->qp + i * D, a->kp, D, Skv, D, a->out + i * Skv);
  }
}

static void ref_eval_qk(const RefCtx *c, double *out) {
  const RefTensor *q = c->q, *k = c->k;
  int64_t hk = c->h / (c->H / c->Hk), D = c->Dq;
  int64_t kb = k->shape[0] == 1 ? 0 : c->b;
  /* Rows of the tensors as bound (packed views: the longest sequence's). */
  RefQk a = {q->data + (c->b * c->H + c->h) * q->shape[2] * D,
             k->data + (kb * c->Hk + hk) * k->shape[2] * D, out, c->Skv, D};
  ref_parallel_rows(c->Sq, (double)c->Skv * (double)D, ref_qk_rows, &a);
}

/* o[i][d] = sum_j p[i][j] * v[b, h / (H / Hk), j, d] (ref_pv: rows on
 * threads, zero probabilities not skipped, so a NaN in v reaches the
 * output as it would on the device). */
static void ref_eval_pv(const RefCtx *c, const IrNode *n, double *out) {
  const RefTensor *v = c->v;
  int64_t hk = c->h / (c->H / c->Hk), Dv = c->Dv, pst[3], cnt[3];
  int64_t vb = v->shape[0] == 1 ? 0 : c->b;
  ref_strides(c, ref_vdom(n->src[0]), pst);
  ref_counts(c, ref_vdom(n), cnt);
  ref_pv(c->val[n->src[0]->id], pst[0], pst[1], v->data + (vb * c->Hk + hk) * v->shape[2] * Dv,
         Dv, cnt[0], c->Skv, Dv, out);
}

/* A rounding of P before p @ v (`e4m3(p * c) @ v`), in the kernels'
 * flash form, made reproducible (docs/language.md, "FP8"): per row, M =
 * ceil(max_j s_j log2 e) over the softmax's input s (an integer, so the
 * kernels' rescalings are powers of two), L = sum_j 2^(s_j log2 e - M)
 * (+ the sink's term), and P_j = 2^(s_j log2 e - M) / L. The value before
 * the rounding is u_j = P_j f_j c (f: dropout's factor, c the scale), and
 * what p @ v reads is round(u_j L) / L: the rounding of the unnormalized
 * P, normalized after, as the kernels do. A row with no kept key reads 0. */
static void ref_eval_p_round(const RefCtx *c, const IrNode *n, double *out) {
  const IrNode *sm = c->g->softmax;
  const double *s = c->val[sm->src[0]->id], *u = c->val[n->src[0]->id];
  const double sink = ir_sink(sm) ? c->val[ir_sink(sm)->id][0] : -INFINITY;
  int64_t ss[3], us[3], os[3];
  ref_strides(c, ref_vdom(sm->src[0]), ss);
  ref_strides(c, ref_vdom(n->src[0]), us);
  ref_strides(c, ref_vdom(n), os);
  const double log2e = 1.4426950408889634;
  for (int64_t i = 0; i < c->Sq; i++) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < c->Skv; j++) mx = fmax(mx, s[i * ss[0] + j * ss[1]]);
    double L = 0, M = isinf(mx) ? 0 : ceil(mx * log2e);
    for (int64_t j = 0; !isinf(mx) && j < c->Skv; j++) L += exp2(s[i * ss[0] + j * ss[1]] * log2e - M);
    if (!isinf(mx) && !isinf(sink)) L += exp2(sink * log2e - M);
    for (int64_t j = 0; j < c->Skv; j++) {
      const double x = u[i * us[0] + j * us[1]];
      out[i * os[0] + j * os[1]] = L > 0 ? dtype_round(n->type, x * L) / L : dtype_round(n->type, x);
    }
  }
}

/* softmax and logsumexp over j, row by row. A row that is all -inf gives
 * zero probabilities and lse = -inf, never NaN. A sink (src[1], one value
 * per (b, h): a scalar in this slice) joins each row's denominator as one
 * more logit whose probability is dropped: p_j = e^{x_j} / (e^sink +
 * sum_k e^{x_k}), lse = log(e^sink + sum_k e^{x_k}). */
static void ref_eval_row_reduce(const RefCtx *c, const IrNode *n,
                                double *out) {
  const double *x = c->val[n->src[0]->id];
  const double sink = ir_sink(n) ? c->val[ir_sink(n)->id][0] : -INFINITY;
  unsigned dom = ref_vdom(n);
  int64_t cnt[3], xs[3], os[3];
  ref_counts(c, dom, cnt);
  ref_strides(c, ref_vdom(n->src[0]), xs);
  ref_strides(c, dom, os);
  for (int64_t i = 0; i < cnt[0]; i++)
    for (int64_t d = 0; d < cnt[2]; d++) {
      const double *row = x + i * xs[0] + d * xs[2];
      double *orow = out + i * os[0] + d * os[2];
      double m = -INFINITY, sum = 0;
      for (int64_t j = 0; j < c->Skv; j++)
        if (row[j * xs[1]] > m)
          m = row[j * xs[1]];
      if (sink > m) m = sink;
      if (m != -INFINITY) {
        for (int64_t j = 0; j < c->Skv; j++)
          sum += exp(row[j * xs[1]] - m);
        sum += exp(sink - m);
      }
      if (n->op == IR_LOGSUMEXP) {
        orow[0] = m == -INFINITY ? -INFINITY : m + log(sum);
        continue;
      }
      int64_t nj = (dom & DOM_J) ? c->Skv : 1;
      for (int64_t j = 0; j < nj; j++)
        orow[j * os[1]] =
            m == -INFINITY ? 0.0 : exp(row[j * xs[1]] - m) / sum;
    }
}

/* A u64 or i32 scalar as dropout's seed or offset: negative i32 values
 * sign-extend, as the device's conversion to unsigned long long does. */
static uint64_t ref_u64(double x) {
  return x < 0 ? (uint64_t)(int64_t)x : (uint64_t)x;
}

/* dropout(p, rate, seed, offset): the element's Philox byte (philox.c,
 * the same code the kernels run) decides; survivors scale by 256 / (256 -
 * the rate in 256ths). rate, seed and offset vary over no axis
 * (ir_build). */
static void ref_eval_dropout(const RefCtx *c, const IrNode *n, double *out) {
  const double *p = c->val[n->src[0]->id];
  double rate = c->val[n->src[1]->id][0];
  uint64_t seed = ref_u64(c->val[n->src[2]->id][0]);
  uint64_t offset = ref_u64(c->val[n->src[3]->id][0]);
  uint32_t thresh = philox_keep_threshold(rate);
  double kept = philox_kept_scale(thresh);
  unsigned dom = ref_vdom(n);
  int64_t cnt[3], ps[3], os[3];
  ref_counts(c, dom, cnt);
  ref_strides(c, ref_vdom(n->src[0]), ps);
  ref_strides(c, dom, os);
  for (int64_t i = 0; i < cnt[0]; i++)
    for (int64_t j = 0; j < cnt[1]; j++) {
      uint32_t byte =
          philox_dropout_byte(seed, offset, c->b, c->h, i, j, c->H, c->Sq);
      double x = p[i * ps[0] + j * ps[1]];
      out[i * os[0] + j * os[1]] = byte >= thresh ? x * kept : 0.0;
    }
}

/* Folds |x| of this (b, h) into the node's running maximum. NaN sticks. */
static void ref_eval_amax(RefCtx *c, const IrNode *n) {
  const double *x = c->val[n->src[0]->id];
  int64_t cnt[3];
  ref_counts(c, ref_vdom(n->src[0]), cnt);
  double m = c->amax[n->id];
  for (int64_t e = 0; e < cnt[0] * cnt[1] * cnt[2] && !isnan(m); e++)
    m = isnan(x[e]) ? x[e] : fmax(m, fabs(x[e]));
  c->amax[n->id] = m;
}

static int ref_eval_node(RefCtx *c, const IrNode *n) {
  int64_t cnt[3];
  ref_counts(c, ref_vdom(n), cnt);
  /* (A packed sequence may have no keys: an axis of 0.) */
  if (cnt[0] > (INT64_C(1) << 34) / (cnt[1] ? cnt[1] : 1) / (cnt[2] ? cnt[2] : 1))
    return ref_fail(c, n, "a value of %lld x %lld x %lld elements is too "
                    "large for the CPU reference", (long long)cnt[0],
                    (long long)cnt[1], (long long)cnt[2]);
  double *out = malloc((size_t)(cnt[0] * cnt[1] * cnt[2] + 1) * sizeof(double));
  if (!out)
    return ref_fail(c, n, "out of memory");
  c->val[n->id] = out;
  c->owned[n->id] = true;
  switch (n->op) {
  case IR_CONST: case IR_SCALAR: case IR_DIM: case IR_INDEX:
    return ref_eval_leaf(c, n, out);
  case IR_LOAD:
    return ref_eval_load(c, n, out);
  case IR_QK:
    ref_eval_qk(c, out);
    return 0;
  case IR_PV:
    ref_eval_pv(c, n, out);
    return 0;
  case IR_SOFTMAX:
  case IR_LOGSUMEXP:
    ref_eval_row_reduce(c, n, out);
    return 0;
  case IR_DROPOUT:
    ref_eval_dropout(c, n, out);
    return 0;
  case IR_CAST:
    if (n == c->p_round) {
      ref_eval_p_round(c, n, out);
      return 0;
    }
    return ref_eval_pointwise(c, n, out);
  case IR_INPUT: case IR_TRANSPOSE: case IR_AMAX:
    die("ref_eval_node: %s is not an array", ir_op_name(n->op));
  default:
    return ref_eval_pointwise(c, n, out);
  }
}

/* ------------------------------------------------------------- sweeps */

static void ref_release(RefCtx *c, int id) {
  if (c->owned[id])
    free(c->val[id]);
  c->val[id] = NULL;
  c->owned[id] = false;
}

/* Marks what sweep L evaluates: its outputs and amax nodes, and what they
 * read, stopping at finished amax values. */
static void ref_plan_sweep(RefCtx *c, int L) {
  const IrGraph *g = c->g;
  for (int id = 0; id < g->nnodes; id++) {
    const IrNode *n = g->nodes[id];
    c->needed[id] = c->live[id] && c->level[id] == L && n->op == IR_AMAX;
    c->last_use[id] = id;
  }
  for (int k = 0; k < g->noutputs; k++)
    if (c->level[g->outputs[k].value->id] == L)
      c->needed[g->outputs[k].value->id] = true;
  for (int id = g->nnodes - 1; id >= 0; id--) {
    const IrNode *n = g->nodes[id];
    if (!c->needed[id] || (n->op == IR_AMAX && c->level[id] < L))
      continue;
    for (int s = 0; s < n->nsrc; s++) {
      int sid = n->src[s]->id;
      c->needed[sid] = !ref_is_tensor_operand(n->src[s]->op);
      if (c->last_use[sid] < id)
        c->last_use[sid] = id;
    }
    /* P's rounding reads the softmax's input (and sink) too. */
    if (n == c->p_round) {
      const IrNode *sm = g->softmax, *extra[2] = {sm->src[0], ir_sink(sm)};
      for (int k = 0; k < 2; k++)
        if (extra[k] && c->last_use[extra[k]->id] < id) c->last_use[extra[k]->id] = id;
    }
  }
}

static int ref_sweep_pair(RefCtx *c, int L) {
  const IrGraph *g = c->g;
  for (int id = 0; id < g->nnodes; id++) {
    const IrNode *n = g->nodes[id];
    if (!c->needed[id])
      continue;
    if (n->op == IR_AMAX) {
      if (c->level[id] == L)
        ref_eval_amax(c, n);
      c->val[id] = &c->amax[id];
      c->owned[id] = false;
    } else if (ref_eval_node(c, n)) {
      return -1;
    }
    for (int k = 0; k < g->noutputs; k++)
      if (c->plans[k].node == n && n->op != IR_AMAX && c->level[id] == L &&
          (!c->plans[k].fill_all || (c->b == 0 && c->h == 0)))
        ref_write_output(c, &c->plans[k]);
    for (int s = 0; s < n->nsrc; s++)
      if (c->last_use[n->src[s]->id] == id)
        ref_release(c, n->src[s]->id);
    if (c->last_use[id] == id)
      ref_release(c, id);
  }
  return 0;
}

static int ref_sweep(RefCtx *c, int L) {
  const IrGraph *g = c->g;
  ref_plan_sweep(c, L);
  for (int id = 0; id < g->nnodes; id++)
    if (c->needed[id] && g->nodes[id]->op == IR_AMAX && c->level[id] == L)
      c->amax[id] = 0;
  for (c->b = 0; c->b < c->B; c->b++)
    for (c->h = 0; c->h < c->H; c->h++) {
      if (c->seq) { /* a packed sequence's own lengths; no query rows, nothing to do */
        c->Sq = c->seq[4 * c->b + 1];
        c->Skv = c->seq[4 * c->b + 3];
        if (c->Sq == 0) continue;
      }
      int rc = ref_sweep_pair(c, L);
      for (int id = 0; id < g->nnodes; id++)
        ref_release(c, id);
      if (rc)
        return -1;
    }
  for (int k = 0; k < g->noutputs; k++) {
    const IrNode *n = c->plans[k].node;
    if (n->op == IR_AMAX && c->level[n->id] == L) {
      c->val[n->id] = &c->amax[n->id];
      ref_write_output(c, &c->plans[k]);
      c->val[n->id] = NULL;
    }
  }
  return 0;
}

static void ref_levels(RefCtx *c) {
  const IrGraph *g = c->g;
  c->maxlevel = 0;
  for (int k = 0; k < g->noutputs; k++)
    c->live[g->outputs[k].value->id] = true;
  for (int id = g->nnodes - 1; id >= 0; id--)
    if (c->live[id])
      for (int s = 0; s < g->nodes[id]->nsrc; s++)
        c->live[g->nodes[id]->src[s]->id] = true;
  for (int id = 0; id < g->nnodes; id++) {
    const IrNode *n = g->nodes[id];
    int lv = 0;
    for (int s = 0; s < n->nsrc; s++) {
      const IrNode *x = n->src[s];
      int ls = c->level[x->id] + (x->op == IR_AMAX);
      if (ls > lv)
        lv = ls;
    }
    c->level[id] = lv;
    if (c->live[id] && lv > c->maxlevel)
      c->maxlevel = lv;
  }
}

/* ---------------------------------------------------------- the entry */

static bool ref_alloc_ctx(RefCtx *c) {
  size_t nn = (size_t)c->g->nnodes + 1, nd = (size_t)c->g->ndims + 1;
  c->dimval = calloc(nd, sizeof *c->dimval);
  c->dimfrom = calloc(nd, sizeof *c->dimfrom);
  c->dimpos = calloc(nd, sizeof *c->dimpos);
  c->level = calloc(nn, sizeof *c->level);
  c->live = calloc(nn, sizeof *c->live);
  c->needed = calloc(nn, sizeof *c->needed);
  c->last_use = calloc(nn, sizeof *c->last_use);
  c->val = calloc(nn, sizeof *c->val);
  c->owned = calloc(nn, sizeof *c->owned);
  c->amax = calloc(nn, sizeof *c->amax);
  c->plans = calloc((size_t)c->g->noutputs + 1, sizeof *c->plans);
  return c->dimval && c->dimfrom && c->dimpos && c->level && c->live &&
         c->needed && c->last_use && c->val && c->owned && c->amax &&
         c->plans;
}

static void ref_free_ctx(RefCtx *c) {
  free(c->seq);
  free(c->qview.data);
  free(c->kview.data);
  free(c->vview.data);
  free(c->dimval);
  free(c->dimfrom);
  free(c->dimpos);
  free(c->level);
  free(c->live);
  free(c->needed);
  free(c->last_use);
  free(c->val);
  free(c->owned);
  free(c->amax);
  free(c->plans);
}

int ref_forward(RefArgs *args, StrBuf *err) {
  RefCtx c = {.args = args, .g = args->g, .err = err};
  if (c.g && c.g->pv && c.g->softmax) c.p_round = ir_p_chain(c.g).round;
  int rc = -1;
  if (!c.g)
    return ref_fail(&c, NULL, "no graph given");
  if (!ref_alloc_ctx(&c)) {
    ref_fail(&c, NULL, "out of memory");
    goto done;
  }
  if (ref_check_graph(&c) || ref_bind_dims(&c) || ref_plan_outputs(&c))
    goto done;
  ref_levels(&c);
  for (int L = 0; L <= c.maxlevel; L++)
    if (ref_sweep(&c, L))
      goto done;
  rc = 0;
done:
  if (rc)
    for (int k = 0; k < c.g->noutputs; k++) {
      int t = c.g->outputs[k].tensor;
      if (t >= 0 && t < c.g->ntensors && args->tensors &&
          c.g->tensors[t].is_output) {
        free(args->tensors[t].data);
        args->tensors[t].data = NULL;
      }
    }
  ref_free_ctx(&c);
  return rc;
}
