/* backward.c: attn_call_launch_backward, the GPU backward of a graph that
 * declares grad (templates/bwd_sm80.cuh, with bwd_sm90.cuh's main kernel on
 * sm_90a; emitted by compiler/emit_bwd.c). The launch shape comes from the
 * kernel table (KernelInfo.bwd_*): every kernel runs bwd_threads threads
 * (128 for bwd_sm80, 256 for bwd_sm90; the row kernels split each row
 * among bwd_threads / ATTN_BWD_ROWS_PER_CTA threads) and the main grid
 * has one CTA per bwd_block_n keys (64 or 128), or for bwd_sm90 at D <= 128
 * at most one per SM (persistent, below).
 *
 * The call's bindings already hold the forward's tensors (q, k, v, o, lse
 * and any others the score chain reads) and, bound by name through
 * bind.c, dO and the gradients dq/dk/dv in the extra parameter slots
 * bwd_slots assigns. This file adds the f32 scratch the kernels need
 * (delta, dQ's accumulator, and with H != Hk dK/dV's accumulators),
 * allocated on first use, grown when a later launch needs more, kept on
 * the call and freed with it, then launches:
 *
 *   delta (also zeroes dQ's accumulator)  grid (ceil(Sq/W), H, B)
 *   main                                  grid (ceil(Skv/bwd_block_n), H, B),
 *                                         bwd_sm90: (min(that many, SMs))
 *   convert (dQ to dq's dtype)            grid (ceil(Sq/W), H, B)
 *   convert_kv (GQA only)                 grid (ceil(Skv/W), Hk, B)
 *
 * (W = ATTN_BWD_ROWS_PER_CTA rows per CTA, attn_abi.h)
 *
 * all on the caller's stream, in that order.
 *
 * Bias gradients (d<name>, BwdBiasMode): written directly by the main
 * kernel (rows zeroed by the delta pass first), or accumulated in an f32
 * scratch of the bias's shape (zeroed here) that the convert pass writes
 * out; convert then also runs when there is no dq.
 *
 * bwd_sm90's main kernel at D <= 128 is persistent (bwd_main_grid): at most one CTA
 * per SM, taking its work items (key tile, head, batch) from a queue of
 * two words in the scratch, zero before each launch (the kernel leaves
 * them so). ATTN_BWD_CTAS=N caps the CTAs (tests use it to make every CTA
 * take several items).
 *
 * Deterministic mode (attn_call_set_deterministic): no f32 atomics. The
 * dQ accumulator slot stays null, which tells the kernels; the main grid
 * gets ceil(Sq/64) more CTAs that compute dQ per query tile in key order;
 * GQA's dK/dV accumulators become per query head [B, H, Skv, D] (summed in
 * head order by convert_kv); accumulated bias gradients get a full f32
 * [B, H, Sq, Skv] scratch, one element per score, summed in a fixed order
 * by the convert pass. */
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "rt.h"

/* Scratch buffers: delta, the f32 accumulators, the bias gradients' and
 * the persistent main kernel's work queue (two words). */
enum {
  BWD_DELTA,
  BWD_DQA,
  BWD_DKA,
  BWD_DVA,
  BWD_QUEUE,
  BWD_BIAS0,
  BWD_NBUF = BWD_BIAS0 + BWD_MAX_BIAS
};

struct RtBwdScratch {
  CUdeviceptr buf[BWD_NBUF];
  size_t bytes[BWD_NBUF];
  bool deterministic; /* attn_call_set_deterministic */
};

static RtBwdScratch *bwd_scratch(attn_call *c) {
  RtBwdScratch **sp = rt_call_bwd_scratch(c);
  if (!*sp) *sp = calloc(1, sizeof **sp);
  return *sp;
}

