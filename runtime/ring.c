/* ring.c: context parallelism, ring attention over a transport (attn.h,
 * "context parallelism: the ring"; the protocol in docs/ring.md).
 *
 *   forward, per rank:  o_acc = 0, lse = -inf
 *     for step 0 .. W-1 (holding the k/v shard of rank - step):
 *       post the shard's send to the next rank and the receive of the
 *         previous rank's into the other buffer (the ring's stream)
 *       for each (query piece, key piece): the graph with q0, k0 -> a
 *         partial (o, lse), folded into (o_acc, lse) (attn_ring_merge)
 *       wait for the receive
 *     o = o_acc in o's type
 *   backward, per rank: dq_acc = 0; the travelling (k, v, dk_acc, dv_acc)
 *     for step 0 .. W-1:
 *       post k/v's exchange (not on the last step: the shard is home)
 *       for each piece pair: the graph's backward with the merged o and
 *         lse -> (dq, dk, dv) of the pair, added into dq_acc, dk_acc, dv_acc
 *       post dk_acc/dv_acc's exchange; wait for both
 *     after W moves each rank holds its own shard's sums: dq, dk, dv stored
 *
 * The caller's stream runs the compute; the exchanges run on the ring's
 * stream, ordered by events: a receive into a buffer waits for the compute
 * that last read it, the compute of a step waits for its receive. The
 * partials are the graph's outputs (o's type), the sums f32. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

/* This rank's shards, by role. */
enum { R_Q, R_K, R_V, R_O, R_LSE, R_DO, R_DQ, R_DK, R_DV, R_N };
/* Device buffers the ring owns, grown on demand, kept until destroy. */
enum {
  B_OACC,          /* f32 o sum */
  B_OPART,         /* a pair's o (o's type) */
  B_LPART,         /* a pair's lse */
  B_KV0, B_KV1,    /* received k then v shards (two, alternating) */
  B_DQACC,         /* f32 */
  B_DQS, B_DKS, B_DVS, /* a pair's gradients (q's, k's, v's types) */
  B_DKV0, B_DKV1,  /* travelling f32 dk then dv sums (two, alternating) */
  B_N
};

typedef struct RingShard {
  bool bound;
  void *ptr;
  attn_dtype dtype;
  int ndim;
  int64_t shape[IR_MAX_RANK];
} RingShard;

/* A binding passed to every launch as the caller made it. */
typedef struct RingExtra {
  char *name;
  int kind; /* 0 tensor, else the scalar's ATTN_ dtype */
  void *ptr;
  attn_dtype dtype;
  int ndim;
  int64_t shape[IR_MAX_RANK], strides[IR_MAX_RANK];
  bool has_strides;
  float f;
  int32_t i;
  uint64_t u;
} RingExtra;

typedef struct RingBuf {
  CUdeviceptr ptr;
  size_t bytes;
} RingBuf;

struct attn_ring {
  attn_graph *g;
  attn_context *ctx;
  attn_ring_transport t;
  void (*transport_free)(void *user);
  attn_ring_layout layout;
  const char *name[R_N]; /* binding names ("do" etc. owned: name_own) */
  char *name_own[R_N];
  RingShard shard[R_N];
  RingExtra *extra;
  int nextra;
  attn_call *call;
  const RtDriver *d;
  CUcontext cu;
  CUstream comm;
  CUevent ready, freed[2], arrived;
  const RtPartialKernels *kernels; /* the context's (partials.c) */
  RingBuf buf[B_N];
};

/* One contiguous piece of a shard: rows lo .. lo + m - 1, at global
 * position g0. */
typedef struct RingPiece {
  int64_t lo, m, g0;
} RingPiece;

static int ring_pieces(attn_ring_layout layout, int rank, int world, int64_t n,
                       RingPiece out[2]) {
  if (layout == ATTN_RING_CONTIGUOUS) {
    out[0] = (RingPiece){0, n, (int64_t)rank * n};
    return 1;
  }
  const int64_t c = n / 2;
  out[0] = (RingPiece){0, c, (int64_t)rank * c};
  out[1] = (RingPiece){c, c, (int64_t)(2 * world - 1 - rank) * c};
  return 2;
}

static size_t ring_elem(attn_dtype t) { return t == ATTN_F32 || t == ATTN_I32 ? 4 : t == ATTN_U64 ? 8 : t == ATTN_F16 || t == ATTN_BF16 ? 2 : 1; }

static int64_t shard_numel(const RingShard *s) {
  int64_t n = 1;
  for (int k = 0; k < s->ndim; k++) n *= s->shape[k];
  return n;
}

static size_t shard_bytes(const RingShard *s) { return (size_t)shard_numel(s) * ring_elem(s->dtype); }

