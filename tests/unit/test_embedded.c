/* test_embedded.c: attn_module_load_embedded's lookup, without a GPU.
 *
 * The images here are not real cubins: with no driver the module never
 * loads them, so these tests check which image the lookup picks for a
 * target (attn_context_set_arch), the path it reports, the per-context
 * module, and the fall back to NVRTC when the images cannot be used. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

static const char src[] =
    "attention sdpa {\n"
    "  input  q : bf16[B, H, Sq, 128];\n"
    "  input  k : bf16[B, H, Skv, 128];\n"
    "  input  v : bf16[B, H, Skv, 128];\n"
    "  scalar scale : f32 = 1.0 / sqrt(128.0);\n"
    "  o = softmax((q @ k^T) * scale) @ v;\n"
    "  output o : bf16[B, H, Sq, 128];\n"
    "}\n";
static const unsigned char fake_cubin[] = {0x7f, 'E', 'L', 'F', 0};
static const unsigned char fake_ptx[] = ".version 8.0\n";
static const char kern[] =
    "attnc-plan 4\ngraph sdpa sep=0,0,0,0 decode=0 wave=0\npass forward det=0 need=-\n"
    "  step forward entry=attn_sdpa_fwd threads=128 smem=0 grid=Sq/64,H,B persistent=0 need=- deny=-\n"
    "end\n";
static const attn_embedded_image images[] = {
    {"sm_80", 0, fake_cubin, sizeof fake_cubin, kern},
    {"sm_90a", 0, fake_cubin, sizeof fake_cubin, kern},
    {"sm_90", 1, fake_ptx, sizeof fake_ptx, kern},
};
static attn_embedded em = {ATTN_EMBEDDED_FORMAT, ATTN_ABI_VERSION,
                           ATTNC_VERSION, "sdpa.attn", src, sizeof src - 1,
                           images, 3};

static attn_context *ctx;

static void setup(void) {
  setenv("ATTN_NO_CACHE", "1", 1);
  cr_assert_eq(attn_context_create(&ctx), ATTN_SUCCESS);
}
static void teardown(void) { attn_context_destroy(ctx); }

TestSuite(embedded, .init = setup, .fini = teardown);

/* Loads em for target; returns the module (caller destroys). */
static attn_module *load_for(const char *target, const attn_embedded *e) {
  cr_assert_eq(attn_context_set_arch(ctx, target), ATTN_SUCCESS, "%s",
               attn_context_error(ctx));
  attn_module *m = NULL;
  attn_status st = attn_module_load_embedded(ctx, e, &m);
  cr_assert_eq(st, ATTN_SUCCESS, "%s: %s", target, attn_context_error(ctx));
  return m;
}

Test(embedded, exact_cubin_first) {
  attn_module *m = load_for("sm_90a", &em);
  cr_assert_eq(attn_module_source_kind(m), ATTN_FROM_EMBEDDED);
  cr_assert_str_eq(attn_module_arch(m), "sm_90a");
  cr_assert_eq(attn_module_graph_count(m), 1);
  cr_assert_str_eq(attn_module_graph_name(m, 0), "sdpa");
  attn_module_destroy(m);
}

Test(embedded, same_major_cubin_serves_newer_minor) {
  attn_module *m = load_for("sm_86", &em);
  cr_assert_eq(attn_module_source_kind(m), ATTN_FROM_EMBEDDED);
  cr_assert_str_eq(attn_module_arch(m), "sm_80");
  attn_module_destroy(m);
}

Test(embedded, newer_gpu_gets_ptx) {
  attn_module *m = load_for("sm_100a", &em);
  cr_assert_eq(attn_module_source_kind(m), ATTN_FROM_EMBEDDED_PTX);
  cr_assert_str_eq(attn_module_arch(m), "sm_90");
  attn_module_destroy(m);
}

Test(embedded, arch_specific_cubin_only_on_its_target) {
  /* sm_90 (no 'a') must not take the sm_90a cubin; the PTX fits. */
  attn_module *m = load_for("sm_90", &em);
  cr_assert_eq(attn_module_source_kind(m), ATTN_FROM_EMBEDDED_PTX);
  attn_module_destroy(m);
}

Test(embedded, other_version_falls_back_to_nvrtc_then_cache) {
  attn_embedded old = em;
  old.attnc_version = "0.0.1";
  attn_module *m = load_for("sm_80", &old);
  cr_assert_eq(attn_module_source_kind(m), ATTN_FROM_NVRTC);
  cr_assert(strstr(attn_context_warning(ctx), "attnc 0.0.1"), "%s",
            attn_context_warning(ctx));
  attn_module_destroy(m);
  m = load_for("sm_80", &old); /* the context's in-memory cache */
  cr_assert_eq(attn_module_source_kind(m), ATTN_FROM_CACHE);
  attn_module_destroy(m);
}

Test(embedded, context_keeps_one_module_per_embedded) {
  cr_assert_eq(attn_context_set_arch(ctx, "sm_80"), ATTN_SUCCESS);
  attn_module *a = NULL, *b = NULL;
  cr_assert_eq(attn_context_embedded_module(ctx, &em, &a), ATTN_SUCCESS);
  cr_assert_eq(attn_context_embedded_module(ctx, &em, &b), ATTN_SUCCESS);
  cr_assert_eq(a, b);
  attn_context *other;
  cr_assert_eq(attn_context_create(&other), ATTN_SUCCESS);
  cr_assert_eq(attn_context_set_arch(other, "sm_80"), ATTN_SUCCESS);
  attn_module *c = NULL;
  cr_assert_eq(attn_context_embedded_module(other, &em, &c), ATTN_SUCCESS);
  cr_assert_neq(a, c);
  attn_context_destroy(other); /* destroys c */
}

Test(embedded, bad_format_and_bad_source) {
  attn_embedded bad = em;
  bad.format = 99;
  attn_module *m = NULL;
  cr_assert_eq(attn_context_set_arch(ctx, "sm_80"), ATTN_SUCCESS);
  cr_assert_eq(attn_module_load_embedded(ctx, &bad, &m),
               ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(attn_context_error(ctx), "format 99"));
  bad = em;
  bad.source = "attention {";
  bad.source_len = strlen(bad.source);
  cr_assert_eq(attn_module_load_embedded(ctx, &bad, &m), ATTN_ERROR_SOURCE);
  cr_assert(strstr(attn_context_error(ctx), "sdpa.attn:1:"), "%s",
            attn_context_error(ctx));
  cr_assert_null(m);
}

Test(embedded, mismatched_plans_are_skipped) {
  /* Plans naming another graph cannot describe this source. */
  static const char wrong[] =
      "attnc-plan 4\ngraph other sep=0,0,0,0 decode=0 wave=0\npass forward det=0 need=-\n"
      "  step forward entry=e threads=128 smem=0 grid=Sq/64,H,B persistent=0 need=- deny=-\n"
      "end\n";
  static const attn_embedded_image im[] = {
      {"sm_80", 0, fake_cubin, sizeof fake_cubin, wrong}};
  attn_embedded e = em;
  e.images = im;
  e.nimages = 1;
  attn_module *m = load_for("sm_80", &e);
  cr_assert_eq(attn_module_source_kind(m), ATTN_FROM_NVRTC);
  attn_module_destroy(m);
}
