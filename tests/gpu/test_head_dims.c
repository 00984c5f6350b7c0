/*
 * test_head_dims.c: every head dim on the GPU against the CPU reference.
 *
 * The templates take head dims that are multiples of 8 up to 256 and
 * build their tiles for whole 64-column blocks (abi/attn_layout.h,
 * attn_head_tile): the columns past the head dim are loaded as zeros and
 * never stored. For a spread of (d_qk, d_v) pairs (below, at and between
 * the blocks; MLA's 192/128; d_v != d_qk both ways) a causal graph with an
 * lse output runs on the Hopper forward (sm_90a), on the portable forward
 * (the context's target sm_90, where fwd_sm80 runs), and on the split-KV
 * decode kernel (the plan's split count and 3) at shapes that are and are
 * not tile multiples, with GQA, against the reference. Graphs with grad
 * run their backward too (bwd_sm90 and bwd_sm80; bwd_case.h, as
 * test_backward checks it: deterministic runs twice, bit for bit). Skips without a GPU
 * (exit 0). argv[1], when given, keeps only the pairs whose graph name
 * (hd_<d_qk>_<d_v>) contains it.
 */
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "cuda_driver.h"
#include "gpu_test.h"
#include "bwd_case.h"
#include "ref.h"

static const int head_dims[][2] = {
    {8, 8},     {16, 16},   {32, 32},   {40, 40},   {72, 72},   {80, 80},  {96, 96},
    {112, 112}, {160, 160}, {192, 192}, {224, 224}, {192, 128}, {128, 96}, {64, 192},
};

/* Compares every output of g, run at spec on the GPU, with the reference. */
static void run_forward(attn_context *ctx, attn_graph *ag, const IrGraph *g, const char *spec,
                        uint64_t seed, const char *label) {
  RefArgs ra = {.g = g};
  StrBuf err = {0}, detail = {0}, what = {0};
  ChkResult res = {0};
  ChkOptions co = {0};
  bool ok = ref_make_inputs(&ra, spec, seed, &err) == 0 && chk_output_shapes(&ra, &err) == 0;
  if (ok && chk_run_gpu(ctx, ag, &ra, &co, &res, &err) != ATTN_SUCCESS) ok = false;
  const double t_ref = gpu_now();
  if (ok && ref_forward(&ra, &err) != 0) ok = false;
  gpu_t_ref += gpu_now() - t_ref;
  for (int n = 0; ok && n < g->noutputs; n++) {
    const int k = g->outputs[n].tensor;
    const RefCompare c =
        ref_compare(res.outputs[k], ra.tensors[k].data, (size_t)ref_numel(&ra.tensors[k]));
    sb_printf(&detail, "%s rel_l2 %.1e nonfinite-mismatch %zu; ", g->tensors[k].name, c.rel_l2,
              c.nonfinite_mismatch);
    if (!(c.rel_l2 <= chk_tolerance(g->tensors[k].type)) || c.nonfinite_mismatch) ok = false;
  }
  if (err.len) sb_printf(&detail, "%s", err.data);
  sb_printf(&what, "%s [%s]", label, spec);
  verdict(ok, what.data, detail.data);
  chk_result_free(&res, g->ntensors);
  ref_args_free(&ra);
  sb_free(&err);
  sb_free(&detail);
  sb_free(&what);
}

/* The graph's text, with or without grad. */
static void pair_text(char *text, size_t size, const char *name, int dqk, int dv,
                      bool with_grad) {
  snprintf(text, size,
           "attention %s {\n"
           "  input q : bf16[B, H, Sq, %d];\n  input k : bf16[B, Hk, Skv, %d];\n"
           "  input v : bf16[B, Hk, Skv, %d];\n"
           "  s = mask((q @ k^T) * 0.15, j <= i + Skv - Sq);\n"
           "  o = softmax(s) @ v;\n  output o : bf16[B, H, Sq, %d];\n"
           "  output lse = logsumexp(s);\n%s}\n",
           name, dqk, dqk, dv, dv, with_grad ? "  grad q, k, v;\n" : "");
}

/* bwd_sm80 takes head dims up to 128: there a graph with grad must be
 * refused at compile time with the reason, and the forward is tested
 * without grad. */
static bool refused_backward(attn_context *ctx, const char *name, int dqk, int dv,
                             const char *label) {
  char text[1024];
  pair_text(text, sizeof text, name, dqk, dv, true);
  attn_module *mod = NULL;
  const attn_status st = gpu_compile_string(ctx, name, text, strlen(text), &mod);
  const bool ok = st == ATTN_ERROR_UNSUPPORTED &&
                  strstr(attn_context_error(ctx), "the backward takes head dimensions");
  char what[160];
  snprintf(what, sizeof what, "%s: grad refused with its reason", label);
  verdict(ok, what, ok ? NULL : attn_context_error(ctx));
  attn_module_destroy(mod);
  return ok;
}

