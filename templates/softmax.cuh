/*
 * softmax.cuh: the online softmax of the forward templates (fwd_sm80,
 * fwd_sm90), written once; a split-KV or decode template takes the same.
 *
 * A thread holds two rows of a score tile (r = 0 and 1: rows g and g + 8
 * of an m16n8 or m64nN fragment) as 8-key blocks n < N, the pair at
 * frag(n, 2 r) and frag(n, 2 r + 1); the rest of a row lives in the other
 * three lanes of the thread's quad. Maxima are kept in natural-log units
 * (they are what logsumexp stores); exponentials are exp2 with log2(e)
 * folded into one fma. Each row keeps this lane's partial sum; the quad's
 * total is taken once, at the end (attn_softmax_total).
 */

/* One tile: the rows' new maxima over it (a quad reduction), the tile's
 * scores replaced by their exponentials, the running sums updated, and
 * for each row on_row(r, alpha) with the factor that rescales what was
 * accumulated under the old maximum. The caller applies it to O where it
 * overlaps best: at once (fwd_sm80), or kept and applied behind the next
 * P V GEMM (fwd_sm90). A row whose keys were all masked so far subtracts
 * 0, not -inf (the "safe max"), so its exponentials are 0 and alpha is 1,
 * never NaN. */
/* SNAP (graphs that round P before P V, hooks.cuh's attn_p_round): the
 * subtracted maximum is kept as an integer in base-2 units, ceil(max s *
 * log2 e) (row_max holds it times ln 2), so every rescaling is a power of
 * two and P's roundings are the CPU reference's (reference/interp.c,
 * ref_eval_p_round). */
/* STALE (without SNAP; fwd_sm90): a row keeps its maximum until a tile's
 * is more than attn_stale_log2 (base-2 units) above it, so that most tiles
 * rescale nothing (alpha exactly 1: the caller skips the rescale where a
 * whole warp's rows have alpha 1). The exponentials are then up to
 * 2^attn_stale_log2 instead of 1, which the f32 sums and the 16-bit P of
 * P V hold with the same relative precision (FA4's conditional
 * rescaling). */
constexpr float attn_stale_log2 = 8.f;
/* EXP2_FMA (fwd_sm90's ATTN_EXP2_FMA, 0-4): the exponentials of that many
 * of every four 8-key blocks go to the FMA pipe (attn_exp2_fma), the rest
 * to MUFU's ex2, so that a score chain with MUFU work of its own (a
 * softcap's tanh) does not leave MUFU the one busy pipe. */
template <int EXP2_FMA>
static __device__ __forceinline__ float attn_softmax_exp2(int n, float x) {
  return n % 4 < EXP2_FMA ? attn_exp2_fma(x) : attn_exp2(x);
}
/* op (fmaxf or fminf) over 8-key blocks [LO, HI) of row r, as a balanced
 * tree: depth log2 of the row's 2 (HI - LO) values instead of a chain of
 * HI - LO dependent operations. The chain left the consumers waiting on
 * fixed-latency dependencies (ncu's "wait", the largest stall at D 128:
 * session 33), a row's exponentials waiting for its maximum. Maxima and
 * minima do not depend on the order (a NaN is ignored unless all are), so
 * the values are the chain's. */
template <int LO, int HI, typename Frag, typename Op>
static __device__ __forceinline__ float attn_row_tree(Frag frag, Op op, int r) {
  if constexpr (HI - LO == 1) {
    return op(frag(LO, 2 * r), frag(LO, 2 * r + 1));
  } else {
    constexpr int MID = (LO + HI) / 2;
    return op(attn_row_tree<LO, MID>(frag, op, r), attn_row_tree<MID, HI>(frag, op, r));
  }
}

/* Both rows' extremes over a tile's N blocks with init[r] joined, reduced
 * over the quad: the two rows' trees independent and their shuffles
 * issued together, so that each hides the other's latency. */
template <int N, typename Frag, typename Op>
static __device__ __forceinline__ void attn_rows_extreme(Frag frag, Op op, const float (&init)[2],
                                                         float (&e)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r)
    e[r] = op(init[r], attn_row_tree<0, N>(frag, op, r));
