/*
 * sanitize_cases.c: every kernel template and mode once, at small shapes,
 * each checked against the CPU reference, for compute-sanitizer to watch
 * (tools/sanitize_device.sh runs this under memcheck, racecheck, synccheck
 * and initcheck). The other GPU tests cover the same kernels at many
 * shapes but take minutes, which the sanitizers multiply by 10-100.
 *
 * Modes: fwd_sm90 persistent and not, fwd_sm80, dropout, the separable
 * masks' prep kernel, decode with and without a merge, paged decode,
 * packed sequences with offsets out of range (forward; backward on bwd_sm90 at D 64 and 256 and
 * on bwd_sm80), FP8 (P in FP8, amax) on both
 * forwards, an FP8 KV cache; bwd_sm90 at D 64 (wide), 128 (persistent;
 * BM-80 in its three forms, options 93-95) and 256 (split-D), deterministic, dropout, a bias gradient and a sink's
 * gradient (its dsink step), bwd_sm80; the FP8 backward on both templates and in
 * bwd_sm90's FP8 tensor-core mode. argv[1], when given, keeps the cases
 * whose name contains it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn.h"
#include "check.h"
#include "gpu_test.h"
#include "ref.h"
#include "fwd_case.h"
#include "bwd_case.h"

#define DENSE(D, T, extra_in, mask, extra_out)                                                   \
  "attention g {\n  input q : " T "[B, H, Sq, " #D "];\n  input k : " T "[B, Hk, Skv, " #D      \
  "];\n  input v : " T "[B, Hk, Skv, " #D "];\n" extra_in "  s = mask((q @ k^T) * 0.1, " mask     \
  ");\n" extra_out "}\n"
#define PLAIN_OUT(D, T) "  o = softmax(s) @ v;\n  output o : " T "[B, H, Sq, " #D "];\n  output lse = logsumexp(s);\n"
#define GRAD "  grad q, k, v;\n"

/* FP8 q, k, v and P at head dim 128 (both products in FP8 on fwd_sm90),
 * causal, with an e4m3 O scaled and its amax. */
#define FP8_P8_GRAPH                                                                             \
  "attention g {\n  input q : e4m3[B, H, S, 128];\n  input k : e4m3[B, H, S, 128];\n"            \
  "  input v : e4m3[B, H, S, 128];\n  s = mask((q @ k^T) * 0.088, j <= i);\n"                    \
  "  out = (e4m3(softmax(s) * 448.0) @ v) * (1.0 / 448.0);\n"                                   \
  "  output o : e4m3[B, H, S, 128] = out * 4.0;\n  output amax_o = amax(out);\n}\n"

/* cuDNN's FP8 recipe at head dim 128 with GQA and a causal mask. */
#define FP8_BWD_GRAPH                                                                            \
  "attention g {\n  input q : e4m3[B, H, Sq, 128];\n  input k : e4m3[B, Hk, Skv, 128];\n"          \
  "  input v : e4m3[B, Hk, Skv, 128];\n"                                                          \
  "  s = mask((q @ k^T) * 0.088, j <= i + Skv - Sq);\n"                                          \
  "  out = (e4m3(softmax(s) * 448.0) @ v) / 448.0;\n  output o : e4m3[B, H, Sq, 128] = out;\n"   \
  "  output lse = logsumexp(s);\n  grad q, k, v {\n    input do : e5m2;\n"                       \
  "    output amax_dp = amax(ds);\n    ds = e5m2(ds * 1024.0) / 1024.0;\n"                      \
  "    output dq : e4m3 = dq * 16.0;\n    output dk : bf16;\n    output dv : bf16;\n"           \
  "    output amax_dq = amax(dq);\n  }\n}\n"

typedef enum { FWD, BWD, BWD_DET } Mode;

typedef struct Case {
  const char *name, *text, *spec;
  const char *arch;   /* NULL: the device's (sm_90a on an H200) */
  int sm90_variant;   /* ATTN_OPTION_SM90_VARIANT */
  int bwd_template;   /* ATTN_OPTION_BACKWARD_TEMPLATE: 0 auto, 80, 90, 91, 93-95 */
  int decode_splits;  /* ATTN_OPTION_DECODE_SPLITS */
  Mode mode;
  int offsets;        /* packed: 1 rewrites the offsets out of range */
} Case;

