/* norm.c — the CPU twins of the normalizations over groups of channels (prims.h): GroupNorm, and LayerNorm as its
 * one group. The CUDA twins are in cuda/norm.cu under the same names. Plain loops, sums in double, OpenMP over the
 * (sample, group) pairs with a static schedule; the parameter gradients summed per sample first, then over the
 * samples in order: the same bits every run and thread count. In NCHW a group's C/G channels lie together, so
 * each (sample, group) is one run of C/G x P values. */
#include <math.h>

#include "cpu.h"
#include "kernels.h"

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
