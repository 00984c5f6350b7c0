/*
 * test_interp.c: the CPU reference on hand-built IR graphs, whose answers
 * are worked out by hand (or in closed form) here, and on graphs built
 * from .attn text, checked against a second, deliberately naive loop.
 */
#include <criterion/criterion.h>
#include <glob.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"
#include "unit_build.h"

#define TG_MAX 64

/* --------------------------------------------- hand-built graph helpers */

typedef struct TG {
  IrGraph g;
  IrNode pool[TG_MAX];
  IrNode *nodes[TG_MAX];
  IrDimSym dims[8];
  char dim_names[8][16];
  IrTensor tensors[32];
  IrScalar scalars[8];
  IrOutput outputs[32];
  RefArgs args;
  IrNode *q, *k, *v, *kt; /* inputs of the chain */
} TG;

static TG *tg_new(void) {
  TG *t = calloc(1, sizeof *t);
  cr_assert(t);
  t->g.name = "t";
  t->g.nodes = t->nodes;
  t->g.dims = t->dims;
  t->g.tensors = t->tensors;
  t->g.scalars = t->scalars;
  t->g.outputs = t->outputs;
  t->g.q = t->g.k = t->g.v = -1;
  t->args.g = &t->g;
  return t;
}

static void tg_free(TG *t) {
  ref_args_free(&t->args);
  free(t);
}

static int tg_dim(TG *t, const char *name) {
  for (int d = 0; d < t->g.ndims; d++)
    if (!strcmp(t->dims[d].name, name))
      return d;
  snprintf(t->dim_names[t->g.ndims], 16, "%s", name);
  t->dims[t->g.ndims].name = t->dim_names[t->g.ndims];
  return t->g.ndims++;
}

/* dims: "B,H,Sq,2": symbols, or literals when they start with a digit. */
static int tg_tensor(TG *t, const char *name, DType type, const char *dims,
                     bool output) {
  IrTensor *x = &t->tensors[t->g.ntensors];
  x->name = name;
  x->type = type;
  x->is_output = output;
  char *copy = strdup(dims), *save = NULL;
  for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
    int k = x->ndims++;
    if (*p >= '0' && *p <= '9') {
      x->dim_sym[k] = -1;
      x->dim_val[k] = atoll(p);
    } else {
      x->dim_sym[k] = tg_dim(t, p);
    }
  }
  free(copy);
  return t->g.ntensors++;
}

static unsigned tg_dom_of(IrOp op, int n, IrNode *const *s) {
  unsigned dom = 0;
  for (int k = 0; k < n; k++)
    dom |= s[k]->dom;
  switch (op) {
  case IR_QK: return DOM_B | DOM_H | DOM_I | DOM_J;
  case IR_PV: return (dom & ~(unsigned)DOM_J) | DOM_D;
  case IR_LOGSUMEXP: return dom & ~(unsigned)DOM_J;
  case IR_AMAX: return 0;
  default: return dom;
  }
}

static IrNode *tg_node(TG *t, IrOp op, DType type, int n, IrNode *a,
                       IrNode *b, IrNode *c) {
  IrNode *x = &t->pool[t->g.nnodes];
  IrNode *s[3] = {a, b, c};
  x->op = op;
  x->type = type;
  x->nsrc = n;
  for (int k = 0; k < n; k++)
    x->src[k] = s[k];
  x->dom = tg_dom_of(op, n, s);
  x->id = t->g.nnodes;
  t->nodes[t->g.nnodes++] = x;
  return x;
}

static IrNode *tg_op1(TG *t, IrOp op, DType type, IrNode *a) {
  return tg_node(t, op, type, 1, a, NULL, NULL);
}
static IrNode *tg_op2(TG *t, IrOp op, DType type, IrNode *a, IrNode *b) {
  return tg_node(t, op, type, 2, a, b, NULL);
}
static IrNode *tg_f(TG *t, double v) {
  IrNode *x = tg_node(t, IR_CONST, DT_F32, 0, NULL, NULL, NULL);
  x->fval = v;
  return x;
}
static IrNode *tg_i(TG *t, int64_t v) {
  IrNode *x = tg_node(t, IR_CONST, DT_I32, 0, NULL, NULL, NULL);
  x->ival = v;
  return x;
}
static IrNode *tg_index(TG *t, unsigned axis) {
  IrNode *x = tg_node(t, IR_INDEX, DT_I32, 0, NULL, NULL, NULL);
  x->ival = axis;
  x->dom = axis;
  return x;
}
static IrNode *tg_dimref(TG *t, const char *name) {
  IrNode *x = tg_node(t, IR_DIM, DT_I32, 0, NULL, NULL, NULL);
  x->ref = tg_dim(t, name);
  return x;
}
static IrNode *tg_scalar(TG *t, const char *name, double def) {
  IrScalar *s = &t->scalars[t->g.nscalars];
  s->name = name;
  s->type = DT_F32;
  s->has_default = true;
  s->fdefault = def;
  IrNode *x = tg_node(t, IR_SCALAR, DT_F32, 0, NULL, NULL, NULL);
  x->ref = t->g.nscalars++;
  return x;
}
static IrNode *tg_load(TG *t, int tensor, int n, IrNode *const *subs) {
  IrNode *x = &t->pool[t->g.nnodes];
  x->op = IR_LOAD;
  x->type = t->tensors[tensor].type;
  x->ref = tensor;
  x->nsrc = n;
  for (int k = 0; k < n; k++) {
    x->src[k] = subs[k];
    x->dom |= subs[k]->dom;
  }
  x->id = t->g.nnodes;
  t->nodes[t->g.nnodes++] = x;
  return x;
}

/* q, k, v declared [B, H, Sq, D], [B, Hk, Skv, D], [B, Hk, Skv, Dv] (D and
 * Dv literal) and s = q @ k^T. */
static IrNode *tg_chain(TG *t, const char *hk, int D, int Dv) {
  char buf[64];
  snprintf(buf, sizeof buf, "B,H,Sq,%d", D);
  t->g.q = tg_tensor(t, "q", DT_F32, buf, false);
  snprintf(buf, sizeof buf, "B,%s,Skv,%d", hk, D);
  t->g.k = tg_tensor(t, "k", DT_F32, buf, false);
  snprintf(buf, sizeof buf, "B,%s,Skv,%d", hk, Dv);
  t->g.v = tg_tensor(t, "v", DT_F32, buf, false);
  t->q = tg_node(t, IR_INPUT, DT_F32, 0, NULL, NULL, NULL);
  t->q->ref = t->g.q;
  t->q->dom = DOM_B | DOM_H | DOM_I | DOM_D;
  t->k = tg_node(t, IR_INPUT, DT_F32, 0, NULL, NULL, NULL);
  t->k->ref = t->g.k;
  t->k->dom = DOM_B | DOM_H | DOM_J | DOM_D;
  t->v = tg_node(t, IR_INPUT, DT_F32, 0, NULL, NULL, NULL);
  t->v->ref = t->g.v;
  t->v->dom = DOM_B | DOM_H | DOM_J | DOM_D;
  t->kt = tg_op1(t, IR_TRANSPOSE, DT_F32, t->k);
  t->kt->dom = t->k->dom;
  IrNode *s = tg_op2(t, IR_QK, DT_F32, t->q, t->kt);
  t->g.qk = s;
  return s;
}

/* p = softmax(s); o = p @ v. */
static IrNode *tg_attend(TG *t, IrNode *s) {
  IrNode *p = tg_op1(t, IR_SOFTMAX, DT_F32, s);
  t->g.softmax = p;
  IrNode *o = tg_op2(t, IR_PV, DT_F32, p, t->v);
  t->g.pv = o;
  return o;
}

static int tg_output(TG *t, const char *name, IrNode *value, DType type,
                     const char *dims) {
  int ti = tg_tensor(t, name, type, dims, true);
  IrOutput *o = &t->outputs[t->g.noutputs++];
  o->name = name;
  o->value = value;
  o->tensor = ti;
  return ti;
}

