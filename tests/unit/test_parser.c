/* Unit tests for the parser (grammar/attn.y): precedence, every statement
 * form, locations, recovery, and the limits that keep later passes safe. */
#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

#include "attnc.h"

static Arena *arena;
static Diag d;

static void setup(void) {
  arena = arena_new();
  memset(&d, 0, sizeof d);
}

static void teardown(void) {
  diag_free(&d);
  arena_free(arena);
}

TestSuite(parser, .init = setup, .fini = teardown);

/* CPU seconds allowed for 10 MB: about 0.5 s is typical without
 * sanitizers; ASan multiplies it several times. */
#if defined(__SANITIZE_ADDRESS__)
#define PARSE_BUDGET_SECS 30.0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PARSE_BUDGET_SECS 30.0
#endif
#endif
#ifndef PARSE_BUDGET_SECS
#define PARSE_BUDGET_SECS 2.0
#endif

static AstFile *parse_n(const char *text, size_t len) {
  const Source *s = source_from_string(arena, "p.attn", text, len);
  AstFile *f = parse_source(s, arena, &d);
  cr_assert_not_null(f);
  return f;
}

static AstFile *parse(const char *text) {
  return parse_n(text, strlen(text));
}

/* Writes an expression as a fully parenthesized s-expression. */
static void sexpr(StrBuf *sb, const AstExpr *e) {
  switch (e->kind) {
  case AST_INT: sb_printf(sb, "%lld", (long long)e->ival); break;
  case AST_FLOAT: sb_printf(sb, "%g", e->fval); break;
  case AST_BOOL: sb_puts(sb, e->ival ? "true" : "false"); break;
  case AST_NAME: sb_puts(sb, e->name); break;
  case AST_ERROR: sb_puts(sb, "<error>"); break;
  case AST_UNARY:
    sb_puts(sb, e->op == UN_NEG ? "(neg " : "(not ");
    sexpr(sb, e->args[0]);
    sb_putc(sb, ')');
    break;
  case AST_TRANSPOSE:
    sb_puts(sb, "(T ");
    sexpr(sb, e->args[0]);
    sb_putc(sb, ')');
    break;
  case AST_BINARY:
    sb_printf(sb, "(%s ", binop_spelling((BinOp)e->op));
    sexpr(sb, e->args[0]);
    sb_putc(sb, ' ');
    sexpr(sb, e->args[1]);
    sb_putc(sb, ')');
    break;
  case AST_CALL:
  case AST_INDEX:
    sb_printf(sb, "(%s%s", e->kind == AST_CALL ? "call " : "index ", e->name);
    for (int i = 0; i < e->nargs; i++) {
      sb_putc(sb, ' ');
      sexpr(sb, e->args[i]);
    }
    sb_putc(sb, ')');
    break;
  }
}

/* Parses "attention g { s = EXPR; }" and returns EXPR as an s-expression. */
static const char *expr_of(const char *expr) {
  char *text = arena_printf(arena, "attention g { s = %s; }", expr);
  AstFile *f = parse(text);
  cr_assert_eq(d.nerrors, 0, "%s: %s", expr, d.out.data);
  cr_assert_eq(f->ngraphs, 1);
  cr_assert_eq(f->graphs[0]->nstmts, 1);
  StrBuf sb = {0};
  sexpr(&sb, f->graphs[0]->stmts[0]->value);
  char *out = arena_strdup(arena, sb.data);
  sb_free(&sb);
  return out;
}

