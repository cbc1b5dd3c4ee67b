/* conv.cu — the 2-D convolution primitives (prims.h: conv2d_*) on CUDA: cuDNN's convolutions when lamina is
 * built with cuDNN and its handle can be made, else im2col + cuBLAS (conv_im2col.h). The tensors are NCHW
 * float32, or NHWC in float32 or bfloat16 (the model's format). cuDNN computes in fp32 for the fp32
 * precision, may use TF32 tensor cores on float32 for tf32 and bf16, and its bfloat16 tensor-core kernels on
 * bfloat16 (sums in fp32). In NHWC the filter is NHWC too (OC, K, K, C), as those kernels read it: the
 * weights, given in PyTorch's (OC, C, K, K), are laid out so in the workspace before each call, and the weight
 * gradient comes back through it and is added into dW in PyTorch's order. Algorithms come from cuDNN's
 * heuristics (or its Find: LAMINA_CONV_ALGO), chosen once per geometry and format and cached; no call that
 * runs a step synchronizes, so it can be captured. The CPU twins are in cpu/conv.c under the same names.
 *
 * Beside them, lamina's own kernels of the conv family: im2col and col2im (the fallback's, and the reference
 * CNN's path), the layout changes with bias around the GEMM (cbp_to_bcp, bcp_to_cbp, with the deterministic row
 * sums of a bias gradient), a conv's per-channel bias in NCHW and NHWC (its gradient through reduce.cuh), the
 * fused conv -> relu -> maxpool after the GEMM and the direct first-layer block. Everything is queued on the
 * context's stream; nothing here waits for the device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../conv_im2col.h"
#include "cuda.h"
#include "kernels.cuh"
#include "vec.cuh"
#include "reduce.cuh"
#include "../math/act.h"

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

/* conv2d_fwd_stats's one cuDNN graph for a geometry (conv + GenStats, below): its plan and the descriptors it was
 * built from (kept while the plan lives), or none where cuDNN built none. */
enum { STATS_DESCS = 12 };
typedef struct stats_plan {
  lam_conv_geom g;
  int OC, B;
  cudnnBackendDescriptor_t plan, desc[STATS_DESCS]; /* plan NULL: no engine took the graph */
  int ndesc;
  int64_t ws;  /* the plan's workspace */
  int choice;  /* 0 not measured yet; 1 the one graph measured faster; 2 the conv and a pass after it */
  float ms[2]; /* what the measurement found: one graph, two steps */
} stats_plan;

