/* ring: context parallelism from C. One process drives N GPUs, one thread
 * each, over NCCL communicators made by ncclCommInitAll; every rank holds a
 * zigzag shard of one long causal sequence and runs libattn's ring
 * (attn_ring_create_nccl, attn_ring_forward, attn_ring_backward).
 *
 *   ring_example [--gpus N] [--seq S] [--heads H] [--kv-heads HK] [--iters I] [--full] [--check]
 *
 * --full: no mask (contiguous shards), for the scaling of causal against
 * non-causal. Prints each pass's time and TFLOP/s over the whole sequence; --check
 * also compares every rank's o against a CPU attention of the whole
 * sequence (keep --seq small then). libnccl is opened at run time
 * (libnccl.so.2, or the path in ATTN_NCCL): build needs no NCCL headers.
 * NVLink multicast stays off (NCCL_NVLS_ENABLE=0). Several processes (one
 * per GPU, ncclCommInitRank) work the same way: docs/ring.md. */
#include <attn.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/time.h>

#include "host_check.h"

#define D 128
/* The shard graph with its scores (SCORES_CAUSAL, or SCORES_FULL for
 * --full: the scalars stay, the ring sets them). */
#define SCORES_CAUSAL "mask((q @ k^T) * (1.0 / sqrt(128.0)), j + k0 <= i + q0)"
#define SCORES_FULL "(q @ k^T) * (1.0 / sqrt(128.0))"
#define SHARD_GRAPH(scores)                                                                  \
  "attention shard {\n"                                                                      \
  "  input  q : bf16[B, H, Sq, 128];\n"                                                      \
  "  input  k : bf16[B, Hk, Skv, 128];\n"                                                    \
  "  input  v : bf16[B, Hk, Skv, 128];\n"                                                    \
  "  scalar q0 : i32 = 0;\n"                                                                 \
  "  scalar k0 : i32 = 0;\n"                                                                 \
  "  s = " scores ";\n"                                                                      \
  "  o = softmax(s) @ v;\n"                                                                  \
  "  output o : bf16[B, H, Sq, 128];\n"                                                      \
  "  output lse = logsumexp(s);\n"                                                           \
  "  grad q, k, v;\n"                                                                        \
  "}\n"
static const char source[] = SHARD_GRAPH(SCORES_CAUSAL), source_full[] = SHARD_GRAPH(SCORES_FULL);

typedef struct Args {
  int gpus, seq, heads, kv_heads, iters, check, full;
} Args;

typedef struct Rank {
  const Args *a;
  int rank;
  void *comm;
  pthread_barrier_t *bar;
  double fwd_s, bwd_s; /* the best iteration's */
  uint16_t *o;         /* --check: this rank's o, host */
  int fail;
} Rank;

/* Element (head h, global position p, d) of tensor t: the same on every
 * rank, so a shard is the whole sequence's rows without the whole. */
static uint16_t value(int t, int h, long long p, int d) {
  uint32_t x = (uint32_t)(t * 2654435761u) ^ (uint32_t)(h * 40503u) ^ (uint32_t)(p * 97u + d);
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return host_f32_to_bf16((float)(x >> 8) / 8388608.0f - 1.0f);
}

/* The global position of row r of rank's shard of n rows (zigzag, or
 * contiguous with --full). */
static int contiguous;
static long long position(int rank, int world, long long n, long long r) {
  if (contiguous) return rank * n + r;
  long long c = n / 2;
  return r < c ? rank * c + r : (2LL * world - 1 - rank) * c + (r - c);
}

static double now(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return tv.tv_sec + tv.tv_usec * 1e-6;
}

#define RANK_CHECK(ctx, call)                                                                 \
  do {                                                                                        \
    attn_status s_ = (call);                                                                  \
    if (s_ != ATTN_SUCCESS) {                                                                 \
      fprintf(stderr, "rank %d: %s: %s\n%s\n", k->rank, #call, attn_status_string(s_),      \
              attn_context_error(ctx));                                                       \
      k->fail = 1;                                                                            \
      return NULL;                                                                            \
    }                                                                                         \
  } while (0)

