// lab_igemm_mma.cuh — dev/lab_igemm_conv.cu's mma.sync kernels: v1 (register-staged) and v2 (cp.async) forward, and
// the weight gradient with the prologue; with their launches (bn_params, run, wgrad).
#pragma once
#include "lab_igemm.cuh"

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

// v1's and v2's epilogue: the 128 × 64 tile's fp16 output and, with STATS, each channel's sum and sum of squares of
// the stored values (warp shuffles, then shared memory across the block's warps, then one float atomicAdd per channel
// and block); red_smem: shared memory the tiles are done with, 2 × 4 × BN floats
template <bool STATS>
__device__ __forceinline__ void mma_epilogue(const conv_shape &s, const float (&acc)[2][4][4], half *__restrict__ y,
                                             float *__restrict__ sum, float *__restrict__ sqsum, void *red_smem, int m0,
                                             int n0, int tid) {
  const int lane = tid & 31, warp = tid >> 5, wm = warp & 3, wn = warp >> 2, M = s.N * s.H * s.W;
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
  float(*red)[4][BN] = reinterpret_cast<float(*)[4][BN]>(red_smem);
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
  // epilogue: the output, and its channels' sums of the stored values; the tiles are done with (the loop's last barrier)
  mma_epilogue<STATS>(s, acc, y, sum, sqsum, &As[0][0], m0, n0, tid);
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
  mma_epilogue<STATS>(s, acc, y, sum, sqsum, smem, m0, n0, tid);
}

// ---- the weight gradient: dW[k][r,s,c] = Σ over pixels of dy[p][k] · act(x[p shifted by the tap][c]) ----
// The GEMM is K × (R·S·C) over the N·H·W pixels: a block computes 64 output channels × one tap's 64 input channels
// over a range of pixels (split-K: the pixels are many, the tiles few), 4 warps of 32 × 32, the pixels in steps of 32.
// Both tiles are stored as they lie in memory, pixel rows of 64 channels (dy's and x's), and read transposed by
// ldmatrix.trans. A thread's 16-byte chunk is the same column at every step, so its 8 channels' scale and bias sit in
// registers and the prologue runs as the chunk is staged (register-staged, double-buffered, as v1); the padding stays
// zero. Each block adds its fp32 partial sums into dW with float2 atomics (dW zeroed first: part of the timed call).
enum { WM = 64, WN = 64, WK = 32, WT = 128 };

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
