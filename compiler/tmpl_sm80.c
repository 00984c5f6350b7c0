/*
 * tmpl_sm80.c: tile configurations of the portable forward template,
 * templates/fwd_sm80.cuh.
 *
 * A configuration is (BM query rows, BN keys per tile, warps); every warp
 * owns 16 query rows, so BM = 16 * warps. Shared memory holds the Q tile
 * and two stages of (K tile, V tile), all 16-bit:
 *
 *     smem = 2 * (BM * d_qk + 2 * BN * (d_qk + d_v))   bytes
 *
 * as abi/attn_layout.h defines it for the template too (FP8 tensors add
 * their 8-bit staging tiles there). For each head dim the candidates are listed fastest
 * first and the first that fits the target's per-block shared-memory limit
 * wins: the sm_80-class limits (163 KB on A100, 99 KB on the sm_86/89
 * parts) force smaller tiles at head dim 256 than Hopper's 227 KB.
 */
#include "attn_layout.h"
#include "attnc.h"

typedef struct Sm80Candidate {
  int bm, bn, warps;
} Sm80Candidate;

/* Largest dynamic shared memory one block may use, in bytes. */
static int sm80_smem_limit(int sm) {
  switch (sm) {
  case 80:
  case 87:
    return 163 * 1024;
  case 90:
  case 100:
  case 103:
    return 227 * 1024;
  default:
    /* sm_86, sm_89, sm_120 and anything unknown: the smallest limit of
     * the family, so the choice is safe everywhere. */
    return 99 * 1024;
  }
}

static int sm80_smem_bytes(const Sm80Candidate *c, int d_qk, int d_v, int q_bytes, int kv_bytes) {
  return attn_fwd80_layout_of(c->bm, c->bn, d_qk, d_v, q_bytes, kv_bytes).total;
}

int tmpl_sm80_config(int d_qk, int d_v, int q_bytes, int kv_bytes, int sm, Sm80Config *out) {
  /* Per widest tile dim (attn_head_tile; 192 takes 256's list). 8 warps of 16 rows keep the tensor cores fed;
   * at 256 the O accumulator is 128 registers a thread, and the smaller
   * limits leave room only for 4 warps or 32-key tiles. */
  static const Sm80Candidate d64[] = {{128, 128, 8}, {128, 64, 8}, {64, 64, 4}};
  static const Sm80Candidate d128[] = {{128, 128, 8}, {128, 64, 8}, {64, 64, 4}};
  static const Sm80Candidate d256[] = {{128, 64, 8}, {64, 64, 4}, {64, 32, 4}};
  const Sm80Candidate *list;
  int n;

  /* 16-bit or FP8 q, k and v (FP8 converted on load into 16-bit tiles). */
  if ((q_bytes != 2 && q_bytes != 1) || (kv_bytes != 2 && kv_bytes != 1) || !out)
    return -1;
  if (!attn_head_dim_ok(d_qk) || !attn_head_dim_ok(d_v))
    return -1;
  /* 8-bit rows are copied in whole 16-byte chunks. */
  if ((q_bytes == 1 && d_qk % 16 != 0) || (kv_bytes == 1 && (d_qk % 16 != 0 || d_v % 16 != 0)))
    return -1;
  d_qk = attn_head_tile(d_qk);
  d_v = attn_head_tile(d_v);
  int dmax = d_qk > d_v ? d_qk : d_v;
  if (dmax == 64)
    list = d64, n = (int)(sizeof d64 / sizeof d64[0]);
  else if (dmax == 128)
    list = d128, n = (int)(sizeof d128 / sizeof d128[0]);
  else
    list = d256, n = (int)(sizeof d256 / sizeof d256[0]);

  int limit = sm80_smem_limit(sm);
  for (int k = 0; k < n; k++) {
    int bytes = sm80_smem_bytes(&list[k], d_qk, d_v, q_bytes, kv_bytes);
    if (bytes <= limit) {
      out->bm = list[k].bm;
      out->bn = list[k].bn;
      out->warps = list[k].warps;
      out->smem_bytes = bytes;
      return 0;
    }
  }
  return -1;
}
