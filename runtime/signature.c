/* signature.c: a graph's signature for bindings in other languages
 * (python/attnc): its tensors in binding order, then its scalars, read off
 * the checked IR and, for the backward's tensors, off bwd_slots, the same
 * assignment bind.c and the kernels use, so a binding that allocates what
 * these describe binds exactly what a launch checks.
 *
 * Tensor indices: 0 .. ntensors-1 are the graph's inputs and outputs as
 * declared; when the graph has a GPU backward, dO follows, then dq, dk, dv
 * (those declared with grad), each bias gradient, in slot order, and a
 * grad block's amax outputs. */
#include <stdio.h>
#include <string.h>

#include "rt.h"

const char *attn_graph_name(const attn_graph *g) { return g ? g->ir->name : ""; }

int attn_graph_has_backward(const attn_graph *g, char *why, size_t len) {
  char buf[512];
  if (!g) {
    if (why && len) snprintf(why, len, "graph is NULL");
    return 0;
  }
  BwdSlots sl;
  if (rt_backward_supported(g, &sl, buf, sizeof buf)) return 1;
  if (why && len) snprintf(why, len, "%s", buf);
  return 0;
}

/* The backward's tensors after the graph's own, each with the tensor it
 * takes its dimensions from. Returns how many (at most GRAD_TENSORS_MAX);
 * 0 without a GPU backward. */
typedef struct GradTensor {
  int of;         /* the tensor whose gradient it is; -1: an amax output */
  bool is_dout;   /* dO: read */
  int amax;       /* the grad block's amax output, or -1 */
} GradTensor;
#define GRAD_TENSORS_MAX (4 + BWD_MAX_BIAS + BWD_MAX_AMAX)

static int grad_tensors(const attn_graph *gr, GradTensor *out) {
  char why[8];
  BwdSlots sl;
  if (!rt_backward_supported(gr, &sl, why, sizeof why)) return 0;
  const IrGraph *g = gr->ir;
  int n = 0;
  out[n++] = (GradTensor){sl.o, true, -1};
  const int qkv[3] = {g->q, g->k, g->v}, slot[3] = {sl.dq, sl.dk, sl.dv};
  for (int r = 0; r < 3; r++)
    if (slot[r] >= 0) out[n++] = (GradTensor){qkv[r], false, -1};
  for (int r = 0; r < sl.nbias; r++) out[n++] = (GradTensor){sl.bias[r], false, -1};
  for (int r = 0; r < sl.namax; r++) out[n++] = (GradTensor){-1, false, r};
  return n;
}

int attn_graph_tensor_count(const attn_graph *g) {
  if (!g) return 0;
  GradTensor gt[GRAD_TENSORS_MAX];
  return g->ir->ntensors + grad_tensors(g, gt);
}

static void fill_dims(const IrGraph *g, const IrTensor *t, attn_tensor_info *out) {
  out->ndim = t->ndims;
  for (int d = 0; d < IR_MAX_RANK; d++) {
    bool sym = d < t->ndims && t->dim_sym[d] >= 0;
    out->dim_name[d] = sym ? g->dims[t->dim_sym[d]].name : NULL;
    out->dim_size[d] = d >= t->ndims ? 0 : sym ? -1 : t->dim_val[d];
  }
}

