/*
 * test_backward.c: the derived backward on the GPU (attn_call_launch_backward)
 * against the CPU backward (ref_backward, in double).
 *
 * Every example that declares grad, at three shapes (tile multiples, Sq !=
 * Skv both ways and not multiples of the 64-row tiles; GQA where the graph
 * has Hk): the forward runs first (its o and lse feed the backward), then
 * the backward with a random dO; each gradient (dq, dk, dv and bias
 * gradients: written directly, through atomics, or summed per warp) must
 * agree to relative L2 2e-2 (5e-2 for a bias summed over i and j) with
 * NaN-poisoned outputs. Deterministic mode, at one shape per graph: two
 * runs give bit-identical gradients, which match the reference. Also: rows
 * whose keys are all masked get exactly zero dQ; dropout's mask is
 * regenerated identically in the backward; a bias read transposed is
 * refused with a message; a graph without grad is refused. Skips without a
 * GPU (exit 0). Run from the repository root (it reads examples/).
 * Everything runs twice, with the context option ATTN_OPTION_BACKWARD_TEMPLATE
 * at 80 and at 90, so both main kernels are checked on Hopper, and the FP8
 * graphs a third time at 91 (bwd_sm90's FP8 tensor-core mode where it
 * applies); once, when ATTN_BWD_TEMPLATE=sm80|sm90|sm90f8 names one. ATTN_PERSISTENT_CTAS=N caps the
 * persistent kernels' CTAs (tools/device_check.sh runs it with 3, so every
 * CTA takes several work items).
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
#include "bwd_case.h"
#include "fwd_case.h"


/* The main kernel under test: main sets ATTN_OPTION_BACKWARD_TEMPLATE
 * for each pass ("sm80", then "sm90": bwd_sm90 on an sm_90 device,
 * bwd_sm80 again elsewhere). */
static const char *bwd_template_tag = "default";

/* A graph with grad on a tensor the GPU backward cannot differentiate
 * (a bias read transposed): the forward compiles, the backward is refused
 * with a message naming the tensor. */
static void test_refused(attn_context *ctx, attn_graph *ag, const IrGraph *g, const char *label) {
  attn_call *call = NULL;
  attn_status st = attn_call_create(ag, &call);
  if (st == ATTN_SUCCESS) st = attn_call_launch_backward(call, NULL);
  const char *msg = attn_context_error(ctx);
  int bad = bwd_unsupported_grad(g);
  bool ok = st == ATTN_ERROR_UNSUPPORTED && bad >= 0 && strstr(msg, g->tensors[bad].name);
  StrBuf what = {0};
  sb_printf(&what, "backward %s is refused (bias read transposed)", label);
  verdict(ok, what.data, msg);
  sb_free(&what);
  attn_call_destroy(call);
}

/* Head dim 256: the deterministic mode is refused with a message naming
 * the head dims (bwd_sm90's split-D mode has no ordered dQ tiles). */
static void test_det_refused(attn_context *ctx, attn_graph *ag, const char *label) {
  attn_call *call = NULL;
  attn_status st = attn_call_create(ag, &call);
  if (st == ATTN_SUCCESS) st = attn_call_set_deterministic(call, 1);
  if (st == ATTN_SUCCESS) st = attn_call_launch_backward(call, NULL);
  const char *msg = attn_context_error(ctx);
  StrBuf what = {0};
  sb_printf(&what, "backward (deterministic) %s is refused at head dims over 128 or for FP8 (%s)",
            label, bwd_template_tag);
  verdict(st == ATTN_ERROR_UNSUPPORTED &&
              (strstr(msg, "head dimensions") || strstr(msg, "FP8 backward has no deterministic")),
          what.data, msg);
  sb_free(&what);
  attn_call_destroy(call);
}

/* det: whether the deterministic mode runs (else it must be refused). */
static void test_module_det(attn_context *ctx, const char *name, const char *text, size_t len,
                            uint64_t *seed, int zero_rows, bool det);

static void test_module(attn_context *ctx, const char *name, const char *text, size_t len,
                        uint64_t *seed, int zero_rows) {
  test_module_det(ctx, name, text, len, seed, zero_rows, true);
}

