/* test_data.c — the MNIST-format reader (src/data/idx.c): small IDX files written here, plain and
 * gzip, into a fresh mkdtemp folder, loaded back and compared pixel by pixel and label by label;
 * lam_dataset_load on a folder in the MNIST layout and on "fashion-mnist" through LAMINA_DATA_DIR;
 * and every bad file the reader must refuse — wrong magic, truncated, trailing bytes, zero or huge
 * dimensions, image/label count mismatch, a label >= classes, a damaged gzip stream, missing files,
 * NULL arguments — each with the right status, *out left NULL, and a message that names the file
 * and the problem. Then images of any channel count and NumPy files: IDX rank 4 and .npy (versions
 * 1.0, 2.0, 3.0; plain and gzip; (n,h,w), (n,h,w,c) and (n,c,h,w)) checked pixel by pixel through the
 * NHWC -> NCHW transpose; labels of every integer dtype; per-pixel labels with 255 = ignore; classes
 * inferred, given, and set with lam_dataset_set_classes; .npy folders (classes from both parts, two
 * files for one role); per-channel statistics against float64; and every malformed .npy header,
 * dtype, shape and length. Last, the real Fashion-MNIST when Debian's dataset-fashion-mnist is
 * installed (skipped when it is not).
 */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp, truncate, setenv: before any system header */
#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "../src/data/data.h"
#include "../src/data/fit.h" /* image_read, image_encode, image_fit: the image files' own checks */
#ifdef LAMINA_TEST_JPEG
#include <stdio.h>
#include <jpeglib.h> /* progressive JPEGs, made here as decompression bombs */
#endif

static char g_dir[64]; /* this run's mkdtemp folder */

/* A small set whose sides differ (rows 5, cols 3), so a swapped h/w shows. */
enum { N = 7, H = 5, W = 3, PIX = N * H * W };
static uint8_t g_pix[PIX], g_lab[N];

/* ---- writing files --------------------------------------------------------------------------- */

static const char *path_of(const char *name) {
  static char buf[8][256]; /* a few live at once: images, labels, a folder */
  static int next;
  char *p = buf[next++ % 8];
  snprintf(p, 256, "%s/%s", g_dir, name);
  return p;
}

static void write_bytes(const char *path, int gz, const void *p, size_t n) {
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
static void write_idx(const char *path, int gz, uint32_t magic, int ndims, const uint32_t *dims, const uint8_t *payload,
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

static void write_images(const char *path, int gz, uint32_t n, uint32_t h, uint32_t w, const uint8_t *pix,
                         size_t bytes) {
  uint32_t dims[3] = {n, h, w};
  write_idx(path, gz, 0x00000803, 3, dims, pix, bytes);
}

static void write_labels(const char *path, int gz, uint32_t n, const uint8_t *lab, size_t bytes) {
  uint32_t dims[1] = {n};
  write_idx(path, gz, 0x00000801, 1, dims, lab, bytes);
}

/* The good small set, under the given names. */
static void write_good(const char *images, int images_gz, const char *labels, int labels_gz) {
  write_images(images, images_gz, N, H, W, g_pix, PIX);
  write_labels(labels, labels_gz, N, g_lab, N);
}

static long file_size(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) fail_msg("stat(%s) failed", path);
  return (long)st.st_size;
}

/* ---- checking -------------------------------------------------------------------------------- */

static void assert_set(const char *what, const lam_dataset *d, size_t n, int h, int w, const uint8_t *pix,
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
static void expect_fail(const char *what, lam_status got, lam_status want, const lam_dataset *d, ...) {
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
static lam_dataset g_poison;
#define POISONED (&g_poison)

/* Loads the two files and expects failure with `want`; the words follow, NULL-terminated. */
#define EXPECT_LOAD_FAIL(what, images, labels, classes, want, ...)                  \
  do {                                                                              \
    lam_dataset *d_ = POISONED;                                                     \
    lam_status s_ = lam_dataset_load_idx((images), (labels), (classes), &d_);       \
    expect_fail((what), s_, (want), d_, __VA_ARGS__, (const char *)NULL);           \
  } while (0)

/* ---- fixture --------------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static int setup_dir(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/lamina_test_data_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return -1;
  }
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(0xda7a));
  for (int i = 0; i < PIX; i++) g_pix[i] = (uint8_t)(tu_next(&r) >> 56);
  for (int i = 0; i < N; i++) g_lab[i] = (uint8_t)(tu_next(&r) % 10);
  g_lab[0] = 9; /* the largest valid label is in the set */
  g_lab[1] = 0;
  return 0;
}

static int teardown_dir(void **state) {
  (void)state;
  return nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- good files ------------------------------------------------------------------------------ */

static void test_good_plain(void **state) {
  (void)state;
  const char *im = path_of("good-images"), *lb = path_of("good-labels");
  write_good(im, 0, lb, 0);
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_idx(im, lb, 10, &d));
  assert_set("plain", d, N, H, W, g_pix, g_lab);
  lam_dataset_free(d);
}

static void test_good_gzip(void **state) {
  (void)state;
  const char *im = path_of("good-images.gz"), *lb = path_of("good-labels.gz");
  write_good(im, 1, lb, 1);
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_idx(im, lb, 10, &d));
  assert_set("gzip", d, N, H, W, g_pix, g_lab);
  lam_dataset_free(d);

  /* Mixed, and detected by content, not by name: gzip under a plain name and the reverse. */
  const char *im2 = path_of("mixed-images"), *lb2 = path_of("mixed-labels.gz");
  write_good(im2, 1, lb2, 0);
  TU_OK(lam_dataset_load_idx(im2, lb2, 10, &d));
  assert_set("gzip images named plain, plain labels named .gz", d, N, H, W, g_pix, g_lab);
  lam_dataset_free(d);
}

/* A set large enough that the payload spans many of zlib's buffers and reads. */
static void test_good_gzip_large(void **state) {
  (void)state;
  enum { BN = 3000, BH = 28, BW = 28 };
  uint8_t *pix = malloc((size_t)BN * BH * BW), *lab = malloc(BN);
  assert_true(pix && lab);
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(0xb16));
  for (size_t i = 0; i < (size_t)BN * BH * BW; i++) pix[i] = (uint8_t)((tu_next(&r) >> 60) * 17 * (i % 3 == 0));
  for (int i = 0; i < BN; i++) lab[i] = (uint8_t)(tu_next(&r) % 10);
  const char *im = path_of("large-images.gz"), *lb = path_of("large-labels.gz");
  write_images(im, 1, BN, BH, BW, pix, (size_t)BN * BH * BW);
  write_labels(lb, 1, BN, lab, BN);
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_idx(im, lb, 10, &d));
  assert_set("3000 gzip images", d, BN, BH, BW, pix, lab);
  lam_dataset_free(d);
  free(pix);
  free(lab);
}

/* classes other than 10: 256 takes every byte; a smaller count takes labels below it. */
static void test_classes_range(void **state) {
  (void)state;
  uint8_t lab[N];
  for (int i = 0; i < N; i++) lab[i] = (uint8_t)(250 + i % 6);
  const char *im = path_of("c256-images"), *lb = path_of("c256-labels");
  write_images(im, 0, N, H, W, g_pix, PIX);
  write_labels(lb, 0, N, lab, N);
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_idx(im, lb, 256, &d));
  assert_int_equal(d->classes, 256);
  assert_memory_equal(d->labels, lab, N);
  lam_dataset_free(d);
}

/* ---- lam_dataset_load: folders and the name "fashion-mnist" ---------------------------------- */

/* Writes an MNIST-layout folder: training set (n_train) gzip, test set (n_test) plain. */
static void write_layout(const char *dir, uint32_t n_train, uint32_t n_test, const uint8_t *pix, const uint8_t *lab) {
  char p[512];
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

static void test_load_folder(void **state) {
  (void)state;
  const char *dir = path_of("layout");
  write_layout(dir, 4, 3, g_pix, g_lab);
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load(dir, 1, &d));
  assert_set("folder, training set (.gz)", d, 4, H, W, g_pix, g_lab);
  lam_dataset_free(d);
  TU_OK(lam_dataset_load(dir, 0, &d));
  assert_set("folder, test set (plain)", d, 3, H, W, g_pix + 4 * H * W, g_lab + 4);
  lam_dataset_free(d);
}

static void test_load_folder_missing(void **state) {
  (void)state;
  lam_dataset *d = POISONED;
  const char *none = path_of("no-such-folder");
  lam_status s = lam_dataset_load(none, 1, &d);
  expect_fail("folder that does not exist", s, LAM_ERR_IO, d, none,
              "nor a folder", "No such file", "train-images-idx3-ubyte", "MNIST layout", (const char *)NULL);

  const char *empty = path_of("empty-folder");
  assert_int_equal(mkdir(empty, 0700), 0);
  d = POISONED;
  s = lam_dataset_load(empty, 0, &d);
  expect_fail("empty folder, test set", s, LAM_ERR_IO, d, empty,
              "t10k-images-idx3-ubyte nor t10k-images-idx3-ubyte.gz", (const char *)NULL);

  /* Images there, labels not: the message names the labels, with and without .gz. */
  const char *half = path_of("half-folder");
  assert_int_equal(mkdir(half, 0700), 0);
  char p[512];
  snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", half);
  write_images(p, 0, N, H, W, g_pix, PIX);
  d = POISONED;
  s = lam_dataset_load(half, 1, &d);
  expect_fail("folder without labels", s, LAM_ERR_IO, d, half,
              "train-labels-idx1-ubyte nor train-labels-idx1-ubyte.gz", (const char *)NULL);

  /* A bad file found in a folder: the reader's message, naming that file. */
  snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", half);
  write_labels(p, 1, N - 1, g_lab, N - 1);
  d = POISONED;
  s = lam_dataset_load(half, 1, &d);
  expect_fail("folder with mismatched counts", s, LAM_ERR_IO, d, p, "7 images",
              "6 labels", (const char *)NULL);
}

/* Restores LAMINA_DATA_DIR as it was before the test. */
static void restore_env(const char *saved) {
  if (saved)
    setenv("LAMINA_DATA_DIR", saved, 1);
  else
    unsetenv("LAMINA_DATA_DIR");
}

static void test_load_fashion_env(void **state) {
  (void)state;
  const char *old = getenv("LAMINA_DATA_DIR");
  char *saved = old ? strdup(old) : NULL;

  /* $LAMINA_DATA_DIR/fashion-mnist is where "fashion-mnist" is looked for. */
  const char *root = path_of("data-root");
  assert_int_equal(mkdir(root, 0700), 0);
  char sub[512];
  snprintf(sub, sizeof sub, "%s/fashion-mnist", root);
  write_layout(sub, 5, 2, g_pix, g_lab);
  setenv("LAMINA_DATA_DIR", root, 1);
  lam_dataset *d = NULL;
  lam_status s = lam_dataset_load("fashion-mnist", 0, &d);
  if (s != LAM_OK) {
    restore_env(saved);
    free(saved);
    fail_msg("fashion-mnist from LAMINA_DATA_DIR: %s", lam_last_error());
  }
  assert_set("fashion-mnist from LAMINA_DATA_DIR, test set", d, 2, H, W, g_pix + 5 * H * W, g_lab + 5);
  lam_dataset_free(d);

  /* The training images are removed: the message names the folder, both names, and how to get it. */
  char p[600];
  snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", sub);
  assert_int_equal(remove(p), 0);
  d = POISONED;
  s = lam_dataset_load("fashion-mnist", 1, &d);
  expect_fail("fashion-mnist without training images", s, LAM_ERR_IO, d, sub,
              "train-images-idx3-ubyte nor train-images-idx3-ubyte.gz", "apt-get install dataset-fashion-mnist",
              "LAMINA_DATA_DIR", (const char *)NULL);

  /* LAMINA_DATA_DIR without a fashion-mnist folder. */
  setenv("LAMINA_DATA_DIR", path_of("no-such-root"), 1);
  d = POISONED;
  s = lam_dataset_load("fashion-mnist", 1, &d);
  restore_env(saved);
  free(saved);
  expect_fail("LAMINA_DATA_DIR without fashion-mnist/", s, LAM_ERR_IO, d, "no-such-root/fashion-mnist",
              "train-images-idx3-ubyte", "dataset-fashion-mnist", "LAMINA_DATA_DIR", (const char *)NULL);
}

/* ---- bad files ------------------------------------------------------------------------------- */

static void test_wrong_magic(void **state) {
  (void)state;
  const char *im = path_of("magic-images"), *lb = path_of("magic-labels");
  /* Image and label files swapped. */
  write_good(lb, 0, im, 0);
  EXPECT_LOAD_FAIL("label file given as images", im, lb, 10, LAM_ERR_IO, "image file", im, "magic",
                   "0x00000801", "expected 0x00000803", "swapped");
  write_images(im, 0, N, H, W, g_pix, PIX);
  write_images(lb, 0, N, 1, 1, g_pix, N);
  EXPECT_LOAD_FAIL("image file given as labels", im, lb, 10, LAM_ERR_IO, "label file", lb, "magic",
                   "0x00000803", "expected 0x00000801");

  /* Little-endian header, through gzip. */
  const char *le = path_of("le-images.gz");
  write_images(le, 1, N, H, W, g_pix, PIX);
  uint8_t raw[16] = {0x03, 0x08, 0, 0, N, 0, 0, 0, H, 0, 0, 0, W, 0, 0, 0};
  uint8_t *buf = malloc(16 + PIX);
  assert_non_null(buf);
  memcpy(buf, raw, 16);
  memcpy(buf + 16, g_pix, PIX);
  write_bytes(le, 1, buf, 16 + PIX);
  free(buf);
  write_labels(lb, 0, N, g_lab, N);
  EXPECT_LOAD_FAIL("little-endian magic", le, lb, 10, LAM_ERR_IO, le, "0x03080000", "little-endian");

  /* float32 IDX (type 0x0D). */
  uint32_t dims[3] = {N, H, W};
  write_idx(im, 0, 0x00000D03, 3, dims, g_pix, PIX);
  EXPECT_LOAD_FAIL("float IDX", im, lb, 10, LAM_ERR_IO, im, "0x00000d03", "type 0x0d");

  /* Text, not IDX. */
  write_bytes(im, 0, "hello, world\n", 13);
  EXPECT_LOAD_FAIL("text file", im, lb, 10, LAM_ERR_IO, im, "magic", "not an IDX file");
}

static void test_truncated(void **state) {
  (void)state;
  const char *im = path_of("trunc-images"), *lb = path_of("trunc-labels");
  const char *imz = path_of("trunc-images.gz");
  write_labels(lb, 0, N, g_lab, N);

  /* Plain and gzip: 10 pixels short. 7x5x3 = 105 bytes expected, 95 there. */
  write_images(im, 0, N, H, W, g_pix, PIX - 10);
  EXPECT_LOAD_FAIL("plain, 10 bytes short", im, lb, 10, LAM_ERR_IO, im, "truncated", "7 images of 5x3", "105 bytes",
                   "only 95");
  write_images(imz, 1, N, H, W, g_pix, PIX - 10);
  EXPECT_LOAD_FAIL("gzip, 10 bytes short", imz, lb, 10, LAM_ERR_IO, imz, "truncated", "105 bytes", "only 95");

  /* Labels short. */
  const char *lb2 = path_of("trunc-labels-2");
  write_images(im, 0, N, H, W, g_pix, PIX);
  write_labels(lb2, 0, N, g_lab, N - 2);
  EXPECT_LOAD_FAIL("labels 2 bytes short", im, lb2, 10, LAM_ERR_IO, "label file", lb2, "truncated", "7 bytes",
                   "only 5");

  /* Cut inside the header; and empty. */
  uint8_t head[10] = {0, 0, 8, 3, 0, 0, 0, N, 0, 0};
  write_bytes(im, 0, head, sizeof head);
  EXPECT_LOAD_FAIL("cut inside the header", im, lb, 10, LAM_ERR_IO, im, "truncated", "after 10 bytes",
                   "16-byte IDX header");
  write_bytes(im, 0, "", 0);
  EXPECT_LOAD_FAIL("empty file", im, lb, 10, LAM_ERR_IO, im, "empty");
  write_bytes(imz, 1, "", 0);
  EXPECT_LOAD_FAIL("empty gzip", imz, lb, 10, LAM_ERR_IO, imz, "empty");

  /* A .gz file cut in the middle of its compressed stream: random pixels barely compress, so half
   * the file is about half the data. */
  enum { BN = 400 };
  uint8_t *pix = malloc((size_t)BN * H * W);
  assert_non_null(pix);
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(0xc07));
  for (size_t i = 0; i < (size_t)BN * H * W; i++) pix[i] = (uint8_t)(tu_next(&r) >> 56);
  const char *cut = path_of("cut-images.gz"), *lbn = path_of("cut-labels");
  uint8_t lab[BN] = {0};
  write_labels(lbn, 0, BN, lab, BN);
  write_images(cut, 1, BN, H, W, pix, (size_t)BN * H * W);
  long full = file_size(cut);
  assert_int_equal(truncate(cut, full / 2), 0);
  EXPECT_LOAD_FAIL("gzip cut in half", cut, lbn, 10, LAM_ERR_IO, cut, "truncated", "6000 bytes",
                   "gzip stream is cut off");

  /* Cut just before the end: all the data is there, the checksum and length are not. */
  write_images(cut, 1, BN, H, W, pix, (size_t)BN * H * W);
  assert_int_equal(truncate(cut, full - 6), 0);
  EXPECT_LOAD_FAIL("gzip without its trailer", cut, lbn, 10, LAM_ERR_IO, cut, "cut off");
  free(pix);
}

