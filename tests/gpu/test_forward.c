/*
 * test_forward.c: the forward kernels on the GPU against the CPU reference.
 *
 * Every example the matcher takes, at several shapes (tile multiples and
 * not, Sq != Skv both ways, GQA, BSHD strides), on fresh random inputs with
 * NaN-poisoned outputs; a fully masked row (O = 0 exactly, lse = -inf, no
 * NaN); the mask analysis: a causal forward loads about half the key
 * tiles of a full one; separable masks (document ids: sorted, unsorted,
 * one document; f32 sides with NaN) against the reference, and the tiles
 * they skip; dropout's mask, bit-identical to the CPU's; and the split-KV
 * decode kernel (packed GQA rows, forced split counts, the same bits twice,
 * fully masked rows). Without a GPU
 * it says so and skips (exit 0).
 * Run from the repository root (it reads examples/).
 */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "ref.h"
#include "check.h"
#include "cuda_driver.h"
#include "gpu_test.h"
#include "fwd_case.h"


/* The decode kernel (few packed query rows against many keys) against
 * the CPU reference, for the examples decode_paths lists (test_example
 * calls it with their modules): MHA, GQA and MQA packing, one to four row
 * blocks, masks and score modifications, head dims 64, 128 and 256, at the
 * split count the plan chooses and at forced counts (1, 3, 7 or just 3);
 * and the chosen split count twice on the same inputs gives the same bits. */
static const char *const decode_paths[] = {
    "examples/sdpa.attn",    "examples/gqa.attn",   "examples/mqa.attn",
    "examples/causal_bottom_right.attn", "examples/bias.attn", "examples/softcap.attn",
    "examples/lse.attn",     "examples/padding.attn", "examples/gemma2_local.attn",
    "examples/backward_gqa.attn", "examples/relative_position.attn", "examples/fp8_kv_cache.attn",
    "examples/sinks.attn", "examples/streaming_llm.attn", "examples/paged_kv.attn"};

static bool kv_fp8(const IrGraph *g) {
  DType t = g->tensors[g->k].type;
  return t == DT_E4M3 || t == DT_E5M2;
}

/* Every finite value of the FP8 type in k and v (bytes n % 256 in order,
 * NaNs skipped): the kernel's conversion of each, subnormals included,
 * against the reference's. */
static void fill_every_fp8(RefArgs *ra, const void *arg) {
  (void)arg;
  fill_every_fp8_value(ra, ra->g->k);
  fill_every_fp8_value(ra, ra->g->v);
}

static void test_decode(attn_context *ctx, attn_graph *ag, const IrGraph *g, const char *path,
                        Arena *a, uint64_t *seed) {
  /* B, H, Hk, Sq, Skv: one query of 32:8 against 4100 keys; 3 of 8:2;
   * 4 of 16:2 (32 rows, two blocks); 16 of 4:1 (64 rows, four); one
   * key; a tile and a bit. */
  static const int shapes[][5] = {{1, 32, 8, 1, 4100}, {2, 8, 2, 3, 1000}, {1, 16, 2, 4, 777},
                                  {1, 4, 1, 16, 2000}, {2, 4, 4, 1, 1},    {3, 4, 2, 2, 65}};
  /* Every split count for the plain MHA/GQA graphs and the FP8 caches; the
   * plan's choice and 3 for the other masks and score mods (the plan's
   * choice is 1 for the last two shapes), to keep the device time down. */
  static const int all_splits[] = {0, 1, 3, 7}, few_splits[] = {0, 3};
  const bool all = g->tensors[g->k].paged || kv_fp8(g) || strstr(path, "sdpa") || strstr(path, "/gqa");
  const int *splits = all ? all_splits : few_splits;
  const size_t nsplits = all ? 4 : 2;
  StrBuf spec = {0};
  for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
    chk_shape_spec(g, &spec, shapes[sh][0], shapes[sh][1], shapes[sh][2], shapes[sh][3],
                   shapes[sh][4]);
    for (size_t sp = 0; sp < nsplits; sp++) {
      attn_context_set_option(ctx, ATTN_OPTION_DECODE_SPLITS, splits[sp]);
      ChkOptions co = {0};
      ChkResult r1, r2;
      RefArgs ra1, ra2;
      const char *label = arena_printf(a, "decode %s:%s splits %d", path, g->name, splits[sp]);
      if (!run_case(ctx, ag, g, spec.data, *seed, &co, label, &r1, &ra1)) continue;
      if (splits[sp] == 0 && run_case(ctx, ag, g, spec.data, *seed, &co, label, &r2, &ra2)) {
        bool same = true;
        for (int n = 0; n < g->noutputs; n++) {
          int t = g->outputs[n].tensor;
          same &= !memcmp(r1.outputs[t], r2.outputs[t],
                          (size_t)ref_numel(&ra1.tensors[t]) * sizeof(double));
        }
        verdict(same, arena_printf(a, "%s [%s]: the same bits twice", label, spec.data), NULL);
        chk_result_free(&r2, g->ntensors);
        ref_args_free(&ra2);
      }
      chk_result_free(&r1, g->ntensors);
      ref_args_free(&ra1);
    }
    (*seed)++;
  }
  if (kv_fp8(g)) {
    chk_shape_spec(g, &spec, 1, 8, 2, 2, 1000);
    ChkOptions co = {0};
    const InputFill every = {fill_every_fp8, NULL};
    run_case_filled(ctx, ag, g, spec.data, (*seed)++, &co,
                    arena_printf(a, "decode %s:%s, every finite %s value in k and v", path, g->name,
                                 dtype_name(g->tensors[g->k].type)),
                    &every, NULL, NULL);
  }
  sb_free(&spec);
  attn_context_set_option(ctx, ATTN_OPTION_DECODE_SPLITS, 0);
}

static void test_example(attn_context *ctx, const char *path, uint64_t *seed) {
  /* (Each example's wall time, printed after its cases: where a device
   * call's test time goes, beyond gpu_time_report's totals.) */
  const double t0 = gpu_now(), compile0 = gpu_t_compile, ref0 = gpu_t_ref;
  attn_module *mod = NULL;
  attn_status st = gpu_compile_file(ctx, path, &mod);
  if (st == ATTN_ERROR_UNSUPPORTED) {
    printf("SKIP: %s: no template runs it yet (tests/golden/emit has the reason)\n", path);
    skipped++;
    return;
  }
  if (st != ATTN_SUCCESS) {
    verdict(false, path, attn_context_error(ctx));
    return;
  }
  Arena *a = arena_new();
  Diag d = {0};
  Source *src = source_load(a, path, &d);
  IrModule *m = src ? ir_build(parse_source(src, a, &d), a, &d) : NULL;
  for (int k = 0; m && k < m->ngraphs; k++) {
    const IrGraph *g = m->graphs[k];
    attn_graph *ag;
    if (attn_module_get_graph(mod, g->name, &ag) != ATTN_SUCCESS) {
      verdict(false, g->name, attn_context_error(ctx));
      continue;
    }
    static const int shapes[][5] = {
        {2, 4, 2, 128, 128}, {1, 4, 2, 77, 201}, {3, 2, 1, 200, 64}, {1, 8, 2, 1, 300}};
    StrBuf spec = {0};
    const char *label = arena_printf(a, "%s:%s", path, g->name);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      chk_shape_spec(g, &spec, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4]);
      ChkOptions co = {0};
      run_case(ctx, ag, g, spec.data, (*seed)++, &co, label, NULL, NULL);
    }
    chk_shape_spec(g, &spec, 2, 4, 2, 100, 150);
    ChkOptions bshd = {.bshd = true};
    run_case(ctx, ag, g, spec.data, (*seed)++, &bshd, label, NULL, NULL);
    sb_free(&spec);
    for (size_t p = 0; p < sizeof decode_paths / sizeof decode_paths[0]; p++)
      if (!strcmp(path, decode_paths[p])) test_decode(ctx, ag, g, path, a, seed);
  }
  if (!m) verdict(false, path, d.out.data);
  diag_free(&d);
  arena_free(a);
  attn_module_destroy(mod);
  printf("time: %s %.1f s (module compile %.1f s, CPU reference %.1f s)\n", path, gpu_now() - t0,
         gpu_t_compile - compile0, gpu_t_ref - ref0);
}

