/* test_errors.c — bad input on the CPU backend is reported, never crashes, never writes output:
 * NULL context and arrays (with the argument named in lam_last_error), n = 0 with NULL arrays (fine),
 * n over LAM_HIDDEN_MAX_N, bad dtype and device values, the string parsers, CUDA asked for where there
 * is none, the LAMINA_DEVICE override of AUTO, lam_mem_free of foreign pointers, impossible
 * allocation sizes, lam_status_str of every status, that the last error is per thread, and that the
 * location a message ends with is the source file's path from the repository's root.
 */
#include "testutil.h"

#include <pthread.h>

#include "../src/status.h" /* lam_fail_at: the location of a message */

static lam_ctx *g_ctx;

/* Small valid arrays: an erroneous call must leave `out` exactly as it was (bitwise). */
#define SMALL 8
static float g_grey[SMALL], g_w[SMALL], g_out[SMALL];
static uint8_t g_grey8[SMALL];

static void reset_arrays(void) {
  for (int i = 0; i < SMALL; i++) {
    g_grey[i] = (float)(30 * i + 7);
    g_grey8[i] = (uint8_t)(30 * i + 7);
    g_w[i] = 0.25f + 0.1f * (float)i;
    g_out[i] = TU_SENTINEL;
  }
}

static void assert_out_untouched(const char *what) {
  for (int i = 0; i < SMALL; i++)
    if (g_out[i] != TU_SENTINEL) fail_msg("%s: wrote out[%d] = %g although the call failed", what, i, g_out[i]);
}

/* The last error after a failure: non-empty, and (when given) names `word` as a whole identifier. */
static void assert_msg(const char *what, const char *word) {
  const char *m = lam_last_error();
  if (!m) fail_msg("%s: lam_last_error() is NULL", what);
  if (!*m) fail_msg("%s: lam_last_error() is empty after a failure", what);
  if (word && !tu_mentions(m, word)) fail_msg("%s: message does not mention '%s': \"%s\"", what, word, m);
}