static const Case cases[] = {
    {"fwd_sm90 persistent", DENSE(128, "bf16", "", "j <= i + Skv - Sq", PLAIN_OUT(128, "bf16")),
     "B=2,H=4,Hk=2,Sq=200,Skv=333", NULL, 0, 0, 0, FWD, 0},
    {"fwd_sm90 one tile a CTA", DENSE(64, "f16", "", "j <= i", PLAIN_OUT(64, "f16")),
     "B=2,H=4,Hk=4,Sq=150,Skv=150", NULL, 1, 0, 0, FWD, 0},
    {"fwd_sm90 D 256 BN 80", DENSE(256, "bf16", "", "i - j < 100", PLAIN_OUT(256, "bf16")),
     "B=1,H=2,Hk=1,Sq=300,Skv=300", NULL, 0, 0, 0, FWD, 0},
    /* The wg3 variant (6): three consumer warpgroups, 192-query tiles (a
     * partial last one), the turn barriers' ring over several work tiles. */
    {"fwd_sm90 wg3 D 64", DENSE(64, "bf16", "", "j <= i + Skv - Sq", PLAIN_OUT(64, "bf16")),
     "B=2,H=4,Hk=2,Sq=500,Skv=520", NULL, 6, 0, 0, FWD, 0},
    {"fp8 sm90 wg3 D 128 P e4m3 amax", FP8_P8_GRAPH, "B=2,H=2,S=450", NULL, 6, 0, 0, FWD, 0},
    {"fwd_sm80", DENSE(128, "bf16", "", "j <= i", PLAIN_OUT(128, "bf16")),
     "B=2,H=4,Hk=2,Sq=130,Skv=257", "sm_90", 0, 0, 0, FWD, 0},
    {"fwd dropout sm90",
     "attention g {\n  input q : bf16[B, H, S, 64];\n  input k : bf16[B, H, S, 64];\n"
     "  input v : bf16[B, H, S, 64];\n  scalar seed : u64 = 7;\n"
     "  p = dropout(softmax((q @ k^T) * 0.125), 0.1, seed, 0);\n"
     "  output o : bf16[B, H, S, 64] = p @ v;\n}\n",
     "B=2,H=2,S=190", NULL, 0, 0, 0, FWD, 0},
    {"fwd document prep",
     "attention g {\n  input q : bf16[B, H, S, 64];\n  input k : bf16[B, H, S, 64];\n"
     "  input v : bf16[B, H, S, 64];\n  input doc : i32[B, S];\n"
     "  s = mask((q @ k^T) * 0.125, doc[b, i] == doc[b, j] && j <= i);\n"
     "  output o : bf16[B, H, S, 64] = softmax(s) @ v;\n}\n",
     "B=2,H=2,S=300", NULL, 0, 0, 0, FWD, 0},
    {"decode split 3 + merge", DENSE(128, "bf16", "", "j <= i + Skv - Sq", PLAIN_OUT(128, "bf16")),
     "B=2,H=8,Hk=2,Sq=1,Skv=1000", NULL, 0, 0, 3, FWD, 0},
    {"decode one split", DENSE(64, "f16", "", "j < Skv", PLAIN_OUT(64, "f16")),
     "B=3,H=4,Hk=1,Sq=2,Skv=300", NULL, 0, 0, 1, FWD, 0},
    {"paged decode",
     "attention g {\n  input q : bf16[B, H, Sq, 128];\n  input kc : bf16[P, PS, Hk, 128];\n"
     "  input vc : bf16[P, PS, Hk, 128];\n  input t : i32[B, MP];\n  input len : i32[B];\n"
     "  s = mask((q @ paged(kc, t)^T) * 0.088, j < len[b]);\n"
     "  output o : bf16[B, H, Sq, 128] = softmax(s) @ paged(vc, t);\n}\n",
     "B=2,H=8,Hk=2,Sq=1,P=40,PS=16,MP=12", NULL, 0, 0, 2, FWD, 0},
    {"paged prefill sm90",
     "attention g {\n  input q : bf16[B, H, Sq, 128];\n  input kc : bf16[P, PS, Hk, 128];\n"
     "  input vc : bf16[P, PS, Hk, 128];\n  input t : i32[B, MP];\n  input len : i32[B];\n"
     "  s = mask((q @ paged(kc, t)^T) * 0.088, j < len[b] && j <= i + len[b] - Sq);\n"
     "  output o : bf16[B, H, Sq, 128] = softmax(s) @ paged(vc, t);\n}\n",
     "B=2,H=8,Hk=2,Sq=100,P=40,PS=24,MP=12", NULL, 0, 0, 0, FWD, 0},
    {"paged prefill sm80",
     "attention g {\n  input q : f16[B, H, Sq, 64];\n  input kc : f16[P, Hk, PS, 64];\n"
     "  input vc : f16[P, Hk, PS, 64];\n  input t : i32[B, MP];\n  input len : i32[B];\n"
     "  s = mask((q @ paged_hnd(kc, t)^T) * 0.125, j < len[b]);\n"
     "  output o : f16[B, H, Sq, 64] = softmax(s) @ paged_hnd(vc, t);\n}\n",
     "B=2,H=8,Hk=2,Sq=100,P=40,PS=16,MP=12", "sm_90", 0, 0, 0, FWD, 0},
    /* An FP8 cache on fwd_sm90 (its K and V converted in shared memory),
     * pages of 8-bit boxes. */
    {"paged prefill sm90 FP8 cache",
     "attention g {\n  input q : f16[B, H, Sq, 64];\n  input kc : e5m2[P, Hk, PS, 64];\n"
     "  input vc : e5m2[P, Hk, PS, 64];\n  input t : i32[B, MP];\n  input len : i32[B];\n"
     "  s = mask((q @ paged_hnd(kc, t)^T) * 0.125, j < len[b]);\n"
     "  output o : f16[B, H, Sq, 64] = softmax(s) @ paged_hnd(vc, t);\n}\n",
     "B=2,H=8,Hk=2,Sq=100,P=40,PS=32,MP=12", NULL, 0, 0, 0, FWD, 0},
    {"paged prefill ragged sm90, offsets out of range",
     "attention g {\n  input q : bf16[T, H, 128];\n  input cu : i32[B1];\n"
     "  input kc : bf16[P, PS, Hk, 128];\n  input vc : bf16[P, PS, Hk, 128];\n"
     "  input t : i32[B, MP];\n  input len : i32[B];\n"
     "  s = mask((packed(q, cu) @ paged(kc, t)^T) * 0.088, j < len[b] && j <= i + len[b] - seqlen_q);\n"
     "  output o : bf16[T, H, 128] = softmax(s) @ paged(vc, t);\n}\n",
     "B1=4,B=3,H=8,Hk=2,T=300,P=40,PS=16,MP=12", NULL, 0, 0, 0, FWD, 1},
    {"packed sm90, offsets out of range",
     "attention g {\n  input q : bf16[Tq, H, 128];\n  input k : bf16[Tk, Hk, 128];\n"
     "  input v : bf16[Tk, Hk, 128];\n  input cq : i32[B1];\n  input ck : i32[B1];\n"
     "  s = mask((packed(q, cq) @ packed(k, ck)^T) * 0.088, j <= i + seqlen_k - seqlen_q);\n"
     "  o = softmax(s) @ packed(v, ck);\n  output o : bf16[Tq, H, 128];\n"
     "  output lse = logsumexp(s);\n}\n",
     "B1=5,H=4,Hk=2,Tq=333,Tk=410", NULL, 0, 0, 0, FWD, 1},
    {"packed sm80, offsets out of range",
     "attention g {\n  input q : f16[T, H, 64];\n  input k : f16[T, H, 64];\n"
     "  input v : f16[T, H, 64];\n  input cu : i32[B1];\n"
     "  s = mask((packed(q, cu) @ packed(k, cu)^T) * 0.125, j <= i);\n"
     "  output o : f16[T, H, 64] = softmax(s) @ packed(v, cu);\n}\n",
     "B1=4,H=2,T=300", "sm_90", 0, 0, 0, FWD, 1},
    {"fp8 sm90 P e4m3 amax", FP8_P8_GRAPH,
     "B=2,H=2,S=260", NULL, 0, 0, 0, FWD, 0},
    {"fp8 sm80",
     "attention g {\n  input q : e5m2[B, H, S, 64];\n  input k : e4m3[B, H, S, 64];\n"
     "  input v : e4m3[B, H, S, 64];\n  s = (q @ k^T) * 0.125;\n"
     "  output o : bf16[B, H, S, 64] = softmax(s) @ v;\n}\n",
     "B=1,H=2,S=200", "sm_90", 0, 0, 0, FWD, 0},
    {"fp8 kv cache, bf16 q (fwd_sm90)",
     "attention g {\n  input q : bf16[B, H, Sq, 128];\n  input k : e4m3[B, Hk, Skv, 128];\n"
     "  input v : e4m3[B, Hk, Skv, 128];\n  s = mask((q @ k^T) * 0.088, j <= i + Skv - Sq);\n"
     "  output o : bf16[B, H, Sq, 128] = softmax(s) @ v;\n}\n",
     "B=2,H=4,Hk=2,Sq=70,Skv=300", NULL, 0, 0, 0, FWD, 0},
    /* The kv8_early variant (7): the 8-bit staging refilled once converted,
     * its stage slots per phase; enough key tiles that every stage turns
     * over several times. */
    {"fp8 kv cache, bf16 q (fwd_sm90 kv8_early)",
     "attention g {\n  input q : bf16[B, H, Sq, 128];\n  input k : e4m3[B, Hk, Skv, 128];\n"
     "  input v : e4m3[B, Hk, Skv, 128];\n  s = mask((q @ k^T) * 0.088, j <= i + Skv - Sq);\n"
     "  output o : bf16[B, H, Sq, 128] = softmax(s) @ v;\n}\n",
     "B=2,H=4,Hk=2,Sq=200,Skv=900", NULL, 7, 0, 0, FWD, 0},
    /* The kv_copy variant (8): the widen_kv step's 16-bit copies of the FP8
     * cache, then the 16-bit forward over them (Skv not a multiple of the
     * step's 64 rows). */
    {"fp8 kv cache, bf16 q (fwd_sm90 kv_copy)",
     "attention g {\n  input q : bf16[B, H, Sq, 128];\n  input k : e4m3[B, Hk, Skv, 128];\n"
     "  input v : e4m3[B, Hk, Skv, 128];\n  s = mask((q @ k^T) * 0.088, j <= i + Skv - Sq);\n"
     "  output o : bf16[B, H, Sq, 128] = softmax(s) @ v;\n}\n",
     "B=2,H=4,Hk=2,Sq=200,Skv=900", NULL, 8, 0, 0, FWD, 0},
    /* The bn176 variant (9): key tiles of 176 (dense, unmasked; Skv not a
     * multiple of 176, several tiles a work tile). */
    {"fwd_sm90 bn176 D 128",
     "attention g {\n  input q : bf16[B, H, Sq, 128];\n  input k : bf16[B, Hk, Skv, 128];\n"
     "  input v : bf16[B, Hk, Skv, 128];\n  s = (q @ k^T) * 0.088;\n  o = softmax(s) @ v;\n"
     "  output o : bf16[B, H, Sq, 128];\n  output lse = logsumexp(s);\n}\n",
     "B=2,H=4,Hk=2,Sq=300,Skv=700", NULL, 9, 0, 0, FWD, 0},
    /* The fp8_vt8 variant (10): FP8 P V at D 256 with key tiles of 128, its
     * V^T transposes over both 128-byte column blocks. */
    {"fp8 sm90 fp8_vt8 D 256 P e4m3",
     "attention g {\n  input q : e4m3[B, H, S, 256];\n  input k : e4m3[B, H, S, 256];\n"
     "  input v : e4m3[B, H, S, 256];\n  s = mask((q @ k^T) * 0.0625, j <= i);\n"
     "  out = (e4m3(softmax(s) * 448.0) @ v) * (1.0 / 448.0);\n"
     "  output o : bf16[B, H, S, 256] = out;\n  output amax_o = amax(out);\n}\n",
     "B=2,H=2,S=450", NULL, 10, 0, 0, FWD, 0},
    /* The partial_first variant (20): a sequence's short query tile first;
     * its live warpgroups compute rows past it (real rows of the next tile,
     * not stored): 192-row tiles at D 64 (500 = 116 + 2 x 192: a partial
     * warpgroup and an idle one), FP8 with an amax output over 128-row
     * tiles (450 = 66 + 3 x 128), packed sequences with offsets out of
     * range. */
    {"fwd_sm90 partial_first D 64", DENSE(64, "bf16", "", "j <= i + Skv - Sq", PLAIN_OUT(64, "bf16")),
     "B=2,H=4,Hk=2,Sq=500,Skv=520", NULL, 20, 0, 0, FWD, 0},
    {"fp8 sm90 partial_first D 128 P e4m3 amax", FP8_P8_GRAPH, "B=2,H=2,S=450", NULL, 20, 0, 0, FWD, 0},
    {"packed sm90 partial_first, offsets out of range",
     "attention g {\n  input q : bf16[Tq, H, 64];\n  input k : bf16[Tk, Hk, 64];\n"
     "  input v : bf16[Tk, Hk, 64];\n  input cq : i32[B1];\n  input ck : i32[B1];\n"
     "  s = mask((packed(q, cq) @ packed(k, ck)^T) * 0.125, j <= i + seqlen_k - seqlen_q);\n"
     "  o = softmax(s) @ packed(v, ck);\n  output o : bf16[Tq, H, 64];\n"
     "  output lse = logsumexp(s);\n}\n",
     "B1=5,H=4,Hk=2,Tq=333,Tk=410", NULL, 20, 0, 0, FWD, 1},
    {"bwd_sm90 D 64 wide", DENSE(64, "bf16", "", "j <= i", PLAIN_OUT(64, "bf16") GRAD),
     "B=2,H=4,Hk=2,Sq=200,Skv=200", NULL, 0, 90, 0, BWD, 0},
    {"bwd_sm90 D 128 persistent", DENSE(128, "f16", "", "j <= i + Skv - Sq", PLAIN_OUT(128, "f16") GRAD),
     "B=2,H=4,Hk=4,Sq=150,Skv=270", NULL, 0, 90, 0, BWD, 0},
    /* BM-80 (options 93, 94, 95): 80-query tiles, dS and Pd^T by
     * stmatrix, dQ^T's stores, named barriers 2 and 3 (94), the shuffled
     * stats (95); a partial last tile. */
    {"bwd_sm90 D 128 BM-80", DENSE(128, "bf16", "", "j <= i + Skv - Sq", PLAIN_OUT(128, "bf16") GRAD),
     "B=2,H=4,Hk=2,Sq=200,Skv=230", NULL, 0, 93, 0, BWD, 0},
    {"bwd_sm90 D 96 BM-80 Pd^T in smem", DENSE(96, "f16", "", "j < 200", PLAIN_OUT(96, "f16") GRAD),
     "B=2,H=4,Hk=4,Sq=170,Skv=250", NULL, 0, 94, 0, BWD, 0},
    {"bwd_sm90 D 128 BM-80 one pass", DENSE(128, "bf16", "", "j < Skv", PLAIN_OUT(128, "bf16") GRAD),
     "B=1,H=4,Hk=1,Sq=250,Skv=190", NULL, 0, 95, 0, BWD, 0},
    {"bwd_sm90 D 256 split-D", DENSE(256, "bf16", "", "i - j < 90", PLAIN_OUT(256, "bf16") GRAD),
     "B=1,H=2,Hk=1,Sq=200,Skv=200", NULL, 0, 90, 0, BWD, 0},
    {"bwd_sm90 deterministic", DENSE(128, "bf16", "", "j <= i", PLAIN_OUT(128, "bf16") GRAD),
     "B=2,H=4,Hk=2,Sq=130,Skv=130", NULL, 0, 90, 0, BWD_DET, 0},
    {"bwd_sm80", DENSE(64, "bf16", "", "j <= i", PLAIN_OUT(64, "bf16") GRAD),
     "B=2,H=4,Hk=2,Sq=150,Skv=150", NULL, 0, 80, 0, BWD, 0},
    {"bwd_sm80 deterministic", DENSE(128, "f16", "", "j <= i", PLAIN_OUT(128, "f16") GRAD),
     "B=1,H=2,Hk=2,Sq=140,Skv=140", NULL, 0, 80, 0, BWD_DET, 0},
    {"bwd dropout",
     "attention g {\n  input q : bf16[B, H, S, 64];\n  input k : bf16[B, H, S, 64];\n"
     "  input v : bf16[B, H, S, 64];\n  scalar seed : u64 = 3;\n  s = (q @ k^T) * 0.125;\n"
     "  p = dropout(softmax(s), 0.1, seed, 0);\n  output o : bf16[B, H, S, 64] = p @ v;\n"
     "  output lse = logsumexp(s);\n  grad q, k, v;\n}\n",
     "B=1,H=2,S=200", NULL, 0, 90, 0, BWD, 0},
    {"bwd bias gradient",
     "attention g {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
     "  input v : bf16[B, H, S, 128];\n  input bias : bf16[B, H, S, S];\n"
     "  s = (q @ k^T) * 0.088 + bias[b, h, i, j];\n"
     "  output o : bf16[B, H, S, 128] = softmax(s) @ v;\n  output lse = logsumexp(s);\n"
     "  grad q, k, v, bias;\n}\n",
     "B=1,H=2,S=150", NULL, 0, 90, 0, BWD, 0},
    {"bwd sink gradient",
     "attention g {\n  input q : bf16[B, H, S, 64];\n  input k : bf16[B, H, S, 64];\n"
     "  input v : bf16[B, H, S, 64];\n  input sinks : f32[H];\n  sk = sinks[h];\n"
     "  s = mask((q @ k^T) * 0.125, j <= i);\n"
     "  output o : bf16[B, H, S, 64] = softmax(s, sk) @ v;\n  output lse = logsumexp(s, sk);\n"
     "  grad q, k, v, sinks;\n}\n",
     "B=2,H=2,S=150", NULL, 0, 90, 0, BWD, 0},
    {"bwd packed, offsets out of range",
     "attention g {\n  input q : bf16[Tq, H, 64];\n  input k : bf16[Tk, Hk, 64];\n"
     "  input v : bf16[Tk, Hk, 64];\n  input cq : i32[B1];\n  input ck : i32[B1];\n"
     "  s = mask((packed(q, cq) @ packed(k, ck)^T) * 0.125, j <= i + seqlen_k - seqlen_q);\n"
     "  o = softmax(s) @ packed(v, ck);\n  output o : bf16[Tq, H, 64];\n"
     "  output lse = logsumexp(s);\n  grad q, k, v;\n}\n",
     "B1=5,H=4,Hk=2,Tq=333,Tk=410", NULL, 0, 0, 0, BWD, 1},
    {"bwd_sm80 packed, offsets out of range",
     "attention g {\n  input q : bf16[Tq, H, 64];\n  input k : bf16[Tk, Hk, 64];\n"
     "  input v : bf16[Tk, Hk, 64];\n  input cq : i32[B1];\n  input ck : i32[B1];\n"
     "  s = mask((packed(q, cq) @ packed(k, ck)^T) * 0.125, j <= i + seqlen_k - seqlen_q);\n"
     "  o = softmax(s) @ packed(v, ck);\n  output o : bf16[Tq, H, 64];\n"
     "  output lse = logsumexp(s);\n  grad q, k, v;\n}\n",
     "B1=5,H=4,Hk=2,Tq=333,Tk=410", NULL, 0, 80, 0, BWD, 1},
    {"bwd packed D 256 split-D",
     "attention g {\n  input q : bf16[Tq, H, 256];\n  input k : bf16[Tk, Hk, 256];\n"
     "  input v : bf16[Tk, Hk, 256];\n  input cq : i32[B1];\n  input ck : i32[B1];\n"
     "  s = mask((packed(q, cq) @ packed(k, ck)^T) * 0.0625, j <= i + seqlen_k - seqlen_q);\n"
     "  o = softmax(s) @ packed(v, ck);\n  output o : bf16[Tq, H, 256];\n"
     "  output lse = logsumexp(s);\n  grad q, k, v;\n}\n",
     "B1=3,H=2,Hk=1,Tq=200,Tk=260", NULL, 0, 0, 0, BWD, 1},
    {"bwd packed deterministic",
     "attention g {\n  input q : f16[T, H, 128];\n  input k : f16[T, H, 128];\n"
     "  input v : f16[T, H, 128];\n  input cu : i32[B1];\n"
     "  s = mask((packed(q, cu) @ packed(k, cu)^T) * 0.088, j <= i);\n"
     "  o = softmax(s) @ packed(v, cu);\n  output o : f16[T, H, 128];\n"
     "  output lse = logsumexp(s);\n  grad q, k, v;\n}\n",
     "B1=4,H=2,T=300", NULL, 0, 0, 0, BWD_DET, 1},
    /* The FP8 backward (a grad block): bf16 wgmma over the 16-bit copies
     * (convert8, amax_init, the hooks) on bwd_sm90 and bwd_sm80, and
     * bwd_sm90's FP8 tensor-core mode (transpose8, FP8 wgmma). */
    {"bwd fp8 sm90", FP8_BWD_GRAPH, "B=2,H=4,Hk=2,Sq=150,Skv=260", NULL, 0, 90, 0, BWD, 0},
    {"bwd fp8 sm80", FP8_BWD_GRAPH, "B=2,H=4,Hk=2,Sq=150,Skv=260", NULL, 0, 80, 0, BWD, 0},
    {"bwd fp8 tensor-core mode", FP8_BWD_GRAPH, "B=2,H=4,Hk=2,Sq=150,Skv=260", NULL, 0, 91, 0,
     BWD, 0},
};

