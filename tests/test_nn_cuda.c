/* test_nn_cuda.c — the CUDA backend's models against the CPU backend's (the oracle): the same spec on a
 * CPU and a CUDA context, the same parameters (lam_model_params_get from the CPU model,
 * lam_model_params_set into the CUDA one), the same inputs and labels; compared are the logits
 * (lam_model_forward), the loss and every gradient tensor (lam_model_loss_backward, lam_model_grads_get),
 * and the parameters after 5 steps each of Adam, SGD with momentum and weight decay, and AdamW
 * (lam_model_step). Every op kind:
 * conv with kernel 1/2/3/5, stride 1/2/3, pad 0/1/2; dense; max-pool 2/2 and the overlapping 3/2;
 * relu, tanh, sigmoid, flatten; the fused softmax cross-entropy; at batch 1, 7 and 64, plus the presets
 * "cnn" and "mlp" on 1x28x28. Also lam_backprop_step on device memory against float64 and the CPU.
 *
 * Tolerances, per tensor: |cuda - cpu| <= 1e-4 * max|cpu tensor| (cuBLAS and the CPU's BLAS sum in
 * different orders: ~1e-6 relative is expected; 1e-4 leaves room, TF32 would not pass).
 * Kinks: where a ReLU input is within 1e-5 of its layer's max |value| of zero, or a max-pool window's two
 * largest values are that close, the two backends may legitimately take different sides (different
 * rounding), which changes the gradient of every tensor before that layer by up to a few percent of its
 * max. The test finds such near-kinks on the CPU (prefix models of the spec, forward only); tensors
 * before a layer with one are compared at 5e-2 of their max instead, and the test says so.
 * Optimizers: see compare_params_after (Adam's sign-like steps amplify rounding where a gradient is near
 * zero; a near-kink at any step parts the two trajectories in every tensor, so the tolerance then grows
 * with how far each tensor moved).
 *
 * Exits 77 (CTest: skipped) before running anything when there is no CUDA device. To check the test
 * itself on a machine without one, LAMINA_TEST_NN_PEER=cpu runs it with a second CPU context in place
 * of the CUDA one (every comparison then is exact), and LAMINA_TEST_NN_PEER=cpu-jitter also moves that
 * context's parameters by a few ulps (differences of the size another summation order gives).
 */
#include "nnutil.h"

static lam_ctx *g_cpu, *g_dev; /* the reference, and the backend under test */

#define TOL_REL 1e-4
#define TOL_KINK 5e-2
#define KINK_DELTA 1e-5
#define OPT_STEPS 5

typedef struct nc_model {
  const char *spec;
  int c, h, w;
} nc_model;

static const nc_model k_models[] = {
    {"flatten, dense 4", 3, 2, 2},
    {"dense 5", 6, 1, 1},
    {"flatten, dense 6, relu, dense 4", 2, 3, 3},
    {"flatten, dense 5, tanh, dense 5, sigmoid, dense 3", 1, 2, 4},
    {"conv 3 1, flatten, dense 4", 2, 4, 4},
    {"conv 3 2, tanh, flatten, dense 4", 2, 5, 5},
    {"conv 4 3 pad 1, sigmoid, flatten, dense 3", 3, 5, 5},
    {"conv 3 3 stride 2, tanh, flatten, dense 4", 2, 7, 7},
    {"conv 2 2 stride 2 pad 1, tanh, flatten, dense 3", 1, 5, 5},
    {"conv 3 2 stride 3 pad 1, sigmoid, conv 2 2 pad 1, flatten, dense 3", 2, 8, 8},
    {"conv 16 5 pad 2, relu, maxpool 2, conv 8 3 stride 2 pad 1, relu, flatten, dense 10", 3, 16, 16},
    {"conv 3 3 pad 1, relu, maxpool 2, flatten, dense 4", 2, 6, 6},
    {"conv 2 1, maxpool 2, flatten, dense 3", 1, 7, 7},
    {"conv 3 2, maxpool 3 stride 2, flatten, dense 4", 2, 8, 8},
    {"conv 2 3 stride 2 pad 1, relu, maxpool 3 stride 2, flatten, dense 3", 1, 9, 9},
    {"tanh, maxpool 3 stride 2, flatten, dense 3", 1, 7, 7},
    {"conv 3 3, relu, maxpool 2, conv 4 3 stride 2 pad 1, tanh, flatten, dense 5", 2, 8, 8},
    {"conv 4 3, relu, maxpool 2, conv 6 3, relu, maxpool 2, flatten, dense 5", 1, 14, 14},
    {"cnn", 1, 28, 28},
    {"mlp", 1, 28, 28},
};
#define N_MODELS (sizeof k_models / sizeof k_models[0])
static const int k_batches[] = {1, 7, 64};