/* Whether a role's rows are queries (cut by q's pieces) or keys. */
static bool shard_on_q_side(int role) {
  return role == R_Q || role == R_O || role == R_LSE || role == R_DO || role == R_DQ;
}

/* The sequence dim: the second-to-last, the last for lse. */
static int shard_seq_axis(int role, const RingShard *s) { return role == R_LSE ? s->ndim - 1 : s->ndim - 2; }

/* The shard as [P][S][D]. */
static void shard_psd(int role, const RingShard *s, int64_t *P, int64_t *S, int64_t *D) {
  const int a = shard_seq_axis(role, s);
  *P = 1;
  for (int k = 0; k < a; k++) *P *= s->shape[k];
  *S = s->shape[a];
  *D = role == R_LSE ? 1 : s->shape[s->ndim - 1];
}

/* ------------------------------------------------------------ the graph */

__attribute__((format(printf, 2, 3)))
static attn_status ring_refuse(attn_ring *r, const char *fmt, ...) {
  char why[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return rt_fail(r->ctx, ATTN_ERROR_UNSUPPORTED, "ring attention over graph '%s': %s (docs/ring.md)",
                 r->g->ir->name, why);
}

static const char *dim_name(const IrGraph *g, const IrTensor *t, int d) {
  return d >= 0 && d < t->ndims && t->dim_sym[d] >= 0 ? g->dims[t->dim_sym[d]].name : NULL;
}

/* The graph's roles and the rules of attn.h: dense q, k, v, o with the
 * sequence second to last and named, lse over o's rows, i32 q0 and k0. */
static attn_status ring_check_graph(attn_ring *r) {
  const IrGraph *g = r->g->ir;
  BwdSlots sl;
  if (bwd_slots(g, &sl) < 0 || sl.lse < 0 || sl.o < 0)
    return ring_refuse(r, "the graph needs %s%s", "`output lse = logsumexp(s)`", " of its scores");
  const int idx[5] = {g->q, g->k, g->v, sl.o, sl.lse};
  for (int k = 0; k < 5; k++) {
    const IrTensor *t = &g->tensors[idx[k]];
    r->name[k] = t->name;
    if (t->paged || t->packed)
      return ring_refuse(r, "'%s' is %s; the ring shards dense tensors", t->name,
                         t->paged ? "a paged cache" : "packed");
    const int axis = k == R_LSE ? t->ndims - 1 : t->ndims - 2;
    if (t->ndims < (k == R_LSE ? 1 : 2) || !dim_name(g, t, axis))
      return ring_refuse(r, "'%s' needs its sequence length as a named dimension %s", t->name,
                         k == R_LSE ? "last" : "second to last");
  }
  const IrTensor *q = &g->tensors[g->q], *o = &g->tensors[sl.o],
                 *lse = &g->tensors[sl.lse];
  const char *sq = dim_name(g, q, q->ndims - 2);
  if (strcmp(dim_name(g, o, o->ndims - 2), sq) || strcmp(dim_name(g, lse, lse->ndims - 1), sq))
    return ring_refuse(r, "'%s' and lse need q's sequence dimension '%s'", o->name, sq);
  if (o->type != DT_F32 && o->type != DT_BF16 && o->type != DT_F16)
    return ring_refuse(r, "'%s' is %s; the ring merges f32, bf16 or f16 outputs", o->name,
                       dtype_name(o->type));
  static const char *const pos[2] = {"q0", "k0"};
  for (int p = 0; p < 2; p++) {
    int s = 0;
    while (s < g->nscalars && strcmp(g->scalars[s].name, pos[p])) s++;
    if (s == g->nscalars || g->scalars[s].type != DT_I32)
      return ring_refuse(r, "the graph needs an i32 scalar '%s' added to %s in its mask", pos[p],
                         p ? "j (the shard's first global key position)"
                           : "i (the shard's first global query position)");
  }
  /* The backward's names, "d" + the name, when it has one. */
  const int of[4] = {sl.o, g->q, g->k, g->v};
  for (int k2 = 0; k2 < 4; k2++) {
    const char *base = g->tensors[of[k2]].name;
    size_t len = strlen(base);
    char *nm = mem_alloc(len + 2);
    if (!nm) return rt_fail(r->ctx, ATTN_ERROR_OUT_OF_MEMORY, "out of memory");
    nm[0] = 'd';
    memcpy(nm + 1, base, len + 1);
    r->name_own[R_DO + k2] = nm;
    r->name[R_DO + k2] = nm;
  }
  return ATTN_SUCCESS;
}

/* ----------------------------------------------------- the ring's kernels */

static attn_status ring_launch(attn_ring *r, RtPartialKernel which, long long threads, void **args,
                               CUstream s) {
  return rt_partial_launch(r->ctx, r->d, r->kernels, which, threads, args, s);
}

/* (o_acc, lse_acc) rows of piece pc folded with the pair's partial. */
static attn_status ring_merge(attn_ring *r, CUstream s, const RingPiece *pc) {
  int64_t P, S, D;
  shard_psd(R_O, &r->shard[R_O], &P, &S, &D);
  CUdeviceptr oacc = r->buf[B_OACC].ptr, opart = r->buf[B_OPART].ptr, lpart = r->buf[B_LPART].ptr;
  void *lse = r->shard[R_LSE].ptr;
  int type = r->shard[R_O].dtype;
  long long lP = P, lS = S, lD = D, lo = pc->lo, m = pc->m;
  void *args[] = {&oacc, &lse, &opart, &type, &lpart, &lP, &lS, &lD, &lo, &m};
  return ring_launch(r, RT_PARTIAL_MERGE, P * m * 32, args, s);
}

/* acc's rows of piece pc += part's (a gradient of one pair). */
static attn_status ring_add(attn_ring *r, CUstream s, CUdeviceptr acc, CUdeviceptr part,
                            const RingShard *like, int role, const RingPiece *pc) {
  int64_t P, S, D;
  shard_psd(role, like, &P, &S, &D);
  int type = like->dtype;
  long long lP = P, lS = S, lD = D, lo = pc->lo, m = pc->m;
  void *args[] = {&acc, &part, &type, &lP, &lS, &lD, &lo, &m};
  return ring_launch(r, RT_PARTIAL_ADD, P * m * D, args, s);
}

static attn_status ring_store(attn_ring *r, CUstream s, const RingShard *out, CUdeviceptr src) {
  void *dst = out->ptr;
  int type = out->dtype;
  long long n = shard_numel(out);
  void *args[] = {&dst, &type, &src, &n};
  return ring_launch(r, RT_PARTIAL_STORE, n, args, s);
}

/* ------------------------------------------------------------- buffers */

static attn_status ring_buffer(attn_ring *r, int which, size_t bytes) {
  RingBuf *b = &r->buf[which];
  if (b->bytes >= bytes) return ATTN_SUCCESS;
  if (b->ptr) r->d->MemFree(b->ptr);
  *b = (RingBuf){0};
  CUresult cr = r->d->MemAlloc(&b->ptr, bytes ? bytes : 16);
  if (cr != CUDA_SUCCESS) {
    b->ptr = 0;
    attn_status st = rt_driver_error(r->d, cr, "cuMemAlloc", &r->ctx->error);
    sb_printf(&r->ctx->error, " (%zu bytes for the ring over graph '%s')", bytes, r->g->ir->name);
    return st;
  }
  b->bytes = bytes;
  return ATTN_SUCCESS;
}

static attn_status ring_fill(attn_ring *r, CUdeviceptr p, unsigned bits, size_t words, CUstream s) {
  if (!words) return ATTN_SUCCESS;
  CUresult cr = r->d->MemsetD32Async(p, bits, words, s);
  return cr == CUDA_SUCCESS ? ATTN_SUCCESS : rt_driver_error(r->d, cr, "cuMemsetD32Async", &r->ctx->error);
}

/* --------------------------------------------------------- the launches */

#define RING_CU(r, call, what)                                                   \
  do {                                                                           \
    CUresult cr_ = (call);                                                       \
    if (cr_ != CUDA_SUCCESS) return rt_driver_error((r)->d, cr_, what, &(r)->ctx->error); \
  } while (0)

/* The shards bound and consistent: which roles the pass needs. */
static attn_status ring_check_shards(attn_ring *r, bool backward) {
  const int need = backward ? R_N : R_DO;
  for (int k = 0; k < need; k++)
    if (!r->shard[k].bound)
      return rt_fail(r->ctx, ATTN_ERROR_INCOMPLETE, "ring attention over graph '%s': '%s' is not bound",
                     r->g->ir->name, r->name[k]);
  const int64_t nq = r->shard[R_Q].shape[r->shard[R_Q].ndim - 2];
  const int64_t nk = r->shard[R_K].shape[r->shard[R_K].ndim - 2];
  if (r->layout == ATTN_RING_ZIGZAG && (nq % 2 || nk % 2))
    return rt_fail(r->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "ring attention: a zigzag shard has an even length (two equal chunks), not %lld",
                   (long long)(nq % 2 ? nq : nk));
  for (int k = 0; k < need; k++) {
    const RingShard *s = &r->shard[k];
    const bool qside = shard_on_q_side(k);
    const int64_t n = s->shape[shard_seq_axis(k, s)];
    if (n != (qside ? nq : nk))
      return rt_fail(r->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                     "ring attention: '%s' has %lld positions, %s has %lld", r->name[k],
                     (long long)n, qside ? "q" : "k", (long long)(qside ? nq : nk));
    if ((k == R_O || k >= R_DQ) && s->dtype != ATTN_F32 && s->dtype != ATTN_BF16 &&
        s->dtype != ATTN_F16)
      return rt_fail(r->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                     "ring attention: '%s' is neither f32, bf16 nor f16", r->name[k]);
  }
  /* lse's rows are o's: the same leading dims. */
  const RingShard *o = &r->shard[R_O], *l = &r->shard[R_LSE];
  bool same = l->ndim == o->ndim - 1 && l->dtype == ATTN_F32;
  for (int k = 0; same && k < l->ndim; k++) same = l->shape[k] == o->shape[k];
  if (!same)
    return rt_fail(r->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "ring attention: '%s' must be f32 over the rows of '%s' (its shape without the last dim)",
                   r->name[R_LSE], r->name[R_O]);
  return ATTN_SUCCESS;
}

/* The call bound for one pair: the caller's other bindings, then role's
 * pieces (views into ptr[role]: the shard's dense strides, rows from the
 * piece's first) and the two positions. ptr[k] 0: not bound. */
static attn_status ring_bind_pair(attn_ring *r, const CUdeviceptr ptr[R_N], const RingPiece *qp,
                                  const RingPiece *kp) {
  attn_call *c = r->call;
  attn_status st = attn_call_clear_bindings(c);
  for (int e = 0; e < r->nextra && !st; e++) {
    const RingExtra *x = &r->extra[e];
    switch (x->kind) {
    case 0:
      st = attn_call_bind_tensor(c, x->name, x->ptr, x->dtype, x->ndim, x->shape,
                                 x->has_strides ? x->strides : NULL);
      break;
    case ATTN_F32: st = attn_call_bind_f32(c, x->name, x->f); break;
    case ATTN_I32: st = attn_call_bind_i32(c, x->name, x->i); break;
    case ATTN_U64: st = attn_call_bind_u64(c, x->name, x->u); break;
    default: st = attn_call_bind_bool(c, x->name, (int)x->i); break;
    }
  }
  for (int k = 0; k < R_N && !st; k++) {
    if (!ptr[k]) continue;
    const RingShard *s = &r->shard[k];
    const bool qside = shard_on_q_side(k);
    const RingPiece *pc = qside ? qp : kp;
    const int a = shard_seq_axis(k, s);
    int64_t shape[IR_MAX_RANK], strides[IR_MAX_RANK], acc = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
      strides[d] = acc;
      shape[d] = d == a ? pc->m : s->shape[d];
      acc *= s->shape[d];
    }
    void *p = (void *)(uintptr_t)(ptr[k] + (CUdeviceptr)(pc->lo * strides[a]) * ring_elem(s->dtype));
    st = attn_call_bind_tensor(c, r->name[k], pc->m ? p : NULL, s->dtype, s->ndim, shape, strides);
  }
  if (!st) st = attn_call_bind_i32(r->call, "q0", (int32_t)qp->g0);
  if (!st) st = attn_call_bind_i32(r->call, "k0", (int32_t)kp->g0);
  return st;
}

