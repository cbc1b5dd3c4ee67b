/* norm.c — test_prims' normalizations: BatchNorm (bn_fwd, bn_bwd), BatchNorm with its activation (bn_act_fwd,
 * bn_act_bwd), with a residual add (their r and dr) and with a maxpool after the activation (bn_act_pool_*), sync BatchNorm's bn_sums, bn_sync_stats and bn_sync_dx,
 * GroupNorm (groupnorm_fwd, groupnorm_bwd). */
#include "prims_test.h"

/* ---- BatchNorm ---- */

typedef struct bn_ref {
  double *mean, *var, *invstd; /* per channel */
} bn_ref;

static void bn_stats(int B, int C, int P, const float *x, bn_ref *r) {
  r->mean = dzero(C), r->var = dzero(C), r->invstd = dzero(C);
  double N = (double)B * P;
  for (int c = 0; c < C; c++) {
    double s = 0, v = 0;
    for (int b = 0; b < B; b++)
      for (int p = 0; p < P; p++) s += x[((size_t)b * C + c) * P + p];
    r->mean[c] = s / N;
    for (int b = 0; b < B; b++)
      for (int p = 0; p < P; p++) {
        double d = x[((size_t)b * C + c) * P + p] - r->mean[c];
        v += d * d;
      }
    r->var[c] = v / N;
  }
}
static void bn_ref_free(bn_ref *r) { free(r->mean), free(r->var), free(r->invstd); }

/* A BatchNorm forward's statistics against their references (and CUDA's against the CPU's): training saves the
 * batch mean and invstd and moves the running statistics; evaluation leaves them exactly as they were. */
static void verify_bn_stats(const char *op, const char *geo, int C, int train, const bn_bufs *o, const bn_bufs *oc,
                            const double *mref, const double *mscale, const double *iref, const double *rmref,
                            const double *rmscale, const double *rvref, const double *zero) {
  char what[200];
  if (train) {
    snprintf(what, sizeof what, "%s mean %s", op, geo);
    verify(what, C, o->mean, mref, oc->mean, mscale, 1e-7, 1e-6);
    snprintf(what, sizeof what, "%s invstd %s", op, geo);
    verify(what, C, o->invstd, iref, oc->invstd, NULL, 2e-7, 1e-5);
    snprintf(what, sizeof what, "%s run_mean %s", op, geo);
    verify(what, C, o->rm, rmref, oc->rm, rmscale, 2e-7, 1e-6);
    snprintf(what, sizeof what, "%s run_var %s", op, geo);
    verify(what, C, o->rv, rvref, oc->rv, NULL, 5e-7, 2e-5);
  } else { /* eval: the running statistics are left as they are */
    snprintf(what, sizeof what, "%s run_mean %s", op, geo);
    verify(what, C, o->rm, rmref, oc->rm, zero, 0.0, 0.0);
    snprintf(what, sizeof what, "%s run_var %s", op, geo);
    verify(what, C, o->rv, rvref, oc->rv, zero, 0.0, 0.0);
  }
}

void run_bn_fwd(lam_ctx *ctx, int B, int C, int P, const float *x, const float *gamma, const float *beta,
                bn_bufs *o, float momentum, float eps, int train, int inplace) {
  size_t n = (size_t)B * C * P, cb = (size_t)C * 4;
  float *dx = dput(ctx, x, n * 4), *dg = dput(ctx, gamma, cb), *db = dput(ctx, beta, cb);
  float *dy = inplace ? dx : dput(ctx, o->y, n * 4);
  float *dm = train ? dput(ctx, o->mean, cb) : NULL, *di = train ? dput(ctx, o->invstd, cb) : NULL;
  float *drm = dput(ctx, o->rm, cb), *drv = dput(ctx, o->rv, cb);
  void *fx = fin(ctx, dx, B, C, P), *fy = inplace ? fx : fin(ctx, dy, B, C, P);
  TU_OK(BE(ctx)->bn_fwd(ctx, g_fmt, B, C, P, fx, dg, db, fy, dm, di, drm, drv, momentum, eps, train));
  if (!inplace) fout(ctx, fx, dx, B, C, P, "bn_fwd x (format)");
  fout(ctx, fy, dy, B, C, P, "bn_fwd y (format)");
  dget(ctx, o->y, dy, n * 4, "bn_fwd y");
  if (train) dget(ctx, o->mean, dm, cb, "bn_fwd mean"), dget(ctx, o->invstd, di, cb, "bn_fwd invstd");
  dget(ctx, o->rm, drm, cb, "bn_fwd run_mean");
  dget(ctx, o->rv, drv, cb, "bn_fwd run_var");
  dfree(ctx, dx), dfree(ctx, dg), dfree(ctx, db), dfree(ctx, dm), dfree(ctx, di), dfree(ctx, drm), dfree(ctx, drv);
  if (!inplace) dfree(ctx, dy);
}

void run_bn_bwd(lam_ctx *ctx, int B, int C, int P, const float *x, const float *dy, const float *gamma,
                const float *mean, const float *invstd, float *dx, float *dgamma, float *dbeta, int inplace) {
  size_t n = (size_t)B * C * P, cb = (size_t)C * 4;
  float *d_x = dput(ctx, x, n * 4), *d_dy = dput(ctx, dy, n * 4), *d_g = dput(ctx, gamma, cb);
  float *d_m = dput(ctx, mean, cb), *d_i = dput(ctx, invstd, cb), *d_dg = dput(ctx, dgamma, cb),
        *d_db = dput(ctx, dbeta, cb);
  float *d_dx = inplace ? d_dy : dput(ctx, dx, n * 4);
  void *fx = fin(ctx, d_x, B, C, P), *fdy = fin(ctx, d_dy, B, C, P), *fdx = inplace ? fdy : fin(ctx, d_dx, B, C, P);
  TU_OK(BE(ctx)->bn_bwd(ctx, g_fmt, B, C, P, fx, fdy, d_g, d_m, d_i, fdx, d_dg, d_db));
  fout(ctx, fx, d_x, B, C, P, "bn_bwd x (format)");
  if (!inplace) fout(ctx, fdy, d_dy, B, C, P, "bn_bwd dy (format)");
  fout(ctx, fdx, d_dx, B, C, P, "bn_bwd dx (format)");
  dget(ctx, dx, d_dx, n * 4, "bn_bwd dx");
  dget(ctx, dgamma, d_dg, cb, "bn_bwd dgamma");
  dget(ctx, dbeta, d_db, cb, "bn_bwd dbeta");
  dfree(ctx, d_x), dfree(ctx, d_dy), dfree(ctx, d_g), dfree(ctx, d_m), dfree(ctx, d_i), dfree(ctx, d_dg), dfree(ctx, d_db);
  if (!inplace) dfree(ctx, d_dx);
}

/* For the finite differences: L = sum(w * y) of a training-mode forward, as a function of x, gamma or beta. */
typedef struct bn_fd {
  int B, C, P, wrt; /* 0: x, 1: gamma, 2: beta */
  const float *x, *gamma, *beta, *w;
} bn_fd;
static void bn_loss(const void *a, const float *v, double *loss) {
  const bn_fd *f = a;
  size_t n = (size_t)f->B * f->C * f->P;
  float *y = fnan(n), *m = fnan(f->C), *is = fnan(f->C), *rm = frand(f->C, 0, 1), *rv = frand(f->C, 1, 2);
  TU_OK(BE(g_ctx)->bn_fwd(g_ctx, LAM_FMT_NCHW, f->B, f->C, f->P, f->wrt == 0 ? v : f->x, f->wrt == 1 ? v : f->gamma,
                   f->wrt == 2 ? v : f->beta, y, m, is, rm, rv, 0.1f, 1e-5f, 1));
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)f->w[i] * y[i];
  *loss = s;
  free(y), free(m), free(is), free(rm), free(rv);
}

