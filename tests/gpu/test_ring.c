/*
 * test_ring.c: ring attention (runtime/ring.c) with its ranks simulated on
 * one GPU: one thread per rank, each with its own attn_context and ring,
 * over a transport that copies between the threads' buffers on the device
 * (a barrier before and after each exchange). The ring's code runs as it
 * runs over NCCL: the same steps, pieces, merges, events and buffers; only
 * the bytes move by cuMemcpy instead of NCCL's kernels.
 *
 * For causal (with GQA), sliding-window, document and no masks, 2, 3 and 4
 * ranks, contiguous and zigzag shards: o, lse, dq, dk and dv of every rank,
 * put back at their global positions, equal the unsharded graph's on the
 * whole sequence (q0 = k0 = 0) within bf16 tolerance. Then, when libnccl
 * opens (ATTN_NCCL or libnccl.so.2), a one-rank ring over a real NCCL
 * communicator (one GPU: the exchanges do not run, the library's NCCL
 * loading and queries do). And attn_merge_partials: the graph run on 3 key
 * shards (k0 = the shard's first position), the partials merged, equal the
 * whole graph (rows with no key in a shard among them). Skips without a GPU
 * (exit 0). `test_ring NAME` runs the cases whose name holds NAME (the
 * sanitizer runs "causal").
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attn.h"
#include "cuda_driver.h"
#include "gpu_test.h"
#include "ref.h"

#define D 64
#define B 2
#define H 4
#define HK 2
#define S 480 /* divisible by 2, 3, 4 ranks, and by 2W for zigzag */
#define MAXW 4

static const char *const graph_head =
    "attention shard {\n"
    "  input q : bf16[B, H, Sq, 64];\n"
    "  input k : bf16[B, Hk, Skv, 64];\n"
    "  input v : bf16[B, Hk, Skv, 64];\n"
    "  input doc : i32[B, T];\n"
    "  scalar q0 : i32 = 0;\n"
    "  scalar k0 : i32 = 0;\n"
    "  s = (q @ k^T) * 0.125;\n";
static const char *const graph_tail =
    "  o = softmax(s) @ v;\n"
    "  output o : bf16[B, H, Sq, 64];\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v;\n"
    "}\n";

typedef struct Case {
  const char *name, *mask;
} Case;
static const Case cases[] = {
    {"causal gqa", "  s = mask(s, j + k0 <= i + q0);\n"},
    {"sliding window", "  s = mask(s, j + k0 <= i + q0 && i + q0 - (j + k0) < 100);\n"},
    {"document", "  s = mask(s, doc[b, i + q0] == doc[b, j + k0] && j + k0 <= i + q0);\n"},
    {"no mask", "  s = s * 1.0;\n"}, /* every pair full: the non-causal scaling's case */
};

static const RtDriver *drv;
static CUcontext primary;
static char cache_dir[64];

/* ------------------------------------------- the whole sequence, on host */

enum { TQ, TK, TV, TDO, TO, TLSE, TDQ, TDK, TDV, NT };
static const char *const tname[NT] = {"q", "k", "v", "do", "o", "lse", "dq", "dk", "dv"};

typedef struct Whole {
  uint16_t *t[NT]; /* bf16 (lse: unused, see lse) */
  float *lse;
  int32_t doc[B * S];
} Whole;

static size_t heads_of(int t) { return t == TK || t == TV || t == TDK || t == TDV ? HK : H; }

static void whole_inputs(Whole *w, uint64_t seed) {
  for (int t = 0; t < NT; t++) w->t[t] = calloc(B * heads_of(t) * S * D, 2);
  w->lse = calloc(B * H * S, 4);
  for (int t = TQ; t <= TDO; t++) {
    RefRng g = ref_rng(seed, (uint64_t)t);
    for (size_t e = 0; e < B * heads_of(t) * S * D; e++)
      dtype_to_bits(DT_BF16, ref_rng_normal(&g), &w->t[t][e]);
  }
  RefRng g = ref_rng(seed, 99);
  for (int b = 0; b < B; b++) { /* documents of 20 to 140 positions */
    int id = 0, left = 0;
    for (int p = 0; p < S; p++) {
      if (!left) left = 20 + (int)(ref_rng_next(&g) % 121), id++;
      w->doc[b * S + p] = id;
      left--;
    }
  }
}

