/*
 * test_backward.c: the derived backward (backward.c) and its CPU reference
 * (interp_bwd.c) against central finite differences of the scalar loss
 * L = sum(dO * O) computed by the forward reference, for every kind of op
 * the derivation handles; and the dropout generator (philox.c) against
 * Philox-4x32-10's published known answers, its keep rate, and the
 * forward reference's mask.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref.h"
#include "unit_build.h"

/* ----------------------------------------------------------- helpers */

static IrGraph *bt_graph(const char *text, Arena *a) {
  return unit_build(a, "<test>", text)->graphs[0];
}

/* sum(dO * O) from a fresh forward run. */
static double bt_loss(RefArgs *args, int o_tensor, const double *dout) {
  StrBuf err = {0};
  int rc = ref_forward(args, &err);
  cr_assert_eq(rc, 0, "ref_forward: %s", err.data ? err.data : "");
  sb_free(&err);
  const RefTensor *o = &args->tensors[o_tensor];
  double l = 0;
  for (int64_t e = 0; e < ref_numel(o); e++)
    l += dout[e] * o->data[e];
  return l;
}

/* The backward of `text` derived and run on the CPU on random inputs of
 * `shape` (scalars `set`): the forward into args, a random dO, the
 * gradients (one RefTensor per graph tensor). */
typedef struct BtRun {
  Arena *a;
  IrGraph *g;
  BwdGraph *bg;
  RefArgs args;
  int ot; /* the attention output's tensor */
  double *dout;
  RefTensor *grads;
} BtRun;

static BtRun bt_run(const char *text, const char *shape, const char *set) {
  BtRun r = {.a = arena_new()};
  r.g = bt_graph(text, r.a);
  Diag d = {0};
  r.bg = bwd_derive(r.g, r.a, &d);
  cr_assert(r.bg, "bwd_derive: %s", d.out.data ? d.out.data : "");
  diag_free(&d);
  r.args = (RefArgs){.g = r.g};
  StrBuf err = {0};
  cr_assert_eq(ref_make_inputs(&r.args, shape, 7, &err), 0, "%s", err.data);
  if (set)
    cr_assert_eq(ref_set_scalars(&r.args, set, &err), 0, "%s", err.data);
  r.ot = r.g->outputs[r.bg->o_output].tensor;
  cr_assert_eq(ref_forward(&r.args, &err), 0, "%s", err.data);
  int64_t no = ref_numel(&r.args.tensors[r.ot]);
  r.dout = malloc((size_t)no * sizeof *r.dout);
  RefRng rng = ref_rng(99, 1);
  for (int64_t e = 0; e < no; e++)
    r.dout[e] = ref_rng_normal(&rng);
  r.grads = calloc((size_t)r.g->ntensors, sizeof *r.grads);
  cr_assert_eq(ref_backward(&r.args, r.bg, r.dout, r.grads, &err), 0, "%s", err.data);
  sb_free(&err);
  return r;
}

static void bt_run_free(BtRun *r) {
  for (int t = 0; t < r->g->ntensors; t++)
    free(r->grads[t].data);
  free(r->grads);
  free(r->dout);
  ref_args_free(&r->args);
  arena_free(r->a);
}

/* Derives the backward of `text`, runs the CPU backward on random
 * inputs of `shape`, and checks every gradient against central
 * differences. With grads_out, hands back the analytic gradients, the
 * arguments and the arena holding the graph (the caller frees them). */
