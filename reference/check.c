/*
 * check.c: runs one graph on the GPU on the same inputs the CPU reference
 * takes, and hands back the outputs as doubles. Shared by `attnc run`, the
 * GPU tests and the benchmark, so each checks a kernel the same way:
 * inputs rounded to their dtype on the host (both sides see identical
 * values), outputs poisoned with NaN bytes before the launch (an element
 * the kernel fails to write cannot pass), every driver call checked.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cuda_driver.h"
#include "rt.h"

static attn_dtype to_attn_dtype(DType t) {
  switch (t) {
  case DT_F16: return ATTN_F16;
  case DT_BF16: return ATTN_BF16;
  case DT_F32: return ATTN_F32;
  case DT_E4M3: return ATTN_E4M3;
  case DT_E5M2: return ATTN_E5M2;
  case DT_I32: return ATTN_I32;
  case DT_U64: return ATTN_U64;
  default: return ATTN_BOOL;
  }
}

int chk_output_shapes(RefArgs *args, StrBuf *err) {
  const IrGraph *g = args->g;
  int64_t val[64];
  bool known[64] = {0};
  if (g->ndims > 64) {
    sb_printf(err, "too many dimension symbols");
    return -1;
  }
  for (int k = 0; k < g->ntensors; k++) {
    const IrTensor *t = &g->tensors[k];
    if (t->is_output) continue;
    for (int d = 0; d < t->ndims; d++) {
      int s = t->dim_sym[d];
      if (s >= 0 && !known[s]) {
        known[s] = true;
        val[s] = args->tensors[k].shape[d];
      }
    }
  }
  for (int k = 0; k < g->ntensors; k++) {
    const IrTensor *t = &g->tensors[k];
    if (!t->is_output) continue;
    RefTensor *r = &args->tensors[k];
    r->ndims = t->ndims;
    for (int d = 0; d < t->ndims; d++) {
      int s = t->dim_sym[d];
      if (s >= 0 && !known[s]) {
        sb_printf(err, "output '%s': dimension '%s' is not bound by any input", t->name,
                  g->dims[s].name);
        return -1;
      }
      r->shape[d] = s >= 0 ? val[s] : t->dim_val[d];
    }
  }
  return 0;
}

/* The q/k/v/o tensors in BSHD: storage order b, s, h, d of a BHSD view. */
static bool is_bshd(const IrGraph *g, int k, const ChkOptions *o, int o_slot) {
  return o->bshd && g->tensors[k].ndims == 4 &&
         (k == g->q || k == g->k || k == g->v || k == o_slot);
}

/* Dense strides for the declared order, or BSHD strides. */
static void strides_for(const RefTensor *t, bool bshd, int64_t st[IR_MAX_RANK]) {
  if (bshd) {
    const int64_t *s = t->shape; /* declared [B, H, S, D] */
    st[3] = 1;
    st[1] = s[3];
    st[2] = s[1] * s[3];
    st[0] = s[2] * s[1] * s[3];
    return;
  }
  int64_t acc = 1;
  for (int d = t->ndims - 1; d >= 0; d--) {
    st[d] = acc;
    acc *= t->shape[d];
  }
}

/* Element e (row-major in the declared order) -> its storage offset. */
static int64_t storage_offset(const RefTensor *t, const int64_t st[IR_MAX_RANK], int64_t e) {
  int64_t off = 0;
  for (int d = t->ndims - 1; d >= 0; d--) {
    off += (e % t->shape[d]) * st[d];
    e /= t->shape[d];
  }
  return off;
}

typedef struct DevTensor {
  CUdeviceptr ptr;
  size_t bytes;
  int64_t strides[IR_MAX_RANK];
  bool bshd;
} DevTensor;

