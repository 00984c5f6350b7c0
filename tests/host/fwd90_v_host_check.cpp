// fwd90_v_host_check.cpp: fwd_sm90's FP8 V converters (templates/fwd_sm90.cuh:
// fwd90_convert_v widening V to f16 (with -DKV8=1, an FP8 KV cache under a
// 16-bit q: K's and V's widening to the GEMMs' type, f16, or with -DBF16=1
// bf16, where a bf16 q's P is scaled but not rounded), fwd90_transpose_v transposing it into
// K-major V^T with the keys in the accumulators' order), compiled for the host
// from the template's own text (fwd90_v_host_check.sh extracts it), run by all
// 96 converter threads over a simulated shared memory, and checked element by
// element against the layouts the TMA and the wgmma descriptors define:
//   V8 (as TMA lands it): key r, column c at block c/128, r*128 + ((c%128/16
//     ^ r%8) * 16) + c%16;
//   V16: at block c/64, r*128 + (((c%64)/8 ^ r%8) * 16) + (c%8)*2, f16 bits;
//   V^T: row d, key byte kb = 16h + 4t + 2x + y for key 16h + 8x + 2t + y
//     (h, x, y in {0, 1}, t < 4, within each 32 keys) at d*BN + chunk(kb/16,
//     d)*16 + kb%16, chunk c ^ d%8 (BN 128, 128-byte swizzle) or c ^ (d/2)%4
//     (BN 64, 64-byte swizzle).
// Built once per (BN, DV, e4m3 or e5m2, KV8, BF16) with -D.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda_bits.h"
#include "f16_bits.h"

