/* test_video.c — video files through FFmpeg (src/data/video.c): a video written here, each frame a known grey level
 * (frame i: 10 + 6 i, flat, so a lossy codec gives it back within a few levels), then clips read back — which
 * frames a clip takes for a first frame and a stride, a clip past the end (its last frame repeated), a clip fitted to
 * another size, the frame count — and the files it refuses (zero length, not a video, cut short); the public
 * lam_video_read_clip's middle clip. Skipped, not passed, where the build has no FFmpeg. */
#define _XOPEN_SOURCE 700
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/data/data.h"

#define N 40
#define VH 32
#define VW 48

static char dir[64];

static int level(int i) { return 10 + 6 * i; } /* frame i's grey level: 10 .. 244 */

static int setup(void **state) {
  (void)state;
  snprintf(dir, sizeof dir, "/tmp/lamina-video-XXXXXX");
  return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

/* The test video at dir/name (written once). */
static const char *video(const char *name, int n) {
  static char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  if (access(path, F_OK) == 0) return path;
  uint8_t *px = malloc((size_t)n * VH * VW);
  assert_non_null(px);
  for (int i = 0; i < n; i++) memset(px + (size_t)i * VH * VW, level(i), (size_t)VH * VW);
  lam_status s = video_write(path, px, n, VH, VW, 1, 25);
  free(px);
  if (s != LAM_OK) fail_msg("video_write: %s", lam_last_error());
  return path;
}

/* The frame of out (H x W) read back: the level it shows (its mean), which must be flat within a few levels. */
static int shown(const uint8_t *f, int H, int W) {
  long sum = 0;
  int lo = 255, hi = 0;
  for (int i = 0; i < H * W; i++) sum += f[i], lo = f[i] < lo ? f[i] : lo, hi = f[i] > hi ? f[i] : hi;
  assert_true(hi - lo <= 8);
  return (int)((sum + H * W / 2) / (H * W));
}

static void assert_frames(const uint8_t *out, int T, int H, int W, const int *want) {
  for (int t = 0; t < T; t++) {
    int got = shown(out + (size_t)t * H * W, H, W);
    if (abs(got - level(want[t])) > 3) fail_msg("clip frame %d shows level %d, frame %d's is %d", t, got, want[t], level(want[t]));
  }
}

static void test_probe(void **state) {
  (void)state;
  if (!video_supported()) skip();
  int64_t n = 0;
  int h = 0, w = 0;
  assert_int_equal(video_probe(video("a.mp4", N), &n, &h, &w), LAM_OK);
  assert_int_equal(n, N), assert_int_equal(h, VH), assert_int_equal(w, VW);
  assert_int_equal(video_probe(video("a.mkv", N), &n, &h, &w), LAM_OK); /* MKV: no frame count in the header */
  assert_int_equal(n, N);
}

static void test_clips(void **state) {
  (void)state;
  if (!video_supported()) skip();
  const char *p = video("a.mp4", N);
  uint8_t out[16 * VH * VW];
  const int from0[8] = {0, 1, 2, 3, 4, 5, 6, 7}, strided[6] = {3, 5, 7, 9, 11, 13}, late[5] = {30, 33, 36, 39, 39};
  assert_int_equal(video_clip(p, 0, 1, 8, 1, VH, VW, out), LAM_OK);
  assert_frames(out, 8, VH, VW, from0);
  assert_int_equal(video_clip(p, 3, 2, 6, 1, VH, VW, out), LAM_OK); /* from the middle of a GOP: seeks back */
  assert_frames(out, 6, VH, VW, strided);
  assert_int_equal(video_clip(p, 30, 3, 5, 1, VH, VW, out), LAM_OK); /* past the end: the last frame again */
  assert_frames(out, 5, VH, VW, late);
  assert_int_equal(video_clip(p, 20, 1, 1, 1, 16, 16, out), LAM_OK); /* fitted: 32x48 to cover 16x16 */
  const int one[1] = {20};
  assert_frames(out, 1, 16, 16, one);
  assert_int_equal(video_clip(p, 12, 4, 3, 3, VH, VW, out), LAM_OK); /* RGB: grey thrice */
  for (int t = 0; t < 3; t++) {
    const uint8_t *f = out + (size_t)t * VH * VW * 3;
    assert_true(abs(f[0] - level(12 + 4 * t)) <= 4 && f[0] == f[1] && f[1] == f[2]);
  }
}

static void test_bad_files(void **state) {
  (void)state;
  if (!video_supported()) skip();
  char path[128];
  uint8_t out[VH * VW];
  int64_t n;
  int h, w;
  snprintf(path, sizeof path, "%s/empty.mp4", dir); /* zero length */
  FILE *f = fopen(path, "wb");
  assert_non_null(f), fclose(f);
  assert_int_equal(video_probe(path, &n, &h, &w), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), path));
  snprintf(path, sizeof path, "%s/text.mp4", dir); /* not a video */
  f = fopen(path, "wb");
  assert_non_null(f), fputs("this is not a video file, only some words\n", f), fclose(f);
  assert_int_equal(video_clip(path, 0, 1, 1, 1, VH, VW, out), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), path));
  /* cut to its first 600 bytes: an error naming it, or frames from what is there; never a crash or a hang */
  const char *good = video("a.mp4", N);
  FILE *g = fopen(good, "rb");
  assert_non_null(g);
  uint8_t buf[600];
  size_t got = fread(buf, 1, sizeof buf, g);
  fclose(g);
  snprintf(path, sizeof path, "%s/cut.mp4", dir);
  f = fopen(path, "wb");
  assert_non_null(f), fwrite(buf, 1, got, f), fclose(f);
  lam_status s = video_clip(path, 0, 1, 1, 1, VH, VW, out);
  if (s != LAM_OK) assert_non_null(strstr(lam_last_error(), path));
}

