/* data.c — the CPU twins of the data primitives (prims.h): the batch gather (normalized, augmented, in any
 * format) and normalize_images; the CUDA twins are in cuda/data.cu under the same names. The gather runs on the
 * pool (cpu_par), normalize_images on OpenMP's static schedule; each item writes its own outputs. */
#include <string.h>

#include "cpu.h"
#include "kernels.h"
#include "../aug.h"
#include "../math/half.h"

typedef struct gather_args {
  int T, C;
  size_t P, label_size, sample;
  const uint8_t *images, *labels;
  const int32_t *idx;
  const lam_aug *aug;
  int on;
  int32_t ctr;
  float a[LAM_NORM_MAX_CHANNELS], k[LAM_NORM_MAX_CHANNELS]; /* (u / 255 - mean) / std = u * a + k */
  float *x;
  uint8_t *y;
} gather_args;

/* Items b: sample b of the batch. */
static void gather_items(void *argp, size_t lo, size_t hi) {
  const gather_args *A = argp;
  const int T = A->T, C = A->C;
  const size_t P = A->P, sample = A->sample, label_size = A->label_size;
  const float *a = A->a, *k = A->k;
  for (size_t b = lo; b < hi; b++) {
    const uint8_t *src = A->images + (size_t)A->idx[b] * sample;
    float *dst = A->x + b * sample; /* frame t of sample b is row b*T + t: the same bytes in order */
    uint8_t *lab = A->y + b * label_size;
    const uint8_t *lsrc = A->labels + (size_t)A->idx[b] * label_size;
    if (!A->on) {
      for (size_t tc = 0; tc < (size_t)T * C; tc++) {
        const int c = (int)(tc % (size_t)C);
        for (size_t p = 0; p < P; p++) dst[tc * P + p] = (float)src[tc * P + p] * a[c] + k[c];
      }
      memcpy(lab, lsrc, label_size);
      continue;
    }
    const lam_aug_draw d = lam_aug_sample(A->aug, A->ctr, (int)b);
    for (size_t tc = 0; tc < (size_t)T * C; tc++) {
      const int c = (int)(tc % (size_t)C);
      for (size_t p = 0; p < P; p++) {
        const long s = lam_aug_src(A->aug, d, (long)p);
        dst[tc * P + p] = (float)(s < 0 ? 0 : src[tc * P + (size_t)s]) * a[c] + k[c];
      }
    }
    if (label_size != P) memcpy(lab, lsrc, label_size); /* a class per sample */
    else
      for (size_t p = 0; p < P; p++) {
        const long s = lam_aug_src(A->aug, d, (long)p);
        lab[p] = s < 0 ? (uint8_t)LAM_LABEL_IGNORE : lsrc[s];
      }
  }
}

static lam_status plain_gather(lam_ctx *ctx, int B, int T, int C, size_t P, const uint8_t *images, size_t label_size,
                      const uint8_t *labels, const int32_t *idx, const int32_t *cursor, const lam_norm *norm,
                      const lam_aug *aug, float *x, uint8_t *y) {
  (void)ctx;
  if (cursor) idx += *cursor;
  gather_args A = {.T = T, .C = C, .P = P, .label_size = label_size, .sample = (size_t)T * C * P, .images = images,
                   .labels = labels, .idx = idx, .aug = aug, .on = lam_aug_on(aug), .x = x, .y = y};
  for (int c = 0; c < C; c++) A.a[c] = 1.0f / (255.0f * norm->std[c]), A.k[c] = -norm->mean[c] / norm->std[c];
  A.ctr = A.on && aug->ctr ? *aug->ctr : 0;
  cpu_par((size_t)B, (size_t)B * A.sample, PAR_MIN, gather_items, &A);
  return LAM_OK;
}

lam_status cpu_gather(lam_ctx *ctx, int B, int T, int C, size_t P, const uint8_t *images, size_t label_size,
                      const uint8_t *labels, const int32_t *idx, const int32_t *cursor, const lam_norm *norm,
                      const lam_aug *aug, lam_fmt f, void *x, uint8_t *y) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  float *tx = cpu_fmt_out(&j, (size_t)B * T, C, P, x, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_gather(ctx, B, T, C, P, images, label_size, labels, idx, cursor, norm,
                                                            aug, tx, y));
}

lam_status cpu_normalize_images(lam_ctx *ctx, size_t n, int c, int h, int w, int nhwc, const uint8_t *in,
                                const float *mean, const float *std, int bf16, void *out) {
  (void)ctx;
  float a[LAM_NORMALIZE_MAX_CHANNELS], b[LAM_NORMALIZE_MAX_CHANNELS];
  for (int i = 0; i < c; i++) a[i] = 1.0f / (255.0f * std[i]), b[i] = -mean[i] / std[i]; /* x * a + b */
  const size_t plane = (size_t)h * w, image = plane * c, step = nhwc ? (size_t)c : 1;
#pragma omp parallel for collapse(2) schedule(static) if (n * image > PAR_MIN)
  for (size_t k = 0; k < n; k++)
    for (int ch = 0; ch < c; ch++) {
      const uint8_t *src = in + k * image + (nhwc ? (size_t)ch : (size_t)ch * plane);
      size_t o = k * image + (size_t)ch * plane;
      if (bf16) {
        uint16_t *dst = (uint16_t *)out + o;
        for (size_t p = 0; p < plane; p++) dst[p] = lam_f32_to_bf16((float)src[p * step] * a[ch] + b[ch]);
      } else {
        float *dst = (float *)out + o;
        for (size_t p = 0; p < plane; p++) dst[p] = (float)src[p * step] * a[ch] + b[ch];
      }
    }
  return LAM_OK;
}