typedef struct cudnn_state {
  cudnnHandle_t h;
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t c;
  conv_plan plan[CONV_CACHE];
  int nplan, next;
  stats_plan stats[CONV_CACHE];
  int nstats, next_stats;
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

static void stats_plan_free(stats_plan *p) {
  if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
  for (int i = p->ndesc - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->desc[i]);
  p->plan = NULL, p->ndesc = 0;
}

void cuda_conv_destroy(cuda_state *st) {
  cudnn_state *c = (cudnn_state *)st->cudnn;
  if (!c) return;
  for (int i = 0; i < c->nstats; i++) stats_plan_free(&c->stats[i]);
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

/* ---- the conv with its output's channel statistics (conv2d_fwd_stats) ----
 * BatchNorm after a conv reads the conv's whole output once more only to sum it per channel. cuDNN can take those
 * sums in the conv's own epilogue: its graph API's GenStats after ConvolutionFwd, a precompiled engine on sm80+ in
 * float16 NHWC (the developer guide's ConvBNfprop without its prologue). The graph is built as cudnn-frontend's
 * sample "conv + genstats" builds it (X, W, Y half, NHWC / KRSC; the sums FLOAT [1, OC, 1, 1]; FLOAT compute;
 * 16-byte aligned): dev/cudnn_convbn.cu, which found it on the H200 and the H100 at +9.6 to +10 us over the plain
 * conv at batch 512 on res's shapes, where BatchNorm's own statistics pass took 14 to 30 us; at batch 64 it lost.
 * So the first call of a geometry outside a capture times both routes and keeps the faster (force: the graph
 * wherever an engine takes it); one met first inside a capture runs the two steps. */
#ifdef LAMINA_WITH_CUDNN
typedef cudnnBackendDescriptor_t bdesc;

/* A graph being built: the first failure's status is kept and every later step is skipped. */
typedef struct gbuild {
  cudnnStatus_t s;
  stats_plan *p;
} gbuild;
static bdesc gb_make(gbuild *b, cudnnBackendDescriptorType_t t) {
  bdesc d = NULL;
  if (b->s != CUDNN_STATUS_SUCCESS) return NULL;
  if (b->p->ndesc == STATS_DESCS) {
    b->s = CUDNN_STATUS_INTERNAL_ERROR;
    return NULL;
  }
  b->s = cudnnBackendCreateDescriptor(t, &d);
  if (b->s == CUDNN_STATUS_SUCCESS) b->p->desc[b->p->ndesc++] = d;
  return d;
}
static void gb_set(gbuild *b, bdesc d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
                   const void *v) {
  if (b->s == CUDNN_STATUS_SUCCESS) b->s = cudnnBackendSetAttribute(d, a, t, n, v);
}
static void gb_fin(gbuild *b, bdesc d) {
  if (b->s == CUDNN_STATUS_SUCCESS) b->s = cudnnBackendFinalize(d);
}
/* Logical dims (n, c, h, w) laid out NHWC (a filter's (K, C, R, S): KRSC), 16-byte aligned. */
static bdesc gb_tensor(gbuild *b, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h, int64_t w) {
  bdesc d = gb_make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t dims[4] = {n, c, h, w}, str[4] = {c * h * w, 1, w * c, c}, align = 16;
  gb_set(b, d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  gb_set(b, d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  gb_set(b, d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str);
  gb_set(b, d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  gb_set(b, d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  gb_fin(b, d);
  return d;
}
enum { UID_X = 1, UID_W, UID_Y, UID_SUM, UID_SQ };

/* The plan of y = conv(x, W) with GenStats on y, from cuDNN's heuristics (mode A, then its fallback list): the
 * first config whose plan builds, as cudnn-frontend takes them. p->plan stays NULL where none does. */
static void stats_plan_build(cudnn_state *c, stats_plan *p, const lam_conv_geom *gp) {
  gbuild b = {CUDNN_STATUS_SUCCESS, p};
  const cudnnDataType_t half = CUDNN_DATA_HALF, fl = CUDNN_DATA_FLOAT;
  bdesc X = gb_tensor(&b, UID_X, half, p->B, gp->C, gp->H, gp->W);
  bdesc W = gb_tensor(&b, UID_W, half, p->OC, gp->C, gp->K, gp->K);
  bdesc Y = gb_tensor(&b, UID_Y, half, p->B, p->OC, gp->OH, gp->OW);
  bdesc S = gb_tensor(&b, UID_SUM, fl, 1, p->OC, 1, 1), Q = gb_tensor(&b, UID_SQ, fl, 1, p->OC, 1, 1);
  bdesc cd = gb_make(&b, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t sd = 2, one[2] = {1, 1}, st[2] = {gp->stride, gp->stride}, pad[2] = {gp->pad, gp->pad};
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  gb_set(&b, cd, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &fl);
  gb_set(&b, cd, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  gb_set(&b, cd, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd);
  gb_set(&b, cd, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one);
  gb_set(&b, cd, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, st);
  gb_set(&b, cd, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  gb_set(&b, cd, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  gb_fin(&b, cd);
  bdesc conv = gb_make(&b, CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  const float alpha = 1.0f, beta = 0.0f;
  gb_set(&b, conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &X);
  gb_set(&b, conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &W);
  gb_set(&b, conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &Y);
  gb_set(&b, conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd);
  gb_set(&b, conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
  gb_set(&b, conv, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  gb_fin(&b, conv);
  bdesc gs = gb_make(&b, CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
  const cudnnGenStatsMode_t gm = CUDNN_GENSTATS_SUM_SQSUM;
  gb_set(&b, gs, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &gm);
  gb_set(&b, gs, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &fl);
  gb_set(&b, gs, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &Y);
  gb_set(&b, gs, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &S);
  gb_set(&b, gs, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &Q);
  gb_fin(&b, gs);
  bdesc graph = gb_make(&b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  const bdesc ops[2] = {conv, gs};
  gb_set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, ops);
  gb_set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->h);
  gb_fin(&b, graph);
  const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  for (int m = 0; m < 2 && b.s == CUDNN_STATUS_SUCCESS && !p->plan; m++) {
    bdesc h = NULL;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &h) != CUDNN_STATUS_SUCCESS) break;
    int64_t n = 0, got = 0;
    enum { CFGS = 8 };
    bdesc cfg[CFGS] = {NULL};
    if (cudnnBackendSetAttribute(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendSetAttribute(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendFinalize(h) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL) ==
            CUDNN_STATUS_SUCCESS) {
      if (n > CFGS) n = CFGS;
      int made = 0;
      while (made < n && cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[made]) == CUDNN_STATUS_SUCCESS)
        made++;
      if (made == n && n > 0 &&
          cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfg) !=
              CUDNN_STATUS_SUCCESS)
        got = 0;
      for (int64_t i = 0; i < got && !p->plan && p->ndesc < STATS_DESCS; i++) {
        bdesc plan = NULL;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) break;
        int64_t ws = 0, k = 0;
        if (cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->h) ==
                CUDNN_STATUS_SUCCESS &&
            cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &cfg[i]) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS &&
            cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &k, &ws) ==
                CUDNN_STATUS_SUCCESS) {
          p->plan = plan, p->ws = ws;
          p->desc[p->ndesc++] = cfg[i]; /* kept with the plan */
          cfg[i] = NULL;
        } else {
          cudnnBackendDestroyDescriptor(plan);
        }
      }
      for (int i = 0; i < made; i++)
        if (cfg[i]) cudnnBackendDestroyDescriptor(cfg[i]);
    }
    cudnnBackendDestroyDescriptor(h);
  }
  char drop[8];
  cudnnGetLastErrorString(drop, sizeof drop); /* a refused graph or config is an answer, not a later call's error */
}

static lam_status stats_plan_of(cudnn_state *c, const lam_conv_geom *g, const lam_conv_geom *gp, int OC, int B,
                                stats_plan **out) {
  for (int i = 0; i < c->nstats; i++) {
    stats_plan *p = &c->stats[i];
    if (!memcmp(&p->g, g, sizeof *g) && p->OC == OC && p->B == B) {
      *out = p;
      return LAM_OK;
    }
  }
  const int slot = c->nstats < CONV_CACHE ? c->nstats++ : (c->next_stats++ % CONV_CACHE);
  stats_plan *p = &c->stats[slot];
  stats_plan_free(p);
  memset(p, 0, sizeof *p);
  p->g = *g, p->OC = OC, p->B = B;
  stats_plan_build(c, p, gp);
  *out = p;
  return LAM_OK;
}

static lam_status stats_execute(cudnn_state *c, const stats_plan *p, const void *x, const void *W, void *y,
                                float *sums, void *ws) {
  bdesc v = NULL;
  void *ptrs[5] = {(void *)x, (void *)W, y, sums, sums + p->OC};
  const int64_t uids[5] = {UID_X, UID_W, UID_Y, UID_SUM, UID_SQ};
  CUDNN_TRY(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &v));
  cudnnStatus_t s = cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 5, uids);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 5, ptrs);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendFinalize(v);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendExecute(c->h, p->plan, v);
  cudnnBackendDestroyDescriptor(v);
  return cudnn_status(s, "cudnnBackendExecute (conv + GenStats)", __FILE__, __LINE__);
}

#endif

int cuda_conv_stats_one_pass(lam_fmt f) {
#ifdef LAMINA_WITH_CUDNN
  return f.nhwc && f.dt == LAM_DT_F16;
#else
  (void)f;
  return 0;
#endif
}

/* The two steps: the conv, then BatchNorm's statistics pass (norm.cu) over its output. */
static lam_status conv_then_sums(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *x,
                                 const void *W, void *y, float *sums, void *ws, size_t ws_bytes) {
  LAM_TRY(cuda_conv2d_fwd(ctx, f, g, OC, B, x, W, y, ws, ws_bytes));
  return nhwc_bn_sums(ctx, f, (size_t)B * g->OH * g->OW, OC, y, NULL, NULL, NULL, sums, NULL, NULL);
}

lam_status cuda_conv2d_fwd_stats(lam_ctx *ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *x,
                                 const void *W, void *y, float *sums, int force, void *ws, size_t ws_bytes, int *one_pass) {
  *one_pass = 0;
  if (!f.nhwc) return LAM_FAIL(LAM_ERR_UNSUPPORTED, "conv2d_fwd_stats: runs on NHWC activations on CUDA");
#ifdef LAMINA_WITH_CUDNN
  cudnn_state *c = cuda_conv_stats_one_pass(f) && OC % 8 == 0 ? cudnn_of(ctx) : NULL;
  if (c && aligned16(y) && aligned16(sums) && aligned16(sums + OC)) {
    cuda_state *st = cuda_st(ctx);
    const lam_conv_geom gp = cudnn_geom(f, g);
    const size_t cw = cudnn_part(f, g, OC, B, ws_bytes);
    stats_plan *p;
    LAM_TRY(stats_plan_of(c, g, &gp, OC, B, &p));
    const int measure = p->plan && !p->choice && !force && !st->capturing;
    if (p->plan && (size_t)p->ws <= cw && (force || p->choice == 1 || measure)) {
      const conv_ws parts = ws_parts(f, g, OC, ws, cw);
      const void *Wc, *xc;
      LAM_TRY(filter_in(ctx, f, g, OC, W, &parts, &Wc));
      LAM_TRY(input_in(ctx, f, g, B, x, &parts, &xc));
      if (!aligned16(xc) || !aligned16(Wc)) return conv_then_sums(ctx, f, g, OC, B, x, W, y, sums, ws, ws_bytes);
      if (measure) { /* once per geometry: each route warmed, then 5 calls of each timed back to back */
        cudaEvent_t e[3] = {NULL, NULL, NULL};
        for (int i = 0; i < 3; i++) CUDA_TRY(cudaEventCreate(&e[i]));
        lam_status s = stats_execute(c, p, xc, Wc, y, sums, ws);
        if (s == LAM_OK) s = conv_then_sums(ctx, f, g, OC, B, x, W, y, sums, ws, ws_bytes);
        if (s == LAM_OK) s = cuda_status(cudaEventRecord(e[0], st->stream), "cudaEventRecord", __FILE__, __LINE__);
        for (int i = 0; i < 5 && s == LAM_OK; i++) s = stats_execute(c, p, xc, Wc, y, sums, ws);
        if (s == LAM_OK) s = cuda_status(cudaEventRecord(e[1], st->stream), "cudaEventRecord", __FILE__, __LINE__);
        for (int i = 0; i < 5 && s == LAM_OK; i++) s = conv_then_sums(ctx, f, g, OC, B, x, W, y, sums, ws, ws_bytes);
        if (s == LAM_OK) s = cuda_status(cudaEventRecord(e[2], st->stream), "cudaEventRecord", __FILE__, __LINE__);
        if (s == LAM_OK) s = cuda_status(cudaEventSynchronize(e[2]), "timing conv + GenStats", __FILE__, __LINE__);
        if (s == LAM_OK) {
          cudaEventElapsedTime(&p->ms[0], e[0], e[1]);
          cudaEventElapsedTime(&p->ms[1], e[1], e[2]);
          p->choice = p->ms[0] < 0.98f * p->ms[1] ? 1 : 2; /* by a margin: a tie at a small shape stays two steps */
        }
        for (int i = 0; i < 3; i++) cudaEventDestroy(e[i]);
        LAM_TRY(s);
        if (p->choice == 2) return conv_then_sums(ctx, f, g, OC, B, x, W, y, sums, ws, ws_bytes);
        LAM_TRY(filter_in(ctx, f, g, OC, W, &parts, &Wc)); /* the two steps laid them out again, alike */
        LAM_TRY(input_in(ctx, f, g, B, x, &parts, &xc));
      }
      LAM_TRY(stats_execute(c, p, xc, Wc, y, sums, ws));
      cuda_mark_written(st->stream, y, (size_t)B * g->OH * g->OW * OC * lam_dt_size(f.dt));
      cuda_mark_written(st->stream, sums, 2 * (size_t)OC * sizeof(float));
      *one_pass = 1;
      return cuda_after_launch(st, st->stream, "cudnnBackendExecute (conv + GenStats)", __FILE__, __LINE__);
    }
  }
#endif
  (void)force;
  return conv_then_sums(ctx, f, g, OC, B, x, W, y, sums, ws, ws_bytes);
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

/* ---- im2col, col2im and the layout changes with bias ---- */

static dim3 grid_2d(size_t n, int y) {
  size_t b = (n + NT - 1) / NT;
  return dim3((unsigned)(b < 65535 * 16 ? (b ? b : 1) : 65535 * 16), (unsigned)y);
}

/* Stores and loads of float or 16-bit data, computed in fp32. */
template <typename T> __device__ inline void put(T *p, float v) { *p = tfrom<T>(v); }
__device__ inline float get(const float *p) { return __ldg(p); }
__device__ inline float get(const lam_bf16 *p) { return __bfloat162float(__ldg(p)); }
__device__ inline float get(const lam_f16 *p) { return __half2float(__ldg(p)); }

/* Threads for one image plane of P elements: a multiple of 32, at most NT (the rest loop). */
static unsigned plane_threads(size_t P) {
  size_t t = (P + 31) / 32 * 32;
  return (unsigned)(t < NT ? t : NT);
}

/* A grid of (sample, channel) planes: B in gridDim.x (any int fits), C in gridDim.y. */
static lam_status check_planes(const char *what, int C) {
  if (C > 65535)
    return lam_fail_at(LAM_ERR_UNSUPPORTED, __FILE__, __LINE__, "%s: %d channels is beyond this kernel's grid (65535)",
                       what, C);
  return LAM_OK;
}

/* Block row c, one thread per column j of channel c's K*K rows of col: it works out its (b, oh, ow)
 * once and writes K*K entries, consecutive threads consecutive columns, so each row's writes coalesce.
 * KT > 0 fixes K at compile time: all K*K loads are issued before the first store (v3 loaded and
 * stored in turn, and with a run-time K each store waited for its load: latency-bound, 33 us at batch
 * 512 on the H200). (v1 took one element per thread and paid six divisions each; v2 one column per
 * thread, too few threads at small batches.) A grid of (sample, channel) planes with two divisions a
 * thread, as col2im has, was slower here: 28.6 against 23.5 us at batch 512 in fp32. */
template <int KT, typename T>
__global__ void im2col_kernel(lam_conv_geom g, int B, const float *__restrict__ x, T *__restrict__ col) {
  const int K = KT ? KT : g.K, c = blockIdx.y;
  const unsigned P = (unsigned)(g.OH * g.OW), ncols = (unsigned)B * P;
  for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < ncols; j += gridDim.x * blockDim.x) {
    unsigned b = j / P, p = j % P;
    int oh = (int)p / g.OW, ow = (int)p % g.OW, ih0 = oh * g.stride - g.pad, iw0 = ow * g.stride - g.pad;
    const float *xc = x + ((size_t)b * g.C + c) * g.H * g.W;
    T *dst = col + (size_t)c * K * K * ncols + j;
    if (KT) {
      float v[KT ? KT * KT : 1];
#pragma unroll
      for (int t = 0; t < (KT ? KT * KT : 1); t++) {
        int ih = ih0 + t / K, iw = iw0 + t % K;
        v[t] = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W ? __ldg(xc + ih * g.W + iw) : 0.0f;
      }
#pragma unroll
      for (int t = 0; t < (KT ? KT * KT : 1); t++) put(dst + (size_t)t * ncols, v[t]);
    } else {
      for (int ki = 0; ki < K; ki++) {
        int ih = ih0 + ki;
        bool row_in = ih >= 0 && ih < g.H;
        for (int kj = 0; kj < K; kj++, dst += ncols) {
          int iw = iw0 + kj;
          put(dst, row_in && iw >= 0 && iw < g.W ? __ldg(xc + ih * g.W + iw) : 0.0f);
        }
      }
    }
  }
}

template <typename T> static void im2col_launch(cuda_state *st, const lam_conv_geom *g, int B, const float *x, T *col) {
  dim3 grid = grid_2d((size_t)B * g->OH * g->OW, g->C);
  if (g->K == 3) im2col_kernel<3, T><<<grid, NT, 0, st->stream>>>(*g, B, x, col);
  else im2col_kernel<0, T><<<grid, NT, 0, st->stream>>>(*g, B, x, col);
}

lam_status cuda_im2col(lam_ctx *ctx, const lam_conv_geom *g, int B, const float *x, void *col, int dt) {
  cuda_state *st = cuda_st(ctx);
  LAM_TRY(check_grid("im2col", (size_t)B * g->OH * g->OW, g->C));
  LAM_DT_DISPATCH(dt, T, im2col_launch(st, g, B, x, (T *)col));
  LAUNCH_CHECK(st, "im2col_kernel");
  return LAM_OK;
}

/* Block (b, c): sample b's channel c, one thread per input element (two divisions each): the sum of
 * every column entry that came from it (a gather: no atomics, the same order every run), written (or,
 * with acc, added: the caller never zeroes dx first). Stride 1 with KT > 0: the K*K loads unrolled and in
 * flight together. (v1 had a run-time K, so each load waited for the one before: 68 us at batch 512 on
 * the H200; v2 fixed K but took four divisions a thread over a (channel, b*H*W) grid: 33 us.) */
template <int KT, typename T>
__global__ void col2im_kernel(lam_conv_geom g, int B, const T *__restrict__ col, int acc, float *__restrict__ dx) {
  const int K = KT ? KT : g.K, c = blockIdx.y, P = g.OH * g.OW, HW = g.H * g.W;
  const unsigned b = blockIdx.x;
  const size_t ncols = (size_t)B * P;
  const T *cb = col + (size_t)c * K * K * ncols + (size_t)b * P;
  float *out = dx + ((size_t)b * g.C + c) * HW;
  for (int r = threadIdx.x; r < HW; r += blockDim.x) {
    int ih = r / g.W, iw = r % g.W;
    float sum = 0.0f;
    if (g.stride == 1) { /* the usual case, without the divisions */
#pragma unroll
      for (int ki = 0; ki < K; ki++) {
        int oh = ih + g.pad - ki;
#pragma unroll
        for (int kj = 0; kj < K; kj++) {
          int ow = iw + g.pad - kj;
          if (oh >= 0 && oh < g.OH && ow >= 0 && ow < g.OW) sum += get(cb + (size_t)(ki * K + kj) * ncols + oh * g.OW + ow);
        }
      }
    } else {
      for (int ki = 0; ki < K; ki++) {
        int t = ih + g.pad - ki;
        if (t < 0 || t % g.stride) continue;
        int oh = t / g.stride;
        if (oh >= g.OH) continue;
        for (int kj = 0; kj < K; kj++) {
          int u = iw + g.pad - kj;
          if (u < 0 || u % g.stride) continue;
          int ow = u / g.stride;
          if (ow < g.OW) sum += get(cb + (size_t)(ki * K + kj) * ncols + oh * g.OW + ow);
        }
      }
    }
    out[r] = acc ? out[r] + sum : sum;
  }
}

template <typename T>
static void col2im_launch(cuda_state *st, const lam_conv_geom *g, int B, const T *col, int acc, float *dx) {
  dim3 grid(B, g->C);
  unsigned nt = plane_threads((size_t)g->H * g->W);
  if (g->K == 3 && g->stride == 1) col2im_kernel<3, T><<<grid, nt, 0, st->stream>>>(*g, B, col, acc, dx);
  else col2im_kernel<0, T><<<grid, nt, 0, st->stream>>>(*g, B, col, acc, dx);
}

lam_status cuda_col2im(lam_ctx *ctx, const lam_conv_geom *g, int B, const void *col, int dt, int accumulate, float *dx) {
  cuda_state *st = cuda_st(ctx);
  LAM_TRY(check_planes("col2im", g->C));
  LAM_DT_DISPATCH(dt, T, col2im_launch(st, g, B, (const T *)col, accumulate, dx));
  LAUNCH_CHECK(st, "col2im_kernel");
  return LAM_OK;
}

__global__ void cbp_to_bcp_kernel(int B, int C, int P, const float *src, const float *bias, float *dst) {
  size_t total = (size_t)B * C * P;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int p = (int)(i % P), c = (int)(i / P % C), b = (int)(i / ((size_t)P * C));
    dst[i] = src[(size_t)c * B * P + (size_t)b * P + p] + (bias ? bias[c] : 0.0f);
  }
}

lam_status cuda_cbp_to_bcp(lam_ctx *ctx, int B, int C, int P, const float *src, const float *bias, float *dst) {
  cuda_state *st = cuda_st(ctx);
  cbp_to_bcp_kernel<<<blocks_for((size_t)B * C * P), NT, 0, st->stream>>>(B, C, P, src, bias, dst);
  LAUNCH_CHECK(st, "cbp_to_bcp_kernel");
  return LAM_OK;
}

__global__ void bcp_to_cbp_kernel(int B, int C, int P, const float *src, float *dst) {
  size_t total = (size_t)B * C * P;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int p = (int)(i % P), c = (int)(i / P % C), b = (int)(i / ((size_t)P * C));
    dst[(size_t)c * B * P + (size_t)b * P + p] = src[i];
  }
}

/* The sum of a range of a row, by one block: strided over the threads, then a tree in shared memory. */
template <typename T> __device__ float block_range_sum(const T *r, int n) {
  __shared__ float part[NT];
  float s = 0.0f;
  for (int j = threadIdx.x; j < n; j += NT) s += get(r + j);
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = NT / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  return part[0];
}

/* One block per row: the sum of a row of (rows, cols), added to out[row]. */
template <typename T> __global__ void row_sum_kernel(int cols, const T *src, float *out) {
  float s = block_range_sum(src + (size_t)blockIdx.x * cols, cols);
  if (threadIdx.x == 0) out[blockIdx.x] += s;
}

/* Few long rows (a conv's bias gradient: 64 rows of B*P): block (k, row) sums chunk k of its row into
 * part (row, k); then one thread per row adds the chunks up in order. Deterministic, like the above. */
template <typename T> __global__ void row_sum_part_kernel(int cols, int chunk, const T *src, float *part) {
  int c0 = blockIdx.x * chunk, n = cols - c0 < chunk ? cols - c0 : chunk;
  float s = block_range_sum(src + (size_t)blockIdx.y * cols + c0, n);
  if (threadIdx.x == 0) part[(size_t)blockIdx.y * gridDim.x + blockIdx.x] = s;
}

__global__ void row_sum_final_kernel(int rows, int nchunks, const float *part, float *out) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float s = 0.0f;
  for (int k = 0; k < nchunks; k++) s += part[(size_t)r * nchunks + k];
  out[r] += s;
}

