/*
 * ir_build.c: AST -> IR. Resolves names, infers each value's type and
 * domain (the axes it varies over), and checks everything that can be
 * checked one expression at a time; ir_check.c then checks the graph as a
 * whole (landmarks, q/k/v shapes, outputs).
 *
 * Names bind in statement order, SSA style: `s = f(s)` makes a new value
 * and points `s` at it, so a graph is acyclic by construction and the node
 * array is a topological order. An expression that fails to lower gives
 * NULL; the error has been reported, and NULL propagates silently so one
 * mistake gives one message. A local bound to NULL is "poisoned": later
 * uses are quiet too.
 *
 * Two stage flags ride beside each node (not in IrNode, which later passes
 * share): whether it depends on q @ k^T or on p @ v, and whether it is the
 * softmax's output (softmax or dropout), which may only feed dropout and
 * the second matmul.
 *
 * The tensor views (paged caches, packed sequences, matmul operands named
 * whole) are lowered in ir_views.c; the builder's state is ir_build.h's.
 */
#include <math.h>
#include <string.h>

#include "ir_build.h"

/* Grows an arena array of n elements to hold one more. */
static void *grow(Arena *a, void *p, int n, int *cap, size_t elem) {
  if (n < *cap) return p;
  int ncap = *cap ? *cap * 2 : 8;
  void *q = arena_alloc(a, (size_t)ncap * elem);
  if (n) memcpy(q, p, (size_t)n * elem);
  *cap = ncap;
  return q;
}

/* ------------------------------------------------------------- names */

static bool is_builtin_func(const char *name) { return ir_find_fn(name) != NULL; }

/* DOM_B..DOM_J for the index names b h i j, else 0. */
unsigned ib_index_dom(const char *name) {
  if (!strcmp(name, "b")) return DOM_B;
  if (!strcmp(name, "h")) return DOM_H;
  if (!strcmp(name, "i")) return DOM_I;
  if (!strcmp(name, "j")) return DOM_J;
  return 0;
}

Binding *ib_lookup(Builder *b, const char *name) {
  for (int k = 0; k < b->nbinds; k++)
    if (!strcmp(b->binds[k].name, name)) return &b->binds[k];
  return NULL;
}

int ib_find_dim(const IrGraph *g, const char *name) {
  for (int k = 0; k < g->ndims; k++)
    if (!strcmp(g->dims[k].name, name)) return k;
  return -1;
}

const char *ib_kind_name(int kind) {
  return kind == BIND_INPUT ? "input" : kind == BIND_SCALAR ? "scalar" : "local";
}

/* Rejects a declared name that is built in or is a dimension symbol. */
bool ib_check_new_name(Builder *b, const char *name, Loc loc) {
  if (ib_index_dom(name)) {
    diag_error(b->d, loc, "'%s' is a built-in index; it cannot be declared",
               name);
    return false;
  }
  if (!strcmp(name, "inf") || is_builtin_func(name)) {
    diag_error(b->d, loc, "'%s' is a built-in name; it cannot be declared",
               name);
    return false;
  }
  int dim = ib_find_dim(b->g, name);
  if (dim >= 0) {
    diag_error(b->d, loc, "'%s' is a dimension symbol; it cannot be declared",
               name);
    diag_note(b->d, b->g->dims[dim].loc, "'%s' first appears here", name);
    return false;
  }
  return true;
}

bool ib_fresh_name(Builder *b, const char *name, Loc loc) {
  if (!ib_check_new_name(b, name, loc)) return false;
  Binding *old = ib_lookup(b, name);
  if (old) {
    diag_error(b->d, loc, "redefinition of '%s'", name);
    diag_note(b->d, old->loc, "'%s' first declared here", name);
    return false;
  }
  return true;
}

Binding *ib_bind(Builder *b, const char *name, int kind, Loc loc) {
  b->binds = grow(b->a, b->binds, b->nbinds, &b->cap_binds, sizeof *b->binds);
  Binding *x = &b->binds[b->nbinds++];
  *x = (Binding){.name = name, .kind = kind, .loc = loc, .ref = -1};
  return x;
}

/* Interns a dimension symbol; -1 after an error. */
static int intern_dim(Builder *b, const char *name, Loc loc) {
  int k = ib_find_dim(b->g, name);
  if (k >= 0) return k;
  if (ib_index_dom(name) || !strcmp(name, "inf") || is_builtin_func(name)) {
    diag_error(b->d, loc, "'%s' is a built-in name; it cannot name a dimension",
               name);
    return -1;
  }
  Binding *x = ib_lookup(b, name);
  if (x) {
    diag_error(b->d, loc, "'%s' is already declared as %s %s; it cannot name a "
               "dimension", name, x->kind == BIND_INPUT ? "an" : "a",
               ib_kind_name(x->kind));
    diag_note(b->d, x->loc, "'%s' declared here", name);
    return -1;
  }
  IrGraph *g = b->g;
  g->dims = grow(b->a, g->dims, g->ndims, &b->cap_dims, sizeof *g->dims);
  g->dims[g->ndims] = (IrDimSym){.name = name, .loc = loc};
  return g->ndims++;
}

