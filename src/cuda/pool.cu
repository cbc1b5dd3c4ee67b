/* pool.cu — the CUDA twins of the pooling primitives (prims.h; CPU versions in cpu/pool.c under the same names):
 * max and average pooling, the global average over each plane (plane_mean), nearest upsampling and the pooling
 * over a clip's frames (tpool). Each primitive runs its NCHW float32 kernel or, for an NHWC format (float32,
 * bfloat16 or half), its NHWC twin: the NCHW kernels first, then the NHWC ones (a thread per V channels of a
 * pixel, 16-byte accesses where C and the pointers allow), then tpool, whose rows are frames in any layout.
 * Everything is queued on the context's stream. */
#include <stdint.h>

#include "cuda.h"
#include "kernels.cuh"
#include "vec.cuh"

/* ---- max pooling, NCHW float32 (NHWC: nhwc_pool below) ---- */

__global__ void maxpool_fwd_kernel(lam_pool_geom g, int B, const float *x, float *y, int32_t *arg) {
  size_t total = (size_t)B * g.C * g.OH * g.OW;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int ow = (int)(i % g.OW), oh = (int)(i / g.OW % g.OH);
    size_t bc = i / ((size_t)g.OW * g.OH);
    const float *xs = x + bc * g.H * g.W;
    int best = (oh * g.stride) * g.W + ow * g.stride;
    float m = xs[best];
    for (int a = 0; a < g.K; a++)
      for (int b2 = 0; b2 < g.K; b2++) {
        int idx = (oh * g.stride + a) * g.W + ow * g.stride + b2;
        float v = xs[idx];
        if (v > m || v != v) m = v, best = idx; /* NaN wins, as on the CPU and in PyTorch */
      }
    y[i] = m;
    arg[i] = best;
  }
}

lam_status cuda_maxpool_fwd(lam_ctx *ctx, lam_fmt f, const lam_pool_geom *g, int B, const void *xv, void *yv,
                            int32_t *arg) {
  cuda_state *st = cuda_st(ctx);
  if (f.nhwc) return nhwc_pool(ctx, f, 0, g, B, xv, yv, arg);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("maxpool_fwd");
  const float *x = (const float *)xv;
  float *y = (float *)yv;
  maxpool_fwd_kernel<<<blocks_for((size_t)B * g->C * g->OH * g->OW), NT, 0, st->stream>>>(*g, B, x, y, arg);
  LAUNCH_CHECK(st, "maxpool_fwd_kernel");
  return LAM_OK;
}

/* Overlapping windows (stride < K) can route two outputs to one input: atomicAdd. */
__global__ void maxpool_bwd_kernel(lam_pool_geom g, int B, const float *dy, const int32_t *arg, float *dx) {
  size_t total = (size_t)B * g.C * g.OH * g.OW;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    size_t bc = i / ((size_t)g.OW * g.OH);
    float *d = dx + bc * g.H * g.W + arg[i];
    if (g.stride >= g.K) *d += dy[i];
    else atomicAdd(d, dy[i]);
  }
}

lam_status cuda_maxpool_bwd(lam_ctx *ctx, lam_fmt f, const lam_pool_geom *g, int B, const void *dyv, const int32_t *arg,
                            void *dxv) {
  cuda_state *st = cuda_st(ctx);
  if (f.nhwc) return nhwc_pool(ctx, f, 1, g, B, dyv, dxv, (int32_t *)arg);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("maxpool_bwd");
  const float *dy = (const float *)dyv;
  float *dx = (float *)dxv;
  CUDA_TRY(cudaMemsetAsync(dx, 0, (size_t)B * g->C * g->H * g->W * sizeof(float), st->stream));
  maxpool_bwd_kernel<<<blocks_for((size_t)B * g->C * g->OH * g->OW), NT, 0, st->stream>>>(*g, B, dy, arg, dx);
  LAUNCH_CHECK(st, "maxpool_bwd_kernel");
  return LAM_OK;
}

/* ---- pooling and upsampling: one thread per output (forward) or per input (backward) ---- */

