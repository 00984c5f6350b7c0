/* bind.c: checks each tensor and scalar the caller binds against the IR
 * graph and fills the kernel's parameter block.
 *
 * Every check happens when the binding arrives, so the message can name
 * the tensor, the dimension and both values; a failed bind leaves the
 * previous binding of that name untouched. A launch then only has to check
 * completeness (bind_finish). The kernels trust the parameter block
 * completely, so anything that could make them read out of bounds or
 * misaligned is refused here. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "rt.h"

_Static_assert((int)ATTN_F16 == DT_F16 && (int)ATTN_BF16 == DT_BF16 &&
                   (int)ATTN_F32 == DT_F32 && (int)ATTN_E4M3 == DT_E4M3 &&
                   (int)ATTN_E5M2 == DT_E5M2 && (int)ATTN_I32 == DT_I32 &&
                   (int)ATTN_U64 == DT_U64 && (int)ATTN_BOOL == DT_BOOL,
               "attn_dtype and DType must agree");
_Static_assert(IR_MAX_RANK == 4, "attn_tensor_arg holds four dims");

/* The tensor slots the kernels read or write with 16-byte vectors: q, k,
 * v, the 4-D outputs and a packed graph's 3-D ones ([tokens, heads, cols]:
 * fwd_sm90 stores a 16-bit one by TMA boxes and 16-byte bulk copies). */
static bool bind_is_vector_tensor(const IrGraph *g, int t) {
  if (t >= g->ntensors) { /* the backward's dO, dq, dk, dv; not bias gradients or amax */
    BwdSlots sl;
    bwd_slots(g, &sl);
    for (int r = 0; r < sl.nbias; r++)
      if (t == sl.dbias[r]) return false;
    for (int r = 0; r < sl.namax; r++)
      if (t == sl.amax[r]) return false;
    return true;
  }
  if (t == g->q || t == g->k || t == g->v) return true;
  return g->tensors[t].is_output &&
         (g->tensors[t].ndims == 4 || (g->tensors[t].ndims == 3 && ir_packed(g)));
}

void bind_init(BindState *b, const IrGraph *g) {
  memset(b, 0, sizeof *b);
  b->g = g;
  for (int t = 0; t < ATTN_MAX_TENSORS; t++)
    for (int i = 0; i < 4; i++) b->params.t[t].size[i] = 1;
}

static int bind_find_tensor(const IrGraph *g, const char *name) {
  for (int i = 0; i < g->ntensors; i++)
    if (strcmp(g->tensors[i].name, name) == 0) return i;
  return -1;
}

static int bind_find_scalar(const IrGraph *g, const char *name) {
  for (int i = 0; i < g->nscalars; i++)
    if (strcmp(g->scalars[i].name, name) == 0) return i;
  return -1;
}

static void bind_list_names(const IrGraph *g, bool tensors, StrBuf *err) {
  int n = tensors ? g->ntensors : g->nscalars;
  sb_printf(err, " (its %s:", tensors ? "tensors" : "scalars");
  for (int i = 0; i < n; i++)
    sb_printf(err, "%s %s", i ? "," : "",
              tensors ? g->tensors[i].name : g->scalars[i].name);
  sb_puts(err, n ? ")" : " none)");
}

/* NOT_FOUND for a name the graph lacks; INVALID_ARGUMENT for a scalar
 * bound as a tensor or the reverse. */
