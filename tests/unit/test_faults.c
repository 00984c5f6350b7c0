/*
 * test_faults.c: libattn keeps its promise when memory runs out. For
 * n = 1, 2, ... the n-th allocation of a run fails (mem_fail_nth), and a
 * run makes every public call a program makes without a GPU: a context,
 * its options, compiling a source from a string and from a file (the
 * front end, every pass, the disk cache and the plan reader), a source
 * with errors, an embedded module, a graph, a call, bindings, the
 * deterministic mode, workspace sizes and launches (which stop at the
 * missing driver). Every call must return (nothing aborts; the sanitizers
 * see no bad access and no leak), a run whose injected failure was hit
 * must have reported ATTN_ERROR_OUT_OF_MEMORY, the context must then be
 * sticky (its next call returns it too) and, after
 * attn_context_clear_error, usable again: the same compile succeeds.
 * Runs until a run ends before its n-th allocation.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt.h"
#include "unit_build.h"

static const char good_src[] =
    "attention doc {\n"
    "  input q : bf16[B, H, Sq, 64];\n"
    "  input k : bf16[B, Hk, Skv, 64];\n"
    "  input v : bf16[B, Hk, Skv, 64];\n"
    "  input doc_q : i32[B, Sq];\n"
    "  input doc_k : i32[B, Skv];\n"
    "  scalar scale : f32 = 0.125;\n"
    "  s = (q @ k^T) * scale;\n"
    "  s = 30.0 * tanh(s / 30.0);\n"
    "  s = mask(s, doc_q[b, i] == doc_k[b, j] && j <= i);\n"
    "  o = softmax(s) @ v;\n"
    "  output o : bf16[B, H, Sq, 64];\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v;\n"
    "}\n"
    /* The FP8 backward's paths: a grad block, its slots, hooks and plan. */
    "attention fp8 {\n"
    "  input q : e4m3[B, H, S, 64];\n"
    "  input k : e4m3[B, H, S, 64];\n"
    "  input v : e4m3[B, H, S, 64];\n"
    "  input descale : f32[1];\n"
    "  s = mask(q @ k^T * 0.125, j <= i);\n"
    "  out = (e4m3(softmax(s) * 448.0) @ v) / 448.0;\n"
    "  output o : e4m3[B, H, S, 64] = out * 2.0;\n"
    "  output lse = logsumexp(s);\n"
    "  grad q, k, v {\n"
    "    input do : e5m2;\n"
    "    do = do * descale[0];\n"
    "    output amax_dp = amax(ds);\n"
    "    ds = e5m2(ds * 16.0) / 16.0;\n"
    "    output dq : bf16;\n"
    "    output dk : e4m3 = dk * 4.0;\n"
    "    output dv : bf16;\n"
    "    output amax_dk = amax(dk);\n"
    "  }\n"
    "}\n";
static const char bad_src[] = "attention bad {\n  input q : bf16[B, H, S, 64];\n  s = q @ k^T;\n}\n";

static char dir[64];
static char file[96];

/* Status of every call of one run, in order (the test prints them when
 * a check fails). */
typedef struct Run {
  attn_status st[64];
  int n;
  bool oom; /* some call returned ATTN_ERROR_OUT_OF_MEMORY */
} Run;

static attn_status note(Run *r, attn_status st) {
  if (r->n < 64) r->st[r->n++] = st;
  if (st == ATTN_ERROR_OUT_OF_MEMORY) r->oom = true;
  return st;
}

static attn_embedded em;
static attn_embedded_image images[1];
static const unsigned char fake_cubin[] = {0x7f, 'E', 'L', 'F', 0};
static char *em_plans; /* plan_write of good_src for sm_80 */

