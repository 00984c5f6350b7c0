/* api.c: attn.h's contexts, modules, graphs and calls (launches:
 * launch.c). A module comes from .attn text through jit.c (front end,
 * plans, the kernel cache, NVRTC on a miss) or from an `attnc build`
 * image through embedded.c; both end in rt_module_from_ir here, and the
 * driver load (rt_module_load, rt_module_try_load) is here too.
 *
 * Every failure ends in the context's error message and a status; nothing
 * here prints, exits or aborts. Modules, graphs and calls report into the
 * context they were made from, so a context must outlive its modules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_driver.h"
#include "rt.h"

/* ------------------------------------------------------------- statuses */

const char *attn_status_string(attn_status s) {
  switch (s) {
  case ATTN_SUCCESS: return "success";
  case ATTN_ERROR_INVALID_ARGUMENT: return "invalid argument";
  case ATTN_ERROR_NOT_FOUND: return "not found";
  case ATTN_ERROR_SOURCE: return "error in the .attn source";
  case ATTN_ERROR_UNSUPPORTED: return "unsupported graph";
  case ATTN_ERROR_COMPILE: return "kernel compilation failed";
  case ATTN_ERROR_NO_DRIVER: return "no CUDA driver or GPU";
  case ATTN_ERROR_CUDA: return "CUDA driver error";
  case ATTN_ERROR_OUT_OF_MEMORY: return "out of memory";
  case ATTN_ERROR_IO: return "I/O error";
  case ATTN_ERROR_INCOMPLETE: return "incomplete bindings";
  case ATTN_ERROR_INTERNAL: return "internal error in libattn";
  }
  return "unknown status";
}

const char *attn_version(void) { return ATTNC_VERSION; }

attn_status rt_fail(attn_context *ctx, attn_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  ctx->error.len = 0;
  sb_vprintf(&ctx->error, fmt, ap);
  va_end(ap);
  return st;
}

void rt_clear_error(attn_context *ctx) {
  ctx->error.len = 0;
  ctx->error.failed = false;
  if (ctx->error.data) ctx->error.data[0] = '\0';
}

/* ------------------------------------------------- out of memory, sticky */

/* Every public call on a context goes through rt_begin and rt_end
 * (RT_CALL): host memory that ran out during a call, whether a checked
 * allocation failed or a string buffer could not grow, makes the call
 * return ATTN_ERROR_OUT_OF_MEMORY and marks the context, whose next calls
 * return it too until attn_context_clear_error (SQLite's way: a caller
 * that missed one status still sees the failure). The context's message
 * buffer is reserved at creation, so the message always fits. */
static const char rt_oom_message[] =
    "out of memory (host memory ran out in a call on this context; "
    "attn_context_clear_error resets it)";

attn_status rt_begin(attn_context *ctx) {
  mem_take_failure(); /* a stale flag belongs to no call on this context */
  if (!ctx->oom) return ATTN_SUCCESS;
  rt_clear_error(ctx);
  sb_puts(&ctx->error, rt_oom_message);
  return ATTN_ERROR_OUT_OF_MEMORY;
}

attn_status rt_end(attn_context *ctx, attn_status st) {
  if (!mem_take_failure()) return st; /* (a device's out of memory is not sticky) */
  ctx->oom = true;
  rt_clear_error(ctx);
  sb_puts(&ctx->error, rt_oom_message);
  return ATTN_ERROR_OUT_OF_MEMORY;
}

void attn_context_clear_error(attn_context *ctx) {
  if (!ctx) return;
  ctx->oom = false;
  rt_clear_error(ctx);
}

/* -------------------------------------------------------------- context */

