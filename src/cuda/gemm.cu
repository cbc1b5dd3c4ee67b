/* gemm.cu — the CUDA twins of the matrix-product primitives (prims.h; CPU versions in cpu/gemm.c under the same
 * names): gemm through cuBLAS's sgemm (row-major calls mapped onto its column-major API), gemm_half through
 * cublasGemmEx (bfloat16 or half operands, fp32 sums), to_half, the precision's math mode; and beside them a
 * dense layer's bias (add_bias, bias_grad). Everything is queued on the context's stream; nothing here waits
 * for the device. */
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
