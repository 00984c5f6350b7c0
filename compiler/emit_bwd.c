/*
 * emit_bwd.c: the backward kernels of a graph that declares grad, emitted
 * into the forward's translation unit (docs/templates.md, bwd_sm80; on
 * sm_90a the main kernel is bwd_sm90's).
 *
 * The graph-specific part of the backward is the chain rule from dS (the
 * gradient at the softmax's input) down to q @ k^T, which backward.c
 * derived as IR nodes. It becomes the hook attn_bwd_draw, straight-line
 * code like the forward's hooks: one const local per node, forward nodes
 * named as emit.c names them (the .attn name and id), derived ones d_ID.
 * A factor fixed for the whole graph (usually the softmax scale) is left
 * out of dRaw and returned by attn_bwd_scale; the template multiplies dQ
 * and dK by it once per element instead of once per score.
 */
#include <stdlib.h>
#include <string.h>

#include "attnc.h"

/* A hook over the forward graph and its derived backward: forward nodes
 * are named as emit.c names them, derived ones d_ID, dS is `ds` and the
 * raw score `acc` (emit_expr.c). */
static void bwd_hook_init(ExprHook *hk, const BwdSpec *s, Arena *a) {
  expr_init(hk, a, s->g, DOM_B | DOM_H | DOM_I | DOM_J);
  hk->acc_name = "acc";
  hk->bg = s->bg;
  hk->dvars = arena_alloc(a, (size_t)(s->bg->nnodes + 1) * sizeof *hk->dvars);
}

/* The BwdBias derived for tensor t, or NULL (the scores pass it no
 * gradient: it stays 0). */
static const BwdBias *find_bias(const BwdGraph *bg, int t) {
  for (int k = 0; k < bg->nbias; k++)
    if (bg->bias[k].tensor == t) return &bg->bias[k];
  return NULL;
}

static const char *axis_var(int axis) {
  return axis == DOM_B ? "b" : axis == DOM_H ? "h" : axis == DOM_I ? "i" : axis == DOM_J ? "j" : "0";
}

/* "x0, x1, x2, x3": the bias element that score element (b, h, i, j)
 * reads, broadcast dims 0. */
static const char *bias_subs(Arena *a, const BwdSlots *sl, int r) {
  const int *ax = sl->bias_axis[r];
  return arena_printf(a, "%s, %s, %s, %s", axis_var(ax[0]), axis_var(ax[1]), axis_var(ax[2]),
                      axis_var(ax[3]));
}

/* Dense offset of that element in a scratch shaped like the bias. */
static const char *bias_dense(Arena *a, const BwdSlots *sl, int r) {
  const int *ax = sl->bias_axis[r];
  int t = sl->bias[r];
  return arena_printf(a,
                      "((((long long)%s * p.t[%d].size[1] + %s) * p.t[%d].size[2] + %s) * "
                      "p.t[%d].size[3] + %s)",
                      axis_var(ax[0]), t, axis_var(ax[1]), t, axis_var(ax[2]), t, axis_var(ax[3]));
}

/* How many of the gradients the score elements feed (not the sink's). */
static int score_biases(const BwdSlots *sl) { return sl->nbias - (bwd_sink_entry(sl) >= 0); }

static const char *full_index(Arena *a, const char *b, const char *h, const char *i,
                              const char *j) {
  return arena_printf(a, "(((long long)%s * p.H + %s) * p.Sq + %s) * p.Skv + %s", b, h, i, j);
}

/* The bias-gradient hooks (templates/bwd_sm80.cuh declares them), after
 * the template text, whose store helpers they call. */