/* Fills t's shape from a declared type; false after an error. */
static bool lower_shape(Builder *b, const AstType *ty, IrTensor *t,
                        const char *what) {
  if (ty->ndims > IR_MAX_RANK) {
    diag_error(b->d, ty->loc, "%s '%s' has %d dimensions; at most %d are "
               "supported", what, t->name, ty->ndims, IR_MAX_RANK);
    return false;
  }
  if (ty->ndims == 0) {
    diag_error(b->d, ty->loc, "%s '%s' needs at least one dimension", what,
               t->name);
    return false;
  }
  bool ok = true;
  t->ndims = ty->ndims;
  for (int k = 0; k < ty->ndims; k++) {
    const AstDim *dm = &ty->dims[k];
    t->dim_sym[k] = -1;
    if (dm->sym) {
      t->dim_sym[k] = intern_dim(b, dm->sym, dm->loc);
      if (t->dim_sym[k] < 0) ok = false;
    } else if (dm->value < 1 || dm->value > INT32_MAX) {
      diag_error(b->d, dm->loc, "a dimension must be between 1 and %d",
                 INT32_MAX);
      ok = false;
    } else {
      t->dim_val[k] = dm->value;
    }
  }
  return ok;
}

/* ------------------------------------------------------------- nodes */

static unsigned char node_flags(const Builder *b, const IrNode *n) {
  return b->flags[n->id];
}

static IrNode *add(Builder *b, IrNode *n, unsigned char flags) {
  IrGraph *g = b->g;
  int cap = b->cap_nodes;
  b->nodes = grow(b->a, b->nodes, g->nnodes, &cap, sizeof *b->nodes);
  if (cap != b->cap_nodes) {
    unsigned char *f = arena_alloc(b->a, (size_t)cap);
    if (g->nnodes) memcpy(f, b->flags, (size_t)g->nnodes);
    b->flags = f;
    b->cap_nodes = cap;
  }
  n->id = g->nnodes;
  b->nodes[g->nnodes] = n;
  b->flags[g->nnodes++] = flags;
  return n;
}

IrNode *ib_leaf(Builder *b, IrNode *n) { return add(b, n, 0); }

/* A node over operands, with the checks every consumer shares: the
 * softmax's output only feeds dropout and p @ v, amax only feeds an
 * output, and no value varies over both j and d. NULL operands (earlier
 * errors) give NULL quietly. */
static IrNode *op_node(Builder *b, IrOp op, Loc loc, DType type, int n,
                       IrNode *const *src) {
  unsigned dom = 0;
  unsigned char flags = 0;
  for (int k = 0; k < n; k++) {
    if (!src[k]) return NULL;
    dom |= src[k]->dom;
    flags |= node_flags(b, src[k]) & (F_QK | F_PV);
  }
  for (int k = 0; k < n; k++) {
    /* P may also be scaled by a value fixed per (b, h) and rounded
     * (`e4m3(p * scale_s) @ v`, FP8 attention): still P for p @ v. */
    const IrNode *other = n == 2 ? src[1 - k] : NULL;
    bool scaled = op == IR_MUL && other && !(node_flags(b, other) & F_PROB) &&
                  !(other->dom & (DOM_I | DOM_J | DOM_D)) && dtype_is_float(type);
    bool rounded = op == IR_CAST && dtype_is_float(type);
    bool prob_ok = (k == 0 && (op == IR_PV || op == IR_DROPOUT)) || scaled || rounded;
    if ((node_flags(b, src[k]) & F_PROB) && (scaled || rounded)) flags |= F_PROB;
    if ((node_flags(b, src[k]) & F_PROB) && !prob_ok) {
      diag_error(b->d, loc, "the softmax's output may only feed dropout, a scale fixed per "
                 "(b, h), a rounding (e4m3(p)) or the second matmul (p @ v)");
      diag_note(b->d, src[k]->loc, "the softmax's output comes from here");
      return NULL;
    }
    if (src[k]->op == IR_AMAX) {
      diag_error(b->d, loc, "amax reduces over the whole output; it can only "
                 "be an output");
      return NULL;
    }
    /* The kernels know a row's logsumexp only once its last key tile is
     * done, after every hook that could read it has run. */
    if (src[k]->op == IR_LOGSUMEXP) {
      diag_error(b->d, loc, "logsumexp can only be an output (`output lse = "
                 "logsumexp(s)`); no op may read it");
      diag_note(b->d, src[k]->loc, "the logsumexp is here");
      return NULL;
    }
  }
  if (op == IR_LOGSUMEXP) dom &= ~(unsigned)DOM_J;
  if (op == IR_AMAX) dom = 0;
  if ((dom & DOM_J) && (dom & DOM_D) && !b->grad_block) { /* (dk, dv: over j and d) */
    diag_error(b->d, loc, "this mixes values over key positions (j) with the "
               "attention output (d); only p @ v combines them");
    return NULL;
  }
  return add(b, ir_node(b->a, op, loc, type, dom, n, src), flags);
}

static IrNode *op1(Builder *b, IrOp op, Loc loc, DType t, IrNode *x) {
  IrNode *s[1] = {x};
  return op_node(b, op, loc, t, 1, s);
}

static IrNode *op2(Builder *b, IrOp op, Loc loc, DType t, IrNode *x,
                   IrNode *y) {
  IrNode *s[2] = {x, y};
  return op_node(b, op, loc, t, 2, s);
}