/* ---- near-kinks, found on the CPU --------------------------------------------------------------- */

/* The input of every relu and max-pool layer (a prefix model of the spec on the CPU, with the same
 * parameters). Returns the number of near-kinks; *flag_upto gets the last layer that has one (tensors
 * of the layers before it are the ones a kink can change), 0 if none. */
static size_t near_kinks(const nu_net *net, const float *P, int B, const float *x, int *flag_upto) {
  size_t total = 0;
  for (int j = 0; j < net->n; j++) {
    const nu_layer *l = &net->L[j];
    if (l->kind != NU_RELU && l->kind != NU_MAXPOOL) continue;
    const size_t in = (size_t)l->in_c * l->in_h * l->in_w;
    float *a = malloc((size_t)B * in * sizeof *a);
    assert_non_null(a);
    if (j == 0) {
      memcpy(a, x, (size_t)B * in * sizeof *a);
    } else {
      char spec[1024];
      nu_prefix_spec(net, j, spec, sizeof spec - 16);
      const nu_layer *pl = &net->L[j - 1];
      if (pl->out_h > 1 || pl->out_w > 1) strcat(spec, ", flatten");
      lam_model *pm = NULL;
      lam_status st = lam_model_create(g_cpu, spec, net->in_c, net->in_h, net->in_w, 1, &pm);
      if (st != LAM_OK) fail_msg("prefix model '%s': %s", spec, lam_last_error());
      const size_t np = lam_model_param_count(pm);
      float dummy = 0.0f;
      TU_OK(lam_model_params_set(pm, np ? P : &dummy, np));
      assert_int_equal((size_t)lam_model_outputs(pm), in);
      TU_OK(lam_model_forward(pm, B, x, a));
      lam_model_free(pm);
    }
    const double close = KINK_DELTA * nu_max_abs(a, (size_t)B * in);
    size_t cnt = 0;
    if (l->kind == NU_RELU) {
      for (size_t i = 0; i < (size_t)B * in; i++) cnt += fabs((double)a[i]) <= close;
    } else {
      const int after_relu = j > 0 && net->L[j - 1].kind == NU_RELU;
      for (int b = 0; b < B; b++)
        for (int c = 0; c < l->in_c; c++) {
          const float *pl = a + ((size_t)b * l->in_c + c) * l->in_h * l->in_w;
          for (int oh = 0; oh < l->out_h; oh++)
            for (int ow = 0; ow < l->out_w; ow++) {
              double v1 = -INFINITY, v2 = -INFINITY;
              for (int ki = 0; ki < l->k; ki++)
                for (int kj = 0; kj < l->k; kj++) {
                  double v = pl[(oh * l->stride + ki) * l->in_w + ow * l->stride + kj];
                  if (v > v1) v2 = v1, v1 = v;
                  else if (v > v2) v2 = v;
                }
              /* Zeros from a ReLU tie harmlessly: the ReLU's backward stops the gradient either way. */
              if (v1 - v2 <= close && !(after_relu && v1 == 0.0)) cnt++;
            }
        }
    }
    free(a);
    if (cnt) {
      total += cnt;
      *flag_upto = j;
    }
  }
  return total;
}

/* ---- comparisons ------------------------------------------------------------------------------ */

