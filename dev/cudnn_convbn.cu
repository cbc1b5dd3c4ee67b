// cudnn_convbn — a probe for cuDNN's fp16 conv-BatchNorm engines (the "specialized pre-compiled" engines
// ConvBNfprop, ConvBNwgrad and DgradDreluBNBwdWeight of the cuDNN developer guide, graph-api page).
//
// Why: dev/cudnn_fusion.cu, run on the H200 with HALF=1, found engines for conv + GenStats in fp16 but
// none ("none/5") for scale·x + bias → ReLU → conv → GenStats, and none for scale/bias/ReLU → wgrad.
// The guide says these engines exist on compute capability >= 8.0 (Hopper included) in FP16 NHWC. That
// program built its graphs its own way (FLOAT scale and bias, FLOAT virtual tensors everywhere, engines
// taken by global index with default knobs). This one builds the graphs as cudnn-frontend's samples do
// and asks cuDNN's heuristics (modes A, B, FALLBACK) for engine configs, with their knobs, as the
// frontend does; it also still enumerates the global engine indices. For every config it prints the
// engine, whether it is runtime-compiled, its knobs and its time, checks the outputs against a plain
// reference (simple GPU kernels in float64, sums on the host in float64), and for the patterns that get
// no engine it prints cuDNN's status and cudnnGetLastErrorString() of the first refused plan.
//
// Graphs (fp16 NHWC / KRSC, 16-byte aligned), each after a sample of NVIDIA/cudnn-frontend:
//   conv, conv+gs      controls: Y = conv(X, W); + GenStats        (samples/cpp/convolution/fprop.cpp)
//   sbrcs              "SBRCS": relu(X*S + B) → conv → Y, GenStats  (samples/cpp/convolution/fprop.cpp;
//                      that file has one SBRCS graph only: ReLU present, Y HALF and non-virtual)
//   sbrcs-f32sb        the same with FLOAT S, B (cudnn_fusion's way), to isolate that difference
//   wgrad              control: dW = wgrad(X, dY)                   (samples/cpp/convolution/wgrads.cpp)
//   sbr-wgrad          "scale-bias-relu-wgrad" (ConvBNwgrad), HALF intermediates as the sample has them
//   sbr-wgrad-f32v     the same with FLOAT intermediates (cudnn_fusion's way)
//   dgrad, dgrad+drelu controls                                     (samples/cpp/convolution/dgrads.cpp)
//   dgdrbnw-sample     "Dgrad Drelu DBNweight" as the sample builds it (mean added with alpha2 = 1,
//                      the BN-weight outputs left at the io type, HALF)
//   dgdrbnw-f32        the same with FLOAT BN-weight outputs (the guide: dScale, dBias, A, B, C are FP32)
//   dgdrbnw-guide      FLOAT outputs and alpha2 = -1 on the mean add (the guide: "the pointwise add node
//                      subtracts mean_bn from X_bn, hence alpha2 should be -1")
// Shapes: C = K = 64 at 32x32, 128 at 16x16, 256 at 8x8 (3x3, pad 1, stride 1), and 1x1 64 -> 256 at 32x32.
//
// Not part of the build:
//   nvcc -O2 -arch=sm_90 -std=c++17 dev/cudnn_convbn.cu -lcudnn -o /tmp/cudnn_convbn
//   /tmp/cudnn_convbn [N]        (batch, default 64); VERBOSE=1 also prints every refused config with
//   cuDNN's status and message. cuDNN's own log: CUDNN_LOGLEVEL_DBG=3 (or CUDNN_LOGERR_DBG=1 on older
//   releases) with CUDNN_LOGDEST_DBG=stderr; this program never sets them.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cudnn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
typedef cudnnBackendDescriptor_t D;
static cudnnHandle_t H;
static int verbose = 0;
static bool ok(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS; }

static std::string last_error() { // cuDNN 9's message for the last failed call on this thread
  char b[1024] = "";
  cudnnGetLastErrorString(b, sizeof b);
  for (char *p = b; *p; p++) if (*p == '\n') *p = ' ';
  return b;
}
static D mk(cudnnBackendDescriptorType_t t) { D d = NULL; if (!ok(cudnnBackendCreateDescriptor(t, &d))) { printf("create %d failed\n", (int)t); exit(1); } return d; }
static void set(D d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n, const void *v) {
  cudnnStatus_t s = cudnnBackendSetAttribute(d, a, t, n, v);
  if (!ok(s)) { printf("set attribute %d: %s (%s)\n", (int)a, cudnnGetErrorString(s), last_error().c_str()); exit(1); }
}
static void fin(D d, const char *what) {
  cudnnStatus_t s = cudnnBackendFinalize(d);
  if (!ok(s)) { printf("finalize %s: %s (%s)\n", what, cudnnGetErrorString(s), last_error().c_str()); exit(1); }
}

// ---------------------------------------------------------------------------------------------------
// Graph pieces (as dev/cudnn_fusion.cu, plus the BN-weight op and a pointwise alpha2)

