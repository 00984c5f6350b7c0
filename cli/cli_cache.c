/*
 * cli_cache.c: `attnc cache [list|clear]` — the kernel cache at
 * ${ATTN_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/attnc}.
 */
#include <string.h>

#include "cli.h"
#include "rt.h"

int cli_cache(int argc, char **argv) {
  const char *what = argc > 0 ? argv[0] : "list";
  if (argc > 1 || (strcmp(what, "list") && strcmp(what, "clear")))
    return cli_usage_error("%s", "usage: attnc cache [list|clear]");
  StrBuf root = {0}, out = {0};
  int status = EXIT_OK;
  if (cache_default_root(&root) != 0) {
    fprintf(stderr, "attnc: error: no cache directory: set ATTN_CACHE_DIR or HOME\n");
    status = EXIT_NORUN;
  } else if ((!strcmp(what, "list") ? cache_list(root.data, &out) : cache_clear(root.data, &out)) != 0) {
    fprintf(stderr, "attnc: error: %s\n", out.data ? out.data : "cache failure");
    status = EXIT_NORUN;
  } else {
    printf("# cache: %s\n", root.data);
    if (out.len) fputs(out.data, stdout);
  }
  sb_free(&root);
  sb_free(&out);
  return status;
}
