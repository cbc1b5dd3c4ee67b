/* test_graph_torch.c — graph models against PyTorch, in training mode: for each reference
 * file that tests/ref/make_torch_ref.py wrote for a graph model —
 *   resnet_bn  3×8×8, batch 4: conv/bn/relu, a residual (r: ..., add @r), dropout with a given mask,
 *              maxpool, GELU, gap, dense 5
 *   unet       1×16×20, batch 2: a small U-Net (bn, maxpool, convt stride 2, concat @e2 / @e1) with a
 *              per-pixel loss over 3 classes, some labels 255 (ignored)
 *   norms      3×8×8, batch 4: groupnorm and layernorm on images (PyTorch's GroupNorm(G, C), GroupNorm(1, C)) and
 *              layernorm on a flat input (LayerNorm(C)), with relu, gelu, maxpool, tanh
 * — builds the model from the file's spec, loads PyTorch's initial parameters and running statistics,
 * and checks, against PyTorch: the training-mode loss (batch statistics) and every gradient, the running
 * statistics after that forward, the losses of 10 Adam steps (lr 1e-2) on the same batch with a fresh
 * dropout mask each, the parameters and running statistics after them, and the evaluation-mode logits
 * (lam_model_forward in mode 0 against PyTorch's model.eval()) on another batch.
 *
 * On the CPU backend; with the argument "cuda" on the CUDA backend instead (CTest: test_graph_torch_cuda,
 * label gpu; exit 77, skipped, without a device). The file format and reader are in lamref.h, the
 * records in the script's docstring ("Graph model files").
 *
 * Every comparison is max|got - want| / scale, where scale is the reference tensor's max|want| unless
 * stated; tolerances sit next to it below. The script prints how far PyTorch's own float32 results are
 * from float64 on these models: ≤ 1.2e-6 for gradients (BatchNorm's backward subtracts two sums of
 * ~|dy|), ≤ 4e-7 for logits and running statistics, ≤ 1e-5 of the Adam movement.
 */
#include "testutil.h"
#include "lamref.h"

/* Tolerances, relative. */
#define TOL_LOSS 1e-5 /* a log-sum-exp of ~1.5 in float32 (mean over 4 or 529 labels): ~1e-7 expected */
/* Per parameter tensor. A gradient here passes back through up to 4 BatchNorms in training mode, whose
 * backward is a difference of two batch sums (over B·H·W = 64..640 values): PyTorch's float32 is within
 * 1.2e-6 of float64 (bn3.bias of resnet_bn), another float32 summation order is as far again. 2e-5 is
 * ~15× that; a missing term of BatchNorm's backward (the mean's or the variance's path), a wrong
 * dropout scale or a skip added to the wrong tensor is 1e-2 and more. */
#define TOL_GRADS 2e-5
/* BatchNorm's running mean and var after training forwards: momentum 0.1 blends of batch means and
 * unbiased variances, computed in float32 (~3e-7 from float64). The biased variance in place of the
 * unbiased one is momentum / (B·H·W - 1) ≥ 1.6e-4 off (B·H·W ≤ 640); a wrong momentum more. */
#define TOL_STATE 1e-5
/* Each loss on the Adam path (lr 1e-2: a step changes the loss by 1e-2..1e-1 relative). */
#define TOL_ADAM_LOSS 1e-5
/* Parameters after the 10 steps, relative to how far Adam moved each tensor (~0.1 = 10·lr). As in
 * test_model_torch.c: Adam divides by the gradient's own size, amplifying noise in small gradient
 * elements; PyTorch's float32 movement is within 1e-5 of float64's here. */
#define TOL_PARAMS_AFTER 2e-3
/* Evaluation mode (running statistics, no dropout) with the trained parameters: ~4e-7 expected. */
#define TOL_LOGITS_EVAL 1e-5

static lam_device g_dev = LAM_DEVICE_CPU;

static void poison(float *p, size_t n) { tu_fill_nan(p, n); }

/* Reads the running statistics and compares them with the record `name`. */
static void check_state(lam_model *m, const ref_file *f, const char *model, const char *name, const char *when,
                        float *buf) {
  const ref_tensor *want = ref_get(f, name, REF_F32, 1);
  char what[160];
  poison(buf, want->count);
  TU_OK(lam_model_state_get(m, buf, want->count));
  snprintf(what, sizeof what, "%s running stats %s", model, when);
  check_rel(what, buf, (const float *)want->data, want->count, 0.0, TOL_STATE);
}

