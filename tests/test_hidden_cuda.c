/* test_hidden_cuda.c — the CUDA backend against the float64 reference (every element, max abs error
 * <= 1e-6, outputs poisoned with NaN first, guards around each array): pageable, pinned,
 * device-resident and mixed arrays; sizes from 0 to 20,000,001 (several chunks of the host path);
 * both grey dtypes; misaligned device and host pointers; out == w; the three separate ops on device
 * memory; lam_tanh's special values; ordering between queued device work and a host-path call;
 * the timing struct; and the CUDA allocator's figures.
 *
 * Exits 77 (CTest: skipped) before running anything when there is no CUDA device, so a machine
 * without a GPU reports "skipped", never "passed".
 */
#include "testutil.h"

static lam_ctx *g_ctx;

static const size_t k_sizes[] = {0, 1, 3, 5, 1000003, 20000001};
#define N_SIZES (sizeof k_sizes / sizeof k_sizes[0])

static lam_hidden_timing run(size_t n, lam_dtype dt, tu_mem g, tu_mem w, tu_mem o, size_t lead, int inplace,
                             tu_wdist wd) {
  tu_case c = {n, dt, wd, g, w, o, lead, inplace, 0};
  return tu_run_hidden(g_ctx, &c);
}

static void all_sizes(tu_mem g, tu_mem w, tu_mem o) {
  for (int d = 0; d < 2; d++)
    for (size_t i = 0; i < N_SIZES; i++) {
      lam_hidden_timing t = run(k_sizes[i], (lam_dtype)d, g, w, o, 0, 0, TU_W_NORMAL);
      if (k_sizes[i] >= 1000000)
        print_message("  %s/%s/%s n=%zu %s: total %.3f ms, chunks %d\n", tu_mem_name(g), tu_mem_name(w),
                      tu_mem_name(o), k_sizes[i], tu_dt_name((lam_dtype)d), t.total, t.chunks);
    }
}

static void test_identity(void **state) {
  (void)state;
  assert_int_equal(lam_ctx_device(g_ctx), LAM_DEVICE_CUDA);
  const char *name = lam_ctx_device_name(g_ctx);
  assert_true(name && *name);
  assert_string_equal(lam_ctx_choice_reason(g_ctx), ""); /* asked for explicitly */
  lam_cuda_device_info info;
  memset(&info, 0, sizeof info);
  TU_OK(lam_cuda_device_info_get(0, &info));
  print_message("device: %s; %s, sm_%d%d, %d SMs, %zu MiB\n", name, info.name, info.cc_major, info.cc_minor,
                info.sm_count, info.mem_total >> 20);
  assert_true(strlen(info.name) > 0);
  assert_true(info.cc_major >= 3);
  assert_true(info.sm_count > 0);
  assert_true(info.mem_total > 0 && info.mem_free <= info.mem_total);
  lam_build_info b;
  lam_build_info_get(&b);
  assert_true(b.with_cuda); /* a device was used, so the CUDA backend is built in */
}

static void test_pageable(void **state) { (void)state; all_sizes(TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE); }
static void test_pinned(void **state) { (void)state; all_sizes(TU_PINNED, TU_PINNED, TU_PINNED); }
static void test_device_resident(void **state) { (void)state; all_sizes(TU_BACKEND, TU_BACKEND, TU_BACKEND); }

/* The brief's mix (grey pinned, weights on the device, out pageable) and two rotations of it, so
 * every array is once in each kind of memory. */
static void test_mixed(void **state) {
  (void)state;
  all_sizes(TU_PINNED, TU_BACKEND, TU_PAGEABLE);
  static const tu_mem more[][3] = {{TU_PAGEABLE, TU_PINNED, TU_BACKEND}, {TU_BACKEND, TU_PAGEABLE, TU_PINNED}};
  for (size_t m = 0; m < 2; m++)
    for (int d = 0; d < 2; d++) {
      run(5, (lam_dtype)d, more[m][0], more[m][1], more[m][2], 0, 0, TU_W_NORMAL);
      run(1000003, (lam_dtype)d, more[m][0], more[m][1], more[m][2], 0, 0, TU_W_NORMAL);
    }
}

