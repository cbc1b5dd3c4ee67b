/* test_hidden_cpu.c — correctness of the CPU backend's hidden layer, out = tanh(grey / 255 * w):
 * every element of every case against a float64 reference (max abs error <= 1e-6, outputs poisoned
 * with NaN first, guard elements around each array), for awkward sizes (SIMD and thread remainders),
 * both grey dtypes, normal and wide weights, misaligned pointers, out == w, arrays from
 * lam_host_alloc / lam_mem_alloc; the three separate ops chained; lam_tanh on its own, special values
 * included; and the timing struct.
 */
#include "testutil.h"

static lam_ctx *g_ctx; /* one context for the whole file: reuse across calls is part of the test */

/* Sizes around vector widths (4, 8, 16 floats) and thread splits, plus a million and a prime. */
static const size_t k_sizes[] = {0, 1, 3, 4, 5, 7, 17, 1000000, 1000003};
#define N_SIZES (sizeof k_sizes / sizeof k_sizes[0])

static tu_case base_case(size_t n, lam_dtype dt) {
  tu_case c = {n, dt, TU_W_NORMAL, TU_PAGEABLE, TU_PAGEABLE, TU_PAGEABLE, 0, 0, 0};
  return c;
}

static void sizes_for(lam_dtype dt) {
  for (size_t i = 0; i < N_SIZES; i++) {
    tu_case c = base_case(k_sizes[i], dt);
    tu_run_hidden(g_ctx, &c);
  }
}
static void test_sizes_f32(void **state) { (void)state; sizes_for(LAM_DTYPE_F32); }
static void test_sizes_u8(void **state) { (void)state; sizes_for(LAM_DTYPE_U8); }

/* Weights uniform(-40, 40): negative products and |x| up to 40, deep in tanh's saturation where a
 * careless exp-based formula overflows to inf/inf = NaN. */
static void test_wide_weights(void **state) {
  (void)state;
  static const size_t sizes[] = {1, 3, 7, 17, 1000003};
  for (int d = 0; d < 2; d++)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      tu_case c = base_case(sizes[i], (lam_dtype)d);
      c.wdist = TU_W_WIDE;
      tu_run_hidden(g_ctx, &c);
    }
}

/* Every grey 0..255 (the random draw never gives 255) against edge weights: zero of both signs,
 * tiny, the saturation region and far beyond it. */
static void test_edge_values(void **state) {
  (void)state;
  static const float wv[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-8f, -1e-8f, 9.0f, -9.0f,
                             40.0f, -40.0f, 255.0f, -255.0f, 1e6f, -1e6f, 3.0e38f, -3.0e38f};
  const size_t nw = sizeof wv / sizeof wv[0], n = 256 * nw;
  uint8_t *g8 = malloc(n);
  float *g32 = malloc(n * 4), *w = malloc(n * 4), *out = malloc(n * 4);
  assert_true(g8 && g32 && w && out);
  for (size_t j = 0; j < nw; j++)
    for (size_t g = 0; g < 256; g++) {
      g8[j * 256 + g] = (uint8_t)g;
      g32[j * 256 + g] = (float)g;
      w[j * 256 + g] = wv[j];
    }
  tu_fill_nan(out, n);
  TU_OK(lam_hidden(g_ctx, n, g8, LAM_DTYPE_U8, w, out, NULL));
  tu_assert_hidden("edge values u8", n, g8, LAM_DTYPE_U8, w, out);
  tu_fill_nan(out, n);
  TU_OK(lam_hidden(g_ctx, n, g32, LAM_DTYPE_F32, w, out, NULL));
  tu_assert_hidden("edge values f32", n, g32, LAM_DTYPE_F32, w, out);
  free(g8);
  free(g32);
  free(w);
  free(out);
}

/* f32 greys are any float in 0..255, not only whole numbers. */
static void test_fractional_greys(void **state) {
  (void)state;
  const size_t n = 100003;
  float *g = malloc(n * 4), *w = malloc(n * 4), *out = malloc(n * 4);
  assert_true(g && w && out);
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(0xf4ac));
  for (size_t i = 0; i < n; i++) g[i] = (float)tu_uniform(&r, 0.0, 255.0);
  tu_fill_weights(&r, w, n, TU_W_WIDE);
  tu_fill_nan(out, n);
  TU_OK(lam_hidden(g_ctx, n, g, LAM_DTYPE_F32, w, out, NULL));
  tu_assert_hidden("fractional f32 greys", n, g, LAM_DTYPE_F32, w, out);
  free(g);
  free(w);
  free(out);
}

/* grey+1, w+1, out+1 inside larger buffers: no alignment beyond the element's own may be assumed. */
static void test_misaligned(void **state) {
  (void)state;
  static const size_t sizes[] = {1, 3, 4, 5, 7, 17, 1000003};
  for (int d = 0; d < 2; d++)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      tu_case c = base_case(sizes[i], (lam_dtype)d);
      c.lead = 1;
      tu_run_hidden(g_ctx, &c);
    }
}

