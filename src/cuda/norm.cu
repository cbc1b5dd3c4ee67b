/* norm.cu — the CUDA twins of the normalization primitives (prims.h; CPU versions in cpu/norm.c under the same
 * names): BatchNorm (alone, followed by an activation, with a residual add, and synchronized over ranks) and
 * GroupNorm, with LayerNorm as its one group. Everything is queued on the context's stream; no float atomics,
 * so the results are the same bits every run.
 *
 * BatchNorm runs its NCHW float32 kernels or, for an NHWC format (float32, bfloat16 or half; and a flat tensor,
 * P = 1, in any type), their NHWC twins: both sum per channel through reduce.cuh and share the activation and
 * the statistics' finish (bn.cuh); arithmetic is in float32, a 16-bit type rounded once, where stored.
 *
 * GroupNorm: one block per (sample, group), in every format: its sums in double over the group's C/G x P values
 * (a tree in shared memory, the same order every run), the statistics, then the group written. The backward's
 * per-channel sums of each sample go to work and are added over the samples in order by a second kernel. */
#include <stdint.h>

#include "cuda.h"
#include "kernels.cuh"
#include "vec.cuh"
#include "bn.cuh"
#include "reduce.cuh"

/* ---- BatchNorm, NCHW float32 ---- */

/* dr (a residual's gradient, bn_act_bwd's) = dz, or with add dr += dz: the V values at o (in units of V). */
template <int V> __device__ __forceinline__ void store_dr(float *dr, size_t o, const float (&gv)[V], int add) {
  float v[V];
  if (add) vload<V>(v, dr, o);
#pragma unroll
  for (int q = 0; q < V; q++) v[q] = add ? v[q] + gv[q] : gv[q];
  vstore<V>(dr, o, v);
}

/* BatchNorm, alone (bn_fwd, bn_bwd) or followed by an activation (bn_act_fwd, bn_act_bwd): the same
 * kernels, with the activation a template argument (BN_ACT_NONE for the plain ones). */

/* One block per channel (blockIdx.x): its statistics, then y = act(z) over the channel. For bn_fwd x and
 * y may be one buffer (each value is read, then written, by the same thread): no __restrict__, no __ldg. */
template <int V, int ACT>
__global__ void bn_fwd_channel_kernel(red_args r, bn_act<ACT> act, const float *res, const float *gamma,
                                      const float *beta, float *y, float *mean, float *invstd, float *run_mean,
                                      float *run_var, float momentum, float eps) {
  __shared__ float sm, sis;
  const int c = blockIdx.x;
  float2 t = thread_sums<RED_STATS, V>(r, c, 0, r.B);
  t = block_sum2(t.x, t.y);
  if (threadIdx.x == 0) {
    float m, is;
    bn_finish(c, t.x, t.y, (double)r.B * r.P, r.x[(size_t)c * r.P], eps, momentum, mean, invstd, run_mean, run_var, &m,
              &is);
    sm = m, sis = is;
  }
  __syncthreads();
  const float m = sm, sc = sis * gamma_of(gamma, c), bt = beta_of(beta, c);
  const unsigned PV = (unsigned)r.P / V, n = (unsigned)r.B * PV;
  for (unsigned j = threadIdx.x; j < n; j += RED_NT) {
    size_t o = ((size_t)(j / PV) * r.C + c) * PV + j % PV;
    float v[V], rv[V];
    vload<V>(v, r.x, o);
    if (res) vload<V>(rv, res, o);
#pragma unroll
    for (int q = 0; q < V; q++) v[q] = act.of((v[q] - m) * sc + bt + (res ? rv[q] : 0.0f));
    vstore<V>(y, o, v);
  }
}

/* Thread per channel: the S blocks' sums in order, then bn_finish. */
__global__ void bn_stats_final_kernel(int C, int S, double N, const float *x, int P, const float *part, float eps,
                                      float momentum, float *mean, float *invstd, float *run_mean, float *run_var) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double a, b;
  part_total(part, c, S, &a, &b);
  float m, is;
  bn_finish(c, a, b, N, x[(size_t)c * P], eps, momentum, mean, invstd, run_mean, run_var, &m, &is);
}

/* Thread per V values: y = act((x - mean) invstd gamma + beta), from the saved statistics (train) or the
 * running ones (eval: invstd as the CPU twin, 1 / sqrtf, correctly rounded on both). x may be y
 * (bn_fwd). ACT is deduced from act (LAUNCH_ROWWISE gives I and V). */
template <typename I, int V, int ACT>
__global__ void bn_apply_kernel(I n, I PV, I C, bn_act<ACT> act, const float *x, const float *res, const float *gamma,
                                const float *beta, float *y, const float *mean, const float *invstd, const float *run_mean,
                                const float *run_var, float eps, int train) {
  GRID_STRIDE(I, i, n) {
    I c = i / PV % C;
    float m = train ? mean[c] : run_mean[c], is = train ? invstd[c] : lam_bn_invstd_running(run_var[c], eps);
    float sc = is * gamma_of(gamma, c), bt = beta_of(beta, c), v[V], rv[V];
    vload<V>(v, x, i);
    if (res) vload<V>(rv, res, i);
#pragma unroll
    for (int q = 0; q < V; q++) v[q] = act.of((v[q] - m) * sc + bt + (res ? rv[q] : 0.0f));
    vstore<V>(y, i, v);
  }
}

/* bn_fwd and bn_act_fwd: train: one block per channel (S = 1: statistics and y in one kernel, the second
 * read of the channel mostly from L2), or S blocks per channel (channel_part_kernel, bn_stats_final_kernel)
 * and then bn_apply_kernel; eval: bn_apply_kernel alone. */
template <int ACT>
static lam_status bn_fwd_run(cuda_state *st, const char *what, int B, int C, int P, bn_act<ACT> act, const float *x,
                             const float *res, const float *gamma, const float *beta, float *y, float *mean,
                             float *invstd, float *run_mean, float *run_var, float momentum, float eps, int train) {
  size_t n = (size_t)B * C * P;
  if (!n) return LAM_OK;
  const bool vec = P % 4 == 0 && aligned16(x) && aligned16(y) && aligned16(res);
  if (train) {
    if (!mean || !invstd)
      return LAM_FAIL(LAM_ERR_INVALID_ARG, "%s: training needs mean and invstd to save the batch statistics in", what);
    LAM_TRY(check_channel_size(what, B, P));
    red_args r = {B, C, P, x, NULL, NULL, NULL, NULL, NULL, NULL, 0.0f};
    int S = channel_splits(B, C, P, 2, 0);
    if (S == 1) {
      if (vec)
        bn_fwd_channel_kernel<4, ACT><<<C, RED_NT, 0, st->stream>>>(r, act, res, gamma, beta, y, mean, invstd, run_mean,
                                                                    run_var, momentum, eps);
      else
        bn_fwd_channel_kernel<1, ACT><<<C, RED_NT, 0, st->stream>>>(r, act, res, gamma, beta, y, mean, invstd, run_mean,
                                                                    run_var, momentum, eps);
      LAUNCH_CHECK(st, "bn_fwd_channel_kernel");
      return LAM_OK;
    }
    channel_part_launch<RED_STATS>(st, r, S, st->rowsum_part);
    LAUNCH_CHECK(st, "channel_part_kernel<stats>");
    bn_stats_final_kernel<<<(C + NT - 1) / NT, NT, 0, st->stream>>>(C, S, (double)B * P, x, P, st->rowsum_part, eps,
                                                                    momentum, mean, invstd, run_mean, run_var);
    LAUNCH_CHECK(st, "bn_stats_final_kernel");
  }
  LAUNCH_ROWWISE(st, bn_apply_kernel, vec, n, P, C, act, x, res, gamma, beta, y, mean, invstd, run_mean, run_var, eps,
                 train);
  return LAM_OK;
}

