/* optim.c — test_prims' optimizer steps: adam and sgd (weight decay, momentum, a schedule), the loss scaling of
 * the fp16 trainer (grad_check, scaler_update, the optimizers' skip and unscale, xent's lscale), step_advance and
 * backprop_step. */
#include "prims_test.h"

/* ---- optimizers, the trainer's step, backprop_step ---- */

typedef struct opt_bufs {
  float *p, *m, *v; /* v unused by SGD */
} opt_bufs;

static void run_adam(lam_ctx *ctx, size_t n, opt_bufs *o, const float *g, float lr, float b1, float b2, float eps,
                     float wd, int decoupled, long step, const float *sched, const int32_t *kk, const lam_scaler *ls) {
  float *dp = dput(ctx, o->p, n * 4), *dg = dput(ctx, g, n * 4), *dm = dput(ctx, o->m, n * 4), *dv = dput(ctx, o->v, n * 4);
  float *ds = dput(ctx, sched, 9 * 4);
  int32_t *dk = dput(ctx, kk, 4);
  lam_scaler *dls = dput(ctx, ls, sizeof *ls);
  TU_OK(BE(ctx)->adam(ctx, n, dp, dg, dm, dv, lr, b1, b2, eps, wd, decoupled, step, ds, dk, dls));
  dfree(ctx, dls);
  dget(ctx, o->p, dp, n * 4, "adam p");
  dget(ctx, o->m, dm, n * 4, "adam m");
  dget(ctx, o->v, dv, n * 4, "adam v");
  dfree(ctx, dp), dfree(ctx, dg), dfree(ctx, dm), dfree(ctx, dv), dfree(ctx, ds), dfree(ctx, dk);
}
static void run_sgd(lam_ctx *ctx, size_t n, opt_bufs *o, const float *g, float lr, float mom, float wd, int first,
                    const float *sched, const int32_t *kk, const lam_scaler *ls) {
  float *dp = dput(ctx, o->p, n * 4), *dg = dput(ctx, g, n * 4), *dm = dput(ctx, o->m, n * 4), *ds = dput(ctx, sched, 9 * 4);
  int32_t *dk = dput(ctx, kk, 4);
  lam_scaler *dls = dput(ctx, ls, sizeof *ls);
  TU_OK(BE(ctx)->sgd(ctx, n, dp, dg, dm, lr, mom, wd, first, ds, dk, dls));
  dfree(ctx, dls);
  dget(ctx, o->p, dp, n * 4, "sgd p");
  dget(ctx, o->m, dm, n * 4, "sgd buf");
  dfree(ctx, dp), dfree(ctx, dg), dfree(ctx, dm), dfree(ctx, ds), dfree(ctx, dk);
}

