/* act.c — test_prims' activations: act_fwd and act_bwd (relu, tanh, sigmoid, gelu, leaky; in place too), dropout's
 * mask (dropout_mask) and NaN through every relu (act, bn_act, conv_pool and conv_pool_direct's); mask_scale's
 * runner (its case: test_elementwise, layout.c). */
#include "prims_test.h"

/* ---- activations ---- */

void run_act(lam_ctx *ctx, int bwd, int act, float alpha, size_t n, const float *x, const float *y,
             const float *dy, float *out, int inplace) {
  float *dx_ = dput(ctx, x, n * 4), *dy_ = dput(ctx, y, n * 4), *dg = dput(ctx, dy, n * 4), *dout;
  /* in place: forward writes over x, backward over dy */
  dout = inplace ? (bwd ? dg : dx_) : dput(ctx, out, n * 4);
  void *fx = fin_flat(ctx, dx_, n), *fy = fin_flat(ctx, dy_, n), *fg = fin_flat(ctx, dg, n);
  void *fo = inplace ? (bwd ? fg : fx) : fin_flat(ctx, dout, n);
  if (bwd) TU_OK(BE(ctx)->act_bwd(ctx, g_fmt, act, alpha, n, act == LAM_ACT_GELU ? fx : NULL, act == LAM_ACT_GELU ? NULL : fy,
                                  fg, fo));
  else TU_OK(BE(ctx)->act_fwd(ctx, g_fmt, act, alpha, n, fx, fo));
  if (!inplace) fout_flat(ctx, fo, dout, n, "act out (format)");
  fout_flat(ctx, fx, dx_, n, "act x (format)"), fout_flat(ctx, fy, dy_, n, "act y (format)");
  fout_flat(ctx, fg, dg, n, "act dy (format)");
  dget(ctx, out, dout, n * 4, bwd ? "act_bwd" : "act_fwd");
  dfree(ctx, dx_), dfree(ctx, dy_), dfree(ctx, dg);
  if (!inplace) dfree(ctx, dout);
}

typedef struct act_fd {
  int act;
  float alpha;
} act_fd;
static void act_loss(const void *a, const float *x, double *loss) { /* x is one value here */
  const act_fd *f = a;
  float y;
  TU_OK(BE(g_ctx)->act_fwd(g_ctx, LAM_FMT_NCHW, f->act, f->alpha, 1, x, &y));
  *loss = y;
}