/* out[r] += the sum of row r of src (rows, cols): one block a row when there are enough rows (or no
 * room for the partial sums), else chunks of rows over many blocks. Every caller goes through here, so
 * the plain and the fused bias gradients are summed alike. */
template <typename T> static lam_status row_sum(cuda_state *st, int rows, int cols, const T *src, float *out) {
  int nchunks = (cols + ROW_SUM_CHUNK - 1) / ROW_SUM_CHUNK;
  if (nchunks > ROW_SUM_MAX_CHUNKS) nchunks = ROW_SUM_MAX_CHUNKS;
  if (rows >= 128 || nchunks < 2 || (size_t)rows * nchunks > ROW_SUM_PART_FLOATS) {
    row_sum_kernel<T><<<rows, NT, 0, st->stream>>>(cols, src, out);
    LAUNCH_CHECK(st, "row_sum_kernel");
    return LAM_OK;
  }
  int chunk = (cols + nchunks - 1) / nchunks;
  nchunks = (cols + chunk - 1) / chunk;
  row_sum_part_kernel<T><<<dim3(nchunks, rows), NT, 0, st->stream>>>(cols, chunk, src, st->rowsum_part);
  LAUNCH_CHECK(st, "row_sum_part_kernel");
  row_sum_final_kernel<<<(rows + NT - 1) / NT, NT, 0, st->stream>>>(rows, nchunks, st->rowsum_part, out);
  LAUNCH_CHECK(st, "row_sum_final_kernel");
  return LAM_OK;
}

