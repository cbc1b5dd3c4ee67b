/* conv.c — the CPU twins of the convolution primitives (prims.h): im2col and col2im, the 2-D convolution as
 * im2col + GEMM (conv_im2col.h), the layout changes with bias around that GEMM (cbp_to_bcp, bcp_to_cbp), a conv's
 * per-channel bias (channel_bias_*), the fused conv -> relu -> maxpool that follows the GEMM (conv_pool_*) and
 * the direct first-layer block that computes the conv itself (conv_pool_direct_*). The two fused blocks are
 * here, not in pool.c: they are a conv layer's forward and backward (the conv op runs them, with its bias and
 * weights, and tests/prims/conv.c tests them); the 2x2 max window they share with maxpool is in kernels.h. The
 * CUDA twins are in cuda/conv.cu under the same names. Loops are plain so the compiler vectorizes them. The
 * convolution's loops (im2col, col2im, the fused relu + pool) run on the pool (cpu_par): a call does not wait
 * for a thread whose core another process holds. The others split the outer loop with OpenMP's static
 * schedule. Either way each item writes its own outputs, so results are bitwise the same run to run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels.h"
#include "../math/act.h"
#include "../math/half.h"

/* The output columns ow whose input column ow*stride - pad + kj lies inside [0, W): [*lo, *hi). */
static void valid_cols(const lam_conv_geom *g, int kj, int *lo, int *hi) {
  int a = g->pad - kj; /* ow*stride >= a */
  *lo = a <= 0 ? 0 : (a + g->stride - 1) / g->stride;
  int b = g->W + g->pad - kj; /* ow*stride < b */
  *hi = b <= 0 ? 0 : (b + g->stride - 1) / g->stride;
  if (*hi > g->OW) *hi = g->OW;
  if (*lo > *hi) *lo = *hi;
}

/* im2col into 16-bit floats of type dt: each entry as the fp32 path computes it, rounded (the CPU side of the half
 * precisions exists to check the GPU's, so it is plain rather than fast). */
static void im2col_half(int dt, const lam_conv_geom *g, int B, const float *x, uint16_t *col) {
  const int P = g->OH * g->OW, KK = g->K * g->K;
  const size_t ncols = (size_t)B * P;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)g->C * KK * ncols > PAR_MIN)
  for (int c = 0; c < g->C; c++)
    for (int b = 0; b < B; b++) {
      const float *xs = x + ((size_t)b * g->C + c) * g->H * g->W;
      for (int kk = 0; kk < KK; kk++) {
        uint16_t *dst = col + ((size_t)c * KK + kk) * ncols + (size_t)b * P;
        for (int oh = 0; oh < g->OH; oh++)
          for (int ow = 0; ow < g->OW; ow++) {
            int ih = oh * g->stride - g->pad + kk / g->K, iw = ow * g->stride - g->pad + kk % g->K;
            float v = ih >= 0 && ih < g->H && iw >= 0 && iw < g->W ? xs[(size_t)ih * g->W + iw] : 0.0f;
            dst[oh * g->OW + ow] = lam_f32_to_half(dt, v);
          }
      }
    }
}

typedef struct conv_cols {
  const lam_conv_geom *g;
  int B;
  const float *x;
  float *col;
  const void *colv;
  int dt, accumulate;
  float *dx;
} conv_cols;

/* Items (c, b): the K*K rows of channel c's columns for image b. */
static void im2col_items(void *arg, size_t lo, size_t hi) {
  const conv_cols *a = arg;
  const lam_conv_geom *g = a->g;
  const int B = a->B, P = g->OH * g->OW, KK = g->K * g->K;
  const size_t ncols = (size_t)B * P;
  for (size_t it = lo; it < hi; it++) {
    const int c = (int)(it / (size_t)B), b = (int)(it % (size_t)B);
    const float *xs = a->x + ((size_t)b * g->C + c) * g->H * g->W;
    for (int kk = 0; kk < KK; kk++) {
      int ki = kk / g->K, kj = kk % g->K, lo_c, hi_c;
      valid_cols(g, kj, &lo_c, &hi_c);
      float *dst = a->col + ((size_t)c * KK + kk) * ncols + (size_t)b * P;
      for (int oh = 0; oh < g->OH; oh++) {
        int ih = oh * g->stride - g->pad + ki;
        float *d = dst + oh * g->OW;
        if (ih < 0 || ih >= g->H) {
          for (int ow = 0; ow < g->OW; ow++) d[ow] = 0.0f;
          continue;
        }
        const float *srow = xs + (size_t)ih * g->W - g->pad + kj;
        for (int ow = 0; ow < lo_c; ow++) d[ow] = 0.0f;
        if (g->stride == 1)
          for (int ow = lo_c; ow < hi_c; ow++) d[ow] = srow[ow];
        else
          for (int ow = lo_c; ow < hi_c; ow++) d[ow] = srow[ow * g->stride];
        for (int ow = hi_c; ow < g->OW; ow++) d[ow] = 0.0f;
      }
    }
  }
}