/* Thread per output (B*C, OH, OW): its window's sum in row order, over K*K, as the CPU twin. */
template <typename I> __global__ void avgpool_fwd_kernel(I n, lam_pool_geom g, const float *__restrict__ x,
                                                         float *__restrict__ y) {
  const float kk = (float)(g.K * g.K);
  GRID_STRIDE(I, i, n) {
    I ow = i % (I)g.OW, t = i / (I)g.OW, oh = t % (I)g.OH, bc = t / (I)g.OH;
    const float *w = x + (size_t)bc * g.H * g.W + (size_t)oh * g.stride * g.W + (size_t)ow * g.stride;
    float s = 0.0f;
    for (int a = 0; a < g.K; a++)
      for (int e = 0; e < g.K; e++) s += __ldg(w + a * g.W + e);
    y[i] = s / kk;
  }
}

static lam_status nchw_avgpool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *x, float *y) {
  cuda_state *st = cuda_st(ctx);
  size_t n = (size_t)B * g->C * g->OH * g->OW;
  LAUNCH_ELEMENTWISE(st, avgpool_fwd_kernel, n, *g, x, y);
  return LAM_OK;
}

/* The outputs o whose window [o * stride, o * stride + K) holds input i: [*lo, *hi] (as the CPU twin). */
__device__ inline void covering(int i, int K, int stride, int n_out, int *lo, int *hi) {
  int a = i - K + 1;
  *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
  *hi = i / stride;
  if (*hi > n_out - 1) *hi = n_out - 1;
}

/* Thread per input (B*C, H, W): the gradients of the windows that hold it, in row order, over K*K:
 * a gather, so no atomics where windows overlap. */
template <typename I> __global__ void avgpool_bwd_kernel(I n, lam_pool_geom g, const float *__restrict__ dy,
                                                         float *__restrict__ dx) {
  const float kk = (float)(g.K * g.K);
  GRID_STRIDE(I, i, n) {
    I w = i % (I)g.W, t = i / (I)g.W, h = t % (I)g.H, bc = t / (I)g.H;
    const float *d = dy + (size_t)bc * g.OH * g.OW;
    int oh0, oh1, ow0, ow1;
    covering((int)h, g.K, g.stride, g.OH, &oh0, &oh1);
    covering((int)w, g.K, g.stride, g.OW, &ow0, &ow1);
    float s = 0.0f;
    for (int oh = oh0; oh <= oh1; oh++)
      for (int ow = ow0; ow <= ow1; ow++) s += __ldg(d + oh * g.OW + ow);
    dx[i] = s / kk;
  }
}

/* Windows that do not overlap (stride = K, the usual pool): each input lies in at most one, found with
 * one division a coordinate (shifts for KT = 2, K fixed at compile time). Same value as the above. */
template <typename I, int KT> __global__ void avgpool_bwd_disjoint_kernel(I n, lam_pool_geom g, const float *__restrict__ dy,
                                                                         float *__restrict__ dx) {
  const int K = KT ? KT : g.K;
  const float kk = (float)(K * K);
  GRID_STRIDE(I, i, n) {
    I w = i % (I)g.W, t = i / (I)g.W, h = t % (I)g.H, bc = t / (I)g.H;
    int oh = (int)h / K, ow = (int)w / K;
    float s = 0.0f;
    if (oh < g.OH && ow < g.OW) s = __ldg(dy + ((size_t)bc * g.OH + oh) * g.OW + ow);
    dx[i] = s / kk;
  }
}

static lam_status nchw_avgpool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, float *dx) {
  cuda_state *st = cuda_st(ctx);
  size_t n = (size_t)B * g->C * g->H * g->W;
  if (g->stride == g->K && g->K == 2 && fits32(n)) {
    avgpool_bwd_disjoint_kernel<unsigned, 2><<<blocks_for(n), NT, 0, st->stream>>>((unsigned)n, *g, dy, dx);
    LAUNCH_CHECK(st, "avgpool_bwd_disjoint_kernel");
  } else if (g->stride == g->K && fits32(n)) {
    avgpool_bwd_disjoint_kernel<unsigned, 0><<<blocks_for(n), NT, 0, st->stream>>>((unsigned)n, *g, dy, dx);
    LAUNCH_CHECK(st, "avgpool_bwd_disjoint_kernel");
  } else {
    LAUNCH_ELEMENTWISE(st, avgpool_bwd_kernel, n, *g, dy, dx);
  }
  return LAM_OK;
}

/* Rows of P >= 32 values: a warp per row (coalesced), lanes strided, then shuffles; shorter rows: a
 * thread per row. Either way the sum over P (IEEE division, as the CPU twin's). */
