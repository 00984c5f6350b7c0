/* Unit tests for the scanner (grammar/attn.l), driven token by token
 * through yylex with a parse state of its own. */
#include <criterion/criterion.h>
#include <string.h>

#include "attnc.h"
#include "attn.tab.h"
#include "lex.yy.h"

typedef struct Tok {
  int kind;
  YYSTYPE val;
  YyLoc loc;
} Tok;

enum { MAX_TOKS = 64 };

static Arena *arena;
static Diag d;
static ParseState ps;
static Tok toks[MAX_TOKS];
static int ntoks;

static void setup(void) {
  arena = arena_new();
  memset(&d, 0, sizeof d);
}

static void teardown(void) {
  mem_free(ps.names);
  diag_free(&d);
  arena_free(arena);
}

TestSuite(scanner, .init = setup, .fini = teardown);

/* Scans text (len bytes) to the end; the end-of-file token is included. */
static void scan_n(const char *text, size_t len) {
  memset(&ps, 0, sizeof ps);
  ps.src = source_from_string(arena, "s.attn", text, len);
  ps.a = arena;
  ps.d = &d;
  ps.line = ps.col = 1;
  yyscan_t scanner;
  cr_assert_eq(yylex_init(&scanner), 0);
  YY_BUFFER_STATE buf = yy_scan_bytes(ps.src->text, (int)len, scanner);
  ntoks = 0;
  for (;;) {
    cr_assert_lt(ntoks, MAX_TOKS);
    Tok *t = &toks[ntoks++];
    t->kind = yylex(&t->val, &t->loc, scanner, &ps);
    if (t->kind == YYEOF)
      break;
  }
  yy_delete_buffer(buf, scanner);
  yylex_destroy(scanner);
}

static void scan(const char *text) { scan_n(text, strlen(text)); }

static void expect_kinds(const int *kinds, int n) {
  cr_assert_eq(ntoks, n, "got %d tokens, want %d", ntoks, n);
  for (int i = 0; i < n; i++)
    cr_assert_eq(toks[i].kind, kinds[i], "token %d: kind %d, want %d", i,
                 toks[i].kind, kinds[i]);
}

Test(scanner, punctuation_and_operators) {
  scan("{ } ( ) [ ] ; : , = || && == != <= >= < > + - * / % @ ! ^T");
  int want[] = {LBRACE, RBRACE, LPAREN, RPAREN, LBRACK, RBRACK, SEMI,
                COLON, COMMA, ASSIGN, OROR, ANDAND, EQEQ, NOTEQ, LESSEQ,
                GREATEREQ, LESS, GREATER, PLUS, MINUS, STAR, SLASH, PERCENT,
                AT, BANG, TRANSPOSE, YYEOF};
  expect_kinds(want, (int)(sizeof want / sizeof *want));
  cr_assert_eq(d.nerrors, 0);
}

Test(scanner, keywords_dtypes_and_identifiers) {
  scan("attention input scalar output grad true false "
       "f16 bf16 f32 e4m3 e5m2 i32 u64 bool "
       "attentionx _x9 inf mask f64");
  int want[] = {KW_ATTENTION, KW_INPUT, KW_SCALAR, KW_OUTPUT, KW_GRAD,
                KW_TRUE, KW_FALSE, DTYPE, DTYPE, DTYPE, DTYPE, DTYPE, DTYPE,
                DTYPE, DTYPE, IDENT, IDENT, IDENT, IDENT, IDENT, YYEOF};
  expect_kinds(want, (int)(sizeof want / sizeof *want));
  DType dts[] = {DT_F16, DT_BF16, DT_F32, DT_E4M3, DT_E5M2, DT_I32, DT_U64,
                 DT_BOOL};
  for (int i = 0; i < 8; i++)
    cr_assert_eq(toks[7 + i].val.dtype, dts[i]);
  cr_assert_str_eq(toks[15].val.str, "attentionx");
  cr_assert_str_eq(toks[16].val.str, "_x9");
  cr_assert_str_eq(toks[19].val.str, "f64");
}

Test(scanner, identifiers_are_interned) {
  scan("abc x abc");
  cr_assert_eq(toks[0].val.str, toks[2].val.str);
  cr_assert_neq(toks[0].val.str, toks[1].val.str);
}

Test(scanner, integers) {
  scan("0 42 9223372036854775807");
  int want[] = {INT, INT, INT, YYEOF};
  expect_kinds(want, 4);
  cr_assert_eq(toks[0].val.ival, 0);
  cr_assert_eq(toks[1].val.ival, 42);
  cr_assert_eq(toks[2].val.ival, INT64_MAX);
  cr_assert_eq(d.nerrors, 0);
}

Test(scanner, integer_overflow_is_an_error) {
  scan("9223372036854775808");
  cr_assert_eq(toks[0].kind, INT);
  cr_assert_eq(d.nerrors, 1);
  cr_assert_not_null(strstr(d.out.data, "integer '9223372036854775808' is "
                                        "too large"));
}

