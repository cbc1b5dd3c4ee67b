/* image.c — image files: PNG through libpng's simplified API, JPEG through libjpeg(-turbo), told apart by
 * their first bytes; decoding into interleaved 8-bit grey or RGB (an alpha channel is composited onto
 * black, 16-bit PNG reduced to 8 bits by libpng), encoding for `lamina data images`, and the fit to a
 * fixed size that image folders use. A damaged, truncated or unreadable file is an error that names it:
 * libjpeg's fatal errors return through a longjmp instead of exiting, and its warnings (a truncated
 * stream, which it would pad with grey) count as errors. Builds without either library say so when
 * such a file is met. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data.h"
#include "fit.h"
#include "../internal.h"
#include "../status.h"

#ifdef LAMINA_WITH_PNG
#include <png.h>
#endif
#ifdef LAMINA_WITH_JPEG
#include <jpeglib.h>
#endif

#define IMAGE_MAX_BYTES ((size_t)1 << 30) /* a file larger than 1 GiB is not an image lamina reads */

int lam_image_formats(void) { return image_formats(); }

int lam_image_file_name(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot && (!strcasecmp(dot, ".png") || !strcasecmp(dot, ".jpg") || !strcasecmp(dot, ".jpeg"));
}

int image_formats(void) {
  int f = 0;
#ifdef LAMINA_WITH_PNG
  f |= IMAGE_PNG;
#endif
#ifdef LAMINA_WITH_JPEG
  f |= IMAGE_JPEG;
#endif
  return f;
}

static int is_png(const uint8_t *p, size_t n) {
  static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  return n >= 8 && !memcmp(p, sig, 8);
}
static int is_jpeg(const uint8_t *p, size_t n) { return n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff; }

int image_is_jpeg(const uint8_t *p, size_t n) { return is_jpeg(p, n); }

lam_status image_file_bytes(const char *path, uint8_t **buf, size_t *len) {
  *buf = NULL, *len = 0;
  FILE *f; /* files.c: only a regular file (a FIFO would block); a folder's images are not each recorded */
  LAM_TRY(lam_input_fopen(path, "image file", LAM_FILE_NONE, 0, &f));
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    fclose(f);
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': fstat failed: %s", path, strerror(errno));
  }
  if ((uint64_t)st.st_size > IMAGE_MAX_BYTES) {
    fclose(f);
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': %lld bytes, more than an image lamina reads (1 GiB)", path,
                    (long long)st.st_size);
  }
  size_t n = (size_t)st.st_size;
  uint8_t *b = malloc(n ? n : 1);
  if (!b) {
    fclose(f);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image file '%s': no host memory for its %zu bytes", path, n);
  }
  size_t got = fread(b, 1, n, f);
  int err = ferror(f);
  fclose(f);
  if (err || got != n) {
    free(b);
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': read %zu of its %zu bytes", path, got, n);
  }
  *buf = b, *len = n;
  return LAM_OK;
}

#if defined(LAMINA_WITH_PNG) || defined(LAMINA_WITH_JPEG)
/* Sides and channels within lamina's limits, and the pixel buffer. */
static lam_status image_alloc(const char *path, int h, int w, int c, data_image *out) {
  if (h < 1 || w < 1 || (uint64_t)h > DATA_MAX_SIDE || (uint64_t)w > DATA_MAX_SIDE)
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': %dx%d pixels; lamina reads images of 1 to %u pixels a side", path, w,
                    h, DATA_MAX_SIDE);
  out->h = h, out->w = w, out->c = c;
  out->px = malloc((size_t)h * w * c);
  if (!out->px) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image file '%s': no host memory for %dx%d pixels", path, w, h);
  return LAM_OK;
}
#endif

#ifdef LAMINA_WITH_PNG
static lam_status read_png(const char *path, const uint8_t *buf, size_t len, data_image *out) {
  png_image im;
  memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&im, buf, len))
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': not a PNG lamina can read: %s", path, im.message);
  const int c = im.format & PNG_FORMAT_FLAG_COLOR ? 3 : 1;
  im.format = c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  lam_status s = image_alloc(path, (int)im.height, (int)im.width, c, out);
  if (s != LAM_OK) {
    png_image_free(&im);
    return s;
  }
  png_color black = {0, 0, 0}; /* where the file has alpha: composited onto black */
  if (!png_image_finish_read(&im, &black, out->px, 0, NULL)) {
    free(out->px);
    out->px = NULL;
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': the PNG is damaged or truncated: %s", path, im.message);
  }
  return LAM_OK;
}
#endif

