/*
 * ir_check.c: the checks that need a whole graph. ir_build.c has already
 * typed every node and checked each expression on its own; here we find
 * the chain's landmarks (exactly one q @ k^T, softmax and p @ v), check
 * q, k and v against each other, tie logsumexp to the softmax, and give
 * every output its type and shape.
 */
#include <string.h>

#include "attnc.h"

/* The single node of op, or NULL after reporting none or several. */
static IrNode *landmark(IrGraph *g, Diag *d, IrOp op, const char *what) {
  IrNode *first = NULL;
  for (int k = 0; k < g->nnodes; k++) {
    IrNode *n = g->nodes[k];
    if (n->op != op) continue;
    if (!first) {
      first = n;
      continue;
    }
    diag_error(d, n->loc, "a graph has exactly one %s", what);
    diag_note(d, first->loc, "the first %s is here", what);
    return NULL;
  }
  if (!first)
    diag_error(d, g->loc, "graph '%s' has no %s", g->name,
               op == IR_PV ? "second matmul (p @ v)" : what);
  return first;
}

static bool dim_eq(const IrTensor *a, int ia, const IrTensor *b, int ib) {
  if (a->dim_sym[ia] >= 0 || b->dim_sym[ib] >= 0)
    return a->dim_sym[ia] == b->dim_sym[ib];
  return a->dim_val[ia] == b->dim_val[ib];
}

static const char *dim_str(StrBuf *sb, const IrGraph *g, const IrTensor *t,
                           int k) {
  sb->len = 0;
  if (t->dim_sym[k] >= 0) sb_puts(sb, g->dims[t->dim_sym[k]].name);
  else sb_printf(sb, "%lld", (long long)t->dim_val[k]);
  return sb->data;
}

/* "[B, H, Sq, 128]" from dimensions of up to two tensors: the first n of
 * a, then b's last if b is not NULL. */
static void shape_str(StrBuf *sb, const IrGraph *g, const IrTensor *a, int n,
                      const IrTensor *b) {
  StrBuf one = {0};
  sb_putc(sb, '[');
  for (int k = 0; k < n; k++)
    sb_printf(sb, "%s%s", k ? ", " : "", dim_str(&one, g, a, k));
  if (b) sb_printf(sb, "%s%s", n ? ", " : "", dim_str(&one, g, b, b->ndims - 1));
  sb_putc(sb, ']');
  sb_free(&one);
}

static bool head_dim_const(const IrTensor *t, Diag *d) {
  if (t->dim_sym[t->ndims - 1] < 0) return true;
  diag_error(d, t->loc, "head dimension of '%s' must be a constant", t->name);
  return false;
}

/* Logical dimension `role` of k or v (ir_kv_dim) equals dimension ia of
 * a; a paged cache's length (role 2) is checked apart. */
static bool kv_dim_eq(const IrGraph *g, const IrTensor *a, int ia, int kv, int role) {
  const IrKvDim x = ir_kv_dim(g, kv, role);
  return dim_eq(a, ia, &g->tensors[x.tensor], x.dim);
}

static const char *kv_dim_str(StrBuf *sb, const IrGraph *g, int kv, int role) {
  const IrKvDim x = ir_kv_dim(g, kv, role);
  return dim_str(sb, g, &g->tensors[x.tensor], x.dim);
}

/* A paged k and v: both paged, by one table in one layout, with the same
 * pages (count, size and heads). */
static void check_paged(IrGraph *g, Diag *d) {
  const IrTensor *k = &g->tensors[g->k], *v = &g->tensors[g->v];
  if (!k->paged && !v->paged) return;
  if (k->paged != v->paged) {
    const IrTensor *dense = k->paged ? v : k;
    diag_error(d, dense->loc, "'%s' is dense but '%s' is a paged cache: k and v are paged "
               "together", dense->name, k->paged ? k->name : v->name);
    return;
  }
  if (k->page_table != v->page_table || k->paged_hnd != v->paged_hnd) {
    diag_error(d, v->loc, "'%s' and '%s' must be paged by the same page table in the same "
               "layout", k->name, v->name);
    return;
  }
  StrBuf s1 = {0}, s2 = {0};
  static const char *const what[3] = {"page count", "page size", "head count"};
  const int dims[3] = {0, ir_page_dim(k), 3 - ir_page_dim(k)};
  for (int x = 0; x < 3; x++)
    if (!dim_eq(k, dims[x], v, dims[x]))
      diag_error(d, v->loc, "the paged caches '%s' and '%s' must have the same %s: %s and %s",
                 k->name, v->name, what[x], dim_str(&s1, g, k, dims[x]),
                 dim_str(&s2, g, v, dims[x]));
  sb_free(&s1);
  sb_free(&s2);
}