/* The driver, the ring's CUDA context current, its kernels loaded. */
static attn_status ring_begin(attn_ring *r) {
  CUcontext cu;
  CUdevice dev;
  attn_status st = rt_driver_current(r->d, &cu, &dev, &r->ctx->error);
  if (st) return st;
  if (cu != r->cu)
    return rt_fail(r->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "ring attention: the current CUDA context is not the one the ring was made in");
  return rt_partial_kernels(r->ctx, r->d, dev, &r->kernels);
}

/* Posts the exchange of count buffers on the ring's stream, after
 * `after` (recorded on the compute stream; NULL: none). */
static attn_status ring_exchange(attn_ring *r, CUevent after, int count, CUdeviceptr *send,
                                 CUdeviceptr *recv, const size_t *bytes) {
  if (after) RING_CU(r, r->d->StreamWaitEvent(r->comm, after, 0), "cuStreamWaitEvent");
  void *sp[4], *rp[4];
  for (int k = 0; k < count; k++) {
    sp[k] = (void *)(uintptr_t)send[k];
    rp[k] = (void *)(uintptr_t)recv[k];
  }
  char msg[256] = "";
  if (r->t.exchange(r->t.user, count, sp, rp, bytes, r->comm, msg, sizeof msg))
    return rt_fail(r->ctx, ATTN_ERROR_CUDA, "ring attention: the exchange with ranks %d and %d failed: %s",
                   (r->t.rank + 1) % r->t.world, (r->t.rank + r->t.world - 1) % r->t.world,
                   msg[0] ? msg : "(no message)");
  return ATTN_SUCCESS;
}