/* Gives an input tensor its shape and values (copied). */
static void tg_set(TG *t, int ti, const int64_t *shape, const double *vals) {
  if (!t->args.tensors)
    t->args.tensors = calloc(32, sizeof *t->args.tensors);
  RefTensor *r = &t->args.tensors[ti];
  r->ndims = t->tensors[ti].ndims;
  int64_t n = 1;
  for (int k = 0; k < r->ndims; k++) {
    r->shape[k] = shape[k];
    n *= shape[k];
  }
  free(r->data);
  r->data = malloc((size_t)n * sizeof(double));
  if (vals)
    memcpy(r->data, vals, (size_t)n * sizeof(double));
  else
    for (int64_t e = 0; e < n; e++) /* a fixed pattern, varied enough */
      r->data[e] = sin(0.7 * (double)e + 0.3 * ti) + 0.1 * (double)(e % 3);
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define VALS(...) ((const double[]){__VA_ARGS__})

static void tg_scalars(TG *t) {
  if (!t->args.scalars) {
    t->args.scalars = calloc(8, sizeof(double));
    for (int k = 0; k < t->g.nscalars; k++)
      t->args.scalars[k] = t->scalars[k].fdefault;
  }
}

static int tg_run(TG *t, StrBuf *err) {
  tg_scalars(t);
  return ref_forward(&t->args, err);
}

static void tg_run_ok(TG *t) {
  StrBuf err = {0};
  int rc = tg_run(t, &err);
  cr_assert_eq(rc, 0, "ref_forward failed: %s", err.data ? err.data : "");
  sb_free(&err);
}

/* Runs, expects failure, and checks the message contains `want`. */
static void tg_run_fails(TG *t, const char *want) {
  StrBuf err = {0};
  int rc = tg_run(t, &err);
  cr_assert_eq(rc, -1, "ref_forward should fail with \"%s\"", want);
  cr_assert(err.data && strstr(err.data, want), "message \"%s\" lacks \"%s\"",
            err.data ? err.data : "", want);
  sb_free(&err);
}

static double *tg_out(TG *t, int ti) { return t->args.tensors[ti].data; }

static void near(double got, double want) {
  double tol = 1e-12 * fmax(1.0, fabs(want));
  cr_assert(fabs(got - want) <= tol, "got %.17g, want %.17g", got, want);
}

/* -------------------------------------------------- hand-computed cases */

/* q = [[1, 0], [0, 2]], k = [[1, 0], [0, 1]]: s = [[1, 0], [0, 2]];
 * v = [[1, 2], [3, 4]]. */
static TG *tiny(IrNode **s_out, int *o, int *lse) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 2, 2);
  if (s_out)
    *s_out = s;
  *o = tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,2");
  if (lse)
    *lse = tg_output(t, "lse", tg_op1(t, IR_LOGSUMEXP, DT_F32, s), DT_F32,
                     "B,H,Sq");
  tg_set(t, t->g.q, SHAPE(1, 1, 2, 2), VALS(1, 0, 0, 2));
  tg_set(t, t->g.k, SHAPE(1, 1, 2, 2), VALS(1, 0, 0, 1));
  tg_set(t, t->g.v, SHAPE(1, 1, 2, 2), VALS(1, 2, 3, 4));
  return t;
}

Test(interp, tiny_problem_by_hand) {
  int o, lse;
  TG *t = tiny(NULL, &o, &lse);
  tg_run_ok(t);
  double e = exp(1.0), e2 = exp(2.0);
  double p00 = e / (e + 1), p01 = 1 / (e + 1);
  double p10 = 1 / (1 + e2), p11 = e2 / (1 + e2);
  double *O = tg_out(t, o), *L = tg_out(t, lse);
  cr_assert_eq(t->args.tensors[o].ndims, 4);
  cr_assert_eq(t->args.tensors[o].shape[2], 2);
  near(O[0], p00 * 1 + p01 * 3);
  near(O[1], p00 * 2 + p01 * 4);
  near(O[2], p10 * 1 + p11 * 3);
  near(O[3], p10 * 2 + p11 * 4);
  near(L[0], log(e + 1));
  near(L[1], log(1 + e2));
  tg_free(t);
}

/* A softmax sink (0.5 here) joins each row's denominator; its own
 * probability is dropped, and logsumexp with the same sink counts it. */
Test(interp, sink_joins_the_denominator) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 2, 2);
  IrNode *sink = tg_f(t, 0.5);
  IrNode *p = tg_node(t, IR_SOFTMAX, DT_F32, 2, s, sink, NULL);
  t->g.softmax = p;
  IrNode *pv = tg_op2(t, IR_PV, DT_F32, p, t->v);
  t->g.pv = pv;
  int o = tg_output(t, "o", pv, DT_F32, "B,H,Sq,2");
  int lse = tg_output(t, "lse", tg_node(t, IR_LOGSUMEXP, DT_F32, 2, s, sink, NULL), DT_F32,
                      "B,H,Sq");
  tg_set(t, t->g.q, SHAPE(1, 1, 2, 2), VALS(1, 0, 0, 2));
  tg_set(t, t->g.k, SHAPE(1, 1, 2, 2), VALS(1, 0, 0, 1));
  tg_set(t, t->g.v, SHAPE(1, 1, 2, 2), VALS(1, 2, 3, 4));
  tg_run_ok(t);
  const double e = exp(1.0), e2 = exp(2.0), es = exp(0.5);
  const double d0 = e + 1 + es, d1 = 1 + e2 + es;
  double *O = tg_out(t, o), *L = tg_out(t, lse);
  near(O[0], (e * 1 + 1 * 3) / d0);
  near(O[1], (e * 2 + 1 * 4) / d0);
  near(O[2], (1 * 1 + e2 * 3) / d1);
  near(O[3], (1 * 2 + e2 * 4) / d1);
  near(L[0], log(d0));
  near(L[1], log(d1));
  tg_free(t);
}

Test(interp, scale_by_a_scalar) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 2, 2);
  s = tg_op2(t, IR_MUL, DT_F32, s, tg_scalar(t, "scale", 0.5));
  int lse = tg_output(t, "lse", tg_op1(t, IR_LOGSUMEXP, DT_F32, s), DT_F32,
                      "B,H,Sq");
  int o = tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,2");
  tg_set(t, t->g.q, SHAPE(1, 1, 2, 2), VALS(1, 0, 0, 2));
  tg_set(t, t->g.k, SHAPE(1, 1, 2, 2), VALS(1, 0, 0, 1));
  tg_set(t, t->g.v, SHAPE(1, 1, 2, 2), VALS(1, 2, 3, 4));
  tg_run_ok(t);
  near(tg_out(t, lse)[0], log(exp(0.5) + 1));
  near(tg_out(t, lse)[1], log(1 + exp(1.0)));
  double p10 = 1 / (1 + exp(1.0));
  near(tg_out(t, o)[2], p10 * 1 + (1 - p10) * 3);
  /* the same graph with the scalar overridden */
  t->args.scalars[0] = 2.0;
  tg_run_ok(t);
  near(tg_out(t, lse)[1], log(1 + exp(4.0)));
  tg_free(t);
}

/* mask(s, j < i): row 0 keeps nothing, so O = 0 and lse = -inf there. */
Test(interp, causal_with_fully_masked_row) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 1, 1);
  IrNode *cond = tg_op2(t, IR_LT, DT_BOOL, tg_index(t, DOM_J),
                        tg_index(t, DOM_I));
  s = tg_op2(t, IR_MASK, DT_F32, s, cond);
  int lse = tg_output(t, "lse", tg_op1(t, IR_LOGSUMEXP, DT_F32, s), DT_F32,
                      "B,H,Sq");
  int o = tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,1");
  tg_set(t, t->g.q, SHAPE(1, 1, 3, 1), VALS(0, 0, 0));
  tg_set(t, t->g.k, SHAPE(1, 1, 3, 1), VALS(0, 0, 0));
  tg_set(t, t->g.v, SHAPE(1, 1, 3, 1), VALS(10, 20, 40));
  tg_run_ok(t);
  double *O = tg_out(t, o), *L = tg_out(t, lse);
  cr_assert_eq(O[0], 0.0);
  cr_assert(isinf(L[0]) && L[0] < 0, "lse[0] = %g", L[0]);
  near(O[1], 10);
  near(O[2], 15);
  near(L[1], 0);
  near(L[2], log(2.0));
  tg_free(t);
}

/* Bottom-right causal, Sq = 2 < Skv = 4: mask(s, j <= i + Skv - Sq). With
 * zero scores, row 0 averages keys 0..2, row 1 keys 0..3. */
Test(interp, bottom_right_causal_with_dims) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 1, 1);
  IrNode *lim = tg_op2(t, IR_SUB, DT_I32,
                       tg_op2(t, IR_ADD, DT_I32, tg_index(t, DOM_I),
                              tg_dimref(t, "Skv")),
                       tg_dimref(t, "Sq"));
  s = tg_op2(t, IR_MASK, DT_F32, s,
             tg_op2(t, IR_LE, DT_BOOL, tg_index(t, DOM_J), lim));
  int lse = tg_output(t, "lse", tg_op1(t, IR_LOGSUMEXP, DT_F32, s), DT_F32,
                      "B,H,Sq");
  int o = tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,1");
  tg_set(t, t->g.q, SHAPE(1, 1, 2, 1), VALS(0, 0));
  tg_set(t, t->g.k, SHAPE(1, 1, 4, 1), VALS(0, 0, 0, 0));
  tg_set(t, t->g.v, SHAPE(1, 1, 4, 1), VALS(1, 2, 3, 4));
  tg_run_ok(t);
  near(tg_out(t, lse)[0], log(3.0));
  near(tg_out(t, lse)[1], log(4.0));
  near(tg_out(t, o)[0], 2.0);
  near(tg_out(t, o)[1], 2.5);
  tg_free(t);
}