static attn_status bind_unknown(const IrGraph *g, const char *name,
                                bool want_tensor, StrBuf *err) {
  if (want_tensor && bind_find_scalar(g, name) >= 0) {
    sb_printf(err, "graph '%s': '%s' is a scalar, not a tensor", g->name,
              name);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  if (!want_tensor && bind_find_tensor(g, name) >= 0) {
    sb_printf(err, "graph '%s': '%s' is a tensor, not a scalar", g->name,
              name);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  sb_printf(err, "graph '%s' has no %s named '%s'", g->name,
            want_tensor ? "tensor" : "scalar", name);
  bind_list_names(g, want_tensor, err);
  return ATTN_ERROR_NOT_FOUND;
}

static const char *bind_dim_name(const IrGraph *g, const IrTensor *t, int i,
                                 char buf[24]) {
  if (t->dim_sym[i] >= 0) return g->dims[t->dim_sym[i]].name;
  snprintf(buf, 24, "%lld", (long long)t->dim_val[i]);
  return buf;
}

/* A tensor being bound, before it is committed. */
typedef struct BindTensor {
  int index;
  const IrTensor *decl;
  int64_t shape[4];
  int64_t stride[4];
} BindTensor;

/* Sizes: non-negative, fit an int, agree with literal dims. */
static attn_status bind_check_sizes(const IrGraph *g, BindTensor *bt,
                                    StrBuf *err) {
  const IrTensor *t = bt->decl;
  char buf[24];
  for (int i = 0; i < t->ndims; i++) {
    int64_t n = bt->shape[i];
    const char *dn = bind_dim_name(g, t, i, buf);
    if (n < 0 || n > INT_MAX) {
      sb_printf(err,
                "graph '%s', tensor '%s': dimension %d (%s) is %lld; sizes "
                "must be between 0 and %d",
                g->name, t->name, i, dn, (long long)n, INT_MAX);
      return ATTN_ERROR_INVALID_ARGUMENT;
    }
    if (t->dim_sym[i] < 0 && n != t->dim_val[i]) {
      sb_printf(err,
                "graph '%s', tensor '%s': dimension %d is declared %lld but "
                "bound with size %lld",
                g->name, t->name, i, (long long)t->dim_val[i], (long long)n);
      return ATTN_ERROR_INVALID_ARGUMENT;
    }
  }
  return ATTN_SUCCESS;
}

/* A dim symbol has one value across every bound tensor (and within one). */
static attn_status bind_check_symbols(const BindState *b, BindTensor *bt,
                                      StrBuf *err) {
  const IrGraph *g = b->g;
  const IrTensor *t = bt->decl;
  for (int i = 0; i < t->ndims; i++) {
    int s = t->dim_sym[i];
    if (s < 0) continue;
    for (int j = 0; j < i; j++)
      if (t->dim_sym[j] == s && bt->shape[j] != bt->shape[i]) {
        sb_printf(err,
                  "graph '%s', tensor '%s': dimensions %d and %d are both "
                  "%s but have sizes %lld and %lld",
                  g->name, t->name, j, i, g->dims[s].name,
                  (long long)bt->shape[j], (long long)bt->shape[i]);
        return ATTN_ERROR_INVALID_ARGUMENT;
      }
    for (int o = 0; o < g->ntensors; o++) {
      if (o == bt->index || !b->tensor_bound[o]) continue;
      const IrTensor *ot = &g->tensors[o];
      for (int j = 0; j < ot->ndims; j++)
        if (ot->dim_sym[j] == s && b->shape[o][j] != bt->shape[i]) {
          sb_printf(err,
                    "graph '%s', tensor '%s': dimension %d (%s) is %lld, but "
                    "tensor '%s' has %s = %lld",
                    g->name, t->name, i, g->dims[s].name,
                    (long long)bt->shape[i], ot->name, g->dims[s].name,
                    (long long)b->shape[o][j]);
          return ATTN_ERROR_INVALID_ARGUMENT;
        }
    }
  }
  return ATTN_SUCCESS;
}

/* k's heads divide q's (GQA), or the message saying they do not. */
static bool bind_heads_divide(const IrGraph *g, int64_t q_heads, int64_t k_heads, StrBuf *err) {
  if (k_heads == 0 ? q_heads == 0 : q_heads % k_heads == 0) return true;
  sb_printf(err,
            "graph '%s': tensor '%s' has %lld key/value heads, which does "
            "not divide the %lld query heads of tensor '%s'",
            g->name, g->tensors[g->k].name, (long long)k_heads, (long long)q_heads,
            g->tensors[g->q].name);
  return false;
}

/* The attention problem's own rules, whatever the dims are named:
 * q [B,H,Sq,D], k [B,Hk,Skv,D], v [B,Hk,Skv,Dv]. */
static attn_status bind_check_problem(const BindState *b, BindTensor *bt,
                                      StrBuf *err) {
  const IrGraph *g = b->g;
  const int64_t *q = NULL, *k = NULL, *v = NULL;
  int idx[3] = {g->q, g->k, g->v};
  const int64_t **slot[3] = {&q, &k, &v};
  for (int r = 0; r < 3; r++) {
    int t = idx[r];
    if (t < 0 || t >= g->ntensors || g->tensors[t].ndims != 4) continue;
    if (t == bt->index)
      *slot[r] = bt->shape;
    else if (b->tensor_bound[t])
      *slot[r] = b->shape[t];
  }
  const char *qn = q ? g->tensors[g->q].name : "";
  const char *kn = k ? g->tensors[g->k].name : "";
  /* A paged k: its heads in dim 1 or 2 (the batch size is its page
   * table's, checked by bind_finish once the table is bound). */
  const bool paged = g->k >= 0 && g->tensors[g->k].paged;
  const int kh = paged ? ir_kv_dim(g, g->k, 1).dim : 1;
  if (q && k && q[3] != k[3]) {
    sb_printf(err,
              "graph '%s': head dims differ: tensor '%s' has %lld, tensor "
              "'%s' has %lld",
              g->name, qn, (long long)q[3], kn, (long long)k[3]);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  if (q && k && !paged && q[0] != k[0]) {
    sb_printf(err,
              "graph '%s': batch sizes differ: tensor '%s' has %lld, tensor "
              "'%s' has %lld",
              g->name, qn, (long long)q[0], kn, (long long)k[0]);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  if (q && k && !bind_heads_divide(g, q[1], k[kh], err)) return ATTN_ERROR_INVALID_ARGUMENT;
  if (k && v) {
    static const char *what[3] = {"batch size", "head count", "length"};
    static const char *what_paged[2][3] = {{"page count", "page size", "head count"},
                                           {"page count", "head count", "page size"}};
    for (int i = 0; i < 3; i++)
      if (k[i] != v[i]) {
        sb_printf(err,
                  "graph '%s': tensors '%s' and '%s' differ in %s "
                  "(dimension %d): %lld and %lld",
                  g->name, kn, g->tensors[g->v].name,
                  paged ? what_paged[g->tensors[g->k].paged_hnd][i] : what[i], i,
                  (long long)k[i], (long long)v[i]);
        return ATTN_ERROR_INVALID_ARGUMENT;
      }
  }
  return ATTN_SUCCESS;
}

/* Strides: given or dense; non-negative; 0 for literal-1 (broadcast) and
 * size-1 dims, whose stride no element ever multiplies. */
static attn_status bind_check_strides(const IrGraph *g, BindTensor *bt,
                                      const int64_t *strides, StrBuf *err) {
  const IrTensor *t = bt->decl;
  int64_t dense = 1;
  char buf[24];
  for (int i = t->ndims - 1; i >= 0; i--) {
    int64_t s = strides ? strides[i] : dense;
    if (s < 0) {
      sb_printf(err,
                "graph '%s', tensor '%s': dimension %d (%s) has stride "
                "%lld; strides must be >= 0",
                g->name, t->name, i, bind_dim_name(g, t, i, buf),
                (long long)s);
      return ATTN_ERROR_INVALID_ARGUMENT;
    }
    bt->stride[i] = bt->shape[i] <= 1 ? 0 : s;
    if (!strides && __builtin_mul_overflow(dense, bt->shape[i] ? bt->shape[i]
                                                                : 1,
                                           &dense)) {
      sb_printf(err, "graph '%s', tensor '%s': the element count overflows",
                g->name, t->name);
      return ATTN_ERROR_INVALID_ARGUMENT;
    }
  }
  return ATTN_SUCCESS;
}

/* The last element's byte offset must fit; the pointer must be there. */
static attn_status bind_check_extent(const IrGraph *g, BindTensor *bt,
                                     const void *ptr, StrBuf *err) {
  const IrTensor *t = bt->decl;
  int64_t last = 0, bytes;
  for (int i = 0; i < t->ndims; i++) {
    if (bt->shape[i] == 0) return ATTN_SUCCESS; /* empty: never read */
    int64_t term;
    if (__builtin_mul_overflow(bt->shape[i] - 1, bt->stride[i], &term) ||
        __builtin_add_overflow(last, term, &last))
      goto overflow;
  }
  if (__builtin_mul_overflow(last + 1, (int64_t)dtype_size(t->type), &bytes))
    goto overflow;
  if (!ptr) {
    sb_printf(err, "graph '%s', tensor '%s': null pointer for a non-empty "
                   "tensor",
              g->name, t->name);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  if ((uintptr_t)ptr + (uint64_t)bytes < (uintptr_t)ptr) goto overflow;
  return ATTN_SUCCESS;
overflow:
  sb_printf(err,
            "graph '%s', tensor '%s': its sizes and strides address more "
            "memory than exists",
            g->name, t->name);
  return ATTN_ERROR_INVALID_ARGUMENT;
}

/* q, k, v and the 4-D outputs are read/written in 16-byte vectors along
 * the last dim: aligned base, unit inner stride, 16-byte row strides.
 * Outputs must not alias themselves through a zero stride. */
static attn_status bind_check_layout(const IrGraph *g, BindTensor *bt,
                                     const void *ptr, StrBuf *err) {
  const IrTensor *t = bt->decl;
  int es = dtype_size(t->type);
  char buf[24];
  for (int i = 0; i < t->ndims; i++) {
    if (t->is_output && bt->shape[i] > 1 && bt->stride[i] == 0) {
      sb_printf(err,
                "graph '%s', output '%s': dimension %d (%s) has stride 0; "
                "outputs cannot broadcast",
                g->name, t->name, i, bind_dim_name(g, t, i, buf));
      return ATTN_ERROR_INVALID_ARGUMENT;
    }
  }
  if (!bind_is_vector_tensor(g, bt->index)) {
    if ((uintptr_t)ptr % (uintptr_t)es != 0) {
      sb_printf(err,
                "graph '%s', tensor '%s': pointer %p is not aligned to its "
                "%d-byte elements",
                g->name, t->name, ptr, es);
      return ATTN_ERROR_INVALID_ARGUMENT;
    }
    return ATTN_SUCCESS;
  }
  if ((uintptr_t)ptr % 16 != 0) {
    sb_printf(err,
              "graph '%s', tensor '%s': pointer %p is not 16-byte aligned",
              g->name, t->name, ptr);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  int last = t->ndims - 1;
  if (last >= 0 && bt->shape[last] > 1 && bt->stride[last] != 1) {
    sb_printf(err,
              "graph '%s', tensor '%s': the last dimension (%s) has stride "
              "%lld; it must be 1 (contiguous rows)",
              g->name, t->name, bind_dim_name(g, t, last, buf),
              (long long)bt->stride[last]);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  int64_t mult = 16 / es;
  for (int i = 0; i < last; i++)
    if (bt->stride[i] % mult != 0) {
      sb_printf(err,
                "graph '%s', tensor '%s': dimension %d (%s) has stride "
                "%lld; it must be a multiple of %lld elements (16 bytes of "
                "%s)",
                g->name, t->name, i, bind_dim_name(g, t, i, buf),
                (long long)bt->stride[i], (long long)mult,
                dtype_name(t->type));
      return ATTN_ERROR_INVALID_ARGUMENT;
    }
  return ATTN_SUCCESS;
}

static attn_status bind_check_decl(const IrGraph *g, const IrTensor *t,
                                   attn_dtype dtype, int ndim,
                                   const int64_t *shape, StrBuf *err) {
  if ((int)dtype != (int)t->type) {
    bool known = dtype >= ATTN_F16 && dtype <= ATTN_BOOL;
    sb_printf(err, "graph '%s', tensor '%s': declared %s, bound as ",
              g->name, t->name, dtype_name(t->type));
    if (known)
      sb_puts(err, dtype_name((DType)dtype));
    else
      sb_printf(err, "unknown dtype %d", (int)dtype);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  if (ndim != t->ndims) {
    sb_printf(err,
              "graph '%s', tensor '%s': declared with %d dimensions, bound "
              "with %d",
              g->name, t->name, t->ndims, ndim);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  if (!shape && ndim > 0) {
    sb_printf(err, "graph '%s', tensor '%s': shape is NULL", g->name,
              t->name);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  return ATTN_SUCCESS;
}

/* The backward's bindings (runtime/backward.c) of a graph with grad:
 * "d" + the attention output's name (dO: o's shape, bwd_grad_type's
 * dtype), an output "d" + the name of each of q, k, v and each bias
 * declared with grad (its shape; q's, k's, v's dtype from bwd_grad_type,
 * a bias's own), and a grad block's amax outputs (f32[1]). Fills decl and
 * returns the parameter slot (bwd_slots), or -1 when name is none of
 * them. */
static int bind_grad_decl(const IrGraph *g, const char *name, IrTensor *decl) {
  if (!bwd_has_grad(g) || g->q < 0 || g->k < 0 || g->v < 0) return -1;
  BwdSlots sl;
  bwd_slots(g, &sl);
  for (int k = 0; k < sl.namax && sl.amax[k] < ATTN_MAX_TENSORS; k++)
    if (strcmp(name, g->grad->amax[k].name) == 0) {
      *decl = (IrTensor){.name = name, .loc = g->grad->amax[k].loc, .type = DT_F32, .ndims = 1,
                         .dim_sym = {-1, -1, -1, -1}, .dim_val = {1, 1, 1, 1}, .is_output = true};
      return sl.amax[k];
    }
  if (name[0] != 'd') return -1;
  int from = -1, slot = -1;
  if (sl.o >= 0 && strcmp(name + 1, g->tensors[sl.o].name) == 0) from = sl.o, slot = sl.dout;
  const int qkv[3] = {g->q, g->k, g->v}, dslot[3] = {sl.dq, sl.dk, sl.dv};
  for (int r = 0; r < 3 && from < 0; r++)
    if (dslot[r] >= 0 && strcmp(name + 1, g->tensors[qkv[r]].name) == 0)
      from = qkv[r], slot = dslot[r];
  for (int r = 0; r < sl.nbias && from < 0; r++)
    if (strcmp(name + 1, g->tensors[sl.bias[r]].name) == 0) from = sl.bias[r], slot = sl.dbias[r];
  if (from < 0 || slot >= ATTN_MAX_TENSORS) return -1;
  *decl = g->tensors[from];
  decl->name = name;
  decl->grad = false;
  decl->is_output = from != sl.o;
  decl->type = from == sl.o ? bwd_grad_type(g, IR_GRAD_DO) : bwd_tensor_grad_type(g, from);
  return slot;
}

attn_status bind_tensor(BindState *b, const char *name, void *ptr,
                        attn_dtype dtype, int ndim, const int64_t *shape,
                        const int64_t *strides, StrBuf *err) {
  const IrGraph *g = b->g;
  int index = bind_find_tensor(g, name);
  IrTensor grad_decl;
  const IrTensor *decl = index >= 0 ? &g->tensors[index] : NULL;
  if (index < 0 && (index = bind_grad_decl(g, name, &grad_decl)) >= 0) decl = &grad_decl;
  if (index < 0) return bind_unknown(g, name, true, err);
  BindTensor bt = {index, decl, {1, 1, 1, 1}, {0, 0, 0, 0}};
  attn_status st = bind_check_decl(g, bt.decl, dtype, ndim, shape, err);
  if (st) return st;
  for (int i = 0; i < ndim; i++) bt.shape[i] = shape[i];
  if ((st = bind_check_sizes(g, &bt, err)) ||
      (st = bind_check_symbols(b, &bt, err)) ||
      (st = bind_check_problem(b, &bt, err)) ||
      (st = bind_check_strides(g, &bt, strides, err)) ||
      (st = bind_check_extent(g, &bt, ptr, err)))
    return st;
  bool empty = false;
  for (int i = 0; i < ndim; i++) empty |= bt.shape[i] == 0;
  if (!empty && (st = bind_check_layout(g, &bt, ptr, err))) return st;

  attn_tensor_arg *a = &b->params.t[index];
  a->ptr = ptr;
  for (int i = 0; i < 4; i++) {
    a->size[i] = i < ndim ? (int)bt.shape[i] : 1;
    a->stride[i] = i < ndim ? (long long)bt.stride[i] : 0;
    b->shape[index][i] = bt.shape[i];
  }
  b->tensor_bound[index] = true;
  return ATTN_SUCCESS;
}

static bool bind_scalar_accepts(DType decl, DType given) {
  if (given == DT_F32) return dtype_is_float(decl);
  return decl == given;
}

attn_status bind_scalar(BindState *b, const char *name, DType type,
                        attn_scalar_arg v, StrBuf *err) {
  const IrGraph *g = b->g;
  int index = bind_find_scalar(g, name);
  if (index < 0) return bind_unknown(g, name, false, err);
  const IrScalar *s = &g->scalars[index];
  if (!bind_scalar_accepts(s->type, type)) {
    sb_printf(err, "graph '%s', scalar '%s': declared %s, bound as %s",
              g->name, s->name, dtype_name(s->type), dtype_name(type));
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  b->params.s[index] = v;
  b->scalar_bound[index] = true;
  return ATTN_SUCCESS;
}

static attn_scalar_arg bind_default(const IrScalar *s) {
  attn_scalar_arg v;
  memset(&v, 0, sizeof v);
  if (dtype_is_float(s->type))
    v.f = (float)s->fdefault;
  else if (s->type == DT_U64)
    v.u = (unsigned long long)s->idefault;
  else
    v.i = (int)s->idefault;
  return v;
}

/* A paged k and v: the logical problem [B, Hk, MaxPages * PageSize, D]
 * from the caches and their page table, which must agree with q. */
static attn_status bind_finish_paged(BindState *b, StrBuf *err) {
  const IrGraph *g = b->g;
  const IrTensor *k = &g->tensors[g->k];
  const int64_t *kc = b->shape[g->k], *table = b->shape[k->page_table];
  const int64_t *q = b->shape[g->q];
  if (!ir_packed(g) && table[0] != q[0]) {
    sb_printf(err,
              "graph '%s': batch sizes differ: tensor '%s' has %lld, page table '%s' has "
              "%lld", g->name, g->tensors[g->q].name, (long long)q[0],
              g->tensors[k->page_table].name, (long long)table[0]);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  const int64_t keys = table[1] * kc[ir_page_dim(k)];
  if (keys > INT32_MAX) {
    sb_printf(err,
              "graph '%s': page table '%s' spans %lld pages of %lld keys, %lld keys a "
              "sequence; at most %d", g->name, g->tensors[k->page_table].name,
              (long long)table[1], (long long)kc[ir_page_dim(k)], (long long)keys, INT32_MAX);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  b->params.Hk = (int)kc[ir_kv_dim(g, g->k, 1).dim];
  b->params.Skv = (int)keys;
  return ATTN_SUCCESS;
}

/* Packed sequences: q [Tq, H, D], k and v [Tk, Hk, D(v)] and the
 * offsets' B + 1 entries give the problem, Sq and Skv being the token
 * counts (the kernels read each sequence's rows from the offsets). */
static attn_status bind_finish_packed(BindState *b, StrBuf *err) {
  const IrGraph *g = b->g;
  const int64_t *q = b->shape[g->q], *k = b->shape[g->k];
  const int cu = g->tensors[g->q].seq_offsets;
  const int64_t n = b->shape[cu][0];
  if (n < 1) {
    sb_printf(err, "graph '%s': the offsets '%s' are empty; they hold B + 1 entries, the first "
              "0", g->name, g->tensors[cu].name);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  b->params.B = (int)(n - 1);
  b->params.H = (int)q[1];
  b->params.Sq = (int)q[0];
  if (g->tensors[g->k].paged) {
    /* Packed q against a paged cache: the table's rows are the sequences,
     * the keys the pages' logical view (bind_finish_paged). */
    const IrTensor *kt = &g->tensors[g->k];
    const int64_t *table = b->shape[kt->page_table];
    if (table[0] != n - 1) {
      sb_printf(err, "graph '%s': the offsets '%s' hold %lld sequences (B + 1 = %lld entries), "
                "the page table '%s' %lld rows", g->name, g->tensors[cu].name,
                (long long)(n - 1), (long long)n, g->tensors[kt->page_table].name,
                (long long)table[0]);
      return ATTN_ERROR_INVALID_ARGUMENT;
    }
    if (!bind_heads_divide(g, q[1], k[ir_kv_dim(g, g->k, 1).dim], err))
      return ATTN_ERROR_INVALID_ARGUMENT;
    return bind_finish_paged(b, err);
  }
  if (!bind_heads_divide(g, q[1], k[1], err)) return ATTN_ERROR_INVALID_ARGUMENT;
  b->params.Hk = (int)k[1];
  b->params.Skv = (int)k[0];
  return ATTN_SUCCESS;
}

attn_status bind_finish(BindState *b, StrBuf *err) {
  const IrGraph *g = b->g;
  for (int t = 0; t < g->ntensors; t++)
    if (!b->tensor_bound[t]) {
      sb_printf(err, "graph '%s': %s '%s' is not bound", g->name,
                g->tensors[t].is_output ? "output" : "tensor",
                g->tensors[t].name);
      return ATTN_ERROR_INCOMPLETE;
    }
  for (int s = 0; s < g->nscalars; s++) {
    if (b->scalar_bound[s]) continue;
    if (!g->scalars[s].has_default) {
      sb_printf(err, "graph '%s': scalar '%s' is not bound and has no default",
                g->name, g->scalars[s].name);
      return ATTN_ERROR_INCOMPLETE;
    }
    b->params.s[s] = bind_default(&g->scalars[s]);
  }
  for (int t = 0; t < g->ntensors; t++)
    for (int i = 0; i < g->tensors[t].ndims; i++)
      if (g->tensors[t].dim_sym[i] >= 0)
        b->params.dim[g->tensors[t].dim_sym[i]] = (int)b->shape[t][i];
  if (g->q >= 0 && g->k >= 0 && ir_packed(g)) return bind_finish_packed(b, err);
  if (g->q < 0 || g->k < 0 || g->tensors[g->q].ndims != 4 ||
      g->tensors[g->k].ndims != 4) {
    sb_printf(err, "graph '%s': q and k must be 4-D [B, H, S, D] tensors",
              g->name);
    return ATTN_ERROR_UNSUPPORTED;
  }
  const int64_t *q = b->shape[g->q], *k = b->shape[g->k];
  b->params.B = (int)q[0];
  b->params.H = (int)q[1];
  b->params.Sq = (int)q[2];
  b->params.Hk = (int)k[1];
  b->params.Skv = (int)k[2];
  if (g->tensors[g->k].paged) return bind_finish_paged(b, err);
  return ATTN_SUCCESS;
}
