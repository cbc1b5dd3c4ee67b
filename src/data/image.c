/* image.c — image files: PNG through libpng, JPEG through libjpeg(-turbo), told apart by their first bytes;
 * decoding into interleaved 8-bit grey or RGB as Pillow (and so torchvision) reads them (16-bit samples by their
 * high byte, alpha dropped keeping the colour), bounded from the header before anything is allocated (the
 * bounds in data.h), encoding for `lamina data images`, and the fit to a fixed size that image folders use. A
 * damaged, truncated or unreadable file is an error that names it: the libraries' fatal errors return through
 * a longjmp instead of exiting, and libjpeg's warnings (a truncated stream, which it would pad with grey) count
 * as errors. Builds without either library say so when such a file is met. */
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
#include <jerror.h> /* JERR_NO_BACKING_STORE: libjpeg over its memory bound */
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

int image_jpeg_size(const uint8_t *p, size_t n, int *h, int *w) {
  if (!is_jpeg(p, n)) return 0;
  size_t i = 2;
  while (i + 4 <= n) {
    if (p[i] != 0xff) return 0;
    const uint8_t m = p[i + 1];
    if (m == 0xff) { /* a fill byte */
      i++;
      continue;
    }
    if (m == 0x01 || (m >= 0xd0 && m <= 0xd8)) { /* markers without a length */
      i += 2;
      continue;
    }
    const size_t len = (size_t)p[i + 2] << 8 | p[i + 3];
    if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) { /* a frame header: SOF0..SOF15 */
      if (len < 7 || i + 9 > n) return 0;
      *h = p[i + 5] << 8 | p[i + 6], *w = p[i + 7] << 8 | p[i + 8];
      return 1;
    }
    if (m == 0xd9 || m == 0xda || len < 2) return 0; /* the end, or a scan, before any frame header */
    i += 2 + len;
  }
  return 0;
}

/* ITU-R 601-2 luma, L = R 299/1000 + G 587/1000 + B 114/1000, in Pillow's integer form (convert("L")), so a colour
 * image made grey here is what Pillow makes of it, to the bit. */
uint8_t image_luma(const uint8_t *rgb) {
  return (uint8_t)((rgb[0] * 19595u + rgb[1] * 38470u + rgb[2] * 7471u + 0x8000u) >> 16);
}

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
/* A size the header claims, checked before anything of that size is allocated. Read as it is (fit 0) an image
 * becomes the set's size: 1 to DATA_MAX_SIDE a side. To be fitted to a size (image folders' --size, predict) it
 * may be larger, up to max_pixels: IMAGE_MAX_PIXELS decoded, or for a JPEG's source IMAGE_MAX_JPEG_PIXELS, which
 * DCT scaling decodes smaller. */
static lam_status image_check_size(const char *path, uint64_t h, uint64_t w, int fit, uint64_t max_pixels) {
  if (h < 1 || w < 1)
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': its header says %llux%llu pixels; the file is damaged", path,
                    (unsigned long long)w, (unsigned long long)h);
  if (!fit && (h > DATA_MAX_SIDE || w > DATA_MAX_SIDE))
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': %llux%llu pixels; read as they are, images are 1 to %u pixels a "
                    "side: give --size HxW (size in the API) to fit larger ones to one size", path,
                    (unsigned long long)w, (unsigned long long)h, DATA_MAX_SIDE);
  if (h * w > max_pixels)
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': its header says %llux%llu pixels (%.0f million), more than the "
                    "%.0f million lamina decodes an image of (a bound against decompression bombs); "
                    "the file is damaged or not a picture to train on: shrink it first", path, (unsigned long long)w,
                    (unsigned long long)h, (double)h * w / 1e6, max_pixels / 1e6);
  return LAM_OK;
}

