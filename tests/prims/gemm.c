/* gemm.c — test_prims' matrix products: gemm (fp32, padded strides, both transposes, beta 0 and not), gemm_half and
 * to_half (bfloat16 and IEEE half), and a dense layer's bias: add_bias, bias_grad. */
#include "prims_test.h"

/* ---- matrix products, bfloat16 ---- */

static const int k_gemm[][3] = {{1, 1, 1}, {3, 5, 7}, {17, 64, 33}, {64, 3, 130}, {2, 1, 50}};

/* Row-major op(A)(i, k) and op(B)(k, j) for the strides of the case. */
static double opa(const float *A, int ta, int lda, int i, int k) { return ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]; }
static double opb(const float *B, int tb, int ldb, int k, int j) { return tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]; }

static void run_gemm(lam_ctx *ctx, int ta, int tb, int M, int N, int K, float al, const float *A, int lda, size_t na,
                     const float *B, int ldb, size_t nb, float beta, float *C, int ldc, size_t nc) {
  float *dA = dput(ctx, A, na * 4), *dB = dput(ctx, B, nb * 4), *dC = dput(ctx, C, nc * 4);
  TU_OK(BE(ctx)->gemm(ctx, ta, tb, M, N, K, al, dA, lda, dB, ldb, beta, dC, ldc));
  dget(ctx, C, dC, nc * 4, "gemm");
  dfree(ctx, dA), dfree(ctx, dB), dfree(ctx, dC);
}

static void test_gemm(void **state) {
  (void)state;
  uint64_t k = 0;
  for (size_t s = 0; s < sizeof k_gemm / sizeof k_gemm[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int bi = 0; bi < 2; bi++) {
          seed_case("gemm", k++);
          int M = k_gemm[s][0], N = k_gemm[s][1], K = k_gemm[s][2];
          int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 2; /* padded rows */
          size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
          float alpha = 1.25f, beta = bi ? 0.75f : 0.0f;
          float *A = frand(na, -1, 1), *B = frand(nb, -1, 1), *C0 = frand(nc, -1, 1);
          double *ref = dzero(nc), *scale = dzero(nc);
          for (size_t i = 0; i < nc; i++) ref[i] = C0[i]; /* the padding stays as it is: scale 0, exact */
          for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
              double sum = 0, mag = 0;
              for (int q = 0; q < K; q++) {
                double p = opa(A, ta, lda, i, q) * opb(B, tb, ldb, q, j);
                sum += p, mag += fabs(p);
              }
              size_t o = (size_t)i * ldc + j;
              ref[o] = alpha * sum + beta * (double)C0[o];
              scale[o] = fabs(alpha) * mag + fabs(beta * C0[o]);
            }
          float *got = fdup(C0, nc), *cpu = NULL;
          run_gemm(g_ctx, ta, tb, M, N, K, alpha, A, lda, na, B, ldb, nb, beta, got, ldc, nc);
          if (g_cuda) {
            cpu = fdup(C0, nc);
            run_gemm(g_cpu, ta, tb, M, N, K, alpha, A, lda, na, B, ldb, nb, beta, cpu, ldc, nc);
          }
          char what[160];
          snprintf(what, sizeof what, "gemm M=%d N=%d K=%d ta=%d tb=%d beta=%g", M, N, K, ta, tb, beta);
          /* fp32 sums of K products: a few ulps of their magnitudes (cuBLAS in fp32: the context's precision) */
          verify(what, nc, got, ref, cpu, scale, 1e-5, 1e-5);
          free(A), free(B), free(C0), free(ref), free(scale), free(got), free(cpu);
        }
}

static void run_gemm_bf16(lam_ctx *ctx, int ta, int tb, int M, int N, int K, float al, const uint16_t *A, int lda,
                          size_t na, const uint16_t *B, int ldb, size_t nb, float beta, void *C, int c_bf16, int ldc,
                          size_t nc) {
  size_t cs = c_bf16 ? 2 : 4;
  void *dA = dput(ctx, A, na * 2), *dB = dput(ctx, B, nb * 2), *dC = dput(ctx, C, nc * cs);
  TU_OK(BE(ctx)->gemm_half(ctx, g_half, ta, tb, M, N, K, al, dA, lda, dB, ldb, beta, dC, c_bf16, ldc));
  dget(ctx, C, dC, nc * cs, "gemm_bf16");
  dfree(ctx, dA), dfree(ctx, dB), dfree(ctx, dC);
}

