/* warm_load_check.c FILE: compiles FILE's graphs for sm_90a through libattn's JIT and kernel
 * cache (ATTN_CACHE_DIR), the target set as a device would give it (not through
 * attn_context_set_arch, which checks it against NVRTC), and prints whether the process
 * loaded NVRTC. tests/host/warm_load_check.sh runs it twice: a cold compile loads NVRTC, a
 * warm load from the cache must not (dlopen of libnvrtc costs 6-9 ms, a warm load about 1). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "rt.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: warm_load_check FILE.attn\n");
    return 2;
  }
  attn_context *ctx = NULL;
  if (attn_context_create(&ctx) != ATTN_SUCCESS) return 1;
  strcpy(ctx->arch, "sm_90a");
  attn_module *m = NULL;
  attn_status st = attn_module_compile_file(ctx, argv[1], &m);
  if (st != ATTN_SUCCESS) {
    fprintf(stderr, "%s\n", attn_context_error(ctx));
    attn_context_destroy(ctx);
    return 1;
  }
  const bool loaded = dlopen("libnvrtc.so.13", RTLD_NOLOAD | RTLD_NOW) != NULL ||
                      dlopen("libnvrtc.so.12", RTLD_NOLOAD | RTLD_NOW) != NULL ||
                      dlopen("libnvrtc.so", RTLD_NOLOAD | RTLD_NOW) != NULL;
  printf("nvrtc loaded: %s\n", loaded ? "yes" : "no");
  attn_module_destroy(m);
  attn_context_destroy(ctx);
  return 0;
}
