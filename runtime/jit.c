/* jit.c: a module from .attn text, the library's compile path:
 *
 *   source -> front_end (parse, build) -> (target) -> compile_module
 *     (match, plan) -> the program's key text (emit_unit_key) -> cache_get
 *     (on a miss: the unit emitted, NVRTC; the entry keeps the cubin and
 *     the plans) -> module (api.c: rt_module_from_ir) -> driver load
 *
 * A module is up to three programs, its decode kernels and its backward
 * compiled on their first launches (rt_compile_apart). Every failure ends
 * in the context's error message and a status. */
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
                          .sm90_variant = ctx->options.sm90_variant,
                          .exp2_fma = ctx->options.exp2_fma};
}

/* The passes after the front end, and what the cache keys and keeps:
 * every entry the plans launch from the program, and the meta (source,
 * target, plans). A module is up to three programs: the forward pass's
 * main kernels (forward, prep, amax), compiled now; the decode kernels
 * (decode and merge steps), compiled on the first decode launch; the
 * backward pass's, compiled on the first backward launch
 * (rt_module_load_step). Each program apart is keyed by its own unit and
 * entries and kept with its own meta; the SASS of every kernel is the
 * one-program unit's. On the development machine backward.attn's forward
 * is ready after 1.6 s instead of 4.0 s (session 12), and sdpa.attn's
 * after 0.63-0.70 s of NVRTC instead of 1.07-1.21 s (session 21: the
 * decode and merge kernels cost 0.47-0.62 s of their own). */
typedef struct RtCompile {
  const IrModule *ir;
  CompileOptions opt;
  Arena *a;
  Diag d;
  Compiled cm;
  int rc;
  Compiled *cmp;      /* cm, kept in the arena for the sources made on misses */
  const char *key;    /* the main program, or the whole unit, as emit_unit_key */
  EmitPart part;      /* which part of the unit that is */
  const char **entries;
  int nentries;
  StrBuf meta;
  RtApart apart[RT_NAPART]; /* the programs compiled apart (key, meta, entries) */
} RtCompile;

/* The entries of the steps program `which` holds (RT_NAPART: the main
 * program; apart: which programs are compiled apart); *n of them. */
static const char **rt_entries(const Compiled *cm, Arena *a, const bool apart[RT_NAPART],
                               int which, int *n) {
  const char **e = arena_alloc(a, sizeof *e * (size_t)(cm->ngraphs * PLAN_NPASSES *
                                                       PLAN_MAX_STEPS + 1));
  *n = 0;
  for (int i = 0; i < cm->ngraphs; i++)
    for (int pass = 0; pass < PLAN_NPASSES; pass++)
      for (int k = 0; k < cm->plans[i].pass[pass].nsteps; k++) {
        const PlanStep *st = &cm->plans[i].pass[pass].steps[k];
        if (rt_program_of(apart, (PlanPass)pass, st->role) == which) e[(*n)++] = st->entry;
      }
  return e;
}

