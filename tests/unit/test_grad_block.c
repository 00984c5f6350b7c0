/*
 * test_grad_block.c: the backward's FP8 edges (a graph's grad block, P's
 * scale and rounding, a scaled attention output; docs/language.md "FP8
 * gradients") in the CPU reference: against central finite differences
 * where nothing is rounded, and against a naive loop nest of cuDNN's FP8
 * recipe, written here from the semantics, where everything is.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn_abi.h"
#include "ref.h"
#include "unit_build.h"

typedef struct GbRun {
  Arena *a;
  IrGraph *g;
  BwdGraph *bg;
  RefArgs args;
  double *dout; /* the incoming gradient as stored */
  int64_t ndout;
  RefTensor *grads;
  double amax[8];
} GbRun;

static int gb_tensor(const IrGraph *g, const char *name) {
  for (int t = 0; t < g->ntensors; t++)
    if (!strcmp(g->tensors[t].name, name)) return t;
  cr_assert_fail("no tensor '%s'", name);
  return -1;
}

/* Builds text, makes inputs of shape (descale[0] = 0.75 where declared),
 * runs the forward, draws dO (rounded to the block's type) and runs the
 * backward with its amax outputs. */
static GbRun gb_run(const char *text, const char *shape) {
  GbRun r = {.a = arena_new()};
  r.g = unit_build(r.a, "<grad block>", text)->graphs[0];
  Diag d = {0};
  r.bg = bwd_derive(r.g, r.a, &d);
  cr_assert(r.bg, "bwd_derive: %s", d.out.data ? d.out.data : "");
  diag_free(&d);
  r.args = (RefArgs){.g = r.g};
  StrBuf err = {0};
  cr_assert_eq(ref_make_inputs(&r.args, shape, 11, &err), 0, "%s", err.data);
  for (int t = 0; t < r.g->ntensors; t++)
    if (!strcmp(r.g->tensors[t].name, "descale")) r.args.tensors[t].data[0] = 0.75;
  cr_assert_eq(ref_forward(&r.args, &err), 0, "%s", err.data);
  const int ot = r.g->outputs[r.bg->o_output].tensor;
  r.ndout = ref_numel(&r.args.tensors[ot]);
  r.dout = malloc((size_t)r.ndout * sizeof *r.dout);
  const DType dt = r.g->grad && r.g->grad->v[IR_GRAD_DO].type != DT_NONE
                       ? r.g->grad->v[IR_GRAD_DO].type : DT_F32;
  RefRng rng = ref_rng(5, 3);
  for (int64_t e = 0; e < r.ndout; e++) r.dout[e] = dtype_round(dt, ref_rng_normal(&rng));
  r.grads = calloc((size_t)r.g->ntensors, sizeof *r.grads);
  cr_assert_eq(ref_backward_full(&r.args, r.bg, r.dout, NULL, NULL, r.grads, r.amax, &err), 0,
               "%s", err.data);
  sb_free(&err);
  return r;
}

static void gb_free(GbRun *r) {
  for (int t = 0; t < r->g->ntensors; t++) free(r->grads[t].data);
  free(r->grads);
  free(r->dout);
  ref_args_free(&r->args);
  arena_free(r->a);
}

/* Without roundings the block is arithmetic: the stored dq is scale_dq
 * times d/dq of sum(dO's value * o), where o = out * scale_o, out = (p *
 * scale_s @ v) * (descale_v / scale_s), and dO's value is do * descale[0]
 * (a one-element device tensor). */
