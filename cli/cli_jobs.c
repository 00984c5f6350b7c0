/*
 * cli_jobs.c: the attnc command's work on several threads (`attnc build`'s
 * targets, `attnc cache warm`'s files): -j's value, the default count, the
 * next job of a shared queue, and the threads that drain it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

int cli_jobs_arg(const char *text) {
  char *end;
  const long n = strtol(text, &end, 10);
  if (*end || n < 1 || n > 64) {
    cli_usage_error("-j takes 1 to 64, not '%s'", text);
    return 0;
  }
  return (int)n;
}

int cli_default_jobs(void) {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)(n < 64 ? n : 64) : 1;
}

int cli_take_job(pthread_mutex_t *lock, int *next, int njobs) {
  pthread_mutex_lock(lock);
  const int k = *next < njobs ? (*next)++ : -1;
  pthread_mutex_unlock(lock);
  return k;
}

void cli_run_threads(int threads, void *(*worker)(void *), void *arg) {
  pthread_t tid[64];
  if (threads > 64) threads = 64;
  int started = 0;
  for (; started < threads - 1; started++) /* a thread that cannot start leaves its share here */
    if (pthread_create(&tid[started], NULL, worker, arg) != 0) break;
  worker(arg);
  for (int k = 0; k < started; k++) pthread_join(tid[k], NULL);
}

double cli_seconds_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
}