/* ------------------------------------------------------------- expressions */

IrNode *ib_lower(Builder *b, const AstExpr *e);

static IrNode *lower_name(Builder *b, const AstExpr *e) {
  Binding *x = ib_lookup(b, e->name);
  if (x && x->kind == BIND_LOCAL && x->view) {
    diag_error(b->d, e->loc, "'%s' is a %s view of '%s'; only q @ k^T and p @ v read it",
               e->name, b->inputs[x->view - 1].packed ? "packed" : "paged",
               b->inputs[x->view - 1].name);
    return NULL;
  }
  if (x && x->kind == BIND_LOCAL && b->grad_block && !x->grad) {
    diag_error(b->d, e->loc, "a grad block reads its gradients, scalars and constants; '%s' is "
               "a value of the forward pass", e->name);
    return NULL;
  }
  if (x && x->kind == BIND_LOCAL) return x->node;
  if (x && x->kind == BIND_SCALAR) {
    IrNode *n = ir_node(b->a, IR_SCALAR, e->loc, b->g->scalars[x->ref].type,
                        0, 0, NULL);
    n->ref = x->ref;
    return ib_leaf(b, n);
  }
  if (x) {
    diag_error(b->d, e->loc, "'%s' is a whole tensor; only matmul takes it; "
               "index it to read elements", e->name);
    return NULL;
  }
  unsigned dom = ib_index_dom(e->name);
  if (dom) {
    IrNode *n = ir_node(b->a, IR_INDEX, e->loc, DT_I32, dom, 0, NULL);
    n->ival = dom;
    return ib_leaf(b, n);
  }
  if (!strcmp(e->name, "inf")) return ib_leaf(b, ir_const_float(b->a, e->loc, INFINITY));
  int dim = ib_find_dim(b->g, e->name);
  if (dim >= 0) {
    IrNode *n = ir_node(b->a, IR_DIM, e->loc, DT_I32, 0, 0, NULL);
    n->ref = dim;
    return ib_leaf(b, n);
  }
  /* Packed sequences' lengths, after every declared name (which shadow
   * them): ir_check refuses them where q is not packed. */
  if (!strcmp(e->name, "seqlen_q") || !strcmp(e->name, "seqlen_k")) {
    IrNode *n = ir_node(b->a, IR_DIM, e->loc, DT_I32, DOM_B, 0, NULL);
    n->ref = e->name[7] == 'q' ? IR_SEQLEN_Q : IR_SEQLEN_K;
    return ib_leaf(b, n);
  }
  if (b->defining && !strcmp(b->defining, e->name))
    diag_error(b->d, e->loc, "'%s' is used in its own definition", e->name);
  else if (is_builtin_func(e->name))
    diag_error(b->d, e->loc, "'%s' is a function; call it as %s(...)", e->name,
               e->name);
  else
    diag_error(b->d, e->loc, "unknown name '%s'", e->name);
  return NULL;
}

static IrNode *input_node(Builder *b, int ref, Loc loc, unsigned dom) {
  IrNode *n = ir_node(b->a, IR_INPUT, loc, b->inputs[ref].type, dom, 0, NULL);
  n->ref = ref;
  return ib_leaf(b, n);
}

/* q @ k^T gives the scores; p @ v the output. The transpose is folded
 * into IR_QK, whose operands are q and k themselves. */
static IrNode *lower_matmul(Builder *b, const AstExpr *e) {
  const AstExpr *l = e->args[0], *r = e->args[1];
  if (r->kind == AST_TRANSPOSE) {
    int q = ib_whole_input(b, l, "left operand of q @ k^T", false);
    int k = ib_whole_input(b, r->args[0], "right operand of q @ k^T", true);
    if (q < 0 || k < 0) return NULL;
    IrNode *s[2] = {input_node(b, q, l->loc, DOM_B | DOM_H | DOM_I | DOM_D),
                    input_node(b, k, r->args[0]->loc,
                               DOM_B | DOM_H | DOM_J | DOM_D)};
    IrNode *n = ir_node(b->a, IR_QK, e->loc, DT_F32,
                        DOM_B | DOM_H | DOM_I | DOM_J, 2, s);
    return add(b, n, F_QK);
  }
  if (l->kind == AST_NAME) {
    Binding *x = ib_lookup(b, l->name);
    if (x && x->kind == BIND_INPUT) {
      diag_error(b->d, e->loc, "the right operand of q @ k^T must be "
                 "transposed: write %s @ %s^T",
                 l->name, r->kind == AST_NAME ? r->name : "k");
      return NULL;
    }
  }
  IrNode *p = ib_lower(b, l);
  int v = ib_whole_input(b, r, "right operand of p @ v", true);
  if (!p || v < 0) return NULL;
  if (!(node_flags(b, p) & F_PROB)) {
    diag_error(b->d, l->loc, "the left operand of p @ v must be the softmax's "
               "output (or dropout of it)");
    return NULL;
  }
  /* Built directly: p @ v contracts j away, which op_node's j-with-d
   * check would reject. */
  IrNode *s[2] = {p, input_node(b, v, r->loc, DOM_B | DOM_H | DOM_J | DOM_D)};
  IrNode *n = ir_node(b->a, IR_PV, e->loc, DT_F32,
                      DOM_B | DOM_H | DOM_I | DOM_D, 2, s);
  return add(b, n, F_QK | F_PV);
}

