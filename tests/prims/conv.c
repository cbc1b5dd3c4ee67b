/* conv.c — test_prims' convolutions: im2col and col2im (float and 16-bit columns), conv2d_fwd, conv2d_bwd_data and
 * conv2d_bwd_filter (with and without workspace), the layout changes with bias (cbp_to_bcp, bcp_to_cbp), a conv's
 * channel bias (channel_bias_fwd, channel_bias_bwd), the fused conv -> relu -> maxpool's NULL bias and db
 * (conv_pool_fwd, conv_pool_bwd) and the direct first-layer block (conv_pool_direct_fwd, conv_pool_direct_bwd). */
#include "prims_test.h"

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

/* tight: no workspace at all (NCHW float32 only, where cuDNN's part is the whole of it): the backend must take
 * algorithms that need none, as it must where a batch it did not plan for meets the scratch of one it did. */
void run_conv2d(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B, conv_io *io, int tight) {
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

/* ---- a conv with its output's channel statistics (conv2d_fwd_stats) ----
 * y and the sums against float64 (the sums of the reference y, each on the scale of sum |y| or sum y^2), in the
 * format under test and in NHWC bfloat16 and float16; on CUDA both with force (cuDNN's one graph wherever it has
 * an engine: float16, OC a multiple of 8) and without (the first call of a geometry times the routes). NCHW on
 * CUDA is not a format of the primitive (it says so). */
static void run_conv_stats(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B, const float *x, const float *W, int force,
                           float *y, float *sums, int *one_pass) {
  size_t nx = (size_t)B * g->C * g->H * g->W, ny = (size_t)B * OC * g->OH * g->OW, nw = (size_t)OC * g->C * g->K * g->K;
  size_t ws_bytes = 0;
  TU_OK(BE(ctx)->conv2d_workspace(ctx, g_fmt, g, OC, B, &ws_bytes));
  void *ws = NULL;
  TU_OK(lam_mem_alloc(ctx, &ws, ws_bytes ? ws_bytes : 1));
  float *dx = dput(ctx, x, nx * 4), *dW = dput(ctx, W, nw * 4), *dy = dput(ctx, y, ny * 4), *ds = dput(ctx, sums, 2 * (size_t)OC * 4);
  void *fx = fin(ctx, dx, B, g->C, (size_t)g->H * g->W), *fy = fin(ctx, dy, B, OC, (size_t)g->OH * g->OW),
       *fW = fin_flat(ctx, dW, nw);
  TU_OK(BE(ctx)->conv2d_fwd_stats(ctx, g_fmt, g, OC, B, fx, fW, fy, ds, force, ws, ws_bytes, one_pass));
  fout(ctx, fy, dy, B, OC, (size_t)g->OH * g->OW, "conv2d_fwd_stats y (format)");
  fout(ctx, fx, dx, B, g->C, (size_t)g->H * g->W, "conv2d_fwd_stats x (format)");
  fout_flat(ctx, fW, dW, nw, "conv2d_fwd_stats W (format)");
  dget(ctx, y, dy, ny * 4, "conv2d_fwd_stats y");
  dget(ctx, sums, ds, 2 * (size_t)OC * 4, "conv2d_fwd_stats sums");
  dfree(ctx, dx), dfree(ctx, dW), dfree(ctx, dy), dfree(ctx, ds);
  TU_OK(lam_mem_free(ctx, ws));
}

static void test_conv2d_fwd_stats(void **state) {
  (void)state;
  static const struct { int B, C, H, W, K, stride, pad, OC; } k_cs[] = {
      {2, 3, 8, 8, 3, 1, 1, 8}, {3, 16, 6, 5, 3, 1, 1, 16}, {2, 64, 4, 4, 1, 1, 0, 64}, {1, 5, 5, 7, 3, 1, 1, 5},
      {2, 8, 9, 9, 3, 2, 1, 16}, {2, 3, 16, 16, 3, 1, 1, 64}, {4, 64, 8, 8, 3, 1, 1, 64}};
  const lam_fmt keep = g_fmt;
  int ran_one_pass = 0;
  for (size_t s = 0; s < sizeof k_cs / sizeof k_cs[0]; s++)
    for (int fi = 0; fi < 3; fi++) {
      g_fmt = fi == 0 ? keep : lam_fmt_of(fi == 1 ? LAM_DT_BF16 : LAM_DT_F16, 1);
      const char *why = "";
      if (BE(g_ctx)->supports && !BE(g_ctx)->supports(LAM_PRIM_conv2d_fwd_stats, g_fmt, &why)) {
        print_message("  conv2d_fwd_stats: not a format here (%s)\n", why);
        continue;
      }
      seed_case("conv2d_fwd_stats", 3 * s + (uint64_t)fi);
      const int B = k_cs[s].B, OC = k_cs[s].OC;
      lam_conv_geom g = {k_cs[s].C, k_cs[s].H, k_cs[s].W, k_cs[s].K, k_cs[s].stride, k_cs[s].pad, 0, 0};
      g.OH = (g.H + 2 * g.pad - g.K) / g.stride + 1, g.OW = (g.W + 2 * g.pad - g.K) / g.stride + 1;
      const size_t P = (size_t)g.OH * g.OW, ny = (size_t)B * OC * P, rows = (size_t)g.C * g.K * g.K,
                   nx = (size_t)B * g.C * g.H * g.W, nw = (size_t)OC * rows;
      float *x = frand16(nx, -1, 1), *W = frand16(nw, -0.5, 0.5); /* 16-bit values: every format reads them alike */
      double *yref = dzero(ny), *ys = dzero(ny), *sref = dzero(2 * (size_t)OC), *ss = dzero(2 * (size_t)OC);
      for (int b = 0; b < B; b++)
        for (size_t p = 0; p < P; p++)
          for (size_t r = 0; r < rows; r++) {
            long xi = col_src(&g, B, r, (size_t)b * P + p);
            if (xi < 0) continue;
            for (int oc = 0; oc < OC; oc++) {
              const double xw = (double)x[xi] * W[(size_t)oc * rows + r];
              yref[((size_t)b * OC + oc) * P + p] += xw, ys[((size_t)b * OC + oc) * P + p] += fabs(xw);
            }
          }
      for (int b = 0; b < B; b++)
        for (int oc = 0; oc < OC; oc++)
          for (size_t p = 0; p < P; p++) {
            const double v = yref[((size_t)b * OC + oc) * P + p];
            sref[oc] += v, ss[oc] += fabs(v), sref[OC + oc] += v * v, ss[OC + oc] += v * v;
          }
      /* float32: the GEMM's sums; 16-bit: y rounded (2^-9 or 2^-12 of it), the sums of y before or after */
      const double tol = g_fmt.dt == LAM_DT_F32 ? 1e-5 : g_fmt.dt == LAM_DT_BF16 ? 8e-3 : 1.5e-3;
      for (int force = 0; force < 2; force++) {
        float *y = fnan(ny), *sums = fnan(2 * (size_t)OC);
        int one_pass = -1;
        run_conv_stats(g_ctx, &g, OC, B, x, W, force, y, sums, &one_pass);
        char what[160];
        snprintf(what, sizeof what, "conv2d_fwd_stats %s C=%d %dx%d K=%d stride=%d OC=%d B=%d force=%d (%s)",
                 g_fmt.dt == LAM_DT_F32 ? "f32" : g_fmt.dt == LAM_DT_BF16 ? "bf16" : "f16", g.C, g.H, g.W, g.K, g.stride,
                 OC, B, force, one_pass ? "one graph" : "two steps");
        assert_true(one_pass == 0 || one_pass == 1);
        if (!g_cuda) assert_int_equal(one_pass, 0);
        ran_one_pass += one_pass;
        if (one_pass) print_message("  %s\n", what);
        cmp_f(what, ny, y, yref, ys, tol);
        char w2[200];
        snprintf(w2, sizeof w2, "%s sums", what);
        cmp_f(w2, 2 * (size_t)OC, sums, sref, ss, tol);
        free(y), free(sums);
      }
      free(x), free(W), free(yref), free(ys), free(sref), free(ss);
    }
  g_fmt = keep;
  print_message("  conv2d_fwd_stats: %d call(s) ran cuDNN's one graph\n", ran_one_pass);
}

/* ---- layout changes with bias; biases ---- */

/* (B, C, P): odd sizes, C = 1, P = 1, 3 and 64 channels; the last ones split a channel's reduction over
 * several CUDA blocks (unevenly), or have more channels than the split allows. */
const bcp_case k_bcp[] = {{1, 1, 1},   {2, 3, 5},     {5, 3, 1},    {3, 64, 7},  {4, 1, 33},  {2, 17, 256},
                          {7, 64, 64}, {33, 3, 1000}, {9, 5, 4099}, {4, 1100, 9}, {130, 2, 70}, {64, 64, 256}};
const size_t n_bcp = sizeof k_bcp / sizeof k_bcp[0];

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

void run_channel_bias_fwd(lam_ctx *ctx, int B, int C, int P, float *y, const float *bias) {
  size_t n = (size_t)B * C * P;
  float *dy = dput(ctx, y, n * 4), *db = dput(ctx, bias, (size_t)C * 4);
  void *fy = fin(ctx, dy, B, C, P);
  TU_OK(BE(ctx)->channel_bias_fwd(ctx, g_fmt, B, C, P, fy, db));
  fout(ctx, fy, dy, B, C, P, "channel_bias_fwd (format)");
  dget(ctx, y, dy, n * 4, "channel_bias_fwd");
  dfree(ctx, dy), dfree(ctx, db);
}
void run_channel_bias_bwd(lam_ctx *ctx, int B, int C, int P, const float *dy, float *db) {
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

/* ---- the fused conv -> relu -> maxpool: NULL bias and NULL db (test_fused covers the rest) ---- */

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

IN_F16_TEST(test_im2col_col2im)
IN_F16_TEST(test_conv_pool_null)

const struct CMUnitTest *prims_conv_tests(size_t *n) {
  static const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_im2col_col2im),
      cmocka_unit_test(test_conv2d), cmocka_unit_test(test_conv2d_fwd_stats),
      cmocka_unit_test(test_layout),
      cmocka_unit_test(test_channel_bias),
      cmocka_unit_test(test_conv_pool_null),
      cmocka_unit_test(test_conv_pool_direct),
      cmocka_unit_test(test_im2col_col2im_f16),
      cmocka_unit_test(test_conv_pool_null_f16),
  };
  *n = sizeof tests / sizeof tests[0];
  return tests;
}