#define EXPECT_FAIL(call, want, word)       \
  do {                                      \
    TU_EXPECT_STATUS(call, want);           \
    assert_msg(#call, word);                \
  } while (0)

/* Any error status will do (the header says "an error" without naming one), but not LAM_OK. */
#define EXPECT_ERROR(call)                                                           \
  do {                                                                               \
    lam_status st_ = (call);                                                         \
    if (st_ == LAM_OK) fail_msg("%s returned LAM_OK, want an error", #call);         \
    assert_msg(#call, NULL);                                                         \
  } while (0)

static void test_null_ctx(void **state) {
  (void)state;
  reset_arrays();
  /* The parameter is called ctx; "context" is an equally clear name for it. */
  TU_EXPECT_STATUS(lam_hidden(NULL, SMALL, g_grey, LAM_DTYPE_F32, g_w, g_out, NULL), LAM_ERR_INVALID_ARG);
  const char *m = lam_last_error();
  assert_true(m && *m);
  if (!tu_mentions(m, "ctx") && !strstr(m, "context")) fail_msg("NULL ctx: message names neither ctx nor context: \"%s\"", m);
  assert_out_untouched("lam_hidden(NULL ctx)");
  EXPECT_FAIL(lam_normalize(NULL, SMALL, g_grey, LAM_DTYPE_F32, g_out), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_weigh(NULL, SMALL, g_grey, g_w, g_out), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_tanh(NULL, SMALL, g_w, g_out), LAM_ERR_INVALID_ARG, NULL);
  assert_out_untouched("ops with NULL ctx");
  EXPECT_FAIL(lam_ctx_sync(NULL), LAM_ERR_INVALID_ARG, NULL);
  lam_mem_stats ms;
  EXPECT_FAIL(lam_mem_stats_get(NULL, &ms), LAM_ERR_INVALID_ARG, NULL);
  void *p = NULL;
  EXPECT_FAIL(lam_mem_alloc(NULL, &p, 64), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_host_alloc(NULL, &p, 64), LAM_ERR_INVALID_ARG, NULL);
  lam_ctx_free(NULL); /* documented as fine */
}

/* Each NULL array with n > 0: INVALID_ARG, out untouched, and the message names the argument and
 * the call (the header: the message says what failed and where). */
static void test_null_arrays(void **state) {
  (void)state;
  for (int d = 0; d < 2; d++) {
    lam_dtype dt = (lam_dtype)d;
    const void *g = dt == LAM_DTYPE_U8 ? (const void *)g_grey8 : (const void *)g_grey;
    reset_arrays();
    EXPECT_FAIL(lam_hidden(g_ctx, SMALL, NULL, dt, g_w, g_out, NULL), LAM_ERR_INVALID_ARG, "grey");
    assert_msg("NULL grey", "lam_hidden");
    EXPECT_FAIL(lam_hidden(g_ctx, SMALL, g, dt, NULL, g_out, NULL), LAM_ERR_INVALID_ARG, "w");
    assert_msg("NULL w", "lam_hidden");
    EXPECT_FAIL(lam_hidden(g_ctx, SMALL, g, dt, g_w, NULL, NULL), LAM_ERR_INVALID_ARG, "out");
    assert_msg("NULL out", "lam_hidden");
    assert_out_untouched("lam_hidden with a NULL array");
    /* n = 1 is the smallest size that must check. */
    EXPECT_FAIL(lam_hidden(g_ctx, 1, NULL, dt, g_w, g_out, NULL), LAM_ERR_INVALID_ARG, "grey");
    /* The separate ops check their arrays too. */
    EXPECT_FAIL(lam_normalize(g_ctx, SMALL, NULL, dt, g_out), LAM_ERR_INVALID_ARG, NULL);
    EXPECT_FAIL(lam_normalize(g_ctx, SMALL, g, dt, NULL), LAM_ERR_INVALID_ARG, NULL);
  }
  EXPECT_FAIL(lam_weigh(g_ctx, SMALL, NULL, g_w, g_out), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_weigh(g_ctx, SMALL, g_grey, NULL, g_out), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_weigh(g_ctx, SMALL, g_grey, g_w, NULL), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_tanh(g_ctx, SMALL, NULL, g_out), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_tanh(g_ctx, SMALL, g_w, NULL), LAM_ERR_INVALID_ARG, NULL);
  assert_out_untouched("ops with a NULL array");
}

/* n = 0 touches nothing, so NULL arrays are fine, timing or not. */
static void test_zero_n_null(void **state) {
  (void)state;
  TU_OK(lam_hidden(g_ctx, 0, NULL, LAM_DTYPE_F32, NULL, NULL, NULL));
  TU_OK(lam_hidden(g_ctx, 0, NULL, LAM_DTYPE_U8, NULL, NULL, NULL));
  lam_hidden_timing t;
  memset(&t, 0, sizeof t);
  t.total = -1;
  TU_OK(lam_hidden(g_ctx, 0, NULL, LAM_DTYPE_F32, NULL, NULL, &t));
  assert_true(t.total >= 0.0);
}

/* n beyond LAM_HIDDEN_MAX_N (2^40) is invalid, even with real arrays behind the pointers; the
 * check must come before any access. (size_t)-1 and sizes whose byte count overflows too. */
static void test_n_too_large(void **state) {
  (void)state;
  static const size_t bad_n[] = {LAM_HIDDEN_MAX_N + 1, (size_t)-1, ((size_t)-1) / 4 + 2, (size_t)1 << 62};
  for (size_t i = 0; i < sizeof bad_n / sizeof bad_n[0]; i++) {
    reset_arrays();
    EXPECT_FAIL(lam_hidden(g_ctx, bad_n[i], g_grey, LAM_DTYPE_F32, g_w, g_out, NULL), LAM_ERR_INVALID_ARG, NULL);
    EXPECT_FAIL(lam_hidden(g_ctx, bad_n[i], g_grey8, LAM_DTYPE_U8, g_w, g_out, NULL), LAM_ERR_INVALID_ARG, NULL);
    EXPECT_FAIL(lam_hidden(g_ctx, bad_n[i], NULL, LAM_DTYPE_F32, NULL, NULL, NULL), LAM_ERR_INVALID_ARG, NULL);
    assert_out_untouched("lam_hidden with n too large");
  }
  /* The separate ops are passes over the same arrays; a wild n must be an error, not a crash. */
  reset_arrays();
  assert_int_not_equal(lam_normalize(g_ctx, (size_t)-1, g_grey, LAM_DTYPE_F32, g_out), LAM_OK);
  assert_int_not_equal(lam_weigh(g_ctx, (size_t)-1, g_grey, g_w, g_out), LAM_OK);
  assert_int_not_equal(lam_tanh(g_ctx, (size_t)-1, g_w, g_out), LAM_OK);
  assert_out_untouched("ops with n = SIZE_MAX");
}

static void test_bad_dtype(void **state) {
  (void)state;
  static const int bad[] = {99, LAM_DTYPE_I8, LAM_DTYPE_F16, LAM_DTYPE_BF16, -1}; /* the hidden layer: f32 or u8 */
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    reset_arrays();
    EXPECT_FAIL(lam_hidden(g_ctx, SMALL, g_grey, (lam_dtype)bad[i], g_w, g_out, NULL), LAM_ERR_INVALID_ARG, NULL);
    EXPECT_FAIL(lam_normalize(g_ctx, SMALL, g_grey, (lam_dtype)bad[i], g_out), LAM_ERR_INVALID_ARG, NULL);
    assert_out_untouched("bad dtype");
  }
}

static void test_device_parse(void **state) {
  (void)state;
  lam_device d = (lam_device)77;
  TU_OK(lam_device_parse("cpu", &d));
  assert_int_equal(d, LAM_DEVICE_CPU);
  TU_OK(lam_device_parse("cuda", &d));
  assert_int_equal(d, LAM_DEVICE_CUDA);
  TU_OK(lam_device_parse("auto", &d));
  assert_int_equal(d, LAM_DEVICE_AUTO);
  /* The rejection says what is accepted. */
  EXPECT_FAIL(lam_device_parse("gpu", &d), LAM_ERR_INVALID_ARG, "cpu");
  assert_msg("device_parse(gpu)", "cuda");
  assert_msg("device_parse(gpu)", "auto");
  /* Case-sensitive (the header says so), and no trimming or prefixes. */
  static const char *bad[] = {"CPU", "", "cpu ", " cpu", "cp", "cudaa", "cpu\n"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    EXPECT_FAIL(lam_device_parse(bad[i], &d), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_device_parse(NULL, &d), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_device_parse("cpu", NULL), LAM_ERR_INVALID_ARG, NULL);
  /* lam_device_str names what the parser reads back. */
  for (int k = 0; k < 3; k++) {
    const char *s = lam_device_str((lam_device)k);
    assert_non_null(s);
    TU_OK(lam_device_parse(s, &d));
    assert_int_equal(d, k);
  }
}

static void test_dtype_parse(void **state) {
  (void)state;
  lam_dtype t = (lam_dtype)77;
  TU_OK(lam_dtype_parse("f32", &t));
  assert_int_equal(t, LAM_DTYPE_F32);
  TU_OK(lam_dtype_parse("u8", &t));
  assert_int_equal(t, LAM_DTYPE_U8);
  EXPECT_FAIL(lam_dtype_parse("f64", &t), LAM_ERR_INVALID_ARG, "f32");
  assert_msg("dtype_parse(f64)", "u8");
  static const char *bad[] = {"F32", "", "float", "uint8", "f64", "u8 ", "fp16", "BF16"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    EXPECT_FAIL(lam_dtype_parse(bad[i], &t), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_dtype_parse(NULL, &t), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_dtype_parse("u8", NULL), LAM_ERR_INVALID_ARG, NULL);
  for (int k = 0; k <= LAM_DTYPE_BF16; k++) { /* every dtype's name parses back to it */
    const char *s = lam_dtype_str((lam_dtype)k);
    assert_non_null(s);
    TU_OK(lam_dtype_parse(s, &t));
    assert_int_equal(t, k);
  }
  assert_int_equal(lam_dtype_size(LAM_DTYPE_F32), 4);
  assert_int_equal(lam_dtype_size(LAM_DTYPE_U8), 1);
}

static void test_ctx_create_bad(void **state) {
  (void)state;
  EXPECT_FAIL(lam_ctx_create(NULL, LAM_DEVICE_CPU), LAM_ERR_INVALID_ARG, NULL);
  static char dummy;
  lam_ctx *c = (lam_ctx *)&dummy; /* not NULL: the failing call must set it to NULL */
  EXPECT_FAIL(lam_ctx_create(&c, (lam_device)99), LAM_ERR_INVALID_ARG, NULL);
  assert_null(c);
}

/* CUDA asked for where there is none: LAM_ERR_NO_DEVICE, a message, ctx NULL. With a device the
 * check does not apply (test_hidden_cuda covers that side). */
static void test_cuda_absent(void **state) {
  (void)state;
  const char *why = NULL;
  int count = lam_cuda_device_count(&why);
  assert_true(count >= 0);
  if (count > 0) {
    print_message("a CUDA device is present (%d): the no-device checks do not apply\n", count);
    skip();
  }
  assert_non_null(why);
  assert_true(strlen(why) > 0); /* the header: *why says why there are none */
  static char dummy;
  lam_ctx *c = (lam_ctx *)&dummy;
  EXPECT_FAIL(lam_ctx_create(&c, LAM_DEVICE_CUDA), LAM_ERR_NO_DEVICE, NULL);
  assert_null(c);
  lam_cuda_device_info info;
  assert_int_not_equal(lam_cuda_device_info_get(0, &info), LAM_OK);
}

static void test_cuda_info_bad_index(void **state) {
  (void)state;
  lam_cuda_device_info info;
  int count = lam_cuda_device_count(NULL);
  assert_int_not_equal(lam_cuda_device_info_get(-1, &info), LAM_OK);
  assert_int_not_equal(lam_cuda_device_info_get(count, &info), LAM_OK);
  assert_int_not_equal(lam_cuda_device_info_get(count + 1000, &info), LAM_OK);
}

/* LAMINA_DEVICE overrides AUTO, and only AUTO. */
static void test_env_override(void **state) {
  (void)state;
  const int have_cuda = lam_cuda_device_count(NULL) > 0;
  static char dummy;
  lam_ctx *c = (lam_ctx *)&dummy;

  assert_int_equal(setenv("LAMINA_DEVICE", "bogus", 1), 0);
  EXPECT_FAIL(lam_ctx_create(&c, LAM_DEVICE_AUTO), LAM_ERR_INVALID_ARG, "LAMINA_DEVICE");
  assert_null(c);
  /* An explicit device does not consult the variable. */
  TU_OK(lam_ctx_create(&c, LAM_DEVICE_CPU));
  assert_int_equal(lam_ctx_device(c), LAM_DEVICE_CPU);
  lam_ctx_free(c);

  assert_int_equal(setenv("LAMINA_DEVICE", "cpu", 1), 0);
  c = NULL;
  TU_OK(lam_ctx_create(&c, LAM_DEVICE_AUTO));
  assert_int_equal(lam_ctx_device(c), LAM_DEVICE_CPU);
  const char *why = lam_ctx_choice_reason(c);
  assert_true(why && *why); /* AUTO says why it chose */
  print_message("LAMINA_DEVICE=cpu: %s\n", why);
  lam_ctx_free(c);

  assert_int_equal(setenv("LAMINA_DEVICE", "cuda", 1), 0);
  c = (lam_ctx *)&dummy;
  lam_status st = lam_ctx_create(&c, LAM_DEVICE_AUTO);
  if (have_cuda) {
    assert_int_equal(st, LAM_OK);
    assert_int_equal(lam_ctx_device(c), LAM_DEVICE_CUDA);
    lam_ctx_free(c);
  } else {
    assert_int_equal(st, LAM_ERR_NO_DEVICE);
    assert_null(c);
  }

  /* auto, or no variable at all: CUDA exactly when a device is present. */
  static const char *vals[] = {"auto", NULL};
  for (int k = 0; k < 2; k++) {
    if (vals[k])
      assert_int_equal(setenv("LAMINA_DEVICE", vals[k], 1), 0);
    else
      assert_int_equal(unsetenv("LAMINA_DEVICE"), 0);
    c = NULL;
    TU_OK(lam_ctx_create(&c, LAM_DEVICE_AUTO));
    assert_int_equal(lam_ctx_device(c), have_cuda ? LAM_DEVICE_CUDA : LAM_DEVICE_CPU);
    why = lam_ctx_choice_reason(c);
    assert_true(why && *why);
    lam_ctx_free(c);
  }
  unsetenv("LAMINA_DEVICE");
}

/* lam_mem_free of a pointer not from lam_mem_alloc (foreign, interior, already freed) is an error
 * with a message, and leaves the allocator's figures alone. */
static void test_mem_free_foreign(void **state) {
  (void)state;
  lam_mem_stats before, after;
  TU_OK(lam_mem_set_limit(g_ctx, 0)); /* the allocators' own failures, not the CPU's default cap */
  TU_OK(lam_mem_stats_get(g_ctx, &before));
  TU_OK(lam_mem_free(g_ctx, NULL)); /* documented as fine */

  void *foreign = malloc(1024);
  assert_non_null(foreign);
  EXPECT_ERROR(lam_mem_free(g_ctx, foreign));
  free(foreign);
  int on_stack;
  EXPECT_ERROR(lam_mem_free(g_ctx, &on_stack));

  void *p = NULL;
  TU_OK(lam_mem_alloc(g_ctx, &p, 4096));
  EXPECT_ERROR(lam_mem_free(g_ctx, (char *)p + 256));
  TU_OK(lam_mem_free(g_ctx, p));
  /* Freed twice: the block is no longer handed out, so the second free is not from lam_mem_alloc. */
  EXPECT_ERROR(lam_mem_free(g_ctx, p));

  TU_OK(lam_mem_stats_get(g_ctx, &after));
  assert_int_equal(after.in_use, before.in_use);
  assert_int_equal(after.reserved, after.in_use + after.cached);
}

/* Sizes no machine can give: an error (out of memory or invalid), never LAM_OK, never a crash.
 * SIZE_MAX - 10 catches a round-up to 256 bytes that wraps to a tiny block. */
static void test_impossible_alloc(void **state) {
  (void)state;
  /* 2^50 passes the plausibility check and reaches the allocator, which cannot map a petabyte */
  static const size_t sizes[] = {(size_t)-1, (size_t)-1 - 10, (size_t)-1 - 255, (size_t)1 << 62, (size_t)1 << 50};
  lam_mem_stats before, after;
  TU_OK(lam_mem_stats_get(g_ctx, &before));
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void *p = NULL;
    lam_status st = lam_mem_alloc(g_ctx, &p, sizes[i]);
    if (st != LAM_ERR_OUT_OF_MEMORY && st != LAM_ERR_INVALID_ARG)
      fail_msg("lam_mem_alloc(%zu bytes) returned %s", sizes[i], lam_status_str(st));
    assert_msg("impossible lam_mem_alloc", NULL);
    if (st == LAM_ERR_OUT_OF_MEMORY) { /* the cache's message carries the allocator's reason intact */
      char want[64];
      snprintf(want, sizeof want, "asked for %zu bytes", sizes[i]);
      const char *e = lam_last_error();
      if (!strstr(e, want) || !strstr(e, "memory [src/") || !strstr(e, "(") || strstr(e, "((") )
        fail_msg("lam_mem_alloc(%zu bytes): garbled message '%s'", sizes[i], e);
    }
    st = lam_host_alloc(g_ctx, &p, sizes[i]);
    if (st != LAM_ERR_OUT_OF_MEMORY && st != LAM_ERR_INVALID_ARG)
      fail_msg("lam_host_alloc(%zu bytes) returned %s", sizes[i], lam_status_str(st));
  }
  TU_OK(lam_mem_stats_get(g_ctx, &after));
  assert_int_equal(after.in_use, before.in_use);
  assert_true(after.reserved <= before.reserved); /* a failed allocation may give cached blocks back, never keep more */
  void *p = NULL;
  EXPECT_FAIL(lam_mem_alloc(g_ctx, NULL, 64), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_host_alloc(g_ctx, NULL, 64), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_mem_stats_get(g_ctx, NULL), LAM_ERR_INVALID_ARG, NULL);
  TU_OK(lam_mem_alloc(g_ctx, &p, 64));
  EXPECT_FAIL(lam_mem_upload(g_ctx, NULL, g_w, 16), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_mem_upload(g_ctx, p, NULL, 16), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_mem_download(g_ctx, NULL, p, 16), LAM_ERR_INVALID_ARG, NULL);
  EXPECT_FAIL(lam_mem_download(g_ctx, g_out, NULL, 16), LAM_ERR_INVALID_ARG, NULL);
  TU_OK(lam_mem_free(g_ctx, p));
}

/* Every status has a fixed, non-empty, distinct name; an out-of-range value still gets a string. */
static void test_status_str(void **state) {
  (void)state;
  const char *names[LAM_ERR_INTERRUPTED + 1];
  for (int s = LAM_OK; s <= LAM_ERR_INTERRUPTED; s++) {
    names[s] = lam_status_str((lam_status)s);
    assert_non_null(names[s]);
    assert_true(strlen(names[s]) > 0);
    for (int k = 0; k < s; k++)
      if (strcmp(names[k], names[s]) == 0) fail_msg("statuses %d and %d share the name \"%s\"", k, s, names[s]);
  }
  assert_non_null(lam_status_str((lam_status)1000));
  assert_non_null(lam_status_str((lam_status)-1));
  assert_non_null(lam_last_error());
}

/* The last error belongs to the thread that failed. */
static void *thread_fail_w(void *arg) {
  (void)arg;
  float o[2];
  lam_status st = lam_hidden(g_ctx, 2, g_grey, LAM_DTYPE_F32, NULL, o, NULL);
  int ok = st == LAM_ERR_INVALID_ARG && tu_mentions(lam_last_error(), "w");
  return ok ? (void *)1 : NULL;
}
static void test_error_per_thread(void **state) {
  (void)state;
  reset_arrays();
  EXPECT_FAIL(lam_hidden(g_ctx, SMALL, NULL, LAM_DTYPE_F32, g_w, g_out, NULL), LAM_ERR_INVALID_ARG, "grey");
  char mine[1024];
  snprintf(mine, sizeof mine, "%s", lam_last_error());
  pthread_t th;
  void *res = NULL;
  assert_int_equal(pthread_create(&th, NULL, thread_fail_w, NULL), 0);
  assert_int_equal(pthread_join(th, &res), 0);
  if (!res) fail_msg("the other thread's lam_last_error() did not describe its own NULL w");
  assert_string_equal(lam_last_error(), mine);
}

/* A message ends with " [src/DIR/FILE.c:LINE]": the path from the repository's root, whatever folders the
 * checkout sits in. The checkout in a folder named src (/home/me/src/src/...) or a project folder inside
 * one (/home/me/src/lamina/src/...) doubled the front ("[src/src/data/dataset.c:445]"). */
static void test_error_location(void **state) {
  (void)state;
  static const char *const paths[][2] = {
      {"/home/me/src/src/data/dataset.c", "[src/data/dataset.c:445]"},
      {"/home/me/src/lamina/src/data/dataset.c", "[src/data/dataset.c:445]"},
      {"/work/lamina/src/cuda/backend.cu", "[src/cuda/backend.cu:445]"},
      {"src/nn/spec.c", "[src/nn/spec.c:445]"},
      {"../src/cli/main.c", "[src/cli/main.c:445]"},
  };
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    lam_fail_at(LAM_ERR_IO, paths[i][0], 445, "something failed");
    const char *m = lam_last_error(), *at = strrchr(m, '[');
    if (!at || strcmp(at, paths[i][1]) != 0)
      fail_msg("a failure at %s:445 reads \"%s\", want it to end with \"%s\"", paths[i][0], m, paths[i][1]);
  }
  /* and a real one names the file it came from, relative to the repository's root */
  EXPECT_FAIL(lam_ctx_create(NULL, LAM_DEVICE_CPU), LAM_ERR_INVALID_ARG, "ctx");
  if (!strstr(lam_last_error(), " [src/context.c:"))
    fail_msg("lam_ctx_create(NULL)'s message does not end with [src/context.c:LINE]: \"%s\"", lam_last_error());
}

/* A message longer than the last-error buffer (a long path in it) ends at a word with "..." and keeps its
 * location; it was cut mid-word with no location (issue 30, finding 8). */
static void test_long_message(void **state) {
  (void)state;
  char path[3000] = "/no-such-folder/";
  while (strlen(path) + 12 < sizeof path) strcat(path, "a long name ");
  lam_dataset *d = NULL;
  assert_int_not_equal(lam_dataset_load(path, 1, &d), LAM_OK);
  const char *msg = lam_last_error();
  const size_t n = strlen(msg);
  if (!strstr(msg, "... [src/") || msg[n - 1] != ']')
    fail_msg("a long message lost its end or its location: ...%s", msg + (n > 80 ? n - 80 : 0));
  const char *dots = strstr(msg, "... [src/"), *w = dots;
  while (w > msg && w[-1] != ' ') w--; /* the last word kept: whole ("a", "long" or "name") */
  const size_t wl = (size_t)(dots - w);
  if (!((wl == 1 && !strncmp(w, "a", 1)) || (wl == 4 && (!strncmp(w, "long", 4) || !strncmp(w, "name", 4)))))
    fail_msg("a long message was not cut at a word: ...%.40s", dots - 20);
}

int main(void) {
  unsetenv("LAMINA_DEVICE"); /* the tests set it themselves */
  lam_status st = lam_ctx_create(&g_ctx, LAM_DEVICE_CPU);
  if (st != LAM_OK || !g_ctx) {
    fprintf(stderr, "lam_ctx_create(CPU) failed: %s: %s\n", lam_status_str(st), lam_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_null_ctx),        cmocka_unit_test(test_null_arrays),
      cmocka_unit_test(test_zero_n_null),     cmocka_unit_test(test_n_too_large),
      cmocka_unit_test(test_bad_dtype),       cmocka_unit_test(test_device_parse),
      cmocka_unit_test(test_dtype_parse),     cmocka_unit_test(test_ctx_create_bad),
      cmocka_unit_test(test_cuda_absent),     cmocka_unit_test(test_cuda_info_bad_index),
      cmocka_unit_test(test_env_override),    cmocka_unit_test(test_mem_free_foreign),
      cmocka_unit_test(test_impossible_alloc), cmocka_unit_test(test_status_str),
      cmocka_unit_test(test_error_per_thread), cmocka_unit_test(test_error_location),
      cmocka_unit_test(test_long_message),
  };
  int failed = TU_RUN_GROUP("errors", tests, NULL, NULL);
  lam_ctx_free(g_ctx);
  return failed ? 1 : 0;
}
