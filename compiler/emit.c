/*
 * emit.c: kernel specs -> one CUDA C translation unit for NVRTC.
 *
 * Layout of the unit: a banner; the text of abi/attn_abi.h,
 * abi/attn_layout.h, templates/common.cuh, ptx.cuh and softmax.cuh; then,
 * for each graph, a namespace holding the configuration macros, the hook
 * functions generated from the graph's expressions, and the text of the
 * chosen template; after it, the graph's extern "C" entry point. The
 * templates call the hooks (docs/templates.md).
 *
 * Expressions become straight-line code: each IR node used by a hook is
 * one `const` local, named after the .attn name it was bound to, so the
 * CUDA reads like the source. Output is deterministic: nodes are visited
 * in a fixed order and nothing depends on addresses or time.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"


/* ---------------------------------------------------------------- hooks */

/* Marks the score chain's maximal subexpressions fixed per (b, h) that
 * cost something per element (tensor reads and arithmetic on them;
 * constants, scalars, sizes and the indices b, h are free already). */
static void mark_per_bh(const IrNode *n, bool *seen, bool *ctx) {
  if (seen[n->id]) return;
  seen[n->id] = true;
  for (int k = 0; k < n->nsrc; k++) {
    const IrNode *x = n->src[k];
    bool fixed = (x->dom & (DOM_I | DOM_J | DOM_D)) == 0;
    bool free_op = x->op == IR_CONST || x->op == IR_SCALAR || x->op == IR_DIM || x->op == IR_INDEX;
    if (fixed && !free_op) ctx[x->id] = true;
    else if (!fixed) mark_per_bh(x, seen, ctx);
  }
}

/* The nodes attn_bh holds: the score chain's and the masks' maximal
 * subexpressions fixed per (b, h) (a mask's kv_len[b] too: left in
 * attn_keep, each element of a tile read it again, 128 loads a tile for a
 * padding mask, which neither NVVM nor ptxas merged). */
static bool *per_bh_nodes(const KernelSpec *s, Arena *a) {
  const IrGraph *g = s->g;
  bool *seen = arena_alloc(a, (size_t)(g->nnodes + 1) * sizeof *seen); /* zeroed */
  bool *ctx = arena_alloc(a, (size_t)(g->nnodes + 1) * sizeof *ctx);
  if ((s->score->dom & (DOM_I | DOM_J)) != 0) mark_per_bh(s->score, seen, ctx);
  for (int m = 0; m < s->nmasks; m++)
    if ((s->masks[m].cond->dom & (DOM_I | DOM_J)) != 0) mark_per_bh(s->masks[m].cond, seen, ctx);
  return ctx;
}

/* attn_bh (the per-(b, h) values: ctx, per_bh_nodes, and the products of
 * expr_qk_products), attn_bh_load, attn_score_bh and attn_score
 * (hooks.cuh); the chain split into factors and what they multiply
 * (attn_score_factor, attn_score_inner_bh), for the templates that fold
 * the factors into the softmax's exp2. */