static void test_gemm_bf16(void **state) {
  (void)state;
  uint64_t k = 0;
  for (size_t s = 0; s < sizeof k_gemm / sizeof k_gemm[0]; s++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int mode = 0; mode < 3; mode++) { /* C float beta 0, C float beta 0.75, C bfloat16 */
          seed_case("gemm_bf16", k++);
          int M = k_gemm[s][0], N = k_gemm[s][1], K = k_gemm[s][2], c_bf16 = mode == 2;
          int lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 3, ldc = N + 1;
          size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
          float alpha = 0.75f, beta = mode == 1 ? 0.75f : 0.0f;
          uint16_t *A16 = bf16rand(na, -1, 1), *B16 = bf16rand(nb, -1, 1), *C16 = bf16rand(nc, -1, 1);
          float *A = as_float_bf16(A16, na), *B = as_float_bf16(B16, nb), *C0 = as_float_bf16(C16, nc);
          double *ref = dzero(nc), *scale = dzero(nc);
          for (size_t i = 0; i < nc; i++) ref[i] = C0[i];
          for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
              double sum = 0, mag = 0;
              for (int q = 0; q < K; q++) {
                double p = opa(A, ta, lda, i, q) * opb(B, tb, ldb, q, j);
                sum += p, mag += fabs(p);
              }
              size_t o = (size_t)i * ldc + j;
              ref[o] = alpha * sum + beta * (double)C0[o];
              /* fp32 sums (1e-5 of the magnitudes); a bfloat16 C is also rounded once: 2^-8 of itself */
              scale[o] = 1e-5 * (fabs(alpha) * mag + fabs(beta * C0[o])) + (c_bf16 ? half_ulp() * fabs(ref[o]) : 0.0);
            }
          void *got = c_bf16 ? bdup(C16, nc * 2) : (void *)fdup(C0, nc), *cpu = NULL;
          run_gemm_bf16(g_ctx, ta, tb, M, N, K, alpha, A16, lda, na, B16, ldb, nb, beta, got, c_bf16, ldc, nc);
          if (g_cuda) {
            cpu = c_bf16 ? bdup(C16, nc * 2) : (void *)fdup(C0, nc);
            run_gemm_bf16(g_cpu, ta, tb, M, N, K, alpha, A16, lda, na, B16, ldb, nb, beta, cpu, c_bf16, ldc, nc);
          }
          float *gf = c_bf16 ? as_float_bf16(got, nc) : fdup(got, nc);
          float *cf = !cpu ? NULL : c_bf16 ? as_float_bf16(cpu, nc) : fdup(cpu, nc);
          char what[160];
          snprintf(what, sizeof what, "gemm_half %s M=%d N=%d K=%d ta=%d tb=%d beta=%g c_half=%d", half_name(), M, N, K,
                   ta, tb, beta, c_bf16);
          /* tol 1 on the scale above; CUDA vs CPU: both round a bfloat16 C, which may land one ulp apart */
          verify(what, nc, gf, ref, cf, scale, 1.0, 2.0);
          free(A16), free(B16), free(C16), free(A), free(B), free(C0), free(ref), free(scale), free(got), free(cpu);
          free(gf), free(cf);
        }
}

static void run_to_bf16(lam_ctx *ctx, size_t n, const float *x, uint16_t *y) {
  float *dx = dput(ctx, x, n * 4);
  uint16_t *dy = dput(ctx, y, n * 2);
  TU_OK(BE(ctx)->to_half(ctx, g_half, n, dx, dy));
  dget(ctx, y, dy, n * 2, "to_half");
  dfree(ctx, dx), dfree(ctx, dy);
}

static void test_to_bf16(void **state) {
  (void)state;
  static const size_t ns[] = {1, 1001, 40001};
  for (size_t c = 0; c < 3; c++) {
    seed_case("to_bf16", c);
    size_t n = ns[c];
    float *x = frand(n, -1, 1);
    for (size_t i = 0; i < n; i++) x[i] = ldexpf(x[i], (int)(tu_next(&g_r) % 41) - 20); /* wide exponents */
    uint16_t *ref = xmalloc(n * 2), *got = xmalloc(n * 2), *cpu = xmalloc(n * 2);
    for (size_t i = 0; i < n; i++) ref[i] = ref_bf16(x[i]), got[i] = cpu[i] = 0xffff;
    run_to_bf16(g_ctx, n, x, got);
    if (g_cuda) run_to_bf16(g_cpu, n, x, cpu);
    verify_bytes(g_half == LAM_DT_F16 ? "to_half f16" : "to_half bf16", n, 2, got, ref, cpu); /* exact */
    free(x), free(ref), free(got), free(cpu);
  }
}