__global__ void plane_mean_warp_kernel(size_t rows, int P, const float *__restrict__ x, float *__restrict__ y) {
  const int lane = threadIdx.x % 32;
  const size_t warps = (size_t)gridDim.x * (blockDim.x / 32);
  for (size_t r = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    const float *xs = x + r * P;
    float s = 0.0f;
    for (int p = lane; p < P; p += 32) s += __ldg(xs + p);
    for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) y[r] = s / (float)P;
  }
}

__global__ void plane_mean_thread_kernel(size_t rows, int P, const float *__restrict__ x, float *__restrict__ y) {
  for (size_t r = (size_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (size_t)gridDim.x * blockDim.x) {
    const float *xs = x + r * P;
    float s = 0.0f;
    for (int p = 0; p < P; p++) s += __ldg(xs + p);
    y[r] = s / (float)P;
  }
}

static lam_status nchw_plane_mean_fwd(lam_ctx *ctx, size_t rows, int P, const float *x, float *y) {
  cuda_state *st = cuda_st(ctx);
  if (P >= 32) {
    plane_mean_warp_kernel<<<blocks_for(rows * 32), NT, 0, st->stream>>>(rows, P, x, y);
    LAUNCH_CHECK(st, "plane_mean_warp_kernel");
  } else {
    plane_mean_thread_kernel<<<blocks_for(rows), NT, 0, st->stream>>>(rows, P, x, y);
    LAUNCH_CHECK(st, "plane_mean_thread_kernel");
  }
  return LAM_OK;
}

template <typename I, int V> __global__ void plane_mean_bwd_kernel(I n, I PV, int P, const float *__restrict__ dy,
                                                                   float *__restrict__ dx) {
  const float fp = (float)P;
  GRID_STRIDE(I, i, n) {
    float v[V];
    v[0] = __ldg(dy + i / PV) / fp;
#pragma unroll
    for (int q = 1; q < V; q++) v[q] = v[0];
    vstore<V>(dx, i, v);
  }
}

static lam_status nchw_plane_mean_bwd(lam_ctx *ctx, size_t rows, int P, const float *dy, float *dx) {
  cuda_state *st = cuda_st(ctx);
  size_t n = rows * P;
  LAUNCH_ROWWISE(st, plane_mean_bwd_kernel, P % 4 == 0 && aligned16(dx), n, P, P, dy, dx);
  return LAM_OK;
}

/* Thread per input (B*C, H, W): its F x F block of y (a warp's rows of the block are contiguous, so the
 * stores coalesce; FT = 2 fixes F at compile time). (v1 took a thread per output: four divisions each
 * made it compute-bound, 1.1 TB/s at batch 512 x 256 x 16 x 16 on the H200.) */
template <typename I, int FT> __global__ void upsample_fwd_kernel(I n, int H, int W, int F, const float *__restrict__ x,
                                                                  float *__restrict__ y) {
  const int f = FT ? FT : F;
  const size_t OW = (size_t)W * f;
  GRID_STRIDE(I, i, n) {
    I w = i % (I)W, t = i / (I)W, h = t % (I)H, bc = t / (I)H;
    const float v = __ldg(x + i);
    float *o = y + ((size_t)bc * H + h) * f * OW + (size_t)w * f;
#pragma unroll
    for (int a = 0; a < f; a++)
#pragma unroll
      for (int e = 0; e < f; e++) o[a * OW + e] = v;
  }
}

static lam_status nchw_upsample_fwd(lam_ctx *ctx, int B, int C, int H, int W, int F, const float *x, float *y) {
  cuda_state *st = cuda_st(ctx);
  size_t n = (size_t)B * C * H * W;
  if (F == 2 && fits32(n)) {
    upsample_fwd_kernel<unsigned, 2><<<blocks_for(n), NT, 0, st->stream>>>((unsigned)n, H, W, F, x, y);
  } else if (fits32(n)) {
    upsample_fwd_kernel<unsigned, 0><<<blocks_for(n), NT, 0, st->stream>>>((unsigned)n, H, W, F, x, y);
  } else {
    upsample_fwd_kernel<size_t, 0><<<blocks_for(n), NT, 0, st->stream>>>(n, H, W, F, x, y);
  }
  LAUNCH_CHECK(st, "upsample_fwd_kernel");
  return LAM_OK;
}

/* Thread per input (B*C, H, W): the sum of its F x F block of dy in row order, as the CPU twin. */
template <typename I> __global__ void upsample_bwd_kernel(I n, int H, int W, int F, const float *__restrict__ dy,
                                                          float *__restrict__ dx) {
  const size_t OW = (size_t)W * F;
  GRID_STRIDE(I, i, n) {
    I w = i % (I)W, t = i / (I)W, h = t % (I)H, bc = t / (I)H;
    const float *blk = dy + ((size_t)bc * H * F + (size_t)h * F) * OW + (size_t)w * F;
    float s = 0.0f;
    for (int a = 0; a < F; a++)
      for (int e = 0; e < F; e++) s += __ldg(blk + a * OW + e);
    dx[i] = s;
  }
}

static lam_status nchw_upsample_bwd(lam_ctx *ctx, int B, int C, int H, int W, int F, const float *dy, float *dx) {
  cuda_state *st = cuda_st(ctx);
  size_t n = (size_t)B * C * H * W;
  LAUNCH_ELEMENTWISE(st, upsample_bwd_kernel, n, H, W, F, dy, dx);
  return LAM_OK;
}

/* ---- pooling and upsampling: a thread per V channels of an output pixel (forward) or input pixel
 * (backward: a gather over the windows that hold it, so no atomics and no zeroing) ---- */

/* The outputs o whose window [o * stride, o * stride + K) holds input i: [*lo, *hi] (as the CPU twin). */
__device__ inline void nhwc_covering(int i, int K, int stride, int n_out, int *lo, int *hi) {
  int a = i - K + 1;
  *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
  *hi = i / stride;
  if (*hi > n_out - 1) *hi = n_out - 1;
}

/* Forward, a thread per output pixel's V channels: MAX, y = the max of each window, arg = the max's index
 * h*W + w in its plane (the first maximum in row order; NaN wins, as the NCHW kernel), at the output's place;
 * else y = the window's mean (summed in row order, as the CPU twin). */
template <typename T, int V, bool MAX>
__global__ void nhwc_pool_fwd_kernel(size_t n, lam_pool_geom g, const T *x, T *y, int32_t *arg) {
  const int CV = g.C / V;
  GRID_STRIDE(size_t, i, n) {
    const int cv = (int)(i % CV);
    const size_t pix = i / CV;
    const int ow = (int)(pix % g.OW), oh = (int)(pix / g.OW % g.OH);
    const size_t base = pix / ((size_t)g.OW * g.OH) * g.H * g.W;
    const int p0 = oh * g.stride * g.W + ow * g.stride;
    float m[V];
    int best[V];
    if (MAX) tload<T, V>(m, x, (base + p0) * CV + cv);
#pragma unroll
    for (int q = 0; q < V; q++) best[q] = p0, m[q] = MAX ? m[q] : 0.0f;
    for (int a = 0; a < g.K; a++)
      for (int e = 0; e < g.K; e++) {
        const int p = p0 + a * g.W + e;
        float v[V];
        tload<T, V>(v, x, (base + p) * CV + cv);
#pragma unroll
        for (int q = 0; q < V; q++) {
          if (!MAX) m[q] += v[q];
          else if (v[q] > m[q] || v[q] != v[q]) m[q] = v[q], best[q] = p;
        }
      }
    if (!MAX)
#pragma unroll
      for (int q = 0; q < V; q++) m[q] /= (float)(g.K * g.K);
    tstore<T, V>(y, i, m);
    if (MAX)
#pragma unroll
      for (int q = 0; q < V; q++) arg[i * V + q] = best[q];
  }
}

/* Backward, a thread per input pixel's V channels: the sum over the windows that hold it, in row order (as the
 * CPU twin adds them): MAX, the gradient of each window whose argmax it is; else each window's gradient / K^2. */
template <typename T, int V, bool MAX>
__global__ void nhwc_pool_bwd_kernel(size_t n, lam_pool_geom g, const T *dy, const int32_t *__restrict__ arg, T *dx) {
  const int CV = g.C / V;
  GRID_STRIDE(size_t, i, n) {
    const int cv = (int)(i % CV);
    const size_t pix = i / CV;
    const int w = (int)(pix % g.W), h = (int)(pix / g.W % g.H);
    const size_t b = pix / ((size_t)g.W * g.H);
    int oh0, oh1, ow0, ow1;
    nhwc_covering(h, g.K, g.stride, g.OH, &oh0, &oh1);
    nhwc_covering(w, g.K, g.stride, g.OW, &ow0, &ow1);
    const int self = h * g.W + w;
    float s[V];
#pragma unroll
    for (int q = 0; q < V; q++) s[q] = 0.0f;
    for (int oh = oh0; oh <= oh1; oh++)
      for (int ow = ow0; ow <= ow1; ow++) {
        const size_t o = ((b * g.OH + oh) * g.OW + ow) * CV + cv;
        float d[V];
        tload<T, V>(d, dy, o);
#pragma unroll
        for (int q = 0; q < V; q++)
          if (!MAX || arg[o * V + q] == self) s[q] += d[q];
      }
    if (!MAX)
#pragma unroll
      for (int q = 0; q < V; q++) s[q] /= (float)(g.K * g.K);
    tstore<T, V>(dx, i, s);
  }
}

template <typename T, int V>
static void pool_launch(cuda_state *st, int kind, const lam_pool_geom *g, int B, const void *in, void *out, int32_t *arg) {
  const size_t CV = (size_t)g->C / V;
  const size_t n_out = (size_t)B * g->OH * g->OW * CV, n_in = (size_t)B * g->H * g->W * CV;
  const T *i = (const T *)in;
  T *o = (T *)out;
  switch (kind) {
    case 0: nhwc_pool_fwd_kernel<T, V, true><<<blocks_for(n_out), NT, 0, st->stream>>>(n_out, *g, i, o, arg); break;
    case 1: nhwc_pool_bwd_kernel<T, V, true><<<blocks_for(n_in), NT, 0, st->stream>>>(n_in, *g, i, arg, o); break;
    case 2: nhwc_pool_fwd_kernel<T, V, false><<<blocks_for(n_out), NT, 0, st->stream>>>(n_out, *g, i, o, NULL); break;
    default: nhwc_pool_bwd_kernel<T, V, false><<<blocks_for(n_in), NT, 0, st->stream>>>(n_in, *g, i, NULL, o);
  }
}

/* kind: 0 maxpool_fwd, 1 maxpool_bwd (in = dy), 2 avgpool_fwd, 3 avgpool_bwd (in = dy). */
lam_status nhwc_pool(lam_ctx *ctx, lam_fmt f, int kind, const lam_pool_geom *g, int B, const void *in,
                                void *out, int32_t *arg) {
  cuda_state *st = cuda_st(ctx);
  if (B <= 0 || g->C <= 0) return LAM_OK;
  NHWC_DISPATCH(f, vec_ok(f.dt, g->C, in, out), pool_launch, st, kind, g, B, in, out, arg);
  LAUNCH_CHECK(st, "nhwc pooling kernel");
  return LAM_OK;
}

/* Global average pool: y (B, C) = the mean over the P pixels (in pixel order, as the CPU twin sums them in
 * double: here in float, P being small); backward: dx = dy / P everywhere. */
template <typename T, int V> __global__ void nhwc_gap_fwd_kernel(size_t n, int C, int P, const T *x, T *y) {
  const int CV = C / V;
  GRID_STRIDE(size_t, i, n) { /* i over (b, cv) */
    const size_t b = i / CV;
    const int cv = (int)(i % CV);
    float s[V];
#pragma unroll
    for (int q = 0; q < V; q++) s[q] = 0.0f;
    for (int p = 0; p < P; p++) {
      float v[V];
      tload<T, V>(v, x, (b * P + p) * CV + cv);
#pragma unroll
      for (int q = 0; q < V; q++) s[q] += v[q];
    }
#pragma unroll
    for (int q = 0; q < V; q++) s[q] /= (float)P;
    tstore<T, V>(y, i, s);
  }
}
template <typename T, int V> __global__ void nhwc_gap_bwd_kernel(size_t n, int C, int P, const T *dy, T *dx) {
  const int CV = C / V;
  GRID_STRIDE(size_t, i, n) { /* i over (b, p, cv) */
    const int cv = (int)(i % CV);
    const size_t b = i / CV / P;
    float v[V];
    tload<T, V>(v, dy, b * CV + cv);
#pragma unroll
    for (int q = 0; q < V; q++) v[q] /= (float)P;
    tstore<T, V>(dx, i, v);
  }
}
template <typename T, int V> static void gap_launch(cuda_state *st, int bwd, int B, int C, int P, const void *in, void *out) {
  if (bwd) {
    const size_t n = (size_t)B * P * (C / V);
    nhwc_gap_bwd_kernel<T, V><<<blocks_for(n), NT, 0, st->stream>>>(n, C, P, (const T *)in, (T *)out);
  } else {
    const size_t n = (size_t)B * (C / V);
    nhwc_gap_fwd_kernel<T, V><<<blocks_for(n), NT, 0, st->stream>>>(n, C, P, (const T *)in, (T *)out);
  }
}
lam_status nhwc_plane_mean(lam_ctx *ctx, lam_fmt f, int bwd, int B, int C, int P, const void *in, void *out) {
  cuda_state *st = cuda_st(ctx);
  if (B <= 0 || C <= 0 || P <= 0) return LAM_OK;
  NHWC_DISPATCH(f, vec_ok(f.dt, C, in, out), gap_launch, st, bwd, B, C, P, in, out);
  LAUNCH_CHECK(st, bwd ? "nhwc_gap_bwd_kernel" : "nhwc_gap_fwd_kernel");
  return LAM_OK;
}

/* Nearest upsampling by F: forward, a thread per output pixel's V channels; backward, per input pixel's, the
 * F x F block summed in row order (as the CPU twin). */
template <typename T, int V> __global__ void nhwc_upsample_fwd_kernel(size_t n, int C, int H, int W, int F, const T *x, T *y) {
  const int CV = C / V, OW = W * F, OH = H * F;
  GRID_STRIDE(size_t, i, n) {
    const int cv = (int)(i % CV);
    const size_t pix = i / CV;
    const int ow = (int)(pix % OW), oh = (int)(pix / OW % OH);
    const size_t b = pix / ((size_t)OW * OH);
    float v[V];
    tload<T, V>(v, x, ((b * H + oh / F) * W + ow / F) * CV + cv);
    tstore<T, V>(y, i, v);
  }
}
template <typename T, int V> __global__ void nhwc_upsample_bwd_kernel(size_t n, int C, int H, int W, int F, const T *dy, T *dx) {
  const int CV = C / V, OW = W * F;
  GRID_STRIDE(size_t, i, n) {
    const int cv = (int)(i % CV);
    const size_t pix = i / CV;
    const int w = (int)(pix % W), h = (int)(pix / W % H);
    const size_t b = pix / ((size_t)W * H);
    float s[V];
#pragma unroll
    for (int q = 0; q < V; q++) s[q] = 0.0f;
    for (int a = 0; a < F; a++)
      for (int e = 0; e < F; e++) {
        float d[V];
        tload<T, V>(d, dy, ((b * H * F + (size_t)h * F + a) * OW + (size_t)w * F + e) * CV + cv);
#pragma unroll
        for (int q = 0; q < V; q++) s[q] += d[q];
      }
    tstore<T, V>(dx, i, s);
  }
}
template <typename T, int V>
static void up_launch(cuda_state *st, int bwd, int B, int C, int H, int W, int F, const void *in, void *out) {
  if (bwd) {
    const size_t n = (size_t)B * H * W * (C / V);
    nhwc_upsample_bwd_kernel<T, V><<<blocks_for(n), NT, 0, st->stream>>>(n, C, H, W, F, (const T *)in, (T *)out);
  } else {
    const size_t n = (size_t)B * H * F * W * F * (C / V);
    nhwc_upsample_fwd_kernel<T, V><<<blocks_for(n), NT, 0, st->stream>>>(n, C, H, W, F, (const T *)in, (T *)out);
  }
}
lam_status nhwc_upsample(lam_ctx *ctx, lam_fmt f, int bwd, int B, int C, int H, int W, int F, const void *in,
                                    void *out) {
  cuda_state *st = cuda_st(ctx);
  if (B <= 0 || C <= 0) return LAM_OK;
  NHWC_DISPATCH(f, vec_ok(f.dt, C, in, out), up_launch, st, bwd, B, C, H, W, F, in, out);
  LAUNCH_CHECK(st, bwd ? "nhwc_upsample_bwd_kernel" : "nhwc_upsample_fwd_kernel");
  return LAM_OK;
}

/* Over a clip's frames (prims.h): a thread per pooled value (b, s), reading its T frames down the rows, so
 * consecutive threads read consecutive values of every frame. */
template <typename T>
__global__ void tpool_fwd_kernel(size_t n, int F, size_t S, int max, const T *__restrict__ x, T *__restrict__ y,
                                 uint8_t *__restrict__ arg) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const size_t b = i / S, s = i - b * S;
    const T *v = x + b * F * S + s;
    float acc = tget(v, 0);
    int best = 0;
    for (int t = 1; t < F; t++) {
      const float u = tget(v, (size_t)t * S);
      if (!max) acc += u;
      else if (u > acc || (u != u && acc == acc)) acc = u, best = t; /* as the CPU twin */
    }
    tput(y, i, max ? acc : acc / (float)F);
    if (max) arg[i] = (uint8_t)best;
  }
}
template <typename T>
__global__ void tpool_bwd_kernel(size_t n, int F, size_t S, int max, const T *__restrict__ dy,
                                 const uint8_t *__restrict__ arg, T *__restrict__ dx) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const size_t r = i / S, s = i - r * S, b = r / F, o = b * S + s; /* i: row r = b*F + t, value s */
    const int t = (int)(r - b * F);
    const float g = tget(dy, o);
    tput(dx, i, max ? (arg[o] == t ? g : 0.0f) : g / (float)F);
  }
}
lam_status cuda_tpool_fwd(lam_ctx *ctx, lam_fmt f, int B, int F, size_t S, int max, const void *x, void *y,
                          uint8_t *arg) {
  cuda_state *st = cuda_st(ctx);
  const size_t n = (size_t)B * S;
  LAM_DT_DISPATCH(f.dt, T, tpool_fwd_kernel<T><<<blocks_for(n), NT, 0, st->stream>>>(n, F, S, max, (const T *)x, (T *)y, arg));
  LAUNCH_CHECK(st, "tpool_fwd_kernel");
  return LAM_OK;
}
lam_status cuda_tpool_bwd(lam_ctx *ctx, lam_fmt f, int B, int F, size_t S, int max, const void *dy, const uint8_t *arg,
                          void *dx) {
  cuda_state *st = cuda_st(ctx);
  const size_t n = (size_t)B * F * S;
  LAM_DT_DISPATCH(f.dt, T, tpool_bwd_kernel<T><<<blocks_for(n), NT, 0, st->stream>>>(n, F, S, max, (const T *)dy, arg, (T *)dx));
  LAUNCH_CHECK(st, "tpool_bwd_kernel");
  return LAM_OK;
}


