/*
 * emit_expr.c: IR expressions -> straight-line CUDA C, for every hook the
 * emitters write (emit.c's forward hooks, emit_bwd.c's backward ones).
 *
 * Each node a hook needs becomes one `const` local, named after the .attn
 * name it was bound to (`s_5`) or, for nodes of a derived backward graph,
 * `d_ID`; locals appear in dependency order, so the code reads like the
 * source and is the same on every run.
 */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attnc.h"

void expr_init(ExprHook *hk, Arena *a, const IrGraph *g, unsigned indices) {
  memset(hk, 0, sizeof *hk);
  hk->a = a;
  hk->g = g;
  hk->vars = arena_alloc(a, (size_t)(g->nnodes + 1) * sizeof *hk->vars);
  hk->indices = indices;
}

const char *expr_ctype(DType t) {
  switch (t) {
  case DT_I32: return "int";
  case DT_U64: return "unsigned long long";
  case DT_BOOL: return "bool";
  default: return "float";
  }
}

/* The C type a value computes in: every float type computes as float. */
DType expr_kind(DType t) { return dtype_is_float(t) ? DT_F32 : t; }

/* The f32 the device computes with (constants are rounded to f32, as
 * the CPU reference rounds them): beyond f32's range an infinity, below
 * its normal range the exact bits (NVRTC refuses literals out of range). */
static const char *float_literal(Arena *a, double x) {
  if (isnan(x)) return "__int_as_float(0x7fc00000)";
  const float f = (float)x;
  if (isinf(f)) return f > 0 ? "attn_pos_inf()" : "attn_neg_inf()";
  if (f == 0 && x != 0) return signbit(f) ? "-0.0f" : "0.0f"; /* underflows to zero */
  if (f != 0 && fabsf(f) < 1.17549435e-38f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return arena_printf(a, "__int_as_float(0x%08x)", (unsigned)bits);
  }
  char buf[64];
  snprintf(buf, sizeof buf, "%.9g", x);
  if (!strpbrk(buf, ".en")) strcat(buf, ".0");
  return arena_printf(a, "%sf", buf);
}

/* An operand converted to `want` when its own kind differs. */
const char *expr_as(ExprHook *hk, IrNode *n, DType want) {
  const char *e = expr_value(hk, n);
  if (expr_kind(n->type) == expr_kind(want)) return e;
  return arena_printf(hk->a, "(%s)(%s)", expr_ctype(want), e);
}

static DType common_kind(const IrNode *x, const IrNode *y) {
  DType a = expr_kind(x->type), b = expr_kind(y->type);
  if (a == DT_F32 || b == DT_F32) return DT_F32;
  if (a == DT_U64 || b == DT_U64) return DT_U64;
  return a == DT_BOOL && b == DT_BOOL ? DT_BOOL : DT_I32;
}

static const char *index_name(ExprHook *hk, IrNode *n) {
  unsigned axis = (unsigned)n->ival;
  if (!(hk->indices & axis)) die("index %u out of scope in a hook", axis);
  return axis == DOM_B ? "b" : axis == DOM_H ? "h" : axis == DOM_I ? "i" : "j";
}

static const char *scalar_ref(ExprHook *hk, IrNode *n) {
  switch (n->type) {
  case DT_I32: return arena_printf(hk->a, "p.s[%d].i", n->ref);
  case DT_U64: return arena_printf(hk->a, "p.s[%d].u", n->ref);
  case DT_BOOL: return arena_printf(hk->a, "(p.s[%d].i != 0)", n->ref);
  default: return arena_printf(hk->a, "p.s[%d].f", n->ref);
  }
}

static const char *load_ref(ExprHook *hk, IrNode *n) {
  const IrTensor *t = &hk->g->tensors[n->ref];
  const char *sub[IR_MAX_RANK] = {"0", "0", "0", "0"};
  hk->mem_reads++;
  if (n->dom & (DOM_I | DOM_J)) hk->mem_reads_ij++;
  for (int d = 0; d < t->ndims && d < IR_MAX_RANK; d++)
    if (t->dim_sym[d] >= 0 || t->dim_val[d] != 1) sub[d] = expr_as(hk, n->src[d], DT_I32);
  return arena_printf(hk->a, "attn_ld_%s(p.t[%d], %s, %s, %s, %s)", dtype_name(t->type), n->ref,
                      sub[0], sub[1], sub[2], sub[3]);
}

