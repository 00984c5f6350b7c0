/*
 * test_fp8.c: FP8 attention on the GPU against the CPU reference.
 *
 * e4m3 and e5m2 q, k and v (converted on load by the portable forward,
 * exactly), descale factors other than 1, FP8 outputs with an output scale
 * (rounded as the reference rounds: to nearest even, saturating), the amax
 * output (against the reference's, and exactly the max |o| of the kernel's
 * own f32 output), GQA, causal, sliding-window and document masks, head
 * dims 64, 80, 128 and 256, inputs with outliers (entries 10-100x the
 * rest), every finite e4m3 value in q, fully masked rows (O = 0, lse =
 * -inf), scales in one-element device tensors, P rounded to e4m3 or e5m2 before P V (e4m3(p * scale_s): FP8
 * wgmma for both products where key tiles are 128; dropout; a bf16 graph
 * and its decode kernel) and BSHD strides, on fwd_sm90 (FP8 wgmma for Q K^T, V converted
 * to f16 by the producer warps) or, given `sm_90`, on fwd_sm80 (every
 * FP8 tile converted on load). Without a GPU it says so and skips (exit 0).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "cuda_driver.h"
#include "gpu_test.h"
#include "fwd_case.h"
#include "ref.h"

static const char fp8_graphs[] =
    /* cuDNN's recipe: e4m3 in and out, descales, an output scale, amax. */
    "attention fp8_causal_gqa {\n"
    "  input  q : e4m3[B, H, Sq, 128];\n"
    "  input  k : e4m3[B, Hk, Skv, 128];\n"
    "  input  v : e4m3[B, Hk, Skv, 128];\n"
    "  scalar descale_q : f32 = 1.0;\n  scalar descale_k : f32 = 1.0;\n"
    "  scalar descale_v : f32 = 1.0;\n  scalar scale_o : f32 = 1.0;\n"
    "  s = mask((q @ k^T) * (0.088388 * descale_q * descale_k), j <= i);\n"
    "  out = (softmax(s) @ v) * descale_v;\n"
    "  output o : e4m3[B, H, Sq, 128] = out * scale_o;\n"
    "  output amax_o = amax(out);\n"
    "  output lse = logsumexp(s);\n"
    "}\n"
    /* e5m2 q against e4m3 k and v, a window, a bf16 output. */
    "attention fp8_mixed_window {\n"
    "  input  q : e5m2[B, H, Sq, 64];\n"
    "  input  k : e4m3[B, Hk, Skv, 64];\n"
    "  input  v : e4m3[B, Hk, Skv, 64];\n"
    "  s = mask((q @ k^T) * 0.125, j <= i && j > i - 48);\n"
    "  out = softmax(s) @ v;\n"
    "  output o : bf16[B, H, Sq, 64] = out;\n"
    "  output amax_o = amax(out);\n"
    "}\n"
    /* A document mask at D 256, an f32 output: amax must equal max |o|. */
    "attention fp8_doc_256 {\n"
    "  input  q : e4m3[B, H, Sq, 256];\n"
    "  input  k : e4m3[B, Hk, Skv, 256];\n"
    "  input  v : e4m3[B, Hk, Skv, 256];\n"
    "  input  doc : i32[B, Sq];\n"
    "  scalar descale_v : f32 = 1.0;\n"
    "  s = mask((q @ k^T) * 0.0625, doc[b, i] == doc[b, j]);\n"
    "  out = (softmax(s) @ v) * descale_v;\n"
    "  output o : f32[B, H, Sq, 256] = out;\n"
    "  output amax_o = amax(out);\n"
    "}\n"
    /* Head dim 80 (not a multiple of 64), e5m2 out. */
    "attention fp8_d80 {\n"
    "  input  q : e4m3[B, H, Sq, 80];\n"
    "  input  k : e5m2[B, Hk, Skv, 80];\n"
    "  input  v : e5m2[B, Hk, Skv, 80];\n"
    "  s = (q @ k^T) * 0.1118;\n"
    "  output o : e5m2[B, H, Sq, 80] = softmax(s) @ v;\n"
    "}\n"
    /* P rounded to FP8 before P V (the FP8 recipe's scale_s): FP8 wgmma
     * for both products at D 128 (key tiles of 128), causal GQA. */
    "attention p8_causal_gqa {\n"
    "  input  q : e4m3[B, H, Sq, 128];\n"
    "  input  k : e4m3[B, Hk, Skv, 128];\n"
    "  input  v : e4m3[B, Hk, Skv, 128];\n"
    "  scalar scale_s : f32 = 448.0;\n  scalar descale_v : f32 = 1.0;\n"
    "  s = mask((q @ k^T) * 0.088388, j <= i + Skv - Sq);\n"
    "  out = (e4m3(softmax(s) * scale_s) @ v) * (descale_v / scale_s);\n"
    "  output o : bf16[B, H, Sq, 128] = out;\n"
    "  output amax_o = amax(out);\n"
    "  output lse = logsumexp(s);\n"
    "}\n"
    /* e5m2 P at D 64, e4m3 O. */
    "attention p8_e5m2_64 {\n"
    "  input  q : e4m3[B, H, Sq, 64];\n"
    "  input  k : e4m3[B, Hk, Skv, 64];\n"
    "  input  v : e4m3[B, Hk, Skv, 64];\n"
    "  s = (q @ k^T) * 0.125;\n"
    "  output o : e4m3[B, H, Sq, 64] = (e5m2(softmax(s) * 256.0) @ v) * (1.0 / 256.0);\n"
    "}\n"
    /* D 256 (key tiles of 80: P rounded in f32, P V in f16), dropout first. */
    "attention p8_dropout_256 {\n"
    "  input  q : e4m3[B, H, Sq, 256];\n"
    "  input  k : e4m3[B, Hk, Skv, 256];\n"
    "  input  v : e4m3[B, Hk, Skv, 256];\n"
    "  s = (q @ k^T) * 0.0625;\n"
    "  p = dropout(softmax(s), 0.125, 77, 5);\n"
    "  output o : bf16[B, H, Sq, 256] = (e4m3(p * 448.0) @ v) * (1.0 / 448.0);\n"
    "}\n"
    /* bf16 q, k, v with an FP8 P: the 16-bit kernels and the decode kernel
     * round P in f32. */
    "attention p8_bf16 {\n"
    "  input  q : bf16[B, H, Sq, 128];\n"
    "  input  k : bf16[B, Hk, Skv, 128];\n"
    "  input  v : bf16[B, Hk, Skv, 128];\n"
    "  s = (q @ k^T) * 0.088388;\n"
    "  output o : bf16[B, H, Sq, 128] = (e4m3(softmax(s) * 448.0) @ v) * (1.0 / 448.0);\n"
    "}\n"
    /* Scales as one-element device tensors (frameworks keep them on the
     * device: read in the kernel, no host sync). */
    "attention fp8_device_scales {\n"
    "  input  q : e4m3[B, H, Sq, 128];\n"
    "  input  k : e4m3[B, Hk, Skv, 128];\n"
    "  input  v : e4m3[B, Hk, Skv, 128];\n"
    "  input  descale : f32[3];\n"
    "  input  scale_o : f32[1];\n"
    "  s = (q @ k^T) * (0.088388 * descale[0] * descale[1]);\n"
    "  out = (e4m3(softmax(s) * 448.0) @ v) * (descale[2] / 448.0);\n"
    "  output o : e4m3[B, H, Sq, 128] = out * scale_o[0];\n"
    "  output amax_o = amax(out);\n"
    "}\n"
    /* Rows 0..4 keep no key. */
    "attention fp8_shifted {\n"
    "  input  q : e4m3[B, H, Sq, 128];\n"
    "  input  k : e4m3[B, H, Skv, 128];\n"
    "  input  v : e4m3[B, H, Skv, 128];\n"
    "  s = mask((q @ k^T) * 0.088, j <= i - 5);\n"
    "  output o : e4m3[B, H, Sq, 128] = softmax(s) @ v;\n"
    "  output lse = logsumexp(s);\n"
    "}\n";