/* s + bias[b, h, i, j] with bias : [1, H, Sq, Skv] over B = 2, and ALiBi
 * s - slopes[h] * (i - j). Zero q/k: lse reads the biases back. */
Test(interp, broadcast_bias_and_alibi) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 1, 1);
  int bias = tg_tensor(t, "bias", DT_F32, "1,H,Sq,Skv", false);
  int slopes = tg_tensor(t, "slopes", DT_F32, "H", false);
  IrNode *bi = tg_index(t, DOM_B), *hi = tg_index(t, DOM_H),
         *ii = tg_index(t, DOM_I), *ji = tg_index(t, DOM_J);
  s = tg_op2(t, IR_ADD, DT_F32, s,
             tg_load(t, bias, 4, (IrNode *[]){bi, hi, ii, ji}));
  IrNode *dist = tg_op2(t, IR_SUB, DT_I32, ii, ji);
  IrNode *sl = tg_load(t, slopes, 1, (IrNode *[]){hi});
  s = tg_op2(t, IR_SUB, DT_F32, s, tg_op2(t, IR_MUL, DT_F32, sl, dist));
  int out = tg_output(t, "sc", s, DT_F32, "B,H,Sq,Skv");
  int o = tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,1");
  tg_set(t, t->g.q, SHAPE(2, 2, 2, 1), NULL);
  tg_set(t, t->g.k, SHAPE(2, 2, 3, 1), VALS(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
  tg_set(t, t->g.v, SHAPE(2, 2, 3, 1), NULL);
  tg_set(t, bias, SHAPE(1, 2, 2, 3), VALS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12));
  tg_set(t, slopes, SHAPE(2), VALS(0.5, 0.25));
  tg_run_ok(t);
  double *S = tg_out(t, out);
  cr_assert_eq(t->args.tensors[out].shape[3], 3);
  for (int b = 0; b < 2; b++)
    for (int h = 0; h < 2; h++)
      for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
          double want = (h * 6 + i * 3 + j + 1) - (h ? 0.25 : 0.5) * (i - j);
          near(S[((b * 2 + h) * 2 + i) * 3 + j], want);
        }
  cr_assert(tg_out(t, o));
  tg_free(t);
}

/* s + rel[h, clamp(j - i + 1, 0, 3)] with clamp as min(max(x, 0), 3). */
Test(interp, relative_position_table) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 1, 1);
  int rel = tg_tensor(t, "rel", DT_F32, "H,4", false);
  IrNode *idx = tg_op2(t, IR_ADD, DT_I32,
                       tg_op2(t, IR_SUB, DT_I32, tg_index(t, DOM_J),
                              tg_index(t, DOM_I)),
                       tg_i(t, 1));
  idx = tg_op2(t, IR_MIN, DT_I32, tg_op2(t, IR_MAX, DT_I32, idx, tg_i(t, 0)),
               tg_i(t, 3));
  s = tg_op2(t, IR_ADD, DT_F32, s,
             tg_load(t, rel, 2, (IrNode *[]){tg_index(t, DOM_H), idx}));
  int out = tg_output(t, "sc", s, DT_F32, "B,H,Sq,Skv");
  tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,1");
  tg_set(t, t->g.q, SHAPE(1, 1, 4, 1), VALS(0, 0, 0, 0));
  tg_set(t, t->g.k, SHAPE(1, 1, 5, 1), VALS(0, 0, 0, 0, 0));
  tg_set(t, t->g.v, SHAPE(1, 1, 5, 1), NULL);
  tg_set(t, rel, SHAPE(1, 4), VALS(10, 11, 12, 13));
  tg_run_ok(t);
  double *S = tg_out(t, out);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 5; j++) {
      int d = j - i + 1;
      d = d < 0 ? 0 : d > 3 ? 3 : d;
      near(S[i * 5 + j], 10 + d);
    }
  tg_free(t);
}

/* The same table without the clamp reads outside it. */
Test(interp, subscript_out_of_range) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 1, 1);
  int rel = tg_tensor(t, "rel", DT_F32, "H,4", false);
  IrNode *idx = tg_op2(t, IR_ADD, DT_I32,
                       tg_op2(t, IR_SUB, DT_I32, tg_index(t, DOM_J),
                              tg_index(t, DOM_I)),
                       tg_i(t, 1));
  s = tg_op2(t, IR_ADD, DT_F32, s,
             tg_load(t, rel, 2, (IrNode *[]){tg_index(t, DOM_H), idx}));
  int o = tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,1");
  tg_set(t, t->g.q, SHAPE(1, 2, 4, 1), NULL);
  tg_set(t, t->g.k, SHAPE(1, 2, 5, 1), NULL);
  tg_set(t, t->g.v, SHAPE(1, 2, 5, 1), NULL);
  tg_set(t, rel, SHAPE(2, 4), NULL);
  /* (i, j) = (0, 3) gives 4: the first element out of range */
  tg_run_fails(t, "subscript 2 of 'rel' is 4, outside [0, 4) at b=0 h=0 "
                  "i=0 j=3");
  cr_assert_null(tg_out(t, o), "a failed run leaves no output behind");
  tg_free(t);
}

/* H = 4 query heads over Hk = 2 kv heads: heads 0, 1 read kv head 0 and
 * heads 2, 3 kv head 1. One key each, so O is v of the right head. */
Test(interp, grouped_query_heads) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "Hk", 1, 2);
  int o = tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,2");
  tg_set(t, t->g.q, SHAPE(1, 4, 1, 1), VALS(1, 2, 3, 4));
  tg_set(t, t->g.k, SHAPE(1, 2, 2, 1), VALS(1, -1, -1, 1));
  tg_set(t, t->g.v, SHAPE(1, 2, 2, 2), VALS(1, 2, 3, 4, 5, 6, 7, 8));
  tg_run_ok(t);
  double *O = tg_out(t, o);
  for (int h = 0; h < 4; h++) {
    double qv = h + 1;
    double sk0 = h < 2 ? qv : -qv, sk1 = -sk0;
    double p0 = 1 / (1 + exp(sk1 - sk0)), p1 = 1 - p0;
    const double *vh = h < 2 ? VALS(1, 2, 3, 4) : VALS(5, 6, 7, 8);
    near(O[h * 2 + 0], p0 * vh[0] + p1 * vh[2]);
    near(O[h * 2 + 1], p0 * vh[1] + p1 * vh[3]);
  }
  tg_free(t);
}

/* Integer / and % truncate toward zero; i32 wraps. */
Test(interp, integer_semantics) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 1, 1);
  IrNode *d = tg_op2(t, IR_SUB, DT_I32, tg_index(t, DOM_J), tg_index(t, DOM_I));
  int qo = tg_output(t, "quot", tg_op2(t, IR_DIV, DT_I32, d, tg_i(t, 2)),
                     DT_I32, "Sq,Skv");
  int ro = tg_output(t, "rem", tg_op2(t, IR_MOD, DT_I32, d, tg_i(t, 2)),
                     DT_I32, "Sq,Skv");
  int wo = tg_output(t, "wrap", tg_op2(t, IR_ADD, DT_I32,
                                       tg_i(t, 2147483647), tg_index(t, DOM_J)),
                     DT_I32, "Skv");
  int fo = tg_output(t, "fdiv", tg_op2(t, IR_DIV, DT_F32, d, tg_f(t, 2)),
                     DT_F32, "Sq,Skv");
  tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,1");
  tg_set(t, t->g.q, SHAPE(1, 1, 4, 1), NULL);
  tg_set(t, t->g.k, SHAPE(1, 1, 4, 1), NULL);
  tg_set(t, t->g.v, SHAPE(1, 1, 4, 1), NULL);
  tg_run_ok(t);
  /* row i = 3: j - i = -3 -2 -1 0 */
  const double *Q = tg_out(t, qo) + 12, *R = tg_out(t, ro) + 12;
  double wq[] = {-1, -1, 0, 0}, wr[] = {-1, 0, -1, 0};
  for (int j = 0; j < 4; j++) {
    cr_assert_eq(Q[j], wq[j], "(%d - 3) / 2 = %g", j, Q[j]);
    cr_assert_eq(R[j], wr[j], "(%d - 3) %% 2 = %g", j, R[j]);
  }
  cr_assert_eq(tg_out(t, wo)[0], 2147483647.0);
  cr_assert_eq(tg_out(t, wo)[1], -2147483648.0);
  cr_assert_eq(tg_out(t, fo)[12], -1.5);
  tg_free(t);
}

