/*
 * cli_cache.c: `attnc cache [list|clear]` — the kernel cache at
 * ${ATTN_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/attnc} — and `attnc cache
 * warm [--arch A] [-j N] FILE...`, which fills it with every program of
 * each FILE (the forward's, and the decode kernels' and the backward's
 * that a module otherwise compiles on their first launches), N files at
 * once, under the tuning knobs of the environment, so that a later run
 * under the same knobs and target finds them all (tools/device_check.sh
 * before the GPU tests: the examples' programs are 78 s of NVRTC one at a
 * time on the development machine; a server can do the same at install).
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rt.h"

/* One file's warm-up, done by whichever worker takes it. */
typedef struct WarmJob {
  const char *path;
  attn_status st;
  char *error; /* the library's message on failure (malloc'd) */
  double seconds;
} WarmJob;

typedef struct WarmQueue {
  WarmJob *jobs;
  int njobs, next;
  const char *arch; /* NULL: the GPU's */
  pthread_mutex_t lock;
} WarmQueue;

static void warm_one(const WarmQueue *q, WarmJob *j) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  attn_context *ctx = cli_context_create();
  if (!ctx) {
    j->st = ATTN_ERROR_OUT_OF_MEMORY;
    return;
  }
  attn_module *m = NULL;
  j->st = q->arch ? attn_context_set_arch(ctx, q->arch) : ATTN_SUCCESS;
  if (!j->st) j->st = attn_module_compile_file(ctx, j->path, &m);
  if (!j->st) j->st = attn_module_prepare(m);
  if (j->st) j->error = strdup(attn_context_error(ctx));
  attn_module_destroy(m);
  attn_context_destroy(ctx);
  j->seconds = cli_seconds_since(&t0);
}

static void *warm_worker(void *arg) {
  WarmQueue *q = arg;
  for (;;) {
    const int k = cli_take_job(&q->lock, &q->next, q->njobs);
    if (k < 0) return NULL;
    warm_one(q, &q->jobs[k]);
  }
}

/* The target of GPU 0 (`--arch` left out), read here once: the workers'
 * threads have no current CUDA context, from which the library would take
 * it. False, with the reason in why, where there is no driver or GPU. */
static bool gpu_arch(char arch[16], StrBuf *why) {
  attn_status st;
  const RtDriver *d = rt_driver(&st, why);
  CUdevice dev;
  if (!d) return false;
  const CUresult r = d->DeviceGet(&dev, 0);
  if (r != CUDA_SUCCESS) {
    rt_driver_error(d, r, "cuDeviceGet", why);
    return false;
  }
  return rt_device_arch(d, dev, arch, why) == ATTN_SUCCESS;
}

static int cache_warm(int argc, char **argv) {
  const char *arch = NULL;
  int threads = 0, nfiles = 0;
  const char **files = calloc((size_t)argc + 1, sizeof *files);
  if (!files) {
    fprintf(stderr, "attnc: error: out of memory\n");
    return EXIT_NORUN;
  }
  for (int k = 0; k < argc; k++) {
    if (!strcmp(argv[k], "-j") && k + 1 < argc) {
      if (!(threads = cli_jobs_arg(argv[++k]))) {
        free(files);
        return EXIT_USAGE;
      }
    } else if (!strcmp(argv[k], "--arch") && k + 1 < argc) {
      arch = argv[++k];
    } else if (argv[k][0] == '-') {
      free(files);
      return cli_usage_error("unknown option '%s'", argv[k]);
    } else {
      files[nfiles++] = argv[k];
    }
  }
  if (nfiles == 0) {
    free(files);
    return cli_usage_error("%s", "usage: attnc cache warm [--arch A] [-j N] FILE...");
  }
  if (getenv("ATTN_NO_CACHE")) {
    free(files);
    fprintf(stderr, "attnc: error: ATTN_NO_CACHE is set: there is no cache to warm\n");
    return EXIT_NORUN;
  }
  char gpu[16];
  if (!arch) {
    StrBuf why = {0};
    const bool ok = gpu_arch(gpu, &why);
    if (!ok)
      fprintf(stderr, "attnc: error: no GPU to take the target from (name it with --arch): %s\n",
              why.data ? why.data : "no reason given");
    sb_free(&why);
    if (!ok) {
      free(files);
      return EXIT_NORUN;
    }
    arch = gpu;
  }
  WarmJob *jobs = calloc((size_t)nfiles, sizeof *jobs);
  if (!jobs) {
    free(files);
    fprintf(stderr, "attnc: error: out of memory\n");
    return EXIT_NORUN;
  }
  for (int k = 0; k < nfiles; k++) jobs[k].path = files[k];
  WarmQueue q = {.jobs = jobs, .njobs = nfiles, .arch = arch};
  pthread_mutex_init(&q.lock, NULL);
  if (threads <= 0) threads = cli_default_jobs();
  if (threads > nfiles) threads = nfiles;
  cli_run_threads(threads, warm_worker, &q);
  pthread_mutex_destroy(&q.lock);
  /* Reported in the files' order, whatever order the threads took. */
  int status = EXIT_OK, failed = 0;
  for (int k = 0; k < nfiles; k++) {
    const WarmJob *j = &jobs[k];
    if (j->st == ATTN_SUCCESS) {
      printf("warm: %s (%.1f s)\n", j->path, j->seconds);
      continue;
    }
    failed++;
    /* The library's message is the diagnostic itself (file:line:col, or
     * "cannot read FILE"); a bare status where it has none. */
    if (j->error && *j->error)
      fprintf(stderr, "%s%s", j->error, j->error[strlen(j->error) - 1] == '\n' ? "" : "\n");
    else
      fprintf(stderr, "attnc: error: %s: %s\n", j->path, attn_status_string(j->st));
    /* The input's errors, or the machine's (no NVRTC, a full disk). */
    const int s = j->st == ATTN_ERROR_SOURCE || j->st == ATTN_ERROR_IO ||
                          j->st == ATTN_ERROR_UNSUPPORTED
                      ? EXIT_INPUT
                      : EXIT_NORUN;
    if (s > status) status = s;
  }
  printf("warm: %d of %d files on %d thread%s\n", nfiles - failed, nfiles, threads,
         threads > 1 ? "s" : "");
  for (int k = 0; k < nfiles; k++) free(jobs[k].error);
  free(jobs);
  free(files);
  return status;
}

int cli_cache(int argc, char **argv) {
  const char *what = argc > 0 ? argv[0] : "list";
  if (!strcmp(what, "warm")) return cache_warm(argc - 1, argv + 1);
  if (argc > 1 || (strcmp(what, "list") && strcmp(what, "clear")))
    return cli_usage_error("%s", "usage: attnc cache [list|clear] | attnc cache warm [--arch A] [-j N] FILE...");
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