// A tensor of logical dims (N, C, H, W) laid out NHWC (for a filter: (K, C, R, S) laid out KRSC), 16-byte
// aligned as the frontend's tensors are by default.
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
static D convdesc(int pad) { // cross-correlation, FLOAT compute, stride and dilation 1: the samples' options
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
// b NULL for unary; relu_bwd: x = dy, b = forward input. FLOAT math as the samples' compute type. alpha2
// scales operand b; the frontend never sets it (cuDNN's default is 1), the guide asks -1 for the
// DgradDreluBNBwdWeight mean subtraction.
static D pw(cudnnPointwiseMode_t mode, D x, D b, D y, float alpha2 = 1) {
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
    if (alpha2 != 1) set(d, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha2);
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
// BatchNorm's weight gradients (the frontend's dbn_weight node): dscale, dbias and the coefficients of
// dx = eq_dy*dy + eq_x*x + eq_bias, from dy, x, mean, inv_std, scale; FLOAT math as the frontend sets.
static D bn_bwd_weights(D dy, D x, D mean, D invstd, D scale, D dscale, D dbias, D eq_dy, D eq_x, D eq_b) {
  D d = mk(CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR);
  cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  set(d, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  const struct { cudnnBackendAttributeName_t a; D t; } io[] = {
    {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC, x}, {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC, dy},
    {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC, mean}, {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_INVSTD_DESC, invstd},
    {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_BN_SCALE_DESC, scale}, {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_SCALE_DESC, dscale},
    {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DBN_BIAS_DESC, dbias}, {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_DY_SCALE_DESC, eq_dy},
    {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_X_SCALE_DESC, eq_x}, {CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS, eq_b}};
  for (const auto &e : io) set(d, e.a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e.t);
  fin(d, "bn bwd weights");
  return d;
}

// ---------------------------------------------------------------------------------------------------
// Timing (as dev/cudnn_fusion.cu)

static float median15(float *t) { // sorts t[0..15)
  for (int i = 1; i < 15; i++) for (int j = i; j > 0 && t[j] < t[j - 1]; j--) { float x = t[j]; t[j] = t[j - 1]; t[j - 1] = x; }
  return t[7];
}
// Ten calls captured in a CUDA graph on a stream of their own (cuDNN's handle set to it): the host's cost
// of each call is out of the timing. 3 warm-up replays, then the median of 15, per call, in ms; -1 when
// the calls fail or cannot be captured.
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

// ---------------------------------------------------------------------------------------------------
// Engine configs: from heuristics (as the frontend takes them) and by global index (as cudnn_fusion does)

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

struct out_t { void *p; size_t bytes; };   // an output buffer, poisoned (all ones: NaN) before each engine
struct pattern_t {
  const char *name;
  std::vector<D> ops;
  std::vector<int64_t> uids;
  std::vector<void *> ptrs;
  std::vector<out_t> outs;
  std::function<std::string()> check;      // compares the outputs with the reference; "" when not checked
};
struct result_t {
  double ms = -1; int engine = -1, runtime = 0; std::string src, knobs, check;
  int heur[3] = {-1, -1, -1};               // configs returned by A, B, FALLBACK (-1: the query failed)
  int g_tried = 0, g_built = 0, ran = 0;
  std::string why_heur, why_global;         // the first refusal of each route: status and message
};

static std::string knob_string(D cfg) {
  D kc[32];
  for (int i = 0; i < 32; i++) kc[i] = mk(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR);
  int64_t n = 0;
  std::string s;
  if (ok(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, 32, &n, kc))) {
    for (int64_t i = 0; i < n && i < 32; i++) {
      cudnnBackendKnobType_t t; int64_t v = 0, got = 0;
      cudnnBackendGetAttribute(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &got, &t);
      cudnnBackendGetAttribute(kc[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &got, &v);
      char b[32]; snprintf(b, sizeof b, "%sk%d=%lld", s.empty() ? "" : ",", (int)t, (long long)v); s += b;
    }
  }
  for (int i = 0; i < 32; i++) cudnnBackendDestroyDescriptor(kc[i]);
  return s.empty() ? "-" : s;
}
static void engine_info(D cfg, int64_t *index, int *runtime) {
  D e = mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t got = 0;
  *index = -1; *runtime = 0;
  if (ok(cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &e))) {
    cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, index);
    cudnnBackendBehaviorNote_t notes[8]; int64_t nn = 0;
    cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 8, &nn, notes);
    for (int i = 0; i < nn; i++) *runtime |= notes[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  }
  cudnnBackendDestroyDescriptor(e);
}

// Finalizes a plan for `cfg`, runs it once on poisoned outputs, checks them, times it; prints a line.
// Returns false (with `why` filled when empty) when the plan is refused.
static bool try_config(const pattern_t &pt, D cfg, const char *src, result_t &r, std::string &why) {
  int64_t index; int rt;
  engine_info(cfg, &index, &rt);
  const std::string knobs = knob_string(cfg);
  D p = mk(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &H);
  set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
  cudnnStatus_t s = cudnnBackendFinalize(p);
  if (!ok(s)) {
    const std::string msg = std::string(cudnnGetErrorString(s)) + ": " + last_error();
    if (why.empty()) why = std::string(src) + " engine " + std::to_string(index) + ": " + msg;
    if (verbose) printf("    %-14s %-6s engine %3lld%s knobs %s: plan refused: %s\n", pt.name, src, (long long)index, rt ? " (rt)" : "", knobs.c_str(), msg.c_str());
    cudnnBackendDestroyDescriptor(p);
    return false;
  }
  int64_t ws = 0, got = 0;
  cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws);
  void *w = NULL;
  if (ws > 0) CK(cudaMalloc(&w, ws));
  D v = mk(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  set(v, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, (int64_t)pt.uids.size(), pt.uids.data());
  set(v, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, (int64_t)pt.ptrs.size(), pt.ptrs.data());
  set(v, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &w);
  fin(v, "variant pack");
  for (const out_t &o : pt.outs) CK(cudaMemset(o.p, 0xff, o.bytes));
  s = cudnnBackendExecute(H, p, v);
  bool good = ok(s) && cudaDeviceSynchronize() == cudaSuccess;
  std::string check = good && pt.check ? pt.check() : "";
  float ms = -1;
  if (good) {
    cudaEvent_t e0, e1; // one execution timed alone: engines far slower than the best so far are not graph-timed
    CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    float once = 0;
    cudaEventRecord(e0); good = ok(cudnnBackendExecute(H, p, v)); cudaEventRecord(e1);
    good = good && cudaDeviceSynchronize() == cudaSuccess;
    if (good) cudaEventElapsedTime(&once, e0, e1);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    if (good && r.ms > 0 && once > 5 * r.ms + 0.05) ms = -2;
    else if (good) ms = graph_ms([&] { return ok(cudnnBackendExecute(H, p, v)); });
  }
  if (!good) cudaGetLastError();
  r.ran++;
  if (!ok(s)) printf("    %-14s %-6s engine %3lld%s knobs %s: execute failed: %s %s\n", pt.name, src, (long long)index, rt ? " (rt)" : "", knobs.c_str(), cudnnGetErrorString(s), last_error().c_str());
  else {
    char t[32];
    if (ms >= 0) snprintf(t, sizeof t, "%.1f us", ms * 1e3);
    else snprintf(t, sizeof t, "%s", ms == -2 ? "slow, not timed" : good ? "not capturable" : "failed after the first run");
    printf("    %-14s %-6s engine %3lld%s knobs %-40s ws %9lld: %s%s%s\n", pt.name, src, (long long)index, rt ? " (rt)" : "", knobs.c_str(),
           (long long)ws, t, check.empty() ? "" : "  | ", check.c_str());
  }
  if (ms >= 0 && (r.ms < 0 || ms < r.ms)) { r.ms = ms; r.engine = (int)index; r.runtime = rt; r.src = src; r.knobs = knobs; r.check = check; }
  cudnnBackendDestroyDescriptor(v);
  if (w) cudaFree(w);
  cudnnBackendDestroyDescriptor(p);
  return true;
}

static const char *heur_name(int i) { return i == 0 ? "A" : i == 1 ? "B" : "FB"; }

// Heuristics in modes A, B, FALLBACK: every config each returns is tried (the frontend tries them in order
// and keeps the first that builds; here all are timed).
static void by_heuristics(const pattern_t &pt, D g, result_t &r) {
  const cudnnBackendHeurMode_t modes[3] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK};
  for (int m = 0; m < 3; m++) {
    D h = mk(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    set(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
    set(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]);
    cudnnStatus_t s = cudnnBackendFinalize(h);
    int64_t n = 0;
    if (ok(s)) s = cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL);
    if (!ok(s)) {
      const std::string msg = std::string("heuristics ") + heur_name(m) + ": " + cudnnGetErrorString(s) + ": " + last_error();
      if (r.why_heur.empty()) r.why_heur = msg;
      if (verbose) printf("    %-14s %s\n", pt.name, msg.c_str());
      cudnnBackendDestroyDescriptor(h);
      continue;
    }
    std::vector<D> cfgs(n);
    for (auto &c : cfgs) c = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t got = 0;
    if (n > 0) cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfgs.data());
    r.heur[m] = (int)got;
    for (int64_t i = 0; i < got; i++) {
      char src[24]; snprintf(src, sizeof src, "%s#%lld", heur_name(m), (long long)i);
      try_config(pt, cfgs[i], src, r, r.why_heur);
    }
    for (auto &c : cfgs) cudnnBackendDestroyDescriptor(c);
    cudnnBackendDestroyDescriptor(h);
  }
}

