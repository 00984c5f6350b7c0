// sep_host_check.cpp: the separable-mask hooks attnc emits (compiler/emit_sep.c:
// the prep kernel's sparse tables, attn_tile_class, attn_keep),
// compiled for the host and checked exhaustively against the mask as written.
// No GPU needed: tests/host/sep_host_check.sh extracts the hooks from `attnc emit
// --brief` into SEP_HOOKS and builds this file once per case (SEP_CASE).
//
// The prep kernel runs with one thread per CTA (blockDim.x = 1), which walks the
// same loops in order, so __syncthreads has nothing to wait for. Checked:
//   attn_keep(b, h, i, j) == the condition, for every element;
//   attn_tile_class: 0 only if no element of the tile is kept, 2 only if all are,
//   for every tile of the templates' shapes (BM 16/64/128, BN 16/64/80/128,
//   aligned as the templates align them) and for random unaligned tiles;
//   and that skipping happens: tiles decided (0 or 2) are counted.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>

#define __device__
#define __forceinline__ inline
struct sep_dim3 {
  unsigned x, y, z;
};
static sep_dim3 threadIdx, blockIdx, blockDim;
static void __syncthreads() {}
static int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
using std::max;
using std::min;

#include "attn_abi.h"

static float attn_neg_inf() { return -INFINITY; }
static long long attn_offset(const attn_tensor_arg &t, long long x0, long long x1, long long x2,
                             long long x3) {
  if ((unsigned long long)x0 >= (unsigned long long)t.size[0] ||
      (unsigned long long)x1 >= (unsigned long long)t.size[1] ||
      (unsigned long long)x2 >= (unsigned long long)t.size[2] ||
      (unsigned long long)x3 >= (unsigned long long)t.size[3])
    return -1;
  return x0 * t.stride[0] + x1 * t.stride[1] + x2 * t.stride[2] + x3 * t.stride[3];
}
template <typename T>
static T attn_ld(const attn_tensor_arg &t, long long x0, long long x1, long long x2, long long x3) {
  long long off = attn_offset(t, x0, x1, x2, x3);
  return off < 0 ? (T)0 : ((const T *)t.ptr)[off];
}
static int attn_ld_i32(const attn_tensor_arg &t, long long a, long long b, long long c, long long d) {
  return attn_ld<int>(t, a, b, c, d);
}
static float attn_ld_f32(const attn_tensor_arg &t, long long a, long long b, long long c,
                         long long d) {
  return attn_ld<float>(t, a, b, c, d);
}
static float attn_ld_bf16(const attn_tensor_arg &, long long, long long, long long, long long) {
  return 0.f;
}
static long long attn_floordiv(long long a, long long b) {
  long long q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static long long attn_ceildiv(long long a, long long b) { return -attn_floordiv(-a, b); }
#include "host_shims.h"

#include SEP_HOOKS
} // the graph's namespace, left open by the extract

static unsigned long long rng_state = 12345;
static unsigned rng() {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (unsigned)(rng_state >> 33);
}

static void set_tensor(attn_params &p, int slot, void *ptr, int n0, int n1, int n2) {
  attn_tensor_arg &t = p.t[slot];
  t.ptr = ptr;
  t.size[0] = n0, t.size[1] = n1, t.size[2] = n2, t.size[3] = 1;
  t.stride[3] = 0;
  t.stride[2] = 1;
  t.stride[1] = n2;
  t.stride[0] = (long long)n1 * n2;
  if (n2 == 1) { /* rank 2 [n0, n1] */
    t.stride[2] = 0;
    t.stride[1] = 1;
    t.stride[0] = n1;
  }
}

/* Ids of one row of n positions in a layout. */
static void fill_ids(std::vector<int> &v, int n, int lay) {
  v.resize(n);
  int id = 0;
  for (int e = 0; e < n; e++) {
    switch (lay) {
    case 0: if (e > 0 && rng() % 40 == 0) id++; v[e] = id; break; /* sorted */
    case 1: v[e] = (int)(rng() % 3); break;                        /* unsorted */
    case 2: v[e] = 0; break;                                       /* one document */
    default: v[e] = e / 256; break;                                /* runs of 256 */
    }
  }
}

