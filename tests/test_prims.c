/* test_prims.c — every nn primitive of src/prims.h, called through the context's backend table, over a
 * set of shapes (odd sizes, C = 1, P = 1, 3 and 64 channels, sizes that split the CUDA reductions over
 * several blocks a channel) on fresh random inputs. The fused conv_pool_* are left to test_fused, which
 * checks them against the plain ops through whole models; here only their new NULL bias and NULL db.
 *
 * On the CPU backend each output element is checked against a float64 reference written here, and the
 * backward primitives (activations, BatchNorm, pooling, upsampling, cross-entropy with smoothing and
 * ignored labels) against central differences of their forward primitive. Run with "cuda", the same
 * calls run on the CUDA backend and each element is checked against the CPU backend's result (CTest
 * label gpu; exit 77 without a device). Outputs that a primitive overwrites are poisoned with NaN first
 * and those it accumulates into hold random values, so an element left unwritten fails; every device
 * buffer has guard bytes after it, so a write past the end fails. Tolerances are next to each check, as
 * |got - want| <= tol * scale with the element's scale (the sum of the magnitudes that went into it);
 * scale 0 asks for the exact value. */
#include "prims/prims_test.h"

int g_cuda;    /* prims_test.h says what each is */
lam_fmt g_fmt;
lam_ctx *g_ctx;
lam_ctx *g_cpu;
tu_rng g_r;
int g_half = LAM_DT_BF16;

/* ---- matrix products, bfloat16, zero ---- */

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

static void test_zero(void **state) {
  (void)state;
  static const size_t ns[] = {1, 13, 40003};
  for (size_t c = 0; c < 3; c++) {
    seed_case("zero", c);
    size_t n = ns[c], tot = n + 7;
    uint8_t *h = u8rand(tot, 1, 255), *got = xmalloc(tot);
    uint8_t *d = dput(g_ctx, h, tot);
    TU_OK(BE(g_ctx)->zero(g_ctx, d + 3, n)); /* an odd offset and length */
    dget(g_ctx, got, d, tot, "zero");
    for (size_t i = 0; i < tot; i++) {
      uint8_t want = i >= 3 && i < 3 + n ? 0 : h[i];
      if (got[i] != want) fail_msg("zero n=%zu: byte %zu is %d, want %d", n, i, got[i], want);
    }
    dfree(g_ctx, d);
    free(h), free(got);
  }
}

/* ---- im2col, col2im ---- */

typedef struct cg_case {
  int C, H, W, K, stride, pad;
} cg_case;
static const cg_case k_cg[] = {{1, 5, 5, 3, 1, 0}, {3, 7, 6, 3, 2, 1},  {2, 4, 9, 2, 1, 1},
                               {64, 6, 6, 3, 1, 1}, {1, 1, 1, 1, 1, 0}, {3, 8, 8, 5, 3, 2}};
static lam_conv_geom mk_cg(const cg_case *c) {
  lam_conv_geom g = {c->C, c->H, c->W, c->K, c->stride, c->pad, 0, 0};
  g.OH = (c->H + 2 * c->pad - c->K) / c->stride + 1, g.OW = (c->W + 2 * c->pad - c->K) / c->stride + 1;
  return g;
}
/* The input index that column entry (row, col) of im2col reads, or -1 for padding. */
static long col_src(const lam_conv_geom *g, int B, size_t row, size_t col) {
  size_t P = (size_t)g->OH * g->OW;
  int c = (int)(row / (g->K * g->K)), kk = (int)(row % (g->K * g->K)), b = (int)(col / P), p = (int)(col % P);
  int ih = p / g->OW * g->stride - g->pad + kk / g->K, iw = p % g->OW * g->stride - g->pad + kk % g->K;
  (void)B;
  if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) return -1;
  return (((long)b * g->C + c) * g->H + ih) * g->W + iw;
}

static void run_im2col(lam_ctx *ctx, const lam_conv_geom *g, int B, const float *x, size_t nx, void *col, size_t ncol,
                       int bf16) {
  float *dx = dput(ctx, x, nx * 4);
  void *dc = dput(ctx, col, ncol * (bf16 ? 2 : 4));
  TU_OK(BE(ctx)->im2col(ctx, g, B, dx, dc, bf16 ? g_half : LAM_DT_F32));
  dget(ctx, col, dc, ncol * (bf16 ? 2 : 4), "im2col");
  dfree(ctx, dx), dfree(ctx, dc);
}
static void run_col2im(lam_ctx *ctx, const lam_conv_geom *g, int B, const void *col, size_t ncol, int bf16, int acc,
                       float *dx, size_t nx) {
  void *dc = dput(ctx, col, ncol * (bf16 ? 2 : 4));
  float *dd = dput(ctx, dx, nx * 4);
  TU_OK(BE(ctx)->col2im(ctx, g, B, dc, bf16 ? g_half : LAM_DT_F32, acc, dd));
  dget(ctx, dx, dd, nx * 4, "col2im");
  dfree(ctx, dc), dfree(ctx, dd);
}

static void test_im2col_col2im(void **state) {
  (void)state;
  uint64_t k = 0;
  for (size_t s = 0; s < sizeof k_cg / sizeof k_cg[0]; s++)
    for (int B = 1; B <= 3; B += 2)
      for (int bf16 = 0; bf16 < 2; bf16++) {
        seed_case("im2col", k++);
        lam_conv_geom g = mk_cg(&k_cg[s]);
        size_t nx = (size_t)B * g.C * g.H * g.W, rows = (size_t)g.C * g.K * g.K, cols = (size_t)B * g.OH * g.OW;
        size_t ncol = rows * cols;
        char what[160];
        snprintf(what, sizeof what, "im2col C=%d H=%d W=%d K=%d stride=%d pad=%d B=%d bf16=%d", g.C, g.H, g.W, g.K,
                 g.stride, g.pad, B, bf16);
        float *x = frand(nx, -2, 2);
        /* im2col: each entry the input value it copies (rounded for bf16) or 0: exact */
        double *ref = dzero(ncol);
        for (size_t r = 0; r < rows; r++)
          for (size_t c = 0; c < cols; c++) {
            long i = col_src(&g, B, r, c);
            float v = i < 0 ? 0.0f : x[i];
            ref[r * cols + c] = bf16 ? lam_half_to_f32(g_half, ref_bf16(v)) : v;
          }
        void *got = poison(ncol, bf16), *cpu = g_cuda ? poison(ncol, bf16) : NULL;
        run_im2col(g_ctx, &g, B, x, nx, got, ncol, bf16);
        if (g_cuda) run_im2col(g_cpu, &g, B, x, nx, cpu, ncol, bf16);
        float *gf = bf16 ? as_float_bf16(got, ncol) : fdup(got, ncol);
        float *cf = !cpu ? NULL : bf16 ? as_float_bf16(cpu, ncol) : fdup(cpu, ncol);
        double *zero_scale = dzero(ncol);
        verify(what, ncol, gf, ref, cf, zero_scale, 0.0, 0.0);
        free(gf), free(cf), free(got), free(cpu), free(ref), free(zero_scale);

        /* col2im: every input element the sum of the entries that copied it (accumulating: added to what
         * was there, every other case) */
        int acc = (int)(k & 1);
        snprintf(what, sizeof what, "col2im C=%d H=%d W=%d K=%d stride=%d pad=%d B=%d bf16=%d accumulate=%d", g.C, g.H,
                 g.W, g.K, g.stride, g.pad, B, bf16, acc);
        void *col = bf16 ? (void *)bf16rand(ncol, -1, 1) : (void *)frand(ncol, -1, 1);
        float *colf = bf16 ? as_float_bf16(col, ncol) : fdup(col, ncol);
        double *dref = dzero(nx), *dscale = dzero(nx);
        float *dx0 = frand(nx, -1, 1);
        if (acc)
          for (size_t i = 0; i < nx; i++) dref[i] = dx0[i], dscale[i] = fabs(dx0[i]);
        for (size_t r = 0; r < rows; r++)
          for (size_t c = 0; c < cols; c++) {
            long i = col_src(&g, B, r, c);
            if (i >= 0) dref[i] += colf[r * cols + c], dscale[i] += fabs(colf[r * cols + c]);
          }
        float *dg = acc ? fdup(dx0, nx) : fnan(nx), *dc = !g_cuda ? NULL : acc ? fdup(dx0, nx) : fnan(nx);
        run_col2im(g_ctx, &g, B, col, ncol, bf16, acc, dg, nx);
        if (g_cuda) run_col2im(g_cpu, &g, B, col, ncol, bf16, acc, dc, nx);
        verify(what, nx, dg, dref, dc, dscale, 1e-6, 1e-6); /* fp32 sums of at most K*K entries, any order */
        free(col), free(colf), free(dref), free(dscale), free(dg), free(dc), free(x), free(dx0);
      }
}

/* ---- whole 2-D convolutions (cuDNN on CUDA, im2col + GEMM on the CPU) ---- */

typedef struct conv_io {
  const float *x, *W, *dy; /* inputs */
  float *y, *dx, *dW;      /* outputs: y overwritten, dx overwritten or (acc) added to, dW accumulated */
  int acc;
} conv_io;

/* tight: no workspace at all (NCHW float32 only, where cuDNN's part is the whole of it): the backend must take
 * algorithms that need none, as it must where a batch it did not plan for meets the scratch of one it did. */
static void run_conv2d(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B, conv_io *io, int tight) {
  size_t nx = (size_t)B * g->C * g->H * g->W, ny = (size_t)B * OC * g->OH * g->OW, nw = (size_t)OC * g->C * g->K * g->K;
  size_t ws_bytes = 0;
  TU_OK(BE(ctx)->conv2d_workspace(ctx, g_fmt, g, OC, B, &ws_bytes));
  if (tight) ws_bytes = 0;
  void *ws = NULL;
  TU_OK(lam_mem_alloc(ctx, &ws, ws_bytes ? ws_bytes : 1));
  float *dx_in = dput(ctx, io->x, nx * 4), *dW_in = dput(ctx, io->W, nw * 4), *ddy = dput(ctx, io->dy, ny * 4);
  float *dy_out = dput(ctx, io->y, ny * 4), *ddx = dput(ctx, io->dx, nx * 4), *ddW = dput(ctx, io->dW, nw * 4);
  const int HW = g->H * g->W, OP = g->OH * g->OW;
  void *fx = fin(ctx, dx_in, B, g->C, HW), *fdy = fin(ctx, ddy, B, OC, OP), *fy = fin(ctx, dy_out, B, OC, OP),
       *fdx = fin(ctx, ddx, B, g->C, HW);
  void *fW = fin_flat(ctx, dW_in, nw); /* the weights in the format's type (bfloat16: the rounded ones) */
  TU_OK(BE(ctx)->conv2d_fwd(ctx, g_fmt, g, OC, B, fx, fW, fy, ws, ws_bytes));
  TU_OK(BE(ctx)->conv2d_bwd_data(ctx, g_fmt, g, OC, B, fdy, fW, fdx, io->acc, ws, ws_bytes));
  TU_OK(BE(ctx)->conv2d_bwd_filter(ctx, g_fmt, g, OC, B, fx, fdy, ddW, ws, ws_bytes));
  fout(ctx, fy, dy_out, B, OC, OP, "conv2d_fwd y (format)"), fout(ctx, fdx, ddx, B, g->C, HW, "conv2d dx (format)");
  fout(ctx, fx, dx_in, B, g->C, HW, "conv2d x (format)"), fout(ctx, fdy, ddy, B, OC, OP, "conv2d dy (format)");
  fout_flat(ctx, fW, dW_in, nw, "conv2d W (format)");
  dget(ctx, io->y, dy_out, ny * 4, "conv2d_fwd");
  dget(ctx, io->dx, ddx, nx * 4, "conv2d_bwd_data");
  dget(ctx, io->dW, ddW, nw * 4, "conv2d_bwd_filter");
  dfree(ctx, dx_in), dfree(ctx, dW_in), dfree(ctx, ddy), dfree(ctx, dy_out), dfree(ctx, ddx), dfree(ctx, ddW);
  TU_OK(lam_mem_free(ctx, ws));
}

static void test_conv2d(void **state) {
  (void)state;
  static const int ocs[] = {1, 5, 16};
  uint64_t k = 0;
  for (size_t s = 0; s < sizeof k_cg / sizeof k_cg[0]; s++)
    for (int oi = 0; oi < 3; oi++)
      for (int B = 1; B <= 3; B += 2) {
        seed_case("conv2d", k++);
        lam_conv_geom g = mk_cg(&k_cg[s]);
        int OC = ocs[oi], KK = g.K * g.K;
        size_t nx = (size_t)B * g.C * g.H * g.W, P = (size_t)g.OH * g.OW, ny = (size_t)B * OC * P,
               nw = (size_t)OC * g.C * KK, rows = (size_t)g.C * KK;
        float *x = frand(nx, -1, 1), *W = frand(nw, -1, 1), *dy = frand(ny, -1, 1), *dW0 = frand(nw, -1, 1);
        float *dx0 = frand(nx, -1, 1);
        int acc = (int)(k & 1); /* the data gradient added to what dx held, every other case */
        double *yref = dzero(ny), *ys = dzero(ny), *dxref = dzero(nx), *dxs = dzero(nx), *dwref = dzero(nw),
               *dws = dzero(nw);
        for (size_t i = 0; i < nw; i++) dwref[i] = dW0[i], dws[i] = fabs(dW0[i]);
        if (acc)
          for (size_t i = 0; i < nx; i++) dxref[i] = dx0[i], dxs[i] = fabs(dx0[i]);
        for (int b = 0; b < B; b++)
          for (size_t p = 0; p < P; p++)
            for (size_t r = 0; r < rows; r++) { /* tap r = (c, kh, kw) of output p of sample b */
              long xi = col_src(&g, B, r, (size_t)b * P + p);
              if (xi < 0) continue;
              for (int oc = 0; oc < OC; oc++) {
                size_t yi = ((size_t)b * OC + oc) * P + p, wi = (size_t)oc * rows + r;
                double xw = (double)x[xi] * W[wi], gw = (double)dy[yi] * W[wi], gx = (double)dy[yi] * x[xi];
                yref[yi] += xw, ys[yi] += fabs(xw);
                dxref[xi] += gw, dxs[xi] += fabs(gw);
                dwref[wi] += gx, dws[wi] += fabs(gx);
              }
            }
        conv_io io = {x, W, dy, fnan(ny), acc ? fdup(dx0, nx) : fnan(nx), fdup(dW0, nw), acc},
                ioc = {x, W, dy, NULL, NULL, NULL, acc};
        const int tight = g_cuda && lam_fmt_plain(g_fmt) && (k & 2); /* every other case on CUDA, NCHW */
        run_conv2d(g_ctx, &g, OC, B, &io, tight);
        if (g_cuda) {
          ioc.y = fnan(ny), ioc.dx = acc ? fdup(dx0, nx) : fnan(nx), ioc.dW = fdup(dW0, nw);
          run_conv2d(g_cpu, &g, OC, B, &ioc, 0);
        }
        char what[160], geo[120];
        snprintf(geo, sizeof geo, "C=%d H=%d W=%d K=%d stride=%d pad=%d OC=%d B=%d accumulate=%d%s", g.C, g.H, g.W,
                 g.K, g.stride, g.pad, OC, B, acc, tight ? " no workspace" : "");
        /* fp32 sums of the products (the CPU's GEMM); cuDNN may pick Winograd or FFT: 1e-4 of the magnitudes */
        snprintf(what, sizeof what, "conv2d_fwd %s", geo);
        verify(what, ny, io.y, yref, ioc.y, ys, 1e-5, 1e-4);
        snprintf(what, sizeof what, "conv2d_bwd_data %s", geo);
        verify(what, nx, io.dx, dxref, ioc.dx, dxs, 1e-5, 1e-4);
        snprintf(what, sizeof what, "conv2d_bwd_filter %s", geo);
        verify(what, nw, io.dW, dwref, ioc.dW, dws, 1e-5, 1e-4);
        free(x), free(W), free(dy), free(dW0), free(dx0), free(yref), free(ys), free(dxref), free(dxs), free(dwref), free(dws);
        free(io.y), free(io.dx), free(io.dW), free(ioc.y), free(ioc.dx), free(ioc.dW);
      }
}

/* ---- layout changes with bias; biases ---- */

typedef struct bcp_case {
  int B, C, P;
} bcp_case;
/* (B, C, P): odd sizes, C = 1, P = 1, 3 and 64 channels; the last ones split a channel's reduction over
 * several CUDA blocks (unevenly), or have more channels than the split allows. */
static const bcp_case k_bcp[] = {{1, 1, 1},   {2, 3, 5},     {5, 3, 1},    {3, 64, 7},  {4, 1, 33},  {2, 17, 256},
                                 {7, 64, 64}, {33, 3, 1000}, {9, 5, 4099}, {4, 1100, 9}, {130, 2, 70}, {64, 64, 256}};
#define N_BCP (sizeof k_bcp / sizeof k_bcp[0])

static void run_cbp_to_bcp(lam_ctx *ctx, int B, int C, int P, const float *src, const float *bias, float *dst) {
  size_t n = (size_t)B * C * P;
  float *ds = dput(ctx, src, n * 4), *db = dput(ctx, bias, (size_t)C * 4), *dd = dput(ctx, dst, n * 4);
  TU_OK(BE(ctx)->cbp_to_bcp(ctx, B, C, P, ds, db, dd));
  dget(ctx, dst, dd, n * 4, "cbp_to_bcp");
  dfree(ctx, ds), dfree(ctx, db), dfree(ctx, dd);
}
static void run_bcp_to_cbp(lam_ctx *ctx, int B, int C, int P, const float *src, float *dst, float *bg) {
  size_t n = (size_t)B * C * P;
  float *ds = dput(ctx, src, n * 4), *dd = dput(ctx, dst, n * 4), *dg = dput(ctx, bg, (size_t)C * 4);
  TU_OK(BE(ctx)->bcp_to_cbp(ctx, B, C, P, ds, dd, dg));
  dget(ctx, dst, dd, n * 4, "bcp_to_cbp");
  if (bg) dget(ctx, bg, dg, (size_t)C * 4, "bcp_to_cbp bias_grad");
  dfree(ctx, ds), dfree(ctx, dd), dfree(ctx, dg);
}

static void test_layout(void **state) {
  (void)state;
  for (size_t s = 0; s < N_BCP; s++)
    for (int with_bias = 0; with_bias < 2; with_bias++) {
      seed_case("layout", 2 * s + with_bias);
      int B = k_bcp[s].B, C = k_bcp[s].C, P = k_bcp[s].P;
      size_t n = (size_t)B * C * P;
      char what[160];
      float *src = frand(n, -2, 2), *bias = with_bias ? frand(C, -1, 1) : NULL;
      /* cbp_to_bcp: dst (B, C, P) = src (C, B*P) + bias: one rounded add */
      double *ref = dzero(n), *scale = dzero(n);
      for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
          for (int p = 0; p < P; p++) {
            size_t o = ((size_t)b * C + c) * P + p;
            double v = src[(size_t)c * B * P + (size_t)b * P + p], bb = bias ? bias[c] : 0.0;
            ref[o] = v + bb, scale[o] = fabs(v) + fabs(bb);
          }
      float *got = fnan(n), *cpu = g_cuda ? fnan(n) : NULL;
      run_cbp_to_bcp(g_ctx, B, C, P, src, bias, got);
      if (g_cuda) run_cbp_to_bcp(g_cpu, B, C, P, src, bias, cpu);
      snprintf(what, sizeof what, "cbp_to_bcp B=%d C=%d P=%d bias=%d", B, C, P, with_bias);
      verify(what, n, got, ref, cpu, scale, 1e-7, 1e-7);
      free(got), free(cpu);

      /* bcp_to_cbp: dst (C, B*P) = src (B, C, P), exact; bias_grad[c] += the sum of channel c */
      float *bg0 = with_bias ? frand(C, -1, 1) : NULL, *bg = bg0 ? fdup(bg0, C) : NULL, *bgc = NULL;
      double *bref = dzero(C), *bscale = dzero(C);
      for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++)
          for (int p = 0; p < P; p++) {
            size_t o = ((size_t)b * C + c) * P + p;
            ref[(size_t)c * B * P + (size_t)b * P + p] = src[o], scale[(size_t)c * B * P + (size_t)b * P + p] = 0;
            bref[c] += src[o], bscale[c] += fabs(src[o]);
          }
      for (int c = 0; c < C && bg0; c++) bref[c] += bg0[c], bscale[c] += fabs(bg0[c]);
      got = fnan(n), cpu = g_cuda ? fnan(n) : NULL;
      run_bcp_to_cbp(g_ctx, B, C, P, src, got, bg);
      if (g_cuda) {
        bgc = bg0 ? fdup(bg0, C) : NULL;
        run_bcp_to_cbp(g_cpu, B, C, P, src, cpu, bgc);
      }
      snprintf(what, sizeof what, "bcp_to_cbp B=%d C=%d P=%d", B, C, P);
      verify(what, n, got, ref, cpu, scale, 0.0, 0.0);
      snprintf(what, sizeof what, "bcp_to_cbp bias_grad B=%d C=%d P=%d", B, C, P);
      if (bg) verify(what, C, bg, bref, bgc, bscale, 1e-5, 1e-5); /* fp32 sums of B*P values */
      free(src), free(bias), free(ref), free(scale), free(got), free(cpu), free(bg0), free(bg), free(bgc), free(bref);
      free(bscale);
    }
}

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

static void run_channel_bias_fwd(lam_ctx *ctx, int B, int C, int P, float *y, const float *bias) {
  size_t n = (size_t)B * C * P;
  float *dy = dput(ctx, y, n * 4), *db = dput(ctx, bias, (size_t)C * 4);
  void *fy = fin(ctx, dy, B, C, P);
  TU_OK(BE(ctx)->channel_bias_fwd(ctx, g_fmt, B, C, P, fy, db));
  fout(ctx, fy, dy, B, C, P, "channel_bias_fwd (format)");
  dget(ctx, y, dy, n * 4, "channel_bias_fwd");
  dfree(ctx, dy), dfree(ctx, db);
}
static void run_channel_bias_bwd(lam_ctx *ctx, int B, int C, int P, const float *dy, float *db) {
  size_t n = (size_t)B * C * P;
  float *ddy = dput(ctx, dy, n * 4), *ddb = dput(ctx, db, (size_t)C * 4);
  void *fdy = fin(ctx, ddy, B, C, P);
  TU_OK(BE(ctx)->channel_bias_bwd(ctx, g_fmt, B, C, P, fdy, ddb));
  fout(ctx, fdy, ddy, B, C, P, "channel_bias_bwd dy (format)");
  dget(ctx, db, ddb, (size_t)C * 4, "channel_bias_bwd");
  dfree(ctx, ddy), dfree(ctx, ddb);
}

static void test_channel_bias(void **state) {
  (void)state;
  for (size_t s = 0; s < N_BCP; s++) {
    seed_case("channel_bias", s);
    int B = k_bcp[s].B, C = k_bcp[s].C, P = k_bcp[s].P;
    size_t n = (size_t)B * C * P;
    char what[120];
    float *y0 = frand(n, -2, 2), *bias = frand(C, -1, 1), *dy = frand(n, -1, 1), *db0 = frand(C, -1, 1);
    double *ref = dzero(n), *scale = dzero(n), *bref = dzero(C), *bscale = dzero(C);
    for (size_t i = 0; i < n; i++) {
      int c = (int)(i / P % C);
      ref[i] = (double)y0[i] + bias[c], scale[i] = fabs(y0[i]) + fabs(bias[c]);
      bref[c] += dy[i], bscale[c] += fabs(dy[i]);
    }
    for (int c = 0; c < C; c++) bref[c] += db0[c], bscale[c] += fabs(db0[c]);
    float *got = fdup(y0, n), *cpu = g_cuda ? fdup(y0, n) : NULL;
    run_channel_bias_fwd(g_ctx, B, C, P, got, bias);
    if (g_cuda) run_channel_bias_fwd(g_cpu, B, C, P, cpu, bias);
    snprintf(what, sizeof what, "channel_bias_fwd B=%d C=%d P=%d", B, C, P);
    verify(what, n, got, ref, cpu, scale, 1e-7, 1e-7); /* one rounded add */
    float *gb = fdup(db0, C), *cb = g_cuda ? fdup(db0, C) : NULL;
    run_channel_bias_bwd(g_ctx, B, C, P, dy, gb);
    if (g_cuda) run_channel_bias_bwd(g_cpu, B, C, P, dy, cb);
    snprintf(what, sizeof what, "channel_bias_bwd B=%d C=%d P=%d", B, C, P);
    /* the CPU sums in double (one rounding at the end); CUDA in fp32 over a tree of blocks */
    verify(what, C, gb, bref, cb, bscale, 2e-7, 1e-5);
    free(y0), free(bias), free(dy), free(db0), free(ref), free(scale), free(bref), free(bscale), free(got), free(cpu);
    free(gb), free(cb);
  }
}

/* ---- pooling, global average, upsampling ---- */

typedef struct pg_case {
  int C, H, W, K, stride;
} pg_case;
/* Odd planes, windows that overlap (stride < K), leave rows and columns uncovered, or are the whole plane. */
/* the last: 2x2 windows of a plane with more than 4096 of them (the CPU's row-by-row path) */
static const pg_case k_pg[] = {{1, 4, 4, 2, 2}, {3, 7, 9, 3, 2}, {2, 5, 5, 2, 1}, {64, 8, 8, 2, 2},
                               {3, 6, 7, 3, 3}, {1, 1, 1, 1, 1}, {5, 9, 9, 4, 3}, {2, 6, 5, 5, 1},
                               {1, 131, 133, 2, 2}};
static lam_pool_geom mk_pg(const pg_case *c) {
  lam_pool_geom g = {c->C, c->H, c->W, c->K, c->stride, (c->H - c->K) / c->stride + 1, (c->W - c->K) / c->stride + 1};
  return g;
}

static void run_maxpool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *x, float *y, int32_t *arg) {
  size_t nx = (size_t)B * g->C * g->H * g->W, ny = (size_t)B * g->C * g->OH * g->OW;
  float *dx = dput(ctx, x, nx * 4), *dy = dput(ctx, y, ny * 4);
  int32_t *da = dput(ctx, arg, ny * 4);
  const int HW = g->H * g->W, OP = g->OH * g->OW;
  void *fx = fin(ctx, dx, B, g->C, HW), *fy = fin(ctx, dy, B, g->C, OP), *fa = fin_i32(ctx, da, B, g->C, OP);
  TU_OK(BE(ctx)->maxpool_fwd(ctx, g_fmt, g, B, fx, fy, fa));
  fout(ctx, fx, dx, B, g->C, HW, "maxpool_fwd x (format)"), fout(ctx, fy, dy, B, g->C, OP, "maxpool_fwd y (format)");
  fout_i32(ctx, fa, da, B, g->C, OP, "maxpool_fwd arg (format)");
  dget(ctx, y, dy, ny * 4, "maxpool_fwd y");
  dget(ctx, arg, da, ny * 4, "maxpool_fwd arg");
  dfree(ctx, dx), dfree(ctx, dy), dfree(ctx, da);
}
static void run_maxpool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, const int32_t *arg, float *dx) {
  size_t nx = (size_t)B * g->C * g->H * g->W, ny = (size_t)B * g->C * g->OH * g->OW;
  float *ddy = dput(ctx, dy, ny * 4), *ddx = dput(ctx, dx, nx * 4);
  int32_t *da = dput(ctx, arg, ny * 4);
  const int HW = g->H * g->W, OP = g->OH * g->OW;
  void *fdy = fin(ctx, ddy, B, g->C, OP), *fdx = fin(ctx, ddx, B, g->C, HW), *fa = fin_i32(ctx, da, B, g->C, OP);
  TU_OK(BE(ctx)->maxpool_bwd(ctx, g_fmt, g, B, fdy, fa, fdx));
  fout(ctx, fdy, ddy, B, g->C, OP, "maxpool_bwd dy (format)"), fout(ctx, fdx, ddx, B, g->C, HW, "maxpool_bwd (format)");
  fout_i32(ctx, fa, da, B, g->C, OP, "maxpool_bwd arg (format)");
  dget(ctx, dx, ddx, nx * 4, "maxpool_bwd");
  dfree(ctx, ddy), dfree(ctx, ddx), dfree(ctx, da);
}
static void run_avgpool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *x, float *y) {
  size_t nx = (size_t)B * g->C * g->H * g->W, ny = (size_t)B * g->C * g->OH * g->OW;
  float *dx = dput(ctx, x, nx * 4), *dy = dput(ctx, y, ny * 4);
  const int HW = g->H * g->W, OP = g->OH * g->OW;
  void *fx = fin(ctx, dx, B, g->C, HW), *fy = fin(ctx, dy, B, g->C, OP);
  TU_OK(BE(ctx)->avgpool_fwd(ctx, g_fmt, g, B, fx, fy));
  fout(ctx, fx, dx, B, g->C, HW, "avgpool_fwd x (format)"), fout(ctx, fy, dy, B, g->C, OP, "avgpool_fwd (format)");
  dget(ctx, y, dy, ny * 4, "avgpool_fwd");
  dfree(ctx, dx), dfree(ctx, dy);
}
static void run_avgpool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, float *dx) {
  size_t nx = (size_t)B * g->C * g->H * g->W, ny = (size_t)B * g->C * g->OH * g->OW;
  float *ddy = dput(ctx, dy, ny * 4), *ddx = dput(ctx, dx, nx * 4);
  const int HW = g->H * g->W, OP = g->OH * g->OW;
  void *fdy = fin(ctx, ddy, B, g->C, OP), *fdx = fin(ctx, ddx, B, g->C, HW);
  TU_OK(BE(ctx)->avgpool_bwd(ctx, g_fmt, g, B, fdy, fdx));
  fout(ctx, fdy, ddy, B, g->C, OP, "avgpool_bwd dy (format)"), fout(ctx, fdx, ddx, B, g->C, HW, "avgpool_bwd (format)");
  dget(ctx, dx, ddx, nx * 4, "avgpool_bwd");
  dfree(ctx, ddy), dfree(ctx, ddx);
}

