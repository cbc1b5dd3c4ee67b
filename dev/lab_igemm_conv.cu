// lab_igemm_conv — the kernel lab of issue #34's item 4: lamina's own implicit-GEMM convolution on tensor cores
// (fp16 NHWC activations, KRSC filters, fp32 sums), forward, with the previous BatchNorm's scale + bias + ReLU
// applied while its input tile is loaded (the prologue) and the per-channel sum and sum of squares of its output
// summed in its epilogue (what the next BatchNorm's statistics need); and the weight gradient with the same prologue
// on its input; each timed shape by shape against cuDNN's own forward and backward-filter algorithms on the same
// tensors.
//
// Why: cuDNN's fused conv-BN engines cost about as much as the passes they fold in once the weight gradient's
// prologue is counted (docs/bench/JOURNAL.md, 2026-12-07's budget), so the step's BatchNorm passes can only go if a
// convolution of lamina's own carries them for free. This lab answers the first question of that route: how close
// does a plain mma.sync implicit GEMM get to cuDNN's kernels on these shapes, and what do the prologue and the
// statistics cost on top of it.
//
// The kernel (v1): a block computes 128 output pixels × 64 output channels; the reduction (R·S·C, tap-major as
// KRSC stores it) goes in steps of 64 (one tap's 64 channels: C must be a multiple of 64, K too); 8 warps of
// 32 × 32; A and B tiles staged through registers (where the prologue is applied: padding stays zero, as it is
// after the activation) into XOR-swizzled shared memory, double-buffered, read with ldmatrix;
// mma.sync.m16n8k16 with fp32 accumulators. The epilogue stores the fp16 output and, with STATS, sums the stored
// (rounded) values and their squares per channel: warp shuffles, then shared memory across the block's warps,
// then one float atomicAdd per channel and block. v2 keeps the tiles and the epilogue but fills shared memory by
// cp.async, three stages deep, and runs the prologue on the A fragments after ldmatrix in half2 arithmetic, the
// padding's rows masked back to zero; each version is checked against a reference that rounds as it does.
//
// Checked against a float64 reference computed on the GPU (every output element, and the sums), then timed: 3
// warm-up calls, the median of 15 CUDA-graph replays of 10 calls each. cuDNN's side: the legacy forward call
// lamina makes (NHWC half, FLOAT compute, tensor-op math), the fastest of cudnnFindConvolutionForwardAlgorithm's
// algorithms. v3 is the same GEMM on Hopper's warp-group MMA and tensor-memory accelerator. This file holds the
// references, the checks, the timers, the unfused passes and main; the kernels are in its headers: lab_igemm.cuh
// (shared), lab_igemm_mma.cuh (v1, v2, the mma.sync weight gradient), lab_igemm_tma.cuh (Hopper's plumbing),
// lab_igemm_fwd3.cuh and lab_igemm_wgrad3.cuh (v3), lab_wgmma.cuh (generated). Not part of the build:
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -std=c++17 dev/lab_igemm_conv.cu -lcudnn -o /tmp/lab_igemm_conv
//   /tmp/lab_igemm_conv [N] [fwd|wgrad]     (batch, default 512; fwd: the forward's v2 and v3 only; wgrad: the
//   weight gradients only)
#include "lab_igemm.cuh"
#include "lab_igemm_mma.cuh"
#include "lab_igemm_fwd3.cuh"
#include "lab_igemm_wgrad3.cuh"

__global__ void to_half2(int C, const float *f, half2 *h) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < C / 2) h[i] = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
}

// ---- the float64 reference: one thread per output element; then the channel sums of the rounded outputs ----
__global__ void ref_fwd(conv_shape s, const half *x, const half *w, const float *scale, const float *bias, int pro,
                        double *yref) {
  const size_t M = (size_t)s.N * s.H * s.W, i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= M * s.K) return;
  const int k = (int)(i % s.K);
  const size_t m = i / s.K;
  const int n = (int)(m / (s.H * s.W)), rem = (int)(m % (s.H * s.W)), h = rem / s.W, wc = rem % s.W;
  double a = 0.0;
  for (int r = 0; r < s.R; r++)
    for (int t = 0; t < s.S; t++) {
      const int ih = h + r - s.pad, iw = wc + t - s.pad;
      if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
      const half *xp = x + (((size_t)n * s.H + ih) * s.W + iw) * s.C;
      const half *wp = w + (((size_t)k * s.R + r) * s.S + t) * s.C;
      for (int c = 0; c < s.C; c++) {
        float v = __half2float(xp[c]);
        if (pro == 1) v = __half2float(__float2half_rn(fmaxf(fmaf(v, scale[c], bias[c]), 0.0f))); // as v1 rounds
        if (pro == 2) v = __half2float(__hmax(__hfma(__float2half_rn(v), __float2half_rn(scale[c]), __float2half_rn(bias[c])),
                                              __float2half_rn(0.0f))); // as v2: half arithmetic
        a += (double)v * (double)__half2float(wp[c]);
      }
    }
  yref[i] = a;
}

