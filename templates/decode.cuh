/*
 * decode.cuh: the decode forward (few queries against a long KV cache),
 * split over the keys (flash-decoding), with the query heads that share a
 * K/V head packed into the rows of one tile (GQA packing). Portable
 * (mma.sync, ldmatrix, cp.async: sm_80 and later, Hopper included): the
 * kernel is bound by reading K and V once, not by its tensor cores.
 *
 * Device-only text for NVRTC, pasted once per graph inside its namespace
 * after the forward template and the graph's hooks (hooks.cuh), like the
 * other templates. The plan runs it in place of the forward when the
 * packed rows of one K/V head, (H / Hk) * Sq, are few (compiler/plan.c,
 * "decode"); docs/templates.md has the contract.
 *
 * - Rows. The queries of one (b, hk) are R = (H / Hk) * Sq packed rows,
 *   head-major: row r is query r % Sq of head hk * (H / Hk) + r / Sq. A
 *   CTA owns 16 of them (one mma row block; grid y = Hk * ceil(R / 16)),
 *   so every K/V tile is read once per 16 rows, not once per query head.
 *   Each head's rows are a contiguous query range, so the hooks' tile
 *   classes and key bounds are asked per head and combined.
 * - Keys. Grid x is the split count: split s takes its share of the key
 *   tiles the rows may keep (attn_key_tiles over the block's heads, as
 *   the forward's), in tiles of ATTN_DEC_BN keys that stream through
 *   ATTN_DEC_STAGES cp.async stages; each of the CTA's BN / 16 warps
 *   multiplies its own 16 keys of every tile with the whole row block, so
 *   the warps keep separate online softmaxes (softmax.cuh) and the CTA
 *   combines them at the end through shared memory.
 * - Output. With one split the CTA writes O (through attn_out) and lse as
 *   the forward does. With several it writes its normalized partial O in
 *   f32 and its lse to the plan's workspace ([split][b][h][i]) and
 *   attn_decode_merge combines the splits in split order: the same inputs
 *   and split count give the same bits, and the split count is a function
 *   of the shapes and the SM count (plan.c, plan_decode_splits).
 * - Rows past R compute on a clamped row (hooks never see an index out of
 *   range) and are dropped. A row whose keys are all masked ends with
 *   O = 0 and lse = -inf, as in the forward.
 */

#if !defined(ATTN_DEC_BN) || !defined(ATTN_DEC_STAGES) || !defined(ATTN_DEC_TPO) || \
    !defined(ATTN_DEC_TPL)
#error "decode.cuh needs ATTN_DEC_BN, ATTN_DEC_STAGES, ATTN_DEC_TPO, ATTN_DEC_TPL"
#endif

/* The tiles' head dims (attn_layout.h, attn_head_tile), the columns past
 * the graph's own loaded as zeros, and the MMAs' 16-column steps that hold
 * some of q's (S) and v's (O) columns. Partial rows and the output have
 * the graph's ATTN_D_V columns. */
constexpr int dec_dqk = attn_head_tile(ATTN_D_QK);
constexpr int dec_dv = attn_head_tile(ATTN_D_V);
constexpr int dec_qk_steps = (ATTN_D_QK + 15) / 16;
constexpr int dec_v_steps = (ATTN_D_V + 15) / 16;
constexpr int dec_bn = ATTN_DEC_BN;
constexpr int dec_stages = ATTN_DEC_STAGES;
constexpr int dec_warps = dec_bn / 16; /* each warp takes 16 keys of a tile */
constexpr int dec_threads = dec_warps * 32;
constexpr int dec_rows = 16; /* packed rows per CTA */
constexpr int dec_tq = ATTN_TQ, dec_tk = ATTN_TK, dec_tv = ATTN_TV;
constexpr int dec_to = ATTN_TO, dec_tlse = ATTN_TLSE;
constexpr int dec_tpo = ATTN_DEC_TPO, dec_tpl = ATTN_DEC_TPL; /* partial O, lse */
constexpr int dec_out_kind = attn_out_kind;
/* An FP8 KV cache (ATTN_KV_E4M3 or ATTN_KV_E5M2): 8-bit K/V stages, each
 * converted (exactly) into one 16-bit K/V tile of the MMAs' type. */