/* A few entries (one in 61) of every FP8 input 10-100x the rest, rounded
 * to the tensor's type (e4m3 saturates at 448). */
static void fill_outliers(RefArgs *ra, const void *arg) {
  (void)arg;
  const IrGraph *g = ra->g;
  const int qkv[3] = {g->q, g->k, g->v};
  for (int x = 0; x < 3; x++) {
    const DType dt = g->tensors[qkv[x]].type;
    if (!dtype_is_fp8(dt)) continue;
    RefTensor *t = &ra->tensors[qkv[x]];
    const int64_t n = ref_numel(t);
    for (int64_t e = 7 * x; e < n; e += 61)
      t->data[e] = dtype_round(dt, t->data[e] * (10.0 + (double)(e % 91)));
  }
}

/* q and k as small integers (-4..4): every partial sum of q k^T is exact
 * in the FP8 tensor cores' narrower accumulator, so S is the reference's
 * and P's FP8 roundings must agree with it (a random S moves a few
 * percent of P's elements across an e4m3 rounding boundary: see main). */
static void fill_int_qk(RefArgs *ra, const void *arg) {
  (void)arg;
  const IrGraph *g = ra->g;
  const int qk[2] = {g->q, g->k};
  for (int x = 0; x < 2; x++) {
    RefTensor *t = &ra->tensors[qk[x]];
    for (int64_t e = 0; e < ref_numel(t); e++)
      t->data[e] = fmax(-4.0, fmin(4.0, nearbyint(t->data[e] * 1.5)));
  }
}

