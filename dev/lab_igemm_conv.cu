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
// algorithms. Not part of the build:
//   nvcc -O3 -arch=sm_90 -std=c++17 dev/lab_igemm_conv.cu -lcudnn -o /tmp/lab_igemm_conv
//   /tmp/lab_igemm_conv [N]     (batch, default 512)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define DN(x) do { cudnnStatus_t s_ = (x); if (s_ != CUDNN_STATUS_SUCCESS) { printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_)); exit(1); } } while (0)

enum { BM = 128, BN = 64, BK = 64, NT = 256 };

struct conv_shape { int N, H, W, C, K, R, S, pad; };

// Row r's 16-byte chunk ch of a 64-half-wide tile, swizzled so that ldmatrix's eight rows hit eight banks groups.
__device__ __forceinline__ int swz(int r, int ch) { return r * BK + ((ch ^ (r & 7)) << 3); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&d)[4], const half *p) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(a));
}
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 8 halves x·scale + bias → ReLU, rounded back to half (as lamina's bn_act_fwd stores its output).
__device__ __forceinline__ uint4 prologue(uint4 v, const float *sc, const float *bi) {
  half2 *h = (half2 *)&v;
#pragma unroll
  for (int j = 0; j < 4; j++) {
    float2 f = __half22float2(h[j]);
    f.x = fmaxf(fmaf(f.x, sc[2 * j], bi[2 * j]), 0.0f);
    f.y = fmaxf(fmaf(f.y, sc[2 * j + 1], bi[2 * j + 1]), 0.0f);
    h[j] = __floats2half2_rn(f.x, f.y);
  }
  return v;
}

template <bool PRO, bool STATS>
__global__ void __launch_bounds__(NT) igemm_fwd(conv_shape s, const half *__restrict__ x, const half *__restrict__ w,
                                                const float *__restrict__ scale, const float *__restrict__ bias,
                                                half *__restrict__ y, float *__restrict__ sum, float *__restrict__ sqsum) {
  __shared__ __align__(16) half As[2][BM * BK];
  __shared__ __align__(16) half Bs[2][BN * BK];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 3, wn = warp >> 2;
  const int M = s.N * s.H * s.W, Kred = s.R * s.S * s.C, nq = Kred / BK;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN, ch = tid & 7;
  // this thread's four A rows (pixels) and two B rows (output channels), fixed over the reduction
  int pn[4], ph[4], pw[4];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const int m = m0 + ((tid + NT * i) >> 3);
    if (m < M) {
      pn[i] = m / (s.H * s.W);
      const int rem = m - pn[i] * s.H * s.W;
      ph[i] = rem / s.W, pw[i] = rem - ph[i] * s.W;
    } else {
      pn[i] = -1, ph[i] = pw[i] = 0;
    }
  }
  uint4 ra[4], rb[2];
  auto load = [&](int q) {
    const int k0 = q * BK, tap = k0 / s.C, c0 = k0 - tap * s.C, r = tap / s.S, t = tap - r * s.S;
    float sc[8], bi[8];
    if (PRO)
#pragma unroll
      for (int j = 0; j < 8; j++) sc[j] = __ldg(scale + c0 + ch * 8 + j), bi[j] = __ldg(bias + c0 + ch * 8 + j);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      const int ih = ph[i] + r - s.pad, iw = pw[i] + t - s.pad;
      if (pn[i] >= 0 && ih >= 0 && ih < s.H && iw >= 0 && iw < s.W) {
        ra[i] = __ldg((const uint4 *)(x + (((size_t)pn[i] * s.H + ih) * s.W + iw) * s.C + c0 + ch * 8));
        if (PRO) ra[i] = prologue(ra[i], sc, bi);
      } else {
        ra[i] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
      rb[i] = __ldg((const uint4 *)(w + (size_t)(n0 + ((tid + NT * i) >> 3)) * Kred + k0 + ch * 8));
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int i = 0; i < 4; i++) *(uint4 *)&As[buf][swz((tid + NT * i) >> 3, ch)] = ra[i];
#pragma unroll
    for (int i = 0; i < 2; i++) *(uint4 *)&Bs[buf][swz((tid + NT * i) >> 3, ch)] = rb[i];
  };
  float acc[2][4][4] = {};
  load(0);
  store(0);
  __syncthreads();
  for (int q = 0; q < nq; q++) {
    const int buf = q & 1;
    if (q + 1 < nq) load(q + 1); // the next tile's loads in flight during this tile's math
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) {
      uint32_t a[2][4], b[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; mi++) ldmatrix_x4(a[mi], &As[buf][swz(wm * 32 + mi * 16 + (lane & 15), kk * 2 + (lane >> 4))]);
#pragma unroll
      for (int nj = 0; nj < 2; nj++)
        ldmatrix_x4(b[nj], &Bs[buf][swz(wn * 32 + nj * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1))]);
#pragma unroll
      for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) mma16816(acc[mi][ni], a[mi], b[ni >> 1][(ni & 1) * 2], b[ni >> 1][(ni & 1) * 2 + 1]);
    }
    if (q + 1 < nq) store(buf ^ 1); // that buffer's last readers passed the previous barrier
    __syncthreads();
  }
  // epilogue: the output, and its channels' sums of the stored values
  float cs[4][2] = {}, cq[4][2] = {};