#if defined(ATTN_KV_E4M3) || defined(ATTN_KV_E5M2)
constexpr bool dec_kv8 = true;
#else
constexpr bool dec_kv8 = false;
#endif
/* Under a bf16 q the MMAs run in f16, as fwd_sm90's do (fwd90_q_rescale):
 * FP8 widens into f16 by one conversion a pair (sm_89 on) or a byte move
 * (e5m2), into bf16 only through bit work, and the conversion pass bounds
 * this kernel (bench/RESULTS.md, session 10's ncu). q's fragments become
 * f16 in registers, each row times a power of two (dec_q_to_f16) whose
 * inverse multiplies S. Not where P is scaled but not rounded before P V
 * (such a P may pass f16's range): bf16 then. */
constexpr bool dec_q_rescale =
    dec_kv8 && attn_in_bf16 && !(attn_has_p_scale && attn_p_round == 0);
constexpr bool dec_in_bf16 = attn_in_bf16 && !dec_q_rescale; /* the MMAs' type */
#if defined(ATTN_KV_E4M3)
constexpr bool dec_kv_e4m3 = true;
#else
constexpr bool dec_kv_e4m3 = false;
#endif
constexpr int dec_kv_bytes = dec_kv8 ? 1 : 2;
/* A paged KV cache (hooks.cuh, attn_kv_paged). */
constexpr bool dec_paged = attn_kv_paged;
constexpr int dec_page_dim = attn_page_dim, dec_head_dim = attn_kv_head_dim;
/* Paged K and V tiles of one width whose rows divide the CTA evenly (the
 * usual case): each thread copies the same rows of both, so it looks up
 * their pages once, and a tile ahead (dec_paged_ids), so the table's
 * latency hides behind a tile's compute instead of stalling the CTA at
 * every refill (measured: 0.48x dense without it). Other shapes look up
 * per copy (attn_cp_rows). */
constexpr int dec_row_chunks = dec_dqk * dec_kv_bytes / 16;
constexpr bool dec_paged_ahead = dec_paged && dec_dqk == dec_dv &&
                                 dec_threads % dec_row_chunks == 0 &&
                                 dec_bn % (dec_threads / dec_row_chunks) == 0;
constexpr int dec_row_step = dec_paged_ahead ? dec_threads / dec_row_chunks : 1;
constexpr int dec_thread_rows = dec_paged_ahead ? dec_bn / dec_row_step : 1;
/* The merge: one CTA of this many threads per output row, and at most
 * this many splits (plan.c caps the split count at it). */
constexpr int dec_merge_threads = 128;
constexpr int dec_max_splits = 128;

static_assert(attn_head_dim_ok(ATTN_D_QK) && attn_head_dim_ok(ATTN_D_V),
              "head dims: multiples of 8 up to 256");
static_assert(!dec_kv8 || (ATTN_D_QK % 16 == 0 && ATTN_D_V % 16 == 0),
              "8-bit K/V rows of whole 16-byte chunks");
static_assert(dec_bn % 16 == 0 && dec_bn >= 32 && dec_bn <= 128, "BN: 32 to 128 keys");
static_assert(dec_stages >= 2, "two stages at least");

constexpr attn_dec_layout dec_layout =
    attn_dec_layout_of(dec_bn, dec_stages, dec_dqk, dec_dv, dec_kv_bytes);
constexpr int attn_decode_smem_bytes = dec_layout.total;
static_assert(attn_decode_smem_bytes <= 227 * 1024, "the stages exceed shared memory");

/* The CTA's packed rows and the heads they span. */
struct dec_block {
  int b, hk, group; /* group = H / Hk */
  int r0, r_last;   /* packed rows [r0, r_last] of this (b, hk) */
  int x_first, x_last; /* heads hk * group + x for x in [x_first, x_last] */
};

/* Query range [qa, qb] of head x within the block's rows. */
static __device__ __forceinline__ void dec_head_rows(const dec_block &k, int x, int sq, int &qa,
                                                     int &qb) {
  qa = max(k.r0, x * sq) - x * sq;
  qb = min(k.r_last, x * sq + sq - 1) - x * sq;
}

/* The block's class for keys [j0, j1]: 0 when every head's rows mask them
 * all, 2 when every head's rows keep them all, else 1. */
