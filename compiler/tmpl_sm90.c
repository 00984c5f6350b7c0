/*
 * tmpl_sm90.c: tile configurations of the Hopper forward template,
 * templates/fwd_sm90.cuh.
 *
 * The CTA is a producer warpgroup and two consumer warpgroups of 64 query
 * rows (BM = 128, 384 threads; three, BM 192 and 512 threads, in the wg3
 * variant); the table picks the key tile BN and the
 * number of K/V stages. Shared memory holds the Q tile, the stages of
 * (K tile, V tile), the mbarriers, the producer's slots (the work tile,
 * then each stage's key tile and class), and 1024 bytes of slack for rounding
 * the base up to the 128-byte swizzle's 1024-byte period:
 *
 *     smem = 2*(BM*d_qk + stages*BN*(d_qk + d_v)) + 8*(3 + 5*stages) + 1024
 *
 * (FP8: 8-bit Q and K tiles and an 8-bit V tile per stage beside the
 * 16-bit one: attn_fwd90_layout_of)
 * as abi/attn_layout.h defines it for the template too. Register budget per
 * consumer thread (232): S is BN/2 floats, O d_v/2 floats, P BN/4 words;
 * at d_v 256 the O accumulator (128) leaves room for BN 64 or 80.
 *
 * Variants (measured side by side in bench/NOTES-sm90.md) are chosen by
 * the compile option sm90_variant (CompileOptions; the library's context
 * option ATTN_OPTION_SM90_VARIANT, which the attnc command and the
 * benchmarks set from the environment variable ATTN_SM90_VARIANT); each is
 * emitted as macros, so the kernel source (and so its cache key) differs:
 *   auto          the default: persistent (tile queue), BN 80 at D 256,
 *                 idle warpgroups skipping their tile, Q released early
 *                 in short work tiles (both session 36, below),
 *                 wg3's three warpgroups in graphs without a mask and
 *                 in masked dense 16-bit graphs at head tiles up to 64,
 *                 kv_copy's widened copies where q's and k's sequence
 *                 lengths are one symbol, bn176's key tiles where its
 *                 graphs' score chain reads no memory per element, and
 *                 in masked graphs on three warpgroups partial_first's
 *                 short first tile (below)
 *   base          one CTA per query tile; D 256: BN 64, 2 stages
 *   persist       persistent grid (ATTN_PERSISTENT), same tiles
 *   bn80          D 256: BN 80, 2 stages; one CTA per query tile
 *   persist_bn80  both
 *                 (base to persist_bn80: Q released after the last P V and
 *                 idle warpgroups' GEMMs run, as when they were measured)
 *   f16_pv        auto, but where a graph with FP8 q, k, v rounds P to
 *                 FP8, P V in f16 (P rounded in f32, V widened) instead of
 *                 FP8 (V transposed): the same values; measured 0.94-1.06x
 *                 the FP8 P V of auto (bench/RESULTS.md, FP8)
 *   wg3           auto, but masked FP8, paged and packed graphs too where
 *                 the head tiles are at most 64 (auto: dense 16-bit ones),
 *                 and FP8 P V at 128 (then BN
 *                 64; measured 0.86-0.92x of two warpgroups): three
 *                 consumer warpgroups (BM 192, 512 threads, 160 registers
 *                 a consumer thread), FA3's tile at D 64, where the
 *                 softmax's latency chain, not the tensor cores, bounds
 *                 two warpgroups (bench/NOTES-sm90.md, session 27)
 *   kv8_early     auto, but an FP8 KV cache under a 16-bit q refills each
 *                 stage's 8-bit K and V tiles as soon as the converters
 *                 have read them, not when the consumers free the 16-bit
 *                 tiles: TMA's latency leaves the path from a released
 *                 tile to the next S GEMM (session 29; measured 0.98-1.03x
 *                 of auto in session 30)
 *   kv_copy       auto, but a dense FP8 KV cache under a 16-bit q is
 *                 widened once into a 16-bit workspace copy by a plan step
 *                 (widen_kv) and the forward runs as on 16-bit K and V,
 *                 whatever the graph's sequence lengths: three converter
 *                 warps cannot keep up with the tensor cores
 *                 (bench/NOTES-sm90.md, session 30); the decode kernel
 *                 still reads the FP8 cache. Measured (H100, session 32)
 *                 0.84-1.01x of a bf16 cache against the in-kernel
 *                 widening's 0.39-0.94x. auto takes it where q's sequence
 *                 dim is k's symbol (Sq = Skv at every launch, so the copy
 *                 is read by Skv / BM query tiles); where Sq may be much
 *                 shorter (a chunk of queries against a long cache) the
 *                 copy's write and read can cost more than the forward
 *   bn176         auto, but key tiles of 176 (two stages) at head tiles
 *                 of 128 for 16-bit q, k and v, dense and without a mask:
 *                 FA3's tile there; the per-tile fixed work (barriers,
 *                 row maxima, the O rescale, the stage handshakes) spread
 *                 over 1.375x the keys, and longer GEMMs for the other
 *                 warpgroup's softmax to hide behind; also where the score
 *                 chain reads memory per element (auto: not there). H100,
 *                 session 32: +2-4% at S 4k-16k, +0% at 1k-2k (D 128)
 *   fp8_vt8       auto, but where FP8 q, k and v run P V in FP8, V^T takes
 *                 8 bits an element in shared memory (it had the 16-bit V
 *                 tile's room), so head tiles of 256 take key tiles of 128
 *                 (two stages) instead of 64: FA3's FP8 tile there, half
 *                 the per-tile fixed work a key; up to 128, four stages
 *                 instead of three. H100, session 32: 0.95-0.99x of auto
 *                 at D 256 (predicted +8-15%), so opt-in
 *   kv8           auto, but an FP8 KV cache is always widened in the
 *                 kernel (session 31's default; for measuring against)
 *   bn128         auto, but key tiles of 128 where auto takes 176 (session
 *                 31's default; for measuring against)
 *   rescale_late  auto, but O's rescale by a tile's softmax waits until the
 *                 next tile's S GEMM is issued and runs before its P V
 *                 (FA3's order above head dim 128), off the path from one
 *                 softmax to the next; ptxas then issues P V only once S is
 *                 done (fwd_sm90.cuh, fwd90_rescale_o); with pv_overlap's
 *                 commits, everywhere. H100, session 35: +9-10% over auto
 *                 of session 34 at D 64 causal (two consumer warpgroups),
 *                 -3 to -7% at D 64 unmasked (three), -2 to -5% at 128 and
 *                 256; auto takes it where it gained (below)
 *   pv_overlap    auto, but P V's wgmma group committed in the branch that
 *                 issues it everywhere, FP8 q, k and v included (fwd_sm90.cuh,
 *                 fwd90_pv_overlap). H100, session 35: FP8 0.95-1.02x of
 *                 the single commit, so auto keeps that for FP8
 *   pv_once       auto, but P V's group closed by one commit after the
 *                 branch everywhere (session 34's auto: ptxas closed it at
 *                 the branch's end and made the commit a third, empty
 *                 group, so the consumer's wait for S waited for the
 *                 previous P V too; for measuring against)
 *   q_early       auto, but every work tile releases Q to the producer once
 *                 its warpgroup's last S GEMM is done, not only those of at
 *                 most 16 key tiles (auto's bound, Q_EARLY_AUTO): in the
 *                 persistent loop the next tile's Q then loads under the
 *                 last softmax, P V and O's store (fwd90_q_early_tiles).
 *                 H100, session 36: +4-5% at D 64 S 1k, -1 to -3% at 8k
 *   auto35        auto as it was in session 35: Q released after the last
 *                 P V in every tile, and a consumer warpgroup whose 64 rows
 *                 all lie past the sequence's last query runs the tile's
 *                 GEMMs and softmax on Q's zero rows (auto skips them,
 *                 fwd90_skip_idle: the last query tile of a length that is
 *                 not a multiple of BM, S 1k on 192-row tiles, packed
 *                 sequences' ends; H100, session 36: +5.5% at D 64 S 1k
 *                 unmasked); for measuring against
 *   tanh_poly     auto, but a softcap's tanh (tanh of q.k times per-(b, h)
 *                 factors) by a degree-7 odd polynomial on the FMA pipe for
 *                 the tiles whose arguments all lie in [-1, 1] (a warp's
 *                 vote), tanh.approx elsewhere (fwd90_tanh_poly): one MUFU
 *                 op a score instead of two. H100, session 36: softcap
 *                 over plain +48% at D 128 (auto +30%), +61% at D 64
 *                 (+50%): seven instructions a score where tanh.approx
 *                 takes two, and the kernel is short of issue slots
 *   auto36        auto as it was in session 36: masked graphs on two
 *                 consumer warpgroups at every head dim (D 64: with the
 *                 late rescale, RESCALE_LATE_NARROW2); for measuring
 *                 against
 *   partial_first auto, but where BM does not divide a sequence's length
 *                 its short query tile is the first, not the last, in
 *                 every graph (auto: masked ones on three warpgroups,
 *                 PF_WG3; fwd90_rows):
 *                 under a causal mask the last rows see the most keys,
 *                 and a short last tile runs them on few rows (S 1k on
 *                 192-row tiles: 8 key tiles on one warpgroup of three).
 *                 H100, session 38, on three: D 64 causal +11.7% at S 1k,
 *                 +5.4% at 2k, +3.6% at 4k, +1.6% at 8k (predicted +7%,
 *                 +1-2%); D 64 unmasked +1.9%, +1.6%, -2.6%, -4.4%;
 *                 0.96-1.02x where BM divides S (noise)
 *   ring_closed   auto, but the consumers' turn ring closed at each work
 *                 tile's end and reopened at the next one's start (auto
 *                 until session 40, fwd_sm90.cuh: warpgroup 0 then waits
 *                 for the last warpgroup's epilogue before its next S
 *                 GEMM); for measuring against. Every other variant,
 *                 auto35 and auto36 included, runs the ring of session 40
 *                 (H100: +1.8% over ring_closed in geometric mean, D 64
 *                 +3-4%: bench/RESULTS.md "Session 40")
 *   q_before_v    auto, but at a later work tile's start the producer
 *                 issues Q's load between the first key tile's K and V
 *                 copies instead of after both (fwd_sm90.cuh,
 *                 fwd90_q_before_v): V's copy waits for the stage's V to
 *                 be released, i.e. for the last warpgroup's P V of the
 *                 tile before last, which it waits for after its last
 *                 softmax, while Q in a short tile is released after the
 *                 last S GEMM, about a softmax earlier; so far Q's load
 *                 waited behind V's, and warpgroup 0 waits for Q at the
 *                 next tile's start. H100, session 41: 0.996x auto (D 128
 *                 S 1k 0.996; predicted +2-5%): Q's load is not the S 1k
 *                 fixed cost (the profile's is O's store)
 *   pv_wait_next  auto, but the wait for a key tile's P V, O's rescale and
 *                 P's packing at the top of the next key tile, before its
 *                 turn, instead of after this one's softmax: ptxas hoists
 *                 that wait (WARPGROUP.DEPBAR.LE gsb0, 0x0) above the
 *                 softmax's exponentials in every variant, so they wait
 *                 for the previous P V and only the row maxima run under
 *                 it; across the loop's back edge it cannot. H100, session
 *                 41: 0.990x auto in bf16 (D 64 0.974), FP8 D 128 +2-3%,
 *                 D 256 0.97-1.00 (predicted FP8 +5-15%)
 *   o_smem        auto, but each consumer warp writes its 16 rows of O into
 *                 shared memory (128-byte swizzle) and stores them by TMA
 *                 (fwd_sm90.cuh, fwd90_o_smem) instead of 32 four-byte
 *                 stores a thread, which held 13% of the stall samples at D
 *                 128 S 1k (session 41's ncu); match.c keeps it to 16- and
 *                 8-bit O (packed: 16-bit), no dropout; auto not under
 *                 partial_first (the variant there too: a short first
 *                 tile's warps past its rows store no box; not measured
 *                 yet). Session 41 sized a slot
 *                 for every 64-column block into the tile choice (D 128:
 *                 key tiles of 128 in two stages, not 176): H100, session
 *                 42, +10% at D 128 S 1k, +6% at 2k, but -7% at 16k
 *                 (non-causal; the stages). Now auto's tiles and the slots
 *                 the room left holds (sm90_o_slots: D 128 with key tiles
 *                 of 176 one of two, a block's store then waits for the
 *                 last to read its slot; a mask's D 128 two stages of 128
 *                 and both slots; D 192 all three; D 256, key tiles of 80,
 *                 none). An 8-bit O too (128 columns a slot: FP8 D 128
 *                 one slot beside its three stages, D 256 two stages and
 *                 two slots). H100, session 43: bf16 D 128 +8% (+10%
 *                 causal) at S 1k, +4-6% at 2k, -0.6 to +2.6% at 4k-16k,
 *                 D 64 -0.9 to +2.2%, ALiBi D 128 +0.5 to +16%: auto
 *                 stages a 16-bit O since; FP8 +2-20% at S 1k, but -9%
 *                 at D 128 S 16k non-causal (same tiles; -6.6% in four
 *                 rounds of alternating order) and -4% at D 256 S 16k
 *                 causal, so an 8-bit O only here
 *   o_regs        auto, but O stored from registers as before session 43
 *                 (for measuring against)
 * numbered 0 to 25 in this order (the numbers are the library's option
 * values); 0 is the default below (the fastest
 * measured), and so is any number out of range (the library never fails
 * on a tuning knob).
 */
