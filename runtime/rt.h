/*
 * rt.h: libattn's internal header, one section per runtime file, in the
 * order a compile walks through them:
 *
 *   sha256.c   SHA-256 (FIPS 180-4), for cache keys (sha256_x86.c: its
 *              block function on the SHA extensions)
 *   crc32c.c   CRC-32C, the cache entries' checksum
 *   nvrtc.c    CUDA C -> cubin with NVRTC, options, target names
 *   cache.c    the on-disk cubin cache (keyed, atomic, locked, verified)
 *   bind.c     tensor/scalar bindings checked against the IR graph
 *   dlpack.c   DLPack tensors -> the arguments of a tensor binding
 *   api.c      attn.h: contexts, modules, graphs, calls (the structs below)
 *   jit.c      a module from .attn text: plans, the kernel cache, NVRTC
 *   embedded.c a module from an `attnc build` image
 *   tmap.c     the TMA tensor maps of a plan step
 *   launch.c   runs a pass of a graph's plan: workspace, grids, launches
 *   backward.c the backward's bindings checked before its pass
 *   signature.c a graph's tensors and scalars, for other languages' bindings
 *   partials.c the kernels of partial results, attn_merge_partials
 *   ring.c     context parallelism: ring attention over a transport
 *   ring_nccl.c the ring's transport over NCCL (libnccl opened at run time)
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
/* sha256_x86.c: the block function on the x86 SHA extensions, and whether
 * this CPU has them. sha256_use_portable(true) makes sha256.c keep to its
 * portable loop (tests compare the two). */
bool sha256_x86_available(void);
void sha256_x86_blocks(uint32_t h[8], const unsigned char *p, size_t nblocks,
                       const uint32_t k[64]);
void sha256_use_portable(bool portable);

/* -------------------------------------------------------------- crc32c.c */

/* CRC-32C of len bytes, continuing crc (0 to start; crc32c(crc32c(0, a),
 * b) is the CRC of a then b): the cache entries' checksum.
 * crc32c_use_portable(true) keeps to the table even where SSE 4.2 is. */
uint32_t crc32c(uint32_t crc, const void *data, size_t len);
void crc32c_use_portable(bool portable);

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
/* Which NVRTC library nvrtc_open would load, found without loading it
 * ("nvrtc DEV:INODE:SIZE:MTIME" of the file, or "nvrtc not found"), for the
 * cache key: a warm load must not pay dlopen of a 100 MB library. */
const char *nvrtc_fingerprint(void);
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

#define CACHE_FORMAT_VERSION 3 /* 3: NVRTC named by its file (nvrtc_fingerprint); CRC-32C checksum */

/* Everything that decides the bytes of a cubin. The source embeds the
 * templates and attn_abi.h, so the template set needs no separate hash:
 * CACHE_FORMAT_VERSION and ATTN_ABI_VERSION stand for it. */
typedef struct CacheKeyInput {
  const char *source;
  size_t source_len;
  /* The NVRTC that compiles a miss (nvrtc_fingerprint): a new NVRTC
   * makes new entries. A cubin stays valid for its target whichever NVRTC
   * made it, so this need only change when NVRTC does. */
  const char *compiler;
  const char *arch;
  const char *const *options;
  int noptions;
  const char *const *entries;
  int nentries;
  /* What the entry keeps beside the cubin (the launch plans): a cubin is
   * reused only with the plans it was made with. The forward's program of
   * a module compiled in two does not show the backward's template choice,
   * which its plans do. NULL: none. */
  const char *meta;
} CacheKeyInput;

void cache_key(const CacheKeyInput *in, unsigned char key[SHA256_BYTES]);

/* A cached compile: the cubin and NVRTC's log (resource usage). */
typedef struct CacheBlob {
  unsigned char *cubin;
  size_t cubin_len;
  char *log; /* NUL-terminated, may be "" */
  size_t log_len;
  /* NUL-terminated: "source NAME", "target ARCH" lines, then the launch
   * plans (plan_write), which `attnc cache list` and the loader read. */
  char *meta;
  size_t meta_len;
} CacheBlob;
void cache_blob_free(CacheBlob *b);
/* A compile's entry: nv's cubin and log move into out (nv's PTX is
 * freed), with a copy of meta; OUT_OF_MEMORY (nv freed) when that copy
 * fails. The compile functions of jit.c and partials.c end so. */
