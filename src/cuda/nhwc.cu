/* nhwc.cu — the CUDA kernels of the primitives on NHWC activations (prims.h: lam_fmt), float32, bfloat16 or half:
 * per-channel bias and BatchNorm (alone and followed by an activation) (the pooling's are in pool.cu, the format
 * conversion in layout.cu). The primitives in nn.cu and nn_ops.cu call
 * these for an NHWC format; their NCHW float32 kernels stay as they were.
 *
 * In NHWC a pixel's C channels lie together, so a warp reads consecutive channels of a few pixels: each
 * thread takes V channels of a pixel in one 16-byte access (4 floats or 8 16-bit floats; V = 1 where C or an
 * address does not allow it). The per-channel kernels (bias, BatchNorm) lay a block out as TX channel
 * vectors by TY rows (pixels): a thread keeps its channels' constants in registers and walks rows; sums
 * over rows go to a partial per (block, channel), added up in a fixed order by a warp per channel in a
 * second kernel, so every result is the same bits on every run. Arithmetic is in float32; a 16-bit type is
 * rounded once, where stored. */
#include <stdint.h>

#include "cuda.h"
#include "kernels.cuh"
#include "bn.cuh"
#include "vec.cuh"

/* ---- the per-channel layout: TX channel vectors x TY rows a block, S blocks over the rows ---- */

typedef struct chan_grid {
  int TX, TY, groups, S; /* groups: blocks over the channel vectors (gridDim.y); S: over the rows (gridDim.x) */
} chan_grid;

/* For N rows of CV channel vectors: S about `target` blocks in all, each with at least min_rows rows, and at
 * most max_S (the partial sums' room). */
static chan_grid chan_grid_for(size_t N, int CV, int target, size_t min_rows, size_t max_S) {
  chan_grid g;
  g.TX = CV < 32 ? CV : 32;
  g.TY = NT / g.TX;
  g.groups = (CV + g.TX - 1) / g.TX;
  size_t s = ((size_t)target + g.groups - 1) / g.groups, by_rows = (N + min_rows - 1) / min_rows;
  if (s > by_rows) s = by_rows;
  if (s > max_S) s = max_S;
  g.S = s < 1 ? 1 : (int)s;
  return g;
}

/* This block's rows [*r0, *r1) and this thread's channel vector (-1: none) and row offset. */
__device__ __forceinline__ int chan_thread(size_t N, int CV, int TX, int TY, size_t *r0, size_t *r1, int *ty) {
  const int S = gridDim.x, s = blockIdx.x;
  *r0 = N * s / S, *r1 = N * (s + 1) / S;
  const int tx = threadIdx.x % TX;
  *ty = threadIdx.x / TX;
  const int cv = blockIdx.y * TX + tx;
  return *ty < TY && cv < CV ? cv : -1;
}

/* The block's per-thread sums a[V], b[V] (TX x TY threads) added over the rows ty in order; the threads of
 * row 0 then hold their channels' block sums. sh holds 2 * NT * V floats. */
template <int V>
__device__ __forceinline__ void chan_block_sum(float (&a)[V], float (&b)[V], int TX, int TY, int ty, float *sh) {
  const int tx = threadIdx.x % TX;
  if (ty < TY)
#pragma unroll
    for (int q = 0; q < V; q++) sh[(ty * TX + tx) * V + q] = a[q], sh[(NT + ty * TX + tx) * V + q] = b[q];
  __syncthreads();
  if (ty == 0)
    for (int k = 1; k < TY; k++)
#pragma unroll
      for (int q = 0; q < V; q++) a[q] += sh[(k * TX + tx) * V + q], b[q] += sh[(NT + k * TX + tx) * V + q];
}

/* ---- sums per channel over the rows: a bias's gradient, BatchNorm's statistics and backward sums ---- */

