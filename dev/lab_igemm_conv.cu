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
// algorithms. v3 (below) is the same GEMM on Hopper's warp-group MMA and tensor-memory accelerator. Not part of the build:
//   nvcc -O3 -gencode arch=compute_90a,code=sm_90a -std=c++17 dev/lab_igemm_conv.cu -lcudnn -o /tmp/lab_igemm_conv
//   /tmp/lab_igemm_conv [N] [fwd|wgrad]     (batch, default 512; fwd: the forward's v2 and v3 only; wgrad: the
//   weight gradients only)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cuda_profiler_api.h>
#include <cudnn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

// ---- v3: warp-group MMA fed by the tensor-memory accelerator (sm_90a) ----
// mma.sync tops out at 160-204 TFLOP/s here (v1, v2) where cuDNN's sm90 kernels reach 389-713, so v3 is Hopper's way:
// a producer warp has the TMA engine copy each reduction step's tiles into shared memory, STAGES deep on mbarriers,
// and two consumer warpgroups multiply them with wgmma.mma_async, 64·MI output pixels × BN output channels each.
// The implicit GEMM needs no gather: a block's BM pixels are whole image rows (BM a multiple of W, the images
// tiling into BM or BM into one image), so tap (r, s)'s A tile is one 4-D box of x — channels c0..c0+63 × W × rows ×
// images — at (c0, s - pad, h0 + r - pad, n0): the engine fills what falls outside the image with zeros, which is the
// convolution's padding. B is the KRSC filter's box of BN rows × 64. Both land 128-byte swizzled, as wgmma's K-major
// descriptors read them. SS takes both from shared memory; RS loads A into registers by ldmatrix first and runs the
// prologue there, in half2 as v2 does: for it the padding is filled with the engine's OOB-NaN, which
// fma.rn.oob.relu turns into +0 (relu(bias) is not zero), so scale, bias, ReLU and the mask are one instruction. RS is
// pipelined a stage at a time or (KSTEP) a 16-channel k-step at a time: the first needs a second set of fragments to
// overlap, which the large tiles have no registers for. The epilogue stages the fp16 tile in shared memory for a TMA
// store and, with STATS, sums each channel's stored values and their squares from there (shared-memory atomics across
// the warps, one global atomic per channel and block).
#include <cuda.h>
#include <cudaTypedefs.h>
#include "lab_wgmma.cuh"

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *b, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count));
}
__device__ __forceinline__ void mbar_expect(uint64_t *b, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
}
// a wait that never ends is a bug of the lab's: it traps (the run stops with an error) instead of hanging; no printf
// here, as a call inside the kernel makes ptxas serialize its wgmma pipeline
__device__ __forceinline__ void mbar_wait(uint64_t *b, int parity) {
  uint32_t done;
  for (long tries = 0;; tries++) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done) : "r"(smem_u32(b)), "r"(parity) : "memory");
    if (done) return;
    if (tries == (1l << 28)) __trap();
  }
}
__device__ __forceinline__ void tma_4d(void *dst, const CUtensorMap *m, int c0, int c1, int c2, int c3, uint64_t *bar) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
               ::"r"(smem_u32(dst)), "l"((uint64_t)m), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void tma_2d(void *dst, const CUtensorMap *m, int c0, int c1, uint64_t *bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
               ::"r"(smem_u32(dst)), "l"((uint64_t)m), "r"(c0), "r"(c1), "r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void tma_store_2d(const CUtensorMap *m, int c0, int c1, const void *src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
               ::"l"((uint64_t)m), "r"(c0), "r"(c1), "r"(smem_u32(src)) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// a K-major operand of 128-byte rows, 128-byte swizzled: 8-row groups 1024 bytes apart (the leading offset is unused)
__device__ __forceinline__ uint64_t sw128_desc(const void *p) {
  return (uint64_t)((smem_u32(p) & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// the accumulators are the asm's outputs: keep the compiler from reading them before the wait that completes them
template <int R> __device__ __forceinline__ void pin(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// BN output channels × BM = 128·MI pixels a block (two consumer warpgroups, one producer warp); MINB blocks an SM (the stages fill what shared memory that leaves)
// PERSIST: grid of at most MINB blocks an SM, each looping over tiles (the producer runs ahead into the next tile while
// the consumers store this one), with an epilogue buffer of its own (EP bytes) as the stages are busy meanwhile
template <int BN_, int MI_, int MINB_, bool PERSIST = false> struct wg_cfg {
  static constexpr int BN = BN_, MI = MI_, MINB = MINB_, BM = 128 * MI, ACC = BN / 2, THREADS = 288;
  static constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128, STAGE = A_BYTES + B_BYTES, EP = PERSIST ? BM * BN * 2 : 0;
  static constexpr int ST_ = ((MINB == 2 ? 110 * 1024 : 220 * 1024) - EP) / STAGE, ST = ST_ > 6 ? 6 : ST_;
  static constexpr int SMEM = 1024 + EP + ST * STAGE + 2 * ST * 8 + 2 * BN * 4 + 2 * 256 * 4; // + sums, scale and bias (C ≤ 512)
};

template <int BN, int MI, int MINB, bool RS, bool PRO, bool STATS, bool KSTEP, bool PERSIST>
__global__ void __launch_bounds__(288, MINB) igemm_fwd_wg(conv_shape s, const __grid_constant__ CUtensorMap tx,
                                                          const __grid_constant__ CUtensorMap tw,
                                                          const __grid_constant__ CUtensorMap ty,
                                                          const half2 *__restrict__ sc2, const half2 *__restrict__ bi2,
                                                          float *__restrict__ sum, float *__restrict__ sqsum) {
  using C = wg_cfg<BN, MI, MINB, PERSIST>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t *epbuf = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023); // the swizzle repeats every 1024 bytes
  uint8_t *base = epbuf + C::EP, *Bs = base + C::ST * C::A_BYTES;
  uint64_t *full = (uint64_t *)(Bs + C::ST * C::B_BYTES), *empty = full + C::ST;
  float *red = (float *)(empty + C::ST);
  half2 *ssc = (half2 *)(red + 2 * BN), *sbi = ssc + 256; // the prologue's scale and bias, half2 pairs of channels
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int cpt = s.C / 64, nq = s.R * s.S * cpt, HW = s.H * s.W;
  // the tiles, channel tiles of a pixel tile next to each other: one a block (the grid is K/BN × M/BM), or PERSIST's loop
  const int ntn = s.K / BN, total = ntn * (int)((size_t)s.N * HW / C::BM);
  const int t_first = PERSIST ? (int)blockIdx.x : (int)(blockIdx.y * ntn + blockIdx.x), t_step = PERSIST ? (int)gridDim.x : total;
  if (tid == 0) {
    for (int i = 0; i < C::ST; i++) mbar_init(&full[i], 1), mbar_init(&empty[i], 8); // empty: each consumer warp
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if (STATS)
    for (int i = tid; i < 2 * BN; i += C::THREADS) red[i] = 0.0f;
  if (PRO)
    for (int i = tid; i < s.C / 2; i += C::THREADS) ssc[i] = sc2[i], sbi[i] = bi2[i];
  __syncthreads();
  if (warp == 8) { // the producer warp: one thread of it issues every load; g counts the block's steps over its tiles
    if (lane == 0)
      for (int tile = t_first, g = 0; tile < total; tile += t_step) {
        const int k0 = (tile % ntn) * BN, m0 = (tile / ntn) * C::BM, img = m0 / HW, h0 = (m0 - img * HW) / s.W;
        for (int q = 0; q < nq; q++, g++) {
          const int st = g % C::ST, tap = q / cpt, c0 = (q - tap * cpt) * 64, r = tap / s.S, t = tap - r * s.S;
          if (g >= C::ST) mbar_wait(&empty[st], (g / C::ST - 1) & 1);
          mbar_expect(&full[st], C::STAGE);
          tma_4d(base + st * C::A_BYTES, &tx, c0, t - s.pad, h0 + r - s.pad, img, &full[st]);
          tma_2d(Bs + st * C::B_BYTES, &tw, tap * s.C + c0, k0, &full[st]);
        }
      }
    return;
  }
  const int wg = warp >> 2, wq = warp & 3, wt = tid & 127;
  for (int tile = t_first, g0 = 0; tile < total; tile += t_step, g0 += nq) { // g0: the block's steps before this tile
  const int k0 = (tile % ntn) * BN, m0 = (tile / ntn) * C::BM;
  float acc[MI][C::ACC]; // the first MMA overwrites them (scale_d 0): no zeroing for ptxas to order against the MMAs
  if (RS) {
    if constexpr (KSTEP) {
      // RS, a k-step at a time (KSTEP): k-step ks (stage ks / 4, its 16 channels ks % 4), its fragment prepared as above
      auto prep = [&](int ks, uint32_t (&fa)[MI][4]) {
        const int q = ks >> 2, kk = ks & 3, st = (g0 + q) % C::ST;
        if (kk == 0) mbar_wait(&full[st], ((g0 + q) / C::ST) & 1);
        const uint8_t *a_s = base + st * C::A_BYTES + wg * MI * 64 * 128;
        uint32_t slo, blo, shi, bhi;
        if (PRO) { // a0 a1: rows g, channels 2t, 2t + 1; a2 a3: rows g + 8; then the same with channels 8 on
          const int c = ((q % cpt) * 64 + kk * 16 + (lane & 3) * 2) >> 1;
          slo = *(const uint32_t *)&ssc[c], blo = *(const uint32_t *)&sbi[c];
          shi = *(const uint32_t *)&ssc[c + 4], bhi = *(const uint32_t *)&sbi[c + 4];
        }
  #pragma unroll
        for (int mi = 0; mi < MI; mi++) {
          const int rr = mi * 64 + wq * 16 + (lane & 15), ch = kk * 2 + (lane >> 4);
          ldmatrix_x4(fa[mi], (const half *)(a_s + rr * 128 + ((ch ^ (rr & 7)) << 4)));
          if (PRO)
  #pragma unroll
            for (int j = 0; j < 4; j++)
              asm("fma.rn.oob.relu.f16x2 %0, %0, %1, %2;\n" : "+r"(fa[mi][j]) : "r"(j < 2 ? slo : shi), "r"(j < 2 ? blo : bhi));
        }
      };
      // k-step ks's MMAs on cur; once the step before is done, its fragments' registers (nxt) take step ks + 1's,
      // prepared while these MMAs run; a stage goes back to the producer when the MMAs of its last k-step are done
      const int steps = 4 * nq;
      auto step = [&](int ks, uint32_t (&cur)[MI][4], uint32_t (&nxt)[MI][4]) {
        const int q = ks >> 2, kk = ks & 3;
        const uint8_t *b_s = Bs + ((g0 + q) % C::ST) * C::B_BYTES;
        wg_fence();
  #pragma unroll
        for (int mi = 0; mi < MI; mi++) wgmma_rs(acc[mi], cur[mi], sw128_desc(b_s + kk * 32), ks > 0);
        wg_commit();
        wg_wait<1>();
        if (kk == 0 && q > 0 && lane == 0) mbar_arrive(&empty[(g0 + q - 1) % C::ST]);
        if (ks + 1 < steps) prep(ks + 1, nxt);
      };
      uint32_t f0[MI][4], f1[MI][4];
      prep(0, f0);
      for (int ks = 0; ks < steps; ks += 2) step(ks, f0, f1), step(ks + 1, f1, f0); // steps is a multiple of 4
      if (PERSIST) { // the tile's last stage goes back too: the producer is loading the next tile's
        wg_wait<0>();
        if (lane == 0) mbar_arrive(&empty[(g0 + nq - 1) % C::ST]);
      }
    } else {
      // RS, a stage at a time: stage q's A fragments (4 k-steps of 16 channels) from shared memory by ldmatrix, through
      // the prologue: one fma.rn.oob.relu.f16x2 a register, scale·x + bias, ReLU, and +0 where x is the engine's
      // OOB-NaN, i.e. the padding (xn's fill)
      auto prep = [&](int q, uint32_t (&fa)[MI][4][4]) {
        const int st = (g0 + q) % C::ST, c0 = (q % cpt) * 64;
        mbar_wait(&full[st], ((g0 + q) / C::ST) & 1);
        const uint8_t *a_s = base + st * C::A_BYTES + wg * MI * 64 * 128;
  #pragma unroll
        for (int kk = 0; kk < 4; kk++) {
          uint32_t slo, blo, shi, bhi;
          if (PRO) { // a0 a1: rows g, channels 2t, 2t + 1; a2 a3: rows g + 8; then the same with channels 8 on
            const int c = (c0 + kk * 16 + (lane & 3) * 2) >> 1;
            slo = *(const uint32_t *)&ssc[c], blo = *(const uint32_t *)&sbi[c];
            shi = *(const uint32_t *)&ssc[c + 4], bhi = *(const uint32_t *)&sbi[c + 4];
          }
  #pragma unroll
          for (int mi = 0; mi < MI; mi++) {
            const int rr = mi * 64 + wq * 16 + (lane & 15), ch = kk * 2 + (lane >> 4);
            ldmatrix_x4(fa[mi][kk], (const half *)(a_s + rr * 128 + ((ch ^ (rr & 7)) << 4)));
            if (PRO)
  #pragma unroll
              for (int j = 0; j < 4; j++)
                asm("fma.rn.oob.relu.f16x2 %0, %0, %1, %2;\n" : "+r"(fa[mi][kk][j]) : "r"(j < 2 ? slo : shi), "r"(j < 2 ? blo : bhi));
          }
        }
      };
      // stage q's MMAs on cur; where the registers allow (DB), stage q + 1's fragments are prepared in nxt meanwhile
      constexpr bool DB = MI * C::ACC <= 64;
      auto step = [&](int q, uint32_t (&cur)[MI][4][4], auto &nxt) {
        const uint8_t *b_s = Bs + ((g0 + q) % C::ST) * C::B_BYTES;
        wg_fence();
  #pragma unroll
        for (int kk = 0; kk < 4; kk++)
  #pragma unroll
          for (int mi = 0; mi < MI; mi++) wgmma_rs(acc[mi], cur[mi][kk], sw128_desc(b_s + kk * 32), q > 0 || kk > 0);
        wg_commit();
        if constexpr (DB) {
          if (q + 1 < nq) prep(q + 1, nxt);
        }
        wg_wait<0>(); // the fragments are registers: this stage's MMAs finish before they are written again
        if (lane == 0) mbar_arrive(&empty[(g0 + q) % C::ST]);
      };
      uint32_t fa0[MI][4][4], fa1[MI][4][DB ? 4 : 1];
      if constexpr (DB) {
        prep(0, fa0);
        for (int q = 0; q < nq; q += 2) {
          step(q, fa0, fa1);
          if (q + 1 < nq) step(q + 1, fa1, fa0);
        }
      } else {
        for (int q = 0; q < nq; q++) prep(q, fa0), step(q, fa0, fa0);
      }
    }
  } else {
    for (int q = 0; q < nq; q++) {
      const int st = (g0 + q) % C::ST;
      mbar_wait(&full[st], ((g0 + q) / C::ST) & 1);
      const uint8_t *a_s = base + st * C::A_BYTES + wg * MI * 64 * 128, *b_s = Bs + st * C::B_BYTES;
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
          wgmma_ss(acc[mi], sw128_desc(a_s + mi * 64 * 128 + kk * 32), sw128_desc(b_s + kk * 32), q > 0 || kk > 0);
      wg_commit();
      wg_wait<1>(); // the previous step's MMAs are done: its stage goes back to the producer
      if (q > 0 && lane == 0) mbar_arrive(&empty[(g0 + q - 1) % C::ST]);
    }
  }
  wg_wait<0>();
  if (PERSIST && !RS && lane == 0) mbar_arrive(&empty[(g0 + nq - 1) % C::ST]); // SS: the tile's last stage
#pragma unroll
  for (int mi = 0; mi < MI; mi++) pin(acc[mi]);
  // epilogue: the tile through shared memory (the stages are free once both warpgroups are past their last MMA), as
  // BN/64 slabs a warpgroup of its 64·MI rows × 64 channels, 128-byte swizzled, which the TMA engine stores to y; the
  // statistics are summed from there. Fragment j of m64nN holds columns 8j + 2(lane % 4) + {0, 1} of rows g, g + 8.
  uint8_t *ep = (PERSIST ? epbuf : base) + wg * (MI * 64 * BN * 2);
  if (PERSIST) { // the previous tile's store has read the buffer
    if (wt == 0) bulk_wait_read();
    asm volatile("bar.sync %0, 128;\n" ::"r"(2 + wg) : "memory");
  } else {
    asm volatile("bar.sync 1, 256;\n" ::: "memory");
  }
#pragma unroll
  for (int j = 0; j < BN / 8; j++)
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
      for (int hr = 0; hr < 2; hr++) {
        const int rr = mi * 64 + wq * 16 + (lane >> 2) + 8 * hr;
        *(half2 *)(ep + (j >> 3) * (MI * 64 * 128) + rr * 128 + (((j & 7) ^ (rr & 7)) << 4) + (lane & 3) * 4) =
            __floats2half2_rn(acc[mi][4 * j + 2 * hr], acc[mi][4 * j + 2 * hr + 1]);
      }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); // the stores, made visible to the TMA engine
  asm volatile("bar.sync %0, 128;\n" ::"r"(2 + wg) : "memory");
  if (wt == 0) {
#pragma unroll
    for (int sl = 0; sl < BN / 64; sl++) tma_store_2d(&ty, k0 + sl * 64, m0 + wg * MI * 64, ep + sl * (MI * 64 * 128));
    bulk_commit();
  }
  if (STATS) { // a thread sums a pair of columns over every (128 / (BN/2))-th row of its warpgroup's
    constexpr int PAIRS = BN / 2, GROUPS = 128 / PAIRS > 1 ? 128 / PAIRS : 1;
    for (int pr = wt % PAIRS; pr < PAIRS; pr += 128) {
      const int col = 2 * pr, j = col >> 3;
      const uint8_t *src = ep + (j >> 3) * (MI * 64 * 128) + (col & 7) * 2;
      float s0 = 0.0f, s1 = 0.0f, q0 = 0.0f, q1 = 0.0f;
      for (int rr = wt / PAIRS; rr < MI * 64; rr += GROUPS) {
        const float2 f = __half22float2(*(const half2 *)(src + rr * 128 + (((j & 7) ^ (rr & 7)) << 4)));
        s0 += f.x, s1 += f.y, q0 += f.x * f.x, q1 += f.y * f.y;
      }
      atomicAdd(&red[col], s0), atomicAdd(&red[col + 1], s1);
      atomicAdd(&red[BN + col], q0), atomicAdd(&red[BN + col + 1], q1);
    }
    asm volatile("bar.sync 1, 256;\n" ::: "memory"); // the consumers only: the producer warp has left
    for (int i = tid; i < 2 * BN; i += 256) {
      const float v = red[i];
      red[i] = 0.0f; // for the next tile (PERSIST)
      atomicAdd((i < BN ? sum : sqsum) + k0 + i % BN, v);
    }
    if (PERSIST) asm volatile("bar.sync 1, 256;\n" ::: "memory"); // every sum read and zeroed before the next tile's
  }
  } // the tiles
  if (wt == 0) bulk_wait_read(); // the block's shared memory lives until the engine has read the tile
}

// the driver's tensor-map encoder, through the runtime (no -lcuda)
static PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 f = NULL;
  if (!f) {
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&f, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !f) { printf("cuTensorMapEncodeTiled: not found in the driver\n"); exit(1); }
  }
  return f;
}
// a fp16 tensor of `dims` (innermost first, contiguous) as a map of boxes `box`, 128-byte swizzled; nan: what falls
// outside is filled with the engine's OOB-NaN (which fma.rn.oob turns into 0) instead of zeros
static CUtensorMap fp16_map(const char *what, const void *p, int rank, const cuuint64_t *dims, const cuuint32_t *box,
                            CUtensorMapL2promotion l2, bool nan) {
  CUtensorMap m;
  cuuint64_t strides[4];
  cuuint64_t stride = 2;
  for (int i = 0; i + 1 < rank; i++) strides[i] = stride *= dims[i];
  const cuuint32_t e[5] = {1, 1, 1, 1, 1};
  const CUresult r = encode_tiled()(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, rank, (void *)p, dims, strides, box, e,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, l2,
                                    nan ? CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA : CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) { printf("cuTensorMapEncodeTiled (%s): error %d\n", what, (int)r); exit(1); }
  return m;
}
// x (N, H, W, C) in boxes of 64 channels × bw × bh × bn, with zeros and with OOB-NaN outside
static void x_maps(const char *what, const conv_shape &s, const half *x, int bw, int bh, int bn, CUtensorMap *zero,
                   CUtensorMap *nan) {
  const cuuint64_t dims[4] = {(cuuint64_t)s.C, (cuuint64_t)s.W, (cuuint64_t)s.H, (cuuint64_t)s.N};
  const cuuint32_t box[4] = {64, (cuuint32_t)bw, (cuuint32_t)bh, (cuuint32_t)bn};
  *zero = fp16_map(what, x, 4, dims, box, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, false);
  *nan = fp16_map(what, x, 4, dims, box, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, true);
}
// a matrix of rows × cols (cols contiguous) in boxes of 64 columns × box_rows
static CUtensorMap rows_map(const char *what, const half *p, size_t cols, size_t rows, int box_rows, CUtensorMapL2promotion l2) {
  const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
  const cuuint32_t box[2] = {64, (cuuint32_t)box_rows};
  return fp16_map(what, p, 2, dims, box, l2, false);
}
struct wg_maps { CUtensorMap x, xn, w, y; }; // xn: x with the padding filled by OOB-NaN (the prologue's)
// whether a BM × BN tiling of whole image rows fits the shape
static bool wg_fits(const conv_shape &s, int BM, int BN) {
  const int HW = s.H * s.W;
  return s.C % 64 == 0 && s.C <= 512 && s.K % BN == 0 && ((size_t)s.N * HW) % BM == 0 && BM % s.W == 0 &&
         (HW % BM == 0 || BM % HW == 0) && s.W <= 256 && s.H <= 256 && BM / HW <= 256;
}
static wg_maps wg_make_maps(const conv_shape &s, int BM, int BN, const half *x, const half *w, half *y) {
  wg_maps m;
  const int HW = s.H * s.W;
  x_maps("x", s, x, s.W, BM <= HW ? BM / s.W : s.H, BM <= HW ? 1 : BM / HW, &m.x, &m.xn);
  m.w = rows_map("w", w, (size_t)s.R * s.S * s.C, s.K, BN, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  m.y = rows_map("y", y, s.K, (size_t)s.N * HW, BM / 2, CU_TENSOR_MAP_L2_PROMOTION_NONE); // a warpgroup's rows, one slab
  return m;
}
// mode 0: SS plain, 1: SS + statistics, 2: RS plain, 3: RS prologue + statistics
// 4: RS prologue + statistics, pipelined a k-step of 16 channels at a time instead of a stage of 64
enum { WG_MODES = 5 };
static const char *const wg_mode_name[WG_MODES] = {"SS plain", "SS + stats", "RS plain", "RS prologue + stats",
                                                   "RS/k16 prologue + stats"};
template <int BN, int MI, int MINB, bool RS, bool PRO, bool STATS, bool KSTEP, bool PERSIST>
static void wg_launch(cudaStream_t st, const conv_shape &s, const wg_maps &m, const half2 *sc2, const half2 *bi2,
                      float *sum) { // y is the one m.y maps
  using C = wg_cfg<BN, MI, MINB, PERSIST>;
  static bool ready = false; // the first call is a check's, outside any capture
  if (!ready) {
    CK(cudaFuncSetAttribute(igemm_fwd_wg<BN, MI, MINB, RS, PRO, STATS, KSTEP, PERSIST>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
    ready = true;
  }
  if (STATS) CK(cudaMemsetAsync(sum, 0, 2 * (size_t)s.K * sizeof(float), st));
  static int sms = 0;
  if (!sms) CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const unsigned tiles_n = s.K / BN, tiles_m = (unsigned)((size_t)s.N * s.H * s.W / C::BM);
  const dim3 grid = PERSIST ? dim3(std::min(tiles_n * tiles_m, (unsigned)(sms * MINB))) : dim3(tiles_n, tiles_m);
  igemm_fwd_wg<BN, MI, MINB, RS, PRO, STATS, KSTEP, PERSIST><<<grid, C::THREADS, C::SMEM, st>>>(s, PRO ? m.xn : m.x, m.w, m.y, sc2, bi2, sum, sum + s.K);
}
template <int BN, int MI, int MINB, bool PERSIST>
static void wg_run(int mode, cudaStream_t st, const conv_shape &s, const wg_maps &m, const half2 *sc2, const half2 *bi2,
                   float *sum) {
  if (mode == 0) wg_launch<BN, MI, MINB, false, false, false, false, PERSIST>(st, s, m, sc2, bi2, sum);
  else if (mode == 1) wg_launch<BN, MI, MINB, false, false, true, false, PERSIST>(st, s, m, sc2, bi2, sum);
  else if (mode == 2) wg_launch<BN, MI, MINB, true, false, false, false, PERSIST>(st, s, m, sc2, bi2, sum);
  else if (mode == 3) wg_launch<BN, MI, MINB, true, true, true, false, PERSIST>(st, s, m, sc2, bi2, sum);
  else wg_launch<BN, MI, MINB, true, true, true, true, PERSIST>(st, s, m, sc2, bi2, sum);
}
struct wg_variant {
  int BN, MI, MINB, persist, stages;
  void (*run)(int, cudaStream_t, const conv_shape &, const wg_maps &, const half2 *, const half2 *, float *);
};
#define WG_VARIANT(bn, mi, minb, p) {bn, mi, minb, p, wg_cfg<bn, mi, minb, p>::ST, wg_run<bn, mi, minb, p>}
// the persistent ones (p 1) were added after 2026-12-07's last GPU call and have not run yet
static const wg_variant wg_variants[] = {WG_VARIANT(64, 1, 2, 0), WG_VARIANT(64, 2, 1, 0), WG_VARIANT(128, 1, 2, 0),
                                         WG_VARIANT(128, 1, 1, 0), WG_VARIANT(128, 2, 1, 0), WG_VARIANT(256, 1, 1, 0),
                                         WG_VARIANT(64, 1, 2, 1), WG_VARIANT(128, 1, 1, 1), WG_VARIANT(128, 2, 1, 1),
                                         WG_VARIANT(256, 1, 1, 1)};

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

// ---- v3's weight gradient: dWᵀ = act(x)ᵀ · dy on wgmma, fed by TMA ----
// For one tap and 64 input channels, D[c][k] = Σ over pixels p of act(x[p shifted by the tap][c]) · dy[p][k]: M = the
// 64 channels, N = BN output channels, the reduction over a span of pixels (split-K: the pixels are many, the tiles
// few; each split stores its fp32 partial sums in its slice of a workspace, which wgrad_sum adds up). A stage is PX
// pixels, whole image rows, so x's tile is the forward's 4-D box at the tap's offset (zeros, or OOB-NaN for the
// prologue, where it falls outside) and dy's is a 2-D box of PX pixel rows × 64 channels a slab; both land 128-byte
// swizzled with the pixels as rows, which makes them MN-major operands (the channels run along the rows): the
// descriptors' 8-row groups are 1024 bytes apart along the reduction (SBO) and dy's 64-channel slabs a stage's PX
// rows apart along N (LBO), read with the transpose flags. RS loads act(x)ᵀ's fragments by ldmatrix.trans instead and runs the prologue on them: each register
// holds two pixels of one channel, so the thread's two channels' scale and bias are fixed for the whole block.
// NWG consumer warpgroups a block, each its own (tap, 64 channels) item of the R·S·C/64, all on the same dy tile; a
// stage is PX pixels (64 or 128); MINB blocks an SM as the accumulators' registers and three stages' bytes allow
template <int BN, int NWG, int PX> struct wgw_cfg {
  static constexpr int A_BYTES = NWG * PX * 128, B_BYTES = PX * 128 * (BN / 64), STAGE = A_BYTES + B_BYTES, G = PX / 64;
  static constexpr int MINB_R = NWG * BN == 64 ? 3 : NWG * BN == 128 ? 2 : 1, MINB_S = 224 * 1024 / (3 * STAGE + 2048);
  static constexpr int MINB = MINB_R < MINB_S ? MINB_R : MINB_S, ST_ = (224 * 1024 / MINB - 2048) / STAGE;
  static constexpr int ST = ST_ > 6 ? 6 : ST_, THREADS = NWG * 128 + 32;
  static constexpr int SMEM = 1024 + ST * STAGE + 2 * ST * 8;
};
// an MN-major operand of 128-byte swizzled rows: 8-row groups 1024 bytes apart, 64-element slabs lbo bytes apart
__device__ __forceinline__ uint64_t sw128_mn_desc(const void *p, int lbo) {
  return (uint64_t)((smem_u32(p) & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
         (1ull << 62);
}
// the prologue's scale and bias of channels c and c + 8, each channel's as a half2 of itself: a register of act(x)ᵀ
// holds two pixels of one channel
__device__ __forceinline__ void channel_pairs(const half2 *sc2, const half2 *bi2, int c, uint32_t &slo, uint32_t &shi,
                                              uint32_t &blo, uint32_t &bhi) {
  const half *sc = (const half *)sc2, *bi = (const half *)bi2;
  const half2 v0 = __half2half2(sc[c]), v1 = __half2half2(sc[c + 8]), v2 = __half2half2(bi[c]), v3 = __half2half2(bi[c + 8]);
  slo = *(const uint32_t *)&v0, shi = *(const uint32_t *)&v1, blo = *(const uint32_t *)&v2, bhi = *(const uint32_t *)&v3;
}
template <int BN, int NWG, int PX, bool RS, bool PRO>
__global__ void __launch_bounds__(wgw_cfg<BN, NWG, PX>::THREADS, wgw_cfg<BN, NWG, PX>::MINB)
    igemm_wgrad_wg(conv_shape s, int span, const __grid_constant__ CUtensorMap tx, const __grid_constant__ CUtensorMap tdy,
                   const half2 *__restrict__ sc2, const half2 *__restrict__ bi2, float *__restrict__ dw) {
  using C = wgw_cfg<BN, NWG, PX>;
  constexpr int G = C::G, LBO = PX * 128; // 64-pixel groups a stage; dy's slabs' distance
  extern __shared__ uint8_t smem_raw[];
  uint8_t *base = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  uint8_t *Bs = base + C::ST * C::A_BYTES;
  uint64_t *full = (uint64_t *)(Bs + C::ST * C::B_BYTES), *empty = full + C::ST;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int P = s.N * s.H * s.W, HW = s.H * s.W, Kred = s.R * s.S * s.C, cpt = s.C / 64;
  const int k0 = blockIdx.x * BN, items = s.R * s.S * cpt, nwg = min(NWG, items - (int)blockIdx.y * NWG);
  const int p0 = blockIdx.z * span, p1 = min(P, p0 + span), nq = (p1 - p0) / PX;
  if (nq <= 0) return;
  if (tid == 0) {
    for (int i = 0; i < C::ST; i++) mbar_init(&full[i], 1), mbar_init(&empty[i], 4 * NWG);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (warp == 4 * NWG) { // the producer: each warpgroup's x box at its tap, and the one dy box
    if (lane == 0)
      for (int q = 0; q < nq; q++) {
        const int st = q % C::ST, p = p0 + q * PX, n = p / HW, h = (p % HW) / s.W;
        if (q >= C::ST) mbar_wait(&empty[st], (q / C::ST - 1) & 1);
        mbar_expect(&full[st], nwg * PX * 128 + C::B_BYTES);
        for (int g = 0; g < nwg; g++) {
          const int it = blockIdx.y * NWG + g, tap = it / cpt, c0 = (it % cpt) * 64, r = tap / s.S, t = tap % s.S;
          tma_4d(base + st * C::A_BYTES + g * PX * 128, &tx, c0, t - s.pad, h + r - s.pad, n, &full[st]);
        }
#pragma unroll
        for (int sl = 0; sl < BN / 64; sl++) tma_2d(Bs + st * C::B_BYTES + sl * LBO, &tdy, k0 + sl * 64, p, &full[st]);
      }
    return;
  }
  // a warpgroup past the last item only keeps the pipeline's count: it waits for and releases each stage
  const int wg = warp >> 2, wq = warp & 3, it = blockIdx.y * NWG + wg; // rows (channels) 16·wq .. of its 64
  if (wg >= nwg) {
    for (int q = 0; q < nq; q++) {
      mbar_wait(&full[q % C::ST], (q / C::ST) & 1);
      if (lane == 0) mbar_arrive(&empty[q % C::ST]);
    }
    return;
  }
  const int tap = it / cpt, c0 = (it % cpt) * 64;
  float acc[BN / 2];
  uint32_t slo = 0, shi = 0, blo = 0, bhi = 0; // channels 16wq + g and + 8, each twice (a register's two pixels)
  if (PRO) channel_pairs(sc2, bi2, c0 + wq * 16 + (lane >> 2), slo, shi, blo, bhi);
  if (RS) {
    // group gq (64 pixels: stage gq / G, its part gq % G): the fragments of act(x)ᵀ for 4 k-steps of 16 pixels,
    // matrices (c 0-7 | 8-15) × (p 0-7 | 8-15), lane group i of ldmatrix.x4.trans pointing at matrix i's pixel rows
    auto prep = [&](int gq, uint32_t (&fa)[4][4]) {
      const int q = gq / G, st = q % C::ST;
      if (gq % G == 0) mbar_wait(&full[st], (q / C::ST) & 1);
      const uint8_t *a_s = base + st * C::A_BYTES + wg * PX * 128 + (gq % G) * 64 * 128;
#pragma unroll
      for (int kk = 0; kk < 4; kk++) {
        const int rr = kk * 16 + (lane & 7) + ((lane >> 4) << 3), ch = wq * 2 + ((lane >> 3) & 1);
        ldmatrix_x4_trans(fa[kk], (const half *)(a_s + rr * 128 + ((ch ^ (rr & 7)) << 4)));
        if (PRO)
#pragma unroll
          for (int j = 0; j < 4; j++)
            asm("fma.rn.oob.relu.f16x2 %0, %0, %1, %2;\n" : "+r"(fa[kk][j]) : "r"(j & 1 ? shi : slo), "r"(j & 1 ? bhi : blo));
      }
    };
    const int groups = nq * G;
    auto step = [&](int gq, uint32_t (&cur)[4][4], uint32_t (&nxt)[4][4]) {
      const int q = gq / G;
      const uint8_t *b_s = Bs + (q % C::ST) * C::B_BYTES + (gq % G) * 64 * 128;
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < 4; kk++) wgmma_rs<1>(acc, cur[kk], sw128_mn_desc(b_s + kk * 2048, LBO), gq > 0 || kk > 0);
      wg_commit();
      if (gq + 1 < groups) prep(gq + 1, nxt);
      wg_wait<0>();
      if (gq % G == G - 1 && lane == 0) mbar_arrive(&empty[q % C::ST]);
    };
    uint32_t f0[4][4], f1[4][4];
    prep(0, f0);
    for (int gq = 0; gq < groups; gq += 2) {
      step(gq, f0, f1);
      if (gq + 1 < groups) step(gq + 1, f1, f0);
    }
  } else {
    for (int q = 0; q < nq; q++) {
      const int st = q % C::ST;
      mbar_wait(&full[st], (q / C::ST) & 1);
      const uint8_t *a_s = base + st * C::A_BYTES + wg * PX * 128, *b_s = Bs + st * C::B_BYTES;
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < PX / 16; kk++)
        wgmma_ss<1, 1>(acc, sw128_mn_desc(a_s + kk * 2048, LBO), sw128_mn_desc(b_s + kk * 2048, LBO), q > 0 || kk > 0);
      wg_commit();
      wg_wait<1>();
      if (q > 0 && lane == 0) mbar_arrive(&empty[(q - 1) % C::ST]);
    }
  }
  wg_wait<0>();
  pin(acc);
  // D[c][k]: fragment j holds k = 8j + 2(lane % 4) + {0, 1} of channels g and g + 8 (this warp's 16). Stored, not
  // added: split z's partial sums go to its own slice of dw (dw itself where there is one split), and wgrad_sum adds
  // the slices, so no two blocks write one address and dW comes out the same every run
  float *out = dw + (size_t)blockIdx.z * s.K * Kred;
#pragma unroll
  for (int j = 0; j < BN / 8; j++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int c = c0 + wq * 16 + (lane >> 2) + 8 * (e >> 1), k = k0 + j * 8 + (lane & 3) * 2 + (e & 1);
      out[(size_t)k * Kred + tap * s.C + c] = acc[4 * j + e];
    }
}
// dW = the sum of the splits' slices of ws, four floats a thread, four slices' loads in flight (dW is small: a
// thread has tens of slices to add, which one load at a time left latency-bound)
__global__ void wgrad_sum(size_t n4, int splits, const float4 *__restrict__ ws, float4 *__restrict__ dw) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    int z = 0;
    for (; z + 4 <= splits; z += 4) {
      float4 b[4];
#pragma unroll
      for (int u = 0; u < 4; u++) b[u] = ws[(z + u) * n4 + i];
#pragma unroll
      for (int u = 0; u < 4; u++) a.x += b[u].x, a.y += b[u].y, a.z += b[u].z, a.w += b[u].w;
    }
    for (; z < splits; z++) {
      const float4 b = ws[z * n4 + i];
      a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
    }
    dw[i] = a;
  }
}
static bool wgw_fits(const conv_shape &s, int BN, int PX) {
  const int HW = s.H * s.W;
  return s.C % 64 == 0 && s.K % BN == 0 && PX % s.W == 0 && (HW % PX == 0 || PX % HW == 0) && (s.N * HW) % PX == 0;
}
struct wgw_maps { CUtensorMap x, xn, dy; };
static wgw_maps wgw_make_maps(const conv_shape &s, int PX, const half *x, const half *dy) {
  wgw_maps m;
  const int HW = s.H * s.W;
  x_maps("wgrad x", s, x, s.W, PX <= HW ? PX / s.W : s.H, PX <= HW ? 1 : PX / HW, &m.x, &m.xn);
  m.dy = rows_map("wgrad dy", dy, s.K, (size_t)s.N * HW, PX, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  return m;
}
// mode 0: SS plain, 1: RS plain, 2: RS prologue
enum { WGW_MODES = 3 };
static const char *const wgw_mode_name[WGW_MODES] = {"SS plain", "RS plain", "RS prologue"};
// ws: the splits' partial sums (splits · K · R·S·C floats), where there is more than one split
template <int BN, int NWG, int PX, bool RS, bool PRO>
static void wgw_launch(cudaStream_t st, const conv_shape &s, int span, const wgw_maps &m, const half2 *sc2,
                       const half2 *bi2, float *dw, float *ws) {
  using C = wgw_cfg<BN, NWG, PX>;
  static bool ready = false;
  if (!ready) {
    CK(cudaFuncSetAttribute(igemm_wgrad_wg<BN, NWG, PX, RS, PRO>, cudaFuncAttributeMaxDynamicSharedMemorySize, C::SMEM));
    ready = true;
  }
  const int P = s.N * s.H * s.W, Kred = s.R * s.S * s.C, splits = (P + span - 1) / span;
  const dim3 grid(s.K / BN, (s.R * s.S * (s.C / 64) + NWG - 1) / NWG, splits);
  igemm_wgrad_wg<BN, NWG, PX, RS, PRO><<<grid, C::THREADS, C::SMEM, st>>>(s, span, PRO ? m.xn : m.x, m.dy, sc2, bi2,
                                                                          splits > 1 ? ws : dw);
  if (splits > 1) {
    const size_t n4 = (size_t)s.K * Kred / 4;
    wgrad_sum<<<(unsigned)std::min((size_t)2048, (n4 + 255) / 256), 256, 0, st>>>(n4, splits, (const float4 *)ws, (float4 *)dw);
  }
}
template <int BN, int NWG, int PX>
static void wgw_run(int mode, cudaStream_t st, const conv_shape &s, int span, const wgw_maps &m, const half2 *sc2,
                    const half2 *bi2, float *dw, float *ws) {
  if (mode == 0) wgw_launch<BN, NWG, PX, false, false>(st, s, span, m, sc2, bi2, dw, ws);
  else if (mode == 1) wgw_launch<BN, NWG, PX, true, false>(st, s, span, m, sc2, bi2, dw, ws);
  else wgw_launch<BN, NWG, PX, true, true>(st, s, span, m, sc2, bi2, dw, ws);
}
struct wgw_variant {
  int BN, NWG, PX, MINB, stages;
  void (*run)(int, cudaStream_t, const conv_shape &, int, const wgw_maps &, const half2 *, const half2 *, float *, float *);
};
#define WGW_VARIANT(bn, nwg, px) \
  {bn, nwg, px, wgw_cfg<bn, nwg, px>::MINB, wgw_cfg<bn, nwg, px>::ST, wgw_run<bn, nwg, px>}
static const wgw_variant wgw_variants[] = {WGW_VARIANT(64, 1, 64), WGW_VARIANT(64, 1, 128), WGW_VARIANT(128, 1, 64),
                                           WGW_VARIANT(128, 1, 128), WGW_VARIANT(64, 2, 128), WGW_VARIANT(128, 2, 128)};
// pixels a block (a multiple of PX) for at most `waves` of blocks over the SMs' slots: the splits are rounded down,
// and the span up, so that one block more than the slots hold does not make a second wave
static int wgw_span(const conv_shape &s, const wgw_variant &v, int sms, double waves) {
  const int P = s.N * s.H * s.W, tiles = (s.K / v.BN) * ((s.R * s.S * (s.C / 64) + v.NWG - 1) / v.NWG);
  const int splits = std::max(1, std::min(P / v.PX, (int)floor(waves * v.MINB * sms / tiles)));
  return ((P + splits - 1) / splits + v.PX - 1) / v.PX * v.PX;
}

// ---- v3's weight gradient over the nine taps at once (3×3, padding 1) ----
// The one-tap kernel above reads its x box and the whole dy from L2 once per tap: 32 flops a byte, and Nsight
// Compute has it L2-bound. Here a block owns 64 input channels × 64 output channels for all nine taps: a stage is PX
// output pixels (whole rows RW of one image) of dy and the haloed x patch under them, (RW + 2) × (W + 2) pixels of
// 64 channels, one 4-D box at (c0, -1, h0 - 1, n) whose outside the engine fills (zeros, or OOB-NaN for the
// prologue). Three warpgroups take a filter row each (r = 0, 1, 2) and its three taps, three accumulators of
// 64 × 64; tap (r, s)'s operand act(x)ᵀ is the patch shifted by r rows and s columns, gathered by ldmatrix.trans
// with each lane's own row address (a shifted view is not a descriptor's regular layout, and in registers it needs
// none), then the one-instruction prologue. dy is the MN-major descriptor operand, as above. Each stage's MMAs are
// 9 × 64 × 64 × PX × 2 flops for (RW + 2)(W + 2) + PX rows of 128 bytes: about 7 times the one-tap kernel's reuse.
// Status: written and compiled on 2026-12-07 after that session's last GPU call; it has not run yet. The lab checks it
// against float64 (plain and with the prologue, one split and an odd one) before it times it.
enum { W9_ST = 4, W9_A_MAX = 26 * 1024, W9_THREADS = 3 * 128 };
static const int W9_SMEM = 1024 + W9_ST * (W9_A_MAX + 128 * 128) + 2 * W9_ST * 8;
template <int G, bool PRO> // G: 64-pixel groups a stage (PX = 64·G)
__global__ void __launch_bounds__(W9_THREADS, 1) igemm_wgrad9_wg(conv_shape s, int span, const __grid_constant__ CUtensorMap tx,
                                                                const __grid_constant__ CUtensorMap tdy,
                                                                const half2 *__restrict__ sc2, const half2 *__restrict__ bi2,
                                                                float *__restrict__ dw) {
  constexpr int PX = 64 * G;
  extern __shared__ uint8_t smem_raw[];
  uint8_t *base = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  uint8_t *Bs = base + W9_ST * W9_A_MAX;
  uint64_t *full = (uint64_t *)(Bs + W9_ST * PX * 128), *empty = full + W9_ST;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int P = s.N * s.H * s.W, HW = s.H * s.W, Kred = 9 * s.C, RW = PX / s.W, PW = s.W + 2;
  const int k0 = blockIdx.x * 64, c0 = blockIdx.y * 64;
  const int p0 = blockIdx.z * span, p1 = min(P, p0 + span), nq = (p1 - p0) / PX;
  if (nq <= 0) return;
  // no producer warp (its registers are the third accumulator's): thread 0 issues stage q's loads, the first
  // W9_ST at once, then each as the stage it reuses is released by all twelve warps
  auto issue = [&](int q) {
    const int st = q % W9_ST, p = p0 + q * PX, n = p / HW, h = (p % HW) / s.W;
    mbar_expect(&full[st], (RW + 2) * PW * 128 + PX * 128);
    tma_4d(base + st * W9_A_MAX, &tx, c0, -1, h - 1, n, &full[st]);
    tma_2d(Bs + st * PX * 128, &tdy, k0, p, &full[st]);
  };
  if (tid == 0) {
    for (int i = 0; i < W9_ST; i++) mbar_init(&full[i], 1), mbar_init(&empty[i], 12);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    for (int q = 0; q < W9_ST && q < nq; q++) issue(q);
  }
  __syncthreads();
  const int r = warp >> 2, wq = warp & 3; // the filter row this warpgroup takes; channels 16·wq .. of the 64
  // this lane's patch line for k-step (gk, kk) at tap (0, 0): pixel kk·16 + (lane & 7) + 8·(lane / 16) of group gk
  int line[G][4];
#pragma unroll
  for (int gk = 0; gk < G; gk++)
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
      const int pi = gk * 64 + kk * 16 + (lane & 7) + ((lane >> 4) << 3);
      line[gk][kk] = (pi / s.W + r) * PW + pi % s.W;
    }
  const int ch = wq * 2 + ((lane >> 3) & 1);
  uint32_t slo = 0, shi = 0, blo = 0, bhi = 0; // channels 16wq + g and + 8, each twice (a register's two pixels)
  if (PRO) channel_pairs(sc2, bi2, c0 + wq * 16 + (lane >> 2), slo, shi, blo, bhi);
  float acc[3][32];
  for (int q = 0; q < nq; q++) {
    const int st = q % W9_ST;
    mbar_wait(&full[st], (q / W9_ST) & 1);
    const uint8_t *patch = base + st * W9_A_MAX, *b_s = Bs + st * PX * 128;
#pragma unroll
    for (int t = 0; t < 3; t++)
#pragma unroll
      for (int gk = 0; gk < G; gk++) {
        uint32_t fa[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
          const int L = line[gk][kk] + t;
          ldmatrix_x4_trans(fa[kk], (const half *)(patch + L * 128 + ((ch ^ (L & 7)) << 4)));
          if (PRO)
#pragma unroll
            for (int j = 0; j < 4; j++)
              asm("fma.rn.oob.relu.f16x2 %0, %0, %1, %2;\n" : "+r"(fa[kk][j]) : "r"(j & 1 ? shi : slo), "r"(j & 1 ? bhi : blo));
        }
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
          wgmma_rs<1>(acc[t], fa[kk], sw128_mn_desc(b_s + (gk * 4 + kk) * 2048, PX * 128), q > 0 || gk > 0 || kk > 0);
        wg_commit();
        wg_wait<0>(); // the fragments are one set of registers: these MMAs finish before the next are gathered
      }
    if (lane == 0) mbar_arrive(&empty[st]);
    if (tid == 0 && q + W9_ST < nq) {
      mbar_wait(&empty[st], (q / W9_ST) & 1);
      issue(q + W9_ST);
    }
  }
#pragma unroll
  for (int t = 0; t < 3; t++) pin(acc[t]);
  float *out = dw + (size_t)blockIdx.z * s.K * Kred; // split z's slice (dw itself where there is one split)
#pragma unroll
  for (int t = 0; t < 3; t++)
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int c = c0 + wq * 16 + (lane >> 2) + 8 * (e >> 1), k = k0 + j * 8 + (lane & 3) * 2 + (e & 1);
        out[(size_t)k * Kred + (r * 3 + t) * s.C + c] = acc[t][4 * j + e];
      }
}
// G (PX = 64·G pixels a stage) for this shape, or 0 where the nine-tap kernel does not fit it
static int w9_groups(const conv_shape &s) {
  if (s.R != 3 || s.S != 3 || s.pad != 1 || s.C % 64 || s.K % 64 || s.W + 2 > 256) return 0;
  const int HW = s.H * s.W;
  for (int G = 2; G >= 1; G--) {
    const int PX = 64 * G;
    if (PX % s.W == 0 && HW % PX == 0 && (PX / s.W + 2) * (s.W + 2) * 128 <= W9_A_MAX) return G;
  }
  return 0;
}
static wgw_maps w9_make_maps(const conv_shape &s, int G, const half *x, const half *dy) {
  wgw_maps m; // x's box is the haloed patch: (W + 2) × (PX/W + 2) pixels
  x_maps("wgrad9 x", s, x, s.W + 2, 64 * G / s.W + 2, 1, &m.x, &m.xn);
  m.dy = rows_map("wgrad9 dy", dy, s.K, (size_t)s.N * s.H * s.W, 64 * G, CU_TENSOR_MAP_L2_PROMOTION_L2_256B);
  return m;
}
template <int G, bool PRO>
static void w9_launch(cudaStream_t st, const conv_shape &s, int span, const wgw_maps &m, const half2 *sc2, const half2 *bi2,
                      float *dw, float *ws) {
  static bool ready = false;
  if (!ready) {
    CK(cudaFuncSetAttribute(igemm_wgrad9_wg<G, PRO>, cudaFuncAttributeMaxDynamicSharedMemorySize, W9_SMEM));
    ready = true;
  }
  const int P = s.N * s.H * s.W, splits = (P + span - 1) / span;
  igemm_wgrad9_wg<G, PRO><<<dim3(s.K / 64, s.C / 64, splits), W9_THREADS, W9_SMEM, st>>>(s, span, PRO ? m.xn : m.x, m.dy,
                                                                                        sc2, bi2, splits > 1 ? ws : dw);
  if (splits > 1) {
    const size_t n4 = (size_t)s.K * 9 * s.C / 4;
    wgrad_sum<<<(unsigned)std::min((size_t)2048, (n4 + 255) / 256), 256, 0, st>>>(n4, splits, (const float4 *)ws, (float4 *)dw);
  }
}
// mode 0: plain, 1: the prologue
static void w9_run(int G, int mode, cudaStream_t st, const conv_shape &s, int span, const wgw_maps &m, const half2 *sc2,
                   const half2 *bi2, float *dw, float *ws) {
  if (G == 2) mode ? w9_launch<2, true>(st, s, span, m, sc2, bi2, dw, ws) : w9_launch<2, false>(st, s, span, m, sc2, bi2, dw, ws);
  else mode ? w9_launch<1, true>(st, s, span, m, sc2, bi2, dw, ws) : w9_launch<1, false>(st, s, span, m, sc2, bi2, dw, ws);
}
// pixels a block for at most `waves` of one block an SM
static int w9_span(const conv_shape &s, int G, int sms, double waves) {
  const int P = s.N * s.H * s.W, PX = 64 * G, tiles = (s.K / 64) * (s.C / 64);
  const int splits = std::max(1, std::min(P / PX, (int)floor(waves * sms / tiles)));
  return ((P + splits - 1) / splits + PX - 1) / PX * PX;
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
             "RS %7.1f; RS prologue + stats %7.1f (+%.1f over SS), a k-step at a time %7.1f\n", 128 * wgv[i]->MI,
             wgv[i]->BN, wgv[i]->MINB, wgv[i]->persist ? " persistent" : "", wgv[i]->stages, t[0], flops / t[0] * 1e-6, t[0] / best, t[1], t[1] - t[0], t[2],
             t[3], t[3] - t[0], t[4]);
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