static void test_trailing(void **state) {
  (void)state;
  uint8_t more[PIX + 5];
  memcpy(more, g_pix, PIX);
  memset(more + PIX, 0xee, 5);
  const char *im = path_of("trail-images"), *imz = path_of("trail-images.gz"), *lb = path_of("trail-labels");
  write_labels(lb, 0, N, g_lab, N);
  write_images(im, 0, N, H, W, more, PIX + 5);
  EXPECT_LOAD_FAIL("plain, 5 trailing bytes", im, lb, 10, LAM_ERR_IO, im, "5 trailing bytes", "7 images of 5x3");
  write_images(imz, 1, N, H, W, more, PIX + 5);
  EXPECT_LOAD_FAIL("gzip, 5 trailing bytes", imz, lb, 10, LAM_ERR_IO, imz, "5 trailing bytes", "105 bytes");

  uint8_t lab[N + 1];
  memcpy(lab, g_lab, N);
  lab[N] = 1;
  const char *lbz = path_of("trail-labels.gz");
  write_images(im, 0, N, H, W, g_pix, PIX);
  write_labels(lbz, 1, N, lab, N + 1);
  EXPECT_LOAD_FAIL("gzip labels, 1 trailing byte", im, lbz, 10, LAM_ERR_IO, "label file", lbz, "1 trailing byte (decompressed)");
}

static void test_bad_dims(void **state) {
  (void)state;
  const char *im = path_of("dims-images"), *lb = path_of("dims-labels");
  write_labels(lb, 0, N, g_lab, N);
  write_images(im, 0, 0, H, W, g_pix, 0);
  EXPECT_LOAD_FAIL("n = 0", im, lb, 10, LAM_ERR_IO, im, "dimension n is 0");
  write_images(im, 0, N, 0, W, g_pix, 0);
  EXPECT_LOAD_FAIL("rows = 0", im, lb, 10, LAM_ERR_IO, im, "dimension rows is 0");
  write_images(im, 1, N, H, 0, g_pix, 0);
  EXPECT_LOAD_FAIL("cols = 0, gzip", im, lb, 10, LAM_ERR_IO, im, "dimension cols is 0");
  write_images(im, 0, N, H, W, g_pix, PIX);
  write_labels(lb, 0, 0, g_lab, 0);
  EXPECT_LOAD_FAIL("labels n = 0", im, lb, 10, LAM_ERR_IO, "label file", lb, "dimension n is 0");

  write_labels(lb, 0, N, g_lab, N);
  write_images(im, 0, N, 5000, W, g_pix, PIX);
  EXPECT_LOAD_FAIL("rows = 5000", im, lb, 10, LAM_ERR_IO, im, "rows is 5000", "4096");
  write_images(im, 0, 200000000u, 1, 1, g_pix, PIX);
  EXPECT_LOAD_FAIL("n = 200M", im, lb, 10, LAM_ERR_IO, im, "n is 200000000", "100000000");
  /* A header claiming 100M 28x28 images in a tiny .gz: refused before any allocation. */
  write_images(im, 1, 100000000u, 28, 28, g_pix, PIX);
  EXPECT_LOAD_FAIL("huge claim in a small gzip", im, lb, 10, LAM_ERR_IO, im, "100000000 images of 28x28",
                   "truncated");
}

static void test_count_mismatch(void **state) {
  (void)state;
  const char *im = path_of("count-images.gz"), *lb = path_of("count-labels.gz");
  write_images(im, 1, N, H, W, g_pix, PIX);
  write_labels(lb, 1, N - 1, g_lab, N - 1);
  EXPECT_LOAD_FAIL("7 images, 6 labels", im, lb, 10, LAM_ERR_IO, im, lb, "has 7 images", "has 6 labels");
}

static void test_bad_label(void **state) {
  (void)state;
  const char *im = path_of("badlab-images"), *lb = path_of("badlab-labels");
  uint8_t lab[N] = {0, 1, 2, 10, 11, 3, 200};
  write_images(im, 0, N, H, W, g_pix, PIX);
  write_labels(lb, 0, N, lab, N);
  EXPECT_LOAD_FAIL("label 10 at index 3", im, lb, 10, LAM_ERR_IO, "label file", lb, "index 3", "is 10",
                   "10 classes");
  /* With 3 classes the first bad one is earlier. */
  uint8_t lab3[N] = {0, 1, 2, 2, 3, 0, 0};
  write_labels(lb, 0, N, lab3, N);
  EXPECT_LOAD_FAIL("label 3 with 3 classes", im, lb, 3, LAM_ERR_IO, lb, "index 4", "is 3", "0..2");
}

static void test_bad_classes(void **state) {
  (void)state;
  const char *im = path_of("cls-images"), *lb = path_of("cls-labels");
  write_good(im, 0, lb, 0);
  /* classes = 0 takes the number from the labels (the largest, 9, + 1): see test_infer_classes. */
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_idx(im, lb, 0, &d));
  assert_set("classes = 0 inferred", d, N, H, W, g_pix, g_lab);
  lam_dataset_free(d);
  EXPECT_LOAD_FAIL("classes = -1", im, lb, -1, LAM_ERR_INVALID_ARG, "classes is -1");
  EXPECT_LOAD_FAIL("classes = 257", im, lb, 257, LAM_ERR_INVALID_ARG, "classes is 257", "1..256");
}

static void test_missing_file(void **state) {
  (void)state;
  const char *im = path_of("here-images"), *lb = path_of("here-labels");
  const char *no_im = path_of("absent-images"), *no_lb = path_of("absent-labels.gz");
  write_good(im, 0, lb, 0);
  EXPECT_LOAD_FAIL("images missing", no_im, lb, 10, LAM_ERR_IO, "image file", no_im, "No such file");
  EXPECT_LOAD_FAIL("labels missing", im, no_lb, 10, LAM_ERR_IO, "label file", no_lb, "No such file");
  EXPECT_LOAD_FAIL("a folder as the image file", g_dir, lb, 10, LAM_ERR_IO, g_dir, "is a folder");
}

static void test_corrupt_gzip(void **state) {
  (void)state;
  enum { BN = 200 };
  uint8_t *pix = malloc((size_t)BN * H * W);
  assert_non_null(pix);
  for (size_t i = 0; i < (size_t)BN * H * W; i++) pix[i] = (uint8_t)(i * 7 % 13);
  const char *im = path_of("corrupt-images.gz"), *lb = path_of("corrupt-labels");
  uint8_t lab[BN] = {0};
  write_labels(lb, 0, BN, lab, BN);
  write_images(im, 1, BN, H, W, pix, (size_t)BN * H * W);
  free(pix);
  /* Scramble bytes in the middle of the deflate data (the gzip header is the first 10 bytes). */
  long size = file_size(im);
  FILE *f = fopen(im, "r+b");
  assert_non_null(f);
  for (long at = 12; at < size - 8; at += 5) {
    fseek(f, at, SEEK_SET);
    fputc(0xa5 ^ (int)at, f);
  }
  fclose(f);
  EXPECT_LOAD_FAIL("scrambled gzip", im, lb, 10, LAM_ERR_IO, "image file", im, "damaged", "cannot be decompressed");

  /* Good deflate data whose CRC-32 in the gzip trailer is wrong (small and large: the check fails in the
   * first read or in the payload): said as a CRC mismatch, not as an unreadable header. */
  for (int big = 0; big < 2; big++) {
    uint32_t n = big ? BN : 3;
    uint8_t *p = malloc((size_t)n * H * W);
    assert_non_null(p);
    for (size_t i = 0; i < (size_t)n * H * W; i++) p[i] = (uint8_t)(i * 7 % 13);
    write_labels(lb, 0, n, lab, n);
    write_images(im, 1, n, H, W, p, (size_t)n * H * W);
    free(p);
    long sz = file_size(im);
    FILE *g = fopen(im, "r+b");
    assert_non_null(g);
    fseek(g, sz - 8, SEEK_SET); /* the trailer: CRC-32, then the length */
    int c = fgetc(g);
    fseek(g, sz - 8, SEEK_SET);
    fputc(c ^ 0xff, g);
    fclose(g);
    EXPECT_LOAD_FAIL(big ? "gzip CRC wrong, 200 images" : "gzip CRC wrong, 3 images", im, lb, 10, LAM_ERR_IO, im,
                     "damaged", "CRC-32");
  }

  /* Not gzip at all, but starting with the gzip magic. */
  uint8_t junk[64] = {0x1f, 0x8b, 0x08, 0x00};
  for (int i = 4; i < 64; i++) junk[i] = (uint8_t)(i * 37);
  write_bytes(im, 0, junk, sizeof junk);
  EXPECT_LOAD_FAIL("gzip magic, garbage after", im, lb, 10, LAM_ERR_IO, "image file", im);
}

static void test_null_args(void **state) {
  (void)state;
  const char *im = path_of("null-images"), *lb = path_of("null-labels");
  write_good(im, 0, lb, 0);
  EXPECT_LOAD_FAIL("images NULL", NULL, lb, 10, LAM_ERR_INVALID_ARG, "images_path is NULL");
  EXPECT_LOAD_FAIL("labels NULL", im, NULL, 10, LAM_ERR_INVALID_ARG, "labels_path is NULL");
  lam_status s = lam_dataset_load_idx(im, lb, 10, NULL);
  expect_fail("out NULL", s, LAM_ERR_INVALID_ARG, NULL, "out is NULL", (const char *)NULL);

  lam_dataset *d = POISONED;
  s = lam_dataset_load(NULL, 1, &d);
  expect_fail("load(NULL)", s, LAM_ERR_INVALID_ARG, d, "name_or_dir is NULL",
              (const char *)NULL);
  d = POISONED;
  s = lam_dataset_load("", 1, &d);
  expect_fail("load(\"\")", s, LAM_ERR_INVALID_ARG, d, "empty", (const char *)NULL);
  expect_fail("load out NULL", lam_dataset_load("fashion-mnist", 1, NULL), LAM_ERR_INVALID_ARG, NULL,
              "out is NULL", (const char *)NULL);
  lam_dataset_free(NULL);
}

/* ---- images of any channel count, NumPy files, per-pixel labels ------------------------------ */

/* Writes an IDX file of any rank up to 4 (write_idx above stops at 3). */
static void write_idx_any(const char *path, int gz, uint32_t magic, int ndims, const uint32_t *dims,
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
static void write_npy_raw(const char *path, int gz, int major, const char *header, const void *payload, size_t bytes) {
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
static void write_npy(const char *path, int gz, int major, const char *descr, int rank, const uint64_t *shape,
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
static void write_npy_labels(const char *path, int gz, uint64_t n, const uint8_t *lab) {
  write_npy(path, gz, 1, "|u1", 1, &n, lab, (size_t)n);
}

/* Encodes v as a size-byte integer in the given byte order. */
static void put_int(uint8_t *p, int size, int big, uint64_t v) {
  for (int b = 0; b < size; b++) p[big ? size - 1 - b : b] = (uint8_t)(v >> (8 * b));
}

/* (n, h, w, c) -> (n, c, h, w): the reference for the loader's transpose. */
static void ref_nchw(const uint8_t *src, int n, int h, int w, int c, uint8_t *dst) {
  for (int i = 0; i < n; i++)
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++)
        for (int ch = 0; ch < c; ch++)
          dst[(((size_t)i * c + ch) * h + y) * w + x] = src[(((size_t)i * h + y) * w + x) * c + ch];
}

static void fill_random(uint8_t *p, size_t n, uint64_t case_id, unsigned mod) {
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(case_id));
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(mod ? tu_next(&r) % mod : tu_next(&r) >> 56);
}

/* Every field, every pixel (NCHW) and every label of a loaded set. */
static void assert_set_full(const char *what, const lam_dataset *d, size_t n, int c, int h, int w, int classes,
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

/* IDX rank 4 (n, h, w, c): loaded as (n, c, h, w); and with one channel. */
static void test_idx_rank4(void **state) {
  (void)state;
  enum { C = 3 };
  static uint8_t src[N * H * W * C], want[N * H * W * C];
  uint8_t lab[N];
  fill_random(src, sizeof src, 0x4d, 0);
  fill_random(lab, N, 0x4e, 6);
  lab[2] = 5;
  ref_nchw(src, N, H, W, C, want);
  const char *im = path_of("r4-images.gz"), *lb = path_of("r4-labels");
  uint32_t dims[4] = {N, H, W, C};
  write_idx_any(im, 1, 0x00000804, 4, dims, src, sizeof src);
  write_labels(lb, 0, N, lab, N);
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_idx(im, lb, 0, &d));
  assert_set_full("IDX rank 4, classes inferred", d, N, C, H, W, 6, want, 1, 1, lab);
  lam_dataset_free(d);
  TU_OK(lam_dataset_load_idx(im, lb, 10, &d));
  assert_set_full("IDX rank 4, 10 classes", d, N, C, H, W, 10, want, 1, 1, lab);
  lam_dataset_free(d);

  uint32_t one[4] = {N, H, W, 1};
  write_idx_any(im, 0, 0x00000804, 4, one, g_pix, PIX);
  TU_OK(lam_dataset_load_idx(im, lb, 0, &d));
  assert_set_full("IDX rank 4, one channel", d, N, 1, H, W, 6, g_pix, 1, 1, lab);
  lam_dataset_free(d);
}

/* Clips: IDX rank 5 and .npy of shape (n, t, h, w, c) load as (n, t, c, h, w) with t set, every frame's
 * channels transposed; a label per pixel on clips, and too many frames, are refused naming the file. */
static void test_idx_clips(void **state) {
  (void)state;
  enum { C = 2, T = 3 };
  static uint8_t src[N * T * H * W * C], want[N * T * H * W * C];
  uint8_t lab[N];
  fill_random(src, sizeof src, 0x5d, 0);
  fill_random(lab, N, 0x5e, 6);
  lab[0] = 5;
  ref_nchw(src, N * T, H, W, C, want); /* frame by frame */
  const char *im = path_of("r5-images.gz"), *lb = path_of("r5-labels"), *npy = path_of("r5-images.npy");
  uint32_t dims[5] = {N, T, H, W, C};
  write_idx_any(im, 1, 0x00000805, 5, dims, src, sizeof src);
  write_labels(lb, 0, N, lab, N);
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_idx(im, lb, 0, &d));
  assert_int_equal(d->t, T);
  assert_int_equal(lam_dataset_sample_bytes(d), (size_t)T * C * H * W);
  assert_int_equal(d->n, N), assert_int_equal(d->c, C), assert_int_equal(d->h, H), assert_int_equal(d->w, W);
  assert_int_equal(d->classes, 6);
  assert_memory_equal(d->images, want, sizeof want);
  assert_memory_equal(d->labels, lab, N);
  lam_dataset_free(d);
  const uint64_t shape[5] = {N, T, H, W, C};
  write_npy(npy, 0, 1, "|u1", 5, shape, src, sizeof src);
  TU_OK(lam_dataset_load_idx(npy, lb, 0, &d));
  assert_int_equal(d->t, T);
  assert_int_equal(d->n, N);
  assert_memory_equal(d->images, want, sizeof want);
  lam_dataset_free(d);
  /* images load with t = 1 */
  uint32_t one[4] = {N, H, W, 1};
  write_idx_any(path_of("r4-one"), 0, 0x00000804, 4, one, g_pix, PIX);
  TU_OK(lam_dataset_load_idx(path_of("r4-one"), lb, 0, &d));
  assert_int_equal(d->t, 1);
  lam_dataset_free(d);
  /* a label per pixel on clips */
  static uint8_t maps[N * H * W];
  uint32_t mdims[3] = {N, H, W};
  write_idx_any(path_of("r5-maps"), 0, 0x00000803, 3, mdims, maps, sizeof maps);
  TU_EXPECT_STATUS(lam_dataset_load_idx(im, path_of("r5-maps"), 0, &d), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), "one label per clip"));
  /* 256 frames: above the limit, said before reading the payload */
  uint32_t many[5] = {N, 256, H, W, C};
  write_idx_any(im, 0, 0x00000805, 5, many, src, sizeof src);
  TU_EXPECT_STATUS(lam_dataset_load_idx(im, lb, 0, &d), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), "frames"));
  assert_non_null(strstr(lam_last_error(), "r5-images.gz"));
}