static void test_optimizers(void **state) {
  (void)state;
  static const size_t ns[] = {1, 37, 40001};
  uint64_t k = 0;
  for (size_t c = 0; c < 3; c++)
    for (int v = 0; v < 8; v++) { /* bit 0: weight decay; bit 1: decoupled (Adam) / momentum (SGD); bit 2: sched */
      seed_case("optimizers", k++);
      size_t n = ns[c];
      char what[160];
      float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = v & 1 ? 0.01f : 0.0f;
      int decoupled = (v >> 1) & 1, use_sched = (v >> 2) & 1;
      long step = 7;
      float *p0 = frand(n, -1, 1), *g = frand(n, -1, 1), *m0 = frand(n, -0.1, 0.1), *v0 = frand(n, 1e-4, 1e-2);
      /* rows k: Adam's (step size, bc2) or SGD's first, then the rate, which replaces lr */
      float sched[9] = {0.5f, 0.25f, 2e-2f, 3e-3f, 0.9f, 5e-3f, 0.0f, 0.2f, 3e-2f};
      int32_t kk = 1, kk2 = 1 + (int32_t)(c & 1); /* SGD: row 1 (first) or 2 (not) */
      float coef[2], lr_a = use_sched ? sched[5] : lr, lr_s = use_sched ? sched[3 * kk2 + 2] : lr;
      if (use_sched) coef[0] = sched[3], coef[1] = sched[4];
      else lam_adam_coef(lr, b1, b2, step, coef);
      /* Adam: p' = p (1 - lr wd) - step_size m' / (sqrt(v') / bc2 + eps) (decoupled), or g += wd p */
      double *pref = dzero(n), *pscale = dzero(n), *mref = dzero(n), *mscale = dzero(n), *vref = dzero(n);
      for (size_t i = 0; i < n; i++) {
        double gi = g[i], pi = p0[i];
        if (decoupled) pi *= 1.0 - (double)lr_a * wd;
        else gi += (double)wd * pi;
        double mi = b1 * (double)m0[i] + (1.0 - b1) * gi, vi = b2 * (double)v0[i] + (1.0 - b2) * gi * gi;
        double upd = coef[0] * mi / (sqrt(vi) / coef[1] + eps);
        mref[i] = mi, mscale[i] = fabs(b1 * m0[i]) + fabs((1.0 - b1) * gi), vref[i] = vi;
        pref[i] = pi - upd, pscale[i] = fabs(pi) + fabs(upd);
      }
      opt_bufs o = {fdup(p0, n), fdup(m0, n), fdup(v0, n)}, oc = {0};
      run_adam(g_ctx, n, &o, g, lr, b1, b2, eps, wd, decoupled, step, use_sched ? sched : NULL, use_sched ? &kk : NULL, NULL);
      if (g_cuda) {
        oc = (opt_bufs){fdup(p0, n), fdup(m0, n), fdup(v0, n)};
        run_adam(g_cpu, n, &oc, g, lr, b1, b2, eps, wd, decoupled, step, use_sched ? sched : NULL, use_sched ? &kk : NULL, NULL);
      }
      snprintf(what, sizeof what, "adam n=%zu wd=%g decoupled=%d sched=%d", n, wd, decoupled, use_sched);
      verify(what, n, o.p, pref, oc.p, pscale, 1e-6, 1e-6); /* a few float roundings of each term */
      verify(what, n, o.m, mref, oc.m, mscale, 1e-6, 1e-6);
      verify(what, n, o.v, vref, oc.v, NULL, 1e-6, 1e-6);
      free(o.p), free(o.m), free(o.v), free(oc.p), free(oc.m), free(oc.v);

      /* SGD: g += wd p; buf = first ? g : momentum buf + g; p -= lr buf (torch.optim.SGD) */
      float mom = decoupled ? 0.9f : 0.0f;
      int first = use_sched ? sched[3 * kk2] != 0.0f : (int)(c & 1);
      for (size_t i = 0; i < n; i++) {
        double gi = g[i] + (double)wd * p0[i], bi = gi;
        if (mom != 0.0f) bi = first ? gi : mom * (double)m0[i] + gi;
        mref[i] = mom != 0.0f ? bi : m0[i], mscale[i] = fabs(gi) + fabs(mom * m0[i]);
        pref[i] = p0[i] - lr_s * bi, pscale[i] = fabs(p0[i]) + fabs(lr_s * bi);
      }
      o = (opt_bufs){fdup(p0, n), fdup(m0, n), NULL};
      run_sgd(g_ctx, n, &o, g, lr, mom, wd, use_sched ? 0 : first, use_sched ? sched : NULL, use_sched ? &kk2 : NULL, NULL);
      if (g_cuda) {
        oc = (opt_bufs){fdup(p0, n), fdup(m0, n), NULL};
        run_sgd(g_cpu, n, &oc, g, lr, mom, wd, use_sched ? 0 : first, use_sched ? sched : NULL, use_sched ? &kk2 : NULL, NULL);
      }
      snprintf(what, sizeof what, "sgd n=%zu wd=%g momentum=%g first=%d sched=%d", n, wd, mom, first, use_sched);
      verify(what, n, o.p, pref, oc.p, pscale, 1e-6, 1e-6);
      verify(what, n, o.m, mref, oc.m, mscale, 1e-6, 1e-6);
      free(o.p), free(o.m), free(oc.p), free(oc.m);
      free(p0), free(g), free(m0), free(v0), free(pref), free(pscale), free(mref), free(mscale), free(vref);
    }
}

/* ---- loss scaling (the fp16 trainer's, prims.h: lam_scaler): grad_check, scaler_update, the optimizers' skip and
 * unscale, xent's lscale ---- */

