/* nn.cu — the CUDA twins of the nn primitives (internal.h; CPU versions in cpu/nn.c under the same
 * names). Everything is queued on the context's stream; nothing here waits for the device. GEMMs go to
 * cuBLAS (row-major calls mapped onto its column-major API); the rest are simple one-thread-per-output
 * kernels — the fused versions are issue #5's work. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdio.h>

#include "cuda.h"

#define NT 256

static unsigned blocks_for(size_t n) {
  size_t b = (n + NT - 1) / NT;
  if (b > 1u << 30) b = 1u << 30;
  return (unsigned)(b ? b : 1);
}

#define LAUNCH_CHECK(st, name) CUDA_LAUNCH_TRY((st), (st)->stream, name)

static const char *cublas_err(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
  }
}
#define CUBLAS_TRY(expr)                                                                                   \
  do {                                                                                                     \
    cublasStatus_t cs_ = (expr);                                                                           \
    if (cs_ != CUBLAS_STATUS_SUCCESS)                                                                      \
      return lam_fail_at(LAM_ERR_CUDA, __FILE__, __LINE__, "%s failed: %s", #expr, cublas_err(cs_));       \
  } while (0)

/* cuBLAS's workspace, given to it rather than left to it, so GEMMs can be captured in a CUDA graph. */
#define CUBLAS_WORKSPACE ((size_t)32 << 20)

static cublasMath_t math_mode(int precision) {
  return precision == LAM_PRECISION_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
}

/* The cuBLAS handle is made at the first matrix product (creating it takes a while), on the context's
 * stream, in the context's precision. */
static lam_status handle(lam_ctx *ctx, cublasHandle_t *h) {
  cuda_state *st = cuda_st(ctx);
  if (!st->cublas) {
    cublasHandle_t hh;
    CUBLAS_TRY(cublasCreate(&hh));
    st->cublas = hh;
    CUBLAS_TRY(cublasSetStream(hh, st->stream));
    CUDA_TRY(cudaMalloc(&st->cublas_ws, CUBLAS_WORKSPACE));
    CUBLAS_TRY(cublasSetWorkspace(hh, st->cublas_ws, CUBLAS_WORKSPACE));
    CUBLAS_TRY(cublasSetMathMode(hh, math_mode(ctx->precision)));
  }
  *h = (cublasHandle_t)st->cublas;
  return LAM_OK;
}

lam_status cuda_set_precision(lam_ctx *ctx, int p) {
  cuda_state *st = cuda_st(ctx);
  if (st->cublas) CUBLAS_TRY(cublasSetMathMode((cublasHandle_t)st->cublas, math_mode(p)));
  return LAM_OK; /* a handle made later takes ctx->precision */
}

void cuda_nn_destroy(cuda_state *st) {
  if (st->cublas) cublasDestroy((cublasHandle_t)st->cublas);
  st->cublas = NULL;
  if (st->cublas_ws) cudaFree(st->cublas_ws);
  st->cublas_ws = NULL;
}

lam_status cuda_gemm(lam_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
  cublasHandle_t h;
  LAM_TRY(handle(ctx, &h));
  /* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands. */
  CUBLAS_TRY(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb, A,
                         lda, &beta, C, ldc));
  return LAM_OK;
}

lam_status cuda_zero(lam_ctx *ctx, void *p, size_t bytes) {
  CUDA_TRY(cudaMemsetAsync(p, 0, bytes, cuda_st(ctx)->stream));
  return LAM_OK;
}

/* One thread per (input channel, column) of col (C*K*K rows, B*P columns): it works out its (b, oh, ow)
 * once and writes its channel's K*K rows; consecutive threads take consecutive columns, so each row's
 * writes coalesce and the reads of x are consecutive too. (v1 took one element per thread and paid six
 * divisions each; v2 one column per thread, too few threads at small batches.) */
__global__ void im2col_kernel(lam_conv_geom g, int B, const float *x, float *col) {
  const int P = g.OH * g.OW, KK = g.K * g.K;
  const size_t ncols = (size_t)B * P, total = ncols * g.C;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    size_t j = i % ncols;
    int c = (int)(i / ncols), b = (int)(j / P), p = (int)(j % P), oh = p / g.OW, ow = p % g.OW;
    int ih0 = oh * g.stride - g.pad, iw0 = ow * g.stride - g.pad;
    const float *xc = x + ((size_t)b * g.C + c) * g.H * g.W;
    float *dst = col + (size_t)c * KK * ncols + j;
    for (int ki = 0; ki < g.K; ki++) {
      int ih = ih0 + ki;
      bool row_in = ih >= 0 && ih < g.H;
      for (int kj = 0; kj < g.K; kj++, dst += ncols) {
        int iw = iw0 + kj;
        *dst = row_in && iw >= 0 && iw < g.W ? __ldg(xc + (size_t)ih * g.W + iw) : 0.0f;
      }
    }
  }
}

