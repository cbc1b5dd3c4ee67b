/* norm.c — the CPU twins of the normalization primitives (prims.h): BatchNorm (alone, followed by an activation,
 * with a residual add, with its activation and a maxpool, and synchronized over ranks: bn_sums, bn_sync_stats,
 * bn_sync_dx), and GroupNorm, with
 * LayerNorm as its one group. The CUDA twins are in cuda/norm.cu under the same names. This is the tests'
 * oracle: plain loops, statistics and gradient sums in double, OpenMP with a static schedule; the same bits
 * every run and thread count. */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "kernels.h"
#include "../math/act.h"
#include "../math/half.h"
#include "../math/norm.h"

/* ---- BatchNorm, and BatchNorm followed by an activation ---- */

/* Channel c's mean and invstd: train, those of x over b and p (saved, and the running statistics
 * updated); else the running ones. Shared by bn_fwd and bn_act_fwd, so the two agree bit for bit. */
static void bn_channel_stats(int B, int C, int P, int c, const float *x, float *mean, float *invstd, float *run_mean,
                             float *run_var, float momentum, float eps, int train, float *m_out, float *is_out) {
  const size_t N = (size_t)B * P;
  float m, is;
  if (train) { /* two passes in double: the mean, then the squares about it */
    double s = 0.0, v = 0.0;
    for (int b = 0; b < B; b++) {
      const float *xs = x + ((size_t)b * C + c) * P;
      for (int p = 0; p < P; p++) s += xs[p];
    }
    const double mu = s / (double)N;
    for (int b = 0; b < B; b++) {
      const float *xs = x + ((size_t)b * C + c) * P;
      for (int p = 0; p < P; p++) v += ((double)xs[p] - mu) * ((double)xs[p] - mu);
    }
    const double var = v / (double)N;
    m = (float)mu, is = lam_bn_invstd(var, eps);
    mean[c] = m, invstd[c] = is;
    lam_bn_running(run_mean, run_var, c, momentum, m, var, (double)N);
  } else {
    m = run_mean[c], is = lam_bn_invstd_running(run_var[c], eps);
  }
  *m_out = m, *is_out = is;
}

static lam_status plain_bn_fwd(lam_ctx *ctx, int B, int C, int P, const float *x, const float *gamma, const float *beta, float *y,
                      float *mean, float *invstd, float *run_mean, float *run_var, float momentum, float eps,
                      int train) {
  (void)ctx;
  if (train && (!mean || !invstd))
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_fwd: training needs mean and invstd to save the batch statistics in");
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    float m, is;
    bn_channel_stats(B, C, P, c, x, mean, invstd, run_mean, run_var, momentum, eps, train, &m, &is);
    const float sc = is * (gamma ? gamma[c] : 1.0f), bt = beta ? beta[c] : 0.0f;
    for (int b = 0; b < B; b++) {
      size_t o = ((size_t)b * C + c) * P;
      for (int p = 0; p < P; p++) y[o + p] = (x[o + p] - m) * sc + bt;
    }
  }
  return LAM_OK;
}

/* Channel c's sum(dy) and sum(dy xhat) in double, and its dx = k (dy - mdy - xhat mdx) with xhat = (x - m) is:
 * bn_bwd's two passes, shared with sync BN's twins (which sum over the ranks between them). */
static void bn_channel_dy_sums(int B, int C, int P, int c, const float *x, const float *dy, double m, double is,
                               double *s1, double *s2) {
  double a = 0.0, b2 = 0.0;
  for (int b = 0; b < B; b++) {
    size_t o = ((size_t)b * C + c) * P;
    for (int p = 0; p < P; p++) {
      double g = dy[o + p];
      a += g;
      b2 += g * (((double)x[o + p] - m) * is);
    }
  }
  *s1 = a, *s2 = b2;
}
static void bn_channel_dx(int B, int C, int P, int c, const float *x, const float *dy, double m, double is, double k,
                          double mdy, double mdx, float *dx) {
  for (int b = 0; b < B; b++) {
    size_t o = ((size_t)b * C + c) * P;
    for (int p = 0; p < P; p++) dx[o + p] = (float)(k * ((double)dy[o + p] - mdy - ((double)x[o + p] - m) * is * mdx));
  }
}

