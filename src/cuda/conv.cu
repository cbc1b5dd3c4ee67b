/* conv.cu — the 2-D convolution primitives (prims.h: conv2d_*) on CUDA: cuDNN's convolutions over the
 * NCHW float tensors when lamina is built with cuDNN and its handle can be made, else im2col + cuBLAS
 * (conv_im2col.h). cuDNN computes in fp32 for the fp32 precision and may use TF32 tensor cores for tf32 and
 * bf16 (the bf16 precision's activations are float). Algorithms come from cuDNN's heuristics (or its Find:
 * LAMINA_CONV_ALGO), chosen once per geometry and cached; no call that runs a step synchronizes, so it can
 * be captured. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../conv_im2col.h"
#include "cuda.h"

#ifdef LAMINA_WITH_CUDNN
#include <cudnn.h>

#define CONV_CACHE 64
#define CONV_WS_MAX ((size_t)1 << 30) /* the most workspace an algorithm may ask for */

typedef struct conv_plan {
  lam_conv_geom g;
  int OC, B, math;
  cudnnConvolutionFwdAlgo_t fwd;
  cudnnConvolutionBwdDataAlgo_t bwd_data;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter;
  size_t ws[3];
} conv_plan;

typedef struct cudnn_state {
  cudnnHandle_t h;
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t c;
  conv_plan plan[CONV_CACHE];
  int nplan, next;
} cudnn_state;

static lam_status cudnn_status(cudnnStatus_t s, const char *expr, const char *file, int line) {
  if (s == CUDNN_STATUS_SUCCESS) return LAM_OK;
  return lam_fail_at(LAM_ERR_CUDA, file, line, "%s failed: %s", expr, cudnnGetErrorString(s));
}
#define CUDNN_TRY(expr) LAM_TRY(cudnn_status((expr), #expr, __FILE__, __LINE__))

/* The handle, made at the first convolution; NULL (and im2col + GEMM from then on) where cuDNN cannot be
 * loaded here. */
static cudnn_state *cudnn_of(lam_ctx *ctx) {
  cuda_state *st = cuda_st(ctx);
  if (st->cudnn || st->cudnn_failed) return (cudnn_state *)st->cudnn;
  cudnn_state *c = (cudnn_state *)calloc(1, sizeof *c);
  if (!c || cudnnCreate(&c->h) != CUDNN_STATUS_SUCCESS || cudnnSetStream(c->h, st->stream) != CUDNN_STATUS_SUCCESS ||
      cudnnCreateTensorDescriptor(&c->x) != CUDNN_STATUS_SUCCESS ||
      cudnnCreateTensorDescriptor(&c->y) != CUDNN_STATUS_SUCCESS ||
      cudnnCreateFilterDescriptor(&c->w) != CUDNN_STATUS_SUCCESS ||
      cudnnCreateConvolutionDescriptor(&c->c) != CUDNN_STATUS_SUCCESS) {
    if (c && c->h) cudnnDestroy(c->h);
    free(c);
    st->cudnn_failed = 1;
    return NULL;
  }
  st->cudnn = c;
  return c;
}

void cuda_conv_destroy(cuda_state *st) {
  cudnn_state *c = (cudnn_state *)st->cudnn;
  if (!c) return;
  cudnnDestroyTensorDescriptor(c->x);
  cudnnDestroyTensorDescriptor(c->y);
  cudnnDestroyFilterDescriptor(c->w);
  cudnnDestroyConvolutionDescriptor(c->c);
  cudnnDestroy(c->h);
  free(c);
  st->cudnn = NULL;
}

static int math_of(lam_ctx *ctx) { return ctx->precision == LAM_PRECISION_FP32 ? 0 : 1; }