// Every global engine index with its default knobs (dev/cudnn_fusion.cu's way).
static void by_global_index(const pattern_t &pt, D g, result_t &r) {
  int64_t count = 0, got = 0;
  cudnnBackendGetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &got, &count);
  for (int64_t ei = 0; ei < count; ei++) {
    D e = mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    set(e, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g);
    set(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &ei);
    r.g_tried++;
    cudnnStatus_t s = cudnnBackendFinalize(e);
    D c = NULL;
    if (ok(s)) {
      c = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      set(c, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &e);
      s = cudnnBackendFinalize(c);
    }
    char src[24]; snprintf(src, sizeof src, "g%lld", (long long)ei);
    if (!ok(s)) {
      const std::string msg = std::string(cudnnGetErrorString(s)) + ": " + last_error();
      if (r.why_global.empty()) r.why_global = std::string(src) + ": " + msg;
      if (verbose) printf("    %-14s %-6s engine %3lld: not supported: %s\n", pt.name, src, (long long)ei, msg.c_str());
    } else if (try_config(pt, c, src, r, r.why_global)) {
      r.g_built++;
    }
    if (c) cudnnBackendDestroyDescriptor(c);
    cudnnBackendDestroyDescriptor(e);
  }
}

static result_t probe(const pattern_t &pt) {
  result_t r;
  D g = mk(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)pt.ops.size(), pt.ops.data());
  set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &H);
  cudnnStatus_t s = cudnnBackendFinalize(g);
  if (!ok(s)) {
    r.why_heur = r.why_global = std::string("op graph not accepted: ") + cudnnGetErrorString(s) + ": " + last_error();
    printf("    %-14s %s\n", pt.name, r.why_heur.c_str());
    return r;
  }
  by_heuristics(pt, g, r);
  by_global_index(pt, g, r);
  printf("  %-14s heuristics A:%d B:%d FB:%d, global engines built %d of %d\n", pt.name, r.heur[0], r.heur[1], r.heur[2], r.g_built, r.g_tried);
  fflush(stdout);
  cudnnBackendDestroyDescriptor(g);
  return r;
}

