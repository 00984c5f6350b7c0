/* nvrtc.c: one generated translation unit -> cubin with NVRTC.
 *
 * NVRTC is opened at first need with dlopen, as cuda_driver.c opens
 * libcuda: a program built ahead of time (`attnc build`) loads kernels from
 * its own binary and never loads NVRTC unless it has to fall back to it,
 * and libattn links neither library. Without NVRTC, compiling fails with
 * "libnvrtc not found: ..." (ATTN_ERROR_COMPILE). The option list is fixed
 * and ordered so it can go into the cache key exactly as passed. */
#include <ctype.h>
#include <dlfcn.h>
#include <nvrtc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rt.h"

#ifndef ATTNC_CUDA_HOME
#define ATTNC_CUDA_HOME "/usr/local/cuda"
#endif

/* X(field, symbol): the handful of NVRTC functions used; the field's type
 * is the prototype nvrtc.h declares, so the ABI matches what we compile
 * against (these signatures are the same in NVRTC 12 and 13). */
#define NVRTC_FUNCS(X)                                                        \
  X(Version, nvrtcVersion)                                                    \
  X(GetErrorString, nvrtcGetErrorString)                                      \
  X(GetNumSupportedArchs, nvrtcGetNumSupportedArchs)                          \
  X(GetSupportedArchs, nvrtcGetSupportedArchs)                                \
  X(CreateProgram, nvrtcCreateProgram)                                        \
  X(CompileProgram, nvrtcCompileProgram)                                      \
  X(DestroyProgram, nvrtcDestroyProgram)                                      \
  X(GetProgramLogSize, nvrtcGetProgramLogSize)                                \
  X(GetProgramLog, nvrtcGetProgramLog)                                        \
  X(GetCUBINSize, nvrtcGetCUBINSize)                                          \
  X(GetCUBIN, nvrtcGetCUBIN)                                                  \
  X(GetPTXSize, nvrtcGetPTXSize)                                              \
  X(GetPTX, nvrtcGetPTX)

typedef struct NvrtcLib {
  void *handle;
#define X(field, sym) __typeof__(sym) *field;
  NVRTC_FUNCS(X)
#undef X
} NvrtcLib;

static NvrtcLib nvrtc_lib;
static bool nvrtc_ok;
static char nvrtc_error[768];
static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;

/* Tries ATTN_NVRTC (a path, for a particular NVRTC) alone when it is set;
 * else the sonames of NVRTC 13 and 12, the unversioned name, then the
 * same names under the toolkit attnc was built with (a program linked
 * statically has no run path of its own). */
static void nvrtc_open(void) {
  static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12",
                                      "libnvrtc.so"};
  const char *forced = getenv("ATTN_NVRTC");
  StrBuf tried = {0};
  if (forced && *forced) {
    nvrtc_lib.handle = dlopen(forced, RTLD_NOW | RTLD_LOCAL);
    sb_printf(&tried, "%s (from ATTN_NVRTC)", forced);
  } else {
    for (int pass = 0; pass < 2 && !nvrtc_lib.handle; pass++)
      for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[512];
        if (pass == 0) snprintf(path, sizeof path, "%s", names[k]);
        else snprintf(path, sizeof path, "%s/lib64/%s", ATTNC_CUDA_HOME,
                      names[k]);
        sb_printf(&tried, "%s%s", tried.len ? ", " : "", path);
        if ((nvrtc_lib.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL))) break;
      }
  }
  if (!nvrtc_lib.handle) {
    snprintf(nvrtc_error, sizeof nvrtc_error,
             "libnvrtc not found: tried %s; compiling kernels at run time "
             "needs the CUDA toolkit's NVRTC (kernels built ahead of time "
             "with `attnc build` do not)",
             tried.data ? tried.data : "nothing");
    sb_free(&tried);
    return;
  }
  sb_free(&tried);