static int failures = 0;
static long long decided = 0, tiles = 0;

#define CHECK(cond, ...)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      if (failures++ < 10) {                                                             \
        printf("FAIL: ");                                                                \
        printf(__VA_ARGS__);                                                             \
        printf("\n");                                                                    \
      }                                                                                  \
    }                                                                                    \
  } while (0)

/* compiler/emit_sep.c, from libattn.a: what the runtime allocates. */
extern "C" size_t sep_workspace_bytes(const int cell_bytes[4], long long B, long long H,
                                      long long Sq, long long Skv, size_t off[4]);

/* One problem: tensors set in p, reference `want(b, h, i, j)`; cb: the
 * graph's plan (GraphPlan.sep_cells). */
template <typename Want>
static void check_problem(attn_params &p, const int cb[4], Want want, const char *what) {
  /* The workspace exactly as large as the runtime makes it (built with
   * AddressSanitizer, so a read or write past it fails), poisoned so that
   * an entry read before it is written shows; the emitted offsets must be
   * the runtime's. */
  size_t off[4];
  size_t bytes = sep_workspace_bytes(cb, p.B, p.H, p.Sq, p.Skv, off);
  long long dev_off[4];
  SEP_NS::attn_sep_offsets(p, dev_off);
  for (int r = 0; r < 4; r++)
    CHECK((size_t)dev_off[r] == off[r], "%s: region %d at %lld in the kernel, %zu in the runtime",
          what, r, dev_off[r], off[r]);
  std::vector<unsigned char> ws(bytes ? bytes : 16, 0xa5);
  p.mask_ranges = ws.data();
  bool per_h_prep = cb[1] || cb[3];
  blockDim = {1, 1, 1};
  threadIdx = {0, 0, 0};
  for (int b = 0; b < p.B; b++)
    for (int h = 0; h < (per_h_prep ? p.H : 1); h++)
      for (int x = 0; x < 2; x++) {
        blockIdx = {(unsigned)x, (unsigned)h, (unsigned)b};
        SEP_NS::attn_sep_prep(p);
      }
  for (int b = 0; b < p.B; b++)
    for (int h = 0; h < p.H; h++) {
      std::vector<char> keep((size_t)p.Sq * p.Skv);
      for (int i = 0; i < p.Sq; i++)
        for (int j = 0; j < p.Skv; j++) {
          bool w = want(b, h, i, j);
          keep[(size_t)i * p.Skv + j] = w;
          CHECK(SEP_NS::attn_keep(b, h, i, j, p) == w, "%s: attn_keep(%d, %d, %d, %d) != %d", what,
                b, h, i, j, (int)w);
        }
      auto tile = [&](int i0, int i1, int j0, int j1) {
        int kept = 0;
        for (int i = i0; i <= i1; i++)
          for (int j = j0; j <= j1; j++) kept += keep[(size_t)i * p.Skv + j];
        int all = (i1 - i0 + 1) * (j1 - j0 + 1);
        int cls = SEP_NS::attn_tile_class(b, h, i0, i1, j0, j1, p);
        tiles++;
        decided += cls != 1;
        CHECK(cls != 0 || kept == 0, "%s: tile [%d,%d]x[%d,%d] class 0 but %d kept", what, i0, i1,
              j0, j1, kept);
        CHECK(cls != 2 || kept == all, "%s: tile [%d,%d]x[%d,%d] class 2 but %d of %d kept", what,
              i0, i1, j0, j1, kept, all);
      };
      static const int bms[] = {16, 64, 128}, bns[] = {16, 64, 80, 128};
      for (int bm : bms)
        for (int bn : bns)
          for (int i0 = 0; i0 < p.Sq; i0 += bm)
            for (int j0 = 0; j0 < p.Skv; j0 += bn)
              tile(i0, min(i0 + bm, p.Sq) - 1, j0, min(j0 + bn, p.Skv) - 1);
      for (int r = 0; r < 300; r++) {
        int i0 = (int)(rng() % p.Sq), j0 = (int)(rng() % p.Skv);
        tile(i0, i0 + (int)(rng() % (p.Sq - i0)), j0, j0 + (int)(rng() % (p.Skv - j0)));
      }
    }
}