#pragma unroll
  for (int r = 0; r < 2; ++r)
    e[r] = op(e[r], __shfl_xor_sync(0xffffffffu, e[r], 1));
#pragma unroll
  for (int r = 0; r < 2; ++r)
    e[r] = op(e[r], __shfl_xor_sync(0xffffffffu, e[r], 2));
}

/* The factor a row's running sum and O take when its maximum goes from
 * old_mx to mx (base: mx log2 e, or 0 where mx is -inf): exactly 1 where the
 * maximum stays. exp2(old_mx log2 e - base) is not: the compiler contracts
 * it into fma(old_mx, log2 e, -base), which leaves base's rounding error
 * (up to 2^-22 for maxima near 4), and exp2 of that is 1 + a few ulps, so
 * fwd_sm90's skip of O's rescale (every row of the warp at alpha 1) almost
 * never fired: ncu (session 34) counted the rescale on 97% of the tiles of
 * a plain D 128 forward, whose stale maxima should keep nearly all. A row
 * with no key yet (both -inf) gets 1 too: its sum and O are 0. */
static __device__ __forceinline__ float attn_alpha(float old_mx, float mx, float base) {
  return old_mx == mx ? 1.f : attn_exp2(old_mx * 1.4426950408889634f - base);
}

template <bool STALE>
static __device__ __forceinline__ float attn_row_max_next(float old_mx, float tile_mx) {
  const float mx = fmaxf(old_mx, tile_mx);
  if constexpr (STALE) {
    const float log2e = 1.4426950408889634f;
    return old_mx != __int_as_float(0xff800000) && mx * log2e <= old_mx * log2e + attn_stale_log2
               ? old_mx
               : mx;
  }
  return mx;
}
template <int N, bool SNAP = false, bool STALE = false, int EXP2_FMA = 0, typename Frag,
          typename OnRow>
static __device__ __forceinline__ void attn_softmax_tile(Frag frag, float (&row_max)[2],
                                                         float (&row_sum)[2], OnRow on_row) {
  const float neg_inf = __int_as_float(0xff800000);
  const float log2e = 1.4426950408889634f;
  float tile_mx[2];
  constexpr bool fresh = SNAP || STALE; /* the tile's own maximum, not joined with the row's */
  const float init[2] = {fresh ? neg_inf : row_max[0], fresh ? neg_inf : row_max[1]};
  attn_rows_extreme<N>(frag, [](float a, float b) { return fmaxf(a, b); }, init, tile_mx);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = tile_mx[r];
    if constexpr (STALE && !SNAP)
      mx = attn_row_max_next<true>(row_max[r], mx);
    float base, alpha;
    if constexpr (SNAP) { /* mx: this tile's max; the bases are integers */
      const float old_b = row_max[r] == neg_inf ? neg_inf : rintf(row_max[r] * log2e);
      const float new_b = fmaxf(old_b, mx == neg_inf ? neg_inf : ceilf(mx * log2e));
      base = new_b == neg_inf ? 0.f : new_b;
      alpha = attn_exp2(old_b - base);
      row_max[r] = new_b == neg_inf ? neg_inf : new_b * 0.6931471805599453f;
    } else {
      base = mx == neg_inf ? 0.f : mx * log2e;
      alpha = attn_alpha(row_max[r], mx, base);
      row_max[r] = mx;
    }
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < N; ++n) {
      float &x0 = frag(n, 2 * r), &x1 = frag(n, 2 * r + 1);
      x0 = attn_softmax_exp2<EXP2_FMA>(n, fmaf(x0, log2e, -base));
      x1 = attn_softmax_exp2<EXP2_FMA>(n, fmaf(x1, log2e, -base));
      sum += x0 + x1;
    }
    row_sum[r] = row_sum[r] * alpha + sum;
    on_row(r, alpha);
  }
}

