/*
 * wgmma.cuh: the Hopper (sm_90a) warpgroup-MMA wrappers every sm90 template
 * uses (fwd_sm90.cuh, bwd_sm90.cuh), written once. Pasted at the top of a
 * unit for an sm_90a target, after ptx.cuh. No #include: NVRTC compiles
 * this with no headers.
 *
 * d (+)= A * B for one m64nNk16 step, f32 accumulators, bf16 or f16
 * inputs (BF16). ss: A and B from shared memory through descriptors
 * (attn_wgmma_desc); `kk` both K-major, `mn` both MN-major (transposed),
 * `kmn` A K-major and B MN-major;
 * scale_d 0 overwrites d. rs: A from registers (the accumulator fragment
 * layout of a previous wgmma, packed to pairs), B MN-major from shared
 * memory; always accumulates. `fp8`: one m64nNk32 step of FP8 A and B
 * (e4m3 or e5m2 each; K-major only, as FP8 wgmma requires). The asm below is written by
 * tools/gen_wgmma.py (the operand lists are long); each shape is one
 * statement for both input types.
 *
 * `_x4`: four k steps of a shape in one asm statement, for the forward's
 * main loop. NVVM's time on a wgmma goes mostly to its accumulator list
 * (64 or 128 operands in and out of every statement), so one list for four
 * steps cut NVRTC's time on a forward kernel by 40-70 ms (issue 19); the
 * SASS is the same wgmma sequence.
 */

/* Orders this warpgroup's register and shared-memory writes before the
 * wgmma that reads them. */
[[maybe_unused]] static __device__ __forceinline__ void attn_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
[[maybe_unused]] static __device__ __forceinline__ void attn_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/* Waits until at most N committed groups are still running. */
template <int N> [[maybe_unused]] static __device__ __forceinline__ void attn_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keeps the compiler from moving uses of a register across a wgmma wait
 * (the asm statements carry no register dependence on it). */
[[maybe_unused]] static __device__ __forceinline__ void attn_fence_reg(float &x) {
  asm volatile("" : "+f"(x)::"memory");
}
[[maybe_unused]] static __device__ __forceinline__ void attn_fence_reg(unsigned &x) {
  asm volatile("" : "+r"(x)::"memory");
}
/* Makes generic-proxy shared-memory writes visible to the async proxy
 * (wgmma, TMA) before they read them. */
[[maybe_unused]] static __device__ __forceinline__ void attn_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Shared-memory matrix descriptor, 128-byte swizzle: start address,
 * leading byte offset (MN-major: the stride between 64-element column
 * blocks; unused for K-major), stride byte offset (between 8-row groups). */
[[maybe_unused]] static __device__ __forceinline__ unsigned long long
attn_wgmma_desc(unsigned addr, unsigned lbo, unsigned sbo) {
  return (unsigned long long)((addr & 0x3FFFF) >> 4) |
         ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
}
/* The descriptor of the tile `bytes` (a multiple of 16) past desc's start:
 * one 32-bit add (the start field does not overflow inside shared
 * memory), where attn_wgmma_desc of the sum costs five instructions. */
[[maybe_unused]] static __device__ __forceinline__ unsigned long long
attn_wgmma_desc_add(unsigned long long desc, unsigned bytes) {
  const unsigned lo = (unsigned)desc + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}


/* ------------------------------------------- mbarriers, TMA, named barriers
 * (fwd_sm90's and bwd_sm90's producer/consumer pipelines). */

[[maybe_unused]] static __device__ __forceinline__ void attn_mbar_init(unsigned bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count)
               : "memory");
}

/* One arrival that also expects `bytes` of transactions (the TMA copies
 * completing on this barrier). */
[[maybe_unused]] static __device__ __forceinline__ void attn_mbar_expect_tx(unsigned bar,
                                                                          int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}

[[maybe_unused]] static __device__ __forceinline__ void attn_mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* Spins until the phase of the given parity has completed. */
[[maybe_unused]] static __device__ __forceinline__ void attn_mbar_wait(unsigned bar, int parity) {
  asm volatile("{\n .reg .pred done;\n"
               "wait_%=:\n"
               " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               " @!done bra wait_%=;\n}\n" ::"r"(bar),
               "r"(parity)
               : "memory");
}

/* One TMA box (64 columns x rows) of a 4-D tensor into shared memory,
 * completing on bar. Coordinates: column, row, head, batch. */
[[maybe_unused]] static __device__ __forceinline__ void attn_tma_load4(unsigned dst,
                                                                     const attn_tmap *map,
                                                                     unsigned bar, int c0, int c1,
                                                                     int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::"
               "complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
               "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
               : "memory");
}

[[maybe_unused]] static __device__ __forceinline__ void attn_prefetch_tmap(const attn_tmap *map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

/* Named barrier `id` over the 256 threads of two consumer warpgroups. */
[[maybe_unused]] static __device__ __forceinline__ void attn_named_sync(int id) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
}
[[maybe_unused]] static __device__ __forceinline__ void attn_named_arrive(int id) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory");
}
/* Named barrier `id` over N threads (a multiple of 32): the consumers and
 * one producer warp meet on these (bwd_sm90's dQ buffer). An arrive
 * orders the arriving thread's earlier writes before the syncing threads'
 * later reads. */
template <int N> [[maybe_unused]] static __device__ __forceinline__ void attn_bar_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(N) : "memory");
}
template <int N> [[maybe_unused]] static __device__ __forceinline__ void attn_bar_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(N) : "memory");
}

/* Adds the shared-memory box at src into a 4-D tensor's tile (element-wise
 * add done at L2; coordinates as attn_tma_load4's; rows out of bounds are
 * skipped), as one operation of this thread's bulk group. */
