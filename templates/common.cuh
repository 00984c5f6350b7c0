/*
 * common.cuh: device helpers the emitted hooks call, shared by every
 * template. Included once per translation unit, after attn_abi.h and
 * before the graphs. No #include: NVRTC compiles this with no headers.
 *
 * Tensor reads inside the hooks go through attn_ld_*: the subscripts are
 * checked against the bound sizes, and an out-of-range read gives 0, never
 * memory outside the tensor (docs/language.md). A dimension declared as
 * literal 1 is passed subscript 0, so it broadcasts.
 */

/* Every kernel entry begins with this (the emitter writes the call), so a
 * plan step may launch with programmatic stream serialization (sm_90 on;
 * plan.c's entry_waits, runtime/launch.c): its CTAs may then be resident
 * before the grid ahead of it in the stream has finished, and wait here
 * until that grid has completed and its writes are visible; before this
 * point an entry touches no memory. launch_dependents lets the next step's
 * grid launch once every CTA of this one has started: it too waits at its
 * entry, so nothing it reads can be stale. Launched without the attribute,
 * both are no-ops. */
[[maybe_unused]] static __device__ __forceinline__ void attn_entry_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

[[maybe_unused]] static __device__ __forceinline__ float attn_neg_inf() { return __int_as_float(0xff800000); }
[[maybe_unused]] static __device__ __forceinline__ float attn_pos_inf() { return __int_as_float(0x7f800000); }

[[maybe_unused]] static __device__ __forceinline__ float attn_sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

/* i32 arithmetic wraps (two's complement), the language's semantics (C++
 * leaves signed overflow undefined, which a compiler may exploit): done
 * on unsigned, converted back (modulo 2^32). attn_labs: the mask
 * analysis's wrap guards, in 64 bits. */
[[maybe_unused]] static __device__ __forceinline__ int attn_iadd(int x, int y) { return (int)((unsigned)x + (unsigned)y); }
[[maybe_unused]] static __device__ __forceinline__ int attn_isub(int x, int y) { return (int)((unsigned)x - (unsigned)y); }
[[maybe_unused]] static __device__ __forceinline__ int attn_imul(int x, int y) { return (int)((unsigned)x * (unsigned)y); }
[[maybe_unused]] static __device__ __forceinline__ int attn_ineg(int x) { return (int)(0u - (unsigned)x); }
[[maybe_unused]] static __device__ __forceinline__ long long attn_labs(long long x) { return x < 0 ? -x : x; }

/* Integer abs, and division and remainder as the language defines them
 * (docs/language.md): x / 0 is 0 and x % 0 is x; INT_MIN / -1 wraps to
 * INT_MIN and INT_MIN % -1 is 0 (C leaves all four undefined). The
 * emitter calls these only where the divisor is not a constant other than
 * 0 and -1. */
[[maybe_unused]] static __device__ __forceinline__ int attn_abs(int x) { return x < 0 ? (int)(0u - (unsigned)x) : x; }
[[maybe_unused]] static __device__ __forceinline__ unsigned long long attn_abs(unsigned long long x) { return x; }
[[maybe_unused]] static __device__ __forceinline__ int attn_idiv(int x, int y) {
  return y == 0 ? 0 : y == -1 ? (int)(0u - (unsigned)x) : x / y;
}
[[maybe_unused]] static __device__ __forceinline__ unsigned long long attn_idiv(unsigned long long x, unsigned long long y) {
  return y == 0 ? 0 : x / y;
}
[[maybe_unused]] static __device__ __forceinline__ int attn_imod(int x, int y) {
  return y == 0 ? x : y == -1 ? 0 : x % y;
}
[[maybe_unused]] static __device__ __forceinline__ unsigned long long attn_imod(unsigned long long x, unsigned long long y) {
  return y == 0 ? x : x % y;
}

/* softplus, log(1 + e^x), as max(x, 0) + log(1 + e^-|x|): no overflow for
 * large x (ops.def's CPU form). Branch-free on purpose: log1pf's branches
 * put a divergent path between bwd_sm90's wgmmas, which ptxas then
 * serializes (C7520); __logf of 1 + e^-|x| loses only what e^-|x| < 2^-24
 * adds, an absolute error below 6e-8 on a score. */
[[maybe_unused]] static __device__ __forceinline__ float attn_softplus(float x) {
  return fmaxf(x, 0.0f) + __logf(1.0f + __expf(-fabsf(x)));
}

/* tanh in one instruction (sm_75+): relative error below 2^-10.9, far
 * inside the bf16/f16 rounding of the scores it feeds, and ~10x cheaper
 * than tanhf, which made softcapping cost more than the matmuls. */
