/*
 * test_sep_mask.c: separable mask conjuncts (an i side compared with a j
 * side, such as doc[b, i] == doc[b, j]): which conditions the matcher
 * takes and how it normalises them (match_separable), the interval rules
 * that classify a tile from the sides' ranges (match_sep_class, the same
 * text the device code is emitted from) against brute force, the
 * workspace layout the runtime allocates (sep_workspace_bytes), and that
 * graphs without such a conjunct get no prep kernel.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "ref.h"
#include "unit_build.h"

static IrModule *sm_module(const char *text, Arena *a) { return unit_build(a, "<test>", text); }

#define HEAD                                                                                     \
  "attention g {\n  input q : bf16[B, H, Sq, 64];\n  input k : bf16[B, H, Skv, 64];\n"           \
  "  input v : bf16[B, H, Skv, 64];\n  input dq : i32[B, Sq];\n  input dk : i32[B, Skv];\n"     \
  "  input fq : f32[B, H, Sq];\n  input fk : f32[B, Skv];\n"
#define TAIL "  o = softmax(s) @ v;\n  output o : bf16[B, H, Sq, 64];\n}\n"

/* The conjuncts the matcher made of `mask(s, COND)`. */
static KernelSpec *sm_spec(const char *cond, Arena *a) {
  char text[1024];
  snprintf(text, sizeof text, HEAD "  s = mask((q @ k^T) * 0.125, %s);\n" TAIL, cond);
  IrModule *m = sm_module(text, a);
  Diag d = {0};
  KernelSpec *s = match_graph(m->graphs[0], 90, a, &d);
  diag_free(&d);
  cr_assert(s);
  return s;
}

Test(sep_mask, document_ids) {
  Arena *a = arena_new();
  KernelSpec *s = sm_spec("dq[b, i] == dk[b, j] && j <= i", a);
  cr_assert_eq(s->nmasks, 2);
  cr_assert(s->masks[0].sep && !s->masks[0].affine);
  cr_assert_eq(s->masks[0].sep_op, IR_EQ);
  cr_assert_eq(s->masks[0].sep_kind, DT_I32);
  cr_assert_eq(s->masks[0].side[0]->dom, (unsigned)(DOM_B | DOM_I));
  cr_assert_eq(s->masks[0].side[1]->dom, (unsigned)(DOM_B | DOM_J));
  cr_assert(s->masks[1].affine && !s->masks[1].sep);
  cr_assert(sep_any(s));
  arena_free(a);
}

Test(sep_mask, j_side_first_mirrors_the_operator) {
  Arena *a = arena_new();
  static const char *const conds[] = {"dk[b, j] < dq[b, i]", "dk[b, j] <= dq[b, i]",
                                      "dk[b, j] > dq[b, i]", "dk[b, j] >= dq[b, i]",
                                      "dk[b, j] != dq[b, i]"};
  static const IrOp want[] = {IR_GT, IR_GE, IR_LT, IR_LE, IR_NE};
  for (int c = 0; c < 5; c++) {
    KernelSpec *s = sm_spec(conds[c], a);
    cr_assert_eq(s->nmasks, 1);
    cr_assert(s->masks[0].sep, "%s", conds[c]);
    cr_assert_eq(s->masks[0].sep_op, want[c], "%s", conds[c]);
    cr_assert(s->masks[0].side[0]->dom & DOM_I, "%s: side 0 is the i side", conds[c]);
  }
  arena_free(a);
}

Test(sep_mask, kinds_and_refusals) {
  Arena *a = arena_new();
  /* An f32 side per head against an i32 one: compared in f32. */
  KernelSpec *s = sm_spec("fq[b, h, i] * 2.0 <= dk[b, j] + 1", a);
  cr_assert(s->masks[0].sep);
  cr_assert_eq(s->masks[0].sep_kind, DT_F32);
  /* The index itself is a side. */
  s = sm_spec("dq[b, i] > j", a);
  cr_assert(s->masks[0].sep);
  cr_assert_eq(s->masks[0].side[1]->op, IR_INDEX);
  /* Not separable: a side over both i and j, or over neither; && splits
   * first, || does not. */
  static const char *const no[] = {"dq[b, i] + j == dk[b, j]", "dq[b, i] == 3",
                                   "dq[b, i] == dk[b, j] || j <= i"};
  for (int c = 0; c < 3; c++) {
    s = sm_spec(no[c], a);
    cr_assert_eq(s->nmasks, 1);
    cr_assert(!s->masks[0].sep, "%s", no[c]);
    cr_assert(!sep_any(s));
  }
  arena_free(a);
}

