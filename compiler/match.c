/*
 * match.c: recognises the forward attention chain in an IR graph and
 * produces the kernel spec a template is filled from.
 *
 * The chain (LANGUAGE.md):   S = q @ k^T -> pointwise ops -> masks
 *   -> softmax -> P @ v -> pointwise ops on O
 * The checks in ir_build.c already guarantee one QK, one softmax and one
 * PV in the right order; this file decides whether a template can run what
 * surrounds them, and analyses the masks. Masks applied last (the
 * outermost mask() calls under the softmax) are split into conjuncts; the
 * affine ones bound the key tiles each query tile visits, and the
 * separable ones (an i side compared with a j side, e.g. document ids)
 * classify tiles from per-tile ranges of their sides. Masks nested
 * deeper stay in the score expression and are evaluated per element, which
 * is always correct.
 */
#include <string.h>

#include "attn_abi.h"
#include "attnc.h"

/* ------------------------------------------------------ affine analysis */

/* A linear form ci*i + cj*j + k + sum(coef * term), with terms that vary
 * over neither i nor j. */
typedef struct Lin {
  int64_t ci, cj, k;
  int nterms;
  int64_t coef[MATCH_MAX_TERMS];
  IrNode *term[MATCH_MAX_TERMS];
} Lin;

static bool lin_add_term(Lin *l, int64_t coef, IrNode *t) {
  for (int n = 0; n < l->nterms; n++)
    if (l->term[n] == t) {
      l->coef[n] += coef;
      return true;
    }
  if (l->nterms == MATCH_MAX_TERMS) return false;
  l->coef[l->nterms] = coef;
  l->term[l->nterms++] = t;
  return true;
}

/* l += s * r. Coefficients stay small in practice; refuse overflow. */
static bool lin_axpy(Lin *l, int64_t s, const Lin *r) {
  int64_t a, b, c;
  if (__builtin_mul_overflow(s, r->ci, &a) || __builtin_add_overflow(l->ci, a, &l->ci) ||
      __builtin_mul_overflow(s, r->cj, &b) || __builtin_add_overflow(l->cj, b, &l->cj) ||
      __builtin_mul_overflow(s, r->k, &c) || __builtin_add_overflow(l->k, c, &l->k))
    return false;
  for (int n = 0; n < r->nterms; n++) {
    int64_t t;
    if (__builtin_mul_overflow(s, r->coef[n], &t) || !lin_add_term(l, t, r->term[n]))
      return false;
  }
  return true;
}

static bool is_int_node(const IrNode *n) { return n->type == DT_I32; }

/* Fixed for one (b, h): varies over neither i, j nor the head dim. */
static bool is_row_invariant(const IrNode *n) {
  return is_int_node(n) && (n->dom & (DOM_I | DOM_J | DOM_D)) == 0;
}

static bool lin_of(IrNode *n, Lin *out, int depth) {
  memset(out, 0, sizeof *out);
  if (depth > 64 || !is_int_node(n)) return false;
  if (n->op == IR_CONST) {
    out->k = n->ival;
    return true;
  }
  if (n->op == IR_INDEX && n->ival == DOM_I) return out->ci = 1, true;
  if (n->op == IR_INDEX && n->ival == DOM_J) return out->cj = 1, true;
  if (is_row_invariant(n) && n->op != IR_ADD && n->op != IR_SUB &&
      n->op != IR_NEG && n->op != IR_MUL)
    return lin_add_term(out, 1, n);
  Lin a, b;
  switch (n->op) {
  case IR_NEG:
    return lin_of(n->src[0], &a, depth + 1) && lin_axpy(out, -1, &a);
  case IR_ADD:
  case IR_SUB:
    return lin_of(n->src[0], &a, depth + 1) && lin_of(n->src[1], &b, depth + 1) &&
           lin_axpy(out, 1, &a) && lin_axpy(out, n->op == IR_ADD ? 1 : -1, &b);
  case IR_MUL:
    if (is_row_invariant(n)) return lin_add_term(out, 1, n);
    for (int s = 0; s < 2; s++) {
      IrNode *c = n->src[s], *x = n->src[1 - s];
      if (c->op == IR_CONST && lin_of(x, &a, depth + 1)) return lin_axpy(out, c->ival, &a);
    }
    return false;
  default:
    return false;
  }
}