/* The pixel buffer of a checked size. */
static lam_status image_alloc(const char *path, int h, int w, int c, data_image *out) {
  out->h = h, out->w = w, out->c = c;
  out->px = malloc((size_t)h * w * c);
  if (!out->px) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image file '%s': no host memory for %dx%d pixels", path, w, h);
  return LAM_OK;
}
#endif

#ifdef LAMINA_WITH_PNG
/* The PNG's bytes as libpng reads them, and where its fatal errors return to. */
typedef struct png_src {
  const uint8_t *p;
  size_t len, at;
  char msg[256];
} png_src;
static void png_fatal(png_structp png, png_const_charp msg) {
  png_src *s = png_get_error_ptr(png);
  snprintf(s->msg, sizeof s->msg, "%s", msg);
  png_longjmp(png, 1);
}
/* libpng's warnings (an ancillary chunk it skips: a bad sRGB profile, a text chunk's CRC) do not change the
 * pixels: not errors, and a library prints nothing. */
static void png_quiet(png_structp png, png_const_charp msg) { (void)png, (void)msg; }
static void png_take(png_structp png, png_bytep dst, size_t n) {
  png_src *s = png_get_io_ptr(png);
  if (n > s->len - s->at) png_error(png, "the file ends early (truncated)");
  memcpy(dst, s->p + s->at, n);
  s->at += n;
}

/* The start both PNG readers share: the source, libpng's bounds (sides, and its allocations for chunks: a
 * text or ICC chunk inflating to gigabytes), and the header. Inside the caller's setjmp. */
static void png_begin(png_structp png, png_infop info, png_src *src) {
  png_set_read_fn(png, src, png_take);
  png_set_user_limits(png, IMAGE_PNG_MAX_SIDE, IMAGE_PNG_MAX_SIDE);
  png_set_chunk_malloc_max(png, IMAGE_PNG_CHUNK_MAX);
  png_set_chunk_cache_max(png, 1000);
#ifdef PNG_IGNORE_ADLER32
  /* zlib's Adler-32 of the pixel data (a twentieth of a mask's decode) is left out: each IDAT chunk's CRC-32, which
   * libpng still checks, covers the same bytes, so a damaged file is still an error */
  png_set_option(png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
#endif
  png_read_info(png, info);
}

/* What the header claims, against what the file can hold: zlib inflates at most ~1032:1, so an image larger than
 * that of the file's bytes is a header lying (a decompression bomb's first step). what: "image" or "mask". */
static lam_status png_check_header(const char *what, const char *path, png_uint_32 h, png_uint_32 w, int channels,
                                   int depth, size_t len, int fit) {
  const uint64_t raw = (uint64_t)h * (((uint64_t)w * channels * depth + 7) / 8 + 1);
  lam_status s = image_check_size(path, h, w, fit, IMAGE_MAX_PIXELS);
  if (s == LAM_OK && raw / 1032 > len)
    s = LAM_FAIL(LAM_ERR_IO, "%s file '%s': the PNG's header says %ux%u pixels, more than its %zu bytes can hold; "
                 "the file is truncated or its header corrupt", what, path, (unsigned)w, (unsigned)h, len);
  return s;
}

/* The end both share: out's pixels (h x w x c, rows of stride bytes) read. *rows is the caller's, freed by its
 * setjmp branch when libpng fails midway; a failure of lamina's own is returned (the caller longjmps). */
static lam_status png_read_pixels(png_structp png, const char *what, const char *path, png_uint_32 h,
                                  png_uint_32 w, int c, size_t stride, data_image *out, png_bytep *volatile *rows) {
  lam_status s = image_alloc(path, (int)h, (int)w, c, out);
  if (s != LAM_OK) return s;
  *rows = malloc(h * sizeof **rows);
  if (!*rows) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s file '%s': no host memory for %u rows", what, path, (unsigned)h);
  for (png_uint_32 y = 0; y < h; y++) (*rows)[y] = out->px + (size_t)y * stride;
  png_read_image(png, *rows);
  png_read_end(png, NULL);
  return LAM_OK;
}

/* Decoded as Pillow (and so torchvision) reads a PNG: 16-bit samples by their high byte, with no gamma (the
 * file's gAMA is ignored, as Pillow does); an alpha channel dropped, keeping the colour under it (Pillow's
 * convert("RGB"/"L"); compositing onto black made transparent pixels black); a palette (its tRNS too) as its
 * colours; grey of 1, 2 or 4 bits scaled to 0..255. Grey (and grey + alpha) gives 1 channel, the rest 3. The
 * size is checked from the header before any allocation, and libpng's own allocations for chunks are bounded. */
static lam_status read_png(const char *path, const uint8_t *buf, size_t len, int fit, data_image *out) {
  png_src src = {.p = buf, .len = len};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fatal, png_quiet);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    png_destroy_read_struct(&png, NULL, NULL);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image file '%s': no host memory for libpng", path);
  }
  png_bytep *volatile rows = NULL;
  volatile lam_status s = LAM_OK; /* lamina's own refusal, kept across the longjmp */
  out->px = NULL;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    free(out->px);
    out->px = NULL;
    if (s != LAM_OK) return s; /* refused by lamina's own check, said already */
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': the PNG is damaged or truncated: %s", path, src.msg);
  }
  png_begin(png, info, &src);
  png_uint_32 w, h;
  int depth, type, interlace;
  png_get_IHDR(png, info, &w, &h, &depth, &type, &interlace, NULL, NULL);
  if ((s = png_check_header("image", path, h, w, png_get_channels(png, info), depth, len, fit)) != LAM_OK)
    png_longjmp(png, 1);
  png_set_strip_16(png); /* the high byte: Pillow's reading (png_set_scale_16 would round) */
  png_set_strip_alpha(png);
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (type == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const int c = png_get_channels(png, info);
  const size_t stride = png_get_rowbytes(png, info);
  if ((c != 1 && c != 3) || stride != (size_t)w * c)
    png_error(png, "an unexpected layout after decoding (lamina's reading of this colour type is wrong)");
  if ((s = png_read_pixels(png, "image", path, h, w, c, stride, out, &rows)) != LAM_OK) png_longjmp(png, 1);
  png_destroy_read_struct(&png, &info, NULL);
  free(rows);
  return LAM_OK;
}