/* Every op, on small random multisets A (a tile's rows) and B (its keys),
 * some with NaN: class 0 means no pair satisfies `a op b`, class 2 that
 * every pair does; with a single value on each side the class is exact. */
static bool sm_holds(IrOp op, double x, double y) {
  switch (op) {
  case IR_LT: return x < y;
  case IR_LE: return x <= y;
  case IR_GT: return x > y;
  case IR_GE: return x >= y;
  case IR_EQ: return x == y;
  default: return x != y;
  }
}

/* A cell's range as the prep kernel stores it: NaN anywhere makes both
 * bounds NaN. */
static void sm_range(const double *v, int n, double *lo, double *hi) {
  *lo = *hi = v[0];
  for (int k = 0; k < n; k++) {
    *lo = fmin(*lo, v[k]);
    *hi = fmax(*hi, v[k]);
  }
  for (int k = 0; k < n; k++)
    if (isnan(v[k])) *lo = *hi = NAN;
}

Test(sep_mask, interval_rules_against_brute_force) {
  static const IrOp ops[] = {IR_LT, IR_LE, IR_GT, IR_GE, IR_EQ, IR_NE};
  RefRng rng = ref_rng(99, 1);
  int seen[3] = {0, 0, 0};
  for (int trial = 0; trial < 20000; trial++) {
    double A[4], B[4];
    int na = 1 + (int)(ref_rng_next(&rng) % 4), nb = 1 + (int)(ref_rng_next(&rng) % 4);
    for (int k = 0; k < na; k++)
      A[k] = ref_rng_uniform(&rng) < 0.03 ? NAN : (double)(ref_rng_next(&rng) % 4);
    for (int k = 0; k < nb; k++)
      B[k] = ref_rng_uniform(&rng) < 0.03 ? NAN : (double)(ref_rng_next(&rng) % 4);
    double alo, ahi, blo, bhi;
    sm_range(A, na, &alo, &ahi);
    sm_range(B, nb, &blo, &bhi);
    for (int o = 0; o < 6; o++) {
      int cls = match_sep_class(ops[o], alo, ahi, blo, bhi);
      int sat = 0;
      for (int x = 0; x < na; x++)
        for (int y = 0; y < nb; y++) sat += sm_holds(ops[o], A[x], B[y]);
      seen[cls]++;
      if (cls == 0) cr_assert_eq(sat, 0, "op %s: class 0 but a pair holds", ir_op_name(ops[o]));
      if (cls == 2)
        cr_assert_eq(sat, na * nb, "op %s: class 2 but a pair fails", ir_op_name(ops[o]));
      bool nan = isnan(alo) || isnan(blo);
      if (nan) cr_assert_eq(cls, 1, "op %s: a NaN range must be partial", ir_op_name(ops[o]));
      if (!nan && na == 1 && nb == 1)
        cr_assert_eq(cls, sat ? 2 : 0, "op %s on single values must be exact", ir_op_name(ops[o]));
    }
  }
  cr_assert(seen[0] && seen[1] && seen[2]);
}

Test(sep_mask, rules_text_is_plain_comparisons) {
  static const IrOp ops[] = {IR_LT, IR_LE, IR_GT, IR_GE, IR_EQ, IR_NE};
  for (int o = 0; o < 6; o++) {
    const char *none, *all;
    match_sep_rules(ops[o], &none, &all);
    cr_assert(!strchr(none, '!') && !strchr(all, '!'), "a negation would turn NaN into a class");
  }
  const char *none, *all;
  match_sep_rules(IR_EQ, &none, &all);
  cr_assert_str_eq(none, "ahi < blo || bhi < alo");
}

/* Sides computed from the indices alone (chunks) are separable too: the
 * tiles are classified from the tables, elements by the condition. */
Test(sep_mask, index_sides_classified_per_tile) {
  Arena *a = arena_new();
  static const char chunk[] = HEAD "  s = mask((q @ k^T) * 0.125, i / 64 == j / 64);\n" TAIL;
  IrModule *m = sm_module(chunk, a);
  Diag d = {0};
  Compiled er = unit_compile(a, m, "sm_80", STAGE_EMIT);
  diag_free(&d);
  cr_assert_str_eq(unit_step(&er.plans[0], PLAN_FORWARD, "prep")->entry, "attn_g_prep");
  cr_assert(strstr(er.source, "attn_sep_range<attn_sep_ib>"));
  cr_assert_null(strstr(er.source, "attn_sep_keep0"));
  arena_free(a);
}