lam_status cpu_im2col(lam_ctx *ctx, const lam_conv_geom *g, int B, const float *x, void *colv, int dt) {
  (void)ctx;
  if (dt) {
    im2col_half(dt, g, B, x, colv);
    return LAM_OK;
  }
  conv_cols a = {.g = g, .B = B, .x = x, .col = colv};
  const size_t ncols = (size_t)B * g->OH * g->OW;
  cpu_par((size_t)g->C * B, (size_t)g->C * g->K * g->K * ncols, PAR_MIN, im2col_items, &a);
  return LAM_OK;
}

/* Items (b, c): image b's plane of channel c, written by this item alone. */
static void col2im_items(void *arg, size_t lo, size_t hi) {
  const conv_cols *a = arg;
  const lam_conv_geom *g = a->g;
  const int B = a->B, P = g->OH * g->OW, KK = g->K * g->K;
  const size_t ncols = (size_t)B * P;
  for (size_t it = lo; it < hi; it++) {
    const int b = (int)(it / (size_t)g->C), c = (int)(it % (size_t)g->C);
    float *xs = a->dx + ((size_t)b * g->C + c) * g->H * g->W;
    if (!a->accumulate) memset(xs, 0, (size_t)g->H * g->W * sizeof *xs); /* col2im writes dx: zeroed here, plane by plane */
    for (int kk = 0; kk < KK; kk++) {
      int ki = kk / g->K, kj = kk % g->K, lo_c, hi_c;
      valid_cols(g, kj, &lo_c, &hi_c);
      size_t row = ((size_t)c * KK + kk) * ncols + (size_t)b * P;
      const float *src = a->dt ? NULL : (const float *)a->colv + row;
      const uint16_t *src16 = a->dt ? (const uint16_t *)a->colv + row : NULL;
      for (int oh = 0; oh < g->OH; oh++) {
        int ih = oh * g->stride - g->pad + ki;
        if (ih < 0 || ih >= g->H) continue;
        float *drow = xs + (size_t)ih * g->W - g->pad + kj;
        if (a->dt) {
          for (int ow = lo_c; ow < hi_c; ow++) drow[ow * g->stride] += lam_half_to_f32(a->dt, src16[oh * g->OW + ow]);
          continue;
        }
        const float *sr = src + oh * g->OW;
        if (g->stride == 1)
          for (int ow = lo_c; ow < hi_c; ow++) drow[ow] += sr[ow];
        else
          for (int ow = lo_c; ow < hi_c; ow++) drow[ow * g->stride] += sr[ow];
      }
    }
  }
}

lam_status cpu_col2im(lam_ctx *ctx, const lam_conv_geom *g, int B, const void *colv, int dt, int accumulate, float *dx) {
  (void)ctx;
  conv_cols a = {.g = g, .B = B, .colv = colv, .dt = dt, .accumulate = accumulate, .dx = dx};
  const size_t ncols = (size_t)B * g->OH * g->OW;
  cpu_par((size_t)B * g->C, (size_t)g->C * g->K * g->K * ncols, PAR_MIN, col2im_items, &a);
  return LAM_OK;
}

/* ---- the 2-D convolution as im2col + GEMM (conv_im2col.h) ---- */
#include "../conv_im2col.h"

