/*
 * hooks.cuh: the functions every template calls and the emitter writes
 * per graph (docs/templates.md has the full contract). Pasted into each
 * graph's namespace before its hooks and templates, so the contract is
 * written once. The graph's ATTN_* macros are defined before it.
 */

/* The graph's element types, from its macros: q, k, v (and dO, dq, dk,
 * dv) bf16 (1) or f16 (0); o 0 bf16, 1 f16, 2 f32. Enumerators, not
 * constexpr variables, so they take no storage in the module (under
 * -default-device a namespace-scope variable becomes a device global). */
#if defined(ATTN_IN_BF16) && !defined(ATTN_IN_F16)
enum : int { attn_in_bf16 = 1 };
#elif defined(ATTN_IN_F16) && !defined(ATTN_IN_BF16)
enum : int { attn_in_bf16 = 0 };
#else
#error "define exactly one of ATTN_IN_BF16, ATTN_IN_F16"
#endif
#if defined(ATTN_OUT_BF16) + defined(ATTN_OUT_F16) + defined(ATTN_OUT_F32) +                 \
        defined(ATTN_OUT_E4M3) + defined(ATTN_OUT_E5M2) != 1
#error "define exactly one of ATTN_OUT_BF16, ATTN_OUT_F16, ATTN_OUT_F32, ATTN_OUT_E4M3, ATTN_OUT_E5M2"
#elif defined(ATTN_OUT_BF16)
enum : int { attn_out_kind = 0 };
#elif defined(ATTN_OUT_F16)
enum : int { attn_out_kind = 1 };
#elif defined(ATTN_OUT_F32)
enum : int { attn_out_kind = 2 };
#elif defined(ATTN_OUT_E4M3)
enum : int { attn_out_kind = 3 };
#else
enum : int { attn_out_kind = 4 };
#endif
/* FP8 q, k and v (ATTN_Q_E4M3 / ATTN_Q_E5M2, ATTN_KV_E4M3 / ATTN_KV_E5M2;
 * k and v share a type): 0 for a 16-bit tensor, 1 e4m3, 2 e5m2. The
 * portable forward converts them on load into the MMA type above (exact:
 * every FP8 value is an f16 and a bf16 value). */
#if defined(ATTN_Q_E4M3)
enum : int { attn_q_fp8 = 1 };
#elif defined(ATTN_Q_E5M2)
enum : int { attn_q_fp8 = 2 };
#else
enum : int { attn_q_fp8 = 0 };
#endif
#if defined(ATTN_KV_E4M3)
enum : int { attn_kv_fp8 = 1 };
#elif defined(ATTN_KV_E5M2)
enum : int { attn_kv_fp8 = 2 };
#else
enum : int { attn_kv_fp8 = 0 };
#endif

/* The score chain's values fixed per (b, h) -- reads of per-head or
 * per-batch tensors such as ALiBi's slopes[h], and what is computed from
 * them -- gathered once per work tile by attn_bh_load, so the per-element
 * attn_score_bh does not read memory for them (docs/templates.md). The
 * forward templates call these; attn_score is the same for one element. */
struct attn_bh;
__device__ __forceinline__ attn_bh attn_bh_load(int b, int h,
                                                const attn_params &p);
__device__ __forceinline__ float attn_score_bh(float acc, const attn_bh &c,
                                               int b, int h, int i, int j,
                                               const attn_params &p);
__device__ __forceinline__ float attn_score(float acc, int b, int h, int i,
                                            int j, const attn_params &p);
__device__ __forceinline__ bool attn_keep(int b, int h, int i, int j,
                                          const attn_params &p);
__device__ __forceinline__ bool attn_keep_bh(const attn_bh &c, int b, int h,
                                             int i, int j,
                                             const attn_params &p);
__device__ __forceinline__ void attn_kv_bounds(int b, int h, int i0, int i1,
                                               const attn_params &p,
                                               int &j_lo, int &j_hi);
