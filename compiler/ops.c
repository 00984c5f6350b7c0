/*
 * ops.c: the pointwise ops of ops.def evaluated on the CPU, for the CPU
 * reference (interp.c's forward and interp_bwd.c's backward) and the
 * constant folder alike: floats in double precision (ops.def's CPU
 * column), integers with C's wrap-around and truncation in their own type
 * (the integer table below), bools as 0/1. Also the table's other
 * columns as data: names, arities, typing rules, device spellings and
 * whether an op passes gradient.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

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

/* Integer arithmetic with C's wrap-around, division and remainder total
 * as the language defines them (x / 0 is 0, x % 0 is x). */
static double ref_int_op(IrOp op, DType t, double xa, double xb) {
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
  case IR_MOD: /* the language's total division: x / 0 is 0, x % 0 is x */
    if (b == 0)
      return op == IR_DIV ? 0 : ref_wrap(t, a);
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

double op_apply(IrOp op, DType type, const double *x, int nsrc) {
  if (dtype_is_int(type) && ref_int_arith(op))
    return ref_int_op(op, type, x[0], nsrc > 1 ? x[1] : 0);
  /* A cast rounds to its type (f32(x) is the float nearest x). */
  if (op == IR_CAST) return dtype_round(type, x[0]);
  const double a = x[0], b = nsrc > 1 ? x[1] : 0, c = nsrc > 2 ? x[2] : 0;
  (void)b, (void)c;
  double r;
  switch (op) {
#define OP(e, ir, fn, n, ty, cpu, dev, devi, d0, d1, d2) \
  case IR_##e:                                          \
    r = (cpu);                                          \
    break;
#include "ops.def"
#undef OP
  default: die("op_apply: %s is not pointwise", ir_op_name(op));
  }
  return ref_to_type(type, r);
}

double ref_apply_op(const IrNode *n, const double *x) {
  return op_apply(n->op, n->type, x, n->nsrc);
}

/* ---------------------------------------------------- the table as data */

/* The derivative columns as text: an op passes gradient when any of them
 * is not NODIFF (backward.c builds them; this only says whether). */
#define OP(e, ir, fn, n, ty, cpu, dev, devi, d0, d1, d2) \
  [IR_##e] = {fn, n, ty, dev, devi, false},
static OpInfo op_table[IR_OP_COUNT] = {
#include "ops.def"
};
#undef OP
#define OP(e, ir, fn, n, ty, cpu, dev, devi, d0, d1, d2) [IR_##e] = {#d0, #d1, #d2},
static const char *const op_grads[IR_OP_COUNT][3] = {
#include "ops.def"
};
#undef OP
static pthread_once_t op_table_once = PTHREAD_ONCE_INIT;

static void op_table_init(void) {
  for (int k = 0; k < IR_OP_COUNT; k++)
    for (int d = 0; d < 3 && op_grads[k][0]; d++)
      if (strcmp(op_grads[k][d], "NODIFF") != 0) op_table[k].diff = true;
}

const OpInfo *op_info(IrOp op) {
  if ((unsigned)op >= IR_OP_COUNT || !op_grads[op][0]) return NULL;
  pthread_once(&op_table_once, op_table_init);
  return &op_table[op];
}