static void emit_score(StrBuf *out, const KernelSpec *s, const bool *ctx, Arena *a) {
  const IrGraph *g = s->g;
  const bool *lin = expr_qk_products(g, s->score, a);

  ExprHook bh;
  expr_init(&bh, a, g, DOM_B | DOM_H);
  StrBuf fields = {0}, init = {0};
  for (int id = 0; id < g->nnodes; id++) {
    if (!ctx[id]) continue;
    IrNode *x = g->nodes[id];
    const char *type = expr_ctype(expr_kind(x->type));
    sb_printf(&fields, "  %s v%d;\n", type, id);
    sb_printf(&init, "  c.v%d = %s;\n", id, expr_value(&bh, x));
  }
  for (int id = 0; id < g->nnodes; id++) {
    if (!lin[id]) continue;
    ExprFactors fs;
    expr_strip_factors(g->nodes[id], &fs);
    sb_printf(&fields, "  float k%d;\n", id);
    sb_printf(&init, "  c.k%d = %s;\n", id, expr_factor_product(&bh, &fs));
  }
  sb_puts(out, "/* The score chain's and the masks' values fixed per (b, h), read once per work\n"
               " * tile. */\n"
               "struct attn_bh {\n");
  if (fields.len) sb_puts(out, fields.data);
  sb_puts(out, "};\n\n");
  sb_puts(&bh.body, "  attn_bh c{};\n");
  if (init.len) sb_puts(&bh.body, init.data);
  expr_put_fn(out, &bh, "attn_bh attn_bh_load(int b, int h, const attn_params &p)", "c");
  sb_free(&fields);
  sb_free(&init);

  /* Each hook's locals: the ctx nodes as attn_bh's fields. */
  ExprHook hk, in, fk;
  ExprHook *hooks[3] = {&hk, &in, &fk};
  for (int k = 0; k < 3; k++) {
    expr_init(hooks[k], a, g, k < 2 ? DOM_B | DOM_H | DOM_I | DOM_J : DOM_B | DOM_H);
    hooks[k]->acc_name = "acc";
    for (int id = 0; id < g->nnodes; id++)
      if (ctx[id]) hooks[k]->vars[id] = arena_printf(a, "c.v%d", id);
  }
  const char *ret = expr_value(&hk, s->score);
  /* The chain as its factors fixed per (b, h) times what they multiply
   * (the inner chain): fwd_sm90 scores its tiles with the inner chain and
   * folds the factors into its exp2 (fwd90_fold), a softcap's `cap *
   * tanh(...)` as a plain score's scale. The factors' product is taken
   * once per work tile. */
  ExprFactors outer;
  IrNode *inner = expr_strip_factors(s->score, &outer);
  const bool scaled = inner->op == IR_QK, folded = outer.n > 0 || scaled;
  if (outer.n == 0) inner = s->score; /* not folded: the factor is 1 */
  /* Only fwd_sm90's hook takes the q.k products: attn_score_bh stays the
   * chain as written, which the backward's dRaw (emit_bwd.c) recomputes
   * in part (a softcap's tanh), so that NVVM merges the two; and there a
   * product held in a register instead of two constant operands added
   * spills to the sm_90a backward's main kernel of the causal softcap
   * example (D 128: 228 -> 300 bytes). */
  in.qk_products = lin;
  in.qk_products_bh = true;
  const char *iret = expr_value(&in, inner);
  /* (where the inner chain is the whole chain as written, it is called) */
  const bool same = !strcmp(ret, iret) && hk.body.len == in.body.len &&
                    (!hk.body.len || !memcmp(hk.body.data, in.body.data, hk.body.len));
  sb_puts(out, "/* The score chain applied to the raw q.k product `acc`. */\n");
  expr_put_fn(out, &hk,
              "float attn_score_bh(float acc, const attn_bh &c, int b, int h, int i, int j, "
              "const attn_params &p)", ret);
  /* Whether it reads memory per element (a bias[b, h, i, j]): fwd_sm90
   * runs the chain on whole tiles, tested elements or not, and then clamps
   * the positions of the elements past the edges into the tensors. (The
   * matcher's finding, which also chose the key tiles: match.c.) */
  sb_printf(out, "/* Whether attn_score_bh reads memory per element. */\n"
                 "constexpr bool attn_score_reads = %s;\n\n",
            s->score_reads_ij ? "true" : "false");
  sb_puts(out, "static __device__ __forceinline__ float attn_score(float acc, int b, int h, int i, "
               "int j, const attn_params &p) {\n"
               "  return attn_score_bh(acc, attn_bh_load(b, h, p), b, h, i, j, p);\n}\n\n");

  sb_printf(out, "/* Whether attn_score_bh is attn_score_inner_bh times attn_score_factor, and\n"
                 " * whether attn_score_inner_bh is the q.k product itself. */\n"
                 "constexpr bool attn_score_folded = %s;\n"
                 "constexpr bool attn_score_scaled_qk = %s;\n\n",
            folded ? "true" : "false", scaled ? "true" : "false");
  sb_puts(out, "/* The score chain under attn_score_factor (all of it where it does not fold), on\n"
               " * the raw q.k product `acc`, its q.k products read from attn_bh. */\n");
  if (same) {
    sb_free(&in.body);
    iret = "attn_score_bh(acc, c, b, h, i, j, p)";
  }
  expr_put_fn(out, &in,
              "float attn_score_inner_bh(float acc, const attn_bh &c, int b, int h, int i, int j, "
              "const attn_params &p)", iret);
  expr_put_fn(out, &fk, "float attn_score_factor(const attn_bh &c, int b, int h, const attn_params &p)",
              expr_factor_product(&fk, &outer));
  /* A softcap's inner chain, tanh(q.k times factors fixed per (b, h)):
   * the product is attn_bh's field (expr_qk_products), the same bits as
   * the chain's own, so fwd_sm90's ATTN_TANH_POLY can take the tanh apart
   * (on the FMA pipe where a tile's arguments allow it). */
  IrNode *arg = inner->op == IR_TANH ? inner->src[0] : NULL;
  const bool tanh_qk = arg && arg->type == DT_F32 && lin[arg->id];
  sb_printf(out,
            "/* Whether attn_score_inner_bh is tanh(acc * attn_tanh_qk_factor(c)) (a softcap). */\n"
            "constexpr bool attn_score_tanh_qk = %s;\n"
            "static __device__ __forceinline__ float attn_tanh_qk_factor(const attn_bh &c) {\n"
            "  (void)c;\n  return %s;\n}\n\n",
            tanh_qk ? "true" : "false", tanh_qk ? arena_printf(a, "c.k%d", arg->id) : "1.f");
}

/* The softmax's sink for (b, h), when it has one (hooks.cuh, ATTN_SINK). */
static void emit_sink(StrBuf *out, const KernelSpec *s, Arena *a) {
  IrNode *sink = ir_sink(s->g->softmax);
  if (!sink) return;
  ExprHook hk;
  expr_init(&hk, a, s->g, DOM_B | DOM_H);
  const char *ret = expr_value(&hk, sink);
  sb_puts(out, "/* The softmax's sink: one more logit in each row's denominator. */\n");
  expr_put_fn(out, &hk, "float attn_sink(int b, int h, const attn_params &p)", ret);
}

/* attn_keep_bh (the masks, their per-(b, h) values from attn_bh: ctx,
 * per_bh_nodes) and attn_keep (hooks.cuh). */