/* The compute stream waits for what the ring's stream has posted. */
static attn_status ring_wait_arrival(attn_ring *r, CUstream s) {
  RING_CU(r, r->d->EventRecord(r->arrived, r->comm), "cuEventRecord");
  RING_CU(r, r->d->StreamWaitEvent(s, r->arrived, 0), "cuStreamWaitEvent");
  return ATTN_SUCCESS;
}

/* Posts step's key/value exchange: the held shard (cur: k, then v) to the
 * next rank, the previous rank's into buffer B_KV0 + step % 2 (next: where
 * its k and v will be), which the previous step computed on (so after
 * `freed`, recorded at that step's end; step 0 waits for the caller's
 * shards and the fills, step 1's buffer is fresh). */
static attn_status ring_post_kv(attn_ring *r, int step, const CUdeviceptr cur[2],
                                CUdeviceptr next[2], size_t kb, size_t vb) {
  const int into = B_KV0 + step % 2;
  next[0] = r->buf[into].ptr;
  next[1] = r->buf[into].ptr + kb;
  CUdeviceptr send[2] = {cur[0], cur[1]};
  const size_t bytes[2] = {kb, vb};
  CUevent after = step == 0 ? r->ready : step >= 2 ? r->freed[step % 2] : NULL;
  return ring_exchange(r, after, 2, send, next, bytes);
}