__device__ __forceinline__ int attn_tile_class(int b, int h, int i0, int i1,
                                               int j0, int j1,
                                               const attn_params &p);
__device__ __forceinline__ float attn_out(float o, int b, int h, int i, int d,
                                          const attn_params &p);
/* An amax output (`output amax_o = amax(x)`, x a function of the output
 * row element): ATTN_AMAX is its tensor slot, an f32[1] a plan step
 * zeroes before the forward; attn_amax_arg gives x for the normalized
 * element o, and the epilogues fold max |x| into it by attn_amax_commit
 * (max of the f32 bits, so a NaN wins as in the CPU reference). */
#if defined(ATTN_AMAX)
enum : int { attn_has_amax = 1, attn_amax_slot = ATTN_AMAX };
__device__ __forceinline__ float attn_amax_arg(float o, int b, int h, int i, int d,
                                               const attn_params &p);
#else
enum : int { attn_has_amax = 0, attn_amax_slot = 0 };
#endif
/* What the epilogues pass to attn_softmax_store: the amax operand of the
 * normalized element x (unused without an amax output). */
static __device__ __forceinline__ float attn_amax_value(float x, int b, int h, int i, int d,
                                                        const attn_params &p) {
#if defined(ATTN_AMAX)
  return attn_amax_arg(x, b, h, i, d, p);
#else
  (void)b, (void)h, (void)i, (void)d, (void)p;
  return x;
#endif
}
/* Every lane of a warp calls it with its running bits: one atomic a warp. */
static __device__ __forceinline__ void attn_amax_commit(unsigned bits, const attn_params &p) {
#pragma unroll
  for (int k = 16; k >= 1; k >>= 1)
    bits = max(bits, __shfl_xor_sync(0xffffffffu, bits, k));
  if ((threadIdx.x & 31) == 0)
    attn_amax_atomic((unsigned *)p.t[attn_amax_slot].ptr, bits);
}

/* P as P V reads it, for `e4m3(p * scale_s) @ v` (the FP8 recipe):
 * ATTN_P_SCALE (the emitter writes attn_p_scale, fixed per (b, h)) and
 * ATTN_P_ROUND (1 e4m3, 2 e5m2). The kernels apply both to the
 * unnormalized P of each key tile, exp(s - m) with m the row's running
 * max, after dropout and after the row sums took it, and normalize after
 * P V, as every flash-attention FP8 kernel does, with m kept an integer in
 * base 2 (softmax.cuh's SNAP) so the CPU reference reproduces each
 * rounding (docs/language.md, "FP8"). attn_p_value is the identity
 * without them. */
#if defined(ATTN_P_SCALE)
enum : int { attn_has_p_scale = 1 };
__device__ __forceinline__ float attn_p_scale(int b, int h, const attn_params &p);
#else
enum : int { attn_has_p_scale = 0 };
#endif
#if defined(ATTN_P_ROUND)
enum : int { attn_p_round = ATTN_P_ROUND };
#else
enum : int { attn_p_round = 0 };
#endif
enum : int { attn_p_mod = attn_has_p_scale || attn_p_round != 0 };
static __device__ __forceinline__ float attn_p_scale_value(int b, int h, const attn_params &p) {
#if defined(ATTN_P_SCALE)
  return attn_p_scale(b, h, p);
#else
  (void)b, (void)h, (void)p;
  return 1.f;
#endif
}
static __device__ __forceinline__ float attn_p_value(float x, float scale) {
  if constexpr (attn_has_p_scale != 0)
    x *= scale;
  if constexpr (attn_p_round == 1)
    return attn_round_e4m3(x);
  else if constexpr (attn_p_round == 2)
    return attn_round_e5m2(x);
  else
    return x;
}

/* A softmax sink (`softmax(s, sink)`): the emitter defines ATTN_SINK and
 * writes attn_sink, the sink's value for (b, h) in natural-log units; the
 * forward epilogues and the decode merge fold it into each row's
 * denominator (softmax.cuh, attn_softmax_sink). attn_sink_value is what
 * the templates call: 0, unused, without one. */
