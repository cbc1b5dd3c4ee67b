/* conv_im2col.h — the 2-D convolution primitives (prims.h: conv2d_*) composed from im2col, col2im, the
 * layout changes and the GEMM of a backend's table: the CPU's implementation, and the CUDA backend's
 * where it has no cuDNN. Written once over ctx->be so both backends compose them alike. The workspace
 * holds the column matrix (C*K*K, B*P) and a transposed (OC, B*P) gradient or output. */
#ifndef LAMINA_CONV_IM2COL_H
#define LAMINA_CONV_IM2COL_H

#include "internal.h"

static inline size_t conv_im2col_taps(const lam_conv_geom *g) { return (size_t)g->C * g->K * g->K; }
static inline size_t conv_im2col_cols(const lam_conv_geom *g, int B) { return (size_t)B * g->OH * g->OW; }

static inline lam_status conv_im2col_workspace(const lam_conv_geom *g, int OC, int B, size_t *bytes) {
  *bytes = (conv_im2col_taps(g) + (size_t)OC) * conv_im2col_cols(g, B) * sizeof(float);
  return LAM_OK;
}

static inline lam_status conv_im2col_check(const lam_conv_geom *g, int OC, int B, size_t ws_bytes) {
  size_t need;
  conv_im2col_workspace(g, OC, B, &need);
  if (ws_bytes < need) return LAM_FAIL(LAM_ERR_INVALID_ARG, "conv2d: workspace of %zu bytes, %zu needed", ws_bytes, need);
  return LAM_OK;
}

/* y = W col(x): the GEMM's (OC, B*P) output, then transposed to (B, OC, P). */
static inline lam_status conv_im2col_fwd(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B, const float *x,
                                         const float *W, float *y, void *ws, size_t ws_bytes) {
  LAM_TRY(conv_im2col_check(g, OC, B, ws_bytes));
  const int K = (int)conv_im2col_taps(g), BP = (int)conv_im2col_cols(g, B);
  float *col = (float *)ws, *G = col + (size_t)K * BP;
  LAM_TRY(ctx->be->im2col(ctx, g, B, x, col, 0));
  LAM_TRY(ctx->be->gemm(ctx, 0, 0, OC, BP, K, 1.0f, W, K, col, BP, 0.0f, G, BP));
  return ctx->be->cbp_to_bcp(ctx, B, OC, g->OH * g->OW, G, NULL, y);
}

/* dx = col2im(W^T dy^T) (accumulate: dx +=) */
static inline lam_status conv_im2col_bwd_data(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B, const float *dy,
                                              const float *W, float *dx, int accumulate, void *ws, size_t ws_bytes) {
  LAM_TRY(conv_im2col_check(g, OC, B, ws_bytes));
  const int K = (int)conv_im2col_taps(g), BP = (int)conv_im2col_cols(g, B);
  float *dcol = (float *)ws, *dyT = dcol + (size_t)K * BP;
  LAM_TRY(ctx->be->bcp_to_cbp(ctx, B, OC, g->OH * g->OW, dy, dyT, NULL));
  LAM_TRY(ctx->be->gemm(ctx, 1, 0, K, BP, OC, 1.0f, W, K, dyT, BP, 0.0f, dcol, BP));
  return ctx->be->col2im(ctx, g, B, dcol, 0, accumulate, dx);
}

/* dW += dy^T col(x)^T */
static inline lam_status conv_im2col_bwd_filter(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B, const float *x,
                                                const float *dy, float *dW, void *ws, size_t ws_bytes) {
  LAM_TRY(conv_im2col_check(g, OC, B, ws_bytes));
  const int K = (int)conv_im2col_taps(g), BP = (int)conv_im2col_cols(g, B);
  float *col = (float *)ws, *dyT = col + (size_t)K * BP;
  LAM_TRY(ctx->be->im2col(ctx, g, B, x, col, 0));
  LAM_TRY(ctx->be->bcp_to_cbp(ctx, B, OC, g->OH * g->OW, dy, dyT, NULL));
  return ctx->be->gemm(ctx, 0, 1, OC, K, BP, 1.0f, dyT, BP, col, BP, 1.0f, dW, K);
}

#endif