/* lam_video_read_clip (the public clip reader, Python's predict(path)): first -1 is the middle clip, a video folder's
 * test clip: of 40 frames, 6 every 3rd span 16, so it starts at (40 - 16) / 2 = 12; a clip longer than the video
 * starts at 0 and repeats the last frame. */
static void test_read_clip(void **state) {
  (void)state;
  assert_int_equal(lam_video_file_name("a/b.MP4"), 1), assert_int_equal(lam_video_file_name("x.webm"), 1);
  assert_int_equal(lam_video_file_name("x.mp4.txt"), 0), assert_int_equal(lam_video_file_name("mp4"), 0);
  assert_int_equal(lam_dataset_is_video_folder(dir), 0); /* no train/ */
  uint8_t out[20 * VH * VW];
  assert_int_equal(lam_video_read_clip(NULL, 0, 1, 1, 1, VH, VW, out), LAM_ERR_INVALID_ARG);
  assert_int_equal(lam_video_read_clip("x.mp4", -2, 1, 1, 1, VH, VW, out), LAM_ERR_INVALID_ARG);
  assert_int_equal(lam_video_read_clip("x.mp4", 0, 0, 1, 1, VH, VW, out), LAM_ERR_INVALID_ARG);
  assert_int_equal(lam_video_read_clip("x.mp4", 0, 1, 1, 2, VH, VW, out), LAM_ERR_INVALID_ARG);
  if (!video_supported()) {
    assert_int_equal(lam_video_read_clip("x.mp4", 0, 1, 1, 1, VH, VW, out), LAM_ERR_UNSUPPORTED);
    skip();
  }
  const char *p = video("a.mp4", N);
  const int middle[6] = {12, 15, 18, 21, 24, 27};
  assert_int_equal(lam_video_read_clip(p, -1, 3, 6, 1, VH, VW, out), LAM_OK);
  assert_frames(out, 6, VH, VW, middle);
  int whole[20];
  for (int t = 0; t < 20; t++) whole[t] = 3 * t < N ? 3 * t : 39;
  assert_int_equal(lam_video_read_clip(p, -1, 3, 20, 1, VH, VW, out), LAM_OK);
  assert_frames(out, 20, VH, VW, whole);
  const int from5[2] = {5, 7};
  assert_int_equal(lam_video_read_clip(p, 5, 2, 2, 1, VH, VW, out), LAM_OK);
  assert_frames(out, 2, VH, VW, from5);
  char missing[128];
  snprintf(missing, sizeof missing, "%s/none.mp4", dir);
  assert_int_equal(lam_video_read_clip(missing, -1, 1, 1, 1, VH, VW, out), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), missing));
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_probe), cmocka_unit_test(test_clips),
                                     cmocka_unit_test(test_bad_files),
                                     cmocka_unit_test(test_read_clip)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
