/*
 * test_plan.c: what the launch plan promises at run time, on the GPU.
 *
 *  - Workspace the caller owns: attn_call_workspace_size, then the
 *    _with_workspace launches give the same results as the plain ones
 *    (the forward bit for bit; the deterministic backward bit for bit; the
 *    default backward, whose dQ is summed by atomics, to 1e-2).
 *  - CUDA graph capture: the forward and the backward launched with
 *    caller workspaces inside cuStreamBeginCapture (global mode: any
 *    allocation or synchronization would fail the capture), instantiated
 *    and replayed twice; each replay gives the plain launches' results.
 *    Once as a fresh module's first launches: its backward's program,
 *    compiled apart on first use, is built and loaded during the capture.
 *  - Launch overlap (ATTN_OPTION_LAUNCH_OVERLAP, on by default on sm_90):
 *    the plain launches again with it off, and four pairs launched back to
 *    back with no synchronization (each forward may start while the
 *    backward before it, which reads its o and lse, drains) give the
 *    same results.
 *  - Empty sequences: Skv = 0 gives zero dq (and the forward's o = 0);
 *    Sq = 0 gives zero dk and dv; every gradient is NaN-poisoned first.
 *
 * Each on both backward templates (ATTN_OPTION_BACKWARD_TEMPLATE 80 and 90)
 * and in both modes, with a graph that has GQA and a separable mask (so
 * the plan has a prep step, zeroed accumulators, a work queue and
 * convert_kv). Skips without a GPU (exit 0).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "cuda_driver.h"
#include "gpu_test.h"
#include "ref.h"

static const char graph_src[] =
    "attention cap {\n"
    "  input q : bf16[B, H, Sq, 64];\n"
    "  input k : bf16[B, Hk, Skv, 64];\n"
    "  input v : bf16[B, Hk, Skv, 64];\n"
    "  input doc_q : i32[B, Sq];\n"
    "  input doc_k : i32[B, Skv];\n"
    "  s = (q @ k^T) * 0.125;\n"
    "  s = mask(s, doc_q[b, i] / 64 == doc_k[b, j] / 64);\n"
    "  o = softmax(s) @ v;\n"
    "  output o : bf16[B, H, Sq, 64];\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v;\n"
    "}\n";

/* The tensors of one run, by the names the graph binds. */
enum { TQ, TK, TV, TDQ_DOC, TDK_DOC, TO, TLSE, TDO, TGQ, TGK, TGV, NT };
static const char *const tname[NT] = {"q", "k", "v", "doc_q", "doc_k", "o",
                                      "lse", "do", "dq", "dk", "dv"};

typedef struct Run {
  const RtDriver *d;
  int B, H, Hk, Sq, Skv;
  CUdeviceptr p[NT];
  size_t bytes[NT];
  int64_t shape[NT][4];
  int ndims[NT];
  attn_dtype dt[NT];
} Run;

static size_t run_numel(const Run *r, int t) {
  size_t n = 1;
  for (int k = 0; k < r->ndims[t]; k++) n *= (size_t)r->shape[t][k];
  return n;
}

static void set_shape(Run *r, int t, attn_dtype dt, int n, int64_t a, int64_t b, int64_t c,
                      int64_t e) {
  r->dt[t] = dt;
  r->ndims[t] = n;
  const int64_t s[4] = {a, b, c, e};
  memcpy(r->shape[t], s, sizeof s);
}

/* Deterministic pseudo-random bf16 values (and document ids), the same for
 * every run of the same shapes; outputs and gradients NaN-poisoned. */
