/*
 * attn.h: libattn, the attnc runtime. Compile .attn graphs to GPU kernels
 * at run time (NVRTC, with an on-disk cubin cache), bind tensors and
 * scalars by name, and launch on the caller's stream in the caller's
 * current CUDA context.
 *
 * Errors: every call returns an attn_status; the message for the last
 * failure is kept on the context (attn_context_error). The library never
 * prints, exits or aborts, whatever the input and out of memory included:
 * host memory that runs out during a call makes it return
 * ATTN_ERROR_OUT_OF_MEMORY, and the context's later calls return it too
 * until attn_context_clear_error (it stays usable then); a broken
 * invariant inside the library is ATTN_ERROR_INTERNAL with the place in
 * the message. One context must not be used by two threads at once;
 * separate contexts are independent.
 *
 * libcuda is opened at run time: without a driver, compiling still works
 * (give the target with attn_context_set_arch) and launching returns
 * ATTN_ERROR_NO_DRIVER. NVRTC is opened at run time too, only when a kernel
 * must be compiled: modules built ahead of time by `attnc build` load
 * without it (see attn_module_load_embedded).
 */
#ifndef ATTN_H
#define ATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attn_status {
  ATTN_SUCCESS = 0,
  ATTN_ERROR_INVALID_ARGUMENT = 1, /* null pointer, bad dtype/shape/stride */
  ATTN_ERROR_NOT_FOUND = 2,        /* no graph, tensor or scalar by that name */
  ATTN_ERROR_SOURCE = 3,           /* the .attn text has errors */
  ATTN_ERROR_UNSUPPORTED = 4,      /* no kernel template can run the graph */
  ATTN_ERROR_COMPILE = 5,          /* NVRTC failed: a bug in attnc */
  ATTN_ERROR_NO_DRIVER = 6,        /* no libcuda.so.1 or no GPU */
  ATTN_ERROR_CUDA = 7,             /* a driver call failed */
  ATTN_ERROR_OUT_OF_MEMORY = 8,
  ATTN_ERROR_IO = 9,               /* reading a source file */
  ATTN_ERROR_INCOMPLETE = 10,      /* a launch with unbound tensors */
  ATTN_ERROR_INTERNAL = 11         /* a broken invariant inside libattn: a bug;
                                      the message says where, the context
                                      stays usable */
} attn_status;

typedef enum attn_dtype {
  ATTN_F16 = 1,
  ATTN_BF16 = 2,
  ATTN_F32 = 3,
  ATTN_E4M3 = 4,
  ATTN_E5M2 = 5,
  ATTN_I32 = 6,
  ATTN_U64 = 7,
  ATTN_BOOL = 8
} attn_dtype;

typedef struct attn_context attn_context;
typedef struct attn_module attn_module; /* one compiled .attn source */
typedef struct attn_graph attn_graph;   /* one graph in it; owned by it */
typedef struct attn_call attn_call;     /* bindings for launches */

const char *attn_status_string(attn_status s);
const char *attn_version(void);

/* Context: options and the last error. Reads ATTN_CACHE_DIR (cache root)
 * and ATTN_NO_CACHE=1 (disable the disk cache). */
attn_status attn_context_create(attn_context **out);
void attn_context_destroy(attn_context *ctx);
const char *attn_context_error(const attn_context *ctx);
/* Clears the last error and the sticky out-of-memory state. */
void attn_context_clear_error(attn_context *ctx);
/* Non-fatal trouble, such as a cache directory that could not be used
 * (kernels are then kept in memory only): one line per warning, without
 * a "warning:" prefix (add your own); "" when there is none. */
const char *attn_context_warning(const attn_context *ctx);
/* Target such as "sm_90a" or "sm_80"; NULL: the current device's. */
attn_status attn_context_set_arch(attn_context *ctx, const char *arch);
/* Cache directory; NULL disables the disk cache. */
attn_status attn_context_set_cache_dir(attn_context *ctx, const char *dir);