lam_status cuda_bcp_to_cbp(lam_ctx *ctx, int B, int C, int P, const float *src, float *dst, float *bias_grad) {
  cuda_state *st = cuda_st(ctx);
  bcp_to_cbp_kernel<<<blocks_for((size_t)B * C * P), NT, 0, st->stream>>>(B, C, P, src, dst);
  LAUNCH_CHECK(st, "bcp_to_cbp_kernel");
  if (bias_grad) {
    LAM_TRY(row_sum(st, C, B * P, dst, bias_grad));
  }
  return LAM_OK;
}

/* ---- a conv's per-channel bias, NCHW float32 ---- */

template <typename I, int V> __global__ void channel_bias_fwd_kernel(I n, I PV, I C, float *y, const float *bias) {
  GRID_STRIDE(I, i, n) {
    const float b = __ldg(bias + i / PV % C);
    float v[V];
    vload<V>(v, y, i);
#pragma unroll
    for (int q = 0; q < V; q++) v[q] += b;
    vstore<V>(y, i, v);
  }
}

static lam_status nchw_channel_bias_fwd(lam_ctx *ctx, int B, int C, int P, float *y, const float *bias) {
  cuda_state *st = cuda_st(ctx);
  size_t n = (size_t)B * C * P;
  LAUNCH_ROWWISE(st, channel_bias_fwd_kernel, P % 4 == 0 && aligned16(y), n, P, C, y, bias);
  return LAM_OK;
}

