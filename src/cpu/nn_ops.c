/* nn_ops.c — the CPU twins of the nn primitives beyond the CNN's first set (prims.h): per-channel bias (the pooling is in
 * cpu/pool.c, BatchNorm in cpu/norm.c). The CUDA twins are in cuda/nn_ops.cu under the same names. This is the tests' oracle: plain loops,
 * reductions summed in double, OpenMP over the outer loop with a static schedule (the same bits every
 * run). */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "kernels.h"
#include "../math/act.h"

/* ---- per-channel bias over (B, C, P) ---- */

static lam_status plain_channel_bias_fwd(lam_ctx *ctx, int B, int C, int P, float *y, const float *bias) {
  (void)ctx;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int b = 0; b < B; b++)
    for (int c = 0; c < C; c++) {
      float *d = y + ((size_t)b * C + c) * P;
      const float bc = bias[c];
      for (int p = 0; p < P; p++) d[p] += bc;
    }
  return LAM_OK;
}

static lam_status plain_channel_bias_bwd(lam_ctx *ctx, int B, int C, int P, const float *dy, float *db) {
  (void)ctx;
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    double s = 0.0;
    for (int b = 0; b < B; b++) {
      const float *d = dy + ((size_t)b * C + c) * P;
      for (int p = 0; p < P; p++) s += d[p];
    }
    db[c] += (float)s;
  }
  return LAM_OK;
}

/* ---- the primitives above in any format: through their plain twins (cpu/layout.c) ---- */

lam_status cpu_channel_bias_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, void *y, const float *bias) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  float *ty = cpu_fmt_out(&j, B, C, P, y, 1);
  return cpu_fmt_end(&j, j.status ? j.status : plain_channel_bias_fwd(ctx, B, C, P, ty, bias));
}
lam_status cpu_channel_bias_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *dy, float *db) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tdy = cpu_fmt_in(&j, B, C, P, dy);
  return cpu_fmt_end(&j, j.status ? j.status : plain_channel_bias_bwd(ctx, B, C, P, tdy, db));
}