static lam_status nchw_bn_fwd(lam_ctx *ctx, int B, int C, int P, const float *x, const float *gamma, const float *beta, float *y,
                       float *mean, float *invstd, float *run_mean, float *run_var, float momentum, float eps,
                       int train) {
  return bn_fwd_run(cuda_st(ctx), "bn_fwd", B, C, P, bn_act<BN_ACT_NONE>{0.0f}, x, NULL, gamma, beta, y, mean, invstd,
                    run_mean, run_var, momentum, eps, train);
}

static lam_status nchw_bn_act_fwd(lam_ctx *ctx, int B, int C, int P, int act, float alpha, const float *x, const float *res,
                                  const float *gamma,
                           const float *beta, float *y, float *mean, float *invstd, float *run_mean, float *run_var,
                           float momentum, float eps, int train) {
  cuda_state *st = cuda_st(ctx);
#define BN_ACT_FWD(A)                                                                                              \
  bn_fwd_run(st, "bn_act_fwd", B, C, P, bn_act<A>{alpha}, x, res, gamma, beta, y, mean, invstd, run_mean, run_var,      \
             momentum, eps, train)
  switch (act) { /* as act_fwd: any other value is the sigmoid */
    case LAM_ACT_RELU: return BN_ACT_FWD(LAM_ACT_RELU);
    case LAM_ACT_LEAKY: return BN_ACT_FWD(LAM_ACT_LEAKY);
    case LAM_ACT_TANH: return BN_ACT_FWD(LAM_ACT_TANH);
    case LAM_ACT_GELU: return BN_ACT_FWD(LAM_ACT_GELU);
    default: return BN_ACT_FWD(LAM_ACT_SIGMOID);
  }
#undef BN_ACT_FWD
}

/* One block per channel: sum(dz) and sum(dz xhat), the parameter gradients, then dx over the channel
 * (dx may be dy: each value is read, then written, by the same thread). */
template <int V, int ACT>
__global__ void bn_bwd_channel_kernel(red_args r, const float *gamma, float *dx, float *dr, int dr_add, float *dgamma,
                                      float *dbeta) {
  __shared__ float s_mdy, s_mdx;
  const int c = blockIdx.x;
  float2 t = thread_sums<RED_BWD, V, ACT>(r, c, 0, r.B);
  t = block_sum2(t.x, t.y);
  const float N = (float)((double)r.B * r.P);
  if (threadIdx.x == 0) {
    if (dgamma) dgamma[c] += t.y;
    if (dbeta) dbeta[c] += t.x;
    s_mdy = t.x / N, s_mdx = t.y / N;
  }
  __syncthreads();
  const bn_act<ACT> act = {r.alpha};
  const float m = r.mean[c], is = r.invstd[c], k = gamma_of(gamma, c) * is, mdy = s_mdy, mdx = s_mdx;
  const float sc = bn_act<ACT>::from_z ? is * gamma_of(gamma, c) : 0.0f; /* z, as the forward computed it */
  const float bt = bn_act<ACT>::from_z ? beta_of(r.beta, c) : 0.0f;
  const unsigned PV = (unsigned)r.P / V, n = (unsigned)r.B * PV;
  for (unsigned j = threadIdx.x; j < n; j += RED_NT) {
    size_t o = ((size_t)(j / PV) * r.C + c) * PV + j % PV;
    float xv[V], gv[V];
    vload<V>(xv, r.x, o);
    vload<V>(gv, r.dy, o);
    bn_dz<ACT, V>(act, xv, gv, r.y, o, m, sc, bt);
    if (dr) store_dr<V>(dr, o, gv, dr_add);
#pragma unroll
    for (int q = 0; q < V; q++) gv[q] = k * (gv[q] - mdy - (xv[q] - m) * is * mdx);
    vstore<V>(dx, o, gv);
  }
}

/* Thread per channel: the S blocks' sums in order; the gradients, and mean(dz), mean(dz xhat) to fin. */
__global__ void bn_bwd_final_kernel(int C, int S, double N, const float *part, float *fin, float *dgamma, float *dbeta) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double a, b;
  part_total(part, c, S, &a, &b);
  if (dgamma) dgamma[c] += (float)b;
  if (dbeta) dbeta[c] += (float)a;
  fin[2 * c] = (float)(a / N), fin[2 * c + 1] = (float)(b / N);
}

/* Thread per V values: dz again, then dx (dx may be dy). ACT is deduced from act. */
template <typename I, int V, int ACT>
__global__ void bn_bwd_apply_kernel(I n, I PV, I C, bn_act<ACT> act, const float *x, const float *y, const float *dy,
                                    const float *gamma, const float *beta, const float *mean, const float *invstd,
                                    const float *fin, float *dx, float *dr, int dr_add) {
  GRID_STRIDE(I, i, n) {
    I c = i / PV % C;
    float m = mean[c], is = invstd[c], k = gamma_of(gamma, c) * is, mdy = fin[2 * c], mdx = fin[2 * c + 1];
    float sc = bn_act<ACT>::from_z ? k : 0.0f, bt = bn_act<ACT>::from_z ? beta_of(beta, c) : 0.0f;
    float xv[V], gv[V];
    vload<V>(xv, x, i);
    vload<V>(gv, dy, i);
    bn_dz<ACT, V>(act, xv, gv, y, i, m, sc, bt);
    if (dr) store_dr<V>(dr, i, gv, dr_add);
#pragma unroll
    for (int q = 0; q < V; q++) gv[q] = k * (gv[q] - mdy - (xv[q] - m) * is * mdx);
    vstore<V>(dx, i, gv);
  }
}

/* bn_bwd and bn_act_bwd: one block per channel (S = 1: sums and dx in one kernel), or S blocks per
 * channel (channel_part_kernel, bn_bwd_final_kernel) and then bn_bwd_apply_kernel. */
template <int ACT>
static lam_status bn_bwd_run(cuda_state *st, const char *what, int B, int C, int P, bn_act<ACT> act, const float *x,
                             const float *y, const float *dy, const float *gamma, const float *beta, const float *mean,
                             const float *invstd, float *dx, float *dr, int dr_add, float *dgamma, float *dbeta) {
  size_t n = (size_t)B * C * P;
  if (!n) return LAM_OK;
  LAM_TRY(check_channel_size(what, B, P));
  if (dr && !bn_act<ACT>::from_y)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "%s: a residual's gradient needs an activation read from y", what);
  if (!bn_act<ACT>::from_y) y = NULL; /* not read */
  else if (!y) return LAM_FAIL(LAM_ERR_INVALID_ARG, "%s: tanh, sigmoid and a residual's relu or leaky read y, which is NULL", what);
  const bool vec = red_vec(P, x, dy) && aligned16(y) && aligned16(dx) && aligned16(dr);
  red_args r = {B, C, P, x, dy, mean, invstd, y, gamma, beta, act.alpha};
  int S = channel_splits(B, C, P, 2, 2); /* 2 partials a block, and the two means a channel */
  if (S == 1) {
    if (vec) bn_bwd_channel_kernel<4, ACT><<<C, RED_NT, 0, st->stream>>>(r, gamma, dx, dr, dr_add, dgamma, dbeta);
    else bn_bwd_channel_kernel<1, ACT><<<C, RED_NT, 0, st->stream>>>(r, gamma, dx, dr, dr_add, dgamma, dbeta);
    LAUNCH_CHECK(st, "bn_bwd_channel_kernel");
    return LAM_OK;
  }
  float *part = st->rowsum_part, *fin = part + (size_t)2 * C * S;
  channel_part_launch<RED_BWD, ACT>(st, r, S, part);
  LAUNCH_CHECK(st, "channel_part_kernel<bwd>");
  bn_bwd_final_kernel<<<(C + NT - 1) / NT, NT, 0, st->stream>>>(C, S, (double)B * P, part, fin, dgamma, dbeta);
  LAUNCH_CHECK(st, "bn_bwd_final_kernel");
  LAUNCH_ROWWISE(st, bn_bwd_apply_kernel, vec, n, P, C, act, x, y, dy, gamma, beta, mean, invstd, fin, dx, dr, dr_add);
  return LAM_OK;
}

