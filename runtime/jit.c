/* jit.c: a module from .attn text, the library's compile path:
 *
 *   source -> front_end (parse, build) -> (target) -> compile_module
 *     (match, plan) -> the program's key text (emit_unit_key) -> cache_get
 *     (on a miss: the unit emitted, NVRTC; the entry keeps the cubin and
 *     the plans) -> module (api.c: rt_module_from_ir) -> driver load
 *
 * A module whose graphs declare grad is two programs, the backward's
 * compiled on its first backward launch (rt_compile_backward). Every
 * failure ends in the context's error message and a status. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

/* One NVRTC program through the cache. */
typedef struct RtProgram {
  const char *key;             /* emit_unit_key's text: what the cache keys it by */
  const char *const *entries;  /* the entry points the plans launch from it */
  int nentries;
  const char *meta;            /* what the entry keeps beside the cubin */
  const Compiled *cm;          /* on a miss: the source is emitted from these, */
  const CompileOptions *opt;
  EmitPart part;               /* this part of the unit, */
  Arena *a;                    /* into this arena */
} RtProgram;

/* What NVRTC needs to fill one cache entry, and what the entry keeps
 * beside the cubin: the plans and where they came from. */
typedef struct RtCompileJob {
  attn_context *ctx;
  const RtProgram *pg;
  const NvrtcOptions *options;
  const char *arch;
  const char *source; /* emitted by rt_emit_pass */
} RtCompileJob;

static void rt_emit_pass(void *arg) {
  RtCompileJob *job = arg;
  job->source = emit_unit_part(job->pg->cm, job->pg->opt, job->pg->part, job->pg->a);
}

static attn_status rt_compile_job(void *user, CacheBlob *out, StrBuf *err) {
  RtCompileJob *job = user;
  /* Whether this NVRTC compiles for the target is asked here, on a miss,
   * and not before the lookup: a hit needs no NVRTC at all. */
  if (nvrtc_available(NULL) && !nvrtc_arch_supported(job->arch, err))
    return ATTN_ERROR_UNSUPPORTED;
  /* The source itself, made only now: a hit needs none (emit_unit_key). */
  Diag d = {0};
  attn_status st = rt_scoped(job->ctx, rt_emit_pass, job, &d);
  diag_free(&d);
  if (st) return st;
  NvrtcOutput nv;
  st = nvrtc_compile(job->source, "attnc.cu", job->options, false, &nv, err);
  if (st) return st;
  return cache_blob_take(out, &nv, job->pg->meta, err);
}

/* One NVRTC program through the cache (emitted and compiled on a miss):
 * keyed by its unit with the embedded texts named (emit_unit_key: the
 * whole unit's bytes with attn_templates_id), entries, target, options
 * and the meta the entry keeps beside the cubin (cache_key). */
static attn_status rt_cached_program(attn_context *ctx, const char *arch, const RtProgram *pg,
                                     CacheBlob *out) {
  NvrtcOptions opts;
  nvrtc_options(&opts, arch, !ctx->disk_cache);
  CacheKeyInput in = {pg->key, strlen(pg->key), nvrtc_fingerprint(), arch,
                      opts.v,  opts.n,          pg->entries,         pg->nentries, pg->meta};
  unsigned char key[SHA256_BYTES];
  cache_key(&in, key);
  RtCompileJob job = {ctx, pg, &opts, arch, NULL};
  return cache_get(&ctx->cache, arch, key, rt_compile_job, &job, out, &ctx->error);
}

/* The plans in a cache entry's meta: after its "source" and "target"
 * lines. NULL when there are none. */
static const char *rt_meta_plans(const char *meta) {
  const char *p = meta ? strstr(meta, "attnc-plan ") : NULL;
  return p && (p == meta || p[-1] == '\n') ? p : NULL;
}

static CompileOptions rt_compile_options(const attn_context *ctx, const char *arch) {
  return (CompileOptions){.arch = arch, .bwd_template = ctx->options.bwd_template,
                          .sm90_variant = ctx->options.sm90_variant};
}

/* The passes after the front end, and what the cache keys and keeps:
 * every entry the plans launch from the program, and the meta (source,
 * target, plans). A module whose graphs declare grad is two programs:
 * the forward pass's kernels, compiled now, and the backward's, compiled
 * on its first backward launch (rt_module_load_pass), keyed by bwd_key
 * and bwd_entries, kept with bwd_meta; the SASS of every kernel is
 * the one-program unit's. On the development machine backward.attn's
 * forward is ready after 1.6 s instead of 4.0 s. */