[[maybe_unused]] static __device__ __forceinline__ float attn_tanh(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* tanh for |x| <= 1 on the FMA pipe: x P(x^2), P of degree 3 fitted for
 * relative error, at most 8.2e-5 over [-1, 1] (tests/host/
 * tanh_poly_host_check.sh), against tanh.approx's 2^-10.9 = 5e-4; odd,
 * monotone, |y| < 0.7616 there. Five instructions, none on MUFU, where a
 * softcap's tanh is the second MUFU op a score (fwd_sm90's ATTN_TANH_POLY
 * takes it for tiles whose arguments all lie in the range). A NaN stays
 * NaN. Outside [-1, 1] it is not tanh. */
[[maybe_unused]] static __device__ __forceinline__ float attn_tanh_poly(float x) {
  const float u = x * x;
  float p = fmaf(-0.0266126171f, u, 0.118874505f);
  p = fmaf(p, u, -0.330646783f);
  p = fmaf(p, u, 0.999918222f);
  return p * x;
}

/* A persistent kernel's next work item after t (grid of n_ctas CTAs, CTA
 * c starting at item c). With a queue (two words, zero before the launch),
 * items past the first wave go to whichever CTA asks first, in the order
 * of the kernel's item numbering; the CTA that takes the last end marker
 * (an item >= n_items) zeroes the queue for the next launch on the stream,
 * and no CTA reads it after its end marker. Without a queue (a kernel
 * launched one CTA per item), a static stride. (fwd90_next_tile is the
 * same walk written on p.tile_queue; made one with this, it moved the
 * SASS of examples/padding.attn's forward (register choices, 8 more
 * instructions), so it stays as the forward tables were measured on.) */
[[maybe_unused]] static __device__ __forceinline__ int attn_next_work(unsigned *queue, int t,
                                                                     int n_ctas, int n_items) {
  if (!queue)
    return t + n_ctas;
  const int next = n_ctas + (int)atomicAdd(queue, 1u);
  if (next >= n_items && atomicAdd(queue + 1, 1u) == (unsigned)n_ctas - 1) {
    queue[0] = 0;
    queue[1] = 0;
  }
  return next;
}