static __device__ __forceinline__ int dec_tile_class(const dec_block &k, int j0, int j1,
                                                     const attn_params &p) {
  int lo = 2, any = 0;
  for (int x = k.x_first; x <= k.x_last; ++x) {
    int qa, qb;
    dec_head_rows(k, x, p.Sq, qa, qb);
    const int c = attn_tile_class(k.b, k.hk * k.group + x, qa, qb, j0, j1, p);
    lo = min(lo, c);
    any |= c;
  }
  return any == 0 ? 0 : lo;
}

/* The first tile at or after n, below n_end, that the block does not
 * wholly mask. */
static __device__ __forceinline__ int dec_next_live(const dec_block &k, int n, int n_end,
                                                    const attn_params &p) {
  for (; n < n_end; ++n) {
    const int j0 = n * dec_bn;
    if (dec_tile_class(k, j0, min(j0 + dec_bn, p.Skv) - 1, p) != 0)
      break;
  }
  return n;
}

/* dec_q_rescale: the lane's q fragments (m16n8k16 A: registers 0 and 2
 * hold row g, 1 and 3 row g + 8) rewritten in registers from bf16 into f16
 * rows times powers of two (ptx.cuh, attn_bf16x2_top and the pieces beside
 * it: the rule fwd_sm90 and fwd_sm80 apply in shared memory), a row's
 * maximum over its quad's four lanes; qinv gets 2^-e of rows g and g + 8. */
static __device__ __forceinline__ void dec_q_to_f16(unsigned (&qf)[dec_qk_steps][4],
                                                    float (&qinv)[2]) {
  unsigned top[2] = {0u, 0u};
#pragma unroll
  for (int kk = 0; kk < dec_qk_steps; ++kk)
#pragma unroll
    for (int x = 0; x < 4; ++x)
      top[x & 1] = attn_bf16x2_top(top[x & 1], qf[kk][x]);
  float up[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    top[r] = max(top[r], __shfl_xor_sync(0xffffffffu, top[r], 1));
    top[r] = max(top[r], __shfl_xor_sync(0xffffffffu, top[r], 2));
    attn_row_pow2(top[r], up[r], qinv[r]);
  }
#pragma unroll
  for (int kk = 0; kk < dec_qk_steps; ++kk)
#pragma unroll
    for (int x = 0; x < 4; ++x)
      qf[kk][x] = attn_bf16x2_to_f16x2(qf[kk][x], up[x & 1]);
}