Test(grad_block, scales_match_finite_differences) {
  GbRun r = gb_run("attention t {\n"
                   "  input q : f32[B, H, S, 8];\n  input k : f32[B, H, S, 8];\n"
                   "  input v : f32[B, H, S, 8];\n  input descale : f32[1];\n"
                   "  scalar scale_s : f32 = 3.0;\n  scalar descale_v : f32 = 0.5;\n"
                   "  scalar scale_o : f32 = 1.5;\n"
                   "  s = mask(q @ k^T * 0.3, j <= i);\n  p = softmax(s);\n"
                   "  out = ((p * scale_s) @ v) * (descale_v / scale_s);\n"
                   "  output o = out * scale_o;\n  output lse = logsumexp(s);\n"
                   "  grad q, k, v {\n"
                   "    do = do * descale[0];\n"
                   "    output dq = dq * 4.0;\n    output dk = dk / 2.0;\n"
                   "    output amax_dv = amax(dv);\n"
                   "  }\n}\n",
                   "B=2,H=2,S=5");
  const int ot = r.g->outputs[r.bg->o_output].tensor;
  const char *names[3] = {"q", "k", "v"};
  const double stored[3] = {4.0, 0.5, 1.0};
  const double h = 1e-5;
  StrBuf err = {0};
  for (int n = 0; n < 3; n++) {
    const int t = gb_tensor(r.g, names[n]);
    RefTensor *x = &r.args.tensors[t];
    double num = 0, den = 0;
    for (int64_t e = 0; e < ref_numel(x); e++) {
      double loss[2];
      const double keep = x->data[e];
      for (int side = 0; side < 2; side++) {
        x->data[e] = keep + (side ? -h : h);
        cr_assert_eq(ref_forward(&r.args, &err), 0, "%s", err.data);
        loss[side] = 0;
        for (int64_t i = 0; i < r.ndout; i++)
          loss[side] += r.dout[i] * 0.75 * r.args.tensors[ot].data[i];
      }
      x->data[e] = keep;
      const double fd = (loss[0] - loss[1]) / (2 * h), an = r.grads[t].data[e] / stored[n];
      num += (fd - an) * (fd - an);
      den += an * an;
    }
    cr_assert(den > 0, "d%s is all zero", names[n]);
    cr_expect(sqrt(num / den) < 1e-6, "d%s: relative error %g", names[n], sqrt(num / den));
  }
  double m = 0;
  const RefTensor *dv = &r.grads[gb_tensor(r.g, "v")];
  for (int64_t e = 0; e < ref_numel(dv); e++) m = fmax(m, fabs(dv->data[e]));
  cr_expect(m > 0 && r.amax[0] == m, "amax_dv %g, max |dv| %g", r.amax[0], m);
  sb_free(&err);
  gb_free(&r);
}

#define FP8_GRAPH                                                              \
  "attention fp8_train {\n"                                                   \
  "  input q : e4m3[B, H, S, 32];\n  input k : e4m3[B, H, S, 32];\n"          \
  "  input v : e4m3[B, H, S, 32];\n  input descale : f32[1];\n"               \
  "  scalar scale : f32 = 0.125;\n  scalar descale_q : f32 = 0.5;\n"          \
  "  scalar descale_k : f32 = 2.0;\n  scalar descale_v : f32 = 0.25;\n"       \
  "  scalar scale_s : f32 = 448.0;\n  scalar scale_o : f32 = 3.0;\n"          \
  "  s = (q @ k^T) * (scale * descale_q * descale_k);\n"                      \
  "  s = mask(s, j <= i);\n  p = softmax(s);\n"                               \
  "  out = (e4m3(p * scale_s) @ v) * (descale_v / scale_s);\n"                \
  "  output o : e4m3[B, H, S, 32] = out * scale_o;\n"                         \
  "  output lse = logsumexp(s);\n"                                            \
  "  grad q, k, v {\n"                                                        \
  "    scalar scale_dp : f32 = 64.0;\n"                                       \
  "    input do : e5m2;\n    do = do * descale[0];\n"                         \
  "    output amax_dp = amax(ds);\n"                                          \
  "    ds = e5m2(ds * scale_dp) / scale_dp;\n"                                \
  "    output dq : e4m3 = dq * 8.0;\n    output dk : e4m3 = dk * 16.0;\n"     \
  "    output dv : bf16;\n"                                                   \
  "    output amax_dq = amax(dq);\n    output amax_dv = amax(dv);\n"          \
  "    output amax_do = amax(do);\n"                                          \
  "  }\n}\n"

static double rel_err(const double *got, const double *want, int64_t n) {
  double num = 0, den = 0;
  for (int64_t e = 0; e < n; e++) {
    num += (got[e] - want[e]) * (got[e] - want[e]);
    den += want[e] * want[e];
  }
  cr_assert(den > 0, "the expected gradient is all zero");
  return sqrt(num / den);
}

/* The recipe by hand, per (b, h): S, P = exp(S - lse) (causal), P rounded
 * to e4m3 after scale_s, o from it, dO's value, dV, dP (through scale_s and
 * o's scale), delta from o, dS, its amax, dS rounded to e5m2 with
 * scale_dp, dQ and dK from the rounded dS, each stored scaled. */