static lam_scaler scaler_of(float scale, int found, int clean, int taken) {
  lam_scaler z;
  memset(&z, 0, sizeof z);
  z.scale = scale, z.found = found, z.clean = clean, z.taken = taken;
  return z;
}
/* grad_check over n values of g placed `off` floats into the buffer (off 1: not 16-byte aligned). */
static int run_grad_check(lam_ctx *ctx, size_t n, const float *g, size_t off, int found) {
  float *h = fnan(n + off);
  memcpy(h + off, g, n * 4);
  float *dg = dput(ctx, h, (n + off) * 4);
  lam_scaler ls = scaler_of(2.0f, found, 0, 0), *dls = dput(ctx, &ls, sizeof ls);
  TU_OK(BE(ctx)->grad_check(ctx, n, dg + off, dls));
  dget(ctx, &ls, dls, sizeof ls, "grad_check");
  dfree(ctx, dg), dfree(ctx, dls), free(h);
  return ls.found;
}
static lam_scaler run_scaler_update(lam_ctx *ctx, lam_scaler ls, int adam, const float *sched, int32_t k) {
  lam_scaler *dls = dput(ctx, &ls, sizeof ls);
  float *ds = dput(ctx, sched, 9 * 4);
  int32_t *dk = dput(ctx, &k, 4);
  TU_OK(BE(ctx)->scaler_update(ctx, dls, adam, 0.9f, 0.999f, ds, dk));
  dget(ctx, &ls, dls, sizeof ls, "scaler_update");
  dfree(ctx, dls), dfree(ctx, ds), dfree(ctx, dk);
  return ls;
}
static void want_scaler(const char *what, const lam_scaler *got, float scale, float inv, int clean, int skipped, int taken,
                        int stuck) {
  if (got->scale != scale || got->inv != inv || got->clean != clean || got->skipped != skipped || got->taken != taken ||
      got->stuck != stuck)
    fail_msg("%s%s: scale %g inv %g clean %d skipped %d taken %d stuck %d; want %g %g %d %d %d %d", what,
             g_cuda ? " [cuda]" : "", (double)got->scale, (double)got->inv, got->clean, got->skipped, got->taken,
             got->stuck, (double)scale, (double)inv, clean, skipped, taken, stuck);
}