static void bt_check(const char *text, const char *shape, const char *set,
                     RefTensor **grads_out, RefArgs *args_out,
                     Arena **arena_out) {
  BtRun r = bt_run(text, shape, set);
  IrGraph *g = r.g;
  const double h = 1e-5;
  for (int t = 0; t < g->ntensors; t++) {
    if (!g->tensors[t].grad)
      continue;
    RefTensor *x = &r.args.tensors[t];
    int64_t n = ref_numel(x);
    double num = 0, den = 0;
    for (int64_t e = 0; e < n; e++) {
      double keep = x->data[e];
      x->data[e] = keep + h;
      double lp = bt_loss(&r.args, r.ot, r.dout);
      x->data[e] = keep - h;
      double lm = bt_loss(&r.args, r.ot, r.dout);
      x->data[e] = keep;
      double fd = (lp - lm) / (2 * h), an = r.grads[t].data[e];
      cr_assert(isfinite(an), "d%s[%lld] is %g", g->tensors[t].name,
                (long long)e, an);
      num += (fd - an) * (fd - an);
      den += an * an;
    }
    cr_assert(den > 0, "d%s is all zero", g->tensors[t].name);
    cr_expect(sqrt(num / den) < 1e-6, "d%s: relative error %g",
              g->tensors[t].name, sqrt(num / den));
  }
  if (grads_out) { /* the caller frees them, and the arena with the graph */
    *grads_out = r.grads;
    *args_out = r.args;
    *arena_out = r.a;
    free(r.dout);
  } else {
    bt_run_free(&r);
  }
}

#define QKV(D, HK)                                                           \
  "  input q : f32[B, H, Sq, " #D "];\n"                                    \
  "  input k : f32[B, " HK ", Skv, " #D "];\n"                               \
  "  input v : f32[B, " HK ", Skv, " #D "];\n"
#define TAIL                                                                 \
  "  p = softmax(s);\n  o = p @ v;\n  output o;\n"                          \
  "  output lse = logsumexp(s);\n"

/* --------------------------------------------------- finite differences */

Test(backward, sdpa) {
  bt_check("attention t {\n" QKV(4, "H")
           "  s = q @ k^T;\n" TAIL "  grad q, k, v;\n}\n",
           "B=2,H=2,Sq=3,Skv=5", NULL, NULL, NULL, NULL);
}

/* A sink in the denominator: dq, dk, dv and the sink's own gradient
 * against finite differences of the forward reference (which also runs
 * the sink), with a fully masked row (i = 0 keeps no key: all its weight
 * on the sink); the sink per head (summed over the batch) and per (b, h). */
Test(backward, softmax_sink) {
  bt_check("attention t {\n" QKV(4, "H")
           "  input sinks : f32[H];\n  s = mask(q @ k^T, j < i);\n  sk = sinks[h];\n"
           "  o = softmax(s, sk) @ v;\n  output o;\n  output lse = logsumexp(s, sk);\n"
           "  grad q, k, v, sinks;\n}\n",
           "B=2,H=2,Sq=4,Skv=5", NULL, NULL, NULL, NULL);
  bt_check("attention t {\n" QKV(4, "H")
           "  input sinks : f32[B, H];\n  s = mask(q @ k^T, j <= i);\n  sk = sinks[b, h];\n"
           "  o = softmax(s, sk) @ v;\n  output o;\n"
           "  output lse = logsumexp(s, sk);\n  grad k, sinks;\n}\n",
           "B=2,H=3,Sq=4,Skv=6", NULL, NULL, NULL, NULL);
}

Test(backward, scale) {
  bt_check("attention t {\n" QKV(4, "H")
           "  scalar scale : f32 = 0.7;\n"
           "  s = (q @ k^T) * scale / 1.3;\n" TAIL "  grad q, k, v;\n}\n",
           "B=1,H=2,Sq=4,Skv=4", NULL, NULL, NULL, NULL);
}

Test(backward, softcap) {
  bt_check("attention t {\n" QKV(4, "H")
           "  s = (q @ k^T) * 0.5;\n  s = 2.0 * tanh(s / 2.0);\n" TAIL
           "  grad q, k, v;\n}\n",
           "B=1,H=2,Sq=4,Skv=5", NULL, NULL, NULL, NULL);
}

Test(backward, alibi_slopes) {
  bt_check("attention t {\n" QKV(4, "H")
           "  input slopes : f32[H];\n"
           "  s = q @ k^T - slopes[h] * f32(i - j);\n" TAIL
           "  grad q, k, v, slopes;\n}\n",
           "B=2,H=2,Sq=4,Skv=4", NULL, NULL, NULL, NULL);
}

