/* attn.y: the .attn grammar (see docs/grammar.md for the EBNF).
 *
 * A pure, reentrant parser; the scanner (attn.l) and a ParseState are
 * passed to every call, so there are no globals. The AST is allocated from
 * the caller's Arena. Lists are left-recursive and grow geometrically, so a
 * 10 MB file parses in linear time with a constant-depth parser stack.
 *
 * Error handling is the part worth reading:
 *  - Canonical LR tables with default reductions only in consistent states
 *    make the expected-token set at an error exact (LALR merging would add
 *    tokens that cannot follow), and keep `graph: head stmts error` from
 *    reducing on anything but 'attention' or end of file.
 *  - yyreport_syntax_error turns that set into one specific message
 *    ("expected ';' after statement", "expected ')' to close '('" with a
 *    note at the '(', ...).
 *  - `stmt: error ';'` recovers per statement; `graph: head stmts error`
 *    recovers at a '}' or at the next 'attention' (a missing '}'); and
 *    `graph: error` skips junk between graphs. One run reports many errors.
 *  - Expression depth is computed as nodes are built and capped, because
 *    every later pass recurses over expressions.
 */
%define api.pure full
%define api.location.type {YyLoc}
%define parse.error custom
%define lr.type canonical-lr
%define lr.default-reduction consistent
%locations
%expect 0
%param {yyscan_t scanner} {ParseState *ps}

%code requires {
#include "attnc.h"

#ifndef YY_TYPEDEF_YY_SCANNER_T
#define YY_TYPEDEF_YY_SCANNER_T
typedef void *yyscan_t;
#endif

/* A parser location: where a symbol starts and ends, as line/col and as
 * byte offsets, so a span can be turned into a Loc exactly. */
typedef struct YyLoc {
  int line, col;         /* first byte */
  int end_line, end_col; /* one past the last byte */
  size_t begin, end;     /* byte offsets */
} YyLoc;

/* An expression under construction with its depth (in nodes). */
typedef struct ExprVal {
  AstExpr *e;
  int depth;
} ExprVal;

typedef struct ExprList {
  AstExpr **v;
  int n, cap, depth; /* depth: the deepest element */
} ExprList;

typedef struct DimList {
  AstDim *v;
  int n, cap;
} DimList;

typedef struct NameList {
  const char **v;
  Loc *locs;
  int n, cap;
} NameList;

typedef struct StmtList {
  AstStmt **v;
  int n, cap;
} StmtList;

#define PARSE_MAX_DEPTH 256 /* deepest expression, in nodes */
#define PARSE_MAX_OPEN 512  /* open '(' / '[' remembered for messages */

typedef struct ParseState {
  const Source *src;
  Arena *a;
  Diag *d;
  AstFile *file;
  int graphs_cap;
  /* the graph being parsed */
  AstGraph *graph;
  int stmts_cap;
  YyLoc brace;         /* its '{' */
  bool close_reported; /* "expected '}'" already said for it */
  /* scanner position and the last two tokens */
  int line, col;
  size_t off;
  YyLoc prev, cur;
  bool have_prev, have_cur;
  /* open '(' and '[' in the current statement, innermost last */
  char open_kind[PARSE_MAX_OPEN];
  YyLoc open_loc[PARSE_MAX_OPEN];
  int nopen;
  bool open_reset; /* clear the stack before the next token */
  bool stopped;    /* too many errors: the scanner reports end of file */
  /* identifiers are interned: one copy per distinct name (open hashing) */
  struct ParseName {
    const char *s;
    size_t hash;
  } *names;
  size_t names_cap, names_n;
} ParseState;
}

%code provides {
/* Shared with the scanner. */
Loc parse_loc(const ParseState *ps, YyLoc l);
void parse_error(ParseState *ps, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The scanner takes the parse state too (flex reads YY_DECL). */
#define YY_DECL int yylex(YYSTYPE *yylval_param, YYLTYPE *yylloc_param, \
                          yyscan_t yyscanner, ParseState *ps)
YY_DECL;
}

