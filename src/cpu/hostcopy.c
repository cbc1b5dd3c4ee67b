/* hostcopy.c — host-side helpers shared by both backends: a monotonic clock, and a memcpy spread over
 * the OpenMP threads (one thread cannot saturate host memory bandwidth; staging pageable arrays into
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

/* Below this many bytes in all, one thread copies: starting a team costs more than it saves. */
#define PARALLEL_COPY_MIN ((size_t)1 << 20)
/* Pieces handed to threads are multiples of this, so that no two threads write one cache line. */
#define COPY_GRAIN ((size_t)4096)

void lam_parallel_copy(const lam_copy_job *jobs, int njobs) {
  size_t total = 0;
  for (int j = 0; j < njobs; j++) total += jobs[j].bytes;
  if (total == 0) return;
  int nt = lam_omp_max_threads();
  if (total < PARALLEL_COPY_MIN || nt == 1) {
    for (int j = 0; j < njobs; j++) memcpy(jobs[j].dst, jobs[j].src, jobs[j].bytes);
    return;
  }
  /* Thread t copies the bytes [t*share, (t+1)*share) of the concatenation of all jobs. */
  size_t share = (total + (size_t)nt - 1) / (size_t)nt;
  share = (share + COPY_GRAIN - 1) / COPY_GRAIN * COPY_GRAIN;
#pragma omp parallel num_threads(nt)
  {
#ifdef _OPENMP
    size_t t = (size_t)omp_get_thread_num();
#else
    size_t t = 0;
#endif
    size_t lo = t * share, hi = lo + share, base = 0;
    for (int j = 0; j < njobs && base < hi; j++) {
      size_t b0 = base, b1 = base + jobs[j].bytes;
      size_t s = lo > b0 ? lo : b0, e = hi < b1 ? hi : b1;
      if (s < e) memcpy((char *)jobs[j].dst + (s - b0), (const char *)jobs[j].src + (s - b0), e - s);
      base = b1;
    }
  }
}

void lam_parallel_touch(void *p, size_t bytes) {
  volatile char *c = (volatile char *)p;
  long pages = (long)((bytes + COPY_GRAIN - 1) / COPY_GRAIN);
#pragma omp parallel for schedule(static) if (bytes >= PARALLEL_COPY_MIN)
  for (long i = 0; i < pages; i++) c[(size_t)i * COPY_GRAIN] = 0;
}