static lam_status nchw_bn_bwd(lam_ctx *ctx, int B, int C, int P, const float *x, const float *dy, const float *gamma,
                       const float *mean, const float *invstd, float *dx, float *dgamma, float *dbeta) {
  return bn_bwd_run(cuda_st(ctx), "bn_bwd", B, C, P, bn_act<BN_ACT_NONE>{0.0f}, x, NULL, dy, gamma, NULL, mean, invstd,
                    dx, NULL, 0, dgamma, dbeta);
}

static lam_status nchw_bn_act_bwd(lam_ctx *ctx, int B, int C, int P, int act, float alpha, const float *x, const float *y,
                           const float *dy, const float *gamma, const float *beta, const float *mean,
                           const float *invstd, float *dx, float *dr, int dr_add, float *dgamma, float *dbeta) {
  cuda_state *st = cuda_st(ctx);
#define BN_ACT_BWD(A)                                                                                               \
  bn_bwd_run(st, "bn_act_bwd", B, C, P, bn_act<A>{alpha}, x, y, dy, gamma, beta, mean, invstd, dx, dr, dr_add, dgamma, \
             dbeta)
  const int from_z = lam_bn_act_dz_from_z(act, dr != NULL, y != NULL);
  switch (act) { /* as act_bwd: any other value is the sigmoid; relu's and leaky's dz from z without a residual or y */
    case LAM_ACT_RELU: return from_z ? BN_ACT_BWD(BN_ACT_RELU_Z) : BN_ACT_BWD(LAM_ACT_RELU);
    case LAM_ACT_LEAKY: return from_z ? BN_ACT_BWD(BN_ACT_LEAKY_Z) : BN_ACT_BWD(LAM_ACT_LEAKY);
    case LAM_ACT_TANH: return BN_ACT_BWD(LAM_ACT_TANH);
    case LAM_ACT_GELU: return BN_ACT_BWD(LAM_ACT_GELU);
    default: return BN_ACT_BWD(LAM_ACT_SIGMOID);
  }
#undef BN_ACT_BWD
}

/* ---- BatchNorm, NHWC ---- */

/* Over the N rows of each channel, alone or followed by an activation. */

/* A warp per channel: its statistics from the partial sums and the shift K (its first value, as the partial
 * kernel took it). */
template <typename T>
__global__ void nhwc_bn_stats_final_kernel(int C, int S, double N, const float *part, const T *x, float eps,
                                           float momentum, float *mean, float *invstd, float *run_mean,
                                           float *run_var) {
  FINAL_CHANNEL(c, C);
  double a, b;
  nred_total(part, S, c, &a, &b);
  float m, is;
  if (threadIdx.x % 32 == 0)
    bn_finish(c, a, b, N, tget(x, (size_t)c), eps, momentum, mean, invstd, run_mean, run_var, &m, &is);
}

/* Channel vector cv's mean m and z = (x - m) sc + bt's scale and shift: the saved statistics (train) or the running
 * ones (eval: invstd = 1 / sqrtf(run_var + eps)), as the forward's apply kernels take them. */
template <int V>
__device__ __forceinline__ void nhwc_bn_coeffs(int cv, const float *gamma, const float *beta, const float *mean,
                                               const float *invstd, const float *run_mean, const float *run_var,
                                               float eps, int train, float (&m)[V], float (&sc)[V], float (&bt)[V]) {
#pragma unroll
  for (int q = 0; q < V; q++) {
    const int c = cv * V + q;
    m[q] = train ? mean[c] : run_mean[c];
    const float is = train ? invstd[c] : lam_bn_invstd_running(run_var[c], eps);
    sc[q] = is * gamma_of(gamma, c), bt[q] = beta_of(beta, c);
  }
}

/* y = act((x - mean) invstd gamma + beta [+ r]), mean and invstd the saved ones (train) or the running ones (eval:
 * invstd = 1 / sqrtf(run_var + eps), as the NCHW kernel); x may be y (each value is read, then written, by
 * one thread). */
template <typename T, int V, int ACT>
__global__ void nhwc_bn_apply_kernel(size_t N, int C, int TX, int TY, bn_act<ACT> act, const T *x, const T *r,
                                     const float *gamma,
                                     const float *beta, T *y, const float *mean, const float *invstd,
                                     const float *run_mean, const float *run_var, float eps, int train) {
  const int CV = C / V;
  size_t r0, r1;
  int ty;
  const int cv = chan_thread(N, CV, TX, TY, &r0, &r1, &ty);
  if (cv < 0) return;
  float m[V], sc[V], bt[V];
  nhwc_bn_coeffs<V>(cv, gamma, beta, mean, invstd, run_mean, run_var, eps, train, m, sc, bt);
  for (size_t row = r0 + ty; row < r1; row += TY) {
    float v[V], rv[V];
    tload<T, V>(v, x, row * CV + cv);
    if (r) tload<T, V>(rv, r, row * CV + cv);
    else
#pragma unroll
      for (int q = 0; q < V; q++) rv[q] = 0.0f;
#pragma unroll
    for (int q = 0; q < V; q++) v[q] = act.of((v[q] - m[q]) * sc[q] + bt[q] + rv[q]);
    tstore<T, V>(y, row * CV + cv, v);
  }
}

struct nbn_fwd_args {
  size_t N;
  int C;
  const void *x, *r;
  const float *gamma, *beta;
  void *y;
  float *mean, *invstd, *run_mean, *run_var;
  float momentum, eps;
  int train;
};

/* Training: the batch statistics of x's N rows, saved, and the running ones updated. */
template <typename T, int V> static lam_status nhwc_bn_train_stats(cuda_state *st, const nbn_fwd_args &a) {
  nred_args r = {a.N, a.C, a.x, NULL, NULL, NULL, NULL, NULL, NULL, 0.0f};
  chan_grid g;
  LAM_TRY(nred_grid("bn_fwd", a.N, a.C, V, &g));
  LAM_TRY((nred_launch<T, V, NR_STATS, BN_ACT_NONE>(st, r, g)));
  nhwc_bn_stats_final_kernel<T><<<final_blocks(a.C), 32 * FINAL_WARPS, 0, st->stream>>>(
      a.C, g.S, (double)a.N, st->nhwc_part, (const T *)a.x, a.eps, a.momentum, a.mean, a.invstd, a.run_mean, a.run_var);
  LAUNCH_CHECK(st, "nhwc_bn_stats_final_kernel");
  return LAM_OK;
}