/* Rows 0..4 keep no key: O must be exactly 0 and lse exactly -inf. */
static void test_fully_masked(attn_context *ctx) {
  static const char text[] =
      "attention shifted {\n"
      "  input q : bf16[B, H, Sq, 128];\n  input k : bf16[B, H, Skv, 128];\n"
      "  input v : bf16[B, H, Skv, 128];\n"
      "  s = mask((q @ k^T) * 0.088, j <= i - 5);\n  o = softmax(s) @ v;\n"
      "  output o : bf16[B, H, Sq, 128];\n  output lse = logsumexp(s);\n}\n";
  Arena *a = arena_new();
  attn_module *mod = compile_text(ctx, "shifted.attn", text);
  IrGraph *g = build_ir(a, "shifted.attn", text);
  attn_graph *ag;
  if (mod && g && attn_module_get_graph(mod, "shifted", &ag) == ATTN_SUCCESS) {
    /* The forward (70 rows), then the decode kernel (8 rows of 300 keys)
     * unsplit and over three key splits. */
    static const struct { const char *spec; int sq, splits; const char *label; } cases[] = {
        {"B=1,H=2,Sq=70,Skv=70", 70, 0, "fully masked rows"},
        {"B=1,H=2,Sq=8,Skv=300", 8, 1, "fully masked rows, decode"},
        {"B=1,H=2,Sq=8,Skv=300", 8, 3, "fully masked rows, decode over 3 splits"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      ChkResult res;
      RefArgs ra;
      ChkOptions co = {0};
      attn_context_set_option(ctx, ATTN_OPTION_DECODE_SPLITS, cases[c].splits);
      if (!run_case(ctx, ag, g, cases[c].spec, 99, &co, cases[c].label, &res, &ra)) continue;
      int ko = g->outputs[0].tensor, kl = g->outputs[1].tensor, sq = cases[c].sq;
      bool exact = true;
      for (int h = 0; h < 2; h++)
        for (int i = 0; i < 5; i++) {
          const double *o = res.outputs[ko] + ((size_t)h * sq + (size_t)i) * 128;
          for (int d = 0; d < 128; d++) exact &= o[d] == 0.0;
          double l = res.outputs[kl][h * sq + i];
          exact &= isinf(l) && l < 0;
        }
      verdict(exact, arena_printf(a, "%s: O = 0 and lse = -inf exactly", cases[c].label), NULL);
      chk_result_free(&res, g->ntensors);
      ref_args_free(&ra);
    }
    attn_context_set_option(ctx, ATTN_OPTION_DECODE_SPLITS, 0);
  }
  attn_module_destroy(mod);
  arena_free(a);
}

/* A softcap's tanh where its arguments s / cap stay within [-1, 1] (cap 50,
 * Gaussian scores), leave it on some warps' tiles (cap 4: |s| > 4 on about
 * one tile in eight) and on almost all (cap 0.5): the tanh_poly variant
 * takes the polynomial for a warp's tile only when every argument is in
 * range and tanh.approx otherwise, so all three kinds of tile run against
 * the CPU reference (under auto: tanh.approx everywhere). D 64, 128, 256;
 * lengths that end inside a tile. */
static void test_softcap_ranges(attn_context *ctx) {
  static const int dims[] = {64, 128, 256};
  static const char *const caps[] = {"50.0", "4.0", "0.5"};
  uint64_t seed = 7700;
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++)
    for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
      Arena *a = arena_new();
      const int D = dims[d];
      const char *text = arena_printf(
          a,
          "attention capped {\n  input q : bf16[B, H, Sq, %d];\n  input k : bf16[B, H, Skv, %d];\n"
          "  input v : bf16[B, H, Skv, %d];\n  s = (q @ k^T) * (1.0 / sqrt(%d.0));\n"
          "  s = %s * tanh(s / %s);\n  o = softmax(s) @ v;\n  output o : bf16[B, H, Sq, %d];\n"
          "  output lse = logsumexp(s);\n}\n",
          D, D, D, D, caps[c], caps[c], D);
      attn_module *mod = compile_text(ctx, "capped.attn", text);
      IrGraph *g = build_ir(a, "capped.attn", text);
      attn_graph *ag;
      if (mod && g && attn_module_get_graph(mod, "capped", &ag) == ATTN_SUCCESS) {
        static const char *const specs[] = {"B=2,H=2,Sq=200,Skv=333", "B=1,H=2,Sq=1024,Skv=1024"};
        for (size_t sp = 0; sp < sizeof specs / sizeof specs[0]; sp++) {
          ChkOptions co = {0};
          run_case(ctx, ag, g, specs[sp], seed++, &co,
                   arena_printf(a, "softcap %s, D %d", caps[c], D), NULL, NULL);
        }
      } else {
        verdict(false, arena_printf(a, "softcap %s, D %d: compiled", caps[c], D),
                attn_context_error(ctx));
      }
      attn_module_destroy(mod);
      arena_free(a);
    }
}

/* A work tile's edges on fwd_sm90 (session 36): Q's buffer released after
 * the last S GEMM in work tiles of at most 16 key tiles and after the last
 * P V in longer ones, and consumer warpgroups whose rows all lie past the
 * last query skipping the tile. Persistent CTAs capped at 2, so each walks
 * many work tiles: causal tiles of 1 to 20 key tiles (both releases in one
 * CTA's sequence), key lengths of 15 to 17 key tiles around the bound
 * (128-key tiles at D 64, 176 at D 128), and query lengths whose last tile
 * leaves one or two warpgroups idle (2450 = 19 x 128 + 18; 1000 = 5 x 192 +
 * 40 on D 64's three warpgroups). Other targets run the same shapes. */
