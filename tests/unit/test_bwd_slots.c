/*
 * test_bwd_slots.c: where the backward's bias gradients go (bwd_slots in
 * match_bwd.c, shared by the emitter and the runtime), which biases the
 * GPU backward refuses (bwd_unsupported_grad), and that the emitter writes
 * the bias hooks the template declares for exactly the graphs with a bias
 * gradient.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "attn_abi.h"
#include "attnc.h"
#include "unit_build.h"

static IrModule *bs_module(const char *text, Arena *a) { return unit_build(a, "<test>", text); }

#define HEAD                                                                                     \
  "attention g {\n  input q : bf16[B, H, Sq, 64];\n  input k : bf16[B, Hk, Skv, 64];\n"          \
  "  input v : bf16[B, Hk, Skv, 64];\n"
#define TAIL                                                                                     \
  "  o = softmax(s) @ v;\n  output o : bf16[B, H, Sq, 64];\n  output lse = logsumexp(s);\n"

Test(bwd_slots, direct_bias) {
  Arena *a = arena_new();
  IrModule *m = bs_module(HEAD "  input bias : f32[B, H, Sq, Skv];\n"
                               "  s = (q @ k^T) * 0.125 + bias[b, h, i, j];\n" TAIL
                               "  grad q, k, v, bias;\n}\n",
                          a);
  const IrGraph *g = m->graphs[0];
  BwdSlots sl;
  cr_assert_eq(bwd_slots(g, &sl), 0);
  cr_assert_eq(bwd_unsupported_grad(g), -1);
  cr_assert_eq(sl.nbias, 1);
  cr_assert_eq(sl.bias[0], 3);
  cr_assert_eq(sl.bias_mode[0], BWD_BIAS_DIRECT);
  cr_assert_eq(sl.dbias[0], sl.dva + 1, "bias slots come after the q/k/v ones");
  cr_assert_eq(sl.dbias_acc[0], -1);
  cr_assert_eq(sl.end, sl.dbias[0] + 1);
  cr_assert_eq(sl.bias_keep[0], (unsigned)(DOM_B | DOM_H | DOM_I | DOM_J));
  arena_free(a);
}

Test(bwd_slots, broadcast_and_reduced_biases) {
  Arena *a = arena_new();
  IrModule *m = bs_module(HEAD "  input bias : bf16[1, H, Sq, Skv];\n  input slopes : f32[H];\n"
                               "  s = (q @ k^T) * 0.125 + bias[b, h, i, j] - slopes[h] * f32(i - j);\n"
                               TAIL "  grad q, bias, slopes;\n}\n",
                          a);
  const IrGraph *g = m->graphs[0];
  BwdSlots sl;
  cr_assert_eq(bwd_slots(g, &sl), 0);
  cr_assert_eq(sl.dk, -1);
  cr_assert_eq(sl.nbias, 2);
  cr_assert_eq(sl.bias_mode[0], BWD_BIAS_ATOMIC);
  cr_assert_eq(sl.bias_axis[0][0], 0, "the literal-1 dim broadcasts");
  cr_assert_eq(sl.bias_axis[0][1], DOM_H);
  cr_assert_eq(sl.bias_keep[0], (unsigned)(DOM_H | DOM_I | DOM_J));
  cr_assert_eq(sl.bias_mode[1], BWD_BIAS_REDUCED);
  cr_assert_eq(sl.bias_keep[1], (unsigned)DOM_H);
  cr_assert_eq(sl.dbias_acc[0], sl.dbias[0] + 1);
  cr_assert_eq(sl.dbias[1], sl.dbias_acc[0] + 1);
  cr_assert_eq(sl.end, sl.dbias_acc[1] + 1);
  cr_assert(sl.end <= ATTN_MAX_TENSORS);
  arena_free(a);
}

Test(bwd_slots, refusals) {
  Arena *a = arena_new();
  /* Read transposed. */
  IrModule *m = bs_module(HEAD "  input bias : f32[Sq, Skv];\n"
                               "  s = (q @ k^T) * 0.125 + bias[j, i];\n" TAIL
                               "  grad q, k, v, bias;\n}\n",
                          a);
  cr_assert_eq(bwd_unsupported_grad(m->graphs[0]), 3);
  BwdSlots sl;
  bwd_slots(m->graphs[0], &sl);
  cr_assert_eq(sl.nbias, 0);
  /* Read two ways. */
  m = bs_module(HEAD "  input bias : f32[H, Skv];\n"
                     "  s = (q @ k^T) * 0.125 + bias[h, j] + bias[b, j];\n" TAIL
                     "  grad q, bias;\n}\n",
                a);
  cr_assert_eq(bwd_unsupported_grad(m->graphs[0]), 3);
  /* Never read by the scores. */
  m = bs_module(HEAD "  input bias : f32[Sq, Skv];\n  s = (q @ k^T) * 0.125;\n" TAIL
                     "  grad q, bias;\n}\n",
                a);
  cr_assert_eq(bwd_unsupported_grad(m->graphs[0]), 3);
  /* q, k, v alone: nothing refused, no bias slots. */
  m = bs_module(HEAD "  s = (q @ k^T) * 0.125;\n" TAIL "  grad q, k, v;\n}\n", a);
  cr_assert_eq(bwd_unsupported_grad(m->graphs[0]), -1);
  bwd_slots(m->graphs[0], &sl);
  cr_assert_eq(sl.nbias, 0);
  cr_assert_eq(sl.end, sl.dva + 1);
  arena_free(a);
}