/* A segmentation mask: its samples as they are stored, a class each. A palette PNG gives the palette index (the
 * palette is not expanded: VOC's colours are only a picture of the classes, the index is the class) and its tRNS is
 * ignored; a grey PNG of 8 bits its value. Any other kind (colour, grey with alpha, 16-bit, grey of fewer bits) is
 * an error saying what the file is and what a mask must be: converting it would invent classes. Bounded as
 * read_png is. */
static lam_status read_png_mask(const char *path, const uint8_t *buf, size_t len, int fit, data_image *out) {
  png_src src = {.p = buf, .len = len};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fatal, png_quiet);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    png_destroy_read_struct(&png, NULL, NULL);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "mask file '%s': no host memory for libpng", path);
  }
  png_bytep *volatile rows = NULL;
  volatile lam_status s = LAM_OK;
  out->px = NULL;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    free(out->px);
    out->px = NULL;
    if (s != LAM_OK) return s;
    return LAM_FAIL(LAM_ERR_IO, "mask file '%s': the PNG is damaged or truncated: %s", path, src.msg);
  }
  png_begin(png, info, &src);
  png_uint_32 w, h;
  int depth, type, interlace;
  png_get_IHDR(png, info, &w, &h, &depth, &type, &interlace, NULL, NULL);
  if (!(type == PNG_COLOR_TYPE_PALETTE || (type == PNG_COLOR_TYPE_GRAY && depth == 8))) {
    const char *kind = type == PNG_COLOR_TYPE_GRAY ? "grey" : type == PNG_COLOR_TYPE_GRAY_ALPHA ? "grey with alpha"
                       : type == PNG_COLOR_TYPE_RGB ? "RGB" : type == PNG_COLOR_TYPE_RGB_ALPHA ? "RGBA" : "unknown";
    s = LAM_FAIL(LAM_ERR_IO, "mask file '%s' is a PNG of %d-bit %s; a mask must be a palette PNG (the index is the class) "
                 "or an 8-bit grey PNG (the value is the class): convert colour masks to class indices first", path,
                 depth, kind);
    png_longjmp(png, 1);
  }
  if ((s = png_check_header("mask", path, h, w, 1, depth, len, fit)) != LAM_OK) png_longjmp(png, 1);
  if (depth < 8) png_set_packing(png); /* a palette of 1, 2 or 4 bits: an index a byte, not scaled */
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t stride = png_get_rowbytes(png, info);
  if (png_get_channels(png, info) != 1 || stride != (size_t)w)
    png_error(png, "an unexpected layout after decoding (lamina's reading of this mask type is wrong)");
  if ((s = png_read_pixels(png, "mask", path, h, w, 1, stride, out, &rows)) != LAM_OK) png_longjmp(png, 1);
  png_destroy_read_struct(&png, &info, NULL);
  free(rows);
  return LAM_OK;
}
#endif