attn_status cache_blob_take(CacheBlob *out, NvrtcOutput *nv, const char *meta, StrBuf *err);

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

/* ------------------------------------------ the library's objects (api.c) */

#include "cuda_driver.h"

/* The target NVRTC compiles for device dev (nvrtc_arch_for_cc of its
 * compute capability); the driver's error appended to err (nvrtc.c). */
attn_status rt_device_arch(const RtDriver *d, CUdevice dev, char arch[16], StrBuf *err);

/* Embedded modules a context loaded for generated NAME_launch code. */
typedef struct RtEmbeddedModule {
  const attn_embedded *em;
  attn_module *m;
  struct RtEmbeddedModule *next;
} RtEmbeddedModule;

/* Tuning knobs (attn_context_set_option): compile options for the
 * modules it compiles, and the persistent kernels' CTA cap for launches. */
typedef struct RtOptions {
  int bwd_template, sm90_variant, exp2_fma;
  long long persistent_ctas; /* 0: the SM count */
  long long decode_splits;   /* 0: plan_decode_splits' choice */
  bool no_decode;            /* ATTN_OPTION_DECODE 0 */
  bool no_overlap;           /* ATTN_OPTION_LAUNCH_OVERLAP 0 */
} RtOptions;

/* The kernels of partial results (templates/ring.cuh; partials.c), loaded
 * on first use for one target; RtPartialKernel indexes kern. */
typedef enum RtPartialKernel {
  RT_PARTIAL_MERGE,   /* one partial folded into a running (o, lse) */
  RT_PARTIAL_ADD,     /* f32 sums of a piece's rows */
  RT_PARTIAL_STORE,   /* f32 into the caller's type */
  RT_PARTIAL_MERGE_N, /* attn_merge_partials */
  RT_PARTIAL_NKERNELS
} RtPartialKernel;
typedef struct RtPartialKernels {
  char arch[16];
  CUlibrary lib;
  CUkernel kern[RT_PARTIAL_NKERNELS];
} RtPartialKernels;

struct attn_context {
  StrBuf error;
  char arch[16];   /* "" until attn_context_set_arch */
  bool disk_cache; /* the caller's wish; the Cache may still fall back */
  Cache cache;
  RtOptions options;
  RtEmbeddedModule *embedded;
  RtPartialKernels partials;
  bool oom; /* sticky: host memory ran out (rt_end); attn_context_clear_error */
};

/* A graph's kernels: the plan's steps, resolved once the module's library
 * is loaded (kern) and per CUDA context (fn, in fn_ctx). */
struct attn_graph {
  attn_module *m;
  const IrGraph *ir;
  const GraphPlan *plan;
  CUkernel kern[PLAN_NPASSES][PLAN_MAX_STEPS];
  CUfunction fn[PLAN_NPASSES][PLAN_MAX_STEPS];
  CUcontext fn_ctx;
  /* The backward's binding names ("do", "dq", ...), made on the first
   * attn_graph_tensor that asks (signature.c), freed with the module. */
  char *grad_name[4 + BWD_MAX_BIAS];
};

/* A program of a module compiled apart (attn_module.apart): its cache key
 * text (emit_unit_key), entries and meta, then its cubin and library. */
typedef enum RtApartKind { RT_APART_DECODE, RT_APART_BACKWARD, RT_NAPART } RtApartKind;
typedef struct RtApart {
  bool on;
  EmitPart part; /* EMIT_DECODE, EMIT_BACKWARD */
  const char *key, *meta;
  const char **entries;
  int nentries;
  unsigned char *cubin;
  size_t cubin_len;
  CUlibrary lib;
  bool loaded;
} RtApart;

struct attn_module {
  attn_context *ctx;
  Arena *arena;    /* the IR, plans and emitted source live here */
  const IrModule *ir;
  char arch[16];   /* what the image was built for ("sm_90" for PTX) */
  char target[16]; /* what it was chosen for: the device's target */
  attn_source_kind kind;
  unsigned char *cubin; /* or NUL-terminated PTX */
  size_t cubin_len;
  char *log;
  CUlibrary lib;
  bool loaded;
  attn_graph *graphs;
  int ngraphs;
  /* A JIT module's compile (its matched and planned graphs, the options
   * with arch pointing at arch above): what NVRTC's source is emitted
   * from, on a cache miss only (runtime/jit.c). NULL for embedded images. */
  const Compiled *cm;
  CompileOptions opt;
  /* Programs compiled apart (a JIT module's; jit.c): the decode kernels
   * (RT_APART_DECODE) and the backward pass's (RT_APART_BACKWARD), each an
   * NVRTC program of its own, compiled (through the cache) and loaded on
   * the first launch of a step it holds, so a forward waits for neither.
   * A program not `on` is in lib. */
  RtApart apart[RT_NAPART];
};

