// widen_kv_host_check.cpp: fwd_sm90's kv_copy widening step (attn_fwd90_widen_kv and
// fwd90_widen_rows, compiled for the host from the template's own text by
// widen_kv_host_check.sh) run over every CTA and thread of its grid on host memory: an FP8
// k and v bound with strides (a batch stride of 0: k broadcast over the batch; rows padded
// past the head dim), widened into dense 16-bit copies [B, Hk, Skv, D]. Checks that every
// element of every row below Skv lands at its place with its value, that nothing past Skv
// or outside the copies is written, and that no read leaves the tensors (AddressSanitizer).
// The conversion itself is a stand-in here (each byte tagged); its values are
// tests/host/fp8_cvt_host_check's.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define __device__
#define __forceinline__ inline
struct uint4 {
  unsigned x, y, z, w;
};
struct dim3_ {
  unsigned x, y, z;
};
static dim3_ threadIdx, blockIdx;
template <class T> static T __ldg(const T *p) { return *p; }
static int min(int a, int b) { return a < b ? a : b; }
struct attn_tensor_arg {
  void *ptr;
  long long size[4], stride[4];
};
struct attn_params {
  int B, H, Hk, Sq, Skv;
  attn_tensor_arg t[8];
};
enum : int { attn_kv_fp8 = 1, attn_in_bf16 = 1 };
constexpr bool fwd90_fp8 = false;
static uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
// Sixteen bytes into eight 16-bit pairs (ptx.cuh's attn_fp8x16_cvt): byte i becomes
// 0x100 | byte (a value no real conversion needs, so a misplaced or skipped chunk shows).
template <bool E4M3, bool BF16>
static void attn_fp8x16_cvt(const unsigned (&x)[4], unsigned (&y)[8]) {
  static_assert(E4M3 && BF16, "the build's types");
  for (int w = 0; w < 4; w++) {
    auto h = [&](int i) { return 0x100u | ((x[w] >> (8 * i)) & 0xffu); };
    y[2 * w] = h(0) | h(1) << 16;
    y[2 * w + 1] = h(2) | h(3) << 16;
  }
}
#define ATTN_D_QK DQK
#define ATTN_D_V DV
#define ATTN_TK 1
#define ATTN_TV 2
#define ATTN_TK16 4
#define ATTN_TV16 5
#define ATTN_WIDEN_ROWS 64
#define ATTN_WIDEN_THREADS 128
#include WIDEN_TEXT

int main() {
  const int B = 2, Hk = 3, rows[] = {1, 63, 64, 65, 200};
  int fail = 0;
  for (int skv : rows) {
    attn_params p{};
    p.B = B;
    p.Hk = Hk;
    p.Skv = skv;
    // k [B, Hk, Skv, DQK] broadcast over B (stride 0), rows padded by 32 bytes; v dense but
    // head-major with a gap between heads.
    const long long k_row = DQK + 32, v_row = DV, v_head = (long long)skv * DV + 48;
    std::vector<unsigned char> k((size_t)Hk * skv * k_row), v((size_t)B * Hk * v_head);
    for (size_t i = 0; i < k.size(); i++) k[i] = (unsigned char)(i * 7 + 3);
    for (size_t i = 0; i < v.size(); i++) v[i] = (unsigned char)(i * 13 + 5);
    p.t[ATTN_TK] = {k.data(), {B, Hk, skv, DQK}, {0, skv * k_row, k_row, 1}};
    p.t[ATTN_TV] = {v.data(), {B, Hk, skv, DV}, {Hk * v_head, v_head, v_row, 1}};
    // the copies, with guard rows past the end (must stay untouched)
    const size_t nk = (size_t)B * Hk * skv * DQK, nv = (size_t)B * Hk * skv * DV;
    std::vector<unsigned short> k16(nk + 64, 0xdead), v16(nv + 64, 0xdead);
    p.t[ATTN_TK16] = {k16.data(), {B, Hk, skv, DQK}, {(long long)Hk * skv * DQK, (long long)skv * DQK, DQK, 1}};
    p.t[ATTN_TV16] = {v16.data(), {B, Hk, skv, DV}, {(long long)Hk * skv * DV, (long long)skv * DV, DV, 1}};
    const int gx = (skv + ATTN_WIDEN_ROWS - 1) / ATTN_WIDEN_ROWS;
    for (int b = 0; b < B; b++)
      for (int h = 0; h < Hk; h++)
        for (int x = 0; x < gx; x++)
          for (int t = 0; t < ATTN_WIDEN_THREADS; t++) {
            blockIdx = {(unsigned)x, (unsigned)h, (unsigned)b};
            threadIdx = {(unsigned)t, 0, 0};
            attn_fwd90_widen_kv(p);
          }
    for (int b = 0; b < B; b++)
      for (int h = 0; h < Hk; h++)
        for (int r = 0; r < skv; r++) {
          for (int d = 0; d < DQK; d++) {
            const unsigned want = 0x100u | k[(size_t)h * skv * k_row + r * k_row + d];
            const unsigned got = k16[(((size_t)b * Hk + h) * skv + r) * DQK + d];
            if (got != want && fail++ < 5)
              printf("FAIL: k16[%d,%d,%d,%d] = 0x%x, want 0x%x (Skv %d)\n", b, h, r, d, got, want, skv);
          }
          for (int d = 0; d < DV; d++) {
            const unsigned want = 0x100u | v[(size_t)b * Hk * v_head + h * v_head + r * v_row + d];
            const unsigned got = v16[(((size_t)b * Hk + h) * skv + r) * DV + d];
            if (got != want && fail++ < 5)
              printf("FAIL: v16[%d,%d,%d,%d] = 0x%x, want 0x%x (Skv %d)\n", b, h, r, d, got, want, skv);
          }
        }
    for (int i = 0; i < 64; i++)
      if ((k16[nk + i] != 0xdead || v16[nv + i] != 0xdead) && fail++ < 5)
        printf("FAIL: a write past the copies (Skv %d)\n", skv);
  }
  if (fail) {
    printf("FAIL: widen_kv, D %d/%d: %d wrong elements\n", DQK, DV, fail);
    return 1;
  }
  printf("PASS: widen_kv places every element, D %d/%d, Skv 1-200, strided and broadcast k\n", DQK, DV);
  return 0;
}
