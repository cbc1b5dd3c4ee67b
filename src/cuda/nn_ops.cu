/* nn_ops.cu — the CUDA twins of the primitives in cpu/nn_ops.c (prims.h): per-channel bias and BatchNorm
 * (alone and followed by an activation); the pooling is in pool.cu. Everything is queued on the context's stream. Elementwise kernels are grid-stride loops with 32-bit indices where the tensor allows (64-bit
 * divisions cost dozens of instructions). Per-channel reductions (channel_bias_bwd, bn_*fwd's statistics,
 * bn_*bwd's sums) are one block per channel, or S blocks per channel over ranges of samples whose sums go to
 * the scratch rowsum_part and are added up in a fixed order by a second kernel: no float atomics, so the
 * results are the same bits every run (and on every GPU: S depends on the sizes only). */
#include <stdint.h>

#include "cuda.h"
#include "kernels.cuh"
#include "../math/act.h"
#include "vec.cuh"
#include "bn.cuh"

/* ---- per-channel reductions over (B, C, P) ---- */

/* Threads of a reduction block; and how the samples are split: about RED_TARGET_BLOCKS blocks in all,
 * each with at least RED_MIN_PER_BLOCK values. */
#define RED_NT 256
#define RED_TARGET_BLOCKS 1024
#define RED_MIN_PER_BLOCK 8192

/* Blocks per channel S for `vals` partial sums a block and `extra` floats a channel in rowsum_part
 * (S = 1: one block per channel, which finishes the job itself). */
static int channel_splits(int B, int C, int P, int vals, int extra) {
  size_t N = (size_t)B * P, s = ((size_t)RED_TARGET_BLOCKS + C - 1) / C;
  size_t by_size = (N + RED_MIN_PER_BLOCK - 1) / RED_MIN_PER_BLOCK;
  if (s > by_size) s = by_size;
  if (s > (size_t)B) s = (size_t)B;
  size_t per_c = ROW_SUM_PART_FLOATS / (size_t)C;
  size_t room = per_c > (size_t)extra ? (per_c - extra) / vals : 0;
  if (s > room) s = room;
  return s < 1 ? 1 : (int)s;
}

/* A channel's values are indexed in 32 bits. (Channels go in gridDim.x with one block each, and in
 * gridDim.y only when split, that is when C < RED_TARGET_BLOCKS.) */
static lam_status check_channel_size(const char *what, int B, int P) {
  if ((size_t)B * P >= (size_t)1 << 31)
    return lam_fail_at(LAM_ERR_UNSUPPORTED, __FILE__, __LINE__,
                       "%s: %zu values per channel is beyond this kernel's 32-bit indexing; use a smaller batch", what,
                       (size_t)B * P);
  return LAM_OK;
}

/* The sums of a and b over the block (blockDim.x == RED_NT, every thread calls), in a fixed order:
 * shuffles within each warp, then the warps' sums in warp order. Every thread gets the result. */
__device__ float2 block_sum2(float a, float b) {
  __shared__ float2 warp_sum[RED_NT / 32];
  __shared__ float2 total;
  for (int off = 16; off > 0; off /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, off);
    b += __shfl_down_sync(0xffffffffu, b, off);
  }
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = make_float2(a, b);
  __syncthreads();
  if (threadIdx.x == 0) {
    float2 t = warp_sum[0];
    for (int w = 1; w < RED_NT / 32; w++) t.x += warp_sum[w].x, t.y += warp_sum[w].y;
    total = t;
  }
  __syncthreads();
  return total;
}

/* gv (dy, V values at o in units of V, channel c) becomes dz = dy act'(.): from y, or from z = (x - m)
 * sc + bt recomputed from xv exactly as the forward computed it (sc = invstd gamma, bt = beta). */
template <int ACT, int V>
__device__ __forceinline__ void bn_dz(const bn_act<ACT> &act, const float (&xv)[V], float (&gv)[V], const float *y,
                                      size_t o, float m, float sc, float bt) {
  if constexpr (ACT != BN_ACT_NONE) {
    float yv[V];
    if constexpr (bn_act<ACT>::from_y) vload<V>(yv, y, o);
#pragma unroll
    for (int q = 0; q < V; q++) {
      if constexpr (bn_act<ACT>::from_y) gv[q] = act.dz(0.0f, yv[q], gv[q]);
      else gv[q] = act.dz((xv[q] - m) * sc + bt, 0.0f, gv[q]);
    }
  }
}

/* dr (a residual's gradient, bn_act_bwd's) = dz, or with add dr += dz: the V values at o (in units of V). */
template <int V> __device__ __forceinline__ void store_dr(float *dr, size_t o, const float (&gv)[V], int add) {
  float v[V];
  if (add) vload<V>(v, dr, o);
#pragma unroll
  for (int q = 0; q < V; q++) v[q] = add ? v[q] + gv[q] : gv[q];
  vstore<V>(dr, o, v);
}

/* What a reduction sums per value of channel c: dy (channel bias); x - K and (x - K)^2 with the
 * channel's first value K as the shift (BatchNorm's statistics: shifted sums keep the variance's digits
 * when the mean is large against the spread); dz and dz xhat (BatchNorm's backward, dz = dy without an
 * activation, else bn_dz's). */