typedef struct name_ctx {
  const nu_net *net;
  size_t off;
} name_ctx;
static void name_elem(const void *c, size_t i, char *out, size_t size) {
  const name_ctx *n = c;
  nu_param_name(n->net, n->off + i, out, size);
}

/* Every parameter tensor of `dev` against `ref`: tol = rel * max|ref tensor| (kink_rel for the tensors of
 * layers before flag_upto). Returns the number of tensors that fail. */
static int compare_tensors(const char *what, const nu_net *net, const float *dev, const float *ref, double rel,
                           int flag_upto, double kink_rel) {
  nu_tensor t[2 * NU_MAX_LAYERS];
  int nt = nu_tensors(net, t, 2 * NU_MAX_LAYERS), bad = 0;
  for (int k = 0; k < nt; k++) {
    const int loose = t[k].layer < flag_upto;
    const double tol = (loose ? kink_rel : rel) * nu_max_abs(ref + t[k].off, t[k].n) + 1e-12;
    char w[400];
    snprintf(w, sizeof w, "%.250s: %.47s%s", what, t[k].name, loose ? " (near-kink tolerance)" : "");
    name_ctx nc = {net, t[k].off};
    if (nu_compare(w, t[k].n, dev + t[k].off, ref + t[k].off, tol, name_elem, &nc, NULL)) bad++;
  }
  return bad;
}

/* Parameters after OPT_STEPS optimizer steps, per tensor.
 *   No near-kink at any step: tol = TOL_REL * max|p|. With Adam, up to 0.5% of a tensor (at least 2)
 *   may be off by up to 2*lr per step: an element whose gradient is near zero relative to the rounding
 *   difference gets its sign (and so a full lr step) from the rounding.
 *   A near-kink at some step: the two trajectories part from there on, in every tensor (a step on
 *   elements with different gradients changes the next forward), so every tensor gets
 *   tol = TOL_REL * max|p| + TOL_KINK * (its largest change over the steps). SGD is Lipschitz in the
 *   gradients and must still meet that everywhere. Adam is not: a kink that flips the sign of a small
 *   gradient moves its element a full lr the other way, and a whole output channel of small gradients
 *   can follow (seen with LAMINA_TEST_NN_PEER=cpu-jitter: 13% of a conv weight). So with Adam and a
 *   near-kink, up to 25% of a tensor may be off, each by at most 2*lr per step: a sanity bound only;
 *   the optimizer's arithmetic is held to the tight tolerance by the cases without near-kinks. */
static int compare_params_after(const char *what, const nu_net *net, const float *dev, const float *ref,
                                const float *p0, const lam_opt *o, int kinked) {
  nu_tensor t[2 * NU_MAX_LAYERS];
  int nt = nu_tensors(net, t, 2 * NU_MAX_LAYERS), bad = 0;
  for (int k = 0; k < nt; k++) {
    const float *d = dev + t[k].off, *r = ref + t[k].off, *s = p0 + t[k].off;
    double moved = 0.0;
    for (size_t i = 0; i < t[k].n; i++) moved = fmax(moved, fabs((double)r[i] - s[i]));
    const double tol = TOL_REL * nu_max_abs(r, t[k].n) + (kinked ? TOL_KINK * moved : 0.0) + 1e-12;
    const double adam_bound = 2.0 * OPT_STEPS * o->lr;
    const size_t frac = t[k].n / (kinked ? 4 : 200);
    const size_t adam_allow = o->kind == LAM_OPT_SGD ? 0 : (frac > 2 ? frac : 2);
    size_t over = 0, beyond = 0, worst = 0;
    double we = 0.0;
    for (size_t i = 0; i < t[k].n; i++) {
      double e = isfinite(d[i]) ? fabs((double)d[i] - r[i]) : INFINITY;
      if (!(e <= we)) we = e, worst = i;
      if (e > tol) {
        over++;
        if (!(e <= adam_bound)) beyond++;
      }
    }
    if (over > adam_allow || (over && o->kind == LAM_OPT_SGD) || beyond) {
      char nm[160];
      nu_param_name(net, t[k].off + worst, nm, sizeof nm);
      print_error("%s: %s%s: %zu of %zu elements over tol %.3g (%zu beyond %.3g; %zu allowed); worst %s: got %.9g, "
                  "want %.9g (started at %.9g)\n",
                  what, t[k].name, kinked ? " (near-kink tolerance)" : "", over, t[k].n, tol, beyond, adam_bound,
                  adam_allow, nm, d[worst], r[worst], s[worst]);
      bad++;
    } else if (over) {
      print_message("  %s: %s: %zu of %zu elements within Adam's allowance (worst err %.3g)\n", what, t[k].name, over,
                    t[k].n, we);
    }
  }
  return bad;
}

