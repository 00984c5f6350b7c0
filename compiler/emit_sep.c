/*
 * emit_sep.c: tile classes for separable mask conjuncts.
 *
 * A conjunct `A op B` whose A varies over the query row i (not the key j)
 * and B over j (not i), such as doc[b, i] == doc[b, j], is not affine, but
 * a whole tile can still be decided from the ranges [min, max] of A over
 * the tile's rows and of B over its keys (match_sep_rules). Those ranges
 * come from a small "prep" kernel emitted beside the forward: it evaluates
 * every side once per row or key and stores, per sequence of each (b) or
 * (b, h), a sparse table of ranges over SEP_CELL-element cells, so any run
 * of cells (a template's tile, whatever its size) is covered by two
 * entries of one level: attn_tile_class reads four entries per tile, not
 * one per cell. The runtime allocates the table (p.mask_ranges) and
 * launches the prep kernel before the forward and before the backward.
 *
 * A side that is the index itself (i, j) needs no table: its range is the
 * tile's. Floats: a NaN anywhere in a cell makes the cell's range NaN, and
 * every interval rule is a plain comparison, so such tiles are partial.
 */
#include <string.h>

#include "attnc.h"

/* ------------------------------------------------------------- layout */

static long long sep_cells(long long n) { return n > 0 ? (n + SEP_CELL - 1) / SEP_CELL : 0; }

static long long sep_levels(long long cells) {
  int l = 0;
  while (cells > 0) l++, cells >>= 1;
  return l;
}

size_t sep_workspace_bytes(const int cell_bytes[SEP_NREGIONS], long long B, long long H,
                           long long Sq, long long Skv, size_t off[SEP_NREGIONS]) {
  size_t o = 0;
  for (int r = 0; r < SEP_NREGIONS; r++) {
    bool is_j = r >= SEP_REGION_JB, per_h = r == SEP_REGION_IBH || r == SEP_REGION_JBH;
    long long cells = sep_cells(is_j ? Skv : Sq);
    if (off) off[r] = o;
    o += (size_t)(B * (per_h ? H : 1) * sep_levels(cells) * cells) * (size_t)cell_bytes[r];
    o = (o + 15) & ~(size_t)15;
  }
  return o;
}

bool sep_any(const KernelSpec *s) {
  for (int m = 0; m < s->nmasks; m++)
    if (s->masks[m].sep) return true;
  return false;
}

/* The region a side's table lives in, or -1 for an index side. */
static int side_region(const MaskTerm *t, int side) {
  const IrNode *n = t->side[side];
  if (n->op == IR_INDEX) return -1;
  return (side ? SEP_REGION_JB : SEP_REGION_IB) + ((n->dom & DOM_H) ? 1 : 0);
}

/* The C type a range of kind k is stored in: bools as int. */
static const char *range_ctype(DType k) {
  return k == DT_F32 ? "float" : k == DT_U64 ? "unsigned long long" : "int";
}

static int range_bytes(DType k) { return k == DT_U64 ? 16 : 8; }

static const char *const region_name[SEP_NREGIONS] = {"ib", "ibh", "jb", "jbh"};

/* ------------------------------------------------------------ helpers */

/* min and max for the C types the graph's ranges use (unused overloads
 * would draw NVRTC warnings). */
static void emit_minmax(StrBuf *out, const KernelSpec *s) {
  bool used[3] = {false, false, false}; /* int, unsigned long long, float */
  for (int m = 0; m < s->nmasks; m++)
    if (s->masks[m].sep)
      used[s->masks[m].sep_kind == DT_F32 ? 2 : s->masks[m].sep_kind == DT_U64 ? 1 : 0] = true;
  sb_puts(out, "/* Separable mask conjuncts (compiler/emit_sep.c): ranges of each side\n"
               " * over SEP_CELL = 16-element cells, as sparse tables in p.mask_ranges,\n"
               " * written by the graph's prep kernel before the forward or backward. */\n");
  for (int k = 0; k < 2; k++)
    if (used[k]) {
      const char *t = k ? "unsigned long long" : "int";
      sb_printf(out, "static __device__ __forceinline__ %s attn_sep_min(%s x, %s y) { return x < y ? x : y; }\n"
                     "static __device__ __forceinline__ %s attn_sep_max(%s x, %s y) { return x > y ? x : y; }\n",
                t, t, t, t, t, t);
    }
  if (used[2])
    sb_puts(out, "/* A NaN on either side makes the result NaN (x + y): NaN bounds fail\n"
                 " * every interval rule, so the tile is partial. */\n"
                 "static __device__ __forceinline__ float attn_sep_min(float x, float y) {\n"
                 "  return x != x || y != y ? x + y : fminf(x, y);\n}\n"
                 "static __device__ __forceinline__ float attn_sep_max(float x, float y) {\n"
                 "  return x != x || y != y ? x + y : fmaxf(x, y);\n}\n");
  sb_puts(out, "static __device__ __forceinline__ long long attn_sep_cells(int n) {\n"
               "  return n > 0 ? ((long long)n + 15) / 16 : 0;\n}\n"
               "/* Levels of a sparse table over `cells` cells: floor(log2(cells)) + 1. */\n"
               "static __device__ __forceinline__ int attn_sep_levels(long long cells) {\n"
               "  return cells > 0 ? 64 - __clzll(cells) : 0;\n}\n\n");
}

