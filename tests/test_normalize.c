/* test_normalize.c — lam_normalize_images: uint8 images and video clips, NCHW or NHWC, to float32 NCHW
 * with per-channel mean and std, every element against a float64 reference; and its bad inputs.
 * Also lam_model_forward_u8 against lam_model_forward. Run with the argument "cuda" it checks the CUDA backend instead (CTest label gpu; exit 77, skipped,
 * without a device). */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "testutil.h"

static lam_device g_dev = LAM_DEVICE_CPU;
static lam_ctx *g_ctx;

/* One case: n images of c x h x w, in the given layout, through backend memory; the error against
 * ((double)x / 255 - mean) / std must be <= 1e-6 relative to the output's scale (float32), plus half a
 * bfloat16 ulp (at most 2^-8 of the value) for bf16 output. */
static void check_case(size_t n, int c, int h, int w, lam_layout layout, lam_dtype odt) {
  const int bf = odt == LAM_DTYPE_BF16;
  size_t total = n * (size_t)c * h * w;
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(total * 7 + (size_t)layout));
  uint8_t *in = malloc(total ? total : 1);
  float *out = malloc((total ? total : 1) * sizeof(float)), mean[LAM_NORMALIZE_MAX_CHANNELS], sd[LAM_NORMALIZE_MAX_CHANNELS];
  assert_true(in && out);
  for (size_t i = 0; i < total; i++) in[i] = (uint8_t)(tu_next(&r) >> 56);
  for (int i = 0; i < c; i++) mean[i] = (float)tu_uniform(&r, 0.2, 0.6), sd[i] = (float)tu_uniform(&r, 0.1, 0.4);
  tu_fill_nan(out, total);
  void *d_in = NULL, *d_out = NULL;
  TU_OK(lam_mem_alloc(g_ctx, &d_in, total));
  TU_OK(lam_mem_alloc(g_ctx, &d_out, total * sizeof(float)));
  TU_OK(lam_mem_upload(g_ctx, d_in, in, total));
  TU_OK(lam_mem_upload(g_ctx, d_out, out, total * sizeof(float))); /* poisoned: an unwritten element fails */
  TU_OK(lam_normalize_images(g_ctx, n, c, h, w, layout, d_in, mean, sd, odt, d_out));
  TU_OK(lam_ctx_sync(g_ctx));
  TU_OK(lam_mem_download(g_ctx, out, d_out, total * sizeof(float)));
  if (bf) /* widen the bf16 values in place, from the end, so each is read before it is overwritten */
    for (size_t i = total; i-- > 0;) {
      uint16_t hb;
      memcpy(&hb, (char *)out + 2 * i, 2);
      uint32_t u = (uint32_t)hb << 16;
      memcpy(&out[i], &u, 4);
    }
  double worst = 0;
  size_t bad = 0, plane = (size_t)h * w;
  for (size_t k = 0; k < n; k++)
    for (int ch = 0; ch < c; ch++)
      for (size_t p = 0; p < plane; p++) {
        size_t o = (k * c + ch) * plane + p;
        size_t s = layout == LAM_LAYOUT_NHWC ? (k * plane + p) * c + ch : o;
        double want = ((double)in[s] / 255.0 - mean[ch]) / sd[ch];
        double e = fabs((double)out[o] - want) / fmax(1.0, fabs(want)); /* float32 rounding: ~1e-7 */
        double tol = 1e-6 + (bf ? 0x1p-8 * fabs(want) / fmax(1.0, fabs(want)) : 0);
        if (!(e <= tol)) {
          if (bad++ < 3) print_error("n %zu c %d %dx%d %s: out[%zu] = %.9g, want %.9g\n", n, c, h, w,
                                     layout == LAM_LAYOUT_NHWC ? "NHWC" : "NCHW", o, out[o], want);
        }
        if (e > worst) worst = e;
      }
  print_message("  normalize %zu x %d x %d x %d %s -> %s: max rel err %.2e\n", n, c, h, w,
                layout == LAM_LAYOUT_NHWC ? "NHWC" : "NCHW", lam_dtype_str(odt), worst);
  assert_int_equal(bad, 0);
  TU_OK(lam_mem_free(g_ctx, d_in));
  TU_OK(lam_mem_free(g_ctx, d_out));
  free(in);
  free(out);
}

static void test_shapes(void **state) {
  (void)state;
  for (int odt = 0; odt < 2; odt++)
    for (int layout = 0; layout < 2; layout++) {
      lam_layout l = (lam_layout)layout;
      lam_dtype t = odt ? LAM_DTYPE_BF16 : LAM_DTYPE_F32;
      check_case(1, 1, 1, 1, l, t);
      check_case(7, 1, 28, 28, l, t);    /* MNIST-like */
      check_case(3, 3, 17, 23, l, t);    /* RGB, odd sizes */
      check_case(2, 3, 48, 64, l, t);    /* a small image batch */
      check_case(2, 3, 8 * 28, 28, l, t); /* 2 clips (N, T = 8, H, W, C) -> (N, C, T, H, W): h = T * H */
      check_case(2, 64, 5, 3, l, t);     /* the most channels */
    }
}