// ---------------------------------------------------------------------------------------------------
// Inputs and the plain reference (float64 accumulation on the GPU; layouts NHWC and KRSC)

__device__ unsigned hash(size_t i, unsigned seed) {
  unsigned h = (unsigned)i * 2654435761u ^ seed * 97531u;
  h ^= h >> 15; h *= 2246822519u; h ^= h >> 13; h *= 3266489917u; h ^= h >> 16;
  return h;
}
// Fresh pseudo-random halves in [lo, hi) (real fp16 values through __float2half).
__global__ void fill_half(__half *p, size_t n, unsigned seed, float lo, float hi) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2half(lo + (hi - lo) * ((hash(i, seed) & 0xffffff) / 16777216.0f));
}
__global__ void half_to_float(const __half *a, float *b, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) b[i] = __half2float(a[i]);
}
// The prologue: relu(x*s + b) per channel (s, b given as float), in float, not rounded.
__global__ void sbr_ref(const __half *x, const float *s, const float *b, float *y, size_t n, int C) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    y[i] = fmaxf(__half2float(x[i]) * s[i % C] + b[i % C], 0.f);
}
// y[n,p,q,k] = sum a[n, p+r-pad, q+s-pad, c] * w[k,r,s,c]   (stride 1, P = H + 2 pad - R + 1)
__global__ void conv_ref(const float *a, const float *w, float *y, int N, int C, int H, int W, int K, int R, int pad) {
  const int P = H + 2 * pad - R + 1, Q = W + 2 * pad - R + 1;
  size_t total = (size_t)N * P * Q * K;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int k = i % K, q = (i / K) % Q, p = (i / K / Q) % P, n = i / K / Q / P;
    double acc = 0;
    for (int r = 0; r < R; r++) for (int s = 0; s < R; s++) {
      int h = p + r - pad, x = q + s - pad;
      if (h < 0 || h >= H || x < 0 || x >= W) continue;
      const float *ap = a + (((size_t)n * H + h) * W + x) * C, *wp = w + (((size_t)k * R + r) * R + s) * C;
      for (int c = 0; c < C; c++) acc += (double)ap[c] * wp[c];
    }
    y[i] = (float)acc;
  }
}
// dw[k,r,s,c] = sum over n,p,q of dy[n,p,q,k] * a[n, p+r-pad, q+s-pad, c]
__global__ void wgrad_ref(const float *a, const float *dy, float *dw, int N, int C, int H, int W, int K, int R, int pad) {
  const int P = H + 2 * pad - R + 1, Q = W + 2 * pad - R + 1;
  size_t total = (size_t)K * R * R * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int c = i % C, s = (i / C) % R, r = (i / C / R) % R, k = i / C / R / R;
    double acc = 0;
    for (int n = 0; n < N; n++) for (int p = 0; p < P; p++) for (int q = 0; q < Q; q++) {
      int h = p + r - pad, x = q + s - pad;
      if (h < 0 || h >= H || x < 0 || x >= W) continue;
      acc += (double)dy[(((size_t)n * P + p) * Q + q) * K + k] * a[(((size_t)n * H + h) * W + x) * C + c];
    }
    dw[i] = (float)acc;
  }
}
// dx[n,h,w,c] = sum over k,r,s of dy[n, h-r+pad, w-s+pad, k] * w[k,r,s,c]
__global__ void dgrad_ref(const float *dy, const float *w, float *dx, int N, int C, int H, int W, int K, int R, int pad) {
  const int P = H + 2 * pad - R + 1, Q = W + 2 * pad - R + 1;
  size_t total = (size_t)N * H * W * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    int c = i % C, x = (i / C) % W, h = (i / C / W) % H, n = i / C / W / H;
    double acc = 0;
    for (int r = 0; r < R; r++) for (int s = 0; s < R; s++) {
      int p = h - r + pad, q = x - s + pad;
      if (p < 0 || p >= P || q < 0 || q >= Q) continue;
      const float *dp = dy + (((size_t)n * P + p) * Q + q) * K;
      for (int k = 0; k < K; k++) acc += (double)dp[k] * w[(((size_t)k * R + r) * R + s) * C + c];
    }
    dx[i] = (float)acc;
  }
}

