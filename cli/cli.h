/* cli.h: the attnc command's own pieces (main.c, cli_*.c); not library. */
#ifndef ATTNC_CLI_H
#define ATTNC_CLI_H

#include <pthread.h>
#include <time.h>

#include "attn.h"
#include "attnc.h"

enum {
  EXIT_OK = 0,
  EXIT_INPUT = 1,    /* errors in the .attn input */
  EXIT_USAGE = 2,    /* bad command line */
  EXIT_NORUN = 3,    /* no GPU, driver or NVRTC failure */
  EXIT_MISMATCH = 4  /* GPU result disagrees with the CPU reference */
};

/* Prints "attnc: MSG" and a hint to stderr; returns EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* File -> checked IR; prints diagnostics to stderr; NULL on errors. */
IrModule *cli_front_end(const char *path, Arena *a);
/* The compile options for arch, with the tuning knobs' defaults from the
 * environment (ATTN_BWD_TEMPLATE=sm80|sm90, ATTN_SM90_VARIANT=NAME): the
 * library reads no environment for them, the command does. */
CompileOptions cli_compile_options(const char *arch);
/* A library context with those knobs and ATTN_PERSISTENT_CTAS=N set as
 * its options; NULL (after a message) when it cannot be made. */
attn_context *cli_context_create(void);

/* Work on several threads (cli_jobs.c). -j's default: the online CPUs,
 * 1 to 64; -j's value, 1 to 64, or 0 after printing a usage error; the
 * next index of a queue of njobs under lock (-1 when none is left);
 * worker(arg) on `threads` threads, this one among them, until each
 * returns; seconds since t0 (CLOCK_MONOTONIC). */
int cli_default_jobs(void);
int cli_jobs_arg(const char *text);
int cli_take_job(pthread_mutex_t *lock, int *next, int njobs);
void cli_run_threads(int threads, void *(*worker)(void *), void *arg);
double cli_seconds_since(const struct timespec *t0);

int cli_compile(int argc, char **argv); /* cli_compile.c */
int cli_run(int argc, char **argv);     /* cli_run.c */
int cli_cache(int argc, char **argv);   /* cli_cache.c */
int cli_build(int argc, char **argv);   /* cli_build.c */

#endif