#ifdef LAMINA_WITH_JPEG
typedef struct jpeg_err {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
  int warned;
} jpeg_err;
static void jpeg_fatal(j_common_ptr ci) {
  jpeg_err *e = (jpeg_err *)ci->err;
  e->pub.format_message(ci, e->msg);
  longjmp(e->jb, 1);
}
/* libjpeg's warnings (level -1), such as a stream that ends early and would be padded with grey, are
 * errors here: the first one is kept. */
static void jpeg_note(j_common_ptr ci, int level) {
  jpeg_err *e = (jpeg_err *)ci->err;
  if (level < 0 && !e->warned) {
    e->pub.format_message(ci, e->msg);
    e->warned = 1;
  }
}

static lam_status read_jpeg(const char *path, const uint8_t *buf, size_t len, data_image *out) {
  struct jpeg_decompress_struct ci;
  jpeg_err e;
  memset(&e, 0, sizeof e);
  ci.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = jpeg_fatal;
  e.pub.emit_message = jpeg_note;
  out->px = NULL;
  if (setjmp(e.jb)) {
    jpeg_destroy_decompress(&ci);
    free(out->px);
    out->px = NULL;
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': the JPEG is damaged: %s", path, e.msg);
  }
  jpeg_create_decompress(&ci);
  jpeg_mem_src(&ci, buf, (unsigned long)len);
  jpeg_read_header(&ci, TRUE);
  if (ci.num_components != 1 && ci.num_components != 3) {
    int k = ci.num_components;
    jpeg_destroy_decompress(&ci);
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': a JPEG of %d components (CMYK?); lamina reads grey and colour "
                    "(YCbCr/RGB) JPEGs: convert it to RGB", path, k);
  }
  const int c = ci.num_components;
  ci.out_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&ci);
  lam_status s = image_alloc(path, (int)ci.output_height, (int)ci.output_width, c, out);
  if (s != LAM_OK) {
    jpeg_destroy_decompress(&ci);
    return s;
  }
  while (ci.output_scanline < ci.output_height) {
    JSAMPROW row = out->px + (size_t)ci.output_scanline * ci.output_width * c;
    jpeg_read_scanlines(&ci, &row, 1);
  }
  jpeg_finish_decompress(&ci);
  jpeg_destroy_decompress(&ci);
  if (e.warned) {
    free(out->px);
    out->px = NULL;
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': the JPEG is damaged or truncated: %s", path, e.msg);
  }
  return LAM_OK;
}
#endif

lam_status image_decode(const char *path, const uint8_t *buf, size_t len, data_image *out) {
  memset(out, 0, sizeof *out);
  if (is_png(buf, len)) {
#ifdef LAMINA_WITH_PNG
    return read_png(path, buf, len, out);
#else
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "image file '%s' is a PNG, and this lamina was built without libpng: install "
                    "libpng-dev (make deps does) and build again", path);
#endif
  }
  if (is_jpeg(buf, len)) {
#ifdef LAMINA_WITH_JPEG
    return read_jpeg(path, buf, len, out);
#else
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "image file '%s' is a JPEG, and this lamina was built without libjpeg: install "
                    "libjpeg62-turbo-dev (make deps does) and build again", path);
#endif
  }
  return LAM_FAIL(LAM_ERR_IO, "image file '%s': %s", path,
                  len == 0 ? "the file is empty" : "neither PNG nor JPEG (its first bytes are neither format's)");
}

lam_status image_read(const char *path, data_image *out) {
  memset(out, 0, sizeof *out);
  uint8_t *buf;
  size_t len;
  LAM_TRY(image_file_bytes(path, &buf, &len));
  lam_status s = image_decode(path, buf, len, out);
  free(buf);
  return s;
}

void image_fit(const data_image *im, int H, int W, uint8_t *out) {
  if (im->h == H && im->w == W) {
    memcpy(out, im->px, (size_t)H * W * im->c);
    return;
  }
  double scale, oy, ox;
  fit_geometry(im->h, im->w, H, W, &scale, &oy, &ox);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int q = 0; q < im->c; q++)
        out[((size_t)y * W + x) * im->c + q] = fit_sample(im->px, im->h, im->w, im->c, scale, y + oy, x + ox, q);
}

