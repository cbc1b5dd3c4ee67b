// lab_igemm_fwd3.cuh — v3 of dev/lab_igemm_conv.cu's forward: the implicit GEMM on wgmma fed by TMA, with the
// prologue and the statistics epilogue; its tilings (wg_variants) and launches.
#pragma once
#include "lab_igemm_tma.cuh"

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

// BN output channels × BM = 128·MI pixels a block (two consumer warpgroups, one producer warp); MINB blocks an SM (the stages fill what shared memory that leaves)
// PERSIST: grid of at most MINB blocks an SM, each looping over tiles (the producer runs ahead into the next tile while
// the consumers store this one), with an epilogue buffer of its own (EP bytes) as the stages are busy meanwhile
// XF: a transforming warp besides (the prologue in shared memory, below), 320 threads
template <int BN_, int MI_, int MINB_, bool PERSIST = false, bool XF = false> struct wg_cfg {
  static constexpr int BN = BN_, MI = MI_, MINB = MINB_, BM = 128 * MI, ACC = BN / 2, XT = XF ? 32 : 0, THREADS = 288 + XT;
  static constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128, STAGE = A_BYTES + B_BYTES, EP = PERSIST ? BM * BN * 2 : 0;
  static constexpr int ST_ = ((MINB == 2 ? 110 * 1024 : 220 * 1024) - EP) / STAGE, ST = ST_ > 6 ? 6 : ST_;
  static constexpr int SMEM = 1024 + EP + ST * STAGE + 3 * ST * 8 + 16 + 2 * BN * 4 + 2 * 256 * 4; // + sums, scale and bias (C ≤ 512)
};

