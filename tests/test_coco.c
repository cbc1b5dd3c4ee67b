/* test_coco.c — COCO instances files to class masks (src/data/coco.c), from JSON written here, against masks
 * whose every pixel is known by hand: polygons (a rectangle, a triangle, a concave U) as pycocotools'
 * rleFrPoly rasterizes them, RLE as numbers and as pycocotools' compressed string (crowd: 255, with holes),
 * the smaller instance on top where two overlap, category ids mapped 1..K in id order; and every malformed
 * file refused with a message that names the annotation (or what else is wrong); a mask fitted to --size.
 *
 * How the polygon masks were derived (pycocotools is not installed here): rleFrPoly scales the points by 5,
 * walks each edge one step of that grid along its longer axis, and records a crossing wherever the walk's u
 * passes between 5x+2 and 5x+3 — pixel column x's centre, x + 0.5 in image coordinates — at the first row y
 * with 5y+2 >= v (v the boundary's scaled y there), i.e. the first pixel whose centre y + 0.5 lies below the
 * boundary. Between the two crossings of a column the pixels are set. So a pixel is in the mask when its
 * centre (x + 0.5, y + 0.5) is inside the polygon (a centre exactly on a boundary going by the rounding).
 *  - the rectangle (1,1) (4,1) (4,3) (1,3): centres with 1 < x+.5 < 4 and 1 < y+.5 < 3: columns 1..3, rows 1..2,
 *    6 pixels (= its area, as pycocotools' frPyObjects([[1,1,4,1,4,3,1,3]], 5, 6) gives);
 *  - the triangle (0,0) (4,0) (0,4): worked through the walk by hand — the hypotenuse, walked from (0,20) (the
 *    flip), crosses column x's centre at v = 17 - 5x, so rows 0 .. 2-x: centres with x+y+1 < 4, 6 pixels;
 *  - the U (0,0) (5,0) (5,4) (4,4) (4,1) (1,1) (1,4) (0,4): every edge on integer lines, no centre on one: the
 *    top row 0..4 and the two legs, columns 0 and 4, rows 1..3.
 */
#define _XOPEN_SOURCE 700
#include "testutil.h"

#include <string.h>

#include "../src/data/data.h"

/* The mask of image i of json (h x w), which must parse. */
static uint8_t *mask_of(const char *json, size_t i, int h, int w) {
  coco_set *s = NULL;
  lam_status st = coco_parse(json, strlen(json), &s);
  if (st != LAM_OK) fail_msg("coco_parse: %s", lam_last_error());
  assert_true(i < coco_n_images(s));
  assert_int_equal(coco_get_image(s, i)->h, h);
  assert_int_equal(coco_get_image(s, i)->w, w);
  uint8_t *m = malloc((size_t)h * w);
  assert_non_null(m);
  memset(m, 77, (size_t)h * w); /* poison: every pixel must be written */
  assert_int_equal(coco_mask(s, i, m), LAM_OK);
  coco_free(s);
  return m;
}

static void expect_mask(const uint8_t *got, const uint8_t *want, int h, int w) {
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      if (got[y * w + x] != want[y * w + x])
        fail_msg("pixel (row %d, col %d): %d, expected %d", y, x, got[y * w + x], want[y * w + x]);
}

/* One image of h x w (file a.jpg) with one category (id 1) and the annotations given. */
static char *one_image(int h, int w, const char *anns) {
  static char buf[8192];
  snprintf(buf, sizeof buf,
           "{\"images\": [{\"id\": 1, \"file_name\": \"a.jpg\", \"height\": %d, \"width\": %d}],"
           " \"categories\": [{\"id\": 1, \"name\": \"thing\"}], \"annotations\": [%s]}",
           h, w, anns);
  return buf;
}

static void test_rectangle(void **state) {
  (void)state;
  uint8_t *m = mask_of(one_image(5, 6, "{\"id\": 1, \"image_id\": 1, \"category_id\": 1, \"iscrowd\": 0,"
                                      " \"segmentation\": [[1, 1, 4, 1, 4, 3, 1, 3]]}"), 0, 5, 6);
  static const uint8_t want[5 * 6] = {0, 0, 0, 0, 0, 0, /* */ 0, 1, 1, 1, 0, 0, /* */ 0, 1, 1, 1, 0, 0,
                                      0, 0, 0, 0, 0, 0, /* */ 0, 0, 0, 0, 0, 0};
  expect_mask(m, want, 5, 6);
  free(m);
  /* the same rectangle walked the other way round, and with points off the grid of 1/5 (rounded to it) */
  m = mask_of(one_image(5, 6, "{\"id\": 1, \"image_id\": 1, \"category_id\": 1,"
                              " \"segmentation\": [[1, 3, 4, 3, 4.01, 1, 1.02, 1]]}"), 0, 5, 6);
  expect_mask(m, want, 5, 6);
  free(m);
}