static void emit_keep(StrBuf *out, const KernelSpec *s, const bool *ctx, Arena *a) {
  ExprHook hk;
  expr_init(&hk, a, s->g, DOM_B | DOM_H | DOM_I | DOM_J);
  for (int id = 0; id < s->g->nnodes; id++)
    if (ctx[id]) hk.vars[id] = arena_printf(a, "c.v%d", id);
  StrBuf ret = {0};
  /* Separable conjuncts too are tested as written: their sides' reads
   * merge per row and per key of a tile (common.cuh's pure reads), which
   * measured faster than consulting the range tables per element
   * (bench/NOTES-sm90.md: document mask 1.32 -> 1.02 ms). */
  for (int m = 0; m < s->nmasks; m++) {
    if (m > 0 && s->masks[m].cond == s->masks[m - 1].cond) continue; /* == gave two */
    sb_printf(&ret, "%s%s", ret.len ? " && " : "", expr_as(&hk, s->masks[m].cond, DT_BOOL));
  }
  /* Whether it reads memory per element (a tensor load varying over i or
   * j among its locals): fwd_sm90 then evaluates it ahead of the S GEMM
   * to hide the reads' latency. Reads fixed per (b, h) (kv_len[b]) are in
   * attn_bh, read once per work tile. */
  bool reads = hk.mem_reads_ij > 0;
  sb_puts(out, "/* The top-level masks, element by element: true keeps the score. */\n");
  expr_put_fn(out, &hk,
              "bool attn_keep_bh(const attn_bh &c, int b, int h, int i, int j, "
              "const attn_params &p)",
              ret.len ? arena_strdup(a, ret.data) : "true");
  sb_puts(out, "static __device__ __forceinline__ bool attn_keep(int b, int h, int i, int j, "
               "const attn_params &p) {\n"
               "  return attn_keep_bh(attn_bh_load(b, h, p), b, h, i, j, p);\n}\n\n");
  sb_printf(out, "/* Whether attn_keep reads memory (templates may evaluate it early). */\n"
                 "constexpr bool attn_keep_reads = %s;\n\n", reads ? "true" : "false");
  sb_free(&ret);
}

/* C, the part of an affine term fixed for one (b, h), as a long long. */
static const char *term_constant(ExprHook *hk, const MaskTerm *t) {
  StrBuf e = {0};
  sb_printf(&e, "%lldLL", (long long)t->k);
  for (int n = 0; n < t->nterms; n++)
    sb_printf(&e, " + %lldLL * (long long)(%s)", (long long)t->coef[n],
              expr_as(hk, t->term[n], expr_kind(t->term[n]->type)));
  const char *r = arena_strdup(hk->a, e.data);
  sb_free(&e);
  return r;
}

/* A C condition under which the kernels' i32 evaluation of conjunct t's
 * sides cannot wrap, for i <= imax and j <= jmax (both >= 0): then the
 * exact affine form decides like attn_keep does. NULL when neither side
 * does arithmetic (a lone index, term or constant never wraps); "false"
 * when no bound can be had. */
static const char *wrap_guard(ExprHook *hk, const MaskTerm *t, const char *imax,
                              const char *jmax) {
  StrBuf e = {0};
  for (int side = 0; side < 2; side++) {
    if (!t->has_wrap[side]) continue;
    const MagForm *m = &t->wrap[side];
    bool small = !m->unbounded && m->mi <= (1 << 28) && m->mj <= (1 << 28) && m->mk <= (1LL << 40);
    for (int k = 0; small && k < m->n; k++) small = m->c[k] <= (1 << 28);
    if (!small) {
      sb_free(&e);
      return "false";
    }
    StrBuf sum = {0};
    if (m->mk) sb_printf(&sum, "%lldLL", (long long)m->mk);
    const int64_t cs[2] = {m->mi, m->mj};
    const char *vs[2] = {imax, jmax};
    for (int k = 0; k < 2; k++)
      if (cs[k] == 1) sb_printf(&sum, "%s(long long)%s", sum.len ? " + " : "", vs[k]);
      else if (cs[k]) sb_printf(&sum, "%s%lldLL * %s", sum.len ? " + " : "", (long long)cs[k], vs[k]);
    for (int k = 0; k < m->n; k++) {
      const char *v = expr_as(hk, m->t[k], DT_I32);
      if (m->c[k] == 1) sb_printf(&sum, "%sattn_labs(%s)", sum.len ? " + " : "", v);
      else sb_printf(&sum, "%s%lldLL * attn_labs(%s)", sum.len ? " + " : "", (long long)m->c[k], v);
    }
    sb_printf(&e, "%s%s <= 2147483647LL", e.len ? " && " : "", sum.len ? sum.data : "0LL");
    sb_free(&sum);
  }
  const char *r = e.len ? arena_strdup(hk->a, e.data) : NULL;
  sb_free(&e);
  return r;
}

/* Affine term t (ci*i + cj*j + C <= 0, C in a variable `c`) tightens the
 * key range [lo, hi) (variables of those names) for rows i in [i0, i1]:
 * the loosest bound over those rows. */
static void term_key_bound(StrBuf *code, const MaskTerm *t, const char *indent, const char *lo,
                           const char *hi) {
  const char *ie = t->ci > 0 ? "i0" : "i1";
  long long ci = (long long)t->ci, cj = (long long)t->cj;
  if (cj > 0)
    sb_printf(code, "%s%s = min(%s, attn_floordiv(-c - %lldLL * %s, %lldLL) + 1);\n", indent, hi, hi,
              ci, ie, cj);
  else if (cj < 0)
    sb_printf(code, "%s%s = max(%s, attn_ceildiv(c + %lldLL * %s, %lldLL));\n", indent, lo, lo, ci,
              ie, -cj);
  else
    sb_printf(code, "%sif (c + %lldLL * %s > 0) %s = %s; /* no row keeps any key */\n", indent, ci,
              ie, hi, lo);
}

/* Affine term t's extremes over the tile [i0, i1] x [j0, j1], as variables
 * hi and lo (from `c`): lo > 0 masks the whole tile, hi <= 0 keeps it all. */
static void term_corners(StrBuf *code, const MaskTerm *t, const char *indent) {
  long long ci = (long long)t->ci, cj = (long long)t->cj;
  sb_printf(code, "%sconst long long hi = c + %lldLL * %s + %lldLL * %s;\n", indent, ci,
            ci > 0 ? "i1" : "i0", cj, cj > 0 ? "j1" : "j0");
  sb_printf(code, "%sconst long long lo = c + %lldLL * %s + %lldLL * %s;\n", indent, ci,
            ci > 0 ? "i0" : "i1", cj, cj > 0 ? "j0" : "j1");
}