#if defined(ATTN_SINK)
enum : int { attn_has_sink = 1 };
__device__ __forceinline__ float attn_sink(int b, int h, const attn_params &p);
#else
enum : int { attn_has_sink = 0 };
#endif
static __device__ __forceinline__ float attn_sink_value(int b, int h, const attn_params &p) {
#if defined(ATTN_SINK)
  return attn_sink(b, h, p);
#else
  (void)b, (void)h, (void)p;
  return 0.f;
#endif
}

#if defined(ATTN_DROPOUT)
/* Dropout: P is scaled by a factor per element, 0 or 256 / (256 - T),
 * before P V; the row sums and lse stay those of the undropped softmax.
 * The emitter writes two hooks (declared, and called, only for graphs with
 * dropout: an inline function declared but never defined is an error):
 * attn_dropout_words, the four words of the Philox call of the group at
 * (i & ~9, j & ~9) (templates/philox.cuh has the layout: element (i + di,
 * j + dj) is byte 2 (di & 1) + (dj & 1) of word 2 (di >> 3) + (dj >> 3)),
 * and attn_dropout_rate, the f32 rate. Elements outside Sq x Skv get a
 * factor too; callers ignore it. */
__device__ __forceinline__ void attn_dropout_words(int b, int h, int i, int j,
                                                   const attn_params &p, unsigned w[4]);
__device__ __forceinline__ float attn_dropout_rate(const attn_params &p);

/* The threshold T (a byte at or above it is kept) and the survivors'
 * factor, fixed for a launch. */
struct attn_dropout_t {
  unsigned keep_from;
  float kept;
};
static __device__ __forceinline__ attn_dropout_t attn_dropout_params(const attn_params &p) {
  const unsigned t = attn_dropout_keep_from(attn_dropout_rate(p));
  return {t, t >= 256u ? 0.f : 256.f / (float)(256u - t)};
}

/* Whether byte k of a packed word (below) keeps its element: byte >= T,
 * tested without extracting it, masked in place against T << 8k; and x
 * times that element's factor. */
static __device__ __forceinline__ bool attn_dropout_keeps(unsigned w, int k,
                                                          const attn_dropout_t &d) {
  return (w & (0xffu << (8 * k))) >= (d.keep_from << (8 * k));
}
static __device__ __forceinline__ float attn_dropout_apply(float x, unsigned w, int k,
                                                           const attn_dropout_t &d) {
  return attn_dropout_keeps(w, k, d) ? x * d.kept : 0.f;
}

/* __byte_perm selectors taking a lane's own bytes of a word pair (COL:
 * bytes parity and parity + 2 of each word; rows: bytes 2 parity and
 * 2 parity + 1), for the lane whose parity is `odd`. */
template <bool COL>
static __device__ __forceinline__ unsigned attn_dropout_sel(bool odd) {
  return COL ? (odd ? 0x7531u : 0x6420u) : (odd ? 0x7632u : 0x5410u);
}

/* A lane and lane ^ 4 hold the two halves of every group they touch (rows
 * or keys g and g ^ 1 of an accumulator fragment), so each draws one of
 * two groups, A = (ia, ja) and B = (ib, jb), and they swap halves: one
 * Philox call per 16 of a lane's elements. Out: this lane's 8 bytes of A
 * in a[0..1] and of B in bq[0..1], word k holding the elements with
 * di >> 3 == k, byte (COL ? di & 1 : dj & 1) + 2 (dj >> 3) of it. COL:
 * the lane's own parity (bit 2 of its lane index) is the column's, as in
 * the backward's transposed fragments (keys g, g + 8); else the row's.
 * Every lane of the warp must call it (a shuffle). */
