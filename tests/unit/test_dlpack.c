/* test_dlpack.c: attn_call_bind_dlpack's mapping of DLTensors (device,
 * dtype, shape, strides, byte offset), without a GPU. The graph comes from
 * an embedded module whose images are never loaded. */
#include <criterion/criterion.h>
#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

static const char src[] =
    "attention g {\n"
    "  input  q : bf16[B, H, Sq, 64];\n"
    "  input  k : bf16[B, H, Skv, 64];\n"
    "  input  v : bf16[B, H, Skv, 64];\n"
    "  input  bias : f32[B, H, Sq, Skv];\n"
    "  input  keep : bool[B, Skv];\n"
    "  s = mask((q @ k^T) + bias[b, h, i, j], keep[b, j]);\n"
    "  o = softmax(s) @ v;\n"
    "  output o : bf16[B, H, Sq, 64];\n"
    "}\n";
static const unsigned char fake[] = {1};
static const char kern[] =
    "attnc-plan 4\ngraph g sep=0,0,0,0 decode=0 wave=0\npass forward det=0 need=-\n"
    "  step forward entry=attn_g_fwd threads=128 smem=0 grid=Sq/64,H,B persistent=0 need=- deny=-\n"
    "end\n";
static const attn_embedded_image images[] = {
    {"sm_80", 0, fake, sizeof fake, kern}};
static const attn_embedded em = {ATTN_EMBEDDED_FORMAT, ATTN_ABI_VERSION,
                                 ATTNC_VERSION, "g.attn", src, sizeof src - 1,
                                 images, 1};

static attn_context *ctx;
static attn_module *mod;
static attn_call *call;

static void setup(void) {
  setenv("ATTN_NO_CACHE", "1", 1);
  cr_assert_eq(attn_context_create(&ctx), ATTN_SUCCESS);
  cr_assert_eq(attn_context_set_arch(ctx, "sm_80"), ATTN_SUCCESS);
  cr_assert_eq(attn_module_load_embedded(ctx, &em, &mod), ATTN_SUCCESS, "%s",
               attn_context_error(ctx));
  attn_graph *g;
  cr_assert_eq(attn_module_get_graph(mod, NULL, &g), ATTN_SUCCESS);
  cr_assert_eq(attn_call_create(g, &call), ATTN_SUCCESS);
}
static void teardown(void) {
  attn_call_destroy(call);
  attn_module_destroy(mod);
  attn_context_destroy(ctx);
}
TestSuite(dlpack, .init = setup, .fini = teardown);

static int64_t shape_q[4] = {2, 4, 128, 64};
static _Alignas(16) char buf[1 << 12];

