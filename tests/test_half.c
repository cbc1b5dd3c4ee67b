/* test_half.c — the 16-bit precisions, bf16 and fp16: GEMM operands rounded to bfloat16 or IEEE half, sums in fp32,
 * fp32 master weights. The CPU emulates them (same rounding, no speed), which makes the CPU the oracle for the GPU's
 * 16-bit paths, whose convs keep their im2col and column gradient as 16-bit floats. Every case runs in each of the
 * two (g_p).
 *
 * On the CPU: the precision moves the logits and gradients away from fp32 (the rounding is really applied) by a
 * 16-bit-sized amount (below 5% of each tensor's scale), and training steps run. With "cuda" (CTest label
 * gpu; exit 77 without a device): the CUDA backend in the precision, same parameters and inputs as the CPU in it,
 * with fusion after the GEMM only (lam_model_options fuse 1, so both run every conv through im2col and a
 * GEMM): logits, loss and the last layer's gradients within 1e-4 of their scale (both round the same
 * fp32 values; only the order of summation differs, and values that sit on a rounding boundary; seen
 * on the H200 in bf16: ~1e-6, against 2e-3 to 4e-3 between bf16 and fp32), and closer to the CPU's than
 * fp32 is — so the GPU did round. Earlier layers' gradients pass through
 * relu and max-pool kinks, where the two backends may take different sides: compared at 5e-2. Then the
 * default path (direct fp32 first layer) trains: loss falls over a few steps.
 * Also: "bf16" and "fp16" parse, a misspelling is unknown. */
#include "testutil.h"

static lam_device g_devkind = LAM_DEVICE_CPU;
static lam_ctx *g_cpu, *g_dev;
static lam_precision g_p = LAM_PRECISION_BF16; /* the 16-bit precision under test */
#define PNAME lam_precision_str(g_p)

typedef struct bcase {
  const char *spec;
  int c, h, w, batch;
  size_t tail; /* parameters of the last (dense) layer: weights and bias */
} bcase;

static const bcase k_cases[] = {
    {"cnn", 1, 28, 28, 8, 1600 * 10 + 10},
    {"conv 6 3 pad 1, relu, maxpool 3, conv 5 2 stride 2, tanh, flatten, dense 3", 2, 11, 13, 4, 10 * 3 + 3},
    {"mlp", 1, 28, 28, 8, 256 * 10 + 10},
};

typedef struct result {
  float *logits, *grads, loss;
} result;

/* One forward and backward of batch 0 in precision p (fuse: the fusion level of lam_model_options, or NULL for the
 * default; layout: "nchw" or "nhwc", or NULL for the default), from the parameters params (np of them) on inputs
 * drawn from seed. */
static void run_in(lam_ctx *ctx, const bcase *bc, lam_precision p, const char *fuse, const char *layout,
                   const float *params, size_t np, uint64_t seed, result *r) {
  lam_model_options mo = lam_model_options_default();
  if (fuse) mo.fuse = atoi(fuse);
  if (layout) mo.layout = !strcmp(layout, "nhwc") ? 2 : 1;
  TU_OK(lam_ctx_set_model_options(ctx, &mo));
  TU_OK(lam_ctx_set_precision(ctx, p));
  lam_model *m;
  TU_OK(lam_model_create(ctx, bc->spec, bc->c, bc->h, bc->w, 3, &m));
  assert_int_equal(lam_model_param_count(m), np);
  TU_OK(lam_model_params_set(m, params, np));
  size_t in = (size_t)bc->batch * bc->c * bc->h * bc->w;
  float *x = malloc(in * sizeof *x);
  uint8_t *y = malloc((size_t)bc->batch);
  assert_true(x && y);
  tu_rng rng;
  tu_rng_seed(&rng, seed);
  for (size_t i = 0; i < in; i++) x[i] = (float)tu_uniform(&rng, -1, 1);
  for (int i = 0; i < bc->batch; i++) y[i] = (uint8_t)(tu_next(&rng) % (uint64_t)lam_model_outputs(m));
  TU_OK(lam_model_forward(m, bc->batch, x, r->logits));
  TU_OK(lam_model_loss_backward(m, bc->batch, x, y, &r->loss));
  TU_OK(lam_model_grads_get(m, r->grads, np));
  lam_model_free(m);
  free(x);
  free(y);
  TU_OK(lam_ctx_set_precision(ctx, LAM_PRECISION_FP32));
  mo = lam_model_options_default();
  TU_OK(lam_ctx_set_model_options(ctx, &mo));
}
/* In NCHW: the precision's rounded GEMM operands on float32 activations, as this test was written for (the
 * CUDA backend's default puts a model with a conv of its own in NHWC, whose bf16 activations are bfloat16:
 * test_half_nhwc). */
static void run(lam_ctx *ctx, const bcase *bc, lam_precision p, const char *fuse, const float *params, size_t np,
                uint64_t seed, result *r) {
  run_in(ctx, bc, p, fuse, "nchw", params, np, seed, r);
}

