/* aug.h — the draws of the batch gather's augmentation (prims.h, lam_aug), one definition for the CPU (cpu/data.c)
 * and the CUDA kernel (cuda/data.cu), so both crop and flip every sample alike, bit for bit. */
#ifndef LAMINA_AUG_H
#define LAMINA_AUG_H

#include "math/hash.h"

/* Sample b's draw: the crop's top-left corner (oy, ox) in the padded image, each uniform over 0 .. 2*pad, and the
 * flip (0 or 1). Values 3b, 3b+1, 3b+2 of the draw (seed, ctr). */
typedef struct lam_aug_draw {
  int oy, ox, flip;
} lam_aug_draw;
LAM_HD lam_aug_draw lam_aug_sample(const lam_aug *a, int32_t ctr, int b) {
  const uint64_t key = lam_draw_key(a->seed ^ 0x61756721ULL, ctr); /* its own stream, apart from dropout's */
  const int span = 2 * a->pad + 1;
  lam_aug_draw d;
  d.oy = (int)(lam_draw_uniform(key, 3 * (uint64_t)b) * (float)span);
  d.ox = (int)(lam_draw_uniform(key, 3 * (uint64_t)b + 1) * (float)span);
  d.flip = a->flip && lam_draw_uniform(key, 3 * (uint64_t)b + 2) < 0.5f;
  if (d.oy >= span) d.oy = span - 1; /* a float of 1 - 2^-24 times span rounds to span */
  if (d.ox >= span) d.ox = span - 1;
  return d;
}
/* The source pixel of output pixel p (row-major in h x w) under draw d, or -1 where it falls in the padding. The
 * crop comes first and the flip mirrors its result: output (y, x) reads the crop's (y, w-1-x) when flipped. */
LAM_HD long lam_aug_src(const lam_aug *a, lam_aug_draw d, long p) {
  const long y = p / a->w, x0 = p - y * a->w, x = d.flip ? a->w - 1 - x0 : x0;
  const long sy = y + d.oy - a->pad, sx = x + d.ox - a->pad;
  return sy < 0 || sy >= a->h || sx < 0 || sx >= a->w ? -1 : sy * a->w + sx;
}
/* Whether a does anything. */
LAM_HD int lam_aug_on(const lam_aug *a) { return a && (a->pad > 0 || a->flip); }

#endif
