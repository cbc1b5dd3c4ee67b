/* norm.h — BatchNorm's per-channel statistics, written once for the CPU twins (cpu/norm.c) and the CUDA kernels
 * (cuda/bn.cuh, cuda/norm.cu): the same float expressions, so both backends save the same mean and invstd and move
 * the running statistics alike. How each backend sums a channel (two passes in double on the CPU, shifted sums on
 * the GPU) stays its own; what follows from the sums is here. */
#ifndef LAMINA_NORM_H
#define LAMINA_NORM_H

#include <math.h>

#include "../prims.h"

/* invstd from a batch variance (double, as the statistics are summed). */
LAM_HD float lam_bn_invstd(double var, float eps) { return (float)(1.0 / sqrt(var + (double)eps)); }
/* invstd from a running variance (eval, and the synchronized forward). */
LAM_HD float lam_bn_invstd_running(float run_var, float eps) { return 1.0f / sqrtf(run_var + eps); }

/* Channel c's running statistics after a batch of N values with mean m and (biased) variance var, as PyTorch: the
 * unbiased variance (for one value the biased one, to stay finite). Either may be NULL. */
LAM_HD void lam_bn_running(float *run_mean, float *run_var, int c, float momentum, float m, double var, double N) {
  if (run_mean) run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * m;
  if (run_var) run_var[c] = (1.0f - momentum) * run_var[c] + momentum * (float)(N > 1.0 ? var * N / (N - 1.0) : var);
}

/* bn_sync_stats for channel c (prims.h): from the ranks' summed sums[c] = sum x and sums[C + c] = sum x^2 over N
 * values, the mean, the variance, invstd as the eval path computes it, and the running statistics. */
LAM_HD void lam_bn_sync_stats_channel(int c, int C, double N, const float *sums, float eps, float momentum,
                                      float *mean, float *invstd, float *var, float *run_mean, float *run_var) {
  const double mu = sums[c] / N, v = fmax(sums[C + c] / N - mu * mu, 0.0);
  mean[c] = (float)mu, var[c] = (float)v, invstd[c] = lam_bn_invstd_running(var[c], eps);
  lam_bn_running(run_mean, run_var, c, momentum, mean[c], v, N);
}

#endif
