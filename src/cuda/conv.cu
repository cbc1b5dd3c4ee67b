/* conv.cu — the 2-D convolution primitives (prims.h: conv2d_*) on CUDA: cuDNN's convolutions when lamina is
 * built with cuDNN and its handle can be made, else im2col + cuBLAS (conv_im2col.h). The tensors are NCHW
 * float32, or NHWC in float32 or bfloat16 (the model's format). cuDNN computes in fp32 for the fp32
 * precision, may use TF32 tensor cores on float32 for tf32 and bf16, and its bfloat16 tensor-core kernels on
 * bfloat16 (sums in fp32). In NHWC the filter is NHWC too (OC, K, K, C), as those kernels read it: the
 * weights, given in PyTorch's (OC, C, K, K), are laid out so in the workspace before each call, and the weight
 * gradient comes back through it and is added into dW in PyTorch's order. Algorithms come from cuDNN's
 * heuristics (or its Find: LAMINA_CONV_ALGO), chosen once per geometry and format and cached; no call that
 * runs a step synchronizes, so it can be captured. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../conv_im2col.h"
#include "cuda.h"
#include "vec.cuh"

#ifdef LAMINA_WITH_CUDNN
#include <cudnn.h>

#define CONV_CACHE 64
#define CONV_WS_MAX ((size_t)1 << 30) /* the most workspace an algorithm may ask for */