enum { NR_SUM = 0, NR_STATS, NR_BWD };
struct nred_args {
  size_t N;
  int C;
  const void *x, *dy, *y; /* x: NR_STATS, NR_BWD; dy: NR_SUM, NR_BWD; y: NR_BWD after relu, leaky, tanh, sigmoid */
  const float *mean, *invstd, *gamma, *beta; /* NR_BWD (gamma, beta: gelu's z) */
  float alpha;
};

/* dz = dy act'(.) (ACT after a BatchNorm), from y or from z = (x - m) sc + bt, as the NCHW kernels form it. */
template <int ACT, int V>
__device__ __forceinline__ void nhwc_dz(const bn_act<ACT> &act, const float (&xv)[V], const float (&yv)[V],
                                        float (&gv)[V], const float (&m)[V], const float (&sc)[V],
                                        const float (&bt)[V]) {
#pragma unroll
  for (int q = 0; q < V; q++) {
    if constexpr (ACT == BN_ACT_NONE) (void)xv, (void)yv, (void)m, (void)sc, (void)bt;
    else if constexpr (bn_act<ACT>::from_y) gv[q] = act.dz(0.0f, yv[q], gv[q]);
    else gv[q] = act.dz((xv[q] - m[q]) * sc[q] + bt[q], 0.0f, gv[q]);
  }
}

/* Block (s, group): its rows' sums of its channels, to part[(c * S + s) * 2 + {0, 1}]: dy (NR_SUM); x - K and
 * (x - K)^2 with K the channel's first value (NR_STATS: shifted, as the NCHW kernels); dz and dz xhat (NR_BWD). */
template <typename T, int V, int MODE, int ACT>
__global__ void nred_part_kernel(nred_args r, int TX, int TY, float *part) {
  __shared__ float sh[2 * NT * V];
  const int CV = r.C / V;
  size_t r0, r1;
  int ty;
  const int cv = chan_thread(r.N, CV, TX, TY, &r0, &r1, &ty);
  float a[V], b[V];
#pragma unroll
  for (int q = 0; q < V; q++) a[q] = b[q] = 0.0f;
  if (cv >= 0) {
    const int c0 = cv * V;
    const bn_act<ACT> act = {r.alpha};
    float K[V], m[V], is[V], sc[V], bt[V];
#pragma unroll
    for (int q = 0; q < V; q++) {
      K[q] = MODE == NR_STATS ? tget((const T *)r.x, (size_t)c0 + q) : 0.0f;
      m[q] = MODE == NR_BWD ? r.mean[c0 + q] : 0.0f;
      is[q] = MODE == NR_BWD ? r.invstd[c0 + q] : 0.0f;
      sc[q] = MODE == NR_BWD && ACT == LAM_ACT_GELU ? is[q] * gamma_of(r.gamma, c0 + q) : 0.0f;
      bt[q] = MODE == NR_BWD && ACT == LAM_ACT_GELU ? beta_of(r.beta, c0 + q) : 0.0f;
    }
    for (size_t row = r0 + ty; row < r1; row += TY) {
      const size_t o = row * CV + cv;
      float xv[V], gv[V], yv[V];
      if (MODE != NR_SUM) tload<T, V>(xv, (const T *)r.x, o);
      if (MODE != NR_STATS) tload<T, V>(gv, (const T *)r.dy, o);
      if (MODE == NR_BWD && bn_act<ACT>::from_y) tload<T, V>(yv, (const T *)r.y, o);
      if (MODE == NR_BWD) nhwc_dz<ACT, V>(act, xv, yv, gv, m, sc, bt);
#pragma unroll
      for (int q = 0; q < V; q++) {
        if (MODE == NR_SUM) a[q] += gv[q];
        if (MODE == NR_STATS) {
          float d = xv[q] - K[q];
          a[q] += d, b[q] += d * d;
        }
        if (MODE == NR_BWD) a[q] += gv[q], b[q] += gv[q] * ((xv[q] - m[q]) * is[q]);
      }
    }
  }
  chan_block_sum<V>(a, b, TX, TY, ty, sh);
  if (ty == 0 && cv >= 0)
#pragma unroll
    for (int q = 0; q < V; q++) {
      const size_t k = ((size_t)(cv * V + q) * gridDim.x + blockIdx.x) * 2;
      part[k] = a[q], part[k + 1] = b[q];
    }
}

