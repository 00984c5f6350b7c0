/*
 * attnc.h: the compiler's one internal header. Each section belongs to one
 * source file, in pipeline order, so this file doubles as the architecture:
 *
 *   source.c/diag.c  text and located diagnostics
 *   grammar/attn.y   .attn text -> AST (reentrant bison + flex)
 *   ir_build.c       AST -> IR graph, with every semantic check
 *   ir_types.c       the typing rules ir_build.c applies
 *   ir_dump.c        readable IR and Graphviz dumps
 *   interp.c         CPU reference: evaluates an IR graph in double precision
 *   match.c          IR graph -> kernel spec (which template, which hooks)
 *   emit.c           kernel spec -> CUDA C source
 *
 * Conventions: every node carries a Loc; user errors go through diag_error();
 * internal bugs go through die(), which names __FILE__:__LINE__ and unwinds
 * to the pass's scope (mem.c): the library reports ATTN_ERROR_INTERNAL, the
 * command prints it; nothing aborts. The passes allocate from an Arena freed
 * once per unit of work, and every allocation goes through mem.c.
 */
#ifndef ATTNC_H
#define ATTNC_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ATTNC_VERSION "0.1.0"

/* ----------------------------------------------------------------- mem.c */

/* Allocation: NULL (and the thread's failure flag set) when memory runs
 * out or a test made this allocation fail. Free with mem_free only. */
void *mem_alloc(size_t n);
void *mem_calloc(size_t n, size_t size);
void *mem_realloc(void *p, size_t n); /* NULL: p is left as it was */
char *mem_strdup(const char *s);
void mem_free(void *p);
/* The same owner scope as the block `sibling` (an arena's chunks). */
void *mem_alloc_like(const void *sibling, size_t n);
/* p, or unwinds to the current scope reporting out of memory. */
void *mem_must(void *p);
_Noreturn void mem_oom(void);
/* Runs fn(arg) as a scoped pass: 0 when it returns; MEM_OOM or
 * MEM_INTERNAL when an allocation failed or die() was called inside it,
 * with every block it allocated freed and the reason in msg. */
enum { MEM_OOM = 1, MEM_INTERNAL = 2 };
int mem_scoped(void (*fn)(void *), void *arg, char *msg, size_t cap);
bool mem_in_scope(void);
/* Whether an allocation failed on this thread since the last call. */
bool mem_take_failure(void);
/* Tests: the n-th allocation from now fails (once); 0 turns it off. */
void mem_fail_nth(long n);
bool mem_fail_pending(void); /* the failing allocation has not come yet */
long mem_allocations(void);

/* ---------------------------------------------------------------- util.c */

/* Arenas and string buffers come from mem.c: inside a scope a failed
 * allocation unwinds it; outside, arena_new returns NULL and a string
 * buffer that cannot grow empties and ignores further writes (failed). */