static IrNode *lower_binary(Builder *b, const AstExpr *e) {
  if (e->op == BIN_MATMUL) return lower_matmul(b, e);
  IrNode *x = ib_lower(b, e->args[0]), *y = ib_lower(b, e->args[1]);
  if (!x || !y) return NULL;
  DType t = ir_binop_type(b->d, e->loc, (BinOp)e->op, x->type, y->type);
  if (t == DT_NONE) return NULL;
  return op2(b, ir_binop_op(e->op), e->loc, t, x, y);
}

static IrNode *lower_unary(Builder *b, const AstExpr *e) {
  IrNode *x = ib_lower(b, e->args[0]);
  if (!x) return NULL;
  if (e->op == UN_NOT) {
    if (x->type != DT_BOOL) {
      diag_error(b->d, e->loc, "operator '!' needs bool, got %s",
                 dtype_name(x->type));
      return NULL;
    }
    return op1(b, IR_NOT, e->loc, DT_BOOL, x);
  }
  if (!ir_is_num(x->type)) {
    diag_error(b->d, e->loc, "operator '-' needs a number, got %s",
               dtype_name(x->type));
    return NULL;
  }
  return op1(b, IR_NEG, e->loc, x->type, x);
}

/* mask, softmax and logsumexp take scores: values over i and j computed
 * from q @ k^T. */
static bool check_scores(Builder *b, const char *fn, const AstExpr *arg,
                         IrNode *s) {
  if ((s->dom & DOM_I) && (s->dom & DOM_J) && (node_flags(b, s) & F_QK) &&
      !(node_flags(b, s) & F_PROB))
    return true;
  diag_error(b->d, arg->loc, "'%s' takes scores (values over i and j computed "
             "from q @ k^T)", fn);
  return false;
}

/* A softmax sink (gpt-oss's learnable per-head logit): one number per
 * (b, h) at most, joining every row's denominator. */
static bool check_sink(Builder *b, const char *fn, const AstExpr *arg, IrNode *x) {
  if (x->dom & ~(unsigned)(DOM_B | DOM_H)) {
    char buf[8];
    diag_error(b->d, arg->loc, "%s's sink must be one value per batch and head (b, h), but "
               "this varies over %s", fn, ir_dom_letters(x->dom, buf));
    return false;
  }
  if (!ir_is_num(x->type) || (node_flags(b, x) & (F_QK | F_PROB))) {
    diag_error(b->d, arg->loc, "%s's sink must be a number computed from inputs and scalars, "
               "got %s", fn, (node_flags(b, x) & (F_QK | F_PROB)) ? "scores" : dtype_name(x->type));
    return false;
  }
  return true;
}

static bool check_uniform(Builder *b, const char *what, const AstExpr *arg,
                          IrNode *x, bool integer) {
  if (x->dom) {
    char buf[8];
    diag_error(b->d, arg->loc, "dropout's %s must be the same for every "
               "element, but this varies over %s", what,
               ir_dom_letters(x->dom, buf));
    return false;
  }
  if (integer ? !dtype_is_int(x->type) : !ir_is_num(x->type)) {
    diag_error(b->d, arg->loc, "dropout's %s must be %s, got %s", what,
               integer ? "an integer" : "a number", dtype_name(x->type));
    return false;
  }
  return true;
}

