/* launch.c: runs one pass of a graph's launch plan (compiler/plan.c), the
 * one launch loop of the library:
 *
 *   facts (deterministic mode, GQA, decode and its key splits) -> the
 *     slices and steps that apply
 *     -> the workspace laid out (the caller's, or the call's own, grown on
 *        demand) -> slices bound into the parameter block, zeroed where
 *        the plan says -> for each step: its grid (skipped when empty;
 *        persistent: capped at the SMs), its tensor maps, its launch
 *        (overlapped with the grid before it on sm_90 on: launch_step)
 *
 * everything on the caller's stream, nothing synchronous: a launch with a
 * caller's workspace allocates nothing and can be captured into a CUDA
 * graph (docs/runtime.md, "Workspace").
 *
 * The public launches live here too: attn_call_launch (the forward),
 * attn_call_launch_backward (after backward.c's checks), their
 * caller-workspace forms and attn_call_workspace_size.
 */
#include <string.h>

#include "rt.h"

/* Slices start 256-byte aligned within the workspace (TMA and vector
 * accesses need 16; cudaMalloc gives 256, so offsets keep that). */
#define WS_ALIGN 256
/* A caller's workspace base must be at least this aligned. */
#define WS_BASE_ALIGN 16

typedef struct PassLayout {
  bool present[PLAN_MAX_SLICES];
  size_t off[PLAN_MAX_SLICES], bytes[PLAN_MAX_SLICES];
  size_t total;
  unsigned long long signature; /* of the offsets of its PZ_NEW slices */
} PassLayout;

/* The shapes' facts (plan_facts: GQA, decode, split) and the call's. */
static unsigned launch_facts(const attn_call *c, const PlanProblem *pr) {
  return plan_facts(c->g->plan, pr) | (c->deterministic ? PLAN_IF_DET : 0u);
}