[[maybe_unused]] static __device__ __forceinline__ long long attn_floordiv(long long a, long long b) {
  long long q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
[[maybe_unused]] static __device__ __forceinline__ long long attn_ceildiv(long long a, long long b) {
  return -attn_floordiv(-a, b);
}

/* Element offset of (x0..x3), or -1 when a subscript is out of range. */
[[maybe_unused]] static __device__ __forceinline__ long long attn_offset(const attn_tensor_arg &t, long long x0,
                                                        long long x1, long long x2,
                                                        long long x3) {
  if ((unsigned long long)x0 >= (unsigned long long)t.size[0] ||
      (unsigned long long)x1 >= (unsigned long long)t.size[1] ||
      (unsigned long long)x2 >= (unsigned long long)t.size[2] ||
      (unsigned long long)x3 >= (unsigned long long)t.size[3])
    return -1;
  return x0 * t.stride[0] + x1 * t.stride[1] + x2 * t.stride[2] + x3 * t.stride[3];
}

/* attn_offset for subscripts that are int index variables (b, h, i, j or
 * 0: the backward's bias gradients, compiler/emit_bwd.c): 32-bit range
 * tests and 32 x 64-bit products, the same offsets (a negative x fails
 * the unsigned test either way). The 64-bit form, once per score element,
 * held enough registers to make ptxas serialize every wgmma of bwd_sm90
 * at D 256 with a directly written bias gradient under a mask (C7511,
 * C7514: compile sweeps seed 34 graph 90, seed 147 graph 127). */
[[maybe_unused]] static __device__ __forceinline__ long long attn_offset_idx(
    const attn_tensor_arg &t, int x0, int x1, int x2, int x3) {
  if ((unsigned)x0 >= (unsigned)t.size[0] || (unsigned)x1 >= (unsigned)t.size[1] ||
      (unsigned)x2 >= (unsigned)t.size[2] || (unsigned)x3 >= (unsigned)t.size[3])
    return -1;
  return (long long)x0 * t.stride[0] + (long long)x1 * t.stride[1] +
         (long long)x2 * t.stride[2] + (long long)x3 * t.stride[3];
}

[[maybe_unused]] static __device__ __forceinline__ float attn_bf16_to_f32(unsigned short h) {
  return __uint_as_float((unsigned)h << 16);
}
[[maybe_unused]] static __device__ __forceinline__ float attn_f16_to_f32(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
/* OCP FP8 E4M3 (finite, NaN at S.1111.111) and E5M2 (the top byte of an
 * f16), decoded in software so sm_80 needs no FP8 instructions. */
[[maybe_unused]] static __device__ __forceinline__ float attn_e4m3_to_f32(unsigned char x) {
  unsigned e = (x >> 3) & 15u, m = x & 7u;
  float mag = e == 15u && m == 7u ? __int_as_float(0x7fc00000)
              : e == 0u           ? (float)m * 0.001953125f /* 2^-9 */
                                  : __uint_as_float(((e + 120u) << 23) | (m << 20));
  return (x & 0x80u) ? -mag : mag;
}
[[maybe_unused]] static __device__ __forceinline__ float attn_e5m2_to_f32(unsigned char x) {
  return attn_f16_to_f32((unsigned short)((unsigned)x << 8));
}

/* f32 to OCP FP8 as the CPU reference rounds (compiler/dtype.c): to
 * nearest even, overflow and infinities saturating to the largest finite
 * value (CUDA's satfinite), NaN to NaN; in software, so sm_80 needs no FP8
 * instructions. Normal results round the f32 bits at the format's last
 * mantissa bit (a carry moves into the exponent by itself, and the
 * exponent's bias is then swapped); subnormal ones are |x| in units of
 * the format's smallest subnormal, rounded as an integer (exact). */
template <int MBITS, int BIAS, int EMIN, unsigned MAXCODE>
static __device__ __forceinline__ unsigned char attn_f32_to_fp8(float x) {
  const unsigned u = __float_as_uint(x), a = u & 0x7fffffffu, sign = (u >> 24) & 0x80u;
  unsigned code;
  if (a > 0x7f800000u) {
    /* e4m3's one NaN, S.1111.111; e5m2's quiet NaN keeps the top two
     * payload bits (dtype_e5m2_bits). */
    code = MBITS == 3 ? 0x7fu : 0x7eu | ((a >> 21) & 3u);
  } else if (a >= (unsigned)(127 + EMIN) << 23) {
    constexpr int drop = 23 - MBITS;
    const unsigned r = (a + ((1u << (drop - 1)) - 1u) + ((a >> drop) & 1u)) >> drop;
    code = r - ((unsigned)(127 - BIAS) << MBITS);
    code = code > MAXCODE ? MAXCODE : code;
  } else {
    code = (unsigned)rintf(__uint_as_float(a) * __uint_as_float((unsigned)(127 + MBITS - EMIN) << 23));
  }
  return (unsigned char)(sign | code);
}
[[maybe_unused]] static __device__ __forceinline__ unsigned char attn_f32_to_e4m3(float x) {
  return attn_f32_to_fp8<3, 7, -6, 0x7eu>(x);
}
[[maybe_unused]] static __device__ __forceinline__ unsigned char attn_f32_to_e5m2(float x) {
  return attn_f32_to_fp8<2, 15, -14, 0x7bu>(x);
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
/* (sm_89 on) Two f32 as two FP8 bytes, x0 the low one (E4M3: e4m3, else
 * e5m2), by the satfinite conversion: the values attn_f32_to_fp8 gives. */
template <bool E4M3>
[[maybe_unused]] static __device__ __forceinline__ unsigned short attn_fp8x2(float x0, float x1) {
  unsigned short h;
  if constexpr (E4M3)
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(x1), "f"(x0));
  else
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(h) : "f"(x1), "f"(x0));
  return h;
}
/* Four f32 as four FP8 bytes, x0 the lowest: an FP8 MMA fragment register. */
template <bool E4M3>
[[maybe_unused]] static __device__ __forceinline__ unsigned attn_fp8x4(float x0, float x1,
                                                                       float x2, float x3) {
  return (unsigned)attn_fp8x2<E4M3>(x0, x1) | ((unsigned)attn_fp8x2<E4M3>(x2, x3) << 16);
}
/* x rounded to FP8 and back, by the conversions: three instructions where
 * attn_f32_to_fp8 takes tens and branches per element (the FP8 backward's
 * P and dS ran 4x slower than the bf16 backward with it: H200, session 24). */
template <bool E4M3>
static __device__ __forceinline__ float attn_round_fp8_hw(float x) {
  const unsigned short h = attn_fp8x2<E4M3>(x, 0.f);
  unsigned short f;
  float y;
  if constexpr (E4M3)
    asm("{ .reg .b32 w; cvt.rn.f16x2.e4m3x2 w, %1; mov.b32 {%0, _}, w; }" : "=h"(f) : "h"(h));
  else
    asm("{ .reg .b32 w; cvt.rn.f16x2.e5m2x2 w, %1; mov.b32 {%0, _}, w; }" : "=h"(f) : "h"(h));
  asm("cvt.f32.f16 %0, %1;" : "=f"(y) : "h"(f));
  return y;
}
#endif

/* x rounded to a storage type's nearest value (the language's e4m3(x),
 * e5m2(x), bf16(x), f16(x)), as an f32; FP8 by the conversions from sm_89
 * on (attn_round_fp8_hw), in software before. */
[[maybe_unused]] static __device__ __forceinline__ float attn_round_e4m3(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return attn_round_fp8_hw<true>(x);
#else
  return attn_e4m3_to_f32(attn_f32_to_e4m3(x));
#endif
}
[[maybe_unused]] static __device__ __forceinline__ float attn_round_e5m2(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  return attn_round_fp8_hw<false>(x);
#else
  return attn_e5m2_to_f32(attn_f32_to_e5m2(x));
#endif
}
[[maybe_unused]] static __device__ __forceinline__ float attn_round_bf16(float x) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return __uint_as_float((unsigned)h << 16);
}
[[maybe_unused]] static __device__ __forceinline__ float attn_round_f16(float x) {
  unsigned short h;
  float y;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
  asm("cvt.f32.f16 %0, %1;" : "=f"(y) : "h"(h));
  return y;
}

