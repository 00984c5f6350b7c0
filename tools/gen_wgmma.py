#!/usr/bin/env python3
# gen_wgmma.py: writes templates/wgmma.cuh (the wgmma asm wrappers: their operand
# lists are long and regular). Run from the repository root after changing a shape;
# the output is committed.
ACCS = (16, 32, 40, 64, 88, 128)  # accumulator registers a thread: n = N / 2
def acc_macros():
    """ATTN_WGMMA_ACC<n> ("%0,...,%<n-1>", the accumulator list inside the asm
    text) and ATTN_WGMMA_OUT<n> (the n "+f" operands), written once for every
    wrapper of that width (each was pasted per wrapper: text NVRTC parses in
    every sm_90a unit). #undef'd at the end of the file."""
    out = ("/* The accumulator operands of a thread, n = N / 2 of them: their names\n"
           " * in the asm text (ACC) and the operand list (OUT). */\n")
    for n in ACCS:
        idx = [f"%{k}" for k in range(n)]
        lines = [",".join(idx[i:i+16]) for i in range(0, n, 16)]
        out += f"#define ATTN_WGMMA_ACC{n} \\\n  \"" + ",\" \\\n  \"".join(lines) + "\"\n"
    for n in ACCS:
        items = [f'"+f"(d[{k}])' for k in range(n)]
        lines = [", ".join(items[i:i+8]) for i in range(0, n, 8)]
        out += f"#define ATTN_WGMMA_OUT{n} \\\n  " + ", \\\n  ".join(lines) + "\n"
    return out
def acc_undefs():
    return "".join(f"#undef ATTN_WGMMA_ACC{n}\n#undef ATTN_WGMMA_OUT{n}\n" for n in ACCS)
def wrapper(name, N, doc, regs_a, fp8, tails, steps=1):
    """One shape: a macro over the types (T for 16-bit, TA and TB for FP8) and
    the template choosing them. regs_a: A from registers (rs) or through a
    descriptor (ss); tails: the immediates after scale-d (16-bit ss: the
    scales and both transposes; rs: the scales and B's transpose; FP8: the
    scales only, FP8 operands being K-major). steps > 1: that many k steps in
    one asm statement (A and B of step s from a[s] / da[s] and db[s]; an ss
    wrapper's scale_d applies to the first step, the others accumulate)."""
    n = N // 2
    k = 32 if fp8 else 16
    types = 'TA "." TB' if fp8 else 'T "." T'
    per = 5 if regs_a else 2  # input operands a step
    pred = n + per * steps
    lines = []
    for st in range(steps):
        o = n + per * st
        if regs_a:
            a_ops = f"{{%{o},%{o+1},%{o+2},%{o+3}}}, %{o+4}"
        else:
            a_ops = f"%{o}, %{o+1}"
        p = "p" if st == 0 or regs_a else "q"
        lines.append(f'  "wgmma.mma_async.sync.aligned.m64n{N}k{k}.f32." {types} " {{" ATTN_WGMMA_ACC{n} "}}, {a_ops}, {p}, {tails};\\n" \\\n')
    if regs_a:
        if steps == 1:
            ins = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1)'
            args = (f"float (&d)[{n}], const unsigned (&a)[4],\n"
                    "                                                   unsigned long long db")
        else:
            ins = ", ".join(f'"r"(a[{st}][0]), "r"(a[{st}][1]), "r"(a[{st}][2]), "r"(a[{st}][3]), "l"(db[{st}])'
                            for st in range(steps)) + ', "n"(1)'
            args = (f"float (&d)[{n}], const unsigned (*a)[4],\n"
                    "                                                   const unsigned long long *db")
    else:
        if steps == 1:
            ins = '"l"(da), "l"(db), "r"(scale_d)'
            args = (f"float (&d)[{n}], unsigned long long da,\n"
                    "                                                   unsigned long long db, int scale_d")
        else:
            ins = ", ".join(f'"l"(da[{st}]), "l"(db[{st}])' for st in range(steps)) + ', "r"(scale_d)'
            args = (f"float (&d)[{n}], const unsigned long long *da,\n"
                    "                                                   const unsigned long long *db, int scale_d")
    # break the input list every two steps
    ins = ins.replace(', "l"(da[2])', ', \\\n    "l"(da[2])').replace('"r"(a[2][0])', '\\\n    "r"(a[2][0])')
    if steps > 1:
        name = f"{name}_x{steps}"
    M = f"ATTN_WGMMA_{name.upper()}"
    if fp8:
        tparams, margs = "bool A_E4M3, bool B_E4M3", "TA, TB"
        body = (f'  if constexpr (A_E4M3 && B_E4M3)\n    {M}("e4m3", "e4m3");\n'
                f'  else if constexpr (A_E4M3)\n    {M}("e4m3", "e5m2");\n'
                f'  else if constexpr (B_E4M3)\n    {M}("e5m2", "e4m3");\n'
                f'  else\n    {M}("e5m2", "e5m2");')
    else:
        tparams, margs = "bool BF16", "T"
        body = f'  if constexpr (BF16)\n    {M}("bf16");\n  else\n    {M}("f16");'
    preds = ".reg .pred p; " if steps == 1 or regs_a else ".reg .pred p, q; setp.ne.b32 q, 1, 0; "
    return (f"/* {doc} */\n"
            f"#define {M}({margs}) \\\n"
            f'  asm volatile("{{ {preds}setp.ne.b32 p, %{pred}, 0;\\n" \\\n'
            + "".join(lines) +
            f'  "}}\\n" \\\n'
            f"  : ATTN_WGMMA_OUT{n} \\\n"
            f"  : {ins})\n"
            f"template <{tparams}>\n"
            f"static __device__ __forceinline__ void attn_wgmma_{name}({args}) {{\n"
            f"{body}\n}}\n"
            f"#undef {M}\n")
