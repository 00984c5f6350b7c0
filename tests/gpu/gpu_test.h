/*
 * gpu_test.h: what every GPU test program shares: PASS/FAIL lines and the
 * counts its closing "N passed, N failed, N skipped" line reports.
 */
#ifndef ATTN_GPU_TEST_H
#define ATTN_GPU_TEST_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "attn.h"
#include "attnc.h"
#include "cuda_driver.h"

static int passed, failed, skipped;

/* Where a test program's time goes, printed by gpu_time_report before its
 * closing line: its modules' compiles (NVRTC, or the cache: their main
 * programs; a decode or backward program compiles at its first launch, in
 * the rest), the CPU reference's runs, and the whole. */
static double gpu_t_start = -1, gpu_t_compile, gpu_t_ref;
static int gpu_n_compiles;

static double gpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

[[maybe_unused]] static attn_status gpu_compile_string(attn_context *ctx, const char *name,
                                                       const char *text, size_t len,
                                                       attn_module **out) {
  const double t0 = gpu_now();
  const attn_status st = attn_module_compile_string(ctx, name, text, len, out);
  gpu_t_compile += gpu_now() - t0;
  gpu_n_compiles++;
  return st;
}

[[maybe_unused]] static attn_status gpu_compile_file(attn_context *ctx, const char *path,
                                                     attn_module **out) {
  const double t0 = gpu_now();
  const attn_status st = attn_module_compile_file(ctx, path, out);
  gpu_t_compile += gpu_now() - t0;
  gpu_n_compiles++;
  return st;
}

[[maybe_unused]] static void gpu_time_report(void) {
  const double all = gpu_t_start < 0 ? 0 : gpu_now() - gpu_t_start;
  printf("time: %.1f s: %d module compiles %.1f s, CPU reference %.1f s, the rest (GPU runs, "
         "first launches' programs, checks) %.1f s\n",
         all, gpu_n_compiles, gpu_t_compile, gpu_t_ref, all - gpu_t_compile - gpu_t_ref);
}

static void verdict(bool ok, const char *what, const char *detail) {
  printf("%s: %s%s%s\n", ok ? "PASS" : "FAIL", what, detail && *detail ? ": " : "",
         detail ? detail : "");
  if (ok) passed++;
  else failed++;
}

/* The driver with device 0's primary context current; NULL after
 * printing why the GPU tests skip (the caller exits 0). */
static const RtDriver *gpu_test_driver(void) {
  StrBuf why = {0};
  attn_status st;
  const RtDriver *d = rt_driver(&st, &why);
  if (!d || rt_driver_make_current_primary(0, &why) != ATTN_SUCCESS) {
    printf("SKIP: GPU tests need a GPU: %s\n", why.data ? why.data : "no driver");
    d = NULL;
  }
  sb_free(&why);
  return d;
}

/* The option value ATTN_SM90_VARIANT names, 0 (auto) where it names none. */
static int gpu_test_sm90_variant(void) {
  const int variant = tmpl_sm90_variant_index(getenv("ATTN_SM90_VARIANT"));
  return variant > 0 ? variant : 0;
}

/* A context for the tests, without the disk cache (every compile is
 * fresh) unless ATTN_TEST_CACHE_DIR names one (tools/device_check.sh fills
 * it first with `attnc cache warm` on all the GPU machine's cores: the
 * same sources, knobs and target, so the same kernels, without a run's
 * one-at-a-time NVRTC compiles), with the Hopper forward's
 * variant ATTN_SM90_VARIANT names (tmpl_sm90.c) and the key blocks of four
 * whose exponentials run on the FMA pipe, ATTN_EXP2_FMA=0..4, as for the
 * attnc command; NULL when it cannot be made. */
static attn_context *gpu_test_context(void) {
  if (gpu_t_start < 0) gpu_t_start = gpu_now();
  attn_context *ctx;
  if (attn_context_create(&ctx) != ATTN_SUCCESS) return NULL;
  const char *cache = getenv("ATTN_TEST_CACHE_DIR");
  attn_context_set_cache_dir(ctx, cache && *cache ? cache : NULL);
  const int variant = gpu_test_sm90_variant();
  if (variant > 0) attn_context_set_option(ctx, ATTN_OPTION_SM90_VARIANT, variant);
  const int fma = exp2_fma_option_of_text(getenv("ATTN_EXP2_FMA"));
  if (fma > 0) attn_context_set_option(ctx, ATTN_OPTION_EXP2_FMA, fma);
  return ctx;
}

#endif
