/* threadpool.c — the host threads' work pool: a loop over [0, n) cut into chunks that the calling thread and
 * the pool's workers take one at a time from a shared counter.
 *
 * Why not an OpenMP `parallel for`: a region ends only when every thread of its team has arrived, so a
 * thread whose core another process holds makes the whole region wait for that process's time slice,
 * however the work is scheduled. On the 2-core machine with one core held by `yes`, 2 OpenMP threads ran
 * the hidden layer at n = 1M in 8.0 ms against 0.6 ms on one (2026-12-03). Here the caller waits only for
 * chunks that were taken: a worker that has not been scheduled yet takes none, and the threads that run do
 * its share. What is left is a worker descheduled in the middle of a chunk; chunks are small (the caller
 * says how small) so that costs little work, though the wait for that worker remains.
 *
 * One job runs at a time: a caller on another thread waits for the pool (doing its loop alone would run
 * it on one thread, 16x slower on the GPU machine), and a chunk that calls lam_pool_for runs that loop
 * itself. Workers are started at the first job that needs them, spin a
 * little after a job (back-to-back jobs are common) and then sleep on a futex; they are not inherited by a
 * fork's child, which starts its own when it needs them. */
#define _GNU_SOURCE
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "../internal.h"

/* How long a thread spins before it sleeps: a worker between jobs, the caller waiting for the last chunk.
 * Short, because a spinning worker holds its core: with one of 2 cores held by another process, a 2 ms
 * spin (libgomp's order) kept the free core busy while the calling thread waited its turn on the held
 * one, and the reference CNN's epoch took 18.7 s; 250 us 15.4 s; 50 us 14.0 s (one thread: 13.3 s).
 * Idle, the same epoch took 7.9, 8.4 and 8.6 s (2026-12-03, dev/cpu_load.py's machine). */
#define SPIN_NS 50000

static struct {
  pthread_mutex_t run; /* held by the thread whose job the pool runs */
  /* the job: written only while no worker is inside it (see job_enter) */
  lam_pool_fn fn;
  void *arg;
  size_t n, chunk, nchunks;
  _Atomic size_t next;      /* the next chunk to take */
  _Atomic size_t done;      /* chunks finished */
  _Atomic uint32_t finished; /* futex word: 1 once done == nchunks (the caller sleeps on it) */
  _Atomic int open;         /* 1 while workers may enter the job */
  _Atomic int inside;       /* workers inside the job */
  _Atomic int want;         /* workers 0 .. want-1 take part in this job */
  _Atomic uint32_t gen;     /* futex word: bumped for each job, waking the workers */
  _Atomic int size;         /* threads a job uses, the caller included (lam_pool_set_threads) */
  int started;              /* workers running (the thread that holds `run` starts more) */
} P = {.run = PTHREAD_MUTEX_INITIALIZER, .size = 1};

static _Thread_local int in_pool; /* this thread runs a chunk, or holds the pool */