attn_status attn_context_create(attn_context **out) {
  if (!out) return ATTN_ERROR_INVALID_ARGUMENT;
  *out = NULL;
  attn_context *ctx = mem_calloc(1, sizeof *ctx);
  /* The message buffer is reserved now, so "out of memory" always fits. */
  if (ctx && !(ctx->error.data = mem_alloc(ctx->error.cap = 512))) {
    mem_free(ctx);
    ctx = NULL;
  }
  if (!ctx) {
    mem_take_failure();
    return ATTN_ERROR_OUT_OF_MEMORY;
  }
  ctx->error.data[0] = '\0';
  const char *no_cache = getenv("ATTN_NO_CACHE");
  ctx->disk_cache = !(no_cache && strcmp(no_cache, "1") == 0);
  StrBuf root = {0};
  bool have_root = ctx->disk_cache && cache_default_root(&root) == 0;
  int rc = root.failed ? -1 : cache_init(&ctx->cache, have_root ? root.data : NULL);
  if (rc == 0 && ctx->disk_cache && !have_root)
    sb_puts(&ctx->cache.warning,
            "no kernel cache directory (ATTN_CACHE_DIR, "
            "XDG_CACHE_HOME and HOME are unset); keeping compiled kernels "
            "in memory only");
  sb_free(&root);
  if (mem_take_failure() || rc != 0) { /* whatever ran out, no half-made context */
    attn_context_destroy(ctx);
    return ATTN_ERROR_OUT_OF_MEMORY;
  }
  *out = ctx;
  return ATTN_SUCCESS;
}

void attn_context_destroy(attn_context *ctx) {
  if (!ctx) return;
  while (ctx->embedded) {
    RtEmbeddedModule *e = ctx->embedded;
    ctx->embedded = e->next;
    attn_module_destroy(e->m);
    mem_free(e);
  }
  rt_partial_kernels_free(&ctx->partials);
  cache_free(&ctx->cache);
  sb_free(&ctx->error);
  mem_free(ctx);
}

const char *attn_context_error(const attn_context *ctx) {
  if (!ctx) return "no context";
  return ctx->error.len ? ctx->error.data : "";
}

const char *attn_context_warning(const attn_context *ctx) {
  if (!ctx) return "";
  return ctx->cache.warning.len ? ctx->cache.warning.data : "";
}

static attn_status context_set_arch_impl(attn_context *ctx, const char *arch) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  rt_clear_error(ctx);
  if (!arch) {
    ctx->arch[0] = '\0';
    return ATTN_SUCCESS;
  }
  if (!nvrtc_arch_valid(arch) || strlen(arch) >= sizeof ctx->arch)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "invalid target '%s': expected sm_NN or sm_NNa, such as "
                   "sm_80 or sm_90a",
                   arch);
  /* Checked against NVRTC when it is installed; a program that only loads
   * embedded kernels may run without it. */
  if (nvrtc_available(NULL) && !nvrtc_arch_supported(arch, &ctx->error))
    return ATTN_ERROR_UNSUPPORTED;
  strcpy(ctx->arch, arch);
  return ATTN_SUCCESS;
}

static attn_status context_set_cache_dir_impl(attn_context *ctx, const char *dir) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  rt_clear_error(ctx);
  if (dir && !*dir)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "empty cache directory name (pass NULL to disable the "
                   "disk cache)");
  if (cache_set_root(&ctx->cache, dir) != 0)
    return rt_fail(ctx, ATTN_ERROR_OUT_OF_MEMORY, "out of memory");
  ctx->disk_cache = dir != NULL;
  return ATTN_SUCCESS;
}

static attn_status context_set_option_impl(attn_context *ctx, attn_option option, long long value) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  rt_clear_error(ctx);
  switch (option) {
  case ATTN_OPTION_BACKWARD_TEMPLATE:
    if (value != 0 && value != 80 && (value < 90 || value > 95)) break;
    ctx->options.bwd_template = (int)value;
    return ATTN_SUCCESS;
  case ATTN_OPTION_SM90_VARIANT: /* (attn.h's list; tmpl_sm90.c's sm90_variants) */
    if (value < 0 || value >= SM90_NVARIANTS) break;
    ctx->options.sm90_variant = (int)value;
    return ATTN_SUCCESS;
  case ATTN_OPTION_PERSISTENT_CTAS:
    if (value < 0 || value > 1 << 20) break;
    ctx->options.persistent_ctas = value;
    return ATTN_SUCCESS;
  case ATTN_OPTION_DECODE_SPLITS:
    if (value < 0 || value > 1 << 16) break;
    ctx->options.decode_splits = value;
    return ATTN_SUCCESS;
  case ATTN_OPTION_DECODE:
    if (value != 0 && value != 1) break;
    ctx->options.no_decode = value == 0;
    return ATTN_SUCCESS;
  case ATTN_OPTION_EXP2_FMA:
    if (value < 0 || value > 5) break;
    ctx->options.exp2_fma = (int)value;
    return ATTN_SUCCESS;
  case ATTN_OPTION_LAUNCH_OVERLAP:
    if (value != 0 && value != 1) break;
    ctx->options.no_overlap = value == 0;
    return ATTN_SUCCESS;
  default:
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT, "unknown option %d", (int)option);
  }
  return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                 "option %d does not take %lld (attn.h lists the values)", (int)option, value);
}

