/* backward.c: attn_call_launch_backward, the GPU backward of a graph that
 * declares grad (templates/bwd_sm80.cuh, emitted by compiler/emit_bwd.c).
 *
 * The call's bindings already hold the forward's tensors (q, k, v, o, lse
 * and any others the score chain reads) and, bound by name through
 * bind.c, dO and the gradients dq/dk/dv in the extra parameter slots
 * bwd_slots assigns. This file adds the f32 scratch the kernels need
 * (delta, dQ's accumulator, and with H != Hk dK/dV's accumulators),
 * allocated on first use, grown when a later launch needs more, kept on
 * the call and freed with it, then launches:
 *
 *   delta (also zeroes dQ's accumulator)  grid (ceil(Sq/4), H, B)
 *   main                                  grid (ceil(Skv/64), H, B)
 *   convert (dQ to dq's dtype)            grid (ceil(Sq/4), H, B)
 *   convert_kv (GQA only)                 grid (ceil(Skv/4), Hk, B)
 *
 * all on the caller's stream, in that order. */
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "rt.h"

enum { BWD_DELTA, BWD_DQA, BWD_DKA, BWD_DVA, BWD_NBUF };

struct RtBwdScratch {
  CUdeviceptr buf[BWD_NBUF];
  size_t bytes[BWD_NBUF];
};

void rt_bwd_scratch_free(RtBwdScratch *s) {
  if (!s) return;
  const RtDriver *d = rt_driver(NULL, NULL);
  for (int k = 0; d && k < BWD_NBUF; k++)
    if (s->buf[k]) d->MemFree(s->buf[k]);
  free(s);
}