static lam_status set_descs(lam_ctx *ctx, cudnn_state *c, const lam_conv_geom *g, int OC, int B) {
  CUDNN_TRY(cudnnSetTensor4dDescriptor(c->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, g->C, g->H, g->W));
  CUDNN_TRY(cudnnSetTensor4dDescriptor(c->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, B, OC, g->OH, g->OW));
  CUDNN_TRY(cudnnSetFilter4dDescriptor(c->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, OC, g->C, g->K, g->K));
  CUDNN_TRY(cudnnSetConvolution2dDescriptor(c->c, g->pad, g->pad, g->stride, g->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT));
  /* fp32: FMA only; tf32 and bf16: tensor cores on float (TF32) allowed */
  CUDNN_TRY(cudnnSetConvolutionMathType(c->c, math_of(ctx) ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
  return LAM_OK;
}

/* How the algorithms are chosen (LAMINA_CONV_ALGO): from cuDNN's heuristics (the default, without running
 * anything), or "find": measured by cuDNN's Find on this GPU (as PyTorch's cudnn.benchmark). Find times
 * each algorithm once, and on the H200 its picks made the benchmark nets' steps slower, not faster (res
 * 11.9 against 11.5 ms, unet 5.9 against 4.9; air 4.70 against 4.84: BENCHMARKS.md), so it is opt-in. It
 * synchronizes, so it runs only outside a graph capture (the trainer plans every geometry before it
 * captures; one met first inside a capture takes the heuristics). */
static int find_wanted(void) {
  const char *e = getenv("LAMINA_CONV_ALGO");
  return e && !strcmp(e, "find");
}

/* The first usable entry of a perf list (sorted best first by cuDNN): status success, workspace within
 * CONV_WS_MAX. Returns its index, or -1. */
template <typename Perf> static int first_fit(const Perf *a, int n) {
  for (int i = 0; i < n; i++)
    if (a[i].status == CUDNN_STATUS_SUCCESS && a[i].memory <= CONV_WS_MAX) return i;
  return -1;
}

/* The plan for this geometry: cached, or chosen now (the heuristics' first algorithm whose workspace is
 * at most CONV_WS_MAX; with find_wanted, the fastest measured one that fits). The descriptors are set for it
 * either way. */
static lam_status plan_of(lam_ctx *ctx, cudnn_state *c, const lam_conv_geom *g, int OC, int B, const conv_plan **out) {
  LAM_TRY(set_descs(ctx, c, g, OC, B));
  int math = math_of(ctx);
  for (int i = 0; i < c->nplan; i++) {
    const conv_plan *p = &c->plan[i];
    if (!memcmp(&p->g, g, sizeof *g) && p->OC == OC && p->B == B && p->math == math) {
      *out = p;
      return LAM_OK;
    }
  }
  conv_plan p;
  memset(&p, 0, sizeof p);
  p.g = *g, p.OC = OC, p.B = B, p.math = math;
  int find = find_wanted() && !cuda_st(ctx)->capturing, n = 0, k;
  cudnnConvolutionFwdAlgoPerf_t f[16];
  if (find)
    CUDNN_TRY(cudnnFindConvolutionForwardAlgorithm(c->h, c->x, c->w, c->c, c->y, 16, &n, f));
  else
    CUDNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(c->h, c->x, c->w, c->c, c->y, 16, &n, f));
  if ((k = first_fit(f, n)) < 0) return LAM_FAIL(LAM_ERR_CUDA, "cuDNN has no forward algorithm for this convolution");
  p.fwd = f[k].algo;
  cudnnConvolutionBwdDataAlgoPerf_t d[16];
  if (find)
    CUDNN_TRY(cudnnFindConvolutionBackwardDataAlgorithm(c->h, c->w, c->y, c->c, c->x, 16, &n, d));
  else
    CUDNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(c->h, c->w, c->y, c->c, c->x, 16, &n, d));
  if ((k = first_fit(d, n)) < 0)
    return LAM_FAIL(LAM_ERR_CUDA, "cuDNN has no backward-data algorithm for this convolution");
  p.bwd_data = d[k].algo;
  cudnnConvolutionBwdFilterAlgoPerf_t w[16];
  if (find)
    CUDNN_TRY(cudnnFindConvolutionBackwardFilterAlgorithm(c->h, c->x, c->y, c->c, c->w, 16, &n, w));
  else
    CUDNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->h, c->x, c->y, c->c, c->w, 16, &n, w));
  if ((k = first_fit(w, n)) < 0)
    return LAM_FAIL(LAM_ERR_CUDA, "cuDNN has no backward-filter algorithm for this convolution");
  p.bwd_filter = w[k].algo;
  /* the workspaces from the size queries of the chosen algorithms */
  CUDNN_TRY(cudnnGetConvolutionForwardWorkspaceSize(c->h, c->x, c->w, c->c, c->y, p.fwd, &p.ws[0]));
  CUDNN_TRY(cudnnGetConvolutionBackwardDataWorkspaceSize(c->h, c->w, c->y, c->c, c->x, p.bwd_data, &p.ws[1]));
  CUDNN_TRY(cudnnGetConvolutionBackwardFilterWorkspaceSize(c->h, c->x, c->y, c->c, c->w, p.bwd_filter, &p.ws[2]));
  int slot = c->nplan < CONV_CACHE ? c->nplan++ : (c->next++ % CONV_CACHE);
  c->plan[slot] = p;
  *out = &c->plan[slot];
  return LAM_OK;
}

