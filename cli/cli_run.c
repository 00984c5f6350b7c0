/*
 * cli_run.c: `attnc run FILE` — the main job. For each graph: random
 * inputs (ref_make_inputs), a JIT compile through libattn, a launch on the
 * GPU, a comparison with the CPU reference and, with --bench, a timing.
 * --cpu runs the CPU reference alone. --backward also runs the backward of
 * a graph with grad on a random dO (its gradients and a grad block's amax
 * outputs summarized, or checked against the CPU backward). Without a GPU
 * the graph is still compiled, and the command says what it could not run
 * (exit status 3).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "cli.h"
#include "cuda_driver.h"
#include "rt.h"

typedef struct RunOptions {
  const char *file, *shape, *set, *graph, *arch;
  uint64_t seed;
  bool cpu, check, bench, bshd, backward;
} RunOptions;

static int parse_run_options(int argc, char **argv, RunOptions *o) {
  memset(o, 0, sizeof *o);
  o->seed = 1;
  for (int k = 0; k < argc; k++) {
    const char *a = argv[k];
    bool has_val = k + 1 < argc;
    if (!strcmp(a, "--cpu")) o->cpu = true;
    else if (!strcmp(a, "--check")) o->check = true;
    else if (!strcmp(a, "--bench")) o->bench = true;
    else if (!strcmp(a, "--bshd")) o->bshd = true;
    else if (!strcmp(a, "--backward")) o->backward = true;
    else if (!strcmp(a, "--shape") && has_val) o->shape = argv[++k];
    else if (!strcmp(a, "--set") && has_val) o->set = argv[++k];
    else if (!strcmp(a, "--graph") && has_val) o->graph = argv[++k];
    else if (!strcmp(a, "--arch") && has_val) o->arch = argv[++k];
    else if (!strcmp(a, "--seed") && has_val) {
      char *end;
      o->seed = strtoull(argv[++k], &end, 10);
      if (*end) return cli_usage_error("--seed takes a number, not '%s'", argv[k]);
    } else if (a[0] == '-') return cli_usage_error("unknown or incomplete option '%s'", a);
    else if (o->file) return cli_usage_error("%s", "run takes one FILE");
    else o->file = a;
  }
  if (!o->file) return cli_usage_error("%s", "run needs a FILE");
  return EXIT_OK;
}

/* FLOPs of the two matmuls over every (i, j) pair, masked or not. */
static double dense_flops(const IrGraph *g, const RefArgs *ra) {
  const int64_t *q = ra->tensors[g->q].shape, *k = ra->tensors[g->k].shape;
  const int64_t *v = ra->tensors[g->v].shape;
  return 2.0 * (double)q[0] * (double)q[1] * (double)q[2] * (double)k[2] *
         (double)(q[3] + v[3]);
}

static const char *shape_text(Arena *a, const RefTensor *t) {
  StrBuf sb = {0};
  for (int d = 0; d < t->ndims; d++) sb_printf(&sb, "%s%lld", d ? "x" : "", (long long)t->shape[d]);
  const char *r = arena_strdup(a, sb.len ? sb.data : "scalar");
  sb_free(&sb);
  return r;
}

/* Compares each output with the reference; returns the number that fail. */
static int compare_outputs(const IrGraph *g, const RefArgs *ref, const ChkResult *res) {
  int bad = 0;
  for (int n = 0; n < g->noutputs; n++) {
    int k = g->outputs[n].tensor;
    const IrTensor *t = &g->tensors[k];
    RefCompare c = ref_compare(res->outputs[k], ref->tensors[k].data,
                               (size_t)ref_numel(&ref->tensors[k]));
    double tol = chk_tolerance(t->type);
    bool ok = c.rel_l2 <= tol && c.nonfinite_mismatch == 0;
    printf("  %-8s rel_l2 %.2e  max_abs %.2e  nonfinite mismatches %zu  (tolerance %.0e): %s\n",
           t->name, c.rel_l2, c.max_abs, c.nonfinite_mismatch, tol, ok ? "ok" : "MISMATCH");
    bad += !ok;
  }
  return bad;
}

/* The backward's part of a run: the derived graph and a random dO (in
 * the attention output's shape and dO's dtype); NULL after a message. */
