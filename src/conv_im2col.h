/* conv_im2col.h — the 2-D convolution primitives (prims.h: conv2d_*) composed from im2col, col2im, the
 * layout changes and the GEMM of a backend's table: the CPU's implementation, and the CUDA backend's
 * where it has no cuDNN. Written once over ctx->be so both backends compose them alike. The workspace
 * holds the column matrix (C*K*K, B*P) and a transposed (OC, B*P) gradient or output; a format other than
 * NCHW float32 runs the same on float32 NCHW copies (converted by the backend's convert), rounded back
 * once. */
#ifndef LAMINA_CONV_IM2COL_H
#define LAMINA_CONV_IM2COL_H

#include "internal.h"

static inline size_t conv_im2col_taps(const lam_conv_geom *g) { return (size_t)g->C * g->K * g->K; }
static inline size_t conv_im2col_cols(const lam_conv_geom *g, int B) { return (size_t)B * g->OH * g->OW; }

/* The plain primitives' workspace (NCHW float32): the column matrix (C*K*K, B*P) and (OC, B*P). */
static inline size_t conv_im2col_plain_bytes(const lam_conv_geom *g, int OC, int B) {
  return (conv_im2col_taps(g) + (size_t)OC) * conv_im2col_cols(g, B) * sizeof(float);
}
/* Another format converts through float32 NCHW copies after that: the input (or its gradient), the output (or
 * its gradient) and the weights. */
static inline size_t conv_im2col_x_floats(const lam_conv_geom *g, int B) { return (size_t)B * g->C * g->H * g->W; }
static inline size_t conv_im2col_y_floats(const lam_conv_geom *g, int OC, int B) { return (size_t)B * OC * g->OH * g->OW; }

static inline lam_status conv_im2col_workspace(lam_fmt f, const lam_conv_geom *g, int OC, int B, size_t *bytes) {
  *bytes = conv_im2col_plain_bytes(g, OC, B);
  if (!lam_fmt_plain(f))
    *bytes += (conv_im2col_x_floats(g, B) + conv_im2col_y_floats(g, OC, B) + (size_t)OC * conv_im2col_taps(g)) *
              sizeof(float);
  return LAM_OK;
}

static inline lam_status conv_im2col_check(lam_fmt f, const lam_conv_geom *g, int OC, int B, size_t ws_bytes) {
  size_t need;
  conv_im2col_workspace(f, g, OC, B, &need);
  if (ws_bytes < need) return LAM_FAIL(LAM_ERR_INVALID_ARG, "conv2d: workspace of %zu bytes, %zu needed", ws_bytes, need);
  return LAM_OK;
}

/* The float32 NCHW copies of a non-plain format, in the workspace after the plain part. */
typedef struct conv_im2col_tmp {
  float *x, *y, *W;
} conv_im2col_tmp;
static inline conv_im2col_tmp conv_im2col_tmps(const lam_conv_geom *g, int OC, int B, void *ws) {
  conv_im2col_tmp t;
  t.x = (float *)((char *)ws + conv_im2col_plain_bytes(g, OC, B));
  t.y = t.x + conv_im2col_x_floats(g, B);
  t.W = t.y + conv_im2col_y_floats(g, OC, B);
  return t;
}
/* W (OC, C*K*K) of type dt as float32 into t->W. */
static inline lam_status conv_im2col_weights(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, const void *W,
                                             float *Wf) {
  return ctx->be->prim->convert(ctx, OC, 1, (int)conv_im2col_taps(g), lam_fmt_of(f.dt, 0), W, LAM_FMT_NCHW, Wf);
}

/* y = W col(x): the GEMM's (OC, B*P) output, then transposed to (B, OC, P). */
static inline lam_status conv_im2col_fwd_plain(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B, const float *x,
                                               const float *W, float *y, void *ws) {
  const int K = (int)conv_im2col_taps(g), BP = (int)conv_im2col_cols(g, B);
  float *col = (float *)ws, *G = col + (size_t)K * BP;
  LAM_TRY(ctx->be->prim->im2col(ctx, g, B, x, col, 0));
  LAM_TRY(ctx->be->prim->gemm(ctx, 0, 0, OC, BP, K, 1.0f, W, K, col, BP, 0.0f, G, BP));
  return ctx->be->prim->cbp_to_bcp(ctx, B, OC, g->OH * g->OW, G, NULL, y);
}
static inline lam_status conv_im2col_fwd(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *x,
                                         const void *W, void *y, void *ws, size_t ws_bytes) {
  LAM_TRY(conv_im2col_check(f, g, OC, B, ws_bytes));
  if (lam_fmt_plain(f)) return conv_im2col_fwd_plain(ctx, g, OC, B, (const float *)x, (const float *)W, (float *)y, ws);
  conv_im2col_tmp t = conv_im2col_tmps(g, OC, B, ws);
  const int HW = g->H * g->W, OP = g->OH * g->OW;
  LAM_TRY(ctx->be->prim->convert(ctx, B, g->C, HW, f, x, LAM_FMT_NCHW, t.x));
  LAM_TRY(conv_im2col_weights(ctx, f, g, OC, W, t.W));
  LAM_TRY(conv_im2col_fwd_plain(ctx, g, OC, B, t.x, t.W, t.y, ws));
  return ctx->be->prim->convert(ctx, B, OC, OP, LAM_FMT_NCHW, t.y, f, y);
}