typedef struct pool_fd {
  const lam_pool_geom *g;
  int B, avg;
  const float *w; /* dL/dy */
} pool_fd;
static void pool_loss(const void *a, const float *x, double *loss) {
  const pool_fd *p = a;
  size_t ny = (size_t)p->B * p->g->C * p->g->OH * p->g->OW;
  float *y = fnan(ny);
  int32_t *arg = xmalloc(ny * 4);
  /* only on the CPU backend, whose memory is host memory */
  if (p->avg) TU_OK(BE(g_ctx)->avgpool_fwd(g_ctx, LAM_FMT_NCHW, p->g, p->B, x, y));
  else TU_OK(BE(g_ctx)->maxpool_fwd(g_ctx, LAM_FMT_NCHW, p->g, p->B, x, y, arg));
  double s = 0;
  for (size_t i = 0; i < ny; i++) s += (double)p->w[i] * y[i];
  *loss = s;
  free(y), free(arg);
}

/* NaN in the windows: a NaN wins over every number, a later NaN over an earlier one (the rule both twins
 * write: v > max or v is NaN replaces), on the 2x2 stride-2 path and a 3x3 one; y and arg exactly. */
static void test_pool_nan(void **state) {
  (void)state;
  static const int geo[][4] = {{2, 9, 12, 2}, {3, 7, 9, 3}}; /* C, H, W, K (stride 2) */
  uint64_t k = 900;
  for (size_t s = 0; s < 2; s++) {
    seed_case("pool_nan", k++);
    int C = geo[s][0], H = geo[s][1], W = geo[s][2], K = geo[s][3], B = 3;
    lam_pool_geom g = {C, H, W, K, 2, (H - K) / 2 + 1, (W - K) / 2 + 1};
    size_t nx = (size_t)B * C * H * W, ny = (size_t)B * C * g.OH * g.OW;
    float *x = frand(nx, -2, 2), *y = fnan(ny), *yc = fnan(ny);
    for (size_t i = 0; i < nx; i += 1 + (i * 7919) % 9) x[i] = NAN; /* about one in five */
    int32_t *arg = xmalloc(ny * 4), *argc = xmalloc(ny * 4);
    run_maxpool_fwd(g_ctx, &g, B, x, y, arg);
    if (g_cuda) run_maxpool_fwd(g_cpu, &g, B, x, yc, argc);
    size_t nans = 0;
    for (size_t bc = 0; bc < (size_t)B * C; bc++)
      for (int oh = 0; oh < g.OH; oh++)
        for (int ow = 0; ow < g.OW; ow++) {
          size_t o = bc * g.OH * g.OW + (size_t)oh * g.OW + ow;
          int best = -1;
          float m = 0;
          for (int a = 0; a < K; a++)
            for (int e = 0; e < K; e++) {
              int idx = (oh * 2 + a) * W + ow * 2 + e;
              float v = x[bc * H * W + idx];
              if (best < 0 || v > m || isnan(v)) m = v, best = idx;
            }
          nans += isnan(m);
          int same = isnan(m) ? isnan(y[o]) : y[o] == m;
          if (!same || arg[o] != best)
            fail_msg("maxpool with NaN, K=%d, output %zu: y %g arg %d, want %g at %d", K, o, y[o], arg[o], m, best);
          if (g_cuda && ((isnan(m) ? !isnan(yc[o]) : yc[o] != m) || argc[o] != best))
            fail_msg("maxpool with NaN on the CPU, K=%d, output %zu: y %g arg %d, want %g at %d", K, o, yc[o], argc[o], m,
                     best);
        }
    if (!nans) fail_msg("maxpool with NaN, K=%d: no window held a NaN: the test would prove little", K);
    free(x), free(y), free(yc), free(arg), free(argc);
  }
}

static void test_pool(void **state) {
  (void)state;
  uint64_t k = 0;
  for (size_t s = 0; s < sizeof k_pg / sizeof k_pg[0]; s++)
    for (int B = 1; B <= 4; B += 3) {
      seed_case("pool", k++);
      lam_pool_geom g = mk_pg(&k_pg[s]);
      const int KK = g.K * g.K;
      size_t nx = (size_t)B * g.C * g.H * g.W, ny = (size_t)B * g.C * g.OH * g.OW, HW = (size_t)g.H * g.W,
             OP = (size_t)g.OH * g.OW;
      char what[160], geo[100];
      snprintf(geo, sizeof geo, "C=%d H=%d W=%d K=%d stride=%d B=%d", g.C, g.H, g.W, g.K, g.stride, B);
      float *x = frand(nx, -2, 2), *dy = frand(ny, -1, 1);
      double *ymax = dzero(ny), *yavg = dzero(ny), *yscale = dzero(ny), *zero = dzero(nx > ny ? nx : ny);
      int32_t *arg = xmalloc(ny * 4);
      for (size_t bc = 0; bc < (size_t)B * g.C; bc++)
        for (int oh = 0; oh < g.OH; oh++)
          for (int ow = 0; ow < g.OW; ow++) {
            size_t o = bc * OP + (size_t)oh * g.OW + ow;
            int best = -1;
            double m = 0, sum = 0, mag = 0;
            for (int a = 0; a < g.K; a++)
              for (int e = 0; e < g.K; e++) {
                int idx = (oh * g.stride + a) * g.W + ow * g.stride + e;
                double v = x[bc * HW + idx];
                if (best < 0 || v > m) m = v, best = idx; /* the first maximum in row order */
                sum += v, mag += fabs(v);
              }
            ymax[o] = m, arg[o] = best, yavg[o] = sum / KK, yscale[o] = mag / KK;
          }
      /* maxpool_fwd: the max and its index, exact */
      float *y = fnan(ny), *yc = g_cuda ? fnan(ny) : NULL;
      int32_t *ag = xmalloc(ny * 4), *ac = xmalloc(ny * 4);
      for (size_t i = 0; i < ny; i++) ag[i] = ac[i] = -7;
      run_maxpool_fwd(g_ctx, &g, B, x, y, ag);
      if (g_cuda) run_maxpool_fwd(g_cpu, &g, B, x, yc, ac);
      snprintf(what, sizeof what, "maxpool_fwd %s", geo);
      verify(what, ny, y, ymax, yc, zero, 0.0, 0.0);
      verify_bytes(what, ny, 4, ag, arg, ac);
      /* maxpool_bwd: dx = the gradients routed to each max, summed where windows overlap */
      double *dref = dzero(nx), *dscale = dzero(nx);
      for (size_t bc = 0; bc < (size_t)B * g.C; bc++)
        for (size_t o = 0; o < OP; o++)
          dref[bc * HW + arg[bc * OP + o]] += dy[bc * OP + o], dscale[bc * HW + arg[bc * OP + o]] += fabs(dy[bc * OP + o]);
      float *dx = fnan(nx), *dxc = g_cuda ? fnan(nx) : NULL;
      run_maxpool_bwd(g_ctx, &g, B, dy, arg, dx);
      if (g_cuda) run_maxpool_bwd(g_cpu, &g, B, dy, arg, dxc);
      snprintf(what, sizeof what, "maxpool_bwd %s", geo);
      /* sums of a few values, in any order (CUDA: atomics); no finite differences: a step may move the max */
      verify(what, nx, dx, dref, dxc, dscale, 1e-7, 1e-7);

      /* avgpool_fwd: the window's mean; avgpool_bwd: dy / (K*K) over each window, summed where they overlap */
      free(y), free(yc);
      y = fnan(ny), yc = g_cuda ? fnan(ny) : NULL;
      run_avgpool_fwd(g_ctx, &g, B, x, y);
      if (g_cuda) run_avgpool_fwd(g_cpu, &g, B, x, yc);
      snprintf(what, sizeof what, "avgpool_fwd %s", geo);
      verify(what, ny, y, yavg, yc, yscale, 1e-6, 1e-7); /* fp32 sums of K*K values, the same order on both */
      memset(dref, 0, nx * sizeof *dref), memset(dscale, 0, nx * sizeof *dscale);
      for (size_t bc = 0; bc < (size_t)B * g.C; bc++)
        for (int oh = 0; oh < g.OH; oh++)
          for (int ow = 0; ow < g.OW; ow++)
            for (int a = 0; a < g.K; a++)
              for (int e = 0; e < g.K; e++) {
                size_t i = bc * HW + (size_t)(oh * g.stride + a) * g.W + ow * g.stride + e;
                double v = dy[bc * OP + (size_t)oh * g.OW + ow];
                dref[i] += v / KK, dscale[i] += fabs(v) / KK;
              }
      free(dx), free(dxc);
      dx = fnan(nx), dxc = g_cuda ? fnan(nx) : NULL;
      run_avgpool_bwd(g_ctx, &g, B, dy, dx);
      if (g_cuda) run_avgpool_bwd(g_cpu, &g, B, dy, dxc);
      snprintf(what, sizeof what, "avgpool_bwd %s", geo);
      verify(what, nx, dx, dref, dxc, dscale, 1e-6, 1e-7); /* uncovered inputs: exactly 0 */
      if (!g_cuda && nx <= 600) {
        pool_fd pf = {&g, B, 1, dy};
        check_fd(what, nx, x, dx, pool_loss, &pf, 1e-2, 2e-4, 1e-3); /* linear: only float noise */
      }
      free(x), free(dy), free(ymax), free(yavg), free(yscale), free(zero), free(arg), free(y), free(yc), free(ag);
      free(ac), free(dref), free(dscale), free(dx), free(dxc);
    }
}

/* (B, C, P): rows = B*C planes of P */
static const int k_pm[][3] = {{1, 1, 1},   {7, 1, 3},    {4, 16, 31}, {5, 1, 32},
                              {10, 13, 33}, {3, 1, 1000}, {3, 64, 49}, {2, 1, 70000}};

static void run_plane_mean_fwd(lam_ctx *ctx, int B, int C, int P, const float *x, float *y) {
  size_t rows = (size_t)B * C;
  float *dx = dput(ctx, x, rows * P * 4), *dy = dput(ctx, y, rows * 4);
  void *fx = fin(ctx, dx, B, C, P), *fy = fin(ctx, dy, B, C, 1);
  TU_OK(BE(ctx)->plane_mean_fwd(ctx, g_fmt, B, C, P, fx, fy));
  fout(ctx, fx, dx, B, C, P, "plane_mean_fwd x (format)"), fout(ctx, fy, dy, B, C, 1, "plane_mean_fwd (format)");
  dget(ctx, y, dy, rows * 4, "plane_mean_fwd");
  dfree(ctx, dx), dfree(ctx, dy);
}
static void run_plane_mean_bwd(lam_ctx *ctx, int B, int C, int P, const float *dy, float *dx) {
  size_t rows = (size_t)B * C;
  float *ddy = dput(ctx, dy, rows * 4), *ddx = dput(ctx, dx, rows * P * 4);
  void *fdy = fin(ctx, ddy, B, C, 1), *fdx = fin(ctx, ddx, B, C, P);
  TU_OK(BE(ctx)->plane_mean_bwd(ctx, g_fmt, B, C, P, fdy, fdx));
  fout(ctx, fdy, ddy, B, C, 1, "plane_mean_bwd dy (format)"), fout(ctx, fdx, ddx, B, C, P, "plane_mean_bwd (format)");
  dget(ctx, dx, ddx, rows * P * 4, "plane_mean_bwd");
  dfree(ctx, ddy), dfree(ctx, ddx);
}

typedef struct pm_fd {
  size_t rows;
  int P;
  const float *w;
} pm_fd;
static void pm_loss(const void *a, const float *x, double *loss) {
  const pm_fd *p = a;
  float *y = fnan(p->rows);
  TU_OK(BE(g_ctx)->plane_mean_fwd(g_ctx, LAM_FMT_NCHW, (int)p->rows, 1, p->P, x, y));
  double s = 0;
  for (size_t r = 0; r < p->rows; r++) s += (double)p->w[r] * y[r];
  *loss = s;
  free(y);
}

static void test_plane_mean(void **state) {
  (void)state;
  for (size_t s = 0; s < sizeof k_pm / sizeof k_pm[0]; s++) {
    seed_case("plane_mean", s);
    const int B = k_pm[s][0], C = k_pm[s][1], P = k_pm[s][2];
    size_t rows = (size_t)B * C, n = rows * P;
    char what[120];
    float *x = frand(n, -2, 2), *dy = frand(rows, -1, 1);
    double *ref = dzero(rows), *scale = dzero(rows), *dref = dzero(n);
    for (size_t r = 0; r < rows; r++) {
      for (int p = 0; p < P; p++) ref[r] += x[r * P + p], scale[r] += fabs(x[r * P + p]);
      ref[r] /= P, scale[r] /= P;
      for (int p = 0; p < P; p++) dref[r * P + p] = (double)dy[r] / P;
    }
    float *y = fnan(rows), *yc = g_cuda ? fnan(rows) : NULL;
    run_plane_mean_fwd(g_ctx, B, C, P, x, y);
    if (g_cuda) run_plane_mean_fwd(g_cpu, B, C, P, x, yc);
    snprintf(what, sizeof what, "plane_mean_fwd rows=%zu P=%d", rows, P);
    verify(what, rows, y, ref, yc, scale, 2e-7, 1e-5); /* CPU: summed in double; CUDA: fp32 (warp lanes) */
    float *dx = fnan(n), *dxc = g_cuda ? fnan(n) : NULL;
    run_plane_mean_bwd(g_ctx, B, C, P, dy, dx);
    if (g_cuda) run_plane_mean_bwd(g_cpu, B, C, P, dy, dxc);
    snprintf(what, sizeof what, "plane_mean_bwd rows=%zu P=%d", rows, P);
    verify(what, n, dx, dref, dxc, NULL, 1e-7, 0.0); /* one rounded division, the same on both */
    if (!g_cuda && n <= 200) {
      pm_fd pf = {rows, P, dy};
      check_fd(what, n, x, dx, pm_loss, &pf, 1e-2, 2e-4, 1e-3);
    }
    free(x), free(dy), free(ref), free(scale), free(dref), free(y), free(yc), free(dx), free(dxc);
  }
}

/* ---- tpool: (B*T, S) rows of frames -> (B, S), mean or max over each clip's T frames ---- */
static const int k_tp[][3] = {{1, 2, 1}, {3, 16, 10}, {2, 5, 784}, {4, 3, 4097}, {1, 255, 7}};

static void run_tpool(lam_ctx *ctx, int bwd, int B, int T, size_t S, int max, const float *in, uint8_t *arg, float *out) {
  const size_t big = (size_t)B * T * S, small = (size_t)B * S, nin = bwd ? small : big, nout = bwd ? big : small;
  float *di = dput(ctx, in, nin * 4), *dout = dput(ctx, out, nout * 4);
  uint8_t *da = dput(ctx, arg, small);
  void *fi = fin_flat(ctx, di, nin), *fo = fin_flat(ctx, dout, nout);
  if (bwd) TU_OK(BE(ctx)->tpool_bwd(ctx, g_fmt, B, T, S, max, fi, da, fo));
  else TU_OK(BE(ctx)->tpool_fwd(ctx, g_fmt, B, T, S, max, fi, fo, da));
  fout_flat(ctx, fi, di, nin, "tpool in (format)"), fout_flat(ctx, fo, dout, nout, "tpool out (format)");
  dget(ctx, out, dout, nout * 4, bwd ? "tpool_bwd" : "tpool_fwd");
  dget(ctx, arg, da, small, "tpool arg");
  dfree(ctx, di), dfree(ctx, dout), dfree(ctx, da);
}

typedef struct tp_fd {
  int B, T;
  size_t S;
  const float *w;
} tp_fd;
static void tp_loss(const void *a, const float *x, double *loss) { /* the mean's: linear in x */
  const tp_fd *p = a;
  float *y = fnan((size_t)p->B * p->S);
  uint8_t arg[1];
  TU_OK(BE(g_ctx)->tpool_fwd(g_ctx, LAM_FMT_NCHW, p->B, p->T, p->S, 0, x, y, arg));
  double s = 0;
  for (size_t i = 0; i < (size_t)p->B * p->S; i++) s += (double)p->w[i] * y[i];
  *loss = s;
  free(y);
}

static void test_tpool(void **state) {
  (void)state;
  for (size_t s = 0; s < sizeof k_tp / sizeof k_tp[0]; s++)
    for (int max = 0; max < 2; max++) {
      seed_case("tpool", s);
      const int B = k_tp[s][0], T = k_tp[s][1];
      const size_t S = (size_t)k_tp[s][2], n = (size_t)B * T * S, ny = (size_t)B * S;
      float *x = frand(n, -2, 2), *dy = frand(ny, -1, 1);
      double *ref = dzero(ny), *scale = dzero(ny), *dref = dzero(n);
      uint8_t *aref = xmalloc(ny);
      for (int b = 0; b < B; b++)
        for (size_t v = 0; v < S; v++) {
          const size_t o = (size_t)b * S + v;
          double m = x[(size_t)b * T * S + v];
          int best = 0;
          for (int t = 0; t < T; t++) {
            const double u = x[((size_t)b * T + t) * S + v];
            if (max && u > m) m = u, best = t;
            if (!max) ref[o] += u / T, scale[o] += fabs(u) / T;
          }
          if (max) ref[o] = m, scale[o] = fabs(m), aref[o] = (uint8_t)best;
          for (int t = 0; t < T; t++)
            dref[((size_t)b * T + t) * S + v] = max ? (t == best ? dy[o] : 0.0) : (double)dy[o] / T;
        }
      char what[120];
      snprintf(what, sizeof what, "tpool_fwd %s B=%d T=%d S=%zu", max ? "max" : "mean", B, T, S);
      float *y = fnan(ny), *yc = g_cuda ? fnan(ny) : NULL;
      uint8_t *a = u8rand(ny, 0, 255), *ac = u8rand(ny, 0, 255);
      run_tpool(g_ctx, 0, B, T, S, max, x, a, y);
      if (g_cuda) run_tpool(g_cpu, 0, B, T, S, max, x, ac, yc);
      /* the mean: T float additions in order on both backends; the max exactly */
      verify(what, ny, y, ref, yc, scale, max ? 0.0 : 4e-7 * T, max ? 0.0 : 1e-7 * T);
      if (max) verify_bytes(what, ny, 1, a, aref, ac);
      snprintf(what, sizeof what, "tpool_bwd %s B=%d T=%d S=%zu", max ? "max" : "mean", B, T, S);
      float *dx = fnan(n), *dxc = g_cuda ? fnan(n) : NULL;
      if (g_cuda) memcpy(ac, a, ny); /* the same argmax for both (checked above) */
      run_tpool(g_ctx, 1, B, T, S, max, dy, a, dx);
      if (g_cuda) run_tpool(g_cpu, 1, B, T, S, max, dy, ac, dxc);
      verify(what, n, dx, dref, dxc, NULL, 1e-7, 0.0); /* a copy or one rounded division */
      if (!g_cuda && !max && n <= 200) {
        tp_fd pf = {B, T, S, dy};
        check_fd(what, n, x, dx, tp_loss, &pf, 1e-2, 2e-4, 1e-3);
      }
      free(x), free(dy), free(ref), free(scale), free(dref), free(aref), free(y), free(yc), free(a), free(ac), free(dx);
      free(dxc);
    }
}

static const int k_up[][5] = {{1, 1, 1, 1, 2}, {2, 3, 5, 7, 2}, {3, 64, 4, 4, 3}, {2, 1, 9, 1, 1}, {1, 2, 3, 2, 4}};

static void run_upsample(lam_ctx *ctx, int bwd, int B, int C, int H, int W, int F, const float *in, float *out) {
  size_t small = (size_t)B * C * H * W, big = small * F * F, nin = bwd ? big : small, nout = bwd ? small : big;
  float *di = dput(ctx, in, nin * 4), *dout = dput(ctx, out, nout * 4);
  const size_t pin = nin / B / C, pout = nout / B / C;
  void *fi = fin(ctx, di, B, C, pin), *fo = fin(ctx, dout, B, C, pout);
  if (bwd) TU_OK(BE(ctx)->upsample_bwd(ctx, g_fmt, B, C, H, W, F, fi, fo));
  else TU_OK(BE(ctx)->upsample_fwd(ctx, g_fmt, B, C, H, W, F, fi, fo));
  fout(ctx, fi, di, B, C, pin, "upsample in (format)"), fout(ctx, fo, dout, B, C, pout, "upsample out (format)");
  dget(ctx, out, dout, nout * 4, bwd ? "upsample_bwd" : "upsample_fwd");
  dfree(ctx, di), dfree(ctx, dout);
}

typedef struct up_fd {
  int B, C, H, W, F;
  const float *w;
} up_fd;
static void up_loss(const void *a, const float *x, double *loss) {
  const up_fd *u = a;
  size_t big = (size_t)u->B * u->C * u->H * u->W * u->F * u->F;
  float *y = fnan(big);
  TU_OK(BE(g_ctx)->upsample_fwd(g_ctx, LAM_FMT_NCHW, u->B, u->C, u->H, u->W, u->F, x, y));
  double s = 0;
  for (size_t i = 0; i < big; i++) s += (double)u->w[i] * y[i];
  *loss = s;
  free(y);
}

static void test_upsample(void **state) {
  (void)state;
  for (size_t s = 0; s < sizeof k_up / sizeof k_up[0]; s++) {
    seed_case("upsample", s);
    int B = k_up[s][0], C = k_up[s][1], H = k_up[s][2], W = k_up[s][3], F = k_up[s][4];
    size_t small = (size_t)B * C * H * W, big = small * F * F, OW = (size_t)W * F, OH = (size_t)H * F;
    char what[120];
    float *x = frand(small, -2, 2), *dy = frand(big, -1, 1);
    double *ref = dzero(big), *zero = dzero(big), *dref = dzero(small), *dscale = dzero(small);
    for (size_t bc = 0; bc < (size_t)B * C; bc++)
      for (size_t oh = 0; oh < OH; oh++)
        for (size_t ow = 0; ow < OW; ow++) {
          size_t o = (bc * OH + oh) * OW + ow, i = (bc * H + oh / F) * W + ow / F;
          ref[o] = x[i], dref[i] += dy[o], dscale[i] += fabs(dy[o]);
        }
    float *y = fnan(big), *yc = g_cuda ? fnan(big) : NULL;
    run_upsample(g_ctx, 0, B, C, H, W, F, x, y);
    if (g_cuda) run_upsample(g_cpu, 0, B, C, H, W, F, x, yc);
    snprintf(what, sizeof what, "upsample_fwd B=%d C=%d H=%d W=%d F=%d", B, C, H, W, F);
    verify(what, big, y, ref, yc, zero, 0.0, 0.0); /* copies: exact */
    float *dx = fnan(small), *dxc = g_cuda ? fnan(small) : NULL;
    run_upsample(g_ctx, 1, B, C, H, W, F, dy, dx);
    if (g_cuda) run_upsample(g_cpu, 1, B, C, H, W, F, dy, dxc);
    snprintf(what, sizeof what, "upsample_bwd B=%d C=%d H=%d W=%d F=%d", B, C, H, W, F);
    verify(what, small, dx, dref, dxc, dscale, 1e-6, 0.0); /* fp32 sums of F*F values, the same order on both */
    if (!g_cuda && small <= 200) {
      up_fd uf = {B, C, H, W, F, dy};
      check_fd(what, small, x, dx, up_loss, &uf, 1e-2, 2e-4, 1e-3);
    }
    free(x), free(dy), free(ref), free(zero), free(dref), free(dscale), free(y), free(yc), free(dx), free(dxc);
  }
}

/* ---- activations ---- */

static void run_act(lam_ctx *ctx, int bwd, int act, float alpha, size_t n, const float *x, const float *y,
                    const float *dy, float *out, int inplace) {
  float *dx_ = dput(ctx, x, n * 4), *dy_ = dput(ctx, y, n * 4), *dg = dput(ctx, dy, n * 4), *dout;
  /* in place: forward writes over x, backward over dy */
  dout = inplace ? (bwd ? dg : dx_) : dput(ctx, out, n * 4);
  void *fx = fin_flat(ctx, dx_, n), *fy = fin_flat(ctx, dy_, n), *fg = fin_flat(ctx, dg, n);
  void *fo = inplace ? (bwd ? fg : fx) : fin_flat(ctx, dout, n);
  if (bwd) TU_OK(BE(ctx)->act_bwd(ctx, g_fmt, act, alpha, n, act == LAM_ACT_GELU ? fx : NULL, act == LAM_ACT_GELU ? NULL : fy,
                                  fg, fo));
  else TU_OK(BE(ctx)->act_fwd(ctx, g_fmt, act, alpha, n, fx, fo));
  if (!inplace) fout_flat(ctx, fo, dout, n, "act out (format)");
  fout_flat(ctx, fx, dx_, n, "act x (format)"), fout_flat(ctx, fy, dy_, n, "act y (format)");
  fout_flat(ctx, fg, dg, n, "act dy (format)");
  dget(ctx, out, dout, n * 4, bwd ? "act_bwd" : "act_fwd");
  dfree(ctx, dx_), dfree(ctx, dy_), dfree(ctx, dg);
  if (!inplace) dfree(ctx, dout);
}

typedef struct act_fd {
  int act;
  float alpha;
} act_fd;
static void act_loss(const void *a, const float *x, double *loss) { /* x is one value here */
  const act_fd *f = a;
  float y;
  TU_OK(BE(g_ctx)->act_fwd(g_ctx, LAM_FMT_NCHW, f->act, f->alpha, 1, x, &y));
  *loss = y;
}

static void test_act(void **state) {
  (void)state;
  static const size_t ns[] = {1, 37, 40000};
  const float alpha = 0.07f;
  uint64_t k = 0;
  for (int act = 0; act <= LAM_ACT_LEAKY; act++)
    for (size_t c = 0; c < 3; c++)
      for (int inplace = 0; inplace < 2; inplace++) {
        seed_case("act", k++);
        size_t n = ns[c];
        char what[120];
        float *x = frand(n, -5, 5), *dy = frand(n, -1, 1);
        double *ref = dzero(n), *scale = dzero(n), *gref = dzero(n), *gscale = dzero(n);
        float *yf = xmalloc(n * 4); /* the float output the backward reads */
        for (size_t i = 0; i < n; i++) {
          ref[i] = act_ref(act, alpha, x[i]);
          yf[i] = (float)ref[i];
          /* gelu's 1 + erf(x / sqrt 2) cancels for negative x: its error is of x's size */
          scale[i] = act == LAM_ACT_GELU ? fabs(x[i]) : fabs(ref[i]);
          double y = yf[i];
          switch (act) { /* from the output y (as the primitive), or x for gelu */
            case LAM_ACT_RELU: gref[i] = y > 0 ? dy[i] : 0; break;
            case LAM_ACT_LEAKY: gref[i] = y > 0 ? dy[i] : (double)alpha * dy[i]; break;
            case LAM_ACT_TANH: gref[i] = dy[i] * (1 - y * y); break;
            case LAM_ACT_SIGMOID: gref[i] = dy[i] * y * (1 - y); break;
            default: gref[i] = dy[i] * act_grad_ref(act, alpha, x[i]);
          }
          /* 1 - y^2 and y (1 - y) lose digits near saturation: the error is of |dy| times the terms' size */
          gscale[i] = act == LAM_ACT_RELU || act == LAM_ACT_LEAKY ? fabs(gref[i]) : fabs(dy[i]) * (fabs(gref[i] / dy[i]) + 1);
        }
        float *got = fnan(n), *cpu = g_cuda ? fnan(n) : NULL;
        run_act(g_ctx, 0, act, alpha, n, x, NULL, NULL, got, inplace);
        if (g_cuda) run_act(g_cpu, 0, act, alpha, n, x, NULL, NULL, cpu, inplace);
        snprintf(what, sizeof what, "act_fwd %s n=%zu%s", act_name(act), n, inplace ? " in place" : "");
        /* float tanhf, expf, erff: a few ulps (CUDA's within 2 ulps of the correctly rounded value) */
        verify(what, n, got, ref, cpu, scale, 1e-6, 2e-6);
        free(got), free(cpu);
        got = fnan(n), cpu = g_cuda ? fnan(n) : NULL;
        run_act(g_ctx, 1, act, alpha, n, x, yf, dy, got, inplace);
        if (g_cuda) run_act(g_cpu, 1, act, alpha, n, x, yf, dy, cpu, inplace);
        snprintf(what, sizeof what, "act_bwd %s n=%zu%s", act_name(act), n, inplace ? " in place" : "");
        verify(what, n, got, gref, cpu, gscale, 1e-6, 2e-6);
        if (!g_cuda && n == 37 && !inplace) { /* act_bwd(dy = 1) against central differences of act_fwd */
          float *one = xmalloc(n * 4), *g1 = fnan(n);
          for (size_t i = 0; i < n; i++) {
            one[i] = 1.0f;
            if (fabsf(x[i]) < 0.1f) x[i] = x[i] < 0 ? -0.5f : 0.5f; /* away from relu's and leaky's kink */
            yf[i] = (float)act_ref(act, alpha, x[i]);
          }
          run_act(g_ctx, 1, act, alpha, n, x, yf, one, g1, 0);
          act_fd af = {act, alpha};
          for (size_t i = 0; i < n; i++) check_fd(what, 1, x + i, g1 + i, act_loss, &af, 1e-2, 1e-4, 1e-3);
          free(one), free(g1);
        }
        free(x), free(dy), free(ref), free(scale), free(gref), free(gscale), free(yf), free(got), free(cpu);
      }
}