__device__ __forceinline__ void attn_decode(const attn_params &p) {
  extern __shared__ __align__(128) unsigned char dec_smem[];
  const float neg_inf = __int_as_float(0xff800000);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3; /* mma fragment coordinates */

  dec_block blk;
  blk.group = p.H / p.Hk;
  const int R = blk.group * p.Sq;
  const int nrb = (R + dec_rows - 1) / dec_rows;
  blk.hk = (int)blockIdx.y / nrb;
  blk.r0 = ((int)blockIdx.y % nrb) * dec_rows;
  blk.r_last = min(blk.r0 + dec_rows, R) - 1;
  blk.b = blockIdx.z;
  blk.x_first = blk.r0 / p.Sq;
  blk.x_last = blk.r_last / p.Sq;
  const int b = blk.b;
  const int split = blockIdx.x, nsplit = gridDim.x;

  const attn_tensor_arg &tq = p.t[dec_tq];
  const attn_tensor_arg &tk = p.t[dec_tk];
  const attn_tensor_arg &tv = p.t[dec_tv];
  /* Dense: the (b, hk) rows' base. Paged: the head's base in page 0. */
  const unsigned char *kg = (const unsigned char *)tk.ptr +
                            ((dec_paged ? 0 : b * tk.stride[0]) + blk.hk * tk.stride[dec_head_dim]) *
                                dec_kv_bytes;
  const unsigned char *vg = (const unsigned char *)tv.ptr +
                            ((dec_paged ? 0 : b * tv.stride[0]) + blk.hk * tv.stride[dec_head_dim]) *
                                dec_kv_bytes;
  const unsigned sq_addr = attn_smem_addr(dec_smem);
  const unsigned skv = sq_addr + dec_layout.q_bytes; /* stage s at skv + s * stage */

  /* The tiles any of the block's heads may keep, and this split's share. */
  int n_lo = 0, n_hi = 0;
  for (int x = blk.x_first; x <= blk.x_last; ++x) {
    int qa, qb, nb, ne;
    dec_head_rows(blk, x, p.Sq, qa, qb);
    attn_key_tiles<dec_bn>(b, blk.hk * blk.group + x, qa, qb, p, nb, ne);
    if (ne <= nb)
      continue;
    n_lo = n_hi > n_lo ? min(n_lo, nb) : nb;
    n_hi = max(n_hi, ne);
  }
  const int per_split = (n_hi - n_lo + nsplit - 1) / nsplit;
  const int n_begin = min(n_lo + split * per_split, n_hi);
  const int n_end = min(n_begin + per_split, n_hi);

  /* Q: the 16 packed rows (zeros past R), group 0 of the pipeline. */
  {
    constexpr int chunks = dec_dqk / 8;
    for (int c = tid; c < dec_rows * chunks; c += dec_threads) {
      const int r = c / chunks, ch = c % chunks, rr = blk.r0 + r;
      const bool in = rr < R && ch * 8 < ATTN_D_QK;
      const int h = blk.hk * blk.group + (in ? rr / p.Sq : 0), i = in ? rr % p.Sq : 0;
      const unsigned short *src = (const unsigned short *)tq.ptr + b * tq.stride[0] +
                                  h * tq.stride[1] + (long long)i * tq.stride[2] + ch * 8;
      attn_cp_async16(sq_addr + attn_swz(r, ch, dec_dqk * 2), src, in ? 16 : 0);
    }
  }
  /* Paged: key j's row through sequence b's page table (hooks.cuh). */
  const attn_pages pages = attn_pages_of(p, b);
  auto page_row = [&](const attn_tensor_arg &tx, const unsigned char *head, int j) {
    return pages.row<dec_kv_bytes>(tx, head, j);
  };
  /* dec_paged_ahead: this thread's rows of the next tile to load, their
   * page ids (-1: zeros) and rows within the page. */
  int ahead_id[dec_thread_rows], ahead_row[dec_thread_rows];
  const int ahead_c = tid % dec_row_chunks, ahead_r0 = tid / dec_row_chunks;
  auto fetch_pages = [&](int n) {
#pragma unroll
    for (int k = 0; k < dec_thread_rows; ++k) {
      const int j = n * dec_bn + ahead_r0 + k * dec_row_step;
      const int pg = pages.page_of(j);
      ahead_row[k] = j - pg * pages.size;
      ahead_id[k] = j < p.Skv ? __ldg(pages.table + pg * pages.step) : -1;
    }
  };
  auto load_kv = [&](int n, int stage) {
    const unsigned dst = skv + stage * dec_layout.stage_bytes;
    if constexpr (dec_paged_ahead) {
      const bool k_in = ahead_c * 16 < ATTN_D_QK * dec_kv_bytes;
      const bool v_in = ahead_c * 16 < ATTN_D_V * dec_kv_bytes;
#pragma unroll
      for (int k = 0; k < dec_thread_rows; ++k) {
        const int r = ahead_r0 + k * dec_row_step, id = ahead_id[k];
        const bool live = (unsigned)id < (unsigned)pages.count;
        const unsigned char *ks = kg + ((long long)id * tk.stride[0] +
                                        (long long)ahead_row[k] * tk.stride[dec_page_dim]) *
                                           dec_kv_bytes + ahead_c * 16;
        const unsigned char *vs = vg + ((long long)id * tv.stride[0] +
                                        (long long)ahead_row[k] * tv.stride[dec_page_dim]) *
                                           dec_kv_bytes + ahead_c * 16;
        attn_cp_async16(dst + attn_swz(r, ahead_c, dec_dqk * dec_kv_bytes), live && k_in ? ks : kg,
                        live && k_in ? 16 : 0);
        attn_cp_async16(dst + dec_layout.k_bytes + attn_swz(r, ahead_c, dec_dv * dec_kv_bytes),
                        live && v_in ? vs : vg, live && v_in ? 16 : 0);
      }
    } else if constexpr (dec_paged) {
      attn_cp_rows<dec_bn, dec_dqk * dec_kv_bytes, dec_threads, ATTN_D_QK * dec_kv_bytes>(
          dst, [&](int j) { return page_row(tk, kg, j); }, kg, n * dec_bn, p.Skv, tid);
      attn_cp_rows<dec_bn, dec_dv * dec_kv_bytes, dec_threads, ATTN_D_V * dec_kv_bytes>(
          dst + dec_layout.k_bytes, [&](int j) { return page_row(tv, vg, j); }, vg, n * dec_bn,
          p.Skv, tid);
    } else {
      attn_cp_tile<dec_bn, dec_dqk * dec_kv_bytes, dec_threads, ATTN_D_QK * dec_kv_bytes>(
          dst, kg, tk.stride[2] * dec_kv_bytes, n * dec_bn, p.Skv, tid);
      attn_cp_tile<dec_bn, dec_dv * dec_kv_bytes, dec_threads, ATTN_D_V * dec_kv_bytes>(
          dst + dec_layout.k_bytes, vg, tv.stride[2] * dec_kv_bytes, n * dec_bn, p.Skv, tid);
    }
  };
  /* Groups 1 .. STAGES: the first live tiles (maybe none), one a stage:
   * a split holds few tiles, so all stages are in flight from the start
   * and each is refilled as soon as its tile is consumed. */
  int n_load = dec_next_live(blk, n_begin, n_end, p);
  if constexpr (dec_paged_ahead)
    if (n_load < n_end) fetch_pages(n_load);
  attn_cp_async_commit();
#pragma unroll
  for (int s = 0; s < dec_stages; ++s) {
    if (n_load < n_end) {
      load_kv(n_load, s);
      n_load = dec_next_live(blk, n_load + 1, n_end, p);
      if constexpr (dec_paged_ahead)
        if (n_load < n_end) fetch_pages(n_load);
    }
    attn_cp_async_commit();
  }

  /* Per-lane ldmatrix offsets, as in fwd_sm80: the swizzle key of every
   * address is lane & 7, so chunk c lands at ((c & 7) ^ key) + (c & ~7). */
  const int sw = lane & 7;
  unsigned q_off[4], k_off[4], v_off[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    q_off[c] = (lane & 15) * dec_dqk * 2 + (((2 * c + (lane >> 4)) ^ sw) << 4);
    k_off[c] = (warp * 16 + (lane & 7) + ((lane >> 4) << 3)) * dec_dqk * 2 +
               (((2 * c + ((lane >> 3) & 1)) ^ sw) << 4);
    v_off[c] = (warp * 16 + (lane & 7) + (((lane >> 3) & 1) << 3)) * dec_dv * 2 +
               (((2 * c + (lane >> 4)) ^ sw) << 4);
  }

  /* This thread's two rows (g, g + 8), clamped into the block for hooks. */
  int row_h[2], row_i[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int rr = min(blk.r0 + g + 8 * r, blk.r_last);
    row_h[r] = blk.hk * blk.group + rr / p.Sq;
    row_i[r] = rr % p.Sq;
  }
  const attn_bh bhc[2] = {attn_bh_load(b, row_h[0], p), attn_bh_load(b, row_h[1], p)};

  attn_cp_async_wait<dec_stages>(); /* Q has landed */
  __syncthreads();
  unsigned qf[dec_qk_steps][4];
#pragma unroll
  for (int kk = 0; kk < dec_qk_steps; ++kk)
    attn_ldsm_x4(qf[kk], sq_addr + q_off[kk & 3] + (kk >> 2) * 128);
  float qinv[2] = {1.f, 1.f}; /* dec_q_rescale: S's factor a row */
  if constexpr (dec_q_rescale)
    dec_q_to_f16(qf, qinv);

  float o[2 * dec_v_steps][4];
#pragma unroll
  for (int nt = 0; nt < 2 * dec_v_steps; ++nt)
    o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
  float row_max[2] = {neg_inf, neg_inf};
  float row_sum[2] = {0.f, 0.f};

  int stage = 0;
  unsigned long long visited = 0;
  for (int n = dec_next_live(blk, n_begin, n_end, p); n < n_end;) {
    /* Tile n is the oldest of the STAGES groups in flight. */
    attn_cp_async_wait<dec_stages - 1>();
    __syncthreads();
    ++visited;
    unsigned ks = skv + stage * dec_layout.stage_bytes;
    unsigned vs = ks + dec_layout.k_bytes;
    if constexpr (dec_kv8) { /* the stage into the 16-bit tile the MMAs read */
      const unsigned conv = sq_addr + dec_layout.conv_offset;
      attn_convert_tile<dec_bn, dec_dqk, dec_threads, dec_kv_e4m3, dec_in_bf16>(ks, conv, tid);
      attn_convert_tile<dec_bn, dec_dv, dec_threads, dec_kv_e4m3, dec_in_bf16>(vs, conv + dec_layout.conv_k_bytes,
                                                                          tid);
      __syncthreads();
      ks = conv;
      vs = conv + dec_layout.conv_k_bytes;
    }

    /* S = Q K^T for this warp's 16 keys. */
    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int kk = 0; kk < dec_qk_steps; ++kk) {
      unsigned kb[4];
      attn_ldsm_x4(kb, ks + k_off[kk & 3] + (kk >> 2) * 128);
      attn_mma16816<dec_in_bf16>(s[0], qf[kk], kb[0], kb[1]);
      attn_mma16816<dec_in_bf16>(s[1], qf[kk], kb[2], kb[3]);
    }

    /* The score chain and the masks, per row's own head. */
    const int j0 = n * dec_bn;
    const int j1 = min(j0 + dec_bn, p.Skv) - 1;
    const int cls = dec_tile_class(blk, j0, j1, p);
    const bool exact = cls == 2 && j0 + dec_bn <= p.Skv;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        const int j = j0 + warp * 16 + nt * 8 + 2 * t + (e & 1);
        const float acc = dec_q_rescale ? s[nt][e] * qinv[r] : s[nt][e];
        const float x = attn_score_bh(acc, bhc[r], b, row_h[r], row_i[r], min(j, p.Skv - 1), p);
        if (exact)
          s[nt][e] = x;
        else
          s[nt][e] = (cls == 2 ? j < p.Skv : attn_keep_in_bh<true>(bhc[r], b, row_h[r], row_i[r], j, p))
                         ? x
                         : neg_inf;
      }

    attn_softmax_tile<2, attn_p_round != 0>([&](int nt, int k) -> float & { return s[nt][k]; }, row_max, row_sum,
                         [&](int r, float a) {
#pragma unroll
                           for (int nt = 0; nt < 2 * dec_v_steps; ++nt) {
                             o[nt][2 * r] *= a;
                             o[nt][2 * r + 1] *= a;
                           }
                         });

    /* P as P V reads it (hooks.cuh; a scale the same for every head). */
    if constexpr (attn_p_mod != 0) {
      const float ps = attn_p_scale_value(b, row_h[0], p);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[nt][e] = attn_p_value(s[nt][e], ps);
    }

    /* O += P V over the warp's 16 keys, P from the S registers. */
    unsigned pa[4];
    pa[0] = attn_pack2<dec_in_bf16>(s[0][0], s[0][1]);
    pa[1] = attn_pack2<dec_in_bf16>(s[0][2], s[0][3]);
    pa[2] = attn_pack2<dec_in_bf16>(s[1][0], s[1][1]);
    pa[3] = attn_pack2<dec_in_bf16>(s[1][2], s[1][3]);