/* ---- one model ---------------------------------------------------------------------------------- */

typedef struct pair {
  lam_model *cpu, *dev;
  size_t n;
} pair;

/* LAMINA_TEST_NN_PEER=cpu-jitter: the peer's parameters are the reference's times 1 +- 2^-21 (a few
 * ulps), which makes differences of the size that another summation order makes: for checking that
 * the tolerances and the near-kink handling hold up, without a GPU. */
static int g_jitter;

static void set_peer_params(lam_model *dev, const float *P, size_t n) {
  if (!g_jitter) {
    TU_OK(lam_model_params_set(dev, P, n));
    return;
  }
  float *q = malloc((n ? n : 1) * sizeof *q);
  assert_non_null(q);
  uint64_t h = 0x5eed;
  for (size_t i = 0; i < n; i++) q[i] = P[i] * (1.0f + ((tu_splitmix64(&h) & 1) ? 0x1p-21f : -0x1p-21f));
  TU_OK(lam_model_params_set(dev, q, n));
  free(q);
}

static pair pair_create(const nc_model *md, uint64_t seed, const float *P) {
  pair p = {NULL, NULL, 0};
  TU_OK(lam_model_create(g_cpu, md->spec, md->c, md->h, md->w, seed, &p.cpu));
  TU_OK(lam_model_create(g_dev, md->spec, md->c, md->h, md->w, seed, &p.dev));
  p.n = lam_model_param_count(p.cpu);
  assert_int_equal(lam_model_param_count(p.dev), p.n);
  assert_int_equal(lam_model_outputs(p.dev), lam_model_outputs(p.cpu));
  if (P) {
    TU_OK(lam_model_params_set(p.cpu, P, p.n));
    set_peer_params(p.dev, P, p.n);
  }
  return p;
}

static void pair_free(pair *p) {
  lam_model_free(p->cpu);
  lam_model_free(p->dev);
}

/* Forward, loss and gradients at batch B. Returns the number of failed comparisons. */
static int check_forward_backward(const nu_net *net, pair *pr, int B, const float *x, const uint8_t *y,
                                  int flag_upto, const char *what) {
  const int C = lam_model_outputs(pr->cpu);
  const size_t n = pr->n, nl = (size_t)B * C;
  float *lc = malloc(nl * 4), *ld = malloc(nl * 4), *gc = malloc(n * 4), *gd = malloc(n * 4);
  assert_true(lc && ld && gc && gd);
  int bad = 0;
  tu_fill_nan(lc, nl);
  tu_fill_nan(ld, nl);
  TU_OK(lam_model_forward(pr->cpu, B, x, lc));
  TU_OK(lam_model_forward(pr->dev, B, x, ld));
  char w[300];
  snprintf(w, sizeof w, "%s: logits", what);
  if (nu_compare(w, nl, ld, lc, TOL_REL * nu_max_abs(lc, nl) + 1e-12, NULL, NULL, NULL)) bad++;

  float loss_c = NAN, loss_d = NAN;
  TU_OK(lam_model_loss_backward(pr->cpu, B, x, y, &loss_c));
  TU_OK(lam_model_loss_backward(pr->dev, B, x, y, &loss_d));
  if (!(fabs((double)loss_d - loss_c) <= TOL_REL * fmax(1.0, fabs(loss_c)))) {
    print_error("%s: loss %.9g on the device, %.9g on the CPU\n", what, loss_d, loss_c);
    bad++;
  }
  tu_fill_nan(gd, n);
  TU_OK(lam_model_grads_get(pr->cpu, gc, n));
  TU_OK(lam_model_grads_get(pr->dev, gd, n));
  snprintf(w, sizeof w, "%s: gradient", what);
  bad += compare_tensors(w, net, gd, gc, TOL_REL, flag_upto, TOL_KINK);
  free(lc);
  free(ld);
  free(gc);
  free(gd);
  return bad;
}