/* ---- BatchNorm ---- */

typedef struct bn_ref {
  double *mean, *var, *invstd; /* per channel */
} bn_ref;

static void bn_stats(int B, int C, int P, const float *x, bn_ref *r) {
  r->mean = dzero(C), r->var = dzero(C), r->invstd = dzero(C);
  double N = (double)B * P;
  for (int c = 0; c < C; c++) {
    double s = 0, v = 0;
    for (int b = 0; b < B; b++)
      for (int p = 0; p < P; p++) s += x[((size_t)b * C + c) * P + p];
    r->mean[c] = s / N;
    for (int b = 0; b < B; b++)
      for (int p = 0; p < P; p++) {
        double d = x[((size_t)b * C + c) * P + p] - r->mean[c];
        v += d * d;
      }
    r->var[c] = v / N;
  }
}
static void bn_ref_free(bn_ref *r) { free(r->mean), free(r->var), free(r->invstd); }

typedef struct bn_bufs { /* host copies of every output */
  float *y, *mean, *invstd, *rm, *rv;
} bn_bufs;

/* A BatchNorm forward's statistics against their references (and CUDA's against the CPU's): training saves the
 * batch mean and invstd and moves the running statistics; evaluation leaves them exactly as they were. */
static void verify_bn_stats(const char *op, const char *geo, int C, int train, const bn_bufs *o, const bn_bufs *oc,
                            const double *mref, const double *mscale, const double *iref, const double *rmref,
                            const double *rmscale, const double *rvref, const double *zero) {
  char what[200];
  if (train) {
    snprintf(what, sizeof what, "%s mean %s", op, geo);
    verify(what, C, o->mean, mref, oc->mean, mscale, 1e-7, 1e-6);
    snprintf(what, sizeof what, "%s invstd %s", op, geo);
    verify(what, C, o->invstd, iref, oc->invstd, NULL, 2e-7, 1e-5);
    snprintf(what, sizeof what, "%s run_mean %s", op, geo);
    verify(what, C, o->rm, rmref, oc->rm, rmscale, 2e-7, 1e-6);
    snprintf(what, sizeof what, "%s run_var %s", op, geo);
    verify(what, C, o->rv, rvref, oc->rv, NULL, 5e-7, 2e-5);
  } else { /* eval: the running statistics are left as they are */
    snprintf(what, sizeof what, "%s run_mean %s", op, geo);
    verify(what, C, o->rm, rmref, oc->rm, zero, 0.0, 0.0);
    snprintf(what, sizeof what, "%s run_var %s", op, geo);
    verify(what, C, o->rv, rvref, oc->rv, zero, 0.0, 0.0);
  }
}

static void run_bn_fwd(lam_ctx *ctx, int B, int C, int P, const float *x, const float *gamma, const float *beta,
                       bn_bufs *o, float momentum, float eps, int train, int inplace) {
  size_t n = (size_t)B * C * P, cb = (size_t)C * 4;
  float *dx = dput(ctx, x, n * 4), *dg = dput(ctx, gamma, cb), *db = dput(ctx, beta, cb);
  float *dy = inplace ? dx : dput(ctx, o->y, n * 4);
  float *dm = train ? dput(ctx, o->mean, cb) : NULL, *di = train ? dput(ctx, o->invstd, cb) : NULL;
  float *drm = dput(ctx, o->rm, cb), *drv = dput(ctx, o->rv, cb);
  void *fx = fin(ctx, dx, B, C, P), *fy = inplace ? fx : fin(ctx, dy, B, C, P);
  TU_OK(BE(ctx)->bn_fwd(ctx, g_fmt, B, C, P, fx, dg, db, fy, dm, di, drm, drv, momentum, eps, train));
  if (!inplace) fout(ctx, fx, dx, B, C, P, "bn_fwd x (format)");
  fout(ctx, fy, dy, B, C, P, "bn_fwd y (format)");
  dget(ctx, o->y, dy, n * 4, "bn_fwd y");
  if (train) dget(ctx, o->mean, dm, cb, "bn_fwd mean"), dget(ctx, o->invstd, di, cb, "bn_fwd invstd");
  dget(ctx, o->rm, drm, cb, "bn_fwd run_mean");
  dget(ctx, o->rv, drv, cb, "bn_fwd run_var");
  dfree(ctx, dx), dfree(ctx, dg), dfree(ctx, db), dfree(ctx, dm), dfree(ctx, di), dfree(ctx, drm), dfree(ctx, drv);
  if (!inplace) dfree(ctx, dy);
}

static void run_bn_bwd(lam_ctx *ctx, int B, int C, int P, const float *x, const float *dy, const float *gamma,
                       const float *mean, const float *invstd, float *dx, float *dgamma, float *dbeta, int inplace) {
  size_t n = (size_t)B * C * P, cb = (size_t)C * 4;
  float *d_x = dput(ctx, x, n * 4), *d_dy = dput(ctx, dy, n * 4), *d_g = dput(ctx, gamma, cb);
  float *d_m = dput(ctx, mean, cb), *d_i = dput(ctx, invstd, cb), *d_dg = dput(ctx, dgamma, cb),
        *d_db = dput(ctx, dbeta, cb);
  float *d_dx = inplace ? d_dy : dput(ctx, dx, n * 4);
  void *fx = fin(ctx, d_x, B, C, P), *fdy = fin(ctx, d_dy, B, C, P), *fdx = inplace ? fdy : fin(ctx, d_dx, B, C, P);
  TU_OK(BE(ctx)->bn_bwd(ctx, g_fmt, B, C, P, fx, fdy, d_g, d_m, d_i, fdx, d_dg, d_db));
  fout(ctx, fx, d_x, B, C, P, "bn_bwd x (format)");
  if (!inplace) fout(ctx, fdy, d_dy, B, C, P, "bn_bwd dy (format)");
  fout(ctx, fdx, d_dx, B, C, P, "bn_bwd dx (format)");
  dget(ctx, dx, d_dx, n * 4, "bn_bwd dx");
  dget(ctx, dgamma, d_dg, cb, "bn_bwd dgamma");
  dget(ctx, dbeta, d_db, cb, "bn_bwd dbeta");
  dfree(ctx, d_x), dfree(ctx, d_dy), dfree(ctx, d_g), dfree(ctx, d_m), dfree(ctx, d_i), dfree(ctx, d_dg), dfree(ctx, d_db);
  if (!inplace) dfree(ctx, d_dx);
}

/* For the finite differences: L = sum(w * y) of a training-mode forward, as a function of x, gamma or beta. */
typedef struct bn_fd {
  int B, C, P, wrt; /* 0: x, 1: gamma, 2: beta */
  const float *x, *gamma, *beta, *w;
} bn_fd;
static void bn_loss(const void *a, const float *v, double *loss) {
  const bn_fd *f = a;
  size_t n = (size_t)f->B * f->C * f->P;
  float *y = fnan(n), *m = fnan(f->C), *is = fnan(f->C), *rm = frand(f->C, 0, 1), *rv = frand(f->C, 1, 2);
  TU_OK(BE(g_ctx)->bn_fwd(g_ctx, LAM_FMT_NCHW, f->B, f->C, f->P, f->wrt == 0 ? v : f->x, f->wrt == 1 ? v : f->gamma,
                   f->wrt == 2 ? v : f->beta, y, m, is, rm, rv, 0.1f, 1e-5f, 1));
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)f->w[i] * y[i];
  *loss = s;
  free(y), free(m), free(is), free(rm), free(rv);
}

static void test_bn(void **state) {
  (void)state;
  const float momentum = 0.1f, eps = 1e-5f;
  for (size_t s = 0; s < N_BCP; s++)
    for (int mode = 0; mode < 3; mode++) { /* train, train in place (y = x, dx = dy), eval */
      seed_case("bn", 3 * s + mode);
      int B = k_bcp[s].B, C = k_bcp[s].C, P = k_bcp[s].P, train = mode < 2, inplace = mode == 1;
      size_t n = (size_t)B * C * P;
      double N = (double)B * P;
      char what[160], geo[100];
      snprintf(geo, sizeof geo, "B=%d C=%d P=%d %s", B, C, P, mode == 0 ? "train" : mode == 1 ? "train in place" : "eval");
      /* each channel its own offset and spread; one case far from 0 against its spread */
      float *x = xmalloc(n * 4), *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -1, 1);
      double *off = dzero(C), *spread = dzero(C);
      for (int c = 0; c < C; c++) {
        off[c] = s == 7 ? 100.0 + c : U(-3, 3), spread[c] = U(0.2, 2);
        if (tu_next(&g_r) & 1) gamma[c] = -gamma[c];
      }
      for (size_t i = 0; i < n; i++) x[i] = (float)(off[i / P % C] + spread[i / P % C] * fr(-1, 1));
      float *rm0 = frand(C, -1, 1), *rv0 = frand(C, 0.5, 2);
      bn_ref r;
      bn_stats(B, C, P, x, &r);
      double *yref = dzero(n), *yscale = dzero(n), *mref = dzero(C), *mscale = dzero(C), *iref = dzero(C),
             *rmref = dzero(C), *rmscale = dzero(C), *rvref = dzero(C), *zero = dzero(C);
      for (int c = 0; c < C; c++) {
        double m = train ? r.mean[c] : rm0[c], is = train ? 1 / sqrt(r.var[c] + eps) : 1 / sqrt((double)rv0[c] + eps);
        r.invstd[c] = is;
        mref[c] = r.mean[c], mscale[c] = fabs(r.mean[c]) + sqrt(r.var[c]), iref[c] = is;
        double uv = N > 1 ? r.var[c] * N / (N - 1) : r.var[c];
        rmref[c] = train ? (1 - momentum) * (double)rm0[c] + momentum * r.mean[c] : rm0[c];
        rmscale[c] = train ? fabs(rmref[c]) + momentum * mscale[c] : 0;
        rvref[c] = train ? (1 - momentum) * (double)rv0[c] + momentum * uv : rv0[c];
        for (int b = 0; b < B; b++)
          for (int p = 0; p < P; p++) {
            size_t o = ((size_t)b * C + c) * P + p;
            double xh = (x[o] - m) * is;
            yref[o] = xh * gamma[c] + beta[c];
            /* the float (x - mean) invstd gamma + beta; the mean's own error enters as mean * invstd * gamma */
            yscale[o] = fabs(xh * gamma[c]) + fabs(beta[c]) + fabs(gamma[c]) * (1 + fabs(m) * is);
          }
      }
      bn_bufs o = {fnan(n), fnan(C), fnan(C), fdup(rm0, C), fdup(rv0, C)}, oc = {0};
      if (inplace) memcpy(o.y, x, n * 4);
      run_bn_fwd(g_ctx, B, C, P, x, gamma, beta, &o, momentum, eps, train, inplace);
      if (g_cuda) {
        oc = (bn_bufs){fnan(n), fnan(C), fnan(C), fdup(rm0, C), fdup(rv0, C)};
        if (inplace) memcpy(oc.y, x, n * 4);
        run_bn_fwd(g_cpu, B, C, P, x, gamma, beta, &oc, momentum, eps, train, inplace);
      }
      /* the CPU's statistics are float64 sums; CUDA's fp32 shifted sums over blocks, in float64 at the end */
      snprintf(what, sizeof what, "bn_fwd y %s", geo);
      verify(what, n, o.y, yref, oc.y, yscale, 2e-6, 2e-5);
      verify_bn_stats("bn_fwd", geo, C, train, &o, &oc, mref, mscale, iref, rmref, rmscale, rvref, zero);

      /* bn_bwd from the statistics of x (as float, as bn_fwd saves them) */
      if (train) {
        float *mf = xmalloc(C * 4), *isf = xmalloc(C * 4), *dy = frand(n, -1, 1), *dg0 = frand(C, -1, 1),
              *db0 = frand(C, -1, 1);
        for (int c = 0; c < C; c++) mf[c] = (float)r.mean[c], isf[c] = (float)(1 / sqrt(r.var[c] + eps));
        double *dxref = dzero(n), *dxscale = dzero(n), *dgref = dzero(C), *dgscale = dzero(C), *dbref = dzero(C),
               *dbscale = dzero(C);
        for (int c = 0; c < C; c++) {
          double s1 = 0, s2 = 0, a1 = 0, a2 = 0;
          for (int b = 0; b < B; b++)
            for (int p = 0; p < P; p++) {
              size_t q = ((size_t)b * C + c) * P + p;
              double xh = ((double)x[q] - mf[c]) * isf[c];
              s1 += dy[q], s2 += dy[q] * xh, a1 += fabs(dy[q]), a2 += fabs(dy[q] * xh);
            }
          dgref[c] = dg0[c] + s2, dgscale[c] = fabs(dg0[c]) + a2;
          dbref[c] = db0[c] + s1, dbscale[c] = fabs(db0[c]) + a1;
          double kk = (double)gamma[c] * isf[c];
          for (int b = 0; b < B; b++)
            for (int p = 0; p < P; p++) {
              size_t q = ((size_t)b * C + c) * P + p;
              double xh = ((double)x[q] - mf[c]) * isf[c];
              dxref[q] = kk * (dy[q] - s1 / N - xh * s2 / N);
              dxscale[q] = fabs(kk) * (fabs(dy[q]) + a1 / N + fabs(xh) * (1 + a2 / N) + fabs(mf[c]) * isf[c] * a2 / N);
            }
        }
        float *dx = inplace ? fdup(dy, n) : fnan(n), *dgg = fdup(dg0, C), *dbg = fdup(db0, C);
        float *dxc = NULL, *dgc = NULL, *dbc = NULL;
        run_bn_bwd(g_ctx, B, C, P, x, dy, gamma, mf, isf, dx, dgg, dbg, inplace);
        if (g_cuda) {
          dxc = inplace ? fdup(dy, n) : fnan(n), dgc = fdup(dg0, C), dbc = fdup(db0, C);
          run_bn_bwd(g_cpu, B, C, P, x, dy, gamma, mf, isf, dxc, dgc, dbc, inplace);
        }
        snprintf(what, sizeof what, "bn_bwd dx %s", geo);
        verify(what, n, dx, dxref, dxc, dxscale, 1e-6, 2e-5);
        snprintf(what, sizeof what, "bn_bwd dgamma %s", geo);
        verify(what, C, dgg, dgref, dgc, dgscale, 2e-7, 1e-5);
        snprintf(what, sizeof what, "bn_bwd dbeta %s", geo);
        verify(what, C, dbg, dbref, dbc, dbscale, 2e-7, 1e-5);
        if (!g_cuda && !inplace && n <= 64 && B * P > 1) {
          /* d/dx, d/dgamma, d/dbeta of sum(dy * y) through the batch statistics, from bn_fwd itself */
          float *z = fdup(dg0, C), *zb = fdup(db0, C);
          for (int c = 0; c < C; c++) z[c] = 0, zb[c] = 0;
          float *dxn = fnan(n);
          run_bn_bwd(g_ctx, B, C, P, x, dy, gamma, o.mean, o.invstd, dxn, z, zb, 0);
          bn_fd f = {B, C, P, 0, x, gamma, beta, dy};
          float *v = fdup(x, n);
          check_fd(what, n, v, dxn, bn_loss, &f, 2e-2, 1e-3, 2e-3);
          free(v);
          f.wrt = 1, v = fdup(gamma, C);
          check_fd(what, C, v, z, bn_loss, &f, 2e-2, 1e-3, 2e-3);
          free(v);
          f.wrt = 2, v = fdup(beta, C);
          check_fd(what, C, v, zb, bn_loss, &f, 2e-2, 1e-3, 2e-3);
          free(v), free(z), free(zb), free(dxn);
        }
        free(mf), free(isf), free(dy), free(dg0), free(db0), free(dxref), free(dxscale), free(dgref), free(dgscale);
        free(dbref), free(dbscale), free(dx), free(dgg), free(dbg), free(dxc), free(dgc), free(dbc);
      }
      free(x), free(gamma), free(beta), free(off), free(spread), free(rm0), free(rv0), free(yref), free(yscale);
      free(mref), free(mscale), free(iref), free(rmref), free(rmscale), free(rvref), free(zero);
      free(o.y), free(o.mean), free(o.invstd), free(o.rm), free(o.rv);
      free(oc.y), free(oc.mean), free(oc.invstd), free(oc.rm), free(oc.rv);
      bn_ref_free(&r);
    }
}

/* ---- BatchNorm followed by an activation (bn_act_fwd, bn_act_bwd) ---- */

static void run_bn_act_fwd(lam_ctx *ctx, int B, int C, int P, int act, float alpha, const float *x, const float *gamma,
                           const float *beta, bn_bufs *o, float momentum, float eps, int train) {
  size_t n = (size_t)B * C * P, cb = (size_t)C * 4;
  float *dx = dput(ctx, x, n * 4), *dg = dput(ctx, gamma, cb), *db = dput(ctx, beta, cb), *dy = dput(ctx, o->y, n * 4);
  float *dm = train ? dput(ctx, o->mean, cb) : NULL, *di = train ? dput(ctx, o->invstd, cb) : NULL;
  float *drm = dput(ctx, o->rm, cb), *drv = dput(ctx, o->rv, cb);
  void *fx = fin(ctx, dx, B, C, P), *fy = fin(ctx, dy, B, C, P);
  TU_OK(BE(ctx)->bn_act_fwd(ctx, g_fmt, B, C, P, act, alpha, fx, NULL, dg, db, fy, dm, di, drm, drv, momentum, eps,
                            train));
  fout(ctx, fx, dx, B, C, P, "bn_act_fwd x (format)"), fout(ctx, fy, dy, B, C, P, "bn_act_fwd y (format)");
  dget(ctx, o->y, dy, n * 4, "bn_act_fwd y");
  if (train) dget(ctx, o->mean, dm, cb, "bn_act_fwd mean"), dget(ctx, o->invstd, di, cb, "bn_act_fwd invstd");
  dget(ctx, o->rm, drm, cb, "bn_act_fwd run_mean");
  dget(ctx, o->rv, drv, cb, "bn_act_fwd run_var");
  dfree(ctx, dx), dfree(ctx, dg), dfree(ctx, db), dfree(ctx, dy), dfree(ctx, dm), dfree(ctx, di), dfree(ctx, drm);
  dfree(ctx, drv);
}

/* y may be NULL (gelu); dx, dgamma, dbeta are read back. */
static void run_bn_act_bwd(lam_ctx *ctx, int B, int C, int P, int act, float alpha, const float *x, const float *y,
                           const float *dy, const float *gamma, const float *beta, const float *mean, const float *invstd,
                           float *dx, float *dgamma, float *dbeta) {
  size_t n = (size_t)B * C * P, cb = (size_t)C * 4;
  float *d_x = dput(ctx, x, n * 4), *d_y = dput(ctx, y, n * 4), *d_dy = dput(ctx, dy, n * 4), *d_g = dput(ctx, gamma, cb),
        *d_b = dput(ctx, beta, cb), *d_m = dput(ctx, mean, cb), *d_i = dput(ctx, invstd, cb);
  float *d_dx = dput(ctx, dx, n * 4), *d_dg = dput(ctx, dgamma, cb), *d_db = dput(ctx, dbeta, cb);
  void *fx = fin(ctx, d_x, B, C, P), *fy = fin(ctx, d_y, B, C, P), *fdy = fin(ctx, d_dy, B, C, P),
       *fdx = fin(ctx, d_dx, B, C, P);
  TU_OK(BE(ctx)->bn_act_bwd(ctx, g_fmt, B, C, P, act, alpha, fx, fy, fdy, d_g, d_b, d_m, d_i, fdx, NULL, 0, d_dg, d_db));
  fout(ctx, fx, d_x, B, C, P, "bn_act_bwd x (format)"), fout(ctx, fy, d_y, B, C, P, "bn_act_bwd y (format)");
  fout(ctx, fdy, d_dy, B, C, P, "bn_act_bwd dy (format)"), fout(ctx, fdx, d_dx, B, C, P, "bn_act_bwd dx (format)");
  dget(ctx, dx, d_dx, n * 4, "bn_act_bwd dx");
  dget(ctx, dgamma, d_dg, cb, "bn_act_bwd dgamma");
  dget(ctx, dbeta, d_db, cb, "bn_act_bwd dbeta");
  dfree(ctx, d_x), dfree(ctx, d_y), dfree(ctx, d_dy), dfree(ctx, d_g), dfree(ctx, d_b), dfree(ctx, d_m), dfree(ctx, d_i);
  dfree(ctx, d_dx), dfree(ctx, d_dg), dfree(ctx, d_db);
}

/* For the finite differences: L = sum(w * y) of a training-mode bn_act_fwd, as a function of x, gamma or
 * beta (the array check_fd moves is v, read whole through base: check_fd is called one element at a time). */
typedef struct bn_act_fd {
  int B, C, P, act, wrt; /* wrt 0: x, 1: gamma, 2: beta */
  float alpha;
  const float *x, *gamma, *beta, *w;
} bn_act_fd;
static void bn_act_loss(const void *a, const float *v, double *loss) {
  const bn_act_fd *f = a;
  size_t n = (size_t)f->B * f->C * f->P;
  float *y = fnan(n), *m = fnan(f->C), *is = fnan(f->C), *rm = frand(f->C, 0, 1), *rv = frand(f->C, 1, 2);
  TU_OK(BE(g_ctx)->bn_act_fwd(g_ctx, LAM_FMT_NCHW, f->B, f->C, f->P, f->act, f->alpha, f->wrt == 0 ? v : f->x, NULL,
                              f->wrt == 1 ? v : f->gamma, f->wrt == 2 ? v : f->beta, y, m, is, rm, rv, 0.1f, 1e-5f, 1));
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)f->w[i] * y[i];
  *loss = s;
  free(y), free(m), free(is), free(rm), free(rv);
}

/* Sync BatchNorm's three primitives (the ranks' BatchNorm sums between them, nn/ops/norm.c), each against a float64
 * reference on fresh inputs: bn_sums of x (sum, sum of squares per channel) and of dy (sum, sum of dy xhat, also added
 * into dgamma and dbeta); bn_sync_stats from given sums (mean, invstd, biased var, the running statistics with the
 * unbiased var); bn_sync_dx from given sums and N, with gamma and without. Channels far from 0 and with a spread of
 * their own; outputs start as NaN, so an element not written fails. */
/* ---- BatchNorm, a residual add and its activation in one (bn_act_fwd with r, bn_act_bwd with dr): against
 * bn_fwd + add + act_fwd and act_bwd + (dr = or += dz) + bn_bwd on the same backend, in the format under test; and
 * CUDA's against the CPU's. Each composite step rounds to float where the fused pass keeps the value in a register
 * (z, z + r), so they agree to float rounding of each value's scale (2e-6). ---- */
/* ---- GroupNorm (groupnorm_fwd, groupnorm_bwd; LayerNorm is G = 1): against a float64 reference per (sample,
 * group), in the format under test, CUDA against the CPU; on the CPU also the input gradient against central
 * differences of sum(w y). ---- */
static void run_groupnorm(lam_ctx *ctx, int B, int C, int P, int G, const float *x, const float *gamma, const float *beta,
                          const float *dy, float *y, float *mean, float *invstd, float *dx, float *dg, float *db) {
  const size_t n = (size_t)B * C * P, cb = (size_t)C * 4, sb = (size_t)B * G * 4;
  float *d_x = dput(ctx, x, n * 4), *d_g = dput(ctx, gamma, cb), *d_b = dput(ctx, beta, cb), *d_y = dput(ctx, y, n * 4),
        *d_m = dput(ctx, mean, sb), *d_i = dput(ctx, invstd, sb), *d_dy = dput(ctx, dy, n * 4),
        *d_dx = dput(ctx, dx, n * 4), *d_dg = dput(ctx, dg, cb), *d_db = dput(ctx, db, cb);
  float *h = fnan((size_t)2 * B * C), *work = dput(ctx, h, (size_t)2 * B * C * 4), *d_w = work; /* 2 B C floats */
  free(h);
  void *fx = fin(ctx, d_x, B, C, P), *fy = fin(ctx, d_y, B, C, P), *fdy = fin(ctx, d_dy, B, C, P),
       *fdx = fin(ctx, d_dx, B, C, P);
  TU_OK(BE(ctx)->groupnorm_fwd(ctx, g_fmt, B, C, P, G, fx, d_g, d_b, fy, d_m, d_i, 1e-5f));
  TU_OK(BE(ctx)->groupnorm_bwd(ctx, g_fmt, B, C, P, G, fx, fdy, d_g, d_m, d_i, fdx, d_dg, d_db, work));
  fout(ctx, fx, d_x, B, C, P, "groupnorm x"), fout(ctx, fy, d_y, B, C, P, "groupnorm y");
  fout(ctx, fdy, d_dy, B, C, P, "groupnorm dy"), fout(ctx, fdx, d_dx, B, C, P, "groupnorm dx");
  dget(ctx, y, d_y, n * 4, "groupnorm y"), dget(ctx, mean, d_m, sb, "groupnorm mean");
  dget(ctx, invstd, d_i, sb, "groupnorm invstd"), dget(ctx, dx, d_dx, n * 4, "groupnorm dx");
  dget(ctx, dg, d_dg, cb, "groupnorm dgamma"), dget(ctx, db, d_db, cb, "groupnorm dbeta");
  float *all[] = {d_x, d_g, d_b, d_y, d_m, d_i, d_dy, d_dx, d_dg, d_db, d_w};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) dfree(ctx, all[k]);
}
typedef struct gn_fd {
  int B, C, P, G;
  const float *gamma, *beta, *w;
} gn_fd;
static void gn_loss(const void *a, const float *x, double *loss) { /* the CPU backend: host memory */
  const gn_fd *f = a;
  const size_t n = (size_t)f->B * f->C * f->P;
  float *y = fnan(n), *m = fnan((size_t)f->B * f->G), *is = fnan((size_t)f->B * f->G);
  TU_OK(BE(g_ctx)->groupnorm_fwd(g_ctx, LAM_FMT_NCHW, f->B, f->C, f->P, f->G, x, f->gamma, f->beta, y, m, is, 1e-5f));
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)f->w[i] * y[i];
  *loss = s;
  free(y), free(m), free(is);
}
static void test_groupnorm(void **state) {
  (void)state;
  static const int shapes[][4] = {{3, 8, 10, 4}, {2, 6, 7, 1}, {4, 16, 1, 4}, {2, 64, 16, 8}, {5, 3, 9, 3}};
  for (int si = 0; si < 5; si++) {
    seed_case("groupnorm", (uint64_t)si);
    const int B = shapes[si][0], C = shapes[si][1], P = shapes[si][2], G = shapes[si][3], Cg = C / G;
    const size_t n = (size_t)B * C * P, ns = (size_t)B * G;
    const double eps = 1e-5, N = (double)Cg * P;
    float *x = frand(n, -2, 3), *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -0.5, 0.5), *dy = frand(n, -1, 1),
          *dg0 = frand(C, -1, 1), *db0 = frand(C, -1, 1);
    for (size_t i = 0; i < n; i++) x[i] += (float)(i / ((size_t)Cg * P) % 3); /* groups of different means */
    float *got[6], *cpu[6] = {NULL};
    for (int which = 0; which < (g_cuda ? 2 : 1); which++) {
      float **o = which ? cpu : got;
      o[0] = fnan(n), o[1] = fnan(ns), o[2] = fnan(ns), o[3] = fnan(n), o[4] = fdup(dg0, C), o[5] = fdup(db0, C);
      run_groupnorm(which ? g_cpu : g_ctx, B, C, P, G, x, gamma, beta, dy, o[0], o[1], o[2], o[3], o[4], o[5]);
    }
    /* the float64 reference: statistics from x; the backward from the statistics as float, as they are saved */
    double *want[6], *scale[6];
    const size_t len[6] = {n, ns, ns, n, (size_t)C, (size_t)C};
    for (int q = 0; q < 6; q++) want[q] = dzero(len[q]), scale[q] = dzero(len[q]);
    for (int b = 0; b < B; b++)
      for (int g = 0; g < G; g++) {
        const size_t o = ((size_t)b * C + (size_t)g * Cg) * P, k = (size_t)b * G + g;
        double s = 0, v = 0, a = 0;
        for (size_t i = 0; i < (size_t)Cg * P; i++) s += x[o + i], a += fabs(x[o + i]);
        const double mu = s / N;
        for (size_t i = 0; i < (size_t)Cg * P; i++) v += (x[o + i] - mu) * (x[o + i] - mu);
        const double is = 1 / sqrt(v / N + eps);
        want[1][k] = mu, scale[1][k] = a / N, want[2][k] = is, scale[2][k] = is;
        const double mf = (float)mu, isf = (float)is;
        double sg = 0, sgx = 0, ag = 0, agx = 0;
        for (int kk = 0; kk < Cg; kk++) {
          const int c = g * Cg + kk;
          for (int p = 0; p < P; p++) {
            const size_t i = o + (size_t)kk * P + p;
            const double xh = (x[i] - mu) * is, xhf = (x[i] - mf) * isf;
            want[0][i] = xh * gamma[c] + beta[c], scale[0][i] = fabs(xh * gamma[c]) + fabs(beta[c]) + fabs(gamma[c]);
            sg += (double)dy[i] * gamma[c], sgx += (double)dy[i] * gamma[c] * xhf;
            ag += fabs(dy[i] * gamma[c]), agx += fabs(dy[i] * gamma[c] * xhf);
            want[4][c] += dy[i] * xhf, scale[4][c] += fabs(dy[i] * xhf);
            want[5][c] += dy[i], scale[5][c] += fabs(dy[i]);
          }
        }
        for (int kk = 0; kk < Cg; kk++) {
          const int c = g * Cg + kk;
          for (int p = 0; p < P; p++) {
            const size_t i = o + (size_t)kk * P + p;
            const double xhf = (x[i] - mf) * isf;
            want[3][i] = isf * ((double)dy[i] * gamma[c] - sg / N - xhf * sgx / N);
            scale[3][i] = isf * (fabs(dy[i] * gamma[c]) + ag / N + fabs(xhf) * agx / N);
          }
        }
      }
    for (int c = 0; c < C; c++) want[4][c] += dg0[c], scale[4][c] += fabs(dg0[c]), want[5][c] += db0[c], scale[5][c] += fabs(db0[c]);
    static const char *name[6] = {"y", "mean", "invstd", "dx", "dgamma", "dbeta"};
    for (int q = 0; q < 6; q++) {
      char what[128];
      snprintf(what, sizeof what, "groupnorm %s B=%d C=%d P=%d G=%d", name[q], B, C, P, G);
      verify(what, len[q], got[q], want[q], cpu[q], scale[q], 2e-6, 2e-5);
    }
    if (!g_cuda && lam_fmt_plain(g_fmt)) { /* the backward is the forward's derivative: central differences */
      float *w = frand(n, -1, 1), *dxw = fnan(n), *m = fnan(ns), *is = fnan(ns), *y = fnan(n), *dgw = fdup(dg0, C),
            *dbw = fdup(db0, C);
      run_groupnorm(g_ctx, B, C, P, G, x, gamma, beta, w, y, m, is, dxw, dgw, dbw);
      gn_fd f = {B, C, P, G, gamma, beta, w};
      char what[96];
      snprintf(what, sizeof what, "groupnorm d/dx B=%d C=%d P=%d G=%d", B, C, P, G);
      check_fd(what, n < 64 ? n : 64, x, dxw, gn_loss, &f, 1e-2, 2e-4, 2e-3);
      free(w), free(dxw), free(m), free(is), free(y), free(dgw), free(dbw);
    }
    for (int q = 0; q < 6; q++) free(want[q]), free(scale[q]), free(got[q]), free(cpu[q]);
    free(x), free(gamma), free(beta), free(dy), free(dg0), free(db0);
  }
}

