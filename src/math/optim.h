/* optim.h — the optimizers' update of one parameter, written once for the CPU's loops (cpu/optim.c) and the CUDA
 * kernels (cuda/optim.cu): the same float expressions in the same order, so both backends step alike. The step's
 * scalars (Adam's step size and bias correction, SGD's first-step flag and rate) come from the caller, per step or
 * from the trainer's table (prims.h's adam and sgd). */
#ifndef LAMINA_OPTIM_H
#define LAMINA_OPTIM_H

#include <math.h>

#include "../prims.h"

/* Adam's step size lr / (1 - b1^step) and second-moment correction sqrt(1 - b2^step), in double as torch.optim. */
LAM_HD void lam_adam_coef(float lr, float b1, float b2, long step, float out[2]) {
  out[0] = (float)(lr / (1.0 - pow((double)b1, (double)step)));
  out[1] = (float)sqrt(1.0 - pow((double)b2, (double)step));
}

/* Adam (decoupled 0: L2, its decay added to the gradient) or AdamW (1: the parameter decayed by lr wd first), as
 * torch.optim's single-tensor Adam/AdamW with its bias corrections folded into step_size and bc2_sqrt
 * (lam_adam_coef). */
LAM_HD void lam_adam_update(float *p, float *m, float *v, float g, float lr, float b1, float b2, float eps, float wd,
                            int decoupled, float step_size, float bc2_sqrt) {
  float gi = g, pi = *p;
  if (decoupled) pi *= 1.0f - lr * wd;
  else gi += wd * pi;
  const float mi = b1 * *m + (1.0f - b1) * gi, vi = b2 * *v + (1.0f - b2) * gi * gi;
  *m = mi, *v = vi;
  *p = pi - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
}

/* SGD with L2 weight decay and momentum (0: none) as torch.optim.SGD: the first step takes the gradient as the
 * momentum buffer as it is. */
LAM_HD void lam_sgd_update(float *p, float *buf, float g, float lr, float momentum, float wd, int first) {
  float gi = g + wd * *p;
  if (momentum != 0.0f) {
    const float bi = first ? gi : momentum * *buf + gi;
    *buf = bi;
    gi = bi;
  }
  *p -= lr * gi;
}

/* scaler_update's decision (prims.h), on one thread: row is the trainer's step (*k), lr its rate. */
LAM_HD void lam_scaler_decide(lam_scaler *s, int adam, float b1, float b2, float lr, int row) {
  s->inv = 1.0f / s->scale;
  if (s->found) { /* skipped: the parameters and the optimizer's state stay as they are */
    s->skipped++, s->clean = 0;
    if (s->scale > LAM_SCALE_FLOOR) s->scale = fmaxf(s->scale * 0.5f, LAM_SCALE_FLOOR);
    else if (!s->stuck) s->stuck = row + 1;
    return;
  }
  s->taken++;
  if (adam) lam_adam_coef(lr, b1, b2, s->taken, s->coef);
  else s->coef[0] = s->taken == 1 ? 1.0f : 0.0f, s->coef[1] = 0.0f;
  s->coef[2] = lr;
  if (++s->clean == LAM_SCALE_GROWTH) s->scale *= 2.0f, s->clean = 0;
}

#endif
