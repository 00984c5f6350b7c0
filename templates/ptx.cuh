/*
 * ptx.cuh: the inline-PTX wrappers every template shares. Included once
 * per translation unit (after common.cuh, before the graphs), so a
 * wrapper is written and reviewed in one place. No #include: NVRTC
 * compiles this with no headers.
 */

/* A generic pointer into shared memory as a 32-bit shared address. */
[[maybe_unused]] static __device__ __forceinline__ unsigned attn_smem_addr(const void *ptr) {
  unsigned addr;
  asm("{ .reg .u64 a64; cvta.to.shared.u64 a64, %1; cvt.u32.u64 %0, a64; }"
      : "=r"(addr)
      : "l"(ptr));
  return addr;
}

/* 16-byte global->shared copy; src_bytes 0 fills the chunk with zeros. */
[[maybe_unused]] static __device__ __forceinline__ void attn_cp_async16(unsigned dst,
                                                                        const void *src,
                                                                        int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}

/* Byte offset of 16-byte chunk c of row r in a tile whose rows are
 * row_bytes long, chunks XOR-swizzled by (r & 7) so that the eight row
 * addresses of an ldmatrix phase hit distinct banks (rows of a multiple
 * of eight chunks: head dims that are multiples of 64). */
[[maybe_unused]] static __device__ __forceinline__ unsigned attn_swz(int r, int c, int row_bytes) {
  /* Rows that are not whole groups of eight chunks (8-bit staging tiles of
   * 64 or 192 columns, which only row-wise 16-byte copies and the FP8
   * converters touch, never ldmatrix) are not swizzled: the XOR would take
   * chunks 8-11 of a 192-byte row into the next row (found on an H100 in
   * session 28: FP8 tensors with head dims 129-192 on fwd_sm80 and the
   * decode kernel read each other's rows). Every caller's row_bytes is a
   * compile-time constant. */
  if (row_bytes % 128 != 0)
    return (unsigned)(r * row_bytes + (c << 4));
  return (unsigned)(r * row_bytes + ((c ^ (r & 7)) << 4));
}

/* Starts the copy of ROWS rows of ROW_BYTES bytes each (rows row0.. of a
 * tensor whose row stride is row_stride bytes) into a swizzled tile by a
 * CTA of THREADS threads; rows at or beyond row_end, and the bytes of each
 * row past VALID_BYTES (a tensor row narrower than the tile's: a head dim
 * that is not a multiple of 64), are zero-filled so they contribute
 * nothing and nothing past the tensor's row is read. Thread tid copies chunk tid % (ROW_BYTES/16) of
 * every (THREADS / (ROW_BYTES/16))-th row, so its source advances by a
 * fixed step: one 64-bit pointer, not one per copy. */
template <int ROWS, int ROW_BYTES, int THREADS, int VALID_BYTES = ROW_BYTES>
static __device__ __forceinline__ void attn_cp_tile(unsigned dst, const unsigned char *base,
                                                    long long row_stride, int row0, int row_end,
                                                    int tid) {
  constexpr int chunks = ROW_BYTES / 16;
  static_assert(VALID_BYTES % 16 == 0 && VALID_BYTES <= ROW_BYTES, "whole chunks of a row");
  if constexpr (THREADS % chunks != 0 || ROWS % (THREADS / chunks) != 0) {
    /* Rows of 24 chunks (a 192-column tile) do not divide the CTA: each
     * thread takes every THREADS-th chunk of the tile instead. */
    for (int e = tid; e < ROWS * chunks; e += THREADS) {
      const int r = e / chunks, c = e % chunks;
      const bool in = (VALID_BYTES == ROW_BYTES || c * 16 < VALID_BYTES) && row0 + r < row_end;
      const unsigned char *src = base + (long long)(row0 + r) * row_stride + c * 16;
      attn_cp_async16(dst + attn_swz(r, c, ROW_BYTES), in ? src : base, in ? 16 : 0);
    }
  } else {
    constexpr int step = THREADS / chunks; /* rows per pass */
    const int c = tid % chunks, r0 = tid / chunks;
    const bool col_in = VALID_BYTES == ROW_BYTES || c * 16 < VALID_BYTES;
    const unsigned char *src = base + (long long)(row0 + r0) * row_stride + c * 16;
    const long long src_step = (long long)step * row_stride;
#pragma unroll
    for (int k = 0; k < ROWS / step; ++k) {
      const int r = r0 + k * step;
      const bool in = col_in && row0 + r < row_end;
      attn_cp_async16(dst + attn_swz(r, c, ROW_BYTES), in ? src : base, in ? 16 : 0);
      src += src_step;
    }
  }
}