template <typename T, int V, int ACT> static lam_status nhwc_bn_fwd_launch(cuda_state *st, const nbn_fwd_args &a,
                                                                           bn_act<ACT> act) {
  if (a.train) LAM_TRY((nhwc_bn_train_stats<T, V>(st, a)));
  chan_grid g = chan_grid_for(a.N, a.C / V, 4096, 16, 65535);
  nhwc_bn_apply_kernel<T, V, ACT><<<dim3(g.S, g.groups), NT, 0, st->stream>>>(
      a.N, a.C, g.TX, g.TY, act, (const T *)a.x, (const T *)a.r, a.gamma, a.beta, (T *)a.y, a.mean, a.invstd, a.run_mean, a.run_var,
      a.eps, a.train);
  LAUNCH_CHECK(st, "nhwc_bn_apply_kernel");
  return LAM_OK;
}

template <int ACT> static lam_status nhwc_bn_fwd_act(cuda_state *st, lam_fmt f, const nbn_fwd_args &a, float alpha) {
  const bool v = vec_ok(f.dt, a.C, a.x, a.y, a.r);
  const bn_act<ACT> act = {alpha};
  LAM_DT_DISPATCH(f.dt, T, return v ? nhwc_bn_fwd_launch<T, lam_vw<T>::value, ACT>(st, a, act)
                                     : nhwc_bn_fwd_launch<T, 1, ACT>(st, a, act));
  return LAM_OK; /* not reached */
}

/* act: an LAM_ACT_* or BN_ACT_NONE (bn_fwd). */
lam_status nhwc_bn_fwd(lam_ctx *ctx, lam_fmt f, size_t N, int C, int act, float alpha, const void *x, const void *r,
                                  const float *gamma, const float *beta, void *y, float *mean, float *invstd,
                                  float *run_mean, float *run_var, float momentum, float eps, int train) {
  cuda_state *st = cuda_st(ctx);
  if (!N || C <= 0) return LAM_OK;
  if (train && (!mean || !invstd))
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_fwd: training needs mean and invstd to save the batch statistics in");
  nbn_fwd_args a = {N, C, x, r, gamma, beta, y, mean, invstd, run_mean, run_var, momentum, eps, train};
  switch (act) { /* as act_fwd: any other activation is the sigmoid */
    case BN_ACT_NONE: return nhwc_bn_fwd_act<BN_ACT_NONE>(st, f, a, alpha);
    case LAM_ACT_RELU: return nhwc_bn_fwd_act<LAM_ACT_RELU>(st, f, a, alpha);
    case LAM_ACT_LEAKY: return nhwc_bn_fwd_act<LAM_ACT_LEAKY>(st, f, a, alpha);
    case LAM_ACT_TANH: return nhwc_bn_fwd_act<LAM_ACT_TANH>(st, f, a, alpha);
    case LAM_ACT_GELU: return nhwc_bn_fwd_act<LAM_ACT_GELU>(st, f, a, alpha);
    default: return nhwc_bn_fwd_act<LAM_ACT_SIGMOID>(st, f, a, alpha);
  }
}

/* Thread per channel: the sums in order; dgamma, dbeta, and mean(dz), mean(dz xhat) to fin. */
__global__ void nhwc_bn_bwd_final_kernel(int C, int S, double N, const float *part, float *fin, float *dgamma,
                                         float *dbeta) {
  FINAL_CHANNEL(c, C);
  double a, b;
  nred_total(part, S, c, &a, &b);
  if (threadIdx.x % 32) return;
  if (dgamma) dgamma[c] += (float)b;
  if (dbeta) dbeta[c] += (float)a;
  fin[2 * c] = (float)(a / N), fin[2 * c + 1] = (float)(b / N);
}

/* dx = gamma invstd (dz - mean(dz) - xhat mean(dz xhat)); dx may be dy. dr (may be NULL) = dz, or += with dr_add. */
template <typename T, int V, int ACT, bool POOL = false>
__global__ void nhwc_bn_bwd_apply_kernel(size_t N, int C, int TX, int TY, bn_act<ACT> act, const T *x, const T *y,
                                         const T *dy, const float *gamma, const float *beta, const float *mean,
                                         const float *invstd, const float *fin, T *dx, T *dr, int dr_add,
                                         nred_pool pool) {
  const int CV = C / V;
  size_t r0, r1;
  int ty;
  const int cv = chan_thread(N, CV, TX, TY, &r0, &r1, &ty);
  if (cv < 0) return;
  float m[V], is[V], k[V], mdy[V], mdx[V], sc[V], bt[V];
#pragma unroll
  for (int q = 0; q < V; q++) {
    const int c = cv * V + q;
    m[q] = mean[c], is[q] = invstd[c], k[q] = gamma_of(gamma, c) * is[q], mdy[q] = fin[2 * c], mdx[q] = fin[2 * c + 1];
    sc[q] = bn_act<ACT>::from_z ? k[q] : 0.0f, bt[q] = bn_act<ACT>::from_z ? beta_of(beta, c) : 0.0f;
  }
  for (size_t row = r0 + ty; row < r1; row += TY) {
    const size_t o = row * CV + cv;
    float xv[V], gv[V], yv[V];
    tload<T, V>(xv, x, o);
    if constexpr (POOL) pool_grad<T, V>(gv, pool, dy, CV, row, cv);
    else tload<T, V>(gv, dy, o);
    if (bn_act<ACT>::from_y) tload<T, V>(yv, y, o);
    nhwc_dz<ACT, V>(act, xv, yv, gv, m, sc, bt);
    if (dr) {
      float rv[V];
      if (dr_add) tload<T, V>(rv, dr, o);
#pragma unroll
      for (int q = 0; q < V; q++) rv[q] = dr_add ? rv[q] + gv[q] : gv[q];
      tstore<T, V>(dr, o, rv);
    }
#pragma unroll
    for (int q = 0; q < V; q++) gv[q] = k[q] * (gv[q] - mdy[q] - (xv[q] - m[q]) * is[q] * mdx[q]);
    tstore<T, V>(dx, o, gv);
  }
}

struct nbn_bwd_args {
  size_t N;
  int C;
  const void *x, *y, *dy;
  const float *gamma, *beta, *mean, *invstd;
  void *dx, *dr;
  int dr_add;
  float *dgamma, *dbeta;
  nred_pool pool; /* POOL: dy is a maxpool's (bn_act_pool_bwd) */
};

template <typename T, int V, int ACT, bool POOL = false>
static lam_status nhwc_bn_bwd_launch(cuda_state *st, const nbn_bwd_args &a, bn_act<ACT> act) {
  nred_args r = {a.N, a.C, a.x, a.dy, a.y, a.mean, a.invstd, a.gamma, a.beta, act.alpha, act.zt, a.pool};
  chan_grid g;
  LAM_TRY(nred_grid("bn_bwd", a.N, a.C, V, &g));
  LAM_TRY((nred_launch<T, V, NR_BWD, ACT, POOL>(st, r, g)));
  float *fin = st->nhwc_part + (size_t)g.S * a.C * 2;
  nhwc_bn_bwd_final_kernel<<<final_blocks(a.C), 32 * FINAL_WARPS, 0, st->stream>>>(a.C, g.S, (double)a.N, st->nhwc_part, fin,
                                                                      a.dgamma, a.dbeta);
  LAUNCH_CHECK(st, "nhwc_bn_bwd_final_kernel");
  chan_grid ga = chan_grid_for(a.N, a.C / V, 4096, 16, 65535);
  nhwc_bn_bwd_apply_kernel<T, V, ACT, POOL><<<dim3(ga.S, ga.groups), NT, 0, st->stream>>>(
      a.N, a.C, ga.TX, ga.TY, act, (const T *)a.x, (const T *)a.y, (const T *)a.dy, a.gamma, a.beta, a.mean, a.invstd,
      fin, (T *)a.dx, (T *)a.dr, a.dr_add, a.pool);
  LAUNCH_CHECK(st, "nhwc_bn_bwd_apply_kernel");
  return LAM_OK;
}