static void whole_free(Whole *w) {
  for (int t = 0; t < NT; t++) free(w->t[t]);
  free(w->lse);
}

/* ------------------------------------------------------------ device */

static CUdeviceptr upload(const void *h, size_t bytes) {
  CUdeviceptr p = 0;
  if (drv->MemAlloc(&p, bytes ? bytes : 16) != CUDA_SUCCESS) return 0;
  if (h) drv->MemcpyHtoD(p, h, bytes);
  else drv->MemsetD8(p, 0xff, bytes); /* NaN: anything not written shows */
  return p;
}

static attn_status bind_all(attn_call *c, attn_ring *r, const CUdeviceptr p[NT], CUdeviceptr doc,
                            int64_t n) {
  attn_status st = ATTN_SUCCESS;
  for (int t = 0; t < NT && !st; t++) {
    int64_t shape[4] = {B, (int64_t)heads_of(t), n, D};
    int nd = t == TLSE ? 3 : 4;
    attn_dtype dt = t == TLSE ? ATTN_F32 : ATTN_BF16;
    void *ptr = (void *)(uintptr_t)p[t];
    st = c ? attn_call_bind_tensor(c, tname[t], ptr, dt, nd, shape, NULL)
           : attn_ring_bind_tensor(r, tname[t], ptr, dt, nd, shape, NULL);
  }
  const int64_t dshape[2] = {B, S};
  if (!st)
    st = c ? attn_call_bind_tensor(c, "doc", (void *)(uintptr_t)doc, ATTN_I32, 2, dshape, NULL)
           : attn_ring_bind_tensor(r, "doc", (void *)(uintptr_t)doc, ATTN_I32, 2, dshape, NULL);
  return st;
}

/* The unsharded graph on the whole sequence: o, lse, dq, dk, dv into w. */
static int run_whole(attn_context *ctx, attn_module *m, Whole *w, char *why, size_t len) {
  attn_graph *g;
  attn_call *c = NULL;
  CUdeviceptr p[NT], doc = upload(w->doc, sizeof w->doc);
  for (int t = 0; t < NT; t++)
    p[t] = upload(t <= TDO ? w->t[t] : NULL, t == TLSE ? B * H * S * 4 : B * heads_of(t) * S * D * 2);
  attn_status st = attn_module_get_graph(m, "shard", &g);
  if (!st) st = attn_call_create(g, &c);
  if (!st) st = bind_all(c, NULL, p, doc, S);
  if (!st) st = attn_call_launch(c, NULL);
  if (!st) st = attn_call_launch_backward(c, NULL);
  if (!st && drv->CtxSynchronize() != CUDA_SUCCESS) st = ATTN_ERROR_CUDA;
  if (st) snprintf(why, len, "%s", attn_context_error(ctx));
  for (int t = TO; t < NT && !st; t++)
    if (t == TLSE) drv->MemcpyDtoH(w->lse, p[t], B * H * S * 4);
    else drv->MemcpyDtoH(w->t[t], p[t], B * heads_of(t) * S * D * 2);
  attn_call_destroy(c);
  for (int t = 0; t < NT; t++) drv->MemFree(p[t]);
  drv->MemFree(doc);
  return st ? -1 : 0;
}

/* ------------------------------------------------ the simulated ring */

typedef struct Sim {
  int world;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived, generation;
  bool broken; /* a rank gave up: the others stop waiting */
  void *const *send[MAXW];
} Sim;

typedef struct Rank {
  Sim *sim;
  int rank;
  attn_ring_layout layout;
  const char *src;
  const Whole *w;
  Whole *out;     /* the results scattered to global positions */
  int fail;
  char why[600];
} Rank;