Test(backward, bias_broadcast) {
  bt_check("attention t {\n" QKV(4, "H")
           "  input bias : f32[1, H, Sq, Skv];\n"
           "  input rel : f32[Sq, Skv];\n"
           "  s = (q @ k^T + bias[b, h, i, j]) * (1.0 + rel[i, j]);\n" TAIL
           "  grad q, k, v, bias, rel;\n}\n",
           "B=2,H=2,Sq=3,Skv=4", NULL, NULL, NULL, NULL);
}

Test(backward, exp_sigmoid) {
  bt_check("attention t {\n" QKV(4, "H")
           "  s = q @ k^T;\n  s = exp(s * 0.3) + sigmoid(s) * s;\n" TAIL
           "  grad q, k, v;\n}\n",
           "B=1,H=2,Sq=4,Skv=4", NULL, NULL, NULL, NULL);
}

/* softplus (one row of ops.def): on the score path and on a learned
 * per-head slope, each gradient against finite differences. */
Test(backward, softplus) {
  bt_check("attention t {\n" QKV(4, "H")
           "  input raw : f32[H];\n"
           "  s = q @ k^T;\n"
           "  s = -softplus(-s) + softplus(s * 0.5) - softplus(raw[h]) * f32(i - j);\n" TAIL
           "  grad q, k, v, raw;\n}\n",
           "B=2,H=2,Sq=4,Skv=5", NULL, NULL, NULL, NULL);
}

Test(backward, math_functions) {
  bt_check("attention t {\n" QKV(4, "H")
           "  input bias : f32[B, H, Sq, Skv];\n"
           "  s = q @ k^T;\n"
           "  x = abs(bias[b, h, i, j]) + 1.5;\n"
           "  s = s + 0.1 * log(x) + 0.2 * log2(x) + sqrt(x) - rsqrt(x);\n"
           "  s = s + exp2(s * 0.1) + max(s, 0.2) - min(s, -0.3);\n"
           "  s = clamp(s, -3.0, 3.0) + f32(floor(s));\n" TAIL
           "  grad q, k, v, bias;\n}\n",
           "B=1,H=2,Sq=4,Skv=4", NULL, NULL, NULL, NULL);
}

Test(backward, where_select) {
  bt_check("attention t {\n" QKV(4, "H")
           "  input bias : f32[B, H, Sq, Skv];\n"
           "  s = q @ k^T;\n"
           "  s = where(s > 0.0, s * 1.5, bias[b, h, i, j] * s);\n" TAIL
           "  grad q, k, v, bias;\n}\n",
           "B=1,H=2,Sq=4,Skv=5", NULL, NULL, NULL, NULL);
}

Test(backward, gqa) {
  bt_check("attention t {\n" QKV(4, "Hk")
           "  s = (q @ k^T) * 0.5;\n  s = mask(s, j <= i);\n" TAIL
           "  grad q, k, v;\n}\n",
           "B=1,H=4,Hk=2,Sq=4,Skv=4", NULL, NULL, NULL, NULL);
}

/* Packed sequences: each sequence's rows of dq, dk, dv (end-aligned
 * causal through seqlen_q/seqlen_k, GQA; random offsets, so lengths
 * differ and may be 0), and with a sink and dropout (whose mask uses the
 * sequence's own positions). */
Test(backward, packed_sequences) {
  bt_check("attention t {\n  input q : f32[Tq, H, 4];\n  input k : f32[Tk, Hk, 4];\n"
           "  input v : f32[Tk, Hk, 3];\n  input cq : i32[B1];\n  input ck : i32[B1];\n"
           "  s = mask((packed(q, cq) @ packed(k, ck)^T) * 0.5, j <= i + seqlen_k - seqlen_q);\n"
           "  o = softmax(s) @ packed(v, ck);\n  output o;\n  output lse = logsumexp(s);\n"
           "  grad q, k, v;\n}\n",
           "B1=4,H=4,Hk=2,Tq=9,Tk=13", NULL, NULL, NULL, NULL);
  bt_check("attention t {\n  input q : f32[T, H, 4];\n  input k : f32[T, H, 4];\n"
           "  input v : f32[T, H, 4];\n  input cu : i32[B1];\n  input sinks : f32[H];\n"
           "  scalar seed : u64 = 5;\n  sk = sinks[h];\n"
           "  s = mask(packed(q, cu) @ packed(k, cu)^T, j <= i);\n"
           "  p = dropout(softmax(s, sk), 0.25, seed, 3);\n"
           "  o = p @ packed(v, cu);\n  output o;\n  output lse = logsumexp(s, sk);\n"
           "  grad q, k, v, sinks;\n}\n",
           "B1=3,H=2,T=11", NULL, NULL, NULL, NULL);
}