/* ---------------------------------------------------- i32 wrap-around */

/* Term t's place in m (added with magnitude 0 when new); -1 when m has
 * no room for another term. */
static int mag_slot(MagForm *m, IrNode *t) {
  for (int q = 0; q < m->n; q++)
    if (m->t[q] == t) return q;
  if (m->n == MATCH_MAX_TERMS) return -1;
  m->t[m->n] = t, m->c[m->n] = 0;
  return m->n++;
}

/* m += s * x (magnitudes, s >= 0). */
static void mag_add(MagForm *m, const MagForm *x, int64_t s) {
  int64_t a, b, c;
  if (m->unbounded || x->unbounded || __builtin_mul_overflow(s, x->mi, &a) ||
      __builtin_mul_overflow(s, x->mj, &b) || __builtin_mul_overflow(s, x->mk, &c) ||
      __builtin_add_overflow(m->mi, a, &m->mi) || __builtin_add_overflow(m->mj, b, &m->mj) ||
      __builtin_add_overflow(m->mk, c, &m->mk)) {
    m->unbounded = true;
    return;
  }
  for (int k = 0; k < x->n && !m->unbounded; k++) {
    int64_t v;
    int at = mag_slot(m, x->t[k]);
    if (at < 0 || __builtin_mul_overflow(s, x->c[k], &v) ||
        __builtin_add_overflow(m->c[at], v, &m->c[at]))
      m->unbounded = true;
  }
}

/* Componentwise maximum: bounds each of the forms it joins. */
static void mag_max(MagForm *m, const MagForm *x) {
  if (x->unbounded) m->unbounded = true;
  if (m->unbounded) return;
  if (x->mi > m->mi) m->mi = x->mi;
  if (x->mj > m->mj) m->mj = x->mj;
  if (x->mk > m->mk) m->mk = x->mk;
  for (int k = 0; k < x->n && !m->unbounded; k++) {
    int at = mag_slot(m, x->t[k]);
    if (at < 0) m->unbounded = true;
    else if (x->c[k] > m->c[at]) m->c[at] = x->c[k];
  }
}

/* The value bound of n in *val, and the bound of every arithmetic node
 * under it (their i32 results) joined into *inter; *arith says whether
 * there was any. Mirrors lin_of, which has accepted n. */
static void mag_of(IrNode *n, MagForm *val, MagForm *inter, bool *arith, int depth) {
  memset(val, 0, sizeof *val);
  if (depth > 64) {
    val->unbounded = inter->unbounded = *arith = true;
    return;
  }
  if (n->op == IR_CONST) {
    val->mk = n->ival < 0 ? -n->ival : n->ival;
    return;
  }
  if (n->op == IR_INDEX) {
    *(n->ival == DOM_I ? &val->mi : &val->mj) = 1;
    return;
  }
  /* A row-invariant value other than a sum or negation is one term
   * (computed in i32 by the kernels and by the hook alike). */
  if (is_row_invariant(n) && n->op != IR_ADD && n->op != IR_SUB && n->op != IR_NEG) {
    val->n = 1, val->t[0] = n, val->c[0] = 1;
    return;
  }
  MagForm a, b;
  switch (n->op) {
  case IR_NEG:
    mag_of(n->src[0], &a, inter, arith, depth + 1);
    mag_add(val, &a, 1);
    break;
  case IR_ADD:
  case IR_SUB:
    mag_of(n->src[0], &a, inter, arith, depth + 1);
    mag_of(n->src[1], &b, inter, arith, depth + 1);
    mag_add(val, &a, 1);
    mag_add(val, &b, 1);
    break;
  case IR_MUL: {
    int s = n->src[0]->op == IR_CONST ? 0 : 1;
    int64_t c = n->src[s]->ival;
    mag_of(n->src[1 - s], &a, inter, arith, depth + 1);
    mag_add(val, &a, c < 0 ? -c : c);
    break;
  }
  default:
    val->unbounded = true;
    break;
  }
  *arith = true;
  mag_max(inter, val);
}

/* Puts lhs - rhs (times sign, plus bias) into the form `... <= 0`. */
static bool term_from(IrNode *cond, const Lin *diff, int64_t sign, int64_t bias,
                      MaskTerm *t) {
  Lin l = {0};
  l.k = bias;
  if (!lin_axpy(&l, sign, diff)) return false;
  memset(t, 0, sizeof *t);
  t->cond = cond;
  t->affine = true;
  t->ci = l.ci;
  t->cj = l.cj;
  t->k = l.k;
  t->nterms = l.nterms;
  memcpy(t->coef, l.coef, sizeof l.coef);
  memcpy(t->term, l.term, sizeof l.term);
  return true;
}