Test(scanner, floats) {
  scan("1.5 .5 1e-3 2. 3E+2 0.0625");
  double want[] = {1.5, 0.5, 1e-3, 2.0, 300.0, 0.0625};
  for (int i = 0; i < 6; i++) {
    cr_assert_eq(toks[i].kind, FLOAT, "token %d", i);
    cr_assert_float_eq(toks[i].val.fval, want[i], 1e-15);
  }
  cr_assert_eq(toks[6].kind, YYEOF);
  cr_assert_eq(d.nerrors, 0);
}

Test(scanner, bad_numbers) {
  scan("12abc 1e 1e999 2.5f");
  cr_assert_eq(d.nerrors, 4);
  cr_assert_not_null(strstr(d.out.data, "invalid number '12abc'"));
  cr_assert_not_null(strstr(d.out.data, "invalid number '1e'"));
  cr_assert_not_null(strstr(d.out.data, "number '1e999' is too large"));
  cr_assert_not_null(strstr(d.out.data, "invalid number '2.5f'"));
}

Test(scanner, comments_and_whitespace) {
  scan("a # comment ; b\n// another ( \n\t c\r\n");
  int want[] = {IDENT, IDENT, YYEOF};
  expect_kinds(want, 3);
  cr_assert_str_eq(toks[1].val.str, "c");
  cr_assert_eq(toks[1].loc.line, 3);
  cr_assert_eq(toks[1].loc.col, 3);
}

Test(scanner, locations) {
  scan("ab  cd\n  efg^T");
  cr_assert_eq(toks[0].loc.line, 1);
  cr_assert_eq(toks[0].loc.col, 1);
  cr_assert_eq(toks[0].loc.end_col, 3);
  cr_assert_eq(toks[1].loc.col, 5);
  cr_assert_eq(toks[1].loc.begin, 4);
  cr_assert_eq(toks[1].loc.end, 6);
  cr_assert_eq(toks[2].loc.line, 2);
  cr_assert_eq(toks[2].loc.col, 3);
  cr_assert_eq(toks[3].kind, TRANSPOSE);
  cr_assert_eq(toks[3].loc.col, 6);
  cr_assert_eq(toks[3].loc.end - toks[3].loc.begin, 2);
  /* end of file sits just after the last token */
  cr_assert_eq(toks[4].kind, YYEOF);
  cr_assert_eq(toks[4].loc.line, 2);
  cr_assert_eq(toks[4].loc.col, 8);
}

Test(scanner, transpose_needs_the_T) {
  scan("k^T k^2 k ^T");
  int want[] = {IDENT, TRANSPOSE, IDENT, INT, IDENT, TRANSPOSE, YYEOF};
  expect_kinds(want, 7);
  cr_assert_eq(d.nerrors, 1);
  cr_assert_not_null(strstr(d.out.data, "'^' is only used as '^T' "
                                        "(transpose)"));
}

Test(scanner, junk_runs_are_one_error_each) {
  const char text[] = "a \x01\x02\0\xff b $$ c\x80";
  scan_n(text, sizeof text - 1);
  int want[] = {IDENT, IDENT, IDENT, YYEOF};
  expect_kinds(want, 4);
  cr_assert_eq(d.nerrors, 3);
  cr_assert_not_null(strstr(d.out.data, "s.attn:1:3: error: stray byte "
                                        "'\\x01'"));
  cr_assert_not_null(strstr(d.out.data, "unexpected character '$'"));
  cr_assert_not_null(strstr(d.out.data, "stray byte '\\x80'"));
}

Test(scanner, single_ampersand_and_bar) {
  scan("a & b | c . d");
  cr_assert_eq(d.nerrors, 3);
  cr_assert_not_null(strstr(d.out.data, "did you mean '&&'?"));
  cr_assert_not_null(strstr(d.out.data, "did you mean '||'?"));
  cr_assert_not_null(strstr(d.out.data, "unexpected character '.'"));
}

Test(scanner, empty_input) {
  scan("");
  cr_assert_eq(ntoks, 1);
  cr_assert_eq(toks[0].kind, YYEOF);
  cr_assert_eq(toks[0].loc.line, 1);
  cr_assert_eq(toks[0].loc.col, 1);
}

Test(scanner, stops_after_too_many_errors) {
  StrBuf text = {0};
  for (int i = 0; i < 100; i++)
    sb_puts(&text, "$ a ");
  memset(&ps, 0, sizeof ps);
  scan(text.data);
  sb_free(&text);
  /* 20 shown, the 21st stops the scanner */
  cr_assert_eq(d.nerrors, 21);
  cr_assert(ntoks < 30);
  cr_assert_not_null(strstr(d.out.data, "attnc: too many errors; stopping"));
}