static void emit_bias_hooks(StrBuf *out, const BwdSpec *s, Arena *a) {
  const BwdSlots *sl = &s->slots;
  const IrGraph *g = s->g;
  ExprHook hk;
  bwd_hook_init(&hk, s, a);
  const char *ret = s->bg->draw ? expr_as(&hk, s->bg->draw, DT_F32) : "0.f";
  const char *val[BWD_MAX_BIAS] = {NULL};
  for (int r = 0; r < sl->nbias; r++) {
    const BwdBias *bb = find_bias(s->bg, sl->bias[r]);
    if (bb) val[r] = expr_as(&hk, bb->value, DT_F32); /* (none for the sink: not in the scores) */
  }
  sb_puts(out, "\n/* attn_bwd_draw plus each bias's gradient at score element (b, h, i, j). */\n"
               "static __device__ __forceinline__ float attn_bwd_draw_bias(float ds, float acc, "
               "int b, int h, int i, int j, const attn_params &p, float (&red)[bwd80_nred]) {\n");
  if (hk.body.len) sb_puts(out, hk.body.data);
  sb_free(&hk.body);
  int nred = 0;
  for (int r = 0; r < sl->nbias; r++) {
    const IrTensor *t = &g->tensors[sl->bias[r]];
    const char *st = dtype_name(t->type);
    if (sl->bias_mode[r] == BWD_BIAS_SINK) continue; /* the dsink kernel's */
    if (!val[r]) {
      sb_printf(out, "  /* d%s: the scores pass it no gradient */\n", t->name);
      if (sl->bias_mode[r] == BWD_BIAS_REDUCED) nred++;
      continue;
    }
    switch (sl->bias_mode[r]) {
    case BWD_BIAS_DIRECT:
      sb_printf(out, "  { /* d%s, written once per element */\n"
                     "    const long long o = attn_offset_idx(p.t[%d], %s);\n"
                     "    if (o >= 0) bwd80_st_%s(p.t[%d].ptr, o, %s);\n  }\n",
                t->name, sl->dbias[r], bias_subs(a, sl, r), st, sl->dbias[r], val[r]);
      break;
    case BWD_BIAS_SINK: /* (skipped above) */
      break;
    case BWD_BIAS_ATOMIC:
    case BWD_BIAS_REDUCED:
      sb_printf(out, "  if (bwd80_deterministic(p)) /* d%s: every element kept, summed later */\n"
                     "    ((float *)p.t[%d].ptr)[%s] = %s;\n",
                t->name, sl->dbias_acc[r], full_index(a, "b", "h", "i", "j"), val[r]);
      if (sl->bias_mode[r] == BWD_BIAS_ATOMIC)
        sb_printf(out, "  else\n    atomicAdd((float *)p.t[%d].ptr + %s, %s);\n", sl->dbias_acc[r],
                  bias_dense(a, sl, r), val[r]);
      else
        sb_printf(out, "  else\n    red[%d] += %s;\n", nred++, val[r]);
      break;
    }
  }
  sb_printf(out, "  return %s;\n}\n\n", ret);

  /* flush: the warp sums of the REDUCED biases. */
  sb_puts(out, "static __device__ __forceinline__ void attn_bwd_bias_flush(const float "
               "(&red)[bwd80_nred], int b, int h, const attn_params &p) {\n");
  nred = 0;
  for (int r = 0; r < sl->nbias; r++)
    if (sl->bias_mode[r] == BWD_BIAS_REDUCED) {
      sb_printf(out, "  { const int i = 0, j = 0; (void)i; (void)j;\n"
                     "    atomicAdd((float *)p.t[%d].ptr + %s, red[%d]); }\n",
                sl->dbias_acc[r], bias_dense(a, sl, r), nred++);
    }
  sb_puts(out, "  (void)red; (void)b; (void)h; (void)p;\n}\n\n");

  /* init: zero the directly written gradients' rows. */
  sb_puts(out, "static __device__ __forceinline__ void attn_bwd_bias_init(int b, int h, int i, "
               "int lane, const attn_params &p) {\n");
  for (int r = 0; r < sl->nbias; r++)
    if (sl->bias_mode[r] == BWD_BIAS_DIRECT)
      sb_printf(out, "  for (int j = lane; j < p.Skv; j += 32) {\n"
                     "    const long long o = attn_offset_idx(p.t[%d], b, h, i, j);\n"
                     "    if (o >= 0) bwd80_st_%s(p.t[%d].ptr, o, 0.f);\n  }\n",
                sl->dbias[r], dtype_name(g->tensors[sl->bias[r]].type), sl->dbias[r]);
  sb_puts(out, "  (void)b; (void)h; (void)i; (void)lane; (void)p;\n}\n\n");

  /* finish: each accumulated gradient's elements, by one representative
   * warp (coordinate 0 on the axes the bias does not keep). */
  sb_puts(out, "static __device__ __forceinline__ void attn_bwd_bias_finish(int b, int h, int i, "
               "int lane, const attn_params &p) {\n"
               "  const bool det = bwd80_deterministic(p);\n  (void)det;\n");
  for (int r = 0; r < sl->nbias; r++) {
    if (!bwd_bias_accumulated(sl->bias_mode[r])) continue;
    unsigned kp = sl->bias_keep[r];
    bool kb = kp & DOM_B, kh = kp & DOM_H, ki = kp & DOM_I, kj = kp & DOM_J;
    const IrTensor *t = &g->tensors[sl->bias[r]];
    sb_printf(out, "  if (%s && %s && %s) { /* d%s */\n", kb ? "true" : "b == 0",
              kh ? "true" : "h == 0", ki ? "true" : "i == 0", t->name);
    if (kj)
      sb_puts(out, "    for (int j = lane; j < p.Skv; j += 32) {\n");
    else
      sb_puts(out, "    {\n      const int j = 0;\n");
    sb_puts(out, "      float v = 0.f;\n      if (det) {\n");
    sb_printf(out, "        for (int bb = %s; bb < %s; ++bb)\n", kb ? "b" : "0", kb ? "b + 1" : "p.B");
    sb_printf(out, "          for (int hh = %s; hh < %s; ++hh)\n", kh ? "h" : "0",
              kh ? "h + 1" : "p.H");
    sb_printf(out, "            for (int ii = %s; ii < %s; ++ii)\n", ki ? "i" : "0",
              ki ? "i + 1" : "p.Sq");
    sb_printf(out, "              for (int jj = %s; jj < %s; jj += %s)\n", kj ? "j" : "lane",
              kj ? "j + 1" : "p.Skv", kj ? "1" : "32");
    sb_printf(out, "                v += ((const float *)p.t[%d].ptr)[%s];\n", sl->dbias_acc[r],
              full_index(a, "bb", "hh", "ii", "jj"));
    if (!kj)
      sb_puts(out, "#pragma unroll\n        for (int o = 16; o > 0; o >>= 1)\n"
                   "          v += __shfl_xor_sync(0xffffffffu, v, o);\n");
    sb_printf(out, "      } else {\n        v = ((const float *)p.t[%d].ptr)[%s];\n      }\n",
              sl->dbias_acc[r], bias_dense(a, sl, r));
    sb_printf(out, "      const long long o = attn_offset_idx(p.t[%d], %s);\n", sl->dbias[r],
              bias_subs(a, sl, r));
    sb_printf(out, "      if (o >= 0%s) bwd80_st_%s(p.t[%d].ptr, o, v);\n    }\n  }\n",
              kj ? "" : " && lane == 0", dtype_name(t->type), sl->dbias[r]);
  }
  sb_puts(out, "  (void)b; (void)h; (void)i; (void)lane; (void)p;\n}\n\n");
}