/* attn_cp_tile for rows that are not evenly spaced (a paged KV cache's,
 * gathered page by page): row_ptr(j) gives row j's first byte, or nullptr
 * for a row that reads as zeros (a page id out of range). Each thread
 * finds the rows it copies first, so their lookups are in flight
 * together, then starts the copies. `fallback` is any valid address, for
 * the zero-filled chunks. */
template <int ROWS, int ROW_BYTES, int THREADS, int VALID_BYTES = ROW_BYTES, class RowPtr>
static __device__ __forceinline__ void attn_cp_rows(unsigned dst, RowPtr row_ptr,
                                                    const void *fallback, int row0, int row_end,
                                                    int tid) {
  constexpr int chunks = ROW_BYTES / 16;
  static_assert(VALID_BYTES % 16 == 0 && VALID_BYTES <= ROW_BYTES, "whole chunks of a row");
  if constexpr (THREADS % chunks != 0 || ROWS % (THREADS / chunks) != 0) {
    for (int e = tid; e < ROWS * chunks; e += THREADS) {
      const int r = e / chunks, c = e % chunks;
      const unsigned char *src = row0 + r < row_end ? row_ptr(row0 + r) : nullptr;
      const bool in = src && (VALID_BYTES == ROW_BYTES || c * 16 < VALID_BYTES);
      attn_cp_async16(dst + attn_swz(r, c, ROW_BYTES), in ? src + c * 16 : fallback,
                      in ? 16 : 0);
    }
  } else {
    constexpr int step = THREADS / chunks, per_thread = ROWS / step;
    const int c = tid % chunks, r0 = tid / chunks;
    const bool col_in = VALID_BYTES == ROW_BYTES || c * 16 < VALID_BYTES;
    const unsigned char *src[per_thread];
#pragma unroll
    for (int k = 0; k < per_thread; ++k) {
      const int r = r0 + k * step;
      src[k] = col_in && row0 + r < row_end ? row_ptr(row0 + r) : nullptr;
    }
#pragma unroll
    for (int k = 0; k < per_thread; ++k)
      attn_cp_async16(dst + attn_swz(r0 + k * step, c, ROW_BYTES),
                      src[k] ? src[k] + c * 16 : fallback, src[k] ? 16 : 0);
  }
}

/* The arithmetic attn_fp8x4_cvt ends with, apart so that its bit work runs
 * on the host too (tests/host/fp8_cvt_host_check.sh gives these its own
 * exact versions): bf16x2 times 2^120 (an fma with -0, so -0 stays -0),
 * f16x2 times 2^8, f16x2 to bf16x2 (exact for FP8 values). Subnormal
 * operands are kept by both multiplies. */
[[maybe_unused]] static __device__ __forceinline__ unsigned attn_bf16x2_times_2p120(unsigned f) {
  unsigned h;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(h) : "r"(f), "r"(0x7b807b80u), "r"(0x80008000u));
  return h;
}
[[maybe_unused]] static __device__ __forceinline__ unsigned attn_f16x2_times_2p8(unsigned f) {
  unsigned h;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(h) : "r"(f), "r"(0x5c005c00u));
  return h;
}
[[maybe_unused]] static __device__ __forceinline__ unsigned attn_f16x2_to_bf16x2(unsigned h) {
  unsigned b;
  asm("{ .reg .b16 l, u; .reg .f32 fl, fu;\n"
      "  mov.b32 {l, u}, %1; cvt.f32.f16 fl, l; cvt.f32.f16 fu, u;\n"
      "  cvt.rn.bf16x2.f32 %0, fu, fl; }"
      : "=r"(b)
      : "r"(h));
  return b;
}