static lam_status plain_bn_bwd(lam_ctx *ctx, int B, int C, int P, const float *x, const float *dy, const float *gamma,
                      const float *mean, const float *invstd, float *dx, float *dgamma, float *dbeta) {
  (void)ctx;
  const double N = (double)B * P;
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    const double m = mean[c], is = invstd[c];
    double s1, s2; /* sum(dy), sum(dy xhat) */
    bn_channel_dy_sums(B, C, P, c, x, dy, m, is, &s1, &s2);
    if (dgamma) dgamma[c] += (float)s2;
    if (dbeta) dbeta[c] += (float)s1;
    bn_channel_dx(B, C, P, c, x, dy, m, is, (gamma ? gamma[c] : 1.0) * is, s1 / N, s2 / N, dx);
  }
  return LAM_OK;
}

static lam_status plain_bn_sums(int B, int C, int P, const float *x, const float *dy, const float *mean,
                                const float *invstd, float *out, float *dgamma, float *dbeta) {
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    double s1 = 0.0, s2 = 0.0;
    if (dy) {
      bn_channel_dy_sums(B, C, P, c, x, dy, mean[c], invstd[c], &s1, &s2);
    } else {
      for (int b = 0; b < B; b++) {
        size_t o = ((size_t)b * C + c) * P;
        for (int p = 0; p < P; p++) {
          const double v = x[o + p];
          s1 += v, s2 += v * v;
        }
      }
    }
    out[c] = (float)s1, out[C + c] = (float)s2;
    if (dbeta) dbeta[c] += (float)s1;
    if (dgamma) dgamma[c] += (float)s2;
  }
  return LAM_OK;
}

static lam_status plain_bn_sync_dx(int B, int C, int P, const float *x, const float *dy, const float *gamma,
                                   const float *mean, const float *invstd, const float *sums, double N, float *dx) {
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    const double is = invstd[c];
    bn_channel_dx(B, C, P, c, x, dy, mean[c], is, (gamma ? gamma[c] : 1.0) * is, sums[c] / N, sums[C + c] / N, dx);
  }
  return LAM_OK;
}

static lam_status plain_bn_act_fwd(lam_ctx *ctx, int B, int C, int P, int act, float alpha, const float *x,
                          const float *r, const float *gamma, const float *beta, float *y, float *mean, float *invstd, float *run_mean, float *run_var,
                          float momentum, float eps, int train) {
  (void)ctx;
  if (train && (!mean || !invstd))
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_act_fwd: training needs mean and invstd to save the batch statistics in");
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    float m, is;
    bn_channel_stats(B, C, P, c, x, mean, invstd, run_mean, run_var, momentum, eps, train, &m, &is);
    const float sc = is * (gamma ? gamma[c] : 1.0f), bt = beta ? beta[c] : 0.0f;
    for (int b = 0; b < B; b++) {
      size_t o = ((size_t)b * C + c) * P;
      if (r)
        for (int p = 0; p < P; p++) y[o + p] = lam_act(act, alpha, (x[o + p] - m) * sc + bt + r[o + p]);
      else
        for (int p = 0; p < P; p++) y[o + p] = lam_act(act, alpha, (x[o + p] - m) * sc + bt);
    }
  }
  return LAM_OK;
}

/* zt: relu's and leaky's bound of y's type (act.h's lam_act_zero_bound), their dz from z where neither a residual
 * nor y is given */