/* Weights uniform(-40, 40): negative values and saturation, on both paths. */
static void test_wide_weights(void **state) {
  (void)state;
  for (int d = 0; d < 2; d++) {
    run(17, (lam_dtype)d, TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE, 0, 0, TU_W_WIDE);
    run(1000003, (lam_dtype)d, TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE, 0, 0, TU_W_WIDE);
    run(1000003, (lam_dtype)d, TU_BACKEND, TU_BACKEND, TU_BACKEND, 0, 0, TU_W_WIDE);
  }
}

/* Pointers one element past an aligned start: device arrays (kernel vector loads) and host arrays
 * (staging copies). */
static void test_misaligned(void **state) {
  (void)state;
  static const size_t sizes[] = {1, 3, 5, 17, 1000003};
  static const tu_mem modes[][3] = {{TU_BACKEND, TU_BACKEND, TU_BACKEND},
                                    {TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE},
                                    {TU_PINNED, TU_BACKEND, TU_PAGEABLE}};
  for (size_t m = 0; m < 3; m++)
    for (int d = 0; d < 2; d++)
      for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        run(sizes[i], (lam_dtype)d, modes[m][0], modes[m][1], modes[m][2], 1, 0, TU_W_NORMAL);
  /* Several chunks with a misaligned pageable array. */
  run(20000001, LAM_DTYPE_U8, TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE, 1, 0, TU_W_NORMAL);
}

/* out == w: on the device, and through the chunked host path where the weights are read from and the
 * result written back into the same pageable/pinned array. */
static void test_inplace(void **state) {
  (void)state;
  for (int d = 0; d < 2; d++)
    for (size_t lead = 0; lead < 2; lead++) {
      run(5, (lam_dtype)d, TU_BACKEND, TU_BACKEND, TU_BACKEND, lead, 1, TU_W_NORMAL);
      run(1000003, (lam_dtype)d, TU_BACKEND, TU_BACKEND, TU_BACKEND, lead, 1, TU_W_NORMAL);
      run(1000003, (lam_dtype)d, TU_PINNED, TU_PINNED, TU_PINNED, lead, 1, TU_W_NORMAL);
      run(1000003, (lam_dtype)d, TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE, lead, 1, TU_W_NORMAL);
    }
  run(20000001, LAM_DTYPE_F32, TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE, 0, 1, TU_W_NORMAL);
  run(20000001, LAM_DTYPE_U8, TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE, 0, 1, TU_W_NORMAL);
}

static void test_ops_chain(void **state) {
  (void)state;
  for (int d = 0; d < 2; d++)
    for (size_t i = 0; i < N_SIZES; i++) {
      tu_run_ops_chain(g_ctx, k_sizes[i], (lam_dtype)d, 0, 1);
      if (k_sizes[i] > 0 && k_sizes[i] < 20000000) tu_run_ops_chain(g_ctx, k_sizes[i], (lam_dtype)d, 1, 1);
    }
}

static void test_tanh_values(void **state) {
  (void)state;
  tu_check_tanh_values(g_ctx);
}

/* Device-resident work is queued without waiting; a host-path call that then reads its result as
 * the weights must see the finished values (the host path's streams have to wait for the context's
 * stream). The queued work: a = hidden(g1, w); 200 passes of lam_weigh by -1 ping-ponging a <-> b
 * (about 10 ms of GPU time: a window the host path's first chunks fall into); then f = -a, written
 * once, last, into a NaN-poisoned buffer. The host path reads f as its weights: reading it early
 * gives NaN, which fails the check. */