%code {
#include <stdlib.h>
#include <string.h>

#include "lex.yy.h"

/* The parser's stack, when it outgrows its first 200 entries, comes from
 * mem.c too (the front end's scope unwinds when memory runs out). */
static void *parse_stack_alloc(size_t n) { return mem_must(mem_alloc(n)); }
#define YYMALLOC parse_stack_alloc
#define YYFREE mem_free

#define YYMAXDEPTH 10000

/* Spans: first symbol's start to last symbol's end; an empty rule sits at
 * the end of what came before it. */
#define YYLLOC_DEFAULT(Cur, Rhs, N)                                            \
  do {                                                                         \
    if (N) {                                                                   \
      (Cur).line = YYRHSLOC(Rhs, 1).line;                                      \
      (Cur).col = YYRHSLOC(Rhs, 1).col;                                        \
      (Cur).begin = YYRHSLOC(Rhs, 1).begin;                                    \
      (Cur).end_line = YYRHSLOC(Rhs, N).end_line;                              \
      (Cur).end_col = YYRHSLOC(Rhs, N).end_col;                                \
      (Cur).end = YYRHSLOC(Rhs, N).end;                                        \
    } else {                                                                   \
      (Cur).line = (Cur).end_line = YYRHSLOC(Rhs, 0).end_line;                 \
      (Cur).col = (Cur).end_col = YYRHSLOC(Rhs, 0).end_col;                    \
      (Cur).begin = (Cur).end = YYRHSLOC(Rhs, 0).end;                          \
    }                                                                          \
  } while (0)

static void yyerror(YYLTYPE *loc, yyscan_t scanner, ParseState *ps,
                    const char *msg);

/* Doubles *cap when n reached it; arena memory, so the old block is
 * simply abandoned (geometric growth keeps the waste below the total). */
static void *parse_grow(ParseState *ps, void *v, int n, int *cap,
                        size_t elem) {
  if (n < *cap)
    return v;
  int ncap = *cap ? *cap * 2 : 4;
  void *nv = arena_alloc(ps->a, (size_t)ncap * elem);
  if (n)
    memcpy(nv, v, (size_t)n * elem);
  *cap = ncap;
  return nv;
}

static AstExpr *parse_node(ParseState *ps, AstKind kind, YyLoc l) {
  AstExpr *e = arena_alloc(ps->a, sizeof *e);
  e->kind = kind;
  e->loc = parse_loc(ps, l);
  return e;
}

/* Wraps a finished node with its depth; past the limit the expression is
 * replaced by one AST_ERROR node whose depth stays over the limit, so the
 * enclosing nodes do not report it again. */
static ExprVal parse_expr(ParseState *ps, AstExpr *e, int child_depth) {
  if (child_depth + 1 <= PARSE_MAX_DEPTH)
    return (ExprVal){e, child_depth + 1};
  if (child_depth <= PARSE_MAX_DEPTH)
    parse_error(ps, e->loc, "expression nested too deeply (the limit is %d "
                "levels)", PARSE_MAX_DEPTH);
  e->kind = AST_ERROR;
  e->args = NULL;
  e->nargs = 0;
  return (ExprVal){e, PARSE_MAX_DEPTH + 1};
}

static ExprVal parse_leaf(AstExpr *e) { return (ExprVal){e, 1}; }

/* AST_UNARY (op: UnOp) or AST_TRANSPOSE: one operand. */
static ExprVal parse_unary(ParseState *ps, YyLoc l, AstKind kind, int op,
                           ExprVal x) {
  AstExpr *e = parse_node(ps, kind, l);
  e->op = op;
  e->args = arena_alloc(ps->a, sizeof *e->args);
  e->args[0] = x.e;
  e->nargs = 1;
  return parse_expr(ps, e, x.depth);
}

static ExprVal parse_binary(ParseState *ps, YyLoc l, BinOp op, ExprVal x,
                            ExprVal y) {
  AstExpr *e = parse_node(ps, AST_BINARY, l);
  e->op = (int)op;
  e->args = arena_alloc(ps->a, 2 * sizeof *e->args);
  e->args[0] = x.e;
  e->args[1] = y.e;
  e->nargs = 2;
  return parse_expr(ps, e, x.depth > y.depth ? x.depth : y.depth);
}

/* name(args) and name[args]. */
static ExprVal parse_apply(ParseState *ps, YyLoc l, AstKind kind,
                           const char *name, YyLoc name_l, ExprList args) {
  AstExpr *e = parse_node(ps, kind, l);
  e->name = name;
  e->name_loc = parse_loc(ps, name_l);
  e->args = args.v;
  e->nargs = args.n;
  return parse_expr(ps, e, args.depth);
}

static ExprList parse_list_add(ParseState *ps, ExprList l, ExprVal x) {
  l.v = parse_grow(ps, l.v, l.n, &l.cap, sizeof *l.v);
  l.v[l.n++] = x.e;
  if (x.depth > l.depth)
    l.depth = x.depth;
  return l;
}

static AstStmt *parse_stmt(ParseState *ps, StmtKind kind, YyLoc l,
                           const char *name, YyLoc name_l) {
  AstStmt *s = arena_alloc(ps->a, sizeof *s);
  s->kind = kind;
  s->loc = parse_loc(ps, l);
  s->name = name;
  if (name)
    s->name_loc = parse_loc(ps, name_l);
  return s;
}

static void parse_add_stmt(ParseState *ps, AstStmt *s) {
  AstGraph *g = ps->graph;
  if (!g || !s)
    return;
  g->stmts = parse_grow(ps, g->stmts, g->nstmts, &ps->stmts_cap,
                        sizeof *g->stmts);
  g->stmts[g->nstmts++] = s;
}

static void parse_begin_graph(ParseState *ps, const char *name, YyLoc name_l,
                              YyLoc brace) {
  AstGraph *g = arena_alloc(ps->a, sizeof *g);
  g->name = name;
  g->loc = parse_loc(ps, name_l);
  AstFile *f = ps->file;
  f->graphs = parse_grow(ps, f->graphs, f->ngraphs, &ps->graphs_cap,
                         sizeof *f->graphs);
  f->graphs[f->ngraphs++] = g;
  ps->graph = g;
  ps->stmts_cap = 0;
  ps->brace = brace;
  ps->close_reported = false;
}

static void parse_report_unclosed(ParseState *ps, YyLoc at) {
  if (!ps->graph || ps->close_reported)
    return;
  ps->close_reported = true;
  parse_error(ps, parse_loc(ps, at), "expected '}' to close graph '%s'",
              ps->graph->name);
  diag_note(ps->d, parse_loc(ps, ps->brace), "graph '%s' opened here",
            ps->graph->name);
}

/* A statement's type: scalars take a bare dtype. */
static AstType parse_scalar_type(ParseState *ps, AstType t, const char *name) {
  if (t.has_shape)
    parse_error(ps, t.loc, "scalar '%s' cannot have a shape; write '%s' "
                "alone", name, dtype_name(t.dtype));
  return t;
}
}

