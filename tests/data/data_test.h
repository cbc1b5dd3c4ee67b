/* data_test.h — what the data tests share (tests/test_data.c runs them; the files of tests/data/ hold them by family):
 * the scratch folder and the small set written into it, the file writers, the checks, and each test's name. */
#ifndef LAMINA_TESTS_DATA_TEST_H
#define LAMINA_TESTS_DATA_TEST_H

#define _XOPEN_SOURCE 700 /* nftw, mkdtemp, truncate, setenv: before any system header */
#include "../testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "../../src/data/data.h"
#include "../../src/data/fit.h" /* image_read, image_encode, image_fit: the image files' own checks */
#ifdef LAMINA_TEST_JPEG
#include <stdio.h>
#include <jpeglib.h> /* progressive JPEGs, made here as decompression bombs */
#endif

extern char g_dir[64]; /* this run's mkdtemp folder */

/* A small set whose sides differ (rows 5, cols 3), so a swapped h/w shows. */
enum { N = 7, H = 5, W = 3, PIX = N * H * W };
extern uint8_t g_pix[PIX], g_lab[N];

static inline const char *path_of(const char *name) {
  static char buf[8][256]; /* a few live at once: images, labels, a folder */
  static int next;
  char *p = buf[next++ % 8];
  snprintf(p, 256, "%s/%s", g_dir, name);
  return p;
}

static inline void write_bytes(const char *path, int gz, const void *p, size_t n) {
  if (gz) {
    gzFile f = gzopen(path, "wb");
    if (!f) fail_msg("gzopen(%s) for writing failed", path);
    if (n && gzwrite(f, p, (unsigned)n) != (int)n) fail_msg("gzwrite(%s) failed", path);
    if (gzclose(f) != Z_OK) fail_msg("gzclose(%s) failed", path);
  } else {
    FILE *f = fopen(path, "wb");
    if (!f) fail_msg("fopen(%s) for writing failed", path);
    if (n && fwrite(p, 1, n, f) != n) fail_msg("fwrite(%s) failed", path);
    if (fclose(f) != 0) fail_msg("fclose(%s) failed", path);
  }
}

/* Writes an IDX file: the big-endian header (magic, ndims dimensions) then `bytes` of payload. */
static inline void write_idx(const char *path, int gz, uint32_t magic, int ndims, const uint32_t *dims, const uint8_t *payload,
                      size_t bytes) {
  size_t head = 4 + 4 * (size_t)ndims;
  uint8_t *buf = malloc(head + bytes + 1);
  assert_non_null(buf);
  uint32_t words[4] = {magic, dims[0], ndims > 1 ? dims[1] : 0, ndims > 2 ? dims[2] : 0};
  for (int i = 0; i <= ndims; i++)
    for (int b = 0; b < 4; b++) buf[4 * i + b] = (uint8_t)(words[i] >> (24 - 8 * b));
  if (bytes) memcpy(buf + head, payload, bytes);
  write_bytes(path, gz, buf, head + bytes);
  free(buf);
}

static inline void write_images(const char *path, int gz, uint32_t n, uint32_t h, uint32_t w, const uint8_t *pix,
                         size_t bytes) {
  uint32_t dims[3] = {n, h, w};
  write_idx(path, gz, 0x00000803, 3, dims, pix, bytes);
}

static inline void write_labels(const char *path, int gz, uint32_t n, const uint8_t *lab, size_t bytes) {
  uint32_t dims[1] = {n};
  write_idx(path, gz, 0x00000801, 1, dims, lab, bytes);
}

/* The good small set, under the given names. */
static inline void write_good(const char *images, int images_gz, const char *labels, int labels_gz) {
  write_images(images, images_gz, N, H, W, g_pix, PIX);
  write_labels(labels, labels_gz, N, g_lab, N);
}

static inline long file_size(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) fail_msg("stat(%s) failed", path);
  return (long)st.st_size;
}

static inline void assert_set(const char *what, const lam_dataset *d, size_t n, int h, int w, const uint8_t *pix,
                       const uint8_t *lab) {
  if (!d) fail_msg("%s: no dataset", what);
  if (d->n != n || d->h != h || d->w != w || d->classes != 10)
    fail_msg("%s: got n=%zu h=%d w=%d classes=%d, want %zu %d %d 10", what, d->n, d->h, d->w, d->classes, n, h, w);
  for (size_t i = 0; i < n * (size_t)h * (size_t)w; i++)
    if (d->images[i] != pix[i]) fail_msg("%s: pixel %zu is %u, want %u", what, i, d->images[i], pix[i]);
  for (size_t i = 0; i < n; i++)
    if (d->labels[i] != lab[i]) fail_msg("%s: label %zu is %u, want %u", what, i, d->labels[i], lab[i]);
}