static int run_alloc(Run *r, uint64_t seed) {
  set_shape(r, TQ, ATTN_BF16, 4, r->B, r->H, r->Sq, 64);
  set_shape(r, TK, ATTN_BF16, 4, r->B, r->Hk, r->Skv, 64);
  set_shape(r, TV, ATTN_BF16, 4, r->B, r->Hk, r->Skv, 64);
  set_shape(r, TDQ_DOC, ATTN_I32, 2, r->B, r->Sq, 1, 1);
  set_shape(r, TDK_DOC, ATTN_I32, 2, r->B, r->Skv, 1, 1);
  set_shape(r, TO, ATTN_BF16, 4, r->B, r->H, r->Sq, 64);
  set_shape(r, TLSE, ATTN_F32, 3, r->B, r->H, r->Sq, 1);
  set_shape(r, TDO, ATTN_BF16, 4, r->B, r->H, r->Sq, 64);
  set_shape(r, TGQ, ATTN_BF16, 4, r->B, r->H, r->Sq, 64);
  set_shape(r, TGK, ATTN_BF16, 4, r->B, r->Hk, r->Skv, 64);
  set_shape(r, TGV, ATTN_BF16, 4, r->B, r->Hk, r->Skv, 64);
  for (int t = 0; t < NT; t++) {
    size_t es = r->dt[t] == ATTN_BF16 ? 2 : 4, n = run_numel(r, t);
    r->bytes[t] = n * es;
    if (!n) continue; /* an empty tensor: bound with a null pointer */
    if (r->d->MemAlloc(&r->p[t], r->bytes[t]) != CUDA_SUCCESS) return -1;
    unsigned char *host = malloc(r->bytes[t]);
    if (!host) return -1;
    RefRng g = ref_rng(seed, (uint64_t)t);
    for (size_t e = 0; e < n; e++) {
      if (t == TDQ_DOC || t == TDK_DOC) { /* sorted documents of ~100 positions */
        int32_t id = (int32_t)((e % (size_t)r->shape[t][1]) + (ref_rng_next(&g) % 40));
        memcpy(host + 4 * e, &id, 4);
      } else if (t <= TV || t == TDO) {
        dtype_to_bits(DT_BF16, ref_rng_normal(&g), host + 2 * e);
      } else {
        memset(host + es * e, 0xff, es); /* NaN */
      }
    }
    CUresult cr = r->d->MemcpyHtoD(r->p[t], host, r->bytes[t]);
    free(host);
    if (cr != CUDA_SUCCESS) return -1;
  }
  return 0;
}

static void run_free(Run *r) {
  for (int t = 0; t < NT; t++)
    if (r->p[t]) r->d->MemFree(r->p[t]);
}

/* NaN again in every output and gradient. */
static void run_poison(Run *r) {
  for (int t = TO; t < NT; t++)
    if (t != TDO && r->p[t]) r->d->MemsetD8(r->p[t], 0xff, r->bytes[t]);
}

static unsigned char *run_read(Run *r, int t) {
  unsigned char *h = malloc(r->bytes[t] ? r->bytes[t] : 1);
  if (h && r->bytes[t]) r->d->MemcpyDtoH(h, r->p[t], r->bytes[t]);
  return h;
}

static attn_status bind_run(attn_call *c, Run *r) {
  attn_status st = ATTN_SUCCESS;
  for (int t = 0; t < NT && st == ATTN_SUCCESS; t++)
    st = attn_call_bind_tensor(c, tname[t], (void *)(uintptr_t)r->p[t], r->dt[t], r->ndims[t],
                               r->shape[t], NULL);
  return st;
}

/* Relative L2 distance of two bf16 (or f32) buffers of n elements;
 * +inf when either holds a NaN. */
