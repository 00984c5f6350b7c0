/*
 * pipeline.c: the compiler's passes in one place, in the order they run.
 *
 *   front_end       .attn text -> AST -> checked IR     (parse, build)
 *   compile_module  IR -> specs -> plans -> CUDA unit   (match, plan, emit)
 *
 * and then, in the runtime (runtime/jit.c): cache -> NVRTC on a miss -> load ->
 * launch, each launch running the graph's plan (runtime/launch.c). The
 * library and the attnc command both call these two functions; `attnc
 * ir`, `plan`, `emit` and `compile` stop after a named stage.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"

IrModule *front_end(const Source *src, Arena *a, Diag *d) {
  AstFile *ast = parse_source(src, a, d); /* STAGE_PARSE */
  if (d->nerrors) return NULL;
  IrModule *m = ir_build(ast, a, d); /* STAGE_BUILD */
  return d->nerrors ? NULL : m;
}

/* "sm_80" -> 80, "sm_90a" -> 90; -1 when malformed. */
static int parse_arch(const char *arch) {
  if (!arch || strncmp(arch, "sm_", 3) != 0 || !isdigit((unsigned char)arch[3])) return -1;
  char *end;
  long v = strtol(arch + 3, &end, 10);
  if ((*end && strcmp(end, "a") != 0) || v < 10 || v > 1000) return -1;
  return (int)v;
}

/* STAGE_MATCH for one graph: the forward's spec and template, then the
 * derived backward's (a graph with the gradient of an input the GPU
 * backward cannot compute keeps its forward; its backward is refused at
 * launch, naming the input). */
static int match_one(GraphCompile *gc, const IrGraph *g, int sm, const CompileOptions *o,
                     Arena *a, Diag *d) {
  gc->g = g;
  gc->fwd = match_graph(g, sm, a, d);
  if (!gc->fwd || match_fwd_config(gc->fwd, o, &gc->cfg, d) != 0) return -1;
  gc->fwd->tmpl = gc->cfg.kind; /* the backward's choice of main kernel follows it */
  if (bwd_has_grad(g) && bwd_unsupported_grad(g) < 0 && !(gc->bwd = match_bwd(gc->fwd, o, a, d)))
    return -1;
  return 0;
}

int compile_module(const IrModule *m, const CompileOptions *o, Stage last, Arena *a, Diag *d,
                   Compiled *out) {
  memset(out, 0, sizeof *out);
  out->ir = m;
  int sm = parse_arch(o->arch);
  if (sm < 0) {
    diag_plain(d, "unknown target '%s': expected sm_NN or sm_NNa, e.g. sm_80 or sm_90a",
               o->arch ? o->arch : "(null)");
    return -1;
  }
  out->ngraphs = m->ngraphs;
  out->graphs = arena_alloc(a, (size_t)(m->ngraphs + 1) * sizeof *out->graphs);
  out->plans = arena_alloc(a, (size_t)(m->ngraphs + 1) * sizeof *out->plans);
  int rc = 0;
  for (int k = 0; k < m->ngraphs; k++) /* STAGE_MATCH: every graph, so every refusal shows */
    if (match_one(&out->graphs[k], m->graphs[k], sm, o, a, d) != 0) rc = -1;
  if (rc || last == STAGE_MATCH) return rc;
  for (int k = 0; k < m->ngraphs; k++) { /* STAGE_PLAN */
    GraphCompile *gc = &out->graphs[k];
    gc->plan = &out->plans[k];
    plan_graph(gc->plan, gc->fwd, &gc->cfg, gc->bwd, a);
  }
  if (last == STAGE_PLAN) return 0;
  out->source = emit_unit(out, o, a); /* STAGE_EMIT */
  return 0;
}
