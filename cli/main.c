/*
 * main.c: the attnc command, a client of libattn like any other. Each
 * subcommand is a short list of pipeline calls; the pipeline itself is
 *
 *   source_load -> front_end (parse, build)                      (compiler,
 *     -> compile_module (match, plan, emit)                     pipeline.c)
 *     -> NVRTC -> cache -> driver load -> launch                  (runtime)
 *
 * and `ir`, `plan`, `emit`, `compile` stop after a named stage of it. The
 * environment variables for the library's tuning knobs are read here, not
 * in the library (cli_compile_options, cli_context_create).
 *
 * Exit status: 0 success; 1 errors in the input (diagnostics printed);
 * 2 bad usage; 3 could not run (no GPU, driver or NVRTC failure);
 * 4 a GPU result disagreed with the CPU reference.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "cli.h"

static const char usage_text[] =
    "usage: attnc COMMAND [OPTIONS] FILE...\n"
    "\n"
    "commands (each takes --help):\n"
    "  check FILE...          parse and check; report every error\n"
    "  ir [--backward] FILE   print the IR of each graph (--backward, before\n"
    "                         or after FILE: the derived backward of graphs\n"
    "                         that declare grad)\n"
    "  dot FILE               print the IR as a Graphviz digraph\n"
    "  plan FILE [--arch A]   print each graph's launch plan (default sm_90a):\n"
    "                         its kernels, grids, tensor maps and workspace\n"
    "  emit FILE [--arch A] [--brief]\n"
    "                         print the generated CUDA C (default sm_90a);\n"
    "                         --brief elides the embedded template texts\n"
    "  compile FILE --arch A -o OUT [--ptx OUT.ptx] [--part P] [-v]\n"
    "                         compile with NVRTC and write the cubin (and\n"
    "                         the PTX); -v prints ptxas's resource report;\n"
    "                         --part forward, backward, prefill or decode:\n"
    "                         one program of libattn's JIT; --source\n"
    "                         OUT.cu writes the unit NVRTC compiles\n"
    "  build FILE --arch A[,B...] -o DIR [--name N] [-MF DEPFILE] [-j N] [-v]\n"
    "                         compile ahead of time: DIR/N.h (typed entry\n"
    "                         points), DIR/N.c (cubins, PTX, launch plans)\n"
    "                         and DIR/N.d; the targets compile at once on\n"
    "                         -j N threads (default: the CPUs); -v reports\n"
    "                         each target's build\n"
    "  run FILE [--cpu] [--shape B=2,H=4,S=128] [--set NAME=VALUE]\n"
    "           [--seed N] [--graph NAME] [--check] [--bench] [--bshd]\n"
    "           [--arch A] [--backward]\n"
    "                         run on random inputs: on the GPU, checked\n"
    "                         against the CPU reference with --check, or\n"
    "                         on the CPU reference alone with --cpu;\n"
    "                         --bshd binds q, k, v, o as [B, S, H, D]\n"
    "                         views; --arch compiles for target A;\n"
    "                         --backward also runs a graph's backward on\n"
    "                         a random dO (gradients, a grad block's amax)\n"
    "  cache [list|clear]     list (graph, source, target, size, date) or\n"
    "                         clear the kernel cache\n"
    "  cache warm [--arch A] [-j N] FILE...\n"
    "                         compile every program of each FILE into the\n"
    "                         cache (forward, decode, backward; N files at\n"
    "                         once, default the CPUs), under the knobs below,\n"
    "                         for A (default: GPU 0's target)\n"
    "\n"
    "options:\n"
    "  --help                 this text\n"
    "  --version              the version\n"
    "\n"
    "exit status: 0 ok, 1 errors in the input, 2 bad usage,\n"
    "             3 could not run, 4 GPU result disagrees with the reference\n"
    "environment: ATTN_CACHE_DIR (cache root), ATTN_NO_CACHE=1 (no cache),\n"
    "             ATTN_NVRTC (path of the libnvrtc to use); tuning knobs the\n"
    "             command passes to the library: ATTN_BWD_TEMPLATE=sm80|sm90|sm90f8|sm90stamps|sm90bm80|sm90bm80s|sm90bm80late,\n"
    "             ATTN_SM90_VARIANT=auto|base|persist|bn80|persist_bn80|f16_pv|wg3|kv8_early|\n"
    "             kv_copy|bn176|fp8_vt8|kv8|bn128|rescale_late|pv_overlap|pv_once|\n"
    "             q_early|auto35|tanh_poly|auto36|\n"
    "             partial_first|ring_closed|q_before_v|pv_wait_next|o_smem|o_regs,\n"
    "             ATTN_PERSISTENT_CTAS=N, ATTN_LAUNCH_OVERLAP=0 (plain launches),\n"
    "             ATTN_EXP2_FMA=0..4 (key blocks of four with exp2 on the FMA pipe)\n";

int cli_usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "attnc: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry 'attnc --help'.\n");
  return EXIT_USAGE;
}

/* Front end: file -> checked IR. Prints diagnostics; NULL on errors. */
IrModule *cli_front_end(const char *path, Arena *a) {
  Diag d = {0};
  IrModule *m = NULL;
  Source *src = source_load(a, path, &d);
  if (src) m = front_end(src, a, &d);
  if (d.out.len) fputs(d.out.data, stderr);
  if (d.nerrors) m = NULL;
  diag_free(&d);
  return m;
}