static lam_status plain_bn_act_bwd(lam_ctx *ctx, int B, int C, int P, int act, float alpha, float zt, const float *x,
                                   const float *y, const float *dy, const float *gamma, const float *beta,
                                   const float *mean, const float *invstd, float *dx, float *dr, int dr_add,
                                   float *dgamma, float *dbeta) {
  (void)ctx;
  const double N = (double)B * P;
  /* dz from z, recomputed as bn_act_fwd computed it (relu and leaky by lam_act_grad_z); else from y */
  const int gelu = act == LAM_ACT_GELU, from_z = lam_bn_act_dz_from_z(act, dr != NULL, y != NULL);
  const int zmask = from_z && !gelu;
  if (!from_z && !y)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_act_bwd: tanh, sigmoid and a residual's relu or leaky read y, which is NULL");
  if (gelu && dr) return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_act_bwd: a residual's gradient needs an activation read from y, not gelu");
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    const float mf = mean[c], sc = invstd[c] * (gamma ? gamma[c] : 1.0f), bt = beta ? beta[c] : 0.0f;
    const double m = mean[c], is = invstd[c];
    double s1 = 0.0, s2 = 0.0; /* sum(dz), sum(dz xhat) */
    for (int b = 0; b < B; b++) {
      size_t o = ((size_t)b * C + c) * P;
      for (int p = 0; p < P; p++) {
        float z = from_z ? (x[o + p] - mf) * sc + bt : 0.0f, yv = from_z ? 0.0f : y[o + p];
        double g = zmask ? lam_act_grad_z(act, alpha, z, zt, dy[o + p]) : lam_act_grad(act, alpha, z, yv, dy[o + p]);
        s1 += g;
        s2 += g * (((double)x[o + p] - m) * is);
      }
    }
    if (dgamma) dgamma[c] += (float)s2;
    if (dbeta) dbeta[c] += (float)s1;
    const double mdz = s1 / N, mdx = s2 / N, k = (gamma ? gamma[c] : 1.0) * is;
    for (int b = 0; b < B; b++) {
      size_t o = ((size_t)b * C + c) * P;
      for (int p = 0; p < P; p++) { /* dz again: each value is read before dx's is written (dx may be dy) */
        float z = from_z ? (x[o + p] - mf) * sc + bt : 0.0f, yv = from_z ? 0.0f : y[o + p];
        double g = zmask ? lam_act_grad_z(act, alpha, z, zt, dy[o + p]) : lam_act_grad(act, alpha, z, yv, dy[o + p]);
        if (dr) dr[o + p] = dr_add ? dr[o + p] + (float)g : (float)g;
        dx[o + p] = (float)(k * (g - mdz - ((double)x[o + p] - m) * is * mdx));
      }
    }
  }
  return LAM_OK;
}

/* ---- BatchNorm in any format: through its plain twins (cpu/layout.c) ---- */

lam_status cpu_bn_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, const float *gamma,
                      const float *beta, void *y, float *mean, float *invstd, float *run_mean, float *run_var,
                      float momentum, float eps, int train) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x);
  float *ty = cpu_fmt_out(&j, B, C, P, y, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_bn_fwd(ctx, B, C, P, tx, gamma, beta, ty, mean, invstd, run_mean,
                                                             run_var, momentum, eps, train));
}
lam_status cpu_bn_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, const void *dy, const float *gamma,
                      const float *mean, const float *invstd, void *dx, float *dgamma, float *dbeta) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x), *tdy = cpu_fmt_in(&j, B, C, P, dy);
  float *tdx = cpu_fmt_out(&j, B, C, P, dx, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_bn_bwd(ctx, B, C, P, tx, tdy, gamma, mean, invstd, tdx, dgamma,
                                                             dbeta));
}
lam_status cpu_bn_sums(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, const void *dy, const float *mean,
                       const float *invstd, float *out, float *dgamma, float *dbeta) {
  (void)ctx;
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x), *tdy = dy ? cpu_fmt_in(&j, B, C, P, dy) : NULL;
  return cpu_fmt_end(&j, j.status ? j.status : plain_bn_sums(B, C, P, tx, tdy, mean, invstd, out, dgamma, dbeta));
}
/* Per channel, in double as bn_fwd's statistics are; invstd as bn_fwd computes it from running statistics
 * (eval), which the synchronized forward then runs with these. */