/* Cell bytes of the test graphs: i32 or f32 sides, over b (i and j) or,
 * for posf's i side, over (b, h). */
static const int cb_b[4] = {8, 0, 8, 0}, cb_h[4] = {0, 8, 8, 0};

int main() {
  static const int shapes[][4] = {{2, 3, 300, 300}, {1, 2, 77, 513}, {2, 1, 520, 130},
                                  {1, 1, 1, 1},     {1, 2, 1024, 1024}, {1, 1, 16, 17}};
  for (auto &sh : shapes)
    for (int lay = 0; lay < 4; lay++) {
      attn_params p;
      memset(&p, 0, sizeof p);
      p.B = sh[0], p.H = p.Hk = sh[1], p.Sq = sh[2], p.Skv = sh[3];
      char what[96];
      snprintf(what, sizeof what, "B=%d H=%d Sq=%d Skv=%d layout %d", p.B, p.H, p.Sq, p.Skv, lay);
#if SEP_CASE == 1 /* examples/document.attn: doc[b, i] == doc[b, j] && j <= i */
      if (p.Sq != p.Skv) continue;
      std::vector<int> doc, row;
      for (int b = 0; b < p.B; b++) {
        fill_ids(row, p.Sq, lay);
        doc.insert(doc.end(), row.begin(), row.end());
      }
      set_tensor(p, 3, doc.data(), p.B, p.Sq, 1);
      check_problem(p, cb_b, [&](int b, int, int i, int j) {
        return doc[(size_t)b * p.Sq + i] == doc[(size_t)b * p.Sq + j] && j <= i;
      }, what);
#elif SEP_CASE == 2 /* dk[b, j] == dq[b, i], Sq != Skv */
      std::vector<int> dq, dk, row;
      for (int b = 0; b < p.B; b++) {
        fill_ids(row, p.Sq, lay);
        dq.insert(dq.end(), row.begin(), row.end());
        fill_ids(row, p.Skv, lay);
        dk.insert(dk.end(), row.begin(), row.end());
      }
      set_tensor(p, 3, dq.data(), p.B, p.Sq, 1);
      set_tensor(p, 4, dk.data(), p.B, p.Skv, 1);
      check_problem(p, cb_b, [&](int b, int, int i, int j) {
        return dk[(size_t)b * p.Skv + j] == dq[(size_t)b * p.Sq + i];
      }, what);
#elif SEP_CASE == 3 /* pk[b, j] <= pq[b, h, i] + 1.0 && i >= 3, f32 with NaN */
      std::vector<float> pq((size_t)p.B * p.H * p.Sq), pk((size_t)p.B * p.Skv);
      for (size_t e = 0; e < pq.size(); e++)
        pq[e] = rng() % 50 == 0 ? NAN : (float)((e % p.Sq) / 37) + (lay == 1 ? (float)(rng() % 5) : 0.5f);
      for (size_t e = 0; e < pk.size(); e++)
        pk[e] = rng() % 50 == 0 ? NAN : (float)((e % p.Skv) / 29) + (lay == 1 ? (float)(rng() % 5) : 0.f);
      set_tensor(p, 3, pq.data(), p.B, p.H, p.Sq);
      set_tensor(p, 4, pk.data(), p.B, p.Skv, 1);
      check_problem(p, cb_h, [&](int b, int h, int i, int j) {
        return pk[(size_t)b * p.Skv + j] <= pq[((size_t)b * p.H + h) * p.Sq + i] + 1.0f && i >= 3;
      }, what);
#elif SEP_CASE == 4 /* examples/chunked.attn: i / chunk == j / chunk && j <= i */
      if (p.Sq != p.Skv) continue;
      static const int chunks[] = {512, 16, 100, 1};
      p.s[1].i = chunks[lay];
      int chunk = chunks[lay];
      check_problem(p, cb_b, [&](int, int, int i, int j) {
        return i / chunk == j / chunk && j <= i;
      }, what);
#endif
    }
  printf("%s case %d: %lld tiles, %lld decided without a per-element test, %d failures\n",
         failures ? "FAIL" : "PASS", SEP_CASE, tiles, decided, failures);
  return failures ? 1 : 0;
}
