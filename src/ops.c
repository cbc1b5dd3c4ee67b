/* ops.c — the public entry points of the ops: argument checks that every backend shares, then the
 * backend's own implementation. */
#include "cpu/cpu.h"
#include "internal.h"

static lam_status check_common(const char *fn, lam_ctx *ctx, size_t n) {
  LAM_CHECK_ARG(ctx, "%s: ctx is NULL", fn);
  LAM_CHECK_ARG(n <= LAM_HIDDEN_MAX_N, "%s: n = %zu is larger than the maximum %zu (LAM_HIDDEN_MAX_N)", fn, n,
                LAM_HIDDEN_MAX_N);
  return LAM_OK;
}

static lam_status check_dtype(const char *fn, lam_dtype t) {
  LAM_CHECK_ARG(t == LAM_DTYPE_F32 || t == LAM_DTYPE_U8, "%s: grey_dtype %d is not LAM_DTYPE_F32 or LAM_DTYPE_U8", fn,
                (int)t);
  return LAM_OK;
}

lam_status lam_hidden(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                      lam_hidden_timing *timing) {
  LAM_TRY(check_common("lam_hidden", ctx, n));
  LAM_TRY(check_dtype("lam_hidden", gt));
  if (timing) *timing = (lam_hidden_timing){.chunks = 1, .device = ctx->device};
  if (n == 0) return LAM_OK;
  LAM_CHECK_ARG(grey && w && out, "lam_hidden: %s is NULL (n = %zu)", !grey ? "grey" : !w ? "w" : "out", n);
  /* Overlap that is not exact aliasing with w would read values already overwritten. */
  const char *o = (const char *)out, *g = grey, *wc = (const char *)w;
  size_t gb = n * lam_dtype_size(gt), fb = n * sizeof(float);
  LAM_CHECK_ARG(!(o < g + gb && g < o + fb), "lam_hidden: out overlaps grey; use a separate output buffer");
  LAM_CHECK_ARG(o == wc || !(o < wc + fb && wc < o + fb), "lam_hidden: out partly overlaps w; use out == w or a separate buffer");
  if (ctx->want == LAM_DEVICE_AUTO && ctx->device == LAM_DEVICE_CUDA && ctx->be->mem->host_memory)
    return lam_hidden_auto(ctx, n, grey, gt, w, out, timing);
  snprintf(ctx->hidden_choice, sizeof ctx->hidden_choice, "%s", lam_device_str(ctx->device));
  LAM_TRY(ctx->be->hidden->run(ctx, n, grey, gt, w, out, timing));
  if (timing) timing->device = ctx->device;
  return LAM_OK;
}

lam_status lam_hidden_memory_floor(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w,
                                   float *out, double *ms) {
  LAM_TRY(check_common("lam_hidden_memory_floor", ctx, n));
  LAM_TRY(check_dtype("lam_hidden_memory_floor", gt));
  LAM_CHECK_ARG(ms, "lam_hidden_memory_floor: ms is NULL");
  *ms = 0;
  if (n == 0) return LAM_OK;
  LAM_CHECK_ARG(grey && w && out, "lam_hidden_memory_floor: %s is NULL (n = %zu)", !grey ? "grey" : !w ? "w" : "out", n);
  if (ctx->be->mem->host_memory)
    LAM_CHECK_ARG(ctx->be->mem->host_memory(ctx, grey) && ctx->be->mem->host_memory(ctx, w) && ctx->be->mem->host_memory(ctx, out),
                  "lam_hidden_memory_floor: the arrays must be host memory (the floor is the host's)");
  double t0 = lam_now_ms();
  cpu_memory_floor(n, grey, gt, w, out);
  *ms = lam_now_ms() - t0;
  return LAM_OK;
}