lam_status cpu_bn_sync_stats(lam_ctx *ctx, int C, double N, const float *sums, float eps, float momentum, float *mean,
                             float *invstd, float *var, float *run_mean, float *run_var) {
  (void)ctx;
  for (int c = 0; c < C; c++) lam_bn_sync_stats_channel(c, C, N, sums, eps, momentum, mean, invstd, var, run_mean, run_var);
  return LAM_OK;
}
lam_status cpu_bn_sync_dx(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, const void *dy, const float *gamma,
                          const float *mean, const float *invstd, const float *sums, double N, void *dx) {
  (void)ctx;
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x), *tdy = cpu_fmt_in(&j, B, C, P, dy);
  float *tdx = cpu_fmt_out(&j, B, C, P, dx, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_bn_sync_dx(B, C, P, tx, tdy, gamma, mean, invstd, sums, N, tdx));
}
lam_status cpu_bn_act_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, int act, float alpha, const void *x,
                          const void *r, const float *gamma, const float *beta, void *y, float *mean, float *invstd,
                          float *run_mean, float *run_var, float momentum, float eps, int train) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x), *tr = r ? cpu_fmt_in(&j, B, C, P, r) : NULL;
  float *ty = cpu_fmt_out(&j, B, C, P, y, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_bn_act_fwd(ctx, B, C, P, act, alpha, tx, tr, gamma, beta, ty, mean,
                                                                 invstd, run_mean, run_var, momentum, eps, train));
}
lam_status cpu_bn_act_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, int act, float alpha, const void *x,
                          const void *y, const void *dy, const float *gamma, const float *beta, const float *mean,
                          const float *invstd, void *dx, void *dr, int dr_add, float *dgamma, float *dbeta) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const int reads_y = !lam_bn_act_dz_from_z(act, dr != NULL, y != NULL);
  const float *tx = cpu_fmt_in(&j, B, C, P, x), *ty = reads_y ? cpu_fmt_in(&j, B, C, P, y) : NULL,
              *tdy = cpu_fmt_in(&j, B, C, P, dy);
  float *tdr = dr ? cpu_fmt_out(&j, B, C, P, dr, dr_add) : NULL; /* before dx: dx may be dy, dr never */
  float *tdx = cpu_fmt_out(&j, B, C, P, dx, 0);
  return cpu_fmt_end(&j, j.status ? j.status
                                  : plain_bn_act_bwd(ctx, B, C, P, act, alpha, lam_act_zero_bound(f.dt), tx, ty, tdy,
                                                     gamma, beta, mean, invstd, tdx, tdr, dr_add, dgamma, dbeta));
}

/* ---- BatchNorm, its activation and a K×K maxpool of stride K (bn_act_pool): act(z) as plain_bn_act_fwd computes it,
 * rounded to dt as the stored activation would be (so each window's max and its position are the unfused ops'), then
 * the first max of each window; backward routes dy to those maxima and runs plain_bn_act_bwd from z. act(z) and its
 * gradient live in a host temporary here: the CUDA twin never forms them. ---- */

/* Output value (b, c, o) of OP per plane: its index in NCHW or NHWC */
static size_t pool_at(int nhwc, int C, size_t OP, int b, int c, size_t o) {
  return nhwc ? ((size_t)b * OP + o) * C + c : ((size_t)b * C + c) * OP + o;
}

static lam_status plain_bn_act_pool_fwd(lam_ctx *ctx, int dt, int arg_nhwc, const lam_pool_geom *g, int B, int act,
                                        float alpha, const float *x, const float *gamma, const float *beta, float *y,
                                        uint8_t *arg, float *mean, float *invstd, float *run_mean, float *run_var,
                                        float momentum, float eps, int train) {
  const int C = g->C, K = g->K;
  const size_t P = (size_t)g->H * g->W, OP = (size_t)g->OH * g->OW, n = (size_t)B * C * P;
  float *a = malloc((n ? n : 1) * sizeof *a);
  if (!a) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "bn_act_pool_fwd: no host memory for act(z) (%zu values)", n);
  lam_status s = plain_bn_act_fwd(ctx, B, C, (int)P, act, alpha, x, NULL, gamma, beta, a, mean, invstd, run_mean, run_var,
                                  momentum, eps, train);
  if (s == LAM_OK) {
#pragma omp parallel for collapse(2) schedule(static) if (n > PAR_MIN)
    for (int b = 0; b < B; b++)
      for (int c = 0; c < C; c++) {
        float *as = a + ((size_t)b * C + c) * P;
        if (dt != LAM_DT_F32)
          for (size_t p = 0; p < P; p++) as[p] = lam_half_to_f32(dt, lam_f32_to_half(dt, as[p]));
        for (int oh = 0; oh < g->OH; oh++)
          for (int ow = 0; ow < g->OW; ow++) {
            const float *w0 = as + (size_t)oh * K * g->W + (size_t)ow * K;
            float m = w0[0];
            int best = 0;
            for (int i = 0; i < K; i++)
              for (int j = 0; j < K; j++) {
                const float v = w0[(size_t)i * g->W + j];
                if (v > m || v != v) m = v, best = i * K + j; /* NaN wins, as maxpool_fwd */
              }
            const size_t o = (size_t)oh * g->OW + ow;
            y[((size_t)b * C + c) * OP + o] = m;
            arg[pool_at(arg_nhwc, C, OP, b, c, o)] = (uint8_t)best;
          }
      }
  }
  free(a);
  return s;
}