/* .npy images in every layout the reader takes, headers of versions 1.0, 2.0 and 3.0, plain and gzip. */
static void test_npy_layouts(void **state) {
  (void)state;
  enum { C = 3, C4 = 4, W6 = 6 };
  static uint8_t src[N * H * W * C4], want[N * H * W * C4], nchw[N * 2 * H * W6];
  fill_random(src, sizeof src, 0x1a, 0);
  fill_random(nchw, sizeof nchw, 0x1b, 0);
  const char *im = path_of("npy-images.npy"), *lb = path_of("npy-labels.npy");
  lam_dataset *d = NULL;

  /* v1.0 (n, h, w) with int64 labels. */
  uint8_t lab8[N * 8];
  for (int i = 0; i < N; i++) put_int(lab8 + 8 * i, 8, 0, g_lab[i]);
  uint64_t s3[3] = {N, H, W}, s1[1] = {N};
  write_npy(im, 0, 1, "|u1", 3, s3, g_pix, PIX);
  write_npy(lb, 0, 1, "<i8", 1, s1, lab8, sizeof lab8);
  TU_OK(lam_dataset_load_idx(im, lb, 0, &d));
  assert_set_full(".npy v1 (n, h, w), int64 labels", d, N, 1, H, W, 10, g_pix, 1, 1, g_lab);
  lam_dataset_free(d);

  /* v2.0 (n, h, w, 3): channels-last, transposed. */
  uint64_t s4[4] = {N, H, W, C};
  ref_nchw(src, N, H, W, C, want);
  write_npy(im, 0, 2, "|u1", 4, s4, src, (size_t)N * H * W * C);
  write_npy_labels(lb, 0, N, g_lab);
  TU_OK(lam_dataset_load_idx(im, lb, 10, &d));
  assert_set_full(".npy v2 (n, h, w, 3)", d, N, C, H, W, 10, want, 1, 1, g_lab);
  lam_dataset_free(d);

  /* v3.0 (n, 2, h, 6): channels-first (second dimension <= 4, last > 4), kept as it is. */
  uint64_t sc[4] = {N, 2, H, W6};
  write_npy(im, 0, 3, "|u1", 4, sc, nchw, sizeof nchw);
  TU_OK(lam_dataset_load_idx(im, lb, 10, &d));
  assert_set_full(".npy v3 (n, 2, h, w)", d, N, 2, H, W6, 10, nchw, 1, 1, g_lab);
  lam_dataset_free(d);

  /* .npy.gz of (n, h, w, 4) and gzip int32 labels; and (n, h, w, 1). */
  const char *imz = path_of("npy-images.npy.gz"), *lbz = path_of("npy-labels.npy.gz");
  uint64_t s44[4] = {N, H, W, C4};
  ref_nchw(src, N, H, W, C4, want);
  write_npy(imz, 1, 1, "|u1", 4, s44, src, sizeof src);
  uint8_t lab4[N * 4];
  for (int i = 0; i < N; i++) put_int(lab4 + 4 * i, 4, 0, g_lab[i]);
  write_npy(lbz, 1, 1, "<i4", 1, s1, lab4, sizeof lab4);
  TU_OK(lam_dataset_load_idx(imz, lbz, 0, &d));
  assert_set_full(".npy.gz (n, h, w, 4), int32 labels", d, N, C4, H, W, 10, want, 1, 1, g_lab);
  lam_dataset_free(d);
  uint64_t s41[4] = {N, H, W, 1};
  write_npy(im, 0, 1, "|u1", 4, s41, g_pix, PIX);
  TU_OK(lam_dataset_load_idx(im, lbz, 0, &d));
  assert_set_full(".npy (n, h, w, 1)", d, N, 1, H, W, 10, g_pix, 1, 1, g_lab);
  lam_dataset_free(d);

  /* IDX images with .npy labels, and the reverse: each file's format is its own. */
  const char *idx_im = path_of("npy-mixed-images"), *idx_lb = path_of("npy-mixed-labels");
  write_good(idx_im, 0, idx_lb, 1);
  TU_OK(lam_dataset_load_idx(idx_im, lbz, 10, &d));
  assert_set_full("IDX images, .npy labels", d, N, 1, H, W, 10, g_pix, 1, 1, g_lab);
  lam_dataset_free(d);
  write_npy(im, 0, 1, "|u1", 3, s3, g_pix, PIX);
  TU_OK(lam_dataset_load_idx(im, idx_lb, 10, &d));
  assert_set_full(".npy images, IDX labels", d, N, 1, H, W, 10, g_pix, 1, 1, g_lab);
  lam_dataset_free(d);
}

/* Labels of every integer dtype, either byte order, narrowed to bytes. */
static void test_npy_label_dtypes(void **state) {
  (void)state;
  static const struct {
    const char *descr;
    int size, big;
  } types[] = {{"|u1", 1, 0}, {"|i1", 1, 0}, {"<u2", 2, 0}, {">u2", 2, 1}, {"<i2", 2, 0}, {">i2", 2, 1},
               {"<u4", 4, 0}, {"<i4", 4, 0}, {">i4", 4, 1}, {"<u8", 8, 0}, {"<i8", 8, 0}, {">i8", 8, 1}};
  const char *im = path_of("dt-images.npy"), *lb = path_of("dt-labels.npy");
  uint64_t s3[3] = {N, H, W}, s1[1] = {N};
  write_npy(im, 0, 1, "|u1", 3, s3, g_pix, PIX);
  uint8_t lab[N];
  memcpy(lab, g_lab, N);
  lab[3] = 100; /* fits int8 too */
  for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
    uint8_t buf[N * 8];
    for (int i = 0; i < N; i++) put_int(buf + (size_t)types[t].size * i, types[t].size, types[t].big, lab[i]);
    write_npy(lb, 0, 1, types[t].descr, 1, s1, buf, (size_t)N * types[t].size);
    lam_dataset *d = NULL;
    lam_status s = lam_dataset_load_idx(im, lb, 0, &d);
    if (s != LAM_OK) fail_msg("labels '%s': %s", types[t].descr, lam_last_error());
    char what[64];
    snprintf(what, sizeof what, "labels '%s'", types[t].descr);
    assert_set_full(what, d, N, 1, H, W, 101, g_pix, 1, 1, lab);
    lam_dataset_free(d);
  }
}

/* Labels per pixel (IDX rank 3 and .npy (n, h, w)), 255 = ignore; and lam_dataset_set_classes. */
static void test_per_pixel(void **state) {
  (void)state;
  enum { C = 3 };
  static uint8_t src[N * H * W * C], want[N * H * W * C];
  uint8_t map[PIX];
  fill_random(src, sizeof src, 0x9a, 0);
  ref_nchw(src, N, H, W, C, want);
  fill_random(map, PIX, 0x9b, 4);
  map[0] = 255, map[17] = 255, map[PIX - 1] = 255, map[40] = 3;
  const char *im = path_of("pp-images"), *lb = path_of("pp-labels.gz");
  uint32_t dims[4] = {N, H, W, C};
  write_idx_any(im, 0, 0x00000804, 4, dims, src, sizeof src);
  write_idx_any(lb, 1, 0x00000803, 3, dims, map, PIX);
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_idx(im, lb, 0, &d));
  assert_set_full("IDX per-pixel labels, classes inferred", d, N, C, H, W, 4, want, H, W, map);

  /* lam_dataset_set_classes: up is fine, below a label is not; 255 never counts. */
  TU_OK(lam_dataset_set_classes(d, 7));
  assert_int_equal(d->classes, 7);
  lam_status s = lam_dataset_set_classes(d, 3);
  expect_fail("set_classes(3) with a label 3", s, LAM_ERR_INVALID_ARG, NULL, "lam_dataset_set_classes", "is 3",
              "at least 4 classes", "k = 3", "(image ", (const char *)NULL);
  assert_int_equal(d->classes, 7);
  s = lam_dataset_set_classes(d, 256);
  expect_fail("set_classes(256) per pixel", s, LAM_ERR_INVALID_ARG, NULL, "k is 256", "1..255", "ignore",
              (const char *)NULL);
  TU_OK(lam_dataset_set_classes(d, 4));
  lam_dataset_free(d);

  /* Explicit classes: 255 aside, every label below them. */
  TU_OK(lam_dataset_load_idx(im, lb, 4, &d));
  assert_set_full("IDX per-pixel labels, 4 classes", d, N, C, H, W, 4, want, H, W, map);
  lam_dataset_free(d);
  int first3 = 0;
  while (map[first3] != 3) first3++;
  char where[96];
  snprintf(where, sizeof where, "index %d (image %d, row %d, col %d) is 3", first3, first3 / (H * W),
           first3 % (H * W) / W, first3 % W);
  EXPECT_LOAD_FAIL("per-pixel label 3 with 3 classes", im, lb, 3, LAM_ERR_IO, lb, where, "0..2 (or 255: ignore)");
  EXPECT_LOAD_FAIL("per-pixel labels with 256 classes", im, lb, 256, LAM_ERR_INVALID_ARG, lb, "at most 255");

  /* .npy int64 (n, h, w) with 255, read through gzip. */
  uint8_t *buf = malloc((size_t)PIX * 8);
  assert_non_null(buf);
  for (int i = 0; i < PIX; i++) put_int(buf + 8 * i, 8, 0, map[i]);
  const char *nlb = path_of("pp-labels.npy.gz");
  uint64_t s3[3] = {N, H, W};
  write_npy(nlb, 1, 1, "<i8", 3, s3, buf, (size_t)PIX * 8);
  TU_OK(lam_dataset_load_idx(im, nlb, 0, &d));
  assert_set_full(".npy int64 per-pixel labels", d, N, C, H, W, 4, want, H, W, map);
  lam_dataset_free(d);

  /* -1 where 255 is meant: refused with the fix. */
  put_int(buf + 8 * 20, 8, 0, (uint64_t)-1);
  write_npy(nlb, 1, 1, "<i8", 3, s3, buf, (size_t)PIX * 8);
  EXPECT_LOAD_FAIL("per-pixel label -1", im, nlb, 0, LAM_ERR_IO, nlb, "index 20 (image 1, row 1, col 2)", "is -1",
                   "y[y < 0] = 255");
  free(buf);

  /* Every label ignored: nothing to infer from. */
  uint8_t none[PIX];
  memset(none, 255, PIX);
  write_idx_any(lb, 0, 0x00000803, 3, dims, none, PIX);
  EXPECT_LOAD_FAIL("every label 255", im, lb, 0, LAM_ERR_IO, lb, "every label is 255");
  TU_OK(lam_dataset_load_idx(im, lb, 2, &d));
  assert_int_equal(d->classes, 2);
  lam_dataset_free(d);
}

/* classes = 0 takes the largest label + 1; a per-image 255 is a class only when said so. */
static void test_infer_classes(void **state) {
  (void)state;
  const char *im = path_of("inf-images"), *lb = path_of("inf-labels");
  uint8_t lab[N] = {0, 1, 1, 0, 2, 1, 0};
  write_images(im, 0, N, H, W, g_pix, PIX);
  write_labels(lb, 0, N, lab, N);
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_idx(im, lb, 0, &d));
  assert_int_equal(d->classes, 3);
  assert_int_equal(d->c, 1);
  assert_int_equal(d->label_h, 1);
  assert_int_equal(d->label_w, 1);
  lam_status s = lam_dataset_set_classes(d, 2);
  expect_fail("set_classes(2) with a label 2", s, LAM_ERR_INVALID_ARG, NULL, "index 4", "is 2", (const char *)NULL);
  TU_OK(lam_dataset_set_classes(d, 256));
  s = lam_dataset_set_classes(d, 0);
  expect_fail("set_classes(0)", s, LAM_ERR_INVALID_ARG, NULL, "k is 0", "1..256", (const char *)NULL);
  s = lam_dataset_set_classes(NULL, 3);
  expect_fail("set_classes(NULL)", s, LAM_ERR_INVALID_ARG, NULL, "d is NULL", (const char *)NULL);
  lam_dataset_free(d);

  lab[5] = 255;
  write_labels(lb, 0, N, lab, N);
  EXPECT_LOAD_FAIL("per-image 255, classes inferred", im, lb, 0, LAM_ERR_IO, lb, "index 5", "is 255",
                   "classes = 256");
  TU_OK(lam_dataset_load_idx(im, lb, 256, &d));
  assert_int_equal(d->labels[5], 255);
  lam_dataset_free(d);

  /* A struct built by hand with the new fields left 0: one channel, one label per image. */
  uint8_t hand_lab[2] = {1, 4};
  lam_dataset hand = {.n = 2, .h = 1, .w = 1, .classes = 5, .images = g_pix, .labels = hand_lab};
  TU_OK(lam_dataset_set_classes(&hand, 9));
  assert_int_equal(hand.classes, 9);
  s = lam_dataset_set_classes(&hand, 4);
  expect_fail("hand-built set, set_classes(4)", s, LAM_ERR_INVALID_ARG, NULL, "index 1 is 4", (const char *)NULL);
}