[[maybe_unused]] static __device__ __forceinline__ void attn_tma_reduce_add4(const attn_tmap *map,
                                                                           unsigned src, int c0,
                                                                           int c1, int c2, int c3) {
  asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group "
               "[%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(map),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
               : "memory");
}
/* One TMA box from shared memory at src into a 4-D tensor (coordinates as
 * attn_tma_load4's; what lies outside the tensor is not written), as one
 * operation of this thread's bulk group. */
[[maybe_unused]] static __device__ __forceinline__ void attn_tma_store4(const attn_tmap *map,
                                                                      unsigned src, int c0,
                                                                      int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group "
               "[%0, {%1, %2, %3, %4}], [%5];\n" ::"l"(map),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
               : "memory");
}
/* `bytes` (a multiple of 16) from shared memory at src to global memory at
 * dst (both 16-byte aligned), as one operation of this thread's bulk
 * group: no tensor map, so no box to clip (fwd_sm90's o_smem rows of a
 * packed sequence's end). */
[[maybe_unused]] static __device__ __forceinline__ void attn_bulk_store(void *dst, unsigned src,
                                                                      unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst),
               "r"(src), "r"(bytes)
               : "memory");
}
[[maybe_unused]] static __device__ __forceinline__ void attn_bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
/* Waits until at most N of this thread's bulk groups still read shared
 * memory (READ) or are still running at all. */
template <int N, bool READ>
[[maybe_unused]] static __device__ __forceinline__ void attn_bulk_wait() {
  if constexpr (READ)
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
  else
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Four 8 x 8 matrices of 16-bit pairs (an mma accumulator's packed
 * fragment: lane l holds row l / 4, columns 2 (l % 4), + 1 of each)
 * stored transposed: row r of matrix x in memory (16 bytes at the address
 * lane 8 x + r gives) receives column r of the fragment's matrix x. */
/* The same four matrices stored as they are: row r of matrix x (16 bytes
 * at the address lane 8 x + r gives) receives the fragment's row r. */
[[maybe_unused]] static __device__ __forceinline__ void attn_stsm_x4(unsigned addr,
                                                                   const unsigned (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
[[maybe_unused]] static __device__ __forceinline__ void attn_stsm_x4_trans(unsigned addr,
                                                                         const unsigned (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

/* The accumulator operands of a thread, n = N / 2 of them: their names
 * in the asm text (ACC) and the operand list (OUT). */
#define ATTN_WGMMA_ACC16 \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
#define ATTN_WGMMA_ACC32 \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
  "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
#define ATTN_WGMMA_ACC40 \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
  "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
  "%32,%33,%34,%35,%36,%37,%38,%39"
#define ATTN_WGMMA_ACC64 \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
  "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
  "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
  "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define ATTN_WGMMA_ACC88 \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
  "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
  "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
  "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
  "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
  "%80,%81,%82,%83,%84,%85,%86,%87"
#define ATTN_WGMMA_ACC128 \
  "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15," \
  "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
  "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
  "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
  "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79," \
  "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
  "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111," \
  "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define ATTN_WGMMA_OUT16 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define ATTN_WGMMA_OUT32 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define ATTN_WGMMA_OUT40 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39])
#define ATTN_WGMMA_OUT64 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define ATTN_WGMMA_OUT88 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
#define ATTN_WGMMA_OUT128 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
  "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
  "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
  "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
  "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
  "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
  "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

/* m64n64k16, A and B K-major from shared memory. */
#define ATTN_WGMMA_SS64_KK(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" ATTN_WGMMA_ACC32 "}, %32, %33, p, 1, 1, 0, 0;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT32 \
  : "l"(da), "l"(db), "r"(scale_d))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_ss64_kk(float (&d)[32], unsigned long long da,
                                                   unsigned long long db, int scale_d) {
  if constexpr (BF16)
    ATTN_WGMMA_SS64_KK("bf16");
  else
    ATTN_WGMMA_SS64_KK("f16");
}
#undef ATTN_WGMMA_SS64_KK

/* m64n80k16, A and B K-major from shared memory. */
#define ATTN_WGMMA_SS80_KK(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %42, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n80k16.f32." T "." T " {" ATTN_WGMMA_ACC40 "}, %40, %41, p, 1, 1, 0, 0;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT40 \
  : "l"(da), "l"(db), "r"(scale_d))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_ss80_kk(float (&d)[40], unsigned long long da,
                                                   unsigned long long db, int scale_d) {
  if constexpr (BF16)
    ATTN_WGMMA_SS80_KK("bf16");
  else
    ATTN_WGMMA_SS80_KK("f16");
}
#undef ATTN_WGMMA_SS80_KK

/* m64n80k16, A MN-major (transposed), B K-major from shared memory
 * (bwd_sm90's dQ^T = K^T dS^T with 80-query tiles). */
#define ATTN_WGMMA_SS80_MNK(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %42, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n80k16.f32." T "." T " {" ATTN_WGMMA_ACC40 "}, %40, %41, p, 1, 1, 1, 0;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT40 \
  : "l"(da), "l"(db), "r"(scale_d))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_ss80_mnk(float (&d)[40], unsigned long long da,
                                                   unsigned long long db, int scale_d) {
  if constexpr (BF16)
    ATTN_WGMMA_SS80_MNK("bf16");
  else
    ATTN_WGMMA_SS80_MNK("f16");
}
#undef ATTN_WGMMA_SS80_MNK

/* m64n128k16, A and B K-major from shared memory. */
#define ATTN_WGMMA_SS128_KK(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {" ATTN_WGMMA_ACC64 "}, %64, %65, p, 1, 1, 0, 0;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT64 \
  : "l"(da), "l"(db), "r"(scale_d))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_ss128_kk(float (&d)[64], unsigned long long da,
                                                   unsigned long long db, int scale_d) {
  if constexpr (BF16)
    ATTN_WGMMA_SS128_KK("bf16");
  else
    ATTN_WGMMA_SS128_KK("f16");
}
#undef ATTN_WGMMA_SS128_KK

/* m64n176k16, A and B K-major from shared memory (fwd_sm90's bn176 key tiles). */
#define ATTN_WGMMA_SS176_KK(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %90, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n176k16.f32." T "." T " {" ATTN_WGMMA_ACC88 "}, %88, %89, p, 1, 1, 0, 0;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT88 \
  : "l"(da), "l"(db), "r"(scale_d))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_ss176_kk(float (&d)[88], unsigned long long da,
                                                   unsigned long long db, int scale_d) {
  if constexpr (BF16)
    ATTN_WGMMA_SS176_KK("bf16");
  else
    ATTN_WGMMA_SS176_KK("f16");
}
#undef ATTN_WGMMA_SS176_KK

