/* test_signature.c: a graph's signature (attn_graph_tensor, _scalar,
 * _has_backward), which python/attnc allocates outputs and gradients from:
 * the names must be the ones bind accepts, the shapes the ones it checks. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"
#include "unit_build.h"

static const char train_src[] =
    "attention train {\n"
    "  input  q : bf16[B, H, Sq, 64];\n"
    "  input  k : bf16[B, Hk, Skv, 64];\n"
    "  input  v : bf16[B, Hk, Skv, 64];\n"
    "  input  bias : f32[1, H, Sq, Skv];\n"
    "  input  doc : i32[B, Sq];\n"
    "  scalar scale : f32 = 0.125;\n"
    "  scalar window : i32 = 256;\n"
    "  scalar causal : bool = true;\n"
    "  scalar seed : u64;\n"
    "  s = (q @ k^T) * scale + bias[0, h, i, j];\n"
    "  s = mask(s, (j <= i || !causal) && i - j < window && doc[b, i] == doc[b, j]);\n"
    "  out = softmax(s) @ v;\n"
    "  output out : bf16[B, H, Sq, 64];\n"
    "  output stats = logsumexp(s);\n"
    "  grad q, v, bias;\n"
    "}\n"
    "attention infer {\n"
    "  input  q : bf16[B, H, S, 128];\n"
    "  input  k : bf16[B, H, S, 128];\n"
    "  input  v : bf16[B, H, S, 128];\n"
    "  o = softmax(q @ k^T) @ v;\n"
    "  output o : bf16[B, H, S, 128];\n"
    "}\n"
    "attention fp8train {\n"
    "  input  q : e4m3[B, H, S, 64];\n"
    "  input  k : e4m3[B, H, S, 64];\n"
    "  input  v : e4m3[B, H, S, 64];\n"
    "  scalar scale_o : f32 = 2.0;\n"
    "  s = mask(q @ k^T * 0.125, j <= i);\n"
    "  out = (e4m3(softmax(s) * 448.0) @ v) / 448.0;\n"
    "  output o : e4m3[B, H, S, 64] = out * scale_o;\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v {\n"
    "    input do : e5m2;\n"
    "    output amax_dp = amax(ds);\n"
    "    ds = e4m3(ds * 64.0) / 64.0;\n"
    "    output dq : bf16;\n"
    "    output dk : e4m3 = dk * 8.0;\n"
    "    output dv : f32;\n"
    "    output amax_dk = amax(dk);\n"
    "  }\n"
    "}\n";

static attn_context *ctx;
static attn_module *mod;

static void setup(void) {
  setenv("ATTN_NO_CACHE", "1", 1);
  cr_assert_eq(attn_context_create(&ctx), ATTN_SUCCESS);
  Arena *a = arena_new();
  IrModule *ir = unit_build(a, "train.attn", train_src);
  Compiled cm = unit_compile(a, ir, "sm_90a", STAGE_PLAN);
  StrBuf sb = {0};
  plan_write(&sb, cm.plans, cm.ngraphs);
  cr_assert_eq(rt_module_from_ir(ctx, a, ir, sb.data, "sm_90a", NULL, 0, &mod), ATTN_SUCCESS,
               "%s", attn_context_error(ctx));
  sb_free(&sb);
}

static void teardown(void) {
  attn_module_destroy(mod);
  attn_context_destroy(ctx);
}

TestSuite(signature, .init = setup, .fini = teardown);

static attn_graph *graph(const char *name) {
  attn_graph *g;
  cr_assert_eq(attn_module_get_graph(mod, name, &g), ATTN_SUCCESS, "%s", attn_context_error(ctx));
  return g;
}

static attn_tensor_info tensor(attn_graph *g, int i) {
  attn_tensor_info t;
  cr_assert_eq(attn_graph_tensor(g, i, &t), ATTN_SUCCESS, "%s", attn_context_error(ctx));
  return t;
}

static void expect_dims(const attn_tensor_info *t, const char *d0, const char *d1, const char *d2,
                        const char *d3) {
  const char *want[4] = {d0, d1, d2, d3};
  cr_assert_eq(t->ndim, 4 - (d3 == NULL) - (d2 == NULL), "%s", t->name);
  for (int d = 0; d < t->ndim; d++) {
    if (want[d][0] >= '0' && want[d][0] <= '9') {
      cr_assert_null(t->dim_name[d], "%s dim %d", t->name, d);
      cr_assert_eq(t->dim_size[d], atoll(want[d]), "%s dim %d", t->name, d);
    } else {
      cr_assert_str_eq(t->dim_name[d], want[d], "%s dim %d", t->name, d);
      cr_assert_eq(t->dim_size[d], -1);
    }
  }
}

Test(signature, tensors_in_binding_order_then_the_backward) {
  attn_graph *g = graph("train");
  cr_assert_str_eq(attn_graph_name(g), "train");
  char why[256] = "untouched";
  cr_assert_eq(attn_graph_has_backward(g, why, sizeof why), 1);
  cr_assert_str_eq(why, "untouched");
  /* q k v bias doc out stats, then do dq dv dbias (k has no grad). */
  cr_assert_eq(attn_graph_tensor_count(g), 11);
  static const char *names[] = {"q", "k", "v", "bias", "doc", "out", "stats",
                                "dout", "dq", "dv", "dbias"};
  static const attn_tensor_role roles[] = {
      ATTN_ROLE_INPUT, ATTN_ROLE_INPUT, ATTN_ROLE_INPUT, ATTN_ROLE_INPUT, ATTN_ROLE_INPUT,
      ATTN_ROLE_OUTPUT, ATTN_ROLE_OUTPUT, ATTN_ROLE_GRAD_INPUT, ATTN_ROLE_GRAD_OUTPUT,
      ATTN_ROLE_GRAD_OUTPUT, ATTN_ROLE_GRAD_OUTPUT};
  static const attn_dtype types[] = {ATTN_BF16, ATTN_BF16, ATTN_BF16, ATTN_F32, ATTN_I32,
                                     ATTN_BF16, ATTN_F32, ATTN_BF16, ATTN_BF16, ATTN_BF16,
                                     ATTN_F32};
  static const int grads[] = {1, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0};
  static const int ofs[] = {-1, -1, -1, -1, -1, -1, -1, 5, 0, 2, 3};
  for (int i = 0; i < 11; i++) {
    attn_tensor_info t = tensor(g, i);
    cr_assert_str_eq(t.name, names[i]);
    cr_assert_eq(t.role, roles[i], "%s", names[i]);
    cr_assert_eq(t.dtype, types[i], "%s", names[i]);
    cr_assert_eq(t.grad, grads[i], "%s", names[i]);
    cr_assert_eq(t.of, ofs[i], "%s", names[i]);
    cr_assert_eq(t.operand, i < 3 ? "qkv"[i] : 0, "%s", names[i]);
    cr_assert_eq(t.attention_output, i == 5, "%s", names[i]);
    cr_assert_eq(t.lse, i == 6, "%s", names[i]);
  }
  attn_tensor_info t = tensor(g, 1);
  expect_dims(&t, "B", "Hk", "Skv", "64");
  t = tensor(g, 3);
  expect_dims(&t, "1", "H", "Sq", "Skv");
  t = tensor(g, 4);
  expect_dims(&t, "B", "Sq", NULL, NULL);
  t = tensor(g, 6);
  expect_dims(&t, "B", "H", "Sq", NULL);
  t = tensor(g, 7); /* dO: o's dimensions */
  expect_dims(&t, "B", "H", "Sq", "64");
  t = tensor(g, 10); /* dbias: the bias's */
  expect_dims(&t, "1", "H", "Sq", "Skv");
  /* The same name twice: kept on the graph, not made anew. */
  attn_tensor_info again = tensor(g, 8);
  cr_assert_eq(again.name, tensor(g, 8).name);
}