typedef struct Arena Arena;
Arena *arena_new(void);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t size); /* zeroed, 16-byte aligned */
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A growable byte buffer; data is always NUL-terminated once non-empty. */
typedef struct StrBuf {
  char *data;
  size_t len, cap;
  bool failed; /* memory ran out outside a scope: empty from then on */
} StrBuf;
void sb_putc(StrBuf *sb, char c);
void sb_puts(StrBuf *sb, const char *s);
void sb_write(StrBuf *sb, const char *s, size_t n);
void sb_printf(StrBuf *sb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void sb_vprintf(StrBuf *sb, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
void sb_free(StrBuf *sb);

/* Whether s is a C identifier ([A-Za-z_][A-Za-z0-9_]*). */
bool is_c_ident(const char *s);

_Noreturn void die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define die(...) die_at(__FILE__, __LINE__, __VA_ARGS__)

/* ------------------------------------------------------ source.c, diag.c */

typedef struct Source {
  const char *name; /* file name as given, or "<string>" */
  const char *text; /* NUL-terminated copy; may contain other NULs */
  size_t len;
} Source;

/* A place in a source: 1-based line and column (in bytes), and how many
 * bytes to underline (at least 1). */
typedef struct Loc {
  const Source *src;
  int line, col, len;
} Loc;

typedef struct Diag {
  StrBuf out;     /* every message, formatted for a terminal */
  int nerrors;
  int max_errors; /* 0: default (20); later errors are counted, not shown */
} Diag;

/* The largest source attnc reads: a 10 MB file of 48k graphs checks in a
 * second; /dev/zero must not fill memory. */
#define SOURCE_MAX_BYTES (64 << 20)
/* The longest name (graph, tensor, scalar, local) the language takes. */
#define ATTN_MAX_NAME 256
/* Reads a whole file; on failure reports "cannot read FILE: reason". */
Source *source_load(Arena *a, const char *path, Diag *d);
Source *source_from_string(Arena *a, const char *name, const char *text,
                           size_t len);

/* "file:line:col: error: message", the source line, a caret/underline. */
void diag_error(Diag *d, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same shape with "note:"; attaches to the previous error. */
void diag_note(Diag *d, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* An error with no location: "attnc: error: message". */
void diag_plain(Diag *d, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void diag_free(Diag *d);

/* ---------------------------------------------------------------- types */

/* X(enum suffix, spelling, bytes) */
#define ATTN_DTYPES(X)                                                        \
  X(F16, "f16", 2)                                                            \
  X(BF16, "bf16", 2)                                                          \
  X(F32, "f32", 4)                                                            \
  X(E4M3, "e4m3", 1)                                                          \
  X(E5M2, "e5m2", 1)                                                          \
  X(I32, "i32", 4)                                                            \
  X(U64, "u64", 8)                                                            \
  X(BOOL, "bool", 1)

typedef enum DType {
  DT_NONE = 0,
#define X(e, s, n) DT_##e,
  ATTN_DTYPES(X)
#undef X
      DT_COUNT
} DType;

const char *dtype_name(DType t); /* "bf16"; "?" for DT_NONE */
int dtype_size(DType t);
bool dtype_is_float(DType t); /* f16 bf16 f32 e4m3 e5m2 */
bool dtype_is_fp8(DType t);   /* e4m3 e5m2 */
bool dtype_is_int(DType t);   /* i32 u64 */

/* Rounds x to the value dtype t can hold, bit-compatible with CUDA's
 * direct conversions from double: f16 (__double2half), bf16
 * (__double2bfloat16) and f32 round to nearest even and overflow to inf;
 * e4m3 and e5m2 round to nearest even with saturation
 * (__nv_cvt_double_to_fp8(x, __NV_SATFINITE, ...), the __nv_fp8_e4m3
 * constructor): beyond the largest finite value, inf included, gives
 * +-448 / +-57344; NaN stays NaN. i32 and u64 truncate toward zero and
 * saturate (NaN -> 0, negatives -> 0 for u64); bool is x != 0. */
double dtype_round(DType t, double x);
void dtype_round_array(DType t, double *x, size_t n);
uint16_t dtype_f16_bits(double x);  /* NaN -> 0x7fff */
uint16_t dtype_bf16_bits(double x); /* NaN -> 0x7fff */
uint8_t dtype_e4m3_bits(double x);  /* NaN -> 0x7f | sign */
uint8_t dtype_e5m2_bits(double x);  /* NaN -> 0x7e | top bits | sign */
void dtype_to_bits(DType t, double x, void *dst); /* dtype_size(t) bytes */
double dtype_from_bits(DType t, const void *p);


/* ------------------------------------------------------------------ AST */

/* Operators, shared by the AST and the IR. X(enum suffix, spelling) */
#define ATTN_BINOPS(X)                                                        \
  X(ADD, "+")                                                                 \
  X(SUB, "-")                                                                 \
  X(MUL, "*")                                                                 \
  X(DIV, "/")                                                                 \
  X(MOD, "%")                                                                 \
  X(MATMUL, "@")                                                              \
  X(LT, "<")                                                                  \
  X(LE, "<=")                                                                 \
  X(GT, ">")                                                                  \
  X(GE, ">=")                                                                 \
  X(EQ, "==")                                                                 \
  X(NE, "!=")                                                                 \
  X(AND, "&&")                                                                \
  X(OR, "||")

typedef enum BinOp {
#define X(e, s) BIN_##e,
  ATTN_BINOPS(X)
#undef X
      BIN_COUNT
} BinOp;

typedef enum UnOp { UN_NEG, UN_NOT } UnOp;

const char *binop_spelling(BinOp op);

typedef enum AstKind {
  AST_INT,       /* ival */
  AST_FLOAT,     /* fval */
  AST_BOOL,      /* ival 0/1: true, false */
  AST_NAME,      /* name */
  AST_UNARY,     /* op (UnOp), args[0] */
  AST_BINARY,    /* op (BinOp), args[0], args[1] */
  AST_CALL,      /* name(args...) */
  AST_INDEX,     /* name[args...] */
  AST_TRANSPOSE, /* args[0]^T */
  AST_ERROR      /* placeholder left by error recovery */
} AstKind;

typedef struct AstExpr {
  AstKind kind;
  Loc loc; /* the whole expression; for calls/index, from name to ')' */
  int op;
  const char *name;
  Loc name_loc;
  int64_t ival;
  double fval;
  struct AstExpr **args;
  int nargs;
} AstExpr;

/* One dimension of a declared shape: a symbol bound at run time (B, Sq)
 * or an integer literal (256, 1). */
typedef struct AstDim {
  Loc loc;
  const char *sym; /* NULL for a literal */
  int64_t value;
} AstDim;

typedef struct AstType {
  Loc loc;
  DType dtype;
  bool has_shape; /* "bf16[...]" rather than "f32" */
  AstDim *dims;
  int ndims;
} AstType;

typedef enum StmtKind {
  STMT_INPUT,  /* input NAME : TYPE ; */
  STMT_SCALAR, /* scalar NAME : DTYPE [= EXPR] ; */
  STMT_ASSIGN, /* NAME = EXPR ; */
  STMT_OUTPUT, /* output NAME [: TYPE] [= EXPR] ; */
  STMT_GRAD    /* grad NAME, NAME ... ; or grad NAME ... { STMTS } */
} StmtKind;

typedef struct AstStmt {
  StmtKind kind;
  Loc loc; /* the whole statement */
  const char *name;
  Loc name_loc;
  bool has_type;
  AstType type;
  AstExpr *value; /* NULL when absent */
  const char **names; /* STMT_GRAD */
  Loc *name_locs;
  int nnames;
  bool has_block;          /* STMT_GRAD with a { } block (maybe empty) */
  struct AstStmt **block;  /* its statements */
  int nblock;
} AstStmt;

typedef struct AstGraph {
  const char *name;
  Loc loc; /* the graph's name */
  AstStmt **stmts;
  int nstmts;
} AstGraph;

typedef struct AstFile {
  const Source *src;
  AstGraph **graphs;
  int ngraphs;
} AstFile;

/* grammar/attn.y. Never NULL; on errors the AST holds what parsed and
 * d->nerrors > 0. */
AstFile *parse_source(const Source *src, Arena *a, Diag *d);

/* ------------------------------------------------------------ IR (ir.c) */

/* The axes a value varies over. Scores vary over B|H|I|J, Q over B|H|I|D,
 * the output over B|H|I|D, softmax statistics over B|H|I, scalars over none. */
enum { DOM_B = 1, DOM_H = 2, DOM_I = 4, DOM_J = 8, DOM_D = 16 };

/* The IR's ops: the structural ones here, X(enum suffix, spelling,
 * operand count; -1 = variable), and between them the pointwise ops of
 * compiler/ops.def (one row each: name, arity, typing, CPU evaluation,
 * device spelling, derivative). */
#define IR_OPS_LEAVES(X)                                                      \
  X(CONST, "const", 0)         /* fval (floats) or ival (ints, bools) */     \
  X(SCALAR, "scalar", 0)       /* ref: graph->scalars[ref] */                \
  X(DIM, "dim", 0)             /* ref: graph->dims[ref], an i32 */           \
  X(INDEX, "index", 0)         /* ival: DOM_B, DOM_H, DOM_I or DOM_J */      \
  X(INPUT, "input", 0)         /* ref: a whole tensor (q, k, v) */           \
  X(LOAD, "load", -1)          /* ref: tensor; src: subscripts */            \
  X(TRANSPOSE, "transpose", 1) /* k^T */                                     \
  X(QK, "matmul_qk", 2)        /* q @ k^T: src q, k */                       \
  X(PV, "matmul_pv", 2)        /* p @ v: src p, v */
/* (ops.def: NEG .. OR, MIN, MAX, WHERE, the math functions, CAST (to
 * node->type: f32(x), i32(x)), MASK (src: scores, condition).) */
#define IR_OPS_REDUCTIONS(X)                                                  \
  X(SOFTMAX, "softmax", -1)    /* over j; src[1]: the sink, if any */        \
  X(LOGSUMEXP, "logsumexp", -1) /* over j; src[1]: the same sink */          \
  X(DROPOUT, "dropout", 4)     /* src: p, rate, seed, offset */              \
  X(AMAX, "amax", 1)           /* max |x| over everything */

typedef enum IrOp {
#define X(e, s, n) IR_##e,
  IR_OPS_LEAVES(X)
#define OP(e, ir, fn, n, ...) IR_##e,
#include "ops.def"
#undef OP
  IR_OPS_REDUCTIONS(X)
#undef X
      IR_OP_COUNT
} IrOp;

/* What ops.def says of a pointwise op (ops.c): the language function
 * that makes it (NULL for operators and internal ops), its arity and
 * typing rule, its device spellings for float and for integer operands,
 * and whether it passes gradient to some operand. */
typedef enum OpType {
  T_NEG, T_NOT, T_ARITH, T_MOD, T_CMP, T_EQ, T_LOGIC, T_MINMAX, T_WHERE, T_MATH, T_KEEP,
  T_CAST, T_MASK
} OpType;
typedef struct OpInfo {
  const char *fn;
  int arity;
  OpType type;
  const char *dev, *dev_int;
  bool diff;
} OpInfo;
/* NULL for the structural ops (leaves, matmuls, reductions). */
const OpInfo *op_info(IrOp op);
/* One element of pointwise op `op` computing in `type`, from nsrc
 * operands x (total: integer division by zero is defined). */
double op_apply(IrOp op, DType type, const double *x, int nsrc);
/* op_apply for node n's op and type, as the CPU reference evaluates
 * each element (reference/interp.c, interp_bwd.c). */
typedef struct IrNode IrNode;
double ref_apply_op(const IrNode *n, const double *x);

const char *ir_op_name(IrOp op);
int ir_op_arity(IrOp op); /* -1: variable */

#define IR_MAX_SRC 4
#define IR_MAX_RANK 4
/* IR_DIM refs below 0: a packed sequence's own lengths, seqlen_q and
 * seqlen_k (docs/language.md "Packed sequences"), one value per b. */
#define IR_SEQLEN_Q (-1)
#define IR_SEQLEN_K (-2)

struct IrNode {
  IrOp op;
  int id;   /* position in graph->nodes: a topological order */
  Loc loc;  /* the source expression that made it */
  DType type;
  unsigned dom; /* DOM_* axes */
  struct IrNode *src[IR_MAX_SRC];
  int nsrc;
  int64_t ival;
  double fval;
  int ref;
  const char *name; /* last user name bound to it, or NULL */
};

/* The sink of a softmax or logsumexp node (its second operand), or NULL. */
static inline IrNode *ir_sink(const IrNode *n) { return n && n->nsrc > 1 ? n->src[1] : NULL; }

typedef struct IrDimSym {
  const char *name; /* "B", "Sq", ... */
  Loc loc;          /* first appearance */
} IrDimSym;

typedef struct IrTensor {
  const char *name;
  Loc loc;
  DType type;
  int ndims;
  int dim_sym[IR_MAX_RANK];     /* index into graph->dims, or -1 */
  int64_t dim_val[IR_MAX_RANK]; /* the literal when dim_sym < 0 */
  bool is_output;
  bool grad;
  /* A paged KV cache, read through paged(cache, table) (pages of
   * [Pages, PageSize, Hk, D]) or paged_hnd(cache, table) ([Pages, Hk,
   * PageSize, D]): page_table is the i32 [B, MaxPages] table's tensor
   * index. Its logical view is [B, Hk, MaxPages * PageSize, D]
   * (ir_kv_dim). */
  bool paged, paged_hnd;
  int page_table;
  /* A packed variable-length tensor, read through packed(x, offsets): x
   * is [Tokens, Heads, D] and seq_offsets the tensor index of its i32
   * [B + 1] offsets; sequence b is rows offsets[b] .. offsets[b + 1] - 1.
   * Its logical view is [B, Heads, length of b, D] (ir_kv_dim). The
   * outputs of a graph whose q is packed are packed by q's offsets:
   * o [Tokens, H, Dv], row statistics [H, Tokens]. */
  bool packed;
  int seq_offsets;
} IrTensor;


typedef struct IrScalar {
  const char *name;
  Loc loc;
  DType type;
  bool has_default;
  double fdefault;  /* for floats */
  int64_t idefault; /* for ints and bools */
} IrScalar;

typedef struct IrOutput {
  const char *name;
  Loc loc;
  IrNode *value;
  int tensor; /* graph->tensors[tensor] describes what the caller binds */
} IrOutput;

typedef struct IrGraph {
  const char *name;
  Loc loc;
  IrNode **nodes;
  int nnodes;
  IrDimSym *dims;
  int ndims;
  IrTensor *tensors; /* inputs in declaration order, then outputs */
  int ntensors;
  IrScalar *scalars;
  int nscalars;
  IrOutput *outputs;
  int noutputs;
  /* The chain's landmarks, set by the checks. */
  IrNode *qk, *softmax, *pv;
  int q, k, v; /* tensor indices of q, k, v */
  struct IrGradBlock *grad; /* the `grad ... { }` block, or NULL */
} IrGraph;

/* A `grad q, k, v { ... }` block (ir_grad.c; docs/language.md "FP8
 * gradients"): what the backward pass does at its edges, where the FP8
 * recipe scales and rounds. Each gradient is a leaf (IR_INPUT, ref -1,
 * named as the block names it: d<o>, ds, d<q>, d<k>, d<v>) and its value
 * a pointwise function of that leaf and of values fixed for the whole call
 * (scalars, constants, one-element reads): the incoming gradient as given
 * (d<o> = its storage times a descale), dS before the products (a rounding
 * with its scale), and each gradient as stored. The block's nodes are its
 * own (nodes): no pass over the forward's nodes sees them. */
enum { IR_GRAD_DO, IR_GRAD_DS, IR_GRAD_DQ, IR_GRAD_DK, IR_GRAD_DV, IR_GRAD_N };
typedef struct IrGradValue {
  IrNode *leaf;  /* the gradient as the backward computes it (or given: d<o>) */
  IrNode *value; /* what the block makes of it; == leaf when untouched */
  DType type;    /* storage type: d<o>'s as given, a gradient's as stored;
                    DT_NONE: the default (the tensor's own type) */
  Loc loc;       /* the statement that set value or type, else the grad statement */
} IrGradValue;
typedef struct IrGradAmax {
  const char *name; /* the backward's output (f32[1]) */
  Loc loc;
  int of;           /* IR_GRAD_*: the gradient whose elements it reduces */
  IrNode *value;    /* max |value| over them: a function of that leaf */
} IrGradAmax;
typedef struct IrGradBlock {
  Loc loc; /* the grad statement */
  IrGradValue v[IR_GRAD_N];
  IrGradAmax *amax;
  int namax;
  IrNode **nodes;
  int nnodes;
} IrGradBlock;

/* Where the logical dims of q, k or v, [B, H(k), S, D], are declared:
 * role 0 to 3 gives the tensor and its dimension. A dense tensor holds
 * them all; a paged cache takes B from its page table, Skv from no one
 * dimension (the table's MaxPages times the cache's PageSize: -1); a
 * packed tensor takes B + 1 from its offsets (role 0 names the offsets'
 * dimension, B + 1), and its lengths from no dimension (-1). */
typedef struct IrKvDim {
  int tensor, dim;
} IrKvDim;
IrKvDim ir_kv_dim(const IrGraph *g, int tensor, int role);
/* What p @ v's left operand does to the softmax's output P, innermost
 * first: dropout, a scale fixed per (b, h) (`p * scale_s`), a rounding to
 * a storage type (`e4m3(...)`, the FP8 recipe's P). Each is NULL when
 * absent (f32 casts are skipped); `bad` is the first node of any other
 * shape (a second scale, a scale after the rounding), which no kernel
 * takes. ir_build admits only these ops between softmax and p @ v. */
typedef struct IrPChain {
  IrNode *dropout, *scale, *round, *bad;
} IrPChain;
IrPChain ir_p_chain(const IrGraph *g);
/* Whether n is base times or over values that vary over none of the axes
 * in `varies` (products and quotients, any nesting). */
bool ir_scales(const IrNode *n, const IrNode *base, unsigned varies);
/* The attention output: the first output whose value is p @ v, or p @ v
 * times values fixed per (b, h) (`o = out * scale_o`); -1 when none is. */
int ir_attention_output(const IrGraph *g);
/* A folded constant (ir_fold.c): f for floats, i for integers and bools. */
typedef struct IrConst {
  DType t;
  double f;
  int64_t i;
} IrConst;
/* Folds a scalar's default: true with the value, or false after a located
 * error (not a constant expression, a type error, an out-of-range cast). */
bool ir_fold(Diag *d, const AstExpr *e, IrConst *out);
double ir_const_num(IrConst v); /* f, or i as a double */
/* The page size's dimension of a paged cache (1, or 2 for paged_hnd). */
static inline int ir_page_dim(const IrTensor *t) { return t->paged_hnd ? 2 : 1; }
/* The head dimension of q, k or v: the last of any layout. */
static inline int64_t ir_head_dim(const IrTensor *t) { return t->dim_val[t->ndims - 1]; }
/* A graph of packed variable-length sequences (q, k and v packed). */
static inline bool ir_packed(const IrGraph *g) { return g->q >= 0 && g->tensors[g->q].packed; }

typedef struct IrModule {
  const Source *src;
  IrGraph **graphs;
  int ngraphs;
} IrModule;

/* ir_build.c: resolves names, infers types and domains, runs every check.
 * Returns NULL when d->nerrors > 0. */
IrModule *ir_build(const AstFile *ast, Arena *a, Diag *d);
IrGraph *ir_find_graph(const IrModule *m, const char *name);

/* ir_types.c: the typing rules, for ir_build.c's lowering and folding. */
typedef enum FnKind {
  FN_MATH, /* one number -> f32 (abs, floor, ceil keep integers) */
  FN_MINMAX, FN_WHERE, FN_CLAMP, FN_CAST, FN_MASK, FN_SOFTMAX, FN_LSE,
  FN_DROPOUT, FN_AMAX,
  FN_PAGED /* a view, not a value: paged(cache, table), paged_hnd(...), packed(x, offsets) */
} FnKind;

typedef struct FnInfo {
  const char *name;
  FnKind kind;
  int nargs;
  IrOp op;
  DType cast;
} FnInfo;

const FnInfo *ir_find_fn(const char *name); /* NULL: not a built-in */
IrOp ir_binop_op(BinOp op);
bool ir_is_num(DType t);
/* f32 if either is a float, else u64 if either is u64, else i32. */
DType ir_arith_join(DType a, DType b);
DType ir_compute_type(DType t); /* the type a stored t computes in */
/* Result types, or DT_NONE after reporting at loc. */
DType ir_binop_type(Diag *d, Loc loc, BinOp op, DType x, DType y);
DType ir_math_type(Diag *d, Loc loc, const FnInfo *fn, DType x);
DType ir_where_type(Diag *d, Loc loc, DType c, DType x, DType y);
DType ir_minmax_type(Diag *d, Loc loc, const char *fn, DType x, DType y);

/* ir.c: tiny constructors. A node gets its id when a graph takes it;
 * src[0..nsrc) must be non-NULL and nsrc must match the op's arity. */
IrNode *ir_node(Arena *a, IrOp op, Loc loc, DType type, unsigned dom,
                int nsrc, IrNode *const *src);
IrNode *ir_const_float(Arena *a, Loc loc, double v);          /* f32 */
IrNode *ir_const_int(Arena *a, Loc loc, DType type, int64_t v); /* i32 u64 bool */
/* "bhij", "bhid", "" for a DOM_* set; buf needs 6 bytes. */
const char *ir_dom_letters(unsigned dom, char buf[8]);

/* ir_check.c: the whole-graph checks ir_build runs once a graph's
 * statements are lowered: exactly one q @ k^T, softmax and p @ v; the
 * shapes of q, k and v; logsumexp's operand; the outputs' types and
 * shapes (filling in omitted ones: an output tensor with DT_NONE or
 * ndims < 0 gets its default). Sets g->q, k, v, qk, softmax, pv. Returns
 * the number of errors it reported. */
int ir_check_graph(IrGraph *g, Diag *d);

/* ir_dump.c */
void ir_dump(StrBuf *out, const IrGraph *g);
/* The grad block's nodes (&N) and what it makes of each gradient (part of
 * ir_dump; bwd_dump refers to its nodes). */
void ir_dump_grad(StrBuf *out, const IrGraph *g);
void ir_dot(StrBuf *out, const IrGraph *g);

/* ------------------------------------------------------------- match.c */

/* One conjunct of a top-level mask. An affine conjunct reads
 *   ci*i + cj*j + C <= 0
 * where ci, cj are integer constants and C (the sum of `terms`, each a
 * coefficient times an integer value that varies over neither i nor j,
 * plus `k`) is fixed for a (b, h) pair: per-batch lengths, run-time
 * scalars and dimension sizes all qualify. Affine conjuncts give each query
 * tile its range of key tiles; the others are tested per element. */
#define MATCH_MAX_TERMS 8
#define MATCH_MAX_ALTS 8 /* alternatives of a disjunctive mask conjunct */
/* A bound on |value| of integer arithmetic over i, j and row-invariant
 * terms: mi |i| + mj |j| + mk + sum(c |t|), coefficients >= 0. */
typedef struct MagForm {
  int64_t mi, mj, mk;
  int n;
  int64_t c[MATCH_MAX_TERMS];
  IrNode *t[MATCH_MAX_TERMS];
  bool unbounded; /* a coefficient overflowed: no useful bound */
} MagForm;

typedef struct MaskTerm {
  IrNode *cond; /* the conjunct as written */
  bool affine;
  int64_t ci, cj, k;
  int nterms;
  int64_t coef[MATCH_MAX_TERMS];
  IrNode *term[MATCH_MAX_TERMS];
  /* The kernels evaluate the two sides in i32, wrapping like C on int32
   * (the language's semantics); the affine form above is exact. They agree
   * while no arithmetic in a side leaves i32: wrap[s] bounds every
   * intermediate of side s (has_wrap[s]: some arithmetic to bound), which
   * the hooks check per tile before trusting the form (emit.c). */
  bool has_wrap[2];
  MagForm wrap[2];
  /* A separable conjunct (not affine): `side[0] sep_op side[1]`, a
   * comparison whose side[0] varies over i but not j and side[1] over j
   * but not i (neither over d); sides written the other way round are
   * swapped and the operator mirrored. sep_kind is the type the
   * comparison computes in (f32, i32, u64 or bool, as the emitted
   * attn_keep computes it). Tiles are classified from per-tile ranges of
   * each side (emit_sep.c). */
  bool sep;
  IrOp sep_op;
  IrNode *side[2];
  DType sep_kind;
  /* A disjunction of affine conjunctions (StreamingLLM's `j < 4 || i - j <
   * w`, prefix-LM's `j <= i || j < prefix[b]`): not affine itself, but
   * each of its nalt alternatives is a conjunction of the alt_n[a] affine
   * terms alt[a][..]. The hooks classify a tile by its best alternative
   * (class 0 when every alternative masks it, 2 when one keeps it all) and
   * bound its keys by the hull of the alternatives' ranges, so the tiles
   * between the parts are skipped (emit.c). */
  int nalt;
  struct MaskTerm **alt;
  int *alt_n;
} MaskTerm;

/* FWD_SM80: portable mma.sync template (every target; paged KV caches on
 * every target); FWD_SM90: the Hopper TMA + wgmma template, chosen for
 * sm_90 when the target is the arch-specific sm_90a. */
typedef enum TemplateKind { TMPL_FWD_SM80, TMPL_FWD_SM90 } TemplateKind;

/* What a graph asks of a kernel template. */
typedef struct KernelSpec {
  const IrGraph *g;
  TemplateKind tmpl;
  int sm;          /* target compute capability, e.g. 80, 90 */
  DType in_type;   /* q: f16, bf16, e4m3 or e5m2 */
  DType kv_type;   /* k and v: in_type, or e4m3/e5m2 (an FP8 q, or an FP8
                      KV cache against a bf16/f16 q) */
  DType mma_type;  /* the 16-bit type the MMAs take: q's, or f16 for an
                      FP8 q (FP8 tensors are converted on load, exactly) */
  bool packed;     /* q, k and v are packed sequences (IrTensor.packed): the
                      forward templates only, no decode kernel (match.c) */
  bool paged;      /* k and v are paged caches (IrTensor.paged): the decode
                      kernel and fwd_sm80 (rows gathered through the table) */
  DType out_type;  /* o */
  int d_qk, d_v;
  IrNode *score;   /* the score chain under the top-level masks */
  bool score_reads_ij; /* it reads a tensor at positions varying over i or j */
  MaskTerm *masks; /* the top-level masks' conjuncts */
  int nmasks;
  int o_output;    /* index in g->outputs of the p @ v chain's output */
  int lse_output;  /* index in g->outputs of logsumexp, or -1 */
  int amax_output; /* index in g->outputs of amax(x), x a function of the
                      output row element, or -1 */
  IrNode *dropout; /* the dropout p @ v reads (src: p, rate, seed, offset),
                      or NULL; the kernels scale P by attn_dropout_words
                      before P V only (row sums and lse stay undropped) */
  IrNode *p_scale; /* P's scale before P V (fixed per (b, h)), or NULL */
  DType p_round;   /* the type P is rounded to before P V (e4m3, e5m2,
                      bf16, f16), or DT_NONE (ir_p_chain) */
} KernelSpec;

/* Recognises the forward chain and picks a template. NULL with a located
 * error (naming the node and why) when no template can run the graph. */
KernelSpec *match_graph(const IrGraph *g, int sm, Arena *a, Diag *d);
/* The affine form of one comparison: fills out[0] (and out[1] for ==) and
 * returns how many it filled; 0 when the condition is not affine. */
int match_affine(IrNode *cond, MaskTerm out[2]);
/* The separable form of one comparison (MaskTerm.sep): fills out and
 * returns true, or false when cond is not a comparison of an i side with
 * a j side. */
bool match_separable(IrNode *cond, MaskTerm *out);
/* The interval rules of a separable conjunct `A op B` (op one of LT LE GT
 * GE EQ NE), as C expressions over alo, ahi (the range of A over a tile's
 * rows) and blo, bhi (of B over its keys): `none` holds when no pair can
 * satisfy op (class 0), `all` when every pair does (class 2). Written as
 * plain comparisons, so a NaN bound makes both false (class 1). */
void match_sep_rules(IrOp op, const char **none, const char **all);
/* The same rules evaluated in C: 0, 1 or 2 (tests check them against
 * brute force). */
int match_sep_class(IrOp op, double alo, double ahi, double blo, double bhi);

/* ----------------------------------------------------------- tmpl_sm80.c */

/* Tile configuration of the portable forward template (templates/
 * fwd_sm80.cuh) for one head-dim pair, element size and target. */
typedef struct Sm80Config {
  int bm;         /* query rows per CTA (ATTN_BM) = 16 * warps */
  int bn;         /* keys per tile (ATTN_BN) */
  int warps;      /* ATTN_WARPS; the CTA has warps * 32 threads */
  int smem_bytes; /* dynamic shared memory, as the template lays it out */
} Sm80Config;

/* sm is the compute capability times ten (80, 86, 89, 90, ...). Returns 0
 * and fills out, or -1 for head dims the template cannot run (each of d_qk
 * and d_v a multiple of 8 up to 256, attn_head_dim_ok; in_bytes must be
 * 2). Prints nothing. */
int tmpl_sm80_config(int d_qk, int d_v, int q_bytes, int kv_bytes, int sm, Sm80Config *out);

/* ----------------------------------------------------------- tmpl_sm90.c */

/* Tile configuration of the Hopper template (templates/fwd_sm90.cuh):
 * 128 query rows (two consumer warpgroups of 64) and a producer
 * warpgroup, 384 threads. */
typedef struct Sm90Config {
  int bm;         /* query rows per CTA (ATTN_BM): 64 per consumer warpgroup, 128 or 192 */
  int bn;         /* keys per K/V tile (ATTN_BN): 64, 80, 128, or 176 (bn176) */
  int stages;     /* K/V shared-memory stages (ATTN_STAGES) */
  int threads;    /* 128 per warpgroup: 384, or 512 with three consumers */
  int smem_bytes; /* dynamic shared memory, as the template lays it out */
  bool persistent; /* ATTN_PERSISTENT: at most one CTA per SM walks the tiles */
  bool fp8_pv;     /* ATTN_FP8_PV: P V in FP8 (P rounded to FP8, V^T) */
  bool kv8_early;  /* ATTN_KV8_EARLY: an FP8 cache's staging refilled once converted */
  bool vt8;        /* ATTN_FP8_VT8: FP8 P V's V^T tile in 8 bits (attn_layout.h QKV8T) */
  bool rescale_late; /* ATTN_RESCALE_LATE: O's rescale before the next P V */
  bool pv_overlap;   /* ATTN_PV_OVERLAP: P V's group committed in its branch */
  int q_early_tiles; /* ATTN_Q_EARLY: work tiles of at most this many key tiles release Q
                       after their last S GEMM (0: none; persistent kernels only) */
  bool skip_idle;    /* ATTN_SKIP_IDLE: warpgroups past the sequence's end skip the tile */
  bool tanh_poly;    /* ATTN_TANH_POLY: a softcap's tanh on the FMA pipe where in range */
  bool partial_first; /* ATTN_PARTIAL_FIRST: a sequence's short query tile first */
  bool ring_per_tile; /* ATTN_RING_PER_TILE: the turn ring closed at each work tile's end */
  bool q_before_v;    /* ATTN_Q_BEFORE_V: a later work tile's Q load before its first V copy */
  bool pv_wait_next;  /* ATTN_PV_WAIT_NEXT: P V's wait and P's packing at the next key tile */
  int o_smem;         /* ATTN_O_SMEM: O's staging slots a warp (0: stored from registers) */
} Sm90Config;

/* 0 and fills out, or -1 when the template cannot run these head dims
 * (each of d_qk, d_v a multiple of 8 up to 256, attn_head_dim_ok) or
 * element sizes (in_bytes q's, kv_bytes k's and v's: 2 and 2, 1 and 1
 * for FP8 q, k and v, or 2 and 1 for an FP8 KV cache under a 16-bit q).
 * Prints nothing. */
/* fp8_p: FP8 q, k, v with P rounded to FP8 (both products in FP8): key
 * tiles of 64 or 128 keys, the widths of V^T's swizzled rows. traits:
 * SM90_MASKED, the graph has a mask or packed sequences (key tiles of 128
 * at head tiles of 128; the default variant takes three consumer
 * warpgroups at head tiles up to 64 there only for 16-bit graphs, K and V
 * not paged); SM90_SCORE_READS,
 * its score chain reads memory per element (a bias[b, h, i, j]: key tiles
 * of 176 would spill); SM90_PLAIN, the score is q.k times per-(b, h)
 * factors under affine masks and P goes to P V as the softmax left it (the
 * late rescale's graphs); SM90_O_TMA, O may be stored by TMA boxes of a
 * warp's rows (16- or 8-bit, or 16-bit in packed sequences; no dropout:
 * auto's staging of a 16-bit O, the o_smem variant's of any), SM90_O_BYTE
 * its elements are 8-bit. paged: K and V come from
 * a page table (an FP8 cache's paged converters keep two warpgroups). */
enum { SM90_MASKED = 1u, SM90_SCORE_READS = 2u, SM90_PLAIN = 4u, SM90_O_TMA = 8u, SM90_O_BYTE = 16u };
int tmpl_sm90_config(int d_qk, int d_v, int in_bytes, int kv_bytes, bool fp8_p, unsigned traits,
                     bool paged, int variant, Sm90Config *out);
/* The variants (ATTN_OPTION_SM90_VARIANT takes 0 .. SM90_NVARIANTS - 1),
 * and a variant's number for its name (auto, base, persist, bn80,
 * persist_bn80, f16_pv, wg3, kv8_early, kv_copy, bn176, fp8_vt8, kv8,
 * bn128, rescale_late, pv_overlap, pv_once, q_early, auto35, tanh_poly,
 * auto36, partial_first, ring_closed, q_before_v, pv_wait_next, o_smem,
 * o_regs), or -1. */
#define SM90_NVARIANTS 26
int tmpl_sm90_variant_index(const char *name);
/* Whether the variant widens a dense FP8 KV cache under a 16-bit q into a
 * 16-bit workspace copy before the forward (kv_copy), which then reads the
 * copy as a 16-bit graph's K and V would; same_seq: q's and k's sequence
 * dims are one symbol (auto widens only then). */
bool tmpl_sm90_variant_kv_copy(int variant, bool same_seq);

/* ---------------------------------------------------------- tmpl_decode.c */

/* The split-KV decode template (templates/decode.cuh): 16 packed query
 * rows per CTA, BN keys per K/V stage (16 per warp), and the merge
 * kernel. The plan runs it instead of the forward when the packed rows of
 * one K/V head, (H / Hk) * Sq, are at most DECODE_MAX_ROWS. */
#define DECODE_MAX_ROWS 64
#define DECODE_MERGE_THREADS 128 /* the merge kernel's CTA, one per row (decode.cuh) */
/* The kv_copy variant's widen_kv step (fwd_sm90.cuh, attn_fwd90_widen_kv):
 * a CTA of this many threads widens this many rows of one (b, hk)'s k and v. */
#define FWD_WIDEN_THREADS 128
#define FWD_WIDEN_ROWS 64
#define DECODE_MAX_SPLITS 128    /* the merge's limit (decode.cuh, dec_max_splits) */
typedef struct DecodeConfig {
  bool on;        /* the graph has a decode kernel */
  int bn, stages; /* ATTN_DEC_BN, ATTN_DEC_STAGES */
  int threads, smem_bytes;
  /* The CTAs an SM the split rule fills (GraphPlan.decode_wave): 1 over a
   * dense cache; over a paged one as many as are resident (three at D 128:
   * its per-page boxes keep fewer bytes in flight a CTA). */
  int wave;
  int partial_o, partial_lse; /* parameter slots of the splits' partials */
} DecodeConfig;

/* 0 and fills out, or -1 when the template cannot run the graph: head
 * dims that attn_head_dim_ok refuses (for 8-bit K/V, kv_bytes 1, also those
 * of 64 or less),
 * a 16-bit q (in_bytes 2) and K/V of 2 or 1 bytes, dropout (decode
 * kernels serve inference), or no two free parameter slots (the graph's
 * tensors fill attn_params). Prints nothing. */
int tmpl_decode_config(int d_qk, int d_v, int in_bytes, int kv_bytes, bool dropout, bool paged,
                       int ntensors, DecodeConfig *out);

/* ------------------------------------------------------ match.c, emit.c */

/* The forward template a graph runs on and its launch shape, chosen from
 * the matched spec, the target and the compile options (match_fwd_config):
 * what the plan launches and the emitter's configuration macros both come
 * from here, so they cannot disagree. */
typedef struct FwdConfig {
  TemplateKind kind;
  const char *name; /* "fwd_sm80", "fwd_sm90" */
  int bm, bn;       /* query rows per CTA, keys per K/V tile */
  int warps;        /* fwd_sm80: ATTN_WARPS */
  int stages;       /* fwd_sm90: K/V stages */
  int threads, smem_bytes;
  bool persistent;  /* fwd_sm90 ATTN_PERSISTENT: a tile queue, at most one
                       CTA per SM (any grid is correct) */
  bool fp8_pv;      /* fwd_sm90 ATTN_FP8_PV: both products in FP8 */
  bool kv8_early;   /* fwd_sm90 ATTN_KV8_EARLY (the kv8_early variant) */
  bool vt8;         /* fwd_sm90 ATTN_FP8_VT8 (the fp8_vt8 variant) */
  bool rescale_late; /* fwd_sm90 ATTN_RESCALE_LATE (the rescale_late variant) */
  bool pv_overlap;   /* fwd_sm90 ATTN_PV_OVERLAP (auto's for 16-bit q, k, v) */
  int q_early_tiles; /* fwd_sm90 ATTN_Q_EARLY (auto: 16; the q_early variant: all) */
  bool skip_idle;    /* fwd_sm90 ATTN_SKIP_IDLE (auto's since session 36) */
  bool tanh_poly;    /* fwd_sm90 ATTN_TANH_POLY (the tanh_poly variant) */
  bool partial_first; /* fwd_sm90 ATTN_PARTIAL_FIRST (the partial_first variant) */
  bool ring_per_tile; /* fwd_sm90 ATTN_RING_PER_TILE (the ring_closed variant) */
  bool q_before_v;    /* fwd_sm90 ATTN_Q_BEFORE_V (the q_before_v variant) */
  bool pv_wait_next;  /* fwd_sm90 ATTN_PV_WAIT_NEXT (the pv_wait_next variant) */
  int o_smem;         /* fwd_sm90 ATTN_O_SMEM: staging slots a warp (auto's 16-bit O, o_smem) */
  /* The kv_copy variant (ATTN_KV_COPY): the plan's widen_kv step writes
   * 16-bit copies of an FP8 k and v into workspace slots copy_k and copy_v
   * (after the decode's two), and the forward reads those. */
  bool kv_copy;
  int copy_k, copy_v;
  int exp2_fma;     /* fwd_sm90 ATTN_EXP2_FMA: of every four key blocks, how
                       many take their exponentials on the FMA pipe (0-4) */
  DecodeConfig decode; /* the split-KV decode kernel the plan may run instead */
} FwdConfig;

/* Options of one compile, beyond the target. Tuning knobs the library
 * takes as context options (attn.h, attn_context_set_option); 0 is the
 * default everywhere. */
typedef struct CompileOptions {
  const char *arch;  /* "sm_80", "sm_90a", ... */
  int bwd_template;  /* 0: the target's fastest; 80: bwd_sm80's main kernel;
                        90: bwd_sm90's wherever the target is sm_90a; 91: as
                        90, and bwd_sm90's FP8 tensor-core mode where it applies;
                        92: as 90, with item timestamps (BwdSpec.stamps);
                        93: as 90, with 80-query tiles where they apply
                        (BwdSpec.bm80); 94: as 93, dV's GEMM reading P^T
                        from shared memory (bm80 2); 95: as 93 in
                        FlashAttention-3's order (bm80 3) */
  int sm90_variant;  /* fwd_sm90's variant (tmpl_sm90.c): 0 auto, 1 base,
                        2 persist, 3 bn80, 4 persist_bn80, 5 f16_pv, 6 wg3,
                        7 kv8_early, 8 kv_copy, 9 bn176, 10 fp8_vt8,
                        11 kv8, 12 bn128, 13 rescale_late,
                        14 pv_overlap, 15 pv_once, 16 q_early,
                        17 auto35, 18 tanh_poly, 19 auto36,
                        20 partial_first, 21 ring_closed, 22 q_before_v,
                        23 pv_wait_next, 24 o_smem, 25 o_regs */
  int exp2_fma;      /* fwd_sm90's softmax exponentials on the FMA pipe:
                        0 auto (none: measured slower), 1 none, 2-5 one to
                        four of every four key blocks (match.c) */
} CompileOptions;

/* 0 and fills c, or -1 with a located error naming the head dims and the
 * supported set when no forward template takes them on this target. */
int match_fwd_config(const KernelSpec *s, const CompileOptions *o, FwdConfig *c, Diag *d);
/* CompileOptions.exp2_fma (ATTN_OPTION_EXP2_FMA) for q, a count of
 * quarters written "0".."4", as ATTN_EXP2_FMA takes it (one more than the
 * count); 0 (auto) for NULL or any other text. */
int exp2_fma_option_of_text(const char *q);

/* --------------------------------- emit_sep.c: separable mask conjuncts */

/* The workspace of per-tile ranges (docs/templates.md, "Separable masks"):
 * four regions, in this order, each starting 16-byte aligned: the i sides
 * that vary over b only, those that vary over h too, then the same for the
 * j sides. A region holds, per row (b, or b * H + h), a sparse table over
 * SEP_CELL-element cells of its sequence (Sq for i, Skv for j): level L,
 * cell c summarises cells [c, c + 2^L), for levels 0 .. floor(log2(cells)).
 * Any run of cells is then covered by two entries of one level. */
enum { SEP_REGION_IB, SEP_REGION_IBH, SEP_REGION_JB, SEP_REGION_JBH, SEP_NREGIONS };
#define SEP_CELL 16
#define SEP_PREP_THREADS 256
/* Bytes of the whole workspace for one problem size, and each region's
 * offset (off may be NULL); 0 when the graph has no separable conjunct. */
size_t sep_workspace_bytes(const int cell_bytes[SEP_NREGIONS], long long B, long long H,
                           long long Sq, long long Skv, size_t off[SEP_NREGIONS]);
/* Whether a matched spec has a separable conjunct. */
bool sep_any(const KernelSpec *s);
/* The bytes of one range cell in each region (SEP_REGION_*), 0 where a
 * region is absent: the plan sizes the workspace from them. */
void sep_cell_bytes(const KernelSpec *s, int cb[SEP_NREGIONS]);
/* Inside the graph's namespace, before attn_tile_class: the range
 * structs, their builders and lookups, and the prep kernel's body. */
void emit_sep_helpers(StrBuf *out, const KernelSpec *s, Arena *a);
/* Into attn_tile_class's body, after the affine conjuncts: each separable
 * conjunct's classification (`return 0` or `cls = 1`). */
void emit_sep_classes(StrBuf *out, const KernelSpec *s, Arena *a);
/* After the namespace: the prep kernel's extern "C" entry point. */
void emit_sep_entry(StrBuf *out, const KernelSpec *s, const char *entry);

/* --------------------------------------------- backward.c: derivation */

/* One input declared with grad that the score chain reads as a bias:
 * dBias = the sum of `value` (a node over some of b h i j) over the axes
 * the tensor does not keep (axes it is not subscripted by, and its literal
 * 1 dimensions). */
typedef struct BwdBias {
  int tensor;    /* index in g->tensors */
  IrNode *value; /* gradient per score element; a derived node */
  unsigned keep; /* DOM_* axes the tensor keeps */
  int axis[IR_MAX_RANK]; /* per dimension: its DOM_* axis, 0 if broadcast */
} BwdBias;

/* The backward of one graph, derived from its score chain by the chain
 * rule. The flash-attention part is fixed (P recomputed from the score and
 * lse, dV = Pd^T dO, dP = dO V^T, delta = rowsum(dO * O),
 * dS = P * (dP - delta), through dropout's mask where there is one); what
 * is derived are the nodes from dS (the leaf `ds`, the gradient at the
 * softmax's input) back to q @ k^T and to each bias read. Derived nodes are
 * ordinary pointwise IrNodes (ids 0.. in `nodes`, a topological order);
 * their operands are other derived nodes, forward nodes (see
 * bwd_is_forward), float constants or `ds`. Everything they compute is
 * linear in ds, so where ds is 0 every gradient is 0 (evaluators rely on
 * this to keep fully masked rows free of 0 * inf). */
typedef struct BwdGraph {
  const IrGraph *g;
  IrNode *score;    /* the softmax's input (forward) */
  IrNode *dropout;  /* the forward's dropout node, or NULL */
  IrNode *lse;      /* a forward logsumexp of score that is an output, or NULL */
  int o_output;     /* index in g->outputs of p @ v */
  int lse_output;   /* index in g->outputs of lse, or -1 */
  IrNode *ds;       /* the leaf dS (op IR_INPUT, ref -1, named "ds") */
  IrNode **nodes;
  int nnodes;
  IrNode *draw;       /* gradient at q @ k^T without draw_scale; NULL: 0 */
  IrNode *draw_scale; /* a factor over no axes folded out of draw, or NULL */
  BwdBias *bias;
  int nbias;
  bool dq, dk, dv;    /* whether q, k, v are declared with grad */
  /* A softmax sink that reads a tensor declared with grad, directly
   * (sinks[h], sinks[b, h]): that tensor, else -1, and its axes as
   * BwdBias.axis. Its gradient is no chain of nodes: with p_sink,i =
   * exp(sink - lse_i) (the sink's share of row i's denominator), dsink =
   * -sum_i p_sink,i delta_i over the rows (and the axes it does not keep). */
  int sink_tensor;
  int sink_axis[IR_MAX_RANK];
  unsigned sink_keep;
  /* The FP8 recipe's edges (docs/language.md "FP8 gradients"). p @ v reads
   * P times p_scale (a forward node fixed per (b, h), or NULL), rounded to
   * p_round (DT_NONE: not rounded); the backward rounds P the same way
   * for dV, from P = exp(s - lse), and passes gradient straight through
   * the rounding. The attention output is (p @ v) * o_scale (a derived
   * node fixed per (b, h), or NULL for 1). gb: the graph's grad block, or
   * NULL. */
  IrNode *p_scale;
  DType p_round;
  IrNode *o_scale;
  const IrGradBlock *gb;
} BwdGraph;

bool bwd_has_grad(const IrGraph *g);
/* Derives g's backward. NULL with located errors in d when an op on the
 * differentiated path has no derivative here or a grad input is read in a
 * way whose gradient has no tensor shape (a bias must be read as
 * t[b, h, i, j], indices in order, some left out, literal-1 dims
 * broadcast). */
BwdGraph *bwd_derive(const IrGraph *g, Arena *a, Diag *d);
bool bwd_is_forward(const BwdGraph *bg, const IrNode *n);
/* Whether the load ld of a grad tensor reads it as a bias t[b, h, i, j]
 * (indices in order, some left out, literal-1 dims broadcast); fills the
 * per-dimension axis map and the kept axes as BwdBias describes them. */
bool bwd_bias_axes(const IrGraph *g, const IrNode *ld, int axis[],
                   unsigned *keep);
/* The derived graph as text (`attnc ir --backward`; a golden format). */
void bwd_dump(StrBuf *out, const BwdGraph *bg);

/* ------------------------------------------- emit_expr.c: expressions */

/* One hook function being written: its locals go to `body`. */
typedef struct ExprHook {
  Arena *a;
  const IrGraph *g;
  StrBuf body;
  const char **vars;        /* the forward graph's locals, by node id */
  const char *acc_name;     /* what IR_QK reads as, or NULL if unavailable */
  const char *pv_name;      /* what IR_PV reads as */
  unsigned indices;         /* DOM_* indices in scope */
  const BwdGraph *bg;       /* a derived backward graph, or NULL */
  const char **dvars;       /* its nodes' locals, by their ids */
  int acc_reads;            /* how many times IR_QK was read (as acc_name) */
  int mem_reads;            /* how many tensor loads (attn_ld_*) were written */
  int mem_reads_ij;         /* ... of them varying over i or j (not fixed per (b, h)) */
  /* The score chain's q.k products (expr_qk_products), by node id, or
   * NULL: each is acc times its factors' product, read from attn_bh's
   * k<id> (qk_products_bh) or computed in place. */
  const bool *qk_products;
  bool qk_products_bh;
} ExprHook;

/* A node's factors fixed per (b, h): n = x * f0 * f1 ... or over them
 * (n = x / f), every step an f32, from the outermost in. */
enum { EXPR_MAX_FACTORS = 8 };
typedef struct ExprFactors {
  IrNode *f[EXPR_MAX_FACTORS];
  bool recip[EXPR_MAX_FACTORS]; /* a divisor: the factor is its reciprocal */
  int n;
} ExprFactors;
/* n with those factors peeled off into fs: what they multiply. */
IrNode *expr_strip_factors(IrNode *n, ExprFactors *fs);
/* The factors' product as C in hook hk, innermost first, "1.f" for none. */
const char *expr_factor_product(ExprHook *hk, const ExprFactors *fs);
/* The score chain's maximal parts that are q.k times two or more factors
 * fixed per (b, h), marked by node id (an array of g->nnodes + 1). */
const bool *expr_qk_products(const IrGraph *g, IrNode *score, Arena *a);

void expr_init(ExprHook *hk, Arena *a, const IrGraph *g, unsigned indices);
/* A C expression for n, emitting the locals it needs into hk->body. */
const char *expr_value(ExprHook *hk, IrNode *n);
/* The same, converted to `want`'s C type when n computes in another. */
const char *expr_as(ExprHook *hk, IrNode *n, DType want);
/* "static __device__ __forceinline__ SIG { locals; return RET; }". */
void expr_put_fn(StrBuf *out, ExprHook *hk, const char *sig, const char *ret);
const char *expr_ctype(DType t); /* "float", "int", ... */
/* text made safe inside a C block comment of generated code (user file
 * names reach the unit's comments): no comment terminator, ASCII only,
 * at most 160 bytes. */
const char *emit_comment_safe(Arena *a, const char *text);
/* The source's base name, comment-safe, as the unit names it: the unit
 * (and so the cache key) does not depend on how the path was spelled. */
const char *emit_source_name(Arena *a, const Source *src);
DType expr_kind(DType t);        /* the type a value computes in */

/* --------------------------------------- match_bwd.c: backward matching */

/* Where the backward kernels find their tensors in attn_params.t: the
 * graph's own (o, lse by IR index) and, after them from g->ntensors on,
 * the extra slots the backward binds: dO, delta (f32 [B, H, Sq]), dQ's f32
 * accumulator [B, H, Sq, Dqk], then dq, dk, dv for the grad inputs among
 * q, k, v and the dK/dV f32 accumulators [B, Hk, Skv, D] (used when
 * H != Hk), then per bias gradient (a grad input other than q, k, v, in
 * tensor order) its d<name> slot and, unless it is written directly, an
 * f32 scratch slot. Absent ones are -1. The runtime (runtime/backward.c)
 * and the emitter both derive the slots with bwd_slots, so they always
 * agree. */
#define BWD_MAX_BIAS 2
typedef enum BwdBiasMode {
  BWD_BIAS_DIRECT, /* read as t[b, h, i, j], no broadcast: each element of
                      d<name> is written once by the main kernel (the
                      delta pre-pass zeroes it first, for skipped tiles) */
  BWD_BIAS_ATOMIC, /* broadcast over some axis: f32 atomics into a scratch
                      of the bias's shape, converted by the convert pass */
  BWD_BIAS_REDUCED, /* varies over b and h at most (slopes[h]): summed in
                      registers, one atomic per warp, then converted */
  BWD_BIAS_SINK    /* the softmax's sink (BwdGraph.sink_tensor): no score
                      element reads it; the dsink kernel sums its gradient
                      from delta and lse, one CTA per element, in a fixed
                      order */
} BwdBiasMode;
#define BWD_MAX_AMAX 8 /* amax outputs of a grad block */
typedef struct BwdSlots {
  int o, lse;
  int dout, delta, dqa, dq, dk, dv, dka, dva;
  /* FP8 (a grad block's graphs, docs/language.md "FP8 gradients"): the
   * 16-bit copies of FP8 q, k, v and dO the backward's kernels read
   * (workspace, written by its convert8 step; -1 for a 16-bit tensor),
   * and the block's amax outputs, in its order. bwd_sm90's FP8 tensor-core
   * mode (BwdSpec.fp8_mma) makes no copies: its transposed FP8 tiles take
   * q16's slot (Q^T and dO^T) and k16's (K^T). */
  int q16, k16, v16, do16;
  int namax;
  int amax[BWD_MAX_AMAX];
  int nbias;
  int bias[BWD_MAX_BIAS];      /* tensor index of each bias with grad */
  int dbias[BWD_MAX_BIAS];     /* slot of its gradient d<name> */
  int dbias_acc[BWD_MAX_BIAS]; /* its f32 scratch slot, -1 for DIRECT, SINK */
  BwdBiasMode bias_mode[BWD_MAX_BIAS];
  int bias_axis[BWD_MAX_BIAS][IR_MAX_RANK]; /* as BwdBias.axis */
  unsigned bias_keep[BWD_MAX_BIAS];         /* as BwdBias.keep */
  int end; /* one past the last slot used */
} BwdSlots;

/* Fills s for a checked graph with grad; -1 when the graph has no lse
 * output of its softmax's input (then s->lse is -1). Biases that
 * bwd_unsupported_grad refuses get no slots. */
int bwd_slots(const IrGraph *g, BwdSlots *s);
/* The first tensor declared with grad whose gradient the GPU backward
 * cannot compute, or -1: a grad input other than q, k, v that is not a
 * 16- or 32-bit float read as a bias (bwd_bias_axes, the same way at every
 * read), or beyond the first BWD_MAX_BIAS such biases. */
int bwd_unsupported_grad(const IrGraph *g);
/* Whether a bias gradient of this mode is summed in an f32 scratch
 * (dbias_acc) and converted at the end: ATOMIC and REDUCED. */
static inline bool bwd_bias_accumulated(BwdBiasMode m) {
  return m == BWD_BIAS_ATOMIC || m == BWD_BIAS_REDUCED;
}
/* The index in s's bias list of the softmax sink's gradient, or -1. */
int bwd_sink_entry(const BwdSlots *s);
/* The storage type of the backward's dO (IR_GRAD_DO) or of q's, k's or
 * v's gradient (IR_GRAD_DQ..DV): the grad block's, else dO takes q's type
 * (o's when q is FP8) and a gradient its input's. */
DType bwd_grad_type(const IrGraph *g, int which);
/* The storage type of tensor t's gradient: bwd_grad_type's for q, k and
 * v, a bias's own type. */
DType bwd_tensor_grad_type(const IrGraph *g, int t);
/* Whether g's backward is the FP8 recipe's (BwdSpec.fp8): FP8 q, k, v or
 * o, P scaled or rounded before p @ v, o scaled, or a grad block. */
bool bwd_is_fp8(const IrGraph *g);

/* What the backward template is filled from. */
typedef struct BwdSpec {
  const IrGraph *g;
  BwdGraph *bg;
  BwdSlots slots;
  DType in_type, out_type; /* q/k/v (also dO, dq, dk, dv); o */
  /* The MMAs' 16-bit type: the forward's, but bf16 in the FP8 backward
   * (ATTN_BWD_IN_BF16; its 16-bit copies of FP8 tensors take it). */
  DType mma_type;
  int d_qk, d_v;
  /* The widths the kernels' tiles and the f32 accumulators' rows have
   * (attn_layout.h, attn_bwd_head_tile): 64, 128 or 256. */
  int tile_qk, tile_v;
  /* The main kernel's template: bwd_sm90 (wgmma, sm_90a) or bwd_sm80;
   * the delta and convert kernels are bwd_sm80's either way, launched
   * with the same CTA size. */
  bool sm90;
  int threads, block_n, smem_bytes; /* the main kernel's launch shape */
  /* bwd_sm90's modes, decided here and declared to the template
   * (ATTN_BWD_SPLIT_D, _WIDE, _PERSISTENT) and to the plan (persistent),
   * which neither infers: split-D (D 256: 64 keys per CTA, each
   * warpgroup half of the columns), wide (D 64: 128-query tiles),
   * persistent (a grid of at most one CTA per SM walking a tile queue),
   * bm80 (head dims 128, bwd_template 93 and 94: 80-query tiles, dQ
   * computed transposed; its tensor maps' boxes of Q, dO and dQ's
   * accumulator take 80 rows; 0 off, 1 on, 2 on with dV's GEMM reading
   * P^T from shared memory, 3 on in FlashAttention-3's order: dV and dK
   * after dRaw^T, the stats shuffled). */
  bool split_d, wide, persistent;
  int bm80;
  /* The FP8 recipe's backward (FP8 q, k, v or o, P scaled or rounded, o
   * scaled, a grad block): bwd_sm80 on every target, reading 16-bit copies
   * of FP8 tensors (BwdSlots q16..) and calling the block's hooks
   * (emit_bwd.c, ATTN_BWD_FP8); dense tensors, no deterministic mode. */
  bool fp8;
  /* bwd_sm90's FP8 tensor-core mode (ATTN_BWD_FP8_MMA; the default where
   * it applies, bwd_template 90 opts out): every product in FP8 wgmma over the
   * FP8 q, k, v, dO, P and dS as they are, with Q^T, dO^T and K^T written
   * by a transpose8 step. Only where each product's operands are FP8
   * values (bwd_fp8_mma_refusal); ds8 is dS's FP8 type there. */
  bool fp8_mma;
  DType ds8;
  /* A diagnostic (bwd_template 92, persistent bwd_sm90 only): each work
   * item's timestamps over its first dK row (ATTN_BWD_STAMPS,
   * bwd_sm90.cuh; read by bench/bwd_stamps.py). */
  bool stamps;
} BwdSpec;

/* Derives and matches the backward of a graph whose forward matched as
 * fwd. NULL with located errors: no lse output, head dims that are not
 * multiples of 8 up to 256 (up to 128 on bwd_sm80), too many tensor slots, a derivation error. Callers check
 * bwd_unsupported_grad first (match_bwd refuses such graphs too).
 * The main kernel is bwd_sm90's when fwd->tmpl is TMPL_FWD_SM90 (the
 * target is sm_90a), bwd_sm80's otherwise; o->bwd_template overrides: 80
 * always takes bwd_sm80, 90 takes bwd_sm90 whenever fwd->sm is 90 (the
 * target must then be sm_90a), anything else is the default. */
BwdSpec *match_bwd(const KernelSpec *fwd, const CompileOptions *o, Arena *a, Diag *d);
/* Why bwd_sm90's FP8 tensor-core mode cannot take the backward s (NULL:
 * it can): it needs head dims of 128, FP8 q, k, v and dO, P rounded to
 * FP8, dS's value R(ds * a) * b with an FP8 rounding R (its type in *ds8),
 * a dRaw that only selects dS (masks; no softcap), no bias gradient. */
const char *bwd_fp8_mma_refusal(const BwdSpec *s, DType *ds8);
/* dS's value split as the products read it: the grad block's value of dS
 * with its outer factors fixed for the call peeled off (at most 16, into
 * outer/over: over[k] divides), returning the inner value (NULL without a
 * block; the whole value where a bias gradient reads dS). */
IrNode *bwd_ds_split(const BwdSpec *s, IrNode **outer, bool *over, int *n);

/* ------------------------------------------------ emit.c: the CUDA unit */

/* The texts of abi/ and templates/ the unit is made of, embedded by
 * tools/embed.c (build/gen/templates.c); `attnc emit --brief` elides them. */
extern const char attn_abi_src[], attn_layout_src[], common_src[], ptx_src[], softmax_src[],
    wgmma_src[], hooks_src[], fwd_sm80_src[], fwd_sm90_src[], decode_src[], philox_src[],
    bwd_sm80_src[], bwd_sm90_src[],
    ring_src[]; /* not in any unit: the program of partial results (runtime/partials.c) */

/* The translation unit of a matched and planned module: a banner, the
 * ABI header and the common texts, then per graph its namespace (the
 * configuration macros, the hooks generated from its expressions, the
 * template texts) and its entry points, named as its plan names them. */
typedef struct Compiled Compiled; /* pipeline.c */
char *emit_unit(const Compiled *c, const CompileOptions *o, Arena *a);
/* A part of that unit, for NVRTC programs of their own: the forward
 * pass's kernels (every graph's forward, decode, merge and prep), or the
 * backward pass's (each graph with grad: its hooks, the backward
 * templates, its backward and prep entries); the forward pass without
 * its decode and merge kernels (EMIT_PREFILL), and those alone
 * (EMIT_DECODE: each graph with a decode step, its hooks and
 * decode.cuh). libattn compiles the decode part on a graph's first decode
 * launch and the backward part on its first backward launch, so a
 * forward waits for neither; EMIT_ALL is emit_unit. */
typedef enum EmitPart { EMIT_ALL, EMIT_FORWARD, EMIT_BACKWARD, EMIT_PREFILL, EMIT_DECODE } EmitPart;
/* "forward", "backward", "prefill", "decode" ("" for EMIT_ALL). */
const char *emit_part_name(EmitPart part);
/* Whether a forward-pass step ("decode", "merge") is one of the decode
 * part's kernels. */
bool emit_step_is_decode(const char *role);
char *emit_unit_part(const Compiled *c, const CompileOptions *o, EmitPart part, Arena *a);
/* The same part with every embedded text (abi/, templates/) replaced by a
 * line naming it, after a first line naming attn_templates_id (a digest of
 * those texts, made at build time: Makefile): together the full unit's
 * every byte, so libattn's kernel cache keys a program by this (runtime/
 * jit.c) and a warm load neither pastes nor hashes ~180 KB of template
 * text; NVRTC gets emit_unit_part's on a miss. */
char *emit_unit_key(const Compiled *c, const CompileOptions *o, EmitPart part, Arena *a);
extern const char attn_templates_id[];
/* Every embedded text by its repository path, in the order the unit
 * first pastes them: `attnc emit --brief` and the tests name them so. */
typedef struct EmbeddedText {
  const char *name, *text;
} EmbeddedText;
extern const EmbeddedText attn_embedded_texts[];
extern const int attn_nembedded_texts;
/* An embedded text into out: the text itself, or with key (emit_unit_key)
 * a line naming it. */
void emit_template(StrBuf *out, const char *name, const char *text, bool key);

/* A kernel entry: `extern "C" __global__`, __launch_bounds__(threads), or
 * (threads, 1) with one_cta (one CTA an SM: setmaxnreg's cap), the
 * parameter block and, with tmaps, the tensor maps; its first statement
 * attn_entry_wait (common.cuh), on which the plan's entry_waits and the
 * overlapped launches (runtime/launch.c) rely; then the body, printf-style. */
void emit_entry(StrBuf *out, const char *entry, int threads, bool one_cta, bool tmaps,
                const char *body, ...) __attribute__((format(printf, 6, 7)));

/* A graph's configuration macros (ATTN_D_QK, slots, modes): each
 * macro_def writes `#define NAME VALUE` and remembers NAME, and
 * macro_undef_all writes their #undefs after the graph's entry points, in
 * definition order, so no #undef list is kept by hand. */
#define MACRO_SET_MAX 64
typedef struct MacroSet {
  const char *name[MACRO_SET_MAX];
  int n;
} MacroSet;
void macro_def(StrBuf *out, MacroSet *ms, Arena *a, const char *name, long long value);
void macro_undef_all(StrBuf *out, const MacroSet *ms);

/* ----------------------------------------- emit_bwd.c: backward emitter */

/* Inside the graph's namespace, after the forward template's text: the
 * slot macros, attn_bwd_draw and attn_bwd_scale, the text of
 * templates/bwd_sm80.cuh. The forward's hooks (attn_score, attn_keep,
 * attn_tile_class, attn_dropout_words, attn_dropout_rate) are reused as they are. */
void emit_bwd_body(StrBuf *out, const BwdSpec *s, MacroSet *ms, bool key, Arena *a);
/* After the namespace: the backward's extern "C" entry points, named as
 * the plan names them (plan_entry). */
void emit_bwd_entries(StrBuf *out, const BwdSpec *s, Arena *a);


/* --------------------------------------------------- plan.c: launch plans */

/* A graph's launch plan: for each pass (forward, backward), the kernels to
 * launch in order and the workspace they share, with every fact a launch
 * needs (entry, CTA size, dynamic shared memory, grid rule, tensor maps,
 * workspace slices, the launch-time conditions that pick among steps).
 * The compiler makes it from the matched specs (plan_graph); one writer
 * (plan_write) and one reader (plan_read) carry it as text through the JIT
 * cache, the AOT .c file and embedded modules, and the runtime runs any
 * plan with one loop (runtime/launch.c). `attnc plan` prints it. */
#define PLAN_FORMAT 4
#define PLAN_MAX_STEPS 8
#define PLAN_MAX_SLICES 10
#define PLAN_MAX_MAPS 5

typedef enum PlanPass { PLAN_FORWARD, PLAN_BACKWARD, PLAN_NPASSES } PlanPass;

/* Facts known only at launch, on which steps and slices depend: each has
 * `need` (all of these hold) and `deny` (none of these holds) masks. */
enum {
  PLAN_IF_DET = 1,    /* attn_call_set_deterministic(call, 1) */
  PLAN_IF_GQA = 2,    /* H != Hk in the bound shapes */
  PLAN_IF_DECODE = 4, /* the decode kernel runs instead of the forward:
                         (H / Hk) * Sq <= DECODE_MAX_ROWS (plan_facts) */
  PLAN_IF_SPLIT = 8   /* ... over more than one key split (a merge follows) */
};

/* A size read off the bound problem: a constant, a problem size, the
 * element count of a bound tensor, or the separable masks' range table. */
typedef enum PlanDimKind {
  PD_CONST, PD_B, PD_H, PD_HK, PD_SQ, PD_SKV, PD_NUMEL, PD_SEP_BYTES,
  PD_SPLITS,     /* the decode's key splits (plan_decode_splits) */
  PD_DECODE_ROWS, /* Hk * ceil((H / Hk) * Sq / 16): the decode's row blocks */
  PD_SQ_PAD,      /* Sq rounded up to a multiple of n */
  PD_SKV_PAD      /* Skv rounded up to a multiple of n */
} PlanDimKind;
typedef struct PlanDim {
  PlanDimKind kind;
  int n; /* PD_CONST: the value; PD_NUMEL: the tensor's index; PD_*_PAD: the multiple */
} PlanDim;

/* Grid x = ceil(x0 / div0) (+ ceil(x1 / div1) when div1 > 0) (+ mul2 *
 * x2 when mul2 > 0: a packed launch's partial tiles, B per tile kind),
 * y, z. A step whose grid has no CTA is skipped. */
typedef struct PlanGrid {
  PlanDim x0, x1, x2;
  int div0, div1, mul2;
  PlanDim y, z;
} PlanGrid;

/* What a workspace slice is for: a dense tensor view in a parameter
 * slot (sizes dims[0..3], element strides dense), the separable masks'
 * range table (attn_params.mask_ranges) or a persistent kernel's work
 * queue (attn_params.tile_queue). */
typedef enum PlanBind { PB_SLOT, PB_MASK_RANGES, PB_TILE_QUEUE } PlanBind;
/* When the runtime zeroes a slice: never (the kernels write it first),
 * before every launch (atomics add into it), or when its memory is new
 * to it (the kernels leave it zero: a work queue); a caller's workspace
 * is always new. */
typedef enum PlanZero { PZ_NEVER, PZ_EACH, PZ_NEW } PlanZero;

typedef struct PlanSlice {
  const char *name;
  PlanBind bind;
  int slot;        /* PB_SLOT: attn_params.t[slot]; absent, it is null */
  int elem;        /* bytes per element */
  PlanDim dims[4]; /* bytes = elem * dims[0] * ... * dims[3] */
  unsigned need, deny;
  PlanZero zero;
} PlanSlice;

/* One TMA tensor map of a step (runtime/tmap.c): over attn_params.t[slot]
 * as bound, element type dtype, boxes of box_cols x box_rows with the
 * 128-byte swizzle; `what` names it in messages. */
typedef struct PlanMap {
  int index; /* ATTN_TMAP_* */
  int slot;
  DType dtype;
  int box_cols, box_rows;
  const char *what;
} PlanMap;

typedef struct PlanStep {
  const char *role;  /* "forward", "prep", "delta", "main", "convert", "convert_kv" */
  const char *entry; /* extern "C" __global__ function of the unit */
  int threads, smem_bytes;
  PlanGrid grid;
  /* At most one CTA per SM (and at most the context's cap) taking work
   * from the pass's PB_TILE_QUEUE slice, all in x. */
  bool persistent;
  /* Its kernel's entry waits for the grid before it (attn_entry_wait, an
   * sm_90 instruction: targets sm_90 on), so the runtime may launch it
   * overlapped with that grid (programmatic stream serialization). A plan
   * from an attnc before this field lacks it: such kernels launch plainly. */
  bool entry_waits;
  unsigned need, deny;
  PlanMap maps[PLAN_MAX_MAPS]; /* nmaps > 0: the kernel's second parameter
                                  is attn_tmaps */
  int nmaps;
} PlanStep;

typedef struct PassPlan {
  bool present;
  bool det_ok; /* the backward has a deterministic mode (PLAN_IF_DET) */
  unsigned need; /* facts without which no step can run the pass (none of
                    today's graphs has one; plan files may say it) */
  PlanStep steps[PLAN_MAX_STEPS];
  int nsteps;
  PlanSlice slices[PLAN_MAX_SLICES];
  int nslices;
} PassPlan;

typedef struct GraphPlan {
  const char *graph;
  int sep_cells[SEP_NREGIONS]; /* PD_SEP_BYTES: sep_cell_bytes */
  /* The decode kernel's keys per tile and the CTAs an SM its splits fill
   * (DecodeConfig.wave), which PD_SPLITS reads with the SM count
   * (plan_decode_splits); both 0 when the graph has no decode kernel. */
  int decode_bn, decode_wave;
  PassPlan pass[PLAN_NPASSES];
} GraphPlan;

/* The plan of one matched graph: its forward (fwd with config c), the
 * separable masks' prep step before each pass, and its backward when bwd
 * is non-NULL. */
void plan_graph(GraphPlan *gp, const KernelSpec *fwd, const FwdConfig *c, const BwdSpec *bwd,
                Arena *a);
/* The entry point of a role: "attn_<graph>_fwd", "attn_<graph>_bwd_main". */
const char *plan_entry(Arena *a, const char *graph, const char *role);
/* Plans as text ("attnc-plan 4", then per graph its passes, steps, maps
 * and slices, one record a line); plan_read takes exactly what plan_write
 * writes and validates every field (a plan may come from a file): 0, or
 * -1 with the reason in err. Strings point into a (or into text). */
void plan_write(StrBuf *out, const GraphPlan *plans, int n);
int plan_read(const char *text, Arena *a, GraphPlan **plans, int *n, StrBuf *err);
/* The bytes a slice takes for a bound problem (B, H, Hk, Sq, Skv and the
 * graph's bound tensor shapes), and whether a step or slice applies
 * under a launch's facts (PLAN_IF_*). */
typedef struct PlanProblem {
  long long B, H, Hk, Sq, Skv;
  const int64_t (*shape)[IR_MAX_RANK]; /* bound shapes by tensor index */
  const int *ndims;                    /* their ranks */
  long long sms;          /* the device's SMs (0: unknown) */
  long long force_splits; /* the decode's split count when > 0 (an option) */
  bool no_decode;         /* the context option that keeps the forward */
} PlanProblem;
/* The launch facts the shapes decide (PLAN_IF_GQA, PLAN_IF_DECODE,
 * PLAN_IF_SPLIT); the runtime adds the call's options (PLAN_IF_DET). */
unsigned plan_facts(const GraphPlan *gp, const PlanProblem *pr);
/* The decode's key splits: one CTA an SM, SMs / work items, where that is
 * at least 3 (else 1: the merge costs more than fewer splits gain), at
 * most one per two key tiles and DECODE_MAX_SPLITS (a forced count is
 * capped at the tiles and DECODE_MAX_SPLITS); a function of the shapes
 * and the SM count only, so the same launch always splits alike. */
long long plan_decode_splits(const GraphPlan *gp, const PlanProblem *pr);
long long plan_dim(const GraphPlan *gp, PlanDim d, const PlanProblem *pr);
/* "forward" or "backward", as plans and messages name a pass. */
const char *plan_pass_name(PlanPass pass);
size_t plan_slice_bytes(const GraphPlan *gp, const PlanSlice *s, const PlanProblem *pr);
bool plan_applies(unsigned need, unsigned deny, unsigned facts);
/* The facts' names, comma-separated (as `attnc plan` prints them). */
void plan_fact_names(StrBuf *out, unsigned facts);

/* ------------------------------------------- pipeline.c: the whole pass list */

/* The compiler's passes, in the order compile_module runs them; `attnc ir`,
 * `plan`, `emit` and `compile` stop at one of them. */
typedef enum Stage {
  STAGE_PARSE, /* .attn text -> AST (grammar/attn.y) */
  STAGE_BUILD, /* AST -> checked IR (ir_build.c, ir_check.c) */
  STAGE_MATCH, /* IR -> kernel specs: the forward (match.c, match_fwd_config)
                  and the derived backward (backward.c, match_bwd.c) */
  STAGE_PLAN,  /* specs -> launch plans (plan.c) */
  STAGE_EMIT   /* specs and plans -> one CUDA C unit (emit.c ...) */
} Stage;

/* What the passes made of one graph. */
typedef struct GraphCompile {
  const IrGraph *g;
  KernelSpec *fwd; /* STAGE_MATCH */
  FwdConfig cfg;
  BwdSpec *bwd;    /* NULL: no GPU backward */
  GraphPlan *plan; /* STAGE_PLAN: in Compiled.plans */
} GraphCompile;

struct Compiled {
  const IrModule *ir;
  GraphCompile *graphs; /* one per graph, in module order */
  int ngraphs;
  GraphPlan *plans;     /* the graphs' plans, contiguous (for plan_write) */
  char *source;         /* STAGE_EMIT: one translation unit, NVRTC-ready */
};

/* The front end, shared by libattn and the attnc command: parse and build
 * (every check). NULL with located errors in d. */
IrModule *front_end(const Source *src, Arena *a, Diag *d);
/* Runs the passes after the front end on m for o->arch, up to and
 * including `last` (STAGE_MATCH, STAGE_PLAN or STAGE_EMIT). Deterministic:
 * the same module and options give byte-identical source and plans.
 * Returns 0, or -1 with located errors in d (every graph is matched, so
 * each refusal is reported). */
int compile_module(const IrModule *m, const CompileOptions *o, Stage last, Arena *a, Diag *d,
                   Compiled *out);

#endif