template <bool COL>
static __device__ __forceinline__ void attn_dropout_pair(int b, int h, int ia, int ja, int ib,
                                                         int jb, const attn_params &p,
                                                         unsigned (&a)[2], unsigned (&bq)[2]) {
  const bool odd = (threadIdx.x >> 2) & 1u;
  unsigned w[4];
  attn_dropout_words(b, h, odd ? ib : ia, odd ? jb : ja, p, w);
  const unsigned mine = attn_dropout_sel<COL>(odd), theirs = attn_dropout_sel<COL>(!odd);
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const unsigned own = __byte_perm(w[2 * k], w[2 * k + 1], mine);
    const unsigned got =
        __shfl_xor_sync(0xffffffffu, __byte_perm(w[2 * k], w[2 * k + 1], theirs), 4);
    a[k] = odd ? got : own;
    bq[k] = odd ? own : got;
  }
}
/* The same for one group both lanes draw (a tile's odd last block). */
template <bool COL>
static __device__ __forceinline__ void attn_dropout_one(int b, int h, int i, int j,
                                                        const attn_params &p, unsigned (&a)[2]) {
  const bool odd = (threadIdx.x >> 2) & 1u;
  unsigned w[4];
  attn_dropout_words(b, h, i, j, p, w);
#pragma unroll
  for (int k = 0; k < 2; ++k)
    a[k] = __byte_perm(w[2 * k], w[2 * k + 1], attn_dropout_sel<COL>(odd));
}
#endif

/* Element (i, j) survives the bounds and, with MASK (class-1 tiles),
 * attn_keep, its per-(b, h) values from c (attn_bh_load, once per work
 * tile). Out-of-range elements call attn_keep_bh at the clamped
 * (in-range) index and drop the result: hooks never see i >= Sq or j >=
 * Skv, and without a per-element branch the compiler merges a mask's
 * reads (doc[b, i] once per row, doc[b, j] once per key). Behind a branch
 * every element did its own address arithmetic and loads, and a partial
 * document-mask tile cost six full ones (bench/NOTES-sm90.md). */
template <bool MASK>
__device__ __forceinline__ bool attn_keep_in_bh(const attn_bh &c, int b, int h, int i, int j,
                                                const attn_params &p) {
  const bool in = i < p.Sq && j < p.Skv;
  if (MASK)
    return attn_keep_bh(c, b, h, min(i, p.Sq - 1), min(j, p.Skv - 1), p) && in;
  return in;
}

/* The key tiles of width BN a query tile [i0, i1] visits: [n_begin, n_end)
 * covers attn_kv_bounds' range, and attn_next_live skips the tiles
 * attn_tile_class says are wholly masked. fwd_sm80's warps all walk this
 * sequence; fwd_sm90's producer classifies the same range 32 tiles at a
 * time and hands the live ones to its consumers. */
template <int BN>
__device__ __forceinline__ void attn_key_tiles(int b, int h, int i0, int i1,
                                               const attn_params &p,
                                               int &n_begin, int &n_end) {
  int j_lo = 0, j_hi = p.Skv;
  attn_kv_bounds(b, h, i0, i1, p, j_lo, j_hi);
  j_lo = max(j_lo, 0);
  j_hi = min(j_hi, p.Skv);
  n_begin = j_lo / BN;
  n_end = j_hi > j_lo ? (j_hi + BN - 1) / BN : n_begin;
}

/* The first tile at or after n that is not wholly masked, or n_end. */
template <int BN>
__device__ __forceinline__ int attn_next_live(int n, int n_end, int b, int h,
                                              int i0, int i1,
                                              const attn_params &p) {
  for (; n < n_end; ++n) {
    const int j0 = n * BN;
    if (attn_tile_class(b, h, i0, i1, j0, min(j0 + BN, p.Skv) - 1, p) != 0)
      break;
  }
  return n;
}

/* Paged KV caches (docs/language.md "Paged KV caches"): ATTN_KV_TABLE is
 * the page table's slot, ATTN_KV_PAGE_DIM 1 for [pages, page size, Hk, D]
 * (paged) or 2 for [pages, Hk, page size, D] (paged_hnd). Key j of
 * sequence b is row j % page size of page table[b, j / page size]; a page
 * id outside [0, pages) reads as zeros. decode.cuh, fwd_sm80.cuh and
 * fwd_sm90.cuh read them. */