/* q's and k's head dims agree (q's is its last dim; k's through ir_kv_dim:
 * dense, packed or paged), where both are constants (heads_ok). */
static void check_head_dims(const IrGraph *g, Diag *d, bool heads_ok) {
  const IrTensor *q = &g->tensors[g->q], *k = &g->tensors[g->k];
  const int qd = q->ndims - 1, kd = ir_kv_dim(g, g->k, 3).dim;
  if (heads_ok && q->dim_val[qd] != k->dim_val[kd])
    diag_error(d, k->loc, "head dimensions of '%s' (%lld) and '%s' (%lld) differ", q->name,
               (long long)q->dim_val[qd], k->name, (long long)k->dim_val[kd]);
}

/* k's heads divide q's (GQA), where both counts are constants. */
static void check_heads_divide(const IrGraph *g, Diag *d) {
  const IrTensor *q = &g->tensors[g->q], *k = &g->tensors[g->k];
  const int kh = ir_kv_dim(g, g->k, 1).dim;
  if (q->dim_sym[1] < 0 && k->dim_sym[kh] < 0 && q->dim_val[1] % k->dim_val[kh] != 0)
    diag_error(d, k->loc, "'%s' has %lld heads, which does not divide the %lld heads of '%s'",
               k->name, (long long)k->dim_val[kh], (long long)q->dim_val[1], q->name);
}

/* Packed queries against a paged cache (continuous batching: each
 * sequence's new tokens against its pages): q [Tokens, H, D], k and v
 * paged together (check_paged) with head dims and heads that fit q's. The
 * batch is the offsets' B + 1 and the table's B rows, checked at bind. */
static void check_packed_paged(IrGraph *g, Diag *d) {
  const IrTensor *q = &g->tensors[g->q], *k = &g->tensors[g->k];
  if (g->v >= 0) check_paged(g, d);
  bool heads = head_dim_const(q, d);
  heads &= head_dim_const(k, d);
  check_head_dims(g, d, heads);
  check_heads_divide(g, d);
}

/* Packed sequences: q, k and v all packed ([Tokens, Heads, D] each), k
 * and v by the same offsets, q's and k's offsets of one length (B + 1);
 * or packed q against paged k and v (check_packed_paged). */
static void check_packed(IrGraph *g, Diag *d) {
  const IrTensor *q = &g->tensors[g->q], *k = &g->tensors[g->k];
  const IrTensor *v = g->v >= 0 ? &g->tensors[g->v] : NULL;
  if (q->packed && k->paged && (!v || v->paged)) {
    check_packed_paged(g, d);
    return;
  }
  if (q->packed && (k->paged || (v && v->paged))) {
    const IrTensor *odd = k->paged ? (v ? v : k) : k;
    diag_error(d, odd->loc, "'%s' is %s but '%s' is a paged cache: with a packed q, k and v are "
               "both packed or both paged", odd->name, odd->packed ? "packed" : "dense",
               k->paged ? k->name : v->name);
    return;
  }
  const IrTensor *all[3] = {q, k, v}, *some = q->packed ? q : k->packed ? k : v;
  for (int x = 0; x < 3; x++)
    if (all[x] && !all[x]->packed) {
      diag_error(d, all[x]->loc, "'%s' is dense but '%s' is packed: q, k and v are packed "
                 "together", all[x]->name, some->name);
      return;
    }
  StrBuf s1 = {0}, s2 = {0};
  bool heads = head_dim_const(q, d);
  heads &= g->k == g->q || head_dim_const(k, d);
  if (v && g->v != g->q && g->v != g->k) head_dim_const(v, d);
  check_head_dims(g, d, heads);
  const IrTensor *oq = &g->tensors[q->seq_offsets], *ok = &g->tensors[k->seq_offsets];
  if (!dim_eq(oq, 0, ok, 0))
    diag_error(d, ok->loc, "the offsets '%s' and '%s' must have the same length (batch + 1): %s "
               "and %s", oq->name, ok->name, dim_str(&s1, g, oq, 0), dim_str(&s2, g, ok, 0));
  check_heads_divide(g, d);
  if (v && v->seq_offsets != k->seq_offsets)
    diag_error(d, v->loc, "'%s' and '%s' must be packed by the same offsets", k->name, v->name);
  static const char *const what[2] = {"token count", "head count"};
  for (int x = 0; v && x < 2; x++)
    if (!dim_eq(k, x, v, x))
      diag_error(d, v->loc, "'%s' and '%s' must have the same %s: %s and %s", k->name, v->name,
                 what[x], dim_str(&s1, g, k, x), dim_str(&s2, g, v, x));
  sb_free(&s1);
  sb_free(&s2);
}