#pragma unroll
  for (int mi = 0; mi < 2; mi++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      const int m = m0 + wm * 32 + mi * 16 + (lane >> 2) + hr * 8;
      if (m >= M) continue;
#pragma unroll
      for (int ni = 0; ni < 4; ni++) {
        const int n = n0 + wn * 32 + ni * 8 + (lane & 3) * 2;
        const half2 v = __floats2half2_rn(acc[mi][ni][hr * 2], acc[mi][ni][hr * 2 + 1]);
        *(half2 *)(y + (size_t)m * s.K + n) = v;
        if (STATS) {
          const float2 f = __half22float2(v);
          cs[ni][0] += f.x, cs[ni][1] += f.y, cq[ni][0] += f.x * f.x, cq[ni][1] += f.y * f.y;
        }
      }
    }
  if (!STATS) return;
  float(*red)[4][BN] = reinterpret_cast<float(*)[4][BN]>(&As[0][0]); // the tiles are done with (the loop's last barrier)
#pragma unroll
  for (int ni = 0; ni < 4; ni++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) {
        cs[ni][e] += __shfl_xor_sync(0xffffffffu, cs[ni][e], o);
        cq[ni][e] += __shfl_xor_sync(0xffffffffu, cq[ni][e], o);
      }
      if (lane < 4) {
        red[0][wm][wn * 32 + ni * 8 + lane * 2 + e] = cs[ni][e];
        red[1][wm][wn * 32 + ni * 8 + lane * 2 + e] = cq[ni][e];
      }
    }
  __syncthreads();
  if (tid < 2 * BN) {
    const int which = tid / BN, c = tid % BN;
    const float v = red[which][0][c] + red[which][1][c] + red[which][2][c] + red[which][3][c];
    atomicAdd((which ? sqsum : sum) + n0 + c, v);
  }
}

// ---- v2: cp.async, STAGES deep ----
// The same tiles, but global → shared by cp.async (zero-filled where the tap falls in the padding), STAGES - 1 tiles
// in flight while one is multiplied; the prologue then runs on the A fragments after ldmatrix, in half2 arithmetic
// (scale and bias rounded to half), with the padding's rows masked back to zero (relu(bias) is not zero).
enum { STAGES = 3 };
static const int PIPE_SMEM = STAGES * (BM + BN) * BK * (int)sizeof(half);

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem, bool valid) {
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int K> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(K)); }

__device__ __forceinline__ void pixel(const conv_shape &s, int m, int &n, int &h, int &w) {
  if (m >= s.N * s.H * s.W) { n = -1, h = w = 0; return; }
  n = m / (s.H * s.W);
  const int rem = m - n * s.H * s.W;
  h = rem / s.W, w = rem - h * s.W;
}
__device__ __forceinline__ bool inside(const conv_shape &s, int n, int h, int w) {
  return n >= 0 && h >= 0 && h < s.H && w >= 0 && w < s.W;
}