static void run_add(lam_ctx *ctx, size_t n, const float *a, const float *b, float *y, int alias);
static void run_bn_add_act(lam_ctx *ctx, int B, int C, int P, int act, const float *x, const float *res,
                           const float *gamma, const float *beta, const float *dy, float *y, float *dx, float *dr,
                           int dr_add, float *dg, float *db) {
  const size_t n = (size_t)B * C * P, cb = (size_t)C * 4;
  float *d_x = dput(ctx, x, n * 4), *d_r = dput(ctx, res, n * 4), *d_g = dput(ctx, gamma, cb), *d_b = dput(ctx, beta, cb),
        *d_y = dput(ctx, y, n * 4), *d_m = dput(ctx, y, cb), *d_i = dput(ctx, y, cb), *d_rm = dput(ctx, gamma, cb),
        *d_rv = dput(ctx, gamma, cb), *d_dy = dput(ctx, dy, n * 4), *d_dx = dput(ctx, dx, n * 4),
        *d_dr = dput(ctx, dr, n * 4), *d_dg = dput(ctx, dg, cb), *d_db = dput(ctx, db, cb);
  void *fx = fin(ctx, d_x, B, C, P), *fr = fin(ctx, d_r, B, C, P), *fy = fin(ctx, d_y, B, C, P),
       *fdy = fin(ctx, d_dy, B, C, P), *fdx = fin(ctx, d_dx, B, C, P), *fdr = fin(ctx, d_dr, B, C, P);
  TU_OK(BE(ctx)->bn_act_fwd(ctx, g_fmt, B, C, P, act, 0.1f, fx, fr, d_g, d_b, fy, d_m, d_i, d_rm, d_rv, 0.1f, 1e-5f, 1));
  TU_OK(BE(ctx)->bn_act_bwd(ctx, g_fmt, B, C, P, act, 0.1f, fx, fy, fdy, d_g, d_b, d_m, d_i, fdx, fdr, dr_add, d_dg,
                            d_db));
  fout(ctx, fx, d_x, B, C, P, "bn_add_act x"), fout(ctx, fr, d_r, B, C, P, "bn_add_act r");
  fout(ctx, fy, d_y, B, C, P, "bn_add_act y"), fout(ctx, fdy, d_dy, B, C, P, "bn_add_act dy");
  fout(ctx, fdx, d_dx, B, C, P, "bn_add_act dx"), fout(ctx, fdr, d_dr, B, C, P, "bn_add_act dr");
  dget(ctx, y, d_y, n * 4, "bn_add_act y"), dget(ctx, dx, d_dx, n * 4, "bn_add_act dx");
  dget(ctx, dr, d_dr, n * 4, "bn_add_act dr"), dget(ctx, dg, d_dg, cb, "bn_add_act dgamma");
  dget(ctx, db, d_db, cb, "bn_add_act dbeta");
  float *all[] = {d_x, d_r, d_g, d_b, d_y, d_m, d_i, d_rm, d_rv, d_dy, d_dx, d_dr, d_dg, d_db};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) dfree(ctx, all[k]);
}
static void test_bn_add_act(void **state) {
  (void)state;
  static const int acts[] = {LAM_ACT_RELU, LAM_ACT_LEAKY, LAM_ACT_TANH, LAM_ACT_SIGMOID};
  static const int shapes[][3] = {{4, 8, 36}, {3, 5, 7}, {2, 64, 16}};
  uint64_t k = 0;
  for (int si = 0; si < 3; si++)
    for (int ai = 0; ai < 4; ai++)
      for (int dr_add = 0; dr_add < 2; dr_add++) {
        seed_case("bn_add_act", k++);
        const int B = shapes[si][0], C = shapes[si][1], P = shapes[si][2], act = acts[ai];
        const size_t n = (size_t)B * C * P;
        float *x = frand(n, -2, 3), *res = frand(n, -1, 1), *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -0.5, 0.5),
              *dy = frand(n, -1, 1), *dr0 = frand(n, -1, 1), *dg0 = frand(C, -1, 1), *db0 = frand(C, -1, 1);
        /* the composite: z = bn(x), s = z + r, y = act(s); ds = act'(y) dy; dr = ds (+ dr0); dx = bn_bwd(ds) */
        bn_bufs o = {fnan(n), fnan(C), fnan(C), fdup(gamma, C), fdup(gamma, C)};
        run_bn_fwd(g_ctx, B, C, P, x, gamma, beta, &o, 0.1f, 1e-5f, 1, 0);
        float *s_ = fnan(n), *yc = fnan(n), *ds = fnan(n), *dxc = fnan(n), *dgc = fdup(dg0, C), *dbc = fdup(db0, C);
        run_add(g_ctx, n, o.y, res, s_, 0);
        run_act(g_ctx, 0, act, 0.1f, n, s_, NULL, NULL, yc, 0);
        run_act(g_ctx, 1, act, 0.1f, n, s_, yc, dy, ds, 0);
        run_bn_bwd(g_ctx, B, C, P, x, ds, gamma, o.mean, o.invstd, dxc, dgc, dbc, 0);
        double *want[5], *scale[5];
        const float *comp[5] = {yc, dxc, ds, dgc, dbc};
        const size_t len[5] = {n, n, n, (size_t)C, (size_t)C};
        /* Each value's scale is the size of the terms it is made of, where the backends' float arithmetic differs
         * (an fma contracted or not, tanh's and sigmoid's own few ulps): y = act(z + r) by |z| + |r| (z + r may
         * cancel); dz = dy act'(y) by |dz| + |dy| (1 - y^2 cancels near 1, test_bn_act's); dx = k (dz - mean(dz) -
         * xhat mean(dz xhat)) by |k| (those terms' sizes); dgamma, dbeta by the sums of their terms' sizes. */
        double *dzs = dzero(n), *a1 = dzero(C), *a2 = dzero(C);
        for (size_t i = 0; i < n; i++) {
          const int c = (int)(i / P % C);
          const double xh = fabs(((double)x[i] - o.mean[c]) * o.invstd[c]);
          dzs[i] = fabs(ds[i]) + fabs(dy[i]), a1[c] += dzs[i], a2[c] += dzs[i] * xh;
        }
        for (int q = 0; q < 5; q++) {
          want[q] = dzero(len[q]), scale[q] = dzero(len[q]);
          for (size_t i = 0; i < len[q]; i++) {
            const int c = q < 3 ? (int)(i / P % C) : (int)i;
            const double xh = q < 3 ? fabs(((double)x[i] - o.mean[c]) * o.invstd[c]) : 0.0, N = (double)B * P;
            want[q][i] = comp[q][i] + (q == 2 && dr_add ? dr0[i] : 0.0);
            scale[q][i] = q == 0   ? fabs(comp[0][i]) + fabs(o.y[i]) + fabs(res[i])
                          : q == 1 ? fabs(gamma[c] * o.invstd[c]) * (dzs[i] + a1[c] / N + xh * a2[c] / N)
                          : q == 2 ? dzs[i] + (dr_add ? fabs(dr0[i]) : 0.0)
                          : q == 3 ? fabs(dg0[c]) + a2[c]
                                   : fabs(db0[c]) + a1[c];
          }
        }
        free(dzs), free(a1), free(a2);
        float *got[5], *cpu[5] = {NULL};
        for (int which = 0; which < (g_cuda ? 2 : 1); which++) {
          float **out = which ? cpu : got;
          out[0] = fnan(n), out[1] = fnan(n), out[2] = fdup(dr0, n), out[3] = fdup(dg0, C), out[4] = fdup(db0, C);
          run_bn_add_act(which ? g_cpu : g_ctx, B, C, P, act, x, res, gamma, beta, dy, out[0], out[1], out[2], dr_add,
                         out[3], out[4]);
        }
        static const char *name[5] = {"y", "dx", "dr", "dgamma", "dbeta"};
        for (int q = 0; q < 5; q++) {
          char what[160];
          snprintf(what, sizeof what, "bn_add_act %s act %d B=%d C=%d P=%d dr_add=%d [vs bn, add, act]", name[q], act, B, C,
                   P, dr_add);
          verify(what, len[q], got[q], want[q], cpu[q], scale[q], 2e-6, 2e-5);
          free(want[q]), free(scale[q]), free(got[q]), free(cpu[q]);
        }
        free(x), free(res), free(gamma), free(beta), free(dy), free(dr0), free(dg0), free(db0);
        free(o.y), free(o.mean), free(o.invstd), free(o.rm), free(o.rv);
        free(s_), free(yc), free(ds), free(dxc), free(dgc), free(dbc);
      }
}

static void test_bn_sync(void **state) {
  (void)state;
  const float momentum = 0.1f, eps = 1e-5f;
  if (g_cuda && lam_fmt_plain(g_fmt)) { /* CUDA runs sync BN in NHWC (its layout for models with convs): NCHW is refused */
    float *d = dput(g_ctx, (float[8]){1, 2, 3, 4, 5, 6, 7, 8}, 32), *o = dput(g_ctx, (float[8]){0}, 32);
    assert_int_equal(BE(g_ctx)->bn_sums(g_ctx, g_fmt, 1, 2, 2, d, NULL, NULL, NULL, o, NULL, NULL), LAM_ERR_UNSUPPORTED);
    assert_non_null(strstr(lam_last_error(), "NHWC"));
    dfree(g_ctx, d), dfree(g_ctx, o);
    print_message("  cuda NCHW: sync BN refused with a reason; its sums are checked in the NHWC run\n");
    return;
  }
  for (size_t s = 0; s < N_BCP; s++) {
    seed_case("bn_sync", s);
    const int B = k_bcp[s].B, C = k_bcp[s].C, P = k_bcp[s].P;
    const size_t n = (size_t)B * C * P, cb = (size_t)C * 4;
    const double N = (double)B * P;
    char geo[80], what[160];
    snprintf(geo, sizeof geo, "B=%d C=%d P=%d", B, C, P);
    float *x = xmalloc(n * 4), *dy = frand(n, -1, 1), *mean = xmalloc(cb), *invstd = xmalloc(cb);
    for (int c = 0; c < C; c++) {
      const double off = U(-3, 3), spread = U(0.2, 2);
      for (int b = 0; b < B; b++)
        for (int p = 0; p < P; p++) x[((size_t)b * C + c) * P + p] = (float)(off + spread * fr(-1, 1));
    }
    /* the statistics as float, from float64 sums of x */
    double *s1 = dzero(C), *s2 = dzero(C), *a1 = dzero(C), *a2 = dzero(C);
    for (size_t i = 0; i < n; i++) {
      const int c = (int)(i / P % C);
      s1[c] += x[i], s2[c] += (double)x[i] * x[i], a1[c] += fabs(x[i]);
    }
    for (int c = 0; c < C; c++) {
      const double mu = s1[c] / N, v = fmax(s2[c] / N - mu * mu, 0.0);
      mean[c] = (float)mu, invstd[c] = (float)(1 / sqrt(v + eps));
    }

    /* bn_sums of x: [sum x | sum x^2] */
    double *ref = dzero(2 * C), *scale = dzero(2 * C);
    for (int c = 0; c < C; c++) ref[c] = s1[c], scale[c] = a1[c] + 1e-30, ref[C + c] = s2[c], scale[C + c] = s2[c] + 1e-30;
    float *out = fnan(2 * C), *out_cpu = NULL;
    for (int pass = 0; pass < 1 + g_cuda; pass++) {
      lam_ctx *ctx = pass ? g_cpu : g_ctx;
      float *d_x = dput(ctx, x, n * 4), *d_out = dput(ctx, out, 2 * cb);
      void *fx = fin(ctx, d_x, B, C, P);
      TU_OK(BE(ctx)->bn_sums(ctx, g_fmt, B, C, P, fx, NULL, NULL, NULL, d_out, NULL, NULL));
      fout(ctx, fx, d_x, B, C, P, "bn_sums x (format)");
      float *o = pass ? (out_cpu = fnan(2 * C)) : out;
      dget(ctx, o, d_out, 2 * cb, "bn_sums");
      dfree(ctx, d_x), dfree(ctx, d_out);
    }
    snprintf(what, sizeof what, "bn_sums of x %s", geo);
    verify(what, 2 * C, out, ref, out_cpu, scale, 1e-6, 1e-5);

    /* bn_sums of dy: [sum dy | sum dy xhat], added into dbeta and dgamma */
    float *dg0 = frand(C, -1, 1), *db0 = frand(C, -1, 1);
    double *dref = dzero(2 * C), *dscale = dzero(2 * C), *gref = dzero(C), *gscale = dzero(C), *bref = dzero(C),
           *bscale = dzero(C);
    for (size_t i = 0; i < n; i++) {
      const int c = (int)(i / P % C);
      const double xh = ((double)x[i] - mean[c]) * invstd[c];
      dref[c] += dy[i], dscale[c] += fabs(dy[i]), dref[C + c] += dy[i] * xh, dscale[C + c] += fabs(dy[i] * xh);
    }
    for (int c = 0; c < C; c++) {
      dscale[C + c] += dscale[c] * fabs(mean[c]) * invstd[c]; /* the float mean's own rounding, times sum |dy| */
      gref[c] = dg0[c] + dref[C + c], gscale[c] = fabs(dg0[c]) + dscale[C + c];
      bref[c] = db0[c] + dref[c], bscale[c] = fabs(db0[c]) + dscale[c];
    }
    float *dout = fnan(2 * C), *dg = fdup(dg0, C), *db = fdup(db0, C), *dout_c = NULL, *dg_c = NULL, *db_c = NULL;
    for (int pass = 0; pass < 1 + g_cuda; pass++) {
      lam_ctx *ctx = pass ? g_cpu : g_ctx;
      float *d_x = dput(ctx, x, n * 4), *d_dy = dput(ctx, dy, n * 4), *d_m = dput(ctx, mean, cb),
            *d_i = dput(ctx, invstd, cb), *d_out = dput(ctx, dout, 2 * cb), *d_g = dput(ctx, dg0, cb),
            *d_b = dput(ctx, db0, cb);
      void *fx = fin(ctx, d_x, B, C, P), *fdy = fin(ctx, d_dy, B, C, P);
      TU_OK(BE(ctx)->bn_sums(ctx, g_fmt, B, C, P, fx, fdy, d_m, d_i, d_out, d_g, d_b));
      fout(ctx, fx, d_x, B, C, P, "bn_sums x (format)"), fout(ctx, fdy, d_dy, B, C, P, "bn_sums dy (format)");
      if (pass) dout_c = fnan(2 * C), dg_c = fnan(C), db_c = fnan(C);
      dget(ctx, pass ? dout_c : dout, d_out, 2 * cb, "bn_sums dy");
      dget(ctx, pass ? dg_c : dg, d_g, cb, "bn_sums dgamma"), dget(ctx, pass ? db_c : db, d_b, cb, "bn_sums dbeta");
      dfree(ctx, d_x), dfree(ctx, d_dy), dfree(ctx, d_m), dfree(ctx, d_i), dfree(ctx, d_out), dfree(ctx, d_g),
          dfree(ctx, d_b);
    }
    snprintf(what, sizeof what, "bn_sums of dy %s", geo);
    verify(what, 2 * C, dout, dref, dout_c, dscale, 2e-6, 2e-5);
    snprintf(what, sizeof what, "bn_sums dgamma += %s", geo);
    verify(what, C, dg, gref, dg_c, gscale, 2e-6, 2e-5);
    snprintf(what, sizeof what, "bn_sums dbeta += %s", geo);
    verify(what, C, db, bref, db_c, bscale, 2e-6, 2e-5);

    /* bn_sync_stats from the sums as float (sum x, sum x^2 over N) */
    float *sums = xmalloc(2 * cb);
    for (int c = 0; c < C; c++) sums[c] = (float)s1[c], sums[C + c] = (float)s2[c];
    float *rm0 = frand(C, -1, 1), *rv0 = frand(C, 0.5, 2);
    double *mref = dzero(C), *vref = dzero(C), *iref = dzero(C), *rmref = dzero(C), *rvref = dzero(C),
           *mscale = dzero(C), *vscale = dzero(C);
    for (int c = 0; c < C; c++) {
      const double mu = sums[c] / N, v = fmax(sums[C + c] / N - mu * mu, 0.0);
      mref[c] = mu, vref[c] = v, iref[c] = 1 / sqrt(v + eps);
      rmref[c] = (1 - momentum) * (double)rm0[c] + momentum * mu;
      rvref[c] = (1 - momentum) * (double)rv0[c] + momentum * (N > 1 ? v * N / (N - 1) : v);
      mscale[c] = fabs(mu) + 1e-3, vscale[c] = sums[C + c] / N + 1e-3; /* var's float sums: cancellation */
    }
    float *st[5], *st_c[5] = {NULL};
    for (int pass = 0; pass < 1 + g_cuda; pass++) {
      lam_ctx *ctx = pass ? g_cpu : g_ctx;
      float **o = pass ? st_c : st;
      for (int k = 0; k < 3; k++) o[k] = fnan(C);
      o[3] = fdup(rm0, C), o[4] = fdup(rv0, C);
      float *d_s = dput(ctx, sums, 2 * cb), *d[5];
      for (int k = 0; k < 5; k++) d[k] = dput(ctx, o[k], cb);
      TU_OK(BE(ctx)->bn_sync_stats(ctx, C, N, d_s, eps, momentum, d[0], d[1], d[2], d[3], d[4]));
      static const char *const names[5] = {"mean", "invstd", "var", "run_mean", "run_var"};
      for (int k = 0; k < 5; k++) dget(ctx, o[k], d[k], cb, names[k]), dfree(ctx, d[k]);
      dfree(ctx, d_s);
    }
    double *iscale = dzero(C), *rvscale = dzero(C), *rmscale = dzero(C);
    for (int c = 0; c < C; c++) iscale[c] = iref[c] * (1 + vscale[c] * iref[c] * iref[c]),
                                rvscale[c] = fabs(rvref[c]) + momentum * vscale[c] * (N > 1 ? N / (N - 1) : 1),
                                rmscale[c] = fabs(rmref[c]) + momentum * mscale[c];
    snprintf(what, sizeof what, "bn_sync_stats mean %s", geo);
    verify(what, C, st[0], mref, st_c[0], mscale, 1e-6, 1e-6);
    snprintf(what, sizeof what, "bn_sync_stats invstd %s", geo);
    verify(what, C, st[1], iref, st_c[1], iscale, 1e-5, 1e-5);
    snprintf(what, sizeof what, "bn_sync_stats var %s", geo);
    verify(what, C, st[2], vref, st_c[2], vscale, 1e-6, 1e-6);
    snprintf(what, sizeof what, "bn_sync_stats run_mean %s", geo);
    verify(what, C, st[3], rmref, st_c[3], rmscale, 1e-6, 1e-6);
    snprintf(what, sizeof what, "bn_sync_stats run_var %s", geo);
    verify(what, C, st[4], rvref, st_c[4], rvscale, 1e-5, 1e-5);

    /* bn_sync_dx from [sum dy | sum dy xhat] given as float and this N, with gamma and without */
    float *gamma = frand(C, -1.5, 1.5), *dsums = xmalloc(2 * cb);
    for (int c = 0; c < 2 * C; c++) dsums[c] = (float)dref[c];
    for (int with_gamma = 0; with_gamma < 2; with_gamma++) {
      double *xref = dzero(n), *xscale = dzero(n);
      for (size_t i = 0; i < n; i++) {
        const int c = (int)(i / P % C);
        const double is = invstd[c], k = (with_gamma ? gamma[c] : 1.0) * is, xh = ((double)x[i] - mean[c]) * is;
        xref[i] = k * (dy[i] - dsums[c] / N - xh * dsums[C + c] / N);
        xscale[i] = fabs(k) * (fabs(dy[i]) + fabs(dsums[c]) / N + fabs(xh) * fabs(dsums[C + c]) / N +
                               (1 + fabs(mean[c]) * is) * fabs(dsums[C + c]) / N + 1e-6);
      }
      float *dx = fnan(n), *dx_c = NULL;
      for (int pass = 0; pass < 1 + g_cuda; pass++) {
        lam_ctx *ctx = pass ? g_cpu : g_ctx;
        float *d_x = dput(ctx, x, n * 4), *d_dy = dput(ctx, dy, n * 4), *d_g = with_gamma ? dput(ctx, gamma, cb) : NULL,
              *d_m = dput(ctx, mean, cb), *d_i = dput(ctx, invstd, cb), *d_s = dput(ctx, dsums, 2 * cb),
              *d_dx = dput(ctx, dx, n * 4);
        void *fx = fin(ctx, d_x, B, C, P), *fdy = fin(ctx, d_dy, B, C, P), *fdx = fin(ctx, d_dx, B, C, P);
        TU_OK(BE(ctx)->bn_sync_dx(ctx, g_fmt, B, C, P, fx, fdy, d_g, d_m, d_i, d_s, N, fdx));
        fout(ctx, fx, d_x, B, C, P, "bn_sync_dx x (format)"), fout(ctx, fdy, d_dy, B, C, P, "bn_sync_dx dy (format)");
        fout(ctx, fdx, d_dx, B, C, P, "bn_sync_dx dx (format)");
        if (pass) dx_c = fnan(n);
        dget(ctx, pass ? dx_c : dx, d_dx, n * 4, "bn_sync_dx");
        dfree(ctx, d_x), dfree(ctx, d_dy), dfree(ctx, d_g), dfree(ctx, d_m), dfree(ctx, d_i), dfree(ctx, d_s),
            dfree(ctx, d_dx);
      }
      snprintf(what, sizeof what, "bn_sync_dx %s %s", with_gamma ? "with gamma" : "gamma NULL", geo);
      verify(what, n, dx, xref, dx_c, xscale, 2e-6, 2e-5);
      free(xref), free(xscale), free(dx), free(dx_c);
    }
    for (int k = 0; k < 5; k++) free(st[k]), free(st_c[k]);
    free(x), free(dy), free(mean), free(invstd), free(s1), free(s2), free(a1), free(a2), free(ref), free(scale);
    free(out), free(out_cpu), free(dg0), free(db0), free(dref), free(dscale), free(gref), free(gscale), free(bref);
    free(bscale), free(dout), free(dg), free(db), free(dout_c), free(dg_c), free(db_c), free(sums), free(rm0), free(rv0);
    free(mref), free(vref), free(iref), free(rmref), free(rvref), free(mscale), free(vscale), free(iscale), free(rvscale), free(rmscale);
    free(gamma), free(dsums);
  }
}

/* Over the shapes of test_bn and each activation: bn_act_fwd (train, eval) and bn_act_bwd against float64
 * references, and on the backend under test against bn_fwd + act_fwd and act_bwd + bn_bwd (the same float
 * expressions: to 1e-6 relative, in practice bit for bit; the smooth activations' backward to float
 * rounding), the statistics and running statistics bit for bit as bn_fwd's; on the CPU the backward by
 * central differences of bn_act_fwd; with "cuda" everything against the CPU backend. */