static void test_act(void **state) {
  (void)state;
  static const size_t ns[] = {1, 37, 40000};
  const float alpha = 0.07f;
  uint64_t k = 0;
  for (int act = 0; act <= LAM_ACT_LEAKY; act++)
    for (size_t c = 0; c < 3; c++)
      for (int inplace = 0; inplace < 2; inplace++) {
        seed_case("act", k++);
        size_t n = ns[c];
        char what[120];
        float *x = frand(n, -5, 5), *dy = frand(n, -1, 1);
        double *ref = dzero(n), *scale = dzero(n), *gref = dzero(n), *gscale = dzero(n);
        float *yf = xmalloc(n * 4); /* the float output the backward reads */
        for (size_t i = 0; i < n; i++) {
          ref[i] = act_ref(act, alpha, x[i]);
          yf[i] = (float)ref[i];
          /* gelu's 1 + erf(x / sqrt 2) cancels for negative x: its error is of x's size */
          scale[i] = act == LAM_ACT_GELU ? fabs(x[i]) : fabs(ref[i]);
          double y = yf[i];
          switch (act) { /* from the output y (as the primitive), or x for gelu */
            case LAM_ACT_RELU: gref[i] = y > 0 ? dy[i] : 0; break;
            case LAM_ACT_LEAKY: gref[i] = y > 0 ? dy[i] : (double)alpha * dy[i]; break;
            case LAM_ACT_TANH: gref[i] = dy[i] * (1 - y * y); break;
            case LAM_ACT_SIGMOID: gref[i] = dy[i] * y * (1 - y); break;
            default: gref[i] = dy[i] * act_grad_ref(act, alpha, x[i]);
          }
          /* 1 - y^2 and y (1 - y) lose digits near saturation: the error is of |dy| times the terms' size */
          gscale[i] = act == LAM_ACT_RELU || act == LAM_ACT_LEAKY ? fabs(gref[i]) : fabs(dy[i]) * (fabs(gref[i] / dy[i]) + 1);
        }
        float *got = fnan(n), *cpu = g_cuda ? fnan(n) : NULL;
        run_act(g_ctx, 0, act, alpha, n, x, NULL, NULL, got, inplace);
        if (g_cuda) run_act(g_cpu, 0, act, alpha, n, x, NULL, NULL, cpu, inplace);
        snprintf(what, sizeof what, "act_fwd %s n=%zu%s", act_name(act), n, inplace ? " in place" : "");
        /* float tanhf, expf, erff: a few ulps (CUDA's within 2 ulps of the correctly rounded value) */
        verify(what, n, got, ref, cpu, scale, 1e-6, 2e-6);
        free(got), free(cpu);
        got = fnan(n), cpu = g_cuda ? fnan(n) : NULL;
        run_act(g_ctx, 1, act, alpha, n, x, yf, dy, got, inplace);
        if (g_cuda) run_act(g_cpu, 1, act, alpha, n, x, yf, dy, cpu, inplace);
        snprintf(what, sizeof what, "act_bwd %s n=%zu%s", act_name(act), n, inplace ? " in place" : "");
        verify(what, n, got, gref, cpu, gscale, 1e-6, 2e-6);
        if (!g_cuda && n == 37 && !inplace) { /* act_bwd(dy = 1) against central differences of act_fwd */
          float *one = xmalloc(n * 4), *g1 = fnan(n);
          for (size_t i = 0; i < n; i++) {
            one[i] = 1.0f;
            if (fabsf(x[i]) < 0.1f) x[i] = x[i] < 0 ? -0.5f : 0.5f; /* away from relu's and leaky's kink */
            yf[i] = (float)act_ref(act, alpha, x[i]);
          }
          run_act(g_ctx, 1, act, alpha, n, x, yf, one, g1, 0);
          act_fd af = {act, alpha};
          for (size_t i = 0; i < n; i++) check_fd(what, 1, x + i, g1 + i, act_loss, &af, 1e-2, 1e-4, 1e-3);
          free(one), free(g1);
        }
        free(x), free(dy), free(ref), free(scale), free(gref), free(gscale), free(yf), free(got), free(cpu);
      }
}

/* ---- dropout: its mask, mask_scale ---- */

static void run_dropout(lam_ctx *ctx, size_t n, float p, uint64_t seed, const int32_t *ctr, uint8_t *mask) {
  int32_t *dc = dput(ctx, ctr, 4);
  uint8_t *dm = dput(ctx, mask, n);
  TU_OK(BE(ctx)->dropout_mask(ctx, n, p, seed, dc, dm));
  dget(ctx, mask, dm, n, "dropout_mask");
  dfree(ctx, dc), dfree(ctx, dm);
}

