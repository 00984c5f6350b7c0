/*
 * bwd_case.h: one backward check shared by the GPU tests: the forward and
 * the backward on the GPU (attn_call_launch_backward) against ref_backward
 * in double, every gradient compared. Include after gpu_test.h.
 */
#ifndef ATTN_BWD_CASE_H
#define ATTN_BWD_CASE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "gpu_test.h"
#include "ref.h"

/* Forward then backward on the GPU, ref_backward on the CPU; compares
 * every gradient. zero_rows > 0: dq's first zero_rows query rows of every
 * (b, h) must be exactly 0 (their keys are all masked). det: in
 * deterministic mode, twice, and the two runs must agree bit for bit.
 * tag, when given, ends the verdict's line in parentheses. */
/* ATTN_TEST_DUMP=1: for a gradient off the reference, its first rows
 * (over the last dimension) whose relative error passes 5%, with the
 * error's and the reference row's norms, and how many there are: where a
 * kernel goes wrong (a packed batch's rows as token.head, a dense
 * tensor's (b, h, row) rows flattened). */
static void bwd_case_dump_rows(StrBuf *out, const double *got, const double *want,
                               const RefTensor *shape) {
  const char *dump = getenv("ATTN_TEST_DUMP");
  if (!dump || strcmp(dump, "1")) return;
  const int64_t cols = shape->shape[shape->ndims - 1];
  const int64_t rows = cols > 0 ? ref_numel(shape) / cols : 0;
  int64_t bad = 0;
  sb_puts(out, "[rows off:");
  for (int64_t r = 0; r < rows; r++) {
    double e = 0, w = 0;
    for (int64_t c = 0; c < cols; c++) {
      const double d = got[r * cols + c] - want[r * cols + c];
      e += d * d;
      w += want[r * cols + c] * want[r * cols + c];
    }
    if (!(e <= 0.0025 * w) && !(w == 0 && e == 0)) {
      /* A packed [tokens, heads, cols] gradient's row as token.head. */
      if (bad < 16 && shape->ndims == 3)
        sb_printf(out, " %lld.%lld (%.2g/%.2g)", (long long)(r / shape->shape[1]),
                  (long long)(r % shape->shape[1]), sqrt(e), sqrt(w));
      else if (bad < 16)
        sb_printf(out, " %lld (%.2g/%.2g)", (long long)r, sqrt(e), sqrt(w));
      bad++;
    }
  }
  sb_printf(out, "; %lld of %lld] ", (long long)bad, (long long)rows);
}

/* fill, when given, rewrites the inputs after ref_make_inputs (a packed
 * batch's offsets: tests/gpu/fwd_case.h, fill_packed_offsets). */