static void test_bn(void **state) {
  (void)state;
  const float momentum = 0.1f, eps = 1e-5f;
  for (size_t s = 0; s < N_BCP; s++)
    for (int mode = 0; mode < 3; mode++) { /* train, train in place (y = x, dx = dy), eval */
      seed_case("bn", 3 * s + mode);
      int B = k_bcp[s].B, C = k_bcp[s].C, P = k_bcp[s].P, train = mode < 2, inplace = mode == 1;
      size_t n = (size_t)B * C * P;
      double N = (double)B * P;
      char what[160], geo[100];
      snprintf(geo, sizeof geo, "B=%d C=%d P=%d %s", B, C, P, mode == 0 ? "train" : mode == 1 ? "train in place" : "eval");
      /* each channel its own offset and spread; one case far from 0 against its spread */
      float *x = xmalloc(n * 4), *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -1, 1);
      double *off = dzero(C), *spread = dzero(C);
      for (int c = 0; c < C; c++) {
        off[c] = s == 7 ? 100.0 + c : U(-3, 3), spread[c] = U(0.2, 2);
        if (tu_next(&g_r) & 1) gamma[c] = -gamma[c];
      }
      for (size_t i = 0; i < n; i++) x[i] = (float)(off[i / P % C] + spread[i / P % C] * fr(-1, 1));
      float *rm0 = frand(C, -1, 1), *rv0 = frand(C, 0.5, 2);
      bn_ref r;
      bn_stats(B, C, P, x, &r);
      double *yref = dzero(n), *yscale = dzero(n), *mref = dzero(C), *mscale = dzero(C), *iref = dzero(C),
             *rmref = dzero(C), *rmscale = dzero(C), *rvref = dzero(C), *zero = dzero(C);
      for (int c = 0; c < C; c++) {
        double m = train ? r.mean[c] : rm0[c], is = train ? 1 / sqrt(r.var[c] + eps) : 1 / sqrt((double)rv0[c] + eps);
        r.invstd[c] = is;
        mref[c] = r.mean[c], mscale[c] = fabs(r.mean[c]) + sqrt(r.var[c]), iref[c] = is;
        double uv = N > 1 ? r.var[c] * N / (N - 1) : r.var[c];
        rmref[c] = train ? (1 - momentum) * (double)rm0[c] + momentum * r.mean[c] : rm0[c];
        rmscale[c] = train ? fabs(rmref[c]) + momentum * mscale[c] : 0;
        rvref[c] = train ? (1 - momentum) * (double)rv0[c] + momentum * uv : rv0[c];
        for (int b = 0; b < B; b++)
          for (int p = 0; p < P; p++) {
            size_t o = ((size_t)b * C + c) * P + p;
            double xh = (x[o] - m) * is;
            yref[o] = xh * gamma[c] + beta[c];
            /* the float (x - mean) invstd gamma + beta; the mean's own error enters as mean * invstd * gamma */
            yscale[o] = fabs(xh * gamma[c]) + fabs(beta[c]) + fabs(gamma[c]) * (1 + fabs(m) * is);
          }
      }
      bn_bufs o = {fnan(n), fnan(C), fnan(C), fdup(rm0, C), fdup(rv0, C)}, oc = {0};
      if (inplace) memcpy(o.y, x, n * 4);
      run_bn_fwd(g_ctx, B, C, P, x, gamma, beta, &o, momentum, eps, train, inplace);
      if (g_cuda) {
        oc = (bn_bufs){fnan(n), fnan(C), fnan(C), fdup(rm0, C), fdup(rv0, C)};
        if (inplace) memcpy(oc.y, x, n * 4);
        run_bn_fwd(g_cpu, B, C, P, x, gamma, beta, &oc, momentum, eps, train, inplace);
      }
      /* the CPU's statistics are float64 sums; CUDA's fp32 shifted sums over blocks, in float64 at the end */
      snprintf(what, sizeof what, "bn_fwd y %s", geo);
      verify(what, n, o.y, yref, oc.y, yscale, 2e-6, 2e-5);
      verify_bn_stats("bn_fwd", geo, C, train, &o, &oc, mref, mscale, iref, rmref, rmscale, rvref, zero);

      /* bn_bwd from the statistics of x (as float, as bn_fwd saves them) */
      if (train) {
        float *mf = xmalloc(C * 4), *isf = xmalloc(C * 4), *dy = frand(n, -1, 1), *dg0 = frand(C, -1, 1),
              *db0 = frand(C, -1, 1);
        for (int c = 0; c < C; c++) mf[c] = (float)r.mean[c], isf[c] = (float)(1 / sqrt(r.var[c] + eps));
        double *dxref = dzero(n), *dxscale = dzero(n), *dgref = dzero(C), *dgscale = dzero(C), *dbref = dzero(C),
               *dbscale = dzero(C);
        for (int c = 0; c < C; c++) {
          double s1 = 0, s2 = 0, a1 = 0, a2 = 0;
          for (int b = 0; b < B; b++)
            for (int p = 0; p < P; p++) {
              size_t q = ((size_t)b * C + c) * P + p;
              double xh = ((double)x[q] - mf[c]) * isf[c];
              s1 += dy[q], s2 += dy[q] * xh, a1 += fabs(dy[q]), a2 += fabs(dy[q] * xh);
            }
          dgref[c] = dg0[c] + s2, dgscale[c] = fabs(dg0[c]) + a2;
          dbref[c] = db0[c] + s1, dbscale[c] = fabs(db0[c]) + a1;
          double kk = (double)gamma[c] * isf[c];
          for (int b = 0; b < B; b++)
            for (int p = 0; p < P; p++) {
              size_t q = ((size_t)b * C + c) * P + p;
              double xh = ((double)x[q] - mf[c]) * isf[c];
              dxref[q] = kk * (dy[q] - s1 / N - xh * s2 / N);
              dxscale[q] = fabs(kk) * (fabs(dy[q]) + a1 / N + fabs(xh) * (1 + a2 / N) + fabs(mf[c]) * isf[c] * a2 / N);
            }
        }
        float *dx = inplace ? fdup(dy, n) : fnan(n), *dgg = fdup(dg0, C), *dbg = fdup(db0, C);
        float *dxc = NULL, *dgc = NULL, *dbc = NULL;
        run_bn_bwd(g_ctx, B, C, P, x, dy, gamma, mf, isf, dx, dgg, dbg, inplace);
        if (g_cuda) {
          dxc = inplace ? fdup(dy, n) : fnan(n), dgc = fdup(dg0, C), dbc = fdup(db0, C);
          run_bn_bwd(g_cpu, B, C, P, x, dy, gamma, mf, isf, dxc, dgc, dbc, inplace);
        }
        snprintf(what, sizeof what, "bn_bwd dx %s", geo);
        verify(what, n, dx, dxref, dxc, dxscale, 1e-6, 2e-5);
        snprintf(what, sizeof what, "bn_bwd dgamma %s", geo);
        verify(what, C, dgg, dgref, dgc, dgscale, 2e-7, 1e-5);
        snprintf(what, sizeof what, "bn_bwd dbeta %s", geo);
        verify(what, C, dbg, dbref, dbc, dbscale, 2e-7, 1e-5);
        if (!g_cuda && !inplace && n <= 64 && B * P > 1) {
          /* d/dx, d/dgamma, d/dbeta of sum(dy * y) through the batch statistics, from bn_fwd itself */
          float *z = fdup(dg0, C), *zb = fdup(db0, C);
          for (int c = 0; c < C; c++) z[c] = 0, zb[c] = 0;
          float *dxn = fnan(n);
          run_bn_bwd(g_ctx, B, C, P, x, dy, gamma, o.mean, o.invstd, dxn, z, zb, 0);
          bn_fd f = {B, C, P, 0, x, gamma, beta, dy};
          float *v = fdup(x, n);
          check_fd(what, n, v, dxn, bn_loss, &f, 2e-2, 1e-3, 2e-3);
          free(v);
          f.wrt = 1, v = fdup(gamma, C);
          check_fd(what, C, v, z, bn_loss, &f, 2e-2, 1e-3, 2e-3);
          free(v);
          f.wrt = 2, v = fdup(beta, C);
          check_fd(what, C, v, zb, bn_loss, &f, 2e-2, 1e-3, 2e-3);
          free(v), free(z), free(zb), free(dxn);
        }
        free(mf), free(isf), free(dy), free(dg0), free(db0), free(dxref), free(dxscale), free(dgref), free(dgscale);
        free(dbref), free(dbscale), free(dx), free(dgg), free(dbg), free(dxc), free(dgc), free(dbc);
      }
      free(x), free(gamma), free(beta), free(off), free(spread), free(rm0), free(rv0), free(yref), free(yscale);
      free(mref), free(mscale), free(iref), free(rmref), free(rmscale), free(rvref), free(zero);
      free(o.y), free(o.mean), free(o.invstd), free(o.rm), free(o.rv);
      free(oc.y), free(oc.mean), free(oc.invstd), free(oc.rm), free(oc.rv);
      bn_ref_free(&r);
    }
}

/* ---- BatchNorm followed by an activation (bn_act_fwd, bn_act_bwd) ---- */

void run_bn_act_fwd(lam_ctx *ctx, int B, int C, int P, int act, float alpha, const float *x, const float *gamma,
                    const float *beta, bn_bufs *o, float momentum, float eps, int train) {
  size_t n = (size_t)B * C * P, cb = (size_t)C * 4;
  float *dx = dput(ctx, x, n * 4), *dg = dput(ctx, gamma, cb), *db = dput(ctx, beta, cb), *dy = dput(ctx, o->y, n * 4);
  float *dm = train ? dput(ctx, o->mean, cb) : NULL, *di = train ? dput(ctx, o->invstd, cb) : NULL;
  float *drm = dput(ctx, o->rm, cb), *drv = dput(ctx, o->rv, cb);
  void *fx = fin(ctx, dx, B, C, P), *fy = fin(ctx, dy, B, C, P);
  TU_OK(BE(ctx)->bn_act_fwd(ctx, g_fmt, B, C, P, act, alpha, fx, NULL, dg, db, fy, dm, di, drm, drv, momentum, eps,
                            train));
  fout(ctx, fx, dx, B, C, P, "bn_act_fwd x (format)"), fout(ctx, fy, dy, B, C, P, "bn_act_fwd y (format)");
  dget(ctx, o->y, dy, n * 4, "bn_act_fwd y");
  if (train) dget(ctx, o->mean, dm, cb, "bn_act_fwd mean"), dget(ctx, o->invstd, di, cb, "bn_act_fwd invstd");
  dget(ctx, o->rm, drm, cb, "bn_act_fwd run_mean");
  dget(ctx, o->rv, drv, cb, "bn_act_fwd run_var");
  dfree(ctx, dx), dfree(ctx, dg), dfree(ctx, db), dfree(ctx, dy), dfree(ctx, dm), dfree(ctx, di), dfree(ctx, drm);
  dfree(ctx, drv);
}

/* y may be NULL (gelu); dx, dgamma, dbeta are read back. */
void run_bn_act_bwd(lam_ctx *ctx, int B, int C, int P, int act, float alpha, const float *x, const float *y,
                    const float *dy, const float *gamma, const float *beta, const float *mean, const float *invstd,
                    float *dx, float *dgamma, float *dbeta) {
  size_t n = (size_t)B * C * P, cb = (size_t)C * 4;
  float *d_x = dput(ctx, x, n * 4), *d_y = dput(ctx, y, n * 4), *d_dy = dput(ctx, dy, n * 4), *d_g = dput(ctx, gamma, cb),
        *d_b = dput(ctx, beta, cb), *d_m = dput(ctx, mean, cb), *d_i = dput(ctx, invstd, cb);
  float *d_dx = dput(ctx, dx, n * 4), *d_dg = dput(ctx, dgamma, cb), *d_db = dput(ctx, dbeta, cb);
  void *fx = fin(ctx, d_x, B, C, P), *fy = fin(ctx, d_y, B, C, P), *fdy = fin(ctx, d_dy, B, C, P),
       *fdx = fin(ctx, d_dx, B, C, P);
  TU_OK(BE(ctx)->bn_act_bwd(ctx, g_fmt, B, C, P, act, alpha, fx, fy, fdy, d_g, d_b, d_m, d_i, fdx, NULL, 0, d_dg, d_db));
  fout(ctx, fx, d_x, B, C, P, "bn_act_bwd x (format)"), fout(ctx, fy, d_y, B, C, P, "bn_act_bwd y (format)");
  fout(ctx, fdy, d_dy, B, C, P, "bn_act_bwd dy (format)"), fout(ctx, fdx, d_dx, B, C, P, "bn_act_bwd dx (format)");
  dget(ctx, dx, d_dx, n * 4, "bn_act_bwd dx");
  dget(ctx, dgamma, d_dg, cb, "bn_act_bwd dgamma");
  dget(ctx, dbeta, d_db, cb, "bn_act_bwd dbeta");
  dfree(ctx, d_x), dfree(ctx, d_y), dfree(ctx, d_dy), dfree(ctx, d_g), dfree(ctx, d_b), dfree(ctx, d_m), dfree(ctx, d_i);
  dfree(ctx, d_dx), dfree(ctx, d_dg), dfree(ctx, d_db);
}

/* For the finite differences: L = sum(w * y) of a training-mode bn_act_fwd, as a function of x, gamma or
 * beta (the array check_fd moves is v, read whole through base: check_fd is called one element at a time). */
typedef struct bn_act_fd {
  int B, C, P, act, wrt; /* wrt 0: x, 1: gamma, 2: beta */
  float alpha;
  const float *x, *gamma, *beta, *w;
} bn_act_fd;
static void bn_act_loss(const void *a, const float *v, double *loss) {
  const bn_act_fd *f = a;
  size_t n = (size_t)f->B * f->C * f->P;
  float *y = fnan(n), *m = fnan(f->C), *is = fnan(f->C), *rm = frand(f->C, 0, 1), *rv = frand(f->C, 1, 2);
  TU_OK(BE(g_ctx)->bn_act_fwd(g_ctx, LAM_FMT_NCHW, f->B, f->C, f->P, f->act, f->alpha, f->wrt == 0 ? v : f->x, NULL,
                              f->wrt == 1 ? v : f->gamma, f->wrt == 2 ? v : f->beta, y, m, is, rm, rv, 0.1f, 1e-5f, 1));
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)f->w[i] * y[i];
  *loss = s;
  free(y), free(m), free(is), free(rm), free(rv);
}