Cache *rt_context_cache(attn_context *ctx) { return &ctx->cache; }

/* --------------------------------------------------------------- target */

/* The target: the one set on the context, else the current device's.
 * Whether NVRTC compiles for it is asked on a cache miss (rt_compile_job):
 * opening NVRTC costs milliseconds a warm load does not need. */
attn_status rt_target_arch(attn_context *ctx, char arch[16]) {
  if (ctx->arch[0]) {
    strcpy(arch, ctx->arch);
    return ATTN_SUCCESS;
  }
  attn_status st;
  StrBuf *err = &ctx->error;
  const RtDriver *d = rt_driver(&st, err);
  if (!d) {
    sb_puts(err, " (set the target with attn_context_set_arch to compile "
                 "without one)");
    return st;
  }
  CUcontext cu;
  CUdevice dev;
  if ((st = rt_driver_current(d, &cu, &dev, err))) return st;
  return rt_device_arch(d, dev, arch, err);
}

/* ------------------------------------------------------------- loading */

int rt_program_of(const bool apart[RT_NAPART], PlanPass pass, const char *role) {
  if (pass == PLAN_BACKWARD) return apart[RT_APART_BACKWARD] ? RT_APART_BACKWARD : RT_NAPART;
  if (apart[RT_APART_DECODE] && emit_step_is_decode(role)) return RT_APART_DECODE;
  return RT_NAPART;
}

int rt_step_apart(const attn_module *m, const GraphPlan *gp, PlanPass pass, int k) {
  const bool apart[RT_NAPART] = {m->apart[RT_APART_DECODE].on, m->apart[RT_APART_BACKWARD].on};
  return rt_program_of(apart, pass, gp->pass[pass].steps[k].role);
}

/* Every step that program `which` holds (RT_NAPART: the module's own
 * library), in every graph's plan, found in lib. */
static attn_status rt_find_kernels(attn_module *m, const RtDriver *d, CUlibrary lib, int which) {
  for (int i = 0; i < m->ngraphs; i++) {
    attn_graph *g = &m->graphs[i];
    for (int pass = 0; pass < PLAN_NPASSES; pass++)
      for (int k = 0; k < g->plan->pass[pass].nsteps; k++) {
        if (rt_step_apart(m, g->plan, (PlanPass)pass, k) != which) continue;
        const char *entry = g->plan->pass[pass].steps[k].entry;
        CUresult r = d->LibraryGetKernel(&g->kern[pass][k], lib, entry);
        if (r != CUDA_SUCCESS) {
          attn_status st = rt_driver_error(d, r, "cuLibraryGetKernel", &m->ctx->error);
          sb_printf(&m->ctx->error, " for entry '%s'", entry);
          return st;
        }
      }
  }
  return ATTN_SUCCESS;
}

attn_status rt_module_load(attn_module *m, const RtDriver *d) {
  StrBuf *err = &m->ctx->error;
  if (m->loaded) return ATTN_SUCCESS;
  if (!m->cubin)
    return rt_fail(m->ctx, ATTN_ERROR_UNSUPPORTED, "module holds no compiled kernels");
  CUresult r = d->LibraryLoadData(&m->lib, m->cubin, NULL, NULL, 0, NULL, NULL, 0);
  if (r != CUDA_SUCCESS) {
    attn_status st = rt_driver_error(d, r, "cuLibraryLoadData", err);
    sb_printf(err, " (kernels built for %s%s)", m->arch,
              m->kind == ATTN_FROM_EMBEDDED_PTX ? " as PTX" : "");
    return st;
  }
  /* Every step of every plan the library holds: a cubin the device
   * cannot run, or one that lacks an entry its plan names, fails here,
   * not at a launch. (Programs compiled apart: rt_module_load_step's.) */
  attn_status st = rt_find_kernels(m, d, m->lib, RT_NAPART);
  if (st) {
    d->LibraryUnload(m->lib);
    return st;
  }
  m->loaded = true;
  return ATTN_SUCCESS;
}

