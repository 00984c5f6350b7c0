/*
 * ir_build.h: what ir_build.c (AST -> IR) shares with ir_views.c (the
 * tensor views: paged caches, packed sequences, inputs read whole by a
 * matmul). Private to the compiler's IR builder.
 */
#ifndef ATTNC_IR_BUILD_H
#define ATTNC_IR_BUILD_H

#include "attnc.h"

enum { F_QK = 1, F_PV = 2, F_PROB = 4 };
enum { BIND_INPUT, BIND_SCALAR, BIND_LOCAL };

typedef struct Binding {
  const char *name;
  int kind;
  Loc loc;       /* where it was declared or first assigned */
  int ref;       /* tensor or scalar index */
  IrNode *node;  /* a local's current value; NULL when poisoned */
  bool fixed;    /* bound by `output x = ...`: cannot be reassigned */
  Loc grad_loc;  /* an input's first mention in grad */
  int view;      /* a local bound to a view (paged, packed): the tensor's index + 1 */
  bool whole;    /* an input read whole (dense) by a matmul */
  Loc whole_loc;
  bool grad;     /* a gradient named by the grad block (ds, dq, ...) */
} Binding;

/* An output as declared; its value is known at the end of the graph. */
typedef struct PendingOutput {
  IrTensor t;
  IrOutput o;
  bool in_place; /* output x = value; */
} PendingOutput;

typedef struct Builder {
  Arena *a;
  Diag *d;
  IrGraph *g;
  Binding *binds;
  int nbinds, cap_binds;
  IrNode **nodes;
  unsigned char *flags; /* by node id */
  int cap_nodes;
  int cap_dims, cap_scalars;
  IrTensor *inputs;
  int ninputs, cap_inputs;
  PendingOutput *outs; /* appended after the inputs at the end */
  int nouts, cap_outs;
  const char *defining; /* the name being assigned, while it is unbound */
  int graph_errors;     /* d->nerrors when the graph started */
  bool incomplete;      /* the parser left holes (AST_ERROR, NULL) */
  bool grad_block;      /* lowering the grad block: its nodes are its own */
} Builder;

/* DOM_B..DOM_J for the index names b h i j, else 0. */
unsigned ib_index_dom(const char *name);
/* The binding of a name in the graph being built, or NULL. */
Binding *ib_lookup(Builder *b, const char *name);
/* A dimension symbol's index in g, or -1. */
int ib_find_dim(const IrGraph *g, const char *name);

IrNode *ib_lower(Builder *b, const AstExpr *e);
IrNode *ib_leaf(Builder *b, IrNode *n); /* numbers a node with no operands */
Binding *ib_bind(Builder *b, const char *name, int kind, Loc loc);
/* Rejects a declared name that is built in or is a dimension symbol. */
bool ib_check_new_name(Builder *b, const char *name, Loc loc);
const char *ib_kind_name(int kind); /* "input", "scalar", "local" */
/* ib_check_new_name, and no binding of that name yet (else "redefinition"). */
bool ib_fresh_name(Builder *b, const char *name, Loc loc);
void ib_declare_scalar(Builder *b, const AstStmt *st);
/* ir_grad.c: the graph's `grad ... { }` block (NULL: none) into g->grad,
 * after the forward is built and checked. */
void ib_grad_block(Builder *b, const AstStmt *st);

/* ir_views.c: a view named by a call (paged, paged_hnd, packed), and a
 * matmul operand named whole (or a view of one); tensor indices, or -1
 * after a reported error. */
int ib_lower_view(Builder *b, const AstExpr *e);
int ib_whole_input(Builder *b, const AstExpr *e, const char *role, bool view_ok);

#endif
