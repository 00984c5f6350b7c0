/* embedded.c: a module from an `attnc build` image (attn_embedded, the
 * generated C file): its source through the front end, then the image
 * for the target (a cubin, else PTX the driver compiles) with the plans
 * it carries; with no image that fits, the JIT path (jit.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt.h"

/* "sm_90a" -> 90, suffix 'a'; -1 for anything else. */
static int rt_arch_number(const char *arch, char *suffix) {
  *suffix = '\0';
  if (!nvrtc_arch_valid(arch)) return -1;
  int n = atoi(arch + 3);
  const char *p = arch + 3;
  while (*p >= '0' && *p <= '9') p++;
  *suffix = *p;
  return n;
}

/* Whether an image built for `image` runs on a device whose target is
 * `target`. Cubins: the very target, or sm_XY (no suffix) on X.Z with
 * Z >= Y (binary compatibility within a major version; 'a' and 'f' code
 * runs only on its own target). PTX: any target of equal or higher
 * compute capability; the driver compiles it. */
static bool rt_image_fits(const attn_embedded_image *im, const char *target) {
  char is, ts;
  int in = rt_arch_number(im->arch, &is), tn = rt_arch_number(target, &ts);
  if (in < 0 || tn < 0 || !im->data || im->size == 0) return false;
  if (im->is_ptx) return is == '\0' && tn >= in;
  if (strcmp(im->arch, target) == 0) return true;
  return is == '\0' && in / 10 == tn / 10 && tn >= in;
}

/* Do the image's plans describe this module's graphs, in order? An
 * image from the same source and attnc version always does; this guards
 * the rest (the loader then reads them again into the module's arena). */
static bool rt_image_matches(attn_context *ctx, const attn_embedded_image *im,
                             const IrModule *ir) {
  RtPlans rp = {.text = im->plans, .a = arena_new(), .ir = ir};
  bool ok = rp.a && im->plans && rt_scoped(ctx, rt_plans_pass, &rp, &rp.why) == ATTN_SUCCESS &&
            rp.rc == 0;
  diag_free(&rp.why);
  arena_free(rp.a);
  return ok;
}

/* The image to use for target: an exact cubin first, then a compatible
 * cubin (highest first), then PTX (highest first); NULL when none fits. */
static const attn_embedded_image *rt_pick_image(attn_context *ctx, const attn_embedded *em,
                                                const IrModule *ir, const char *target) {
  const attn_embedded_image *best = NULL;
  int best_rank = 0, best_num = -1;
  for (int i = 0; i < em->nimages; i++) {
    const attn_embedded_image *im = &em->images[i];
    if (!im->arch || !rt_image_fits(im, target) || !rt_image_matches(ctx, im, ir)) continue;
    char suffix;
    int num = rt_arch_number(im->arch, &suffix);
    int rank = im->is_ptx ? 1 : strcmp(im->arch, target) == 0 ? 3 : 2;
    if (rank > best_rank || (rank == best_rank && num > best_num)) {
      best = im;
      best_rank = rank;
      best_num = num;
    }
  }
  return best;
}

static attn_status rt_module_from_image(attn_context *ctx, Arena *a,
                                        const IrModule *ir,
                                        const attn_embedded_image *im,
                                        const char *target,
                                        attn_module **out) {
  attn_status st = rt_module_from_ir(ctx, a, ir, im->plans, im->arch, im->data, im->size, out);
  if (st) return st;
  attn_module *m = *out;
  m->kind = im->is_ptx ? ATTN_FROM_EMBEDDED_PTX : ATTN_FROM_EMBEDDED;
  snprintf(m->target, sizeof m->target, "%s", target);
  if (im->is_ptx && m->cubin[m->cubin_len - 1] != '\0') {
    attn_module_destroy(m);
    *out = NULL;
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "embedded PTX for %s is not NUL-terminated", im->arch);
  }
  if ((st = rt_module_try_load(m))) {
    attn_module_destroy(m);
    *out = NULL;
  }
  return st;
}

static attn_status module_load_embedded_impl(attn_context *ctx,
                                      const attn_embedded *em,
                                      attn_module **out) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  if (!out || !em)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_module_load_embedded: %s is NULL",
                   out ? "em" : "out");
  *out = NULL;
  rt_clear_error(ctx);
  if (em->format != ATTN_EMBEDDED_FORMAT || !em->source ||
      (em->nimages > 0 && !em->images) || em->nimages < 0)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "embedded module '%s' has format %d; this libattn reads "
                   "format %d (rebuild it with this attnc)",
                   em->name ? em->name : "?", em->format,
                   ATTN_EMBEDDED_FORMAT);
  RtFront f = {.name = em->name ? em->name : "<embedded>", .text = em->source,
               .len = em->source_len};
  attn_status st = rt_front(ctx, &f);
  if (st) return st;
  Arena *a = f.a;
  const IrModule *ir = f.ir;
  const Source *src = f.src;
  char target[16];
  st = rt_target_arch(ctx, target);
  if (st) {
    arena_free(a);
    return st;
  }
  bool same_build = em->abi_version == ATTN_ABI_VERSION && em->attnc_version &&
                    strcmp(em->attnc_version, ATTNC_VERSION) == 0;
  if (!same_build) {
    ctx->cache.warning.len = 0;
    sb_printf(&ctx->cache.warning,
              "%s was built by attnc %s (kernel ABI %d); this "
              "libattn is %s (ABI %d): compiling its kernels instead",
              src->name, em->attnc_version ? em->attnc_version : "?",
              em->abi_version, ATTNC_VERSION, ATTN_ABI_VERSION);
  }
  const attn_embedded_image *im =
      same_build ? rt_pick_image(ctx, em, ir, target) : NULL;
  if (im) return rt_module_from_image(ctx, a, ir, im, target, out);
  return rt_compile_ir(ctx, a, ir, out);
}

static attn_status context_embedded_module_impl(attn_context *ctx,
                                         const attn_embedded *em,
                                         attn_module **out) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  if (!out || !em)
    return rt_fail(ctx, ATTN_ERROR_INVALID_ARGUMENT,
                   "attn_context_embedded_module: %s is NULL",
                   out ? "em" : "out");
  for (RtEmbeddedModule *e = ctx->embedded; e; e = e->next)
    if (e->em == em) {
      rt_clear_error(ctx);
      *out = e->m;
      return ATTN_SUCCESS;
    }
  RtEmbeddedModule *e = mem_calloc(1, sizeof *e);
  if (!e) return rt_fail(ctx, ATTN_ERROR_OUT_OF_MEMORY, "out of memory");
  attn_status st = module_load_embedded_impl(ctx, em, &e->m);
  if (st) {
    mem_free(e);
    *out = NULL;
    return st;
  }
  e->em = em;
  e->next = ctx->embedded;
  ctx->embedded = e;
  *out = e->m;
  return ATTN_SUCCESS;
}

/* ------------------------------------------------------------- attn.h */

attn_status attn_module_load_embedded(attn_context *ctx, const attn_embedded *em,
                                      attn_module **out) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL_OUT(ctx, module_load_embedded_impl(ctx, em, out), out, attn_module_destroy);
}

/* (The module stays the context's: a failure after it was made leaves it
 * there, destroyed with the context.) */
static void rt_keep_module(attn_module *m) { (void)m; }

attn_status attn_context_embedded_module(attn_context *ctx, const attn_embedded *em,
                                         attn_module **out) {
  if (!ctx) return ATTN_ERROR_INVALID_ARGUMENT;
  RT_CALL_OUT(ctx, context_embedded_module_impl(ctx, em, out), out, rt_keep_module);
}