static void test_work_tile_edges(attn_context *ctx) {
  /* (The dropout cases: at D 64 under a causal mask auto runs 192-row
   * tiles with a sequence's short tile first, rounded up to 16 rows so a
   * lane's rows i and i + 8 share a dropout group; Sq 200 leaves 8 rows,
   * 193 one, 207 fifteen, 400 sixteen. Unrounded, Sq 200 failed.) */
  static const struct {
    int d;
    bool causal, dropout;
    const char *specs[2];
  } cases[] = {
      {64, true, false, {"B=1,H=2,Sq=2450,Skv=2450", NULL}},
      {64, false, false, {"B=1,H=3,Sq=1000,Skv=1900", "B=1,H=3,Sq=1000,Skv=2200"}},
      {128, false, false, {"B=1,H=2,Sq=300,Skv=2800", "B=1,H=2,Sq=300,Skv=2900"}},
      {64, true, true, {"B=3,H=2,Sq=200,Skv=200", "B=2,H=2,Sq=193,Skv=193"}},
      {64, true, true, {"B=2,H=2,Sq=207,Skv=207", "B=1,H=3,Sq=400,Skv=400"}},
  };
  uint64_t seed = 7900;
  attn_context_set_option(ctx, ATTN_OPTION_PERSISTENT_CTAS, 2);
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    Arena *a = arena_new();
    const int D = cases[c].d;
    const char *text = arena_printf(
        a,
        "attention edges {\n  input q : bf16[B, H, Sq, %d];\n  input k : bf16[B, H, Skv, %d];\n"
        "  input v : bf16[B, H, Skv, %d];\n  scalar rate : f32 = 0.2;\n  scalar seed : u64 = 5;\n"
        "  scalar offset : u64 = 0;\n  s = (q @ k^T) * (1.0 / sqrt(%d.0));\n%s"
        "  p = softmax(s);\n%s  o = p @ v;\n  output o : bf16[B, H, Sq, %d];\n"
        "  output lse = logsumexp(s);\n}\n",
        D, D, D, D, cases[c].causal ? "  s = mask(s, j <= i);\n" : "",
        cases[c].dropout ? "  p = dropout(p, rate, seed, offset);\n" : "", D);
    attn_module *mod = compile_text(ctx, "edges.attn", text);
    IrGraph *g = build_ir(a, "edges.attn", text);
    attn_graph *ag;
    const char *label = arena_printf(a, "work tile edges, D %d%s%s, 2 CTAs", D,
                                     cases[c].causal ? " causal" : "",
                                     cases[c].dropout ? " dropout" : "");
    if (mod && g && attn_module_get_graph(mod, "edges", &ag) == ATTN_SUCCESS) {
      for (int sp = 0; sp < 2 && cases[c].specs[sp]; sp++) {
        ChkOptions co = {0};
        run_case(ctx, ag, g, cases[c].specs[sp], seed++, &co, label, NULL, NULL);
      }
    } else {
      verdict(false, arena_printf(a, "%s: compiled", label), attn_context_error(ctx));
    }
    attn_module_destroy(mod);
    arena_free(a);
  }
  attn_context_set_option(ctx, ATTN_OPTION_PERSISTENT_CTAS, 0);
}

/* The mask analysis skips wholly masked tiles: causal loads ~half. */
static void test_tile_skipping(attn_context *ctx) {
  static const char full[] =
      "attention full {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
      "  input v : bf16[B, H, S, 128];\n  o = softmax((q @ k^T) * 0.088) @ v;\n"
      "  output o : bf16[B, H, S, 128];\n}\n";
  static const char causal[] =
      "attention causal {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
      "  input v : bf16[B, H, S, 128];\n  o = softmax(mask((q @ k^T) * 0.088, j <= i)) @ v;\n"
      "  output o : bf16[B, H, S, 128];\n}\n";
  const char *texts[2] = {full, causal}, *names[2] = {"full", "causal"};
  unsigned long long tiles[2] = {0, 0};
  /* Both with key tiles of 128: an unmasked graph takes 176 by default on
   * sm_90a (tmpl_sm90.c), which would make the tile counts incomparable.
   * (The environment's variant again afterwards.) */
  attn_context_set_option(ctx, ATTN_OPTION_SM90_VARIANT, tmpl_sm90_variant_index("bn128"));
  for (int t = 0; t < 2; t++) {
    Arena *a = arena_new();
    attn_module *mod = compile_text(ctx, names[t], texts[t]);
    IrGraph *g = build_ir(a, names[t], texts[t]);
    attn_graph *ag;
    if (mod && g && attn_module_get_graph(mod, names[t], &ag) == ATTN_SUCCESS) {
      ChkResult res;
      RefArgs ra;
      ChkOptions co = {.count_tiles = true};
      if (run_case(ctx, ag, g, "B=1,H=2,S=2048", 5 + (uint64_t)t, &co, names[t], &res, &ra)) {
        tiles[t] = res.tiles_visited;
        chk_result_free(&res, g->ntensors);
        ref_args_free(&ra);
      }
    }
    attn_module_destroy(mod);
    arena_free(a);
  }
  attn_context_set_option(ctx, ATTN_OPTION_SM90_VARIANT, gpu_test_sm90_variant());
  double ratio = tiles[0] ? (double)tiles[1] / (double)tiles[0] : 0;
  char detail[128];
  snprintf(detail, sizeof detail, "full %llu tiles, causal %llu tiles, ratio %.3f", tiles[0],
           tiles[1], ratio);
  verdict(tiles[0] > 0 && ratio > 0.45 && ratio < 0.6, "causal loads about half the key tiles",
          detail);
}

/* ------------------------------------------- separable masks (doc ids) */

/* Layouts of document ids, written into every i32 tensor of rank 2 or 3
 * whose last dimension is a sequence (per batch and head row): */
typedef enum DocLayout {
  DOC_SORTED,    /* packed documents of random lengths, ids ascending */
  DOC_UNSORTED,  /* ids drawn from {0, 1, 2} per position */
  DOC_SINGLE,    /* one document: every id 0 */
  DOC_RUNS,      /* sorted runs of 256 positions (tile-aligned) */
  DOC_NAN        /* f32 sides: sorted values with NaN at a few positions */
} DocLayout;

static const char *const doc_layout_name[] = {"sorted", "unsorted", "single", "runs of 256",
                                              "f32 with NaN"};

static void fill_docs(RefArgs *ra, const void *arg) {
  DocLayout lay = *(const DocLayout *)arg;
  const IrGraph *g = ra->g;
  RefRng rng = ref_rng(4242, (uint64_t)lay);
  for (int k = 0; k < g->ntensors; k++) {
    const IrTensor *t = &g->tensors[k];
    RefTensor *rt = &ra->tensors[k];
    if (t->is_output || k == g->q || k == g->k || k == g->v || t->ndims < 2) continue;
    int64_t n = rt->shape[t->ndims - 1], rows = ref_numel(rt) / (n ? n : 1);
    for (int64_t r = 0; r < rows; r++) {
      double *x = rt->data + r * n, id = 0;
      for (int64_t e = 0; e < n; e++) {
        switch (lay) {
        case DOC_SORTED: /* a new document with probability 1/40 */
          if (e > 0 && ref_rng_uniform(&rng) < 1.0 / 40) id += 1;
          x[e] = id;
          break;
        case DOC_UNSORTED: x[e] = (double)(ref_rng_next(&rng) % 3); break;
        case DOC_SINGLE: x[e] = 0; break;
        case DOC_RUNS: x[e] = (double)(e / 256); break;
        case DOC_NAN:
          x[e] = ref_rng_uniform(&rng) < 0.02 ? NAN : (double)(e / 37) + 0.5 * (double)(r % 2);
          break;
        }
      }
    }
  }
}

/* Graphs whose masks compare an i side with a j side: document ids
 * (with and without causality, Sq != Skv through two id tensors) and f32
 * per-head sides with NaN. Each against the CPU reference on every id
 * layout, at shapes that are and are not tile multiples. */