#define X(field, sym)                                                         \
  *(void **)&nvrtc_lib.field = dlsym(nvrtc_lib.handle, #sym);                 \
  if (!nvrtc_lib.field) {                                                     \
    snprintf(nvrtc_error, sizeof nvrtc_error,                                 \
             "libnvrtc lacks %s: NVRTC 12.0 or newer is needed", #sym);       \
    dlclose(nvrtc_lib.handle);                                                \
    memset(&nvrtc_lib, 0, sizeof nvrtc_lib);                                  \
    return;                                                                   \
  }
  NVRTC_FUNCS(X)
#undef X
  nvrtc_ok = true;
}

/* The loaded library, or NULL with the reason appended to err. */
static const NvrtcLib *nvrtc_get(StrBuf *err) {
  pthread_once(&nvrtc_once, nvrtc_open);
  if (nvrtc_ok) return &nvrtc_lib;
  if (err) sb_puts(err, nvrtc_error);
  return NULL;
}

bool nvrtc_available(StrBuf *err) { return nvrtc_get(err) != NULL; }

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

/* nvrtc_fingerprint: nvrtc_open's candidates in its order, each looked up
 * by stat alone: ATTN_NVRTC when set; else each name in LD_LIBRARY_PATH's
 * directories and the usual system ones (the loader also reads
 * ld.so.cache, which this does not), then under the toolkit attnc was
 * built with. The first file found is named by device, inode, size and
 * modification time. Where the loader would find another file, the key
 * still changes with any file found here, which is what the cache needs.
 * dlopen of libnvrtc took 6-9 ms on the dev machine (session 19), many
 * times a whole warm load without it. */
static char nvrtc_fp[192];
static pthread_once_t nvrtc_fp_once = PTHREAD_ONCE_INIT;

static bool nvrtc_fp_stat(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  snprintf(nvrtc_fp, sizeof nvrtc_fp, "nvrtc %llx:%llx:%lld:%lld.%09ld",
           (unsigned long long)st.st_dev, (unsigned long long)st.st_ino, (long long)st.st_size,
           (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec);
  return true;
}

/* name under each directory of a ':'-separated list. */
static bool nvrtc_fp_in(const char *dirs, const char *name) {
  char path[1024];
  for (const char *d = dirs; d && *d;) {
    const char *end = strchr(d, ':');
    const size_t n = end ? (size_t)(end - d) : strlen(d);
    if (n > 0 && n + strlen(name) + 2 < sizeof path) {
      snprintf(path, sizeof path, "%.*s/%s", (int)n, d, name);
      if (nvrtc_fp_stat(path)) return true;
    }
    d = end ? end + 1 : NULL;
  }
  return false;
}

static void nvrtc_fp_find(void) {
  static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  static const char system_dirs[] =
      "/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib64:/usr/lib64:/lib:/usr/lib";
  const char *forced = getenv("ATTN_NVRTC");
  if (forced && *forced) {
    if (!nvrtc_fp_stat(forced)) snprintf(nvrtc_fp, sizeof nvrtc_fp, "nvrtc not found");
    return;
  }
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
    if (nvrtc_fp_in(getenv("LD_LIBRARY_PATH"), names[k]) || nvrtc_fp_in(system_dirs, names[k]))
      return;
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
    if (nvrtc_fp_in(ATTNC_CUDA_HOME "/lib64", names[k])) return;
  snprintf(nvrtc_fp, sizeof nvrtc_fp, "nvrtc not found");
}

const char *nvrtc_fingerprint(void) {
  pthread_once(&nvrtc_fp_once, nvrtc_fp_find);
  return nvrtc_fp;
}

int nvrtc_version(void) {
  const NvrtcLib *nv = nvrtc_get(NULL);
  int major = 0, minor = 0;
  if (!nv || nv->Version(&major, &minor) != NVRTC_SUCCESS) return 0;
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
  const NvrtcLib *nv = nvrtc_get(err);
  if (!nv) return false;
  int n = 0;
  if (nv->GetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0 || n > 256) {
    sb_printf(err, "NVRTC cannot list the architectures it supports");
    return false;
  }
  int archs[256];
  if (nv->GetSupportedArchs(archs) != NVRTC_SUCCESS) {
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

attn_status rt_device_arch(const RtDriver *d, CUdevice dev, char arch[16], StrBuf *err) {
  int major, minor;
  const attn_status st = rt_driver_cc(d, dev, &major, &minor, err);
  if (st == ATTN_SUCCESS) nvrtc_arch_for_cc(major, minor, arch);
  return st;
}

void nvrtc_output_free(NvrtcOutput *out) {
  mem_free(out->cubin);
  mem_free(out->ptx);
  mem_free(out->log);
  memset(out, 0, sizeof *out);
}

static char *nvrtc_take_log(const NvrtcLib *nv, nvrtcProgram prog) {
  size_t n = 0;
  if (nv->GetProgramLogSize(prog, &n) != NVRTC_SUCCESS || n == 0) n = 1;
  char *log = mem_alloc(n);
  if (!log) return NULL;
  log[0] = '\0';
  if (nv->GetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = '\0';
  log[n - 1] = '\0';
  return log;
}

static attn_status nvrtc_fail(const NvrtcLib *nv, StrBuf *err,
                              const char *what, nvrtcResult r) {
  sb_printf(err, "NVRTC %s failed: %s", what, nv->GetErrorString(r));
  return r == NVRTC_ERROR_OUT_OF_MEMORY ? ATTN_ERROR_OUT_OF_MEMORY
                                        : ATTN_ERROR_COMPILE;
}

/* Copies out the cubin and, when asked, the PTX of a compiled program. */
static attn_status nvrtc_take_code(const NvrtcLib *nv, nvrtcProgram prog,
                                   bool want_ptx, NvrtcOutput *out,
                                   StrBuf *err) {
  nvrtcResult r = nv->GetCUBINSize(prog, &out->cubin_len);
  if (r != NVRTC_SUCCESS) return nvrtc_fail(nv, err, "nvrtcGetCUBINSize", r);
  out->cubin = mem_alloc(out->cubin_len ? out->cubin_len : 1);
  if (!out->cubin) return ATTN_ERROR_OUT_OF_MEMORY;
  r = nv->GetCUBIN(prog, (char *)out->cubin);
  if (r != NVRTC_SUCCESS) return nvrtc_fail(nv, err, "nvrtcGetCUBIN", r);
  if (!want_ptx) return ATTN_SUCCESS;
  r = nv->GetPTXSize(prog, &out->ptx_len);
  if (r != NVRTC_SUCCESS) return nvrtc_fail(nv, err, "nvrtcGetPTXSize", r);
  out->ptx = mem_alloc(out->ptx_len ? out->ptx_len : 1);
  if (!out->ptx) return ATTN_ERROR_OUT_OF_MEMORY;
  r = nv->GetPTX(prog, out->ptx);
  if (r != NVRTC_SUCCESS) return nvrtc_fail(nv, err, "nvrtcGetPTX", r);
  if (out->ptx_len > 0 && out->ptx[out->ptx_len - 1] == '\0') out->ptx_len--;
  return ATTN_SUCCESS;
}

attn_status nvrtc_compile(const char *source, const char *name,
                          const NvrtcOptions *o, bool want_ptx,
                          NvrtcOutput *out, StrBuf *err) {
  memset(out, 0, sizeof *out);
  const NvrtcLib *nv = nvrtc_get(err);
  if (!nv) return ATTN_ERROR_COMPILE;
  nvrtcProgram prog;
  nvrtcResult r = nv->CreateProgram(&prog, source, name, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS)
    return nvrtc_fail(nv, err, "nvrtcCreateProgram", r);
  r = nv->CompileProgram(prog, o->n, o->v);
  out->log = nvrtc_take_log(nv, prog);
  attn_status st = ATTN_SUCCESS;
  if (!out->log) {
    st = ATTN_ERROR_OUT_OF_MEMORY;
  } else if (r != NVRTC_SUCCESS) {
    /* The generated source failing to compile is a bug in attnc: keep the
     * whole log so the report can be acted on. */
    sb_printf(err, "NVRTC could not compile the generated kernel for %s (%s):\n%s",
              o->arch_opt + strlen("--gpu-architecture="),
              nv->GetErrorString(r), out->log);
    st = r == NVRTC_ERROR_OUT_OF_MEMORY ? ATTN_ERROR_OUT_OF_MEMORY
                                        : ATTN_ERROR_COMPILE;
  } else {
    st = nvrtc_take_code(nv, prog, want_ptx, out, err);
  }
  nv->DestroyProgram(&prog);
  if (st != ATTN_SUCCESS) nvrtc_output_free(out);
  return st;
}