/* ---- GroupNorm (groupnorm_fwd, groupnorm_bwd; LayerNorm is G = 1): against a float64 reference per (sample,
 * group), in the format under test, CUDA against the CPU; on the CPU also the input gradient against central
 * differences of sum(w y). ---- */
static void run_groupnorm(lam_ctx *ctx, int B, int C, int P, int G, const float *x, const float *gamma, const float *beta,
                          const float *dy, float *y, float *mean, float *invstd, float *dx, float *dg, float *db) {
  const size_t n = (size_t)B * C * P, cb = (size_t)C * 4, sb = (size_t)B * G * 4;
  float *d_x = dput(ctx, x, n * 4), *d_g = dput(ctx, gamma, cb), *d_b = dput(ctx, beta, cb), *d_y = dput(ctx, y, n * 4),
        *d_m = dput(ctx, mean, sb), *d_i = dput(ctx, invstd, sb), *d_dy = dput(ctx, dy, n * 4),
        *d_dx = dput(ctx, dx, n * 4), *d_dg = dput(ctx, dg, cb), *d_db = dput(ctx, db, cb);
  float *h = fnan((size_t)2 * B * C), *work = dput(ctx, h, (size_t)2 * B * C * 4), *d_w = work; /* 2 B C floats */
  free(h);
  void *fx = fin(ctx, d_x, B, C, P), *fy = fin(ctx, d_y, B, C, P), *fdy = fin(ctx, d_dy, B, C, P),
       *fdx = fin(ctx, d_dx, B, C, P);
  TU_OK(BE(ctx)->groupnorm_fwd(ctx, g_fmt, B, C, P, G, fx, d_g, d_b, fy, d_m, d_i, 1e-5f));
  TU_OK(BE(ctx)->groupnorm_bwd(ctx, g_fmt, B, C, P, G, fx, fdy, d_g, d_m, d_i, fdx, d_dg, d_db, work));
  fout(ctx, fx, d_x, B, C, P, "groupnorm x"), fout(ctx, fy, d_y, B, C, P, "groupnorm y");
  fout(ctx, fdy, d_dy, B, C, P, "groupnorm dy"), fout(ctx, fdx, d_dx, B, C, P, "groupnorm dx");
  dget(ctx, y, d_y, n * 4, "groupnorm y"), dget(ctx, mean, d_m, sb, "groupnorm mean");
  dget(ctx, invstd, d_i, sb, "groupnorm invstd"), dget(ctx, dx, d_dx, n * 4, "groupnorm dx");
  dget(ctx, dg, d_dg, cb, "groupnorm dgamma"), dget(ctx, db, d_db, cb, "groupnorm dbeta");
  float *all[] = {d_x, d_g, d_b, d_y, d_m, d_i, d_dy, d_dx, d_dg, d_db, d_w};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) dfree(ctx, all[k]);
}
typedef struct gn_fd {
  int B, C, P, G;
  const float *gamma, *beta, *w;
} gn_fd;
static void gn_loss(const void *a, const float *x, double *loss) { /* the CPU backend: host memory */
  const gn_fd *f = a;
  const size_t n = (size_t)f->B * f->C * f->P;
  float *y = fnan(n), *m = fnan((size_t)f->B * f->G), *is = fnan((size_t)f->B * f->G);
  TU_OK(BE(g_ctx)->groupnorm_fwd(g_ctx, LAM_FMT_NCHW, f->B, f->C, f->P, f->G, x, f->gamma, f->beta, y, m, is, 1e-5f));
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)f->w[i] * y[i];
  *loss = s;
  free(y), free(m), free(is);
}
static void test_groupnorm(void **state) {
  (void)state;
  static const int shapes[][4] = {{3, 8, 10, 4}, {2, 6, 7, 1}, {4, 16, 1, 4}, {2, 64, 16, 8}, {5, 3, 9, 3}};
  for (int si = 0; si < 5; si++) {
    seed_case("groupnorm", (uint64_t)si);
    const int B = shapes[si][0], C = shapes[si][1], P = shapes[si][2], G = shapes[si][3], Cg = C / G;
    const size_t n = (size_t)B * C * P, ns = (size_t)B * G;
    const double eps = 1e-5, N = (double)Cg * P;
    float *x = frand(n, -2, 3), *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -0.5, 0.5), *dy = frand(n, -1, 1),
          *dg0 = frand(C, -1, 1), *db0 = frand(C, -1, 1);
    for (size_t i = 0; i < n; i++) x[i] += (float)(i / ((size_t)Cg * P) % 3); /* groups of different means */
    float *got[6], *cpu[6] = {NULL};
    for (int which = 0; which < (g_cuda ? 2 : 1); which++) {
      float **o = which ? cpu : got;
      o[0] = fnan(n), o[1] = fnan(ns), o[2] = fnan(ns), o[3] = fnan(n), o[4] = fdup(dg0, C), o[5] = fdup(db0, C);
      run_groupnorm(which ? g_cpu : g_ctx, B, C, P, G, x, gamma, beta, dy, o[0], o[1], o[2], o[3], o[4], o[5]);
    }
    /* the float64 reference: statistics from x; the backward from the statistics as float, as they are saved */
    double *want[6], *scale[6];
    const size_t len[6] = {n, ns, ns, n, (size_t)C, (size_t)C};
    for (int q = 0; q < 6; q++) want[q] = dzero(len[q]), scale[q] = dzero(len[q]);
    for (int b = 0; b < B; b++)
      for (int g = 0; g < G; g++) {
        const size_t o = ((size_t)b * C + (size_t)g * Cg) * P, k = (size_t)b * G + g;
        double s = 0, v = 0, a = 0;
        for (size_t i = 0; i < (size_t)Cg * P; i++) s += x[o + i], a += fabs(x[o + i]);
        const double mu = s / N;
        for (size_t i = 0; i < (size_t)Cg * P; i++) v += (x[o + i] - mu) * (x[o + i] - mu);
        const double is = 1 / sqrt(v / N + eps);
        want[1][k] = mu, scale[1][k] = a / N, want[2][k] = is, scale[2][k] = is;
        const double mf = (float)mu, isf = (float)is;
        double sg = 0, sgx = 0, ag = 0, agx = 0;
        for (int kk = 0; kk < Cg; kk++) {
          const int c = g * Cg + kk;
          for (int p = 0; p < P; p++) {
            const size_t i = o + (size_t)kk * P + p;
            const double xh = (x[i] - mu) * is, xhf = (x[i] - mf) * isf;
            want[0][i] = xh * gamma[c] + beta[c], scale[0][i] = fabs(xh * gamma[c]) + fabs(beta[c]) + fabs(gamma[c]);
            sg += (double)dy[i] * gamma[c], sgx += (double)dy[i] * gamma[c] * xhf;
            ag += fabs(dy[i] * gamma[c]), agx += fabs(dy[i] * gamma[c] * xhf);
            want[4][c] += dy[i] * xhf, scale[4][c] += fabs(dy[i] * xhf);
            want[5][c] += dy[i], scale[5][c] += fabs(dy[i]);
          }
        }
        for (int kk = 0; kk < Cg; kk++) {
          const int c = g * Cg + kk;
          for (int p = 0; p < P; p++) {
            const size_t i = o + (size_t)kk * P + p;
            const double xhf = (x[i] - mf) * isf;
            want[3][i] = isf * ((double)dy[i] * gamma[c] - sg / N - xhf * sgx / N);
            scale[3][i] = isf * (fabs(dy[i] * gamma[c]) + ag / N + fabs(xhf) * agx / N);
          }
        }
      }
    for (int c = 0; c < C; c++) want[4][c] += dg0[c], scale[4][c] += fabs(dg0[c]), want[5][c] += db0[c], scale[5][c] += fabs(db0[c]);
    static const char *name[6] = {"y", "mean", "invstd", "dx", "dgamma", "dbeta"};
    for (int q = 0; q < 6; q++) {
      char what[128];
      snprintf(what, sizeof what, "groupnorm %s B=%d C=%d P=%d G=%d", name[q], B, C, P, G);
      verify(what, len[q], got[q], want[q], cpu[q], scale[q], 2e-6, 2e-5);
    }
    if (!g_cuda && lam_fmt_plain(g_fmt)) { /* the backward is the forward's derivative: central differences */
      float *w = frand(n, -1, 1), *dxw = fnan(n), *m = fnan(ns), *is = fnan(ns), *y = fnan(n), *dgw = fdup(dg0, C),
            *dbw = fdup(db0, C);
      run_groupnorm(g_ctx, B, C, P, G, x, gamma, beta, w, y, m, is, dxw, dgw, dbw);
      gn_fd f = {B, C, P, G, gamma, beta, w};
      char what[96];
      snprintf(what, sizeof what, "groupnorm d/dx B=%d C=%d P=%d G=%d", B, C, P, G);
      check_fd(what, n < 64 ? n : 64, x, dxw, gn_loss, &f, 1e-2, 2e-4, 2e-3);
      free(w), free(dxw), free(m), free(is), free(y), free(dgw), free(dbw);
    }
    for (int q = 0; q < 6; q++) free(want[q]), free(scale[q]), free(got[q]), free(cpu[q]);
    free(x), free(gamma), free(beta), free(dy), free(dg0), free(db0);
  }
}

/* ---- BatchNorm, a residual add and its activation in one (bn_act_fwd with r, bn_act_bwd with dr): against
 * bn_fwd + add + act_fwd and act_bwd + (dr = or += dz) + bn_bwd on the same backend, in the format under test; and
 * CUDA's against the CPU's. Each composite step rounds to float where the fused pass keeps the value in a register
 * (z, z + r), so they agree to float rounding of each value's scale (2e-6). ---- */