/* The GPU against the CPU in the same precision, where both round the same fp32 values and only the order of sums
 * differs: a value on a rounding boundary may land one unit apart, and the layers after carry it. bf16's unit is
 * 2^-8 and such flips are rare enough that 1e-4 holds (seen on the H200: ~1e-6); fp16's is 2^-11 and, 8 times finer,
 * flips 8 times as often: 1e-3, two of its units (seen: up to 3.6e-4 on the mlp's last gradients). */
static double exact_tol(void) { return g_p == LAM_PRECISION_FP16 ? 1e-3 : 1e-4; }
/* That the GPU really rounded: in bf16 it is nearer the CPU's bf16 (d) than its own fp32 is (d32); fp16 is so near
 * fp32 that a flip or two weighs as much as the rounding, so there the GPU's fp16 must differ from its fp32
 * (d_own, beyond fp32's reorderings, ~1e-6). */
static int rounded(double d, double d32, double d_own) {
  if (g_p == LAM_PRECISION_FP16) return d_own > 2e-5;
  return d < d32;
}

/* max |a - b| over max |b|. */
static double rel_diff(const float *a, const float *b, size_t n) {
  double scale = 0, worst = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i])), worst = fmax(worst, fabs((double)a[i] - b[i]));
  return worst / fmax(scale, 1e-12);
}

static void alloc_result(result *r, size_t nl, size_t np) {
  r->logits = malloc(nl * sizeof(float));
  r->grads = malloc(np * sizeof(float));
  assert_true(r->logits && r->grads);
}
static void free_result(result *r) { free(r->logits), free(r->grads); }

/* The case's parameters as lam_model_create draws them (seed 3), and its sizes. */
static float *case_params(const bcase *bc, size_t *np, size_t *nl) {
  lam_model *m;
  TU_OK(lam_model_create(g_cpu, bc->spec, bc->c, bc->h, bc->w, 3, &m));
  *np = lam_model_param_count(m);
  *nl = (size_t)bc->batch * lam_model_outputs(m);
  float *p = malloc(*np * sizeof *p);
  assert_non_null(p);
  TU_OK(lam_model_params_get(m, p, *np));
  lam_model_free(m);
  return p;
}

static void test_half_cpu_rounds(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
    const bcase *bc = &k_cases[k];
    size_t np, nl;
    float *p = case_params(bc, &np, &nl);
    uint64_t seed = tu_case_seed(100 + k);
    result f, b;
    alloc_result(&f, nl, np);
    alloc_result(&b, nl, np);
    run(g_cpu, bc, LAM_PRECISION_FP32, NULL, p, np, seed, &f);
    run(g_cpu, bc, g_p, NULL, p, np, seed, &b);
    double dl = rel_diff(b.logits, f.logits, nl), dg = rel_diff(b.grads + np - bc->tail, f.grads + np - bc->tail, bc->tail);
    print_message("  cpu %s: %s vs fp32: logits %.2e, last layer's gradients %.2e of scale; loss %.6f vs %.6f\n",
                  bc->spec, PNAME, dl, dg, b.loss, f.loss);
    assert_true(dl > 1e-5);  /* rounded: fp32 reorderings alone stay near 1e-6 */
    assert_true(dl < 5e-2);  /* by bf16's 2^-9, not broken */
    assert_true(dg < 5e-2);
    assert_true(fabs(b.loss - f.loss) < 5e-2 * fabs(f.loss));
    free_result(&f), free_result(&b), free(p);
  }
}

static void test_half_cuda_matches_cpu(void **state) {
  (void)state;
  if (!g_dev) skip();
  for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
    const bcase *bc = &k_cases[k];
    size_t np, nl;
    float *p = case_params(bc, &np, &nl);
    uint64_t seed = tu_case_seed(200 + k);
    result cpu, dev, dev32;
    alloc_result(&cpu, nl, np);
    alloc_result(&dev, nl, np);
    alloc_result(&dev32, nl, np);
    run(g_cpu, bc, g_p, "1", p, np, seed, &cpu);
    run(g_dev, bc, g_p, "1", p, np, seed, &dev);
    run(g_dev, bc, LAM_PRECISION_FP32, "1", p, np, seed, &dev32);
    size_t head = np - bc->tail;
    double dl = rel_diff(dev.logits, cpu.logits, nl), dt = rel_diff(dev.grads + head, cpu.grads + head, bc->tail);
    double dh = head ? rel_diff(dev.grads, cpu.grads, head) : 0, d32 = rel_diff(dev32.logits, cpu.logits, nl);
    print_message("  cuda %s: %s vs the cpu's: logits %.2e, last layer's gradients %.2e, earlier %.2e; "
                  "loss %.6f vs %.6f; cuda fp32 vs the cpu's %s: logits %.2e\n",
                  bc->spec, PNAME, dl, dt, dh, dev.loss, cpu.loss, PNAME, d32);
    const double tol = exact_tol();
    assert_true(dl <= tol);
    assert_true(dt <= tol);
    assert_true(dh <= 5e-2);
    assert_true(fabs(dev.loss - cpu.loss) <= tol * fabs(cpu.loss));
    assert_true(rounded(dl, d32, rel_diff(dev.logits, dev32.logits, nl)));
    free_result(&cpu), free_result(&dev), free_result(&dev32), free(p);
  }
}

