/*
 * test_plan.c: launch plans (compiler/plan.c) without a GPU. Every
 * example's plans for both targets survive their text form unchanged; the
 * reader refuses malformed plans with a line number and a reason; the
 * planner's choices follow the specs (persistent steps have a queue, the
 * deterministic backward exists up to head dim 128, GQA adds convert_kv);
 * slice sizes follow the bound problem.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "attn_abi.h"
#include "attnc.h"
#include "unit_build.h"

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  cr_assert(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *s = calloc((size_t)n + 1, 1);
  cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  return s;
}

static void round_trip(const GraphPlan *plans, int n, Arena *a, const char *what) {
  StrBuf w1 = {0}, w2 = {0}, err = {0};
  plan_write(&w1, plans, n);
  GraphPlan *back;
  int m;
  cr_assert_eq(plan_read(w1.data, a, &back, &m, &err), 0, "%s: %s", what, err.data);
  cr_assert_eq(m, n);
  plan_write(&w2, back, m);
  cr_assert_str_eq(w2.data, w1.data, "%s: the plan changed on its way through text", what);
  sb_free(&w1);
  sb_free(&w2);
  sb_free(&err);
}

Test(plan, every_example_round_trips) {
  DIR *dir = opendir("examples");
  cr_assert(dir);
  int done = 0;
  for (struct dirent *e; (e = readdir(dir));) {
    size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".attn")) continue;
    char path[512];
    snprintf(path, sizeof path, "examples/%s", e->d_name);
    char *text = read_text(path);
    Arena *a = arena_new();
    IrModule *m = unit_build(a, path, text);
    for (int t = 0; t < 2; t++) {
      const char *arch = t ? "sm_90a" : "sm_80";
      Diag d = {0};
      Compiled c;
      const CompileOptions o = {.arch = arch};
      if (compile_module(m, &o, STAGE_PLAN, a, &d, &c) == 0) {
        round_trip(c.plans, c.ngraphs, a, path);
        done++;
      }
      diag_free(&d);
    }
    arena_free(a);
    free(text);
  }
  closedir(dir);
  cr_assert_gt(done, 30);
}

/* The dtype a tensor map over `slot` must have in pass `pp` of graph k:
 * the graph's tensor's, dO's own (bwd_grad_type), or a workspace slice's
 * (its element size; 16-bit slices are the backward's copies, of the
 * MMAs' type). DT_NONE: nothing binds the slot. */
static DType map_type_expected(const GraphCompile *gc, const PassPlan *pp, int slot) {
  const IrGraph *g = gc->g;
  if (slot < g->ntensors) return g->tensors[slot].type;
  if (gc->bwd && slot == gc->bwd->slots.dout) return bwd_grad_type(g, IR_GRAD_DO);
  for (int k = 0; k < pp->nslices; k++) {
    const PlanSlice *x = &pp->slices[k];
    if (x->bind != PB_SLOT || x->slot != slot) continue;
    if (x->elem == 4) return DT_F32;
    if (x->elem == 2 && gc->bwd) return gc->bwd->mma_type;
    if (x->elem == 2) return gc->fwd->mma_type; /* the kv_copy variant's k16, v16 */
    if (x->elem == 1 && gc->bwd) return g->tensors[g->q].type; /* FP8 transposes: q's, dO's */
  }
  return DT_NONE;
}

/* Every tensor map of every example's plan, both targets, says the type
 * of what the runtime binds at its slot (a map's type sets TMA's element
 * size: an f32 map over a bf16 dO, which bwd_sm90 once had, reads
 * garbage). */
Test(plan, every_map_has_its_tensors_type) {
  static const char *const dirs[] = {"examples", "tests/nvrtc"};
  int maps = 0;
  for (int di = 0; di < 2; di++) {
    DIR *dir = opendir(dirs[di]);
    cr_assert(dir);
    for (struct dirent *e; (e = readdir(dir));) {
      size_t len = strlen(e->d_name);
      if (len < 6 || strcmp(e->d_name + len - 5, ".attn")) continue;
      char path[512];
      snprintf(path, sizeof path, "%s/%s", dirs[di], e->d_name);
      char *text = read_text(path);
      Arena *a = arena_new();
      IrModule *m = unit_build(a, path, text);
      /* sm_80, sm_90a, sm_90a with the FP8 tensor-core mode, sm_90a's kv_copy variant */
      for (int t = 0; t < 4; t++) {
        Diag d = {0};
        Compiled c;
        const CompileOptions o = {.arch = t ? "sm_90a" : "sm_80", .bwd_template = t == 2 ? 91 : 0,
                                  .sm90_variant = t == 3 ? tmpl_sm90_variant_index("kv_copy") : 0};
        if (compile_module(m, &o, STAGE_PLAN, a, &d, &c) == 0)
          for (int k = 0; k < c.ngraphs; k++)
            for (int pass = 0; pass < PLAN_NPASSES; pass++) {
              const PassPlan *pp = &c.plans[k].pass[pass];
              for (int s = 0; pp->present && s < pp->nsteps; s++)
                for (int x = 0; x < pp->steps[s].nmaps; x++) {
                  const PlanMap *mp = &pp->steps[s].maps[x];
                  const DType want = map_type_expected(&c.graphs[k], pp, mp->slot);
                  /* (the transposes hold q's and dO's bytes: any FP8 type) */
                  const bool ok = mp->dtype == want ||
                                  (dtype_is_fp8(want) && dtype_is_fp8(mp->dtype) &&
                                   mp->index == ATTN_TMAP_QDT);
                  cr_expect(ok, "%s %s, graph %s, step %s: map '%s' over slot %d "
                               "is %s, the slot holds %s", path, o.arch, c.graphs[k].g->name,
                               pp->steps[s].role, mp->what, mp->slot, dtype_name(mp->dtype),
                               want == DT_NONE ? "nothing" : dtype_name(want));
                  maps++;
                }
            }
        diag_free(&d);
      }
      arena_free(a);
      free(text);
    }
    closedir(dir);
  }
  cr_assert_gt(maps, 60);
}

/* The longest names make long lines (entries carry the graph's name); the
 * text form has no length limit below the reader's megabyte a line. */