/* One block per channel (blockIdx.x): db[c] += its sum. */
template <int V> __global__ void channel_sum_kernel(red_args r, float *db) {
  const int c = blockIdx.x;
  float2 t = thread_sums<RED_SUM, V>(r, c, 0, r.B);
  float s = block_sum2(t.x, 0.0f).x;
  if (threadIdx.x == 0) db[c] += s;
}

__global__ void channel_sum_final_kernel(int C, int S, const float *part, float *db) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  double a, b;
  part_total(part, c, S, &a, &b);
  db[c] += (float)a;
}

static lam_status nchw_channel_bias_bwd(lam_ctx *ctx, int B, int C, int P, const float *dy, float *db) {
  cuda_state *st = cuda_st(ctx);
  if (B <= 0 || C <= 0 || P <= 0) return LAM_OK;
  LAM_TRY(check_channel_size("channel_bias_bwd", B, P));
  red_args r = {B, C, P, NULL, dy, NULL, NULL, NULL, NULL, NULL, 0.0f};
  int S = channel_splits(B, C, P, 2, 0);
  if (S == 1) {
    if (red_vec(P, dy, NULL)) channel_sum_kernel<4><<<C, RED_NT, 0, st->stream>>>(r, db);
    else channel_sum_kernel<1><<<C, RED_NT, 0, st->stream>>>(r, db);
    LAUNCH_CHECK(st, "channel_sum_kernel");
    return LAM_OK;
  }
  channel_part_launch<RED_SUM>(st, r, S, st->rowsum_part);
  LAUNCH_CHECK(st, "channel_part_kernel<sum>");
  channel_sum_final_kernel<<<(C + NT - 1) / NT, NT, 0, st->stream>>>(C, S, st->rowsum_part, db);
  LAUNCH_CHECK(st, "channel_sum_final_kernel");
  return LAM_OK;
}

/* ---- a conv's per-channel bias, NHWC: y += bias[c]; db[c] += the sum of dy over the rows ---- */

template <typename T, int V>
__global__ void chan_bias_kernel(size_t N, int C, int TX, int TY, T *y, const float *__restrict__ bias) {
  const int CV = C / V;
  size_t r0, r1;
  int ty;
  const int cv = chan_thread(N, CV, TX, TY, &r0, &r1, &ty);
  if (cv < 0) return;
  float bv[V];
#pragma unroll
  for (int q = 0; q < V; q++) bv[q] = bias[cv * V + q];
  for (size_t row = r0 + ty; row < r1; row += TY) {
    float v[V];
    tload<T, V>(v, y, row * CV + cv);
#pragma unroll
    for (int q = 0; q < V; q++) v[q] += bv[q];
    tstore<T, V>(y, row * CV + cv, v);
  }
}

template <typename T, int V> static void chan_bias_launch(cuda_state *st, size_t N, int C, void *y, const float *bias) {
  chan_grid g = chan_grid_for(N, C / V, 4096, 16, 65535);
  chan_bias_kernel<T, V><<<dim3(g.S, g.groups), NT, 0, st->stream>>>(N, C, g.TX, g.TY, (T *)y, bias);
}

lam_status nhwc_channel_bias_fwd(lam_ctx *ctx, lam_fmt f, size_t N, int C, void *y, const float *bias) {
  cuda_state *st = cuda_st(ctx);
  if (!N || C <= 0) return LAM_OK;
  NHWC_DISPATCH(f, vec_ok(f.dt, C, y), chan_bias_launch, st, N, C, y, bias);
  LAUNCH_CHECK(st, "chan_bias_kernel");
  return LAM_OK;
}

__global__ void nred_sum_final_kernel(int C, int S, const float *part, float *db) {
  FINAL_CHANNEL(c, C);
  double a, b;
  nred_total(part, S, c, &a, &b);
  if (threadIdx.x % 32 == 0) db[c] += (float)a;
}

template <typename T, int V> static lam_status chan_sum_launch(cuda_state *st, const nred_args &r, float *db) {
  chan_grid g;
  LAM_TRY(nred_grid("channel_bias_bwd", r.N, r.C, V, &g));
  LAM_TRY((nred_launch<T, V, NR_SUM, BN_ACT_NONE>(st, r, g)));
  nred_sum_final_kernel<<<final_blocks(r.C), 32 * FINAL_WARPS, 0, st->stream>>>(r.C, g.S, st->nhwc_part, db);
  LAUNCH_CHECK(st, "nred_sum_final_kernel");
  return LAM_OK;
}

lam_status nhwc_channel_bias_bwd(lam_ctx *ctx, lam_fmt f, size_t N, int C, const void *dy, float *db) {
  cuda_state *st = cuda_st(ctx);
  if (!N || C <= 0) return LAM_OK;
  nred_args r = {N, C, NULL, dy, NULL, NULL, NULL, NULL, NULL, 0.0f};
  lam_status s = LAM_OK;
  NHWC_DISPATCH(f, vec_ok(f.dt, C, dy), s = chan_sum_launch, st, r, db);
  return s;
}

/* The per-channel bias by format: NCHW float32 runs the NCHW kernels above, NHWC (and a flat tensor, P = 1, which
 * lies the same in both) the NHWC ones. */

