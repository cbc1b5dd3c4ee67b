/* data.cu — the CUDA twins of the data primitives (prims.h; CPU versions in cpu/data.c under the same names): the
 * batch gather, its uint8 images normalized (and augmented) on the GPU into any format, and normalize_images. */
#include <cuda_bf16.h>
#include <string.h>

#include "cuda.h"
#include "kernels.cuh"
#include "vec.cuh"
#include "../aug.h"

/* Per-channel scale and offset, by value (a captured graph keeps them): x = u * a[c] + k[c]. */
typedef struct gather_coef {
  float a[LAM_NORM_MAX_CHANNELS], k[LAM_NORM_MAX_CHANNELS];
} gather_coef;

/* The uint8 images of the batch, normalized on the GPU: they cross PCIe (once, at upload) as bytes.
 * Block (chunk, b): sample b (gridDim.y strides over the batch), threads over its T*C*P values and then
 * its label_size label bytes; consecutive threads consecutive values of x (frame t of the sample is x's
 * row b*T + t; NCHW: value j is channel (j / P) % C, in the image's order; NHWC: within its frame's C*P
 * values channel j % C, read from the frame's plane of it), written as float or bfloat16 (T). With AUG, each
 * value reads the pixel its sample's crop and flip map it to (aug.h), black in the padding; a label per pixel
 * moves with it. */
template <typename T, bool NHWC, bool AUG>
__global__ void gather_kernel(int B, int F, int C, unsigned P, const uint8_t *__restrict__ images, size_t label_size,
                              const uint8_t *__restrict__ labels, const int32_t *idx, const int32_t *cursor,
                              gather_coef k, lam_aug aug, T *__restrict__ x, uint8_t *__restrict__ y) {
  const int off = cursor ? *cursor : 0;
  const int32_t ctr = AUG && aug.ctr ? *aug.ctr : 0;
  const unsigned CP = (unsigned)C * P, FCP = (unsigned)F * CP; /* < 2^31: checked by the caller */
  for (int b = blockIdx.y; b < B; b += gridDim.y) {
    const size_t src = (size_t)idx[off + b];
    const uint8_t *im = images + src * FCP;
    T *d = x + (size_t)b * FCP;
    lam_aug_draw dr = {0, 0, 0};
    if (AUG) dr = lam_aug_sample(&aug, ctr, b);
    for (unsigned j = blockIdx.x * blockDim.x + threadIdx.x; j < FCP; j += gridDim.x * blockDim.x) {
      const unsigned f0 = NHWC ? j / CP * CP : 0, jj = j - f0; /* the frame's first value, j within it */
      const unsigned c = NHWC ? jj % (unsigned)C : j / P % (unsigned)C;
      unsigned at = NHWC ? f0 + c * P + jj / (unsigned)C : j; /* the value's place in the sample */
      float u;
      if (AUG) {
        const unsigned p = at % P;
        const long s = lam_aug_src(&aug, dr, (long)p);
        u = s < 0 ? 0.0f : (float)im[at - p + (unsigned)s];
      } else {
        u = (float)im[at];
      }
      tput(d, j, u * k.a[c] + k.k[c]);
    }
    const bool moves = AUG && label_size == P; /* a label per pixel: cropped and flipped with its pixel */
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < label_size; j += (size_t)gridDim.x * blockDim.x) {
      if (moves) {
        const long s = lam_aug_src(&aug, dr, (long)j);
        y[(size_t)b * label_size + j] = s < 0 ? (uint8_t)LAM_LABEL_IGNORE : labels[src * label_size + (size_t)s];
      } else {
        y[(size_t)b * label_size + j] = labels[src * label_size + j];
      }
    }
  }
}