/* A pass's library-owned workspace, grown on demand and kept for the next
 * launch; `zeroed` is the layout whose PZ_NEW slices it last zeroed. */
typedef struct RtWorkspace {
  CUdeviceptr ptr;
  size_t bytes;
  unsigned long long zeroed;
} RtWorkspace;

struct attn_call {
  attn_graph *g;
  BindState bind;
  void *tile_counter;
  bool deterministic; /* attn_call_set_deterministic */
  RtWorkspace ws[PLAN_NPASSES];
};

/* Every public call: rt_begin (the context's sticky out-of-memory state)
 * and rt_end (host memory that ran out during the call becomes
 * ATTN_ERROR_OUT_OF_MEMORY and that state), through RT_CALL below. */
attn_status rt_begin(attn_context *ctx);
attn_status rt_end(attn_context *ctx, attn_status st);
/* The public calls: each one's _impl between rt_begin and rt_end. A call
 * that made an object (out) and then ran out of memory gives it back. */
#define RT_CALL(ctx, call)                                                                      \
  do {                                                                                          \
    attn_context *ctx_ = (ctx);                                                                 \
    attn_status st_ = rt_begin(ctx_);                                                           \
    return st_ ? st_ : rt_end(ctx_, (call));                                                    \
  } while (0)
#define RT_CALL_OUT(ctx, call, out, destroy)                                                    \
  do {                                                                                          \
    attn_context *ctx_ = (ctx);                                                                 \
    attn_status st_ = rt_begin(ctx_);                                                           \
    if (st_) {                                                                                  \
      if (out) *(out) = NULL;                                                                   \
      return st_;                                                                               \
    }                                                                                           \
    attn_status made_ = (call);                                                                 \
    st_ = rt_end(ctx_, made_);                                                                  \
    if (st_ && !made_ && out && *(out)) {                                                       \
      destroy(*(out));                                                                          \
      *(out) = NULL;                                                                            \
    }                                                                                           \
    return st_;                                                                                 \
  } while (0)