template <int ACT> static lam_status nhwc_bn_bwd_act(cuda_state *st, lam_fmt f, const nbn_bwd_args &a, float alpha) {
  const bool v = vec_ok(f.dt, a.C, a.x, a.dy, a.dx, bn_act<ACT>::from_y ? a.y : NULL) && (!a.dr || aligned16(a.dr));
  const bn_act<ACT> act = {alpha, lam_act_zero_bound(f.dt)};
  LAM_DT_DISPATCH(f.dt, T, return v ? nhwc_bn_bwd_launch<T, lam_vw<T>::value, ACT>(st, a, act)
                                     : nhwc_bn_bwd_launch<T, 1, ACT>(st, a, act));
  return LAM_OK; /* not reached */
}

lam_status nhwc_bn_bwd(lam_ctx *ctx, lam_fmt f, size_t N, int C, int act, float alpha, const void *x,
                                  const void *y, const void *dy, const float *gamma, const float *beta,
                                  const float *mean, const float *invstd, void *dx, void *dr, int dr_add, float *dgamma,
                                  float *dbeta) {
  cuda_state *st = cuda_st(ctx);
  if (!N || C <= 0) return LAM_OK;
  /* relu and leaky read y where it is given or for a residual's dz (its z is bn(x) + r); else theirs comes from z
   * (bn.cuh) */
  const bool from_z = lam_bn_act_dz_from_z(act, dr != NULL, y != NULL);
  const bool z_mask = from_z && act != LAM_ACT_GELU, from_y = act != BN_ACT_NONE && !from_z;
  if (from_y && !y) return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_act_bwd: tanh, sigmoid and a residual's relu or leaky read y, which is NULL");
  if (dr && act == LAM_ACT_GELU) return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_act_bwd: a residual's gradient needs an activation read from y, not gelu");
  nbn_bwd_args a = {N, C, x, from_y ? y : NULL, dy, gamma, beta, mean, invstd, dx, dr, dr_add, dgamma, dbeta};
  switch (act) {
    case BN_ACT_NONE: return nhwc_bn_bwd_act<BN_ACT_NONE>(st, f, a, alpha);
    case LAM_ACT_RELU:
      return z_mask ? nhwc_bn_bwd_act<BN_ACT_RELU_Z>(st, f, a, alpha) : nhwc_bn_bwd_act<LAM_ACT_RELU>(st, f, a, alpha);
    case LAM_ACT_LEAKY:
      return z_mask ? nhwc_bn_bwd_act<BN_ACT_LEAKY_Z>(st, f, a, alpha) : nhwc_bn_bwd_act<LAM_ACT_LEAKY>(st, f, a, alpha);
    case LAM_ACT_TANH: return nhwc_bn_bwd_act<LAM_ACT_TANH>(st, f, a, alpha);
    case LAM_ACT_GELU: return nhwc_bn_bwd_act<LAM_ACT_GELU>(st, f, a, alpha);
    default: return nhwc_bn_bwd_act<LAM_ACT_SIGMOID>(st, f, a, alpha);
  }
}

/* ---- BatchNorm, its activation and a K×K maxpool of stride K, NHWC (bn_act_pool_fwd/bwd): the statistics and the
 * backward's sums and apply as bn_act's; act(z) is formed per window in the forward, rounded to T as the stored
 * activation would be and never stored, and its gradient in the backward from the pooled one and the maxima's
 * offsets (reduce.cuh's pool_grad), so neither full-size tensor is written or read. ---- */

/* A thread per pooled row's V channels (the chan_thread grid over the NO pooled rows): z = (x - m) sc + bt and a =
 * act(z) in T for each value of the row's window, as nhwc_bn_apply_kernel computes y; y the window's first max (NaN
 * wins, as nhwc_pool_fwd_kernel), arg its offset kh K + kw. */
template <typename T, int V, int ACT>
__global__ void nhwc_bn_act_pool_kernel(size_t NO, int C, int TX, int TY, bn_act<ACT> act, nred_pool p, const T *x,
                                        const float *gamma, const float *beta, T *y, uint8_t *arg, const float *mean,
                                        const float *invstd, const float *run_mean, const float *run_var, float eps,
                                        int train) {
  const int CV = C / V;
  size_t r0, r1;
  int ty;
  const int cv = chan_thread(NO, CV, TX, TY, &r0, &r1, &ty);
  if (cv < 0) return;
  float m[V], sc[V], bt[V];
  nhwc_bn_coeffs<V>(cv, gamma, beta, mean, invstd, run_mean, run_var, eps, train, m, sc, bt);
  const size_t OHW = (size_t)p.OH * p.OW;
  for (size_t row = r0 + ty; row < r1; row += TY) {
    const size_t b = row / OHW;
    const int ohw = (int)(row - b * OHW), oh = ohw / p.OW, ow = ohw - oh * p.OW;
    const size_t in0 = (b * p.H + (size_t)oh * p.K) * p.W + (size_t)ow * p.K;
    float best[V];
    int at[V];
    for (int i = 0; i < p.K; i++)
      for (int j = 0; j < p.K; j++) {
        float v[V];
        tload<T, V>(v, x, (in0 + (size_t)i * p.W + j) * CV + cv);
#pragma unroll
        for (int q = 0; q < V; q++) {
          const float a = tval(tfrom<T>(act.of((v[q] - m[q]) * sc[q] + bt[q])));
          if ((i | j) == 0 || a > best[q] || a != a) best[q] = a, at[q] = i * p.K + j;
        }
      }
    tstore<T, V>(y, row * CV + cv, best);
    const size_t o = row * CV + cv;
    if constexpr (V == 8) {
      unsigned wd[2] = {0u, 0u};
#pragma unroll
      for (int q = 0; q < 8; q++) wd[q / 4] |= (unsigned)at[q] << (8 * (q % 4));
      reinterpret_cast<uint2 *>(arg)[o] = make_uint2(wd[0], wd[1]);
    } else if constexpr (V == 4) {
      unsigned wd = 0u;
#pragma unroll
      for (int q = 0; q < 4; q++) wd |= (unsigned)at[q] << (8 * q);
      reinterpret_cast<unsigned *>(arg)[o] = wd;
    } else {
#pragma unroll
      for (int q = 0; q < V; q++) arg[o * V + q] = (uint8_t)at[q];
    }
  }
}