#pragma unroll
    for (int np = 0; np < dec_v_steps; ++np) {
      unsigned vb[4];
      attn_ldsm_x4_trans(vb, vs + v_off[np & 3] + (np >> 2) * 128);
      attn_mma16816<dec_in_bf16>(o[2 * np], pa, vb[0], vb[1]);
      attn_mma16816<dec_in_bf16>(o[2 * np + 1], pa, vb[2], vb[3]);
    }

    __syncthreads(); /* every warp is done with this stage (and the 16-bit tile): refill it */
    if (n_load < n_end) {
      load_kv(n_load, stage);
      n_load = dec_next_live(blk, n_load + 1, n_end, p);
      if constexpr (dec_paged_ahead)
        if (n_load < n_end) fetch_pages(n_load);
    }
    attn_cp_async_commit();
    n = dec_next_live(blk, n + 1, n_end, p);
    stage = (stage + 1) % dec_stages;
  }
  attn_cp_async_wait<0>();
  __syncthreads();
  if (tid == 0 && p.tiles_visited)
    atomicAdd(p.tiles_visited, visited);

  /* The warps' partials to shared memory: per warp 16 maxima, 16 sums,
   * then 16 rows of O (f32). */
  float *cm = (float *)dec_smem;
  float *cl = cm + dec_warps * dec_rows;
  float *co = cl + dec_warps * dec_rows;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    const float l = attn_softmax_total(row_sum[r]);
    if (t == 0) {
      cm[warp * dec_rows + row] = row_max[r];
      cl[warp * dec_rows + row] = l;
    }
    float *orow = co + (warp * dec_rows + row) * dec_dv;