static void run(attn_context *ctx, const Case *c, uint64_t seed) {
  attn_context_set_arch(ctx, c->arch ? c->arch : NULL);
  attn_context_set_option(ctx, ATTN_OPTION_SM90_VARIANT, c->sm90_variant);
  attn_context_set_option(ctx, ATTN_OPTION_BACKWARD_TEMPLATE, c->bwd_template);
  attn_context_set_option(ctx, ATTN_OPTION_DECODE_SPLITS, c->decode_splits);
  const char *text = c->text;
  attn_module *mod = compile_text(ctx, c->name, text);
  Arena *a = arena_new();
  IrGraph *g = mod ? build_ir(a, c->name, text) : NULL;
  attn_graph *ag = NULL;
  if (g && attn_module_get_graph(mod, "g", &ag) != ATTN_SUCCESS) {
    verdict(false, c->name, attn_context_error(ctx));
    g = NULL;
  }
  static const int out_of_range = 2; /* fwd_case.h's offsets pattern: past both ends */
  if (g && c->mode == FWD) {
    ChkOptions co = {0};
    const InputFill fill = {fill_packed_offsets, &out_of_range};
    run_case_filled(ctx, ag, g, c->spec, seed, &co, c->name, c->offsets ? &fill : NULL, NULL, NULL);
  } else if (g) {
    Diag d = {0};
    BwdGraph *bg = bwd_derive(g, a, &d);
    if (!bg)
      verdict(false, c->name, d.out.data);
    else
      bwd_case_filled(ctx, ag, g, bg, c->spec, seed, c->name, NULL, 0, c->mode == BWD_DET,
                      c->offsets ? fill_packed_offsets : NULL, &out_of_range);
    diag_free(&d);
  }
  arena_free(a);
  attn_module_destroy(mod);
}

