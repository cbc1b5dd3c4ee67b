/* threads.c — how many threads the CPU work uses: the cores this process may use, which are those its
 * CPU affinity allows (sched_getaffinity) cut to its cgroup's CPU quota (cgroup v2's cpu.max, v1's
 * cpu.cfs_quota_us over cpu.cfs_period_us, the smallest on the way up from its own cgroup; a quota of 2.5
 * cores gives 2 threads, as Go's automaxprocs rounds, since a third thread would only be throttled).
 * Not the host's load: /proc/stat counts every process on the machine, in a container other tenants'
 * too, and sampling it once gave 1 thread of 16 on the GPU machine (2026-12-03). A core that another
 * process keeps busy is instead handled where the work is divided: the pool (threadpool.c) hands out small
 * chunks from a shared counter, so a thread that shares its core does less of the work. LAMINA_THREADS,
 * OMP_NUM_THREADS (which OpenMP reads itself) and lam_ctx_set_threads (the CLI's --threads) choose the
 * count instead; one past the cores this process may use is cut to them, with a note. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../internal.h"

/* ---- the cgroup's CPU quota ---- */

/* The controller list of a v1 line of /proc/self/cgroup ("4:cpu,cpuacct:/path") has `cpu` as one of
 * its comma-separated names. */
static int has_token(const char *list, size_t len, const char *tok) {
  size_t tl = strlen(tok);
  for (const char *p = list, *end = list + len; p < end;) {
    const char *c = memchr(p, ',', (size_t)(end - p));
    size_t l = c ? (size_t)(c - p) : (size_t)(end - p);
    if (l == tl && !memcmp(p, tok, tl)) return 1;
    p += l + 1;
  }
  return 0;
}

/* Quota over period in one cgroup folder, or 0 where it sets none (or cannot be read). */
static double quota_in(const char *dir, int v2) {
  char path[PATH_MAX * 2 + 64];
  double q = 0, per = 0;
  if (v2) {
    snprintf(path, sizeof path, "%s/cpu.max", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char a[32] = "";
    if (fscanf(f, "%31s %lf", a, &per) == 2 && strcmp(a, "max") != 0) q = strtod(a, NULL);
    fclose(f);
  } else {
    snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    if (fscanf(f, "%lf", &q) != 1) q = 0;
    fclose(f);
    snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
    if (!(f = fopen(path, "r"))) return 0;
    if (fscanf(f, "%lf", &per) != 1) per = 0;
    fclose(f);
  }
  return q > 0 && per > 0 ? q / per : 0;
}

double lam_cgroup_cpu_quota(const char *proc_cgroup, const char *mountinfo, const char *root, char *src, size_t size) {
  if (src && size) src[0] = '\0';
  char v2path[PATH_MAX] = "", v1path[PATH_MAX] = "", line[PATH_MAX * 2];
  int have_v2 = 0, have_v1 = 0;
  FILE *f = fopen(proc_cgroup, "r");
  if (!f) return 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    if (!strncmp(line, "0::", 3)) snprintf(v2path, sizeof v2path, "%s", c2 + 1), have_v2 = 1;
    else if (has_token(c1 + 1, (size_t)(c2 - c1 - 1), "cpu")) snprintf(v1path, sizeof v1path, "%s", c2 + 1), have_v1 = 1;
  }
  fclose(f);
  if (!(f = fopen(mountinfo, "r"))) return 0;
  double best = 0;
  while (fgets(line, sizeof line, f)) {
    /* id parent major:minor root mount-point options [optional fields] - fstype source super-options */
    char mroot[PATH_MAX], mpoint[PATH_MAX], fstype[64], super[512] = "";
    const char *dash = strstr(line, " - ");
    if (!dash || sscanf(line, "%*s %*s %*s %4095s %4095s", mroot, mpoint) != 2 ||
        sscanf(dash + 3, "%63s %*s %511s", fstype, super) < 1)
      continue;
    int v2 = !strcmp(fstype, "cgroup2");
    if (!(v2 && have_v2) && !(!strcmp(fstype, "cgroup") && have_v1 && has_token(super, strlen(super), "cpu"))) continue;
    /* The process's cgroup as a folder under this mount: its path less the mount's root. */
    const char *cg = v2 ? v2path : v1path;
    size_t rl = strcmp(mroot, "/") ? strlen(mroot) : 0;
    if (rl && (strncmp(cg, mroot, rl) || (cg[rl] && cg[rl] != '/'))) continue; /* not below this mount */
    char dir[PATH_MAX * 2 + 8];
    int len = snprintf(dir, sizeof dir, "%s%s%s", root ? root : "", mpoint, cg + rl);
    if (len <= 0 || (size_t)len >= sizeof dir) continue;
    size_t top = strlen(root ? root : "") + strlen(mpoint);
    while (len > 1 && dir[len - 1] == '/') dir[--len] = '\0';
    /* From the process's own cgroup up to the mount's: the smallest quota is the one that binds. */
    for (;;) {
      double q = quota_in(dir, v2);
      if (q > 0 && (best == 0 || q < best)) {
        best = q;
        if (src && size) snprintf(src, size, "%s", v2 ? "cgroup cpu.max" : "cgroup cpu.cfs_quota_us");
      }
      char *slash = strrchr(dir, '/');
      if (!slash || (size_t)(slash - dir) < top) break;
      *slash = '\0';
    }
  }
  fclose(f);
  return best;
}