lam_status cpu_conv2d_workspace(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, size_t *bytes) {
  (void)ctx;
  return conv_im2col_workspace(f, g, OC, B, bytes);
}
lam_status cpu_conv2d_fwd(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *x, const void *W,
                          void *y, void *ws, size_t ws_bytes) {
  return conv_im2col_fwd(ctx, f, g, OC, B, x, W, y, ws, ws_bytes);
}
/* The conv, then the statistics' pass of BatchNorm (norm.c): what the CUDA twin does where cuDNN has no one-graph
 * engine, and the oracle of the one it has. */
lam_status cpu_conv2d_fwd_stats(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *x,
                                const void *W, void *y, float *sums, int force, void *ws, size_t ws_bytes, int *one_pass) {
  (void)force;
  *one_pass = 0;
  LAM_TRY(conv_im2col_fwd(ctx, f, g, OC, B, x, W, y, ws, ws_bytes));
  return cpu_bn_sums(ctx, f, B, OC, g->OH * g->OW, y, NULL, NULL, NULL, sums, NULL, NULL);
}
lam_status cpu_conv2d_bwd_data(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *dy,
                               const void *W, void *dx, int accumulate, void *ws, size_t ws_bytes) {
  return conv_im2col_bwd_data(ctx, f, g, OC, B, dy, W, dx, accumulate, ws, ws_bytes);
}
lam_status cpu_conv2d_bwd_filter(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *x,
                                 const void *dy, float *dW, void *ws, size_t ws_bytes) {
  return conv_im2col_bwd_filter(ctx, f, g, OC, B, x, dy, dW, ws, ws_bytes);
}

/* ---- the layout changes with bias around the GEMM, and a conv's per-channel bias ---- */

lam_status cpu_cbp_to_bcp(lam_ctx *ctx, int B, int C, int P, const float *src, const float *bias, float *dst) {
  (void)ctx;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int b = 0; b < B; b++)
    for (int c = 0; c < C; c++) {
      const float *s = src + (size_t)c * B * P + (size_t)b * P;
      float *d = dst + ((size_t)b * C + c) * P;
      float bc = bias ? bias[c] : 0.0f;
      for (int p = 0; p < P; p++) d[p] = s[p] + bc;
    }
  return LAM_OK;
}

lam_status cpu_bcp_to_cbp(lam_ctx *ctx, int B, int C, int P, const float *src, float *dst, float *bias_grad) {
  (void)ctx;
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int c = 0; c < C; c++) {
    float sum = 0.0f;
    for (int b = 0; b < B; b++) {
      const float *s = src + ((size_t)b * C + c) * P;
      float *d = dst + (size_t)c * B * P + (size_t)b * P;
      for (int p = 0; p < P; p++) {
        d[p] = s[p];
        sum += s[p];
      }
    }
    if (bias_grad) bias_grad[c] += sum;
  }
  return LAM_OK;
}

/* a conv's per-channel bias over (B, C, P) */
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

/* the per-channel bias in any format: through its plain twins (cpu/layout.c) */

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

/* ---- the fused conv -> relu -> maxpool ---- */

typedef struct conv_pool_args {
  const lam_pool_geom *g;
  int B;
  const float *G, *bias, *dy, *y;
  float *yo, *db;
  int32_t *arg;
  const int32_t *argc, *off;
  void *dGv;
  int dt;
} conv_pool_args;

/* Items (b, c): one output plane of the pool. */
static void conv_pool_fwd_items(void *argp, size_t lo, size_t hi) {
  const conv_pool_args *A = argp;
  const lam_pool_geom *g = A->g;
  const size_t P = (size_t)g->H * g->W, BP = (size_t)A->B * P;
  for (size_t it = lo; it < hi; it++) {
    const int b = (int)(it / (size_t)g->C), c = (int)(it % (size_t)g->C);
    const float *plane = A->G + (size_t)c * BP + (size_t)b * P;
    const float bc = A->bias ? A->bias[c] : 0.0f; /* + 0 leaves every value (and the max and relu) as it is */
    float *yo = A->yo + ((size_t)b * g->C + c) * g->OH * g->OW;
    int32_t *ao = A->arg + ((size_t)b * g->C + c) * g->OH * g->OW;
    if (g->K == 2 && g->stride == 2) { /* the common window, as maxpool_fwd's, with the bias and the relu */
      window2_pool(plane, g->W, g->OH, g->OW, A->off, bc, 1, yo, ao);
      continue;
    }
    for (int oh = 0; oh < g->OH; oh++)
      for (int ow = 0; ow < g->OW; ow++) {
        int best = oh * g->stride * g->W + ow * g->stride;
        float m = plane[best] + bc;
        if (g->K == 2) { /* the common window, unrolled; the same order and test as the loop below */
          int r0 = best, r1 = best + g->W;
          best += window2_max(m, plane[r0 + 1] + bc, plane[r1] + bc, plane[r1 + 1] + bc, g->W, &m);
        } else {
          for (int a = 0; a < g->K; a++)
            for (int e = 0; e < g->K; e++) {
              int idx = (oh * g->stride + a) * g->W + ow * g->stride + e;
              float v = plane[idx] + bc;
              if (v > m || v != v) m = v, best = idx; /* as maxpool_fwd: first maximum, NaN wins */
            }
        }
        yo[oh * g->OW + ow] = lam_relu(m); /* relu after the max = the max of the relus (NaN wins both) */
        ao[oh * g->OW + ow] = best;
      }
  }
}