#ifndef ATTN_BN
#error "-DATTN_BN=64|128 -DDV=... -DKV_E4M3=0|1"
#endif
#define __device__
#define __forceinline__ inline
static std::vector<unsigned char> smem(1 << 20);
// Shared-memory traffic: each access of the converter thread running now
// (cur_thread), numbered per thread, so a warp's n-th accesses form one
// instruction; wavefronts() counts what the banks serve for them.
struct Access {
  int thread, seq, bytes;
  unsigned addr;
  bool store;
};
static std::vector<Access> accesses;
static int cur_thread, cur_seq;
static void note(unsigned a, int bytes, bool store) {
  accesses.push_back({cur_thread, cur_seq++, bytes, a, store});
}
static unsigned attn_lds32(unsigned a) {
  note(a, 4, false);
  unsigned x;
  std::memcpy(&x, &smem[a], 4);
  return x;
}
static void attn_sts32(unsigned a, unsigned x) {
  note(a, 4, true);
  std::memcpy(&smem[a], &x, 4);
}
static void attn_lds64(unsigned a, unsigned &lo, unsigned &hi) {
  note(a, 8, false);
  if (a % 8) std::printf("FAIL: misaligned 8-byte load at %u\n"), std::exit(1);
  std::memcpy(&lo, &smem[a], 4);
  std::memcpy(&hi, &smem[a + 4], 4);
}
static void attn_sts64(unsigned a, unsigned lo, unsigned hi) {
  note(a, 8, true);
  if (a % 8) std::printf("FAIL: misaligned 8-byte store at %u\n"), std::exit(1);
  std::memcpy(&smem[a], &lo, 4);
  std::memcpy(&smem[a + 4], &hi, 4);
}
static void attn_lds128(unsigned a, unsigned (&x)[4]) {
  note(a, 16, false);
  std::memcpy(x, &smem[a], 16);
}
static void attn_sts128(unsigned a, unsigned p, unsigned q, unsigned r, unsigned s) {
  note(a, 16, true);
  const unsigned x[4] = {p, q, r, s};
  std::memcpy(&smem[a], x, 16);
}
// e4m3 -> f16 bits (exact), as cvt.rn.f16x2.e4m3x2 does.
static unsigned short e4m3_f16(unsigned char b) {
  const unsigned e = (b >> 3) & 15, m = b & 7, s = (b & 0x80) << 8;
  if (e == 15 && m == 7) return (unsigned short)(s | 0x7fff);
  if (e == 0) { // subnormal e4m3, m * 2^-9: a normal f16
    if (m == 0) return (unsigned short)s;
    int ex = -9, mm = (int)m; // value mm * 2^ex
    while (mm < 8) { mm <<= 1; ex--; }
    // mm in [8, 16): value = (mm/8) * 2^(ex+3)
    return (unsigned short)(s | ((ex + 3 + 15) << 10) | ((mm - 8) << 7));
  }
  return (unsigned short)(s | ((e - 7 + 15) << 10) | (m << 7));
}
static void attn_e4m3x4_to_f16(unsigned x, unsigned &lo, unsigned &hi) {
  lo = e4m3_f16(x & 0xff) | ((unsigned)e4m3_f16((x >> 8) & 0xff) << 16);
  hi = e4m3_f16((x >> 16) & 0xff) | ((unsigned)e4m3_f16(x >> 24) << 16);
}
#ifndef KV8
#define KV8 0
#endif
#ifndef BF16
#define BF16 0
#endif
// An f16's bits as bf16 bits: the value in f32, whose top half is its bf16
// (exact for FP8 values: at most 4 significant bits, f16's range within bf16's).
static unsigned short f16_bf16(unsigned short h) {
  return (unsigned short)((__float_as_uint((float)f16_value(h & 0x7fffu)) >> 16) | (h & 0x8000u));
}
static unsigned short fp8_16(unsigned char b) {
  const unsigned short h = KV_E4M3 ? e4m3_f16(b) : (unsigned short)(b << 8);
  return KV8 && BF16 ? f16_bf16(h) : h;
}
// kv8's converter (ptx.cuh attn_fp8x4_cvt, GPU-tested in decode.cuh): its
// values, so this checks where the converter puts them.
template <bool E4M3, bool BF>
static void attn_fp8x4_cvt(unsigned x, unsigned &lo, unsigned &hi) {
  static_assert(E4M3 == (KV_E4M3 != 0) && BF == (BF16 != 0), "the build's types");
  lo = fp8_16(x & 0xff) | ((unsigned)fp8_16((x >> 8) & 0xff) << 16);
  hi = fp8_16((x >> 16) & 0xff) | ((unsigned)fp8_16(x >> 24) << 16);
}
enum : int { attn_kv_fp8 = KV_E4M3 ? 1 : 2 };
constexpr int fwd90_kv_fp8 = attn_kv_fp8; // (fwd_sm90.cuh's, outside the kv_copy variant)
constexpr bool fwd90_kv8 = KV8 != 0;
constexpr bool fwd90_in_bf16 = BF16 != 0;
constexpr int fwd90_bn = ATTN_BN;
constexpr int fwd90_dv = DV;
#include V_TEXT

// Shared-memory instructions and wavefronts of the accesses noted since
// `from`: a warp's n-th accesses are one instruction; 4-, 8- and 16-byte
// accesses are served per 32, 16 and 8 lanes, each group taking as many
// wavefronts as the most distinct words any bank holds among its lanes.
static void wavefronts(size_t from, const char *what) {
  long insts = 0, waves = 0, store_insts = 0, store_waves = 0;
  for (int warp = 0; warp < 3; ++warp)
    for (int seq = 0;; ++seq) {
      std::vector<const Access *> lanes;
      for (size_t k = from; k < accesses.size(); ++k)
        if (accesses[k].thread / 32 == warp && accesses[k].seq == seq) lanes.push_back(&accesses[k]);
      if (lanes.empty()) break;
      insts++;
      store_insts += lanes[0]->store;
      const int group = 128 / lanes[0]->bytes;
      for (int g0 = 0; g0 < 32; g0 += group) {
        std::vector<std::vector<unsigned>> bank(32);
        for (const Access *x : lanes) {
          if (x->thread % 32 < g0 || x->thread % 32 >= g0 + group) continue;
          for (int w = 0; w < x->bytes / 4; ++w) {
            const unsigned word = x->addr / 4 + w;
            auto &b = bank[word % 32];
            if (std::find(b.begin(), b.end(), word) == b.end()) b.push_back(word);
          }
        }
        size_t most = 0;
        for (auto &b : bank) most = std::max(most, b.size());
        waves += (long)most;
        if (lanes[0]->store) store_waves += (long)most;
      }
    }
  std::printf("  %s: %ld shared-memory instructions in the 3 warps, %ld wavefronts (loads %ld "
              "taking %ld, stores %ld taking %ld)\n",
              what, insts, waves, insts - store_insts, waves - store_waves, store_insts,
              store_waves);
}

