// cudnn_fusion — an experiment for the graph core's bf16 step: does cuDNN's graph API (runtime fusion
// engines) run a convolution with BatchNorm's work folded in, on bf16 NHWC tensors, and what does it cost
// against the plain convolution? For res's three conv shapes (batch 512) it times, with every engine cuDNN
// offers for each pattern (the fastest reported):
//   conv      Y = conv(X, W)                                        (the plain convolution, graph API)
//   conv+st   Y = conv(X, W); sum, sqsum of Y per channel            (BatchNorm's statistics in the epilogue)
//   bnrc+st   Y = conv(relu(X*s + b), W); sum, sqsum of Y            (the previous BatchNorm + ReLU in the prologue)
//   wgrad     dW = wgrad(X, dY);  bnr-wgrad: dW = wgrad(relu(X*s + b), dY)
//   dgrad     dX = dgrad(dY, W);  dgrad+drelu: dX = relu'(Z) * dgrad(dY, W)
// and, beside them, the legacy API's call as lamina makes it, and one read and one read+write of Y's bytes
// (what a separate statistics pass and a separate apply pass cost at least). Checks the fused outputs
// against the plain ones and the sums against a float64 sum of Y. Results: docs/bench/JOURNAL.md,
// "2026-12-02 (second): cuDNN's fusion engines for BatchNorm in bf16" (#11).
// Not part of the build: nvcc -O2 -arch=sm_90 -std=c++17 dev/cudnn_fusion.cu -lcudnn; VERBOSE=1 lists
// every engine, HALF=1 runs fp16 instead of bf16.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
typedef cudnnBackendDescriptor_t D;
static cudnnHandle_t H;
static bool ok(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS; }
#define BK(x) do { cudnnStatus_t s_ = (x); if (!ok(s_)) { if (verbose) printf("  [%s:%d %s: %s]\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_)); return NULL; } } while (0)
static int verbose = 0;

static D mk(cudnnBackendDescriptorType_t t) { D d = NULL; if (!ok(cudnnBackendCreateDescriptor(t, &d))) { printf("create %d failed\n", (int)t); exit(1); } return d; }
static void set(D d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void *v) {
  cudnnStatus_t s = cudnnBackendSetAttribute(d, a, t, n, v);
  if (!ok(s)) { printf("set attribute %d: %s\n", (int)a, cudnnGetErrorString(s)); exit(1); }
}
static void fin(D d, const char *what) {
  cudnnStatus_t s = cudnnBackendFinalize(d);
  if (!ok(s)) { printf("finalize %s: %s\n", what, cudnnGetErrorString(s)); exit(1); }
}

