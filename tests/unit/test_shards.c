/*
 * test_shards.c: context parallelism's arithmetic (issue 20) on the CPU
 * reference. A graph whose masks see global positions through scalar
 * offsets (`j + k0 <= i + q0`: docs/language.md "Positions") is run on
 * shards of its keys (and of its queries), each shard's (O, lse) merged by
 * ref_merge_partials; the result must be the unsharded graph's: causal
 * with GQA, a sliding window, a document mask read from per-position
 * tensors, with 2, 3 and 4 key shards of unequal lengths, rows whose keys
 * all fall in other shards, and rows with no key at all. And the backward:
 * each (query shard, key shard) pair's gradients from the whole's lse and
 * O (ref_backward_given), summed, are the whole's dq, dk and dv.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"
#include "unit_build.h"

#define SHARD_HEAD(extra_in)                                                                      \
  "  input q : bf16[B, H, Sq, 32];\n  input k : bf16[B, Hk, Skv, 32];\n"                         \
  "  input v : bf16[B, Hk, Skv, 32];\n" extra_in "  scalar q0 : i32 = 0;\n"                       \
  "  scalar k0 : i32 = 0;\n"
#define SHARD_TAIL                                                                                \
  "  o = softmax(s) @ v;\n  output o : bf16[B, H, Sq, 32];\n  output lse = logsumexp(s);\n}\n"

static const char *const graphs[] = {
    "attention causal_gqa {\n" SHARD_HEAD("") "  s = mask((q @ k^T) * 0.18, j + k0 <= i + q0);\n"
    SHARD_TAIL,
    "attention window {\n" SHARD_HEAD("")
    "  s = mask((q @ k^T) * 0.18, j + k0 <= i + q0 && i + q0 - (j + k0) < 29);\n" SHARD_TAIL,
    /* Documents: every position's id, queries' and keys' own tensors (each
     * shard holds its rows); the reference's random ids leave some rows
     * without any key. */
    "attention documents {\n" SHARD_HEAD("  input docq : i32[B, Sq];\n  input dock : i32[B, Skv];\n")
    "  s = mask((q @ k^T) * 0.18, docq[b, i] % 7 == dock[b, j] % 7 && j + k0 <= i + q0);\n"
    SHARD_TAIL,
};

static int tensor_named(const IrGraph *g, const char *name) {
  for (int t = 0; t < g->ntensors; t++)
    if (!strcmp(g->tensors[t].name, name)) return t;
  cr_assert_fail("no tensor '%s'", name);
  return -1;
}

/* t's rows [a, b) along dimension dim, a fresh copy. */
static RefTensor slice(const RefTensor *t, int dim, int64_t a, int64_t b) {
  RefTensor s = *t;
  s.shape[dim] = b - a;
  int64_t outer = 1, inner = 1;
  for (int k = 0; k < dim; k++) outer *= t->shape[k];
  for (int k = dim + 1; k < t->ndims; k++) inner *= t->shape[k];
  s.data = malloc((size_t)(outer * (b - a) * inner + 1) * sizeof(double));
  cr_assert(s.data);
  for (int64_t o = 0; o < outer; o++)
    memcpy(s.data + o * (b - a) * inner, t->data + (o * t->shape[dim] + a) * inner,
           (size_t)((b - a) * inner) * sizeof(double));
  return s;
}

/* The graph on query rows [qa, qb) and key rows [ka, kb) of full's
 * inputs, with q0 = qa and k0 = ka: its o and lse rows into o_out and
 * lse_out (malloc'ed). */