#if defined(ATTN_KV_TABLE)
constexpr bool attn_kv_paged = true;
constexpr int attn_kv_table = ATTN_KV_TABLE, attn_page_dim = ATTN_KV_PAGE_DIM;
#else
constexpr bool attn_kv_paged = false;
constexpr int attn_kv_table = 0, attn_page_dim = 1;
#endif
constexpr int attn_kv_head_dim = attn_kv_paged ? 3 - attn_page_dim : 1; /* K/V's dim of heads */

/* Sequence b's page table and the pages' geometry (k's; v's is the same). */
struct attn_pages {
  const int *table; /* row b */
  long long step;   /* the table's stride between pages */
  int size, count;  /* keys a page, pages in the cache */
  int shift;        /* log2(size) when pow2 */
  bool pow2;
  /* The page (table index) of key j. */
  __device__ __forceinline__ int page_of(int j) const { return pow2 ? j >> shift : j / size; }
  /* Key j's row in tensor t from `head` (its head's base in page 0; EL
   * bytes an element), or nullptr for a page id outside the cache. */
  template <int EL>
  __device__ __forceinline__ const unsigned char *row(const attn_tensor_arg &t,
                                                      const unsigned char *head, int j) const {
    const int pg = page_of(j), r = j - pg * size;
    const int id = __ldg(table + pg * step);
    return (unsigned)id < (unsigned)count
               ? head + ((long long)id * t.stride[0] + (long long)r * t.stride[attn_page_dim]) * EL
               : nullptr;
  }
};
static __device__ __forceinline__ attn_pages attn_pages_of(const attn_params &p, int b) {
  const attn_tensor_arg &tk = p.t[ATTN_TK], &tt = p.t[attn_kv_table];
  attn_pages g;
  g.size = tk.size[attn_page_dim];
  g.count = tk.size[0];
  g.pow2 = (g.size & (g.size - 1)) == 0;
  g.shift = __ffs(g.size) - 1;
  g.table = (const int *)tt.ptr + b * tt.stride[0];
  g.step = tt.stride[1];
  return g;
}

/* Packed sequences (docs/language.md "Packed sequences"): ATTN_PACKED_Q
 * and ATTN_PACKED_KV are the slots of q's and of k/v's i32 [B + 1]
 * offsets; q, k, v and o are bound as declared, [tokens, heads, cols],
 * and lse as [heads, tokens]. A forward launch has ceil(Sq / BM) + B query
 * tiles a head (Sq: q's tokens); each finds its sequence and sees that
 * sequence as a dense batch entry (attn_packed_work), so every hook and
 * the rest of the template run unchanged. */
#if defined(ATTN_PACKED_Q)
enum : int { attn_packed = 1 };

/* Sequence b's first row and length in a packed tensor of `total` rows,
 * from its offsets clamped into [0, total] (and the end to no less than
 * the start): whatever the offsets hold, no kernel reads or writes
 * outside the tensor. */
static __device__ __forceinline__ void attn_seq_rows(const attn_tensor_arg &cu, int b, int total,
                                                     int &start, int &len) {
  const int *c = (const int *)cu.ptr;
  const int s = min(max(attn_read_input(c + b * cu.stride[0]), 0), total);
  const int e = min(max(attn_read_input(c + (b + 1) * cu.stride[0]), s), total);
  start = s;
  len = e - s;
}

/* A packed tensor's argument as one dense batch entry: its rows from row0
 * on, `rows` of them, with the templates' [batch, heads, rows, cols]
 * strides (batch stride 0). Declared [tokens, heads, cols], or, for an lse
 * (STATS), [heads, tokens]. */
