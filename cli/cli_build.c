/*
 * cli_build.c: `attnc build FILE.attn --arch sm_80,sm_90a -o DIR
 *                            [--name NAME] [-MF DEPFILE] [-j N] [-v]`
 *
 * Compiles ahead of time. Writes
 *   DIR/NAME.h  one typed entry point per graph: NAME_args (the tensors
 *               and scalars, each documented with its .attn declaration)
 *               and NAME_launch(ctx, args, stream); for a graph with a GPU
 *               backward also NAME_grads and NAME_launch_backward(ctx,
 *               args, grads, stream)
 *   DIR/NAME.c  the attn_embedded module: the .attn text, a cubin per
 *               target, PTX for the highest target (without its a/f
 *               suffix, so newer GPUs run it through the driver's JIT),
 *               and the launch functions, built on the public API alone
 *   DIR/NAME.d  (or DEPFILE) a make rule: both files depend on FILE.attn
 * A program built from them needs libattn and the driver, not NVRTC.
 *
 * The output depends only on the input text, the targets, attnc and NVRTC:
 * no dates, no absolute paths (the source is named by its base name), the
 * targets in a canonical order; unchanged input gives the same bytes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "rt.h"

#define BUILD_MAX_ARCHS 16

/* One compiled image: cubin for a target, or PTX for a base target. */
typedef struct BuildImage {
  char arch[16];
  bool is_ptx;
  unsigned char *data; /* PTX: with its NUL */
  size_t size;
  Compiled cm; /* its kernels' plans: cm.plans */
} BuildImage;

/* ------------------------------------------------------------- helpers */

/* "dir/sdpa.attn" -> "sdpa.attn" */
static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

/* "my-graph.attn" -> "my_graph": a C identifier. */
static char *ident_from_file(Arena *a, const char *path) {
  const char *b = base_name(path);
  const char *dot = strrchr(b, '.');
  size_t n = dot && dot != b ? (size_t)(dot - b) : strlen(b);
  char *s = arena_alloc(a, n + 2);
  size_t k = 0;
  if (n == 0 || (b[0] >= '0' && b[0] <= '9')) s[k++] = '_';
  for (size_t i = 0; i < n; i++) {
    char c = b[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '_';
    s[k++] = ok ? c : '_';
  }
  s[k] = '\0';
  return s;
}

/* "sm_90a" -> "sm_90": PTX of the base target runs on 9.0 and newer. */
static void base_arch(const char *arch, char out[16]) {
  snprintf(out, 16, "%s", arch);
  size_t n = strlen(out);
  if (n && (out[n - 1] == 'a' || out[n - 1] == 'f')) out[n - 1] = '\0';
}

static int arch_cmp(const void *pa, const void *pb) {
  const char *a = *(const char *const *)pa, *b = *(const char *const *)pb;
  int na = atoi(a + 3), nb = atoi(b + 3);
  if (na != nb) return na < nb ? -1 : 1;
  return strcmp(a, b);
}

/* Splits "sm_80,sm_90a" into a sorted, duplicate-free list. */
static int parse_archs(Arena *a, const char *list, const char **out) {
  int n = 0;
  char *copy = arena_strdup(a, list);
  for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
    if (!nvrtc_arch_valid(tok) || strlen(tok) >= 16)
      return cli_usage_error("unknown target '%s' (try sm_80 or sm_90a)", tok);
    bool dup = false;
    for (int k = 0; k < n; k++) dup |= strcmp(out[k], tok) == 0;
    if (dup) continue;
    if (n == BUILD_MAX_ARCHS)
      return cli_usage_error("at most %d targets", BUILD_MAX_ARCHS);
    out[n++] = tok;
  }
  if (n == 0) return cli_usage_error("%s", "--arch needs at least one target");
  qsort(out, (size_t)n, sizeof *out, arch_cmp);
  return -n;
}

/* The text of source line `line`, without its comment and surrounding
 * blanks, made safe inside a C comment. */
static void decl_text(StrBuf *out, const Source *src, int line) {
  const char *p = src->text, *end = src->text + src->len;
  for (int l = 1; l < line && p < end; p++)
    if (*p == '\n') l++;
  const char *e = p;
  while (e < end && *e != '\n' && *e != '#') e++;
  while (p < e && (*p == ' ' || *p == '\t')) p++;
  while (e > p && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
  for (; p < e; p++) {
    if (*p == '*' && p + 1 < e && p[1] == '/') sb_puts(out, "* ");
    else if ((unsigned char)*p < 0x20) sb_putc(out, ' ');
    else sb_putc(out, *p);
  }
}

static void c_string(StrBuf *out, const char *s, size_t n) {
  sb_puts(out, "    \"");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\\' || c == '"') sb_printf(out, "\\%c", c);
    else if (c == '\n') sb_puts(out, i + 1 < n ? "\\n\"\n    \"" : "\\n");
    else if (c == '?') sb_puts(out, "\\?"); /* no trigraphs */
    else if (c < 0x20 || c >= 0x7f) sb_printf(out, "\\%03o", c);
    else sb_putc(out, (char)c);
  }
  sb_puts(out, "\"");
}