static void run_shard(const RefArgs *full, int64_t qa, int64_t qb, int64_t ka, int64_t kb,
                      double **o_out, double **lse_out) {
  const IrGraph *g = full->g;
  const int sym_q = g->tensors[g->q].dim_sym[2], sym_k = g->tensors[g->k].dim_sym[2];
  RefArgs sa = {.g = g};
  sa.tensors = calloc((size_t)g->ntensors + 1, sizeof *sa.tensors);
  cr_assert(sa.tensors);
  for (int t = 0; t < g->ntensors; t++) {
    const IrTensor *it = &g->tensors[t];
    if (it->is_output) continue;
    sa.tensors[t] = slice(&full->tensors[t], 0, 0, full->tensors[t].shape[0]);
    for (int d = 0; d < it->ndims; d++) {
      if (it->dim_sym[d] != sym_q && it->dim_sym[d] != sym_k) continue;
      const bool is_q = it->dim_sym[d] == sym_q;
      RefTensor cut = slice(&sa.tensors[t], d, is_q ? qa : ka, is_q ? qb : kb);
      free(sa.tensors[t].data);
      sa.tensors[t] = cut;
    }
  }
  StrBuf err = {0}, spec = {0};
  sb_printf(&spec, "q0=%lld,k0=%lld", (long long)qa, (long long)ka);
  cr_assert_eq(ref_set_scalars(&sa, spec.data, &err), 0, "%s", err.data);
  cr_assert_eq(ref_forward(&sa, &err), 0, "%s", err.data);
  RefTensor *o = &sa.tensors[tensor_named(g, "o")], *lse = &sa.tensors[tensor_named(g, "lse")];
  *o_out = o->data;
  *lse_out = lse->data;
  o->data = lse->data = NULL; /* handed over */
  ref_args_free(&sa);
  sb_free(&err);
  sb_free(&spec);
}

/* Key shards at cuts[0] = 0 < cuts[1] < ... < cuts[n] = Skv, queries
 * [qa, qb): merged, against the unsharded rows. Returns how many rows
 * had no key at all. */
static int64_t check_shards(const RefArgs *full, const int64_t *cuts, int n, int64_t qa, int64_t qb) {
  const IrGraph *g = full->g;
  const RefTensor *fo = &full->tensors[tensor_named(g, "o")];
  const RefTensor *fl = &full->tensors[tensor_named(g, "lse")];
  const int64_t B = fo->shape[0], H = fo->shape[1], S = fo->shape[2], D = fo->shape[3];
  const int64_t rows = B * H * (qb - qa);
  double *o[8], *l[8];
  for (int s = 0; s < n; s++) run_shard(full, qa, qb, cuts[s], cuts[s + 1], &o[s], &l[s]);
  double *mo = malloc((size_t)(rows * D) * sizeof(double)), *ml = malloc((size_t)rows * sizeof(double));
  cr_assert(mo && ml);
  ref_merge_partials(n, rows, D, (const double *const *)o, (const double *const *)l, mo, ml);
  int64_t empty = 0;
  for (int64_t bh = 0; bh < B * H; bh++)
    for (int64_t i = qa; i < qb; i++) {
      const int64_t r = bh * (qb - qa) + (i - qa), fr = bh * S + i;
      const double want = fl->data[fr], got = ml[r];
      if (isinf(want)) {
        empty++;
        cr_assert(isinf(got) && got < 0, "%s: row %lld lse %g, want -inf", g->name, (long long)fr, got);
      } else {
        cr_assert(fabs(got - want) <= 1e-12 * (1 + fabs(want)), "%s: row %lld lse %.17g, want %.17g",
                  g->name, (long long)fr, got, want);
      }
      for (int64_t c = 0; c < D; c++)
        cr_assert(fabs(mo[r * D + c] - fo->data[fr * D + c]) <= 1e-12,
                  "%s: shards %d, queries [%lld, %lld): o[%lld][%lld] %.17g, want %.17g", g->name, n,
                  (long long)qa, (long long)qb, (long long)fr, (long long)c, mo[r * D + c],
                  fo->data[fr * D + c]);
    }
  for (int s = 0; s < n; s++) free(o[s]), free(l[s]);
  free(mo);
  free(ml);
  return empty;
}

