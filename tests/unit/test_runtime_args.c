/* test_runtime_args.c: libattn's argument checking, without a GPU.
 *
 * Most tests build the IR graph by hand and wrap it with rt_module_from_ir
 * (no NVRTC), so each check is exercised exactly; a few go through
 * attn_module_compile_string to cover the whole pipeline's statuses. */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "rt.h"
#include "unit_build.h"

/* ------------------------------------------------------------- fixture */

/* attention g {
 *   input q : bf16[B, H, Sq, D];   input k : bf16[B, Hk, Skv, D];
 *   input v : bf16[B, Hk, Skv, D]; input bias : f32[B, 1, Sq, Skv];
 *   scalar scale : f32 = 0.125;    scalar window : i32;
 *   scalar seed : u64 = 7;         scalar causal : bool = true;
 *   output o : bf16[B, H, Sq, D];
 * } */
enum { B, H, SQ, D, HK, SKV };
enum { Q, K, V, BIAS, O };

static attn_context *ctx;
static attn_module *mod;
static attn_graph *graph;
static attn_call *call;
static const IrGraph *ir_graph;

static void tensor(IrTensor *t, const char *name, DType type, int d0, int d1,
                   int d2, int d3) {
  int dims[4] = {d0, d1, d2, d3};
  t->name = name;
  t->type = type;
  t->ndims = 4;
  for (int i = 0; i < 4; i++) {
    t->dim_sym[i] = dims[i] >= 0 ? dims[i] : -1;
    t->dim_val[i] = dims[i] >= 0 ? 0 : -dims[i]; /* -1: the literal 1 */
  }
}

static IrModule *make_ir(Arena *a) {
  IrGraph *g = arena_alloc(a, sizeof *g);
  g->name = "g";
  static const char *dim_names[] = {"B", "H", "Sq", "D", "Hk", "Skv"};
  g->ndims = 6;
  g->dims = arena_alloc(a, sizeof *g->dims * 6);
  for (int i = 0; i < 6; i++) g->dims[i].name = dim_names[i];
  g->ntensors = 5;
  g->tensors = arena_alloc(a, sizeof *g->tensors * 5);
  tensor(&g->tensors[Q], "q", DT_BF16, B, H, SQ, D);
  tensor(&g->tensors[K], "k", DT_BF16, B, HK, SKV, D);
  tensor(&g->tensors[V], "v", DT_BF16, B, HK, SKV, D);
  tensor(&g->tensors[BIAS], "bias", DT_F32, B, -1, SQ, SKV);
  tensor(&g->tensors[O], "o", DT_BF16, B, H, SQ, D);
  g->tensors[O].is_output = true;
  g->q = Q;
  g->k = K;
  g->v = V;
  g->nscalars = 4;
  g->scalars = arena_alloc(a, sizeof *g->scalars * 4);
  g->scalars[0] = (IrScalar){.name = "scale", .type = DT_F32,
                             .has_default = true, .fdefault = 0.125};
  g->scalars[1] = (IrScalar){.name = "window", .type = DT_I32};
  g->scalars[2] = (IrScalar){.name = "seed", .type = DT_U64,
                             .has_default = true, .idefault = 7};
  g->scalars[3] = (IrScalar){.name = "causal", .type = DT_BOOL,
                             .has_default = true, .idefault = 1};
  IrModule *m = arena_alloc(a, sizeof *m);
  m->ngraphs = 1;
  m->graphs = arena_alloc(a, sizeof *m->graphs);
  m->graphs[0] = g;
  return m;
}

/* A forward plan for the hand-built graph (one kernel, as plan_write
 * writes it), and one with a backward whose deterministic mode is there
 * or not. */
#define PLAN_FWD                                                                                \
  "attnc-plan 4\ngraph g sep=0,0,0,0 decode=0 wave=0\npass forward det=0 need=-\n"                                    \
  "  step forward entry=attn_g_fwd threads=128 smem=0 grid=Sq/64,H,B persistent=0 need=- "       \
  "deny=-\n"
static const char plan_fwd[] = PLAN_FWD "end\n";
static const char *plan_bwd(bool det_ok) {
  return det_ok ? PLAN_FWD "pass backward det=1 need=-\n  step main entry=attn_g_bwd_main threads=128 "
                           "smem=0 grid=Skv/64,H,B persistent=0 need=- deny=-\nend\n"
                : PLAN_FWD "pass backward det=0 need=-\n  step main entry=attn_g_bwd_main threads=128 "
                           "smem=0 grid=Skv/64,H,B persistent=0 need=- deny=-\nend\n";
}