#include <string.h>

#include "attn_layout.h"
#include "attnc.h"

typedef struct Sm90Candidate {
  int bn, stages;
} Sm90Candidate;

/* Where three consumer warpgroups run (tmpl_sm90_config says which
 * tiles): never; in graphs without a mask; there and in masked dense
 * graphs of 16-bit q, k and v at head tiles up to 64 (auto since session
 * 37: H100, D 64 causal beside two warpgroups with the late rescale, -3.3%
 * at S 1k, +4.6% at 2k, +10.6% at 4k, +17.7% at 8k, +8.7% at 16k; packed
 * ones since session 38, whose tests passed on three on the H100 (512/512
 * of test_forward's rest under wg3), where two warpgroups ran them at
 * 0.81-0.87x of the dense graph on three at D 64; paged ones keep two:
 * their tests passed too, but a masked paged decode on 192-row tiles was
 * never timed); or in every graph (and for FP8 P V at head tiles of 128). */
typedef enum { WG3_NEVER, WG3_UNMASKED, WG3_MASKED16, WG3_ALWAYS } Sm90Wg3;
/* Where a dense FP8 KV cache under a 16-bit q is widened by a plan step
 * (kv_copy): never, where q's and k's sequence dims are one symbol, or
 * always. */
typedef enum { KV_COPY_NEVER, KV_COPY_SAME_SEQ, KV_COPY_ALWAYS } Sm90KvCopy;
/* Where key tiles of 176 run at head tiles of 128 (dense, unmasked, 16-bit
 * graphs): never, where the score chain reads no memory per element (a
 * bias or table read there spilled 36-236 bytes at 176), or always. */