static void test_bn_act(void **state) {
  (void)state;
  static const int acts[] = {LAM_ACT_RELU, LAM_ACT_LEAKY, LAM_ACT_GELU, LAM_ACT_TANH, LAM_ACT_SIGMOID};
  const float momentum = 0.1f, eps = 1e-5f, alpha = 0.1f;
  uint64_t k = 0;
  for (size_t s = 0; s < N_BCP; s++)
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++)
      for (int train = 1; train >= 0; train--) {
        seed_case("bn_act", k++);
        const int act = acts[a], B = k_bcp[s].B, C = k_bcp[s].C, P = k_bcp[s].P, gelu = act == LAM_ACT_GELU;
        const int kink = act == LAM_ACT_RELU || act == LAM_ACT_LEAKY;
        size_t n = (size_t)B * C * P;
        double N = (double)B * P;
        char what[200], geo[120];
        snprintf(geo, sizeof geo, "%s B=%d C=%d P=%d %s", act_name(act), B, C, P, train ? "train" : "eval");
        /* as test_bn: each channel its own offset and spread, one case far from 0 against its spread */
        float *x = xmalloc(n * 4), *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -1, 1);
        double *off = dzero(C), *spread = dzero(C);
        for (int c = 0; c < C; c++) {
          off[c] = s == 7 ? 100.0 + c : U(-3, 3), spread[c] = U(0.2, 2);
          if (tu_next(&g_r) & 1) gamma[c] = -gamma[c];
        }
        for (size_t i = 0; i < n; i++) x[i] = (float)(off[i / P % C] + spread[i / P % C] * fr(-1, 1));
        float *rm0 = frand(C, -1, 1), *rv0 = frand(C, 0.5, 2);
        bn_ref r;
        bn_stats(B, C, P, x, &r);
        if (!train) /* running statistics near the batch's, as after training: z in the activations' range */
          for (int c = 0; c < C; c++)
            rm0[c] = (float)(r.mean[c] + U(-0.5, 0.5) * sqrt(r.var[c])), rv0[c] = (float)(r.var[c] * U(0.5, 2) + 1e-3);
        const int fd = !g_cuda && train && n <= 64 && B * P > 1;
        if (fd && kink) /* finite differences: beta moved so that no z lies within 0.05 of the kink at 0 */
          for (int c = 0; c < C; c++) {
            double is = 1 / sqrt(r.var[c] + eps), b0 = beta[c];
            for (int t = 0, ok = 0; !ok; t++) {
              if (t > 100) fail_msg("bn_act: no beta keeps channel %d away from the kink", c);
              beta[c] = (float)(b0 + 0.1 * ((t + 1) / 2) * (t % 2 ? 1 : -1)), ok = 1;
              for (int b = 0; b < B; b++)
                for (int p = 0; p < P; p++) {
                  double z = (x[((size_t)b * C + c) * P + p] - r.mean[c]) * is * gamma[c] + beta[c];
                  if (fabs(z) < 0.05) ok = 0;
                }
            }
          }

        /* ---- forward: the float64 reference ---- */
        double *yref = dzero(n), *yscale = dzero(n), *mref = dzero(C), *mscale = dzero(C), *iref = dzero(C),
               *rmref = dzero(C), *rmscale = dzero(C), *rvref = dzero(C), *zero = dzero(C);
        for (int c = 0; c < C; c++) {
          double m = train ? r.mean[c] : rm0[c], is = train ? 1 / sqrt(r.var[c] + eps) : 1 / sqrt((double)rv0[c] + eps);
          mref[c] = r.mean[c], mscale[c] = fabs(r.mean[c]) + sqrt(r.var[c]), iref[c] = is;
          double uv = N > 1 ? r.var[c] * N / (N - 1) : r.var[c];
          rmref[c] = train ? (1 - momentum) * (double)rm0[c] + momentum * r.mean[c] : rm0[c];
          rmscale[c] = train ? fabs(rmref[c]) + momentum * mscale[c] : 0;
          rvref[c] = train ? (1 - momentum) * (double)rv0[c] + momentum * uv : rv0[c];
          for (int b = 0; b < B; b++)
            for (int p = 0; p < P; p++) {
              size_t o = ((size_t)b * C + c) * P + p;
              double xh = (x[o] - m) * is, z = xh * gamma[c] + beta[c];
              yref[o] = act_ref(act, alpha, z);
              /* z's float error (bn_fwd's scale, test_bn) through act'(z), plus act's own few ulps (gelu's
               * 1 + erf cancels for negative z: of z's size, as in test_act) */
              double zs = fabs(xh * gamma[c]) + fabs(beta[c]) + fabs(gamma[c]) * (1 + fabs(m) * is);
              yscale[o] = fabs(act_grad_ref(act, alpha, z)) * zs + (gelu ? fabs(z) : fabs(yref[o]));
            }
        }
        bn_bufs o = {fnan(n), fnan(C), fnan(C), fdup(rm0, C), fdup(rv0, C)}, oc = {0};
        run_bn_act_fwd(g_ctx, B, C, P, act, alpha, x, gamma, beta, &o, momentum, eps, train);
        if (g_cuda) {
          oc = (bn_bufs){fnan(n), fnan(C), fnan(C), fdup(rm0, C), fdup(rv0, C)};
          run_bn_act_fwd(g_cpu, B, C, P, act, alpha, x, gamma, beta, &oc, momentum, eps, train);
        }
        snprintf(what, sizeof what, "bn_act_fwd y %s", geo);
        verify(what, n, o.y, yref, oc.y, yscale, 2e-6, 2e-5);
        verify_bn_stats("bn_act_fwd", geo, C, train, &o, &oc, mref, mscale, iref, rmref, rmscale, rvref, zero);

        /* ---- forward: against bn_fwd + act_fwd on the same backend ---- */
        bn_bufs ob = {fnan(n), fnan(C), fnan(C), fdup(rm0, C), fdup(rv0, C)}; /* ob.y: z */
        run_bn_fwd(g_ctx, B, C, P, x, gamma, beta, &ob, momentum, eps, train, 0);
        float *ycomp = fnan(n);
        run_act(g_ctx, 0, act, alpha, n, ob.y, NULL, NULL, ycomp, 0);
        double *w = dzero(n);
        for (size_t i = 0; i < n; i++) w[i] = ycomp[i];
        snprintf(what, sizeof what, "bn_act_fwd y %s [vs bn_fwd + act_fwd]", geo);
        cmp_f(what, n, o.y, w, NULL, 1e-6);
        /* the statistics come from bn_fwd's own code: the same bits */
        const float *same[4][2] = {{o.mean, ob.mean}, {o.invstd, ob.invstd}, {o.rm, ob.rm}, {o.rv, ob.rv}};
        static const char *sname[4] = {"mean", "invstd", "run_mean", "run_var"};
        for (int q = train ? 0 : 2; q < 4; q++) {
          for (int c = 0; c < C; c++) w[c] = same[q][1][c];
          snprintf(what, sizeof what, "bn_act_fwd %s %s [vs bn_fwd]", sname[q], geo);
          cmp_f(what, C, same[q][0], w, zero, 0.0);
        }

        if (train) {
          /* ---- backward: the float64 reference, from the statistics of x (as float, as the forward saves
           * them) and a y = act(z) rounded to float; gelu's y is not passed (NULL) ---- */
          float *mf = xmalloc(C * 4), *isf = xmalloc(C * 4), *yin = xmalloc(n * 4), *dy = frand(n, -1, 1),
                *dg0 = frand(C, -1, 1), *db0 = frand(C, -1, 1);
          double *dzref = dzero(n), *dzscale = dzero(n);
          for (int c = 0; c < C; c++) mf[c] = (float)r.mean[c], isf[c] = (float)(1 / sqrt(r.var[c] + eps));
          for (size_t i = 0; i < n; i++) {
            int c = (int)(i / P % C);
            double xh = ((double)x[i] - mf[c]) * isf[c], z = xh * gamma[c] + beta[c];
            yin[i] = (float)act_ref(act, alpha, z);
            double yv = yin[i];
            switch (act) { /* as test_act: from y, or from z for gelu */
              case LAM_ACT_RELU: dzref[i] = yv > 0 ? dy[i] : 0; break;
              case LAM_ACT_LEAKY: dzref[i] = yv > 0 ? dy[i] : (double)alpha * dy[i]; break;
              case LAM_ACT_TANH: dzref[i] = dy[i] * (1 - yv * yv); break;
              case LAM_ACT_SIGMOID: dzref[i] = dy[i] * yv * (1 - yv); break;
              default: dzref[i] = dy[i] * act_grad_ref(act, alpha, z);
            }
            /* dz's float error: exact products for relu and leaky; 1 - y^2 and y (1 - y) of |dy| times their
             * terms' size (test_act); gelu's of |dy| times its terms' and z's float error times gelu'' <= 0.8 */
            dzscale[i] = kink ? fabs(dzref[i]) : fabs(dy[i]) * (fabs(dzref[i] / dy[i]) + 1);
            if (gelu) dzscale[i] += fabs(dy[i]) * 0.8 * (fabs(xh * gamma[c]) + fabs(beta[c]));
          }
          double *dxref = dzero(n), *dxscale = dzero(n), *dgref = dzero(C), *dgscale = dzero(C), *dbref = dzero(C),
                 *dbscale = dzero(C);
          for (int c = 0; c < C; c++) { /* bn_bwd's reference (test_bn) on dz */
            double s1 = 0, s2 = 0, a1 = 0, a2 = 0;
            for (int b = 0; b < B; b++)
              for (int p = 0; p < P; p++) {
                size_t q = ((size_t)b * C + c) * P + p;
                double xh = ((double)x[q] - mf[c]) * isf[c];
                s1 += dzref[q], s2 += dzref[q] * xh, a1 += dzscale[q], a2 += dzscale[q] * fabs(xh);
              }
            dgref[c] = dg0[c] + s2, dgscale[c] = fabs(dg0[c]) + a2;
            dbref[c] = db0[c] + s1, dbscale[c] = fabs(db0[c]) + a1;
            double kk = (double)gamma[c] * isf[c];
            for (int b = 0; b < B; b++)
              for (int p = 0; p < P; p++) {
                size_t q = ((size_t)b * C + c) * P + p;
                double xh = ((double)x[q] - mf[c]) * isf[c];
                dxref[q] = kk * (dzref[q] - s1 / N - xh * s2 / N);
                dxscale[q] = fabs(kk) * (dzscale[q] + a1 / N + fabs(xh) * (1 + a2 / N) + fabs(mf[c]) * isf[c] * a2 / N);
              }
          }
          const float *yarg = gelu ? NULL : yin;
          float *dx = fnan(n), *dgg = fdup(dg0, C), *dbg = fdup(db0, C), *dxc = NULL, *dgc = NULL, *dbc = NULL;
          run_bn_act_bwd(g_ctx, B, C, P, act, alpha, x, yarg, dy, gamma, beta, mf, isf, dx, dgg, dbg);
          if (g_cuda) {
            dxc = fnan(n), dgc = fdup(dg0, C), dbc = fdup(db0, C);
            run_bn_act_bwd(g_cpu, B, C, P, act, alpha, x, yarg, dy, gamma, beta, mf, isf, dxc, dgc, dbc);
          }
          snprintf(what, sizeof what, "bn_act_bwd dx %s", geo);
          verify(what, n, dx, dxref, dxc, dxscale, 1e-6, 2e-5);
          snprintf(what, sizeof what, "bn_act_bwd dgamma %s", geo);
          verify(what, C, dgg, dgref, dgc, dgscale, 2e-7, 1e-5);
          snprintf(what, sizeof what, "bn_act_bwd dbeta %s", geo);
          verify(what, C, dbg, dbref, dbc, dbscale, 2e-7, 1e-5);

          /* ---- backward: against act_bwd + bn_bwd on the same backend, after the forward above (bn_act_bwd
           * recomputes gelu's z as bn_fwd computed it); dx written over dy ---- */
          float *dz = fnan(n), *dx2 = fdup(dy, n), *dxcomp = fnan(n), *dg2 = fdup(dg0, C), *db2 = fdup(db0, C),
                *dgcomp = fdup(dg0, C), *dbcomp = fdup(db0, C);
          run_act(g_ctx, 1, act, alpha, n, ob.y, ycomp, dy, dz, 0);
          run_bn_bwd(g_ctx, B, C, P, x, dz, gamma, ob.mean, ob.invstd, dxcomp, dgcomp, dbcomp, 0);
          {
            size_t cb = (size_t)C * 4;
            float *d_x = dput(g_ctx, x, n * 4), *d_y = dput(g_ctx, gelu ? NULL : o.y, n * 4),
                  *d_dy = dput(g_ctx, dy, n * 4), *d_g = dput(g_ctx, gamma, cb), *d_b = dput(g_ctx, beta, cb),
                  *d_m = dput(g_ctx, o.mean, cb), *d_i = dput(g_ctx, o.invstd, cb), *d_dg = dput(g_ctx, dg2, cb),
                  *d_db = dput(g_ctx, db2, cb);
            void *fx = fin(g_ctx, d_x, B, C, P), *fy = fin(g_ctx, d_y, B, C, P), *fdy = fin(g_ctx, d_dy, B, C, P);
            TU_OK(BE(g_ctx)->bn_act_bwd(g_ctx, g_fmt, B, C, P, act, alpha, fx, fy, fdy, d_g, d_b, d_m, d_i, fdy, NULL, 0,
                                        d_dg, d_db));
            fout(g_ctx, fx, d_x, B, C, P, "bn_act_bwd x"), fout(g_ctx, fy, d_y, B, C, P, "bn_act_bwd y");
            fout(g_ctx, fdy, d_dy, B, C, P, "bn_act_bwd dx over dy (format)");
            dget(g_ctx, dx2, d_dy, n * 4, "bn_act_bwd dx (over dy)");
            dget(g_ctx, dg2, d_dg, cb, "bn_act_bwd dgamma"), dget(g_ctx, db2, d_db, cb, "bn_act_bwd dbeta");
            dfree(g_ctx, d_x), dfree(g_ctx, d_y), dfree(g_ctx, d_dy), dfree(g_ctx, d_g), dfree(g_ctx, d_b);
            dfree(g_ctx, d_m), dfree(g_ctx, d_i), dfree(g_ctx, d_dg), dfree(g_ctx, d_db);
          }
          /* relu and leaky: dz is an exact product, so the same bits (1e-6 relative); the others' dz may round
           * apart by an ulp (the compiler contracts a * b + c * d into an fma either way), on the scale */
          const float *pairs[3][2] = {{dx2, dxcomp}, {dg2, dgcomp}, {db2, dbcomp}};
          const double *pscale[3] = {dxscale, dgscale, dbscale};
          static const char *pname[3] = {"dx (over dy)", "dgamma", "dbeta"};
          for (int q = 0; q < 3; q++) {
            size_t m = q ? (size_t)C : n;
            double *want = dzero(m);
            for (size_t i = 0; i < m; i++) want[i] = pairs[q][1][i];
            snprintf(what, sizeof what, "bn_act_bwd %s %s [vs act_bwd + bn_bwd]", pname[q], geo);
            cmp_f(what, m, pairs[q][0], want, kink ? NULL : pscale[q], 1e-6);
            free(want);
          }

          /* ---- backward by central differences of bn_act_fwd (CPU): d/dx, d/dgamma, d/dbeta of sum(w y)
           * with w = dy; steps and the absolute tolerance scaled by the largest invstd |gamma| ---- */
          if (fd) {
            double isg = 1;
            for (int c = 0; c < C; c++)
              if (o.invstd[c] * fabs(gamma[c]) > isg) isg = o.invstd[c] * fabs(gamma[c]);
            const double h = 1e-2 / isg, atol = 1e-3 * isg, rtol = 2e-3;
            float *z = fdup(dg0, C), *zb = fdup(db0, C), *dxn = fnan(n);
            for (int c = 0; c < C; c++) z[c] = 0, zb[c] = 0;
            run_bn_act_bwd(g_ctx, B, C, P, act, alpha, x, o.y, dy, gamma, beta, o.mean, o.invstd, dxn, z, zb);
            snprintf(what, sizeof what, "bn_act_bwd %s [vs central differences]", geo);
            bn_act_fd f = {B, C, P, act, 0, alpha, x, gamma, beta, dy};
            float *v = fdup(x, n);
            check_fd(what, n, v, dxn, bn_act_loss, &f, h, atol, rtol);
            free(v);
            f.wrt = 1, v = fdup(gamma, C);
            check_fd(what, C, v, z, bn_act_loss, &f, h, atol, rtol);
            free(v);
            f.wrt = 2, v = fdup(beta, C);
            check_fd(what, C, v, zb, bn_act_loss, &f, h, atol, rtol);
            free(v), free(z), free(zb), free(dxn);
          }
          free(mf), free(isf), free(yin), free(dy), free(dg0), free(db0), free(dzref), free(dzscale), free(dxref);
          free(dxscale), free(dgref), free(dgscale), free(dbref), free(dbscale), free(dx), free(dgg), free(dbg);
          free(dxc), free(dgc), free(dbc), free(dz), free(dx2), free(dxcomp), free(dg2), free(db2), free(dgcomp);
          free(dbcomp);
        }
        free(x), free(gamma), free(beta), free(off), free(spread), free(rm0), free(rv0), free(yref), free(yscale);
        free(mref), free(mscale), free(iref), free(rmref), free(rmscale), free(rvref), free(zero), free(ycomp), free(w);
        free(o.y), free(o.mean), free(o.invstd), free(o.rm), free(o.rv);
        free(oc.y), free(oc.mean), free(oc.invstd), free(oc.rm), free(oc.rv);
        free(ob.y), free(ob.mean), free(ob.invstd), free(ob.rm), free(ob.rv);
        bn_ref_free(&r);
      }
}

/* ---- dropout, elementwise helpers ---- */

static void run_dropout(lam_ctx *ctx, size_t n, float p, uint64_t seed, const int32_t *ctr, uint8_t *mask) {
  int32_t *dc = dput(ctx, ctr, 4);
  uint8_t *dm = dput(ctx, mask, n);
  TU_OK(BE(ctx)->dropout_mask(ctx, n, p, seed, dc, dm));
  dget(ctx, mask, dm, n, "dropout_mask");
  dfree(ctx, dc), dfree(ctx, dm);
}

static void test_dropout_mask(void **state) {
  (void)state;
  static const size_t ns[] = {1, 1000, 100003};
  static const float ps[] = {0.0f, 0.25f, 0.5f, 1.0f};
  uint64_t k = 0;
  for (size_t c = 0; c < 3; c++)
    for (size_t pi = 0; pi < 4; pi++)
      for (int with_ctr = 0; with_ctr < 2; with_ctr++) {
        seed_case("dropout_mask", k++);
        size_t n = ns[c];
        float p = ps[pi];
        uint64_t seed = tu_next(&g_r);
        int32_t ctr = with_ctr ? 7 : 0;
        char what[120];
        snprintf(what, sizeof what, "dropout_mask n=%zu p=%g ctr=%s", n, p, with_ctr ? "7" : "NULL");
        uint8_t *ref = xmalloc(n), *got = u8rand(n, 2, 200), *cpu = u8rand(n, 2, 200);
        uint64_t key = lam_draw_key(seed, ctr);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) ref[i] = lam_draw_uniform(key, i) >= p, kept += ref[i];
        run_dropout(g_ctx, n, p, seed, with_ctr ? &ctr : NULL, got);
        if (g_cuda) run_dropout(g_cpu, n, p, seed, with_ctr ? &ctr : NULL, cpu);
        verify_bytes(what, n, 1, got, ref, cpu); /* bit for bit: the same hash on both */
        if (n > 1000) { /* the fraction kept is 1 - p within 5 standard deviations */
          double f = (double)kept / n, sd = sqrt(p * (1.0 - p) / n);
          if (fabs(f - (1.0 - p)) > 5 * sd + 1e-12) fail_msg("%s: kept %.5f, want %.5f +- %.5f", what, f, 1.0 - p, 5 * sd);
        }
        if (with_ctr && p == 0.5f && n > 1000) { /* the next counter draws another mask */
          int32_t ctr2 = ctr + 1;
          uint8_t *m2 = u8rand(n, 2, 200);
          run_dropout(g_ctx, n, p, seed, &ctr2, m2);
          size_t same = 0;
          for (size_t i = 0; i < n; i++) same += m2[i] == got[i];
          if (fabs((double)same / n - 0.5) > 0.02) fail_msg("%s: counter 8 agrees with 7 on %zu of %zu", what, same, n);
          free(m2);
        }
        free(ref), free(got), free(cpu);
      }
}

static void run_mask_scale(lam_ctx *ctx, size_t n, const float *x, const uint8_t *mask, float scale, float *y,
                           int inplace) {
  float *dx = dput(ctx, x, n * 4), *dy = inplace ? dx : dput(ctx, y, n * 4);
  uint8_t *dm = dput(ctx, mask, n);
  void *fx = fin_flat(ctx, dx, n), *fy = inplace ? fx : fin_flat(ctx, dy, n);
  TU_OK(BE(ctx)->mask_scale(ctx, g_fmt, n, fx, dm, scale, fy));
  if (!inplace) fout_flat(ctx, fx, dx, n, "mask_scale x (format)");
  fout_flat(ctx, fy, dy, n, "mask_scale y (format)");
  dget(ctx, y, dy, n * 4, "mask_scale");
  dfree(ctx, dx), dfree(ctx, dm);
  if (!inplace) dfree(ctx, dy);
}
static void run_add(lam_ctx *ctx, size_t n, const float *a, const float *b, float *y, int alias) {
  float *da = dput(ctx, a, n * 4), *db = dput(ctx, b, n * 4);
  float *dy = alias == 1 ? da : alias == 2 ? db : dput(ctx, y, n * 4);
  void *fa = fin_flat(ctx, da, n), *fb = fin_flat(ctx, db, n), *fy = alias == 1 ? fa : alias == 2 ? fb : fin_flat(ctx, dy, n);
  TU_OK(BE(ctx)->add(ctx, g_fmt, n, fa, fb, fy));
  if (alias != 1) fout_flat(ctx, fa, da, n, "add a (format)");
  if (alias != 2) fout_flat(ctx, fb, db, n, "add b (format)");
  fout_flat(ctx, fy, dy, n, "add y (format)");
  dget(ctx, y, dy, n * 4, "add");
  dfree(ctx, da), dfree(ctx, db);
  if (!alias) dfree(ctx, dy);
}

static void test_elementwise(void **state) {
  (void)state;
  static const size_t ns[] = {1, 37, 40001};
  uint64_t k = 0;
  for (size_t c = 0; c < 3; c++)
    for (int alias = 0; alias < 3; alias++) {
      seed_case("elementwise", k++);
      size_t n = ns[c];
      char what[120];
      float *x = frand(n, -2, 2), *b = frand(n, -2, 2), scale = 1.0f / 0.7f;
      uint8_t *mask = u8rand(n, 0, 1);
      double *ref = dzero(n), *rs = dzero(n);
      /* mask_scale: y = mask ? x * scale : 0 (one rounded product; dropped: exactly 0) */
      for (size_t i = 0; i < n; i++) ref[i] = mask[i] ? (double)x[i] * scale : 0.0, rs[i] = fabs(ref[i]);
      float *got = alias ? fdup(x, n) : fnan(n), *cpu = g_cuda ? (alias ? fdup(x, n) : fnan(n)) : NULL;
      run_mask_scale(g_ctx, n, x, mask, scale, got, alias != 0);
      if (g_cuda) run_mask_scale(g_cpu, n, x, mask, scale, cpu, alias != 0);
      snprintf(what, sizeof what, "mask_scale n=%zu%s", n, alias ? " in place" : "");
      verify(what, n, got, ref, cpu, rs, 1e-7, 0.0);
      free(got), free(cpu);
      /* add: y = a + b, y separate, y = a or y = b (one rounded add) */
      for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] + b[i], rs[i] = fabs(x[i]) + fabs(b[i]);
      const float *init = alias == 2 ? b : x;
      got = alias ? fdup(init, n) : fnan(n), cpu = g_cuda ? (alias ? fdup(init, n) : fnan(n)) : NULL;
      run_add(g_ctx, n, x, b, got, alias);
      if (g_cuda) run_add(g_cpu, n, x, b, cpu, alias);
      snprintf(what, sizeof what, "add n=%zu y=%s", n, alias == 0 ? "new" : alias == 1 ? "a" : "b");
      verify(what, n, got, ref, cpu, rs, 1e-7, 0.0);
      free(x), free(b), free(mask), free(ref), free(rs), free(got), free(cpu);
    }
}

static void run_copy_rows(lam_ctx *ctx, size_t rows, size_t cols, const float *src, size_t lds, float *dst, size_t ldd) {
  size_t ns = rows * lds, nd = rows * ldd;
  float *dsrc = dput(ctx, src, ns * 4), *ddst = dput(ctx, dst, nd * 4);
  void *fs = fin_flat(ctx, dsrc, ns), *fd = fin_flat(ctx, ddst, nd);
  TU_OK(BE(ctx)->copy_rows(ctx, g_fmt, rows, cols, fs, lds, fd, ldd));
  fout_flat(ctx, fs, dsrc, ns, "copy_rows src (format)"), fout_flat(ctx, fd, ddst, nd, "copy_rows dst (format)");
  dget(ctx, dst, ddst, nd * 4, "copy_rows");
  dfree(ctx, dsrc), dfree(ctx, ddst);
}

static void test_copy_rows(void **state) {
  (void)state;
  static const size_t k_cr[][4] = {{1, 1, 1, 1}, {3, 5, 8, 5}, {4, 7, 7, 20}, {64, 33, 100, 40}, {2, 1000, 1000, 3000},
                                   {70000, 2, 3, 5}};
  for (size_t s = 0; s < sizeof k_cr / sizeof k_cr[0]; s++) {
    seed_case("copy_rows", s);
    size_t rows = k_cr[s][0], cols = k_cr[s][1], lds = k_cr[s][2], ldd = k_cr[s][3], nd = rows * ldd;
    float *src = frand(rows * lds, -1, 1), *d0 = frand(nd, -1, 1);
    double *ref = dzero(nd), *zero = dzero(nd);
    for (size_t r = 0; r < rows; r++)
      for (size_t i = 0; i < ldd; i++) ref[r * ldd + i] = i < cols ? src[r * lds + i] : d0[r * ldd + i];
    float *got = fdup(d0, nd), *cpu = g_cuda ? fdup(d0, nd) : NULL;
    run_copy_rows(g_ctx, rows, cols, src, lds, got, ldd);
    if (g_cuda) run_copy_rows(g_cpu, rows, cols, src, lds, cpu, ldd);
    char what[120];
    snprintf(what, sizeof what, "copy_rows rows=%zu cols=%zu lds=%zu ldd=%zu", rows, cols, lds, ldd);
    verify(what, nd, got, ref, cpu, zero, 0.0, 0.0); /* copied exactly, the rest of dst untouched */
    free(src), free(d0), free(ref), free(zero), free(got), free(cpu);
  }
}

static void run_label_count(lam_ctx *ctx, size_t n, const uint8_t *labels, float *count) {
  uint8_t *dl = dput(ctx, labels, n);
  float *dc = dput(ctx, count, 4);
  TU_OK(BE(ctx)->label_count(ctx, n, dl, dc));
  dget(ctx, count, dc, 4, "label_count");
  dfree(ctx, dl), dfree(ctx, dc);
}

static void test_label_count(void **state) {
  (void)state;
  static const size_t ns[] = {1, 100, 70001, 300000};
  for (size_t c = 0; c < 4; c++) {
    seed_case("label_count", c);
    size_t n = ns[c], want = 0;
    uint8_t *l = u8rand(n, 0, 254);
    for (size_t i = 0; i < n; i++) {
      if (tu_next(&g_r) % 10 < 3) l[i] = LAM_LABEL_IGNORE;
      want += l[i] != LAM_LABEL_IGNORE;
    }
    float got = NAN, cpu = NAN;
    double ref = (double)(float)want, zero = 0;
    run_label_count(g_ctx, n, l, &got);
    if (g_cuda) run_label_count(g_cpu, n, l, &cpu);
    char what[80];
    snprintf(what, sizeof what, "label_count n=%zu", n);
    verify(what, 1, &got, &ref, &cpu, &zero, 0.0, 0.0); /* exact */
    free(l);
  }
}

/* ---- softmax cross-entropy ---- */

typedef struct xent_case {
  int B, C, P;
  double offset; /* added to every logit */
} xent_case;
static const xent_case k_xent[] = {{5, 10, 1, 0},  {1, 1, 1, 0},   {3, 3, 7, 0},    {4, 64, 5, 0}, {2, 21, 100, 0},
                                   {300, 10, 1, 0}, {3, 5, 1000, 0}, {4, 7, 3, 1000}, {1, 2, 1, 0}};

typedef struct xent_out {
  float *dl, stats[3];
  uint8_t *pred;
} xent_out;

static void run_xent(lam_ctx *ctx, int B, int C, int P, const float *logits, const uint8_t *labels, float scale,
                     const float *lscale, const float *count, float s, xent_out *o) {
  size_t n = (size_t)B * C * P, np = (size_t)B * P;
  float *dlg = dput(ctx, logits, n * 4), *ddl = dput(ctx, o->dl, n * 4), *dc = dput(ctx, count, 4),
        *dst = dput(ctx, o->stats, 12), *dls = dput(ctx, lscale, 4);
  uint8_t *dlab = dput(ctx, labels, np), *dp = dput(ctx, o->pred, np);
  void *flg = fin(ctx, dlg, B, C, P), *fdl = fin(ctx, ddl, B, C, P);
  TU_OK(BE(ctx)->xent(ctx, g_fmt, B, C, P, flg, dlab, fdl, scale, dls, dc, s, dst, dp));
  fout(ctx, flg, dlg, B, C, P, "xent logits (format)"), fout(ctx, fdl, ddl, B, C, P, "xent dlogits (format)");
  if (o->dl) dget(ctx, o->dl, ddl, n * 4, "xent dlogits");
  if (o->pred) dget(ctx, o->pred, dp, np, "xent pred");
  dget(ctx, o->stats, dst, 12, "xent stats");
  dfree(ctx, dlg), dfree(ctx, ddl), dfree(ctx, dc), dfree(ctx, dst), dfree(ctx, dlab), dfree(ctx, dp), dfree(ctx, dls);
}

typedef struct xent_fd {
  int B, C, P;
  const uint8_t *labels;
  float scale, count, s;
} xent_fd;
static void xent_loss(const void *a, const float *logits, double *loss) {
  const xent_fd *f = a;
  float stats[3] = {0, 0, 0};
  TU_OK(BE(g_ctx)->xent(g_ctx, LAM_FMT_NCHW, f->B, f->C, f->P, logits, f->labels, NULL, 1.0f, NULL, NULL, f->s, stats, NULL));
  *loss = (double)stats[0] * f->scale / f->count;
}

