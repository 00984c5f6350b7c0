// affine_host_check.cpp: the affine-mask hooks attnc emits (compiler/emit.c:
// attn_keep, attn_kv_bounds, attn_tile_class), compiled for the host and
// checked against each other where the masks' i32 arithmetic wraps. The
// language computes i32 like C on int32, wrapping; the compile-time
// analysis works on the exact affine form; the hooks must trust it only
// where no side can wrap (emit.c's wrap_guard). Checked, for scalars from
// ordinary to INT_MIN/INT_MAX: a tile of class 0 keeps no element, one of
// class 2 keeps all, and attn_kv_bounds covers every kept key of its rows.
// tests/host/sep_host_check.sh extracts the hooks (AFF_HOOKS) and builds
// this file once per graph (AFF_CASE: which scalars it has).
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>

#define __device__
#define __forceinline__ inline
using std::max;
using std::min;

#include "attn_abi.h"

static float attn_neg_inf() { return -INFINITY; }
static long long attn_floordiv(long long a, long long b) {
  long long q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static long long attn_ceildiv(long long a, long long b) { return -attn_floordiv(-a, b); }
#include "host_shims.h"

#include AFF_HOOKS
} // the graph's namespace, left open by the extract

static int failures = 0;
static long long tiles = 0, decided = 0;

#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    if (!(cond) && failures++ < 10) {                                        \
      printf("FAIL: ");                                                      \
      printf(__VA_ARGS__);                                                   \
      printf("\n");                                                          \
    }                                                                        \
  } while (0)

static void check(attn_params &p, const char *what) {
  for (int b = 0; b < p.B; b++)
    for (int h = 0; h < p.H; h++) {
      std::vector<char> keep((size_t)p.Sq * p.Skv);
      for (int i = 0; i < p.Sq; i++)
        for (int j = 0; j < p.Skv; j++) keep[(size_t)i * p.Skv + j] = AFF_NS::attn_keep(b, h, i, j, p);
      static const int bms[] = {16, 64, 128}, bns[] = {16, 64, 80, 128};
      for (int bm : bms) {
        for (int i0 = 0; i0 < p.Sq; i0 += bm) {
          int i1 = min(i0 + bm, p.Sq) - 1, lo, hi;
          AFF_NS::attn_kv_bounds(b, h, i0, i1, p, lo, hi);
          for (int i = i0; i <= i1; i++)
            for (int j = 0; j < p.Skv; j++)
              CHECK(!keep[(size_t)i * p.Skv + j] || (j >= lo && j < hi),
                    "%s: row %d keeps key %d outside attn_kv_bounds [%d, %d)", what, i, j, lo, hi);
          for (int bn : bns)
            for (int j0 = 0; j0 < p.Skv; j0 += bn) {
              int j1 = min(j0 + bn, p.Skv) - 1, kept = 0;
              for (int i = i0; i <= i1; i++)
                for (int j = j0; j <= j1; j++) kept += keep[(size_t)i * p.Skv + j];
              int all = (i1 - i0 + 1) * (j1 - j0 + 1);
              int cls = AFF_NS::attn_tile_class(b, h, i0, i1, j0, j1, p);
              tiles++;
              decided += cls != 1;
              CHECK(cls != 0 || kept == 0, "%s: tile [%d,%d]x[%d,%d] class 0, %d kept", what, i0,
                    i1, j0, j1, kept);
              CHECK(cls != 2 || kept == all, "%s: tile [%d,%d]x[%d,%d] class 2, %d of %d kept",
                    what, i0, i1, j0, j1, kept, all);
            }
        }
      }
    }
}

int main() {
  static const int vals[] = {0, 1, 7, 100, -50, 1 << 20, (1 << 30) + 3, INT_MAX, INT_MAX - 200,
                             INT_MIN, INT_MIN + 100, -(1 << 30)};
  const int nv = (int)(sizeof vals / sizeof vals[0]);
  attn_params p = {};
  p.B = 1, p.H = 2, p.Hk = 2, p.Sq = 300, p.Skv = 257;
  char what[128];
  for (int a = 0; a < nv; a++)
    for (int c = 0; c < (AFF_CASE >= 2 ? nv : 1); c++) {
      p.s[0].i = vals[a];
      p.s[1].i = vals[c];
      snprintf(what, sizeof what, "scalars %d, %d", vals[a], vals[c]);
      check(p, what);
    }
  printf("%s case %d: %lld tiles, %lld decided without a per-element test, %d failures\n",
         failures ? "FAIL" : "PASS", AFF_CASE, tiles, decided, failures);
  return failures != 0;
}
