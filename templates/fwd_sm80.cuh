/*
 * fwd_sm80.cuh: the portable forward flash-attention template (sm_80 and
 * later, Hopper included), FlashAttention-2 style.
 *
 * Device-only text for NVRTC: it includes nothing. The emitter pastes it,
 * once per graph, inside that graph's namespace, after attn_abi.h and the
 * graph's ATTN_* definitions; the graph's hooks may come before or after
 * (they are declared below). Everything here lives in the namespace it is
 * pasted into, and the ATTN_* macros are read into constants at the point
 * of inclusion, so the emitter may redefine them before the next graph.
 *
 * Shape of the computation (docs/templates.md has the whole contract):
 * - A CTA owns ATTN_BM query rows of one (batch, head); each of its
 *   ATTN_WARPS warps owns 16 of them, so BM = 16 * WARPS.
 * - Q is loaded once into shared memory (cp.async) and, for head dims up
 *   to 128, copied into registers as mma A fragments; for 256 it stays in
 *   shared memory and is re-read per tile (the registers go to O).
 * - K and V tiles of ATTN_BN keys stream through two shared-memory stages
 *   with cp.async, zero-filled beyond Skv: the next tile's load is in
 *   flight while the current one is multiplied.
 * - S = Q K^T and O += P V use mma.sync m16n8k16 (f16/bf16 in, f32 acc).
 *   P never leaves registers: the S accumulator layout is exactly the A
 *   operand layout once packed to 16 bits. V is read with ldmatrix.trans.
 * - Shared-memory rows are 16-byte chunks XOR-swizzled by (row & 7), so
 *   the eight row addresses of every ldmatrix phase hit distinct banks.
 * - Online softmax in base 2 with a safe max: a row whose keys are all
 *   masked ends with O = 0 and lse = -inf, never NaN.
 */

/* ------------------------------------------------------ configuration */

#if !defined(ATTN_D_QK) || !defined(ATTN_D_V) || !defined(ATTN_BM) ||     \
    !defined(ATTN_BN) || !defined(ATTN_WARPS)
#error "fwd_sm80.cuh needs ATTN_D_QK, ATTN_D_V, ATTN_BM, ATTN_BN, ATTN_WARPS"
#endif
#if !defined(ATTN_TQ) || !defined(ATTN_TK) || !defined(ATTN_TV) ||         \
    !defined(ATTN_TO) || !defined(ATTN_TLSE)
#error "fwd_sm80.cuh needs the tensor slots ATTN_TQ/TK/TV/TO/TLSE"
#endif

/* The tiles' head dims (attn_layout.h, attn_head_tile): whole 64-column
 * swizzle blocks, the columns past the graph's head dims loaded as zeros. */
constexpr int fwd80_dqk = attn_head_tile(ATTN_D_QK);
constexpr int fwd80_dv = attn_head_tile(ATTN_D_V);
/* The MMAs' 16-column steps holding some of q's (S) and v's (O) columns. */
constexpr int fwd80_qk_steps = (ATTN_D_QK + 15) / 16;
constexpr int fwd80_v_steps = (ATTN_D_V + 15) / 16;
constexpr int fwd80_bm = ATTN_BM;
constexpr int fwd80_bn = ATTN_BN;
constexpr int fwd80_warps = ATTN_WARPS;
constexpr int fwd80_threads = ATTN_WARPS * 32;
constexpr int fwd80_tq = ATTN_TQ;
constexpr int fwd80_tk = ATTN_TK;
constexpr int fwd80_tv = ATTN_TV;
constexpr int fwd80_to = ATTN_TO;
constexpr int fwd80_tlse = ATTN_TLSE;

/* Element types: the MMAs' 16-bit type, attn_out_kind, and FP8 q or
 * k/v (attn_q_fp8, attn_kv_fp8: hooks.cuh), whose 8-bit tiles land in
 * staging tiles and are converted into the 16-bit ones the MMAs read. */
