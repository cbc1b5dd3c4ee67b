/* optim.h — the optimizers' update of one parameter, written once for the CPU's loops (cpu/nn.c) and the CUDA
 * kernels (cuda/nn.cu): the same float expressions in the same order, so both backends step alike. The step's
 * scalars (Adam's step size and bias correction, SGD's first-step flag and rate) come from the caller, per step or
 * from the trainer's table (prims.h's adam and sgd). */
#ifndef LAMINA_OPTIM_H
#define LAMINA_OPTIM_H

#include <math.h>

#include "../prims.h"

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

#endif
