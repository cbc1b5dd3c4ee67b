/* threads.c — how many OpenMP threads the CPU backend uses. An OpenMP region waits for its slowest
 * thread, so a thread that shares its core with another busy process makes every region wait for that
 * process's time slice: on a 2-core machine with one core held by `yes`, 2 threads ran the hidden layer
 * 6x slower than 1 (3.07 against 0.51 ms at 1M). So the default leaves out the cores other processes
 * keep busy: /proc/stat is sampled twice, 20 ms apart, over the cores this process may run on, and a core
 * more than three quarters busy in that window is taken (a process that holds a core shows ~100%; one
 * that merely ends or starts in the window, less). LAMINA_THREADS (or OMP_NUM_THREADS, which OpenMP reads
 * itself) overrides it, as does lam_ctx_set_threads (the CLI's --threads). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_ISSET */
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

int lam_cpu_default_threads(char *why, size_t size) {
  why[0] = '\0';
  const char *env = getenv("LAMINA_THREADS");
  if (env && *env) {
    char *end;
    long v = strtol(env, &end, 10);
    if (!*end && v >= 1 && v <= 4096) {
      snprintf(why, size, "LAMINA_THREADS=%ld", v);
      return (int)v;
    }
  }
  int most = lam_omp_max_threads();
  if (getenv("OMP_NUM_THREADS")) {
    snprintf(why, size, "OMP_NUM_THREADS");
    return most;
  }
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