attn_status rt_module_load_step(attn_module *m, const RtDriver *d, const GraphPlan *gp,
                                PlanPass pass, int k) {
  attn_status st = rt_module_load(m, d);
  const int which = rt_step_apart(m, gp, pass, k);
  if (st || which == RT_NAPART || m->apart[which].loaded) return st;
  RtApart *ap = &m->apart[which];
  if (!ap->cubin && (st = rt_compile_apart(m, (RtApartKind)which))) return st;
  CUresult r = d->LibraryLoadData(&ap->lib, ap->cubin, NULL, NULL, 0, NULL, NULL, 0);
  if (r != CUDA_SUCCESS) {
    st = rt_driver_error(d, r, "cuLibraryLoadData", &m->ctx->error);
    sb_printf(&m->ctx->error, " (the %s kernels, built for %s)", emit_part_name(ap->part),
              m->arch);
    return st;
  }
  if ((st = rt_find_kernels(m, d, ap->lib, which))) {
    d->LibraryUnload(ap->lib);
    return st;
  }
  ap->loaded = true;
  return ATTN_SUCCESS;
}

/* Loads now when a driver and a context for this very target exist, and
 * resolves every step's function there; otherwise the first launch loads
 * (compiling needs no GPU). */
attn_status rt_module_try_load(attn_module *m) {
  attn_status st;
  const RtDriver *d = rt_driver(&st, NULL);
  CUcontext cu;
  CUdevice dev;
  char dev_arch[16];
  StrBuf ignore = {0};
  bool ready = d && rt_driver_current(d, &cu, &dev, &ignore) == 0 &&
               rt_device_arch(d, dev, dev_arch, &ignore) == 0;
  sb_free(&ignore);
  if (!ready) return ATTN_SUCCESS;
  if (strcmp(dev_arch, m->target) != 0) return ATTN_SUCCESS;
  for (int i = 0; i < m->ngraphs; i++)
    if ((st = rt_graph_resolve(&m->graphs[i], d, cu))) return st;
  return ATTN_SUCCESS;
}

/* --------------------------------------------------------------- module */

/* A plan read back must describe this graph: its name, and slots and
 * tensors that exist in it. */
static bool rt_plan_fits(const GraphPlan *gp, const IrGraph *g) {
  if (strcmp(gp->graph, g->name) != 0) return false;
  for (int pass = 0; pass < PLAN_NPASSES; pass++) {
    const PassPlan *pp = &gp->pass[pass];
    for (int k = 0; k < pp->nslices; k++)
      for (int x = 0; x < 4; x++)
        if (pp->slices[k].dims[x].kind == PD_NUMEL && pp->slices[k].dims[x].n >= g->ntensors)
          return false;
    bool queue = false;
    for (int k = 0; k < pp->nslices; k++) queue |= pp->slices[k].bind == PB_TILE_QUEUE;
    for (int k = 0; k < pp->nsteps; k++)
      if (pp->steps[k].persistent && !queue) return false;
  }
  return gp->pass[PLAN_FORWARD].present;
}

/* ------------------------------------------------- the passes, scoped */

/* Compiler code (the front end, the passes, the plan reader) runs in a
 * mem.c scope: out of memory or a broken invariant inside it unwinds to
 * rt_scoped and becomes a status and the context's message, with every
 * block it allocated freed. It writes only into an arena made before the
 * scope (which survives) and into its Diag (emptied when it unwinds). */
attn_status rt_scoped(attn_context *ctx, void (*pass)(void *), void *arg, Diag *d) {
  char msg[512];
  int r = mem_scoped(pass, arg, msg, sizeof msg);
  if (r == 0) return ATTN_SUCCESS;
  memset(d, 0, sizeof *d); /* its text went with the scope */
  return rt_fail(ctx, r == MEM_OOM ? ATTN_ERROR_OUT_OF_MEMORY : ATTN_ERROR_INTERNAL, "%s", msg);
}