static void test_bad_inputs(void **state) {
  (void)state;
  uint8_t in[16] = {0};
  float out[16], mean[2] = {0.5f, 0.5f}, sd[2] = {0.5f, 0.0f};
  void *d_in, *d_out;
  TU_OK(lam_mem_alloc(g_ctx, &d_in, sizeof in));
  TU_OK(lam_mem_alloc(g_ctx, &d_out, sizeof out));
  struct {
    lam_status st;
    const char *word;
  } r[9];
  r[0].st = lam_normalize_images(g_ctx, 1, 0, 2, 2, LAM_LAYOUT_NCHW, d_in, mean, sd, LAM_DTYPE_F32, d_out), r[0].word = "shape";
  r[1].st = lam_normalize_images(g_ctx, 1, 65, 2, 2, LAM_LAYOUT_NCHW, d_in, mean, sd, LAM_DTYPE_F32, d_out), r[1].word = "shape";
  r[2].st = lam_normalize_images(g_ctx, 1, 2, 2, 2, LAM_LAYOUT_NCHW, d_in, mean, sd, LAM_DTYPE_F32, d_out), r[2].word = "std[1]";
  r[3].st = lam_normalize_images(g_ctx, 1, 1, 2, 2, (lam_layout)7, d_in, mean, sd, LAM_DTYPE_F32, d_out), r[3].word = "layout";
  r[4].st = lam_normalize_images(g_ctx, 1, 1, 2, 2, LAM_LAYOUT_NCHW, NULL, mean, sd, LAM_DTYPE_F32, d_out), r[4].word = "in";
  r[5].st = lam_normalize_images(g_ctx, 1, 1, 2, 2, LAM_LAYOUT_NCHW, d_in, NULL, sd, LAM_DTYPE_F32, d_out), r[5].word = "mean";
  r[6].st = lam_normalize_images(g_ctx, (size_t)1 << 40, 1, 2, 2, LAM_LAYOUT_NCHW, d_in, mean, sd, LAM_DTYPE_F32, d_out), r[6].word = "too many";
  r[7].st = lam_normalize_images(NULL, 1, 1, 2, 2, LAM_LAYOUT_NCHW, d_in, mean, sd, LAM_DTYPE_F32, d_out), r[7].word = "ctx";
  r[8].st = lam_normalize_images(g_ctx, 1, 1, 2, 2, LAM_LAYOUT_NCHW, d_in, mean, sd, LAM_DTYPE_F16, d_out),
  r[8].word = "out_dtype f16";
  for (int i = 0; i < 9; i++) assert_int_equal(r[i].st, LAM_ERR_INVALID_ARG);
  /* each message names what is wrong (checked right after the call) */
  assert_int_equal(lam_normalize_images(g_ctx, 1, 2, 2, 2, LAM_LAYOUT_NCHW, d_in, mean, sd, LAM_DTYPE_F32, d_out), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "std[1]"));
  assert_int_equal(lam_normalize_images(g_ctx, 1, 0, 2, 2, LAM_LAYOUT_NCHW, d_in, mean, sd, LAM_DTYPE_F32, d_out), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "shape"));
  TU_OK(lam_normalize_images(g_ctx, 0, 1, 2, 2, LAM_LAYOUT_NCHW, NULL, NULL, NULL, LAM_DTYPE_F32, NULL)); /* n = 0: nothing to do */
  TU_OK(lam_mem_free(g_ctx, d_in));
  TU_OK(lam_mem_free(g_ctx, d_out));
}

/* lam_bench_transfer: a small case of each method runs and checks itself; bad cases name the problem. */
static void test_bench_transfer(void **state) {
  (void)state;
  lam_xfer_result r;
  const lam_xfer_method methods[] = {LAM_XFER_COPY, LAM_XFER_CPU_NORMALIZE, LAM_XFER_GPU_NORMALIZE};
  for (int k = 0; k < 3; k++) {
    lam_xfer_case c = {.n = 5, .c = 3, .h = 7, .w = 9, .layout = LAM_LAYOUT_NHWC, .method = methods[k],
                       .dtype = LAM_DTYPE_F32, .pinned = 1, .reps = 3, .warmup = 1};
    TU_OK(lam_bench_transfer(g_ctx, &c, &r));
    assert_int_equal(r.reps, 3);
    assert_int_equal(r.bytes_host, methods[k] == LAM_XFER_GPU_NORMALIZE ? 5 * 3 * 7 * 9 : 5 * 3 * 7 * 9 * 4);
    assert_true(r.median_us >= 0 && r.p10_us <= r.median_us && r.median_us <= r.p90_us);
    assert_int_equal(r.copies_on_host, g_dev == LAM_DEVICE_CPU);
  }
  lam_xfer_case ok = {.n = 2, .c = 1, .h = 4, .w = 4, .method = LAM_XFER_CPU_NORMALIZE, .dtype = LAM_DTYPE_F32, .reps = 1};
  lam_xfer_case bad = ok;
  bad.dtype = LAM_DTYPE_BF16; /* the host writes f32 only */
  assert_int_equal(lam_bench_transfer(g_ctx, &bad, &r), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "f32"));
  bad = ok, bad.method = LAM_XFER_GPU_NORMALIZE, bad.dtype = LAM_DTYPE_F16;
  assert_int_equal(lam_bench_transfer(g_ctx, &bad, &r), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "f16"));
  bad = ok, bad.n = 0;
  assert_int_equal(lam_bench_transfer(g_ctx, &bad, &r), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "batch"));
  bad = ok, bad.reps = 0;
  assert_int_equal(lam_bench_transfer(g_ctx, &bad, &r), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "reps"));
  assert_int_equal(lam_bench_transfer(g_ctx, NULL, &r), LAM_ERR_INVALID_ARG);
}