lam_status cpu_conv_pool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *G, const float *bias, float *y,
                             int32_t *arg) {
  (void)ctx;
  const size_t P = (size_t)g->H * g->W;
  int32_t off[WINDOW2_MAX_OFF];
  const int use_off = g->K == 2 && g->stride == 2 && g->OH * g->OW <= WINDOW2_MAX_OFF;
  if (use_off) window2_offsets(g->W, g->OH, g->OW, off);
  conv_pool_args a = {.g = g, .B = B, .G = G, .bias = bias, .yo = y, .arg = arg, .off = use_off ? off : NULL};
  cpu_par((size_t)B * g->C, (size_t)B * g->C * P, PAR_MIN, conv_pool_fwd_items, &a);
  return LAM_OK;
}

/* Items c: channel c's planes of every image, and its bias gradient (summed in image order). */
static void conv_pool_bwd_items(void *argp, size_t lo, size_t hi) {
  const conv_pool_args *A = argp;
  const lam_pool_geom *g = A->g;
  const int B = A->B;
  const size_t P = (size_t)g->H * g->W, BP = (size_t)B * P, OP = (size_t)g->OH * g->OW;
  const float *dy = A->dy, *y = A->y;
  const int32_t *arg = A->argc;
  for (size_t c = lo; c < hi; c++) {
    float sum = 0.0f;
    for (int b = 0; b < B; b++) {
      size_t o = ((size_t)b * g->C + c) * OP, at = c * BP + (size_t)b * P;
      if (A->dt) { /* zeros, and each routed gradient rounded; the bias sums what is stored */
        uint16_t *d = (uint16_t *)A->dGv + at;
        memset(d, 0, P * sizeof *d);
        for (size_t k = 0; k < OP; k++)
          if (lam_relu_passed(y[o + k])) d[arg[o + k]] = lam_f32_to_half(A->dt, dy[o + k]);
        if (A->db)
          for (size_t p = 0; p < P; p++) sum += lam_half_to_f32(A->dt, d[p]);
        continue;
      }
      float *d = (float *)A->dGv + at;
      memset(d, 0, P * sizeof *d);
      for (size_t k = 0; k < OP; k++) { /* windows do not overlap (stride = K): each max is its own */
        /* dy where the relu passed, else +0: by a bit mask, not a branch (random signs mispredict) */
        uint32_t u, mask = 0u - (uint32_t)lam_relu_passed(y[o + k]);
        memcpy(&u, dy + o + k, 4);
        u &= mask;
        memcpy(d + arg[o + k], &u, 4);
      }
      if (A->db)
        for (size_t p = 0; p < P; p++) sum += d[p]; /* cpu_bcp_to_cbp's order: the same bias gradient */
    }
    if (A->db) A->db[c] += sum;
  }
}

lam_status cpu_conv_pool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, const float *y,
                             const int32_t *arg, void *dGv, int dt, float *db) {
  (void)ctx;
  conv_pool_args a = {.g = g, .B = B, .dy = dy, .y = y, .argc = arg, .dGv = dGv, .dt = dt, .db = db};
  cpu_par((size_t)g->C, (size_t)B * g->C * g->H * g->W, PAR_MIN, conv_pool_bwd_items, &a);
  return LAM_OK;
}