/* Without a GPU: each case compiles for its target (sm_90a by default)
 * and its graph checks, so the list stays runnable (--compile-only runs
 * this on any machine). */
static int compile_only(void) {
  attn_context *ctx = gpu_test_context();
  if (!ctx) return 1;
  int bad = 0;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    const Case *c = &cases[k];
    attn_context_set_arch(ctx, c->arch ? c->arch : "sm_90a");
    attn_context_set_option(ctx, ATTN_OPTION_SM90_VARIANT, c->sm90_variant);
    attn_context_set_option(ctx, ATTN_OPTION_BACKWARD_TEMPLATE, c->bwd_template);
    attn_module *mod = NULL;
    const bool ok = attn_module_compile_string(ctx, c->name, c->text, strlen(c->text), &mod) ==
                    ATTN_SUCCESS;
    printf("%s: compile %s: %s\n", ok ? "PASS" : "FAIL", c->name, ok ? "" : attn_context_error(ctx));
    bad += !ok;
    attn_module_destroy(mod);
  }
  attn_context_destroy(ctx);
  return bad ? 1 : 0;
}

/* Each case's graph text into DIR/NN.attn, to map a sanitizer's report
 * (kernel+offset) onto SASS built here with `attnc compile`. */
static int write_texts(const char *dir) {
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%02zu.attn", dir, k);
    FILE *f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "# %s\n%s", cases[k].name, cases[k].text);
    fclose(f);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--compile-only")) return compile_only();
  if (argc > 2 && !strcmp(argv[1], "--write-texts")) return write_texts(argv[2]);
  if (!gpu_test_driver()) return 0;
  attn_context *ctx = gpu_test_context();
  if (!ctx) return 1;
  /* A disk cache when one is named: the sanitizers' runs compile once. */
  const char *cache = getenv("ATTN_CACHE_DIR");
  if (cache && *cache) attn_context_set_cache_dir(ctx, cache);
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    if (argc < 2 || strstr(cases[k].name, argv[1])) run(ctx, &cases[k], 100 + k);
  attn_context_destroy(ctx);
  printf("sanitize cases: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
  return failed ? 1 : 0;
}
