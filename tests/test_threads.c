/* test_threads.c — how many threads the host work uses and how it is divided (src/cpu/threads.c,
 * src/cpu/threadpool.c): the cgroup CPU quota read from made-up /proc and /sys trees (v2 nested, v1 with joined
 * controllers, a container's mount root, none set); the default count under a restricted affinity; the
 * pool visiting every index exactly once with several threads, from two threads at once, nested, with a
 * thread whose core is held, and in a fork's child; and the hidden layer's per-call choice on a CPU build.
 */
#define _GNU_SOURCE /* sched_setaffinity, mkdtemp */
#include "testutil.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../src/internal.h"

static char g_dir[64];

static void put(const char *rel, const char *text) {
  char path[512], dir[512];
  snprintf(path, sizeof path, "%s/%s", g_dir, rel);
  /* make the folders on the way */
  for (char *p = strchr(path + strlen(g_dir) + 1, '/'); p; p = strchr(p + 1, '/')) {
    snprintf(dir, sizeof dir, "%.*s", (int)(p - path), path);
    mkdir(dir, 0700);
  }
  FILE *f = fopen(path, "w");
  if (!f) fail_msg("cannot write %s", path);
  fputs(text, f);
  fclose(f);
}

static double quota(const char *proc_cgroup, const char *mountinfo, char *src, size_t size) {
  put("proc/cgroup", proc_cgroup);
  put("proc/mountinfo", mountinfo);
  char pc[512], mi[512];
  snprintf(pc, sizeof pc, "%s/proc/cgroup", g_dir);
  snprintf(mi, sizeof mi, "%s/proc/mountinfo", g_dir);
  return lam_cgroup_cpu_quota(pc, mi, g_dir, src, size);
}

static void test_quota_v2(void **state) {
  (void)state;
  char src[64];
  const char *mi = "30 23 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
  /* the process's own cgroup sets 4 cores, its parent 2.5: the parent binds */
  put("sys/fs/cgroup/app.slice/cpu.max", "250000 100000\n");
  put("sys/fs/cgroup/app.slice/job/cpu.max", "400000 100000\n");
  put("sys/fs/cgroup/cpu.max", "max 100000\n");
  double q = quota("0::/app.slice/job\n", mi, src, sizeof src);
  assert_true(fabs(q - 2.5) < 1e-9);
  assert_string_equal(src, "cgroup cpu.max");
  /* "max" everywhere: no quota */
  put("sys/fs/cgroup/app.slice/cpu.max", "max 100000\n");
  put("sys/fs/cgroup/app.slice/job/cpu.max", "max 100000\n");
  assert_true(quota("0::/app.slice/job\n", mi, src, sizeof src) == 0);
  /* a container: the cgroup namespace shows "/", the file is at the mount's top */
  put("sys/fs/cgroup/cpu.max", "150000 100000\n");
  assert_true(fabs(quota("0::/\n", mi, src, sizeof src) - 1.5) < 1e-9);
}

static void test_quota_v1(void **state) {
  (void)state;
  char src[64];
  /* joined controllers, and a mount whose root is the container's own cgroup */
  const char *mi = "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
                   "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";
  put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "300000\n");
  put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
  double q = quota("4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n", mi, src, sizeof src);
  assert_true(fabs(q - 3.0) < 1e-9);
  assert_string_equal(src, "cgroup cpu.cfs_quota_us");
  put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
  assert_true(quota("3:cpu,cpuacct:/docker/abc\n", mi, src, sizeof src) == 0);
  /* a cpuset-only line is not the cpu controller */
  put("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "100000\n");
  assert_true(quota("2:cpuset:/docker/abc\n", mi, src, sizeof src) == 0);
  /* files that are not there: no quota, no error */
  char pc[512];
  snprintf(pc, sizeof pc, "%s/nothing", g_dir);
  assert_true(lam_cgroup_cpu_quota(pc, pc, NULL, src, sizeof src) == 0);
}