/* Integer division by zero in a mask: defined, not an error. */
Test(interp, integer_division_by_zero_is_defined) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 1, 1);
  IrNode *z = tg_op2(t, IR_SUB, DT_I32, tg_index(t, DOM_I), tg_i(t, 1));
  IrNode *x = tg_op2(t, IR_DIV, DT_I32, tg_index(t, DOM_J), z);
  s = tg_op2(t, IR_MASK, DT_F32, s, tg_op2(t, IR_GE, DT_BOOL, x, tg_i(t, 0)));
  tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,1");
  tg_set(t, t->g.q, SHAPE(1, 1, 3, 1), NULL);
  tg_set(t, t->g.k, SHAPE(1, 1, 2, 1), NULL);
  tg_set(t, t->g.v, SHAPE(1, 1, 2, 1), NULL);
  /* The language defines it (x / 0 is 0, x % 0 is x), as the kernels do. */
  StrBuf err = {0};
  cr_assert_eq(tg_run(t, &err), 0, "%s", err.data ? err.data : "");
  sb_free(&err);
  const double seven_zero[2] = {7, 0}, min_neg1[2] = {-2147483648.0, -1};
  cr_assert_eq(op_apply(IR_DIV, DT_I32, seven_zero, 2), 0);
  cr_assert_eq(op_apply(IR_MOD, DT_I32, seven_zero, 2), 7);
  cr_assert_eq(op_apply(IR_DIV, DT_U64, seven_zero, 2), 0);
  cr_assert_eq(op_apply(IR_DIV, DT_I32, min_neg1, 2), -2147483648.0);
  cr_assert_eq(op_apply(IR_MOD, DT_I32, min_neg1, 2), 0);
  tg_free(t);
}

/* Math functions, where, casts (a cast to a float type rounds). */
Test(interp, pointwise_functions) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 1, 1);
  IrNode *x = tg_f(t, 0.375); /* exact in f32, as constants are rounded */
  IrOp ops[] = {IR_TANH, IR_EXP, IR_EXP2, IR_LOG, IR_LOG2, IR_SIGMOID,
                IR_ABS, IR_SQRT, IR_RSQRT, IR_FLOOR, IR_CEIL, IR_NEG};
  double want[] = {tanh(0.375), exp(0.375), exp2(0.375), log(0.375),
                   log2(0.375), 1 / (1 + exp(-0.375)), 0.375, sqrt(0.375),
                   1 / sqrt(0.375), 0, 1, -0.375};
  int outs[12];
  for (int k = 0; k < 12; k++)
    outs[k] = tg_output(t, ir_op_name(ops[k]), tg_op1(t, ops[k], DT_F32, x),
                        DT_F32, "1");
  IrNode *w = tg_node(t, IR_WHERE, DT_F32, 3,
                      tg_op2(t, IR_GT, DT_BOOL, x, tg_f(t, 0)), tg_f(t, 7),
                      tg_f(t, 8));
  int wo = tg_output(t, "where", w, DT_F32, "1");
  /* bf16 keeps 7 mantissa bits: both are ties, resolved to even */
  int c1 = tg_output(t, "bf16a", tg_op1(t, IR_CAST, DT_BF16, tg_f(t, 1.00390625)),
                     DT_F32, "1");
  int c2 = tg_output(t, "bf16b", tg_op1(t, IR_CAST, DT_BF16, tg_f(t, 1.01171875)),
                     DT_F32, "1");
  int c3 = tg_output(t, "f32", tg_op1(t, IR_CAST, DT_F32, tg_f(t, 1.5)), DT_F32, "1");
  int io = tg_output(t, "i32", tg_op1(t, IR_CAST, DT_I32, tg_f(t, -2.7)), DT_I32, "1");
  tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,1");
  tg_set(t, t->g.q, SHAPE(1, 1, 1, 1), NULL);
  tg_set(t, t->g.k, SHAPE(1, 1, 1, 1), NULL);
  tg_set(t, t->g.v, SHAPE(1, 1, 1, 1), NULL);
  tg_run_ok(t);
  for (int k = 0; k < 12; k++)
    near(tg_out(t, outs[k])[0], want[k]);
  cr_assert_eq(tg_out(t, wo)[0], 7);
  cr_assert_eq(tg_out(t, c1)[0], 1.0);
  cr_assert_eq(tg_out(t, c2)[0], 1.015625);
  cr_assert_eq(tg_out(t, c3)[0], 1.5);
  cr_assert_eq(tg_out(t, io)[0], -2);
  tg_free(t);
}

/* amax over every (b, h), and a value scaled by it (a second sweep). */
Test(interp, amax_over_everything) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 1, 1);
  IrNode *o = tg_attend(t, s);
  IrNode *am = tg_op1(t, IR_AMAX, DT_F32, o);
  int ao = tg_output(t, "amax_o", am, DT_F32, "1");
  int no = tg_output(t, "norm", tg_op2(t, IR_DIV, DT_F32, o, am), DT_F32,
                     "B,H,Sq,1");
  /* one key: O is v itself, [-1, 2; 7, -9] over (b, h) = 2 x 2, Sq = 1 */
  tg_set(t, t->g.q, SHAPE(2, 2, 1, 1), NULL);
  tg_set(t, t->g.k, SHAPE(2, 2, 1, 1), NULL);
  tg_set(t, t->g.v, SHAPE(2, 2, 1, 1), VALS(-1, 2, 7, -9));
  tg_run_ok(t);
  near(tg_out(t, ao)[0], 9);
  near(tg_out(t, no)[3], -1);
  near(tg_out(t, no)[2], 7.0 / 9.0);
  tg_free(t);
}

/* One key per row, so p = 1 and o = v * 256 / (256 - 128) where Philox keeps the
 * element, else 0 (the bit layout is philox.c's; test_backward.c checks
 * it in depth). */
Test(interp, dropout_keeps_by_philox) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 1, 1);
  IrNode *p = tg_op1(t, IR_SOFTMAX, DT_F32, s);
  IrNode *rate = tg_f(t, 0.5), *seed = tg_i(t, 9), *off = tg_i(t, 0);
  IrNode *dp = tg_node(t, IR_DROPOUT, DT_F32, 3, p, rate, seed);
  dp->src[dp->nsrc++] = off; /* tg_node takes three operands */
  tg_output(t, "o", tg_op2(t, IR_PV, DT_F32, dp, t->v), DT_F32, "B,H,Sq,1");
  tg_set(t, t->g.q, SHAPE(1, 1, 8, 1), NULL);
  tg_set(t, t->g.k, SHAPE(1, 1, 1, 1), NULL);
  tg_set(t, t->g.v, SHAPE(1, 1, 1, 1), VALS(3.0));
  tg_run_ok(t);
  const double *o = t->args.tensors[3].data;
  int kept = 0;
  for (int64_t i = 0; i < 8; i++) {
    bool keep = philox_dropout_byte(9, 0, 0, 0, i, 0, 1, 8) >=
                philox_keep_threshold(0.5);
    kept += keep;
    cr_expect_eq(o[i], keep ? 6.0 : 0.0, "row %lld", (long long)i);
  }
  cr_expect(kept > 0 && kept < 8, "kept %d of 8", kept);
  tg_free(t);
}

/* ------------------------------------------------------ binding errors */

static TG *plain(void) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "Hk", 2, 2);
  tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,2");
  tg_set(t, t->g.q, SHAPE(2, 4, 3, 2), NULL);
  tg_set(t, t->g.k, SHAPE(2, 2, 5, 2), NULL);
  tg_set(t, t->g.v, SHAPE(2, 2, 5, 2), NULL);
  return t;
}

Test(interp, plain_graph_runs) {
  TG *t = plain();
  tg_run_ok(t);
  cr_assert_eq(ref_numel(&t->args.tensors[3]), 2 * 4 * 3 * 2);
  tg_free(t);
}

Test(interp, dim_mismatch_names_both_tensors) {
  TG *t = plain();
  tg_set(t, t->g.k, SHAPE(3, 2, 5, 2), NULL);
  tg_run_fails(t, "tensor 'k': dimension 1 (B) has size 3, but tensor 'q' "
                  "bound B = 2 (dimension 1)");
  tg_free(t);
}

Test(interp, declared_literal_must_match) {
  TG *t = plain();
  tg_set(t, t->g.q, SHAPE(2, 4, 3, 3), NULL);
  tg_run_fails(t, "tensor 'q': dimension 4 is declared 2 but has size 3");
  tg_free(t);
}

Test(interp, wrong_rank) {
  TG *t = plain();
  t->args.tensors[t->g.v].ndims = 3;
  tg_run_fails(t, "tensor 'v' has 3 dimensions; its declaration has 4");
  tg_free(t);
}

Test(interp, kv_heads_must_divide_heads) {
  TG *t = plain();
  tg_set(t, t->g.k, SHAPE(2, 3, 5, 2), NULL);
  tg_set(t, t->g.v, SHAPE(2, 3, 5, 2), NULL);
  tg_run_fails(t, "the kv head count 3 (dimension 2 of 'k') does not divide "
                  "the query head count 4");
  tg_free(t);
}

