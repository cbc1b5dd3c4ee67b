/* pool.c — the CPU twins of the pooling primitives (prims.h): max and average pooling, the global average over
 * each plane (plane_mean), nearest upsampling and the pooling over a clip's frames (tpool). The CUDA twins are in
 * cuda/pool.cu under the same names. This is the tests' oracle: plain loops (sums in row order, as the CUDA
 * twins; the global average's in double), OpenMP over the outer loop with a static schedule, each item writing
 * its own outputs, so the results are the same bits every run. The 2x2 max window that maxpool vectorizes is in
 * kernels.h, where the fused conv -> relu -> maxpool (conv.c) takes it too. */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels.h"

/* ---- pooling and upsampling ---- */

static lam_status plain_maxpool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *x, float *y, int32_t *arg) {
  (void)ctx;
  int32_t off[WINDOW2_MAX_OFF];
  const int use_off = g->K == 2 && g->stride == 2 && g->OH * g->OW <= WINDOW2_MAX_OFF;
  if (use_off) window2_offsets(g->W, g->OH, g->OW, off);
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * g->C * g->H * g->W > PAR_MIN)
  for (int b = 0; b < B; b++)
    for (int c = 0; c < g->C; c++) {
      const float *xs = x + ((size_t)b * g->C + c) * g->H * g->W;
      size_t o = ((size_t)b * g->C + c) * g->OH * g->OW;
      if (g->K == 2 && g->stride == 2) { /* the common case, vectorized */
        window2_pool(xs, g->W, g->OH, g->OW, use_off ? off : NULL, 0.0f, 0, y + o, arg + o);
        continue;
      }
      for (int oh = 0; oh < g->OH; oh++)
        for (int ow = 0; ow < g->OW; ow++) {
          int base = (oh * g->stride) * g->W + ow * g->stride, best = base;
          float m = xs[best];
          for (int i = 0; i < g->K; i++) {
            const float *r = xs + base + i * g->W;
            for (int j = 0; j < g->K; j++)
              if (r[j] > m || r[j] != r[j]) m = r[j], best = base + i * g->W + j; /* NaN wins, as in PyTorch */
          }
          y[o + oh * g->OW + ow] = m;
          arg[o + oh * g->OW + ow] = best;
        }
    }
  return LAM_OK;
}

static lam_status plain_maxpool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, const int32_t *arg, float *dx) {
  (void)ctx;
  size_t plane_in = (size_t)g->H * g->W, plane_out = (size_t)g->OH * g->OW;
#pragma omp parallel for schedule(static) if ((size_t)B * g->C * plane_in > PAR_MIN)
  for (size_t bc = 0; bc < (size_t)B * g->C; bc++) {
    float *d = dx + bc * plane_in;
    memset(d, 0, plane_in * sizeof *d);
    for (size_t o = 0; o < plane_out; o++) d[arg[bc * plane_out + o]] += dy[bc * plane_out + o];
  }
  return LAM_OK;
}


static lam_status plain_avgpool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *x, float *y) {
  (void)ctx;
  const size_t HW = (size_t)g->H * g->W, OP = (size_t)g->OH * g->OW;
  const float kk = (float)(g->K * g->K);
#pragma omp parallel for schedule(static) if ((size_t)B * g->C * HW > PAR_MIN)
  for (size_t bc = 0; bc < (size_t)B * g->C; bc++) {
    const float *xs = x + bc * HW;
    float *yo = y + bc * OP;
    for (int oh = 0; oh < g->OH; oh++)
      for (int ow = 0; ow < g->OW; ow++) {
        const float *w = xs + (size_t)oh * g->stride * g->W + (size_t)ow * g->stride;
        float s = 0.0f; /* in row order, as the CUDA twin: a K x K window is too short to need more */
        for (int a = 0; a < g->K; a++)
          for (int e = 0; e < g->K; e++) s += w[(size_t)a * g->W + e];
        yo[(size_t)oh * g->OW + ow] = s / kk;
      }
  }
  return LAM_OK;
}

/* The outputs o (rows or columns) whose window [o * stride, o * stride + K) holds input i: [*lo, *hi]. */
static inline void covering(int i, int K, int stride, int n_out, int *lo, int *hi) {
  int a = i - K + 1;
  *lo = a <= 0 ? 0 : (a + stride - 1) / stride;
  *hi = i / stride;
  if (*hi > n_out - 1) *hi = n_out - 1;
}

static lam_status plain_avgpool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, float *dx) {
  (void)ctx;
  const size_t HW = (size_t)g->H * g->W, OP = (size_t)g->OH * g->OW;
  const float kk = (float)(g->K * g->K);
#pragma omp parallel for schedule(static) if ((size_t)B * g->C * HW > PAR_MIN)
  for (size_t bc = 0; bc < (size_t)B * g->C; bc++) {
    const float *d = dy + bc * OP;
    float *o = dx + bc * HW;
    for (int h = 0; h < g->H; h++) {
      int oh0, oh1;
      covering(h, g->K, g->stride, g->OH, &oh0, &oh1);
      for (int w = 0; w < g->W; w++) {
        int ow0, ow1;
        covering(w, g->K, g->stride, g->OW, &ow0, &ow1);
        float s = 0.0f; /* the windows in row order, as the CUDA twin */
        for (int oh = oh0; oh <= oh1; oh++)
          for (int ow = ow0; ow <= ow1; ow++) s += d[(size_t)oh * g->OW + ow];
        o[(size_t)h * g->W + w] = s / kk;
      }
    }
  }
  return LAM_OK;
}