%union {
  int64_t ival;
  double fval;
  const char *str;
  DType dtype;
  ExprVal expr;
  ExprList list;
  AstDim dim;
  DimList dims;
  AstType type;
  NameList names;
  StmtList stmts;
  AstStmt *stmt;
}

/* Token order matters only for the order of "expected ..." lists. */
%token SEMI ";" COMMA "," COLON ":" ASSIGN "=" LBRACE "{" RBRACE "}"
%token LPAREN "(" RPAREN ")" LBRACK "[" RBRACK "]"
%token <str> IDENT "identifier"
%token <ival> INT "integer"
%token <fval> FLOAT "number"
%token <dtype> DTYPE "type"
%token KW_ATTENTION "attention" KW_INPUT "input" KW_SCALAR "scalar"
%token KW_OUTPUT "output" KW_GRAD "grad" KW_TRUE "true" KW_FALSE "false"
%token OROR "||" ANDAND "&&" EQEQ "==" NOTEQ "!=" LESSEQ "<=" GREATEREQ ">="
%token TRANSPOSE "^T"
%token LESS "<" GREATER ">" PLUS "+" MINUS "-" STAR "*" SLASH "/"
%token PERCENT "%" AT "@" BANG "!"

%type <expr> expr or_expr and_expr eq_expr rel_expr add_expr mul_expr
%type <expr> unary_expr postfix_expr primary
%type <list> args arg_list
%type <dim> dim
%type <dims> dims
%type <type> type
%type <names> grad_names
%type <stmt> stmt
%type <stmts> grad_body
%type <str> name

%%

file
  : %empty
  | file graph
  ;