/* What dRaw (and the bias gradients) read, for the templates' choices:
 * the raw score (bwd_sm90 then keeps it until dP^T has landed instead of
 * overwriting it with P^T) and memory (then they must not run where P is
 * 0: such elements may lie outside the tensors). */
static void draw_reads(const BwdSpec *s, Arena *a, bool *acc, bool *mem) {
  ExprHook hk;
  bwd_hook_init(&hk, s, a);
  if (s->bg->draw) expr_value(&hk, s->bg->draw);
  for (int k = 0; k < s->bg->nbias; k++)
    if (s->bg->bias[k].value) expr_value(&hk, s->bg->bias[k].value);
  *acc = hk.acc_reads > 0;
  *mem = hk.mem_reads > 0;
  sb_free(&hk.body);
}

/* ------------------------------------------------- the FP8 backward */

/* A storage type as attn_store_pair's KIND. */
static int store_kind(DType t) {
  switch (t) {
  case DT_BF16: return 0;
  case DT_F16: return 1;
  case DT_F32: return 2;
  case DT_E4M3: return 3;
  default: return 4; /* e5m2 */
  }
}

/* A hook over the grad block's own nodes: its leaf is the parameter x. */
static void block_hook_init(ExprHook *hk, IrGraph *view, const BwdSpec *s, IrNode *leaf,
                            Arena *a) {
  *view = *s->g;
  view->nodes = s->g->grad->nodes;
  view->nnodes = s->g->grad->nnodes;
  expr_init(hk, a, view, 0);
  hk->vars[leaf->id] = "x";
}

