/* kernels.h — what the CPU's nn kernels of several op families share (cpu/<family>.c): the size below which
 * a loop runs on one thread, and the 2x2 stride-2 max window of maxpool (pool.c) and of the fused
 * conv -> relu -> maxpool (conv.c), one code for both so that the two pick the same maximum. */
#ifndef LAMINA_CPU_KERNELS_H
#define LAMINA_CPU_KERNELS_H

#include "cpu.h"
#include "../math/act.h"

/* Below this many values a loop runs on one thread: starting a team costs more than it saves, and
 * with many cores (16 on the GPU machine) tiny models would spend their time in fork and join. */
#define PAR_MIN ((size_t)32768)


/* The first maximum of a 2x2 window in row order (NaN wins), the choice of the general window loops,
 * with selects rather than branches: where the maximum lies is random. *m gets it; the return value is
 * its offset in the plane, 0, 1, W or W + 1. */
/* v is NaN, by its bits: an integer compare, where v != v made gcc branch on the parity flag */
static inline int is_nan_bits(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return (u & 0x7fffffffu) > 0x7f800000u;
}
static inline int window2_max(float v0, float v1, float v2, float v3, int W, float *m) {
  /* no || and no v != v: both made gcc branch, and on random data every other branch was mispredicted
   * (the batch-64 conv1 block: 6.8 ms on one thread where a pass over its data takes 0.2) */
  float x = v0;
  int i = 0, t = (v1 > x) | is_nan_bits(v1);
  x = t ? v1 : x, i = t ? 1 : i;
  t = (v2 > x) | is_nan_bits(v2);
  x = t ? v2 : x, i = t ? W : i;
  t = (v3 > x) | is_nan_bits(v3);
  x = t ? v3 : x, i = t ? W + 1 : i;
  *m = x;
  return i;
}

/* The 2x2 stride-2 windows of a plane, their top-left corners given (off, n of them): one loop over all
 * the plane's windows, which the compiler vectorizes with gathers. Per row, 13 windows (conv1 of the
 * reference CNN) or 5 (conv2) left nearly all the work to the vector loop's scalar remainder. conv
 * (the fused block): bias is added to every value and the max clamped at 0 (relu after the max = the max of
 * the relus); else (max-pool) the values are taken as they are, bit for bit. */
#define WINDOW2_MAX_OFF 4096
static inline void window2_plane(const float *plane, int W, const int32_t *off, int n, float bias, int conv, float *y,
                                 int32_t *arg) {
  const float b = conv ? bias : -0.0f; /* x + -0 is x, -0 included */
#pragma omp simd
  for (int k = 0; k < n; k++) {
    const int at = off[k];
    float m;
    int i = window2_max(plane[at] + b, plane[at + 1] + b, plane[at + W] + b, plane[at + W + 1] + b, W, &m);
    y[k] = conv ? lam_relu(m) : m;
    arg[k] = at + i;
  }
}
/* The corners for window2_plane (n = OH*OW <= WINDOW2_MAX_OFF). */
static inline void window2_offsets(int W, int OH, int OW, int32_t *off) {
  for (int oh = 0; oh < OH; oh++)
    for (int ow = 0; ow < OW; ow++) off[oh * OW + ow] = 2 * oh * W + 2 * ow;
}
/* Every 2x2 stride-2 window of a plane (OH x OW of them), as window2_plane: through the corners off where
 * the caller made them (a plane of at most WINDOW2_MAX_OFF windows), else a vectorized loop a row. */
static inline void window2_pool(const float *plane, int W, int OH, int OW, const int32_t *off, float bias, int conv,
                                float *y, int32_t *arg) {
  if (off) {
    window2_plane(plane, W, off, OH * OW, bias, conv, y, arg);
    return;
  }
  const float b = conv ? bias : -0.0f;
  for (int oh = 0; oh < OH; oh++) {
    const float *r0 = plane + (size_t)(2 * oh) * W, *r1 = r0 + W;
    float *yr = y + (size_t)oh * OW;
    int32_t *ar = arg + (size_t)oh * OW;
    const int base = 2 * oh * W;
#pragma omp simd
    for (int ow = 0; ow < OW; ow++) {
      float m;
      int i = window2_max(r0[2 * ow] + b, r0[2 * ow + 1] + b, r1[2 * ow] + b, r1[2 * ow + 1] + b, W, &m);
      yr[ow] = conv ? lam_relu(m) : m;
      ar[ow] = base + 2 * ow + i;
    }
  }
}

#endif