static void test_separable_masks(attn_context *ctx) {
  static const char docqk[] =
      "attention docqk {\n"
      "  input q : bf16[B, H, Sq, 128];\n  input k : bf16[B, H, Skv, 128];\n"
      "  input v : bf16[B, H, Skv, 128];\n  input dq : i32[B, Sq];\n  input dk : i32[B, Skv];\n"
      "  s = mask((q @ k^T) * 0.088, dk[b, j] == dq[b, i]);\n  o = softmax(s) @ v;\n"
      "  output o : bf16[B, H, Sq, 128];\n  output lse = logsumexp(s);\n}\n";
  static const char posf[] =
      "attention posf {\n"
      "  input q : bf16[B, H, Sq, 64];\n  input k : bf16[B, H, Skv, 64];\n"
      "  input v : bf16[B, H, Skv, 64];\n  input pq : f32[B, H, Sq];\n  input pk : f32[B, Skv];\n"
      "  s = mask((q @ k^T) * 0.125, pk[b, j] <= pq[b, h, i] + 1.0 && i >= 3);\n"
      "  o = softmax(s) @ v;\n  output o : f32[B, H, Sq, 64];\n}\n";
  const char *texts[] = {docqk, posf}, *names[] = {"docqk", "posf"};
  uint64_t seed = 7000;
  for (int t = 0; t < 2; t++) {
    Arena *a = arena_new();
    attn_module *mod = compile_text(ctx, names[t], texts[t]);
    IrGraph *g = build_ir(a, names[t], texts[t]);
    attn_graph *ag;
    if (mod && g && attn_module_get_graph(mod, names[t], &ag) == ATTN_SUCCESS) {
      static const char *const specs[] = {"B=2,H=2,Sq=300,Skv=300", "B=1,H=3,Sq=77,Skv=513",
                                          "B=2,H=1,Sq=520,Skv=130"};
      for (int lay = 0; lay <= DOC_NAN; lay++) {
        if ((lay == DOC_NAN) != (t == 1) && lay != DOC_SORTED) continue;
        for (size_t sp = 0; sp < sizeof specs / sizeof specs[0]; sp++) {
          DocLayout l = (DocLayout)lay;
          InputFill fill = {fill_docs, &l};
          ChkOptions co = {0};
          const char *label = arena_printf(a, "separable mask %s, %s ids", names[t],
                                           doc_layout_name[lay]);
          run_case_filled(ctx, ag, g, specs[sp], seed++, &co, label, &fill, NULL, NULL);
        }
      }
    }
    attn_module_destroy(mod);
    arena_free(a);
  }
}

/* examples/document.attn on every id layout (its own test runs only the
 * generator's ids, which are nearly all distinct). */
static void test_document_layouts(attn_context *ctx) {
  Arena *a = arena_new();
  Diag d = {0};
  attn_module *mod = NULL;
  Source *src = source_load(a, "examples/document.attn", &d);
  IrModule *m = src ? ir_build(parse_source(src, a, &d), a, &d) : NULL;
  attn_graph *ag;
  if (!m || gpu_compile_file(ctx, "examples/document.attn", &mod) != ATTN_SUCCESS ||
      attn_module_get_graph(mod, "document", &ag) != ATTN_SUCCESS) {
    verdict(false, "examples/document.attn", m ? attn_context_error(ctx) : d.out.data);
  } else {
    static const char *const specs[] = {"B=2,H=2,S=300", "B=1,H=4,S=1024", "B=3,H=1,S=64"};
    uint64_t seed = 7100;
    for (int lay = DOC_SORTED; lay <= DOC_RUNS; lay++)
      for (size_t sp = 0; sp < sizeof specs / sizeof specs[0]; sp++) {
        DocLayout l = (DocLayout)lay;
        InputFill fill = {fill_docs, &l};
        ChkOptions co = {0};
        const char *label = arena_printf(a, "examples/document.attn, %s ids", doc_layout_name[lay]);
        run_case_filled(ctx, ag, m->graphs[0], specs[sp], seed++, &co, label, &fill, NULL, NULL);
      }
  }
  diag_free(&d);
  attn_module_destroy(mod);
  arena_free(a);
}

/* Separable masks skip tiles: documents of 256 keys (tile-aligned) load
 * about 2 of every 16 key tiles at S = 2048; a single document loads them
 * all. */
static void test_document_tiles(attn_context *ctx) {
  static const char text[] =
      "attention docs {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
      "  input v : bf16[B, H, S, 128];\n  input doc : i32[B, S];\n"
      "  o = softmax(mask((q @ k^T) * 0.088, doc[b, i] == doc[b, j])) @ v;\n"
      "  output o : bf16[B, H, S, 128];\n}\n";
  Arena *a = arena_new();
  attn_module *mod = compile_text(ctx, "docs", text);
  IrGraph *g = build_ir(a, "docs", text);
  attn_graph *ag;
  unsigned long long tiles[2] = {0, 0};
  const DocLayout lays[2] = {DOC_RUNS, DOC_SINGLE};
  for (int t = 0; t < 2 && mod && g && attn_module_get_graph(mod, "docs", &ag) == ATTN_SUCCESS;
       t++) {
    ChkResult res;
    RefArgs ra;
    ChkOptions co = {.count_tiles = true};
    InputFill fill = {fill_docs, &lays[t]};
    const char *label = arena_printf(a, "document tiles, %s ids", doc_layout_name[lays[t]]);
    if (run_case_filled(ctx, ag, g, "B=1,H=2,S=2048", 31 + (uint64_t)t, &co, label, &fill, &res,
                        &ra)) {
      tiles[t] = res.tiles_visited;
      chk_result_free(&res, g->ntensors);
      ref_args_free(&ra);
    }
  }
  double ratio = tiles[1] ? (double)tiles[0] / (double)tiles[1] : 0;
  char detail[160];
  snprintf(detail, sizeof detail, "one document %llu tiles, documents of 256 keys %llu tiles, "
           "ratio %.3f", tiles[1], tiles[0], ratio);
  /* 1/8 with 128-key tiles; 80-key tiles straddle documents, so a little more. */
  verdict(tiles[1] > 0 && ratio > 0.1 && ratio < 0.25,
          "separable masks skip tiles: documents of 256 load about 1/8 of them", detail);
  attn_module_destroy(mod);
  arena_free(a);
}

/* The backward reads the same tile classes (bwd_sm80 skips class-0 tiles),
 * so its prep launch matters too: dq, dk, dv of a document mask against
 * ref_backward, on sorted and unsorted ids. */
static void test_document_backward(attn_context *ctx) {
  static const char text[] =
      "attention docb {\n  input q : bf16[B, H, S, 64];\n  input k : bf16[B, H, S, 64];\n"
      "  input v : bf16[B, H, S, 64];\n  input doc : i32[B, S];\n"
      "  s = mask((q @ k^T) * 0.125, doc[b, i] == doc[b, j] && j <= i);\n"
      "  o = softmax(s) @ v;\n  output o : bf16[B, H, S, 64];\n"
      "  output lse = logsumexp(s);\n  grad q, k, v;\n}\n";
  Arena *a = arena_new();
  attn_module *mod = compile_text(ctx, "docb", text);
  IrGraph *g = build_ir(a, "docb", text);
  Diag d = {0};
  BwdGraph *bg = g ? bwd_derive(g, a, &d) : NULL;
  attn_graph *ag;
  BwdSlots sl;
  const DocLayout lays[2] = {DOC_SORTED, DOC_UNSORTED};
  for (int t = 0; t < 2 && mod && bg && bwd_slots(g, &sl) == 0 &&
                  attn_module_get_graph(mod, "docb", &ag) == ATTN_SUCCESS;
       t++) {
    RefArgs ra = {.g = g};
    StrBuf err = {0}, detail = {0};
    ChkResult res = {0};
    RefTensor *grads = calloc((size_t)g->ntensors, sizeof *grads);
    double *dout = NULL;
    bool ok = grads && ref_make_inputs(&ra, "B=2,H=2,S=333", 8100 + (uint64_t)t, &err) == 0 &&
              chk_output_shapes(&ra, &err) == 0;
    if (ok) {
      fill_docs(&ra, &lays[t]);
      int64_t n = ref_numel(&ra.tensors[sl.o]);
      dout = malloc((size_t)n * sizeof *dout);
      RefRng rng = ref_rng(8200 + (uint64_t)t, 777);
      for (int64_t e = 0; dout && e < n; e++)
        dout[e] = dtype_round(DT_BF16, ref_rng_normal(&rng));
      ok = dout != NULL;
    }
    ChkOptions co = {.dout = dout};
    if (ok && chk_run_gpu(ctx, ag, &ra, &co, &res, &err) != ATTN_SUCCESS) ok = false;
    if (ok && ref_backward(&ra, bg, dout, grads, &err) != 0) ok = false;
    const int gt[3] = {g->q, g->k, g->v};
    for (int x = 0; ok && x < 3; x++) {
      int k = gt[x];
      if (!res.grads || !res.grads[k] || !grads[k].data) {
        ok = false;
        sb_printf(&detail, "d%s missing; ", g->tensors[k].name);
        break;
      }
      RefCompare c = ref_compare(res.grads[k], grads[k].data, (size_t)ref_numel(&grads[k]));
      sb_printf(&detail, "d%s rel_l2 %.1e nonfinite-mismatch %zu; ", g->tensors[k].name,
                c.rel_l2, c.nonfinite_mismatch);
      if (!(c.rel_l2 <= 2e-2) || c.nonfinite_mismatch) ok = false;
    }
    if (err.len) sb_printf(&detail, "%s", err.data);
    char what[96];
    snprintf(what, sizeof what, "backward of a document mask, %s ids [B=2,H=2,S=333]",
             doc_layout_name[lays[t]]);
    verdict(ok, what, detail.data);
    chk_result_free(&res, g->ntensors);
    for (int k = 0; grads && k < g->ntensors; k++) free(grads[k].data);
    free(grads);
    free(dout);
    ref_args_free(&ra);
    sb_free(&err);
    sb_free(&detail);
  }
  if (!bg) verdict(false, "docb backward", d.out.data);
  diag_free(&d);
  attn_module_destroy(mod);
  arena_free(a);
}