static void run_bn_add_act(lam_ctx *ctx, int B, int C, int P, int act, const float *x, const float *res,
                           const float *gamma, const float *beta, const float *dy, float *y, float *dx, float *dr,
                           int dr_add, float *dg, float *db) {
  const size_t n = (size_t)B * C * P, cb = (size_t)C * 4;
  float *d_x = dput(ctx, x, n * 4), *d_r = dput(ctx, res, n * 4), *d_g = dput(ctx, gamma, cb), *d_b = dput(ctx, beta, cb),
        *d_y = dput(ctx, y, n * 4), *d_m = dput(ctx, y, cb), *d_i = dput(ctx, y, cb), *d_rm = dput(ctx, gamma, cb),
        *d_rv = dput(ctx, gamma, cb), *d_dy = dput(ctx, dy, n * 4), *d_dx = dput(ctx, dx, n * 4),
        *d_dr = dput(ctx, dr, n * 4), *d_dg = dput(ctx, dg, cb), *d_db = dput(ctx, db, cb);
  void *fx = fin(ctx, d_x, B, C, P), *fr = fin(ctx, d_r, B, C, P), *fy = fin(ctx, d_y, B, C, P),
       *fdy = fin(ctx, d_dy, B, C, P), *fdx = fin(ctx, d_dx, B, C, P), *fdr = fin(ctx, d_dr, B, C, P);
  TU_OK(BE(ctx)->bn_act_fwd(ctx, g_fmt, B, C, P, act, 0.1f, fx, fr, d_g, d_b, fy, d_m, d_i, d_rm, d_rv, 0.1f, 1e-5f, 1));
  TU_OK(BE(ctx)->bn_act_bwd(ctx, g_fmt, B, C, P, act, 0.1f, fx, fy, fdy, d_g, d_b, d_m, d_i, fdx, fdr, dr_add, d_dg,
                            d_db));
  fout(ctx, fx, d_x, B, C, P, "bn_add_act x"), fout(ctx, fr, d_r, B, C, P, "bn_add_act r");
  fout(ctx, fy, d_y, B, C, P, "bn_add_act y"), fout(ctx, fdy, d_dy, B, C, P, "bn_add_act dy");
  fout(ctx, fdx, d_dx, B, C, P, "bn_add_act dx"), fout(ctx, fdr, d_dr, B, C, P, "bn_add_act dr");
  dget(ctx, y, d_y, n * 4, "bn_add_act y"), dget(ctx, dx, d_dx, n * 4, "bn_add_act dx");
  dget(ctx, dr, d_dr, n * 4, "bn_add_act dr"), dget(ctx, dg, d_dg, cb, "bn_add_act dgamma");
  dget(ctx, db, d_db, cb, "bn_add_act dbeta");
  float *all[] = {d_x, d_r, d_g, d_b, d_y, d_m, d_i, d_rm, d_rv, d_dy, d_dx, d_dr, d_dg, d_db};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) dfree(ctx, all[k]);
}
static void test_bn_add_act(void **state) {
  (void)state;
  static const int acts[] = {LAM_ACT_RELU, LAM_ACT_LEAKY, LAM_ACT_TANH, LAM_ACT_SIGMOID};
  static const int shapes[][3] = {{4, 8, 36}, {3, 5, 7}, {2, 64, 16}};
  uint64_t k = 0;
  for (int si = 0; si < 3; si++)
    for (int ai = 0; ai < 4; ai++)
      for (int dr_add = 0; dr_add < 2; dr_add++) {
        seed_case("bn_add_act", k++);
        const int B = shapes[si][0], C = shapes[si][1], P = shapes[si][2], act = acts[ai];
        const size_t n = (size_t)B * C * P;
        float *x = frand(n, -2, 3), *res = frand(n, -1, 1), *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -0.5, 0.5),
              *dy = frand(n, -1, 1), *dr0 = frand(n, -1, 1), *dg0 = frand(C, -1, 1), *db0 = frand(C, -1, 1);
        /* the composite: z = bn(x), s = z + r, y = act(s); ds = act'(y) dy; dr = ds (+ dr0); dx = bn_bwd(ds) */
        bn_bufs o = {fnan(n), fnan(C), fnan(C), fdup(gamma, C), fdup(gamma, C)};
        run_bn_fwd(g_ctx, B, C, P, x, gamma, beta, &o, 0.1f, 1e-5f, 1, 0);
        float *s_ = fnan(n), *yc = fnan(n), *ds = fnan(n), *dxc = fnan(n), *dgc = fdup(dg0, C), *dbc = fdup(db0, C);
        run_add(g_ctx, n, o.y, res, s_, 0);
        run_act(g_ctx, 0, act, 0.1f, n, s_, NULL, NULL, yc, 0);
        run_act(g_ctx, 1, act, 0.1f, n, s_, yc, dy, ds, 0);
        run_bn_bwd(g_ctx, B, C, P, x, ds, gamma, o.mean, o.invstd, dxc, dgc, dbc, 0);
        double *want[5], *scale[5];
        const float *comp[5] = {yc, dxc, ds, dgc, dbc};
        const size_t len[5] = {n, n, n, (size_t)C, (size_t)C};
        /* Each value's scale is the size of the terms it is made of, where the backends' float arithmetic differs
         * (an fma contracted or not, tanh's and sigmoid's own few ulps): y = act(z + r) by |z| + |r| (z + r may
         * cancel); dz = dy act'(y) by |dz| + |dy| (1 - y^2 cancels near 1, test_bn_act's); dx = k (dz - mean(dz) -
         * xhat mean(dz xhat)) by |k| (those terms' sizes); dgamma, dbeta by the sums of their terms' sizes. */
        double *dzs = dzero(n), *a1 = dzero(C), *a2 = dzero(C);
        for (size_t i = 0; i < n; i++) {
          const int c = (int)(i / P % C);
          const double xh = fabs(((double)x[i] - o.mean[c]) * o.invstd[c]);
          dzs[i] = fabs(ds[i]) + fabs(dy[i]), a1[c] += dzs[i], a2[c] += dzs[i] * xh;
        }
        for (int q = 0; q < 5; q++) {
          want[q] = dzero(len[q]), scale[q] = dzero(len[q]);
          for (size_t i = 0; i < len[q]; i++) {
            const int c = q < 3 ? (int)(i / P % C) : (int)i;
            const double xh = q < 3 ? fabs(((double)x[i] - o.mean[c]) * o.invstd[c]) : 0.0, N = (double)B * P;
            want[q][i] = comp[q][i] + (q == 2 && dr_add ? dr0[i] : 0.0);
            scale[q][i] = q == 0   ? fabs(comp[0][i]) + fabs(o.y[i]) + fabs(res[i])
                          : q == 1 ? fabs(gamma[c] * o.invstd[c]) * (dzs[i] + a1[c] / N + xh * a2[c] / N)
                          : q == 2 ? dzs[i] + (dr_add ? fabs(dr0[i]) : 0.0)
                          : q == 3 ? fabs(dg0[c]) + a2[c]
                                   : fabs(db0[c]) + a1[c];
          }
        }
        free(dzs), free(a1), free(a2);
        float *got[5], *cpu[5] = {NULL};
        for (int which = 0; which < (g_cuda ? 2 : 1); which++) {
          float **out = which ? cpu : got;
          out[0] = fnan(n), out[1] = fnan(n), out[2] = fdup(dr0, n), out[3] = fdup(dg0, C), out[4] = fdup(db0, C);
          run_bn_add_act(which ? g_cpu : g_ctx, B, C, P, act, x, res, gamma, beta, dy, out[0], out[1], out[2], dr_add,
                         out[3], out[4]);
        }
        static const char *name[5] = {"y", "dx", "dr", "dgamma", "dbeta"};
        for (int q = 0; q < 5; q++) {
          char what[160];
          snprintf(what, sizeof what, "bn_add_act %s act %d B=%d C=%d P=%d dr_add=%d [vs bn, add, act]", name[q], act, B, C,
                   P, dr_add);
          verify(what, len[q], got[q], want[q], cpu[q], scale[q], 2e-6, 2e-5);
          free(want[q]), free(scale[q]), free(got[q]), free(cpu[q]);
        }
        free(x), free(res), free(gamma), free(beta), free(dy), free(dr0), free(dg0), free(db0);
        free(o.y), free(o.mean), free(o.invstd), free(o.rm), free(o.rv);
        free(s_), free(yc), free(ds), free(dxc), free(dgc), free(dbc);
      }
}

/* Sync BatchNorm's three primitives (the ranks' BatchNorm sums between them, nn/ops/norm.c), each against a float64
 * reference on fresh inputs: bn_sums of x (sum, sum of squares per channel) and of dy (sum, sum of dy xhat, also added
 * into dgamma and dbeta); bn_sync_stats from given sums (mean, invstd, biased var, the running statistics with the
 * unbiased var); bn_sync_dx from given sums and N, with gamma and without. Channels far from 0 and with a spread of
 * their own; outputs start as NaN, so an element not written fails. */