/* Four FP8 values (bytes of x, e4m3 when E4M3 else e5m2) as four 16-bit
 * values of the MMA type (bf16 when BF16, else f16), two per word, in
 * byte order; exact (every e4m3 and e5m2 value is an f16 and a bf16
 * value). e4m3 is rebuilt without conversion instructions (their pipe is
 * narrow, and a decode converts every key): each magnitude (exponent field
 * and mantissa) moved into the 16-bit type's places below its sign, then
 * one multiply by the power of two of the bias difference (2^8 for f16,
 * 2^120 for bf16; exact, subnormals included). e4m3's NaN (S.1111.111)
 * comes out of the multiply as 480, which no finite e4m3 value gives, and
 * becomes a NaN by setting the exponent field's bits; it is found a word at
 * a time (a magnitude of 0x7f plus 1 is the only one to reach 0x80, and no
 * carry leaves a byte). About 9 instructions a pair of values, against 13-14
 * for a per-lane compare (session 28: the converters bound the FP8 KV cache's
 * forward). e5m2 is the top byte of an f16 (for bf16 then converted through
 * f32). */
template <bool E4M3, bool BF16>
static __device__ __forceinline__ void attn_fp8x4_cvt(unsigned x, unsigned &lo, unsigned &hi) {
  unsigned h[2];
  if constexpr (E4M3) {
    const unsigned mag = x & 0x7f7f7f7fu, sgn = x & 0x80808080u;
    const unsigned nan = (mag + 0x01010101u) & 0x80808080u; /* 0x80 in each NaN byte */
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const unsigned m = __byte_perm(mag, 0u, k ? 0x4342u : 0x4140u); /* a lane's low byte */
      const unsigned s = __byte_perm(sgn, 0u, k ? 0x3424u : 0x1404u); /* a lane's bit 15 */
      const unsigned n = __byte_perm(nan, 0u, k ? 0x4342u : 0x4140u); /* 0x80 in a NaN lane */
      if constexpr (BF16)
        h[k] = attn_bf16x2_times_2p120(m * 16u + s) | n * 0xffu; /* 0x7f80: all exponent bits */
      else
        h[k] = attn_f16x2_times_2p8(m * 128u + s) | n * 0xf8u; /* 0x7c00 */
    }
  } else {
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      h[k] = __byte_perm(x, 0u, k ? 0x3424u : 0x1404u);
      if constexpr (BF16)
        h[k] = attn_f16x2_to_bf16x2(h[k]);
    }
  }
  lo = h[0];
  hi = h[1];
}

/* Shared-memory words and 16-byte vectors by address, and four e4m3 bytes
 * as four f16 (two cvt.rn.f16x2.e4m3x2, sm_89 and later; exact): the
 * pieces the FP8 tile converters are written in (fwd_sm90's V converters
 * run on the host with shims for these: tests/host). */
[[maybe_unused]] static __device__ __forceinline__ unsigned attn_lds32(unsigned addr) {
  unsigned x;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(x) : "r"(addr));
  return x;
}
[[maybe_unused]] static __device__ __forceinline__ void attn_sts32(unsigned addr, unsigned x) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(x) : "memory");
}
[[maybe_unused]] static __device__ __forceinline__ void attn_lds64(unsigned addr, unsigned &lo,
                                                                   unsigned &hi) {
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(lo), "=r"(hi) : "r"(addr));
}
[[maybe_unused]] static __device__ __forceinline__ void attn_sts64(unsigned addr, unsigned lo,
                                                                   unsigned hi) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(addr), "r"(lo), "r"(hi) : "memory");
}
[[maybe_unused]] static __device__ __forceinline__ void attn_lds128(unsigned addr,
                                                                    unsigned (&x)[4]) {
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
               : "r"(addr));
}
[[maybe_unused]] static __device__ __forceinline__ void attn_sts128(unsigned addr, unsigned a,
                                                                    unsigned b, unsigned c,
                                                                    unsigned d) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(a), "r"(b), "r"(c),
               "r"(d)
               : "memory");
}
[[maybe_unused]] static __device__ __forceinline__ void attn_e4m3x4_to_f16(unsigned x, unsigned &lo,
                                                                           unsigned &hi) {
  asm("{ .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n"
      " cvt.rn.f16x2.e4m3x2 %1, h; }"
      : "=r"(lo), "=r"(hi)
      : "r"(x));
}