static double rel_l2(const unsigned char *a, const unsigned char *b, size_t n, bool bf16) {
  double num = 0, den = 0;
  for (size_t e = 0; e < n; e++) {
    double x = dtype_from_bits(bf16 ? DT_BF16 : DT_F32, a + (bf16 ? 2 : 4) * e);
    double y = dtype_from_bits(bf16 ? DT_BF16 : DT_F32, b + (bf16 ? 2 : 4) * e);
    if (isnan(x) || isnan(y)) return INFINITY;
    if (isinf(x) || isinf(y)) {
      if (x != y) return INFINITY;
      continue;
    }
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The outputs and gradients of one way of launching. */
typedef struct Result {
  unsigned char *t[NT];
} Result;

static void result_free(Result *res) {
  for (int t = 0; t < NT; t++) free(res->t[t]);
}

static void result_read(Run *r, Result *res) {
  for (int t = TO; t < NT; t++) res->t[t] = t == TDO ? NULL : run_read(r, t);
}

/* How a pair of launches (forward, backward) is made. */
typedef enum Way { PLAIN, WORKSPACE, CAPTURE, NO_OVERLAP, BACK_TO_BACK, NWAYS } Way;

static attn_status launch_pair(attn_call *c, attn_context *ctx, Run *r, Way way, CUstream s,
                               StrBuf *why) {
  const RtDriver *d = r->d;
  attn_status st = ATTN_SUCCESS;
  if (way == PLAIN) {
    st = attn_call_launch(c, s);
    return st ? st : attn_call_launch_backward(c, s);
  }
  if (way == NO_OVERLAP) { /* plain launches, none overlapped */
    attn_context_set_option(ctx, ATTN_OPTION_LAUNCH_OVERLAP, 0);
    st = attn_call_launch(c, s);
    if (!st) st = attn_call_launch_backward(c, s);
    attn_context_set_option(ctx, ATTN_OPTION_LAUNCH_OVERLAP, 1);
    return st;
  }
  if (way == BACK_TO_BACK) {
    /* Four pairs with no synchronization between them: each forward's
     * first kernel may start while the backward before it drains, and
     * writes the o and lse that backward reads. */
    for (int rep = 0; rep < 4 && !st; rep++) {
      st = attn_call_launch(c, s);
      if (!st) st = attn_call_launch_backward(c, s);
    }
    return st;
  }
  size_t fb = 0, bb = 0;
  if ((st = attn_call_workspace_size(c, ATTN_PASS_FORWARD, &fb)) ||
      (st = attn_call_workspace_size(c, ATTN_PASS_BACKWARD, &bb)))
    return st;
  CUdeviceptr fw = 0, bw = 0;
  if ((fb && d->MemAlloc(&fw, fb) != CUDA_SUCCESS) || (bb && d->MemAlloc(&bw, bb) != CUDA_SUCCESS))
    return ATTN_ERROR_OUT_OF_MEMORY;
  /* Garbage in the caller's workspace must not matter. */
  if (fb) d->MemsetD8(fw, 0xa5, fb);
  if (bb) d->MemsetD8(bw, 0xa5, bb);
  if (way == WORKSPACE) {
    st = attn_call_launch_with_workspace(c, (void *)(uintptr_t)fw, fb, s);
    if (!st) st = attn_call_launch_backward_with_workspace(c, (void *)(uintptr_t)bw, bb, s);
    d->StreamSynchronize(s);
  } else {
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    CUresult cr = d->StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
    if (cr != CUDA_SUCCESS) return rt_driver_error(d, cr, "cuStreamBeginCapture", why);
    st = attn_call_launch_with_workspace(c, (void *)(uintptr_t)fw, fb, s);
    if (!st) st = attn_call_launch_backward_with_workspace(c, (void *)(uintptr_t)bw, bb, s);
    cr = d->StreamEndCapture(s, &graph);
    if (!st && cr != CUDA_SUCCESS) st = rt_driver_error(d, cr, "cuStreamEndCapture", why);
    if (!st && (cr = d->GraphInstantiate(&exec, graph, 0)) != CUDA_SUCCESS)
      st = rt_driver_error(d, cr, "cuGraphInstantiate", why);
    /* Replayed twice: the second replay must give the same answers. */
    for (int rep = 0; rep < 2 && !st; rep++) {
      run_poison(r);
      if ((cr = d->GraphLaunch(exec, s)) != CUDA_SUCCESS ||
          (cr = d->StreamSynchronize(s)) != CUDA_SUCCESS)
        st = rt_driver_error(d, cr, "cuGraphLaunch", why);
    }
    if (exec) d->GraphExecDestroy(exec);
    if (graph) d->GraphDestroy(graph);
  }
  if (fw) d->MemFree(fw);
  if (bw) d->MemFree(bw);
  return st;
}

static attn_call *make_call(attn_context *ctx, attn_module *m, Run *r, bool det) {
  attn_graph *g;
  attn_call *c;
  if (attn_module_get_graph(m, NULL, &g) || attn_call_create(g, &c)) return NULL;
  if (bind_run(c, r) || (det && attn_call_set_deterministic(c, 1))) {
    printf("  bind: %s\n", attn_context_error(ctx));
    attn_call_destroy(c);
    return NULL;
  }
  return c;
}

/* capture_first: the captured launches come first, so on a fresh module
 * the backward's program (compiled apart, on first use) is compiled and
 * loaded while the stream is being captured. */
static void test_ways(attn_context *ctx, attn_module *m, const char *tag, bool det,
                      const RtDriver *d, CUstream s, bool capture_first) {
  Run r = {.d = d, .B = 2, .H = 4, .Hk = 2, .Sq = 300, .Skv = 300};
  char what[160], detail[256];
  if (run_alloc(&r, 11) != 0) {
    verdict(false, tag, "allocation");
    run_free(&r);
    return;
  }
  Result res[NWAYS];
  memset(res, 0, sizeof res);
  static const char *const way_name[NWAYS] = {"plain", "caller workspace", "captured graph",
                                              "not overlapped", "back-to-back"};
  bool ran[NWAYS] = {false};
  for (int x = 0; x < NWAYS; x++) {
    const int w = capture_first && x < 3 ? (x + 2) % 3 : x;
    attn_call *c = make_call(ctx, m, &r, det);
    StrBuf why = {0};
    run_poison(&r);
    attn_status st = c ? launch_pair(c, ctx, &r, (Way)w, s, &why) : ATTN_ERROR_INVALID_ARGUMENT;
    CUresult cr = d->CtxSynchronize();
    snprintf(what, sizeof what, "%s%s: %s launches%s", tag, det ? ", deterministic" : "",
             way_name[w], capture_first && x == 0 ? " (the module's first backward)" : "");
    ran[w] = st == ATTN_SUCCESS && cr == CUDA_SUCCESS;
    snprintf(detail, sizeof detail, "%s %s", attn_status_string(st),
             why.len ? why.data : attn_context_error(ctx));
    if (!ran[w]) verdict(false, what, detail);
    else result_read(&r, &res[w]);
    if (ran[w] && capture_first && x == 0) verdict(true, what, NULL);
    sb_free(&why);
    attn_call_destroy(c);
  }
  for (int w = 1; w < NWAYS; w++) {
    if (!ran[0] || !ran[w]) continue;
    for (int t = TO; t < NT; t++) {
      if (t == TDO) continue;
      size_t n = run_numel(&r, t);
      bool bitwise = t == TO || t == TLSE || det;
      bool ok;
      if (bitwise) {
        ok = memcmp(res[w].t[t], res[0].t[t], r.bytes[t]) == 0;
        snprintf(detail, sizeof detail, "%s", ok ? "bit-identical" : "bits differ");
      } else {
        double e = rel_l2(res[w].t[t], res[0].t[t], n, r.dt[t] == ATTN_BF16);
        ok = e < 1e-2;
        snprintf(detail, sizeof detail, "rel_l2 %.2e to the plain launch", e);
      }
      snprintf(what, sizeof what, "%s%s: %s gives the plain %s", tag,
               det ? ", deterministic" : "", way_name[w], tname[t]);
      verdict(ok, what, detail);
    }
  }
  for (int w = 0; w < NWAYS; w++) result_free(&res[w]);
  run_free(&r);
}

/* Zero-length sequences: zero gradients where nothing reaches them. */
static void test_empty(attn_context *ctx, attn_module *m, const char *tag, bool det,
                       const RtDriver *d, int Hk, int Sq, int Skv) {
  Run r = {.d = d, .B = 2, .H = 4, .Hk = Hk, .Sq = Sq, .Skv = Skv};
  char what[160], detail[200];
  snprintf(what, sizeof what, "%s%s: Hk %d, Sq %d, Skv %d gives zero gradients", tag,
           det ? ", deterministic" : "", Hk, Sq, Skv);
  attn_call *c = run_alloc(&r, 5) == 0 ? make_call(ctx, m, &r, det) : NULL;
  attn_status st = c ? attn_call_launch(c, NULL) : ATTN_ERROR_INVALID_ARGUMENT;
  if (!st) st = attn_call_launch_backward(c, NULL);
  CUresult cr = d->CtxSynchronize();
  if (st || cr != CUDA_SUCCESS) {
    snprintf(detail, sizeof detail, "%s %s", attn_status_string(st), attn_context_error(ctx));
    verdict(false, what, detail);
  } else {
    bool ok = true;
    int bad = -1;
    const int check[] = {Skv == 0 ? TO : -1, TGQ, TGK, TGV};
    for (int k = 0; k < 4; k++) {
      int t = check[k];
      if (t < 0 || !r.bytes[t]) continue;
      unsigned char *h = run_read(&r, t);
      for (size_t e = 0; h && e < r.bytes[t]; e++)
        if (h[e]) ok = false, bad = t;
      free(h);
    }
    snprintf(detail, sizeof detail, ok ? "all zero" : "'%s' is not all zero",
             bad >= 0 ? tname[bad] : "");
    verdict(ok, what, detail);
  }
  attn_call_destroy(c);
  run_free(&r);
}

int main(void) {
  const RtDriver *d = gpu_test_driver();
  if (!d) return 0;
  attn_context *ctx = gpu_test_context();
  if (!ctx) return 1;
  CUstream s;
  d->StreamCreate(&s, CU_STREAM_NON_BLOCKING);
  static const int tmpl[2] = {80, 90};
  for (int k = 0; k < 2; k++) {
    char tag[64];
    snprintf(tag, sizeof tag, "backward template %d", tmpl[k]);
    attn_context_set_option(ctx, ATTN_OPTION_BACKWARD_TEMPLATE, tmpl[k]);
    attn_module *m;
    if (gpu_compile_string(ctx, "cap.attn", graph_src, sizeof graph_src - 1, &m)) {
      verdict(false, tag, attn_context_error(ctx));
      continue;
    }
    for (int det = 0; det < 2; det++) {
      test_ways(ctx, m, tag, det, d, s, det == 0);
      for (int hk = 2; hk <= 4; hk += 2) { /* GQA, then one K/V head per query head */
        test_empty(ctx, m, tag, det, d, hk, 77, 0);
        test_empty(ctx, m, tag, det, d, hk, 0, 77);
      }
    }
    attn_module_destroy(m);
  }
  d->StreamDestroy(s);
  attn_context_destroy(ctx);
  rt_driver_release_primary(0);
  printf("plan: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
