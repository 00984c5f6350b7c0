/*
 * cli_compile.c: `attnc compile FILE --arch A -o OUT [--ptx OUT.ptx]
 * [--part forward|backward|prefill|decode] [--source OUT.cu] [-v]`.
 * The whole compile pipeline without a GPU: front end, compile_module
 * (match, plan, emit), NVRTC.
 * CI uses it to prove every example compiles for every target; -v prints
 * ptxas's resource report (registers, spills, shared memory); --part
 * compiles one part of the unit: the programs libattn's JIT builds are
 * prefill (the forward pass without its decode kernels), decode and
 * backward (each compiled on first use); forward is prefill and decode
 * together. --source writes the exact unit handed to NVRTC (to time or
 * profile NVRTC and ptxas on it apart, or to read what a part holds).
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rt.h"

static int write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
    if (f) fclose(f);
    fprintf(stderr, "attnc: error: cannot write %s\n", path);
    return -1;
  }
  return 0;
}

int cli_compile(int argc, char **argv) {
  const char *file = NULL, *arch = NULL, *out = NULL, *ptx = NULL, *source = NULL;
  bool verbose = false;
  EmitPart part = EMIT_ALL;
  for (int k = 0; k < argc; k++) {
    if (!strcmp(argv[k], "--arch") && k + 1 < argc) arch = argv[++k];
    else if (!strcmp(argv[k], "-o") && k + 1 < argc) out = argv[++k];
    else if (!strcmp(argv[k], "--ptx") && k + 1 < argc) ptx = argv[++k];
    else if (!strcmp(argv[k], "--source") && k + 1 < argc) source = argv[++k];
    else if (!strcmp(argv[k], "-v")) verbose = true;
    else if (!strcmp(argv[k], "--part") && k + 1 < argc) {
      const char *p = argv[++k];
      if (!strcmp(p, "forward")) part = EMIT_FORWARD;
      else if (!strcmp(p, "backward")) part = EMIT_BACKWARD;
      else if (!strcmp(p, "prefill")) part = EMIT_PREFILL;
      else if (!strcmp(p, "decode")) part = EMIT_DECODE;
      else
        return cli_usage_error("--part takes forward, backward, prefill or decode, not '%s'", p);
    }
    else if (argv[k][0] == '-') return cli_usage_error("unknown option '%s'", argv[k]);
    else if (file) return cli_usage_error("%s", "compile takes one FILE");
    else file = argv[k];
  }
  if (!file || !arch || !out) return cli_usage_error("%s", "compile needs FILE, --arch A and -o OUT");
  if (!nvrtc_arch_valid(arch)) return cli_usage_error("unknown target '%s' (try sm_80 or sm_90a)", arch);

  Arena *a = arena_new();
  int status = EXIT_INPUT;
  IrModule *m = cli_front_end(file, a);
  Diag d = {0};
  Compiled cm;
  const CompileOptions copt = cli_compile_options(arch);
  if (m && compile_module(m, &copt, STAGE_EMIT, a, &d, &cm) == 0) {
    NvrtcOptions opt;
    nvrtc_options(&opt, arch, getenv("ATTN_NO_CACHE") != NULL);
    NvrtcOutput res = {0};
    StrBuf err = {0};
    const char *src = part == EMIT_ALL ? cm.source : emit_unit_part(&cm, &copt, part, a);
    if (source && write_file(source, src, strlen(src)) != 0) {
      status = EXIT_NORUN;
    } else if (nvrtc_compile(src, file, &opt, ptx != NULL, &res, &err) != ATTN_SUCCESS) {
      fprintf(stderr, "attnc: error: NVRTC failed for %s (a bug in attnc):\n%s\n", arch,
              err.data ? err.data : "");
      status = EXIT_NORUN;
    } else {
      status = EXIT_OK;
      if (write_file(out, res.cubin, res.cubin_len) != 0) status = EXIT_NORUN;
      if (ptx && write_file(ptx, res.ptx, res.ptx_len) != 0) status = EXIT_NORUN;
      if (verbose && res.log) fputs(res.log, stderr);
    }
    nvrtc_output_free(&res);
    sb_free(&err);
  }
  if (d.out.len) fputs(d.out.data, stderr);
  diag_free(&d);
  arena_free(a);
  return status;
}