/* The SMs of device dev, or 0 when the driver cannot say. */
static long long device_sms(const RtDriver *d, CUdevice dev) {
  int nsm = 0;
  if (d->DeviceGetAttribute(&nsm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS)
    return 0;
  return nsm > 0 ? nsm : 0;
}

/* The bound problem, with the SM count and the decode options that the
 * decode's split count reads. */
static PlanProblem launch_problem(const attn_call *c, long long sms,
                                  int ndims[ATTN_MAX_TENSORS]) {
  const IrGraph *g = c->g->ir;
  for (int t = 0; t < ATTN_MAX_TENSORS; t++) ndims[t] = t < g->ntensors ? g->tensors[t].ndims : 0;
  const attn_params *p = &c->bind.params;
  const RtOptions *o = &c->g->m->ctx->options;
  return (PlanProblem){p->B,   p->H,           p->Hk,           p->Sq,       p->Skv,
                       c->bind.shape, ndims, sms, o->decode_splits, o->no_decode};
}

static void layout_pass(const attn_call *c, const PassPlan *pp, unsigned facts,
                        const PlanProblem *pr, PassLayout *l) {
  memset(l, 0, sizeof *l);
  unsigned long long sig = 1469598103934665603ull;
  for (int k = 0; k < pp->nslices; k++) {
    const PlanSlice *s = &pp->slices[k];
    if (!plan_applies(s->need, s->deny, facts)) continue;
    l->present[k] = true;
    l->off[k] = l->total;
    l->bytes[k] = plan_slice_bytes(c->g->plan, s, pr);
    l->total = (l->total + l->bytes[k] + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
    if (s->zero == PZ_NEW) sig = (sig ^ (k + 1) ^ (l->off[k] << 8)) * 1099511628211ull;
  }
  l->signature = sig;
}

static const PassPlan *pass_plan(attn_call *c, PlanPass pass) {
  const PassPlan *pp = &c->g->plan->pass[pass];
  return pp->present ? pp : NULL;
}

/* What one pass of a call is on the current device: the driver and the
 * device, the bound problem with the device's SM count, the launch facts
 * and the workspace layout. The workspace query and the launch both take
 * it from here, so the size a caller is told is the size the launch
 * lays out (the decode's split count depends on the SMs). Fill in place:
 * pr points into ndims. */
typedef struct PassLaunch {
  const RtDriver *d;
  CUcontext cu;
  CUdevice dev;
  int ndims[ATTN_MAX_TENSORS];
  PlanProblem pr;
  unsigned facts;
  PassLayout l;
} PassLaunch;

static attn_status pass_launch(attn_call *c, const PassPlan *pp, PassLaunch *x) {
  StrBuf *err = &c->g->m->ctx->error;
  attn_status st;
  if (!(x->d = rt_driver(&st, err))) return st;
  if ((st = rt_driver_current(x->d, &x->cu, &x->dev, err))) return st;
  x->pr = launch_problem(c, device_sms(x->d, x->dev), x->ndims);
  x->facts = launch_facts(c, &x->pr);
  layout_pass(c, pp, x->facts, &x->pr, &x->l);
  return ATTN_SUCCESS;
}

attn_status rt_pass_workspace(attn_call *c, PlanPass pass, size_t *bytes) {
  *bytes = 0;
  const PassPlan *pp = pass_plan(c, pass);
  if (!pp) return ATTN_SUCCESS;
  PassLaunch x;
  attn_status st = pass_launch(c, pp, &x);
  if (st) return st;
  *bytes = x.l.total;
  return ATTN_SUCCESS;
}

void rt_call_free_workspace(attn_call *c) {
  const RtDriver *d = NULL;
  for (int k = 0; k < PLAN_NPASSES; k++) {
    if (!c->ws[k].ptr) continue;
    if (!d) d = rt_driver(NULL, NULL);
    if (d) d->MemFree(c->ws[k].ptr);
    c->ws[k] = (RtWorkspace){0};
  }
}

/* The call's own workspace of a pass, at least `bytes` long; *fresh when
 * it was (re)allocated. */
static attn_status own_workspace(attn_call *c, const RtDriver *d, PlanPass pass, size_t bytes,
                                 CUdeviceptr *ptr, bool *fresh) {
  RtWorkspace *w = &c->ws[pass];
  *fresh = false;
  if (w->bytes < bytes) {
    if (w->ptr) d->MemFree(w->ptr);
    *w = (RtWorkspace){0};
    CUresult r = d->MemAlloc(&w->ptr, bytes);
    if (r != CUDA_SUCCESS) {
      w->ptr = 0;
      attn_status st = rt_driver_error(d, r, "cuMemAlloc", &c->g->m->ctx->error);
      sb_printf(&c->g->m->ctx->error, " (%zu bytes of workspace for the %s of graph '%s')", bytes,
                plan_pass_name(pass), c->g->ir->name);
      return st;
    }
    w->bytes = bytes;
    *fresh = true;
  }
  *ptr = w->ptr;
  return ATTN_SUCCESS;
}

/* A dense view of `bytes` at ptr in slot s->slot: sizes dims, element
 * strides dense. */
static void bind_slice(attn_params *p, const PlanSlice *s, const long long dims[4],
                       CUdeviceptr ptr) {
  attn_tensor_arg *t = &p->t[s->slot];
  t->ptr = (void *)(uintptr_t)ptr;
  for (int k = 0; k < 4; k++) t->size[k] = (int)dims[k];
  t->stride[3] = 1;
  t->stride[2] = dims[3];
  t->stride[1] = dims[2] * dims[3];
  t->stride[0] = dims[1] * dims[2] * dims[3];
}

/* The step's function in context cu, its shared-memory limit raised. */
static attn_status step_function(attn_graph *g, const RtDriver *d, CUcontext cu, PlanPass pass,
                                 int k, CUfunction *fn) {
  attn_module *m = g->m;
  StrBuf *err = &m->ctx->error;
  attn_status st = rt_module_load_step(m, d, g->plan, pass, k);
  if (st) return st;
  if (g->fn_ctx != cu) {
    memset(g->fn, 0, sizeof g->fn);
    g->fn_ctx = cu;
  }
  if (g->fn[pass][k]) {
    *fn = g->fn[pass][k];
    return ATTN_SUCCESS;
  }
  const PlanStep *s = &g->plan->pass[pass].steps[k];
  CUresult r = d->KernelGetFunction(fn, g->kern[pass][k]);
  if (r != CUDA_SUCCESS) {
    st = rt_driver_error(d, r, "cuKernelGetFunction", err);
    sb_printf(err, " for '%s' (built for %s; is that this GPU's target?)", s->entry, m->arch);
    return st;
  }
  if (s->smem_bytes > 0) {
    r = d->FuncSetAttribute(*fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, s->smem_bytes);
    if (r != CUDA_SUCCESS) {
      st = rt_driver_error(d, r, "cuFuncSetAttribute", err);
      sb_printf(err, " raising '%s' to %d bytes of dynamic shared memory", s->entry,
                s->smem_bytes);
      return st;
    }
  }
  g->fn[pass][k] = *fn;
  return ATTN_SUCCESS;
}

attn_status rt_graph_resolve(attn_graph *g, const RtDriver *d, CUcontext cu) {
  for (int pass = 0; pass < PLAN_NPASSES; pass++)
    for (int k = 0; k < g->plan->pass[pass].nsteps; k++) {
      /* (a program compiled apart waits for the first launch of its steps) */
      const int which = rt_step_apart(g->m, g->plan, (PlanPass)pass, k);
      if (which != RT_NAPART && !g->m->apart[which].loaded) continue;
      CUfunction fn;
      attn_status st = step_function(g, d, cu, (PlanPass)pass, k, &fn);
      if (st) return st;
    }
  return ATTN_SUCCESS;
}

static long long ceil_div(long long a, long long b) { return b > 0 ? (a + b - 1) / b : 0; }

/* One step's kernel on stream s. Overlapped (a step whose entry waits, on
 * sm_90 on, unless the context turned it off): with programmatic stream
 * serialization, so its CTAs may start as the grid before it in the
 * stream drains -- ours or the caller's -- and hold at attn_entry_wait
 * until that grid is complete and its writes visible. What the kernel
 * computes is unchanged; the launch gap between the steps of a pass, and
 * between the caller's last kernel and the first step, is what it hides
 * (docs/runtime.md, "Launch overlap"). */
static CUresult launch_step(const RtDriver *d, CUfunction fn, const unsigned grid[3],
                            const PlanStep *step, bool overlap, CUstream s, void **args) {
  if (overlap) {
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = grid[0];
    cfg.gridDimY = grid[1];
    cfg.gridDimZ = grid[2];
    cfg.blockDimX = (unsigned)step->threads;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.sharedMemBytes = (unsigned)step->smem_bytes;
    cfg.hStream = s;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    const CUresult r = d->LaunchKernelEx(&cfg, fn, args, NULL);
    /* A driver or device that refuses the attribute enqueued nothing: the
     * plain launch below computes the same. */
    if (r != CUDA_ERROR_NOT_SUPPORTED && r != CUDA_ERROR_INVALID_VALUE) return r;
  }
  return d->LaunchKernel(fn, grid[0], grid[1], grid[2], (unsigned)step->threads, 1, 1,
                         (unsigned)step->smem_bytes, s, args, NULL);
}

attn_status rt_run_pass(attn_call *c, PlanPass pass, bool caller_ws, void *ws, size_t ws_bytes,
                        void *stream) {
  attn_context *ctx = c->g->m->ctx;
  StrBuf *err = &ctx->error;
  const IrGraph *ir = c->g->ir;
  const PassPlan *pp = pass_plan(c, pass);
  if (!pp)
    return rt_fail(ctx, ATTN_ERROR_UNSUPPORTED, "graph '%s': the module holds no %s kernels",
                   ir->name, plan_pass_name(pass));
  attn_params p = c->bind.params; /* the call's block plus this launch's workspace */
  p.tiles_visited = pass == PLAN_FORWARD ? c->tile_counter : NULL;
  p.tile_queue = NULL;
  p.mask_ranges = NULL;
  if (p.B == 0 || p.H == 0) return ATTN_SUCCESS;
  if (p.H > 65535 || (p.B > 65535 && !ir_packed(ir))) /* packed: B is no grid dimension */
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "graph '%s': %d heads and batch %d: the launch grid allows at most 65535 of "
                   "each", ir->name, p.H, p.B);
  PassLaunch run;
  attn_status st = pass_launch(c, pp, &run);
  if (st) return st;
  const RtDriver *d = run.d;
  const unsigned facts = run.facts;
  /* Steps whose entries wait launch overlapped (launch_step) on sm_90 on;
   * a device whose capability cannot be read launches plainly. */
  int major = 0, minor = 0;
  StrBuf cc_err = {0};
  const bool overlap_ok = !ctx->options.no_overlap &&
                          rt_driver_cc(d, run.dev, &major, &minor, &cc_err) == ATTN_SUCCESS &&
                          major >= 9;
  sb_free(&cc_err);
  const PassLayout *l = &run.l;
  if (!plan_applies(pp->need, 0, facts)) { /* a pass only some shapes run (a plan file's) */
    StrBuf why = {0};
    plan_fact_names(&why, pp->need & ~facts);
    attn_status st2 = rt_fail(ctx, ATTN_ERROR_UNSUPPORTED,
                              "graph '%s': its %s runs only where these shapes would have the "
                              "plan facts %s (attnc plan)", ir->name, plan_pass_name(pass),
                              why.data ? why.data : "?");
    sb_free(&why);
    return st2;
  }
  if (caller_ws && ws_bytes < l->total)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "graph '%s': the %s needs %zu bytes of workspace for these shapes; %zu given "
                   "(attn_call_workspace_size)", ir->name,
                   plan_pass_name(pass), l->total, ws_bytes);
  if (caller_ws && (uintptr_t)ws % WS_BASE_ALIGN)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "graph '%s': workspace %p is not %d-byte aligned", ir->name, ws,
                   WS_BASE_ALIGN);
  CUstream s = (CUstream)stream;

  /* The workspace. A caller's is new to us every time; the call's own is
   * new when it was (re)allocated or its layout moved a PZ_NEW slice. */
  CUdeviceptr base = (CUdeviceptr)(uintptr_t)ws;
  bool fresh = true;
  if (!caller_ws && l->total > 0) {
    if ((st = own_workspace(c, d, pass, l->total, &base, &fresh))) return st;
    fresh = fresh || c->ws[pass].zeroed != l->signature;
  }
  for (int k = 0; k < pp->nslices; k++) /* slots of absent slices stay null */
    if (pp->slices[k].bind == PB_SLOT) memset(&p.t[pp->slices[k].slot], 0, sizeof p.t[0]);
  bool have_queue = false;
  for (int k = 0; k < pp->nslices; k++) {
    if (!l->present[k]) continue;
    const PlanSlice *sl = &pp->slices[k];
    /* A slice of no bytes (no rows for these sizes) stays null, so a
     * stray access faults instead of reading a neighbour. */
    const CUdeviceptr at = l->bytes[k] ? base + l->off[k] : 0;
    if (sl->bind == PB_SLOT) {
      long long dims[4];
      for (int x = 0; x < 4; x++) dims[x] = plan_dim(c->g->plan, sl->dims[x], &run.pr);
      bind_slice(&p, sl, dims, at);
    } else if (sl->bind == PB_MASK_RANGES) {
      p.mask_ranges = (void *)(uintptr_t)at;
    } else {
      p.tile_queue = (unsigned *)(uintptr_t)at;
      have_queue = true;
    }
    const bool zero = sl->zero == PZ_EACH || (sl->zero == PZ_NEW && fresh);
    if (zero && l->bytes[k] > 0) {
      CUresult r = d->MemsetD32Async(at, 0, l->bytes[k] / 4, s);
      if (r != CUDA_SUCCESS) {
        st = rt_driver_error(d, r, "cuMemsetD32Async", err);
        sb_printf(err, " zeroing '%s' of graph '%s'", sl->name, ir->name);
        return st;
      }
    }
  }
  if (!caller_ws && l->total > 0) c->ws[pass].zeroed = l->signature;

  for (int k = 0; k < pp->nsteps; k++) {
    const PlanStep *step = &pp->steps[k];
    if (!plan_applies(step->need, step->deny, facts)) continue;
    const PlanGrid *gr = &step->grid;
    long long gx = ceil_div(plan_dim(c->g->plan, gr->x0, &run.pr), gr->div0);
    if (gr->div1 > 0) gx += ceil_div(plan_dim(c->g->plan, gr->x1, &run.pr), gr->div1);
    if (gr->mul2 > 0) gx += gr->mul2 * plan_dim(c->g->plan, gr->x2, &run.pr);
    unsigned grid[3] = {0, (unsigned)plan_dim(c->g->plan, gr->y, &run.pr),
                        (unsigned)plan_dim(c->g->plan, gr->z, &run.pr)};
    if (gx > 0x7fffffffLL)
      return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                     "graph '%s': step '%s' needs %lld CTAs in x; the grid allows 2^31 - 1",
                     ir->name, step->role, gx);
    grid[0] = (unsigned)gx;
    if (!grid[0] || !grid[1] || !grid[2]) continue; /* nothing to do for these sizes */
    if (step->persistent) {
      /* At most one CTA per SM walks the items; without the SM count,
       * one CTA per item, still through the queue (any grid is correct). */
      if (!have_queue)
        return rt_fail(ctx, ATTN_ERROR_INTERNAL,
                       "graph '%s': the plan's persistent step '%s' has no work queue", ir->name,
                       step->role);
      rt_persistent_grid(d, run.dev, grid, (unsigned long long)ctx->options.persistent_ctas);
    }
    CUfunction fn;
    if ((st = step_function(c->g, d, run.cu, pass, k, &fn))) return st;
    attn_tmaps tmaps;
    if (step->nmaps > 0 && (st = rt_tmap_fill(d, ir, step, &p, &tmaps, err))) return st;
    void *args[] = {&p, &tmaps};
    const bool overlap = overlap_ok && step->entry_waits;
    CUresult r = launch_step(d, fn, grid, step, overlap, s, args);
    if (r != CUDA_SUCCESS) {
      st = rt_driver_error(d, r, overlap ? "cuLaunchKernelEx" : "cuLaunchKernel", err);
      sb_printf(err, " for '%s' of graph '%s' (grid %u x %u x %u, %d threads, %d bytes of shared "
                     "memory)", step->entry, ir->name, grid[0], grid[1], grid[2], step->threads,
                step->smem_bytes);
      return st;
    }
  }
  return ATTN_SUCCESS;
}