/* OPT_STEPS steps of `o` on fresh models from P, the same batch every step. */
static int check_optimizer(const nc_model *md, const nu_net *net, const float *P, uint64_t seed, int B,
                           const float *x, const uint8_t *y, const lam_opt *o, const char *oname, const char *what) {
  pair pr = pair_create(md, seed, P);
  const size_t n = pr.n;
  float *pc = malloc(n * 4), *pd = malloc(n * 4);
  assert_true(pc && pd);
  int kinked = 0, bad = 0;
  char w[320];
  for (int t = 0; t < OPT_STEPS; t++) {
    TU_OK(lam_model_params_get(pr.cpu, pc, n));
    int f = 0;
    if (near_kinks(net, pc, B, x, &f)) kinked = 1;
    float lc, ld;
    TU_OK(lam_model_loss_backward(pr.cpu, B, x, y, &lc));
    TU_OK(lam_model_loss_backward(pr.dev, B, x, y, &ld));
    /* The loss is continuous: rounding moves it by ~1e-6; after a near-kink the trajectories part by
     * ~lr in a few elements, so 1e-3 then. */
    if (!(fabs((double)ld - lc) <= (kinked ? 10 * TOL_REL : TOL_REL) * fmax(1.0, fabs(lc)))) {
      print_error("%s %s: loss before step %d: %.9g on the device, %.9g on the CPU\n", what, oname, t + 1, ld, lc);
      bad++;
    }
    TU_OK(lam_model_step(pr.cpu, o));
    TU_OK(lam_model_step(pr.dev, o));
  }
  TU_OK(lam_model_params_get(pr.cpu, pc, n));
  tu_fill_nan(pd, n);
  TU_OK(lam_model_params_get(pr.dev, pd, n));
  snprintf(w, sizeof w, "%s: parameters after %d %s steps", what, OPT_STEPS, oname);
  bad += compare_params_after(w, net, pd, pc, P, o, kinked);
  pair_free(&pr);
  free(pc);
  free(pd);
  return bad;
}

