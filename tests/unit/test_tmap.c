/*
 * test_tmap.c: the tensor maps bwd_sm90's main kernel takes, as its launch
 * plan lists them (compiler/plan.c) and runtime/tmap.c encodes them,
 * checked without a GPU: the driver's encoder is a fake that records what
 * it was asked for. Q and dO are bf16 maps with 64-column boxes; dQ's f32
 * accumulator (the target of the kernel's TMA reduce-adds) gets 32-column
 * boxes over its dense [B, H, Sq, D] layout, no map in deterministic mode
 * (null accumulator), and an encoder failure on it comes back as a status
 * with a message naming it; bwd_sm80's main kernel takes none.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "cuda_driver.h"
#include "rt.h"
#include "unit_build.h"

/* One recorded cuTensorMapEncodeTiled call. */
typedef struct {
  CUtensorMapDataType type;
  cuuint32_t rank;
  void *ptr;
  cuuint64_t dim[4], stride[3];
  cuuint32_t box[4];
  CUtensorMapSwizzle swizzle;
} Encoded;

static Encoded calls[8];
static int ncalls;
static int fail_on_call = -1; /* this call (0-based) returns an error */

static CUresult fake_encode(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank,
                            void *ptr, const cuuint64_t *dim, const cuuint64_t *stride,
                            const cuuint32_t *box, const cuuint32_t *estride,
                            CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                            CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob) {
  (void)estride, (void)il, (void)l2, (void)oob;
  cr_assert_lt(ncalls, 8);
  Encoded *e = &calls[ncalls];
  e->type = type, e->rank = rank, e->ptr = ptr, e->swizzle = sw;
  for (cuuint32_t i = 0; i < rank && i < 4; i++) e->dim[i] = dim[i], e->box[i] = box[i];
  for (cuuint32_t i = 0; i + 1 < rank && i < 3; i++) e->stride[i] = stride[i];
  memset(map, 0xab, sizeof *map); /* "encoded" */
  return ncalls++ == fail_on_call ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
static CUresult fake_error_name(CUresult r, const char **s) {
  *s = r == CUDA_ERROR_INVALID_VALUE ? "CUDA_ERROR_INVALID_VALUE" : "other";
  return CUDA_SUCCESS;
}
static CUresult fake_error_string(CUresult r, const char **s) {
  (void)r;
  *s = "invalid argument";
  return CUDA_SUCCESS;
}

/* The step's maps through the fake encoder (its record reset first); the
 * fill must succeed. */
static void fake_fill(const IrGraph *g, const PlanStep *step, const attn_params *p,
                      attn_tmaps *tm, StrBuf *err) {
  RtDriver d = {.TensorMapEncodeTiled = fake_encode, .GetErrorName = fake_error_name,
                .GetErrorString = fake_error_string};
  ncalls = 0;
  fail_on_call = -1;
  cr_assert_eq(rt_tmap_fill(&d, g, step, p, tm, err), ATTN_SUCCESS, "%s",
               err->data ? err->data : "");
}

#define GRAPH                                                                                    \
  "attention g {\n  input q : bf16[B, H, Sq, 128];\n  input k : bf16[B, H, Skv, 128];\n"         \
  "  input v : bf16[B, H, Skv, 128];\n  s = (q @ k^T) * 0.125;\n"                              \
  "  o = softmax(s) @ v;\n  output o : bf16[B, H, Sq, 128];\n  output lse = logsumexp(s);\n"    \
  "  grad q, k, v;\n}\n"

enum { NB = 2, NH = 3, NSQ = 100, ND = 128 };

typedef struct {
  Arena *a;
  const IrGraph *g;
  BwdSlots sl;
  attn_params p;
  const PlanStep *main90, *main80; /* the backward's main step on sm_90a, sm_80 */
  RtDriver d;
  float dqa[1]; /* only its address matters */
  unsigned short q[1], dout[1];
} Fixture;

/* A bf16 [NB, NH, NSQ, ND] tensor argument at ptr, dense. */
static void bind4(attn_tensor_arg *t, void *ptr, long long inner) {
  const int size[4] = {NB, NH, NSQ, (int)inner};
  t->ptr = ptr;
  for (int i = 0; i < 4; i++) t->size[i] = size[i];
  t->stride[3] = 1;
  t->stride[2] = inner;
  t->stride[1] = inner * NSQ;
  t->stride[0] = inner * NSQ * NH;
}

static void setup(Fixture *f) {
  memset(f, 0, sizeof *f);
  ncalls = 0;
  fail_on_call = -1;
  f->a = arena_new();
  IrModule *m = unit_build(f->a, "<tmap>", GRAPH);
  f->g = m->graphs[0];
  cr_assert_eq(bwd_slots(f->g, &f->sl), 0);
  f->main90 = unit_step(unit_compile(f->a, m, "sm_90a", STAGE_PLAN).plans, PLAN_BACKWARD, "main");
  f->main80 = unit_step(unit_compile(f->a, m, "sm_80", STAGE_PLAN).plans, PLAN_BACKWARD, "main");
  cr_assert(f->main90 && f->main80);
  bind4(&f->p.t[f->g->q], f->q, ND);
  bind4(&f->p.t[f->sl.dout], f->dout, ND);
  bind4(&f->p.t[f->sl.dqa], f->dqa, ND);
  f->d.TensorMapEncodeTiled = fake_encode;
  f->d.GetErrorName = fake_error_name;
  f->d.GetErrorString = fake_error_string;
}

static int map_is_zero(const attn_tmap *m) {
  static const attn_tmap zero;
  return memcmp(m, &zero, sizeof zero) == 0;
}

Test(tmap, backward_maps_q_dout_and_the_dq_accumulator) {
  Fixture f;
  setup(&f);
  attn_tmaps tm;
  StrBuf err = {0};
  cr_assert_eq(rt_tmap_fill(&f.d, f.g, f.main90, &f.p, &tm, &err),
               ATTN_SUCCESS, "%s", err.data ? err.data : "");
  cr_assert_eq(ncalls, 3);
  /* q and dO: bf16, 64 x 64 boxes, 128-byte swizzle. */
  for (int i = 0; i < 2; i++) {
    cr_assert_eq(calls[i].type, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    cr_assert_eq(calls[i].box[0], 64);
    cr_assert_eq(calls[i].box[1], 64);
    cr_assert_eq(calls[i].stride[0], (cuuint64_t)ND * 2);
  }
  cr_assert_eq(calls[0].ptr, (void *)f.q);
  cr_assert_eq(calls[1].ptr, (void *)f.dout);
  /* dQ's accumulator: f32, dims (D, Sq, H, B), dense byte strides, boxes
   * of 32 columns (128 bytes, the widest the swizzle takes) by 64 rows. */
  const Encoded *e = &calls[2];
  cr_assert_eq(e->type, CU_TENSOR_MAP_DATA_TYPE_FLOAT32);
  cr_assert_eq(e->rank, 4);
  cr_assert_eq(e->ptr, (void *)f.dqa);
  cr_assert_eq(e->dim[0], ND);
  cr_assert_eq(e->dim[1], NSQ);
  cr_assert_eq(e->dim[2], NH);
  cr_assert_eq(e->dim[3], NB);
  cr_assert_eq(e->stride[0], (cuuint64_t)ND * 4);
  cr_assert_eq(e->stride[1], (cuuint64_t)ND * 4 * NSQ);
  cr_assert_eq(e->stride[2], (cuuint64_t)ND * 4 * NSQ * NH);
  cr_assert_eq(e->box[0], 32);
  cr_assert_eq(e->box[1], 64);
  cr_assert_eq(e->box[2], 1);
  cr_assert_eq(e->swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
  cr_assert(!map_is_zero(&tm.m[ATTN_TMAP_Q]));
  cr_assert(!map_is_zero(&tm.m[ATTN_TMAP_DO]));
  cr_assert(!map_is_zero(&tm.m[ATTN_TMAP_DQA]));
  sb_free(&err);
  arena_free(f.a);
}

Test(tmap, deterministic_mode_has_no_dq_map) {
  Fixture f;
  setup(&f);
  memset(&f.p.t[f.sl.dqa], 0, sizeof f.p.t[f.sl.dqa]); /* the null accumulator */
  attn_tmaps tm;
  StrBuf err = {0};
  cr_assert_eq(rt_tmap_fill(&f.d, f.g, f.main90, &f.p, &tm, &err),
               ATTN_SUCCESS);
  cr_assert_eq(ncalls, 2, "q and dO only");
  cr_assert(map_is_zero(&tm.m[ATTN_TMAP_DQA]));
  sb_free(&err);
  arena_free(f.a);
}

Test(tmap, a_failed_dq_map_is_an_error_naming_it) {
  Fixture f;
  setup(&f);
  fail_on_call = 2;
  attn_tmaps tm;
  StrBuf err = {0};
  cr_assert_eq(rt_tmap_fill(&f.d, f.g, f.main90, &f.p, &tm, &err),
               ATTN_ERROR_CUDA);
  cr_assert(err.data && strstr(err.data, "cuTensorMapEncodeTiled failed"), "%s", err.data);
  cr_assert(strstr(err.data, "dQ_accumulator of graph 'g'"), "%s", err.data);
  sb_free(&err);
  arena_free(f.a);
}

Test(tmap, no_maps_for_the_portable_backward) {
  Fixture f;
  setup(&f);
  attn_tmaps tm; /* bwd_sm80: its main kernel takes no maps */
  StrBuf err = {0};
  cr_assert_eq(rt_tmap_fill(&f.d, f.g, f.main80, &f.p, &tm, &err),
               ATTN_SUCCESS);
  cr_assert_eq(ncalls, 0);
  for (int i = 0; i < 4; i++) cr_assert(map_is_zero(&tm.m[i]));
  sb_free(&err);
  arena_free(f.a);
}

/* Packed sequences: q, k and v bound as declared, [tokens, heads, D], map
 * as (D, tokens, heads, 1) over their own byte strides (the kernel adds a
 * sequence's first row to the row coordinate); an MQA k (one head, bound
 * with stride 0 there) gets a dense stride, which the encoder needs. */
Test(tmap, packed_tensors_map_tokens_as_rows) {
  Arena *a = arena_new();
  IrModule *m = unit_build(a, "<tmap>",
                           "attention g {\n  input q : bf16[Tq, H, 128];\n"
                           "  input k : bf16[Tk, 1, 128];\n  input v : bf16[Tk, 1, 128];\n"
                           "  input cq : i32[B1];\n  input ck : i32[B1];\n"
                           "  o = softmax(packed(q, cq) @ packed(k, ck)^T) @ packed(v, ck);\n"
                           "  output o : bf16[Tq, H, 128];\n}\n");
  const IrGraph *g = m->graphs[0];
  const PlanStep *fwd = unit_step(unit_compile(a, m, "sm_90a", STAGE_PLAN).plans, PLAN_FORWARD,
                                  "forward");
  /* (and O's, whose staged stores use it where a warp's 16 rows are the
   * sequence's; session 43) */
  cr_assert(fwd && fwd->nmaps == 4 && fwd->maps[3].index == ATTN_TMAP_O);
  cr_assert(fwd->maps[3].box_cols == 64 && fwd->maps[3].box_rows == 16);
  attn_params p;
  memset(&p, 0, sizeof p);
  unsigned short q[1], k[1], v[1], o[1];
  void *ptrs[4] = {q, k, v, o};
  const int idx[4] = {g->q, g->k, g->v, g->outputs[0].tensor}, heads[4] = {6, 1, 1, 6},
            tokens[4] = {300, 410, 410, 300};
  for (int x = 0; x < 4; x++) {
    attn_tensor_arg *t = &p.t[idx[x]];
    t->ptr = ptrs[x];
    t->size[0] = tokens[x], t->size[1] = heads[x], t->size[2] = 128, t->size[3] = 1;
    t->stride[0] = heads[x] * 128, t->stride[1] = heads[x] > 1 ? 128 : 0, t->stride[2] = 1;
  }
  attn_tmaps tm;
  StrBuf err = {0};
  fake_fill(g, fwd, &p, &tm, &err);
  cr_assert_eq(ncalls, 4);
  for (int x = 0; x < 4; x++) {
    const Encoded *e = &calls[x];
    cr_assert_eq(e->rank, 4);
    cr_assert_eq(e->dim[0], 128);
    cr_assert_eq(e->dim[1], (cuuint64_t)tokens[x]);
    cr_assert_eq(e->dim[2], (cuuint64_t)heads[x]);
    cr_assert_eq(e->dim[3], 1);
    cr_assert_eq(e->stride[0], (cuuint64_t)heads[x] * 128 * 2, "map %d", x);
    /* A head's 128 bf16; the one head of k and v, bound with stride 0,
     * gets the dense stride past its rows (any stride addresses index 0). */
    const cuuint64_t hs = heads[x] > 1 ? 256 : (cuuint64_t)256 * tokens[x];
    cr_assert_eq(e->stride[1], hs, "map %d", x);
    cr_assert_eq(e->stride[2], hs * heads[x], "map %d", x);
  }
  sb_free(&err);
  arena_free(a);
}

/* Paged caches ([pages, page size, Hk, D], and paged_hnd's [pages, Hk,
 * page size, D]): K's and V's maps over the caches as (D, page rows, Hk,
 * pages), boxes of the largest power of two dividing the page size and
 * BN (fwd_sm90.cuh, fwd90_page_box): 16 rows at page 48, BN at page 256,
 * 1 row at page 7. */
static void paged_maps(const char *view, int page, int heads_dim, cuuint32_t want_rows) {
  enum { P = 9, HK = 2, D = 128 };
  Arena *a = arena_new();
  char text[1024];
  const char *dims = heads_dim == 1 ? "P, Hk, PS" : "P, PS, Hk";
  snprintf(text, sizeof text,
           "attention g {\n  input q : bf16[B, H, Sq, 128];\n  input kc : bf16[%s, 128];\n"
           "  input vc : bf16[%s, 128];\n  input t : i32[B, M];\n"
           "  s = q @ %s(kc, t)^T;\n  o = softmax(s) @ %s(vc, t);\n"
           "  output o : bf16[B, H, Sq, 128];\n}\n",
           dims, dims, view, view);
  IrModule *m = unit_build(a, "<tmap>", text);
  const IrGraph *g = m->graphs[0];
  const PlanStep *f = unit_step(unit_compile(a, m, "sm_90a", STAGE_PLAN).plans, PLAN_FORWARD,
                                "forward");
  cr_assert(f && f->nmaps == 4); /* q, the caches and O (staged and stored by TMA) */
  attn_params p;
  memset(&p, 0, sizeof p);
  static unsigned short q[1], kc[1], vc[1], o[1];
  bind4(&p.t[g->q], q, D);
  bind4(&p.t[g->outputs[0].tensor], o, D);
  unsigned short *cache[2] = {kc, vc};
  const int tk[2] = {g->k, g->v};
  for (int x = 0; x < 2; x++) { /* dense [P, page, HK, D] or [P, HK, page, D] */
    attn_tensor_arg *t = &p.t[tk[x]];
    const int rows = 3 - heads_dim;
    t->ptr = cache[x];
    t->size[0] = P, t->size[rows] = page, t->size[heads_dim] = HK, t->size[3] = D;
    t->stride[3] = 1;
    t->stride[2] = D;
    t->stride[1] = (long long)D * t->size[2];
    t->stride[0] = t->stride[1] * t->size[1];
  }
  RtDriver d = {.TensorMapEncodeTiled = fake_encode};
  ncalls = 0;
  fail_on_call = -1;
  attn_tmaps tm;
  StrBuf err = {0};
  cr_assert_eq(rt_tmap_fill(&d, g, f, &p, &tm, &err), ATTN_SUCCESS, "%s",
               err.data ? err.data : "");
  cr_assert_eq(ncalls, 4);
  for (int x = 1; x < 3; x++) {
    const Encoded *e = &calls[x];
    const attn_tensor_arg *t = &p.t[tk[x - 1]];
    const int rows = 3 - heads_dim;
    cr_assert_eq(e->ptr, t->ptr);
    cr_assert_eq(e->dim[0], D);
    cr_assert_eq(e->dim[1], (cuuint64_t)page);
    cr_assert_eq(e->dim[2], HK);
    cr_assert_eq(e->dim[3], P);
    cr_assert_eq(e->stride[0], (cuuint64_t)t->stride[rows] * 2);
    cr_assert_eq(e->stride[1], (cuuint64_t)t->stride[heads_dim] * 2);
    cr_assert_eq(e->stride[2], (cuuint64_t)t->stride[0] * 2);
    cr_assert_eq(e->box[0], 64);
    cr_assert_eq(e->box[1], want_rows, "page %d: box rows %u", page, e->box[1]);
    cr_assert_eq(e->box[2], 1);
    cr_assert_eq(e->box[3], 1);
  }
  sb_free(&err);
  arena_free(a);
}

Test(tmap, paged_caches_map_page_rows_heads_and_pages) {
  paged_maps("paged", 48, 2, 16);
  paged_maps("paged", 256, 2, 128);
  paged_maps("paged_hnd", 16, 1, 16);
  paged_maps("paged_hnd", 7, 1, 1);
}

/* The kv_copy variant: the forward's K and V maps are over the widen_kv
 * step's 16-bit copies (dense [B, Hk, Skv, D] workspace slots), bf16 with
 * 64-column boxes, not over the FP8 cache, which the step alone reads. */
Test(tmap, kv_copy_maps_the_widened_copies) {
  Arena *a = arena_new();
  IrModule *m = unit_build(a, "<kv_copy>",
                           "attention g {\n  input q : bf16[B, H, Sq, 128];\n"
                           "  input k : e4m3[B, Hk, Skv, 128];\n  input v : e4m3[B, Hk, Skv, 128];\n"
                           "  s = q @ k^T;\n  o = softmax(s) @ v;\n"
                           "  output o : bf16[B, H, Sq, 128];\n}\n");
  Diag d = {0};
  Compiled c;
  const CompileOptions o = {.arch = "sm_90a", .sm90_variant = tmpl_sm90_variant_index("kv_copy")};
  cr_assert_eq(compile_module(m, &o, STAGE_PLAN, a, &d, &c), 0);
  const FwdConfig *cfg = &c.graphs[0].cfg;
  const PlanStep *fwd = unit_step(c.plans, PLAN_FORWARD, "forward");
  cr_assert(cfg->kv_copy && fwd);
  enum { B = 2, H = 8, HK = 2, SQ = 300, SKV = 500 };
  static unsigned short q[1], k16[1], v16[1];
  static unsigned char k8[1], v8[1];
  attn_params p;
  memset(&p, 0, sizeof p);
  const IrGraph *g = c.graphs[0].g;
  struct {
    int slot;
    void *ptr;
    int size[4];
  } binds[] = {{g->q, q, {B, H, SQ, 128}},
               {g->k, k8, {B, HK, SKV, 128}},
               {g->v, v8, {B, HK, SKV, 128}},
               {cfg->copy_k, k16, {B, HK, SKV, 128}},
               {cfg->copy_v, v16, {B, HK, SKV, 128}}};
  for (size_t i = 0; i < sizeof binds / sizeof binds[0]; i++) {
    attn_tensor_arg *t = &p.t[binds[i].slot];
    t->ptr = binds[i].ptr;
    for (int x = 0; x < 4; x++) t->size[x] = binds[i].size[x];
    t->stride[3] = 1;
    t->stride[2] = 128;
    t->stride[1] = 128LL * binds[i].size[2];
    t->stride[0] = 128LL * binds[i].size[2] * binds[i].size[1];
  }
  attn_tmaps tm;
  StrBuf err = {0};
  fake_fill(g, fwd, &p, &tm, &err);
  cr_assert_eq(ncalls, 3);
  cr_assert_eq(calls[1].ptr, (void *)k16);
  cr_assert_eq(calls[2].ptr, (void *)v16);
  for (int i = 1; i < 3; i++) {
    cr_assert_eq(calls[i].type, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16);
    cr_assert(calls[i].dim[0] == 128 && calls[i].dim[1] == SKV && calls[i].dim[2] == HK &&
              calls[i].dim[3] == B);
    cr_assert_eq(calls[i].stride[0], (cuuint64_t)128 * 2);
    cr_assert_eq(calls[i].box[0], 64);
    cr_assert_eq(calls[i].box[1], (cuuint32_t)cfg->bn);
    cr_assert_eq(calls[i].swizzle, CU_TENSOR_MAP_SWIZZLE_128B);
  }
  sb_free(&err);
  diag_free(&d);
  arena_free(a);
}