static attn_status ring_forward_impl(attn_ring *r, CUstream s) {
  attn_status st;
  if ((st = ring_begin(r)) || (st = ring_check_shards(r, false))) return st;
  const int rank = r->t.rank, world = r->t.world;
  const RingShard *k = &r->shard[R_K], *v = &r->shard[R_V], *o = &r->shard[R_O],
                  *lse = &r->shard[R_LSE];
  const size_t kb = shard_bytes(k), vb = shard_bytes(v);
  if ((st = ring_buffer(r, B_OACC, (size_t)shard_numel(o) * 4)) ||
      (st = ring_buffer(r, B_OPART, shard_bytes(o))) ||
      (st = ring_buffer(r, B_LPART, shard_bytes(lse))))
    return st;
  if (world > 1 && ((st = ring_buffer(r, B_KV0, kb + vb)) || (st = ring_buffer(r, B_KV1, kb + vb))))
    return st;
  if ((st = ring_fill(r, r->buf[B_OACC].ptr, 0, (size_t)shard_numel(o), s)) ||
      (st = ring_fill(r, (CUdeviceptr)(uintptr_t)lse->ptr, 0xff800000u, (size_t)shard_numel(lse), s)))
    return st;
  RING_CU(r, r->d->EventRecord(r->ready, s), "cuEventRecord");
  RingPiece qp[2], kp[2];
  const int nqp = ring_pieces(r->layout, rank, world, r->shard[R_Q].shape[r->shard[R_Q].ndim - 2], qp);
  /* The held k and v shards, and where the next ones arrive. */
  CUdeviceptr cur[2] = {(CUdeviceptr)(uintptr_t)k->ptr, (CUdeviceptr)(uintptr_t)v->ptr}, next[2];
  for (int step = 0; step < world; step++) {
    const int src = (rank - step + world) % world;
    const bool more = step + 1 < world;
    if (more && (st = ring_post_kv(r, step, cur, next, kb, vb))) return st;
    const int nkp = ring_pieces(r->layout, src, world, k->shape[k->ndim - 2], kp);
    for (int a = 0; a < nqp; a++)
      for (int b = 0; b < nkp; b++) {
        CUdeviceptr ptr[R_N] = {0};
        ptr[R_Q] = (CUdeviceptr)(uintptr_t)r->shard[R_Q].ptr;
        ptr[R_K] = cur[0];
        ptr[R_V] = cur[1];
        ptr[R_O] = r->buf[B_OPART].ptr;
        ptr[R_LSE] = r->buf[B_LPART].ptr;
        if ((st = ring_bind_pair(r, ptr, &qp[a], &kp[b])) || (st = attn_call_launch(r->call, s)) ||
            (st = ring_merge(r, s, &qp[a])))
          return st;
      }
    if (more) {
      RING_CU(r, r->d->EventRecord(r->freed[(step + 1) % 2], s), "cuEventRecord");
      if ((st = ring_wait_arrival(r, s))) return st;
      cur[0] = next[0];
      cur[1] = next[1];
    }
  }
  return ring_store(r, s, o, r->buf[B_OACC].ptr);
}