static attn_status upload(const RtDriver *drv, const IrTensor *it, const RefTensor *t,
                          DevTensor *dt, StrBuf *err) {
  int64_t n = ref_numel(t);
  int es = dtype_size(it->type);
  dt->bytes = (size_t)(n > 0 ? n : 1) * (size_t)es;
  CUresult r = drv->MemAlloc(&dt->ptr, dt->bytes);
  if (r != CUDA_SUCCESS) return rt_driver_error(drv, r, "cuMemAlloc", err);
  unsigned char *host = calloc(dt->bytes, 1);
  if (!host) return ATTN_ERROR_OUT_OF_MEMORY;
  for (int64_t e = 0; e < n; e++)
    dtype_to_bits(it->type, t->data[e], host + storage_offset(t, dt->strides, e) * es);
  r = drv->MemcpyHtoD(dt->ptr, host, dt->bytes);
  free(host);
  return r == CUDA_SUCCESS ? ATTN_SUCCESS : rt_driver_error(drv, r, "cuMemcpyHtoD", err);
}

static attn_status download(const RtDriver *drv, const IrTensor *it, const RefTensor *shape,
                            const DevTensor *dt, double **out, StrBuf *err) {
  int64_t n = ref_numel(shape);
  int es = dtype_size(it->type);
  unsigned char *host = malloc(dt->bytes);
  double *vals = malloc((size_t)(n > 0 ? n : 1) * sizeof *vals);
  if (!host || !vals) {
    free(host);
    free(vals);
    return ATTN_ERROR_OUT_OF_MEMORY;
  }
  CUresult r = drv->MemcpyDtoH(host, dt->ptr, dt->bytes);
  if (r != CUDA_SUCCESS) {
    free(host);
    free(vals);
    return rt_driver_error(drv, r, "cuMemcpyDtoH", err);
  }
  for (int64_t e = 0; e < n; e++)
    vals[e] = dtype_from_bits(it->type, host + storage_offset(shape, dt->strides, e) * es);
  free(host);
  *out = vals;
  return ATTN_SUCCESS;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Median time of `iters` launches, after a warm-up. */
static attn_status time_launches(const RtDriver *drv, attn_call *call, int iters, double *ms,
                                 StrBuf *err) {
  CUevent e0, e1;
  float *t = calloc((size_t)iters, sizeof *t);
  if (!t) return ATTN_ERROR_OUT_OF_MEMORY;
  attn_status st = ATTN_SUCCESS;
  CUresult r = drv->EventCreate(&e0, CU_EVENT_DEFAULT);
  if (r == CUDA_SUCCESS) r = drv->EventCreate(&e1, CU_EVENT_DEFAULT);
  if (r != CUDA_SUCCESS) {
    free(t);
    return rt_driver_error(drv, r, "cuEventCreate", err);
  }
  for (int w = 0; w < 3 && st == ATTN_SUCCESS; w++) st = attn_call_launch(call, NULL);
  for (int k = 0; k < iters && st == ATTN_SUCCESS; k++) {
    drv->EventRecord(e0, NULL);
    st = attn_call_launch(call, NULL);
    drv->EventRecord(e1, NULL);
    r = drv->EventSynchronize(e1);
    if (r != CUDA_SUCCESS) st = rt_driver_error(drv, r, "kernel", err);
    else drv->EventElapsedTime(&t[k], e0, e1);
  }
  if (st == ATTN_SUCCESS) {
    qsort(t, (size_t)iters, sizeof *t, cmp_float);
    *ms = t[iters / 2];
  }
  drv->EventDestroy(e0);
  drv->EventDestroy(e1);
  free(t);
  return st;
}

/* The backward after a forward launch of `call`: uploads dO, binds it and
 * NaN-poisoned gradients by their names ("d" + name: q, k, v and bias
 * gradients), launches and reads each gradient back into res->grads. */
static attn_status run_backward(const RtDriver *drv, attn_call *call, const RefArgs *args,
                                const ChkOptions *o, ChkResult *res, StrBuf *err) {
  const IrGraph *g = args->g;
  BwdSlots sl;
  if (bwd_slots(g, &sl) != 0) {
    sb_printf(err, "graph '%s' has no lse output for the backward", g->name);
    return ATTN_ERROR_UNSUPPORTED;
  }
  res->grads = calloc((size_t)g->ntensors, sizeof *res->grads);
  if (!res->grads) return ATTN_ERROR_OUT_OF_MEMORY;
  /* dt[0]: dO, in its dtype (bwd_grad_type), o's shape; then dq, dk, dv
   * (theirs), the biases', and a grad block's amax outputs (f32[1]). */
  enum { NG = 4 + BWD_MAX_BIAS + BWD_MAX_AMAX };
  int which[NG] = {-1, g->q, g->k, g->v};
  for (int r = 0; r < sl.nbias; r++) which[4 + r] = sl.bias[r];
  const int ng = 4 + sl.nbias;
  DevTensor dt[NG];
  memset(dt, 0, sizeof dt);
  IrTensor decl[NG];
  attn_status st = ATTN_SUCCESS;
  decl[0] = g->tensors[sl.o];
  decl[0].type = bwd_grad_type(g, IR_GRAD_DO);
  decl[0].is_output = false;
  RefTensor dref = args->tensors[sl.o];
  dref.data = (double *)o->dout;
  strides_for(&dref, false, dt[0].strides);
  st = upload(drv, &decl[0], &dref, &dt[0], err);
  char name[80];
  if (st == ATTN_SUCCESS) {
    snprintf(name, sizeof name, "d%s", g->tensors[sl.o].name);
    st = attn_call_bind_tensor(call, name, (void *)(uintptr_t)dt[0].ptr,
                               to_attn_dtype(decl[0].type), dref.ndims, dref.shape, dt[0].strides);
  }
  for (int r = 1; r < ng && st == ATTN_SUCCESS; r++) {
    int t = which[r];
    if (!g->tensors[t].grad) continue;
    decl[r] = g->tensors[t];
    decl[r].type = bwd_tensor_grad_type(g, t);
    const RefTensor *rt = &args->tensors[t];
    strides_for(rt, false, dt[r].strides);
    int64_t n = ref_numel(rt);
    dt[r].bytes = (size_t)(n > 0 ? n : 1) * (size_t)dtype_size(decl[r].type);
    CUresult cr = drv->MemAlloc(&dt[r].ptr, dt[r].bytes);
    if (cr == CUDA_SUCCESS) cr = drv->MemsetD8(dt[r].ptr, 0xff, dt[r].bytes);
    if (cr != CUDA_SUCCESS) {
      st = rt_driver_error(drv, cr, "cuMemAlloc", err);
      break;
    }
    snprintf(name, sizeof name, "d%s", g->tensors[t].name);
    st = attn_call_bind_tensor(call, name, (void *)(uintptr_t)dt[r].ptr,
                               to_attn_dtype(decl[r].type), rt->ndims, rt->shape, dt[r].strides);
  }
  /* The amax outputs: NaN-poisoned f32[1] each. */
  CUdeviceptr amax[BWD_MAX_AMAX] = {0};
  for (int k = 0; k < sl.namax && st == ATTN_SUCCESS; k++) {
    CUresult cr = drv->MemAlloc(&amax[k], 4);
    if (cr == CUDA_SUCCESS) cr = drv->MemsetD8(amax[k], 0xff, 4);
    if (cr != CUDA_SUCCESS) {
      st = rt_driver_error(drv, cr, "cuMemAlloc", err);
      break;
    }
    const int64_t one = 1;
    st = attn_call_bind_tensor(call, g->grad->amax[k].name, (void *)(uintptr_t)amax[k], ATTN_F32,
                               1, &one, NULL);
  }
  if (st == ATTN_SUCCESS && o->deterministic) st = attn_call_set_deterministic(call, 1);
  if (st == ATTN_SUCCESS) st = attn_call_launch_backward(call, NULL);
  if (st == ATTN_SUCCESS) {
    CUresult cr = drv->CtxSynchronize();
    if (cr != CUDA_SUCCESS) st = rt_driver_error(drv, cr, "the backward kernels", err);
  }
  for (int r = 1; r < ng && st == ATTN_SUCCESS; r++)
    if (dt[r].ptr)
      st = download(drv, &decl[r], &args->tensors[which[r]], &dt[r], &res->grads[which[r]], err);
  for (int k = 0; k < sl.namax; k++) {
    float v = 0.f;
    if (st == ATTN_SUCCESS) {
      CUresult cr = drv->MemcpyDtoH(&v, amax[k], 4);
      if (cr != CUDA_SUCCESS) st = rt_driver_error(drv, cr, "cuMemcpyDtoH", err);
    }
    res->amax[k] = v;
    if (amax[k]) drv->MemFree(amax[k]);
  }
  for (int r = 0; r < ng; r++)
    if (dt[r].ptr) drv->MemFree(dt[r].ptr);
  return st;
}

attn_status chk_run_gpu(attn_context *ctx, attn_graph *graph, const RefArgs *args,
                        const ChkOptions *o, ChkResult *res, StrBuf *err) {
  const IrGraph *g = args->g;
  memset(res, 0, sizeof *res);
  attn_status st = ATTN_SUCCESS;
  const RtDriver *drv = rt_driver(&st, err);
  if (!drv) return st;
  int o_slot = -1;
  for (int n = 0; n < g->noutputs; n++)
    if (g->outputs[n].value->dom & DOM_D) o_slot = g->outputs[n].tensor;
  DevTensor *dt = calloc((size_t)g->ntensors, sizeof *dt);
  res->outputs = calloc((size_t)g->ntensors, sizeof *res->outputs);
  attn_call *call = NULL;
  CUdeviceptr counter = 0;
  if (!dt || !res->outputs) {
    st = ATTN_ERROR_OUT_OF_MEMORY;
    goto done;
  }
  if ((st = attn_call_create(graph, &call)) != ATTN_SUCCESS) goto done;
  for (int k = 0; k < g->ntensors && st == ATTN_SUCCESS; k++) {
    const IrTensor *it = &g->tensors[k];
    const RefTensor *t = &args->tensors[k];
    dt[k].bshd = is_bshd(g, k, o, o_slot);
    strides_for(t, dt[k].bshd, dt[k].strides);
    if (it->is_output) {
      dt[k].bytes = (size_t)(ref_numel(t) > 0 ? ref_numel(t) : 1) * (size_t)dtype_size(it->type);
      CUresult r = drv->MemAlloc(&dt[k].ptr, dt[k].bytes);
      if (r == CUDA_SUCCESS) r = drv->MemsetD8(dt[k].ptr, 0xff, dt[k].bytes); /* NaN poison */
      if (r != CUDA_SUCCESS) st = rt_driver_error(drv, r, "cuMemAlloc", err);
    } else {
      st = upload(drv, it, t, &dt[k], err);
    }
    if (st == ATTN_SUCCESS)
      st = attn_call_bind_tensor(call, it->name, (void *)(uintptr_t)dt[k].ptr,
                                 to_attn_dtype(it->type), t->ndims, t->shape, dt[k].strides);
  }
  for (int k = 0; k < g->nscalars && st == ATTN_SUCCESS; k++) {
    const IrScalar *s = &g->scalars[k];
    double v = args->scalars[k];
    st = s->type == DT_I32    ? attn_call_bind_i32(call, s->name, (int32_t)v)
         : s->type == DT_U64  ? attn_call_bind_u64(call, s->name, (uint64_t)v)
         : s->type == DT_BOOL ? attn_call_bind_bool(call, s->name, v != 0)
                              : attn_call_bind_f32(call, s->name, (float)v);
  }
  if (st != ATTN_SUCCESS) goto done;
  if (o->count_tiles) {
    CUresult r = drv->MemAlloc(&counter, sizeof(unsigned long long));
    if (r == CUDA_SUCCESS) r = drv->MemsetD8(counter, 0, sizeof(unsigned long long));
    if (r != CUDA_SUCCESS) {
      st = rt_driver_error(drv, r, "cuMemAlloc", err);
      goto done;
    }
    if ((st = attn_call_set_tile_counter(call, (void *)(uintptr_t)counter)) != ATTN_SUCCESS) goto done;
  }
  if ((st = attn_call_launch(call, NULL)) != ATTN_SUCCESS) goto done;
  CUresult r = drv->CtxSynchronize();
  if (r != CUDA_SUCCESS) {
    st = rt_driver_error(drv, r, "the kernel", err);
    goto done;
  }
  if (counter) {
    r = drv->MemcpyDtoH(&res->tiles_visited, counter, sizeof res->tiles_visited);
    if (r != CUDA_SUCCESS) {
      st = rt_driver_error(drv, r, "cuMemcpyDtoH", err);
      goto done;
    }
    attn_call_set_tile_counter(call, NULL);
  }
  for (int k = 0; k < g->ntensors && st == ATTN_SUCCESS; k++)
    if (g->tensors[k].is_output)
      st = download(drv, &g->tensors[k], &args->tensors[k], &dt[k], &res->outputs[k], err);
  if (st == ATTN_SUCCESS && o->dout) st = run_backward(drv, call, args, o, res, err);
  if (st == ATTN_SUCCESS && o->bench_iters > 0)
    st = time_launches(drv, call, o->bench_iters, &res->ms, err);
done:
  if (st != ATTN_SUCCESS && !err->len) {
    const char *msg = attn_context_error(ctx);
    sb_puts(err, msg && *msg ? msg : attn_status_string(st));
  }
  attn_call_destroy(call);
  if (counter) drv->MemFree(counter);
  for (int k = 0; dt && k < g->ntensors; k++)
    if (dt[k].ptr) drv->MemFree(dt[k].ptr);
  free(dt);
  return st;
}

void chk_result_free(ChkResult *res, int ntensors) {
  for (int k = 0; res->outputs && k < ntensors; k++) free(res->outputs[k]);
  free(res->outputs);
  res->outputs = NULL;
  for (int k = 0; res->grads && k < ntensors; k++) free(res->grads[k]);
  free(res->grads);
  res->grads = NULL;
}

double *chk_random_dout(const RefArgs *args, int o, uint64_t seed) {
  const IrGraph *g = args->g;
  const int64_t n = ref_numel(&args->tensors[o]);
  double *dout = malloc((size_t)(n > 0 ? n : 1) * sizeof *dout);
  RefRng rng = ref_rng(seed, 777);
  for (int64_t e = 0; dout && e < n; e++)
    dout[e] = dtype_round(bwd_grad_type(g, IR_GRAD_DO), ref_rng_normal(&rng));
  return dout;
}

int chk_reference_backward(RefArgs *args, const BwdGraph *bg, const double *dout,
                           const ChkResult *fwd, RefTensor *grads, double *amax, StrBuf *err) {
  const IrGraph *g = bg->g;
  if (!bwd_is_fp8(g)) return ref_backward(args, bg, dout, grads, err);
  BwdSlots sl;
  bwd_slots(g, &sl);
  const double *o = fwd && fwd->outputs && sl.o >= 0 ? fwd->outputs[sl.o] : NULL;
  const double *lse = fwd && fwd->outputs && sl.lse >= 0 ? fwd->outputs[sl.lse] : NULL;
  if (ref_backward_full(args, bg, dout, o && lse ? lse : NULL, o && lse ? o : NULL, grads, amax,
                        err) != 0)
    return -1;
  const int qkv[3] = {g->q, g->k, g->v};
  for (int r = 0; r < 3; r++) {
    const int t = qkv[r];
    const DType st = bwd_tensor_grad_type(g, t);
    for (int64_t e = 0; g->tensors[t].grad && e < ref_numel(&grads[t]); e++)
      grads[t].data[e] = dtype_round(st, grads[t].data[e]);
  }
  return 0;
}

double chk_tolerance(DType out_type) {
  /* Relative L2 error allowed against the double reference. Inputs are
   * exact in both; the kernel rounds P to 16 bits before P @ V and the
   * output to its dtype, so bf16 lands near 4e-3 and f16 near 1e-3. */
  switch (out_type) {
  case DT_F16: return 1e-2;
  /* FP8 outputs: where both sides round to the same grid from values
   * 1e-3 apart, a few percent of elements land one step (2^-3, 2^-2
   * relative) apart; against an unrounded reference the rounding itself
   * (about 3% and 6% RMS) is what remains. */
  case DT_E4M3: return 5e-2;
  case DT_E5M2: return 1e-1;
  default: return 2e-2;
  }
}

static const char *chk_dim_name(const IrGraph *g, int tensor, int d) {
  int s = g->tensors[tensor].dim_sym[d];
  return s >= 0 ? g->dims[s].name : NULL;
}

/* A paged k's page size, pages a sequence and page count for Skv keys
 * a sequence: enough for Skv, and three pages to spare. */
static void chk_pages_spec(const IrGraph *g, StrBuf *sb, int B, int Skv, int page) {
  const IrTensor *k = &g->tensors[g->k];
  const char *ps = chk_dim_name(g, g->k, ir_page_dim(k));
  const char *mp = chk_dim_name(g, k->page_table, 1), *np = chk_dim_name(g, g->k, 0);
  const int maxp = (Skv + page - 1) / page;
  if (ps) sb_printf(sb, "%s=%d,", ps, page);
  if (mp) sb_printf(sb, "%s=%d,", mp, maxp);
  if (np) sb_printf(sb, "%s=%d,", np, B * maxp + 3);
}

void chk_paged_spec(const IrGraph *g, StrBuf *sb, int B, int H, int Hk, int Sq, int Skv,
                    int page) {
  if (ir_packed(g) && g->tensors[g->k].paged) {
    /* Packed q (B sequences, B * Sq tokens) against paged caches of B rows. */
    const IrTensor *k = &g->tensors[g->k];
    const char *nb = chk_dim_name(g, g->tensors[g->q].seq_offsets, 0);
    const char *b = chk_dim_name(g, k->page_table, 0), *h = chk_dim_name(g, g->q, 1);
    const char *hk = chk_dim_name(g, g->k, ir_kv_dim(g, g->k, 1).dim);
    const char *tq = chk_dim_name(g, g->q, 0);
    sb->len = 0;
    if (nb) sb_printf(sb, "%s=%d,", nb, B + 1);
    if (b) sb_printf(sb, "%s=%d,", b, B);
    if (h) sb_printf(sb, "%s=%d,", h, H);
    if (hk && (!h || strcmp(hk, h))) sb_printf(sb, "%s=%d,", hk, Hk);
    if (tq) sb_printf(sb, "%s=%d,", tq, B * Sq);
    chk_pages_spec(g, sb, B, Skv, page);
    if (sb->len) sb->data[--sb->len] = 0;
    return;
  }
  if (ir_packed(g)) { /* B sequences of B * Sq query and B * Skv key tokens in all */
    const char *nb = chk_dim_name(g, g->tensors[g->q].seq_offsets, 0);
    const char *h = chk_dim_name(g, g->q, 1), *hk = chk_dim_name(g, g->k, 1);
    const char *tq = chk_dim_name(g, g->q, 0), *tk = chk_dim_name(g, g->k, 0);
    sb->len = 0;
    if (nb) sb_printf(sb, "%s=%d,", nb, B + 1);
    if (h) sb_printf(sb, "%s=%d,", h, H);
    if (hk && (!h || strcmp(hk, h))) sb_printf(sb, "%s=%d,", hk, Hk);
    if (tq) sb_printf(sb, "%s=%d,", tq, B * Sq);
    if (tk && (!tq || strcmp(tk, tq))) sb_printf(sb, "%s=%d,", tk, B * Skv);
    if (sb->len) sb->data[--sb->len] = 0;
    (void)page;
    return;
  }
  const bool paged = g->tensors[g->k].paged;
  const char *b = chk_dim_name(g, g->q, 0), *h = chk_dim_name(g, g->q, 1);
  const char *hk = chk_dim_name(g, g->k, ir_kv_dim(g, g->k, 1).dim), *sq = chk_dim_name(g, g->q, 2);
  const char *skv = paged ? NULL : chk_dim_name(g, g->k, 2);
  sb->len = 0;
  if (b) sb_printf(sb, "%s=%d,", b, B);
  if (h) sb_printf(sb, "%s=%d,", h, H);
  if (hk && (!h || strcmp(hk, h))) sb_printf(sb, "%s=%d,", hk, Hk);
  if (sq) sb_printf(sb, "%s=%d,", sq, Sq);
  if (skv && (!sq || strcmp(skv, sq))) sb_printf(sb, "%s=%d,", skv, Skv);
  if (paged) chk_pages_spec(g, sb, B, Skv, page);
  if (sb->len) sb->data[--sb->len] = 0;
}

void chk_shape_spec(const IrGraph *g, StrBuf *sb, int B, int H, int Hk, int Sq, int Skv) {
  chk_paged_spec(g, sb, B, H, Hk, Sq, Skv, 16);
}
