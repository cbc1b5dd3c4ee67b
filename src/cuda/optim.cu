/* optim.cu — the CUDA twins of the optimizer primitives (prims.h; CPU versions in cpu/optim.c under the same
 * names): Adam and SGD, the loss scaler's grad_check and scaler_update, step_advance and backprop_step. */
#include "cuda.h"
#include "../math/optim.h"

__global__ void adam_kernel(size_t n, float *p, const float *g, float *m, float *v, float lr, float b1, float b2,
                            float eps, float wd, int decoupled, float step_size, float bc2_sqrt, const float *sched,
                            const int32_t *k, const lam_scaler *ls) {
  float inv = 1.0f;
  if (ls) {
    if (ls->found) return; /* a skipped step */
    step_size = ls->coef[0], bc2_sqrt = ls->coef[1], lr = ls->coef[2], inv = ls->inv;
  } else if (sched) {
    step_size = sched[3 * *k], bc2_sqrt = sched[3 * *k + 1], lr = sched[3 * *k + 2];
  }
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    lam_adam_update(&p[i], &m[i], &v[i], g[i] * inv, lr, b1, b2, eps, wd, decoupled, step_size, bc2_sqrt);
}

lam_status cuda_adam(lam_ctx *ctx, size_t n, float *p, const float *g, float *m, float *v, float lr, float b1, float b2,
                     float eps, float wd, int decoupled, long step, const float *sched, const int32_t *k,
                     const lam_scaler *ls) {
  cuda_state *st = cuda_st(ctx);
  float coef[2] = {0.0f, 0.0f}; /* the same scalars as the CPU twin, computed the same way */
  if (!sched && !ls) lam_adam_coef(lr, b1, b2, step, coef);
  adam_kernel<<<blocks_for(n), NT, 0, st->stream>>>(n, p, g, m, v, lr, b1, b2, eps, wd, decoupled, coef[0], coef[1],
                                                    sched, k, ls);
  LAUNCH_CHECK(st, "adam_kernel");
  return LAM_OK;
}

__global__ void sgd_kernel(size_t n, float *p, const float *g, float *buf, float lr, float momentum, float wd, int first,
                           const float *sched, const int32_t *k, const lam_scaler *ls) {
  float inv = 1.0f;
  if (ls) {
    if (ls->found) return; /* a skipped step */
    first = ls->coef[0] != 0.0f, lr = ls->coef[2], inv = ls->inv;
  } else if (sched) {
    first = sched[3 * *k] != 0.0f, lr = sched[3 * *k + 2];
  }
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    lam_sgd_update(&p[i], &buf[i], g[i] * inv, lr, momentum, wd, first);
}

lam_status cuda_sgd(lam_ctx *ctx, size_t n, float *p, const float *g, float *buf, float lr, float momentum, float wd,
                    int first, const float *sched, const int32_t *k, const lam_scaler *ls) {
  cuda_state *st = cuda_st(ctx);
  sgd_kernel<<<blocks_for(n), NT, 0, st->stream>>>(n, p, g, buf, lr, momentum, wd, first, sched, k, ls);
  LAUNCH_CHECK(st, "sgd_kernel");
  return LAM_OK;
}

/* Any value not finite: each thread ors its own, a warp votes, one lane stores (a store of 1: no atomics needed). */
__global__ void grad_check_kernel(size_t n, const float *__restrict__ g, lam_scaler *s) {
  int bad = 0;
  const size_t n4 = ((uintptr_t)g & 15) ? 0 : n / 4;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
    const float4 v = reinterpret_cast<const float4 *>(g)[i];
    bad |= !isfinite(v.x) | !isfinite(v.y) | !isfinite(v.z) | !isfinite(v.w);
  }
  for (size_t i = 4 * n4 + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    bad |= !isfinite(g[i]);
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) s->found = 1;
}

lam_status cuda_grad_check(lam_ctx *ctx, size_t n, const float *g, lam_scaler *s) {
  cuda_state *st = cuda_st(ctx);
  grad_check_kernel<<<blocks_for((n + 3) / 4), NT, 0, st->stream>>>(n, g, s);
  LAUNCH_CHECK(st, "grad_check_kernel");
  return LAM_OK;
}

__global__ void scaler_update_kernel(lam_scaler *s, int adam, float b1, float b2, const float *sched, const int32_t *k) {
  lam_scaler_decide(s, adam, b1, b2, sched[3 * *k + 2], *k);
}

lam_status cuda_scaler_update(lam_ctx *ctx, lam_scaler *s, int adam, float b1, float b2, const float *sched,
                              const int32_t *k) {
  cuda_state *st = cuda_st(ctx);
  scaler_update_kernel<<<1, 1, 0, st->stream>>>(s, adam, b1, b2, sched, k);
  LAUNCH_CHECK(st, "scaler_update_kernel");
  return LAM_OK;
}

__global__ void step_advance_kernel(int32_t *state, int B, float *stats) {
  state[0] += B;
  state[1] += 1;
  if (stats && !isfinite(stats[0]) && stats[3] == 0.0f) stats[3] = (float)state[1];
}

lam_status cuda_step_advance(lam_ctx *ctx, int32_t *state, int B, float *stats) {
  cuda_state *st = cuda_st(ctx);
  step_advance_kernel<<<1, 1, 0, st->stream>>>(state, B, stats);
  LAUNCH_CHECK(st, "step_advance_kernel");
  return LAM_OK;
}

__global__ void backprop_step_kernel(size_t n, const float *err, const float *in, float lr, float *w) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float gradient = err[i] * in[i];
    w[i] -= lr * gradient;
  }
}

lam_status cuda_backprop_step(lam_ctx *ctx, size_t n, const float *err, const float *in, float lr, float *w) {
  cuda_state *st = cuda_st(ctx);
  backprop_step_kernel<<<blocks_for(n), NT, 0, st->stream>>>(n, err, in, lr, w);
  LAUNCH_CHECK(st, "backprop_step_kernel");
  return LAM_OK;
}