static void test_triangle(void **state) {
  (void)state;
  uint8_t *m = mask_of(one_image(5, 5, "{\"id\": 1, \"image_id\": 1, \"category_id\": 1,"
                                      " \"segmentation\": [[0, 0, 4, 0, 0, 4]]}"), 0, 5, 5);
  static const uint8_t want[5 * 5] = {1, 1, 1, 0, 0, /* */ 1, 1, 0, 0, 0, /* */ 1, 0, 0, 0, 0,
                                      0, 0, 0, 0, 0, /* */ 0, 0, 0, 0, 0};
  expect_mask(m, want, 5, 5);
  free(m);
}

static void test_concave(void **state) {
  (void)state;
  uint8_t *m = mask_of(one_image(6, 6, "{\"id\": 1, \"image_id\": 1, \"category_id\": 1,"
                                      " \"segmentation\": [[0, 0, 5, 0, 5, 4, 4, 4, 4, 1, 1, 1, 1, 4, 0, 4]]}"),
                       0, 6, 6);
  static const uint8_t want[6 * 6] = {1, 1, 1, 1, 1, 0, /* */ 1, 0, 0, 0, 1, 0, /* */ 1, 0, 0, 0, 1, 0,
                                      1, 0, 0, 0, 1, 0, /* */ 0, 0, 0, 0, 0, 0, /* */ 0, 0, 0, 0, 0, 0};
  expect_mask(m, want, 6, 6);
  free(m);
  /* two polygons of one annotation: their union */
  m = mask_of(one_image(6, 6, "{\"id\": 1, \"image_id\": 1, \"category_id\": 1,"
                              " \"segmentation\": [[0, 0, 2, 0, 2, 1, 0, 1], [4, 5, 6, 5, 6, 6, 4, 6]]}"), 0, 6, 6);
  static const uint8_t two[6 * 6] = {1, 1, 0, 0, 0, 0, /* */ 0, 0, 0, 0, 0, 0, /* */ 0, 0, 0, 0, 0, 0,
                                     0, 0, 0, 0, 0, 0, /* */ 0, 0, 0, 0, 0, 0, /* */ 0, 0, 0, 0, 1, 1};
  expect_mask(m, two, 6, 6);
  free(m);
}

/* RLE, column-major, 0s first: counts 4, 4, 1, 3 on 3 x 4 are pixels 4..7 and 9..11 of the columns read top
 * to bottom — a crowd, so 255, with a hole at (row 2, col 2). Compressed, the same counts are "441O": 4, 4
 * and 1 each one character ('0' + value); the fourth is stored as 3 - 4 (the count two before) = -1: five
 * bits 11111 with the sign bit (0x10) set and no more, '0' + 31 = 'O'. */
static void test_rle(void **state) {
  (void)state;
  static const uint8_t want[3 * 4] = {0, 0, 255, 255, /* */ 0, 255, 255, 255, /* */ 0, 255, 0, 255};
  const char *forms[2] = {"[4, 4, 1, 3]", "\"441O\""};
  for (int f = 0; f < 2; f++) {
    char ann[256];
    snprintf(ann, sizeof ann, "{\"id\": 5, \"image_id\": 1, \"category_id\": 1, \"iscrowd\": 1,"
                              " \"segmentation\": {\"size\": [3, 4], \"counts\": %s}}", forms[f]);
    uint8_t *m = mask_of(one_image(3, 4, ann), 0, 3, 4);
    expect_mask(m, want, 3, 4);
    free(m);
  }
  /* counts of two characters and a positive count with 0x10 set: 16 is "`0" (16 | 0x20 more, then 0), 84 is
   * "d2" (84 & 31 = 20 | 0x20 = 52, then 84 >> 5 = 2); on 10 x 10: column 0 and column 1's rows 0..5 clear */
  for (int f = 0; f < 2; f++) {
    char ann[256];
    snprintf(ann, sizeof ann, "{\"id\": 6, \"image_id\": 1, \"category_id\": 1,"
                              " \"segmentation\": {\"size\": [10, 10], \"counts\": %s}}", f ? "\"`0d2\"" : "[16, 84]");
    uint8_t *m = mask_of(one_image(10, 10, ann), 0, 10, 10);
    uint8_t big[100];
    for (int y = 0; y < 10; y++)
      for (int x = 0; x < 10; x++) big[y * 10 + x] = x >= 2 || (x == 1 && y >= 6);
    expect_mask(m, big, 10, 10);
    free(m);
  }
}