Test(sep_mask, workspace_layout) {
  /* i32 document ids: 8-byte cells in the i and j regions per batch. */
  const int cb[SEP_NREGIONS] = {8, 0, 8, 0};
  size_t off[SEP_NREGIONS];
  /* S = 4096: 256 cells, 9 levels; B = 4. */
  size_t n = sep_workspace_bytes(cb, 4, 16, 4096, 4096, off);
  cr_assert_eq(off[0], 0u);
  cr_assert_eq(off[1], (size_t)4 * 9 * 256 * 8);
  cr_assert_eq(off[2], off[1]);
  cr_assert_eq(off[3], off[2] + (size_t)4 * 9 * 256 * 8);
  cr_assert_eq(n, off[3]);
  /* 17 rows (2 cells, 2 levels), per head, 16-byte aligned regions. */
  const int cb2[SEP_NREGIONS] = {0, 8, 16, 0};
  n = sep_workspace_bytes(cb2, 1, 3, 17, 1, off);
  cr_assert_eq(off[1], 0u);
  cr_assert_eq(off[2], 96u); /* 3 * 2 * 2 * 8 = 96 */
  cr_assert_eq(off[3], 96u + 16u);
  cr_assert_eq(n, off[3]);
  const int none[SEP_NREGIONS] = {0, 0, 0, 0};
  cr_assert_eq(sep_workspace_bytes(none, 8, 8, 1000, 1000, NULL), 0u);
}

Test(sep_mask, prep_kernel_only_where_needed) {
  Arena *a = arena_new();
  static const char doc[] = HEAD "  s = mask((q @ k^T) * 0.125, dq[b, i] == dk[b, j]);\n" TAIL;
  static const char causal[] = HEAD "  s = mask((q @ k^T) * 0.125, j <= i && dq[b, i] > 0);\n" TAIL;
  const char *texts[2] = {doc, causal};
  for (int t = 0; t < 2; t++) {
    IrModule *m = sm_module(texts[t], a);
    Compiled er = unit_compile(a, m, "sm_90a", STAGE_EMIT);
    const GraphPlan *k = &er.plans[0];
    const PlanStep *prep = unit_step(k, PLAN_FORWARD, "prep");
    if (t == 0) {
      cr_assert_str_eq(prep->entry, "attn_g_prep");
      cr_assert_eq(k->sep_cells[SEP_REGION_IB], 8);
      cr_assert_eq(k->sep_cells[SEP_REGION_JB], 8);
      cr_assert_eq(k->sep_cells[SEP_REGION_IBH] + k->sep_cells[SEP_REGION_JBH], 0);
      cr_assert(strstr(er.source, "void __launch_bounds__(256) attn_g_prep("));
      cr_assert(strstr(er.source, "if (ahi < blo || bhi < alo) return 0;"));
      /* attn_keep tests the condition as written (the ids' reads merge
       * per row and key); only attn_tile_class reads the tables. */
      cr_assert_null(strstr(er.source, "attn_sep_keep"));
      cr_assert(strstr(er.source, "attn_sep_range<attn_sep_jb>"));
    } else {
      cr_assert_null(prep);
      cr_assert_null(strstr(er.source, "attn_sep"));
    }
  }
  arena_free(a);
}

/* Disjunctions of affine conjunctions (match_disjunction): each
 * alternative's affine terms, == as two; an alternative that is not affine
 * leaves the whole conjunct to attn_keep. The hooks emitted from them are
 * checked on the host (tests/host/sep_host_check.sh, cases 3 and 4). */
Test(sep_mask, disjunctions_of_affine_conjunctions) {
  Arena *a = arena_new();
  KernelSpec *s = sm_spec("j <= i && (j < 4 || (i - j < 64 && j >= 2) || j == i + 7)", a);
  cr_assert_eq(s->nmasks, 2);
  cr_assert(s->masks[0].affine);
  const MaskTerm *t = &s->masks[1];
  cr_assert(!t->affine && !t->sep);
  cr_assert_eq(t->nalt, 3);
  cr_assert_eq(t->alt_n[0], 1);
  cr_assert_eq(t->alt_n[1], 2);
  cr_assert_eq(t->alt_n[2], 2); /* j == i + 7: j <= i + 7 and j >= i + 7 */
  cr_assert(t->alt[1][0].affine && t->alt[1][1].affine);
  cr_assert_eq(t->alt[0][0].cj, 1);
  /* Not affine in one alternative: no disjunctive form. */
  s = sm_spec("j < 4 || dq[b, i] == dk[b, j]", a);
  cr_assert_eq(s->nmasks, 1);
  cr_assert_eq(s->masks[0].nalt, 0);
  cr_assert(!s->masks[0].affine && !s->masks[0].sep);
  arena_free(a);
}
