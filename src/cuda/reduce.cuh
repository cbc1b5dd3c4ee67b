/* reduce.cuh — the per-channel sums that a conv's channel bias (channel_bias_bwd) and BatchNorm (bn_*: its
 * statistics and its backward's sums) share, in both layouts. NCHW (B, C, P): one block per channel, or S blocks
 * per channel over ranges of samples whose sums go to the scratch rowsum_part and are added up in a fixed order
 * by a second kernel. NHWC (N rows of C channels): TX channel vectors x TY rows a block, S blocks over the rows,
 * a partial per (block, channel) in nhwc_part, added up in a fixed order by a warp per channel. No float
 * atomics: the same bits every run (and on every GPU: S depends on the sizes only). BatchNorm's backward mode
 * forms dz = dy act'(.) as it sums (bn.cuh). */
#ifndef LAMINA_CUDA_REDUCE_CUH
#define LAMINA_CUDA_REDUCE_CUH

#include "cuda.h"
#include "kernels.cuh"
#include "vec.cuh"
#include "bn.cuh"

/* ---- per-channel reductions over (B, C, P) ---- */

/* Threads of a reduction block; and how the samples are split: about RED_TARGET_BLOCKS blocks in all,
 * each with at least RED_MIN_PER_BLOCK values. */
#define RED_NT 256
#define RED_TARGET_BLOCKS 1024
#define RED_MIN_PER_BLOCK 8192

/* Blocks per channel S for `vals` partial sums a block and `extra` floats a channel in rowsum_part
 * (S = 1: one block per channel, which finishes the job itself). */
static int channel_splits(int B, int C, int P, int vals, int extra) {
  size_t N = (size_t)B * P, s = ((size_t)RED_TARGET_BLOCKS + C - 1) / C;
  size_t by_size = (N + RED_MIN_PER_BLOCK - 1) / RED_MIN_PER_BLOCK;
  if (s > by_size) s = by_size;
  if (s > (size_t)B) s = (size_t)B;
  size_t per_c = ROW_SUM_PART_FLOATS / (size_t)C;
  size_t room = per_c > (size_t)extra ? (per_c - extra) / vals : 0;
  if (s > room) s = room;
  return s < 1 ? 1 : (int)s;
}

/* A channel's values are indexed in 32 bits. (Channels go in gridDim.x with one block each, and in
 * gridDim.y only when split, that is when C < RED_TARGET_BLOCKS.) */
static lam_status check_channel_size(const char *what, int B, int P) {
  if ((size_t)B * P >= (size_t)1 << 31)
    return lam_fail_at(LAM_ERR_UNSUPPORTED, __FILE__, __LINE__,
                       "%s: %zu values per channel is beyond this kernel's 32-bit indexing; use a smaller batch", what,
                       (size_t)B * P);
  return LAM_OK;
}

/* The sums of a and b over the block (blockDim.x == RED_NT, every thread calls), in a fixed order:
 * shuffles within each warp, then the warps' sums in warp order. Every thread gets the result. */
__device__ inline float2 block_sum2(float a, float b) {
  __shared__ float2 warp_sum[RED_NT / 32];
  __shared__ float2 total;
  for (int off = 16; off > 0; off /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, off);
    b += __shfl_down_sync(0xffffffffu, b, off);
  }
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = make_float2(a, b);
  __syncthreads();
  if (threadIdx.x == 0) {
    float2 t = warp_sum[0];
    for (int w = 1; w < RED_NT / 32; w++) t.x += warp_sum[w].x, t.y += warp_sum[w].y;
    total = t;
  }
  __syncthreads();
  return total;
}

/* gv (dy, V values at o in units of V, channel c) becomes dz = dy act'(.): from y, or from z = (x - m)
 * sc + bt recomputed from xv exactly as the forward computed it (sc = invstd gamma, bt = beta). */
