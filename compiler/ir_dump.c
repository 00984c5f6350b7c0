/*
 * ir_dump.c: the IR as text (a golden format: keep it stable) and as a
 * Graphviz digraph.
 *
 * The text format, one item per line:
 *
 *   graph NAME  # FILE:LINE:COL
 *     dims B H Sq Hk Skv                   symbols in first-appearance order
 *     input q : bf16[B, H, Sq, 128]         tensors; "grad" when declared
 *     scalar scale : f32 = 0.088            scalars; "= V" when defaulted
 *     %3 = matmul_qk %1, %2 : f32 [bhij]  # 7:8 s
 *     output o = %9 : bf16[B, H, Sq, 128]
 *
 * A node line is `%ID = OP OPERANDS : TYPE [AXES]  # LINE:COL NAME`, where
 * OPERANDS are other nodes (%ID) except for leaves: a constant's value, a
 * scalar's, dim's or input's name, an index's letter, and a load's tensor
 * name before its subscripts. AXES are the domain's letters from bhijd.
 * NAME is the last local bound to the value. Nodes that no output
 * reaches end in "dead": they are kept (the IR is exactly what was
 * written) but later passes ignore them. Floats print in the shortest
 * form that reads back exactly, always with a '.' or exponent.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"

static void put_float(StrBuf *out, double v) {
  if (isinf(v)) {
    sb_puts(out, v < 0 ? "-inf" : "inf");
    return;
  }
  if (isnan(v)) {
    sb_puts(out, "nan");
    return;
  }
  char buf[40];
  if (v == floor(v) && fabs(v) < 1e15) {
    snprintf(buf, sizeof buf, "%.1f", v); /* 50.0, not 5e+01 */
    sb_puts(out, buf);
    return;
  }
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  sb_puts(out, buf);
  if (!strpbrk(buf, ".e")) sb_puts(out, ".0");
}

static void put_shape(StrBuf *out, const IrGraph *g, const IrTensor *t) {
  sb_printf(out, "%s[", dtype_name(t->type));
  for (int k = 0; k < t->ndims; k++) {
    if (k) sb_puts(out, ", ");
    if (t->dim_sym[k] >= 0) sb_puts(out, g->dims[t->dim_sym[k]].name);
    else sb_printf(out, "%lld", (long long)t->dim_val[k]);
  }
  sb_putc(out, ']');
}

static void put_scalar_value(StrBuf *out, const IrScalar *s) {
  if (s->type == DT_F32) put_float(out, s->fdefault);
  else if (s->type == DT_BOOL) sb_puts(out, s->idefault ? "true" : "false");
  else if (s->type == DT_U64)
    sb_printf(out, "%llu", (unsigned long long)s->idefault);
  else sb_printf(out, "%lld", (long long)s->idefault);
}

/* live[k]: whether an output reaches node k. Nodes are in topological
 * order, so one backward sweep suffices. */
static bool *live_nodes(const IrGraph *g) {
  bool *live = mem_calloc((size_t)g->nnodes + 1, 1);
  if (!live) mem_oom();
  for (int k = 0; k < g->noutputs; k++)
    if (g->outputs[k].value) live[g->outputs[k].value->id] = true;
  for (int k = g->nnodes - 1; k >= 0; k--)
    if (live[k])
      for (int s = 0; s < g->nodes[k]->nsrc; s++)
        live[g->nodes[k]->src[s]->id] = true;
  return live;
}

static void put_leaf(StrBuf *out, const IrGraph *g, const IrNode *n) {
  static const char *const index_names[] = {"b", "h", "i", "j"};
  switch (n->op) {
  case IR_CONST:
    if (n->type == DT_F32) put_float(out, n->fval);
    else if (n->type == DT_BOOL) sb_puts(out, n->ival ? "true" : "false");
    else if (n->type == DT_U64)
      sb_printf(out, "%llu", (unsigned long long)n->ival);
    else sb_printf(out, "%lld", (long long)n->ival);
    break;
  case IR_SCALAR: sb_puts(out, g->scalars[n->ref].name); break;
  case IR_DIM:
    sb_puts(out, n->ref == IR_SEQLEN_Q ? "seqlen_q" : n->ref == IR_SEQLEN_K ? "seqlen_k"
                                                                          : g->dims[n->ref].name);
    break;
  case IR_INDEX:
    for (int k = 0; k < 4; k++)
      if (n->ival == (1 << k)) sb_puts(out, index_names[k]);
    break;
  case IR_INPUT: /* a grad block's gradients are leaves of no tensor (ref -1) */
    sb_puts(out, n->ref < 0 ? n->name : g->tensors[n->ref].name);
    break;
  case IR_LOAD: sb_puts(out, g->tensors[n->ref].name); break;
  default: break;
  }
}

/* One node as `%ID = op operands : type [axes]  # line:col name`; a grad
 * block's nodes are numbered apart, as &ID. */
static void put_node(StrBuf *out, const IrGraph *g, const IrNode *n, bool live, char mark) {
  char axes[8];
  sb_printf(out, "  %c%d = %s", mark, n->id, ir_op_name(n->op));
  bool leafy = n->op == IR_CONST || n->op == IR_SCALAR || n->op == IR_DIM ||
               n->op == IR_INDEX || n->op == IR_INPUT || n->op == IR_LOAD;
  if (leafy) {
    sb_putc(out, ' ');
    put_leaf(out, g, n);
  }
  for (int k = 0; k < n->nsrc; k++)
    sb_printf(out, "%s%c%d", k || leafy ? ", " : " ", mark, n->src[k]->id);
  sb_printf(out, " : %s [%s]  # %d:%d", dtype_name(n->type),
            ir_dom_letters(n->dom, axes), n->loc.line, n->loc.col);
  if (n->name) sb_printf(out, " %s", n->name);
  if (!live) sb_puts(out, " dead");
  sb_putc(out, '\n');
}