static void rt_compile_pass(void *arg) {
  RtCompile *c = arg;
  /* To the plans, then only the program(s) NVRTC will compile. */
  c->rc = compile_module(c->ir, &c->opt, STAGE_PLAN, c->a, &c->d, &c->cm);
  if (c->rc) return;
  const Compiled *cm = &c->cm;
  /* The backward apart when some graph has one; the decode kernels apart
   * when some graph has them and every graph has a forward kernel (a
   * decode-only plan, an FP8 KV cache's, keeps them in the main program). */
  bool apart[RT_NAPART] = {false, false}, every_forward = true;
  for (int i = 0; i < cm->ngraphs; i++) {
    const PassPlan *fp = &cm->plans[i].pass[PLAN_FORWARD];
    bool fwd = false;
    for (int k = 0; k < fp->nsteps; k++) {
      fwd |= !strcmp(fp->steps[k].role, "forward");
      apart[RT_APART_DECODE] |= emit_step_is_decode(fp->steps[k].role);
    }
    every_forward &= fwd;
    apart[RT_APART_BACKWARD] |= cm->plans[i].pass[PLAN_BACKWARD].present;
  }
  apart[RT_APART_DECODE] &= every_forward;
  const char *src = emit_source_name(c->a, c->ir->src);
  c->cmp = arena_alloc(c->a, sizeof *c->cmp);
  *c->cmp = c->cm;
  c->part = apart[RT_APART_DECODE] ? EMIT_PREFILL : apart[RT_APART_BACKWARD] ? EMIT_FORWARD : EMIT_ALL;
  c->key = emit_unit_key(cm, &c->opt, c->part, c->a);
  c->entries = rt_entries(cm, c->a, apart, RT_NAPART, &c->nentries);
  static const EmitPart parts[RT_NAPART] = {EMIT_DECODE, EMIT_BACKWARD};
  for (int x = 0; x < RT_NAPART; x++) {
    if (!apart[x]) continue;
    RtApart *ap = &c->apart[x];
    ap->on = true;
    ap->part = parts[x];
    ap->key = emit_unit_key(cm, &c->opt, ap->part, c->a);
    ap->entries = rt_entries(cm, c->a, apart, x, &ap->nentries);
    /* Its graphs by name, for `attnc cache list` (no plans: the main
     * program's entry holds them). */
    const char *names = "";
    for (int i = 0; i < cm->ngraphs; i++) {
      bool has = false;
      for (int pass = 0; pass < PLAN_NPASSES; pass++)
        for (int k = 0; k < cm->plans[i].pass[pass].nsteps; k++)
          has |= rt_program_of(apart, (PlanPass)pass, cm->plans[i].pass[pass].steps[k].role) == x;
      if (has) names = arena_printf(c->a, "%sgraph %s\n", names, cm->plans[i].graph);
    }
    ap->meta = arena_printf(c->a, "source %s\ntarget %s\npart %s\n%s", src, c->opt.arch,
                            emit_part_name(ap->part), names);
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
    memcpy((*out)->apart, c.apart, sizeof c.apart);
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

/* A program compiled apart, through the cache (NVRTC on a miss); its
 * entry's meta names the part (the plans are in the main program's). */
attn_status rt_compile_apart(attn_module *m, RtApartKind which) {
  RtApart *ap = &m->apart[which];
  CacheBlob blob;
  RtProgram pg = {ap->key, ap->entries, ap->nentries, ap->meta, m->cm, &m->opt, ap->part,
                  m->arena};
  attn_status st = rt_cached_program(m->ctx, m->arch, &pg, &blob);
  if (st) return st;
  ap->cubin = (unsigned char *)blob.cubin;
  ap->cubin_len = blob.cubin_len;
  blob.cubin = NULL;
  cache_blob_free(&blob);
  return ATTN_SUCCESS;
}

static attn_status module_prepare_impl(attn_module *m) {
  rt_clear_error(m->ctx);
  for (int k = 0; k < RT_NAPART; k++) {
    attn_status st;
    if (m->cm && m->apart[k].on && !m->apart[k].cubin &&
        (st = rt_compile_apart(m, (RtApartKind)k)))
      return st;
  }
  return ATTN_SUCCESS;
}

/* ------------------------------------------------------------- attn.h */

attn_status attn_module_compile_string(attn_context *ctx, const char *name, const char *text,
                                       size_t len, attn_module **out) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL_OUT(ctx, module_compile_string_impl(ctx, name, text, len, out), out,
              attn_module_destroy);
}

attn_status attn_module_prepare(attn_module *m) {
  if (!m) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(m->ctx, module_prepare_impl(m));
}

attn_status attn_module_compile_file(attn_context *ctx, const char *path, attn_module **out) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL_OUT(ctx, module_compile_file_impl(ctx, path, out), out, attn_module_destroy);
}