template <typename T, int V, int ACT>
static lam_status nhwc_bn_act_pool_launch(cuda_state *st, const nbn_fwd_args &a, const nred_pool &p, uint8_t *arg,
                                          bn_act<ACT> act) {
  if (a.train) LAM_TRY((nhwc_bn_train_stats<T, V>(st, a)));
  const size_t NO = a.N / ((size_t)p.H * p.W) * p.OH * p.OW;
  chan_grid g = chan_grid_for(NO, a.C / V, 4096, 16, 65535);
  nhwc_bn_act_pool_kernel<T, V, ACT><<<dim3(g.S, g.groups), NT, 0, st->stream>>>(
      NO, a.C, g.TX, g.TY, act, p, (const T *)a.x, a.gamma, a.beta, (T *)a.y, arg, a.mean, a.invstd, a.run_mean,
      a.run_var, a.eps, a.train);
  LAUNCH_CHECK(st, "nhwc_bn_act_pool_kernel");
  return LAM_OK;
}
template <int ACT>
static lam_status nhwc_bn_act_pool_act(cuda_state *st, lam_fmt f, const nbn_fwd_args &a, const nred_pool &p,
                                       uint8_t *arg, float alpha) {
  const bool v = vec_ok(f.dt, a.C, a.x, a.y, arg);
  const bn_act<ACT> act = {alpha};
  LAM_DT_DISPATCH(f.dt, T, return v ? nhwc_bn_act_pool_launch<T, lam_vw<T>::value, ACT>(st, a, p, arg, act)
                                     : nhwc_bn_act_pool_launch<T, 1, ACT>(st, a, p, arg, act));
  return LAM_OK; /* not reached */
}
template <int ACT> static lam_status nhwc_bn_pool_bwd_act(cuda_state *st, lam_fmt f, const nbn_bwd_args &a, float alpha) {
  const bool v = vec_ok(f.dt, a.C, a.x, a.dy, a.dx, a.pool.arg);
  const bn_act<ACT> act = {alpha, lam_act_zero_bound(f.dt)};
  LAM_DT_DISPATCH(f.dt, T, return v ? nhwc_bn_bwd_launch<T, lam_vw<T>::value, ACT, true>(st, a, act)
                                     : nhwc_bn_bwd_launch<T, 1, ACT, true>(st, a, act));
  return LAM_OK; /* not reached */
}

static lam_status bn_pool_nhwc(const char *what, lam_fmt f) {
  if (f.nhwc) return LAM_OK;
  return LAM_FAIL(LAM_ERR_UNSUPPORTED, "%s: BatchNorm + activation + maxpool in one pass runs on NHWC activations on "
                  "CUDA (the default layout for models with convs); unset LAMINA_LAYOUT=nchw, or LAMINA_FUSE=0", what);
}
lam_status cuda_bn_act_pool_fwd(lam_ctx *ctx, lam_fmt f, const lam_pool_geom *g, int B, int act, float alpha,
                                const void *x, const float *gamma, const float *beta, void *y, uint8_t *arg,
                                float *mean, float *invstd, float *run_mean, float *run_var, float momentum, float eps,
                                int train) {
  LAM_TRY(lam_bn_act_pool_check("bn_act_pool_fwd", g, act));
  LAM_TRY(bn_pool_nhwc("bn_act_pool_fwd", f));
  const size_t N = (size_t)B * g->H * g->W;
  if (!N || g->C <= 0) return LAM_OK;
  if (train && (!mean || !invstd))
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_act_pool_fwd: training needs mean and invstd to save the batch statistics in");
  cuda_state *st = cuda_st(ctx);
  const nbn_fwd_args a = {N, g->C, x, NULL, gamma, beta, y, mean, invstd, run_mean, run_var, momentum, eps, train};
  const nred_pool p = {arg, g->H, g->W, g->K, g->OH, g->OW};
  switch (act) { /* lam_bn_act_pool_check took these three */
    case LAM_ACT_RELU: return nhwc_bn_act_pool_act<LAM_ACT_RELU>(st, f, a, p, arg, alpha);
    case LAM_ACT_LEAKY: return nhwc_bn_act_pool_act<LAM_ACT_LEAKY>(st, f, a, p, arg, alpha);
    default: return nhwc_bn_act_pool_act<LAM_ACT_GELU>(st, f, a, p, arg, alpha);
  }
}
lam_status cuda_bn_act_pool_bwd(lam_ctx *ctx, lam_fmt f, const lam_pool_geom *g, int B, int act, float alpha,
                                const void *x, const void *dy, const uint8_t *arg, const float *gamma,
                                const float *beta, const float *mean, const float *invstd, void *dx, float *dgamma,
                                float *dbeta) {
  LAM_TRY(lam_bn_act_pool_check("bn_act_pool_bwd", g, act));
  LAM_TRY(bn_pool_nhwc("bn_act_pool_bwd", f));
  const size_t N = (size_t)B * g->H * g->W;
  if (!N || g->C <= 0) return LAM_OK;
  cuda_state *st = cuda_st(ctx);
  const nbn_bwd_args a = {N, g->C, x, NULL, dy, gamma, beta, mean, invstd, dx, NULL, 0, dgamma, dbeta,
                          {arg, g->H, g->W, g->K, g->OH, g->OW}};
  switch (act) { /* relu's and leaky's mask from z, as bn_act_bwd's without y */
    case LAM_ACT_RELU: return nhwc_bn_pool_bwd_act<BN_ACT_RELU_Z>(st, f, a, alpha);
    case LAM_ACT_LEAKY: return nhwc_bn_pool_bwd_act<BN_ACT_LEAKY_Z>(st, f, a, alpha);
    default: return nhwc_bn_pool_bwd_act<LAM_ACT_GELU>(st, f, a, alpha);
  }
}

/* ---- BatchNorm over all ranks (sync BN; prims.h bn_sums, bn_sync_dx): this rank's sums from the
 * reductions above, the normalization by the kernels above with the summed statistics ---- */

/* A warp per channel: from the partial sums, sum(x) and sum(x^2) out of the shifted ones (stats), or
 * sum(dy) and sum(dy xhat), which are also added into dbeta and dgamma. */
template <typename T>
__global__ void nhwc_bn_sums_final_kernel(int C, int S, double N, const float *part, const T *x, int stats, float *out,
                                          float *dgamma, float *dbeta) {
  FINAL_CHANNEL(c, C);
  double a, b;
  nred_total(part, S, c, &a, &b);
  if (threadIdx.x % 32) return;
  if (stats) { /* sum (x - K) = a, sum (x - K)^2 = b */
    const double K = tget(x, (size_t)c);
    b += 2.0 * K * a + N * K * K;
    a += N * K;
  } else {
    if (dbeta) dbeta[c] += (float)a;
    if (dgamma) dgamma[c] += (float)b;
  }
  out[c] = (float)a, out[C + c] = (float)b;
}

template <typename T, int V>
static void nhwc_bn_sums_launch(lam_status *s, cuda_state *st, size_t N, int C, const void *x, const void *dy,
                                const float *mean, const float *invstd, float *out, float *dgamma, float *dbeta) {
  nred_args r = {N, C, x, dy, NULL, mean, invstd, NULL, NULL, 0.0f};
  chan_grid g;
  if ((*s = nred_grid("bn_sums", N, C, V, &g)) != LAM_OK) return;
  *s = dy ? nred_launch<T, V, NR_BWD, BN_ACT_NONE>(st, r, g) : nred_launch<T, V, NR_STATS, BN_ACT_NONE>(st, r, g);
  if (*s != LAM_OK) return;
  nhwc_bn_sums_final_kernel<T><<<final_blocks(C), 32 * FINAL_WARPS, 0, st->stream>>>(
      C, g.S, (double)N, st->nhwc_part, (const T *)x, !dy, out, dgamma, dbeta);
  *s = cuda_after_launch(st, st->stream, "nhwc_bn_sums_final_kernel", __FILE__, __LINE__);
}

lam_status nhwc_bn_sums(lam_ctx *ctx, lam_fmt f, size_t N, int C, const void *x, const void *dy, const float *mean,
                        const float *invstd, float *out, float *dgamma, float *dbeta) {
  cuda_state *st = cuda_st(ctx);
  if (C <= 0) return LAM_OK;
  lam_status s = LAM_OK;
  if (!N) return cuda_status(cudaMemsetAsync(out, 0, 2 * (size_t)C * sizeof(float), st->stream), "cudaMemsetAsync",
                             __FILE__, __LINE__);
  NHWC_DISPATCH(f, vec_ok(f.dt, C, x, dy), nhwc_bn_sums_launch, &s, st, N, C, x, dy, mean, invstd, out, dgamma, dbeta);
  return s;
}

