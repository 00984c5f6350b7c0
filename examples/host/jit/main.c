/* jit: compiles an .attn graph at run time with libattn (NVRTC, cached on
 * disk), runs it on random bf16 inputs and checks the result against a CPU
 * attention. Prints PASS or FAIL; without a GPU it says so and exits 0. */
#include <attn.h>

#include "host_check.h"

/* Causal attention, bf16, head dimension 64. */
static const char source[] =
    "attention causal64 {\n"
    "  input  q : bf16[B, H, Sq, 64];\n"
    "  input  k : bf16[B, H, Skv, 64];\n"
    "  input  v : bf16[B, H, Skv, 64];\n"
    "  scalar scale : f32 = 1.0 / sqrt(64.0);\n"
    "  s = mask((q @ k^T) * scale, j <= i);\n"
    "  o = softmax(s) @ v;\n"
    "  output o : bf16[B, H, Sq, 64];\n"
    "}\n";

#define CHECK_ATTN(ctx, call)                                                 \
  do {                                                                        \
    attn_status s_ = (call);                                                  \
    if (s_ != ATTN_SUCCESS) {                                                 \
      fprintf(stderr, "%s: %s\n%s\n", #call, attn_status_string(s_),          \
              attn_context_error(ctx));                                       \
      printf("FAIL\n");                                                       \
      return 1;                                                               \
    }                                                                         \
  } while (0)

int main(void) {
  printf("libattn %s, JIT\n", attn_version());
  if (!host_have_gpu()) return 0;
  enum { B = 2, H = 4, S = 300, D = 64 };
  size_t n = (size_t)B * H * S * D;
  uint16_t *hq = malloc(n * 2), *hk = malloc(n * 2), *hv = malloc(n * 2),
           *ho = malloc(n * 2);
  double *ref = malloc(n * sizeof *ref);
  host_fill_bf16(hq, n, 1);
  host_fill_bf16(hk, n, 2);
  host_fill_bf16(hv, n, 3);
  void *q, *k, *v, *o;
  HOST_CUDA(cudaSetDevice(0)); /* makes the primary context current */
  HOST_CUDA(cudaMalloc(&q, n * 2));
  HOST_CUDA(cudaMalloc(&k, n * 2));
  HOST_CUDA(cudaMalloc(&v, n * 2));
  HOST_CUDA(cudaMalloc(&o, n * 2));
  HOST_CUDA(cudaMemcpy(q, hq, n * 2, cudaMemcpyHostToDevice));
  HOST_CUDA(cudaMemcpy(k, hk, n * 2, cudaMemcpyHostToDevice));
  HOST_CUDA(cudaMemcpy(v, hv, n * 2, cudaMemcpyHostToDevice));

  attn_context *ctx;
  attn_module *mod;
  attn_graph *g;
  attn_call *call;
  if (attn_context_create(&ctx) != ATTN_SUCCESS) return 1;
  CHECK_ATTN(ctx, attn_module_compile_string(ctx, "causal64.attn", source,
                                             sizeof source - 1, &mod));
  printf("kernels for %s came from %s\n", attn_module_arch(mod),
         attn_module_source_kind(mod) == ATTN_FROM_CACHE ? "the cache"
                                                         : "NVRTC");
  CHECK_ATTN(ctx, attn_module_get_graph(mod, NULL, &g));
  CHECK_ATTN(ctx, attn_call_create(g, &call));
  int64_t shape[4] = {B, H, S, D};
  CHECK_ATTN(ctx, attn_call_bind_tensor(call, "q", q, ATTN_BF16, 4, shape, NULL));
  CHECK_ATTN(ctx, attn_call_bind_tensor(call, "k", k, ATTN_BF16, 4, shape, NULL));
  CHECK_ATTN(ctx, attn_call_bind_tensor(call, "v", v, ATTN_BF16, 4, shape, NULL));
  CHECK_ATTN(ctx, attn_call_bind_tensor(call, "o", o, ATTN_BF16, 4, shape, NULL));
  CHECK_ATTN(ctx, attn_call_launch(call, NULL));
  HOST_CUDA(cudaDeviceSynchronize());
  HOST_CUDA(cudaMemcpy(ho, o, n * 2, cudaMemcpyDeviceToHost));

  host_attention(hq, hk, hv, ref, B, H, H, S, S, D, 1.0 / sqrt(64.0), 1);
  int ok = host_compare(ho, ref, n);
  printf("%s\n", ok ? "PASS" : "FAIL");
  attn_call_destroy(call);
  attn_module_destroy(mod);
  attn_context_destroy(ctx);
  cudaFree(q), cudaFree(k), cudaFree(v), cudaFree(o);
  free(hq), free(hk), free(hv), free(ho), free(ref);
  return ok ? 0 : 1;
}