/* NHWC, bfloat16 activations (the CUDA backend's default for models with a conv of their own): on the CPU
 * (its twins through float32: the same rounding points) bf16 moves the logits and gradients away from fp32 by
 * a bf16-sized amount — activations, not only operands, are rounded now, so more than in NCHW, still below 5%
 * of scale. With "cuda": the CUDA backend's NHWC kernels against that. Both round the same float32 values
 * where they store; the order of summation differs (cuDNN against im2col + GEMM), and a value that lands
 * near a rounding boundary may round to the neighbouring bfloat16 (2^-8 apart) on one backend, which the
 * layers after carry on: the logits and last layer's gradients are compared at 1e-2 of their scale and must be
 * nearer the CPU's bf16 than the device's fp32 is; earlier layers' gradients at 5e-2 (kinks, as above). */
static void test_half_nhwc(void **state) {
  (void)state;
  for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
    const bcase *bc = &k_cases[k];
    size_t np, nl;
    float *p = case_params(bc, &np, &nl);
    uint64_t seed = tu_case_seed(400 + k);
    result f, b, dev, dev32;
    alloc_result(&f, nl, np), alloc_result(&b, nl, np);
    run_in(g_cpu, bc, LAM_PRECISION_FP32, NULL, "nhwc", p, np, seed, &f);
    run_in(g_cpu, bc, g_p, NULL, "nhwc", p, np, seed, &b);
    double dl = rel_diff(b.logits, f.logits, nl), dg = rel_diff(b.grads + np - bc->tail, f.grads + np - bc->tail, bc->tail);
    print_message("  cpu nhwc %s: %s vs fp32: logits %.2e, last layer's gradients %.2e of scale; loss %.6f vs %.6f\n",
                  bc->spec, PNAME, dl, dg, b.loss, f.loss);
    assert_true(dl > 1e-5 && dl < 5e-2 && dg < 5e-2);
    assert_true(fabs(b.loss - f.loss) < 5e-2 * fabs(f.loss));
    if (g_dev) {
      alloc_result(&dev, nl, np), alloc_result(&dev32, nl, np);
      run_in(g_dev, bc, g_p, NULL, "nhwc", p, np, seed, &dev);
      run_in(g_dev, bc, LAM_PRECISION_FP32, NULL, "nhwc", p, np, seed, &dev32);
      size_t head = np - bc->tail;
      double cl = rel_diff(dev.logits, b.logits, nl), ct = rel_diff(dev.grads + head, b.grads + head, bc->tail);
      double ch = head ? rel_diff(dev.grads, b.grads, head) : 0, d32 = rel_diff(dev32.logits, b.logits, nl);
      print_message("  cuda nhwc %s: %s vs the cpu's: logits %.2e, last layer's gradients %.2e, earlier %.2e; "
                    "cuda fp32 vs the cpu's: logits %.2e\n",
                    bc->spec, PNAME, cl, ct, ch, d32);
      assert_true(cl <= 1e-2 && ct <= 1e-2 && ch <= 5e-2);
      assert_true(fabs(dev.loss - b.loss) <= 1e-2 * fabs(b.loss));
      assert_true(rounded(cl, d32, rel_diff(dev.logits, dev32.logits, nl)));
      free_result(&dev), free_result(&dev32);
    }
    free_result(&f), free_result(&b), free(p);
  }
}

/* The reference CNN on the device's default path in bf16: a few Adam steps on one batch lower its loss. */
static void test_half_cuda_trains(void **state) {
  (void)state;
  if (!g_dev) skip();
  const bcase *bc = &k_cases[0];
  TU_OK(lam_ctx_set_precision(g_dev, g_p));
  lam_model *m;
  TU_OK(lam_model_create(g_dev, bc->spec, bc->c, bc->h, bc->w, 5, &m));
  int B = 32;
  size_t in = (size_t)B * 28 * 28;
  float *x = malloc(in * sizeof *x);
  uint8_t *y = malloc((size_t)B);
  assert_true(x && y);
  tu_rng rng;
  tu_rng_seed(&rng, tu_case_seed(300));
  for (size_t i = 0; i < in; i++) x[i] = (float)tu_uniform(&rng, -1, 1);
  for (int i = 0; i < B; i++) y[i] = (uint8_t)(tu_next(&rng) % 10);
  lam_opt opt = lam_opt_default(LAM_OPT_ADAM);
  float first = 0, loss = 0;
  for (int s = 0; s < 20; s++) {
    TU_OK(lam_model_loss_backward(m, B, x, y, &loss));
    if (!s) first = loss;
    TU_OK(lam_model_step(m, &opt));
  }
  print_message("  cuda cnn %s (direct fp32 first layer): loss %.4f -> %.4f over 20 steps on one batch\n", PNAME, first,
                loss);
  assert_true(isfinite(loss) && loss < 0.5f * first);
  lam_model_free(m);
  free(x);
  free(y);
  TU_OK(lam_ctx_set_precision(g_dev, LAM_PRECISION_FP32));
}