/* fin[2c] = mean(dy), fin[2c + 1] = mean(dy xhat) from the summed sums and this rank's N: what the apply
 * kernel of bn_bwd reads. */
__global__ void nhwc_bn_sync_fin_kernel(int C, double N, const float *sums, float *fin) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  fin[2 * c] = (float)(sums[c] / N), fin[2 * c + 1] = (float)(sums[C + c] / N);
}

template <typename T, int V>
static void nhwc_bn_sync_dx_launch(lam_status *s, cuda_state *st, size_t N, int C, const void *x, const void *dy,
                                   const float *gamma, const float *mean, const float *invstd, const float *fin,
                                   void *dx) {
  chan_grid ga = chan_grid_for(N, C / V, 4096, 16, 65535);
  nhwc_bn_bwd_apply_kernel<T, V, BN_ACT_NONE><<<dim3(ga.S, ga.groups), NT, 0, st->stream>>>(
      N, C, ga.TX, ga.TY, bn_act<BN_ACT_NONE>{0.0f}, (const T *)x, NULL, (const T *)dy, gamma, NULL, mean, invstd, fin,
      (T *)dx, (T *)NULL, 0, nred_pool{});
  *s = cuda_after_launch(st, st->stream, "nhwc_bn_bwd_apply_kernel", __FILE__, __LINE__);
}

lam_status nhwc_bn_sync_dx(lam_ctx *ctx, lam_fmt f, size_t N, int C, const void *x, const void *dy, const float *gamma,
                           const float *mean, const float *invstd, const float *sums, double n_local, void *dx) {
  cuda_state *st = cuda_st(ctx);
  if (!N || C <= 0) return LAM_OK;
  float *fin = st->nhwc_part; /* free between the reductions that use it, on the same stream */
  nhwc_bn_sync_fin_kernel<<<(C + 255) / 256, 256, 0, st->stream>>>(C, n_local, sums, fin);
  LAUNCH_CHECK(st, "nhwc_bn_sync_fin_kernel");
  lam_status s = LAM_OK;
  NHWC_DISPATCH(f, vec_ok(f.dt, C, x, dy, dx), nhwc_bn_sync_dx_launch, &s, st, N, C, x, dy, gamma, mean, invstd, fin,
                dx);
  return s;
}

/* ---- the BatchNorm primitives by format: NCHW float32 runs the NCHW kernels above, NHWC (and a flat tensor,
 * P = 1, which lies the same in both) the NHWC ones ---- */

lam_status cuda_bn_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, const float *gamma,
                       const float *beta, void *y, float *mean, float *invstd, float *run_mean, float *run_var,
                       float momentum, float eps, int train) {
  if (as_nhwc(f, P))
    return nhwc_bn_fwd(ctx, f, (size_t)B * P, C, BN_ACT_NONE, 0.0f, x, NULL, gamma, beta, y, mean, invstd, run_mean,
                       run_var, momentum, eps, train);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("bn_fwd");
  return nchw_bn_fwd(ctx, B, C, P, (const float *)x, gamma, beta, (float *)y, mean, invstd, run_mean, run_var, momentum,
                     eps, train);
}
lam_status cuda_bn_act_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, int act, float alpha, const void *x,
                           const void *r, const float *gamma, const float *beta, void *y, float *mean, float *invstd,
                           float *run_mean, float *run_var, float momentum, float eps, int train) {
  if (as_nhwc(f, P))
    return nhwc_bn_fwd(ctx, f, (size_t)B * P, C, act, alpha, x, r, gamma, beta, y, mean, invstd, run_mean, run_var,
                       momentum, eps, train);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("bn_act_fwd");
  return nchw_bn_act_fwd(ctx, B, C, P, act, alpha, (const float *)x, (const float *)r, gamma, beta, (float *)y, mean,
                         invstd, run_mean, run_var, momentum, eps, train);
}
lam_status cuda_bn_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, const void *dy, const float *gamma,
                       const float *mean, const float *invstd, void *dx, float *dgamma, float *dbeta) {
  if (as_nhwc(f, P))
    return nhwc_bn_bwd(ctx, f, (size_t)B * P, C, BN_ACT_NONE, 0.0f, x, NULL, dy, gamma, NULL, mean, invstd, dx, NULL, 0,
                       dgamma, dbeta);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("bn_bwd");
  return nchw_bn_bwd(ctx, B, C, P, (const float *)x, (const float *)dy, gamma, mean, invstd, (float *)dx, dgamma, dbeta);
}
/* Sync BN: the rows of an NHWC tensor, or of an NCHW one with P = 1 (the same layout); NCHW images with P > 1
 * (LAMINA_LAYOUT=nchw) have no kernels here. */
static lam_status sync_bn_rows(const char *what, lam_fmt f, int P) {
  if (f.nhwc || P == 1) return LAM_OK;
  return LAM_FAIL(LAM_ERR_UNSUPPORTED, "%s: BatchNorm synchronized over ranks runs on NHWC activations on CUDA (the "
                  "default layout for models with convs); unset LAMINA_LAYOUT=nchw", what);
}
lam_status cuda_bn_sums(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, const void *dy, const float *mean,
                        const float *invstd, float *out, float *dgamma, float *dbeta) {
  LAM_TRY(sync_bn_rows("bn_sums", f, P));
  return nhwc_bn_sums(ctx, f, (size_t)B * P, C, x, dy, mean, invstd, out, dgamma, dbeta);
}
lam_status cuda_bn_sync_dx(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, const void *dy, const float *gamma,
                           const float *mean, const float *invstd, const float *sums, double N, void *dx) {
  LAM_TRY(sync_bn_rows("bn_sync_dx", f, P));
  return nhwc_bn_sync_dx(ctx, f, (size_t)B * P, C, x, dy, gamma, mean, invstd, sums, N, dx);
}
/* A thread per channel, as the CPU twin computes it (double, then invstd as bn_fwd's eval path does). */
__global__ void bn_sync_stats_kernel(int C, double N, const float *sums, float eps, float momentum, float *mean,
                                     float *invstd, float *var, float *run_mean, float *run_var) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < C) lam_bn_sync_stats_channel(c, C, N, sums, eps, momentum, mean, invstd, var, run_mean, run_var);
}
lam_status cuda_bn_sync_stats(lam_ctx *ctx, int C, double N, const float *sums, float eps, float momentum, float *mean,
                              float *invstd, float *var, float *run_mean, float *run_var) {
  cuda_state *st = cuda_st(ctx);
  if (C <= 0) return LAM_OK;
  bn_sync_stats_kernel<<<(C + 255) / 256, 256, 0, st->stream>>>(C, N, sums, eps, momentum, mean, invstd, var, run_mean,
                                                                 run_var);
  LAUNCH_CHECK(st, "bn_sync_stats_kernel");
  return LAM_OK;
}
lam_status cuda_bn_act_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, int act, float alpha, const void *x,
                           const void *y, const void *dy, const float *gamma, const float *beta, const float *mean,
                           const float *invstd, void *dx, void *dr, int dr_add, float *dgamma, float *dbeta) {
  if (as_nhwc(f, P))
    return nhwc_bn_bwd(ctx, f, (size_t)B * P, C, act, alpha, x, y, dy, gamma, beta, mean, invstd, dx, dr, dr_add, dgamma,
                       dbeta);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("bn_act_bwd");
  return nchw_bn_act_bwd(ctx, B, C, P, act, alpha, (const float *)x, (const float *)y, (const float *)dy, gamma, beta,
                         mean, invstd, (float *)dx, (float *)dr, dr_add, dgamma, dbeta);
}