template <bool PRO, bool STATS>
__global__ void __launch_bounds__(NT) igemm_fwd_pipe(conv_shape s, const half *__restrict__ x, const half *__restrict__ w,
                                                     const half2 *__restrict__ sc2, const half2 *__restrict__ bi2,
                                                     half *__restrict__ y, float *__restrict__ sum, float *__restrict__ sqsum) {
  extern __shared__ __align__(16) half smem[];
  half *As = smem, *Bs = smem + STAGES * BM * BK;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 3, wn = warp >> 2;
  const int M = s.N * s.H * s.W, Kred = s.R * s.S * s.C, nq = Kred / BK;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN, ch = tid & 7;
  int ln[4], lh[4], lw[4], fn[2][2], fh[2][2], fw[2][2]; // the rows this thread loads; its A fragments' rows
#pragma unroll
  for (int i = 0; i < 4; i++) pixel(s, m0 + ((tid + NT * i) >> 3), ln[i], lh[i], lw[i]);
#pragma unroll
  for (int mi = 0; mi < 2; mi++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) pixel(s, m0 + wm * 32 + mi * 16 + (lane >> 2) + 8 * hr, fn[mi][hr], fh[mi][hr], fw[mi][hr]);
  auto issue = [&](int q) {
    if (q < nq) {
      const int k0 = q * BK, tap = k0 / s.C, c0 = k0 - tap * s.C, r = tap / s.S, t = tap - r * s.S;
      half *a = As + (q % STAGES) * BM * BK, *b = Bs + (q % STAGES) * BN * BK;
#pragma unroll
      for (int i = 0; i < 4; i++) {
        const int ih = lh[i] + r - s.pad, iw = lw[i] + t - s.pad;
        const bool ok = inside(s, ln[i], ih, iw);
        const half *src = ok ? x + (((size_t)ln[i] * s.H + ih) * s.W + iw) * s.C + c0 + ch * 8 : x;
        cp_async16(&a[swz((tid + NT * i) >> 3, ch)], src, ok);
      }
#pragma unroll
      for (int i = 0; i < 2; i++)
        cp_async16(&b[swz((tid + NT * i) >> 3, ch)], w + (size_t)(n0 + ((tid + NT * i) >> 3)) * Kred + k0 + ch * 8, true);
    }
    cp_commit(); // an empty group past the end keeps the wait count uniform
  };
  float acc[2][4][4] = {};
#pragma unroll
  for (int q = 0; q < STAGES - 1; q++) issue(q);
  for (int q = 0; q < nq; q++) {
    cp_wait<STAGES - 2>();
    __syncthreads(); // tile q is in; everyone is done with tile q - 1, whose stage the next issue fills
    issue(q + STAGES - 1);
    const half *a_s = As + (q % STAGES) * BM * BK, *b_s = Bs + (q % STAGES) * BN * BK;
    const int k0 = q * BK, tap = k0 / s.C, c0 = k0 - tap * s.C, r = tap / s.S, t = tap - r * s.S;
    bool ok[2][2];
    if (PRO)
#pragma unroll
      for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) ok[mi][hr] = inside(s, fn[mi][hr], fh[mi][hr] + r - s.pad, fw[mi][hr] + t - s.pad);
#pragma unroll
    for (int kk = 0; kk < BK / 16; kk++) {
      uint32_t a[2][4], b[2][4];
#pragma unroll
      for (int mi = 0; mi < 2; mi++) ldmatrix_x4(a[mi], &a_s[swz(wm * 32 + mi * 16 + (lane & 15), kk * 2 + (lane >> 4))]);
#pragma unroll
      for (int nj = 0; nj < 2; nj++)
        ldmatrix_x4(b[nj], &b_s[swz(wn * 32 + nj * 16 + (lane & 7) + ((lane >> 4) << 3), kk * 2 + ((lane >> 3) & 1))]);
      if (PRO) { // a0, a1: channels c + 2t, c + 2t + 1 of rows g, g + 8; a2, a3: those + 8
        const int c = (c0 + kk * 16 + (lane & 3) * 2) >> 1;
        const half2 slo = __ldg(sc2 + c), blo = __ldg(bi2 + c), shi = __ldg(sc2 + c + 4), bhi = __ldg(bi2 + c + 4);
        const half2 zero = __float2half2_rn(0.0f);
#pragma unroll
        for (int mi = 0; mi < 2; mi++)
#pragma unroll
          for (int j = 0; j < 4; j++) {
            half2 v = *(half2 *)&a[mi][j];
            v = ok[mi][j & 1] ? __hmax2(__hfma2(v, j < 2 ? slo : shi, j < 2 ? blo : bhi), zero) : zero;
            a[mi][j] = *(uint32_t *)&v;
          }
      }
#pragma unroll
      for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) mma16816(acc[mi][ni], a[mi], b[ni >> 1][(ni & 1) * 2], b[ni >> 1][(ni & 1) * 2 + 1]);
    }
  }
  cp_wait<0>();
  __syncthreads(); // shared memory is the statistics' now
  float cs[4][2] = {}, cq[4][2] = {};