typedef enum { BN176_NEVER, BN176_PLAIN, BN176_ALWAYS } Sm90Bn176;

/* Where P V's wgmma group is committed in the branch that issues it (the
 * consumer's wait for S then leaves the previous P V running): never (one
 * commit after the branch), for 16-bit q, k and v, or always; and where
 * O's rescale waits for the next S GEMM's issue: never, at head dims of
 * 64 under two consumer warpgroups (16-bit), or always. H100, session
 * 35 (bench/NOTES-sm90.md): the commit in its branch +1-8% for 16-bit
 * (0.98-1.01x at D 256 unmasked), 0.95-1.02x for FP8 q, k and v; the late
 * rescale +3-10% at D 64 causal, a loss everywhere else (and where the
 * score reads memory or K/V are paged ptxas serializes the wgmmas under
 * it: auto leaves those out). Session 41 (H100, bench/RESULTS.md): for FP8 q,
 * k, v with FP8 P V at head tiles up to 128 the commit in its branch measured
 * +1.6 to +12.3% at D 64 and +2.0 to +6.1% at D 128 (two rounds, 24
 * configurations, S 1k-16k, causal or not; 0.98-1.00x in two of them) and
 * 0.96-1.00x at D 256: PV_OVERLAP_16 takes those FP8 graphs too. */
