// f2fp_rate.cu: how fast an SM widens FP8 (e4m3) into f16, the work of fwd_sm90's converters and
// of the decode kernel's conversion pass (bench/NOTES-sm90.md, session 30). Prints, per SM and
// clock, the 16-bit values produced by:
//   cvt     cvt.rn.f16x2.e4m3x2 (F2FP.F16.E4M3.UNPACK_B), register to register
//   int     an integer widening: a byte's 7 low bits into f16's exponent and mantissa, its sign
//           into bit 15 (the e4m3 value times 2^-8, exact, subnormals too; checked against cvt
//           for every byte before timing)
//   smem    what a converter thread does per 16-byte chunk: ld.shared.v4, eight cvt,
//           two st.shared.v4, at 3 warps a CTA (fwd_sm90's converters), 4 and 12; two chunks
//           in flight a thread (fwd90_convert), four, and two with the next two loaded first
// and the smem loop with the integer widening. One CTA an SM, every SM; clock64 around
// each loop. Build: nvcc -O3 -arch=sm_90a -o f2fp_rate tools/f2fp_rate.cu (the device machine
// needs only the driver). No GPU here: run it there.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cuda_fp16.h>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));    \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

__device__ __forceinline__ unsigned cvt_pair(unsigned short x) {
  unsigned y;
  asm volatile("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(y) : "h"(x));
  return y;
}
// Four e4m3 bytes into two f16x2 words (bytes 0, 1 in lo; 2, 3 in hi) by cvt.
__device__ __forceinline__ void widen_cvt(unsigned x, unsigned &lo, unsigned &hi) {
  lo = cvt_pair((unsigned short)(x & 0xffffu));
  hi = cvt_pair((unsigned short)(x >> 16));
}
// The same values times 2^-8 by integer work: t's 16-bit lanes hold a byte in their top byte
// (s eeee mmm, then 8 zeros); t >> 1 puts e and m in f16's places and s at bit 14, and adding
// that bit to itself moves it to bit 15 (no carry leaves a lane: bit 15 of t >> 1 is 0).
__device__ __forceinline__ unsigned widen_int_half(unsigned t) {
  const unsigned a = t >> 1;
  return a + (a & 0x40004000u);
}
__device__ __forceinline__ void widen_int(unsigned x, unsigned &lo, unsigned &hi) {
  lo = widen_int_half(__byte_perm(x, 0u, 0x1404u));
  hi = widen_int_half(__byte_perm(x, 0u, 0x3424u));
}

// Every byte both ways: out[b] = {cvt's f16 bits, int's f16 bits} of byte b (in position 0).
__global__ void check_bytes(unsigned *out) {
  const unsigned b = threadIdx.x;
  unsigned lo, hi, ilo, ihi;
  widen_cvt(b, lo, hi);
  widen_int(b, ilo, ihi);
  out[2 * b] = lo & 0xffffu;
  out[2 * b + 1] = ilo & 0xffffu;
}

// Register to register: 8 independent chains a thread, N rounds.
template <bool INT>
__global__ void reg_loop(unsigned seed, int n, unsigned *sink, long long *cycles) {
  unsigned x[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) x[k] = seed * (threadIdx.x + 1) * (2 * k + 1);
  __syncthreads();
  const long long t0 = clock64();
  for (int i = 0; i < n; ++i) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      unsigned lo, hi;
      if (INT)
        widen_int(x[k], lo, hi);
      else
        widen_cvt(x[k], lo, hi);
      x[k] = lo ^ hi; // (the next round's input depends on this one's output)
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  unsigned acc = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) acc ^= x[k];
  if (acc == 0x12345678u) sink[0] = acc;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

// The converters' loop: 16-byte chunks from an 8-bit tile to a 16-bit one in shared memory,
// rows of 128 bytes (8-bit) and 2 x 128 (16-bit), the 128-byte swizzle both sides. INFLIGHT
// chunks a thread are loaded before any is converted (fwd90_convert: 2); PIPE loads the next
// INFLIGHT chunks before converting the current ones (registers for twice as many).
template <bool INT, int INFLIGHT, bool PIPE>
__global__ void smem_loop(int n, unsigned *sink, long long *cycles) {
  extern __shared__ __align__(1024) unsigned char sm[];
  const unsigned base = (unsigned)__cvta_generic_to_shared(sm);
  const unsigned s8 = base, s16 = base + 16384; // 128 rows x 128 B; 128 rows x 256 B
  for (int i = threadIdx.x; i < 16384 / 4; i += blockDim.x)
    reinterpret_cast<unsigned *>(sm)[i] = 0x3c3c3c3cu * (unsigned)(i + 1);
  __syncthreads();
  const int t = threadIdx.x, nt = blockDim.x;
  auto load = [&](int c, unsigned (&x)[4]) {
    const int r = c >> 3, k = c & 7;
    if (c < 1024)
      asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
                   : "r"(s8 + r * 128 + ((k ^ (r & 7)) << 4)));
  };
  auto put = [&](const unsigned (&x)[4], int c) {
    if (c >= 1024) return;
    const int r = c >> 3, k = c & 7;
    unsigned y[8];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      if (INT)
        widen_int(x[w], y[2 * w], y[2 * w + 1]);
      else
        widen_cvt(x[w], y[2 * w], y[2 * w + 1]);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const unsigned at = s16 + (k >> 2) * 16384 + r * 128 + (((2 * (k & 3) + h) ^ (r & 7)) << 4);
      asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(at), "r"(y[4 * h]),
                   "r"(y[4 * h + 1]), "r"(y[4 * h + 2]), "r"(y[4 * h + 3])
                   : "memory");
    }
  };
  const long long t0 = clock64();
  for (int it = 0; it < n; ++it) {
    unsigned x[INFLIGHT][4], nx[INFLIGHT][4];
    if (PIPE) {
#pragma unroll
      for (int j = 0; j < INFLIGHT; ++j) load(t + j * nt, x[j]);
    }
    for (int c = t; c < 1024; c += INFLIGHT * nt) {
      if (PIPE) {
#pragma unroll
        for (int j = 0; j < INFLIGHT; ++j) load(c + (INFLIGHT + j) * nt, nx[j]);
      } else {
#pragma unroll
        for (int j = 0; j < INFLIGHT; ++j) load(c + j * nt, x[j]);
      }
#pragma unroll
      for (int j = 0; j < INFLIGHT; ++j) put(x[j], c + j * nt);
      if (PIPE) {
#pragma unroll
        for (int j = 0; j < INFLIGHT; ++j)
#pragma unroll
          for (int w = 0; w < 4; ++w) x[j][w] = nx[j][w];
      }
    }
  }
  __syncthreads();
  const long long t1 = clock64();
  if (threadIdx.x == 0) {
    cycles[blockIdx.x] = t1 - t0;
    if (sm[16384 + 5] == 0x77) sink[0] = 1;
  }
}