static void test_precision_names(void **state) {
  (void)state;
  lam_precision p = LAM_PRECISION_FP32;
  TU_OK(lam_precision_parse("bf16", &p));
  assert_int_equal(p, LAM_PRECISION_BF16);
  assert_string_equal(lam_precision_str(p), "bf16");
  TU_OK(lam_precision_parse("fp16", &p));
  assert_int_equal(p, LAM_PRECISION_FP16);
  assert_string_equal(lam_precision_str(p), "fp16");
  TU_EXPECT_STATUS(lam_precision_parse("bf17", &p), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "bf16") && strstr(lam_last_error(), "fp16"));
}

/* The fp16 trainer's loss scaling on a step whose gradients overflow for sure: a dense layer whose bias makes a wrong
 * class certain (p of the true one ~1e-13), at batch 1, so the loss's gradient is ~2^16 (1 - p) and rounds to -inf in
 * fp16 at the first scale. That step is skipped (the parameters stay as they were, bit for bit), the scale halves
 * and the skip is counted; at 2^15 the next step is taken. A checkpoint keeps the scaler and a resumed run continues it
 * exactly (the CPU: the same parameters as the run that never stopped). */
static void run_epoch(lam_trainer *t) {
  lam_epoch_stats es;
  TU_OK(lam_trainer_epoch(t, NULL, NULL, 0, &es));
}
static void test_fp16_loss_scale(void **state) {
  (void)state;
  lam_ctx *ctx = g_dev ? g_dev : g_cpu;
  TU_OK(lam_ctx_set_precision(ctx, LAM_PRECISION_FP16));
  enum { N = 1, S = 4 };
  uint8_t img[N * S * S], lab[N] = {0};
  for (int i = 0; i < N * S * S; i++) img[i] = (uint8_t)(37 * i + 11);
  lam_dataset d = {.n = N, .h = S, .w = S, .classes = 10, .images = img, .labels = lab};
  lam_model *m;
  TU_OK(lam_model_create(ctx, "flatten, dense 10", 1, S, S, 7, &m));
  const size_t np = lam_model_param_count(m);
  float *p0 = malloc(np * sizeof *p0), *p1 = malloc(np * sizeof *p1), *p2 = malloc(np * sizeof *p2);
  assert_true(p0 && p1 && p2);
  TU_OK(lam_model_params_get(m, p0, np));
  p0[np - 1] = 30.0f; /* class 9's bias: certain, and wrong */
  TU_OK(lam_model_params_set(m, p0, np));
  lam_opt opt = lam_opt_default(LAM_OPT_ADAM);
  lam_trainer *t;
  TU_OK(lam_trainer_create(m, &opt, 1, 5, &d, &t));
  double scale = -1;
  long skipped = -1;
  TU_OK(lam_trainer_loss_scale(t, &scale, &skipped));
  assert_true(scale == 0 && skipped == 0); /* nothing scaled yet */
  run_epoch(t);
  TU_OK(lam_trainer_loss_scale(t, &scale, &skipped));
  TU_OK(lam_model_params_get(m, p1, np));
  print_message("  %s fp16: after the overflowing step, scale %g, %ld skipped\n", g_dev ? "cuda" : "cpu", scale, skipped);
  assert_true(scale == 32768.0 && skipped == 1);
  assert_memory_equal(p1, p0, np * sizeof *p0); /* skipped: not a bit moved */
  char dir[256], path[300];
  assert_int_equal(tu_tmpdir(dir, sizeof dir, "half"), 0);
  snprintf(path, sizeof path, "%s/t.ckpt", dir);
  TU_OK(lam_checkpoint_save(path, m, t));
  run_epoch(t); /* at 2^15 the step is taken */
  TU_OK(lam_trainer_loss_scale(t, &scale, &skipped));
  TU_OK(lam_model_params_get(m, p1, np));
  assert_true(scale == 32768.0 && skipped == 1);
  assert_true(memcmp(p1, p0, np * sizeof *p0) != 0);
  for (size_t i = 0; i < np; i++) assert_true(isfinite(p1[i]));
  lam_model *m2;
  lam_trainer *t2;
  TU_OK(lam_checkpoint_load(ctx, path, &m2, &d, &t2));
  TU_OK(lam_trainer_loss_scale(t2, &scale, &skipped));
  assert_true(scale == 32768.0 && skipped == 1); /* the scaler came back */
  run_epoch(t2);
  TU_OK(lam_model_params_get(m2, p2, np));
  if (!g_dev) assert_memory_equal(p2, p1, np * sizeof *p1); /* resumed = never stopped */
  else
    for (size_t i = 0; i < np; i++) assert_true(fabsf(p2[i] - p1[i]) <= 1e-6f * (1.0f + fabsf(p1[i])));
  lam_trainer_free(t2), lam_model_free(m2), lam_trainer_free(t), lam_model_free(m);
  tu_rmdir_all(dir);
  free(p0), free(p1), free(p2);
  TU_OK(lam_ctx_set_precision(ctx, LAM_PRECISION_FP32));
}