/* attn_softmax_tile for a score that is a value `acc` (the q.k product, or
 * the chain under the factor: hooks' attn_score_folded) times a
 * factor c fixed per work tile, c folded into
 * the exponentials' fma: the tile holds acc itself (masked elements at
 * `fill`: -inf, or +inf where c < 0), its rows' extreme is taken over acc
 * (the maximum, or where c < 0 the minimum: max_j c acc_j is c times it,
 * rounding being monotone), and each exponential is exp2(acc c log2 e -
 * base): one multiply an element less than scoring the tile first (FA's
 * softmax_scale_log2), values equal up to the rounding of c log2 e. c is
 * per row (the lane's two: fwd_sm90's kv8 scales Q's rows apart), of one
 * sign (neg); it must not be 0 (the caller passes the smallest normal
 * number instead: every exponential of a finite acc is then 1 to f32
 * precision, as at c = 0). */
/* p_log2 (PLOG): log2 of a positive factor the exponentials carry
 * (fwd_sm90's P scale before an FP8 P V, added here instead of multiplied
 * per element); the sums then carry it too, and the caller divides them by
 * the factor before normalizing. */
template <int N, bool SNAP = false, bool STALE = false, bool PLOG = false, int EXP2_FMA = 0,
          typename Frag, typename OnRow>
static __device__ __forceinline__ void attn_softmax_tile_qk(Frag frag, float (&row_max)[2],
                                                            float (&row_sum)[2], const float (&c)[2],
                                                            const float (&c_log2)[2], bool neg,
                                                            OnRow on_row, float p_log2 = 0.f) {
  const float neg_inf = __int_as_float(0xff800000), pos_inf = __int_as_float(0x7f800000);
  /* The tile's extreme acc of each row, in one of two reductions (the
   * choice is uniform: no select per element). */
  float exts[2];
  if (neg) {
    const float init[2] = {pos_inf, pos_inf};
    attn_rows_extreme<N>(frag, [](float a, float b) { return fminf(a, b); }, init, exts);
  } else {
    const float init[2] = {neg_inf, neg_inf};
    attn_rows_extreme<N>(frag, [](float a, float b) { return fmaxf(a, b); }, init, exts);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float ext = exts[r];
    /* The tile's max score (natural-log units); -inf where every element
     * is masked (ext is the fill). */
    const float tile_mx = ext == (neg ? pos_inf : neg_inf) ? neg_inf : c[r] * ext;
    float base, alpha;
    if constexpr (SNAP) {
      const float old_b = row_max[r] == neg_inf ? neg_inf : rintf(row_max[r] * 1.4426950408889634f);
      const float new_b =
          fmaxf(old_b, tile_mx == neg_inf ? neg_inf : ceilf(tile_mx * 1.4426950408889634f));
      base = new_b == neg_inf ? 0.f : new_b;
      alpha = attn_exp2(old_b - base);
      row_max[r] = new_b == neg_inf ? neg_inf : new_b * 0.6931471805599453f;
    } else {
      const float mx = attn_row_max_next<STALE>(row_max[r], tile_mx);
      base = mx == neg_inf ? 0.f : mx * 1.4426950408889634f;
      alpha = attn_alpha(row_max[r], mx, base);
      row_max[r] = mx;
    }
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < N; ++n) {
      float &x0 = frag(n, 2 * r), &x1 = frag(n, 2 * r + 1);
      /* (-base itself without PLOG: 0 - base is not -base for base 0) */
      const float nb = PLOG ? p_log2 - base : -base;
      x0 = attn_softmax_exp2<EXP2_FMA>(n, fmaf(x0, c_log2[r], nb));
      x1 = attn_softmax_exp2<EXP2_FMA>(n, fmaf(x1, c_log2[r], nb));
      sum += x0 + x1;
    }
    row_sum[r] = row_sum[r] * alpha + sum;
    on_row(r, alpha);
  }
}

/* The row's normalizer: this lane's partial sum added over its quad. */
static __device__ __forceinline__ float attn_softmax_total(float partial) {
  partial += __shfl_xor_sync(0xffffffffu, partial, 1);
  partial += __shfl_xor_sync(0xffffffffu, partial, 2);
  return partial;
}

/* 1 / l, or 0 for a row that kept no key (its output is 0). */
static __device__ __forceinline__ float attn_softmax_inv(float l) {
  return l > 0.f ? 1.f / l : 0.f;
}

