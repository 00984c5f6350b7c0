/*
 * rt.h: libattn's internal header, one section per runtime file, in the
 * order a compile walks through them:
 *
 *   sha256.c   SHA-256 (FIPS 180-4), for cache keys and entry checksums
 *   nvrtc.c    CUDA C -> cubin with NVRTC, options, target names
 *   cache.c    the on-disk cubin cache (keyed, atomic, locked, verified)
 *   bind.c     tensor/scalar bindings checked against the IR graph
 *   dlpack.c   DLPack tensors -> the arguments of a tensor binding
 *   api.c      attn.h: contexts, modules, graphs, calls, launches
 *
 * The driver loader has its own header, cuda_driver.h, because tools and
 * GPU tests use it too. Internal names carry the file's prefix
 * (sha256_, nvrtc_, cache_, bind_, rt_).
 */
#ifndef ATTN_RT_H
#define ATTN_RT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "attn_abi.h"
#include "attnc.h"

/* -------------------------------------------------------------- sha256.c */

#define SHA256_BYTES 32
#define SHA256_HEX 65 /* 64 digits and a NUL */

typedef struct Sha256 {
  uint32_t h[8];
  uint64_t nbytes;
  unsigned char block[64];
  size_t nblock;
} Sha256;

void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t len);
void sha256_final(Sha256 *s, unsigned char out[SHA256_BYTES]);
void sha256(const void *data, size_t len, unsigned char out[SHA256_BYTES]);
void sha256_hex(const unsigned char digest[SHA256_BYTES], char out[SHA256_HEX]);

/* --------------------------------------------------------------- nvrtc.c */

/* The ordered NVRTC option list for one target. Options live in the
 * struct so the list can be hashed into the cache key as it is passed. */
#define NVRTC_MAX_OPTIONS 8
typedef struct NvrtcOptions {
  char arch_opt[48];
  const char *v[NVRTC_MAX_OPTIONS];
  int n;
} NvrtcOptions;

/* arch: "sm_80", "sm_90a", ... ; no_cache adds --no-cache (NVRTC 13 keeps
 * a cache of its own, which tests and benchmarks must bypass). */
void nvrtc_options(NvrtcOptions *o, const char *arch, bool no_cache);

typedef struct NvrtcOutput {
  unsigned char *cubin; /* malloc'd */
  size_t cubin_len;
  char *ptx; /* malloc'd, only when asked for */
  size_t ptx_len;
  char *log; /* malloc'd, NUL-terminated; ptxas -v resource report */
} NvrtcOutput;

/* Compiles one translation unit. On failure returns ATTN_ERROR_COMPILE
 * with NVRTC's log in err (or OUT_OF_MEMORY). */
attn_status nvrtc_compile(const char *source, const char *name,
                          const NvrtcOptions *o, bool want_ptx,
                          NvrtcOutput *out, StrBuf *err);
void nvrtc_output_free(NvrtcOutput *out);
/* major*1000 + minor*10, as CUDA_VERSION spells it (13.0 -> 13000);
 * 0 when NVRTC cannot be loaded. */
int nvrtc_version(void);
/* Whether NVRTC could be opened (dlopen at first need: libnvrtc.so.13,
 * .12, libnvrtc.so, then under the toolkit attnc was built with; or the
 * path in ATTN_NVRTC). If not, the reason ("libnvrtc not found: ...") is
 * appended to err (when non-NULL). */
bool nvrtc_available(StrBuf *err);
/* "sm_NN" or "sm_NNa"/"sm_NNNa" (also "f"): 1 when well formed. */
bool nvrtc_arch_valid(const char *arch);
/* Whether this NVRTC can emit code for arch; if not, err says which
 * targets it supports. */
bool nvrtc_arch_supported(const char *arch, StrBuf *err);
/* The target for a device of compute capability major.minor: 9.0 ->
 * "sm_90a" (wgmma), 10.0 -> "sm_100a", otherwise "sm_<major><minor>". */
void nvrtc_arch_for_cc(int major, int minor, char out[16]);

/* --------------------------------------------------------------- cache.c */

#define CACHE_FORMAT_VERSION 1

/* Everything that decides the bytes of a cubin. The source embeds the
 * templates and attn_abi.h, so the template set needs no separate hash:
 * CACHE_FORMAT_VERSION and ATTN_ABI_VERSION stand for it. */
typedef struct CacheKeyInput {
  const char *source;
  size_t source_len;
  int nvrtc_version;
  const char *arch;
  const char *const *options;
  int noptions;
  const char *const *entries;
  int nentries;
} CacheKeyInput;

void cache_key(const CacheKeyInput *in, unsigned char key[SHA256_BYTES]);

/* A cached compile: the cubin and NVRTC's log (resource usage). */
typedef struct CacheBlob {
  unsigned char *cubin;
  size_t cubin_len;
  char *log; /* NUL-terminated, may be "" */
  size_t log_len;
} CacheBlob;
void cache_blob_free(CacheBlob *b);

/* Fills out (malloc'd) on success; returns ATTN_SUCCESS or an error with
 * a message in err. Called at most once per key per process group. */
typedef attn_status (*CacheCompileFn)(void *user, CacheBlob *out,
                                      StrBuf *err);