static void run_model(size_t mi) {
  const nc_model *md = &k_models[mi];
  nu_net net;
  nu_parse(md->spec, md->c, md->h, md->w, &net);
  const uint64_t seed = tu_case_seed(0xc0da + mi);
  /* The CPU model's initial parameters go into both; the device must hand them back bit for bit. */
  pair pr = pair_create(md, seed, NULL);
  const size_t n = pr.n, in = nu_in_size(&net);
  assert_int_equal(n, net.nparams);
  float *P = malloc(n * 4), *back = malloc(n * 4);
  assert_true(P && back);
  TU_OK(lam_model_params_get(pr.cpu, P, n));
  TU_OK(lam_model_params_set(pr.dev, P, n));
  TU_OK(lam_model_params_get(pr.dev, back, n));
  if (memcmp(P, back, n * 4)) fail_msg("'%s': parameters set on the device do not come back the same", md->spec);
  set_peer_params(pr.dev, P, n);

  /* Weight decays large enough to show: 5 steps of lr*wd*p must be well over 1e-4 of the tensor. */
  lam_opt adam = lam_opt_default(LAM_OPT_ADAM);
  lam_opt adamw = lam_opt_default(LAM_OPT_ADAMW);
  adamw.weight_decay = 0.5f;
  lam_opt sgd = lam_opt_default(LAM_OPT_SGD);
  sgd.momentum = 0.9f;
  sgd.weight_decay = 0.1f;
  int bad = 0;
  for (size_t bi = 0; bi < sizeof k_batches / sizeof k_batches[0]; bi++) {
    const int B = k_batches[bi];
    float *x = malloc((size_t)B * in * 4);
    uint8_t *y = malloc((size_t)B);
    assert_true(x && y);
    /* Of up to 8 draws of the inputs, the first without near-kinks (else the one with fewest), so that
     * the small cases are compared at the tight tolerance throughout. */
    int flag_upto = 0, draw = 0;
    size_t kinks = SIZE_MAX;
    for (int d = 0; d < 8 && kinks; d++) {
      tu_rng r;
      tu_rng_seed(&r, seed ^ (uint64_t)B ^ ((uint64_t)d << 32));
      nu_fill_normal(&r, x, (size_t)B * in, 1.0);
      int f = 0;
      size_t k = near_kinks(&net, P, B, x, &f);
      if (k < kinks) kinks = k, flag_upto = f, draw = d;
    }
    tu_rng r;
    tu_rng_seed(&r, seed ^ (uint64_t)B ^ ((uint64_t)draw << 32));
    nu_fill_normal(&r, x, (size_t)B * in, 1.0);
    nu_fill_labels(&r, y, B, nu_classes(&net));
    char what[256];
    snprintf(what, sizeof what, "'%s' on %dx%dx%d batch %d seed %#llx draw %d", md->spec, md->c, md->h, md->w, B,
             (unsigned long long)seed, draw);
    /* The same pair of models across batches 1, 7, 64: the batch buffers grow in between. */
    bad += check_forward_backward(&net, &pr, B, x, y, flag_upto, what);
    bad += check_optimizer(md, &net, P, seed, B, x, y, &adam, "adam", what);
    bad += check_optimizer(md, &net, P, seed, B, x, y, &sgd, "sgd-momentum", what);
    bad += check_optimizer(md, &net, P, seed, B, x, y, &adamw, "adamw", what);
    char note[128] = "no near-kinks";
    if (kinks)
      snprintf(note, sizeof note, "%zu near-kinks, the last at layer %d: the tensors before it at %.0e", kinks,
               flag_upto + 1, TOL_KINK);
    print_message("  %-84s batch %2d: %s\n", md->spec, B, note);
    free(x);
    free(y);
  }
  pair_free(&pr);
  free(P);
  free(back);
  if (bad) fail_msg("'%s': %d comparisons failed", md->spec, bad);
}

static void test_models_small(void **state) {
  (void)state;
  for (size_t i = 0; i + 2 < N_MODELS; i++)
    if (tu_shard_take(i)) run_model(i);
}
static void test_preset_cnn(void **state) { (void)state; run_model(N_MODELS - 2); }
static void test_preset_mlp(void **state) { (void)state; run_model(N_MODELS - 1); }

/* ---- lam_backprop_step on device memory ------------------------------------------------------- */

/* w - lr*error*input: against float64 within 4 ulps of max(|w|, |lr*error*input|) (an FMA rounds once
 * where the CPU rounds three times), and against the CPU backend within the same bound. Device pointers
 * at an offset of one element too. */