lam_status cuda_im2col(lam_ctx *ctx, const lam_conv_geom *g, int B, const float *x, float *col) {
  cuda_state *st = cuda_st(ctx);
  im2col_kernel<<<blocks_for((size_t)B * g->OH * g->OW * g->C), NT, 0, st->stream>>>(*g, B, x, col);
  LAUNCH_CHECK(st, "im2col_kernel");
  return LAM_OK;
}

/* One thread per input element: sums every column entry that came from it (a gather, so no atomics
 * and the same order every run). */
__global__ void col2im_kernel(lam_conv_geom g, int B, const float *col, float *dx) {
  const int P = g.OH * g.OW, KK = g.K * g.K;
  const size_t ncols = (size_t)B * P, total = (size_t)B * g.C * g.H * g.W;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int iw = (int)(i % g.W), ih = (int)(i / g.W % g.H), c = (int)(i / ((size_t)g.W * g.H) % g.C);
    int b = (int)(i / ((size_t)g.W * g.H * g.C));
    float sum = 0.0f;
    if (g.stride == 1) { /* the usual case, without the divisions */
      const float *cb = col + (size_t)c * KK * ncols + (size_t)b * P;
      for (int ki = 0; ki < g.K; ki++) {
        int oh = ih + g.pad - ki;
        if (oh < 0 || oh >= g.OH) continue;
        for (int kj = 0; kj < g.K; kj++) {
          int ow = iw + g.pad - kj;
          if (ow >= 0 && ow < g.OW) sum += cb[(size_t)(ki * g.K + kj) * ncols + oh * g.OW + ow];
        }
      }
      dx[i] += sum;
      continue;
    }
    for (int ki = 0; ki < g.K; ki++) {
      int t = ih + g.pad - ki;
      if (t < 0 || t % g.stride) continue;
      int oh = t / g.stride;
      if (oh >= g.OH) continue;
      for (int kj = 0; kj < g.K; kj++) {
        int u = iw + g.pad - kj;
        if (u < 0 || u % g.stride) continue;
        int ow = u / g.stride;
        if (ow >= g.OW) continue;
        sum += col[((size_t)c * KK + ki * g.K + kj) * ncols + (size_t)b * P + oh * g.OW + ow];
      }
    }
    dx[i] += sum;
  }
}

lam_status cuda_col2im(lam_ctx *ctx, const lam_conv_geom *g, int B, const float *col, float *dx) {
  cuda_state *st = cuda_st(ctx);
  size_t total = (size_t)B * g->C * g->H * g->W;
  col2im_kernel<<<blocks_for(total), NT, 0, st->stream>>>(*g, B, col, dx);
  LAUNCH_CHECK(st, "col2im_kernel");
  return LAM_OK;
}

__global__ void cbp_to_bcp_kernel(int B, int C, int P, const float *src, const float *bias, float *dst) {
  size_t total = (size_t)B * C * P;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int p = (int)(i % P), c = (int)(i / P % C), b = (int)(i / ((size_t)P * C));
    dst[i] = src[(size_t)c * B * P + (size_t)b * P + p] + (bias ? bias[c] : 0.0f);
  }
}

lam_status cuda_cbp_to_bcp(lam_ctx *ctx, int B, int C, int P, const float *src, const float *bias, float *dst) {
  cuda_state *st = cuda_st(ctx);
  cbp_to_bcp_kernel<<<blocks_for((size_t)B * C * P), NT, 0, st->stream>>>(B, C, P, src, bias, dst);
  LAUNCH_CHECK(st, "cbp_to_bcp_kernel");
  return LAM_OK;
}

__global__ void bcp_to_cbp_kernel(int B, int C, int P, const float *src, float *dst) {
  size_t total = (size_t)B * C * P;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int p = (int)(i % P), c = (int)(i / P % C), b = (int)(i / ((size_t)P * C));
    dst[(size_t)c * B * P + (size_t)b * P + p] = src[i];
  }
}

/* The sum of a range of a row, by one block: strided over the threads, then a tree in shared memory. */
__device__ float block_range_sum(const float *r, int n) {
  __shared__ float part[NT];
  float s = 0.0f;
  for (int j = threadIdx.x; j < n; j += NT) s += r[j];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = NT / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  return part[0];
}

/* One block per row: the sum of a row of (rows, cols), added to out[row]. */
__global__ void row_sum_kernel(int cols, const float *src, float *out) {
  float s = block_range_sum(src + (size_t)blockIdx.x * cols, cols);
  if (threadIdx.x == 0) out[blockIdx.x] += s;
}

/* Few long rows (a conv's bias gradient: 64 rows of B*P): block (k, row) sums chunk k of its row into
 * part (row, k); then one thread per row adds the chunks up in order. Deterministic, like the above. */