/* Gradients that overflow fp16 at every scale down to the floor stop the run with an error: a last layer of weights
 * up to 4e4 makes the gradient the first layer's GEMM rounds to fp16 up to 8e4 even at scale 1 (fp16 ends at 65504;
 * the loss stays finite). Every step is skipped (the parameters stay as they were) and the epoch fails with LAM_ERR_DIVERGED,
 * naming fp16 and the lowest scale. */
static void test_fp16_overflow_at_the_floor(void **state) {
  (void)state;
  lam_ctx *ctx = g_dev ? g_dev : g_cpu;
  TU_OK(lam_ctx_set_precision(ctx, LAM_PRECISION_FP16));
  enum { N = 24, S = 4 };
  uint8_t img[N * S * S], lab[N];
  for (int i = 0; i < N * S * S; i++) img[i] = (uint8_t)(53 * i + 7);
  for (int i = 0; i < N; i++) lab[i] = 0;
  lam_dataset d = {.n = N, .h = S, .w = S, .classes = 10, .images = img, .labels = lab};
  lam_model *m;
  TU_OK(lam_model_create(ctx, "flatten, dense 16, dense 10", 1, S, S, 3, &m));
  const size_t np = lam_model_param_count(m), first = (size_t)16 * S * S + 16;
  float *p0 = malloc(np * sizeof *p0), *p1 = malloc(np * sizeof *p1);
  assert_true(p0 && p1);
  TU_OK(lam_model_params_get(m, p0, np));
  /* h = 1 (the first layer's weights 0, biases 1); class 0's weights -4e4, the others' 4e4, biases 0; every label 0:
   * the logits are -6.4e5 for class 0 and 6.4e5 for the rest, so the loss's gradient is -S for class 0 and S/9
   * for each other, and the first layer's gradient sum_k dy_k W_kj = 8e4 S: beyond fp16's 65504 at every S >= 1 */
  for (size_t i = 0; i < np; i++)
    p0[i] = i < (size_t)16 * S * S ? 0.0f : i < first ? 1.0f : i >= np - 10 ? 0.0f : (i - first) / 16 == 0 ? -4e4f : 4e4f;
  TU_OK(lam_model_params_set(m, p0, np));
  lam_opt opt = lam_opt_default(LAM_OPT_SGD);
  lam_trainer *t;
  TU_OK(lam_trainer_create(m, &opt, 1, 5, &d, &t));
  lam_epoch_stats es;
  TU_EXPECT_STATUS(lam_trainer_epoch(t, NULL, NULL, 0, &es), LAM_ERR_DIVERGED);
  print_message("  %s: %s\n", g_dev ? "cuda" : "cpu", lam_last_error());
  assert_non_null(strstr(lam_last_error(), "fp16"));
  assert_non_null(strstr(lam_last_error(), "loss scale 1"));
  double scale = 0;
  long skipped = 0;
  TU_OK(lam_trainer_loss_scale(t, &scale, &skipped));
  assert_true(scale == 1.0 && skipped == N); /* 16 halvings from 2^16, then the floor, and every step after */
  assert_non_null(strstr(lam_last_error(), "at step 17 of")); /* the first skipped at scale 1 */
  TU_OK(lam_model_params_get(m, p1, np));
  assert_memory_equal(p1, p0, np * sizeof *p0); /* no step was taken */
  lam_trainer_free(t), lam_model_free(m);
  free(p0), free(p1);
  TU_OK(lam_ctx_set_precision(ctx, LAM_PRECISION_FP32));
}

/* Runs spec for STEPS Adam steps on two batches in turn (x, y: STEPS batches of B images of C x S x S) with model
 * options mo, the losses into loss; returns how many nodes lam_model_nodes gave each stats value (0 to 3) after. */