Test(backward, dropout_fixed_mask) {
  bt_check("attention t {\n" QKV(4, "H")
           "  scalar rate : f32 = 0.3;\n  scalar seed : u64 = 42;\n"
           "  scalar off : u64 = 12;\n"
           "  s = q @ k^T;\n  p = softmax(s);\n"
           "  p = dropout(p, rate, seed, off);\n  o = p @ v;\n  output o;\n"
           "  grad q, k, v;\n}\n",
           "B=2,H=2,Sq=4,Skv=6", NULL, NULL, NULL, NULL);
}

/* Rows 0 and 1 keep no key: their gradients are exactly zero, and no
 * gradient anywhere is NaN, even with a softcap over the -inf. */
Test(backward, fully_masked_rows) {
  RefTensor *grads;
  RefArgs args;
  Arena *a;
  bt_check("attention t {\n" QKV(4, "H")
           "  input bias : f32[B, H, Sq, Skv];\n"
           "  s = mask(q @ k^T + bias[b, h, i, j], j <= i - 2);\n"
           "  s = 3.0 * tanh(s / 3.0);\n" TAIL
           "  grad q, k, v, bias;\n}\n",
           "B=1,H=2,Sq=5,Skv=5", NULL, &grads, &args, &a);
  const IrGraph *g = args.g;
  for (int64_t h = 0; h < 2; h++)
    for (int64_t i = 0; i < 2; i++)
      for (int64_t d = 0; d < 4; d++)
        cr_expect_eq(grads[g->q].data[(h * 5 + i) * 4 + d], 0.0);
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].grad)
      for (int64_t e = 0; e < ref_numel(&grads[t]); e++)
        cr_assert(!isnan(grads[t].data[e]), "d%s[%lld] is NaN",
                  g->tensors[t].name, (long long)e);
  for (int t = 0; t < g->ntensors; t++)
    free(grads[t].data);
  free(grads);
  ref_args_free(&args);
  arena_free(a);
}

/* ------------------------------------------------------------ derivation */

static char *bt_dump(const char *text, Arena *a, char **errors) {
  IrGraph *g = bt_graph(text, a);
  Diag d = {0};
  BwdGraph *bg = bwd_derive(g, a, &d);
  *errors = d.out.data ? arena_strdup(a, d.out.data) : NULL;
  diag_free(&d);
  if (!bg)
    return NULL;
  StrBuf out = {0};
  bwd_dump(&out, bg);
  char *s = arena_strdup(a, out.data);
  sb_free(&out);
  return s;
}

Test(backward, derived_chain_is_simplified) {
  Arena *a = arena_new();
  char *err;
  char *s = bt_dump("attention t {\n" QKV(64, "H")
                    "  scalar scale : f32 = 0.125;\n"
                    "  s = (q @ k^T) * scale;\n"
                    "  s = 30.0 * tanh(s / 30.0);\n" TAIL
                    "  grad q, k;\n}\n", a, &err);
  cr_assert(s, "%s", err);
  /* 30 * ... / 30 cancels; the scale folds out of dRaw into dq, dk. */
  cr_expect(strstr(s, "  $0 = mul %8, %8 : f32 [bhij]"), "%s", s);
  cr_expect(strstr(s, "  $1 = sub 1.0, $0 : f32 [bhij]"), "%s", s);
  cr_expect(strstr(s, "  $2 = mul ds, $1 : f32 [bhij]"), "%s", s);
  cr_expect(strstr(s, "  draw = $2 : f32 [bhij]  # d%2, times %3"), "%s", s);
  cr_expect(strstr(s, "  dq = (draw @ k) * %3 : f32[B, H, Sq, 64]"), "%s", s);
  cr_expect(!strstr(s, "  dv ="), "%s", s);
  cr_expect(!strstr(s, "$3"), "%s", s);
  arena_free(a);
}