/* ---------------------------------------------------------------- attn.h */

/* Whether a pass of a bound call can run: the forward once every input
 * and output is bound, the backward once backward.c's checks pass. */
static attn_status pass_ready(attn_call *c, PlanPass pass) {
  return pass == PLAN_FORWARD ? bind_finish(&c->bind, &c->g->m->ctx->error)
                              : rt_backward_ready(c);
}

/* One pass of a ready call (the forward has nothing to do without
 * queries; the backward's Skv or Sq 0 still run: their plans write the
 * zeros). */
static attn_status launch_pass(attn_call *c, PlanPass pass, void *ws, size_t bytes,
                               bool caller_ws, void *stream) {
  attn_context *ctx = c->g->m->ctx;
  rt_clear_error(ctx);
  if (caller_ws && !ws && bytes)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT, "workspace is NULL but %zu bytes long",
                   bytes);
  attn_status st = pass_ready(c, pass);
  if (st) return st;
  if (pass == PLAN_FORWARD && c->bind.params.Sq == 0) return ATTN_SUCCESS;
  return rt_run_pass(c, pass, caller_ws, ws, bytes, stream);
}

static attn_status call_workspace_size_impl(attn_call *c, attn_pass pass, size_t *bytes) {
  attn_context *ctx = c->g->m->ctx;
  rt_clear_error(ctx);
  if (!bytes)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT, "attn_call_workspace_size: bytes is NULL");
  *bytes = 0;
  if (pass != ATTN_PASS_FORWARD && pass != ATTN_PASS_BACKWARD)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_call_workspace_size: pass %d is neither ATTN_PASS_FORWARD nor "
                   "ATTN_PASS_BACKWARD", (int)pass);
  const PlanPass pp = pass == ATTN_PASS_FORWARD ? PLAN_FORWARD : PLAN_BACKWARD;
  attn_status st = pass_ready(c, pp);
  if (st) return st;
  return rt_pass_workspace(c, pp, bytes);
}

attn_status attn_call_launch(attn_call *c, void *stream) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(c->g->m->ctx, launch_pass(c, PLAN_FORWARD, NULL, 0, false, stream));
}

attn_status attn_call_launch_with_workspace(attn_call *c, void *workspace, size_t bytes,
                                            void *stream) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(c->g->m->ctx, launch_pass(c, PLAN_FORWARD, workspace, bytes, true, stream));
}

attn_status attn_call_launch_backward(attn_call *c, void *stream) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(c->g->m->ctx, launch_pass(c, PLAN_BACKWARD, NULL, 0, false, stream));
}

attn_status attn_call_launch_backward_with_workspace(attn_call *c, void *workspace,
                                                     size_t bytes, void *stream) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(c->g->m->ctx, launch_pass(c, PLAN_BACKWARD, workspace, bytes, true, stream));
}

attn_status attn_call_workspace_size(attn_call *c, attn_pass pass, size_t *bytes) {
  if (!c) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(c->g->m->ctx, call_workspace_size_impl(c, pass, bytes));
}