typedef struct BwdRun {
  BwdGraph *bg;
  double *dout;
  RefTensor *grads; /* by tensor index */
  double amax[BWD_MAX_AMAX];
} BwdRun;

static bool bwd_run_init(BwdRun *br, RefArgs *ra, const RunOptions *o, Arena *a) {
  const IrGraph *g = ra->g;
  memset(br, 0, sizeof *br);
  Diag d = {0};
  br->bg = bwd_derive(g, a, &d);
  if (!br->bg) {
    fprintf(stderr, "%s", d.out.data ? d.out.data : "");
    diag_free(&d);
    return false;
  }
  diag_free(&d);
  br->dout = chk_random_dout(ra, g->outputs[br->bg->o_output].tensor, o->seed + 1);
  br->grads = calloc((size_t)g->ntensors, sizeof *br->grads);
  return br->dout && br->grads;
}

static void bwd_run_free(BwdRun *br, int ntensors) {
  for (int t = 0; br->grads && t < ntensors; t++) free(br->grads[t].data);
  free(br->grads);
  free(br->dout);
}

/* One line per gradient (its storage dtype, min, max, rms) and amax output. */
static void print_gradients(const IrGraph *g, const BwdRun *br) {
  for (int t = 0; t < g->ntensors; t++) {
    const RefTensor *x = &br->grads[t];
    if (!g->tensors[t].grad || !x->data) continue;
    const DType dt = bwd_tensor_grad_type(g, t);
    double lo = INFINITY, hi = -INFINITY, ss = 0;
    const int64_t n = ref_numel(x);
    for (int64_t e = 0; e < n; e++) {
      lo = fmin(lo, x->data[e]);
      hi = fmax(hi, x->data[e]);
      ss += x->data[e] * x->data[e];
    }
    printf("  d%-7s %-5s min %.4g  max %.4g  rms %.4g\n", g->tensors[t].name, dtype_name(dt), lo,
           hi, n ? sqrt(ss / (double)n) : 0.0);
  }
  for (int k = 0; g->grad && k < g->grad->namax; k++)
    printf("  %-8s f32   %.6g\n", g->grad->amax[k].name, br->amax[k]);
}

/* The GPU's gradients and amax against the CPU backward (FP8: given the
 * GPU forward's stored o and lse, rounded to the storage types). */
static int compare_gradients(const IrGraph *g, RefArgs *ra, BwdRun *br, const ChkResult *res) {
  StrBuf err = {0};
  int bad = 0;
  if (chk_reference_backward(ra, br->bg, br->dout, res, br->grads, br->amax, &err) != 0) {
    fprintf(stderr, "attnc: error: CPU backward: %s\n", err.data ? err.data : "");
    sb_free(&err);
    return EXIT_NORUN;
  }
  const double tol = bwd_is_fp8(g) ? 3e-2 : 2e-2;
  for (int t = 0; t < g->ntensors; t++) {
    if (!g->tensors[t].grad || !br->grads[t].data || !res->grads || !res->grads[t]) continue;
    RefCompare c = ref_compare(res->grads[t], br->grads[t].data, (size_t)ref_numel(&br->grads[t]));
    bool ok = c.rel_l2 <= tol && c.nonfinite_mismatch == 0;
    printf("  d%-7s rel_l2 %.2e  max_abs %.2e  nonfinite mismatches %zu  (tolerance %.0e): %s\n",
           g->tensors[t].name, c.rel_l2, c.max_abs, c.nonfinite_mismatch, tol,
           ok ? "ok" : "MISMATCH");
    bad += !ok;
  }
  for (int k = 0; g->grad && k < g->grad->namax; k++) {
    const double want = br->amax[k], got = res->amax[k];
    bool ok = fabs(got - want) <= 1e-3 * fabs(want) + 1e-30;
    printf("  %-8s %.6g (reference %.6g): %s\n", g->grad->amax[k].name, got, want,
           ok ? "ok" : "MISMATCH");
    bad += !ok;
  }
  sb_free(&err);
  return bad ? EXIT_MISMATCH : EXIT_OK;
}