graph
  : graph_head stmts "}"         { ps->graph = NULL; }
  | graph_head stmts error "}"   { ps->graph = NULL; yyerrok; }
  | graph_head stmts error {
      /* Reduced only at 'attention' or end of file: a missing '}'. The
       * lookahead's location (yylloc) is where the '}' belonged. */
      parse_report_unclosed(ps, yylloc);
      ps->graph = NULL;
      yyerrok;
    }
  | error "}"   /* junk between graphs: skip to a '}' or 'attention' */
  | error
  ;

graph_head
  : "attention" name "{"         { parse_begin_graph(ps, $2, @2, @3); }
  ;

name
  : IDENT
  ;

stmts
  : %empty
  | stmts stmt                   { parse_add_stmt(ps, $2); }
  ;

stmt
  : "input" name ":" type ";" {
      $$ = parse_stmt(ps, STMT_INPUT, @$, $2, @2);
      $$->has_type = true;
      $$->type = $4;
    }
  | "scalar" name ":" type ";" {
      $$ = parse_stmt(ps, STMT_SCALAR, @$, $2, @2);
      $$->has_type = true;
      $$->type = parse_scalar_type(ps, $4, $2);
    }
  | "scalar" name ":" type "=" expr ";" {
      $$ = parse_stmt(ps, STMT_SCALAR, @$, $2, @2);
      $$->has_type = true;
      $$->type = parse_scalar_type(ps, $4, $2);
      $$->value = $6.e;
    }
  | name "=" expr ";" {
      $$ = parse_stmt(ps, STMT_ASSIGN, @$, $1, @1);
      $$->value = $3.e;
    }
  | "output" name ";" {
      $$ = parse_stmt(ps, STMT_OUTPUT, @$, $2, @2);
    }
  | "output" name ":" type ";" {
      $$ = parse_stmt(ps, STMT_OUTPUT, @$, $2, @2);
      $$->has_type = true;
      $$->type = $4;
    }
  | "output" name "=" expr ";" {
      $$ = parse_stmt(ps, STMT_OUTPUT, @$, $2, @2);
      $$->value = $4.e;
    }
  | "output" name ":" type "=" expr ";" {
      $$ = parse_stmt(ps, STMT_OUTPUT, @$, $2, @2);
      $$->has_type = true;
      $$->type = $4;
      $$->value = $6.e;
    }
  | "grad" grad_names ";" {
      $$ = parse_stmt(ps, STMT_GRAD, @$, NULL, @$);
      $$->names = $2.v;
      $$->name_locs = $2.locs;
      $$->nnames = $2.n;
    }
  | "grad" grad_names "{" grad_body "}" {
      /* The backward's own statements (FP8 gradients: dO's type and
       * scale, dS's rounding, the gradients' types, scales and amax);
       * ir_build gives them their meaning. */
      $$ = parse_stmt(ps, STMT_GRAD, @$, NULL, @$);
      $$->names = $2.v;
      $$->name_locs = $2.locs;
      $$->nnames = $2.n;
      $$->block = $4.v;
      $$->nblock = $4.n;
      $$->has_block = true;
    }
  | error ";" {
      /* A clean restart: report the next statement's errors at once
       * rather than after bison's usual three quiet tokens. */
      $$ = NULL;
      yyerrok;
    }
  ;

grad_body
  : %empty                       { $$ = (StmtList){0}; }
  | grad_body stmt {
      $$ = $1;
      if ($2) {
        $$.v = parse_grow(ps, $$.v, $$.n, &$$.cap, sizeof *$$.v);
        $$.v[$$.n++] = $2;
      }
    }
  ;

grad_names
  : name {
      $$ = (NameList){0};
      int cap = 0;
      $$.v = parse_grow(ps, NULL, 0, &$$.cap, sizeof *$$.v);
      $$.locs = parse_grow(ps, NULL, 0, &cap, sizeof *$$.locs);
      $$.v[0] = $1;
      $$.locs[0] = parse_loc(ps, @1);
      $$.n = 1;
    }
  | grad_names "," name {
      $$ = $1;
      int cap = $$.cap;
      $$.v = parse_grow(ps, $$.v, $$.n, &$$.cap, sizeof *$$.v);
      $$.locs = parse_grow(ps, $$.locs, $$.n, &cap, sizeof *$$.locs);
      $$.v[$$.n] = $3;
      $$.locs[$$.n] = parse_loc(ps, @3);
      $$.n++;
    }
  ;