// dW's float64 reference: one thread per element of dW (k, r, s, c), over every pixel
__global__ void ref_wgrad(conv_shape s, const half *x, const half *dy, const float *scale, const float *bias, int pro,
                          double *ref) {
  const size_t Kred = (size_t)s.R * s.S * s.C, i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= (size_t)s.K * Kred) return;
  const int k = (int)(i / Kred), j = (int)(i % Kred), c = j % s.C, tap = j / s.C, r = tap / s.S, t = tap % s.S;
  double a = 0.0;
  for (int n = 0; n < s.N; n++)
    for (int h = 0; h < s.H; h++)
      for (int wc = 0; wc < s.W; wc++) {
        const int ih = h + r - s.pad, iw = wc + t - s.pad;
        if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
        float v = __half2float(x[(((size_t)n * s.H + ih) * s.W + iw) * s.C + c]);
        if (pro == 1) v = __half2float(__float2half_rn(fmaxf(fmaf(v, scale[c], bias[c]), 0.0f))); // as v1 rounds
        if (pro == 2) v = __half2float(__hmax(__hfma(__float2half_rn(v), __float2half_rn(scale[c]), __float2half_rn(bias[c])),
                                              __float2half_rn(0.0f))); // as v3: half arithmetic
        a += (double)v * (double)__half2float(dy[(((size_t)n * s.H + h) * s.W + wc) * s.K + k]);
      }
  ref[i] = a;
}

__global__ void fill_half(half *p, size_t n, uint64_t seed, float lo, float hi) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull, z = (z ^ (z >> 27)) * 0x94D049BB133111EBull, z ^= z >> 31;
  p[i] = __float2half_rn(lo + (hi - lo) * (float)(z >> 40) / 16777216.0f);
}

static float median15(float *t) {
  for (int i = 1; i < 15; i++) for (int j = i; j > 0 && t[j] < t[j - 1]; j--) { float v = t[j]; t[j] = t[j - 1]; t[j - 1] = v; }
  return t[7];
}
// ten() issues 10 calls: 3 warm-up rounds, then the median of 15, per call, in µs
template <typename F> static float ten_us(cudaStream_t st, F ten) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  float t[15];
  for (int i = 0; i < 18; i++) {
    CK(cudaEventRecord(e0, st)); ten(); CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
    if (i >= 3) { CK(cudaEventElapsedTime(&t[i - 3], e0, e1)); t[i - 3] *= 100.0f; } // ms / 10 calls → µs
  }
  CK(cudaEventDestroy(e0)); CK(cudaEventDestroy(e1));
  return median15(t);
}
// 10 calls issued on the stream (for calls a graph cannot hold)
template <typename F> static float stream_us(cudaStream_t st, F call) {
  return ten_us(st, [&] { for (int i = 0; i < 10; i++) call(); });
}
// 10 calls in a CUDA graph, the graph replayed
template <typename F> static float graph_us(cudaStream_t st, F call) {
  cudaGraph_t g;
  cudaGraphExec_t gx;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < 10; i++) call();
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&gx, g, 0));
  const float us = ten_us(st, [&] { CK(cudaGraphLaunch(gx, st)); });
  CK(cudaGraphExecDestroy(gx)); CK(cudaGraphDestroy(g));
  return us;
}

// The fastest of cuDNN's found algorithms (perf, got: what cudnnFind* returned); call(algo, ws, bytes) makes one
// call and returns its status. Each is called once outside a graph first, so a failing one is reported, not timed
// (a capture hides its status), then timed in a graph, or on the stream where its capture failed.
template <typename P, typename F>
static float fastest(cudaStream_t st, const char *what, const P *perf, int got, int *algo, F call) {
  float best = -1;
  *algo = -1;
  for (int i = 0; i < got; i++) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    void *ws = NULL;
    if (perf[i].memory) CK(cudaMalloc(&ws, perf[i].memory));
    const auto a = perf[i].algo;
    const size_t bytes = perf[i].memory;
    cudnnStatus_t e = call(a, ws, bytes);
    CK(cudaStreamSynchronize(st));
    float us = -1;
    if (e != CUDNN_STATUS_SUCCESS) {
      printf("  cuDNN %s algo %d: %s\n", what, (int)a, cudnnGetErrorString(e));
    } else {
      us = graph_us(st, [&] {
        const cudnnStatus_t c = call(a, ws, bytes);
        if (c != CUDNN_STATUS_SUCCESS) e = c;
      });
      if (e != CUDNN_STATUS_SUCCESS) {
        us = stream_us(st, [&] { call(a, ws, bytes); });
        printf("  cuDNN %s algo %d: %s in a graph's capture; %.1f us on the stream\n", what, (int)a,
               cudnnGetErrorString(e), us);
      }
    }
    if (us >= 0 && (best < 0 || us < best)) best = us, *algo = (int)a;
    if (ws) CK(cudaFree(ws));
  }
  return best;
}