template <int ACT, int V>
__device__ __forceinline__ void bn_dz(const bn_act<ACT> &act, const float (&xv)[V], float (&gv)[V], const float *y,
                                      size_t o, float m, float sc, float bt) {
  if constexpr (ACT != BN_ACT_NONE) {
    float yv[V];
    if constexpr (bn_act<ACT>::from_y) vload<V>(yv, y, o);
#pragma unroll
    for (int q = 0; q < V; q++) {
      if constexpr (bn_act<ACT>::from_y) gv[q] = act.dz(0.0f, yv[q], gv[q]);
      else gv[q] = act.dz((xv[q] - m) * sc + bt, 0.0f, gv[q]);
    }
  }
}

/* What a reduction sums per value of channel c: dy (channel bias); x - K and (x - K)^2 with the
 * channel's first value K as the shift (BatchNorm's statistics: shifted sums keep the variance's digits
 * when the mean is large against the spread); dz and dz xhat (BatchNorm's backward, dz = dy without an
 * activation, else bn_dz's). */
enum { RED_SUM = 0, RED_STATS, RED_BWD };
struct red_args {
  int B, C, P;
  const float *x, *dy;    /* x: RED_STATS, RED_BWD; dy: RED_SUM, RED_BWD */
  const float *mean, *invstd; /* RED_BWD */
  /* RED_BWD after an activation: y (relu, leaky, tanh, sigmoid; else NULL), gamma and beta (gelu's z; may
   * be NULL: 1 and 0), leaky's slope */
  const float *y, *gamma, *beta;
  float alpha;
};

/* This thread's share of the sums of channel c over the samples [b0, b1), flattened over (b, p), V
 * values at a time (V = 4: P % 4 == 0 and x, dy, y 16-byte aligned). */
template <int MODE, int V, int ACT = BN_ACT_NONE>
__device__ float2 thread_sums(const red_args &r, int c, int b0, int b1) {
  const unsigned PV = (unsigned)r.P / V, n = (unsigned)(b1 - b0) * PV;
  const bn_act<ACT> act = {r.alpha};
  float a = 0.0f, b = 0.0f, K = 0.0f, m = 0.0f, is = 0.0f, sc = 0.0f, bt = 0.0f;
  if (MODE == RED_STATS) K = r.x[(size_t)c * r.P];
  if (MODE == RED_BWD) m = r.mean[c], is = r.invstd[c];
  if (MODE == RED_BWD && bn_act<ACT>::from_z) sc = is * gamma_of(r.gamma, c), bt = beta_of(r.beta, c);
  for (unsigned j = threadIdx.x; j < n; j += RED_NT) {
    size_t o = ((size_t)(b0 + j / PV) * r.C + c) * PV + j % PV; /* in units of V values */
    float xv[V], gv[V];
    if (MODE != RED_SUM) vload<V>(xv, r.x, o);
    if (MODE != RED_STATS) vload<V>(gv, r.dy, o);
    if (MODE == RED_BWD) bn_dz<ACT, V>(act, xv, gv, r.y, o, m, sc, bt);
#pragma unroll
    for (int q = 0; q < V; q++) {
      if (MODE == RED_SUM) a += gv[q];
      if (MODE == RED_STATS) {
        float d = xv[q] - K;
        a += d, b += d * d;
      }
      if (MODE == RED_BWD) a += gv[q], b += gv[q] * ((xv[q] - m) * is);
    }
  }
  return make_float2(a, b);
}

/* Whether the reductions over (B, C, P) can take float4s. */
static bool red_vec(int P, const void *a, const void *b) { return P % 4 == 0 && aligned16(a) && aligned16(b); }