static void c_bytes(StrBuf *out, const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    sb_printf(out, "%s0x%02x,%s", i % 16 ? "" : "    ", p[i],
              i % 16 == 15 || i + 1 == n ? "\n" : "");
}

static const char *scalar_ctype(DType t) {
  switch (t) {
  case DT_I32: return "int32_t";
  case DT_U64: return "uint64_t";
  case DT_BOOL: return "int";
  default: return "float";
  }
}

static const char *scalar_binder(DType t) {
  switch (t) {
  case DT_I32: return "attn_call_bind_i32";
  case DT_U64: return "attn_call_bind_u64";
  case DT_BOOL: return "attn_call_bind_bool";
  default: return "attn_call_bind_f32";
  }
}

static const char *attn_dtype_name(DType t) {
  switch (t) {
  case DT_F16: return "ATTN_F16";
  case DT_BF16: return "ATTN_BF16";
  case DT_F32: return "ATTN_F32";
  case DT_E4M3: return "ATTN_E4M3";
  case DT_E5M2: return "ATTN_E5M2";
  case DT_I32: return "ATTN_I32";
  case DT_U64: return "ATTN_U64";
  case DT_BOOL: return "ATTN_BOOL";
  default: return "0";
  }
}

static void shape_text(StrBuf *out, const IrGraph *g, const IrTensor *t) {
  sb_putc(out, '[');
  for (int d = 0; d < t->ndims; d++) {
    if (d) sb_puts(out, ", ");
    if (t->dim_sym[d] >= 0) sb_puts(out, g->dims[t->dim_sym[d]].name);
    else sb_printf(out, "%lld", (long long)t->dim_val[d]);
  }
  sb_putc(out, ']');
}

/* A path in make's syntax: backslash before spaces, tabs, '#', ':' (not
 * a drive letter here) and itself before those, '$' doubled. */
static void make_path(StrBuf *out, const char *p) {
  for (; *p; p++) {
    if (*p == '$') sb_puts(out, "$$");
    else if (*p == ' ' || *p == '\t' || *p == '#' || *p == ':' || *p == '\\')
      sb_printf(out, "\\%c", *p);
    else sb_putc(out, *p);
  }
}

static bool has_typed_backward(const IrGraph *g, BwdSlots *sl);

/* ------------------------------------------------ names in C, checked */

/* Words the generated C (and C++, which includes the header) cannot take
 * as a name: the keywords of both languages and the macros the header
 * brings in (stddef.h, stdint.h, attn.h). */
static const char *const c_reserved[] = {
    "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
    "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "co_await",
    "co_return", "co_yield", "compl", "concept", "const", "const_cast", "consteval",
    "constexpr", "constinit", "continue", "decltype", "default", "delete", "do", "double",
    "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "float", "for",
    "friend", "goto", "if", "inline", "int", "long", "mutable", "namespace", "new",
    "noexcept", "not", "not_eq", "nullptr", "operator", "or", "or_eq", "private",
    "protected", "public", "register", "reinterpret_cast", "requires", "restrict", "return",
    "short", "signed", "sizeof", "static", "static_assert", "static_cast", "struct",
    "switch", "template", "this", "thread_local", "throw", "true", "try", "typedef",
    "typeid", "typename", "union", "unsigned", "using", "virtual", "void", "volatile",
    "wchar_t", "while", "xor", "xor_eq", "NULL", "offsetof", "SIZE_MAX", "PTRDIFF_MIN",
    "PTRDIFF_MAX", "WCHAR_MIN", "WCHAR_MAX", "WINT_MIN", "WINT_MAX", "SIG_ATOMIC_MIN",
    "SIG_ATOMIC_MAX"};

/* Why name cannot be used in the generated C, or NULL. A struct field
 * meets only keywords and macros; a graph's name starts global names
 * (NAME_launch), which must stay out of libattn's attn_ too. */