static void test_backprop_step(void **state) {
  (void)state;
  static const size_t sizes[] = {1, 5, 1000, ((size_t)1 << 20) + 3};
  for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
    for (size_t lead = 0; lead < 2; lead++) {
      const size_t n = sizes[si], tot = n + lead;
      const float lr = 0.05f;
      float *e = malloc(tot * 4), *in = malloc(tot * 4), *w = malloc(tot * 4), *od = malloc(tot * 4),
            *oc = malloc(tot * 4);
      assert_true(e && in && w && od && oc);
      tu_rng r;
      tu_rng_seed(&r, tu_case_seed(0xb5 + n * 2 + lead));
      nu_fill_normal(&r, e, tot, 1.0);
      nu_fill_normal(&r, in, tot, 2.0);
      nu_fill_normal(&r, w, tot, 0.5);
      lam_ctx *ctxs[2] = {g_dev, g_cpu};
      float *outs[2] = {od, oc};
      for (int k = 0; k < 2; k++) {
        void *de, *di, *dw;
        TU_OK(lam_mem_alloc(ctxs[k], &de, tot * 4));
        TU_OK(lam_mem_alloc(ctxs[k], &di, tot * 4));
        TU_OK(lam_mem_alloc(ctxs[k], &dw, tot * 4));
        TU_OK(lam_mem_upload(ctxs[k], de, e, tot * 4));
        TU_OK(lam_mem_upload(ctxs[k], di, in, tot * 4));
        TU_OK(lam_mem_upload(ctxs[k], dw, w, tot * 4));
        TU_OK(lam_backprop_step(ctxs[k], n, (float *)de + lead, (float *)di + lead, lr, (float *)dw + lead));
        TU_OK(lam_ctx_sync(ctxs[k])); /* asynchronous on CUDA */
        TU_OK(lam_mem_download(ctxs[k], outs[k], dw, tot * 4));
        TU_OK(lam_mem_free(ctxs[k], de));
        TU_OK(lam_mem_free(ctxs[k], di));
        TU_OK(lam_mem_free(ctxs[k], dw));
      }
      size_t bad = 0;
      if (lead && od[0] != w[0]) fail_msg("backprop_step n=%zu at offset 1 wrote before its array", n);
      for (size_t i = lead; i < tot; i++) {
        double step = (double)lr * e[i] * in[i], want = (double)w[i] - step;
        double tol = 4 * FLT_EPSILON * fmax(fabs((double)w[i]), fabs(step)) + 1e-30;
        if (!(fabs(od[i] - want) <= tol && fabs(od[i] - oc[i]) <= tol) && bad++ < 3)
          print_error("backprop_step n=%zu offset %zu: w[%zu]: device %.9g, cpu %.9g, float64 %.9g\n", n, lead,
                      i - lead, od[i], oc[i], want);
      }
      if (bad) fail_msg("backprop_step n=%zu offset %zu: %zu of %zu wrong", n, lead, bad, n);
      free(e);
      free(in);
      free(w);
      free(od);
      free(oc);
    }
}

int main(void) {
  const char *peer = getenv("LAMINA_TEST_NN_PEER");
  const int self_check = peer && (!strcmp(peer, "cpu") || !strcmp(peer, "cpu-jitter"));
  g_jitter = self_check && !strcmp(peer, "cpu-jitter");
  if (!self_check) {
    const char *why = NULL;
    if (lam_cuda_device_count(&why) == 0) {
      printf("test_nn_cuda: skipped: no CUDA device (%s)\n", why && *why ? why : "no reason given");
      return 77; /* CTest SKIP_RETURN_CODE */
    }
  }
  lam_status st = lam_ctx_create(&g_cpu, LAM_DEVICE_CPU);
  if (st == LAM_OK) st = lam_ctx_create(&g_dev, self_check ? LAM_DEVICE_CPU : LAM_DEVICE_CUDA);
  if (st != LAM_OK) {
    fprintf(stderr, "test_nn_cuda: lam_ctx_create failed: %s: %s\n", lam_status_str(st), lam_last_error());
    return 1;
  }
  printf("test_nn_cuda: %s against %s%s\n", lam_ctx_device_name(g_dev), lam_ctx_device_name(g_cpu),
         self_check ? " (LAMINA_TEST_NN_PEER: checking the test itself)" : "");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_models_small),
      cmocka_unit_test(test_preset_cnn),
      cmocka_unit_test(test_preset_mlp),
      cmocka_unit_test(test_backprop_step),
  };
  int failed = TU_RUN_GROUP("nn_cuda", tests, NULL, NULL);
  lam_ctx_free(g_dev);
  lam_ctx_free(g_cpu);
  return failed ? 1 : 0;
}
