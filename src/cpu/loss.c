/* loss.c — the CPU twins of the loss primitives (prims.h): softmax cross-entropy (xent) and label_count; the
 * CUDA twins are in cuda/loss.cu under the same names. Sums per sample, then over the samples in order: the same
 * bits every run and thread count. */
#include <math.h>
#include <stdlib.h>

#include "cpu.h"
#include "kernels.h"

/* One sample's P pixels of softmax cross-entropy (class c of pixel p at l[c * P + p]); their loss and
 * hits summed in order into *loss and *hits, the labels counted into *counted. */
static void xent_sample(int C, int P, const float *l, const uint8_t *lab, float *dl, float f, float s, uint8_t *pred,
                        double *loss, double *hits, double *counted) {
  const float on = 1.0f - s + s / (float)C, off = s / (float)C; /* the target: (1 - s) onehot + s / C */
  for (int p = 0; p < P; p++) {
    const float *lp = l + p;
    int am = 0;
    for (int c = 1; c < C; c++)
      if (lp[(size_t)c * P] > lp[(size_t)am * P]) am = c;
    if (pred) pred[p] = (uint8_t)am;
    const int y = lab[p];
    if (y == LAM_LABEL_IGNORE) {
      if (dl)
        for (int c = 0; c < C; c++) dl[(size_t)c * P + p] = 0.0f;
      continue;
    }
    float mx = lp[(size_t)am * P], sum = 0.0f;
    for (int c = 0; c < C; c++) sum += expf(lp[(size_t)c * P] - mx);
    /* Stable for any logits: differences from the max are exact, so neither the loss nor the softmax
     * loses digits to a large common offset (lse itself would round at |logits| ~ 1e4). */
    const float lse = logf(sum);
    float lossf = (mx - lp[(size_t)y * P]) + lse;
    if (s != 0.0f) { /* - (s / C) sum_c log p_c = s (mean_c (mx - l_c) + lse) */
      float d = 0.0f;
      for (int c = 0; c < C; c++) d += mx - lp[(size_t)c * P];
      lossf = (1.0f - s) * lossf + s * (d / (float)C + lse);
    }
    *loss += (double)lossf;
    *hits += am == y;
    *counted += 1.0;
    if (dl) {
      float inv = 1.0f / sum;
      for (int c = 0; c < C; c++) dl[(size_t)c * P + p] = f * (expf(lp[(size_t)c * P] - mx) * inv - (c == y ? on : off));
    }
  }
}

static lam_status plain_xent(lam_ctx *ctx, int B, int C, int P, const float *logits, const uint8_t *labels, float *dlogits,
                    float scale, const float *lscale, const float *count, float smoothing, float *stats, uint8_t *pred) {
  (void)ctx;
  if (lscale) scale *= *lscale;
  const float f = count ? scale / *count : scale;
  /* Each sample's sums apart, then added in sample order: the same bits every run and thread count. */
  double *part = malloc((size_t)B * 3 * sizeof *part);
  if (!part) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "xent: no host memory for %d partial sums", 3 * B);
#pragma omp parallel for schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int b = 0; b < B; b++) {
    double *q = part + (size_t)3 * b;
    q[0] = q[1] = q[2] = 0.0;
    size_t o = (size_t)b * C * P;
    xent_sample(C, P, logits + o, labels + (size_t)b * P, dlogits ? dlogits + o : NULL, f, smoothing,
                pred ? pred + (size_t)b * P : NULL, &q[0], &q[1], &q[2]);
  }
  double loss = 0.0, correct = 0.0, counted = 0.0;
  for (int b = 0; b < B; b++) loss += part[3 * b], correct += part[3 * b + 1], counted += part[3 * b + 2];
  free(part);
  stats[0] += (float)loss;
  stats[1] += (float)correct;
  stats[2] += (float)counted;
  return LAM_OK;
}

lam_status cpu_xent(lam_ctx *ctx, lam_fmt f, int B, int C, int P, const void *logits, const uint8_t *labels,
                    void *dlogits, float scale, const float *lscale, const float *count, float smoothing, float *stats,
                    uint8_t *pred) {
  cpu_fmt_job j = cpu_fmt_begin(f);
  const float *tl = cpu_fmt_in(&j, B, C, P, logits);
  float *td = cpu_fmt_out(&j, B, C, P, dlogits, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_xent(ctx, B, C, P, tl, labels, td, scale, lscale, count, smoothing, stats,
                                                          pred));
}

lam_status cpu_label_count(lam_ctx *ctx, size_t n, const uint8_t *labels, float *count) {
  (void)ctx;
  size_t k = 0;
#pragma omp parallel for simd schedule(static) reduction(+ : k) if (n > PAR_MIN)
  for (size_t i = 0; i < n; i++) k += labels[i] != LAM_LABEL_IGNORE;
  *count = (float)k;
  return LAM_OK;
}
