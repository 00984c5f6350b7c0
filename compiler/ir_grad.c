/*
 * ir_grad.c: a graph's `grad q, k, v { ... }` block, the backward's own
 * statements (docs/language.md "FP8 gradients"):
 *
 *   input do : e5m2;                      the incoming gradient's storage type
 *   do = do * descale_do;                 its value: the stored number times a descale
 *   output amax_dp = amax(ds);            max |dS| over the call
 *   ds = e5m2(ds * scale_dp) / scale_dp;  dS as the products dQ, dK read it
 *   output dq : e4m3 = dq * scale_dq;     a gradient's storage type and value
 *   output amax_dq = amax(dq);
 *
 * Names: d<o> for the attention output's gradient (o's name, as the
 * runtime binds it), ds for the gradient at the softmax's input, d<q>,
 * d<k>, d<v> for the inputs named in grad. Each is a leaf; what a
 * statement makes of it is a pointwise function of that one leaf and of
 * values fixed for the whole call (scalars, constants, dimensions,
 * one-element reads such as descale[0]): the per-tensor scaling of the FP8
 * recipe. The block's nodes are lowered by ir_build's expression lowering
 * into an array of their own (IrGradBlock.nodes), so no pass over the
 * forward's nodes ever sees them; the statements run in order, each
 * reading a name's value as the statements before it left it.
 */
#include <stdio.h>
#include <string.h>

#include "ir_build.h"

typedef struct GradBuild {
  Builder *b;
  IrGradBlock *gb;
  const char *name[IR_GRAD_N]; /* each gradient's name in the block, NULL: none */
  bool typed[IR_GRAD_N];       /* an input or output statement gave its type */
  bool stored[IR_GRAD_N];      /* an output statement named it */
} GradBuild;

static const char *concat_d(Arena *a, const char *name) {
  size_t n = strlen(name);
  char *s = arena_alloc(a, n + 2);
  s[0] = 'd';
  memcpy(s + 1, name, n + 1);
  return s;
}

static int which_grad(const GradBuild *gr, const char *name) {
  for (int k = 0; k < IR_GRAD_N; k++)
    if (gr->name[k] && !strcmp(gr->name[k], name)) return k;
  return -1;
}

/* Binds the block's names to fresh leaves. false after an error (a name
 * the forward already uses), or without an attention output (p @ v times
 * values fixed per (b, h), whose d<name> the runtime binds dO as): such a
 * graph has no backward, which bwd_derive reports, located, at compile. */
static bool bind_leaves(GradBuild *gr) {
  Builder *b = gr->b;
  const IrGraph *g = b->g;
  const int o = ir_attention_output(g);
  if (o < 0) return false;
  gr->name[IR_GRAD_DO] = concat_d(b->a, g->outputs[o].name);
  gr->name[IR_GRAD_DS] = "ds";
  const int qkv[3] = {g->q, g->k, g->v};
  for (int r = 0; r < 3; r++)
    if (g->tensors[qkv[r]].grad)
      gr->name[IR_GRAD_DQ + r] = concat_d(b->a, g->tensors[qkv[r]].name);
  bool ok = true;
  for (int k = 0; k < IR_GRAD_N; k++) {
    if (!gr->name[k]) continue;
    Binding *x = ib_lookup(b, gr->name[k]);
    if (x) {
      diag_error(b->d, x->loc, "'%s' names a gradient in the graph's grad block; the graph "
                 "already declares it", gr->name[k]);
      diag_note(b->d, gr->gb->loc, "the grad block is here");
      ok = false;
      continue;
    }
    static const unsigned axes[IR_GRAD_N] = {
        DOM_B | DOM_H | DOM_I | DOM_D, DOM_B | DOM_H | DOM_I | DOM_J,
        DOM_B | DOM_H | DOM_I | DOM_D, DOM_B | DOM_H | DOM_J | DOM_D,
        DOM_B | DOM_H | DOM_J | DOM_D};
    IrNode *n = ir_node(b->a, IR_INPUT, gr->gb->loc, DT_F32, axes[k], 0, NULL);
    n->ref = -1;
    n->name = gr->name[k];
    ib_leaf(b, n); /* numbered among the block's nodes */
    x = ib_bind(b, gr->name[k], BIND_LOCAL, gr->gb->loc);
    x->grad = true;
    x->node = n;
    gr->gb->v[k] = (IrGradValue){.leaf = n, .value = n, .type = DT_NONE, .loc = gr->gb->loc};
  }
  return ok;
}