/* A folder of .npy files under the names train-images*, test-images*, ...; classes from both parts. */
static void test_npy_folder(void **state) {
  (void)state;
  enum { C = 3, NTR = 4, NTE = 3 };
  static uint8_t src[N * H * W * C], want[N * H * W * C];
  fill_random(src, sizeof src, 0xf0, 0);
  ref_nchw(src, N, H, W, C, want);
  uint8_t lab[N] = {0, 2, 1, 2, 4, 0, 3}; /* training labels up to 2, test up to 4 */
  const char *dir = path_of("npy-folder");
  assert_int_equal(mkdir(dir, 0700), 0);
  char p[512], q[512];
  uint64_t str[4] = {NTR, H, W, C}, ste[4] = {NTE, H, W, C}, ltr[1] = {NTR}, lte[1] = {NTE};
  snprintf(p, sizeof p, "%s/train-images.npy", dir);
  write_npy(p, 0, 1, "|u1", 4, str, src, (size_t)NTR * H * W * C);
  snprintf(p, sizeof p, "%s/train-images.npy.md5", dir); /* never a candidate */
  write_bytes(p, 0, "0123\n", 5);
  uint8_t l8[N * 8];
  for (int i = 0; i < N; i++) put_int(l8 + 8 * i, 8, 0, lab[i]);
  snprintf(p, sizeof p, "%s/train-labels.npy.gz", dir);
  write_npy(p, 1, 2, "<i8", 1, ltr, l8, NTR * 8);
  snprintf(p, sizeof p, "%s/test-images.npy", dir);
  write_npy(p, 0, 1, "|u1", 4, ste, src + (size_t)NTR * H * W * C, (size_t)NTE * H * W * C);
  snprintf(p, sizeof p, "%s/test-labels.npy", dir);
  write_npy(p, 0, 1, "<i8", 1, lte, l8 + NTR * 8, NTE * 8);

  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load(dir, 1, &d));
  assert_set_full(".npy folder, training set", d, NTR, C, H, W, 5, want, 1, 1, lab);
  lam_dataset_free(d);
  TU_OK(lam_dataset_load(dir, 0, &d));
  assert_set_full(".npy folder, test set", d, NTE, C, H, W, 5, want + (size_t)NTR * C * H * W, 1, 1, lab + NTR);
  lam_dataset_free(d);

  /* A second file for the test images: the test set refuses, naming both. */
  snprintf(q, sizeof q, "%s/t10k-images-idx3-ubyte", dir);
  write_images(q, 0, NTE, H, W, g_pix, (size_t)NTE * H * W);
  d = POISONED;
  lam_status s = lam_dataset_load(dir, 0, &d);
  expect_fail("two files for the test images", s, LAM_ERR_IO, d, dir, "2 files for the test images",
              "'t10k-images-idx3-ubyte'", "'test-images.npy'", "keep one", (const char *)NULL);
  assert_int_equal(remove(q), 0);

  /* A second file for the test labels: the training set reads them too (for classes), so both refuse. */
  snprintf(q, sizeof q, "%s/t10k-labels-idx1-ubyte.gz", dir);
  write_labels(q, 1, NTE, lab + NTR, NTE);
  d = POISONED;
  s = lam_dataset_load(dir, 1, &d);
  expect_fail("two files for the test labels, training set", s, LAM_ERR_IO, d, "2 files for the test labels",
              "'t10k-labels-idx1-ubyte.gz'", "'test-labels.npy'", (const char *)NULL);
  assert_int_equal(remove(q), 0);

  /* A file and its .gz twin are one file: the plain one is read (the MNIST layout's old rule). */
  snprintf(q, sizeof q, "%s/test-labels.npy.gz", dir);
  write_npy(q, 1, 1, "<i8", 1, lte, l8, NTE * 8); /* different labels: must not be read */
  TU_OK(lam_dataset_load(dir, 0, &d));
  assert_set_full(".npy folder with a .gz twin", d, NTE, C, H, W, 5, want + (size_t)NTR * C * H * W, 1, 1, lab + NTR);
  lam_dataset_free(d);

  /* A bad file for the other part's labels is reported: the classes would be wrong without it. */
  snprintf(q, sizeof q, "%s/test-labels.npy", dir);
  write_bytes(q, 0, "\x93NUMPY", 6);
  d = POISONED;
  s = lam_dataset_load(dir, 1, &d);
  expect_fail("other part's labels broken", s, LAM_ERR_IO, d, q, "truncated", (const char *)NULL);
}

/* Per-channel mean and std of pixel / 255 against a float64 reference. */
static void test_channel_stats(void **state) {
  (void)state;
  enum { C = 3 };
  static uint8_t pix[N * C * H * W];
  fill_random(pix, sizeof pix, 0x57a7, 0);
  for (int i = 0; i < H * W; i++) pix[(size_t)2 * C * H * W + i] = 0; /* image 2, channel 0: dark */
  lam_dataset d = {.n = N, .h = H, .w = W, .classes = 10, .images = pix, .labels = g_lab, .c = C};
  float mean[C], sd[C];
  TU_OK(lam_dataset_channel_stats(&d, mean, sd));
  for (int ch = 0; ch < C; ch++) {
    double s = 0, ss = 0, m;
    for (int i = 0; i < N; i++)
      for (int k = 0; k < H * W; k++) s += pix[((size_t)i * C + ch) * H * W + k] / 255.0;
    m = s / (N * H * W);
    for (int i = 0; i < N; i++)
      for (int k = 0; k < H * W; k++) {
        double v = pix[((size_t)i * C + ch) * H * W + k] / 255.0 - m;
        ss += v * v;
      }
    double sdv = sqrt(ss / (N * H * W));
    if (fabs(mean[ch] - m) > 1e-6 || fabs(sd[ch] - sdv) > 1e-6)
      fail_msg("channel %d: mean %.8f std %.8f, want %.8f %.8f", ch, mean[ch], sd[ch], m, sdv);
  }
  /* c = 0 reads as one channel; a constant image has std 0. */
  uint8_t flat[4] = {51, 51, 51, 51};
  lam_dataset one = {.n = 1, .h = 2, .w = 2, .classes = 1, .images = flat, .labels = g_lab};
  TU_OK(lam_dataset_channel_stats(&one, mean, sd));
  assert_true(fabs(mean[0] - 0.2) < 1e-7 && sd[0] == 0.0f);

  lam_status s = lam_dataset_channel_stats(NULL, mean, sd);
  expect_fail("stats(NULL)", s, LAM_ERR_INVALID_ARG, NULL, "d is NULL", (const char *)NULL);
  s = lam_dataset_channel_stats(&d, NULL, sd);
  expect_fail("stats, mean NULL", s, LAM_ERR_INVALID_ARG, NULL, "mean or std is NULL", (const char *)NULL);
  lam_dataset empty = {.h = 2, .w = 2, .images = flat};
  s = lam_dataset_channel_stats(&empty, mean, sd);
  expect_fail("stats of an empty set", s, LAM_ERR_INVALID_ARG, NULL, "empty", (const char *)NULL);
}

/* Every malformed .npy file, and shapes the roles do not take. */
static void test_npy_bad(void **state) {
  (void)state;
  const char *im = path_of("bad-images.npy"), *lb = path_of("bad-labels.npy");
  uint64_t s3[3] = {N, H, W}, s1[1] = {N};
  write_npy_labels(lb, 0, N, g_lab);
  char hdr[256];

  /* Magic, version, header length. */
  uint8_t raw[16 + PIX] = {0}; /* 10 bytes after the magic: zeros, not whatever the stack held */
  write_npy(im, 0, 1, "|u1", 3, s3, g_pix, PIX);
  memcpy(raw, "\x93NUMPX", 6);
  write_bytes(im, 0, raw, 6 + 10);
  EXPECT_LOAD_FAIL("damaged .npy magic", im, lb, 10, LAM_ERR_IO, im, "magic", "NumPy", "damaged");
  write_npy_raw(im, 0, 4, "{'descr': '|u1', 'fortran_order': False, 'shape': (7, 5, 3), }", g_pix, PIX);
  EXPECT_LOAD_FAIL("version 4.0", im, lb, 10, LAM_ERR_IO, im, "version 4.0", "1.0, 2.0 and 3.0");
  uint8_t head[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0xff, 0xff, 0xff, 0x7f};
  write_bytes(im, 0, head, 12);
  EXPECT_LOAD_FAIL("header length 2 GiB", im, lb, 10, LAM_ERR_IO, im, "header's length is 2147483647");
  head[6] = 1, head[8] = 0, head[9] = 0;
  write_bytes(im, 0, head, 10);
  EXPECT_LOAD_FAIL("header length 0", im, lb, 10, LAM_ERR_IO, im, "header's length is 0");
  write_bytes(im, 0, head, 8);
  EXPECT_LOAD_FAIL("cut after the version", im, lb, 10, LAM_ERR_IO, im, "truncated", "after 8 bytes");
  head[8] = 118; /* 128 - 10 */
  write_bytes(im, 0, head, 10);
  EXPECT_LOAD_FAIL("cut inside the header text", im, lb, 10, LAM_ERR_IO, im, "truncated", "128-byte .npy header");

  /* Malformed header text: each says what it found and where. */
  static const struct {
    const char *header, *word;
  } bad[] = {
      {"{'descr': '|u1', 'fortran_order': False, }", "no key 'shape'"},
      {"{'descr': '|u1', 'shape': (7, 5, 3), }", "no key 'fortran_order'"},
      {"{'fortran_order': False, 'shape': (7, 5, 3), }", "no key 'descr'"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (7, 5, 3), 'foo': 1}", "unknown key 'foo'"},
      {"{'descr': '|u1', 'descr': '|u1', 'fortran_order': False, 'shape': (7, 5, 3)}", "given twice"},
      {"{'descr': '|u1, 'fortran_order': False, 'shape': (7, 5, 3), }", "expected ',' or '}'"},
      {"{'descr' '|u1', 'fortran_order': False, 'shape': (7, 5, 3), }", "expected ':' after 'descr'"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (7, 5, 3), 'x", "unterminated string"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (7, 5, 3), ", "expected a quoted string"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (7, -5, 3), }", "negative"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (7, 5, 3) }x", "text after"},
      {"['descr', '|u1']", "expected '{'"},
      {"{'descr': [('a', '|u1')], 'fortran_order': False, 'shape': (7, 5, 3), }", "structured"},
      {"{'descr': '|u1', 'fortran_order': Maybe, 'shape': (7, 5, 3), }", "expected True or False"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': [7, 5, 3], }", "expected a tuple"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (99999999999999999999999, 5, 3), }", "too large"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (7 5 3), }", "expected ',' or ')'"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (7, 5, 3)", "expected ',' or '}'"},
      {"{'descr': '|u1', 'fortran_order': False, 'shape': (7, 5, 3), } \\", "text after"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    write_npy_raw(im, 0, 1, bad[i].header, g_pix, PIX);
    char what[64];
    snprintf(what, sizeof what, "malformed header %zu", i);
    EXPECT_LOAD_FAIL(what, im, lb, 10, LAM_ERR_IO, im, "malformed .npy header", bad[i].word, "numpy.save");
  }
  /* A NUL inside the header text: parsed as bytes, not as a C string. */
  snprintf(hdr, sizeof hdr, "{'descr': '|u1', 'fortran_order': False, 'shape': (7, 5, 3), }");
  write_npy_raw(im, 0, 1, hdr, g_pix, PIX);
  {
    FILE *f = fopen(im, "r+b");
    assert_non_null(f);
    fseek(f, 10 + 3, SEEK_SET); /* inside 'descr' */
    fputc(0, f);
    fclose(f);
  }
  EXPECT_LOAD_FAIL("NUL in the header", im, lb, 10, LAM_ERR_IO, im, "unknown key");

  /* Fortran order; dtypes. */
  write_npy_raw(im, 0, 1, "{'descr': '|u1', 'fortran_order': True, 'shape': (7, 5, 3), }", g_pix, PIX);
  EXPECT_LOAD_FAIL("fortran order", im, lb, 10, LAM_ERR_IO, im, "Fortran order", "np.ascontiguousarray");
  static float fpix[PIX];
  write_npy(im, 0, 1, "<f4", 3, s3, fpix, sizeof fpix);
  EXPECT_LOAD_FAIL("float32 images", im, lb, 10, LAM_ERR_IO, "image file", im, "'<f4' (float32)", "uint8",
                   "astype(np.uint8)");
  write_npy(im, 0, 1, "<i2", 3, s3, fpix, (size_t)PIX * 2);
  EXPECT_LOAD_FAIL("int16 images", im, lb, 10, LAM_ERR_IO, im, "'<i2' (int16)", "uint8");
  write_npy(im, 0, 1, "|u1", 3, s3, g_pix, PIX);
  write_npy(lb, 0, 1, "<f8", 1, s1, fpix, (size_t)N * 8);
  EXPECT_LOAD_FAIL("float64 labels", im, lb, 10, LAM_ERR_IO, "label file", lb, "(float64)", "integers");
  write_npy(lb, 0, 1, "|S3", 1, s1, fpix, (size_t)N * 3);
  EXPECT_LOAD_FAIL("string labels", im, lb, 10, LAM_ERR_IO, lb, "'|S3'", "integers");

  /* Truncated and trailing data, plain and gzip. */
  write_npy_labels(lb, 0, N, g_lab);
  write_npy(im, 0, 1, "|u1", 3, s3, g_pix, PIX - 10);
  EXPECT_LOAD_FAIL(".npy 10 bytes short", im, lb, 10, LAM_ERR_IO, im, "truncated", "7 images of shape (7, 5, 3)",
                   "105 bytes", "only 95");
  const char *imz = path_of("bad-images.npy.gz");
  write_npy(imz, 1, 2, "|u1", 3, s3, g_pix, PIX - 10);
  EXPECT_LOAD_FAIL(".npy.gz 10 bytes short", imz, lb, 10, LAM_ERR_IO, imz, "truncated", "105 bytes", "only 95");
  uint8_t more[PIX + 5];
  memcpy(more, g_pix, PIX);
  memset(more + PIX, 1, 5);
  write_npy(im, 0, 1, "|u1", 3, s3, more, PIX + 5);
  EXPECT_LOAD_FAIL(".npy 5 trailing bytes", im, lb, 10, LAM_ERR_IO, im, "5 trailing bytes");
  write_npy(im, 0, 1, "|u1", 3, s3, g_pix, PIX);
  uint8_t l8[N * 8] = {0};
  write_npy(lb, 1, 1, "<i8", 1, s1, l8, N * 8 - 3);
  EXPECT_LOAD_FAIL("int64 labels cut", im, lb, 10, LAM_ERR_IO, lb, "truncated", "7 labels of int64", "56 bytes",
                   "only 53");

  /* Labels out of range, for bytes and for classes. */
  put_int(l8 + 16, 8, 0, 300);
  write_npy(lb, 0, 1, "<i8", 1, s1, l8, N * 8);
  EXPECT_LOAD_FAIL("int64 label 300", im, lb, 0, LAM_ERR_IO, lb, "index 2 is 300", "0..255");
  put_int(l8 + 16, 8, 0, 0x8000000000000005ULL);
  write_npy(lb, 0, 1, "<u8", 1, s1, l8, N * 8);
  EXPECT_LOAD_FAIL("uint64 label 2^63 + 5", im, lb, 0, LAM_ERR_IO, lb, "is 9223372036854775813");
  uint8_t lab[N];
  memcpy(lab, g_lab, N);
  lab[6] = 10;
  write_npy_labels(lb, 0, N, lab);
  EXPECT_LOAD_FAIL(".npy label 10 with 10 classes", im, lb, 10, LAM_ERR_IO, lb, "index 6 is 10", "10 classes");

  /* Counts and shapes that do not match. */
  write_npy_labels(lb, 0, N - 1, g_lab);
  EXPECT_LOAD_FAIL(".npy 7 images, 6 labels", im, lb, 10, LAM_ERR_IO, im, lb, "has 7 images", "has 6 labels");
  uint64_t s4x3[3] = {N, 4, W};
  write_npy(lb, 0, 1, "|u1", 3, s4x3, g_pix, (size_t)N * 4 * W);
  EXPECT_LOAD_FAIL(".npy per-pixel labels 4x3 for 5x3 images", im, lb, 0, LAM_ERR_IO, lb, "per-pixel labels of 4x3",
                   "are 5x3", "(7, 5, 3)");
  const char *ilb = path_of("bad-labels-idx");
  uint32_t d54[3] = {N, H, 4};
  static uint8_t maps54[N * H * 4];
  write_idx_any(ilb, 0, 0x00000803, 3, d54, maps54, sizeof maps54);
  EXPECT_LOAD_FAIL("IDX per-pixel labels 5x4 for 5x3 images", im, ilb, 0, LAM_ERR_IO, ilb, "5x4", "are 5x3",
                   "0x00000803 of 7 x 5 x 3");
  uint32_t d8[4] = {N, H, W, 2};
  write_idx_any(ilb, 0, 0x00000804, 4, d8, NULL, 0); /* refused by its magic, before any data */
  EXPECT_LOAD_FAIL("IDX rank-4 images as labels", im, ilb, 0, LAM_ERR_IO, ilb, "expected 0x00000801 or 0x00000803",
                   "swapped");
  write_idx_any(ilb, 0, 0x00000802, 2, d8, g_pix, N * H);
  EXPECT_LOAD_FAIL("IDX labels of rank 2", im, ilb, 0, LAM_ERR_IO, ilb, "2 dimensions", "1 (n: a label per image)");

  write_npy_labels(lb, 0, N, g_lab);
  uint64_t s2[2] = {N, H * W};
  write_npy(im, 0, 1, "|u1", 2, s2, g_pix, PIX);
  EXPECT_LOAD_FAIL("flat .npy images", im, lb, 10, LAM_ERR_IO, im, "2 dimensions", "reshape");
  uint64_t s6[6] = {N, 1, 1, H, W, 1}; /* 5-d is clips (test_idx_clips) */
  write_npy(im, 0, 1, "|u1", 6, s6, g_pix, PIX);
  EXPECT_LOAD_FAIL("6-d .npy images", im, lb, 10, LAM_ERR_IO, im, "6 dimensions");
  static uint8_t cube[N * 8 * 8 * 8];
  uint64_t s888[4] = {N, 8, 8, 8};
  write_npy(im, 0, 1, "|u1", 4, s888, cube, sizeof cube);
  EXPECT_LOAD_FAIL("ambiguous (7, 8, 8, 8)", im, lb, 10, LAM_ERR_IO, im, "(7, 8, 8, 8)", "ambiguous", "<= 4",
                   "0x00000804");
  uint64_t s0[3] = {0, H, W};
  write_npy(im, 0, 1, "|u1", 3, s0, g_pix, 0);
  EXPECT_LOAD_FAIL(".npy n = 0", im, lb, 10, LAM_ERR_IO, im, "dimension n is 0");
  uint64_t sbig[3] = {200000000, 1, 1};
  write_npy(im, 0, 1, "|u1", 3, sbig, g_pix, PIX);
  EXPECT_LOAD_FAIL(".npy n = 200M", im, lb, 10, LAM_ERR_IO, im, "n is 200000000");

  write_npy(im, 0, 1, "|u1", 3, s3, g_pix, PIX);
  uint64_t sn1[2] = {N, 1};
  write_npy(lb, 0, 1, "|u1", 2, sn1, g_lab, N);
  EXPECT_LOAD_FAIL(".npy labels (n, 1)", im, lb, 10, LAM_ERR_IO, lb, "(7, 1)", "y.reshape(-1)");
  uint64_t sn2[2] = {N, 2};
  write_npy(lb, 0, 1, "|u1", 2, sn2, g_pix, N * 2);
  EXPECT_LOAD_FAIL(".npy labels (n, 2)", im, lb, 10, LAM_ERR_IO, lb, "2 dimensions", "(n, h, w)");
}

/* ---- the real Fashion-MNIST ------------------------------------------------------------------ */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Facts of the published set (checked with Python's gzip module): sizes, the first label, the
 * per-class counts and the sum of all pixels, which catches a misplaced or missing byte anywhere. */
static void check_fashion(int train, size_t n, uint8_t first_label, unsigned long long pixel_sum) {
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

/* ---- the data makers (src/data/make.c) and the IDX writer ---- */

/* lam_idx_write, read back by the loader: images (n, h, w) and per-pixel labels (n, h, w); its refusals. */
static void test_idx_write(void **state) {
  (void)state;
  const uint64_t dims[3] = {N, H, W};
  uint8_t lab[PIX];
  for (int i = 0; i < PIX; i++) lab[i] = (uint8_t)(g_pix[i] % 4);
  const char *ip = path_of("w-images"), *lp = path_of("w-labels");
  TU_OK(lam_idx_write(ip, 3, dims, g_pix));
  TU_OK(lam_idx_write(lp, 3, dims, lab));
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_idx(ip, lp, 0, &d));
  assert_true(d->n == N && d->h == H && d->w == W && d->label_h == H && d->label_w == W);
  assert_memory_equal(d->images, g_pix, PIX);
  assert_memory_equal(d->labels, lab, PIX);
  lam_dataset_free(d);
  const uint64_t zero[2] = {3, 0}, five[5] = {2, 1, 1, 2, 3};
  TU_EXPECT_STATUS(lam_idx_write(ip, 2, zero, g_pix), LAM_ERR_INVALID_ARG);
  TU_EXPECT_STATUS(lam_idx_write(ip, 6, five, g_pix), LAM_ERR_INVALID_ARG);
  TU_OK(lam_idx_write(path_of("w-rank5"), 5, five, g_pix)); /* a clip set's shape (n, t, h, w, c) */
  struct stat st;
  assert_int_equal(stat(path_of("w-rank5"), &st), 0);
  assert_int_equal(st.st_size, 4 + 5 * 4 + 12);
  TU_EXPECT_STATUS(lam_idx_write(g_dir, 3, dims, g_pix), LAM_ERR_INVALID_ARG); /* a folder is not overwritten */
  assert_non_null(strstr(lam_last_error(), g_dir));
}

/* Scenes from a small source whose images have no zero pixel: each item is then a solid s x s block, so
 * the nonzero pixels count one to three whole items, each block one label (its class + 1); a label is
 * nonzero exactly where the image is; the same seed gives the same bytes, another seed others. */
static void test_data_segment(void **state) {
  (void)state;
  enum { S = 4, SN = 9, SH = 11, SW = 13, SCENES = 60 };
  uint8_t pix[SN * S * S], lab[SN];
  for (int i = 0; i < SN * S * S; i++) pix[i] = (uint8_t)(1 + (i * 37) % 255);
  for (int i = 0; i < SN; i++) lab[i] = (uint8_t)(i % 3);
  lam_dataset src = {.n = SN, .h = S, .w = S, .classes = 3, .images = pix, .labels = lab, .c = 1};
  static uint8_t im[SCENES * SH * SW], lb[SCENES * SH * SW], im2[SCENES * SH * SW], lb2[SCENES * SH * SW];
  TU_OK(lam_data_segment(&src, SCENES, SH, SW, 5, im, lb));
  int counts[4] = {0, 0, 0, 0};
  for (int k = 0; k < SCENES; k++) {
    const uint8_t *a = im + (size_t)k * SH * SW, *b = lb + (size_t)k * SH * SW;
    int nz = 0;
    for (int p = 0; p < SH * SW; p++) {
      assert_true((a[p] != 0) == (b[p] != 0));
      assert_true(b[p] <= 3);
      nz += a[p] != 0;
    }
    assert_int_equal(nz % (S * S), 0);
    int items = nz / (S * S);
    assert_true(items >= 1 && items <= 3);
    counts[items]++;
    /* each item's block: its top-left corner is a nonzero pixel with zero (or the edge) above and to its left
     * within the block's column and row; every pixel of the block carries one label */
    for (int y = 0; y + S <= SH; y++)
      for (int x = 0; x + S <= SW; x++) {
        if (!a[y * SW + x] || (y && a[(y - 1) * SW + x]) || (x && a[y * SW + x - 1])) continue;
        for (int u = 0; u < S; u++)
          for (int v = 0; v < S; v++) assert_int_equal(b[(y + u) * SW + x + v], b[y * SW + x]);
      }
  }
  assert_true(counts[1] > 0 && counts[2] > 0 && counts[3] > 0); /* one to three items, each seen */
  TU_OK(lam_data_segment(&src, SCENES, SH, SW, 5, im2, lb2));
  assert_memory_equal(im, im2, sizeof im), assert_memory_equal(lb, lb2, sizeof lb);
  TU_OK(lam_data_segment(&src, SCENES, SH, SW, 6, im2, lb2));
  assert_true(memcmp(im, im2, sizeof im) != 0);
  /* refusals, each naming what is wrong */
  TU_EXPECT_STATUS(lam_data_segment(NULL, 1, SH, SW, 1, im, lb), LAM_ERR_INVALID_ARG);
  TU_EXPECT_STATUS(lam_data_segment(&src, 1, 3, SW, 1, im, lb), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "does not hold"));
  lam_dataset bad = src;
  bad.c = 3;
  TU_EXPECT_STATUS(lam_data_segment(&bad, 1, SH, SW, 1, im, lb), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "channels"));
  bad = src, bad.label_h = S, bad.label_w = S;
  TU_EXPECT_STATUS(lam_data_segment(&bad, 1, SH, SW, 1, im, lb), LAM_ERR_INVALID_ARG);
  bad = src, bad.w = S - 1;
  TU_EXPECT_STATUS(lam_data_segment(&bad, 1, SH, SW, 1, im, lb), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "square"));
  bad = src, bad.classes = 255;
  TU_EXPECT_STATUS(lam_data_segment(&bad, 1, SH, SW, 1, im, lb), LAM_ERR_INVALID_ARG);
}

