/* test_ring.c: what ring attention (runtime/ring.c) decides without a GPU:
 * the graphs it refuses, each with a message naming the rule, the bad
 * transports and layouts, and its kernels (templates/ring.cuh) compiling
 * with NVRTC for sm_80 and sm_90a. The ring itself runs in
 * tests/gpu/test_ring.c. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"
#include "unit_build.h"

static attn_context *ctx;

static void setup(void) {
  setenv("ATTN_NO_CACHE", "1", 1);
  cr_assert_eq(attn_context_create(&ctx), ATTN_SUCCESS);
}

static void teardown(void) { attn_context_destroy(ctx); }

TestSuite(ring, .init = setup, .fini = teardown);

static int never(void *user, int count, void *const *send, void *const *recv,
                 const size_t *bytes, void *stream, char *msg, size_t len) {
  return 1;
}

/* The graph's head and the given body, made into a module (not compiled:
 * the ring's refusals come before any kernel). */
static attn_module *module_of(const char *text) {
  Arena *a = arena_new();
  IrModule *ir = unit_build(a, "ring.attn", text);
  Compiled cm = unit_compile(a, ir, "sm_90a", STAGE_PLAN);
  StrBuf sb = {0};
  plan_write(&sb, cm.plans, cm.ngraphs);
  attn_module *m;
  cr_assert_eq(rt_module_from_ir(ctx, a, ir, sb.data, "sm_90a", NULL, 0, &m), ATTN_SUCCESS, "%s",
               attn_context_error(ctx));
  sb_free(&sb);
  return m;
}

/* attn_ring_create's status and message for a graph. */
static attn_status create(const char *text, attn_ring_layout layout, const attn_ring_transport *t,
                          const char *want) {
  attn_module *m = module_of(text);
  attn_graph *g;
  cr_assert_eq(attn_module_get_graph(m, "shard", &g), ATTN_SUCCESS);
  attn_ring *r = (attn_ring *)1;
  attn_status st = attn_ring_create(g, t, layout, &r);
  cr_assert_null(r, "a failed create gives no ring");
  if (want)
    cr_assert_not_null(strstr(attn_context_error(ctx), want), "want '%s' in: %s", want,
                       attn_context_error(ctx));
  attn_module_destroy(m);
  return st;
}

#define GRAPH(q_decl, mask, outputs)                                                       \
  "attention shard {\n"                                                                    \
  "  input q : " q_decl ";\n"                                                              \
  "  input k : bf16[B, Hk, Skv, 64];\n"                                                    \
  "  input v : bf16[B, Hk, Skv, 64];\n"                                                    \
  "  scalar q0 : i32 = 0;\n"                                                               \
  "  scalar k0 : i32 = 0;\n"                                                               \
  "  s = mask((q @ k^T) * 0.125, " mask ");\n"                                             \
  "  o = softmax(s) @ v;\n"                                                                \
  "  output o : bf16[B, H, Sq, 64];\n" outputs "}\n"

static const attn_ring_transport two = {0, 2, never, NULL};

Test(ring, refuses_a_graph_without_lse) {
  cr_assert_eq(create(GRAPH("bf16[B, H, Sq, 64]", "j + k0 <= i + q0", ""), ATTN_RING_ZIGZAG, &two,
                      "`output lse = logsumexp(s)`"),
               ATTN_ERROR_UNSUPPORTED);
}

Test(ring, refuses_a_graph_without_the_positions) {
  const char *text = "attention shard {\n"
                     "  input q : bf16[B, H, Sq, 64];\n"
                     "  input k : bf16[B, Hk, Skv, 64];\n"
                     "  input v : bf16[B, Hk, Skv, 64];\n"
                     "  scalar q0 : i32 = 0;\n"
                     "  s = mask((q @ k^T) * 0.125, j <= i + q0);\n"
                     "  o = softmax(s) @ v;\n"
                     "  output o : bf16[B, H, Sq, 64];\n"
                     "  output lse = logsumexp(s);\n"
                     "}\n";
  cr_assert_eq(create(text, ATTN_RING_CONTIGUOUS, &two, "an i32 scalar 'k0'"),
               ATTN_ERROR_UNSUPPORTED);
}

