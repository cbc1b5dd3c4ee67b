/* test_fused.c — the fused conv -> relu -> maxpool step against the plain ops it replaces, on fresh
 * random inputs, for models with the pattern (and one where the pool's windows overlap, which stays on
 * the plain path). Fusion after the GEMM (conv_pool_fwd/bwd, lam_model_options fuse 1) must give the plain path's
 * logits, loss, gradients and parameters after optimizer steps bit for bit; the direct first layer
 * (conv_pool_direct_fwd/bwd, the default) sums its taps in another order than the GEMM, so its logits,
 * loss and first gradients must agree within float rounding (1e-5 relative to the tensor's scale). The plain
 * path is the same im2col + GEMM (LAMINA_CONV=im2col), not the backend's conv2d (cuDNN: other arithmetic).
 * Run with "cuda" it checks the CUDA backend (CTest label gpu; exit 77 without a device). */
#include "testutil.h"

static lam_device g_dev = LAM_DEVICE_CPU;
static lam_ctx *g_ctx;

typedef struct fcase {
  const char *spec;
  int c, h, w, batch;
} fcase;

static const fcase k_cases[] = {
    {"conv 4 3, relu, maxpool 2, flatten, dense 10", 1, 8, 8, 5},
    {"cnn", 1, 28, 28, 7},                                                  /* the reference model */
    {"conv 6 3 pad 1, relu, maxpool 3, conv 5 2, relu, maxpool 2, flatten, dense 3", 2, 11, 13, 4}, /* odd sizes */
    {"conv 4 3, relu, maxpool 3 stride 2, flatten, dense 10", 1, 9, 9, 3}, /* overlapping windows: plain */
    {"conv 5 3 pad 1, relu, maxpool 2, flatten, dense 4", 1, 9, 10, 6},   /* a padded first layer */
};

/* Runs 3 steps of Adam on the same batches; returns logits and gradients of the first batch, the last
 * loss and the final parameters. fuse: lam_model_options' fusion level (0 to 2); a conv on its own as im2col +
 * GEMM, the fused block's arithmetic. */
static void run(const fcase *fc, int fuse, float *logits, float *loss, float *params, float *grads, size_t np) {
  lam_model_options mo = lam_model_options_default();
  mo.fuse = fuse, mo.conv_im2col = 1;
  TU_OK(lam_ctx_set_model_options(g_ctx, &mo));
  lam_model *m;
  TU_OK(lam_model_create(g_ctx, fc->spec, fc->c, fc->h, fc->w, 3, &m));
  assert_int_equal(lam_model_param_count(m), np);
  size_t in = (size_t)fc->batch * fc->c * fc->h * fc->w;
  float *x = malloc(in * sizeof *x);
  uint8_t *y = malloc((size_t)fc->batch);
  assert_true(x && y);
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(in));
  int classes = lam_model_outputs(m);
  lam_opt opt = lam_opt_default(LAM_OPT_ADAM);
  for (int step = 0; step < 3; step++) {
    for (size_t i = 0; i < in; i++) x[i] = (float)tu_uniform(&r, -1, 1);
    for (int i = 0; i < fc->batch; i++) y[i] = (uint8_t)(tu_next(&r) % (uint64_t)classes);
    if (step == 0) TU_OK(lam_model_forward(m, fc->batch, x, logits));
    TU_OK(lam_model_loss_backward(m, fc->batch, x, y, loss));
    if (step == 0) TU_OK(lam_model_grads_get(m, grads, np));
    TU_OK(lam_model_step(m, &opt));
  }
  TU_OK(lam_model_params_get(m, params, np));
  lam_model_free(m);
  free(x);
  free(y);
}

/* Largest |a - b| over the tensor, against 1e-5 of its largest |b|. */
static int close_to(const char *what, const float *a, const float *b, size_t n) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
  for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
  int ok = worst <= 1e-5 * fmax(scale, 1e-3);
  if (!ok) print_error("  %s: max diff %.3g against scale %.3g\n", what, worst, scale);
  return ok;
}

static void test_fused_equals_plain(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
    const fcase *fc = &k_cases[k];
    lam_model *probe;
    TU_OK(lam_model_create(g_ctx, fc->spec, fc->c, fc->h, fc->w, 3, &probe));
    size_t np = lam_model_param_count(probe), nl = (size_t)fc->batch * lam_model_outputs(probe);
    lam_model_free(probe);
    float *p[3], *g[3], *lg[3], loss[3];
    for (int f = 0; f < 3; f++) {
      p[f] = malloc(np * sizeof(float));
      g[f] = malloc(np * sizeof(float));
      lg[f] = malloc(nl * sizeof(float));
      assert_true(p[f] && g[f] && lg[f]);
      run(fc, f, lg[f], &loss[f], p[f], g[f], np);
    }
    /* after the GEMM: bit for bit, through three optimizer steps */
    assert_memory_equal(lg[0], lg[1], nl * sizeof(float));
    assert_true(loss[0] == loss[1]);
    assert_memory_equal(g[0], g[1], np * sizeof(float));
    assert_memory_equal(p[0], p[1], np * sizeof(float));
    /* direct first layer: the first step within rounding */
    int same = !memcmp(lg[0], lg[2], nl * sizeof(float));
    assert_true(close_to("logits", lg[2], lg[0], nl));
    assert_true(close_to("gradients", g[2], g[0], np));
    print_message("  %s (%dx%dx%d, batch %d): after-GEMM fusion = plain bit for bit; direct %s\n", fc->spec, fc->c,
                  fc->h, fc->w, fc->batch, same ? "identical (not used here)" : "within 1e-5");
    for (int f = 0; f < 3; f++) free(p[f]), free(g[f]), free(lg[f]);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "cuda")) {
    const char *why = NULL;
    if (lam_cuda_device_count(&why) == 0) {
      printf("test_fused cuda: no CUDA device (%s): skipping\n", why ? why : "none");
      return 77;
    }
    g_dev = LAM_DEVICE_CUDA;
  }
  if (lam_ctx_create(&g_ctx, g_dev) != LAM_OK) {
    fprintf(stderr, "test_fused: %s\n", lam_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_fused_equals_plain)};
  int failed = TU_RUN_GROUP(g_dev == LAM_DEVICE_CUDA ? "fused_cuda" : "fused", tests, NULL, NULL);
  lam_ctx_free(g_ctx);
  return failed ? 1 : 0;
}
