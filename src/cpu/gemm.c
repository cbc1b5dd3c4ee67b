/* gemm.c — the CPU's matrix product: OpenBLAS's sgemm where the build found it (the normal case),
 * else a plain blocked loop (correct, several times slower), so lamina still builds where no BLAS is
 * installed, e.g. a GPU machine whose CPU backend only serves as the tests' reference. gemm_half
 * widens its bfloat16 operands and multiplies in fp32 — the tensor cores' numbers up to the order of
 * summation: the bf16 and fp16 precisions are emulated on the CPU, for checking the GPU, not for speed.
 * Beside it, what a dense layer adds to its product: the bias (add_bias) and its gradient (bias_grad). The
 * CUDA twins are in cuda/gemm.cu under the same names. */
#include <stdlib.h>

#include "cpu.h"
#include "../math/half.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#ifdef LAMINA_WITH_OPENBLAS
#include <cblas.h>

static void sgemm_one(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                      float beta, float *C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B,
              ldb, beta, C, ldc);
}

/* ---- the product in blocks on the pool ----
 * OpenBLAS threads a product with an OpenMP region, whose join waits for every thread of the team: with
 * one of the 2 cores held by another process, the reference CNN's epoch took 6.8x its one-thread time.
 * So a product big enough to share is cut into blocks of C (columns, else rows) or, where C is small and
 * the sum long (a weight gradient), into slices of the sum added up afterwards in slice order; the pool
 * (threadpool.c) hands the blocks to threads as they come free, each a single-threaded OpenBLAS call. Block
 * sizes are fixed, so the results do not depend on the thread count. */
#define GEMM_SHARE_MIN ((size_t)1 << 18) /* multiply-adds below which one call does it all */
#define GEMM_NB 256                        /* columns of C a block */
#define GEMM_MB 64                         /* rows of C a block */
#define GEMM_KB 2048                       /* terms of the sum a slice */

typedef struct gemm_job {
  int ta, tb, M, N, K, split, block; /* split: 0 rows, 1 columns, 2 slices of the sum */
  float alpha, beta;
  const float *A, *B;
  int lda, ldb, ldc;
  float *C, *partial;
} gemm_job;

static void gemm_blocks(void *arg, size_t lo, size_t hi) {
  const gemm_job *j = arg;
  for (size_t i = lo; i < hi; i++) {
    const int s = (int)i * j->block, dim = j->split == 0 ? j->M : j->split == 1 ? j->N : j->K;
    const int e = s + j->block < dim ? s + j->block : dim;
    if (j->split == 0)
      sgemm_one(j->ta, j->tb, e - s, j->N, j->K, j->alpha, j->ta ? j->A + s : j->A + (size_t)s * j->lda, j->lda, j->B,
                j->ldb, j->beta, j->C + (size_t)s * j->ldc, j->ldc);
    else if (j->split == 1)
      sgemm_one(j->ta, j->tb, j->M, e - s, j->K, j->alpha, j->A, j->lda, j->tb ? j->B + (size_t)s * j->ldb : j->B + s,
                j->ldb, j->beta, j->C + s, j->ldc);
    else
      sgemm_one(j->ta, j->tb, j->M, j->N, e - s, j->alpha, j->ta ? j->A + (size_t)s * j->lda : j->A + s, j->lda,
                j->tb ? j->B + s : j->B + (size_t)s * j->ldb, j->ldb, 0.0f, j->partial + i * (size_t)j->M * j->N, j->N);
  }
}