/* A failed call: the status, *out back to NULL, and a message holding every word of the
 * NULL-terminated list (the file name and the specific problem). */
static inline void expect_fail(const char *what, lam_status got, lam_status want, const lam_dataset *d, ...) {
  const char *m = lam_last_error();
  if (got != want)
    fail_msg("%s: returned %s, want %s; last error: %s", what, lam_status_str(got), lam_status_str(want), m);
  if (d) fail_msg("%s: failed but *out is not NULL", what);
  print_message("%s: %s\n", what, m);
  va_list ap;
  va_start(ap, d);
  for (const char *word; (word = va_arg(ap, const char *)) != NULL;)
    if (!strstr(m, word)) fail_msg("%s: message does not mention '%s': \"%s\"", what, word, m);
  va_end(ap);
}

/* Poison for *out: a failing call must overwrite it with NULL. The call is made before
 * expect_fail, never inside its argument list, where d could be read before the call writes it. */
extern lam_dataset g_poison;
#define POISONED (&g_poison)

/* Loads the two files and expects failure with `want`; the words follow, NULL-terminated. */
#define EXPECT_LOAD_FAIL(what, images, labels, classes, want, ...)                  \
  do {                                                                              \
    lam_dataset *d_ = POISONED;                                                     \
    lam_status s_ = lam_dataset_load_idx((images), (labels), (classes), &d_);       \
    expect_fail((what), s_, (want), d_, __VA_ARGS__, (const char *)NULL);           \
  } while (0)

/* ---- helpers of several families ---- */

/* Writes an MNIST-layout folder: training set (n_train) gzip, test set (n_test) plain. */
static inline void write_layout(const char *dir, uint32_t n_train, uint32_t n_test, const uint8_t *pix, const uint8_t *lab) {
  char p[1024];
  if (mkdir(dir, 0700) != 0) fail_msg("mkdir(%s) failed", dir);
  snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
  write_images(p, 1, n_train, H, W, pix, (size_t)n_train * H * W);
  snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", dir);
  write_labels(p, 1, n_train, lab, n_train);
  snprintf(p, sizeof p, "%s/t10k-images-idx3-ubyte", dir);
  write_images(p, 0, n_test, H, W, pix + (size_t)n_train * H * W, (size_t)n_test * H * W);
  snprintf(p, sizeof p, "%s/t10k-labels-idx1-ubyte", dir);
  write_labels(p, 0, n_test, lab + n_train, n_test);
}

/* Restores LAMINA_DATA_DIR as it was before the test. */
static inline void restore_env(const char *saved) {
  if (saved)
    setenv("LAMINA_DATA_DIR", saved, 1);
  else
    unsetenv("LAMINA_DATA_DIR");
}

/* Writes an IDX file of any rank up to 4 (write_idx above stops at 3). */
static inline void write_idx_any(const char *path, int gz, uint32_t magic, int ndims, const uint32_t *dims,
                          const void *payload, size_t bytes) {
  size_t head = 4 + 4 * (size_t)ndims;
  uint8_t *buf = malloc(head + bytes + 1);
  assert_non_null(buf);
  for (int i = 0; i <= ndims; i++) {
    uint32_t v = i == 0 ? magic : dims[i - 1];
    for (int b = 0; b < 4; b++) buf[4 * i + b] = (uint8_t)(v >> (24 - 8 * b));
  }
  if (bytes) memcpy(buf + head, payload, bytes);
  write_bytes(path, gz, buf, head + bytes);
  free(buf);
}

/* Writes a .npy file as numpy.save does: magic, version major.0, the header's length (2 bytes in 1.0,
 * 4 in 2.0 and 3.0), the header text padded with spaces and a newline to a multiple of 64 bytes, then
 * `bytes` of payload. The header is given as text, so that tests can write malformed ones. */