static void test_module_det(attn_context *ctx, const char *name, const char *text, size_t len,
                            uint64_t *seed, int zero_rows, bool det) {
  attn_module *mod = NULL;
  attn_status st = gpu_compile_string(ctx, name, text, len, &mod);
  /* bwd_sm80 takes head dims up to 128 (examples/mla.attn has 192): its
   * pass must refuse such a graph with the reason, at compile time. */
  if (st == ATTN_ERROR_UNSUPPORTED && !strcmp(bwd_template_tag, "sm80") &&
      strstr(attn_context_error(ctx), "multiples of 8 up to 128 on this target")) {
    char what[256];
    snprintf(what, sizeof what, "%s: refused by bwd_sm80 (head dims over 128)", name);
    verdict(true, what, NULL);
    return;
  }
  if (st != ATTN_SUCCESS) {
    verdict(false, name, attn_context_error(ctx));
    return;
  }
  Arena *a = arena_new();
  Diag d = {0};
  Source *src = source_from_string(a, name, text, len);
  IrModule *m = ir_build(parse_source(src, a, &d), a, &d);
  for (int k = 0; m && !d.nerrors && k < m->ngraphs; k++) {
    const IrGraph *g = m->graphs[k];
    if (!bwd_has_grad(g)) continue;
    attn_graph *ag;
    if (attn_module_get_graph(mod, g->name, &ag) != ATTN_SUCCESS) {
      verdict(false, g->name, attn_context_error(ctx));
      continue;
    }
    const char *label = arena_printf(a, "%s:%s", name, g->name);
    if (bwd_unsupported_grad(g) >= 0) {
      test_refused(ctx, ag, g, label);
      continue;
    }
    BwdGraph *bg = bwd_derive(g, a, &d);
    if (!bg) {
      verdict(false, label, d.out.data);
      continue;
    }
    static const int shapes[][5] = {{1, 2, 1, 128, 128}, {2, 4, 2, 77, 201}, {1, 4, 2, 200, 64}};
    StrBuf spec = {0};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
      chk_shape_spec(g, &spec, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], shapes[s][4]);
      bwd_case(ctx, ag, g, bg, spec.data, (*seed)++, label, bwd_template_tag, zero_rows, false);
    }
    /* Deterministic mode at the GQA, unaligned shape (its ordered dQ tiles
     * take head dims up to 128: refused above, as examples/mla.attn's). */
    chk_shape_spec(g, &spec, shapes[1][0], shapes[1][1], shapes[1][2], shapes[1][3], shapes[1][4]);
    if (det && !bwd_is_fp8(g) && g->tensors[g->q].dim_val[3] <= 128 &&
        g->tensors[g->v].dim_val[3] <= 128)
      bwd_case(ctx, ag, g, bg, spec.data, (*seed)++, label, bwd_template_tag, zero_rows, true);
    else
      test_det_refused(ctx, ag, label);
    sb_free(&spec);
  }
  if (d.nerrors) verdict(false, name, d.out.data);
  diag_free(&d);
  arena_free(a);
  attn_module_destroy(mod);
}

static void test_example(attn_context *ctx, const char *path, uint64_t *seed) {
  Arena *a = arena_new();
  Diag d = {0};
  Source *src = source_load(a, path, &d);
  /* A `grad` statement: a line whose first word is grad. */
  bool grad = false;
  for (const char *l = src ? src->text : ""; *l && !grad; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : "") {
    while (*l == ' ' || *l == '\t') l++;
    grad = !strncmp(l, "grad ", 5);
  }
  if (src && grad) test_module(ctx, path, src->text, src->len, seed, 0);
  if (!src) verdict(false, path, d.out.data);
  diag_free(&d);
  arena_free(a);
}

/* Rows i < 64 keep no key: dQ there must be exactly 0, never NaN. */
static const char masked_rows_src[] =
    "attention masked_rows {\n"
    "  input q : bf16[B, H, Sq, 64];\n"
    "  input k : bf16[B, H, Skv, 64];\n"
    "  input v : bf16[B, H, Skv, 64];\n"
    "  s = mask((q @ k^T) * 0.125, j <= i - 64);\n"
    "  o = softmax(s) @ v;\n"
    "  output o : bf16[B, H, Sq, 64];\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v;\n"
    "}\n";

/* Head dims 128 with nothing but a scale, then a causal mask, with GQA:
 * what bwd_sm90's 80-query tiles take (backward template 93, `test_backward
 * d128` under ATTN_BWD_TEMPLATE=sm90bm80), and the benchmarks' graphs. */