static const char *c_name_problem(const char *name, bool global) {
  for (size_t k = 0; k < sizeof c_reserved / sizeof *c_reserved; k++)
    if (!strcmp(name, c_reserved[k])) return "a C or C++ keyword or a standard macro";
  if (name[0] == '_' && (name[1] == '_' || (name[1] >= 'A' && name[1] <= 'Z')))
    return "reserved in C (it starts with __ or _ and a capital)";
  if ((global && !strncmp(name, "attn_", 5)) || !strncmp(name, "ATTN_", 5))
    return global ? "in libattn's namespace (attn_, ATTN_)" : "in libattn's macros' namespace (ATTN_)";
  bool upper = true;
  for (const char *c = name; *c; c++) upper &= (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_';
  if (upper && strstr(name, "INT") && (strstr(name, "_MAX") || strstr(name, "_MIN") || strstr(name, "_C")))
    return "a macro of stdint.h";
  return NULL;
}

/* The names one scope of the generated C declares, each with the .attn
 * declaration that made it. */
typedef struct CNames {
  const char *name[4 * ATTN_MAX_TENSORS + 4 * ATTN_MAX_SCALARS + 8];
  Loc from[4 * ATTN_MAX_TENSORS + 4 * ATTN_MAX_SCALARS + 8];
  const char *what[4 * ATTN_MAX_TENSORS + 4 * ATTN_MAX_SCALARS + 8];
  int n;
} CNames;

static void c_declare(CNames *s, Diag *d, const char *name, Loc from, const char *what) {
  for (int k = 0; k < s->n; k++)
    if (!strcmp(s->name[k], name)) {
      diag_error(d, from, "the C header attnc build writes would declare '%s' twice: for %s "
                 "and for %s; rename one", name, what, s->what[k]);
      diag_note(d, s->from[k], "the other is declared here");
      return;
    }
  if (s->n < (int)(sizeof s->name / sizeof *s->name))
    s->name[s->n] = name, s->from[s->n] = from, s->what[s->n++] = what;
}

/* Every name attnc build puts into C: graphs (NAME_args, NAME_launch, ...)
 * and, per graph, the fields of its args and grads structs (T, T_shape,
 * T_strides, S, S_set; d_T, d_T_strides). Located errors in d. */
static void check_c_names(const IrModule *m, Arena *a, Diag *d) {
  for (int gi = 0; gi < m->ngraphs; gi++) {
    const IrGraph *g = m->graphs[gi];
    const char *why = c_name_problem(g->name, true);
    if (why)
      diag_error(d, g->loc, "graph '%s': attnc build names C functions after it, and it is "
                 "%s; rename it", g->name, why);
    CNames args = {.n = 0}, grads = {.n = 0};
    BwdSlots sl;
    bool bwd = has_typed_backward(g, &sl);
    if (bwd) c_declare(&grads, d, "deterministic", g->loc, "the deterministic flag");
    for (int t = 0; t < g->ntensors; t++) {
      const IrTensor *x = &g->tensors[t];
      if ((why = c_name_problem(x->name, false)))
        diag_error(d, x->loc, "'%s' is %s: attnc build makes it a field of C struct %s_args; "
                   "rename it", x->name, why, g->name);
      const char *what = arena_printf(a, "tensor '%s'", x->name);
      c_declare(&args, d, x->name, x->loc, what);
      if (x->ndims) {
        c_declare(&args, d, arena_printf(a, "%s_shape", x->name), x->loc, what);
        c_declare(&args, d, arena_printf(a, "%s_strides", x->name), x->loc, what);
      }
      if (bwd && (x->grad || t == sl.o)) {
        c_declare(&grads, d, arena_printf(a, "d_%s", x->name), x->loc, what);
        c_declare(&grads, d, arena_printf(a, "d_%s_strides", x->name), x->loc, what);
      }
    }
    for (int k = 0; k < g->nscalars; k++) {
      const IrScalar *x = &g->scalars[k];
      if ((why = c_name_problem(x->name, false)))
        diag_error(d, x->loc, "'%s' is %s: attnc build makes it a field of C struct %s_args; "
                   "rename it", x->name, why, g->name);
      const char *what = arena_printf(a, "scalar '%s'", x->name);
      c_declare(&args, d, x->name, x->loc, what);
      if (x->has_default) c_declare(&args, d, arena_printf(a, "%s_set", x->name), x->loc, what);
    }
  }
}

/* ------------------------------------------------------------- header */

/* Whether graph g gets NAME_launch_backward: it declares grad, every grad
 * tensor is one the GPU backward computes, and it saves o and lse. */
static bool has_typed_backward(const IrGraph *g, BwdSlots *sl) {
  return bwd_has_grad(g) && bwd_unsupported_grad(g) < 0 && bwd_slots(g, sl) == 0;
}

/* The tensors a backward binds besides the forward's: dO (from o), then
 * each grad tensor's gradient. Fills from[] (tensor indices) and returns
 * how many; from[0] is o. */
static int backward_tensors(const IrGraph *g, const BwdSlots *sl, int from[]) {
  int n = 0;
  from[n++] = sl->o;
  for (int t = 0; t < g->ntensors; t++)
    if (g->tensors[t].grad) from[n++] = t;
  return n;
}

static void gen_header_backward(StrBuf *h, const char *file, const IrModule *m,
                                const IrGraph *g) {
  BwdSlots sl;
  if (!has_typed_backward(g, &sl)) return;
  int from[ATTN_MAX_TENSORS];
  int n = backward_tensors(g, &sl, from);
  sb_printf(h, "\n/* The backward of graph '%s' (%s:%d). Gradients have the shapes\n"
               " * of their tensors in *a (same dtypes; dO has q's dtype and o's\n"
               " * shape); strides as in %s_args. */\n"
               "typedef struct %s_grads {\n",
            g->name, file, g->loc.line, g->name, g->name);
  for (int k = 0; k < n; k++) {
    const IrTensor *x = &g->tensors[from[k]];
    if (k == 0) {
      sb_printf(h, "  /* input %s: dO, the gradient of output '%s' */\n  const void *d_%s;\n",
                dtype_name(g->tensors[g->q].type), x->name, x->name);
    } else {
      sb_printf(h, "  /* output %s: the gradient of `", dtype_name(x->type));
      decl_text(h, m->src, x->loc.line);
      sb_printf(h, "` */\n  void *d_%s;\n", x->name);
    }
    sb_printf(h, "  const int64_t *d_%s_strides; /* %d elements or NULL */\n", x->name, x->ndims);
  }
  sb_puts(h, "  /* 1: attn_call_set_deterministic (bit-identical gradients, slower) */\n"
             "  int deterministic;\n");
  sb_printf(h, "} %s_grads;\n\n", g->name);
  sb_printf(h,
            "/* Binds every field of *a (o and lse must hold what %s_launch wrote)\n"
            " * and of *d, then launches the backward on stream. Its f32 scratch is\n"
            " * allocated and freed per call (freeing waits for the GPU): for repeated\n"
            " * steps without that, use the call API (attn_call_launch_backward). */\n"
            "attn_status %s_launch_backward(attn_context *ctx, const %s_args *a,\n"
            "                               const %s_grads *d, void *stream);\n",
            g->name, g->name, g->name, g->name);
}

static void gen_header(StrBuf *h, const char *name, const char *file,
                       const IrModule *m, const BuildImage *im, int nim) {
  sb_printf(h, "/* %s.h: generated by `attnc build` (attnc %s) from %s.\n"
               " * Do not edit; rebuild instead.\n * Kernels: cubins for",
            name, ATTNC_VERSION, file);
  for (int i = 0; i < nim; i++)
    if (!im[i].is_ptx) sb_printf(h, " %s", im[i].arch);
  for (int i = 0; i < nim; i++)
    if (im[i].is_ptx)
      sb_printf(h, ", PTX for %s and newer GPUs (compiled by the driver)",
                im[i].arch);
  sb_printf(h, ".\n * Link with libattn (pkg-config --cflags --libs attn); "
               "running needs the\n * CUDA driver, not NVRTC.\n */\n"
               "#ifndef ATTNC_GENERATED_%s_H\n#define ATTNC_GENERATED_%s_H\n\n"
               "#include <stdint.h>\n\n#include <attn.h>\n\n"
               "#ifdef __cplusplus\nextern \"C\" {\n#endif\n\n",
            name, name);
  sb_printf(h, "/* The whole module, for attn_module_load_embedded. */\n"
               "extern const attn_embedded %s_embedded;\n",
            name);
  for (int gi = 0; gi < m->ngraphs; gi++) {
    const IrGraph *g = m->graphs[gi];
    sb_printf(h, "\n/* Graph '%s' (%s:%d).\n", g->name, file, g->loc.line);
    if (g->ndims) {
      sb_puts(h, " * Dimension symbols");
      for (int d = 0; d < g->ndims; d++)
        sb_printf(h, "%s%s", d ? ", " : " ", g->dims[d].name);
      sb_puts(h, " take their values from the shapes\n"
                 " * passed; every use of a symbol must agree.\n");
    }
    sb_puts(h, " * Tensors: device pointers in the current CUDA context; "
               "shapes in the\n * declared order; strides count elements, "
               "NULL means dense row-major.\n */\n");
    sb_printf(h, "typedef struct %s_args {\n", g->name);
    for (int t = 0; t < g->ntensors; t++) {
      const IrTensor *x = &g->tensors[t];
      sb_puts(h, "  /* ");
      decl_text(h, m->src, x->loc.line);
      sb_printf(h, "  (%s:%d)\n   * %s %s ", file, x->loc.line,
                x->is_output ? "output" : "input", dtype_name(x->type));
      shape_text(h, g, x);
      sb_puts(h, " */\n");
      sb_printf(h, "  %svoid *%s;\n", x->is_output ? "" : "const ", x->name);
      if (x->ndims) {
        sb_printf(h, "  int64_t %s_shape[%d];\n", x->name, x->ndims);
        sb_printf(h, "  const int64_t *%s_strides; /* %d elements or NULL */\n",
                  x->name, x->ndims);
      }
    }
    for (int s = 0; s < g->nscalars; s++) {
      const IrScalar *x = &g->scalars[s];
      sb_puts(h, "  /* ");
      decl_text(h, m->src, x->loc.line);
      sb_printf(h, "  (%s:%d)\n   * scalar %s", file, x->loc.line,
                dtype_name(x->type));
      if (x->has_default) {
        if (dtype_is_float(x->type))
          sb_printf(h, "; %s_set = 0 uses the default, %.9g", x->name,
                    x->fdefault);
        else
          sb_printf(h, "; %s_set = 0 uses the default, %lld", x->name,
                    (long long)x->idefault);
      } else {
        sb_puts(h, "; required");
      }
      sb_puts(h, " */\n");
      sb_printf(h, "  %s %s;\n", scalar_ctype(x->type), x->name);
      if (x->has_default) sb_printf(h, "  int %s_set;\n", x->name);
    }
    sb_printf(h, "} %s_args;\n\n", g->name);
    sb_printf(h,
              "/* Binds every field of *a, then launches on stream (a CUstream "
              "or\n * cudaStream_t; NULL: the legacy stream). The module loads "
              "once per\n * attn_context (attn_context_embedded_module) and is "
              "destroyed with it.\n * Errors: the status, and the message in "
              "attn_context_error(ctx). */\n"
              "attn_status %s_launch(attn_context *ctx, const %s_args *a, "
              "void *stream);\n",
              g->name, g->name);
    gen_header_backward(h, file, m, g);
  }
  sb_puts(h, "\n#ifdef __cplusplus\n}\n#endif\n#endif\n");
}

/* --------------------------------------------------------------- source */

/* The body of a launch function up to the launch: the module, a call,
 * every field of *a bound. */
static void gen_bind_args(StrBuf *c, const char *name, const IrGraph *g, const char *check) {
  sb_printf(c, "  attn_module *m;\n  attn_graph *g;\n  attn_call *c;\n"
               "  attn_status st;\n"
               "  if (%s) return ATTN_ERROR_INVALID_ARGUMENT;\n"
               "  if ((st = attn_context_embedded_module(ctx, &%s_embedded, "
               "&m)) ||\n"
               "      (st = attn_module_get_graph(m, \"%s\", &g)) ||\n"
               "      (st = attn_call_create(g, &c)))\n    return st;\n",
            check, name, g->name);
  for (int t = 0; t < g->ntensors; t++) {
    const IrTensor *x = &g->tensors[t];
    if (x->ndims)
      sb_printf(c, "  if (!st) st = attn_call_bind_tensor(c, \"%s\", (void *)a->%s, "
                   "%s, %d, a->%s_shape, a->%s_strides);\n",
                x->name, x->name, attn_dtype_name(x->type), x->ndims, x->name,
                x->name);
    else
      sb_printf(c, "  if (!st) st = attn_call_bind_tensor(c, \"%s\", (void *)a->%s, "
                   "%s, 0, NULL, NULL);\n",
                x->name, x->name, attn_dtype_name(x->type));
  }
  for (int s = 0; s < g->nscalars; s++) {
    const IrScalar *x = &g->scalars[s];
    if (x->has_default)
      sb_printf(c, "  if (!st && a->%s_set) st = %s(c, \"%s\", a->%s);\n",
                x->name, scalar_binder(x->type), x->name, x->name);
    else
      sb_printf(c, "  if (!st) st = %s(c, \"%s\", a->%s);\n",
                scalar_binder(x->type), x->name, x->name);
  }
}

static void gen_launch(StrBuf *c, const char *name, const IrGraph *g) {
  sb_printf(c, "\nattn_status %s_launch(attn_context *ctx, const %s_args *a, "
               "void *stream) {\n",
            g->name, g->name);
  gen_bind_args(c, name, g, "!ctx || !a");
  sb_puts(c, "  if (!st) st = attn_call_launch(c, stream);\n"
             "  attn_call_destroy(c);\n  return st;\n}\n");
  BwdSlots sl;
  if (!has_typed_backward(g, &sl)) return;
  int from[ATTN_MAX_TENSORS];
  int n = backward_tensors(g, &sl, from);
  sb_printf(c, "\nattn_status %s_launch_backward(attn_context *ctx, const %s_args *a,\n"
               "                               const %s_grads *d, void *stream) {\n",
            g->name, g->name, g->name);
  gen_bind_args(c, name, g, "!ctx || !a || !d");
  for (int k = 0; k < n; k++) {
    const IrTensor *x = &g->tensors[from[k]];
    DType t = k == 0 ? g->tensors[g->q].type : x->type;
    sb_printf(c, "  if (!st) st = attn_call_bind_tensor(c, \"d%s\", (void *)d->d_%s, %s, %d, "
                 "a->%s_shape, d->d_%s_strides);\n",
              x->name, x->name, attn_dtype_name(t), x->ndims, x->name, x->name);
  }
  sb_puts(c, "  if (!st && d->deterministic) st = attn_call_set_deterministic(c, 1);\n"
             "  if (!st) st = attn_call_launch_backward(c, stream);\n"
             "  attn_call_destroy(c);\n  return st;\n}\n");
}

/* file: the source's name made safe for comments; src_name as it is (a C
 * string literal carries it, escaped). */
static void gen_source(StrBuf *c, const char *name, const char *file, const char *src_name,
                       const IrModule *m, const BuildImage *im, int nim) {
  sb_printf(c, "/* %s.c: generated by `attnc build` (attnc %s) from %s.\n"
               " * Do not edit; rebuild instead. */\n"
               "#include <stddef.h>\n\n#include \"%s.h\"\n\n",
            name, ATTNC_VERSION, file, name);
  sb_printf(c, "/* %s, re-parsed at load to check arguments. */\n"
               "static const char %s_source[] =\n",
            file, name);
  c_string(c, m->src->text, m->src->len);
  sb_puts(c, ";\n");
  for (int i = 0; i < nim; i++) {
    const BuildImage *b = &im[i];
    sb_printf(c, "\n/* %s for %s: %zu bytes. */\nstatic const unsigned char "
                 "%s_%s_%s[] = {\n",
              b->is_ptx ? "PTX (NUL-terminated)" : "cubin", b->arch, b->size,
              name, b->arch, b->is_ptx ? "ptx" : "cubin");
    c_bytes(c, b->data, b->size);
    sb_puts(c, "};\n");
    /* The launch plans, as plan_write writes them and the library reads them. */
    StrBuf plans = {0};
    plan_write(&plans, b->cm.plans, b->cm.ngraphs);
    sb_printf(c, "static const char %s_%s_%s_plans[] =\n", name, b->arch,
              b->is_ptx ? "ptx" : "cubin");
    c_string(c, plans.data, plans.len);
    sb_puts(c, ";\n");
    sb_free(&plans);
  }
  sb_printf(c, "\nstatic const attn_embedded_image %s_images[] = {\n", name);
  for (int i = 0; i < nim; i++) {
    const BuildImage *b = &im[i];
    const char *kind = b->is_ptx ? "ptx" : "cubin";
    sb_printf(c, "    {\"%s\", %d, %s_%s_%s, sizeof %s_%s_%s, %s_%s_%s_plans},\n", b->arch,
              b->is_ptx, name, b->arch, kind, name, b->arch, kind, name, b->arch, kind);
  }
  sb_puts(c, "};\n\n");
  sb_printf(c, "const attn_embedded %s_embedded = {\n"
               "    ATTN_EMBEDDED_FORMAT, %d, \"%s\",\n",
            name, ATTN_ABI_VERSION, ATTNC_VERSION);
  c_string(c, src_name, strlen(src_name)); /* the file's name, escaped */
  sb_printf(c, ",\n    %s_source, sizeof %s_source - 1,\n"
               "    %s_images, %d};\n",
            name, name, name, nim);
  for (int gi = 0; gi < m->ngraphs; gi++) gen_launch(c, name, m->graphs[gi]);
}

/* ------------------------------------------------------------ compiling */

/* A build compiles one NVRTC program per target (and one for the PTX),
 * seconds each for graphs with a backward. The programs are emitted one
 * after another (the compiler's passes share the build's arena), then
 * compiled at once on up to -j threads (default: the online CPUs; NVRTC
 * compiles separate programs concurrently), their outputs taken back in
 * target order, so the files are the same bytes whatever the thread count.
 * On a terminal (or with -v) the build says what it compiles on how many
 * threads and when each target is done, so a long build is seen to move. */
typedef struct BuildJob {
  BuildImage *image; /* its emitted source: image->cm.source */
  NvrtcOptions nv;
  NvrtcOutput res;
  StrBuf err;
  attn_status st;
} BuildJob;

typedef struct BuildQueue {
  const char *file; /* the name NVRTC gives the programs */
  BuildJob *jobs;
  int njobs, next, done;
  bool progress;
  pthread_mutex_t lock;
} BuildQueue;

static const char *job_name(const BuildJob *j) {
  return j->image->is_ptx ? "PTX" : "cubin";
}

static void *build_worker(void *arg) {
  BuildQueue *q = arg;
  for (;;) {
    const int k = cli_take_job(&q->lock, &q->next, q->njobs);
    if (k < 0) return NULL;
    BuildJob *j = &q->jobs[k];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    j->st = nvrtc_compile(j->image->cm.source, q->file, &j->nv, j->image->is_ptx, &j->res,
                          &j->err);
    const double secs = cli_seconds_since(&t0);
    pthread_mutex_lock(&q->lock);
    q->done++;
    if (q->progress)
      fprintf(stderr, "attnc build: [%d/%d] %s for %s %s in %.1f s\n", q->done, q->njobs,
              job_name(j), j->image->arch, j->st == ATTN_SUCCESS ? "done" : "failed", secs);
    pthread_mutex_unlock(&q->lock);
  }
}

/* The jobs compiled on up to `threads` threads (this one among them). */
static void run_jobs(const char *file, BuildJob *jobs, int njobs, int threads, bool progress) {
  BuildQueue q = {.file = file, .jobs = jobs, .njobs = njobs, .progress = progress};
  pthread_mutex_init(&q.lock, NULL);
  if (threads > njobs) threads = njobs;
  if (progress) {
    fprintf(stderr, "attnc build: compiling %d program%s (", njobs, njobs == 1 ? "" : "s");
    for (int k = 0; k < njobs; k++)
      fprintf(stderr, "%s%s for %s", k ? ", " : "", job_name(&jobs[k]), jobs[k].image->arch);
    fprintf(stderr, ") on %d thread%s\n", threads, threads == 1 ? "" : "s");
  }
  cli_run_threads(threads, build_worker, &q);
  pthread_mutex_destroy(&q.lock);
}

/* Emits one target's program: the module matched, planned and emitted for
 * it (errors printed: the input's status). */
static int emit_image(const IrModule *m, const char *arch, bool is_ptx, Arena *a,
                      BuildImage *out) {
  Diag d = {0};
  memset(out, 0, sizeof *out);
  snprintf(out->arch, sizeof out->arch, "%s", arch);
  out->is_ptx = is_ptx;
  const CompileOptions opt = cli_compile_options(out->arch);
  const int rc = compile_module(m, &opt, STAGE_EMIT, a, &d, &out->cm);
  if (rc != 0 && d.out.len) fputs(d.out.data, stderr);
  diag_free(&d);
  return rc != 0 ? EXIT_INPUT : EXIT_OK;
}

/* A compiled job's code into its image (the arena's copy), its log with -v. */
static int take_job(BuildJob *j, bool verbose, Arena *a) {
  BuildImage *out = j->image;
  if (j->st != ATTN_SUCCESS) {
    fprintf(stderr, "attnc: error: compiling for %s: %s\n", out->arch,
            j->err.data ? j->err.data : "");
    return EXIT_NORUN;
  }
  if (verbose && j->res.log && *j->res.log)
    fprintf(stderr, "%s (%s):\n%s", out->arch, job_name(j), j->res.log);
  if (out->is_ptx) {
    out->size = j->res.ptx_len + 1;
    out->data = arena_alloc(a, out->size);
    memcpy(out->data, j->res.ptx, j->res.ptx_len);
  } else {
    out->size = j->res.cubin_len;
    out->data = arena_alloc(a, out->size ? out->size : 1);
    memcpy(out->data, j->res.cubin, j->res.cubin_len);
  }
  return EXIT_OK;
}

/* Every image: emitted in order, compiled together, taken back in order. */
static int compile_images(const IrModule *m, const char *file, const char *const *archs,
                          int narchs, const char *ptx_arch, int threads, bool verbose, Arena *a,
                          BuildImage *images, int *nim) {
  const int njobs = narchs + 1;
  BuildJob jobs[BUILD_MAX_ARCHS + 1];
  memset(jobs, 0, sizeof jobs);
  for (int k = 0; k < njobs; k++) {
    const bool is_ptx = k == narchs;
    const int rc = emit_image(m, is_ptx ? ptx_arch : archs[k], is_ptx, a, &images[k]);
    if (rc != EXIT_OK) return rc;
    jobs[k].image = &images[k];
    nvrtc_options(&jobs[k].nv, images[k].arch, true);
  }
  *nim = njobs;
  run_jobs(file, jobs, njobs, threads, verbose || isatty(STDERR_FILENO));
  int status = EXIT_OK;
  for (int k = 0; k < njobs; k++) {
    if (status == EXIT_OK) status = take_job(&jobs[k], verbose, a);
    nvrtc_output_free(&jobs[k].res);
    sb_free(&jobs[k].err);
  }
  return status;
}

/* Writes through a temporary file and a rename, so an interrupted build
 * never leaves a half-written file that looks up to date. */
static int write_output(const char *path, const StrBuf *sb) {
  char *tmp = malloc(strlen(path) + 8);
  if (!tmp) return -1;
  sprintf(tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  bool ok = f && (sb->len == 0 || fwrite(sb->data, 1, sb->len, f) == sb->len);
  if (f && fclose(f) != 0) ok = false;
  if (ok && rename(tmp, path) != 0) ok = false;
  if (!ok) {
    fprintf(stderr, "attnc: error: cannot write %s: %s\n", path, strerror(errno));
    remove(tmp);
  }
  free(tmp);
  return ok ? 0 : -1;
}

int cli_build(int argc, char **argv) {
  const char *file = NULL, *arch_list = NULL, *dir = NULL, *name = NULL,
             *depfile = NULL;
  bool verbose = false;
  int jobs = 0;
  for (int k = 0; k < argc; k++) {
    if (!strcmp(argv[k], "-j") && k + 1 < argc) {
      if (!(jobs = cli_jobs_arg(argv[++k]))) return EXIT_USAGE;
    } else if (!strcmp(argv[k], "--arch") && k + 1 < argc) arch_list = argv[++k];
    else if (!strcmp(argv[k], "-o") && k + 1 < argc) dir = argv[++k];
    else if (!strcmp(argv[k], "--name") && k + 1 < argc) name = argv[++k];
    else if (!strcmp(argv[k], "-MF") && k + 1 < argc) depfile = argv[++k];
    else if (!strcmp(argv[k], "-v")) verbose = true;
    else if (argv[k][0] == '-') return cli_usage_error("unknown option '%s'", argv[k]);
    else if (file) return cli_usage_error("%s", "build takes one FILE");
    else file = argv[k];
  }
  if (!file || !arch_list || !dir)
    return cli_usage_error("%s", "build needs FILE, --arch A[,B...] and -o DIR");
  if (name && !is_c_ident(name))
    return cli_usage_error("--name '%s' is not a C identifier", name);

  Arena *a = arena_new();
  const char *archs[BUILD_MAX_ARCHS];
  int narchs = parse_archs(a, arch_list, archs);
  if (narchs >= 0) {
    arena_free(a);
    return narchs; /* the usage status */
  }
  narchs = -narchs;
  if (!name) name = ident_from_file(a, file);
  const char *src_name = base_name(file);

  int status = EXIT_INPUT;
  IrModule *m = cli_front_end(file, a);
  if (m) { /* names the C it writes cannot take, and paths make cannot spell */
    Diag d = {0};
    check_c_names(m, a, &d);
    if (d.out.len) fputs(d.out.data, stderr);
    if (d.nerrors) m = NULL;
    diag_free(&d);
  }
  if (m && (strchr(file, '\n') || strchr(dir, '\n') || (depfile && strchr(depfile, '\n')))) {
    fprintf(stderr, "attnc: error: a path with a newline cannot be written in a make rule\n");
    m = NULL;
  }
  BuildImage images[BUILD_MAX_ARCHS + 1];
  int nim = 0;
  if (m) {
    status = EXIT_OK;
    /* The PTX target: the highest listed, without its a/f suffix. When
     * that very target is listed, its compile yields the PTX too. */
    char ptx_arch[16];
    base_arch(archs[narchs - 1], ptx_arch);
    status = compile_images(m, src_name, archs, narchs, ptx_arch, jobs > 0 ? jobs : cli_default_jobs(),
                            verbose, a, images, &nim);
  }
  if (status == EXIT_OK) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "attnc: error: cannot create %s: %s\n", dir, strerror(errno));
      status = EXIT_NORUN;
    }
  }
  if (status == EXIT_OK) {
    StrBuf h = {0}, c = {0}, d = {0};
    const char *commented = emit_comment_safe(a, src_name); /* the headers' comments */
    gen_header(&h, name, commented, m, images, nim);
    gen_source(&c, name, commented, src_name, m, images, nim);
    char *hpath = arena_printf(a, "%s/%s.h", dir, name);
    char *cpath = arena_printf(a, "%s/%s.c", dir, name);
    char *dpath = depfile ? arena_strdup(a, depfile)
                          : arena_printf(a, "%s/%s.d", dir, name);
    /* make's syntax: each path escaped (spaces, #, $); a path make
     * cannot spell (a newline in it) was refused above. */
    make_path(&d, cpath);
    sb_putc(&d, ' ');
    make_path(&d, hpath);
    sb_puts(&d, ": ");
    make_path(&d, file);
    sb_puts(&d, "\n\n");
    make_path(&d, file);
    sb_puts(&d, ":\n");
    if (write_output(hpath, &h) || write_output(cpath, &c) ||
        write_output(dpath, &d))
      status = EXIT_NORUN;
    else if (verbose)
      fprintf(stderr, "attnc: wrote %s, %s and %s\n", hpath, cpath, dpath);
    sb_free(&h);
    sb_free(&c);
    sb_free(&d);
  }
  arena_free(a);
  return status;
}