/* Where each region starts: sep_workspace_bytes's layout, with this
 * graph's cell sizes as constants. */
static void emit_offsets(StrBuf *out, const int cb[SEP_NREGIONS]) {
  sb_puts(out, "/* Where each region starts in p.mask_ranges (sep_workspace_bytes). */\n"
               "static __device__ __forceinline__ void attn_sep_offsets(const attn_params &p, "
               "long long off[4]) {\n"
               "  const long long ci = attn_sep_cells(p.Sq), cj = attn_sep_cells(p.Skv);\n"
               "  const long long li = attn_sep_levels(ci), lj = attn_sep_levels(cj);\n"
               "  long long o = 0;\n");
  for (int r = 0; r < SEP_NREGIONS; r++) {
    bool is_j = r >= SEP_REGION_JB, per_h = r == SEP_REGION_IBH || r == SEP_REGION_JBH;
    sb_printf(out, "  off[%d] = o;\n", r);
    if (r == SEP_NREGIONS - 1) break;
    if (cb[r])
      sb_printf(out, "  o = (o + (long long)p.B%s * %s * %dLL + 15) & ~15LL;\n",
                per_h ? " * p.H" : "", is_j ? "lj * cj" : "li * ci", cb[r]);
  }
  sb_puts(out, "}\n\n");
}

/* One region's struct, join, and the function that evaluates its sides
 * at one row (i) or key (j). */
static void emit_region(StrBuf *out, const KernelSpec *s, Arena *a, int r, int bytes) {
  const char *nm = region_name[r];
  const bool is_j = r >= SEP_REGION_JB;
  StrBuf fields = {0}, join = {0}, set = {0};
  ExprHook hk;
  expr_init(&hk, a, s->g, DOM_B | DOM_H | (is_j ? DOM_J : DOM_I));
  /* u64 ranges first, so no member needs padding. */
  for (int pass = 0; pass < 2; pass++) {
    int k = 0;
    for (int m = 0; m < s->nmasks; m++) {
      const MaskTerm *t = &s->masks[m];
      if (!t->sep) continue;
      int id = k++;
      if (side_region(t, is_j) != r || (t->sep_kind == DT_U64) != (pass == 0)) continue;
      const char *ct = range_ctype(t->sep_kind);
      const char *v = expr_as(&hk, t->side[is_j], t->sep_kind);
      if (t->sep_kind == DT_BOOL) v = arena_printf(a, "(int)(%s)", v);
      sb_printf(&fields, "  %s lo%d, hi%d;\n", ct, id, id);
      sb_printf(&join, "  r.lo%d = attn_sep_min(r.lo%d, x.lo%d);\n  r.hi%d = attn_sep_max(r.hi%d, "
                       "x.hi%d);\n", id, id, id, id, id, id);
      sb_printf(&set, "  r.lo%d = r.hi%d = %s;\n", id, id, v);
    }
  }
  sb_printf(out, "struct alignas(%d) attn_sep_%s {\n%s};\n", bytes % 16 == 0 ? 16 : 8, nm,
            fields.data);
  sb_printf(out, "static __device__ __forceinline__ void attn_sep_join(attn_sep_%s &r, "
                 "const attn_sep_%s &x) {\n%s}\n", nm, nm, join.data);
  sb_printf(out, "/* The %s sides%s at %s %s. */\n", is_j ? "j" : "i",
            (r == SEP_REGION_IBH || r == SEP_REGION_JBH) ? " that vary over h" : "",
            is_j ? "key" : "row", is_j ? "j" : "i");
  sb_printf(out, "static __device__ __forceinline__ void attn_sep_at(attn_sep_%s &r, int b, int h, "
                 "int %s, const attn_params &p) {\n", nm, is_j ? "j" : "i");
  if (hk.body.len) sb_puts(out, hk.body.data);
  sb_printf(out, "%s}\n\n", set.data);
  sb_free(&hk.body);
  sb_free(&fields);
  sb_free(&join);
  sb_free(&set);
}