static void test_ordering(void **state) {
  (void)state;
  const size_t n = 20000001;
  uint8_t *g1 = malloc(n), *g2 = malloc(n);
  float *w = malloc(n * 4), *wneg = malloc(n * 4), *f = malloc(n * 4), *out = malloc(n * 4);
  assert_true(g1 && g2 && w && wneg && f && out);
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(0x0de2));
  tu_fill_greys(&r, g1, LAM_DTYPE_U8, n);
  tu_fill_greys(&r, g2, LAM_DTYPE_U8, n);
  tu_fill_weights(&r, w, n, TU_W_WIDE);
  for (size_t i = 0; i < n; i++) wneg[i] = -w[i]; /* -tanh(x) = tanh(-x): the reference of f */
  void *dg, *dw, *da, *db, *df, *dm1;
  TU_OK(lam_mem_alloc(g_ctx, &dg, n));
  TU_OK(lam_mem_alloc(g_ctx, &dw, n * 4));
  TU_OK(lam_mem_alloc(g_ctx, &da, n * 4));
  TU_OK(lam_mem_alloc(g_ctx, &db, n * 4));
  TU_OK(lam_mem_alloc(g_ctx, &df, n * 4));
  TU_OK(lam_mem_alloc(g_ctx, &dm1, n * 4));
  TU_OK(lam_mem_upload(g_ctx, dg, g1, n));
  TU_OK(lam_mem_upload(g_ctx, dw, w, n * 4));
  tu_fill_nan(f, n);
  TU_OK(lam_mem_upload(g_ctx, df, f, n * 4));
  for (size_t i = 0; i < n; i++) out[i] = -1.0f;
  TU_OK(lam_mem_upload(g_ctx, dm1, out, n * 4));
  /* The same host-path call once first, so its pinned staging and chunk buffers already exist:
   * allocating pinned memory takes long and can synchronize the device, which would hide a missing
   * wait. */
  TU_OK(lam_hidden(g_ctx, n, g2, LAM_DTYPE_U8, dw, out, NULL));
  TU_OK(lam_ctx_sync(g_ctx));

  TU_OK(lam_hidden(g_ctx, n, dg, LAM_DTYPE_U8, dw, da, NULL));
  for (int k = 0; k < 200; k++) /* even count: the value ends in a */
    TU_OK(k % 2 == 0 ? lam_weigh(g_ctx, n, da, dm1, db) : lam_weigh(g_ctx, n, db, dm1, da));
  TU_OK(lam_weigh(g_ctx, n, da, dm1, df));
  tu_fill_nan(out, n);
  TU_OK(lam_hidden(g_ctx, n, g2, LAM_DTYPE_U8, df, out, NULL)); /* host path, no sync before it */
  /* out is complete on return (an array is in host memory): keep it as it was then. */
  float *out_then = malloc(n * 4);
  assert_non_null(out_then);
  memcpy(out_then, out, n * 4);
  TU_OK(lam_ctx_sync(g_ctx));
  TU_OK(lam_mem_download(g_ctx, f, df, n * 4));
  tu_assert_hidden("ordering: the queued device chain", n, g1, LAM_DTYPE_U8, wneg, f);
  tu_assert_hidden("ordering: host-path call reading the queued result", n, g2, LAM_DTYPE_U8, f, out_then);
  free(out_then);
  void *dev[] = {dg, dw, da, db, df, dm1};
  for (int i = 0; i < 6; i++) TU_OK(lam_mem_free(g_ctx, dev[i]));
  free(g1);
  free(g2);
  free(w);
  free(wneg);
  free(f);
  free(out);
}

/* Timing of the chunked host path and of the single-kernel device path. */
static void test_timing(void **state) {
  (void)state;
  lam_hidden_timing t = run(20000001, LAM_DTYPE_F32, TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE, 0, 0, TU_W_NORMAL);
  print_message("host path, 20000001 f32: total %.3f staging %.3f in %.3f kernel %.3f out %.3f ms, %d chunks\n",
                t.total, t.staging, t.copy_in, t.kernel, t.copy_out, t.chunks);
  assert_true(isfinite(t.total) && t.total > 0.0); /* 240 MB over PCIe cannot take zero time */
  assert_true(t.chunks >= 1);
  assert_true(t.copy_in >= 0.0 && t.kernel >= 0.0 && t.copy_out >= 0.0 && t.staging >= 0.0);
  t = run(20000001, LAM_DTYPE_F32, TU_BACKEND, TU_BACKEND, TU_BACKEND, 0, 0, TU_W_NORMAL);
  print_message("device path, 20000001 f32: total %.3f kernel %.3f ms, %d chunks\n", t.total, t.kernel, t.chunks);
  assert_true(isfinite(t.total) && t.total >= 0.0);
  assert_int_equal(t.chunks, 1); /* the header: 1 for device-resident */
}