static void test_pair(attn_context *ctx, const char *arch, int dqk, int dv, uint64_t *seed) {
  char name[32], text[1024], label[96];
  snprintf(name, sizeof name, "hd_%d_%d", dqk, dv);
  snprintf(label, sizeof label, "%s on %s", name, arch ? arch : "the device's target");
  const bool with_grad = !arch || (dqk <= 128 && dv <= 128);
  if (!with_grad) refused_backward(ctx, name, dqk, dv, label);
  pair_text(text, sizeof text, name, dqk, dv, with_grad);  Arena *a = arena_new();
  Diag d = {0};
  Source *src = source_from_string(a, name, text, strlen(text));
  IrModule *m = ir_build(parse_source(src, a, &d), a, &d);
  attn_module *mod = NULL;
  attn_graph *ag = NULL;
  if (!m) {
    verdict(false, label, d.out.data);
  } else if (gpu_compile_string(ctx, name, text, strlen(text), &mod) != ATTN_SUCCESS ||
             attn_module_get_graph(mod, name, &ag) != ATTN_SUCCESS) {
    verdict(false, label, attn_context_error(ctx));
  } else {
    const IrGraph *g = m->graphs[0];
    /* B, H, Hk, Sq, Skv: tile multiples; neither; more queries than keys;
     * then decode shapes (GQA rows packed, one query and a few). */
    static const int fwd[][5] = {{2, 4, 2, 128, 128}, {1, 4, 2, 77, 301}, {2, 2, 1, 200, 64}};
    static const int dec[][5] = {{1, 8, 2, 1, 700}, {2, 4, 1, 3, 1000}};
    StrBuf spec = {0};
    for (size_t s = 0; s < sizeof fwd / sizeof fwd[0]; s++) {
      chk_shape_spec(g, &spec, fwd[s][0], fwd[s][1], fwd[s][2], fwd[s][3], fwd[s][4]);
      run_forward(ctx, ag, g, spec.data, (*seed)++, label);
    }
    static const int splits[] = {0, 3};
    for (size_t s = 0; s < sizeof dec / sizeof dec[0]; s++)
      for (size_t k = 0; k < 2; k++) {
        attn_context_set_option(ctx, ATTN_OPTION_DECODE_SPLITS, splits[k]);
        char dl[128];
        snprintf(dl, sizeof dl, "%s decode splits %d", label, splits[k]);
        chk_shape_spec(g, &spec, dec[s][0], dec[s][1], dec[s][2], dec[s][3], dec[s][4]);
        run_forward(ctx, ag, g, spec.data, (*seed)++, dl);
      }
    attn_context_set_option(ctx, ATTN_OPTION_DECODE_SPLITS, 0);
    char why[256];
    if (attn_graph_has_backward(ag, why, sizeof why)) {
      BwdGraph *bg = bwd_derive(g, a, &d);
      /* GQA (dK, dV through f32 accumulators), then MHA (stored
       * directly), then deterministic (ordered dQ tiles, per-head
       * accumulators: head dims up to 128). */
      static const int bwd[][5] = {{2, 4, 2, 128, 128}, {1, 2, 2, 77, 201}, {1, 4, 2, 100, 150}};
      const size_t nb = dqk <= 128 && dv <= 128 ? 3 : 2;
      for (size_t s = 0; bg && s < nb; s++) {
        chk_shape_spec(g, &spec, bwd[s][0], bwd[s][1], bwd[s][2], bwd[s][3], bwd[s][4]);
        bwd_case(ctx, ag, g, bg, spec.data, (*seed)++, label, NULL, 0, s == 2);
      }
      if (!bg) verdict(false, label, d.out.data);
    } else if (with_grad) {
      verdict(false, label, why);
    }
    sb_free(&spec);
  }
  attn_module_destroy(mod);
  diag_free(&d);
  arena_free(a);
}

int main(int argc, char **argv) {
  const RtDriver *drv = gpu_test_driver();
  if (!drv) return 0;
  attn_context *ctx = gpu_test_context();
  if (!ctx) return 1;
  StrBuf why = {0};
  /* The device's own target (sm_90a on Hopper: fwd_sm90, bwd_sm90), then
   * sm_90 without the arch-specific features (fwd_sm80, bwd_sm80). */
  static const char *const arches[] = {NULL, "sm_90"};
  int major = 0, minor = 0;
  const bool hopper = rt_driver_cc(drv, 0, &major, &minor, &why) == ATTN_SUCCESS && major == 9;
  uint64_t seed = 4000;
  for (size_t x = 0; x < (hopper ? 2u : 1u); x++) {
    attn_context_set_arch(ctx, arches[x]);
    for (size_t k = 0; k < sizeof head_dims / sizeof head_dims[0]; k++) {
      char name[32];
      snprintf(name, sizeof name, "hd_%d_%d", head_dims[k][0], head_dims[k][1]);
      if (argc > 1 && !strstr(name, argv[1])) continue;
      test_pair(ctx, arches[x], head_dims[k][0], head_dims[k][1], &seed);
    }
  }
  attn_context_destroy(ctx);
  sb_free(&why);
  gpu_time_report();
  printf("gpu head dims: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