Test(parser, precedence) {
  cr_assert_str_eq(expr_of("a + b * c"), "(+ a (* b c))");
  cr_assert_str_eq(expr_of("a * b + c"), "(+ (* a b) c)");
  cr_assert_str_eq(expr_of("a - b - c"), "(- (- a b) c)");
  cr_assert_str_eq(expr_of("a / b % c @ d"), "(@ (% (/ a b) c) d)");
  cr_assert_str_eq(expr_of("a || b && c"), "(|| a (&& b c))");
  cr_assert_str_eq(expr_of("a && b || c"), "(|| (&& a b) c)");
  cr_assert_str_eq(expr_of("a == b < c"), "(== a (< b c))");
  cr_assert_str_eq(expr_of("a != b == c"), "(== (!= a b) c)");
  cr_assert_str_eq(expr_of("a < b + c"), "(< a (+ b c))");
  cr_assert_str_eq(expr_of("a <= b >= c > d"), "(> (>= (<= a b) c) d)");
  cr_assert_str_eq(expr_of("j <= i && j > i - w"),
                   "(&& (<= j i) (> j (- i w)))");
}

Test(parser, prefix_and_postfix) {
  cr_assert_str_eq(expr_of("-a * b"), "(* (neg a) b)");
  cr_assert_str_eq(expr_of("- -a"), "(neg (neg a))");
  cr_assert_str_eq(expr_of("!a && b"), "(&& (not a) b)");
  cr_assert_str_eq(expr_of("-k^T"), "(neg (T k))");
  cr_assert_str_eq(expr_of("q @ k^T"), "(@ q (T k))");
  cr_assert_str_eq(expr_of("k^T^T"), "(T (T k))");
  cr_assert_str_eq(expr_of("(q @ k)^T"), "(T (@ q k))");
  cr_assert_str_eq(expr_of("(a + b) * c"), "(* (+ a b) c)");
}

Test(parser, primaries) {
  cr_assert_str_eq(expr_of("42"), "42");
  cr_assert_str_eq(expr_of("1.5 + .5"), "(+ 1.5 0.5)");
  cr_assert_str_eq(expr_of("true || false"), "(|| true false)");
  cr_assert_str_eq(expr_of("f()"), "(call f)");
  cr_assert_str_eq(expr_of("mask(s, j <= i)"), "(call mask s (<= j i))");
  cr_assert_str_eq(expr_of("bias[b, h, i, j]"), "(index bias b h i j)");
  cr_assert_str_eq(expr_of("rel[h, clamp(j - i + 128, 0, 255)]"),
                   "(index rel h (call clamp (+ (- j i) 128) 0 255))");
  cr_assert_str_eq(expr_of("f32(x) + i32(y)"), "(+ (call f32 x) (call i32 y))");
}

Test(parser, statement_forms) {
  AstFile *f = parse("attention g {\n"
                     "  input q : bf16[B, H, Sq, 64];\n"
                     "  scalar scale : f32 = 0.125;\n"
                     "  scalar w : i32;\n"
                     "  s = q;\n"
                     "  output o : f32[B, 1] = s;\n"
                     "  output p;\n"
                     "  output r : e4m3;\n"
                     "  output lse = s;\n"
                     "  grad q, k , v;\n"
                     "}\n"
                     "attention empty { }\n");
  cr_assert_eq(d.nerrors, 0, "%s", d.out.data);
  cr_assert_eq(f->ngraphs, 2);
  AstGraph *g = f->graphs[0];
  cr_assert_str_eq(g->name, "g");
  cr_assert_eq(g->nstmts, 9);
  AstStmt **s = g->stmts;

  cr_assert_eq(s[0]->kind, STMT_INPUT);
  cr_assert_str_eq(s[0]->name, "q");
  cr_assert(s[0]->has_type && s[0]->type.has_shape);
  cr_assert_eq(s[0]->type.dtype, DT_BF16);
  cr_assert_eq(s[0]->type.ndims, 4);
  cr_assert_str_eq(s[0]->type.dims[2].sym, "Sq");
  cr_assert_null(s[0]->type.dims[3].sym);
  cr_assert_eq(s[0]->type.dims[3].value, 64);
  cr_assert_null(s[0]->value);

  cr_assert_eq(s[1]->kind, STMT_SCALAR);
  cr_assert(s[1]->has_type && !s[1]->type.has_shape);
  cr_assert_eq(s[1]->type.dtype, DT_F32);
  cr_assert_eq(s[1]->value->kind, AST_FLOAT);
  cr_assert_float_eq(s[1]->value->fval, 0.125, 0);
  cr_assert_null(s[2]->value);
  cr_assert_eq(s[2]->type.dtype, DT_I32);

  cr_assert_eq(s[3]->kind, STMT_ASSIGN);
  cr_assert_str_eq(s[3]->name, "s");
  cr_assert_eq(s[3]->value->kind, AST_NAME);

  cr_assert_eq(s[4]->kind, STMT_OUTPUT);
  cr_assert(s[4]->has_type);
  cr_assert_eq(s[4]->type.ndims, 2);
  cr_assert_eq(s[4]->type.dims[1].value, 1);
  cr_assert_not_null(s[4]->value);
  cr_assert_eq(s[5]->kind, STMT_OUTPUT);
  cr_assert(!s[5]->has_type && !s[5]->value);
  cr_assert(s[6]->has_type && !s[6]->type.has_shape && !s[6]->value);
  cr_assert(!s[7]->has_type && s[7]->value);

  cr_assert_eq(s[8]->kind, STMT_GRAD);
  cr_assert_eq(s[8]->nnames, 3);
  cr_assert_str_eq(s[8]->names[0], "q");
  cr_assert_str_eq(s[8]->names[2], "v");
  cr_assert_eq(s[8]->name_locs[1].col, 11);
  cr_assert_eq(s[8]->name_locs[2].col, 15);

  cr_assert_str_eq(f->graphs[1]->name, "empty");
  cr_assert_eq(f->graphs[1]->nstmts, 0);
}