int match_affine(IrNode *cond, MaskTerm out[2]) {
  IrOp op = cond->op;
  if (op != IR_LT && op != IR_LE && op != IR_GT && op != IR_GE && op != IR_EQ) return 0;
  Lin a, b, diff = {0};
  if (!lin_of(cond->src[0], &a, 0) || !lin_of(cond->src[1], &b, 0)) return 0;
  if (!lin_axpy(&diff, 1, &a) || !lin_axpy(&diff, -1, &b)) return 0;
  /* Integers: x < 0 is x + 1 <= 0, and x > 0 is -x + 1 <= 0. */
  int n;
  switch (op) {
  case IR_LE: n = term_from(cond, &diff, 1, 0, &out[0]) ? 1 : 0; break;
  case IR_LT: n = term_from(cond, &diff, 1, 1, &out[0]) ? 1 : 0; break;
  case IR_GE: n = term_from(cond, &diff, -1, 0, &out[0]) ? 1 : 0; break;
  case IR_GT: n = term_from(cond, &diff, -1, 1, &out[0]) ? 1 : 0; break;
  default:
    n = term_from(cond, &diff, 1, 0, &out[0]) && term_from(cond, &diff, -1, 0, &out[1]) ? 2 : 0;
  }
  /* Where the i32 evaluation of each side could wrap (== gives two
   * conjuncts of the same sides). */
  for (int side = 0; n > 0 && side < 2; side++) {
    MagForm val;
    memset(&out[0].wrap[side], 0, sizeof out[0].wrap[side]);
    out[0].has_wrap[side] = false;
    mag_of(cond->src[side], &val, &out[0].wrap[side], &out[0].has_wrap[side], 0);
    for (int k = 1; k < n; k++) {
      out[k].wrap[side] = out[0].wrap[side];
      out[k].has_wrap[side] = out[0].has_wrap[side];
    }
  }
  return n;
}

/* --------------------------------------------------- separable analysis */

/* A side of a separable comparison: varies over `axis` (i or j) and not
 * over the other one nor the head dim. */
static bool is_side(const IrNode *n, unsigned axis) {
  unsigned other = (DOM_I | DOM_J) & ~axis;
  return (n->dom & axis) && !(n->dom & (other | DOM_D));
}

/* The type emit_expr.c compares two operands in. */
static DType compare_kind(const IrNode *x, const IrNode *y) {
  DType a = expr_kind(x->type), b = expr_kind(y->type);
  if (a == DT_F32 || b == DT_F32) return DT_F32;
  if (a == DT_U64 || b == DT_U64) return DT_U64;
  return a == DT_BOOL && b == DT_BOOL ? DT_BOOL : DT_I32;
}

/* x op y == y mirror(op) x. */
static IrOp mirror(IrOp op) {
  switch (op) {
  case IR_LT: return IR_GT;
  case IR_LE: return IR_GE;
  case IR_GT: return IR_LT;
  case IR_GE: return IR_LE;
  default: return op; /* == and != */
  }
}

bool match_separable(IrNode *cond, MaskTerm *out) {
  IrOp op = cond->op;
  if (op != IR_LT && op != IR_LE && op != IR_GT && op != IR_GE && op != IR_EQ && op != IR_NE)
    return false;
  IrNode *x = cond->src[0], *y = cond->src[1];
  bool ij = is_side(x, DOM_I) && is_side(y, DOM_J);
  bool ji = is_side(x, DOM_J) && is_side(y, DOM_I);
  if (!ij && !ji) return false;
  memset(out, 0, sizeof *out);
  out->cond = cond;
  out->sep = true;
  out->sep_op = ij ? op : mirror(op);
  out->side[0] = ij ? x : y;
  out->side[1] = ij ? y : x;
  out->sep_kind = compare_kind(x, y);
  return true;
}

/* Interval rules, as text for the device and as C for match_sep_class.
 * Each is a plain comparison (no negation), so NaN bounds fail both. */