/* A disjunctive conjunct's key bounds: each alternative's range (the
 * intersection of its terms' bounds, as below for one term; a term whose
 * sides may wrap in i32 bounds nothing), and the hull of the non-empty
 * ones, intersected with [lo, hi). */
static void disj_kv_bounds(StrBuf *code, ExprHook *hk, const MaskTerm *t, Arena *a) {
  sb_printf(code, "  { /* %s:%d:%d, a disjunction: the hull of its alternatives */\n"
                  "    long long dlo = p.Skv, dhi = 0;\n",
            emit_source_name(a, t->cond->loc.src), t->cond->loc.line, t->cond->loc.col);
  for (int x = 0; x < t->nalt; x++) {
    sb_puts(code, "    {\n      long long alo = 0, ahi = p.Skv;\n");
    for (int y = 0; y < t->alt_n[x]; y++) {
      const MaskTerm *u = &t->alt[x][y];
      const char *guard = wrap_guard(hk, u, "i1", "p.Skv");
      sb_printf(code, "      %s{\n        const long long c = %s;\n",
                guard ? arena_printf(a, "if (%s) ", guard) : "", term_constant(hk, u));
      term_key_bound(code, u, "        ", "alo", "ahi");
      sb_puts(code, "      }\n");
    }
    sb_puts(code, "      if (alo < ahi) {\n        dlo = min(dlo, alo);\n        dhi = max(dhi, ahi);\n"
                  "      }\n    }\n");
  }
  sb_puts(code, "    if (dlo >= dhi) hi = lo; /* no alternative keeps a key */\n"
                "    else {\n      lo = max(lo, dlo);\n      hi = min(hi, dhi);\n    }\n  }\n");
}

/* A disjunctive conjunct's tile class: the best alternative's, each the
 * worst of its terms' (0 masked, 1 partly, 2 kept; a term whose sides may
 * wrap in i32 is 1). */
static void disj_tile_class(StrBuf *code, ExprHook *hk, const MaskTerm *t, Arena *a) {
  sb_printf(code, "  { /* %s:%d:%d, a disjunction: its best alternative */\n    int dc = 0;\n",
            emit_source_name(a, t->cond->loc.src), t->cond->loc.line, t->cond->loc.col);
  for (int x = 0; x < t->nalt; x++) {
    sb_puts(code, "    {\n      int ac = 2;\n");
    for (int y = 0; y < t->alt_n[x]; y++) {
      const MaskTerm *u = &t->alt[x][y];
      const char *guard = wrap_guard(hk, u, "i1", "j1");
      sb_printf(code, "      {\n        const long long c = %s;\n", term_constant(hk, u));
      term_corners(code, u, "        ");
      sb_printf(code, "        const int tc = lo > 0 ? 0 : hi > 0 ? 1 : 2;\n        ac = min(ac, %s);\n"
                      "      }\n", guard ? arena_printf(a, "(%s) ? tc : 1", guard) : "tc");
    }
    sb_puts(code, "      dc = max(dc, ac);\n    }\n");
  }
  sb_puts(code, "    if (dc == 0) return 0;\n    if (dc == 1) cls = 1;\n  }\n");
}

static void emit_kv_bounds(StrBuf *out, const KernelSpec *s, Arena *a) {
  ExprHook hk;
  expr_init(&hk, a, s->g, DOM_B | DOM_H);
  StrBuf code = {0};
  for (int m = 0; m < s->nmasks; m++) {
    const MaskTerm *t = &s->masks[m];
    if (t->nalt) {
      disj_kv_bounds(&code, &hk, t, a);
      continue;
    }
    if (!t->affine) continue;
    const char *c = term_constant(&hk, t);
    const char *guard = wrap_guard(&hk, t, "i1", "p.Skv");
    sb_printf(&code, "  %s{ /* %s:%d:%d */\n    const long long c = %s;\n",
              guard ? arena_printf(a, "if (%s) /* its sides cannot wrap in i32 */\n  ", guard) : "",
              emit_source_name(a, t->cond->loc.src),
              t->cond->loc.line, t->cond->loc.col, c);
    term_key_bound(&code, t, "    ", "lo", "hi");
    sb_puts(&code, "  }\n");
  }
  sb_puts(out, "/* Keys [j_lo, j_hi) any row in [i0, i1] may keep (conservative). */\n"
               "static __device__ __forceinline__ void attn_kv_bounds(int b, int h, int i0, int i1, "
               "const attn_params &p, int &j_lo, int &j_hi) {\n"
               "  long long lo = 0, hi = p.Skv;\n");
  if (hk.body.len) sb_puts(out, hk.body.data);
  if (code.len) sb_puts(out, code.data);
  sb_puts(out, "  if (hi < 0) hi = 0;\n  if (lo < 0) lo = 0;\n  if (lo > hi) lo = hi;\n"
               "  j_lo = (int)lo;\n  j_hi = (int)hi;\n}\n\n");
  sb_free(&code);
  sb_free(&hk.body);
}