static lam_status plain_bn_act_pool_bwd(lam_ctx *ctx, int dt, int arg_nhwc, const lam_pool_geom *g, int B, int act,
                                        float alpha, const float *x, const float *dy, const uint8_t *arg,
                                        const float *gamma, const float *beta, const float *mean, const float *invstd,
                                        float *dx, float *dgamma, float *dbeta) {
  const int C = g->C, K = g->K;
  const size_t P = (size_t)g->H * g->W, OP = (size_t)g->OH * g->OW, n = (size_t)B * C * P;
  float *da = calloc(n ? n : 1, sizeof *da);
  if (!da) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "bn_act_pool_bwd: no host memory for act(z)'s gradient (%zu values)", n);
#pragma omp parallel for collapse(2) schedule(static) if (n > PAR_MIN)
  for (int b = 0; b < B; b++)
    for (int c = 0; c < C; c++)
      for (size_t o = 0; o < OP; o++) {
        const int k = arg[pool_at(arg_nhwc, C, OP, b, c, o)], oh = (int)(o / g->OW), ow = (int)(o % g->OW);
        da[((size_t)b * C + c) * P + (size_t)(oh * K + k / K) * g->W + ow * K + k % K] = dy[((size_t)b * C + c) * OP + o];
      }
  lam_status s = plain_bn_act_bwd(ctx, B, C, (int)P, act, alpha, lam_act_zero_bound(dt), x, NULL, da, gamma, beta, mean,
                                  invstd, dx, NULL, 0, dgamma, dbeta);
  free(da);
  return s;
}

lam_status cpu_bn_act_pool_fwd(lam_ctx *ctx, lam_fmt f, const lam_pool_geom *g, int B, int act, float alpha, const void *x,
                               const float *gamma, const float *beta, void *y, uint8_t *arg, float *mean, float *invstd,
                               float *run_mean, float *run_var, float momentum, float eps, int train) {
  LAM_TRY(lam_bn_act_pool_check("bn_act_pool_fwd", g, act));
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, g->C, (size_t)g->H * g->W, x);
  float *ty = cpu_fmt_out(&j, B, g->C, (size_t)g->OH * g->OW, y, 0);
  return cpu_fmt_end(&j, j.status ? j.status
                                  : plain_bn_act_pool_fwd(ctx, f.dt, f.nhwc, g, B, act, alpha, tx, gamma, beta, ty, arg,
                                                          mean, invstd, run_mean, run_var, momentum, eps, train));
}
lam_status cpu_bn_act_pool_bwd(lam_ctx *ctx, lam_fmt f, const lam_pool_geom *g, int B, int act, float alpha, const void *x,
                               const void *dy, const uint8_t *arg, const float *gamma, const float *beta,
                               const float *mean, const float *invstd, void *dx, float *dgamma, float *dbeta) {
  LAM_TRY(lam_bn_act_pool_check("bn_act_pool_bwd", g, act));
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, g->C, (size_t)g->H * g->W, x), *tdy = cpu_fmt_in(&j, B, g->C, (size_t)g->OH * g->OW, dy);
  float *tdx = cpu_fmt_out(&j, B, g->C, (size_t)g->H * g->W, dx, 0);
  return cpu_fmt_end(&j, j.status ? j.status
                                  : plain_bn_act_pool_bwd(ctx, f.dt, f.nhwc, g, B, act, alpha, tx, tdy, arg, gamma, beta,
                                                          mean, invstd, tdx, dgamma, dbeta));
}

/* ---- GroupNorm, and LayerNorm as its one group: OpenMP over the (sample, group) pairs; the parameter gradients
 * summed per sample first, then over the samples in order. In NCHW a group's C/G channels lie together, so each
 * (sample, group) is one run of C/G x P values. ---- */