/* The default count is the cores the affinity allows (no LAMINA_THREADS / OMP_NUM_THREADS here). */
static void test_affinity(void **state) {
  (void)state;
  unsetenv("LAMINA_THREADS");
  unsetenv("OMP_NUM_THREADS");
  cpu_set_t old, one;
  assert_int_equal(sched_getaffinity(0, sizeof old, &old), 0);
  char why[224];
  int all = lam_default_threads(why, sizeof why);
  print_message("default: %d (%s)\n", all, why);
  assert_true(all >= 1 && all <= CPU_COUNT(&old));
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &old)) {
      CPU_SET(c, &one);
      break;
    }
  assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
  int n = lam_default_threads(why, sizeof why);
  char asked[224];
  int cut = lam_cpu_bound_threads(8, "LAMINA_THREADS=8", asked, sizeof asked);
  assert_int_equal(sched_setaffinity(0, sizeof old, &old), 0);
  assert_int_equal(n, 1);
  assert_non_null(strstr(why, "the 1 core this process may run on"));
  assert_int_equal(cut, 1);
  assert_non_null(strstr(asked, "LAMINA_THREADS=8 is more than the 1 core"));
  /* LAMINA_THREADS within the cores is taken as it is */
  setenv("LAMINA_THREADS", "1", 1);
  assert_int_equal(lam_default_threads(why, sizeof why), 1);
  assert_string_equal(why, "LAMINA_THREADS=1");
  unsetenv("LAMINA_THREADS");
}

/* ---- the pool ---- */

typedef struct visits {
  _Atomic unsigned char *seen;
  _Atomic int calls;
} visits;

static void mark(void *arg, size_t lo, size_t hi) {
  visits *v = arg;
  atomic_fetch_add(&v->calls, 1);
  for (size_t i = lo; i < hi; i++) atomic_fetch_add(&v->seen[i], 1);
}

static _Atomic int g_inner_items;
static void count_items(void *arg, size_t lo, size_t hi) {
  (void)arg;
  atomic_fetch_add(&g_inner_items, (int)(hi - lo));
}
/* A loop inside a chunk runs on the chunk's own thread (the pool is busy with the outer job). */
static void mark_nested(void *arg, size_t lo, size_t hi) {
  mark(arg, lo, hi);
  lam_pool_for(1000, 10, count_items, NULL);
}

static void check_once(size_t n, size_t chunk, int threads, int nested) {
  visits v = {.seen = calloc(n ? n : 1, 1), .calls = 0};
  assert_non_null(v.seen);
  lam_pool_set_threads(threads);
  atomic_store(&g_inner_items, 0);
  lam_pool_for(n, chunk, nested ? mark_nested : mark, &v);
  for (size_t i = 0; i < n; i++)
    if (v.seen[i] != 1) fail_msg("n=%zu chunk=%zu threads=%d: index %zu visited %d times", n, chunk, threads, i, v.seen[i]);
  size_t chunks = n ? (n + chunk - 1) / chunk : 0;
  assert_int_equal((size_t)v.calls, threads > 1 && chunks > 1 ? chunks : (n ? 1u : 0u));
  if (nested) assert_int_equal(atomic_load(&g_inner_items), 1000 * (int)chunks);
  free((void *)v.seen);
}

static void test_pool_every_index_once(void **state) {
  (void)state;
  const size_t ns[] = {0, 1, 7, 4096, 100003, 1 << 20};
  const size_t chunks[] = {1, 3, 4096, 65536};
  const int threads[] = {1, 2, 4, 9};
  for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
    for (size_t b = 0; b < sizeof chunks / sizeof *chunks; b++)
      for (size_t c = 0; c < sizeof threads / sizeof *threads; c++)
        if (ns[a] / chunks[b] < 200000) check_once(ns[a], chunks[b], threads[c], 0);
  check_once(100000, 1000, 4, 1); /* nested loops run inline, no deadlock */
  lam_pool_set_threads(1);
}

static void *pool_from_thread(void *arg) {
  (void)arg;
  for (int r = 0; r < 50; r++) check_once(200003, 1024, 4, 0);
  return NULL;
}

/* Two threads running jobs at once: each job waits for the pool, and every index is visited once. */
static void test_pool_two_callers(void **state) {
  (void)state;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, pool_from_thread, NULL), 0);
  for (int r = 0; r < 50; r++) check_once(150001, 512, 4, 0);
  pthread_join(t, NULL);
  lam_pool_set_threads(1);
}

/* A child forked after the pool ran starts its own workers: its jobs finish (the parent waits at most
 * 20 s for it) and are right. */