__global__ void row_sum_part_kernel(int cols, int chunk, const float *src, float *part) {
  int c0 = blockIdx.x * chunk, n = cols - c0 < chunk ? cols - c0 : chunk;
  float s = block_range_sum(src + (size_t)blockIdx.y * cols + c0, n);
  if (threadIdx.x == 0) part[(size_t)blockIdx.y * gridDim.x + blockIdx.x] = s;
}

__global__ void row_sum_final_kernel(int rows, int nchunks, const float *part, float *out) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float s = 0.0f;
  for (int k = 0; k < nchunks; k++) s += part[(size_t)r * nchunks + k];
  out[r] += s;
}

/* out[r] += the sum of row r of src (rows, cols): one block a row when there are enough rows (or no
 * room for the partial sums), else chunks of rows over many blocks. Every caller goes through here, so
 * the plain and the fused bias gradients are summed alike. */
static lam_status row_sum(cuda_state *st, int rows, int cols, const float *src, float *out) {
  int nchunks = (cols + ROW_SUM_CHUNK - 1) / ROW_SUM_CHUNK;
  if (nchunks > ROW_SUM_MAX_CHUNKS) nchunks = ROW_SUM_MAX_CHUNKS;
  if (rows >= 128 || nchunks < 2 || (size_t)rows * nchunks > ROW_SUM_PART_FLOATS) {
    row_sum_kernel<<<rows, NT, 0, st->stream>>>(cols, src, out);
    LAUNCH_CHECK(st, "row_sum_kernel");
    return LAM_OK;
  }
  int chunk = (cols + nchunks - 1) / nchunks;
  nchunks = (cols + chunk - 1) / chunk;
  row_sum_part_kernel<<<dim3(nchunks, rows), NT, 0, st->stream>>>(cols, chunk, src, st->rowsum_part);
  LAUNCH_CHECK(st, "row_sum_part_kernel");
  row_sum_final_kernel<<<(rows + NT - 1) / NT, NT, 0, st->stream>>>(rows, nchunks, st->rowsum_part, out);
  LAUNCH_CHECK(st, "row_sum_final_kernel");
  return LAM_OK;
}

lam_status cuda_bcp_to_cbp(lam_ctx *ctx, int B, int C, int P, const float *src, float *dst, float *bias_grad) {
  cuda_state *st = cuda_st(ctx);
  bcp_to_cbp_kernel<<<blocks_for((size_t)B * C * P), NT, 0, st->stream>>>(B, C, P, src, dst);
  LAUNCH_CHECK(st, "bcp_to_cbp_kernel");
  if (bias_grad) {
    LAM_TRY(row_sum(st, C, B * P, dst, bias_grad));
  }
  return LAM_OK;
}

__global__ void add_bias_kernel(int rows, int cols, float *y, const float *b) {
  size_t total = (size_t)rows * cols;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
    y[i] += b[i % cols];
}

lam_status cuda_add_bias(lam_ctx *ctx, int rows, int cols, float *y, const float *b) {
  cuda_state *st = cuda_st(ctx);
  add_bias_kernel<<<blocks_for((size_t)rows * cols), NT, 0, st->stream>>>(rows, cols, y, b);
  LAUNCH_CHECK(st, "add_bias_kernel");
  return LAM_OK;
}

/* One thread per column: the column's sum over the rows, added to db. */
__global__ void col_sum_kernel(int rows, int cols, const float *dy, float *db) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.0f;
  for (int r = 0; r < rows; r++) s += dy[(size_t)r * cols + c];
  db[c] += s;
}

lam_status cuda_bias_grad(lam_ctx *ctx, int rows, int cols, const float *dy, float *db) {
  cuda_state *st = cuda_st(ctx);
  col_sum_kernel<<<blocks_for((size_t)cols), NT, 0, st->stream>>>(rows, cols, dy, db);
  LAUNCH_CHECK(st, "col_sum_kernel");
  return LAM_OK;
}

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

lam_status cuda_maxpool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *x, float *y, int32_t *arg) {
  cuda_state *st = cuda_st(ctx);
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

lam_status cuda_maxpool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, const int32_t *arg, float *dx) {
  cuda_state *st = cuda_st(ctx);
  CUDA_TRY(cudaMemsetAsync(dx, 0, (size_t)B * g->C * g->H * g->W * sizeof(float), st->stream));
  maxpool_bwd_kernel<<<blocks_for((size_t)B * g->C * g->OH * g->OW), NT, 0, st->stream>>>(*g, B, dy, arg, dx);
  LAUNCH_CHECK(st, "maxpool_bwd_kernel");
  return LAM_OK;
}