/* ---- the primitives by format: NCHW float32 runs the NCHW kernels above, NHWC the NHWC ones ---- */

lam_status cuda_avgpool_fwd(lam_ctx *ctx, lam_fmt f, const lam_pool_geom *g, int B, const void *x, void *y) {
  if (f.nhwc) return nhwc_pool(ctx, f, 2, g, B, x, y, NULL);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("avgpool_fwd");
  return nchw_avgpool_fwd(ctx, g, B, (const float *)x, (float *)y);
}
lam_status cuda_avgpool_bwd(lam_ctx *ctx, lam_fmt f, const lam_pool_geom *g, int B, const void *dy, void *dx) {
  if (f.nhwc) return nhwc_pool(ctx, f, 3, g, B, dy, dx, NULL);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("avgpool_bwd");
  return nchw_avgpool_bwd(ctx, g, B, (const float *)dy, (float *)dx);
}
lam_status cuda_plane_mean_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, void *y) {
  if (f.nhwc) return nhwc_plane_mean(ctx, f, 0, B, C, P, x, y);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("plane_mean_fwd");
  return nchw_plane_mean_fwd(ctx, (size_t)B * C, P, (const float *)x, (float *)y);
}
lam_status cuda_plane_mean_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *dy, void *dx) {
  if (f.nhwc) return nhwc_plane_mean(ctx, f, 1, B, C, P, dy, dx);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("plane_mean_bwd");
  return nchw_plane_mean_bwd(ctx, (size_t)B * C, P, (const float *)dy, (float *)dx);
}
lam_status cuda_upsample_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int H, int W, int F, const void *x, void *y) {
  if (f.nhwc) return nhwc_upsample(ctx, f, 0, B, C, H, W, F, x, y);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("upsample_fwd");
  return nchw_upsample_fwd(ctx, B, C, H, W, F, (const float *)x, (float *)y);
}
lam_status cuda_upsample_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int H, int W, int F, const void *dy, void *dx) {
  if (f.nhwc) return nhwc_upsample(ctx, f, 1, B, C, H, W, F, dy, dx);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("upsample_bwd");
  return nchw_upsample_bwd(ctx, B, C, H, W, F, (const float *)dy, (float *)dx);
}