static int sim_wait(Sim *s) {
  pthread_mutex_lock(&s->mu);
  int gen = s->generation;
  if (++s->arrived == s->world) {
    s->arrived = 0;
    s->generation++;
    pthread_cond_broadcast(&s->cv);
  }
  while (gen == s->generation && !s->broken) pthread_cond_wait(&s->cv, &s->mu);
  bool broken = s->broken;
  pthread_mutex_unlock(&s->mu);
  return broken ? -1 : 0;
}

static void sim_break(Sim *s) {
  pthread_mutex_lock(&s->mu);
  s->broken = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

typedef struct SimPeer {
  Sim *sim;
  int rank;
} SimPeer;

static int sim_exchange(void *user, int count, void *const *send, void *const *recv,
                        const size_t *bytes, void *stream, char *msg, size_t len) {
  SimPeer *p = user;
  Sim *s = p->sim;
  CUstream st = stream;
  if (drv->StreamSynchronize(st) != CUDA_SUCCESS) { /* what is sent is there */
    snprintf(msg, len, "stream synchronize failed");
    return 1;
  }
  s->send[p->rank] = send;
  if (sim_wait(s)) goto broken;
  const int prev = (p->rank + s->world - 1) % s->world;
  for (int k = 0; k < count; k++)
    if (drv->MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)recv[k], (CUdeviceptr)(uintptr_t)s->send[prev][k],
                             bytes[k], st) != CUDA_SUCCESS) {
      snprintf(msg, len, "copy failed");
      sim_break(s);
      return 1;
    }
  if (drv->StreamSynchronize(st) != CUDA_SUCCESS) {
    snprintf(msg, len, "copy failed");
    sim_break(s);
    return 1;
  }
  if (sim_wait(s)) goto broken; /* nobody writes a send buffer still being read */
  return 0;
broken:
  snprintf(msg, len, "another rank failed");
  return 1;
}

/* The global position of row t of rank r's shard. */
static int position(attn_ring_layout layout, int r, int world, int t) {
  const int n = S / world, c = n / 2;
  if (layout == ATTN_RING_CONTIGUOUS) return r * n + t;
  return t < c ? r * c + t : (2 * world - 1 - r) * c + (t - c);
}

/* Rows of the whole [B][heads][S][D] tensor gathered into a shard, or
 * (scatter) back. */
static void move_rows(uint16_t *whole, uint16_t *shard, size_t heads, const Rank *k, int n,
                      bool scatter) {
  for (size_t bh = 0; bh < B * heads; bh++)
    for (int t = 0; t < n; t++) {
      uint16_t *a = whole + (bh * S + position(k->layout, k->rank, k->sim->world, t)) * D;
      uint16_t *b = shard + (bh * n + t) * D;
      if (scatter) memcpy(a, b, D * 2);
      else memcpy(b, a, D * 2);
    }
}