static lam_mem_stats stats(void) {
  lam_mem_stats s;
  memset(&s, 0xff, sizeof s);
  TU_OK(lam_mem_stats_get(g_ctx, &s));
  assert_true(s.reserved >= s.in_use);
  assert_int_equal(s.cached, s.reserved - s.in_use);
  assert_true(s.peak >= s.in_use);
  return s;
}

/* The allocator's figures on device memory. */
static void test_alloc_figures(void **state) {
  (void)state;
  const size_t a_bytes = 3u << 20, b_bytes = 12345;
  lam_mem_stats s0 = stats();
  void *a, *b, *a2;
  TU_OK(lam_mem_alloc(g_ctx, &a, a_bytes));
  TU_OK(lam_mem_alloc(g_ctx, &b, b_bytes));
  assert_true((uintptr_t)a % 256 == 0 && (uintptr_t)b % 256 == 0);
  lam_mem_stats s1 = stats();
  assert_true(s1.in_use >= s0.in_use + a_bytes + b_bytes);
  assert_int_equal(s1.allocs, s0.allocs + 2);
  TU_OK(lam_mem_free(g_ctx, a));
  lam_mem_stats s2 = stats();
  assert_true(s2.in_use <= s1.in_use - a_bytes);
  assert_true(s2.cached >= a_bytes);
  assert_int_equal(s2.peak, s1.peak);
  TU_OK(lam_mem_alloc(g_ctx, &a2, a_bytes));
  lam_mem_stats s3 = stats();
  assert_int_equal(s3.cache_hits, s2.cache_hits + 1);
  assert_int_equal(s3.reserved, s2.reserved);
  TU_OK(lam_mem_free(g_ctx, a2));
  TU_OK(lam_mem_free(g_ctx, b));
  lam_mem_stats s4 = stats();
  assert_int_equal(s4.in_use, s0.in_use);
  assert_true(s4.cached > 0);
  size_t released = 0;
  TU_OK(lam_mem_release_cached(g_ctx, &released));
  lam_mem_stats s5 = stats();
  assert_true(released > 0);
  assert_int_equal(released, s4.cached);
  assert_int_equal(s5.cached, 0);
  assert_int_equal(s5.reserved, s5.in_use);
  /* Foreign pointers are errors on CUDA too. */
  int on_stack;
  assert_int_not_equal(lam_mem_free(g_ctx, &on_stack), LAM_OK);
}

/* A pageable host call stages through pinned buffers owned by the context. */
static void test_pinned_staging(void **state) {
  (void)state;
  run(1000003, LAM_DTYPE_F32, TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE, 0, 0, TU_W_NORMAL);
  lam_mem_stats s = stats();
  print_message("pinned staging: %zu bytes\n", s.pinned_host);
  assert_true(s.pinned_host > 0);
}

/* An AUTO context chooses per call: host arrays where the costs say (each side forced in turn by
 * lam_hidden_costs_set), device arrays always on the GPU; results right either way. Then a fresh AUTO
 * context's calibration, whose figures are printed. */