/* m64n32k16, A and B K-major from shared memory. */
#define ATTN_WGMMA_SS32_KK(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %18, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n32k16.f32." T "." T " {" ATTN_WGMMA_ACC16 "}, %16, %17, p, 1, 1, 0, 0;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT16 \
  : "l"(da), "l"(db), "r"(scale_d))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_ss32_kk(float (&d)[16], unsigned long long da,
                                                   unsigned long long db, int scale_d) {
  if constexpr (BF16)
    ATTN_WGMMA_SS32_KK("bf16");
  else
    ATTN_WGMMA_SS32_KK("f16");
}
#undef ATTN_WGMMA_SS32_KK

/* m64n128k16, A K-major, B MN-major (transposed) from shared memory. */
#define ATTN_WGMMA_SS128_KMN(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {" ATTN_WGMMA_ACC64 "}, %64, %65, p, 1, 1, 0, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT64 \
  : "l"(da), "l"(db), "r"(scale_d))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_ss128_kmn(float (&d)[64], unsigned long long da,
                                                   unsigned long long db, int scale_d) {
  if constexpr (BF16)
    ATTN_WGMMA_SS128_KMN("bf16");
  else
    ATTN_WGMMA_SS128_KMN("f16");
}
#undef ATTN_WGMMA_SS128_KMN

/* m64n64k16, A and B MN-major (transposed) from shared memory. */
#define ATTN_WGMMA_SS64_MN(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" ATTN_WGMMA_ACC32 "}, %32, %33, p, 1, 1, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT32 \
  : "l"(da), "l"(db), "r"(scale_d))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_ss64_mn(float (&d)[32], unsigned long long da,
                                                   unsigned long long db, int scale_d) {
  if constexpr (BF16)
    ATTN_WGMMA_SS64_MN("bf16");
  else
    ATTN_WGMMA_SS64_MN("f16");
}
#undef ATTN_WGMMA_SS64_MN

/* m64n32k16, A and B MN-major (transposed) from shared memory. */
#define ATTN_WGMMA_SS32_MN(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %18, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n32k16.f32." T "." T " {" ATTN_WGMMA_ACC16 "}, %16, %17, p, 1, 1, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT16 \
  : "l"(da), "l"(db), "r"(scale_d))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_ss32_mn(float (&d)[16], unsigned long long da,
                                                   unsigned long long db, int scale_d) {
  if constexpr (BF16)
    ATTN_WGMMA_SS32_MN("bf16");
  else
    ATTN_WGMMA_SS32_MN("f16");
}
#undef ATTN_WGMMA_SS32_MN

/* m64n64k16, A from registers, B MN-major from shared memory. */
#define ATTN_WGMMA_RS64(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %37, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" ATTN_WGMMA_ACC32 "}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT32 \
  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_rs64(float (&d)[32], const unsigned (&a)[4],
                                                   unsigned long long db) {
  if constexpr (BF16)
    ATTN_WGMMA_RS64("bf16");
  else
    ATTN_WGMMA_RS64("f16");
}
#undef ATTN_WGMMA_RS64

/* m64n128k16, A from registers, B MN-major from shared memory. */
#define ATTN_WGMMA_RS128(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %69, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {" ATTN_WGMMA_ACC64 "}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT64 \
  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_rs128(float (&d)[64], const unsigned (&a)[4],
                                                   unsigned long long db) {
  if constexpr (BF16)
    ATTN_WGMMA_RS128("bf16");
  else
    ATTN_WGMMA_RS128("f16");
}
#undef ATTN_WGMMA_RS128

/* m64n256k16, A from registers, B MN-major from shared memory. */
#define ATTN_WGMMA_RS256(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %133, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T " {" ATTN_WGMMA_ACC128 "}, {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT128 \
  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_rs256(float (&d)[128], const unsigned (&a)[4],
                                                   unsigned long long db) {
  if constexpr (BF16)
    ATTN_WGMMA_RS256("bf16");
  else
    ATTN_WGMMA_RS256("f16");
}
#undef ATTN_WGMMA_RS256

/* m64n64k32, FP8 A and B (e4m3 or e5m2 each) K-major from shared memory. */
#define ATTN_WGMMA_SS64_FP8(TA, TB) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k32.f32." TA "." TB " {" ATTN_WGMMA_ACC32 "}, %32, %33, p, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT32 \
  : "l"(da), "l"(db), "r"(scale_d))
