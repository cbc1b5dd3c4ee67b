/* nn_ops.c — the CPU twins of the nn primitives beyond the CNN's first set (prims.h): per-channel bias,
 * average and global average pooling, nearest upsampling, BatchNorm (alone and followed by an
 * activation) and the pooling over a clip's frames. The CUDA twins are in cuda/nn_ops.cu under the same names. This is the tests' oracle: plain loops,
 * reductions summed in double, OpenMP over the outer loop with a static schedule (the same bits every
 * run). */
#include <math.h>
#include <string.h>

#include "cpu.h"
#include "kernels.h"
#include "../math/act.h"

/* ---- per-channel bias over (B, C, P) ---- */

static lam_status plain_channel_bias_fwd(lam_ctx *ctx, int B, int C, int P, float *y, const float *bias) {
  (void)ctx;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int b = 0; b < B; b++)
    for (int c = 0; c < C; c++) {
      float *d = y + ((size_t)b * C + c) * P;
      const float bc = bias[c];
      for (int p = 0; p < P; p++) d[p] += bc;
    }
  return LAM_OK;
}

static lam_status plain_channel_bias_bwd(lam_ctx *ctx, int B, int C, int P, const float *dy, float *db) {
  (void)ctx;
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    double s = 0.0;
    for (int b = 0; b < B; b++) {
      const float *d = dy + ((size_t)b * C + c) * P;
      for (int p = 0; p < P; p++) s += d[p];
    }
    db[c] += (float)s;
  }
  return LAM_OK;
}

/* ---- pooling and upsampling ---- */

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

/* ---- BatchNorm, and BatchNorm followed by an activation ---- */

/* Channel c's mean and invstd: train, those of x over b and p (saved, and the running statistics
 * updated); else the running ones. Shared by bn_fwd and bn_act_fwd, so the two agree bit for bit. */
static void bn_channel_stats(int B, int C, int P, int c, const float *x, float *mean, float *invstd, float *run_mean,
                             float *run_var, float momentum, float eps, int train, float *m_out, float *is_out) {
  const size_t N = (size_t)B * P;
  float m, is;
  if (train) { /* two passes in double: the mean, then the squares about it */
    double s = 0.0, v = 0.0;
    for (int b = 0; b < B; b++) {
      const float *xs = x + ((size_t)b * C + c) * P;
      for (int p = 0; p < P; p++) s += xs[p];
    }
    const double mu = s / (double)N;
    for (int b = 0; b < B; b++) {
      const float *xs = x + ((size_t)b * C + c) * P;
      for (int p = 0; p < P; p++) v += ((double)xs[p] - mu) * ((double)xs[p] - mu);
    }
    const double var = v / (double)N;
    m = (float)mu, is = (float)(1.0 / sqrt(var + (double)eps));
    mean[c] = m, invstd[c] = is;
    if (run_mean) run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * m;
    if (run_var) /* the unbiased variance, as PyTorch (one value: the biased one, to stay finite) */
      run_var[c] = (1.0f - momentum) * run_var[c] + momentum * (float)(N > 1 ? var * N / (double)(N - 1) : var);
  } else {
    m = run_mean[c], is = 1.0f / sqrtf(run_var[c] + eps);
  }
  *m_out = m, *is_out = is;
}

static lam_status plain_bn_fwd(lam_ctx *ctx, int B, int C, int P, const float *x, const float *gamma, const float *beta, float *y,
                      float *mean, float *invstd, float *run_mean, float *run_var, float momentum, float eps,
                      int train) {
  (void)ctx;
  if (train && (!mean || !invstd))
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_fwd: training needs mean and invstd to save the batch statistics in");
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    float m, is;
    bn_channel_stats(B, C, P, c, x, mean, invstd, run_mean, run_var, momentum, eps, train, &m, &is);
    const float sc = is * (gamma ? gamma[c] : 1.0f), bt = beta ? beta[c] : 0.0f;
    for (int b = 0; b < B; b++) {
      size_t o = ((size_t)b * C + c) * P;
      for (int p = 0; p < P; p++) y[o + p] = (x[o + p] - m) * sc + bt;
    }
  }
  return LAM_OK;
}