#define SEP_RULES(X)                                                          \
  X(IR_EQ, ahi < blo || bhi < alo, alo == ahi && blo == bhi && alo == blo)    \
  X(IR_NE, alo == ahi && blo == bhi && alo == blo, ahi < blo || bhi < alo)    \
  X(IR_LT, alo >= bhi, ahi < blo)                                             \
  X(IR_LE, alo > bhi, ahi <= blo)                                             \
  X(IR_GT, ahi <= blo, alo > bhi)                                             \
  X(IR_GE, ahi < blo, alo >= bhi)

void match_sep_rules(IrOp op, const char **none, const char **all) {
  switch (op) {
#define X(o, n, a)                                                            \
  case o:                                                                     \
    *none = #n;                                                               \
    *all = #a;                                                                \
    return;
    SEP_RULES(X)
#undef X
  default: die("match_sep_rules: op '%s' is not a comparison", ir_op_name(op));
  }
}

int match_sep_class(IrOp op, double alo, double ahi, double blo, double bhi) {
  switch (op) {
#define X(o, n, a)                                                            \
  case o:                                                                     \
    return (n) ? 0 : (a) ? 2 : 1;
    SEP_RULES(X)
#undef X
  default: die("match_sep_class: op '%s' is not a comparison", ir_op_name(op));
  }
}

/* --------------------------------------------------------- the matcher */

typedef struct Matcher {
  const IrGraph *g;
  Arena *a;
  Diag *d;
  MaskTerm *masks;
  int nmasks, cap;
} Matcher;

static void push_term(Matcher *m, const MaskTerm *t) {
  if (m->nmasks == m->cap) {
    int cap = m->cap ? 2 * m->cap : 8;
    MaskTerm *n = arena_alloc(m->a, (size_t)cap * sizeof *n);
    if (m->nmasks) memcpy(n, m->masks, (size_t)m->nmasks * sizeof *n);
    m->masks = n;
    m->cap = cap;
  }
  m->masks[m->nmasks++] = *t;
}

/* The affine terms of an alternative of a disjunction, an &&-tree of
 * affine comparisons (== gives two terms): appended to terms; false when
 * some part is not affine or there are too many. */
static bool alt_terms(IrNode *cond, MaskTerm *terms, int *n, int depth) {
  if (cond->op == IR_AND && depth < 16)
    return alt_terms(cond->src[0], terms, n, depth + 1) &&
           alt_terms(cond->src[1], terms, n, depth + 1);
  MaskTerm t[2];
  int k = match_affine(cond, t);
  if (k == 0 || *n + k > MATCH_MAX_TERMS) return false;
  for (int x = 0; x < k; x++) terms[(*n)++] = t[x];
  return true;
}

/* The alternatives of an ||-tree, flattened into alts[]; false past
 * MATCH_MAX_ALTS. */
static bool alternatives(IrNode *cond, IrNode **alts, int *n, int depth) {
  if (cond->op == IR_OR && depth < 16)
    return alternatives(cond->src[0], alts, n, depth + 1) &&
           alternatives(cond->src[1], alts, n, depth + 1);
  if (*n == MATCH_MAX_ALTS) return false;
  alts[(*n)++] = cond;
  return true;
}

/* A conjunct `A || B || ...` whose alternatives are conjunctions of affine
 * comparisons, as a disjunctive MaskTerm; false (t untouched) otherwise. */
static bool match_disjunction(Matcher *m, IrNode *cond, MaskTerm *t) {
  if (cond->op != IR_OR) return false;
  IrNode *alts[MATCH_MAX_ALTS];
  int nalt = 0;
  if (!alternatives(cond, alts, &nalt, 0)) return false;
  MaskTerm **alt = arena_alloc(m->a, (size_t)nalt * sizeof *alt);
  int *alt_n = arena_alloc(m->a, (size_t)nalt * sizeof *alt_n);
  for (int a = 0; a < nalt; a++) {
    alt[a] = arena_alloc(m->a, MATCH_MAX_TERMS * sizeof **alt);
    if (!alt_terms(alts[a], alt[a], &alt_n[a], 0)) return false;
  }
  memset(t, 0, sizeof *t);
  t->cond = cond;
  t->nalt = nalt;
  t->alt = alt;
  t->alt_n = alt_n;
  return true;
}