template <bool A_E4M3, bool B_E4M3>
static __device__ __forceinline__ void attn_wgmma_ss64_fp8(float (&d)[32], unsigned long long da,
                                                   unsigned long long db, int scale_d) {
  if constexpr (A_E4M3 && B_E4M3)
    ATTN_WGMMA_SS64_FP8("e4m3", "e4m3");
  else if constexpr (A_E4M3)
    ATTN_WGMMA_SS64_FP8("e4m3", "e5m2");
  else if constexpr (B_E4M3)
    ATTN_WGMMA_SS64_FP8("e5m2", "e4m3");
  else
    ATTN_WGMMA_SS64_FP8("e5m2", "e5m2");
}
#undef ATTN_WGMMA_SS64_FP8

/* m64n80k32, FP8 A and B (e4m3 or e5m2 each) K-major from shared memory. */
#define ATTN_WGMMA_SS80_FP8(TA, TB) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %42, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n80k32.f32." TA "." TB " {" ATTN_WGMMA_ACC40 "}, %40, %41, p, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT40 \
  : "l"(da), "l"(db), "r"(scale_d))
template <bool A_E4M3, bool B_E4M3>
static __device__ __forceinline__ void attn_wgmma_ss80_fp8(float (&d)[40], unsigned long long da,
                                                   unsigned long long db, int scale_d) {
  if constexpr (A_E4M3 && B_E4M3)
    ATTN_WGMMA_SS80_FP8("e4m3", "e4m3");
  else if constexpr (A_E4M3)
    ATTN_WGMMA_SS80_FP8("e4m3", "e5m2");
  else if constexpr (B_E4M3)
    ATTN_WGMMA_SS80_FP8("e5m2", "e4m3");
  else
    ATTN_WGMMA_SS80_FP8("e5m2", "e5m2");
}
#undef ATTN_WGMMA_SS80_FP8

/* m64n128k32, FP8 A and B (e4m3 or e5m2 each) K-major from shared memory. */
#define ATTN_WGMMA_SS128_FP8(TA, TB) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k32.f32." TA "." TB " {" ATTN_WGMMA_ACC64 "}, %64, %65, p, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT64 \
  : "l"(da), "l"(db), "r"(scale_d))
template <bool A_E4M3, bool B_E4M3>
static __device__ __forceinline__ void attn_wgmma_ss128_fp8(float (&d)[64], unsigned long long da,
                                                   unsigned long long db, int scale_d) {
  if constexpr (A_E4M3 && B_E4M3)
    ATTN_WGMMA_SS128_FP8("e4m3", "e4m3");
  else if constexpr (A_E4M3)
    ATTN_WGMMA_SS128_FP8("e4m3", "e5m2");
  else if constexpr (B_E4M3)
    ATTN_WGMMA_SS128_FP8("e5m2", "e4m3");
  else
    ATTN_WGMMA_SS128_FP8("e5m2", "e5m2");
}
#undef ATTN_WGMMA_SS128_FP8

/* m64n64k32, FP8 A from registers (4 bytes a register), FP8 B K-major from shared memory. */
#define ATTN_WGMMA_RS64_FP8(TA, TB) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %37, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k32.f32." TA "." TB " {" ATTN_WGMMA_ACC32 "}, {%32,%33,%34,%35}, %36, p, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT32 \
  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1))
template <bool A_E4M3, bool B_E4M3>
static __device__ __forceinline__ void attn_wgmma_rs64_fp8(float (&d)[32], const unsigned (&a)[4],
                                                   unsigned long long db) {
  if constexpr (A_E4M3 && B_E4M3)
    ATTN_WGMMA_RS64_FP8("e4m3", "e4m3");
  else if constexpr (A_E4M3)
    ATTN_WGMMA_RS64_FP8("e4m3", "e5m2");
  else if constexpr (B_E4M3)
    ATTN_WGMMA_RS64_FP8("e5m2", "e4m3");
  else
    ATTN_WGMMA_RS64_FP8("e5m2", "e5m2");
}
#undef ATTN_WGMMA_RS64_FP8

/* m64n128k32, FP8 A from registers (4 bytes a register), FP8 B K-major from shared memory. */
#define ATTN_WGMMA_RS128_FP8(TA, TB) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %69, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k32.f32." TA "." TB " {" ATTN_WGMMA_ACC64 "}, {%64,%65,%66,%67}, %68, p, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT64 \
  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1))
template <bool A_E4M3, bool B_E4M3>
static __device__ __forceinline__ void attn_wgmma_rs128_fp8(float (&d)[64], const unsigned (&a)[4],
                                                   unsigned long long db) {
  if constexpr (A_E4M3 && B_E4M3)
    ATTN_WGMMA_RS128_FP8("e4m3", "e4m3");
  else if constexpr (A_E4M3)
    ATTN_WGMMA_RS128_FP8("e4m3", "e5m2");
  else if constexpr (B_E4M3)
    ATTN_WGMMA_RS128_FP8("e5m2", "e4m3");
  else
    ATTN_WGMMA_RS128_FP8("e5m2", "e5m2");
}
#undef ATTN_WGMMA_RS128_FP8

/* m64n256k32, FP8 A from registers (4 bytes a register), FP8 B K-major from shared memory. */
#define ATTN_WGMMA_RS256_FP8(TA, TB) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %133, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n256k32.f32." TA "." TB " {" ATTN_WGMMA_ACC128 "}, {%128,%129,%130,%131}, %132, p, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT128 \
  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1))
