/* cmake: the ahead-of-time path from a CMake project. CMakeLists.txt runs
 * `attnc build gqa_causal.attn` at build time and compiles the generated
 * gqa_causal.c into this program; libattn comes from pkg-config.
 * Prints PASS or FAIL; without a GPU it says so and exits 0. */
#include <attn.h>

#include "gqa_causal.h"
#include "host_check.h"

int main(void) {
  printf("libattn %s, CMake build\n", attn_version());
  if (!host_have_gpu()) return 0;
  enum { B = 1, H = 8, HK = 2, S = 257, D = 128 };
  size_t nq = (size_t)B * H * S * D, nk = (size_t)B * HK * S * D;
  uint16_t *hq = malloc(nq * 2), *hk = malloc(nk * 2), *hv = malloc(nk * 2),
           *ho = malloc(nq * 2);
  double *ref = malloc(nq * sizeof *ref);
  host_fill_bf16(hq, nq, 21);
  host_fill_bf16(hk, nk, 22);
  host_fill_bf16(hv, nk, 23);
  void *q, *k, *v, *o;
  HOST_CUDA(cudaSetDevice(0));
  HOST_CUDA(cudaMalloc(&q, nq * 2));
  HOST_CUDA(cudaMalloc(&k, nk * 2));
  HOST_CUDA(cudaMalloc(&v, nk * 2));
  HOST_CUDA(cudaMalloc(&o, nq * 2));
  HOST_CUDA(cudaMemcpy(q, hq, nq * 2, cudaMemcpyHostToDevice));
  HOST_CUDA(cudaMemcpy(k, hk, nk * 2, cudaMemcpyHostToDevice));
  HOST_CUDA(cudaMemcpy(v, hv, nk * 2, cudaMemcpyHostToDevice));

  attn_context *ctx;
  if (attn_context_create(&ctx) != ATTN_SUCCESS) return 1;
  gqa_causal_args a = {0};
  int64_t qs[4] = {B, H, S, D}, ks[4] = {B, HK, S, D};
  a.q = q, a.k = k, a.v = v, a.o = o;
  memcpy(a.q_shape, qs, sizeof qs);
  memcpy(a.o_shape, qs, sizeof qs);
  memcpy(a.k_shape, ks, sizeof ks);
  memcpy(a.v_shape, ks, sizeof ks);
  attn_status st = gqa_causal_launch(ctx, &a, NULL); /* default scale */
  if (st != ATTN_SUCCESS) {
    fprintf(stderr, "gqa_causal_launch: %s\n%s\n", attn_status_string(st),
            attn_context_error(ctx));
    printf("FAIL\n");
    return 1;
  }
  HOST_CUDA(cudaDeviceSynchronize());
  HOST_CUDA(cudaMemcpy(ho, o, nq * 2, cudaMemcpyDeviceToHost));
  attn_module *m;
  attn_context_embedded_module(ctx, &gqa_causal_embedded, &m);
  printf("kernels for %s, path %d (1 embedded cubin, 2 embedded PTX, "
         "3 cache, 4 NVRTC)\n",
         attn_module_arch(m), (int)attn_module_source_kind(m));

  host_attention(hq, hk, hv, ref, B, H, HK, S, S, D, 1.0 / sqrt(128.0), 1);
  int ok = host_compare(ho, ref, nq);
  printf("%s\n", ok ? "PASS" : "FAIL");
  attn_context_destroy(ctx);
  cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o);
  free(hq), free(hk), free(hv), free(ho), free(ref);
  return ok ? 0 : 1;
}