/* Block (s, c): the sums of channel c over the s-th of S ranges of samples, to part[(c S + s) 2 + k]. */
template <int MODE, int V, int ACT> __global__ void channel_part_kernel(red_args r, float *part) {
  const int S = gridDim.x, s = blockIdx.x, c = blockIdx.y;
  const int b0 = (int)((long long)s * r.B / S), b1 = (int)((long long)(s + 1) * r.B / S);
  float2 t = thread_sums<MODE, V, ACT>(r, c, b0, b1);
  t = block_sum2(t.x, t.y);
  if (threadIdx.x == 0) part[((size_t)c * S + s) * 2] = t.x, part[((size_t)c * S + s) * 2 + 1] = t.y;
}

template <int MODE, int ACT = BN_ACT_NONE>
static void channel_part_launch(cuda_state *st, const red_args &r, int S, float *part) {
  if (red_vec(r.P, r.x, r.dy) && aligned16(r.y))
    channel_part_kernel<MODE, 4, ACT><<<dim3(S, r.C), RED_NT, 0, st->stream>>>(r, part);
  else channel_part_kernel<MODE, 1, ACT><<<dim3(S, r.C), RED_NT, 0, st->stream>>>(r, part);
}

/* Channel c's S partial sums, in order, in double. */
__device__ inline void part_total(const float *part, int c, int S, double *a, double *b) {
  double x = 0.0, y = 0.0;
  for (int s = 0; s < S; s++) x += part[((size_t)c * S + s) * 2], y += part[((size_t)c * S + s) * 2 + 1];
  *a = x, *b = y;
}

/* ---- the per-channel layout: TX channel vectors x TY rows a block, S blocks over the rows ---- */

typedef struct chan_grid {
  int TX, TY, groups, S; /* groups: blocks over the channel vectors (gridDim.y); S: over the rows (gridDim.x) */
} chan_grid;

/* For N rows of CV channel vectors: S about `target` blocks in all, each with at least min_rows rows, and at
 * most max_S (the partial sums' room). */
static chan_grid chan_grid_for(size_t N, int CV, int target, size_t min_rows, size_t max_S) {
  chan_grid g;
  g.TX = CV < 32 ? CV : 32;
  g.TY = NT / g.TX;
  g.groups = (CV + g.TX - 1) / g.TX;
  size_t s = ((size_t)target + g.groups - 1) / g.groups, by_rows = (N + min_rows - 1) / min_rows;
  if (s > by_rows) s = by_rows;
  if (s > max_S) s = max_S;
  g.S = s < 1 ? 1 : (int)s;
  return g;
}

/* This block's rows [*r0, *r1) and this thread's channel vector (-1: none) and row offset. */
__device__ __forceinline__ int chan_thread(size_t N, int CV, int TX, int TY, size_t *r0, size_t *r1, int *ty) {
  const int S = gridDim.x, s = blockIdx.x;
  *r0 = N * s / S, *r1 = N * (s + 1) / S;
  const int tx = threadIdx.x % TX;
  *ty = threadIdx.x / TX;
  const int cv = blockIdx.y * TX + tx;
  return *ty < TY && cv < CV ? cv : -1;
}

/* The block's per-thread sums a[V], b[V] (TX x TY threads) added over the rows ty in order; the threads of
 * row 0 then hold their channels' block sums. sh holds 2 * NT * V floats. */
template <int V>
__device__ __forceinline__ void chan_block_sum(float (&a)[V], float (&b)[V], int TX, int TY, int ty, float *sh) {
  const int tx = threadIdx.x % TX;
  if (ty < TY)
#pragma unroll
    for (int q = 0; q < V; q++) sh[(ty * TX + tx) * V + q] = a[q], sh[(NT + ty * TX + tx) * V + q] = b[q];
  __syncthreads();
  if (ty == 0)
    for (int k = 1; k < TY; k++)
#pragma unroll
      for (int q = 0; q < V; q++) a[q] += sh[(k * TX + tx) * V + q], b[q] += sh[(NT + k * TX + tx) * V + q];
}

/* ---- sums per channel over the rows: a bias's gradient, BatchNorm's statistics and backward sums ---- */