Test(interp, head_dims_must_agree) {
  TG *t = tg_new();
  t->g.q = tg_tensor(t, "q", DT_F32, "B,H,Sq,D", false);
  t->g.k = tg_tensor(t, "k", DT_F32, "B,H,Skv,Dk", false);
  t->g.v = tg_tensor(t, "v", DT_F32, "B,H,Skv,2", false);
  IrNode *q = tg_node(t, IR_INPUT, DT_F32, 0, NULL, NULL, NULL);
  q->ref = t->g.q;
  IrNode *k = tg_node(t, IR_INPUT, DT_F32, 0, NULL, NULL, NULL);
  k->ref = t->g.k;
  t->v = tg_node(t, IR_INPUT, DT_F32, 0, NULL, NULL, NULL);
  t->v->ref = t->g.v;
  IrNode *s = tg_op2(t, IR_QK, DT_F32, q, k); /* k used untransposed */
  tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,2");
  tg_set(t, t->g.q, SHAPE(1, 1, 2, 4), NULL);
  tg_set(t, t->g.k, SHAPE(1, 1, 2, 8), NULL);
  tg_set(t, t->g.v, SHAPE(1, 1, 2, 2), NULL);
  tg_run_fails(t, "head dims differ: 'q' has 4, 'k' has 8");
  tg_set(t, t->g.k, SHAPE(1, 1, 2, 4), NULL);
  tg_run_ok(t);
  tg_free(t);
}

Test(interp, declared_one_must_be_one) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 1, 1);
  int bias = tg_tensor(t, "bias", DT_F32, "1,H,Sq,Skv", false);
  s = tg_op2(t, IR_ADD, DT_F32, s,
             tg_load(t, bias, 4, (IrNode *[]){tg_index(t, DOM_B),
                                              tg_index(t, DOM_H),
                                              tg_index(t, DOM_I),
                                              tg_index(t, DOM_J)}));
  tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,1");
  tg_set(t, t->g.q, SHAPE(2, 1, 2, 1), NULL);
  tg_set(t, t->g.k, SHAPE(2, 1, 2, 1), NULL);
  tg_set(t, t->g.v, SHAPE(2, 1, 2, 1), NULL);
  tg_set(t, bias, SHAPE(2, 1, 2, 2), NULL);
  tg_run_fails(t, "tensor 'bias': dimension 1 is declared 1 but has size 2");
  tg_free(t);
}

Test(interp, missing_data_and_unset_scalar) {
  TG *t = plain();
  free(t->args.tensors[t->g.q].data);
  t->args.tensors[t->g.q].data = NULL;
  tg_run_fails(t, "tensor 'q' has no data");
  tg_free(t);

  t = tg_new();
  IrNode *s = tg_chain(t, "H", 1, 1);
  s = tg_op2(t, IR_MUL, DT_F32, s, tg_scalar(t, "scale", 0));
  t->scalars[0].has_default = false;
  tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,1");
  tg_set(t, t->g.q, SHAPE(1, 1, 1, 1), NULL);
  tg_set(t, t->g.k, SHAPE(1, 1, 1, 1), NULL);
  tg_set(t, t->g.v, SHAPE(1, 1, 1, 1), NULL);
  StrBuf err = {0};
  cr_assert_eq(ref_set_scalars(&t->args, "", &err), 0);
  tg_run_fails(t, "scalar 'scale' has no default; pass --set scale=VALUE");
  cr_assert_eq(ref_set_scalars(&t->args, "scale=0.5", &err), 0, "%s", err.data);
  tg_run_ok(t);
  sb_free(&err);
  tg_free(t);
}

Test(interp, output_shape_must_fit_value) {
  TG *t = tg_new();
  IrNode *s = tg_chain(t, "H", 1, 1);
  tg_output(t, "lse", tg_op1(t, IR_LOGSUMEXP, DT_F32, s), DT_F32, "B,Sq");
  tg_output(t, "o", tg_attend(t, s), DT_F32, "B,H,Sq,1");
  tg_set(t, t->g.q, SHAPE(1, 2, 3, 1), NULL);
  tg_set(t, t->g.k, SHAPE(1, 2, 3, 1), NULL);
  tg_set(t, t->g.v, SHAPE(1, 2, 3, 1), NULL);
  tg_run_fails(t, "output 'lse' has shape [1, 3], which does not fit a value "
                  "that varies over b, h, i");
  tg_free(t);
}

/* A malformed graph is an error, not a crash. */
Test(interp, malformed_ir_is_an_error) {
  TG *t = plain();
  t->g.nodes[5]->src[0] = t->g.nodes[6]; /* an operand after its user */
  StrBuf err = {0};
  cr_assert_eq(tg_run(t, &err), -1);
  cr_assert(strstr(err.data, "malformed IR"), "%s", err.data);
  sb_free(&err);
  tg_free(t);
}

/* ---------------------------------------------- from .attn text, via a
 * second, naive implementation written independently of interp.c */

typedef struct Built {
  Arena *a;
  IrGraph *g;
} Built;

static Built build(const char *text, const char *graph) {
  Built b = {arena_new(), NULL};
  b.g = ir_find_graph(unit_build(b.a, "test.attn", text), graph);
  cr_assert(b.g);
  return b;
}

static int tensor_index(const IrGraph *g, const char *name) {
  for (int k = 0; k < g->ntensors; k++)
    if (!strcmp(g->tensors[k].name, name))
      return k;
  cr_assert_fail("no tensor %s", name);
  return -1;
}

/* Gemma-2 style: GQA, softcap, sliding window and causal, plus lse. */
static const char *gemma_text =
    "attention g {\n"
    "  input  q : f32[B, H,  Sq,  8];\n"
    "  input  k : f32[B, Hk, Skv, 8];\n"
    "  input  v : f32[B, Hk, Skv, 4];\n"
    "  scalar scale  : f32 = 0.35;\n"
    "  scalar window : i32 = 3;\n"
    "  s = (q @ k^T) * scale;\n"
    "  s = 5.0 * tanh(s / 5.0);\n"
    "  s = mask(s, j <= i && j > i - window);\n"
    "  p = softmax(s);\n"
    "  o = p @ v;\n"
    "  output o : f32[B, H, Sq, 4];\n"
    "  output lse = logsumexp(s);\n"
    "}\n";

Test(interp, text_gemma2_matches_naive_loops) {
  Built bu = build(gemma_text, "g");
  RefArgs args = {.g = bu.g};
  StrBuf err = {0};
  int rc = ref_make_inputs(&args, "B=2,H=4,Hk=2,Sq=6,Skv=6", 7, &err);
  cr_assert_eq(rc, 0, "%s", err.data);
  rc = ref_forward(&args, &err);
  cr_assert_eq(rc, 0, "%s", err.data);
  const double *q = args.tensors[tensor_index(bu.g, "q")].data;
  const double *k = args.tensors[tensor_index(bu.g, "k")].data;
  const double *v = args.tensors[tensor_index(bu.g, "v")].data;
  const double *O = args.tensors[tensor_index(bu.g, "o")].data;
  const double *L = args.tensors[tensor_index(bu.g, "lse")].data;
  cr_assert_eq(args.tensors[tensor_index(bu.g, "lse")].ndims, 3);
  for (int b = 0; b < 2; b++)
    for (int h = 0; h < 4; h++)
      for (int i = 0; i < 6; i++) {
        double sc[6], m = -INFINITY, sum = 0;
        for (int j = 0; j < 6; j++) {
          double dot = 0;
          for (int d = 0; d < 8; d++)
            dot += q[((b * 4 + h) * 6 + i) * 8 + d] *
                   k[((b * 2 + h / 2) * 6 + j) * 8 + d];
          double x = 5.0 * tanh(dot * (double)0.35f / 5.0);
          sc[j] = (j <= i && j > i - 3) ? x : -INFINITY;
          m = fmax(m, sc[j]);
        }
        for (int j = 0; j < 6; j++)
          sum += exp(sc[j] - m);
        double lse = m + log(sum);
        cr_assert(fabs(L[(b * 4 + h) * 6 + i] - lse) <= 1e-12 * fabs(lse) + 1e-14,
                  "lse at %d %d %d: %.17g vs %.17g", b, h, i,
                  L[(b * 4 + h) * 6 + i], lse);
        for (int d = 0; d < 4; d++) {
          double o = 0;
          for (int j = 0; j < 6; j++)
            o += exp(sc[j] - lse) * v[((b * 2 + h / 2) * 6 + j) * 4 + d];
          double got = O[((b * 4 + h) * 6 + i) * 4 + d];
          cr_assert(fabs(got - o) <= 1e-12 * fmax(1, fabs(o)),
                    "o at %d %d %d %d: %.17g vs %.17g", b, h, i, d, got, o);
        }
      }
  sb_free(&err);
  ref_args_free(&args);
  arena_free(bu.a);
}

static const char *padding_text =
    "attention pad {\n"
    "  input  q : f16[B, H, Sq, 4];\n"
    "  input  k : f16[B, H, Skv, 4];\n"
    "  input  v : f16[B, H, Skv, 4];\n"
    "  input  seqlen_q  : i32[B];\n"
    "  input  seqlen_kv : i32[B];\n"
    "  s = mask(q @ k^T, i < seqlen_q[b] && j < seqlen_kv[b]);\n"
    "  p = softmax(s);\n"
    "  o = p @ v;\n"
    "  output o : f16[B, H, Sq, 4];\n"
    "  output lse = logsumexp(s);\n"
    "}\n";