typedef struct conv_plan {
  lam_conv_geom g;
  int OC, B, math, dt, nhwc;
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

static lam_status set_descs(lam_ctx *ctx, cudnn_state *c, lam_fmt f, const lam_conv_geom *g, int OC, int B) {
  const cudnnTensorFormat_t tf = f.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  const cudnnDataType_t dt = f.dt == LAM_DT_BF16 ? CUDNN_DATA_BFLOAT16 : f.dt == LAM_DT_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
  CUDNN_TRY(cudnnSetTensor4dDescriptor(c->x, tf, dt, B, g->C, g->H, g->W));
  CUDNN_TRY(cudnnSetTensor4dDescriptor(c->y, tf, dt, B, OC, g->OH, g->OW));
  CUDNN_TRY(cudnnSetFilter4dDescriptor(c->w, dt, tf, OC, g->C, g->K, g->K));
  CUDNN_TRY(cudnnSetConvolution2dDescriptor(c->c, g->pad, g->pad, g->stride, g->stride, 1, 1, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT));
  /* fp32: FMA only; tf32: tensor cores on float (TF32) allowed; bfloat16 and half: their tensor-core kernels */
  cudnnMathType_t math = f.dt != LAM_DT_F32 ? CUDNN_TENSOR_OP_MATH : math_of(ctx) ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  CUDNN_TRY(cudnnSetConvolutionMathType(c->c, math));
  return LAM_OK;
}

/* How the algorithms are chosen (LAMINA_CONV_ALGO): from cuDNN's heuristics (the default, without running
 * anything), or "find": measured by cuDNN's Find on this GPU (as PyTorch's cudnn.benchmark). Find times
 * each algorithm once, and on the H200 its picks made the benchmark nets' steps slower, not faster (res
 * 11.9 against 11.5 ms, unet 5.9 against 4.9; air 4.70 against 4.84: docs/bench/JOURNAL.md, "Second session,
 * 2026-12-01"), so it is opt-in. It synchronizes, so it runs only outside a graph capture (the trainer
 * plans every geometry before it captures; one met first inside a capture takes the heuristics). */
static int find_wanted(void) {
  const char *e = getenv("LAMINA_CONV_ALGO");
  return e && !strcmp(e, "find");
}

/* The first usable entry of a perf list (sorted best first by cuDNN): status success, workspace within
 * limit. Returns its index, or -1. */
template <typename Perf> static int first_fit(const Perf *a, int n, size_t limit) {
  for (int i = 0; i < n; i++)
    if (a[i].status == CUDNN_STATUS_SUCCESS && a[i].memory <= limit) return i;
  return -1;
}

/* One direction's algorithm into *algo: the fastest measured (find: cuDNN runs each) or the heuristics' best,
 * the first of the list whose workspace fits in limit. */
enum { ALGOS = 16 }; /* more than cuDNN has for any direction */
template <typename Perf, typename Algo, typename Find, typename Get>
static lam_status choose(bool find, const char *what, size_t limit, Algo *algo, Find find_fn, Get get_fn) {
  Perf a[ALGOS];
  int n = 0;
  char call[96];
  snprintf(call, sizeof call, "cuDNN's %s algorithm %s", what, find ? "measurement (cudnnFind...)" : "heuristics (cudnnGet..._v7)");
  LAM_TRY(cudnn_status(find ? find_fn(a, &n) : get_fn(a, &n), call, __FILE__, __LINE__));
  const int k = first_fit(a, n, limit);
  if (k < 0) return LAM_FAIL(LAM_ERR_CUDA, "cuDNN has no %s algorithm for this convolution (workspace limit %zu bytes)",
                             what, limit);
  *algo = a[k].algo;
  return LAM_OK;
}

/* The plan for this geometry whose workspaces fit in limit bytes: cached, or chosen now (the heuristics' first
 * algorithms whose workspace fits; with find_wanted, the fastest measured ones that fit). The descriptors are set
 * for it either way. The trainer reserves its scratch by asking with CONV_WS_MAX at its batch; a batch it did not
 * plan for (an evaluation's last, smaller one) asks with what that scratch holds, so it takes algorithms that fit
 * rather than failing (at batch 16, cuDNN's first choice for a U-Net's conv wanted 3x the batch-64 one's). */
/* In NHWC, the input channels cuDNN is given: a multiple of 8 (16-bit) or 4 (float32), as its tensor-core
 * kernels take them. A first layer's 1 or 3 channels are padded with zero channels in the workspace (on the
 * H200 cuDNN took a generic kernel for them, 120-190 us a call, where the padded conv takes a few). */
static int padded_c(lam_fmt f, int C) {
  if (!f.nhwc) return C;
  const int v = (int)(16 / lam_dt_size(f.dt));
  return (C + v - 1) / v * v;
}
static lam_conv_geom cudnn_geom(lam_fmt f, const lam_conv_geom *g) {
  lam_conv_geom q = *g;
  q.C = padded_c(f, g->C);
  return q;
}

/* What a cuDNN call wrote (its descriptor's whole tensor or filter), for compute-sanitizer's initcheck (cuda.h). */
static void mark_tensor(cudaStream_t s, cudnnTensorDescriptor_t d, const void *p) {
  size_t bytes = 0;
  if (cudnnGetTensorSizeInBytes(d, &bytes) == CUDNN_STATUS_SUCCESS) cuda_mark_written(s, p, bytes);
}
static void mark_filter(cudaStream_t s, cudnnFilterDescriptor_t d, const void *p) {
  size_t bytes = 0;
  if (cudnnGetFilterSizeInBytes(d, &bytes) == CUDNN_STATUS_SUCCESS) cuda_mark_written(s, p, bytes);
}

static size_t plan_ws(const conv_plan *p) {
  return p->ws[0] > p->ws[1] ? (p->ws[0] > p->ws[2] ? p->ws[0] : p->ws[2]) : (p->ws[1] > p->ws[2] ? p->ws[1] : p->ws[2]);
}
static lam_status plan_of(lam_ctx *ctx, cudnn_state *c, lam_fmt fm, const lam_conv_geom *g, int OC, int B,
                          size_t limit, const conv_plan **out) {
  const lam_conv_geom gp = cudnn_geom(fm, g);
  LAM_TRY(set_descs(ctx, c, fm, &gp, OC, B));
  int math = math_of(ctx);
  for (int i = 0; i < c->nplan; i++) {
    const conv_plan *p = &c->plan[i];
    if (!memcmp(&p->g, g, sizeof *g) && p->OC == OC && p->B == B && p->math == math && p->dt == fm.dt &&
        p->nhwc == fm.nhwc && plan_ws(p) <= limit) {
      *out = p;
      return LAM_OK;
    }
  }
  conv_plan p;
  memset(&p, 0, sizeof p);
  p.g = *g, p.OC = OC, p.B = B, p.math = math, p.dt = fm.dt, p.nhwc = fm.nhwc;
  const bool find = find_wanted() && !cuda_st(ctx)->capturing;
  LAM_TRY(choose<cudnnConvolutionFwdAlgoPerf_t>(
      find, "forward", limit, &p.fwd,
      [&](cudnnConvolutionFwdAlgoPerf_t *a, int *n) {
        return cudnnFindConvolutionForwardAlgorithm(c->h, c->x, c->w, c->c, c->y, ALGOS, n, a);
      },
      [&](cudnnConvolutionFwdAlgoPerf_t *a, int *n) {
        return cudnnGetConvolutionForwardAlgorithm_v7(c->h, c->x, c->w, c->c, c->y, ALGOS, n, a);
      }));
  LAM_TRY(choose<cudnnConvolutionBwdDataAlgoPerf_t>(
      find, "backward-data", limit, &p.bwd_data,
      [&](cudnnConvolutionBwdDataAlgoPerf_t *a, int *n) {
        return cudnnFindConvolutionBackwardDataAlgorithm(c->h, c->w, c->y, c->c, c->x, ALGOS, n, a);
      },
      [&](cudnnConvolutionBwdDataAlgoPerf_t *a, int *n) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(c->h, c->w, c->y, c->c, c->x, ALGOS, n, a);
      }));
  LAM_TRY(choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
      find, "backward-filter", limit, &p.bwd_filter,
      [&](cudnnConvolutionBwdFilterAlgoPerf_t *a, int *n) {
        return cudnnFindConvolutionBackwardFilterAlgorithm(c->h, c->x, c->y, c->c, c->w, ALGOS, n, a);
      },
      [&](cudnnConvolutionBwdFilterAlgoPerf_t *a, int *n) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->h, c->x, c->y, c->c, c->w, ALGOS, n, a);
      }));
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