static lam_status check_ws(const char *what, size_t have, size_t need) {
  if (have < need) return LAM_FAIL(LAM_ERR_INVALID_ARG, "%s: workspace of %zu bytes, cuDNN's algorithm needs %zu", what, have, need);
  return LAM_OK;
}
#endif

lam_status cuda_conv2d_workspace(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B, size_t *bytes) {
#ifdef LAMINA_WITH_CUDNN
  cudnn_state *c = cudnn_of(ctx);
  if (c) {
    const conv_plan *p;
    LAM_TRY(plan_of(ctx, c, g, OC, B, &p));
    *bytes = p->ws[0] > p->ws[1] ? p->ws[0] : p->ws[1];
    if (p->ws[2] > *bytes) *bytes = p->ws[2];
    return LAM_OK;
  }
#endif
  (void)ctx;
  return conv_im2col_workspace(g, OC, B, bytes);
}

lam_status cuda_conv2d_fwd(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B, const float *x, const float *W, float *y,
                           void *ws, size_t ws_bytes) {
#ifdef LAMINA_WITH_CUDNN
  cudnn_state *c = cudnn_of(ctx);
  if (c) {
    const conv_plan *p;
    LAM_TRY(plan_of(ctx, c, g, OC, B, &p));
    LAM_TRY(check_ws("conv2d_fwd", ws_bytes, p->ws[0]));
    const float one = 1.0f, zero = 0.0f;
    CUDNN_TRY(cudnnConvolutionForward(c->h, &one, c->x, x, c->w, W, c->c, p->fwd, ws, ws_bytes, &zero, c->y, y));
    return cuda_after_launch(cuda_st(ctx), cuda_st(ctx)->stream, "cudnnConvolutionForward", __FILE__, __LINE__);
  }
#endif
  return conv_im2col_fwd(ctx, g, OC, B, x, W, y, ws, ws_bytes);
}

lam_status cuda_conv2d_bwd_data(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B, const float *dy, const float *W,
                                float *dx, int accumulate, void *ws, size_t ws_bytes) {
#ifdef LAMINA_WITH_CUDNN
  cudnn_state *c = cudnn_of(ctx);
  if (c) {
    const conv_plan *p;
    LAM_TRY(plan_of(ctx, c, g, OC, B, &p));
    LAM_TRY(check_ws("conv2d_bwd_data", ws_bytes, p->ws[1]));
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    CUDNN_TRY(cudnnConvolutionBackwardData(c->h, &one, c->w, W, c->y, dy, c->c, p->bwd_data, ws, ws_bytes, &beta, c->x,
                                           dx));
    return cuda_after_launch(cuda_st(ctx), cuda_st(ctx)->stream, "cudnnConvolutionBackwardData", __FILE__, __LINE__);
  }
#endif
  return conv_im2col_bwd_data(ctx, g, OC, B, dy, W, dx, accumulate, ws, ws_bytes);
}

lam_status cuda_conv2d_bwd_filter(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B, const float *x, const float *dy,
                                  float *dW, void *ws, size_t ws_bytes) {
#ifdef LAMINA_WITH_CUDNN
  cudnn_state *c = cudnn_of(ctx);
  if (c) {
    const conv_plan *p;
    LAM_TRY(plan_of(ctx, c, g, OC, B, &p));
    LAM_TRY(check_ws("conv2d_bwd_filter", ws_bytes, p->ws[2]));
    const float one = 1.0f;
    CUDNN_TRY(cudnnConvolutionBackwardFilter(c->h, &one, c->x, x, c->y, dy, c->c, p->bwd_filter, ws, ws_bytes, &one,
                                             c->w, dW));
    return cuda_after_launch(cuda_st(ctx), cuda_st(ctx)->stream, "cudnnConvolutionBackwardFilter", __FILE__, __LINE__);
  }
#endif
  return conv_im2col_bwd_filter(ctx, g, OC, B, x, dy, dW, ws, ws_bytes);
}