/* Which block leaf n's value reads (-1: none); -2 after reporting one
 * that reads two, or a part that varies over an index. */
static int grad_reads(GradBuild *gr, const IrNode *n) {
  if (n->op == IR_INPUT && n->ref == -1) {
    for (int k = 0; k < IR_GRAD_N; k++)
      if (gr->gb->v[k].leaf == n) return k;
    return -1;
  }
  int leaf = -1;
  for (int s = 0; s < n->nsrc; s++) {
    int r = grad_reads(gr, n->src[s]);
    if (r == -2) return -2;
    if (r >= 0 && leaf >= 0 && r != leaf) {
      diag_error(gr->b->d, n->loc, "this reads both '%s' and '%s'; a grad block's value is "
                 "a function of one gradient", gr->name[leaf], gr->name[r]);
      return -2;
    }
    if (r >= 0) leaf = r;
  }
  if (leaf < 0 && n->dom != 0) {
    diag_error(gr->b->d, n->loc, "a grad block scales by values fixed for the whole call "
               "(scalars, constants, one-element reads such as descale[0]); this varies "
               "over an index");
    return -2;
  }
  return leaf;
}

/* Lowers a block value that must read gradient `want` (or any one, want
 * -1: *got says which). NULL after an error. */
static IrNode *grad_value(GradBuild *gr, const AstExpr *e, int want, int *got) {
  Builder *b = gr->b;
  IrNode *n = ib_lower(b, e);
  if (!n) return NULL;
  int r = grad_reads(gr, n);
  if (r == -2) return NULL;
  if (!dtype_is_float(n->type) && n->op != IR_AMAX) {
    diag_error(b->d, e->loc, "a gradient's value is a float; this is %s", dtype_name(n->type));
    return NULL;
  }
  if (want >= 0 && r >= 0 && r != want) {
    diag_error(b->d, e->loc, "the value of '%s' can read '%s' only, not '%s'", gr->name[want],
               gr->name[want], gr->name[r]);
    return NULL;
  }
  if (r < 0 && want < 0) {
    diag_error(b->d, e->loc, "this reads no gradient; amax in a grad block reduces one of %s",
               "ds, the gradients named in grad or the incoming one");
    return NULL;
  }
  if (got) *got = r;
  return n;
}

static bool storage_type(GradBuild *gr, const AstStmt *st) {
  if (st->type.has_shape) {
    diag_error(gr->b->d, st->type.loc, "a gradient has its tensor's shape; write the type "
               "alone ('%s')", dtype_name(st->type.dtype));
    return false;
  }
  if (!dtype_is_float(st->type.dtype)) {
    diag_error(gr->b->d, st->type.loc, "a gradient is stored as a float type (f32, bf16, f16, "
               "e4m3, e5m2), not %s", dtype_name(st->type.dtype));
    return false;
  }
  return true;
}

/* input d<o> : T;  the incoming gradient's storage type. */
static void grad_input(GradBuild *gr, const AstStmt *st) {
  Builder *b = gr->b;
  if (which_grad(gr, st->name) != IR_GRAD_DO) {
    diag_error(b->d, st->name_loc, "a grad block's input is the incoming gradient, '%s'; "
               "declare other inputs at the graph's level", gr->name[IR_GRAD_DO]);
    return;
  }
  if (gr->typed[IR_GRAD_DO]) {
    diag_error(b->d, st->name_loc, "'%s''s type is declared twice", st->name);
    diag_note(b->d, gr->gb->v[IR_GRAD_DO].loc, "first here");
    return;
  }
  if (!storage_type(gr, st)) return;
  gr->typed[IR_GRAD_DO] = true;
  gr->gb->v[IR_GRAD_DO].type = st->type.dtype;
  gr->gb->v[IR_GRAD_DO].loc = st->loc;
}

