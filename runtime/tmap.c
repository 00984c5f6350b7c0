/* tmap.c: the TMA tensor maps a plan step takes as its kernel's second
 * parameter (abi/attn_abi.h, attn_tmaps; PlanStep.maps).
 *
 * One map per operand over the 4-D tensor exactly as bound: dims (D, S,
 * heads, batch) innermost first, the bound byte strides, a box of the
 * plan's columns (128 bytes: the widest the 128-byte swizzle takes; 64
 * bf16 columns for fwd_sm90's q, k, v and bwd_sm90's q and dO, 128 FP8
 * columns (as bytes) for fwd_sm90's FP8 q, k and v, 32 f32 for
 * bwd_sm90's dQ accumulator, into which it adds tiles by TMA reduce-add)
 * by the template's tile rows, and zero fill out of bounds, so tiles that
 * run past Sq or Skv read zeros. Built per launch: encoding is a
 * host-only call of about a microsecond, and the maps depend on the
 * pointers. */
#include <string.h>

#include "cuda_driver.h"
#include "rt.h"

_Static_assert(sizeof(CUtensorMap) == sizeof(attn_tmap), "a tensor map is 128 bytes");
_Static_assert(_Alignof(attn_tmap) >= 64, "tensor maps are 64-byte aligned");

/* The map of a 4-D tensor at ptr: dims (columns, rows, heads, batch),
 * byte strides of rows, heads and batches, a box of box_cols x box_rows,
 * the 128-byte swizzle, or the 64-byte one for boxes of 64-byte rows
 * (bwd_sm90's FP8 Q^T and dO^T). */
static CUresult tmap_encode_raw(const RtDriver *d, CUtensorMapDataType dt, void *ptr,
                                const cuuint64_t dim[4], const cuuint64_t stride[3],
                                int box_cols, int box_rows, int row_bytes, CUtensorMap *out) {
  cuuint32_t box[4] = {(cuuint32_t)box_cols, (cuuint32_t)box_rows, 1, 1};
  cuuint32_t estride[4] = {1, 1, 1, 1};
  return d->TensorMapEncodeTiled(out, dt, 4, ptr, dim, stride, box, estride,
                                 CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 row_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                                 : CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

/* Whether parameter slot `slot` holds a packed tensor ([tokens, heads,
 * cols]): a packed graph tensor, or the backward's dO of a packed graph. */
static bool rt_slot_packed(const IrGraph *g, int slot) {
  if (slot < g->ntensors) return g->tensors[slot].packed;
  BwdSlots sl;
  return ir_packed(g) && bwd_has_grad(g) && bwd_slots(g, &sl) == 0 && slot == sl.dout;
}

/* One map of a step: over attn_params.t[m->slot] exactly as bound. */
static attn_status tmap_encode(const RtDriver *d, const IrGraph *g, const PlanMap *m,
                               const attn_tensor_arg *t, CUtensorMap *out, StrBuf *err) {
  memset(out, 0, sizeof *out);
  if (!t->ptr) return ATTN_SUCCESS; /* an empty tensor, or a null slot: never loaded */
  const cuuint64_t es = (cuuint64_t)dtype_size(m->dtype);
  const CUtensorMapDataType dt = m->dtype == DT_BF16  ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                 : m->dtype == DT_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                 : dtype_is_fp8(m->dtype) ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                                      : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  /* Packed sequences are bound as declared, [tokens, heads, cols]: mapped
   * as one batch entry [1, heads, tokens, cols], the kernel adding each
   * sequence's first row to the row coordinate. Rows past a sequence are
   * its successor's (masked keys, unstored queries) or, past the tensor,
   * zeros. (A slot past the graph's tensors is the backward's dO, packed
   * like o, or a workspace slice: dense.) */
  attn_tensor_arg packed;
  if (rt_slot_packed(g, m->slot)) {
    packed = (attn_tensor_arg){.ptr = t->ptr,
                               .stride = {0, t->stride[1], t->stride[0], t->stride[2]},
                               .size = {1, t->size[1], t->size[0], t->size[2]}};
    t = &packed;
  }
  /* A paged cache ([pages, page size, heads, cols], or [pages, heads, page
   * size, cols] for paged_hnd) is mapped as [pages, heads, page size,
   * cols], so the kernel's coordinates are (column, row within the page,
   * head, page id), with boxes of the largest power of two dividing both
   * the page size and the tile's rows: no box crosses a page
   * (fwd_sm90.cuh, fwd90_page_box). */
  int box_rows = m->box_rows;
  attn_tensor_arg paged;
  if (m->slot < g->ntensors && g->tensors[m->slot].paged) {
    const int rows = ir_page_dim(&g->tensors[m->slot]), heads = 3 - rows;
    paged = (attn_tensor_arg){
        .ptr = t->ptr,
        .stride = {t->stride[0], t->stride[heads], t->stride[rows], t->stride[3]},
        .size = {t->size[0], t->size[heads], t->size[rows], t->size[3]}};
    t = &paged;
    const int page = t->size[2] > 0 ? t->size[2] : 1;
    const int low_page = page & -page, low_box = box_rows & -box_rows;
    box_rows = low_page < low_box ? low_page : low_box;
  }
  cuuint64_t dim[4], stride[3];
  for (int i = 0; i < 4; i++) dim[i] = (cuuint64_t)(t->size[3 - i] > 0 ? t->size[3 - i] : 1);
  /* Byte strides of rows, heads, batches. A dimension of size 1 is bound
   * with stride 0, which the encoder refuses; any stride addresses its
   * only index 0, so take the dense one. */
  cuuint64_t inner = dim[0] * es;
  for (int i = 0; i < 3; i++) {
    long long st = t->stride[2 - i];
    stride[i] = st > 0 ? (cuuint64_t)st * es : (inner + 15) / 16 * 16;
    inner = stride[i] * dim[i + 1];
  }
  CUresult r = tmap_encode_raw(d, dt, t->ptr, dim, stride, m->box_cols, box_rows,
                               m->box_cols * (int)es, out);
  if (r != CUDA_SUCCESS) {
    attn_status st = rt_driver_error(d, r, "cuTensorMapEncodeTiled", err);
    sb_printf(err, " for %s of graph '%s' (sizes %d x %d x %d x %d)", m->what, g->name,
              t->size[0], t->size[1], t->size[2], t->size[3]);
    return st;
  }
  return ATTN_SUCCESS;
}

attn_status rt_tmap_fill(const RtDriver *d, const IrGraph *g, const PlanStep *step,
                         const attn_params *p, attn_tmaps *tm, StrBuf *err) {
  memset(tm, 0, sizeof *tm);
  for (int k = 0; k < step->nmaps; k++) {
    const PlanMap *m = &step->maps[k];
    attn_status st =
        tmap_encode(d, g, m, &p->t[m->slot], (CUtensorMap *)(void *)&tm->m[m->index], err);
    if (st) return st;
  }
  return ATTN_SUCCESS;
}