static void setup(void) {
  unsetenv("ATTN_CACHE_DIR");
  setenv("ATTN_NO_CACHE", "1", 1);
  cr_assert_eq(attn_context_create(&ctx), ATTN_SUCCESS);
  Arena *a = arena_new();
  IrModule *ir = make_ir(a);
  ir_graph = ir->graphs[0];
  cr_assert_eq(rt_module_from_ir(ctx, a, ir, plan_fwd, "sm_80", NULL, 0, &mod), ATTN_SUCCESS,
               "%s", attn_context_error(ctx));
  cr_assert_eq(attn_module_get_graph(mod, NULL, &graph), ATTN_SUCCESS);
  cr_assert_eq(attn_call_create(graph, &call), ATTN_SUCCESS);
}

static void teardown(void) {
  attn_call_destroy(call);
  attn_module_destroy(mod);
  attn_context_destroy(ctx);
}

TestSuite(runtime_args, .init = setup, .fini = teardown);

/* Fake, 16-byte aligned device addresses: nothing is dereferenced. */
#define PQ ((void *)0x100000)
#define PK ((void *)0x200000)
#define PV ((void *)0x300000)
#define PB ((void *)0x400000)
#define PO ((void *)0x500000)

static const int64_t q_shape[4] = {2, 8, 100, 64};
static const int64_t kv_shape[4] = {2, 2, 130, 64};
static const int64_t bias_shape[4] = {2, 1, 100, 130};

static attn_status bind4(const char *name, void *p, attn_dtype t,
                         const int64_t *shape, const int64_t *strides) {
  return attn_call_bind_tensor(call, name, p, t, 4, shape, strides);
}

static void bind_all(void) {
  cr_assert_eq(bind4("q", PQ, ATTN_BF16, q_shape, NULL), ATTN_SUCCESS, "%s",
               attn_context_error(ctx));
  cr_assert_eq(bind4("k", PK, ATTN_BF16, kv_shape, NULL), ATTN_SUCCESS, "%s",
               attn_context_error(ctx));
  cr_assert_eq(bind4("v", PV, ATTN_BF16, kv_shape, NULL), ATTN_SUCCESS, "%s",
               attn_context_error(ctx));
  cr_assert_eq(bind4("bias", PB, ATTN_F32, bias_shape, NULL), ATTN_SUCCESS,
               "%s", attn_context_error(ctx));
  cr_assert_eq(bind4("o", PO, ATTN_BF16, q_shape, NULL), ATTN_SUCCESS, "%s",
               attn_context_error(ctx));
}

static void expect_error(attn_status got, attn_status want,
                         const char *needle) {
  const char *msg = attn_context_error(ctx);
  cr_assert_eq(got, want, "status %d (%s), wanted %d: %s", got,
               attn_status_string(got), want, msg);
  cr_assert_not_null(strstr(msg, needle), "message lacks '%s': %s", needle,
                     msg);
}

static bool driver_present(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != NULL;
}

/* ----------------------------------------------------- a good binding */

Test(runtime_args, good_bindings_fill_the_parameter_block) {
  BindState b;
  bind_init(&b, ir_graph);
  StrBuf err = {0};
  int64_t q_strides[4] = {8 * 100 * 64, 64, 8 * 64, 1}; /* a BSHD view */
  cr_assert_eq(bind_tensor(&b, "q", PQ, ATTN_BF16, 4, q_shape, q_strides,
                           &err), ATTN_SUCCESS, "%s", err.data);
  cr_assert_eq(bind_tensor(&b, "k", PK, ATTN_BF16, 4, kv_shape, NULL, &err),
               ATTN_SUCCESS);
  cr_assert_eq(bind_tensor(&b, "v", PV, ATTN_BF16, 4, kv_shape, NULL, &err),
               ATTN_SUCCESS);
  cr_assert_eq(bind_tensor(&b, "bias", PB, ATTN_F32, 4, bias_shape, NULL,
                           &err), ATTN_SUCCESS);
  cr_assert_eq(bind_tensor(&b, "o", PO, ATTN_BF16, 4, q_shape, NULL, &err),
               ATTN_SUCCESS);
  attn_scalar_arg w = {0};
  w.i = 256;
  cr_assert_eq(bind_scalar(&b, "window", DT_I32, w, &err), ATTN_SUCCESS);
  cr_assert_eq(bind_finish(&b, &err), ATTN_SUCCESS, "%s", err.data);
  const attn_params *p = &b.params;
  cr_assert_eq(p->t[Q].ptr, PQ);
  cr_assert_eq(p->t[Q].stride[1], 64);
  cr_assert_eq(p->t[Q].stride[2], 512);
  cr_assert_eq(p->t[K].stride[0], 2 * 130 * 64);
  cr_assert_eq(p->t[K].stride[2], 64);
  cr_assert_eq(p->t[K].stride[3], 1);
  cr_assert_eq(p->t[BIAS].size[1], 1);
  cr_assert_eq(p->t[BIAS].stride[1], 0, "a literal 1 broadcasts");
  cr_assert_eq(p->t[BIAS].stride[2], 130);
  cr_assert_eq(p->t[O].size[2], 100);
  cr_assert_eq(p->t[5].size[0], 1, "unused slots: size 1");
  cr_assert_eq(p->t[5].stride[0], 0, "unused slots: stride 0");
  cr_assert_float_eq(p->s[0].f, 0.125f, 0, "default scale");
  cr_assert_eq(p->s[1].i, 256);
  cr_assert_eq(p->s[2].u, 7ull, "default seed");
  cr_assert_eq(p->s[3].i, 1, "default causal");
  cr_assert_eq(p->dim[B], 2);
  cr_assert_eq(p->dim[H], 8);
  cr_assert_eq(p->dim[SQ], 100);
  cr_assert_eq(p->dim[D], 64);
  cr_assert_eq(p->dim[HK], 2);
  cr_assert_eq(p->dim[SKV], 130);
  cr_assert_eq(p->B, 2);
  cr_assert_eq(p->H, 8);
  cr_assert_eq(p->Hk, 2);
  cr_assert_eq(p->Sq, 100);
  cr_assert_eq(p->Skv, 130);
  sb_free(&err);
}