template <bool A_E4M3, bool B_E4M3>
static __device__ __forceinline__ void attn_wgmma_rs256_fp8(float (&d)[128], const unsigned (&a)[4],
                                                   unsigned long long db) {
  if constexpr (A_E4M3 && B_E4M3)
    ATTN_WGMMA_RS256_FP8("e4m3", "e4m3");
  else if constexpr (A_E4M3)
    ATTN_WGMMA_RS256_FP8("e4m3", "e5m2");
  else if constexpr (B_E4M3)
    ATTN_WGMMA_RS256_FP8("e5m2", "e4m3");
  else
    ATTN_WGMMA_RS256_FP8("e5m2", "e5m2");
}
#undef ATTN_WGMMA_RS256_FP8

/* ---- four k steps a statement (fwd_sm90's S and P V GEMMs) */

/* Four m64n64k16 steps, A and B K-major from shared memory. */
#define ATTN_WGMMA_SS64_KK_X4(T) \
  asm volatile("{ .reg .pred p, q; setp.ne.b32 q, 1, 0; setp.ne.b32 p, %40, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" ATTN_WGMMA_ACC32 "}, %32, %33, p, 1, 1, 0, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" ATTN_WGMMA_ACC32 "}, %34, %35, q, 1, 1, 0, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" ATTN_WGMMA_ACC32 "}, %36, %37, q, 1, 1, 0, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" ATTN_WGMMA_ACC32 "}, %38, %39, q, 1, 1, 0, 0;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT32 \
  : "l"(da[0]), "l"(db[0]), "l"(da[1]), "l"(db[1]), \
    "l"(da[2]), "l"(db[2]), "l"(da[3]), "l"(db[3]), "r"(scale_d))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_ss64_kk_x4(float (&d)[32], const unsigned long long *da,
                                                   const unsigned long long *db, int scale_d) {
  if constexpr (BF16)
    ATTN_WGMMA_SS64_KK_X4("bf16");
  else
    ATTN_WGMMA_SS64_KK_X4("f16");
}
#undef ATTN_WGMMA_SS64_KK_X4

/* Four m64n80k16 steps, A and B K-major from shared memory. */
#define ATTN_WGMMA_SS80_KK_X4(T) \
  asm volatile("{ .reg .pred p, q; setp.ne.b32 q, 1, 0; setp.ne.b32 p, %48, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n80k16.f32." T "." T " {" ATTN_WGMMA_ACC40 "}, %40, %41, p, 1, 1, 0, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n80k16.f32." T "." T " {" ATTN_WGMMA_ACC40 "}, %42, %43, q, 1, 1, 0, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n80k16.f32." T "." T " {" ATTN_WGMMA_ACC40 "}, %44, %45, q, 1, 1, 0, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n80k16.f32." T "." T " {" ATTN_WGMMA_ACC40 "}, %46, %47, q, 1, 1, 0, 0;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT40 \
  : "l"(da[0]), "l"(db[0]), "l"(da[1]), "l"(db[1]), \
    "l"(da[2]), "l"(db[2]), "l"(da[3]), "l"(db[3]), "r"(scale_d))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_ss80_kk_x4(float (&d)[40], const unsigned long long *da,
                                                   const unsigned long long *db, int scale_d) {
  if constexpr (BF16)
    ATTN_WGMMA_SS80_KK_X4("bf16");
  else
    ATTN_WGMMA_SS80_KK_X4("f16");
}
#undef ATTN_WGMMA_SS80_KK_X4

/* Four m64n128k16 steps, A and B K-major from shared memory. */
#define ATTN_WGMMA_SS128_KK_X4(T) \
  asm volatile("{ .reg .pred p, q; setp.ne.b32 q, 1, 0; setp.ne.b32 p, %72, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {" ATTN_WGMMA_ACC64 "}, %64, %65, p, 1, 1, 0, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {" ATTN_WGMMA_ACC64 "}, %66, %67, q, 1, 1, 0, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {" ATTN_WGMMA_ACC64 "}, %68, %69, q, 1, 1, 0, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {" ATTN_WGMMA_ACC64 "}, %70, %71, q, 1, 1, 0, 0;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT64 \
  : "l"(da[0]), "l"(db[0]), "l"(da[1]), "l"(db[1]), \
    "l"(da[2]), "l"(db[2]), "l"(da[3]), "l"(db[3]), "r"(scale_d))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_ss128_kk_x4(float (&d)[64], const unsigned long long *da,
                                                   const unsigned long long *db, int scale_d) {
  if constexpr (BF16)
    ATTN_WGMMA_SS128_KK_X4("bf16");
  else
    ATTN_WGMMA_SS128_KK_X4("f16");
}
#undef ATTN_WGMMA_SS128_KK_X4

/* Four m64n176k16 steps, A and B K-major from shared memory. */
#define ATTN_WGMMA_SS176_KK_X4(T) \
  asm volatile("{ .reg .pred p, q; setp.ne.b32 q, 1, 0; setp.ne.b32 p, %96, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n176k16.f32." T "." T " {" ATTN_WGMMA_ACC88 "}, %88, %89, p, 1, 1, 0, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n176k16.f32." T "." T " {" ATTN_WGMMA_ACC88 "}, %90, %91, q, 1, 1, 0, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n176k16.f32." T "." T " {" ATTN_WGMMA_ACC88 "}, %92, %93, q, 1, 1, 0, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n176k16.f32." T "." T " {" ATTN_WGMMA_ACC88 "}, %94, %95, q, 1, 1, 0, 0;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT88 \
  : "l"(da[0]), "l"(db[0]), "l"(da[1]), "l"(db[1]), \
    "l"(da[2]), "l"(db[2]), "l"(da[3]), "l"(db[3]), "r"(scale_d))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_ss176_kk_x4(float (&d)[88], const unsigned long long *da,
                                                   const unsigned long long *db, int scale_d) {
  if constexpr (BF16)
    ATTN_WGMMA_SS176_KK_X4("bf16");
  else
    ATTN_WGMMA_SS176_KK_X4("f16");
}
#undef ATTN_WGMMA_SS176_KK_X4