enum { FV_STEPS = 20 };
/* FV_STEPS batches of B random images (C x S x S, uniform in [-1, 1)) and labels of 5 classes, from case seed. */
static void fused_batches(uint64_t seed, int B, int C, int S, float **x, uint8_t **y) {
  const size_t n = (size_t)FV_STEPS * B * C * S * S;
  tu_rng rng;
  *x = malloc(n * sizeof **x), *y = malloc((size_t)FV_STEPS * B);
  assert_true(*x && *y);
  tu_rng_seed(&rng, tu_case_seed(seed));
  for (size_t i = 0; i < n; i++) (*x)[i] = (float)tu_uniform(&rng, -1, 1);
  for (int i = 0; i < FV_STEPS * B; i++) (*y)[i] = (uint8_t)(tu_next(&rng) % 5);
}
static void fused_run(lam_ctx *ctx, const char *spec, lam_model_options mo, int B, int C, int S, const float *x,
                      const uint8_t *y, float *loss, int stats[4], int *pools) {
  TU_OK(lam_ctx_set_model_options(ctx, &mo));
  TU_OK(lam_ctx_set_precision(ctx, g_p));
  lam_model *m;
  TU_OK(lam_model_create(ctx, spec, C, S, S, 11, &m));
  lam_opt opt = lam_opt_default(LAM_OPT_ADAM);
  opt.lr = 1e-2f;
  for (int k = 0; k < FV_STEPS; k++) {
    const int at = k % 2; /* two batches in turn: the net learns them, so the losses fall */
    TU_OK(lam_model_loss_backward(m, B, x + (size_t)at * B * C * S * S, y + at * B, &loss[k]));
    TU_OK(lam_model_step(m, &opt));
  }
  lam_node_info nodes[32];
  int n = 0;
  TU_OK(lam_model_nodes(m, B, nodes, 32, &n, NULL));
  stats[0] = stats[1] = stats[2] = stats[3] = 0;
  for (int i = 0; i < n && i < 32; i++) stats[nodes[i].stats]++;
  if (pools) /* BatchNorms that run their activation and maxpool in one pass */
    for (int i = *pools = 0; i < n && i < 32; i++) *pools += nodes[i].fused == 2 && !strcmp(nodes[i].fusion, "bn_act_pool");
  lam_model_free(m);
}

/* The fused paths (BatchNorm + activation, BatchNorm + residual add + activation, and each conv -> bn pair's
 * statistics summed by the conv: lam_model_options conv_stats 2, here on every backend) against the plain ops
 * (fuse 0, conv_stats 0), in the precision under test with its 16-bit NHWC activations: 20 Adam steps on the
 * same batches give the same losses to the type's rounding (the fused pass keeps z and z + r in registers where the
 * plain ops round each to 16 bits: 2^-8 or 2^-11 relative a value, which 20 steps of training carry; cuDNN's
 * GenStats may sum y before its rounding). */
static void test_half_fused_vs_plain(void **state) {
  (void)state;
  lam_ctx *ctx = g_dev ? g_dev : g_cpu;
  const char *spec = "conv 8 3 pad 1 nobias, bn, r: relu, conv 8 3 pad 1 nobias, bn, relu, conv 8 3 pad 1 nobias, bn, "
                     "add @r, relu, gap, dense 5";
  enum { B = 8, C = 3, S = 8, STEPS = FV_STEPS };
  float loss[2][STEPS];
  float *x;
  uint8_t *y;
  fused_batches(700, B, C, S, &x, &y);
  int stats[2][4];
  for (int fused = 0; fused < 2; fused++) {
    lam_model_options mo = lam_model_options_default();
    mo.fuse = fused ? 3 : 0, mo.layout = 2, mo.conv_stats = fused ? 2 : 0;
    fused_run(ctx, spec, mo, B, C, S, x, y, loss[fused], stats[fused], NULL);
  }
  assert_int_equal(stats[0][1] + stats[0][2] + stats[0][3], 0);
  assert_int_equal(stats[1][1] + stats[1][2], 3); /* every conv sums its BatchNorm's statistics */
  assert_int_equal(stats[1][3], 3);
  if (!g_dev) assert_int_equal(stats[1][2], 0); /* the CPU: a pass after the conv */
  TU_OK(lam_ctx_set_precision(ctx, LAM_PRECISION_FP32));
  lam_model_options mo = lam_model_options_default();
  TU_OK(lam_ctx_set_model_options(ctx, &mo));
  const double tol = g_p == LAM_PRECISION_FP16 ? 1e-2 : 3e-2; /* seen on the CPU: 2.6e-3 and 2.7e-3 */
  double worst = 0;
  for (int k = 0; k < STEPS; k++) worst = fmax(worst, fabs((double)loss[1][k] - loss[0][k]) / fabs(loss[0][k]));
  print_message("  %s %s: fused against plain ops over %d Adam steps: losses %.4f -> %.4f and %.4f -> %.4f, worst %.2e "
                "relative (tolerance %.0e); %d of 3 convs summed their BatchNorm's statistics in their own kernel\n",
                g_dev ? "cuda" : "cpu", PNAME, STEPS, loss[0][0], loss[0][STEPS - 1], loss[1][0], loss[1][STEPS - 1],
                worst, tol, stats[1][2]);
  assert_true(worst <= tol);
  assert_true(loss[1][STEPS - 1] < 0.8f * loss[1][1]); /* and it trains (the same batch as step 1) */
  free(x), free(y);
}