/* A softmax sink (a logit per (b, h), natural-log units, that joins every
 * row's denominator and whose probability is dropped: gpt-oss) folded into
 * a finished row: its max m and total l become those of the row with the
 * sink, and the factor O's row must be scaled by, e^(m - m'), comes back.
 * A row that kept no key gets m = sink, l = 1 and factor 0 (O = 0, lse =
 * sink); with neither keys nor a finite sink nothing changes. */
static __device__ __forceinline__ float attn_softmax_sink(float sink, float &m, float &l) {
  const float neg_inf = __int_as_float(0xff800000);
  const float m2 = fmaxf(m, sink);
  if (m2 == neg_inf)
    return 1.f;
  const float keep = m == neg_inf ? 0.f : expf(m - m2);
  l = l * keep + expf(sink - m2);
  m = m2;
  return keep;
}

/* |x| as the bits of a non-negative float: their unsigned order is the
 * numbers', with NaN above every number (amax outputs). */
[[maybe_unused]] static __device__ __forceinline__ unsigned attn_amax_bits(float x) {
  return __float_as_uint(x) & 0x7fffffffu;
}

/* A running amax m (attn_amax_bits) with |x| folded in: from sm_80 one
 * max.NaN over the bits as a float (|x| an operand modifier), which keeps
 * a NaN as the largest (its payload the canonical one; every NaN commits
 * as a NaN). Per element of the FP8 backward's dS, where the integer form
 * took two instructions. */
[[maybe_unused]] static __device__ __forceinline__ unsigned attn_amax_fold(unsigned m, float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(__uint_as_float(m)), "f"(fabsf(x)));
  return __float_as_uint(r);
#else
  return max(m, attn_amax_bits(x));
#endif
}

/* An amax output's f32[1] at `at` (its bits, attn_amax_bits) maxed with
 * bits: an atomic only where the stored maximum is still below (a stale
 * read only costs an atomic that changes nothing). Atomics on one address
 * run one after another at L2, and kernels commit once a warp: the FP8
 * backward's dQ conversion at B 4, H 16, S 4k has 65,536 warps. */
[[maybe_unused]] static __device__ __forceinline__ void attn_amax_atomic(unsigned *at,
                                                                         unsigned bits) {
  if (bits > *(volatile const unsigned *)at)
    atomicMax(at, bits);
}

/* attn_softmax_store's STAGED layout: the element offset of the pair at
 * columns 8 nb + 2 t, + 1 of the warp's row sr (0-15), in 64-column blocks
 * of [16][64] elements whose 16-byte chunks sit in the 128-byte swizzle
 * (chunk c of row sr at c ^ (sr & 7)), as a TMA box of 64 x 16 reads them
 * from a 1024-byte boundary. tests/host/stage_host_check.sh checks it. */
static __device__ __forceinline__ int attn_stage_off(int sr, int nb, int t) {
  return (nb >> 3) * 1024 + sr * 64 + (((nb & 7) ^ (sr & 7)) << 3) + 2 * t;
}
/* ... and for an 8-bit O (e4m3, e5m2): the byte offset of the pair, in
 * 128-column blocks of [16][128] bytes, the 128-byte swizzle's 16-byte
 * chunk (nb & 15) / 2 of row sr at chunk ^ (sr & 7), as a TMA box of 128
 * x 16 bytes reads it. A warp's two-byte stores of one nb: each row's quad
 * in one 8-byte half of a chunk, eight rows in eight distinct chunks. */
static __device__ __forceinline__ int attn_stage_off8(int sr, int nb, int t) {
  return (nb >> 4) * 2048 + sr * 128 + ((((nb & 15) >> 1) ^ (sr & 7)) << 4) + ((nb & 1) << 3) +
         2 * t;
}

