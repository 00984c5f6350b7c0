/*
 * gpu_test.h: what every GPU test program shares: PASS/FAIL lines and the
 * counts its closing "N passed, N failed, N skipped" line reports.
 */
#ifndef ATTN_GPU_TEST_H
#define ATTN_GPU_TEST_H

#include <stdbool.h>
#include <stdio.h>

static int passed, failed, skipped;

static void verdict(bool ok, const char *what, const char *detail) {
  printf("%s: %s%s%s\n", ok ? "PASS" : "FAIL", what, detail && *detail ? ": " : "",
         detail ? detail : "");
  if (ok) passed++;
  else failed++;
}

#endif