/* Channel c's S partial sums in double, by the 32 lanes of a warp (every lane calls; each gets the totals):
 * lane l adds blocks l, l + 32, ... in order, then the lanes' sums are added by a fixed tree. The same bits
 * every run. (v1 was a thread per channel over all S blocks: 50-90 us for S = 1024, a tenth of a step.) */
__device__ inline void nred_total(const float *part, int S, int c, double *a, double *b) {
  const int lane = threadIdx.x % 32;
  const float *p = part + (size_t)c * S * 2;
  double x = 0.0, y = 0.0;
  for (int s = lane; s < S; s += 32) x += p[2 * s], y += p[2 * s + 1];
  for (int off = 16; off > 0; off /= 2) x += __shfl_down_sync(0xffffffffu, x, off), y += __shfl_down_sync(0xffffffffu, y, off);
  *a = __shfl_sync(0xffffffffu, x, 0), *b = __shfl_sync(0xffffffffu, y, 0);
}
/* The final kernels: a warp per channel (FINAL_WARPS channels a block). */
#define FINAL_WARPS 8
static unsigned final_blocks(int C) { return (unsigned)((C + FINAL_WARPS - 1) / FINAL_WARPS); }
#define FINAL_CHANNEL(c, C) \
  const int c = blockIdx.x * FINAL_WARPS + threadIdx.x / 32; \
  if (c >= (C)) return

/* The partial sums' room, and the grid of a reduction over N rows of C channels (vectors of V). */
static lam_status nred_grid(const char *what, size_t N, int C, int V, chan_grid *g) {
  if (N >= (size_t)1 << 31)
    return lam_fail_at(LAM_ERR_UNSUPPORTED, __FILE__, __LINE__,
                       "%s: %zu pixels per channel is beyond this kernel's 32-bit grid; use a smaller batch", what, N);
  const size_t room = (NHWC_PART_FLOATS - 2 * (size_t)C) / (2 * (size_t)C);
  if (room < 1) return lam_fail_at(LAM_ERR_UNSUPPORTED, __FILE__, __LINE__, "%s: %d channels is too many", what, C);
  *g = chan_grid_for(N, C / V, 1024, 64, room);
  return LAM_OK;
}

template <typename T, int V, int MODE, int ACT>
static lam_status nred_launch(cuda_state *st, const nred_args &r, const chan_grid &g) {
  nred_part_kernel<T, V, MODE, ACT><<<dim3(g.S, g.groups), NT, 0, st->stream>>>(r, g.TX, g.TY, st->nhwc_part);
  LAUNCH_CHECK(st, "nred_part_kernel");
  return LAM_OK;
}

/* ---- per-channel bias: y += bias[c]; db[c] += the sum of dy over the rows ---- */

template <typename T, int V>
__global__ void chan_bias_kernel(size_t N, int C, int TX, int TY, T *y, const float *__restrict__ bias) {
  const int CV = C / V;
  size_t r0, r1;
  int ty;
  const int cv = chan_thread(N, CV, TX, TY, &r0, &r1, &ty);
  if (cv < 0) return;
  float bv[V];
#pragma unroll
  for (int q = 0; q < V; q++) bv[q] = bias[cv * V + q];
  for (size_t row = r0 + ty; row < r1; row += TY) {
    float v[V];
    tload<T, V>(v, y, row * CV + cv);
#pragma unroll
    for (int q = 0; q < V; q++) v[q] += bv[q];
    tstore<T, V>(y, row * CV + cv, v);
  }
}