/* Padded query rows are fully masked: O = 0, lse = -inf, never NaN. */
Test(interp, text_padding_rows) {
  Built bu = build(padding_text, "pad");
  RefArgs args = {.g = bu.g};
  StrBuf err = {0};
  cr_assert_eq(ref_make_inputs(&args, "B=2,H=2,S=5", 3, &err), 0, "%s", err.data);
  double *sq = args.tensors[tensor_index(bu.g, "seqlen_q")].data;
  double *skv = args.tensors[tensor_index(bu.g, "seqlen_kv")].data;
  sq[0] = 2, skv[0] = 3, sq[1] = 5, skv[1] = 0;
  cr_assert_eq(ref_forward(&args, &err), 0, "%s", err.data);
  const RefTensor *O = &args.tensors[tensor_index(bu.g, "o")];
  const RefTensor *L = &args.tensors[tensor_index(bu.g, "lse")];
  for (int b = 0; b < 2; b++)
    for (int h = 0; h < 2; h++)
      for (int i = 0; i < 5; i++) {
        bool empty = i >= sq[b] || skv[b] == 0;
        double lse = L->data[(b * 2 + h) * 5 + i];
        cr_assert(!isnan(lse));
        cr_assert_eq(empty, isinf(lse) && lse < 0, "b %d i %d: lse %g", b, i, lse);
        for (int d = 0; d < 4; d++) {
          double o = O->data[((b * 2 + h) * 5 + i) * 4 + d];
          cr_assert(!isnan(o));
          if (empty)
            cr_assert_eq(o, 0.0);
        }
      }
  sb_free(&err);
  ref_args_free(&args);
  arena_free(bu.a);
}

static const char *rel_text =
    "attention rel {\n"
    "  input  q : bf16[B, H, Sq, 4];\n"
    "  input  k : bf16[B, H, Skv, 4];\n"
    "  input  v : bf16[B, H, Skv, 4];\n"
    "  input  rel : f32[H, 8];\n"
    "  s = (q @ k^T) + rel[h, j - i + 4];\n"
    "  o = softmax(s) @ v;\n"
    "  output o : bf16[B, H, Sq, 4];\n"
    "}\n";

/* Without a clamp the subscript leaves the table; the error is located. */
Test(interp, text_subscript_error_is_located) {
  Built bu = build(rel_text, "rel");
  RefArgs args = {.g = bu.g};
  StrBuf err = {0};
  cr_assert_eq(ref_make_inputs(&args, "B=1,H=2,Sq=4,Skv=4", 1, &err), 0);
  cr_assert_eq(ref_forward(&args, &err), 0, "%s", err.data); /* 1..7: fine */
  ref_args_free(&args);
  cr_assert_eq(ref_make_inputs(&args, "B=1,H=2,Sq=4,Skv=6", 1, &err), 0);
  cr_assert_eq(ref_forward(&args, &err), -1);
  cr_assert(strstr(err.data, "test.attn:6:"), "%s", err.data);
  cr_assert(strstr(err.data, "subscript 2 of 'rel' is 8, outside [0, 8) at "
                             "b=0 h=0 i=0 j=4"), "%s", err.data);
  sb_free(&err);
  ref_args_free(&args);
  arena_free(bu.a);
}

static const char *fp8_text =
    "attention fp8 {\n"
    "  input  q : e4m3[B, H, Sq, 16];\n"
    "  input  k : e4m3[B, H, Skv, 16];\n"
    "  input  v : e4m3[B, H, Skv, 16];\n"
    "  scalar descale_v : f32 = 2.0;\n"
    "  scalar scale_o   : f32 = 0.5;\n"
    "  out = (softmax((q @ k^T) * 0.25) @ v) * descale_v;\n"
    "  output o : e4m3[B, H, Sq, 16] = out * scale_o;\n"
    "  output amax_o = amax(out);\n"
    "}\n";

Test(interp, text_fp8_amax) {
  Built bu = build(fp8_text, "fp8");
  RefArgs args = {.g = bu.g};
  StrBuf err = {0};
  cr_assert_eq(ref_make_inputs(&args, "B=2,H=3,S=9", 11, &err), 0, "%s", err.data);
  cr_assert_eq(ref_forward(&args, &err), 0, "%s", err.data);
  const RefTensor *O = &args.tensors[tensor_index(bu.g, "o")];
  const RefTensor *A = &args.tensors[tensor_index(bu.g, "amax_o")];
  cr_assert_eq(ref_numel(A), 1);
  double m = 0;
  for (int64_t e = 0; e < ref_numel(O); e++)
    m = fmax(m, fabs(O->data[e] / 0.5)); /* o = out * scale_o */
  near(A->data[0], m);
  cr_assert(m > 0);
  sb_free(&err);
  ref_args_free(&args);
  arena_free(bu.a);
}

/* The size `attnc run --cpu` meets: B=1, H=2, S=1024, D=128. */
Test(interp, large_problem_runs, .timeout = 60) {
  static const char *text =
      "attention big {\n"
      "  input  q : bf16[B, H, Sq, 128];\n"
      "  input  k : bf16[B, H, Skv, 128];\n"
      "  input  v : bf16[B, H, Skv, 128];\n"
      "  s = mask((q @ k^T) * 0.088, j <= i);\n"
      "  output o : bf16[B, H, Sq, 128] = softmax(s) @ v;\n"
      "  output lse = logsumexp(s);\n"
      "}\n";
  Built bu = build(text, "big");
  RefArgs args = {.g = bu.g};
  StrBuf err = {0};
  cr_assert_eq(ref_make_inputs(&args, "B=1,H=2,S=1024", 5, &err), 0, "%s", err.data);
  cr_assert_eq(ref_forward(&args, &err), 0, "%s", err.data);
  const RefTensor *O = &args.tensors[tensor_index(bu.g, "o")];
  /* row 0 sees key 0 only: O = v[0] */
  const double *v = args.tensors[tensor_index(bu.g, "v")].data;
  for (int d = 0; d < 128; d++)
    near(O->data[d], v[d]);
  sb_free(&err);
  ref_args_free(&args);
  arena_free(bu.a);
}

/* Every example evaluates (run from the repository root, as tests.mk
 * does), with no NaN anywhere; only dropout is refused, by name. */
Test(interp, every_example_evaluates) {
  glob_t gl;
  cr_assert_eq(glob("examples/*.attn", 0, NULL, &gl), 0,
               "no examples/*.attn: run from the repository root");
  for (size_t f = 0; f < gl.gl_pathc; f++) {
    Arena *a = arena_new();
    Diag d = {0};
    Source *src = source_load(a, gl.gl_pathv[f], &d);
    AstFile *ast = src ? parse_source(src, a, &d) : NULL;
    IrModule *m = ast && !d.nerrors ? ir_build(ast, a, &d) : NULL;
    cr_assert(m, "%s does not build:\n%s", gl.gl_pathv[f], d.out.data);
    for (int k = 0; k < m->ngraphs; k++) {
      RefArgs args = {.g = m->graphs[k]};
      StrBuf err = {0};
      int rc = ref_make_inputs(&args, "S=19", 2, &err);
      cr_assert_eq(rc, 0, "%s: %s", gl.gl_pathv[f], err.data);
      rc = ref_forward(&args, &err);
      if (rc != 0)
        cr_assert(strstr(err.data, "dropout is not supported"), "%s: %s",
                  gl.gl_pathv[f], err.data);
      for (int o = 0; rc == 0 && o < args.g->noutputs; o++) {
        const RefTensor *t = &args.tensors[args.g->outputs[o].tensor];
        for (int64_t e = 0; e < ref_numel(t); e++)
          cr_assert(!isnan(t->data[e]), "%s: NaN in %s", gl.gl_pathv[f],
                    args.g->outputs[o].name);
      }
      sb_free(&err);
      ref_args_free(&args);
    }
    diag_free(&d);
    arena_free(a);
  }
  globfree(&gl);
}

/* ops.def's softplus row, as the CPU reference and the constant folder
 * evaluate it: log(1 + e^x) without overflow or cancellation. */