static inline void write_npy_raw(const char *path, int gz, int major, const char *header, const void *payload, size_t bytes) {
  const size_t prefix = major == 1 ? 10 : 12, hl = strlen(header);
  const size_t total = (prefix + hl + 1 + 63) / 64 * 64, len = total - prefix;
  uint8_t *buf = malloc(total + bytes + 1);
  assert_non_null(buf);
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (uint8_t)major;
  buf[7] = 0;
  for (size_t b = 0; b < prefix - 8; b++) buf[8 + b] = (uint8_t)(len >> (8 * b));
  memcpy(buf + prefix, header, hl);
  memset(buf + prefix + hl, ' ', len - hl - 1);
  buf[total - 1] = '\n';
  if (bytes) memcpy(buf + total, payload, bytes);
  write_bytes(path, gz, buf, total + bytes);
  free(buf);
}

/* Writes a well-formed .npy file of the given dtype and shape. */
static inline void write_npy(const char *path, int gz, int major, const char *descr, int rank, const uint64_t *shape,
                      const void *payload, size_t bytes) {
  char shp[128], hdr[256];
  size_t n = (size_t)snprintf(shp, sizeof shp, "(");
  for (int d = 0; d < rank; d++) n += (size_t)snprintf(shp + n, sizeof shp - n, "%s%llu", d ? ", " : "",
                                                       (unsigned long long)shape[d]);
  snprintf(shp + n, sizeof shp - n, rank == 1 ? ",)" : ")");
  snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shp);
  write_npy_raw(path, gz, major, hdr, payload, bytes);
}

/* A label file of n one-byte labels as .npy ('|u1'). */
static inline void write_npy_labels(const char *path, int gz, uint64_t n, const uint8_t *lab) {
  write_npy(path, gz, 1, "|u1", 1, &n, lab, (size_t)n);
}

/* Encodes v as a size-byte integer in the given byte order. */
static inline void put_int(uint8_t *p, int size, int big, uint64_t v) {
  for (int b = 0; b < size; b++) p[big ? size - 1 - b : b] = (uint8_t)(v >> (8 * b));
}

/* (n, h, w, c) -> (n, c, h, w): the reference for the loader's transpose. */
static inline void ref_nchw(const uint8_t *src, int n, int h, int w, int c, uint8_t *dst) {
  for (int i = 0; i < n; i++)
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++)
        for (int ch = 0; ch < c; ch++)
          dst[(((size_t)i * c + ch) * h + y) * w + x] = src[(((size_t)i * h + y) * w + x) * c + ch];
}

static inline void fill_random(uint8_t *p, size_t n, uint64_t case_id, unsigned mod) {
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(case_id));
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(mod ? tu_next(&r) % mod : tu_next(&r) >> 56);
}

/* Every field, every pixel (NCHW) and every label of a loaded set. */
static inline void assert_set_full(const char *what, const lam_dataset *d, size_t n, int c, int h, int w, int classes,
                            const uint8_t *pix, int label_h, int label_w, const uint8_t *lab) {
  if (!d) fail_msg("%s: no dataset", what);
  if (d->n != n || d->c != c || d->h != h || d->w != w || d->classes != classes || d->label_h != label_h ||
      d->label_w != label_w)
    fail_msg("%s: got n=%zu c=%d h=%d w=%d classes=%d labels %dx%d, want %zu %d %d %d %d %dx%d", what, d->n, d->c, d->h,
             d->w, d->classes, d->label_h, d->label_w, n, c, h, w, classes, label_h, label_w);
  const size_t hw = (size_t)h * (size_t)w;
  for (size_t i = 0; i < n * (size_t)c * hw; i++)
    if (d->images[i] != pix[i])
      fail_msg("%s: pixel (image %zu, channel %zu, row %zu, col %zu) is %u, want %u", what, i / (c * hw),
               i / hw % (size_t)c, i % hw / (size_t)w, i % (size_t)w, d->images[i], pix[i]);
  for (size_t i = 0; i < n * (size_t)label_h * (size_t)label_w; i++)
    if (d->labels[i] != lab[i]) fail_msg("%s: label %zu is %u, want %u", what, i, d->labels[i], lab[i]);
}