/* The bias hooks and their macros appear exactly for graphs with a bias
 * gradient, and the refused graph keeps its forward. */
Test(bwd_slots, emitted_hooks) {
  Arena *a = arena_new();
  IrModule *m = bs_module(HEAD "  input slopes : f32[H];\n"
                               "  s = (q @ k^T) * 0.125 - slopes[h] * f32(i - j);\n" TAIL
                               "  grad q, k, v, slopes;\n}\n",
                          a);
  Compiled r = unit_compile(a, m, "sm_80", STAGE_EMIT);
  cr_assert(strstr(r.source, "#define ATTN_BWD_NRED 1"));
  cr_assert(strstr(r.source, "attn_bwd_draw_bias(float ds"));
  cr_assert(strstr(r.source, "red[0] += "));
  cr_assert(strstr(r.source, "#undef ATTN_BWD_BIAS"));
  cr_assert(r.plans[0].pass[PLAN_BACKWARD].present);
  m = bs_module(HEAD "  s = (q @ k^T) * 0.125;\n" TAIL "  grad q, k, v;\n}\n", a);
  r = unit_compile(a, m, "sm_80", STAGE_EMIT);
  cr_assert_null(strstr(r.source, "#define ATTN_BWD_BIAS"));
  m = bs_module(HEAD "  input bias : f32[Sq, Skv];\n"
                     "  s = (q @ k^T) * 0.125 + bias[j, i];\n" TAIL "  grad q, bias;\n}\n",
                a);
  r = unit_compile(a, m, "sm_80", STAGE_EMIT);
  cr_assert(!r.plans[0].pass[PLAN_BACKWARD].present, "a refused backward plans no kernels");
  arena_free(a);
}

/* Packed sequences: the gradients of q, k, v and a softmax sink compile;
 * a bias's is refused at compile time with a located error naming it. */
Test(bwd_slots, packed_refuses_bias_gradients) {
  Arena *a = arena_new();
#define PACKED_HEAD                                                                              \
  "attention g {\n  input q : bf16[T, H, 64];\n  input k : bf16[T, H, 64];\n"                   \
  "  input v : bf16[T, H, 64];\n  input cu : i32[B1];\n"
#define PACKED_TAIL                                                                              \
  "  o = softmax(s) @ packed(v, cu);\n  output o : bf16[T, H, 64];\n"                            \
  "  output lse = logsumexp(s);\n"
  IrModule *m = bs_module(PACKED_HEAD "  input slopes : f32[H];\n"
                                      "  s = packed(q, cu) @ packed(k, cu)^T - slopes[h] * "
                                      "f32(i - j);\n" PACKED_TAIL
                                      "  grad q, k, v, slopes;\n}\n",
                          a);
  Diag d = {0};
  Compiled c;
  const CompileOptions o = {.arch = "sm_90a"};
  cr_assert_neq(compile_module(m, &o, STAGE_PLAN, a, &d, &c), 0);
  cr_assert(d.out.data && strstr(d.out.data, "<test>:6:") &&
                strstr(d.out.data, "no gradient of 'slopes' with packed sequences"),
            "%s", d.out.data ? d.out.data : "");
  diag_free(&d);
  m = bs_module(PACKED_HEAD "  s = packed(q, cu) @ packed(k, cu)^T;\n" PACKED_TAIL
                            "  grad q, k, v;\n}\n",
                a);
  unit_compile(a, m, "sm_90a", STAGE_PLAN);
  unit_compile(a, m, "sm_80", STAGE_PLAN);
#undef PACKED_HEAD
#undef PACKED_TAIL
  arena_free(a);
}
