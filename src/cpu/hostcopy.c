/* hostcopy.c — host-side helpers shared by both backends: a monotonic clock, and a memcpy spread over
 * the pool's threads (one thread cannot saturate host memory bandwidth; staging pageable arrays into
 * pinned buffers is bound by it). */
#include <string.h>
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
#define PAGE ((size_t)4096)

typedef struct copy_list {
  const lam_copy_job *jobs;
  int njobs;
} copy_list;

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
