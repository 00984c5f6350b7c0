/*
 * tmpl_sm90.c: tile configurations of the Hopper forward template,
 * templates/fwd_sm90.cuh.
 *
 * The CTA is fixed (a producer warpgroup and two consumer warpgroups of 64
 * query rows: BM = 128, 384 threads); the table picks the key tile BN and
 * the number of K/V stages. Shared memory holds the Q tile, the stages of
 * (K tile, V tile), the mbarriers, and 1024 bytes of slack for rounding
 * the base up to the 128-byte swizzle's 1024-byte period:
 *
 *     smem = 2*(BM*d_qk + stages*BN*(d_qk + d_v)) + 8*(1 + 3*stages) + 1024
 *
 * which is the template's attn_fwd_sm90_smem_bytes. Register budget per
 * consumer thread (232): S is BN/2 floats, O d_v/2 floats, P BN/4 words;
 * at d_v 256 the O accumulator (128) forces BN 64.
 */
#include "attnc.h"

typedef struct Sm90Candidate {
  int bn, stages;
} Sm90Candidate;

#define SM90_SMEM_LIMIT (227 * 1024)

static int sm90_smem_bytes(const Sm90Candidate *c, int d_qk, int d_v) {
  return 2 * (128 * d_qk + c->stages * c->bn * (d_qk + d_v)) + 8 * (1 + 3 * c->stages) + 1024;
}

int tmpl_sm90_config(int d_qk, int d_v, int in_bytes, Sm90Config *out) {
  /* Fastest first: more stages hide more TMA latency; BN 128 halves the
   * per-tile softmax bookkeeping where the registers allow it. */
  static const Sm90Candidate small[] = {{128, 3}, {128, 2}, {64, 2}};
  static const Sm90Candidate d256[] = {{64, 2}};
  if (in_bytes != 2 || !out) return -1;
  if ((d_qk != 64 && d_qk != 128 && d_qk != 256) || (d_v != 64 && d_v != 128 && d_v != 256))
    return -1;
  const Sm90Candidate *list = small;
  int n = (int)(sizeof small / sizeof small[0]);
  if (d_qk == 256 || d_v == 256) list = d256, n = (int)(sizeof d256 / sizeof d256[0]);
  for (int k = 0; k < n; k++) {
    int bytes = sm90_smem_bytes(&list[k], d_qk, d_v);
    if (bytes <= SM90_SMEM_LIMIT) {
      out->bm = 128;
      out->bn = list[k].bn;
      out->stages = list[k].stages;
      out->threads = 384;
      out->smem_bytes = bytes;
      return 0;
    }
  }
  return -1;
}