Test(parser, locations) {
  AstFile *f = parse("attention gr {\n"
                     "    s = (q @ k^T) * scale;\n"
                     "    t = mask(s,\n"
                     "             j <= i);\n"
                     "    input bias : bf16[1, H];\n"
                     "}\n");
  cr_assert_eq(d.nerrors, 0, "%s", d.out.data);
  AstGraph *g = f->graphs[0];
  cr_assert_eq(g->loc.line, 1);
  cr_assert_eq(g->loc.col, 11);
  cr_assert_eq(g->loc.len, 2);

  AstStmt *s = g->stmts[0];
  cr_assert_eq(s->loc.line, 2);
  cr_assert_eq(s->loc.col, 5);
  cr_assert_eq(s->loc.len, 22); /* through the ';' */
  cr_assert_eq(s->name_loc.col, 5);
  cr_assert_eq(s->name_loc.len, 1);
  AstExpr *mul = s->value;
  cr_assert_eq(mul->loc.col, 9); /* the '(' */
  cr_assert_eq(mul->loc.len, 17);
  AstExpr *mm = mul->args[0];
  cr_assert_eq(mm->loc.col, 10);
  cr_assert_eq(mm->loc.len, 7);
  AstExpr *kt = mm->args[1];
  cr_assert_eq(kt->kind, AST_TRANSPOSE);
  cr_assert_eq(kt->loc.col, 14);
  cr_assert_eq(kt->loc.len, 3);

  /* a call spanning two lines underlines the rest of its first line */
  AstExpr *call = g->stmts[1]->value;
  cr_assert_eq(call->loc.line, 3);
  cr_assert_eq(call->loc.col, 9);
  cr_assert_eq(call->loc.len, 7);
  cr_assert_eq(call->name_loc.col, 9);
  cr_assert_eq(call->name_loc.len, 4);
  cr_assert_eq(call->args[1]->loc.line, 4);
  cr_assert_eq(call->args[1]->loc.col, 14);
  cr_assert_eq(call->args[1]->loc.len, 6);

  AstStmt *in = g->stmts[2];
  cr_assert_eq(in->type.loc.col, 18);
  cr_assert_eq(in->type.loc.len, 10);
  cr_assert_eq(in->type.dims[1].loc.col, 26);
  cr_assert_eq(in->type.dims[1].loc.len, 1);
  cr_assert_eq(in->loc.src, f->src);
}

