/* test_video.c — video files through FFmpeg (src/data/video.c): a video written here, each frame a known grey level
 * (frame i: 10 + 6 i, flat, so a lossy codec gives it back within a few levels), then clips read back — which
 * frames a clip takes for a first frame and a stride, a clip past the end (its last frame repeated), a clip fitted to
 * another size, the frame count — and the files it refuses (zero length, not a video, cut short, cut mid-stream, no video
 * stream, a codec FFmpeg cannot decode; each made here). Skipped, not
 * passed, where the build has no FFmpeg. */
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

/* The bytes of the file at p (n of them) in a fresh buffer. */
static uint8_t *slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc(*n);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, *n, f), *n);
  fclose(f);
  return b;
}

static void spit(const char *p, const uint8_t *b, size_t n) {
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(b, 1, n, f), n);
  fclose(f);
}

/* Cut in the middle of its frames (an MKV keeps its index at the start): the frames before the cut are read as they
 * were, a clip past the cut repeats the last frame there is, and the probe counts what is left; never a crash. */
static void test_cut_mid_stream(void **state) {
  (void)state;
  if (!video_supported()) skip();
  size_t n;
  uint8_t *b = slurp(video("a.mkv", N), &n);
  char path[128];
  snprintf(path, sizeof path, "%s/cut-mid.mkv", dir);
  spit(path, b, n * 6 / 10);
  free(b);
  int64_t frames = 0;
  int h, w;
  assert_int_equal(video_probe(path, &frames, &h, &w), LAM_OK);
  assert_true(frames >= 4 && frames < N); /* fewer than written, some */
  uint8_t out[4 * VH * VW];
  const int from0[4] = {0, 1, 2, 3};
  assert_int_equal(video_clip(path, 0, 1, 4, 1, VH, VW, out), LAM_OK);
  assert_frames(out, 4, VH, VW, from0);
  /* a clip from past the cut: an error naming the file, or the frames that are there (each a level written) */
  lam_status s = video_clip(path, N - 4, 1, 4, 1, VH, VW, out);
  if (s != LAM_OK) assert_non_null(strstr(lam_last_error(), path));
  else
    for (int t = 0; t < 4; t++) assert_true(shown(out + (size_t)t * VH * VW, VH, VW) <= level(N - 1) + 3);
}

/* A valid container holding no video: a WAV file of a second of silence, written here byte by byte. */
static void test_no_video_stream(void **state) {
  (void)state;
  if (!video_supported()) skip();
  const uint32_t rate = 8000, data = 2 * rate; /* mono, 16-bit */
  uint8_t b[44 + 2 * 8000] = {0};
  const uint32_t le[] = {36 + data, 16, 1 | 1u << 16, rate, 2 * rate, 2 | 16u << 16, data};
  memcpy(b, "RIFF", 4), memcpy(b + 8, "WAVEfmt ", 8), memcpy(b + 36, "data", 4);
  const int at[] = {4, 16, 20, 24, 28, 32, 40};
  for (int k = 0; k < 7; k++)
    for (int i = 0; i < 4; i++) b[at[k] + i] = (uint8_t)(le[k] >> 8 * i);
  char path[128];
  snprintf(path, sizeof path, "%s/silence.wav", dir);
  spit(path, b, sizeof b);
  int64_t n;
  int h, w;
  uint8_t out[VH * VW];
  assert_int_equal(video_probe(path, &n, &h, &w), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), path)), assert_non_null(strstr(lam_last_error(), "no video stream"));
  assert_int_equal(video_clip(path, 0, 1, 1, 1, VH, VW, out), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), "no video stream"));
}

/* A video stream of a codec FFmpeg has no decoder for: the AVI written here with its codec's tag (H264 or FMP4, in
 * the stream header and the bitmap header) made an unknown one. */
static void test_unsupported_codec(void **state) {
  (void)state;
  if (!video_supported()) skip();
  size_t n;
  uint8_t *b = slurp(video("a.avi", N), &n);
  int tags = 0;
  for (size_t i = 0; i + 4 <= n && i < 4096; i++) /* the headers: the tag of the codec, not of the frames' chunks */
    if (!memcmp(b + i, "H264", 4) || !memcmp(b + i, "h264", 4) || !memcmp(b + i, "FMP4", 4) || !memcmp(b + i, "fmp4", 4))
      memcpy(b + i, "QQ9Z", 4), tags++;
  assert_true(tags >= 1);
  char path[128];
  snprintf(path, sizeof path, "%s/unknown-codec.avi", dir);
  spit(path, b, n);
  free(b);
  int64_t frames;
  int h, w;
  uint8_t out[VH * VW];
  assert_int_equal(video_probe(path, &frames, &h, &w), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), path));
  assert_int_equal(video_clip(path, 0, 1, 1, 1, VH, VW, out), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), path));
}

/* Colour clips of a frame whose RGB rows are no multiple of 16 bytes (24 x 3): swscale writes past a row's end, so
 * video.c gives it padded rows; the frame read back is the one written (ASan and valgrind see an overflow). */
static void test_colour_odd_rows(void **state) {
  (void)state;
  if (!video_supported()) skip();
  enum { h = 16, w = 24 };
  uint8_t px[6 * h * w * 3];
  for (int i = 0; i < 6 * h * w; i++) px[3 * i] = 200, px[3 * i + 1] = 120, px[3 * i + 2] = 40;
  char path[128];
  snprintf(path, sizeof path, "%s/rgb24.mp4", dir);
  assert_int_equal(video_write(path, px, 6, h, w, 3, 25), LAM_OK);
  uint8_t out[2 * h * w * 3];
  assert_int_equal(video_clip(path, 1, 2, 2, 3, h, w, out), LAM_OK);
  for (int i = 0; i < 2 * h * w; i++) /* within the codec's loss (4:2:0 chroma of a flat colour) */
    assert_true(abs(out[3 * i] - 200) <= 8 && abs(out[3 * i + 1] - 120) <= 8 && abs(out[3 * i + 2] - 40) <= 8);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_probe), cmocka_unit_test(test_clips),
                                     cmocka_unit_test(test_bad_files), cmocka_unit_test(test_cut_mid_stream),
                                     cmocka_unit_test(test_no_video_stream), cmocka_unit_test(test_unsupported_codec),
                                     cmocka_unit_test(test_colour_odd_rows)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