/* One element of an input tensor, read through an asm statement that is
 * neither volatile nor clobbers memory: the compiler takes it for a pure
 * function of the address, so equal reads merge and reads fixed per
 * (b, h) leave the per-element code. __ldg did not: the templates' wgmma
 * fences clobber memory, and ALiBi's slopes[h] was read again for every
 * score (+28% time at D 128, S 4096; ncu: LSU pipe 1.4% -> 11.5%;
 * bench/NOTES-sm90.md). Exact, because inputs are read-only while a
 * kernel runs (an output aliasing an input would already be a race). */
#define ATTN_DEFINE_PURE_READ(storage, ptx_type, constraint, reg)                       \
  [[maybe_unused]] static __device__ __forceinline__ storage attn_read_input(const storage *a) { \
    reg r;                                                                             \
    asm("{\n\t.reg .u64 g;\n\tcvta.to.global.u64 g, %1;\n\tld.global.nc." ptx_type " %0, [g];\n\t}" \
        : "=" constraint(r)                                                             \
        : "l"(a));                                                                     \
    return (storage)r;                                                                 \
  }
ATTN_DEFINE_PURE_READ(float, "f32", "f", float)
ATTN_DEFINE_PURE_READ(unsigned short, "u16", "h", unsigned short)
ATTN_DEFINE_PURE_READ(unsigned char, "u8", "r", unsigned)
ATTN_DEFINE_PURE_READ(int, "s32", "r", int)
ATTN_DEFINE_PURE_READ(unsigned long long, "u64", "l", unsigned long long)
#undef ATTN_DEFINE_PURE_READ

#define ATTN_DEFINE_LOAD(name, T, storage, convert)                                    \
  [[maybe_unused]] static __device__ __forceinline__ T name(const attn_tensor_arg &t, long long x0,     \
                                           long long x1, long long x2, long long x3) { \
    long long off = attn_offset(t, x0, x1, x2, x3);                                    \
    if (off < 0) return (T)0;                                                          \
    return convert(attn_read_input((const storage *)t.ptr + off));                     \
  }
#define ATTN_SAME(x) (x)
ATTN_DEFINE_LOAD(attn_ld_f32, float, float, ATTN_SAME)
ATTN_DEFINE_LOAD(attn_ld_bf16, float, unsigned short, attn_bf16_to_f32)
ATTN_DEFINE_LOAD(attn_ld_f16, float, unsigned short, attn_f16_to_f32)
ATTN_DEFINE_LOAD(attn_ld_e4m3, float, unsigned char, attn_e4m3_to_f32)
ATTN_DEFINE_LOAD(attn_ld_e5m2, float, unsigned char, attn_e5m2_to_f32)
ATTN_DEFINE_LOAD(attn_ld_i32, int, int, ATTN_SAME)
ATTN_DEFINE_LOAD(attn_ld_u64, unsigned long long, unsigned long long, ATTN_SAME)
ATTN_DEFINE_LOAD(attn_ld_bool, bool, unsigned char, (bool))
#undef ATTN_DEFINE_LOAD
#undef ATTN_SAME