enum { NR_SUM = 0, NR_STATS, NR_BWD };
/* bn_act_pool's backward: dy is the gradient of a K×K maxpool (stride K) of the H×W rows, arg its maxima's offsets in
 * their windows (a byte per pooled value); the gradient of a row is formed from them (pool_grad). */
struct nred_pool {
  const uint8_t *arg;
  int H, W, K, OH, OW;
};
struct nred_args {
  size_t N;
  int C;
  const void *x, *dy, *y; /* x: NR_STATS, NR_BWD; dy: NR_SUM, NR_BWD; y: NR_BWD after relu, leaky, tanh, sigmoid */
  const float *mean, *invstd, *gamma, *beta; /* NR_BWD (gamma, beta: z's, where dz is formed from z) */
  float alpha, zt; /* bn_act's */
  nred_pool pool;  /* POOL kernels' */
};

/* The gradient of row `row` (pixel (b, h, w) of H×W planes), channels cv V .. cv V + V - 1, under a maxpool: dy of the
 * pooled value whose window holds the pixel, where that value's max is this pixel, else 0 (and 0 outside every
 * window). Four rows of a 2×2 window read the same dy and arg vectors, from L1 or L2 after the first. */
template <typename T, int V>
__device__ __forceinline__ void pool_grad(float (&gv)[V], const nred_pool &p, const T *dy, int CV, size_t row, int cv) {
  const size_t HW = (size_t)p.H * p.W, b = row / HW;
  const int hw = (int)(row - b * HW), h = hw / p.W, w = hw - h * p.W, oh = h / p.K, ow = w / p.K;
#pragma unroll
  for (int q = 0; q < V; q++) gv[q] = 0.0f;
  if (oh >= p.OH || ow >= p.OW) return;
  const int self = (h - oh * p.K) * p.K + (w - ow * p.K);
  const size_t o = ((b * p.OH + oh) * p.OW + ow) * CV + cv;
  uint8_t a[V];
  if constexpr (V == 8) {
    const uint2 u = reinterpret_cast<const uint2 *>(p.arg)[o];
    const unsigned wd[2] = {u.x, u.y};
#pragma unroll
    for (int q = 0; q < 8; q++) a[q] = (uint8_t)(wd[q / 4] >> (8 * (q % 4)));
  } else if constexpr (V == 4) {
    const unsigned u = reinterpret_cast<const unsigned *>(p.arg)[o];
#pragma unroll
    for (int q = 0; q < 4; q++) a[q] = (uint8_t)(u >> (8 * q));
  } else {
#pragma unroll
    for (int q = 0; q < V; q++) a[q] = p.arg[o * V + q];
  }
  bool any = false;
#pragma unroll
  for (int q = 0; q < V; q++) any |= a[q] == self;
  if (!any) return; /* no channel's max is here: dy is not read */
  float d[V];
  tload<T, V>(d, dy, o);
#pragma unroll
  for (int q = 0; q < V; q++) gv[q] = a[q] == self ? d[q] : 0.0f;
}

/* dz = dy act'(.) (ACT after a BatchNorm), from y or from z = (x - m) sc + bt, as the NCHW kernels form it. */
template <int ACT, int V>
__device__ __forceinline__ void nhwc_dz(const bn_act<ACT> &act, const float (&xv)[V], const float (&yv)[V],
                                        float (&gv)[V], const float (&m)[V], const float (&sc)[V],
                                        const float (&bt)[V]) {
#pragma unroll
  for (int q = 0; q < V; q++) {
    if constexpr (ACT == BN_ACT_NONE) (void)xv, (void)yv, (void)m, (void)sc, (void)bt;
    else if constexpr (bn_act<ACT>::from_y) gv[q] = act.dz(0.0f, yv[q], gv[q]);
    else gv[q] = act.dz((xv[q] - m[q]) * sc[q] + bt[q], 0.0f, gv[q]);
  }
}