Test(interp, softplus_values_and_folding) {
  const double xs[] = {-800.0, -30.0, -1.0, 0.0, 0.5, 30.0, 800.0};
  for (size_t k = 0; k < sizeof xs / sizeof xs[0]; k++) {
    double x = xs[k], got = op_apply(IR_SOFTPLUS, DT_F32, &x, 1);
    double want = x > 30 ? x + exp(-x) : x < -30 ? exp(x) : log1p(exp(x));
    cr_assert(fabs(got - want) <= 1e-15 * fmax(1.0, fabs(want)) && isfinite(got),
              "softplus(%g) = %.17g, want %.17g", x, got, want);
  }
  Arena *a = arena_new();
  IrModule *m = unit_build(a, "<softplus>",
                           "attention g {\n  input q : bf16[B, H, S, 64];\n"
                           "  input k : bf16[B, H, S, 64];\n  input v : bf16[B, H, S, 64];\n"
                           "  scalar t : f32 = softplus(2.0) - 1.0;\n"
                           "  o = softmax((q @ k^T) * t) @ v;\n  output o : bf16[B, H, S, 64];\n}\n");
  cr_assert_float_eq(m->graphs[0]->scalars[0].fdefault, log1p(exp(2.0)) - 1.0, 1e-15);
  arena_free(a);
}

/* P rounded to FP8 before p @ v, in the flash form (reference/interp.c,
 * ref_eval_p_round): per row M = ceil(max_j s_j log2 e), L = sum_j
 * 2^(s_j log2 e - M) (+ the sink's term), and p @ v reads
 * e4m3(2^(s_j log2 e - M) * c) / L, written out here with the causal mask
 * and a sink. */
static const char *p8_text =
    "attention g {\n"
    "  input  q : f32[B, H, Sq, 8];\n"
    "  input  k : f32[B, H, Skv, 8];\n"
    "  input  v : f32[B, H, Skv, 4];\n"
    "  input  sinks : f32[H];\n"
    "  scalar scale_s : f32 = 448.0;\n"
    "  s = mask((q @ k^T) * 0.7, j <= i);\n"
    "  o = (e4m3(softmax(s, sinks[h]) * scale_s) @ v) * (1.0 / scale_s);\n"
    "  output o : f32[B, H, Sq, 4];\n"
    "}\n";

Test(interp, fp8_p_rounds_the_flash_form) {
  Built bu = build(p8_text, "g");
  const IrPChain pc = ir_p_chain(bu.g);
  cr_assert(pc.round && pc.round->type == DT_E4M3 && pc.scale && !pc.dropout && !pc.bad);
  RefArgs args = {.g = bu.g};
  StrBuf err = {0};
  cr_assert_eq(ref_make_inputs(&args, "B=1,H=2,Sq=5,Skv=5", 11, &err), 0, "%s", err.data);
  cr_assert_eq(ref_forward(&args, &err), 0, "%s", err.data);
  const double *q = args.tensors[tensor_index(bu.g, "q")].data;
  const double *k = args.tensors[tensor_index(bu.g, "k")].data;
  const double *v = args.tensors[tensor_index(bu.g, "v")].data;
  const double *sk = args.tensors[tensor_index(bu.g, "sinks")].data;
  const double *O = args.tensors[tensor_index(bu.g, "o")].data;
  const double log2e = 1.4426950408889634, c = 448.0, sc = (double)0.7f;
  int rounded_apart = 0;
  for (int h = 0; h < 2; h++)
    for (int i = 0; i < 5; i++) {
      double s[5], mx = -INFINITY;
      for (int j = 0; j < 5; j++) {
        double dot = 0;
        for (int d = 0; d < 8; d++) dot += q[(h * 5 + i) * 8 + d] * k[(h * 5 + j) * 8 + d];
        s[j] = j <= i ? dot * sc : -INFINITY;
        mx = fmax(mx, s[j]);
      }
      const double M = ceil(mx * log2e);
      double L = exp2(sk[h] * log2e - M);
      for (int j = 0; j <= i; j++) L += exp2(s[j] * log2e - M);
      for (int d = 0; d < 4; d++) {
        double want = 0, literal = 0;
        for (int j = 0; j <= i; j++) {
          const double pt = exp2(s[j] * log2e - M);
          want += dtype_round(DT_E4M3, pt * c) / L * v[(h * 5 + j) * 4 + d];
          literal += dtype_round(DT_E4M3, pt / L * c) * v[(h * 5 + j) * 4 + d];
        }
        want /= c;
        literal /= c;
        cr_assert(fabs(O[(h * 5 + i) * 4 + d] - want) <= 1e-12 * (1 + fabs(want)),
                  "h %d i %d d %d: %.17g, want %.17g", h, i, d, O[(h * 5 + i) * 4 + d], want);
        rounded_apart += fabs(want - literal) > 1e-9;
      }
    }
  /* The test can tell the flash form from rounding the normalized P. */
  cr_assert_gt(rounded_apart, 0);
  ref_args_free(&args);
  arena_free(bu.a);
}

/* The rounding casts fold and evaluate like the storage types' rounding,
 * saturating for FP8; a scale after P's rounding is not the kernels'
 * form (ir_p_chain.bad). */
Test(interp, rounding_casts_and_p_chains) {
  Built bu = build("attention g {\n  input q : f32[B, H, S, 8];\n  input k : f32[B, H, S, 8];\n"
                   "  input v : f32[B, H, S, 8];\n  scalar x : f32 = e4m3(1000.0) + bf16(1.00390625) + "
                   "e5m2(0.3) + f16(0.1);\n  p = softmax(q @ k^T);\n  o = (e4m3(p) * 2.0) @ v;\n"
                   "  output o : f32[B, H, S, 8];\n}\n", "g");
  cr_assert_eq(bu.g->scalars[0].fdefault, dtype_round(DT_F32, 448.0 + 1.0 + 0.3125 + dtype_round(DT_F16, 0.1)),
               "%.17g", bu.g->scalars[0].fdefault);
  const IrPChain pc = ir_p_chain(bu.g);
  cr_assert(pc.bad && pc.bad->op == IR_CAST && !pc.round);
  arena_free(bu.a);
}

/* Packed sequences: each sequence's rows against naive loops over its own
 * rows (causal bottom-right in per-sequence positions, GQA), rows no
 * sequence covers left NaN, offsets clamped into the tokens. */
static const char packed_text[] =
    "attention g {\n"
    "  input q : f32[Tq, H, 8];\n  input k : f32[Tk, Hk, 8];\n  input v : f32[Tk, Hk, 4];\n"
    "  input cq : i32[B1];\n  input ck : i32[B1];\n"
    "  lq = cq[b + 1] - cq[b];\n  lk = ck[b + 1] - ck[b];\n"
    "  s = mask((packed(q, cq) @ packed(k, ck)^T) * 0.35, j <= i + lk - lq);\n"
    "  o = softmax(s) @ packed(v, ck);\n"
    "  output o : f32[Tq, H, 4];\n  output lse = logsumexp(s);\n}\n";

Test(interp, packed_sequences_match_naive_loops) {
  Built bu = build(packed_text, "g");
  RefArgs args = {.g = bu.g};
  StrBuf err = {0};
  int rc = ref_make_inputs(&args, "B1=5,H=4,Hk=2,Tq=23,Tk=31", 11, &err);
  cr_assert_eq(rc, 0, "%s", err.data);
  /* Sequences: [0, 5) (clamped from -3), empty, [5, 17), [17, 20) of q
   * (rows 20-22 in none), and of k [0, 9), [9, 9), [9, 30), [30, 31). */
  const double cq[5] = {-3, 5, 5, 17, 20}, ck[5] = {0, 9, 9, 30, 31};
  double *oq = args.tensors[tensor_index(bu.g, "cq")].data;
  double *ok = args.tensors[tensor_index(bu.g, "ck")].data;
  memcpy(oq, cq, sizeof cq);
  memcpy(ok, ck, sizeof ck);
  rc = ref_forward(&args, &err);
  cr_assert_eq(rc, 0, "%s", err.data);
  const double *q = args.tensors[tensor_index(bu.g, "q")].data;
  const double *k = args.tensors[tensor_index(bu.g, "k")].data;
  const double *v = args.tensors[tensor_index(bu.g, "v")].data;
  const double *O = args.tensors[tensor_index(bu.g, "o")].data;
  const double *L = args.tensors[tensor_index(bu.g, "lse")].data;
  cr_assert_eq(args.tensors[tensor_index(bu.g, "lse")].ndims, 2);
  const int q0[4] = {0, 5, 5, 17}, lq[4] = {5, 0, 12, 3}, k0[4] = {0, 9, 9, 30}, lk[4] = {9, 0, 21, 1};
  /* The mask reads the offsets as given (lq - lk there: unclamped). */
  const int shift[4] = {9 - 8, 0, 21 - 12, 1 - 3};
  bool covered[23] = {0};
  for (int b = 0; b < 4; b++)
    for (int i = 0; i < lq[b]; i++) {
      covered[q0[b] + i] = true;
      for (int h = 0; h < 4; h++) {
        double sc[21], m = -INFINITY, sum = 0;
        for (int j = 0; j < lk[b]; j++) {
          double dot = 0;
          for (int d = 0; d < 8; d++)
            dot += q[((q0[b] + i) * 4 + h) * 8 + d] * k[((k0[b] + j) * 2 + h / 2) * 8 + d];
          sc[j] = j <= i + shift[b] ? dot * (double)0.35f : -INFINITY;
          m = fmax(m, sc[j]);
        }
        for (int j = 0; j < lk[b]; j++) sum += isinf(m) ? 0 : exp(sc[j] - m);
        const double lse = sum > 0 ? m + log(sum) : -INFINITY;
        const double got_l = L[h * 23 + q0[b] + i];
        cr_assert(isinf(lse) ? got_l == lse : fabs(got_l - lse) <= 1e-12 * fabs(lse) + 1e-14,
                  "lse of sequence %d row %d head %d: %.17g vs %.17g", b, i, h, got_l, lse);
        for (int d = 0; d < 4; d++) {
          double o = 0;
          for (int j = 0; sum > 0 && j < lk[b]; j++)
            o += exp(sc[j] - lse) * v[((k0[b] + j) * 2 + h / 2) * 4 + d];
          const double got = O[((q0[b] + i) * 4 + h) * 4 + d];
          cr_assert(fabs(got - o) <= 1e-12 * fmax(1, fabs(o)),
                    "o of sequence %d row %d head %d col %d: %.17g vs %.17g", b, i, h, d, got, o);
        }
      }
    }
  for (int r = 0; r < 23; r++)
    if (!covered[r]) {
      cr_assert(isnan(O[(r * 4) * 4]), "row %d, covered by no sequence, was written", r);
      cr_assert(isnan(L[r]), "lse row %d, covered by no sequence, was written", r);
    }
  sb_free(&err);
  ref_args_free(&args);
  arena_free(bu.a);
}