/* Tuning knobs, per context; every one defaults to 0, the fastest
 * measured choice. Compile options apply to the modules compiled after
 * the call (they change the kernels, so the cache keeps them apart):
 *   ATTN_OPTION_BACKWARD_TEMPLATE  the backward's main kernel: 0 the
 *       target's fastest, 80 the portable bwd_sm80 everywhere, 90
 *       bwd_sm90 wherever the target is sm_90a with bf16 MMAs over copies
 *       of FP8 tensors, 91 bwd_sm90 with its FP8 tensor-core mode for the
 *       FP8 backwards it takes (head dims 128; docs/templates.md), as 0
 *       takes it, 92 a diagnostic: as 90, with each work item's timestamps
 *       written over its first dK row (bench/bwd_stamps.py; dK is then
 *       not the gradient), 93 as 90 with 80-query tiles where they apply
 *       (head dims 128 without dropout or a bias gradient: being measured
 *       against the 64-query tiles 90 takes), 94 as 93 with dV's GEMM
 *       reading P^T from shared memory, 95 as 93 with one element pass
 *       and dV's and dK's GEMMs after it
 *   ATTN_OPTION_SM90_VARIANT  the Hopper forward's variant: 0 auto,
 *       1 base, 2 persist, 3 bn80, 4 persist_bn80, 5 f16_pv, 6 wg3,
 *       7 kv8_early, 8 kv_copy, 9 bn176, 10 fp8_vt8, 11 kv8, 12 bn128,
 *       13 rescale_late, 14 pv_overlap, 15 pv_once, 16 q_early, 17 auto35,
 *       18 tanh_poly, 19 auto36, 20 partial_first, 21 ring_closed, 22 q_before_v,
 *       23 pv_wait_next, 24 o_smem, 25 o_regs
 *       (bench/NOTES-sm90.md)
 *   ATTN_OPTION_EXP2_FMA  the Hopper forward's softmax exponentials on the
 *       FMA pipe instead of MUFU (for scores whose own math is on MUFU, a
 *       softcap's tanh): 0 auto (none: measured slower), 1 none, 2 to 5 one to four of
 *       every four key blocks (graphs that round P to FP8: none)
 * and a launch option:
 *   ATTN_OPTION_PERSISTENT_CTAS  at most this many CTAs for persistent
 *       kernels (0: one per SM); tests use a few to make every CTA take
 *       several work items
 * and two decode options (docs/runtime.md, "Decode"): a forward whose
 * query heads per K/V head times Sq is at most 64 runs the split-KV decode
 * kernel, its key split count chosen from the shapes and the SM count:
 *   ATTN_OPTION_DECODE_SPLITS  0: that choice; n > 0: n splits (at most
 *       one per 64-key tile), for tests and tuning
 *   ATTN_OPTION_DECODE  1 (default): the decode kernel where it applies;
 *       0: always the forward kernel
 * and one more launch option (docs/runtime.md, "Launch overlap"):
 *   ATTN_OPTION_LAUNCH_OVERLAP  1 (default): on sm_90 and later GPUs each
 *       kernel launches with programmatic stream serialization, so its
 *       CTAs start while the kernel before it in the stream drains and
 *       wait on the device for it to finish (results unchanged); 0: plain
 *       launches
 * Other values: ATTN_ERROR_INVALID_ARGUMENT with a message. */
typedef enum attn_option {
  ATTN_OPTION_BACKWARD_TEMPLATE = 1,
  ATTN_OPTION_SM90_VARIANT = 2,
  ATTN_OPTION_PERSISTENT_CTAS = 3,
  ATTN_OPTION_DECODE_SPLITS = 4,
  ATTN_OPTION_DECODE = 5,
  ATTN_OPTION_LAUNCH_OVERLAP = 6,
  ATTN_OPTION_EXP2_FMA = 7
} attn_option;
attn_status attn_context_set_option(attn_context *ctx, attn_option option, long long value);

attn_status attn_module_compile_file(attn_context *ctx, const char *path,
                                     attn_module **out);
attn_status attn_module_compile_string(attn_context *ctx, const char *name,
                                       const char *text, size_t len,
                                       attn_module **out);
void attn_module_destroy(attn_module *m);
/* Compiles now, through the kernel cache, the programs a module otherwise
 * compiles on their first launch: its decode kernels (split-KV) and its
 * backward. A server calls it at start-up so that no launch waits for
 * NVRTC; `attnc cache warm` calls it to fill a cache ahead of a run. They
 * are loaded into the driver at their first launch (a cache-load's cost).
 * Needs no GPU. Modules from embedded cubins have nothing to compile. */