/* Four m64n64k16 steps, A from registers, B MN-major from shared memory. */
#define ATTN_WGMMA_RS64_X4(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %52, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" ATTN_WGMMA_ACC32 "}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" ATTN_WGMMA_ACC32 "}, {%37,%38,%39,%40}, %41, p, 1, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" ATTN_WGMMA_ACC32 "}, {%42,%43,%44,%45}, %46, p, 1, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " {" ATTN_WGMMA_ACC32 "}, {%47,%48,%49,%50}, %51, p, 1, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT32 \
  : "r"(a[0][0]), "r"(a[0][1]), "r"(a[0][2]), "r"(a[0][3]), "l"(db[0]), "r"(a[1][0]), "r"(a[1][1]), "r"(a[1][2]), "r"(a[1][3]), "l"(db[1]), \
    "r"(a[2][0]), "r"(a[2][1]), "r"(a[2][2]), "r"(a[2][3]), "l"(db[2]), "r"(a[3][0]), "r"(a[3][1]), "r"(a[3][2]), "r"(a[3][3]), "l"(db[3]), "n"(1))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_rs64_x4(float (&d)[32], const unsigned (*a)[4],
                                                   const unsigned long long *db) {
  if constexpr (BF16)
    ATTN_WGMMA_RS64_X4("bf16");
  else
    ATTN_WGMMA_RS64_X4("f16");
}
#undef ATTN_WGMMA_RS64_X4

/* Four m64n128k16 steps, A from registers, B MN-major from shared memory. */
#define ATTN_WGMMA_RS128_X4(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %84, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {" ATTN_WGMMA_ACC64 "}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {" ATTN_WGMMA_ACC64 "}, {%69,%70,%71,%72}, %73, p, 1, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {" ATTN_WGMMA_ACC64 "}, {%74,%75,%76,%77}, %78, p, 1, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " {" ATTN_WGMMA_ACC64 "}, {%79,%80,%81,%82}, %83, p, 1, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT64 \
  : "r"(a[0][0]), "r"(a[0][1]), "r"(a[0][2]), "r"(a[0][3]), "l"(db[0]), "r"(a[1][0]), "r"(a[1][1]), "r"(a[1][2]), "r"(a[1][3]), "l"(db[1]), \
    "r"(a[2][0]), "r"(a[2][1]), "r"(a[2][2]), "r"(a[2][3]), "l"(db[2]), "r"(a[3][0]), "r"(a[3][1]), "r"(a[3][2]), "r"(a[3][3]), "l"(db[3]), "n"(1))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_rs128_x4(float (&d)[64], const unsigned (*a)[4],
                                                   const unsigned long long *db) {
  if constexpr (BF16)
    ATTN_WGMMA_RS128_X4("bf16");
  else
    ATTN_WGMMA_RS128_X4("f16");
}
#undef ATTN_WGMMA_RS128_X4

/* Four m64n256k16 steps, A from registers, B MN-major from shared memory. */
#define ATTN_WGMMA_RS256_X4(T) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %148, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T " {" ATTN_WGMMA_ACC128 "}, {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T " {" ATTN_WGMMA_ACC128 "}, {%133,%134,%135,%136}, %137, p, 1, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T " {" ATTN_WGMMA_ACC128 "}, {%138,%139,%140,%141}, %142, p, 1, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T " {" ATTN_WGMMA_ACC128 "}, {%143,%144,%145,%146}, %147, p, 1, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT128 \
  : "r"(a[0][0]), "r"(a[0][1]), "r"(a[0][2]), "r"(a[0][3]), "l"(db[0]), "r"(a[1][0]), "r"(a[1][1]), "r"(a[1][2]), "r"(a[1][3]), "l"(db[1]), \
    "r"(a[2][0]), "r"(a[2][1]), "r"(a[2][2]), "r"(a[2][3]), "l"(db[2]), "r"(a[3][0]), "r"(a[3][1]), "r"(a[3][2]), "r"(a[3][3]), "l"(db[3]), "n"(1))
template <bool BF16>
static __device__ __forceinline__ void attn_wgmma_rs256_x4(float (&d)[128], const unsigned (*a)[4],
                                                   const unsigned long long *db) {
  if constexpr (BF16)
    ATTN_WGMMA_RS256_X4("bf16");
  else
    ATTN_WGMMA_RS256_X4("f16");
}
#undef ATTN_WGMMA_RS256_X4

