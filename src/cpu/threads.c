/* threads.c — how many OpenMP threads the CPU backend uses. An OpenMP region waits for its slowest
 * thread, so a thread that shares its core with another busy process makes every region wait for that
 * process's time slice: on a 2-core machine with one core held by `yes`, 2 threads ran the hidden layer
 * 6x slower than 1 (3.07 against 0.51 ms at 1M). So the default leaves out the cores other processes
 * keep busy: /proc/stat is sampled twice, 20 ms apart, over the cores this process may run on, and a core
 * more than three quarters busy in that window is taken (a process that holds a core shows ~100%; one
 * that merely ends or starts in the window, less). LAMINA_THREADS (or OMP_NUM_THREADS, which OpenMP reads
 * itself) overrides it, as does lam_ctx_set_threads (the CLI's --threads); each is bounded by LAM_MAX_THREADS. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_ISSET */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../internal.h"

#define MAX_CPUS 256 /* cpuN lines read; the samples live on the stack (contexts may be made on several threads) */

/* Busy and total jiffies of each cpuN line of /proc/stat; returns how many were read, or 0. */
static int read_stat(unsigned long long *busy, unsigned long long *total, int max) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return 0;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f)) {
    int cpu;
    unsigned long long v[8] = {0};
    if (strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9') continue;
    if (sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
               &v[6], &v[7]) < 5 || cpu < 0 || cpu >= max)
      continue;
    unsigned long long t = 0;
    for (int i = 0; i < 8; i++) t += v[i];
    total[cpu] = t;
    busy[cpu] = t - v[3] - v[4]; /* all but idle and iowait */
    if (cpu + 1 > n) n = cpu + 1;
  }
  fclose(f);
  return n;
}

int lam_cpu_busy_cores(int *allowed) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return *allowed = 0, 0;
  *allowed = CPU_COUNT(&set);
  unsigned long long b0[MAX_CPUS], t0[MAX_CPUS], b1[MAX_CPUS], t1[MAX_CPUS];
  int n0 = read_stat(b0, t0, MAX_CPUS);
  if (!n0) return 0;
  struct timespec pause = {0, 20 * 1000 * 1000};
  nanosleep(&pause, NULL);
  int n1 = read_stat(b1, t1, MAX_CPUS), taken = 0;
  for (int c = 0; c < n0 && c < n1; c++) {
    if (!CPU_ISSET(c, &set) || t1[c] <= t0[c]) continue;
    if (4 * (b1[c] - b0[c]) > 3 * (t1[c] - t0[c])) taken++;
  }
  return taken;
}

/* ---- OMP_NUM_THREADS, bounded ----
 * libgomp reads OMP_NUM_THREADS itself when it is loaded, before lamina can look, and starting a team it
 * keeps a record per thread on the stack of the thread that starts it: OMP_NUM_THREADS=100000 overflowed
 * the 8 MiB main stack at the CLI's first parallel region (a segfault inside GOMP_parallel; 50000 got
 * as far as libgomp's own "Thread creation failed" exit). So a count above LAM_MAX_THREADS (the bound of
 * --threads and lam_ctx_set_threads) is bounded to it with omp_set_num_threads — on the thread that loads
 * the library (a constructor: the CLI's first region runs before any context is made) and again on each
 * thread that makes a context, as OpenMP keeps the count per thread. */

/* OMP_NUM_THREADS's first count (a list "8,4" sets nested levels too) as libgomp parses it: 0 where it is
 * unset, -1 where libgomp refuses it (not a list of whole numbers >= 1; it says so and ignores it). */
static long omp_env_count(void) {
  const char *s = getenv("OMP_NUM_THREADS");
  if (!s) return 0;
  long first = -1;
  for (int k = 0;; k++) {
    while (isspace((unsigned char)*s)) s++;
    if (!isdigit((unsigned char)*s)) return -1; /* empty, a sign, a word */
    errno = 0;
    char *end;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || v == 0) return -1;
    if (k == 0) first = v > (unsigned long)LONG_MAX ? LONG_MAX : (long)v;
    s = end;
    while (isspace((unsigned char)*s)) s++;
    if (*s == '\0') return first;
    if (*s++ != ',') return -1;
  }
}

