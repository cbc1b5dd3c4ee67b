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
 * The tests are in tests/data/ by family (idx.c, npy.c, sets.c, images.c; what they share in data_test.h); this
 * file holds the shared state, the fixture and the list.
 */
#define _XOPEN_SOURCE 700 /* nftw, mkdtemp, truncate, setenv: before any system header */
#include "data/data_test.h"

#include <ftw.h>

/* The tests by family are in tests/data/; here the shared state, the fixture and the list. */
char g_dir[64];
uint8_t g_pix[PIX], g_lab[N];
lam_dataset g_poison;

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