#pragma unroll
  for (int mi = 0; mi < 2; mi++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      const int m = m0 + wm * 32 + mi * 16 + (lane >> 2) + hr * 8;
      if (m >= M) continue;
#pragma unroll
      for (int ni = 0; ni < 4; ni++) {
        const int n = n0 + wn * 32 + ni * 8 + (lane & 3) * 2;
        const half2 v = __floats2half2_rn(acc[mi][ni][hr * 2], acc[mi][ni][hr * 2 + 1]);
        *(half2 *)(y + (size_t)m * s.K + n) = v;
        if (STATS) {
          const float2 f = __half22float2(v);
          cs[ni][0] += f.x, cs[ni][1] += f.y, cq[ni][0] += f.x * f.x, cq[ni][1] += f.y * f.y;
        }
      }
    }
  if (!STATS) return;
  float(*red)[4][BN] = reinterpret_cast<float(*)[4][BN]>(smem);
#pragma unroll
  for (int ni = 0; ni < 4; ni++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
#pragma unroll
      for (int o = 4; o < 32; o <<= 1) {
        cs[ni][e] += __shfl_xor_sync(0xffffffffu, cs[ni][e], o);
        cq[ni][e] += __shfl_xor_sync(0xffffffffu, cq[ni][e], o);
      }
      if (lane < 4) {
        red[0][wm][wn * 32 + ni * 8 + lane * 2 + e] = cs[ni][e];
        red[1][wm][wn * 32 + ni * 8 + lane * 2 + e] = cq[ni][e];
      }
    }
  __syncthreads();
  if (tid < 2 * BN) {
    const int which = tid / BN, c = tid % BN;
    const float v = red[which][0][c] + red[which][1][c] + red[which][2][c] + red[which][3][c];
    atomicAdd((which ? sqsum : sum) + n0 + c, v);
  }
}

// ---- the weight gradient: dW[k][r,s,c] = Σ over pixels of dy[p][k] · act(x[p shifted by the tap][c]) ----
// The GEMM is K × (R·S·C) over the N·H·W pixels: a block computes 64 output channels × one tap's 64 input channels
// over a range of pixels (split-K: the pixels are many, the tiles few), 4 warps of 32 × 32, the pixels in steps of 32.
// Both tiles are stored as they lie in memory, pixel rows of 64 channels (dy's and x's), and read transposed by
// ldmatrix.trans. A thread's 16-byte chunk is the same column at every step, so its 8 channels' scale and bias sit in
// registers and the prologue runs as the chunk is staged (register-staged, double-buffered, as v1); the padding stays
// zero. Each block adds its fp32 partial sums into dW with float2 atomics (dW zeroed first: part of the timed call).
enum { WM = 64, WN = 64, WK = 32, WT = 128 };

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&d)[4], const half *p) {
  uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]) : "r"(a));
}