static void run_graph(const char *name) {
  ref_file *f = malloc(sizeof *f);
  assert_non_null(f);
  ref_load(f, name);
  char *spec = ref_text(f, "spec"), *pnames = ref_text(f, "param_names");
  const ref_tensor *x = ref_get(f, "x", REF_F32, 4), *x_eval = ref_get(f, "x_eval", REF_F32, 4),
                   *labels = ref_get(f, "labels", REF_U8, -1), *sizes = ref_get(f, "param_sizes", REF_I32, 1),
                   *params = ref_get(f, "params", REF_F32, 1), *state = ref_get(f, "state", REF_F32, 1),
                   *grads = ref_get(f, "grads", REF_F32, 1), *adam = ref_get(f, "adam_losses", REF_F32, 1),
                   *after = ref_get(f, "params_after", REF_F32, 1),
                   *logits_eval = ref_get(f, "logits_eval", REF_F32, -1);
  const float want_loss = *ref_f32(f, "loss", 0), lr = *ref_f32(f, "adam_lr", 0);
  const int B = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
  const size_t P = params->count, T = sizes->count, N = state->count;
  const int32_t *tsz = (const int32_t *)sizes->data;
  size_t sum = 0;
  for (size_t i = 0; i < T; i++) sum += (size_t)tsz[i];
  assert_true(sum == P && grads->count == P && after->count == P);
  assert_true(x_eval->dims[0] == B && logits_eval->dims[0] == B);
  /* (B, K) logits or, for a per-pixel model, (B, K, OH, OW) logits and (B, OH, OW) labels */
  const int per_pixel = logits_eval->ndim == 4, K = logits_eval->dims[1];
  const int OH = per_pixel ? logits_eval->dims[2] : 1, OW = per_pixel ? logits_eval->dims[3] : 1;
  assert_true(labels->count == (size_t)B * OH * OW);
  char *tname[32];
  assert_true(T <= 32);
  for (size_t i = 0, at = 0; i < T; i++) { /* "conv1.weight\nbn1.weight\n...": split in place */
    tname[i] = pnames + at;
    char *nl = strchr(tname[i], '\n');
    if (nl) *nl = '\0';
    at += strlen(tname[i]) + (nl ? 1 : 0);
  }

  lam_ctx *ctx = NULL;
  TU_OK(lam_ctx_create(&ctx, g_dev));
  print_message("%s on %s: \"%s\", input (%d, %d, %d, %d), %zu parameters, %zu running statistics\n", name,
                lam_ctx_device_name(ctx), spec, B, C, H, W, P, N);
  lam_model *m = NULL;
  TU_OK(lam_model_create(ctx, spec, C, H, W, 1, &m));
  if (lam_model_param_count(m) != P)
    fail_msg("%s: lam_model_param_count = %zu, PyTorch's model has %zu", name, lam_model_param_count(m), P);
  if (lam_model_state_count(m) != N)
    fail_msg("%s: lam_model_state_count = %zu, PyTorch's BatchNorms have %zu", name, lam_model_state_count(m), N);
  int oc = 0, oh = 0, ow = 0;
  TU_OK(lam_model_output_shape(m, &oc, &oh, &ow));
  if (oc != K || oh != OH || ow != OW)
    fail_msg("%s: output (%d, %d, %d), PyTorch's is (%d, %d, %d)", name, oc, oh, ow, K, OH, OW);

  const size_t nout = (size_t)B * K * OH * OW;
  float *buf = malloc((P > N ? P : N) * sizeof(float)), *out = malloc(nout * sizeof(float));
  assert_true(buf && out);
  char what[160];

  /* Parameters and running statistics in, and back out bit for bit (set and get agree on the layout). */
  TU_OK(lam_model_params_set(m, (const float *)params->data, P));
  poison(buf, P);
  TU_OK(lam_model_params_get(m, buf, P));
  if (memcmp(buf, params->data, P * sizeof(float)) != 0) fail_msg("%s: params_get after params_set differs", name);
  TU_OK(lam_model_state_set(m, (const float *)state->data, N));
  poison(buf, N);
  TU_OK(lam_model_state_get(m, buf, N));
  if (memcmp(buf, state->data, N * sizeof(float)) != 0) fail_msg("%s: state_get after state_set differs", name);

  /* The dropout layer, if any: PyTorch's masks, one per training forward. */
  int drop_node = 0;
  const uint8_t *masks = NULL;
  size_t mask_size = 0; /* B × the node's output size */
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->t[i].name, "dropout_node")) {
      const ref_tensor *dn = ref_get(f, "dropout_node", REF_I32, 1), *dm = ref_get(f, "dropout_masks", REF_U8, 3);
      drop_node = ((const int32_t *)dn->data)[0];
      assert_true(dm->dims[0] == (int)adam->count + 1 && dm->dims[1] == B);
      lam_node_info info[64];
      int count = 0;
      TU_OK(lam_model_nodes(m, B, info, 64, &count, NULL));
      assert_true(drop_node >= 1 && drop_node <= count);
      const lam_node_info *d = &info[drop_node - 1];
      if (strcmp(d->op, "dropout") != 0 || (size_t)d->c * d->h * d->w != (size_t)dm->dims[2])
        fail_msg("%s: node %d is %s (%d, %d, %d), the file's masks are for a dropout of %d outputs", name, drop_node,
                 d->op, d->c, d->h, d->w, dm->dims[2]);
      masks = (const uint8_t *)dm->data;
      mask_size = (size_t)B * dm->dims[2];
    }
  if (masks) TU_OK(lam_model_set_dropout_mask(m, drop_node, masks)); /* mask 0: the first forward */

  /* Training mode: loss, every gradient (tensor by tensor), running statistics after the one forward. */
  float l = NAN;
  TU_OK(lam_model_loss_backward(m, B, (const float *)x->data, (const uint8_t *)labels->data, &l));
  snprintf(what, sizeof what, "%s loss (training mode)", name);
  check_scalar(what, l, want_loss, TOL_LOSS);
  poison(buf, P);
  TU_OK(lam_model_grads_get(m, buf, P));
  for (size_t i = 0, off = 0; i < T; off += (size_t)tsz[i], i++) {
    snprintf(what, sizeof what, "%s grad %s (flat %zu..%zu)", name, tname[i], off, off + (size_t)tsz[i] - 1);
    check_rel(what, buf + off, (const float *)grads->data + off, (size_t)tsz[i], 0.0, TOL_GRADS);
  }
  check_state(m, f, name, "state_after_loss", "after the first forward", buf);

  /* Adam (PyTorch's betas and eps, the file's lr) on the same batch, each step with its own mask. */
  lam_opt opt = lam_opt_default(LAM_OPT_ADAM);
  opt.lr = lr;
  const float *want_l = (const float *)adam->data;
  for (size_t s = 0; s < adam->count; s++) {
    if (masks) TU_OK(lam_model_set_dropout_mask(m, drop_node, masks + (s + 1) * mask_size));
    l = NAN;
    TU_OK(lam_model_loss_backward(m, B, (const float *)x->data, (const uint8_t *)labels->data, &l));
    snprintf(what, sizeof what, "%s loss before Adam step %zu", name, s + 1);
    check_scalar(what, l, want_l[s], TOL_ADAM_LOSS);
    TU_OK(lam_model_step(m, &opt));
  }
  if (masks) TU_OK(lam_model_set_dropout_mask(m, drop_node, NULL));

  /* Parameters after the steps, relative to how far Adam moved each tensor; running statistics. */
  poison(buf, P);
  TU_OK(lam_model_params_get(m, buf, P));
  check_moved(name, buf, (const float *)params->data, (const float *)after->data, T, tsz, tname, adam->count,
              TOL_PARAMS_AFTER);
  snprintf(what, sizeof what, "after %zu Adam steps", adam->count);
  check_state(m, f, name, "state_after", what, buf);

  /* Evaluation mode, as PyTorch's model.eval(): running statistics, dropout a copy; and it leaves the
   * running statistics as they were. */
  float *state_before = malloc(N * sizeof(float));
  assert_non_null(state_before);
  TU_OK(lam_model_state_get(m, state_before, N));
  TU_OK(lam_model_set_train(m, 0));
  poison(out, nout);
  TU_OK(lam_model_forward(m, B, (const float *)x_eval->data, out));
  snprintf(what, sizeof what, "%s logits in evaluation mode", name);
  check_rel(what, out, (const float *)logits_eval->data, nout, 0.0, TOL_LOGITS_EVAL);
  poison(buf, N);
  TU_OK(lam_model_state_get(m, buf, N));
  if (memcmp(buf, state_before, N * sizeof(float)) != 0)
    fail_msg("%s: a forward in evaluation mode changed BatchNorm's running statistics", name);

  free(state_before);
  free(buf);
  free(out);
  lam_model_free(m);
  lam_ctx_free(ctx);
  free(spec);
  free(pnames);
  ref_free(f);
  free(f);
}

static void test_resnet_bn(void **state) {
  (void)state;
  run_graph("resnet_bn");
}
static void test_unet(void **state) {
  (void)state;
  run_graph("unet");
}
static void test_norms(void **state) {
  (void)state;
  run_graph("norms");
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "cuda")) {
    const char *why = NULL;
    if (lam_cuda_device_count(&why) <= 0) {
      printf("test_graph_torch cuda: no CUDA device (%s): skipping\n", why ? why : "none");
      return 77;
    }
    g_dev = LAM_DEVICE_CUDA;
  } else if (argc > 1) {
    fprintf(stderr, "usage: %s [cuda]\n", argv[0]);
    return 2;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_resnet_bn), cmocka_unit_test(test_unet),
                                     cmocka_unit_test(test_norms)};
  return TU_RUN_GROUP(g_dev == LAM_DEVICE_CUDA ? "graph_torch_cuda" : "graph_torch", tests, NULL, NULL) ? 1 : 0;
}
