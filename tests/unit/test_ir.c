/* test_ir.c: AST -> IR: types, domains, landmarks, shapes, output
 * defaults, constant folding of defaults, and error reporting. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "attnc.h"

static Arena *arena;
static Diag diag;

static void setup(void) {
  arena = arena_new();
  memset(&diag, 0, sizeof diag);
}

static void teardown(void) {
  diag_free(&diag);
  arena_free(arena);
}

TestSuite(ir, .init = setup, .fini = teardown);

/* Parses and builds text; NULL when either reports an error. */
static IrModule *build(const char *text) {
  Source *src = source_from_string(arena, "t.attn", text, strlen(text));
  AstFile *ast = parse_source(src, arena, &diag);
  cr_assert_eq(diag.nerrors, 0, "parse failed:\n%s", diag.out.data);
  return ir_build(ast, arena, &diag);
}

static IrGraph *build_ok(const char *text) {
  IrModule *m = build(text);
  cr_assert_not_null(m, "ir_build failed:\n%s", diag.out.data);
  cr_assert_eq(m->ngraphs, 1);
  return m->graphs[0];
}

#define QKV(d)                                                                 \
  "  input q : bf16[B, H, Sq, " #d "];\n"                                      \
  "  input k : bf16[B, Hk, Skv, " #d "];\n"                                    \
  "  input v : bf16[B, Hk, Skv, " #d "];\n"

#define CHAIN "  s = q @ k^T;\n  p = softmax(s);\n  o = p @ v;\n"

/* The last node bound to a local name. */
static const IrNode *named(const IrGraph *g, const char *name) {
  for (int k = g->nnodes - 1; k >= 0; k--)
    if (g->nodes[k]->name && !strcmp(g->nodes[k]->name, name))
      return g->nodes[k];
  cr_assert_fail("no node named %s", name);
  return NULL;
}

static const IrTensor *tensor(const IrGraph *g, const char *name) {
  for (int k = 0; k < g->ntensors; k++)
    if (!strcmp(g->tensors[k].name, name)) return &g->tensors[k];
  cr_assert_fail("no tensor %s", name);
  return NULL;
}

Test(ir, op_table) {
  cr_expect_str_eq(ir_op_name(IR_QK), "matmul_qk");
  cr_expect_str_eq(ir_op_name(IR_AMAX), "amax");
  cr_expect_eq(ir_op_arity(IR_DROPOUT), 4);
  cr_expect_eq(ir_op_arity(IR_LOAD), -1);
  cr_expect_eq(ir_op_arity(IR_WHERE), 3);
}

Test(ir, landmarks_and_domains) {
  IrGraph *g = build_ok("attention a {\n" QKV(128) CHAIN
                        "  output o;\n  output lse = logsumexp(s);\n}\n");
  cr_assert_not_null(g->qk);
  cr_assert_not_null(g->softmax);
  cr_assert_not_null(g->pv);
  cr_expect_eq(g->qk->op, IR_QK);
  cr_expect_eq(g->qk->dom, DOM_B | DOM_H | DOM_I | DOM_J);
  cr_expect_eq(g->pv->dom, DOM_B | DOM_H | DOM_I | DOM_D);
  cr_expect_eq(g->pv->src[0], g->softmax);
  cr_expect_str_eq(g->tensors[g->q].name, "q");
  cr_expect_str_eq(g->tensors[g->k].name, "k");
  cr_expect_str_eq(g->tensors[g->v].name, "v");
  const IrNode *lse = named(g, "lse");
  cr_expect_eq(lse->op, IR_LOGSUMEXP);
  cr_expect_eq(lse->dom, DOM_B | DOM_H | DOM_I);
  cr_expect_eq(lse->src[0], g->softmax->src[0]);
  for (int k = 1; k < g->nnodes; k++) cr_expect_eq(g->nodes[k]->id, k);
}

Test(ir, gqa_dims_in_first_appearance_order) {
  IrGraph *g = build_ok("attention a {\n" QKV(64) CHAIN "  output o;\n}\n");
  const char *want[] = {"B", "H", "Sq", "Hk", "Skv"};
  cr_assert_eq(g->ndims, 5);
  for (int k = 0; k < 5; k++) cr_expect_str_eq(g->dims[k].name, want[k]);
  const IrTensor *k = tensor(g, "k");
  cr_expect_eq(k->dim_sym[1], 3); /* Hk */
  cr_expect_eq(k->dim_sym[3], -1);
  cr_expect_eq(k->dim_val[3], 64);
}

Test(ir, gqa_literal_heads_must_divide) {
  IrModule *m = build("attention a {\n"
                      "  input q : f16[B, 8, S, 64];\n"
                      "  input k : f16[B, 3, S, 64];\n"
                      "  input v : f16[B, 3, S, 64];\n" CHAIN
                      "  output o;\n}\n");
  cr_expect_null(m);
  cr_expect(strstr(diag.out.data, "does not divide") != NULL);
}

