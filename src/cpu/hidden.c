/* hidden.c — the hidden layer on the CPU: out = tanh(grey / 255 * w) in one fused pass, OpenMP across
 * cores and SIMD within each, plus the course's three separate steps. The CUDA twins are in
 * cuda/hidden.cu under the same names. */
#include "../internal.h"
#include "cpu.h"
#include "tanh.h"

/* Below this, one thread: a parallel region costs a few microseconds. */
#define PAR_MIN 65536

void cpu_hidden_f32(size_t n, const float *restrict g, const float *w, float *out) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (size_t i = 0; i < n; i++) out[i] = lam_tanhf(g[i] / 255.0f * w[i]);
}

void cpu_hidden_u8(size_t n, const uint8_t *restrict g, const float *w, float *out) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (size_t i = 0; i < n; i++) out[i] = lam_tanhf((float)g[i] / 255.0f * w[i]);
}

lam_status cpu_hidden(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                             lam_hidden_timing *timing) {
  (void)ctx;
  double t0 = lam_now_ms();
  if (gt == LAM_DTYPE_U8) cpu_hidden_u8(n, grey, w, out);
  else cpu_hidden_f32(n, grey, w, out);
  if (timing) {
    timing->total = timing->kernel = lam_now_ms() - t0;
    timing->chunks = 1;
  }
  return LAM_OK;
}

lam_status cpu_normalize(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, float *out) {
  (void)ctx;
  if (gt == LAM_DTYPE_U8) {
    const uint8_t *g = grey;
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = (float)g[i] / 255.0f;
  } else {
    const float *g = grey;
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = g[i] / 255.0f;
  }
  return LAM_OK;
}

lam_status cpu_weigh(lam_ctx *ctx, size_t n, const float *a, const float *w, float *out) {
  (void)ctx;
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (size_t i = 0; i < n; i++) out[i] = a[i] * w[i];
  return LAM_OK;
}

lam_status cpu_tanh(lam_ctx *ctx, size_t n, const float *x, float *out) {
  (void)ctx;
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (size_t i = 0; i < n; i++) out[i] = lam_tanhf(x[i]);
  return LAM_OK;
}