static void test_bn_sync(void **state) {
  (void)state;
  const float momentum = 0.1f, eps = 1e-5f;
  if (g_cuda && lam_fmt_plain(g_fmt)) { /* CUDA runs sync BN in NHWC (its layout for models with convs): NCHW is refused */
    float *d = dput(g_ctx, (float[8]){1, 2, 3, 4, 5, 6, 7, 8}, 32), *o = dput(g_ctx, (float[8]){0}, 32);
    assert_int_equal(BE(g_ctx)->bn_sums(g_ctx, g_fmt, 1, 2, 2, d, NULL, NULL, NULL, o, NULL, NULL), LAM_ERR_UNSUPPORTED);
    assert_non_null(strstr(lam_last_error(), "NHWC"));
    dfree(g_ctx, d), dfree(g_ctx, o);
    print_message("  cuda NCHW: sync BN refused with a reason; its sums are checked in the NHWC run\n");
    return;
  }
  for (size_t s = 0; s < N_BCP; s++) {
    seed_case("bn_sync", s);
    const int B = k_bcp[s].B, C = k_bcp[s].C, P = k_bcp[s].P;
    const size_t n = (size_t)B * C * P, cb = (size_t)C * 4;
    const double N = (double)B * P;
    char geo[80], what[160];
    snprintf(geo, sizeof geo, "B=%d C=%d P=%d", B, C, P);
    float *x = xmalloc(n * 4), *dy = frand(n, -1, 1), *mean = xmalloc(cb), *invstd = xmalloc(cb);
    for (int c = 0; c < C; c++) {
      const double off = U(-3, 3), spread = U(0.2, 2);
      for (int b = 0; b < B; b++)
        for (int p = 0; p < P; p++) x[((size_t)b * C + c) * P + p] = (float)(off + spread * fr(-1, 1));
    }
    /* the statistics as float, from float64 sums of x */
    double *s1 = dzero(C), *s2 = dzero(C), *a1 = dzero(C), *a2 = dzero(C);
    for (size_t i = 0; i < n; i++) {
      const int c = (int)(i / P % C);
      s1[c] += x[i], s2[c] += (double)x[i] * x[i], a1[c] += fabs(x[i]);
    }
    for (int c = 0; c < C; c++) {
      const double mu = s1[c] / N, v = fmax(s2[c] / N - mu * mu, 0.0);
      mean[c] = (float)mu, invstd[c] = (float)(1 / sqrt(v + eps));
    }

    /* bn_sums of x: [sum x | sum x^2] */
    double *ref = dzero(2 * C), *scale = dzero(2 * C);
    for (int c = 0; c < C; c++) ref[c] = s1[c], scale[c] = a1[c] + 1e-30, ref[C + c] = s2[c], scale[C + c] = s2[c] + 1e-30;
    float *out = fnan(2 * C), *out_cpu = NULL;
    for (int pass = 0; pass < 1 + g_cuda; pass++) {
      lam_ctx *ctx = pass ? g_cpu : g_ctx;
      float *d_x = dput(ctx, x, n * 4), *d_out = dput(ctx, out, 2 * cb);
      void *fx = fin(ctx, d_x, B, C, P);
      TU_OK(BE(ctx)->bn_sums(ctx, g_fmt, B, C, P, fx, NULL, NULL, NULL, d_out, NULL, NULL));
      fout(ctx, fx, d_x, B, C, P, "bn_sums x (format)");
      float *o = pass ? (out_cpu = fnan(2 * C)) : out;
      dget(ctx, o, d_out, 2 * cb, "bn_sums");
      dfree(ctx, d_x), dfree(ctx, d_out);
    }
    snprintf(what, sizeof what, "bn_sums of x %s", geo);
    verify(what, 2 * C, out, ref, out_cpu, scale, 1e-6, 1e-5);

    /* bn_sums of dy: [sum dy | sum dy xhat], added into dbeta and dgamma */
    float *dg0 = frand(C, -1, 1), *db0 = frand(C, -1, 1);
    double *dref = dzero(2 * C), *dscale = dzero(2 * C), *gref = dzero(C), *gscale = dzero(C), *bref = dzero(C),
           *bscale = dzero(C);
    for (size_t i = 0; i < n; i++) {
      const int c = (int)(i / P % C);
      const double xh = ((double)x[i] - mean[c]) * invstd[c];
      dref[c] += dy[i], dscale[c] += fabs(dy[i]), dref[C + c] += dy[i] * xh, dscale[C + c] += fabs(dy[i] * xh);
    }
    for (int c = 0; c < C; c++) {
      dscale[C + c] += dscale[c] * fabs(mean[c]) * invstd[c]; /* the float mean's own rounding, times sum |dy| */
      gref[c] = dg0[c] + dref[C + c], gscale[c] = fabs(dg0[c]) + dscale[C + c];
      bref[c] = db0[c] + dref[c], bscale[c] = fabs(db0[c]) + dscale[c];
    }
    float *dout = fnan(2 * C), *dg = fdup(dg0, C), *db = fdup(db0, C), *dout_c = NULL, *dg_c = NULL, *db_c = NULL;
    for (int pass = 0; pass < 1 + g_cuda; pass++) {
      lam_ctx *ctx = pass ? g_cpu : g_ctx;
      float *d_x = dput(ctx, x, n * 4), *d_dy = dput(ctx, dy, n * 4), *d_m = dput(ctx, mean, cb),
            *d_i = dput(ctx, invstd, cb), *d_out = dput(ctx, dout, 2 * cb), *d_g = dput(ctx, dg0, cb),
            *d_b = dput(ctx, db0, cb);
      void *fx = fin(ctx, d_x, B, C, P), *fdy = fin(ctx, d_dy, B, C, P);
      TU_OK(BE(ctx)->bn_sums(ctx, g_fmt, B, C, P, fx, fdy, d_m, d_i, d_out, d_g, d_b));
      fout(ctx, fx, d_x, B, C, P, "bn_sums x (format)"), fout(ctx, fdy, d_dy, B, C, P, "bn_sums dy (format)");
      if (pass) dout_c = fnan(2 * C), dg_c = fnan(C), db_c = fnan(C);
      dget(ctx, pass ? dout_c : dout, d_out, 2 * cb, "bn_sums dy");
      dget(ctx, pass ? dg_c : dg, d_g, cb, "bn_sums dgamma"), dget(ctx, pass ? db_c : db, d_b, cb, "bn_sums dbeta");
      dfree(ctx, d_x), dfree(ctx, d_dy), dfree(ctx, d_m), dfree(ctx, d_i), dfree(ctx, d_out), dfree(ctx, d_g),
          dfree(ctx, d_b);
    }
    snprintf(what, sizeof what, "bn_sums of dy %s", geo);
    verify(what, 2 * C, dout, dref, dout_c, dscale, 2e-6, 2e-5);
    snprintf(what, sizeof what, "bn_sums dgamma += %s", geo);
    verify(what, C, dg, gref, dg_c, gscale, 2e-6, 2e-5);
    snprintf(what, sizeof what, "bn_sums dbeta += %s", geo);
    verify(what, C, db, bref, db_c, bscale, 2e-6, 2e-5);

    /* bn_sync_stats from the sums as float (sum x, sum x^2 over N) */
    float *sums = xmalloc(2 * cb);
    for (int c = 0; c < C; c++) sums[c] = (float)s1[c], sums[C + c] = (float)s2[c];
    float *rm0 = frand(C, -1, 1), *rv0 = frand(C, 0.5, 2);
    double *mref = dzero(C), *vref = dzero(C), *iref = dzero(C), *rmref = dzero(C), *rvref = dzero(C),
           *mscale = dzero(C), *vscale = dzero(C);
    for (int c = 0; c < C; c++) {
      const double mu = sums[c] / N, v = fmax(sums[C + c] / N - mu * mu, 0.0);
      mref[c] = mu, vref[c] = v, iref[c] = 1 / sqrt(v + eps);
      rmref[c] = (1 - momentum) * (double)rm0[c] + momentum * mu;
      rvref[c] = (1 - momentum) * (double)rv0[c] + momentum * (N > 1 ? v * N / (N - 1) : v);
      mscale[c] = fabs(mu) + 1e-3, vscale[c] = sums[C + c] / N + 1e-3; /* var's float sums: cancellation */
    }
    float *st[5], *st_c[5] = {NULL};
    for (int pass = 0; pass < 1 + g_cuda; pass++) {
      lam_ctx *ctx = pass ? g_cpu : g_ctx;
      float **o = pass ? st_c : st;
      for (int k = 0; k < 3; k++) o[k] = fnan(C);
      o[3] = fdup(rm0, C), o[4] = fdup(rv0, C);
      float *d_s = dput(ctx, sums, 2 * cb), *d[5];
      for (int k = 0; k < 5; k++) d[k] = dput(ctx, o[k], cb);
      TU_OK(BE(ctx)->bn_sync_stats(ctx, C, N, d_s, eps, momentum, d[0], d[1], d[2], d[3], d[4]));
      static const char *const names[5] = {"mean", "invstd", "var", "run_mean", "run_var"};
      for (int k = 0; k < 5; k++) dget(ctx, o[k], d[k], cb, names[k]), dfree(ctx, d[k]);
      dfree(ctx, d_s);
    }
    double *iscale = dzero(C), *rvscale = dzero(C), *rmscale = dzero(C);
    for (int c = 0; c < C; c++) iscale[c] = iref[c] * (1 + vscale[c] * iref[c] * iref[c]),
                                rvscale[c] = fabs(rvref[c]) + momentum * vscale[c] * (N > 1 ? N / (N - 1) : 1),
                                rmscale[c] = fabs(rmref[c]) + momentum * mscale[c];
    snprintf(what, sizeof what, "bn_sync_stats mean %s", geo);
    verify(what, C, st[0], mref, st_c[0], mscale, 1e-6, 1e-6);
    snprintf(what, sizeof what, "bn_sync_stats invstd %s", geo);
    verify(what, C, st[1], iref, st_c[1], iscale, 1e-5, 1e-5);
    snprintf(what, sizeof what, "bn_sync_stats var %s", geo);
    verify(what, C, st[2], vref, st_c[2], vscale, 1e-6, 1e-6);
    snprintf(what, sizeof what, "bn_sync_stats run_mean %s", geo);
    verify(what, C, st[3], rmref, st_c[3], rmscale, 1e-6, 1e-6);
    snprintf(what, sizeof what, "bn_sync_stats run_var %s", geo);
    verify(what, C, st[4], rvref, st_c[4], rvscale, 1e-5, 1e-5);

    /* bn_sync_dx from [sum dy | sum dy xhat] given as float and this N, with gamma and without */
    float *gamma = frand(C, -1.5, 1.5), *dsums = xmalloc(2 * cb);
    for (int c = 0; c < 2 * C; c++) dsums[c] = (float)dref[c];
    for (int with_gamma = 0; with_gamma < 2; with_gamma++) {
      double *xref = dzero(n), *xscale = dzero(n);
      for (size_t i = 0; i < n; i++) {
        const int c = (int)(i / P % C);
        const double is = invstd[c], k = (with_gamma ? gamma[c] : 1.0) * is, xh = ((double)x[i] - mean[c]) * is;
        xref[i] = k * (dy[i] - dsums[c] / N - xh * dsums[C + c] / N);
        xscale[i] = fabs(k) * (fabs(dy[i]) + fabs(dsums[c]) / N + fabs(xh) * fabs(dsums[C + c]) / N +
                               (1 + fabs(mean[c]) * is) * fabs(dsums[C + c]) / N + 1e-6);
      }
      float *dx = fnan(n), *dx_c = NULL;
      for (int pass = 0; pass < 1 + g_cuda; pass++) {
        lam_ctx *ctx = pass ? g_cpu : g_ctx;
        float *d_x = dput(ctx, x, n * 4), *d_dy = dput(ctx, dy, n * 4), *d_g = with_gamma ? dput(ctx, gamma, cb) : NULL,
              *d_m = dput(ctx, mean, cb), *d_i = dput(ctx, invstd, cb), *d_s = dput(ctx, dsums, 2 * cb),
              *d_dx = dput(ctx, dx, n * 4);
        void *fx = fin(ctx, d_x, B, C, P), *fdy = fin(ctx, d_dy, B, C, P), *fdx = fin(ctx, d_dx, B, C, P);
        TU_OK(BE(ctx)->bn_sync_dx(ctx, g_fmt, B, C, P, fx, fdy, d_g, d_m, d_i, d_s, N, fdx));
        fout(ctx, fx, d_x, B, C, P, "bn_sync_dx x (format)"), fout(ctx, fdy, d_dy, B, C, P, "bn_sync_dx dy (format)");
        fout(ctx, fdx, d_dx, B, C, P, "bn_sync_dx dx (format)");
        if (pass) dx_c = fnan(n);
        dget(ctx, pass ? dx_c : dx, d_dx, n * 4, "bn_sync_dx");
        dfree(ctx, d_x), dfree(ctx, d_dy), dfree(ctx, d_g), dfree(ctx, d_m), dfree(ctx, d_i), dfree(ctx, d_s),
            dfree(ctx, d_dx);
      }
      snprintf(what, sizeof what, "bn_sync_dx %s %s", with_gamma ? "with gamma" : "gamma NULL", geo);
      verify(what, n, dx, xref, dx_c, xscale, 2e-6, 2e-5);
      free(xref), free(xscale), free(dx), free(dx_c);
    }
    for (int k = 0; k < 5; k++) free(st[k]), free(st_c[k]);
    free(x), free(dy), free(mean), free(invstd), free(s1), free(s2), free(a1), free(a2), free(ref), free(scale);
    free(out), free(out_cpu), free(dg0), free(db0), free(dref), free(dscale), free(gref), free(gscale), free(bref);
    free(bscale), free(dout), free(dg), free(db), free(dout_c), free(dg_c), free(db_c), free(sums), free(rm0), free(rv0);
    free(mref), free(vref), free(iref), free(rmref), free(rvref), free(mscale), free(vscale), free(iscale), free(rvscale), free(rmscale);
    free(gamma), free(dsums);
  }
}