static const char sep_tables[] =
    "/* The range of a region's sides over elements [x0, x1] (inclusive) of\n"
    " * row `row`: two entries of one level cover cells x0/16 .. x1/16. */\n"
    "template <typename T>\n"
    "static __device__ __forceinline__ T attn_sep_range(const attn_params &p, long long off,\n"
    "                                                   long long row, int n, int x0, int x1) {\n"
    "  const long long cells = attn_sep_cells(n);\n"
    "  const T *t = (const T *)((const char *)p.mask_ranges + off) +\n"
    "               row * attn_sep_levels(cells) * cells;\n"
    "  /* 32-bit from here (cells <= 2^27, levels <= 28), which keeps fewer\n"
    "   * registers live in the templates' tile loops. */\n"
    "  const unsigned c0 = (unsigned)x0 >> 4, c1 = (unsigned)x1 >> 4;\n"
    "  const unsigned l = 31 - __clz(c1 - c0 + 1);\n"
    "  const unsigned at = l * (unsigned)cells;\n"
    "  T r = t[at + c0];\n"
    "  attn_sep_join(r, t[at + c1 - (1u << l) + 1]);\n"
    "  return r;\n}\n\n"
    "/* One CTA writes row `row` of a region: level 0 from the n elements,\n"
    " * then level l from level l - 1 (entries c and c + 2^(l-1)). */\n"
    "template <typename T>\n"
    "static __device__ void attn_sep_build(const attn_params &p, long long off, long long row,\n"
    "                                      int b, int h, int n) {\n"
    "  const long long cells = attn_sep_cells(n);\n"
    "  const int lv = attn_sep_levels(cells);\n"
    "  T *t = (T *)((char *)p.mask_ranges + off) + row * lv * cells;\n"
    "  for (long long c = threadIdx.x; c < cells; c += blockDim.x) {\n"
    "    const int x0 = (int)(c * 16);\n"
    "    T r;\n"
    "    attn_sep_at(r, b, h, x0, p);\n"
    "#pragma unroll\n"
    "    for (int k = 1; k < 16; ++k) /* unrolled: the 16 loads overlap */\n"
    "      if (x0 + k < n) {\n"
    "        T y;\n"
    "        attn_sep_at(y, b, h, x0 + k, p);\n"
    "        attn_sep_join(r, y);\n"
    "      }\n"
    "    t[c] = r;\n"
    "  }\n"
    "  for (int l = 1; l < lv; ++l) {\n"
    "    __syncthreads(); /* level l - 1 is written */\n"
    "    const long long half = 1LL << (l - 1);\n"
    "    const T *src = t + (l - 1) * cells;\n"
    "    T *dst = t + l * cells;\n"
    "    for (long long c = threadIdx.x; c + 2 * half <= cells; c += blockDim.x) {\n"
    "      T r = src[c];\n"
    "      attn_sep_join(r, src[c + half]);\n"
    "      dst[c] = r;\n"
    "    }\n"
    "  }\n}\n\n";

void sep_cell_bytes(const KernelSpec *s, int cb[SEP_NREGIONS]) {
  memset(cb, 0, sizeof(int) * SEP_NREGIONS);
  for (int m = 0; m < s->nmasks; m++) {
    const MaskTerm *t = &s->masks[m];
    if (!t->sep) continue;
    for (int side = 0; side < 2; side++) {
      int r = side_region(t, side);
      if (r >= 0) cb[r] += range_bytes(t->sep_kind);
    }
  }
}

