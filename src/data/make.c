/* make.c — data sets anyone can rebuild from an MNIST-layout set, the same bytes for the same seed:
 * segmentation scenes (lam_data_segment: M2NIST-style, one to three items on a blank field, a class per
 * pixel), the IDX writer that `lamina data` saves them with, and a set written as an image folder in
 * colour (lam_data_images_part). The generator is lamina's own (nn/rng.h),
 * so a scene does not depend on the C library. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "../internal.h"
#include "../nn/rng.h"
#include "../status.h"

#define SEGMENT_TRIES 100 /* placements tried for an item before the scene keeps the items it has */

/* Whether the box (y, x, s, s) overlaps any of the k boxes already placed. */
static int overlaps(const int (*box)[2], int k, int s, int y, int x) {
  for (int i = 0; i < k; i++)
    if (y < box[i][0] + s && box[i][0] < y + s && x < box[i][1] + s && box[i][1] < x + s) return 1;
  return 0;
}

lam_status lam_data_segment(const lam_dataset *src, size_t n, int h, int w, uint64_t seed, uint8_t *images,
                            uint8_t *labels) {
  LAM_CHECK_ARG(src && images && labels, "lam_data_segment: %s is NULL", !src ? "src" : !images ? "images" : "labels");
  LAM_CHECK_ARG(src->n > 0, "lam_data_segment: the source set is empty");
  LAM_CHECK_ARG((src->c ? src->c : 1) == 1, "lam_data_segment: the source set has %d channels; scenes are made from "
                "one-channel images (an MNIST-layout set)", src->c);
  LAM_CHECK_ARG(src->label_h <= 1 && src->label_w <= 1,
                "lam_data_segment: the source set has a label per pixel; scenes are made from a class per image");
  LAM_CHECK_ARG(src->h == src->w, "lam_data_segment: the source images are %dx%d; scenes place square items",
                src->h, src->w);
  LAM_CHECK_ARG(h >= src->h && w >= src->w && h <= 4096 && w <= 4096,
                "lam_data_segment: a %dx%d scene does not hold a %dx%d item (or is larger than 4096)", h, w, src->h,
                src->w);
  LAM_CHECK_ARG(src->classes >= 1 && src->classes <= 254,
                "lam_data_segment: %d classes; a scene labels item pixels class + 1, at most 254 classes",
                src->classes);
  const int s = src->h;
  const size_t plane = (size_t)h * w, item = (size_t)s * s;
  lam_rng r;
  lam_rng_seed(&r, seed);
  memset(images, 0, n * plane);
  memset(labels, 0, n * plane);
  for (size_t i = 0; i < n; i++) {
    uint8_t *im = images + i * plane, *lb = labels + i * plane;
    const int want = 1 + (int)lam_rng_below(&r, 3);
    int box[3][2], k = 0;
    for (int t = 0; t < SEGMENT_TRIES && k < want; t++) {
      const int y = (int)lam_rng_below(&r, (uint64_t)(h - s + 1)), x = (int)lam_rng_below(&r, (uint64_t)(w - s + 1));
      if (overlaps((const int(*)[2])box, k, s, y, x)) continue;
      const size_t j = (size_t)lam_rng_below(&r, src->n);
      const uint8_t *from = src->images + j * item, cls = (uint8_t)(src->labels[j] + 1);
      for (int a = 0; a < s; a++)
        for (int b = 0; b < s; b++) {
          const uint8_t v = from[(size_t)a * s + b];
          im[(size_t)(y + a) * w + x + b] = v;
          if (v) lb[(size_t)(y + a) * w + x + b] = cls; /* visible: a nonzero pixel */
        }
      box[k][0] = y, box[k][1] = x, k++;
    }
  }
  return LAM_OK;
}