#ifdef LAMINA_WITH_JPEG
typedef struct jpeg_err {
  struct jpeg_error_mgr pub;
  struct jpeg_progress_mgr progress; /* counts the scans (jpeg_scans) */
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
  int max_scans, scans_over; /* the bound on scans, and whether the file went over it */
} jpeg_err;
static void jpeg_fatal(j_common_ptr ci) {
  jpeg_err *e = (jpeg_err *)ci->err;
  e->pub.format_message(ci, e->msg);
  longjmp(e->jb, 1);
}
/* libjpeg's warnings (level -1), such as a stream that ends early and would be padded with grey, are errors
 * here, and stop the decoding at once: a damaged file of a large header costs no more than its bytes. */
static void jpeg_note(j_common_ptr ci, int level) {
  if (level < 0) jpeg_fatal(ci);
}
/* A progressive JPEG's every scan goes over the whole image: a small file of many scans (each a few bytes) of
 * a large image is a bomb of time. Called by libjpeg as it reads (each scan's start among the calls). */
static void jpeg_scans(j_common_ptr ci) {
  jpeg_err *e = (jpeg_err *)ci->err;
  const int n = ((j_decompress_ptr)ci)->input_scan_number;
  if (n > e->max_scans) {
    e->scans_over = 1;
    longjmp(e->jb, 1);
  }
}

/* The DCT scaling (M/8, M = 1..8) that decodes a large JPEG smaller, yet no smaller than th x tw so the fit
 * only shrinks it: for images over DATA_MAX_SIDE a side (those below are decoded whole, as before, so the
 * results of sets that were read already stay the same). */
static int jpeg_scale(uint64_t h, uint64_t w, int th, int tw) {
  if (!th || (h <= DATA_MAX_SIDE && w <= DATA_MAX_SIDE)) return 8;
  for (int m = 1; m < 8; m++)
    if ((h * m + 7) / 8 >= (uint64_t)th && (w * m + 7) / 8 >= (uint64_t)tw) return m;
  return 8;
}

/* Decoded through libjpeg(-turbo) to grey or RGB as the file is. Bounded before it allocates: the size from the
 * header (image_check_size), libjpeg's own memory (IMAGE_JPEG_MEMORY: a progressive file keeps every
 * coefficient of the image) and the number of scans (jpeg_scans); the first warning stops it. th x tw > 0: the
 * image is to be fitted to it (decoded smaller by DCT scaling where it is large). */