attn_status attn_module_prepare(attn_module *m);
int attn_module_graph_count(const attn_module *m);
const char *attn_module_graph_name(const attn_module *m, int index);
/* name NULL: the module's only graph. */
attn_status attn_module_get_graph(attn_module *m, const char *name,
                                  attn_graph **out);

/* Bindings. Shapes and strides are in the graph's declared dimension order;
 * strides count elements; NULL strides mean dense row-major. */
attn_status attn_call_create(attn_graph *g, attn_call **out);
void attn_call_destroy(attn_call *c);
attn_status attn_call_bind_tensor(attn_call *c, const char *name, void *ptr,
                                  attn_dtype dtype, int ndim,
                                  const int64_t *shape,
                                  const int64_t *strides);
/* Forgets every tensor and scalar binding, so the call can be bound
 * afresh for other shapes (a binding is checked against the ones already
 * there); the mode (deterministic), tile counter and the call's own
 * workspace stay. Bindings tools reuse one call per graph this way. */
attn_status attn_call_clear_bindings(attn_call *c);
attn_status attn_call_bind_f32(attn_call *c, const char *name, float v);
attn_status attn_call_bind_i32(attn_call *c, const char *name, int32_t v);
attn_status attn_call_bind_u64(attn_call *c, const char *name, uint64_t v);
attn_status attn_call_bind_bool(attn_call *c, const char *name, int v);
/* stream: a CUstream (or cudaStream_t), NULL for the legacy stream. */
attn_status attn_call_launch(attn_call *c, void *stream);
/* The backward pass of a graph that declares grad (docs/runtime.md,
 * "Backward"). Bind as for attn_call_launch, plus, by name: "d" + the
 * attention output's name (e.g. "do", dO, q's dtype and o's shape) and, for
 * each of q, k, v declared with grad, an output "d" + its name (dq, dk, dv:
 * the input's dtype and shape). o and lse must hold what the forward
 * wrote. The f32 scratch the kernels need (delta, dQ's accumulator, and
 * for GQA dK/dV's) is allocated by the library on first use, kept on the
 * call for the next launch and freed by attn_call_destroy, which must run
 * while the CUDA context of the launch still exists (or pass your own:
 * attn_call_launch_backward_with_workspace). Launches the kernels of the
 * graph's backward plan (`attnc plan`) on the stream. Zero key positions
 * (Skv 0) give zero dq; zero queries give zero dk and dv. Each bias declared with grad is bound the same
 * way, "d" + its name (its dtype and shape; written, zeros where the
 * scores do not reach). ATTN_ERROR_UNSUPPORTED for a graph without grad
 * or without a GPU backward (a grad tensor that is not read as a bias
 * t[b, h, i, j], or more than two such biases). */
attn_status attn_call_launch_backward(attn_call *c, void *stream);
/* Deterministic backward (on != 0; off by default): every gradient is
 * summed in a fixed order, with no floating-point atomics, so two launches
 * on the same inputs give bit-identical results. It costs time (dQ is
 * computed by extra CTAs that recompute the scores per query tile) and
 * scratch memory (GQA: per-head dK/dV accumulators; accumulated bias
 * gradients: an f32 [B, H, Sq, Skv] buffer); docs/runtime.md has the
 * numbers. Applies to the next attn_call_launch_backward. Head dims above
 * 128 have no deterministic backward: on != 0 returns
 * ATTN_ERROR_UNSUPPORTED with a message, and the mode stays off. */
attn_status attn_call_set_deterministic(attn_call *c, int on);
/* Workspace the caller owns (cuDNN's get-size-then-execute). The f32
 * scratch and work queues a pass needs for the bound shapes (and the
 * call's mode) take attn_call_workspace_size bytes; the _with_workspace
 * launches use the caller's buffer (device memory of the current context,
 * 16-byte aligned, at least that long, not used by anything else until
 * the launch's kernels have run) and allocate nothing, so they can be
 * captured into a CUDA graph and replayed. The plain launches keep a
 * workspace of their own on the call instead, allocated on first use. */
typedef enum attn_pass { ATTN_PASS_FORWARD = 0, ATTN_PASS_BACKWARD = 1 } attn_pass;
attn_status attn_call_workspace_size(attn_call *c, attn_pass pass, size_t *bytes);
attn_status attn_call_launch_with_workspace(attn_call *c, void *workspace, size_t bytes,
                                            void *stream);
attn_status attn_call_launch_backward_with_workspace(attn_call *c, void *workspace,
                                                     size_t bytes, void *stream);