static void test_dropout_mask(void **state) {
  (void)state;
  static const size_t ns[] = {1, 1000, 100003};
  static const float ps[] = {0.0f, 0.25f, 0.5f, 1.0f};
  uint64_t k = 0;
  for (size_t c = 0; c < 3; c++)
    for (size_t pi = 0; pi < 4; pi++)
      for (int with_ctr = 0; with_ctr < 2; with_ctr++) {
        seed_case("dropout_mask", k++);
        size_t n = ns[c];
        float p = ps[pi];
        uint64_t seed = tu_next(&g_r);
        int32_t ctr = with_ctr ? 7 : 0;
        char what[120];
        snprintf(what, sizeof what, "dropout_mask n=%zu p=%g ctr=%s", n, p, with_ctr ? "7" : "NULL");
        uint8_t *ref = xmalloc(n), *got = u8rand(n, 2, 200), *cpu = u8rand(n, 2, 200);
        uint64_t key = lam_draw_key(seed, ctr);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) ref[i] = lam_draw_uniform(key, i) >= p, kept += ref[i];
        run_dropout(g_ctx, n, p, seed, with_ctr ? &ctr : NULL, got);
        if (g_cuda) run_dropout(g_cpu, n, p, seed, with_ctr ? &ctr : NULL, cpu);
        verify_bytes(what, n, 1, got, ref, cpu); /* bit for bit: the same hash on both */
        if (n > 1000) { /* the fraction kept is 1 - p within 5 standard deviations */
          double f = (double)kept / n, sd = sqrt(p * (1.0 - p) / n);
          if (fabs(f - (1.0 - p)) > 5 * sd + 1e-12) fail_msg("%s: kept %.5f, want %.5f +- %.5f", what, f, 1.0 - p, 5 * sd);
        }
        if (with_ctr && p == 0.5f && n > 1000) { /* the next counter draws another mask */
          int32_t ctr2 = ctr + 1;
          uint8_t *m2 = u8rand(n, 2, 200);
          run_dropout(g_ctx, n, p, seed, &ctr2, m2);
          size_t same = 0;
          for (size_t i = 0; i < n; i++) same += m2[i] == got[i];
          if (fabs((double)same / n - 0.5) > 0.02) fail_msg("%s: counter 8 agrees with 7 on %zu of %zu", what, same, n);
          free(m2);
        }
        free(ref), free(got), free(cpu);
      }
}

void run_mask_scale(lam_ctx *ctx, size_t n, const float *x, const uint8_t *mask, float scale, float *y,
                    int inplace) {
  float *dx = dput(ctx, x, n * 4), *dy = inplace ? dx : dput(ctx, y, n * 4);
  uint8_t *dm = dput(ctx, mask, n);
  void *fx = fin_flat(ctx, dx, n), *fy = inplace ? fx : fin_flat(ctx, dy, n);
  TU_OK(BE(ctx)->mask_scale(ctx, g_fmt, n, fx, dm, scale, fy));
  if (!inplace) fout_flat(ctx, fx, dx, n, "mask_scale x (format)");
  fout_flat(ctx, fy, dy, n, "mask_scale y (format)");
  dget(ctx, y, dy, n * 4, "mask_scale");
  dfree(ctx, dx), dfree(ctx, dm);
  if (!inplace) dfree(ctx, dy);
}

/* ---- NaN through every relu (issue 30, finding 9): relu(NaN) is NaN as PyTorch's, in act_fwd (the format
 * under test and bfloat16 NHWC), bn_act_fwd, conv_pool_fwd and conv_pool_direct_fwd; and the backward passes
 * the gradient where the output is NaN (PyTorch's threshold_backward: y <= 0 gives 0, else dy) instead of
 * hiding it behind a 0. A relu that maps NaN to 0 lets a NaN weight train on unseen and be saved. ---- */

/* Fails unless v is NaN. */
static void want_nan(const char *what, size_t i, float v) {
  if (!isnan(v)) fail_msg("%s: element %zu is %g where the input was NaN: relu must let NaN through", what, i, v);
}