static void emit_tile_class(StrBuf *out, const KernelSpec *s, Arena *a) {
  ExprHook hk;
  expr_init(&hk, a, s->g, DOM_B | DOM_H);
  StrBuf code = {0};
  bool all_affine = true; /* every conjunct affine, separable or disjunctive */
  for (int m = 0; m < s->nmasks; m++) {
    const MaskTerm *t = &s->masks[m];
    if (t->nalt) {
      disj_tile_class(&code, &hk, t, a);
      continue;
    }
    if (!t->affine) {
      all_affine = all_affine && t->sep;
      continue;
    }
    const char *c = term_constant(&hk, t);
    /* Where a side's i32 arithmetic could wrap, only attn_keep decides. */
    const char *guard = wrap_guard(&hk, t, "i1", "j1");
    if (guard) sb_printf(&code, "  if (!(%s)) cls = 1; /* a side may wrap in i32 */\n  else\n", guard);
    sb_printf(&code, "  { /* %s:%d:%d */\n    const long long c = %s;\n",
              emit_source_name(a, t->cond->loc.src),
              t->cond->loc.line, t->cond->loc.col, c);
    term_corners(&code, t, "    ");
    sb_puts(&code, "    if (lo > 0) return 0;\n    if (hi > 0) cls = 1;\n  }\n");
  }
  sb_puts(out, "/* 0: the tile [i0, i1] x [j0, j1] is wholly masked; 1: partly;\n"
               " * 2: wholly kept, so the mask test is skipped. */\n"
               "static __device__ __forceinline__ int attn_tile_class(int b, int h, int i0, int i1, "
               "int j0, int j1, const attn_params &p) {\n");
  sb_printf(out, "  int cls = %d;\n", all_affine ? 2 : 1);
  if (hk.body.len) sb_puts(out, hk.body.data);
  if (code.len) sb_puts(out, code.data);
  if (sep_any(s)) emit_sep_classes(out, s, a); /* after the cheap affine tests */
  sb_puts(out, "  return cls;\n}\n\n");
  sb_free(&code);
  sb_free(&hk.body);
}

static void emit_out(StrBuf *out, const KernelSpec *s, Arena *a) {
  ExprHook hk;
  expr_init(&hk, a, s->g, DOM_B | DOM_H | DOM_I);
  hk.pv_name = "o";
  const char *ret = expr_as(&hk, s->g->outputs[s->o_output].value, DT_F32);
  sb_puts(out, "/* Pointwise ops on the normalized output row element. */\n");
  expr_put_fn(out, &hk, "float attn_out(float o, int b, int h, int i, int d, const attn_params &p)",
           ret);
}

/* P's scale before P V, fixed per (b, h) (hooks.cuh, ATTN_P_SCALE). */
static void emit_p_scale(StrBuf *out, const KernelSpec *s, Arena *a) {
  ExprHook hk;
  expr_init(&hk, a, s->g, DOM_B | DOM_H);
  const char *ret = expr_as(&hk, s->p_scale, DT_F32);
  sb_puts(out, "/* P's scale before P V (the FP8 recipe's scale_s). */\n");
  expr_put_fn(out, &hk, "float attn_p_scale(int b, int h, const attn_params &p)", ret);
}

/* An amax output's operand for the normalized output row element `o`
 * (hooks.cuh, ATTN_AMAX). */
static void emit_amax(StrBuf *out, const KernelSpec *s, Arena *a) {
  ExprHook hk;
  expr_init(&hk, a, s->g, DOM_B | DOM_H | DOM_I);
  hk.pv_name = "o";
  const char *ret = expr_as(&hk, s->g->outputs[s->amax_output].value->src[0], DT_F32);
  sb_puts(out, "/* What the amax output reduces, for the normalized output row element. */\n");
  expr_put_fn(out, &hk,
              "float attn_amax_arg(float o, int b, int h, int i, int d, const attn_params &p)", ret);
}

/* dropout(p, rate, seed, offset): the hooks hooks.cuh declares, the Philox
 * words of one 16-element group (templates/philox.cuh's, drawn exactly as
 * the CPU reference draws them: docs/language.md has the layout, so the
 * masks are bit-identical) and the rate. Rate, seed and offset are the
 * same for every element (ir_build's check_uniform), so their expressions
 * need no index: the rate's hook takes none. */
static void emit_dropout(StrBuf *out, const KernelSpec *s, Arena *a) {
  ExprHook hk;
  expr_init(&hk, a, s->g, DOM_B | DOM_H | DOM_I | DOM_J);
  const IrNode *dn = s->dropout;
  const char *word[2];
  for (int k = 0; k < 2; k++) {
    IrNode *x = dn->src[2 + k];
    /* An i32 seed or offset sign-extends to 64 bits, as on the host. */
    word[k] = expr_kind(x->type) == DT_U64
                  ? expr_as(&hk, x, DT_U64)
                  : arena_printf(a, "(unsigned long long)(long long)(%s)", expr_as(&hk, x, DT_I32));
  }
  sb_puts(out, "/* Dropout: the four Philox words of the group at (i & ~9, j & ~9)\n"
               " * (templates/philox.cuh), the bytes the CPU reference draws. */\n"
               "static __device__ __forceinline__ void attn_dropout_words(int b, int h, int i, "
               "int j, const attn_params &p, unsigned w[4]) {\n");
  if (hk.body.len) sb_puts(out, hk.body.data);
  sb_printf(out,
            "  const unsigned long long seed = %s;\n"
            "  const unsigned long long offset = %s;\n"
            "  const unsigned long long row_base =\n"
            "      ((unsigned long long)b * (unsigned long long)p.H + (unsigned long long)h) *\n"
            "          (unsigned long long)p.Sq + (unsigned long long)(i & ~9);\n"
            "  attn_philox_dropout_words(seed, offset, row_base, j, w);\n"
            "}\n\n",
            word[0], word[1]);
  sb_free(&hk.body);
  expr_init(&hk, a, s->g, 0);
  const char *rate_e = expr_as(&hk, dn->src[1], DT_F32);
  sb_puts(out, "/* Dropout's rate (hooks.cuh makes the threshold in 256ths of it). */\n");
  expr_put_fn(out, &hk, "float attn_dropout_rate(const attn_params &p)", rate_e);
}

/* ------------------------------------------------------------ the unit */

static const char *dtype_macro(DType t) {
  return t == DT_BF16 ? "BF16" : t == DT_F16 ? "F16" : t == DT_E4M3 ? "E4M3"
         : t == DT_E5M2 ? "E5M2" : "F32";
}