/* ops.def's device spelling of op for operands computing in k: an
 * operator, a function, "=" (the value itself) or "" (spelled below). */
static const char *device_spelling(IrOp op, DType k) {
  const OpInfo *oi = op_info(op);
  if (!oi) return "";
  const char *sp = k == DT_F32 || !oi->dev_int ? oi->dev : oi->dev_int;
  return sp ? sp : "";
}

static bool is_operator(const char *sp) {
  return *sp && !isalpha((unsigned char)*sp) && strcmp(sp, "=");
}

static bool is_comparison(IrOp op) {
  const OpInfo *oi = op_info(op);
  return oi && (oi->type == T_CMP || oi->type == T_EQ);
}

/* The right-hand side for a node that gets a local. */
static const char *expr_compute(ExprHook *hk, IrNode *n) {
  Arena *a = hk->a;
  DType k = expr_kind(n->type);
  const char *op = device_spelling(n->op, k);
  /* x / y for a float y fixed per (b, h) (a constant, a scalar): x times
   * 1/y, within an ulp of the quotient, instead of an IEEE division per
   * score element (a dozen instructions, which made softcapping's s / cap
   * cost more than its tanh). 1/y is loop-invariant, so it is computed
   * once; a constant's reciprocal is folded here. */
  IrNode *div = n->src[1];
  if (n->op == IR_DIV && k == DT_F32 && (div->dom & (DOM_I | DOM_J | DOM_D)) == 0) {
    const char *num = expr_as(hk, n->src[0], k);
    if (div->op == IR_CONST && div->fval != 0 && isfinite(1.0 / div->fval))
      return arena_printf(a, "%s * %s", num, float_literal(a, 1.0 / div->fval));
    if (div->op != IR_CONST)
      return arena_printf(a, "%s * (1.0f / %s)", num, expr_as(hk, div, k));
  }
  /* Integer / and %: C's operators only where the divisor is a constant
   * they are defined for; else the language's total versions. */
  if ((n->op == IR_DIV || n->op == IR_MOD) && k != DT_F32 &&
      !(div->op == IR_CONST && div->ival != 0 && div->ival != -1))
    return arena_printf(a, "%s(%s, %s)", n->op == IR_DIV ? "attn_idiv" : "attn_imod",
                        expr_as(hk, n->src[0], k), expr_as(hk, n->src[1], k));
  /* i32 + - * and negation wrap, as the language defines them. */
  if (k == DT_I32 && (n->op == IR_ADD || n->op == IR_SUB || n->op == IR_MUL))
    return arena_printf(a, "%s(%s, %s)",
                        n->op == IR_ADD ? "attn_iadd" : n->op == IR_SUB ? "attn_isub" : "attn_imul",
                        expr_as(hk, n->src[0], k), expr_as(hk, n->src[1], k));
  if (k == DT_I32 && n->op == IR_NEG) return arena_printf(a, "attn_ineg(%s)", expr_as(hk, n->src[0], k));
  if (is_operator(op) && n->nsrc == 2) {
    DType in = is_comparison(n->op) ? common_kind(n->src[0], n->src[1])
               : (n->op == IR_AND || n->op == IR_OR) ? DT_BOOL : k;
    return arena_printf(a, "%s %s %s", expr_as(hk, n->src[0], in), op, expr_as(hk, n->src[1], in));
  }
  if (is_operator(op)) /* -x, !x */
    return arena_printf(a, "%s%s", op, expr_as(hk, n->src[0], n->op == IR_NOT ? DT_BOOL : k));
  if (!strcmp(op, "=")) return expr_as(hk, n->src[0], k); /* floor and ceil of an integer */
  if (*op && n->nsrc == 1) return arena_printf(a, "%s(%s)", op, expr_as(hk, n->src[0], k));
  switch (n->op) {
  case IR_CAST: /* f32 and the integer casts convert; the rest round (ptx.cuh) */
    if (n->type == DT_E4M3 || n->type == DT_E5M2 || n->type == DT_BF16 || n->type == DT_F16)
      return arena_printf(a, "attn_round_%s(%s)", dtype_name(n->type),
                          expr_as(hk, n->src[0], DT_F32));
    return expr_as(hk, n->src[0], k);
  case IR_MIN:
  case IR_MAX: {
    const char *x = expr_as(hk, n->src[0], k), *y = expr_as(hk, n->src[1], k);
    if (*op) return arena_printf(a, "%s(%s, %s)", op, x, y); /* fminf, fmaxf */
    return arena_printf(a, "%s %s %s ? %s : %s", x, n->op == IR_MIN ? "<" : ">", y, x, y);
  }
  case IR_WHERE:
    return arena_printf(a, "%s ? %s : %s", expr_as(hk, n->src[0], DT_BOOL), expr_as(hk, n->src[1], k),
                        expr_as(hk, n->src[2], k));
  case IR_MASK:
    return arena_printf(a, "%s ? %s : attn_neg_inf()", expr_as(hk, n->src[1], DT_BOOL),
                        expr_as(hk, n->src[0], DT_F32));
  case IR_LOAD: return load_ref(hk, n);
  default:
    die("emit: op '%s' has no place in a hook", ir_op_name(n->op));
  }
}