static void relu_nan_act(int bf16) {
  const size_t n = 41;
  char what[96];
  for (int act = LAM_ACT_RELU; act <= LAM_ACT_LEAKY; act += LAM_ACT_LEAKY - LAM_ACT_RELU) {
    const float alpha = act == LAM_ACT_LEAKY ? 0.1f : 0.0f;
    float *x = frand16(n, -2, 2), *y = fnan(n), *dy = frand16(n, -1, 1), *dx = fnan(n);
    for (size_t i = 0; i < n; i += 4) x[i] = NAN;
    if (bf16) IN_BF16(run_act(g_ctx, 0, act, alpha, n, x, NULL, NULL, y, 0));
    else run_act(g_ctx, 0, act, alpha, n, x, NULL, NULL, y, 0);
    snprintf(what, sizeof what, "act_fwd %s%s", act_name(act), bf16 ? " bf16" : "");
    for (size_t i = 0; i < n; i += 4) want_nan(what, i, y[i]);
    if (bf16) IN_BF16(run_act(g_ctx, 1, act, alpha, n, x, y, dy, dx, 0));
    else run_act(g_ctx, 1, act, alpha, n, x, y, dy, dx, 0);
    snprintf(what, sizeof what, "act_bwd %s%s", act_name(act), bf16 ? " bf16" : "");
    for (size_t i = 0; i < n; i += 4) { /* torch: relu passes dy, leaky (NaN > 0 false) alpha dy */
      const float want = act == LAM_ACT_RELU ? dy[i] : alpha * dy[i];
      if (!(fabsf(dx[i] - want) <= 1e-6f + (bf16 ? 1.0f / 128 : 1e-6f) * fabsf(want)))
        fail_msg("%s: dx[%zu] = %g where y is NaN, want dy's %g (the gradient hidden)", what, i, dx[i], want);
    }
    free(x), free(y), free(dy), free(dx);
  }
}

static void relu_nan_bn_act(int bf16) {
  const int B = 2, C = 3, P = 5;
  const size_t n = (size_t)B * C * P;
  char what[96];
  snprintf(what, sizeof what, "bn_act_fwd relu (evaluation)%s", bf16 ? " bf16" : "");
  float *x = frand16(n, -2, 2), *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -0.5, 0.5);
  for (size_t i = 1; i < n; i += 3) x[i] = NAN;
  bn_bufs o = {fnan(n), NULL, NULL, frand(C, -0.2, 0.2), frand(C, 0.5, 2)};
  if (bf16) IN_BF16(run_bn_act_fwd(g_ctx, B, C, P, LAM_ACT_RELU, 0.0f, x, gamma, beta, &o, 0.1f, 1e-5f, 0));
  else run_bn_act_fwd(g_ctx, B, C, P, LAM_ACT_RELU, 0.0f, x, gamma, beta, &o, 0.1f, 1e-5f, 0);
  for (size_t i = 1; i < n; i += 3) want_nan(what, i, o.y[i]);
  /* backward: x, so z, and y NaN in all of channel 0, as the forward would have made them (relu's dz comes from y
   * where it is given, from z where not), so dbeta[0] += sum(dz) is the sum of dy there (0 if hidden) */
  float *y = frand16(n, 0.1, 2), *dy = frand16(n, -1, 1), *dx = fnan(n), *mean = frand(C, -0.1, 0.1),
        *invstd = frand(C, 0.5, 2), *dg = frand(C, -1, 1), *db = fnan(C), *xf = frand16(n, -2, 2);
  for (int c = 0; c < C; c++) db[c] = 0.0f;
  double want = 0;
  for (int b = 0; b < B; b++)
    for (int p = 0; p < P; p++) {
      const size_t i = ((size_t)b * C) * P + p;
      xf[i] = NAN, y[i] = NAN, want += dy[i];
    }
  if (bf16) IN_BF16(run_bn_act_bwd(g_ctx, B, C, P, LAM_ACT_RELU, 0.0f, xf, y, dy, gamma, beta, mean, invstd, dx, dg, db));
  else run_bn_act_bwd(g_ctx, B, C, P, LAM_ACT_RELU, 0.0f, xf, y, dy, gamma, beta, mean, invstd, dx, dg, db);
  snprintf(what, sizeof what, "bn_act_bwd relu%s", bf16 ? " bf16" : "");
  if (!(fabs(db[0] - want) <= 1e-2 * (1 + fabs(want))))
    fail_msg("%s: dbeta of a channel whose y is NaN is %g, want the sum of its dy %g (the gradient hidden)", what,
             db[0], want);
  free(x), free(gamma), free(beta), free(o.y), free(o.rm), free(o.rv), free(y), free(dy), free(dx), free(mean);
  free(invstd), free(dg), free(db), free(xf);
}