/* ---- GroupNorm, and LayerNorm as its one group ---- */

/* Value (b, c, p) of (B, C, P) in NCHW or NHWC. */
__device__ __forceinline__ size_t gn_at(bool nhwc, int C, int P, int b, int c, int p) {
  return nhwc ? ((size_t)b * P + p) * C + c : ((size_t)b * C + c) * P + p;
}

/* The block's two sums, on every thread. */
__device__ double2 gn_block_sum(double a, double b) {
  __shared__ double2 part[NT / 32];
  for (int o = 16; o > 0; o /= 2) a += __shfl_down_sync(0xffffffffu, a, o), b += __shfl_down_sync(0xffffffffu, b, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = make_double2(a, b);
  __syncthreads();
  __shared__ double2 total;
  if (threadIdx.x == 0) {
    double2 t = part[0];
    for (int w = 1; w < NT / 32; w++) t.x += part[w].x, t.y += part[w].y;
    total = t;
  }
  __syncthreads();
  const double2 t = total;
  __syncthreads(); /* part and total are reused by the next call */
  return t;
}

/* A group's values in the order of memory: NCHW channel by channel, NHWC pixel by pixel. */
__device__ __forceinline__ void gn_coord(bool nhwc, int Cg, int P, int g, int i, int *c, int *p) {
  if (nhwc) *p = i / Cg, *c = g * Cg + i % Cg;
  else *c = g * Cg + i / P, *p = i % P;
}

template <typename T>
__global__ void groupnorm_fwd_kernel(bool nhwc, int C, int P, int G, const T *x, const float *gamma, const float *beta,
                                     T *y, float *mean, float *invstd, float eps) {
  const int b = blockIdx.x / G, g = blockIdx.x % G, Cg = C / G, n = Cg * P;
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += NT) {
    int c, p;
    gn_coord(nhwc, Cg, P, g, i, &c, &p);
    s += tval(x[gn_at(nhwc, C, P, b, c, p)]);
  }
  const double mu = gn_block_sum(s, 0.0).x / n;
  double v = 0.0;
  for (int i = threadIdx.x; i < n; i += NT) {
    int c, p;
    gn_coord(nhwc, Cg, P, g, i, &c, &p);
    const double d = tval(x[gn_at(nhwc, C, P, b, c, p)]) - mu;
    v += d * d;
  }
  const double var = gn_block_sum(v, 0.0).x / n;
  const float m = (float)mu, is = (float)(1.0 / sqrt(var + eps)); /* as the CPU twin */
  if (threadIdx.x == 0) mean[blockIdx.x] = m, invstd[blockIdx.x] = is;
  for (int i = threadIdx.x; i < n; i += NT) {
    int c, p;
    gn_coord(nhwc, Cg, P, g, i, &c, &p);
    const size_t o = gn_at(nhwc, C, P, b, c, p);
    const float sc = is * (gamma ? gamma[c] : 1.0f), bt = beta ? beta[c] : 0.0f;
    y[o] = tfrom<T>((tval(x[o]) - m) * sc + bt);
  }
}

/* Per (sample, group): each channel's sum(dy) and sum(dy xhat) into work, then dx over the group. */
template <typename T>
__global__ void groupnorm_bwd_kernel(bool nhwc, int C, int P, int G, const T *x, const T *dy, const float *gamma,
                                     const float *mean, const float *invstd, T *dx, float *work) {
  const int b = blockIdx.x / G, g = blockIdx.x % G, Cg = C / G, n = Cg * P;
  const double m = mean[blockIdx.x], is = invstd[blockIdx.x];
  double sg = 0.0, sgx = 0.0;
  for (int k = 0; k < Cg; k++) { /* a channel at a time: its pixels over the block */
    const int c = g * Cg + k;
    double s1 = 0.0, s2 = 0.0;
    for (int p = threadIdx.x; p < P; p += NT) {
      const size_t o = gn_at(nhwc, C, P, b, c, p);
      const double d = tval(dy[o]);
      s1 += d, s2 += d * ((tval(x[o]) - m) * is);
    }
    const double2 t = gn_block_sum(s1, s2);
    if (threadIdx.x == 0) work[2 * ((size_t)b * C + c)] = (float)t.x, work[2 * ((size_t)b * C + c) + 1] = (float)t.y;
    const double gc = gamma ? gamma[c] : 1.0;
    sg += gc * t.x, sgx += gc * t.y;
  }
  const double mg = sg / n, mgx = sgx / n;
  for (int i = threadIdx.x; i < n; i += NT) {
    int c, p;
    gn_coord(nhwc, Cg, P, g, i, &c, &p);
    const size_t o = gn_at(nhwc, C, P, b, c, p);
    const double gc = gamma ? gamma[c] : 1.0;
    dx[o] = tfrom<T>((float)(is * (tval(dy[o]) * gc - mg - (tval(x[o]) - m) * is * mgx)));
  }
}

/* Thread per channel: the samples' parts in order. */
__global__ void groupnorm_param_grad_kernel(int B, int C, const float *work, float *dgamma, float *dbeta) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double s1 = 0.0, s2 = 0.0;
  for (int b = 0; b < B; b++) s1 += work[2 * ((size_t)b * C + c)], s2 += work[2 * ((size_t)b * C + c) + 1];
  if (dbeta) dbeta[c] += (float)s1;
  if (dgamma) dgamma[c] += (float)s2;
}

static lam_status gn_check(const char *what, int B, int C, int P, int G) {
  if ((size_t)C / G * P >= ((size_t)1 << 31) || (size_t)B * G >= ((size_t)1 << 31))
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "%s: a group of %d x %d values or %d x %d groups is beyond this kernel's "
                    "32-bit indexing; use a smaller batch or more groups", what, C / G, P, B, G);
  return LAM_OK;
}

lam_status cuda_groupnorm_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, int G, const void *x, const float *gamma,
                              const float *beta, void *y, float *mean, float *invstd, float eps) {
  cuda_state *st = cuda_st(ctx);
  if (B <= 0 || C <= 0 || P <= 0) return LAM_OK;
  LAM_TRY(gn_check("groupnorm_fwd", B, C, P, G));
  LAM_DT_DISPATCH(f.dt, T,
                  groupnorm_fwd_kernel<T><<<B * G, NT, 0, st->stream>>>(f.nhwc != 0, C, P, G, (const T *)x, gamma, beta,
                                                                         (T *)y, mean, invstd, eps));
  LAUNCH_CHECK(st, "groupnorm_fwd_kernel");
  return LAM_OK;
}

lam_status cuda_groupnorm_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, int G, const void *x, const void *dy,
                              const float *gamma, const float *mean, const float *invstd, void *dx, float *dgamma,
                              float *dbeta, float *work) {
  cuda_state *st = cuda_st(ctx);
  if (B <= 0 || C <= 0 || P <= 0) return LAM_OK;
  LAM_TRY(gn_check("groupnorm_bwd", B, C, P, G));
  LAM_DT_DISPATCH(f.dt, T,
                  groupnorm_bwd_kernel<T><<<B * G, NT, 0, st->stream>>>(f.nhwc != 0, C, P, G, (const T *)x,
                                                                         (const T *)dy, gamma, mean, invstd, (T *)dx,
                                                                         work));
  LAUNCH_CHECK(st, "groupnorm_bwd_kernel");
  groupnorm_param_grad_kernel<<<(C + NT - 1) / NT, NT, 0, st->stream>>>(B, C, work, dgamma, dbeta);
  LAUNCH_CHECK(st, "groupnorm_param_grad_kernel");
  return LAM_OK;
}