lam_status image_encode(int kind, const uint8_t *px, int h, int w, int c, uint8_t **buf, size_t *len) {
  *buf = NULL, *len = 0;
  if (kind == IMAGE_PNG) {
#ifdef LAMINA_WITH_PNG
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w, im.height = (png_uint_32)h;
    im.format = c == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
    png_alloc_size_t n = 0;
    if (!png_image_write_get_memory_size(im, n, 0, px, 0, NULL))
      return LAM_FAIL(LAM_ERR_IO, "PNG encoding: %s", im.message);
    uint8_t *b = malloc(n);
    if (!b) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "PNG encoding: no host memory for %zu bytes", (size_t)n);
    if (!png_image_write_to_memory(&im, b, &n, 0, px, 0, NULL)) {
      free(b);
      return LAM_FAIL(LAM_ERR_IO, "PNG encoding: %s", im.message);
    }
    *buf = b, *len = n;
    return LAM_OK;
#else
    (void)px, (void)h, (void)w, (void)c;
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "PNG files: this lamina was built without libpng (install libpng-dev)");
#endif
  }
#ifdef LAMINA_WITH_JPEG
  struct jpeg_compress_struct ci;
  jpeg_err e;
  memset(&e, 0, sizeof e);
  ci.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = jpeg_fatal;
  unsigned char *volatile mem = NULL;
  unsigned long n = 0;
  if (setjmp(e.jb)) {
    jpeg_destroy_compress(&ci);
    free(mem);
    return LAM_FAIL(LAM_ERR_IO, "JPEG encoding: %s", e.msg);
  }
  jpeg_create_compress(&ci);
  unsigned char *m = NULL;
  jpeg_mem_dest(&ci, &m, &n);
  ci.image_width = (JDIMENSION)w, ci.image_height = (JDIMENSION)h, ci.input_components = c;
  ci.in_color_space = c == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&ci);
  jpeg_set_quality(&ci, 90, TRUE);
  jpeg_start_compress(&ci, TRUE);
  while (ci.next_scanline < ci.image_height) {
    JSAMPROW row = (JSAMPROW)(px + (size_t)ci.next_scanline * w * c);
    jpeg_write_scanlines(&ci, &row, 1);
  }
  jpeg_finish_compress(&ci);
  mem = m;
  jpeg_destroy_compress(&ci);
  *buf = mem, *len = n;
  return LAM_OK;
#else
  (void)px, (void)h, (void)w, (void)c;
  return LAM_FAIL(LAM_ERR_UNSUPPORTED, "JPEG files: this lamina was built without libjpeg (install libjpeg62-turbo-dev)");
#endif
}

/* ---- the public forms: for `lamina predict` and other callers ---- */

lam_status lam_image_load(const char *path, int c, int h, int w, uint8_t *out) {
  LAM_CHECK_ARG(path && out, "lam_image_load: %s is NULL", path ? "out" : "path");
  LAM_CHECK_ARG((c == 1 || c == 3) && h >= 1 && w >= 1 && h <= (int)DATA_MAX_SIDE && w <= (int)DATA_MAX_SIDE,
                "lam_image_load: %d channels of %dx%d (1 or 3 channels, 1 to %u a side)", c, h, w, DATA_MAX_SIDE);
  data_image im;
  LAM_TRY(image_read(path, &im));
  uint8_t *fit = malloc((size_t)h * w * im.c);
  if (!fit) {
    free(im.px);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_image_load: no host memory");
  }
  image_fit(&im, h, w, fit);
  const size_t P = (size_t)h * w;
  for (size_t p = 0; p < P; p++) {
    const uint8_t *v = fit + p * im.c;
    if (c == im.c)
      for (int q = 0; q < c; q++) out[(size_t)q * P + p] = v[q];
    else if (c == 1) /* colour to grey: ITU-R BT.601 luma */
      out[p] = (uint8_t)((299u * v[0] + 587u * v[1] + 114u * v[2] + 500u) / 1000u);
    else
      for (int q = 0; q < 3; q++) out[(size_t)q * P + p] = v[0]; /* grey to colour: the same value in each */
  }
  free(fit);
  free(im.px);
  return LAM_OK;
}

lam_status lam_image_save_png(const char *path, const uint8_t *px, int h, int w, int c) {
  LAM_CHECK_ARG(path && px, "lam_image_save_png: %s is NULL", path ? "px" : "path");
  LAM_CHECK_ARG((c == 1 || c == 3) && h >= 1 && w >= 1, "lam_image_save_png: %d channels of %dx%d", c, h, w);
  uint8_t *buf;
  size_t len;
  LAM_TRY(image_encode(IMAGE_PNG, px, h, w, c, &buf, &len));
  lam_status s = lam_output_write(path, "PNG file", LAM_FILE_PNG, buf, len);
  free(buf);
  return s;
}