/* `float NAME(float x, const attn_params &p)` returning block expression
 * `value` of `leaf` at x (x itself for no value, or the leaf). */
static void emit_block_fn(StrBuf *out, const BwdSpec *s, IrNode *leaf, IrNode *value,
                          const char *name, Arena *a) {
  if (!value || value == leaf) {
    sb_printf(out, "static __device__ __forceinline__ float %s(float x, const attn_params &p) {\n"
                   "  (void)p;\n  return x;\n}\n\n", name);
    return;
  }
  IrGraph view;
  ExprHook hk;
  block_hook_init(&hk, &view, s, leaf, a);
  const char *ret = expr_as(&hk, value, DT_F32);
  expr_put_fn(out, &hk, arena_printf(a, "float %s(float x, const attn_params &p)", name), ret);
}

/* The block's value of gradient `which` as NAME (x itself without a block). */
static void emit_block_value(StrBuf *out, const BwdSpec *s, int which, const char *name,
                             Arena *a) {
  const IrGradBlock *gb = s->g->grad;
  emit_block_fn(out, s, gb ? gb->v[which].leaf : NULL, gb ? gb->v[which].value : NULL, name, a);
}

/* dS's value as the products read it and the factor left for after them:
 * a value `R(ds * a) * b` (or `/ b`, b fixed for the call) packs R(ds * a),
 * exact in bf16 for an FP8 R, and dQ and dK take b with the folded scale
 * (attn_bwd_ds_post). Not where a bias gradient reads dS (its hooks would
 * then see it without b): then the whole value, and 1. */
static void emit_ds_hooks(StrBuf *out, const BwdSpec *s, Arena *a) {
  const IrGradBlock *gb = s->g->grad;
  IrNode *leaf = gb ? gb->v[IR_GRAD_DS].leaf : NULL;
  IrNode *outer[16];
  bool over[16];
  int n;
  IrNode *inner = bwd_ds_split(s, outer, over, &n);
  emit_block_fn(out, s, leaf, inner, "attn_bwd_ds_value", a);
  if (s->fp8_mma) {
    /* bwd_sm90's FP8 mode packs dS to its FP8 type with the same rounding
     * (bwd_fp8_mma_refusal: the value is an FP8 cast), so its fragments
     * take the value before the cast: one conversion, not two. */
    sb_puts(out, "/* dS's value before its FP8 rounding (the FP8 mode's packing rounds). */\n");
    emit_block_fn(out, s, leaf, inner->src[0], "attn_bwd_ds_unrounded", a);
  }
  sb_puts(out, "/* The factor dS's value leaves for after the products (dQ, dK). */\n");
  if (n == 0) {
    sb_puts(out, "static __device__ __forceinline__ float attn_bwd_ds_post(const attn_params "
                 "&p) {\n  (void)p;\n  return 1.f;\n}\n\n");
    return;
  }
  IrGraph view;
  ExprHook hk;
  block_hook_init(&hk, &view, s, leaf, a);
  StrBuf ret = {0};
  sb_puts(&ret, "1.f");
  for (int k = 0; k < n; k++)
    sb_printf(&ret, " %s %s", over[k] ? "/" : "*", expr_as(&hk, outer[k], DT_F32));
  expr_put_fn(out, &hk, "float attn_bwd_ds_post(const attn_params &p)",
              arena_printf(a, "%s", ret.data));
  sb_free(&ret);
}

static const char *const grad_tag[IR_GRAD_N] = {"do", "ds", "dq", "dk", "dv"};

/* For gradient `which`: attn_bwd_amax_TAG(x, m, p) maxes each of its amax
 * outputs' |value| at element x into m[k] (attn_amax_fold), and
 * attn_bwd_amax_commit_TAG(m, p) reduces m over the active lanes of the
 * warp into the outputs (bwd80_amax_commit). */
