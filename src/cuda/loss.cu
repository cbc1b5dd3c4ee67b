/* loss.cu — the CUDA twins of the loss primitives (prims.h; CPU versions in cpu/loss.c under the same names):
 * softmax cross-entropy (xent) and label_count, their partial sums added up in a fixed order (no float atomics):
 * the same bits every run. */
#include <stdint.h>

#include "cuda.h"
#include "kernels.cuh"
#include "vec.cuh"

/* Softmax cross-entropy: one thread per pixel (b, p) of (B, P), grid-stride over at most XENT_BLOCKS
 * blocks; class c of the pixel at (b * C + c) * P + p, so a warp's loads coalesce over p (P = 1: one
 * thread per sample, as before). Each block's loss, hits and count are summed by a tree in shared memory
 * into part (3 per block); the last block to finish (a count in st->xent_done) adds the blocks' sums up
 * in block order: no float atomics, the same bits every run, one launch. (With one block, the result is
 * the old kernel's, whose tree it keeps.) */
#define XENT_BLOCKS 1024
static_assert(3 * XENT_BLOCKS <= ROW_SUM_PART_FLOATS, "xent's partial sums live in rowsum_part");

template <typename T>
__global__ void xent_kernel(int B, int C, int P, const T *logits, const uint8_t *labels, T *dlogits, float scale,
                            const float *lscale, const float *count, float s, float *part, unsigned *done, float *stats,
                            uint8_t *pred) {
  if (lscale) scale *= *lscale;
  __shared__ float sl[NT], sc[NT], sn[NT];
  const float f = count ? scale / *count : scale;
  const float on = 1.0f - s + s / (float)C, off = s / (float)C; /* the target: (1 - s) onehot + s / C */
  const unsigned total = (unsigned)B * (unsigned)P; /* < 2^31: checked by the caller */
  float loss = 0.0f, correct = 0.0f, counted = 0.0f;
  for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < total; j += gridDim.x * blockDim.x) {
    unsigned b = j / (unsigned)P, p = j % (unsigned)P;
    const size_t base = (size_t)b * C * P + p;
    const T *l = logits + base;
    int am = 0;
    for (int c = 1; c < C; c++)
      if (tget(l, (size_t)c * P) > tget(l, (size_t)am * P)) am = c;
    if (pred) pred[j] = (uint8_t)am;
    const int y = labels[j];
    if (y == LAM_LABEL_IGNORE) {
      if (dlogits)
        for (int c = 0; c < C; c++) tput(dlogits, base + (size_t)c * P, 0.0f);
      continue;
    }
    float mx = tget(l, (size_t)am * P), sum = 0.0f;
    for (int c = 0; c < C; c++) sum += expf(tget(l, (size_t)c * P) - mx);
    const float lse = logf(sum);
    float lossf = (mx - tget(l, (size_t)y * P)) + lse; /* as the CPU twin: differences from the max are exact */
    if (s != 0.0f) {
      float d = 0.0f;
      for (int c = 0; c < C; c++) d += mx - tget(l, (size_t)c * P);
      lossf = (1.0f - s) * lossf + s * (d / (float)C + lse);
    }
    loss += lossf;
    correct += am == y ? 1.0f : 0.0f;
    counted += 1.0f;
    if (dlogits) {
      float inv = 1.0f / sum;
      for (int c = 0; c < C; c++)
        tput(dlogits, base + (size_t)c * P, f * (expf(tget(l, (size_t)c * P) - mx) * inv - (c == y ? on : off)));
    }
  }
  sl[threadIdx.x] = loss;
  sc[threadIdx.x] = correct;
  sn[threadIdx.x] = counted;
  __syncthreads();
  for (int w = NT / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w)
      sl[threadIdx.x] += sl[threadIdx.x + w], sc[threadIdx.x] += sc[threadIdx.x + w], sn[threadIdx.x] += sn[threadIdx.x + w];
    __syncthreads();
  }
  if (gridDim.x == 1) { /* the common small case: no partials, no second pass */
    if (threadIdx.x == 0) stats[0] += sl[0], stats[1] += sc[0], stats[2] += sn[0];
    return;
  }
  __shared__ bool last;
  if (threadIdx.x == 0) {
    part[3 * blockIdx.x] = sl[0];
    part[3 * blockIdx.x + 1] = sc[0];
    part[3 * blockIdx.x + 2] = sn[0];
    __threadfence(); /* the partials are visible before the count says so */
    last = atomicAdd(done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  /* The last block to finish adds the partials in block order (deterministic), and resets the count. */
  __threadfence();
  float a[3] = {0.0f, 0.0f, 0.0f};
  for (unsigned k = threadIdx.x; k < gridDim.x; k += NT)
    for (int v = 0; v < 3; v++) a[v] += ((volatile float *)part)[3 * k + v];
  sl[threadIdx.x] = a[0], sc[threadIdx.x] = a[1], sn[threadIdx.x] = a[2];
  __syncthreads();
  for (int w = NT / 2; w > 0; w /= 2) {
    if ((int)threadIdx.x < w)
      sl[threadIdx.x] += sl[threadIdx.x + w], sc[threadIdx.x] += sc[threadIdx.x + w], sn[threadIdx.x] += sn[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    stats[0] += sl[0], stats[1] += sc[0], stats[2] += sn[0];
    *done = 0;
  }
}

lam_status cuda_xent(lam_ctx *ctx, lam_fmt fm, int B, int C, int P, const void *logits, const uint8_t *labels,
                     void *dlogits, float scale, const float *lscale, const float *count, float smoothing, float *stats,
                     uint8_t *pred) {
  cuda_state *st = cuda_st(ctx);
  if (fm.nhwc) B *= P, P = 1; /* (B*P, C): a pixel's classes together, as a sample's of a flat output */
  else if (fm.dt != LAM_DT_F32 && P > 1) return nchw_bf16_unsupported("xent");
  size_t total = (size_t)B * P;
  LAM_TRY(check_grid("xent", total, 1));
  size_t nb = (total + NT - 1) / NT;
  int blocks = (int)(nb < XENT_BLOCKS ? (nb ? nb : 1) : XENT_BLOCKS);
  unsigned *done = st->xent_done; /* zero between calls: the last block resets it */
  LAM_DT_DISPATCH(fm.dt, T,
                  xent_kernel<T><<<blocks, NT, 0, st->stream>>>(B, C, P, (const T *)logits, labels, (T *)dlogits, scale,
                                                                lscale, count, smoothing, st->rowsum_part, done, stats,
                                                                pred));
  LAUNCH_CHECK(st, "xent_kernel");
  return LAM_OK;
}

/* Counting is integer work: each block's count to part (as unsigned), then one block adds them up. */
#define COUNT_BLOCKS 1024
static_assert(COUNT_BLOCKS <= ROW_SUM_PART_FLOATS, "label_count's partial counts live in rowsum_part");

__global__ void label_count_kernel(size_t n, const uint8_t *__restrict__ labels, unsigned *part) {
  __shared__ unsigned warp_sum[NT / 32];
  unsigned k = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    k += labels[i] != LAM_LABEL_IGNORE;
  for (int off = 16; off > 0; off /= 2) k += __shfl_down_sync(0xffffffffu, k, off);
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = k;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned t = 0;
    for (int w = 0; w < NT / 32; w++) t += warp_sum[w];
    part[blockIdx.x] = t;
  }
}

__global__ void label_count_final_kernel(int nparts, const unsigned *part, float *count) {
  __shared__ unsigned long long warp_sum[NT / 32];
  unsigned long long k = 0;
  for (int i = threadIdx.x; i < nparts; i += NT) k += part[i];
  for (int off = 16; off > 0; off /= 2) k += __shfl_down_sync(0xffffffffu, k, off);
  if (threadIdx.x % 32 == 0) warp_sum[threadIdx.x / 32] = k;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long t = 0;
    for (int w = 0; w < NT / 32; w++) t += warp_sum[w];
    *count = (float)t; /* rounded to nearest, as the CPU twin's conversion */
  }
}

lam_status cuda_label_count(lam_ctx *ctx, size_t n, const uint8_t *labels, float *count) {
  cuda_state *st = cuda_st(ctx);
  size_t nb = (n + NT - 1) / NT;
  int blocks = (int)(nb < COUNT_BLOCKS ? (nb ? nb : 1) : COUNT_BLOCKS);
  unsigned *part = (unsigned *)st->rowsum_part;
  label_count_kernel<<<blocks, NT, 0, st->stream>>>(n, labels, part);
  LAUNCH_CHECK(st, "label_count_kernel");
  label_count_final_kernel<<<1, NT, 0, st->stream>>>(blocks, part, count);
  LAUNCH_CHECK(st, "label_count_final_kernel");
  return LAM_OK;
}
