/* act.cu — the CUDA twins of the activation primitives (prims.h; CPU versions in cpu/act.c under the same
 * names): act_fwd and act_bwd, dropout_mask and mask_scale, in any element type, 16-byte vectors where the
 * pointers allow. */
#include <stdint.h>

#include "cuda.h"
#include "vec.cuh"
#include "../math/act.h"
#include "../math/hash.h"

/* The activations and their derivatives (act.h: the CPU twins' expressions), with ACT fixed at compile time. */
template <int ACT> __device__ inline float act_of(float v, float alpha) { return lam_act(ACT, alpha, v); }
/* dy * act'(.) from the output y (relu, leaky, tanh, sigmoid) or the input x (gelu). */
template <int ACT> __device__ inline float act_grad(float x, float y, float g, float alpha) {
  return lam_act_grad(ACT, alpha, x, y, g);
}

/* Thread per V values of type T (n counts groups of V: 16-byte vectors where the pointers allow, vec.cuh).
 * x and y may be one buffer: plain loads, no __restrict__. */
template <typename T, int ACT, int V> __global__ void act_fwd_kernel(float alpha, size_t n, const T *x, T *y) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float v[V];
    tload<T, V>(v, x, i);
#pragma unroll
    for (int q = 0; q < V; q++) v[q] = act_of<ACT>(v[q], alpha);
    tstore<T, V>(y, i, v);
  }
}

/* The backward reads x for gelu, y for the others (the one not needed may be NULL); dx may be dy. */
template <typename T, int ACT, int V>
__global__ void act_bwd_kernel(float alpha, size_t n, const T *x, const T *y, const T *dy, T *dx) {
  const T *src = ACT == LAM_ACT_GELU ? x : y;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float s[V], g[V];
    tload<T, V>(s, src, i);
    tload<T, V>(g, dy, i);
#pragma unroll
    for (int q = 0; q < V; q++) g[q] = act_grad<ACT>(s[q], s[q], g[q], alpha);
    tstore<T, V>(dx, i, g);
  }
}

template <typename T, int V>
static void act_fwd_launch(cuda_state *st, int act, float alpha, size_t n, const void *xv, void *yv) {
  const T *x = (const T *)xv;
  T *y = (T *)yv;
  unsigned g = blocks_for(n);
  switch (act) {
    case LAM_ACT_RELU: act_fwd_kernel<T, LAM_ACT_RELU, V><<<g, NT, 0, st->stream>>>(alpha, n, x, y); break;
    case LAM_ACT_LEAKY: act_fwd_kernel<T, LAM_ACT_LEAKY, V><<<g, NT, 0, st->stream>>>(alpha, n, x, y); break;
    case LAM_ACT_TANH: act_fwd_kernel<T, LAM_ACT_TANH, V><<<g, NT, 0, st->stream>>>(alpha, n, x, y); break;
    case LAM_ACT_GELU: act_fwd_kernel<T, LAM_ACT_GELU, V><<<g, NT, 0, st->stream>>>(alpha, n, x, y); break;
    default: act_fwd_kernel<T, LAM_ACT_SIGMOID, V><<<g, NT, 0, st->stream>>>(alpha, n, x, y);
  }
}

template <typename T, int V>
static void act_bwd_launch(cuda_state *st, int act, float alpha, size_t n, const void *xv, const void *yv,
                           const void *dyv, void *dxv) {
  const T *x = (const T *)xv, *y = (const T *)yv, *dy = (const T *)dyv;
  T *dx = (T *)dxv;
  unsigned g = blocks_for(n);
  switch (act) {
    case LAM_ACT_RELU: act_bwd_kernel<T, LAM_ACT_RELU, V><<<g, NT, 0, st->stream>>>(alpha, n, x, y, dy, dx); break;
    case LAM_ACT_LEAKY: act_bwd_kernel<T, LAM_ACT_LEAKY, V><<<g, NT, 0, st->stream>>>(alpha, n, x, y, dy, dx); break;
    case LAM_ACT_TANH: act_bwd_kernel<T, LAM_ACT_TANH, V><<<g, NT, 0, st->stream>>>(alpha, n, x, y, dy, dx); break;
    case LAM_ACT_GELU: act_bwd_kernel<T, LAM_ACT_GELU, V><<<g, NT, 0, st->stream>>>(alpha, n, x, y, dy, dx); break;
    default: act_bwd_kernel<T, LAM_ACT_SIGMOID, V><<<g, NT, 0, st->stream>>>(alpha, n, x, y, dy, dx);
  }
}