/* Everything a program without a GPU can ask of the library. */
static void run_all(Run *r, attn_context **out_ctx) {
  attn_context *ctx = NULL;
  if (note(r, attn_context_create(&ctx)) != ATTN_SUCCESS) return;
  *out_ctx = ctx;
  note(r, attn_context_set_cache_dir(ctx, dir));
  note(r, attn_context_set_arch(ctx, "sm_80"));
  note(r, attn_context_set_option(ctx, ATTN_OPTION_SM90_VARIANT, 0));
  attn_module *m = NULL, *m2 = NULL, *m3 = NULL, *bad = NULL;
  note(r, attn_module_compile_string(ctx, "doc.attn", good_src, sizeof good_src - 1, &m));
  note(r, attn_module_compile_string(ctx, "bad.attn", bad_src, sizeof bad_src - 1, &bad));
  note(r, attn_module_compile_file(ctx, file, &m2));
  note(r, attn_module_load_embedded(ctx, &em, &m3));
  attn_module *kept = NULL;
  note(r, attn_context_embedded_module(ctx, &em, &kept));
  attn_graph *g = NULL;
  attn_call *c = NULL;
  if (m && note(r, attn_module_get_graph(m, NULL, &g)) == ATTN_SUCCESS &&
      note(r, attn_call_create(g, &c)) == ATTN_SUCCESS) {
    static const int64_t q[4] = {2, 4, 100, 64}, kv[4] = {2, 2, 130, 64};
    static const int64_t dq[2] = {2, 100}, dk[2] = {2, 130}, lse[3] = {2, 4, 100};
    void *p = (void *)0x100000;
    note(r, attn_call_bind_tensor(c, "q", p, ATTN_BF16, 4, q, NULL));
    note(r, attn_call_bind_tensor(c, "k", p, ATTN_BF16, 4, kv, NULL));
    note(r, attn_call_bind_tensor(c, "v", p, ATTN_BF16, 4, kv, NULL));
    note(r, attn_call_bind_tensor(c, "doc_q", p, ATTN_I32, 2, dq, NULL));
    note(r, attn_call_bind_tensor(c, "doc_k", p, ATTN_I32, 2, dk, NULL));
    note(r, attn_call_bind_tensor(c, "o", p, ATTN_BF16, 4, q, NULL));
    note(r, attn_call_bind_tensor(c, "lse", p, ATTN_F32, 3, lse, NULL));
    note(r, attn_call_bind_tensor(c, "do", p, ATTN_BF16, 4, q, NULL));
    note(r, attn_call_bind_tensor(c, "dq", p, ATTN_BF16, 4, q, NULL));
    note(r, attn_call_bind_tensor(c, "dk", p, ATTN_BF16, 4, kv, NULL));
    note(r, attn_call_bind_tensor(c, "dv", p, ATTN_BF16, 4, kv, NULL));
    note(r, attn_call_bind_tensor(c, "nope", p, ATTN_BF16, 4, kv, NULL)); /* an error message */
    note(r, attn_call_bind_f32(c, "scale", 0.1f));
    note(r, attn_call_set_deterministic(c, 1));
    size_t bytes;
    note(r, attn_call_workspace_size(c, ATTN_PASS_FORWARD, &bytes));
    note(r, attn_call_workspace_size(c, ATTN_PASS_BACKWARD, &bytes));
    note(r, attn_call_launch(c, NULL));
    note(r, attn_call_launch_backward(c, NULL));
  }
  attn_call_destroy(c);
  /* The FP8 backward's bindings: dO in the block's type, an amax output. */
  attn_call *c8 = NULL;
  if (m && note(r, attn_module_get_graph(m, "fp8", &g)) == ATTN_SUCCESS &&
      note(r, attn_call_create(g, &c8)) == ATTN_SUCCESS) {
    static const int64_t x[4] = {2, 4, 96, 64}, one = 1;
    void *p = (void *)0x100000;
    note(r, attn_call_bind_tensor(c8, "do", p, ATTN_E5M2, 4, x, NULL));
    note(r, attn_call_bind_tensor(c8, "dq", p, ATTN_BF16, 4, x, NULL));
    note(r, attn_call_bind_tensor(c8, "amax_dp", p, ATTN_F32, 1, &one, NULL));
    size_t bytes;
    note(r, attn_call_workspace_size(c8, ATTN_PASS_BACKWARD, &bytes));
    note(r, attn_call_launch_backward(c8, NULL));
  }
  attn_call_destroy(c8);
  attn_module_destroy(m);
  attn_module_destroy(m2);
  attn_module_destroy(m3);
  attn_module_destroy(bad);
}