def ss(name, N, ta, tb, doc, steps=1):
    return wrapper(name, N, doc, False, False, f"1, 1, {ta}, {tb}", steps)
def rs(name, N, doc, steps=1):
    return wrapper(name, N, doc, True, False, "1, 1, 1", steps)
def ss8(name, N, doc, steps=1):
    return wrapper(name, N, doc, False, True, "1, 1", steps)
def rs8(name, N, doc, steps=1):
    return wrapper(name, N, doc, True, True, "1, 1", steps)
head='''/*
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
  asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");
}
[[maybe_unused]] static __device__ __forceinline__ void attn_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\\n" ::: "memory");
}
/* Waits until at most N committed groups are still running. */
template <int N> [[maybe_unused]] static __device__ __forceinline__ void attn_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\\n" ::"n"(N) : "memory");
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
  asm volatile("fence.proxy.async.shared::cta;\\n" ::: "memory");
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
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\\n" ::"r"(bar), "r"(count)
               : "memory");
}

/* One arrival that also expects `bytes` of transactions (the TMA copies
 * completing on this barrier). */
[[maybe_unused]] static __device__ __forceinline__ void attn_mbar_expect_tx(unsigned bar,
                                                                          int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\\n" ::"r"(bar),
               "r"(bytes)
               : "memory");
}

[[maybe_unused]] static __device__ __forceinline__ void attn_mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\\n" ::"r"(bar) : "memory");
}

/* Spins until the phase of the given parity has completed. */
[[maybe_unused]] static __device__ __forceinline__ void attn_mbar_wait(unsigned bar, int parity) {
  asm volatile("{\\n .reg .pred done;\\n"
               "wait_%=:\\n"
               " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\\n"
               " @!done bra wait_%=;\\n}\\n" ::"r"(bar),
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
               "complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\\n" ::"r"(dst),
               "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
               : "memory");
}

[[maybe_unused]] static __device__ __forceinline__ void attn_prefetch_tmap(const attn_tmap *map) {
  asm volatile("prefetch.tensormap [%0];\\n" ::"l"(map) : "memory");
}

/* Named barrier `id` over the 256 threads of two consumer warpgroups. */
[[maybe_unused]] static __device__ __forceinline__ void attn_named_sync(int id) {
  asm volatile("bar.sync %0, 256;\\n" ::"r"(id) : "memory");
}
[[maybe_unused]] static __device__ __forceinline__ void attn_named_arrive(int id) {
  asm volatile("bar.arrive %0, 256;\\n" ::"r"(id) : "memory");
}
/* Named barrier `id` over N threads (a multiple of 32): the consumers and
 * one producer warp meet on these (bwd_sm90's dQ buffer). An arrive
 * orders the arriving thread's earlier writes before the syncing threads'
 * later reads. */
template <int N> [[maybe_unused]] static __device__ __forceinline__ void attn_bar_sync(int id) {
  asm volatile("bar.sync %0, %1;\\n" ::"r"(id), "n"(N) : "memory");
}
template <int N> [[maybe_unused]] static __device__ __forceinline__ void attn_bar_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\\n" ::"r"(id), "n"(N) : "memory");
}

/* Adds the shared-memory box at src into a 4-D tensor's tile (element-wise
 * add done at L2; coordinates as attn_tma_load4's; rows out of bounds are
 * skipped), as one operation of this thread's bulk group. */
[[maybe_unused]] static __device__ __forceinline__ void attn_tma_reduce_add4(const attn_tmap *map,
                                                                           unsigned src, int c0,
                                                                           int c1, int c2, int c3) {
  asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group "
               "[%0, {%1, %2, %3, %4}], [%5];\\n" ::"l"(map),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
               : "memory");
}
[[maybe_unused]] static __device__ __forceinline__ void attn_bulk_commit() {
  asm volatile("cp.async.bulk.commit_group;\\n" ::: "memory");
}
/* Waits until at most N of this thread's bulk groups still read shared
 * memory (READ) or are still running at all. */
template <int N, bool READ>
[[maybe_unused]] static __device__ __forceinline__ void attn_bulk_wait() {
  if constexpr (READ)
    asm volatile("cp.async.bulk.wait_group.read %0;\\n" ::"n"(N) : "memory");
  else
    asm volatile("cp.async.bulk.wait_group %0;\\n" ::"n"(N) : "memory");
}

'''
body=head
body+=acc_macros()+"\n"
body+=ss("ss64_kk",64,0,0,"m64n64k16, A and B K-major from shared memory.")
body+="\n"+ss("ss80_kk",80,0,0,"m64n80k16, A and B K-major from shared memory.")
body+="\n"+ss("ss128_kk",128,0,0,"m64n128k16, A and B K-major from shared memory.")
body+="\n"+ss("ss176_kk",176,0,0,"m64n176k16, A and B K-major from shared memory (fwd_sm90's bn176 key tiles).")
body+="\n"+ss("ss32_kk",32,0,0,"m64n32k16, A and B K-major from shared memory.")
body+="\n"+ss("ss128_kmn",128,0,1,"m64n128k16, A K-major, B MN-major (transposed) from shared memory.")
body+="\n"+ss("ss64_mn",64,1,1,"m64n64k16, A and B MN-major (transposed) from shared memory.")
body+="\n"+ss("ss32_mn",32,1,1,"m64n32k16, A and B MN-major (transposed) from shared memory.")
body+="\n"+rs("rs64",64,"m64n64k16, A from registers, B MN-major from shared memory.")
body+="\n"+rs("rs128",128,"m64n128k16, A from registers, B MN-major from shared memory.")
body+="\n"+rs("rs256",256,"m64n256k16, A from registers, B MN-major from shared memory.")
body+="\n"+ss8("ss64_fp8",64,"m64n64k32, FP8 A and B (e4m3 or e5m2 each) K-major from shared memory.")
body+="\n"+ss8("ss80_fp8",80,"m64n80k32, FP8 A and B (e4m3 or e5m2 each) K-major from shared memory.")
body+="\n"+ss8("ss128_fp8",128,"m64n128k32, FP8 A and B (e4m3 or e5m2 each) K-major from shared memory.")
body+="\n"+rs8("rs64_fp8",64,"m64n64k32, FP8 A from registers (4 bytes a register), FP8 B K-major from shared memory.")
body+="\n"+rs8("rs128_fp8",128,"m64n128k32, FP8 A from registers (4 bytes a register), FP8 B K-major from shared memory.")
body+="\n"+rs8("rs256_fp8",256,"m64n256k32, FP8 A from registers (4 bytes a register), FP8 B K-major from shared memory.")
body+="\n/* ---- four k steps a statement (fwd_sm90's S and P V GEMMs) */\n"
for N in (64, 80, 128, 176):
    body+="\n"+ss(f"ss{N}_kk",N,0,0,f"Four m64n{N}k16 steps, A and B K-major from shared memory.",4)
for N in (64, 128, 256):
    body+="\n"+rs(f"rs{N}",N,f"Four m64n{N}k16 steps, A from registers, B MN-major from shared memory.",4)
for N in (64, 80, 128):
    body+="\n"+ss8(f"ss{N}_fp8",N,f"Four m64n{N}k32 steps, FP8 A and B K-major from shared memory.",4)
for N in (64, 128, 256):
    body+="\n"+rs8(f"rs{N}_fp8",N,f"Four m64n{N}k32 steps, FP8 A from registers, FP8 B K-major from shared memory.",4)
body+="\n"+acc_undefs()
open('templates/wgmma.cuh', 'w').write(body)
