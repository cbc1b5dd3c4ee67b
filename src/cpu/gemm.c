/* gemm.c — the CPU's matrix product: OpenBLAS's sgemm where the build found it (the normal case),
 * else a plain blocked loop (correct, several times slower), so lamina still builds where no BLAS is
 * installed, e.g. a GPU machine whose CPU backend only serves as the tests' reference. */
#include "cpu.h"

#ifdef LAMINA_WITH_OPENBLAS
#include <cblas.h>

lam_status cpu_gemm(lam_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc) {
  (void)ctx;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B,
              ldb, beta, C, ldc);
  return LAM_OK;
}

#else

lam_status cpu_gemm(lam_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc) {
  (void)ctx;
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
  return LAM_OK;
}

#endif