/* ---- NHWC: the filter as (OC, K, K, Cp) from PyTorch's (OC, C, K, K) and its gradient back, the input's
 * channels padded to Cp. The workspace past cuDNN's part: the filter, its gradient, the padded input. ---- */

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }
static size_t taps_of(const lam_conv_geom *g) { return (size_t)g->K * g->K; }
/* Whether cuDNN's filter differs from PyTorch's (a 1x1 kernel or a single, unpadded, input channel is both). */
static bool filter_moves(lam_fmt f, const lam_conv_geom *g) {
  return f.nhwc && ((g->K > 1 && g->C > 1) || padded_c(f, g->C) != g->C);
}
static size_t filter_bytes(lam_fmt f, const lam_conv_geom *g, int OC) {
  return align256((size_t)OC * padded_c(f, g->C) * taps_of(g) * lam_dt_size(f.dt));
}
static size_t padded_x_bytes(lam_fmt f, const lam_conv_geom *g, int B) {
  const int Cp = padded_c(f, g->C);
  return Cp == g->C ? 0 : align256((size_t)B * g->H * g->W * Cp * lam_dt_size(f.dt));
}
static size_t extra_bytes(lam_fmt f, const lam_conv_geom *g, int OC, int B) {
  return lam_fmt_plain(f) ? 0 : 2 * filter_bytes(f, g, OC) + padded_x_bytes(f, g, B);
}
/* The pieces of a workspace whose cuDNN part is cw bytes. */
typedef struct conv_ws {
  void *W, *dW, *x;
} conv_ws;
static conv_ws ws_parts(lam_fmt f, const lam_conv_geom *g, int OC, void *ws, size_t cw) {
  conv_ws p;
  p.W = (char *)ws + align256(cw);
  p.dW = (char *)p.W + filter_bytes(f, g, OC);
  p.x = (char *)p.dW + filter_bytes(f, g, OC);
  return p;
}

/* dst (OC, KK, Cp) = src (OC, C, KK), 0 for the padded channels. */
template <typename T> __global__ void filter_to_nhwc_kernel(size_t n, int C, int Cp, int KK, const T *src, T *dst) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const int c = (int)(i % Cp), rs = (int)(i / Cp % KK);
    const size_t oc = i / ((size_t)Cp * KK);
    dst[i] = c < C ? src[(oc * C + c) * KK + rs] : T(0.0f);
  }
}
/* dW (OC, C, KK) += g (OC, KK, Cp); with same_order, g is (OC, C, KK) already. */
template <typename T>
__global__ void filter_grad_add_kernel(size_t n, int C, int Cp, int KK, int same_order, const T *g, float *dW) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const int rs = (int)(i % KK), c = (int)(i / KK % C);
    const size_t oc = i / ((size_t)C * KK);
    dW[i] += tget(g, same_order ? i : (oc * KK + rs) * Cp + c);
  }
}
/* xp (pixels, Cp) = x (pixels, C), 0 for the padded channels; and back: dx (=, or += with acc) dxp's C. */
template <typename T> __global__ void pad_channels_kernel(size_t n, int C, int Cp, const T *x, T *xp) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const int c = (int)(i % Cp);
    xp[i] = c < C ? x[i / Cp * C + c] : T(0.0f);
  }
}
template <typename T> __global__ void unpad_channels_kernel(size_t n, int C, int Cp, const T *dxp, int acc, T *dx) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    const float v = tget(dxp, i / C * Cp + i % C);
    tput(dx, i, acc ? tget(dx, i) + v : v);
  }
}
static unsigned grid_for(size_t n) {
  size_t b = (n + 255) / 256;
  return (unsigned)(b < 65535 ? (b ? b : 1) : 65535);
}