lam_status cuda_channel_bias_fwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, void *y, const float *bias) {
  if (as_nhwc(f, P)) return nhwc_channel_bias_fwd(ctx, f, (size_t)B * P, C, y, bias);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("channel_bias_fwd");
  return nchw_channel_bias_fwd(ctx, B, C, P, (float *)y, bias);
}
lam_status cuda_channel_bias_bwd(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *dy, float *db) {
  if (as_nhwc(f, P)) return nhwc_channel_bias_bwd(ctx, f, (size_t)B * P, C, dy, db);
  if (f.dt != LAM_DT_F32) return nchw_bf16_unsupported("channel_bias_bwd");
  return nchw_channel_bias_bwd(ctx, B, C, P, (const float *)dy, db);
}

/* ---- fused conv -> relu -> maxpool ---- */

/* Block row c, one thread per pooled output (b, ph, pw) of channel c: the K x K window of G (C, B*H*W)
 * plus the bias, its first maximum (NaN wins, as maxpool_fwd), relu'd. PK > 0 fixes the window at
 * compile time, so its loads are in flight together (v1 had a run-time K, 64-bit index arithmetic and
 * one load at a time: 13 us at batch 512 on the H200). */
template <int PK>
__global__ void conv_pool_fwd_kernel(lam_pool_geom g, int B, const float *__restrict__ G, const float *__restrict__ bias,
                                     float *__restrict__ y, int32_t *__restrict__ arg) {
  const int K = PK ? PK : g.K, c = blockIdx.y;
  const unsigned OP = (unsigned)(g.OH * g.OW), HW = (unsigned)(g.H * g.W), n = (unsigned)B * OP;
  const float bc = bias ? __ldg(bias + c) : 0.0f; /* + 0 leaves every value (and the max and relu) as it is */
  for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
    unsigned b = j / OP, k = j % OP;
    int oh = (int)k / g.OW, ow = (int)k % g.OW;
    const float *plane = G + ((size_t)c * B + b) * HW;
    int best = oh * g.stride * g.W + ow * g.stride;
    float v[PK ? PK * PK : 1];
    if (PK) {
#pragma unroll
      for (int t = 0; t < (PK ? PK * PK : 1); t++) v[t] = __ldg(plane + best + (t / K) * g.W + t % K);
    }
    float m = (PK ? v[0] : plane[best]) + bc;
    for (int a = 0; a < K; a++)
      for (int e = 0; e < K; e++) {
        int idx = (oh * g.stride + a) * g.W + ow * g.stride + e;
        float x = (PK ? v[a * K + e] : plane[idx]) + bc;
        if (x > m || x != x) m = x, best = idx;
      }
    size_t o = ((size_t)b * g.C + c) * OP + k;
    y[o] = lam_relu(m);
    arg[o] = best;
  }
}

lam_status cuda_conv_pool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *G, const float *bias, float *y,
                              int32_t *arg) {
  cuda_state *st = cuda_st(ctx);
  size_t n = (size_t)B * g->OH * g->OW;
  LAM_TRY(check_grid("conv_pool_fwd", (size_t)B * g->H * g->W, g->C));
  if (g->K == 2) conv_pool_fwd_kernel<2><<<grid_2d(n, g->C), NT, 0, st->stream>>>(*g, B, G, bias, y, arg);
  else conv_pool_fwd_kernel<0><<<grid_2d(n, g->C), NT, 0, st->stream>>>(*g, B, G, bias, y, arg);
  LAUNCH_CHECK(st, "conv_pool_fwd_kernel");
  return LAM_OK;
}

/* Block row c, one thread per pooled output (b, ph, pw) of channel c: its argmax, value and gradient
 * are loaded together, then it writes its window of dG (C, B*H*W): the gradient at the argmax if the
 * pooled value passed the relu, zeros elsewhere; on the last pooled row or column also the rows and
 * columns no window covers. (v1 took one element of dG per thread, whose three dependent loads waited
 * in turn: latency-bound, 39 us at batch 512 on the H200.) PK > 0 fixes the window at compile time.
 * One thread per element of dG over (sample, channel) planes (coalesced stores, loads together) was
 * tried too: 22.5 against 21.1 us at batch 512. */
template <int PK, typename T>
__global__ void conv_pool_bwd_kernel(lam_pool_geom g, int B, const float *__restrict__ dy, const float *__restrict__ y,
                                     const int32_t *__restrict__ arg, T *__restrict__ dG) {
  const int K = PK ? PK : g.K, c = blockIdx.y;
  const unsigned OP = (unsigned)(g.OH * g.OW), HW = (unsigned)(g.H * g.W), n = (unsigned)B * OP;
  for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
    unsigned b = j / OP, k = j % OP;
    int ph = (int)k / g.OW, pw = (int)k % g.OW;
    size_t o = ((size_t)b * g.C + c) * OP + k;
    int a = __ldg(arg + o);
    float yv = __ldg(y + o), gv = __ldg(dy + o);
    int hit = lam_relu_passed(yv) ? a : -1;
    T *plane = dG + ((size_t)c * B + b) * HW;
    int h0 = ph * K, w0 = pw * K, h1 = ph == g.OH - 1 ? g.H : h0 + K, w1 = pw == g.OW - 1 ? g.W : w0 + K;
    if (PK && h1 == h0 + K && w1 == w0 + K) {
#pragma unroll
      for (int t = 0; t < (PK ? PK * PK : 1); t++) {
        int idx = (h0 + t / K) * g.W + w0 + t % K;
        put(plane + idx, idx == hit ? gv : 0.0f);
      }
    } else {
      for (int h = h0; h < h1; h++)
        for (int w = w0; w < w1; w++) {
          int idx = h * g.W + w;
          put(plane + idx, idx == hit ? gv : 0.0f);
        }
    }
  }
}

template <typename T>
static lam_status conv_pool_bwd_launch(cuda_state *st, const lam_pool_geom *g, int B, const float *dy, const float *y,
                                       const int32_t *arg, T *dG, float *db) {
  size_t n = (size_t)B * g->OH * g->OW, P = (size_t)g->H * g->W;
  if (g->K == 2) conv_pool_bwd_kernel<2, T><<<grid_2d(n, g->C), NT, 0, st->stream>>>(*g, B, dy, y, arg, dG);
  else conv_pool_bwd_kernel<0, T><<<grid_2d(n, g->C), NT, 0, st->stream>>>(*g, B, dy, y, arg, dG);
  LAUNCH_CHECK(st, "conv_pool_bwd_kernel");
  if (!db) return LAM_OK;
  return row_sum(st, g->C, B * (int)P, dG, db); /* as bcp_to_cbp's bias gradient */
}

lam_status cuda_conv_pool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, const float *y,
                              const int32_t *arg, void *dG, int dt, float *db) {
  cuda_state *st = cuda_st(ctx);
  LAM_TRY(check_grid("conv_pool_bwd", (size_t)B * g->H * g->W, g->C));
  LAM_DT_DISPATCH(dt, T, return conv_pool_bwd_launch(st, g, B, dy, y, arg, (T *)dG, db));
  return LAM_OK; /* not reached */
}