static void test_pool_fork(void **state) {
  (void)state;
  check_once(300000, 1000, 4, 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    alarm(20);
    visits v = {.seen = calloc(300000, 1)};
    lam_pool_set_threads(4);
    lam_pool_for(300000, 1000, mark, &v);
    for (size_t i = 0; i < 300000; i++)
      if (v.seen[i] != 1) _exit(2);
    _exit(v.calls == 300 ? 0 : 3);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("the forked child's pool job failed (status %#x: exit 2 a wrong index, 3 a wrong chunk count, "
             "SIGALRM a hang)", status);
  lam_pool_set_threads(1);
}

/* A core held by another process: the job still finishes with every index once, and in less time than
 * that process's time slices would cost a fixed split (checked in test_cli.sh against one thread). */
static void test_pool_busy_core(void **state) {
  (void)state;
  cpu_set_t set;
  sched_getaffinity(0, sizeof set, &set);
  if (CPU_COUNT(&set) < 2) {
    print_message("one core: nothing to hold\n");
    return;
  }
  pid_t busy = fork();
  assert_true(busy >= 0);
  if (busy == 0) {
    alarm(30);
    for (volatile unsigned long i = 0;; i++) {
    }
  }
  for (int r = 0; r < 20; r++) check_once(1 << 20, 16384, 2, 0);
  kill(busy, SIGKILL);
  waitpid(busy, NULL, 0);
  lam_pool_set_threads(1);
}

/* ---- the hidden layer's per-call choice, where there is nothing to choose ---- */

static void test_choice_cpu(void **state) {
  (void)state;
  lam_ctx *ctx = NULL;
  TU_OK(lam_ctx_create(&ctx, LAM_DEVICE_CPU));
  TU_EXPECT_STATUS(lam_hidden_calibrate(ctx), LAM_ERR_UNSUPPORTED);
  lam_hidden_costs c = {.cpu_ms = -1};
  TU_EXPECT_STATUS(lam_hidden_costs_set(ctx, &c), LAM_ERR_INVALID_ARG);
  c = (lam_hidden_costs){.cpu_ms = 1000, .cpu_ms_per_gb = 1000, .cuda_ms = 0, .cuda_ms_per_gb = 0};
  TU_OK(lam_hidden_costs_set(ctx, &c)); /* a CPU context runs on the CPU whatever the costs say */
  tu_case k = {1000003, LAM_DTYPE_F32, TU_W_NORMAL, TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE, 0, 0, 0};
  lam_hidden_timing t = tu_run_hidden(ctx, &k);
  assert_int_equal(t.device, LAM_DEVICE_CPU);
  assert_string_equal(lam_hidden_choice(ctx), "cpu");
  /* the memory floor: timed, on host arrays */
  size_t n = 1 << 20;
  float *g = malloc(n * 4), *w = malloc(n * 4), *o = malloc(n * 4);
  for (size_t i = 0; i < n; i++) g[i] = (float)(i % 256), w[i] = 0.5f, o[i] = NAN;
  double ms = -1;
  TU_OK(lam_hidden_memory_floor(ctx, n, g, LAM_DTYPE_F32, w, o, &ms));
  assert_true(ms >= 0);
  for (size_t i = 0; i < n; i++) assert_true(o[i] == w[i] + g[i]);
  TU_EXPECT_STATUS(lam_hidden_memory_floor(ctx, n, g, LAM_DTYPE_F32, w, o, NULL), LAM_ERR_INVALID_ARG);
  free(g), free(w), free(o);
  lam_ctx_free(ctx);
}

static int setup(void **state) {
  (void)state;
  return tu_tmpdir(g_dir, sizeof g_dir, "test-threads");
}

static int teardown(void **state) {
  (void)state;
  return tu_rmdir_all(g_dir);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_quota_v2),          cmocka_unit_test(test_quota_v1),
      cmocka_unit_test(test_affinity),          cmocka_unit_test(test_pool_every_index_once),
      cmocka_unit_test(test_pool_two_callers),  cmocka_unit_test(test_pool_fork),
      cmocka_unit_test(test_pool_busy_core),    cmocka_unit_test(test_choice_cpu),
  };
  return TU_RUN_GROUP("threads", tests, setup, teardown) ? 1 : 0;
}