lam_status lam_idx_write(const char *path, int rank, const uint64_t *dims, const uint8_t *data) {
  LAM_CHECK_ARG(path && dims && data, "lam_idx_write: %s is NULL", !path ? "path" : !dims ? "dims" : "data");
  LAM_CHECK_ARG(rank >= 1 && rank <= 5, "lam_idx_write: rank %d (IDX files here hold 1 to 5 dimensions)", rank);
  size_t count = 1;
  for (int i = 0; i < rank; i++) {
    LAM_CHECK_ARG(dims[i] >= 1 && dims[i] <= 0xffffffffu, "lam_idx_write: dimension %d is %llu (1 to 2^32 - 1)", i,
                  (unsigned long long)dims[i]);
    LAM_CHECK_ARG(count <= SIZE_MAX / dims[i], "lam_idx_write: the dimensions overflow a size");
    count *= dims[i];
  }
  const size_t head = 4 + 4 * (size_t)rank;
  uint8_t *buf = malloc(head + count);
  if (!buf) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_idx_write: no host memory for %zu bytes of '%s'", head + count, path);
  buf[0] = buf[1] = 0, buf[2] = 0x08, buf[3] = (uint8_t)rank; /* unsigned bytes, rank dimensions */
  for (int i = 0; i < rank; i++)
    for (int b = 0; b < 4; b++) buf[4 + 4 * i + b] = (uint8_t)(dims[i] >> (24 - 8 * b)); /* big-endian */
  memcpy(buf + head, data, count);
  lam_status st = lam_output_write(path, "IDX file", LAM_FILE_IDX, buf, head + count);
  free(buf);
  return st;
}

/* ---- a set as an image folder (`lamina data images`) ---- */

/* Writes n bytes to path as they are (a data set's file: made again by running the maker again, so written
 * without fsync; the folder of the whole set is renamed into place by the caller). */