static attn_status graph_tensor_impl(const attn_graph *gr, int index, attn_tensor_info *out) {
  rt_clear_error(gr->m->ctx);
  const IrGraph *g = gr->ir;
  GradTensor gt[GRAD_TENSORS_MAX];
  int ngrad = grad_tensors(gr, gt);
  if (index < 0 || index >= g->ntensors + ngrad)
    return rt_fail(gr->m->ctx, ATTN_ERROR_NOT_FOUND,
                   "graph '%s' has %d tensors; there is no tensor %d", g->name,
                   g->ntensors + ngrad, index);
  memset(out, 0, sizeof *out);
  BwdSlots sl;
  bwd_slots(g, &sl);
  if (index < g->ntensors) {
    const IrTensor *t = &g->tensors[index];
    out->name = t->name;
    out->role = t->is_output ? ATTN_ROLE_OUTPUT : ATTN_ROLE_INPUT;
    out->dtype = (attn_dtype)t->type;
    out->grad = t->grad;
    out->of = -1;
    out->operand = index == g->q ? 'q' : index == g->k ? 'k' : index == g->v ? 'v' : 0;
    out->attention_output = index == sl.o;
    out->lse = index == sl.lse;
    fill_dims(g, t, out);
    return ATTN_SUCCESS;
  }
  /* The name bind.c resolves ("d" + the name), kept on the graph so it
   * lives as long as the module. */
  const int r = index - g->ntensors;
  const GradTensor *t = &gt[r];
  if (t->amax >= 0) { /* a grad block's amax: f32[1] */
    out->name = g->grad->amax[t->amax].name;
    out->role = ATTN_ROLE_GRAD_OUTPUT;
    out->dtype = ATTN_F32;
    out->of = -1;
    out->ndim = 1;
    out->dim_size[0] = 1;
    for (int d = 1; d < IR_MAX_RANK; d++) out->dim_size[d] = 0;
    return ATTN_SUCCESS;
  }
  const IrTensor *of = &g->tensors[t->of];
  attn_graph *mut = (attn_graph *)gr; /* the name cache only */
  if (!mut->grad_name[r]) {
    size_t len = strlen(of->name);
    char *name = mem_alloc(len + 2);
    if (!name) return rt_fail(gr->m->ctx, ATTN_ERROR_OUT_OF_MEMORY, "out of memory");
    name[0] = 'd';
    memcpy(name + 1, of->name, len + 1);
    mut->grad_name[r] = name;
  }
  const char *name = mut->grad_name[r];
  out->name = name;
  out->role = t->is_dout ? ATTN_ROLE_GRAD_INPUT : ATTN_ROLE_GRAD_OUTPUT;
  out->dtype = (attn_dtype)(t->is_dout ? bwd_grad_type(g, IR_GRAD_DO)
                                        : bwd_tensor_grad_type(g, t->of));
  out->of = t->of;
  fill_dims(g, of, out);
  return ATTN_SUCCESS;
}

int attn_graph_scalar_count(const attn_graph *g) { return g ? g->ir->nscalars : 0; }

static attn_status graph_scalar_impl(const attn_graph *gr, int index, attn_scalar_info *out) {
  rt_clear_error(gr->m->ctx);
  const IrGraph *g = gr->ir;
  if (index < 0 || index >= g->nscalars)
    return rt_fail(gr->m->ctx, ATTN_ERROR_NOT_FOUND,
                   "graph '%s' has %d scalars; there is no scalar %d", g->name, g->nscalars,
                   index);
  const IrScalar *s = &g->scalars[index];
  *out = (attn_scalar_info){
      .name = s->name,
      .dtype = (attn_dtype)s->type,
      .has_default = s->has_default,
      .default_float = s->type == DT_F32 ? s->fdefault : 0.0,
      .default_int = s->type == DT_F32 ? 0 : s->idefault,
  };
  return ATTN_SUCCESS;
}

attn_status attn_graph_tensor(const attn_graph *g, int index, attn_tensor_info *out) {
  if (!g) return ATTN_ERROR_INVALID_ARGUMENT;
  if (!out) return rt_fail(g->m->ctx, ATTN_ERROR_INVALID_ARGUMENT, "attn_graph_tensor: out is NULL");
  RT_CALL(g->m->ctx, graph_tensor_impl(g, index, out));
}

attn_status attn_graph_scalar(const attn_graph *g, int index, attn_scalar_info *out) {
  if (!g) return ATTN_ERROR_INVALID_ARGUMENT;
  if (!out) return rt_fail(g->m->ctx, ATTN_ERROR_INVALID_ARGUMENT, "attn_graph_scalar: out is NULL");
  RT_CALL(g->m->ctx, graph_scalar_impl(g, index, out));
}
