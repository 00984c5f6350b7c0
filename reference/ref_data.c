/*
 * ref_data.c: what surrounds the CPU reference. Deterministic random
 * inputs, rounding to storage types bit-for-bit like CUDA's conversions
 * (a GPU test fills device buffers with these bits and hands the very same
 * values to ref_forward), output summaries and comparisons.
 */
#include "ref.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- random */

RefRng ref_rng(uint64_t seed, uint64_t stream) {
  RefRng r = {seed ^ (stream * UINT64_C(0xD1B54A32D192ED03))};
  ref_rng_next(&r); /* so that nearby seeds diverge at once */
  return r;
}

uint64_t ref_rng_next(RefRng *r) {
  uint64_t z = (r->state += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

double ref_rng_uniform(RefRng *r) {
  return (double)(ref_rng_next(r) >> 11) * 0x1p-53;
}

double ref_rng_normal(RefRng *r) {
  double u1 = 1.0 - ref_rng_uniform(r); /* (0, 1]: log stays finite */
  double u2 = ref_rng_uniform(r);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---------------------------------------------------------- arguments */

int64_t ref_numel(const RefTensor *t) {
  int64_t n = 1;
  for (int k = 0; k < t->ndims; k++)
    n *= t->shape[k];
  return n;
}

static int ref_data_fail(StrBuf *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int ref_data_fail(StrBuf *err, const char *fmt, ...) {
  if (err->len > 0)
    sb_putc(err, '\n');
  va_list ap;
  va_start(ap, fmt);
  sb_vprintf(err, fmt, ap);
  va_end(ap);
  return -1;
}

/* Calls fn(name, value) for each "name=value" of a comma-separated spec,
 * with surrounding blanks trimmed. */
typedef int (*RefSpecFn)(void *ctx, const char *name, const char *value,
                         StrBuf *err);

static int ref_each_binding(const char *spec, void *ctx, RefSpecFn fn,
                            StrBuf *err) {
  if (!spec)
    return 0;
  char *copy = strdup(spec);
  if (!copy)
    return ref_data_fail(err, "out of memory");
  int rc = 0;
  char *save = NULL;
  for (char *item = strtok_r(copy, ",", &save); item && rc == 0;
       item = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(item, '=');
    char *name = item, *value = eq ? eq + 1 : NULL;
    if (eq)
      *eq = 0;
    while (isspace((unsigned char)*name))
      name++;
    for (char *e = name + strlen(name); e > name && isspace((unsigned char)e[-1]);)
      *--e = 0;
    if (!*name && !value)
      continue; /* "B=2,,H=4" or a trailing comma */
    if (!value || !*name) {
      rc = ref_data_fail(err, "expected NAME=VALUE, got '%s%s%s'", name,
                         eq ? "=" : "", value ? value : "");
      break;
    }
    while (isspace((unsigned char)*value))
      value++;
    for (char *e = value + strlen(value); e > value && isspace((unsigned char)e[-1]);)
      *--e = 0;
    rc = fn(ctx, name, value, err);
  }
  free(copy);
  return rc;
}

/* The roles of q's and k's dim symbols, which choose default sizes. */
typedef struct RefDimSpec {
  const IrGraph *g;
  int64_t *val;  /* per dim symbol, 0 = not given */
  int64_t s_all; /* "S=N" when no symbol is named S */
  int batch, heads, kv_heads, seq_q, seq_kv; /* symbol indices or -1 */
  int pages, page_size, max_pages; /* a paged k and v's, or -1 */
} RefDimSpec;

static int ref_parse_size(const char *name, const char *value, int64_t *out,
                          StrBuf *err) {
  char *end;
  errno = 0;
  long long v = strtoll(value, &end, 10);
  if (errno || end == value || *end || v < 1 || v > (1LL << 31))
    return ref_data_fail(err, "dimension %s: '%s' is not a size from 1 to "
                         "2^31", name, value);
  *out = v;
  return 0;
}

static void ref_list_dims(StrBuf *sb, const IrGraph *g) {
  if (g->ndims == 0) {
    sb_puts(sb, "this graph has no dimension symbols");
    return;
  }
  sb_puts(sb, "this graph's dimensions are ");
  for (int d = 0; d < g->ndims; d++)
    sb_printf(sb, "%s%s", d ? ", " : "", g->dims[d].name);
}

static int ref_dim_binding(void *ctx, const char *name, const char *value,
                           StrBuf *err) {
  RefDimSpec *s = ctx;
  const IrGraph *g = s->g;
  for (int d = 0; d < g->ndims; d++)
    if (strcmp(g->dims[d].name, name) == 0) {
      if (s->val[d])
        return ref_data_fail(err, "dimension %s is given twice", name);
      return ref_parse_size(name, value, &s->val[d], err);
    }
  if (strcmp(name, "S") == 0 && (s->seq_q >= 0 || s->seq_kv >= 0)) {
    if (s->s_all)
      return ref_data_fail(err, "dimension S is given twice");
    return ref_parse_size(name, value, &s->s_all, err);
  }
  ref_data_fail(err, "unknown dimension '%s' in the shape; ", name);
  ref_list_dims(err, g);
  return -1;
}

static int ref_sym_at(const IrGraph *g, int tensor, int k) {
  if (tensor < 0 || tensor >= g->ntensors || g->tensors[tensor].ndims != 4)
    return -1;
  return g->tensors[tensor].dim_sym[k];
}

/* Fills every dim without a value from its role's default. */
static void ref_default_dims(RefDimSpec *s) {
  const IrGraph *g = s->g;
  if (s->s_all) {
    if (s->seq_q >= 0 && !s->val[s->seq_q])
      s->val[s->seq_q] = s->s_all;
    if (s->seq_kv >= 0 && !s->val[s->seq_kv])
      s->val[s->seq_kv] = s->s_all;
  }
  if (s->batch >= 0 && !s->val[s->batch])
    s->val[s->batch] = s->g->q >= 0 && ir_packed(s->g) ? 5 : 2;
  if (s->heads >= 0 && !s->val[s->heads])
    s->val[s->heads] = 4;
  if (s->kv_heads >= 0 && !s->val[s->kv_heads])
    s->val[s->kv_heads] = s->heads >= 0 ? s->val[s->heads] : 4;
  if (s->seq_q >= 0 && !s->val[s->seq_q])
    s->val[s->seq_q] = 128;
  if (s->seq_kv >= 0 && !s->val[s->seq_kv])
    s->val[s->seq_kv] = 128;
  /* Paged k and v: pages of 16 keys, enough a sequence for S (or 128)
   * keys, and a few more pages than the sequences use. */
  if (s->page_size >= 0 && !s->val[s->page_size])
    s->val[s->page_size] = 16;
  if (s->max_pages >= 0 && !s->val[s->max_pages]) {
    const int64_t keys = s->s_all ? s->s_all : 128, ps = s->page_size >= 0 ? s->val[s->page_size] : 16;
    s->val[s->max_pages] = (keys + ps - 1) / ps;
  }
  if (s->pages >= 0 && !s->val[s->pages])
    s->val[s->pages] = (s->batch >= 0 ? s->val[s->batch] : 2) *
                           (s->max_pages >= 0 ? s->val[s->max_pages] : 8) + 3;
  for (int d = 0; d < g->ndims; d++)
    if (!s->val[d])
      s->val[d] = 64;
}

static int ref_init_scalars(RefArgs *args, StrBuf *err) {
  const IrGraph *g = args->g;
  if (args->scalars)
    return 0;
  args->scalars = calloc((size_t)g->nscalars + 1, sizeof *args->scalars);
  args->scalar_unset = calloc((size_t)g->nscalars + 1, sizeof(bool));
  if (!args->scalars || !args->scalar_unset)
    return ref_data_fail(err, "out of memory");
  for (int k = 0; k < g->nscalars; k++) {
    const IrScalar *s = &g->scalars[k];
    args->scalar_unset[k] = !s->has_default;
    if (s->has_default)
      args->scalars[k] =
          dtype_is_float(s->type) ? s->fdefault : (double)s->idefault;
  }
  return 0;
}

/* Random values for one input tensor, from its own stream. */
static void ref_fill_tensor(RefTensor *t, DType type, int64_t int_max,
                            RefRng *r) {
  int64_t n = ref_numel(t);
  for (int64_t e = 0; e < n; e++) {
    if (dtype_is_float(type))
      t->data[e] = dtype_round(type, ref_rng_normal(r));
    else if (type == DT_BOOL)
      t->data[e] = (double)(ref_rng_next(r) >> 63);
    else
      t->data[e] = (double)(ref_rng_next(r) % (uint64_t)(int_max + 1));
  }
}

/* A page table: the pages in a shuffled order, dealt to the sequences in
 * turn (each sequence's pages distinct while the cache has enough). */
static void ref_fill_page_table(RefTensor *t, int64_t pages, RefRng *r) {
  const int64_t n = ref_numel(t);
  for (int64_t e = 0; e < n; e++)
    t->data[e] = pages > 0 ? (double)(e % pages) : 0.0;
  for (int64_t e = n - 1; e > 0; e--) { /* Fisher-Yates */
    const int64_t x = (int64_t)(ref_rng_next(r) % (uint64_t)(e + 1));
    const double y = t->data[e];
    t->data[e] = t->data[x];
    t->data[x] = y;
  }
}

/* Packed sequences' offsets: B + 1 entries from 0 to `total`, the cuts
 * between uniform and sorted (so lengths vary, and may be 0). */
static void ref_fill_offsets(RefTensor *t, int64_t total, RefRng *r) {
  const int64_t n = ref_numel(t);
  for (int64_t e = 0; e < n; e++)
    t->data[e] = e == 0 ? 0.0 : e == n - 1 ? (double)total
                                            : (double)(ref_rng_next(r) % (uint64_t)(total + 1));
  for (int64_t e = 1; e < n; e++) /* insertion sort: a few entries */
    for (int64_t x = e; x > 0 && t->data[x - 1] > t->data[x]; x--) {
      const double y = t->data[x];
      t->data[x] = t->data[x - 1];
      t->data[x - 1] = y;
    }
}

int ref_make_inputs(RefArgs *args, const char *shape_spec, uint64_t seed,
                    StrBuf *err) {
  const IrGraph *g = args->g;
  if (!g)
    return ref_data_fail(err, "no graph given");
  const bool paged = g->k >= 0 && g->k < g->ntensors && g->tensors[g->k].paged;
  RefDimSpec s = {.g = g,
                  .batch = ref_sym_at(g, g->q, 0),
                  .heads = ref_sym_at(g, g->q, 1),
                  .kv_heads = ref_sym_at(g, g->k, paged ? ir_kv_dim(g, g->k, 1).dim : 1),
                  .seq_q = ref_sym_at(g, g->q, 2),
                  .seq_kv = paged ? -1 : ref_sym_at(g, g->k, 2),
                  .pages = paged ? ref_sym_at(g, g->k, 0) : -1,
                  .page_size = paged ? ref_sym_at(g, g->k, ir_page_dim(&g->tensors[g->k])) : -1,
                  .max_pages = -1};
  if (paged && g->tensors[g->tensors[g->k].page_table].dim_sym[1] >= 0)
    s.max_pages = g->tensors[g->tensors[g->k].page_table].dim_sym[1];
  const bool packed = g->q >= 0 && g->q < g->ntensors && ir_packed(g);
  if (packed) { /* [tokens, heads, D]; B + 1 offsets (4 sequences by default) */
    const IrTensor *q = &g->tensors[g->q], *k = &g->tensors[g->k];
    s.heads = q->dim_sym[1];
    s.seq_q = q->dim_sym[0];
    s.batch = g->tensors[q->seq_offsets].dim_sym[0];
    if (!paged) { /* (a paged k keeps its pages' dims; the table's rows are B: give both) */
      s.kv_heads = k->dim_sym[1];
      s.seq_kv = k->dim_sym[0];
    }
  }
  s.val = calloc((size_t)g->ndims + 1, sizeof *s.val);
  args->tensors = calloc((size_t)g->ntensors + 1, sizeof *args->tensors);
  int rc = -1;
  if (!s.val || !args->tensors) {
    ref_data_fail(err, "out of memory");
    goto done;
  }
  if (ref_each_binding(shape_spec, &s, ref_dim_binding, err) ||
      ref_init_scalars(args, err))
    goto done;
  if (packed && paged) { /* the offsets' B + 1 and the table's B rows agree unless both given */
    const int ob = g->tensors[g->tensors[g->q].seq_offsets].dim_sym[0];
    const int tb = g->tensors[g->tensors[g->k].page_table].dim_sym[0];
    if (ob >= 0 && tb >= 0 && ob != tb) {
      if (!s.val[ob] && !s.val[tb]) s.val[ob] = 5;
      if (!s.val[tb] && s.val[ob] > 1) s.val[tb] = s.val[ob] - 1;
      if (!s.val[ob] && s.val[tb]) s.val[ob] = s.val[tb] + 1;
    }
  }
  ref_default_dims(&s);
  int64_t int_max = 128;
  if (s.seq_q >= 0 || s.seq_kv >= 0)
    int_max = s.val[s.seq_q >= 0 ? s.seq_q : s.seq_kv];
  if (s.seq_kv >= 0 && s.val[s.seq_kv] > int_max)
    int_max = s.val[s.seq_kv];
  if (s.page_size >= 0 && s.max_pages >= 0 && s.val[s.page_size] * s.val[s.max_pages] > int_max)
    int_max = s.val[s.page_size] * s.val[s.max_pages]; /* the logical keys */
  for (int ti = 0; ti < g->ntensors; ti++) {
    const IrTensor *it = &g->tensors[ti];
    RefTensor *t = &args->tensors[ti];
    if (it->is_output)
      continue;
    t->ndims = it->ndims;
    int64_t n = 1;
    for (int k = 0; k < it->ndims; k++) {
      t->shape[k] = it->dim_sym[k] >= 0 ? s.val[it->dim_sym[k]] : it->dim_val[k];
      if (t->shape[k] < 1 || t->shape[k] > (INT64_C(1) << 28) / n) {
        ref_data_fail(err, "tensor '%s' would be too large for the CPU "
                      "reference", it->name);
        goto done;
      }
      n *= t->shape[k];
    }
    t->data = malloc((size_t)n * sizeof(double));
    if (!t->data) {
      ref_data_fail(err, "out of memory for tensor '%s'", it->name);
      goto done;
    }
    RefRng r = ref_rng(seed, (uint64_t)ti);
    if (packed && (ti == g->tensors[g->q].seq_offsets ||
                   (!paged && ti == g->tensors[g->k].seq_offsets))) {
      /* Over q's tokens, or k's for k's own offsets (q's when they share
       * them: self-attention). */
      const IrTensor *x = &g->tensors[ti == g->tensors[g->q].seq_offsets ? g->q : g->k];
      ref_fill_offsets(t, x->dim_sym[0] >= 0 ? s.val[x->dim_sym[0]] : x->dim_val[0], &r);
    } else if (paged && ti == g->tensors[g->k].page_table)
      ref_fill_page_table(t, g->tensors[g->k].dim_sym[0] >= 0 ? s.val[g->tensors[g->k].dim_sym[0]]
                                                               : g->tensors[g->k].dim_val[0], &r);
    else
      ref_fill_tensor(t, it->type, int_max, &r);
  }
  rc = 0;
done:
  free(s.val);
  return rc;
}

static int ref_parse_scalar(const IrScalar *s, const char *value, double *out,
                            StrBuf *err) {
  char *end;
  errno = 0;
  if (s->type == DT_BOOL) {
    if (strcmp(value, "true") == 0 || strcmp(value, "1") == 0)
      *out = 1;
    else if (strcmp(value, "false") == 0 || strcmp(value, "0") == 0)
      *out = 0;
    else
      return ref_data_fail(err, "scalar '%s' is a bool: '%s' is not true or "
                           "false", s->name, value);
    return 0;
  }
  if (dtype_is_float(s->type)) {
    *out = strtod(value, &end);
    if (end == value || *end)
      return ref_data_fail(err, "scalar '%s': '%s' is not a number", s->name,
                           value);
    return 0;
  }
  if (s->type == DT_U64) {
    unsigned long long v = strtoull(value, &end, 0);
    if (errno || end == value || *end || value[0] == '-')
      return ref_data_fail(err, "scalar '%s': '%s' is not a u64", s->name,
                           value);
    *out = (double)v;
    return 0;
  }
  long long v = strtoll(value, &end, 0);
  if (errno || end == value || *end || v < INT32_MIN || v > INT32_MAX)
    return ref_data_fail(err, "scalar '%s': '%s' is not an i32", s->name,
                         value);
  *out = (double)v;
  return 0;
}

static int ref_scalar_binding(void *ctx, const char *name, const char *value,
                              StrBuf *err) {
  RefArgs *args = ctx;
  const IrGraph *g = args->g;
  for (int k = 0; k < g->nscalars; k++)
    if (strcmp(g->scalars[k].name, name) == 0) {
      if (ref_parse_scalar(&g->scalars[k], value, &args->scalars[k], err))
        return -1;
      args->scalar_unset[k] = false;
      return 0;
    }
  ref_data_fail(err, "unknown scalar '%s'; ", name);
  if (g->nscalars == 0)
    sb_puts(err, "this graph has no scalars");
  for (int k = 0; k < g->nscalars; k++)
    sb_printf(err, "%s%s", k ? ", " : "this graph's scalars are ",
              g->scalars[k].name);
  return -1;
}

int ref_set_scalars(RefArgs *args, const char *spec, StrBuf *err) {
  if (!args->g)
    return ref_data_fail(err, "no graph given");
  if (ref_init_scalars(args, err))
    return -1;
  if (!args->scalar_unset) { /* scalars filled by hand */
    args->scalar_unset = calloc((size_t)args->g->nscalars + 1, sizeof(bool));
    if (!args->scalar_unset)
      return ref_data_fail(err, "out of memory");
  }
  return ref_each_binding(spec, args, ref_scalar_binding, err);
}

void ref_args_free(RefArgs *args) {
  if (args->tensors && args->g)
    for (int k = 0; k < args->g->ntensors; k++)
      free(args->tensors[k].data);
  free(args->tensors);
  free(args->scalars);
  free(args->scalar_unset);
  args->tensors = NULL;
  args->scalars = NULL;
  args->scalar_unset = NULL;
}

/* ------------------------------------------------ summaries, compares */

void ref_summarize(StrBuf *out, const RefArgs *args) {
  const IrGraph *g = args->g;
  for (int k = 0; k < g->noutputs; k++) {
    const IrTensor *it = &g->tensors[g->outputs[k].tensor];
    const RefTensor *t = args->tensors ? &args->tensors[g->outputs[k].tensor]
                                       : NULL;
    sb_printf(out, "%s: %s[", g->outputs[k].name, dtype_name(it->type));
    for (int d = 0; t && d < t->ndims; d++)
      sb_printf(out, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    sb_puts(out, "]");
    if (!t || !t->data) {
      sb_puts(out, " not computed\n");
      continue;
    }
    int64_t n = ref_numel(t), nfin = 0, ninf = 0, npinf = 0, nnan = 0;
    double lo = INFINITY, hi = -INFINITY, sum = 0, sq = 0;
    for (int64_t e = 0; e < n; e++) {
      double x = t->data[e];
      if (isnan(x)) {
        nnan++;
      } else if (isinf(x)) {
        if (x < 0)
          ninf++;
        else
          npinf++;
      } else {
        nfin++;
        lo = fmin(lo, x);
        hi = fmax(hi, x);
        sum += x;
        sq += x * x;
      }
    }
    if (nfin)
      sb_printf(out, " min %.6g max %.6g mean %.6g rms %.6g", lo, hi,
                sum / (double)nfin, sqrt(sq / (double)nfin));
    else
      sb_puts(out, " no finite values");
    sb_printf(out, " -inf %lld +inf %lld nan %lld\n", (long long)ninf,
              (long long)npinf, (long long)nnan);
  }
}

RefCompare ref_compare(const double *got, const double *want, size_t n) {
  RefCompare r = {.first_nonfinite_mismatch = SIZE_MAX};
  double diff2 = 0, want2 = 0;
  for (size_t e = 0; e < n; e++) {
    double a = got[e], b = want[e];
    if (!isfinite(a) || !isfinite(b)) {
      bool same = (isnan(a) && isnan(b)) || a == b;
      if (!same && r.nonfinite_mismatch++ == 0)
        r.first_nonfinite_mismatch = e;
      continue;
    }
    double d = fabs(a - b);
    if (d > r.max_abs) {
      r.max_abs = d;
      r.max_abs_at = e;
    }
    diff2 += d * d;
    want2 += b * b;
  }
  if (want2 > 0)
    r.rel_l2 = sqrt(diff2) / sqrt(want2);
  else
    r.rel_l2 = diff2 > 0 ? INFINITY : 0;
  return r;
}