/* Clips from items of one value each (image i is all i + 1): in a frame without overlap each item shows as its
 * s x s block; the block that moves between frames 0 and 1 is the labelled one's class, the other stays put
 * the whole clip; the same seed gives the same bytes. */
static void test_data_clips(void **state) {
  (void)state;
  enum { S = 2, SN = 12, T = 6, CH = 20, CW = 22, CLIPS = 80 };
  uint8_t pix[SN * S * S], lab[SN];
  for (int i = 0; i < SN * S * S; i++) pix[i] = (uint8_t)(i / (S * S) + 1);
  for (int i = 0; i < SN; i++) lab[i] = (uint8_t)(i % 4);
  lam_dataset src = {.n = SN, .h = S, .w = S, .classes = 4, .images = pix, .labels = lab, .c = 1};
  static uint8_t c1[CLIPS * T * CH * CW], l1[CLIPS], c2[CLIPS * T * CH * CW], l2[CLIPS];
  TU_OK(lam_data_clips(&src, CLIPS, T, CH, CW, 3, c1, l1));
  TU_OK(lam_data_clips(&src, CLIPS, T, CH, CW, 3, c2, l2));
  assert_memory_equal(c1, c2, sizeof c1), assert_memory_equal(l1, l2, sizeof l1);
  int checked = 0;
  for (int k = 0; k < CLIPS; k++) {
    const uint8_t *f0 = c1 + (size_t)k * T * CH * CW, *f1 = f0 + CH * CW;
    int n0 = 0, n1 = 0;
    for (int p = 0; p < CH * CW; p++) n0 += f0[p] != 0, n1 += f1[p] != 0;
    assert_true(l1[k] < 4);
    if (n0 != 2 * S * S || n1 != 2 * S * S) continue; /* the items overlap in one of the two frames */
    int moved = -1, still = -1;
    for (int p = 0; p < CH * CW; p++)
      if (f0[p] && f1[p] != f0[p]) moved = f0[p] - 1; /* where its block was, it is no more */
    for (int p = 0; p < CH * CW; p++)
      if (f0[p] && f0[p] - 1 != moved) still = f0[p] - 1;
    assert_true(moved >= 0 && still >= 0 && moved != still);
    assert_int_equal(l1[k], lab[moved]);
    assert_true(lab[still] != lab[moved]); /* two classes */
    for (int t = 1; t < T; t++) /* the still one's pixels are there in every frame (unless the other covers them) */
      for (int p = 0; p < CH * CW; p++)
        if (f0[p] == still + 1) assert_true(f0[(size_t)t * CH * CW + p] >= still + 1);
    checked++;
  }
  assert_true(checked > CLIPS / 2);
  lam_dataset one = src;
  uint8_t same[SN];
  memset(same, 2, sizeof same);
  one.labels = same;
  TU_EXPECT_STATUS(lam_data_clips(&one, 1, T, CH, CW, 1, c1, l1), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "one class"));
  TU_EXPECT_STATUS(lam_data_clips(&src, 1, 0, CH, CW, 1, c1, l1), LAM_ERR_INVALID_ARG);
  TU_EXPECT_STATUS(lam_data_clips(&src, 1, T, S + 2, CW, 1, c1, l1), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "room to move"));
}

/* ---- image files and image folders (src/data/image.c, folder.c) ---- */

static int have_images(void) { return (lam_image_formats() & 3) == 3; }

/* Writes px (h, w, c) encoded as kind to path. */
static void write_image(const char *path, int kind, const uint8_t *px, int h, int w, int c) {
  uint8_t *buf;
  size_t len;
  TU_OK(image_encode(kind, px, h, w, c, &buf, &len));
  write_bytes(path, 0, buf, len);
  free(buf);
}

/* PNG is lossless both ways, grey and colour; JPEG decodes to the size and channels written and near the
 * values (a smooth image at quality 90); the format is told by content, not by name. */
static void test_image_roundtrip(void **state) {
  (void)state;
  if (!have_images()) skip();
  enum { IH = 7, IW = 13 };
  uint8_t rgb[IH * IW * 3], grey[IH * IW];
  for (int i = 0; i < IH * IW * 3; i++) rgb[i] = (uint8_t)(i * 53 % 251);
  for (int i = 0; i < IH * IW; i++) grey[i] = (uint8_t)(i * 29 % 256);
  data_image im;
  write_image(path_of("rt.png"), IMAGE_PNG, rgb, IH, IW, 3);
  TU_OK(image_read(path_of("rt.png"), &im));
  assert_true(im.h == IH && im.w == IW && im.c == 3);
  assert_memory_equal(im.px, rgb, sizeof rgb);
  free(im.px);
  write_image(path_of("rt-grey.jpg"), IMAGE_PNG, grey, IH, IW, 1); /* a PNG named .jpg */
  TU_OK(image_read(path_of("rt-grey.jpg"), &im));
  assert_true(im.c == 1);
  assert_memory_equal(im.px, grey, sizeof grey);
  free(im.px);
  uint8_t smooth[32 * 24 * 3];
  for (int y = 0; y < 24; y++)
    for (int x = 0; x < 32; x++)
      for (int q = 0; q < 3; q++) smooth[(y * 32 + x) * 3 + q] = (uint8_t)(40 + 4 * x + 3 * y + 20 * q);
  write_image(path_of("rt.jpg"), IMAGE_JPEG, smooth, 24, 32, 3);
  TU_OK(image_read(path_of("rt.jpg"), &im));
  assert_true(im.h == 24 && im.w == 32 && im.c == 3);
  double err = 0;
  for (size_t i = 0; i < sizeof smooth; i++) err += fabs((double)im.px[i] - smooth[i]);
  assert_true(err / sizeof smooth < 3.0);
  free(im.px);
}

/* Each bad file is LAM_ERR_IO naming it: empty, not an image, a truncated PNG, a PNG with a damaged
 * stream, a truncated JPEG (libjpeg would pad it with grey), a JPEG without its scan. */
static void test_image_bad(void **state) {
  (void)state;
  if (!have_images()) skip();
  uint8_t rgb[20 * 20 * 3];
  for (size_t i = 0; i < sizeof rgb; i++) rgb[i] = (uint8_t)(i * 7 % 256);
  uint8_t *png, *jpg;
  size_t npng, njpg;
  TU_OK(image_encode(IMAGE_PNG, rgb, 20, 20, 3, &png, &npng));
  TU_OK(image_encode(IMAGE_JPEG, rgb, 20, 20, 3, &jpg, &njpg));
  struct {
    const char *name;
    const uint8_t *p;
    size_t n;
    int flip; /* a byte flipped at this offset (0: none) */
  } cases[] = {{"bad-empty.png", png, 0, 0},        {"bad-text.png", (const uint8_t *)"hello, world", 12, 0},
               {"bad-cut.png", png, npng / 2, 0},   {"bad-stream.png", png, npng, (int)npng / 2},
               {"bad-cut.jpg", jpg, njpg * 2 / 3, 0}, {"bad-head.jpg", jpg, 200, 0}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    uint8_t *b = malloc(cases[k].n + 1);
    memcpy(b, cases[k].p, cases[k].n);
    if (cases[k].flip) b[cases[k].flip] ^= 0x5a;
    const char *path = path_of(cases[k].name);
    write_bytes(path, 0, b, cases[k].n);
    free(b);
    data_image im;
    TU_EXPECT_STATUS(image_read(path, &im), LAM_ERR_IO);
    assert_null(im.px);
    if (!strstr(lam_last_error(), path)) fail_msg("%s: the message does not name the file: %s", cases[k].name, lam_last_error());
  }
  free(png), free(jpg);
  data_image im;
  TU_EXPECT_STATUS(image_read(path_of("no-such.png"), &im), LAM_ERR_IO);
}