constexpr int fwd80_out_kind = attn_out_kind;
constexpr bool fwd80_q8 = attn_q_fp8 != 0, fwd80_kv8 = attn_kv_fp8 != 0;
/* An FP8 KV cache under a bf16 q runs the MMAs in f16, as fwd_sm90 and
 * the decode kernel do: FP8 widens into f16 by one conversion a pair
 * (sm_89 on) or a byte move, into bf16 only through bit work, which bound
 * this kernel's FP8 cache (bench/NOTES-sm90.md, session 28). Each warp
 * rewrites its 16 rows of the Q tile in place as f16 rows times powers of
 * two (ptx.cuh, attn_rows_bf16_to_f16), and S is multiplied back by 2^-e
 * a row. Not where P is scaled but not rounded before P V (such a P may
 * pass f16's range): bf16 then. */
constexpr bool fwd80_q_rescale =
    fwd80_kv8 && !fwd80_q8 && attn_in_bf16 && !(attn_has_p_scale && attn_p_round == 0);
constexpr bool fwd80_in_bf16 = attn_in_bf16 && !fwd80_q_rescale; /* the MMAs' type */
constexpr int fwd80_q_el = fwd80_q8 ? 1 : 2, fwd80_kv_el = fwd80_kv8 ? 1 : 2;

/* A paged KV cache (hooks.cuh, attn_kv_paged): rows gathered one by one
 * through the table (attn_cp_rows). */
constexpr bool fwd80_paged = attn_kv_paged;
constexpr int fwd80_kv_head_dim = attn_kv_head_dim;

/* Head dims are whole multiples of 64 so that a row holds a multiple of
 * eight 16-byte chunks, which the (row & 7) swizzle needs. */
static_assert(attn_head_dim_ok(ATTN_D_QK) && attn_head_dim_ok(ATTN_D_V),
              "head dims: multiples of 8 up to 256");
static_assert(fwd80_bm == 16 * fwd80_warps, "each warp owns 16 query rows");
static_assert(fwd80_bn % 16 == 0 && fwd80_bn >= 16, "BN: a multiple of 16");

/* Q fragments stay in registers up to D 128; at 256 the O accumulator
 * needs those registers, so Q is re-read from shared memory per tile. */
constexpr bool fwd80_q_in_regs = fwd80_dqk <= 128;

/* Shared memory, in bytes: the Q tile, then two stages of (K tile, V
 * tile), then FP8's conversion and staging tiles, as abi/attn_layout.h
 * defines it for compiler/tmpl_sm80.c too. */
constexpr attn_fwd80_layout fwd80_layout =
    attn_fwd80_layout_of(fwd80_bm, fwd80_bn, fwd80_dqk, fwd80_dv, fwd80_q_el, fwd80_kv_el);
constexpr int fwd80_q_bytes = fwd80_layout.q_bytes;
constexpr int fwd80_k_bytes = fwd80_layout.k_bytes;
constexpr int fwd80_stage_bytes = fwd80_layout.stage_bytes;
constexpr int attn_fwd_sm80_smem_bytes = fwd80_layout.total;
static_assert(attn_fwd_sm80_smem_bytes <= 227 * 1024,
              "the tiles exceed every target's shared memory");

/* The hooks: templates/hooks.cuh, pasted before this text. */

/* PTX wrappers: templates/ptx.cuh, included once before the graphs. */

static __device__ __forceinline__ unsigned fwd80_pack_in(float lo, float hi) {
  return attn_pack2<fwd80_in_bf16>(lo, hi);
}

/* ------------------------------------------------------ tile movement */

/* The storage type of an element of EL bytes (pointer arithmetic in
 * elements, as the 16-bit-only template had it: the same SASS). */
template <int EL> struct fwd80_elem { typedef unsigned short t; };
template <> struct fwd80_elem<1> { typedef unsigned char t; };

/* Starts the copy of a swizzled tile by the CTA (ptx.cuh, attn_cp_tile):
 * rows row0.. of D elements of EL bytes (the tile's dim) of which the
 * tensor has D_REAL, zero-filled at or beyond row_end and past column
 * D_REAL; base and row_stride in bytes. */