__global__ void act_fwd_kernel(int act, size_t n, const float *x, float *y) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float v = x[i];
    y[i] = act == LAM_ACT_RELU ? (v > 0.0f ? v : 0.0f) : act == LAM_ACT_TANH ? tanhf(v) : 1.0f / (1.0f + expf(-v));
  }
}

__global__ void act_bwd_kernel(int act, size_t n, const float *y, const float *dy, float *dx) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float v = y[i];
    dx[i] = act == LAM_ACT_RELU ? (v > 0.0f ? dy[i] : 0.0f) : act == LAM_ACT_TANH ? dy[i] * (1.0f - v * v) : dy[i] * v * (1.0f - v);
  }
}

lam_status cuda_act_fwd(lam_ctx *ctx, int act, size_t n, const float *x, float *y) {
  cuda_state *st = cuda_st(ctx);
  act_fwd_kernel<<<blocks_for(n), NT, 0, st->stream>>>(act, n, x, y);
  LAUNCH_CHECK(st, "act_fwd_kernel");
  return LAM_OK;
}

lam_status cuda_act_bwd(lam_ctx *ctx, int act, size_t n, const float *y, const float *dy, float *dx) {
  cuda_state *st = cuda_st(ctx);
  act_bwd_kernel<<<blocks_for(n), NT, 0, st->stream>>>(act, n, y, dy, dx);
  LAUNCH_CHECK(st, "act_bwd_kernel");
  return LAM_OK;
}

/* One thread per sample (the classes are few); the batch's sums go to stats with one atomic each per
 * block after a shared-memory reduction. */
__global__ void xent_kernel(int B, int C, const float *logits, const uint8_t *labels, float *dlogits, float scale,
                            float *stats, uint8_t *pred) {
  __shared__ float sl[NT], sc[NT];
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  float loss = 0.0f, correct = 0.0f;
  if (b < B) {
    const float *l = logits + (size_t)b * C;
    int am = 0;
    for (int c = 1; c < C; c++)
      if (l[c] > l[am]) am = c;
    float mx = l[am], sum = 0.0f;
    for (int c = 0; c < C; c++) sum += expf(l[c] - mx);
    int y = labels[b];
    loss = (mx - l[y]) + logf(sum); /* as the CPU twin: differences from the max are exact */
    correct = am == y ? 1.0f : 0.0f;
    if (pred) pred[b] = (uint8_t)am;
    if (dlogits) {
      float inv = 1.0f / sum;
      for (int c = 0; c < C; c++) dlogits[(size_t)b * C + c] = scale * (expf(l[c] - mx) * inv - (c == y ? 1.0f : 0.0f));
    }
  }
  sl[threadIdx.x] = loss;
  sc[threadIdx.x] = correct;
  __syncthreads();
  for (int w = NT / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) sl[threadIdx.x] += sl[threadIdx.x + w], sc[threadIdx.x] += sc[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(&stats[0], sl[0]);
    atomicAdd(&stats[1], sc[0]);
    int nb = B - (int)(blockIdx.x * blockDim.x);
    atomicAdd(&stats[2], (float)(nb < NT ? nb : NT));
  }
}

lam_status cuda_xent(lam_ctx *ctx, int B, int C, const float *logits, const uint8_t *labels, float *dlogits, float scale,
                     float *stats, uint8_t *pred) {
  cuda_state *st = cuda_st(ctx);
  xent_kernel<<<(B + NT - 1) / NT, NT, 0, st->stream>>>(B, C, logits, labels, dlogits, scale, stats, pred);
  LAUNCH_CHECK(st, "xent_kernel");
  return LAM_OK;
}

/* The uint8 images of the batch, normalized on the GPU: they cross PCIe (once, at upload) as bytes. */
__global__ void gather_kernel(int B, size_t sample, const uint8_t *images, const uint8_t *labels, const int32_t *idx,
                              float a, float c, float *x, uint8_t *y) {
  size_t total = (size_t)B * sample;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    size_t b = i / sample;
    x[i] = (float)images[(size_t)idx[b] * sample + i % sample] * a + c;
    if (i % sample == 0) y[b] = labels[idx[b]];
  }
}

lam_status cuda_gather(lam_ctx *ctx, int B, size_t sample, const uint8_t *images, const uint8_t *labels,
                       const int32_t *idx, float mean, float std, float *x, uint8_t *y) {
  cuda_state *st = cuda_st(ctx);
  gather_kernel<<<blocks_for((size_t)B * sample), NT, 0, st->stream>>>(B, sample, images, labels, idx,
                                                                      1.0f / (255.0f * std), -mean / std, x, y);
  LAUNCH_CHECK(st, "gather_kernel");
  return LAM_OK;
}