Test(parser, empty_and_comment_only_files_are_valid) {
  AstFile *f = parse("");
  cr_assert_eq(f->ngraphs, 0);
  f = parse("# nothing here\n// at all");
  cr_assert_eq(f->ngraphs, 0);
  cr_assert_eq(d.nerrors, 0);
  f = parse("attention g { s = a; }"); /* no trailing newline */
  cr_assert_eq(d.nerrors, 0);
  cr_assert_eq(f->graphs[0]->nstmts, 1);
}

Test(parser, recovery_reports_several_errors) {
  AstFile *f = parse("attention g {\n"
                     "  s = ;\n"
                     "  t = a b;\n"
                     "  ok = 1;\n"
                     "  u = (a + b;\n"
                     "}\n"
                     "attention h {\n"
                     "  v = 1\n"
                     "  w = 2;\n"
                     "}\n");
  cr_assert_eq(d.nerrors, 4, "%s", d.out.data);
  cr_assert_not_null(strstr(d.out.data, "p.attn:2:7: error: unexpected ';', "
                                        "expected an expression\n"));
  cr_assert_not_null(strstr(d.out.data, "p.attn:3:9: error: unexpected "
                                        "identifier 'b', expected ';' or an "
                                        "operator\n"));
  cr_assert_not_null(strstr(d.out.data, "p.attn:5:13: error: expected ')' to "
                                        "close '('\n"));
  cr_assert_not_null(strstr(d.out.data, "p.attn:5:7: note: '(' opened here\n"));
  cr_assert_not_null(strstr(d.out.data, "p.attn:8:8: error: expected ';' "
                                        "after statement\n"));
  /* what parsed is kept */
  cr_assert_eq(f->ngraphs, 2);
  cr_assert_eq(f->graphs[0]->nstmts, 1);
  cr_assert_str_eq(f->graphs[0]->stmts[0]->name, "ok");
  cr_assert_eq(f->graphs[1]->nstmts, 0);
}

Test(parser, missing_close_brace) {
  AstFile *f = parse("attention a {\n  s = 1;\nattention b {\n  t = 2;\n}\n"
                     "attention c {\n  u = 3;\n");
  cr_assert_eq(d.nerrors, 2, "%s", d.out.data);
  cr_assert_not_null(strstr(d.out.data, "p.attn:3:1: error: expected '}' to "
                                        "close graph 'a'\n"));
  cr_assert_not_null(strstr(d.out.data, "p.attn:1:13: note: graph 'a' "
                                        "opened here\n"));
  cr_assert_not_null(strstr(d.out.data, "p.attn:7:9: error: expected '}' to "
                                        "close graph 'c'\n"));
  cr_assert_eq(f->ngraphs, 3);
  cr_assert_eq(f->graphs[1]->nstmts, 1);
  cr_assert_eq(f->graphs[2]->nstmts, 1);
}

Test(parser, specific_messages) {
  parse("attention g { input q : float[B]; scalar s : f32[H]; "
        "input input : f32; }");
  cr_assert_eq(d.nerrors, 3, "%s", d.out.data);
  cr_assert_not_null(strstr(d.out.data, "unknown type 'float'; the types are "
                                        "f16, bf16, f32, e4m3, e5m2, i32, u64 "
                                        "and bool\n"));
  cr_assert_not_null(strstr(d.out.data, "scalar 's' cannot have a shape; "
                                        "write 'f32' alone\n"));
  cr_assert_not_null(strstr(d.out.data, "unexpected keyword 'input', "
                                        "expected a name\n"));
}

Test(parser, junk_between_graphs_is_skipped) {
  AstFile *f = parse("junk here; } attention g { s = 1; }");
  cr_assert_eq(d.nerrors, 1, "%s", d.out.data);
  cr_assert_not_null(strstr(d.out.data, "unexpected identifier 'junk', "
                                        "expected 'attention'"));
  cr_assert_eq(f->ngraphs, 1);
  cr_assert_eq(f->graphs[0]->nstmts, 1);
}

