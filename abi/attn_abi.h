/*
 * attn_abi.h: the parameter block every attnc kernel takes, by value.
 *
 * Shared by the host (runtime/, which fills it) and the device (templates/,
 * which reads it), so it holds plain C with no headers: NVRTC sees it as
 * text embedded in the generated source. One layout for every graph: the
 * compiler's metadata says which slot holds which of the graph's tensors,
 * scalars and dimension symbols, by their index in the IR graph.
 */
#ifndef ATTN_ABI_H
#define ATTN_ABI_H

#define ATTN_ABI_VERSION 5
#define ATTN_MAX_TENSORS 24 /* a graph's inputs and outputs, and its backward's */
#define ATTN_MAX_SCALARS 16
#define ATTN_MAX_DIMS 16 /* dimension symbols: B, H, Sq, ... */
/* The backward's row passes (delta, dQ's and dK/dV's conversions) take
 * this many rows of one (b, h) per CTA, whatever the CTA's size. */
#define ATTN_BWD_ROWS_PER_CTA 32

/* One bound tensor: element strides and sizes in the graph's declared
 * dimension order. Unused trailing dims have size 1 and stride 0. A
 * declared literal 1 has stride 0, which broadcasts it. */
typedef struct attn_tensor_arg {
  void *ptr;
  long long stride[4];
  int size[4];
} attn_tensor_arg;

typedef union attn_scalar_arg {
  float f;
  int i;
  unsigned long long u;
} attn_scalar_arg;

typedef struct attn_params {
  attn_tensor_arg t[ATTN_MAX_TENSORS]; /* by IR tensor index */
  attn_scalar_arg s[ATTN_MAX_SCALARS]; /* by IR scalar index */
  int dim[ATTN_MAX_DIMS];              /* by IR dim-symbol index */
  /* The attention problem, derived from q and k by the runtime. */
  int B, H, Hk, Sq, Skv;
  /* Optional: when non-null each CTA adds the number of key tiles it
   * loaded (tests use it to prove masked tiles are skipped). */
  unsigned long long *tiles_visited;
  /* Graphs with separable mask conjuncts (doc[b, i] == doc[b, j]): the
   * workspace of per-tile ranges their prep kernel writes and
   * attn_tile_class reads (compiler/emit_sep.c); null for other graphs. */
  void *mask_ranges;
  /* Persistent kernels (fwd_sm90 ATTN_PERSISTENT): two words, zero
   * before the first launch, that hand out work tiles; the kernel leaves
   * them zero. NULL: a static tile order. Owned by the attn_call. */
  unsigned *tile_queue;
} attn_params;

/* Tensor maps (CUtensorMap: 128 opaque bytes, 64-byte aligned) for the
 * TMA loads (and bwd_sm90's dQ reduction) of the sm90 templates. They
 * travel as the kernel's second parameter, `const __grid_constant__
 * attn_tmaps`, built per launch by runtime/tmap.c; kernels of other
 * templates take attn_params alone. */
#ifdef __cplusplus
#define ATTN_ALIGN64 alignas(64)
#else
#define ATTN_ALIGN64 _Alignas(64)
#endif
#define ATTN_TMAP_Q 0
#define ATTN_TMAP_K 1
#define ATTN_TMAP_V 2
#define ATTN_TMAP_O 3 /* fwd_sm90's o_smem variant: O, stored by TMA */
#define ATTN_TMAP_DO 1 /* bwd_sm90's main kernel: dO (K and V go by cp.async) */
#define ATTN_TMAP_DQA 2 /* bwd_sm90's main kernel: dQ's f32 accumulator (reduce-add) */
#define ATTN_TMAP_QDT 3 /* bwd_sm90's FP8 tensor-core mode: Q^T with dO^T (transpose8's) */
#define ATTN_TMAP_BK 3  /* bwd_sm90's persistent main kernel (16-bit MMAs): an item's K */
#define ATTN_TMAP_BV 4  /* and its V, by TMA (bwd90_kv_tma) */
typedef struct attn_tmap {
  ATTN_ALIGN64 unsigned long long opaque[16];
} attn_tmap;
typedef struct attn_tmaps {
  attn_tmap m[5];
} attn_tmaps;

#endif