Test(grad_block, fp8_recipe_by_hand) {
  GbRun r = gb_run(FP8_GRAPH, "B=2,H=2,S=24");
  const int64_t B = 2, H = 2, S = 24, D = 32;
  const double *q = r.args.tensors[gb_tensor(r.g, "q")].data;
  const double *k = r.args.tensors[gb_tensor(r.g, "k")].data;
  const double *v = r.args.tensors[gb_tensor(r.g, "v")].data;
  const double qk_scale = 0.125 * 0.5 * 2.0, c_o = 0.25 / 448.0 * 3.0, ddo = 0.75;
  const int64_t nq = B * H * S * D;
  double *dq = calloc((size_t)nq, sizeof *dq), *dk = calloc((size_t)nq, sizeof *dk);
  double *dv = calloc((size_t)nq, sizeof *dv);
  double amax_dp = 0, amax_do = 0;
  double *P = malloc(sizeof(double) * S * S), *pr = malloc(sizeof(double) * S * S);
  double *ds = malloc(sizeof(double) * S * S), *o = malloc(sizeof(double) * S * D);
  for (int64_t e = 0; e < nq; e++) amax_do = fmax(amax_do, fabs(r.dout[e] * ddo));
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const int64_t base = (b * H + h) * S * D;
      const double *qb = q + base, *kb = k + base, *vb = v + base, *dob = r.dout + base;
      for (int64_t i = 0; i < S; i++) {
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; j++) {
          double s = 0;
          for (int64_t d = 0; d < D; d++) s += qb[i * D + d] * kb[j * D + d];
          P[i * S + j] = s * qk_scale;
          m = fmax(m, P[i * S + j]);
        }
        for (int64_t j = 0; j <= i; j++) sum += exp(P[i * S + j] - m);
        const double lse = m + log(sum);
        for (int64_t j = 0; j < S; j++) {
          P[i * S + j] = j <= i ? exp(P[i * S + j] - lse) : 0;
          pr[i * S + j] = dtype_round(DT_E4M3, P[i * S + j] * 448.0);
        }
        for (int64_t d = 0; d < D; d++) {
          double acc = 0;
          for (int64_t j = 0; j < S; j++) acc += pr[i * S + j] * vb[j * D + d];
          o[i * D + d] = acc * c_o;
        }
      }
      for (int64_t i = 0; i < S; i++) {
        double delta = 0;
        for (int64_t d = 0; d < D; d++) delta += dob[i * D + d] * ddo * o[i * D + d];
        for (int64_t j = 0; j < S; j++) {
          double dpv = 0;
          for (int64_t d = 0; d < D; d++) dpv += dob[i * D + d] * ddo * vb[j * D + d];
          const double x = j <= i ? P[i * S + j] * (dpv * 448.0 * c_o - delta) : 0;
          amax_dp = fmax(amax_dp, fabs(x));
          ds[i * S + j] = x == 0 ? 0 : dtype_round(DT_E5M2, x * 64.0) / 64.0;
        }
      }
      for (int64_t i = 0; i < S; i++)
        for (int64_t j = 0; j < S; j++)
          for (int64_t d = 0; d < D; d++) {
            dq[base + i * D + d] += ds[i * S + j] * qk_scale * kb[j * D + d];
            dk[base + j * D + d] += ds[i * S + j] * qk_scale * qb[i * D + d];
            dv[base + j * D + d] += pr[i * S + j] * c_o * dob[i * D + d] * ddo;
          }
    }
  double amax_dq = 0, amax_dv = 0;
  for (int64_t e = 0; e < nq; e++) {
    amax_dq = fmax(amax_dq, fabs(dq[e]));
    amax_dv = fmax(amax_dv, fabs(dv[e]));
    dq[e] *= 8.0;
    dk[e] *= 16.0;
  }
  cr_expect(rel_err(r.grads[gb_tensor(r.g, "q")].data, dq, nq) < 1e-12, "dq");
  cr_expect(rel_err(r.grads[gb_tensor(r.g, "k")].data, dk, nq) < 1e-12, "dk");
  cr_expect(rel_err(r.grads[gb_tensor(r.g, "v")].data, dv, nq) < 1e-12, "dv");
  /* amax_dp, amax_dq, amax_dv, amax_do in the block's order */
  const double want[4] = {amax_dp, amax_dq, amax_dv, amax_do};
  for (int x = 0; x < 4; x++)
    cr_expect(want[x] > 0 && fabs(r.amax[x] - want[x]) <= 1e-12 * want[x], "%s: %.17g, want %.17g",
              r.g->grad->amax[x].name, r.amax[x], want[x]);
  free(dq);
  free(dk);
  free(dv);
  free(P);
  free(pr);
  free(ds);
  free(o);
  gb_free(&r);
}

/* The block is only at the backward's edges: with every scale 1 and no
 * rounding, the gradients are the plain graph's to the last bit. */