static lam_status read_jpeg(const char *path, const uint8_t *buf, size_t len, int th, int tw, data_image *out) {
  struct jpeg_decompress_struct ci;
  jpeg_err e;
  memset(&e, 0, sizeof e);
  ci.err = jpeg_std_error(&e.pub);
  e.pub.error_exit = jpeg_fatal;
  e.pub.emit_message = jpeg_note;
  e.progress.progress_monitor = jpeg_scans;
  e.max_scans = IMAGE_JPEG_MAX_SCANS;
  out->px = NULL;
  volatile int refused = 0; /* lamina's own check failed: its message is set already */
  if (setjmp(e.jb)) {
    const int code = e.pub.msg_code, w = (int)ci.image_width, h = (int)ci.image_height;
    jpeg_destroy_decompress(&ci);
    free(out->px);
    out->px = NULL;
    if (refused) return LAM_ERR_IO;
    if (e.scans_over)
      return LAM_FAIL(LAM_ERR_IO, "image file '%s': the JPEG (%dx%d) has more than %d scans, lamina's bound for its size "
                      "(a progressive JPEG has about 10; each scan goes over the whole image): a decompression bomb, "
                      "or a file to re-encode", path, w, h, e.max_scans);
    if (code == JERR_NO_BACKING_STORE || code == JERR_OUT_OF_MEMORY)
      return LAM_FAIL(LAM_ERR_IO, "image file '%s': the JPEG (%dx%d) needs more than the %d MiB lamina lets libjpeg "
                      "take to decode it (a progressive or multi-scan file holds the whole image's coefficients): a "
                      "bound against decompression bombs; shrink the image first", path, w, h,
                      (int)(IMAGE_JPEG_MEMORY >> 20));
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': the JPEG is damaged or truncated: %s", path, e.msg);
  }
  jpeg_create_decompress(&ci);
  ci.mem->max_memory_to_use = IMAGE_JPEG_MEMORY;
  ci.progress = &e.progress;
  jpeg_mem_src(&ci, buf, (unsigned long)len);
  jpeg_read_header(&ci, TRUE);
  if (ci.num_components != 1 && ci.num_components != 3) {
    int k = ci.num_components;
    jpeg_destroy_decompress(&ci);
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': a JPEG of %d components (CMYK?); lamina reads grey and colour "
                    "(YCbCr/RGB) JPEGs: convert it to RGB", path, k);
  }
  const uint64_t sh = ci.image_height, sw = ci.image_width;
  if (image_check_size(path, sh, sw, th > 0, IMAGE_MAX_JPEG_PIXELS) != LAM_OK) refused = 1, longjmp(e.jb, 1);
  const uint64_t work = IMAGE_JPEG_SCAN_WORK / (sh * sw); /* scans x pixels: about seconds at most */
  if (work < (uint64_t)e.max_scans) e.max_scans = work > 1 ? (int)work : 1;
  const int c = ci.num_components;
  ci.out_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
  ci.scale_num = (unsigned)jpeg_scale(sh, sw, th, tw), ci.scale_denom = 8;
  jpeg_calc_output_dimensions(&ci);
  if (image_check_size(path, ci.output_height, ci.output_width, th > 0, IMAGE_MAX_PIXELS) != LAM_OK)
    refused = 1, longjmp(e.jb, 1);
  jpeg_start_decompress(&ci);
  if (image_alloc(path, (int)ci.output_height, (int)ci.output_width, c, out) != LAM_OK) refused = 1, longjmp(e.jb, 1);
  while (ci.output_scanline < ci.output_height) {
    JSAMPROW row = out->px + (size_t)ci.output_scanline * ci.output_width * c;
    jpeg_read_scanlines(&ci, &row, 1);
  }
  jpeg_finish_decompress(&ci);
  jpeg_destroy_decompress(&ci);
  return LAM_OK;
}
#endif

lam_status image_decode(const char *path, const uint8_t *buf, size_t len, data_image *out) {
  return image_decode_fit(path, buf, len, 0, 0, out);
}