typedef enum { PV_ONCE, PV_OVERLAP_16, PV_OVERLAP_ALWAYS } Sm90PvCommit;
typedef enum { RESCALE_EARLY, RESCALE_LATE_NARROW2, RESCALE_LATE_ALWAYS } Sm90Rescale;
/* Which work tiles release Q after their last S GEMM instead of their last
 * P V (fwd90_q_early_tiles): those of at most 16 key tiles (auto), or all
 * (the q_early variant). H100, session 36 (bench/NOTES-sm90.md), every
 * tile early: +4-5% at D 64 S 1k (8 key tiles), +1% at 2k (16), -1 to -3%
 * at 8k (47-103) but for D 128 causal. */
#define Q_EARLY_AUTO 16
#define Q_EARLY_ALL (1 << 20)
/* Where a sequence's short query tile runs first (fwd90_rows): never, in
 * masked graphs on three consumer warpgroups' 192-row tiles (auto: most
 * sequence lengths leave a short one, and a mask's diagonal makes the
 * last rows the heaviest), or always. H100, session 38, D 64 on 192-row
 * tiles: causal +11.7% at S 1k, +5.4% at 2k, +3.6% at 4k, +1.6% at 8k;
 * unmasked +1.9%, +1.6%, -2.6%, -4.4% (every row costs the same there:
 * nothing to gain; the spread of rows with identical tiles was
 * 0.96-1.02); where 128-row tiles divide S, within noise. */
typedef enum { PF_NEVER, PF_WG3, PF_ALWAYS } Sm90PartialFirst;
/* Which O is staged in shared memory and stored by TMA (o_smem): none,
 * a 16-bit one (auto since session 43: H100, bf16 D 128 +4-10% at S 1k-2k,
 * -0.6 to +2.6% at 4k-16k, D 64 -0.9 to +2.2%, ALiBi D 128 +0.5-16%;
 * over a paged cache since session 44: H100 paged prefill at D 128, page
 * 64, +1.0 to +6.0% in five of six cases, -1.7% in one; not under
 * partial_first, where D 64 causal measured +2.1% at S 1k and within 1%
 * elsewhere, its tests not yet run), or
 * an 8-bit one too (the o_smem variant: FP8 +10-20% at S 1k but -6.6% at
 * D 128 S 16k non-causal with the same tiles, four rounds of alternating
 * order; -4% at D 256 16k causal). */
typedef enum { O_STAGE_NEVER, O_STAGE_16, O_STAGE_ALWAYS } Sm90OStage;