/* The plan's step of a role in a pass (the entry names the unit defines). */
static const PlanStep *plan_step(const GraphPlan *gp, PlanPass pass, const char *role) {
  const PassPlan *p = &gp->pass[pass];
  for (int k = 0; k < p->nsteps; k++)
    if (!strcmp(p->steps[k].role, role)) return &p->steps[k];
  return NULL;
}

void macro_def(StrBuf *out, MacroSet *ms, Arena *a, const char *name, long long value) {
  if (ms->n == MACRO_SET_MAX) die("more than %d configuration macros", MACRO_SET_MAX);
  ms->name[ms->n++] = arena_strdup(a, name);
  sb_printf(out, "#define %s %lld\n", name, value);
}

void macro_undef_all(StrBuf *out, const MacroSet *ms) {
  for (int k = 0; k < ms->n; k++) sb_printf(out, "#undef %s\n", ms->name[k]);
  if (ms->n) sb_puts(out, "\n");
}

const EmbeddedText attn_embedded_texts[] = {
    {"abi/attn_abi.h", attn_abi_src},
    {"abi/attn_layout.h", attn_layout_src},
    {"templates/common.cuh", common_src},
    {"templates/ptx.cuh", ptx_src},
    {"templates/softmax.cuh", softmax_src},
    {"templates/wgmma.cuh", wgmma_src},
    {"templates/hooks.cuh", hooks_src},
    {"templates/fwd_sm80.cuh", fwd_sm80_src},
    {"templates/fwd_sm90.cuh", fwd_sm90_src},
    {"templates/decode.cuh", decode_src},
    {"templates/philox.cuh", philox_src},
    {"templates/bwd_sm80.cuh", bwd_sm80_src},
    {"templates/bwd_sm90.cuh", bwd_sm90_src}};
const int attn_nembedded_texts = (int)(sizeof attn_embedded_texts / sizeof attn_embedded_texts[0]);

void emit_template(StrBuf *out, const char *name, const char *text, bool key) {
  if (key)
    sb_printf(out, "/* \1[the text of %s] */\n", name); /* \1: no emitted text has it */
  else
    sb_puts(out, text);
}

void emit_entry(StrBuf *out, const char *entry, int threads, bool one_cta, bool tmaps,
                const char *body, ...) {
  sb_printf(out, "extern \"C\" __global__ void __launch_bounds__(%d%s) %s(const __grid_constant__ "
                 "attn_params p%s) {\n  attn_entry_wait();\n",
            threads, one_cta ? ", 1" : "", entry,
            tmaps ? ", const __grid_constant__ attn_tmaps tm" : "");
  va_list ap;
  va_start(ap, body);
  sb_vprintf(out, body, ap);
  va_end(ap);
  sb_puts(out, "}\n\n");
}

const char *emit_part_name(EmitPart part) {
  switch (part) {
  case EMIT_FORWARD: return "forward";
  case EMIT_BACKWARD: return "backward";
  case EMIT_PREFILL: return "prefill";
  case EMIT_DECODE: return "decode";
  default: return "";
  }
}

bool emit_step_is_decode(const char *role) {
  return !strcmp(role, "decode") || !strcmp(role, "merge");
}