/* Over the shapes of test_bn and each activation: bn_act_fwd (train, eval) and bn_act_bwd against float64
 * references, and on the backend under test against bn_fwd + act_fwd and act_bwd + bn_bwd (the same float
 * expressions: to 1e-6 relative, in practice bit for bit; the smooth activations' backward to float
 * rounding), the statistics and running statistics bit for bit as bn_fwd's; on the CPU the backward by
 * central differences of bn_act_fwd; with "cuda" everything against the CPU backend. */
static void test_bn_act(void **state) {
  (void)state;
  static const int acts[] = {LAM_ACT_RELU, LAM_ACT_LEAKY, LAM_ACT_GELU, LAM_ACT_TANH, LAM_ACT_SIGMOID};
  const float momentum = 0.1f, eps = 1e-5f, alpha = 0.1f;
  uint64_t k = 0;
  for (size_t s = 0; s < N_BCP; s++)
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++)
      for (int train = 1; train >= 0; train--) {
        seed_case("bn_act", k++);
        const int act = acts[a], B = k_bcp[s].B, C = k_bcp[s].C, P = k_bcp[s].P, gelu = act == LAM_ACT_GELU;
        const int kink = act == LAM_ACT_RELU || act == LAM_ACT_LEAKY;
        size_t n = (size_t)B * C * P;
        double N = (double)B * P;
        char what[200], geo[120];
        snprintf(geo, sizeof geo, "%s B=%d C=%d P=%d %s", act_name(act), B, C, P, train ? "train" : "eval");
        /* as test_bn: each channel its own offset and spread, one case far from 0 against its spread */
        float *x = xmalloc(n * 4), *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -1, 1);
        double *off = dzero(C), *spread = dzero(C);
        for (int c = 0; c < C; c++) {
          off[c] = s == 7 ? 100.0 + c : U(-3, 3), spread[c] = U(0.2, 2);
          if (tu_next(&g_r) & 1) gamma[c] = -gamma[c];
        }
        for (size_t i = 0; i < n; i++) x[i] = (float)(off[i / P % C] + spread[i / P % C] * fr(-1, 1));
        float *rm0 = frand(C, -1, 1), *rv0 = frand(C, 0.5, 2);
        bn_ref r;
        bn_stats(B, C, P, x, &r);
        if (!train) /* running statistics near the batch's, as after training: z in the activations' range */
          for (int c = 0; c < C; c++)
            rm0[c] = (float)(r.mean[c] + U(-0.5, 0.5) * sqrt(r.var[c])), rv0[c] = (float)(r.var[c] * U(0.5, 2) + 1e-3);
        const int fd = !g_cuda && train && n <= 64 && B * P > 1;
        if (fd && kink) /* finite differences: beta moved so that no z lies within 0.05 of the kink at 0 */
          for (int c = 0; c < C; c++) {
            double is = 1 / sqrt(r.var[c] + eps), b0 = beta[c];
            for (int t = 0, ok = 0; !ok; t++) {
              if (t > 100) fail_msg("bn_act: no beta keeps channel %d away from the kink", c);
              beta[c] = (float)(b0 + 0.1 * ((t + 1) / 2) * (t % 2 ? 1 : -1)), ok = 1;
              for (int b = 0; b < B; b++)
                for (int p = 0; p < P; p++) {
                  double z = (x[((size_t)b * C + c) * P + p] - r.mean[c]) * is * gamma[c] + beta[c];
                  if (fabs(z) < 0.05) ok = 0;
                }
            }
          }

        /* ---- forward: the float64 reference ---- */
        double *yref = dzero(n), *yscale = dzero(n), *mref = dzero(C), *mscale = dzero(C), *iref = dzero(C),
               *rmref = dzero(C), *rmscale = dzero(C), *rvref = dzero(C), *zero = dzero(C);
        for (int c = 0; c < C; c++) {
          double m = train ? r.mean[c] : rm0[c], is = train ? 1 / sqrt(r.var[c] + eps) : 1 / sqrt((double)rv0[c] + eps);
          mref[c] = r.mean[c], mscale[c] = fabs(r.mean[c]) + sqrt(r.var[c]), iref[c] = is;
          double uv = N > 1 ? r.var[c] * N / (N - 1) : r.var[c];
          rmref[c] = train ? (1 - momentum) * (double)rm0[c] + momentum * r.mean[c] : rm0[c];
          rmscale[c] = train ? fabs(rmref[c]) + momentum * mscale[c] : 0;
          rvref[c] = train ? (1 - momentum) * (double)rv0[c] + momentum * uv : rv0[c];
          for (int b = 0; b < B; b++)
            for (int p = 0; p < P; p++) {
              size_t o = ((size_t)b * C + c) * P + p;
              double xh = (x[o] - m) * is, z = xh * gamma[c] + beta[c];
              yref[o] = act_ref(act, alpha, z);
              /* z's float error (bn_fwd's scale, test_bn) through act'(z), plus act's own few ulps (gelu's
               * 1 + erf cancels for negative z: of z's size, as in test_act) */
              double zs = fabs(xh * gamma[c]) + fabs(beta[c]) + fabs(gamma[c]) * (1 + fabs(m) * is);
              yscale[o] = fabs(act_grad_ref(act, alpha, z)) * zs + (gelu ? fabs(z) : fabs(yref[o]));
            }
        }
        bn_bufs o = {fnan(n), fnan(C), fnan(C), fdup(rm0, C), fdup(rv0, C)}, oc = {0};
        run_bn_act_fwd(g_ctx, B, C, P, act, alpha, x, gamma, beta, &o, momentum, eps, train);
        if (g_cuda) {
          oc = (bn_bufs){fnan(n), fnan(C), fnan(C), fdup(rm0, C), fdup(rv0, C)};
          run_bn_act_fwd(g_cpu, B, C, P, act, alpha, x, gamma, beta, &oc, momentum, eps, train);
        }
        snprintf(what, sizeof what, "bn_act_fwd y %s", geo);
        verify(what, n, o.y, yref, oc.y, yscale, 2e-6, 2e-5);
        verify_bn_stats("bn_act_fwd", geo, C, train, &o, &oc, mref, mscale, iref, rmref, rmscale, rvref, zero);

        /* ---- forward: against bn_fwd + act_fwd on the same backend ---- */
        bn_bufs ob = {fnan(n), fnan(C), fnan(C), fdup(rm0, C), fdup(rv0, C)}; /* ob.y: z */
        run_bn_fwd(g_ctx, B, C, P, x, gamma, beta, &ob, momentum, eps, train, 0);
        float *ycomp = fnan(n);
        run_act(g_ctx, 0, act, alpha, n, ob.y, NULL, NULL, ycomp, 0);
        double *w = dzero(n);
        for (size_t i = 0; i < n; i++) w[i] = ycomp[i];
        snprintf(what, sizeof what, "bn_act_fwd y %s [vs bn_fwd + act_fwd]", geo);
        cmp_f(what, n, o.y, w, NULL, 1e-6);
        /* the statistics come from bn_fwd's own code: the same bits */
        const float *same[4][2] = {{o.mean, ob.mean}, {o.invstd, ob.invstd}, {o.rm, ob.rm}, {o.rv, ob.rv}};
        static const char *sname[4] = {"mean", "invstd", "run_mean", "run_var"};
        for (int q = train ? 0 : 2; q < 4; q++) {
          for (int c = 0; c < C; c++) w[c] = same[q][1][c];
          snprintf(what, sizeof what, "bn_act_fwd %s %s [vs bn_fwd]", sname[q], geo);
          cmp_f(what, C, same[q][0], w, zero, 0.0);
        }

        if (train) {
          /* ---- backward: the float64 reference, from the statistics of x (as float, as the forward saves
           * them) and a y = act(z) rounded to float; gelu's y is not passed (NULL) ---- */
          float *mf = xmalloc(C * 4), *isf = xmalloc(C * 4), *yin = xmalloc(n * 4), *dy = frand(n, -1, 1),
                *dg0 = frand(C, -1, 1), *db0 = frand(C, -1, 1);
          double *dzref = dzero(n), *dzscale = dzero(n);
          for (int c = 0; c < C; c++) mf[c] = (float)r.mean[c], isf[c] = (float)(1 / sqrt(r.var[c] + eps));
          for (size_t i = 0; i < n; i++) {
            int c = (int)(i / P % C);
            double xh = ((double)x[i] - mf[c]) * isf[c], z = xh * gamma[c] + beta[c];
            yin[i] = (float)act_ref(act, alpha, z);
            double yv = yin[i];
            switch (act) { /* as test_act: from y, or from z for gelu */
              case LAM_ACT_RELU: dzref[i] = yv > 0 ? dy[i] : 0; break;
              case LAM_ACT_LEAKY: dzref[i] = yv > 0 ? dy[i] : (double)alpha * dy[i]; break;
              case LAM_ACT_TANH: dzref[i] = dy[i] * (1 - yv * yv); break;
              case LAM_ACT_SIGMOID: dzref[i] = dy[i] * yv * (1 - yv); break;
              default: dzref[i] = dy[i] * act_grad_ref(act, alpha, z);
            }
            /* dz's float error: exact products for relu and leaky; 1 - y^2 and y (1 - y) of |dy| times their
             * terms' size (test_act); gelu's of |dy| times its terms' and z's float error times gelu'' <= 0.8 */
            dzscale[i] = kink ? fabs(dzref[i]) : fabs(dy[i]) * (fabs(dzref[i] / dy[i]) + 1);
            /* relu's and leaky's mask comes from z in float (no residual here): a z within its rounding of 0 may
             * fall on either side of the kink */
            if (kink && fabs(z) <= 1e-6 * (fabs(xh * gamma[c]) + fabs(beta[c]))) dzscale[i] += fabs(dy[i]);
            if (gelu) dzscale[i] += fabs(dy[i]) * 0.8 * (fabs(xh * gamma[c]) + fabs(beta[c]));
          }
          double *dxref = dzero(n), *dxscale = dzero(n), *dgref = dzero(C), *dgscale = dzero(C), *dbref = dzero(C),
                 *dbscale = dzero(C);
          for (int c = 0; c < C; c++) { /* bn_bwd's reference (test_bn) on dz */
            double s1 = 0, s2 = 0, a1 = 0, a2 = 0;
            for (int b = 0; b < B; b++)
              for (int p = 0; p < P; p++) {
                size_t q = ((size_t)b * C + c) * P + p;
                double xh = ((double)x[q] - mf[c]) * isf[c];
                s1 += dzref[q], s2 += dzref[q] * xh, a1 += dzscale[q], a2 += dzscale[q] * fabs(xh);
              }
            dgref[c] = dg0[c] + s2, dgscale[c] = fabs(dg0[c]) + a2;
            dbref[c] = db0[c] + s1, dbscale[c] = fabs(db0[c]) + a1;
            double kk = (double)gamma[c] * isf[c];
            for (int b = 0; b < B; b++)
              for (int p = 0; p < P; p++) {
                size_t q = ((size_t)b * C + c) * P + p;
                double xh = ((double)x[q] - mf[c]) * isf[c];
                dxref[q] = kk * (dzref[q] - s1 / N - xh * s2 / N);
                dxscale[q] = fabs(kk) * (dzscale[q] + a1 / N + fabs(xh) * (1 + a2 / N) + fabs(mf[c]) * isf[c] * a2 / N);
              }
          }
          /* relu and leaky without y form dz from z (the path of a caller that never stores y); the comparison with
           * act_bwd + bn_bwd below gives them y */
          const float *yarg = gelu || kink ? NULL : yin;
          float *dx = fnan(n), *dgg = fdup(dg0, C), *dbg = fdup(db0, C), *dxc = NULL, *dgc = NULL, *dbc = NULL;
          run_bn_act_bwd(g_ctx, B, C, P, act, alpha, x, yarg, dy, gamma, beta, mf, isf, dx, dgg, dbg);
          if (g_cuda) {
            dxc = fnan(n), dgc = fdup(dg0, C), dbc = fdup(db0, C);
            run_bn_act_bwd(g_cpu, B, C, P, act, alpha, x, yarg, dy, gamma, beta, mf, isf, dxc, dgc, dbc);
          }
          snprintf(what, sizeof what, "bn_act_bwd dx %s", geo);
          verify(what, n, dx, dxref, dxc, dxscale, 1e-6, 2e-5);
          snprintf(what, sizeof what, "bn_act_bwd dgamma %s", geo);
          verify(what, C, dgg, dgref, dgc, dgscale, 2e-7, 1e-5);
          snprintf(what, sizeof what, "bn_act_bwd dbeta %s", geo);
          verify(what, C, dbg, dbref, dbc, dbscale, 2e-7, 1e-5);

          /* ---- backward: against act_bwd + bn_bwd on the same backend, after the forward above (bn_act_bwd
           * recomputes gelu's z as bn_fwd computed it); dx written over dy ---- */
          float *dz = fnan(n), *dx2 = fdup(dy, n), *dxcomp = fnan(n), *dg2 = fdup(dg0, C), *db2 = fdup(db0, C),
                *dgcomp = fdup(dg0, C), *dbcomp = fdup(db0, C);
          run_act(g_ctx, 1, act, alpha, n, ob.y, ycomp, dy, dz, 0);
          run_bn_bwd(g_ctx, B, C, P, x, dz, gamma, ob.mean, ob.invstd, dxcomp, dgcomp, dbcomp, 0);
          {
            size_t cb = (size_t)C * 4;
            float *d_x = dput(g_ctx, x, n * 4), *d_y = dput(g_ctx, gelu ? NULL : o.y, n * 4),
                  *d_dy = dput(g_ctx, dy, n * 4), *d_g = dput(g_ctx, gamma, cb), *d_b = dput(g_ctx, beta, cb),
                  *d_m = dput(g_ctx, o.mean, cb), *d_i = dput(g_ctx, o.invstd, cb), *d_dg = dput(g_ctx, dg2, cb),
                  *d_db = dput(g_ctx, db2, cb);
            void *fx = fin(g_ctx, d_x, B, C, P), *fy = fin(g_ctx, d_y, B, C, P), *fdy = fin(g_ctx, d_dy, B, C, P);
            TU_OK(BE(g_ctx)->bn_act_bwd(g_ctx, g_fmt, B, C, P, act, alpha, fx, fy, fdy, d_g, d_b, d_m, d_i, fdy, NULL, 0,
                                        d_dg, d_db));
            fout(g_ctx, fx, d_x, B, C, P, "bn_act_bwd x"), fout(g_ctx, fy, d_y, B, C, P, "bn_act_bwd y");
            fout(g_ctx, fdy, d_dy, B, C, P, "bn_act_bwd dx over dy (format)");
            dget(g_ctx, dx2, d_dy, n * 4, "bn_act_bwd dx (over dy)");
            dget(g_ctx, dg2, d_dg, cb, "bn_act_bwd dgamma"), dget(g_ctx, db2, d_db, cb, "bn_act_bwd dbeta");
            dfree(g_ctx, d_x), dfree(g_ctx, d_y), dfree(g_ctx, d_dy), dfree(g_ctx, d_g), dfree(g_ctx, d_b);
            dfree(g_ctx, d_m), dfree(g_ctx, d_i), dfree(g_ctx, d_dg), dfree(g_ctx, d_db);
          }
          /* relu and leaky: dz is an exact product, so the same bits (1e-6 relative); the others' dz may round
           * apart by an ulp (the compiler contracts a * b + c * d into an fma either way), on the scale */
          const float *pairs[3][2] = {{dx2, dxcomp}, {dg2, dgcomp}, {db2, dbcomp}};
          const double *pscale[3] = {dxscale, dgscale, dbscale};
          static const char *pname[3] = {"dx (over dy)", "dgamma", "dbeta"};
          for (int q = 0; q < 3; q++) {
            size_t m = q ? (size_t)C : n;
            double *want = dzero(m);
            for (size_t i = 0; i < m; i++) want[i] = pairs[q][1][i];
            snprintf(what, sizeof what, "bn_act_bwd %s %s [vs act_bwd + bn_bwd]", pname[q], geo);
            cmp_f(what, m, pairs[q][0], want, kink ? NULL : pscale[q], 1e-6);
            free(want);
          }

          /* ---- backward by central differences of bn_act_fwd (CPU): d/dx, d/dgamma, d/dbeta of sum(w y)
           * with w = dy; steps and the absolute tolerance scaled by the largest invstd |gamma| ---- */
          if (fd) {
            double isg = 1;
            for (int c = 0; c < C; c++)
              if (o.invstd[c] * fabs(gamma[c]) > isg) isg = o.invstd[c] * fabs(gamma[c]);
            const double h = 1e-2 / isg, atol = 1e-3 * isg, rtol = 2e-3;
            float *z = fdup(dg0, C), *zb = fdup(db0, C), *dxn = fnan(n);
            for (int c = 0; c < C; c++) z[c] = 0, zb[c] = 0;
            run_bn_act_bwd(g_ctx, B, C, P, act, alpha, x, o.y, dy, gamma, beta, o.mean, o.invstd, dxn, z, zb);
            snprintf(what, sizeof what, "bn_act_bwd %s [vs central differences]", geo);
            bn_act_fd f = {B, C, P, act, 0, alpha, x, gamma, beta, dy};
            float *v = fdup(x, n);
            check_fd(what, n, v, dxn, bn_act_loss, &f, h, atol, rtol);
            free(v);
            f.wrt = 1, v = fdup(gamma, C);
            check_fd(what, C, v, z, bn_act_loss, &f, h, atol, rtol);
            free(v);
            f.wrt = 2, v = fdup(beta, C);
            check_fd(what, C, v, zb, bn_act_loss, &f, h, atol, rtol);
            free(v), free(z), free(zb), free(dxn);
          }
          free(mf), free(isf), free(yin), free(dy), free(dg0), free(db0), free(dzref), free(dzscale), free(dxref);
          free(dxscale), free(dgref), free(dgscale), free(dbref), free(dbscale), free(dx), free(dgg), free(dbg);
          free(dxc), free(dgc), free(dbc), free(dz), free(dx2), free(dxcomp), free(dg2), free(db2), free(dgcomp);
          free(dbcomp);
        }
        free(x), free(gamma), free(beta), free(off), free(spread), free(rm0), free(rv0), free(yref), free(yscale);
        free(mref), free(mscale), free(iref), free(rmref), free(rmscale), free(rvref), free(zero), free(ycomp), free(w);
        free(o.y), free(o.mean), free(o.invstd), free(o.rm), free(o.rv);
        free(oc.y), free(oc.mean), free(oc.invstd), free(oc.rm), free(oc.rv);
        free(ob.y), free(ob.mean), free(ob.invstd), free(ob.rm), free(ob.rv);
        bn_ref_free(&r);
      }
}