static void test_loss_scale(void **state) {
  (void)state;
  lam_ctx *ctxs[2] = {g_ctx, g_cpu};
  for (int which = 0; which < (g_cuda ? 2 : 1); which++) {
    lam_ctx *ctx = ctxs[which];
    /* grad_check: finite leaves the flag, one inf, -inf or NaN anywhere (first, last, inside; aligned or not) sets it */
    static const size_t ns[] = {1, 7, 40001, ((size_t)1 << 20) + 3};
    for (size_t c = 0; c < 4; c++)
      for (size_t off = 0; off < 2; off++) {
        seed_case("loss_scale grad_check", c * 2 + off);
        const size_t n = ns[c];
        float *g = frand(n, -60000, 60000);
        if (run_grad_check(ctx, n, g, off, 0) != 0) fail_msg("grad_check n=%zu off=%zu: finite values set the flag", n, off);
        if (run_grad_check(ctx, n, g, off, 1) != 1) fail_msg("grad_check n=%zu: a set flag was cleared", n);
        const float bad[3] = {INFINITY, -INFINITY, NAN};
        const size_t at[3] = {0, n - 1, (size_t)(tu_next(&g_r) % n)};
        for (int b = 0; b < 3; b++) {
          const float keep = g[at[b]];
          g[at[b]] = bad[b];
          if (run_grad_check(ctx, n, g, off, 0) != 1)
            fail_msg("grad_check n=%zu off=%zu: %g at %zu was not found", n, off, (double)bad[b], at[b]);
          g[at[b]] = keep;
        }
        free(g);
      }
    /* scaler_update, step by step as GradScaler: rates in row k's third column */
    const float sched[9] = {0, 0, 1e-3f, 0, 0, 2e-3f, 0, 0, 3e-3f};
    lam_scaler s = run_scaler_update(ctx, scaler_of(8.0f, 0, LAM_SCALE_GROWTH - 1, 5), 1, sched, 1);
    want_scaler("taken, growth", &s, 16.0f, 0.125f, 0, 0, 6, 0); /* the 2000th clean step doubles */
    const double bc1 = 1.0 - pow((double)0.9f, 6.0), bc2 = 1.0 - pow((double)0.999f, 6.0); /* the float betas */
    if (s.coef[0] != (float)(2e-3f / bc1) || s.coef[1] != (float)sqrt(bc2) || s.coef[2] != 2e-3f)
      fail_msg("scaler_update: Adam's scalars of step 6 at rate 2e-3 are %g %g %g, want %g %g 2e-3", (double)s.coef[0],
               (double)s.coef[1], (double)s.coef[2], (double)(float)(2e-3f / bc1), (double)(float)sqrt(bc2));
    s.found = 1;
    s = run_scaler_update(ctx, s, 1, sched, 2);
    want_scaler("skipped", &s, 8.0f, 1.0f / 16, 0, 1, 6, 0);
    s = run_scaler_update(ctx, scaler_of(LAM_SCALE_FLOOR, 1, 7, 3), 1, sched, 2);
    want_scaler("skipped at the floor", &s, LAM_SCALE_FLOOR, 1.0f / LAM_SCALE_FLOOR, 0, 1, 3, 3);
    s = run_scaler_update(ctx, scaler_of(3.0f * LAM_SCALE_FLOOR / 2, 1, 0, 0), 1, sched, 0);
    want_scaler("halved to the floor", &s, LAM_SCALE_FLOOR, 2.0f / (3.0f * LAM_SCALE_FLOOR), 0, 1, 0, 0);
    s = run_scaler_update(ctx, scaler_of(4.0f, 0, 10, 0), 0, sched, 0);
    want_scaler("sgd's first", &s, 4.0f, 0.25f, 11, 0, 1, 0);
    if (s.coef[0] != 1.0f || s.coef[2] != 1e-3f) fail_msg("scaler_update: SGD's first step %g rate %g", (double)s.coef[0], (double)s.coef[2]);
    s = run_scaler_update(ctx, s, 0, sched, 1);
    if (s.coef[0] != 0.0f || s.taken != 2) fail_msg("scaler_update: SGD's second step is marked first");

    /* the optimizers: a found step changes nothing; else the gradient times inv with the scaler's scalars, which is
     * the unscaled gradient's step bit for bit (inv a power of two) */
    const size_t n = 40001;
    seed_case("loss_scale optimizers", (uint64_t)which);
    float *p0 = frand(n, -1, 1), *g = frand(n, -1, 1), *m0 = frand(n, -0.1, 0.1), *v0 = frand(n, 1e-4, 1e-2);
    float *gs = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) gs[i] = g[i] * 1024.0f;
    lam_scaler ls = scaler_of(1024.0f, 0, 0, 6);
    ls.inv = 1.0f / 1024, ls.coef[0] = 0.0123f, ls.coef[1] = 0.0456f, ls.coef[2] = 2e-3f;
    const float row[9] = {0.0123f, 0.0456f, 2e-3f, 0, 0, 0, 0, 0, 0};
    const int32_t k0 = 0;
    for (int opt = 0; opt < 2; opt++) {
      opt_bufs a = {fdup(p0, n), fdup(m0, n), fdup(v0, n)}, b = {fdup(p0, n), fdup(m0, n), fdup(v0, n)};
      if (opt == 0) {
        run_adam(ctx, n, &a, gs, 1.0f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 99, NULL, NULL, &ls);
        run_adam(ctx, n, &b, g, 1.0f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 99, row, &k0, NULL);
      } else {
        run_sgd(ctx, n, &a, gs, 1.0f, 0.9f, 1e-4f, 1, NULL, NULL, &ls);
        run_sgd(ctx, n, &b, g, 1.0f, 0.9f, 1e-4f, 0, row, &k0, NULL);
      }
      if (memcmp(a.p, b.p, n * 4) || memcmp(a.m, b.m, n * 4) || (opt == 0 && memcmp(a.v, b.v, n * 4)))
        fail_msg("%s with a loss scale of 1024: not the unscaled step%s", opt ? "sgd" : "adam", g_cuda && !which ? " [cuda]" : "");
      free(a.p), free(a.m), free(a.v);
      a = (opt_bufs){fdup(p0, n), fdup(m0, n), fdup(v0, n)};
      ls.found = 1;
      gs[n / 2] = INFINITY;
      if (opt == 0) run_adam(ctx, n, &a, gs, 1.0f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 99, NULL, NULL, &ls);
      else run_sgd(ctx, n, &a, gs, 1.0f, 0.9f, 1e-4f, 1, NULL, NULL, &ls);
      if (memcmp(a.p, p0, n * 4) || memcmp(a.m, m0, n * 4) || memcmp(a.v, v0, n * 4))
        fail_msg("%s: a skipped step (found) changed the parameters or the state", opt ? "sgd" : "adam");
      ls.found = 0;
      gs[n / 2] = g[n / 2] * 1024.0f;
      free(a.p), free(a.m), free(a.v), free(b.p), free(b.m), free(b.v);
    }
    free(p0), free(g), free(m0), free(v0), free(gs);
  }
  /* xent: the loss's gradient times *lscale exactly (a power of two), the statistics as they were */
  const int B = 5, C = 7, P = 3;
  const size_t nl = (size_t)B * C * P;
  float *x = frand(nl, -3, 3), count = 11.0f, lscale = 4096.0f;
  uint8_t *labels = u8rand((size_t)B * P, 0, C - 1);
  xent_out a = {fnan(nl), {0, 0, 0}, NULL}, b = {fnan(nl), {0, 0, 0}, NULL};
  run_xent(g_ctx, B, C, P, x, labels, 1.0f, NULL, &count, 0.1f, &a);
  run_xent(g_ctx, B, C, P, x, labels, 1.0f, &lscale, &count, 0.1f, &b);
  for (size_t i = 0; i < nl; i++)
    if (b.dl[i] != a.dl[i] * lscale) fail_msg("xent lscale: dlogits[%zu] %g, want %g", i, (double)b.dl[i], (double)(a.dl[i] * lscale));
  if (memcmp(a.stats, b.stats, sizeof a.stats)) fail_msg("xent lscale: the statistics changed");
  free(x), free(labels), free(a.dl), free(b.dl);
}