typedef struct Sm90Variant {
  const char *name;
  int persistent_max_d; /* persistent grid up to this head dim (0: never) */
  bool bn80;            /* D 256: key tiles of 80 instead of 64 */
  bool f16_pv;          /* P V in f16 even where a graph rounds P to FP8 */
  Sm90Wg3 wg3;          /* three consumer warpgroups */
  bool kv8_early;       /* an FP8 KV cache's 8-bit tiles refilled once converted */
  Sm90KvCopy kv_copy;   /* a dense FP8 KV cache widened into a 16-bit copy first */
  Sm90Bn176 bn176;      /* key tiles of 176 at head tiles of 128 (16-bit, dense, unmasked) */
  bool fp8_vt8;         /* FP8 P V's V^T in 8 bits; key tiles of 128 at head tiles of 256 */
  Sm90Rescale rescale;  /* O's rescale after the next S GEMM's issue, before its P V */
  Sm90PvCommit pv;      /* P V's wgmma group committed in its own branch (no dummy group) */
  int q_early_tiles;    /* work tiles of at most this many key tiles release Q after their last
                           S GEMM (fwd90_q_early_tiles; 0 never, Q_EARLY_ALL every tile) */
  bool skip_idle;       /* warpgroups past the sequence's end skip the tile (fwd90_skip_idle) */
  bool tanh_poly;       /* a softcap's tanh on the FMA pipe where in range (fwd90_tanh_poly) */
  Sm90PartialFirst partial_first; /* a sequence's short query tile first (fwd90_rows) */
  bool ring_per_tile;   /* the consumers' turn ring closed at each work tile's end */
  bool q_before_v;      /* a later work tile's Q load issued before its first V copy */
  bool pv_wait_next;    /* P V's wait, O's rescale and P's packing at the next key tile's top */
  Sm90OStage o_stage;   /* O staged in shared memory where the tiles leave room, TMA stores */
} Sm90Variant;

static const Sm90Variant sm90_variants[] = {
    {"auto", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false,
     PF_WG3, false, false, false, O_STAGE_16},
    {"base", 0, false, false, WG3_NEVER, false, KV_COPY_NEVER, BN176_NEVER, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, 0, false, false, PF_NEVER, false, false, false,
     O_STAGE_NEVER},
    {"persist", 256, false, false, WG3_NEVER, false, KV_COPY_NEVER, BN176_NEVER, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, 0, false, false, PF_NEVER, false, false, false,
     O_STAGE_NEVER},
    {"bn80", 0, true, false, WG3_NEVER, false, KV_COPY_NEVER, BN176_NEVER, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, 0, false, false, PF_NEVER, false, false, false,
     O_STAGE_NEVER},
    {"persist_bn80", 256, true, false, WG3_NEVER, false, KV_COPY_NEVER, BN176_NEVER, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, 0, false, false, PF_NEVER, false, false, false,
     O_STAGE_NEVER},
    {"f16_pv", 256, true, true, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false,
     PF_WG3, false, false, false, O_STAGE_16},
    {"wg3", 256, true, false, WG3_ALWAYS, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false,
     PF_WG3, false, false, false, O_STAGE_16},
    {"kv8_early", 256, true, false, WG3_MASKED16, true, KV_COPY_NEVER, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false,
     PF_WG3, false, false, false, O_STAGE_16},
    {"kv_copy", 256, true, false, WG3_MASKED16, false, KV_COPY_ALWAYS, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false,
     PF_WG3, false, false, false, O_STAGE_16},
    {"bn176", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_ALWAYS, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false,
     PF_WG3, false, false, false, O_STAGE_16},
    {"fp8_vt8", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, true,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false,
     PF_WG3, false, false, false, O_STAGE_16},
    {"kv8", 256, true, false, WG3_MASKED16, false, KV_COPY_NEVER, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false,
     PF_WG3, false, false, false, O_STAGE_16},
    {"bn128", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_NEVER, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false,
     PF_WG3, false, false, false, O_STAGE_16},
    {"rescale_late", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_ALWAYS, PV_OVERLAP_ALWAYS, Q_EARLY_AUTO, true, false,
     PF_WG3, false, false, false, O_STAGE_16},
    {"pv_overlap", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_EARLY, PV_OVERLAP_ALWAYS, Q_EARLY_AUTO, true, false,
     PF_WG3, false, false, false, O_STAGE_16},
    {"pv_once", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_EARLY, PV_ONCE, Q_EARLY_AUTO, true, false, PF_WG3, false, false, false, O_STAGE_16},
    {"q_early", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_ALL, true, false,
     PF_WG3, false, false, false, O_STAGE_16},
    {"auto35", 256, true, false, WG3_UNMASKED, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, 0, false, false, PF_NEVER, false, false, false,
     O_STAGE_NEVER},
    {"tanh_poly", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, true,
     PF_WG3, false, false, false, O_STAGE_16},
    {"auto36", 256, true, false, WG3_UNMASKED, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false,
     PF_NEVER, false, false, false, O_STAGE_NEVER},
    {"partial_first", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false,
     PF_ALWAYS, false, false, false, O_STAGE_16},
    {"ring_closed", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false,
     PF_WG3, true, false, false, O_STAGE_16},
    {"q_before_v", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false,
     PF_WG3, false, true, false, O_STAGE_16},
    {"pv_wait_next", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_ALWAYS, Q_EARLY_AUTO, true, false, PF_WG3, false, false,
     true, O_STAGE_16},
    {"o_smem", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false, PF_WG3, false, false, false,
     O_STAGE_ALWAYS},
    {"o_regs", 256, true, false, WG3_MASKED16, false, KV_COPY_SAME_SEQ, BN176_PLAIN, false,
     RESCALE_LATE_NARROW2, PV_OVERLAP_16, Q_EARLY_AUTO, true, false, PF_WG3, false, false, false,
     O_STAGE_NEVER},
};
_Static_assert(sizeof sm90_variants / sizeof sm90_variants[0] == SM90_NVARIANTS,
               "attnc.h's SM90_NVARIANTS counts the variants");