/* The context's last error: clears it, or sets it (returning st). */
void rt_clear_error(attn_context *ctx);
attn_status rt_fail(attn_context *ctx, attn_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Builds a module from a built IR (the arena passes to the module), its
 * plans as plan_write wrote them, and an optional image (NULL: not
 * compiled, so launches fail with a message). The one way modules are
 * made: from a compile, the cache and embedded images alike, and by tests
 * that build IR graphs by hand. */
attn_status rt_module_from_ir(attn_context *ctx, Arena *a, const IrModule *ir,
                              const char *plan_text, const char *arch, const void *cubin,
                              size_t cubin_len, attn_module **out);
/* Loads the module's library once and resolves every step's kernel. */
attn_status rt_module_load(attn_module *m, const RtDriver *d);
/* Which program holds a step of pass with role when the programs in
 * apart are compiled apart: an RtApartKind, or RT_NAPART for the main one
 * (the one rule jit.c splits the entries by and the loader finds them by). */
int rt_program_of(const bool apart[RT_NAPART], PlanPass pass, const char *role);
/* The same for step k of pass in graph gp of module m. */
int rt_step_apart(const attn_module *m, const GraphPlan *gp, PlanPass pass, int k);
/* The library that holds that step loaded (a program compiled apart is
 * compiled first) and its kernels found. */
attn_status rt_module_load_step(attn_module *m, const RtDriver *d, const GraphPlan *gp,
                                PlanPass pass, int k);
/* A pass of the compiler under a memory scope (compiler/mem.c): running
 * out of memory or a broken invariant inside becomes the context's error
 * and OUT_OF_MEMORY or INTERNAL, never an abort. */
attn_status rt_scoped(attn_context *ctx, void (*pass)(void *), void *arg, Diag *d);
/* The target: the one set on the context, else the current device's. */
attn_status rt_target_arch(attn_context *ctx, char arch[16]);
/* Loads m now when a driver and a context for its target exist. */
attn_status rt_module_try_load(attn_module *m);
/* Plans read from text and checked against a module's graphs (rt_scoped
 * pass; rc 0, or -1 with why). */
typedef struct RtPlans {
  const char *text;
  Arena *a;
  const IrModule *ir;
  GraphPlan *plans;
  int rc;
  Diag why; /* why not (its StrBuf) */
} RtPlans;
void rt_plans_pass(void *arg);

/* ------------------------------------------------------ jit.c (and embedded.c) */

/* The front end on a file (path) or a string (name, text, len): checked
 * IR in a fresh arena a, or the context's error (IO, SOURCE) with a freed. */
typedef struct RtFront {
  Arena *a;
  const char *path;
  const char *name, *text;
  size_t len;
  Diag d;
  const Source *src;
  IrModule *ir;
} RtFront;
attn_status rt_front(attn_context *ctx, RtFront *f);
/* compile_module -> the kernel cache (NVRTC on a miss) -> module, for a
 * built IR in arena a (the module's from then on). */
attn_status rt_compile_ir(attn_context *ctx, Arena *a, const IrModule *ir, attn_module **out);
/* A module's program compiled apart (m->apart[which]), through the cache. */
attn_status rt_compile_apart(attn_module *m, RtApartKind which);
/* NVRTC's log for the module's cubin ("" on a cache hit that kept none,
 * or when the cache disabled logs); the target it was built for. */
const char *rt_module_log(const attn_module *m);
const char *rt_module_arch(const attn_module *m);
/* The context's cache, for `attnc` to report hits and warnings. */
Cache *rt_context_cache(attn_context *ctx);

/* ------------------------------------------------------------- launch.c */

/* Runs one pass of the call's plan on stream, from the call's finished
 * bindings: with the caller's workspace (ws, ws_bytes) when caller_ws,
 * else the call's own, allocated on first use and grown on demand. */
attn_status rt_run_pass(attn_call *c, PlanPass pass, bool caller_ws, void *ws, size_t ws_bytes,
                        void *stream);
/* Every step's function in context cu (loading the module first), so
 * that launches, captured ones too, only look them up; a backward
 * compiled apart is left to its first launch. */
attn_status rt_graph_resolve(attn_graph *g, const RtDriver *d, CUcontext cu);
/* The workspace bytes a pass needs for the call's bound problem. */
attn_status rt_pass_workspace(attn_call *c, PlanPass pass, size_t *bytes);
/* Frees the call's own workspaces (the driver must still be there). */
void rt_call_free_workspace(attn_call *c);

/* ----------------------------------------------------------- backward.c */

/* The backward's own checks before its pass runs: the graph has a GPU
 * backward, dO and the gradients are bound with the right shapes, the
 * deterministic mode exists for its head dims. */
attn_status rt_backward_ready(attn_call *c);
/* Whether the graph has a GPU backward (then its slots in *sl); if not,
 * why (a message written into why[0..len)). attn_graph_has_backward,
 * attn_graph_tensor and rt_backward_ready. */
bool rt_backward_supported(const attn_graph *g, BwdSlots *sl, char *why, size_t len);

/* ---------------------------------------- partials.c, ring.c, ring_nccl.c */

/* The context's kernels of partial results for the device dev (compiled
 * through the cache and loaded on first use, again for another target). */
attn_status rt_partial_kernels(attn_context *ctx, const RtDriver *d, CUdevice dev,
                               const RtPartialKernels **out);
void rt_partial_kernels_free(RtPartialKernels *k);
/* Launches one of them with `threads` threads (blocks of 256; grid-stride
 * kernels cap the grid at 65536 blocks) on stream s. */
attn_status rt_partial_launch(attn_context *ctx, const RtDriver *d, const RtPartialKernels *k,
                              RtPartialKernel which, long long threads, void **args, CUstream s);

/* attn_ring_create with a transport whose user data the ring owns:
 * transport_free(t->user) runs on destroy, and on every failure here. */
attn_status rt_ring_create(attn_graph *g, const attn_ring_transport *t,
                           void (*transport_free)(void *), attn_ring_layout layout,
                           attn_ring **out);

#endif