static const char d128_src[] =
    "attention d128_full {\n"
    "  input q : bf16[B, H, Sq, 128];\n"
    "  input k : bf16[B, Hk, Skv, 128];\n"
    "  input v : bf16[B, Hk, Skv, 128];\n"
    "  s = (q @ k^T) * 0.08838834764831845;\n"
    "  output o : bf16[B, H, Sq, 128] = softmax(s) @ v;\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v;\n"
    "}\n"
    "attention d128_causal {\n"
    "  input q : bf16[B, H, Sq, 128];\n"
    "  input k : bf16[B, Hk, Skv, 128];\n"
    "  input v : bf16[B, Hk, Skv, 128];\n"
    "  s = mask((q @ k^T) * 0.08838834764831845, j <= i);\n"
    "  output o : bf16[B, H, Sq, 128] = softmax(s) @ v;\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v;\n"
    "}\n";

/* Dropout: the backward regenerates the forward's Philox mask. */
static const char dropout_src[] =
    "attention dropout_grad {\n"
    "  input q : bf16[B, H, Sq, 128];\n"
    "  input k : bf16[B, H, Skv, 128];\n"
    "  input v : bf16[B, H, Skv, 128];\n"
    "  scalar seed : u64 = 1234;\n"
    "  s = (q @ k^T) * 0.08838834764831845;\n"
    "  o = dropout(softmax(s), 0.1, seed, 7) @ v;\n"
    "  output o : bf16[B, H, Sq, 128];\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v;\n"
    "}\n";

/* A bias broadcast over the batch (f32 atomics into a scratch, or in
 * deterministic mode a full buffer summed in order), with GQA. */
static const char bias_bcast_src[] =
    "attention bias_bcast {\n"
    "  input q : bf16[B, H, Sq, 64];\n"
    "  input k : bf16[B, Hk, Skv, 64];\n"
    "  input v : bf16[B, Hk, Skv, 64];\n"
    "  input bias : bf16[1, H, Sq, Skv];\n"
    "  s = (q @ k^T) * 0.125 + bias[b, h, i, j];\n"
    "  s = mask(s, j <= i + 5);\n"
    "  o = softmax(s) @ v;\n"
    "  output o : bf16[B, H, Sq, 64];\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v, bias;\n"
    "}\n";

/* ALiBi-style slopes, one per head: the gradient sums every score's, in
 * registers per warp and one atomic per warp. */
static const char slopes_src[] =
    "attention slopes_grad {\n"
    "  input q : bf16[B, H, Sq, 128];\n"
    "  input k : bf16[B, H, Skv, 128];\n"
    "  input v : bf16[B, H, Skv, 128];\n"
    "  input slopes : f32[H];\n"
    "  s = (q @ k^T) * 0.08838834764831845 - slopes[h] * 0.015625 * f32(i - j);\n"
    "  o = softmax(s) @ v;\n"
    "  output o : bf16[B, H, Sq, 128];\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v, slopes;\n"
    "}\n";

/* Head dim 256 (bwd_sm90's split-D mode): a causal mask and a direct bias
 * gradient (written by one warpgroup only), with GQA. (Slopes too would
 * take 17 of the kernel's 16 tensor slots; they are in the next graph.) */
static const char d256_bias_src[] =
    "attention d256_bias {\n"
    "  input q : bf16[B, H, Sq, 256];\n"
    "  input k : bf16[B, Hk, Skv, 256];\n"
    "  input v : bf16[B, Hk, Skv, 256];\n"
    "  input bias : f32[B, H, Sq, Skv];\n"
    "  s = (q @ k^T) * 0.0625 + bias[b, h, i, j];\n"
    "  s = mask(s, j <= i + 3);\n"
    "  o = softmax(s) @ v;\n"
    "  output o : bf16[B, H, Sq, 256];\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v, bias;\n"
    "}\n";

/* Head dim 256 with softcap (dRaw reads the raw product: the one-pass
 * order), per-head slopes (their gradient summed in registers, by one
 * warpgroup) and dropout. */
static const char d256_softcap_dropout_src[] =
    "attention d256_softcap_dropout {\n"
    "  input q : bf16[B, H, Sq, 256];\n"
    "  input k : bf16[B, H, Skv, 256];\n"
    "  input v : bf16[B, H, Skv, 256];\n"
    "  input slopes : f32[H];\n"
    "  scalar seed : u64 = 99;\n"
    "  s = (q @ k^T) * 0.0625;\n"
    "  s = 20.0 * tanh(s / 20.0) - slopes[h] * 0.015625 * f32(i - j);\n"
    "  o = dropout(softmax(s), 0.2, seed, 3) @ v;\n"
    "  output o : bf16[B, H, Sq, 256];\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v, slopes;\n"
    "}\n";

