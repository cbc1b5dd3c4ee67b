/* test_model_torch.c — whole models against PyTorch: for each reference file that
 * tests/ref/make_torch_ref.py wrote (a small CNN and an MLP, batch 8), builds the same model, loads
 * PyTorch's initial parameters, and compares the logits of a forward pass, the mean cross-entropy, every
 * gradient, the losses of 10 Adam steps (PyTorch's defaults) on the same batch and the parameters after
 * them. On the CPU backend always, and again on CUDA when a device is present (skipped otherwise).
 *
 * The file format ("LAMREF1") and its reader are in lamref.h. Records used: spec (u8 text), x f32
 * (B,C,H,W), labels u8 (B), param_sizes i32 (T), param_names (u8 text, one per line), params f32 (P),
 * logits f32 (B,10), loss f32 (), grads f32 (P), adam_losses f32 (S), params_after f32 (P). The script's
 * docstring has the details.
 *
 * Every comparison is max|got - want| / scale, where scale is the reference tensor's max|want| unless
 * stated; its tolerance sits next to it below. PyTorch's own float32 results are within 1e-7..4e-7 of
 * float64 on these models (the script prints it), so each tolerance leaves a wide margin for another
 * float32 summation order while any real error (a wrong index, term, scale or step) is orders above.
 */
#include "testutil.h"
#include "lamref.h"

/* Tolerances, relative (see the comment at the top for the measure). */
#define TOL_LOGITS 1e-5 /* sums of at most 36 float32 products per layer: ~1e-7 expected */
#define TOL_LOSS 1e-5   /* a log-sum-exp in float32 of values ~2.3: ~1e-7 expected */
/* Per parameter tensor. Weight and bias gradients sum up to B·H·W = 800 products; even a plain
 * sequential float32 loop over them stays within 3e-7 here (checked in numpy, either order), so 1e-5
 * is ~30× that; a wrong or missing term shows at 1e-3 and more. TF32 or half precision would not pass. */
#define TOL_GRADS 1e-5
/* Each of the 10 losses on the Adam path. One step changes the loss by ~3e-3 relative, so a skipped or
 * wrong step shows; float32 noise in the parameters moves the loss by far less than 1e-5. */
#define TOL_ADAM_LOSS 1e-5
/* Parameters after 10 Adam steps, relative to how far Adam moved the tensor (scale = max|params_after -
 * params|, ~1e-2 = 10·lr). Adam divides by the gradient's own size, so noise in small gradient elements
 * is amplified: in PyTorch, relative gradient noise of 1e-6 (a few times float32's) moves the result by
 * ~3e-4 of the movement, 1e-5 by ~3e-3. 2e-3 admits float32 gradients ~20× noisier than PyTorch's.
 * (A missing bias correction, beta1 in place of beta2, an off-by-one step count or eps inside the sqrt
 * already moves the loss before step 2 by 1.7e-4 to 1e-1 relative, far beyond TOL_ADAM_LOSS.) */
#define TOL_PARAMS_AFTER 2e-3

/* ---- one model on one backend ---------------------------------------------------------------- */

static void poison(float *p, size_t n) { tu_fill_nan(p, n); }