/* The default, "auto": the fastest measured (bench/NOTES-sm90.md, H200,
 * 2026-11-29): persistent at every head dim since the kernel takes its
 * tiles from a queue (geomean over the grid 0.790 -> 0.819 of cuDNN; causal
 * +5-13%, long unmasked sequences within noise), and BN 80 at D 256
 * (+3-7%). emit.c keeps dropout graphs non-persistent (register spills).
 * Three consumer warpgroups at head tiles up to 64 for graphs without a
 * mask (H200, 2026-12-05, bench/RESULTS.md "Session 28": bf16 D 64 +3% at
 * S 1k, +12-14% at 2k-16k; FP8 D 64 +4-17%); with a causal mask they lost
 * 16% at S 1k (192-row tiles against a diagonal) and won 4-11% from 4k, and
 * the variant is compiled before S is known, so masked graphs keep two.
 * Session 32 (H100, bench/RESULTS.md): key tiles of 176 at D 65-128 for
 * unmasked dense 16-bit graphs (+2-4% at S >= 4k), and an FP8 KV cache
 * widened into 16-bit copies where Sq = Skv (0.84-1.01x of a bf16 cache,
 * against 0.39-0.94x widened in the kernel). Session 36 (H100): idle
 * consumer warpgroups skip their tile and short work tiles release Q after
 * their last S GEMM (+1.0% beside session 35's auto over 18
 * configurations, D 64 +3.0%). Session 37 (H100): masked dense 16-bit
 * graphs at head tiles up to 64 on three warpgroups too (D 64 causal, S 1k-16k:
 * -3.3%, +4.6%, +10.6%, +17.7%, +8.7%; the late rescale, which needs two,
 * no longer runs in auto). Session 38 (H100): in masked graphs there the
 * short query tile first (PF_WG3, above). Session 43 (H100): a 16-bit O staged
 * in shared memory and stored by TMA (O_STAGE_16, above). The variants described as
 * "auto, but" take those too; the older snapshots (base to persist_bn80, auto35, auto36) do not. */
#define SM90_DEFAULT_VARIANT 0

#define SM90_SMEM_LIMIT (227 * 1024)

static const Sm90Variant *sm90_variant(int variant) {
  if (variant < 0 || variant >= SM90_NVARIANTS) variant = SM90_DEFAULT_VARIANT;
  return &sm90_variants[variant];
}

bool tmpl_sm90_variant_kv_copy(int variant, bool same_seq) {
  const Sm90KvCopy k = sm90_variant(variant)->kv_copy;
  return k == KV_COPY_ALWAYS || (k == KV_COPY_SAME_SEQ && same_seq);
}

int tmpl_sm90_variant_index(const char *name) {
  for (int k = 0; name && k < SM90_NVARIANTS; k++)
    if (!strcmp(name, sm90_variants[k].name)) return k;
  return -1;
}

/* o_smem's staging slots beside a tile choice: a slot (128 bytes of a
 * warp's 16 rows) for each block of the V tile's rows of O (o_bytes an
 * element) where they fit, else as many as fit (its stores then wait for
 * a slot's last one to read it), else none. */
static int sm90_o_slots(attn_fwd90_layout l, int bm, int tv, int o_bytes) {
  int slots = (tv * o_bytes + 127) / 128;
  while (slots > 0 && attn_fwd90_total_ostage(l, bm, slots) > SM90_SMEM_LIMIT) slots--;
  return slots;
}