static lam_status plain_plane_mean_fwd(lam_ctx *ctx, size_t rows, int P, const float *x, float *y) {
  (void)ctx;
#pragma omp parallel for schedule(static) if (rows * P > PAR_MIN)
  for (size_t r = 0; r < rows; r++) {
    const float *xs = x + r * P;
    double s = 0.0;
    for (int p = 0; p < P; p++) s += xs[p];
    y[r] = (float)(s / P);
  }
  return LAM_OK;
}

static lam_status plain_plane_mean_bwd(lam_ctx *ctx, size_t rows, int P, const float *dy, float *dx) {
  (void)ctx;
  const float fp = (float)P;
#pragma omp parallel for schedule(static) if (rows * P > PAR_MIN)
  for (size_t r = 0; r < rows; r++) {
    const float v = dy[r] / fp;
    float *d = dx + r * P;
    for (int p = 0; p < P; p++) d[p] = v;
  }
  return LAM_OK;
}

static lam_status plain_upsample_fwd(lam_ctx *ctx, int B, int C, int H, int W, int F, const float *x, float *y) {
  (void)ctx;
  const size_t HW = (size_t)H * W, OW = (size_t)W * F, OHW = HW * F * F;
#pragma omp parallel for schedule(static) if ((size_t)B * C * OHW > PAR_MIN)
  for (size_t bc = 0; bc < (size_t)B * C; bc++) {
    const float *xs = x + bc * HW;
    float *yo = y + bc * OHW;
    for (size_t oh = 0; oh < (size_t)H * F; oh++) {
      const float *r = xs + oh / F * W;
      float *d = yo + oh * OW;
      for (size_t ow = 0; ow < OW; ow++) d[ow] = r[ow / F];
    }
  }
  return LAM_OK;
}

static lam_status plain_upsample_bwd(lam_ctx *ctx, int B, int C, int H, int W, int F, const float *dy, float *dx) {
  (void)ctx;
  const size_t HW = (size_t)H * W, OW = (size_t)W * F, OHW = HW * F * F;
#pragma omp parallel for schedule(static) if ((size_t)B * C * OHW > PAR_MIN)
  for (size_t bc = 0; bc < (size_t)B * C; bc++) {
    const float *d = dy + bc * OHW;
    float *o = dx + bc * HW;
    for (int h = 0; h < H; h++)
      for (int w = 0; w < W; w++) {
        const float *blk = d + (size_t)h * F * OW + (size_t)w * F;
        float s = 0.0f; /* the F x F block in row order, as the CUDA twin */
        for (int i = 0; i < F; i++)
          for (int j = 0; j < F; j++) s += blk[(size_t)i * OW + j];
        o[(size_t)h * W + w] = s;
      }
  }
  return LAM_OK;
}

/* ---- over a clip's frames (tpool) ---- */

/* Over a clip's frames: rows b*T .. b*T + T-1 of x pool into row b of y. */
static lam_status plain_tpool_fwd(int B, int T, size_t S, int max, const float *x, float *y, uint8_t *arg) {
#pragma omp parallel for schedule(static) if ((size_t)B * T * S > PAR_MIN)
  for (int b = 0; b < B; b++)
    for (size_t s = 0; s < S; s++) {
      const float *v = x + (size_t)b * T * S + s;
      float acc = v[0];
      int best = 0;
      for (int t = 1; t < T; t++) {
        const float u = v[(size_t)t * S];
        if (!max) acc += u;
        else if (u > acc || (u != u && acc == acc)) acc = u, best = t; /* the first maximum; NaN wins, as maxpool */
      }
      y[(size_t)b * S + s] = max ? acc : acc / (float)T;
      if (max) arg[(size_t)b * S + s] = (uint8_t)best;
    }
  return LAM_OK;
}
static lam_status plain_tpool_bwd(int B, int T, size_t S, int max, const float *dy, const uint8_t *arg, float *dx) {
#pragma omp parallel for schedule(static) if ((size_t)B * T * S > PAR_MIN)
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (size_t s = 0; s < S; s++) {
        const size_t o = (size_t)b * S + s;
        dx[((size_t)b * T + t) * S + s] = max ? (arg[o] == t ? dy[o] : 0.0f) : dy[o] / (float)T;
      }
  return LAM_OK;
}
/* A row is a frame in the format's own order, so only the type is converted. */
lam_status cpu_tpool_fwd(lam_ctx *ctx, lam_fmt f, int B, int T, size_t S, int max, const void *x, void *y,
                         uint8_t *arg) {
  (void)ctx;
  cpu_fmt_job j = cpu_fmt_begin(lam_fmt_of(f.dt, 0));
  const float *tx = cpu_fmt_in(&j, (size_t)B * T, 1, S, x);
  float *ty = cpu_fmt_out(&j, (size_t)B, 1, S, y, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_tpool_fwd(B, T, S, max, tx, ty, arg));
}
lam_status cpu_tpool_bwd(lam_ctx *ctx, lam_fmt f, int B, int T, size_t S, int max, const void *dy, const uint8_t *arg,
                         void *dx) {
  (void)ctx;
  cpu_fmt_job j = cpu_fmt_begin(lam_fmt_of(f.dt, 0));
  const float *tdy = cpu_fmt_in(&j, (size_t)B, 1, S, dy);
  float *tdx = cpu_fmt_out(&j, (size_t)B * T, 1, S, dx, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_tpool_bwd(B, T, S, max, tdy, arg, tdx));
}

