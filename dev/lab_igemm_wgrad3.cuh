// lab_igemm_wgrad3.cuh — v3 of dev/lab_igemm_conv.cu's weight gradient on wgmma fed by TMA: the one-tap kernel
// (wgw_variants) and the nine-tap one, their split-K workspace sum (wgrad_sum) and launches.
#pragma once
#include "lab_igemm_tma.cuh"

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