Test(parser, long_chains_hit_the_depth_limit_once) {
  StrBuf sb = {0};
  sb_puts(&sb, "attention g { s = a");
  for (int i = 0; i < 100000; i++)
    sb_puts(&sb, " + a");
  sb_puts(&sb, "; t = b; }");
  AstFile *f = parse(sb.data);
  sb_free(&sb);
  cr_assert_eq(d.nerrors, 1, "%s", d.out.data);
  cr_assert_not_null(strstr(d.out.data, "expression nested too deeply"));
  cr_assert_eq(f->graphs[0]->nstmts, 2);
  cr_assert_eq(f->graphs[0]->stmts[0]->value->kind, AST_ERROR);
}

Test(parser, depth_limit_is_256) {
  StrBuf ok = {0}, bad = {0};
  sb_puts(&ok, "attention g { s = ");
  sb_puts(&bad, "attention g { s = ");
  for (int i = 0; i < 255; i++)
    sb_puts(&ok, "-");
  for (int i = 0; i < 256; i++)
    sb_puts(&bad, "-");
  sb_puts(&ok, "a; }");
  sb_puts(&bad, "a; }");
  parse(ok.data);
  cr_assert_eq(d.nerrors, 0, "%s", d.out.data);
  parse(bad.data);
  cr_assert_eq(d.nerrors, 1);
  sb_free(&ok);
  sb_free(&bad);
}

Test(parser, deep_parentheses_do_not_crash) {
  StrBuf sb = {0};
  sb_puts(&sb, "attention g { s = ");
  for (int i = 0; i < 200000; i++)
    sb_puts(&sb, "(");
  sb_puts(&sb, "a; }");
  parse(sb.data);
  sb_free(&sb);
  cr_assert_eq(d.nerrors, 1, "%s", d.out.data);
  cr_assert_not_null(strstr(d.out.data, "expression nested too deeply"));
}

Test(parser, binary_junk_is_bounded) {
  char junk[4096];
  unsigned x = 12345;
  for (size_t i = 0; i < sizeof junk; i++) {
    x = x * 1103515245u + 12345u;
    junk[i] = (char)(x >> 16);
  }
  parse_n(junk, sizeof junk);
  cr_assert_gt(d.nerrors, 0);
  cr_assert_leq(d.nerrors, 21, "%d errors:\n%s", d.nerrors, d.out.data);
}

Test(parser, nul_bytes_are_errors_not_the_end) {
  const char text[] = "attention g {\0 s = 1; }";
  AstFile *f = parse_n(text, sizeof text - 1);
  cr_assert_eq(d.nerrors, 1);
  cr_assert_not_null(strstr(d.out.data, "stray byte '\\x00'"));
  cr_assert_eq(f->graphs[0]->nstmts, 1);
}

Test(parser, too_many_errors_stop_the_parse) {
  StrBuf sb = {0};
  sb_puts(&sb, "attention g {\n");
  for (int i = 0; i < 1000; i++)
    sb_puts(&sb, "  s = ;\n");
  sb_puts(&sb, "}\n");
  parse(sb.data);
  sb_free(&sb);
  cr_assert_lt(d.nerrors, 30);
  cr_assert_not_null(strstr(d.out.data, "attnc: too many errors; stopping\n"));
}

Test(parser, ten_megabytes_parse_quickly) {
  StrBuf sb = {0};
  int n = 0;
  while (sb.len < 10u * 1024 * 1024) {
    sb_printf(&sb, "attention g%d {\n  input q : bf16[B, H, S, 64];\n", n++);
    for (int i = 0; i < 20; i++)
      sb_printf(&sb, "  s%d = (q @ k^T) * scale + bias[b, h, i, j];\n", i);
    sb_puts(&sb, "}\n");
  }
  clock_t t0 = clock();
  AstFile *f = parse_n(sb.data, sb.len);
  double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
  sb_free(&sb);
  cr_assert_eq(d.nerrors, 0);
  cr_assert_eq(f->ngraphs, n);
  cr_assert_lt(secs, PARSE_BUDGET_SECS, "took %.2f s of CPU", secs);
}
