/* data/images.c — image files and folders (src/data/image.c, folder.c): PNG/JPEG round trips, Pillow's decodes,
 * decompression bombs, the fit, image and mask folders, their layouts and decoders. */
#include "data_test.h"

/* PNG is lossless both ways, grey and colour; JPEG decodes to the size and channels written and near the
 * values (a smooth image at quality 90); the format is told by content, not by name. */
void test_image_roundtrip(void **state) {
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
void test_image_bad(void **state) {
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

/* Every PNG colour type and bit depth decoded as Pillow (and torchvision through it) reads it: 16-bit samples
 * by their high byte with no gamma (0x1234 -> 18; the simplified API went through linear light: 76), alpha
 * dropped keeping the colour under it (not composited onto black), palettes (with tRNS) as their colours,
 * 1/2/4-bit grey scaled to 0..255, Adam7; both as the file's own channels (image_read) and converted to the
 * other count (lam_image_load: grey to RGB the same value thrice, RGB to grey Pillow's convert("L") luma). The
 * files and Pillow's pixels are tests/ref/png (make_png_ref.py says how they were made). */
void test_png_like_pil(void **state) {
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

/* Decompression bombs (issue 30, finding 5), each refused from its header before the decoder allocates: a
 * progressive grey JPEG of 65500x65500 in some hundred bytes (8.4 GB of coefficients), a colour one of
 * 60000x60000 (21 GB), a 30000x30000 colour one within the pixel bound of a fitted JPEG but whose coefficients
 * are over libjpeg's memory bound, a small JPEG of 568 scans, and a PNG whose header claims more than its bytes
 * can inflate to. A fitted JPEG below the bounds still decodes (smaller, by DCT scaling). */
void test_image_bombs(void **state) {
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
void test_image_fit(void **state) {
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
void test_image_fit_tables(void **state) {
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

/* An image folder made by lam_data_images_part, loaded back: classes from the folders, each image the file's
 * pixels (NCHW), labels the folder's class; the cache written, then read, then renewed when a file changes
 * (the old key's files removed). */
void test_image_folder(void **state) {
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
void test_mask_folder(void **state) {
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
void test_image_folder_errors(void **state) {
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
void test_image_folder_mixed(void **state) {
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

/* The layouts users have (issue 30, finding 13c, d): flat DIR/CLASS/... (one part: both the training and the test
 * part, all of it), DIR/train + DIR/val (ImageNet's names; test/ first where it holds class folders), DIR/train
 * alone (its test part an error that says --val-split), a folder of the MNIST layout beside folders of images (not
 * an image folder); and an empty class folder, an error naming it, as in torchvision. */
void test_image_folder_layouts(void **state) {
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
void test_image_folder_large(void **state) {
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

/* JPEG folders decoded by nvJPEG (decoder GPU) against libjpeg (CPU): the same images and labels, pixels
 * within JPEG decoders' rounding; every bad file still an error naming it (they go to libjpeg); where the
 * build lacks nvJPEG or no GPU is present, asking for it is a clear error and the comparison skips. */
void test_image_folder_decoders(void **state) {
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