static IrNode *lower_call_fn(Builder *b, const AstExpr *e, const FnInfo *fn,
                             IrNode **v) {
  DType t;
  switch (fn->kind) {
  case FN_MATH:
    t = ir_math_type(b->d, e->loc, fn, v[0]->type);
    return t == DT_NONE ? NULL : op1(b, fn->op, e->loc, t, v[0]);
  case FN_MINMAX:
    t = ir_minmax_type(b->d, e->loc, fn->name, v[0]->type, v[1]->type);
    return t == DT_NONE ? NULL : op2(b, fn->op, e->loc, t, v[0], v[1]);
  case FN_CLAMP: {
    t = ir_minmax_type(b->d, e->loc, fn->name, v[0]->type, v[1]->type);
    if (t != DT_NONE) t = ir_minmax_type(b->d, e->loc, fn->name, t, v[2]->type);
    if (t == DT_NONE) return NULL;
    IrNode *lo = op2(b, IR_MAX, e->loc, t, v[0], v[1]);
    return lo ? op2(b, IR_MIN, e->loc, t, lo, v[2]) : NULL;
  }
  case FN_WHERE:
    t = ir_where_type(b->d, e->loc, v[0]->type, v[1]->type, v[2]->type);
    return t == DT_NONE ? NULL : op_node(b, IR_WHERE, e->loc, t, 3, v);
  case FN_CAST: /* from any number or bool (true is 1) */
    return op1(b, IR_CAST, e->loc, fn->cast, v[0]);
  case FN_MASK:
    if (!check_scores(b, "mask", e->args[0], v[0])) return NULL;
    if (v[1]->type != DT_BOOL) {
      diag_error(b->d, e->args[1]->loc, "mask's condition must be bool, got %s",
                 dtype_name(v[1]->type));
      return NULL;
    }
    /* The templates evaluate a condition per key position before (or
     * instead of) computing the tile's scores: it cannot read them. */
    if (node_flags(b, v[1]) & (F_QK | F_PROB)) {
      diag_error(b->d, e->args[1]->loc, "mask's condition is computed from positions, inputs "
                 "and scalars, not from scores; a rule on the score's value is a score "
                 "modification, such as where(s > t, s, -10000.0)");
      return NULL;
    }
    return op2(b, IR_MASK, e->loc, DT_F32, v[0], v[1]);
  case FN_SOFTMAX:
  case FN_LSE: {
    if (!check_scores(b, fn->name, e->args[0], v[0])) return NULL;
    if (e->nargs == 2) {
      if (!check_sink(b, fn->name, e->args[1], v[1])) return NULL;
      if (v[1]->type != DT_F32 && !(v[1] = op1(b, IR_CAST, e->args[1]->loc, DT_F32, v[1])))
        return NULL;
    }
    IrNode *n = e->nargs == 2 ? op_node(b, fn->op, e->loc, DT_F32, 2, v)
                              : op1(b, fn->op, e->loc, DT_F32, v[0]);
    if (n && fn->kind == FN_SOFTMAX) b->flags[n->id] |= F_PROB;
    return n;
  }
  case FN_DROPOUT: {
    if (v[0]->op != IR_SOFTMAX) {
      diag_error(b->d, e->args[0]->loc, "dropout must take the softmax's "
                 "output");
      return NULL;
    }
    bool ok = check_uniform(b, "rate", e->args[1], v[1], false);
    ok &= check_uniform(b, "seed", e->args[2], v[2], true);
    ok &= check_uniform(b, "offset", e->args[3], v[3], true);
    if (!ok) return NULL;
    IrNode *n = op_node(b, IR_DROPOUT, e->loc, DT_F32, 4, v);
    if (n) b->flags[n->id] |= F_PROB;
    return n;
  }
  case FN_PAGED: /* lower_call answers before lowering the arguments */
    return NULL;
  case FN_AMAX:
    if (!ir_is_num(v[0]->type)) {
      diag_error(b->d, e->loc, "'amax' needs a number, got %s",
                 dtype_name(v[0]->type));
      return NULL;
    }
    return op1(b, IR_AMAX, e->loc, DT_F32, v[0]);
  }
  return NULL;
}

static IrNode *lower_call(Builder *b, const AstExpr *e) {
  const FnInfo *fn = ir_find_fn(e->name);
  if (!fn) {
    Binding *x = ib_lookup(b, e->name);
    if (x)
      diag_error(b->d, e->name_loc, "'%s' is %s %s, not a function", e->name,
                 x->kind == BIND_INPUT ? "an" : "a", ib_kind_name(x->kind));
    else
      diag_error(b->d, e->name_loc, "unknown function '%s'", e->name);
    return NULL;
  }
  if (fn->kind == FN_PAGED) {
    if (!strcmp(e->name, "packed"))
      diag_error(b->d, e->loc, "'packed(...)' is a view of packed sequences, read only by q @ "
                 "k^T and p @ v: bind it (q = packed(q_tokens, offsets);) or write it as their "
                 "operand");
    else
      diag_error(b->d, e->loc, "'%s(...)' is a view of a paged cache, read only by q @ k^T and "
                 "p @ v: bind it (k = %s(cache, table);) or write it as their operand", e->name,
                 e->name);
    return NULL;
  }
  /* softmax and logsumexp take an optional sink: softmax(s, sink[h]). */
  bool sinkable = fn->kind == FN_SOFTMAX || fn->kind == FN_LSE;
  if (sinkable && e->nargs != 1 && e->nargs != 2) {
    diag_error(b->d, e->loc, "'%s' takes 1 or 2 arguments (the scores and an optional sink), "
               "got %d", fn->name, e->nargs);
    return NULL;
  }
  if (!sinkable && e->nargs != fn->nargs) {
    diag_error(b->d, e->loc, "'%s' takes %d argument%s, got %d", fn->name,
               fn->nargs, fn->nargs == 1 ? "" : "s", e->nargs);
    return NULL;
  }
  IrNode *v[4] = {0};
  bool ok = true;
  for (int k = 0; k < e->nargs; k++) ok &= (v[k] = ib_lower(b, e->args[k])) != NULL;
  if (!ok) return NULL;
  return lower_call_fn(b, e, fn, v);
}

/* t[e1, ..., en]: one element of an input tensor. A float tensor loads
 * as f32; integer and bool tensors keep their type. */
