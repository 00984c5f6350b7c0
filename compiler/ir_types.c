/*
 * ir_types.c: the language's typing rules -- what type an operator, a
 * function or a conversion gives, and the table of built-in functions --
 * shared by ir_build.c's lowering and its constant folder. Each rule
 * reports a located error and returns DT_NONE for operands it refuses.
 */
#include <string.h>

#include "attnc.h"

bool ir_is_num(DType t) { return dtype_is_float(t) || dtype_is_int(t); }

/* The type arithmetic on a and b computes in: f32 if either is a float,
 * else u64 if either is u64, else i32. */
DType ir_arith_join(DType a, DType b) {
  if (dtype_is_float(a) || dtype_is_float(b)) return DT_F32;
  if (a == DT_U64 || b == DT_U64) return DT_U64;
  return DT_I32;
}

/* The type a value of storage type t computes in. */
DType ir_compute_type(DType t) { return dtype_is_float(t) ? DT_F32 : t; }

static const IrOp binop_ir[BIN_COUNT] = {
    [BIN_ADD] = IR_ADD, [BIN_SUB] = IR_SUB, [BIN_MUL] = IR_MUL,
    [BIN_DIV] = IR_DIV, [BIN_MOD] = IR_MOD, [BIN_LT] = IR_LT,
    [BIN_LE] = IR_LE,   [BIN_GT] = IR_GT,   [BIN_GE] = IR_GE,
    [BIN_EQ] = IR_EQ,   [BIN_NE] = IR_NE,   [BIN_AND] = IR_AND,
    [BIN_OR] = IR_OR};

IrOp ir_binop_op(BinOp op) { return binop_ir[op]; }

/* The result type of `x OP y`, or DT_NONE after reporting at loc. Shared
 * by the IR builder and the constant folder. */
DType ir_binop_type(Diag *d, Loc loc, BinOp op, DType x, DType y) {
  const char *sp = binop_spelling(op);
  switch (op) {
  case BIN_AND:
  case BIN_OR:
    if (x == DT_BOOL && y == DT_BOOL) return DT_BOOL;
    diag_error(d, loc, "operator '%s' needs bool operands, got %s and %s", sp,
               dtype_name(x), dtype_name(y));
    return DT_NONE;
  case BIN_EQ:
  case BIN_NE:
    if (x == DT_BOOL && y == DT_BOOL) return DT_BOOL;
    /* fall through */
  case BIN_LT:
  case BIN_LE:
  case BIN_GT:
  case BIN_GE:
    if (ir_is_num(x) && ir_is_num(y)) return DT_BOOL;
    diag_error(d, loc, "operator '%s' compares numbers, got %s and %s", sp,
               dtype_name(x), dtype_name(y));
    return DT_NONE;
  case BIN_MOD:
    if (dtype_is_int(x) && dtype_is_int(y)) return ir_arith_join(x, y);
    diag_error(d, loc, "operator '%%' needs integers, got %s and %s",
               dtype_name(x), dtype_name(y));
    return DT_NONE;
  default:
    if (ir_is_num(x) && ir_is_num(y)) return ir_arith_join(x, y);
    diag_error(d, loc, "operator '%s' needs numbers, got %s and %s", sp,
               dtype_name(x), dtype_name(y));
    return DT_NONE;
  }
}

/* ------------------------------------------------------------- functions */

/* The functions of the language: the pointwise ops ops.def gives a
 * function name (math functions, min, max, where), then the rest. */
#define FN_OF(ty) ((ty) == T_MINMAX ? FN_MINMAX : (ty) == T_WHERE ? FN_WHERE : FN_MATH)
#define OP(e, ir, fn, n, ty, ...) {fn, FN_OF(ty), n, IR_##e, DT_NONE},
static const FnInfo fn_ops[] = {
#include "ops.def"
};
#undef OP

static const FnInfo fn_table[] = {
    {"clamp", FN_CLAMP, 3, IR_MIN, DT_NONE},
    {"f32", FN_CAST, 1, IR_CAST, DT_F32},
    {"float", FN_CAST, 1, IR_CAST, DT_F32},
    {"i32", FN_CAST, 1, IR_CAST, DT_I32},
    {"int", FN_CAST, 1, IR_CAST, DT_I32},
    /* Roundings to a storage type (saturating for FP8): the value stays
     * a number computed in f32, as the type's nearest value. */
    {"e4m3", FN_CAST, 1, IR_CAST, DT_E4M3},
    {"e5m2", FN_CAST, 1, IR_CAST, DT_E5M2},
    {"bf16", FN_CAST, 1, IR_CAST, DT_BF16},
    {"f16", FN_CAST, 1, IR_CAST, DT_F16},
    {"mask", FN_MASK, 2, IR_MASK, DT_NONE},
    {"softmax", FN_SOFTMAX, 1, IR_SOFTMAX, DT_NONE},
    {"logsumexp", FN_LSE, 1, IR_LOGSUMEXP, DT_NONE},
    {"dropout", FN_DROPOUT, 4, IR_DROPOUT, DT_NONE},
    {"amax", FN_AMAX, 1, IR_AMAX, DT_NONE},
    {"paged", FN_PAGED, 2, IR_INPUT, DT_NONE},
    {"paged_hnd", FN_PAGED, 2, IR_INPUT, DT_NONE},
    {"packed", FN_PAGED, 2, IR_INPUT, DT_NONE},
};

const FnInfo *ir_find_fn(const char *name) {
  for (size_t k = 0; k < sizeof fn_ops / sizeof *fn_ops; k++)
    if (fn_ops[k].name && !strcmp(fn_ops[k].name, name)) return &fn_ops[k];
  for (size_t k = 0; k < sizeof fn_table / sizeof *fn_table; k++)
    if (!strcmp(fn_table[k].name, name)) return &fn_table[k];
  return NULL;
}

/* The result type of a math function, or DT_NONE after an error. */
DType ir_math_type(Diag *d, Loc loc, const FnInfo *fn, DType x) {
  if (!ir_is_num(x)) {
    diag_error(d, loc, "'%s' needs a number, got %s", fn->name, dtype_name(x));
    return DT_NONE;
  }
  return op_info(fn->op)->type == T_KEEP ? ir_compute_type(x) : DT_F32;
}

/* The result type of where(c, x, y), or DT_NONE after an error. */
DType ir_where_type(Diag *d, Loc loc, DType c, DType x, DType y) {
  if (c != DT_BOOL) {
    diag_error(d, loc, "the condition of 'where' must be bool, got %s",
               dtype_name(c));
    return DT_NONE;
  }
  if (x == DT_BOOL && y == DT_BOOL) return DT_BOOL;
  if (ir_is_num(x) && ir_is_num(y)) return ir_arith_join(x, y);
  diag_error(d, loc, "the branches of 'where' must both be numbers or both "
             "bool, got %s and %s", dtype_name(x), dtype_name(y));
  return DT_NONE;
}

DType ir_minmax_type(Diag *d, Loc loc, const char *fn, DType x, DType y) {
  if (ir_is_num(x) && ir_is_num(y)) return ir_arith_join(x, y);
  diag_error(d, loc, "'%s' needs numbers, got %s and %s", fn, dtype_name(x),
             dtype_name(y));
  return DT_NONE;
}