/* dx = col2im(W^T dy^T) (accumulate: dx +=) */
static inline lam_status conv_im2col_bwd_data_plain(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B,
                                                    const float *dy, const float *W, float *dx, int accumulate,
                                                    void *ws) {
  const int K = (int)conv_im2col_taps(g), BP = (int)conv_im2col_cols(g, B);
  float *dcol = (float *)ws, *dyT = dcol + (size_t)K * BP;
  LAM_TRY(ctx->be->prim->bcp_to_cbp(ctx, B, OC, g->OH * g->OW, dy, dyT, NULL));
  LAM_TRY(ctx->be->prim->gemm(ctx, 1, 0, K, BP, OC, 1.0f, W, K, dyT, BP, 0.0f, dcol, BP));
  return ctx->be->prim->col2im(ctx, g, B, dcol, 0, accumulate, dx);
}
static inline lam_status conv_im2col_bwd_data(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B,
                                              const void *dy, const void *W, void *dx, int accumulate, void *ws,
                                              size_t ws_bytes) {
  LAM_TRY(conv_im2col_check(f, g, OC, B, ws_bytes));
  if (lam_fmt_plain(f))
    return conv_im2col_bwd_data_plain(ctx, g, OC, B, (const float *)dy, (const float *)W, (float *)dx, accumulate, ws);
  conv_im2col_tmp t = conv_im2col_tmps(g, OC, B, ws);
  const int HW = g->H * g->W, OP = g->OH * g->OW;
  LAM_TRY(ctx->be->prim->convert(ctx, B, OC, OP, f, dy, LAM_FMT_NCHW, t.y));
  LAM_TRY(conv_im2col_weights(ctx, f, g, OC, W, t.W));
  if (accumulate) LAM_TRY(ctx->be->prim->convert(ctx, B, g->C, HW, f, dx, LAM_FMT_NCHW, t.x));
  LAM_TRY(conv_im2col_bwd_data_plain(ctx, g, OC, B, t.y, t.W, t.x, accumulate, ws));
  return ctx->be->prim->convert(ctx, B, g->C, HW, LAM_FMT_NCHW, t.x, f, dx);
}

/* dW += dy^T col(x)^T */
static inline lam_status conv_im2col_bwd_filter_plain(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B,
                                                      const float *x, const float *dy, float *dW, void *ws) {
  const int K = (int)conv_im2col_taps(g), BP = (int)conv_im2col_cols(g, B);
  float *col = (float *)ws, *dyT = col + (size_t)K * BP;
  LAM_TRY(ctx->be->prim->im2col(ctx, g, B, x, col, 0));
  LAM_TRY(ctx->be->prim->bcp_to_cbp(ctx, B, OC, g->OH * g->OW, dy, dyT, NULL));
  return ctx->be->prim->gemm(ctx, 0, 1, OC, K, BP, 1.0f, dyT, BP, col, BP, 1.0f, dW, K);
}
static inline lam_status conv_im2col_bwd_filter(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B,
                                                const void *x, const void *dy, float *dW, void *ws, size_t ws_bytes) {
  LAM_TRY(conv_im2col_check(f, g, OC, B, ws_bytes));
  if (lam_fmt_plain(f)) return conv_im2col_bwd_filter_plain(ctx, g, OC, B, (const float *)x, (const float *)dy, dW, ws);
  conv_im2col_tmp t = conv_im2col_tmps(g, OC, B, ws);
  LAM_TRY(ctx->be->prim->convert(ctx, B, g->C, g->H * g->W, f, x, LAM_FMT_NCHW, t.x));
  LAM_TRY(ctx->be->prim->convert(ctx, B, OC, g->OH * g->OW, f, dy, LAM_FMT_NCHW, t.y));
  return conv_im2col_bwd_filter_plain(ctx, g, OC, B, t.x, t.y, dW, ws);
}

#endif