static DLTensor tensor(uint8_t code, uint8_t bits, int ndim, int64_t *shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = buf;
  t.device.device_type = kDLCUDA;
  t.ndim = ndim;
  t.dtype.code = code;
  t.dtype.bits = bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

Test(dlpack, dense_bf16_binds) {
  DLTensor t = tensor(kDLBfloat, 16, 4, shape_q);
  cr_assert_eq(attn_call_bind_dlpack(call, "q", &t), ATTN_SUCCESS, "%s",
               attn_context_error(ctx));
  DlpackTensor u;
  StrBuf err = {0};
  cr_assert_eq(dlpack_unpack(&t, "q", &u, &err), ATTN_SUCCESS);
  cr_assert_eq(u.dtype, ATTN_BF16);
  cr_assert_eq(u.ndim, 4);
  cr_assert_eq(u.shape[2], 128);
  cr_assert_null(u.strides);
  cr_assert_eq(u.ptr, buf);
}

Test(dlpack, dtype_codes) {
  static const struct { uint8_t code, bits; attn_dtype want; } cases[] = {
      {kDLBfloat, 16, ATTN_BF16}, {kDLFloat, 16, ATTN_F16},
      {kDLFloat, 32, ATTN_F32},   {kDLInt, 32, ATTN_I32},
      {kDLUInt, 64, ATTN_U64},    {6, 8, ATTN_BOOL},
      {10, 8, ATTN_E4M3},         {12, 8, ATTN_E5M2},
      {kDLFloat, 64, 0},          {kDLInt, 64, 0},
      {kDLBfloat, 32, 0},         {kDLComplex, 64, 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    DLTensor t = tensor(cases[i].code, cases[i].bits, 4, shape_q);
    DlpackTensor u;
    StrBuf err = {0};
    attn_status st = dlpack_unpack(&t, "x", &u, &err);
    if (cases[i].want) {
      cr_assert_eq(st, ATTN_SUCCESS, "case %zu: %s", i, err.data);
      cr_assert_eq(u.dtype, cases[i].want, "case %zu", i);
    } else {
      cr_assert_eq(st, ATTN_ERROR_INVALID_ARGUMENT, "case %zu", i);
      cr_assert(strstr(err.data, "no libattn type"), "%s", err.data);
    }
    sb_free(&err);
  }
  DLTensor t = tensor(kDLBfloat, 16, 4, shape_q);
  t.dtype.lanes = 2;
  cr_assert_eq(attn_call_bind_dlpack(call, "q", &t),
               ATTN_ERROR_INVALID_ARGUMENT);
}

Test(dlpack, host_memory_refused) {
  DLTensor t = tensor(kDLBfloat, 16, 4, shape_q);
  t.device.device_type = kDLCPU;
  cr_assert_eq(attn_call_bind_dlpack(call, "q", &t),
               ATTN_ERROR_INVALID_ARGUMENT);
  cr_assert(strstr(attn_context_error(ctx), "tensor 'q': DLPack device kDLCPU"),
            "%s", attn_context_error(ctx));
  t.device.device_type = kDLCUDAManaged;
  cr_assert_eq(attn_call_bind_dlpack(call, "q", &t), ATTN_SUCCESS);
}

Test(dlpack, strides_and_byte_offset) {
  /* A [B, Sq, H, D] tensor viewed as [B, H, Sq, D] (PyTorch's transpose). */
  int64_t strides[4] = {128 * 4 * 64, 64, 4 * 64, 1};
  DLTensor t = tensor(kDLBfloat, 16, 4, shape_q);
  t.strides = strides;
  t.byte_offset = 32;
  DlpackTensor u;
  StrBuf err = {0};
  cr_assert_eq(dlpack_unpack(&t, "q", &u, &err), ATTN_SUCCESS);
  cr_assert_eq((char *)u.ptr, buf + 32);
  cr_assert_not_null(u.strides);
  cr_assert_eq(u.strides[2], 256);
  cr_assert_eq(attn_call_bind_dlpack(call, "q", &t), ATTN_SUCCESS, "%s",
               attn_context_error(ctx));
  /* A misaligned base is caught by the binding's own checks. */
  t.byte_offset = 2;
  cr_assert_eq(attn_call_bind_dlpack(call, "q", &t),
               ATTN_ERROR_INVALID_ARGUMENT);
}

Test(dlpack, checks_against_the_graph) {
  DLTensor t = tensor(kDLFloat, 16, 4, shape_q); /* q is bf16 */
  cr_assert_eq(attn_call_bind_dlpack(call, "q", &t),
               ATTN_ERROR_INVALID_ARGUMENT);
  int64_t keep_shape[2] = {2, 128};
  DLTensor keep = tensor(6, 8, 2, keep_shape);
  cr_assert_eq(attn_call_bind_dlpack(call, "keep", &keep), ATTN_SUCCESS, "%s",
               attn_context_error(ctx));
  cr_assert_eq(attn_call_bind_dlpack(call, "nope", &keep),
               ATTN_ERROR_NOT_FOUND);
  cr_assert_eq(attn_call_bind_dlpack(call, "q", NULL),
               ATTN_ERROR_INVALID_ARGUMENT);
  DLTensor big = tensor(kDLBfloat, 16, 5, shape_q);
  cr_assert_eq(attn_call_bind_dlpack(call, "q", &big),
               ATTN_ERROR_INVALID_ARGUMENT);
}