#pragma unroll
    for (int nb = 0; nb < ATTN_D_V / 8; ++nb)
      *(float2 *)(orow + nb * 8 + 2 * t) = make_float2(o[nb][2 * r], o[nb][2 * r + 1]);
  }
  __syncthreads();

  /* Combine the warps: thread pairs of columns of one row at a time. */
  const attn_tensor_arg &to = p.t[dec_to];
  constexpr int pairs = ATTN_D_V / 2;
  for (int w = tid; w < dec_rows * pairs; w += dec_threads) {
    const int row = w / pairs, d = 2 * (w % pairs), rr = blk.r0 + row;
    if (rr > blk.r_last)
      continue;
    float m = neg_inf;
#pragma unroll
    for (int k = 0; k < dec_warps; ++k)
      m = fmaxf(m, cm[k * dec_rows + row]);
    float l = 0.f, x0 = 0.f, x1 = 0.f;
    if (m != neg_inf) {
#pragma unroll
      for (int k = 0; k < dec_warps; ++k) {
        const float f = __expf(cm[k * dec_rows + row] - m);
        const float2 v = *(const float2 *)(co + (k * dec_rows + row) * dec_dv + d);
        l += f * cl[k * dec_rows + row];
        x0 += f * v.x;
        x1 += f * v.y;
      }
    }
    float keep = 1.f; /* the sink joins the row once: here, or in the merge */
    if constexpr (attn_has_sink)
      if (nsplit == 1)
        keep = attn_softmax_sink(attn_sink_value(b, blk.hk * blk.group + rr / p.Sq, p), m, l);
    const float inv = attn_softmax_inv(l) * keep;
    const int h = blk.hk * blk.group + rr / p.Sq, i = rr % p.Sq;
    if (nsplit == 1) {
      const long long orow = b * to.stride[0] + h * to.stride[1] + (long long)i * to.stride[2];
      attn_store_pair<dec_out_kind>(to.ptr, orow + d, attn_out(x0 * inv, b, h, i, d, p),
                                    attn_out(x1 * inv, b, h, i, d + 1, p));
      if constexpr (dec_tlse >= 0)
        if (d == 0)
          attn_store_lse(p.t[dec_tlse], b, h, i, m, l);
    } else {
      /* Partial rows: [split][b][h][i] of dv floats, and their lse. */
      const attn_tensor_arg &po = p.t[dec_tpo];
      const long long prow =
          split * po.stride[0] + b * po.stride[1] + h * po.stride[2] + (long long)i * po.stride[3];
      *(float2 *)((float *)po.ptr + prow * ATTN_D_V + d) = make_float2(x0 * inv, x1 * inv);
      if (d == 0) {
        const attn_tensor_arg &pl = p.t[dec_tpl];
        ((float *)pl.ptr)[split * pl.stride[0] + b * pl.stride[1] + h * pl.stride[2] +
                          (long long)i * pl.stride[3]] =
            l > 0.f ? m + logf(l) : neg_inf;
      }
    }
  }
}