static void test_step_backprop(void **state) {
  (void)state;
  seed_case("step_advance", 0);
  int32_t s0[2] = {5, 9}, sg[2], ref[2] = {5 + 512, 10}, sc[2];
  int32_t *d = dput(g_ctx, s0, 8);
  TU_OK(BE(g_ctx)->step_advance(g_ctx, d, 512, NULL));
  dget(g_ctx, sg, d, 8, "step_advance");
  memcpy(sc, ref, 8);
  verify_bytes("step_advance", 2, 4, sg, ref, sc);
  /* the first step with a non-finite loss: noted once (stats[3]), never for a finite loss */
  const float cases[3][4] = {{3.5f, 1, 2, 0}, {NAN, 1, 2, 0}, {INFINITY, 1, 2, 7}};
  const float want3[3] = {0, 11, 7}; /* state[1] is 10 after the call above, 11 after this one */
  for (int c = 0; c < 3; c++) {
    int32_t s1[2] = {5 + 512, 10};
    TU_OK(lam_mem_upload(g_ctx, d, s1, 8));
    float *ds = dput(g_ctx, cases[c], 16), got[4];
    TU_OK(BE(g_ctx)->step_advance(g_ctx, d, 1, ds));
    dget(g_ctx, got, ds, 16, "step_advance stats");
    dfree(g_ctx, ds);
    if (got[3] != want3[c]) fail_msg("step_advance with loss sum %g, stats[3] %g: stats[3] = %g, want %g", cases[c][0],
                                     cases[c][3], got[3], want3[c]);
  }
  dfree(g_ctx, d);
  static const size_t ns[] = {1, 37, 40001};
  for (size_t c = 0; c < 3; c++) {
    seed_case("backprop_step", c);
    size_t n = ns[c];
    float *err = frand(n, -1, 1), *in = frand(n, -1, 1), *w0 = frand(n, -1, 1), lr = 0.05f;
    double *wref = dzero(n), *wscale = dzero(n);
    for (size_t i = 0; i < n; i++)
      wref[i] = w0[i] - lr * ((double)err[i] * in[i]), wscale[i] = fabs(w0[i]) + fabs(lr * err[i] * in[i]);
    float *got = fdup(w0, n), *cpu = g_cuda ? fdup(w0, n) : NULL;
    for (int pass = 0; pass < 1 + g_cuda; pass++) {
      lam_ctx *ctx = pass ? g_cpu : g_ctx;
      float *out = pass ? cpu : got, *de = dput(ctx, err, n * 4), *di = dput(ctx, in, n * 4), *dw = dput(ctx, out, n * 4);
      TU_OK(BE(ctx)->backprop_step(ctx, n, de, di, lr, dw));
      dget(ctx, out, dw, n * 4, "backprop_step");
      dfree(ctx, de), dfree(ctx, di), dfree(ctx, dw);
    }
    char what[80];
    snprintf(what, sizeof what, "backprop_step n=%zu", n);
    verify(what, n, got, wref, cpu, wscale, 1e-6, 1e-6);
    free(err), free(in), free(w0), free(wref), free(wscale), free(got), free(cpu);
  }
}

const struct CMUnitTest *prims_optim_tests(size_t *n) {
  static const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_optimizers),
      cmocka_unit_test(test_step_backprop),
      cmocka_unit_test(test_loss_scale),
  };
  *n = sizeof tests / sizeof tests[0];
  return tests;
}
