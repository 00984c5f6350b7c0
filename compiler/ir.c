/*
 * ir.c: the IR's tables and tiny constructors.
 *
 * The op names and arities come from attnc.h's structural tables and
 * ops.def's rows; the static_assert keeps this file's copy the same length
 * as the enum, so an op added there without a name here fails to compile.
 */
#include <string.h>

#include "attnc.h"

static const char *const ir_names[] = {
#define X(e, s, n) s,
#define OP(e, ir, fn, n, ...) ir,
    IR_OPS_LEAVES(X)
#include "ops.def"
    IR_OPS_REDUCTIONS(X)
#undef OP
#undef X
};

static const signed char ir_arities[] = {
#define X(e, s, n) n,
#define OP(e, ir, fn, n, ...) n,
    IR_OPS_LEAVES(X)
#include "ops.def"
    IR_OPS_REDUCTIONS(X)
#undef OP
#undef X
};

_Static_assert(sizeof ir_names / sizeof ir_names[0] == IR_OP_COUNT,
               "ir_names must list every IrOp");
_Static_assert(sizeof ir_arities == IR_OP_COUNT,
               "ir_arities must list every IrOp");

const char *ir_op_name(IrOp op) {
  if ((unsigned)op >= IR_OP_COUNT) die("bad IrOp %d", (int)op);
  return ir_names[op];
}

int ir_op_arity(IrOp op) {
  if ((unsigned)op >= IR_OP_COUNT) die("bad IrOp %d", (int)op);
  return ir_arities[op];
}

IrNode *ir_node(Arena *a, IrOp op, Loc loc, DType type, unsigned dom,
                int nsrc, IrNode *const *src) {
  int arity = ir_op_arity(op);
  if (nsrc < 0 || nsrc > IR_MAX_SRC || (arity >= 0 && nsrc != arity))
    die("%s takes %d operands, got %d", ir_op_name(op), arity, nsrc);
  IrNode *n = arena_alloc(a, sizeof *n);
  n->op = op;
  n->id = -1;
  n->loc = loc;
  n->type = type;
  n->dom = dom;
  n->ref = -1;
  n->nsrc = nsrc;
  for (int k = 0; k < nsrc; k++) {
    if (!src[k]) die("%s: operand %d is NULL", ir_op_name(op), k);
    n->src[k] = src[k];
  }
  return n;
}

IrNode *ir_const_float(Arena *a, Loc loc, double v) {
  IrNode *n = ir_node(a, IR_CONST, loc, DT_F32, 0, 0, NULL);
  n->fval = v;
  return n;
}

IrNode *ir_const_int(Arena *a, Loc loc, DType type, int64_t v) {
  IrNode *n = ir_node(a, IR_CONST, loc, type, 0, 0, NULL);
  n->ival = v;
  n->fval = (double)v;
  return n;
}

IrGraph *ir_find_graph(const IrModule *m, const char *name) {
  for (int k = 0; k < m->ngraphs; k++)
    if (!strcmp(m->graphs[k]->name, name)) return m->graphs[k];
  return NULL;
}

const char *ir_dom_letters(unsigned dom, char buf[8]) {
  static const char letters[] = "bhijd";
  int n = 0;
  for (int k = 0; k < 5; k++)
    if (dom & (1u << k)) buf[n++] = letters[k];
  buf[n] = '\0';
  return buf;
}

IrKvDim ir_kv_dim(const IrGraph *g, int tensor, int role) {
  const IrTensor *t = &g->tensors[tensor];
  if (t->packed) {
    switch (role) {
    case 0: return (IrKvDim){t->seq_offsets, 0};
    case 1: return (IrKvDim){tensor, 1};
    case 2: return (IrKvDim){-1, -1};
    default: return (IrKvDim){tensor, 2};
    }
  }
  if (!t->paged) return (IrKvDim){tensor, role};
  switch (role) {
  case 0: return (IrKvDim){t->page_table, 0};
  case 1: return (IrKvDim){tensor, t->paged_hnd ? 1 : 2};
  case 2: return (IrKvDim){-1, -1};
  default: return (IrKvDim){tensor, 3};
  }
}

/* A rounding cast (e4m3, e5m2, bf16, f16), not f32's no-op. */
static bool is_round(const IrNode *n) { return n->op == IR_CAST && n->type != DT_F32; }
static IrNode *skip_f32(IrNode *n) {
  while (n->op == IR_CAST && n->type == DT_F32) n = n->src[0];
  return n;
}

IrPChain ir_p_chain(const IrGraph *g) {
  IrPChain c = {NULL, NULL, NULL, NULL};
  IrNode *x = skip_f32(g->pv->src[0]);
  if (is_round(x)) {
    c.round = x;
    x = skip_f32(x->src[0]);
  }
  if (x->op == IR_MUL) { /* P's side varies over j; the scale does not */
    const int k = (x->src[0]->dom & DOM_J) ? 0 : 1;
    c.scale = x->src[1 - k];
    x = skip_f32(x->src[k]);
  }
  if (x->op == IR_DROPOUT) {
    c.dropout = x;
    x = skip_f32(x->src[0]);
  }
  if (x != g->softmax) c.bad = x;
  return c;
}

bool ir_scales(const IrNode *n, const IrNode *base, unsigned varies) {
  if (n == base) return true;
  if (n->op == IR_MUL)
    return (!(n->src[1]->dom & varies) && ir_scales(n->src[0], base, varies)) ||
           (!(n->src[0]->dom & varies) && ir_scales(n->src[1], base, varies));
  return n->op == IR_DIV && !(n->src[1]->dom & varies) && ir_scales(n->src[0], base, varies);
}

int ir_attention_output(const IrGraph *g) {
  for (int k = 0; g->pv && k < g->noutputs; k++)
    if ((g->outputs[k].value->dom & DOM_D) &&
        ir_scales(g->outputs[k].value, g->pv, DOM_I | DOM_J | DOM_D))
      return k;
  return -1;
}