static void *rank_main(void *arg) {
  Rank *k = arg;
  const int world = k->sim->world, n = S / world;
  attn_context *ctx = NULL;
  attn_module *m = NULL;
  attn_ring *ring = NULL;
  CUstream stream = NULL;
  CUdeviceptr p[NT] = {0}, doc = 0;
  uint16_t *host = NULL;
  SimPeer peer = {k->sim, k->rank};
  attn_status st = drv->CtxSetCurrent(primary) == CUDA_SUCCESS ? ATTN_SUCCESS : ATTN_ERROR_CUDA;
  if (!st) st = attn_context_create(&ctx);
  if (!st) st = attn_context_set_cache_dir(ctx, cache_dir);
  if (!st) st = gpu_compile_string(ctx, "shard.attn", k->src, strlen(k->src), &m);
  attn_graph *g = NULL;
  if (!st) st = attn_module_get_graph(m, "shard", &g);
  attn_ring_transport t = {k->rank, world, sim_exchange, &peer};
  if (!st) st = attn_ring_create(g, &t, k->layout, &ring);
  if (!st && drv->StreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) st = ATTN_ERROR_CUDA;
  host = malloc((size_t)B * H * n * D * 2);
  for (int x = 0; x < NT && !st; x++) {
    size_t bytes = x == TLSE ? (size_t)B * H * n * 4 : (size_t)B * heads_of(x) * n * D * 2;
    if (x <= TDO) move_rows(k->w->t[x], host, heads_of(x), k, n, false);
    p[x] = upload(x <= TDO ? host : NULL, bytes);
    if (!p[x]) st = ATTN_ERROR_OUT_OF_MEMORY;
  }
  if (!st && !(doc = upload(k->w->doc, sizeof k->w->doc))) st = ATTN_ERROR_OUT_OF_MEMORY;
  if (!st) st = bind_all(NULL, ring, p, doc, n);
  if (!st) st = attn_ring_forward(ring, stream);
  if (!st) st = attn_ring_backward(ring, stream);
  if (!st && drv->StreamSynchronize(stream) != CUDA_SUCCESS) st = ATTN_ERROR_CUDA;
  if (st) {
    k->fail = 1;
    snprintf(k->why, sizeof k->why, "rank %d: %s (status %d)", k->rank,
             ctx ? attn_context_error(ctx) : "no context", (int)st);
    sim_break(k->sim);
  } else {
    for (int x = TO; x < NT; x++) {
      if (x == TLSE) {
        float *l = malloc((size_t)B * H * n * 4);
        drv->MemcpyDtoH(l, p[x], (size_t)B * H * n * 4);
        for (int bh = 0; bh < B * H; bh++)
          for (int r = 0; r < n; r++)
            k->out->lse[bh * S + position(k->layout, k->rank, world, r)] = l[bh * n + r];
        free(l);
        continue;
      }
      drv->MemcpyDtoH(host, p[x], (size_t)B * heads_of(x) * n * D * 2);
      move_rows(k->out->t[x], host, heads_of(x), k, n, true);
    }
  }
  free(host);
  for (int x = 0; x < NT; x++)
    if (p[x]) drv->MemFree(p[x]);
  if (doc) drv->MemFree(doc);
  attn_ring_destroy(ring);
  if (stream) drv->StreamDestroy(stream);
  attn_module_destroy(m);
  attn_context_destroy(ctx);
  return NULL;
}