/* Splits a top-level mask condition on && into conjuncts. */
static void add_conjuncts(Matcher *m, IrNode *cond, int depth) {
  if (cond->op == IR_AND && depth < 64) {
    add_conjuncts(m, cond->src[0], depth + 1);
    add_conjuncts(m, cond->src[1], depth + 1);
    return;
  }
  if (cond->op == IR_CONST && cond->ival) return; /* `true` keeps all */
  MaskTerm t[2];
  int n = match_affine(cond, t);
  if (n == 0) {
    if (!match_separable(cond, &t[0]) && !match_disjunction(m, cond, &t[0])) {
      memset(t, 0, sizeof t[0]);
      t[0].cond = cond;
    }
    n = 1;
  }
  for (int k = 0; k < n; k++) push_term(m, &t[k]);
}

/* An error about one node: names it, where it is, and why. */
static KernelSpec *refuse(Matcher *m, const IrNode *n, const char *why) {
  diag_error(m->d, n->loc, "graph '%s': no kernel template can run '%s' %s", m->g->name,
             ir_op_name(n->op), why);
  return NULL;
}

/* Whether `target` is among root's operands, transitively. Marks visited
 * nodes so shared subexpressions are walked once. */
static bool reaches(const IrNode *root, const IrNode *target, char *seen) {
  if (root == target) return true;
  if (root->id < target->id || seen[root->id]) return false;
  seen[root->id] = 1;
  for (int s = 0; s < root->nsrc; s++)
    if (root->src[s] && reaches(root->src[s], target, seen)) return true;
  return false;
}

/* Whether the score chain at `score` reads a tensor at positions that vary
 * over i or j (a bias[b, h, i, j], a relative-position table): the key
 * tiles' choice and emit.c's attn_score_reads both take it. Node ids are a
 * topological order, so one pass up to the score marks every node that
 * such a load reaches. */
static bool score_reads_ij(const IrGraph *g, const IrNode *score, Arena *a) {
  bool *reads = arena_alloc(a, (size_t)(score->id + 1) * sizeof *reads);
  for (int id = 0; id <= score->id; id++) {
    const IrNode *n = g->nodes[id];
    bool r = n->op == IR_LOAD && (n->dom & (DOM_I | DOM_J));
    for (int k = 0; k < n->nsrc && !r; k++) /* (a source's id is below its user's) */
      r = n->src[k] && reads[n->src[k]->id];
    reads[id] = r;
  }
  return reads[score->id];
}