/* A large instance and a small one inside it: the small one on top whatever their order in the file; categories
 * 5, 2, 90 (listed so) are classes 2, 1, 3. */
static void test_overlap_and_classes(void **state) {
  (void)state;
  const char *json =
      "{\"images\": [{\"id\": 7, \"file_name\": \"b.png\", \"height\": 6, \"width\": 6},"
      "              {\"id\": 3, \"file_name\": \"c.png\", \"height\": 2, \"width\": 3}],"
      " \"categories\": [{\"id\": 5, \"name\": \"five\"}, {\"id\": 2, \"name\": \"two\"}, {\"id\": 90, \"name\": \"ninety\"}],"
      " \"annotations\": ["
      "  {\"id\": 1, \"image_id\": 7, \"category_id\": 90, \"segmentation\": [[2, 2, 4, 2, 4, 4, 2, 4]]},"
      "  {\"id\": 2, \"image_id\": 7, \"category_id\": 5, \"segmentation\": [[0, 0, 6, 0, 6, 6, 0, 6]]},"
      "  {\"id\": 3, \"image_id\": 3, \"category_id\": 2, \"segmentation\": {\"size\": [2, 3], \"counts\": [2, 4]}}]}";
  coco_set *s = NULL;
  assert_int_equal(coco_parse(json, strlen(json), &s), LAM_OK);
  assert_int_equal(coco_n_classes(s), 3);
  assert_string_equal(coco_class_name(s, 0), "two");
  assert_string_equal(coco_class_name(s, 1), "five");
  assert_string_equal(coco_class_name(s, 2), "ninety");
  coco_free(s);
  uint8_t *m = mask_of(json, 0, 6, 6);
  uint8_t want[36];
  for (int y = 0; y < 6; y++)
    for (int x = 0; x < 6; x++) want[y * 6 + x] = x >= 2 && x < 4 && y >= 2 && y < 4 ? 3 : 2;
  expect_mask(m, want, 6, 6);
  free(m);
  m = mask_of(json, 1, 2, 3); /* column 0 clear, columns 1 and 2 class 1 */
  static const uint8_t c[6] = {0, 1, 1, /* */ 0, 1, 1};
  expect_mask(m, c, 2, 3);
  free(m);
}

/* The file must be refused, with a message holding `needle`. */
static void expect_refused(const char *json, const char *needle) {
  coco_set *s = (coco_set *)1;
  lam_status st = coco_parse(json, strlen(json), &s);
  if (st == LAM_OK) fail_msg("accepted: %s", json);
  assert_null(s);
  if (!strstr(lam_last_error(), needle)) fail_msg("message '%s' lacks '%s'", lam_last_error(), needle);
}