typedef struct RtCompile {
  const IrModule *ir;
  CompileOptions opt;
  Arena *a;
  Diag d;
  Compiled cm;
  int rc;
  Compiled *cmp;      /* cm, kept in the arena for the sources made on misses */
  const char *key;    /* the forward's program, or the whole unit, as emit_unit_key */
  EmitPart part;      /* which of the two */
  const char **entries;
  int nentries;
  StrBuf meta;
  const char *bwd_key, *bwd_meta; /* NULL: the backward is in the forward's program */
  const char **bwd_entries;
  int bwd_nentries;
} RtCompile;

/* The entries of pass_only's steps in cm's plans (of every pass's when it
 * is -1); *n of them. */
static const char **rt_entries(const Compiled *cm, Arena *a, int pass_only, int *n) {
  const char **e = arena_alloc(a, sizeof *e * (size_t)(cm->ngraphs * PLAN_NPASSES *
                                                       PLAN_MAX_STEPS + 1));
  *n = 0;
  for (int i = 0; i < cm->ngraphs; i++)
    for (int pass = 0; pass < PLAN_NPASSES; pass++)
      for (int k = 0; (pass_only < 0 || pass == pass_only) && k < cm->plans[i].pass[pass].nsteps;
           k++)
        e[(*n)++] = cm->plans[i].pass[pass].steps[k].entry;
  return e;
}

static void rt_compile_pass(void *arg) {
  RtCompile *c = arg;
  /* To the plans, then only the program(s) NVRTC will compile. */
  c->rc = compile_module(c->ir, &c->opt, STAGE_PLAN, c->a, &c->d, &c->cm);
  if (c->rc) return;
  const Compiled *cm = &c->cm;
  bool split = false;
  for (int i = 0; i < cm->ngraphs; i++) split |= cm->plans[i].pass[PLAN_BACKWARD].present;
  const char *src = emit_source_name(c->a, c->ir->src);
  c->cmp = arena_alloc(c->a, sizeof *c->cmp);
  *c->cmp = c->cm;
  c->part = split ? EMIT_FORWARD : EMIT_ALL;
  c->key = emit_unit_key(cm, &c->opt, c->part, c->a);
  if (split) {
    c->entries = rt_entries(cm, c->a, PLAN_FORWARD, &c->nentries);
    c->bwd_key = emit_unit_key(cm, &c->opt, EMIT_BACKWARD, c->a);
    c->bwd_entries = rt_entries(cm, c->a, PLAN_BACKWARD, &c->bwd_nentries);
    /* Its graphs by name, for `attnc cache list` (no plans: the forward's
     * entry holds them). */
    const char *names = "";
    for (int i = 0; i < cm->ngraphs; i++)
      if (cm->plans[i].pass[PLAN_BACKWARD].present)
        names = arena_printf(c->a, "%sgraph %s\n", names, cm->plans[i].graph);
    c->bwd_meta =
        arena_printf(c->a, "source %s\ntarget %s\npart backward\n%s", src, c->opt.arch, names);
  } else {
    c->entries = rt_entries(cm, c->a, -1, &c->nentries);
  }
  sb_printf(&c->meta, "source %s\ntarget %s\n", src, c->opt.arch);
  plan_write(&c->meta, cm->plans, cm->ngraphs);
}

/* compile_module -> cache (NVRTC on a miss) -> module, for a built IR. */
attn_status rt_compile_ir(attn_context *ctx, Arena *a,
                                 const IrModule *ir, attn_module **out) {
  char arch[16];
  attn_status st = rt_target_arch(ctx, arch);
  if (st) {
    arena_free(a);
    return st;
  }
  RtCompile c = {.ir = ir, .opt = rt_compile_options(ctx, arch), .a = a};
  if ((st = rt_scoped(ctx, rt_compile_pass, &c, &c.d))) {
    memset(&c.meta, 0, sizeof c.meta); /* went with the scope */
    arena_free(a);
    return st;
  }
  if (c.rc != 0) {
    rt_fail(ctx, ATTN_ERROR_UNSUPPORTED, "%s",
            c.d.out.len ? c.d.out.data : "no kernel template can run this module\n");
    diag_free(&c.d);
    sb_free(&c.meta);
    arena_free(a);
    return ATTN_ERROR_UNSUPPORTED;
  }
  diag_free(&c.d);
  CacheBlob blob;
  int compiles = ctx->cache.compiles;
  RtProgram pg = {c.key, c.entries, c.nentries, c.meta.data, c.cmp, &c.opt, c.part, a};
  st = c.meta.failed ? rt_fail(ctx, ATTN_ERROR_OUT_OF_MEMORY, "out of memory")
                     : rt_cached_program(ctx, arch, &pg, &blob);
  sb_free(&c.meta);
  if (st) {
    arena_free(a);
    return st;
  }
  /* The entry's plans, read back as every module's are (a disk entry
   * holds what this very source planned: the key covers it). */
  const char *plans = rt_meta_plans(blob.meta);
  st = rt_module_from_ir(ctx, a, ir, plans ? plans : "", arch, blob.cubin, blob.cubin_len, out);
  if (st == ATTN_SUCCESS) {
    (*out)->kind = ctx->cache.compiles > compiles ? ATTN_FROM_NVRTC
                                                  : ATTN_FROM_CACHE;
    (*out)->log = blob.log;
    blob.log = NULL;
    (*out)->cm = c.cmp;
    (*out)->opt = c.opt;
    (*out)->opt.arch = (*out)->arch; /* not this call's */
    (*out)->bwd_apart = c.bwd_key != NULL;
    (*out)->bwd_key = c.bwd_key;
    (*out)->bwd_meta = c.bwd_meta;
    (*out)->bwd_entries = c.bwd_entries;
    (*out)->bwd_nentries = c.bwd_nentries;
  }
  cache_blob_free(&blob);
  if (st == ATTN_SUCCESS && (st = rt_module_try_load(*out))) {
    attn_module_destroy(*out);
    *out = NULL;
  }
  return st;
}

