/* dtype.c: facts about element types and operator spellings, driven by the
 * X-macro tables in attnc.h so a new dtype or operator is one line; and
 * rounding to each storage type bit for bit like CUDA's conversions (the
 * constant folder, the op table's CPU evaluation and the CPU reference all
 * round through here). */
#include <math.h>
#include <string.h>

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

bool dtype_is_fp8(DType t) { return t == DT_E4M3 || t == DT_E5M2; }

bool dtype_is_int(DType t) { return t == DT_I32 || t == DT_U64; }

const char *binop_spelling(BinOp op) {
  if ((int)op < 0 || op >= BIN_COUNT)
    die("bad binary operator %d", (int)op);
  return binop_names[op];
}

/* ----------------------------------------------------------- rounding */

/* A binary floating-point format: mbits stored mantissa bits, emin the
 * smallest normal exponent, maxfin the largest finite value, sat whether
 * overflow saturates (CUDA's fp8 SATFINITE) or goes to inf. */
typedef struct FloatFormat {
  int mbits, emin, bias, ebits;
  double maxfin;
  bool sat;
} FloatFormat;

static const FloatFormat fmt_f16 = {10, -14, 15, 5, 65504.0, false};
static const FloatFormat fmt_bf16 = {7, -126, 127, 8, 0x1.fep127, false};
static const FloatFormat fmt_e4m3 = {3, -6, 7, 4, 448.0, true};
static const FloatFormat fmt_e5m2 = {2, -14, 15, 5, 57344.0, true};

/* Round to nearest even: scale so the format's last mantissa bit (at the
 * exponent of x, or of the smallest normal for subnormals) has weight 1,
 * round to an integer, scale back. Scaling by a power of two is exact. */
static double dtype_round_format(const FloatFormat *f, double x) {
  if (isnan(x))
    return x;
  if (isinf(x))
    return f->sat ? copysign(f->maxfin, x) : x;
  double a = fabs(x);
  if (a == 0)
    return x;
  int e;
  frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  int exp = e - 1 < f->emin ? f->emin : e - 1;
  double r = ldexp(nearbyint(ldexp(a, f->mbits - exp)), exp - f->mbits);
  if (r > f->maxfin)
    r = f->sat ? f->maxfin : INFINITY;
  return copysign(r, x);
}

/* The bits of a value dtype_round_format already produced (not NaN). */
static uint32_t fmt_encode(const FloatFormat *f, double r) {
  uint32_t sign = signbit(r) ? 1u << (f->ebits + f->mbits) : 0;
  double a = fabs(r);
  if (isinf(a))
    return sign | (((1u << f->ebits) - 1) << f->mbits);
  if (a == 0)
    return sign;
  int e;
  frexp(a, &e);
  if (e - 1 < f->emin) /* subnormal: exponent field 0 */
    return sign | (uint32_t)ldexp(a, f->mbits - f->emin);
  uint32_t mant = (uint32_t)(ldexp(a, f->mbits - (e - 1)) - ldexp(1, f->mbits));
  return sign | ((uint32_t)(e - 1 + f->bias) << f->mbits) | mant;
}

static double fmt_decode(const FloatFormat *f, uint32_t bits, bool has_inf) {
  uint32_t mmask = (1u << f->mbits) - 1, emax = (1u << f->ebits) - 1;
  uint32_t mant = bits & mmask, ex = (bits >> f->mbits) & emax;
  double sign = (bits >> (f->ebits + f->mbits)) & 1 ? -1.0 : 1.0;
  if (has_inf && ex == emax)
    return mant ? NAN : sign * INFINITY;
  if (!has_inf && ex == emax && mant == mmask) /* e4m3: S.1111.111 */
    return NAN;
  if (ex == 0)
    return sign * ldexp(mant, f->emin - f->mbits);
  return sign * ldexp(mant + (double)(mmask + 1), (int)ex - f->bias - f->mbits);
}

