/* data/idx.c — the MNIST-format reader (src/data/idx.c): good IDX files plain and gzip, folders and "fashion-mnist"
 * through LAMINA_DATA_DIR, and every bad file it must refuse. */
#include "data_test.h"

/* ---- good files ------------------------------------------------------------------------------ */

void test_good_plain(void **state) {
  (void)state;
  const char *im = path_of("good-images"), *lb = path_of("good-labels");
  write_good(im, 0, lb, 0);
  lam_dataset *d = NULL;
  TU_OK(lam_dataset_load_idx(im, lb, 10, &d));
  assert_set("plain", d, N, H, W, g_pix, g_lab);
  lam_dataset_free(d);
}

void test_good_gzip(void **state) {
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
void test_good_gzip_large(void **state) {
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
void test_classes_range(void **state) {
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

void test_load_folder(void **state) {
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

void test_load_folder_missing(void **state) {
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

void test_load_fashion_env(void **state) {
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

void test_wrong_magic(void **state) {
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

void test_truncated(void **state) {
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

void test_trailing(void **state) {
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

void test_bad_dims(void **state) {
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

void test_count_mismatch(void **state) {
  (void)state;
  const char *im = path_of("count-images.gz"), *lb = path_of("count-labels.gz");
  write_images(im, 1, N, H, W, g_pix, PIX);
  write_labels(lb, 1, N - 1, g_lab, N - 1);
  EXPECT_LOAD_FAIL("7 images, 6 labels", im, lb, 10, LAM_ERR_IO, im, lb, "has 7 images", "has 6 labels");
}

void test_bad_label(void **state) {
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

void test_bad_classes(void **state) {
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

void test_missing_file(void **state) {
  (void)state;
  const char *im = path_of("here-images"), *lb = path_of("here-labels");
  const char *no_im = path_of("absent-images"), *no_lb = path_of("absent-labels.gz");
  write_good(im, 0, lb, 0);
  EXPECT_LOAD_FAIL("images missing", no_im, lb, 10, LAM_ERR_IO, "image file", no_im, "No such file");
  EXPECT_LOAD_FAIL("labels missing", im, no_lb, 10, LAM_ERR_IO, "label file", no_lb, "No such file");
  EXPECT_LOAD_FAIL("a folder as the image file", g_dir, lb, 10, LAM_ERR_IO, g_dir, "is a folder");
}

void test_corrupt_gzip(void **state) {
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

void test_null_args(void **state) {
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