/* Dropout's mask on the GPU is the CPU reference's, bit for bit, and keeps
 * about 1 - rate of the elements. q = 0 makes every score 0, so P is
 * uniform; rate 0.5 makes the factor 2, exact in bf16.
 * - Rows: with v = 1, O[b, h, i, :] = kept(i) / (Skv (1 - rate)): the
 *   GPU's row counts show through the f32 output exactly. One key of
 *   difference in a row changes O by about 1 / 100; the comparison allows
 *   1e-5.
 * - Elements: with Skv = D = 64 and v the identity (v[j, d] = j == d),
 *   O[b, h, i, d] = factor(i, d) / 64, 0 or 1 / 32 exactly: every element
 *   of the mask shows through, compared exactly with the CPU reference
 *   and with philox_dropout_byte's keep test. It checks that the lanes
 *   of the kernel's fragments draw and swap the documented bytes of the
 *   16-element groups (rows i, i + 1, i + 8, i + 9 by keys likewise);
 *   Sq = 130 ends inside a group. */
static void dropout_identity_v(RefArgs *ra) {
  RefTensor *v = &ra->tensors[ra->g->v];
  int64_t skv = v->shape[2], d = v->shape[3];
  for (int64_t e = 0; e < ref_numel(v); e++) v->data[e] = (e / d) % skv == e % d;
}

static void dropout_ones_v(RefArgs *ra) {
  RefTensor *v = &ra->tensors[ra->g->v];
  for (int64_t e = 0; e < ref_numel(v); e++) v->data[e] = 1.0;
}

static void test_dropout_mask(attn_context *ctx) {
  static const char text[] =
      "attention drop {\n"
      "  input q : bf16[B, H, Sq, 64];\n  input k : bf16[B, H, Skv, 64];\n"
      "  input v : bf16[B, H, Skv, 64];\n"
      "  scalar rate : f32 = 0.5;\n  scalar seed : u64 = 0;\n  scalar offset : i32 = 0;\n"
      "  p = dropout(softmax((q @ k^T) * 0.125), rate, seed, offset);\n"
      "  output o : f32[B, H, Sq, 64] = p @ v;\n}\n";
  Arena *a = arena_new();
  attn_module *mod = compile_text(ctx, "drop.attn", text);
  IrGraph *g = build_ir(a, "drop.attn", text);
  attn_graph *ag;
  static const char *const sets[] = {"seed=12345,offset=7", "seed=9007199254740881,offset=-3"};
  static const uint64_t set_seed[] = {12345, UINT64_C(9007199254740881)};
  static const uint64_t set_off[] = {7, (uint64_t)(int64_t)-3};
  for (int c = 0; mod && g && c < 4 && attn_module_get_graph(mod, "drop", &ag) == ATTN_SUCCESS;
       c++) {
    const bool elements = c >= 2; /* cases 2 and 3: the identity v */
    const int set = c & 1;
    RefArgs ra = {.g = g};
    StrBuf err = {0};
    ChkResult res = {0};
    ChkOptions co = {0};
    bool ran = ref_make_inputs(&ra, elements ? "B=2,H=2,Sq=130,Skv=64" : "B=2,H=2,Sq=130,Skv=200",
                               77, &err) == 0 &&
               ref_set_scalars(&ra, sets[set], &err) == 0 && chk_output_shapes(&ra, &err) == 0;
    if (ran) {
      RefTensor *q = &ra.tensors[g->q];
      for (int64_t e = 0; e < ref_numel(q); e++) q->data[e] = 0.0;
      if (elements)
        dropout_identity_v(&ra);
      else
        dropout_ones_v(&ra);
      ran = chk_run_gpu(ctx, ag, &ra, &co, &res, &err) == ATTN_SUCCESS && ref_forward(&ra, &err) == 0;
    }
    if (ran && elements) {
      int ko = g->outputs[0].tensor;
      const RefTensor *o = &ra.tensors[ko];
      const int64_t H = o->shape[1], Sq = o->shape[2], D = o->shape[3];
      const uint32_t thresh = philox_keep_threshold((double)0.5f);
      size_t n = (size_t)ref_numel(o), bad = 0, off_doc = 0, first = n;
      double kept = 0;
      for (size_t e = 0; e < n; e++) {
        const int64_t d = (int64_t)e % D, i = (int64_t)e / D % Sq, bh = (int64_t)e / D / Sq;
        double got = res.outputs[ko][e], want = o->data[e];
        bool keep = philox_dropout_byte(set_seed[set], set_off[set], bh / H, bh % H, i, d, H,
                                        Sq) >= thresh;
        if (want != (keep ? 1.0 / 32 : 0.0)) off_doc++;
        if (got != want) {
          bad++;
          if (first == n) first = e;
        }
        kept += got * 32;
      }
      kept /= (double)n;
      char detail[200];
      snprintf(detail, sizeof detail,
               "[%s, identity v] %zu of %zu elements differ (first at %zu); reference off the "
               "documented bits at %zu; kept fraction %.4f",
               sets[set], bad, n, first == n ? (size_t)0 : first, off_doc, kept);
      verdict(bad == 0 && off_doc == 0,
              "dropout: the GPU's mask is the CPU reference's, element by element", detail);
      verdict(fabs(kept - 0.5) < 0.02, "dropout: keeps 1 - rate of the elements", detail);
      chk_result_free(&res, g->ntensors);
    } else if (ran) {
      int ko = g->outputs[0].tensor;
      size_t n = (size_t)ref_numel(&ra.tensors[ko]), bad = 0;
      double kept = 0;
      for (size_t e = 0; e < n; e++) {
        double got = res.outputs[ko][e], want = ra.tensors[ko].data[e];
        if (!(fabs(got - want) <= 1e-5 * fmax(fabs(want), 1e-3))) bad++;
        kept += got * 0.5; /* the kept fraction of the row: O (1 - rate) */
      }
      kept /= (double)n;
      char detail[160];
      snprintf(detail, sizeof detail, "[%s] %zu of %zu elements differ; kept fraction %.4f",
               sets[set], bad, n, kept);
      verdict(bad == 0, "dropout: the GPU's mask is the CPU reference's", detail);
      verdict(fabs(kept - 0.5) < 0.01, "dropout: keeps 1 - rate of the elements", detail);
      chk_result_free(&res, g->ntensors);
    } else {
      verdict(false, "dropout mask", err.data);
    }
    ref_args_free(&ra);
    sb_free(&err);
  }
  attn_module_destroy(mod);
  arena_free(a);
}