/* plan_read of a module's plans, each checked against its graph. */

void rt_plans_pass(void *arg) {
  RtPlans *rp = arg;
  int n = 0;
  rp->rc = plan_read(rp->text, rp->a, &rp->plans, &n, &rp->why.out);
  if (rp->rc == 0 && n != rp->ir->ngraphs) {
    sb_printf(&rp->why.out, "%d plans for %d graphs", n, rp->ir->ngraphs);
    rp->rc = -1;
  }
  for (int i = 0; rp->rc == 0 && i < n; i++)
    if (!rt_plan_fits(&rp->plans[i], rp->ir->graphs[i])) {
      sb_printf(&rp->why.out, "plan %d (for '%s') does not fit graph '%s'", i,
                rp->plans[i].graph, rp->ir->graphs[i]->name);
      rp->rc = -1;
    }
}

attn_status rt_module_from_ir(attn_context *ctx, Arena *a, const IrModule *ir,
                              const char *plan_text, const char *arch, const void *cubin,
                              size_t cubin_len, attn_module **out) {
  *out = NULL;
  for (int i = 0; i < ir->ngraphs; i++) {
    const IrGraph *g = ir->graphs[i];
    if (g->ntensors > ATTN_MAX_TENSORS || g->nscalars > ATTN_MAX_SCALARS ||
        g->ndims > ATTN_MAX_DIMS) {
      arena_free(a);
      return rt_fail(ctx, ATTN_ERROR_UNSUPPORTED,
                     "graph '%s' has %d tensors, %d scalars and %d dims; "
                     "kernels take at most %d, %d and %d",
                     g->name, g->ntensors, g->nscalars, g->ndims,
                     ATTN_MAX_TENSORS, ATTN_MAX_SCALARS, ATTN_MAX_DIMS);
    }
  }
  RtPlans rp = {.text = plan_text, .a = a, .ir = ir};
  attn_status st = rt_scoped(ctx, rt_plans_pass, &rp, &rp.why);
  if (st == ATTN_SUCCESS && rp.rc != 0)
    st = rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT, "the module's launch plans do not fit its "
                 "graphs: %s", rp.why.out.len ? rp.why.out.data : "one plan per graph expected");
  diag_free(&rp.why);
  if (st) {
    arena_free(a);
    return st;
  }
  GraphPlan *plans = rp.plans;
  attn_module *m = mem_calloc(1, sizeof *m);
  if (m) m->graphs = mem_calloc((size_t)(ir->ngraphs ? ir->ngraphs : 1), sizeof *m->graphs);
  if (m && cubin) m->cubin = mem_alloc(cubin_len ? cubin_len : 1);
  if (!m || !m->graphs || (cubin && !m->cubin)) {
    if (m) mem_free(m->graphs), mem_free(m->cubin);
    mem_free(m);
    arena_free(a);
    return rt_fail(ctx, ATTN_ERROR_OUT_OF_MEMORY, "out of memory");
  }
  m->ctx = ctx;
  m->arena = a;
  m->ir = ir;
  snprintf(m->arch, sizeof m->arch, "%s", arch ? arch : "");
  snprintf(m->target, sizeof m->target, "%s", m->arch);
  m->kind = ATTN_FROM_NVRTC;
  if (cubin) memcpy(m->cubin, cubin, cubin_len);
  m->cubin_len = cubin_len;
  m->ngraphs = ir->ngraphs;
  for (int i = 0; i < m->ngraphs; i++) {
    m->graphs[i].m = m;
    m->graphs[i].ir = ir->graphs[i];
    m->graphs[i].plan = &plans[i];
  }
  *out = m;
  return ATTN_SUCCESS;
}

