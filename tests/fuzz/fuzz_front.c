/* fuzz_front.c: libFuzzer harness for the front end and the code
 * generator. Any byte string goes through source_from_string ->
 * parse_source -> (if it parsed) ir_build -> (if it built) the derived
 * backward of each graph with grad, and compile_module for sm_80 and
 * sm_90a (matcher, backward derivation, planner, emitters; no NVRTC) on a
 * fresh arena, which is then freed: the harness finds
 * crashes, hangs, leaks and sanitizer reports, and checks the promises
 * that every failure comes with a located error and that the plan reader
 * reads back exactly what the writer wrote. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Arena *a = arena_new();
  Diag d = {0};
  const Source *src =
      source_from_string(a, "fuzz.attn", (const char *)data, size);
  AstFile *ast = parse_source(src, a, &d);
  if (!ast)
    abort(); /* parse_source never returns NULL */
  if (d.nerrors == 0) {
    IrModule *m = ir_build(ast, a, &d);
    if (!m && d.nerrors == 0)
      abort(); /* a failed build must say why */
    /* The derived backward (and a grad block's edges) of every graph with
     * grad: derived, or refused with a located reason; its dump total. */
    for (int g = 0; m && g < m->ngraphs; g++) {
      if (!bwd_has_grad(m->graphs[g])) continue;
      Diag bd = {0};
      BwdGraph *bg = bwd_derive(m->graphs[g], a, &bd);
      if (!bg && bd.nerrors == 0) abort();
      if (bg) {
        StrBuf out = {0};
        bwd_dump(&out, bg);
        sb_free(&out);
      }
      diag_free(&bd);
    }
    static const char *const targets[] = {"sm_80", "sm_90a"};
    for (int t = 0; m && t < 2; t++) {
      Diag ed = {0};
      Compiled cm;
      const CompileOptions o = {.arch = targets[t]};
      int rc = compile_module(m, &o, STAGE_EMIT, a, &ed, &cm);
      if (rc != 0 && ed.nerrors == 0)
        abort(); /* a graph no template takes must say why */
      if (rc == 0) { /* the plans survive their text form unchanged */
        StrBuf w1 = {0}, w2 = {0}, err = {0};
        GraphPlan *back;
        int n;
        plan_write(&w1, cm.plans, cm.ngraphs);
        if (plan_read(w1.data, a, &back, &n, &err) != 0 || n != cm.ngraphs) abort();
        plan_write(&w2, back, n);
        if (w1.len != w2.len || memcmp(w1.data, w2.data, w1.len)) abort();
        sb_free(&w1);
        sb_free(&w2);
        sb_free(&err);
      }
      diag_free(&ed);
    }
  } else if (d.out.len == 0) {
    abort(); /* every counted error is shown or capped, never silent */
  }
  diag_free(&d);
  arena_free(a);
  return 0;
}