/* q's rows times 2^-20 .. 2^4, a different power a row (exact in bf16):
 * fwd_sm90 runs an FP8 cache under a bf16 q in f16, Q's rows rewritten
 * each times its own power of two (fwd90_q_to_f16), which this spreads. */
static void fill_q_row_scales(RefArgs *ra, const void *arg) {
  (void)arg;
  RefTensor *q = &ra->tensors[ra->g->q];
  const int64_t d = q->shape[q->ndims - 1], n = ref_numel(q);
  for (int64_t e = 0; e < n; e++)
    q->data[e] = ldexp(q->data[e], (int)((e / d) * 7 % 25) - 20);
}

/* The other FP8 KV caches: e5m2 under a bf16 q, and e4m3 under an f16 q
 * (the conversions' other paths), e4m3 at head dim 192 (8-bit rows of
 * 192 bytes, which the staging tiles' swizzle once took into the next
 * row), and a softcapped score (the q.k product not folded into the
 * softmax: fwd_sm90 scales S by Q's rows' powers itself), P scaled by
 * 10^5 before P V (past f16's range: those GEMMs stay in bf16), on the decode
 * kernel and at a prefill shape on the forward (fwd_sm90 on sm_90a but
 * at D 256, fwd_sm80 elsewhere); under a bf16 q the prefill again with
 * q's rows spread over 2^24. */
static void test_fp8_kv_variants(attn_context *ctx, uint64_t *seed) {
  static const char text[] =
      "attention kv_e5m2 {\n  input q : bf16[B, H, Sq, 128];\n  input k : e5m2[B, Hk, Skv, 128];\n"
      "  input v : e5m2[B, Hk, Skv, 128];\n  s = mask((q @ k^T) * 0.088, j <= i + Skv - Sq);\n"
      "  o = softmax(s) @ v;\n  output o : bf16[B, H, Sq, 128];\n  output lse = logsumexp(s);\n}\n"
      "attention kv_f16_e4m3 {\n  input q : f16[B, H, Sq, 256];\n  input k : e4m3[B, Hk, Skv, 256];\n"
      "  input v : e4m3[B, Hk, Skv, 256];\n  s = (q @ k^T) * 0.0625;\n  o = softmax(s) @ v;\n"
      "  output o : f16[B, H, Sq, 256];\n}\n"
      "attention kv_d192 {\n  input q : bf16[B, H, Sq, 192];\n  input k : e4m3[B, Hk, Skv, 192];\n"
      "  input v : e4m3[B, Hk, Skv, 192];\n  s = mask((q @ k^T) * 0.072, j <= i + Skv - Sq);\n"
      "  o = softmax(s) @ v;\n  output o : bf16[B, H, Sq, 192];\n}\n"
      "attention kv_softcap {\n  input q : bf16[B, H, Sq, 64];\n  input k : e4m3[B, Hk, Skv, 64];\n"
      "  input v : e4m3[B, Hk, Skv, 64];\n  s = 20.0 * tanh((q @ k^T) * 0.125 / 20.0);\n"
      "  s = mask(s, j <= i + Skv - Sq);\n  o = softmax(s) @ v;\n  output o : bf16[B, H, Sq, 64];\n"
      "  output lse = logsumexp(s);\n}\n"
      "attention kv_p_scale {\n  input q : bf16[B, H, Sq, 128];\n  input k : e4m3[B, Hk, Skv, 128];\n"
      "  input v : e4m3[B, Hk, Skv, 128];\n  s = (q @ k^T) * 0.088;\n"
      "  o = ((softmax(s) * 100000.0) @ v) * 0.00001;\n  output o : bf16[B, H, Sq, 128];\n}\n";
  Arena *a = arena_new();
  attn_module *mod = compile_text(ctx, "fp8_kv.attn", text);
  Diag d = {0};
  Source *src = source_from_string(a, "fp8_kv.attn", text, strlen(text));
  IrModule *m = mod && src ? ir_build(parse_source(src, a, &d), a, &d) : NULL;
  for (int k = 0; m && k < m->ngraphs; k++) {
    attn_graph *ag;
    if (attn_module_get_graph(mod, m->graphs[k]->name, &ag) != ATTN_SUCCESS) continue;
    test_decode(ctx, ag, m->graphs[k], "fp8_kv.attn", a, seed);
    /* Prefill shapes: fwd_sm90 converting K and V in shared memory, or
     * the portable forward converting them on load. */
    StrBuf spec = {0};
    chk_shape_spec(m->graphs[k], &spec, 2, 4, 2, 200, 333);
    ChkOptions co = {0};
    run_case(ctx, ag, m->graphs[k], spec.data, (*seed)++, &co,
             arena_printf(a, "fp8_kv.attn:%s prefill", m->graphs[k]->name), NULL, NULL);
    if (m->graphs[k]->tensors[m->graphs[k]->q].type == DT_BF16) {
      const InputFill spread = {fill_q_row_scales, NULL};
      run_case_filled(ctx, ag, m->graphs[k], spec.data, (*seed)++, &co,
                      arena_printf(a, "fp8_kv.attn:%s prefill, q rows 2^-20..2^4",
                                   m->graphs[k]->name),
                      &spread, NULL, NULL);
      /* the decode kernel's rows: 4 heads x 2 queries of a K/V head */
      chk_shape_spec(m->graphs[k], &spec, 2, 32, 8, 2, 3000);
      run_case_filled(ctx, ag, m->graphs[k], spec.data, (*seed)++, &co,
                      arena_printf(a, "fp8_kv.attn:%s decode, q rows 2^-20..2^4",
                                   m->graphs[k]->name),
                      &spread, NULL, NULL);
    }
    sb_free(&spec);
  }
  diag_free(&d);
  attn_module_destroy(mod);
  arena_free(a);
}

/* Paged caches' edges: the first sequence empty, the last using every
 * key of its pages, and the table's entries past each sequence's last
 * page out of range (-1, or past the cache): those pages must never be
 * read, and the keys are masked anyway. */
static void fill_paged_edges(RefArgs *ra, const void *arg) {
  (void)arg;
  const IrGraph *g = ra->g;
  const IrTensor *k = &g->tensors[g->k];
  RefTensor *table = &ra->tensors[k->page_table];
  int len_t = -1;
  for (int t = 0; t < g->ntensors; t++)
    if (!strcmp(g->tensors[t].name, "kv_len")) len_t = t;
  if (len_t < 0) return;
  RefTensor *len = &ra->tensors[len_t];
  const int64_t B = table->shape[0], maxp = table->shape[1];
  const int64_t P = ra->tensors[g->k].shape[ir_page_dim(k)];
  len->data[0] = 0;
  if (B > 1) len->data[B - 1] = (double)(maxp * P);
  for (int64_t b = 0; b < B; b++)
    for (int64_t pg = ((int64_t)len->data[b] + P - 1) / P; pg < maxp; pg++)
      table->data[b * maxp + pg] = pg % 2 ? -1.0 : (double)(1 << 30);
}