template <typename T, int V> static void chan_bias_launch(cuda_state *st, size_t N, int C, void *y, const float *bias) {
  chan_grid g = chan_grid_for(N, C / V, 4096, 16, 65535);
  chan_bias_kernel<T, V><<<dim3(g.S, g.groups), NT, 0, st->stream>>>(N, C, g.TX, g.TY, (T *)y, bias);
}

lam_status nhwc_channel_bias_fwd(lam_ctx *ctx, lam_fmt f, size_t N, int C, void *y, const float *bias) {
  cuda_state *st = cuda_st(ctx);
  if (!N || C <= 0) return LAM_OK;
  NHWC_DISPATCH(f, vec_ok(f.dt, C, y), chan_bias_launch, st, N, C, y, bias);
  LAUNCH_CHECK(st, "chan_bias_kernel");
  return LAM_OK;
}

__global__ void nred_sum_final_kernel(int C, int S, const float *part, float *db) {
  FINAL_CHANNEL(c, C);
  double a, b;
  nred_total(part, S, c, &a, &b);
  if (threadIdx.x % 32 == 0) db[c] += (float)a;
}

template <typename T, int V> static lam_status chan_sum_launch(cuda_state *st, const nred_args &r, float *db) {
  chan_grid g;
  LAM_TRY(nred_grid("channel_bias_bwd", r.N, r.C, V, &g));
  LAM_TRY((nred_launch<T, V, NR_SUM, BN_ACT_NONE>(st, r, g)));
  nred_sum_final_kernel<<<final_blocks(r.C), 32 * FINAL_WARPS, 0, st->stream>>>(r.C, g.S, st->nhwc_part, db);
  LAUNCH_CHECK(st, "nred_sum_final_kernel");
  return LAM_OK;
}

lam_status nhwc_channel_bias_bwd(lam_ctx *ctx, lam_fmt f, size_t N, int C, const void *dy, float *db) {
  cuda_state *st = cuda_st(ctx);
  if (!N || C <= 0) return LAM_OK;
  nred_args r = {N, C, NULL, dy, NULL, NULL, NULL, NULL, NULL, 0.0f};
  lam_status s = LAM_OK;
  NHWC_DISPATCH(f, vec_ok(f.dt, C, dy), s = chan_sum_launch, st, r, db);
  return s;
}

/* ---- BatchNorm over the N rows of each channel, alone or followed by an activation ---- */

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
#pragma unroll
  for (int q = 0; q < V; q++) {
    const int c = cv * V + q;
    m[q] = train ? mean[c] : run_mean[c];
    const float is = train ? invstd[c] : 1.0f / sqrtf(run_var[c] + eps);
    sc[q] = is * gamma_of(gamma, c), bt[q] = beta_of(beta, c);
  }
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