void ir_dump(StrBuf *out, const IrGraph *g) {
  sb_printf(out, "graph %s  # %s:%d:%d\n", g->name,
            g->loc.src ? g->loc.src->name : "?", g->loc.line, g->loc.col);
  sb_puts(out, "  dims");
  for (int k = 0; k < g->ndims; k++) sb_printf(out, " %s", g->dims[k].name);
  sb_putc(out, '\n');
  for (int k = 0; k < g->ntensors; k++) {
    const IrTensor *t = &g->tensors[k];
    sb_printf(out, "  %s %s : ", t->is_output ? "output" : "input", t->name);
    put_shape(out, g, t);
    if (t->grad) sb_puts(out, " grad");
    if (t->paged)
      sb_printf(out, " %s by %s", t->paged_hnd ? "paged_hnd" : "paged",
                g->tensors[t->page_table].name);
    if (t->packed) sb_printf(out, " packed by %s", g->tensors[t->seq_offsets].name);
    sb_putc(out, '\n');
  }
  for (int k = 0; k < g->nscalars; k++) {
    const IrScalar *s = &g->scalars[k];
    sb_printf(out, "  scalar %s : %s", s->name, dtype_name(s->type));
    if (s->has_default) {
      sb_puts(out, " = ");
      put_scalar_value(out, s);
    }
    sb_putc(out, '\n');
  }
  bool *live = live_nodes(g);
  for (int k = 0; k < g->nnodes; k++) put_node(out, g, g->nodes[k], live[k], '%');
  mem_free(live);
  for (int k = 0; k < g->noutputs; k++) {
    const IrOutput *o = &g->outputs[k];
    sb_printf(out, "  output %s = %%%d : ", o->name, o->value->id);
    put_shape(out, g, &g->tensors[o->tensor]);
    sb_putc(out, '\n');
  }
  if (g->grad) ir_dump_grad(out, g);
  sb_putc(out, '\n');
}

void ir_dump_grad(StrBuf *out, const IrGraph *g) {
  static const char *const what[IR_GRAD_N] = {"given", "into dq, dk", "stored", "stored",
                                              "stored"};
  const IrGradBlock *gb = g->grad;
  sb_printf(out, "  grad block  # %d:%d\n", gb->loc.line, gb->loc.col);
  for (int k = 0; k < gb->nnodes; k++) put_node(out, g, gb->nodes[k], true, '&');
  for (int k = 0; k < IR_GRAD_N; k++) {
    const IrGradValue *v = &gb->v[k];
    if (!v->leaf) continue;
    sb_printf(out, "  %s = &%d", v->leaf->name, v->value->id);
    if (v->type != DT_NONE) sb_printf(out, " : %s", dtype_name(v->type));
    sb_printf(out, " %s  # %d:%d\n", what[k], v->loc.line, v->loc.col);
  }
  for (int k = 0; k < gb->namax; k++)
    sb_printf(out, "  output %s = amax(&%d) : f32[1]  # %d:%d\n", gb->amax[k].name,
              gb->amax[k].value->id, gb->amax[k].loc.line, gb->amax[k].loc.col);
}

/* Graphviz: one box per node labelled "%ID op [name]" and its line, edges
 * from operand to user, outputs as ellipses. Names are identifiers, so
 * labels need no escaping beyond what we write. */
void ir_dot(StrBuf *out, const IrGraph *g) {
  sb_printf(out, "digraph \"%s\" {\n", g->name);
  sb_puts(out, "  node [shape=box, fontname=\"monospace\"];\n");
  bool *live = live_nodes(g);
  for (int k = 0; k < g->nnodes; k++) {
    const IrNode *n = g->nodes[k];
    sb_printf(out, "  n%d [label=\"%%%d %s", n->id, n->id, ir_op_name(n->op));
    bool leafy = n->op == IR_CONST || n->op == IR_SCALAR || n->op == IR_DIM ||
                 n->op == IR_INDEX || n->op == IR_INPUT || n->op == IR_LOAD;
    if (leafy) {
      sb_putc(out, ' ');
      put_leaf(out, g, n);
    }
    if (n->name) sb_printf(out, " (%s)", n->name);
    sb_printf(out, "\\nline %d\"%s];\n", n->loc.line,
              live[k] ? "" : ", style=dashed");
  }
  mem_free(live);
  for (int k = 0; k < g->nnodes; k++) {
    const IrNode *n = g->nodes[k];
    for (int s = 0; s < n->nsrc; s++)
      sb_printf(out, "  n%d -> n%d;\n", n->src[s]->id, n->id);
  }
  for (int k = 0; k < g->noutputs; k++) {
    const IrOutput *o = &g->outputs[k];
    sb_printf(out, "  out%d [shape=ellipse, label=\"output %s\"];\n", k,
              o->name);
    sb_printf(out, "  n%d -> out%d;\n", o->value->id, k);
  }
  sb_puts(out, "}\n");
}
