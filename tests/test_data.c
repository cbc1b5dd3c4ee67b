/* test_data.c — the MNIST-format reader (src/data/idx.c): small IDX files written here, plain and
 * gzip, into a fresh mkdtemp folder, loaded back and compared pixel by pixel and label by label;
 * lam_dataset_load on a folder in the MNIST layout and on "fashion-mnist" through LAMINA_DATA_DIR;
 * and every bad file the reader must refuse — wrong magic, truncated, trailing bytes, zero or huge
 * dimensions, image/label count mismatch, a label >= classes, a damaged gzip stream, missing files,
 * NULL arguments — each with the right status, *out left NULL, and a message that names the file
 * and the problem. Last, the real Fashion-MNIST when Debian's dataset-fashion-mnist is installed
 * (skipped when it is not).
 */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp, truncate, setenv: before any system header */
#include "testutil.h"

#include <ftw.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

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
  EXPECT_LOAD_FAIL("classes = 0", im, lb, 0, LAM_ERR_INVALID_ARG, "classes is 0");
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
  EXPECT_LOAD_FAIL("scrambled gzip", im, lb, 10, LAM_ERR_IO, "image file", im);

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
      cmocka_unit_test(test_null_args),        cmocka_unit_test(test_fashion_mnist_real),
  };
  tu_apply_filter();
  return cmocka_run_group_tests_name("data", tests, setup_dir, teardown_dir) ? 1 : 0;
}