static char g_threads_note[224]; /* written once, at load (one thread), read after */

/* The count lamina runs with where OMP_NUM_THREADS sets it (0: unset or refused), bounded. */
static int omp_env_threads(void) {
  long v = omp_env_count();
  return v <= 0 ? 0 : v > LAM_MAX_THREADS ? LAM_MAX_THREADS : (int)v;
}

__attribute__((constructor)) static void bound_omp_env_at_load(void) {
  long v = omp_env_count();
  const char *raw = getenv("OMP_NUM_THREADS");
  if (v > LAM_MAX_THREADS) {
    snprintf(g_threads_note, sizeof g_threads_note,
             "OMP_NUM_THREADS=%.40s asks for more threads than lamina starts (at most %d, as --threads): "
             "using %d", raw, LAM_MAX_THREADS, LAM_MAX_THREADS);
    lam_cpu_use_threads(LAM_MAX_THREADS);
  } else if (v < 0) {
    snprintf(g_threads_note, sizeof g_threads_note,
             "OMP_NUM_THREADS='%.40s' is not a thread count (a whole number from 1 to %d): OpenMP ignores it, "
             "and lamina chooses the count as if it were unset", raw, LAM_MAX_THREADS);
  }
}

const char *lam_threads_note(void) { return g_threads_note[0] ? g_threads_note : NULL; }

/* LAMINA_THREADS as a count: 0 where unset or empty, -1 where it is not a whole number from 1 to
 * LAM_MAX_THREADS. */
static long lamina_env_threads(void) {
  const char *env = getenv("LAMINA_THREADS");
  if (!env || !*env) return 0;
  char *end;
  errno = 0;
  long v = strtol(env, &end, 10);
  return !errno && !*end && end != env && v >= 1 && v <= LAM_MAX_THREADS ? v : -1;
}

lam_status lam_cpu_threads_env_check(void) {
  if (lamina_env_threads() < 0)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "LAMINA_THREADS='%.40s' is not a thread count: set it to a whole number from 1 to "
                    "%d, or unset it", getenv("LAMINA_THREADS"), LAM_MAX_THREADS);
  /* the constructor bounded the loading thread's count; this thread may be another */
  if (omp_env_count() > LAM_MAX_THREADS && lam_omp_max_threads() > LAM_MAX_THREADS) lam_cpu_use_threads(LAM_MAX_THREADS);
  return LAM_OK;
}

int lam_cpu_default_threads(char *why, size_t size) {
  why[0] = '\0';
  long v = lamina_env_threads();
  if (v > 0) {
    snprintf(why, size, "LAMINA_THREADS=%ld", v);
    return (int)v;
  }
  int omp = omp_env_threads(); /* a refused OMP_NUM_THREADS counts as unset: OpenMP ignored it too */
  if (omp > 0) {
    long asked = omp_env_count();
    if (asked > LAM_MAX_THREADS) snprintf(why, size, "OMP_NUM_THREADS=%ld bounded to %d", asked, LAM_MAX_THREADS);
    else snprintf(why, size, "OMP_NUM_THREADS");
    return omp;
  }
  int most = lam_omp_max_threads();
  most = most > LAM_MAX_THREADS ? LAM_MAX_THREADS : most;
  int allowed = 0, taken = lam_cpu_busy_cores(&allowed);
  if (taken > 0 && allowed > 0) {
    int free_cores = allowed - taken < 1 ? 1 : allowed - taken;
    if (free_cores < most) {
      snprintf(why, size, "%d of %d cores busy with other work", taken, allowed);
      return free_cores;
    }
  }
  return most;
}

void lam_cpu_use_threads(int n) {
#ifdef _OPENMP
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}