/* d<o> = ...; or ds = ...; */
static void grad_assign(GradBuild *gr, const AstStmt *st) {
  Builder *b = gr->b;
  const int k = which_grad(gr, st->name);
  if (k != IR_GRAD_DO && k != IR_GRAD_DS) {
    if (k >= 0)
      diag_error(b->d, st->name_loc, "'%s' is a gradient the backward stores: give its value "
                 "in its output statement (output %s : TYPE = ...)", st->name, st->name);
    else
      diag_error(b->d, st->name_loc, "a grad block assigns '%s' (the incoming gradient) and "
                 "'ds'; '%s' is neither", gr->name[IR_GRAD_DO], st->name);
    ib_lower(b, st->value); /* still report errors inside it */
    return;
  }
  IrNode *n = grad_value(gr, st->value, k, NULL);
  if (!n) return;
  /* (looked up again: the binding table moves as it grows) */
  ib_lookup(b, gr->name[k])->node = n;
  gr->gb->v[k].value = n;
  gr->gb->v[k].loc = st->loc;
}

static void grad_amax(GradBuild *gr, const AstStmt *st) {
  Builder *b = gr->b;
  if (!ib_fresh_name(b, st->name, st->name_loc)) return;
  for (int k = 0; k < gr->gb->namax; k++)
    if (!strcmp(gr->gb->amax[k].name, st->name)) {
      diag_error(b->d, st->name_loc, "redefinition of output '%s'", st->name);
      diag_note(b->d, gr->gb->amax[k].loc, "'%s' first declared here", st->name);
      return;
    }
  if (st->has_type && (st->type.dtype != DT_F32 || st->type.has_shape)) {
    diag_error(b->d, st->type.loc, "an amax is f32 (one value); drop the type or write f32");
    return;
  }
  int of = -1;
  IrNode *n = grad_value(gr, st->value, -1, &of);
  if (!n) return;
  if (n->op != IR_AMAX) { /* grad_value accepted a float, not an amax */
    diag_error(b->d, st->value->loc, "a grad block's outputs are the gradients (%s) and "
               "amax(...) of them", "dq, dk, dv as named in grad");
    return;
  }
  IrGradBlock *gb = gr->gb;
  if (gb->namax == BWD_MAX_AMAX) {
    diag_error(b->d, st->name_loc, "a grad block has at most %d amax outputs", BWD_MAX_AMAX);
    return;
  }
  IrGradAmax *grown = arena_alloc(b->a, (size_t)(gb->namax + 1) * sizeof *grown);
  if (gb->namax) memcpy(grown, gb->amax, (size_t)gb->namax * sizeof *grown);
  grown[gb->namax++] = (IrGradAmax){.name = st->name, .loc = st->name_loc, .of = of,
                                    .value = n->src[0]};
  gb->amax = grown;
  ib_bind(b, st->name, BIND_LOCAL, st->name_loc)->fixed = true;
}