void emit_sep_helpers(StrBuf *out, const KernelSpec *s, Arena *a) {
  int cb[SEP_NREGIONS];
  sep_cell_bytes(s, cb);
  emit_minmax(out, s);
  emit_offsets(out, cb);
  for (int r = 0; r < SEP_NREGIONS; r++)
    if (cb[r]) emit_region(out, s, a, r, cb[r]);
  sb_puts(out, sep_tables);
  /* The prep kernel's body: CTA (side, h, b). */
  sb_puts(out, "/* The prep kernel: CTA (x, y, z) = (0 for the i sides or 1 for the j sides,\n"
               " * h, b) writes row b (y = 0) or b * H + y of its regions. */\n"
               "static __device__ __forceinline__ void attn_sep_prep(const attn_params &p) {\n"
               "  long long off[4];\n  attn_sep_offsets(p, off);\n"
               "  const int b = blockIdx.z, h = blockIdx.y;\n");
  for (int side = 0; side < 2; side++) {
    sb_printf(out, "  if (blockIdx.x == %d) {\n", side);
    const char *n = side ? "p.Skv" : "p.Sq";
    int rb = side ? SEP_REGION_JB : SEP_REGION_IB;
    if (cb[rb])
      sb_printf(out, "    if (h == 0)\n      attn_sep_build<attn_sep_%s>(p, off[%d], b, b, 0, %s);\n",
                region_name[rb], rb, n);
    if (cb[rb + 1])
      sb_printf(out, "    attn_sep_build<attn_sep_%s>(p, off[%d], (long long)b * p.H + h, b, h, %s);\n",
                region_name[rb + 1], rb + 1, n);
    sb_puts(out, "  }\n");
  }
  sb_puts(out, "}\n\n");
}

/* lo/hi of one side for the rules: a region member, or the index itself. */
static void side_bounds(const MaskTerm *t, int id, int side, const char *prefix, const char *ix0,
                        const char *ix1, Arena *a, const char **lo, const char **hi) {
  int r = side_region(t, side);
  const char *ct = range_ctype(t->sep_kind);
  if (r < 0) {
    *lo = arena_printf(a, "(%s)%s", ct, ix0);
    *hi = arena_printf(a, "(%s)%s", ct, ix1);
  } else {
    *lo = arena_printf(a, "%s%s.lo%d", prefix, region_name[r], id);
    *hi = arena_printf(a, "%s%s.hi%d", prefix, region_name[r], id);
  }
}

static const char *region_row(int r) {
  return (r == SEP_REGION_IBH || r == SEP_REGION_JBH) ? "(long long)b * p.H + h" : "b";
}

void emit_sep_classes(StrBuf *out, const KernelSpec *s, Arena *a) {
  int cb[SEP_NREGIONS];
  sep_cell_bytes(s, cb);
  sb_puts(out, "  { /* separable conjuncts: from the ranges of their sides over the tile */\n"
               "    long long off[4];\n    attn_sep_offsets(p, off);\n");
  for (int r = 0; r < SEP_NREGIONS; r++) {
    if (!cb[r]) continue;
    bool is_j = r >= SEP_REGION_JB;
    sb_printf(out, "    const attn_sep_%s r_%s = attn_sep_range<attn_sep_%s>(p, off[%d], %s, %s, "
                   "%s, %s);\n", region_name[r], region_name[r], region_name[r], r, region_row(r),
              is_j ? "p.Skv" : "p.Sq", is_j ? "j0" : "i0", is_j ? "j1" : "i1");
  }
  int k = 0;
  for (int m = 0; m < s->nmasks; m++) {
    const MaskTerm *t = &s->masks[m];
    if (!t->sep) continue;
    int id = k++;
    const char *ct = range_ctype(t->sep_kind), *lo[2], *hi[2];
    side_bounds(t, id, 0, "r_", "i0", "i1", a, &lo[0], &hi[0]);
    side_bounds(t, id, 1, "r_", "j0", "j1", a, &lo[1], &hi[1]);
    const char *none, *all;
    match_sep_rules(t->sep_op, &none, &all);
    sb_printf(out, "    { /* %s:%d:%d: i side %s j side */\n",
              emit_source_name(a, t->cond->loc.src),
              t->cond->loc.line, t->cond->loc.col, ir_op_name(t->sep_op));
    sb_printf(out, "      const %s alo = %s, ahi = %s, blo = %s, bhi = %s;\n", ct, lo[0], hi[0],
              lo[1], hi[1]);
    sb_printf(out, "      if (%s) return 0;\n      if (!(%s)) cls = 1;\n    }\n", none, all);
  }
  sb_puts(out, "  }\n");
}

void emit_sep_entry(StrBuf *out, const KernelSpec *s, const char *entry) {
  emit_entry(out, entry, SEP_PREP_THREADS, false, false, "  graph_%s::attn_sep_prep(p);\n",
             s->g->name);
}