Test(signature, the_names_are_the_ones_bind_takes) {
  attn_graph *g = graph("train");
  attn_call *c;
  cr_assert_eq(attn_call_create(g, &c), ATTN_SUCCESS);
  const int64_t q_shape[4] = {2, 4, 32, 64}, kv_shape[4] = {2, 2, 48, 64};
  for (int i = 7; i < 11; i++) {
    attn_tensor_info t = tensor(g, i);
    if (t.dtype == ATTN_F32) continue; /* dbias: shaped by bias */
    const int64_t *shape = !strcmp(t.name, "dv") ? kv_shape : q_shape;
    cr_assert_eq(attn_call_bind_tensor(c, t.name, (void *)0x100000, t.dtype, 4, shape, NULL),
                 ATTN_SUCCESS, "%s: %s", t.name, attn_context_error(ctx));
  }
  attn_call_destroy(c);
}

Test(signature, scalars_with_their_defaults) {
  attn_graph *g = graph("train");
  cr_assert_eq(attn_graph_scalar_count(g), 4);
  attn_scalar_info s;
  cr_assert_eq(attn_graph_scalar(g, 0, &s), ATTN_SUCCESS);
  cr_assert_str_eq(s.name, "scale");
  cr_assert_eq(s.dtype, ATTN_F32);
  cr_assert(s.has_default);
  cr_assert_float_eq(s.default_float, 0.125, 1e-12);
  cr_assert_eq(attn_graph_scalar(g, 1, &s), ATTN_SUCCESS);
  cr_assert_eq(s.dtype, ATTN_I32);
  cr_assert_eq(s.default_int, 256);
  cr_assert_eq(attn_graph_scalar(g, 2, &s), ATTN_SUCCESS);
  cr_assert_eq(s.dtype, ATTN_BOOL);
  cr_assert_eq(s.default_int, 1);
  cr_assert_eq(attn_graph_scalar(g, 3, &s), ATTN_SUCCESS);
  cr_assert_str_eq(s.name, "seed");
  cr_assert_eq(s.dtype, ATTN_U64);
  cr_assert_not(s.has_default);
  cr_assert_eq(attn_graph_scalar(g, 4, &s), ATTN_ERROR_NOT_FOUND);
  cr_assert(strstr(attn_context_error(ctx), "has 4 scalars"), "%s", attn_context_error(ctx));
}