/* cvt.rn.f16x2.e4m3x2 exists from sm_89 on: one conversion a pair of
 * e4m3 values into f16, against attn_fp8x4_cvt's ~4 integer instructions
 * a value (into bf16 there is no such conversion). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
constexpr bool attn_has_e4m3_cvt = true;
#else
constexpr bool attn_has_e4m3_cvt = false;
#endif

/* One 16-byte chunk of FP8 (x) as two of the 16-bit MMA type (y):
 * attn_fp8x4_cvt, or e4m3 into f16 where the conversion exists (exact). */
template <bool E4M3, bool BF16>
static __device__ __forceinline__ void attn_fp8x16_cvt(const unsigned (&x)[4], unsigned (&y)[8]) {
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    if constexpr (E4M3 && !BF16 && attn_has_e4m3_cvt)
      attn_e4m3x4_to_f16(x[w], y[2 * w], y[2 * w + 1]);
    else
      attn_fp8x4_cvt<E4M3, BF16>(x[w], y[2 * w], y[2 * w + 1]);
  }
}

/* An 8-bit tile of ROWS x D (rows of D bytes, attn_swz'd) converted by a
 * CTA of THREADS threads into a 16-bit tile of the MMA type (rows of 2D
 * bytes, attn_swz'd): each thread takes 16-byte chunks, one source chunk
 * making two (attn_fp8x16_cvt). */
template <int ROWS, int D, int THREADS, bool E4M3, bool BF16>
static __device__ __forceinline__ void attn_convert_tile(unsigned src, unsigned dst, int tid) {
  constexpr int chunks = ROWS * D / 16;
#pragma unroll
  for (int k = 0; k < (chunks + THREADS - 1) / THREADS; ++k) {
    const int ch = tid + k * THREADS, r = ch / (D / 16), c = ch % (D / 16);
    if (chunks % THREADS != 0 && ch >= chunks)
      break;
    unsigned x[4], y[8];
    attn_lds128(src + attn_swz(r, c, D), x);
    attn_fp8x16_cvt<E4M3, BF16>(x, y);
#pragma unroll
    for (int half = 0; half < 2; ++half)
      attn_sts128(dst + attn_swz(r, 2 * c + half, 2 * D), y[4 * half], y[4 * half + 1],
                  y[4 * half + 2], y[4 * half + 3]);
  }
}

[[maybe_unused]] static __device__ __forceinline__ void attn_cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int N> static __device__ __forceinline__ void attn_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