/* Head dim 256 where the backward template is the portable one: the
 * module is refused when it is compiled, with a message naming the head
 * dims. Elsewhere (sm_90a): every case, the deterministic mode refused. */
/* On the portable backward's pass: the head dim 256 module `name` must be
 * refused, naming the head dimensions (true: the pass is that one). */
static bool refused_by_sm80(attn_context *ctx, const char *name, const char *text, size_t len) {
  if (strcmp(bwd_template_tag, "sm80") != 0) return false;
  attn_module *mod = NULL;
  attn_status st = gpu_compile_string(ctx, name, text, len, &mod);
  const char *msg = attn_context_error(ctx);
  StrBuf what = {0};
  sb_printf(&what, "%s is refused by the portable backward (head dim 256)", name);
  verdict(st != ATTN_SUCCESS && strstr(msg, "head dimensions"), what.data, msg);
  sb_free(&what);
  attn_module_destroy(mod);
  return true;
}

static void test_d256(attn_context *ctx, const char *name, const char *text, size_t len,
                      uint64_t *seed) {
  if (!refused_by_sm80(ctx, name, text, len))
    test_module_det(ctx, name, text, len, seed, 0, false);
}

/* The FP8 backward (a grad block; either template, its MMAs in bf16 over
 * 16-bit copies of the FP8 tensors): FP8 q, k, v
 * with descales, GQA (convert_kv stores dK and dV through the block), a
 * causal mask and dropout before P's rounding, dO in e4m3 with a descale,
 * dS rounded to e4m3 with a scale, bf16 and f32 gradients, amax of dS, dq
 * and dv. */
static const char fp8_gqa_src[] =
    "attention fp8_gqa {\n"
    "  input q : e4m3[B, H, Sq, 64];\n"
    "  input k : e4m3[B, Hk, Skv, 64];\n"
    "  input v : e4m3[B, Hk, Skv, 64];\n"
    "  scalar descale_q : f32 = 0.5;\n"
    "  scalar descale_v : f32 = 2.0;\n"
    "  scalar seed : u64 = 7;\n"
    "  s = mask((q @ k^T) * (0.125 * descale_q), j <= i + Skv - Sq);\n"
    "  p = softmax(s);\n"
    "  out = (e4m3(dropout(p, 0.1, seed, 0) * 448.0) @ v) * (descale_v / 448.0);\n"
    "  output o : bf16[B, H, Sq, 64] = out;\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v {\n"
    "    input do : e4m3;\n"
    "    do = do * 0.25;\n"
    "    output amax_dp = amax(ds);\n"
    "    ds = e4m3(ds * 256.0) / 256.0;\n"
    "    output dq : bf16;\n"
    "    output dk : bf16 = dk * 2.0;\n"
    "    output dv : f32;\n"
    "    output amax_dq = amax(dq);\n"
    "    output amax_dv = amax(dv);\n"
    "  }\n"
    "}\n";

/* Head dim 256 (bwd_sm90's split-D mode; refused by bwd_sm80): FP8 q, k,
 * v, o in e4m3 with a scale, dO in e5m2, dS in e5m2, gradients in e4m3,
 * bf16 and e5m2 with scales, amax of dS (before its rounding), dk and dv. */
static const char fp8_d256_src[] =
    "attention fp8_d256 {\n"
    "  input q : e4m3[B, H, Sq, 256];\n"
    "  input k : e4m3[B, H, Skv, 256];\n"
    "  input v : e4m3[B, H, Skv, 256];\n"
    "  scalar descale_k : f32 = 0.5;\n"
    "  scalar scale_o : f32 = 4.0;\n"
    "  s = (q @ k^T) * (0.0625 * descale_k);\n"
    "  p = softmax(s);\n"
    "  out = (e4m3(p * 448.0) @ v) / 448.0;\n"
    "  output o : e4m3[B, H, Sq, 256] = out * scale_o;\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v {\n"
    "    input do : e5m2;\n"
    "    do = do * 0.5;\n"
    "    output amax_ds = amax(ds);\n"
    "    ds = e5m2(ds * 1024.0) / 1024.0;\n"
    "    output dq : e4m3 = dq * 8.0;\n"
    "    output dk : bf16;\n"
    "    output dv : e5m2 = dv * 2.0;\n"
    "    output amax_dk = amax(dk);\n"
    "    output amax_dv = amax(dv);\n"
    "  }\n"
    "}\n";