/* conv_pool_fwd from G with NaN in some windows: those outputs NaN; conv_pool_bwd routes dy to their argmax
 * (float and bfloat16 dG). */
static void relu_nan_conv_pool(void) {
  const lam_pool_geom g = {2, 6, 8, 2, 2, 3, 4};
  const int B = 2;
  const size_t nG = (size_t)g.C * B * g.H * g.W, ny = (size_t)B * g.C * g.OH * g.OW, P = (size_t)g.H * g.W;
  float *G = frand(nG, -1, 1), *bias = frand(g.C, -0.5, 0.5), *y = fnan(ny), *dy = frand(ny, 0.5, 1);
  for (size_t i = 0; i < nG; i += 7) G[i] = NAN;
  int32_t *arg = xmalloc(ny * 4);
  float *dG_ = dput(g_ctx, G, nG * 4), *db_ = dput(g_ctx, bias, g.C * 4), *dy_ = dput(g_ctx, y, ny * 4);
  int32_t *da = dput(g_ctx, arg, ny * 4);
  TU_OK(BE(g_ctx)->conv_pool_fwd(g_ctx, &g, B, dG_, db_, dy_, da));
  dget(g_ctx, y, dy_, ny * 4, "conv_pool_fwd"), dget(g_ctx, arg, da, ny * 4, "conv_pool_fwd");
  size_t nans = 0;
  for (int b = 0; b < B; b++)
    for (int c = 0; c < g.C; c++)
      for (int oh = 0; oh < g.OH; oh++)
        for (int ow = 0; ow < g.OW; ow++) {
          int has = 0;
          for (int a = 0; a < 2; a++)
            for (int e = 0; e < 2; e++) has |= isnan(G[(size_t)c * B * P + (size_t)b * P + (2 * oh + a) * g.W + 2 * ow + e]);
          size_t o = (((size_t)b * g.C + c) * g.OH + oh) * g.OW + ow;
          if (has) want_nan("conv_pool_fwd", o, y[o]), nans++;
        }
  if (!nans) fail_msg("conv_pool_fwd: no window held a NaN: the test would prove little");
  float *ddy = dput(g_ctx, dy, ny * 4);
  for (int bf16 = 0; bf16 < 2; bf16++) {
    const size_t es = bf16 ? 2 : 4;
    void *gout = dput(g_ctx, G, nG * es), *h = xmalloc(nG * es);
    TU_OK(BE(g_ctx)->conv_pool_bwd(g_ctx, &g, B, ddy, dy_, da, gout, bf16 ? g_half : LAM_DT_F32, NULL));
    dget(g_ctx, h, gout, nG * es, "conv_pool_bwd");
    for (size_t o = 0; o < ny; o++) {
      if (!isnan(y[o])) continue;
      size_t b = o / ((size_t)g.C * g.OH * g.OW), c = o / ((size_t)g.OH * g.OW) % g.C;
      size_t at = c * B * P + b * P + (size_t)arg[o];
      float got = bf16 ? lam_half_to_f32(g_half, ((uint16_t *)h)[at]) : ((float *)h)[at];
      if (!(fabsf(got - dy[o]) <= (bf16 ? 1.0f / 128 : 0.0f) * fabsf(dy[o])))
        fail_msg("conv_pool_bwd bf16=%d: dG at the argmax of NaN output %zu is %g, want dy's %g", bf16, o, got, dy[o]);
    }
    dfree(g_ctx, gout), free(h);
  }
  dfree(g_ctx, dG_), dfree(g_ctx, db_), dfree(g_ctx, dy_), dfree(g_ctx, da), dfree(g_ctx, ddy);
  free(G), free(bias), free(y), free(dy), free(arg);
}