Test(runtime_args, bound_scalars_override_defaults) {
  BindState b;
  bind_init(&b, ir_graph);
  StrBuf err = {0};
  bind_tensor(&b, "q", PQ, ATTN_BF16, 4, q_shape, NULL, &err);
  bind_tensor(&b, "k", PK, ATTN_BF16, 4, kv_shape, NULL, &err);
  bind_tensor(&b, "v", PV, ATTN_BF16, 4, kv_shape, NULL, &err);
  bind_tensor(&b, "bias", PB, ATTN_F32, 4, bias_shape, NULL, &err);
  bind_tensor(&b, "o", PO, ATTN_BF16, 4, q_shape, NULL, &err);
  attn_scalar_arg v = {0};
  v.f = 0.5f;
  cr_assert_eq(bind_scalar(&b, "scale", DT_F32, v, &err), ATTN_SUCCESS);
  v.u = 1ull << 40;
  cr_assert_eq(bind_scalar(&b, "seed", DT_U64, v, &err), ATTN_SUCCESS);
  v.u = 0;
  v.i = 0;
  cr_assert_eq(bind_scalar(&b, "causal", DT_BOOL, v, &err), ATTN_SUCCESS);
  cr_assert_eq(bind_scalar(&b, "window", DT_I32, v, &err), ATTN_SUCCESS);
  cr_assert_eq(bind_finish(&b, &err), ATTN_SUCCESS);
  cr_assert_float_eq(b.params.s[0].f, 0.5f, 0);
  cr_assert_eq(b.params.s[2].u, 1ull << 40);
  cr_assert_eq(b.params.s[3].i, 0);
  sb_free(&err);
}

/* ------------------------------------------------------------- names */