static attn_status bwd_fail(attn_call *c, attn_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The deterministic mode's ordered dQ tiles exist for head dims up to
 * 128 (bwd_sm90's split-D mode at 256 has none): refused at once, by the
 * call that asks for it, and again at launch. */
static attn_status bwd_check_det_dims(attn_call *c) {
  const IrGraph *g = rt_call_ir(c);
  if (g->q < 0 || g->v < 0) return ATTN_SUCCESS; /* no attention core: launch says why */
  const int dqk = (int)g->tensors[g->q].dim_val[3], dv = (int)g->tensors[g->v].dim_val[3];
  if (dqk <= 128 && dv <= 128) return ATTN_SUCCESS;
  return bwd_fail(c, ATTN_ERROR_UNSUPPORTED,
                  "graph '%s': the deterministic backward takes head dimensions up to 128; "
                  "this graph has %d (q, k) and %d (v) (attn_call_set_deterministic(call, 0) "
                  "runs the default backward)", g->name, dqk, dv);
}

attn_status attn_call_set_deterministic(attn_call *c, int on) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  attn_status st = on ? bwd_check_det_dims(c) : ATTN_SUCCESS;
  if (st) return st;
  RtBwdScratch *s = bwd_scratch(c);
  if (!s) return ATTN_ERROR_OUT_OF_MEMORY;
  s->deterministic = on != 0;
  return ATTN_SUCCESS;
}

void rt_bwd_scratch_free(RtBwdScratch *s) {
  if (!s) return;
  const RtDriver *d = rt_driver(NULL, NULL);
  for (int k = 0; d && k < BWD_NBUF; k++)
    if (s->buf[k]) d->MemFree(s->buf[k]);
  free(s);
}

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
  RtBwdScratch *s = bwd_scratch(c);
  if (!s) return bwd_fail(c, ATTN_ERROR_OUT_OF_MEMORY, "out of memory");
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

/* dO and each gradient: bound, and shaped like o / q / k / v / the bias
 * now (the forward's tensors may have been rebound since). A bias's kept
 * dimensions must span the problem (B, H, Sq or Skv): the kernels index
 * its gradient by the score element. */
static attn_status bwd_check_bound(attn_call *c, const BwdSlots *sl) {
  const IrGraph *g = rt_call_ir(c);
  const BindState *b = rt_call_bind(c);
  int slot[4 + BWD_MAX_BIAS] = {sl->dout, sl->dq, sl->dk, sl->dv};
  int like[4 + BWD_MAX_BIAS] = {sl->o, g->q, g->k, g->v};
  for (int r = 0; r < sl->nbias; r++) {
    slot[4 + r] = sl->dbias[r];
    like[4 + r] = sl->bias[r];
    const int64_t want[5] = {0, b->params.B, b->params.H, b->params.Sq, b->params.Skv};
    for (int k = 0; k < g->tensors[sl->bias[r]].ndims; k++) {
      int ax = sl->bias_axis[r][k];
      int w = ax == DOM_B ? 1 : ax == DOM_H ? 2 : ax == DOM_I ? 3 : ax == DOM_J ? 4 : 0;
      if (w && b->shape[sl->bias[r]][k] != want[w])
        return bwd_fail(c, ATTN_ERROR_UNSUPPORTED,
                        "graph '%s': the gradient of '%s' needs its dimension %d to be %lld "
                        "(the scores' %s), not %lld", g->name, g->tensors[sl->bias[r]].name, k,
                        (long long)want[w], w == 1 ? "batch" : w == 2 ? "heads" : w == 3 ? "Sq" : "Skv",
                        (long long)b->shape[sl->bias[r]][k]);
    }
  }
  for (int r = 0; r < 4 + sl->nbias; r++) {
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

/* tm: the main kernel's tensor maps when it takes them (bwd_sm90: a
 * producer warpgroup of 128 threads beyond bwd_threads too), else NULL. */
static attn_status bwd_launch(attn_call *c, const RtDriver *d, CUcontext cu, int which,
                              unsigned gx, unsigned gy, unsigned gz, unsigned smem,
                              attn_params *p, attn_tmaps *tm, CUstream stream) {
  CUfunction fn;
  attn_status st = rt_call_aux_function(c, d, cu, which, &fn);
  if (st) return st;
  void *args[] = {p, tm};
  const unsigned threads = (unsigned)rt_call_kernel(c)->bwd_threads + (tm ? 128u : 0u);
  CUresult r = d->LaunchKernel(fn, gx, gy, gz, threads, 1, 1, smem, stream, args, NULL);
  if (r != CUDA_SUCCESS) {
    st = rt_driver_error(d, r, "cuLaunchKernel", rt_call_error(c));
    sb_printf(rt_call_error(c), " for '%s' (grid %u x %u x %u)",
              rt_call_kernel(c)->bwd_entry[which], gx, gy, gz);
  }
  return st;
}

/* bwd_sm90's persistent grid: min(items, SMs, ATTN_BWD_CTAS) CTAs over
 * the grid's items, and the work queue in p (zeroed once, when allocated;
 * each launch leaves it zero). */
static attn_status bwd_main_grid(attn_call *c, const RtDriver *d, CUdevice dev, attn_params *p,
                                 unsigned grid[3], CUstream s) {
  unsigned long long cap = 0;
  const char *env = getenv("ATTN_BWD_CTAS");
  if (env) {
    char *end;
    long v = strtol(env, &end, 10);
    if (*env && !*end && v > 0) cap = (unsigned long long)v;
  }
  if (!rt_persistent_grid(d, dev, grid, cap)) return ATTN_SUCCESS; /* one CTA per item, no queue */
  RtBwdScratch *sc = bwd_scratch(c);
  if (!sc) return bwd_fail(c, ATTN_ERROR_OUT_OF_MEMORY, "out of memory");
  const bool fresh = sc->bytes[BWD_QUEUE] == 0;
  attn_status st = bwd_ensure(c, d, BWD_QUEUE, 2 * sizeof(unsigned));
  if (st) return st;
  if (fresh) {
    CUresult r = d->MemsetD32Async(sc->buf[BWD_QUEUE], 0, 2, s);
    if (r != CUDA_SUCCESS) return rt_driver_error(d, r, "cuMemsetD32Async", rt_call_error(c));
  }
  p->tile_queue = (unsigned *)(uintptr_t)sc->buf[BWD_QUEUE];
  return ATTN_SUCCESS;
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
                    "graph '%s': the GPU backward computes the gradients of q, k, v and of at "
                    "most %d f32/bf16/f16 biases read as t[b, h, i, j]; '%s' (%s:%d:%d) is "
                    "declared with grad", g->name, BWD_MAX_BIAS, g->tensors[bad].name,
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
  const bool det = *rt_call_bwd_scratch(c) && (*rt_call_bwd_scratch(c))->deterministic;
  if (det && (st = bwd_check_det_dims(c))) return st;
  CUstream s = (CUstream)stream;
  /* Per query row {delta, lse * log2(e)} (the row pass writes both). */
  if ((st = bwd_ensure(c, d, BWD_DELTA, rows * 8)) ||
      (!det && (st = bwd_ensure(c, d, BWD_DQA, rows * (size_t)dqk * 4))))
    return st;
  RtBwdScratch *sc = *rt_call_bwd_scratch(c);
  bwd_set_dense(&p, sl.delta, sc->buf[BWD_DELTA], p.H, p.Sq, 2);
  if (det) /* the null accumulator is the kernels' deterministic flag */
    memset(&p.t[sl.dqa], 0, sizeof p.t[sl.dqa]);
  else
    bwd_set_dense(&p, sl.dqa, sc->buf[BWD_DQA], p.H, p.Sq, dqk);
  const int acc_slot[2] = {sl.dka, sl.dva}, acc_buf[2] = {BWD_DKA, BWD_DVA};
  const int acc_d[2] = {dqk, dv};
  for (int r = 0; r < 2; r++) {
    if (acc_slot[r] < 0) continue;
    if (gqa && det) {
      /* One slice per query head, every row stored once: no zeroing. */
      size_t n = rows / (size_t)p.Sq * (size_t)p.Skv * (size_t)acc_d[r];
      if ((st = bwd_ensure(c, d, acc_buf[r], n * 4))) return st;
      bwd_set_dense(&p, acc_slot[r], sc->buf[acc_buf[r]], p.H, p.Skv, acc_d[r]);
    } else if (gqa) {
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
  bool finish = sl.dq >= 0 && !det; /* the convert pass has work */
  for (int r = 0; r < sl.nbias; r++) {
    if (sl.bias_mode[r] == BWD_BIAS_DIRECT) continue;
    finish = true;
    size_t n = 1;
    if (det) {
      n = rows * (size_t)p.Skv;
    } else {
      for (int x = 0; x < g->tensors[sl.bias[r]].ndims; x++)
        n *= (size_t)b->shape[sl.bias[r]][x];
    }
    if (n == 0) n = 1;
    if ((st = bwd_ensure(c, d, BWD_BIAS0 + r, n * 4))) return st;
    CUresult rr = d->MemsetD32Async(sc->buf[BWD_BIAS0 + r], 0, n, s);
    if (rr != CUDA_SUCCESS) return rt_driver_error(d, rr, "cuMemsetD32Async", err);
    if (det)
      bwd_set_dense(&p, sl.dbias_acc[r], sc->buf[BWD_BIAS0 + r], p.H, p.Sq, p.Skv);
    else
      bwd_set_dense(&p, sl.dbias_acc[r], sc->buf[BWD_BIAS0 + r], 1, 1, (int)n);
  }
  if ((st = rt_call_prep(c, d, cu, &p, stream))) return st; /* separable masks' tile ranges */
  const unsigned row_ctas = ATTN_BWD_ROWS_PER_CTA; /* rows per CTA of the row passes */
  const unsigned gq = (unsigned)((p.Sq + row_ctas - 1) / row_ctas);
  unsigned gk = (unsigned)((p.Skv + k->bwd_block_n - 1) / k->bwd_block_n);
  if (det && sl.dq >= 0) /* the dQ CTAs: bwd80_dq_tile, 64 queries each */
    gk += (unsigned)((p.Sq + 63) / 64);
  const unsigned gkv = (unsigned)((p.Skv + row_ctas - 1) / row_ctas);
  attn_tmaps tmaps;
  const bool tma = k->bwd_tma_rows > 0;
  if (tma && (st = rt_tmap_fill_bwd(d, g, k, sl.o, sl.dout, sl.dqa, &p, &tmaps, err))) return st;
  unsigned main_grid[3] = {gk, (unsigned)p.H, (unsigned)p.B};
  p.tile_queue = NULL; /* (the forward's launches may have left theirs in the block) */
  /* Persistent only with 128-key tiles (D <= 128): split-D's (D 256)
   * measured 7-23% slower persistent (H200, bench/NOTES-sm90.md, session
   * 7), so it keeps one CTA per item. */
  if (tma && !det && k->bwd_block_n == 128 && (st = bwd_main_grid(c, d, dev, &p, main_grid, s)))
    return st;
  if ((st = bwd_launch(c, d, cu, 0, gq, (unsigned)p.H, (unsigned)p.B, 0, &p, NULL, s)) ||
      (st = bwd_launch(c, d, cu, 1, main_grid[0], main_grid[1], main_grid[2],
                       (unsigned)k->bwd_smem_bytes, &p, tma ? &tmaps : NULL, s)))
    return st;
  if (finish &&
      (st = bwd_launch(c, d, cu, 2, gq, (unsigned)p.H, (unsigned)p.B, 0, &p, NULL, s)))
    return st;
  if (gqa && (sl.dk >= 0 || sl.dv >= 0) &&
      (st = bwd_launch(c, d, cu, 3, gkv, (unsigned)p.Hk, (unsigned)p.B, 0, &p, NULL, s)))
    return st;
  return ATTN_SUCCESS;
}