template <int ROWS, int D, int D_REAL, int EL>
static __device__ __forceinline__ void
fwd80_load_tile(unsigned dst, const unsigned char *base, long long row_stride,
                int row0, int row_end, int tid) {
  attn_cp_tile<ROWS, D * EL, fwd80_threads, D_REAL * EL>(dst, base, row_stride, row0, row_end,
                                                        tid);
}

/* ------------------------------------------------------- the kernel body */

/* The score chain on a whole S tile, written once (a copy per test cost
 * NVRTC time: issue 19), for a chain that reads no memory; fwd80_mask then
 * drops the elements past the edges and those the masks reject. */
static __device__ __forceinline__ void fwd80_score_tile(float (&s)[fwd80_bn / 8][4],
                                                        const attn_bh &c, int b, int h, int i_row,
                                                        int j_col, const attn_params &p) {
#pragma unroll
  for (int nt = 0; nt < fwd80_bn / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = i_row + (e >> 1) * 8, j = j_col + nt * 8 + (e & 1);
      s[nt][e] = attn_score_bh(s[nt][e], c, b, h, i, j, p);
    }
  }
}

/* A chain that reads memory, applied only to the elements kept (GENERAL:
 * in range and, with mask, kept by attn_keep; their hooks never see the
 * others): one copy with clamped reads, as fwd80_score_tile makes, spilled
 * 28 bytes at D 128 on sm_80 (examples/bias.attn), so these keep two. */
template <bool GENERAL>
static __device__ __forceinline__ void
fwd80_scores_kept(float (&s)[fwd80_bn / 8][4], const attn_bh &c, int b, int h, int i_row,
                  int j_col, bool mask, const attn_params &p) {
  const float neg_inf = __int_as_float(0xff800000);
#pragma unroll
  for (int nt = 0; nt < fwd80_bn / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      int i = i_row + (e >> 1) * 8;
      int j = j_col + nt * 8 + (e & 1);
      if (GENERAL) {
        bool keep = i < p.Sq && j < p.Skv && (!mask || attn_keep_bh(c, b, h, i, j, p));
        s[nt][e] = keep ? attn_score_bh(s[nt][e], c, b, h, i, j, p) : neg_inf;
      } else {
        s[nt][e] = attn_score_bh(s[nt][e], c, b, h, i, j, p);
      }
    }
  }
}

/* Makes the elements out of range and, with MASK (class 1 tiles), those
 * attn_keep rejects -inf. */
template <bool MASK>
static __device__ __forceinline__ void fwd80_mask(float (&s)[fwd80_bn / 8][4], const attn_bh &c,
                                                  int b, int h, int i_row, int j_col,
                                                  const attn_params &p) {
  const float neg_inf = __int_as_float(0xff800000);
#pragma unroll
  for (int nt = 0; nt < fwd80_bn / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = i_row + (e >> 1) * 8, j = j_col + nt * 8 + (e & 1);
      s[nt][e] = attn_keep_in_bh<MASK>(c, b, h, i, j, p) ? s[nt][e] : neg_inf;
    }
  }
}