Test(plan, long_names_round_trip) {
  Arena *a = arena_new();
  StrBuf src = {0};
  char name[ATTN_MAX_NAME + 1];
  memset(name, 'g', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  sb_printf(&src,
            "attention %s {\n  input q : bf16[B, H, S, 64];\n  input k : bf16[B, H, S, 64];\n"
            "  input v : bf16[B, H, S, 64];\n  s = q @ k^T;\n  o = softmax(s) @ v;\n"
            "  output o : bf16[B, H, S, 64];\n  output lse = logsumexp(s);\n  grad q, k, v;\n}\n",
            name);
  IrModule *m = unit_build(a, "<long>", src.data);
  Compiled c = unit_compile(a, m, "sm_90a", STAGE_PLAN);
  round_trip(c.plans, c.ngraphs, a, "long name");
  sb_free(&src);
  arena_free(a);
}

#define GOOD                                                                                    \
  "attnc-plan 4\ngraph g sep=0,0,0,0 decode=0 wave=0\npass forward det=0 need=-\n"                                    \
  "  slice tile_queue bind=queue slot=-1 elem=4 dims=2,1,1,1 zero=new need=- deny=-\n"          \
  "  step forward entry=attn_g_fwd threads=384 smem=1024 grid=Sq/128,H,B persistent=1 "         \
  "need=- deny=-\n"                                                                             \
  "    map index=0 slot=0 dtype=bf16 box=64x128 what=q\n"

static void refused(const char *text, const char *why) {
  Arena *a = arena_new();
  GraphPlan *p;
  int n;
  StrBuf err = {0};
  cr_assert_neq(plan_read(text, a, &p, &n, &err), 0, "accepted: %s", text);
  cr_assert(err.data && strstr(err.data, "launch plan, line "), "%s", err.data);
  cr_assert(strstr(err.data, why), "'%s' does not say '%s'", err.data, why);
  sb_free(&err);
  arena_free(a);
}

Test(plan, the_reader_refuses_malformed_plans) {
  Arena *a = arena_new();
  GraphPlan *p;
  int n;
  StrBuf err = {0};
  cr_assert_eq(plan_read(GOOD "end\n", a, &p, &n, &err), 0, "%s", err.data);
  cr_assert_eq(n, 1);
  cr_assert_eq(p[0].pass[PLAN_FORWARD].steps[0].maps[0].box_rows, 128);
  sb_free(&err);
  arena_free(a);
  refused("", "not a launch plan");
  refused("attnc-plan 99\nend\n", "plan format 99");
  refused(GOOD, "the plan has no end");
  refused(GOOD "  step x entry=e threads=2000 smem=0 grid=Sq/1,H,B persistent=0 need=- deny=-\nend\n",
          "outside [1, 1024]");
  refused(GOOD "  step x entry=e threads=32 smem=0 grid=Sq/0,H,B persistent=0 need=- deny=-\nend\n",
          "outside [1, 1048576]");
  refused(GOOD "  step x entry=e threads=32 smem=0 grid=Sq,H,B persistent=0 need=- deny=-\nend\n",
          "SIZE/DIVISOR");
  refused(GOOD "  step x entry=e threads=32 smem=0 grid=Sq/1,H,B persistent=0 need=bogus deny=-\nend\n",
          "unknown value 'bogus'");
  refused(GOOD "  step x entry=9e threads=32 smem=0 grid=Sq/1,H,B persistent=0 need=- deny=-\nend\n",
          "not an identifier");
  refused(GOOD "    map index=7 slot=0 dtype=bf16 box=64x64 what=q\nend\n", "outside [0, 4]");
  refused(GOOD "    map index=1 slot=0 dtype=i32 box=64x64 what=q\nend\n", "bf16, f16, f32, e4m3 or e5m2");
  refused(GOOD "  slice s bind=slot slot=40 elem=4 dims=B,H,Sq,2 zero=never need=- deny=-\nend\n",
          "outside [-1, 23]");
  refused(GOOD "  slice s bind=slot slot=-1 elem=4 dims=B,H,Sq,2 zero=never need=- deny=-\nend\n",
          "a slot exactly when bound to one");
  refused(GOOD "  slice s bind=queue slot=-1 elem=4 dims=B,H,Sq zero=never need=- deny=-\nend\n",
          "four sizes");
  refused("attnc-plan 4\npass forward det=0 need=-\nend\n", "before any graph");
  refused("attnc-plan 4\ngraph g sep=0,0,0,0 decode=0 wave=0\n  step x\nend\n", "before any pass");
  refused(GOOD "pass forward det=0 need=-\nend\n", "pass forward twice");
  refused("attnc-plan 4\ngraph g sep=0,0,0,0\nend\n", "decode=");
  refused("attnc-plan 4\ngraph g sep=0,0,0,0 decode=64,2 wave=1\nend\n", "decode=");
  /* The decode's wave: present, and 0 exactly without a decode kernel. */
  refused("attnc-plan 4\ngraph g sep=0,0,0,0 decode=64\nend\n", "wave=");
  refused("attnc-plan 4\ngraph g sep=0,0,0,0 decode=64 wave=0\nend\n", "wave=");
  refused("attnc-plan 4\ngraph g sep=0,0,0,0 decode=0 wave=3\nend\n", "wave=");
  refused("attnc-plan 4\ngraph g sep=0,0,0,0 decode=64 wave=65\nend\n", "outside [0, 64]");
  refused("attnc-plan 3\ngraph g sep=0,0,0,0 decode=64\nend\n", "plan format 3");
  refused(GOOD "frobnicate\nend\n", "unknown record 'frobnicate'");
  refused(GOOD "  step x entry=e threads=32 smem=0 grid=Sq/1+2*B+B/1,H,B persistent=0 need=- "
               "deny=-\nend\n",
          "SIZE/DIVISOR");
  refused(GOOD "  step x entry=e threads=32 smem=0 grid=Sq/1+0*B,H,B persistent=0 need=- deny=-\nend\n",
          "outside [1, 64]");
  refused(GOOD "  step x entry=e threads=32 smem=0 grid=Sq/1,H,B persistent=0 waits=2 need=- deny=-\nend\n",
          "outside [0, 1]");
}

/* Every entry begins with attn_entry_wait, which waits on sm_90 and later
 * only: an sm_90a plan marks every step of both passes `waits` (the
 * runtime then launches it overlapped), an sm_80 plan none; the mark
 * survives the text form, and a plan without it (an older attnc's) reads
 * as plain launches. */
Test(plan, steps_wait_at_their_entry_on_sm90_only) {
  static const char src[] =
      "attention g {\n"
      "  input q : bf16[B, H, Sq, 64];\n  input k : bf16[B, H, Skv, 64];\n"
      "  input v : bf16[B, H, Skv, 64];\n"
      "  s = (q @ k^T) * 0.125;\n  o = softmax(s) @ v;\n"
      "  output o : bf16[B, H, Sq, 64];\n  output lse = logsumexp(s);\n  grad q, k, v;\n}\n";
  for (int t = 0; t < 2; t++) {
    Arena *a = arena_new();
    IrModule *m = unit_build(a, "g.attn", src);
    Diag d = {0};
    Compiled c;
    const CompileOptions o = {.arch = t ? "sm_90a" : "sm_80"};
    cr_assert_eq(compile_module(m, &o, STAGE_PLAN, a, &d, &c), 0, "%s", d.out.data);
    int steps = 0;
    for (int pass = 0; pass < PLAN_NPASSES; pass++)
      for (int k = 0; k < c.plans[0].pass[pass].nsteps; k++, steps++)
        cr_assert_eq(c.plans[0].pass[pass].steps[k].entry_waits, t == 1, "%s step %s",
                     o.arch, c.plans[0].pass[pass].steps[k].role);
    cr_assert_geq(steps, 5);
    StrBuf text = {0}, err = {0};
    plan_write(&text, c.plans, 1);
    cr_assert_eq(strstr(text.data, " waits=1") != NULL, t == 1);
    round_trip(c.plans, 1, a, o.arch);
    GraphPlan *back;
    int n;
    cr_assert_eq(plan_read(text.data, a, &back, &n, &err), 0, "%s", err.data);
    cr_assert(back[0].pass[PLAN_FORWARD].steps[0].entry_waits == (t == 1));
    sb_free(&text);
    sb_free(&err);
    diag_free(&d);
    arena_free(a);
  }
}

/* Packed sequences' backward: the row passes and the main kernel one
 * batch entry (z = 1), the workspace slices one batch entry of the
 * tokens' rows, the main kernel's x B partial key tiles beyond the
 * tokens' own (2 B with deterministic dQ tiles), never persistent;
 * bwd_sm80 (64-key tiles, no tensor maps) on sm_80, bwd_sm90 (128-key
 * tiles, q, dO and dQ's accumulator as tensor maps) on sm_90a. */
Test(plan, packed_backward) {
  Arena *a = arena_new();
  static const char src[] =
      "attention g {\n  input q : bf16[Tq, H, 128];\n  input k : bf16[Tk, Hk, 128];\n"
      "  input v : bf16[Tk, Hk, 128];\n  input cq : i32[B1];\n  input ck : i32[B1];\n"
      "  s = (packed(q, cq) @ packed(k, ck)^T) * 0.088;\n  o = softmax(s) @ packed(v, ck);\n"
      "  output o : bf16[Tq, H, 128];\n  output lse = logsumexp(s);\n  grad q, k, v;\n}\n";
  IrModule *m = unit_build(a, "<packed>", src);
  for (int t = 0; t < 2; t++) {
    Compiled c = unit_compile(a, m, t ? "sm_90a" : "sm_80", STAGE_PLAN);
    const PassPlan *bw = &c.plans->pass[PLAN_BACKWARD];
    cr_assert(bw->present && bw->det_ok);
    int mains = 0;
    for (int k = 0; k < bw->nsteps; k++) {
      const PlanStep *s = &bw->steps[k];
      cr_assert_eq(s->grid.z.kind, PD_CONST, "%s", s->role);
      cr_assert_eq(s->grid.z.n, 1, "%s", s->role);
      if (strcmp(s->role, "main")) continue;
      mains++;
      cr_assert_eq(s->nmaps, t ? 3 : 0);
      cr_assert(!s->persistent);
      cr_assert_eq(s->threads, t ? 384 : 128);
      cr_assert_eq(s->grid.div0, t ? 128 : 64);
      cr_assert_eq(s->grid.x2.kind, PD_B);
      cr_assert_eq(s->grid.mul2, s->need & PLAN_IF_DET ? 2 : 1);
    }
    cr_assert_eq(mains, 2);
    for (int k = 0; k < bw->nslices; k++) {
      cr_assert_neq(bw->slices[k].bind, PB_TILE_QUEUE);
      if (bw->slices[k].bind == PB_SLOT)
        cr_assert(bw->slices[k].dims[0].kind == PD_CONST && bw->slices[k].dims[0].n == 1, "%s",
                  bw->slices[k].name);
    }
    round_trip(c.plans, c.ngraphs, a, "packed backward");
  }
  arena_free(a);
}

/* bwd_sm90's tensor map of dO has dO's type, the inputs' (what the
 * signature binds and the reference draws), not o's: an f32 o once gave an
 * f32 map over a bf16 dO. */
Test(plan, bwd_sm90_maps_do_in_its_own_type) {
  Arena *a = arena_new();
  static const char src[] =
      "attention g {\n  input q : bf16[B, H, S, 64];\n  input k : bf16[B, H, S, 64];\n"
      "  input v : bf16[B, H, S, 64];\n  s = (q @ k^T) * 0.125;\n"
      "  output o : f32[B, H, S, 64] = softmax(s) @ v;\n  output lse = logsumexp(s);\n"
      "  grad q, k, v;\n}\n";
  IrModule *m = unit_build(a, "<f32 o>", src);
  Compiled c = unit_compile(a, m, "sm_90a", STAGE_PLAN);
  const PassPlan *bw = &c.plans->pass[PLAN_BACKWARD];
  int mains = 0;
  for (int k = 0; k < bw->nsteps; k++) {
    const PlanStep *s = &bw->steps[k];
    if (strcmp(s->role, "main")) continue;
    mains++;
    cr_assert_eq(s->nmaps, 5); /* q, dO, dQ's accumulator, K and V (persistent) */
    cr_assert_eq(s->maps[1].index, ATTN_TMAP_DO);
    cr_assert_eq(s->maps[1].dtype, DT_BF16);
    cr_assert_eq(bwd_grad_type(m->graphs[0], IR_GRAD_DO), DT_BF16);
  }
  cr_assert(mains > 0);
  arena_free(a);
}

Test(plan, choices_follow_the_specs) {
  Arena *a = arena_new();
  static const char gqa[] =
      "attention g {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, Hk, S, 128];\n"
      "  input v : bf16[B, Hk, S, 128];\n  s = q @ k^T;\n  o = softmax(s) @ v;\n"
      "  output o : bf16[B, H, S, 128];\n  output lse = logsumexp(s);\n  grad q, k, v;\n}\n";
  IrModule *m = unit_build(a, "<gqa>", gqa);
  const GraphPlan *p90 = unit_compile(a, m, "sm_90a", STAGE_PLAN).plans;
  const GraphPlan *p80 = unit_compile(a, m, "sm_80", STAGE_PLAN).plans;
  /* Hopper: a persistent forward and backward main step, each with a queue. */
  cr_assert(unit_step(p90, PLAN_FORWARD, "forward")->persistent);
  cr_assert(unit_step(p90, PLAN_BACKWARD, "main")->persistent);
  cr_assert_eq(unit_step(p90, PLAN_BACKWARD, "main")->threads, 384);
  cr_assert_eq(unit_step(p90, PLAN_BACKWARD, "main")->nmaps, 5); /* and K, V by TMA */
  cr_assert(!unit_step(p80, PLAN_FORWARD, "forward")->persistent);
  cr_assert_eq(unit_step(p80, PLAN_BACKWARD, "main")->nmaps, 0);
  /* GQA: convert_kv, only when H != Hk. */
  const PlanStep *kv = unit_step(p80, PLAN_BACKWARD, "convert_kv");
  cr_assert(kv && kv->need == PLAN_IF_GQA);
  cr_assert(p80->pass[PLAN_BACKWARD].det_ok);
  /* Sizes: delta is [B, H, Sq, 2] f32. */
  int ndims[4] = {4, 4, 4, 4};
  const int64_t shapes[4][IR_MAX_RANK] = {{2, 8, 100, 128}, {2, 2, 300, 128}, {2, 2, 300, 128},
                                           {2, 8, 100, 128}};
  PlanProblem pr = {.B = 2, .H = 8, .Hk = 2, .Sq = 100, .Skv = 300, .shape = shapes, .ndims = ndims};
  const PassPlan *bw = &p80->pass[PLAN_BACKWARD];
  cr_assert_str_eq(bw->slices[0].name, "delta");
  cr_assert_eq(plan_slice_bytes(p80, &bw->slices[0], &pr), (size_t)2 * 8 * 100 * 2 * 4);
  cr_assert(plan_applies(PLAN_IF_GQA, PLAN_IF_DET, PLAN_IF_GQA));
  cr_assert(!plan_applies(PLAN_IF_GQA, PLAN_IF_DET, PLAN_IF_GQA | PLAN_IF_DET));
  cr_assert(!plan_applies(PLAN_IF_GQA, 0, 0));
  arena_free(a);
}

Test(plan, decode_and_its_splits_follow_the_shapes) {
  Arena *a = arena_new();
  static const char gqa[] =
      "attention g {\n  input q : bf16[B, H, Sq, 128];\n  input k : bf16[B, Hk, S, 128];\n"
      "  input v : bf16[B, Hk, S, 128];\n  s = q @ k^T;\n  o = softmax(s) @ v;\n"
      "  output o : bf16[B, H, Sq, 128];\n}\n";
  IrModule *m = unit_build(a, "<gqa>", gqa);
  const GraphPlan *p = unit_compile(a, m, "sm_90a", STAGE_PLAN).plans;
  cr_assert_eq(p->decode_bn, 64);
  cr_assert_eq(unit_step(p, PLAN_FORWARD, "forward")->deny, PLAN_IF_DECODE);
  cr_assert_eq(unit_step(p, PLAN_FORWARD, "decode")->need, PLAN_IF_DECODE);
  cr_assert_eq(unit_step(p, PLAN_FORWARD, "merge")->need, PLAN_IF_DECODE | PLAN_IF_SPLIT);
  /* B 1, GQA 32:8, one query, 32k keys on 132 SMs: 8 items take one CTA
   * an SM in 16 splits, each a partial of [splits, B, H, Sq] rows. */
  PlanProblem pr = {.B = 1, .H = 32, .Hk = 8, .Sq = 1, .Skv = 32768, .sms = 132};
  cr_assert_eq(plan_decode_splits(p, &pr), 16);
  cr_assert_eq(plan_facts(p, &pr), PLAN_IF_GQA | PLAN_IF_DECODE | PLAN_IF_SPLIT);
  cr_assert_eq(plan_dim(p, (PlanDim){PD_DECODE_ROWS, 0}, &pr), 8);
  const PassPlan *fw = &p->pass[PLAN_FORWARD];
  for (int k = 0; k < fw->nslices; k++)
    if (!strcmp(fw->slices[k].name, "partial_o"))
      cr_assert_eq(plan_slice_bytes(p, &fw->slices[k], &pr), (size_t)16 * 32 * 128 * 4);
  /* 64 items: two splits would not triple the CTAs, so none (the merge
   * costs more than the second CTA an SM gives); 44 items: three. A forced
   * count stops at 128. */
  pr = (PlanProblem){.B = 8, .H = 32, .Hk = 8, .Sq = 1, .Skv = 8192, .sms = 132};
  cr_assert_eq(plan_decode_splits(p, &pr), 1);
  pr.B = 1;
  pr.Hk = 44;
  pr.H = 44;
  cr_assert_eq(plan_decode_splits(p, &pr), 3);
  pr.Hk = 45;
  pr.H = 45;
  cr_assert_eq(plan_decode_splits(p, &pr), 1);
  pr.force_splits = 1000;
  cr_assert_eq(plan_decode_splits(p, &pr), 128);
  /* Enough work items: one split, no merge. */
  pr = (PlanProblem){.B = 128, .H = 32, .Hk = 32, .Sq = 1, .Skv = 1024, .sms = 132};
  cr_assert_eq(plan_facts(p, &pr), PLAN_IF_DECODE);
  /* 4 queries of 8 heads per K/V head: 32 rows, two row blocks. */
  pr = (PlanProblem){.B = 1, .H = 16, .Hk = 2, .Sq = 4, .Skv = 4096, .sms = 132};
  cr_assert_eq(plan_dim(p, (PlanDim){PD_DECODE_ROWS, 0}, &pr), 4);
  cr_assert_eq(plan_decode_splits(p, &pr), 32); /* 64 tiles: at most 32 */
  /* Prefill-sized rows run the forward; so does the option. */
  pr = (PlanProblem){.B = 1, .H = 32, .Hk = 8, .Sq = 17, .Skv = 4096, .sms = 132};
  cr_assert_eq(plan_facts(p, &pr), PLAN_IF_GQA);
  pr = (PlanProblem){.B = 1, .H = 8, .Hk = 8, .Sq = 1, .Skv = 4096, .sms = 132, .no_decode = true};
  cr_assert_eq(plan_facts(p, &pr), 0u);
  /* A forced count, capped at the key tiles; one tile never splits. */
  pr = (PlanProblem){.B = 1, .H = 8, .Hk = 8, .Sq = 1, .Skv = 300, .sms = 132, .force_splits = 3};
  cr_assert_eq(plan_decode_splits(p, &pr), 3);
  pr.force_splits = 1000;
  cr_assert_eq(plan_decode_splits(p, &pr), 5);
  pr.Skv = 64;
  cr_assert_eq(plan_decode_splits(p, &pr), 1);
  cr_assert_eq(plan_facts(p, &pr), PLAN_IF_DECODE);
  cr_assert_eq(p->decode_wave, 1); /* a dense cache */
  arena_free(a);
}

Test(plan, no_decode_kernel_for_dropout) {
  Arena *a = arena_new();
  static const char drop[] =
      "attention g {\n  input q : bf16[B, H, S, 64];\n  input k : bf16[B, H, S, 64];\n"
      "  input v : bf16[B, H, S, 64];\n  scalar rate : f32 = 0.1;\n  scalar seed : u64 = 0;\n"
      "  scalar offset : u64 = 0;\n  s = q @ k^T;\n  p = dropout(softmax(s), rate, seed, offset);\n"
      "  o = p @ v;\n  output o : bf16[B, H, S, 64];\n}\n";
  IrModule *m = unit_build(a, "<drop>", drop);
  const GraphPlan *p = unit_compile(a, m, "sm_80", STAGE_PLAN).plans;
  cr_assert_eq(p->decode_bn, 0);
  cr_assert_null(unit_step(p, PLAN_FORWARD, "decode"));
  PlanProblem pr = {.B = 1, .H = 8, .Hk = 8, .Sq = 1, .Skv = 4096, .sms = 132};
  cr_assert_eq(plan_facts(p, &pr), 0u);
  arena_free(a);
}

/* An FP8 KV cache: a decode-only plan (no forward step; the pass needs the
 * decode fact), and located refusals where the decode kernel cannot run
 * the graph (head dim 64) or a backward is asked for. */
static char *fp8_kv_refusal(const char *text) {
  Arena *a = arena_new();
  IrModule *m = unit_build(a, "<fp8kv>", text);
  Diag d = {0};
  Compiled c;
  const CompileOptions o = {.arch = "sm_90a"};
  int rc = compile_module(m, &o, STAGE_PLAN, a, &d, &c);
  char *why = rc ? strdup(d.out.data ? d.out.data : "") : NULL;
  diag_free(&d);
  arena_free(a);
  return why;
}

/* An FP8 KV cache under a bf16 q, GQA, D 128 (two tests' graph). */
static const char KV8_SRC[] =
    "attention g {\n  input q : bf16[B, H, Sq, 128];\n  input k : e4m3[B, Hk, S, 128];\n"
    "  input v : e4m3[B, Hk, S, 128];\n  s = q @ k^T;\n  o = softmax(s) @ v;\n"
    "  output o : bf16[B, H, Sq, 128];\n}\n";

Test(plan, fp8_kv_caches_plan_the_forward_and_the_decode_kernel) {
  Arena *a = arena_new();
  IrModule *m = unit_build(a, "<kv8>", KV8_SRC);
  for (int arch = 0; arch < 2; arch++) { /* fwd_sm90 on sm_90a, K and V converted there */
    const Compiled uc = unit_compile(a, m, arch ? "sm_90a" : "sm_80", STAGE_PLAN);
    const GraphPlan *p = uc.plans;
    const PlanStep *f = unit_step(p, PLAN_FORWARD, "forward");
    cr_assert_not_null(f);
    cr_assert_str_eq(uc.graphs[0].cfg.name, arch ? "fwd_sm90" : "fwd_sm80");
    cr_assert_eq(f->nmaps, arch ? 3 : 0);
    if (arch) { /* q's map 16-bit, k's and v's 8-bit: boxes of 128 bytes either way */
      cr_assert(f->maps[0].dtype == DT_BF16 && f->maps[0].box_cols == 64);
      cr_assert(f->maps[1].dtype == DT_E4M3 && f->maps[1].box_cols == 128);
      cr_assert(f->maps[2].dtype == DT_E4M3 && f->maps[2].box_cols == 128);
    }
    cr_assert_not_null(unit_step(p, PLAN_FORWARD, "decode"));
    cr_assert_eq(p->pass[PLAN_FORWARD].need, 0u);
  }
  arena_free(a);

  /* Head dim 64: the decode kernel takes no 8-bit rows that narrow, so
   * the forward alone. */
  char *why = fp8_kv_refusal(
      "attention g {\n  input q : bf16[B, H, Sq, 64];\n  input k : e4m3[B, Hk, S, 64];\n"
      "  input v : e4m3[B, Hk, S, 64];\n  s = q @ k^T;\n  o = softmax(s) @ v;\n"
      "  output o : bf16[B, H, Sq, 64];\n}\n");
  cr_assert_null(why, "%s", why);
  why = fp8_kv_refusal(
      "attention g {\n  input q : bf16[B, H, S, 128];\n  input k : e4m3[B, H, S, 128];\n"
      "  input v : e4m3[B, H, S, 128];\n  s = q @ k^T;\n  o = softmax(s) @ v;\n"
      "  output o : bf16[B, H, S, 128];\n  output lse = logsumexp(s);\n  grad q;\n}\n");
  /* With grad: the FP8 backward (bwd_sm80 over 16-bit copies of k, v). */
  cr_assert_null(why, "%s", why);
}

/* The kv_copy variant: a dense FP8 cache under a 16-bit q gets a widen_kv
 * step before the forward, two 16-bit copies [B, Hk, Skv, D] in slots
 * after the decode's, and the forward's K and V maps over them; neither is
 * in a decode launch, whose kernel reads the cache itself. Paged caches,
 * packed sequences, 16-bit caches and other variants plan as before. */
Test(plan, kv_copy_widens_the_cache_before_the_forward) {
  Arena *a = arena_new();
  IrModule *m = unit_build(a, "<kv8>", KV8_SRC);
  const int variant = tmpl_sm90_variant_index("kv_copy");
  cr_assert_eq(variant, 8);
  cr_assert(tmpl_sm90_variant_kv_copy(variant, false) && !tmpl_sm90_variant_kv_copy(0, false));
  cr_assert(tmpl_sm90_variant_kv_copy(0, true), "auto: where Sq and Skv are one symbol");
  cr_assert(!tmpl_sm90_variant_kv_copy(tmpl_sm90_variant_index("kv8"), true));
  Diag d = {0};
  Compiled c;
  const CompileOptions o = {.arch = "sm_90a", .sm90_variant = variant};
  cr_assert_eq(compile_module(m, &o, STAGE_PLAN, a, &d, &c), 0);
  const FwdConfig *cfg = &c.graphs[0].cfg;
  const int nt = c.graphs[0].g->ntensors;
  cr_assert(cfg->kv_copy && cfg->copy_k == nt + 2 && cfg->copy_v == nt + 3);
  cr_assert(cfg->decode.on && cfg->decode.partial_lse == nt + 1, "the decode's slots come first");
  /* the 16-bit kernel's tiles (the FP8 cache's kv8 layout holds two stages of 8-bit staging) */
  Sm90Config h16;
  cr_assert_eq(tmpl_sm90_config(128, 128, 2, 2, false, SM90_O_TMA, false, 0, &h16), 0);
  cr_assert(cfg->bn == h16.bn && cfg->stages == h16.stages && cfg->smem_bytes == h16.smem_bytes);
  const PassPlan *pp = &c.plans[0].pass[PLAN_FORWARD];
  int widen = -1, fwd = -1;
  for (int k = 0; k < pp->nsteps; k++) {
    if (!strcmp(pp->steps[k].role, "widen_kv")) widen = k;
    if (!strcmp(pp->steps[k].role, "forward")) fwd = k;
  }
  cr_assert(widen >= 0 && fwd == widen + 1, "widen_kv right before the forward");
  const PlanStep *w = &pp->steps[widen];
  cr_assert_eq(w->deny, PLAN_IF_DECODE);
  cr_assert(w->threads == FWD_WIDEN_THREADS && w->grid.div0 == FWD_WIDEN_ROWS);
  cr_assert(w->grid.x0.kind == PD_SKV && w->grid.y.kind == PD_HK && w->grid.z.kind == PD_B);
  const PlanStep *f = &pp->steps[fwd];
  cr_assert_eq(f->nmaps, 4); /* q, the copies and O (staged, stored by TMA) */
  cr_assert(f->maps[1].slot == cfg->copy_k && f->maps[1].dtype == DT_BF16 && f->maps[1].box_cols == 64);
  cr_assert(f->maps[2].slot == cfg->copy_v && f->maps[2].dtype == DT_BF16 && f->maps[2].box_cols == 64);
  int copies = 0;
  for (int k = 0; k < pp->nslices; k++) {
    const PlanSlice *x = &pp->slices[k];
    if (x->slot != cfg->copy_k && x->slot != cfg->copy_v) continue;
    copies++;
    cr_assert(x->bind == PB_SLOT && x->elem == 2 && x->deny == PLAN_IF_DECODE);
    cr_assert(x->dims[0].kind == PD_B && x->dims[1].kind == PD_HK && x->dims[2].kind == PD_SKV);
    cr_assert(x->dims[3].kind == PD_CONST && x->dims[3].n == 128);
  }
  cr_assert_eq(copies, 2);
  PlanProblem pr = {.B = 2, .H = 8, .Hk = 2, .Sq = 100, .Skv = 300};
  for (int k = 0; k < pp->nslices; k++)
    if (pp->slices[k].slot == cfg->copy_k)
      cr_assert_eq(plan_slice_bytes(&c.plans[0], &pp->slices[k], &pr), (size_t)2 * 2 * 300 * 128 * 2);
  diag_free(&d);

  /* No copy: the default variant, a 16-bit cache, a paged cache, sm_80. */
  static const char *const others[] = {
      KV8_SRC,
      "attention g {\n  input q : bf16[B, H, Sq, 128];\n  input k : bf16[B, Hk, S, 128];\n"
      "  input v : bf16[B, Hk, S, 128];\n  s = q @ k^T;\n  o = softmax(s) @ v;\n"
      "  output o : bf16[B, H, Sq, 128];\n}\n",
      "attention g {\n  input q : bf16[B, H, Sq, 128];\n"
      "  input k_cache : e4m3[Pages, Hk, 64, 128];\n  input v_cache : e4m3[Pages, Hk, 64, 128];\n"
      "  input page_table : i32[B, MaxPages];\n  input kv_len : i32[B];\n"
      "  k = paged(k_cache, page_table);\n  v = paged(v_cache, page_table);\n"
      "  s = mask(q @ k^T, j < kv_len[b]);\n  o = softmax(s) @ v;\n"
      "  output o : bf16[B, H, Sq, 128];\n}\n",
  };
  for (int t = 0; t < 4; t++) {
    IrModule *mt = unit_build(a, "<other>", others[t == 3 ? 0 : t]);
    const CompileOptions ot = {.arch = t == 3 ? "sm_80" : "sm_90a", .sm90_variant = t ? variant : 0};
    Diag dt = {0};
    Compiled ct;
    cr_assert_eq(compile_module(mt, &ot, STAGE_PLAN, a, &dt, &ct), 0, "case %d", t);
    cr_assert(!ct.graphs[0].cfg.kv_copy, "case %d", t);
    cr_assert_null(unit_step(&ct.plans[0], PLAN_FORWARD, "widen_kv"), "case %d", t);
    diag_free(&dt);
  }
  /* q's sequence dim k's symbol: auto widens (Sq = Skv at every launch);
   * the kv8 variant keeps the in-kernel widening. */
  static const char same[] =
      "attention g {\n  input q : bf16[B, H, S, 128];\n  input k : e4m3[B, Hk, S, 128];\n"
      "  input v : e4m3[B, Hk, S, 128];\n  s = q @ k^T;\n  o = softmax(s) @ v;\n"
      "  output o : bf16[B, H, S, 128];\n}\n";
  for (int t = 0; t < 2; t++) {
    IrModule *mt = unit_build(a, "<same>", same);
    const CompileOptions ot = {.arch = "sm_90a", .sm90_variant = t ? tmpl_sm90_variant_index("kv8") : 0};
    Diag dt = {0};
    Compiled ct;
    cr_assert_eq(compile_module(mt, &ot, STAGE_PLAN, a, &dt, &ct), 0, "case %d", t);
    cr_assert_eq(ct.graphs[0].cfg.kv_copy, t == 0, "case %d", t);
    cr_assert_eq(unit_step(&ct.plans[0], PLAN_FORWARD, "widen_kv") != NULL, t == 0, "case %d", t);
    diag_free(&dt);
  }
  arena_free(a);
}

/* A paged KV cache: fwd_sm90 on sm_90a (TMA boxes within pages: maps over
 * the caches; an e4m3 cache's converted in shared memory), else the
 * portable forward (it gathers the pages row by row), beside the decode
 * kernel where that takes the graph, alone where it does not (an e4m3
 * cache at head dim 64). */
Test(plan, paged_caches_plan_a_forward_and_the_decode_kernel) {
  Arena *a = arena_new();
  static const char paged[] =
      "attention g {\n  input q : bf16[B, H, Sq, 128];\n  input kc : bf16[P, PS, Hk, 128];\n"
      "  input vc : bf16[P, PS, Hk, 128];\n  input t : i32[B, M];\n  input n : i32[B];\n"
      "  s = mask(q @ paged(kc, t)^T, j < n[b]);\n  o = softmax(s) @ paged(vc, t);\n"
      "  output o : bf16[B, H, Sq, 128];\n}\n"
      "attention h {\n  input q : bf16[B, H, Sq, 64];\n  input kc : e4m3[P, Hk, PS, 64];\n"
      "  input vc : e4m3[P, Hk, PS, 64];\n  input t : i32[B, M];\n"
      "  s = q @ paged_hnd(kc, t)^T;\n  o = softmax(s) @ paged_hnd(vc, t);\n"
      "  output o : bf16[B, H, Sq, 64];\n}\n";
  IrModule *m = unit_build(a, "<paged>", paged);
  for (int arch = 0; arch < 2; arch++) {
    const Compiled uc = unit_compile(a, m, arch ? "sm_90a" : "sm_80", STAGE_PLAN);
    for (int k = 0; k < 2; k++) {
      const GraphPlan *p = &uc.plans[k];
      const PlanStep *f = unit_step(p, PLAN_FORWARD, "forward");
      cr_assert_not_null(f);
      const bool sm90 = arch;
      cr_assert_str_eq(uc.graphs[k].cfg.name, sm90 ? "fwd_sm90" : "fwd_sm80");
      /* (q, the caches and O: auto stages a 16-bit O over a paged cache
       * too, since session 44) */
      cr_assert_eq(f->nmaps, sm90 ? 4 : 0);
      if (sm90) cr_assert_eq(f->maps[1].slot, 1); /* K's map over the cache */
      cr_assert_eq(f->deny, k == 0 ? (unsigned)PLAN_IF_DECODE : 0u);
      cr_assert_eq(unit_step(p, PLAN_FORWARD, "decode") != NULL, k == 0);
      cr_assert_eq(p->pass[PLAN_FORWARD].need, 0u);
    }
    /* The paged decode's splits make two CTAs an SM of the three its 68
     * KB leave resident (a dense cache's one CTA an SM: above). B 1, GQA
     * 32:8, 32k keys, 132 SMs: 8 items over 264 slots, 33 splits
     * (session 48's sweep: 32 the fastest, against a full wave's 49 and
     * one CTA an SM's 16); MHA: 32 items, 8 splits; B 8 GQA: 64 items, 4;
     * B 32 GQA: 256 items, 1 split; 500 items: none. */
    const GraphPlan *p = &uc.plans[0];
    cr_assert_eq(p->decode_wave, 3);
    PlanProblem pr = {.B = 1, .H = 32, .Hk = 8, .Sq = 1, .Skv = 32768, .sms = 132};
    cr_assert_eq(plan_decode_splits(p, &pr), 33);
    pr.Hk = 32;
    cr_assert_eq(plan_decode_splits(p, &pr), 8);
    pr = (PlanProblem){.B = 8, .H = 32, .Hk = 8, .Sq = 1, .Skv = 8192, .sms = 132};
    cr_assert_eq(plan_decode_splits(p, &pr), 4);
    pr = (PlanProblem){.B = 32, .H = 32, .Hk = 8, .Sq = 1, .Skv = 32768, .sms = 132};
    cr_assert_eq(plan_decode_splits(p, &pr), 1);
    pr.B = 500;
    cr_assert_eq(plan_decode_splits(p, &pr), 1);
    /* Short caches: at least two key tiles a split (1k keys: 16 tiles, 8). */
    pr = (PlanProblem){.B = 1, .H = 32, .Hk = 8, .Sq = 1, .Skv = 1024, .sms = 132};
    cr_assert_eq(plan_decode_splits(p, &pr), 8);
  }
  arena_free(a);
}

/* Which O fwd_sm90 stages in shared memory (match.c's SM90_O_TMA, auto's
 * O_STAGE_16): a dense or packed 16-bit O; not a packed 8-bit one (its
 * sequence ends would need 8-byte chunks), not an f32 one, not under
 * dropout; a dense 8-bit O only under the o_smem variant. */
Test(plan, the_forward_stages_a_16_bit_o) {
  Arena *a = arena_new();
  static const char text[] =
      "attention dense {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
      "  input v : bf16[B, H, S, 128];\n  o = softmax(mask(q @ k^T, j <= i)) @ v;\n"
      "  output o : bf16[B, H, S, 128];\n}\n"
      "attention packed16 {\n  input q : bf16[T, H, 128];\n  input k : bf16[T, H, 128];\n"
      "  input v : bf16[T, H, 128];\n  input cu : i32[B1];\n"
      "  o = softmax(packed(q, cu) @ packed(k, cu)^T) @ packed(v, cu);\n"
      "  output o : f16[T, H, 128];\n}\n"
      "attention packed8 {\n  input q : bf16[T, H, 128];\n  input k : bf16[T, H, 128];\n"
      "  input v : bf16[T, H, 128];\n  input cu : i32[B1];\n"
      "  o = softmax(packed(q, cu) @ packed(k, cu)^T) @ packed(v, cu);\n"
      "  output o : e4m3[T, H, 128];\n}\n"
      "attention wide {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
      "  input v : bf16[B, H, S, 128];\n  o = softmax(q @ k^T) @ v;\n"
      "  output o : f32[B, H, S, 128];\n}\n"
      "attention drop {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
      "  input v : bf16[B, H, S, 128];\n  scalar rate : f32 = 0.1;\n"
      "  scalar seed : u64 = 0;\n  scalar offset : u64 = 0;\n"
      "  o = dropout(softmax(q @ k^T), rate, seed, offset) @ v;\n"
      "  output o : bf16[B, H, S, 128];\n}\n";
  IrModule *m = unit_build(a, "<o_smem>", text);
  const Compiled uc = unit_compile(a, m, "sm_90a", STAGE_PLAN);
  static const int want[] = {2, 2, 0, 0, 0}; /* masked or packed D 128: two stages, two slots */
  for (int k = 0; k < 5; k++) {
    cr_assert_str_eq(uc.graphs[k].cfg.name, "fwd_sm90", "graph %d", k);
    cr_assert_eq(uc.graphs[k].cfg.o_smem, want[k], "graph %d: %d slots", k, uc.graphs[k].cfg.o_smem);
    const PlanStep *f = unit_step(&uc.plans[k], PLAN_FORWARD, "forward");
    cr_assert(f && f->nmaps == (want[k] ? 4 : 3), "graph %d", k);
  }
  arena_free(a);
}

/* FP8 q: the forward (no decode kernel takes an FP8 q), an amax_init step
 * before it, no backward. */
Test(plan, fp8_q_plans_amax_init_then_the_forward) {
  Arena *a = arena_new();
  static const char q8[] =
      "attention g {\n  input q : e4m3[B, H, S, 128];\n  input k : e4m3[B, H, S, 128];\n"
      "  input v : e4m3[B, H, S, 128];\n  s = q @ k^T;\n  out = softmax(s) @ v;\n"
      "  output o : e4m3[B, H, S, 128] = out * 2.0;\n  output am = amax(out);\n}\n";
  IrModule *m = unit_build(a, "<q8>", q8);
  const Compiled uc = unit_compile(a, m, "sm_90a", STAGE_PLAN);
  const PassPlan *pp = &uc.plans->pass[PLAN_FORWARD];
  cr_assert_eq(pp->nsteps, 2);
  cr_assert_str_eq(pp->steps[0].role, "amax_init");
  cr_assert_str_eq(pp->steps[1].role, "forward");
  cr_assert_null(unit_step(uc.plans, PLAN_FORWARD, "decode"));
  /* sm_90a: fwd_sm90 with 8-bit maps of 128-byte boxes; sm_80: fwd_sm80. */
  cr_assert_str_eq(uc.graphs[0].cfg.name, "fwd_sm90");
  const PlanStep *f = &pp->steps[1];
  cr_assert_eq(f->nmaps, 3);
  for (int k = 0; k < 3; k++) {
    cr_assert_eq(f->maps[k].dtype, DT_E4M3);
    cr_assert_eq(f->maps[k].box_cols, 128);
  }
  cr_assert_str_eq(unit_compile(a, m, "sm_80", STAGE_PLAN).graphs[0].cfg.name, "fwd_sm80");
  arena_free(a);
  char *why = fp8_kv_refusal(
      "attention g {\n  input q : e5m2[B, H, S, 128];\n  input k : e4m3[B, H, S, 128];\n"
      "  input v : e4m3[B, H, S, 128];\n  s = q @ k^T;\n  o = softmax(s) @ v;\n"
      "  output o : bf16[B, H, S, 128];\n  output lse = logsumexp(s);\n"
      "  grad q {\n    output dq : bf16;\n  }\n}\n");
  cr_assert_null(why, "%s", why); /* the FP8 backward takes it */
}

Test(plan, no_deterministic_backward_at_head_dim_256) {
  Arena *a = arena_new();
  static const char d256[] =
      "attention g {\n  input q : bf16[B, H, S, 256];\n  input k : bf16[B, H, S, 256];\n"
      "  input v : bf16[B, H, S, 256];\n  s = q @ k^T;\n  o = softmax(s) @ v;\n"
      "  output o : bf16[B, H, S, 256];\n  output lse = logsumexp(s);\n  grad q, k, v;\n}\n";
  IrModule *m = unit_build(a, "<d256>", d256);
  const GraphPlan *p = unit_compile(a, m, "sm_90a", STAGE_PLAN).plans;
  cr_assert(!p->pass[PLAN_BACKWARD].det_ok);
  /* split-D: one CTA per 64 keys, not persistent, no work queue. */
  const PlanStep *s = unit_step(p, PLAN_BACKWARD, "main");
  cr_assert(!s->persistent);
  cr_assert_eq(s->grid.div0, 64);
  for (int k = 0; k < p->pass[PLAN_BACKWARD].nslices; k++)
    cr_assert_neq(p->pass[PLAN_BACKWARD].slices[k].bind, PB_TILE_QUEUE);
  arena_free(a);
}

/* The decode kernel stays beside the forward for a P scaled by a value
 * fixed for the whole call, and is left out where it cannot serve: an
 * amax output (its epilogue does not reduce one), a scale that varies by
 * head (its tiles pack several heads' rows), an FP8 q. */
Test(plan, decode_beside_fp8_p_and_amax) {
  static const struct { const char *text; bool decode; } cases[] = {
      {"attention g {\n  input q : bf16[B, H, Sq, 128];\n  input k : bf16[B, Hk, S, 128];\n"
       "  input v : bf16[B, Hk, S, 128];\n  o = (e4m3(softmax(q @ k^T) * 448.0) @ v) * (1.0 / 448.0);\n"
       "  output o : bf16[B, H, Sq, 128];\n}\n", true},
      {"attention g {\n  input q : bf16[B, H, Sq, 128];\n  input k : bf16[B, Hk, S, 128];\n"
       "  input v : bf16[B, Hk, S, 128];\n  input sc : f32[H];\n"
       "  o = (e4m3(softmax(q @ k^T) * sc[h]) @ v);\n  output o : bf16[B, H, Sq, 128];\n}\n", false},
      {"attention g {\n  input q : bf16[B, H, Sq, 128];\n  input k : bf16[B, Hk, S, 128];\n"
       "  input v : bf16[B, Hk, S, 128];\n  out = softmax(q @ k^T) @ v;\n"
       "  output o : bf16[B, H, Sq, 128] = out;\n  output am = amax(out);\n}\n", false},
      {"attention g {\n  input q : e4m3[B, H, Sq, 128];\n  input k : e4m3[B, Hk, S, 128];\n"
       "  input v : e4m3[B, Hk, S, 128];\n  o = softmax(q @ k^T) @ v;\n"
       "  output o : bf16[B, H, Sq, 128];\n}\n", false},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    Arena *a = arena_new();
    IrModule *m = unit_build(a, "<p>", cases[c].text);
    const Compiled uc = unit_compile(a, m, "sm_90a", STAGE_PLAN);
    cr_assert_not_null(unit_step(uc.plans, PLAN_FORWARD, "forward"), "case %zu", c);
    cr_assert_eq(unit_step(uc.plans, PLAN_FORWARD, "decode") != NULL, cases[c].decode, "case %zu",
                 c);
    arena_free(a);
  }
}

/* ATTN_OPTION_EXP2_FMA's values (0 auto: none yet; 1 none; 2-5 one to four
 * quarters) reach fwd_sm90's config as 0-4 key blocks of four, and the
 * emitted unit as ATTN_EXP2_FMA only when some are on the FMA pipe; never
 * where P is rounded (FP8 P), nor on fwd_sm80. */
Test(plan, exp2_fma_quarters_follow_the_option) {
  static const char plain[] =
      "attention g {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
      "  input v : bf16[B, H, S, 128];\n  s = (q @ k^T) * 0.125;\n  s = 30.0 * tanh(s / 30.0);\n"
      "  output o : bf16[B, H, S, 128] = softmax(s) @ v;\n}\n";
  static const char fp8p[] =
      "attention g {\n  input q : e4m3[B, H, S, 128];\n  input k : e4m3[B, H, S, 128];\n"
      "  input v : e4m3[B, H, S, 128];\n  s = (q @ k^T) * 0.125;\n"
      "  output o : bf16[B, H, S, 128] = e4m3(softmax(s) * 448.0) @ v;\n}\n";
  static const struct {
    const char *src, *arch;
    int option, quarters;
  } cases[] = {{plain, "sm_90a", 0, 0}, {plain, "sm_90a", 1, 0}, {plain, "sm_90a", 2, 1},
               {plain, "sm_90a", 3, 2}, {plain, "sm_90a", 5, 4}, {plain, "sm_80", 3, 0},
               {fp8p, "sm_90a", 3, 0}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    Arena *a = arena_new();
    IrModule *m = unit_build(a, "g.attn", cases[k].src);
    Diag d = {0};
    Compiled c;
    const CompileOptions o = {.arch = cases[k].arch, .exp2_fma = cases[k].option};
    cr_assert_eq(compile_module(m, &o, STAGE_EMIT, a, &d, &c), 0, "case %zu: %s", k, d.out.data);
    cr_assert_eq(c.graphs[0].cfg.exp2_fma, cases[k].quarters, "case %zu", k);
    char want[64];
    snprintf(want, sizeof want, "#define ATTN_EXP2_FMA %d\n", cases[k].quarters);
    cr_assert_eq(strstr(c.source, "#define ATTN_EXP2_FMA") != NULL, cases[k].quarters > 0,
                 "case %zu", k);
    if (cases[k].quarters) cr_assert_not_null(strstr(c.source, want), "case %zu", k);
    diag_free(&d);
    arena_free(a);
  }
}

/* ATTN_EXP2_FMA's text, for the attnc command and the GPU tests: "0".."4"
 * quarters are option values 1-5; anything else is auto. */
Test(plan, exp2_fma_text_names_quarters) {
  static const struct {
    const char *text;
    int option;
  } cases[] = {{"0", 1}, {"1", 2}, {"4", 5}, {NULL, 0}, {"", 0}, {"5", 0}, {"12", 0}, {"-1", 0},
               {"a", 0}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
    cr_assert_eq(exp2_fma_option_of_text(cases[k].text), cases[k].option, "case %zu", k);
}