static void test_xent(void **state) {
  (void)state;
  uint64_t k = 0;
  for (size_t s = 0; s < sizeof k_xent / sizeof k_xent[0]; s++)
    for (int v = 0; v < 4; v++) { /* v: smoothing 0.1 (odd), ignored labels and a count (>= 2) */
      seed_case("xent", k++);
      int B = k_xent[s].B, C = k_xent[s].C, P = k_xent[s].P, ign = v >= 2;
      float sm = v & 1 ? 0.1f : 0.0f, scale = ign ? 0.5f : 1.0f;
      size_t n = (size_t)B * C * P, np = (size_t)B * P;
      char what[160], geo[120];
      float *logits = frand(n, -4, 4);
      for (size_t i = 0; i < n; i++) logits[i] += (float)k_xent[s].offset;
      uint8_t *labels = u8rand(np, 0, C - 1);
      size_t counted = 0;
      for (size_t i = 0; i < np; i++) {
        if (ign && tu_next(&g_r) % 5 == 0) labels[i] = LAM_LABEL_IGNORE;
        counted += labels[i] != LAM_LABEL_IGNORE;
      }
      float count = (float)(counted ? counted : 1), *countp = ign ? &count : NULL;
      double f = scale / (countp ? (double)count : 1.0);
      snprintf(geo, sizeof geo, "B=%d C=%d P=%d offset=%g smoothing=%g ignore=%d", B, C, P, k_xent[s].offset, sm, ign);
      /* float64 reference: loss = -(1 - s) log p_y - (s / C) sum_c log p_c; dlogits = (p - target) f */
      double *dref = dzero(n), *dscale = dzero(n), st[3] = {0.5, 1.5, 2.5}, loss_mag = 0;
      uint8_t *pref = xmalloc(np);
      for (int b = 0; b < B; b++)
        for (int p = 0; p < P; p++) {
          const float *l = logits + (size_t)b * C * P + p;
          int am = 0;
          for (int c = 1; c < C; c++)
            if (l[(size_t)c * P] > l[(size_t)am * P]) am = c;
          pref[(size_t)b * P + p] = (uint8_t)am;
          int y = labels[(size_t)b * P + p];
          if (y == LAM_LABEL_IGNORE) continue; /* dlogits 0, exactly */
          double mx = l[(size_t)am * P], se = 0, slp = 0, sd = 0;
          for (int c = 0; c < C; c++) se += exp(l[(size_t)c * P] - mx);
          double lse = log(se) + mx;
          for (int c = 0; c < C; c++) slp += l[(size_t)c * P] - lse, sd += fabs(mx - l[(size_t)c * P]);
          st[0] += -(1 - sm) * (l[(size_t)y * P] - lse) - sm / C * slp;
          /* the float sum of C exponentials and its log: an error of about one (C eps at worst) */
          loss_mag += fabs(mx - l[(size_t)y * P]) + fabs(log(se)) + 1 + sm * sd;
          st[1] += am == y, st[2] += 1;
          for (int c = 0; c < C; c++) {
            double pc = exp(l[(size_t)c * P] - lse), t = (c == y ? 1 - sm : 0) + sm / C;
            size_t o = (size_t)b * C * P + (size_t)c * P + p;
            dref[o] = (pc - t) * f, dscale[o] = (pc + t) * fabs(f);
          }
        }
      double stscale[3] = {0.5 + loss_mag, 0, 0}; /* the counts exactly */
      int with_dl = v != 1, with_pred = v != 2;
      xent_out o = {with_dl ? fnan(n) : NULL, {0.5f, 1.5f, 2.5f}, with_pred ? u8rand(np, 200, 254) : NULL},
               oc = {0};
      run_xent(g_ctx, B, C, P, logits, labels, scale, NULL, countp, sm, &o);
      if (g_cuda) {
        oc = (xent_out){with_dl ? fnan(n) : NULL, {0.5f, 1.5f, 2.5f}, with_pred ? u8rand(np, 200, 254) : NULL};
        run_xent(g_cpu, B, C, P, logits, labels, scale, NULL, countp, sm, &oc);
      }
      snprintf(what, sizeof what, "xent stats %s", geo);
      /* each pixel's loss in float from exact differences; summed in double (CPU) or fp32 blocks (CUDA) */
      verify(what, 3, o.stats, st, oc.stats, stscale, 2e-6, 1e-5);
      snprintf(what, sizeof what, "xent dlogits %s", geo);
      /* p = expf(l - max) / sum: a few ulps, and the sum's C roundings at worst */
      if (with_dl) verify(what, n, o.dl, dref, oc.dl, dscale, 2e-6, 4e-6);
      snprintf(what, sizeof what, "xent pred %s", geo);
      if (with_pred) verify_bytes(what, np, 1, o.pred, pref, oc.pred);
      if (!g_cuda && with_dl && n <= 100) { /* dlogits against central differences of the loss sum * f */
        xent_fd xf = {B, C, P, labels, scale, countp ? count : 1.0f, sm};
        float *lg = fdup(logits, n);
        snprintf(what, sizeof what, "xent dlogits %s (finite differences)", geo);
        check_fd(what, n, lg, o.dl, xent_loss, &xf, 1e-2, 5e-4, 2e-3);
        free(lg);
      }
      free(logits), free(labels), free(dref), free(dscale), free(pref), free(o.dl), free(o.pred), free(oc.dl);
      free(oc.pred);
    }
}

/* ---- gather ---- */

typedef struct gather_case {
  int B, C;
  size_t P, label_size;
  int cursor;
  int T; /* frames of a clip */
} gather_case;
static const gather_case k_gather[] = {{1, 1, 1, 1, 0, 1},   {3, 3, 10, 1, 1, 1}, {4, 1, 784, 1, 0, 1},
                                       {5, 3, 64, 64, 1, 1}, {2, 64, 9, 3, 0, 1}, {7, 2, 1, 5, 1, 1},
                                       {3, 3, 10, 1, 1, 4}, {2, 1, 49, 1, 0, 16}, {4, 2, 7, 1, 1, 3}};
static int gather_frames(const gather_case *g) { return g->T; }

static void run_gather(lam_ctx *ctx, const gather_case *g, size_t nimg, const uint8_t *images, const uint8_t *labels,
                       const int32_t *idx, size_t nidx, const lam_norm *norm, const lam_aug *aug, float *x, uint8_t *y) {
  const int T = gather_frames(g);
  size_t sample = (size_t)T * g->C * g->P;
  int32_t cur = 3;
  uint8_t *di = dput(ctx, images, nimg * sample), *dl = dput(ctx, labels, nimg * g->label_size);
  int32_t *dx_idx = dput(ctx, idx, nidx * 4), *dc = g->cursor ? dput(ctx, &cur, 4) : NULL;
  float *dx = dput(ctx, x, (size_t)g->B * sample * 4);
  uint8_t *dy = dput(ctx, y, (size_t)g->B * g->label_size);
  void *fx = fin(ctx, dx, g->B * T, g->C, g->P);
  lam_aug da;
  int32_t *dctr = NULL;
  if (aug) { /* its counter in the backend's memory, as the trainer's */
    da = *aug;
    dctr = dput(ctx, aug->ctr, 4);
    da.ctr = dctr;
  }
  TU_OK(BE(ctx)->gather(ctx, g->B, T, g->C, g->P, di, g->label_size, dl, dx_idx, dc, norm, aug ? &da : NULL, g_fmt, fx,
                        dy));
  dfree(ctx, dctr);
  fout(ctx, fx, dx, g->B * T, g->C, g->P, "gather x (format)");
  dget(ctx, x, dx, (size_t)g->B * sample * 4, "gather x");
  dget(ctx, y, dy, (size_t)g->B * g->label_size, "gather y");
  dfree(ctx, di), dfree(ctx, dl), dfree(ctx, dx_idx), dfree(ctx, dc), dfree(ctx, dx), dfree(ctx, dy);
}

static void test_gather(void **state) {
  (void)state;
  for (size_t s = 0; s < sizeof k_gather / sizeof k_gather[0]; s++) {
    seed_case("gather", s);
    const gather_case *g = &k_gather[s];
    const int T = gather_frames(g);
    size_t nimg = (size_t)g->B + 6, sample = (size_t)T * g->C * g->P, nidx = (size_t)g->B + 3, nx = (size_t)g->B * sample;
    uint8_t *images = u8rand(nimg * sample, 0, 255), *labels = u8rand(nimg * g->label_size, 0, 255);
    int32_t *idx = xmalloc(nidx * 4);
    for (size_t i = 0; i < nidx; i++) idx[i] = (int32_t)(tu_next(&g_r) % nimg);
    lam_norm norm = {g->C, {0}, {0}};
    for (int c = 0; c < g->C; c++) norm.mean[c] = (float)U(0.2, 0.8), norm.std[c] = (float)U(0.1, 0.5);
    const int32_t *id = idx + (g->cursor ? 3 : 0); /* the cursor starts the batch 3 entries further */
    double *xref = dzero(nx), *xscale = dzero(nx);
    uint8_t *yref = xmalloc((size_t)g->B * g->label_size);
    for (int b = 0; b < g->B; b++) {
      for (int tc = 0; tc < T * g->C; tc++) /* frame t = tc / C, channel c: row b*T + t of x, as in the image */
        for (size_t p = 0; p < g->P; p++) {
          const int c = tc % g->C;
          double u = images[(size_t)id[b] * sample + (size_t)tc * g->P + p];
          size_t o = (size_t)b * sample + (size_t)tc * g->P + p;
          xref[o] = (u / 255.0 - norm.mean[c]) / norm.std[c];
          xscale[o] = (u / 255.0 + norm.mean[c]) / norm.std[c]; /* u a + k in float: a few ulps of its terms */
        }
      memcpy(yref + (size_t)b * g->label_size, labels + (size_t)id[b] * g->label_size, g->label_size);
    }
    float *x = fnan(nx), *xc = g_cuda ? fnan(nx) : NULL;
    size_t ny = (size_t)g->B * g->label_size;
    uint8_t *y = xmalloc(ny), *yc = xmalloc(ny);
    for (size_t i = 0; i < ny; i++) y[i] = yc[i] = (uint8_t)~yref[i]; /* every byte wrong first */
    run_gather(g_ctx, g, nimg, images, labels, idx, nidx, &norm, NULL, x, y);
    if (g_cuda) run_gather(g_cpu, g, nimg, images, labels, idx, nidx, &norm, NULL, xc, yc);
    char what[160];
    snprintf(what, sizeof what, "gather x B=%d T=%d C=%d P=%zu label_size=%zu cursor=%d", g->B, T, g->C, g->P,
             g->label_size, g->cursor);
    verify(what, nx, x, xref, xc, xscale, 1e-6, 1e-6);
    snprintf(what, sizeof what, "gather y B=%d C=%d P=%zu label_size=%zu cursor=%d", g->B, g->C, g->P, g->label_size,
             g->cursor);
    verify_bytes(what, (size_t)g->B * g->label_size, 1, y, yref, yc);
    free(images), free(labels), free(idx), free(xref), free(xscale), free(yref), free(x), free(xc), free(y), free(yc);
  }
}

/* ---- gather with augmentation: each sample cropped after padding and flipped (prims.h, lam_aug). The draws are
 * aug.h's (the random stream is its definition); where they send each pixel is worked out here again. ---- */
typedef struct aug_case {
  int B, T, C, h, w, per_pixel, pad, flip;
} aug_case;
static const aug_case k_aug[] = {{8, 1, 1, 5, 7, 1, 2, 1}, {6, 3, 2, 4, 4, 0, 1, 0}, {16, 1, 3, 6, 5, 1, 0, 1},
                                 {5, 2, 1, 3, 9, 0, 3, 1}, {12, 1, 1, 28, 28, 1, 4, 1}};

static void test_gather_aug(void **state) {
  (void)state;
  int flips[2] = {0, 0}, moved = 0;
  for (size_t s = 0; s < sizeof k_aug / sizeof k_aug[0]; s++) {
    seed_case("gather_aug", s);
    const aug_case *ac = &k_aug[s];
    const size_t P = (size_t)ac->h * ac->w, L = ac->per_pixel ? P : 1;
    const gather_case g = {ac->B, ac->C, P, L, 0, ac->T};
    const size_t nimg = (size_t)ac->B + 4, sample = (size_t)ac->T * ac->C * P, nx = (size_t)ac->B * sample;
    uint8_t *images = u8rand(nimg * sample, 1, 255), *labels = u8rand(nimg * L, 0, 10); /* no 0: padding shows */
    int32_t *idx = xmalloc((size_t)ac->B * 4);
    for (int i = 0; i < ac->B; i++) idx[i] = (int32_t)(tu_next(&g_r) % nimg);
    lam_norm norm = {ac->C, {0}, {0}};
    for (int c = 0; c < ac->C; c++) norm.mean[c] = (float)U(0.2, 0.8), norm.std[c] = (float)U(0.1, 0.5);
    const int32_t ctr = (int32_t)(tu_next(&g_r) % 100000);
    const lam_aug aug = {ac->h, ac->w, ac->pad, ac->flip, tu_next(&g_r), &ctr};
    double *xref = dzero(nx), *xscale = dzero(nx);
    uint8_t *yref = xmalloc((size_t)ac->B * L);
    for (int b = 0; b < ac->B; b++) {
      const lam_aug_draw d = lam_aug_sample(&aug, ctr, b);
      assert_true(d.oy >= 0 && d.oy <= 2 * ac->pad && d.ox >= 0 && d.ox <= 2 * ac->pad && (d.flip == 0 || ac->flip));
      flips[d.flip]++, moved += d.oy != ac->pad || d.ox != ac->pad;
      for (int y = 0; y < ac->h; y++)
        for (int x = 0; x < ac->w; x++) {
          const int cx = d.flip ? ac->w - 1 - x : x; /* the crop's column the flip shows here */
          const int sy = y + d.oy - ac->pad, sx = cx + d.ox - ac->pad;
          const int in = sy >= 0 && sy < ac->h && sx >= 0 && sx < ac->w;
          const size_t p = (size_t)y * ac->w + x, q = in ? (size_t)sy * ac->w + sx : 0;
          for (int tc = 0; tc < ac->T * ac->C; tc++) {
            const int c = tc % ac->C;
            const double u = in ? images[(size_t)idx[b] * sample + (size_t)tc * P + q] : 0.0;
            const size_t o = (size_t)b * sample + (size_t)tc * P + p;
            xref[o] = (u / 255.0 - norm.mean[c]) / norm.std[c];
            xscale[o] = (u / 255.0 + norm.mean[c]) / norm.std[c];
          }
          if (ac->per_pixel) yref[(size_t)b * P + p] = in ? labels[(size_t)idx[b] * P + q] : LAM_LABEL_IGNORE;
        }
      if (!ac->per_pixel) yref[b] = labels[idx[b]];
    }
    float *x = fnan(nx), *xc = g_cuda ? fnan(nx) : NULL;
    const size_t ny = (size_t)ac->B * L;
    uint8_t *y = xmalloc(ny), *yc = xmalloc(ny);
    for (size_t i = 0; i < ny; i++) y[i] = yc[i] = (uint8_t)~yref[i];
    run_gather(g_ctx, &g, nimg, images, labels, idx, (size_t)ac->B, &norm, &aug, x, y);
    if (g_cuda) run_gather(g_cpu, &g, nimg, images, labels, idx, (size_t)ac->B, &norm, &aug, xc, yc);
    char what[160];
    snprintf(what, sizeof what, "gather augmented x B=%d T=%d C=%d %dx%d pad=%d flip=%d", ac->B, ac->T, ac->C, ac->h,
             ac->w, ac->pad, ac->flip);
    verify(what, nx, x, xref, xc, xscale, 1e-6, 1e-6);
    snprintf(what, sizeof what, "gather augmented labels B=%d %dx%d per_pixel=%d pad=%d flip=%d", ac->B, ac->h, ac->w,
             ac->per_pixel, ac->pad, ac->flip);
    verify_bytes(what, ny, 1, y, yref, yc);
    free(images), free(labels), free(idx), free(xref), free(xscale), free(yref), free(x), free(xc), free(y), free(yc);
  }
  /* the draws do something: some samples flipped and some not, most crops off the centre */
  if (!flips[0] || !flips[1] || moved < 20)
    fail_msg("augmentation's draws: %d flipped, %d not, %d crops off the centre of 47 samples", flips[1], flips[0], moved);
}

/* ---- optimizers, the trainer's step, backprop_step, normalize_images ---- */

typedef struct opt_bufs {
  float *p, *m, *v; /* v unused by SGD */
} opt_bufs;

static void run_adam(lam_ctx *ctx, size_t n, opt_bufs *o, const float *g, float lr, float b1, float b2, float eps,
                     float wd, int decoupled, long step, const float *sched, const int32_t *kk, const lam_scaler *ls) {
  float *dp = dput(ctx, o->p, n * 4), *dg = dput(ctx, g, n * 4), *dm = dput(ctx, o->m, n * 4), *dv = dput(ctx, o->v, n * 4);
  float *ds = dput(ctx, sched, 9 * 4);
  int32_t *dk = dput(ctx, kk, 4);
  lam_scaler *dls = dput(ctx, ls, sizeof *ls);
  TU_OK(BE(ctx)->adam(ctx, n, dp, dg, dm, dv, lr, b1, b2, eps, wd, decoupled, step, ds, dk, dls));
  dfree(ctx, dls);
  dget(ctx, o->p, dp, n * 4, "adam p");
  dget(ctx, o->m, dm, n * 4, "adam m");
  dget(ctx, o->v, dv, n * 4, "adam v");
  dfree(ctx, dp), dfree(ctx, dg), dfree(ctx, dm), dfree(ctx, dv), dfree(ctx, ds), dfree(ctx, dk);
}
static void run_sgd(lam_ctx *ctx, size_t n, opt_bufs *o, const float *g, float lr, float mom, float wd, int first,
                    const float *sched, const int32_t *kk, const lam_scaler *ls) {
  float *dp = dput(ctx, o->p, n * 4), *dg = dput(ctx, g, n * 4), *dm = dput(ctx, o->m, n * 4), *ds = dput(ctx, sched, 9 * 4);
  int32_t *dk = dput(ctx, kk, 4);
  lam_scaler *dls = dput(ctx, ls, sizeof *ls);
  TU_OK(BE(ctx)->sgd(ctx, n, dp, dg, dm, lr, mom, wd, first, ds, dk, dls));
  dfree(ctx, dls);
  dget(ctx, o->p, dp, n * 4, "sgd p");
  dget(ctx, o->m, dm, n * 4, "sgd buf");
  dfree(ctx, dp), dfree(ctx, dg), dfree(ctx, dm), dfree(ctx, ds), dfree(ctx, dk);
}

static void test_optimizers(void **state) {
  (void)state;
  static const size_t ns[] = {1, 37, 40001};
  uint64_t k = 0;
  for (size_t c = 0; c < 3; c++)
    for (int v = 0; v < 8; v++) { /* bit 0: weight decay; bit 1: decoupled (Adam) / momentum (SGD); bit 2: sched */
      seed_case("optimizers", k++);
      size_t n = ns[c];
      char what[160];
      float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = v & 1 ? 0.01f : 0.0f;
      int decoupled = (v >> 1) & 1, use_sched = (v >> 2) & 1;
      long step = 7;
      float *p0 = frand(n, -1, 1), *g = frand(n, -1, 1), *m0 = frand(n, -0.1, 0.1), *v0 = frand(n, 1e-4, 1e-2);
      /* rows k: Adam's (step size, bc2) or SGD's first, then the rate, which replaces lr */
      float sched[9] = {0.5f, 0.25f, 2e-2f, 3e-3f, 0.9f, 5e-3f, 0.0f, 0.2f, 3e-2f};
      int32_t kk = 1, kk2 = 1 + (int32_t)(c & 1); /* SGD: row 1 (first) or 2 (not) */
      float coef[2], lr_a = use_sched ? sched[5] : lr, lr_s = use_sched ? sched[3 * kk2 + 2] : lr;
      if (use_sched) coef[0] = sched[3], coef[1] = sched[4];
      else lam_adam_coef(lr, b1, b2, step, coef);
      /* Adam: p' = p (1 - lr wd) - step_size m' / (sqrt(v') / bc2 + eps) (decoupled), or g += wd p */
      double *pref = dzero(n), *pscale = dzero(n), *mref = dzero(n), *mscale = dzero(n), *vref = dzero(n);
      for (size_t i = 0; i < n; i++) {
        double gi = g[i], pi = p0[i];
        if (decoupled) pi *= 1.0 - (double)lr_a * wd;
        else gi += (double)wd * pi;
        double mi = b1 * (double)m0[i] + (1.0 - b1) * gi, vi = b2 * (double)v0[i] + (1.0 - b2) * gi * gi;
        double upd = coef[0] * mi / (sqrt(vi) / coef[1] + eps);
        mref[i] = mi, mscale[i] = fabs(b1 * m0[i]) + fabs((1.0 - b1) * gi), vref[i] = vi;
        pref[i] = pi - upd, pscale[i] = fabs(pi) + fabs(upd);
      }
      opt_bufs o = {fdup(p0, n), fdup(m0, n), fdup(v0, n)}, oc = {0};
      run_adam(g_ctx, n, &o, g, lr, b1, b2, eps, wd, decoupled, step, use_sched ? sched : NULL, use_sched ? &kk : NULL, NULL);
      if (g_cuda) {
        oc = (opt_bufs){fdup(p0, n), fdup(m0, n), fdup(v0, n)};
        run_adam(g_cpu, n, &oc, g, lr, b1, b2, eps, wd, decoupled, step, use_sched ? sched : NULL, use_sched ? &kk : NULL, NULL);
      }
      snprintf(what, sizeof what, "adam n=%zu wd=%g decoupled=%d sched=%d", n, wd, decoupled, use_sched);
      verify(what, n, o.p, pref, oc.p, pscale, 1e-6, 1e-6); /* a few float roundings of each term */
      verify(what, n, o.m, mref, oc.m, mscale, 1e-6, 1e-6);
      verify(what, n, o.v, vref, oc.v, NULL, 1e-6, 1e-6);
      free(o.p), free(o.m), free(o.v), free(oc.p), free(oc.m), free(oc.v);

      /* SGD: g += wd p; buf = first ? g : momentum buf + g; p -= lr buf (torch.optim.SGD) */
      float mom = decoupled ? 0.9f : 0.0f;
      int first = use_sched ? sched[3 * kk2] != 0.0f : (int)(c & 1);
      for (size_t i = 0; i < n; i++) {
        double gi = g[i] + (double)wd * p0[i], bi = gi;
        if (mom != 0.0f) bi = first ? gi : mom * (double)m0[i] + gi;
        mref[i] = mom != 0.0f ? bi : m0[i], mscale[i] = fabs(gi) + fabs(mom * m0[i]);
        pref[i] = p0[i] - lr_s * bi, pscale[i] = fabs(p0[i]) + fabs(lr_s * bi);
      }
      o = (opt_bufs){fdup(p0, n), fdup(m0, n), NULL};
      run_sgd(g_ctx, n, &o, g, lr, mom, wd, use_sched ? 0 : first, use_sched ? sched : NULL, use_sched ? &kk2 : NULL, NULL);
      if (g_cuda) {
        oc = (opt_bufs){fdup(p0, n), fdup(m0, n), NULL};
        run_sgd(g_cpu, n, &oc, g, lr, mom, wd, use_sched ? 0 : first, use_sched ? sched : NULL, use_sched ? &kk2 : NULL, NULL);
      }
      snprintf(what, sizeof what, "sgd n=%zu wd=%g momentum=%g first=%d sched=%d", n, wd, mom, first, use_sched);
      verify(what, n, o.p, pref, oc.p, pscale, 1e-6, 1e-6);
      verify(what, n, o.m, mref, oc.m, mscale, 1e-6, 1e-6);
      free(o.p), free(o.m), free(oc.p), free(oc.m);
      free(p0), free(g), free(m0), free(v0), free(pref), free(pscale), free(mref), free(mscale), free(vref);
    }
}

/* ---- loss scaling (the fp16 trainer's, prims.h: lam_scaler): grad_check, scaler_update, the optimizers' skip and
 * unscale, xent's lscale ---- */

static lam_scaler scaler_of(float scale, int found, int clean, int taken) {
  lam_scaler z;
  memset(&z, 0, sizeof z);
  z.scale = scale, z.found = found, z.clean = clean, z.taken = taken;
  return z;
}
/* grad_check over n values of g placed `off` floats into the buffer (off 1: not 16-byte aligned). */
static int run_grad_check(lam_ctx *ctx, size_t n, const float *g, size_t off, int found) {
  float *h = fnan(n + off);
  memcpy(h + off, g, n * 4);
  float *dg = dput(ctx, h, (n + off) * 4);
  lam_scaler ls = scaler_of(2.0f, found, 0, 0), *dls = dput(ctx, &ls, sizeof ls);
  TU_OK(BE(ctx)->grad_check(ctx, n, dg + off, dls));
  dget(ctx, &ls, dls, sizeof ls, "grad_check");
  dfree(ctx, dg), dfree(ctx, dls), free(h);
  return ls.found;
}
static lam_scaler run_scaler_update(lam_ctx *ctx, lam_scaler ls, int adam, const float *sched, int32_t k) {
  lam_scaler *dls = dput(ctx, &ls, sizeof ls);
  float *ds = dput(ctx, sched, 9 * 4);
  int32_t *dk = dput(ctx, &k, 4);
  TU_OK(BE(ctx)->scaler_update(ctx, dls, adam, 0.9f, 0.999f, ds, dk));
  dget(ctx, &ls, dls, sizeof ls, "scaler_update");
  dfree(ctx, dls), dfree(ctx, ds), dfree(ctx, dk);
  return ls;
}
static void want_scaler(const char *what, const lam_scaler *got, float scale, float inv, int clean, int skipped, int taken,
                        int stuck) {
  if (got->scale != scale || got->inv != inv || got->clean != clean || got->skipped != skipped || got->taken != taken ||
      got->stuck != stuck)
    fail_msg("%s%s: scale %g inv %g clean %d skipped %d taken %d stuck %d; want %g %g %d %d %d %d", what,
             g_cuda ? " [cuda]" : "", (double)got->scale, (double)got->inv, got->clean, got->skipped, got->taken,
             got->stuck, (double)scale, (double)inv, clean, skipped, taken, stuck);
}

static void test_loss_scale(void **state) {
  (void)state;
  lam_ctx *ctxs[2] = {g_ctx, g_cpu};
  for (int which = 0; which < (g_cuda ? 2 : 1); which++) {
    lam_ctx *ctx = ctxs[which];
    /* grad_check: finite leaves the flag, one inf, -inf or NaN anywhere (first, last, inside; aligned or not) sets it */
    static const size_t ns[] = {1, 7, 40001, ((size_t)1 << 20) + 3};
    for (size_t c = 0; c < 4; c++)
      for (size_t off = 0; off < 2; off++) {
        seed_case("loss_scale grad_check", c * 2 + off);
        const size_t n = ns[c];
        float *g = frand(n, -60000, 60000);
        if (run_grad_check(ctx, n, g, off, 0) != 0) fail_msg("grad_check n=%zu off=%zu: finite values set the flag", n, off);
        if (run_grad_check(ctx, n, g, off, 1) != 1) fail_msg("grad_check n=%zu: a set flag was cleared", n);
        const float bad[3] = {INFINITY, -INFINITY, NAN};
        const size_t at[3] = {0, n - 1, (size_t)(tu_next(&g_r) % n)};
        for (int b = 0; b < 3; b++) {
          const float keep = g[at[b]];
          g[at[b]] = bad[b];
          if (run_grad_check(ctx, n, g, off, 0) != 1)
            fail_msg("grad_check n=%zu off=%zu: %g at %zu was not found", n, off, (double)bad[b], at[b]);
          g[at[b]] = keep;
        }
        free(g);
      }
    /* scaler_update, step by step as GradScaler: rates in row k's third column */
    const float sched[9] = {0, 0, 1e-3f, 0, 0, 2e-3f, 0, 0, 3e-3f};
    lam_scaler s = run_scaler_update(ctx, scaler_of(8.0f, 0, LAM_SCALE_GROWTH - 1, 5), 1, sched, 1);
    want_scaler("taken, growth", &s, 16.0f, 0.125f, 0, 0, 6, 0); /* the 2000th clean step doubles */
    const double bc1 = 1.0 - pow((double)0.9f, 6.0), bc2 = 1.0 - pow((double)0.999f, 6.0); /* the float betas */
    if (s.coef[0] != (float)(2e-3f / bc1) || s.coef[1] != (float)sqrt(bc2) || s.coef[2] != 2e-3f)
      fail_msg("scaler_update: Adam's scalars of step 6 at rate 2e-3 are %g %g %g, want %g %g 2e-3", (double)s.coef[0],
               (double)s.coef[1], (double)s.coef[2], (double)(float)(2e-3f / bc1), (double)(float)sqrt(bc2));
    s.found = 1;
    s = run_scaler_update(ctx, s, 1, sched, 2);
    want_scaler("skipped", &s, 8.0f, 1.0f / 16, 0, 1, 6, 0);
    s = run_scaler_update(ctx, scaler_of(LAM_SCALE_FLOOR, 1, 7, 3), 1, sched, 2);
    want_scaler("skipped at the floor", &s, LAM_SCALE_FLOOR, 1.0f / LAM_SCALE_FLOOR, 0, 1, 3, 3);
    s = run_scaler_update(ctx, scaler_of(3.0f * LAM_SCALE_FLOOR / 2, 1, 0, 0), 1, sched, 0);
    want_scaler("halved to the floor", &s, LAM_SCALE_FLOOR, 2.0f / (3.0f * LAM_SCALE_FLOOR), 0, 1, 0, 0);
    s = run_scaler_update(ctx, scaler_of(4.0f, 0, 10, 0), 0, sched, 0);
    want_scaler("sgd's first", &s, 4.0f, 0.25f, 11, 0, 1, 0);
    if (s.coef[0] != 1.0f || s.coef[2] != 1e-3f) fail_msg("scaler_update: SGD's first step %g rate %g", (double)s.coef[0], (double)s.coef[2]);
    s = run_scaler_update(ctx, s, 0, sched, 1);
    if (s.coef[0] != 0.0f || s.taken != 2) fail_msg("scaler_update: SGD's second step is marked first");

    /* the optimizers: a found step changes nothing; else the gradient times inv with the scaler's scalars, which is
     * the unscaled gradient's step bit for bit (inv a power of two) */
    const size_t n = 40001;
    seed_case("loss_scale optimizers", (uint64_t)which);
    float *p0 = frand(n, -1, 1), *g = frand(n, -1, 1), *m0 = frand(n, -0.1, 0.1), *v0 = frand(n, 1e-4, 1e-2);
    float *gs = xmalloc(n * 4);
    for (size_t i = 0; i < n; i++) gs[i] = g[i] * 1024.0f;
    lam_scaler ls = scaler_of(1024.0f, 0, 0, 6);
    ls.inv = 1.0f / 1024, ls.coef[0] = 0.0123f, ls.coef[1] = 0.0456f, ls.coef[2] = 2e-3f;
    const float row[9] = {0.0123f, 0.0456f, 2e-3f, 0, 0, 0, 0, 0, 0};
    const int32_t k0 = 0;
    for (int opt = 0; opt < 2; opt++) {
      opt_bufs a = {fdup(p0, n), fdup(m0, n), fdup(v0, n)}, b = {fdup(p0, n), fdup(m0, n), fdup(v0, n)};
      if (opt == 0) {
        run_adam(ctx, n, &a, gs, 1.0f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 99, NULL, NULL, &ls);
        run_adam(ctx, n, &b, g, 1.0f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 99, row, &k0, NULL);
      } else {
        run_sgd(ctx, n, &a, gs, 1.0f, 0.9f, 1e-4f, 1, NULL, NULL, &ls);
        run_sgd(ctx, n, &b, g, 1.0f, 0.9f, 1e-4f, 0, row, &k0, NULL);
      }
      if (memcmp(a.p, b.p, n * 4) || memcmp(a.m, b.m, n * 4) || (opt == 0 && memcmp(a.v, b.v, n * 4)))
        fail_msg("%s with a loss scale of 1024: not the unscaled step%s", opt ? "sgd" : "adam", g_cuda && !which ? " [cuda]" : "");
      free(a.p), free(a.m), free(a.v);
      a = (opt_bufs){fdup(p0, n), fdup(m0, n), fdup(v0, n)};
      ls.found = 1;
      gs[n / 2] = INFINITY;
      if (opt == 0) run_adam(ctx, n, &a, gs, 1.0f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 99, NULL, NULL, &ls);
      else run_sgd(ctx, n, &a, gs, 1.0f, 0.9f, 1e-4f, 1, NULL, NULL, &ls);
      if (memcmp(a.p, p0, n * 4) || memcmp(a.m, m0, n * 4) || memcmp(a.v, v0, n * 4))
        fail_msg("%s: a skipped step (found) changed the parameters or the state", opt ? "sgd" : "adam");
      ls.found = 0;
      gs[n / 2] = g[n / 2] * 1024.0f;
      free(a.p), free(a.m), free(a.v), free(b.p), free(b.m), free(b.v);
    }
    free(p0), free(g), free(m0), free(v0), free(gs);
  }
  /* xent: the loss's gradient times *lscale exactly (a power of two), the statistics as they were */
  const int B = 5, C = 7, P = 3;
  const size_t nl = (size_t)B * C * P;
  float *x = frand(nl, -3, 3), count = 11.0f, lscale = 4096.0f;
  uint8_t *labels = u8rand((size_t)B * P, 0, C - 1);
  xent_out a = {fnan(nl), {0, 0, 0}, NULL}, b = {fnan(nl), {0, 0, 0}, NULL};
  run_xent(g_ctx, B, C, P, x, labels, 1.0f, NULL, &count, 0.1f, &a);
  run_xent(g_ctx, B, C, P, x, labels, 1.0f, &lscale, &count, 0.1f, &b);
  for (size_t i = 0; i < nl; i++)
    if (b.dl[i] != a.dl[i] * lscale) fail_msg("xent lscale: dlogits[%zu] %g, want %g", i, (double)b.dl[i], (double)(a.dl[i] * lscale));
  if (memcmp(a.stats, b.stats, sizeof a.stats)) fail_msg("xent lscale: the statistics changed");
  free(x), free(labels), free(a.dl), free(b.dl);
}

