/* test_alloc.c — the caching allocator of a CPU context: the figures (in_use, reserved, cached, peak,
 * allocs, cache_hits) after known allocations, a cache hit on re-allocating a freed size,
 * lam_mem_release_cached, 256-byte alignment, zero-byte requests, upload/download round trips, and a
 * random alloc/free churn that checks no two live blocks overlap.
 * Every test gets a fresh context so the figures start from nothing.
 */
#include "testutil.h"

static int setup_ctx(void **state) {
  lam_ctx *c = NULL;
  if (lam_ctx_create(&c, LAM_DEVICE_CPU) != LAM_OK) {
    fprintf(stderr, "lam_ctx_create(CPU): %s\n", lam_last_error());
    return -1;
  }
  *state = c;
  return 0;
}
static int teardown_ctx(void **state) {
  lam_ctx_free((lam_ctx *)*state);
  return 0;
}

static lam_mem_stats stats(lam_ctx *c) {
  lam_mem_stats s;
  memset(&s, 0xff, sizeof s); /* poisoned: lam_mem_stats_get must fill every field */
  TU_OK(lam_mem_stats_get(c, &s));
  return s;
}

/* The identities that hold at every moment. */
static void assert_consistent(const lam_mem_stats *s) {
  if (s->reserved < s->in_use) fail_msg("reserved %zu < in_use %zu", s->reserved, s->in_use);
  if (s->cached != s->reserved - s->in_use)
    fail_msg("cached %zu != reserved %zu - in_use %zu", s->cached, s->reserved, s->in_use);
  if (s->peak < s->in_use) fail_msg("peak %zu < in_use %zu", s->peak, s->in_use);
  if (s->cache_hits > s->allocs) fail_msg("cache_hits %llu > allocs %llu", (unsigned long long)s->cache_hits,
                                          (unsigned long long)s->allocs);
}

/* Writes a pattern over the whole block and reads it back: the block really has `bytes` bytes. */
static void fill_check(void *p, size_t bytes, unsigned char v) {
  memset(p, v, bytes);
  const unsigned char *b = p;
  for (size_t i = 0; i < bytes; i++)
    if (b[i] != v) fail_msg("block %p byte %zu reads %u, wrote %u", p, i, b[i], v);
}

static void test_fresh_context(void **state) {
  lam_mem_stats s = stats(*state);
  assert_consistent(&s);
  assert_int_equal(s.in_use, 0);
  assert_int_equal(s.peak, 0);
  assert_int_equal(s.allocs, 0);
  assert_int_equal(s.cache_hits, 0);
}

static void test_in_use_and_peak(void **state) {
  lam_ctx *c = *state;
  static const size_t sizes[] = {1000, 4096, 65536, 12345, 1 << 20};
  enum { K = sizeof sizes / sizeof sizes[0] };
  void *p[K];
  size_t sum = 0, rise[K];
  lam_mem_stats s0 = stats(c), prev = s0;
  for (int i = 0; i < K; i++) {
    TU_OK(lam_mem_alloc(c, &p[i], sizes[i]));
    assert_non_null(p[i]);
    fill_check(p[i], sizes[i], (unsigned char)(i + 1));
    sum += sizes[i];
    lam_mem_stats s = stats(c);
    assert_consistent(&s);
    rise[i] = s.in_use - prev.in_use;
    if (rise[i] < sizes[i]) fail_msg("in_use rose by %zu for a %zu-byte block", rise[i], sizes[i]);
    if (s.in_use < s0.in_use + sum) fail_msg("in_use %zu < sum of live blocks %zu", s.in_use, sum);
    assert_int_equal(s.allocs, s0.allocs + (uint64_t)i + 1);
    assert_true(s.peak >= s.in_use);
    prev = s;
  }
  const size_t peak_all = prev.peak;
  assert_true(peak_all >= s0.in_use + sum);

  /* Freeing the 1 MiB block lowers in_use by what allocating it added; peak stays the maximum. */
  TU_OK(lam_mem_free(c, p[K - 1]));
  lam_mem_stats s = stats(c);
  assert_consistent(&s);
  assert_int_equal(prev.in_use - s.in_use, rise[K - 1]);
  assert_int_equal(s.peak, peak_all);
  assert_true(s.reserved >= s.in_use);

  /* A small allocation below the old high-water mark leaves peak alone... */
  void *small;
  TU_OK(lam_mem_alloc(c, &small, 100));
  s = stats(c);
  assert_int_equal(s.peak, peak_all);
  /* ...and a larger one beyond it raises peak to the new in_use. */
  void *big;
  TU_OK(lam_mem_alloc(c, &big, 4 << 20));
  s = stats(c);
  assert_consistent(&s);
  assert_true(s.in_use > peak_all);
  assert_int_equal(s.peak, s.in_use);

  TU_OK(lam_mem_free(c, big));
  TU_OK(lam_mem_free(c, small));
  for (int i = 0; i < K - 1; i++) TU_OK(lam_mem_free(c, p[i]));
  s = stats(c);
  assert_consistent(&s);
  assert_int_equal(s.in_use, s0.in_use); /* everything handed back */
  assert_true(s.peak >= peak_all);
}