/* Channel c's sum(dy) and sum(dy xhat) in double, and its dx = k (dy - mdy - xhat mdx) with xhat = (x - m) is:
 * bn_bwd's two passes, shared with sync BN's twins (which sum over the ranks between them). */
static void bn_channel_dy_sums(int B, int C, int P, int c, const float *x, const float *dy, double m, double is,
                               double *s1, double *s2) {
  double a = 0.0, b2 = 0.0;
  for (int b = 0; b < B; b++) {
    size_t o = ((size_t)b * C + c) * P;
    for (int p = 0; p < P; p++) {
      double g = dy[o + p];
      a += g;
      b2 += g * (((double)x[o + p] - m) * is);
    }
  }
  *s1 = a, *s2 = b2;
}
static void bn_channel_dx(int B, int C, int P, int c, const float *x, const float *dy, double m, double is, double k,
                          double mdy, double mdx, float *dx) {
  for (int b = 0; b < B; b++) {
    size_t o = ((size_t)b * C + c) * P;
    for (int p = 0; p < P; p++) dx[o + p] = (float)(k * ((double)dy[o + p] - mdy - ((double)x[o + p] - m) * is * mdx));
  }
}

static lam_status plain_bn_bwd(lam_ctx *ctx, int B, int C, int P, const float *x, const float *dy, const float *gamma,
                      const float *mean, const float *invstd, float *dx, float *dgamma, float *dbeta) {
  (void)ctx;
  const double N = (double)B * P;
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    const double m = mean[c], is = invstd[c];
    double s1, s2; /* sum(dy), sum(dy xhat) */
    bn_channel_dy_sums(B, C, P, c, x, dy, m, is, &s1, &s2);
    if (dgamma) dgamma[c] += (float)s2;
    if (dbeta) dbeta[c] += (float)s1;
    bn_channel_dx(B, C, P, c, x, dy, m, is, (gamma ? gamma[c] : 1.0) * is, s1 / N, s2 / N, dx);
  }
  return LAM_OK;
}

static lam_status plain_bn_sums(int B, int C, int P, const float *x, const float *dy, const float *mean,
                                const float *invstd, float *out, float *dgamma, float *dbeta) {
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    double s1 = 0.0, s2 = 0.0;
    if (dy) {
      bn_channel_dy_sums(B, C, P, c, x, dy, mean[c], invstd[c], &s1, &s2);
    } else {
      for (int b = 0; b < B; b++) {
        size_t o = ((size_t)b * C + c) * P;
        for (int p = 0; p < P; p++) {
          const double v = x[o + p];
          s1 += v, s2 += v * v;
        }
      }
    }
    out[c] = (float)s1, out[C + c] = (float)s2;
    if (dbeta) dbeta[c] += (float)s1;
    if (dgamma) dgamma[c] += (float)s2;
  }
  return LAM_OK;
}

static lam_status plain_bn_sync_dx(int B, int C, int P, const float *x, const float *dy, const float *gamma,
                                   const float *mean, const float *invstd, const float *sums, double N, float *dx) {
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    const double is = invstd[c];
    bn_channel_dx(B, C, P, c, x, dy, mean[c], is, (gamma ? gamma[c] : 1.0) * is, sums[c] / N, sums[C + c] / N, dx);
  }
  return LAM_OK;
}

