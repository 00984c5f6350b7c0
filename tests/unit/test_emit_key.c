/*
 * test_emit_key.c: the kernel cache keys a program by emit_unit_key's text
 * (each embedded text named, not pasted) with attn_templates_id, not by the
 * unit NVRTC compiles (runtime/jit.c): that is sound only if the key text
 * is the unit with exactly those texts replaced. For every example the
 * matcher takes, on sm_80 and sm_90a, each part (whole, forward, backward):
 * the key text with its names expanded back to the texts must be the
 * unit byte for byte.
 */
#include <criterion/criterion.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>

#include "unit_build.h"

/* key with its first line (the digest) dropped and each name expanded. */
static void expand(StrBuf *out, const char *key) {
  const char *p = strchr(key, '\n');
  cr_assert(p && strstr(key, attn_templates_id) && strstr(key, attn_templates_id) < p,
            "the key text begins with the templates' digest");
  for (p++; *p;) {
    const char *m = strstr(p, "/* \1[the text of ");
    if (!m) {
      sb_puts(out, p);
      return;
    }
    sb_write(out, p, (size_t)(m - p));
    const char *name = m + strlen("/* \1[the text of ");
    const char *end = strstr(name, "] */\n");
    cr_assert(end, "an unterminated name");
    const EmbeddedText *texts = attn_embedded_texts;
    int k = 0;
    while (k < attn_nembedded_texts && (strlen(texts[k].name) != (size_t)(end - name) ||
                                        strncmp(texts[k].name, name, (size_t)(end - name)) != 0))
      k++;
    cr_assert(k < attn_nembedded_texts, "an unknown name '%.*s'", (int)(end - name), name);
    sb_puts(out, texts[k].text);
    p = end + strlen("] */\n");
  }
}

Test(emit_key, names_stand_for_exactly_the_texts) {
  glob_t gl;
  cr_assert_eq(glob("examples/*.attn", 0, NULL, &gl), 0, "run from the repository root");
  int checked = 0;
  for (size_t f = 0; f < gl.gl_pathc; f++) {
    for (int t = 0; t < 2; t++) {
      Arena *a = arena_new();
      Diag d = {0};
      const Source *src = source_load(a, gl.gl_pathv[f], &d);
      IrModule *m = src ? front_end(src, a, &d) : NULL;
      const CompileOptions o = {.arch = t ? "sm_90a" : "sm_80"};
      Compiled c;
      if (!m || compile_module(m, &o, STAGE_PLAN, a, &d, &c) != 0) { /* refused: its golden's */
        diag_free(&d);
        arena_free(a);
        continue;
      }
      for (EmitPart part = EMIT_ALL; part <= EMIT_DECODE; part++) {
        const char *unit = emit_unit_part(&c, &o, part, a);
        StrBuf back = {0};
        expand(&back, emit_unit_key(&c, &o, part, a));
        cr_assert(back.data && strcmp(back.data, unit) == 0,
                  "%s, %s, part %d: the key text does not expand to the unit", gl.gl_pathv[f],
                  o.arch, (int)part);
        sb_free(&back);
        checked++;
      }
      diag_free(&d);
      arena_free(a);
    }
  }
  globfree(&gl);
  cr_assert_gt(checked, 60, "only %d units checked", checked);
}
