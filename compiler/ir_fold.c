/*
 * ir_fold.c: constant folding of scalar defaults (`scalar scale : f32 =
 * 1.0 / sqrt(128.0);`): literals, `inf` and the pure functions and
 * operators of them, evaluated as the CPU reference evaluates them
 * (ops.def's CPU column through op_apply; i32 wraps like the kernels'
 * arithmetic). Names, tensors and indices are not constants: a located
 * error says so. ir_build.c calls ir_fold for each scalar's default.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attnc.h"



double ir_const_num(IrConst v) { return dtype_is_float(v.t) ? v.f : (double)v.i; }

static IrConst cv_int(DType t, int64_t i) {
  if (t == DT_I32) i = (int32_t)(uint32_t)(uint64_t)i;
  return (IrConst){.t = t, .i = i, .f = (double)i};
}

static IrConst cv_float(double f) { return (IrConst){.t = DT_F32, .f = f}; }

/* A math function of a float constant: ops.def's CPU evaluation, the one
 * the CPU reference uses. */
static double cv_math(IrOp op, double x) {
  return op_apply(op, DT_F32, &x, 1);
}

static bool fold(Diag *d, const AstExpr *e, IrConst *out);

static bool fold_binary(Diag *d, const AstExpr *e, IrConst *out) {
  IrConst x, y;
  bool okx = fold(d, e->args[0], &x), oky = fold(d, e->args[1], &y);
  if (!okx || !oky) return false;
  if (e->op == BIN_MATMUL) {
    diag_error(d, e->loc, "'@' cannot appear in a constant expression");
    return false;
  }
  DType t = ir_binop_type(d, e->loc, (BinOp)e->op, x.t, y.t);
  if (t == DT_NONE) return false;
  if (t == DT_BOOL) {
    double p = ir_const_num(x), q = ir_const_num(y);
    bool r = false;
    switch (e->op) {
    case BIN_AND: r = x.i && y.i; break;
    case BIN_OR: r = x.i || y.i; break;
    case BIN_LT: r = p < q; break;
    case BIN_LE: r = p <= q; break;
    case BIN_GT: r = p > q; break;
    case BIN_GE: r = p >= q; break;
    case BIN_EQ: r = x.t == DT_BOOL ? x.i == y.i : p == q; break;
    case BIN_NE: r = x.t == DT_BOOL ? x.i != y.i : p != q; break;
    default: die("bad comparison %d", e->op);
    }
    *out = cv_int(DT_BOOL, r);
    return true;
  }
  if (t == DT_F32) { /* ops.def's CPU evaluation, as the reference's */
    const double pq[2] = {ir_const_num(x), ir_const_num(y)};
    *out = cv_float(op_apply(ir_binop_op((BinOp)e->op), DT_F32, pq, 2));
    return true;
  }
  /* Integers wrap like the kernel's two's-complement arithmetic. */
  uint64_t p = (uint64_t)x.i, q = (uint64_t)y.i, r = 0;
  if ((e->op == BIN_DIV || e->op == BIN_MOD) && q == 0) {
    diag_error(d, e->loc, "division by zero in a constant expression");
    return false;
  }
  bool u = t == DT_U64;
  switch (e->op) {
  case BIN_ADD: r = p + q; break;
  case BIN_SUB: r = p - q; break;
  case BIN_MUL: r = p * q; break;
  case BIN_DIV:
    r = u ? p / q : (x.i == INT64_MIN && y.i == -1) ? p : (uint64_t)(x.i / y.i);
    break;
  case BIN_MOD:
    r = u ? p % q : (y.i == -1) ? 0 : (uint64_t)(x.i % y.i);
    break;
  default: die("bad int op %d", e->op);
  }
  *out = cv_int(t, (int64_t)r);
  return true;
}