/* bwd_sm90's FP8 tensor-core mode (the sm90f8 pass, ATTN_OPTION_BACKWARD_
 * TEMPLATE 91): head dims 128 with GQA, dropout and a sliding window, q in
 * e5m2 against e4m3 k and v, dO and dS in e4m3, P in e5m2, gradients in
 * bf16, f32 and e4m3, amax of dS, dk and dv. With examples/fp8_train.attn
 * (causal, e5m2 dO and dS) it covers every operand kind of its products. */
static const char fp8_mma_src[] =
    "attention fp8_mma {\n"
    "  input q : e5m2[B, H, Sq, 128];\n"
    "  input k : e4m3[B, Hk, Skv, 128];\n"
    "  input v : e4m3[B, Hk, Skv, 128];\n"
    "  scalar descale_q : f32 = 0.25;\n"
    "  scalar seed : u64 = 11;\n"
    "  s = (q @ k^T) * (0.088 * descale_q);\n"
    "  s = mask(s, j <= i + Skv - Sq && j > i + Skv - Sq - 96);\n"
    "  p = softmax(s);\n"
    "  out = (e5m2(dropout(p, 0.125, seed, 3) * 49152.0) @ v) / 49152.0;\n"
    "  output o : bf16[B, H, Sq, 128] = out;\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v {\n"
    "    input do : e4m3;\n"
    "    do = do * 0.5;\n"
    "    output amax_ds = amax(ds);\n"
    "    ds = e4m3(ds * 4096.0) / 4096.0;\n"
    "    output dq : f32;\n"
    "    output dk : e4m3 = dk * 16.0;\n"
    "    output dv : bf16;\n"
    "    output amax_dk = amax(dk);\n"
    "    output amax_dv = amax(dv);\n"
    "  }\n"
    "}\n";

/* A 16-bit graph with an f32 o: dO takes the inputs' type (the signature's
 * and the reference's), which bwd_sm90's tensor map of dO must say too (it
 * said o's f32 until session 24). */
static const char f32_out_src[] =
    "attention f32_out {\n"
    "  input q : bf16[B, H, Sq, 64];\n"
    "  input k : bf16[B, Hk, Skv, 64];\n"
    "  input v : bf16[B, Hk, Skv, 64];\n"
    "  s = mask((q @ k^T) * 0.125, j <= i);\n"
    "  output o : f32[B, H, Sq, 64] = softmax(s) @ v;\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v;\n"
    "}\n";

/* An amax of dS at D 96 on 16-bit tensors, causal (bwd_sm90 keeps each
 * tile's maximum in a shared word, bwd90_amax_ds_shared: ptxas serialized
 * the register form's wgmma here), with a scaled dO and dS. */
static const char amax_ds_d96_src[] =
    "attention amax_ds_d96 {\n"
    "  input q : bf16[B, H, Sq, 96];\n"
    "  input k : bf16[B, Hk, Skv, 96];\n"
    "  input v : bf16[B, Hk, Skv, 96];\n"
    "  s = mask((q @ k^T) * 0.102, j <= i + Skv - Sq);\n"
    "  output o : bf16[B, H, Sq, 96] = softmax(s) @ v;\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v {\n"
    "    do = do * 0.25;\n"
    "    output amax_ds = amax(ds);\n"
    "    output amax_ds2 = amax(ds * 3.0);\n"
    "    output dq : f32 = dq * 2.0;\n"
    "  }\n"
    "}\n";

/* A grad block on 16-bit tensors: the FP8 backward's hooks without the
 * copies (dO's descale, dS rounded to bf16, a stored scale). */
static const char block_bf16_src[] =
    "attention block_bf16 {\n"
    "  input q : bf16[B, H, Sq, 128];\n"
    "  input k : bf16[B, Hk, Skv, 128];\n"
    "  input v : bf16[B, Hk, Skv, 128];\n"
    "  s = (q @ k^T) * 0.088;\n"
    "  output o : bf16[B, H, Sq, 128] = softmax(s) @ v;\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v {\n"
    "    do = do * 3.0;\n"
    "    ds = bf16(ds);\n"
    "    output dq : f32 = dq * 0.5;\n"
    "    output amax_dk = amax(dk);\n"
    "  }\n"
    "}\n";

/* A bias read transposed: its gradient has no place in the kernels. */
static const char bias_transposed_src[] =
    "attention bias_transposed {\n"
    "  input q : bf16[B, H, S, 64];\n"
    "  input k : bf16[B, H, S, 64];\n"
    "  input v : bf16[B, H, S, 64];\n"
    "  input bias : f32[S, S];\n"
    "  s = (q @ k^T) * 0.125 + bias[j, i];\n"
    "  o = softmax(s) @ v;\n"
    "  output o : bf16[B, H, S, 64];\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v, bias;\n"
    "}\n";