KernelSpec *match_graph(const IrGraph *g, int sm, Arena *a, Diag *d) {
  Matcher m = {.g = g, .a = a, .d = d};
  if (sm < 80) {
    diag_error(d, g->loc, "graph '%s': the target sm_%d is older than sm_80, the oldest the "
               "templates support", g->name, sm);
    return NULL;
  }
  const IrTensor *q = &g->tensors[g->q], *k = &g->tensors[g->k], *v = &g->tensors[g->v];
  DType t = q->type;
  /* q, k and v all f16 or all bf16; or FP8 (e4m3 or e5m2) k and v alike
   * against a bf16/f16 q (an FP8 KV cache) or an FP8 q. */
  const bool q16 = t == DT_BF16 || t == DT_F16;
  const bool kv_ok = k->type == v->type && (k->type == t || dtype_is_fp8(k->type));
  if ((!q16 && !dtype_is_fp8(t)) || !kv_ok || (!q16 && !dtype_is_fp8(k->type))) {
    const IrTensor *bad = !q16 && !dtype_is_fp8(t) ? q : k->type != v->type ? v : k;
    diag_error(d, bad->loc, "graph '%s': no kernel template takes %s q, %s k and %s v: the "
               "templates take q, k and v all f16 or all bf16, or e4m3/e5m2 k and v (one type) "
               "against an f16, bf16, e4m3 or e5m2 q",
               g->name, dtype_name(q->type), dtype_name(k->type), dtype_name(v->type));
    return NULL;
  }
  KernelSpec *spec = arena_alloc(a, sizeof *spec);
  spec->g = g;
  spec->tmpl = TMPL_FWD_SM80;
  spec->sm = sm;
  spec->in_type = t;
  spec->kv_type = k->type;
  spec->mma_type = q16 ? t : DT_F16; /* FP8 converts exactly into f16 */
  spec->paged = k->paged;
  spec->packed = q->packed;
  spec->d_qk = (int)ir_head_dim(q);
  spec->d_v = (int)ir_head_dim(v);
  spec->o_output = spec->lse_output = spec->amax_output = -1;
  char *seen = arena_alloc(a, (size_t)g->nnodes + 1);

  for (int n = 0; n < g->noutputs; n++) {
    IrOutput *o = &g->outputs[n];
    const IrTensor *ot = &g->tensors[o->tensor];
    if (o->value->op == IR_LOGSUMEXP) {
      if (ot->type != DT_F32) {
        diag_error(d, o->loc, "graph '%s': output '%s' must be f32: the kernel keeps the "
                   "softmax statistics in f32", g->name, o->name);
        return NULL;
      }
      spec->lse_output = n;
    } else if (o->value->op == IR_AMAX) {
      /* amax of a function of the output row element: the epilogue sees
       * every such element once. ir_check made it f32[1]. */
      const IrNode *x = o->value->src[0];
      if ((x->dom & DOM_J) || !reaches(x, g->pv, memset(seen, 0, (size_t)g->nnodes)))
        return refuse(&m, o->value, "of a value that is not a function of p @ v's output row "
                      "element (the epilogue reduces what it stores; amax of P, cuDNN's amax_s, "
                      "is not reduced yet)");
      if (spec->amax_output >= 0) {
        diag_error(d, o->loc, "graph '%s': a second amax output ('%s'); the kernels reduce one",
                   g->name, o->name);
        diag_note(d, g->outputs[spec->amax_output].loc, "the first is here");
        return NULL;
      }
      spec->amax_output = n;
    } else if (reaches(o->value, g->pv, memset(seen, 0, (size_t)g->nnodes))) {
      if (spec->o_output >= 0) {
        diag_error(d, o->loc, "graph '%s': a second output of p @ v ('%s'); the template "
                   "stores one", g->name, o->name);
        diag_note(d, g->outputs[spec->o_output].loc, "the first is here");
        return NULL;
      }
      if (ot->type != DT_BF16 && ot->type != DT_F16 && ot->type != DT_F32 &&
          !dtype_is_fp8(ot->type)) {
        diag_error(d, o->loc, "graph '%s': output '%s' is %s; the forward templates store "
                   "f16, bf16, f32, e4m3 or e5m2", g->name, o->name, dtype_name(ot->type));
        return NULL;
      }
      spec->o_output = n;
      spec->out_type = ot->type;
    } else {
      return refuse(&m, o->value, "as an output: the kernel stores p @ v and logsumexp only");
    }
  }
  if (spec->o_output < 0) {
    diag_error(d, g->pv->loc, "graph '%s': the result of p @ v is never an output", g->name);
    return NULL;
  }

  /* Peel the top-level masks off the softmax's input. */
  IrNode *s = g->softmax->src[0];
  while (s->op == IR_MASK) {
    add_conjuncts(&m, s->src[1], 0);
    s = s->src[0];
  }
  spec->score = s;
  spec->score_reads_ij = score_reads_ij(g, s, a);
  /* P as p @ v reads it: dropout, a scale fixed per (b, h), a rounding
   * (ir_p_chain); a dropout nothing reads is dead and ignored. */
  const IrPChain pc = ir_p_chain(g);
  if (pc.bad)
    return refuse(&m, pc.bad, "between the softmax and p @ v: the kernels take P, dropout of "
                  "it, then one scale fixed per (b, h), then one rounding (e4m3(p * scale))");
  spec->dropout = pc.dropout;
  spec->p_scale = pc.scale;
  spec->p_round = pc.round ? pc.round->type : DT_NONE;
  if (pc.round && !dtype_is_fp8(pc.round->type))
    return refuse(&m, pc.round, "on P: the kernels round P before P V to e4m3 or e5m2 only "
                  "(their values are exact in the MMAs' 16-bit types)");
  spec->masks = m.masks;
  spec->nmasks = m.nmasks;
  return spec;
}

/* The decode kernel beside the forward, where its template takes the graph
 * (tmpl_decode.c; a 16-bit q, and no amax output: its epilogue and merge
 * do not reduce one yet); without it the plan always runs the forward. */
