/* pool.c — test_prims' pooling: maxpool and avgpool both ways (and NaN in the windows), the global average
 * (plane_mean_fwd, plane_mean_bwd), tpool over a clip's frames, nearest upsampling (upsample_fwd, upsample_bwd). */
#include "prims_test.h"

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

void run_maxpool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *x, float *y, int32_t *arg) {
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
void run_maxpool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, const int32_t *arg, float *dx) {
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
void run_avgpool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *x, float *y) {
  size_t nx = (size_t)B * g->C * g->H * g->W, ny = (size_t)B * g->C * g->OH * g->OW;
  float *dx = dput(ctx, x, nx * 4), *dy = dput(ctx, y, ny * 4);
  const int HW = g->H * g->W, OP = g->OH * g->OW;
  void *fx = fin(ctx, dx, B, g->C, HW), *fy = fin(ctx, dy, B, g->C, OP);
  TU_OK(BE(ctx)->avgpool_fwd(ctx, g_fmt, g, B, fx, fy));
  fout(ctx, fx, dx, B, g->C, HW, "avgpool_fwd x (format)"), fout(ctx, fy, dy, B, g->C, OP, "avgpool_fwd (format)");
  dget(ctx, y, dy, ny * 4, "avgpool_fwd");
  dfree(ctx, dx), dfree(ctx, dy);
}
void run_avgpool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, float *dx) {
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

void run_plane_mean_fwd(lam_ctx *ctx, int B, int C, int P, const float *x, float *y) {
  size_t rows = (size_t)B * C;
  float *dx = dput(ctx, x, rows * P * 4), *dy = dput(ctx, y, rows * 4);
  void *fx = fin(ctx, dx, B, C, P), *fy = fin(ctx, dy, B, C, 1);
  TU_OK(BE(ctx)->plane_mean_fwd(ctx, g_fmt, B, C, P, fx, fy));
  fout(ctx, fx, dx, B, C, P, "plane_mean_fwd x (format)"), fout(ctx, fy, dy, B, C, 1, "plane_mean_fwd (format)");
  dget(ctx, y, dy, rows * 4, "plane_mean_fwd");
  dfree(ctx, dx), dfree(ctx, dy);
}
void run_plane_mean_bwd(lam_ctx *ctx, int B, int C, int P, const float *dy, float *dx) {
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

void run_upsample(lam_ctx *ctx, int bwd, int B, int C, int H, int W, int F, const float *in, float *out) {
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

const struct CMUnitTest *prims_pool_tests(size_t *n) {
  static const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_pool),
      cmocka_unit_test(test_pool_nan),
      cmocka_unit_test(test_plane_mean),
      cmocka_unit_test(test_tpool),
      cmocka_unit_test(test_upsample),
  };
  *n = sizeof tests / sizeof tests[0];
  return tests;
}