static void test_step_backprop(void **state) {
  (void)state;
  seed_case("step_advance", 0);
  int32_t s0[2] = {5, 9}, sg[2], ref[2] = {5 + 512, 10}, sc[2];
  int32_t *d = dput(g_ctx, s0, 8);
  TU_OK(BE(g_ctx)->step_advance(g_ctx, d, 512, NULL));
  dget(g_ctx, sg, d, 8, "step_advance");
  memcpy(sc, ref, 8);
  verify_bytes("step_advance", 2, 4, sg, ref, sc);
  /* the first step with a non-finite loss: noted once (stats[3]), never for a finite loss */
  const float cases[3][4] = {{3.5f, 1, 2, 0}, {NAN, 1, 2, 0}, {INFINITY, 1, 2, 7}};
  const float want3[3] = {0, 11, 7}; /* state[1] is 10 after the call above, 11 after this one */
  for (int c = 0; c < 3; c++) {
    int32_t s1[2] = {5 + 512, 10};
    TU_OK(lam_mem_upload(g_ctx, d, s1, 8));
    float *ds = dput(g_ctx, cases[c], 16), got[4];
    TU_OK(BE(g_ctx)->step_advance(g_ctx, d, 1, ds));
    dget(g_ctx, got, ds, 16, "step_advance stats");
    dfree(g_ctx, ds);
    if (got[3] != want3[c]) fail_msg("step_advance with loss sum %g, stats[3] %g: stats[3] = %g, want %g", cases[c][0],
                                     cases[c][3], got[3], want3[c]);
  }
  dfree(g_ctx, d);
  static const size_t ns[] = {1, 37, 40001};
  for (size_t c = 0; c < 3; c++) {
    seed_case("backprop_step", c);
    size_t n = ns[c];
    float *err = frand(n, -1, 1), *in = frand(n, -1, 1), *w0 = frand(n, -1, 1), lr = 0.05f;
    double *wref = dzero(n), *wscale = dzero(n);
    for (size_t i = 0; i < n; i++)
      wref[i] = w0[i] - lr * ((double)err[i] * in[i]), wscale[i] = fabs(w0[i]) + fabs(lr * err[i] * in[i]);
    float *got = fdup(w0, n), *cpu = g_cuda ? fdup(w0, n) : NULL;
    for (int pass = 0; pass < 1 + g_cuda; pass++) {
      lam_ctx *ctx = pass ? g_cpu : g_ctx;
      float *out = pass ? cpu : got, *de = dput(ctx, err, n * 4), *di = dput(ctx, in, n * 4), *dw = dput(ctx, out, n * 4);
      TU_OK(BE(ctx)->backprop_step(ctx, n, de, di, lr, dw));
      dget(ctx, out, dw, n * 4, "backprop_step");
      dfree(ctx, de), dfree(ctx, di), dfree(ctx, dw);
    }
    char what[80];
    snprintf(what, sizeof what, "backprop_step n=%zu", n);
    verify(what, n, got, wref, cpu, wscale, 1e-6, 1e-6);
    free(err), free(in), free(w0), free(wref), free(wscale), free(got), free(cpu);
  }
}

static void test_normalize_images(void **state) {
  (void)state;
  uint64_t k = 0;
  for (int c = 1; c <= 3; c += 2)
    for (int nhwc = 0; nhwc < 2; nhwc++)
      for (int bf16 = 0; bf16 < 2; bf16++) {
        seed_case("normalize_images", k++);
        size_t n = 2, h = 3, w = 5, tot = n * c * h * w;
        uint8_t *in = u8rand(tot, 0, 255);
        float mean[3], std[3];
        for (int i = 0; i < c; i++) mean[i] = (float)U(0.2, 0.8), std[i] = (float)U(0.1, 0.5);
        double *ref = dzero(tot), *scale = dzero(tot);
        for (size_t img = 0; img < n; img++)
          for (int ch = 0; ch < c; ch++)
            for (size_t p = 0; p < h * w; p++) {
              size_t o = (img * c + ch) * h * w + p, src = nhwc ? (img * h * w + p) * c + ch : o;
              ref[o] = (in[src] / 255.0 - mean[ch]) / std[ch];
              /* float: a few ulps of the terms; bfloat16: half an ulp of the value (2^-9) on top */
              scale[o] = 1e-6 * (in[src] / 255.0 + mean[ch]) / std[ch] + (bf16 ? 0x1p-8 * fabs(ref[o]) : 0.0);
            }
        void *got = poison(tot, bf16), *cpu = g_cuda ? poison(tot, bf16) : NULL;
        for (int pass = 0; pass < 1 + g_cuda; pass++) {
          lam_ctx *ctx = pass ? g_cpu : g_ctx;
          void *out = pass ? cpu : got;
          uint8_t *di = dput(ctx, in, tot);
          void *dout = dput(ctx, out, tot * (bf16 ? 2 : 4));
          TU_OK(BE(ctx)->normalize_images(ctx, n, c, (int)h, (int)w, nhwc, di, mean, std, bf16, dout));
          dget(ctx, out, dout, tot * (bf16 ? 2 : 4), "normalize_images");
          dfree(ctx, di), dfree(ctx, dout);
        }
        float *gf = bf16 ? as_float_bf16((uint16_t *)got, tot) : fdup(got, tot);
        float *cf = !cpu ? NULL : bf16 ? as_float_bf16((uint16_t *)cpu, tot) : fdup(cpu, tot);
        char what[120];
        snprintf(what, sizeof what, "normalize_images c=%d nhwc=%d bf16=%d", c, nhwc, bf16);
        verify(what, tot, gf, ref, cf, scale, 1.0, 2.0); /* tol 1 on the scale above; 2: two roundings apart */
        free(in), free(ref), free(scale), free(got), free(cpu), free(gf), free(cf);
      }
}

/* ---- the fused conv -> relu -> maxpool: NULL bias and NULL db (test_fused covers the rest) ---- */

/* ---- bfloat16 activations: each primitive in NHWC bfloat16 against itself in the format under test, on the
 * same inputs (bfloat16 values, so both formats read the same numbers) ---- */

/* ---- tcat: a clip's frames as channels, x (B*T, C, P) -> y (B, T*C, P), channel t*C + k = frame t's k. Values
 * move unchanged, so in plain NCHW order y is x value for value; checked exactly, in every format and in bfloat16
 * NHWC (on values that bfloat16 holds), both ways. ---- */
static const int k_tc[][4] = {{1, 2, 1, 1}, {2, 16, 1, 4096}, {3, 4, 8, 49}, {2, 5, 3, 7}, {1, 3, 64, 1}};

static void run_tcat(lam_ctx *ctx, int bwd, int B, int T, int C, size_t P, const float *in, float *out) {
  const size_t n = (size_t)B * T * C * P;
  float *di = dput(ctx, in, n * 4), *dout = dput(ctx, out, n * 4);
  const int ib = bwd ? B : B * T, ic = bwd ? T * C : C, ob = bwd ? B * T : B, oc = bwd ? C : T * C;
  void *fi = fin(ctx, di, ib, ic, P), *fo = fin(ctx, dout, ob, oc, P);
  if (bwd) TU_OK(BE(ctx)->tcat_bwd(ctx, g_fmt, B, T, C, P, fi, fo));
  else TU_OK(BE(ctx)->tcat_fwd(ctx, g_fmt, B, T, C, P, fi, fo));
  fout(ctx, fi, di, ib, ic, P, "tcat in (format)"), fout(ctx, fo, dout, ob, oc, P, "tcat out (format)");
  dget(ctx, out, dout, n * 4, bwd ? "tcat_bwd" : "tcat_fwd");
  dfree(ctx, di), dfree(ctx, dout);
}
static void tcat_case(int B, int T, int C, size_t P, int bf16) {
  const size_t n = (size_t)B * T * C * P;
  float *x = frand(n, -2, 2);
  if (bf16) round_bf16(x, n);
  double *ref = dzero(n);
  for (size_t i = 0; i < n; i++) ref[i] = x[i];
  for (int bwd = 0; bwd < 2; bwd++) {
    char what[120];
    snprintf(what, sizeof what, "tcat_%s%s B=%d T=%d C=%d P=%zu", bwd ? "bwd" : "fwd", bf16 ? " bf16" : "", B, T, C, P);
    float *y = fnan(n), *yc = g_cuda ? fnan(n) : NULL;
    if (bf16) IN_BF16(run_tcat(g_ctx, bwd, B, T, C, P, x, y));
    else run_tcat(g_ctx, bwd, B, T, C, P, x, y);
    if (g_cuda && bf16) IN_BF16(run_tcat(g_cpu, bwd, B, T, C, P, x, yc));
    else if (g_cuda) run_tcat(g_cpu, bwd, B, T, C, P, x, yc);
    verify(what, n, y, ref, yc, NULL, 0.0, 0.0);
    if (g_cuda) cmp_f(what, n, y, ref, NULL, 0.0); /* and the values themselves */
    free(y), free(yc);
  }
  free(x), free(ref);
}
static void test_tcat(void **state) {
  (void)state;
  for (size_t s = 0; s < sizeof k_tc / sizeof k_tc[0]; s++) {
    seed_case("tcat", s);
    tcat_case(k_tc[s][0], k_tc[s][1], k_tc[s][2], (size_t)k_tc[s][3], 0);
    tcat_case(k_tc[s][0], k_tc[s][1], k_tc[s][2], (size_t)k_tc[s][3], 1);
  }
}

static void test_fmt_bf16(void **state) {
  (void)state;
  static const int shapes[][4] = {{3, 16, 7, 9}, {2, 3, 5, 6}, {4, 64, 4, 4}, {2, 8, 1, 1}}; /* B, C, H, W */
  for (int si = 0; si < 4; si++) {
    const int B = shapes[si][0], C = shapes[si][1], H = shapes[si][2], W = shapes[si][3], P = H * W;
    const size_t n = (size_t)B * C * P;
    char what[160], geo[64];
    snprintf(geo, sizeof geo, "B=%d C=%d %dx%d", B, C, H, W);
    seed_case("fmt_bf16", (uint64_t)si);
    float *x = frand16(n, -2, 2), *dy = frand16(n, -1, 1), *bias = frand(C, -1, 1), *gamma = frand(C, 0.5, 1.5),
          *beta = frand(C, -0.5, 0.5);
    /* channel bias, both ways */
    float *y32 = fdup(x, n), *y16 = fdup(x, n), *db32 = frand(C, -1, 1), *db16 = fdup(db32, C), *db0 = fdup(db32, C);
    run_channel_bias_fwd(g_ctx, B, C, P, y32, bias);
    IN_BF16(run_channel_bias_fwd(g_ctx, B, C, P, y16, bias));
    snprintf(what, sizeof what, "bf16 channel_bias_fwd %s", geo), cmp_bf16(what, n, y16, y32);
    run_channel_bias_bwd(g_ctx, B, C, P, dy, db32);
    IN_BF16(run_channel_bias_bwd(g_ctx, B, C, P, dy, db16));
    snprintf(what, sizeof what, "bf16 channel_bias_bwd %s", geo), cmp_bf16_added(what, C, db16, db32, db0);
    free(y32), free(y16), free(db32), free(db16), free(db0);
    /* activations: gelu and relu, forward and backward */
    for (int a = 0; a < 2; a++) {
      const int act = a ? LAM_ACT_RELU : LAM_ACT_GELU;
      float *o32 = fnan(n), *o16 = fnan(n), *g32 = fnan(n), *g16 = fnan(n);
      run_act(g_ctx, 0, act, 0.0f, n, x, NULL, NULL, o32, 0);
      IN_BF16(run_act(g_ctx, 0, act, 0.0f, n, x, NULL, NULL, o16, 0));
      snprintf(what, sizeof what, "bf16 act_fwd %s %s", act_name(act), geo), cmp_bf16(what, n, o16, o32);
      round_bf16(o32, n); /* relu's backward reads y: the same y for both */
      run_act(g_ctx, 1, act, 0.0f, n, x, o32, dy, g32, 0);
      IN_BF16(run_act(g_ctx, 1, act, 0.0f, n, x, o32, dy, g16, 0));
      snprintf(what, sizeof what, "bf16 act_bwd %s %s", act_name(act), geo), cmp_bf16(what, n, g16, g32);
      free(o32), free(o16), free(g32), free(g16);
    }
    /* BatchNorm alone and with gelu: training forward (y and the statistics), then backward */
    for (int fused = 0; fused < 2; fused++) {
      bn_bufs o32 = {fnan(n), fnan(C), fnan(C), frand(C, -1, 1), frand(C, 0.5, 2)}, o16;
      o16 = (bn_bufs){fnan(n), fnan(C), fnan(C), fdup(o32.rm, C), fdup(o32.rv, C)};
      if (fused) {
        run_bn_act_fwd(g_ctx, B, C, P, LAM_ACT_GELU, 0.0f, x, gamma, beta, &o32, 0.1f, 1e-5f, 1);
        IN_BF16(run_bn_act_fwd(g_ctx, B, C, P, LAM_ACT_GELU, 0.0f, x, gamma, beta, &o16, 0.1f, 1e-5f, 1));
      } else {
        run_bn_fwd(g_ctx, B, C, P, x, gamma, beta, &o32, 0.1f, 1e-5f, 1, 0);
        IN_BF16(run_bn_fwd(g_ctx, B, C, P, x, gamma, beta, &o16, 0.1f, 1e-5f, 1, 0));
      }
      const char *op = fused ? "bn_act(gelu)" : "bn";
      snprintf(what, sizeof what, "bf16 %s_fwd y %s", op, geo), cmp_bf16(what, n, o16.y, o32.y);
      snprintf(what, sizeof what, "bf16 %s_fwd mean %s", op, geo), cmp_bf16(what, C, o16.mean, o32.mean);
      snprintf(what, sizeof what, "bf16 %s_fwd invstd %s", op, geo), cmp_bf16(what, C, o16.invstd, o32.invstd);
      snprintf(what, sizeof what, "bf16 %s_fwd run_var %s", op, geo), cmp_bf16(what, C, o16.rv, o32.rv);
      float *dx32 = fnan(n), *dx16 = fnan(n), *dg32 = frand(C, -1, 1), *dg16 = fdup(dg32, C), *dbt32 = frand(C, -1, 1),
            *dbt16 = fdup(dbt32, C), *dg0 = fdup(dg32, C), *dbt0 = fdup(dbt32, C);
      if (fused) {
        run_bn_act_bwd(g_ctx, B, C, P, LAM_ACT_GELU, 0.0f, x, NULL, dy, gamma, beta, o32.mean, o32.invstd, dx32, dg32,
                       dbt32);
        IN_BF16(run_bn_act_bwd(g_ctx, B, C, P, LAM_ACT_GELU, 0.0f, x, NULL, dy, gamma, beta, o32.mean, o32.invstd, dx16,
                               dg16, dbt16));
      } else {
        run_bn_bwd(g_ctx, B, C, P, x, dy, gamma, o32.mean, o32.invstd, dx32, dg32, dbt32, 0);
        IN_BF16(run_bn_bwd(g_ctx, B, C, P, x, dy, gamma, o32.mean, o32.invstd, dx16, dg16, dbt16, 0));
      }
      snprintf(what, sizeof what, "bf16 %s_bwd dx %s", op, geo), cmp_bf16(what, n, dx16, dx32);
      snprintf(what, sizeof what, "bf16 %s_bwd dgamma %s", op, geo), cmp_bf16_added(what, C, dg16, dg32, dg0);
      snprintf(what, sizeof what, "bf16 %s_bwd dbeta %s", op, geo), cmp_bf16_added(what, C, dbt16, dbt32, dbt0);
      free(o32.y), free(o32.mean), free(o32.invstd), free(o32.rm), free(o32.rv);
      free(o16.y), free(o16.mean), free(o16.invstd), free(o16.rm), free(o16.rv);
      free(dx32), free(dx16), free(dg32), free(dg16), free(dbt32), free(dbt16), free(dg0), free(dbt0);
    }
    /* pooling: max (windows apart and overlapping) and average, both ways */
    for (int pk = 0; pk < 2 && H >= 2 && W >= 2; pk++) {
      const int K = 2 + pk * (H >= 3 && W >= 3), stride = 2;
      lam_pool_geom g = {C, H, W, K, stride, (H - K) / stride + 1, (W - K) / stride + 1};
      const size_t ny = (size_t)B * C * g.OH * g.OW;
      float *py32 = fnan(ny), *py16 = fnan(ny), *pdy = frand16(ny, -1, 1), *pdx32 = fnan(n), *pdx16 = fnan(n);
      int32_t *arg32 = xmalloc(ny * 4), *arg16 = xmalloc(ny * 4);
      run_maxpool_fwd(g_ctx, &g, B, x, py32, arg32);
      IN_BF16(run_maxpool_fwd(g_ctx, &g, B, x, py16, arg16));
      snprintf(what, sizeof what, "bf16 maxpool_fwd K=%d %s", K, geo), cmp_bf16(what, ny, py16, py32);
      snprintf(what, sizeof what, "bf16 maxpool_fwd arg K=%d %s", K, geo);
      verify_bytes(what, ny, 4, arg16, arg32, arg32);
      run_maxpool_bwd(g_ctx, &g, B, pdy, arg32, pdx32);
      IN_BF16(run_maxpool_bwd(g_ctx, &g, B, pdy, arg32, pdx16));
      snprintf(what, sizeof what, "bf16 maxpool_bwd K=%d %s", K, geo), cmp_bf16(what, n, pdx16, pdx32);
      run_avgpool_fwd(g_ctx, &g, B, x, py32);
      IN_BF16(run_avgpool_fwd(g_ctx, &g, B, x, py16));
      snprintf(what, sizeof what, "bf16 avgpool_fwd K=%d %s", K, geo), cmp_bf16(what, ny, py16, py32);
      run_avgpool_bwd(g_ctx, &g, B, pdy, pdx32);
      IN_BF16(run_avgpool_bwd(g_ctx, &g, B, pdy, pdx16));
      snprintf(what, sizeof what, "bf16 avgpool_bwd K=%d %s", K, geo), cmp_bf16(what, n, pdx16, pdx32);
      free(py32), free(py16), free(pdy), free(pdx32), free(pdx16), free(arg32), free(arg16);
    }
    /* global average pool and nearest upsampling, both ways */
    {
      float *m32 = fnan((size_t)B * C), *m16 = fnan((size_t)B * C), *mdy = frand16((size_t)B * C, -1, 1);
      float *g32 = fnan(n), *g16 = fnan(n), *u32 = fnan(n * 4), *u16 = fnan(n * 4), *udy = frand16(n * 4, -1, 1);
      run_plane_mean_fwd(g_ctx, B, C, P, x, m32);
      IN_BF16(run_plane_mean_fwd(g_ctx, B, C, P, x, m16));
      snprintf(what, sizeof what, "bf16 plane_mean_fwd %s", geo), cmp_bf16(what, (size_t)B * C, m16, m32);
      run_plane_mean_bwd(g_ctx, B, C, P, mdy, g32);
      IN_BF16(run_plane_mean_bwd(g_ctx, B, C, P, mdy, g16));
      snprintf(what, sizeof what, "bf16 plane_mean_bwd %s", geo), cmp_bf16(what, n, g16, g32);
      run_upsample(g_ctx, 0, B, C, H, W, 2, x, u32);
      IN_BF16(run_upsample(g_ctx, 0, B, C, H, W, 2, x, u16));
      snprintf(what, sizeof what, "bf16 upsample_fwd %s", geo), cmp_bf16(what, n * 4, u16, u32);
      run_upsample(g_ctx, 1, B, C, H, W, 2, udy, g32);
      IN_BF16(run_upsample(g_ctx, 1, B, C, H, W, 2, udy, g16));
      snprintf(what, sizeof what, "bf16 upsample_bwd %s", geo), cmp_bf16(what, n, g16, g32);
      free(m32), free(m16), free(mdy), free(g32), free(g16), free(u32), free(u16), free(udy);
    }
    /* elementwise: add, mask_scale, copy_rows (a concat's copies in NHWC: rows of pixels) */
    {
      float *a32 = fnan(n), *a16 = fnan(n), *s32 = fnan(n), *s16 = fnan(n);
      uint8_t *mask = u8rand(n, 0, 1);
      run_add(g_ctx, n, x, dy, a32, 0);
      IN_BF16(run_add(g_ctx, n, x, dy, a16, 0));
      snprintf(what, sizeof what, "bf16 add %s", geo), cmp_bf16(what, n, a16, a32);
      run_mask_scale(g_ctx, n, x, mask, 1.25f, s32, 0);
      IN_BF16(run_mask_scale(g_ctx, n, x, mask, 1.25f, s16, 0));
      snprintf(what, sizeof what, "bf16 mask_scale %s", geo), cmp_bf16(what, n, s16, s32);
      const size_t rows = (size_t)B * P, ld = (size_t)C + 5;
      float *dst32 = frand16(rows * ld, -1, 1), *dst16 = fdup(dst32, rows * ld);
      run_copy_rows(g_ctx, rows, (size_t)C, x, (size_t)C, dst32, ld);
      IN_BF16(run_copy_rows(g_ctx, rows, (size_t)C, x, (size_t)C, dst16, ld));
      snprintf(what, sizeof what, "bf16 copy_rows %s", geo);
      verify_bytes(what, rows * ld, 4, dst16, dst32, dst32); /* copies: exact */
      free(a32), free(a16), free(s32), free(s16), free(mask), free(dst32), free(dst16);
    }
    /* per-pixel cross-entropy: the loss's sums and dlogits */
    {
      uint8_t *labels = u8rand((size_t)B * P, 0, (unsigned)(C - 1));
      labels[0] = LAM_LABEL_IGNORE;
      float count = 0;
      for (size_t i = 0; i < (size_t)B * P; i++) count += labels[i] != LAM_LABEL_IGNORE;
      xent_out o32 = {fnan(n), {0, 0, 0}, xmalloc((size_t)B * P)}, o16 = {fnan(n), {0, 0, 0}, xmalloc((size_t)B * P)};
      run_xent(g_ctx, B, C, P, x, labels, 1.0f, NULL, &count, 0.1f, &o32);
      IN_BF16(run_xent(g_ctx, B, C, P, x, labels, 1.0f, NULL, &count, 0.1f, &o16));
      snprintf(what, sizeof what, "bf16 xent dlogits %s", geo), cmp_bf16(what, n, o16.dl, o32.dl);
      snprintf(what, sizeof what, "bf16 xent stats %s", geo), cmp_bf16(what, 3, o16.stats, o32.stats);
      snprintf(what, sizeof what, "bf16 xent pred %s", geo);
      verify_bytes(what, (size_t)B * P, 1, o16.pred, o32.pred, o32.pred); /* the same logits: the same argmax */
      free(labels), free(o32.dl), free(o32.pred), free(o16.dl), free(o16.pred);
    }
    /* convolutions: 3x3 padded, and 1x1 (whose NHWC filter is PyTorch's order) */
    for (int kk = 0; kk < 2; kk++) {
      const int K = kk ? 1 : 3, OC = C == 3 ? 8 : C;
      lam_conv_geom g = {C, H, W, K, 1, K / 2, H, W};
      const size_t ny = (size_t)B * OC * P, nw = (size_t)OC * C * K * K;
      float *Wt = frand16(nw, -0.5, 0.5), *cdy = frand16(ny, -1, 1);
      conv_io io32 = {x, Wt, cdy, fnan(ny), fnan(n), frand(nw, -1, 1), 0}, io16 = io32;
      io16.y = fnan(ny), io16.dx = fnan(n), io16.dW = fdup(io32.dW, nw);
      float *dW0 = fdup(io32.dW, nw);
      run_conv2d(g_ctx, &g, OC, B, &io32, 0);
      IN_BF16(run_conv2d(g_ctx, &g, OC, B, &io16, 0));
      snprintf(what, sizeof what, "bf16 conv2d_fwd K=%d %s", K, geo), cmp_bf16(what, ny, io16.y, io32.y);
      snprintf(what, sizeof what, "bf16 conv2d_bwd_data K=%d %s", K, geo), cmp_bf16(what, n, io16.dx, io32.dx);
      snprintf(what, sizeof what, "bf16 conv2d_bwd_filter K=%d %s", K, geo);
      cmp_bf16_added(what, nw, io16.dW, io32.dW, dW0);
      free(dW0), free(Wt), free(cdy), free(io32.y), free(io32.dx), free(io32.dW), free(io16.y), free(io16.dx), free(io16.dW);
    }
    free(x), free(dy), free(bias), free(gamma), free(beta);
  }
}

static void test_conv_pool_null(void **state) {
  (void)state;
  seed_case("conv_pool_null", 0);
  const lam_pool_geom g = {3, 6, 7, 2, 2, 3, 3};
  const int B = 2;
  size_t nG = (size_t)g.C * B * g.H * g.W, ny = (size_t)B * g.C * g.OH * g.OW;
  float *G = frand(nG, -1, 1), *zeros = xmalloc(g.C * 4), *dy = frand(ny, -1, 1), *db0 = frand(g.C, -1, 1);
  for (int c = 0; c < g.C; c++) zeros[c] = 0.0f;
  float *dG = dput(g_ctx, G, nG * 4), *dz = dput(g_ctx, zeros, g.C * 4), *y1 = fnan(ny), *y2 = fnan(ny);
  int32_t *a1 = xmalloc(ny * 4), *a2 = xmalloc(ny * 4);
  float *dy1 = dput(g_ctx, y1, ny * 4), *dy2 = dput(g_ctx, y2, ny * 4);
  int32_t *da1 = dput(g_ctx, a1, ny * 4), *da2 = dput(g_ctx, a2, ny * 4);
  TU_OK(BE(g_ctx)->conv_pool_fwd(g_ctx, &g, B, dG, NULL, dy1, da1));
  TU_OK(BE(g_ctx)->conv_pool_fwd(g_ctx, &g, B, dG, dz, dy2, da2));
  dget(g_ctx, y1, dy1, ny * 4, "conv_pool_fwd"), dget(g_ctx, y2, dy2, ny * 4, "conv_pool_fwd");
  dget(g_ctx, a1, da1, ny * 4, "conv_pool_fwd"), dget(g_ctx, a2, da2, ny * 4, "conv_pool_fwd");
  /* no bias = a bias of zeros, bit for bit */
  if (memcmp(y1, y2, ny * 4) || memcmp(a1, a2, ny * 4)) fail_msg("conv_pool_fwd: bias NULL differs from zeros");
  for (int bf16 = 0; bf16 < 2; bf16++) {
    size_t es = bf16 ? 2 : 4;
    float *ddy = dput(g_ctx, dy, ny * 4), *ddb = dput(g_ctx, db0, g.C * 4);
    void *g1 = dput(g_ctx, G, nG * es), *g2 = dput(g_ctx, G, nG * es);
    void *h1 = xmalloc(nG * es), *h2 = xmalloc(nG * es);
    TU_OK(BE(g_ctx)->conv_pool_bwd(g_ctx, &g, B, ddy, dy1, da1, g1, bf16 ? g_half : LAM_DT_F32, NULL));
    TU_OK(BE(g_ctx)->conv_pool_bwd(g_ctx, &g, B, ddy, dy1, da1, g2, bf16 ? g_half : LAM_DT_F32, ddb));
    dget(g_ctx, h1, g1, nG * es, "conv_pool_bwd"), dget(g_ctx, h2, g2, nG * es, "conv_pool_bwd");
    if (memcmp(h1, h2, nG * es)) fail_msg("conv_pool_bwd bf16=%d: dG with db NULL differs", bf16);
    dfree(g_ctx, ddy), dfree(g_ctx, ddb), dfree(g_ctx, g1), dfree(g_ctx, g2);
    free(h1), free(h2);
  }
  dfree(g_ctx, dG), dfree(g_ctx, dz), dfree(g_ctx, dy1), dfree(g_ctx, dy2), dfree(g_ctx, da1), dfree(g_ctx, da2);
  free(G), free(zeros), free(dy), free(db0), free(y1), free(y2), free(a1), free(a2);
}