lam_status image_decode_fit(const char *path, const uint8_t *buf, size_t len, int th, int tw, data_image *out) {
  memset(out, 0, sizeof *out);
  if (is_png(buf, len)) {
#ifdef LAMINA_WITH_PNG
    return read_png(path, buf, len, th > 0, out);
#else
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "image file '%s' is a PNG, and this lamina was built without libpng: install "
                    "libpng-dev (make deps does) and build again", path);
#endif
  }
  if (is_jpeg(buf, len)) {
#ifdef LAMINA_WITH_JPEG
    return read_jpeg(path, buf, len, th, tw, out);
#else
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "image file '%s' is a JPEG, and this lamina was built without libjpeg: install "
                    "libjpeg62-turbo-dev (make deps does) and build again", path);
#endif
  }
  return LAM_FAIL(LAM_ERR_IO, "image file '%s': %s", path,
                  len == 0 ? "the file is empty" : "neither PNG nor JPEG (its first bytes are neither format's)");
}

lam_status image_decode_mask(const char *path, const uint8_t *buf, size_t len, int fit, data_image *out) {
  memset(out, 0, sizeof *out);
  if (is_png(buf, len)) {
#ifdef LAMINA_WITH_PNG
    return read_png_mask(path, buf, len, fit, out);
#else
    (void)fit;
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "mask file '%s' is a PNG, and this lamina was built without libpng: install "
                    "libpng-dev (make deps does) and build again", path);
#endif
  }
  return LAM_FAIL(LAM_ERR_IO, "mask file '%s': %s; a mask must be a PNG (palette or 8-bit grey: a JPEG's compression "
                  "would blur the classes)", path, len == 0 ? "the file is empty" : is_jpeg(buf, len) ? "a JPEG" :
                  "not a PNG (its first bytes are not the PNG signature)");
}

lam_status image_read(const char *path, data_image *out) { return image_read_fit(path, 0, 0, out); }

lam_status image_read_fit(const char *path, int th, int tw, data_image *out) {
  memset(out, 0, sizeof *out);
  uint8_t *buf;
  size_t len;
  LAM_TRY(image_file_bytes(path, &buf, &len));
  lam_status s = image_decode_fit(path, buf, len, th, tw, out);
  free(buf);
  return s;
}

lam_status image_to_channels(data_image *im, int c) {
  if (im->c == c) return LAM_OK;
  const size_t P = (size_t)im->h * im->w;
  uint8_t *t = malloc(P * c);
  if (!t) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory to convert an image of %dx%d", im->w, im->h);
  if (c == 1)
    for (size_t p = 0; p < P; p++) t[p] = image_luma(im->px + 3 * p);
  else
    for (size_t p = 0; p < P; p++) t[3 * p] = t[3 * p + 1] = t[3 * p + 2] = im->px[p];
  free(im->px);
  im->px = t, im->c = c;
  return LAM_OK;
}

void image_planar(const uint8_t *hwc, int h, int w, int c, uint8_t *chw) {
  const size_t P = (size_t)h * w;
  if (c == 1) {
    memcpy(chw, hwc, P);
    return;
  }
  for (size_t p = 0; p < P; p++)
    for (int k = 0; k < c; k++) chw[(size_t)k * P + p] = hwc[p * c + k];
}