type
  : DTYPE {
      $$ = (AstType){.loc = parse_loc(ps, @$), .dtype = $1};
    }
  | DTYPE "[" dims "]" {
      $$ = (AstType){.loc = parse_loc(ps, @$), .dtype = $1, .has_shape = true,
                     .dims = $3.v, .ndims = $3.n};
    }
  ;

dims
  : dim {
      $$ = (DimList){0};
      $$.v = parse_grow(ps, NULL, 0, &$$.cap, sizeof *$$.v);
      $$.v[$$.n++] = $1;
    }
  | dims "," dim {
      $$ = $1;
      $$.v = parse_grow(ps, $$.v, $$.n, &$$.cap, sizeof *$$.v);
      $$.v[$$.n++] = $3;
    }
  ;

dim
  : IDENT  { $$ = (AstDim){.loc = parse_loc(ps, @$), .sym = $1}; }
  | INT    { $$ = (AstDim){.loc = parse_loc(ps, @$), .value = $1}; }
  ;

expr
  : or_expr
  ;

or_expr
  : and_expr
  | or_expr "||" and_expr    { $$ = parse_binary(ps, @$, BIN_OR, $1, $3); }
  ;

and_expr
  : eq_expr
  | and_expr "&&" eq_expr    { $$ = parse_binary(ps, @$, BIN_AND, $1, $3); }
  ;

eq_expr
  : rel_expr
  | eq_expr "==" rel_expr    { $$ = parse_binary(ps, @$, BIN_EQ, $1, $3); }
  | eq_expr "!=" rel_expr    { $$ = parse_binary(ps, @$, BIN_NE, $1, $3); }
  ;

rel_expr
  : add_expr
  | rel_expr "<" add_expr    { $$ = parse_binary(ps, @$, BIN_LT, $1, $3); }
  | rel_expr "<=" add_expr   { $$ = parse_binary(ps, @$, BIN_LE, $1, $3); }
  | rel_expr ">" add_expr    { $$ = parse_binary(ps, @$, BIN_GT, $1, $3); }
  | rel_expr ">=" add_expr   { $$ = parse_binary(ps, @$, BIN_GE, $1, $3); }
  ;

add_expr
  : mul_expr
  | add_expr "+" mul_expr    { $$ = parse_binary(ps, @$, BIN_ADD, $1, $3); }
  | add_expr "-" mul_expr    { $$ = parse_binary(ps, @$, BIN_SUB, $1, $3); }
  ;

mul_expr
  : unary_expr
  | mul_expr "*" unary_expr  { $$ = parse_binary(ps, @$, BIN_MUL, $1, $3); }
  | mul_expr "/" unary_expr  { $$ = parse_binary(ps, @$, BIN_DIV, $1, $3); }
  | mul_expr "%" unary_expr  { $$ = parse_binary(ps, @$, BIN_MOD, $1, $3); }
  | mul_expr "@" unary_expr  { $$ = parse_binary(ps, @$, BIN_MATMUL, $1, $3); }
  ;

unary_expr
  : postfix_expr
  | "-" unary_expr   { $$ = parse_unary(ps, @$, AST_UNARY, UN_NEG, $2); }
  | "!" unary_expr   { $$ = parse_unary(ps, @$, AST_UNARY, UN_NOT, $2); }
  ;

postfix_expr
  : primary
  | postfix_expr "^T" { $$ = parse_unary(ps, @$, AST_TRANSPOSE, 0, $1); }
  ;

primary
  : INT {
      AstExpr *e = parse_node(ps, AST_INT, @$);
      e->ival = $1;
      $$ = parse_leaf(e);
    }
  | FLOAT {
      AstExpr *e = parse_node(ps, AST_FLOAT, @$);
      e->fval = $1;
      $$ = parse_leaf(e);
    }
  | "true" {
      AstExpr *e = parse_node(ps, AST_BOOL, @$);
      e->ival = 1;
      $$ = parse_leaf(e);
    }
  | "false" {
      $$ = parse_leaf(parse_node(ps, AST_BOOL, @$));
    }
  | IDENT {
      AstExpr *e = parse_node(ps, AST_NAME, @$);
      e->name = $1;
      e->name_loc = e->loc;
      $$ = parse_leaf(e);
    }
  | IDENT "(" args ")"       { $$ = parse_apply(ps, @$, AST_CALL, $1, @1, $3); }
  | DTYPE "(" args ")" {
      /* a conversion, f32(x): a call whose name is the dtype */
      $$ = parse_apply(ps, @$, AST_CALL, dtype_name($1), @1, $3);
    }
  | IDENT "[" arg_list "]" {
      $$ = parse_apply(ps, @$, AST_INDEX, $1, @1, $3);
    }
  | "(" expr ")"             { $$ = $2; }
  ;