static void emit_block_amax(StrBuf *out, const BwdSpec *s, int which, Arena *a) {
  const IrGradBlock *gb = s->g->grad;
  const char *tag = grad_tag[which];
  sb_printf(out, "static __device__ __forceinline__ void attn_bwd_amax_%s(float x, unsigned "
                 "(&m)[BWD80_AMAX_MAX], const attn_params &p) {\n", tag);
  int n = 0;
  for (int k = 0; gb && k < gb->namax && k < BWD_MAX_AMAX; k++) {
    if (gb->amax[k].of != which) continue;
    IrGraph view;
    ExprHook hk;
    block_hook_init(&hk, &view, s, gb->v[which].leaf, a);
    const char *v = expr_as(&hk, gb->amax[k].value, DT_F32);
    sb_printf(out, "  { /* %s */\n", gb->amax[k].name);
    if (hk.body.len) sb_puts(out, hk.body.data);
    sb_free(&hk.body);
    sb_printf(out, "    m[%d] = attn_amax_fold(m[%d], %s);\n  }\n", n, n, v);
    n++;
  }
  sb_puts(out, "  (void)x; (void)m; (void)p;\n}\n\n");
  sb_printf(out, "static __device__ __forceinline__ void attn_bwd_amax_commit_%s(const unsigned "
                 "(&m)[BWD80_AMAX_MAX], const attn_params &p) {\n", tag);
  n = 0;
  for (int k = 0; gb && k < gb->namax && k < BWD_MAX_AMAX; k++)
    if (gb->amax[k].of == which) {
      sb_printf(out, "  bwd80_amax_commit(m[%d], %d, p); /* %s */\n", n, s->slots.amax[k],
                gb->amax[k].name);
      n++;
    }
  sb_puts(out, "  (void)m; (void)p;\n}\n\n");
}

static int block_amax_count(const BwdSpec *s, int which) {
  const IrGradBlock *gb = s->g->grad;
  int n = 0;
  for (int k = 0; gb && k < gb->namax && k < BWD_MAX_AMAX; k++) n += gb->amax[k].of == which;
  return n;
}

/* Whether every amax output of gradient `which` is amax(x) of the value
 * itself, so that a zero value leaves each of them as it is (bwd80_ds
 * then needs no test of dS against 0 in the FP8 mode). */
static bool block_amax_bare(const BwdSpec *s, int which) {
  const IrGradBlock *gb = s->g->grad;
  for (int k = 0; gb && k < gb->namax && k < BWD_MAX_AMAX; k++)
    if (gb->amax[k].of == which && gb->amax[k].value != gb->v[which].leaf) return false;
  return true;
}

/* The FP8 backward's hooks (bwd_sm80.cuh declares them under
 * ATTN_BWD_FP8), after the template: the factors P V's gradient carries
 * (P's scale, o's, dO's descale), dS's and each gradient's values as the
 * grad block makes them, and the block's amax outputs. */
static void emit_fp8_hooks(StrBuf *out, const BwdSpec *s, Arena *a) {
  sb_puts(out, "/* The FP8 backward's hooks (docs/language.md \"FP8 gradients\"). */\n");
  emit_block_value(out, s, IR_GRAD_DO, "attn_bwd_do_value", a);
  ExprHook hk;
  bwd_hook_init(&hk, s, a);
  const char *o_scale = s->bg->o_scale ? expr_as(&hk, s->bg->o_scale, DT_F32) : "1.f";
  sb_puts(out, "/* dP's, dV's and delta's factors for (b, h): P's scale, o's scale and\n"
               " * dO's descale (attnc ir --backward: dp, dv, delta). */\n"
               "static __device__ __forceinline__ bwd80_factors attn_bwd_factors(int b, int h, "
               "const attn_params &p) {\n");
  if (hk.body.len) sb_puts(out, hk.body.data);
  sb_free(&hk.body);
  sb_printf(out, "  const float o_scale = %s;\n"
                 "  const float do_scale = attn_bwd_do_value(1.f, p);\n"
                 "  const float p_scale = attn_p_scale_value(b, h, p);\n"
                 "  (void)b; (void)h;\n"
                 "  return {p_scale * o_scale * do_scale, o_scale * do_scale, do_scale};\n}\n\n",
            o_scale);
  emit_ds_hooks(out, s, a);
  emit_block_value(out, s, IR_GRAD_DQ, "attn_bwd_store_dq", a);
  emit_block_value(out, s, IR_GRAD_DK, "attn_bwd_store_dk", a);
  emit_block_value(out, s, IR_GRAD_DV, "attn_bwd_store_dv", a);
  for (int w = 0; w < IR_GRAD_N; w++) emit_block_amax(out, s, w, a);
}

