/* data/npy.c — images of any channel count and NumPy files: IDX rank 4, .npy of every version, layout and label
 * dtype, labels per pixel, classes, .npy folders, channel statistics, malformed .npy. */
#include "data_test.h"

/* IDX rank 4 (n, h, w, c): loaded as (n, c, h, w); and with one channel. */
void test_idx_rank4(void **state) {
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
void test_idx_clips(void **state) {
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
void test_npy_layouts(void **state) {
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
void test_npy_label_dtypes(void **state) {
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
void test_per_pixel(void **state) {
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
void test_infer_classes(void **state) {
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
void test_npy_folder(void **state) {
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
void test_channel_stats(void **state) {
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
void test_npy_bad(void **state) {
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