void image_fit(const data_image *im, int H, int W, uint8_t *out) {
  if (im->h == H && im->w == W) {
    memcpy(out, im->px, (size_t)H * W * im->c);
    return;
  }
  double scale, oy, ox;
  fit_geometry(im->h, im->w, H, W, &scale, &oy, &ox);
  /* fit_sample's taps (or spans) per column, made once: each depends on its axis alone (a per-pixel fit_sample
   * made them again for every pixel, most of a streamed batch's time) */
  int *col = malloc((size_t)W * 2 * sizeof *col);
  double *wt = malloc((size_t)W * sizeof *wt);
  const int c = im->c;
  if (!col || !wt) { /* no memory for the tables: the same values, pixel by pixel */
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++)
        for (int q = 0; q < c; q++)
          out[((size_t)y * W + x) * c + q] = fit_sample(im->px, im->h, im->w, c, scale, y + oy, x + ox, q);
    free(col), free(wt);
    return;
  }
  const int grow = scale >= 1.0;
  for (int x = 0; x < W; x++) {
    if (grow) fit_taps(x + ox, scale, im->w, &col[2 * x], &col[2 * x + 1], &wt[x]);
    else fit_span(x + ox, scale, im->w, &col[2 * x], &col[2 * x + 1]);
  }
  /* Shrunk by at most 2 a side (a footprint of 1 or 2 pixels each way: 320 to 256, 500 to 256): fit_mean's sum of
   * at most four pixels and its rounded division by 1, 2 or 4, as a shift. */
  int two = !grow;
  for (int x = 0; two && x < W; x++) two = col[2 * x + 1] - col[2 * x] <= 2;
  for (int y = 0; y < H; y++) {
    int y0, y1;
    double ay = 0;
    if (grow) fit_taps(y + oy, scale, im->h, &y0, &y1, &ay);
    else fit_span(y + oy, scale, im->h, &y0, &y1);
    uint8_t *row = out + (size_t)y * W * c;
    if (two && y1 - y0 <= 2) {
      const uint8_t *r0 = im->px + (size_t)y0 * im->w * c, *r1 = y1 - y0 == 2 ? r0 + (size_t)im->w * c : NULL;
      for (int x = 0; x < W; x++) {
        const uint8_t *p0 = r0 + (size_t)col[2 * x] * c;
        const int wide = col[2 * x + 1] - col[2 * x] == 2, shift = wide + (r1 != NULL);
        for (int q = 0; q < c; q++) {
          unsigned v = p0[q] + (wide ? p0[c + q] : 0u);
          if (r1) v += r1[(size_t)col[2 * x] * c + q] + (wide ? r1[(size_t)col[2 * x] * c + c + q] : 0u);
          row[(size_t)x * c + q] = (uint8_t)((v + ((1u << shift) >> 1)) >> shift);
        }
      }
      continue;
    }
    for (int x = 0; x < W; x++)
      for (int q = 0; q < c; q++)
        row[(size_t)x * c + q] = grow ? fit_bilinear(im->px, im->w, c, y0, y1, ay, col[2 * x], col[2 * x + 1], wt[x], q)
                                      : fit_mean(im->px, im->w, c, y0, y1, col[2 * x], col[2 * x + 1], q);
  }
  free(col), free(wt);
}
void image_fit_nearest(const data_image *im, int H, int W, uint8_t *out) {
  if (im->h == H && im->w == W) {
    memcpy(out, im->px, (size_t)H * W);
    return;
  }
  double scale, oy, ox;
  fit_geometry(im->h, im->w, H, W, &scale, &oy, &ox);
  int *col = malloc((size_t)W * sizeof *col); /* each column's source, made once */
  for (int x = 0; col && x < W; x++) col[x] = fit_nearest(x + ox, scale, im->w);
  for (int y = 0; y < H; y++) {
    const uint8_t *src = im->px + (size_t)fit_nearest(y + oy, scale, im->h) * im->w;
    for (int x = 0; x < W; x++) out[(size_t)y * W + x] = src[col ? col[x] : fit_nearest(x + ox, scale, im->w)];
  }
  free(col);
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
  LAM_TRY(image_read_fit(path, h, w, &im));
  lam_status s = image_to_channels(&im, c); /* first, as torchvision converts before it resizes */
  uint8_t *fit = s == LAM_OK ? malloc((size_t)h * w * c) : NULL;
  if (s == LAM_OK && !fit) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_image_load: no host memory");
  if (s == LAM_OK) {
    image_fit(&im, h, w, fit);
    const size_t P = (size_t)h * w; /* (h, w, c) to (c, h, w) */
    for (size_t p = 0; p < P; p++)
      for (int q = 0; q < c; q++) out[(size_t)q * P + p] = fit[p * c + q];
  }
  free(fit);
  free(im.px);
  return s;
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