/* ---- BatchNorm, its activation and a maxpool of stride K fused (bn_act_pool_fwd, bn_act_pool_bwd) ---- */

typedef struct bp_out {
  float *y, *mean, *invstd, *rm, *rv, *dx, *dg, *db;
  uint8_t *arg; /* each pooled value's max as its offset kh K + kw in the window, NCHW order */
} bp_out;

/* One forward (and in training the backward) on g_ctx in g_fmt: fused, or as the graph runs the nodes apart (bn_act_fwd
 * + maxpool_fwd; maxpool_bwd + bn_act_bwd with the stored y). Outputs start as NaN (arg as 0xEE), so an element not
 * written fails. */
static void bn_pool_run(int fused, const lam_pool_geom *g, int B, int act, float alpha, int train, const float *x,
                        const float *gamma, const float *beta, const float *dy, const float *rm0, const float *rv0,
                        const float *dg0, const float *db0, bp_out *o) {
  lam_ctx *ctx = g_ctx;
  const int C = g->C;
  const size_t P = (size_t)g->H * g->W, OP = (size_t)g->OH * g->OW, n = (size_t)B * C * P, no = (size_t)B * C * OP;
  const size_t cb = (size_t)C * 4;
  float *nan_n = fnan(n), *nan_no = fnan(no), *nan_c = fnan(C);
  uint8_t *ee = xmalloc(no);
  memset(ee, 0xEE, no);
  float *d_x = dput(ctx, x, n * 4), *d_y = dput(ctx, nan_no, no * 4), *d_g = dput(ctx, gamma, cb), *d_b = dput(ctx, beta, cb);
  float *d_m = dput(ctx, nan_c, cb), *d_i = dput(ctx, nan_c, cb), *d_rm = dput(ctx, rm0, cb), *d_rv = dput(ctx, rv0, cb);
  void *fx = fin(ctx, d_x, B, C, P), *fy = fin(ctx, d_y, B, C, OP);
  uint8_t *d_arg = fused ? dput(ctx, ee, no) : NULL;
  float *d_a = NULL, *d_arg32 = NULL;
  void *fa = NULL, *farg = NULL;
  if (fused) {
    TU_OK(BE(ctx)->bn_act_pool_fwd(ctx, g_fmt, g, B, act, alpha, fx, d_g, d_b, fy, d_arg, train ? d_m : NULL,
                                   train ? d_i : NULL, d_rm, d_rv, 0.1f, 1e-5f, train));
  } else {
    d_a = dput(ctx, nan_n, n * 4), d_arg32 = dput(ctx, nan_no, no * 4);
    fa = fin(ctx, d_a, B, C, P), farg = fin_i32(ctx, d_arg32, B, C, OP);
    TU_OK(BE(ctx)->bn_act_fwd(ctx, g_fmt, B, C, (int)P, act, alpha, fx, NULL, d_g, d_b, fa, train ? d_m : NULL,
                              train ? d_i : NULL, d_rm, d_rv, 0.1f, 1e-5f, train));
    TU_OK(BE(ctx)->maxpool_fwd(ctx, g_fmt, g, B, fa, fy, farg));
  }
  fout(ctx, fy, d_y, B, C, OP, "bn_act_pool y (format)");
  o->y = fnan(no), o->mean = fnan(C), o->invstd = fnan(C), o->rm = fnan(C), o->rv = fnan(C), o->arg = xmalloc(no);
  dget(ctx, o->y, d_y, no * 4, "bn_act_pool y");
  if (train) dget(ctx, o->mean, d_m, cb, "bn_act_pool mean"), dget(ctx, o->invstd, d_i, cb, "bn_act_pool invstd");
  dget(ctx, o->rm, d_rm, cb, "bn_act_pool run_mean"), dget(ctx, o->rv, d_rv, cb, "bn_act_pool run_var");
  o->dx = o->dg = o->db = NULL;
  if (train) {
    float *d_dy = dput(ctx, dy, no * 4), *d_dx = dput(ctx, nan_n, n * 4), *d_dg = dput(ctx, dg0, cb), *d_db = dput(ctx, db0, cb);
    void *fdy = fin(ctx, d_dy, B, C, OP), *fdx = fin(ctx, d_dx, B, C, P);
    if (fused) {
      TU_OK(BE(ctx)->bn_act_pool_bwd(ctx, g_fmt, g, B, act, alpha, fx, fdy, d_arg, d_g, d_b, d_m, d_i, fdx, d_dg, d_db));
    } else {
      float *d_da = dput(ctx, nan_n, n * 4);
      void *fda = fin(ctx, d_da, B, C, P);
      TU_OK(BE(ctx)->maxpool_bwd(ctx, g_fmt, g, B, fdy, farg, fda));
      TU_OK(BE(ctx)->bn_act_bwd(ctx, g_fmt, B, C, (int)P, act, alpha, fx, fa, fda, d_g, d_b, d_m, d_i, fdx, NULL, 0, d_dg,
                                d_db));
      fout(ctx, fda, d_da, B, C, P, "maxpool_bwd dx (format)");
      dfree(ctx, d_da);
    }
    fout(ctx, fdy, d_dy, B, C, OP, "bn_act_pool dy (format)"), fout(ctx, fdx, d_dx, B, C, P, "bn_act_pool dx (format)");
    o->dx = fnan(n), o->dg = fnan(C), o->db = fnan(C);
    dget(ctx, o->dx, d_dx, n * 4, "bn_act_pool dx");
    dget(ctx, o->dg, d_dg, cb, "bn_act_pool dgamma"), dget(ctx, o->db, d_db, cb, "bn_act_pool dbeta");
    dfree(ctx, d_dy), dfree(ctx, d_dx), dfree(ctx, d_dg), dfree(ctx, d_db);
  }
  /* the maxima as window offsets, NCHW order */
  if (fused) {
    uint8_t *raw = xmalloc(no);
    dget(ctx, raw, d_arg, no, "bn_act_pool arg");
    for (int b = 0; b < B; b++)
      for (int c = 0; c < C; c++)
        for (size_t q = 0; q < OP; q++)
          o->arg[((size_t)b * C + c) * OP + q] = raw[g_fmt.nhwc ? ((size_t)b * OP + q) * C + c : ((size_t)b * C + c) * OP + q];
    free(raw);
  } else {
    fout_i32(ctx, farg, d_arg32, B, C, OP, "maxpool arg (format)");
    fout(ctx, fa, d_a, B, C, P, "bn_act y (format)");
    int32_t *a32 = xmalloc(no * 4);
    dget(ctx, a32, d_arg32, no * 4, "maxpool arg");
    for (size_t i = 0; i < no; i++) {
      const int q = (int)(i % OP), oh = q / g->OW, ow = q % g->OW, h = a32[i] / g->W, w = a32[i] % g->W;
      if (a32[i] < 0 || (size_t)a32[i] >= P || h / g->K != oh || w / g->K != ow)
        fail_msg("maxpool arg %zu: plane index %d is outside its window", i, a32[i]);
      o->arg[i] = (uint8_t)((h - oh * g->K) * g->K + (w - ow * g->K));
    }
    free(a32);
  }
  fout(ctx, fx, d_x, B, C, P, "bn_act_pool x (format)");
  dfree(ctx, d_x), dfree(ctx, d_y), dfree(ctx, d_g), dfree(ctx, d_b), dfree(ctx, d_m), dfree(ctx, d_i), dfree(ctx, d_rm);
  dfree(ctx, d_rv), dfree(ctx, d_arg), dfree(ctx, d_a), dfree(ctx, d_arg32);
  free(nan_n), free(nan_no), free(nan_c), free(ee);
}
static void bp_free(bp_out *o) {
  free(o->y), free(o->mean), free(o->invstd), free(o->rm), free(o->rv), free(o->dx), free(o->dg), free(o->db), free(o->arg);
}
/* Bit for bit, or (tol > 0) within tol of the tensor's largest |b| */
static void bp_same(const char *what, size_t n, const float *a, const float *b, double tol) {
  double big = 0.0;
  for (size_t i = 0; i < n; i++) big = fmax(big, fabs(b[i]));
  for (size_t i = 0; i < n; i++) {
    const int ok = tol > 0 ? !isnan(a[i]) && fabs((double)a[i] - b[i]) <= tol * big : !memcmp(&a[i], &b[i], 4);
    if (!ok) fail_msg("%s: element %zu of %zu: fused %.9g, apart %.9g (tolerance %.1e of %.3g)", what, i, n, (double)a[i],
                      (double)b[i], tol, big);
  }
}