enum { RED_SUM = 0, RED_STATS, RED_BWD };
struct red_args {
  int B, C, P;
  const float *x, *dy;    /* x: RED_STATS, RED_BWD; dy: RED_SUM, RED_BWD */
  const float *mean, *invstd; /* RED_BWD */
  /* RED_BWD after an activation: y (relu, leaky, tanh, sigmoid; else NULL), gamma and beta (gelu's z; may
   * be NULL: 1 and 0), leaky's slope */
  const float *y, *gamma, *beta;
  float alpha;
};

/* This thread's share of the sums of channel c over the samples [b0, b1), flattened over (b, p), V
 * values at a time (V = 4: P % 4 == 0 and x, dy, y 16-byte aligned). */
template <int MODE, int V, int ACT = BN_ACT_NONE>
__device__ float2 thread_sums(const red_args &r, int c, int b0, int b1) {
  const unsigned PV = (unsigned)r.P / V, n = (unsigned)(b1 - b0) * PV;
  const bn_act<ACT> act = {r.alpha};
  float a = 0.0f, b = 0.0f, K = 0.0f, m = 0.0f, is = 0.0f, sc = 0.0f, bt = 0.0f;
  if (MODE == RED_STATS) K = r.x[(size_t)c * r.P];
  if (MODE == RED_BWD) m = r.mean[c], is = r.invstd[c];
  if (MODE == RED_BWD && ACT == LAM_ACT_GELU) sc = is * gamma_of(r.gamma, c), bt = beta_of(r.beta, c);
  for (unsigned j = threadIdx.x; j < n; j += RED_NT) {
    size_t o = ((size_t)(b0 + j / PV) * r.C + c) * PV + j % PV; /* in units of V values */
    float xv[V], gv[V];
    if (MODE != RED_SUM) vload<V>(xv, r.x, o);
    if (MODE != RED_STATS) vload<V>(gv, r.dy, o);
    if (MODE == RED_BWD) bn_dz<ACT, V>(act, xv, gv, r.y, o, m, sc, bt);
#pragma unroll
    for (int q = 0; q < V; q++) {
      if (MODE == RED_SUM) a += gv[q];
      if (MODE == RED_STATS) {
        float d = xv[q] - K;
        a += d, b += d * d;
      }
      if (MODE == RED_BWD) a += gv[q], b += gv[q] * ((xv[q] - m) * is);
    }
  }
  return make_float2(a, b);
}

/* Whether the reductions over (B, C, P) can take float4s. */
static bool red_vec(int P, const void *a, const void *b) { return P % 4 == 0 && aligned16(a) && aligned16(b); }

/* Block (s, c): the sums of channel c over the s-th of S ranges of samples, to part[(c S + s) 2 + k]. */
template <int MODE, int V, int ACT> __global__ void channel_part_kernel(red_args r, float *part) {
  const int S = gridDim.x, s = blockIdx.x, c = blockIdx.y;
  const int b0 = (int)((long long)s * r.B / S), b1 = (int)((long long)(s + 1) * r.B / S);
  float2 t = thread_sums<MODE, V, ACT>(r, c, b0, b1);
  t = block_sum2(t.x, t.y);
  if (threadIdx.x == 0) part[((size_t)c * S + s) * 2] = t.x, part[((size_t)c * S + s) * 2 + 1] = t.y;
}

template <int MODE, int ACT = BN_ACT_NONE>
static void channel_part_launch(cuda_state *st, const red_args &r, int S, float *part) {
  if (red_vec(r.P, r.x, r.dy) && aligned16(r.y))
    channel_part_kernel<MODE, 4, ACT><<<dim3(S, r.C), RED_NT, 0, st->stream>>>(r, part);
  else channel_part_kernel<MODE, 1, ACT><<<dim3(S, r.C), RED_NT, 0, st->stream>>>(r, part);
}

/* Channel c's S partial sums, in order, in double. */
__device__ inline void part_total(const float *part, int c, int S, double *a, double *b) {
  double x = 0.0, y = 0.0;
  for (int s = 0; s < S; s++) x += part[((size_t)c * S + s) * 2], y += part[((size_t)c * S + s) * 2 + 1];
  *a = x, *b = y;
}

/* ---- per-channel bias ---- */

template <typename I, int V> __global__ void channel_bias_fwd_kernel(I n, I PV, I C, float *y, const float *bias) {
  GRID_STRIDE(I, i, n) {
    const float b = __ldg(bias + i / PV % C);
    float v[V];
    vload<V>(v, y, i);
#pragma unroll
    for (int q = 0; q < V; q++) v[q] += b;
    vstore<V>(y, i, v);
  }
}

static lam_status nchw_channel_bias_fwd(lam_ctx *ctx, int B, int C, int P, float *y, const float *bias) {
  cuda_state *st = cuda_st(ctx);
  size_t n = (size_t)B * C * P;
  LAUNCH_ROWWISE(st, channel_bias_fwd_kernel, P % 4 == 0 && aligned16(y), n, P, C, y, bias);
  return LAM_OK;
}