static long futex(_Atomic uint32_t *addr, int op, uint32_t val) {
  return syscall(SYS_futex, (uint32_t *)addr, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/* Waits while *w == v: spins SPIN_NS, then sleeps. */
static void wait_while(_Atomic uint32_t *w, uint32_t v) {
  uint64_t t0 = 0;
  for (unsigned i = 0; atomic_load_explicit(w, memory_order_acquire) == v; i++) {
    if ((i & 63) == 63) {
      uint64_t t = now_ns();
      if (!t0) t0 = t;
      else if (t - t0 > SPIN_NS) {
        while (atomic_load_explicit(w, memory_order_acquire) == v) futex(w, FUTEX_WAIT, v);
        return;
      }
    }
    cpu_relax();
  }
}

/* Takes chunks until none is left. */
static void take_chunks(void) {
  for (;;) {
    size_t k = atomic_fetch_add_explicit(&P.next, 1, memory_order_relaxed);
    if (k >= P.nchunks) return;
    size_t lo = k * P.chunk, hi = lo + P.chunk < P.n ? lo + P.chunk : P.n;
    P.fn(P.arg, lo, hi);
    if (atomic_fetch_add_explicit(&P.done, 1, memory_order_acq_rel) + 1 == P.nchunks) {
      atomic_store_explicit(&P.finished, 1, memory_order_release);
      futex(&P.finished, FUTEX_WAKE, 1);
    }
  }
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg;
  in_pool = 1;
#ifdef _OPENMP
  omp_set_num_threads(1); /* a chunk that reaches an OpenMP region (OpenBLAS's) runs it on this thread */
#endif
  uint32_t seen = 0; /* the job this worker was started for is gen 1 higher than any it saw: see pool_start */
  for (;;) {
    wait_while(&P.gen, seen);
    uint32_t g = atomic_load(&P.gen);
    seen = g;
    if (id >= atomic_load(&P.want)) continue;
    /* Entering: counted first, then the job checked still open, so that the caller, which closes the job
     * and then waits for `inside` to drop to 0, never rewrites the job under a worker (both seq_cst). */
    atomic_fetch_add(&P.inside, 1);
    if (atomic_load(&P.open) && atomic_load(&P.gen) == g) take_chunks();
    atomic_fetch_sub(&P.inside, 1);
  }
  return NULL;
}

/* Starts workers up to `count`, with every signal blocked (a signal for the process goes to a thread of
 * the caller's). Returns how many run. Called with P.run held. */
static int pool_start(int count) {
  if (P.started >= count) return P.started;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, (size_t)256 << 10); /* chunks run the CPU ops' loops: no deep stacks */
  while (P.started < count) {
    pthread_t t;
    /* A worker born now sees gen != 0 only after this job's bump: its `seen` of 0 is below every gen
     * the caller publishes (gen starts at 0 and is bumped before the first wake), so it joins the
     * job being started. */
    if (pthread_create(&t, &attr, worker, (void *)(intptr_t)P.started) != 0) break; /* fewer threads, same result */
    P.started++;
  }
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return P.started;
}

/* A fork's child has only the thread that forked: no workers, and the lock as that thread left it. */
static void pool_after_fork_child(void) {
  pthread_mutex_init(&P.run, NULL);
  in_pool = 0; /* the forking thread may have held the pool */
  P.started = 0;
  atomic_store(&P.open, 0);
  atomic_store(&P.inside, 0);
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void atfork_register(void) { pthread_atfork(NULL, NULL, pool_after_fork_child); }

void lam_pool_set_threads(int n) { atomic_store(&P.size, n < 1 ? 1 : n > LAM_MAX_THREADS ? LAM_MAX_THREADS : n); }
int lam_pool_threads(void) { return atomic_load(&P.size); }

void lam_pool_for(size_t n, size_t chunk, lam_pool_fn fn, void *arg) {
  if (n == 0) return;
  if (chunk == 0) chunk = 1;
  size_t nchunks = (n + chunk - 1) / chunk;
  int size = atomic_load(&P.size);
  if (nchunks < 2 || size < 2 || in_pool) {
    fn(arg, 0, n);
    return;
  }
  pthread_mutex_lock(&P.run);
  in_pool = 1;
  pthread_once(&atfork_once, atfork_register);
  int workers = size - 1;
  if ((size_t)workers > nchunks - 1) workers = (int)(nchunks - 1);
  int running = pool_start(workers);
  if (running < workers) workers = running;
  P.fn = fn;
  P.arg = arg;
  P.n = n;
  P.chunk = chunk;
  P.nchunks = nchunks;
  atomic_store(&P.next, 0);
  atomic_store(&P.done, 0);
  atomic_store(&P.finished, 0);
  atomic_store(&P.want, workers);
  atomic_store(&P.open, 1);
  atomic_fetch_add(&P.gen, 1);
  if (workers > 0) futex(&P.gen, FUTEX_WAKE, INT_MAX);
  take_chunks();
  wait_while(&P.finished, 0);
  atomic_store(&P.open, 0);
  /* a worker between its count and its check: a few instructions, unless it is descheduled there */
  for (unsigned i = 0; atomic_load(&P.inside) > 0; i++)
    if ((i & 255) == 255) sched_yield();
    else cpu_relax();
  in_pool = 0;
  pthread_mutex_unlock(&P.run);
}
