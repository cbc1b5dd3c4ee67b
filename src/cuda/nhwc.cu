/* nhwc.cu — the CUDA kernels of the primitives on NHWC activations (prims.h: lam_fmt), float32, bfloat16 or half:
 * per-channel bias (the pooling's are in pool.cu, BatchNorm's in norm.cu, the format conversion in layout.cu). The primitives in nn.cu and nn_ops.cu call
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
#include "reduce.cuh"
#include "vec.cuh"

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