static uint64_t double_bits(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

uint16_t dtype_f16_bits(double x) {
  if (isnan(x))
    return 0x7fff;
  return (uint16_t)fmt_encode(&fmt_f16, dtype_round_format(&fmt_f16, x));
}

uint16_t dtype_bf16_bits(double x) {
  if (isnan(x))
    return 0x7fff;
  return (uint16_t)fmt_encode(&fmt_bf16, dtype_round_format(&fmt_bf16, x));
}

uint8_t dtype_e4m3_bits(double x) {
  if (isnan(x)) /* __nv_cvt_double_to_fp8 keeps the sign of a NaN */
    return (uint8_t)(0x7f | (signbit(x) ? 0x80 : 0));
  return (uint8_t)fmt_encode(&fmt_e4m3, dtype_round_format(&fmt_e4m3, x));
}

uint8_t dtype_e5m2_bits(double x) {
  if (isnan(x)) /* quiet NaN keeping the top two payload bits and sign */
    return (uint8_t)(0x7e | ((double_bits(x) >> 50) & 3) |
                     (signbit(x) ? 0x80 : 0));
  return (uint8_t)fmt_encode(&fmt_e5m2, dtype_round_format(&fmt_e5m2, x));
}

/* Float to integer like CUDA's __double2int_rz / __double2ull_rz:
 * truncate, saturate, NaN -> 0. */
static int32_t round_to_i32(double x) {
  if (isnan(x))
    return 0;
  if (x >= 2147483647.0)
    return INT32_MAX;
  if (x <= -2147483648.0)
    return INT32_MIN;
  return (int32_t)x;
}

static uint64_t round_to_u64(double x) {
  if (isnan(x) || x <= 0)
    return 0;
  if (x >= 18446744073709551615.0)
    return UINT64_MAX;
  return (uint64_t)x;
}

double dtype_round(DType t, double x) {
  switch (t) {
  case DT_F16: return dtype_round_format(&fmt_f16, x);
  case DT_BF16: return dtype_round_format(&fmt_bf16, x);
  case DT_F32: return (double)(float)x;
  case DT_E4M3: return dtype_round_format(&fmt_e4m3, x);
  case DT_E5M2: return dtype_round_format(&fmt_e5m2, x);
  case DT_I32: return (double)round_to_i32(x);
  case DT_U64: return (double)round_to_u64(x);
  case DT_BOOL: return x != 0;
  default: return x;
  }
}

void dtype_round_array(DType t, double *x, size_t n) {
  for (size_t k = 0; k < n; k++)
    x[k] = dtype_round(t, x[k]);
}

void dtype_to_bits(DType t, double x, void *dst) {
  uint16_t h;
  float f;
  int32_t i;
  uint64_t u;
  uint8_t b;
  switch (t) {
  case DT_F16: h = dtype_f16_bits(x); memcpy(dst, &h, 2); return;
  case DT_BF16: h = dtype_bf16_bits(x); memcpy(dst, &h, 2); return;
  case DT_F32: f = (float)x; memcpy(dst, &f, 4); return;
  case DT_E4M3: b = dtype_e4m3_bits(x); memcpy(dst, &b, 1); return;
  case DT_E5M2: b = dtype_e5m2_bits(x); memcpy(dst, &b, 1); return;
  case DT_I32: i = round_to_i32(x); memcpy(dst, &i, 4); return;
  case DT_U64: u = round_to_u64(x); memcpy(dst, &u, 8); return;
  case DT_BOOL: b = x != 0; memcpy(dst, &b, 1); return;
  default: die("dtype_to_bits: dtype %d", (int)t);
  }
}

double dtype_from_bits(DType t, const void *p) {
  uint16_t h;
  uint32_t w;
  float f;
  int32_t i;
  uint64_t u;
  uint8_t b;
  switch (t) {
  case DT_F16: memcpy(&h, p, 2); return fmt_decode(&fmt_f16, h, true);
  case DT_BF16:
    memcpy(&h, p, 2);
    w = (uint32_t)h << 16;
    memcpy(&f, &w, 4);
    return f;
  case DT_F32: memcpy(&f, p, 4); return f;
  case DT_E4M3: memcpy(&b, p, 1); return fmt_decode(&fmt_e4m3, b, false);
  case DT_E5M2: memcpy(&b, p, 1); return fmt_decode(&fmt_e5m2, b, true);
  case DT_I32: memcpy(&i, p, 4); return i;
  case DT_U64: memcpy(&u, p, 8); return (double)u;
  case DT_BOOL: memcpy(&b, p, 1); return b != 0;
  default: die("dtype_from_bits: dtype %d", (int)t);
  }
}