/* seqlen_q and seqlen_k are each sequence's lengths (after clamping): the
 * same outputs as the mask written with clamped offsets by hand. */
Test(interp, packed_seqlen_names_are_the_lengths) {
  static const char text[] =
      "attention g {\n"
      "  input q : f32[Tq, H, 8];\n  input k : f32[Tk, H, 8];\n  input v : f32[Tk, H, 4];\n"
      "  input cq : i32[B1];\n  input ck : i32[B1];\n"
      "  s = mask((packed(q, cq) @ packed(k, ck)^T) * 0.35, j <= i + seqlen_k - seqlen_q);\n"
      "  o = softmax(s) @ packed(v, ck);\n"
      "  output o : f32[Tq, H, 4];\n}\n"
      "attention h {\n"
      "  input q : f32[Tq, H, 8];\n  input k : f32[Tk, H, 8];\n  input v : f32[Tk, H, 4];\n"
      "  input cq : i32[B1];\n  input ck : i32[B1];\n"
      "  s = mask((packed(q, cq) @ packed(k, ck)^T) * 0.35, j <= i + (ck[b + 1] - ck[b]) - (cq[b + 1] - cq[b]));\n"
      "  o = softmax(s) @ packed(v, ck);\n"
      "  output o : f32[Tq, H, 4];\n}\n";
  Built g1 = build(text, "g"), g2 = build(text, "h");
  RefArgs a1 = {.g = g1.g}, a2 = {.g = g2.g};
  StrBuf err = {0};
  cr_assert_eq(ref_make_inputs(&a1, "B1=6,H=2,Tq=40,Tk=57", 5, &err), 0, "%s", err.data);
  cr_assert_eq(ref_make_inputs(&a2, "B1=6,H=2,Tq=40,Tk=57", 5, &err), 0, "%s", err.data);
  cr_assert_eq(ref_forward(&a1, &err), 0, "%s", err.data);
  cr_assert_eq(ref_forward(&a2, &err), 0, "%s", err.data);
  const RefTensor *o1 = &a1.tensors[tensor_index(g1.g, "o")], *o2 = &a2.tensors[tensor_index(g2.g, "o")];
  for (int64_t e = 0; e < ref_numel(o1); e++)
    cr_assert(o1->data[e] == o2->data[e] || (isnan(o1->data[e]) && isnan(o2->data[e])),
              "element %lld: %.17g vs %.17g", (long long)e, o1->data[e], o2->data[e]);
  sb_free(&err);
  ref_args_free(&a1);
  ref_args_free(&a2);
  arena_free(g1.a);
  arena_free(g2.a);
}

/* Packed q against paged k and v (continuous batching): each sequence's
 * rows against naive loops over its pages (shuffled; an id outside the
 * cache reads zeros), causal bottom-right against its own length kv_len[b],
 * GQA, the HND layout. */
Test(interp, packed_q_against_paged_caches_matches_naive_loops) {
  static const char text[] =
      "attention g {\n"
      "  input q : f32[Tq, H, 8];\n  input cq : i32[B1];\n"
      "  input kc : f32[P, Hk, PS, 8];\n  input vc : f32[P, Hk, PS, 4];\n"
      "  input t : i32[B, MP];\n  input n : i32[B];\n"
      "  s = mask((packed(q, cq) @ paged_hnd(kc, t)^T) * 0.35, j < n[b] && j <= i + n[b] - seqlen_q);\n"
      "  o = softmax(s) @ paged_hnd(vc, t);\n"
      "  output o : f32[Tq, H, 4];\n  output lse = logsumexp(s);\n}\n";
  Built bu = build(text, "g");
  RefArgs args = {.g = bu.g};
  StrBuf err = {0};
  int rc = ref_make_inputs(&args, "B1=4,B=3,H=4,Hk=2,Tq=20,P=9,PS=3,MP=4", 5, &err);
  cr_assert_eq(rc, 0, "%s", err.data);
  const double cq[4] = {0, 6, 6, 20}, n[3] = {10, 4, 12};
  const double tab[12] = {4, 0, 7, 2, /* */ 8, 1, -1, 30, /* */ 3, 5, 6, 9};
  memcpy(args.tensors[tensor_index(bu.g, "cq")].data, cq, sizeof cq);
  memcpy(args.tensors[tensor_index(bu.g, "n")].data, n, sizeof n);
  memcpy(args.tensors[tensor_index(bu.g, "t")].data, tab, sizeof tab);
  rc = ref_forward(&args, &err);
  cr_assert_eq(rc, 0, "%s", err.data);
  const double *q = args.tensors[tensor_index(bu.g, "q")].data;
  const double *kc = args.tensors[tensor_index(bu.g, "kc")].data;
  const double *vc = args.tensors[tensor_index(bu.g, "vc")].data;
  const double *O = args.tensors[tensor_index(bu.g, "o")].data;
  const double *L = args.tensors[tensor_index(bu.g, "lse")].data;
  /* Key j of sequence b, head hk, column d: page t[b][j / 3] row j % 3. */
  double kk[3][12][2][8], vv[3][12][2][4];
  memset(kk, 0, sizeof kk), memset(vv, 0, sizeof vv);
  for (int b = 0; b < 3; b++)
    for (int j = 0; j < 12; j++) {
      const int id = (int)tab[b * 4 + j / 3];
      if (id < 0 || id >= 9) continue;
      for (int hk = 0; hk < 2; hk++) {
        for (int d = 0; d < 8; d++) kk[b][j][hk][d] = kc[((id * 2 + hk) * 3 + j % 3) * 8 + d];
        for (int d = 0; d < 4; d++) vv[b][j][hk][d] = vc[((id * 2 + hk) * 3 + j % 3) * 4 + d];
      }
    }
  int live = 0;
  for (int b = 0; b < 3; b++) {
    const int q0 = (int)cq[b], lq = (int)(cq[b + 1] - cq[b]), len = (int)n[b];
    for (int i = 0; i < lq; i++)
      for (int h = 0; h < 4; h++) {
        double sc[12], m = -INFINITY, sum = 0;
        for (int j = 0; j < 12; j++) {
          double dot = 0;
          for (int d = 0; d < 8; d++) dot += q[((q0 + i) * 4 + h) * 8 + d] * kk[b][j][h / 2][d];
          sc[j] = j < len && j <= i + len - lq ? dot * (double)0.35f : -INFINITY;
          m = fmax(m, sc[j]);
        }
        for (int j = 0; j < 12; j++) sum += isinf(m) ? 0 : exp(sc[j] - m);
        const double lse = sum > 0 ? m + log(sum) : -INFINITY;
        live += sum > 0;
        const double got_l = L[h * 20 + q0 + i];
        cr_assert(isinf(lse) ? got_l == lse : fabs(got_l - lse) <= 1e-12 * fabs(lse) + 1e-14,
                  "lse of sequence %d row %d head %d: %.17g vs %.17g", b, i, h, got_l, lse);
        for (int d = 0; d < 4; d++) {
          double o = 0;
          for (int j = 0; sum > 0 && j < 12; j++) o += exp(sc[j] - lse) * vv[b][j][h / 2][d];
          const double got = O[((q0 + i) * 4 + h) * 4 + d];
          cr_assert(fabs(got - o) <= 1e-12 * fmax(1, fabs(o)),
                    "o of sequence %d row %d head %d col %d: %.17g vs %.17g", b, i, h, d, got, o);
        }
      }
  }
  cr_assert_gt(live, 40);
  sb_free(&err);
  ref_args_free(&args);
  arena_free(bu.a);
}
