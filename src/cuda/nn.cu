/* nn.cu — the CUDA twins of the nn primitives (prims.h; CPU versions in cpu/nn.c under the same
 * names). Everything is queued on the context's stream; nothing here waits for the device. GEMMs go to
 * cuBLAS (row-major calls mapped onto its column-major API); the conv -> relu -> maxpool block's kernels
 * are lamina's own (NHWC twins in nhwc.cu, cuDNN's convs in conv.cu). */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "cuda.h"
#include "../math/act.h"
#include "kernels.cuh"
#include "vec.cuh"

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
/* cuBLAS is loaded at the first matrix product, not with liblamina: linked, it made every process that
 * loads lamina (each CLI command, `import lamina`) map cuBLAS and cuBLASLt (600 MB of libraries) and run
 * their initializers before main() — 0.4 s and 210 MB of memory on the CPU machines, for `lamina --help`
 * too. The soname is tried first (LD_LIBRARY_PATH, the loader's cache), then the toolkit's folder that
 * the build found. */
#define CUBLAS_STR2(x) #x
#define CUBLAS_STR(x) CUBLAS_STR2(x)
#define CUBLAS_SONAME "libcublas.so." CUBLAS_STR(CUBLAS_VER_MAJOR)
static struct {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  decltype(&cublasSetMathMode) set_math_mode;
  decltype(&cublasSgemm_v2) sgemm;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                            const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t); /* C++ overloads it */
} cb;
static char cb_error[600];
static pthread_once_t cb_once = PTHREAD_ONCE_INIT;

static void cb_load(void) {
  void *lib = cuda_dlopen(CUBLAS_SONAME);
  if (!lib) {
    snprintf(cb_error, sizeof cb_error,
             "cannot load cuBLAS (%s), which matrix products on CUDA need: %s; install the CUDA toolkit's cuBLAS, or "
             "add the folder that holds it to LD_LIBRARY_PATH",
             CUBLAS_SONAME, dlerror());
    return;
  }
  const char *missing = NULL;
#define CB_SYM(field, name) \
  if (!(*(void **)&cb.field = dlsym(lib, name)) && !missing) missing = name;
  CB_SYM(create, "cublasCreate_v2")
  CB_SYM(destroy, "cublasDestroy_v2")
  CB_SYM(set_stream, "cublasSetStream_v2")
  CB_SYM(set_workspace, "cublasSetWorkspace_v2")
  CB_SYM(set_math_mode, "cublasSetMathMode")
  CB_SYM(sgemm, "cublasSgemm_v2")
  CB_SYM(gemm_ex, "cublasGemmEx")
#undef CB_SYM
  if (missing)
    snprintf(cb_error, sizeof cb_error, "%s has no %s: lamina was built against cuBLAS %d.%d; install that version",
             CUBLAS_SONAME, missing, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR);
}

static lam_status cublas_load(void) {
  pthread_once(&cb_once, cb_load);
  return cb_error[0] ? LAM_FAIL(LAM_ERR_CUDA, "%s", cb_error) : LAM_OK;
}