static void sgemm_rm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                     float beta, float *C, int ldc) {
  gemm_job j = {ta, tb, M, N, K, -1, 0, alpha, beta, A, B, lda, ldb, ldc, C, NULL};
  size_t blocks = 0;
  if ((size_t)M * N * K >= GEMM_SHARE_MIN && lam_pool_threads() > 1) {
    if (N >= 2 * GEMM_NB) j.split = 1, j.block = GEMM_NB, blocks = ((size_t)N + GEMM_NB - 1) / GEMM_NB;
    else if (M >= 2 * GEMM_MB) j.split = 0, j.block = GEMM_MB, blocks = ((size_t)M + GEMM_MB - 1) / GEMM_MB;
    else if (K >= 2 * GEMM_KB) {
      blocks = ((size_t)K + GEMM_KB - 1) / GEMM_KB;
      j.partial = malloc(blocks * (size_t)M * N * sizeof(float));
      if (j.partial) j.split = 2, j.block = GEMM_KB;
    }
  }
  /* OpenBLAS on one thread, always: its OpenMP build takes its thread count from the calling thread's
   * OpenMP count at every call, and a change frees or allocates its per-thread buffers (a count that went
   * 2, 1, 2 made a 72 us product take 350 us). The pool's workers run with 1 already. */
#ifdef _OPENMP
  const int omp = omp_get_max_threads();
  omp_set_num_threads(1);
#endif
  if (j.split < 0) sgemm_one(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else lam_pool_for(blocks, 1, gemm_blocks, &j);
#ifdef _OPENMP
  omp_set_num_threads(omp);
#endif
  if (j.split < 0) return;
  if (j.split == 2) { /* C = beta C + the slices in order (beta 0: C's old values, NaN or not, are not read) */
    for (int r = 0; r < M; r++)
      for (int c = 0; c < N; c++) {
        float sum = 0.0f;
        for (size_t i = 0; i < blocks; i++) sum += j.partial[(i * M + r) * (size_t)N + c];
        float *out = C + (size_t)r * ldc + c;
        *out = beta == 0.0f ? sum : beta * *out + sum;
      }
    free(j.partial);
  }
}

#else

static void sgemm_rm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                     float beta, float *C, int ldc) {
#pragma omp parallel for schedule(static) if ((size_t)M * N * K > ((size_t)1 << 18))
  for (int i = 0; i < M; i++) {
    float *c = C + (size_t)i * ldc;
    if (beta == 0.0f)
      for (int j = 0; j < N; j++) c[j] = 0.0f;
    else if (beta != 1.0f)
      for (int j = 0; j < N; j++) c[j] *= beta;
    for (int p = 0; p < K; p++) {
      float a = alpha * (ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p]);
      if (a == 0.0f) continue;
      if (!tb) {
        const float *b = B + (size_t)p * ldb;
        for (int j = 0; j < N; j++) c[j] += a * b[j];
      } else {
        for (int j = 0; j < N; j++) c[j] += a * B[(size_t)j * ldb + p];
      }
    }
  }
}

#endif

/* The floats of a 16-bit matrix (type dt) stored as rows x ld (op'd or not). */
static float *half_copy(int dt, const uint16_t *src, int rows, int ld) {
  size_t n = (size_t)rows * ld;
  float *d = malloc((n ? n : 1) * sizeof *d);
  if (!d) return NULL;
  for (size_t i = 0; i < n; i++) d[i] = lam_half_to_f32(dt, src[i]);
  return d;
}

/* Products of bfloat16s or of halves are exact in fp32, so widening first and multiplying in fp32 is the tensor
 * cores' math. */
static lam_status gemm_widened(int dt, int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                               const uint16_t *B, int ldb, float beta, float *C, int ldc) {
  float *a = half_copy(dt, A, ta ? K : M, lda), *b = half_copy(dt, B, tb ? N : K, ldb);
  if (!a || !b) {
    free(a);
    free(b);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "gemm (16-bit): no host memory for %dx%d operands", M, K);
  }
  sgemm_rm(ta, tb, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
  free(a);
  free(b);
  return LAM_OK;
}

lam_status cpu_gemm(lam_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc) {
  (void)ctx;
  sgemm_rm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  return LAM_OK;
}

lam_status cpu_gemm_half(lam_ctx *ctx, int dt, int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A,
                         int lda, const uint16_t *B, int ldb, float beta, void *C, int c_half, int ldc) {
  (void)ctx;
  if (!c_half) return gemm_widened(dt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (beta != 0.0f) return LAM_FAIL(LAM_ERR_INVALID_ARG, "gemm_half: a 16-bit C takes beta 0, not %g", beta);
  size_t nc = (size_t)M * ldc;
  float *c = malloc((nc ? nc : 1) * sizeof *c);
  if (!c) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "gemm_half: no host memory for a %dx%d result", M, N);
  lam_status s = gemm_widened(dt, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, c, ldc);
  for (int i = 0; s == LAM_OK && i < M; i++)
    for (int j = 0; j < N; j++) ((uint16_t *)C)[(size_t)i * ldc + j] = lam_f32_to_half(dt, c[(size_t)i * ldc + j]);
  free(c);
  return s;
}

lam_status cpu_to_half(lam_ctx *ctx, int dt, size_t n, const float *src, uint16_t *dst) {
  (void)ctx;
  for (size_t i = 0; i < n; i++) dst[i] = lam_f32_to_half(dt, src[i]);
  return LAM_OK;
}

/* fp32, and bf16 and fp16 emulated (above); tf32 is the tensor cores' own format, not offered here. */
lam_status cpu_set_precision(lam_ctx *ctx, int p) {
  if (p == LAM_PRECISION_TF32)
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "lam_ctx_set_precision: tf32 needs tensor cores; the %s backend computes in fp32 "
                    "(bf16 and fp16 are emulated there, for checking)", ctx->be->name);
  return LAM_OK;
}

/* ---- a dense layer's bias over the rows of its GEMM's output (rows, cols) ---- */

lam_status cpu_add_bias(lam_ctx *ctx, int rows, int cols, float *y, const float *b) {
  (void)ctx;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) y[(size_t)r * cols + c] += b[c];
  return LAM_OK;
}

lam_status cpu_bias_grad(lam_ctx *ctx, int rows, int cols, const float *dy, float *db) {
  (void)ctx;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) db[c] += dy[(size_t)r * cols + c];
  return LAM_OK;
}