/* Free then allocate the same size: served from the cache, nothing new reserved. */
static void test_cache_hit(void **state) {
  lam_ctx *c = *state;
  static const size_t sizes[] = {1 << 20, 777, 256};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    void *p, *q;
    TU_OK(lam_mem_alloc(c, &p, sizes[k]));
    TU_OK(lam_mem_free(c, p));
    lam_mem_stats s1 = stats(c);
    assert_consistent(&s1);
    assert_true(s1.cached >= sizes[k]); /* the freed block is kept */
    TU_OK(lam_mem_alloc(c, &q, sizes[k]));
    lam_mem_stats s2 = stats(c);
    assert_consistent(&s2);
    if (s2.cache_hits != s1.cache_hits + 1)
      fail_msg("%zu bytes again: cache_hits %llu -> %llu, want +1", sizes[k], (unsigned long long)s1.cache_hits,
               (unsigned long long)s2.cache_hits);
    assert_int_equal(s2.allocs, s1.allocs + 1);
    assert_int_equal(s2.reserved, s1.reserved);
    assert_true(s2.in_use >= s1.in_use + sizes[k]);
    fill_check(q, sizes[k], 0x5a);
    TU_OK(lam_mem_free(c, q));
  }
}

/* release_cached gives back exactly the cached bytes; live blocks stay live and intact. */
static void test_release_cached(void **state) {
  lam_ctx *c = *state;
  void *keep, *a, *b;
  TU_OK(lam_mem_alloc(c, &keep, 100000));
  memset(keep, 0x3c, 100000);
  TU_OK(lam_mem_alloc(c, &a, 1 << 20));
  TU_OK(lam_mem_alloc(c, &b, 300000));
  TU_OK(lam_mem_free(c, a));
  TU_OK(lam_mem_free(c, b));
  lam_mem_stats s1 = stats(c);
  assert_consistent(&s1);
  assert_true(s1.cached >= (1 << 20) + 300000);

  size_t released = (size_t)-1;
  TU_OK(lam_mem_release_cached(c, &released));
  lam_mem_stats s2 = stats(c);
  assert_consistent(&s2);
  assert_true(released > 0);
  assert_int_equal(released, s1.cached);
  assert_int_equal(s2.cached, 0);
  assert_int_equal(s2.reserved, s2.in_use);
  assert_int_equal(s2.in_use, s1.in_use);
  for (size_t i = 0; i < 100000; i++)
    if (((unsigned char *)keep)[i] != 0x3c) fail_msg("live block changed at %zu by release_cached", i);

  /* Nothing left to release; and the next allocation of a released size is not a cache hit. */
  released = (size_t)-1;
  TU_OK(lam_mem_release_cached(c, &released));
  assert_int_equal(released, 0);
  TU_OK(lam_mem_alloc(c, &a, 1 << 20));
  lam_mem_stats s3 = stats(c);
  assert_int_equal(s3.cache_hits, s2.cache_hits);
  assert_true(s3.reserved >= s2.reserved + (1 << 20));
  TU_OK(lam_mem_free(c, a));
  TU_OK(lam_mem_free(c, keep));
}

