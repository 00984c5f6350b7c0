/*
 * ref_arith.c: one element of a pointwise op, as the CPU reference
 * computes it (interp.c's forward and interp_bwd.c's backward): floats in
 * double precision, integers with C's wrap-around and truncation in their
 * own type, bools as 0/1.
 */
#include <math.h>
#include <stdint.h>

#include "attnc.h"

/* Wraps an exact integer result to the node's integer type. */
static double ref_wrap(DType t, int64_t x) {
  if (t == DT_U64)
    return (double)(uint64_t)x;
  uint32_t u = (uint32_t)(uint64_t)x;
  return u >= UINT32_C(0x80000000) ? (double)u - 4294967296.0 : (double)u;
}

/* An integer operand (exact in double for i32; u64 beyond 2^53 is not). */
static int64_t ref_ival(double x) {
  if (isnan(x))
    return 0;
  if (x >= 9223372036854775807.0)
    return x >= 18446744073709551615.0 ? -1 : (int64_t)(uint64_t)x;
  if (x <= -9223372036854775808.0)
    return INT64_MIN;
  return (int64_t)x;
}

/* Integer arithmetic with C semantics; *fault = 1 on division by zero. */
static double ref_int_op(IrOp op, DType t, double xa, double xb, int *fault) {
  int64_t a = ref_ival(xa), b = ref_ival(xb);
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  bool u = t == DT_U64;
  switch (op) {
  case IR_NEG: return ref_wrap(t, (int64_t)(0 - ua));
  case IR_ABS: return ref_wrap(t, (u || a >= 0) ? a : (int64_t)(0 - ua));
  case IR_ADD: return ref_wrap(t, (int64_t)(ua + ub));
  case IR_SUB: return ref_wrap(t, (int64_t)(ua - ub));
  case IR_MUL: return ref_wrap(t, (int64_t)(ua * ub));
  case IR_DIV:
  case IR_MOD:
    if (b == 0) {
      *fault = 1;
      return 0;
    }
    if (u)
      return ref_wrap(t, (int64_t)(op == IR_DIV ? ua / ub : ua % ub));
    if (a == INT64_MIN && b == -1)
      return ref_wrap(t, op == IR_DIV ? a : 0);
    return ref_wrap(t, op == IR_DIV ? a / b : a % b);
  case IR_MIN: return ref_wrap(t, (u ? ua < ub : a < b) ? a : b);
  case IR_MAX: return ref_wrap(t, (u ? ua > ub : a > b) ? a : b);
  default: die("ref_int_op: %s", ir_op_name(op));
  }
}

static bool ref_int_arith(IrOp op) {
  switch (op) {
  case IR_NEG: case IR_ABS: case IR_ADD: case IR_SUB: case IR_MUL:
  case IR_DIV: case IR_MOD: case IR_MIN: case IR_MAX:
    return true;
  default:
    return false;
  }
}

/* Converts a computed double to the node's type: ints truncate (values
 * from float math) and bools are 0/1; floats stay doubles. */
static double ref_to_type(DType t, double x) {
  if (dtype_is_int(t) || t == DT_BOOL)
    return dtype_round(t, x);
  return x;
}

/* One element of a pointwise op. */
double ref_apply_op(const IrNode *n, const double *x, int *fault) {
  if (dtype_is_int(n->type) && ref_int_arith(n->op))
    return ref_int_op(n->op, n->type, x[0], n->nsrc > 1 ? x[1] : 0, fault);
  double a = x[0], b = n->nsrc > 1 ? x[1] : 0, r;
  switch (n->op) {
  case IR_NEG: r = -a; break;
  case IR_NOT: r = a == 0; break;
  case IR_ADD: r = a + b; break;
  case IR_SUB: r = a - b; break;
  case IR_MUL: r = a * b; break;
  case IR_DIV: r = a / b; break;
  case IR_MOD: r = fmod(a, b); break;
  case IR_LT: r = a < b; break;
  case IR_LE: r = a <= b; break;
  case IR_GT: r = a > b; break;
  case IR_GE: r = a >= b; break;
  case IR_EQ: r = a == b; break;
  case IR_NE: r = a != b; break;
  case IR_AND: r = a != 0 && b != 0; break;
  case IR_OR: r = a != 0 || b != 0; break;
  case IR_MIN: r = fmin(a, b); break;
  case IR_MAX: r = fmax(a, b); break;
  case IR_WHERE: r = a != 0 ? b : x[2]; break;
  case IR_TANH: r = tanh(a); break;
  case IR_EXP: r = exp(a); break;
  case IR_EXP2: r = exp2(a); break;
  case IR_LOG: r = log(a); break;
  case IR_LOG2: r = log2(a); break;
  case IR_SIGMOID: r = 1.0 / (1.0 + exp(-a)); break;
  case IR_ABS: r = fabs(a); break;
  case IR_SQRT: r = sqrt(a); break;
  case IR_RSQRT: r = 1.0 / sqrt(a); break;
  case IR_FLOOR: r = floor(a); break;
  case IR_CEIL: r = ceil(a); break;
  case IR_CAST: return dtype_round(n->type, a);
  case IR_MASK: r = b != 0 ? a : -INFINITY; break;
  default: die("ref_apply_op: %s", ir_op_name(n->op));
  }
  return ref_to_type(n->type, r);
}
