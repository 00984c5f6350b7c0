/* dlpack.c: a DLTensor (DLPack, the tensor exchange struct of PyTorch,
 * JAX, CuPy ...) read into the arguments of attn_call_bind_tensor.
 *
 * Only the layout of DLTensor is used, which every DLPack version keeps;
 * the type codes newer than the header Debian ships (0.6) are spelled out
 * here with the numbers DLPack 1.1 gives them. bind_tensor then checks the
 * tensor against the graph exactly as for a plain binding. */
#include <dlpack/dlpack.h>
#include <string.h>

#include "rt.h"

enum {
  DLPACK_BOOL = 6,         /* kDLBool (DLPack 0.8) */
  DLPACK_FLOAT8_E4M3FN = 10, /* kDLFloat8_e4m3fn (DLPack 1.1) */
  DLPACK_FLOAT8_E5M2 = 12  /* kDLFloat8_e5m2 (DLPack 1.1) */
};

/* DLDataType -> attn_dtype; 0 when libattn has no such type. */
static attn_dtype dlpack_dtype(DLDataType t) {
  if (t.lanes != 1) return (attn_dtype)0;
  switch (t.code) {
  case kDLBfloat: return t.bits == 16 ? ATTN_BF16 : (attn_dtype)0;
  case kDLFloat:
    return t.bits == 16 ? ATTN_F16 : t.bits == 32 ? ATTN_F32 : (attn_dtype)0;
  case kDLInt: return t.bits == 32 ? ATTN_I32 : (attn_dtype)0;
  case kDLUInt: return t.bits == 64 ? ATTN_U64 : (attn_dtype)0;
  case DLPACK_BOOL: return t.bits == 8 ? ATTN_BOOL : (attn_dtype)0;
  case DLPACK_FLOAT8_E4M3FN: return t.bits == 8 ? ATTN_E4M3 : (attn_dtype)0;
  case DLPACK_FLOAT8_E5M2: return t.bits == 8 ? ATTN_E5M2 : (attn_dtype)0;
  default: return (attn_dtype)0;
  }
}

static const char *dlpack_device_name(int type) {
  switch (type) {
  case kDLCPU: return "kDLCPU";
  case kDLCUDA: return "kDLCUDA";
  case kDLCUDAHost: return "kDLCUDAHost";
  case kDLCUDAManaged: return "kDLCUDAManaged";
  case kDLROCM: return "kDLROCM";
  default: return "another device";
  }
}

attn_status dlpack_unpack(const void *dl_tensor, const char *name,
                          DlpackTensor *out, StrBuf *err) {
  memset(out, 0, sizeof *out);
  const DLTensor *t = dl_tensor;
  if (!t) {
    sb_printf(err, "tensor '%s': the DLTensor pointer is NULL", name);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  int dev = (int)t->device.device_type;
  if (dev != kDLCUDA && dev != kDLCUDAManaged) {
    sb_printf(err, "tensor '%s': DLPack device %s (%d); libattn needs GPU "
                   "memory (kDLCUDA or kDLCUDAManaged)",
              name, dlpack_device_name(dev), dev);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  out->dtype = dlpack_dtype(t->dtype);
  if (!out->dtype) {
    sb_printf(err, "tensor '%s': DLPack dtype code %u, %u bits, %u lanes has "
                   "no libattn type (bf16, f16, f32, i32, u64, bool, e4m3, "
                   "e5m2; one lane)",
              name, (unsigned)t->dtype.code, (unsigned)t->dtype.bits,
              (unsigned)t->dtype.lanes);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  if (t->ndim < 0 || t->ndim > IR_MAX_RANK || (t->ndim > 0 && !t->shape)) {
    sb_printf(err, "tensor '%s': DLPack rank %d%s; graphs take ranks 0 to %d",
              name, (int)t->ndim, t->ndim > 0 && !t->shape ? " without shape" : "",
              IR_MAX_RANK);
    return ATTN_ERROR_INVALID_ARGUMENT;
  }
  out->ndim = t->ndim;
  for (int i = 0; i < t->ndim; i++) out->shape[i] = t->shape[i];
  if (t->strides) {
    for (int i = 0; i < t->ndim; i++) out->strides_buf[i] = t->strides[i];
    out->strides = out->strides_buf;
  }
  out->ptr = t->data ? (char *)t->data + t->byte_offset : NULL;
  return ATTN_SUCCESS;
}