/* ---- NaN through every relu (issue 30, finding 9): relu(NaN) is NaN as PyTorch's, in act_fwd (the format
 * under test and bfloat16 NHWC), bn_act_fwd, conv_pool_fwd and conv_pool_direct_fwd; and the backward passes
 * the gradient where the output is NaN (PyTorch's threshold_backward: y <= 0 gives 0, else dy) instead of
 * hiding it behind a 0. A relu that maps NaN to 0 lets a NaN weight train on unseen and be saved. ---- */

/* Fails unless v is NaN. */
static void want_nan(const char *what, size_t i, float v) {
  if (!isnan(v)) fail_msg("%s: element %zu is %g where the input was NaN: relu must let NaN through", what, i, v);
}

static void relu_nan_act(int bf16) {
  const size_t n = 41;
  char what[96];
  for (int act = LAM_ACT_RELU; act <= LAM_ACT_LEAKY; act += LAM_ACT_LEAKY - LAM_ACT_RELU) {
    const float alpha = act == LAM_ACT_LEAKY ? 0.1f : 0.0f;
    float *x = frand16(n, -2, 2), *y = fnan(n), *dy = frand16(n, -1, 1), *dx = fnan(n);
    for (size_t i = 0; i < n; i += 4) x[i] = NAN;
    if (bf16) IN_BF16(run_act(g_ctx, 0, act, alpha, n, x, NULL, NULL, y, 0));
    else run_act(g_ctx, 0, act, alpha, n, x, NULL, NULL, y, 0);
    snprintf(what, sizeof what, "act_fwd %s%s", act_name(act), bf16 ? " bf16" : "");
    for (size_t i = 0; i < n; i += 4) want_nan(what, i, y[i]);
    if (bf16) IN_BF16(run_act(g_ctx, 1, act, alpha, n, x, y, dy, dx, 0));
    else run_act(g_ctx, 1, act, alpha, n, x, y, dy, dx, 0);
    snprintf(what, sizeof what, "act_bwd %s%s", act_name(act), bf16 ? " bf16" : "");
    for (size_t i = 0; i < n; i += 4) { /* torch: relu passes dy, leaky (NaN > 0 false) alpha dy */
      const float want = act == LAM_ACT_RELU ? dy[i] : alpha * dy[i];
      if (!(fabsf(dx[i] - want) <= 1e-6f + (bf16 ? 1.0f / 128 : 1e-6f) * fabsf(want)))
        fail_msg("%s: dx[%zu] = %g where y is NaN, want dy's %g (the gradient hidden)", what, i, dx[i], want);
    }
    free(x), free(y), free(dy), free(dx);
  }
}

static void relu_nan_bn_act(int bf16) {
  const int B = 2, C = 3, P = 5;
  const size_t n = (size_t)B * C * P;
  char what[96];
  snprintf(what, sizeof what, "bn_act_fwd relu (evaluation)%s", bf16 ? " bf16" : "");
  float *x = frand16(n, -2, 2), *gamma = frand(C, 0.5, 1.5), *beta = frand(C, -0.5, 0.5);
  for (size_t i = 1; i < n; i += 3) x[i] = NAN;
  bn_bufs o = {fnan(n), NULL, NULL, frand(C, -0.2, 0.2), frand(C, 0.5, 2)};
  if (bf16) IN_BF16(run_bn_act_fwd(g_ctx, B, C, P, LAM_ACT_RELU, 0.0f, x, gamma, beta, &o, 0.1f, 1e-5f, 0));
  else run_bn_act_fwd(g_ctx, B, C, P, LAM_ACT_RELU, 0.0f, x, gamma, beta, &o, 0.1f, 1e-5f, 0);
  for (size_t i = 1; i < n; i += 3) want_nan(what, i, o.y[i]);
  /* backward: y NaN in all of channel 0, so dbeta[0] += sum(dz) is the sum of dy there (0 if hidden) */
  float *y = frand16(n, 0.1, 2), *dy = frand16(n, -1, 1), *dx = fnan(n), *mean = frand(C, -0.1, 0.1),
        *invstd = frand(C, 0.5, 2), *dg = frand(C, -1, 1), *db = fnan(C), *xf = frand16(n, -2, 2);
  for (int c = 0; c < C; c++) db[c] = 0.0f;
  double want = 0;
  for (int b = 0; b < B; b++)
    for (int p = 0; p < P; p++) y[((size_t)b * C) * P + p] = NAN, want += dy[((size_t)b * C) * P + p];
  if (bf16) IN_BF16(run_bn_act_bwd(g_ctx, B, C, P, LAM_ACT_RELU, 0.0f, xf, y, dy, gamma, beta, mean, invstd, dx, dg, db));
  else run_bn_act_bwd(g_ctx, B, C, P, LAM_ACT_RELU, 0.0f, xf, y, dy, gamma, beta, mean, invstd, dx, dg, db);
  snprintf(what, sizeof what, "bn_act_bwd relu%s", bf16 ? " bf16" : "");
  if (!(fabs(db[0] - want) <= 1e-2 * (1 + fabs(want))))
    fail_msg("%s: dbeta of a channel whose y is NaN is %g, want the sum of its dy %g (the gradient hidden)", what,
             db[0], want);
  free(x), free(gamma), free(beta), free(o.y), free(o.rm), free(o.rv), free(y), free(dy), free(dx), free(mean);
  free(invstd), free(dg), free(db), free(xf);
}

/* conv_pool_fwd from G with NaN in some windows: those outputs NaN; conv_pool_bwd routes dy to their argmax
 * (float and bfloat16 dG). */
static void relu_nan_conv_pool(void) {
  const lam_pool_geom g = {2, 6, 8, 2, 2, 3, 4};
  const int B = 2;
  const size_t nG = (size_t)g.C * B * g.H * g.W, ny = (size_t)B * g.C * g.OH * g.OW, P = (size_t)g.H * g.W;
  float *G = frand(nG, -1, 1), *bias = frand(g.C, -0.5, 0.5), *y = fnan(ny), *dy = frand(ny, 0.5, 1);
  for (size_t i = 0; i < nG; i += 7) G[i] = NAN;
  int32_t *arg = xmalloc(ny * 4);
  float *dG_ = dput(g_ctx, G, nG * 4), *db_ = dput(g_ctx, bias, g.C * 4), *dy_ = dput(g_ctx, y, ny * 4);
  int32_t *da = dput(g_ctx, arg, ny * 4);
  TU_OK(BE(g_ctx)->conv_pool_fwd(g_ctx, &g, B, dG_, db_, dy_, da));
  dget(g_ctx, y, dy_, ny * 4, "conv_pool_fwd"), dget(g_ctx, arg, da, ny * 4, "conv_pool_fwd");
  size_t nans = 0;
  for (int b = 0; b < B; b++)
    for (int c = 0; c < g.C; c++)
      for (int oh = 0; oh < g.OH; oh++)
        for (int ow = 0; ow < g.OW; ow++) {
          int has = 0;
          for (int a = 0; a < 2; a++)
            for (int e = 0; e < 2; e++) has |= isnan(G[(size_t)c * B * P + (size_t)b * P + (2 * oh + a) * g.W + 2 * ow + e]);
          size_t o = (((size_t)b * g.C + c) * g.OH + oh) * g.OW + ow;
          if (has) want_nan("conv_pool_fwd", o, y[o]), nans++;
        }
  if (!nans) fail_msg("conv_pool_fwd: no window held a NaN: the test would prove little");
  float *ddy = dput(g_ctx, dy, ny * 4);
  for (int bf16 = 0; bf16 < 2; bf16++) {
    const size_t es = bf16 ? 2 : 4;
    void *gout = dput(g_ctx, G, nG * es), *h = xmalloc(nG * es);
    TU_OK(BE(g_ctx)->conv_pool_bwd(g_ctx, &g, B, ddy, dy_, da, gout, bf16 ? g_half : LAM_DT_F32, NULL));
    dget(g_ctx, h, gout, nG * es, "conv_pool_bwd");
    for (size_t o = 0; o < ny; o++) {
      if (!isnan(y[o])) continue;
      size_t b = o / ((size_t)g.C * g.OH * g.OW), c = o / ((size_t)g.OH * g.OW) % g.C;
      size_t at = c * B * P + b * P + (size_t)arg[o];
      float got = bf16 ? lam_half_to_f32(g_half, ((uint16_t *)h)[at]) : ((float *)h)[at];
      if (!(fabsf(got - dy[o]) <= (bf16 ? 1.0f / 128 : 0.0f) * fabsf(dy[o])))
        fail_msg("conv_pool_bwd bf16=%d: dG at the argmax of NaN output %zu is %g, want dy's %g", bf16, o, got, dy[o]);
    }
    dfree(g_ctx, gout), free(h);
  }
  dfree(g_ctx, dG_), dfree(g_ctx, db_), dfree(g_ctx, dy_), dfree(g_ctx, da), dfree(g_ctx, ddy);
  free(G), free(bias), free(y), free(dy), free(arg);
}

/* The direct first-layer block against float64: conv_pool_direct_fwd's y = maxpool(relu(conv(x) + bias)) (its arg
 * must point at a window position whose conv output is y's), and conv_pool_direct_bwd's dW += and db += from the
 * backend's own y and arg: the sum over the pooled outputs that passed the relu of dy times the input under each tap.
 * Geometries as lamina takes the first layer (C*K*K <= LAM_DIRECT_TAPS): MNIST's (1, 28, 3, no padding, stride 1),
 * padded, strided and 3-channel ones; windows 2/2 and an overlapping 3/2. */
static void test_conv_pool_direct(void **state) {
  (void)state;
  static const int geo[][7] = {/* C, H, W, K, stride, pad, pool k */
                               {1, 28, 28, 3, 1, 0, 2}, {1, 9, 7, 5, 1, 2, 2}, {3, 12, 10, 3, 1, 1, 2},
                               {2, 11, 11, 3, 2, 1, 3}, {3, 8, 9, 2, 1, 0, 2}};
  for (size_t s = 0; s < sizeof geo / sizeof geo[0]; s++) {
    seed_case("conv_pool_direct", s);
    const int C = geo[s][0], H = geo[s][1], W = geo[s][2], K = geo[s][3], st = geo[s][4], pad = geo[s][5],
              pk = geo[s][6], OC = 7, B = 3, taps = C * K * K;
    const int CH = (H + 2 * pad - K) / st + 1, CW = (W + 2 * pad - K) / st + 1;
    const lam_conv_geom cg = {C, H, W, K, st, pad, CH, CW};
    const lam_pool_geom pg = {OC, CH, CW, pk, 2, (CH - pk) / 2 + 1, (CW - pk) / 2 + 1};
    assert_true(taps <= LAM_DIRECT_TAPS);
    const size_t nx = (size_t)B * C * H * W, nw = (size_t)OC * taps, OP = (size_t)pg.OH * pg.OW, ny = (size_t)B * OC * OP;
    float *x = frand(nx, -1, 1), *w = frand(nw, -0.5, 0.5), *bias = frand(OC, -0.2, 0.2), *y = fnan(ny);
    float *dy = frand(ny, -1, 1), *dW0 = frand(nw, -1, 1), *db0 = frand(OC, -1, 1), *dW = fdup(dW0, nw), *db = fdup(db0, OC);
    int32_t *arg = xmalloc(ny * 4);
    for (size_t i = 0; i < ny; i++) arg[i] = -7;
    const size_t nwork = lam_direct_work_floats(OC, taps, (size_t)B * OP);
    float *work = fnan(nwork);
    /* the conv outputs in float64, and each tap's input (0 in the padding) */
    double *conv = dzero((size_t)B * OC * CH * CW), *cscale = dzero((size_t)B * OC * CH * CW);
#define XIN(b, c, ih, iw) ((ih) >= 0 && (ih) < H && (iw) >= 0 && (iw) < W ? (double)x[(((size_t)(b) * C + (c)) * H + (ih)) * W + (iw)] : 0.0)
    for (int b = 0; b < B; b++)
      for (int oc = 0; oc < OC; oc++)
        for (int h = 0; h < CH; h++)
          for (int v = 0; v < CW; v++) {
            double acc = bias[oc], a = fabs(bias[oc]);
            for (int c = 0, t = 0; c < C; c++)
              for (int kh = 0; kh < K; kh++)
                for (int kw = 0; kw < K; kw++, t++) {
                  const double xi = XIN(b, c, h * st - pad + kh, v * st - pad + kw);
                  acc += w[(size_t)oc * taps + t] * xi, a += fabs(w[(size_t)oc * taps + t] * xi);
                }
            const size_t o = (((size_t)b * OC + oc) * CH + h) * CW + v;
            conv[o] = acc, cscale[o] = a;
          }
    float *d_x = dput(g_ctx, x, nx * 4), *d_w = dput(g_ctx, w, nw * 4), *d_b = dput(g_ctx, bias, OC * 4),
          *d_y = dput(g_ctx, y, ny * 4), *d_dy = dput(g_ctx, dy, ny * 4), *d_dW = dput(g_ctx, dW, nw * 4),
          *d_db = dput(g_ctx, db, OC * 4), *d_work = dput(g_ctx, work, nwork * 4);
    int32_t *d_a = dput(g_ctx, arg, ny * 4);
    TU_OK(BE(g_ctx)->conv_pool_direct_fwd(g_ctx, &cg, &pg, B, d_x, d_w, d_b, d_y, d_a));
    dget(g_ctx, y, d_y, ny * 4, "conv_pool_direct_fwd y");
    dget(g_ctx, arg, d_a, ny * 4, "conv_pool_direct_fwd arg");
    char what[160];
    snprintf(what, sizeof what, "conv_pool_direct C=%d %dx%d K=%d stride %d pad %d, pool %d/2", C, H, W, K, st, pad, pk);
    /* y against the window's maximum after relu; arg in the window, at a conv output within rounding of it */
    double *yref = dzero(ny), *yscale = dzero(ny);
    for (int b = 0; b < B; b++)
      for (int oc = 0; oc < OC; oc++)
        for (int ph = 0; ph < pg.OH; ph++)
          for (int pw = 0; pw < pg.OW; pw++) {
            const size_t o = (((size_t)b * OC + oc) * pg.OH + ph) * pg.OW + pw;
            double m = -INFINITY, ms = 0;
            for (int i = 0; i < pk; i++)
              for (int j = 0; j < pk; j++) {
                const size_t q = (((size_t)b * OC + oc) * CH + ph * 2 + i) * CW + pw * 2 + j;
                if (conv[q] > m) m = conv[q];
                ms = fmax(ms, cscale[q]);
              }
            yref[o] = m > 0 ? m : 0, yscale[o] = ms;
            const int a = arg[o], ah = a / CW, aw = a % CW;
            if (a < 0 || ah < ph * 2 || ah >= ph * 2 + pk || aw < pw * 2 || aw >= pw * 2 + pk)
              fail_msg("%s: arg of output %zu is %d, outside its window (row %d.., col %d..)", what, o, a, ph * 2, pw * 2);
            const double at = conv[(((size_t)b * OC + oc) * CH + ah) * CW + aw];
            if (m > 0 && fabs(at - m) > 1e-5 * ms)
              fail_msg("%s: arg of output %zu points at %.9g, the window's maximum is %.9g", what, o, at, m);
          }
    cmp_f(what, ny, y, yref, yscale, 1e-5);
    /* the backward from the backend's own y and arg */
    double *wref = dzero(nw), *wscale = dzero(nw), *bref = dzero(OC), *bscale = dzero(OC);
    for (size_t i = 0; i < nw; i++) wref[i] = dW0[i], wscale[i] = fabs(dW0[i]);
    for (int oc = 0; oc < OC; oc++) bref[oc] = db0[oc], bscale[oc] = fabs(db0[oc]);
    for (int b = 0; b < B; b++)
      for (int oc = 0; oc < OC; oc++)
        for (size_t k = 0; k < OP; k++) {
          const size_t o = ((size_t)b * OC + oc) * OP + k;
          if (!(y[o] > 0)) continue;
          const int h = arg[o] / CW, v = arg[o] % CW;
          bref[oc] += dy[o], bscale[oc] += fabs(dy[o]);
          for (int c = 0, t = 0; c < C; c++)
            for (int kh = 0; kh < K; kh++)
              for (int kw = 0; kw < K; kw++, t++) {
                const double xi = XIN(b, c, h * st - pad + kh, v * st - pad + kw);
                wref[(size_t)oc * taps + t] += dy[o] * xi, wscale[(size_t)oc * taps + t] += fabs(dy[o] * xi);
              }
        }
#undef XIN
    TU_OK(BE(g_ctx)->conv_pool_direct_bwd(g_ctx, &cg, &pg, B, d_x, d_dy, d_y, d_a, d_dW, d_db, d_work));
    dget(g_ctx, dW, d_dW, nw * 4, "conv_pool_direct_bwd dW");
    dget(g_ctx, db, d_db, OC * 4, "conv_pool_direct_bwd db");
    char wb[200];
    snprintf(wb, sizeof wb, "%s: dW +=", what);
    cmp_f(wb, nw, dW, wref, wscale, 1e-5);
    snprintf(wb, sizeof wb, "%s: db +=", what);
    cmp_f(wb, OC, db, bref, bscale, 1e-5);
    dfree(g_ctx, d_x), dfree(g_ctx, d_w), dfree(g_ctx, d_b), dfree(g_ctx, d_y), dfree(g_ctx, d_dy), dfree(g_ctx, d_dW);
    dfree(g_ctx, d_db), dfree(g_ctx, d_work), dfree(g_ctx, d_a);
    free(x), free(w), free(bias), free(y), free(dy), free(dW0), free(db0), free(dW), free(db), free(arg), free(work);
    free(conv), free(cscale), free(yref), free(yscale), free(wref), free(wscale), free(bref), free(bscale);
  }
}

/* conv_pool_direct_fwd with a NaN weight in output channel 0: all its outputs NaN; conv_pool_direct_bwd adds
 * their dy to db[0]. Two geometries: the MNIST-sized first layer (C 1, K 3, no padding, CUDA's own kernel) and
 * a padded 2-channel one. */
static void relu_nan_direct(void) {
  static const int geo[][4] = {{1, 10, 3, 0}, {2, 8, 3, 1}}; /* C, H (= W), K, pad */
  for (int s = 0; s < 2; s++) {
    const int C = geo[s][0], H = geo[s][1], K = geo[s][2], pad = geo[s][3], OC = 9, B = 2;
    const int OH = H + 2 * pad - K + 1, taps = C * K * K;
    const lam_conv_geom cg = {C, H, H, K, 1, pad, OH, OH};
    const lam_pool_geom pg = {OC, OH, OH, 2, 2, OH / 2, OH / 2};
    const size_t nx = (size_t)B * C * H * H, nw = (size_t)OC * taps, OP = (size_t)pg.OH * pg.OW, ny = (size_t)B * OC * OP;
    float *x = frand(nx, -1, 1), *w = frand(nw, -0.5, 0.5), *bias = frand(OC, -0.1, 0.1), *y = fnan(ny);
    float *dy = frand(ny, 0.5, 1), *dW = fnan(nw), *db = fnan(OC);
    w[taps / 2] = NAN;
    for (size_t i = 0; i < nw; i++) dW[i] = 0.0f;
    for (int c = 0; c < OC; c++) db[c] = 0.0f;
    int32_t *arg = xmalloc(ny * 4);
    const size_t nwork = lam_direct_work_floats(OC, taps, (size_t)B * OP);
    float *work = fnan(nwork);
    float *d_x = dput(g_ctx, x, nx * 4), *d_w = dput(g_ctx, w, nw * 4), *d_b = dput(g_ctx, bias, OC * 4),
          *d_y = dput(g_ctx, y, ny * 4), *d_dy = dput(g_ctx, dy, ny * 4), *d_dW = dput(g_ctx, dW, nw * 4),
          *d_db = dput(g_ctx, db, OC * 4), *d_work = dput(g_ctx, work, nwork * 4);
    int32_t *d_a = dput(g_ctx, arg, ny * 4);
    TU_OK(BE(g_ctx)->conv_pool_direct_fwd(g_ctx, &cg, &pg, B, d_x, d_w, d_b, d_y, d_a));
    dget(g_ctx, y, d_y, ny * 4, "conv_pool_direct_fwd");
    char what[96];
    snprintf(what, sizeof what, "conv_pool_direct_fwd C=%d K=%d pad=%d", C, K, pad);
    double want = 0;
    for (int b = 0; b < B; b++)
      for (size_t k = 0; k < OP; k++) want_nan(what, (size_t)b * OC * OP + k, y[(size_t)b * OC * OP + k]), want += dy[(size_t)b * OC * OP + k];
    TU_OK(BE(g_ctx)->conv_pool_direct_bwd(g_ctx, &cg, &pg, B, d_x, d_dy, d_y, d_a, d_dW, d_db, d_work));
    dget(g_ctx, db, d_db, OC * 4, "conv_pool_direct_bwd");
    if (!(fabs(db[0] - want) <= 1e-5 * (1 + fabs(want))))
      fail_msg("conv_pool_direct_bwd C=%d K=%d: db of the channel whose outputs are NaN is %g, want the sum of their dy "
               "%g (the gradient hidden)", C, K, db[0], want);
    dfree(g_ctx, d_x), dfree(g_ctx, d_w), dfree(g_ctx, d_b), dfree(g_ctx, d_y), dfree(g_ctx, d_dy), dfree(g_ctx, d_dW);
    dfree(g_ctx, d_db), dfree(g_ctx, d_work), dfree(g_ctx, d_a);
    free(x), free(w), free(bias), free(y), free(dy), free(dW), free(db), free(arg), free(work);
  }
}

/* poison: every byte 0xFF (NaN as float and as bfloat16), and nothing past the bytes asked (dget checks the guard). */
static void test_poison(void **state) {
  (void)state;
  static const size_t sizes[] = {1, 3, 64, 1000, 4099};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    uint8_t *h = xmalloc(sizes[k]), *back = xmalloc(sizes[k]);
    for (size_t i = 0; i < sizes[k]; i++) h[i] = (uint8_t)i;
    void *d = dput(g_ctx, h, sizes[k]);
    TU_OK(BE(g_ctx)->poison(g_ctx, d, sizes[k]));
    dget(g_ctx, back, d, sizes[k], "poison");
    for (size_t i = 0; i < sizes[k]; i++)
      if (back[i] != 0xFF) fail_msg("poison of %zu bytes: byte %zu is 0x%02x, want 0xFF", sizes[k], i, back[i]);
    dfree(g_ctx, d);
    free(h), free(back);
  }
}

/* Every primitive of the backend's list (prims.h's LAM_NN_PRIMS) is called by a case in test_prims' sources (the
 * build passes their paths as LAMINA_TEST_PRIMS_SRC, '|' between them): a primitive added without a test fails here. */
static void test_every_prim_has_a_case(void **state) {
  (void)state;
#define NAME_OF(name, args) #name,
  static const char *const prims[] = {LAM_NN_PRIMS(NAME_OF)};
#undef NAME_OF
  enum { N_PRIMS = sizeof prims / sizeof prims[0] };
  int found[N_PRIMS] = {0};
  static char src[1 << 20];
  size_t files = 0;
  for (const char *p = LAMINA_TEST_PRIMS_SRC; *p; files++) {
    const size_t len = strcspn(p, "|");
    char path[4096];
    snprintf(path, sizeof path, "%.*s", (int)len, p);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot read this test's source %s", path);
    size_t n = fread(src, 1, sizeof src - 1, f);
    fclose(f);
    if (n == sizeof src - 1) fail_msg("%s: longer than the %zu bytes this check reads", path, sizeof src - 1);
    src[n] = 0;
    for (size_t i = 0; i < N_PRIMS; i++) {
      char call[80];
      snprintf(call, sizeof call, "->%s(", prims[i]);
      if (strstr(src, call)) found[i] = 1;
    }
    p += len + (p[len] == '|');
  }
  int missing = 0;
  for (size_t i = 0; i < N_PRIMS; i++)
    if (!found[i]) print_error("primitive %s has no case in test_prims' sources (files read: %zu)\n", prims[i], files), missing++;
  if (missing) fail_msg("%d of %zu primitives have no case in test_prims' sources", missing, (size_t)N_PRIMS);
  print_message("  each of the %zu primitives of prims.h has a case here\n", sizeof prims / sizeof prims[0]);
}

static void test_relu_nan(void **state) {
  (void)state;
  seed_case("relu_nan", 0);
  relu_nan_act(0), relu_nan_act(1);
  relu_nan_bn_act(0), relu_nan_bn_act(1);
  relu_nan_conv_pool();
  relu_nan_direct();
}

/* The 16-bit cases again in IEEE half (the fp16 precision), after every other test has run in bfloat16. */
#define IN_F16_TEST(name)                 \
  static void name##_f16(void **state) { \
    g_half = LAM_DT_F16;                  \
    name(state);                          \
    g_half = LAM_DT_BF16;                 \
  }
IN_F16_TEST(test_gemm_bf16)
IN_F16_TEST(test_to_bf16)
IN_F16_TEST(test_im2col_col2im)
IN_F16_TEST(test_tcat)
IN_F16_TEST(test_fmt_bf16)
IN_F16_TEST(test_conv_pool_null)

int main(int argc, char **argv) {
  g_fmt = LAM_FMT_NCHW;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "nhwc")) g_fmt = lam_fmt_of(LAM_DT_F32, 1);
  if (argc > 1 && !strcmp(argv[1], "cuda")) {
    const char *why = NULL;
    if (lam_cuda_device_count(&why) == 0) {
      printf("test_prims cuda: no CUDA device (%s): skipping\n", why ? why : "none");
      return 77;
    }
    g_cuda = 1;
  }
  if (lam_ctx_create(&g_ctx, g_cuda ? LAM_DEVICE_CUDA : LAM_DEVICE_CPU) != LAM_OK ||
      (g_cuda && lam_ctx_create(&g_cpu, LAM_DEVICE_CPU) != LAM_OK)) {
    fprintf(stderr, "test_prims: %s\n", lam_last_error());
    return 1;
  }
  if (lam_ctx_set_precision(g_ctx, LAM_PRECISION_FP32) != LAM_OK) { /* the CPU's matrix products are fp32 */
    fprintf(stderr, "test_prims: %s\n", lam_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gemm),         cmocka_unit_test(test_gemm_bf16),       cmocka_unit_test(test_to_bf16),
      cmocka_unit_test(test_zero),         cmocka_unit_test(test_im2col_col2im),   cmocka_unit_test(test_conv2d),
      cmocka_unit_test(test_layout),
      cmocka_unit_test(test_dense_bias),   cmocka_unit_test(test_channel_bias),    cmocka_unit_test(test_pool), cmocka_unit_test(test_pool_nan),
      cmocka_unit_test(test_plane_mean),   cmocka_unit_test(test_tpool),           cmocka_unit_test(test_tcat),  cmocka_unit_test(test_upsample),        cmocka_unit_test(test_act),
      cmocka_unit_test(test_bn),           cmocka_unit_test(test_bn_sync),         cmocka_unit_test(test_bn_add_act),        cmocka_unit_test(test_groupnorm),         cmocka_unit_test(test_bn_act),          cmocka_unit_test(test_dropout_mask),
      cmocka_unit_test(test_elementwise),
      cmocka_unit_test(test_copy_rows),    cmocka_unit_test(test_label_count),     cmocka_unit_test(test_xent),
      cmocka_unit_test(test_gather),       cmocka_unit_test(test_gather_aug),       cmocka_unit_test(test_optimizers),      cmocka_unit_test(test_step_backprop),
      cmocka_unit_test(test_normalize_images), cmocka_unit_test(test_conv_pool_null), cmocka_unit_test(test_conv_pool_direct), cmocka_unit_test(test_fmt_bf16),
      cmocka_unit_test(test_relu_nan),     cmocka_unit_test(test_poison),          cmocka_unit_test(test_every_prim_has_a_case),
      cmocka_unit_test(test_loss_scale),
      cmocka_unit_test(test_gemm_bf16_f16), cmocka_unit_test(test_to_bf16_f16),  cmocka_unit_test(test_im2col_col2im_f16),
      cmocka_unit_test(test_tcat_f16),      cmocka_unit_test(test_fmt_bf16_f16), cmocka_unit_test(test_conv_pool_null_f16),
  };
  const char *name = g_cuda ? (g_fmt.nhwc ? "prims_nhwc_cuda" : "prims_cuda") : (g_fmt.nhwc ? "prims_nhwc" : "prims");
  int failed = TU_RUN_GROUP(name, tests, NULL, NULL);
  lam_ctx_free(g_ctx);
  if (g_cpu) lam_ctx_free(g_cpu);
  return failed ? 1 : 0;
}