// SS with PRO: the prologue runs in shared memory, by a transforming warp (warp 9) between the producer and the
// consumers. It waits for a stage's copies, rewrites the A tile in place — each 16-byte chunk of 8 channels
// through four fma.rn.oob.relu.f16x2, the padding's OOB-NaN to +0 — makes its stores visible to wgmma's async proxy,
// and arrives on the stage's `ready` barrier, which the consumers wait on. Each input value is still transformed once
// per tap, but off the consumers' path and without RS's fragment registers, so the MMAs stay SS. One warp, not a
// warpgroup: with 128 threads more, ptxas has 72 registers a thread for the two-blocks-an-SM tilings and 128 for the
// others, too few for 64 accumulators (128x128/2) or 128 (256-wide and 256-row tiles); 32 more leave 96 and 200. A
// warp's 16-byte loads and stores move a 16 KB A tile in about 500 cycles, under the 1,000-2,000 of its MMAs.
template <int BN, int MI, int MINB, bool RS, bool PRO, bool STATS, bool KSTEP, bool PERSIST>
__global__ void __launch_bounds__(PRO && !RS ? 320 : 288, MINB) igemm_fwd_wg(conv_shape s, const __grid_constant__ CUtensorMap tx,
                                                          const __grid_constant__ CUtensorMap tw,
                                                          const __grid_constant__ CUtensorMap ty,
                                                          const half2 *__restrict__ sc2, const half2 *__restrict__ bi2,
                                                          float *__restrict__ sum, float *__restrict__ sqsum) {
  constexpr bool XF = PRO && !RS;
  using C = wg_cfg<BN, MI, MINB, PERSIST, XF>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t *epbuf = (uint8_t *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023); // the swizzle repeats every 1024 bytes
  uint8_t *base = epbuf + C::EP, *Bs = base + C::ST * C::A_BYTES;
  uint64_t *full = (uint64_t *)(Bs + C::ST * C::B_BYTES), *empty = full + C::ST, *ready = empty + C::ST;
  float *red = (float *)(((uintptr_t)(ready + C::ST) + 15) & ~(uintptr_t)15); // 16-byte aligned: the xform's uint4 reads of ssc
  half2 *ssc = (half2 *)(red + 2 * BN), *sbi = ssc + 256; // the prologue's scale and bias, half2 pairs of channels
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int cpt = s.C / 64, nq = s.R * s.S * cpt, HW = s.H * s.W;
  // the tiles, channel tiles of a pixel tile next to each other: one a block (the grid is K/BN × M/BM), or PERSIST's loop
  const int ntn = s.K / BN, total = ntn * (int)((size_t)s.N * HW / C::BM);
  const int t_first = PERSIST ? (int)blockIdx.x : (int)(blockIdx.y * ntn + blockIdx.x), t_step = PERSIST ? (int)gridDim.x : total;
  if (tid == 0) {
    for (int i = 0; i < C::ST; i++) // empty: each consumer warp; ready: each transforming thread
      mbar_init(&full[i], 1), mbar_init(&empty[i], 8), mbar_init(&ready[i], 32);
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
  if (XF && warp == 9) { // the transforming warp: lane xt rewrites chunks xt, xt + 32, ... of each A tile
    // chunk v is row v / 8's physical 16 bytes v % 8, which hold channels c0 + 8·ch .. + 7 with ch = (v % 8) ^ (row % 8)
    // (the swizzle). A lane's v % 8 is fixed and its rows step by 4, so its ch alternates between two values: their
    // scale and bias are four uint4 registers a stage, not two shared loads a chunk
    const int xt = tid - 288, che = (xt & 7) ^ (xt >> 3), cho = (xt & 7) ^ ((xt >> 3) + 4);
    const uint4 *ssc4 = (const uint4 *)ssc, *sbi4 = (const uint4 *)sbi;
    auto xf = [](uint4 &d, const uint4 &sv, const uint4 &bv) {
      asm("fma.rn.oob.relu.f16x2 %0, %0, %1, %2;\n" : "+r"(d.x) : "r"(sv.x), "r"(bv.x));
      asm("fma.rn.oob.relu.f16x2 %0, %0, %1, %2;\n" : "+r"(d.y) : "r"(sv.y), "r"(bv.y));
      asm("fma.rn.oob.relu.f16x2 %0, %0, %1, %2;\n" : "+r"(d.z) : "r"(sv.z), "r"(bv.z));
      asm("fma.rn.oob.relu.f16x2 %0, %0, %1, %2;\n" : "+r"(d.w) : "r"(sv.w), "r"(bv.w));
    };
    for (int tile = t_first, g = 0; tile < total; tile += t_step)
      for (int q = 0; q < nq; q++, g++) {
        const int st = g % C::ST, c8 = (q % cpt) * 8; // c0 / 8
        const uint4 se = ssc4[c8 + che], be = sbi4[c8 + che], so = ssc4[c8 + cho], bo = sbi4[c8 + cho];
        mbar_wait(&full[st], (g / C::ST) & 1);
        uint4 *a4 = (uint4 *)(base + st * C::A_BYTES) + xt;
#pragma unroll 4
        for (int i = 0; i < C::BM / 4; i += 2) { // chunks xt + 32i (rows ≡ xt / 8 mod 8) and xt + 32(i + 1) (those + 4)
          uint4 d0 = a4[32 * i], d1 = a4[32 * i + 32];
          xf(d0, se, be), xf(d1, so, bo);
          a4[32 * i] = d0, a4[32 * i + 32] = d1;
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); // the stores, made visible to wgmma
        mbar_arrive(&ready[st]);
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
      if (XF) mbar_wait(&ready[st], ((g0 + q) / C::ST) & 1);
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
// 5: SS, the prologue by the transforming warp, + statistics
enum { WG_MODES = 6 };
static const char *const wg_mode_name[WG_MODES] = {"SS plain", "SS + stats", "RS plain", "RS prologue + stats",
                                                   "RS/k16 prologue + stats", "SS/xform prologue + stats"};
template <int BN, int MI, int MINB, bool RS, bool PRO, bool STATS, bool KSTEP, bool PERSIST>
static void wg_launch(cudaStream_t st, const conv_shape &s, const wg_maps &m, const half2 *sc2, const half2 *bi2,
                      float *sum) { // y is the one m.y maps
  using C = wg_cfg<BN, MI, MINB, PERSIST, PRO && !RS>;
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
  else if (mode == 4) wg_launch<BN, MI, MINB, true, true, true, true, PERSIST>(st, s, m, sc2, bi2, sum);
  else wg_launch<BN, MI, MINB, false, true, true, false, PERSIST>(st, s, m, sc2, bi2, sum);
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
