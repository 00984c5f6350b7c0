/*
 * fwd_case.h: one forward check shared by the GPU tests: a graph on the GPU
 * (chk_run_gpu, NaN-poisoned outputs) against ref_forward in double rounded
 * to each output's dtype, every output compared at its dtype's tolerance
 * (chk_tolerance). Include after gpu_test.h.
 */
#ifndef ATTN_FWD_CASE_H
#define ATTN_FWD_CASE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "gpu_test.h"
#include "ref.h"

/* Multiplies every output's tolerance (chk_tolerance): 1 unless a test
 * knows its kernel rounds more than the reference models. */
static double fwd_case_tol_factor = 1.0;

/* Rewrites a test's inputs after ref_make_inputs (NULL: keep them). */
typedef struct InputFill {
  void (*fn)(RefArgs *ra, const void *arg);
  const void *arg;
} InputFill;

/* Tensor t's elements as every finite value of its FP8 type in byte order
 * (bytes n % 256, NaNs and infinities skipped): the kernels' conversion of
 * each, subnormals included, against the reference's. */
[[maybe_unused]] static void fill_every_fp8_value(RefArgs *ra, int t) {
  const DType dt = ra->g->tensors[t].type;
  RefTensor *x = &ra->tensors[t];
  size_t n = (size_t)ref_numel(x), m = 0;
  for (size_t e = 0; e < n; e++) {
    double v;
    do {
      const uint8_t byte = (uint8_t)(m++ % 256);
      v = dtype_from_bits(dt, &byte);
    } while (isnan(v) || isinf(v));
    x->data[e] = v;
  }
}

/* Packed sequences' offsets (both q's and k's, over each one's tokens):
 * pattern 0, empty sequences first, in the middle and last around a long
 * one; 1, one sequence 100x the others; 2, offsets out of range (below
 * 0, past the tokens), which both sides clamp. */
[[maybe_unused]] static void fill_packed_offsets(RefArgs *ra, const void *arg) {
  const int pattern = *(const int *)arg;
  const IrGraph *g = ra->g;
  const int offs[2] = {g->tensors[g->q].seq_offsets, g->tensors[g->k].seq_offsets};
  const int toks[2] = {g->q, g->k};
  const int sides = g->tensors[g->k].paged ? 1 : 2; /* paged keys have no offsets */
  for (int x = 0; x < sides; x++) {
    RefTensor *o = &ra->tensors[offs[x]];
    const int64_t n = o->shape[0], total = ra->tensors[toks[x]].shape[0];
    for (int64_t e = 0; e < n; e++) {
      double v = 0;
      if (pattern == 0) /* 0, 0, a third, a third, ..., total, total */
        v = e <= 1 ? 0 : e >= n - 2 ? (double)total
                                    : (double)(total / 3 + (e < 4 ? 0 : e - 3) * (total / 3) /
                                                               (n > 6 ? n - 6 : 1));
      else if (pattern == 1) /* the last sequence 100x each of the others */
        v = e < n - 1 ? (double)(e * (total / (100 + n))) : (double)total;
      else /* -7, then even cuts, then past the end */
        v = e == 0 ? -7.0 : e == n - 1 ? (double)(total + 1000) : (double)(e * total / (n - 1));
      o->data[e] = v < (double)total || pattern == 2 ? v : (double)total;
    }
    if (offs[1] == offs[0]) break;
  }
}

/* Runs g on the GPU and the CPU; compares every output. spec is the
 * shapes ("B=2,H=4,Sq=128"), then optionally ';' and scalar settings
 * ("descale_q=0.5,scale_o=8"). Returns the GPU result and the inputs
 * (caller frees) through keep/keep_ref when asked. */
[[maybe_unused]] static bool run_case_filled(attn_context *ctx, attn_graph *ag, const IrGraph *g,
                            const char *spec, uint64_t seed, const ChkOptions *co,
                            const char *label, const InputFill *fill, ChkResult *keep,
                            RefArgs *keep_ref) {
  RefArgs ra = {.g = g};
  StrBuf err = {0}, detail = {0}, dims = {0};
  ChkResult res = {0};
  const char *semi = strchr(spec, ';');
  sb_printf(&dims, "%.*s", semi ? (int)(semi - spec) : (int)strlen(spec), spec);
  bool ok = ref_make_inputs(&ra, dims.data, seed, &err) == 0 &&
            (!semi || ref_set_scalars(&ra, semi + 1, &err) == 0) &&
            chk_output_shapes(&ra, &err) == 0;
  sb_free(&dims);
  if (ok && fill) fill->fn(&ra, fill->arg);
  if (ok && chk_run_gpu(ctx, ag, &ra, co, &res, &err) != ATTN_SUCCESS) ok = false;
  const double t_ref = gpu_now();
  if (ok && ref_forward(&ra, &err) != 0) ok = false;
  gpu_t_ref += gpu_now() - t_ref;
  for (int n = 0; ok && n < g->noutputs; n++) {
    int k = g->outputs[n].tensor;
    /* The reference's output as stored (rounded to its dtype: FP8 outputs
     * saturate), so only the kernels' own error remains. */
    if (dtype_is_float(g->tensors[k].type))
      for (int64_t e = 0; e < ref_numel(&ra.tensors[k]); e++)
        ra.tensors[k].data[e] = dtype_round(g->tensors[k].type, ra.tensors[k].data[e]);
    RefCompare c = ref_compare(res.outputs[k], ra.tensors[k].data, (size_t)ref_numel(&ra.tensors[k]));
    double tol = chk_tolerance(g->tensors[k].type) * fwd_case_tol_factor;
    sb_printf(&detail, "%s rel_l2 %.1e nonfinite-mismatch %zu; ", g->tensors[k].name, c.rel_l2,
              c.nonfinite_mismatch);
    if (!(c.rel_l2 <= tol) || c.nonfinite_mismatch) ok = false;
  }
  StrBuf what = {0};
  sb_printf(&what, "%s [%s]%s", label, spec, co->bshd ? " bshd" : "");
  if (err.len) sb_printf(&detail, "%s", err.data);
  verdict(ok, what.data, detail.data);
  sb_free(&what);
  sb_free(&err);
  sb_free(&detail);
  if (keep && ok) {
    *keep = res;
    *keep_ref = ra;
    return ok;
  }
  chk_result_free(&res, g->ntensors);
  ref_args_free(&ra);
  return ok;
}

[[maybe_unused]] static bool run_case(attn_context *ctx, attn_graph *ag, const IrGraph *g, const char *spec,
                     uint64_t seed, const ChkOptions *co, const char *label, ChkResult *keep,
                     RefArgs *keep_ref) {
  return run_case_filled(ctx, ag, g, spec, seed, co, label, NULL, keep, keep_ref);
}

[[maybe_unused]] static attn_module *compile_text(attn_context *ctx, const char *name, const char *text) {
  attn_module *mod = NULL;
  if (gpu_compile_string(ctx, name, text, strlen(text), &mod) != ATTN_SUCCESS) {
    verdict(false, name, attn_context_error(ctx));
    return NULL;
  }
  return mod;
}

[[maybe_unused]] static IrGraph *build_ir(Arena *a, const char *name, const char *text) {
  Diag d = {0};
  Source *src = source_from_string(a, name, text, strlen(text));
  IrModule *m = ir_build(parse_source(src, a, &d), a, &d);
  diag_free(&d);
  return m ? m->graphs[0] : NULL;
}

#endif