/* ---- the primitives above in any format: through their plain twins (cpu/layout.c) ---- */

lam_status cpu_maxpool_fwd(lam_ctx *ctx, lam_fmt f, const lam_pool_geom *g, int B, const void *x, void *y,
                           int32_t *arg) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, g->C, (size_t)g->H * g->W, x);
  float *ty = cpu_fmt_out(&j, B, g->C, (size_t)g->OH * g->OW, y, 0);
  lam_status s = j.status;
  if (s == LAM_OK && !lam_fmt_plain(f)) { /* arg is per output, in the output's layout */
    int32_t *targ = malloc(((size_t)B * g->C * g->OH * g->OW + 1) * sizeof *targ);
    if (!targ) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "maxpool_fwd: no host memory for the argmax copy");
    if (s == LAM_OK) s = plain_maxpool_fwd(ctx, g, B, tx, ty, targ);
    if (s == LAM_OK) cpu_relayout_i32(B, g->C, g->OH * g->OW, 0, targ, f.nhwc, arg);
    free(targ);
    return cpu_fmt_end(&j, s);
  }
  return cpu_fmt_end(&j, s ? s : plain_maxpool_fwd(ctx, g, B, tx, ty, arg));
}
lam_status cpu_maxpool_bwd(lam_ctx *ctx, lam_fmt f, const lam_pool_geom *g, int B, const void *dy, const int32_t *arg,
                           void *dx) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tdy = cpu_fmt_in(&j, B, g->C, (size_t)g->OH * g->OW, dy);
  float *tdx = cpu_fmt_out(&j, B, g->C, (size_t)g->H * g->W, dx, 0);
  lam_status s = j.status;
  if (s == LAM_OK && !lam_fmt_plain(f)) {
    int32_t *targ = malloc(((size_t)B * g->C * g->OH * g->OW + 1) * sizeof *targ);
    if (!targ) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "maxpool_bwd: no host memory for the argmax copy");
    if (s == LAM_OK) {
      cpu_relayout_i32(B, g->C, g->OH * g->OW, f.nhwc, arg, 0, targ);
      s = plain_maxpool_bwd(ctx, g, B, tdy, targ, tdx);
    }
    free(targ);
    return cpu_fmt_end(&j, s);
  }
  return cpu_fmt_end(&j, s ? s : plain_maxpool_bwd(ctx, g, B, tdy, arg, tdx));
}

lam_status cpu_avgpool_fwd(lam_ctx *ctx, lam_fmt f, const lam_pool_geom *g, int B, const void *x, void *y) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, g->C, (size_t)g->H * g->W, x);
  float *ty = cpu_fmt_out(&j, B, g->C, (size_t)g->OH * g->OW, y, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_avgpool_fwd(ctx, g, B, tx, ty));
}
lam_status cpu_avgpool_bwd(lam_ctx *ctx, lam_fmt f, const lam_pool_geom *g, int B, const void *dy, void *dx) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tdy = cpu_fmt_in(&j, B, g->C, (size_t)g->OH * g->OW, dy);
  float *tdx = cpu_fmt_out(&j, B, g->C, (size_t)g->H * g->W, dx, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_avgpool_bwd(ctx, g, B, tdy, tdx));
}

lam_status cpu_plane_mean_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, void *y) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x);
  float *ty = cpu_fmt_out(&j, B, C, 1, y, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_plane_mean_fwd(ctx, (size_t)B * C, P, tx, ty));
}
lam_status cpu_plane_mean_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *dy, void *dx) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tdy = cpu_fmt_in(&j, B, C, 1, dy);
  float *tdx = cpu_fmt_out(&j, B, C, P, dx, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_plane_mean_bwd(ctx, (size_t)B * C, P, tdy, tdx));
}

lam_status cpu_upsample_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int H, int W, int F, const void *x, void *y) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, (size_t)H * W, x);
  float *ty = cpu_fmt_out(&j, B, C, (size_t)H * W * F * F, y, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_upsample_fwd(ctx, B, C, H, W, F, tx, ty));
}
lam_status cpu_upsample_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int H, int W, int F, const void *dy, void *dx) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tdy = cpu_fmt_in(&j, B, C, (size_t)H * W * F * F, dy);
  float *tdx = cpu_fmt_out(&j, B, C, (size_t)H * W, dx, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_upsample_bwd(ctx, B, C, H, W, F, tdy, tdx));
}
