/* norm.cu — the CUDA twins of cpu/norm.c (prims.h): GroupNorm, and LayerNorm as its one group, in every format
 * (NCHW or NHWC; float32, bfloat16 or half). One block per (sample, group): its sums in double over the group's
 * C/G x P values (a tree in shared memory, the same order every run), the statistics, then the group written.
 * The backward's per-channel sums of each sample go to work and are added over the samples in order by a second
 * kernel: no float atomics, the same bits every run. */
#include <stdint.h>

#include "cuda.h"
#include "vec.cuh"

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
