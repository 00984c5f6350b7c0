/*
 * test_packed_order.c: the packed forward's order step (fwd_sm90.cuh,
 * attn_fwd90_order) on the GPU, read back from a workspace the test owns.
 *
 * The step sorts the packed query tiles by their key tiles, most first,
 * tiles no sequence owns last, ties by tile number. Here the host computes
 * each tile's sequence and key tiles itself (from the offsets, the plan's
 * BM and BN and the mask's bounds: top-left causal, or none), sorts them
 * the same way, and the GPU's order and keys must equal that exactly.
 * The outputs are test_forward's packed tests' job (ragged offsets, empty
 * sequences, NaN poison on rows no sequence covers); this test pins the
 * order itself, which they cannot see.
 *
 * Cases: a few ragged sequences (with empty ones), and 300 sequences of
 * 1-400 tokens, whose tiles outnumber the step's 256 threads (its
 * placement runs in rounds). Skips without a GPU (exit 0), and where the
 * graph does not run on sm_90a's persistent forward (no order step).
 */
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "attnc.h"
#include "cuda_driver.h"
#include "gpu_test.h"

static const char text[] =
    "attention order_causal {\n"
    "  input q : bf16[T, H, 64];\n  input k : bf16[T, H, 64];\n  input v : bf16[T, H, 64];\n"
    "  input cu : i32[B1];\n"
    "  s = mask((packed(q, cu) @ packed(k, cu)^T) * 0.125, j <= i);\n"
    "  o = softmax(s) @ packed(v, cu);\n"
    "  output o : bf16[T, H, 64];\n}\n"
    "attention order_full {\n"
    "  input q : bf16[T, H, 128];\n  input k : bf16[T, H, 128];\n  input v : bf16[T, H, 128];\n"
    "  input cu : i32[B1];\n"
    "  s = (packed(q, cu) @ packed(k, cu)^T) * 0.088;\n"
    "  o = softmax(s) @ packed(v, cu);\n"
    "  output o : bf16[T, H, 128];\n}\n";

enum { BUCKETS = 1024 }; /* the step's: 4 a thread, FWD_ORDER_THREADS threads */

/* The rows of query tile m of a sequence of len rows (fwd90_rows). */
static void tile_rows(const FwdConfig *c, int m, int len, int *i0, int *i_end) {
  if (c->partial_first) {
    const int r = len - ((len > 1 ? len - 1 : 0) / c->bm) * c->bm;
    const int first = (r + 15) / 16 * 16;
    *i0 = m == 0 ? 0 : first + (m - 1) * c->bm;
    *i_end = first + m * c->bm < len ? first + m * c->bm : len;
  } else {
    *i0 = m * c->bm;
    *i_end = *i0 + c->bm < len ? *i0 + c->bm : len;
  }
}

/* Tile x's key: 0 where no sequence owns it, else 1 + its key tiles
 * (capped as the step caps them). */
static int tile_key(const FwdConfig *c, bool causal, const int *cu, int B, int x) {
  int b = 0;
  for (int s = 0; s < B; s++)
    if (cu[s] / c->bm + s <= x) b = s;
  const int m = x - (cu[b] / c->bm + b), len = cu[b + 1] - cu[b];
  if (B == 0 || m < 0 || m * c->bm >= len) return 0;
  int i0, i_end;
  tile_rows(c, m, len, &i0, &i_end);
  const int j_hi = causal ? (i_end < len ? i_end : len) : len; /* j <= i: keys up to the last row */
  const int tiles = (j_hi + c->bn - 1) / c->bn;
  return 1 + (tiles < BUCKETS - 2 ? tiles : BUCKETS - 2);
}

typedef struct Expect {
  int key, x;
} Expect;

static int cmp_expect(const void *pa, const void *pb) {
  const Expect *a = pa, *b = pb;
  if (a->key != b->key) return b->key - a->key;
  return a->x - b->x;
}

/* One case: B sequences of lens[b] tokens, H heads; the order step's
 * workspace slice read back and compared with the host's sort. */