static void emit_graph(StrBuf *out, const GraphCompile *gc, EmitPart part, bool key, Arena *a) {
  const IrGraph *g = gc->g;
  const KernelSpec *s = gc->fwd;
  const FwdConfig *c = &gc->cfg;
  const PlanStep *fwd = plan_step(gc->plan, PLAN_FORWARD, "forward");
  const PlanStep *prep = plan_step(gc->plan, PLAN_FORWARD, "prep");
  /* The forward pass's main kernels (forward, amax_init, prep), its decode
   * kernels, the backward's: which of them this part holds. */
  const bool fwd_part = part == EMIT_ALL || part == EMIT_FORWARD || part == EMIT_PREFILL;
  const bool dec_part = part == EMIT_ALL || part == EMIT_FORWARD || part == EMIT_DECODE;
  const bool bwd_part = (part == EMIT_ALL || part == EMIT_BACKWARD) && gc->bwd;
  const bool has_dec = plan_step(gc->plan, PLAN_FORWARD, "decode") != NULL;
  if (!fwd_part && !(dec_part && has_dec) && !bwd_part) return;
  int o_slot = g->outputs[s->o_output].tensor;
  int lse_slot = s->lse_output >= 0 ? g->outputs[s->lse_output].tensor : -1;

  sb_printf(out, "/* ---- graph %s (%s:%d:%d): forward, template %s ---- */\n", g->name,
            emit_source_name(a, g->loc.src), g->loc.line, g->loc.col, c->name);
  MacroSet ms = {.n = 0};
  macro_def(out, &ms, a, "ATTN_D_QK", s->d_qk);
  macro_def(out, &ms, a, "ATTN_D_V", s->d_v);
  macro_def(out, &ms, a, arena_printf(a, "ATTN_IN_%s", dtype_macro(s->mma_type)), 1);
  macro_def(out, &ms, a, arena_printf(a, "ATTN_OUT_%s", dtype_macro(s->out_type)), 1);
  if (dtype_is_fp8(s->in_type)) /* an FP8 q, converted on load */
    macro_def(out, &ms, a, arena_printf(a, "ATTN_Q_%s", dtype_macro(s->in_type)), 1);
  if (dtype_is_fp8(s->kv_type)) /* FP8 k and v (an FP8 KV cache, or with an FP8 q) */
    macro_def(out, &ms, a, arena_printf(a, "ATTN_KV_%s", dtype_macro(s->kv_type)), 1);
  if (c->kind == TMPL_FWD_SM90) {
    macro_def(out, &ms, a, "ATTN_BM", c->bm);
    macro_def(out, &ms, a, "ATTN_BN", c->bn);
    macro_def(out, &ms, a, "ATTN_STAGES", c->stages);
    if (c->persistent) macro_def(out, &ms, a, "ATTN_PERSISTENT", 1);
    if (c->fp8_pv) macro_def(out, &ms, a, "ATTN_FP8_PV", 1);
    if (c->kv8_early) macro_def(out, &ms, a, "ATTN_KV8_EARLY", 1);
    if (c->vt8) macro_def(out, &ms, a, "ATTN_FP8_VT8", 1);
    if (c->rescale_late) macro_def(out, &ms, a, "ATTN_RESCALE_LATE", 1);
    if (c->pv_overlap) macro_def(out, &ms, a, "ATTN_PV_OVERLAP", 1);
    if (c->q_early_tiles > 0) macro_def(out, &ms, a, "ATTN_Q_EARLY", c->q_early_tiles);
    if (c->skip_idle) macro_def(out, &ms, a, "ATTN_SKIP_IDLE", 1);
    if (c->tanh_poly) macro_def(out, &ms, a, "ATTN_TANH_POLY", 1);
    if (c->partial_first) macro_def(out, &ms, a, "ATTN_PARTIAL_FIRST", 1);
    if (c->ring_per_tile) macro_def(out, &ms, a, "ATTN_RING_PER_TILE", 1);
    if (c->q_before_v) macro_def(out, &ms, a, "ATTN_Q_BEFORE_V", 1);
    if (c->pv_wait_next) macro_def(out, &ms, a, "ATTN_PV_WAIT_NEXT", 1);
    if (c->o_smem) macro_def(out, &ms, a, "ATTN_O_SMEM", c->o_smem);
    if (c->exp2_fma > 0) macro_def(out, &ms, a, "ATTN_EXP2_FMA", c->exp2_fma);
    if (c->kv_copy) { /* the forward reads 16-bit copies of the FP8 k and v (plan.c, widen_kv) */
      macro_def(out, &ms, a, "ATTN_KV_COPY", 1);
      macro_def(out, &ms, a, "ATTN_TK16", c->copy_k);
      macro_def(out, &ms, a, "ATTN_TV16", c->copy_v);
      macro_def(out, &ms, a, "ATTN_WIDEN_ROWS", FWD_WIDEN_ROWS);
      macro_def(out, &ms, a, "ATTN_WIDEN_THREADS", FWD_WIDEN_THREADS);
    }
  } else if (c->kind == TMPL_FWD_SM80) {
    macro_def(out, &ms, a, "ATTN_BM", c->bm);
    macro_def(out, &ms, a, "ATTN_BN", c->bn);
    macro_def(out, &ms, a, "ATTN_WARPS", c->warps);
  }
  macro_def(out, &ms, a, "ATTN_TQ", g->q);
  macro_def(out, &ms, a, "ATTN_TK", g->k);
  macro_def(out, &ms, a, "ATTN_TV", g->v);
  macro_def(out, &ms, a, "ATTN_TO", o_slot);
  macro_def(out, &ms, a, "ATTN_TLSE", lse_slot);
  if (s->dropout) macro_def(out, &ms, a, "ATTN_DROPOUT", 1);
  if (s->p_scale) macro_def(out, &ms, a, "ATTN_P_SCALE", 1);
  if (s->p_round != DT_NONE) /* P rounded before P V (the matcher takes FP8 only): 1 e4m3, 2 e5m2 */
    macro_def(out, &ms, a, "ATTN_P_ROUND", s->p_round == DT_E4M3 ? 1 : 2);
  if (s->amax_output >= 0) /* the amax output's slot */
    macro_def(out, &ms, a, "ATTN_AMAX", g->outputs[s->amax_output].tensor);
  if (ir_sink(g->softmax)) macro_def(out, &ms, a, "ATTN_SINK", 1);
  if (s->packed) { /* packed sequences: the offsets' slots of q and of k/v (a paged k and v
                      have none: each sequence's keys are its pages) */
    macro_def(out, &ms, a, "ATTN_PACKED_Q", g->tensors[g->q].seq_offsets);
    if (!s->paged) macro_def(out, &ms, a, "ATTN_PACKED_KV", g->tensors[g->k].seq_offsets);
  }
  const PlanStep *dec = plan_step(gc->plan, PLAN_FORWARD, "decode");
  const PlanStep *merge = plan_step(gc->plan, PLAN_FORWARD, "merge");
  if (dec) {
    macro_def(out, &ms, a, "ATTN_DEC_BN", c->decode.bn);
    macro_def(out, &ms, a, "ATTN_DEC_STAGES", c->decode.stages);
    macro_def(out, &ms, a, "ATTN_DEC_TPO", c->decode.partial_o);
    macro_def(out, &ms, a, "ATTN_DEC_TPL", c->decode.partial_lse);
  }
  if (s->paged) { /* paged caches: the table's slot, and which dim is the page's rows */
    macro_def(out, &ms, a, "ATTN_KV_TABLE", g->tensors[g->k].page_table);
    macro_def(out, &ms, a, "ATTN_KV_PAGE_DIM", ir_page_dim(&g->tensors[g->k]));
  }
  sb_printf(out, "namespace graph_%s {\n\n", g->name);
  emit_template(out, "templates/hooks.cuh", hooks_src, key);
  sb_puts(out, "\n");
  const bool *per_bh = per_bh_nodes(s, a); /* attn_bh's fields, for both */
  emit_score(out, s, per_bh, a);
  emit_sink(out, s, a);
  if (prep) /* the separable conjuncts' ranges, read by attn_tile_class */
    emit_sep_helpers(out, s, a);
  emit_keep(out, s, per_bh, a);
  emit_kv_bounds(out, s, a);
  emit_tile_class(out, s, a);
  emit_out(out, s, a);
  if (s->amax_output >= 0) emit_amax(out, s, a);
  if (s->p_scale) emit_p_scale(out, s, a);
  if (s->dropout) emit_dropout(out, s, a);
  if (fwd_part && c->kind == TMPL_FWD_SM90)
    emit_template(out, "templates/fwd_sm90.cuh", fwd_sm90_src, key);
  else if (fwd_part)
    emit_template(out, "templates/fwd_sm80.cuh", fwd_sm80_src, key);
  if (dec_part && dec) emit_template(out, "templates/decode.cuh", decode_src, key);
  if (bwd_part) emit_bwd_body(out, gc->bwd, &ms, key, a);
  sb_printf(out, "\n} /* namespace graph_%s */\n\n", g->name);
  if (!fwd_part || !fwd) {
    /* decode only (an FP8 KV cache): the decode entries below */
  } else if (c->kind == TMPL_FWD_SM90)
    /* One CTA per SM by design (the ", 1" gives setmaxnreg its cap). */
    emit_entry(out, fwd->entry, fwd->threads, true, true,
               "  graph_%s::attn_fwd_sm90(p, tm);\n", g->name);
  else
    emit_entry(out, fwd->entry, fwd->threads, false, false,
               "  graph_%s::attn_fwd_sm80(p);\n", g->name);
  const PlanStep *widen = plan_step(gc->plan, PLAN_FORWARD, "widen_kv");
  if (fwd_part && widen) /* the kv_copy variant's copies of k and v, before the forward */
    emit_entry(out, widen->entry, widen->threads, false, false,
               "  graph_%s::attn_fwd90_widen_kv(p);\n", g->name);
  const PlanStep *amax0 = plan_step(gc->plan, PLAN_FORWARD, "amax_init");
  if (fwd_part && amax0) /* zeroes the amax output before the forward adds into it */
    emit_entry(out, amax0->entry, amax0->threads, false, false,
               "  if (threadIdx.x == 0) *(unsigned *)p.t[%d].ptr = 0u;\n",
               g->outputs[s->amax_output].tensor);
  if (dec_part && dec && merge) {
    emit_entry(out, dec->entry, dec->threads, false, false,
               "  graph_%s::attn_decode(p);\n", g->name);
    emit_entry(out, merge->entry, merge->threads, false, false,
               "  graph_%s::attn_decode_merge(p);\n", g->name);
  }
  if (bwd_part) emit_bwd_entries(out, gc->bwd, a);
  if (prep && part != EMIT_DECODE) emit_sep_entry(out, s, prep->entry); /* both passes launch it */
  macro_undef_all(out, &ms);
}