static attn_status ring_backward_impl(attn_ring *r, CUstream s) {
  attn_status st;
  if ((st = ring_begin(r)) || (st = ring_check_shards(r, true))) return st;
  char why[512];
  if (!attn_graph_has_backward(r->g, why, sizeof why))
    return rt_fail(r->ctx, ATTN_ERROR_UNSUPPORTED, "ring attention's backward over graph '%s': %s",
                   r->g->ir->name, why);
  const int rank = r->t.rank, world = r->t.world;
  const RingShard *q = &r->shard[R_Q], *k = &r->shard[R_K], *v = &r->shard[R_V];
  const size_t kb = shard_bytes(k), vb = shard_bytes(v);
  const size_t kn = (size_t)shard_numel(k), vn = (size_t)shard_numel(v);
  if ((st = ring_buffer(r, B_DQACC, (size_t)shard_numel(q) * 4)) ||
      (st = ring_buffer(r, B_DQS, shard_bytes(&r->shard[R_DQ]))) ||
      (st = ring_buffer(r, B_DKS, shard_bytes(&r->shard[R_DK]))) ||
      (st = ring_buffer(r, B_DVS, shard_bytes(&r->shard[R_DV]))) ||
      (st = ring_buffer(r, B_DKV0, 4 * (kn + vn))))
    return st;
  if (world > 1 && ((st = ring_buffer(r, B_KV0, kb + vb)) || (st = ring_buffer(r, B_KV1, kb + vb)) ||
                    (st = ring_buffer(r, B_DKV1, 4 * (kn + vn)))))
    return st;
  if ((st = ring_fill(r, r->buf[B_DQACC].ptr, 0, (size_t)shard_numel(q), s)) ||
      (st = ring_fill(r, r->buf[B_DKV0].ptr, 0, kn + vn, s)))
    return st;
  RING_CU(r, r->d->EventRecord(r->ready, s), "cuEventRecord");
  RingPiece qp[2], kp[2];
  const int nqp = ring_pieces(r->layout, rank, world, q->shape[q->ndim - 2], qp);
  /* The held k and v shards, and where the next ones arrive. */
  CUdeviceptr cur[2] = {(CUdeviceptr)(uintptr_t)k->ptr, (CUdeviceptr)(uintptr_t)v->ptr}, next[2];
  CUdeviceptr acc = r->buf[B_DKV0].ptr; /* the travelling dk sums, then dv's */
  for (int step = 0; step < world; step++) {
    const int src = (rank - step + world) % world;
    const bool more = step + 1 < world;
    if (more && (st = ring_post_kv(r, step, cur, next, kb, vb))) return st;
    const int nkp = ring_pieces(r->layout, src, world, k->shape[k->ndim - 2], kp);
    for (int a = 0; a < nqp; a++)
      for (int b = 0; b < nkp; b++) {
        CUdeviceptr ptr[R_N];
        for (int x = 0; x < R_N; x++) ptr[x] = (CUdeviceptr)(uintptr_t)r->shard[x].ptr;
        ptr[R_K] = cur[0];
        ptr[R_V] = cur[1];
        ptr[R_DQ] = r->buf[B_DQS].ptr;
        ptr[R_DK] = r->buf[B_DKS].ptr;
        ptr[R_DV] = r->buf[B_DVS].ptr;
        if ((st = ring_bind_pair(r, ptr, &qp[a], &kp[b])) ||
            (st = attn_call_launch_backward(r->call, s)) ||
            (st = ring_add(r, s, r->buf[B_DQACC].ptr, r->buf[B_DQS].ptr, &r->shard[R_DQ], R_DQ, &qp[a])) ||
            (st = ring_add(r, s, acc, r->buf[B_DKS].ptr, &r->shard[R_DK], R_DK, &kp[b])) ||
            (st = ring_add(r, s, acc + 4 * kn, r->buf[B_DVS].ptr, &r->shard[R_DV], R_DV, &kp[b])))
          return st;
      }
    if (world > 1) {
      /* The sums move on with their shard (W moves bring them home). */
      RING_CU(r, r->d->EventRecord(r->freed[(step + 1) % 2], s), "cuEventRecord");
      const CUdeviceptr next_acc = r->buf[acc == r->buf[B_DKV0].ptr ? B_DKV1 : B_DKV0].ptr;
      CUdeviceptr send[2] = {acc, acc + 4 * kn}, recv[2] = {next_acc, next_acc + 4 * kn};
      const size_t bytes[2] = {4 * kn, 4 * vn};
      if ((st = ring_exchange(r, r->freed[(step + 1) % 2], 2, send, recv, bytes)) ||
          (st = ring_wait_arrival(r, s)))
        return st;
      acc = next_acc;
      if (more) {
        cur[0] = next[0];
        cur[1] = next[1];
      }
    }
  }
  if ((st = ring_store(r, s, &r->shard[R_DQ], r->buf[B_DQACC].ptr)) ||
      (st = ring_store(r, s, &r->shard[R_DK], acc)))
    return st;
  return ring_store(r, s, &r->shard[R_DV], acc + 4 * kn);
}

/* ------------------------------------------------------------ the API */

