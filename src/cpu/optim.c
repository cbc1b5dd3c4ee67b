/* optim.c — the CPU twins of the optimizer primitives (prims.h): Adam and SGD, the loss scaler's grad_check and
 * scaler_update, the trainer's step_advance and backprop_step; the CUDA twins are in cuda/optim.cu under the same
 * names. Adam and SGD run on the pool (cpu_par), each item writing its own values: the same bits run to run. */
#include <math.h>

#include "cpu.h"
#include "kernels.h"
#include "../math/optim.h"

typedef struct optim_args {
  float *p, *m, *v;
  const float *g;
  float lr, b1, b2, eps, wd, step_size, bc2_sqrt, momentum, inv; /* inv: 1, or the loss scaler's 1 / scale */
  int decoupled, first;
} optim_args;

static void adam_items(void *arg, size_t lo, size_t hi) {
  const optim_args *a = arg;
  float *p = a->p, *m = a->m, *v = a->v;
  const float *g = a->g;
  const float b1 = a->b1, b2 = a->b2, lr = a->lr, wd = a->wd, eps = a->eps, step_size = a->step_size,
              bc2_sqrt = a->bc2_sqrt, inv = a->inv;
  const int decoupled = a->decoupled;
#pragma omp simd
  for (size_t i = lo; i < hi; i++)
    lam_adam_update(&p[i], &m[i], &v[i], g[i] * inv, lr, b1, b2, eps, wd, decoupled, step_size, bc2_sqrt);
}

lam_status cpu_adam(lam_ctx *ctx, size_t n, float *p, const float *g, float *m, float *v, float lr, float b1, float b2,
                    float eps, float wd, int decoupled, long step, const float *sched, const int32_t *k,
                    const lam_scaler *ls) {
  (void)ctx;
  /* As torch.optim.Adam/AdamW (single-tensor): the bias corrections are computed in double precision
   * and folded into the step size, then the element loop runs in float. */
  float coef[2], inv = 1.0f;
  if (ls && ls->found) return LAM_OK; /* a skipped step */
  if (ls) coef[0] = ls->coef[0], coef[1] = ls->coef[1], lr = ls->coef[2], inv = ls->inv;
  else if (sched) coef[0] = sched[3 * *k], coef[1] = sched[3 * *k + 1], lr = sched[3 * *k + 2];
  else lam_adam_coef(lr, b1, b2, step, coef);
  optim_args a = {.p = p, .m = m, .v = v, .g = g, .lr = lr, .b1 = b1, .b2 = b2, .eps = eps, .wd = wd,
                  .step_size = coef[0], .bc2_sqrt = coef[1], .inv = inv, .decoupled = decoupled};
  cpu_par(n, n, PAR_MIN, adam_items, &a);
  return LAM_OK;
}

static void sgd_items(void *arg, size_t lo, size_t hi) {
  const optim_args *a = arg;
  float *p = a->p, *buf = a->m;
  const float *g = a->g;
  const float lr = a->lr, wd = a->wd, momentum = a->momentum, inv = a->inv;
  const int first = a->first;
#pragma omp simd
  for (size_t i = lo; i < hi; i++) lam_sgd_update(&p[i], &buf[i], g[i] * inv, lr, momentum, wd, first);
}

lam_status cpu_sgd(lam_ctx *ctx, size_t n, float *p, const float *g, float *buf, float lr, float momentum, float wd,
                   int first, const float *sched, const int32_t *k, const lam_scaler *ls) {
  (void)ctx;
  float inv = 1.0f;
  if (ls && ls->found) return LAM_OK; /* a skipped step */
  if (ls) first = ls->coef[0] != 0.0f, lr = ls->coef[2], inv = ls->inv;
  else if (sched) first = sched[3 * *k] != 0.0f, lr = sched[3 * *k + 2];
  optim_args a = {.p = p, .m = buf, .g = g, .lr = lr, .wd = wd, .momentum = momentum, .inv = inv, .first = first};
  cpu_par(n, n, PAR_MIN, sgd_items, &a);
  return LAM_OK;
}

lam_status cpu_grad_check(lam_ctx *ctx, size_t n, const float *g, lam_scaler *s) {
  (void)ctx;
  int found = 0;
#pragma omp parallel for reduction(| : found) schedule(static) if (n > PAR_MIN)
  for (size_t i = 0; i < n; i++) found |= !isfinite(g[i]);
  if (found) s->found = 1;
  return LAM_OK;
}

lam_status cpu_scaler_update(lam_ctx *ctx, lam_scaler *s, int adam, float b1, float b2, const float *sched,
                             const int32_t *k) {
  (void)ctx;
  lam_scaler_decide(s, adam, b1, b2, sched[3 * *k + 2], *k);
  return LAM_OK;
}

lam_status cpu_step_advance(lam_ctx *ctx, int32_t *state, int B, float *stats) {
  (void)ctx;
  state[0] += B;
  state[1] += 1;
  if (stats && !isfinite(stats[0]) && stats[3] == 0.0f) stats[3] = (float)state[1];
  return LAM_OK;
}

lam_status cpu_backprop_step(lam_ctx *ctx, size_t n, const float *err, const float *in, float lr, float *w) {
  (void)ctx;
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (size_t i = 0; i < n; i++) {
    float gradient = err[i] * in[i];
    w[i] -= lr * gradient;
  }
  return LAM_OK;
}