args
  : %empty                   { $$ = (ExprList){0}; }
  | arg_list
  ;

arg_list
  : expr                     { $$ = parse_list_add(ps, (ExprList){0}, $1); }
  | arg_list "," expr        { $$ = parse_list_add(ps, $1, $3); }
  ;

%%
/* ------------------------------------------------------------ epilogue */

Loc parse_loc(const ParseState *ps, YyLoc l) {
  Loc loc = {ps->src, l.line, l.col, 1};
  if (l.end_line == l.line) {
    if (l.end > l.begin)
      loc.len = (int)(l.end - l.begin < 100000 ? l.end - l.begin : 100000);
  } else {
    /* A multi-line span underlines the rest of its first line. */
    const char *t = ps->src->text + l.begin;
    const char *nl = memchr(t, '\n', ps->src->len - l.begin);
    size_t n = nl ? (size_t)(nl - t) : ps->src->len - l.begin;
    if (n > 0)
      loc.len = (int)(n < 100000 ? n : 100000);
  }
  return loc;
}

void parse_error(ParseState *ps, Loc loc, const char *fmt, ...) {
  if (ps->stopped)
    return; /* past the cap: the parse is winding down */
  va_list ap;
  va_start(ap, fmt);
  StrBuf sb = {0};
  sb_vprintf(&sb, fmt, ap);
  va_end(ap);
  diag_error(ps->d, loc, "%s", sb.data);
  sb_free(&sb);
  int cap = ps->d->max_errors > 0 ? ps->d->max_errors : 20;
  if (ps->d->nerrors > cap)
    ps->stopped = true;
}

/* Bison calls this only when its stack is exhausted, which the grammar
 * allows only for deeply nested expressions ("((((..." or "- - - ..."). */
static void yyerror(YYLTYPE *loc, yyscan_t scanner, ParseState *ps,
                    const char *msg) {
  (void)scanner;
  (void)msg;
  parse_error(ps, parse_loc(ps, *loc), "expression nested too deeply (the "
              "limit is %d levels)", PARSE_MAX_DEPTH);
}

/* How a token the user wrote reads in a message: "';'", "identifier 'x'",
 * "number '1.5'", "keyword 'input'", "end of file". */
static void parse_describe(ParseState *ps, StrBuf *sb, yysymbol_kind_t k,
                           YyLoc l) {
  if (k == YYSYMBOL_YYEOF) {
    sb_puts(sb, "end of file");
    return;
  }
  const char *what = "";
  if (k == YYSYMBOL_IDENT)
    what = "identifier ";
  else if (k == YYSYMBOL_INT || k == YYSYMBOL_FLOAT)
    what = "number ";
  else if (k == YYSYMBOL_DTYPE || (k >= YYSYMBOL_KW_ATTENTION &&
                                   k <= YYSYMBOL_KW_FALSE))
    what = "keyword ";
  size_t n = l.end > l.begin ? l.end - l.begin : 0;
  const char *text = ps->src->text + l.begin;
  if (n > 40)
    sb_printf(sb, "%s'%.32s...'", what, text);
  else
    sb_printf(sb, "%s'%.*s'", what, (int)n, text);
}

/* One entry of an "expected ..." list: a token's spelling, or NULL for
 * tokens that a category phrase covers. */