void attn_ring_destroy(attn_ring *r) {
  if (!r) return;
  if (r->d) {
    for (int b = 0; b < B_N; b++)
      if (r->buf[b].ptr) r->d->MemFree(r->buf[b].ptr);
    CUevent ev[4] = {r->ready, r->freed[0], r->freed[1], r->arrived};
    for (int e = 0; e < 4; e++)
      if (ev[e]) r->d->EventDestroy(ev[e]);
    if (r->comm) r->d->StreamDestroy(r->comm);
  }
  if (r->transport_free) r->transport_free(r->t.user);
  attn_call_destroy(r->call);
  for (int k = 0; k < R_N; k++) mem_free(r->name_own[k]);
  for (int e = 0; e < r->nextra; e++) mem_free(r->extra[e].name);
  mem_free(r->extra);
  mem_free(r);
}

/* The graph checked, the call made, the ring's stream and events. */
static attn_status ring_ready(attn_ring *r, attn_ring_layout layout) {
  attn_context *ctx = r->ctx;
  if (layout != ATTN_RING_CONTIGUOUS && layout != ATTN_RING_ZIGZAG)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT, "attn_ring_create: layout %d is neither "
                   "ATTN_RING_CONTIGUOUS nor ATTN_RING_ZIGZAG", (int)layout);
  attn_status st = ring_check_graph(r);
  if (st) return st;
  if ((st = attn_call_create(r->g, &r->call))) return st;
  if (!(r->d = rt_driver(&st, &ctx->error))) return st;
  CUdevice dev;
  if ((st = rt_driver_current(r->d, &r->cu, &dev, &ctx->error))) return st;
  RING_CU(r, r->d->StreamCreate(&r->comm, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUevent *ev[4] = {&r->ready, &r->freed[0], &r->freed[1], &r->arrived};
  for (int e = 0; e < 4; e++)
    RING_CU(r, r->d->EventCreate(ev[e], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  return ATTN_SUCCESS;
}

static attn_status ring_create_impl(attn_graph *g, const attn_ring_transport *t,
                                    void (*transport_free)(void *), attn_ring_layout layout,
                                    attn_ring **out) {
  attn_context *ctx = g->m->ctx;
  rt_clear_error(ctx);
  *out = NULL;
  if (!t || !t->exchange || t->world < 1 || t->rank < 0 || t->rank >= t->world) {
    if (transport_free && t) transport_free(t->user);
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_ring_create: the transport needs an exchange function and 0 <= rank < world");
  }
  attn_ring *r = mem_calloc(1, sizeof *r);
  if (!r) {
    if (transport_free) transport_free(t->user);
    return rt_fail(ctx, ATTN_ERROR_OUT_OF_MEMORY, "out of memory");
  }
  *out = r;
  r->g = g;
  r->ctx = ctx;
  r->t = *t;
  r->transport_free = transport_free;
  r->layout = layout;
  attn_status st = ring_ready(r, layout);
  if (st) {
    attn_ring_destroy(r); /* frees the transport's user data too */
    *out = NULL;
  }
  return st;
}

attn_status rt_ring_create(attn_graph *g, const attn_ring_transport *t,
                           void (*transport_free)(void *), attn_ring_layout layout,
                           attn_ring **out) {
  if (!g) {
    if (transport_free && t) transport_free(t->user);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  if (!out) {
    if (transport_free && t) transport_free(t->user);
    return rt_fail(g->m->ctx, ATTN_ERROR_INVALID_ARGUMENT, "attn_ring_create: out is NULL");
  }
  RT_CALL_OUT(g->m->ctx, ring_create_impl(g, t, transport_free, layout, out), out,
              attn_ring_destroy);
}

attn_status attn_ring_create(attn_graph *g, const attn_ring_transport *t,
                             attn_ring_layout layout, attn_ring **out) {
  return rt_ring_create(g, t, NULL, layout, out);
}

static int ring_role(const attn_ring *r, const char *name) {
  for (int k = 0; k < R_N; k++)
    if (r->name[k] && strcmp(r->name[k], name) == 0) return k;
  return -1;
}

/* The caller's binding of name, replacing an earlier one. */
static RingExtra *ring_extra(attn_ring *r, const char *name) {
  for (int e = 0; e < r->nextra; e++)
    if (strcmp(r->extra[e].name, name) == 0) return &r->extra[e];
  RingExtra *grown = mem_realloc(r->extra, (size_t)(r->nextra + 1) * sizeof *grown);
  if (!grown) return NULL;
  r->extra = grown;
  RingExtra *x = &r->extra[r->nextra];
  *x = (RingExtra){0};
  if (!(x->name = mem_strdup(name))) return NULL;
  r->nextra++;
  return x;
}

static attn_status ring_bind_begin(attn_ring *r, const char *name, const char *fn) {
  if (!r) return ATTN_ERROR_INVALID_ARGUMENT;
  rt_clear_error(r->ctx);
  if (!name) return rt_fail(r->ctx, ATTN_ERROR_INVALID_ARGUMENT, "%s: name is NULL", fn);
  if (!strcmp(name, "q0") || !strcmp(name, "k0"))
    return rt_fail(r->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "%s: '%s' is set by the ring (the shard's global position)", fn, name);
  return ATTN_SUCCESS;
}

static attn_status ring_bind_tensor_impl(attn_ring *r, const char *name, void *ptr,
                                         attn_dtype dtype, int ndim, const int64_t *shape,
                                         const int64_t *strides) {
  attn_status st = ring_bind_begin(r, name, "attn_ring_bind_tensor");
  if (st) return st;
  if (ndim < 1 || ndim > IR_MAX_RANK || !shape)
    return rt_fail(r->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_ring_bind_tensor: '%s' needs 1 to %d dims and a shape", name, IR_MAX_RANK);
  for (int d = 0; d < ndim; d++)
    if (shape[d] < 0)
      return rt_fail(r->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                     "attn_ring_bind_tensor: '%s' has a negative size", name);
  const int role = ring_role(r, name);
  if (role >= 0) {
    if (strides) {
      int64_t acc = 1;
      for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] != 1 && strides[d] != acc)
          return rt_fail(r->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                         "attn_ring_bind_tensor: the ring's shard '%s' must be dense", name);
        acc *= shape[d];
      }
    }
    const int want = role == R_LSE ? 1 : 2;
    if (ndim < want)
      return rt_fail(r->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                     "attn_ring_bind_tensor: '%s' needs at least %d dims", name, want);
    RingShard *s = &r->shard[role];
    *s = (RingShard){true, ptr, dtype, ndim, {0}};
    memcpy(s->shape, shape, (size_t)ndim * sizeof *shape);
    return ATTN_SUCCESS;
  }
  RingExtra *x = ring_extra(r, name);
  if (!x) return rt_fail(r->ctx, ATTN_ERROR_OUT_OF_MEMORY, "out of memory");
  x->kind = 0;
  x->ptr = ptr;
  x->dtype = dtype;
  x->ndim = ndim;
  memcpy(x->shape, shape, (size_t)ndim * sizeof *shape);
  x->has_strides = strides != NULL;
  if (strides) memcpy(x->strides, strides, (size_t)ndim * sizeof *strides);
  return ATTN_SUCCESS;
}

static attn_status ring_bind_scalar(attn_ring *r, const char *name, attn_dtype kind, float f,
                                    int64_t i, uint64_t u, const char *fn) {
  attn_status st = ring_bind_begin(r, name, fn);
  if (st) return st;
  if (ring_role(r, name) >= 0)
    return rt_fail(r->ctx, ATTN_ERROR_INVALID_ARGUMENT, "%s: '%s' is a tensor", fn, name);
  RingExtra *x = ring_extra(r, name);
  if (!x) return rt_fail(r->ctx, ATTN_ERROR_OUT_OF_MEMORY, "out of memory");
  x->kind = kind;
  x->f = f;
  x->i = (int32_t)i;
  x->u = u;
  return ATTN_SUCCESS;
}

attn_status attn_ring_bind_tensor(attn_ring *r, const char *name, void *ptr, attn_dtype dtype,
                                  int ndim, const int64_t *shape, const int64_t *strides) {
  if (!r) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(r->ctx, ring_bind_tensor_impl(r, name, ptr, dtype, ndim, shape, strides));
}
attn_status attn_ring_bind_f32(attn_ring *r, const char *name, float v) {
  if (!r) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(r->ctx, ring_bind_scalar(r, name, ATTN_F32, v, 0, 0, "attn_ring_bind_f32"));
}
attn_status attn_ring_bind_i32(attn_ring *r, const char *name, int32_t v) {
  if (!r) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(r->ctx, ring_bind_scalar(r, name, ATTN_I32, 0, v, 0, "attn_ring_bind_i32"));
}
attn_status attn_ring_bind_u64(attn_ring *r, const char *name, uint64_t v) {
  if (!r) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(r->ctx, ring_bind_scalar(r, name, ATTN_U64, 0, 0, v, "attn_ring_bind_u64"));
}
attn_status attn_ring_bind_bool(attn_ring *r, const char *name, int v) {
  if (!r) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(r->ctx, ring_bind_scalar(r, name, ATTN_BOOL, 0, v != 0, 0, "attn_ring_bind_bool"));
}

attn_status attn_ring_forward(attn_ring *r, void *stream) {
  if (!r) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(r->ctx, (rt_clear_error(r->ctx), ring_forward_impl(r, (CUstream)stream)));
}

attn_status attn_ring_backward(attn_ring *r, void *stream) {
  if (!r) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(r->ctx, (rt_clear_error(r->ctx), ring_backward_impl(r, (CUstream)stream)));
}