static std::vector<float> host_float(const void *p, size_t n, bool half) {
  std::vector<float> v(n);
  if (half) {
    std::vector<__half> h(n);
    CK(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) v[i] = __half2float(h[i]);
  } else {
    CK(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost));
  }
  return v;
}
// The error measure: max |got - ref| / max |ref| (elementwise relative error is meaningless near zero);
// a NaN in `got` (the poison left where an engine wrote nothing) reads as inf.
static double rel_err(const std::vector<float> &got, const std::vector<double> &ref) {
  double m = 0, s = 0;
  for (size_t i = 0; i < ref.size(); i++) {
    if (!(fabs((double)got[i]) < INFINITY)) return INFINITY;
    m = fmax(m, fabs(got[i] - ref[i])); s = fmax(s, fabs(ref[i]));
  }
  return m / (s > 0 ? s : 1);
}
static std::vector<double> to_double(const std::vector<float> &v) { return std::vector<double>(v.begin(), v.end()); }
static std::string fmt(const char *name, double e) { char b[48]; snprintf(b, sizeof b, "%s %.2g ", name, e); return b; }
// Per-channel sum and sum of squares of an NHWC tensor (channel fastest), in float64.
static void channel_sums(const std::vector<float> &y, int K, std::vector<double> &s, std::vector<double> &q) {
  s.assign(K, 0); q.assign(K, 0);
  for (size_t i = 0; i < y.size(); i++) { double v = y[i]; s[i % K] += v; q[i % K] += v * v; }
}

// ---------------------------------------------------------------------------------------------------

struct shape_t { int C, K, HW, R; };

static const char *summary_cell(const result_t &r, char *b, size_t n) {
  if (r.ms >= 0) snprintf(b, n, "%.1f us (engine %d%s, %s, knobs %s)", r.ms * 1e3, r.engine, r.runtime ? " rt" : "", r.src.c_str(), r.knobs.c_str());
  else snprintf(b, n, "none (A:%d B:%d FB:%d, global: %d/%d)", r.heur[0], r.heur[1], r.heur[2], r.g_built, r.g_tried);
  return b;
}