/* ---- the direct first-layer block: conv -> relu -> maxpool without im2col and GEMMs ---- */

/* CT, KT > 0: the conv's C and K fixed at compile time (the loops unroll, the index arithmetic folds);
 * 0: read from cg. */
template <int CT, int KT>
__device__ inline float direct_conv_at(const lam_conv_geom &cg, const float *xb, const float *w, float bias, int h,
                                       int wc) {
  const int C = CT ? CT : cg.C, K = KT ? KT : cg.K;
  float acc = bias;
#pragma unroll
  for (int c = 0; c < C; c++)
#pragma unroll
    for (int kh = 0; kh < K; kh++) {
      int ih = h * cg.stride - cg.pad + kh;
#pragma unroll
      for (int kw = 0; kw < K; kw++) {
        int iw = wc * cg.stride - cg.pad + kw;
        float v = ih >= 0 && ih < cg.H && iw >= 0 && iw < cg.W ? __ldg(xb + ((size_t)c * cg.H + ih) * cg.W + iw) : 0.0f;
        acc = fmaf(v, __ldg(w + (c * K + kh) * K + kw), acc);
      }
    }
  return acc;
}

/* One thread per pooled output (B, OC, OH, OW): its window's conv outputs computed from x directly. */
template <int CT, int KT>
__global__ void conv_pool_direct_fwd_kernel(lam_conv_geom cg, lam_pool_geom pg, int B, const float *x, const float *W,
                                            const float *bias, float *y, int32_t *arg) {
  size_t total = (size_t)B * pg.C * pg.OH * pg.OW;
  int taps = (CT ? CT : cg.C) * (KT ? KT : cg.K) * (KT ? KT : cg.K);
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int pw = (int)(i % pg.OW), ph = (int)(i / pg.OW % pg.OH), oc = (int)(i / ((size_t)pg.OW * pg.OH) % pg.C);
    size_t b = i / ((size_t)pg.OW * pg.OH * pg.C);
    const float *xb = x + b * cg.C * cg.H * cg.W, *w = W + (size_t)oc * taps;
    float bc = __ldg(bias + oc);
    int h0 = ph * pg.stride, w0 = pw * pg.stride, best = h0 * pg.W + w0;
    float m = direct_conv_at<CT, KT>(cg, xb, w, bc, h0, w0);
    for (int a = 0; a < pg.K; a++)
      for (int e = 0; e < pg.K; e++) {
        if (!a && !e) continue;
        float v = direct_conv_at<CT, KT>(cg, xb, w, bc, h0 + a, w0 + e);
        if (v > m || v != v) m = v, best = (h0 + a) * pg.W + w0 + e;
      }
    y[i] = lam_relu(m);
    arg[i] = best;
  }
}

/* The MNIST-sized first layer (C = 1, K = 3, stride 1, no padding, pool 2): one thread per pooled
 * position and group of DIRECT_OCG output channels (blockIdx.y) computes them from one 4 x 4 patch of
 * the input held in registers, the weights in shared memory: the input is read once per group instead
 * of once per channel. The conv values and their order of summation are the generic kernel's, so the
 * result is the same bit for bit. (v1 took every channel in one thread: a third of a wave at batch
 * 512, 15 us on the H200.) */