__global__ void adam_kernel(size_t n, float *p, const float *g, float *m, float *v, float lr, float b1, float b2,
                            float eps, float wd, int decoupled, float step_size, float bc2_sqrt) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float gi = g[i], pi = p[i];
    if (decoupled) pi *= 1.0f - lr * wd;
    else gi += wd * pi;
    float mi = b1 * m[i] + (1.0f - b1) * gi;
    float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

lam_status cuda_adam(lam_ctx *ctx, size_t n, float *p, const float *g, float *m, float *v, float lr, float b1, float b2,
                     float eps, float wd, int decoupled, long step) {
  cuda_state *st = cuda_st(ctx);
  /* The same scalars as the CPU twin, computed the same way (double, then float). */
  float step_size = (float)(lr / (1.0 - pow(b1, (double)step)));
  float bc2_sqrt = (float)sqrt(1.0 - pow(b2, (double)step));
  adam_kernel<<<blocks_for(n), NT, 0, st->stream>>>(n, p, g, m, v, lr, b1, b2, eps, wd, decoupled, step_size, bc2_sqrt);
  LAUNCH_CHECK(st, "adam_kernel");
  return LAM_OK;
}

__global__ void sgd_kernel(size_t n, float *p, const float *g, float *buf, float lr, float momentum, float wd, int first) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float gi = g[i] + wd * p[i];
    if (momentum != 0.0f) {
      float bi = first ? gi : momentum * buf[i] + gi;
      buf[i] = bi;
      gi = bi;
    }
    p[i] -= lr * gi;
  }
}

lam_status cuda_sgd(lam_ctx *ctx, size_t n, float *p, const float *g, float *buf, float lr, float momentum, float wd,
                    int first) {
  cuda_state *st = cuda_st(ctx);
  sgd_kernel<<<blocks_for(n), NT, 0, st->stream>>>(n, p, g, buf, lr, momentum, wd, first);
  LAUNCH_CHECK(st, "sgd_kernel");
  return LAM_OK;
}

__global__ void backprop_step_kernel(size_t n, const float *err, const float *in, float lr, float *w) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float gradient = err[i] * in[i];
    w[i] -= lr * gradient;
  }
}

lam_status cuda_backprop_step(lam_ctx *ctx, size_t n, const float *err, const float *in, float lr, float *w) {
  cuda_state *st = cuda_st(ctx);
  backprop_step_kernel<<<blocks_for(n), NT, 0, st->stream>>>(n, err, in, lr, w);
  LAUNCH_CHECK(st, "backprop_step_kernel");
  return LAM_OK;
}

/* Per-channel scale and offset, by value: x * a[c] + b[c] = (x / 255 - mean[c]) / std[c]. */
typedef struct norm_coef {
  float a[LAM_NORMALIZE_MAX_CHANNELS], b[LAM_NORMALIZE_MAX_CHANNELS];
} norm_coef;

static __device__ inline void store(float *p, float v) { *p = v; }
static __device__ inline void store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* One thread per output element (NCHW), so the writes coalesce; an NHWC read is strided by c. */
template <typename T>
__global__ void normalize_images_kernel(size_t total, int c, size_t plane, int nhwc, const uint8_t *in, norm_coef k,
                                        T *out) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    size_t p = i % plane, img = i / plane / c;
    int ch = (int)(i / plane % c);
    size_t src = nhwc ? (img * plane + p) * c + ch : i;
    store(out + i, __fmaf_rn((float)in[src], k.a[ch], k.b[ch]));
  }
}

lam_status cuda_normalize_images(lam_ctx *ctx, size_t n, int c, int h, int w, int nhwc, const uint8_t *in,
                                 const float *mean, const float *std, int bf16, void *out) {
  cuda_state *st = cuda_st(ctx);
  norm_coef k;
  for (int i = 0; i < c; i++) k.a[i] = 1.0f / (255.0f * std[i]), k.b[i] = -mean[i] / std[i]; /* as the CPU twin */
  size_t plane = (size_t)h * w, total = n * plane * c;
  if (bf16)
    normalize_images_kernel<<<blocks_for(total), NT, 0, st->stream>>>(total, c, plane, nhwc, in, k, (__nv_bfloat16 *)out);
  else
    normalize_images_kernel<<<blocks_for(total), NT, 0, st->stream>>>(total, c, plane, nhwc, in, k, (float *)out);
  LAUNCH_CHECK(st, "normalize_images_kernel");
  return LAM_OK;
}

/* ---- fused conv -> relu -> maxpool ---- */

/* One thread per pooled output (B, C, OH, OW): the K x K window of G (C, B*H*W) plus the bias, its
 * first maximum (NaN wins, as maxpool_fwd), relu'd. */