// A tensor of logical dims (N, C, H, W) laid out NHWC.
static D tensor(int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h, int64_t w, bool virt) {
  D d = mk(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  int64_t dims[4] = {n, c, h, w}, str[4] = {c * h * w, 1, w * c, c}, align = 16;
  set(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
  set(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  set(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str);
  set(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  set(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
  set(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
  fin(d, "tensor");
  return d;
}
static D convdesc(int pad) {
  D d = mk(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  int64_t sd = 2, one[2] = {1, 1}, p[2] = {pad, pad};
  cudnnDataType_t ct = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t m = CUDNN_CROSS_CORRELATION;
  set(d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &ct);
  set(d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &m);
  set(d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sd);
  set(d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one);
  set(d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, one);
  set(d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, p);
  set(d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, p);
  fin(d, "conv");
  return d;
}
static D conv_op(int kind, D conv, D a, D b, D c) { // kind 0 fwd (x,w,y), 1 dgrad (dy,w,dx), 2 wgrad (x,dy,dw)
  static const cudnnBackendDescriptorType_t T[3] = {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
    CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
  // each kind's names for a, b, c, the convolution, alpha, beta
  static const cudnnBackendAttributeName_t A[3][6] = {
    {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
    {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
  D d = mk(T[kind]);
  const D ops[4] = {a, b, c, conv};
  for (int i = 0; i < 4; i++) set(d, A[kind][i], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ops[i]);
  float alpha = 1, beta = 0;
  set(d, A[kind][4], CUDNN_TYPE_FLOAT, 1, &alpha);
  set(d, A[kind][5], CUDNN_TYPE_FLOAT, 1, &beta);
  fin(d, "conv op");
  return d;
}
static D pw(cudnnPointwiseMode_t mode, D x, D b, D y) { // b NULL for unary; relu_bwd: x = dy, b = forward input
  D p = mk(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  set(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  set(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  fin(p, "pointwise");
  D d = mk(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  set(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p);
  if (mode == CUDNN_POINTWISE_RELU_BWD) {
    set(d, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    set(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    set(d, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  } else {
    set(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) set(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    set(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  }
  fin(d, "pointwise op");
  return d;
}
static D genstats(D y, D sum, D sq) {
  D d = mk(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
  cudnnGenStatsMode_t m = CUDNN_GENSTATS_SUM_SQSUM;
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  set(d, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &m);
  set(d, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  set(d, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  set(d, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum);
  set(d, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sq);
  fin(d, "genstats");
  return d;
}

static float median15(float *t) { // sorts t[0..15)
  for (int i = 1; i < 15; i++) for (int j = i; j > 0 && t[j] < t[j - 1]; j--) { float x = t[j]; t[j] = t[j - 1]; t[j - 1] = x; }
  return t[7];
}

// Ten calls captured in a CUDA graph on a stream of their own (cuDNN's handle set to it), as lamina's step
// runs them: the host's cost of each call is out of the timing (timed one by one, it is most of a small
// conv's time). 3 warm-up replays, then the median of 15, per call, in ms; -1 when the calls fail or cannot
// be captured. `call` returns whether its call was issued.
template <typename F> static float graph_ms(F call) {
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudnnSetStream(H, st);
  cudaGraph_t gr = NULL;
  cudaGraphExec_t gx = NULL;
  bool good = cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
  for (int i = 0; i < 10 && good; i++) good = call();
  good = cudaStreamEndCapture(st, &gr) == cudaSuccess && good;
  good = good && cudaGraphInstantiate(&gx, gr, 0) == cudaSuccess;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  float t[15];
  for (int i = 0; i < 18 && good; i++) {
    cudaEventRecord(e0, st); cudaGraphLaunch(gx, st); cudaEventRecord(e1, st); cudaEventSynchronize(e1);
    if (i >= 3) { cudaEventElapsedTime(&t[i - 3], e0, e1); t[i - 3] /= 10; }
  }
  if (gx) cudaGraphExecDestroy(gx);
  if (gr) cudaGraphDestroy(gr);
  cudnnSetStream(H, 0);
  cudaStreamSynchronize(st);
  cudaStreamDestroy(st);
  cudaEventDestroy(e0); cudaEventDestroy(e1);
  if (!good) { cudaGetLastError(); return -1; }
  return median15(t);
}

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
struct run_t { double ms; int engine; int runtime; int tried, built; };

// Builds the graph of ops, then tries every engine: a plan per engine (default knobs); runs each
// buildable one (3 warm-up executions, then a CUDA graph of 10 launched 15 times: the median) and keeps
// the fastest; the outputs are those of the last engine run (the checks hold for any engine).
static run_t best_of(const char *name, std::vector<D> ops, std::vector<int64_t> uids, std::vector<void *> ptrs) {
  run_t r = {-1, -1, 0, 0, 0};
  D g = mk(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)ops.size(), ops.data());
  set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &H);
  cudnnStatus_t s = cudnnBackendFinalize(g);
  if (!ok(s)) { printf("%-12s op graph not accepted: %s\n", name, cudnnGetErrorString(s)); return r; }
  int64_t count = 0, got = 0;
  cudnnBackendGetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &got, &count);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  for (int64_t ei = 0; ei < count; ei++) {
    D e = mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    set(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
    set(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &ei);
    r.tried++;
    if (!ok(cudnnBackendFinalize(e))) { cudnnBackendDestroyDescriptor(e); continue; }
    cudnnBackendBehaviorNote_t notes[8]; int64_t nn = 0;
    cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 8, &nn, notes);
    int rt = 0;
    for (int i = 0; i < nn; i++) rt |= notes[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
    D c = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    set(c, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e);
    D p = NULL;
    if (ok(cudnnBackendFinalize(c))) {
      p = mk(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &H);
      set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
      if (!ok(cudnnBackendFinalize(p))) { cudnnBackendDestroyDescriptor(p); p = NULL; }
    }
    if (p) {
      r.built++;
      int64_t ws = 0;
      cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws);
      void *w = NULL;
      if (ws > 0) CK(cudaMalloc(&w, ws));
      D v = mk(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
      set(v, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, (int64_t)uids.size(), uids.data());
      set(v, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, (int64_t)ptrs.size(), ptrs.data());
      set(v, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &w);
      fin(v, "variant pack");
      bool good = true;
      for (int i = 0; i < 2 && good; i++) good = ok(cudnnBackendExecute(H, p, v));
      float once = 0; // a third execution timed alone: engines far slower than the best so far are not timed further
      cudaEventRecord(e0);
      good = good && ok(cudnnBackendExecute(H, p, v));
      cudaEventRecord(e1);
      if (good && cudaDeviceSynchronize() == cudaSuccess) cudaEventElapsedTime(&once, e0, e1);
      else good = false;
      if (good && r.ms > 0 && once > 5 * r.ms + 0.05) {
        if (verbose) printf("    %s engine %lld%s: ~%.0f us alone, not timed\n", name, (long long)ei, rt ? " (runtime)" : "", once * 1e3);
        good = false;
      }
      const float ms = good ? graph_ms([&] { return ok(cudnnBackendExecute(H, p, v)); }) : -1;
      if (good && ms < 0) printf("    %s engine %lld: not capturable\n", name, (long long)ei);
      if (ms >= 0) {
        if (verbose) printf("    %s engine %lld%s: %.1f us (ws %lld)\n", name, (long long)ei, rt ? " (runtime)" : "", ms * 1e3, (long long)ws);
        if (r.ms < 0 || ms < r.ms) { r.ms = ms; r.engine = (int)ei; r.runtime = rt; }
      }
      if (!good) cudaGetLastError();
      cudnnBackendDestroyDescriptor(v);
      if (w) cudaFree(w);
      cudnnBackendDestroyDescriptor(p);
    }
    cudnnBackendDestroyDescriptor(c);
    cudnnBackendDestroyDescriptor(e);
  }
  return r;
}

__global__ void fill(__nv_bfloat16 *p, size_t n, unsigned seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    p[i] = __float2bfloat16(((h & 0xffffff) / 16777216.0f - 0.5f) * scale);
  }
}
__global__ void fillf(float *p, int n, unsigned seed, float lo, float hi) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { unsigned h = (unsigned)i * 2654435761u ^ seed; h ^= h >> 15; h *= 2246822519u; p[i] = lo + (hi - lo) * ((h & 0xffff) / 65536.0f); }
}
__global__ void read_pass(const uint4 *p, size_t n, unsigned *sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) { uint4 v = p[i]; acc ^= v.x ^ v.y ^ v.z ^ v.w; }
  if (acc == 0x12345678u) *sink = acc;
}

static float bf(__nv_bfloat16 v) { return __bfloat162float(v); }

static double time_kernel_read(const void *p, size_t bytes, int copy, void *dst) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  unsigned *sink; CK(cudaMalloc(&sink, 4));
  float t[15];
  for (int i = 0; i < 18; i++) {
    cudaEventRecord(a);
    if (copy) cudaMemcpyAsync(dst, p, bytes, cudaMemcpyDeviceToDevice);
    else read_pass<<<132 * 8, 256>>>((const uint4 *)p, bytes / 16, sink);
    cudaEventRecord(b); cudaEventSynchronize(b);
    if (i >= 3) cudaEventElapsedTime(&t[i - 3], a, b);
  }
  cudaFree(sink);
  return median15(t);
}

// The legacy API's call as lamina makes it (src/cuda/conv.cu: cuDNN's heuristics, the first algorithm whose
// workspace fits in 1 GiB, tensor-op math), timed the same way: 10 calls in a CUDA graph.
static double legacy(int kind, cudnnDataType_t dt, int N, int C, int S, int K, void *x, void *w, void *y) {
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  cudnnCreateTensorDescriptor(&xd); cudnnCreateTensorDescriptor(&yd); cudnnCreateFilterDescriptor(&wd);
  cudnnCreateConvolutionDescriptor(&cd);
  cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, dt, N, C, S, S);
  cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, dt, N, K, S, S);
  cudnnSetFilter4dDescriptor(wd, dt, CUDNN_TENSOR_NHWC, K, C, 3, 3);
  cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT);
  cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH);
  const size_t limit = (size_t)1 << 30;
  size_t ws = 0;
  int n = 0, algo = -1;
  if (kind == 0) {
    cudnnConvolutionFwdAlgoPerf_t a[16];
    cudnnGetConvolutionForwardAlgorithm_v7(H, xd, wd, cd, yd, 16, &n, a);
    for (int i = 0; i < n && algo < 0; i++) if (a[i].status == CUDNN_STATUS_SUCCESS && a[i].memory <= limit) { algo = a[i].algo; ws = a[i].memory; }
  } else if (kind == 1) {
    cudnnConvolutionBwdDataAlgoPerf_t a[16];
    cudnnGetConvolutionBackwardDataAlgorithm_v7(H, wd, yd, cd, xd, 16, &n, a);
    for (int i = 0; i < n && algo < 0; i++) if (a[i].status == CUDNN_STATUS_SUCCESS && a[i].memory <= limit) { algo = a[i].algo; ws = a[i].memory; }
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t a[16];
    cudnnGetConvolutionBackwardFilterAlgorithm_v7(H, xd, yd, cd, wd, 16, &n, a);
    for (int i = 0; i < n && algo < 0; i++) if (a[i].status == CUDNN_STATUS_SUCCESS && a[i].memory <= limit) { algo = a[i].algo; ws = a[i].memory; }
  }
  double ms = -1;
  void *wsp = NULL;
  if (algo >= 0 && (ws == 0 || cudaMalloc(&wsp, ws) == cudaSuccess)) {
    const float one = 1, zero = 0;
    ms = graph_ms([&] {
      return ok(kind == 0   ? cudnnConvolutionForward(H, &one, xd, x, wd, w, cd, (cudnnConvolutionFwdAlgo_t)algo, wsp, ws, &zero, yd, y)
                : kind == 1 ? cudnnConvolutionBackwardData(H, &one, wd, w, yd, y, cd, (cudnnConvolutionBwdDataAlgo_t)algo, wsp, ws, &zero, xd, x)
                            : cudnnConvolutionBackwardFilter(H, &one, xd, x, yd, y, cd, (cudnnConvolutionBwdFilterAlgo_t)algo, wsp, ws, &zero, wd, w));
    });
    if (wsp) cudaFree(wsp);
  }
  if (verbose) printf("    legacy %s: algo %d, ws %zu: %.1f us\n", kind == 0 ? "fwd" : kind == 1 ? "dgrad" : "wgrad", algo, ws, ms * 1e3);
  cudnnDestroyTensorDescriptor(xd); cudnnDestroyTensorDescriptor(yd); cudnnDestroyFilterDescriptor(wd);
  cudnnDestroyConvolutionDescriptor(cd);
  return ms;
}

int main(int argc, char **argv) {
  verbose = getenv("VERBOSE") != NULL;
  int N = argc > 1 ? atoi(argv[1]) : 512;
  cudnnDataType_t io = getenv("HALF") ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
  if (!ok(cudnnCreate(&H))) { printf("no cuDNN handle\n"); return 1; }
  printf("cuDNN %zu, io %s, batch %d\n", cudnnGetVersion(), io == CUDNN_DATA_HALF ? "fp16" : "bf16", N);
  const int shapes[3][2] = {{64, 32}, {128, 16}, {256, 8}}; // channels (in = out), spatial size
  printf("%-5s %-3s | %9s %9s %9s | %9s %9s | %9s %9s | %9s %9s %9s | %9s %9s | %s\n", "C", "HW", "conv", "conv+st", "bnrc+st",
         "wgrad", "bnr-wgrad", "dgrad", "dgrad+drl", "old fwd", "old wgrad", "old dgrad", "read Y", "copy Y", "checks");
  for (int si = 0; si < 3; si++) {
    const int C = shapes[si][0], S = shapes[si][1], K = C;
    size_t nx = (size_t)N * C * S * S, nw = (size_t)K * C * 9;
    __nv_bfloat16 *x, *w, *y, *y2, *dy, *dx, *dx2, *dw, *z; // 16-bit either way (bf16 or half bits)
    float *sc, *bi, *sum, *sq, *sum2, *sq2;
    CK(cudaMalloc(&x, nx * 2)); CK(cudaMalloc(&y, nx * 2)); CK(cudaMalloc(&y2, nx * 2)); CK(cudaMalloc(&dy, nx * 2));
    CK(cudaMalloc(&dx, nx * 2)); CK(cudaMalloc(&dx2, nx * 2)); CK(cudaMalloc(&z, nx * 2));
    CK(cudaMalloc(&w, nw * 2)); CK(cudaMalloc(&dw, nw * 2));
    CK(cudaMalloc(&sc, C * 4)); CK(cudaMalloc(&bi, C * 4));
    CK(cudaMalloc(&sum, K * 4)); CK(cudaMalloc(&sq, K * 4)); CK(cudaMalloc(&sum2, K * 4)); CK(cudaMalloc(&sq2, K * 4));
    fill<<<1024, 256>>>(x, nx, 1 + si, 4.f);
    fill<<<1024, 256>>>(dy, nx, 7 + si, 2.f);
    fill<<<1024, 256>>>(z, nx, 11 + si, 2.f);
    fill<<<256, 256>>>(w, nw, 3 + si, 0.2f);
    fillf<<<(C + 255) / 256, 256>>>(sc, C, 5, 0.5f, 1.5f);
    fillf<<<(C + 255) / 256, 256>>>(bi, C, 9, -0.3f, 0.3f);
    CK(cudaDeviceSynchronize());
    // With HALF=1 the fill's bf16 bits read as other finite halves: fine for timing (the checks are bf16 only).
    D conv = convdesc(1);
    // uids: 1 x, 2 w, 3 y, 4 sum, 5 sq, 6 scale, 7 bias, 8 dy, 9 dx, 10 dw, 11 z, 100+ virtual
    D X = tensor(1, io, N, C, S, S, false), W = tensor(2, io, K, C, 3, 3, false), Y = tensor(3, io, N, K, S, S, false);
    D SUM = tensor(4, CUDNN_DATA_FLOAT, 1, K, 1, 1, false), SQ = tensor(5, CUDNN_DATA_FLOAT, 1, K, 1, 1, false);
    D SC = tensor(6, CUDNN_DATA_FLOAT, 1, C, 1, 1, false), BI = tensor(7, CUDNN_DATA_FLOAT, 1, C, 1, 1, false);
    D DY = tensor(8, io, N, K, S, S, false), DX = tensor(9, io, N, C, S, S, false);
    D DW = tensor(10, io, K, C, 3, 3, false), Z = tensor(11, io, N, C, S, S, false);
    D T1 = tensor(101, CUDNN_DATA_FLOAT, N, C, S, S, true), T2 = tensor(102, CUDNN_DATA_FLOAT, N, C, S, S, true);
    D T3 = tensor(103, CUDNN_DATA_FLOAT, N, C, S, S, true), T4 = tensor(104, CUDNN_DATA_FLOAT, N, C, S, S, true);
    D T5 = tensor(105, CUDNN_DATA_FLOAT, N, C, S, S, true), T6 = tensor(106, CUDNN_DATA_FLOAT, N, C, S, S, true);
    D T7 = tensor(107, CUDNN_DATA_FLOAT, N, C, S, S, true);

    run_t r_conv = best_of("conv", {conv_op(0, conv, X, W, Y)}, {1, 2, 3}, {x, w, y});
    std::vector<__nv_bfloat16> hy(nx);
    CK(cudaMemcpy(hy.data(), y, nx * 2, cudaMemcpyDeviceToHost));
    run_t r_st = best_of("conv+st", {conv_op(0, conv, X, W, Y), genstats(Y, SUM, SQ)}, {1, 2, 3, 4, 5}, {x, w, y2, sum, sq});
    // check conv+st: y2 == y, sums against float64 sums of y
    char check[256] = "";
    if (r_st.ms > 0 && io == CUDNN_DATA_BFLOAT16) {
      std::vector<__nv_bfloat16> hy2(nx);
      std::vector<float> hs(K), hq(K);
      CK(cudaMemcpy(hy2.data(), y2, nx * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hs.data(), sum, K * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hq.data(), sq, K * 4, cudaMemcpyDeviceToHost));
      double maxd = 0, maxs = 0;
      std::vector<double> rs(K, 0), rq(K, 0);
      for (size_t i = 0; i < nx; i++) {
        maxd = fmax(maxd, fabs(bf(hy2[i]) - bf(hy[i])));
        double v = bf(hy2[i]); rs[i % K] += v; rq[i % K] += v * v;
      }
      for (int k = 0; k < K; k++) maxs = fmax(maxs, fmax(fabs(hs[k] - rs[k]) / (fabs(rs[k]) + 1e-3 * nx / K), fabs(hq[k] - rq[k]) / rq[k]));
      snprintf(check, sizeof check, "st: y diff %.3g, sums rel %.2g", maxd, maxs);
    }
    run_t r_bn = best_of("bnrc+st", {pw(CUDNN_POINTWISE_MUL, X, SC, T1), pw(CUDNN_POINTWISE_ADD, T1, BI, T2),
                                     pw(CUDNN_POINTWISE_RELU_FWD, T2, NULL, T3), conv_op(0, conv, T3, W, Y), genstats(Y, SUM, SQ)},
                         {1, 2, 3, 4, 5, 6, 7}, {x, w, y2, sum, sq, sc, bi});
    run_t r_wg = best_of("wgrad", {conv_op(2, conv, X, DY, DW)}, {1, 8, 10}, {x, dy, dw});
    run_t r_bwg = best_of("bnr-wgrad", {pw(CUDNN_POINTWISE_MUL, X, SC, T4), pw(CUDNN_POINTWISE_ADD, T4, BI, T5),
                                        pw(CUDNN_POINTWISE_RELU_FWD, T5, NULL, T6), conv_op(2, conv, T6, DY, DW)},
                          {1, 8, 10, 6, 7}, {x, dy, dw, sc, bi});
    run_t r_dg = best_of("dgrad", {conv_op(1, conv, DY, W, DX)}, {8, 2, 9}, {dy, w, dx});
    run_t r_dgr = best_of("dgrad+drl", {conv_op(1, conv, DY, W, T7), pw(CUDNN_POINTWISE_RELU_BWD, T7, Z, DX)}, {8, 2, 9, 11},
                          {dy, w, dx2, z});
    if (r_dgr.ms > 0 && r_dg.ms > 0 && io == CUDNN_DATA_BFLOAT16) { // dx2 == (z > 0 ? dx : 0)
      std::vector<__nv_bfloat16> a(nx), b(nx), zz(nx);
      CK(cudaMemcpy(a.data(), dx, nx * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(b.data(), dx2, nx * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(zz.data(), z, nx * 2, cudaMemcpyDeviceToHost));
      double m = 0, sc2 = 0;
      for (size_t i = 0; i < nx; i++) { double want = bf(zz[i]) > 0 ? bf(a[i]) : 0; m = fmax(m, fabs(bf(b[i]) - want)); sc2 = fmax(sc2, fabs(want)); }
      size_t l = strlen(check);
      snprintf(check + l, sizeof check - l, "; drelu diff %.3g of %.3g", m, sc2);
    }
    double rd = time_kernel_read(y, nx * 2, 0, NULL), cp = time_kernel_read(y, nx * 2, 1, z);
    double lf = legacy(0, io, N, C, S, K, x, w, y), ld = legacy(1, io, N, C, S, K, dx, w, dy), lw = legacy(2, io, N, C, S, K, x, dw, dy);
    auto f = [](run_t r) { static char b[8][32]; static int k; k = (k + 1) % 8; if (r.ms < 0) snprintf(b[k], 32, "none/%d", r.tried); else snprintf(b[k], 32, "%.1f%s", r.ms * 1e3, r.runtime ? "r" : ""); return b[k]; };
    printf("%-5d %-3d | %9s %9s %9s | %9s %9s | %9s %9s | %9.1f %9.1f %9.1f | %9.1f %9.1f | %s\n", C, S, f(r_conv), f(r_st), f(r_bn),
           f(r_wg), f(r_bwg), f(r_dg), f(r_dgr), lf * 1e3, lw * 1e3, ld * 1e3, rd * 1e3, cp * 1e3, check);
    fflush(stdout);
    cudaFree(x); cudaFree(y); cudaFree(y2); cudaFree(dy); cudaFree(dx); cudaFree(dx2); cudaFree(z); cudaFree(w); cudaFree(dw);
    cudaFree(sc); cudaFree(bi); cudaFree(sum); cudaFree(sq); cudaFree(sum2); cudaFree(sq2);
  }
  printf("(µs, median of 15, fastest engine; r = a runtime-compiled engine; none/N = none of N engines built)\n");
  return 0;
}