lam_status lam_data_write_plain(const char *path, const uint8_t *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return LAM_FAIL(LAM_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
  size_t put = fwrite(p, 1, n, f);
  int bad = ferror(f) | (fclose(f) != 0);
  if (bad || put != n) return LAM_FAIL(LAM_ERR_IO, "cannot write '%s': wrote %zu of %zu bytes", path, put, n);
  return LAM_OK;
}

lam_status lam_data_images_part(const lam_dataset *src, size_t n, uint64_t seed, int kind, const char *dir) {
  LAM_CHECK_ARG(src && dir, "lam_data_images_part: %s is NULL", src ? "dir" : "src");
  LAM_CHECK_ARG(kind == 1 || kind == 2, "lam_data_images_part: kind %d (1 PNG, 2 JPEG)", kind);
  LAM_CHECK_ARG((src->c ? src->c : 1) == 1 && src->label_h <= 1 && src->label_w <= 1,
                "lam_data_images_part: the source must be one-channel images with a class each");
  LAM_CHECK_ARG(n >= 1 && n <= src->n, "lam_data_images_part: %zu images asked for, the source has %zu", n, src->n);
  LAM_CHECK_ARG(src->classes >= 1 && src->classes <= 256, "lam_data_images_part: %d classes", src->classes);
  LAM_CHECK_ARG((image_formats() & kind) == kind, "lam_data_images_part: this lamina was built without %s",
                kind == 1 ? "libpng (install libpng-dev)" : "libjpeg (install libjpeg62-turbo-dev)");
  const int digits = src->classes > 100 ? 3 : src->classes > 10 ? 2 : 1;
  uint8_t used[256] = {0}; /* a folder per class of this part's images only: an empty one is an error to read */
  for (size_t i = 0; i < n; i++) used[src->labels[i]] = 1;
  for (int k = 0; k < src->classes; k++) { /* a folder per class, named by its number, sorted as numbers */
    if (!used[k]) continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%0*d", dir, digits, k);
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return LAM_FAIL(LAM_ERR_IO, "cannot make '%s': %s", p, strerror(errno));
  }
  const size_t P = (size_t)src->h * src->w;
  lam_status st = LAM_OK;
#pragma omp parallel for schedule(dynamic, 64)
  for (size_t i = 0; i < n; i++) {
    /* this image's colours from its own stream: the same file whatever the thread count */
    lam_rng r;
    lam_rng_seed(&r, seed ^ (0x9e3779b97f4a7c15ULL * (i + 1)));
    uint8_t bg[3], fg[3], *rgb = malloc(P * 3), *buf = NULL;
    for (int q = 0; q < 3; q++) bg[q] = (uint8_t)lam_rng_below(&r, 97), fg[q] = (uint8_t)(160 + lam_rng_below(&r, 96));
    lam_status s = rgb ? LAM_OK : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for an image");
    if (s == LAM_OK) {
      const uint8_t *g = src->images + i * P;
      for (size_t p = 0; p < P; p++)
        for (int q = 0; q < 3; q++) rgb[p * 3 + q] = (uint8_t)((bg[q] * (255 - g[p]) + fg[q] * g[p] + 127) / 255);
    }
    size_t len = 0;
    if (s == LAM_OK) s = image_encode(kind, rgb, src->h, src->w, 3, &buf, &len);
    char p[4096];
    snprintf(p, sizeof p, "%s/%0*d/%06zu.%s", dir, digits, src->labels[i], i, kind == 1 ? "png" : "jpg");
    if (s == LAM_OK) s = lam_data_write_plain(p, buf, len);
    free(rgb), free(buf);
    if (s != LAM_OK) {
#pragma omp critical(images_part)
      if (st == LAM_OK) st = s;
    }
  }
  return st;
}

/* ---- clips for video classification (Moving-MNIST-style) ---- */

/* The item's place after one more frame, bouncing off the field's edges: position p in [0, span], step v. */
static void bounce(int *p, int *v, int span) {
  *p += *v;
  if (*p < 0) *p = -*p, *v = -*v;
  if (*p > span) *p = 2 * span - *p, *v = -*v;
}

lam_status lam_data_clips(const lam_dataset *src, size_t n, int frames, int h, int w, uint64_t seed, uint8_t *clips,
                          uint8_t *labels) {
  LAM_CHECK_ARG(src && clips && labels, "lam_data_clips: %s is NULL", !src ? "src" : !clips ? "clips" : "labels");
  LAM_CHECK_ARG(src->n > 0 && (src->c ? src->c : 1) == 1 && src->label_h <= 1 && src->label_w <= 1 && src->h == src->w,
                "lam_data_clips: the source must be square one-channel images with a class each");
  LAM_CHECK_ARG(src->classes >= 2, "lam_data_clips: the two items of a clip are of different classes: the source needs "
                "at least 2 classes, it has %d", src->classes);
  LAM_CHECK_ARG(frames >= 1 && frames <= 1024, "lam_data_clips: %d frames (1 to 1024)", frames);
  const int s = src->h;
  LAM_CHECK_ARG(h >= s + 3 && w >= s + 3 && h <= 4096 && w <= 4096,
                "lam_data_clips: a %dx%d field leaves a %dx%d item no room to move (at least 3 pixels more a side)", h,
                w, s, s);
  int have[256] = {0}, distinct = 0;
  for (size_t i = 0; i < src->n; i++) distinct += !have[src->labels[i]]++;
  LAM_CHECK_ARG(distinct >= 2, "lam_data_clips: the source's images are all of one class");
  const size_t plane = (size_t)h * w, item = (size_t)s * s;
  lam_rng r;
  lam_rng_seed(&r, seed);
  for (size_t i = 0; i < n; i++) {
    const size_t a = (size_t)lam_rng_below(&r, src->n); /* the still item */
    size_t b;
    do b = (size_t)lam_rng_below(&r, src->n);
    while (src->labels[b] == src->labels[a]); /* the moving one, of another class */
    const int ya = (int)lam_rng_below(&r, (uint64_t)(h - s + 1)), xa = (int)lam_rng_below(&r, (uint64_t)(w - s + 1));
    int yb = (int)lam_rng_below(&r, (uint64_t)(h - s + 1)), xb = (int)lam_rng_below(&r, (uint64_t)(w - s + 1));
    int vy = 1 + (int)lam_rng_below(&r, 3), vx = 1 + (int)lam_rng_below(&r, 3); /* 1 to 3 pixels a frame */
    if (lam_rng_below(&r, 2)) vy = -vy;
    if (lam_rng_below(&r, 2)) vx = -vx;
    const uint8_t *ia = src->images + a * item, *ib = src->images + b * item;
    for (int t = 0; t < frames; t++) {
      uint8_t *f = clips + (i * frames + t) * plane;
      memset(f, 0, plane);
      for (int u = 0; u < s; u++)
        for (int v = 0; v < s; v++) {
          f[(size_t)(ya + u) * w + xa + v] = ia[(size_t)u * s + v];
          uint8_t *p = &f[(size_t)(yb + u) * w + xb + v], q = ib[(size_t)u * s + v];
          if (q > *p) *p = q; /* where the two overlap, the brighter */
        }
      bounce(&yb, &vy, h - s), bounce(&xb, &vx, w - s);
    }
    labels[i] = src->labels[b];
  }
  return LAM_OK;
}

lam_status lam_data_videos_part(const lam_dataset *src, size_t n, int h, int w, int min_s, int max_s, uint64_t seed,
                                const char *dir) {
  LAM_CHECK_ARG(src && dir, "lam_data_videos_part: %s is NULL", src ? "dir" : "src");
  LAM_CHECK_ARG(min_s >= 1 && min_s <= max_s && max_s <= 60, "lam_data_videos_part: videos of %d to %d s (1 to 60, the "
                "least first)", min_s, max_s);
  LAM_CHECK_ARG(h % 2 == 0 && w % 2 == 0, "lam_data_videos_part: a %dx%d field (video encoders take even sides)", h, w);
  LAM_CHECK_ARG(src->classes >= 2 && src->classes <= 256, "lam_data_videos_part: %d classes", src->classes);
  LAM_CHECK_ARG(video_supported(), "lam_data_videos_part: this lamina was built without FFmpeg's libraries (install "
                "libavformat-dev, libavcodec-dev and libswscale-dev and build it again)");
  const int digits = src->classes > 100 ? 3 : src->classes > 10 ? 2 : 1;
  for (int k = 0; k < src->classes; k++) { /* a folder per class, named by its number, sorted as numbers */
    char p[4096];
    snprintf(p, sizeof p, "%s/%0*d", dir, digits, k);
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return LAM_FAIL(LAM_ERR_IO, "cannot make '%s': %s", p, strerror(errno));
  }
  const size_t plane = (size_t)h * w;
  lam_status st = LAM_OK;
  int *used = calloc((size_t)src->classes, sizeof *used);
  if (!used) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_data_videos_part: no host memory");
#pragma omp parallel for schedule(dynamic, 4)
  for (size_t i = 0; i < n; i++) {
    /* this video's length and content from its own stream: the same file whatever the thread count */
    lam_rng r;
    lam_rng_seed(&r, seed ^ (0x9e3779b97f4a7c15ULL * (i + 1)));
    const int len = min_s * VIDEO_FPS + (int)lam_rng_below(&r, (uint64_t)(max_s - min_s) * VIDEO_FPS + 1);
    uint8_t *frames = malloc((size_t)len * plane), label = 0;
    lam_status s = frames ? lam_data_clips(src, 1, len, h, w, lam_rng_next(&r), frames, &label)
                          : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for a video of %d frames", len);
    char p[4096];
    snprintf(p, sizeof p, "%s/%0*d/%06zu.mp4", dir, digits, label, i);
    if (s == LAM_OK) s = video_write(p, frames, len, h, w, 1, VIDEO_FPS);
    free(frames);
    if (s == LAM_OK) {
#pragma omp atomic
      used[label]++;
    } else {
#pragma omp critical(videos_part)
      if (st == LAM_OK) st = LAM_FAIL(s, "%s", lam_last_error());
    }
  }
  for (int k = 0; k < src->classes && st == LAM_OK; k++) { /* a class no video drew: no empty folder left behind */
    char p[4096];
    snprintf(p, sizeof p, "%s/%0*d", dir, digits, k);
    if (!used[k]) rmdir(p);
  }
  free(used);
  return st;
}
