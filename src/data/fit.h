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

/* One output sample of channel q at (sy, sx) of the scaled image px (h, w, c interleaved): bilinear where the
 * scale grows the image; the mean of the source pixels the output pixel covers where it shrinks it. */
LAM_HD uint8_t fit_sample(const uint8_t *px, int h, int w, int c, double scale, double sy, double sx, int q) {
  if (scale >= 1.0) {
    double fy = (sy + 0.5) / scale - 0.5, fx = (sx + 0.5) / scale - 0.5;
    if (fy < 0) fy = 0;
    if (fx < 0) fx = 0;
    int y0 = (int)fy, x0 = (int)fx;
    if (y0 > h - 1) y0 = h - 1;
    if (x0 > w - 1) x0 = w - 1;
    const int y1 = y0 + 1 < h ? y0 + 1 : y0, x1 = x0 + 1 < w ? x0 + 1 : x0;
    const double ay = fy - y0 > 1 ? 1 : fy - y0, ax = fx - x0 > 1 ? 1 : fx - x0;
    const double v = (1 - ay) * ((1 - ax) * px[((size_t)y0 * w + x0) * c + q] + ax * px[((size_t)y0 * w + x1) * c + q]) +
                     ay * ((1 - ax) * px[((size_t)y1 * w + x0) * c + q] + ax * px[((size_t)y1 * w + x1) * c + q]);
    return (uint8_t)(v + 0.5);
  }
  /* the footprint [sy, sy + 1) x [sx, sx + 1) in the source is [sy / scale, (sy + 1) / scale) ... */
  int ya = (int)ceil(sy / scale - 0.5), yb = (int)ceil((sy + 1) / scale - 0.5);
  int xa = (int)ceil(sx / scale - 0.5), xb = (int)ceil((sx + 1) / scale - 0.5);
  if (ya < 0) ya = 0;
  if (xa < 0) xa = 0;
  if (yb > h) yb = h;
  if (xb > w) xb = w;
  if (yb <= ya) yb = ya + 1 <= h ? ya + 1 : ya, ya = yb - 1;
  if (xb <= xa) xb = xa + 1 <= w ? xa + 1 : xa, xa = xb - 1;
  unsigned long sum = 0;
  for (int y = ya; y < yb; y++)
    for (int x = xa; x < xb; x++) sum += px[((size_t)y * w + x) * c + q];
  const unsigned long cnt = (unsigned long)(yb - ya) * (unsigned long)(xb - xa);
  return (uint8_t)((sum + cnt / 2) / cnt);
}

/* The source index (0..n-1) of the pixel nearest the centre of output sample s (at s + 0.5 in the scaled image):
 * the centre that fit_sample's bilinear weights are taken at, so a mask fitted by nearest neighbour lines up with
 * its image. */
LAM_HD int fit_nearest(double s, double scale, int n) {
  int i = (int)floor((s + 0.5) / scale);
  return i < 0 ? 0 : i > n - 1 ? n - 1 : i;
}

#endif