static void run_order(const RtDriver *d, attn_context *ctx, attn_module *mod,
                      const GraphCompile *gc, int H, const int *lens, int B, const char *what) {
  const FwdConfig *c = &gc->cfg;
  const int D = gc->fwd->d_qk;
  const bool causal = gc->fwd->nmasks > 0;
  int *cu = malloc(sizeof(int) * (size_t)(B + 1));
  cu[0] = 0;
  for (int b = 0; b < B; b++) cu[b + 1] = cu[b] + lens[b];
  const int T = cu[B], n = (T + c->bm - 1) / c->bm + B;
  char detail[256] = "";
  bool ok = false;
  attn_graph *g = NULL;
  attn_call *call = NULL;
  CUdeviceptr buf[5] = {0}, ws = 0;
  size_t bytes = 0;
  int *got = NULL;
  Expect *want = NULL;
  const size_t el = (size_t)T * (size_t)H * (size_t)D * 2;
  if (attn_module_get_graph(mod, gc->g->name, &g) || attn_call_create(g, &call)) {
    snprintf(detail, sizeof detail, "%s", attn_context_error(ctx));
    goto done;
  }
  for (int t = 0; t < 4; t++) /* q, k, v, o */
    if (d->MemAlloc(&buf[t], el ? el : 2) != CUDA_SUCCESS || d->MemsetD8(buf[t], 0, el) != CUDA_SUCCESS)
      goto done;
  if (d->MemAlloc(&buf[4], sizeof(int) * (size_t)(B + 1)) != CUDA_SUCCESS ||
      d->MemcpyHtoD(buf[4], cu, sizeof(int) * (size_t)(B + 1)) != CUDA_SUCCESS)
    goto done;
  const int64_t shape[3] = {T, H, D}, cshape[1] = {B + 1};
  static const char *const names[4] = {"q", "k", "v", "o"};
  attn_status st = ATTN_SUCCESS;
  for (int t = 0; t < 4 && !st; t++)
    st = attn_call_bind_tensor(call, names[t], (void *)(uintptr_t)buf[t], ATTN_BF16, 3, shape,
                               NULL);
  if (!st) st = attn_call_bind_tensor(call, "cu", (void *)(uintptr_t)buf[4], ATTN_I32, 1, cshape, NULL);
  if (!st) st = attn_call_workspace_size(call, ATTN_PASS_FORWARD, &bytes);
  if (!st && (bytes < sizeof(int) * 2 * (size_t)n || d->MemAlloc(&ws, bytes) != CUDA_SUCCESS)) {
    snprintf(detail, sizeof detail, "workspace of %zu bytes for %d tiles", bytes, n);
    goto done;
  }
  if (!st) d->MemsetD8(ws, 0xa5, bytes); /* garbage in the caller's workspace must not matter */
  if (!st) st = attn_call_launch_with_workspace(call, (void *)(uintptr_t)ws, bytes, NULL);
  if (st) {
    snprintf(detail, sizeof detail, "%s", attn_context_error(ctx));
    goto done;
  }
  got = malloc(sizeof(int) * 2 * (size_t)(n ? n : 1));
  want = malloc(sizeof(Expect) * (size_t)(n ? n : 1));
  /* (the order's slice comes first in the forward's workspace: plan.c) */
  if (d->CtxSynchronize() != CUDA_SUCCESS ||
      (n && d->MemcpyDtoH(got, ws, sizeof(int) * 2 * (size_t)n) != CUDA_SUCCESS)) {
    snprintf(detail, sizeof detail, "the launch or the read-back failed");
    goto done;
  }
  for (int x = 0; x < n; x++) want[x] = (Expect){tile_key(c, causal, cu, B, x), x};
  qsort(want, (size_t)n, sizeof *want, cmp_expect);
  ok = true;
  for (int r = 0; r < n && ok; r++) {
    const int x = got[r];
    if (x != want[r].x || x < 0 || x >= n || got[n + x] != want[r].key) {
      snprintf(detail, sizeof detail, "place %d of %d: tile %d (key %d), expected tile %d (key %d)",
               r, n, x, x >= 0 && x < n ? got[n + x] : -1, want[r].x, want[r].key);
      ok = false;
    }
  }
  if (ok) snprintf(detail, sizeof detail, "%d tiles, BM %d, BN %d", n, c->bm, c->bn);
done:
  verdict(ok, what, detail);
  free(got);
  free(want);
  free(cu);
  for (int t = 0; t < 5; t++)
    if (buf[t]) d->MemFree(buf[t]);
  if (ws) d->MemFree(ws);
  attn_call_destroy(call);
}

int main(void) {
  const RtDriver *d = gpu_test_driver();
  if (!d) return 0;
  attn_context *ctx = gpu_test_context();
  if (!ctx) return 1;
  attn_module *mod = NULL;
  Arena *a = arena_new();
  Diag dg = {0};
  Source *src = source_from_string(a, "order.attn", text, strlen(text));
  IrModule *m = src ? front_end(src, a, &dg) : NULL;
  const CompileOptions o = {.arch = "sm_90a", .sm90_variant = gpu_test_sm90_variant()};
  Compiled cm = {0};
  if (!m || compile_module(m, &o, STAGE_PLAN, a, &dg, &cm) != 0 ||
      gpu_compile_string(ctx, "order.attn", text, strlen(text), &mod) != ATTN_SUCCESS) {
    verdict(false, "compile order.attn", dg.out.data ? dg.out.data : attn_context_error(ctx));
  } else {
    static const int few[] = {0, 700, 3, 2000, 129, 0, 64, 1000, 1};
    int many[300];
    for (int b = 0; b < 300; b++) many[b] = 1 + (b * 7919 + 13) % 400;
    for (int k = 0; k < cm.ngraphs; k++) {
      const GraphCompile *gc = &cm.graphs[k];
      char what[128];
      if (!gc->cfg.tile_order) {
        snprintf(what, sizeof what, "%s: no order step on this forward", gc->g->name);
        printf("SKIP: %s\n", what);
        skipped++;
        continue;
      }
      snprintf(what, sizeof what, "%s: 9 ragged sequences", gc->g->name);
      run_order(d, ctx, mod, gc, 2, few, 9, what);
      snprintf(what, sizeof what, "%s: 300 sequences of 1-400 tokens", gc->g->name);
      run_order(d, ctx, mod, gc, 1, many, 300, what);
    }
  }
  attn_module_destroy(mod);
  diag_free(&dg);
  arena_free(a);
  attn_context_destroy(ctx);
  rt_driver_release_primary(0);
  printf("packed order: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