static void test_alignment(void **state) {
  lam_ctx *c = *state;
  static const size_t sizes[] = {1, 3, 17, 255, 256, 257, 1000, 4097, 65537, 1 << 20, 12345679};
  enum { K = sizeof sizes / sizeof sizes[0] };
  void *p[K];
  for (int i = 0; i < K; i++) {
    TU_OK(lam_mem_alloc(c, &p[i], sizes[i]));
    if ((uintptr_t)p[i] % 256 != 0) fail_msg("%zu-byte block at %p is not 256-byte aligned", sizes[i], p[i]);
  }
  for (int i = 0; i < K; i++) TU_OK(lam_mem_free(c, p[i]));
  /* Blocks that come from the cache are aligned too. */
  for (int i = 0; i < K; i++) {
    TU_OK(lam_mem_alloc(c, &p[i], sizes[i]));
    if ((uintptr_t)p[i] % 256 != 0) fail_msg("cached %zu-byte block at %p is not 256-byte aligned", sizes[i], p[i]);
  }
  for (int i = 0; i < K; i++) TU_OK(lam_mem_free(c, p[i]));
}

/* The header does not define a zero-byte request: LAM_OK with a pointer that lam_mem_free accepts,
 * or LAM_ERR_INVALID_ARG. Either way no crash and the figures stay consistent. */
static void test_zero_bytes(void **state) {
  lam_ctx *c = *state;
  lam_mem_stats s0 = stats(c);
  void *p = (void *)&s0;
  lam_status st = lam_mem_alloc(c, &p, 0);
  if (st == LAM_OK) {
    lam_mem_stats s1 = stats(c);
    assert_consistent(&s1);
    TU_OK(lam_mem_free(c, p));
  } else if (st != LAM_ERR_INVALID_ARG) {
    fail_msg("lam_mem_alloc(0 bytes) returned %s: %s", lam_status_str(st), lam_last_error());
  }
  print_message("lam_mem_alloc(0 bytes): %s\n", lam_status_str(st));
  lam_mem_stats s2 = stats(c);
  assert_consistent(&s2);
  assert_int_equal(s2.in_use, s0.in_use);
}

/* Upload then download returns the same bytes, whole blocks and at odd offsets. */
static void test_upload_download(void **state) {
  lam_ctx *c = *state;
  const size_t n = 1000003;
  unsigned char *src = malloc(n), *dst = malloc(n);
  assert_true(src && dst);
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(0xa110c));
  for (size_t i = 0; i < n; i++) src[i] = (unsigned char)(tu_next(&r) >> 56);
  void *p;
  TU_OK(lam_mem_alloc(c, &p, n));
  TU_OK(lam_mem_upload(c, p, src, n));
  memset(dst, 0, n);
  TU_OK(lam_mem_download(c, dst, p, n));
  assert_memory_equal(dst, src, n);
  /* 1001 bytes at offset 7 of the block, from offset 3 of the source. */
  TU_OK(lam_mem_upload(c, (char *)p + 7, src + 3, 1001));
  memset(dst, 0, n);
  TU_OK(lam_mem_download(c, dst, (char *)p + 7, 1001));
  assert_memory_equal(dst, src + 3, 1001);
  /* The bytes around the partial upload kept the first upload's values. */
  TU_OK(lam_mem_download(c, dst, p, n));
  assert_memory_equal(dst, src, 7);
  assert_memory_equal(dst + 7 + 1001, src + 7 + 1001, n - 7 - 1001);
  TU_OK(lam_mem_free(c, p));
  free(src);
  free(dst);
}