Test(grad_block, identity_block_changes_nothing) {
#define PLAIN(GRAD)                                                            \
  "attention t {\n"                                                           \
  "  input q : bf16[B, H, S, 16];\n  input k : bf16[B, H, S, 16];\n"          \
  "  input v : bf16[B, H, S, 16];\n"                                          \
  "  s = mask(q @ k^T * 0.25, j <= i);\n  p = softmax(s);\n"                  \
  "  output o = p @ v;\n  output lse = logsumexp(s);\n"                       \
  "  grad q, k, v" GRAD "\n}\n"
  const char *a = PLAIN(";");
  const char *b = PLAIN(" {\n    do = do * 1.0;\n    ds = ds / 1.0;\n    output dq : bf16 = dq * 1.0;\n  }");
#undef PLAIN
  GbRun x = gb_run(a, "B=1,H=2,S=9"), y = gb_run(b, "B=1,H=2,S=9");
  for (int t = 0; t < 3; t++) {
    const RefTensor *gx = &x.grads[t], *gy = &y.grads[t];
    cr_assert_eq(ref_numel(gx), ref_numel(gy));
    cr_expect(memcmp(gx->data, gy->data, (size_t)ref_numel(gx) * sizeof(double)) == 0,
              "d%s differs", x.g->tensors[t].name);
  }
  gb_free(&x);
  gb_free(&y);
}

/* `attnc ir --backward` names the block's edges. */
Test(grad_block, dump_names_the_edges) {
  Arena *a = arena_new();
  IrGraph *g = unit_build(a, "<grad block>", FP8_GRAPH)->graphs[0];
  Diag d = {0};
  BwdGraph *bg = bwd_derive(g, a, &d);
  cr_assert(bg, "%s", d.out.data ? d.out.data : "");
  StrBuf out = {0};
  bwd_dump(&out, bg);
  const char *want[] = {"given do : e5m2[B, H, S, 32] (the gradient of o), read as &",
                        "pr = e4m3(p * %", "ds = &", "stored as &", ": e4m3",
                        "amax_dp = max |&"};
  for (size_t x = 0; x < sizeof want / sizeof *want; x++)
    cr_expect(strstr(out.data, want[x]), "no '%s' in\n%s", want[x], out.data);
  sb_free(&out);
  diag_free(&d);
  arena_free(a);
}

/* The FP8 backward's plan: the block's amax outputs zeroed, the FP8
 * tensors copied to 16 bits, then delta, main and the convert passes, on
 * bwd_sm80 for sm_80 and bwd_sm90 for sm_90a (whose tensor maps of q and
 * dO name the bf16 copies), with no deterministic mode. */
Test(grad_block, plans_convert8_and_amax_init_on_either_template) {
  Arena *a = arena_new();
  IrModule *m = unit_build(a, "<grad block>", FP8_GRAPH);
  for (int arch = 0; arch < 2; arch++) {
    const Compiled c = unit_compile(a, m, arch ? "sm_90a" : "sm_80", STAGE_PLAN);
    cr_assert(c.graphs[0].bwd && c.graphs[0].bwd->fp8 && c.graphs[0].bwd->sm90 == (arch == 1));
    const PassPlan *pp = &c.plans[0].pass[PLAN_BACKWARD];
    cr_assert(!pp->det_ok);
    static const char *const roles[] = {"amax_init", "convert8", "delta", "main", "convert",
                                        "convert_kv"};
    cr_assert_eq(pp->nsteps, 6);
    for (int k = 0; k < 6; k++) cr_assert_str_eq(pp->steps[k].role, roles[k]);
    const BwdSlots *sl = &c.graphs[0].bwd->slots;
    cr_assert(sl->q16 >= 0 && sl->k16 >= 0 && sl->v16 >= 0 && sl->do16 >= 0);
    cr_assert_eq(sl->namax, 4);
    int copies = 0;
    for (int k = 0; k < pp->nslices; k++)
      if (pp->slices[k].elem == 2) copies++;
    cr_assert_eq(copies, 4);
    const PlanStep *main_step = &pp->steps[3];
    /* (sm_90a: q, dO, dQ's accumulator, then K and V of the persistent
     * kernel, by TMA: the copies too) */
    cr_assert_eq(main_step->nmaps, arch ? 5 : 0);
    static const int idx[5] = {ATTN_TMAP_Q, ATTN_TMAP_DO, ATTN_TMAP_DQA, ATTN_TMAP_BK, ATTN_TMAP_BV};
    for (int k = 0; arch && k < 5; k++) {
      cr_assert_eq(main_step->maps[k].index, idx[k]);
      if (k == 2) continue;
      const int want[5] = {sl->q16, sl->do16, 0, sl->k16, sl->v16};
      cr_assert_eq(main_step->maps[k].slot, want[k]);
      cr_assert_eq(main_step->maps[k].dtype, DT_BF16);
      if (k >= 3) cr_assert_eq(main_step->maps[k].box_rows, 128);
    }
  }
  const IrGraph *g = m->graphs[0];
  cr_assert_eq(bwd_grad_type(g, IR_GRAD_DO), DT_E5M2);
  cr_assert_eq(bwd_grad_type(g, IR_GRAD_DQ), DT_E4M3);
  cr_assert_eq(bwd_grad_type(g, IR_GRAD_DV), DT_BF16);
  arena_free(a);
}