/* BatchNorm + activation + maxpool in one pass (bn_act_pool: act(z) and its gradient never stored, the maxima a byte
 * each) against the plain ops (fuse 0), relu and gelu, even and odd sizes (7x7: a row and a column outside every
 * window), in the precision under test with its 16-bit NHWC activations: 20 Adam steps on the same batches give the
 * same losses to the type's rounding (the fused pass rounds act(z) once where the plain ops round z and then act(z);
 * for relu the two are the same value). */
static void test_half_bn_act_pool_vs_plain(void **state) {
  (void)state;
  lam_ctx *ctx = g_dev ? g_dev : g_cpu;
  const char *spec = "conv 16 3 pad 1 nobias, bn, relu, maxpool 2, conv 16 3 pad 1 nobias, bn, gelu, maxpool 2, "
                     "conv 16 3 pad 1 nobias, bn, relu, maxpool 3, gap, dense 5";
  enum { B = 8, C = 3, S = 14, STEPS = FV_STEPS };
  float loss[2][STEPS];
  float *x;
  uint8_t *y;
  fused_batches(710, B, C, S, &x, &y);
  int stats[2][4], pools[2];
  for (int fused = 0; fused < 2; fused++) {
    lam_model_options mo = lam_model_options_default();
    mo.fuse = fused ? 3 : 0, mo.layout = 2, mo.conv_stats = 0;
    fused_run(ctx, spec, mo, B, C, S, x, y, loss[fused], stats[fused], &pools[fused]);
  }
  assert_int_equal(pools[0], 0);
  /* 14 -> 7 -> 3 (a row and a column left out) -> 1; CUDA takes the fusion with LAMINA_BN_POOL=1 only (backend.cu) */
  const char *opt = getenv("LAMINA_BN_POOL");
  if (g_dev && !(opt && !strcmp(opt, "1"))) {
    assert_int_equal(pools[1], 0);
    print_message("  cuda: bn_act_pool is opt-in (LAMINA_BN_POOL=1); both runs took the plain ops\n");
  } else {
    assert_int_equal(pools[1], 3);
  }
  TU_OK(lam_ctx_set_precision(ctx, LAM_PRECISION_FP32));
  lam_model_options mo = lam_model_options_default();
  TU_OK(lam_ctx_set_model_options(ctx, &mo));
  /* against the first loss: the net learns its two batches to a loss near 0.05, and bf16's rounding carried over the
   * steps moved the loss by 1.3% of the first at most on the CPU (fp16's 0.04%) */
  const double tol = g_p == LAM_PRECISION_FP16 ? 1e-2 : 3e-2, first = fabs((double)loss[1][0] - loss[0][0]) / fabs(loss[0][0]);
  double worst = 0;
  for (int k = 0; k < STEPS; k++) worst = fmax(worst, fabs((double)loss[1][k] - loss[0][k]) / fabs(loss[0][0]));
  print_message("  %s %s: bn_act_pool against plain ops over %d Adam steps: losses %.4f -> %.4f and %.4f -> %.4f, first "
                "step %.2e, worst %.2e of the first loss (tolerances 1e-3, %.0e)\n",
                g_dev ? "cuda" : "cpu", PNAME, STEPS, loss[0][0], loss[0][STEPS - 1], loss[1][0], loss[1][STEPS - 1],
                first, worst, tol);
  assert_true(first <= 1e-3);
  assert_true(worst <= tol);
  assert_true(loss[1][STEPS - 1] < 0.8f * loss[1][1]); /* and it trains */
  free(x), free(y);
}

/* On the GPU in fp16, cuDNN's one graph (conv + GenStats) for each conv -> bn pair, forced (conv_stats 2) and as
 * measured (1), against BatchNorm's own statistics pass (0), everything else alike (fuse 3), on 64 channels as
 * the benchmark nets have them (the first conv's 3 input channels padded to 8): the first step's loss (one forward
 * from the same weights) agrees to 1e-3, and 20 Adam steps give the same losses to 1e-2 of the first loss (the net
 * learns its two batches to a loss of 0.05, where fp16's rounding, carried over the steps, moved the loss by 2.3% of
 * itself at most on the H100), and with conv_stats 2 every conv ran the one graph (lam_model_nodes says so). */