typedef struct CacheMemEntry CacheMemEntry;
typedef struct Cache {
  char *root; /* NULL: no disk cache */
  CacheMemEntry *mem; /* in-memory entries, newest first */
  StrBuf warning; /* why the disk cache was abandoned, if it was */
  /* Counters for tests and `attnc -v`. */
  int hits_mem, hits_disk, compiles, corrupt_removed;
} Cache;

/* root NULL: memory only. */
int cache_init(Cache *c, const char *root);
void cache_free(Cache *c);
int cache_set_root(Cache *c, const char *root);
/* Finds the entry or compiles it (under the per-key lock) and stores it.
 * out gets a private copy. Disk trouble never fails the call: it becomes
 * a warning in c->warning and the entry stays in memory. */
attn_status cache_get(Cache *c, const char *arch,
                      const unsigned char key[SHA256_BYTES],
                      CacheCompileFn compile, void *user, CacheBlob *out,
                      StrBuf *err);
/* Path of an entry: ROOT/v1/ARCH/KK/KEY.bin. */
void cache_entry_path(StrBuf *out, const char *root, const char *arch,
                      const unsigned char key[SHA256_BYTES],
                      const char *suffix);
/* ${ATTN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attnc}; -1 when
 * none of those variables is set. */
int cache_default_root(StrBuf *out);
/* For `attnc cache`: one line per entry, "ARCH KEY SIZE MTIME\n" (mtime
 * as YYYY-MM-DD HH:MM:SS UTC); removing every entry, lock and stray temp
 * file. Both return 0, or -1 with a reason in out. */
int cache_list(const char *root, StrBuf *out);
int cache_clear(const char *root, StrBuf *out);

/* ---------------------------------------------------------------- bind.c */

/* The caller's bindings for one graph, checked as they arrive. */
typedef struct BindState {
  const IrGraph *g;
  bool tensor_bound[ATTN_MAX_TENSORS];
  int64_t shape[ATTN_MAX_TENSORS][IR_MAX_RANK];
  bool scalar_bound[ATTN_MAX_SCALARS];
  attn_params params;
} BindState;

void bind_init(BindState *b, const IrGraph *g);
attn_status bind_tensor(BindState *b, const char *name, void *ptr,
                        attn_dtype dtype, int ndim, const int64_t *shape,
                        const int64_t *strides, StrBuf *err);
/* type is the binding's: DT_F32, DT_I32, DT_U64 or DT_BOOL. */
attn_status bind_scalar(BindState *b, const char *name, DType type,
                        attn_scalar_arg v, StrBuf *err);
/* Checks completeness, fills defaults, dims and B/H/Hk/Sq/Skv. */
attn_status bind_finish(BindState *b, StrBuf *err);

/* -------------------------------------------------------------- dlpack.c */

/* A DLTensor read into attn_call_bind_tensor's arguments. */
typedef struct DlpackTensor {
  void *ptr; /* data + byte_offset */
  attn_dtype dtype;
  int ndim;
  int64_t shape[IR_MAX_RANK];
  const int64_t *strides; /* NULL (dense) or strides_buf */
  int64_t strides_buf[IR_MAX_RANK];
} DlpackTensor;

/* Checks the device (kDLCUDA or kDLCUDAManaged), the dtype (one lane) and
 * the rank; ATTN_ERROR_INVALID_ARGUMENT with a message naming `name`. */
attn_status dlpack_unpack(const void *dl_tensor, const char *name,
                          DlpackTensor *out, StrBuf *err);

/* ----------------------------------------------------------------- api.c */

/* Builds a module from a built IR (the arena passes to the module) and
 * its kernels, with an optional cubin (NULL: not compiled, so launches
 * fail with a message). Used by the compile path and by tests that build
 * IR graphs by hand. */
attn_status rt_module_from_ir(attn_context *ctx, Arena *a,
                              const IrModule *ir, const KernelInfo *kernels,
                              int nkernels, const char *arch,
                              const void *cubin, size_t cubin_len,
                              attn_module **out);
/* NVRTC's log for the module's cubin ("" on a cache hit that kept none,
 * or when the cache disabled logs); the target it was built for. */
const char *rt_module_log(const attn_module *m);
const char *rt_module_arch(const attn_module *m);
const char *rt_module_source(const attn_module *m);
/* The context's cache, for `attnc` to report hits and warnings. */
Cache *rt_context_cache(attn_context *ctx);

/* For backward.c: a call's context, error message (the context's), IR,
 * kernel table entry, bindings and backward scratch; and the backward's
 * entry `which` (KernelInfo.bwd_entry index) in the current context. */
typedef struct RtBwdScratch RtBwdScratch;
attn_context *rt_call_context(attn_call *c);
StrBuf *rt_call_error(attn_call *c);
const IrGraph *rt_call_ir(const attn_call *c);
const KernelInfo *rt_call_kernel(const attn_call *c);
BindState *rt_call_bind(attn_call *c);
RtBwdScratch **rt_call_bwd_scratch(attn_call *c);


/* ------------------------------------------------------------ backward.c */

/* Frees the scratch buffers (NULL: nothing). */
void rt_bwd_scratch_free(RtBwdScratch *s);

#endif