static lam_status plain_bn_act_fwd(lam_ctx *ctx, int B, int C, int P, int act, float alpha, const float *x,
                          const float *r, const float *gamma, const float *beta, float *y, float *mean, float *invstd, float *run_mean, float *run_var,
                          float momentum, float eps, int train) {
  (void)ctx;
  if (train && (!mean || !invstd))
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_act_fwd: training needs mean and invstd to save the batch statistics in");
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    float m, is;
    bn_channel_stats(B, C, P, c, x, mean, invstd, run_mean, run_var, momentum, eps, train, &m, &is);
    const float sc = is * (gamma ? gamma[c] : 1.0f), bt = beta ? beta[c] : 0.0f;
    for (int b = 0; b < B; b++) {
      size_t o = ((size_t)b * C + c) * P;
      if (r)
        for (int p = 0; p < P; p++) y[o + p] = lam_act(act, alpha, (x[o + p] - m) * sc + bt + r[o + p]);
      else
        for (int p = 0; p < P; p++) y[o + p] = lam_act(act, alpha, (x[o + p] - m) * sc + bt);
    }
  }
  return LAM_OK;
}

static lam_status plain_bn_act_bwd(lam_ctx *ctx, int B, int C, int P, int act, float alpha, const float *x, const float *y,
                          const float *dy, const float *gamma, const float *beta, const float *mean,
                          const float *invstd, float *dx, float *dr, int dr_add, float *dgamma, float *dbeta) {
  (void)ctx;
  const double N = (double)B * P;
  const int gelu = act == LAM_ACT_GELU; /* dz from z, recomputed as bn_act_fwd computed it; else from y */
  if (!gelu && !y)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_act_bwd: relu, leaky, tanh and sigmoid read y, which is NULL");
  if (gelu && dr) return LAM_FAIL(LAM_ERR_INVALID_ARG, "bn_act_bwd: a residual's gradient needs an activation read from y, not gelu");
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    const float mf = mean[c], sc = invstd[c] * (gamma ? gamma[c] : 1.0f), bt = beta ? beta[c] : 0.0f;
    const double m = mean[c], is = invstd[c];
    double s1 = 0.0, s2 = 0.0; /* sum(dz), sum(dz xhat) */
    for (int b = 0; b < B; b++) {
      size_t o = ((size_t)b * C + c) * P;
      for (int p = 0; p < P; p++) {
        float z = gelu ? (x[o + p] - mf) * sc + bt : 0.0f, yv = gelu ? 0.0f : y[o + p];
        double g = lam_act_grad(act, alpha, z, yv, dy[o + p]);
        s1 += g;
        s2 += g * (((double)x[o + p] - m) * is);
      }
    }
    if (dgamma) dgamma[c] += (float)s2;
    if (dbeta) dbeta[c] += (float)s1;
    const double mdz = s1 / N, mdx = s2 / N, k = (gamma ? gamma[c] : 1.0) * is;
    for (int b = 0; b < B; b++) {
      size_t o = ((size_t)b * C + c) * P;
      for (int p = 0; p < P; p++) { /* dz again: each value is read before dx's is written (dx may be dy) */
        float z = gelu ? (x[o + p] - mf) * sc + bt : 0.0f, yv = gelu ? 0.0f : y[o + p];
        double g = lam_act_grad(act, alpha, z, yv, dy[o + p]);
        if (dr) dr[o + p] = dr_add ? dr[o + p] + (float)g : (float)g;
        dx[o + p] = (float)(k * (g - mdz - ((double)x[o + p] - m) * is * mdx));
      }
    }
  }
  return LAM_OK;
}

/* ---- dropout and elementwise helpers ---- */

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

lam_status cpu_channel_bias_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, void *y, const float *bias) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  float *ty = cpu_fmt_out(&j, B, C, P, y, 1);
  return cpu_fmt_end(&j, j.status ? j.status : plain_channel_bias_fwd(ctx, B, C, P, ty, bias));
}
lam_status cpu_channel_bias_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *dy, float *db) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tdy = cpu_fmt_in(&j, B, C, P, dy);
  return cpu_fmt_end(&j, j.status ? j.status : plain_channel_bias_bwd(ctx, B, C, P, tdy, db));
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