/* out == w is allowed (the header says so): the result replaces the weights. */
static void test_inplace(void **state) {
  (void)state;
  static const size_t sizes[] = {1, 3, 5, 17, 1000003};
  for (int d = 0; d < 2; d++)
    for (size_t lead = 0; lead < 2; lead++)
      for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        tu_case c = base_case(sizes[i], (lam_dtype)d);
        c.inplace = 1;
        c.lead = lead;
        tu_run_hidden(g_ctx, &c);
      }
}

/* Arrays from lam_host_alloc and lam_mem_alloc (plain host memory on the CPU), alone and mixed. */
static void test_library_memory(void **state) {
  (void)state;
  static const tu_mem mix[][3] = {{TU_PINNED, TU_PINNED, TU_PINNED},
                                  {TU_BACKEND, TU_BACKEND, TU_BACKEND},
                                  {TU_PINNED, TU_BACKEND, TU_PAGEABLE}};
  static const size_t sizes[] = {17, 1000003};
  for (int d = 0; d < 2; d++)
    for (size_t m = 0; m < sizeof mix / sizeof mix[0]; m++)
      for (size_t i = 0; i < 2; i++) {
        tu_case c = base_case(sizes[i], (lam_dtype)d);
        c.grey_mem = mix[m][0];
        c.w_mem = mix[m][1];
        c.out_mem = mix[m][2];
        tu_run_hidden(g_ctx, &c);
      }
}

/* normalize -> weigh -> tanh over backend memory gives the fused layer's result (<= 1e-6). */
static void test_ops_chain(void **state) {
  (void)state;
  static const size_t sizes[] = {0, 1, 3, 5, 7, 17, 1000003};
  for (int d = 0; d < 2; d++)
    for (size_t lead = 0; lead < 2; lead++)
      for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        tu_run_ops_chain(g_ctx, sizes[i], (lam_dtype)d, lead, 0);
}

/* lam_tanh alone over [-20, 20] and special values (testutil.h: tu_check_tanh_values). */
static void test_tanh_values(void **state) {
  (void)state;
  tu_check_tanh_values(g_ctx);
}

/* The timing struct is filled in: every field starts poisoned (negative) and must come back sane.
 * On the CPU the host path is one piece (the header: chunks is 1 for CPU). */
static void test_timing(void **state) {
  (void)state;
  for (int d = 0; d < 2; d++) {
    tu_case c = base_case(1000003, (lam_dtype)d);
    lam_hidden_timing t = tu_run_hidden(g_ctx, &c);
    print_message("cpu %s timing: total %.3f ms, kernel %.3f ms, chunks %d\n", tu_dt_name((lam_dtype)d), t.total,
                  t.kernel, t.chunks);
    assert_true(isfinite(t.total) && t.total >= 0.0);
    assert_true(t.chunks >= 1);
    assert_int_equal(t.chunks, 1);
    assert_true(isfinite(t.kernel) && t.kernel >= 0.0);
    assert_true(t.staging >= 0.0 && t.copy_in >= 0.0 && t.copy_out >= 0.0);
  }
}

/* An explicitly chosen CPU context says so, names itself, and has no AUTO reason. */
static void test_ctx_identity(void **state) {
  (void)state;
  assert_int_equal(lam_ctx_device(g_ctx), LAM_DEVICE_CPU);
  const char *name = lam_ctx_device_name(g_ctx);
  assert_non_null(name);
  assert_true(strlen(name) > 0);
  const char *why = lam_ctx_choice_reason(g_ctx);
  assert_non_null(why);
  assert_string_equal(why, "");
}

int main(void) {
  lam_status st = lam_ctx_create(&g_ctx, LAM_DEVICE_CPU);
  if (st != LAM_OK || !g_ctx) {
    fprintf(stderr, "lam_ctx_create(CPU) failed: %s: %s\n", lam_status_str(st), lam_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ctx_identity),  cmocka_unit_test(test_sizes_f32),
      cmocka_unit_test(test_sizes_u8),      cmocka_unit_test(test_wide_weights),
      cmocka_unit_test(test_edge_values),   cmocka_unit_test(test_fractional_greys),
      cmocka_unit_test(test_misaligned),    cmocka_unit_test(test_inplace),
      cmocka_unit_test(test_library_memory), cmocka_unit_test(test_ops_chain),
      cmocka_unit_test(test_tanh_values),   cmocka_unit_test(test_timing),
  };
  int failed = TU_RUN_GROUP("hidden_cpu", tests, NULL, NULL);
  lam_ctx_free(g_ctx);
  return failed ? 1 : 0;
}