/* The front end on a file (path) or a string: source -> checked IR. */
static void rt_front_pass(void *arg) {
  RtFront *f = arg;
  f->src = f->path ? source_load(f->a, f->path, &f->d)
                   : source_from_string(f->a, f->name, f->text, f->len);
  if (f->src) f->ir = front_end(f->src, f->a, &f->d);
}

/* parse -> IR in a fresh arena; the front end's diagnostics go verbatim
 * into the context's error (and the arena is freed) on failure: IO when
 * the file could not be read, SOURCE for errors in it. */
attn_status rt_front(attn_context *ctx, RtFront *f) {
  if (!(f->a = arena_new())) return rt_fail(ctx, ATTN_ERROR_OUT_OF_MEMORY, "out of memory");
  attn_status st = rt_scoped(ctx, rt_front_pass, f, &f->d);
  if (!st && !f->ir) {
    st = f->src ? ATTN_ERROR_SOURCE : ATTN_ERROR_IO;
    rt_fail(ctx, st, "%s", f->d.out.len ? f->d.out.data : "cannot read the source");
  }
  diag_free(&f->d);
  if (st) arena_free(f->a);
  return st;
}

static attn_status module_compile_string_impl(attn_context *ctx, const char *name,
                                       const char *text, size_t len,
                                       attn_module **out) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  if (!out || (!text && len > 0))
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_module_compile_string: %s is NULL",
                   out ? "text" : "out");
  *out = NULL;
  rt_clear_error(ctx);
  if (len > SOURCE_MAX_BYTES)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_module_compile_string: %zu bytes; a source is at most %d MiB", len,
                   SOURCE_MAX_BYTES >> 20);
  RtFront f = {.name = name ? name : "<string>", .text = text ? text : "", .len = len};
  attn_status st = rt_front(ctx, &f);
  return st ? st : rt_compile_ir(ctx, f.a, f.ir, out);
}

static attn_status module_compile_file_impl(attn_context *ctx, const char *path,
                                     attn_module **out) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  if (!out || !path)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_module_compile_file: %s is NULL",
                   out ? "path" : "out");
  *out = NULL;
  rt_clear_error(ctx);
  RtFront f = {.path = path};
  attn_status st = rt_front(ctx, &f);
  return st ? st : rt_compile_ir(ctx, f.a, f.ir, out);
}

/* The backward's program through the cache (NVRTC on a miss); its
 * entry's meta names the part (the plans are in the forward's). */
attn_status rt_compile_backward(attn_module *m) {
  CacheBlob blob;
  RtProgram pg = {m->bwd_key, m->bwd_entries, m->bwd_nentries, m->bwd_meta, m->cm, &m->opt,
                  EMIT_BACKWARD, m->arena};
  attn_status st = rt_cached_program(m->ctx, m->arch, &pg, &blob);
  if (st) return st;
  m->bwd_cubin = (unsigned char *)blob.cubin;
  m->bwd_cubin_len = blob.cubin_len;
  blob.cubin = NULL;
  cache_blob_free(&blob);
  return ATTN_SUCCESS;
}


/* ------------------------------------------------------------- attn.h */

attn_status attn_module_compile_string(attn_context *ctx, const char *name, const char *text,
                                       size_t len, attn_module **out) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL_OUT(ctx, module_compile_string_impl(ctx, name, text, len, out), out,
              attn_module_destroy);
}

attn_status attn_module_compile_file(attn_context *ctx, const char *path, attn_module **out) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL_OUT(ctx, module_compile_file_impl(ctx, path, out), out, attn_module_destroy);
}