/* bwd_sm90's FP8 tensor-core mode (bwd_template 91): FP8_GRAPH at head
 * dim 128 takes it, with transpose8 instead of convert8, the workspace's
 * Q^T with dO^T and K^T in the copies' slots (bytes, padded to whole
 * tiles) and four tensor maps; each condition it needs refuses it with its
 * reason, and then the bf16-copy path runs. */
static char *fp8_graph_at(const char *from, const char *to) {
  StrBuf b = {0};
  sb_puts(&b, FP8_GRAPH);
  for (char *x; (x = strstr(b.data, from));) {
    StrBuf c = {0};
    sb_printf(&c, "%.*s%s%s", (int)(x - b.data), b.data, to, x + strlen(from));
    sb_free(&b);
    b = c;
  }
  return b.data;
}

static const BwdSpec *fp8_mma_spec(Arena *a, const char *text, int tmpl) {
  IrModule *m = unit_build(a, "<fp8 mma>", text);
  Diag d = {0};
  Compiled c;
  const CompileOptions o = {.arch = "sm_90a", .bwd_template = tmpl};
  cr_assert_eq(compile_module(m, &o, STAGE_PLAN, a, &d, &c), 0, "%s", d.out.data);
  diag_free(&d);
  cr_assert(c.graphs[0].bwd);
  return c.graphs[0].bwd;
}

Test(grad_block, fp8_tensor_core_mode_plan) {
  Arena *a = arena_new();
  char *text = fp8_graph_at("32]", "128]");
  IrModule *m = unit_build(a, "<fp8 mma>", text);
  const CompileOptions o = {.arch = "sm_90a", .bwd_template = 91};
  Diag d = {0};
  Compiled c;
  cr_assert_eq(compile_module(m, &o, STAGE_PLAN, a, &d, &c), 0, "%s", d.out.data);
  const BwdSpec *b = c.graphs[0].bwd;
  cr_assert(b && b->fp8_mma && b->sm90 && b->persistent);
  cr_assert_eq(b->ds8, DT_E5M2);
  const PassPlan *pp = &c.plans[0].pass[PLAN_BACKWARD];
  static const char *const roles[] = {"amax_init", "transpose8", "delta", "main", "convert",
                                      "convert_kv"};
  cr_assert_eq(pp->nsteps, 6);
  for (int k = 0; k < 6; k++) cr_assert_str_eq(pp->steps[k].role, roles[k]);
  const BwdSlots *sl = &b->slots;
  int bytes = 0;
  for (int k = 0; k < pp->nslices; k++) {
    const PlanSlice *x = &pp->slices[k];
    cr_assert_neq(x->elem, 2, "no 16-bit copies: %s", x->name);
    if (x->elem != 1) continue;
    bytes++;
    cr_assert(x->slot == sl->q16 || x->slot == sl->k16);
    cr_assert_eq(x->dims[3].kind, x->slot == sl->q16 ? PD_SQ_PAD : PD_SKV_PAD);
    cr_assert_eq(x->dims[3].n, x->slot == sl->q16 ? 64 : 128);
  }
  cr_assert_eq(bytes, 2);
  const PlanStep *mn = &pp->steps[3];
  cr_assert_eq(mn->nmaps, 4);
  cr_assert_eq(mn->maps[0].slot, m->graphs[0]->q);
  cr_assert_eq(mn->maps[1].slot, sl->dout);
  cr_assert_eq(mn->maps[1].dtype, DT_E5M2);
  cr_assert_eq(mn->maps[3].index, ATTN_TMAP_QDT);
  cr_assert_eq(mn->maps[3].box_cols, 64);
  cr_assert_eq(mn->maps[3].box_rows, 256);
  /* Padded dims: Sq 100 -> 128, Skv 129 -> 256. */
  const PlanProblem pr = {.B = 1, .H = 1, .Hk = 1, .Sq = 100, .Skv = 129};
  cr_assert_eq(plan_dim(&c.plans[0], (PlanDim){PD_SQ_PAD, 64}, &pr), 128);
  cr_assert_eq(plan_dim(&c.plans[0], (PlanDim){PD_SKV_PAD, 128}, &pr), 256);
  /* The default takes the mode where it applies; option 90, the bf16-copy path. */
  cr_assert(fp8_mma_spec(a, text, 0)->fp8_mma);
  cr_assert(!fp8_mma_spec(a, text, 90)->fp8_mma);
  diag_free(&d);
  mem_free(text);
  arena_free(a);
}