static IrNode *lower_load(Builder *b, const AstExpr *e) {
  Binding *x = ib_lookup(b, e->name);
  if (!x || x->kind != BIND_INPUT) {
    if (x && x->kind == BIND_LOCAL && !x->node && !x->view) return NULL;
    if (x)
      diag_error(b->d, e->name_loc, "'%s' is %s %s; only input tensors can be "
                 "indexed", e->name, x->kind == BIND_INPUT ? "an" : "a",
                 ib_kind_name(x->kind));
    else
      diag_error(b->d, e->name_loc, "unknown tensor '%s'", e->name);
    return NULL;
  }
  const IrTensor *t = &b->inputs[x->ref];
  if (e->nargs != t->ndims) {
    diag_error(b->d, e->loc, "'%s' has %d dimension%s but %d subscript%s",
               t->name, t->ndims, t->ndims == 1 ? "" : "s", e->nargs,
               e->nargs == 1 ? "" : "s");
    diag_note(b->d, t->loc, "'%s' declared here", t->name);
    return NULL;
  }
  IrNode *s[IR_MAX_SRC] = {0};
  bool ok = true;
  for (int k = 0; k < e->nargs; k++) {
    s[k] = ib_lower(b, e->args[k]);
    if (s[k] && !dtype_is_int(s[k]->type)) {
      diag_error(b->d, e->args[k]->loc, "a subscript must be an integer, got "
                 "%s", dtype_name(s[k]->type));
      s[k] = NULL;
    }
    ok &= s[k] != NULL;
  }
  if (!ok) return NULL;
  IrNode *n = op_node(b, IR_LOAD, e->loc, ir_compute_type(t->type), e->nargs, s);
  if (n) n->ref = x->ref;
  return n;
}

IrNode *ib_lower(Builder *b, const AstExpr *e) {
  if (!e) {
    b->incomplete = true;
    return NULL;
  }
  switch (e->kind) {
  case AST_INT:
    if (e->ival < 0 || e->ival > INT32_MAX)
      return ib_leaf(b, ir_const_int(b->a, e->loc, DT_U64, e->ival));
    return ib_leaf(b, ir_const_int(b->a, e->loc, DT_I32, e->ival));
  case AST_FLOAT: return ib_leaf(b, ir_const_float(b->a, e->loc, e->fval));
  case AST_BOOL: return ib_leaf(b, ir_const_int(b->a, e->loc, DT_BOOL, e->ival != 0));
  case AST_NAME: return lower_name(b, e);
  case AST_UNARY: return lower_unary(b, e);
  case AST_BINARY: return lower_binary(b, e);
  case AST_CALL: return lower_call(b, e);
  case AST_INDEX: return lower_load(b, e);
  case AST_TRANSPOSE:
    diag_error(b->d, e->loc, "'^T' only applies to the right operand of "
               "q @ k^T");
    return NULL;
  case AST_ERROR: b->incomplete = true; return NULL;
  }
  return NULL;
}

/* ------------------------------------------------------------- statements */

static void declare_input(Builder *b, const AstStmt *st) {
  if (!ib_fresh_name(b, st->name, st->name_loc)) return;
  if (!st->has_type || !st->type.has_shape) {
    diag_error(b->d, st->name_loc, "input '%s' needs a shape; a single value "
               "is a scalar", st->name);
    return;
  }
  IrTensor t = {.name = st->name, .loc = st->name_loc, .type = st->type.dtype};
  if (!lower_shape(b, &st->type, &t, "input")) return;
  b->inputs = grow(b->a, b->inputs, b->ninputs, &b->cap_inputs, sizeof t);
  b->inputs[b->ninputs] = t;
  ib_bind(b, st->name, BIND_INPUT, st->name_loc)->ref = b->ninputs++;
}

void ib_declare_scalar(Builder *b, const AstStmt *st) {
  if (!ib_fresh_name(b, st->name, st->name_loc)) return;
  DType t = st->type.dtype;
  if (st->type.has_shape || !(t == DT_F32 || t == DT_I32 || t == DT_U64 ||
                              t == DT_BOOL)) {
    diag_error(b->d, st->type.loc, "a scalar's type must be f32, i32, u64 or "
               "bool");
    return;
  }
  IrScalar s = {.name = st->name, .loc = st->name_loc, .type = t};
  IrConst v;
  if (st->value && ir_fold(b->d, st->value, &v)) {
    bool fits = t == DT_F32 ? ir_is_num(v.t)
              : t == DT_BOOL ? v.t == DT_BOOL
              : dtype_is_int(v.t) && (t != DT_U64 || v.i >= 0) &&
                    (t != DT_I32 || (v.i >= INT32_MIN && v.i <= INT32_MAX));
    if (!fits) {
      diag_error(b->d, st->value->loc, "the default of '%s' must be %s, got "
                 "%s", st->name, dtype_name(t), dtype_name(v.t));
    } else {
      s.has_default = true;
      s.fdefault = ir_const_num(v);
      s.idefault = t == DT_F32 ? 0 : v.i;
    }
  }
  IrGraph *g = b->g;
  g->scalars = grow(b->a, g->scalars, g->nscalars, &b->cap_scalars, sizeof s);
  g->scalars[g->nscalars] = s;
  ib_bind(b, st->name, BIND_SCALAR, st->name_loc)->ref = g->nscalars++;
}

/* Reports why name cannot be assigned, or returns its local (NULL when
 * new). *bad is set after an error. */