static int failures;
static void expect(bool ok, const char *what, int a, int b, unsigned got, unsigned want) {
  if (!ok && failures++ < 8)
    std::printf("FAIL: BN %d DV %d %s (%d, %d): %#x, want %#x\n", ATTN_BN, DV, what, a, b, got,
                want);
}

int main() {
  constexpr int dv8 = (DV + 127) / 128 * 128;
  const unsigned v8 = 0, v16 = 1 << 18;
  unsigned seed = 12345;
  std::vector<unsigned char> V(fwd90_bn * dv8);
  for (auto &b : V) {
    seed = seed * 1103515245u + 12345u;
    b = (unsigned char)(seed >> 16);
    if (KV_E4M3 && (b & 0x7f) == 0x7f) b ^= 1; // no NaN: its f16 form has many spellings
  }
  auto v8_at = [&](int r, int c) {
    return v8 + (c / 128) * fwd90_bn * 128 + r * 128 + (((c % 128 / 16) ^ (r % 8)) * 16) + c % 16;
  };
  for (int r = 0; r < fwd90_bn; ++r)
    for (int c = 0; c < dv8; ++c) smem[v8_at(r, c)] = V[r * dv8 + c];

  for (int ct = 0; ct < 96; ++ct) fwd90_convert_v(v8, v16, ct);
  for (int r = 0; r < fwd90_bn; ++r)
    for (int c = 0; c < fwd90_dv; ++c) {
      const unsigned a = v16 + (c / 64) * fwd90_bn * 128 + r * 128 + ((((c % 64) / 8) ^ (r % 8)) * 16) + (c % 8) * 2;
      unsigned short got;
      std::memcpy(&got, &smem[a], 2);
      const unsigned char b = V[r * dv8 + c];
      const unsigned short want = fp8_16(b);
      expect(got == want, "widened", r, c, got, want);
    }

  if (KV8) {
    std::printf("%s: fwd_sm90 FP8 KV cache widened to %s, BN %d, D %d, %s\n",
                failures ? "FAIL" : "PASS", BF16 ? "bf16" : "f16", ATTN_BN, DV,
                KV_E4M3 ? "e4m3" : "e5m2");
    return failures != 0;
  }
  if (ATTN_BN != 64 && ATTN_BN != 128) { // the transpose serves key tiles of 64 and 128 only
    std::printf("%s: fwd_sm90 FP8 V widened, BN %d, DV %d, %s\n", failures ? "FAIL" : "PASS",
                ATTN_BN, DV, KV_E4M3 ? "e4m3" : "e5m2");
    return failures != 0;
  }
  std::fill(smem.begin() + v16, smem.begin() + v16 + (1 << 18), 0xee);
  const size_t first = accesses.size();
  for (int ct = 0; ct < 96; ++ct) {
    cur_thread = ct, cur_seq = 0;
    fwd90_transpose_v(v8, v16, ct);
  }
  wavefronts(first, "transpose");
  for (int d = 0; d < fwd90_dv; ++d)
    for (int kb = 0; kb < fwd90_bn; ++kb) {
      const int h = (kb % 32) / 16, t = (kb % 16) / 4, x = (kb % 4) / 2, y = kb % 2;
      const int key = kb / 32 * 32 + 16 * h + 8 * x + 2 * t + y;
      const unsigned c = fwd90_vt_chunk(kb / 16, d);
      const unsigned char got = smem[v16 + d * fwd90_bn + c * 16 + kb % 16];
      expect(got == V[key * dv8 + d], "transposed", d, kb, got, V[key * dv8 + d]);
    }
  std::printf("%s: fwd_sm90 FP8 V, BN %d, DV %d, %s\n", failures ? "FAIL" : "PASS", ATTN_BN, DV,
              KV_E4M3 ? "e4m3" : "e5m2");
  return failures != 0;
}