/* bn_act_pool against the primitives it fuses, on the backend under test, in its format and (in an NHWC run) in NHWC
 * bfloat16 and IEEE half: the same pooled values and maxima bit for bit, the same statistics and running ones, and
 * dx, dgamma, dbeta to 1e-6 of their scale (the same sums in the same order; in practice bit for bit). Those
 * primitives are checked against float64 above. The inputs give relu windows of ties (all negative: the first value
 * wins), and odd sizes leave rows and columns outside every window (their dx is BatchNorm's terms alone); C = 6 and 12
 * take the kernels' scalar path in 16 bits. CUDA in NCHW refuses the fused pair with a reason (the graph then runs the
 * nodes apart). */
static void test_bn_act_pool(void **state) {
  (void)state;
  if (g_cuda && !g_fmt.nhwc) {
    lam_pool_geom g = {8, 4, 4, 2, 2, 2, 2};
    float *d = dput(g_ctx, (float[128]){0}, 512), *o = dput(g_ctx, (float[32]){0}, 128);
    assert_int_equal(BE(g_ctx)->bn_act_pool_fwd(g_ctx, g_fmt, &g, 1, LAM_ACT_RELU, 0.0f, d, NULL, NULL, o, (uint8_t *)o, NULL,
                                                NULL, o, o, 0.1f, 1e-5f, 0),
                     LAM_ERR_UNSUPPORTED);
    assert_non_null(strstr(lam_last_error(), "NHWC"));
    dfree(g_ctx, d), dfree(g_ctx, o);
    print_message("  cuda NCHW: bn_act_pool refused with a reason; checked in the NHWC run\n");
    return;
  }
  static const struct { int B, C, H, W, K; } shapes[] = {{2, 8, 6, 6, 2}, {3, 16, 7, 9, 2}, {2, 6, 10, 11, 3},
                                                          {2, 12, 8, 8, 4}, {1, 32, 5, 5, 2}};
  static const int acts[] = {LAM_ACT_RELU, LAM_ACT_LEAKY, LAM_ACT_GELU};
  const lam_fmt keep = g_fmt;
  const lam_fmt fmts[3] = {keep, lam_fmt_of(LAM_DT_BF16, 1), lam_fmt_of(LAM_DT_F16, 1)};
  uint64_t k = 0;
  for (int fi = 0; fi < (keep.nhwc ? 3 : 1); fi++)
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++)
        for (int train = 1; train >= 0; train--) {
          seed_case("bn_act_pool", k++);
          g_fmt = fmts[fi];
          const int B = shapes[s].B, C = shapes[s].C, H = shapes[s].H, W = shapes[s].W, K = shapes[s].K, act = acts[a];
          const lam_pool_geom g = {C, H, W, K, K, H / K, W / K};
          const size_t n = (size_t)B * C * H * W, no = (size_t)B * C * g.OH * g.OW;
          float *x = xmalloc(n * 4), *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -1, 1), *dy = frand(no, -1, 1);
          float *rm0 = frand(C, -1, 1), *rv0 = frand(C, 0.5, 2), *dg0 = frand(C, -1, 1), *db0 = frand(C, -1, 1);
          for (int c = 0; c < C; c++) {
            const double off = U(-2, 2), spread = U(0.3, 2);
            if (c % 3 == 0) beta[c] = -2.0f; /* mostly negative z: relu's windows of ties */
            for (int b = 0; b < B; b++)
              for (int p = 0; p < H * W; p++) x[((size_t)b * C + c) * H * W + p] = (float)(off + spread * fr(-1, 1));
          }
          bp_out f, u;
          bn_pool_run(1, &g, B, act, 0.1f, train, x, gamma, beta, dy, rm0, rv0, dg0, db0, &f);
          bn_pool_run(0, &g, B, act, 0.1f, train, x, gamma, beta, dy, rm0, rv0, dg0, db0, &u);
          char what[200];
#define BP_WHAT(part) (snprintf(what, sizeof what, "bn_act_pool %s %s %s B=%d C=%d %dx%d K=%d %s", part, \
                                lam_fmt_plain(g_fmt) ? "nchw f32" : g_fmt.dt == LAM_DT_F32 ? "nhwc f32" : g_fmt.dt == LAM_DT_BF16 ? "nhwc bf16" : "nhwc f16", \
                                act_name(act), B, C, H, W, K, train ? "train" : "eval"), what)
          bp_same(BP_WHAT("y"), no, f.y, u.y, 0.0);
          for (size_t i = 0; i < no; i++)
            if (f.arg[i] != u.arg[i])
              fail_msg("%s: value %zu of %zu: fused max at %d, apart at %d", BP_WHAT("arg"), i, no, f.arg[i], u.arg[i]);
          bp_same(BP_WHAT("run_mean"), C, f.rm, u.rm, 0.0), bp_same(BP_WHAT("run_var"), C, f.rv, u.rv, 0.0);
          if (train) {
            bp_same(BP_WHAT("mean"), C, f.mean, u.mean, 0.0), bp_same(BP_WHAT("invstd"), C, f.invstd, u.invstd, 0.0);
            bp_same(BP_WHAT("dx"), n, f.dx, u.dx, 1e-6);
            bp_same(BP_WHAT("dgamma"), C, f.dg, u.dg, 1e-6), bp_same(BP_WHAT("dbeta"), C, f.db, u.db, 1e-6);
          }
#undef BP_WHAT
          bp_free(&f), bp_free(&u);
          free(x), free(gamma), free(beta), free(dy), free(rm0), free(rv0), free(dg0), free(db0);
        }
  g_fmt = keep;
  print_message("  bn_act_pool: %llu cases, fused = apart\n", (unsigned long long)k);
}

const struct CMUnitTest *prims_norm_tests(size_t *n) {
  static const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bn),
      cmocka_unit_test(test_bn_sync),
      cmocka_unit_test(test_bn_add_act),
      cmocka_unit_test(test_groupnorm),
      cmocka_unit_test(test_bn_act),
      cmocka_unit_test(test_bn_act_pool),
  };
  *n = sizeof tests / sizeof tests[0];
  return tests;
}
