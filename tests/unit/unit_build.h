/*
 * unit_build.h: the unit tests' front end in one call: parse and build a
 * test's .attn text, or fail the test with the diagnostics. Included by
 * the test files that need no diagnostics of their own (test_ir.c and the
 * parser and diagnostic tests inspect them and keep their own helpers).
 */
#ifndef ATTN_UNIT_BUILD_H
#define ATTN_UNIT_BUILD_H

#include <criterion/criterion.h>
#include <string.h>

#include "attnc.h"

/* The module built from text (named `name` in messages), allocated in a. */
static inline IrModule *unit_build(Arena *a, const char *name, const char *text) {
  Diag d = {0};
  Source *src = source_from_string(a, name, text, strlen(text));
  AstFile *ast = parse_source(src, a, &d);
  IrModule *m = d.nerrors ? NULL : ir_build(ast, a, &d);
  if (d.nerrors) cr_log_error("%s", d.out.data);
  diag_free(&d);
  cr_assert(m, "the test graph '%s' does not check", name);
  return m;
}

/* The passes after the front end for arch, up to `last`; fails the test
 * with the diagnostics when they refuse. */
static inline Compiled unit_compile(Arena *a, const IrModule *m, const char *arch, Stage last) {
  Diag d = {0};
  Compiled c;
  const CompileOptions o = {.arch = arch};
  int rc = compile_module(m, &o, last, a, &d, &c);
  if (rc) cr_log_error("%s", d.out.data ? d.out.data : "");
  diag_free(&d);
  cr_assert_eq(rc, 0, "the test graph does not compile for %s", arch);
  return c;
}

/* A pass's step of a role, or NULL. */
static inline const PlanStep *unit_step(const GraphPlan *gp, PlanPass pass, const char *role) {
  for (int k = 0; k < gp->pass[pass].nsteps; k++)
    if (!strcmp(gp->pass[pass].steps[k].role, role)) return &gp->pass[pass].steps[k];
  return NULL;
}

#endif