__global__ void conv_pool_fwd_kernel(lam_pool_geom g, int B, const float *G, const float *bias, float *y, int32_t *arg) {
  size_t total = (size_t)B * g.C * g.OH * g.OW, P = (size_t)g.H * g.W;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int ow = (int)(i % g.OW), oh = (int)(i / g.OW % g.OH), c = (int)(i / ((size_t)g.OW * g.OH) % g.C);
    size_t b = i / ((size_t)g.OW * g.OH * g.C);
    const float *plane = G + (size_t)c * B * P + b * P;
    float bc = bias[c];
    int best = oh * g.stride * g.W + ow * g.stride;
    float m = plane[best] + bc;
    for (int a = 0; a < g.K; a++)
      for (int e = 0; e < g.K; e++) {
        int idx = (oh * g.stride + a) * g.W + ow * g.stride + e;
        float v = plane[idx] + bc;
        if (v > m || v != v) m = v, best = idx;
      }
    y[i] = m > 0 ? m : 0.0f;
    arg[i] = best;
  }
}

lam_status cuda_conv_pool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *G, const float *bias, float *y,
                              int32_t *arg) {
  cuda_state *st = cuda_st(ctx);
  conv_pool_fwd_kernel<<<blocks_for((size_t)B * g->C * g->OH * g->OW), NT, 0, st->stream>>>(*g, B, G, bias, y, arg);
  LAUNCH_CHECK(st, "conv_pool_fwd_kernel");
  return LAM_OK;
}

/* One thread per element of dG (C, B*H*W), written in order: the gradient reaches a conv output only
 * where it is its window's argmax and the pooled value passed the relu. */
__global__ void conv_pool_bwd_kernel(lam_pool_geom g, int B, const float *dy, const float *y, const int32_t *arg,
                                     float *dG) {
  size_t P = (size_t)g.H * g.W, total = (size_t)g.C * B * P;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    size_t p = i % P, b = i / P % B;
    int c = (int)(i / (P * B));
    int h = (int)(p / g.W), w = (int)(p % g.W), ph = h / g.K, pw = w / g.K;
    float v = 0.0f;
    if (ph < g.OH && pw < g.OW) {
      size_t k = ((b * g.C + c) * g.OH + ph) * g.OW + pw;
      if (arg[k] == (int32_t)p && y[k] > 0) v = dy[k];
    }
    dG[i] = v;
  }
}

lam_status cuda_conv_pool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, const float *y,
                              const int32_t *arg, float *dG, float *db) {
  cuda_state *st = cuda_st(ctx);
  size_t P = (size_t)g->H * g->W;
  conv_pool_bwd_kernel<<<blocks_for((size_t)g->C * B * P), NT, 0, st->stream>>>(*g, B, dy, y, arg, dG);
  LAUNCH_CHECK(st, "conv_pool_bwd_kernel");
  LAM_TRY(row_sum(st, g->C, B * (int)P, dG, db)); /* as bcp_to_cbp's bias gradient */
  return LAM_OK;
}

/* ---- the direct first-layer block: conv -> relu -> maxpool without im2col and GEMMs ---- */

/* CT, KT > 0: the conv's C and K fixed at compile time (the loops unroll, the index arithmetic folds);
 * 0: read from cg. */
template <int CT, int KT>
__device__ inline float direct_conv_at(const lam_conv_geom &cg, const float *xb, const float *w, float bias, int h,
                                       int wc) {
  const int C = CT ? CT : cg.C, K = KT ? KT : cg.K;
  float acc = bias;
#pragma unroll
  for (int c = 0; c < C; c++)
#pragma unroll
    for (int kh = 0; kh < K; kh++) {
      int ih = h * cg.stride - cg.pad + kh;
#pragma unroll
      for (int kw = 0; kw < K; kw++) {
        int iw = wc * cg.stride - cg.pad + kw;
        float v = ih >= 0 && ih < cg.H && iw >= 0 && iw < cg.W ? __ldg(xb + ((size_t)c * cg.H + ih) * cg.W + iw) : 0.0f;
        acc = fmaf(v, __ldg(w + (c * K + kh) * K + kw), acc);
      }
    }
  return acc;
}

/* One thread per pooled output (B, OC, OH, OW): its window's conv outputs computed from x directly. */
template <int CT, int KT>
__global__ void conv_pool_direct_fwd_kernel(lam_conv_geom cg, lam_pool_geom pg, int B, const float *x, const float *W,
                                            const float *bias, float *y, int32_t *arg) {
  size_t total = (size_t)B * pg.C * pg.OH * pg.OW;
  int taps = (CT ? CT : cg.C) * (KT ? KT : cg.K) * (KT ? KT : cg.K);
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int pw = (int)(i % pg.OW), ph = (int)(i / pg.OW % pg.OH), oc = (int)(i / ((size_t)pg.OW * pg.OH) % pg.C);
    size_t b = i / ((size_t)pg.OW * pg.OH * pg.C);
    const float *xb = x + b * cg.C * cg.H * cg.W, *w = W + (size_t)oc * taps;
    float bc = __ldg(bias + oc);
    int h0 = ph * pg.stride, w0 = pw * pg.stride, best = h0 * pg.W + w0;
    float m = direct_conv_at<CT, KT>(cg, xb, w, bc, h0, w0);
    for (int a = 0; a < pg.K; a++)
      for (int e = 0; e < pg.K; e++) {
        if (!a && !e) continue;
        float v = direct_conv_at<CT, KT>(cg, xb, w, bc, h0 + a, w0 + e);
        if (v > m || v != v) m = v, best = (h0 + a) * pg.W + w0 + e;
      }
    y[i] = m > 0 ? m : 0.0f;
    arg[i] = best;
  }
}