static Binding *assign_target(Builder *b, const char *name, Loc loc,
                              bool *bad) {
  *bad = true;
  Binding *x = ib_lookup(b, name);
  if (x && x->kind != BIND_LOCAL) {
    diag_error(b->d, loc, "cannot assign to %s '%s'", ib_kind_name(x->kind),
               name);
    diag_note(b->d, x->loc, "'%s' declared here", name);
    return NULL;
  }
  if (x && x->fixed) {
    diag_error(b->d, loc, "cannot assign to output '%s' after it is defined",
               name);
    diag_note(b->d, x->loc, "'%s' defined here", name);
    return NULL;
  }
  int dim = ib_find_dim(b->g, name);
  if (ib_index_dom(name)) {
    diag_error(b->d, loc, "cannot assign to index '%s'", name);
  } else if (!strcmp(name, "inf") || is_builtin_func(name)) {
    diag_error(b->d, loc, "cannot assign to built-in '%s'", name);
  } else if (dim >= 0) {
    diag_error(b->d, loc, "cannot assign to dimension symbol '%s'", name);
    diag_note(b->d, b->g->dims[dim].loc, "'%s' first appears here", name);
  } else {
    *bad = false;
  }
  return x;
}

/* name = value: a new SSA value, bound to name. Returns the binding. */
static Binding *assign(Builder *b, const char *name, Loc name_loc,
                       const AstExpr *value) {
  bool bad;
  Binding *x = assign_target(b, name, name_loc, &bad);
  if (bad) {
    ib_lower(b, value); /* still report errors inside it */
    return NULL;
  }
  if (value && value->kind == AST_CALL && ir_find_fn(value->name) &&
      ir_find_fn(value->name)->kind == FN_PAGED) {
    const int ref = ib_lower_view(b, value);
    if (!x) x = ib_bind(b, name, BIND_LOCAL, name_loc);
    x->node = NULL; /* a view, or poisoned after an error */
    x->view = ref + 1;
    return x;
  }
  b->defining = x ? NULL : name;
  IrNode *n = ib_lower(b, value);
  b->defining = NULL;
  if (!x) x = ib_bind(b, name, BIND_LOCAL, name_loc);
  x->node = n;
  x->view = 0;
  if (n) n->name = name;
  return x;
}

static void declare_output(Builder *b, const AstStmt *st) {
  for (int k = 0; k < b->nouts; k++) {
    if (!strcmp(b->outs[k].o.name, st->name)) {
      diag_error(b->d, st->name_loc, "redefinition of output '%s'", st->name);
      diag_note(b->d, b->outs[k].o.loc, "'%s' first declared here", st->name);
      return;
    }
  }
  Binding *x = ib_lookup(b, st->name);
  if (x && x->kind != BIND_LOCAL) {
    diag_error(b->d, st->name_loc, "'%s' is already declared as %s %s", st->name,
               x->kind == BIND_INPUT ? "an" : "a", ib_kind_name(x->kind));
    diag_note(b->d, x->loc, "'%s' declared here", st->name);
    return;
  }
  if (!ib_check_new_name(b, st->name, st->name_loc)) return;
  IrTensor t = {.name = st->name, .loc = st->name_loc, .is_output = true,
                .type = DT_NONE, .ndims = -1};
  if (st->has_type) {
    t.type = st->type.dtype;
    if (st->type.has_shape && !lower_shape(b, &st->type, &t, "output")) return;
  }
  IrOutput o = {.name = st->name, .loc = st->name_loc};
  if (st->value) {
    /* Kept even when the value failed (value NULL; finish_graph drops
     * it), so a second `output` of the same name is still caught. */
    Binding *y = assign(b, st->name, st->name_loc, st->value);
    if (y && y->view) {
      diag_error(b->d, st->value->loc, "an output cannot be a paged view; outputs are "
                 "computed values");
      y->view = 0;
    }
    if (y) {
      y->fixed = true;
      y->loc = st->name_loc;
      o.value = y->node;
    }
  }
  b->outs = grow(b->a, b->outs, b->nouts, &b->cap_outs, sizeof *b->outs);
  b->outs[b->nouts++] = (PendingOutput){t, o, st->value != NULL};
}

static void declare_grads(Builder *b, const AstStmt *st) {
  for (int k = 0; k < st->nnames; k++) {
    const char *name = st->names[k];
    Loc loc = st->name_locs[k];
    Binding *x = ib_lookup(b, name);
    if (!x || x->kind != BIND_INPUT) {
      if (x)
        diag_error(b->d, loc, "grad takes inputs; '%s' is a %s", name,
                   ib_kind_name(x->kind));
      else
        diag_error(b->d, loc, "grad takes inputs; '%s' is not a declared "
                   "input", name);
      continue;
    }
    IrTensor *t = &b->inputs[x->ref];
    if (!dtype_is_float(t->type)) {
      diag_error(b->d, loc, "'%s' is %s; only float inputs have gradients",
                 name, dtype_name(t->type));
      continue;
    }
    if (t->grad) {
      diag_error(b->d, loc, "'%s' is named twice in grad", name);
      diag_note(b->d, x->grad_loc, "first named here");
      continue;
    }
    t->grad = true;
    x->grad_loc = loc;
  }
}

/* Outputs declared without a value name a local's final value. */
static void resolve_outputs(Builder *b) {
  for (int k = 0; k < b->nouts; k++) {
    IrOutput *o = &b->outs[k].o;
    if (b->outs[k].in_place) continue;
    Binding *x = ib_lookup(b, o->name);
    if (!x) {
      diag_error(b->d, o->loc, "output '%s' is never defined", o->name);
      continue;
    }
    if (x->kind == BIND_LOCAL && x->view)
      diag_error(b->d, o->loc, "output '%s' is a paged view; outputs are computed values",
                 o->name);
    o->value = x->node; /* NULL if poisoned: already reported */
  }
}