static void *rank_main(void *arg) {
  Rank *k = arg;
  const Args *a = k->a;
  const long long n = a->seq / a->gpus;
  HOST_CUDA(cudaSetDevice(k->rank));
  const int heads[7] = {a->heads, a->kv_heads, a->kv_heads, a->heads, a->heads, a->heads, a->heads};
  /* q, k, v, do, o, dq (then dk, dv, lse below) */
  size_t qn = (size_t)a->heads * n * D, kn = (size_t)a->kv_heads * n * D;
  void *q, *kk, *v, *dout, *o, *dq, *dk, *dv, *lse;
  HOST_CUDA(cudaMalloc(&q, qn * 2));
  HOST_CUDA(cudaMalloc(&kk, kn * 2));
  HOST_CUDA(cudaMalloc(&v, kn * 2));
  HOST_CUDA(cudaMalloc(&dout, qn * 2));
  HOST_CUDA(cudaMalloc(&o, qn * 2));
  HOST_CUDA(cudaMalloc(&dq, qn * 2));
  HOST_CUDA(cudaMalloc(&dk, kn * 2));
  HOST_CUDA(cudaMalloc(&dv, kn * 2));
  HOST_CUDA(cudaMalloc(&lse, (size_t)a->heads * n * 4));
  void *in[4] = {q, kk, v, dout};
  uint16_t *h = malloc(qn * 2);
  for (int t = 0; t < 4; t++) {
    for (int hh = 0; hh < heads[t]; hh++)
      for (long long r = 0; r < n; r++)
        for (int d = 0; d < D; d++)
          h[((size_t)hh * n + r) * D + d] = value(t, hh, position(k->rank, a->gpus, n, r), d);
    HOST_CUDA(cudaMemcpy(in[t], h, (size_t)heads[t] * n * D * 2, cudaMemcpyHostToDevice));
  }
  attn_context *ctx;
  attn_module *m;
  attn_graph *g;
  attn_ring *ring;
  if (attn_context_create(&ctx) != ATTN_SUCCESS) {
    k->fail = 1;
    return NULL;
  }
  const char *src = a->full ? source_full : source;
  RANK_CHECK(ctx, attn_module_compile_string(ctx, "shard.attn", src, strlen(src), &m));
  RANK_CHECK(ctx, attn_module_get_graph(m, "shard", &g));
  RANK_CHECK(ctx, attn_ring_create_nccl(g, k->comm, a->full ? ATTN_RING_CONTIGUOUS : ATTN_RING_ZIGZAG,
                                        &ring));
  const int64_t qs[4] = {1, a->heads, n, D}, ks[4] = {1, a->kv_heads, n, D}, ls[3] = {1, a->heads, n};
  RANK_CHECK(ctx, attn_ring_bind_tensor(ring, "q", q, ATTN_BF16, 4, qs, NULL));
  RANK_CHECK(ctx, attn_ring_bind_tensor(ring, "k", kk, ATTN_BF16, 4, ks, NULL));
  RANK_CHECK(ctx, attn_ring_bind_tensor(ring, "v", v, ATTN_BF16, 4, ks, NULL));
  RANK_CHECK(ctx, attn_ring_bind_tensor(ring, "o", o, ATTN_BF16, 4, qs, NULL));
  RANK_CHECK(ctx, attn_ring_bind_tensor(ring, "lse", lse, ATTN_F32, 3, ls, NULL));
  RANK_CHECK(ctx, attn_ring_bind_tensor(ring, "do", dout, ATTN_BF16, 4, qs, NULL));
  RANK_CHECK(ctx, attn_ring_bind_tensor(ring, "dq", dq, ATTN_BF16, 4, qs, NULL));
  RANK_CHECK(ctx, attn_ring_bind_tensor(ring, "dk", dk, ATTN_BF16, 4, ks, NULL));
  RANK_CHECK(ctx, attn_ring_bind_tensor(ring, "dv", dv, ATTN_BF16, 4, ks, NULL));
  k->fwd_s = k->bwd_s = 1e30;
  for (int it = 0; it < a->iters + 1; it++) { /* the first compiles and warms up */
    pthread_barrier_wait(k->bar);
    double t0 = now();
    RANK_CHECK(ctx, attn_ring_forward(ring, NULL));
    HOST_CUDA(cudaDeviceSynchronize());
    pthread_barrier_wait(k->bar);
    double t1 = now();
    RANK_CHECK(ctx, attn_ring_backward(ring, NULL));
    HOST_CUDA(cudaDeviceSynchronize());
    pthread_barrier_wait(k->bar);
    double t2 = now();
    if (it > 0 && t1 - t0 < k->fwd_s) k->fwd_s = t1 - t0;
    if (it > 0 && t2 - t1 < k->bwd_s) k->bwd_s = t2 - t1;
  }
  if (a->check) {
    k->o = malloc(qn * 2);
    HOST_CUDA(cudaMemcpy(k->o, o, qn * 2, cudaMemcpyDeviceToHost));
  }
  attn_ring_destroy(ring);
  attn_module_destroy(m);
  attn_context_destroy(ctx);
  void *all[9] = {q, kk, v, dout, o, dq, dk, dv, lse};
  for (int t = 0; t < 9; t++) cudaFree(all[t]);
  free(h);
  return NULL;
}