int main(int argc, char **argv) {
  verbose = getenv("VERBOSE") != NULL;
  const int N = argc > 1 ? atoi(argv[1]) : 64;
  int ndev = 0;
  cudaError_t de = cudaGetDeviceCount(&ndev);
  if (de != cudaSuccess || ndev == 0) {
    printf("no CUDA device (%s)\n", de != cudaSuccess ? cudaGetErrorString(de) : "count 0");
    return 1;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  cudnnStatus_t cs = cudnnCreate(&H);
  if (!ok(cs)) { printf("no cuDNN handle: %s\n", cudnnGetErrorString(cs)); return 1; }
  printf("cuDNN %zu (built against %d), device %s, compute capability %d.%d, batch %d\n", cudnnGetVersion(), CUDNN_VERSION,
         prop.name, prop.major, prop.minor, N);
  printf("(cuDNN's own log: CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=stderr; every refused config: VERBOSE=1)\n");

  const shape_t shapes[4] = {{64, 64, 32, 3}, {128, 128, 16, 3}, {256, 256, 8, 3}, {64, 256, 32, 1}};
  std::vector<std::string> summary;
  for (const shape_t &sh : shapes) {
    const int C = sh.C, K = sh.K, S = sh.HW, R = sh.R, pad = R / 2;
    const size_t nx = (size_t)N * C * S * S, ny = (size_t)N * K * S * S, nw = (size_t)K * C * R * R;
    printf("\n== C %d -> K %d, %dx%d, %dx%d filter\n", C, K, S, S, R, R);
    // ---- buffers (uids: see the tensors below)
    __half *x, *w, *y, *dy, *dw, *dx, *sh_, *bh;
    float *sf, *bf, *sum, *sq, *mean, *invstd, *bnscale, *bnbias, *dscale, *dbias, *eqdy, *eqx, *eqb;
    CK(cudaMalloc(&x, nx * 2)); CK(cudaMalloc(&w, nw * 2)); CK(cudaMalloc(&y, ny * 2)); CK(cudaMalloc(&dy, ny * 2));
    CK(cudaMalloc(&dw, nw * 4)); CK(cudaMalloc(&dx, nx * 2)); CK(cudaMalloc(&sh_, C * 2)); CK(cudaMalloc(&bh, C * 2));
    float **fl[] = {&sf, &bf, &mean, &invstd, &bnscale, &bnbias, &dscale, &dbias, &eqdy, &eqx, &eqb};
    for (float **p : fl) CK(cudaMalloc(p, C * 4));
    CK(cudaMalloc(&sum, K * 4)); CK(cudaMalloc(&sq, K * 4));
    fill_half<<<1024, 256>>>(x, nx, 1, -2.f, 2.f);
    fill_half<<<1024, 256>>>(dy, ny, 2, -1.f, 1.f);
    fill_half<<<256, 256>>>(w, nw, 3, -0.1f, 0.1f);
    fill_half<<<1, 256>>>(sh_, C, 4, 0.5f, 1.5f);
    fill_half<<<1, 256>>>(bh, C, 5, -0.3f, 0.3f);
    CK(cudaDeviceSynchronize());
    // FLOAT copies of the same scale and bias values, and the BN-backward inputs (FLOAT, as the sample)
    std::vector<float> hs = host_float(sh_, C, true), hb = host_float(bh, C, true), hm(C), hv(C), hbs(C), hbb(C);
    for (int c = 0; c < C; c++) { hm[c] = 0.2f * sinf(c + 1.f); hv[c] = 1.f + 0.2f * cosf(3.f * c); hbs[c] = hs[c]; hbb[c] = hb[c]; }
    CK(cudaMemcpy(sf, hs.data(), C * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(bf, hb.data(), C * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(mean, hm.data(), C * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(invstd, hv.data(), C * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(bnscale, hbs.data(), C * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(bnbias, hbb.data(), C * 4, cudaMemcpyHostToDevice));

    // ---- the reference, once per shape
    float *xf, *af, *wf, *dyf, *r_y0, *r_y, *r_dw0, *r_dw, *r_g;
    CK(cudaMalloc(&xf, nx * 4)); CK(cudaMalloc(&af, nx * 4)); CK(cudaMalloc(&wf, nw * 4)); CK(cudaMalloc(&dyf, ny * 4));
    CK(cudaMalloc(&r_y0, ny * 4)); CK(cudaMalloc(&r_y, ny * 4)); CK(cudaMalloc(&r_dw0, nw * 4)); CK(cudaMalloc(&r_dw, nw * 4));
    CK(cudaMalloc(&r_g, nx * 4));
    half_to_float<<<1024, 256>>>(x, xf, nx); half_to_float<<<1024, 256>>>(w, wf, nw); half_to_float<<<1024, 256>>>(dy, dyf, ny);
    sbr_ref<<<1024, 256>>>(x, sf, bf, af, nx, C);
    conv_ref<<<2048, 256>>>(xf, wf, r_y0, N, C, S, S, K, R, pad);
    conv_ref<<<2048, 256>>>(af, wf, r_y, N, C, S, S, K, R, pad);
    wgrad_ref<<<(unsigned)((nw + 255) / 256), 256>>>(xf, dyf, r_dw0, N, C, S, S, K, R, pad);
    wgrad_ref<<<(unsigned)((nw + 255) / 256), 256>>>(af, dyf, r_dw, N, C, S, S, K, R, pad);
    dgrad_ref<<<2048, 256>>>(dyf, wf, r_g, N, C, S, S, K, R, pad);
    CK(cudaDeviceSynchronize());
    const std::vector<double> RY0 = to_double(host_float(r_y0, ny, false)), RY = to_double(host_float(r_y, ny, false));
    const std::vector<double> RDW0 = to_double(host_float(r_dw0, nw, false)), RDW = to_double(host_float(r_dw, nw, false));
    const std::vector<float> G = host_float(r_g, nx, false), HX = host_float(x, nx, true);
    std::vector<double> S0, Q0, S1, Q1;
    channel_sums(host_float(r_y0, ny, false), K, S0, Q0);
    channel_sums(host_float(r_y, ny, false), K, S1, Q1);
    // dgrad+drelu (the sample's "Dgrad Drelu Graph": the ReLU's input is X itself)
    std::vector<double> DXR(nx);
    for (size_t i = 0; i < nx; i++) DXR[i] = HX[i] > 0 ? G[i] : 0;
    // Dgrad Drelu DBNweight: the ReLU's input recomputed as ((x + sign*mean) * invstd) * scale + bias; then
    // BN-weight's own definition: dbias = sum dx, dscale = sum dx * (x - mean) * invstd.
    auto dbn_ref = [&](float sign, std::vector<double> &dxr, std::vector<double> &ds, std::vector<double> &db) {
      dxr.assign(nx, 0); ds.assign(C, 0); db.assign(C, 0);
      for (size_t i = 0; i < nx; i++) {
        const int c = i % C;
        const double bn = ((HX[i] + sign * hm[c]) * (double)hv[c]) * hbs[c] + hbb[c];
        dxr[i] = bn > 0 ? G[i] : 0;
        db[c] += dxr[i]; ds[c] += dxr[i] * (HX[i] - hm[c]) * hv[c];
      }
    };
    std::vector<double> DXs, DSs, DBs, DXg, DSg, DBg;
    dbn_ref(+1, DXs, DSs, DBs);
    dbn_ref(-1, DXg, DSg, DBg);

    // ---- tensors. uids: 1 x, 2 w, 3 y, 4 sum, 5 sq, 6/7 scale/bias half, 8/9 scale/bias float, 10 dy,
    // 11 dw, 12 dx, 13 mean, 14 invstd, 15 bn scale, 16 bn bias, 17-21 dscale, dbias, eq_dy, eq_x, eq_bias;
    // 100+ virtual.
    const cudnnDataType_t HF = CUDNN_DATA_HALF, FL = CUDNN_DATA_FLOAT;
    D conv = convdesc(pad);
    auto X = [&] { return tensor(1, HF, N, C, S, S, false); };
    auto Wt = [&] { return tensor(2, HF, K, C, R, R, false); };
    auto Yt = [&] { return tensor(3, HF, N, K, S, S, false); };
    auto SUM = [&] { return tensor(4, FL, 1, K, 1, 1, false); };
    auto SQ = [&] { return tensor(5, FL, 1, K, 1, 1, false); };
    auto DY = [&] { return tensor(10, HF, N, K, S, S, false); };
    auto DW = [&] { return tensor(11, HF, K, C, R, R, false); };
    auto DX = [&] { return tensor(12, HF, N, C, S, S, false); };
    auto chan = [&](int64_t uid, cudnnDataType_t dt) { return tensor(uid, dt, 1, C, 1, 1, false); };
    int64_t vuid = 100;
    auto V = [&](cudnnDataType_t dt) { return tensor(vuid++, dt, N, C, S, S, true); };

    // check helpers
    auto check_y = [&](const std::vector<double> &ref) { return fmt("Y", rel_err(host_float(y, ny, true), ref)); };
    auto check_st = [&](const std::vector<double> &rs, const std::vector<double> &rq) {
      return fmt("sum", rel_err(host_float(sum, K, false), rs)) + fmt("sqsum", rel_err(host_float(sq, K, false), rq));
    };
    auto check_dbn = [&](bool half_out, const std::vector<double> &rdx, const std::vector<double> &rds, const std::vector<double> &rdb) {
      return fmt("dX", rel_err(host_float(dx, nx, true), rdx)) + fmt("dscale", rel_err(host_float(dscale, C, half_out), rds)) +
             fmt("dbias", rel_err(host_float(dbias, C, half_out), rdb));
    };
    const out_t oY = {y, ny * 2}, oSum = {sum, (size_t)K * 4}, oSq = {sq, (size_t)K * 4}, oDW = {dw, nw * 2}, oDX = {dx, nx * 2};
    std::vector<out_t> oBN = {{dscale, (size_t)C * 4}, {dbias, (size_t)C * 4}, {eqdy, (size_t)C * 4}, {eqx, (size_t)C * 4}, {eqb, (size_t)C * 4}};

    std::vector<pattern_t> pats;
    // controls: plain conv, conv + GenStats
    pats.push_back({"conv", {conv_op(0, conv, X(), Wt(), Yt())}, {1, 2, 3}, {x, w, y}, {oY}, [&] { return check_y(RY0); }});
    {
      D y_ = Yt();
      pats.push_back({"conv+gs", {conv_op(0, conv, X(), Wt(), y_), genstats(y_, SUM(), SQ())}, {1, 2, 3, 4, 5}, {x, w, y, sum, sq},
                      {oY, oSum, oSq}, [&] { return check_y(RY0) + check_st(S0, Q0); }});
    }
    // SBRCS: fprop.cpp's graph. HALF scale/bias [1,C,1,1]; FLOAT virtual intermediates; HALF Y; FLOAT sums.
    // sbrcs-f32sb: the same with FLOAT scale/bias, as cudnn_fusion built it.
    for (int f32 = 0; f32 < 2; f32++) {
      D x_ = X(), t1 = V(FL), t2 = V(FL), t3 = V(FL), y_ = Yt();
      D s_ = f32 ? chan(8, FL) : chan(6, HF), b_ = f32 ? chan(9, FL) : chan(7, HF);
      pats.push_back({f32 ? "sbrcs-f32sb" : "sbrcs",
                      {pw(CUDNN_POINTWISE_MUL, x_, s_, t1), pw(CUDNN_POINTWISE_ADD, t1, b_, t2), pw(CUDNN_POINTWISE_RELU_FWD, t2, NULL, t3),
                       conv_op(0, conv, t3, Wt(), y_), genstats(y_, SUM(), SQ())},
                      {1, 2, 3, 4, 5, f32 ? 8 : 6, f32 ? 9 : 7}, {x, w, y, sum, sq, f32 ? (void *)sf : (void *)sh_, f32 ? (void *)bf : (void *)bh},
                      {oY, oSum, oSq}, [&] { return check_y(RY) + check_st(S1, Q1); }});
    }
    // control: plain wgrad
    pats.push_back({"wgrad", {conv_op(2, conv, X(), DY(), DW())}, {1, 10, 11}, {x, dy, dw}, {oDW},
                    [&] { return fmt("dW", rel_err(host_float(dw, nw, true), RDW0)); }});
    // ConvBNwgrad: wgrads.cpp's "scale-bias-relu-wgrad" graph. HALF S, B; the sample's intermediate type is
    // HALF, so the three virtual tensors are HALF; dW HALF. -f32v: FLOAT virtuals (cudnn_fusion's way).
    for (int f32 = 0; f32 < 2; f32++) {
      const cudnnDataType_t vt = f32 ? FL : HF;
      D t1 = V(vt), t2 = V(vt), t3 = V(vt);
      pats.push_back({f32 ? "sbr-wgrad-f32v" : "sbr-wgrad",
                      {pw(CUDNN_POINTWISE_MUL, X(), chan(6, HF), t1), pw(CUDNN_POINTWISE_ADD, t1, chan(7, HF), t2),
                       pw(CUDNN_POINTWISE_RELU_FWD, t2, NULL, t3), conv_op(2, conv, t3, DY(), DW())},
                      {1, 10, 11, 6, 7}, {x, dy, dw, sh_, bh}, {oDW}, [&] { return fmt("dW", rel_err(host_float(dw, nw, true), RDW)); }});
    }
    // controls: dgrad; dgrad + drelu (dgrads.cpp "Dgrad Drelu Graph": FLOAT virtual dgrad output, X HALF)
    pats.push_back({"dgrad", {conv_op(1, conv, DY(), Wt(), DX())}, {10, 2, 12}, {dy, w, dx}, {oDX},
                    [&] { return fmt("dX", rel_err(host_float(dx, nx, true), to_double(G))); }});
    {
      D g_ = V(FL);
      pats.push_back({"dgrad+drelu", {conv_op(1, conv, DY(), Wt(), g_), pw(CUDNN_POINTWISE_RELU_BWD, g_, X(), DX())}, {10, 2, 12, 1},
                      {dy, w, dx, x}, {oDX}, [&] { return fmt("dX", rel_err(host_float(dx, nx, true), DXR)); }});
    }
    // Dgrad Drelu DBNweight (dgrads.cpp): dgrad → (virtual FLOAT) → ReLU backward against the BN output
    // recomputed from X with FLOAT mean, inv_variance, scale, bias ((X + M) * V * S + B, virtual FLOAT);
    // its output dX is a non-virtual HALF output and feeds BN_BWD_WEIGHTS with X, M, V, S.
    //   -sample: BN-weight outputs HALF (the sample sets no type: the io type), mean added with alpha2 = 1
    //   -f32:    FLOAT outputs (the guide), alpha2 = 1
    //   -guide:  FLOAT outputs, alpha2 = -1 (the guide: the add subtracts the mean)
    for (int variant = 0; variant < 3; variant++) {
      const cudnnDataType_t ot = variant == 0 ? HF : FL;
      const float a2 = variant == 2 ? -1.f : 1.f;
      D g_ = V(FL), p1 = V(FL), p2 = V(FL), p3 = V(FL), p4 = V(FL), x_ = X(), dx_ = DX();
      D m_ = chan(13, FL), v_ = chan(14, FL), s_ = chan(15, FL), b_ = chan(16, FL);
      static const char *names[3] = {"dgdrbnw-sample", "dgdrbnw-f32", "dgdrbnw-guide"};
      pats.push_back({names[variant],
                      {conv_op(1, conv, DY(), Wt(), g_), pw(CUDNN_POINTWISE_ADD, x_, m_, p1, a2), pw(CUDNN_POINTWISE_MUL, p1, v_, p2),
                       pw(CUDNN_POINTWISE_MUL, p2, s_, p3), pw(CUDNN_POINTWISE_ADD, p3, b_, p4), pw(CUDNN_POINTWISE_RELU_BWD, g_, p4, dx_),
                       bn_bwd_weights(dx_, x_, m_, v_, s_, chan(17, ot), chan(18, ot), chan(19, ot), chan(20, ot), chan(21, ot))},
                      {10, 2, 1, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21},
                      {dy, w, x, dx, mean, invstd, bnscale, bnbias, dscale, dbias, eqdy, eqx, eqb},
                      {oDX, oBN[0], oBN[1], oBN[2], oBN[3], oBN[4]},
                      [&, variant] { return variant == 2 ? check_dbn(false, DXg, DSg, DBg) : check_dbn(variant == 0, DXs, DSs, DBs); }});
    }

    // ---- probe each pattern, then the summary lines
    std::vector<result_t> res;
    for (const pattern_t &pt : pats) res.push_back(probe(pt));
    char head[128];
    snprintf(head, sizeof head, "C %d -> K %d, %dx%d, %dx%d", C, K, S, S, R, R);
    summary.push_back(head);
    for (size_t i = 0; i < pats.size(); i++) {
      char cell[512];
      std::string line = std::string("  ") + pats[i].name + std::string(16 - std::min<size_t>(15, strlen(pats[i].name)), ' ') + summary_cell(res[i], cell, sizeof cell);
      if (res[i].ms >= 0 && !res[i].check.empty()) line += "  | " + res[i].check;
      summary.push_back(line);
      if (res[i].ms < 0) {
        if (!res[i].why_heur.empty()) summary.push_back("      first refusal (heuristics): " + res[i].why_heur);
        if (!res[i].why_global.empty()) summary.push_back("      first refusal (global):     " + res[i].why_global);
      }
    }
    for (auto p : {(void *)x, (void *)w, (void *)y, (void *)dy, (void *)dw, (void *)dx, (void *)sh_, (void *)bh, (void *)sum, (void *)sq,
                   (void *)xf, (void *)af, (void *)wf, (void *)dyf, (void *)r_y0, (void *)r_y, (void *)r_dw0, (void *)r_dw, (void *)r_g})
      cudaFree(p);
    for (float **p : fl) cudaFree(*p);
  }
  printf("\n== summary (best us: median of 15 replays of a CUDA graph of 10 executions; rt = runtime-compiled engine;\n"
         "   A#i/B#i/FB#i: i-th config of heuristics mode A/B/FALLBACK, gN: global engine N with default knobs;\n"
         "   knobs kT=V: CUDNN_KNOB_TYPE T = V; A:-1 etc.: that mode's query itself failed; global: built/tried;\n"
         "   errors: max|got-ref| / max|ref|, inf: NaN left where the engine wrote nothing)\n");
  for (const std::string &l : summary) printf("%s\n", l.c_str());
  return 0;
}