/* One block per channel (blockIdx.x): db[c] += its sum. */
template <int V> __global__ void channel_sum_kernel(red_args r, float *db) {
  const int c = blockIdx.x;
  float2 t = thread_sums<RED_SUM, V>(r, c, 0, r.B);
  float s = block_sum2(t.x, 0.0f).x;
  if (threadIdx.x == 0) db[c] += s;
}

__global__ void channel_sum_final_kernel(int C, int S, const float *part, float *db) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double a, b;
  part_total(part, c, S, &a, &b);
  db[c] += (float)a;
}

static lam_status nchw_channel_bias_bwd(lam_ctx *ctx, int B, int C, int P, const float *dy, float *db) {
  cuda_state *st = cuda_st(ctx);
  if (B <= 0 || C <= 0 || P <= 0) return LAM_OK;
  LAM_TRY(check_channel_size("channel_bias_bwd", B, P));
  red_args r = {B, C, P, NULL, dy, NULL, NULL, NULL, NULL, NULL, 0.0f};
  int S = channel_splits(B, C, P, 2, 0);
  if (S == 1) {
    if (red_vec(P, dy, NULL)) channel_sum_kernel<4><<<C, RED_NT, 0, st->stream>>>(r, db);
    else channel_sum_kernel<1><<<C, RED_NT, 0, st->stream>>>(r, db);
    LAUNCH_CHECK(st, "channel_sum_kernel");
    return LAM_OK;
  }
  channel_part_launch<RED_SUM>(st, r, S, st->rowsum_part);
  LAUNCH_CHECK(st, "channel_part_kernel<sum>");
  channel_sum_final_kernel<<<(C + NT - 1) / NT, NT, 0, st->stream>>>(C, S, st->rowsum_part, db);
  LAUNCH_CHECK(st, "channel_sum_final_kernel");
  return LAM_OK;
}

/* ---- BatchNorm, alone (bn_fwd, bn_bwd) or followed by an activation (bn_act_fwd, bn_act_bwd): the same
 * kernels, with the activation a template argument (BN_ACT_NONE for the plain ones) ---- */

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
    float m = train ? mean[c] : run_mean[c], is = train ? invstd[c] : 1.0f / sqrtf(run_var[c] + eps);
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
  const float sc = ACT == LAM_ACT_GELU ? is * gamma_of(gamma, c) : 0.0f; /* gelu's z, as the forward */
  const float bt = ACT == LAM_ACT_GELU ? beta_of(r.beta, c) : 0.0f;
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
    float sc = ACT == LAM_ACT_GELU ? k : 0.0f, bt = ACT == LAM_ACT_GELU ? beta_of(beta, c) : 0.0f;
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
  else if (!y) return LAM_FAIL(LAM_ERR_INVALID_ARG, "%s: relu, leaky, tanh and sigmoid read y, which is NULL", what);
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
  switch (act) { /* as act_bwd: any other value is the sigmoid */
    case LAM_ACT_RELU: return BN_ACT_BWD(LAM_ACT_RELU);
    case LAM_ACT_LEAKY: return BN_ACT_BWD(LAM_ACT_LEAKY);
    case LAM_ACT_TANH: return BN_ACT_BWD(LAM_ACT_TANH);
    case LAM_ACT_GELU: return BN_ACT_BWD(LAM_ACT_GELU);
    default: return BN_ACT_BWD(LAM_ACT_SIGMOID);
  }
#undef BN_ACT_BWD
}

/* ---- the primitives by format: NCHW float32 runs the kernels above, NHWC those of nhwc.cu (a flat tensor,
 * P = 1, lies the same in both) ---- */

/* The NHWC kernels serve f: NHWC, or a flat tensor in any layout. */
static bool as_nhwc(lam_fmt f, int P) { return f.nhwc || (P == 1 && f.dt != LAM_DT_F32); }

lam_status cuda_channel_bias_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, void *y, const float *bias) {
  if (as_nhwc(f, P)) return nhwc_channel_bias_fwd(ctx, f, (size_t)B * P, C, y, bias);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("channel_bias_fwd");
  return nchw_channel_bias_fwd(ctx, B, C, P, (float *)y, bias);
}
lam_status cuda_channel_bias_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *dy, float *db) {
  if (as_nhwc(f, P)) return nhwc_channel_bias_bwd(ctx, f, (size_t)B * P, C, dy, db);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("channel_bias_bwd");
  return nchw_channel_bias_bwd(ctx, B, C, P, (const float *)dy, db);
}
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
  if (c >= C) return;
  const double mu = sums[c] / N, v = fmax(sums[C + c] / N - mu * mu, 0.0);
  mean[c] = (float)mu, var[c] = (float)v, invstd[c] = 1.0f / sqrtf(var[c] + eps);
  if (run_mean) run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * mean[c];
  if (run_var) run_var[c] = (1.0f - momentum) * run_var[c] + momentum * (float)(N > 1 ? v * N / (N - 1) : v);
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