template <int EL, bool STATS = false>
static __device__ __forceinline__ void attn_packed_rows(attn_tensor_arg &t, int row0, int rows) {
  const int r = STATS ? 1 : 0, hd = STATS ? 0 : 1;
  const long long sr = t.stride[r], sh = t.stride[hd], sc = STATS ? 0 : t.stride[2];
  const int nh = t.size[hd], nc = STATS ? 1 : t.size[2];
  t.ptr = (unsigned char *)t.ptr + row0 * sr * EL;
  t.stride[0] = 0, t.stride[1] = sh, t.stride[2] = sr, t.stride[3] = sc;
  t.size[0] = 1, t.size[1] = nh, t.size[2] = rows, t.size[3] = nc;
}

/* The tiles of BM rows of a packed tensor's sequences, numbered across
 * them: sequence b owns tiles floor(start_b / BM) + b + m for m <
 * ceil(len_b / BM), disjoint and below ceil(total / BM) + B for
 * nondecreasing offsets cu. Tile x's sequence b (a binary search) and
 * its rows there (start, len); returns m, which b owns when B > 0, m >= 0
 * and m * BM < len. */
template <int BM>
static __device__ __forceinline__ int attn_packed_find(int x, const attn_tensor_arg &cu, int total,
                                                       int B, int &b, int &start, int &len) {
  int lo = 0, hi = max(B - 1, 0);
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    int s, n;
    attn_seq_rows(cu, mid, total, s, n);
    if (s / BM + mid <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  attn_seq_rows(cu, lo, total, start, len);
  b = lo;
  return x - (start / BM + lo);
}

/* The work of query tile x of a packed launch: its sequence b and tile
 * m_block there (attn_packed_find), the first rows q0 and k0 of b's
 * queries and keys (for TMA coordinates), and the problem as the template
 * sees it (Sq and Skv b's lengths, q, k, v, o and lse rebased). A tile no
 * sequence owns gets Sq = Skv = 0 (it visits no key tile and stores
 * nothing), and `owned` false. */
template <int BM>
static __device__ __forceinline__ attn_params attn_packed_work(int x, const attn_params &p, int &b,
                                                               int &m_block, int &q0, int &k0,
                                                               bool &owned) {
  int lq, lk;
  m_block = attn_packed_find<BM>(x, p.t[ATTN_PACKED_Q], p.t[ATTN_TQ].size[0], p.B, b, q0, lq);
#if defined(ATTN_PACKED_KV)
  attn_seq_rows(p.t[ATTN_PACKED_KV], b, p.t[ATTN_TK].size[0], k0, lk);
#else
  /* Packed q against a paged cache: sequence b's keys are its pages, the
   * whole view (row b of the table; a length mask bounds them). */
  k0 = 0;
  lk = p.Skv;
#endif
  owned = p.B > 0 && m_block >= 0 && m_block * BM < lq;
  if (!owned)
    m_block = 0, lq = 0, lk = 0;
  attn_params v = p;
  v.Sq = lq;
  v.Skv = lk;
  /* One tensor in two roles (q @ q^T, or v the same as k) is rebased
   * once: packed by one offsets tensor, its rows are the same. */
  attn_packed_rows<attn_q_fp8 ? 1 : 2>(v.t[ATTN_TQ], q0, lq);
#if defined(ATTN_PACKED_KV)
  if (ATTN_TK != ATTN_TQ)
    attn_packed_rows<attn_kv_fp8 ? 1 : 2>(v.t[ATTN_TK], k0, lk);
  if (ATTN_TV != ATTN_TK && ATTN_TV != ATTN_TQ)
    attn_packed_rows<attn_kv_fp8 ? 1 : 2>(v.t[ATTN_TV], k0, lk);
#endif
  attn_packed_rows<attn_out_kind == 2 ? 4 : attn_out_kind >= 3 ? 1 : 2>(v.t[ATTN_TO], q0, lq);
  if (ATTN_TLSE >= 0)
    attn_packed_rows<4, true>(v.t[ATTN_TLSE >= 0 ? ATTN_TLSE : 0], q0, lq);
  return v;
}
#else
enum : int { attn_packed = 0 };
#endif