static void setup(void) {
  setenv("ATTN_NO_CACHE", "0", 1);
  snprintf(dir, sizeof dir, "/tmp/attnc-faults-XXXXXX");
  cr_assert(mkdtemp(dir));
  snprintf(file, sizeof file, "%s/doc.attn", dir);
  FILE *f = fopen(file, "w");
  cr_assert(f);
  fputs(good_src, f);
  fclose(f);
  /* The embedded module: good_src with its sm_80 plans and a fake cubin
   * (nothing loads it without a driver). */
  Arena *a = arena_new();
  IrModule *ir = unit_build(a, "doc.attn", good_src);
  Compiled cm = unit_compile(a, ir, "sm_80", STAGE_PLAN);
  StrBuf sb = {0};
  plan_write(&sb, cm.plans, cm.ngraphs);
  em_plans = strdup(sb.data);
  sb_free(&sb);
  arena_free(a);
  images[0] = (attn_embedded_image){"sm_80", 0, fake_cubin, sizeof fake_cubin, em_plans};
  em = (attn_embedded){ATTN_EMBEDDED_FORMAT, ATTN_ABI_VERSION, ATTNC_VERSION, "doc.attn",
                       good_src, sizeof good_src - 1, images, 1};
}

static void teardown(void) {
  free(em_plans);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_assert_eq(system(cmd), 0);
}

TestSuite(faults, .init = setup, .fini = teardown, .timeout = 600);

Test(faults, every_allocation_failing_in_turn) {
  /* Warm the disk cache (NVRTC once), so the runs exercise reading it. */
  attn_context *ctx;
  cr_assert_eq(attn_context_create(&ctx), ATTN_SUCCESS);
  cr_assert_eq(attn_context_set_cache_dir(ctx, dir), ATTN_SUCCESS);
  attn_module *m;
  attn_status st = attn_context_set_arch(ctx, "sm_80");
  if (st == ATTN_SUCCESS)
    st = attn_module_compile_string(ctx, "doc.attn", good_src, sizeof good_src - 1, &m);
  if (st != ATTN_SUCCESS) {
    const char *why = attn_context_error(ctx);
    bool no_nvrtc = strstr(why, "libnvrtc") != NULL;
    attn_context_destroy(ctx);
    if (no_nvrtc) cr_skip_test("NVRTC is not installed: %s", why);
    cr_assert_fail("the warm-up compile failed: %s", why);
  }
  attn_module_destroy(m);
  attn_context_destroy(ctx);
  Run clean = {0};
  attn_context *c0 = NULL;
  mem_fail_nth(0);
  long before = mem_allocations();
  run_all(&clean, &c0);
  long per_run = mem_allocations() - before;
  cr_assert(!clean.oom, "a run without injected failures ran out of memory");
  attn_context_destroy(c0);
  cr_log_info("one run makes %ld allocations", per_run);
  int hit = 0;
  for (long n = 1;; n++) {
    Run r = {0};
    attn_context *c = NULL;
    mem_fail_nth(n);
    run_all(&r, &c);
    bool reached = !mem_fail_pending();
    mem_fail_nth(0);
    if (!r.oom && !reached) { /* the run ended before its n-th allocation */
      attn_context_destroy(c);
      cr_assert_gt(n, per_run / 2, "stopped after %ld of %ld allocations", n, per_run);
      break;
    }
    hit++;
    cr_assert(r.oom, "allocation %ld failed but no call said out of memory", n);
    if (c) {
      /* Sticky until cleared, then usable: the same compile works. */
      attn_module *again = NULL;
      attn_status st2 = attn_module_compile_string(c, "doc.attn", good_src, sizeof good_src - 1,
                                                  &again);
      bool sticky = st2 == ATTN_ERROR_OUT_OF_MEMORY;
      bool ok = sticky || st2 == ATTN_SUCCESS; /* the failure may have hit a call's own object */
      cr_assert(ok, "allocation %ld: after out of memory, a compile returned %d: %s", n, st2,
                attn_context_error(c));
      attn_module_destroy(again);
      again = NULL;
      attn_context_clear_error(c);
      /* (The failed call may have been one of these.) */
      cr_assert_eq(attn_context_set_cache_dir(c, dir), ATTN_SUCCESS);
      cr_assert_eq(attn_context_set_arch(c, "sm_80"), ATTN_SUCCESS);
      cr_assert_eq(attn_module_compile_string(c, "doc.attn", good_src, sizeof good_src - 1,
                                              &again),
                   ATTN_SUCCESS, "allocation %ld: the context is not usable after clearing: %s",
                   n, attn_context_error(c));
      attn_module_destroy(again);
      attn_context_destroy(c);
    }
  }
  cr_log_info("%d runs hit their injected failure", hit);
  cr_assert_gt(hit, 100);
}