Test(signature, a_forward_only_graph_says_why_it_has_no_backward) {
  attn_graph *g = graph("infer");
  char why[256];
  cr_assert_eq(attn_graph_has_backward(g, why, sizeof why), 0);
  cr_assert(strstr(why, "declares no grad"), "%s", why);
  cr_assert_eq(attn_graph_has_backward(g, NULL, 0), 0);
  cr_assert_eq(attn_graph_tensor_count(g), 4);
  attn_tensor_info t = tensor(g, 3);
  cr_assert_str_eq(t.name, "o");
  cr_assert(t.attention_output);
  cr_assert_not(t.lse);
  cr_assert_eq(attn_graph_tensor(g, 4, &t), ATTN_ERROR_NOT_FOUND);
  cr_assert(strstr(attn_context_error(ctx), "has 4 tensors"), "%s", attn_context_error(ctx));
  cr_assert_eq(attn_graph_tensor(g, 0, NULL), ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(attn_graph_tensor(NULL, 0, &t), ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert_eq(attn_graph_tensor_count(NULL), 0);
  cr_assert_str_eq(attn_graph_name(NULL), "");
}

/* The FP8 backward's tensors: dO in the grad block's type, each gradient
 * in its storage type, then the block's amax outputs (f32[1]); bind takes
 * exactly these. */
Test(signature, a_grad_block_gives_the_types_and_its_amax_outputs) {
  attn_graph *g = graph("fp8train");
  cr_assert_eq(attn_graph_has_backward(g, NULL, 0), 1);
  cr_assert_eq(attn_graph_tensor_count(g), 5 + 6);
  static const char *names[] = {"do", "dq", "dk", "dv", "amax_dp", "amax_dk"};
  static const attn_dtype types[] = {ATTN_E5M2, ATTN_BF16, ATTN_E4M3, ATTN_F32, ATTN_F32, ATTN_F32};
  static const int ofs[] = {3, 0, 1, 2, -1, -1};
  attn_call *c;
  cr_assert_eq(attn_call_create(g, &c), ATTN_SUCCESS);
  const int64_t shape[4] = {2, 4, 32, 64}, one = 1;
  for (int i = 0; i < 6; i++) {
    attn_tensor_info t = tensor(g, 5 + i);
    cr_assert_str_eq(t.name, names[i]);
    cr_assert_eq(t.role, i ? ATTN_ROLE_GRAD_OUTPUT : ATTN_ROLE_GRAD_INPUT, "%s", names[i]);
    cr_assert_eq(t.dtype, types[i], "%s", names[i]);
    cr_assert_eq(t.of, ofs[i], "%s", names[i]);
    if (i < 4) {
      expect_dims(&t, "B", "H", "S", "64");
    } else {
      cr_assert_eq(t.ndim, 1);
      cr_assert_eq(t.dim_size[0], 1);
    }
    cr_assert_eq(attn_call_bind_tensor(c, t.name, (void *)0x100000, t.dtype, i < 4 ? 4 : 1,
                                       i < 4 ? shape : &one, NULL),
                 ATTN_SUCCESS, "%s: %s", t.name, attn_context_error(ctx));
  }
  /* dq is stored as bf16 here, not as q's e4m3. */
  cr_assert_eq(attn_call_bind_tensor(c, "dq", (void *)0x100000, ATTN_E4M3, 4, shape, NULL),
               ATTN_ERROR_INVALID_ARGUMENT);
  /* No deterministic mode for the FP8 backward. */
  cr_assert_eq(attn_call_set_deterministic(c, 1), ATTN_ERROR_UNSUPPORTED);
  cr_assert(strstr(attn_context_error(ctx), "FP8 backward has no deterministic"), "%s",
            attn_context_error(ctx));
  attn_call_destroy(c);
}