/* lam_model_forward_u8 gives the logits of lam_model_forward on the images normalized as the trainer's
 * gather normalizes them ((float)u * (1 / (255 std)) + (-mean / std), in float), for a model of 3 channels
 * with its own normalization and one with a class per pixel; in NHWC too (lam_model_options.layout). Within 1e-5 of
 * the logits' scale: the gather may fuse its multiply-add (an fma, one rounding) where this test rounds
 * twice, an ulp of the input; a wrong normalization or layout is off by far more. */
static void test_forward_u8(void **state) {
  (void)state;
  static const char *const specs[2] = {"conv 6 3 pad 1, bn, relu, maxpool 2, flatten, dense 4",
                                       "conv 5 3 pad 1, relu, conv 3 1"};
  for (int layout = 0; layout < 2; layout++)
    for (int k = 0; k < 2; k++) {
      lam_model_options mo = lam_model_options_default();
      mo.layout = layout ? 2 : 1; /* NHWC, NCHW */
      TU_OK(lam_ctx_set_model_options(g_ctx, &mo));
      lam_model *m;
      TU_OK(lam_model_create(g_ctx, specs[k], 3, 6, 8, 5, &m));
      mo = lam_model_options_default();
      TU_OK(lam_ctx_set_model_options(g_ctx, &mo));
      const float mean[3] = {0.2f, 0.5f, 0.7f}, sd[3] = {0.3f, 0.25f, 0.4f};
      TU_OK(lam_model_set_normalization(m, 3, mean, sd));
      enum { B = 5, P = 6 * 8, S = 3 * P };
      uint8_t u[B * S];
      float x[B * S];
      tu_rng r;
      tu_rng_seed(&r, tu_case_seed(40 + (uint64_t)k + 2 * (uint64_t)layout));
      for (int i = 0; i < B * S; i++) {
        u[i] = (uint8_t)(tu_next(&r) >> 56);
        const int c = i / P % 3;
        const float a = 1.0f / (255.0f * sd[c]), kk = -mean[c] / sd[c];
        x[i] = (float)u[i] * a + kk;
      }
      int K, OH, OW;
      TU_OK(lam_model_output_shape(m, &K, &OH, &OW));
      const size_t n = (size_t)B * K * OH * OW;
      float *l1 = malloc(n * sizeof *l1), *l2 = malloc(n * sizeof *l2);
      assert_true(l1 && l2);
      TU_OK(lam_model_forward(m, B, x, l1));
      TU_OK(lam_model_forward_u8(m, B, u, l2));
      double big = 0, worst = 0;
      for (size_t i = 0; i < n; i++) big = fmax(big, fabs(l1[i])), worst = fmax(worst, fabs((double)l1[i] - l2[i]));
      if (!(worst <= 1e-5 * big)) fail_msg("'%s': forward_u8 is %.3g from forward (scale %.3g)", specs[k], worst, big);
      assert_true(worst > 0 || big > 0); /* not all zero */
      free(l1), free(l2);
      lam_model_free(m);
    }
  TU_EXPECT_STATUS(lam_model_forward_u8(NULL, 1, (const uint8_t *)"", NULL), LAM_ERR_INVALID_ARG);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "cuda")) {
    const char *why = NULL;
    if (lam_cuda_device_count(&why) == 0) {
      printf("test_normalize cuda: no CUDA device (%s): skipping\n", why ? why : "none");
      return 77;
    }
    g_dev = LAM_DEVICE_CUDA;
  }
  if (lam_ctx_create(&g_ctx, g_dev) != LAM_OK) {
    fprintf(stderr, "test_normalize: %s\n", lam_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_shapes), cmocka_unit_test(test_bad_inputs),
                                     cmocka_unit_test(test_bench_transfer), cmocka_unit_test(test_forward_u8)};
  int failed = TU_RUN_GROUP(g_dev == LAM_DEVICE_CUDA ? "normalize_cuda" : "normalize", tests, NULL, NULL);
  lam_ctx_free(g_ctx);
  return failed ? 1 : 0;
}