#define DIRECT_OCG 8
__global__ void conv_pool_direct_fwd_c1k3_kernel(lam_conv_geom cg, lam_pool_geom pg, int B, const float *__restrict__ x,
                                                 const float *__restrict__ W, const float *__restrict__ bias,
                                                 float *__restrict__ y, int32_t *__restrict__ arg) {
  __shared__ float w_s[DIRECT_OCG * 9], b_s[DIRECT_OCG];
  const int oc0 = blockIdx.y * DIRECT_OCG, noc = pg.C - oc0 < DIRECT_OCG ? pg.C - oc0 : DIRECT_OCG;
  for (int i = threadIdx.x; i < noc * 9; i += blockDim.x) w_s[i] = W[oc0 * 9 + i];
  for (int i = threadIdx.x; i < noc; i += blockDim.x) b_s[i] = bias[oc0 + i];
  __syncthreads();
  const unsigned OP = (unsigned)(pg.OH * pg.OW), total = (unsigned)B * OP;
  for (unsigned q = blockIdx.x * blockDim.x + threadIdx.x; q < total; q += gridDim.x * blockDim.x) {
    unsigned b = q / OP, k = q % OP;
    int ph = (int)k / pg.OW, pw = (int)k % pg.OW, h0 = 2 * ph, w0 = 2 * pw;
    const float *xb = x + (size_t)b * cg.H * cg.W + h0 * cg.W + w0;
    float v[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
      for (int c = 0; c < 4; c++) v[r][c] = __ldg(xb + r * cg.W + c);
#pragma unroll 2
    for (int j = 0; j < noc; j++) {
      const float *w = w_s + j * 9;
      float m = 0.0f;
      int best = 0;
#pragma unroll
      for (int a = 0; a < 2; a++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float acc = b_s[j];
#pragma unroll
          for (int kh = 0; kh < 3; kh++)
#pragma unroll
            for (int kw = 0; kw < 3; kw++) acc = fmaf(v[a + kh][e + kw], w[kh * 3 + kw], acc);
          int idx = (h0 + a) * pg.W + w0 + e;
          if ((a == 0 && e == 0) || acc > m || acc != acc) m = acc, best = idx; /* first maximum, NaN wins */
        }
      size_t o = ((size_t)b * pg.C + oc0 + j) * OP + k;
      y[o] = lam_relu(m);
      arg[o] = best;
    }
  }
}

lam_status cuda_conv_pool_direct_fwd(lam_ctx *ctx, const lam_conv_geom *cg, const lam_pool_geom *pg, int B,
                                     const float *x, const float *W, const float *bias, float *y, int32_t *arg) {
  cuda_state *st = cuda_st(ctx);
  unsigned blocks = blocks_for((size_t)B * pg->C * pg->OH * pg->OW);
  size_t positions = (size_t)B * pg->OH * pg->OW;
  if (cg->C == 1 && cg->K == 3 && cg->stride == 1 && cg->pad == 0 && pg->K == 2 && pg->stride == 2 &&
      positions < (size_t)1 << 31) {
    int groups = (pg->C + DIRECT_OCG - 1) / DIRECT_OCG;
    LAM_TRY(check_grid("conv_pool_direct_fwd", positions, groups));
    conv_pool_direct_fwd_c1k3_kernel<<<grid_2d(positions, groups), NT, 0, st->stream>>>(*cg, *pg, B, x, W, bias, y, arg);
    LAUNCH_CHECK(st, "conv_pool_direct_fwd_c1k3_kernel");
    return LAM_OK;
  }
  if (cg->C == 1 && cg->K == 3) /* the MNIST-sized first layer, unrolled */
    conv_pool_direct_fwd_kernel<1, 3><<<blocks, NT, 0, st->stream>>>(*cg, *pg, B, x, W, bias, y, arg);
  else
    conv_pool_direct_fwd_kernel<0, 0><<<blocks, NT, 0, st->stream>>>(*cg, *pg, B, x, W, bias, y, arg);
  LAUNCH_CHECK(st, "conv_pool_direct_fwd_kernel");
  return LAM_OK;
}

/* Block (chunk, oc): the pooled outputs [chunk * CHUNK, +CHUNK) of channel oc (flattened over b and the
 * pooled plane) whose value passed the relu add g * x(tap) to each tap's sum and g to the bias's; the
 * block's sums go to work (oc, chunk, taps + 1), reduced in a fixed order. */
#define DIRECT_U 4
template <int CT, int KT, bool NOPAD>
__global__ void conv_pool_direct_bwd_kernel(lam_conv_geom cg, lam_pool_geom pg, int B, const float *x, const float *dy,
                                            const float *y, const int32_t *arg, float *work) {
  const int K = KT ? KT : cg.K, taps = (CT ? CT : cg.C) * K * K, oc = blockIdx.y, nchunks = gridDim.x;
  const unsigned OP = (unsigned)(pg.OH * pg.OW), n = (unsigned)B * OP; /* < 2^31: checked by the caller */
  float acc[LAM_DIRECT_TAPS + 1];
#pragma unroll
  for (int t = 0; t <= LAM_DIRECT_TAPS; t++) acc[t] = 0.0f;
  size_t q0 = (size_t)blockIdx.x * LAM_DIRECT_CHUNK, q1 = q0 + LAM_DIRECT_CHUNK < n ? q0 + LAM_DIRECT_CHUNK : n;
  /* A thread's outputs q, q + NT, ... are taken DIRECT_U at a time: their value, gradient and argmax
   * are loaded together, then their taps, then summed in the order of q, as one at a time would (v1
   * did one at a time, each load waiting for the one before: 50 us at batch 512 on the H200). */
  for (size_t qb = q0 + threadIdx.x; qb < q1; qb += (size_t)DIRECT_U * NT) {
    float yv[DIRECT_U], g[DIRECT_U];
    int a[DIRECT_U];
    size_t bq[DIRECT_U];
#pragma unroll
    for (int u = 0; u < DIRECT_U; u++) {
      size_t q = qb + (size_t)u * NT;
      yv[u] = 0.0f, g[u] = 0.0f, a[u] = 0, bq[u] = 0;
      if (q < q1) {
        unsigned b = (unsigned)q / OP;
        size_t o = ((size_t)b * pg.C + oc) * OP + (unsigned)q % OP;
        yv[u] = __ldg(y + o), g[u] = __ldg(dy + o), a[u] = __ldg(arg + o), bq[u] = b;
      }
    }
#pragma unroll
    for (int u = 0; u < DIRECT_U; u++) {
      if (!lam_relu_passed(yv[u])) continue; /* also the slots past q1 (yv 0) */
      int h = a[u] / pg.W, wc = a[u] % pg.W;
      const float *xb = x + bq[u] * cg.C * cg.H * cg.W;
      acc[LAM_DIRECT_TAPS] += g[u];
      if (NOPAD) { /* every tap of a conv output lies inside the input: loads at fixed offsets, no checks */
        const float *xp = xb + h * cg.stride * cg.W + wc * cg.stride;
#pragma unroll
        for (int t = 0; t < LAM_DIRECT_TAPS; t++)
          if (t < taps) acc[t] = fmaf(g[u], __ldg(xp + (t / (K * K) * cg.H + t / K % K) * cg.W + t % K), acc[t]);
      } else {
#pragma unroll
        for (int t = 0; t < LAM_DIRECT_TAPS; t++) {
          if (t < taps) {
            int c = t / (K * K), kh = t / K % K, kw = t % K;
            int ih = h * cg.stride - cg.pad + kh, iw = wc * cg.stride - cg.pad + kw;
            if (ih >= 0 && ih < cg.H && iw >= 0 && iw < cg.W)
              acc[t] = fmaf(g[u], __ldg(xb + ((size_t)c * cg.H + ih) * cg.W + iw), acc[t]);
          }
        }
      }
    }
  }
  __shared__ float part[NT / 32][LAM_DIRECT_TAPS + 1];
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int t = 0; t <= LAM_DIRECT_TAPS; t++) {
    if (t >= taps && t < LAM_DIRECT_TAPS) continue; /* slots no tap uses (taps is constant when templated) */
    float v = acc[t];
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (lane == 0) part[warp][t] = v;
  }
  __syncthreads();
  if ((int)threadIdx.x <= taps) { /* taps + 1 sums: the taps, then the bias (slot LAM_DIRECT_TAPS) */
    int t = (int)threadIdx.x == taps ? LAM_DIRECT_TAPS : (int)threadIdx.x;
    float s = 0.0f;
    for (int w = 0; w < NT / 32; w++) s += part[w][t];
    work[((size_t)oc * nchunks + blockIdx.x) * (taps + 1) + threadIdx.x] = s;
  }
}

/* One thread per (oc, tap or bias): the blocks' sums in chunk order, added to the gradients. */
__global__ void direct_bwd_reduce_kernel(int OC, int taps, int nchunks, const float *work, float *dW, float *db) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= OC * (taps + 1)) return;
  int oc = i / (taps + 1), t = i % (taps + 1);
  float s = 0.0f;
  for (int k = 0; k < nchunks; k++) s += work[((size_t)oc * nchunks + k) * (taps + 1) + t];
  if (t < taps) dW[(size_t)oc * taps + t] += s;
  else db[oc] += s;
}

lam_status cuda_conv_pool_direct_bwd(lam_ctx *ctx, const lam_conv_geom *cg, const lam_pool_geom *pg, int B,
                                     const float *x, const float *dy, const float *y, const int32_t *arg, float *dW,
                                     float *db, float *work) {
  cuda_state *st = cuda_st(ctx);
  int taps = cg->C * cg->K * cg->K;
  size_t n = (size_t)B * pg->OH * pg->OW;
  int nchunks = (int)((n + LAM_DIRECT_CHUNK - 1) / LAM_DIRECT_CHUNK);
  LAM_TRY(check_grid("conv_pool_direct_bwd", n, pg->C));
  dim3 grid(nchunks, pg->C);
  if (cg->C == 1 && cg->K == 3 && cg->pad == 0) /* the MNIST-sized first layer */
    conv_pool_direct_bwd_kernel<1, 3, true><<<grid, NT, 0, st->stream>>>(*cg, *pg, B, x, dy, y, arg, work);
  else if (cg->C == 1 && cg->K == 3)
    conv_pool_direct_bwd_kernel<1, 3, false><<<grid, NT, 0, st->stream>>>(*cg, *pg, B, x, dy, y, arg, work);
  else
    conv_pool_direct_bwd_kernel<0, 0, false><<<grid, NT, 0, st->stream>>>(*cg, *pg, B, x, dy, y, arg, work);
  LAUNCH_CHECK(st, "conv_pool_direct_bwd_kernel");
  int outs = pg->C * (taps + 1);
  direct_bwd_reduce_kernel<<<(outs + NT - 1) / NT, NT, 0, st->stream>>>(pg->C, taps, nchunks, work, dW, db);
  LAUNCH_CHECK(st, "direct_bwd_reduce_kernel");
  return LAM_OK;
}