void attn_module_destroy(attn_module *m) {
  if (!m) return;
  bool any = m->loaded;
  for (int k = 0; k < RT_NAPART; k++) any |= m->apart[k].loaded;
  const RtDriver *d = any ? rt_driver(NULL, NULL) : NULL;
  if (d && m->loaded) d->LibraryUnload(m->lib);
  for (int k = 0; k < RT_NAPART; k++) {
    if (d && m->apart[k].loaded) d->LibraryUnload(m->apart[k].lib);
    mem_free(m->apart[k].cubin);
  }
  mem_free(m->cubin);
  mem_free(m->log);
  for (int i = 0; m->graphs && i < m->ngraphs; i++)
    for (int r = 0; r < 4 + BWD_MAX_BIAS; r++) mem_free(m->graphs[i].grad_name[r]);
  mem_free(m->graphs);
  arena_free(m->arena);
  mem_free(m);
}

const char *rt_module_log(const attn_module *m) {
  return m && m->log ? m->log : "";
}
const char *rt_module_arch(const attn_module *m) { return m ? m->arch : ""; }
const char *attn_module_arch(const attn_module *m) { return m ? m->arch : ""; }
attn_source_kind attn_module_source_kind(const attn_module *m) {
  return m ? m->kind : (attn_source_kind)0;
}

int attn_module_graph_count(const attn_module *m) {
  return m ? m->ngraphs : 0;
}

const char *attn_module_graph_name(const attn_module *m, int index) {
  if (!m || index < 0 || index >= m->ngraphs) return NULL;
  return m->graphs[index].ir->name;
}

static attn_status module_get_graph_impl(attn_module *m, const char *name,
                                  attn_graph **out) {
  if (!m) return ATTN_ERROR_INVALID_ARGUMENT;
  if (!out)
    return rt_fail(m->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_module_get_graph: out is NULL");
  *out = NULL;
  rt_clear_error(m->ctx);
  if (!name) {
    if (m->ngraphs == 1) {
      *out = &m->graphs[0];
      return ATTN_SUCCESS;
    }
    return rt_fail(m->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "the module has %d graphs: name the one you want",
                   m->ngraphs);
  }
  for (int i = 0; i < m->ngraphs; i++)
    if (strcmp(m->graphs[i].ir->name, name) == 0) {
      *out = &m->graphs[i];
      return ATTN_SUCCESS;
    }
  rt_fail(m->ctx, ATTN_ERROR_NOT_FOUND, "no graph named '%s' (the module has:",
          name);
  for (int i = 0; i < m->ngraphs; i++)
    sb_printf(&m->ctx->error, " %s", m->graphs[i].ir->name);
  sb_puts(&m->ctx->error, ")");
  return ATTN_ERROR_NOT_FOUND;
}

/* ----------------------------------------------------------------- calls */

static attn_status call_create_impl(attn_graph *g, attn_call **out) {
  if (!g) return ATTN_ERROR_INVALID_ARGUMENT;
  if (!out)
    return rt_fail(g->m->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_call_create: out is NULL");
  rt_clear_error(g->m->ctx);
  *out = mem_calloc(1, sizeof **out);
  if (!*out) return rt_fail(g->m->ctx, ATTN_ERROR_OUT_OF_MEMORY,
                            "out of memory");
  (*out)->g = g;
  bind_init(&(*out)->bind, g->ir);
  return ATTN_SUCCESS;
}

void attn_call_destroy(attn_call *c) {
  if (!c) return;
  rt_call_free_workspace(c);
  mem_free(c);
}

static attn_status rt_call_begin(attn_call *c, const char *name,
                                 const char *fn) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  rt_clear_error(c->g->m->ctx);
  if (!name)
    return rt_fail(c->g->m->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "%s: name is NULL", fn);
  return ATTN_SUCCESS;
}

static attn_status call_bind_tensor_impl(attn_call *c, const char *name, void *ptr,
                                  attn_dtype dtype, int ndim,
                                  const int64_t *shape,
                                  const int64_t *strides) {
  attn_status st = rt_call_begin(c, name, "attn_call_bind_tensor");
  if (st) return st;
  return bind_tensor(&c->bind, name, ptr, dtype, ndim, shape, strides,
                     &c->g->m->ctx->error);
}

static attn_status call_bind_dlpack_impl(attn_call *c, const char *name,
                                  const void *dl_tensor) {
  attn_status st = rt_call_begin(c, name, "attn_call_bind_dlpack");
  if (st) return st;
  DlpackTensor t;
  StrBuf *err = &c->g->m->ctx->error;
  if ((st = dlpack_unpack(dl_tensor, name, &t, err))) return st;
  return bind_tensor(&c->bind, name, t.ptr, t.dtype, t.ndim, t.shape,
                     t.strides, err);
}

static attn_status rt_bind_scalar(attn_call *c, const char *name, DType t,
                                  attn_scalar_arg v, const char *fn) {
  attn_status st = rt_call_begin(c, name, fn);
  if (st) return st;
  return bind_scalar(&c->bind, name, t, v, &c->g->m->ctx->error);
}

static attn_status call_bind_f32_impl(attn_call *c, const char *name, float v) {
  attn_scalar_arg a = {0};
  a.f = v;
  return rt_bind_scalar(c, name, DT_F32, a, "attn_call_bind_f32");
}

static attn_status call_bind_i32_impl(attn_call *c, const char *name, int32_t v) {
  attn_scalar_arg a = {0};
  a.i = v;
  return rt_bind_scalar(c, name, DT_I32, a, "attn_call_bind_i32");
}

static attn_status call_bind_u64_impl(attn_call *c, const char *name, uint64_t v) {
  attn_scalar_arg a = {0};
  a.u = v;
  return rt_bind_scalar(c, name, DT_U64, a, "attn_call_bind_u64");
}

static attn_status call_bind_bool_impl(attn_call *c, const char *name, int v) {
  attn_scalar_arg a = {0};
  a.i = v != 0;
  return rt_bind_scalar(c, name, DT_BOOL, a, "attn_call_bind_bool");
}

static attn_status call_set_tile_counter_impl(attn_call *c, void *device_u64) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  rt_clear_error(c->g->m->ctx);
  if ((uintptr_t)device_u64 % 8 != 0)
    return rt_fail(c->g->m->ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "tile counter %p is not 8-byte aligned", device_u64);
  c->tile_counter = device_u64;
  return ATTN_SUCCESS;
}