static void test_fp16_conv_genstats(void **state) {
  (void)state;
  const char *spec = "conv 64 3 pad 1 nobias, bn, r: relu, conv 64 3 pad 1 nobias, bn, relu, conv 64 3 pad 1 nobias, "
                     "bn, add @r, relu, gap, dense 5";
  enum { B = 16, C = 3, S = 16, STEPS = FV_STEPS };
  g_p = LAM_PRECISION_FP16;
  float loss[3][STEPS];
  int stats[3][4];
  float *x;
  uint8_t *y;
  fused_batches(701, B, C, S, &x, &y);
  for (int k = 0; k < 3; k++) {
    lam_model_options mo = lam_model_options_default();
    mo.layout = 2, mo.conv_stats = k;
    fused_run(g_dev, spec, mo, B, C, S, x, y, loss[k], stats[k], NULL);
  }
  TU_OK(lam_ctx_set_precision(g_dev, LAM_PRECISION_FP32));
  lam_model_options mo = lam_model_options_default();
  TU_OK(lam_ctx_set_model_options(g_dev, &mo));
  g_p = LAM_PRECISION_BF16;
  double worst[3] = {0, 0, 0}, first[3] = {0, 0, 0};
  for (int k = 1; k < 3; k++) {
    first[k] = fabs((double)loss[k][0] - loss[0][0]) / fabs(loss[0][0]);
    for (int s = 0; s < STEPS; s++) worst[k] = fmax(worst[k], fabs((double)loss[k][s] - loss[0][s]) / fabs(loss[0][0]));
  }
  print_message("  cuda fp16, 64 channels, %d Adam steps: BatchNorm's own pass %.4f -> %.4f; measured choice (%d of 3 "
                "convs in one graph) first step %.2e, worst %.2e of the first loss; one graph forced (%d of 3) %.2e, "
                "%.2e\n", STEPS, loss[0][0], loss[0][STEPS - 1], stats[1][2], first[1], worst[1], stats[2][2], first[2],
                worst[2]);
  assert_true(first[1] <= 1e-3 && first[2] <= 1e-3);
  assert_int_equal(stats[0][1] + stats[0][2] + stats[0][3], 0);
  assert_int_equal(stats[1][1] + stats[1][2], 3);
  assert_int_equal(stats[2][2], 3); /* cuDNN took the graph at each conv */
  assert_int_equal(stats[2][3], 3);
  assert_true(worst[1] <= 1e-2 && worst[2] <= 1e-2);
  assert_true(loss[2][STEPS - 1] < 0.8f * loss[2][1]); /* and it trains */
  free(x), free(y);
}

/* Each case again in fp16. */
#define IN_FP16(name)                     \
  static void name##_fp16(void **state) { \
    g_p = LAM_PRECISION_FP16;             \
    name(state);                          \
    g_p = LAM_PRECISION_BF16;             \
  }
IN_FP16(test_half_cpu_rounds)
IN_FP16(test_half_nhwc)
IN_FP16(test_half_cuda_matches_cpu)
IN_FP16(test_half_cuda_trains)
IN_FP16(test_half_fused_vs_plain)
IN_FP16(test_half_bn_act_pool_vs_plain)

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "cuda")) {
    const char *why = NULL;
    if (lam_cuda_device_count(&why) == 0) {
      printf("test_half cuda: no CUDA device (%s): skipping\n", why ? why : "none");
      return 77;
    }
    g_devkind = LAM_DEVICE_CUDA;
  }
  if (lam_ctx_create(&g_cpu, LAM_DEVICE_CPU) != LAM_OK ||
      (g_devkind == LAM_DEVICE_CUDA && lam_ctx_create(&g_dev, LAM_DEVICE_CUDA) != LAM_OK)) {
    fprintf(stderr, "test_half: %s\n", lam_last_error());
    return 1;
  }
  const struct CMUnitTest cpu_tests[] = {cmocka_unit_test(test_half_cpu_rounds), cmocka_unit_test(test_half_nhwc),
                                         cmocka_unit_test(test_precision_names), cmocka_unit_test(test_half_cpu_rounds_fp16),
                                         cmocka_unit_test(test_half_nhwc_fp16), cmocka_unit_test(test_fp16_loss_scale),
                                         cmocka_unit_test(test_half_fused_vs_plain), cmocka_unit_test(test_half_fused_vs_plain_fp16),
                                         cmocka_unit_test(test_half_bn_act_pool_vs_plain),
                                         cmocka_unit_test(test_half_bn_act_pool_vs_plain_fp16),
                                         cmocka_unit_test(test_fp16_overflow_at_the_floor)};
  const struct CMUnitTest cuda_tests[] = {cmocka_unit_test(test_half_cuda_matches_cpu), cmocka_unit_test(test_half_nhwc),
                                          cmocka_unit_test(test_half_cuda_trains),
                                          cmocka_unit_test(test_half_cuda_matches_cpu_fp16),
                                          cmocka_unit_test(test_half_nhwc_fp16), cmocka_unit_test(test_half_cuda_trains_fp16),
                                          cmocka_unit_test(test_fp16_loss_scale), cmocka_unit_test(test_half_fused_vs_plain),
                                          cmocka_unit_test(test_half_fused_vs_plain_fp16),
                                          cmocka_unit_test(test_half_bn_act_pool_vs_plain),
                                          cmocka_unit_test(test_half_bn_act_pool_vs_plain_fp16), cmocka_unit_test(test_fp16_overflow_at_the_floor),
                                          cmocka_unit_test(test_fp16_conv_genstats)};
  int failed = g_dev ? TU_RUN_GROUP("half_cuda", cuda_tests, NULL, NULL) : TU_RUN_GROUP("half", cpu_tests, NULL, NULL);
  lam_ctx_free(g_dev);
  lam_ctx_free(g_cpu);
  return failed ? 1 : 0;
}