/* n values of type dt in vectors of 16 bytes where n and the pointers allow: the vector's width, or 1. */
static int elementwise_width(int dt, size_t n, const void *a, const void *b, const void *c = NULL,
                             const void *d = NULL) {
  const int V = (int)(16 / lam_dt_size(dt));
  return n % V == 0 && aligned16(a) && aligned16(b) && (!c || aligned16(c)) && (!d || aligned16(d)) ? V : 1;
}

lam_status cuda_act_fwd(lam_ctx *ctx, lam_fmt f, int act, float alpha, size_t n, const void *x, void *y) {
  cuda_state *st = cuda_st(ctx);
  const int V = elementwise_width(f.dt, n, x, y);
  LAM_DT_DISPATCH(f.dt, T, {
    if (V > 1) act_fwd_launch<T, lam_vw<T>::value>(st, act, alpha, n / V, x, y);
    else act_fwd_launch<T, 1>(st, act, alpha, n, x, y);
  });
  LAUNCH_CHECK(st, "act_fwd_kernel");
  return LAM_OK;
}

lam_status cuda_act_bwd(lam_ctx *ctx, lam_fmt f, int act, float alpha, size_t n, const void *x, const void *y,
                        const void *dy, void *dx) {
  cuda_state *st = cuda_st(ctx);
  const int V = elementwise_width(f.dt, n, act == LAM_ACT_GELU ? x : y, dy, dx);
  LAM_DT_DISPATCH(f.dt, T, {
    if (V > 1) act_bwd_launch<T, lam_vw<T>::value>(st, act, alpha, n / V, x, y, dy, dx);
    else act_bwd_launch<T, 1>(st, act, alpha, n, x, y, dy, dx);
  });
  LAUNCH_CHECK(st, "act_bwd_kernel");
  return LAM_OK;
}

/* The counter is read here, on the device: a replayed graph draws the mask of the step it replays. The
 * grid is capped so that each thread draws many values from the key it mixed once. */
#define DROPOUT_BLOCKS 2048
__global__ void dropout_mask_kernel(size_t n, float p, uint64_t seed, const int32_t *ctr, uint8_t *mask) {
  const uint64_t key = lam_draw_key(seed, ctr ? *ctr : 0);
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    mask[i] = lam_draw_uniform(key, i) >= p;
}

lam_status cuda_dropout_mask(lam_ctx *ctx, size_t n, float p, uint64_t seed, const int32_t *ctr, uint8_t *mask) {
  cuda_state *st = cuda_st(ctx);
  unsigned blocks = blocks_for(n);
  dropout_mask_kernel<<<blocks < DROPOUT_BLOCKS ? blocks : DROPOUT_BLOCKS, NT, 0, st->stream>>>(n, p, seed, ctr, mask);
  LAUNCH_CHECK(st, "dropout_mask_kernel");
  return LAM_OK;
}

/* Thread per V values of type T (n counts groups of V); x may be y. */
template <typename T, int V>
__global__ void mask_scale_kernel(size_t n, const T *x, const uint8_t *__restrict__ mask, float scale, T *y) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float v[V];
    tload<T, V>(v, x, i);
#pragma unroll
    for (int q = 0; q < V; q++) v[q] = mask[i * V + q] ? v[q] * scale : 0.0f;
    tstore<T, V>(y, i, v);
  }
}

lam_status cuda_mask_scale(lam_ctx *ctx, lam_fmt f, size_t n, const void *x, const uint8_t *mask, float scale, void *y) {
  cuda_state *st = cuda_st(ctx);
  const int V = (int)(16 / lam_dt_size(f.dt));
  const bool vec = n % V == 0 && aligned16(x) && aligned16(y);
  LAM_DT_DISPATCH(f.dt, T, {
    if (vec) mask_scale_kernel<T, lam_vw<T>::value><<<blocks_for(n / V), NT, 0, st->stream>>>(n / V, (const T *)x, mask, scale, (T *)y);
    else mask_scale_kernel<T, 1><<<blocks_for(n), NT, 0, st->stream>>>(n, (const T *)x, mask, scale, (T *)y);
  });
  LAUNCH_CHECK(st, "mask_scale_kernel");
  return LAM_OK;
}