Test(grad_block, fp8_tensor_core_mode_refusals) {
  static const struct {
    const char *from, *to, *why;
  } cases[] = {
      {"32]", "64]", "head dims of 128"},
      {"e5m2;", "bf16;", "FP8 q, k, v and dO"},
      {"e4m3(p * scale_s)", "(p * scale_s)", "P rounded to FP8"},
      {"e5m2(ds * scale_dp) / scale_dp", "bf16(ds * scale_dp) / scale_dp", "an FP8 rounding"},
      /* (the rounding's argument must be dS times or over fixed values:
       * the mode scales every element, zeros included, and folds the scale) */
      {"e5m2(ds * scale_dp) / scale_dp", "e5m2(ds * ds * scale_dp) / scale_dp", "rounding of dS"},
      {"e5m2(ds * scale_dp) / scale_dp", "e5m2(ds * scale_dp + 1.0) / scale_dp", "rounding of dS"},
      {"mask(s, j <= i)", "mask(tanh(s), j <= i)", "only masks dS"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    Arena *a = arena_new();
    char *text = fp8_graph_at("32]", "128]");
    if (strcmp(cases[k].from, "32]")) {
      char *t2 = NULL;
      StrBuf b = {0};
      char *x = strstr(text, cases[k].from);
      cr_assert(x, "case %zu", k);
      sb_printf(&b, "%.*s%s%s", (int)(x - text), text, cases[k].to, x + strlen(cases[k].from));
      t2 = b.data;
      mem_free(text);
      text = t2;
    } else {
      mem_free(text);
      text = fp8_graph_at("32]", "64]");
    }
    const BwdSpec *b = fp8_mma_spec(a, text, 91);
    cr_assert(!b->fp8_mma, "case %zu", k);
    DType ds8;
    const char *why = bwd_fp8_mma_refusal(b, &ds8);
    cr_assert(why && strstr(why, cases[k].why), "case %zu: %s", k, why ? why : "(none)");
    mem_free(text);
    arena_free(a);
  }
}

/* The GPU's refusal of text for arch: compile_module must fail, and its
 * diagnostics name the place `at` and say `why`. */
static void expect_gpu_refusal(const char *text, const char *arch, const char *at,
                               const char *why) {
  Arena *a = arena_new();
  IrModule *m = unit_build(a, "<grad block>", text);
  Diag d = {0};
  Compiled c;
  const CompileOptions o = {.arch = arch};
  cr_assert_neq(compile_module(m, &o, STAGE_PLAN, a, &d, &c), 0);
  cr_assert(strstr(d.out.data, at) && strstr(d.out.data, why), "%s", d.out.data);
  diag_free(&d);
  arena_free(a);
}

#define BF16_QKV                                                                   \
  "attention t {\n  input q : bf16[B, H, S, 64];\n"                                 \
  "  input k : bf16[B, H, S, 64];\n  input v : bf16[B, H, S, 64];\n"                \
  "  s = q @ k^T;\n  output o = softmax(s) @ v;\n  output lse = logsumexp(s);\n"

/* The GPU backward reads the stored dO, so its value must be dO times
 * values fixed for the call. */
Test(grad_block, a_nonlinear_incoming_gradient_is_refused_on_the_gpu) {
  expect_gpu_refusal(BF16_QKV "  grad q {\n    do = tanh(do);\n  }\n}\n", "sm_90a",
                     "<grad block>:9:5:", "times values fixed for the call");
}

/* The GPU backward reads dO as its MMAs' type (bf16 in the FP8 backward)
 * or converts it from FP8: another 16- or 32-bit type is refused, located
 * at the block's statement. */
Test(grad_block, an_incoming_gradient_of_another_type_is_refused_on_the_gpu) {
  expect_gpu_refusal(BF16_QKV "  grad q {\n    input do : f32;\n  }\n}\n", "sm_80",
                     "<grad block>:9:5:", "incoming gradient as bf16 or FP8, not f32");
}

/* The FP8 backward's MMAs take bf16: an f16 q, k or v (read as it is,
 * not copied) is refused, located at the tensor. */
Test(grad_block, f16_tensors_in_the_fp8_backward_are_refused) {
  expect_gpu_refusal("attention t {\n  input q : f16[B, H, S, 64];\n"
                     "  input k : e4m3[B, H, S, 64];\n  input v : e4m3[B, H, S, 64];\n"
                     "  s = q @ k^T;\n  output o : f16[B, H, S, 64] = softmax(s) @ v;\n"
                     "  output lse = logsumexp(s);\n"
                     "  grad q, k, v {\n    output dk : bf16;\n    output dv : bf16;\n"
                     "  }\n}\n",
                     "sm_90a", "<grad block>:2:9:",
                     "takes q, k and v in bf16 or FP8, not f16 ('q')");
}

/* bwd_sm90's wide mode (D 64, 128-query tiles) only for graphs whose dRaw
 * merely masks dS, whose masks read no tensor and are tile-classified, and
 * that take no bias gradient (bwd_wide_fits: ptxas serialized the wide
 * kernel's wgmma for the others, sessions 26 and 31). A sink's gradient
 * keeps it. */
Test(grad_block, wide_mode_only_where_it_fits) {
  static const struct {
    const char *score, *extra_input, *grad_extra;
    bool wide;
  } cases[] = {
      {"mask((q @ k^T) * 0.125, j <= i)", "", "", true},
      {"mask((q @ k^T) * 0.125, i < len_q[b] && j < len_k[b])",
       "  input len_q : i32[B];\n  input len_k : i32[B];\n", "", false},
      {"-softplus(-((q @ k^T) * 0.125))", "", "", false},
      {"(q @ k^T) * 0.125 + bias[i, j]", "  input bias : f32[S, S];\n", ", bias", false},
      /* a general predicate (session 31's sweep: `i % 2 == 0` serialized it) */
      {"mask((q @ k^T) * 0.125, i % 2 == 0)", "", "", false},
      /* tile-classified masks keep it: a window, and a disjunction of affine ones */
      {"mask((q @ k^T) * 0.125, j <= i && j > i - 64)", "", "", true},
      {"mask((q @ k^T) * 0.125, j <= i && (j < 4 || j > i - 64))", "", "", true},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    Arena *a = arena_new();
    char *text = arena_printf(a,
                              "attention w {\n"
                              "  input q : bf16[B, H, S, 64];\n  input k : bf16[B, H, S, 64];\n"
                              "  input v : bf16[B, H, S, 64];\n%s"
                              "  s = %s;\n  o = softmax(s) @ v;\n"
                              "  output o : bf16[B, H, S, 64];\n  output lse = logsumexp(s);\n"
                              "  grad q, k, v%s;\n}\n",
                              cases[k].extra_input, cases[k].score, cases[k].grad_extra);
    IrModule *m = unit_build(a, "<wide>", text);
    Diag d = {0};
    Compiled c;
    const CompileOptions o = {.arch = "sm_90a"};
    cr_assert_eq(compile_module(m, &o, STAGE_PLAN, a, &d, &c), 0, "case %zu: %s", k, d.out.data);
    diag_free(&d);
    const BwdSpec *b = c.graphs[0].bwd;
    cr_assert(b && b->sm90, "case %zu", k);
    cr_assert_eq(b->wide, cases[k].wide, "case %zu: wide %d", k, b->wide);
    arena_free(a);
  }
}

/* The stamps diagnostic (bwd_template 92, bench/bwd_stamps.py): a
 * persistent bwd_sm90 kernel takes ATTN_BWD_STAMPS under 92 alone; 0 and
 * 90 never do (the stamps overwrite dK's first row of each key tile). */
Test(grad_block, stamps_only_under_option_92) {
  static const char text[] = "attention st {\n"
                             "  input q : bf16[B, H, S, 128];\n"
                             "  input k : bf16[B, H, S, 128];\n"
                             "  input v : bf16[B, H, S, 128];\n"
                             "  s = q @ k^T;\n"
                             "  o = softmax(s) @ v;\n"
                             "  output o : bf16[B, H, S, 128];\n"
                             "  output lse = logsumexp(s);\n"
                             "  grad q, k, v;\n"
                             "}\n";
  static const int tmpl[] = {0, 90, 92};
  for (int k = 0; k < 3; k++) {
    Arena *a = arena_new();
    IrModule *m = unit_build(a, "<stamps>", text);
    const CompileOptions o = {.arch = "sm_90a", .bwd_template = tmpl[k]};
    Diag d = {0};
    Compiled c;
    cr_assert_eq(compile_module(m, &o, STAGE_EMIT, a, &d, &c), 0, "%s", d.out.data);
    diag_free(&d);
    const BwdSpec *b = c.graphs[0].bwd;
    cr_assert(b && b->sm90 && b->persistent);
    cr_assert_eq(b->stamps, tmpl[k] == 92, "template %d", tmpl[k]);
    cr_assert_eq(strstr(c.source, "#define ATTN_BWD_STAMPS 1") != NULL, tmpl[k] == 92,
                 "template %d", tmpl[k]);
    arena_free(a);
  }
}

/* BM-80 (bwd_template 93, 94 with dV's GEMM from shared memory, 95 with
 * dV and dK after one pass): head
 * dims 128 without dropout or a bias gradient take 80-query tiles, two
 * stages (231936 bytes of shared memory) and tensor maps of Q, dO and dQ's
 * accumulator boxed by 80 rows; head dim 64, dropout and options 0 and 90
 * keep 64. */
Test(grad_block, bm80_only_under_options_93_to_95_at_head_dims_128) {
  static const struct {
    const char *text;
    int tmpl;
    int bm80;
  } cases[] = {
      {"attention g {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
       "  input v : bf16[B, H, S, 128];\n  s = mask(q @ k^T, j <= i);\n"
       "  output o : bf16[B, H, S, 128] = softmax(s) @ v;\n  output lse = logsumexp(s);\n"
       "  grad q, k, v;\n}\n",
       93, 1},
      {"attention g {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
       "  input v : bf16[B, H, S, 128];\n  s = q @ k^T;\n"
       "  output o : bf16[B, H, S, 128] = softmax(s) @ v;\n  output lse = logsumexp(s);\n"
       "  grad q, k, v;\n}\n",
       94, 2},
      {"attention g {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
       "  input v : bf16[B, H, S, 128];\n  s = q @ k^T;\n"
       "  output o : bf16[B, H, S, 128] = softmax(s) @ v;\n  output lse = logsumexp(s);\n"
       "  grad q, k, v;\n}\n",
       95, 3},
      {"attention g {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
       "  input v : bf16[B, H, S, 128];\n  s = q @ k^T;\n"
       "  output o : bf16[B, H, S, 128] = softmax(s) @ v;\n  output lse = logsumexp(s);\n"
       "  grad q, k, v;\n}\n",
       90, 0},
      {"attention g {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
       "  input v : bf16[B, H, S, 128];\n  s = q @ k^T;\n"
       "  output o : bf16[B, H, S, 128] = softmax(s) @ v;\n  output lse = logsumexp(s);\n"
       "  grad q, k, v;\n}\n",
       0, 0},
      {"attention g {\n  input q : bf16[B, H, S, 128];\n  input k : bf16[B, H, S, 128];\n"
       "  input v : bf16[B, H, S, 128];\n  scalar seed : u64 = 1;\n  s = q @ k^T;\n"
       "  output o : bf16[B, H, S, 128] = dropout(softmax(s), 0.1, seed, 0) @ v;\n"
       "  output lse = logsumexp(s);\n  grad q, k, v;\n}\n",
       93, 0},
      {"attention g {\n  input q : bf16[B, H, S, 64];\n  input k : bf16[B, H, S, 64];\n"
       "  input v : bf16[B, H, S, 64];\n  s = q @ k^T;\n"
       "  output o : bf16[B, H, S, 64] = softmax(s) @ v;\n  output lse = logsumexp(s);\n"
       "  grad q, k, v;\n}\n",
       93, 0},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    Arena *a = arena_new();
    IrModule *m = unit_build(a, "<bm80>", cases[k].text);
    const CompileOptions o = {.arch = "sm_90a", .bwd_template = cases[k].tmpl};
    Diag d = {0};
    Compiled c;
    cr_assert_eq(compile_module(m, &o, STAGE_EMIT, a, &d, &c), 0, "%s", d.out.data);
    diag_free(&d);
    const BwdSpec *b = c.graphs[0].bwd;
    cr_assert(b && b->sm90, "case %zu", k);
    cr_assert_eq(b->bm80, cases[k].bm80, "case %zu", k);
    /* The main step's q, dO and dQ accumulator maps: boxes of the tile's rows. */
    const PassPlan *pp = &c.plans[0].pass[PLAN_BACKWARD];
    int boxed = 0;
    for (int st = 0; st < pp->nsteps; st++)
      for (int x = 0; !strcmp(pp->steps[st].role, "main") && x < pp->steps[st].nmaps; x++) {
        const PlanMap *mp = &pp->steps[st].maps[x];
        if (mp->index != ATTN_TMAP_Q && mp->index != ATTN_TMAP_DO && mp->index != ATTN_TMAP_DQA)
          continue;
        cr_assert_eq(mp->box_rows, cases[k].bm80 ? 80 : 64, "case %zu, map %s", k, mp->what);
        boxed++;
      }
    cr_assert_geq(boxed, 3, "case %zu", k);
    char def[32];
    snprintf(def, sizeof def, "#define ATTN_BWD_BM80 %d", cases[k].bm80);
    cr_assert_not_null(strstr(c.source, def), "case %zu", k);
    if (cases[k].bm80) {
      cr_assert_eq(b->smem_bytes, 231936, "case %zu: %d", k, b->smem_bytes);
      cr_assert_leq(b->smem_bytes, 227 * 1024);
    }
    arena_free(a);
  }
}