/* Optional: count key tiles loaded (device pointer to one u64), for tests. */
attn_status attn_call_set_tile_counter(attn_call *c, void *device_u64);

/* DLPack: binds a DLTensor (dlpack/dlpack.h; pass a DLManagedTensor * as
 * is, since its first member is the DLTensor, or &versioned->dl_tensor).
 * The tensor must live on kDLCUDA (or kDLCUDAManaged) memory of the
 * current device; data + byte_offset is the base; NULL strides mean dense.
 * dtypes: kDLBfloat 16, kDLFloat 16/32, kDLInt 32, kDLUInt 64, kDLBool 8,
 * kDLFloat8_e4m3fn and kDLFloat8_e5m2 (codes 10, 12), all with 1 lane.
 * Then as attn_call_bind_tensor. Declared with void * so that attn.h does
 * not require dlpack.h (DLTensor is an anonymous struct there). */
attn_status attn_call_bind_dlpack(attn_call *c, const char *name,
                                  const void *dl_tensor);

/* ------------------------------------------------- a graph's signature
 * What a binding for another language (python/attnc) needs to allocate a
 * graph's outputs and gradients and to call it, without parsing .attn:
 * its tensors in binding order (the inputs and outputs as declared, then
 * the backward's dO and gradients, when it has a backward) and its
 * scalars. Strings and the graph stay valid while the module lives. */
typedef enum attn_tensor_role {
  ATTN_ROLE_INPUT = 1,      /* read by the forward */
  ATTN_ROLE_OUTPUT = 2,     /* written by the forward */
  ATTN_ROLE_GRAD_INPUT = 3, /* read by the backward: "d" + o's name */
  ATTN_ROLE_GRAD_OUTPUT = 4 /* written by the backward: dq, dk, dv, dbias */
} attn_tensor_role;

typedef struct attn_tensor_info {
  const char *name; /* the binding name */
  attn_tensor_role role;
  attn_dtype dtype;
  int ndim;
  const char *dim_name[4]; /* a dimension symbol ("B", "Sq"), NULL for a literal */
  int64_t dim_size[4];     /* the literal, -1 for a symbol */
  int grad;                /* an input declared in grad */
  int of;                  /* the grad roles: index of the tensor whose
                              gradient it is (dO: the attention output);
                              -1 for the others */
  int operand;             /* 'q', 'k' or 'v' for the products' operands
                              (16-byte vector loads: their rules in
                              docs/runtime.md, "Bindings"), 0 for the others */
  int attention_output;    /* the output softmax(..) @ v lands in */
  int lse;                 /* the output the backward reads as lse */
} attn_tensor_info;

typedef struct attn_scalar_info {
  const char *name;
  attn_dtype dtype; /* ATTN_F32, ATTN_I32, ATTN_U64 or ATTN_BOOL */
  int has_default;
  double default_float; /* f32 scalars */
  int64_t default_int;  /* i32, bool, and u64 (as its bits) */
} attn_scalar_info;

const char *attn_graph_name(const attn_graph *g); /* "" for NULL */
/* 1 when attn_call_launch_backward can run the graph: it declares grad,
 * saves lse, and the module holds its backward kernels; else 0 and, with
 * why non-NULL, the reason written into why[0..len) (truncated, NUL-ended). */
int attn_graph_has_backward(const attn_graph *g, char *why, size_t len);
int attn_graph_tensor_count(const attn_graph *g);
attn_status attn_graph_tensor(const attn_graph *g, int index, attn_tensor_info *out);
int attn_graph_scalar_count(const attn_graph *g);
attn_status attn_graph_scalar(const attn_graph *g, int index, attn_scalar_info *out);

/* ------------------------------------------------ ahead-of-time modules
 * `attnc build FILE.attn --arch sm_80,sm_90a -o DIR` writes DIR/NAME.c,
 * which defines one attn_embedded: the .attn text (re-parsed at load for
 * argument checking), a cubin per listed target and PTX for the highest
 * one (without its a/f suffix), which the driver compiles for newer GPUs,
 * each with the launch plans of its kernels (text the library reads: a
 * new launch fact changes the plan, not these structs). Their layout is
 * part of the ABI (format ATTN_EMBEDDED_FORMAT). */
#define ATTN_EMBEDDED_FORMAT 6

