/*
 * merge.c: the merge of partial attention results over disjoint key sets
 * (split-KV decode's partials, context parallelism's shards): the CPU
 * reference the kernels' merges are held to.
 */
#include <math.h>

#include "ref.h"

void ref_merge_partials(int n, int64_t rows, int64_t cols, const double *const *o,
                        const double *const *lse, double *o_out, double *lse_out) {
  for (int64_t r = 0; r < rows; r++) {
    double m = -INFINITY;
    for (int s = 0; s < n; s++)
      if (lse[s][r] > m) m = lse[s][r];
    double *out = o_out + r * cols;
    for (int64_t c = 0; c < cols; c++) out[c] = 0;
    if (m == -INFINITY) { /* no key of any part was kept: O 0, lse -inf */
      lse_out[r] = -INFINITY;
      continue;
    }
    /* Relative to the largest part, so no exp overflows. */
    double sum = 0;
    for (int s = 0; s < n; s++) sum += exp(lse[s][r] - m);
    const double l = m + log(sum);
    lse_out[r] = l;
    for (int s = 0; s < n; s++) {
      const double w = exp(lse[s][r] - l); /* 0 for a part with lse -inf */
      if (w == 0) continue;
      for (int64_t c = 0; c < cols; c++) out[c] += w * o[s][r * cols + c];
    }
  }
}