template <bool INT, int INFLIGHT, bool PIPE>
static void time_smem(int sms, int threads, unsigned *sink, long long *d_cyc) {
  const int smem = 16384 + 32768, m = 512;
  CHECK(cudaFuncSetAttribute(smem_loop<INT, INFLIGHT, PIPE>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  smem_loop<INT, INFLIGHT, PIPE><<<sms, threads, smem>>>(m, sink, d_cyc);
  CHECK(cudaDeviceSynchronize());
  long long cyc[1024];
  CHECK(cudaMemcpy(cyc, d_cyc, sms * sizeof(long long), cudaMemcpyDeviceToHost));
  long long c = 0;
  for (int i = 0; i < sms; ++i) c = cyc[i] > c ? cyc[i] : c;
  printf("smem tile %-4s %d in flight%s %4d threads/SM: %6.1f f16 values / SM / clock (%.0f clocks "
         "a 16 KB tile)\n",
         INT ? "int" : "cvt", INFLIGHT, PIPE ? " +next" : "      ", threads,
         16384.0 * m / (double)c, (double)c / m);
}

static long long max_of(const long long *v, int n) {
  long long m = 0;
  for (int i = 0; i < n; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

int main() {
  int dev = 0, sms = 0;
  CHECK(cudaSetDevice(dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  printf("f2fp_rate: %s, %d SMs\n", prop.name, sms);
  unsigned *d_out, *sink;
  long long *d_cyc;
  CHECK(cudaMalloc(&d_out, 512 * sizeof(unsigned)));
  CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  CHECK(cudaMalloc(&d_cyc, sms * sizeof(long long)));
  // The integer widening against cvt, every byte: int's value is cvt's times 2^-8 (NaN bytes
  // 0x7f and 0xff excepted: int makes them +-480 x 2^-8).
  check_bytes<<<1, 256>>>(d_out);
  unsigned out[512];
  CHECK(cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost));
  int bad = 0;
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const float c = __half2float(__ushort_as_half((unsigned short)out[2 * b]));
    const float i = __half2float(__ushort_as_half((unsigned short)out[2 * b + 1]));
    if (c != i * 256.0f) {
      if (bad++ < 8) printf("  byte 0x%02x: cvt %g, int %g x 256\n", b, c, i * 256.0f);
    }
  }
  printf("integer widening against cvt, 254 bytes: %s\n", bad ? "MISMATCH" : "equal (x 2^-8)");
  long long cyc[1024];
  const int n = 4096;
  for (int threads : {96, 384, 1024}) {
    for (int mode = 0; mode < 2; ++mode) {
      if (mode)
        reg_loop<true><<<sms, threads>>>(7u, n, sink, d_cyc);
      else
        reg_loop<false><<<sms, threads>>>(7u, n, sink, d_cyc);
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpy(cyc, d_cyc, sms * sizeof(long long), cudaMemcpyDeviceToHost));
      const double values = 4.0 * 8 * n * threads; // 16-bit values a CTA
      printf("registers %-4s %4d threads/SM: %6.1f f16 values / SM / clock\n", mode ? "int" : "cvt",
             threads, values / (double)max_of(cyc, sms));
    }
  }
  for (int threads : {96, 128, 384}) {
    time_smem<false, 2, false>(sms, threads, sink, d_cyc);
    time_smem<false, 4, false>(sms, threads, sink, d_cyc);
    time_smem<false, 2, true>(sms, threads, sink, d_cyc);
    time_smem<true, 2, false>(sms, threads, sink, d_cyc);
  }
  return 0;
}