static attn_status bwd_fail(attn_call *c, attn_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static attn_status bwd_fail(attn_call *c, attn_status st, const char *fmt, ...) {
  StrBuf *err = rt_call_error(c);
  err->len = 0;
  va_list ap;
  va_start(ap, fmt);
  sb_vprintf(err, fmt, ap);
  va_end(ap);
  return st;
}

/* Buffer k at least `bytes` long (a larger one is kept). */
static attn_status bwd_ensure(attn_call *c, const RtDriver *d, int k, size_t bytes) {
  RtBwdScratch **sp = rt_call_bwd_scratch(c);
  if (!*sp && !(*sp = calloc(1, sizeof **sp)))
    return bwd_fail(c, ATTN_ERROR_OUT_OF_MEMORY, "out of memory");
  RtBwdScratch *s = *sp;
  if (s->bytes[k] >= bytes) return ATTN_SUCCESS;
  if (s->buf[k]) d->MemFree(s->buf[k]);
  s->buf[k] = 0;
  s->bytes[k] = 0;
  CUresult r = d->MemAlloc(&s->buf[k], bytes);
  if (r != CUDA_SUCCESS) {
    s->buf[k] = 0;
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
      return bwd_fail(c, ATTN_ERROR_OUT_OF_MEMORY,
                      "graph '%s': cannot allocate %zu bytes of backward scratch on the GPU",
                      rt_call_ir(c)->name, bytes);
    return rt_driver_error(d, r, "cuMemAlloc", rt_call_error(c));
  }
  s->bytes[k] = bytes;
  return ATTN_SUCCESS;
}

/* A dense f32 scratch tensor in slot `slot` of the parameter block. */
static void bwd_set_dense(attn_params *p, int slot, CUdeviceptr ptr, int n1, int n2, int n3) {
  attn_tensor_arg *t = &p->t[slot];
  t->ptr = (void *)(uintptr_t)ptr;
  t->size[0] = p->B, t->size[1] = n1, t->size[2] = n2, t->size[3] = n3;
  t->stride[3] = 1;
  t->stride[2] = n3;
  t->stride[1] = (long long)n2 * n3;
  t->stride[0] = (long long)n1 * n2 * n3;
}

/* dO and each gradient: bound, and shaped like o / q / k / v now (the
 * forward's tensors may have been rebound since). */
static attn_status bwd_check_bound(attn_call *c, const BwdSlots *sl) {
  const IrGraph *g = rt_call_ir(c);
  const BindState *b = rt_call_bind(c);
  const int slot[4] = {sl->dout, sl->dq, sl->dk, sl->dv};
  const int like[4] = {sl->o, g->q, g->k, g->v};
  for (int r = 0; r < 4; r++) {
    if (slot[r] < 0) continue;
    const char *name = g->tensors[like[r]].name;
    if (!b->tensor_bound[slot[r]])
      return bwd_fail(c, ATTN_ERROR_INCOMPLETE, "graph '%s': the backward needs %s 'd%s' bound",
                      g->name, r ? "output" : "tensor", name);
    for (int i = 0; i < 4; i++)
      if (b->shape[slot[r]][i] != b->shape[like[r]][i])
        return bwd_fail(c, ATTN_ERROR_INVALID_ARGUMENT,
                        "graph '%s': 'd%s' has size %lld in dimension %d, but '%s' has %lld",
                        g->name, name, (long long)b->shape[slot[r]][i], i, name,
                        (long long)b->shape[like[r]][i]);
  }
  return ATTN_SUCCESS;
}

static attn_status bwd_launch(attn_call *c, const RtDriver *d, CUcontext cu, int which,
                              unsigned gx, unsigned gy, unsigned gz, unsigned smem,
                              attn_params *p, CUstream stream) {
  CUfunction fn;
  attn_status st = rt_call_bwd_function(c, d, cu, which, &fn);
  if (st) return st;
  void *args[] = {p};
  CUresult r = d->LaunchKernel(fn, gx, gy, gz, (unsigned)rt_call_kernel(c)->bwd_threads, 1, 1,
                               smem, stream, args, NULL);
  if (r != CUDA_SUCCESS) {
    st = rt_driver_error(d, r, "cuLaunchKernel", rt_call_error(c));
    sb_printf(rt_call_error(c), " for '%s' (grid %u x %u x %u)",
              rt_call_kernel(c)->bwd_entry[which], gx, gy, gz);
  }
  return st;
}

attn_status attn_call_launch_backward(attn_call *c, void *stream) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  const IrGraph *g = rt_call_ir(c);
  const KernelInfo *k = rt_call_kernel(c);
  StrBuf *err = rt_call_error(c);
  err->len = 0;
  if (err->data) err->data[0] = '\0';
  if (!bwd_has_grad(g))
    return bwd_fail(c, ATTN_ERROR_UNSUPPORTED,
                    "graph '%s' declares no grad, so it has no backward (add `grad q, k, v;`)",
                    g->name);
  int bad = bwd_unsupported_grad(g);
  if (bad >= 0)
    return bwd_fail(c, ATTN_ERROR_UNSUPPORTED,
                    "graph '%s': the GPU backward computes the gradients of q, k and v only; "
                    "'%s' (%s:%d:%d) is declared with grad", g->name, g->tensors[bad].name,
                    g->tensors[bad].loc.src ? g->tensors[bad].loc.src->name : "?",
                    g->tensors[bad].loc.line, g->tensors[bad].loc.col);
  if (!k->bwd_entry[0] || k->bwd_threads <= 0 || k->bwd_block_n <= 0)
    return bwd_fail(c, ATTN_ERROR_UNSUPPORTED,
                    "graph '%s': the module holds no backward kernels for it", g->name);
  BwdSlots sl;
  if (bwd_slots(g, &sl) != 0 || sl.end > ATTN_MAX_TENSORS)
    return bwd_fail(c, ATTN_ERROR_UNSUPPORTED, "graph '%s' saves no lse for the backward",
                    g->name);
  BindState *b = rt_call_bind(c);
  attn_status st = bind_finish(b, err);
  if (st || (st = bwd_check_bound(c, &sl))) return st;
  attn_params p = b->params; /* the call's block plus this launch's scratch */
  p.tiles_visited = NULL;
  if (p.B == 0 || p.H == 0 || p.Sq == 0 || p.Skv == 0) return ATTN_SUCCESS;
  if (p.H > 65535 || p.B > 65535)
    return bwd_fail(c, ATTN_ERROR_INVALID_ARGUMENT,
                    "graph '%s': %d heads and batch %d: the launch grid allows at most 65535 "
                    "of each", g->name, p.H, p.B);
  const RtDriver *d = rt_driver(&st, err);
  if (!d) return st;
  CUcontext cu;
  CUdevice dev;
  if ((st = rt_driver_current(d, &cu, &dev, err))) return st;

  const IrTensor *q = &g->tensors[g->q], *v = &g->tensors[g->v];
  const int dqk = (int)q->dim_val[3], dv = (int)v->dim_val[3];
  const size_t rows = (size_t)p.B * (size_t)p.H * (size_t)p.Sq;
  const size_t kv_rows = (size_t)p.B * (size_t)p.Hk * (size_t)p.Skv;
  const bool gqa = p.H != p.Hk;
  CUstream s = (CUstream)stream;
  if ((st = bwd_ensure(c, d, BWD_DELTA, rows * 4)) ||
      (st = bwd_ensure(c, d, BWD_DQA, rows * (size_t)dqk * 4)))
    return st;
  RtBwdScratch *sc = *rt_call_bwd_scratch(c);
  bwd_set_dense(&p, sl.delta, sc->buf[BWD_DELTA], p.H, p.Sq, 1);
  bwd_set_dense(&p, sl.dqa, sc->buf[BWD_DQA], p.H, p.Sq, dqk);
  const int acc_slot[2] = {sl.dka, sl.dva}, acc_buf[2] = {BWD_DKA, BWD_DVA};
  const int acc_d[2] = {dqk, dv};
  for (int r = 0; r < 2; r++) {
    if (acc_slot[r] < 0) continue;
    if (gqa) {
      /* f32 atomics from every query head of a group: zeroed first. */
      size_t n = kv_rows * (size_t)acc_d[r];
      if ((st = bwd_ensure(c, d, acc_buf[r], n * 4))) return st;
      CUresult rr = d->MemsetD32Async(sc->buf[acc_buf[r]], 0, n, s);
      if (rr != CUDA_SUCCESS) return rt_driver_error(d, rr, "cuMemsetD32Async", err);
      bwd_set_dense(&p, acc_slot[r], sc->buf[acc_buf[r]], p.Hk, p.Skv, acc_d[r]);
    } else {
      /* Unused without GQA; the slot stays null so a stray read faults. */
      memset(&p.t[acc_slot[r]], 0, sizeof p.t[acc_slot[r]]);
    }
  }
  const unsigned row_ctas = (unsigned)(k->bwd_threads / 32);
  const unsigned gq = (unsigned)((p.Sq + row_ctas - 1) / row_ctas);
  const unsigned gk = (unsigned)((p.Skv + k->bwd_block_n - 1) / k->bwd_block_n);
  const unsigned gkv = (unsigned)((p.Skv + row_ctas - 1) / row_ctas);
  if ((st = bwd_launch(c, d, cu, 0, gq, (unsigned)p.H, (unsigned)p.B, 0, &p, s)) ||
      (st = bwd_launch(c, d, cu, 1, gk, (unsigned)p.H, (unsigned)p.B,
                       (unsigned)k->bwd_smem_bytes, &p, s)))
    return st;
  if (sl.dq >= 0 && (st = bwd_launch(c, d, cu, 2, gq, (unsigned)p.H, (unsigned)p.B, 0, &p, s)))
    return st;
  if (gqa && (sl.dk >= 0 || sl.dv >= 0) &&
      (st = bwd_launch(c, d, cu, 3, gkv, (unsigned)p.Hk, (unsigned)p.B, 0, &p, s)))
    return st;
  return ATTN_SUCCESS;
}
