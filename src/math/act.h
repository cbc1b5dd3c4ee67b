/* act.h — the activations and their derivatives, written once for every place that computes them: the
 * CPU's act_* and bn_act_* (cpu/act.c, cpu/norm.c) and the CUDA kernels (cuda/act.cu, cuda/norm.cu).
 * One float expression each, so a fused BatchNorm + activation gives what the two ops give apart (gelu's
 * derivative to an ulp: its a b + c d may be contracted into an fma differently at each call site).
 * act is LAM_ACT_* (prims.h), alpha leaky relu's slope; with act a compile-time constant the switch folds. */
#ifndef LAMINA_ACT_H
#define LAMINA_ACT_H

#include <math.h>

#include "../prims.h"

/* relu as PyTorch's: NaN passes (torch.relu(nan) is nan), so a NaN weight reaches the loss and the divergence
 * stop sees it; `z > 0 ? z : 0` and fmaxf(z, 0) both gave 0 for it. -0 still gives +0. One compare and a
 * select, as before: it vectorizes alike. */
LAM_HD float lam_relu(float z) { return z <= 0.0f ? 0.0f : z; }
/* Whether relu passed its input, from its output y: as PyTorch's threshold_backward (y <= 0 gives 0, else the
 * gradient), a NaN output passes the gradient instead of hiding it behind a 0. */
LAM_HD int lam_relu_passed(float y) { return !(y <= 0.0f); }

/* act(z); GELU in its exact erf form. */
LAM_HD float lam_act(int act, float alpha, float z) {
  switch (act) {
    case LAM_ACT_RELU: return lam_relu(z);
    case LAM_ACT_LEAKY: return z > 0.0f ? z : alpha * z; /* NaN: alpha * NaN, NaN */
    case LAM_ACT_TANH: return tanhf(z);
    case LAM_ACT_GELU: return 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
    default: return 1.0f / (1.0f + expf(-z)); /* sigmoid */
  }
}

/* g act'(z): from the output y = act(z) for relu (y > 0), leaky, tanh and sigmoid; from z itself for gelu
 * (Phi(z) + z phi(z)). The one not needed is not read. */
LAM_HD float lam_act_grad(int act, float alpha, float z, float y, float g) {
  switch (act) {
    case LAM_ACT_RELU: return lam_relu_passed(y) ? g : 0.0f;
    case LAM_ACT_LEAKY: return y > 0.0f ? g : alpha * g;
    case LAM_ACT_TANH: return g * (1.0f - y * y);
    case LAM_ACT_GELU:
      return g * (0.5f * (1.0f + erff(z * 0.70710678118654752f)) + z * expf(-0.5f * z * z) * 0.39894228040143268f);
    default: return g * y * (1.0f - y); /* sigmoid */
  }
}

/* relu's and leaky's gradient from z instead of y, for bn_act_bwd without a residual, which then does not read y
 * (an activation's worth of memory traffic, twice): y > 0 exactly when z exceeds zt, the largest positive float
 * that y's type rounds to 0 — 0 in float, 2^-134 in bfloat16 and 2^-25 in IEEE half (half the smallest subnormal,
 * a tie rounded to the even 0). From the z the forward computed this gives, bit for bit, what lam_act_grad gives
 * from the y it stored, NaN included (a NaN z passes relu's gradient, and leaky's scaled, as a NaN y does). dt is a
 * LAM_DT_*. */
LAM_HD float lam_act_zero_bound(int dt) { return dt == LAM_DT_F16 ? 0x1p-25f : dt == LAM_DT_BF16 ? 0x1p-134f : 0.0f; }
/* Whether bn_act_bwd forms act's dz from z (gelu always; relu and leaky, by lam_act_grad_z, where there is no
 * residual and no y is given) instead of from y, which it then does not read: the one rule both backends follow.
 * Where y is stored, reading it measured faster than recomputing z (the U-Net's step 2% slower from z on the H100,
 * 2026-12-07), so only a caller without y — a convolution that applies the BatchNorm itself — takes z. */
LAM_HD int lam_bn_act_dz_from_z(int act, int residual, int y_given) {
  return act == LAM_ACT_GELU || (!residual && !y_given && (act == LAM_ACT_RELU || act == LAM_ACT_LEAKY));
}
LAM_HD float lam_act_grad_z(int act, float alpha, float z, float zt, float g) {
  if (act == LAM_ACT_RELU) return !(z <= zt) ? g : 0.0f;
  return z > zt ? g : alpha * g; /* leaky */
}

#endif