/* q [B, H, Sq, D], k [B, Hk, Skv, D], v [B, Hk, Skv, Dv] (a paged k and
 * v in their logical view). */
static void check_qkv(IrGraph *g, Diag *d) {
  const IrTensor *q = &g->tensors[g->q], *k = &g->tensors[g->k];
  if (q->packed || k->packed || (g->v >= 0 && g->tensors[g->v].packed)) {
    check_packed(g, d);
    return;
  }
  StrBuf s1 = {0}, s2 = {0};
  bool heads = head_dim_const(q, d);
  heads &= g->k == g->q || head_dim_const(k, d);
  check_head_dims(g, d, heads);
  if (!kv_dim_eq(g, q, 0, g->k, 0))
    diag_error(d, k->loc, "'%s' and '%s' must have the same batch size: %s and "
               "%s", q->name, k->paged ? g->tensors[k->page_table].name : k->name,
               dim_str(&s1, g, q, 0), kv_dim_str(&s2, g, g->k, 0));
  check_heads_divide(g, d);
  if (g->v >= 0) {
    const IrTensor *v = &g->tensors[g->v];
    if (g->v != g->q && g->v != g->k) head_dim_const(v, d);
    check_paged(g, d);
    static const char *const what[3] = {"batch size", "head count",
                                        "key length"};
    for (int x = 0; x < 3 && !k->paged; x++) {
      if (dim_eq(k, x, v, x)) continue;
      diag_error(d, v->loc, "'%s' and '%s' must have the same %s: %s and %s",
                 k->name, v->name, what[x], dim_str(&s1, g, k, x),
                 dim_str(&s2, g, v, x));
    }
  }
  sb_free(&s1);
  sb_free(&s2);
}

/* Fills in or checks one output's type and shape. The value's domain
 * decides the shape: over d it is the attention output [B, H, Sq, Dv];
 * over some of b, h, i a row statistic [B, H, Sq]; over nothing a single
 * value [1]. */
static void check_output(IrGraph *g, Diag *d, const IrOutput *o) {
  IrTensor *t = &g->tensors[o->tensor];
  const IrNode *n = o->value;
  const IrTensor *q = g->q >= 0 ? &g->tensors[g->q] : NULL;
  const IrTensor *v = g->v >= 0 ? &g->tensors[g->v] : NULL;
  char buf[8];
  if (n->dom & DOM_J) {
    diag_error(d, o->loc, "output '%s' varies over key positions (j); an "
               "output varies over [b, h, i, d], [b, h, i] or nothing",
               o->name);
    diag_note(d, n->loc, "its value varies over %s",
              ir_dom_letters(n->dom, buf));
    return;
  }
  if (t->type == DT_NONE)
    t->type = n->type != DT_F32 ? n->type
              : (n->dom & DOM_D) && q ? q->type : DT_F32;
  if ((t->type == DT_BOOL) != (n->type == DT_BOOL))
    diag_error(d, o->loc, "output '%s' is declared %s but its value is %s",
               o->name, dtype_name(t->type), dtype_name(n->type));
  /* The expected shape, as a tensor. */
  IrTensor want = {.ndims = 1, .dim_sym = {-1, -1, -1, -1}, .dim_val = {1}};
  if (n->dom && q && q->packed) {
    /* Packed like q: o [Tokens, H, Dv], row statistics [H, Tokens]. */
    if ((n->dom & DOM_D) && !v) return;
    t->packed = true;
    t->seq_offsets = q->seq_offsets;
    want.ndims = (n->dom & DOM_D) ? 3 : 2;
    const int from[3] = {n->dom & DOM_D ? 0 : 1, n->dom & DOM_D ? 1 : 0, 2};
    for (int k = 0; k < want.ndims; k++) {
      const IrTensor *src = k == 2 ? v : q;
      const int x = k == 2 && v->paged ? 3 : from[k]; /* a paged v's head dim is its last */
      want.dim_sym[k] = src->dim_sym[x];
      want.dim_val[k] = src->dim_val[x];
    }
  } else if (n->dom) {
    if (!q || ((n->dom & DOM_D) && !v)) return; /* reported as a landmark */
    want.ndims = (n->dom & DOM_D) ? 4 : 3;
    for (int k = 0; k < 3; k++) {
      want.dim_sym[k] = q->dim_sym[k];
      want.dim_val[k] = q->dim_val[k];
    }
    if (want.ndims == 4) {
      want.dim_sym[3] = v->dim_sym[3];
      want.dim_val[3] = v->dim_val[3];
    }
  }
  if (t->ndims < 0) {
    memcpy(t->dim_sym, want.dim_sym, sizeof want.dim_sym);
    memcpy(t->dim_val, want.dim_val, sizeof want.dim_val);
    t->ndims = want.ndims;
    return;
  }
  bool same = t->ndims == want.ndims;
  for (int k = 0; same && k < t->ndims; k++) same = dim_eq(t, k, &want, k);
  if (same) return;
  StrBuf have = {0}, should = {0};
  shape_str(&have, g, t, t->ndims, NULL);
  shape_str(&should, g, &want, want.ndims, NULL);
  diag_error(d, o->loc, "output '%s' is declared %s but its value has shape %s",
             o->name, have.data, should.data);
  sb_free(&have);
  sb_free(&should);
}