/* lam_host_alloc on the CPU: ordinary host memory, usable and freeable. */
static void test_host_alloc(void **state) {
  lam_ctx *c = *state;
  void *h = NULL;
  TU_OK(lam_host_alloc(c, &h, 1 << 20));
  assert_non_null(h);
  fill_check(h, 1 << 20, 0x77);
  TU_OK(lam_host_free(c, h));
  (void)lam_host_free(c, NULL); /* NULL: must not crash; the header does not say which status */
}

/* Random alloc/free of random sizes: figures consistent at every step, and each live block keeps its
 * own byte pattern, so two live blocks handed the same memory would be caught. */
static void test_churn(void **state) {
  lam_ctx *c = *state;
  enum { SLOTS = 64, STEPS = 3000 };
  void *p[SLOTS] = {0};
  size_t sz[SLOTS] = {0};
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(0xc4a2));
  lam_mem_stats s0 = stats(c);
  size_t last_peak = s0.peak;
  for (int step = 0; step < STEPS; step++) {
    int k = (int)(tu_next(&r) % SLOTS);
    if (p[k]) {
      const unsigned char *b = p[k];
      for (size_t i = 0; i < sz[k]; i += 61)
        if (b[i] != (unsigned char)k) fail_msg("step %d: block %d (%zu bytes) overwritten at %zu", step, k, sz[k], i);
      TU_OK(lam_mem_free(c, p[k]));
      p[k] = NULL;
    } else {
      /* Few distinct sizes so the cache gets hits; some odd ones so it gets misses. */
      static const size_t pick[] = {256, 1000, 4096, 65536, 100000, 1 << 20};
      sz[k] = (tu_next(&r) & 3) ? pick[tu_next(&r) % 6] : 1 + tu_next(&r) % 300000;
      TU_OK(lam_mem_alloc(c, &p[k], sz[k]));
      memset(p[k], k, sz[k]);
    }
    lam_mem_stats s = stats(c);
    assert_consistent(&s);
    if (s.peak < last_peak) fail_msg("peak fell from %zu to %zu", last_peak, s.peak);
    last_peak = s.peak;
  }
  for (int k = 0; k < SLOTS; k++)
    if (p[k]) TU_OK(lam_mem_free(c, p[k]));
  lam_mem_stats s = stats(c);
  assert_consistent(&s);
  assert_int_equal(s.in_use, s0.in_use);
  print_message("churn: %llu allocs, %llu cache hits, peak %zu bytes\n", (unsigned long long)s.allocs,
                (unsigned long long)s.cache_hits, s.peak);
  assert_true(s.cache_hits > 0);
  assert_true(s.cache_hits < s.allocs);
}

/* A cap on the allocator: going over it is LAM_ERR_OUT_OF_MEMORY with the numbers; cached blocks are
 * given back first to make room; a cap below what is in use is refused; 0 lifts the cap. */
static void test_limit(void **state) {
  lam_ctx *c = *state;
  void *a, *b, *big;
  TU_OK(lam_mem_alloc(c, &a, 1 << 20)); /* 1 MiB, rounded to 2 MiB */
  TU_OK(lam_mem_set_limit(c, 6u << 20));
  lam_status st = lam_mem_alloc(c, &big, 8u << 20);
  assert_int_equal(st, LAM_ERR_OUT_OF_MEMORY);
  assert_null(big);
  assert_non_null(strstr(lam_last_error(), "cap of 6291456 bytes"));
  assert_non_null(strstr(lam_last_error(), "--max-memory"));
  TU_OK(lam_mem_alloc(c, &b, 2u << 20)); /* fits: 4 MiB reserved */
  TU_OK(lam_mem_free(c, b));             /* cached, still reserved */
  lam_mem_stats s;
  TU_OK(lam_mem_stats_get(c, &s));
  assert_int_equal(s.reserved, 4u << 20);
  TU_OK(lam_mem_alloc(c, &b, 3u << 20)); /* 4 MiB block: room only once the cached one is given back */
  TU_OK(lam_mem_stats_get(c, &s));
  assert_int_equal(s.reserved, 6u << 20);
  assert_int_equal(lam_mem_set_limit(c, 1u << 20), LAM_ERR_OUT_OF_MEMORY); /* 6 MiB in use */
  TU_OK(lam_mem_set_limit(c, 0));
  TU_OK(lam_mem_alloc(c, &big, 8u << 20));
  TU_OK(lam_mem_free(c, big));
  TU_OK(lam_mem_free(c, b));
  TU_OK(lam_mem_free(c, a));
}