/* A block-wide reduction of the merge's 128 threads in a fixed order (a
 * shuffle tree per warp, then the warps in order): the same bits every
 * launch. */
template <bool MAX>
static __device__ __forceinline__ float dec_block_reduce(float x, float *scratch) {
#pragma unroll
  for (int k = 16; k >= 1; k >>= 1) {
    const float y = __shfl_xor_sync(0xffffffffu, x, k);
    x = MAX ? fmaxf(x, y) : x + y;
  }
  __syncthreads(); /* scratch may hold an earlier reduction's values */
  if ((threadIdx.x & 31) == 0)
    scratch[threadIdx.x >> 5] = x;
  __syncthreads();
  x = scratch[0];
#pragma unroll
  for (int w = 1; w < dec_merge_threads / 32; ++w)
    x = MAX ? fmaxf(x, scratch[w]) : x + scratch[w];
  return x;
}

/* The splits of each row combined in split order: lse = log sum exp of
 * the partial lse, O = sum exp(lse_s - lse) O_s, then attn_out and the
 * store. One CTA per row (i, h, b). The partials were just written, so
 * the kernel is bound by the latency of its loads, not their bytes: one
 * thread per split loads the lse values (all at once), and for O each
 * thread owns a 4-column group of one of 128 / (dv / 4) interleaved split
 * subsets, its loads several in flight, the subsets then summed in order
 * through shared memory. */