void emit_bwd_body(StrBuf *out, const BwdSpec *s, MacroSet *ms, bool key, Arena *a) {
  const BwdSlots *sl = &s->slots;
  sb_printf(out, "\n/* ---- backward (templates/%s) ---- */\n",
            s->sm90 ? "bwd_sm80.cuh, bwd_sm90.cuh" : "bwd_sm80.cuh");
  macro_def(out, ms, a, "ATTN_TDO", sl->dout);
  macro_def(out, ms, a, "ATTN_TDELTA", sl->delta);
  macro_def(out, ms, a, "ATTN_TDQA", sl->dqa);
  macro_def(out, ms, a, "ATTN_TDQ", sl->dq);
  macro_def(out, ms, a, "ATTN_TDK", sl->dk);
  macro_def(out, ms, a, "ATTN_TDV", sl->dv);
  macro_def(out, ms, a, "ATTN_TDKA", sl->dka);
  macro_def(out, ms, a, "ATTN_TDVA", sl->dva);
  /* The 16-bit q, k, v and dO the kernels read (the FP8 backward's copies
   * of FP8 ones) and the gradients' storage types (attn_store_pair's
   * kinds). */
  const IrGraph *g = s->g;
  /* (The FP8 tensor-core mode reads the FP8 tensors themselves.) */
  const bool copies = !s->fp8_mma;
  macro_def(out, ms, a, "ATTN_BWD_TQ", copies && sl->q16 >= 0 ? sl->q16 : g->q);
  macro_def(out, ms, a, "ATTN_BWD_TK", copies && sl->k16 >= 0 ? sl->k16 : g->k);
  macro_def(out, ms, a, "ATTN_BWD_TV", copies && sl->v16 >= 0 ? sl->v16 : g->v);
  macro_def(out, ms, a, "ATTN_BWD_TDO", copies && sl->do16 >= 0 ? sl->do16 : sl->dout);
  macro_def(out, ms, a, "ATTN_BWD_IN_BF16", s->mma_type == DT_BF16);
  if (s->stamps) macro_def(out, ms, a, "ATTN_BWD_STAMPS", 1);
  macro_def(out, ms, a, "ATTN_BWD_DQ_KIND", store_kind(bwd_grad_type(g, IR_GRAD_DQ)));
  macro_def(out, ms, a, "ATTN_BWD_DK_KIND", store_kind(bwd_grad_type(g, IR_GRAD_DK)));
  macro_def(out, ms, a, "ATTN_BWD_DV_KIND", store_kind(bwd_grad_type(g, IR_GRAD_DV)));
  if (s->fp8) {
    sb_puts(out, "/* The FP8 backward: its hooks after the template; the FP8 tensors\n"
                 " * convert8 copies (the original dO's kind, 0 when dO is 16-bit), and\n"
                 " * how many amax outputs each gradient has (dO, dS, dq, dk, dv). */\n");
    macro_def(out, ms, a, "ATTN_BWD_FP8", 1);
    macro_def(out, ms, a, "ATTN_BWD_SRC_Q", copies && sl->q16 >= 0 ? g->q : -1);
    macro_def(out, ms, a, "ATTN_BWD_SRC_K", copies && sl->k16 >= 0 ? g->k : -1);
    macro_def(out, ms, a, "ATTN_BWD_SRC_V", copies && sl->v16 >= 0 ? g->v : -1);
    macro_def(out, ms, a, "ATTN_BWD_SRC_DO", copies && sl->do16 >= 0 ? sl->dout : -1);
    macro_def(out, ms, a, "ATTN_BWD_Q8", sl->q16 >= 0 ? store_kind(g->tensors[g->q].type) - 2 : 0);
    macro_def(out, ms, a, "ATTN_BWD_KV8", sl->k16 >= 0 ? store_kind(g->tensors[g->k].type) - 2 : 0);
    macro_def(out, ms, a, "ATTN_BWD_DO8",
              sl->do16 >= 0 ? store_kind(bwd_grad_type(g, IR_GRAD_DO)) - 2 : 0);
    static const char *const nm[IR_GRAD_N] = {"ATTN_BWD_NAMAX_DO", "ATTN_BWD_NAMAX_DS",
                                              "ATTN_BWD_NAMAX_DQ", "ATTN_BWD_NAMAX_DK",
                                              "ATTN_BWD_NAMAX_DV"};
    for (int w = 0; w < IR_GRAD_N; w++) macro_def(out, ms, a, nm[w], block_amax_count(s, w));
    if (s->fp8_mma) {
      sb_puts(out, "/* bwd_sm90's FP8 tensor-core mode: dS's FP8 kind (1 e4m3, 2 e5m2),\n"
                   " * whether dS's amax outputs are all amax(ds), and the slots of\n"
                   " * transpose8's Q^T with dO^T and K^T. */\n");
      macro_def(out, ms, a, "ATTN_BWD_FP8_MMA", 1);
      macro_def(out, ms, a, "ATTN_BWD_DS8", store_kind(s->ds8) - 2);
      macro_def(out, ms, a, "ATTN_BWD_AMAX_DS_BARE", block_amax_bare(s, IR_GRAD_DS));
      macro_def(out, ms, a, "ATTN_BWD_TQDT", sl->q16);
      macro_def(out, ms, a, "ATTN_BWD_TKT", sl->k16);
    }
  }
  if (s->sm90) { /* the modes match_bwd chose; the template infers none */
    macro_def(out, ms, a, "ATTN_BWD_SPLIT_D", s->split_d);
    macro_def(out, ms, a, "ATTN_BWD_WIDE", s->wide);
    macro_def(out, ms, a, "ATTN_BWD_PERSISTENT", s->persistent);
    macro_def(out, ms, a, "ATTN_BWD_BM80", s->bm80);
  }
  sb_puts(out, "\n");
  if (bwd_sink_entry(sl) >= 0) {
    sb_puts(out, "/* The softmax sink's gradient: the dsink kernel, its store hook after\n"
                 " * the template. */\n");
    macro_def(out, ms, a, "ATTN_BWD_DSINK", 1);
    sb_puts(out, "\n");
  }
  if (score_biases(sl) > 0) {
    int nred = 0;
    for (int r = 0; r < sl->nbias; r++) nred += sl->bias_mode[r] == BWD_BIAS_REDUCED;
    sb_puts(out, "/* Bias gradients: hooks after the template. */\n");
    macro_def(out, ms, a, "ATTN_BWD_BIAS", 1);
    macro_def(out, ms, a, "ATTN_BWD_NRED", nred);
    sb_puts(out, "\n");
  }

  ExprHook hk;
  bwd_hook_init(&hk, s, a);
  const char *ret = s->bg->draw ? expr_as(&hk, s->bg->draw, DT_F32) : "0.f";
  sb_puts(out, "/* dRaw, the gradient at q @ k^T, from dS by the derived chain rule\n"
               " * (attnc ir --backward), without the factor attn_bwd_scale gives. */\n");
  expr_put_fn(out, &hk,
         "float attn_bwd_draw(float ds, float acc, int b, int h, int i, int j, "
         "const attn_params &p)",
         ret);
  bwd_hook_init(&hk, s, a);
  ret = s->bg->draw_scale ? expr_as(&hk, s->bg->draw_scale, DT_F32) : "1.f";
  sb_puts(out, "/* The factor folded out of dRaw, applied to dQ and dK. */\n");
  expr_put_fn(out, &hk, "float attn_bwd_scale(const attn_params &p)", ret);
  bool reads_acc, reads_mem;
  draw_reads(s, a, &reads_acc, &reads_mem);
  sb_printf(out, "/* Whether dRaw reads the raw score acc (else the templates may pass\n"
                 " * 0 for it), and whether it or a bias gradient reads or writes\n"
                 " * memory (then it runs only where P is not 0). */\n"
                 "constexpr bool attn_bwd_draw_reads_acc = %s;\n"
                 "constexpr bool attn_bwd_draw_guarded = %s;\n\n",
            reads_acc ? "true" : "false", reads_mem || score_biases(sl) > 0 ? "true" : "false");
  emit_template(out, "templates/bwd_sm80.cuh", bwd_sm80_src, key);
  /* bwd_sm90's main kernel reuses bwd_sm80's other kernels and helpers. */
  if (s->sm90) emit_template(out, "templates/bwd_sm90.cuh", bwd_sm90_src, key);
  /* The launch's dynamic shared memory (match_bwd.c's count) must be the
   * template's layout: a disagreement fails here, at compile time, not as
   * an out-of-range access on the GPU. */
  sb_printf(out,
            "static_assert(attn_bwd_%s_smem_bytes == %d, \"compiler/match_bwd.c and "
            "templates/bwd_%s.cuh disagree on shared memory\");\n\n",
            s->sm90 ? "sm90" : "sm80", s->smem_bytes, s->sm90 ? "sm90" : "sm80");
  if (score_biases(sl) > 0) emit_bias_hooks(out, s, a);
  if (s->fp8) emit_fp8_hooks(out, s, a);
  const int r = bwd_sink_entry(sl);
  if (r >= 0) {
    const IrTensor *t = &s->g->tensors[sl->bias[r]];
    sb_printf(out,
              "/* d%s, the sink's gradient at its element (b, h) (0 on an axis it does\n"
              " * not keep). */\n"
              "static __device__ __forceinline__ void attn_bwd_dsink_store(int b, int h, float v, "
              "const attn_params &p) {\n"
              "  const long long o = attn_offset_idx(p.t[%d], %s);\n"
              "  if (o >= 0) bwd80_st_%s(p.t[%d].ptr, o, v);\n"
              "  (void)b; (void)h;\n}\n\n",
              t->name, sl->dbias[r], bias_subs(a, sl, r), dtype_name(t->type), sl->dbias[r]);
  }
}