static void test_auto_choice(void **state) {
  (void)state;
  lam_ctx *ctx = NULL;
  TU_OK(lam_ctx_create(&ctx, LAM_DEVICE_AUTO));
  assert_int_equal(lam_ctx_device(ctx), LAM_DEVICE_CUDA);
  lam_hidden_costs host_cheap = {.cpu_ms = 0, .cpu_ms_per_gb = 1, .cuda_ms = 1000, .cuda_ms_per_gb = 1000};
  lam_hidden_costs gpu_cheap = {.cpu_ms = 1000, .cpu_ms_per_gb = 1000, .cuda_ms = 0, .cuda_ms_per_gb = 1};
  for (int d = 0; d < 2; d++) {
    tu_case host = {1000003, (lam_dtype)d, TU_W_NORMAL, TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE, 0, 0, 0};
    tu_case pinned = {1000003, (lam_dtype)d, TU_W_NORMAL, TU_PINNED, TU_PINNED, TU_PINNED, 0, 0, 0};
    tu_case dev = {1000003, (lam_dtype)d, TU_W_NORMAL, TU_BACKEND, TU_BACKEND, TU_BACKEND, 0, 0, 0};
    tu_case mixed = {1000003, (lam_dtype)d, TU_W_NORMAL, TU_PAGEABLE, TU_BACKEND, TU_PAGEABLE, 0, 0, 0};
    TU_OK(lam_hidden_costs_set(ctx, &host_cheap));
    assert_int_equal(tu_run_hidden(ctx, &host).device, LAM_DEVICE_CPU);
    assert_int_equal(strncmp(lam_hidden_choice(ctx), "cpu (auto: host arrays", 22), 0);
    assert_int_equal(tu_run_hidden(ctx, &pinned).device, LAM_DEVICE_CPU);
    assert_int_equal(tu_run_hidden(ctx, &dev).device, LAM_DEVICE_CUDA); /* device arrays never move */
    assert_int_equal(tu_run_hidden(ctx, &mixed).device, LAM_DEVICE_CUDA);
    TU_OK(lam_hidden_costs_set(ctx, &gpu_cheap));
    assert_int_equal(tu_run_hidden(ctx, &host).device, LAM_DEVICE_CUDA);
    assert_int_equal(strncmp(lam_hidden_choice(ctx), "cuda (auto: host arrays", 23), 0);
  }
  lam_ctx_free(ctx);
  /* a CUDA context asked for explicitly never chooses */
  lam_hidden_costs got;
  TU_OK(lam_hidden_costs_set(g_ctx, &host_cheap));
  tu_case host = {1000003, LAM_DTYPE_F32, TU_W_NORMAL, TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE, 0, 0, 0};
  assert_int_equal(tu_run_hidden(g_ctx, &host).device, LAM_DEVICE_CUDA);
  /* calibration */
  TU_OK(lam_ctx_create(&ctx, LAM_DEVICE_AUTO));
  TU_OK(lam_hidden_costs_get(ctx, &got));
  assert_int_equal(got.calibrated, 0);
  TU_OK(lam_hidden_calibrate(ctx));
  TU_OK(lam_hidden_costs_get(ctx, &got));
  print_message("calibrated: host %.3f ms + %.3f ms/GB (%d threads), GPU %.3f ms + %.3f ms/GB\n", got.cpu_ms,
                got.cpu_ms_per_gb, lam_ctx_threads(ctx), got.cuda_ms, got.cuda_ms_per_gb);
  assert_int_equal(got.calibrated, 1);
  assert_true(got.cpu_ms_per_gb > 0 && got.cuda_ms_per_gb > 0 && got.cpu_ms >= 0 && got.cuda_ms >= 0);
  lam_hidden_timing t = tu_run_hidden(ctx, &host);
  print_message("n=1000003 on auto: %s, %.3f ms (%s)\n", t.device == LAM_DEVICE_CPU ? "cpu" : "cuda", t.total,
                lam_hidden_choice(ctx));
  lam_ctx_free(ctx);
}

int main(void) {
  const char *why = NULL;
  int count = lam_cuda_device_count(&why);
  if (count <= 0) {
    printf("no CUDA device: skipping (%s)\n", why ? why : "no reason given");
    return 77; /* CTest SKIP_RETURN_CODE */
  }
  lam_status st = lam_ctx_create(&g_ctx, LAM_DEVICE_CUDA);
  if (st != LAM_OK || !g_ctx) {
    fprintf(stderr, "%d CUDA device(s), but lam_ctx_create(CUDA) failed: %s: %s\n", count, lam_status_str(st),
            lam_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_identity),      cmocka_unit_test(test_pageable),
      cmocka_unit_test(test_pinned),        cmocka_unit_test(test_device_resident),
      cmocka_unit_test(test_mixed),         cmocka_unit_test(test_wide_weights),
      cmocka_unit_test(test_misaligned),    cmocka_unit_test(test_inplace),
      cmocka_unit_test(test_ops_chain),     cmocka_unit_test(test_tanh_values),
      cmocka_unit_test(test_ordering),      cmocka_unit_test(test_timing),
      cmocka_unit_test(test_alloc_figures), cmocka_unit_test(test_pinned_staging),
      cmocka_unit_test(test_auto_choice),
  };
  int failed = TU_RUN_GROUP("hidden_cuda", tests, NULL, NULL);
  lam_ctx_free(g_ctx);
  return failed ? 1 : 0;
}