static void bwd_case_filled(attn_context *ctx, attn_graph *ag, const IrGraph *g,
                            const BwdGraph *bg, const char *spec, uint64_t seed, const char *label,
                            const char *tag, int zero_rows, bool det,
                            void (*fill)(RefArgs *, const void *), const void *fill_arg) {
  RefArgs ra = {.g = g};
  StrBuf err = {0}, detail = {0};
  ChkResult res = {0}, again = {0};
  RefTensor *grads = calloc((size_t)g->ntensors, sizeof *grads);
  double *dout = NULL;
  bool ok = grads && ref_make_inputs(&ra, spec, seed, &err) == 0;
  if (ok && fill) fill(&ra, fill_arg);
  ok = ok && chk_output_shapes(&ra, &err) == 0;
  BwdSlots sl;
  if (ok && bwd_slots(g, &sl) != 0) {
    sb_puts(&err, "no lse output");
    ok = false;
  }
  if (ok) ok = (dout = chk_random_dout(&ra, sl.o, seed)) != NULL;
  ChkOptions co = {.dout = dout, .deterministic = det};
  if (ok && chk_run_gpu(ctx, ag, &ra, &co, &res, &err) != ATTN_SUCCESS) ok = false;
  if (ok && det && chk_run_gpu(ctx, ag, &ra, &co, &again, &err) != ATTN_SUCCESS) ok = false;
  /* The FP8 backward (a grad block, FP8 tensors, P or o scaled): the
   * reference from the forward's stored o and lse (the kernels read them:
   * delta from the stored, rounded o), with the block's amax outputs; its
   * gradients rounded to their storage types as the kernels store them. */
  const bool fp8 = bwd_is_fp8(g);
  double amax[BWD_MAX_AMAX] = {0};
  const double t_ref = gpu_now();
  if (ok && chk_reference_backward(&ra, bg, dout, &res, grads, amax, &err) != 0) ok = false;
  gpu_t_ref += gpu_now() - t_ref;
  for (int k = 0; ok && k < sl.namax; k++) {
    const double want = amax[k], got = res.amax[k];
    sb_printf(&detail, "%s %.6g (want %.6g); ", g->grad->amax[k].name, got, want);
    /* FP8 tensor cores (bwd_sm90's FP8 mode, the sm90f8 pass) add with
     * fewer mantissa bits than f32: its amax came within 1.1e-3 on the H200
     * (session 24), the bf16 MMAs' within 1e-6. */
    const double tol = tag && !strcmp(tag, "sm90f8") ? 5e-3 : 1e-3;
    if (!(fabs(got - want) <= tol * fabs(want) + 1e-30)) ok = false;
  }
  /* Every gradient is compared once the runs succeeded (a failing one does
   * not hide the others). */
  const bool ran = ok;
  for (int t = 0; ran && t < g->ntensors; t++) {
    if (!g->tensors[t].grad) continue;
    if (!res.grads || !res.grads[t] || !grads[t].data) {
      sb_printf(&detail, "d%s missing; ", g->tensors[t].name);
      ok = false;
      break;
    }
    size_t n = (size_t)ref_numel(&grads[t]);
    RefCompare c = ref_compare(res.grads[t], grads[t].data, n);
    sb_printf(&detail, "d%s rel_l2 %.1e nonfinite-mismatch %zu; ", g->tensors[t].name, c.rel_l2,
              c.nonfinite_mismatch);
    /* A bias over b and h only sums every score's gradient: more
     * cancellation, so a looser bound. */
    bool qkv = t == g->q || t == g->k || t == g->v;
    unsigned keep = 0;
    for (int x = 0; !qkv && x < bg->nbias; x++)
      if (bg->bias[x].tensor == t) keep = bg->bias[x].keep;
    double tol = !qkv && !(keep & (DOM_I | DOM_J)) ? 5e-2 : 2e-2;
    /* FP8: P's and dS's roundings and the stores' may land one step
     * apart where the kernel's f32 and the reference's double straddle a
     * boundary (a few elements in a thousand). */
    if (fp8) tol = 3e-2;
    if (!(c.rel_l2 <= tol) || c.nonfinite_mismatch) {
      ok = false;
      bwd_case_dump_rows(&detail, res.grads[t], grads[t].data, &grads[t]);
    }
    if (det) {
      size_t differ = 0;
      if (!again.grads || !again.grads[t]) differ = n;
      for (size_t e = 0; again.grads && again.grads[t] && e < n; e++)
        differ += memcmp(&res.grads[t][e], &again.grads[t][e], sizeof(double)) != 0;
      sb_printf(&detail, "d%s differs between two deterministic runs at %zu; ",
                g->tensors[t].name, differ);
      if (differ) ok = false;
    }
    if (t == g->q && zero_rows > 0) {
      const int64_t *sh = grads[t].shape; /* [B, H, Sq, D] */
      size_t nonzero = 0;
      for (int64_t bh = 0; bh < sh[0] * sh[1]; bh++)
        for (int64_t i = 0; i < zero_rows && i < sh[2]; i++)
          for (int64_t d = 0; d < sh[3]; d++)
            nonzero += res.grads[t][(bh * sh[2] + i) * sh[3] + d] != 0.0;
      sb_printf(&detail, "nonzero dq in fully masked rows %zu; ", nonzero);
      if (nonzero) ok = false;
    }
  }
  StrBuf what = {0};
  sb_printf(&what, "backward%s %s [%s]%s%s%s", det ? " (deterministic)" : "", label, spec,
            tag ? " (" : "", tag ? tag : "", tag ? ")" : "");
  if (err.len) sb_printf(&detail, "%s", err.data);
  verdict(ok, what.data, detail.data);
  sb_free(&what);
  sb_free(&err);
  sb_free(&detail);
  chk_result_free(&res, g->ntensors);
  chk_result_free(&again, g->ntensors);
  for (int t = 0; grads && t < g->ntensors; t++) free(grads[t].data);
  free(grads);
  free(dout);
  ref_args_free(&ra);
}

[[maybe_unused]] static void bwd_case(attn_context *ctx, attn_graph *ag, const IrGraph *g,
                                      const BwdGraph *bg, const char *spec, uint64_t seed,
                                      const char *label, const char *tag, int zero_rows,
                                      bool det) {
  bwd_case_filled(ctx, ag, g, bg, spec, seed, label, tag, zero_rows, det, NULL, NULL);
}

#endif
