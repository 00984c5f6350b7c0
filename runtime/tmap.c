/* tmap.c: the TMA tensor maps a fwd_sm90 kernel (and bwd_sm90's main
 * kernel) takes as its second parameter (abi/attn_abi.h, attn_tmaps).
 *
 * One map per operand (q, k, v) over the 4-D tensor exactly as bound:
 * dims (D, S, heads, batch) innermost first, the bound byte strides, a box
 * of 64 columns (128 bytes: the widest the 128-byte swizzle takes) by the
 * template's tile rows, and zero fill out of bounds, so tiles that run
 * past Sq or Skv read zeros. bwd_sm90 also takes one over dQ's f32
 * accumulator, into which it adds tiles (TMA reduce-add). Built per
 * launch: encoding is a host-only call of about a microsecond, and the
 * maps depend on the pointers. */
#include <string.h>

#include "cuda_driver.h"
#include "rt.h"

_Static_assert(sizeof(CUtensorMap) == sizeof(attn_tmap), "a tensor map is 128 bytes");
_Static_assert(_Alignof(attn_tmap) >= 64, "tensor maps are 64-byte aligned");

/* The map of a 4-D tensor at ptr: dims (columns, rows, heads, batch),
 * byte strides of rows, heads and batches, a box of box_cols x box_rows,
 * the 128-byte swizzle (box_cols elements must be 128 bytes). */
static CUresult tmap_encode_raw(const RtDriver *d, CUtensorMapDataType dt, void *ptr,
                                const cuuint64_t dim[4], const cuuint64_t stride[3],
                                int box_cols, int box_rows, CUtensorMap *out) {
  cuuint32_t box[4] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows, 1, 1};
  cuuint32_t estride[4] = {1, 1, 1, 1};
  return d->TensorMapEncodeTiled(out, dt, 4, ptr, dim, stride, box, estride,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

static attn_status tmap_encode(const RtDriver *d, const IrGraph *g, int slot,
                               const attn_tensor_arg *t, int box_rows, CUtensorMap *out,
                               StrBuf *err) {
  DType dt = g->tensors[slot].type;
  if (dt != DT_BF16 && dt != DT_F16) {
    sb_printf(err, "graph '%s': tensor '%s' is %s; the TMA template takes bf16 or f16",
              g->name, g->tensors[slot].name, dtype_name(dt));
    return ATTN_ERROR_UNSUPPORTED;
  }
  memset(out, 0, sizeof *out);
  if (!t->ptr) return ATTN_SUCCESS; /* an empty tensor: no tile is ever loaded */
  const cuuint64_t es = 2;
  cuuint64_t dim[4], stride[3];
  for (int i = 0; i < 4; i++) dim[i] = (cuuint64_t)(t->size[3 - i] > 0 ? t->size[3 - i] : 1);
  /* Byte strides of rows, heads, batches. A dimension of size 1 is bound
   * with stride 0, which the encoder refuses; any stride addresses its
   * only index 0, so take the dense one. */
  cuuint64_t inner = dim[0] * es;
  for (int i = 0; i < 3; i++) {
    long long s = t->stride[2 - i];
    stride[i] = s > 0 ? (cuuint64_t)s * es : (inner + 15) / 16 * 16;
    inner = stride[i] * dim[i + 1];
  }
  CUresult r = tmap_encode_raw(
      d, dt == DT_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
      t->ptr, dim, stride, 64, box_rows, out);
  if (r != CUDA_SUCCESS) {
    attn_status st = rt_driver_error(d, r, "cuTensorMapEncodeTiled", err);
    sb_printf(err, " for tensor '%s' of graph '%s' (sizes %d x %d x %d x %d)",
              g->tensors[slot].name, g->name, t->size[0], t->size[1], t->size[2], t->size[3]);
    return st;
  }
  return ATTN_SUCCESS;
}

attn_status rt_tmap_fill_bwd(const RtDriver *d, const IrGraph *g, const KernelInfo *k, int o,
                             int dout, int dqa, const attn_params *p, attn_tmaps *tm,
                             StrBuf *err) {
  memset(tm, 0, sizeof *tm);
  if (k->bwd_tma_rows <= 0) return ATTN_SUCCESS;
  attn_status st = tmap_encode(d, g, g->q, &p->t[g->q], k->bwd_tma_rows,
                               (CUtensorMap *)(void *)&tm->m[ATTN_TMAP_Q], err);
  if (st) return st;
  /* dO: bound like o (its dtype and shape), so o's entry names it. */
  st = tmap_encode(d, g, o, &p->t[dout], k->bwd_tma_rows,
                   (CUtensorMap *)(void *)&tm->m[ATTN_TMAP_DO], err);
  if (st) return st;
  /* dQ's accumulator (dense f32 [B, H, Sq, D_QK], our own scratch; null in
   * deterministic mode, which never reduces into it): boxes of 32 f32 (128
   * bytes) by bwd_tma_rows rows, the tiles the kernel adds in. */
  const attn_tensor_arg *a = &p->t[dqa];
  if (!a->ptr) return ATTN_SUCCESS;
  const cuuint64_t cols = (cuuint64_t)a->size[3];
  const cuuint64_t dim[4] = {cols, (cuuint64_t)a->size[2], (cuuint64_t)a->size[1],
                             (cuuint64_t)a->size[0]};
  const cuuint64_t stride[3] = {cols * 4, cols * 4 * dim[1], cols * 4 * dim[1] * dim[2]};
  CUresult r = tmap_encode_raw(d, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, a->ptr, dim, stride, 32,
                               k->bwd_tma_rows, (CUtensorMap *)(void *)&tm->m[ATTN_TMAP_DQA]);
  if (r != CUDA_SUCCESS) {
    st = rt_driver_error(d, r, "cuTensorMapEncodeTiled", err);
    sb_printf(err, " for the dQ accumulator of graph '%s'", g->name);
  }
  return st;
}

attn_status rt_tmap_fill(const RtDriver *d, const IrGraph *g, const KernelInfo *k,
                         const attn_params *p, attn_tmaps *tm, StrBuf *err) {
  memset(tm, 0, sizeof *tm);
  if (k->tma_rows_q <= 0 || k->tma_rows_kv <= 0) return ATTN_SUCCESS;
  const int slot[3] = {g->q, g->k, g->v};
  const int rows[3] = {k->tma_rows_q, k->tma_rows_kv, k->tma_rows_kv};
  const int which[3] = {ATTN_TMAP_Q, ATTN_TMAP_K, ATTN_TMAP_V};
  for (int i = 0; i < 3; i++) {
    attn_status st = tmap_encode(d, g, slot[i], &p->t[slot[i]], rows[i],
                                 (CUtensorMap *)(void *)&tm->m[which[i]], err);
    if (st) return st;
  }
  return ATTN_SUCCESS;
}