/* No grad: launch_backward refuses with a message. */
static void test_no_grad(attn_context *ctx) {
  static const char src[] =
      "attention plain {\n"
      "  input q : bf16[B, H, S, 64];\n  input k : bf16[B, H, S, 64];\n"
      "  input v : bf16[B, H, S, 64];\n"
      "  o = softmax((q @ k^T) * 0.125) @ v;\n  output o : bf16[B, H, S, 64];\n}\n";
  attn_module *mod = NULL;
  attn_graph *ag = NULL;
  attn_call *call = NULL;
  attn_status st = gpu_compile_string(ctx, "plain", src, sizeof src - 1, &mod);
  if (st == ATTN_SUCCESS) st = attn_module_get_graph(mod, NULL, &ag);
  if (st == ATTN_SUCCESS) st = attn_call_create(ag, &call);
  if (st == ATTN_SUCCESS) st = attn_call_launch_backward(call, NULL);
  verdict(st == ATTN_ERROR_UNSUPPORTED && strstr(attn_context_error(ctx), "grad"),
          "a graph without grad has no backward", attn_context_error(ctx));
  attn_call_destroy(call);
  attn_module_destroy(mod);
}

/* Packed variable-length batches (bwd80_packed_view): end-aligned causal
 * with GQA, a sink's gradient with dropout and one offsets tensor for q, k
 * and v, a window at D 80 in f16; each at several batches (many short
 * sequences, a few long ones, one query a sequence against long keys),
 * with the reference's random offsets and fwd_case.h's patterns (empty
 * sequences, the last 100x the others, offsets out of range), and
 * deterministic mode once per graph. */
static const char packed_src[] =
    "attention packed_causal_gqa {\n"
    "  input q : bf16[Tq, H, 128];\n  input k : bf16[Tk, Hk, 128];\n"
    "  input v : bf16[Tk, Hk, 128];\n  input cq : i32[B1];\n  input ck : i32[B1];\n"
    "  s = mask((packed(q, cq) @ packed(k, ck)^T) * 0.088, j <= i + seqlen_k - seqlen_q);\n"
    "  o = softmax(s) @ packed(v, ck);\n"
    "  output o : bf16[Tq, H, 128];\n  output lse = logsumexp(s);\n"
    "  grad q, k, v;\n}\n"
    "attention packed_sink_dropout {\n"
    "  input q : bf16[T, H, 64];\n  input k : bf16[T, H, 64];\n  input v : bf16[T, H, 64];\n"
    "  input cu : i32[B1];\n  input sinks : f32[H];\n  scalar seed : u64 = 7;\n"
    "  sk = sinks[h];\n"
    "  s = mask((packed(q, cu) @ packed(k, cu)^T) * 0.125, j <= i);\n"
    "  p = dropout(softmax(s, sk), 0.2, seed, 11);\n"
    "  o = p @ packed(v, cu);\n"
    "  output o : bf16[T, H, 64];\n  output lse = logsumexp(s, sk);\n"
    "  grad q, k, v, sinks;\n}\n"
    "attention packed_window_f16 {\n"
    "  input q : f16[T, H, 80];\n  input k : f16[T, Hk, 80];\n  input v : f16[T, Hk, 80];\n"
    "  input cu : i32[B1];\n"
    "  s = mask((packed(q, cu) @ packed(k, cu)^T) * 0.11, j <= i && i - j < 100);\n"
    "  o = softmax(s) @ packed(v, cu);\n"
    "  output o : f16[T, H, 80];\n  output lse = logsumexp(s);\n"
    "  grad q, k, v;\n}\n";

/* Head dim 256 with sequences: bwd_sm90's split-D mode (one CTA per
 * 64-key tile of a sequence); the portable backward refuses it, and
 * deterministic mode does not exist at 256. */
static const char packed_d256_src[] =
    "attention packed_d256 {\n"
    "  input q : bf16[Tq, H, 256];\n  input k : bf16[Tk, Hk, 256];\n"
    "  input v : bf16[Tk, Hk, 256];\n  input cq : i32[B1];\n  input ck : i32[B1];\n"
    "  s = mask((packed(q, cq) @ packed(k, ck)^T) * 0.0625, j <= i + seqlen_k - seqlen_q);\n"
    "  o = softmax(s) @ packed(v, ck);\n"
    "  output o : bf16[Tq, H, 256];\n  output lse = logsumexp(s);\n"
    "  grad q, k, v;\n}\n";