/* Query tile m_block of (b, h). */
static __device__ __forceinline__ void fwd80_tile(const attn_params &p, int m_block, int h, int b) {
  extern __shared__ __align__(128) unsigned char fwd80_smem[];
  const float neg_inf = __int_as_float(0xff800000);

  const int tid = threadIdx.x;
  const int warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3; /* mma fragment coordinates */
  const int hk = h / (p.H / p.Hk);
  const int i0 = m_block * fwd80_bm;
  const int i_last = min(i0 + fwd80_bm, p.Sq) - 1;
  const bool row_edge = i0 + fwd80_bm > p.Sq;

  const attn_tensor_arg &tq = p.t[fwd80_tq];
  const attn_tensor_arg &tk = p.t[fwd80_tk];
  const attn_tensor_arg &tv = p.t[fwd80_tv];
  const unsigned char *qg = (const unsigned char *)((const fwd80_elem<fwd80_q_el>::t *)tq.ptr +
                                                     b * tq.stride[0] + h * tq.stride[1]);
  const unsigned char *kg =
      (const unsigned char *)((const fwd80_elem<fwd80_kv_el>::t *)tk.ptr +
                              (fwd80_paged ? 0 : b * tk.stride[0]) +
                              hk * tk.stride[fwd80_kv_head_dim]);
  const unsigned char *vg =
      (const unsigned char *)((const fwd80_elem<fwd80_kv_el>::t *)tv.ptr +
                              (fwd80_paged ? 0 : b * tv.stride[0]) +
                              hk * tv.stride[fwd80_kv_head_dim]);
  /* Paged: key j's row through sequence b's page table (hooks.cuh). */
  const attn_pages pages = attn_pages_of(p, b);
  auto page_row = [&](const attn_tensor_arg &tx, const unsigned char *head, int j) {
    return pages.row<fwd80_kv_el>(tx, head, j);
  };

  const unsigned sq = attn_smem_addr(fwd80_smem);
  const unsigned skv = sq + fwd80_q_bytes; /* stage s at skv + s*stage */
  const unsigned sconv = sq + fwd80_layout.conv_offset; /* FP8 K/V, converted */
  const unsigned sq8 = sq + fwd80_layout.q8_offset;     /* FP8 Q, as loaded */

  /* Key tiles to visit: those overlapping the hook's bounds. */
  int n_begin, n_end;
  attn_key_tiles<fwd80_bn>(b, h, i0, i_last, p, n_begin, n_end);

  /* The next tile at or after n that is not fully masked. */
  auto next_live = [&](int n) {
    return attn_next_live<fwd80_bn>(n, n_end, b, h, i0, i_last, p);
  };
  auto load_kv = [&](int n, int stage) {
    unsigned dst = skv + stage * fwd80_stage_bytes;
    if constexpr (fwd80_paged) {
      attn_cp_rows<fwd80_bn, fwd80_dqk * fwd80_kv_el, fwd80_threads, ATTN_D_QK * fwd80_kv_el>(
          dst, [&](int j) { return page_row(tk, kg, j); }, kg, n * fwd80_bn, p.Skv, tid);
      attn_cp_rows<fwd80_bn, fwd80_dv * fwd80_kv_el, fwd80_threads, ATTN_D_V * fwd80_kv_el>(
          dst + fwd80_k_bytes, [&](int j) { return page_row(tv, vg, j); }, vg, n * fwd80_bn,
          p.Skv, tid);
    } else {
      fwd80_load_tile<fwd80_bn, fwd80_dqk, ATTN_D_QK, fwd80_kv_el>(
          dst, kg, tk.stride[2] * fwd80_kv_el, n * fwd80_bn, p.Skv, tid);
      fwd80_load_tile<fwd80_bn, fwd80_dv, ATTN_D_V, fwd80_kv_el>(
          dst + fwd80_k_bytes, vg, tv.stride[2] * fwd80_kv_el, n * fwd80_bn, p.Skv, tid);
    }
  };

  /* Group 0: Q. Group 1: the first live K/V tile (maybe empty). */
  fwd80_load_tile<fwd80_bm, fwd80_dqk, ATTN_D_QK, fwd80_q_el>(
      fwd80_q8 ? sq8 : sq, qg, tq.stride[2] * fwd80_q_el, i0, p.Sq, tid);
  attn_cp_async_commit();
  int n = next_live(n_begin);
  if (n < n_end)
    load_kv(n, 0);
  attn_cp_async_commit();

  /* Per-lane ldmatrix byte offsets (docs/templates.md has the maps).
   * Every address's swizzle key is lane & 7, and XOR with it only touches
   * the low three bits of a chunk index, so chunk c of a row lands at
   * ((c & 7) ^ key) + (c & ~7): four per-lane offsets (one per value of
   * c & 7 / 2) plus compile-time immediates cover every ldmatrix. */
  const int sw = lane & 7;
  unsigned q_off[4], k_off[4], v_off[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    /* A operand of Q: rows 0-15 of the warp's strip, then k 0-7 / 8-15. */
    q_off[c] = (warp * 16 + (lane & 15)) * fwd80_dqk * 2 +
               (((2 * c + (lane >> 4)) ^ sw) << 4);
    /* B operand of K for two n8 tiles: keys 0-7 / 8-15 by lane >> 4. */
    k_off[c] = ((lane & 7) + ((lane >> 4) << 3)) * fwd80_dqk * 2 +
               (((2 * c + ((lane >> 3) & 1)) ^ sw) << 4);
    /* Transposed B operand of V: keys 0-15, then dv 0-7 / 8-15. */
    v_off[c] = ((lane & 7) + (((lane >> 3) & 1) << 3)) * fwd80_dv * 2 +
               (((2 * c + (lane >> 4)) ^ sw) << 4);
  }

  if constexpr (fwd80_q8) { /* Q's 8-bit tile into the 16-bit one, once */
    attn_cp_async_wait<1>();
    __syncthreads();
    attn_convert_tile<fwd80_bm, fwd80_dqk, fwd80_threads, attn_q_fp8 == 1, fwd80_in_bf16>(sq8, sq,
                                                                                        tid);
  }
  if constexpr (fwd80_q_rescale || fwd80_q_in_regs) { /* Q has landed */
    attn_cp_async_wait<1>();
    __syncthreads();
  }
  /* fwd80_q_rescale: the warp's rows of Q into f16 (its ldmatrix reads
   * only its own rows, so a warp barrier orders them), and S's factor of
   * the lane's rows g and g + 8. */
  float qinv[2] = {1.f, 1.f};
  if constexpr (fwd80_q_rescale) {
    attn_rows_bf16_to_f16<fwd80_dqk / 64 * 4>(
        [&](int k) {
          return sq + (warp * 16 + (lane >> 3) + 4 * (k & 3)) * fwd80_dqk * 2 +
                 ((k >> 2) * 8 + (lane & 7)) * 16;
        },
        lane, qinv);
    __syncwarp();
  }
  unsigned qf[fwd80_q_in_regs ? fwd80_qk_steps : 1][4];
  if constexpr (fwd80_q_in_regs) {
#pragma unroll
    for (int kk = 0; kk < fwd80_qk_steps; ++kk)
      attn_ldsm_x4(qf[kk], sq + q_off[kk & 3] + (kk >> 2) * 128);
  }

  float o[2 * fwd80_v_steps][4];
#pragma unroll
  for (int nt = 0; nt < 2 * fwd80_v_steps; ++nt)
    o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
  float row_max[2] = {neg_inf, neg_inf}; /* natural-log units */
  float row_sum[2] = {0.f, 0.f};         /* this lane's partial sums */

  const int i_row = i0 + warp * 16 + g;
  const attn_bh bhc = attn_bh_load(b, h, p); /* once per CTA */
  const float p_sc = attn_p_scale_value(b, h, p); /* P's scale before P V */
#if defined(ATTN_DROPOUT)
  const attn_dropout_t drop_t = attn_dropout_params(p);
#endif
  int stage = 0;
  unsigned long long visited = 0;
  while (n < n_end) {
    const int nn = next_live(n + 1);
    if (nn < n_end)
      load_kv(nn, stage ^ 1);
    attn_cp_async_commit();
    attn_cp_async_wait<1>(); /* tile n (and Q) have landed */
    __syncthreads();
    ++visited;

    unsigned ks = skv + stage * fwd80_stage_bytes;
    unsigned vs = ks + fwd80_k_bytes;
    if constexpr (fwd80_kv8) { /* the stage into the 16-bit tiles the MMAs read */
      attn_convert_tile<fwd80_bn, fwd80_dqk, fwd80_threads, attn_kv_fp8 == 1, fwd80_in_bf16>(
          ks, sconv, tid);
      attn_convert_tile<fwd80_bn, fwd80_dv, fwd80_threads, attn_kv_fp8 == 1, fwd80_in_bf16>(
          vs, sconv + fwd80_layout.conv_k_bytes, tid);
      __syncthreads();
      ks = sconv;
      vs = sconv + fwd80_layout.conv_k_bytes;
    }

    /* S = Q K^T */
    float s[fwd80_bn / 8][4];
#pragma unroll
    for (int nt = 0; nt < fwd80_bn / 8; ++nt)
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < fwd80_qk_steps; ++kk) {
      unsigned qa[4];
      if constexpr (fwd80_q_in_regs) {
        qa[0] = qf[kk][0], qa[1] = qf[kk][1], qa[2] = qf[kk][2],
        qa[3] = qf[kk][3];
      } else {
        attn_ldsm_x4(qa, sq + q_off[kk & 3] + (kk >> 2) * 128);
      }
#pragma unroll
      for (int np = 0; np < fwd80_bn / 16; ++np) {
        unsigned kb[4];
        attn_ldsm_x4(kb, ks + k_off[kk & 3] + (kk >> 2) * 128 +
                              np * 16 * fwd80_dqk * 2);
        attn_mma16816<fwd80_in_bf16>(s[2 * np], qa, kb[0], kb[1]);
        attn_mma16816<fwd80_in_bf16>(s[2 * np + 1], qa, kb[2], kb[3]);
      }
    }

    if constexpr (fwd80_q_rescale) {
#pragma unroll
      for (int nt = 0; nt < fwd80_bn / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[nt][e] *= qinv[e >> 1];
    }

    /* The score chain and the masks. */
    const int j0 = n * fwd80_bn;
    const int j1 = min(j0 + fwd80_bn, p.Skv) - 1;
    const int cls = attn_tile_class(b, h, i0, i_last, j0, j1, p);
    const bool col_edge = j0 + fwd80_bn > p.Skv;
    if constexpr (attn_score_reads) {
      if (cls == 2 && !row_edge && !col_edge)
        fwd80_scores_kept<false>(s, bhc, b, h, i_row, j0 + 2 * t, false, p);
      else
        fwd80_scores_kept<true>(s, bhc, b, h, i_row, j0 + 2 * t, cls != 2, p);
    } else {
      fwd80_score_tile(s, bhc, b, h, i_row, j0 + 2 * t, p);
      if (cls != 2)
        fwd80_mask<true>(s, bhc, b, h, i_row, j0 + 2 * t, p);
      else if (row_edge || col_edge)
        fwd80_mask<false>(s, bhc, b, h, i_row, j0 + 2 * t, p);
    }

    /* Online softmax, rows g (r = 0) and g + 8 (r = 1): softmax.cuh. */
    attn_softmax_tile<fwd80_bn / 8, attn_p_round != 0>(
        [&](int nt, int k) -> float & { return s[nt][k]; }, row_max, row_sum,
        [&](int r, float a) {
#pragma unroll
          for (int nt = 0; nt < 2 * fwd80_v_steps; ++nt) {
            o[nt][2 * r] *= a;
            o[nt][2 * r + 1] *= a;
          }
        });
#if defined(ATTN_DROPOUT)
    /* After the row sums: dropout changes what P V adds, not the
     * normalizer. Masked elements are 0 whatever the factor. s[nt][2r + x]
     * is (i_row + 8r, j0 + 8nt + 2t + x); i_row = i0 + 16 warp + g and j0
     * (a multiple of BN, itself of 16) have bit 3 clear, so 16-key block m
     * holds this lane's half of the group at (i_row & ~1, j0 + 16m + 2t):
     * rows r, bytes x + 2 n1 for s[2m + n1][2r + x] (hooks.cuh,
     * attn_dropout_pair). */
    {
      auto drop = [&](int m, const unsigned (&wd)[2]) {
#pragma unroll
        for (int n1 = 0; n1 < 2; ++n1)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            s[2 * m + n1][e] = attn_dropout_apply(s[2 * m + n1][e], wd[e >> 1], (e & 1) + 2 * n1,
                                                  drop_t);
      };
#pragma unroll
      for (int m = 0; m + 1 < fwd80_bn / 16; m += 2) {
        unsigned wa[2], wb[2];
        attn_dropout_pair<false>(b, h, i_row, j0 + 16 * m + 2 * t, i_row, j0 + 16 * m + 16 + 2 * t,
                                 p, wa, wb);
        drop(m, wa);
        drop(m + 1, wb);
      }
      if constexpr (fwd80_bn / 16 % 2 == 1) {
        unsigned wa[2];
        attn_dropout_one<false>(b, h, i_row, j0 + fwd80_bn - 16 + 2 * t, p, wa);
        drop(fwd80_bn / 16 - 1, wa);
      }
    }
#endif

    /* P as P V reads it (hooks.cuh: `e4m3(p * scale) @ v`). */
    if constexpr (attn_p_mod != 0) {
#pragma unroll
      for (int nt = 0; nt < fwd80_bn / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[nt][e] = attn_p_value(s[nt][e], p_sc);
    }

    /* O += P V, P straight from the S registers. */
#pragma unroll
    for (int kk = 0; kk < fwd80_bn / 16; ++kk) {
      unsigned pa[4];
      pa[0] = fwd80_pack_in(s[2 * kk][0], s[2 * kk][1]);
      pa[1] = fwd80_pack_in(s[2 * kk][2], s[2 * kk][3]);
      pa[2] = fwd80_pack_in(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[3] = fwd80_pack_in(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int np = 0; np < fwd80_v_steps; ++np) {
        unsigned vb[4];
        attn_ldsm_x4_trans(vb, vs + v_off[np & 3] + (np >> 2) * 128 +
                                    kk * 16 * fwd80_dv * 2);
        attn_mma16816<fwd80_in_bf16>(o[2 * np], pa, vb[0], vb[1]);
        attn_mma16816<fwd80_in_bf16>(o[2 * np + 1], pa, vb[2], vb[3]);
      }
    }

    __syncthreads(); /* this stage may be overwritten from now on */
    n = nn;
    stage ^= 1;
  }
  attn_cp_async_wait<0>();

  if (tid == 0 && p.tiles_visited)
    atomicAdd(p.tiles_visited, visited);

  /* Normalize and store (softmax.cuh), folding an amax output's operand
   * into the warp's one atomic. */
  const unsigned amax =
      attn_softmax_store<ATTN_D_V / 8, fwd80_out_kind, (fwd80_tlse >= 0), (attn_has_sink != 0),
                         (attn_has_amax != 0)>(
          [&](int nt, int k) -> float & { return o[nt][k]; }, row_max, row_sum, i_row, t, b, h,
          fwd80_to, fwd80_tlse >= 0 ? fwd80_tlse : 0, p, p.Sq,
          [&](float x, int i, int d) { return attn_out(x, b, h, i, d, p); },
          attn_sink_value(b, h, p),
          [&](float x, int i, int d) { return attn_amax_value(x, b, h, i, d, p); });
  if constexpr (attn_has_amax != 0)
    attn_amax_commit(amax, p);
  (void)amax;
}

/* One CTA a query tile: the tiles of (b, h) in reverse blockIdx.x order,
 * heavy first under a causal mask; packed sequences find theirs
 * (hooks.cuh, attn_packed_work) and leave a tile no sequence owns. */
__device__ __forceinline__ void attn_fwd_sm80(const attn_params &p) {
  const int x = (int)gridDim.x - 1 - (int)blockIdx.x;
#if defined(ATTN_PACKED_Q)
  int b, m_block, q0, k0;
  bool owned;
  const attn_params ps = attn_packed_work<fwd80_bm>(x, p, b, m_block, q0, k0, owned);
  if (owned)
    fwd80_tile(ps, m_block, blockIdx.y, b);
#else
  fwd80_tile(p, x, blockIdx.y, blockIdx.z);
#endif
}