int lam_cpu_allowed_cores(char *why, size_t size) {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (cores < 1) { /* more than CPU_SETSIZE CPUs, or no answer: what the system has online */
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cores = online > 0 ? (int)(online < LAM_MAX_THREADS ? online : LAM_MAX_THREADS) : 1;
  }
  char src[64];
  double quota = lam_cgroup_cpu_quota("/proc/self/cgroup", "/proc/self/mountinfo", NULL, src, sizeof src);
  int q = quota > 0 ? (int)quota : 0;
  if (quota > 0 && q < 1) q = 1;
  if (q > 0 && q < cores) {
    if (why) snprintf(why, size, "a CPU quota of %.4g cores (%s) of the %d this process may run on", quota, src, cores);
    return q;
  }
  if (why) snprintf(why, size, "the %d core%s this process may run on", cores, cores == 1 ? "" : "s");
  return cores > LAM_MAX_THREADS ? LAM_MAX_THREADS : cores;
}

/* ---- OMP_NUM_THREADS, bounded ----
 * libgomp reads OMP_NUM_THREADS itself when it is loaded, before lamina can look, and starting a team it
 * keeps a record per thread on the stack of the thread that starts it: OMP_NUM_THREADS=100000 overflowed
 * the 8 MiB main stack at the CLI's first parallel region (a segfault inside GOMP_parallel; 50000 got
 * as far as libgomp's own "Thread creation failed" exit). So a count above the cores this process may
 * use is cut to them with omp_set_num_threads — on the thread that loads the library (a constructor: the
 * CLI's first region runs before any context is made) and again on each thread that makes a context, as
 * OpenMP keeps the count per thread. */

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

static char g_threads_note[320]; /* written once, at load (one thread), read after */

__attribute__((constructor)) static void bound_omp_env_at_load(void) {
  long v = omp_env_count();
  const char *raw = getenv("OMP_NUM_THREADS");
  if (v > 0) {
    char why[160];
    int cores = lam_cpu_allowed_cores(why, sizeof why);
    if (v > cores) {
      snprintf(g_threads_note, sizeof g_threads_note,
               "OMP_NUM_THREADS=%.40s asks for more threads than %s: using %d", raw, why, cores);
      lam_cpu_use_threads(cores);
    }
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
  if (omp_env_count() > 0) {
    int cores = lam_cpu_allowed_cores(NULL, 0);
    if (lam_omp_max_threads() > cores) lam_cpu_use_threads(cores);
  }
  return LAM_OK;
}

int lam_cpu_bound_threads(int asked, const char *by, char *why, size_t size) {
  char cores_why[160];
  int cores = lam_cpu_allowed_cores(cores_why, sizeof cores_why);
  if (asked > cores) {
    if (!strcmp(by, "as asked")) snprintf(why, size, "%d asked, more than %s", asked, cores_why);
    else snprintf(why, size, "%s is more than %s", by, cores_why);
    return cores;
  }
  snprintf(why, size, "%s", by);
  return asked;
}

int lam_cpu_default_threads(char *why, size_t size) {
  why[0] = '\0';
  long v = lamina_env_threads();
  char by[64];
  if (v > 0) {
    snprintf(by, sizeof by, "LAMINA_THREADS=%ld", v);
    return lam_cpu_bound_threads((int)v, by, why, size);
  }
  long omp = omp_env_count(); /* a refused OMP_NUM_THREADS counts as unset: OpenMP ignored it too */
  if (omp > 0) {
    snprintf(by, sizeof by, "OMP_NUM_THREADS=%ld", omp);
    return lam_cpu_bound_threads(omp > INT_MAX ? INT_MAX : (int)omp, by, why, size);
  }
  return lam_cpu_allowed_cores(why, size);
}

void lam_cpu_use_threads(int n) {
#ifdef _OPENMP
  omp_set_num_threads(n);
#endif
  lam_pool_set_threads(n);
}