/* Rows a thread of nred_part_kernel loads before it sums them: NRED_ROWS for the statistics (16-byte vectors only),
 * 1 for the others. dev/lab_bn_reduce.cu on the H100 (2026-12-07): 4 rows took the statistics pass of res's 67 and
 * 34 MB activations from 30.8 to 29.3 and 14.9 to 13.5 us, while the backward's sums from y ran 3-20% slower with
 * 2 to 8 rows (their two or three loads a row already fill the memory's queue). The sums are added in the same row
 * order whatever U is, so the bits do not change with it. */
#ifndef NRED_ROWS
#define NRED_ROWS 4
#endif

/* Block (s, group): its rows' sums of its channels, to part[(c * S + s) * 2 + {0, 1}]: dy (NR_SUM); x - K and
 * (x - K)^2 with K the channel's first value (NR_STATS: shifted, as the NCHW kernels); dz and dz xhat (NR_BWD).
 * Each thread takes rows ty, ty + TY, ... of the block's, U at a time: their loads first, then their sums. */
template <typename T, int V, int MODE, int ACT, bool POOL = false,
          int U = (lam_vec16<T, V>::value && MODE == NR_STATS ? NRED_ROWS : 1)>
__global__ void nred_part_kernel(nred_args r, int TX, int TY, float *part) {
  static_assert(!POOL || (MODE == NR_BWD && U == 1), "the pooled gradient is BatchNorm's backward's, a row at a time");
  __shared__ float sh[2 * NT * V];
  const int CV = r.C / V;
  size_t r0, r1;
  int ty;
  const int cv = chan_thread(r.N, CV, TX, TY, &r0, &r1, &ty);
  float a[V], b[V];
#pragma unroll
  for (int q = 0; q < V; q++) a[q] = b[q] = 0.0f;
  if (cv >= 0) {
    const int c0 = cv * V;
    const bn_act<ACT> act = {r.alpha, r.zt};
    float K[V], m[V], is[V], sc[V], bt[V];
#pragma unroll
    for (int q = 0; q < V; q++) {
      K[q] = MODE == NR_STATS ? tget((const T *)r.x, (size_t)c0 + q) : 0.0f;
      m[q] = MODE == NR_BWD ? r.mean[c0 + q] : 0.0f;
      is[q] = MODE == NR_BWD ? r.invstd[c0 + q] : 0.0f;
      sc[q] = MODE == NR_BWD && bn_act<ACT>::from_z ? is[q] * gamma_of(r.gamma, c0 + q) : 0.0f;
      bt[q] = MODE == NR_BWD && bn_act<ACT>::from_z ? beta_of(r.beta, c0 + q) : 0.0f;
    }
    constexpr bool LX = MODE != NR_SUM, LG = MODE != NR_STATS, LY = MODE == NR_BWD && bn_act<ACT>::from_y;
    /* one row's values into the sums */
    auto add = [&](float (&xv)[V], float (&gv)[V], float (&yv)[V]) {
      if (MODE == NR_BWD) nhwc_dz<ACT, V>(act, xv, yv, gv, m, sc, bt);
#pragma unroll
      for (int q = 0; q < V; q++) {
        if (MODE == NR_SUM) a[q] += gv[q];
        if (MODE == NR_STATS) {
          float d = xv[q] - K[q];
          a[q] += d, b[q] += d * d;
        }
        if (MODE == NR_BWD) a[q] += gv[q], b[q] += gv[q] * ((xv[q] - m[q]) * is[q]);
      }
    };
    size_t row = r0 + ty;
    if constexpr (U > 1)
      for (; row + (size_t)(U - 1) * TY < r1; row += (size_t)U * TY) {
        uint4 xr[U], gr[U], yr[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
          const size_t o = (row + (size_t)u * TY) * CV + cv;
          if (LX) xr[u] = reinterpret_cast<const uint4 *>(r.x)[o];
          if (LG) gr[u] = reinterpret_cast<const uint4 *>(r.dy)[o];
          if (LY) yr[u] = reinterpret_cast<const uint4 *>(r.y)[o];
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
          float xv[V], gv[V], yv[V];
          if (LX) tunpack<T, V>(xv, xr[u]);
          if (LG) tunpack<T, V>(gv, gr[u]);
          if (LY) tunpack<T, V>(yv, yr[u]);
          add(xv, gv, yv);
        }
      }
    for (; row < r1; row += TY) {
      const size_t o = row * CV + cv;
      float xv[V], gv[V], yv[V];
      if (LX) tload<T, V>(xv, (const T *)r.x, o);
      if constexpr (POOL) pool_grad<T, V>(gv, r.pool, (const T *)r.dy, CV, row, cv);
      else if (LG) tload<T, V>(gv, (const T *)r.dy, o);
      if (LY) tload<T, V>(yv, (const T *)r.y, o);
      add(xv, gv, yv);
    }
  }
  chan_block_sum<V>(a, b, TX, TY, ty, sh);
  if (ty == 0 && cv >= 0)
#pragma unroll
    for (int q = 0; q < V; q++) {
      const size_t k = ((size_t)(cv * V + q) * gridDim.x + blockIdx.x) * 2;
      part[k] = a[q], part[k + 1] = b[q];
    }
}

