/* partials.c: the kernels of partial results (templates/ring.cuh), loaded
 * once per context and target, and attn_merge_partials (attn.h, "partial
 * results"). The ring (ring.c) launches the same kernels.
 *
 *   first use on a target -> the program through the kernel cache (NVRTC
 *     on a miss, like a graph's) -> cuLibraryLoadData -> its kernels
 *   a launch -> the kernel's function in the current CUDA context ->
 *     cuLaunchKernel on the caller's stream */
#include <stdio.h>
#include <string.h>

#include "rt.h"

static const char *const partial_entries[RT_PARTIAL_NKERNELS] = {
    "attn_ring_merge", "attn_ring_add", "attn_ring_store", "attn_ring_merge_n"};

typedef struct PartialCompile {
  const NvrtcOptions *opts;
  const char *meta;
} PartialCompile;

static attn_status partial_compile_job(void *user, CacheBlob *out, StrBuf *err) {
  PartialCompile *job = user;
  NvrtcOutput nv;
  attn_status st = nvrtc_compile(ring_src, "attnc_partials.cu", job->opts, false, &nv, err);
  if (st) return st;
  return cache_blob_take(out, &nv, job->meta, err);
}

void rt_partial_kernels_free(RtPartialKernels *k) {
  if (k->lib) {
    const RtDriver *d = rt_driver(NULL, NULL);
    if (d) d->LibraryUnload(k->lib);
  }
  *k = (RtPartialKernels){0};
}

attn_status rt_partial_kernels(attn_context *ctx, const RtDriver *d, CUdevice dev,
                               const RtPartialKernels **out) {
  StrBuf *err = &ctx->error;
  char arch[16], meta[64];
  attn_status st = rt_device_arch(d, dev, arch, err);
  if (st) return st;
  RtPartialKernels *k = &ctx->partials;
  if (k->lib && strcmp(k->arch, arch) == 0) {
    *out = k;
    return ATTN_SUCCESS;
  }
  rt_partial_kernels_free(k);
  snprintf(meta, sizeof meta, "source attnc-partials\ntarget %s\n", arch);
  NvrtcOptions opts;
  nvrtc_options(&opts, arch, !ctx->disk_cache);
  CacheKeyInput in = {ring_src, strlen(ring_src), nvrtc_fingerprint(), arch, opts.v, opts.n,
                      partial_entries, RT_PARTIAL_NKERNELS, meta};
  unsigned char key[SHA256_BYTES];
  cache_key(&in, key);
  PartialCompile job = {&opts, meta};
  CacheBlob blob = {0};
  if ((st = cache_get(&ctx->cache, arch, key, partial_compile_job, &job, &blob, err))) {
    sb_puts(err, " (the kernels of partial results)");
    return st;
  }
  CUresult cr = d->LibraryLoadData(&k->lib, blob.cubin, NULL, NULL, 0, NULL, NULL, 0);
  cache_blob_free(&blob);
  if (cr != CUDA_SUCCESS) {
    k->lib = NULL;
    return rt_driver_error(d, cr, "cuLibraryLoadData (the kernels of partial results)", err);
  }
  for (int e = 0; e < RT_PARTIAL_NKERNELS; e++) {
    cr = d->LibraryGetKernel(&k->kern[e], k->lib, partial_entries[e]);
    if (cr != CUDA_SUCCESS) {
      rt_partial_kernels_free(k);
      st = rt_driver_error(d, cr, "cuLibraryGetKernel", err);
      sb_printf(err, " for '%s'", partial_entries[e]);
      return st;
    }
  }
  snprintf(k->arch, sizeof k->arch, "%s", arch);
  *out = k;
  return ATTN_SUCCESS;
}