[[maybe_unused]] static __device__ __forceinline__ void attn_ldsm_x4(unsigned (&r)[4],
                                                                     unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

[[maybe_unused]] static __device__ __forceinline__ void attn_ldsm_x4_trans(unsigned (&r)[4],
                                                                           unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* d += a * b for one m16n8k16 tile, f32 accumulators; BF16 picks the
 * input type (bf16 or f16). */
template <bool BF16>
static __device__ __forceinline__ void attn_mma16816(float (&d)[4], const unsigned (&a)[4],
                                                     unsigned b0, unsigned b1) {
  if constexpr (BF16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/* Two floats to one register of two 16-bit values, lo in the low half
 * (cvt's first source lands in the upper half). */
template <bool BF16>
static __device__ __forceinline__ unsigned attn_pack2(float lo, float hi) {
  unsigned r;
  if constexpr (BF16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/* bf16 rows into f16, each row times a power of two 2^e, for the FP8 KV
 * caches under a bf16 q, whose GEMMs then run in f16 (K and V widen into
 * f16 in one conversion a pair): e puts the row's largest finite |x| in
 * [2^15, 2^16), clamped to [-112, 126] so that 2^e and 2^-e are normal
 * floats. bf16's 8 significant bits fit f16's 11, so every element within
 * 2^29 of its row's largest is exact (f16's normal range); smaller ones
 * round as f16 subnormals, their products then at least 2^-29 below the
 * row's largest. An infinity or NaN does not pick the scale and stays one.
 * Each row has its own scale: rows are separate softmaxes, and one large
 * row must not flush its neighbours. The pieces, shared by the rewrite in
 * shared memory below and the decode kernel's in registers:
 * attn_bf16x2_top: `top` and the larger finite biased exponent field of a
 * bf16x2 word's two values (bits 7-14, in place), the largest; */
static __device__ __forceinline__ unsigned attn_bf16x2_top(unsigned top, unsigned w) {
  const unsigned lo = w & 0x7f80u, hi = (w >> 16) & 0x7f80u;
  return max(top, max(lo == 0x7f80u ? 0u : lo, hi == 0x7f80u ? 0u : hi));
}
/* attn_row_pow2: 2^e and 2^-e for a row whose largest such field is top; */
static __device__ __forceinline__ void attn_row_pow2(unsigned top, float &up, float &down) {
  const int e = min(126, max(-112, 142 - (int)(top >> 7)));
  up = __int_as_float((127 + e) << 23);
  down = __int_as_float((127 - e) << 23);
}
/* attn_bf16x2_to_f16x2: a bf16x2 word times 2^e (up) as f16x2. */
static __device__ __forceinline__ unsigned attn_bf16x2_to_f16x2(unsigned w, float up) {
  return attn_pack2<false>(__uint_as_float(w << 16) * up, __uint_as_float(w & 0xffff0000u) * up);
}

/* One warp's 16 rows of bf16 in shared memory rewritten in place as f16
 * rows times powers of two (above). chunk_at(k) is the address of the
 * lane's k-th 16-byte chunk (CHUNKS of them), which must be chunk lane & 7
 * of an 8-chunk group of row (lane >> 3) + 4 (k & 3) (a row's groups in any
 * order: only the row matters, as the rewrite is in place). inv gets 2^-e
 * of rows g = lane >> 2 and g + 8 (the lane's rows of an m16 MMA tile). */
template <int CHUNKS, typename ChunkAt>
static __device__ __forceinline__ void attn_rows_bf16_to_f16(ChunkAt chunk_at, int lane,
                                                             float (&inv)[2]) {
  /* The largest finite biased exponent of each of the lane's four rows,
   * then of the row over its eight lanes. */
  unsigned top[4] = {0u, 0u, 0u, 0u};
#pragma unroll
  for (int k = 0; k < CHUNKS; ++k) {
    unsigned x[4];
    attn_lds128(chunk_at(k), x);
#pragma unroll
    for (int w = 0; w < 4; ++w)
      top[k & 3] = attn_bf16x2_top(top[k & 3], x[w]);
  }
  float up[4], down[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int m = 1; m < 8; m <<= 1)
      top[j] = max(top[j], __shfl_xor_sync(0xffffffffu, top[j], m));
    attn_row_pow2(top[j], up[j], down[j]);
  }
#pragma unroll
  for (int k = 0; k < CHUNKS; ++k) {
    unsigned x[4], y[4];
    attn_lds128(chunk_at(k), x);
#pragma unroll
    for (int w = 0; w < 4; ++w)
      y[w] = attn_bf16x2_to_f16x2(x[w], up[k & 3]);
    attn_sts128(chunk_at(k), y[0], y[1], y[2], y[3]);
  }
  /* Row g is row (g & 3) + 4 (g >> 2) of lanes 8 (g & 3)..: their
   * down[g >> 2]; row g + 8 their down[(g >> 2) + 2]. */
  const int g = lane >> 2, src = 8 * (g & 3);
  float d[4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
    d[j] = __shfl_sync(0xffffffffu, down[j], src);
  inv[0] = g >> 2 ? d[1] : d[0];
  inv[1] = g >> 2 ? d[3] : d[2];
}

/* 2^x in one instruction; softmax runs in base 2 with log2(e) folded. */
[[maybe_unused]] static __device__ __forceinline__ float attn_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* 2^x on the FMA and integer pipes instead of MUFU (FA4's technique), for
 * the softmax's exponentials where MUFU is the busier pipe (a softcap's
 * tanh is a second MUFU op per score; fwd_sm90's ATTN_EXP2_FMA sends some
 * key blocks' exponentials here). x = j + f with j the nearest integer
 * (adding 1.5 * 2^23 rounds it into the low mantissa bits of t) and f in
 * [-1/2, 1/2]; 2^f by a degree-4 polynomial whose constant is 1 (so
 * integer x, the row maximum's own element included, is exact), fitted
 * for relative error: at most 2.9e-6 over the range (tests/host/
 * exp2_fma_host_check.sh), against ex2.approx's ~2^-22 -- far below the
 * 16-bit P (2^-9) or the f32 row sums' use of it. 2^j joins as j added to
 * the exponent field (the shift drops t's own exponent bits). x below
 * -126 (and -inf, a masked score) gives 0, as ex2.approx.ftz does, and a
 * NaN gives NaN; x stays below 128 here (the softmax's arguments are at
 * most its stale bound, 2^8). Twelve instructions, none on MUFU. */
[[maybe_unused]] static __device__ __forceinline__ float attn_exp2_fma(float x) {
  const float t = x + 12582912.f;
  const float f = x - (t - 12582912.f);
  float p = fmaf(0.009582818485796452f, f, 0.05590637028217316f);
  p = fmaf(p, f, 0.24024099111557007f);
  p = fmaf(p, f, 0.6931241750717163f);
  p = fmaf(p, f, 1.f);
  const unsigned bits = __float_as_uint(p) + (__float_as_uint(t) << 23);
  return x >= -126.f ? __uint_as_float(bits) : x != x ? x : 0.f; /* a NaN stays NaN, as ex2's */
}

/* ------------------------------------------ stores shared by epilogues */

/* Output elements d and d + 1 of one row (8-, 4- or 2-byte store); KIND
 * is the element type: 0 bf16, 1 f16, 2 f32, 3 e4m3, 4 e5m2 (common.cuh's
 * rounding, the CPU reference's). */
template <int KIND>
static __device__ __forceinline__ void attn_store_pair(void *base, long long off, float x0,
                                                       float x1) {
  if constexpr (KIND == 2) {
    float2 v;
    v.x = x0, v.y = x1;
    *(float2 *)((float *)base + off) = v;
  } else if constexpr (KIND == 3 || KIND == 4) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    /* (one conversion where the software one takes tens of instructions
     * and branches per element; a NaN's sign or e5m2 payload may differ) */
    *(unsigned short *)((unsigned char *)base + off) = attn_fp8x2<KIND == 3>(x0, x1);
#else
    const unsigned lo = KIND == 3 ? attn_f32_to_e4m3(x0) : attn_f32_to_e5m2(x0);
    const unsigned hi = KIND == 3 ? attn_f32_to_e4m3(x1) : attn_f32_to_e5m2(x1);
    *(unsigned short *)((unsigned char *)base + off) = (unsigned short)(lo | (hi << 8));
#endif
  } else {
    *(unsigned *)((unsigned short *)base + off) = attn_pack2<KIND == 0>(x0, x1);
  }
}

/* One row's softmax statistics, lse = max + log(sum): -inf when no key
 * was kept (sum 0), never NaN. */
[[maybe_unused]] static __device__ __forceinline__ void attn_store_lse(const attn_tensor_arg &tl,
                                                                       int b, int h, int i,
                                                                       float row_max, float l) {
  const float lse = l > 0.f ? row_max + logf(l) : __int_as_float(0xff800000);
  ((float *)tl.ptr)[b * tl.stride[0] + h * tl.stride[1] + (long long)i * tl.stride[2]] = lse;
}