/* The backward binds "d" + a name for each gradient it reads or writes
 * (dO for the output p @ v, dq, dk, dv and each bias's): a declared
 * tensor or scalar with one of those names would be ambiguous there. */
static void check_grad_names(const IrGraph *g, Diag *d) {
  bool grad = false;
  for (int t = 0; t < g->ntensors; t++) grad |= g->tensors[t].grad;
  if (!grad) return;
  for (int t = 0; t < g->ntensors; t++) {
    const IrTensor *from = &g->tensors[t];
    bool named = from->grad;
    for (int k = 0; k < g->noutputs; k++)
      named |= g->outputs[k].value == g->pv && g->outputs[k].tensor == t;
    if (!named) continue;
    for (int u = 0; u < g->ntensors + g->nscalars; u++) {
      const char *other = u < g->ntensors ? g->tensors[u].name : g->scalars[u - g->ntensors].name;
      Loc at = u < g->ntensors ? g->tensors[u].loc : g->scalars[u - g->ntensors].loc;
      if (other[0] == 'd' && !strcmp(other + 1, from->name)) {
        diag_error(d, at, "'%s' is the name the backward gives the gradient of '%s'; "
                   "rename it", other, from->name);
        diag_note(d, from->loc, "'%s' is declared here", from->name);
      }
    }
  }
}

int ir_check_graph(IrGraph *g, Diag *d) {
  int before = d->nerrors;
  g->qk = landmark(g, d, IR_QK, "q @ k^T");
  g->softmax = landmark(g, d, IR_SOFTMAX, "softmax");
  g->pv = landmark(g, d, IR_PV, "p @ v");
  g->q = g->k = g->v = -1;
  if (g->qk) {
    g->q = g->qk->src[0]->ref;
    g->k = g->qk->src[1]->ref;
  }
  if (g->pv) g->v = g->pv->src[1]->ref;
  if (g->qk) check_qkv(g, d);
  for (int k = 0; k < g->nnodes; k++) {
    const IrNode *n = g->nodes[k];
    if (n->op == IR_DIM && n->ref < 0 && !ir_packed(g))
      diag_error(d, n->loc, "'%s' is the length of a packed sequence, and this graph's q is not "
                 "packed (q = packed(tokens, offsets))", n->ref == IR_SEQLEN_Q ? "seqlen_q"
                                                                               : "seqlen_k");
    else if (n->op == IR_DIM && n->ref == IR_SEQLEN_K && g->k >= 0 && g->tensors[g->k].paged)
      diag_error(d, n->loc, "'seqlen_k' is the length of a packed sequence of keys, and this "
                 "graph's keys are a paged cache, which has no offsets: give the sequences' "
                 "lengths as a tensor (j < kv_len[b])");
  }
  for (int k = 0; g->softmax && k < g->nnodes; k++) {
    IrNode *n = g->nodes[k];
    if (n->op == IR_LOGSUMEXP && n->src[0] != g->softmax->src[0]) {
      diag_error(d, n->loc, "logsumexp must take the scores that softmax "
                 "takes");
      diag_note(d, g->softmax->loc, "the softmax is here");
    } else if (n->op == IR_LOGSUMEXP && ir_sink(n) != ir_sink(g->softmax)) {
      /* The kernels know one denominator per row: the softmax's. */
      diag_error(d, n->loc, ir_sink(g->softmax) ? "logsumexp must take the softmax's sink too "
                 "(name it, `sk = sinks[h];`, and pass the name to both)"
                 : "logsumexp has a sink that the softmax does not");
      diag_note(d, g->softmax->loc, "the softmax is here");
    }
  }
  if (g->noutputs == 0 && d->nerrors == before)
    diag_error(d, g->loc, "graph '%s' has no outputs", g->name);
  for (int k = 0; k < g->noutputs; k++) check_output(g, d, &g->outputs[k]);
  if (d->nerrors == before) check_grad_names(g, d);
  return d->nerrors - before;
}