/* The MNIST-sized first layer (C = 1, K = 3, stride 1, no padding, pool 2): one thread per pooled
 * position computes every output channel from one 4 x 4 patch of the input held in registers, the
 * weights in shared memory: the input is read once instead of once per channel. The conv values and
 * their order of summation are the generic kernel's, so the result is the same bit for bit. */
#define DIRECT_MAX_OC 256
__global__ void conv_pool_direct_fwd_c1k3_kernel(lam_conv_geom cg, lam_pool_geom pg, int B, const float *x,
                                                 const float *W, const float *bias, float *y, int32_t *arg) {
  __shared__ float w_s[DIRECT_MAX_OC * 9], b_s[DIRECT_MAX_OC];
  for (int i = threadIdx.x; i < pg.C * 9; i += blockDim.x) w_s[i] = W[i];
  for (int i = threadIdx.x; i < pg.C; i += blockDim.x) b_s[i] = bias[i];
  __syncthreads();
  const size_t OP = (size_t)pg.OH * pg.OW, total = (size_t)B * OP;
  for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < total; q += (size_t)gridDim.x * blockDim.x) {
    size_t b = q / OP, k = q % OP;
    int ph = (int)(k / pg.OW), pw = (int)(k % pg.OW), h0 = 2 * ph, w0 = 2 * pw;
    const float *xb = x + b * cg.H * cg.W + (size_t)h0 * cg.W + w0;
    float v[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int c = 0; c < 4; c++) v[r][c] = __ldg(xb + r * cg.W + c);
    for (int oc = 0; oc < pg.C; oc++) {
      const float *w = w_s + oc * 9;
      float m = 0.0f;
      int best = 0;
#pragma unroll
      for (int a = 0; a < 2; a++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float acc = b_s[oc];
#pragma unroll
          for (int kh = 0; kh < 3; kh++)
#pragma unroll
            for (int kw = 0; kw < 3; kw++) acc = fmaf(v[a + kh][e + kw], w[kh * 3 + kw], acc);
          int idx = (h0 + a) * pg.W + w0 + e;
          if ((a == 0 && e == 0) || acc > m || acc != acc) m = acc, best = idx; /* first maximum, NaN wins */
        }
      size_t o = (b * pg.C + oc) * OP + k;
      y[o] = m > 0 ? m : 0.0f;
      arg[o] = best;
    }
  }
}

lam_status cuda_conv_pool_direct_fwd(lam_ctx *ctx, const lam_conv_geom *cg, const lam_pool_geom *pg, int B,
                                     const float *x, const float *W, const float *bias, float *y, int32_t *arg) {
  cuda_state *st = cuda_st(ctx);
  unsigned blocks = blocks_for((size_t)B * pg->C * pg->OH * pg->OW);
  if (cg->C == 1 && cg->K == 3 && cg->stride == 1 && cg->pad == 0 && pg->K == 2 && pg->stride == 2 &&
      pg->C <= DIRECT_MAX_OC) {
    conv_pool_direct_fwd_c1k3_kernel<<<blocks_for((size_t)B * pg->OH * pg->OW), NT, 0, st->stream>>>(*cg, *pg, B, x, W,
                                                                                                  bias, y, arg);
    LAUNCH_CHECK(st, "conv_pool_direct_fwd_c1k3_kernel");
    return LAM_OK;
  }
  if (cg->C == 1 && cg->K == 3) /* the MNIST-sized first layer, unrolled */
    conv_pool_direct_fwd_kernel<1, 3><<<blocks, NT, 0, st->stream>>>(*cg, *pg, B, x, W, bias, y, arg);
  else
    conv_pool_direct_fwd_kernel<0, 0><<<blocks, NT, 0, st->stream>>>(*cg, *pg, B, x, W, bias, y, arg);
  LAUNCH_CHECK(st, "conv_pool_direct_fwd_kernel");
  return LAM_OK;
}

/* Block (chunk, oc): the pooled outputs [chunk * CHUNK, +CHUNK) of channel oc (flattened over b and the
 * pooled plane) whose value passed the relu add g * x(tap) to each tap's sum and g to the bias's; the
 * block's sums go to work (oc, chunk, taps + 1), reduced in a fixed order. */