/* Every finite value of q's FP8 type, in byte order (the conversion of
 * each, subnormals included); k and v keep their random values. */
static void fill_every_q(RefArgs *ra, const void *arg) {
  (void)arg;
  fill_every_fp8_value(ra, ra->g->q); /* the caller's descale_q keeps the scores in range */
}

/* Documents of 50 rows: doc[b, i] = i / 50. */
static void fill_docs(RefArgs *ra, const void *arg) {
  (void)arg;
  const IrGraph *g = ra->g;
  for (int t = 0; t < g->ntensors; t++) {
    if (strcmp(g->tensors[t].name, "doc")) continue;
    RefTensor *d = &ra->tensors[t];
    const int64_t B = d->shape[0], S = d->shape[1];
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < S; i++) d->data[b * S + i] = (double)(i / 50 + b);
  }
}

static int output_slot(const IrGraph *g, const char *name) {
  for (int n = 0; n < g->noutputs; n++)
    if (!strcmp(g->outputs[n].name, name)) return g->outputs[n].tensor;
  return -1;
}

/* The graph at several shapes (tile multiples and not, Sq != Skv unless
 * square, GQA, one query), with the given scalars, and with BSHD strides. */
static void test_shapes(attn_context *ctx, attn_graph *ag, const IrGraph *g, const char *scalars,
                        const InputFill *fill, bool square, uint64_t *seed) {
  static const int shapes[][5] = {
      {2, 4, 2, 128, 128}, {1, 4, 2, 77, 201}, {3, 2, 1, 200, 64}, {1, 8, 2, 1, 300}};
  StrBuf spec = {0};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    chk_shape_spec(g, &spec, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],
                   square ? shapes[s][3] : shapes[s][4]);
    if (scalars) sb_printf(&spec, ";%s", scalars);
    ChkOptions co = {0};
    run_case_filled(ctx, ag, g, spec.data, (*seed)++, &co, g->name, fill, NULL, NULL);
  }
  sb_free(&spec);
  chk_shape_spec(g, &spec, 2, 4, 2, 100, square ? 100 : 150);
  if (scalars) sb_printf(&spec, ";%s", scalars);
  ChkOptions bshd = {.bshd = true};
  run_case_filled(ctx, ag, g, spec.data, (*seed)++, &bshd, g->name, fill, NULL, NULL);
  sb_free(&spec);
}

/* amax of an f32 output's own expression: exactly max |o| of the kernel's
 * output (the same f32 values), besides matching the reference. */
static void test_amax_exact(attn_context *ctx, attn_graph *ag, const IrGraph *g, Arena *a,
                            uint64_t *seed) {
  const int ko = output_slot(g, "o"), ka = output_slot(g, "amax_o");
  StrBuf spec = {0};
  chk_shape_spec(g, &spec, 2, 4, 2, 300, 300);
  sb_puts(&spec, ";descale_v=3.0");
  ChkOptions co = {0};
  ChkResult res;
  RefArgs ra;
  const InputFill docs = {fill_docs, NULL};
  if (run_case_filled(ctx, ag, g, spec.data, (*seed)++, &co, "amax exact", &docs, &res, &ra)) {
    double m = 0;
    const int64_t n = ref_numel(&ra.tensors[ko]);
    for (int64_t e = 0; e < n; e++) m = fmax(m, fabs(res.outputs[ko][e]));
    verdict(res.outputs[ka][0] == m,
            arena_printf(a, "%s: amax_o equals max |o| of the kernel's output exactly", g->name),
            arena_printf(a, "amax %.9g, max |o| %.9g", res.outputs[ka][0], m));
    chk_result_free(&res, g->ntensors);
    ref_args_free(&ra);
  }
  sb_free(&spec);
}

/* Rows 0..4 keep no key: O exactly 0 (e4m3's +0) and lse -inf. */
static void test_fully_masked(attn_context *ctx, attn_graph *ag, const IrGraph *g, Arena *a) {
  ChkResult res;
  RefArgs ra;
  ChkOptions co = {0};
  const char *spec = "B=1,H=2,Sq=70,Skv=70";
  if (!run_case(ctx, ag, g, spec, 99, &co, "fp8 fully masked rows", &res, &ra)) return;
  const int ko = output_slot(g, "o"), kl = output_slot(g, "lse");
  bool exact = true;
  for (int h = 0; h < 2; h++)
    for (int i = 0; i < 5; i++) {
      const double *o = res.outputs[ko] + ((size_t)h * 70 + (size_t)i) * 128;
      for (int d = 0; d < 128; d++) exact &= o[d] == 0.0;
      const double l = res.outputs[kl][h * 70 + i];
      exact &= isinf(l) && l < 0;
    }
  verdict(exact, arena_printf(a, "%s: O = 0 and lse = -inf exactly", g->name), NULL);
  chk_result_free(&res, g->ntensors);
  ref_args_free(&ra);
}

