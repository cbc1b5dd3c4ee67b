/* hostcopy.c — host-side helpers shared by both backends: a monotonic clock, and a memcpy spread over
 * the pool's threads (one thread cannot saturate host memory bandwidth; staging pageable arrays into
 * pinned buffers is bound by it). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../internal.h"

double lam_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int lam_omp_max_threads(void) {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

/* Below this many bytes in all, one thread copies: waking the pool costs more than it saves. */
#define PARALLEL_COPY_MIN ((size_t)1 << 20)
/* Bytes per chunk of the pool: a multiple of the page, so no two threads write one page (or cache line). */
#define COPY_CHUNK ((size_t)256 << 10)

typedef struct copy_list {
  const lam_copy_job *jobs;
  int njobs;
} copy_list;

#define PAGE ((size_t)4096)

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

/* A fresh output (a new NumPy array) is unmapped until written, and faulting it in a 4 KB page at a time
 * cost more than the hidden layer's own pass: at n = 50M on the 2-core machine a call with a new output
 * took 62 ms against 24 ms into a written one. One MADV_POPULATE_WRITE a chunk maps the chunk's pages in
 * one go: 45 ms there (MADV_HUGEPAGE gave 51). But on the H200 machine, whose NumPy arrays get huge
 * pages, it saved 0.9 ms on fresh outputs and cost 2 ms on written ones (walking pages already there),
 * 7 ms on the GPU path's copies (2026-12-03). So it is asked for (LAMINA_PREFAULT=1), not the default;
 * where the kernel lacks it (before 5.14) the writes fault as before. */
static int prefault_on(void) {
  static int on = -1; /* LAMINA_PREFAULT=1 */
  if (on < 0) {
    const char *e = getenv("LAMINA_PREFAULT");
    on = e && !strcmp(e, "1");
  }
  return on;
}

void lam_prefault(void *p, size_t bytes) {
  if (!prefault_on()) return;
  uintptr_t a = ((uintptr_t)p + PAGE - 1) & ~(uintptr_t)(PAGE - 1), e = ((uintptr_t)p + bytes) & ~(uintptr_t)(PAGE - 1);
  if (e > a) madvise((void *)a, e - a, MADV_POPULATE_WRITE);
}

/* The bytes [lo, hi) of the concatenation of all the jobs. */
static void copy_range(void *arg, size_t lo, size_t hi) {
  const copy_list *l = arg;
  size_t base = 0;
  for (int j = 0; j < l->njobs && base < hi; j++) {
    size_t b0 = base, b1 = base + l->jobs[j].bytes;
    size_t s = lo > b0 ? lo : b0, e = hi < b1 ? hi : b1;
    if (s < e) memcpy((char *)l->jobs[j].dst + (s - b0), (const char *)l->jobs[j].src + (s - b0), e - s);
    base = b1;
  }
}

void lam_parallel_copy(const lam_copy_job *jobs, int njobs) {
  size_t total = 0;
  for (int j = 0; j < njobs; j++) total += jobs[j].bytes;
  copy_list l = {jobs, njobs};
  if (total < PARALLEL_COPY_MIN) copy_range(&l, 0, total);
  else lam_pool_for(total, COPY_CHUNK, copy_range, &l);
}

static void touch_range(void *arg, size_t lo, size_t hi) {
  volatile char *c = arg;
  for (size_t i = lo; i < hi; i += PAGE) c[i] = 0;
}

void lam_parallel_touch(void *p, size_t bytes) {
  if (bytes < PARALLEL_COPY_MIN) touch_range(p, 0, bytes);
  else lam_pool_for(bytes, COPY_CHUNK * 8, touch_range, p);
}