attn_status rt_partial_launch(attn_context *ctx, const RtDriver *d, const RtPartialKernels *k,
                              RtPartialKernel which, long long threads, void **args,
                              CUstream s) {
  const unsigned block = 256;
  long long blocks = (threads + block - 1) / block;
  if (blocks < 1) return ATTN_SUCCESS;
  if (blocks > 65536) blocks = 65536; /* grid-stride kernels; one-warp-a-row ones are checked */
  CUfunction fn;
  CUresult cr = d->KernelGetFunction(&fn, k->kern[which]);
  if (cr == CUDA_SUCCESS)
    cr = d->LaunchKernel(fn, (unsigned)blocks, 1, 1, block, 1, 1, 0, s, args, NULL);
  if (cr == CUDA_SUCCESS) return ATTN_SUCCESS;
  attn_status st = rt_driver_error(d, cr, "cuLaunchKernel", &ctx->error);
  sb_printf(&ctx->error, " ('%s')", partial_entries[which]);
  return st;
}

/* ------------------------------------------------------- the public merge */

/* ring.cuh's RingParts, passed by value. */
typedef struct PartialParts {
  const void *o[ATTN_MERGE_MAX_PARTS];
  const float *lse[ATTN_MERGE_MAX_PARTS];
} PartialParts;

static bool merge_float_type(attn_dtype t) {
  return t == ATTN_F32 || t == ATTN_BF16 || t == ATTN_F16;
}

static attn_status merge_impl(attn_context *ctx, int n, const void *const *o_parts,
                              const float *const *lse_parts, attn_dtype part_dtype,
                              int64_t rows, int64_t dim, void *o, attn_dtype o_dtype, float *lse,
                              void *stream) {
  rt_clear_error(ctx);
  if (n < 1 || n > ATTN_MERGE_MAX_PARTS)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_merge_partials: %d parts; 1 to %d per call (merge the merged again for "
                   "more)", n, ATTN_MERGE_MAX_PARTS);
  if (!o_parts || !lse_parts || (!o && rows > 0 && dim > 0))
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT, "attn_merge_partials: %s is NULL",
                   !o_parts ? "o_parts" : !lse_parts ? "lse_parts" : "o");
  if (!merge_float_type(part_dtype) || !merge_float_type(o_dtype))
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_merge_partials: the parts and o are f32, bf16 or f16 (dtypes %d, %d)",
                   (int)part_dtype, (int)o_dtype);
  if (rows < 0 || dim < 0)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_merge_partials: %lld rows of %lld: negative", (long long)rows,
                   (long long)dim);
  if (rows == 0) return ATTN_SUCCESS;
  PartialParts parts = {{0}, {0}};
  for (int i = 0; i < n; i++) {
    if (!lse_parts[i] || (!o_parts[i] && dim > 0))
      return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT, "attn_merge_partials: part %d is NULL", i);
    parts.o[i] = o_parts[i];
    parts.lse[i] = lse_parts[i];
  }
  attn_status st;
  const RtDriver *d = rt_driver(&st, &ctx->error);
  if (!d) return st;
  CUcontext cu;
  CUdevice dev;
  const RtPartialKernels *k;
  if ((st = rt_driver_current(d, &cu, &dev, &ctx->error)) ||
      (st = rt_partial_kernels(ctx, d, dev, &k)))
    return st;
  int pt = part_dtype, ot = o_dtype, nn = n;
  long long r = rows, D = dim;
  void *args[] = {&parts, &nn, &pt, &o, &ot, &lse, &r, &D};
  /* One warp a row, warps striding over the rows (the grid is capped). */
  st = rt_partial_launch(ctx, d, k, RT_PARTIAL_MERGE_N, r * 32, args, (CUstream)stream);
  return st;
}

attn_status attn_merge_partials(attn_context *ctx, int n, const void *const *o_parts,
                                const float *const *lse_parts, attn_dtype part_dtype,
                                int64_t rows, int64_t dim, void *o, attn_dtype o_dtype, float *lse,
                                void *stream) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL(ctx, merge_impl(ctx, n, o_parts, lse_parts, part_dtype, rows, dim, o, o_dtype, lse,
                          stream));
}