Test(shards, merged_shards_equal_the_whole) {
  for (size_t k = 0; k < sizeof graphs / sizeof graphs[0]; k++) {
    Arena *a = arena_new();
    IrGraph *g = unit_build(a, "<shards>", graphs[k])->graphs[0];
    RefArgs full = {.g = g};
    StrBuf err = {0};
    cr_assert_eq(ref_make_inputs(&full, "B=2,H=4,Hk=2,Sq=96,Skv=96", 5 + k, &err), 0, "%s",
                 err.data);
    cr_assert_eq(ref_forward(&full, &err), 0, "%s", err.data);
    static const int64_t two[] = {0, 40, 96}, three[] = {0, 17, 50, 96},
                         four[] = {0, 24, 48, 72, 96};
    int64_t empty = check_shards(&full, two, 2, 0, 96);
    empty += check_shards(&full, three, 3, 0, 96);
    empty += check_shards(&full, four, 4, 0, 96);
    /* A query shard too (its rows' global positions from q0). */
    empty += check_shards(&full, three, 3, 50, 96);
    empty += check_shards(&full, four, 4, 7, 33);
    if (k == 2) /* the documents' random ids leave rows with no key */
      cr_assert_gt(empty, 0, "no row without keys: the -inf merge went untested");
    ref_args_free(&full);
    sb_free(&err);
    arena_free(a);
  }
}

/* The merge on its own: -inf parts weigh nothing, a row with no part
 * gets O 0 and lse -inf, and huge lse values do not overflow. */
Test(shards, merge_edges) {
  const double o0[] = {1, 2, 3, 4, 5, 6}, o1[] = {7, 8, 9, 10, 11, 12};
  const double l0[] = {-INFINITY, 1000, -INFINITY}, l1[] = {0.5, 1000, -INFINITY};
  const double *o[] = {o0, o1}, *l[] = {l0, l1};
  double mo[6], ml[3];
  ref_merge_partials(2, 3, 2, o, l, mo, ml);
  cr_assert_eq(ml[0], 0.5);
  cr_assert(mo[0] == 7 && mo[1] == 8);
  cr_assert(fabs(ml[1] - (1000 + log(2.0))) < 1e-12);
  cr_assert(fabs(mo[2] - 6) < 1e-12 && fabs(mo[3] - 7) < 1e-12);
  cr_assert(isinf(ml[2]) && ml[2] < 0);
  cr_assert(mo[4] == 0 && mo[5] == 0);
}

/* The backward of shards: every (query shard, key shard) pair's gradients
 * from the whole's lse and O rows of its queries (ref_backward_given),
 * dq summed over key shards and dk, dv over query shards, against the
 * whole graph's backward. */
static void check_backward(const IrGraph *g, const BwdGraph *bg, RefArgs *full, const double *dout,
                           const RefTensor *want, const int64_t *qcuts, int nq, const int64_t *kcuts,
                           int nk) {
  const RefTensor *fo = &full->tensors[tensor_named(g, "o")];
  const RefTensor *fl = &full->tensors[tensor_named(g, "lse")];
  RefTensor dout_t = *fo;
  dout_t.data = (double *)dout;
  RefTensor *sum = calloc((size_t)g->ntensors, sizeof *sum);
  cr_assert(sum);
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].grad) {
      sum[t] = full->tensors[t];
      sum[t].data = calloc((size_t)ref_numel(&sum[t]) + 1, sizeof(double));
    }
  const int sym_q = g->tensors[g->q].dim_sym[2], sym_k = g->tensors[g->k].dim_sym[2];
  for (int a = 0; a < nq; a++)
    for (int b = 0; b < nk; b++) {
      const int64_t qa = qcuts[a], qb = qcuts[a + 1], ka = kcuts[b], kb = kcuts[b + 1];
      RefArgs sa = {.g = g};
      sa.tensors = calloc((size_t)g->ntensors + 1, sizeof *sa.tensors);
      cr_assert(sa.tensors);
      for (int t = 0; t < g->ntensors; t++) {
        const IrTensor *it = &g->tensors[t];
        if (it->is_output) continue;
        sa.tensors[t] = slice(&full->tensors[t], 0, 0, full->tensors[t].shape[0]);
        for (int d = 0; d < it->ndims; d++) {
          if (it->dim_sym[d] != sym_q && it->dim_sym[d] != sym_k) continue;
          const bool is_q = it->dim_sym[d] == sym_q;
          RefTensor cut = slice(&sa.tensors[t], d, is_q ? qa : ka, is_q ? qb : kb);
          free(sa.tensors[t].data);
          sa.tensors[t] = cut;
        }
      }
      StrBuf err = {0}, spec = {0};
      sb_printf(&spec, "q0=%lld,k0=%lld", (long long)qa, (long long)ka);
      cr_assert_eq(ref_set_scalars(&sa, spec.data, &err), 0, "%s", err.data);
      RefTensor lse = slice(fl, 2, qa, qb), o = slice(fo, 2, qa, qb), dos = slice(&dout_t, 2, qa, qb);
      RefTensor *grads = calloc((size_t)g->ntensors, sizeof *grads);
      cr_assert(grads);
      cr_assert_eq(ref_backward_given(&sa, bg, dos.data, lse.data, o.data, grads, &err), 0, "%s",
                   err.data);
      for (int t = 0; t < g->ntensors; t++) {
        if (!g->tensors[t].grad) continue;
        const bool is_q = g->tensors[t].dim_sym[2] == sym_q;
        const int64_t lo = is_q ? qa : ka, rows = grads[t].shape[2], cols = grads[t].shape[3];
        const int64_t outer = grads[t].shape[0] * grads[t].shape[1];
        for (int64_t x = 0; x < outer; x++)
          for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
              sum[t].data[(x * sum[t].shape[2] + lo + r) * cols + c] +=
                  grads[t].data[(x * rows + r) * cols + c];
        free(grads[t].data);
      }
      free(grads);
      free(lse.data), free(o.data), free(dos.data);
      ref_args_free(&sa);
      sb_free(&err), sb_free(&spec);
    }
  for (int t = 0; t < g->ntensors; t++) {
    if (!g->tensors[t].grad) continue;
    double most = 0, scale = 0;
    for (int64_t e = 0; e < ref_numel(&want[t]); e++) {
      const double d = fabs(sum[t].data[e] - want[t].data[e]);
      most = d > most ? d : most;
      scale = fabs(want[t].data[e]) > scale ? fabs(want[t].data[e]) : scale;
    }
    cr_assert(most <= 1e-12 * (1 + scale), "%s: d%s off by %g (largest %g), %d x %d shards",
              g->name, g->tensors[t].name, most, scale, nq, nk);
    free(sum[t].data);
  }
  free(sum);
}