static void test_malformed(void **state) {
  (void)state;
  char buf[8192];
  expect_refused(one_image(5, 5, "{\"id\": 77, \"image_id\": 1, \"category_id\": 1, \"segmentation\": [[0, 0, 4, 0]]}"),
                 "annotation 77: polygon 0 has 2 points");
  expect_refused(one_image(5, 5, "{\"id\": 71, \"image_id\": 1, \"category_id\": 1, \"segmentation\": [[0, 0, 4, 0, 1]]}"),
                 "annotation 71");
  expect_refused(one_image(5, 5, "{\"id\": 72, \"image_id\": 1, \"category_id\": 1, \"segmentation\": []}"),
                 "annotation 72");
  expect_refused(one_image(5, 5, "{\"id\": 73, \"image_id\": 1, \"category_id\": 1, \"segmentation\": [[0, 0, 4, 0, \"x\", 1]]}"),
                 "annotation 73");
  expect_refused(one_image(3, 4, "{\"id\": 78, \"image_id\": 1, \"category_id\": 1,"
                                 " \"segmentation\": {\"size\": [3, 4], \"counts\": [4, 4, 1, 2]}}"),
                 "annotation 78: its RLE counts sum to 11, not 12");
  expect_refused(one_image(3, 4, "{\"id\": 74, \"image_id\": 1, \"category_id\": 1,"
                                 " \"segmentation\": {\"size\": [3, 4], \"counts\": \"441\"}}"),
                 "annotation 74: its RLE counts sum to 9");
  expect_refused(one_image(3, 4, "{\"id\": 75, \"image_id\": 1, \"category_id\": 1,"
                                 " \"segmentation\": {\"size\": [3, 4], \"counts\": \"44p\"}}"),
                 "annotation 75");
  expect_refused(one_image(3, 4, "{\"id\": 76, \"image_id\": 1, \"category_id\": 1,"
                                 " \"segmentation\": {\"size\": [4, 3], \"counts\": [12]}}"),
                 "annotation 76: its RLE is 4x3");
  expect_refused(one_image(3, 4, "{\"id\": 79, \"image_id\": 2, \"category_id\": 1, \"segmentation\": [[0, 0, 4, 0, 1, 1]]}"),
                 "annotation 79: image_id 2 is not among the images");
  expect_refused(one_image(3, 4, "{\"id\": 81, \"image_id\": 1, \"category_id\": 3, \"segmentation\": [[0, 0, 4, 0, 1, 1]]}"),
                 "annotation 81: category_id 3");
  expect_refused(one_image(3, 4, "{\"id\": 80, \"image_id\": 1, \"category_id\": 1}"),
                 "annotation 80 has no \"segmentation\"");
  expect_refused(one_image(3, 4, "{\"id\": 82, \"category_id\": 1, \"segmentation\": [[0, 0, 4, 0, 1, 1]]}"),
                 "annotation 82 has no \"image_id\"");
  expect_refused(one_image(3, 4, "{\"image_id\": 1, \"category_id\": 1, \"segmentation\": [[0, 0, 4, 0, 1, 1]]}"),
                 "annotation 0 (of the list) has no \"id\"");
  expect_refused(one_image(3, 4, "{\"id\": \"9\", \"image_id\": 1, \"category_id\": 1, \"segmentation\": [[0, 0, 4, 0, 1, 1]]}"),
                 "\"id\" is not an integer");
  expect_refused("{\"images\": [], \"categories\": [], \"annotations\": [", "not JSON");
  expect_refused("[1, 2]", "top level is not an object");
  expect_refused("{\"images\": [], \"categories\": []}", "no \"annotations\"");
  expect_refused("{\"images\": {}, \"categories\": [], \"annotations\": []}", "\"images\" is not an array");
  expect_refused(one_image(70000, 4, ""), "image 1 is 70000x4");
  expect_refused(one_image(40000, 40000, ""), "image 1 is 40000x40000");
  expect_refused(one_image(0, 4, ""), "image 1 is 0x4");
  snprintf(buf, sizeof buf, "{\"images\": [{\"id\": 1, \"file_name\": \"../x.jpg\", \"height\": 2, \"width\": 2}],"
                            " \"categories\": [], \"annotations\": []}");
  expect_refused(buf, "not a plain file name");
  snprintf(buf, sizeof buf, "{\"images\": [{\"id\": 1, \"file_name\": \"x.jpg\", \"height\": 2, \"width\": 2},"
                            " {\"id\": 1, \"file_name\": \"y.jpg\", \"height\": 2, \"width\": 2}],"
                            " \"categories\": [], \"annotations\": []}");
  expect_refused(buf, "two images have the id 1");
  snprintf(buf, sizeof buf, "{\"images\": [], \"categories\": [{\"id\": 4, \"name\": \"a\"}, {\"id\": 4, \"name\": \"b\"}],"
                            " \"annotations\": []}");
  expect_refused(buf, "two categories have the id 4");
}

/* A mask fitted as image_fit fits (cover, the middle kept), nearest: 2x2 to 4x4 doubles each pixel; 4x6 to 2x2
 * scales by 1/2 (to cover the 2 rows), 3 columns wide, the middle 2 kept (offset 0.5): output pixel (y, x)'s
 * centre is source (2y + 1, 2x + 2), the pixel at row 2y + 1, column 2x + 2. */
static void test_fit_mask(void **state) {
  (void)state;
  static const uint8_t m2[4] = {1, 2, 3, 4};
  uint8_t out[16];
  coco_fit_mask(m2, 2, 2, 4, 4, out);
  for (int y = 0; y < 4; y++)
    for (int x = 0; x < 4; x++) assert_int_equal(out[y * 4 + x], m2[(y / 2) * 2 + x / 2]);
  uint8_t m46[24];
  for (int i = 0; i < 24; i++) m46[i] = (uint8_t)(10 * (i / 6) + i % 6); /* row * 10 + column */
  coco_fit_mask(m46, 4, 6, 2, 2, out);
  static const uint8_t want[4] = {12, 14, 32, 34};
  expect_mask(out, want, 2, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rectangle), cmocka_unit_test(test_triangle), cmocka_unit_test(test_concave),
      cmocka_unit_test(test_rle),       cmocka_unit_test(test_overlap_and_classes), cmocka_unit_test(test_malformed),
      cmocka_unit_test(test_fit_mask),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