/* The tuning knobs' environment variables, as the library's numbers. */
static int env_bwd_template(void) {
  const char *v = getenv("ATTN_BWD_TEMPLATE");
  return v && !strcmp(v, "sm80")     ? 80
         : v && !strcmp(v, "sm90")   ? 90
         : v && !strcmp(v, "sm90f8") ? 91
         : v && !strcmp(v, "sm90stamps") ? 92
         : v && !strcmp(v, "sm90bm80") ? 93
         : v && !strcmp(v, "sm90bm80s") ? 94
         : v && !strcmp(v, "sm90bm80late") ? 95
                                     : 0;
}

static int env_sm90_variant(void) {
  const int k = tmpl_sm90_variant_index(getenv("ATTN_SM90_VARIANT"));
  return k < 0 ? 0 : k;
}

/* ATTN_EXP2_FMA=0..4: that many of every four key blocks' exponentials on
 * the FMA pipe; unset: auto. */
static int env_exp2_fma(void) { return exp2_fma_option_of_text(getenv("ATTN_EXP2_FMA")); }

CompileOptions cli_compile_options(const char *arch) {
  return (CompileOptions){.arch = arch, .bwd_template = env_bwd_template(),
                          .sm90_variant = env_sm90_variant(), .exp2_fma = env_exp2_fma()};
}

attn_context *cli_context_create(void) {
  attn_context *ctx;
  if (attn_context_create(&ctx) != ATTN_SUCCESS) {
    fprintf(stderr, "attnc: error: out of memory\n");
    return NULL;
  }
  attn_context_set_option(ctx, ATTN_OPTION_BACKWARD_TEMPLATE, env_bwd_template());
  attn_context_set_option(ctx, ATTN_OPTION_SM90_VARIANT, env_sm90_variant());
  attn_context_set_option(ctx, ATTN_OPTION_EXP2_FMA, env_exp2_fma());
  const char *ctas = getenv("ATTN_PERSISTENT_CTAS");
  if (ctas && *ctas) attn_context_set_option(ctx, ATTN_OPTION_PERSISTENT_CTAS, atoll(ctas));
  const char *overlap = getenv("ATTN_LAUNCH_OVERLAP");
  if (overlap && !strcmp(overlap, "0")) attn_context_set_option(ctx, ATTN_OPTION_LAUNCH_OVERLAP, 0);
  return ctx;
}

static int cmd_check(int argc, char **argv) {
  if (argc < 1) return cli_usage_error("%s", "check needs at least one FILE");
  int status = EXIT_OK;
  for (int k = 0; k < argc; k++) {
    Arena *a = arena_new();
    if (!cli_front_end(argv[k], a)) status = EXIT_INPUT;
    arena_free(a);
  }
  return status;
}

/* `ir --backward`: the derived backward of each graph that declares grad.
 * Returns false after printing the errors of a graph it cannot derive. */
static bool dump_backward(StrBuf *out, const IrGraph *g, Arena *a) {
  if (!bwd_has_grad(g)) {
    sb_printf(out, "# graph %s declares no grad\n\n", g->name);
    return true;
  }
  Diag d = {0};
  BwdGraph *bg = bwd_derive(g, a, &d);
  if (bg) bwd_dump(out, bg);
  if (d.out.len) fputs(d.out.data, stderr);
  diag_free(&d);
  return bg != NULL;
}

/* ir and dot: print every graph of one file with a dumper. */
static int cmd_dump(int argc, char **argv,
                    void (*dump)(StrBuf *, const IrGraph *)) {
  bool backward = false;
  const char *file = NULL;
  for (int k = 0; k < argc; k++) {
    if (dump == ir_dump && !strcmp(argv[k], "--backward")) backward = true;
    else if (argv[k][0] == '-') return cli_usage_error("unknown option '%s'", argv[k]);
    else if (file) return cli_usage_error("%s", "expected exactly one FILE");
    else file = argv[k];
  }
  if (!file) return cli_usage_error("%s", "expected exactly one FILE");
  Arena *a = arena_new();
  IrModule *m = cli_front_end(file, a);
  bool ok = m != NULL;
  if (m) {
    StrBuf out = {0};
    for (int k = 0; k < m->ngraphs; k++) {
      if (backward) ok &= dump_backward(&out, m->graphs[k], a);
      else dump(&out, m->graphs[k]);
    }
    if (ok && out.len) fwrite(out.data, 1, out.len, stdout);
    sb_free(&out);
  }
  arena_free(a);
  return ok ? EXIT_OK : EXIT_INPUT;
}

