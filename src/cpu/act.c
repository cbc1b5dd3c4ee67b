/* act.c — the CPU twins of the activation primitives (prims.h): act_fwd and act_bwd, dropout_mask and
 * mask_scale; the CUDA twins are in cuda/act.cu under the same names. Elementwise loops on OpenMP's static
 * schedule (any format: through the plain float32 loops, cpu/layout.c). */
#include <math.h>

#include "cpu.h"
#include "kernels.h"
#include "../math/act.h"
#include "../math/hash.h"

static lam_status plain_act_fwd(lam_ctx *ctx, int act, float alpha, size_t n, const float *x, float *y) {
  (void)ctx;
  switch (act) {
    case LAM_ACT_RELU:
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
      for (size_t i = 0; i < n; i++) y[i] = lam_relu(x[i]);
      break;
    case LAM_ACT_LEAKY:
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
      for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : alpha * x[i];
      break;
    case LAM_ACT_TANH:
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
      for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
      break;
    case LAM_ACT_GELU:
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
      for (size_t i = 0; i < n; i++) y[i] = lam_act(LAM_ACT_GELU, alpha, x[i]);
      break;
    default:
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
      for (size_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i]));
  }
  return LAM_OK;
}

static lam_status plain_act_bwd(lam_ctx *ctx, int act, float alpha, size_t n, const float *x, const float *y, const float *dy,
                       float *dx) {
  (void)ctx;
  switch (act) {
    case LAM_ACT_RELU:
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
      for (size_t i = 0; i < n; i++) dx[i] = lam_relu_passed(y[i]) ? dy[i] : 0.0f;
      break;
    case LAM_ACT_LEAKY:
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
      for (size_t i = 0; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : alpha * dy[i];
      break;
    case LAM_ACT_TANH:
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
      for (size_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
      break;
    case LAM_ACT_GELU:
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
      for (size_t i = 0; i < n; i++) dx[i] = lam_act_grad(LAM_ACT_GELU, alpha, x[i], 0.0f, dy[i]);
      break;
    default:
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
      for (size_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
  }
  return LAM_OK;
}

lam_status cpu_act_fwd(lam_ctx *ctx, lam_fmt f, int act, float alpha, size_t n, const void *x, void *y) {
  cpu_fmt_job j = cpu_fmt_begin(lam_fmt_of(f.dt, 0));
  const float *tx = cpu_fmt_in(&j, 1, 1, n, x);
  float *ty = cpu_fmt_out(&j, 1, 1, n, y, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_act_fwd(ctx, act, alpha, n, tx, ty));
}
lam_status cpu_act_bwd(lam_ctx *ctx, lam_fmt f, int act, float alpha, size_t n, const void *x, const void *y,
                       const void *dy, void *dx) {
  cpu_fmt_job j = cpu_fmt_begin(lam_fmt_of(f.dt, 0));
  const float *tx = cpu_fmt_in(&j, 1, 1, n, x), *ty = cpu_fmt_in(&j, 1, 1, n, y), *tdy = cpu_fmt_in(&j, 1, 1, n, dy);
  float *tdx = cpu_fmt_out(&j, 1, 1, n, dx, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_act_bwd(ctx, act, alpha, n, tx, ty, tdy, tdx));
}

lam_status cpu_dropout_mask(lam_ctx *ctx, size_t n, float p, uint64_t seed, const int32_t *ctr, uint8_t *mask) {
  (void)ctx;
  const uint64_t key = lam_draw_key(seed, ctr ? *ctr : 0);
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
  for (size_t i = 0; i < n; i++) mask[i] = lam_draw_uniform(key, i) >= p;
  return LAM_OK;
}

static lam_status plain_mask_scale(lam_ctx *ctx, size_t n, const float *x, const uint8_t *mask, float scale, float *y) {
  (void)ctx;
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (size_t i = 0; i < n; i++) y[i] = mask[i] ? x[i] * scale : 0.0f;
  return LAM_OK;
}

/* Elementwise: n values, only the type matters. */
lam_status cpu_mask_scale(lam_ctx *ctx, lam_fmt f, size_t n, const void *x, const uint8_t *mask, float scale, void *y) {
  cpu_fmt_job j = cpu_fmt_begin(lam_fmt_of(f.dt, 0));
  const float *tx = cpu_fmt_in(&j, 1, 1, n, x);
  float *ty = cpu_fmt_out(&j, 1, 1, n, y, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_mask_scale(ctx, n, tx, mask, scale, ty));
}