Test(ir, output_defaults) {
  IrGraph *g = build_ok("attention a {\n"
                        "  input q : f16[B, H, Sq, 128];\n"
                        "  input k : f16[B, H, Skv, 128];\n"
                        "  input v : f16[B, H, Skv, 64];\n" CHAIN
                        "  output o;\n  output lse = logsumexp(s);\n"
                        "  output m = amax(o);\n}\n");
  cr_assert_eq(g->noutputs, 3);
  cr_assert_eq(g->ntensors, 6);
  const IrTensor *o = &g->tensors[g->outputs[0].tensor];
  cr_expect(o->is_output);
  cr_expect_eq(o->type, DT_F16);
  cr_assert_eq(o->ndims, 4);
  cr_expect_str_eq(g->dims[o->dim_sym[2]].name, "Sq");
  cr_expect_eq(o->dim_sym[3], -1);
  cr_expect_eq(o->dim_val[3], 64); /* v's head dimension */
  const IrTensor *lse = &g->tensors[g->outputs[1].tensor];
  cr_expect_eq(lse->type, DT_F32);
  cr_expect_eq(lse->ndims, 3);
  const IrTensor *mx = &g->tensors[g->outputs[2].tensor];
  cr_expect_eq(mx->type, DT_F32);
  cr_expect_eq(mx->ndims, 1);
  cr_expect_eq(mx->dim_val[0], 1);
  cr_expect_eq(g->outputs[2].value->op, IR_AMAX);
}

Test(ir, types_of_loads_and_arithmetic) {
  IrGraph *g = build_ok(
      "attention a {\n" QKV(128)
      "  input lens : i32[B];\n  input bias : bf16[1, H, Sq, Skv];\n"
      "  input keep : bool[B, Skv];\n  scalar seed : u64 = 3;\n"
      "  s = q @ k^T;\n"
      "  n = lens[b];\n  x = bias[b, h, i, j];\n  w = keep[b, j];\n"
      "  y = n + seed;\n  z = n / 2;\n  f = n * 0.5;\n  c = i < n;\n"
      "  g = clamp(j - i, 0, 7);\n  r = f32(i);\n  t = i32(x);\n"
      "  s = mask(s + x, c && w);\n" "  p = softmax(s);\n  o = p @ v;\n"
      "  output o;\n}\n");
  cr_expect_eq(named(g, "n")->type, DT_I32);
  cr_expect_eq(named(g, "n")->dom, DOM_B);
  cr_expect_eq(named(g, "x")->type, DT_F32); /* bf16 loads compute in f32 */
  cr_expect_eq(named(g, "x")->dom, DOM_B | DOM_H | DOM_I | DOM_J);
  cr_expect_eq(named(g, "w")->type, DT_BOOL);
  cr_expect_eq(named(g, "y")->type, DT_U64);
  cr_expect_eq(named(g, "z")->type, DT_I32);
  cr_expect_eq(named(g, "f")->type, DT_F32);
  cr_expect_eq(named(g, "c")->type, DT_BOOL);
  cr_expect_eq(named(g, "c")->dom, DOM_B | DOM_I);
  const IrNode *cl = named(g, "g");
  cr_expect_eq(cl->op, IR_MIN); /* clamp = min(max(x, lo), hi) */
  cr_expect_eq(cl->src[0]->op, IR_MAX);
  cr_expect_eq(cl->type, DT_I32);
  cr_expect_eq(named(g, "r")->op, IR_CAST);
  cr_expect_eq(named(g, "r")->type, DT_F32);
  cr_expect_eq(named(g, "t")->type, DT_I32);
}

Test(ir, dims_are_i32_values) {
  IrGraph *g = build_ok("attention a {\n" QKV(128)
                        "  s = mask(q @ k^T, j <= i + Skv - Sq);\n"
                        "  p = softmax(s);\n  o = p @ v;\n  output o;\n}\n");
  int dims = 0;
  for (int k = 0; k < g->nnodes; k++)
    if (g->nodes[k]->op == IR_DIM) {
      cr_expect_eq(g->nodes[k]->type, DT_I32);
      cr_expect_eq(g->nodes[k]->dom, 0u);
      dims++;
    }
  cr_expect_eq(dims, 2);
}

Test(ir, scalar_defaults_fold) {
  IrGraph *g = build_ok("attention a {\n" QKV(64)
                        "  scalar scale : f32 = 1.0 / sqrt(64.0);\n"
                        "  scalar n : i32 = -7 / 2;\n"
                        "  scalar m : i32 = -7 % 3;\n"
                        "  scalar c : f32 = clamp(9, 1, 4) * 2;\n"
                        "  scalar f : bool = 3 > 2 && !false;\n"
                        "  scalar w : f32 = where(1 < 2, -inf, 0.0);\n"
                        "  scalar none : f32;\n" CHAIN "  output o;\n}\n");
  cr_assert_eq(g->nscalars, 7);
  cr_expect_float_eq(g->scalars[0].fdefault, 0.125, 1e-15);
  cr_expect_eq(g->scalars[1].idefault, -3); /* truncates like C */
  cr_expect_eq(g->scalars[2].idefault, -1);
  cr_expect_float_eq(g->scalars[3].fdefault, 8.0, 0);
  cr_expect_eq(g->scalars[4].idefault, 1);
  cr_expect(isinf(g->scalars[5].fdefault) && g->scalars[5].fdefault < 0);
  cr_expect_not(g->scalars[6].has_default);
}