template <typename T, int V, int ACT> static lam_status nhwc_bn_fwd_launch(cuda_state *st, const nbn_fwd_args &a,
                                                                           bn_act<ACT> act) {
  if (a.train) {
    nred_args r = {a.N, a.C, a.x, NULL, NULL, NULL, NULL, NULL, NULL, 0.0f};
    chan_grid g;
    LAM_TRY(nred_grid("bn_fwd", a.N, a.C, V, &g));
    LAM_TRY((nred_launch<T, V, NR_STATS, BN_ACT_NONE>(st, r, g)));
    nhwc_bn_stats_final_kernel<T><<<final_blocks(a.C), 32 * FINAL_WARPS, 0, st->stream>>>(
        a.C, g.S, (double)a.N, st->nhwc_part, (const T *)a.x, a.eps, a.momentum, a.mean, a.invstd, a.run_mean,
        a.run_var);
    LAUNCH_CHECK(st, "nhwc_bn_stats_final_kernel");
  }
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
template <typename T, int V, int ACT>
__global__ void nhwc_bn_bwd_apply_kernel(size_t N, int C, int TX, int TY, bn_act<ACT> act, const T *x, const T *y,
                                         const T *dy, const float *gamma, const float *beta, const float *mean,
                                         const float *invstd, const float *fin, T *dx, T *dr, int dr_add) {
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
    sc[q] = ACT == LAM_ACT_GELU ? k[q] : 0.0f, bt[q] = ACT == LAM_ACT_GELU ? beta_of(beta, c) : 0.0f;
  }
  for (size_t row = r0 + ty; row < r1; row += TY) {
    const size_t o = row * CV + cv;
    float xv[V], gv[V], yv[V];
    tload<T, V>(xv, x, o);
    tload<T, V>(gv, dy, o);
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
};

template <typename T, int V, int ACT> static lam_status nhwc_bn_bwd_launch(cuda_state *st, const nbn_bwd_args &a,
                                                                           bn_act<ACT> act) {
  nred_args r = {a.N, a.C, a.x, a.dy, a.y, a.mean, a.invstd, a.gamma, a.beta, act.alpha};
  chan_grid g;
  LAM_TRY(nred_grid("bn_bwd", a.N, a.C, V, &g));
  LAM_TRY((nred_launch<T, V, NR_BWD, ACT>(st, r, g)));
  float *fin = st->nhwc_part + (size_t)g.S * a.C * 2;
  nhwc_bn_bwd_final_kernel<<<final_blocks(a.C), 32 * FINAL_WARPS, 0, st->stream>>>(a.C, g.S, (double)a.N, st->nhwc_part, fin,
                                                                      a.dgamma, a.dbeta);
  LAUNCH_CHECK(st, "nhwc_bn_bwd_final_kernel");
  chan_grid ga = chan_grid_for(a.N, a.C / V, 4096, 16, 65535);
  nhwc_bn_bwd_apply_kernel<T, V, ACT><<<dim3(ga.S, ga.groups), NT, 0, st->stream>>>(
      a.N, a.C, ga.TX, ga.TY, act, (const T *)a.x, (const T *)a.y, (const T *)a.dy, a.gamma, a.beta, a.mean, a.invstd,
      fin, (T *)a.dx, (T *)a.dr, a.dr_add);
  LAUNCH_CHECK(st, "nhwc_bn_bwd_apply_kernel");
  return LAM_OK;
}

template <int ACT> static lam_status nhwc_bn_bwd_act(cuda_state *st, lam_fmt f, const nbn_bwd_args &a, float alpha) {
  const bool v = vec_ok(f.dt, a.C, a.x, a.dy, a.dx, bn_act<ACT>::from_y ? a.y : NULL) && (!a.dr || aligned16(a.dr));
  const bn_act<ACT> act = {alpha};
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
  const bool from_y = act != BN_ACT_NONE && act != LAM_ACT_GELU;
  if (from_y && !y) return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_act_bwd: relu, leaky, tanh and sigmoid read y, which is NULL");
  if (dr && !from_y) return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_act_bwd: a residual's gradient needs an activation read from y");
  nbn_bwd_args a = {N, C, x, from_y ? y : NULL, dy, gamma, beta, mean, invstd, dx, dr, dr_add, dgamma, dbeta};
  switch (act) {
    case BN_ACT_NONE: return nhwc_bn_bwd_act<BN_ACT_NONE>(st, f, a, alpha);
    case LAM_ACT_RELU: return nhwc_bn_bwd_act<LAM_ACT_RELU>(st, f, a, alpha);
    case LAM_ACT_LEAKY: return nhwc_bn_bwd_act<LAM_ACT_LEAKY>(st, f, a, alpha);
    case LAM_ACT_TANH: return nhwc_bn_bwd_act<LAM_ACT_TANH>(st, f, a, alpha);
    case LAM_ACT_GELU: return nhwc_bn_bwd_act<LAM_ACT_GELU>(st, f, a, alpha);
    default: return nhwc_bn_bwd_act<LAM_ACT_SIGMOID>(st, f, a, alpha);
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
      (T *)dx, (T *)NULL, 0);
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