/* ---- a dense layer's bias ---- */

static const int k_rc[][2] = {{1, 1}, {3, 7}, {64, 10}, {512, 3}, {5, 300}};

static void run_add_bias(lam_ctx *ctx, int rows, int cols, float *y, const float *b) {
  size_t n = (size_t)rows * cols;
  float *dy = dput(ctx, y, n * 4), *db = dput(ctx, b, (size_t)cols * 4);
  TU_OK(BE(ctx)->add_bias(ctx, rows, cols, dy, db));
  dget(ctx, y, dy, n * 4, "add_bias");
  dfree(ctx, dy), dfree(ctx, db);
}
static void run_bias_grad(lam_ctx *ctx, int rows, int cols, const float *dy, float *db) {
  size_t n = (size_t)rows * cols;
  float *ddy = dput(ctx, dy, n * 4), *ddb = dput(ctx, db, (size_t)cols * 4);
  TU_OK(BE(ctx)->bias_grad(ctx, rows, cols, ddy, ddb));
  dget(ctx, db, ddb, (size_t)cols * 4, "bias_grad");
  dfree(ctx, ddy), dfree(ctx, ddb);
}

static void test_dense_bias(void **state) {
  (void)state;
  for (size_t s = 0; s < sizeof k_rc / sizeof k_rc[0]; s++) {
    seed_case("dense_bias", s);
    int rows = k_rc[s][0], cols = k_rc[s][1];
    size_t n = (size_t)rows * cols;
    char what[120];
    float *y0 = frand(n, -2, 2), *b = frand(cols, -1, 1), *dy = frand(n, -1, 1), *db0 = frand(cols, -1, 1);
    double *ref = dzero(n), *scale = dzero(n), *bref = dzero(cols), *bscale = dzero(cols);
    for (size_t i = 0; i < n; i++) {
      ref[i] = (double)y0[i] + b[i % cols], scale[i] = fabs(y0[i]) + fabs(b[i % cols]);
      bref[i % cols] += dy[i], bscale[i % cols] += fabs(dy[i]);
    }
    for (int c = 0; c < cols; c++) bref[c] += db0[c], bscale[c] += fabs(db0[c]);
    float *got = fdup(y0, n), *cpu = g_cuda ? fdup(y0, n) : NULL;
    run_add_bias(g_ctx, rows, cols, got, b);
    if (g_cuda) run_add_bias(g_cpu, rows, cols, cpu, b);
    snprintf(what, sizeof what, "add_bias rows=%d cols=%d", rows, cols);
    verify(what, n, got, ref, cpu, scale, 1e-7, 1e-7); /* one rounded add */
    float *gb = fdup(db0, cols), *cb = g_cuda ? fdup(db0, cols) : NULL;
    run_bias_grad(g_ctx, rows, cols, dy, gb);
    if (g_cuda) run_bias_grad(g_cpu, rows, cols, dy, cb);
    snprintf(what, sizeof what, "bias_grad rows=%d cols=%d", rows, cols);
    verify(what, cols, gb, bref, cb, bscale, 1e-5, 1e-5); /* fp32 sums of the rows */
    free(y0), free(b), free(dy), free(db0), free(ref), free(scale), free(bref), free(bscale), free(got), free(cpu);
    free(gb), free(cb);
  }
}

IN_F16_TEST(test_gemm_bf16)
IN_F16_TEST(test_to_bf16)

const struct CMUnitTest *prims_gemm_tests(size_t *n) {
  static const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm),
      cmocka_unit_test(test_gemm_bf16),
      cmocka_unit_test(test_to_bf16),
      cmocka_unit_test(test_dense_bias),
      cmocka_unit_test(test_gemm_bf16_f16),
      cmocka_unit_test(test_to_bf16_f16),
  };
  *n = sizeof tests / sizeof tests[0];
  return tests;
}