lam_status cuda_gather(lam_ctx *ctx, int B, int F, int C, size_t P, const uint8_t *images, size_t label_size,
                       const uint8_t *labels, const int32_t *idx, const int32_t *cursor, const lam_norm *norm,
                       const lam_aug *aug, lam_fmt f, void *x, uint8_t *y) {
  cuda_state *st = cuda_st(ctx);
  /* NCHW 16-bit is NHWC's order where a sample has one channel or one pixel */
  const bool nhwc = f.nhwc || (f.dt != LAM_DT_F32 && (C == 1 || P == 1));
  if (f.dt != LAM_DT_F32 && !nhwc) return nchw_bf16_unsupported("gather");
  LAM_TRY(check_grid("gather", (size_t)F * C * P, 1));
  gather_coef k;
  for (int c = 0; c < C; c++) /* as the CPU twin */
    k.a[c] = 1.0f / (255.0f * norm->std[c]), k.k[c] = -norm->mean[c] / norm->std[c];
  size_t per = (size_t)F * C * P > label_size ? (size_t)F * C * P : label_size;
  size_t bx = (per + NT - 1) / NT;
  dim3 grid((unsigned)(bx < 65535 ? (bx ? bx : 1) : 65535), (unsigned)(B < 65535 ? (B > 0 ? B : 1) : 65535));
  const bool on = lam_aug_on(aug);
  lam_aug a;
  memset(&a, 0, sizeof a);
  if (on) a = *aug; /* by value: a captured graph keeps it, and reads *a.ctr when it replays */
#define GATHER(T, N, A) \
  gather_kernel<T, N, A><<<grid, NT, 0, st->stream>>>(B, F, C, (unsigned)P, images, label_size, labels, idx, cursor, k, \
                                                      a, (T *)x, y)
  if (f.dt == LAM_DT_BF16 && on) GATHER(lam_bf16, true, true);
  else if (f.dt == LAM_DT_BF16) GATHER(lam_bf16, true, false);
  else if (f.dt == LAM_DT_F16 && on) GATHER(lam_f16, true, true);
  else if (f.dt == LAM_DT_F16) GATHER(lam_f16, true, false);
  else if (nhwc && on) GATHER(float, true, true);
  else if (nhwc) GATHER(float, true, false);
  else if (on) GATHER(float, false, true);
  else GATHER(float, false, false);
#undef GATHER
  LAUNCH_CHECK(st, "gather_kernel");
  return LAM_OK;
}

/* Per-channel scale and offset, by value: x * a[c] + b[c] = (x / 255 - mean[c]) / std[c]. */
typedef struct norm_coef {
  float a[LAM_NORMALIZE_MAX_CHANNELS], b[LAM_NORMALIZE_MAX_CHANNELS];
} norm_coef;

static __device__ inline void store(float *p, float v) { *p = v; }
static __device__ inline void store(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

/* One thread per output element (NCHW), so the writes coalesce; an NHWC read is strided by c. */
template <typename T>
__global__ void normalize_images_kernel(size_t total, int c, size_t plane, int nhwc, const uint8_t *in, norm_coef k,
                                        T *out) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
    size_t p = i % plane, img = i / plane / c;
    int ch = (int)(i / plane % c);
    size_t src = nhwc ? (img * plane + p) * c + ch : i;
    store(out + i, __fmaf_rn((float)in[src], k.a[ch], k.b[ch]));
  }
}

lam_status cuda_normalize_images(lam_ctx *ctx, size_t n, int c, int h, int w, int nhwc, const uint8_t *in,
                                 const float *mean, const float *std, int bf16, void *out) {
  cuda_state *st = cuda_st(ctx);
  norm_coef k;
  for (int i = 0; i < c; i++) k.a[i] = 1.0f / (255.0f * std[i]), k.b[i] = -mean[i] / std[i]; /* as the CPU twin */
  size_t plane = (size_t)h * w, total = n * plane * c;
  if (bf16)
    normalize_images_kernel<<<blocks_for(total), NT, 0, st->stream>>>(total, c, plane, nhwc, in, k, (__nv_bfloat16 *)out);
  else
    normalize_images_kernel<<<blocks_for(total), NT, 0, st->stream>>>(total, c, plane, nhwc, in, k, (float *)out);
  LAUNCH_CHECK(st, "normalize_images_kernel");
  return LAM_OK;
}