char *emit_unit(const Compiled *c, const CompileOptions *o, Arena *a) {
  return emit_unit_part(c, o, EMIT_ALL, a);
}

static char *emit_unit_as(const Compiled *c, const CompileOptions *o, EmitPart part, bool key,
                          Arena *a);

char *emit_unit_part(const Compiled *c, const CompileOptions *o, EmitPart part, Arena *a) {
  return emit_unit_as(c, o, part, false, a);
}

char *emit_unit_key(const Compiled *c, const CompileOptions *o, EmitPart part, Arena *a) {
  return emit_unit_as(c, o, part, true, a);
}

static char *emit_unit_as(const Compiled *c, const CompileOptions *o, EmitPart part, bool key,
                          Arena *a) {
  const IrModule *m = c->ir;
  /* "sm_90a": arch-specific instructions (wgmma, setmaxnreg) exist. */
  const char *arch = o->arch;
  bool sm90a = !strcmp(arch, "sm_90a");
  StrBuf src = {0};
  if (key) sb_printf(&src, "/* \1[templates %s] */\n", attn_templates_id);
  sb_printf(&src, "/* Generated by attnc %s from %s for %s%s. Do not edit. */\n\n", ATTNC_VERSION,
            emit_source_name(a, m->src), arch,
            part == EMIT_FORWARD ? " (the forward pass)"
            : part == EMIT_BACKWARD ? " (the backward pass)"
            : part == EMIT_PREFILL ? " (the forward pass without its decode kernels)"
            : part == EMIT_DECODE ? " (the decode kernels)" : "");
  emit_template(&src, "abi/attn_abi.h", attn_abi_src, key);
  sb_puts(&src, "\n");
  emit_template(&src, "abi/attn_layout.h", attn_layout_src, key);
  sb_puts(&src, "\n");
  emit_template(&src, "templates/common.cuh", common_src, key);
  sb_puts(&src, "\n");
  emit_template(&src, "templates/ptx.cuh", ptx_src, key);
  sb_puts(&src, "\n");
  emit_template(&src, "templates/softmax.cuh", softmax_src, key); /* the forwards' online softmax */
  sb_puts(&src, "\n");
  /* The warpgroup-MMA wrappers of the sm90 templates (fwd_sm90, bwd_sm90;
   * the decode kernels use none). */
  if (sm90a && part != EMIT_DECODE) {
    emit_template(&src, "templates/wgmma.cuh", wgmma_src, key);
    sb_puts(&src, "\n");
  }
  /* Dropout's generator, once, when some graph's p @ v reads a dropout. */
  for (int k = 0; k < m->ngraphs; k++) {
    const IrGraph *g = m->graphs[k];
    if (g->pv && ir_p_chain(g).dropout) {
      emit_template(&src, "templates/philox.cuh", philox_src, key);
      sb_puts(&src, "\n");
      break;
    }
  }
  for (int k = 0; k < c->ngraphs; k++) emit_graph(&src, &c->graphs[k], part, key, a);
  char *text = arena_strdup(a, src.data);
  sb_free(&src);
  return text;
}