__device__ __forceinline__ void attn_decode_merge(const attn_params &p) {
  constexpr int cols = ATTN_D_V / 4;                 /* float4 columns */
  constexpr int groups = dec_merge_threads / cols;   /* split subsets */
  static_assert(groups >= 1, "a row's columns within the merge's threads");
  /* Threads past groups * cols (ATTN_D_V / 4 not dividing 128) sit out. */
  constexpr bool ragged = groups * cols != dec_merge_threads;
  static_assert(dec_max_splits <= dec_merge_threads, "one thread per split's lse");
  __shared__ float dec_w[dec_max_splits];
  __shared__ float dec_scratch[dec_merge_threads / 32];
  __shared__ float4 dec_part[groups][cols];
  const float neg_inf = __int_as_float(0xff800000);
  const int tid = threadIdx.x;
  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const attn_tensor_arg &po = p.t[dec_tpo];
  const attn_tensor_arg &pl = p.t[dec_tpl];
  const int nsplit = min(pl.size[0], dec_max_splits);
  const long long row = b * pl.stride[1] + h * pl.stride[2] + (long long)i * pl.stride[3];

  const float x = tid < nsplit ? ((const float *)pl.ptr)[row + tid * pl.stride[0]] : neg_inf;
  float m = dec_block_reduce<true>(x, dec_scratch);
  const float e = tid < nsplit && m != neg_inf ? __expf(x - m) : 0.f;
  if (tid < dec_max_splits)
    dec_w[tid] = e;
  float l = dec_block_reduce<false>(e, dec_scratch); /* its barriers publish dec_w */
  float keep = 1.f; /* the sink joins the merged row (the partials have none) */
  if constexpr (attn_has_sink)
    keep = attn_softmax_sink(attn_sink_value(b, h, p), m, l);
  const float inv = attn_softmax_inv(l) * keep;

  const int col = tid % cols, grp = tid / cols;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  const float *base = (const float *)po.ptr + row * ATTN_D_V + 4 * col;
#pragma unroll 8
  for (int s = grp; (!ragged || grp < groups) && s < nsplit; s += groups) {
    const float f = dec_w[s];
    const float4 v = *(const float4 *)(base + (long long)s * po.stride[0] * ATTN_D_V);
    acc.x += f * v.x;
    acc.y += f * v.y;
    acc.z += f * v.z;
    acc.w += f * v.w;
  }
  if (!ragged || grp < groups)
    dec_part[grp][col] = acc;
  __syncthreads();
  if (tid < cols) {
    float4 o = dec_part[0][tid];
#pragma unroll
    for (int g = 1; g < groups; ++g) {
      const float4 y = dec_part[g][tid];
      o.x += y.x, o.y += y.y, o.z += y.z, o.w += y.w;
    }
    const attn_tensor_arg &to = p.t[dec_to];
    const long long orow = b * to.stride[0] + h * to.stride[1] + (long long)i * to.stride[2];
    const int d = 4 * tid;
    attn_store_pair<dec_out_kind>(to.ptr, orow + d, attn_out(o.x * inv, b, h, i, d, p),
                                  attn_out(o.y * inv, b, h, i, d + 1, p));
    attn_store_pair<dec_out_kind>(to.ptr, orow + d + 2, attn_out(o.z * inv, b, h, i, d + 2, p),
                                  attn_out(o.w * inv, b, h, i, d + 3, p));
  }
  if constexpr (dec_tlse >= 0)
    if (tid == 0)
      ((float *)p.t[dec_tlse].ptr)[b * p.t[dec_tlse].stride[0] + h * p.t[dec_tlse].stride[1] +
                                   (long long)i * p.t[dec_tlse].stride[2]] =
          l > 0.f ? m + logf(l) : neg_inf;
}