Test(backward, refuses_bias_read_out_of_order) {
  Arena *a = arena_new();
  char *err;
  char *s = bt_dump("attention t {\n" QKV(64, "H")
                    "  input bias : f32[B, H, Skv, Sq];\n"
                    "  s = q @ k^T + bias[b, h, j, i];\n" TAIL
                    "  grad bias;\n}\n", a, &err);
  cr_assert_null(s);
  cr_assert(err);
  cr_expect(strstr(err, "<test>:6:17: error: the gradient of 'bias' needs it "
                        "read as bias[b, h, i, j]"), "%s", err);
  cr_expect(strstr(err, "note: 'bias' is declared with grad"), "%s", err);
  arena_free(a);
}

/* A softmax sink is a constant of the score chain (the saved lse includes
 * it): q, k, v get their usual gradients; the sink's own gradient exists
 * when the sink is the tensor read directly over b and h and nowhere
 * else, and is refused at the read otherwise. */
Test(backward, a_softmax_sink_gradient_needs_a_direct_read) {
  Arena *a = arena_new();
  char *err;
#define SINK_GRAPH(GRAD)                                                                  \
  "attention t {\n" QKV(64, "H") "  input sinks : f32[H];\n  s = q @ k^T;\n"               \
  "  sk = sinks[h];\n  o = softmax(s, sk) @ v;\n  output o;\n"                              \
  "  output lse = logsumexp(s, sk);\n  grad " GRAD ";\n}\n"
  char *s = bt_dump(SINK_GRAPH("q, k, v"), a, &err);
  cr_assert(s, "%s", err ? err : "");
  cr_expect(strstr(s, "dq ="), "%s", s);
  s = bt_dump(SINK_GRAPH("q, sinks"), a, &err);
  cr_assert(s, "%s", err ? err : "");
  cr_expect(strstr(s, "dsinks = -rowsum(exp(sink - lse) * delta), the softmax sink's gradient, "
                      "summed over bi : f32[H]"), "%s", s);
#undef SINK_GRAPH
  /* Through an expression, or read by the scores too: refused. */
  s = bt_dump("attention t {\n" QKV(64, "H") "  input sinks : f32[H];\n  s = q @ k^T;\n"
              "  sk = 2.0 * sinks[h];\n  o = softmax(s, sk) @ v;\n  output o;\n"
              "  output lse = logsumexp(s, sk);\n  grad q, sinks;\n}\n", a, &err);
  cr_assert_null(s);
  cr_expect(strstr(err, "<test>:7:14: error: the gradient of a softmax sink is computed when the "
                        "sink is the tensor read directly, as sinks[h] or sinks[b, h]; 'sinks' "
                        "is declared with grad"), "%s", err);
  s = bt_dump("attention t {\n" QKV(64, "H") "  input sinks : f32[H];\n"
              "  s = q @ k^T + sinks[h];\n  sk = sinks[h];\n  o = softmax(s, sk) @ v;\n"
              "  output o;\n  output lse = logsumexp(s, sk);\n  grad q, sinks;\n}\n", a, &err);
  cr_assert_null(s);
  cr_expect(strstr(err, "is the softmax's sink and is read here too"), "%s", err);
  arena_free(a);
}

Test(backward, refuses_ops_on_the_output) {
  Arena *a = arena_new();
  char *err;
  char *s = bt_dump("attention t {\n" QKV(64, "H")
                    "  s = q @ k^T;\n  p = softmax(s);\n"
                    "  output o = (p @ v) + 2.0;\n  grad q;\n}\n", a, &err);
  cr_assert_null(s);
  cr_expect(strstr(err, "error: the backward pass needs p @ v, or p @ v times values fixed "
                        "per (b, h), as an output"), "%s", err);
  arena_free(a);
}

/* ----------------------------------------------------------------- Philox */