/* Four m64n64k32 steps, FP8 A and B K-major from shared memory. */
#define ATTN_WGMMA_SS64_FP8_X4(TA, TB) \
  asm volatile("{ .reg .pred p, q; setp.ne.b32 q, 1, 0; setp.ne.b32 p, %40, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k32.f32." TA "." TB " {" ATTN_WGMMA_ACC32 "}, %32, %33, p, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k32.f32." TA "." TB " {" ATTN_WGMMA_ACC32 "}, %34, %35, q, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k32.f32." TA "." TB " {" ATTN_WGMMA_ACC32 "}, %36, %37, q, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k32.f32." TA "." TB " {" ATTN_WGMMA_ACC32 "}, %38, %39, q, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT32 \
  : "l"(da[0]), "l"(db[0]), "l"(da[1]), "l"(db[1]), \
    "l"(da[2]), "l"(db[2]), "l"(da[3]), "l"(db[3]), "r"(scale_d))
template <bool A_E4M3, bool B_E4M3>
static __device__ __forceinline__ void attn_wgmma_ss64_fp8_x4(float (&d)[32], const unsigned long long *da,
                                                   const unsigned long long *db, int scale_d) {
  if constexpr (A_E4M3 && B_E4M3)
    ATTN_WGMMA_SS64_FP8_X4("e4m3", "e4m3");
  else if constexpr (A_E4M3)
    ATTN_WGMMA_SS64_FP8_X4("e4m3", "e5m2");
  else if constexpr (B_E4M3)
    ATTN_WGMMA_SS64_FP8_X4("e5m2", "e4m3");
  else
    ATTN_WGMMA_SS64_FP8_X4("e5m2", "e5m2");
}
#undef ATTN_WGMMA_SS64_FP8_X4

/* Four m64n80k32 steps, FP8 A and B K-major from shared memory. */
#define ATTN_WGMMA_SS80_FP8_X4(TA, TB) \
  asm volatile("{ .reg .pred p, q; setp.ne.b32 q, 1, 0; setp.ne.b32 p, %48, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n80k32.f32." TA "." TB " {" ATTN_WGMMA_ACC40 "}, %40, %41, p, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n80k32.f32." TA "." TB " {" ATTN_WGMMA_ACC40 "}, %42, %43, q, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n80k32.f32." TA "." TB " {" ATTN_WGMMA_ACC40 "}, %44, %45, q, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n80k32.f32." TA "." TB " {" ATTN_WGMMA_ACC40 "}, %46, %47, q, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT40 \
  : "l"(da[0]), "l"(db[0]), "l"(da[1]), "l"(db[1]), \
    "l"(da[2]), "l"(db[2]), "l"(da[3]), "l"(db[3]), "r"(scale_d))
template <bool A_E4M3, bool B_E4M3>
static __device__ __forceinline__ void attn_wgmma_ss80_fp8_x4(float (&d)[40], const unsigned long long *da,
                                                   const unsigned long long *db, int scale_d) {
  if constexpr (A_E4M3 && B_E4M3)
    ATTN_WGMMA_SS80_FP8_X4("e4m3", "e4m3");
  else if constexpr (A_E4M3)
    ATTN_WGMMA_SS80_FP8_X4("e4m3", "e5m2");
  else if constexpr (B_E4M3)
    ATTN_WGMMA_SS80_FP8_X4("e5m2", "e4m3");
  else
    ATTN_WGMMA_SS80_FP8_X4("e5m2", "e5m2");
}
#undef ATTN_WGMMA_SS80_FP8_X4

/* Four m64n128k32 steps, FP8 A and B K-major from shared memory. */
#define ATTN_WGMMA_SS128_FP8_X4(TA, TB) \
  asm volatile("{ .reg .pred p, q; setp.ne.b32 q, 1, 0; setp.ne.b32 p, %72, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k32.f32." TA "." TB " {" ATTN_WGMMA_ACC64 "}, %64, %65, p, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k32.f32." TA "." TB " {" ATTN_WGMMA_ACC64 "}, %66, %67, q, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k32.f32." TA "." TB " {" ATTN_WGMMA_ACC64 "}, %68, %69, q, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k32.f32." TA "." TB " {" ATTN_WGMMA_ACC64 "}, %70, %71, q, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT64 \
  : "l"(da[0]), "l"(db[0]), "l"(da[1]), "l"(db[1]), \
    "l"(da[2]), "l"(db[2]), "l"(da[3]), "l"(db[3]), "r"(scale_d))
template <bool A_E4M3, bool B_E4M3>
static __device__ __forceinline__ void attn_wgmma_ss128_fp8_x4(float (&d)[64], const unsigned long long *da,
                                                   const unsigned long long *db, int scale_d) {
  if constexpr (A_E4M3 && B_E4M3)
    ATTN_WGMMA_SS128_FP8_X4("e4m3", "e4m3");
  else if constexpr (A_E4M3)
    ATTN_WGMMA_SS128_FP8_X4("e4m3", "e5m2");
  else if constexpr (B_E4M3)
    ATTN_WGMMA_SS128_FP8_X4("e5m2", "e4m3");
  else
    ATTN_WGMMA_SS128_FP8_X4("e5m2", "e5m2");
}
#undef ATTN_WGMMA_SS128_FP8_X4

/* Four m64n64k32 steps, FP8 A from registers, FP8 B K-major from shared memory. */
#define ATTN_WGMMA_RS64_FP8_X4(TA, TB) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %52, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k32.f32." TA "." TB " {" ATTN_WGMMA_ACC32 "}, {%32,%33,%34,%35}, %36, p, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k32.f32." TA "." TB " {" ATTN_WGMMA_ACC32 "}, {%37,%38,%39,%40}, %41, p, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k32.f32." TA "." TB " {" ATTN_WGMMA_ACC32 "}, {%42,%43,%44,%45}, %46, p, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n64k32.f32." TA "." TB " {" ATTN_WGMMA_ACC32 "}, {%47,%48,%49,%50}, %51, p, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT32 \
  : "r"(a[0][0]), "r"(a[0][1]), "r"(a[0][2]), "r"(a[0][3]), "l"(db[0]), "r"(a[1][0]), "r"(a[1][1]), "r"(a[1][2]), "r"(a[1][3]), "l"(db[1]), \
    "r"(a[2][0]), "r"(a[2][1]), "r"(a[2][2]), "r"(a[2][3]), "l"(db[2]), "r"(a[3][0]), "r"(a[3][1]), "r"(a[3][2]), "r"(a[3][3]), "l"(db[3]), "n"(1))
template <bool A_E4M3, bool B_E4M3>
static __device__ __forceinline__ void attn_wgmma_rs64_fp8_x4(float (&d)[32], const unsigned (*a)[4],
                                                   const unsigned long long *db) {
  if constexpr (A_E4M3 && B_E4M3)
    ATTN_WGMMA_RS64_FP8_X4("e4m3", "e4m3");
  else if constexpr (A_E4M3)
    ATTN_WGMMA_RS64_FP8_X4("e4m3", "e5m2");
  else if constexpr (B_E4M3)
    ATTN_WGMMA_RS64_FP8_X4("e5m2", "e4m3");
  else
    ATTN_WGMMA_RS64_FP8_X4("e5m2", "e5m2");
}
#undef ATTN_WGMMA_RS64_FP8_X4

/* Four m64n128k32 steps, FP8 A from registers, FP8 B K-major from shared memory. */
#define ATTN_WGMMA_RS128_FP8_X4(TA, TB) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %84, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k32.f32." TA "." TB " {" ATTN_WGMMA_ACC64 "}, {%64,%65,%66,%67}, %68, p, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k32.f32." TA "." TB " {" ATTN_WGMMA_ACC64 "}, {%69,%70,%71,%72}, %73, p, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k32.f32." TA "." TB " {" ATTN_WGMMA_ACC64 "}, {%74,%75,%76,%77}, %78, p, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n128k32.f32." TA "." TB " {" ATTN_WGMMA_ACC64 "}, {%79,%80,%81,%82}, %83, p, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT64 \
  : "r"(a[0][0]), "r"(a[0][1]), "r"(a[0][2]), "r"(a[0][3]), "l"(db[0]), "r"(a[1][0]), "r"(a[1][1]), "r"(a[1][2]), "r"(a[1][3]), "l"(db[1]), \
    "r"(a[2][0]), "r"(a[2][1]), "r"(a[2][2]), "r"(a[2][3]), "l"(db[2]), "r"(a[3][0]), "r"(a[3][1]), "r"(a[3][2]), "r"(a[3][3]), "l"(db[3]), "n"(1))
template <bool A_E4M3, bool B_E4M3>
static __device__ __forceinline__ void attn_wgmma_rs128_fp8_x4(float (&d)[64], const unsigned (*a)[4],
                                                   const unsigned long long *db) {
  if constexpr (A_E4M3 && B_E4M3)
    ATTN_WGMMA_RS128_FP8_X4("e4m3", "e4m3");
  else if constexpr (A_E4M3)
    ATTN_WGMMA_RS128_FP8_X4("e4m3", "e5m2");
  else if constexpr (B_E4M3)
    ATTN_WGMMA_RS128_FP8_X4("e5m2", "e4m3");
  else
    ATTN_WGMMA_RS128_FP8_X4("e5m2", "e5m2");
}
#undef ATTN_WGMMA_RS128_FP8_X4

/* Four m64n256k32 steps, FP8 A from registers, FP8 B K-major from shared memory. */
#define ATTN_WGMMA_RS256_FP8_X4(TA, TB) \
  asm volatile("{ .reg .pred p; setp.ne.b32 p, %148, 0;\n" \
  "wgmma.mma_async.sync.aligned.m64n256k32.f32." TA "." TB " {" ATTN_WGMMA_ACC128 "}, {%128,%129,%130,%131}, %132, p, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n256k32.f32." TA "." TB " {" ATTN_WGMMA_ACC128 "}, {%133,%134,%135,%136}, %137, p, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n256k32.f32." TA "." TB " {" ATTN_WGMMA_ACC128 "}, {%138,%139,%140,%141}, %142, p, 1, 1;\n" \
  "wgmma.mma_async.sync.aligned.m64n256k32.f32." TA "." TB " {" ATTN_WGMMA_ACC128 "}, {%143,%144,%145,%146}, %147, p, 1, 1;\n" \
  "}\n" \
  : ATTN_WGMMA_OUT128 \
  : "r"(a[0][0]), "r"(a[0][1]), "r"(a[0][2]), "r"(a[0][3]), "l"(db[0]), "r"(a[1][0]), "r"(a[1][1]), "r"(a[1][2]), "r"(a[1][3]), "l"(db[1]), \
    "r"(a[2][0]), "r"(a[2][1]), "r"(a[2][2]), "r"(a[2][3]), "l"(db[2]), "r"(a[3][0]), "r"(a[3][1]), "r"(a[3][2]), "r"(a[3][3]), "l"(db[3]), "n"(1))
template <bool A_E4M3, bool B_E4M3>
static __device__ __forceinline__ void attn_wgmma_rs256_fp8_x4(float (&d)[128], const unsigned (*a)[4],
                                                   const unsigned long long *db) {
  if constexpr (A_E4M3 && B_E4M3)
    ATTN_WGMMA_RS256_FP8_X4("e4m3", "e4m3");
  else if constexpr (A_E4M3)
    ATTN_WGMMA_RS256_FP8_X4("e4m3", "e5m2");
  else if constexpr (B_E4M3)
    ATTN_WGMMA_RS256_FP8_X4("e5m2", "e4m3");
  else
    ATTN_WGMMA_RS256_FP8_X4("e5m2", "e5m2");
}
#undef ATTN_WGMMA_RS256_FP8_X4

#undef ATTN_WGMMA_ACC16
#undef ATTN_WGMMA_OUT16
#undef ATTN_WGMMA_ACC32
#undef ATTN_WGMMA_OUT32
#undef ATTN_WGMMA_ACC40
#undef ATTN_WGMMA_OUT40
#undef ATTN_WGMMA_ACC64
#undef ATTN_WGMMA_OUT64
#undef ATTN_WGMMA_ACC88
#undef ATTN_WGMMA_OUT88
#undef ATTN_WGMMA_ACC128
#undef ATTN_WGMMA_OUT128