static lam_status plain_groupnorm_fwd(int B, int C, int P, int G, const float *x, const float *gamma, const float *beta,
                                      float *y, float *mean, float *invstd, float eps) {
  const int Cg = C / G;
  const size_t n = (size_t)Cg * P;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int b = 0; b < B; b++)
    for (int g = 0; g < G; g++) {
      const size_t o = ((size_t)b * C + (size_t)g * Cg) * P;
      double s = 0.0, v = 0.0;
      for (size_t i = 0; i < n; i++) s += x[o + i];
      const double mu = s / (double)n;
      for (size_t i = 0; i < n; i++) v += (x[o + i] - mu) * (x[o + i] - mu); /* two passes: no cancellation */
      const float m = (float)mu, is = (float)(1.0 / sqrt(v / (double)n + eps));
      mean[b * G + g] = m, invstd[b * G + g] = is;
      for (int k = 0; k < Cg; k++) {
        const int c = g * Cg + k;
        const float sc = is * (gamma ? gamma[c] : 1.0f), bt = beta ? beta[c] : 0.0f;
        for (int p = 0; p < P; p++) y[o + (size_t)k * P + p] = (x[o + (size_t)k * P + p] - m) * sc + bt;
      }
    }
  return LAM_OK;
}

static lam_status plain_groupnorm_bwd(int B, int C, int P, int G, const float *x, const float *dy, const float *gamma,
                                      const float *mean, const float *invstd, float *dx, float *dgamma, float *dbeta,
                                      float *work) {
  const int Cg = C / G;
  const double n = (double)Cg * P;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int b = 0; b < B; b++)
    for (int g = 0; g < G; g++) {
      const size_t o = ((size_t)b * C + (size_t)g * Cg) * P;
      const double m = mean[b * G + g], is = invstd[b * G + g];
      double sg = 0.0, sgx = 0.0; /* sum(g), sum(g xhat) over the group, g = dy gamma */
      for (int k = 0; k < Cg; k++) {
        const int c = g * Cg + k;
        double s1 = 0.0, s2 = 0.0; /* sum(dy), sum(dy xhat) over the channel's pixels */
        for (int p = 0; p < P; p++) {
          const size_t i = o + (size_t)k * P + p;
          s1 += dy[i], s2 += dy[i] * ((x[i] - m) * is);
        }
        work[2 * ((size_t)b * C + c)] = (float)s1, work[2 * ((size_t)b * C + c) + 1] = (float)s2;
        const double gc = gamma ? gamma[c] : 1.0;
        sg += gc * s1, sgx += gc * s2;
      }
      const double mg = sg / n, mgx = sgx / n;
      for (int k = 0; k < Cg; k++) {
        const double gc = gamma ? gamma[g * Cg + k] : 1.0;
        for (int p = 0; p < P; p++) {
          const size_t i = o + (size_t)k * P + p;
          dx[i] = (float)(is * (dy[i] * gc - mg - (x[i] - m) * is * mgx));
        }
      }
    }
  for (int c = 0; c < C; c++) { /* the samples' parts in order */
    double s1 = 0.0, s2 = 0.0;
    for (int b = 0; b < B; b++) s1 += work[2 * ((size_t)b * C + c)], s2 += work[2 * ((size_t)b * C + c) + 1];
    if (dbeta) dbeta[c] += (float)s1;
    if (dgamma) dgamma[c] += (float)s2;
  }
  return LAM_OK;
}

lam_status cpu_groupnorm_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, int G, const void *x, const float *gamma,
                             const float *beta, void *y, float *mean, float *invstd, float eps) {
  (void)ctx;
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x);
  float *ty = cpu_fmt_out(&j, B, C, P, y, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_groupnorm_fwd(B, C, P, G, tx, gamma, beta, ty, mean, invstd, eps));
}

lam_status cpu_groupnorm_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, int G, const void *x, const void *dy,
                             const float *gamma, const float *mean, const float *invstd, void *dx, float *dgamma,
                             float *dbeta, float *work) {
  (void)ctx;
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x), *tdy = cpu_fmt_in(&j, B, C, P, dy);
  float *tdx = cpu_fmt_out(&j, B, C, P, dx, 0);
  return cpu_fmt_end(&j, j.status ? j.status
                                  : plain_groupnorm_bwd(B, C, P, G, tx, tdy, gamma, mean, invstd, tdx, dgamma, dbeta,
                                                        work));
}