Test(ir, grad_marks_inputs) {
  IrGraph *g = build_ok("attention a {\n" QKV(128) CHAIN
                        "  output o;\n  grad q, v;\n}\n");
  cr_expect(tensor(g, "q")->grad);
  cr_expect_not(tensor(g, "k")->grad);
  cr_expect(tensor(g, "v")->grad);
}

Test(ir, several_errors_in_one_run) {
  IrModule *m = build("attention a {\n" QKV(128)
                      "  x = nope + 1;\n  q = 2;\n  y = j && i;\n" CHAIN
                      "  output o;\n  output zz;\n}\n");
  cr_expect_null(m);
  cr_expect_eq(diag.nerrors, 4, "%s", diag.out.data);
  cr_expect(strstr(diag.out.data, "unknown name 'nope'") != NULL);
  cr_expect(strstr(diag.out.data, "cannot assign to input 'q'") != NULL);
  cr_expect(strstr(diag.out.data, "needs bool operands") != NULL);
  cr_expect(strstr(diag.out.data, "output 'zz' is never defined") != NULL);
}

Test(ir, chain_errors) {
  IrModule *m = build("attention a {\n" QKV(128)
                      "  s = q @ k^T;\n  p = softmax(s);\n  p2 = p + 1.0;\n"
                      "  o = p @ v;\n  o2 = o * s;\n  output o;\n}\n");
  cr_expect_null(m);
  cr_expect_eq(diag.nerrors, 2, "%s", diag.out.data);
  cr_expect(strstr(diag.out.data, "may only feed dropout") != NULL);
  cr_expect(strstr(diag.out.data, "key positions (j)") != NULL);
}

Test(ir, no_graph) {
  cr_expect_null(build("# nothing\n"));
  cr_expect(strstr(diag.out.data, "t.attn:1:1: error: no attention graph in "
                                  "t.attn") != NULL, "%s", diag.out.data);
}

/* ir_build is defensive about partial ASTs: error placeholders and
 * statements with missing parts report nothing new and never crash. */
Test(ir, partial_ast) {
  Source *src = source_from_string(arena, "t.attn", "x", 1);
  Loc loc = {.src = src, .line = 1, .col = 1, .len = 1};
  AstExpr err = {.kind = AST_ERROR, .loc = loc};
  AstExpr *args[2] = {&err, &err};
  AstExpr bin = {.kind = AST_BINARY, .op = BIN_MATMUL, .loc = loc,
                 .args = args, .nargs = 2};
  AstStmt a = {.kind = STMT_ASSIGN, .loc = loc, .name = "s", .name_loc = loc,
               .value = &bin};
  AstStmt o = {.kind = STMT_OUTPUT, .loc = loc, .name = "s", .name_loc = loc};
  AstStmt *stmts[3] = {&a, &o, NULL};
  AstGraph gr = {.name = "g", .loc = loc, .stmts = stmts, .nstmts = 3};
  AstGraph *grs[1] = {&gr};
  AstFile f = {.src = src, .graphs = grs, .ngraphs = 1};
  diag.nerrors = 1; /* as after a parse error */
  cr_expect_null(ir_build(&f, arena, &diag));
  cr_expect_eq(diag.nerrors, 1, "%s", diag.out.data ? diag.out.data : "");
}

Test(ir, dump_and_dot) {
  IrGraph *g = build_ok("attention a {\n" QKV(128)
                        "  scalar scale : f32 = 0.5;\n"
                        "  s = (q @ k^T) * scale;\n  unused = s * 2.0;\n"
                        "  p = softmax(s);\n  o = p @ v;\n  output o;\n}\n");
  StrBuf out = {0};
  ir_dump(&out, g);
  cr_expect(strstr(out.data, "graph a  # t.attn:1:11\n") != NULL, "%s", out.data);
  cr_expect(strstr(out.data, "  scalar scale : f32 = 0.5\n") != NULL);
  cr_expect(strstr(out.data, "= matmul_qk %0, %1 : f32 [bhij]  # 6:8\n") != NULL,
            "%s", out.data);
  cr_expect(strstr(out.data, "const 2.0 : f32 []  # 7:16 dead\n") != NULL,
            "%s", out.data);
  cr_expect(strstr(out.data, "  output o = %") != NULL);
  out.len = 0;
  ir_dot(&out, g);
  cr_expect(strncmp(out.data, "digraph \"a\" {", 13) == 0);
  cr_expect(strstr(out.data, "n0 -> n2;") != NULL, "%s", out.data);
  sb_free(&out);
}