static const char *parse_spelling(yysymbol_kind_t k) {
  switch (k) {
  case YYSYMBOL_IDENT: return "a name";
  case YYSYMBOL_INT: return "a number";
  case YYSYMBOL_DTYPE:
    return "a type (f16, bf16, f32, e4m3, e5m2, i32, u64 or bool)";
  case YYSYMBOL_SEMI: return "';'";
  case YYSYMBOL_COMMA: return "','";
  case YYSYMBOL_COLON: return "':'";
  case YYSYMBOL_ASSIGN: return "'='";
  case YYSYMBOL_LBRACE: return "'{'";
  case YYSYMBOL_RBRACE: return "'}'";
  case YYSYMBOL_LPAREN: return "'('";
  case YYSYMBOL_RPAREN: return "')'";
  case YYSYMBOL_LBRACK: return "'['";
  case YYSYMBOL_RBRACK: return "']'";
  case YYSYMBOL_KW_ATTENTION: return "'attention'";
  default: return NULL;
  }
}

static bool parse_has(const yysymbol_kind_t *exp, int n, yysymbol_kind_t k) {
  for (int i = 0; i < n; i++)
    if (exp[i] == k)
      return true;
  return false;
}

static bool parse_is_operator(yysymbol_kind_t k) {
  switch (k) {
  case YYSYMBOL_OROR: case YYSYMBOL_ANDAND: case YYSYMBOL_EQEQ:
  case YYSYMBOL_NOTEQ: case YYSYMBOL_LESSEQ: case YYSYMBOL_GREATEREQ:
  case YYSYMBOL_LESS: case YYSYMBOL_GREATER: case YYSYMBOL_PLUS:
  case YYSYMBOL_MINUS: case YYSYMBOL_STAR: case YYSYMBOL_SLASH:
  case YYSYMBOL_PERCENT: case YYSYMBOL_AT: case YYSYMBOL_TRANSPOSE:
    return true;
  default:
    return false;
  }
}

static bool parse_starts_expr(yysymbol_kind_t k) {
  switch (k) {
  case YYSYMBOL_IDENT: case YYSYMBOL_INT: case YYSYMBOL_FLOAT:
  case YYSYMBOL_DTYPE: case YYSYMBOL_KW_TRUE: case YYSYMBOL_KW_FALSE:
  case YYSYMBOL_LPAREN: case YYSYMBOL_MINUS: case YYSYMBOL_BANG:
    return true;
  default:
    return false;
  }
}

static bool parse_starts_stmt(yysymbol_kind_t k) {
  return k == YYSYMBOL_IDENT || k == YYSYMBOL_KW_INPUT ||
         k == YYSYMBOL_KW_SCALAR || k == YYSYMBOL_KW_OUTPUT ||
         k == YYSYMBOL_KW_GRAD;
}

/* Writes "X", "X or Y", "X, Y or Z" for the expected set, folding whole
 * classes into "a statement", "an expression", "an operator". Returns
 * false when the list would be too long to help. */
static bool parse_expected(StrBuf *sb, const yysymbol_kind_t *exp, int n) {
  const char *items[8];
  int m = 0;
  bool stmt = parse_has(exp, n, YYSYMBOL_KW_INPUT);
  bool expr = parse_has(exp, n, YYSYMBOL_FLOAT);
  bool oper = parse_has(exp, n, YYSYMBOL_PLUS);
  if (stmt)
    items[m++] = "a statement";
  for (int i = 0; i < n && m < 6; i++) {
    yysymbol_kind_t k = exp[i];
    if (k == YYSYMBOL_YYEOF || (stmt && parse_starts_stmt(k)) ||
        (expr && parse_starts_expr(k)) ||
        (oper && (parse_is_operator(k) || k == YYSYMBOL_LPAREN ||
                  k == YYSYMBOL_LBRACK)))
      continue;
    const char *s = parse_spelling(k);
    if (!s)
      return false;
    items[m++] = s;
  }
  if (expr)
    items[m++] = "an expression";
  if (oper)
    items[m++] = "an operator";
  if (m == 0 || m > 5)
    return false;
  for (int i = 0; i < m; i++)
    sb_printf(sb, "%s%s", i == 0 ? "" : i == m - 1 ? " or " : ", ", items[i]);
  return true;
}

