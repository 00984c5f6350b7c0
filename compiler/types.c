/* types.c: facts about element types and operator spellings, all driven by
 * the X-macro tables in attnc.h so a new dtype or operator is one line. */
#include "attnc.h"

static const char *const dtype_names[DT_COUNT] = {
    [DT_NONE] = "?",
#define X(e, s, n) [DT_##e] = s,
    ATTN_DTYPES(X)
#undef X
};

static const int dtype_sizes[DT_COUNT] = {
#define X(e, s, n) [DT_##e] = n,
    ATTN_DTYPES(X)
#undef X
};

static const char *const binop_names[BIN_COUNT] = {
#define X(e, s) [BIN_##e] = s,
    ATTN_BINOPS(X)
#undef X
};

const char *dtype_name(DType t) {
  if ((int)t < 0 || t >= DT_COUNT)
    return "?";
  return dtype_names[t];
}

int dtype_size(DType t) {
  if ((int)t < 0 || t >= DT_COUNT)
    return 0;
  return dtype_sizes[t];
}

bool dtype_is_float(DType t) {
  return t == DT_F16 || t == DT_BF16 || t == DT_F32 || t == DT_E4M3 ||
         t == DT_E5M2;
}

bool dtype_is_int(DType t) { return t == DT_I32 || t == DT_U64; }

const char *binop_spelling(BinOp op) {
  if ((int)op < 0 || op >= BIN_COUNT)
    die("bad binary operator %d", (int)op);
  return binop_names[op];
}
