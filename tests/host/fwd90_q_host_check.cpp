// fwd90_q_host_check.cpp: fwd_sm90's Q rewrite for an FP8 KV cache under a bf16 q
// (templates/fwd_sm90.cuh: fwd90_q_to_f16, over ptx.cuh's attn_rows_bf16_to_f16, which
// fwd_sm80 shares), compiled for the host from the templates' own text (fwd90_q_host_check.sh extracts it) and run by 32 threads as one warp, its shuffles
// through a barrier. A Q tile as TMA lands it (blocks of [BM rows][64 bf16], the 128-byte
// swizzle) holds rows of every kind: ordinary, huge (2^100), tiny (2^-100), zero, bf16
// subnormals, rows whose elements span more than f16's range, an infinity or a NaN among
// finite values. Checked for the warp's 16 rows: each element is f16(q 2^e) for the row's e
// (round to nearest even), exactly q 2^e wherever |q| is within 2^29 of the row's largest
// finite |q| (unless the clamp [-112, 126] binds), the largest then in [2^15, 2^16), infinities and
// NaNs kept; every lane's qinv is 2^-e of its rows g and g + 8; rows of other warps untouched.
// Built once per head-dim tile (-DDQK=64|128|192|256) and query tile (-DBM=128|192).
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "cuda_bits.h"
#include "f16_bits.h"

#ifndef DQK
#error "-DDQK=64|128|192|256 -DBM=128|192"
#endif
#define __device__
#define __forceinline__ inline
using std::max;
using std::min;
constexpr int fwd90_dqk = DQK;
constexpr int fwd90_bm = BM;

static std::vector<unsigned char> smem(1 << 20);
static void attn_lds128(unsigned a, unsigned (&x)[4]) { std::memcpy(x, &smem[a], 16); }
static void attn_sts128(unsigned a, unsigned p, unsigned q, unsigned r, unsigned s) {
  const unsigned x[4] = {p, q, r, s};
  std::memcpy(&smem[a], x, 16);
}

// One warp: thread_local lane, shuffles through a slot per lane and a barrier.
static thread_local int my_lane;
static std::barrier<> *warp_bar;
static unsigned slot[32];
template <class T> static T __shfl_sync(unsigned, T v, int src) {
  static_assert(sizeof(T) == 4, "32-bit shuffles");
  std::memcpy(&slot[my_lane], &v, 4);
  warp_bar->arrive_and_wait();
  T r;
  std::memcpy(&r, &slot[src & 31], 4);
  warp_bar->arrive_and_wait();
  return r;
}
template <class T> static T __shfl_xor_sync(unsigned m, T v, int x) {
  return __shfl_sync(m, v, my_lane ^ x);
}

template <bool BF16> static unsigned attn_pack2(float lo, float hi) {
  static_assert(!BF16, "the Q rewrite packs f16");
  return f16_rn(lo) | ((unsigned)f16_rn(hi) << 16);
}

#include Q_TEXT

static float bf16_value(unsigned short b) { return __uint_as_float((unsigned)b << 16); }
static unsigned short bf16_of(double v) { // v must be a bf16 value (built that way below)
  return (unsigned short)(__float_as_uint((float)v) >> 16);
}
// Element (r, c) of the Q tile: block c / 64, row r, chunk (c % 64 / 8) ^ (r % 8).
static unsigned q_addr(int r, int c) {
  return (unsigned)((c / 64) * BM * 128 + r * 128 + ((((c % 64) / 8) ^ (r % 8)) << 4) + (c % 8) * 2);
}

