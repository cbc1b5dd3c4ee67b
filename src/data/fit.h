/* fit.h — an image fitted to a fixed size (image folders' --size): scaled to cover H x W, the middle kept; one
 * definition for the host (image.c) and the nvJPEG path's kernel (cuda/jpeg.cu), so both decoders' images are
 * fitted alike, bit for bit. */
#ifndef LAMINA_FIT_H
#define LAMINA_FIT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifndef LAM_HD /* as prims.h has it */
#ifdef __CUDACC__
#define LAM_HD __host__ __device__ __forceinline__
#else
#define LAM_HD static inline
#endif
#endif

/* The scale that makes an h x w image cover H x W, and the offsets (oy, ox) of the middle H x W in it. */
LAM_HD void fit_geometry(int h, int w, int H, int W, double *scale, double *oy, double *ox) {
  const double sy = (double)H / h, sx = (double)W / w, s = sy > sx ? sy : sx;
  *scale = s, *oy = (h * s - H) / 2, *ox = (w * s - W) / 2;
}

/* Along one axis of n source pixels, output sample s (at s in the scaled image) where the scale grows the image:
 * the two source taps i0, i1 and the second's weight *a (bilinear). */
LAM_HD void fit_taps(double s, double scale, int n, int *i0, int *i1, double *a) {
  double f = (s + 0.5) / scale - 0.5;
  if (f < 0) f = 0;
  int t = (int)f;
  if (t > n - 1) t = n - 1;
  *i0 = t, *i1 = t + 1 < n ? t + 1 : t;
  *a = f - t > 1 ? 1 : f - t;
}

/* The same where it shrinks the image: the source pixels [*a, *b) that output sample s covers, at least one. */
LAM_HD void fit_span(double s, double scale, int n, int *a, int *b) {
  /* the footprint [s, s + 1) in the source is [s / scale, (s + 1) / scale) ... */
  int lo = (int)ceil(s / scale - 0.5), hi = (int)ceil((s + 1) / scale - 0.5);
  if (lo < 0) lo = 0;
  if (hi > n) hi = n;
  if (hi <= lo) hi = lo + 1 <= n ? lo + 1 : lo, lo = hi - 1;
  *a = lo, *b = hi;
}

/* The bilinear value at taps (y0, y1, ay) x (x0, x1, ax) of channel q, rounded. */
LAM_HD uint8_t fit_bilinear(const uint8_t *px, int w, int c, int y0, int y1, double ay, int x0, int x1, double ax, int q) {
  const double v = (1 - ay) * ((1 - ax) * px[((size_t)y0 * w + x0) * c + q] + ax * px[((size_t)y0 * w + x1) * c + q]) +
                   ay * ((1 - ax) * px[((size_t)y1 * w + x0) * c + q] + ax * px[((size_t)y1 * w + x1) * c + q]);
  return (uint8_t)(v + 0.5);
}

/* The mean of the source pixels [ya, yb) x [xa, xb) of channel q, rounded. */
LAM_HD uint8_t fit_mean(const uint8_t *px, int w, int c, int ya, int yb, int xa, int xb, int q) {
  unsigned long sum = 0;
  for (int y = ya; y < yb; y++)
    for (int x = xa; x < xb; x++) sum += px[((size_t)y * w + x) * c + q];
  const unsigned long cnt = (unsigned long)(yb - ya) * (unsigned long)(xb - xa);
  return (uint8_t)((sum + cnt / 2) / cnt);
}

/* One output sample of channel q at (sy, sx) of the scaled image px (h, w, c interleaved): bilinear where the
 * scale grows the image; the mean of the source pixels the output pixel covers where it shrinks it. The host
 * (image_fit) takes the same taps and spans from tables made once a row and a column. */
LAM_HD uint8_t fit_sample(const uint8_t *px, int h, int w, int c, double scale, double sy, double sx, int q) {
  if (scale >= 1.0) {
    int y0, y1, x0, x1;
    double ay, ax;
    fit_taps(sy, scale, h, &y0, &y1, &ay);
    fit_taps(sx, scale, w, &x0, &x1, &ax);
    return fit_bilinear(px, w, c, y0, y1, ay, x0, x1, ax, q);
  }
  int ya, yb, xa, xb;
  fit_span(sy, scale, h, &ya, &yb);
  fit_span(sx, scale, w, &xa, &xb);
  return fit_mean(px, w, c, ya, yb, xa, xb, q);
}

/* The source index (0..n-1) of the pixel nearest the centre of output sample s (at s + 0.5 in the scaled image):
 * the centre that fit_sample's bilinear weights are taken at, so a mask fitted by nearest neighbour lines up with
 * its image. */
LAM_HD int fit_nearest(double s, double scale, int n) {
  int i = (int)floor((s + 0.5) / scale);
  return i < 0 ? 0 : i > n - 1 ? n - 1 : i;
}

#endif