/* The filter as cuDNN reads it: W itself, or laid out (and padded) into the workspace. */
static lam_status filter_in(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, const void *W, const conv_ws *p,
                            const void **out) {
  *out = W;
  if (!filter_moves(f, g)) return LAM_OK;
  cuda_state *st = cuda_st(ctx);
  const int Cp = padded_c(f, g->C), KK = (int)taps_of(g);
  const size_t n = (size_t)OC * Cp * KK;
  LAM_DT_DISPATCH(f.dt, T,
                  filter_to_nhwc_kernel<T><<<grid_for(n), 256, 0, st->stream>>>(n, g->C, Cp, KK, (const T *)W, (T *)p->W));
  *out = p->W;
  return cuda_after_launch(st, st->stream, "filter_to_nhwc_kernel", __FILE__, __LINE__);
}
/* The input as cuDNN reads it: x itself, or with its channels padded into the workspace. */
static lam_status input_in(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int B, const void *x, const conv_ws *p,
                           const void **out) {
  *out = x;
  const int Cp = padded_c(f, g->C);
  if (Cp == g->C) return LAM_OK;
  cuda_state *st = cuda_st(ctx);
  const size_t n = (size_t)B * g->H * g->W * Cp;
  LAM_DT_DISPATCH(f.dt, T, pad_channels_kernel<T><<<grid_for(n), 256, 0, st->stream>>>(n, g->C, Cp, (const T *)x, (T *)p->x));
  *out = p->x;
  return cuda_after_launch(st, st->stream, "pad_channels_kernel", __FILE__, __LINE__);
}
#endif

lam_status cuda_conv2d_workspace(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, size_t *bytes) {
  if (!lam_fmt_plain(f) && !f.nhwc) return nchw_bf16_unsupported("conv2d");
#ifdef LAMINA_WITH_CUDNN
  cudnn_state *c = cudnn_of(ctx);
  if (c) {
    const conv_plan *p;
    LAM_TRY(plan_of(ctx, c, f, g, OC, B, CONV_WS_MAX, &p));
    *bytes = p->ws[0] > p->ws[1] ? p->ws[0] : p->ws[1];
    if (p->ws[2] > *bytes) *bytes = p->ws[2];
    if (extra_bytes(f, g, OC, B)) *bytes = align256(*bytes) + extra_bytes(f, g, OC, B);
    return LAM_OK;
  }
#endif
  (void)ctx;
  return conv_im2col_workspace(f, g, OC, B, bytes);
}

#ifdef LAMINA_WITH_CUDNN
/* cuDNN's own part of a workspace of ws_bytes: all of it, less the room of the filters and padded input. */
static size_t cudnn_part(lam_fmt f, const lam_conv_geom *g, int OC, int B, size_t ws_bytes) {
  size_t eb = extra_bytes(f, g, OC, B);
  return eb && ws_bytes >= eb ? (ws_bytes - eb) / 256 * 256 : ws_bytes;
}
#endif

lam_status cuda_conv2d_fwd(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *x, const void *W,
                           void *y, void *ws, size_t ws_bytes) {
  if (!lam_fmt_plain(f) && !f.nhwc) return nchw_bf16_unsupported("conv2d_fwd");
#ifdef LAMINA_WITH_CUDNN
  cudnn_state *c = cudnn_of(ctx);
  if (c) {
    const conv_plan *p;
    const size_t cw = cudnn_part(f, g, OC, B, ws_bytes);
    LAM_TRY(plan_of(ctx, c, f, g, OC, B, cw, &p));
    LAM_TRY(check_ws("conv2d_fwd", cw, p->ws[0]));
    const conv_ws parts = ws_parts(f, g, OC, ws, cw);
    const void *Wc, *xc;
    LAM_TRY(filter_in(ctx, f, g, OC, W, &parts, &Wc));
    LAM_TRY(input_in(ctx, f, g, B, x, &parts, &xc));
    const float one = 1.0f, zero = 0.0f;
    CUDNN_TRY(cudnnConvolutionForward(c->h, &one, c->x, xc, c->w, Wc, c->c, p->fwd, ws, cw, &zero, c->y, y));
    mark_tensor(cuda_st(ctx)->stream, c->y, y);
    return cuda_after_launch(cuda_st(ctx), cuda_st(ctx)->stream, "cudnnConvolutionForward", __FILE__, __LINE__);
  }
#endif
  return conv_im2col_fwd(ctx, f, g, OC, B, x, W, y, ws, ws_bytes);
}