static inline double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Facts of the published set (checked with Python's gzip module): sizes, the first label, the
 * per-class counts and the sum of all pixels, which catches a misplaced or missing byte anywhere. */
static inline void check_fashion(int train, size_t n, uint8_t first_label, unsigned long long pixel_sum) {
  lam_dataset *d = NULL;
  double t0 = now_s();
  TU_OK(lam_dataset_load("fashion-mnist", train, &d));
  double t = now_s() - t0;
  print_message("fashion-mnist %s: %zu images of %dx%d loaded in %.3f s\n", train ? "train" : "test", d->n, d->h,
                d->w, t);
  assert_int_equal(d->n, n);
  assert_int_equal(d->h, 28);
  assert_int_equal(d->w, 28);
  assert_int_equal(d->classes, 10);
  assert_int_equal(d->labels[0], first_label);
  size_t hist[10] = {0};
  for (size_t i = 0; i < d->n; i++) {
    assert_true(d->labels[i] < 10);
    hist[d->labels[i]]++;
  }
  for (int c = 0; c < 10; c++)
    if (hist[c] != n / 10) fail_msg("class %d has %zu images, want %zu", c, hist[c], n / 10);
  unsigned long long sum = 0;
  for (size_t i = 0; i < d->n * 28 * 28; i++) sum += d->images[i];
  if (sum != pixel_sum) fail_msg("pixel sum %llu, want %llu", sum, pixel_sum);
  lam_dataset_free(d);
}

static inline int have_images(void) { return (lam_image_formats() & 3) == 3; }

/* Writes px (h, w, c) encoded as kind to path. */
static inline void write_image(const char *path, int kind, const uint8_t *px, int h, int w, int c) {
  uint8_t *buf;
  size_t len;
  TU_OK(image_encode(kind, px, h, w, c, &buf, &len));
  write_bytes(path, 0, buf, len);
  free(buf);
}

/* Reads the whole file at path (a reference from tests/ref/png) into *buf; its length. */
static inline size_t read_ref(const char *path, uint8_t **buf) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s (tests/ref/png/make_png_ref.py writes it)", path);
  *buf = malloc(1 << 16);
  size_t n = fread(*buf, 1, 1 << 16, f);
  fclose(f);
  return n;
}

#ifdef LAMINA_TEST_JPEG
/* A JPEG of h x w x c (1 or 3, 4:4:4) of a smooth picture, progressive by libjpeg's own script, or by
 * script (n scans) where given; *len bytes, malloc'd. */
static inline uint8_t *progressive_jpeg(int h, int w, int c, const jpeg_scan_info *script, int n, size_t *len) {
  struct jpeg_compress_struct ci;
  struct jpeg_error_mgr err;
  ci.err = jpeg_std_error(&err);
  jpeg_create_compress(&ci);
  unsigned char *mem = NULL;
  unsigned long size = 0;
  jpeg_mem_dest(&ci, &mem, &size);
  ci.image_width = (JDIMENSION)w, ci.image_height = (JDIMENSION)h, ci.input_components = c;
  ci.in_color_space = c == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&ci);
  for (int k = 0; k < ci.num_components; k++) ci.comp_info[k].h_samp_factor = ci.comp_info[k].v_samp_factor = 1;
  if (script) ci.scan_info = script, ci.num_scans = n;
  else jpeg_simple_progression(&ci);
  jpeg_start_compress(&ci, TRUE);
  uint8_t *row = malloc((size_t)w * c);
  while (ci.next_scanline < ci.image_height) {
    for (int x = 0; x < w * c; x++) row[x] = (uint8_t)(60 + x % 97 + ci.next_scanline % 50);
    JSAMPROW r = row;
    jpeg_write_scanlines(&ci, &r, 1);
  }
  jpeg_finish_compress(&ci);
  jpeg_destroy_compress(&ci);
  free(row);
  *len = size;
  return mem;
}

/* Sets the size in a JPEG's frame header (SOF0..SOF2) to h x w: what a bomb's few bytes claim. */
static inline void jpeg_claim(uint8_t *b, size_t n, int h, int w) {
  for (size_t i = 2; i + 8 < n; i++)
    if (b[i] == 0xff && (b[i + 1] == 0xc0 || b[i + 1] == 0xc1 || b[i + 1] == 0xc2)) {
      b[i + 5] = (uint8_t)(h >> 8), b[i + 6] = (uint8_t)h, b[i + 7] = (uint8_t)(w >> 8), b[i + 8] = (uint8_t)w;
      return;
    }
  fail_msg("no frame header in the JPEG written");
}

/* The refusal of one bomb: LAM_ERR_IO naming the file and each of words, within seconds (they took minutes
 * and gigabytes: 8.4 GB and 50 s for the first). th x tw: decoded to be fitted to it (0: as it is). */