template <bool PRO>
__global__ void __launch_bounds__(WT) igemm_wgrad(conv_shape s, int span, const half *__restrict__ x,
                                                  const half *__restrict__ dy, const float *__restrict__ scale,
                                                  const float *__restrict__ bias, float *__restrict__ dw) {
  __shared__ __align__(16) half As[2][WK * WM]; // dy: 32 pixel rows × 64 output channels
  __shared__ __align__(16) half Bs[2][WK * WN]; // act(x) at the block's tap: 32 pixel rows × 64 input channels
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp & 1, wn = warp >> 1, ch = tid & 7;
  const int P = s.N * s.H * s.W, Kred = s.R * s.S * s.C;
  const int k0 = blockIdx.x * WM, j0 = blockIdx.y * WN;
  const int tap = j0 / s.C, c0 = j0 - tap * s.C, r = tap / s.S, t = tap - r * s.S;
  const int p0 = blockIdx.z * span, p1 = min(P, p0 + span), nq = (p1 - p0 + WK - 1) / WK;
  if (nq <= 0) return;
  int pn[2], ph[2], pw[2]; // the pixels of this thread's two rows, advanced by WK a step
#pragma unroll
  for (int i = 0; i < 2; i++) {
    const int p = p0 + (tid >> 3) + 16 * i;
    pn[i] = p / (s.H * s.W);
    const int rem = p - pn[i] * s.H * s.W;
    ph[i] = rem / s.W, pw[i] = rem - ph[i] * s.W;
  }
  float sc[8], bi[8];
  if (PRO)
#pragma unroll
    for (int j = 0; j < 8; j++) sc[j] = __ldg(scale + c0 + ch * 8 + j), bi[j] = __ldg(bias + c0 + ch * 8 + j);
  uint4 ra[2], rb[2];
  auto load = [&](int q) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int p = p0 + q * WK + (tid >> 3) + 16 * i;
      ra[i] = rb[i] = make_uint4(0, 0, 0, 0);
      if (p < p1) {
        ra[i] = __ldg((const uint4 *)(dy + (size_t)p * s.K + k0 + ch * 8));
        const int ih = ph[i] + r - s.pad, iw = pw[i] + t - s.pad;
        if (ih >= 0 && ih < s.H && iw >= 0 && iw < s.W) {
          rb[i] = __ldg((const uint4 *)(x + (((size_t)pn[i] * s.H + ih) * s.W + iw) * s.C + c0 + ch * 8));
          if (PRO) rb[i] = prologue(rb[i], sc, bi);
        }
      }
      pw[i] += WK; // on to the next step's pixel
      while (pw[i] >= s.W) {
        pw[i] -= s.W;
        if (++ph[i] == s.H) ph[i] = 0, pn[i]++;
      }
    }
  };
  auto store = [&](int buf) {
#pragma unroll
    for (int i = 0; i < 2; i++) {
      *(uint4 *)&As[buf][swz((tid >> 3) + 16 * i, ch)] = ra[i];
      *(uint4 *)&Bs[buf][swz((tid >> 3) + 16 * i, ch)] = rb[i];
    }
  };
  float acc[2][4][4] = {};
  load(0);
  store(0);
  __syncthreads();
  for (int q = 0; q < nq; q++) {
    const int buf = q & 1;
    if (q + 1 < nq) load(q + 1);
#pragma unroll
    for (int kk = 0; kk < WK / 16; kk++) {
      uint32_t a[2][4], b[2][4];
      // A = dyᵀ (channels × pixels): matrices (m 0-7 | 8-15) × (k 0-7 | 8-15), lanes 8i..8i+7 point at matrix i's rows
#pragma unroll
      for (int mi = 0; mi < 2; mi++)
        ldmatrix_x4_trans(a[mi], &As[buf][swz(kk * 16 + (lane & 7) + ((lane >> 4) << 3), wm * 4 + mi * 2 + ((lane >> 3) & 1))]);
      // B = act(x) (pixels × channels): matrices (k 0-7 | 8-15) of n 0-7, then of n 8-15
#pragma unroll
      for (int nj = 0; nj < 2; nj++)
        ldmatrix_x4_trans(b[nj], &Bs[buf][swz(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), wn * 4 + nj * 2 + (lane >> 4))]);
#pragma unroll
      for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) mma16816(acc[mi][ni], a[mi], b[ni >> 1][(ni & 1) * 2], b[ni >> 1][(ni & 1) * 2 + 1]);
    }
    if (q + 1 < nq) store(buf ^ 1);
    __syncthreads();
  }