lam_status cpu_bn_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, const float *gamma,
                      const float *beta, void *y, float *mean, float *invstd, float *run_mean, float *run_var,
                      float momentum, float eps, int train) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x);
  float *ty = cpu_fmt_out(&j, B, C, P, y, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_bn_fwd(ctx, B, C, P, tx, gamma, beta, ty, mean, invstd, run_mean,
                                                             run_var, momentum, eps, train));
}
lam_status cpu_bn_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, const void *dy, const float *gamma,
                      const float *mean, const float *invstd, void *dx, float *dgamma, float *dbeta) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x), *tdy = cpu_fmt_in(&j, B, C, P, dy);
  float *tdx = cpu_fmt_out(&j, B, C, P, dx, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_bn_bwd(ctx, B, C, P, tx, tdy, gamma, mean, invstd, tdx, dgamma,
                                                             dbeta));
}
lam_status cpu_bn_sums(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, const void *dy, const float *mean,
                       const float *invstd, float *out, float *dgamma, float *dbeta) {
  (void)ctx;
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x), *tdy = dy ? cpu_fmt_in(&j, B, C, P, dy) : NULL;
  return cpu_fmt_end(&j, j.status ? j.status : plain_bn_sums(B, C, P, tx, tdy, mean, invstd, out, dgamma, dbeta));
}
/* Per channel, in double as bn_fwd's statistics are; invstd as bn_fwd computes it from running statistics
 * (eval), which the synchronized forward then runs with these. */
lam_status cpu_bn_sync_stats(lam_ctx *ctx, int C, double N, const float *sums, float eps, float momentum, float *mean,
                             float *invstd, float *var, float *run_mean, float *run_var) {
  (void)ctx;
  for (int c = 0; c < C; c++) {
    const double mu = sums[c] / N, v = fmax(sums[C + c] / N - mu * mu, 0.0);
    mean[c] = (float)mu, var[c] = (float)v, invstd[c] = 1.0f / sqrtf(var[c] + eps);
    if (run_mean) run_mean[c] = (1.0f - momentum) * run_mean[c] + momentum * mean[c];
    if (run_var) run_var[c] = (1.0f - momentum) * run_var[c] + momentum * (float)(N > 1 ? v * N / (N - 1) : v);
  }
  return LAM_OK;
}
lam_status cpu_bn_sync_dx(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *x, const void *dy, const float *gamma,
                          const float *mean, const float *invstd, const float *sums, double N, void *dx) {
  (void)ctx;
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x), *tdy = cpu_fmt_in(&j, B, C, P, dy);
  float *tdx = cpu_fmt_out(&j, B, C, P, dx, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_bn_sync_dx(B, C, P, tx, tdy, gamma, mean, invstd, sums, N, tdx));
}
lam_status cpu_bn_act_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, int act, float alpha, const void *x,
                          const void *r, const float *gamma, const float *beta, void *y, float *mean, float *invstd,
                          float *run_mean, float *run_var, float momentum, float eps, int train) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x), *tr = r ? cpu_fmt_in(&j, B, C, P, r) : NULL;
  float *ty = cpu_fmt_out(&j, B, C, P, y, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_bn_act_fwd(ctx, B, C, P, act, alpha, tx, tr, gamma, beta, ty, mean,
                                                                 invstd, run_mean, run_var, momentum, eps, train));
}
lam_status cpu_bn_act_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, int act, float alpha, const void *x,
                          const void *y, const void *dy, const float *gamma, const float *beta, const float *mean,
                          const float *invstd, void *dx, void *dr, int dr_add, float *dgamma, float *dbeta) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tx = cpu_fmt_in(&j, B, C, P, x), *ty = cpu_fmt_in(&j, B, C, P, y), *tdy = cpu_fmt_in(&j, B, C, P, dy);
  float *tdr = dr ? cpu_fmt_out(&j, B, C, P, dr, dr_add) : NULL; /* before dx: dx may be dy, dr never */
  float *tdx = cpu_fmt_out(&j, B, C, P, dx, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_bn_act_bwd(ctx, B, C, P, act, alpha, tx, ty, tdy, gamma, beta, mean,
                                                                 invstd, tdx, tdr, dr_add, dgamma, dbeta));
}