static void run_model(const char *name, lam_device dev) {
  ref_file *f = malloc(sizeof *f);
  assert_non_null(f);
  ref_load(f, name);
  char *spec = ref_text(f, "spec"), *pnames = ref_text(f, "param_names");
  const ref_tensor *x = ref_get(f, "x", REF_F32, 4), *labels = ref_get(f, "labels", REF_U8, 1),
                   *sizes = ref_get(f, "param_sizes", REF_I32, 1), *params = ref_get(f, "params", REF_F32, 1),
                   *logits = ref_get(f, "logits", REF_F32, 2), *loss = ref_get(f, "loss", REF_F32, 0),
                   *grads = ref_get(f, "grads", REF_F32, 1), *adam = ref_get(f, "adam_losses", REF_F32, 1),
                   *after = ref_get(f, "params_after", REF_F32, 1);
  const int B = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
  const size_t P = params->count, T = sizes->count;
  const int32_t *tsz = (const int32_t *)sizes->data;
  size_t sum = 0;
  for (size_t i = 0; i < T; i++) sum += (size_t)tsz[i];
  assert_true(B > 0 && (size_t)B == labels->count && logits->dims[0] == B);
  assert_true(sum == P && grads->count == P && after->count == P);
  const int classes = logits->dims[1];
  /* Parameter tensor names ("0.weight", ...) for messages. */
  char *tname[16];
  assert_true(T <= 16);
  {
    char *p = pnames;
    for (size_t i = 0; i < T; i++) {
      tname[i] = p;
      char *nl = strchr(p, '\n');
      if (nl) {
        *nl = '\0';
        p = nl + 1;
      } else {
        p += strlen(p);
      }
    }
  }

  lam_ctx *ctx = NULL;
  TU_OK(lam_ctx_create(&ctx, dev));
  print_message("%s on %s: \"%s\", input (%d, %d, %d, %d), %zu parameters\n", name, lam_ctx_device_name(ctx), spec, B,
                C, H, W, P);
  lam_model *m = NULL;
  TU_OK(lam_model_create(ctx, spec, C, H, W, 1, &m));
  if (lam_model_param_count(m) != P)
    fail_msg("%s: lam_model_param_count = %zu, PyTorch's model has %zu", name, lam_model_param_count(m), P);
  assert_int_equal(lam_model_outputs(m), classes);

  float *buf = malloc(P * sizeof(float)), *out = malloc((size_t)B * classes * sizeof(float));
  assert_true(buf && out);
  char what[160];

  /* Parameters in, and back out unchanged (set and get agree on the layout). */
  TU_OK(lam_model_params_set(m, (const float *)params->data, P));
  poison(buf, P);
  TU_OK(lam_model_params_get(m, buf, P));
  for (size_t i = 0; i < P; i++)
    if (memcmp(&buf[i], &((const float *)params->data)[i], 4) != 0)
      fail_msg("%s: params_get after params_set differs at %zu: %.9g, set %.9g", name, i, (double)buf[i],
               (double)((const float *)params->data)[i]);

  /* Forward. */
  poison(out, (size_t)B * classes);
  TU_OK(lam_model_forward(m, B, (const float *)x->data, out));
  snprintf(what, sizeof what, "%s logits", name);
  check_rel(what, out, (const float *)logits->data, (size_t)B * classes, 0.0, TOL_LOGITS);

  /* Loss and every gradient, tensor by tensor. */
  float l = NAN;
  TU_OK(lam_model_loss_backward(m, B, (const float *)x->data, (const uint8_t *)labels->data, &l));
  snprintf(what, sizeof what, "%s loss", name);
  check_scalar(what, l, *(const float *)loss->data, TOL_LOSS);
  poison(buf, P);
  TU_OK(lam_model_grads_get(m, buf, P));
  for (size_t i = 0, off = 0; i < T; off += (size_t)tsz[i], i++) {
    snprintf(what, sizeof what, "%s grad %s (flat %zu..%zu)", name, tname[i], off, off + (size_t)tsz[i] - 1);
    check_rel(what, buf + off, (const float *)grads->data + off, (size_t)tsz[i], 0.0, TOL_GRADS);
  }

  /* Adam, PyTorch's defaults, on the same batch: the loss before each step. */
  lam_opt opt = lam_opt_default(LAM_OPT_ADAM);
  assert_int_equal(opt.kind, LAM_OPT_ADAM);
  if (opt.lr != 1e-3f || opt.beta1 != 0.9f || opt.beta2 != 0.999f || opt.eps != 1e-8f || opt.weight_decay != 0.0f)
    fail_msg("lam_opt_default(ADAM) = lr %g betas %g/%g eps %g wd %g, want PyTorch's 1e-3 0.9/0.999 1e-8 0",
             (double)opt.lr, (double)opt.beta1, (double)opt.beta2, (double)opt.eps, (double)opt.weight_decay);
  const float *want_l = (const float *)adam->data;
  for (size_t s = 0; s < adam->count; s++) {
    l = NAN;
    TU_OK(lam_model_loss_backward(m, B, (const float *)x->data, (const uint8_t *)labels->data, &l));
    snprintf(what, sizeof what, "%s loss before Adam step %zu", name, s + 1);
    check_scalar(what, l, want_l[s], TOL_ADAM_LOSS);
    TU_OK(lam_model_step(m, &opt));
  }

  /* Parameters after the steps, relative to how far Adam moved each tensor. */
  poison(buf, P);
  TU_OK(lam_model_params_get(m, buf, P));
  check_moved(name, buf, (const float *)params->data, (const float *)after->data, T, tsz, tname, adam->count,
              TOL_PARAMS_AFTER);

  free(buf);
  free(out);
  lam_model_free(m);
  lam_ctx_free(ctx);
  free(spec);
  free(pnames);
  ref_free(f);
  free(f);
}

/* The CUDA pass: the same checks against the same PyTorch numbers, when there is a device. */
static void run_model_cuda(const char *name) {
  const char *why = NULL;
  if (lam_cuda_device_count(&why) <= 0) {
    print_message("%s on CUDA: skipped, no CUDA device (%s)\n", name, why ? why : "no reason given");
    skip();
  }
  run_model(name, LAM_DEVICE_CUDA);
}

static void test_small_cnn_cpu(void **state) {
  (void)state;
  run_model("small_cnn", LAM_DEVICE_CPU);
}
static void test_mlp_cpu(void **state) {
  (void)state;
  run_model("mlp", LAM_DEVICE_CPU);
}
static void test_small_cnn_cuda(void **state) {
  (void)state;
  run_model_cuda("small_cnn");
}
static void test_mlp_cuda(void **state) {
  (void)state;
  run_model_cuda("mlp");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_small_cnn_cpu),
      cmocka_unit_test(test_mlp_cpu),
      cmocka_unit_test(test_small_cnn_cuda),
      cmocka_unit_test(test_mlp_cuda),
  };
  return TU_RUN_GROUP("model_torch", tests, NULL, NULL) ? 1 : 0;
}