/* output d<q> [: T] [= value];  or  output NAME = amax(...); */
static void grad_output(GradBuild *gr, const AstStmt *st) {
  Builder *b = gr->b;
  const int k = which_grad(gr, st->name);
  if (k < 0) {
    if (!st->value) {
      diag_error(b->d, st->name_loc, "a grad block's outputs are the gradients it computes "
                 "and amax(...) of them; '%s' is neither", st->name);
      return;
    }
    grad_amax(gr, st);
    return;
  }
  if (k == IR_GRAD_DO || k == IR_GRAD_DS) {
    diag_error(b->d, st->name_loc, "'%s' is not stored: %s", st->name,
               k == IR_GRAD_DO ? "it is the incoming gradient (declare its type with "
                                 "`input`)" : "the backward keeps dS in registers");
    return;
  }
  if (gr->stored[k]) {
    diag_error(b->d, st->name_loc, "redefinition of output '%s'", st->name);
    diag_note(b->d, gr->gb->v[k].loc, "'%s' first declared here", st->name);
    return;
  }
  gr->stored[k] = true;
  if (st->has_type) {
    if (!storage_type(gr, st)) return;
    gr->typed[k] = true;
    gr->gb->v[k].type = st->type.dtype;
  }
  gr->gb->v[k].loc = st->loc;
  if (st->value) {
    IrNode *n = grad_value(gr, st->value, k, NULL);
    if (!n) return;
    gr->gb->v[k].value = n;
  }
  /* The name still reads the gradient itself (amax(dq) after this is of
   * dq, not of what is stored), and nothing may reassign it. */
  ib_lookup(b, gr->name[k])->fixed = true;
}

static void grad_stmt(GradBuild *gr, const AstStmt *st) {
  Builder *b = gr->b;
  switch (st->kind) {
  case STMT_SCALAR: ib_declare_scalar(b, st); return;
  case STMT_INPUT: grad_input(gr, st); return;
  case STMT_ASSIGN: grad_assign(gr, st); return;
  case STMT_OUTPUT: grad_output(gr, st); return;
  case STMT_GRAD:
    diag_error(b->d, st->loc, "grad statements do not nest; name every input in the one "
               "grad statement");
    return;
  }
}

/* An FP8 input's gradient stored without a scale would flush most of its
 * values to zero (gradients are small): its type must be chosen. */
static void check_fp8_grads(GradBuild *gr) {
  Builder *b = gr->b;
  const IrGraph *g = b->g;
  const int qkv[3] = {g->q, g->k, g->v};
  for (int r = 0; r < 3; r++) {
    const IrTensor *t = &g->tensors[qkv[r]];
    if (!t->grad || !dtype_is_fp8(t->type) || gr->typed[IR_GRAD_DQ + r]) continue;
    Binding *x = ib_lookup(b, t->name);
    diag_error(b->d, x ? x->grad_loc : t->loc, "'%s' is %s: choose how its gradient is "
               "stored, in a grad block: `output d%s : bf16;` or, scaled, `output d%s : "
               "%s = d%s * scale_d%s;`", t->name, dtype_name(t->type), t->name, t->name,
               dtype_name(t->type), t->name, t->name);
  }
}

void ib_grad_block(Builder *b, const AstStmt *st) {
  IrGraph *g = b->g;
  if (g->q < 0 || g->k < 0 || g->v < 0 || !g->pv || !bwd_has_grad(g)) return;
  if (!st) {
    GradBuild none = {.b = b};
    check_fp8_grads(&none);
    return;
  }
  IrGradBlock *gb = arena_alloc(b->a, sizeof *gb);
  gb->loc = st->loc;
  GradBuild gr = {.b = b, .gb = gb};
  /* The block's nodes go to an array of their own: swap the builder's. */
  IrNode **fwd_nodes = b->nodes;
  unsigned char *fwd_flags = b->flags;
  const int fwd_cap = b->cap_nodes, fwd_n = g->nnodes;
  b->nodes = NULL;
  b->flags = NULL;
  b->cap_nodes = 0;
  g->nnodes = 0;
  b->grad_block = true;
  const int before = b->d->nerrors;
  const bool bound = bind_leaves(&gr);
  for (int k = 0; bound && k < st->nblock; k++)
    if (st->block[k]) grad_stmt(&gr, st->block[k]);
  if (bound) check_fp8_grads(&gr);
  gb->nodes = b->nodes;
  gb->nnodes = g->nnodes;
  b->grad_block = false;
  b->nodes = fwd_nodes;
  b->flags = fwd_flags;
  b->cap_nodes = fwd_cap;
  g->nnodes = fwd_n;
  g->nodes = fwd_nodes;
  if (bound && b->d->nerrors == before) g->grad = gb;
}