/* conv_pool_direct_fwd with a NaN weight in output channel 0: all its outputs NaN; conv_pool_direct_bwd adds
 * their dy to db[0]. Two geometries: the MNIST-sized first layer (C 1, K 3, no padding, CUDA's own kernel) and
 * a padded 2-channel one. */
static void relu_nan_direct(void) {
  static const int geo[][4] = {{1, 10, 3, 0}, {2, 8, 3, 1}}; /* C, H (= W), K, pad */
  for (int s = 0; s < 2; s++) {
    const int C = geo[s][0], H = geo[s][1], K = geo[s][2], pad = geo[s][3], OC = 9, B = 2;
    const int OH = H + 2 * pad - K + 1, taps = C * K * K;
    const lam_conv_geom cg = {C, H, H, K, 1, pad, OH, OH};
    const lam_pool_geom pg = {OC, OH, OH, 2, 2, OH / 2, OH / 2};
    const size_t nx = (size_t)B * C * H * H, nw = (size_t)OC * taps, OP = (size_t)pg.OH * pg.OW, ny = (size_t)B * OC * OP;
    float *x = frand(nx, -1, 1), *w = frand(nw, -0.5, 0.5), *bias = frand(OC, -0.1, 0.1), *y = fnan(ny);
    float *dy = frand(ny, 0.5, 1), *dW = fnan(nw), *db = fnan(OC);
    w[taps / 2] = NAN;
    for (size_t i = 0; i < nw; i++) dW[i] = 0.0f;
    for (int c = 0; c < OC; c++) db[c] = 0.0f;
    int32_t *arg = xmalloc(ny * 4);
    const size_t nwork = lam_direct_work_floats(OC, taps, (size_t)B * OP);
    float *work = fnan(nwork);
    float *d_x = dput(g_ctx, x, nx * 4), *d_w = dput(g_ctx, w, nw * 4), *d_b = dput(g_ctx, bias, OC * 4),
          *d_y = dput(g_ctx, y, ny * 4), *d_dy = dput(g_ctx, dy, ny * 4), *d_dW = dput(g_ctx, dW, nw * 4),
          *d_db = dput(g_ctx, db, OC * 4), *d_work = dput(g_ctx, work, nwork * 4);
    int32_t *d_a = dput(g_ctx, arg, ny * 4);
    TU_OK(BE(g_ctx)->conv_pool_direct_fwd(g_ctx, &cg, &pg, B, d_x, d_w, d_b, d_y, d_a));
    dget(g_ctx, y, d_y, ny * 4, "conv_pool_direct_fwd");
    char what[96];
    snprintf(what, sizeof what, "conv_pool_direct_fwd C=%d K=%d pad=%d", C, K, pad);
    double want = 0;
    for (int b = 0; b < B; b++)
      for (size_t k = 0; k < OP; k++) want_nan(what, (size_t)b * OC * OP + k, y[(size_t)b * OC * OP + k]), want += dy[(size_t)b * OC * OP + k];
    TU_OK(BE(g_ctx)->conv_pool_direct_bwd(g_ctx, &cg, &pg, B, d_x, d_dy, d_y, d_a, d_dW, d_db, d_work));
    dget(g_ctx, db, d_db, OC * 4, "conv_pool_direct_bwd");
    if (!(fabs(db[0] - want) <= 1e-5 * (1 + fabs(want))))
      fail_msg("conv_pool_direct_bwd C=%d K=%d: db of the channel whose outputs are NaN is %g, want the sum of their dy "
               "%g (the gradient hidden)", C, K, db[0], want);
    dfree(g_ctx, d_x), dfree(g_ctx, d_w), dfree(g_ctx, d_b), dfree(g_ctx, d_y), dfree(g_ctx, d_dy), dfree(g_ctx, d_dW);
    dfree(g_ctx, d_db), dfree(g_ctx, d_work), dfree(g_ctx, d_a);
    free(x), free(w), free(bias), free(y), free(dy), free(dW), free(db), free(arg), free(work);
  }
}

