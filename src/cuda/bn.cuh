/* bn.cuh — what the BatchNorm kernels of both layouts share (norm.cu, and reduce.cuh's sums): the activation
 * a fused BatchNorm applies, the finish of a channel's statistics, and gamma and beta where not given. */
#ifndef LAMINA_CUDA_BN_CUH
#define LAMINA_CUDA_BN_CUH

#include "../math/act.h"
#include "../math/norm.h"

/* The activation after a BatchNorm (bn_act_*), fixed at compile time, with leaky's slope alpha; BN_ACT_NONE
 * is none: the plain BatchNorm (bn_fwd, bn_bwd), whose kernels these are too. The expressions are act.h's,
 * as act_fwd/act_bwd's and the CPU twins', so bn_act_* agree with bn_fwd + act_fwd and act_bwd + bn_bwd
 * (gelu's derivative to an ulp). */
#define BN_ACT_NONE (-1)
/* relu and leaky in a backward without a residual: their dz from z (act.h's lam_act_grad_z with zt, the bound of
 * the stored y's type), so y is not read */
#define BN_ACT_RELU_Z (-2)
#define BN_ACT_LEAKY_Z (-3)
template <int ACT> struct bn_act {
  float alpha;
  float zt; /* BN_ACT_RELU_Z, BN_ACT_LEAKY_Z: lam_act_zero_bound of y's type */
  /* dz is formed from y = act(z) (relu and leaky: y > 0; tanh; sigmoid), or from z recomputed (gelu; _Z) */
  static constexpr bool from_z = ACT == LAM_ACT_GELU || ACT == BN_ACT_RELU_Z || ACT == BN_ACT_LEAKY_Z;
  static constexpr bool from_y = ACT != BN_ACT_NONE && !from_z;
  static constexpr int base = ACT == BN_ACT_RELU_Z ? LAM_ACT_RELU : ACT == BN_ACT_LEAKY_Z ? LAM_ACT_LEAKY : ACT;
  __device__ __forceinline__ float of(float z) const {
    if constexpr (ACT == BN_ACT_NONE) return z;
    else return lam_act(base, alpha, z);
  }
  /* g act'(z), from y or z as from_y says (the other is not read) */
  __device__ __forceinline__ float dz(float z, float y, float g) const {
    if constexpr (ACT == BN_ACT_NONE) return g;
    else if constexpr (ACT == BN_ACT_RELU_Z || ACT == BN_ACT_LEAKY_Z) return lam_act_grad_z(base, alpha, z, zt, g);
    else return lam_act_grad(ACT, alpha, z, y, g);
  }
};

/* Channel c's gamma and beta, 1 and 0 where not given. */
__device__ __forceinline__ float gamma_of(const float *gamma, int c) { return gamma ? gamma[c] : 1.0f; }
__device__ __forceinline__ float beta_of(const float *beta, int c) { return beta ? beta[c] : 0.0f; }

/* From channel c's shifted sums over N values (a = sum(x - K), b = sum((x - K)^2)): the mean and
 * invstd, saved, and the running statistics updated as PyTorch does (unbiased variance). */
__device__ inline void bn_finish(int c, double a, double b, double N, float K, float eps, float momentum, float *mean,
                                 float *invstd, float *run_mean, float *run_var, float *m_out, float *is_out) {
  double d = a / N, var = b / N - d * d;
  if (var < 0.0) var = 0.0;
  float m = (float)((double)K + d), is = lam_bn_invstd(var, eps);
  mean[c] = m, invstd[c] = is;
  lam_bn_running(run_mean, run_var, c, momentum, m, var, N);
  *m_out = m, *is_out = is;
}

#endif