#define CUBLAS_TRY(expr)                                                                                   \
  do {                                                                                                     \
    cublasStatus_t cs_ = (expr);                                                                           \
    if (cs_ != CUBLAS_STATUS_SUCCESS)                                                                      \
      return lam_fail_at(LAM_ERR_CUDA, __FILE__, __LINE__, "%s failed: %s", #expr, cublas_err(cs_));       \
  } while (0)

/* cuBLAS's workspace, given to it rather than left to it, so GEMMs can be captured in a CUDA graph. */
#define CUBLAS_WORKSPACE ((size_t)32 << 20)

/* bf16 and fp16 need no mode: the layers round their operands themselves and call gemm_half (cublasGemmEx). */
static cublasMath_t math_mode(int precision) {
  return precision == LAM_PRECISION_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
}

/* The cuBLAS handle is made at the first matrix product (creating it takes a while), on the context's
 * stream, in the context's precision. */
static lam_status handle(lam_ctx *ctx, cublasHandle_t *h) {
  cuda_state *st = cuda_st(ctx);
  if (!st->cublas) {
    LAM_TRY(cublas_load());
    cublasHandle_t hh;
    CUBLAS_TRY(cb.create(&hh));
    st->cublas = hh;
    CUBLAS_TRY(cb.set_stream(hh, st->stream));
    CUDA_TRY(cudaMalloc(&st->cublas_ws, CUBLAS_WORKSPACE));
    /* cuBLAS's split-K GEMMs store partial sums here through TMA and sum them in another kernel: for initcheck */
    cuda_mark_written(st->stream, st->cublas_ws, CUBLAS_WORKSPACE);
    CUBLAS_TRY(cb.set_workspace(hh, st->cublas_ws, CUBLAS_WORKSPACE));
    CUBLAS_TRY(cb.set_math_mode(hh, math_mode(ctx->precision)));
  }
  *h = (cublasHandle_t)st->cublas;
  return LAM_OK;
}

lam_status cuda_set_precision(lam_ctx *ctx, int p) {
  cuda_state *st = cuda_st(ctx);
  if (st->cublas) CUBLAS_TRY(cb.set_math_mode((cublasHandle_t)st->cublas, math_mode(p)));
  return LAM_OK; /* a handle made later takes ctx->precision */
}

void cuda_nn_destroy(cuda_state *st) {
  if (st->cublas) cb.destroy((cublasHandle_t)st->cublas); /* a handle means cuBLAS was loaded */
  st->cublas = NULL;
  if (st->cublas_ws) cudaFree(st->cublas_ws);
  st->cublas_ws = NULL;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: both GEMMs swap the operands. */
static cublasOperation_t op(int transposed) { return transposed ? CUBLAS_OP_T : CUBLAS_OP_N; }

/* The M rows of N elements (row pitch ldc) a GEMM wrote, for compute-sanitizer's initcheck (cuda.h). */
static void mark_c(lam_ctx *ctx, int M, int N, int ldc, const void *C, size_t elem) {
  if (M > 0 && N > 0) cuda_mark_written(cuda_st(ctx)->stream, C, ((size_t)(M - 1) * ldc + N) * elem);
}

lam_status cuda_gemm(lam_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
  cublasHandle_t h;
  LAM_TRY(handle(ctx, &h));
  CUBLAS_TRY(cb.sgemm(h, op(tb), op(ta), N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
  mark_c(ctx, M, N, ldc, C, sizeof(float));
  return LAM_OK;
}

lam_status cuda_gemm_half(lam_ctx *ctx, int dt, int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                          int lda, const uint16_t *B, int ldb, float beta, void *C, int c_half, int ldc) {
  if (c_half && beta != 0.0f) return LAM_FAIL(LAM_ERR_INVALID_ARG, "gemm_half: a 16-bit C takes beta 0, not %g", beta);
  const cudaDataType_t t = dt == LAM_DT_F16 ? CUDA_R_16F : CUDA_R_16BF;
  cublasHandle_t h;
  LAM_TRY(handle(ctx, &h));
  CUBLAS_TRY(cb.gemm_ex(h, op(tb), op(ta), N, M, K, &alpha, B, t, ldb, A, t, lda, &beta, C, c_half ? t : CUDA_R_32F, ldc,
                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  mark_c(ctx, M, N, ldc, C, c_half ? 2 : sizeof(float));
  return LAM_OK;
}

template <typename T> __global__ void to_half_kernel(size_t n, const float *__restrict__ src, T *__restrict__ dst) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    dst[i] = tfrom<T>(src[i]);
}

lam_status cuda_to_half(lam_ctx *ctx, int dt, size_t n, const float *src, uint16_t *dst) {
  cuda_state *st = cuda_st(ctx);
  if (dt == LAM_DT_F16) to_half_kernel<<<blocks_for(n), NT, 0, st->stream>>>(n, src, (lam_f16 *)dst);
  else to_half_kernel<<<blocks_for(n), NT, 0, st->stream>>>(n, src, (lam_bf16 *)dst);
  LAUNCH_CHECK(st, "to_half_kernel");
  return LAM_OK;
}

static dim3 grid_2d(size_t n, int y) {
  size_t b = (n + NT - 1) / NT;
  return dim3((unsigned)(b < 65535 * 16 ? (b ? b : 1) : 65535 * 16), (unsigned)y);
}

/* Stores and loads of float or 16-bit data, computed in fp32. */
template <typename T> __device__ inline void put(T *p, float v) { *p = tfrom<T>(v); }
__device__ inline float get(const float *p) { return __ldg(p); }
__device__ inline float get(const lam_bf16 *p) { return __bfloat162float(__ldg(p)); }
__device__ inline float get(const lam_f16 *p) { return __half2float(__ldg(p)); }

/* Threads for one image plane of P elements: a multiple of 32, at most NT (the rest loop). */
static unsigned plane_threads(size_t P) {
  size_t t = (P + 31) / 32 * 32;
  return (unsigned)(t < NT ? t : NT);
}

/* A grid of (sample, channel) planes: B in gridDim.x (any int fits), C in gridDim.y. */
static lam_status check_planes(const char *what, int C) {
  if (C > 65535)
    return lam_fail_at(LAM_ERR_UNSUPPORTED, __FILE__, __LINE__, "%s: %d channels is beyond this kernel's grid (65535)",
                       what, C);
  return LAM_OK;
}

/* Block row c, one thread per column j of channel c's K*K rows of col: it works out its (b, oh, ow)
 * once and writes K*K entries, consecutive threads consecutive columns, so each row's writes coalesce.
 * KT > 0 fixes K at compile time: all K*K loads are issued before the first store (v3 loaded and
 * stored in turn, and with a run-time K each store waited for its load: latency-bound, 33 us at batch
 * 512 on the H200). (v1 took one element per thread and paid six divisions each; v2 one column per
 * thread, too few threads at small batches.) A grid of (sample, channel) planes with two divisions a
 * thread, as col2im has, was slower here: 28.6 against 23.5 us at batch 512 in fp32. */
template <int KT, typename T>
__global__ void im2col_kernel(lam_conv_geom g, int B, const float *__restrict__ x, T *__restrict__ col) {
  const int K = KT ? KT : g.K, c = blockIdx.y;
  const unsigned P = (unsigned)(g.OH * g.OW), ncols = (unsigned)B * P;
  for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < ncols; j += gridDim.x * blockDim.x) {
    unsigned b = j / P, p = j % P;
    int oh = (int)p / g.OW, ow = (int)p % g.OW, ih0 = oh * g.stride - g.pad, iw0 = ow * g.stride - g.pad;
    const float *xc = x + ((size_t)b * g.C + c) * g.H * g.W;
    T *dst = col + (size_t)c * K * K * ncols + j;
    if (KT) {
      float v[KT ? KT * KT : 1];
#pragma unroll
      for (int t = 0; t < (KT ? KT * KT : 1); t++) {
        int ih = ih0 + t / K, iw = iw0 + t % K;
        v[t] = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W ? __ldg(xc + ih * g.W + iw) : 0.0f;
      }
#pragma unroll
      for (int t = 0; t < (KT ? KT * KT : 1); t++) put(dst + (size_t)t * ncols, v[t]);
    } else {
      for (int ki = 0; ki < K; ki++) {
        int ih = ih0 + ki;
        bool row_in = ih >= 0 && ih < g.H;
        for (int kj = 0; kj < K; kj++, dst += ncols) {
          int iw = iw0 + kj;
          put(dst, row_in && iw >= 0 && iw < g.W ? __ldg(xc + ih * g.W + iw) : 0.0f);
        }
      }
    }
  }
}

template <typename T> static void im2col_launch(cuda_state *st, const lam_conv_geom *g, int B, const float *x, T *col) {
  dim3 grid = grid_2d((size_t)B * g->OH * g->OW, g->C);
  if (g->K == 3) im2col_kernel<3, T><<<grid, NT, 0, st->stream>>>(*g, B, x, col);
  else im2col_kernel<0, T><<<grid, NT, 0, st->stream>>>(*g, B, x, col);
}

lam_status cuda_im2col(lam_ctx *ctx, const lam_conv_geom *g, int B, const float *x, void *col, int dt) {
  cuda_state *st = cuda_st(ctx);
  LAM_TRY(check_grid("im2col", (size_t)B * g->OH * g->OW, g->C));
  LAM_DT_DISPATCH(dt, T, im2col_launch(st, g, B, x, (T *)col));
  LAUNCH_CHECK(st, "im2col_kernel");
  return LAM_OK;
}

/* Block (b, c): sample b's channel c, one thread per input element (two divisions each): the sum of
 * every column entry that came from it (a gather: no atomics, the same order every run), written (or,
 * with acc, added: the caller never zeroes dx first). Stride 1 with KT > 0: the K*K loads unrolled and in
 * flight together. (v1 had a run-time K, so each load waited for the one before: 68 us at batch 512 on
 * the H200; v2 fixed K but took four divisions a thread over a (channel, b*H*W) grid: 33 us.) */
template <int KT, typename T>
__global__ void col2im_kernel(lam_conv_geom g, int B, const T *__restrict__ col, int acc, float *__restrict__ dx) {
  const int K = KT ? KT : g.K, c = blockIdx.y, P = g.OH * g.OW, HW = g.H * g.W;
  const unsigned b = blockIdx.x;
  const size_t ncols = (size_t)B * P;
  const T *cb = col + (size_t)c * K * K * ncols + (size_t)b * P;
  float *out = dx + ((size_t)b * g.C + c) * HW;
  for (int r = threadIdx.x; r < HW; r += blockDim.x) {
    int ih = r / g.W, iw = r % g.W;
    float sum = 0.0f;
    if (g.stride == 1) { /* the usual case, without the divisions */
#pragma unroll
      for (int ki = 0; ki < K; ki++) {
        int oh = ih + g.pad - ki;
#pragma unroll
        for (int kj = 0; kj < K; kj++) {
          int ow = iw + g.pad - kj;
          if (oh >= 0 && oh < g.OH && ow >= 0 && ow < g.OW) sum += get(cb + (size_t)(ki * K + kj) * ncols + oh * g.OW + ow);
        }
      }
    } else {
      for (int ki = 0; ki < K; ki++) {
        int t = ih + g.pad - ki;
        if (t < 0 || t % g.stride) continue;
        int oh = t / g.stride;
        if (oh >= g.OH) continue;
        for (int kj = 0; kj < K; kj++) {
          int u = iw + g.pad - kj;
          if (u < 0 || u % g.stride) continue;
          int ow = u / g.stride;
          if (ow < g.OW) sum += get(cb + (size_t)(ki * K + kj) * ncols + oh * g.OW + ow);
        }
      }
    }
    out[r] = acc ? out[r] + sum : sum;
  }
}

template <typename T>
static void col2im_launch(cuda_state *st, const lam_conv_geom *g, int B, const T *col, int acc, float *dx) {
  dim3 grid(B, g->C);
  unsigned nt = plane_threads((size_t)g->H * g->W);
  if (g->K == 3 && g->stride == 1) col2im_kernel<3, T><<<grid, nt, 0, st->stream>>>(*g, B, col, acc, dx);
  else col2im_kernel<0, T><<<grid, nt, 0, st->stream>>>(*g, B, col, acc, dx);
}

lam_status cuda_col2im(lam_ctx *ctx, const lam_conv_geom *g, int B, const void *col, int dt, int accumulate, float *dx) {
  cuda_state *st = cuda_st(ctx);
  LAM_TRY(check_planes("col2im", g->C));
  LAM_DT_DISPATCH(dt, T, col2im_launch(st, g, B, (const T *)col, accumulate, dx));
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
template <typename T> __device__ float block_range_sum(const T *r, int n) {
  __shared__ float part[NT];
  float s = 0.0f;
  for (int j = threadIdx.x; j < n; j += NT) s += get(r + j);
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = NT / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  return part[0];
}

/* One block per row: the sum of a row of (rows, cols), added to out[row]. */
template <typename T> __global__ void row_sum_kernel(int cols, const T *src, float *out) {
  float s = block_range_sum(src + (size_t)blockIdx.x * cols, cols);
  if (threadIdx.x == 0) out[blockIdx.x] += s;
}

/* Few long rows (a conv's bias gradient: 64 rows of B*P): block (k, row) sums chunk k of its row into
 * part (row, k); then one thread per row adds the chunks up in order. Deterministic, like the above. */
template <typename T> __global__ void row_sum_part_kernel(int cols, int chunk, const T *src, float *part) {
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
template <typename T> static lam_status row_sum(cuda_state *st, int rows, int cols, const T *src, float *out) {
  int nchunks = (cols + ROW_SUM_CHUNK - 1) / ROW_SUM_CHUNK;
  if (nchunks > ROW_SUM_MAX_CHUNKS) nchunks = ROW_SUM_MAX_CHUNKS;
  if (rows >= 128 || nchunks < 2 || (size_t)rows * nchunks > ROW_SUM_PART_FLOATS) {
    row_sum_kernel<T><<<rows, NT, 0, st->stream>>>(cols, src, out);
    LAUNCH_CHECK(st, "row_sum_kernel");
    return LAM_OK;
  }
  int chunk = (cols + nchunks - 1) / nchunks;
  nchunks = (cols + chunk - 1) / chunk;
  row_sum_part_kernel<T><<<dim3(nchunks, rows), NT, 0, st->stream>>>(cols, chunk, src, st->rowsum_part);
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

/* Block of 32 columns x COLSUM_RG row groups: thread (tx, ty) sums rows ty, ty + RG, ... of column
 * bx * 32 + tx (coalesced across tx), then the groups' sums are added in order: the same result every
 * run. (v1 was one thread per column over every row: for a dense layer's 10 outputs, 10 threads walking
 * 512 rows, 16 us at batch 512 on the H200.) */
#define COLSUM_RG 32
__global__ void col_sum_kernel(int rows, int cols, const float *__restrict__ dy, float *__restrict__ db) {
  __shared__ float part[COLSUM_RG][33];
  int c = blockIdx.x * 32 + threadIdx.x;
  float s = 0.0f;
  if (c < cols)
    for (int r = threadIdx.y; r < rows; r += COLSUM_RG) s += __ldg(dy + (size_t)r * cols + c);
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float t = 0.0f;
    for (int k = 0; k < COLSUM_RG; k++) t += part[k][threadIdx.x];
    db[c] += t;
  }
}

lam_status cuda_bias_grad(lam_ctx *ctx, int rows, int cols, const float *dy, float *db) {
  cuda_state *st = cuda_st(ctx);
  col_sum_kernel<<<(cols + 31) / 32, dim3(32, COLSUM_RG), 0, st->stream>>>(rows, cols, dy, db);
  LAUNCH_CHECK(st, "col_sum_kernel");
  return LAM_OK;
}

/* ---- fused conv -> relu -> maxpool ---- */

/* Block row c, one thread per pooled output (b, ph, pw) of channel c: the K x K window of G (C, B*H*W)
 * plus the bias, its first maximum (NaN wins, as maxpool_fwd), relu'd. PK > 0 fixes the window at
 * compile time, so its loads are in flight together (v1 had a run-time K, 64-bit index arithmetic and
 * one load at a time: 13 us at batch 512 on the H200). */
template <int PK>
__global__ void conv_pool_fwd_kernel(lam_pool_geom g, int B, const float *__restrict__ G, const float *__restrict__ bias,
                                     float *__restrict__ y, int32_t *__restrict__ arg) {
  const int K = PK ? PK : g.K, c = blockIdx.y;
  const unsigned OP = (unsigned)(g.OH * g.OW), HW = (unsigned)(g.H * g.W), n = (unsigned)B * OP;
  const float bc = bias ? __ldg(bias + c) : 0.0f; /* + 0 leaves every value (and the max and relu) as it is */
  for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
    unsigned b = j / OP, k = j % OP;
    int oh = (int)k / g.OW, ow = (int)k % g.OW;
    const float *plane = G + ((size_t)c * B + b) * HW;
    int best = oh * g.stride * g.W + ow * g.stride;
    float v[PK ? PK * PK : 1];
    if (PK) {
#pragma unroll
      for (int t = 0; t < (PK ? PK * PK : 1); t++) v[t] = __ldg(plane + best + (t / K) * g.W + t % K);
    }
    float m = (PK ? v[0] : plane[best]) + bc;
    for (int a = 0; a < K; a++)
      for (int e = 0; e < K; e++) {
        int idx = (oh * g.stride + a) * g.W + ow * g.stride + e;
        float x = (PK ? v[a * K + e] : plane[idx]) + bc;
        if (x > m || x != x) m = x, best = idx;
      }
    size_t o = ((size_t)b * g.C + c) * OP + k;
    y[o] = lam_relu(m);
    arg[o] = best;
  }
}

lam_status cuda_conv_pool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *G, const float *bias, float *y,
                              int32_t *arg) {
  cuda_state *st = cuda_st(ctx);
  size_t n = (size_t)B * g->OH * g->OW;
  LAM_TRY(check_grid("conv_pool_fwd", (size_t)B * g->H * g->W, g->C));
  if (g->K == 2) conv_pool_fwd_kernel<2><<<grid_2d(n, g->C), NT, 0, st->stream>>>(*g, B, G, bias, y, arg);
  else conv_pool_fwd_kernel<0><<<grid_2d(n, g->C), NT, 0, st->stream>>>(*g, B, G, bias, y, arg);
  LAUNCH_CHECK(st, "conv_pool_fwd_kernel");
  return LAM_OK;
}

/* Block row c, one thread per pooled output (b, ph, pw) of channel c: its argmax, value and gradient
 * are loaded together, then it writes its window of dG (C, B*H*W): the gradient at the argmax if the
 * pooled value passed the relu, zeros elsewhere; on the last pooled row or column also the rows and
 * columns no window covers. (v1 took one element of dG per thread, whose three dependent loads waited
 * in turn: latency-bound, 39 us at batch 512 on the H200.) PK > 0 fixes the window at compile time.
 * One thread per element of dG over (sample, channel) planes (coalesced stores, loads together) was
 * tried too: 22.5 against 21.1 us at batch 512. */
template <int PK, typename T>
__global__ void conv_pool_bwd_kernel(lam_pool_geom g, int B, const float *__restrict__ dy, const float *__restrict__ y,
                                     const int32_t *__restrict__ arg, T *__restrict__ dG) {
  const int K = PK ? PK : g.K, c = blockIdx.y;
  const unsigned OP = (unsigned)(g.OH * g.OW), HW = (unsigned)(g.H * g.W), n = (unsigned)B * OP;
  for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
    unsigned b = j / OP, k = j % OP;
    int ph = (int)k / g.OW, pw = (int)k % g.OW;
    size_t o = ((size_t)b * g.C + c) * OP + k;
    int a = __ldg(arg + o);
    float yv = __ldg(y + o), gv = __ldg(dy + o);
    int hit = lam_relu_passed(yv) ? a : -1;
    T *plane = dG + ((size_t)c * B + b) * HW;
    int h0 = ph * K, w0 = pw * K, h1 = ph == g.OH - 1 ? g.H : h0 + K, w1 = pw == g.OW - 1 ? g.W : w0 + K;
    if (PK && h1 == h0 + K && w1 == w0 + K) {
#pragma unroll
      for (int t = 0; t < (PK ? PK * PK : 1); t++) {
        int idx = (h0 + t / K) * g.W + w0 + t % K;
        put(plane + idx, idx == hit ? gv : 0.0f);
      }
    } else {
      for (int h = h0; h < h1; h++)
        for (int w = w0; w < w1; w++) {
          int idx = h * g.W + w;
          put(plane + idx, idx == hit ? gv : 0.0f);
        }
    }
  }
}

template <typename T>
static lam_status conv_pool_bwd_launch(cuda_state *st, const lam_pool_geom *g, int B, const float *dy, const float *y,
                                       const int32_t *arg, T *dG, float *db) {
  size_t n = (size_t)B * g->OH * g->OW, P = (size_t)g->H * g->W;
  if (g->K == 2) conv_pool_bwd_kernel<2, T><<<grid_2d(n, g->C), NT, 0, st->stream>>>(*g, B, dy, y, arg, dG);
  else conv_pool_bwd_kernel<0, T><<<grid_2d(n, g->C), NT, 0, st->stream>>>(*g, B, dy, y, arg, dG);
  LAUNCH_CHECK(st, "conv_pool_bwd_kernel");
  if (!db) return LAM_OK;
  return row_sum(st, g->C, B * (int)P, dG, db); /* as bcp_to_cbp's bias gradient */
}

lam_status cuda_conv_pool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, const float *y,
                              const int32_t *arg, void *dG, int dt, float *db) {
  cuda_state *st = cuda_st(ctx);
  LAM_TRY(check_grid("conv_pool_bwd", (size_t)B * g->H * g->W, g->C));
  LAM_DT_DISPATCH(dt, T, return conv_pool_bwd_launch(st, g, B, dy, y, arg, (T *)dG, db));
  return LAM_OK; /* not reached */
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
    y[i] = lam_relu(m);
    arg[i] = best;
  }
}

/* The MNIST-sized first layer (C = 1, K = 3, stride 1, no padding, pool 2): one thread per pooled
 * position and group of DIRECT_OCG output channels (blockIdx.y) computes them from one 4 x 4 patch of
 * the input held in registers, the weights in shared memory: the input is read once per group instead
 * of once per channel. The conv values and their order of summation are the generic kernel's, so the
 * result is the same bit for bit. (v1 took every channel in one thread: a third of a wave at batch
 * 512, 15 us on the H200.) */
#define DIRECT_OCG 8
__global__ void conv_pool_direct_fwd_c1k3_kernel(lam_conv_geom cg, lam_pool_geom pg, int B, const float *__restrict__ x,
                                                 const float *__restrict__ W, const float *__restrict__ bias,
                                                 float *__restrict__ y, int32_t *__restrict__ arg) {
  __shared__ float w_s[DIRECT_OCG * 9], b_s[DIRECT_OCG];
  const int oc0 = blockIdx.y * DIRECT_OCG, noc = pg.C - oc0 < DIRECT_OCG ? pg.C - oc0 : DIRECT_OCG;
  for (int i = threadIdx.x; i < noc * 9; i += blockDim.x) w_s[i] = W[oc0 * 9 + i];
  for (int i = threadIdx.x; i < noc; i += blockDim.x) b_s[i] = bias[oc0 + i];
  __syncthreads();
  const unsigned OP = (unsigned)(pg.OH * pg.OW), total = (unsigned)B * OP;
  for (unsigned q = blockIdx.x * blockDim.x + threadIdx.x; q < total; q += gridDim.x * blockDim.x) {
    unsigned b = q / OP, k = q % OP;
    int ph = (int)k / pg.OW, pw = (int)k % pg.OW, h0 = 2 * ph, w0 = 2 * pw;
    const float *xb = x + (size_t)b * cg.H * cg.W + h0 * cg.W + w0;
    float v[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int c = 0; c < 4; c++) v[r][c] = __ldg(xb + r * cg.W + c);
#pragma unroll 2
    for (int j = 0; j < noc; j++) {
      const float *w = w_s + j * 9;
      float m = 0.0f;
      int best = 0;
#pragma unroll
      for (int a = 0; a < 2; a++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float acc = b_s[j];
#pragma unroll
          for (int kh = 0; kh < 3; kh++)
#pragma unroll
            for (int kw = 0; kw < 3; kw++) acc = fmaf(v[a + kh][e + kw], w[kh * 3 + kw], acc);
          int idx = (h0 + a) * pg.W + w0 + e;
          if ((a == 0 && e == 0) || acc > m || acc != acc) m = acc, best = idx; /* first maximum, NaN wins */
        }
      size_t o = ((size_t)b * pg.C + oc0 + j) * OP + k;
      y[o] = lam_relu(m);
      arg[o] = best;
    }
  }
}

lam_status cuda_conv_pool_direct_fwd(lam_ctx *ctx, const lam_conv_geom *cg, const lam_pool_geom *pg, int B,
                                     const float *x, const float *W, const float *bias, float *y, int32_t *arg) {
  cuda_state *st = cuda_st(ctx);
  unsigned blocks = blocks_for((size_t)B * pg->C * pg->OH * pg->OW);
  size_t positions = (size_t)B * pg->OH * pg->OW;
  if (cg->C == 1 && cg->K == 3 && cg->stride == 1 && cg->pad == 0 && pg->K == 2 && pg->stride == 2 &&
      positions < (size_t)1 << 31) {
    int groups = (pg->C + DIRECT_OCG - 1) / DIRECT_OCG;
    LAM_TRY(check_grid("conv_pool_direct_fwd", positions, groups));
    conv_pool_direct_fwd_c1k3_kernel<<<grid_2d(positions, groups), NT, 0, st->stream>>>(*cg, *pg, B, x, W, bias, y, arg);
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
#define DIRECT_U 4
template <int CT, int KT, bool NOPAD>
__global__ void conv_pool_direct_bwd_kernel(lam_conv_geom cg, lam_pool_geom pg, int B, const float *x, const float *dy,
                                            const float *y, const int32_t *arg, float *work) {
  const int K = KT ? KT : cg.K, taps = (CT ? CT : cg.C) * K * K, oc = blockIdx.y, nchunks = gridDim.x;
  const unsigned OP = (unsigned)(pg.OH * pg.OW), n = (unsigned)B * OP; /* < 2^31: checked by the caller */
  float acc[LAM_DIRECT_TAPS + 1];
#pragma unroll
  for (int t = 0; t <= LAM_DIRECT_TAPS; t++) acc[t] = 0.0f;
  size_t q0 = (size_t)blockIdx.x * LAM_DIRECT_CHUNK, q1 = q0 + LAM_DIRECT_CHUNK < n ? q0 + LAM_DIRECT_CHUNK : n;
  /* A thread's outputs q, q + NT, ... are taken DIRECT_U at a time: their value, gradient and argmax
   * are loaded together, then their taps, then summed in the order of q, as one at a time would (v1
   * did one at a time, each load waiting for the one before: 50 us at batch 512 on the H200). */
  for (size_t qb = q0 + threadIdx.x; qb < q1; qb += (size_t)DIRECT_U * NT) {
    float yv[DIRECT_U], g[DIRECT_U];
    int a[DIRECT_U];
    size_t bq[DIRECT_U];
#pragma unroll
    for (int u = 0; u < DIRECT_U; u++) {
      size_t q = qb + (size_t)u * NT;
      yv[u] = 0.0f, g[u] = 0.0f, a[u] = 0, bq[u] = 0;
      if (q < q1) {
        unsigned b = (unsigned)q / OP;
        size_t o = ((size_t)b * pg.C + oc) * OP + (unsigned)q % OP;
        yv[u] = __ldg(y + o), g[u] = __ldg(dy + o), a[u] = __ldg(arg + o), bq[u] = b;
      }
    }
#pragma unroll
    for (int u = 0; u < DIRECT_U; u++) {
      if (!lam_relu_passed(yv[u])) continue; /* also the slots past q1 (yv 0) */
      int h = a[u] / pg.W, wc = a[u] % pg.W;
      const float *xb = x + bq[u] * cg.C * cg.H * cg.W;
      acc[LAM_DIRECT_TAPS] += g[u];
      if (NOPAD) { /* every tap of a conv output lies inside the input: loads at fixed offsets, no checks */
        const float *xp = xb + h * cg.stride * cg.W + wc * cg.stride;
#pragma unroll
        for (int t = 0; t < LAM_DIRECT_TAPS; t++)
          if (t < taps) acc[t] = fmaf(g[u], __ldg(xp + (t / (K * K) * cg.H + t / K % K) * cg.W + t % K), acc[t]);
      } else {
#pragma unroll
        for (int t = 0; t < LAM_DIRECT_TAPS; t++) {
          if (t < taps) {
            int c = t / (K * K), kh = t / K % K, kw = t % K;
            int ih = h * cg.stride - cg.pad + kh, iw = wc * cg.stride - cg.pad + kw;
            if (ih >= 0 && ih < cg.H && iw >= 0 && iw < cg.W)
              acc[t] = fmaf(g[u], __ldg(xb + ((size_t)c * cg.H + ih) * cg.W + iw), acc[t]);
          }
        }
      }
    }
  }
  __shared__ float part[NT / 32][LAM_DIRECT_TAPS + 1];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int t = 0; t <= LAM_DIRECT_TAPS; t++) {
    if (t >= taps && t < LAM_DIRECT_TAPS) continue; /* slots no tap uses (taps is constant when templated) */
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
  LAM_TRY(check_grid("conv_pool_direct_bwd", n, pg->C));
  dim3 grid(nchunks, pg->C);
  if (cg->C == 1 && cg->K == 3 && cg->pad == 0) /* the MNIST-sized first layer */
    conv_pool_direct_bwd_kernel<1, 3, true><<<grid, NT, 0, st->stream>>>(*cg, *pg, B, x, dy, y, arg, work);
  else if (cg->C == 1 && cg->K == 3)
    conv_pool_direct_bwd_kernel<1, 3, false><<<grid, NT, 0, st->stream>>>(*cg, *pg, B, x, dy, y, arg, work);
  else
    conv_pool_direct_bwd_kernel<0, 0, false><<<grid, NT, 0, st->stream>>>(*cg, *pg, B, x, dy, y, arg, work);
  LAUNCH_CHECK(st, "conv_pool_direct_bwd_kernel");
  int outs = pg->C * (taps + 1);
  direct_bwd_reduce_kernel<<<(outs + NT - 1) / NT, NT, 0, st->stream>>>(pg->C, taps, nchunks, work, dW, db);
  LAUNCH_CHECK(st, "direct_bwd_reduce_kernel");
  return LAM_OK;
}