/* argv[1], when given, keeps only the examples whose file name contains it
 * (and skips the built-in graphs), for a quick look at one feature;
 * "packed" runs the packed graphs, "packed_NAME" those whose name
 * contains it. */
static const char *only;

static void test_packed(attn_context *ctx, uint64_t *seed, const char *name, const char *text,
                        size_t len, bool det_ok) {
  /* (!det_ok: the head dim 256 module, which the portable backward refuses) */
  if (!det_ok && refused_by_sm80(ctx, name, text, len))
    return;
  attn_module *mod = NULL;
  attn_status st = gpu_compile_string(ctx, name, text, len, &mod);
  if (st != ATTN_SUCCESS) {
    StrBuf what = {0};
    sb_printf(&what, "%s compiles", name);
    verdict(false, what.data, attn_context_error(ctx));
    sb_free(&what);
    return;
  }
  Arena *a = arena_new();
  Diag d = {0};
  Source *src = source_from_string(a, name, text, len);
  IrModule *m = ir_build(parse_source(src, a, &d), a, &d);
  /* sequences, H, Hk, query and key tokens a sequence on average */
  static const int shapes[][5] = {{6, 4, 2, 150, 170}, {3, 4, 1, 700, 400}, {40, 2, 2, 33, 33},
                                  {5, 2, 2, 1, 300}};
  static const int patterns[3] = {0, 1, 2};
  StrBuf spec = {0};
  for (int k = 0; m && !d.nerrors && k < m->ngraphs; k++) {
    const IrGraph *g = m->graphs[k];
    if (only && strcmp(only, "packed") && !strstr(g->name, only))
      continue; /* argv[1] naming one packed graph (packed_window, ...) */
    attn_graph *ag;
    BwdGraph *bg = bwd_derive(g, a, &d);
    if (!bg || attn_module_get_graph(mod, g->name, &ag) != ATTN_SUCCESS) {
      verdict(false, g->name, bg ? attn_context_error(ctx) : d.out.data);
      continue;
    }
    /* One offsets tensor for q and k: the last shape's one-token
     * sequences would have a dq exactly 0 in exact arithmetic (a single key
     * has P = 1, so dS = dP - delta = 0), which no relative error measures. */
    const bool shared = g->tensors[g->q].seq_offsets == g->tensors[g->k].seq_offsets;
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0] - (shared ? 1 : 0); sh++) {
      const int *x = shapes[sh];
      chk_shape_spec(g, &spec, x[0], x[1], x[2], x[3], x[4]);
      const char *label = arena_printf(a, "packed %s", g->name);
      bwd_case(ctx, ag, g, bg, spec.data, (*seed)++, label, bwd_template_tag, 0, false);
      for (int pt = 0; pt < 3; pt++)
        bwd_case_filled(ctx, ag, g, bg, spec.data, (*seed)++,
                        arena_printf(a, "packed %s offsets pattern %d", g->name, pt),
                        bwd_template_tag, 0, false, fill_packed_offsets, &patterns[pt]);
      if (det_ok && (sh == 0 || sh == 1))
        bwd_case_filled(ctx, ag, g, bg, spec.data, (*seed)++,
                        arena_printf(a, "packed %s offsets pattern 1", g->name), bwd_template_tag,
                        0, true, fill_packed_offsets, &patterns[1]);
    }
  }
  if (d.nerrors) verdict(false, name, d.out.data);
  sb_free(&spec);
  diag_free(&d);
  arena_free(a);
  attn_module_destroy(mod);
}

static int by_name(const void *x, const void *y) {
  return strcmp(*(char *const *)x, *(char *const *)y);
}

static void run_all(attn_context *ctx);