/* Reads the whole file at path (a reference from tests/ref/png) into *buf; its length. */
static size_t read_ref(const char *path, uint8_t **buf) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s (tests/ref/png/make_png_ref.py writes it)", path);
  *buf = malloc(1 << 16);
  size_t n = fread(*buf, 1, 1 << 16, f);
  fclose(f);
  return n;
}

/* Every PNG colour type and bit depth decoded as Pillow (and torchvision through it) reads it: 16-bit samples
 * by their high byte with no gamma (0x1234 -> 18; the simplified API went through linear light: 76), alpha
 * dropped keeping the colour under it (not composited onto black), palettes (with tRNS) as their colours,
 * 1/2/4-bit grey scaled to 0..255, Adam7; both as the file's own channels (image_read) and converted to the
 * other count (lam_image_load: grey to RGB the same value thrice, RGB to grey Pillow's convert("L") luma). The
 * files and Pillow's pixels are tests/ref/png (make_png_ref.py says how they were made). */
static void test_png_like_pil(void **state) {
  (void)state;
  if (!(lam_image_formats() & IMAGE_PNG)) skip();
  static const struct {
    const char *name;
    int c; /* the channels image_read gives */
  } cases[] = {{"grey1", 1},       {"grey2", 1},          {"grey4", 1},         {"grey8_trns", 1},
               {"grey16", 1},      {"grey16_gama", 1},    {"greyalpha8", 1},    {"greyalpha16", 1},
               {"rgb8_gama", 3},   {"rgb8_trns", 3},      {"rgb8_adam7", 3},    {"rgb16", 3},
               {"rgb16_gama", 3},  {"rgba8", 3},          {"rgba8_clear", 3},   {"rgba16", 3},
               {"palette2", 3},    {"palette4", 3},       {"palette8_trns", 3}};
  int bad = 0;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    char f[512];
    uint8_t *want[2];
    snprintf(f, sizeof f, "%s/%s.L", LAMINA_TEST_PNG_DIR, cases[k].name);
    size_t nl = read_ref(f, &want[0]);
    snprintf(f, sizeof f, "%s/%s.RGB", LAMINA_TEST_PNG_DIR, cases[k].name);
    size_t nrgb = read_ref(f, &want[1]);
    snprintf(f, sizeof f, "%s/%s.png", LAMINA_TEST_PNG_DIR, cases[k].name);
    data_image im;
    TU_OK(image_read(f, &im));
    if (im.c != cases[k].c || (size_t)im.h * im.w != nl || nrgb != 3 * nl)
      fail_msg("%s: %dx%d of %d channels, want %d channels and %zu pixels", cases[k].name, im.w, im.h, im.c,
               cases[k].c, nl);
    const uint8_t *ref = want[im.c == 3];
    int here = 0; /* differences in this file: the first 3 shown */
    for (size_t i = 0; i < nl * im.c; i++)
      if (im.px[i] != ref[i] && here++ < 3)
        print_message("%s: byte %zu (pixel %zu) is %d, Pillow's %d\n", cases[k].name, i, i / im.c, im.px[i], ref[i]);
    for (int c = 1; c <= 3; c += 2) { /* CHW, fitted to its own size (a copy) */
      uint8_t *out = malloc(nl * c);
      TU_OK(lam_image_load(f, c, im.h, im.w, out));
      for (size_t p = 0; p < nl; p++)
        for (int q = 0; q < c; q++)
          if (out[q * nl + p] != want[c == 3][p * c + q] && here++ < 3)
            print_message("%s as %d channel%s: pixel %zu channel %d is %d, Pillow's %d\n", cases[k].name, c,
                          c == 1 ? "" : "s", p, q, out[q * nl + p], want[c == 3][p * c + q]);
      free(out);
    }
    bad += here;
    free(im.px), free(want[0]), free(want[1]);
  }
  assert_int_equal(bad, 0);
}

#ifdef LAMINA_TEST_JPEG
/* A JPEG of h x w x c (1 or 3, 4:4:4) of a smooth picture, progressive by libjpeg's own script, or by
 * script (n scans) where given; *len bytes, malloc'd. */
static uint8_t *progressive_jpeg(int h, int w, int c, const jpeg_scan_info *script, int n, size_t *len) {
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
static void jpeg_claim(uint8_t *b, size_t n, int h, int w) {
  for (size_t i = 2; i + 8 < n; i++)
    if (b[i] == 0xff && (b[i + 1] == 0xc0 || b[i + 1] == 0xc1 || b[i + 1] == 0xc2)) {
      b[i + 5] = (uint8_t)(h >> 8), b[i + 6] = (uint8_t)h, b[i + 7] = (uint8_t)(w >> 8), b[i + 8] = (uint8_t)w;
      return;
    }
  fail_msg("no frame header in the JPEG written");
}

/* The refusal of one bomb: LAM_ERR_IO naming the file and each of words, within seconds (they took minutes
 * and gigabytes: 8.4 GB and 50 s for the first). th x tw: decoded to be fitted to it (0: as it is). */
static void expect_bomb(const char *what, const uint8_t *b, size_t n, int th, int tw, const char *w1, const char *w2) {
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

/* Decompression bombs (issue 30, finding 5), each refused from its header before the decoder allocates: a
 * progressive grey JPEG of 65500x65500 in some hundred bytes (8.4 GB of coefficients), a colour one of
 * 60000x60000 (21 GB), a 30000x30000 colour one within the pixel bound of a fitted JPEG but whose coefficients
 * are over libjpeg's memory bound, a small JPEG of 568 scans, and a PNG whose header claims more than its bytes
 * can inflate to. A fitted JPEG below the bounds still decodes (smaller, by DCT scaling). */
static void test_image_bombs(void **state) {
  (void)state;
#ifndef LAMINA_TEST_JPEG
  skip();
#else
  if (!have_images()) skip();
  size_t n;
  uint8_t *b = progressive_jpeg(8, 8, 1, NULL, 0, &n);
  jpeg_claim(b, n, 65500, 65500);
  int jh = 0, jw = 0; /* the header walk that keeps such a file from nvJPEG */
  assert_true(image_jpeg_size(b, n, &jh, &jw) && jh == 65500 && jw == 65500);
  assert_false(image_jpeg_size(b, 40, &jh, &jw)); /* cut before its frame header */
  expect_bomb("grey progressive 65500x65500", b, n, 0, 0, "65500x65500", "--size");
  expect_bomb("grey progressive 65500x65500, to be fitted", b, n, 32, 32, "65500x65500", "million");
  free(b);
  b = progressive_jpeg(16, 16, 3, NULL, 0, &n);
  jpeg_claim(b, n, 60000, 60000);
  expect_bomb("colour progressive 60000x60000", b, n, 0, 0, "60000x60000", NULL);
  expect_bomb("colour progressive 60000x60000, to be fitted", b, n, 224, 224, "60000x60000", "million");
  jpeg_claim(b, n, 30000, 30000);
  expect_bomb("colour progressive 30000x30000, to be fitted", b, n, 224, 224, "30000x30000", "MiB");
  free(b);
  b = progressive_jpeg(16, 16, 3, NULL, 0, &n); /* the bounds leave a real one alone */
  const char *ok = path_of("progressive.jpg");
  write_bytes(ok, 0, b, n);
  data_image im;
  TU_OK(image_read(ok, &im));
  assert_true(im.h == 16 && im.w == 16 && im.c == 3);
  free(im.px), free(b);
  /* 568 scans of a 64x64 grey image: every AC coefficient alone, by successive approximation from bit 8 */
  static jpeg_scan_info script[1 + 63 * 9];
  int k = 0;
  script[k++] = (jpeg_scan_info){1, {0}, 0, 0, 0, 0};
  for (int coef = 1; coef < 64; coef++)
    for (int al = 8; al >= 0; al--) script[k++] = (jpeg_scan_info){1, {0}, coef, coef, al == 8 ? 0 : al + 1, al};
  b = progressive_jpeg(64, 64, 1, script, k, &n);
  expect_bomb("568 scans", b, n, 0, 0, "scans", NULL);
  free(b);
  /* a PNG of 4000x4000 claimed by a header and a few bytes of IDAT */
  uint8_t grey[16] = {0};
  uint8_t *png;
  size_t npng;
  TU_OK(image_encode(IMAGE_PNG, grey, 4, 4, 1, &png, &npng));
  for (int i = 0; i < 4; i++) png[16 + i] = (uint8_t)(4000 >> (24 - 8 * i)), png[20 + i] = (uint8_t)(4000 >> (24 - 8 * i));
  uLong crc = crc32(0, png + 12, 17); /* IHDR's type and data */
  for (int i = 0; i < 4; i++) png[29 + i] = (uint8_t)(crc >> (24 - 8 * i));
  const char *pp = path_of("bomb.png");
  write_bytes(pp, 0, png, npng);
  TU_EXPECT_STATUS(image_read(pp, &im), LAM_ERR_IO);
  if (!strstr(lam_last_error(), pp) || !strstr(lam_last_error(), "more than its"))
    fail_msg("a PNG claiming 4000x4000: %s", lam_last_error());
  free(png);
#endif
}

/* The fit: a copy at the same size; halving a side averages pairs (area); doubling is bilinear; a wide image
 * fitted to a square keeps its middle columns. */
static void test_image_fit(void **state) {
  (void)state;
  uint8_t src[4 * 4], out[16 * 16];
  for (int i = 0; i < 16; i++) src[i] = (uint8_t)(i * 16);
  data_image im = {4, 4, 1, src};
  image_fit(&im, 4, 4, out);
  assert_memory_equal(out, src, 16);
  image_fit(&im, 2, 2, out); /* each output the mean of a 2x2 block */
  for (int y = 0; y < 2; y++)
    for (int x = 0; x < 2; x++) {
      int s = src[(2 * y) * 4 + 2 * x] + src[(2 * y) * 4 + 2 * x + 1] + src[(2 * y + 1) * 4 + 2 * x] + src[(2 * y + 1) * 4 + 2 * x + 1];
      assert_int_equal(out[y * 2 + x], (s + 2) / 4);
    }
  uint8_t two[4] = {0, 100, 200, 40};
  data_image t = {2, 2, 1, two};
  image_fit(&t, 4, 4, out); /* corners keep the corner values; between them, the linear blend */
  assert_int_equal(out[0], 0), assert_int_equal(out[3], 100), assert_int_equal(out[12], 200), assert_int_equal(out[15], 40);
  assert_int_equal(out[1], 25); /* 0.75 * 0 + 0.25 * 100 */
  uint8_t wide[4 * 8];
  for (int i = 0; i < 32; i++) wide[i] = (uint8_t)i;
  data_image w8 = {4, 8, 1, wide};
  image_fit(&w8, 4, 4, out); /* scale 1: columns 2..5 */
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 4; x++) assert_int_equal(out[y * 4 + x], wide[y * 8 + 2 + x]);
}

/* image_fit (taps and spans made once a row and a column) against fit_sample pixel by pixel, the definition the
 * nvJPEG kernel fits with: random images of 1 and 3 channels, shrunk, grown, and both at once, every pixel. */
static void test_image_fit_tables(void **state) {
  (void)state;
  static const int sizes[][4] = {{320, 320, 256, 256}, {375, 500, 224, 224}, {37, 53, 64, 48}, {100, 30, 40, 90},
                                 {513, 257, 7, 5},     {9, 9, 31, 17},       {64, 84, 64, 84}};
  uint64_t r = 0x5eedULL;
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
    for (int c = 1; c <= 3; c += 2) {
      const int h = sizes[k][0], w = sizes[k][1], H = sizes[k][2], W = sizes[k][3];
      uint8_t *px = malloc((size_t)h * w * c), *out = malloc((size_t)H * W * c);
      assert_non_null(px), assert_non_null(out);
      for (size_t i = 0; i < (size_t)h * w * c; i++) r = r * 6364136223846793005ULL + 1442695040888963407ULL, px[i] = (uint8_t)(r >> 56);
      data_image im = {h, w, c, px};
      image_fit(&im, H, W, out);
      double scale, oy, ox;
      fit_geometry(h, w, H, W, &scale, &oy, &ox);
      for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
          for (int q = 0; q < c; q++)
            if (out[((size_t)y * W + x) * c + q] != fit_sample(px, h, w, c, scale, y + oy, x + ox, q))
              fail_msg("%dx%dx%d to %dx%d: pixel (%d, %d, %d) is %d, fit_sample says %d", h, w, c, H, W, y, x, q,
                       out[((size_t)y * W + x) * c + q], fit_sample(px, h, w, c, scale, y + oy, x + ox, q));
      free(px), free(out);
    }
}

/* A small MNIST-like source: 30 grey 6x5 images of 3 classes. */
static lam_dataset *tiny_source(void) {
  static uint8_t px[30 * 30], lab[30];
  for (int i = 0; i < 30 * 30; i++) px[i] = (uint8_t)(i * 91 % 256);
  for (int i = 0; i < 30; i++) lab[i] = (uint8_t)(i * 7 % 3);
  static lam_dataset d;
  d = (lam_dataset){.n = 30, .h = 6, .w = 5, .classes = 3, .images = px, .labels = lab, .c = 1};
  return &d;
}

/* An image folder made by lam_data_images_part, loaded back: classes from the folders, each image the file's
 * pixels (NCHW), labels the folder's class; the cache written, then read, then renewed when a file changes
 * (the old key's files removed). */
static void test_image_folder(void **state) {
  (void)state;
  if (!have_images()) skip();
  const lam_dataset *src = tiny_source();
  char root[256], part[300];
  snprintf(root, sizeof root, "%s/folder", g_dir);
  assert_int_equal(mkdir(root, 0777), 0);
  snprintf(part, sizeof part, "%s/train", root), assert_int_equal(mkdir(part, 0777), 0);
  TU_OK(lam_data_images_part(src, 30, 9, 1, part));
  snprintf(part, sizeof part, "%s/test", root), assert_int_equal(mkdir(part, 0777), 0);
  TU_OK(lam_data_images_part(src, 12, 10, 1, part));
  assert_true(lam_dataset_is_image_folder(root));
  lam_image_opts o = {0};
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_images(root, 1, &o, &d));
  assert_true(d->n == 30 && d->c == 3 && d->h == 6 && d->w == 5 && d->classes == 3);
  assert_true(o.cache_written && !o.cache_hit && o.skipped == 0);
  /* in class order, each class's files by name: image k of the set is the k-th file in that order */
  size_t k = 0;
  for (int cls = 0; cls < 3; cls++)
    for (int i = 0; i < 30; i++) {
      if (src->labels[i] != cls) continue;
      char f[400];
      snprintf(f, sizeof f, "%s/train/%d/%06d.png", root, cls, i);
      data_image im;
      TU_OK(image_read(f, &im));
      assert_int_equal(d->labels[k], cls);
      for (int p = 0; p < 30; p++)
        for (int q = 0; q < 3; q++) assert_int_equal(d->images[(k * 3 + q) * 30 + p], im.px[p * 3 + q]);
      free(im.px);
      k++;
    }
  assert_int_equal(k, 30);
  lam_dataset *again = NULL;
  TU_OK(lam_dataset_load_images(root, 1, &o, &again));
  assert_true(o.cache_hit);
  assert_true(again->n == d->n && again->c == 3 && again->classes == 3);
  assert_memory_equal(again->images, d->images, d->n * 90);
  assert_memory_equal(again->labels, d->labels, d->n);
  lam_dataset_free(again);
  lam_dataset *viaload = NULL; /* lam_dataset_load takes the folder too */
  TU_OK(lam_dataset_load(root, 0, &viaload));
  assert_true(viaload->n == 12 && viaload->classes == 3 && viaload->c == 3);
  lam_dataset_free(viaload);
  char f[400];
  snprintf(f, sizeof f, "%s/train/0/000000.png", root);
  struct timespec ts[2] = {{0, UTIME_NOW}, {12345, 0}};
  assert_int_equal(utimensat(AT_FDCWD, f, ts, 0), 0); /* a file changed: its time */
  TU_OK(lam_dataset_load_images(root, 1, &o, &again));
  assert_true(!o.cache_hit && o.cache_written);
  lam_dataset_free(again);
  char cache[300];
  snprintf(cache, sizeof cache, "%s/.lamina-cache", root);
  DIR *dh = opendir(cache);
  assert_non_null(dh);
  int train_files = 0;
  for (struct dirent *e; (e = readdir(dh)) != NULL;) train_files += !strncmp(e->d_name, "train-", 6);
  closedir(dh);
  assert_int_equal(train_files, 2); /* the new key's images and labels; the old ones removed */
  lam_dataset_free(d);
}