/* argv[1], when given, is the target to compile for (sm_90: the portable
 * template on Hopper; default or "-": the device's, sm_90a's FP8 wgmma
 * path); argv[2] fwd_sm90's variant. */
int main(int argc, char **argv) {
  if (!gpu_test_driver()) return 0;
  attn_context *ctx = gpu_test_context();
  if (!ctx) return 1;
  if (argc > 1 && strcmp(argv[1], "-") && attn_context_set_arch(ctx, argv[1]) != ATTN_SUCCESS) {
    verdict(false, argv[1], attn_context_error(ctx));
    return 1;
  }
  /* argv[2]: fwd_sm90's variant (5, f16_pv: P V in f16 for rounded P). */
  if (argc > 2 && attn_context_set_option(ctx, ATTN_OPTION_SM90_VARIANT, atoi(argv[2]))) {
    /* (until session 21 the library refused 5 and this went unnoticed: the
     * f16_pv run tested the default variant) */
    verdict(false, "fwd_sm90 variant", attn_context_error(ctx));
    return 1;
  }
  Arena *a = arena_new();
  Diag d = {0};
  attn_module *mod = compile_text(ctx, "fp8_tests.attn", fp8_graphs);
  Source *src = source_from_string(a, "fp8_tests.attn", fp8_graphs, strlen(fp8_graphs));
  IrModule *m = mod && src ? ir_build(parse_source(src, a, &d), a, &d) : NULL;
  if (mod && !m) verdict(false, "fp8_tests.attn", d.out.data);
  uint64_t seed = 17000;
  const InputFill outliers = {fill_outliers, NULL}, every_q = {fill_every_q, NULL},
                  docs = {fill_docs, NULL};
  for (int k = 0; m && k < m->ngraphs; k++) {
    const IrGraph *g = m->graphs[k];
    attn_graph *ag;
    if (attn_module_get_graph(mod, g->name, &ag) != ATTN_SUCCESS) {
      verdict(false, g->name, attn_context_error(ctx));
      continue;
    }
    if (!strcmp(g->name, "fp8_causal_gqa")) {
      test_shapes(ctx, ag, g, NULL, NULL, false, &seed);
      test_shapes(ctx, ag, g, "descale_q=0.5,descale_k=2.0,descale_v=0.25,scale_o=8.0", NULL,
                  false, &seed);
      test_shapes(ctx, ag, g, "scale_o=4.0", &outliers, false, &seed);
      ChkOptions co = {0};
      run_case_filled(ctx, ag, g, "B=1,H=2,Hk=1,Sq=512,Skv=512;descale_q=0.01", seed++, &co,
                      "fp8_causal_gqa, every finite e4m3 value in q", &every_q, NULL, NULL);
      /* Saturation: scale_o large enough that O * scale_o passes 448. */
      run_case(ctx, ag, g, "B=1,H=2,Hk=1,Sq=64,Skv=64;scale_o=2000.0", seed++, &co,
               "fp8_causal_gqa, O saturating at 448", NULL, NULL);
    } else if (!strcmp(g->name, "fp8_doc_256")) {
      test_shapes(ctx, ag, g, NULL, &docs, true, &seed);
      test_amax_exact(ctx, ag, g, a, &seed);
    } else if (!strcmp(g->name, "fp8_shifted")) {
      test_fully_masked(ctx, ag, g, a);
    } else if (!strncmp(g->name, "p8_", 3) || !strcmp(g->name, "fp8_device_scales")) {
      /* P rounded to FP8: exact scores (integer q, k) must match at the
       * usual tolerance. With random q and k, FP8 wgmma's S (about 13
       * bits of accumulator) sends a few percent of P's elements to the
       * neighbouring e4m3 (e5m2) value, 3-9% of O on the H200: those run
       * at 4x the tolerance. fwd_sm80's f32 S matches either way. */
      const InputFill ints = {fill_int_qk, NULL};
      test_shapes(ctx, ag, g, NULL, &ints, false, &seed);
      fwd_case_tol_factor = 4.0;
      test_shapes(ctx, ag, g, NULL, NULL, false, &seed);
      fwd_case_tol_factor = 1.0;
    } else {
      test_shapes(ctx, ag, g, NULL, NULL, false, &seed);
      test_shapes(ctx, ag, g, NULL, &outliers, false, &seed);
    }
  }
  diag_free(&d);
  attn_module_destroy(mod);
  arena_free(a);
  attn_context_destroy(ctx);
  gpu_time_report();
  printf("gpu fp8: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