/* Channel c's S partial sums in double, by the 32 lanes of a warp (every lane calls; each gets the totals):
 * lane l adds blocks l, l + 32, ... in order, then the lanes' sums are added by a fixed tree. The same bits
 * every run. (v1 was a thread per channel over all S blocks: 50-90 us for S = 1024, a tenth of a step.) */
__device__ inline void nred_total(const float *part, int S, int c, double *a, double *b) {
  const int lane = threadIdx.x % 32;
  const float *p = part + (size_t)c * S * 2;
  double x = 0.0, y = 0.0;
  for (int s = lane; s < S; s += 32) x += p[2 * s], y += p[2 * s + 1];
  for (int off = 16; off > 0; off /= 2) x += __shfl_down_sync(0xffffffffu, x, off), y += __shfl_down_sync(0xffffffffu, y, off);
  *a = __shfl_sync(0xffffffffu, x, 0), *b = __shfl_sync(0xffffffffu, y, 0);
}
/* The final kernels: a warp per channel (FINAL_WARPS channels a block). */
#define FINAL_WARPS 8
static unsigned final_blocks(int C) { return (unsigned)((C + FINAL_WARPS - 1) / FINAL_WARPS); }
#define FINAL_CHANNEL(c, C) \
  const int c = blockIdx.x * FINAL_WARPS + threadIdx.x / 32; \
  if (c >= (C)) return

/* The partial sums' room, and the grid of a reduction over N rows of C channels (vectors of V). */
static lam_status nred_grid(const char *what, size_t N, int C, int V, chan_grid *g) {
  if (N >= (size_t)1 << 31)
    return lam_fail_at(LAM_ERR_UNSUPPORTED, __FILE__, __LINE__,
                       "%s: %zu pixels per channel is beyond this kernel's 32-bit grid; use a smaller batch", what, N);
  const size_t room = (NHWC_PART_FLOATS - 2 * (size_t)C) / (2 * (size_t)C);
  if (room < 1) return lam_fail_at(LAM_ERR_UNSUPPORTED, __FILE__, __LINE__, "%s: %d channels is too many", what, C);
  *g = chan_grid_for(N, C / V, 1024, 64, room);
  return LAM_OK;
}

template <typename T, int V, int MODE, int ACT, bool POOL = false>
static lam_status nred_launch(cuda_state *st, const nred_args &r, const chan_grid &g) {
  nred_part_kernel<T, V, MODE, ACT, POOL><<<dim3(g.S, g.groups), NT, 0, st->stream>>>(r, g.TX, g.TY, st->nhwc_part);
  LAUNCH_CHECK(st, "nred_part_kernel");
  return LAM_OK;
}

#endif
