/* nn_ops.cu — the CUDA twins of the primitives in cpu/nn_ops.c (prims.h): per-channel bias (pooling in
 * pool.cu, BatchNorm in norm.cu; the per-channel sums in reduce.cuh). Everything is queued on the context's stream. */
#include <stdint.h>

#include "cuda.h"
#include "kernels.cuh"
#include "../math/act.h"
#include "vec.cuh"
#include "bn.cuh"
#include "reduce.cuh"

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

/* ---- the primitives by format: NCHW float32 runs the kernels above, NHWC those of nhwc.cu (a flat tensor,
 * P = 1, lies the same in both) ---- */

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