/* A local's name: the .attn name when there is one, made unique by id. */
static const char *local_name(ExprHook *hk, IrNode *n) {
  if (!n->name) return arena_printf(hk->a, "t%d", n->id);
  char buf[48];
  size_t len = 0;
  for (const char *c = n->name; *c && len < 32; c++)
    buf[len++] = isalnum((unsigned char)*c) || *c == '_' ? *c : '_';
  buf[len] = 0;
  return arena_printf(hk->a, "%s_%d", buf, n->id);
}

const char *expr_value(ExprHook *hk, IrNode *n) {
  if (hk->bg && n == hk->bg->ds) return "ds";
  switch (n->op) {
  case IR_CONST:
    if (dtype_is_float(n->type)) return float_literal(hk->a, n->fval);
    if (n->type == DT_BOOL) return n->ival ? "true" : "false";
    if (n->type == DT_U64) return arena_printf(hk->a, "%lluull", (unsigned long long)n->ival);
    return arena_printf(hk->a, "%lld", (long long)n->ival);
  case IR_SCALAR: return scalar_ref(hk, n);
  case IR_DIM: /* a packed sequence's lengths: the template's view has them as Sq, Skv */
    if (n->ref < 0) return n->ref == IR_SEQLEN_Q ? "p.Sq" : "p.Skv";
    return arena_printf(hk->a, "p.dim[%d]", n->ref);
  case IR_INDEX: return index_name(hk, n);
  case IR_QK:
    if (!hk->acc_name) die("emit: the score read outside attn_score");
    hk->acc_reads++;
    return hk->acc_name;
  case IR_PV:
    if (!hk->pv_name) die("emit: p @ v read outside attn_out");
    return hk->pv_name;
  default: break;
  }
  /* Nodes of a derived backward graph have ids of their own. */
  bool derived = hk->bg && !bwd_is_forward(hk->bg, n);
  const char **vars = derived ? hk->dvars : hk->vars;
  if (vars[n->id]) return vars[n->id];
  const char *rhs;
  if (!derived && hk->qk_products && hk->qk_products[n->id]) { /* acc times one product */
    ExprFactors fs;
    IrNode *qk = expr_strip_factors(n, &fs);
    const char *f = hk->qk_products_bh ? arena_printf(hk->a, "c.k%d", n->id)
                                       : arena_printf(hk->a, "(%s)", expr_factor_product(hk, &fs));
    rhs = arena_printf(hk->a, "%s * %s", expr_value(hk, qk), f);
  } else {
    rhs = expr_compute(hk, n);
  }
  /* Derived locals are gN: user locals are NAME_N and unnamed ones tN, so
   * no .attn name can collide with one (a local called d once did). */
  const char *name = derived ? arena_printf(hk->a, "g%d", n->id) : local_name(hk, n);
  sb_printf(&hk->body, "  const %s %s = %s;\n", expr_ctype(expr_kind(n->type)), name, rhs);
  vars[n->id] = name;
  return name;
}