/* ------------------------------------------------------------- attn.h */

attn_status attn_context_set_arch(attn_context *ctx, const char *arch) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(ctx, context_set_arch_impl(ctx, arch));
}

attn_status attn_context_set_cache_dir(attn_context *ctx, const char *dir) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(ctx, context_set_cache_dir_impl(ctx, dir));
}

attn_status attn_context_set_option(attn_context *ctx, attn_option option, long long value) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(ctx, context_set_option_impl(ctx, option, value));
}

attn_status attn_module_get_graph(attn_module *m, const char *name, attn_graph **out) {
  if (!m) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(m->ctx, module_get_graph_impl(m, name, out));
}

attn_status attn_call_create(attn_graph *g, attn_call **out) {
  if (!g) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL_OUT(g->m->ctx, call_create_impl(g, out), out, attn_call_destroy);
}

attn_status attn_call_bind_tensor(attn_call *c, const char *name, void *ptr, attn_dtype dtype,
                                  int ndim, const int64_t *shape, const int64_t *strides) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(c->g->m->ctx, call_bind_tensor_impl(c, name, ptr, dtype, ndim, shape, strides));
}

attn_status attn_call_bind_dlpack(attn_call *c, const char *name, const void *dl_tensor) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(c->g->m->ctx, call_bind_dlpack_impl(c, name, dl_tensor));
}

attn_status attn_call_bind_f32(attn_call *c, const char *name, float v) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(c->g->m->ctx, call_bind_f32_impl(c, name, v));
}

attn_status attn_call_bind_i32(attn_call *c, const char *name, int32_t v) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(c->g->m->ctx, call_bind_i32_impl(c, name, v));
}

attn_status attn_call_bind_u64(attn_call *c, const char *name, uint64_t v) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(c->g->m->ctx, call_bind_u64_impl(c, name, v));
}

attn_status attn_call_bind_bool(attn_call *c, const char *name, int v) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(c->g->m->ctx, call_bind_bool_impl(c, name, v));
}

attn_status attn_call_clear_bindings(attn_call *c) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  rt_clear_error(c->g->m->ctx);
  bind_init(&c->bind, c->g->ir);
  return ATTN_SUCCESS;
}

attn_status attn_call_set_tile_counter(attn_call *c, void *device_u64) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(c->g->m->ctx, call_set_tile_counter_impl(c, device_u64));
}