Test(shards, shard_gradients_from_the_whole_stats_sum_to_the_whole) {
  for (size_t k = 0; k < sizeof graphs / sizeof graphs[0]; k++) {
    /* The same graph with grad q, k, v. */
    char text[2048];
    const char *end = strrchr(graphs[k], '}');
    cr_assert(end && (size_t)(end - graphs[k]) + 32 < sizeof text);
    snprintf(text, sizeof text, "%.*s  grad q, k, v;\n}\n", (int)(end - graphs[k]), graphs[k]);
    Arena *a = arena_new();
    IrGraph *g = unit_build(a, "<shards>", text)->graphs[0];
    Diag d = {0};
    BwdGraph *bg = bwd_derive(g, a, &d);
    cr_assert(bg, "bwd_derive: %s", d.out.data ? d.out.data : "");
    diag_free(&d);
    RefArgs full = {.g = g};
    StrBuf err = {0};
    cr_assert_eq(ref_make_inputs(&full, "B=2,H=4,Hk=2,Sq=96,Skv=96", 11 + k, &err), 0, "%s",
                 err.data);
    cr_assert_eq(ref_forward(&full, &err), 0, "%s", err.data);
    const RefTensor *fo = &full.tensors[tensor_named(g, "o")];
    double *dout = malloc((size_t)ref_numel(fo) * sizeof(double));
    cr_assert(dout);
    RefRng rng = ref_rng(77, k);
    for (int64_t e = 0; e < ref_numel(fo); e++) dout[e] = ref_rng_normal(&rng);
    RefTensor *want = calloc((size_t)g->ntensors, sizeof *want);
    cr_assert(want);
    cr_assert_eq(ref_backward(&full, bg, dout, want, &err), 0, "%s", err.data);
    static const int64_t whole[] = {0, 96}, two[] = {0, 40, 96}, three[] = {0, 17, 50, 96};
    check_backward(g, bg, &full, dout, want, whole, 1, three, 3);
    check_backward(g, bg, &full, dout, want, two, 2, two, 2);
    check_backward(g, bg, &full, dout, want, three, 3, two, 2);
    for (int t = 0; t < g->ntensors; t++) free(want[t].data);
    free(want);
    free(dout);
    ref_args_free(&full);
    sb_free(&err);
    arena_free(a);
  }
}