void emit_bwd_entries(StrBuf *out, const BwdSpec *s, Arena *a) {
  static const char *const part[4] = {"delta", "main", "convert", "convert_kv"};
  const char *gname = s->g->name;
  for (int k = 0; k < 4; k++) {
    /* bwd_sm90: its own main kernel (one CTA per SM: its registers; the
     * q and dO tensor maps; a producer warpgroup beyond s->threads), the
     * row kernels of bwd_sm80 at s->threads. The plan names the entries
     * (plan_entry) and launches them (plan.c). */
    bool own = s->sm90 && k == 1;
    const char *entry = plan_entry(a, gname, arena_printf(a, "bwd_%s", part[k]));
    if (own)
      emit_entry(out, entry, s->threads + 128, true, true,
                 "  graph_%s::attn_bwd_sm90_main(p, tm);\n", gname);
    else
      emit_entry(out, entry, s->threads, false, false,
                 "  graph_%s::attn_bwd_sm80_%s(p);\n", gname, part[k]);
  }
  if (bwd_sink_entry(&s->slots) >= 0)
    emit_entry(out, plan_entry(a, gname, "bwd_dsink"), 128, false, false,
               "  graph_%s::attn_bwd_sm80_dsink(p);\n", gname);
  const BwdSlots *sl = &s->slots;
  if (s->fp8_mma)
    emit_entry(out, plan_entry(a, gname, "bwd_transpose8"), s->threads, false, false,
               "  graph_%s::attn_bwd_sm90_transpose8(p);\n", gname);
  else if (sl->q16 >= 0 || sl->k16 >= 0 || sl->v16 >= 0 || sl->do16 >= 0)
    emit_entry(out, plan_entry(a, gname, "bwd_convert8"), s->threads, false, false,
               "  graph_%s::attn_bwd_sm80_convert8(p);\n", gname);
  if (sl->namax > 0) { /* the amax outputs zeroed before the kernels max into them */
    StrBuf body = {0};
    sb_puts(&body, "  if (threadIdx.x == 0) {\n");
    for (int k = 0; k < sl->namax; k++)
      sb_printf(&body, "    *(unsigned *)p.t[%d].ptr = 0u;\n", sl->amax[k]);
    sb_puts(&body, "  }\n");
    emit_entry(out, plan_entry(a, gname, "bwd_amax_init"), 32, false, false, "%s", body.data);
    sb_free(&body);
  }
}