lam_status lam_hidden_staging_floor(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w,
                                    float *out, double *ms) {
  LAM_TRY(check_common("lam_hidden_staging_floor", ctx, n));
  LAM_TRY(check_dtype("lam_hidden_staging_floor", gt));
  LAM_CHECK_ARG(ms, "lam_hidden_staging_floor: ms is NULL");
  *ms = 0;
  if (!ctx->be->hidden->staging_floor)
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "lam_hidden_staging_floor: the %s backend stages nothing", ctx->be->name);
  if (n == 0) return LAM_OK;
  LAM_CHECK_ARG(grey && w && out, "lam_hidden_staging_floor: %s is NULL (n = %zu)", !grey ? "grey" : !w ? "w" : "out", n);
  return ctx->be->hidden->staging_floor(ctx, n, grey, gt, w, out, ms);
}

lam_status lam_normalize(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, float *out) {
  LAM_TRY(check_common("lam_normalize", ctx, n));
  LAM_TRY(check_dtype("lam_normalize", gt));
  if (n == 0) return LAM_OK;
  LAM_CHECK_ARG(grey && out, "lam_normalize: %s is NULL (n = %zu)", !grey ? "grey" : "out", n);
  return ctx->be->hidden->normalize(ctx, n, grey, gt, out);
}

lam_status lam_weigh(lam_ctx *ctx, size_t n, const float *a, const float *w, float *out) {
  LAM_TRY(check_common("lam_weigh", ctx, n));
  if (n == 0) return LAM_OK;
  LAM_CHECK_ARG(a && w && out, "lam_weigh: %s is NULL (n = %zu)", !a ? "a" : !w ? "w" : "out", n);
  return ctx->be->hidden->weigh(ctx, n, a, w, out);
}

lam_status lam_tanh(lam_ctx *ctx, size_t n, const float *x, float *out) {
  LAM_TRY(check_common("lam_tanh", ctx, n));
  if (n == 0) return LAM_OK;
  LAM_CHECK_ARG(x && out, "lam_tanh: %s is NULL (n = %zu)", !x ? "x" : "out", n);
  return ctx->be->hidden->tanh_(ctx, n, x, out);
}

lam_status lam_normalize_images(lam_ctx *ctx, size_t n, int c, int h, int w, lam_layout layout, const uint8_t *in,
                                const float *mean, const float *std, lam_dtype out_dtype, void *out) {
  LAM_CHECK_ARG(ctx, "lam_normalize_images: ctx is NULL");
  LAM_CHECK_ARG(c >= 1 && c <= LAM_NORMALIZE_MAX_CHANNELS && h >= 1 && w >= 1,
                "lam_normalize_images: shape (c %d, h %d, w %d) is not valid (1 <= c <= %d, h and w >= 1)", c, h, w,
                LAM_NORMALIZE_MAX_CHANNELS);
  LAM_CHECK_ARG(layout == LAM_LAYOUT_NCHW || layout == LAM_LAYOUT_NHWC,
                "lam_normalize_images: layout %d is not LAM_LAYOUT_NCHW or LAM_LAYOUT_NHWC", (int)layout);
  LAM_CHECK_ARG(out_dtype == LAM_DTYPE_F32 || out_dtype == LAM_DTYPE_BF16,
                "lam_normalize_images: out_dtype %s is not f32 or bf16", lam_dtype_str(out_dtype));
  LAM_CHECK_ARG(n <= ((size_t)1 << 40) / ((size_t)c * h * w), "lam_normalize_images: %zu images of %dx%dx%d is too many", n,
                c, h, w);
  if (n == 0) return LAM_OK;
  LAM_CHECK_ARG(in && mean && std && out, "lam_normalize_images: %s is NULL",
                !in ? "in" : !mean ? "mean" : !std ? "std" : "out");
  for (int i = 0; i < c; i++)
    LAM_CHECK_ARG(std[i] > 0, "lam_normalize_images: std[%d] = %g must be greater than 0", i, (double)std[i]);
  return ctx->be->prim->normalize_images(ctx, n, c, h, w, layout == LAM_LAYOUT_NHWC, in, mean, std,
                                   out_dtype == LAM_DTYPE_BF16, out);
}