typedef struct attn_embedded_image {
  const char *arch; /* cubin: "sm_90a"; PTX: "sm_90" (runs on 9.0 and up) */
  int is_ptx;       /* PTX text, NUL-terminated; size counts the NUL */
  const unsigned char *data;
  size_t size;
  const char *plans; /* the graphs' launch plans, in source order */
} attn_embedded_image;

typedef struct attn_embedded {
  int format;                /* ATTN_EMBEDDED_FORMAT */
  int abi_version;           /* kernel parameter ABI the images use */
  const char *attnc_version; /* attnc that built it; images are used only
                                by a libattn of the same version */
  const char *name;          /* "sdpa.attn": names diagnostics */
  const char *source;        /* the .attn text */
  size_t source_len;
  const attn_embedded_image *images;
  int nimages;
} attn_embedded;

/* Where a module's kernels came from: the path its load took. */
typedef enum attn_source_kind {
  ATTN_FROM_EMBEDDED = 1,     /* an embedded cubin for this target */
  ATTN_FROM_EMBEDDED_PTX = 2, /* embedded PTX, compiled by the driver */
  ATTN_FROM_CACHE = 3,        /* the kernel cache (disk or this context) */
  ATTN_FROM_NVRTC = 4         /* compiled now with NVRTC */
} attn_source_kind;

/* Loads an embedded module for the target (attn_context_set_arch, else
 * the current device's). Lookup: an embedded cubin for the target (an
 * sm_XY cubin also serves X.Z devices with Z >= Y; 'a'/'f' targets only
 * their own), else embedded PTX for an older or equal compute capability,
 * else the kernel cache, else NVRTC; a cache hit does not load NVRTC,
 * a miss needs it. Embedded images from another attnc version are skipped
 * (a warning on the context). Destroy with attn_module_destroy. */
attn_status attn_module_load_embedded(attn_context *ctx,
                                      const attn_embedded *em,
                                      attn_module **out);
/* The same, loaded once per context and kept by it (destroyed with the
 * context; do not destroy it yourself). Generated NAME_launch functions
 * use this, so each context gets its own module. */
attn_status attn_context_embedded_module(attn_context *ctx,
                                         const attn_embedded *em,
                                         attn_module **out);
/* The path the module's kernels took (0 for a NULL module). */
attn_source_kind attn_module_source_kind(const attn_module *m);
/* The target its kernels were built for: "sm_90a", or "sm_90" for PTX. */
const char *attn_module_arch(const attn_module *m);

/* ------------------------------------------------------ partial results
 * Attention over disjoint key sets, each computed by its own launch (a
 * graph whose mask reads global positions through scalar offsets, as in
 * docs/ring.md, run on each key shard; shards computed on several GPUs),
 * merged into the attention over their union:
 *   lse = log(sum_i exp(lse_i)),  o = sum_i exp(lse_i - lse) o_i,
 * a part with lse_i = -inf weighing nothing (its o_i is not read), a row no
 * part reaches giving o = 0 and lse = -inf. o_parts[i]: dense [rows][dim]
 * of part_dtype; lse_parts[i]: f32 [rows] (rows: every row of the output,
 * B*H*Sq for a graph's o [B, H, Sq, Dv]); o: [rows][dim] of o_dtype; lse:
 * f32 [rows], or NULL. f32, bf16 and f16. o and lse may be the first
 * part's buffers. Enqueued on stream (the current CUDA context's); the
 * kernel is compiled through the kernel cache on first use (NVRTC on a
 * miss). At most ATTN_MERGE_MAX_PARTS parts a call. */
#define ATTN_MERGE_MAX_PARTS 16
attn_status attn_merge_partials(attn_context *ctx, int n, const void *const *o_parts,
                                const float *const *lse_parts, attn_dtype part_dtype,
                                int64_t rows, int64_t dim, void *o, attn_dtype o_dtype, float *lse,
                                void *stream);