/* Paged KV caches beyond test_decode's shapes: page sizes from 1 to 256
 * (powers of two and not, pages smaller and larger than a key tile), both
 * layouts, an e4m3 cache, empty and full sequences with out-of-range table
 * entries past them; decode shapes (at most 64 packed rows a K/V head) on
 * the decode kernel at forced split counts, prefill shapes (a chunk of new
 * queries against the cache, causal bottom-right) on fwd_sm80, which
 * gathers the pages row by row. */
static void test_paged(attn_context *ctx, uint64_t *seed) {
  static const char text[] =
      "attention paged_e4m3 {\n"
      "  input q : bf16[B, H, Sq, 128];\n"
      "  input kc : e4m3[Pages, PageSize, Hk, 128];\n"
      "  input vc : e4m3[Pages, PageSize, Hk, 128];\n"
      "  input table : i32[B, MaxPages];\n"
      "  input kv_len : i32[B];\n"
      "  scalar descale_k : f32 = 0.5;\n"
      "  s = (q @ paged(kc, table)^T) * (0.088 * descale_k);\n"
      "  s = mask(s, j < kv_len[b]);\n"
      "  p = softmax(s);\n"
      "  o = (p @ paged(vc, table)) * 2.0;\n"
      "  output o : bf16[B, H, Sq, 128];\n"
      "  output lse = logsumexp(s);\n"
      "}\n"
      "attention paged_d64 {\n"
      "  input q : f16[B, H, Sq, 64];\n"
      "  input kc : f16[Pages, Hk, PageSize, 64];\n"
      "  input vc : f16[Pages, Hk, PageSize, 64];\n"
      "  input table : i32[B, MaxPages];\n"
      "  input kv_len : i32[B];\n"
      "  s = (q @ paged_hnd(kc, table)^T) * 0.125;\n"
      "  s = mask(s, j < kv_len[b] && j <= i + kv_len[b] - Sq);\n"
      "  p = softmax(s);\n"
      "  o = p @ paged_hnd(vc, table);\n"
      "  output o : f16[B, H, Sq, 64];\n"
      "}\n"
      /* packed q against an e4m3 cache (fwd_sm80: FP8 caches) */
      "attention paged_ragged_e4m3 {\n"
      "  input q : bf16[T, H, 128];\n"
      "  input cu : i32[B1];\n"
      "  input kc : e4m3[Pages, Hk, PageSize, 128];\n"
      "  input vc : e4m3[Pages, Hk, PageSize, 128];\n"
      "  input table : i32[B, MaxPages];\n"
      "  input kv_len : i32[B];\n"
      "  s = (packed(q, cu) @ paged_hnd(kc, table)^T) * 0.088;\n"
      "  s = mask(s, j < kv_len[b] && j <= i + kv_len[b] - seqlen_q);\n"
      "  o = softmax(s) @ paged_hnd(vc, table);\n"
      "  output o : bf16[T, H, 128];\n"
      "  output lse = logsumexp(s);\n"
      "}\n";
  attn_module *mod = compile_text(ctx, "paged.attn", text);
  Arena *a = arena_new();
  Diag d = {0};
  Source *src = source_from_string(a, "paged.attn", text, strlen(text));
  IrModule *m = mod && src ? ir_build(parse_source(src, a, &d), a, &d) : NULL;
  attn_module *ex = NULL;
  IrModule *em = NULL;
  if (gpu_compile_file(ctx, "examples/paged_kv.attn", &ex) == ATTN_SUCCESS) {
    Source *es = source_load(a, "examples/paged_kv.attn", &d);
    em = es ? ir_build(parse_source(es, a, &d), a, &d) : NULL;
  } else {
    verdict(false, "examples/paged_kv.attn", attn_context_error(ctx));
  }
  /* B, H, Hk, Sq, keys a sequence, page size */
  static const int shapes[][6] = {{1, 32, 8, 1, 4100, 16}, {2, 8, 2, 3, 1000, 64},
                                  {3, 16, 2, 4, 777, 256}, {2, 4, 4, 1, 70, 1},
                                  {2, 8, 8, 1, 500, 48},   {4, 4, 1, 16, 300, 32},
                                  /* prefill: more than 64 rows a K/V head */
                                  {2, 8, 2, 100, 1000, 16}, {3, 4, 4, 257, 777, 48},
                                  {1, 8, 1, 128, 4100, 256}, {2, 4, 2, 65, 70, 1},
                                  {2, 4, 4, 300, 300, 64}};
  static const int splits[] = {0, 1, 3};
  const InputFill edges = {fill_paged_edges, NULL};
  StrBuf spec = {0};
  for (int mi = 0; mi < 2; mi++) {
    attn_module *mm = mi ? ex : mod;
    IrModule *ir = mi ? em : m;
    for (int k = 0; mm && ir && k < ir->ngraphs; k++) {
      const IrGraph *g = ir->graphs[k];
      attn_graph *ag;
      if (attn_module_get_graph(mm, g->name, &ag) != ATTN_SUCCESS) {
        verdict(false, g->name, attn_context_error(ctx));
        continue;
      }
      for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        const int *x = shapes[sh];
        chk_paged_spec(g, &spec, x[0], x[1], x[2], x[3], x[4], x[5]);
        /* Split counts matter on the decode kernel only. */
        const size_t nsplits = (x[1] / x[2]) * x[3] <= 64 ? sizeof splits / sizeof splits[0] : 1;
        for (size_t sp = 0; sp < nsplits; sp++) {
          attn_context_set_option(ctx, ATTN_OPTION_DECODE_SPLITS, splits[sp]);
          ChkOptions co = {0};
          run_case_filled(ctx, ag, g, spec.data, *seed, &co,
                          arena_printf(a, "paged %s page %d Sq %d splits %d, edges", g->name,
                                       x[5], x[3], splits[sp]),
                          &edges, NULL, NULL);
        }
        attn_context_set_option(ctx, ATTN_OPTION_DECODE_SPLITS, 0);
        ChkOptions strided = {.bshd = true}; /* the cache's rows and heads strided the other way */
        run_case(ctx, ag, g, spec.data, *seed + 1, &strided,
                 arena_printf(a, "paged %s page %d Sq %d, permuted strides", g->name, x[5], x[3]),
                 NULL, NULL);
        (*seed) += 2;
      }
    }
  }
  attn_context_set_option(ctx, ATTN_OPTION_DECODE_SPLITS, 0);
  sb_free(&spec);
  diag_free(&d);
  attn_module_destroy(ex);
  attn_module_destroy(mod);
  arena_free(a);
}

/* Packed variable-length batches beyond the examples' shapes: GQA, f16,
 * D 64 and 80, causal bottom-right and a window in per-sequence
 * positions, an lse, one tensor as q, k and v, empty and 100x-longer sequences, out-of-range
 * offsets, many sequences; rows no sequence covers stay unwritten (the
 * reference's NaN against the test's NaN poison). */