static void match_decode(const KernelSpec *s, FwdConfig *c) {
  /* Its tiles pack several heads' rows: P's scale must not vary by head. */
  const bool head_scale = s->p_scale && (s->p_scale->dom & (DOM_B | DOM_H));
  /* Packed sequences: the forward's tile walk finds each query tile's
   * sequence; the decode kernel has no such walk yet. */
  if (s->amax_output >= 0 || head_scale || s->packed ||
      tmpl_decode_config(s->d_qk, s->d_v, dtype_size(s->in_type), dtype_size(s->kv_type),
                         s->dropout != NULL, s->paged, s->g->ntensors, &c->decode) != 0)
    c->decode = (DecodeConfig){.on = false};
}

/* The portable forward template's tiles, where it takes the head dims. */
static int match_fwd_sm80(const KernelSpec *s, FwdConfig *c) {
  Sm80Config p;
  if (tmpl_sm80_config(s->d_qk, s->d_v, dtype_size(s->in_type), dtype_size(s->kv_type), s->sm,
                       &p) != 0)
    return -1;
  *c = (FwdConfig){.kind = TMPL_FWD_SM80, .name = "fwd_sm80", .bm = p.bm, .bn = p.bn,
                   .warps = p.warps, .threads = p.warps * 32, .smem_bytes = p.smem_bytes};
  return 0;
}

/* fwd_sm90's key blocks of every four whose softmax exponentials run on
 * the FMA pipe (softmax.cuh, attn_exp2_fma), from the option: 0 auto,
 * which is none: every split measured slower, plain and softcapped graphs
 * alike (H100, bench/RESULTS.md "Session 32": the softmax is issue-bound),
 * 1 none, 2-5 one to four. */
static int exp2_fma_blocks(int option) {
  return option >= 2 && option <= 5 ? option - 1 : 0;
}

int exp2_fma_option_of_text(const char *q) {
  return q && q[0] >= '0' && q[0] <= '4' && !q[1] ? q[0] - '0' + 1 : 0;
}

/* Whether the score is q.k times factors fixed per (b, h) under affine
 * masks, with P neither dropped, scaled nor rounded before P V: the graphs
 * where fwd_sm90's consumers hold nothing per element beyond S, P and O
 * (tmpl_sm90.c takes O's late rescale only there). */
static bool plain_score(const KernelSpec *s) {
  ExprFactors outer;
  if (expr_strip_factors(s->score, &outer)->op != IR_QK || s->dropout || s->p_scale ||
      s->p_round != DT_NONE)
    return false;
  for (int k = 0; k < s->nmasks; k++)
    if (!s->masks[k].affine) return false;
  return true;
}