/* ------------------------------------------- context parallelism: the ring
 * Ring attention over `world` ranks (docs/ring.md: the protocol, and how a
 * framework calls it). Each rank holds a shard of the sequence: its
 * queries, keys and values. The key/value shards travel around the ring,
 * each rank computing its queries' attention against every shard with the
 * graph (its own shard first) and merging the partial (O, lse); the
 * backward sends the shards around again with their dK/dV accumulating
 * (f32) as they go, each rank's part computed from the merged O and lse.
 * The next shard's transfer overlaps this one's compute (a stream of the
 * ring's own, ordered with the caller's by events).
 *
 * The graph: q, k, v and o dense [.., S, D] (the sequence the
 * second-to-last dim, with symbolic lengths), an `output lse` [.., Sq] with
 * o's leading dims, o, dq, dk, dv in f32, bf16 or f16, and two i32 scalars
 * q0 and k0 that its mask adds to i and j: the global positions of the
 * shard's first query and key (`mask(s, j + k0 <= i + q0)`). Any other
 * tensor or scalar (document ids over the whole sequence, a bias, a scale)
 * is the caller's, bound on the ring and passed to every launch as is.
 *
 * Layouts: ATTN_RING_CONTIGUOUS: rank r holds positions r*n .. r*n + n - 1
 * (n: its shard's length, the same on every rank); ATTN_RING_ZIGZAG: chunks
 * r and 2W-1-r of 2W equal chunks (n even), in that order, so that every
 * rank has the same work under a causal mask. Every rank must create its
 * ring with the same graph, layout and shapes, and call the same launches
 * in the same order. */
typedef struct attn_ring attn_ring;

typedef enum attn_ring_layout {
  ATTN_RING_CONTIGUOUS = 0,
  ATTN_RING_ZIGZAG = 1
} attn_ring_layout;

/* How shards move between ranks. exchange posts, on stream (a CUstream:
 * the work it enqueues there is ordered after everything before it on
 * stream, and what follows waits for it), for each of the count buffers,
 * the send of bytes[i] bytes at send[i] to rank (rank + 1) % world and
 * the receive of as many bytes from rank (rank - 1 + world) % world into
 * recv[i]. It returns 0, or nonzero with a message in msg (msg_len bytes).
 * attn_ring_create_nccl makes one over an NCCL communicator; tests and
 * other transports give their own. */
typedef struct attn_ring_transport {
  int rank, world;
  int (*exchange)(void *user, int count, void *const *send, void *const *recv,
                  const size_t *bytes, void *stream, char *msg, size_t msg_len);
  void *user;
} attn_ring_transport;

/* A ring for graph g (the caller's CUDA context current: the ring's
 * stream and events live there). The transport is copied. Refuses a graph
 * outside the rules above with a message. Destroy it once its launches have
 * run (it frees the device buffers they use), before the module and the
 * CUDA context. */
attn_status attn_ring_create(attn_graph *g, const attn_ring_transport *t,
                             attn_ring_layout layout, attn_ring **out);
/* The same over an NCCL communicator (an ncclComm_t, made by the caller
 * with ncclCommInitRank or ncclCommInitAll, one rank per GPU): rank and
 * world are read from it; libnccl.so.2 is opened at run time (or the path
 * in ATTN_NCCL), ATTN_ERROR_UNSUPPORTED when it cannot be. Sends and
 * receives are one ncclGroupStart/End per exchange. */
attn_status attn_ring_create_nccl(attn_graph *g, void *nccl_comm, attn_ring_layout layout,
                                  attn_ring **out);
void attn_ring_destroy(attn_ring *r);
/* Bindings, as attn_call_bind_*. This rank's shards by the graph's names
 * (q, k, v, o, lse; for the backward also do, dq, dk, dv), dense (NULL
 * strides); every other tensor and scalar as for a call. */
attn_status attn_ring_bind_tensor(attn_ring *r, const char *name, void *ptr, attn_dtype dtype,
                                  int ndim, const int64_t *shape, const int64_t *strides);
attn_status attn_ring_bind_f32(attn_ring *r, const char *name, float v);
attn_status attn_ring_bind_i32(attn_ring *r, const char *name, int32_t v);
attn_status attn_ring_bind_u64(attn_ring *r, const char *name, uint64_t v);
attn_status attn_ring_bind_bool(attn_ring *r, const char *name, int v);
/* The forward: o and lse of this rank's queries over the whole sequence.
 * Enqueued on stream; returns once everything is enqueued (the transport
 * may block: NCCL's group calls do not, a test's might). */
attn_status attn_ring_forward(attn_ring *r, void *stream);
/* The backward: dq, dk, dv of this rank's shards, from do and the o and
 * lse the forward wrote. */
attn_status attn_ring_backward(attn_ring *r, void *stream);

#ifdef __cplusplus
}
#endif
#endif