/* Random123's known-answer vectors for philox4x32 with 10 rounds; two
 * independent implementations (this one and a Python transcription of
 * the paper's round function) reproduce them. */
Test(philox, known_answers) {
  static const uint32_t ctr[3][4] = {
      {0, 0, 0, 0},
      {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
      {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
  static const uint32_t key[3][2] = {
      {0, 0}, {0xffffffff, 0xffffffff}, {0xa4093822, 0x299f31d0}};
  static const uint32_t want[3][4] = {
      {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
      {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
      {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int t = 0; t < 3; t++) {
    uint32_t out[4];
    philox_4x32_10(ctr[t], key[t], out);
    for (int w = 0; w < 4; w++)
      cr_expect_eq(out[w], want[t][w], "vector %d word %d: %08x, want %08x",
                   t, w, out[w], want[t][w]);
  }
}

/* The documented layout, checked against values computed by an
 * independent Python transcription (which reproduces the known answers
 * above): rows and keys with bits 0 and 3 set or clear, and a key past
 * 2^32 whose counter word 0 truncates to key 29's. */
Test(philox, dropout_layout) {
  uint64_t seed = UINT64_C(0x123456789abcdef0);
  uint64_t off = UINT64_C(0x1122334455667788);
  cr_expect_eq(philox_dropout_byte(seed, off, 0, 0, 0, 0, 3, 40), 0x2au);
  cr_expect_eq(philox_dropout_byte(seed, off, 1, 2, 4, 7, 3, 40), 0x1au);
  cr_expect_eq(philox_dropout_byte(seed, off, 0, 1, 3, 2, 3, 40), 0xf3u);
  cr_expect_eq(philox_dropout_byte(seed, off, 1, 2, 13, 25, 3, 40), 0xa6u);
  cr_expect_eq(philox_dropout_byte(seed, off, 0, 1, 9, 40, 3, 40), 0x45u);
  cr_expect_eq(philox_dropout_byte(seed, off, 1, 0, 30, 8, 3, 40), 0x3du);
  cr_expect_eq(philox_dropout_byte(seed, off, 1, 2, 13, 29, 3, 40), 0x3cu);
  cr_expect_eq(philox_dropout_byte(seed, off, 1, 2, 13, (INT64_C(1) << 36) + 29, 3, 40), 0x3cu);
}

/* The 16-element group at (i, j), bits 0 and 3 of both clear, is ONE
 * Philox call: element (i + di, j + dj) is byte 2 (di & 1) + (dj & 1) of
 * word 2 (di >> 3) + (dj >> 3) (the group at b 1, h 2, i 18, j 36 against
 * the Python transcription's bytes), and the groups next to it (2 or 16
 * rows or keys on) draw other words. */
Test(philox, dropout_group) {
  uint64_t seed = UINT64_C(0x123456789abcdef0);
  uint64_t off = UINT64_C(0x1122334455667788);
  static const int64_t d[4] = {0, 1, 8, 9};
  static const uint32_t want[16] = {0xcc, 0x61, 0x40, 0xbd, 0x4b, 0x0a, 0xb3, 0x68,
                                    0x1c, 0xd2, 0x30, 0x0f, 0xe5, 0x47, 0xd9, 0x61};
  for (int e = 0; e < 16; e++)
    cr_expect_eq(philox_dropout_byte(seed, off, 1, 2, 18 + d[e >> 2], 36 + d[e & 3], 3, 40),
                 want[e], "element %d", e);
  static const int64_t base[][2] = {{0, 0}, {16, 32}, {6, 6}, {34, 86}, {2, 0}};
  for (size_t t = 0; t < sizeof base / sizeof base[0]; t++) {
    int64_t i = base[t][0], j = base[t][1];
    uint32_t ctr[4] = {(uint32_t)(((j >> 4) << 2) | ((j >> 1) & 3)),
                       (uint32_t)((1 * 3 + 2) * 40 + i), (uint32_t)off, (uint32_t)(off >> 32)};
    uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)}, w[4];
    philox_4x32_10(ctr, key, w);
    uint32_t got[16];
    for (int e = 0; e < 16; e++) {
      int64_t di = d[e >> 2], dj = d[e & 3];
      uint32_t want_b = (w[2 * (di >> 3) + (dj >> 3)] >> (8 * (2 * (di & 1) + (dj & 1)))) & 0xff;
      got[e] = philox_dropout_byte(seed, off, 1, 2, i + di, j + dj, 3, 40);
      cr_expect_eq(got[e], want_b, "group (%lld, %lld) element %d", (long long)i, (long long)j, e);
    }
    static const int64_t step[4][2] = {{2, 0}, {0, 2}, {16, 0}, {0, 16}};
    for (int s = 0; s < 4; s++) {
      int same = 0;
      for (int e = 0; e < 16; e++)
        same += philox_dropout_byte(seed, off, 1, 2, i + step[s][0] + d[e >> 2],
                                    j + step[s][1] + d[e & 3], 3, 40) == got[e];
      /* 16 bytes of another call: about 16/256 equal by chance. */
      cr_expect(same < 5, "group (%lld, %lld) and its neighbour %d share %d bytes", (long long)i,
                (long long)j, s, same);
    }
  }
}

Test(philox, keep_threshold) {
  cr_expect_eq(philox_keep_threshold(0.0), 0u);
  cr_expect_eq(philox_keep_threshold(-1.0), 0u);
  cr_expect_eq(philox_keep_threshold(NAN), 0u);
  cr_expect_eq(philox_keep_threshold(0.5), 128u);
  cr_expect_eq(philox_keep_threshold(1.0), 256u);
  cr_expect_eq(philox_keep_threshold(2.0), 256u);
  cr_expect_eq(philox_keep_threshold((double)0.1f), 26u); /* 25.6 */
  cr_expect_eq(philox_keep_threshold(1e-6), 1u);          /* positive: at least 1/256 */
  cr_expect_eq(philox_keep_threshold(0.9999), 255u);      /* below 1: at most 255/256 */
  cr_expect_eq(philox_keep_threshold(0.25), 64u);
  cr_expect(fabs(philox_kept_scale(26) - 256.0 / 230.0) < 1e-15);
  cr_expect_eq(philox_kept_scale(0), 1.0);
  cr_expect_eq(philox_kept_scale(256), 0.0);
}

/* 10^6 draws at rate 0.1 (26/256) keep 10^6 * 230/256 +- 5 sigma, and each
 * byte value comes up about equally often (chi-square, 255 degrees of
 * freedom, below its 99.99th percentile). */
Test(philox, keep_rate) {
  uint32_t thresh = philox_keep_threshold((double)0.1f);
  uint64_t kept = 0, hist[256] = {0};
  for (int64_t i = 0; i < 1000; i++)
    for (int64_t j = 0; j < 1000; j++) {
      uint32_t v = philox_dropout_byte(3, 0, 0, 1, i, j, 2, 1000);
      kept += v >= thresh;
      hist[v]++;
    }
  double q = 26.0 / 256, want = 1e6 * (1 - q), sigma = sqrt(1e6 * q * (1 - q));
  cr_expect(fabs((double)kept - want) < 5 * sigma, "kept %llu of 10^6",
            (unsigned long long)kept);
  double chi2 = 0, e = 1e6 / 256;
  for (int v = 0; v < 256; v++)
    chi2 += (hist[v] - e) * (hist[v] - e) / e;
  cr_expect(chi2 < 356, "chi-square %.1f over the byte values", chi2);
}

/* With v the identity, O is the dropped P: every element is P * 256 /
 * (256 - T) exactly where the documented byte says keep, else 0. */
Test(philox, forward_reference_mask) {
#define BT_DROPOUT_GRAPH(DROP)                                               \
  "attention t {\n  input q : f32[B, H, S, 8];\n"                             \
  "  input k : f32[B, H, S, 8];\n  input v : f32[B, H, S, 8];\n"              \
  "  s = q @ k^T;\n  p = softmax(s);\n" DROP "  o = p @ v;\n  output o;\n}\n"
  static const char *const text[2] = {
      BT_DROPOUT_GRAPH(""),
      BT_DROPOUT_GRAPH("  p = dropout(p, 0.25, 77, 5);\n")};
  Arena *a = arena_new();
  RefArgs args[2];
  StrBuf err = {0};
  for (int t = 0; t < 2; t++) {
    args[t] = (RefArgs){.g = bt_graph(text[t], a)};
    cr_assert_eq(ref_make_inputs(&args[t], "B=2,H=3,S=8", 5, &err), 0);
    RefTensor *v = &args[t].tensors[args[t].g->v];
    for (int64_t e = 0; e < ref_numel(v); e++)
      v->data[e] = (e / 8) % 8 == e % 8;
    cr_assert_eq(ref_forward(&args[t], &err), 0, "%s", err.data);
  }
  int ot = args[0].g->outputs[0].tensor;
  const double *p = args[0].tensors[ot].data, *pd = args[1].tensors[ot].data;
  uint32_t thresh = philox_keep_threshold((double)0.25f);
  double kept = philox_kept_scale(thresh);
  int dropped = 0;
  for (int64_t b = 0; b < 2; b++)
    for (int64_t h = 0; h < 3; h++)
      for (int64_t i = 0; i < 8; i++)
        for (int64_t j = 0; j < 8; j++) {
          int64_t e = ((b * 3 + h) * 8 + i) * 8 + j;
          bool keep = philox_dropout_byte(77, 5, b, h, i, j, 3, 8) >= thresh;
          dropped += !keep;
          cr_expect_eq(pd[e], keep ? p[e] * kept : 0.0,
                       "b=%lld h=%lld i=%lld j=%lld", (long long)b,
                       (long long)h, (long long)i, (long long)j);
        }
  cr_expect(dropped > 0 && dropped < 384, "dropped %d of 384", dropped);
  ref_args_free(&args[0]);
  ref_args_free(&args[1]);
  sb_free(&err);
  arena_free(a);
}

/* ------------------------------------------------ threads change no bit */

/* The forward and backward references at S 1024 (enough work for several
 * threads in each large loop: ref_parallel_rows) with GQA, a sink, a
 * softcap, dropout and a causal mask, run with ATTN_REF_THREADS 1 and 3:
 * every output and gradient the same bits. */
Test(backward, threads_give_the_same_bits) {
  const char *text = "attention t {\n" QKV(64, "Hk")
                     "  input sinks : f32[H];\n"
                     "  scalar seed : u64 = 5;\n"
                     "  s = mask(20.0 * tanh((q @ k^T) * 0.125 / 20.0), j <= i);\n"
                     "  sk = sinks[h];\n"
                     "  p = dropout(softmax(s, sk), 0.125, seed, 0);\n"
                     "  o = p @ v;\n  output o;\n"
                     "  output lse = logsumexp(s, sk);\n"
                     "  grad q, k, v, sinks;\n}\n";
  double *got[2][8] = {{0}};
  int64_t len[8] = {0};
  for (int run = 0; run < 2; run++) {
    setenv("ATTN_REF_THREADS", run ? "3" : "1", 1);
    BtRun r = bt_run(text, "B=1,H=2,Hk=1,S=1024", NULL);
    int k = 0;
    for (int t = 0; t < r.g->ntensors && k < 8; t++) {
      const RefTensor *x = r.g->tensors[t].is_output ? &r.args.tensors[t]
                           : r.g->tensors[t].grad    ? &r.grads[t]
                                                     : NULL;
      if (!x) continue;
      len[k] = ref_numel(x);
      got[run][k] = malloc((size_t)len[k] * sizeof(double));
      memcpy(got[run][k], x->data, (size_t)len[k] * sizeof(double));
      k++;
    }
    bt_run_free(&r);
  }
  unsetenv("ATTN_REF_THREADS");
  for (int k = 0; k < 8 && got[0][k]; k++) {
    cr_assert(memcmp(got[0][k], got[1][k], (size_t)len[k] * sizeof(double)) == 0,
              "result %d differs between 1 and 3 threads", k);
    free(got[0][k]);
    free(got[1][k]);
  }
}