static void test_packed(attn_context *ctx, uint64_t *seed) {
  static const char text[] =
      "attention packed_gqa_causal {\n"
      "  input q : f16[Tq, H, 64];\n  input k : f16[Tk, Hk, 64];\n  input v : f16[Tk, Hk, 64];\n"
      "  input cq : i32[B1];\n  input ck : i32[B1];\n"
      "  lq = cq[b + 1] - cq[b];\n  lk = ck[b + 1] - ck[b];\n"
      "  s = (packed(q, cq) @ packed(k, ck)^T) * 0.125;\n"
      "  s = mask(s, j <= i + lk - lq);\n"
      "  o = softmax(s) @ packed(v, ck);\n"
      "  output o : f16[Tq, H, 64];\n  output lse = logsumexp(s);\n}\n"
      "attention packed_window {\n"
      "  input q : bf16[T, H, 80];\n  input k : bf16[T, H, 80];\n  input v : bf16[T, H, 80];\n"
      "  input cu : i32[B1];\n"
      "  s = mask((packed(q, cu) @ packed(k, cu)^T) * 0.11, j <= i && i - j < 100);\n"
      "  o = softmax(s) @ packed(v, cu);\n"
      "  output o : bf16[T, H, 80];\n}\n"
      "attention packed_seqlen_window {\n"
      "  input q : bf16[Tq, H, 128];\n  input k : bf16[Tk, Hk, 128];\n"
      "  input v : bf16[Tk, Hk, 128];\n  input cq : i32[B1];\n  input ck : i32[B1];\n"
      "  e = i + seqlen_k - seqlen_q;\n"
      "  s = mask((packed(q, cq) @ packed(k, ck)^T) * 0.088, j <= e && e - j < 90);\n"
      "  o = softmax(s) @ packed(v, ck);\n"
      "  output o : bf16[Tq, H, 128];\n  output lse = logsumexp(s);\n}\n"
      "attention packed_self {\n"
      "  input x : bf16[T, H, 64];\n  input cu : i32[B1];\n"
      "  s = mask((packed(x, cu) @ packed(x, cu)^T) * 0.125, j <= i);\n"
      "  output o : bf16[T, H, 64] = softmax(s) @ packed(x, cu);\n}\n";
  attn_module *mod = compile_text(ctx, "packed.attn", text);
  Arena *a = arena_new();
  Diag d = {0};
  Source *src = source_from_string(a, "packed.attn", text, strlen(text));
  IrModule *m = mod && src ? ir_build(parse_source(src, a, &d), a, &d) : NULL;
  /* sequences, H, Hk, query and key tokens a sequence on average */
  static const int shapes[][5] = {{6, 8, 2, 150, 170}, {3, 4, 1, 1000, 600}, {40, 4, 4, 33, 33},
                                  {5, 2, 2, 1, 500}};
  StrBuf spec = {0};
  for (int k = 0; m && k < m->ngraphs; k++) {
    const IrGraph *g = m->graphs[k];
    attn_graph *ag;
    if (attn_module_get_graph(mod, g->name, &ag) != ATTN_SUCCESS) {
      verdict(false, g->name, attn_context_error(ctx));
      continue;
    }
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
      const int *x = shapes[sh];
      chk_shape_spec(g, &spec, x[0], x[1], x[2], x[3], x[4]);
      ChkOptions co = {0};
      run_case(ctx, ag, g, spec.data, (*seed)++, &co, arena_printf(a, "packed %s", g->name), NULL,
               NULL);
      static const int patterns[3] = {0, 1, 2};
      for (int pt = 0; pt < 3; pt++) {
        const InputFill fill = {fill_packed_offsets, &patterns[pt]};
        run_case_filled(ctx, ag, g, spec.data, (*seed)++, &co,
                        arena_printf(a, "packed %s offsets pattern %d", g->name, pt), &fill, NULL,
                        NULL);
      }
    }
  }
  sb_free(&spec);
  diag_free(&d);
  attn_module_destroy(mod);
  arena_free(a);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* argv[1], when given, keeps only the examples whose file name contains
 * it (the other tests always run; "" keeps all); argv[2] is the target to
 * compile for (sm_90: the portable template on Hopper). */
int main(int argc, char **argv) {
  if (!gpu_test_driver()) return 0;
  attn_context *ctx = gpu_test_context();
  if (!ctx) return 1;
  if (argc > 2 && attn_context_set_arch(ctx, argv[2]) != ATTN_SUCCESS) {
    verdict(false, argv[2], attn_context_error(ctx));
    return 1;
  }
  /* ATTN_TEST_ONLY=packed, paged or fp8_kv: those tests and examples alone
   * (a short device run for a change that touches nothing else); tiles:
   * the tile-skipping counts alone. */
  const char *only = getenv("ATTN_TEST_ONLY");
  if (only && (!strcmp(only, "packed") || !strcmp(only, "paged") || !strcmp(only, "fp8_kv") ||
               !strcmp(only, "tiles"))) {
    uint64_t seed = 1000;
    if (!strcmp(only, "tiles")) {
      test_tile_skipping(ctx);
      test_document_tiles(ctx);
    } else if (!strcmp(only, "packed")) {
      uint64_t packed_seed = 9700;
      test_packed(ctx, &packed_seed);
      test_example(ctx, "examples/packed.attn", &seed);
    } else if (!strcmp(only, "fp8_kv")) {
      uint64_t kv_seed = 9000;
      test_fp8_kv_variants(ctx, &kv_seed);
      test_example(ctx, "examples/fp8_kv_cache.attn", &seed);
    } else {
      uint64_t paged_seed = 9500;
      test_paged(ctx, &paged_seed);
      test_example(ctx, "examples/paged_kv.attn", &seed);
    }
    attn_context_destroy(ctx);
    gpu_time_report();
  printf("gpu forward: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
  }
  /* ATTN_TEST_ONLY=examples: the fully masked rows, the softcap's ranges, the
   * work tiles' edges and the examples (argv[1] filters them), for a change to the softmax alone
   * (ATTN_EXP2_FMA, ATTN_TANH_POLY); rest: everything but those, so that
   * the two together are the whole run split over two device calls. */
  const bool examples_only = only && !strcmp(only, "examples");
  const bool rest_only = only && !strcmp(only, "rest");
  /* ATTN_TEST_FROM=NAME (with examples): the examples from NAME on in
   * name order, nothing else: the end of a run a device call cut short. */
  const char *from = examples_only ? getenv("ATTN_TEST_FROM") : NULL;
  if (!rest_only && !from) {
    test_fully_masked(ctx);
    test_softcap_ranges(ctx);
    test_work_tile_edges(ctx);
  }
  if (!examples_only) {
    uint64_t kv_seed = 9000;
    test_fp8_kv_variants(ctx, &kv_seed);
    uint64_t paged_seed = 9500;
    test_paged(ctx, &paged_seed);
    uint64_t packed_seed = 9700;
    test_packed(ctx, &packed_seed);
    test_tile_skipping(ctx);
    test_dropout_mask(ctx);
    test_separable_masks(ctx);
    test_document_layouts(ctx);
    test_document_tiles(ctx);
    test_document_backward(ctx);
  }
  DIR *dir = rest_only ? NULL : opendir("examples");
  char *names[256];
  int n = 0;
  for (struct dirent *e; dir && (e = readdir(dir)) && n < 256;)
    if (strlen(e->d_name) > 5 && !strcmp(e->d_name + strlen(e->d_name) - 5, ".attn") &&
        (argc < 2 || !argv[1][0] || strstr(e->d_name, argv[1])) &&
        (!from || strcmp(e->d_name, from) >= 0))
      names[n++] = strdup(e->d_name);
  if (dir) closedir(dir);
  qsort(names, (size_t)n, sizeof names[0], cmp_str);
  uint64_t seed = 1000;
  for (int k = 0; k < n; k++) {
    char path[512];
    snprintf(path, sizeof path, "examples/%s", names[k]);
    test_example(ctx, path, &seed);
    free(names[k]);
  }
  attn_context_destroy(ctx);
  gpu_time_report();
  printf("gpu forward: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