#pragma unroll
  for (int mi = 0; mi < 2; mi++)
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
      const int m = k0 + wm * 32 + mi * 16 + (lane >> 2) + hr * 8;
#pragma unroll
      for (int ni = 0; ni < 4; ni++) {
        const int n = j0 + wn * 32 + ni * 8 + (lane & 3) * 2;
        atomicAdd((float2 *)(dw + (size_t)m * Kred + n), make_float2(acc[mi][ni][hr * 2], acc[mi][ni][hr * 2 + 1]));
      }
    }
}

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
        if (pro) v = __half2float(__float2half_rn(fmaxf(fmaf(v, scale[c], bias[c]), 0.0f)));
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

// version V (1: register-staged, 2: cp.async) of the kernel, its sums zeroed first where it keeps them
struct bn_params { const float *sc, *bi; const half2 *sc2, *bi2; }; // the prologue's, in float (v1) and half2 (v2)
template <int V, bool PRO, bool STATS>
static void launch(cudaStream_t st, const conv_shape &s, const half *x, const half *w, const bn_params &p, half *y,
                   float *sum) {
  const int M = s.N * s.H * s.W;
  const dim3 grid((M + BM - 1) / BM, s.K / BN);
  if (STATS) CK(cudaMemsetAsync(sum, 0, 2 * (size_t)s.K * sizeof(float), st));
  if (V == 1) igemm_fwd<PRO, STATS><<<grid, NT, 0, st>>>(s, x, w, p.sc, p.bi, y, sum, sum + s.K);
  else igemm_fwd_pipe<PRO, STATS><<<grid, NT, PIPE_SMEM, st>>>(s, x, w, p.sc2, p.bi2, y, sum, sum + s.K);
}
template <int V> static void launch_mode(cudaStream_t st, int mode, const conv_shape &s, const half *x, const half *w,
                                         const bn_params &p, half *y, float *sum) {
  if (mode == 0) launch<V, false, false>(st, s, x, w, p, y, sum);
  else if (mode == 1) launch<V, false, true>(st, s, x, w, p, y, sum);
  else launch<V, true, true>(st, s, x, w, p, y, sum);
}
static void run(int V, cudaStream_t st, int mode, const conv_shape &s, const half *x, const half *w, const bn_params &p,
                half *y, float *sum) {
  if (V == 1) launch_mode<1>(st, mode, s, x, w, p, y, sum);
  else launch_mode<2>(st, mode, s, x, w, p, y, sum);
}