Test(ring, refuses_a_literal_sequence_length) {
  const char *text = "attention shard {\n"
                     "  input q : bf16[B, H, 128, 64];\n"
                     "  input k : bf16[B, Hk, Skv, 64];\n"
                     "  input v : bf16[B, Hk, Skv, 64];\n"
                     "  scalar q0 : i32 = 0;\n"
                     "  scalar k0 : i32 = 0;\n"
                     "  s = mask((q @ k^T) * 0.125, j + k0 <= i + q0);\n"
                     "  o = softmax(s) @ v;\n"
                     "  output o : bf16[B, H, 128, 64];\n"
                     "  output lse = logsumexp(s);\n"
                     "}\n";
  cr_assert_eq(create(text, ATTN_RING_CONTIGUOUS, &two, "named dimension"),
               ATTN_ERROR_UNSUPPORTED);
}

Test(ring, refuses_bad_transports_and_layouts) {
  const char *ok = GRAPH("bf16[B, H, Sq, 64]", "j + k0 <= i + q0", "  output lse = logsumexp(s);\n");
  const attn_ring_transport no_fn = {0, 2, NULL, NULL}, bad_rank = {2, 2, never, NULL},
                            no_world = {0, 0, never, NULL};
  cr_assert_eq(create(ok, ATTN_RING_ZIGZAG, NULL, "exchange function"), ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(create(ok, ATTN_RING_ZIGZAG, &no_fn, "exchange function"), ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(create(ok, ATTN_RING_ZIGZAG, &bad_rank, "rank < world"), ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(create(ok, ATTN_RING_ZIGZAG, &no_world, "rank < world"), ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(create(ok, (attn_ring_layout)7, &two, "layout 7"), ATTN_ERROR_INVALID_ARGUMENT);
  /* A graph the ring takes gets as far as the driver here: none. */
  attn_status st = create(ok, ATTN_RING_ZIGZAG, &two, NULL);
  cr_assert(st == ATTN_ERROR_NO_DRIVER || st == ATTN_ERROR_CUDA, "status %d: %s", (int)st,
            attn_context_error(ctx));
}

Test(ring, nccl_needs_a_communicator) {
  attn_module *m = module_of(GRAPH("bf16[B, H, Sq, 64]", "j + k0 <= i + q0", "  output lse = logsumexp(s);\n"));
  attn_graph *g;
  cr_assert_eq(attn_module_get_graph(m, "shard", &g), ATTN_SUCCESS);
  attn_ring *r;
  cr_assert_eq(attn_ring_create_nccl(g, NULL, ATTN_RING_ZIGZAG, &r), ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_null(r);
  cr_assert_not_null(strstr(attn_context_error(ctx), "communicator"), "%s", attn_context_error(ctx));
  /* A library that is not NCCL: refused by name, nothing called. */
  setenv("ATTN_NCCL", "/nonexistent/libnccl.so.2", 1);
  attn_status st = attn_ring_create_nccl(g, (void *)16, ATTN_RING_ZIGZAG, &r);
  unsetenv("ATTN_NCCL");
  cr_assert_eq(st, ATTN_ERROR_UNSUPPORTED, "%s", attn_context_error(ctx));
  cr_assert_not_null(strstr(attn_context_error(ctx), "libnccl not found"), "%s",
                     attn_context_error(ctx));
  attn_module_destroy(m);
}

Test(ring, null_arguments) {
  cr_assert_eq(attn_ring_forward(NULL, NULL), ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(attn_ring_backward(NULL, NULL), ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(attn_ring_bind_i32(NULL, "x", 1), ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(attn_ring_create(NULL, &two, ATTN_RING_ZIGZAG, NULL), ATTN_ERROR_INVALID_ARGUMENT);
  attn_ring_destroy(NULL);
}

Test(ring, kernels_compile_for_each_target) {
  StrBuf why = {0};
  if (!nvrtc_available(&why)) {
    cr_log_warn("NVRTC not available: %s", why.data);
    sb_free(&why);
    cr_skip_test();
  }
  const char *archs[] = {"sm_80", "sm_90a"};
  for (int i = 0; i < 2; i++) {
    NvrtcOptions o;
    nvrtc_options(&o, archs[i], true);
    NvrtcOutput nv;
    cr_assert_eq(nvrtc_compile(ring_src, "attnc_ring.cu", &o, false, &nv, &why), ATTN_SUCCESS,
                 "%s", why.data ? why.data : "");
    cr_assert(nv.cubin_len > 64 && memcmp(nv.cubin, "\x7f" "ELF", 4) == 0);
    nvrtc_output_free(&nv);
  }
  sb_free(&why);
}

Test(ring, merge_partials_checks_its_arguments) {
  const void *o[17] = {0};
  const float *l[17] = {0};
  static float dummy[4];
  for (int i = 0; i < 17; i++) {
    o[i] = dummy;
    l[i] = dummy;
  }
  cr_assert_eq(attn_merge_partials(NULL, 1, o, l, ATTN_BF16, 1, 1, dummy, ATTN_BF16, NULL, NULL),
               ATTN_ERROR_INVALID_ARGUMENT);
  struct {
    int n;
    const void *const *o;
    const float *const *l;
    attn_dtype pt, ot;
    int64_t rows;
    const char *want;
  } bad[] = {
      {0, o, l, ATTN_BF16, ATTN_BF16, 4, "0 parts"},
      {17, o, l, ATTN_BF16, ATTN_BF16, 4, "1 to 16"},
      {2, NULL, l, ATTN_BF16, ATTN_BF16, 4, "o_parts is NULL"},
      {2, o, NULL, ATTN_BF16, ATTN_BF16, 4, "lse_parts is NULL"},
      {2, o, l, ATTN_E4M3, ATTN_BF16, 4, "f32, bf16 or f16"},
      {2, o, l, ATTN_BF16, ATTN_I32, 4, "f32, bf16 or f16"},
      {2, o, l, ATTN_BF16, ATTN_BF16, -1, "negative"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    cr_assert_eq(attn_merge_partials(ctx, bad[k].n, bad[k].o, bad[k].l, bad[k].pt, bad[k].rows, 8,
                                     dummy, bad[k].ot, NULL, NULL),
                 ATTN_ERROR_INVALID_ARGUMENT, "case %zu", k);
    cr_assert_not_null(strstr(attn_context_error(ctx), bad[k].want), "case %zu: %s", k,
                       attn_context_error(ctx));
  }
  const void *with_null[2] = {dummy, NULL};
  cr_assert_eq(attn_merge_partials(ctx, 2, with_null, l, ATTN_BF16, 4, 8, dummy, ATTN_BF16, NULL,
                                   NULL),
               ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(attn_context_error(ctx), "part 1 is NULL"), "%s", attn_context_error(ctx));
  /* Nothing to merge: done, with no driver needed. */
  cr_assert_eq(attn_merge_partials(ctx, 2, o, l, ATTN_BF16, 0, 8, dummy, ATTN_BF16, NULL, NULL),
               ATTN_SUCCESS);
  /* Good arguments get as far as the driver here: none. */
  attn_status st = attn_merge_partials(ctx, 2, o, l, ATTN_BF16, 4, 8, dummy, ATTN_F32, NULL, NULL);
  cr_assert(st == ATTN_ERROR_NO_DRIVER || st == ATTN_ERROR_CUDA, "status %d: %s", (int)st,
            attn_context_error(ctx));
}