/* ------------------------------------------- factors fixed per (b, h) */

static bool fixed_factor(const IrNode *x) {
  return x->type == DT_F32 && (x->dom & (DOM_I | DOM_J | DOM_D)) == 0;
}

IrNode *expr_strip_factors(IrNode *n, ExprFactors *fs) {
  fs->n = 0;
  while (n->type == DT_F32 && fs->n < EXPR_MAX_FACTORS && (n->op == IR_MUL || n->op == IR_DIV)) {
    int k = fixed_factor(n->src[1]) ? 1 : n->op == IR_MUL && fixed_factor(n->src[0]) ? 0 : -1;
    if (k < 0) break;
    fs->f[fs->n] = n->src[k];
    fs->recip[fs->n++] = n->op == IR_DIV;
    n = n->src[1 - k];
  }
  return n;
}

const char *expr_factor_product(ExprHook *hk, const ExprFactors *fs) {
  StrBuf e = {0};
  for (int k = fs->n - 1; k >= 0; k--) {
    const char *v = expr_as(hk, fs->f[k], DT_F32);
    sb_printf(&e, "%s%s%s%s", e.len ? " * " : "", fs->recip[k] ? "(1.0f / " : "", v,
              fs->recip[k] ? ")" : "");
  }
  const char *r = e.len ? arena_strdup(hk->a, e.data) : "1.f";
  sb_free(&e);
  return r;
}

/* `(q @ k^T) * scale / cap` becomes acc times one product (scale / cap),
 * taken once per work tile: one multiply an element instead of one per
 * factor (the product rounds once, within an ulp or two of the chain's). */
static void mark_qk_products(IrNode *n, bool *seen, bool *lin) {
  if (seen[n->id] || (n->dom & (DOM_I | DOM_J)) == 0) return;
  seen[n->id] = true;
  ExprFactors fs;
  if (expr_strip_factors(n, &fs)->op == IR_QK && fs.n >= 2) {
    lin[n->id] = true;
    return;
  }
  for (int k = 0; k < n->nsrc; k++) mark_qk_products(n->src[k], seen, lin);
}

const bool *expr_qk_products(const IrGraph *g, IrNode *score, Arena *a) {
  bool *seen = arena_alloc(a, (size_t)(g->nnodes + 1) * sizeof *seen); /* zeroed */
  bool *lin = arena_alloc(a, (size_t)(g->nnodes + 1) * sizeof *lin);
  mark_qk_products(score, seen, lin);
  return lin;
}

const char *emit_comment_safe(Arena *a, const char *text) {
  /* Inside a block comment only the sequence star-slash ends it; control
   * and non-ASCII bytes become '?' so the unit stays plain ASCII whatever
   * a file name holds, and a very long name is cut. */
  enum { MAX = 160 };
  size_t n = strlen(text);
  char *out = arena_alloc(a, (n < MAX ? n : MAX) * 2 + 4);
  size_t k = 0;
  for (size_t i = 0; i < n && i < MAX; i++) {
    unsigned char ch = (unsigned char)text[i];
    if (ch == '*' && text[i + 1] == '/') {
      out[k++] = '*';
      out[k++] = ' ';
    } else {
      out[k++] = ch < 0x20 || ch >= 0x7f ? '?' : (char)ch;
    }
  }
  if (n > MAX) memcpy(out + k, "...", 4);
  else out[k] = '\0';
  return out;
}

const char *emit_source_name(Arena *a, const Source *src) {
  const char *name = src ? src->name : "<string>";
  const char *slash = strrchr(name, '/');
  return emit_comment_safe(a, slash && slash[1] ? slash + 1 : name);
}

void expr_put_fn(StrBuf *out, ExprHook *hk, const char *sig, const char *ret) {
  sb_printf(out, "static __device__ __forceinline__ %s {\n", sig);
  if (hk->body.len) sb_puts(out, hk->body.data);
  sb_printf(out, "  return %s;\n}\n\n", ret);
  sb_free(&hk->body);
}