/* Prints the unit with each embedded template replaced by a one-line
 * reference, so goldens test what the emitter generates, not the
 * templates' text. */
static void put_brief(const char *src) {
  const EmbeddedText *texts = attn_embedded_texts;
  while (*src) {
    const char *next = NULL;
    int which = 0;
    for (int k = 0; k < attn_nembedded_texts; k++) {
      const char *at = strstr(src, texts[k].text);
      if (at && (!next || at < next)) next = at, which = k;
    }
    if (!next) {
      fputs(src, stdout);
      return;
    }
    fwrite(src, 1, (size_t)(next - src), stdout);
    printf("/* [the text of %s] */\n", texts[which].name);
    src = next + strlen(texts[which].text);
  }
}

/* emit and plan: the pipeline up to STAGE_EMIT or STAGE_PLAN. */
static int cmd_stage(int argc, char **argv, Stage last) {
  const char *arch = "sm_90a", *file = NULL, *what = last == STAGE_PLAN ? "plan" : "emit";
  bool brief = false;
  for (int k = 0; k < argc; k++) {
    if (!strcmp(argv[k], "--arch") && k + 1 < argc) arch = argv[++k];
    else if (last == STAGE_EMIT && !strcmp(argv[k], "--brief")) brief = true;
    else if (argv[k][0] == '-') return cli_usage_error("unknown option '%s'", argv[k]);
    else if (file) return cli_usage_error("%s takes one FILE", what);
    else file = argv[k];
  }
  if (!file) return cli_usage_error("%s needs a FILE", what);
  Arena *a = arena_new();
  int status = EXIT_INPUT;
  IrModule *m = cli_front_end(file, a);
  if (m) {
    Diag d = {0};
    Compiled cm;
    const CompileOptions opt = cli_compile_options(arch);
    if (compile_module(m, &opt, last, a, &d, &cm) == 0) {
      if (last == STAGE_PLAN) {
        StrBuf out = {0};
        plan_write(&out, cm.plans, cm.ngraphs);
        fputs(out.data, stdout);
        sb_free(&out);
      } else if (brief) {
        put_brief(cm.source);
      } else {
        fputs(cm.source, stdout);
      }
      status = EXIT_OK;
    }
    if (d.out.len) fputs(d.out.data, stderr);
    diag_free(&d);
  }
  arena_free(a);
  return status;
}

static int dispatch(int argc, char **argv) {
  if (argc < 2) {
    fputs(usage_text, stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  int n = argc - 2;
  char **rest = argv + 2;
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    fputs(usage_text, stdout);
    return EXIT_OK;
  }
  if (!strcmp(cmd, "--version")) {
    printf("attnc %s\n", ATTNC_VERSION);
    return EXIT_OK;
  }
  if (n > 0 && (!strcmp(rest[0], "--help") || !strcmp(rest[0], "-h"))) {
    fputs(usage_text, stdout); /* `attnc run --help`: the same text */
    return EXIT_OK;
  }
  if (!strcmp(cmd, "check")) return cmd_check(n, rest);
  if (!strcmp(cmd, "ir")) return cmd_dump(n, rest, ir_dump);
  if (!strcmp(cmd, "dot")) return cmd_dump(n, rest, ir_dot);
  if (!strcmp(cmd, "plan")) return cmd_stage(n, rest, STAGE_PLAN);
  if (!strcmp(cmd, "emit")) return cmd_stage(n, rest, STAGE_EMIT);
  if (!strcmp(cmd, "compile")) return cli_compile(n, rest);
  if (!strcmp(cmd, "build")) return cli_build(n, rest);
  if (!strcmp(cmd, "run")) return cli_run(n, rest);
  if (!strcmp(cmd, "cache")) return cli_cache(n, rest);
  return cli_usage_error("unknown command '%s'", cmd);
}

typedef struct MainArgs {
  int argc;
  char **argv;
  int status;
} MainArgs;

static void main_pass(void *arg) {
  MainArgs *m = arg;
  m->status = dispatch(m->argc, m->argv);
}

/* The whole command runs as one scope (compiler/mem.c): running out of
 * memory or a broken invariant anywhere in it is reported here, and the
 * command exits with status 3 (the library itself never exits). */
int main(int argc, char **argv) {
  MainArgs m = {argc, argv, EXIT_OK};
  char msg[512];
  if (mem_scoped(main_pass, &m, msg, sizeof msg) != 0) {
    fflush(stdout);
    fprintf(stderr, "attnc: %s\n", msg);
    return EXIT_NORUN;
  }
  return m.status;
}