int main(int argc, char **argv) {
  only = argc > 1 ? argv[1] : NULL;
  if (!gpu_test_driver()) return 0;
  attn_context *ctx = gpu_test_context();
  if (!ctx) return 1;
  const char *ctas = getenv("ATTN_PERSISTENT_CTAS");
  if (ctas && *ctas) attn_context_set_option(ctx, ATTN_OPTION_PERSISTENT_CTAS, atoll(ctas));
  /* Every case once per backward template (a compile option: each pass
   * compiles its own kernels). */
  /* (sm90bm80 and sm90bm80s, bwd_sm90's 80-query tiles while they are
   * measured: only when ATTN_BWD_TEMPLATE names them) */
  static const char *const tmpls[] = {"sm80", "sm90", "sm90f8", "sm90bm80", "sm90bm80s",
                                      "sm90bm80late"};
  static const int tmpl_option[] = {80, 90, 91, 93, 94, 95};
  const char *given = getenv("ATTN_BWD_TEMPLATE"); /* set: that pass alone */
  for (size_t pass = 0; pass < sizeof tmpls / sizeof tmpls[0]; pass++) {
    if (given && *given && strcmp(given, tmpls[pass])) continue;
    if ((!given || !*given) && tmpl_option[pass] >= 93) continue;
    bwd_template_tag = tmpls[pass];
    attn_context_set_option(ctx, ATTN_OPTION_BACKWARD_TEMPLATE, tmpl_option[pass]);
    run_all(ctx);
  }
  attn_context_destroy(ctx);
  rt_driver_release_primary(0);
  gpu_time_report();
  printf("backward: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}

/* Every example with grad, the graphs above, the refusals. */
static void run_all(attn_context *ctx) {
  uint64_t seed = 1;
  DIR *dir = opendir("examples");
  char *names[256];
  int n = 0;
  for (struct dirent *e; dir && (e = readdir(dir)) && n < 256;) {
    size_t len = strlen(e->d_name);
    if (len > 5 && !strcmp(e->d_name + len - 5, ".attn") && (!only || strstr(e->d_name, only)) &&
        (strcmp(bwd_template_tag, "sm90f8") || strstr(e->d_name, "fp8")))
      names[n++] = strdup(e->d_name);
  }
  if (dir) closedir(dir);
  qsort(names, (size_t)n, sizeof *names, by_name);
  for (int k = 0; k < n; k++) {
    char path[512];
    snprintf(path, sizeof path, "examples/%s", names[k]);
    test_example(ctx, path, &seed);
    free(names[k]);
  }
  if ((!only || !strncmp(only, "packed", 6)) && strcmp(bwd_template_tag, "sm90f8")) {
    test_packed(ctx, &seed, "packed_bwd", packed_src, sizeof packed_src - 1, true);
    test_packed(ctx, &seed, "packed_d256", packed_d256_src, sizeof packed_d256_src - 1, false);
  }
  if (!only || !strncmp(only, "fp8", 3)) { /* the FP8 backward's (test_backward fp8) */
    test_module(ctx, "fp8_gqa", fp8_gqa_src, sizeof fp8_gqa_src - 1, &seed, 0);
    test_module(ctx, "block_bf16", block_bf16_src, sizeof block_bf16_src - 1, &seed, 0);
    test_module(ctx, "amax_ds_d96", amax_ds_d96_src, sizeof amax_ds_d96_src - 1, &seed, 0);
    test_d256(ctx, "fp8_d256", fp8_d256_src, sizeof fp8_d256_src - 1, &seed);
    test_module(ctx, "fp8_mma", fp8_mma_src, sizeof fp8_mma_src - 1, &seed, 0);
  }
  /* The FP8 tensor-core mode's pass runs the FP8 graphs alone (the others
   * compile as in the sm90 pass). */
  if (!strcmp(bwd_template_tag, "sm90f8")) return;
  if (!only || !strcmp(only, "f32_out"))
    test_module(ctx, "f32_out", f32_out_src, sizeof f32_out_src - 1, &seed, 0);
  if (!only || !strcmp(only, "d128"))
    test_module(ctx, "d128", d128_src, sizeof d128_src - 1, &seed, 0);
  if (only) return;
  test_module(ctx, "masked_rows", masked_rows_src, sizeof masked_rows_src - 1, &seed, 64);
  test_module(ctx, "dropout_grad", dropout_src, sizeof dropout_src - 1, &seed, 0);
  test_module(ctx, "bias_bcast", bias_bcast_src, sizeof bias_bcast_src - 1, &seed, 0);
  test_module(ctx, "slopes_grad", slopes_src, sizeof slopes_src - 1, &seed, 0);
  test_module(ctx, "bias_transposed", bias_transposed_src, sizeof bias_transposed_src - 1, &seed,
              0);
  test_d256(ctx, "d256_bias", d256_bias_src, sizeof d256_bias_src - 1, &seed);
  test_d256(ctx, "d256_softcap_dropout", d256_softcap_dropout_src,
            sizeof d256_softcap_dropout_src - 1, &seed);
  test_no_grad(ctx);
}