int main() {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> gauss(0.0, 1.0);
  int failures = 0;
  auto fail = [&](const char *what, int r, int c, double got, double want) {
    if (++failures <= 10)
      std::printf("FAIL BM %d D %d: %s at row %d col %d: %.9g, want %.9g\n", BM, DQK, what, r, c,
                  got, want);
  };
  const int row0 = BM - 32 + 0; // the warp checked: rows row0.. (warpgroup BM/64 - 1's warp 2)
  for (int trial = 0; trial < 40; trial++) {
    std::vector<unsigned short> q((size_t)BM * DQK);
    for (int r = 0; r < BM; r++) {
      const int kind = (r + trial) % 10;
      for (int c = 0; c < DQK; c++) {
        double v = gauss(rng);
        switch (kind) {
        case 1: v = std::ldexp(v, 100); break;             // huge
        case 2: v = std::ldexp(v, -100); break;            // tiny
        case 3: v = 0; break;                              // zero
        case 4: v = std::ldexp(v, -133); break;            // bf16 subnormals
        case 5: v = std::ldexp(v, (int)(rng() % 60) - 30); break; // spans past f16's range
        case 6: v = c == 4 ? INFINITY : c == 7 ? -INFINITY : v; break; // infinities among finite values
        case 7: v = c == 9 || c == 2 ? NAN : std::ldexp(v, 20); break;
        case 8: v = std::ldexp(v, 126); break;             // up to bf16's largest binade
        default: break;
        }
        q[(size_t)r * DQK + c] = std::isnan(v) ? 0x7fc0 : bf16_of((double)(float)v);
      }
    }
    // (float)v rounded to f32; the top half is then a bf16 by truncation: re-read the value
    std::fill(smem.begin(), smem.end(), 0xa5);
    for (int r = 0; r < BM; r++)
      for (int c = 0; c < DQK; c++) std::memcpy(&smem[q_addr(r, c)], &q[(size_t)r * DQK + c], 2);
    const std::vector<unsigned char> before(smem);

    float qinv[32][2];
    std::barrier<> bar(32);
    warp_bar = &bar;
    std::vector<std::thread> lanes;
    for (int l = 0; l < 32; l++)
      lanes.emplace_back([&, l] {
        my_lane = l;
        fwd90_q_to_f16((unsigned)row0 * 128, l, qinv[l]);
      });
    for (auto &t : lanes) t.join();

    for (int r = 0; r < BM; r++) {
      const bool mine = r >= row0 && r < row0 + 16;
      if (!mine) {
        for (int c = 0; c < DQK; c++)
          if (std::memcmp(&smem[q_addr(r, c)], &before[q_addr(r, c)], 2))
            fail("another warp's row written", r, c, 0, 0);
        continue;
      }
      // The row's e, from its largest finite |q|.
      int top = 0;
      double row_max = 0;
      for (int c = 0; c < DQK; c++) {
        const unsigned short b = q[(size_t)r * DQK + c];
        const int ex = (b >> 7) & 0xff;
        if (ex != 0xff) {
          top = std::max(top, ex);
          row_max = std::max(row_max, std::fabs((double)bf16_value(b)));
        }
      }
      const int e = std::min(126, std::max(-112, 142 - top));
      for (int c = 0; c < DQK; c++) {
        const unsigned short b = q[(size_t)r * DQK + c];
        unsigned short h;
        std::memcpy(&h, &smem[q_addr(r, c)], 2);
        const double x = bf16_value(b), got = f16_value(h);
        const unsigned short want = f16_rn((float)std::ldexp(x, e));
        if (h != want) fail("not f16(q 2^e)", r, c, got, f16_value(want));
        if (e < 126 && std::isfinite(x) && std::fabs(x) >= std::ldexp(row_max, -29) &&
            got != std::ldexp(x, e))
          fail("not exact", r, c, got, std::ldexp(x, e));
        if (std::isinf(x) && got != std::ldexp(x, 1)) fail("infinity lost", r, c, got, x);
        if (std::isnan(x) && !std::isnan(got)) fail("NaN lost", r, c, got, x);
      }
      const double scaled = std::ldexp(row_max, e);
      if (row_max > 0 && e > -112 && e < 126 && !(scaled >= 32768.0 && scaled < 65536.0))
        fail("row's largest not in [2^15, 2^16)", r, -1, scaled, 32768.0);
      // qinv: lanes of group g = (r - row0) % 8 hold it as their row g (r < row0 + 8) or g + 8.
      const int g = (r - row0) % 8, which = (r - row0) / 8;
      for (int t4 = 0; t4 < 4; t4++)
        if (qinv[4 * g + t4][which] != (float)std::ldexp(1.0, -e))
          fail("qinv", r, 4 * g + t4, qinv[4 * g + t4][which], std::ldexp(1.0, -e));
    }
  }
  std::printf("%s: fwd_sm90 kv8 Q rewrite to f16 by rows, BM %d, D %d (40 tiles)\n",
              failures ? "FAIL" : "PASS", BM, DQK);
  return failures ? 1 : 0;
}