Test(runtime_args, unknown_names) {
  expect_error(bind4("qq", PQ, ATTN_BF16, q_shape, NULL), ATTN_ERROR_NOT_FOUND,
               "no tensor named 'qq'");
  cr_assert_not_null(strstr(attn_context_error(ctx), "q, k, v, bias, o"));
  expect_error(attn_call_bind_f32(call, "temperature", 1.0f),
               ATTN_ERROR_NOT_FOUND, "no scalar named 'temperature'");
  expect_error(bind4("scale", PQ, ATTN_BF16, q_shape, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "'scale' is a scalar");
  expect_error(attn_call_bind_f32(call, "q", 1.0f),
               ATTN_ERROR_INVALID_ARGUMENT, "'q' is a tensor");
  expect_error(bind4(NULL, PQ, ATTN_BF16, q_shape, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "name is NULL");
}

Test(runtime_args, graphs_by_name) {
  cr_assert_eq(attn_module_graph_count(mod), 1);
  cr_assert_str_eq(attn_module_graph_name(mod, 0), "g");
  cr_assert_null(attn_module_graph_name(mod, 1));
  attn_graph *g2;
  cr_assert_eq(attn_module_get_graph(mod, "g", &g2), ATTN_SUCCESS);
  cr_assert_eq(g2, graph);
  expect_error(attn_module_get_graph(mod, "h", &g2), ATTN_ERROR_NOT_FOUND,
               "no graph named 'h'");
  cr_assert_null(g2);
}

/* ----------------------------------------------------- tensor checks */

Test(runtime_args, wrong_dtype_or_rank) {
  expect_error(bind4("q", PQ, ATTN_F16, q_shape, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "declared bf16, bound as f16");
  expect_error(bind4("q", PQ, (attn_dtype)99, q_shape, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "unknown dtype 99");
  expect_error(attn_call_bind_tensor(call, "q", PQ, ATTN_BF16, 3, q_shape,
                                     NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "declared with 4 dimensions");
  expect_error(bind4("q", PQ, ATTN_BF16, NULL, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "shape is NULL");
}

Test(runtime_args, literal_dims) {
  int64_t bad[4] = {2, 8, 100, 130};
  expect_error(bind4("bias", PB, ATTN_F32, bad, NULL),
               ATTN_ERROR_INVALID_ARGUMENT,
               "dimension 1 is declared 1 but bound with size 8");
}

Test(runtime_args, dim_symbols_agree_across_tensors) {
  cr_assert_eq(bind4("q", PQ, ATTN_BF16, q_shape, NULL), ATTN_SUCCESS);
  int64_t bias_bad[4] = {2, 1, 99, 130};
  expect_error(bind4("bias", PB, ATTN_F32, bias_bad, NULL),
               ATTN_ERROR_INVALID_ARGUMENT,
               "dimension 2 (Sq) is 99, but tensor 'q' has Sq = 100");
  int64_t o_bad[4] = {3, 8, 100, 64};
  expect_error(bind4("o", PO, ATTN_BF16, o_bad, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "(B) is 3");
  int64_t k_bad[4] = {2, 2, 130, 32};
  expect_error(bind4("k", PK, ATTN_BF16, k_bad, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "(D) is 32");
  /* Rebinding a tensor replaces its old sizes rather than clashing. */
  int64_t q2[4] = {2, 8, 99, 64};
  cr_assert_eq(bind4("q", PQ, ATTN_BF16, q2, NULL), ATTN_SUCCESS, "%s",
               attn_context_error(ctx));
  cr_assert_eq(bind4("bias", PB, ATTN_F32, bias_bad, NULL), ATTN_SUCCESS);
}

Test(runtime_args, kv_heads_must_divide_query_heads) {
  cr_assert_eq(bind4("q", PQ, ATTN_BF16, q_shape, NULL), ATTN_SUCCESS);
  int64_t k3[4] = {2, 3, 130, 64};
  expect_error(bind4("k", PK, ATTN_BF16, k3, NULL),
               ATTN_ERROR_INVALID_ARGUMENT,
               "3 key/value heads, which does not divide the 8 query heads");
  int64_t k0[4] = {2, 0, 130, 64};
  expect_error(bind4("k", PK, ATTN_BF16, k0, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "does not divide");
}

Test(runtime_args, sizes_must_be_non_negative_ints) {
  int64_t neg[4] = {2, 8, -1, 64};
  expect_error(bind4("q", PQ, ATTN_BF16, neg, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "dimension 2 (Sq) is -1");
  int64_t huge[4] = {2, 8, (int64_t)INT_MAX + 1, 64};
  expect_error(bind4("q", PQ, ATTN_BF16, huge, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "is 2147483648");
}

Test(runtime_args, strides_must_be_sane) {
  int64_t neg[4] = {8 * 100 * 64, 100 * 64, -64, 1};
  expect_error(bind4("q", PQ, ATTN_BF16, q_shape, neg),
               ATTN_ERROR_INVALID_ARGUMENT, "stride -64");
  int64_t big[4] = {INT64_MAX / 2, 100 * 64, 64, 1};
  expect_error(bind4("q", PQ, ATTN_BF16, q_shape, big),
               ATTN_ERROR_INVALID_ARGUMENT, "more memory than exists");
  int64_t dense_huge[4] = {INT_MAX, INT_MAX, INT_MAX, INT_MAX};
  int64_t bshape[4] = {INT_MAX, 1, INT_MAX, INT_MAX};
  (void)dense_huge;
  expect_error(bind4("bias", PB, ATTN_F32, bshape, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "overflows");
}

Test(runtime_args, null_pointers) {
  expect_error(bind4("q", NULL, ATTN_BF16, q_shape, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "null pointer");
  int64_t empty[4] = {2, 8, 0, 64};
  cr_assert_eq(bind4("q", NULL, ATTN_BF16, empty, NULL), ATTN_SUCCESS,
               "an empty tensor needs no memory: %s",
               attn_context_error(ctx));
}

Test(runtime_args, vector_tensors_need_16_byte_layouts) {
  expect_error(bind4("q", (char *)PQ + 8, ATTN_BF16, q_shape, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "not 16-byte aligned");
  int64_t inner[4] = {8 * 100 * 128, 100 * 128, 128, 2};
  expect_error(bind4("k", PK, ATTN_BF16, kv_shape, inner),
               ATTN_ERROR_INVALID_ARGUMENT, "must be 1");
  int64_t rows[4] = {2 * 130 * 68, 130 * 68, 68, 1};
  expect_error(bind4("v", PV, ATTN_BF16, kv_shape, rows),
               ATTN_ERROR_INVALID_ARGUMENT,
               "stride 68; it must be a multiple of 8 elements");
  expect_error(bind4("o", (char *)PO + 2, ATTN_BF16, q_shape, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "not 16-byte aligned");
  /* Other tensors need element alignment only. */
  int64_t odd[4] = {100 * 131, 0, 131, 1};
  cr_assert_eq(bind4("bias", (char *)PB + 4, ATTN_F32, bias_shape, odd),
               ATTN_SUCCESS, "%s", attn_context_error(ctx));
  expect_error(bind4("bias", (char *)PB + 2, ATTN_F32, bias_shape, NULL),
               ATTN_ERROR_INVALID_ARGUMENT, "4-byte elements");
}

/* A packed graph's 3-D outputs ([tokens, heads, cols]) are vector tensors
 * too: fwd_sm90 stores a 16-bit O by TMA boxes and 16-byte bulk copies
 * (session 43); its [heads, tokens] lse is not. */
Test(runtime_args, packed_outputs_need_16_byte_layouts) {
  Arena *a = arena_new();
  IrModule *m = unit_build(a, "<packed>",
                           "attention g {\n  input q : bf16[T, H, 64];\n  input k : bf16[T, H, 64];\n"
                           "  input v : bf16[T, H, 64];\n  input cu : i32[B1];\n"
                           "  s = packed(q, cu) @ packed(k, cu)^T;\n"
                           "  o = softmax(s) @ packed(v, cu);\n"
                           "  output o : bf16[T, H, 64];\n  output lse = logsumexp(s);\n}\n");
  BindState b;
  bind_init(&b, m->graphs[0]);
  StrBuf err = {0};
  const int64_t shape[3] = {100, 8, 64}, lse_shape[2] = {8, 100};
  cr_assert_eq(bind_tensor(&b, "o", (char *)PO + 2, ATTN_BF16, 3, shape, NULL, &err),
               ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(err.data, "not 16-byte aligned"), "%s", err.data);
  const int64_t rows[3] = {8 * 68, 68, 1};
  sb_free(&err);
  cr_assert_eq(bind_tensor(&b, "o", PO, ATTN_BF16, 3, shape, rows, &err),
               ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(err.data, "multiple of 8 elements"), "%s", err.data);
  sb_free(&err);
  cr_assert_eq(bind_tensor(&b, "o", PO, ATTN_BF16, 3, shape, NULL, &err), ATTN_SUCCESS, "%s",
               err.data);
  cr_assert_eq(bind_tensor(&b, "lse", (char *)PB + 4, ATTN_F32, 2, lse_shape, NULL, &err),
               ATTN_SUCCESS, "%s", err.data);
  sb_free(&err);
  arena_free(a);
}

Test(runtime_args, outputs_cannot_broadcast) {
  int64_t s[4] = {8 * 100 * 64, 0, 64, 1};
  expect_error(bind4("o", PO, ATTN_BF16, q_shape, s),
               ATTN_ERROR_INVALID_ARGUMENT, "outputs cannot broadcast");
}

Test(runtime_args, failed_bind_keeps_the_previous_binding) {
  BindState b;
  bind_init(&b, ir_graph);
  StrBuf err = {0};
  cr_assert_eq(bind_tensor(&b, "q", PQ, ATTN_BF16, 4, q_shape, NULL, &err),
               ATTN_SUCCESS);
  cr_assert_eq(bind_tensor(&b, "q", (char *)PQ + 2, ATTN_BF16, 4, q_shape,
                           NULL, &err),
               ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert(b.tensor_bound[Q]);
  cr_assert_eq(b.params.t[Q].ptr, PQ);
  sb_free(&err);
}

/* ----------------------------------------------------- scalar checks */

Test(runtime_args, scalars_by_type) {
  cr_assert_eq(attn_call_bind_f32(call, "scale", 0.5f), ATTN_SUCCESS);
  cr_assert_eq(attn_call_bind_i32(call, "window", 3), ATTN_SUCCESS);
  cr_assert_eq(attn_call_bind_u64(call, "seed", 9), ATTN_SUCCESS);
  cr_assert_eq(attn_call_bind_bool(call, "causal", 0), ATTN_SUCCESS);
  expect_error(attn_call_bind_i32(call, "scale", 1),
               ATTN_ERROR_INVALID_ARGUMENT, "declared f32, bound as i32");
  expect_error(attn_call_bind_f32(call, "window", 1.0f),
               ATTN_ERROR_INVALID_ARGUMENT, "declared i32, bound as f32");
  expect_error(attn_call_bind_bool(call, "seed", 1),
               ATTN_ERROR_INVALID_ARGUMENT, "declared u64, bound as bool");
  expect_error(attn_call_bind_u64(call, "causal", 1),
               ATTN_ERROR_INVALID_ARGUMENT, "declared bool, bound as u64");
}

/* ---------------------------------------------------------- launches */

Test(runtime_args, launch_needs_every_tensor) {
  cr_assert_eq(bind4("q", PQ, ATTN_BF16, q_shape, NULL), ATTN_SUCCESS);
  expect_error(attn_call_launch(call, NULL), ATTN_ERROR_INCOMPLETE,
               "tensor 'k' is not bound");
}

Test(runtime_args, launch_needs_scalars_without_defaults) {
  bind_all();
  expect_error(attn_call_launch(call, NULL), ATTN_ERROR_INCOMPLETE,
               "scalar 'window' is not bound and has no default");
}

Test(runtime_args, launch_without_a_driver) {
  bind_all();
  cr_assert_eq(attn_call_bind_i32(call, "window", 16), ATTN_SUCCESS);
  attn_status st = attn_call_launch(call, NULL);
  if (driver_present()) {
    cr_assert_neq(st, ATTN_ERROR_INVALID_ARGUMENT, "%s",
                  attn_context_error(ctx));
    cr_skip_test("a CUDA driver is present: the no-driver status is not "
                 "checked here");
  }
  expect_error(st, ATTN_ERROR_NO_DRIVER, "libcuda.so.1 not found");
}

Test(runtime_args, empty_problems_succeed_without_launching) {
  int64_t q0[4] = {2, 8, 0, 64};
  cr_assert_eq(bind4("q", PQ, ATTN_BF16, q0, NULL), ATTN_SUCCESS);
  cr_assert_eq(bind4("k", PK, ATTN_BF16, kv_shape, NULL), ATTN_SUCCESS);
  cr_assert_eq(bind4("v", PV, ATTN_BF16, kv_shape, NULL), ATTN_SUCCESS);
  int64_t b0[4] = {2, 1, 0, 130};
  cr_assert_eq(bind4("bias", PB, ATTN_F32, b0, NULL), ATTN_SUCCESS);
  cr_assert_eq(bind4("o", NULL, ATTN_BF16, q0, NULL), ATTN_SUCCESS);
  cr_assert_eq(attn_call_bind_i32(call, "window", 16), ATTN_SUCCESS);
  cr_assert_eq(attn_call_launch(call, NULL), ATTN_SUCCESS, "%s",
               attn_context_error(ctx));
}

Test(runtime_args, empty_keys_still_launch) {
  int64_t kv0[4] = {2, 2, 0, 64};
  int64_t b0[4] = {2, 1, 100, 0};
  cr_assert_eq(bind4("q", PQ, ATTN_BF16, q_shape, NULL), ATTN_SUCCESS);
  cr_assert_eq(bind4("k", NULL, ATTN_BF16, kv0, NULL), ATTN_SUCCESS);
  cr_assert_eq(bind4("v", NULL, ATTN_BF16, kv0, NULL), ATTN_SUCCESS);
  cr_assert_eq(bind4("bias", NULL, ATTN_F32, b0, NULL), ATTN_SUCCESS);
  cr_assert_eq(bind4("o", PO, ATTN_BF16, q_shape, NULL), ATTN_SUCCESS);
  cr_assert_eq(attn_call_bind_i32(call, "window", 16), ATTN_SUCCESS);
  attn_status st = attn_call_launch(call, NULL);
  cr_assert_neq(st, ATTN_SUCCESS, "Skv = 0 must reach the launch");
  if (!driver_present()) cr_assert_eq(st, ATTN_ERROR_NO_DRIVER);
}

Test(runtime_args, grid_limits) {
  int64_t q[4] = {70000, 8, 1, 64};
  int64_t kv[4] = {70000, 2, 1, 64};
  int64_t bs[4] = {70000, 1, 1, 1};
  cr_assert_eq(bind4("q", PQ, ATTN_BF16, q, NULL), ATTN_SUCCESS);
  cr_assert_eq(bind4("k", PK, ATTN_BF16, kv, NULL), ATTN_SUCCESS);
  cr_assert_eq(bind4("v", PV, ATTN_BF16, kv, NULL), ATTN_SUCCESS);
  cr_assert_eq(bind4("bias", PB, ATTN_F32, bs, NULL), ATTN_SUCCESS);
  cr_assert_eq(bind4("o", PO, ATTN_BF16, q, NULL), ATTN_SUCCESS);
  cr_assert_eq(attn_call_bind_i32(call, "window", 16), ATTN_SUCCESS);
  expect_error(attn_call_launch(call, NULL), ATTN_ERROR_INVALID_ARGUMENT,
               "at most 65535");
}

Test(runtime_args, tile_counter_alignment) {
  expect_error(attn_call_set_tile_counter(call, (void *)0x1004),
               ATTN_ERROR_INVALID_ARGUMENT, "8-byte aligned");
  cr_assert_eq(attn_call_set_tile_counter(call, (void *)0x1008),
               ATTN_SUCCESS);
  cr_assert_eq(attn_call_set_tile_counter(call, NULL), ATTN_SUCCESS);
}

/* ------------------------------------------------------------ context */

Test(runtime_context, targets_and_statuses) {
  attn_context *c;
  cr_assert_eq(attn_context_create(&c), ATTN_SUCCESS);
  cr_assert_str_eq(attn_context_error(c), "");
  cr_assert_eq(attn_context_set_arch(c, "sm_90a"), ATTN_SUCCESS);
  cr_assert_eq(attn_context_set_arch(c, "sm_80"), ATTN_SUCCESS);
  cr_assert_eq(attn_context_set_arch(c, "sm90"), ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(attn_context_error(c), "invalid target 'sm90'"));
  cr_assert_eq(attn_context_set_arch(c, "compute_90"),
               ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(attn_context_set_arch(c, "sm_35"), ATTN_ERROR_UNSUPPORTED);
  cr_assert_eq(attn_context_set_arch(c, NULL), ATTN_SUCCESS);
  cr_assert_eq(attn_context_set_cache_dir(c, ""),
               ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(attn_context_set_cache_dir(c, NULL), ATTN_SUCCESS);
  cr_assert_eq(attn_context_create(NULL), ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(attn_module_prepare(NULL), ATTN_ERROR_INVALID_ARGUMENT);
  for (int s = 0; s <= ATTN_ERROR_INCOMPLETE; s++)
    for (int t = 0; t < s; t++)
      cr_assert_str_neq(attn_status_string((attn_status)s),
                        attn_status_string((attn_status)t));
  cr_assert_str_eq(attn_version(), ATTNC_VERSION);
  attn_context_destroy(c);
}

/* Whole pipeline: source errors, the target, the cache. */
static const char sdpa[] =
    "attention sdpa {\n"
    "  input  q : bf16[B, H, Sq, 64];\n"
    "  input  k : bf16[B, H, Skv, 64];\n"
    "  input  v : bf16[B, H, Skv, 64];\n"
    "  s = (q @ k^T) * 0.125;\n"
    "  p = softmax(s);\n"
    "  o = p @ v;\n"
    "  output o : bf16[B, H, Sq, 64];\n"
    "}\n";

Test(runtime_context, compile_statuses) {
  setenv("ATTN_NO_CACHE", "1", 1);
  attn_context *c;
  attn_module *m = NULL;
  cr_assert_eq(attn_context_create(&c), ATTN_SUCCESS);
  attn_status st =
      attn_module_compile_string(c, "bad.attn", "attention {", 11, &m);
  cr_assert_eq(st, ATTN_ERROR_SOURCE, "%s", attn_context_error(c));
  cr_assert_not_null(strstr(attn_context_error(c), "bad.attn:1:"), "%s",
                     attn_context_error(c));
  cr_assert_null(m);
  cr_assert_eq(attn_module_compile_file(c, "/nonexistent/x.attn", &m),
               ATTN_ERROR_IO);
  if (!driver_present()) {
    st = attn_module_compile_string(c, "sdpa.attn", sdpa, strlen(sdpa), &m);
    cr_assert_eq(st, ATTN_ERROR_NO_DRIVER, "%s", attn_context_error(c));
    cr_assert_not_null(strstr(attn_context_error(c), "attn_context_set_arch"));
  }
  cr_assert_eq(attn_context_set_arch(c, "sm_80"), ATTN_SUCCESS);
  st = attn_module_compile_string(c, "sdpa.attn", sdpa, strlen(sdpa), &m);
  cr_assert_eq(st, ATTN_SUCCESS, "%s", attn_context_error(c));
  cr_assert_str_eq(rt_module_arch(m), "sm_80");
  cr_assert_not_null(strstr(rt_module_log(m), "registers"), "%s",
                     rt_module_log(m));
  cr_assert_eq(attn_module_graph_count(m), 1);
  attn_module_destroy(m);
  /* Same source again: the context's in-memory cache, no NVRTC. */
  int compiles = rt_context_cache(c)->compiles;
  st = attn_module_compile_string(c, "sdpa.attn", sdpa, strlen(sdpa), &m);
  cr_assert_eq(st, ATTN_SUCCESS);
  cr_assert_eq(rt_context_cache(c)->compiles, compiles);
  attn_module_destroy(m);
  attn_context_destroy(c);
}

/* The deterministic backward exists for head dims up to 128: asking for it
 * on a graph with literal head dim 256 is refused at once, with a message,
 * and leaves the mode off; 128 is accepted. No GPU: the call is made on a
 * module wrapped around a hand-built IR. */
static void det_refusal_case(int head_dim, attn_status want) {
  attn_context *c = NULL;
  cr_assert_eq(attn_context_create(&c), ATTN_SUCCESS);
  Arena *a = arena_new();
  IrModule *ir = make_ir(a);
  IrGraph *g = ir->graphs[0];
  for (int t = Q; t <= O; t++)
    if (t != BIAS) g->tensors[t].dim_sym[3] = -1, g->tensors[t].dim_val[3] = head_dim;
  attn_module *m = NULL;
  attn_graph *gr = NULL;
  attn_call *cl = NULL;
  cr_assert_eq(rt_module_from_ir(c, a, ir, plan_bwd(head_dim <= 128), "sm_90a", NULL, 0, &m),
               ATTN_SUCCESS, "%s", attn_context_error(c));
  cr_assert_eq(attn_module_get_graph(m, NULL, &gr), ATTN_SUCCESS);
  cr_assert_eq(attn_call_create(gr, &cl), ATTN_SUCCESS);
  attn_status st = attn_call_set_deterministic(cl, 1);
  cr_assert_eq(st, want, "head dim %d: status %d (%s)", head_dim, st, attn_context_error(c));
  if (want != ATTN_SUCCESS)
    cr_assert_not_null(strstr(attn_context_error(c), "head dimensions up to 128"), "%s",
                       attn_context_error(c));
  cr_assert_eq(attn_call_set_deterministic(cl, 0), ATTN_SUCCESS); /* off: always allowed */
  attn_call_destroy(cl);
  attn_module_destroy(m);
  attn_context_destroy(c);
}

Test(runtime_context, deterministic_refused_above_128) {
  det_refusal_case(256, ATTN_ERROR_UNSUPPORTED);
  det_refusal_case(128, ATTN_SUCCESS);
}

/* A source is read up to 64 MiB: /dev/zero is refused, not read until
 * memory runs out. */
Test(runtime_args, endless_sources_are_refused) {
  attn_module *m = NULL;
  expect_error(attn_module_compile_file(ctx, "/dev/zero", &m), ATTN_ERROR_IO,
               "larger than 64 MiB");
  cr_assert_null(m);
  expect_error(attn_module_compile_string(ctx, "big", "", (size_t)SOURCE_MAX_BYTES + 1, &m),
               ATTN_ERROR_INVALID_ARGUMENT, "at most 64 MiB");
}

Test(runtime_args, cleared_bindings_take_other_shapes) {
  bind_all();
  static const int64_t q2[4] = {1, 8, 50, 64};
  /* B = 1 and Sq = 50 disagree with the bound k, v, o and bias: refused... */
  expect_error(bind4("q", PQ, ATTN_BF16, q2, NULL), ATTN_ERROR_INVALID_ARGUMENT, "dimension");
  /* ...until the call forgets them. */
  cr_assert_eq(attn_call_clear_bindings(call), ATTN_SUCCESS);
  cr_assert_eq(bind4("q", PQ, ATTN_BF16, q2, NULL), ATTN_SUCCESS, "%s", attn_context_error(ctx));
  /* Nothing else is bound any more: a launch is incomplete. */
  cr_assert_eq(attn_call_launch(call, NULL), ATTN_ERROR_INCOMPLETE);
  cr_assert_eq(attn_call_clear_bindings(NULL), ATTN_ERROR_INVALID_ARGUMENT);
}

/* Every option value attn.h lists is taken, the next one refused with a
 * message (session 21: ATTN_OPTION_SM90_VARIANT refused 5, f16_pv, and
 * test_fp8's f16_pv run silently tested the default). */
Test(runtime_args, options_take_the_values_attn_h_lists) {
  static const struct {
    attn_option o;
    long long ok[3], bad;
  } cases[] = {
      {ATTN_OPTION_BACKWARD_TEMPLATE, {0, 94, 95}, 96},
      {ATTN_OPTION_SM90_VARIANT, {0, 24, 25}, 26},
      {ATTN_OPTION_PERSISTENT_CTAS, {0, 3, 132}, -1},
      {ATTN_OPTION_DECODE_SPLITS, {0, 1, 7}, -1},
      {ATTN_OPTION_DECODE, {0, 1, 1}, 2},
      {ATTN_OPTION_LAUNCH_OVERLAP, {0, 1, 1}, 2},
      {ATTN_OPTION_EXP2_FMA, {0, 1, 5}, 6},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int k = 0; k < 3; k++)
      cr_assert_eq(attn_context_set_option(ctx, cases[c].o, cases[c].ok[k]), ATTN_SUCCESS,
                   "option %d, %lld: %s", (int)cases[c].o, cases[c].ok[k], attn_context_error(ctx));
    cr_assert_eq(attn_context_set_option(ctx, cases[c].o, cases[c].bad), ATTN_ERROR_INVALID_ARGUMENT,
                 "option %d, %lld", (int)cases[c].o, cases[c].bad);
    cr_assert_not_null(strstr(attn_context_error(ctx), "does not take"), "%s",
                       attn_context_error(ctx));
  }
  attn_context_set_option(ctx, ATTN_OPTION_SM90_VARIANT, 0);
  attn_context_set_option(ctx, ATTN_OPTION_PERSISTENT_CTAS, 0);
  attn_context_set_option(ctx, ATTN_OPTION_EXP2_FMA, 0);
}
