/* nvrtc.c: one generated translation unit -> cubin with NVRTC.
 *
 * NVRTC is linked normally (it ships with the toolkit and works without a
 * GPU); only libcuda is opened at run time. The option list is fixed and
 * ordered so it can go into the cache key exactly as passed. */
#include <ctype.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

void nvrtc_options(NvrtcOptions *o, const char *arch, bool no_cache) {
  snprintf(o->arch_opt, sizeof o->arch_opt, "--gpu-architecture=%s", arch);
  o->n = 0;
  o->v[o->n++] = o->arch_opt;
  o->v[o->n++] = "-std=c++17";
  o->v[o->n++] = "-default-device";
  /* ptxas -v writes registers, spills and shared memory per kernel into
   * the program log, which `attnc` prints. */
  o->v[o->n++] = "--ptxas-options=-v";
  if (no_cache) o->v[o->n++] = "--no-cache";
}

int nvrtc_version(void) {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
  return major * 1000 + minor * 10;
}

/* sm_ followed by 2-3 digits and an optional 'a' or 'f' suffix. */
bool nvrtc_arch_valid(const char *arch) {
  if (!arch || strncmp(arch, "sm_", 3) != 0) return false;
  const char *p = arch + 3;
  int digits = 0;
  while (isdigit((unsigned char)p[digits])) digits++;
  if (digits < 2 || digits > 3 || p[0] == '0') return false;
  p += digits;
  if (*p == 'a' || *p == 'f') p++;
  return *p == '\0';
}

static int nvrtc_arch_number(const char *arch) {
  return atoi(arch + 3);
}

bool nvrtc_arch_supported(const char *arch, StrBuf *err) {
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0 || n > 256) {
    sb_printf(err, "NVRTC cannot list the architectures it supports");
    return false;
  }
  int archs[256];
  if (nvrtcGetSupportedArchs(archs) != NVRTC_SUCCESS) {
    sb_printf(err, "NVRTC cannot list the architectures it supports");
    return false;
  }
  int want = nvrtc_arch_number(arch);
  for (int i = 0; i < n; i++)
    if (archs[i] == want) return true;
  int v = nvrtc_version();
  sb_printf(err, "NVRTC %d.%d cannot compile for %s; it supports:", v / 1000,
            v % 1000 / 10, arch);
  for (int i = 0; i < n; i++) sb_printf(err, " sm_%d", archs[i]);
  return false;
}

void nvrtc_arch_for_cc(int major, int minor, char out[16]) {
  /* The 'a' targets unlock the architecture-specific instructions the
   * Hopper and Blackwell templates use (wgmma, setmaxnreg, tcgen05). */
  if ((major == 9 || major == 10) && minor == 0)
    snprintf(out, 16, "sm_%d%da", major, minor);
  else
    snprintf(out, 16, "sm_%d%d", major, minor);
}

void nvrtc_output_free(NvrtcOutput *out) {
  free(out->cubin);
  free(out->ptx);
  free(out->log);
  memset(out, 0, sizeof *out);
}

static char *nvrtc_take_log(nvrtcProgram prog) {
  size_t n = 0;
  if (nvrtcGetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n == 0) n = 1;
  char *log = malloc(n);
  if (!log) return NULL;
  log[0] = '\0';
  if (nvrtcGetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = '\0';
  log[n - 1] = '\0';
  return log;
}

static attn_status nvrtc_fail(StrBuf *err, const char *what,
                              nvrtcResult r) {
  sb_printf(err, "NVRTC %s failed: %s", what, nvrtcGetErrorString(r));
  return r == NVRTC_ERROR_OUT_OF_MEMORY ? ATTN_ERROR_OUT_OF_MEMORY
                                        : ATTN_ERROR_COMPILE;
}

/* Copies out the cubin and, when asked, the PTX of a compiled program. */
static attn_status nvrtc_take_code(nvrtcProgram prog, bool want_ptx,
                                   NvrtcOutput *out, StrBuf *err) {
  nvrtcResult r = nvrtcGetCUBINSize(prog, &out->cubin_len);
  if (r != NVRTC_SUCCESS) return nvrtc_fail(err, "nvrtcGetCUBINSize", r);
  out->cubin = malloc(out->cubin_len ? out->cubin_len : 1);
  if (!out->cubin) return ATTN_ERROR_OUT_OF_MEMORY;
  r = nvrtcGetCUBIN(prog, (char *)out->cubin);
  if (r != NVRTC_SUCCESS) return nvrtc_fail(err, "nvrtcGetCUBIN", r);
  if (!want_ptx) return ATTN_SUCCESS;
  r = nvrtcGetPTXSize(prog, &out->ptx_len);
  if (r != NVRTC_SUCCESS) return nvrtc_fail(err, "nvrtcGetPTXSize", r);
  out->ptx = malloc(out->ptx_len ? out->ptx_len : 1);
  if (!out->ptx) return ATTN_ERROR_OUT_OF_MEMORY;
  r = nvrtcGetPTX(prog, out->ptx);
  if (r != NVRTC_SUCCESS) return nvrtc_fail(err, "nvrtcGetPTX", r);
  if (out->ptx_len > 0 && out->ptx[out->ptx_len - 1] == '\0') out->ptx_len--;
  return ATTN_SUCCESS;
}

attn_status nvrtc_compile(const char *source, const char *name,
                          const NvrtcOptions *o, bool want_ptx,
                          NvrtcOutput *out, StrBuf *err) {
  memset(out, 0, sizeof *out);
  nvrtcProgram prog;
  nvrtcResult r = nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) return nvrtc_fail(err, "nvrtcCreateProgram", r);
  r = nvrtcCompileProgram(prog, o->n, o->v);
  out->log = nvrtc_take_log(prog);
  attn_status st = ATTN_SUCCESS;
  if (!out->log) {
    st = ATTN_ERROR_OUT_OF_MEMORY;
  } else if (r != NVRTC_SUCCESS) {
    /* The generated source failing to compile is a bug in attnc: keep the
     * whole log so the report can be acted on. */
    sb_printf(err, "NVRTC could not compile the generated kernel for %s (%s):\n%s",
              o->arch_opt + strlen("--gpu-architecture="),
              nvrtcGetErrorString(r), out->log);
    st = r == NVRTC_ERROR_OUT_OF_MEMORY ? ATTN_ERROR_OUT_OF_MEMORY
                                        : ATTN_ERROR_COMPILE;
  } else {
    st = nvrtc_take_code(prog, want_ptx, out, err);
  }
  nvrtcDestroyProgram(&prog);
  if (st != ATTN_SUCCESS) nvrtc_output_free(out);
  return st;
}
