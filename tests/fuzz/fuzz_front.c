/* fuzz_front.c: libFuzzer harness for the front end. Any byte string goes
 * through source_from_string -> parse_source -> (if it parsed) ir_build on
 * a fresh arena, which is then freed: the harness finds crashes, hangs,
 * leaks and sanitizer reports, and checks the parser's promises. */
#include <stdint.h>
#include <stdlib.h>

#include "attnc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Arena *a = arena_new();
  Diag d = {0};
  const Source *src =
      source_from_string(a, "fuzz.attn", (const char *)data, size);
  AstFile *ast = parse_source(src, a, &d);
  if (!ast)
    abort(); /* parse_source never returns NULL */
  if (d.nerrors == 0) {
    IrModule *m = ir_build(ast, a, &d);
    if (!m && d.nerrors == 0)
      abort(); /* a failed build must say why */
  } else if (d.out.len == 0) {
    abort(); /* every counted error is shown or capped, never silent */
  }
  diag_free(&d);
  arena_free(a);
  return 0;
}
