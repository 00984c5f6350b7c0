/* aot: runs kernels compiled ahead of time by `attnc build` (see the
 * Makefile): sdpa.h gives the typed entry point sdpa_launch and its
 * arguments struct; sdpa.c carries the cubins and PTX. Nothing is compiled
 * at run time, so NVRTC is never loaded; the program checks that too.
 * Prints PASS or FAIL; without a GPU it says so and exits 0. */
#include <attn.h>

#include "host_check.h"
#include "sdpa.h"

static const char *kind_name(attn_source_kind k) {
  switch (k) {
  case ATTN_FROM_EMBEDDED: return "an embedded cubin";
  case ATTN_FROM_EMBEDDED_PTX: return "embedded PTX (driver JIT)";
  case ATTN_FROM_CACHE: return "the kernel cache";
  case ATTN_FROM_NVRTC: return "NVRTC";
  }
  return "?";
}

/* Whether a libnvrtc is mapped into this process. */
static int nvrtc_loaded(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[4096];
  int found = 0;
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, "libnvrtc")) found = 1;
  fclose(f);
  return found;
}

int main(void) {
  printf("libattn %s, ahead of time\n", attn_version());
  if (!host_have_gpu()) return 0;
  enum { B = 2, H = 4, SQ = 200, SKV = 333, D = 128 };
  size_t nq = (size_t)B * H * SQ * D, nk = (size_t)B * H * SKV * D;
  uint16_t *hq = malloc(nq * 2), *hk = malloc(nk * 2), *hv = malloc(nk * 2),
           *ho = malloc(nq * 2);
  double *ref = malloc(nq * sizeof *ref);
  host_fill_bf16(hq, nq, 11);
  host_fill_bf16(hk, nk, 12);
  host_fill_bf16(hv, nk, 13);
  void *q, *k, *v, *o;
  cudaStream_t stream;
  HOST_CUDA(cudaSetDevice(0));
  HOST_CUDA(cudaStreamCreate(&stream));
  HOST_CUDA(cudaMalloc(&q, nq * 2));
  HOST_CUDA(cudaMalloc(&k, nk * 2));
  HOST_CUDA(cudaMalloc(&v, nk * 2));
  HOST_CUDA(cudaMalloc(&o, nq * 2));
  HOST_CUDA(cudaMemcpy(q, hq, nq * 2, cudaMemcpyHostToDevice));
  HOST_CUDA(cudaMemcpy(k, hk, nk * 2, cudaMemcpyHostToDevice));
  HOST_CUDA(cudaMemcpy(v, hv, nk * 2, cudaMemcpyHostToDevice));

  attn_context *ctx;
  if (attn_context_create(&ctx) != ATTN_SUCCESS) return 1;
  sdpa_args a = {0};
  a.q = q, a.k = k, a.v = v, a.o = o;
  int64_t qs[4] = {B, H, SQ, D}, ks[4] = {B, H, SKV, D};
  memcpy(a.q_shape, qs, sizeof qs);
  memcpy(a.o_shape, qs, sizeof qs);
  memcpy(a.k_shape, ks, sizeof ks);
  memcpy(a.v_shape, ks, sizeof ks);
  a.scale = 0.05f; /* instead of the default 1/sqrt(128) */
  a.scale_set = 1;
  attn_status st = sdpa_launch(ctx, &a, stream);
  if (st != ATTN_SUCCESS) {
    fprintf(stderr, "sdpa_launch: %s\n%s\n", attn_status_string(st),
            attn_context_error(ctx));
    printf("FAIL\n");
    return 1;
  }
  HOST_CUDA(cudaStreamSynchronize(stream));
  HOST_CUDA(cudaMemcpy(ho, o, nq * 2, cudaMemcpyDeviceToHost));

  attn_module *m;
  attn_context_embedded_module(ctx, &sdpa_embedded, &m); /* the one used */
  attn_source_kind kind = attn_module_source_kind(m);
  int nvrtc = nvrtc_loaded();
  printf("kernels for %s came from %s; NVRTC loaded: %s\n",
         attn_module_arch(m), kind_name(kind), nvrtc ? "yes" : "no");

  host_attention(hq, hk, hv, ref, B, H, H, SQ, SKV, D, 0.05, 0);
  int ok = host_compare(ho, ref, nq);
  if ((kind == ATTN_FROM_EMBEDDED || kind == ATTN_FROM_EMBEDDED_PTX) && nvrtc) {
    printf("embedded kernels, yet NVRTC was loaded\n");
    ok = 0;
  }
  printf("%s\n", ok ? "PASS" : "FAIL");
  attn_context_destroy(ctx); /* also destroys the embedded module */
  cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o);
  cudaStreamDestroy(stream);
  free(hq), free(hk), free(hv), free(ho), free(ref);
  return ok ? 0 : 1;
}