// ---- the passes the fusion takes away, as an unfused step runs them beside cuDNN's convolution ----
// BatchNorm's apply + ReLU over the convolution's input (read x, write a = relu(scale·x + bias), fp16 as lamina's
// bn_act stores it), and the statistics pass over its output (each channel's sum and sum of squares); 16 bytes a
// thread a step, grid-stride, the statistics reduced in shared memory and added by one atomic per channel and block.
__global__ void pass_bn_apply(size_t chunks, int C, const uint4 *__restrict__ x, const half2 *__restrict__ sc2,
                              const half2 *__restrict__ bi2, uint4 *__restrict__ a) {
  const size_t step = (size_t)gridDim.x * blockDim.x; // a multiple of C/8: a thread's 8 channels stay the same
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= chunks) return;
  const int g = (int)(i % (C / 8)) * 4;
  half2 sc[4], bi[4];
  for (int j = 0; j < 4; j++) sc[j] = sc2[g + j], bi[j] = bi2[g + j];
  const half2 zero = __float2half2_rn(0.0f);
  for (; i < chunks; i += step) {
    uint4 v = x[i];
    half2 *h = (half2 *)&v;
#pragma unroll
    for (int j = 0; j < 4; j++) h[j] = __hmax2(__hfma2(h[j], sc[j], bi[j]), zero);
    a[i] = v;
  }
}
__global__ void pass_stats(size_t rows, int K, const uint4 *__restrict__ y, float *__restrict__ sum, float *__restrict__ sqsum) {
  extern __shared__ float sh[]; // 2·K
  const int groups = K / 8, g = threadIdx.x % groups, r0 = threadIdx.x / groups, rstep = blockDim.x / groups;
  for (int i = threadIdx.x; i < 2 * K; i += blockDim.x) sh[i] = 0.0f;
  __syncthreads();
  float s8[8] = {}, q8[8] = {};
  const size_t rs = (size_t)gridDim.x * rstep;
  if (r0 < rstep)
    for (size_t r = (size_t)blockIdx.x * rstep + r0; r < rows; r += 4 * rs) { // four loads in flight
      uint4 v[4];
#pragma unroll
      for (int u = 0; u < 4; u++) v[u] = r + u * rs < rows ? y[(r + u * rs) * groups + g] : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < 4; u++) {
        const half2 *h = (const half2 *)&v[u];
#pragma unroll
        for (int j = 0; j < 4; j++) {
          const float2 f = __half22float2(h[j]);
          s8[2 * j] += f.x, s8[2 * j + 1] += f.y, q8[2 * j] += f.x * f.x, q8[2 * j + 1] += f.y * f.y;
        }
      }
    }
  for (int j = 0; j < 8; j++) atomicAdd(&sh[g * 8 + j], s8[j]), atomicAdd(&sh[K + g * 8 + j], q8[j]);
  __syncthreads();
  for (int i = threadIdx.x; i < 2 * K; i += blockDim.x) atomicAdd((i < K ? sum : sqsum) + i % K, sh[i]);
}

