/* parallel.c: the reference's large loops split by rows across threads,
 * the row of dot products their q k^T and dO V^T loops share, and p @ v.
 *
 * The O(S^2 D) products (q k^T, p v and their backward counterparts) are
 * nearly all of the reference's time on the GPU tests' shapes (perf:
 * ~75% at S 2048), and the GPU machine has 16 cores for one test process.
 * Each output element is computed by one thread in the same order as on
 * one thread, so the results are bit-identical whatever the thread count
 * (tests/unit/test_interp.c checks it). Threads: ATTN_REF_THREADS, else
 * the online CPUs (at most 64); a loop too small to pay for threads runs
 * inline, and a thread that cannot be started leaves its rows to the
 * caller. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "ref.h"

#define REF_MAX_THREADS 64
/* Below this much work (multiply-adds) a loop stays on one thread. */
#define REF_MIN_WORK_PER_THREAD 4000000.0

typedef struct RefChunk {
  RefRowsFn fn;
  void *arg;
  int64_t lo, hi;
} RefChunk;

static void *ref_chunk_main(void *p) {
  RefChunk *c = p;
  c->fn(c->arg, c->lo, c->hi);
  return NULL;
}

/* The online CPUs, read once (sysconf reads /sys each call). */
static long ref_cpus;
static pthread_once_t ref_cpus_once = PTHREAD_ONCE_INIT;
static void ref_read_cpus(void) { ref_cpus = sysconf(_SC_NPROCESSORS_ONLN); }

int ref_threads(void) {
  const char *env = getenv("ATTN_REF_THREADS");
  long n;
  if (env && *env) {
    n = strtol(env, NULL, 10);
  } else {
    pthread_once(&ref_cpus_once, ref_read_cpus);
    n = ref_cpus;
  }
  return n < 1 ? 1 : n > REF_MAX_THREADS ? REF_MAX_THREADS : (int)n;
}

void ref_dots(const double *x, const double *y, int64_t ystep, int64_t n, int64_t D, double *out) {
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) { /* four rows of y at a time, x read once for them */
    const double *y0 = y + j * ystep, *y1 = y0 + ystep, *y2 = y1 + ystep, *y3 = y2 + ystep;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t d = 0; d < D; d++) {
      s0 += x[d] * y0[d];
      s1 += x[d] * y1[d];
      s2 += x[d] * y2[d];
      s3 += x[d] * y3[d];
    }
    out[j] = s0, out[j + 1] = s1, out[j + 2] = s2, out[j + 3] = s3;
  }
  for (; j < n; j++) {
    const double *yj = y + j * ystep;
    double s = 0;
    for (int64_t d = 0; d < D; d++)
      s += x[d] * yj[d];
    out[j] = s;
  }
}

void ref_parallel_rows(int64_t n, double work_per_row, RefRowsFn fn, void *arg) {
  const double total = work_per_row * (double)n;
  if (total < 2 * REF_MIN_WORK_PER_THREAD) { /* one thread whatever the count: inline */
    fn(arg, 0, n);
    return;
  }
  int t = ref_threads();
  if (total < REF_MIN_WORK_PER_THREAD * t) t = (int)(total / REF_MIN_WORK_PER_THREAD);
  if (t > n) t = (int)n;
  if (t <= 1) {
    fn(arg, 0, n);
    return;
  }
  RefChunk chunk[REF_MAX_THREADS];
  pthread_t th[REF_MAX_THREADS];
  bool started[REF_MAX_THREADS] = {false};
  for (int k = 0; k < t; k++) {
    chunk[k] = (RefChunk){fn, arg, n * k / t, n * (k + 1) / t};
    if (k > 0) started[k] = pthread_create(&th[k], NULL, ref_chunk_main, &chunk[k]) == 0;
  }
  fn(arg, chunk[0].lo, chunk[0].hi);
  for (int k = 1; k < t; k++) {
    if (started[k]) pthread_join(th[k], NULL);
    else fn(arg, chunk[k].lo, chunk[k].hi);
  }
}

typedef struct RefPv {
  const double *p, *v;
  double *out;
  int64_t pst0, pst1, vstep, Skv, Dv;
} RefPv;

static void ref_pv_rows(void *arg, int64_t lo, int64_t hi) {
  const RefPv *a = arg;
  const int64_t Dv = a->Dv;
  const double *restrict v = a->v;
  /* Up to four rows at a time, so each row of v is read once for them.
   * (restrict: o is no row of p or v, so the d loops vectorize; each
   * o[d] still sums over j in order: the same bits.) Zero probabilities
   * are not skipped: a NaN in v must reach the output as it would on the
   * device. */
  for (int64_t i0 = lo; i0 < hi; i0 += 4) {
    const int64_t ni = hi - i0 < 4 ? hi - i0 : 4;
    for (int64_t x = 0; x < ni; x++)
      for (int64_t d = 0; d < Dv; d++)
        a->out[(i0 + x) * Dv + d] = 0;
    for (int64_t j = 0; j < a->Skv; j++) {
      const double *restrict vj = v + j * a->vstep;
      for (int64_t x = 0; x < ni; x++) {
        const double pij = a->p[(i0 + x) * a->pst0 + j * a->pst1];
        double *restrict o = a->out + (i0 + x) * Dv;
        for (int64_t d = 0; d < Dv; d++)
          o[d] += pij * vj[d];
      }
    }
  }
}

void ref_pv(const double *p, int64_t pst0, int64_t pst1, const double *v, int64_t vstep,
            int64_t rows, int64_t Skv, int64_t Dv, double *out) {
  RefPv a = {p, v, out, pst0, pst1, vstep, Skv, Dv};
  ref_parallel_rows(rows, (double)Skv * (double)Dv, ref_pv_rows, &a);
}