/* --check: every rank's o against a CPU attention of the whole sequence. */
static int check(const Args *a, Rank *ranks) {
  const long long S = a->seq, n = S / a->gpus;
  size_t qn = (size_t)a->heads * S * D, kn = (size_t)a->kv_heads * S * D;
  uint16_t *q = malloc(qn * 2), *k = malloc(kn * 2), *v = malloc(kn * 2), *o = malloc(qn * 2);
  double *ref = malloc(qn * sizeof *ref);
  for (int h = 0; h < a->heads; h++)
    for (long long p = 0; p < S; p++)
      for (int d = 0; d < D; d++) q[((size_t)h * S + p) * D + d] = value(0, h, p, d);
  for (int h = 0; h < a->kv_heads; h++)
    for (long long p = 0; p < S; p++)
      for (int d = 0; d < D; d++) {
        k[((size_t)h * S + p) * D + d] = value(1, h, p, d);
        v[((size_t)h * S + p) * D + d] = value(2, h, p, d);
      }
  for (int r = 0; r < a->gpus; r++)
    for (int h = 0; h < a->heads; h++)
      for (long long t = 0; t < n; t++)
        memcpy(&o[((size_t)h * S + position(r, a->gpus, n, t)) * D], &ranks[r].o[((size_t)h * n + t) * D], D * 2);
  host_attention(q, k, v, ref, 1, a->heads, a->kv_heads, (int)S, (int)S, D, 1.0 / sqrt(128.0),
                 !a->full);
  int ok = host_compare(o, ref, qn);
  free(q), free(k), free(v), free(o), free(ref);
  return ok;
}

int main(int argc, char **argv) {
  Args a = {0, 131072, 16, 16, 3, 0, 0};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--check")) a.check = 1;
    else if (!strcmp(argv[i], "--full")) a.full = contiguous = 1;
    else if (i + 1 < argc && !strcmp(argv[i], "--gpus")) a.gpus = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--seq")) a.seq = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--heads")) a.heads = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--kv-heads")) a.kv_heads = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--iters")) a.iters = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--gpus N] [--seq S] [--heads H] [--kv-heads HK] [--iters I] [--full] [--check]\n", argv[0]);
      return 2;
    }
  }
  printf("libattn %s, ring attention over NCCL\n", attn_version());
  if (!host_have_gpu()) return 0;
  int devices = 0;
  HOST_CUDA(cudaGetDeviceCount(&devices));
  if (!a.gpus) a.gpus = devices;
  if (a.gpus < 1 || a.gpus > devices || a.seq % (2 * a.gpus) || a.heads % a.kv_heads) {
    fprintf(stderr, "need 1 <= --gpus <= %d, --seq a multiple of 2 x gpus, heads a multiple of kv-heads\n", devices);
    return 2;
  }
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  const char *lib = getenv("ATTN_NCCL");
  void *nccl = dlopen(lib && *lib ? lib : "libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
  int (*init_all)(void **, int, const int *) =
      nccl ? (int (*)(void **, int, const int *))dlsym(nccl, "ncclCommInitAll") : NULL;
  int (*destroy)(void *) = nccl ? (int (*)(void *))dlsym(nccl, "ncclCommDestroy") : NULL;
  if (!init_all || !destroy) {
    printf("libnccl not found (set ATTN_NCCL to libnccl.so.2): nothing to run\n");
    return 0;
  }
  void **comms = calloc((size_t)a.gpus, sizeof *comms);
  int *devs = calloc((size_t)a.gpus, sizeof *devs);
  for (int r = 0; r < a.gpus; r++) devs[r] = r;
  if (init_all(comms, a.gpus, devs) != 0) {
    printf("ncclCommInitAll failed\nFAIL\n");
    return 1;
  }
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, (unsigned)a.gpus);
  Rank *ranks = calloc((size_t)a.gpus, sizeof *ranks);
  pthread_t *th = calloc((size_t)a.gpus, sizeof *th);
  for (int r = 0; r < a.gpus; r++) {
    ranks[r] = (Rank){&a, r, comms[r], &bar, 0, 0, NULL, 0};
    pthread_create(&th[r], NULL, rank_main, &ranks[r]);
  }
  int fail = 0;
  double fwd = 0, bwd = 0;
  for (int r = 0; r < a.gpus; r++) {
    pthread_join(th[r], NULL);
    fail |= ranks[r].fail;
    if (ranks[r].fwd_s > fwd) fwd = ranks[r].fwd_s;
    if (ranks[r].bwd_s > bwd) bwd = ranks[r].bwd_s;
  }
  if (!fail) {
    /* Causal: half the S x S scores; the backward does 2.5x the forward's work. */
    double flops = 4.0 * a.heads * (double)a.seq * a.seq * D * (a.full ? 1.0 : 0.5);
    printf("%d GPUs, S %d, H %d, Hk %d, D %d, %s: forward %.2f ms (%.0f TFLOP/s in all), "
           "backward %.2f ms (%.0f TFLOP/s)\n", a.gpus, a.seq, a.heads, a.kv_heads, D,
           a.full ? "no mask, contiguous" : "causal, zigzag", fwd * 1e3, flops / fwd / 1e12,
           bwd * 1e3, 2.5 * flops / bwd / 1e12);
    if (a.check) fail = !check(&a, ranks);
  }
  for (int r = 0; r < a.gpus; r++) {
    destroy(comms[r]);
    free(ranks[r].o);
  }
  printf("%s\n", fail ? "FAIL" : "PASS");
  return fail;
}