// max |got - ref| over max |ref|, the outputs; and the same for the sums (of the rounded outputs, in double)
static void check(const conv_shape &s, const half *dy, const double *dref, const float *dsum, bool stats,
                  double *err_y, double *err_s) {
  const size_t n = (size_t)s.N * s.H * s.W * s.K;
  std::vector<half> y(n);
  std::vector<double> ref(n), ds(2 * (size_t)s.K, 0.0), da(s.K, 0.0);
  std::vector<float> su(2 * (size_t)s.K);
  CK(cudaMemcpy(y.data(), dy, n * sizeof(half), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(ref.data(), dref, n * sizeof(double), cudaMemcpyDeviceToHost));
  double e = 0.0, mx = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double v = __half2float(y[i]);
    double d = fabs(v - ref[i]);
    if (!(d <= 1e300)) d = INFINITY; // an element left NaN (never written) fails
    e = fmax(e, d);
    mx = fmax(mx, fabs(ref[i]));
    const double r = (double)__half2float(__float2half_rn((float)ref[i])); // the sums are of the stored, rounded outputs
    ds[i % s.K] += r, ds[s.K + i % s.K] += r * r, da[i % s.K] += fabs(r);
  }
  *err_y = e / mx, *err_s = 0.0;
  if (!stats) return;
  CK(cudaMemcpy(su.data(), dsum, su.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double es = 0.0; // each sum's error over the sum of its terms' magnitudes (|y| for the sums, y² for the squares)
  for (size_t c = 0; c < su.size(); c++) {
    double d = fabs(su[c] - ds[c]) / (c < (size_t)s.K ? da[c] : ds[c]);
    if (!(d <= 1e300)) d = INFINITY;
    es = fmax(es, d);
  }
  *err_s = es;
}

// the weight gradient over `span` pixels a block (0: as many blocks as `waves` × the SMs call for), dW zeroed first
static int wgrad_span(const conv_shape &s, int sms, int waves) {
  const int P = s.N * s.H * s.W, tiles = (s.K / WM) * (s.R * s.S * s.C / WN);
  const int splits = std::max(1, std::min(P / (WK * 8), (waves * sms + tiles - 1) / tiles));
  return ((P + splits - 1) / splits + WK - 1) / WK * WK;
}
static void wgrad(cudaStream_t st, bool pro, const conv_shape &s, int span, const half *x, const half *dy,
                  const bn_params &p, float *dw) {
  const int P = s.N * s.H * s.W, Kred = s.R * s.S * s.C;
  CK(cudaMemsetAsync(dw, 0, (size_t)s.K * Kred * sizeof(float), st));
  const dim3 grid(s.K / WM, Kred / WN, (P + span - 1) / span);
  if (pro) igemm_wgrad<true><<<grid, WT, 0, st>>>(s, span, x, dy, p.sc, p.bi, dw);
  else igemm_wgrad<false><<<grid, WT, 0, st>>>(s, span, x, dy, p.sc, p.bi, dw);
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
  for (const conv_shape &s : shapes) {
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
    // correctness: each version plain, then with the prologue and the statistics, against float64
    for (int V = 1; V <= 2; V++)
      for (int pro = 0; pro < 2; pro++) {
        CK(cudaMemsetAsync(y, 0xff, ny * 2, st)); // NaN: an element not written fails
        run(V, st, pro ? 2 : 0, s, x, w, bp, y, sum);
        ref_fwd<<<(unsigned)((ny + 255) / 256), 256, 0, st>>>(s, x, w, sc, bi, pro ? V : 0, ref);
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        double ey, es;
        check(s, y, ref, sum, pro, &ey, &es);
        const bool good = ey < 2e-3 && (!pro || es < 1e-4);
        bad |= !good;
        printf("  check v%d %-18s y %.2e%s%.2e  %s\n", V, pro ? "prologue + stats" : "plain", ey, pro ? "  sums " : "",
               pro ? es : 0.0, good ? "ok" : "FAILED");
      }
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
    for (int V = 1; V <= 2; V++) {
      float t[3];
      for (int mode = 0; mode < 3; mode++) t[mode] = graph_us(st, [&] { run(V, st, mode, s, x, w, bp, y, sum); });
      printf("  lamina v%d plain                 %8.1f us  %6.1f TFLOP/s  %.2fx cuDNN's time\n", V, t[0],
             flops / t[0] * 1e-6, t[0] / best);
      printf("  lamina v%d + stats               %8.1f us  (+%.1f)\n", V, t[1], t[1] - t[0]);
      printf("  lamina v%d prologue + stats      %8.1f us  (+%.1f over plain)\n", V, t[2], t[2] - t[0]);
    }
    // the weight gradient, with and without the prologue: checked on the first images (float64 over every pixel is
    // slow), one block for all pixels and an odd split, then timed against cuDNN's backward-filter algorithms
    {
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