/* The forward template and its launch shape. */
static int match_fwd_template(const KernelSpec *s, const CompileOptions *o, FwdConfig *c, Diag *d) {
  /* fwd_sm90 needs the arch-specific target (wgmma, setmaxnreg exist only
   * on sm_90a); fwd_sm80 runs everywhere else. fwd_sm90 takes 16-bit q, k
   * and v, FP8 q, k and v, or an FP8 KV cache under a 16-bit q (K and V
   * converted in shared memory), paged or not but for FP8 q (a paged
   * cache is read by a TMA box per page run, fwd90_page_box); where its
   * tiles do not fit (an FP8 KV cache at D 256), fwd_sm80. */
  const bool sm90a = s->sm == 90 && o->arch[strlen(o->arch) - 1] == 'a' &&
                     !(s->paged && dtype_is_fp8(s->in_type));
  Sm90Config h;
  const bool fp8_p = dtype_is_fp8(s->in_type) && dtype_is_fp8(s->p_round);
  const bool masked = s->nmasks > 0 || s->packed;
  /* O by TMA boxes of a warp's 16 rows: 16- or 8-bit, or 16-bit in packed
   * sequences (whose ends a warp copies row by row); not under dropout,
   * whose Philox words beside the staging's addresses spilled 200 bytes in
   * the loop at key tiles of 176. */
  const bool o_tma = (s->packed ? dtype_size(s->out_type) == 2 : dtype_size(s->out_type) <= 2) &&
                     !s->dropout;
  const unsigned traits = (masked ? SM90_MASKED : 0u) |
                          (s->score_reads_ij ? SM90_SCORE_READS : 0u) |
                          (plain_score(s) ? SM90_PLAIN : 0u) | (o_tma ? SM90_O_TMA : 0u) |
                          (dtype_size(s->out_type) == 1 ? SM90_O_BYTE : 0u);
  /* kv_copy: a dense FP8 KV cache under a 16-bit q is widened into 16-bit
   * copies in two workspace slots after the decode's (plan.c, widen_kv),
   * and the forward is the 16-bit one reading them; by default where q's
   * sequence dim is k's symbol (Sq = Skv at every launch: tmpl_sm90.c). */
  const int nt = s->g->ntensors;
  const IrTensor *tq = &s->g->tensors[s->g->q], *tk = &s->g->tensors[s->g->k];
  const bool same_seq = tq->ndims == 4 && tk->ndims == 4 && tq->dim_sym[2] >= 0 &&
                        tq->dim_sym[2] == tk->dim_sym[2];
  const bool kv_copy = sm90a && tmpl_sm90_variant_kv_copy(o->sm90_variant, same_seq) &&
                       dtype_is_fp8(s->kv_type) && !dtype_is_fp8(s->in_type) && !s->paged &&
                       !s->packed && s->d_qk % 16 == 0 && s->d_v % 16 == 0 &&
                       nt + 4 <= ATTN_MAX_TENSORS; /* (the step widens whole 16-byte chunks) */
  const int kv_bytes = kv_copy ? 2 : dtype_size(s->kv_type);
  if (sm90a && tmpl_sm90_config(s->d_qk, s->d_v, dtype_size(s->in_type), kv_bytes, fp8_p, traits,
                                s->paged, o->sm90_variant, &h) == 0) {
    *c = (FwdConfig){.kind = TMPL_FWD_SM90, .name = "fwd_sm90", .bm = h.bm, .bn = h.bn,
                     .stages = h.stages, .threads = h.threads, .smem_bytes = h.smem_bytes,
                     /* Masked graphs too: the tile queue balances unequal
                      * tiles, where the static order lost up to 40% on
                      * causal (bench/NOTES-sm90.md). Dropout graphs too
                      * since one Philox call serves several elements (no
                      * spills; measured neutral). */
                     .persistent = h.persistent, .fp8_pv = h.fp8_pv, .kv8_early = h.kv8_early,
                     .vt8 = h.vt8,
                     .rescale_late = h.rescale_late, .pv_overlap = h.pv_overlap,
                     .q_early_tiles = h.q_early_tiles,
                     .skip_idle = h.skip_idle, .tanh_poly = h.tanh_poly,
                     .partial_first = h.partial_first, .ring_per_tile = h.ring_per_tile,
                     .q_before_v = h.q_before_v, .pv_wait_next = h.pv_wait_next,
                     .o_smem = h.o_smem,
                     .kv_copy = kv_copy, .copy_k = kv_copy ? nt + 2 : -1,
                     .copy_v = kv_copy ? nt + 3 : -1,
                     /* (never where P is rounded: its roundings follow ex2's values) */
                     .exp2_fma = s->p_round == DT_NONE ? exp2_fma_blocks(o->exp2_fma) : 0};
    return 0;
  }
  if (match_fwd_sm80(s, c) == 0) return 0;
  const IrGraph *g = s->g;
  diag_error(d, g->tensors[g->q].loc,
             "graph '%s': no kernel template takes head dimensions %d (q, k) and %d (v) on sm_%d "
             "(the forward takes multiples of 8 from 8 to 256, of 16 for FP8 tensors)", g->name,
             s->d_qk, s->d_v, s->sm);
  return -1;
}

/* A separable conjunct (doc[b, i] == doc[b, j]) anywhere in the masks. */
static const IrNode *separable_mask(const KernelSpec *s) {
  for (int k = 0; k < s->nmasks; k++) /* (a disjunction's alternatives are affine) */
    if (s->masks[k].sep) return s->masks[k].cond;
  return NULL;
}

int match_fwd_config(const KernelSpec *s, const CompileOptions *o, FwdConfig *c, Diag *d) {
  memset(c, 0, sizeof *c);
  const IrNode *sep = s->packed ? separable_mask(s) : NULL;
  if (sep) {
    /* Their range table is laid out by the whole problem's Sq and Skv,
     * which packed sequences do not have. */
    diag_error(d, sep->loc, "graph '%s': a mask comparing an i side with a j side (a document "
               "mask) on packed sequences is not supported yet; packed sequences are already "
               "separate documents", s->g->name);
    return -1;
  }
  int r = match_fwd_template(s, o, c, d);
  if (r == 0) match_decode(s, c);
  return r;
}