// max |y - ref| and max |ref| over every output element, on the device (an element left NaN, never written, counts
// as infinite); non-negative doubles order as their bit patterns do, so one atomicMax each
__global__ void max_err(size_t n, const half *y, const double *ref, unsigned long long *out) {
  __shared__ double se[256], sm[256];
  double e = 0.0, m = 0.0;
  for (size_t i = (size_t)blockIdx.x * 256 + threadIdx.x; i < n; i += (size_t)gridDim.x * 256) {
    double d = fabs((double)__half2float(y[i]) - ref[i]);
    if (!(d <= 1e300)) d = INFINITY;
    e = fmax(e, d), m = fmax(m, fabs(ref[i]));
  }
  se[threadIdx.x] = e, sm[threadIdx.x] = m;
  __syncthreads();
  for (int o = 128; o > 0; o >>= 1) {
    if (threadIdx.x < o) se[threadIdx.x] = fmax(se[threadIdx.x], se[threadIdx.x + o]), sm[threadIdx.x] = fmax(sm[threadIdx.x], sm[threadIdx.x + o]);
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicMax(out, (unsigned long long)__double_as_longlong(se[0])), atomicMax(out + 1, (unsigned long long)__double_as_longlong(sm[0]));
}
// channel c's sum and sum of squares of the reference rounded as the kernels store it, and the sum of its |·| (the
// scale of the sum's error): out[c], out[K + c], out[2K + c]; one block a channel
__global__ void ref_sums(conv_shape s, const double *ref, double *out) {
  __shared__ double r3[3][256];
  const size_t M = (size_t)s.N * s.H * s.W;
  const int c = blockIdx.x;
  double a = 0.0, q = 0.0, b = 0.0;
  for (size_t m = threadIdx.x; m < M; m += 256) {
    const double r = (double)__half2float(__float2half_rn((float)ref[m * s.K + c]));
    a += r, q += r * r, b += fabs(r);
  }
  r3[0][threadIdx.x] = a, r3[1][threadIdx.x] = q, r3[2][threadIdx.x] = b;
  __syncthreads();
  for (int o = 128; o > 0; o >>= 1) {
    if (threadIdx.x < o)
      for (int k = 0; k < 3; k++) r3[k][threadIdx.x] += r3[k][threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[c] = r3[0][0], out[s.K + c] = r3[1][0], out[2 * s.K + c] = r3[2][0];
}

// max |got - ref| over max |ref|, the outputs; each sum's error over the sum of its terms' magnitudes (|y| for the
// sums, y² for the squares), against ref_sums' rsums
static void check(const conv_shape &s, const half *dy, const double *dref, const double *drsums, const float *dsum,
                  bool stats, double *err_y, double *err_s) {
  const size_t n = (size_t)s.N * s.H * s.W * s.K;
  unsigned long long *d, h[2];
  CK(cudaMalloc(&d, sizeof h));
  CK(cudaMemset(d, 0, sizeof h));
  max_err<<<1024, 256>>>(n, dy, dref, d);
  CK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  double e, mx;
  memcpy(&e, &h[0], 8), memcpy(&mx, &h[1], 8);
  *err_y = e / mx, *err_s = 0.0;
  if (!stats) return;
  std::vector<float> su(2 * (size_t)s.K);
  std::vector<double> rs(3 * (size_t)s.K);
  CK(cudaMemcpy(su.data(), dsum, su.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(rs.data(), drsums, rs.size() * sizeof(double), cudaMemcpyDeviceToHost));
  double es = 0.0;
  for (size_t c = 0; c < su.size(); c++) {
    double d = fabs(su[c] - rs[c]) / (c < (size_t)s.K ? rs[2 * s.K + c] : rs[c]);
    if (!(d <= 1e300)) d = INFINITY;
    es = fmax(es, d);
  }
  *err_s = es;
}

// max |got - ref| over max |ref| for dW
static double check_wgrad(size_t n, const float *ddw, const double *dref) {
  std::vector<float> g(n);
  std::vector<double> ref(n);
  CK(cudaMemcpy(g.data(), ddw, n * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(ref.data(), dref, n * sizeof(double), cudaMemcpyDeviceToHost));
  double e = 0.0, mx = 0.0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)g[i] - ref[i]);
    if (!(d <= 1e300)) d = INFINITY;
    e = fmax(e, d), mx = fmax(mx, fabs(ref[i]));
  }
  return e / mx;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0); // each line out as it is printed: a crash or a timeout keeps what was measured
  const int N = argc > 1 ? atoi(argv[1]) : 512;
  // fwd: the forward kernels only, v2 and v3 (no v1, no weight gradient); wgrad: cuDNN's forward and the weight
  // gradients only
  const bool fwd_only = argc > 2 && !strcmp(argv[2], "fwd"), wgrad_only = argc > 2 && !strcmp(argv[2], "wgrad");
  const int first_v = fwd_only ? 2 : wgrad_only ? 3 : 1;
  const conv_shape shapes[] = {{N, 32, 32, 64, 64, 3, 3, 1}, {N, 16, 16, 128, 128, 3, 3, 1}, {N, 8, 8, 256, 256, 3, 3, 1},
                               {N, 32, 32, 64, 256, 1, 1, 0}, {N, 16, 16, 128, 64, 3, 3, 1}};
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("lab_igemm_conv: %s, cuDNN %zu, batch %d; µs a call (median of 15 graph replays of 10), TFLOP/s, "
         "error = max |lamina - float64| / max |float64|\n", prop.name, cudnnGetVersion(), N);
  cudnnHandle_t H;
  DN(cudnnCreate(&H));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  DN(cudnnSetStream(H, st));
  CK(cudaFuncSetAttribute(igemm_fwd_pipe<false, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, PIPE_SMEM));
  CK(cudaFuncSetAttribute(igemm_fwd_pipe<false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, PIPE_SMEM));
  CK(cudaFuncSetAttribute(igemm_fwd_pipe<true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, PIPE_SMEM));
  int bad = 0;
  // LAB_SHAPES=0,2: only those shapes (by index); LAB_PROFILE=1: after each shape's timings, cuDNN's fastest call and
  // lamina's fastest plain and fused kernels once more each between cudaProfilerStart and Stop, for
  // `ncu --profile-from-start off`
  const char *only = getenv("LAB_SHAPES");
  const bool profile = getenv("LAB_PROFILE") && atoi(getenv("LAB_PROFILE"));
  for (const conv_shape &s : shapes) {
    if (only) {
      char key[8];
      snprintf(key, sizeof key, "%d", (int)(&s - shapes));
      bool listed = false;
      for (const char *q = only; *q;) {
        const size_t n = strcspn(q, ",");
        listed |= n == strlen(key) && !strncmp(q, key, n);
        q += n + (q[n] == ',');
      }
      if (!listed) continue;
    }
    const size_t M = (size_t)s.N * s.H * s.W, nx = M * s.C, nw = (size_t)s.K * s.R * s.S * s.C, ny = M * s.K;
    const double flops = 2.0 * M * s.K * s.R * s.S * s.C;
    half *x, *w, *y, *y2;
    float *sc, *bi, *sum;
    double *ref;
    CK(cudaMalloc(&x, nx * 2)); CK(cudaMalloc(&w, nw * 2)); CK(cudaMalloc(&y, ny * 2)); CK(cudaMalloc(&y2, ny * 2));
    CK(cudaMalloc(&sc, s.C * 4)); CK(cudaMalloc(&bi, s.C * 4)); CK(cudaMalloc(&sum, 2 * s.K * 4)); CK(cudaMalloc(&ref, ny * 8));
    fill_half<<<(unsigned)((nx + 255) / 256), 256>>>(x, nx, 1, -2.0f, 2.0f);
    fill_half<<<(unsigned)((nw + 255) / 256), 256>>>(w, nw, 2, -0.1f, 0.1f);
    std::vector<float> hs(s.C), hb(s.C);
    for (int c = 0; c < s.C; c++) hs[c] = 0.5f + (float)((c * 37) % 64) / 64.0f, hb[c] = -0.5f + (float)((c * 11) % 32) / 32.0f;
    CK(cudaMemcpy(sc, hs.data(), s.C * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(bi, hb.data(), s.C * 4, cudaMemcpyHostToDevice));
    half2 *sc2, *bi2;
    CK(cudaMalloc(&sc2, s.C * 2)); CK(cudaMalloc(&bi2, s.C * 2));
    to_half2<<<(s.C / 2 + 255) / 256, 256>>>(s.C, sc, sc2);
    to_half2<<<(s.C / 2 + 255) / 256, 256>>>(s.C, bi, bi2);
    const bn_params bp = {sc, bi, sc2, bi2};
    printf("\nC %d -> K %d, %dx%d, %dx%d filter (%.1f MB in, %.1f MB out)\n", s.C, s.K, s.H, s.W, s.R, s.S, nx * 2e-6, ny * 2e-6);
    // correctness: each version plain, then with the prologue and the statistics, against float64 (refs[p]: the
    // reference without the prologue, with v1's float one, with v2's half one)
    double *refs[3] = {ref, NULL, NULL}, *rsums[3];
    for (int p = 1; p < 3; p++) CK(cudaMalloc(&refs[p], ny * 8));
    for (int p = 0; p < 3; p++) {
      CK(cudaMalloc(&rsums[p], 3 * (size_t)s.K * 8));
      if (wgrad_only) continue; // no forward to check
      ref_fwd<<<(unsigned)((ny + 255) / 256), 256, 0, st>>>(s, x, w, sc, bi, p, refs[p]);
      ref_sums<<<s.K, 256, 0, st>>>(s, refs[p], rsums[p]);
    }
    auto verdict = [&](const char *what, int p, bool stats) {
      CK(cudaStreamSynchronize(st));
      CK(cudaGetLastError());
      double ey, es;
      check(s, y, refs[p], rsums[p], sum, stats, &ey, &es);
      const bool good = ey < 2e-3 && (!stats || es < 1e-4);
      bad |= !good;
      printf("  check %-28s y %.2e", what, ey);
      if (stats) printf("  sums %.2e", es);
      printf("  %s\n", good ? "ok" : "FAILED");
    };
    for (int V = first_v; V <= 2; V++)
      for (int pro = 0; pro < 2; pro++) {
        CK(cudaMemsetAsync(y, 0xff, ny * 2, st)); // NaN: an element not written fails
        run(V, st, pro ? 2 : 0, s, x, w, bp, y, sum);
        char what[64];
        snprintf(what, sizeof what, "v%d %s", V, pro ? "prologue + stats" : "plain");
        verdict(what, pro ? V : 0, pro);
      }
    // v3: every tiling that fits the shape, every mode
    std::vector<const wg_variant *> wgv;
    std::vector<wg_maps> wgm;
    for (const wg_variant &v : wg_variants)
      if (!wgrad_only && wg_fits(s, 128 * v.MI, v.BN)) wgv.push_back(&v), wgm.push_back(wg_make_maps(s, 128 * v.MI, v.BN, x, w, y));
    for (size_t i = 0; i < wgv.size(); i++)
      for (int mode = 0; mode < WG_MODES; mode++) {
        CK(cudaMemsetAsync(y, 0xff, ny * 2, st));
        wgv[i]->run(mode, st, s, wgm[i], sc2, bi2, sum);
        char what[64];
        snprintf(what, sizeof what, "v3 %dx%d/%d%s %s", 128 * wgv[i]->MI, wgv[i]->BN, wgv[i]->MINB, wgv[i]->persist ? "p" : "",
                 wg_mode_name[mode]);
        verdict(what, mode >= 3 ? 2 : 0, mode == 1 || mode >= 3);
      }
    for (int p = 1; p < 3; p++) CK(cudaFree(refs[p]));
    // cuDNN: the fastest of its found algorithms on the same tensors
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    DN(cudnnCreateTensorDescriptor(&xd)); DN(cudnnCreateTensorDescriptor(&yd));
    DN(cudnnCreateFilterDescriptor(&wd)); DN(cudnnCreateConvolutionDescriptor(&cd));
    DN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, s.N, s.C, s.H, s.W));
    DN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NHWC, CUDNN_DATA_HALF, s.N, s.K, s.H, s.W));
    DN(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_HALF, CUDNN_TENSOR_NHWC, s.K, s.C, s.R, s.S));
    DN(cudnnSetConvolution2dDescriptor(cd, s.pad, s.pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    DN(cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH));
    cudnnConvolutionFwdAlgoPerf_t perf[8];
    int got = 0;
    DN(cudnnFindConvolutionForwardAlgorithm(H, xd, wd, cd, yd, 8, &got, perf));
    int algo;
    const float one = 1.0f, zero = 0.0f;
    const float best = fastest(st, "conv", perf, got, &algo, [&](cudnnConvolutionFwdAlgo_t a, void *ws, size_t bytes) {
      return cudnnConvolutionForward(H, &one, xd, x, wd, w, cd, a, ws, bytes, &zero, yd, y2);
    });
    printf("  cuDNN conv (algo %d)             %8.1f us  %6.1f TFLOP/s\n", algo, best, flops / best * 1e-6);
    for (int V = first_v; V <= 2; V++) {
      float t[3];
      for (int mode = 0; mode < 3; mode++) t[mode] = graph_us(st, [&] { run(V, st, mode, s, x, w, bp, y, sum); });
      printf("  lamina v%d plain                 %8.1f us  %6.1f TFLOP/s  %.2fx cuDNN's time\n", V, t[0],
             flops / t[0] * 1e-6, t[0] / best);
      printf("  lamina v%d + stats               %8.1f us  (+%.1f)\n", V, t[1], t[1] - t[0]);
      printf("  lamina v%d prologue + stats      %8.1f us  (+%.1f over plain)\n", V, t[2], t[2] - t[0]);
    }
    float fused = -1, plain = -1;
    int fused_v = 0, fused_mode = 3, plain_v = 0;
    for (size_t i = 0; i < wgv.size(); i++) {
      float t[WG_MODES];
      for (int mode = 0; mode < WG_MODES; mode++)
        t[mode] = graph_us(st, [&] { wgv[i]->run(mode, st, s, wgm[i], sc2, bi2, sum); });
      printf("  lamina v3 %3dx%-3d /%d%s, %d stages: SS %7.1f us %6.1f TFLOP/s %.2fx cuDNN's time; + stats %7.1f (+%.1f); "
             "RS %7.1f; RS prologue + stats %7.1f (+%.1f over SS), a k-step at a time %7.1f; SS, xform prologue + stats %7.1f (+%.1f)\n",
             128 * wgv[i]->MI, wgv[i]->BN, wgv[i]->MINB, wgv[i]->persist ? " persistent" : "", wgv[i]->stages, t[0],
             flops / t[0] * 1e-6, t[0] / best, t[1], t[1] - t[0], t[2], t[3], t[3] - t[0], t[4], t[5], t[5] - t[0]);
      for (int mode = 3; mode < WG_MODES; mode++)
        if (fused < 0 || t[mode] < fused) fused = t[mode], fused_v = (int)i, fused_mode = mode;
      if (plain < 0 || t[0] < plain) plain = t[0], plain_v = (int)i;
    }
    if (profile && !wgv.empty()) {
      size_t bytes = 0;
      void *wsp = NULL;
      DN(cudnnGetConvolutionForwardWorkspaceSize(H, xd, wd, cd, yd, (cudnnConvolutionFwdAlgo_t)algo, &bytes));
      if (bytes) CK(cudaMalloc(&wsp, bytes));
      CK(cudaStreamSynchronize(st));
      CK(cudaProfilerStart());
      DN(cudnnConvolutionForward(H, &one, xd, x, wd, w, cd, (cudnnConvolutionFwdAlgo_t)algo, wsp, bytes, &zero, yd, y2));
      wgv[plain_v]->run(0, st, s, wgm[plain_v], sc2, bi2, sum);
      wgv[fused_v]->run(fused_mode, st, s, wgm[fused_v], sc2, bi2, sum);
      CK(cudaStreamSynchronize(st));
      CK(cudaProfilerStop());
      if (wsp) CK(cudaFree(wsp));
      printf("  profiled: cuDNN conv algo %d, v3 %dx%d/%d %s, v3 %dx%d/%d %s\n", algo, 128 * wgv[plain_v]->MI, wgv[plain_v]->BN,
             wgv[plain_v]->MINB, wg_mode_name[0], 128 * wgv[fused_v]->MI, wgv[fused_v]->BN, wgv[fused_v]->MINB,
             wg_mode_name[fused_mode]);
    }
    if (!wgv.empty()) { // the unfused way: cuDNN's convolution, the apply + ReLU pass over its input, the statistics pass over its output
      int sms;
      CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
      const size_t chunks = nx / 8;
      const int ablocks = (int)std::min((size_t)sms * 8, (chunks + 255) / 256); // 256 threads: a multiple of C/8
      half *a;
      CK(cudaMalloc(&a, nx * 2));
      // checked first: a against relu(scale·x + bias) in half arithmetic on the first 2^20 values (all channels), the
      // sums of cuDNN's output against float64's of the reference (cuDNN rounds its own way: 1e-3)
      pass_bn_apply<<<ablocks, 256, 0, st>>>(chunks, s.C, (const uint4 *)x, sc2, bi2, (uint4 *)a);
      CK(cudaMemsetAsync(sum, 0, 2 * (size_t)s.K * sizeof(float), st));
      pass_stats<<<sms * 2, 256, 2 * s.K * sizeof(float), st>>>(M, s.K, (const uint4 *)y2, sum, sum + s.K);
      CK(cudaStreamSynchronize(st));
      CK(cudaGetLastError());
      {
        const size_t n = std::min(nx, (size_t)1 << 20);
        std::vector<half> hx(n), ha(n);
        CK(cudaMemcpy(hx.data(), x, n * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
        size_t wrong = 0;
        for (size_t i = 0; i < n; i++) {
          const int c = (int)(i % s.C);
          const double v = (double)__half2float(hx[i]) * __half2float(__float2half_rn(hs[c])) +
                           __half2float(__float2half_rn(hb[c])); // exact: one rounding, to half, as __hfma2 does
          const float want = fmaxf(__half2float(__double2half(v)), 0.0f);
          wrong += want != __half2float(ha[i]);
        }
        std::vector<float> su(2 * (size_t)s.K);
        std::vector<double> rs(3 * (size_t)s.K);
        CK(cudaMemcpy(su.data(), sum, su.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(rs.data(), rsums[0], rs.size() * 8, cudaMemcpyDeviceToHost));
        double es = 0.0;
        for (size_t c = 0; c < su.size(); c++) {
          double d = fabs(su[c] - rs[c]) / (c < (size_t)s.K ? rs[2 * s.K + c] : rs[c]);
          es = fmax(es, d <= 1e300 ? d : INFINITY);
        }
        const bool good = wrong == 0 && es < 1e-3;
        bad |= !good;
        printf("  check passes: apply %zu of %zu wrong, stats of cuDNN's output %.2e  %s\n", wrong, n, es, good ? "ok" : "FAILED");
      }
      const float t_apply = graph_us(st, [&] {
        pass_bn_apply<<<ablocks, 256, 0, st>>>(chunks, s.C, (const uint4 *)x, sc2, bi2, (uint4 *)a);
      });
      const float t_stats = graph_us(st, [&] {
        CK(cudaMemsetAsync(sum, 0, 2 * (size_t)s.K * sizeof(float), st));
        pass_stats<<<sms * 2, 256, 2 * s.K * sizeof(float), st>>>(M, s.K, (const uint4 *)y2, sum, sum + s.K);
      });
      CK(cudaFree(a));
      printf("  unfused: cuDNN conv %.1f + BN apply + ReLU pass %.1f (%.0f GB/s) + stats pass %.1f (%.0f GB/s) = %.1f us; "
             "lamina v3 fused (best RS prologue + stats) %.1f us: %.2fx the unfused time\n", best, t_apply,
             nx * 4.0 / t_apply * 1e-3, t_stats, ny * 2.0 / t_stats * 1e-3, best + t_apply + t_stats, fused,
             fused / (best + t_apply + t_stats));
    }
    for (int p = 0; p < 3; p++) CK(cudaFree(rsums[p]));
    // the weight gradient, with and without the prologue: checked on the first images (float64 over every pixel is
    // slow), one block for all pixels and an odd split, then timed against cuDNN's backward-filter algorithms
    if (!fwd_only) {
      half *dyb;
      float *dw;
      double *wref;
      half *dwh;
      CK(cudaMalloc(&dyb, ny * 2)); CK(cudaMalloc(&dw, nw * 4)); CK(cudaMalloc(&wref, nw * 8)); CK(cudaMalloc(&dwh, nw * 2));
      fill_half<<<(unsigned)((ny + 255) / 256), 256>>>(dyb, ny, 3, -1.0f, 1.0f);
      conv_shape sm = s;
      sm.N = std::min(s.N, 16);
      const int Psm = sm.N * sm.H * sm.W;
      for (int pro = 0; pro < 2; pro++) {
        ref_wgrad<<<(unsigned)((nw + 255) / 256), 256, 0, st>>>(sm, x, dyb, sc, bi, pro, wref);
        const int spans[2] = {Psm, 1000};
        for (int span : spans) {
          CK(cudaMemsetAsync(dw, 0xff, nw * 4, st));
          wgrad(st, pro, sm, span, x, dyb, bp, dw);
          CK(cudaStreamSynchronize(st));
          CK(cudaGetLastError());
          const double e = check_wgrad(nw, dw, wref);
          const bool good = e < 1e-4;
          bad |= !good;
          printf("  check wgrad %-9s %5d pixels a block: dW %.2e  %s\n", pro ? "prologue" : "plain", span, e, good ? "ok" : "FAILED");
        }
      }
      cudnnConvolutionBwdFilterAlgoPerf_t bperf[8];
      int bgot = 0;
      DN(cudnnFindConvolutionBackwardFilterAlgorithm(H, xd, yd, cd, wd, 8, &bgot, bperf));
      int balgo;
      const float bbest = fastest(st, "wgrad", bperf, bgot, &balgo, [&](cudnnConvolutionBwdFilterAlgo_t a, void *ws, size_t bytes) {
        return cudnnConvolutionBackwardFilter(H, &one, xd, x, yd, dyb, cd, a, ws, bytes, &zero, wd, dwh);
      });
      printf("  cuDNN wgrad (algo %d)            %8.1f us  %6.1f TFLOP/s\n", balgo, bbest, flops / bbest * 1e-6);
      for (int waves : {2, 4, 8}) {
        const int span = wgrad_span(s, prop.multiProcessorCount, waves);
        const float t0 = graph_us(st, [&] { wgrad(st, false, s, span, x, dyb, bp, dw); });
        const float t1 = graph_us(st, [&] { wgrad(st, true, s, span, x, dyb, bp, dw); });
        printf("  lamina wgrad, %d px a block     %8.1f us  %6.1f TFLOP/s  %.2fx cuDNN's time; prologue %8.1f us (+%.1f)\n",
               span, t0, flops / t0 * 1e-6, t0 / bbest, t1, t1 - t0);
      }
      // v3's weight gradient: checked on the first images against float64 (without the prologue, and with it in half
      // arithmetic), one split and an odd one, then timed over the whole batch
      {
        double *wref2;
        CK(cudaMalloc(&wref2, nw * 8));
        float *ws; // the most splits any call below makes: the odd split of the small batch, or three waves' spans
        size_t max_splits = (Psm + 1151) / 1152;
        for (const wgw_variant &v : wgw_variants)
          if (wgw_fits(s, v.BN, v.PX)) {
            const size_t span = wgw_span(s, v, prop.multiProcessorCount, 3.0);
            max_splits = std::max(max_splits, (M + span - 1) / span);
          }
        if (const int G = w9_groups(s)) {
          const size_t span = w9_span(s, G, prop.multiProcessorCount, 3.0);
          max_splits = std::max(max_splits, (M + span - 1) / span);
        }
        CK(cudaMalloc(&ws, max_splits * nw * 4));
        ref_wgrad<<<(unsigned)((nw + 255) / 256), 256, 0, st>>>(sm, x, dyb, sc, bi, 0, wref);
        ref_wgrad<<<(unsigned)((nw + 255) / 256), 256, 0, st>>>(sm, x, dyb, sc, bi, 2, wref2);
        float wplain = -1, wfused = -1;
        const wgw_variant *wplain_v = NULL, *wfused_v = NULL;
        int wplain_span = 0, wfused_span = 0;
        for (const wgw_variant &v : wgw_variants) {
          if (!wgw_fits(s, v.BN, v.PX)) continue;
          const wgw_maps msm = wgw_make_maps(sm, v.PX, x, dyb), mfull = wgw_make_maps(s, v.PX, x, dyb);
          for (int mode = 0; mode < WGW_MODES; mode++)
            for (int span : {Psm, 1152}) {
              CK(cudaMemsetAsync(dw, 0xff, nw * 4, st));
              v.run(mode, st, sm, span, msm, sc2, bi2, dw, ws);
              CK(cudaStreamSynchronize(st));
              CK(cudaGetLastError());
              const double e = check_wgrad(nw, dw, mode == 2 ? wref2 : wref);
              const bool good = e < 1e-4;
              bad |= !good;
              printf("  check v3 wgrad %dx64x%d/%dpx %-12s %5d pixels a block: dW %.2e  %s\n", v.NWG, v.BN, v.PX,
                     wgw_mode_name[mode], span, e, good ? "ok" : "FAILED");
            }
          for (double waves : {1.0, 2.0, 3.0}) {
            const int span = wgw_span(s, v, prop.multiProcessorCount, waves);
            float t[WGW_MODES];
            for (int mode = 0; mode < WGW_MODES; mode++) t[mode] = graph_us(st, [&] { v.run(mode, st, s, span, mfull, sc2, bi2, dw, ws); });
            printf("  lamina v3 wgrad %dx64x%-3d %3dpx /%d, %d stages, %5d px a block: SS %7.1f us %6.1f TFLOP/s %.2fx cuDNN's "
                   "time; RS %7.1f; RS prologue %7.1f (+%.1f over SS)\n", v.NWG, v.BN, v.PX, v.MINB, v.stages, span, t[0],
                   flops / t[0] * 1e-6, t[0] / bbest, t[1], t[2], t[2] - t[0]);
            if (wplain < 0 || t[0] < wplain) wplain = t[0], wplain_v = &v, wplain_span = span;
            if (wfused < 0 || t[2] < wfused) wfused = t[2], wfused_v = &v, wfused_span = span;
          }
        }
        if (const int G = w9_groups(s)) { // the nine-tap kernel
          const int Gs = w9_groups(sm);
          const wgw_maps msm = w9_make_maps(sm, Gs, x, dyb), mfull = w9_make_maps(s, G, x, dyb);
          for (int mode = 0; mode < 2; mode++)
            for (int span : {Psm, 1152}) {
              CK(cudaMemsetAsync(dw, 0xff, nw * 4, st));
              w9_run(Gs, mode, st, sm, span, msm, sc2, bi2, dw, ws);
              CK(cudaStreamSynchronize(st));
              CK(cudaGetLastError());
              const double e = check_wgrad(nw, dw, mode ? wref2 : wref);
              const bool good = e < 1e-4;
              bad |= !good;
              printf("  check v3 wgrad, nine taps, %dpx %-12s %5d pixels a block: dW %.2e  %s\n", 64 * Gs,
                     mode ? "prologue" : "plain", span, e, good ? "ok" : "FAILED");
            }
          for (double waves : {1.0, 2.0, 3.0}) {
            const int span = w9_span(s, G, prop.multiProcessorCount, waves);
            const float t0 = graph_us(st, [&] { w9_run(G, 0, st, s, span, mfull, sc2, bi2, dw, ws); });
            const float t1 = graph_us(st, [&] { w9_run(G, 1, st, s, span, mfull, sc2, bi2, dw, ws); });
            printf("  lamina v3 wgrad, nine taps, %3dpx, %5d px a block: %7.1f us %6.1f TFLOP/s %.2fx cuDNN's time; prologue "
                   "%7.1f (+%.1f)\n", 64 * G, span, t0, flops / t0 * 1e-6, t0 / bbest, t1, t1 - t0);
          }
        }
        if (profile && wplain_v) {
          size_t bytes = 0;
          void *wsp = NULL;
          DN(cudnnGetConvolutionBackwardFilterWorkspaceSize(H, xd, yd, cd, wd, (cudnnConvolutionBwdFilterAlgo_t)balgo, &bytes));
          if (bytes) CK(cudaMalloc(&wsp, bytes));
          const wgw_maps mp = wgw_make_maps(s, wplain_v->PX, x, dyb), mf = wgw_make_maps(s, wfused_v->PX, x, dyb);
          CK(cudaStreamSynchronize(st));
          CK(cudaProfilerStart());
          DN(cudnnConvolutionBackwardFilter(H, &one, xd, x, yd, dyb, cd, (cudnnConvolutionBwdFilterAlgo_t)balgo, wsp, bytes,
                                            &zero, wd, dwh));
          wplain_v->run(0, st, s, wplain_span, mp, sc2, bi2, dw, ws);
          wfused_v->run(2, st, s, wfused_span, mf, sc2, bi2, dw, ws);
          CK(cudaStreamSynchronize(st));
          CK(cudaProfilerStop());
          if (wsp) CK(cudaFree(wsp));
          printf("  profiled: cuDNN wgrad algo %d, v3 wgrad %dx64x%d/%dpx SS (%d px a block), %dx64x%d/%dpx RS prologue (%d)\n",
                 balgo, wplain_v->NWG, wplain_v->BN, wplain_v->PX, wplain_span, wfused_v->NWG, wfused_v->BN, wfused_v->PX,
                 wfused_span);
        }
        CK(cudaFree(ws));
        CK(cudaFree(wref2));
      }
      CK(cudaFree(dyb)); CK(cudaFree(dw)); CK(cudaFree(wref)); CK(cudaFree(dwh));
    }
    cudnnDestroyTensorDescriptor(xd), cudnnDestroyTensorDescriptor(yd), cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyConvolutionDescriptor(cd);
    CK(cudaFree(x)); CK(cudaFree(w)); CK(cudaFree(y)); CK(cudaFree(y2)); CK(cudaFree(sc)); CK(cudaFree(bi)); CK(cudaFree(sum));
    CK(cudaFree(ref)); CK(cudaFree(sc2)); CK(cudaFree(bi2));
  }
  cudnnDestroy(H);
  printf("\n%s\n", bad ? "lab_igemm_conv: a check FAILED" : "lab_igemm_conv: every check passed");
  return bad;
}