/* The epilogue of a forward: for the thread's two rows (i_row and i_row +
 * 8), the quad's normalizer, O's row divided by it and passed through the
 * graph's output hook (out(x, i, d): attn_out of the graph's namespace),
 * stored as pairs of columns 8 nb + 2 t, + 1 for nb < NB, and the row's
 * logsumexp (natural-log max and sum) by the quad's first lane when the
 * graph has an lse output. Rows from i_end on (Sq, or where a tile's rows
 * end short of it) store nothing. With SINK, the
 * (b, h) sink `sink` joins each row's denominator (attn_softmax_sink).
 * With AMAX, returns the largest attn_amax_bits of amax_arg(x, i, d) over
 * the elements stored (x the normalized element; the caller commits it
 * for the warp), else 0. STAGED (a number of slots, 0: not staged): the
 * pairs go to the warp's 16 rows at `stage` (a generic pointer into shared
 * memory) instead of O, a block of 128 bytes of the rows (64 columns of a
 * 16-bit O, 128 of an 8-bit one: attn_stage_off8) at a time into slot c %
 * STAGED of [16 rows][128 bytes], 16-byte chunks in the 128-byte swizzle
 * (chunk c of row r at c ^ (r & 7): a quad's four-byte stores of eight
 * rows then fall in distinct banks), and staged(c) after each block c
 * (every lane: fwd_sm90's o_smem stores it by TMA and, where the next
 * block reuses a slot, waits until that slot's last store has read it). */
template <int NB, int OUT_KIND, bool LSE, bool SINK, bool AMAX = false, int STAGED = 0,
          typename FragO, typename Out, typename AmaxArg = int, typename Staged = int>
static __device__ __forceinline__ unsigned
attn_softmax_store(FragO o, const float (&row_max)[2], const float (&row_sum)[2], int i_row, int t,
                   int b, int h, int o_slot, int lse_slot, const attn_params &p, int i_end,
                   Out out, float sink, AmaxArg amax_arg = 0, void *stage = nullptr,
                   Staged staged = 0) {
  unsigned amax = 0;
  /* Column blocks: staged, 128 bytes of a row a block (8 fragments of a
   * 16-bit O, 16 of an 8-bit one); else one. (A row's normalizer is
   * recomputed a block, the same values: common subexpressions.) */
  static_assert(STAGED == 0 || OUT_KIND != 2, "an f32 O is not staged");
  constexpr bool bytes1 = OUT_KIND >= 3;
  constexpr int per = STAGED > 0 ? (bytes1 ? 16 : 8) : NB, blocks = (NB + per - 1) / per;
#pragma unroll
  for (int c = 0; c < blocks; ++c) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float l = attn_softmax_total(row_sum[r]), m = row_max[r], keep = 1.f;
      if constexpr (SINK)
        keep = attn_softmax_sink(sink, m, l);
      const float inv = attn_softmax_inv(l) * keep;
      const int i = i_row + r * 8;
      if (i >= i_end)
        continue;
      const attn_tensor_arg &to = p.t[o_slot];
      const long long orow = b * to.stride[0] + h * to.stride[1] + (long long)i * to.stride[2];
#pragma unroll
      for (int nb = c * per; nb < NB && nb < (c + 1) * per; ++nb) {
        const int d = nb * 8 + 2 * t;
        const float y0 = o(nb, 2 * r) * inv, y1 = o(nb, 2 * r + 1) * inv;
        const float x0 = out(y0, i, d);
        const float x1 = out(y1, i, d + 1);
        if constexpr (STAGED > 0) {
          const int sr = (int)((threadIdx.x & 31u) >> 2) + 8 * r; /* the warp's row */
          /* (offsets in O's elements: a slot is 2048 bytes) */
          attn_store_pair<OUT_KIND>(stage,
                                    bytes1 ? (c % STAGED) * 2048 + attn_stage_off8(sr, nb & 15, t)
                                           : (c % STAGED) * 1024 + attn_stage_off(sr, nb & 7, t),
                                    x0, x1);
        } else
          attn_store_pair<OUT_KIND>(to.ptr, orow + d, x0, x1);
        if constexpr (AMAX)
          amax = max(amax, max(attn_amax_bits(amax_arg(y0, i, d)),
                               attn_amax_bits(amax_arg(y1, i, d + 1))));
      }
      if constexpr (LSE) {
        if (t == 0 && c + 1 == blocks) {
          attn_store_lse(p.t[lse_slot], b, h, i, m, l);
        }
      }
    }
    if constexpr (STAGED > 0)
      staged(c);
  }
  return amax;
}