template <int CT, int KT>
__global__ void conv_pool_direct_bwd_kernel(lam_conv_geom cg, lam_pool_geom pg, int B, const float *x, const float *dy,
                                            const float *y, const int32_t *arg, float *work) {
  const int K = KT ? KT : cg.K, taps = (CT ? CT : cg.C) * K * K, oc = blockIdx.y, nchunks = gridDim.x;
  const size_t OP = (size_t)pg.OH * pg.OW, n = (size_t)B * OP;
  float acc[LAM_DIRECT_TAPS + 1];
#pragma unroll
  for (int t = 0; t <= LAM_DIRECT_TAPS; t++) acc[t] = 0.0f;
  size_t q0 = (size_t)blockIdx.x * LAM_DIRECT_CHUNK, q1 = q0 + LAM_DIRECT_CHUNK < n ? q0 + LAM_DIRECT_CHUNK : n;
  for (size_t q = q0 + threadIdx.x; q < q1; q += blockDim.x) {
    size_t b = q / OP, k = q % OP, o = (b * pg.C + oc) * OP + k;
    float yv = y[o];
    if (!(yv > 0)) continue;
    float g = dy[o];
    int a = arg[o], h = a / pg.W, wc = a % pg.W;
    const float *xb = x + b * cg.C * cg.H * cg.W;
    acc[LAM_DIRECT_TAPS] += g;
#pragma unroll
    for (int t = 0; t < LAM_DIRECT_TAPS; t++) {
      if (t < taps) {
        int c = t / (K * K), kh = t / K % K, kw = t % K;
        int ih = h * cg.stride - cg.pad + kh, iw = wc * cg.stride - cg.pad + kw;
        if (ih >= 0 && ih < cg.H && iw >= 0 && iw < cg.W) acc[t] = fmaf(g, __ldg(xb + ((size_t)c * cg.H + ih) * cg.W + iw), acc[t]);
      }
    }
  }
  __shared__ float part[NT / 32][LAM_DIRECT_TAPS + 1];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int t = 0; t <= LAM_DIRECT_TAPS; t++) {
    float v = acc[t];
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) part[warp][t] = v;
  }
  __syncthreads();
  if ((int)threadIdx.x <= taps) { /* taps + 1 sums: the taps, then the bias (slot LAM_DIRECT_TAPS) */
    int t = (int)threadIdx.x == taps ? LAM_DIRECT_TAPS : (int)threadIdx.x;
    float s = 0.0f;
    for (int w = 0; w < NT / 32; w++) s += part[w][t];
    work[((size_t)oc * nchunks + blockIdx.x) * (taps + 1) + threadIdx.x] = s;
  }
}

/* One thread per (oc, tap or bias): the blocks' sums in chunk order, added to the gradients. */
__global__ void direct_bwd_reduce_kernel(int OC, int taps, int nchunks, const float *work, float *dW, float *db) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= OC * (taps + 1)) return;
  int oc = i / (taps + 1), t = i % (taps + 1);
  float s = 0.0f;
  for (int k = 0; k < nchunks; k++) s += work[((size_t)oc * nchunks + k) * (taps + 1) + t];
  if (t < taps) dW[(size_t)oc * taps + t] += s;
  else db[oc] += s;
}

lam_status cuda_conv_pool_direct_bwd(lam_ctx *ctx, const lam_conv_geom *cg, const lam_pool_geom *pg, int B,
                                     const float *x, const float *dy, const float *y, const int32_t *arg, float *dW,
                                     float *db, float *work) {
  cuda_state *st = cuda_st(ctx);
  int taps = cg->C * cg->K * cg->K;
  size_t n = (size_t)B * pg->OH * pg->OW;
  int nchunks = (int)((n + LAM_DIRECT_CHUNK - 1) / LAM_DIRECT_CHUNK);
  if (cg->C == 1 && cg->K == 3)
    conv_pool_direct_bwd_kernel<1, 3><<<dim3(nchunks, pg->C), NT, 0, st->stream>>>(*cg, *pg, B, x, dy, y, arg, work);
  else
    conv_pool_direct_bwd_kernel<0, 0><<<dim3(nchunks, pg->C), NT, 0, st->stream>>>(*cg, *pg, B, x, dy, y, arg, work);
  LAUNCH_CHECK(st, "conv_pool_direct_bwd_kernel");
  int outs = pg->C * (taps + 1);
  direct_bwd_reduce_kernel<<<(outs + NT - 1) / NT, NT, 0, st->stream>>>(pg->C, taps, nchunks, work, dW, db);
  LAUNCH_CHECK(st, "direct_bwd_reduce_kernel");
  return LAM_OK;
}
