/* data/sets.c — the data makers (src/data/make.c) and the IDX writer; the real Fashion-MNIST where Debian's dataset-
 * fashion-mnist is installed. */
#include "data_test.h"

/* ---- the data makers (src/data/make.c) and the IDX writer ---- */

/* lam_idx_write, read back by the loader: images (n, h, w) and per-pixel labels (n, h, w); its refusals. */
void test_idx_write(void **state) {
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
void test_data_segment(void **state) {
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
void test_data_clips(void **state) {
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

void test_fashion_mnist_real(void **state) {
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