static inline void expect_bomb(const char *what, const uint8_t *b, size_t n, int th, int tw, const char *w1, const char *w2) {
  const char *path = path_of("bomb.jpg");
  write_bytes(path, 0, b, n);
  data_image im;
  const double t0 = now_s();
  lam_status s = image_read_fit(path, th, tw, &im);
  const double took = now_s() - t0;
  print_message("%s (%zu bytes, fit %dx%d): %.2f s: %s\n", what, n, th, tw, took, lam_last_error());
  if (s != LAM_ERR_IO || im.px) fail_msg("%s: status %d, want LAM_ERR_IO and no pixels", what, s);
  if (!strstr(lam_last_error(), path) || !strstr(lam_last_error(), w1) || (w2 && !strstr(lam_last_error(), w2)))
    fail_msg("%s: the message does not name the file, '%s'%s%s: %s", what, w1, w2 ? " and " : "", w2 ? w2 : "",
             lam_last_error());
  if (took > 10) fail_msg("%s: %.1f s to refuse it", what, took);
}
#endif

/* A small MNIST-like source: 30 grey 6x5 images of 3 classes. */
static inline lam_dataset *tiny_source(void) {
  static uint8_t px[30 * 30], lab[30];
  for (int i = 0; i < 30 * 30; i++) px[i] = (uint8_t)(i * 91 % 256);
  for (int i = 0; i < 30; i++) lab[i] = (uint8_t)(i * 7 % 3);
  static lam_dataset d;
  d = (lam_dataset){.n = 30, .h = 6, .w = 5, .classes = 3, .images = px, .labels = lab, .c = 1};
  return &d;
}

/* Makes dir/rel (folders on the way too). */
static inline void mkdirs(const char *dir, const char *rel) {
  char p[512];
  mkdir(dir, 0777);
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  for (char *c = p + strlen(dir) + 1; *c; c++)
    if (*c == '/') {
      *c = 0;
      mkdir(p, 0777);
      *c = '/';
    }
  mkdir(p, 0777);
}

/* Writes a 6x5 grey PNG of value v at dir/rel. */
static inline void grey_png(const char *dir, const char *rel, uint8_t v) {
  uint8_t px[30];
  memset(px, v, sizeof px);
  char f[512];
  snprintf(f, sizeof f, "%s/%s", dir, rel);
  write_image(f, IMAGE_PNG, px, 6, 5, 1);
}

/* Smooth 32x32 grey sources (JPEG's own kind of picture) for the decoders' comparison. */
static inline lam_dataset *smooth_source(void) {
  enum { N = 24, S = 32 };
  static uint8_t px[N * S * S], lab[N];
  for (int i = 0; i < N; i++) {
    lab[i] = (uint8_t)(i % 3);
    for (int y = 0; y < S; y++)
      for (int x = 0; x < S; x++) px[(i * S + y) * S + x] = (uint8_t)(60 + 2 * x + (3 + i % 5) * y + 7 * i % 40);
  }
  static lam_dataset d;
  d = (lam_dataset){.n = N, .h = S, .w = S, .classes = 3, .images = px, .labels = lab, .c = 1};
  return &d;
}

/* ---- the tests, by file ---- */
void test_good_plain(void **state);
void test_good_gzip(void **state);
void test_good_gzip_large(void **state);
void test_classes_range(void **state);
void test_load_folder(void **state);
void test_load_folder_missing(void **state);
void test_load_fashion_env(void **state);
void test_wrong_magic(void **state);
void test_truncated(void **state);
void test_trailing(void **state);
void test_bad_dims(void **state);
void test_count_mismatch(void **state);
void test_bad_label(void **state);
void test_bad_classes(void **state);
void test_missing_file(void **state);
void test_corrupt_gzip(void **state);
void test_null_args(void **state);
void test_idx_rank4(void **state);
void test_idx_clips(void **state);
void test_npy_layouts(void **state);
void test_npy_label_dtypes(void **state);
void test_per_pixel(void **state);
void test_infer_classes(void **state);
void test_npy_folder(void **state);
void test_channel_stats(void **state);
void test_npy_bad(void **state);
void test_idx_write(void **state);
void test_data_segment(void **state);
void test_data_clips(void **state);
void test_image_roundtrip(void **state);
void test_image_bad(void **state);
void test_png_like_pil(void **state);
void test_image_bombs(void **state);
void test_image_fit(void **state);
void test_image_fit_tables(void **state);
void test_image_folder(void **state);
void test_mask_folder(void **state);
void test_image_folder_errors(void **state);
void test_image_folder_mixed(void **state);
void test_image_folder_layouts(void **state);
void test_image_folder_large(void **state);
void test_image_folder_decoders(void **state);
void test_fashion_mnist_real(void **state);

#endif