/* A mask folder (generic layout): recognised before class folders; masks fitted by nearest neighbour (every label
 * one the mask has, at twice the size each mask pixel a 2x2 block), images as image folders fit them;
 * reduce_zero_label and a label map change the classes. */
static void test_mask_folder(void **state) {
  (void)state;
  if (!have_images()) skip();
  char root[256], p[400];
  snprintf(root, sizeof root, "%s/masks", g_dir);
  assert_int_equal(mkdir(root, 0777), 0);
  const char *dirs[] = {"train", "train/images", "train/masks", "val", "val/images", "val/masks"};
  for (int i = 0; i < 6; i++) snprintf(p, sizeof p, "%s/%s", root, dirs[i]), assert_int_equal(mkdir(p, 0777), 0);
  enum { H = 4, W = 6 };
  static const uint8_t vals[4] = {0, 3, 7, 255};
  uint8_t img[H * W], msk[H * W];
  for (int q = 0; q < H * W; q++) img[q] = (uint8_t)(q * 10), msk[q] = vals[(q / W + q % W) % 4];
  const char *files[] = {"train/images/a.png", "train/masks/a.png", "val/images/b.png", "val/masks/b.png"};
  for (int i = 0; i < 4; i++) snprintf(p, sizeof p, "%s/%s", root, files[i]), write_image(p, IMAGE_PNG, i % 2 ? msk : img, H, W, 1);
  assert_int_equal(lam_dataset_mask_folder_layout(root), LAM_MASKS_GENERIC);
  assert_int_equal(lam_dataset_image_folder_layout(root), LAM_FOLDER_SPLIT);
  lam_image_opts o = {0};
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_images(root, 1, &o, &d)); /* the image-folder entry takes it to the mask reader */
  assert_true(d->n == 1 && d->h == H && d->w == W && d->c == 1 && d->label_h == H && d->label_w == W && d->classes == 8);
  assert_memory_equal(d->labels, msk, sizeof msk);
  assert_memory_equal(d->images, img, sizeof img);
  lam_dataset_free(d), d = NULL;
  lam_image_opts twice = {.h = 2 * H, .w = 2 * W};
  TU_OK(lam_dataset_load_masks(root, 0, &twice, &d));
  for (int y = 0; y < 2 * H; y++)
    for (int x = 0; x < 2 * W; x++) assert_int_equal(d->labels[y * 2 * W + x], msk[(y / 2) * W + x / 2]);
  lam_dataset_free(d), d = NULL;
  lam_image_opts odd = {.h = 3, .w = 5}; /* shrunk: every label still one of the mask's, never a blend */
  TU_OK(lam_dataset_load_masks(root, 1, &odd, &d));
  int seen[4] = {0};
  for (int q = 0; q < 15; q++) {
    int k = 0;
    while (k < 4 && vals[k] != d->labels[q]) k++;
    assert_true(k < 4);
    seen[k] = 1;
  }
  assert_true(seen[0] + seen[1] + seen[2] + seen[3] >= 3);
  lam_dataset_free(d), d = NULL;
  lam_image_opts rz = {.reduce_zero_label = 1}; /* 0 -> 255, 3 -> 2, 7 -> 6, 255 stays */
  TU_OK(lam_dataset_load_masks(root, 1, &rz, &d));
  assert_int_equal(d->classes, 7);
  for (int q = 0; q < H * W; q++) assert_int_equal(d->labels[q], msk[q] == 0 || msk[q] == 255 ? 255 : msk[q] - 1);
  lam_dataset_free(d), d = NULL;
  snprintf(p, sizeof p, "%s/map.txt", root);
  const char *text = "# raw new\n7 1\n3 0\n";
  write_bytes(p, 0, text, strlen(text));
  uint8_t map[256];
  TU_OK(lam_label_map_read(p, map));
  assert_true(map[7] == 1 && map[3] == 0 && map[0] == 255 && map[255] == 255);
  lam_image_opts lm = {.label_map = map};
  TU_OK(lam_dataset_load_masks(root, 1, &lm, &d));
  assert_int_equal(d->classes, 2);
  for (int q = 0; q < H * W; q++) assert_int_equal(d->labels[q], msk[q] == 7 ? 1 : msk[q] == 3 ? 0 : 255);
  lam_dataset_free(d);
}

/* What an image folder refuses, each naming the file and saying what to do; --skip-bad; --size. */
static void test_image_folder_errors(void **state) {
  (void)state;
  if (!have_images()) skip();
  const lam_dataset *src = tiny_source();
  char root[256], part[300], f[400];
  snprintf(root, sizeof root, "%s/bad", g_dir);
  assert_int_equal(mkdir(root, 0777), 0);
  snprintf(part, sizeof part, "%s/train", root), assert_int_equal(mkdir(part, 0777), 0);
  TU_OK(lam_data_images_part(src, 30, 1, 1, part));
  lam_image_opts o = {.cache = ""};
  lam_dataset *d = NULL;
  /* another size without --size; with it, every image fitted */
  uint8_t big[9 * 8 * 3];
  memset(big, 200, sizeof big);
  snprintf(f, sizeof f, "%s/train/2/zz-big.png", root);
  write_image(f, IMAGE_PNG, big, 9, 8, 3);
  TU_EXPECT_STATUS(lam_dataset_load_images(root, 1, &o, &d), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), f)), assert_non_null(strstr(lam_last_error(), "--size"));
  lam_image_opts fit = {.h = 4, .w = 4, .cache = ""};
  TU_OK(lam_dataset_load_images(root, 1, &fit, &d));
  assert_true(d->n == 31 && d->h == 4 && d->w == 4 && d->c == 3);
  lam_dataset_free(d), d = NULL;
  unlink(f);
  /* a damaged file: an error naming it; with skip_bad left out and counted */
  snprintf(f, sizeof f, "%s/train/0/zz-bad.png", root);
  write_bytes(f, 0, "\x89PNG\r\n\x1a\n garbage", 17);
  TU_EXPECT_STATUS(lam_dataset_load_images(root, 1, &o, &d), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), f));
  lam_image_opts skip = {.cache = "", .skip_bad = 1};
  TU_OK(lam_dataset_load_images(root, 1, &skip, &d));
  assert_true(d->n == 30 && skip.skipped == 1);
  lam_dataset_free(d), d = NULL;
  /* a test class the training part does not have */
  snprintf(part, sizeof part, "%s/test/7", root);
  char t[300];
  snprintf(t, sizeof t, "%s/test", root), assert_int_equal(mkdir(t, 0777), 0), assert_int_equal(mkdir(part, 0777), 0);
  TU_EXPECT_STATUS(lam_dataset_load_images(root, 0, &skip, &d), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), "not one of the training classes"));
  /* a folder without class folders */
  snprintf(root, sizeof root, "%s/empty", g_dir);
  assert_int_equal(mkdir(root, 0777), 0);
  snprintf(part, sizeof part, "%s/train", root), assert_int_equal(mkdir(part, 0777), 0);
  TU_EXPECT_STATUS(lam_dataset_load_images(root, 1, &o, &d), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), "class folders"));
}

/* Image folders as users have them (issue 30, finding 13a): grey JPEGs in a colour set (ImageNet, Caltech) and a
 * colour image in a grey set are converted to the set's channels, which are those of most of its images (a tie:
 * colour), wherever the odd one is in the order: grey to colour the value thrice, colour to grey Pillow's luma.
 * Counted in opts->converted. */
static void test_image_folder_mixed(void **state) {
  (void)state;
  if (!have_images()) skip();
  char root[256], f[400];
  snprintf(root, sizeof root, "%s/mixed", g_dir);
  assert_int_equal(mkdir(root, 0777), 0);
  snprintf(f, sizeof f, "%s/train", root), assert_int_equal(mkdir(f, 0777), 0);
  snprintf(f, sizeof f, "%s/train/a", root), assert_int_equal(mkdir(f, 0777), 0);
  snprintf(f, sizeof f, "%s/train/b", root), assert_int_equal(mkdir(f, 0777), 0);
  enum { S = 6 * 5 };
  uint8_t grey[S], rgb[4][S * 3];
  for (int i = 0; i < S; i++) grey[i] = (uint8_t)(7 * i + 3);
  for (int k = 0; k < 4; k++)
    for (int i = 0; i < S * 3; i++) rgb[k][i] = (uint8_t)(i * (11 + k) % 251);
  /* colour a/1..a/4 and b/9, grey PNG a/0 (first in the order) and b/8: colour wins 5 to 2 */
  for (int k = 0; k < 4; k++) {
    snprintf(f, sizeof f, "%s/train/a/%d.png", root, k + 1);
    write_image(f, IMAGE_PNG, rgb[k], 6, 5, 3);
  }
  snprintf(f, sizeof f, "%s/train/b/9.png", root), write_image(f, IMAGE_PNG, rgb[0], 6, 5, 3);
  snprintf(f, sizeof f, "%s/train/a/0.png", root), write_image(f, IMAGE_PNG, grey, 6, 5, 1);
  snprintf(f, sizeof f, "%s/train/b/8.png", root), write_image(f, IMAGE_PNG, grey, 6, 5, 1);
  lam_image_opts o = {.cache = ""};
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_images(root, 1, &o, &d));
  assert_true(d->n == 7 && d->c == 3 && o.converted == 2);
  for (int q = 0; q < 3; q++) /* image 0 is a/0.png: grey in each channel */
    assert_memory_equal(d->images + (size_t)q * S, grey, S);
  for (int p = 0; p < S; p++) /* image 1 is a/1.png, as written */
    for (int q = 0; q < 3; q++) assert_int_equal(d->images[(size_t)(3 + q) * S + p], rgb[0][p * 3 + q]);
  lam_dataset_free(d), d = NULL;
  /* now mostly grey (a/1..a/4 grey too), the first image colour: grey wins, the colour ones by their luma */
  snprintf(f, sizeof f, "%s/train/a/0.png", root), write_image(f, IMAGE_PNG, rgb[1], 6, 5, 3);
  for (int k = 0; k < 4; k++) {
    snprintf(f, sizeof f, "%s/train/a/%d.png", root, k + 1);
    write_image(f, IMAGE_PNG, grey, 6, 5, 1);
  }
  TU_OK(lam_dataset_load_images(root, 1, &o, &d));
  assert_true(d->n == 7 && d->c == 1 && o.converted == 2);
  for (int p = 0; p < S; p++) assert_int_equal(d->images[p], image_luma(rgb[1] + 3 * p));
  assert_memory_equal(d->images + S, grey, S);
  lam_dataset_free(d), d = NULL;
  /* a tie (one of each in a class each): colour, as torchvision's loader converts everything to RGB */
  snprintf(root, sizeof root, "%s/tie", g_dir);
  assert_int_equal(mkdir(root, 0777), 0);
  snprintf(f, sizeof f, "%s/train", root), assert_int_equal(mkdir(f, 0777), 0);
  snprintf(f, sizeof f, "%s/train/a", root), assert_int_equal(mkdir(f, 0777), 0);
  snprintf(f, sizeof f, "%s/train/a/0.jpg", root), write_image(f, IMAGE_JPEG, grey, 6, 5, 1);
  snprintf(f, sizeof f, "%s/train/a/1.jpg", root), write_image(f, IMAGE_JPEG, rgb[2], 6, 5, 3);
  TU_OK(lam_dataset_load_images(root, 1, &o, &d));
  assert_true(d->n == 2 && d->c == 3 && o.converted == 1);
  lam_dataset_free(d);
}

/* Makes dir/rel (folders on the way too). */
static void mkdirs(const char *dir, const char *rel) {
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
static void grey_png(const char *dir, const char *rel, uint8_t v) {
  uint8_t px[30];
  memset(px, v, sizeof px);
  char f[512];
  snprintf(f, sizeof f, "%s/%s", dir, rel);
  write_image(f, IMAGE_PNG, px, 6, 5, 1);
}

/* The layouts users have (issue 30, finding 13c, d): flat DIR/CLASS/... (one part: both the training and the test
 * part, all of it), DIR/train + DIR/val (ImageNet's names; test/ first where it holds class folders), DIR/train
 * alone (its test part an error that says --val-split), a folder of the MNIST layout beside folders of images (not
 * an image folder); and an empty class folder, an error naming it, as in torchvision. */
static void test_image_folder_layouts(void **state) {
  (void)state;
  if (!have_images()) skip();
  char root[256];
  lam_image_opts o = {.cache = ""};
  lam_dataset *d = NULL;
  /* flat: 3 images of class a, 2 of class b */
  snprintf(root, sizeof root, "%s/flat", g_dir);
  mkdirs(root, "a"), mkdirs(root, "b");
  grey_png(root, "a/1.png", 10), grey_png(root, "a/2.png", 20), grey_png(root, "a/3.png", 30);
  grey_png(root, "b/1.png", 40), grey_png(root, "b/2.png", 50);
  assert_int_equal(lam_dataset_image_folder_layout(root), LAM_FOLDER_FLAT);
  assert_true(lam_dataset_is_image_folder(root));
  for (int train = 0; train < 2; train++) {
    TU_OK(lam_dataset_load_images(root, train, &o, &d));
    assert_true(d->n == 5 && d->classes == 2 && d->c == 1);
    assert_int_equal(d->labels[2], 0), assert_int_equal(d->labels[3], 1), assert_int_equal(d->images[3 * 30], 40);
    lam_dataset_free(d), d = NULL;
  }
  TU_OK(lam_dataset_load(root, 0, &d)); /* by lam_dataset_load, as --data gives it */
  assert_true(d->n == 5);
  lam_dataset_free(d), d = NULL;
  /* train/ + val/ */
  snprintf(root, sizeof root, "%s/imagenet", g_dir);
  mkdirs(root, "train/a"), mkdirs(root, "train/b"), mkdirs(root, "val/b");
  grey_png(root, "train/a/1.png", 1), grey_png(root, "train/b/1.png", 2), grey_png(root, "val/b/9.png", 99);
  assert_int_equal(lam_dataset_image_folder_layout(root), LAM_FOLDER_SPLIT);
  TU_OK(lam_dataset_load_images(root, 0, &o, &d));
  assert_true(d->n == 1 && d->classes == 2 && d->labels[0] == 1 && d->images[0] == 99);
  lam_dataset_free(d), d = NULL;
  mkdirs(root, "test"); /* a test/ without class folders (ImageNet's unlabelled one): val/ is still the test part */
  grey_png(root, "test/x.png", 7);
  TU_OK(lam_dataset_load_images(root, 0, &o, &d));
  assert_true(d->n == 1 && d->images[0] == 99);
  lam_dataset_free(d), d = NULL;
  /* train/ alone: the training part reads; the test part says how to get one */
  snprintf(root, sizeof root, "%s/trainonly", g_dir);
  mkdirs(root, "train/a");
  grey_png(root, "train/a/1.png", 1);
  assert_int_equal(lam_dataset_image_folder_layout(root), LAM_FOLDER_TRAIN_ONLY);
  TU_OK(lam_dataset_load_images(root, 1, &o, &d));
  lam_dataset_free(d), d = NULL;
  TU_EXPECT_STATUS(lam_dataset_load_images(root, 0, &o, &d), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), root)), assert_non_null(strstr(lam_last_error(), "--val-split"));
  /* the MNIST layout with a folder of pictures beside it: not an image folder */
  snprintf(root, sizeof root, "%s/mnist-and-pictures", g_dir);
  mkdirs(root, "pictures");
  grey_png(root, "pictures/1.png", 1);
  char f[512];
  snprintf(f, sizeof f, "%s/train-images-idx3-ubyte", root);
  write_images(f, 0, N, H, W, g_pix, PIX);
  assert_int_equal(lam_dataset_image_folder_layout(root), LAM_FOLDER_NONE);
  assert_false(lam_dataset_is_image_folder(g_dir)); /* nor a folder of no images */
  /* an empty class folder: an error naming it, in the split layout's training and test parts and in a flat one */
  snprintf(root, sizeof root, "%s/imagenet", g_dir);
  mkdirs(root, "train/c-empty");
  TU_EXPECT_STATUS(lam_dataset_load_images(root, 1, &o, &d), LAM_ERR_IO);
  assert_null(d);
  if (!strstr(lam_last_error(), "'c-empty'") || !strstr(lam_last_error(), "no .png"))
    fail_msg("an empty class folder: %s", lam_last_error());
  rmdir(strcat(strcpy(f, root), "/train/c-empty"));
  mkdirs(root, "val/a");
  TU_EXPECT_STATUS(lam_dataset_load_images(root, 0, &o, &d), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), "'a'"));
  snprintf(root, sizeof root, "%s/flat", g_dir);
  mkdirs(root, "z-empty");
  TU_EXPECT_STATUS(lam_dataset_load_images(root, 1, &o, &d), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), "'z-empty'"));
  /* so lam_data_images_part (lamina data images) makes no folder for a class its images lack: 2 images, 2 of 3 */
  snprintf(root, sizeof root, "%s/two-of-three", g_dir);
  mkdirs(root, "train");
  snprintf(f, sizeof f, "%s/train", root);
  TU_OK(lam_data_images_part(tiny_source(), 2, 1, IMAGE_PNG, f));
  TU_OK(lam_dataset_load_images(root, 1, &o, &d));
  assert_true(d->n == 2 && d->classes == 2);
  lam_dataset_free(d);
}