/* One graph on the GPU: compile (done by the caller), run, compare, time. */
static int run_graph_gpu(attn_context *ctx, attn_module *mod, const IrGraph *g, RefArgs *ra,
                         const RunOptions *o, Arena *a) {
  attn_graph *ag;
  if (attn_module_get_graph(mod, g->name, &ag) != ATTN_SUCCESS) {
    fprintf(stderr, "attnc: error: %s\n", attn_context_error(ctx));
    return EXIT_NORUN;
  }
  StrBuf err = {0};
  ChkOptions co = {.bshd = o->bshd, .count_tiles = true, .bench_iters = o->bench ? 20 : 0};
  ChkResult res;
  BwdRun br = {0};
  const bool bwd = o->backward && bwd_has_grad(g);
  if (bwd && !bwd_run_init(&br, ra, o, a)) {
    bwd_run_free(&br, g->ntensors);
    return EXIT_NORUN;
  }
  co.dout = bwd ? br.dout : NULL;
  co.bshd = co.bshd && !bwd; /* (the backward's check reads dense o and lse) */
  double flops = dense_flops(g, ra);
  /* The CPU reference costs ~1 ns a flop: check by default when small. */
  bool check = o->check || flops <= 4e9;
  int status = EXIT_OK;
  if (chk_run_gpu(ctx, ag, ra, &co, &res, &err) != ATTN_SUCCESS) {
    fprintf(stderr, "attnc: error: graph '%s' did not run: %s\n", g->name, err.data ? err.data : "");
    sb_free(&err);
    chk_result_free(&res, g->ntensors);
    bwd_run_free(&br, g->ntensors);
    return EXIT_NORUN;
  }
  printf("graph %s: ran on the GPU (q %s, k %s), key tiles loaded: %llu\n", g->name,
         shape_text(a, &ra->tensors[g->q]), shape_text(a, &ra->tensors[g->k]),
         res.tiles_visited);
  if (check) {
    StrBuf rerr = {0};
    if (ref_forward(ra, &rerr) != 0) {
      fprintf(stderr, "attnc: error: CPU reference: %s\n", rerr.data ? rerr.data : "");
      status = EXIT_NORUN;
    } else if (compare_outputs(g, ra, &res) > 0) {
      status = EXIT_MISMATCH;
    }
    if (bwd && status == EXIT_OK) status = compare_gradients(g, ra, &br, &res);
    sb_free(&rerr);
  } else {
    printf("  (not checked against the CPU reference: %.1f GFLOP is large; pass --check)\n",
           flops / 1e9);
  }
  if (o->bench)
    printf("  time %.3f ms (median of %d), %.1f TFLOP/s counting every (i, j) pair\n", res.ms,
           co.bench_iters, flops / (res.ms * 1e-3) / 1e12);
  chk_result_free(&res, g->ntensors);
  bwd_run_free(&br, g->ntensors);
  sb_free(&err);
  return status;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Opens the driver and the device's primary context; on failure says why
 * in `why` and returns false (the graphs are then compiled, not run). */
static bool open_gpu(StrBuf *why) {
  attn_status st;
  if (!rt_driver(&st, why)) return false;
  return rt_driver_make_current_primary(0, why) == ATTN_SUCCESS;
}

/* JIT-compiles the file through libattn, as a user's program would. */
static int compile_run_module(attn_context *ctx, const RunOptions *o, bool gpu, attn_module **mod) {
  if (o->arch || !gpu) attn_context_set_arch(ctx, o->arch ? o->arch : "sm_90a");
  double t0 = now_ms();
  attn_status st = attn_module_compile_file(ctx, o->file, mod);
  if (st != ATTN_SUCCESS) {
    const char *msg = attn_context_error(ctx);
    fprintf(stderr, "%s%s", msg, msg[0] && msg[strlen(msg) - 1] == '\n' ? "" : "\n");
    return st == ATTN_ERROR_SOURCE || st == ATTN_ERROR_UNSUPPORTED ? EXIT_INPUT : EXIT_NORUN;
  }
  /* One line each: the library's warnings carry no prefix of their own. */
  for (const char *w = attn_context_warning(ctx); w && *w;) {
    const char *nl = strchr(w, '\n');
    int n = nl ? (int)(nl - w) : (int)strlen(w);
    fprintf(stderr, "attnc: warning: %.*s\n", n, w);
    w += n + (nl ? 1 : 0);
  }
  const Cache *c = rt_context_cache(ctx);
  printf("compiled %s for %s in %.0f ms (%s)\n", o->file, rt_module_arch(*mod), now_ms() - t0,
         c->compiles ? "NVRTC" : "from the cache");
  return EXIT_OK;
}

/* Random inputs for one graph, with the user's shapes and scalars. */
static int make_inputs(RefArgs *ra, const RunOptions *o) {
  StrBuf err = {0};
  int rc = ref_make_inputs(ra, o->shape ? o->shape : "", o->seed, &err);
  if (rc == 0 && o->set) rc = ref_set_scalars(ra, o->set, &err);
  if (rc == 0) rc = chk_output_shapes(ra, &err);
  if (rc != 0) fprintf(stderr, "attnc: error: graph '%s': %s\n", ra->g->name, err.data ? err.data : "");
  sb_free(&err);
  return rc == 0 ? EXIT_OK : EXIT_USAGE;
}

static int run_graph_cpu(RefArgs *ra, const RunOptions *o, Arena *a) {
  StrBuf err = {0}, out = {0};
  int status = EXIT_OK;
  if (ref_forward(ra, &err) != 0) {
    fprintf(stderr, "attnc: error: graph '%s': %s\n", ra->g->name, err.data ? err.data : "");
    status = EXIT_NORUN;
  } else {
    ref_summarize(&out, ra);
    printf("graph %s: CPU reference\n%s", ra->g->name, out.data ? out.data : "");
  }
  if (status == EXIT_OK && o->backward && bwd_has_grad(ra->g)) {
    BwdRun br;
    if (!bwd_run_init(&br, ra, o, a)) {
      status = EXIT_NORUN;
    } else if (chk_reference_backward(ra, br.bg, br.dout, NULL, br.grads, br.amax, &err) != 0) {
      fprintf(stderr, "attnc: error: graph '%s': CPU backward: %s\n", ra->g->name,
              err.data ? err.data : "");
      status = EXIT_NORUN;
    } else {
      printf("  backward on a random dO:\n");
      print_gradients(ra->g, &br);
    }
    bwd_run_free(&br, ra->g->ntensors);
  }
  sb_free(&err);
  sb_free(&out);
  return status;
}

int cli_run(int argc, char **argv) {
  RunOptions o;
  int status = parse_run_options(argc, argv, &o);
  if (status != EXIT_OK) return status;
  Arena *a = arena_new();
  IrModule *m = cli_front_end(o.file, a);
  attn_context *ctx = NULL;
  attn_module *mod = NULL;
  StrBuf why = {0};
  bool gpu = false;
  if (!m) {
    status = EXIT_INPUT;
    goto done;
  }
  if (o.graph && !ir_find_graph(m, o.graph)) {
    fprintf(stderr, "attnc: error: %s has no graph '%s'\n", o.file, o.graph);
    status = EXIT_USAGE;
    goto done;
  }
  if (!o.cpu) {
    if (!(ctx = cli_context_create())) {
      status = EXIT_NORUN;
      goto done;
    }
    gpu = open_gpu(&why);
    if ((status = compile_run_module(ctx, &o, gpu, &mod)) != EXIT_OK) goto done;
  }
  for (int k = 0; k < m->ngraphs; k++) {
    const IrGraph *g = m->graphs[k];
    if (o.graph && strcmp(o.graph, g->name)) continue;
    RefArgs ra = {.g = g};
    int st = make_inputs(&ra, &o);
    if (st == EXIT_OK) {
      if (o.cpu) st = run_graph_cpu(&ra, &o, a);
      else if (gpu) st = run_graph_gpu(ctx, mod, g, &ra, &o, a);
      else {
        printf("graph %s: compiled; not run: %s\n", g->name, why.data ? why.data : "no GPU");
        st = EXIT_NORUN;
      }
    }
    ref_args_free(&ra);
    if (st > status) status = st;
  }
done:
  attn_module_destroy(mod);
  attn_context_destroy(ctx);
  sb_free(&why);
  arena_free(a);
  return status;
}