/* The conv output at (b, oc, h, w): bias + the taps in (c, kh, kw) order, zero padding. */
static inline float direct_conv_at(const lam_conv_geom *cg, const float *xb, const float *w, float bias, int h, int wc) {
  float acc = bias;
  for (int c = 0; c < cg->C; c++)
    for (int kh = 0; kh < cg->K; kh++) {
      int ih = h * cg->stride - cg->pad + kh;
      for (int kw = 0; kw < cg->K; kw++) {
        int iw = wc * cg->stride - cg->pad + kw;
        float v = ih >= 0 && ih < cg->H && iw >= 0 && iw < cg->W ? xb[((size_t)c * cg->H + ih) * cg->W + iw] : 0.0f;
        acc += v * w[(c * cg->K + kh) * cg->K + kw];
      }
    }
  return acc;
}

lam_status cpu_conv_pool_direct_fwd(lam_ctx *ctx, const lam_conv_geom *cg, const lam_pool_geom *pg, int B,
                                    const float *x, const float *W, const float *bias, float *y, int32_t *arg) {
  (void)ctx;
  const int taps = cg->C * cg->K * cg->K;
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * pg->C * pg->H * pg->W * taps > PAR_MIN)
  for (int b = 0; b < B; b++)
    for (int oc = 0; oc < pg->C; oc++) {
      const float *xb = x + (size_t)b * cg->C * cg->H * cg->W, *w = W + (size_t)oc * taps;
      size_t o = ((size_t)b * pg->C + oc) * pg->OH * pg->OW;
      for (int ph = 0; ph < pg->OH; ph++)
        for (int pw = 0; pw < pg->OW; pw++) {
          int h0 = ph * pg->stride, w0 = pw * pg->stride, best = h0 * pg->W + w0;
          float m = direct_conv_at(cg, xb, w, bias[oc], h0, w0);
          for (int a = 0; a < pg->K; a++)
            for (int e = 0; e < pg->K; e++) {
              if (!a && !e) continue;
              float v = direct_conv_at(cg, xb, w, bias[oc], h0 + a, w0 + e);
              if (v > m || v != v) m = v, best = (h0 + a) * pg->W + w0 + e; /* first maximum, NaN wins */
            }
          y[o + (size_t)ph * pg->OW + pw] = lam_relu(m);
          arg[o + (size_t)ph * pg->OW + pw] = best;
        }
    }
  return LAM_OK;
}

lam_status cpu_conv_pool_direct_bwd(lam_ctx *ctx, const lam_conv_geom *cg, const lam_pool_geom *pg, int B,
                                    const float *x, const float *dy, const float *y, const int32_t *arg, float *dW,
                                    float *db, float *work) {
  (void)ctx;
  (void)work;
  const int taps = cg->C * cg->K * cg->K;
  const size_t OP = (size_t)pg->OH * pg->OW;
#pragma omp parallel for schedule(static) if ((size_t)B * pg->C * OP * taps > PAR_MIN)
  for (int oc = 0; oc < pg->C; oc++) {
    float gw[LAM_DIRECT_TAPS] = {0}, gb = 0.0f;
    for (int b = 0; b < B; b++) {
      const float *xb = x + (size_t)b * cg->C * cg->H * cg->W;
      size_t o = ((size_t)b * pg->C + oc) * OP;
      for (size_t k = 0; k < OP; k++) {
        if (!lam_relu_passed(y[o + k])) continue;
        float g = dy[o + k];
        int h = arg[o + k] / pg->W, wc = arg[o + k] % pg->W;
        gb += g;
        for (int c = 0, t = 0; c < cg->C; c++)
          for (int kh = 0; kh < cg->K; kh++) {
            int ih = h * cg->stride - cg->pad + kh;
            for (int kw = 0; kw < cg->K; kw++, t++) {
              int iw = wc * cg->stride - cg->pad + kw;
              if (ih >= 0 && ih < cg->H && iw >= 0 && iw < cg->W) gw[t] += g * xb[((size_t)c * cg->H + ih) * cg->W + iw];
            }
          }
      }
    }
    for (int t = 0; t < taps; t++) dW[(size_t)oc * taps + t] += gw[t];
    db[oc] += gb;
  }
  return LAM_OK;
}