lam_status cuda_conv2d_bwd_data(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *dy,
                                const void *W, void *dx, int accumulate, void *ws, size_t ws_bytes) {
  if (!lam_fmt_plain(f) && !f.nhwc) return nchw_bf16_unsupported("conv2d_bwd_data");
#ifdef LAMINA_WITH_CUDNN
  cudnn_state *c = cudnn_of(ctx);
  if (c) {
    const conv_plan *p;
    const size_t cw = cudnn_part(f, g, OC, B, ws_bytes);
    LAM_TRY(plan_of(ctx, c, f, g, OC, B, cw, &p));
    LAM_TRY(check_ws("conv2d_bwd_data", cw, p->ws[1]));
    const conv_ws parts = ws_parts(f, g, OC, ws, cw);
    const void *Wc;
    LAM_TRY(filter_in(ctx, f, g, OC, W, &parts, &Wc));
    const int Cp = padded_c(f, g->C);
    const float one = 1.0f, beta = accumulate && Cp == g->C ? 1.0f : 0.0f;
    void *dxc = Cp == g->C ? dx : parts.x; /* padded channels: into the workspace, then their C channels out */
    cuda_state *st = cuda_st(ctx);
    CUDNN_TRY(cudnnConvolutionBackwardData(c->h, &one, c->w, Wc, c->y, dy, c->c, p->bwd_data, ws, cw, &beta, c->x, dxc));
    mark_tensor(st->stream, c->x, dxc);
    LAM_TRY(cuda_after_launch(st, st->stream, "cudnnConvolutionBackwardData", __FILE__, __LINE__));
    if (dxc == dx) return LAM_OK;
    const size_t n = (size_t)B * g->H * g->W * g->C;
    LAM_DT_DISPATCH(f.dt, T,
                    unpad_channels_kernel<T><<<grid_for(n), 256, 0, st->stream>>>(n, g->C, Cp, (const T *)dxc, accumulate,
                                                                                  (T *)dx));
    return cuda_after_launch(st, st->stream, "unpad_channels_kernel", __FILE__, __LINE__);
  }
#endif
  return conv_im2col_bwd_data(ctx, f, g, OC, B, dy, W, dx, accumulate, ws, ws_bytes);
}

lam_status cuda_conv2d_bwd_filter(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *x,
                                  const void *dy, float *dW, void *ws, size_t ws_bytes) {
  if (!lam_fmt_plain(f) && !f.nhwc) return nchw_bf16_unsupported("conv2d_bwd_filter");
#ifdef LAMINA_WITH_CUDNN
  cudnn_state *c = cudnn_of(ctx);
  if (c) {
    cuda_state *st = cuda_st(ctx);
    const conv_plan *p;
    const size_t cw = cudnn_part(f, g, OC, B, ws_bytes);
    LAM_TRY(plan_of(ctx, c, f, g, OC, B, cw, &p));
    LAM_TRY(check_ws("conv2d_bwd_filter", cw, p->ws[2]));
    const float one = 1.0f, zero = 0.0f;
    if (lam_fmt_plain(f) || (f.dt == LAM_DT_F32 && !filter_moves(f, g))) { /* straight into dW */
      CUDNN_TRY(cudnnConvolutionBackwardFilter(c->h, &one, c->x, x, c->y, dy, c->c, p->bwd_filter, ws, cw, &one, c->w,
                                               dW));
      mark_filter(st->stream, c->w, dW);
      return cuda_after_launch(st, st->stream, "cudnnConvolutionBackwardFilter", __FILE__, __LINE__);
    }
    /* through the workspace: cuDNN's gradient in its order and type, added to dW */
    const conv_ws parts = ws_parts(f, g, OC, ws, cw);
    const void *xc;
    LAM_TRY(input_in(ctx, f, g, B, x, &parts, &xc));
    CUDNN_TRY(cudnnConvolutionBackwardFilter(c->h, &one, c->x, xc, c->y, dy, c->c, p->bwd_filter, ws, cw, &zero, c->w,
                                             parts.dW));
    mark_filter(st->stream, c->w, parts.dW);
    LAM_TRY(cuda_after_launch(st, st->stream, "cudnnConvolutionBackwardFilter", __FILE__, __LINE__));
    const size_t n = (size_t)OC * g->C * taps_of(g);
    const int same = !filter_moves(f, g), Cp = padded_c(f, g->C), KK = (int)taps_of(g);
    LAM_DT_DISPATCH(f.dt, T,
                    filter_grad_add_kernel<T><<<grid_for(n), 256, 0, st->stream>>>(n, g->C, Cp, KK, same, (const T *)parts.dW,
                                                                                   dW));
    return cuda_after_launch(st, st->stream, "filter_grad_add_kernel", __FILE__, __LINE__);
  }
#endif
  return conv_im2col_bwd_filter(ctx, f, g, OC, B, x, dy, dW, ws, ws_bytes);
}