/* Images over DATA_MAX_SIDE a side (issue 30, finding 13b): refused as they are (the message says --size), read
 * when fitted to a size: a JPEG decoded smaller by libjpeg's DCT scaling, yet covering the size (4100x300 to 16x16:
 * 1/8, 513x38), a PNG whole; the fitted image near the source's own fit; lam_image_load (predict) alike. */
static void test_image_folder_large(void **state) {
  (void)state;
  if (!have_images()) skip();
  enum { LH = 300, LW = 4100 };
  uint8_t *src = malloc((size_t)LH * LW);
  for (int y = 0; y < LH; y++)
    for (int x = 0; x < LW; x++) src[(size_t)y * LW + x] = (uint8_t)(100 + 80 * sin(x / 700.0) + y / 10);
  char root[256], f[512];
  snprintf(root, sizeof root, "%s/large", g_dir);
  mkdirs(root, "train/a"), mkdirs(root, "train/b");
  snprintf(f, sizeof f, "%s/train/a/0.jpg", root);
  write_image(f, IMAGE_JPEG, src, LH, LW, 1);
  data_image im;
  TU_EXPECT_STATUS(image_read(f, &im), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), "--size"));
  TU_OK(image_read_fit(f, 16, 16, &im));
  assert_true(im.h == 38 && im.w == 513 && im.c == 1);
  free(im.px);
  uint8_t got[16 * 16], want[16 * 16];
  TU_OK(lam_image_load(f, 1, 16, 16, got));
  data_image whole = {LH, LW, 1, src};
  image_fit(&whole, 16, 16, want);
  double diff = 0;
  for (int i = 0; i < 256; i++) diff += abs((int)got[i] - (int)want[i]);
  print_message("4100x300 JPEG by DCT scaling, fitted to 16x16: mean |difference| from the source's fit %.2f\n", diff / 256);
  assert_true(diff / 256 < 4);
  uint8_t *wide = calloc((size_t)20 * 4200, 1);
  snprintf(f, sizeof f, "%s/train/a/1.png", root);
  write_image(f, IMAGE_PNG, wide, 20, 4200, 1);
  free(wide);
  grey_png(root, "train/b/2.png", 9);
  lam_image_opts o = {.cache = ""};
  lam_dataset *d = NULL;
  TU_EXPECT_STATUS(lam_dataset_load_images(root, 1, &o, &d), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), "0.jpg")), assert_non_null(strstr(lam_last_error(), "--size"));
  lam_image_opts fit = {.h = 16, .w = 16, .cache = ""};
  TU_OK(lam_dataset_load_images(root, 1, &fit, &d));
  assert_true(d->n == 3 && d->h == 16 && d->w == 16 && d->c == 1);
  assert_memory_equal(d->images, got, 256);
  lam_dataset_free(d);
  free(src);
}

/* Smooth 32x32 grey sources (JPEG's own kind of picture) for the decoders' comparison. */
static lam_dataset *smooth_source(void) {
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

/* JPEG folders decoded by nvJPEG (decoder GPU) against libjpeg (CPU): the same images and labels, pixels
 * within JPEG decoders' rounding; every bad file still an error naming it (they go to libjpeg); where the
 * build lacks nvJPEG or no GPU is present, asking for it is a clear error and the comparison skips. */
static void test_image_folder_decoders(void **state) {
  (void)state;
  if (!have_images()) skip();
  char root[256], part[300], f[400];
  snprintf(root, sizeof root, "%s/jpegs", g_dir);
  assert_int_equal(mkdir(root, 0777), 0);
  snprintf(part, sizeof part, "%s/train", root), assert_int_equal(mkdir(part, 0777), 0);
  TU_OK(lam_data_images_part(smooth_source(), 24, 5, IMAGE_JPEG, part));
  lam_dataset *cpu = NULL, *gpu = NULL;
  lam_image_opts oc = {.cache = "", .decoder = LAM_DECODE_CPU};
  TU_OK(lam_dataset_load_images(root, 1, &oc, &cpu));
  assert_true(cpu->n == 24 && cpu->c == 3 && oc.decoded_gpu == 0 && oc.decode_s > 0);
  lam_image_opts bad_opt = {.cache = "", .decoder = 7};
  TU_EXPECT_STATUS(lam_dataset_load_images(root, 1, &bad_opt, &gpu), LAM_ERR_INVALID_ARG);
  lam_image_opts og = {.cache = "", .decoder = LAM_DECODE_GPU};
  lam_status s = lam_dataset_load_images(root, 1, &og, &gpu);
  if (!lam_image_gpu_decode()) {
    assert_int_equal(s, LAM_ERR_UNSUPPORTED);
    assert_non_null(strstr(lam_last_error(), "without nvJPEG"));
    lam_image_opts oa = {.cache = ""}; /* auto: the host's decoder, the same pixels */
    TU_OK(lam_dataset_load_images(root, 1, &oa, &gpu));
    assert_memory_equal(gpu->images, cpu->images, 24 * 3 * 32 * 32);
    lam_dataset_free(gpu), lam_dataset_free(cpu);
    print_message("built without nvJPEG: the GPU decoder's comparison skipped\n");
    skip();
  }
  if (s == LAM_ERR_NO_DEVICE) {
    assert_non_null(strstr(lam_last_error(), "--decode gpu"));
    lam_dataset_free(cpu);
    print_message("no CUDA device: the GPU decoder's comparison skipped\n");
    skip();
  }
  TU_OK(s);
  if (og.decoded_gpu != 24) fail_msg("nvJPEG decoded %zu of the 24 JPEG files (LAMINA_NVJPEG_DEBUG=1 says why)", og.decoded_gpu);
  assert_true(gpu->n == 24 && gpu->c == 3 && gpu->h == 32 && gpu->w == 32);
  assert_memory_equal(gpu->labels, cpu->labels, 24);
  const size_t px = 24 * 3 * 32 * 32;
  double sum = 0;
  int worst = 0;
  for (size_t i = 0; i < px; i++) {
    int d = abs((int)gpu->images[i] - (int)cpu->images[i]);
    sum += d, worst = d > worst ? d : worst;
  }
  print_message("nvJPEG against libjpeg: mean |difference| %.3f, largest %d (of 255)\n", sum / px, worst);
  assert_true(sum / px < 2.0); /* IDCT and chroma upsampling are the decoders' own; the pictures are one */
  /* fitted to another size: on the GPU by the host's arithmetic (fit.h), so as near as the decoded images are */
  lam_dataset *fc = NULL, *fg = NULL;
  lam_image_opts fo_c = {.h = 20, .w = 44, .cache = "", .decoder = LAM_DECODE_CPU};
  lam_image_opts fo_g = {.h = 20, .w = 44, .cache = "", .decoder = LAM_DECODE_GPU};
  TU_OK(lam_dataset_load_images(root, 1, &fo_c, &fc));
  TU_OK(lam_dataset_load_images(root, 1, &fo_g, &fg));
  assert_true(fg->n == 24 && fg->h == 20 && fg->w == 44 && fo_g.decoded_gpu == 24);
  const size_t fpx = 24 * 3 * 20 * 44;
  double fsum = 0;
  for (size_t i = 0; i < fpx; i++) fsum += abs((int)fg->images[i] - (int)fc->images[i]);
  print_message("fitted to 20x44: mean |difference| %.3f\n", fsum / fpx);
  assert_true(fsum / fpx < 2.0);
  /* and the GPU's fit is the host's, bit for bit: nvJPEG's own 32x32 images fitted by image_fit */
  uint8_t hwc[32 * 32 * 3], want[20 * 44 * 3];
  for (size_t i = 0; i < 24; i++) {
    for (int p = 0; p < 32 * 32; p++)
      for (int q = 0; q < 3; q++) hwc[p * 3 + q] = gpu->images[(i * 3 + q) * 32 * 32 + p];
    data_image im = {32, 32, 3, hwc};
    image_fit(&im, 20, 44, want);
    for (int p = 0; p < 20 * 44; p++)
      for (int q = 0; q < 3; q++)
        if (fg->images[(i * 3 + q) * 20 * 44 + p] != want[p * 3 + q])
          fail_msg("image %zu pixel %d channel %d: the GPU's fit %d, the host's %d", i, p, q,
                   fg->images[(i * 3 + q) * 20 * 44 + p], want[p * 3 + q]);
  }
  lam_dataset_free(fc), lam_dataset_free(fg), lam_dataset_free(gpu), gpu = NULL;
  /* bad files, decoded with the GPU asked for: each an error naming the file, or skipped and counted */
  uint8_t *jpg;
  size_t njpg;
  uint8_t rgb[32 * 32 * 3], grey[32 * 32];
  for (size_t i = 0; i < sizeof rgb; i++) rgb[i] = (uint8_t)(100 + i % 50);
  memset(grey, 90, sizeof grey);
  TU_OK(image_encode(IMAGE_JPEG, rgb, 32, 32, 3, &jpg, &njpg));
  assert_true(njpg > 400); /* its tables alone are more: 200 bytes are a header cut short */
  struct {
    const char *name, *words;
    const uint8_t *p;
    size_t n;
    int kind; /* 0: the bytes as they are; 2: a 40x32 JPEG */
  } cases[] = {{"zz-cut.jpg", "JPEG", jpg, njpg * 2 / 3, 0}, {"zz-head.jpg", "JPEG", jpg, 200, 0},
               {"zz-big.jpg", "--size", NULL, 0, 2}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    snprintf(f, sizeof f, "%s/train/1/%s", root, cases[k].name);
    if (cases[k].kind == 2) {
      uint8_t big[40 * 32 * 3];
      memset(big, 120, sizeof big);
      write_image(f, IMAGE_JPEG, big, 40, 32, 3);
    } else write_bytes(f, 0, cases[k].p, cases[k].n);
    TU_EXPECT_STATUS(lam_dataset_load_images(root, 1, &og, &gpu), LAM_ERR_IO);
    assert_null(gpu);
    if (!strstr(lam_last_error(), f) || !strstr(lam_last_error(), cases[k].words))
      fail_msg("%s with nvJPEG: the message does not name the file and '%s': %s", cases[k].name, cases[k].words,
               lam_last_error());
    if (cases[k].kind == 0) { /* a damaged file: --skip-bad leaves it out, the rest from the GPU */
      lam_image_opts sk = {.cache = "", .decoder = LAM_DECODE_GPU, .skip_bad = 1};
      TU_OK(lam_dataset_load_images(root, 1, &sk, &gpu));
      assert_true(gpu->n == 24 && sk.skipped == 1 && sk.decoded_gpu == 24);
      lam_dataset_free(gpu), gpu = NULL;
    }
    unlink(f);
  }
  free(jpg);
  /* a grey JPEG among colour ones: converted to colour by the host (nvJPEG takes the set's channels only) */
  snprintf(f, sizeof f, "%s/train/1/zz-grey.jpg", root);
  write_image(f, IMAGE_JPEG, grey, 32, 32, 1);
  TU_OK(lam_dataset_load_images(root, 1, &og, &gpu));
  assert_true(gpu->n == 25 && gpu->c == 3 && og.decoded_gpu == 24 && og.converted == 1);
  lam_dataset_free(gpu);
  unlink(f);
  lam_dataset_free(cpu);
}

static void test_fashion_mnist_real(void **state) {
  (void)state;
  const char *root = getenv("LAMINA_DATA_DIR");
  char dir[512];
  if (root && *root)
    snprintf(dir, sizeof dir, "%s/fashion-mnist", root);
  else
    snprintf(dir, sizeof dir, "/usr/share/datasets/fashion-mnist");
  struct stat st;
  if (stat(dir, &st) != 0) {
    print_message("%s is absent (apt-get install dataset-fashion-mnist): skipped\n", dir);
    skip();
  }
  check_fashion(1, 60000, 9, 3431114169ULL);
  check_fashion(0, 10000, 9, 573469082ULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_good_plain),       cmocka_unit_test(test_good_gzip),
      cmocka_unit_test(test_good_gzip_large),  cmocka_unit_test(test_classes_range),
      cmocka_unit_test(test_load_folder),      cmocka_unit_test(test_load_folder_missing),
      cmocka_unit_test(test_load_fashion_env), cmocka_unit_test(test_wrong_magic),
      cmocka_unit_test(test_truncated),        cmocka_unit_test(test_trailing),
      cmocka_unit_test(test_bad_dims),         cmocka_unit_test(test_count_mismatch),
      cmocka_unit_test(test_bad_label),        cmocka_unit_test(test_bad_classes),
      cmocka_unit_test(test_missing_file),     cmocka_unit_test(test_corrupt_gzip),
      cmocka_unit_test(test_null_args),        cmocka_unit_test(test_idx_rank4), cmocka_unit_test(test_idx_clips),
      cmocka_unit_test(test_npy_layouts),      cmocka_unit_test(test_npy_label_dtypes),
      cmocka_unit_test(test_per_pixel),        cmocka_unit_test(test_infer_classes),
      cmocka_unit_test(test_npy_folder),       cmocka_unit_test(test_channel_stats),
      cmocka_unit_test(test_npy_bad),          cmocka_unit_test(test_fashion_mnist_real),
      cmocka_unit_test(test_idx_write),        cmocka_unit_test(test_data_segment),
      cmocka_unit_test(test_data_clips),
      cmocka_unit_test(test_image_roundtrip),  cmocka_unit_test(test_image_bad), cmocka_unit_test(test_png_like_pil),
      cmocka_unit_test(test_image_bombs),
      cmocka_unit_test(test_image_fit),        cmocka_unit_test(test_image_fit_tables),        cmocka_unit_test(test_image_folder),        cmocka_unit_test(test_mask_folder),
      cmocka_unit_test(test_image_folder_errors), cmocka_unit_test(test_image_folder_decoders),
      cmocka_unit_test(test_image_folder_mixed), cmocka_unit_test(test_image_folder_layouts),
      cmocka_unit_test(test_image_folder_large),
  };
  return TU_RUN_GROUP("data", tests, setup_dir, teardown_dir) ? 1 : 0;
}