static void finish_graph(Builder *b) {
  IrGraph *g = b->g;
  resolve_outputs(b);
  g->nodes = b->nodes;
  g->ntensors = b->ninputs + b->nouts;
  g->tensors = arena_alloc(b->a, (size_t)(g->ntensors + 1) * sizeof *g->tensors);
  if (b->ninputs)
    memcpy(g->tensors, b->inputs, (size_t)b->ninputs * sizeof *g->tensors);
  g->outputs = arena_alloc(b->a, (size_t)(b->nouts + 1) * sizeof *g->outputs);
  for (int k = 0; k < b->nouts; k++) {
    g->tensors[b->ninputs + k] = b->outs[k].t;
    if (!b->outs[k].o.value) continue; /* reported */
    g->outputs[g->noutputs] = b->outs[k].o;
    g->outputs[g->noutputs++].tensor = b->ninputs + k;
  }
  g->q = g->k = g->v = -1;
  /* Whole-graph checks only make sense on a graph that lowered cleanly
   * from a whole AST. */
  if (b->d->nerrors == b->graph_errors && !b->incomplete)
    ir_check_graph(g, b->d);
}

static IrGraph *build_graph(Arena *a, Diag *d, const AstGraph *ag) {
  Builder b = {.a = a, .d = d, .graph_errors = d->nerrors};
  const AstStmt *block = NULL, *second = NULL;
  IrGraph *g = arena_alloc(a, sizeof *g);
  g->name = ag->name;
  g->loc = ag->loc;
  b.g = g;
  for (int k = 0; k < ag->nstmts; k++) {
    const AstStmt *st = ag->stmts[k];
    if (!st || (!st->name && st->kind != STMT_GRAD)) {
      b.incomplete = true;
      continue;
    }
    switch (st->kind) {
    case STMT_INPUT: declare_input(&b, st); break;
    case STMT_SCALAR: ib_declare_scalar(&b, st); break;
    case STMT_ASSIGN: assign(&b, st->name, st->name_loc, st->value); break;
    case STMT_OUTPUT: declare_output(&b, st); break;
    case STMT_GRAD:
      declare_grads(&b, st);
      if (st->has_block && !block) block = st;
      else if (st->has_block && !second) second = st;
      break;
    }
  }
  finish_graph(&b);
  /* The block speaks of the forward's landmarks (o, the softmax's input,
   * q, k, v), known once the whole forward is checked. */
  if (d->nerrors == b.graph_errors && !b.incomplete) ib_grad_block(&b, block);
  if (second) {
    diag_error(d, second->loc, "a graph has one grad block");
    diag_note(d, block->loc, "the first is here");
    g->grad = NULL;
  }
  return g;
}

/* Graphs by name, open addressing: a file of many graphs must check in
 * linear time (a linear search per graph made 17k graphs take seconds). */
typedef struct GraphTable {
  IrGraph **slot;
  size_t mask;
} GraphTable;

static size_t graph_name_hash(const char *s) {
  size_t h = 1469598103934665603u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211u;
  return h;
}

/* The graph already named `name`, or NULL after remembering `g` under it. */
static IrGraph *graph_table_find(GraphTable *t, const char *name) {
  size_t k = graph_name_hash(name) & t->mask;
  for (; t->slot[k]; k = (k + 1) & t->mask)
    if (!strcmp(t->slot[k]->name, name)) return t->slot[k];
  return NULL;
}

static void graph_table_add(GraphTable *t, IrGraph *g) {
  size_t k = graph_name_hash(g->name) & t->mask;
  while (t->slot[k]) k = (k + 1) & t->mask;
  t->slot[k] = g;
}

IrModule *ir_build(const AstFile *ast, Arena *a, Diag *d) {
  IrModule *m = arena_alloc(a, sizeof *m);
  GraphTable names = {0};
  size_t cap = 8;
  while (cap < 2 * (size_t)ast->ngraphs) cap *= 2;
  names.slot = arena_alloc(a, cap * sizeof *names.slot);
  names.mask = cap - 1;
  m->src = ast->src;
  m->graphs = arena_alloc(a, (size_t)(ast->ngraphs + 1) * sizeof *m->graphs);
  if (ast->ngraphs == 0) {
    Loc top = {.src = ast->src, .line = 1, .col = 1, .len = 1};
    diag_error(d, top, "no attention graph in %s",
               ast->src ? ast->src->name : "the input");
  }
  for (int k = 0; k < ast->ngraphs; k++) {
    const AstGraph *ag = ast->graphs[k];
    if (!ag || !ag->name) continue;
    IrGraph *dup = graph_table_find(&names, ag->name);
    if (dup) {
      diag_error(d, ag->loc, "redefinition of graph '%s'", ag->name);
      diag_note(d, dup->loc, "'%s' first defined here", ag->name);
      continue;
    }
    IrGraph *g = build_graph(a, d, ag);
    m->graphs[m->ngraphs++] = g;
    if (g && g->name) graph_table_add(&names, g);
  }
  return d->nerrors ? NULL : m;
}