static bool fold_call(Diag *d, const AstExpr *e, IrConst *out) {
  const FnInfo *fn = ir_find_fn(e->name);
  if (!fn || fn->kind >= FN_MASK) {
    diag_error(d, e->loc, fn ? "'%s' cannot appear in a constant expression"
                                : "unknown function '%s'", e->name);
    return false;
  }
  if (e->nargs != fn->nargs) {
    diag_error(d, e->loc, "'%s' takes %d argument%s, got %d", fn->name,
               fn->nargs, fn->nargs == 1 ? "" : "s", e->nargs);
    return false;
  }
  IrConst v[3];
  bool ok = true;
  for (int k = 0; k < e->nargs; k++) ok &= fold(d, e->args[k], &v[k]);
  if (!ok) return false;
  DType t;
  switch (fn->kind) {
  case FN_MATH:
    t = ir_math_type(d, e->loc, fn, v[0].t);
    if (t == DT_NONE) return false;
    *out = t == DT_F32 ? cv_float(cv_math(fn->op, ir_const_num(v[0])))
                       : cv_int(t, v[0].i < 0 && fn->op == IR_ABS ? -v[0].i
                                                                  : v[0].i);
    return true;
  case FN_MINMAX:
  case FN_CLAMP: {
    t = ir_minmax_type(d, e->loc, fn->name, v[0].t, v[1].t);
    if (t != DT_NONE && fn->kind == FN_CLAMP)
      t = ir_minmax_type(d, e->loc, fn->name, t, v[2].t);
    if (t == DT_NONE) return false;
    double lo = ir_const_num(v[1]), r = ir_const_num(v[0]);
    bool is_max = fn->op == IR_MAX || fn->kind == FN_CLAMP;
    r = is_max ? fmax(r, lo) : fmin(r, lo);
    if (fn->kind == FN_CLAMP) r = fmin(r, ir_const_num(v[2]));
    *out = t == DT_F32 ? cv_float(r) : cv_int(t, (int64_t)r);
    return true;
  }
  case FN_WHERE:
    t = ir_where_type(d, e->loc, v[0].t, v[1].t, v[2].t);
    if (t == DT_NONE) return false;
    *out = v[0].i ? v[1] : v[2];
    if (t == DT_F32) *out = cv_float(ir_const_num(*out));
    else out->t = t;
    return true;
  case FN_CAST:
    if (dtype_is_float(fn->cast)) /* f32(x), or a rounding: e4m3(x), bf16(x) */
      *out = cv_float(dtype_round(fn->cast, ir_const_num(v[0])));
    else if (dtype_is_float(v[0].t)) {
      if (!(fabs(v[0].f) < 2147483648.0)) {
        diag_error(d, e->loc, "'%s' of a value outside the i32 range",
                   fn->name);
        return false;
      }
      *out = cv_int(DT_I32, (int64_t)v[0].f);
    } else *out = cv_int(DT_I32, v[0].i);
    return true;
  default: die("unfoldable function %s", fn->name);
  }
}

/* Folds a scalar's default. Only literals, `inf` and pure functions of
 * them are constant: names, tensors and indices are not. */
static bool fold(Diag *d, const AstExpr *e, IrConst *out) {
  switch (e->kind) {
  case AST_INT:
    *out = cv_int(e->ival > INT32_MAX ? DT_U64 : DT_I32, e->ival);
    return true;
  case AST_FLOAT: *out = cv_float(e->fval); return true;
  case AST_BOOL: *out = cv_int(DT_BOOL, e->ival != 0); return true;
  case AST_NAME:
    if (!strcmp(e->name, "inf")) {
      *out = cv_float(INFINITY);
      return true;
    }
    diag_error(d, e->loc, "'%s' is not a constant; a default must be a "
               "constant expression", e->name);
    return false;
  case AST_UNARY: {
    IrConst x;
    if (!fold(d, e->args[0], &x)) return false;
    if (e->op == UN_NOT) {
      if (x.t != DT_BOOL) {
        diag_error(d, e->loc, "operator '!' needs bool, got %s",
                   dtype_name(x.t));
        return false;
      }
      *out = cv_int(DT_BOOL, !x.i);
      return true;
    }
    if (!ir_is_num(x.t)) {
      diag_error(d, e->loc, "operator '-' needs a number, got %s",
                 dtype_name(x.t));
      return false;
    }
    *out = x.t == DT_F32 ? cv_float(-x.f)
                         : cv_int(x.t, (int64_t)(0 - (uint64_t)x.i));
    return true;
  }
  case AST_BINARY: return fold_binary(d, e, out);
  case AST_CALL: return fold_call(d, e, out);
  case AST_INDEX:
  case AST_TRANSPOSE:
    diag_error(d, e->loc, "a default must be a constant expression");
    return false;
  case AST_ERROR: return false;
  }
  return false;
}

bool ir_fold(Diag *d, const AstExpr *e, IrConst *out) { return fold(d, e, out); }