int tmpl_sm90_config(int d_qk, int d_v, int in_bytes, int kv_bytes, bool fp8_p, unsigned traits,
                     bool paged, int variant, Sm90Config *out) {
  const bool masked = traits & SM90_MASKED, score_reads = traits & SM90_SCORE_READS;
  /* Fastest first: more stages hide more TMA latency; BN 128 halves the
   * per-tile softmax bookkeeping where the registers allow it. Lists by
   * the wider tile dim (attn_head_tile): at 192 an O accumulator of 96
   * registers leaves room for S tiles of 80 keys (BN 128 would need 192 of
   * the 232 for O, S and P alone). */
  static const Sm90Candidate small[] = {{128, 3}, {128, 2}, {64, 2}};
  /* Key tiles of 176 (auto's where the score reads no memory per element,
   * and the bn176 variant's): two stages at head tiles of 128 (214 KB). */
  static const Sm90Candidate d128_176[] = {{176, 2}, {128, 3}, {128, 2}, {64, 2}};
  static const Sm90Candidate d192[] = {{80, 2}, {64, 3}, {64, 2}};
  static const Sm90Candidate d256[] = {{64, 2}};
  static const Sm90Candidate d256_80[] = {{80, 2}, {64, 2}};
  /* FP8 P V: V^T rows are 64 or 128 keys (64- or 128-byte swizzle); at
   * 192 and 256 the O accumulator leaves room for 64. */
  static const Sm90Candidate fp8p_wide[] = {{64, 3}, {64, 2}};
  /* fp8_vt8: with V^T in 8 bits, 128 keys fit at 256 (225 KB in two
   * stages); O (128), S (64) and P (16) take 208 of the consumers' 240
   * registers (fwd_sm90.cuh, fwd90_vt8_wide). */
  static const Sm90Candidate fp8p_vt8_wide[] = {{128, 2}, {64, 3}, {64, 2}};
  /* ... and at head tiles up to 128 a fourth stage fits (208 KB at 128). */
  static const Sm90Candidate fp8p_vt8_narrow[] = {{128, 4}, {128, 3}, {128, 2}, {64, 2}};
  /* in_bytes 1: FP8 q, k and v (8-bit Q and K tiles, V converted to f16
   * by the producer warpgroup); kv_bytes 1 under in_bytes 2: an FP8 KV
   * cache, K and V converted to q's type by the producer warpgroup. 8-bit
   * rows are whole 16-byte chunks. */
  if (!out || !((in_bytes == 2 && (kv_bytes == 2 || kv_bytes == 1)) ||
                (in_bytes == 1 && kv_bytes == 1)))
    return -1;
  if (!attn_head_dim_ok(d_qk) || !attn_head_dim_ok(d_v)) return -1;
  const int fp8 = in_bytes == 1;
  const Sm90Variant *var = sm90_variant(variant);
  const int mode = fp8              ? ATTN_FWD90_QKV8
                   : kv_bytes != 1  ? ATTN_FWD90_16
                   : var->kv8_early ? ATTN_FWD90_KV8E
                                    : ATTN_FWD90_KV8;
  const bool kv8 = mode == ATTN_FWD90_KV8 || mode == ATTN_FWD90_KV8E;
  if (mode != ATTN_FWD90_16 && (d_qk % 16 != 0 || d_v % 16 != 0)) return -1;
  const int tqk = attn_head_tile(d_qk), tv = attn_head_tile(d_v);
  const int tmax = tqk > tv ? tqk : tv;
  const Sm90Candidate *list = small;
  int n = (int)(sizeof small / sizeof small[0]);
  if (tmax == 256) {
    if (var->bn80)
      list = d256_80, n = (int)(sizeof d256_80 / sizeof d256_80[0]);
    else
      list = d256, n = (int)(sizeof d256 / sizeof d256[0]);
  } else if (tv == 192) {
    list = d192, n = (int)(sizeof d192 / sizeof d192[0]);
  } else if (tmax == 128 && mode == ATTN_FWD90_16 && !masked && !paged &&
             (var->bn176 == BN176_ALWAYS || (var->bn176 == BN176_PLAIN && !score_reads))) {
    list = d128_176, n = (int)(sizeof d128_176 / sizeof d128_176[0]);
  }
  const bool fp8_pv = fp8 && fp8_p && !var->f16_pv;
  /* Three consumer warpgroups (wg3): at head tiles of 64, where 160
   * registers a thread hold S (64), O (32) and P (32; 16 in FP8); and for
   * FP8 P V at head tiles of 128 with key tiles of 64, S 32 and P 8
   * registers beside O's 64 (the FP8 forward's softmax is its limit,
   * bench/NOTES-sm90.md session 19). An FP8 KV cache under a 16-bit q
   * too, but not a paged one: its converters' chunk addresses spill at the
   * producer's 32 registers (about nine local loads a stage use), and a
   * paged cache's producer spills 342 bytes there; the dense cache
   * measured +12-15% at S 4k-16k anyway (H200, session 30: 0.80-0.83x of
   * bf16 -> 0.93x), the paged one was never timed (the wg3 variant takes
   * it). */
  const bool wg3 = var->wg3 == WG3_ALWAYS ||
                   (var->wg3 != WG3_NEVER && !masked && !(kv8 && paged)) ||
                   (var->wg3 == WG3_MASKED16 && masked && mode == ATTN_FWD90_16 && !paged);
  const bool wg3_fp8_128 = var->wg3 == WG3_ALWAYS && fp8_pv && tmax == 128;
  const int wgs = wg3 && (tmax <= 64 || wg3_fp8_128) ? 3 : 2;
  /* fp8_vt8: its V^T transposes take 128-key tiles of any width up to
   * 256 (fwd90_transpose_v), not wg3's 64-key ones; at V tiles of 192 they
   * would conflict (tests/host/fwd90_v_host_check.sh: 304 wavefronts for
   * 96 loads), so those stay as auto makes them. */
  const bool vt8 = fp8_pv && var->fp8_vt8 && !wg3_fp8_128 && (tv == 256 || tmax <= 128);
  if (vt8 && tmax > 128)
    list = fp8p_vt8_wide, n = (int)(sizeof fp8p_vt8_wide / sizeof fp8p_vt8_wide[0]);
  else if (vt8)
    list = fp8p_vt8_narrow, n = (int)(sizeof fp8p_vt8_narrow / sizeof fp8p_vt8_narrow[0]);
  else if (fp8_pv && (tmax > 128 || wg3_fp8_128))
    list = fp8p_wide, n = (int)(sizeof fp8p_wide / sizeof fp8p_wide[0]);
  const bool partial_first = var->partial_first == PF_ALWAYS ||
                             (var->partial_first == PF_WG3 && wgs == 3 && masked);
  const int q_cols = fp8 ? attn_head_tile8(d_qk) : tqk, lmode = vt8 ? ATTN_FWD90_QKV8T : mode;
  for (int k = 0; k < n; k++) {
    attn_fwd90_layout l =
        attn_fwd90_layout_of(64 * wgs, list[k].bn, list[k].stages, q_cols, tv, lmode);
    if (l.total <= SM90_SMEM_LIMIT) {
      /* o_smem: the slots the tiles leave room for; where none,
       * a later candidate of the same key tile's with fewer stages and
       * room (a mask's key tiles of 128 at D 128: two stages and both
       * slots, not three and none; session 42). The key tile stays. */
      int o_slots = 0;
      /* (under partial_first only in the o_smem variant: a short first
       * tile's warps past its rows then skip their boxes. A paged D 128
       * graph trades its third stage for the slots: measured a gain,
       * above) */
      const bool o_stage = (traits & SM90_O_TMA) &&
                           (var->o_stage == O_STAGE_ALWAYS ||
                            (var->o_stage == O_STAGE_16 && !(traits & SM90_O_BYTE) &&
                             !partial_first));
      if (o_stage)
        for (int k2 = k; k2 < n && list[k2].bn == list[k].bn && o_slots == 0; k2++) {
          const attn_fwd90_layout l2 =
              attn_fwd90_layout_of(64 * wgs, list[k2].bn, list[k2].stages, q_cols, tv, lmode);
          if ((o_slots = sm90_o_slots(l2, 64 * wgs, tv, traits & SM90_O_BYTE ? 1 : 2)) > 0)
            k = k2, l = l2;
        }
      out->bm = 64 * wgs;
      out->bn = list[k].bn;
      out->stages = list[k].stages;
      out->threads = 128 * (1 + wgs);
      out->smem_bytes = o_slots > 0 ? attn_fwd90_total_ostage(l, 64 * wgs, o_slots) : l.total;
      out->persistent = tmax <= var->persistent_max_d;
      /* FP8 P V reads V^T rows of 64 or 128 keys. */
      out->fp8_pv = fp8_pv && (list[k].bn == 64 || list[k].bn == 128);
      out->kv8_early = mode == ATTN_FWD90_KV8E;
      out->vt8 = vt8 && out->fp8_pv;
      /* The late rescale takes the branch commits (its P V is issued
       * after S's group is closed). Auto's only in plain graphs, K/V not
       * paged: elsewhere O's pending factors, live across the next S
       * GEMM beside what the chain holds, left ptxas too few registers
       * for the wgmma pipeline and it serialized every wgmma (C7511;
       * compile sweep seed 135 at D 32-64: a bias or position table, a
       * softcap, exp/log/clamp chains, a paged cache). And only at head
       * dims of exactly 64 (what was measured): below it (32, 48, 56; a
       * 64-wide tile over fewer columns) the plain causal graph serialized
       * too (session 36, compile sweep seed 142). */
      out->rescale_late = var->rescale == RESCALE_LATE_ALWAYS ||
                          (var->rescale == RESCALE_LATE_NARROW2 && mode == ATTN_FWD90_16 &&
                           wgs == 2 && d_qk == 64 && d_v == 64 && (traits & SM90_PLAIN) &&
                           !paged);
      out->pv_overlap = out->rescale_late || var->pv == PV_OVERLAP_ALWAYS ||
                        (var->pv == PV_OVERLAP_16 &&
                         (mode == ATTN_FWD90_16 || (out->fp8_pv && tmax <= 128)));
      out->q_early_tiles = out->persistent ? var->q_early_tiles : 0; /* (one tile a CTA: moot) */
      out->skip_idle = var->skip_idle;
      out->tanh_poly = var->tanh_poly;
      out->partial_first = partial_first;
      out->ring_per_tile = var->ring_per_tile;
      out->q_before_v = out->persistent && var->q_before_v; /* (one tile a CTA: moot) */
      out->pv_wait_next = var->pv_wait_next;
      out->o_smem = o_slots;
      return 0;
    }
  }
  return -1;
}