/* bn_act_bwd forms relu's and leaky's dz from z where neither a residual nor y is given: z > zt, the largest value
 * y's type rounds to 0 (act.h). With mean 0, invstd 1 and gamma 0.5, z is half an x of k units of the type's smallest
 * subnormal u (2^-149 in float, 2^-133 in bfloat16, 2^-24 in IEEE half), so k = 1 gives z = u/2, which y's type
 * rounds (a tie, to even) to 0: masked, as y = 0 would mask it; k >= 2 passes; k <= 0 is masked. Channel 0 holds
 * k = 1, -1, 0, 1 (dbeta 0), channel 1 k = 2, 3, 4, 1 (dbeta the sum of its first three dy); leaky scales the
 * masked ones by alpha instead. The mask placed a value away would fail one of the two. */
static void relu_zero_bound(int dt) {
  const int B = 1, C = 2, P = 4;
  const size_t n = (size_t)B * C * P;
  const double u = dt == LAM_DT_F16 ? 0x1p-24 : dt == LAM_DT_BF16 ? 0x1p-133 : 0x1p-149;
  static const int k[8] = {1, -1, 0, 1, 2, 3, 4, 1};
  char what[96];
  for (int act = LAM_ACT_RELU; act <= LAM_ACT_LEAKY; act += LAM_ACT_LEAKY - LAM_ACT_RELU) {
    const float alpha = act == LAM_ACT_LEAKY ? 0.25f : 0.0f;
    float x[8], dy[8], dx[8], gamma[2] = {0.5f, 0.5f}, beta[2] = {0, 0}, mean[2] = {0, 0}, invstd[2] = {1, 1};
    float dg[2] = {0, 0}, db[2] = {0, 0};
    for (size_t i = 0; i < n; i++) x[i] = (float)(k[i] * u), dy[i] = (float)(i + 1) * 0.125f; /* exact in each type */
    if (dt == LAM_DT_F32) run_bn_act_bwd(g_ctx, B, C, P, act, alpha, x, NULL, dy, gamma, beta, mean, invstd, dx, dg, db);
    else {
      const int keep = g_half;
      g_half = dt;
      IN_BF16(run_bn_act_bwd(g_ctx, B, C, P, act, alpha, x, NULL, dy, gamma, beta, mean, invstd, dx, dg, db));
      g_half = keep;
    }
    double want[2] = {0, 0};
    for (size_t i = 0; i < n; i++) want[i / P] += k[i] >= 2 ? dy[i] : alpha * dy[i];
    snprintf(what, sizeof what, "bn_act_bwd %s %s at z = u/2", act_name(act), dt == LAM_DT_F32 ? "f32" : dt == LAM_DT_F16 ? "f16" : "bf16");
    for (int c = 0; c < C; c++)
      if (!(fabs(db[c] - want[c]) <= 1e-6 * (1 + fabs(want[c]))))
        fail_msg("%s: dbeta[%d] is %g, want %g: relu's mask from z differs from the one the stored y gives", what, c,
                 db[c], want[c]);
  }
}

static void test_relu_nan(void **state) {
  (void)state;
  seed_case("relu_nan", 0);
  relu_nan_act(0), relu_nan_act(1);
  relu_nan_bn_act(0), relu_nan_bn_act(1);
  relu_nan_conv_pool();
  relu_nan_direct();
  relu_zero_bound(LAM_DT_F32), relu_zero_bound(LAM_DT_BF16), relu_zero_bound(LAM_DT_F16);
}

const struct CMUnitTest *prims_act_tests(size_t *n) {
  static const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_act),
      cmocka_unit_test(test_dropout_mask),
      cmocka_unit_test(test_relu_nan),
  };
  *n = sizeof tests / sizeof tests[0];
  return tests;
}