static double rel_l2(const uint16_t *a, const uint16_t *b, size_t n) {
  double num = 0, den = 0;
  for (size_t e = 0; e < n; e++) {
    double x = dtype_from_bits(DT_BF16, &a[e]), y = dtype_from_bits(DT_BF16, &b[e]);
    if (!isfinite(x) || !isfinite(y)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void run_case(const Case *cs, int world, attn_ring_layout layout, const Whole *w,
                     const Whole *ref) {
  char src[2048];
  snprintf(src, sizeof src, "%s%s%s", graph_head, cs->mask, graph_tail);
  Sim sim = {.world = world};
  pthread_mutex_init(&sim.mu, NULL);
  pthread_cond_init(&sim.cv, NULL);
  Whole out;
  memset(&out, 0, sizeof out);
  for (int t = 0; t < NT; t++) out.t[t] = calloc(B * heads_of(t) * S * D, 2);
  out.lse = calloc(B * H * S, 4);
  Rank ranks[MAXW];
  pthread_t th[MAXW];
  for (int r = 0; r < world; r++) {
    ranks[r] = (Rank){&sim, r, layout, src, w, &out, 0, ""};
    pthread_create(&th[r], NULL, rank_main, &ranks[r]);
  }
  char what[160], detail[1024] = "";
  for (int r = 0; r < world; r++) pthread_join(th[r], NULL);
  snprintf(what, sizeof what, "ring %s, %d ranks, %s", cs->name, world,
           layout == ATTN_RING_ZIGZAG ? "zigzag" : "contiguous");
  bool ok = true;
  for (int r = 0; r < world; r++)
    if (ranks[r].fail) {
      /* The first rank's own failure, not "another rank failed". */
      if (ok || strstr(detail, "another rank")) snprintf(detail, sizeof detail, "%s", ranks[r].why);
      ok = false;
    }
  if (ok) {
    size_t len = 0;
    for (int t = TO; t < NT; t++) {
      if (t == TLSE) {
        double worst = 0;
        for (size_t e = 0; e < B * H * S; e++) {
          double a = out.lse[e], b = ref->lse[e];
          double dlt = isfinite(a) || isfinite(b) ? fabs(a - b) : 0;
          if (!(dlt <= worst)) worst = dlt; /* NaN sticks */
        }
        ok = ok && worst < 2e-3;
        len += (size_t)snprintf(detail + len, sizeof detail - len, "lse max diff %.1e; ", worst);
        continue;
      }
      double e = rel_l2(out.t[t], ref->t[t], B * heads_of(t) * S * D);
      /* o: bf16 partials merged (the graph's own bf16 o rounds once);
       * gradients: each pair's bf16 part summed in f32. */
      ok = ok && e < (t == TO ? 1e-2 : 2e-2);
      len += (size_t)snprintf(detail + len, sizeof detail - len, "%s rel_l2 %.1e; ", tname[t], e);
    }
  }
  verdict(ok, what, detail);
  whole_free(&out);
  pthread_mutex_destroy(&sim.mu);
  pthread_cond_destroy(&sim.cv);
}

/* ---------------------------------------------- one rank over NCCL */

typedef struct { char internal[128]; } NcclId; /* ncclUniqueId */

static void run_nccl(attn_context *ctx, attn_module *m, const Whole *w, const Whole *ref) {
  const char *env = getenv("ATTN_NCCL");
  void *h = dlopen(env && *env ? env : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    printf("SKIP: ring over NCCL: libnccl not found (set ATTN_NCCL)\n");
    skipped++;
    return;
  }
  int (*get_id)(NcclId *) = (int (*)(NcclId *))dlsym(h, "ncclGetUniqueId");
  int (*init)(void **, int, NcclId, int) = (int (*)(void **, int, NcclId, int))dlsym(h, "ncclCommInitRank");
  int (*destroy)(void *) = (int (*)(void *))dlsym(h, "ncclCommDestroy");
  NcclId id;
  void *comm = NULL;
  char detail[512] = "";
  bool ok = get_id && init && destroy && get_id(&id) == 0 && init(&comm, 1, id, 0) == 0;
  attn_graph *g = NULL;
  attn_ring *ring = NULL;
  CUdeviceptr p[NT] = {0}, doc = upload(w->doc, sizeof w->doc);
  if (ok) {
    attn_status st = attn_module_get_graph(m, "shard", &g);
    if (!st) st = attn_ring_create_nccl(g, comm, ATTN_RING_ZIGZAG, &ring);
    for (int t = 0; t < NT && !st; t++)
      p[t] = upload(t <= TDO ? w->t[t] : NULL, t == TLSE ? B * H * S * 4 : B * heads_of(t) * S * D * 2);
    if (!st) st = bind_all(NULL, ring, p, doc, S);
    if (!st) st = attn_ring_forward(ring, NULL);
    if (!st) st = attn_ring_backward(ring, NULL);
    if (!st && drv->CtxSynchronize() != CUDA_SUCCESS) st = ATTN_ERROR_CUDA;
    if (st) {
      ok = false;
      snprintf(detail, sizeof detail, "%s", attn_context_error(ctx));
    } else {
      uint16_t *hbuf = malloc((size_t)B * H * S * D * 2);
      const int outs[4] = {TO, TDQ, TDK, TDV};
      size_t len = 0;
      for (int k = 0; k < 4; k++) {
        size_t n = B * heads_of(outs[k]) * S * D;
        drv->MemcpyDtoH(hbuf, p[outs[k]], n * 2);
        double e = rel_l2(hbuf, ref->t[outs[k]], n);
        ok = ok && e < 1e-2;
        len += (size_t)snprintf(detail + len, sizeof detail - len, "%s rel_l2 %.1e; ", tname[outs[k]], e);
      }
      free(hbuf);
    }
  } else {
    snprintf(detail, sizeof detail, "a one-rank NCCL communicator could not be made");
  }
  verdict(ok, "ring over NCCL, one rank, zigzag", detail);
  attn_ring_destroy(ring);
  for (int t = 0; t < NT; t++)
    if (p[t]) drv->MemFree(p[t]);
  drv->MemFree(doc);
  if (comm) destroy(comm);
  dlclose(h);
}

/* ------------------------------------------- attn_merge_partials */

static void run_merge(attn_context *ctx, attn_module *m, const Whole *w, const Whole *ref) {
  enum { NS = 3 };
  const int n = S / NS;
  attn_graph *g = NULL;
  attn_call *c = NULL;
  char detail[512] = "";
  bool ok = attn_module_get_graph(m, "shard", &g) == ATTN_SUCCESS &&
            attn_call_create(g, &c) == ATTN_SUCCESS;
  CUdeviceptr doc = upload(w->doc, sizeof w->doc), q = upload(w->t[TQ], B * H * S * D * 2);
  CUdeviceptr kv[NS][2] = {{0}}, o[NS] = {0}, lse[NS] = {0};
  uint16_t *rows = malloc((size_t)B * HK * n * D * 2);
  for (int r = 0; r < NS && ok; r++) {
    for (int t = 0; t < 2; t++) { /* k, v rows r*n .. of the whole */
      for (int bh = 0; bh < B * HK; bh++)
        memcpy(rows + (size_t)bh * n * D, w->t[TK + t] + ((size_t)bh * S + (size_t)r * n) * D,
               (size_t)n * D * 2);
      kv[r][t] = upload(rows, (size_t)B * HK * n * D * 2);
    }
    o[r] = upload(NULL, B * H * S * D * 2);
    lse[r] = upload(NULL, B * H * S * 4);
    const int64_t qs[4] = {B, H, S, D}, ks[4] = {B, HK, n, D}, ls[3] = {B, H, S}, ds[2] = {B, S};
    attn_status st = attn_call_clear_bindings(c);
    if (!st) st = attn_call_bind_tensor(c, "q", (void *)(uintptr_t)q, ATTN_BF16, 4, qs, NULL);
    if (!st) st = attn_call_bind_tensor(c, "k", (void *)(uintptr_t)kv[r][0], ATTN_BF16, 4, ks, NULL);
    if (!st) st = attn_call_bind_tensor(c, "v", (void *)(uintptr_t)kv[r][1], ATTN_BF16, 4, ks, NULL);
    if (!st) st = attn_call_bind_tensor(c, "o", (void *)(uintptr_t)o[r], ATTN_BF16, 4, qs, NULL);
    if (!st) st = attn_call_bind_tensor(c, "lse", (void *)(uintptr_t)lse[r], ATTN_F32, 3, ls, NULL);
    if (!st) st = attn_call_bind_tensor(c, "doc", (void *)(uintptr_t)doc, ATTN_I32, 2, ds, NULL);
    if (!st) st = attn_call_bind_i32(c, "k0", r * n);
    if (!st) st = attn_call_launch(c, NULL);
    if (st) {
      ok = false;
      snprintf(detail, sizeof detail, "shard %d: %s", r, attn_context_error(ctx));
    }
  }
  free(rows);
  /* Into f32 (and an lse of its own: the parts' must stay as they are for the second pass),
   * then in place into part 0 (bf16): both against the whole. */
  CUdeviceptr of32 = upload(NULL, B * H * S * D * 4), lse32 = upload(NULL, B * H * S * 4);
  const void *op[NS];
  const float *lp[NS];
  for (int r = 0; r < NS; r++) {
    op[r] = (const void *)(uintptr_t)o[r];
    lp[r] = (const float *)(uintptr_t)lse[r];
  }
  for (int pass = 0; pass < 2 && ok; pass++) {
    attn_status st = attn_merge_partials(ctx, NS, op, lp, ATTN_BF16, (int64_t)B * H * S, D,
                                         pass ? (void *)(uintptr_t)o[0] : (void *)(uintptr_t)of32,
                                         pass ? ATTN_BF16 : ATTN_F32,
                                         (float *)(uintptr_t)(pass ? lse[0] : lse32), NULL);
    if (st || drv->CtxSynchronize() != CUDA_SUCCESS) {
      ok = false;
      snprintf(detail, sizeof detail, "merge: %s", attn_context_error(ctx));
      break;
    }
    uint16_t *got = malloc((size_t)B * H * S * D * 2);
    if (pass) {
      drv->MemcpyDtoH(got, o[0], (size_t)B * H * S * D * 2);
    } else {
      float *f = malloc((size_t)B * H * S * D * 4);
      drv->MemcpyDtoH(f, of32, (size_t)B * H * S * D * 4);
      for (size_t e = 0; e < (size_t)B * H * S * D; e++) dtype_to_bits(DT_BF16, f[e], &got[e]);
      free(f);
    }
    float *l = malloc((size_t)B * H * S * 4);
    drv->MemcpyDtoH(l, pass ? lse[0] : lse32, (size_t)B * H * S * 4);
    double e = rel_l2(got, ref->t[TO], (size_t)B * H * S * D), worst = 0;
    for (size_t x = 0; x < (size_t)B * H * S; x++) {
      double dl = fabs((double)l[x] - ref->lse[x]);
      if (!(dl <= worst)) worst = dl;
    }
    size_t len = strlen(detail);
    snprintf(detail + len, sizeof detail - len, "%s: o rel_l2 %.1e, lse max diff %.1e; ",
             pass ? "bf16 in place" : "f32", e, worst);
    ok = ok && e < 1e-2 && worst < 2e-3;
    free(got);
    free(l);
  }
  verdict(ok, "attn_merge_partials, 3 key shards of the causal graph", detail);
  attn_call_destroy(c);
  for (int r = 0; r < NS; r++) {
    drv->MemFree(kv[r][0]);
    drv->MemFree(kv[r][1]);
    drv->MemFree(o[r]);
    drv->MemFree(lse[r]);
  }
  drv->MemFree(of32);
  drv->MemFree(lse32);
  drv->MemFree(q);
  drv->MemFree(doc);
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : NULL; /* a case name's substring */
  if (!(drv = gpu_test_driver())) return 0;
  drv->CtxGetCurrent(&primary);
  /* One disk cache for the ranks: the first compiles, the others load. */
  snprintf(cache_dir, sizeof cache_dir, "/tmp/attnc-test-ring-XXXXXX");
  if (!mkdtemp(cache_dir)) {
    printf("FAIL: no temporary directory\n");
    return 1;
  }
  Whole w;
  whole_inputs(&w, 20261204);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    if (only && !strstr(cases[c].name, only)) continue;
    char src[2048], why[600] = "";
    snprintf(src, sizeof src, "%s%s%s", graph_head, cases[c].mask, graph_tail);
    attn_context *ctx = gpu_test_context();
    attn_module *m = NULL;
    Whole ref;
    memset(&ref, 0, sizeof ref);
    for (int t = 0; t < NT; t++) ref.t[t] = calloc(B * heads_of(t) * S * D, 2);
    ref.lse = calloc(B * H * S, 4);
    if (!ctx || gpu_compile_string(ctx, "shard.attn", src, strlen(src), &m) ||
        run_whole(ctx, m, &w, why, sizeof why)) {
      verdict(false, cases[c].name, why[0] ? why : ctx ? attn_context_error(ctx) : "no context");
    } else {
      for (int t = TO; t < NT; t++) memcpy(ref.t[t], w.t[t], B * heads_of(t) * S * D * 2);
      memcpy(ref.lse, w.lse, B * H * S * 4);
      for (int world = 1; world <= MAXW; world++) {
        run_case(&cases[c], world, ATTN_RING_CONTIGUOUS, &w, &ref);
        if (c != 2 || world == 3) run_case(&cases[c], world, ATTN_RING_ZIGZAG, &w, &ref);
      }
      if (c == 0) run_nccl(ctx, m, &w, &ref);
      if (c == 0) run_merge(ctx, m, &w, &ref);
    }
    whole_free(&ref);
    attn_module_destroy(m);
    attn_context_destroy(ctx);
  }
  whole_free(&w);
  printf("ring: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