static int yyreport_syntax_error(const yypcontext_t *ctx, yyscan_t scanner,
                                 ParseState *ps) {
  (void)scanner;
  if (ps->stopped)
    return 0;
  yysymbol_kind_t exp[YYNTOKENS];
  int n = yypcontext_expected_tokens(ctx, exp, YYNTOKENS);
  if (n < 0)
    n = 0;
  yysymbol_kind_t la = yypcontext_token(ctx);
  YyLoc at = *yypcontext_location(ctx);
  bool ends = la == YYSYMBOL_YYEOF || la == YYSYMBOL_RBRACE ||
              la == YYSYMBOL_SEMI || la == YYSYMBOL_KW_ATTENTION;
  /* The token before the lookahead (end of file is not a scanned token,
   * so there it is the last one scanned). */
  bool have_before = la == YYSYMBOL_YYEOF ? ps->have_cur : ps->have_prev;
  YyLoc before = la == YYSYMBOL_YYEOF ? ps->cur : ps->prev;
  bool later_line = have_before && at.line > before.end_line;
  /* Where a missing token belongs: just after the previous token. */
  YyLoc after = at;
  if (have_before) {
    after.line = after.end_line = before.end_line;
    after.col = after.end_col = before.end_col;
    after.begin = after.end = before.end;
  }

  /* An unclosed '(' or '[' (the lookahead itself may be a new opener). */
  int top = ps->nopen - 1;
  if (top >= 0 && (la == YYSYMBOL_LPAREN || la == YYSYMBOL_LBRACK))
    top--;
  if (top >= 0 && top < PARSE_MAX_OPEN && (ends || later_line)) {
    char open = ps->open_kind[top];
    yysymbol_kind_t close = open == '(' ? YYSYMBOL_RPAREN : YYSYMBOL_RBRACK;
    if (parse_has(exp, n, close)) {
      parse_error(ps, parse_loc(ps, after), "expected '%c' to close '%c'",
                  open == '(' ? ')' : ']', open);
      diag_note(ps->d, parse_loc(ps, ps->open_loc[top]), "'%c' opened here",
                open);
      return 0;
    }
  }
  if (parse_has(exp, n, YYSYMBOL_SEMI) && (ends || later_line) &&
      la != YYSYMBOL_SEMI) {
    parse_error(ps, parse_loc(ps, after), "expected ';' after statement");
    return 0;
  }
  if ((la == YYSYMBOL_YYEOF || la == YYSYMBOL_KW_ATTENTION) && ps->graph &&
      parse_has(exp, n, YYSYMBOL_RBRACE)) {
    parse_report_unclosed(ps, la == YYSYMBOL_YYEOF ? after : at);
    return 0;
  }

  StrBuf sb = {0};
  if (la == YYSYMBOL_IDENT && n == 1 && exp[0] == YYSYMBOL_DTYPE) {
    sb_printf(&sb, "unknown type '%.*s'", (int)(at.end - at.begin),
              ps->src->text + at.begin);
    sb_puts(&sb, "; the types are f16, bf16, f32, e4m3, e5m2, i32, u64 and "
                 "bool");
  } else {
    sb_puts(&sb, "unexpected ");
    parse_describe(ps, &sb, la, at);
    size_t mark = sb.len;
    sb_puts(&sb, ", expected ");
    if (!parse_expected(&sb, exp, n)) {
      sb.len = mark;
      sb.data[mark] = '\0';
    }
  }
  parse_error(ps, parse_loc(ps, at), "%s", sb.data);
  sb_free(&sb);
  return 0;
}

AstFile *parse_source(const Source *src, Arena *a, Diag *d) {
  ParseState *ps = mem_calloc(1, sizeof *ps);
  if (!ps)
    mem_oom();
  ps->src = src;
  ps->a = a;
  ps->d = d;
  ps->file = arena_alloc(a, sizeof *ps->file);
  ps->file->src = src;
  ps->line = ps->col = 1;
  yyscan_t scanner;
  if (yylex_init(&scanner) != 0)
    die("cannot create the scanner");
  if (src->len > (size_t)INT32_MAX / 2) {
    parse_error(ps, (Loc){src, 1, 1, 1}, "file too large (%zu bytes)",
                src->len);
  } else {
    YY_BUFFER_STATE buf = yy_scan_bytes(src->text, (int)src->len, scanner);
    yyparse(scanner, ps);
    yy_delete_buffer(buf, scanner);
  }
  yylex_destroy(scanner);
  AstFile *f = ps->file;
  mem_free(ps->names);
  mem_free(ps);
  return f;
}