/* A CPU context starts capped at the memory the machine has available: more is an error that says so,
 * found before any memory is taken (it was the kernel's OOM killer). */
static void test_default_cap(void **state) {
  lam_ctx *c = *state;
  if (lam_ctx_device(c) != LAM_DEVICE_CPU) skip();
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) skip();
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  fclose(f);
  if (!kb) skip();
  size_t want = (size_t)kb * 1024 + ((size_t)4 << 30); /* 4 GiB more than there is */
  void *p = NULL;
  lam_status st = lam_mem_alloc(c, &p, want);
  if (st != LAM_ERR_OUT_OF_MEMORY) fail_msg("%zu bytes with %llu kB available: %s", want, kb, lam_status_str(st));
  assert_null(p);
  if (!strstr(lam_last_error(), "available")) fail_msg("the message should say it is the available memory: %s", lam_last_error());
  lam_mem_stats s = stats(c);
  assert_int_equal(s.in_use, 0);
  assert_int_equal(s.reserved, 0);
  TU_OK(lam_mem_set_limit(c, 0)); /* the caller may lift it */
}

/* LAMINA_POISON=1 (read when a context is made): every block handed out starts as 0xFF bytes (NaN), a reused
 * one too; without it a block is left as it is. On a CUDA device as well where there is one. */
static void test_poison(void **state) {
  (void)state;
  for (int dev = 0; dev < 2; dev++) {
    if (dev && lam_cuda_device_count(NULL) == 0) break;
    const lam_device kind = dev ? LAM_DEVICE_CUDA : LAM_DEVICE_CPU;
    for (int on = 0; on < 2; on++) {
      setenv("LAMINA_POISON", on ? "1" : "0", 1);
      lam_ctx *c = NULL;
      TU_OK(lam_ctx_create(&c, kind));
      unsetenv("LAMINA_POISON");
      enum { N = 1000 };
      unsigned char h[N], back[N];
      memset(h, 0x5A, N);
      for (int round = 0; round < 2; round++) { /* a new block, then the same block from the cache */
        void *p = NULL;
        TU_OK(lam_mem_alloc(c, &p, N));
        TU_OK(lam_mem_download(c, back, p, N));
        size_t ff = 0;
        for (int i = 0; i < N; i++) ff += back[i] == 0xFF;
        if (on && ff != N) fail_msg("%s, poison on, round %d: %zu of %d bytes are 0xFF", dev ? "cuda" : "cpu", round, ff, N);
        if (!on && round == 1 && ff == N) fail_msg("%s, poison off: a reused block was filled", dev ? "cuda" : "cpu");
        TU_OK(lam_mem_upload(c, p, h, N)); /* what the next round's block held before */
        TU_OK(lam_mem_free(c, p));
      }
      lam_ctx_free(c);
    }
  }
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup_ctx, teardown_ctx)
int main(void) {
  const struct CMUnitTest tests[] = {
      T(test_fresh_context), T(test_in_use_and_peak), T(test_cache_hit), T(test_release_cached),
      T(test_alignment),     T(test_zero_bytes),      T(test_upload_download), T(test_host_alloc),
      T(test_churn),         T(test_limit),           T(test_default_cap),     cmocka_unit_test(test_poison),
  };
  return TU_RUN_GROUP("alloc", tests, NULL, NULL) ? 1 : 0;
}
