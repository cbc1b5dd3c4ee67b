/* test_video.c — video files through FFmpeg (src/data/video.c): a video written here, each frame a known grey level
 * (frame i: 10 + 6 i, flat, so a lossy codec gives it back within a few levels), then clips read back — which
 * frames a clip takes for a first frame and a stride, a clip past the end (its last frame repeated), a clip fitted to
 * another size, the frame count — and the files it refuses (zero length, not a video, cut short, cut mid-stream,
 * no video stream, a codec FFmpeg cannot decode; each made here); colour rows swscale writes past. Then the sets listed
 * in CSV files (videolist.c): path,label lists and Kinetics' own, each video a flat grey level of its own, so the
 * clips read back say which file each sample came from; the public lam_video_read_clip's middle clip; a video
 * folder's test clips (lam_clip_start, test_clips) and lam_evaluate's average over them against a hand
 * computation; NVDEC against the host's decoder. Skipped, not passed, where the build has no FFmpeg (NVDEC:
 * where no CUDA device opens). */
#define _XOPEN_SOURCE 700
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/data/data.h"

#define N 40
#define VH 32
#define VW 48

static char dir[64];

static int level(int i) { return 10 + 6 * i; } /* frame i's grey level: 10 .. 244 */

static int setup(void **state) {
  (void)state;
  return tu_tmpdir(dir, sizeof dir, "video");
}

static int teardown(void **state) {
  (void)state;
  return tu_rmdir_all(dir);
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
  const int clamped[3] = {34, 38, 39}; /* 42 is past the end: the video's last frame, 39, not the last taken, 38 */
  assert_int_equal(video_clip(p, 34, 4, 3, 1, VH, VW, out), LAM_OK);
  assert_frames(out, 3, VH, VW, clamped);
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

/* NVDEC against the host's decoder on a textured video (a frame's own level plus a moving gradient): the same frames
 * taken, each within a few levels of the host's (grey: mean half a level; colour: two), by both routes
 * (video_nvdec_route); and, fitted to another size and shape (the cuvid route crops and resizes on the engine), a
 * smooth video's clip within a level and a half on average: a crop off by two pixels is three levels. Skipped, not
 * passed, where no CUDA device opens for FFmpeg (this machine without a GPU). */
static void test_nvdec(void **state) {
  (void)state;
  const char *why = NULL;
  if (!video_supported() || !video_nvdec(&why)) {
    print_message("  NVDEC: %s\n", why ? why : "no FFmpeg");
    skip();
  }
  enum { n = 30, th = 64, tw = 96, T = 5 };
  char path[128];
  snprintf(path, sizeof path, "%s/texture.mp4", dir);
  uint8_t *px = malloc((size_t)n * th * tw), *a = malloc((size_t)T * th * tw * 3), *b = malloc((size_t)T * th * tw * 3);
  assert_true(px && a && b);
  for (int i = 0; i < n; i++)
    for (int y = 0; y < th; y++)
      for (int x = 0; x < tw; x++) px[((size_t)i * th + y) * tw + x] = (uint8_t)(20 + 6 * i + ((x + 2 * y + 3 * i) % 32));
  assert_int_equal(video_write(path, px, n, th, tw, 1, 25), LAM_OK);
  for (int route = 0; route < 2; route++)
  for (int c = 1; c <= 3; c += 2)
    for (int first = 0; first < n; first += 7) {
      video_nvdec_route(route);
      assert_int_equal(video_clip(path, first, 2, T, c, th, tw, a), LAM_OK);
      if (video_clip_nvdec(path, first, 2, T, c, th, tw, b) != LAM_OK) fail_msg("NVDEC: %s", lam_last_error());
      long sum = 0;
      int worst = 0;
      for (size_t k = 0; k < (size_t)T * th * tw * c; k++) {
        int d = abs(a[k] - b[k]);
        sum += d, worst = d > worst ? d : worst;
      }
      /* grey: the Y plane both ways (H.264 bit-exact, MPEG-4 within the IDCT's rounding); colour: NVDEC's NV12 goes
       * through another swscale path than the host's YUV 4:2:0 (measured on the H200: worst 3 levels, mean 1.33) */
      if (worst > (c == 1 ? 4 : 6) || sum > (long)T * th * tw * c * (c == 1 ? 1 : 4) / 2)
        fail_msg("NVDEC's clip from frame %d (%d channels, route %d) differs from the host's: worst %d levels, mean "
                 "%.2f", first, c, route, worst, (double)sum / ((double)T * th * tw * c));
    }
  /* fitted: 64x96 to 40x40 (the middle 64x64, scaled by 0.625) and to 48x128 (the middle 36x96 scaled up) */
  snprintf(path, sizeof path, "%s/smooth.mp4", dir);
  for (int i = 0; i < n; i++)
    for (int y = 0; y < th; y++)
      for (int x = 0; x < tw; x++) px[((size_t)i * th + y) * tw + x] = (uint8_t)(30 + 2 * i + x + y);
  assert_int_equal(video_write(path, px, n, th, tw, 1, 25), LAM_OK);
  const int fit[2][2] = {{40, 40}, {48, 128}};
  for (int route = 0; route < 2; route++)
    for (int k = 0; k < 2; k++) {
      const int H = fit[k][0], W = fit[k][1];
      uint8_t *fa = malloc((size_t)T * H * W), *fb = malloc((size_t)T * H * W);
      assert_true(fa && fb);
      video_nvdec_route(route);
      assert_int_equal(video_clip(path, 3, 2, T, 1, H, W, fa), LAM_OK);
      if (video_clip_nvdec(path, 3, 2, T, 1, H, W, fb) != LAM_OK) fail_msg("NVDEC: %s", lam_last_error());
      long sum = 0;
      int worst = 0;
      for (size_t q = 0; q < (size_t)T * H * W; q++) {
        int d = abs(fa[q] - fb[q]);
        sum += d, worst = d > worst ? d : worst;
      }
      print_message("  NVDEC route %d fitted to %dx%d: worst %d levels, mean %.2f\n", route, H, W, worst,
                    (double)sum / ((double)T * H * W));
      if (worst > 8 || sum > (long)T * H * W * 3 / 2)
        fail_msg("NVDEC's clip fitted to %dx%d (route %d) differs from the host's: worst %d levels, mean %.2f", H, W,
                 route, worst, (double)sum / ((double)T * H * W));
      free(fa), free(fb);
    }
  video_nvdec_route(0);
  free(px), free(a), free(b);
}

/* ---- sets listed in CSV files ---- */

/* dir/rel's parent folders made, and the path in out. */
static void path_in(const char *rel, char *out, size_t cap) {
  snprintf(out, cap, "%s/%s", dir, rel);
  for (char *p = out + strlen(dir) + 1; (p = strchr(p, '/')) != NULL; p++) {
    *p = 0;
    mkdir(out, 0755); /* there already is fine */
    *p = '/';
  }
}

/* A video of 6 frames (16 x 16) all of grey level v, at dir/rel. */
static void flat_video(const char *rel, int v) {
  char path[512];
  path_in(rel, path, sizeof path);
  uint8_t px[6 * 16 * 16];
  memset(px, v, sizeof px);
  if (video_write(path, px, 6, 16, 16, 1, 25) != LAM_OK) fail_msg("video_write: %s", lam_last_error());
}

static void text_file(const char *rel, const char *text) {
  char path[512];
  path_in(rel, path, sizeof path);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static lam_status load(const char *rel, int train, lam_image_opts *o, lam_dataset **d) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, rel);
  o->frames = 2, o->frame_stride = 1;
  return lam_dataset_load_images(path, train, o, d);
}

/* The set's samples as (level shown, label) pairs against want (levels and labels, in order). */
static void assert_samples(const lam_dataset *d, size_t n, const int *level_want, const int *label_want) {
  assert_int_equal(d->n, n);
  assert_int_equal(d->t, 2), assert_int_equal(d->c, 1), assert_int_equal(d->h, 16), assert_int_equal(d->w, 16);
  for (size_t i = 0; i < n; i++) {
    int32_t idx = (int32_t)i;
    uint8_t px[2 * 16 * 16], lab;
    assert_int_equal(lam_dataset_rows(d, &idx, 1, px, &lab), LAM_OK);
    const int got = shown(px, 16, 16);
    if (abs(got - level_want[i]) > 3 || lab != label_want[i])
      fail_msg("sample %zu: level %d label %d, want level %d label %d", i, got, lab, level_want[i], label_want[i]);
  }
}

static void assert_error_names(lam_status s, const char *where) {
  assert_int_not_equal(s, LAM_OK);
  if (!strstr(lam_last_error(), where)) fail_msg("the error does not name '%s': %s", where, lam_last_error());
}

/* path,label lists: classes the training list's labels sorted; the rows in the list's order; the header optional
 * (val.csv has none); quoted fields (a comma in a path, a quote in a label); relative and absolute paths. */
static void test_csv_paths(void **state) {
  (void)state;
  if (!video_supported()) skip();
  flat_video("csv/v/z1.mp4", 40), flat_video("csv/v/a1.mp4", 80), flat_video("csv/v/m,1.mp4", 120);
  flat_video("csv/v/z2.mp4", 160), flat_video("csv/w/a2.mp4", 200);
  char abs_path[512], val[1024];
  snprintf(abs_path, sizeof abs_path, "%s/csv/w/a2.mp4", dir);
  text_file("csv/train.csv", "path,label\r\nv/z1.mp4,zebra\r\n\r\nv/a1.mp4 , ant\r\n\"v/m,1.mp4\",\"moth \"\"x\"\"\"\r\n"
                             "v/z2.mp4,zebra\r\n");
  snprintf(val, sizeof val, "%s,ant\nv/z2.mp4,zebra\n", abs_path);
  text_file("csv/val.csv", val);
  char path[512];
  snprintf(path, sizeof path, "%s/csv", dir);
  assert_true(video_folder(path));
  assert_int_equal(lam_dataset_image_folder_layout(path), LAM_FOLDER_SPLIT);
  lam_image_opts o = {0};
  lam_dataset *d = NULL;
  assert_int_equal(load("csv", 1, &o, &d), LAM_OK);
  assert_int_equal(d->classes, 3); /* ant, moth "x", zebra */
  assert_string_equal(lam_dataset_class_name(d, 0), "ant");
  assert_string_equal(lam_dataset_class_name(d, 1), "moth \"x\"");
  assert_string_equal(lam_dataset_class_name(d, 2), "zebra");
  const int lv[4] = {40, 80, 120, 160}, lb[4] = {2, 0, 1, 2};
  assert_samples(d, 4, lv, lb);
  assert_int_equal(o.skipped, 0), assert_int_equal(o.missing, 0);
  lam_dataset_free(d);
  assert_int_equal(load("csv", 0, &o, &d), LAM_OK);
  assert_int_equal(d->classes, 3);
  const int tv[2] = {200, 160}, tb[2] = {0, 2};
  assert_samples(d, 2, tv, tb);
  lam_dataset_free(d);
}

/* A row naming no file: an error naming the list's file and line, or with skip_bad left out and counted. A test row
 * whose label the training list does not name: an error naming its line. */
static void test_csv_missing(void **state) {
  (void)state;
  if (!video_supported()) skip();
  flat_video("miss/a.mp4", 50), flat_video("miss/b.mp4", 150);
  text_file("miss/train.csv", "a.mp4,cat\nb.mp4,dog\nnot-there.mp4,dog\n");
  text_file("miss/val.csv", "a.mp4,cat\nb.mp4,bird\n");
  lam_image_opts o = {0};
  lam_dataset *d = NULL;
  assert_error_names(load("miss", 1, &o, &d), "miss/train.csv:3");
  assert_error_names(LAM_ERR_IO, "not-there.mp4");
  assert_null(d);
  o.skip_bad = 1;
  assert_int_equal(load("miss", 1, &o, &d), LAM_OK);
  assert_int_equal(o.skipped, 1);
  const int lv[2] = {50, 150}, lb[2] = {0, 1};
  assert_samples(d, 2, lv, lb);
  lam_dataset_free(d), d = NULL;
  assert_error_names(load("miss", 0, &o, &d), "miss/val.csv:2");
  assert_error_names(LAM_ERR_IO, "bird");
}

/* Lists that are not CSV as lamina reads them: each an error naming the file and the line. */
static void test_csv_bad(void **state) {
  (void)state;
  if (!video_supported()) skip();
  static const struct {
    const char *name, *text, *where;
  } cases[] = {
      {"bad1", "a.mp4,cat\na.mp4,cat,extra\n", "bad1/train.csv:2"},            /* 3 fields */
      {"bad2", "path,label\n\na.mp4\n", "bad2/train.csv:3"},                   /* 1 field */
      {"bad3", "file,class\na.mp4,cat\n", "bad3/train.csv:1"},                 /* a header of its own */
      {"bad4", "a.mp4,cat\n\"a.mp4,cat\n", "bad4/train.csv:2"},                /* a quote not closed */
      {"bad5", "label,youtube_id,start,end,split\nx,y,0,10,train\n", "bad5/train.csv:1"}, /* not Kinetics' header */
      {"bad6", "label,youtube_id,time_start,time_end,split\nx,y,zero,10,train\n", "bad6/train.csv:2"},
      {"bad7", "label,youtube_id,time_start,time_end,split\nx,y,0,10\n", "bad7/train.csv:2"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    char rel[64];
    snprintf(rel, sizeof rel, "%s/a.mp4", cases[k].name);
    flat_video(rel, 50);
    snprintf(rel, sizeof rel, "%s/train.csv", cases[k].name);
    text_file(rel, cases[k].text);
    snprintf(rel, sizeof rel, "%s/val.csv", cases[k].name);
    text_file(rel, "a.mp4,cat\n");
    lam_image_opts o = {0};
    lam_dataset *d = NULL;
    assert_error_names(load(cases[k].name, 1, &o, &d), cases[k].where);
    assert_null(d);
  }
}

/* Kinetics' lists: each row's file found by the naming rule (ID_START_END.mp4, 6 digits each, under SPLIT/LABEL/,
 * torchvision's folder name for the label, or SPLIT/ alone; validate also as val/); the missing ones left out,
 * counted and said in one line. */
static void test_kinetics(void **state) {
  (void)state;
  if (!video_supported()) skip();
  flat_video("kin/train/air drumming/aaa_000004_000014.mp4", 40);
  flat_video("kin/train/bobs_x/bbb_000000_000010.mp4", 90);    /* torchvision's name for "bob's (x)" */
  flat_video("kin/train/ccc_000012_000022.mp4", 140);          /* CVDF's archives, unpacked */
  flat_video("kin/train/air drumming/ddd_000001_000011.mp4", 190);
  flat_video("kin/val/abseiling/eee_000100_000110.mp4", 230); /* split "validate" */
  text_file("kin/train.csv", "label,youtube_id,time_start,time_end,split,is_cc\n"
                             "\"air drumming\",aaa,4,14,train,0\n"
                             "\"bob's (x)\",bbb,0,10,train,0\n"
                             "abseiling,gone1,3,13,train,0\n"
                             "abseiling,ccc,12,22,train,0\n"
                             "\"air drumming\",ddd,1.0,11,train,0\n"
                             "abseiling,gone2,5,15,train,0\n"
                             "zumba,gone3,0,10,train,0\n"); /* a class without a video: a class still */
  text_file("kin/validate.csv", "label,youtube_id,time_start,time_end,split\nabseiling,eee,100,110,validate\n");
  char path[512];
  snprintf(path, sizeof path, "%s/kin", dir);
  assert_int_equal(video_csv_layout(path), 2);
  assert_true(video_folder(path));
  assert_int_equal(lam_dataset_image_folder_layout(path), LAM_FOLDER_SPLIT);
  lam_image_opts o = {0};
  lam_dataset *d = NULL;
  assert_int_equal(load("kin", 1, &o, &d), LAM_OK);
  assert_int_equal(d->classes, 4);
  assert_string_equal(lam_dataset_class_name(d, 3), "zumba");
  assert_string_equal(lam_dataset_class_name(d, 0), "abseiling");
  assert_string_equal(lam_dataset_class_name(d, 1), "air drumming");
  assert_string_equal(lam_dataset_class_name(d, 2), "bob's (x)");
  const int lv[4] = {40, 90, 140, 190}, lb[4] = {1, 2, 0, 1};
  assert_samples(d, 4, lv, lb);
  assert_int_equal(o.missing, 3), assert_int_equal(o.skipped, 0);
  char want[1024];
  snprintf(want, sizeof want, "3 of 7 videos listed in %s/kin/train.csv are missing, e.g. %s/kin/train/abseiling/"
                              "gone1_000003_000013.mp4", dir, dir);
  assert_string_equal(o.missing_note, want);
  lam_dataset_free(d);
  assert_int_equal(load("kin", 0, &o, &d), LAM_OK);
  assert_int_equal(o.missing, 0), assert_string_equal(o.missing_note, "");
  assert_int_equal(d->classes, 4);
  const int tv[1] = {230}, tb[1] = {0};
  assert_samples(d, 1, tv, tb);
  lam_dataset_free(d);
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

/* The test clips' starts (lam_clip_start) against their hand values: last = frames - span, span = (T - 1) S + 1;
 * K = 1 the middle (last / 2 rounded down), K > 1 round(k last / (K - 1)) with halves up, a video shorter than the
 * span 0 for every clip. */
static void test_clip_starts(void **state) {
  (void)state;
  assert_int_equal(lam_clip_start(40, 8, 2, 1, 0), 12); /* span 15, last 25 */
  const int64_t k3[3] = {0, 13, 25}, k4[4] = {0, 8, 17, 25}, k5[5] = {0, 6, 13, 19, 25}; /* 12.5, 8.33, 16.67, ... */
  for (int k = 0; k < 3; k++) assert_int_equal(lam_clip_start(40, 8, 2, 3, k), k3[k]);
  for (int k = 0; k < 4; k++) assert_int_equal(lam_clip_start(40, 8, 2, 4, k), k4[k]);
  for (int k = 0; k < 5; k++) assert_int_equal(lam_clip_start(40, 8, 2, 5, k), k5[k]);
  for (int k = 0; k < 3; k++) assert_int_equal(lam_clip_start(5, 4, 2, 3, k), 0); /* span 7 > 5 frames */
  assert_int_equal(lam_clip_start(15, 8, 2, 2, 1), 0);                            /* span 15 = 15 frames */
  assert_int_equal(lam_clip_start(1000, 16, 2, 10, 9), 1000 - 31);
}

/* A video folder's test part read with test_clips 3: the clips each video gives (their frames' levels against the
 * starts worked out by hand, a video shorter than the clip repeating its last frame), and lam_evaluate's accuracy and
 * loss against a float64 hand computation from each clip's own forward: the softmax averaged over a video's three
 * clips, its argmax against the label, the NLL of the average. A batch of 2 splits videos across batches. */
static void test_test_clips(void **state) {
  (void)state;
  if (!video_supported() || getenv("LAMINA_TEST_READERS_ONLY")) skip(); /* valgrind: the model's AVX-512 kernels */
  char cmd[400];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s/vf/train/a' '%s/vf/train/b' '%s/vf/test/a' '%s/vf/test/b'", dir, dir, dir, dir);
  assert_int_equal(system(cmd), 0);
  video("vf/train/a/0.mp4", 12), video("vf/train/b/0.mp4", 12);
  video("vf/test/a/0.mp4", N), video("vf/test/a/1.mp4", 6), video("vf/test/b/0.mp4", 25);
  char vf[96];
  snprintf(vf, sizeof vf, "%s/vf", dir);
  enum { T = 4, S = 3, K = 3, SIDE = 8, V = 3 };
  lam_image_opts o = {.h = SIDE, .w = SIDE, .frames = T, .frame_stride = S, .test_clips = K};
  lam_dataset *d = NULL;
  if (lam_dataset_load_opts(vf, 0, &o, &d) != LAM_OK) fail_msg("%s", lam_last_error());
  assert_int_equal(d->n, V * K), assert_int_equal(lam_dataset_clips(d), K), assert_int_equal(d->t, T), assert_int_equal(d->c, 1);
  /* span 10: 40 frames, last 30, starts 0 15 30; 6 frames, last 0; 25 frames, last 15, starts 0 8 15 (7.5 up) */
  const int start[V][K] = {{0, 15, 30}, {0, 0, 0}, {0, 8, 15}}, len[V] = {N, 6, 25}, cls[V] = {0, 0, 1};
  uint8_t px[V * K][T * SIDE * SIDE], lab[V * K];
  int32_t idx[V * K];
  for (int i = 0; i < V * K; i++) idx[i] = i;
  if (lam_dataset_rows(d, idx, V * K, &px[0][0], lab) != LAM_OK) fail_msg("%s", lam_last_error());
  for (int v = 0; v < V; v++)
    for (int k = 0; k < K; k++) {
      int want[T];
      for (int t = 0; t < T; t++) want[t] = start[v][k] + t * S < len[v] ? start[v][k] + t * S : len[v] - 1;
      assert_frames(px[v * K + k], T, SIDE, SIDE, want);
      assert_int_equal(lab[v * K + k], cls[v]);
    }
  lam_ctx *ctx = NULL;
  lam_model *m = NULL;
  assert_int_equal(lam_ctx_create(&ctx, LAM_DEVICE_CPU), LAM_OK);
  assert_int_equal(lam_model_create_clip(ctx, "conv 3 3 pad 1, relu, tpool mean, flatten, dense 2", T, 1, SIDE, SIDE,
                                         7, &m), LAM_OK);
  assert_int_equal(lam_model_set_train(m, 0), LAM_OK);
  double p[V][2] = {{0}}, right = 0, nll = 0; /* by hand: each clip on its own */
  for (int i = 0; i < V * K; i++) {
    float l[2];
    assert_int_equal(lam_model_forward_u8(m, 1, px[i], l), LAM_OK);
    const double mx = l[0] > l[1] ? l[0] : l[1], e0 = exp(l[0] - mx), e1 = exp(l[1] - mx);
    p[i / K][0] += e0 / (e0 + e1) / K, p[i / K][1] += e1 / (e0 + e1) / K;
  }
  for (int v = 0; v < V; v++) right += (p[v][1] > p[v][0]) == cls[v], nll -= log(p[v][cls[v]]);
  double acc = -1, loss = -1;
  uint64_t conf[4];
  assert_int_equal(lam_model_set_train(m, 1), LAM_OK); /* lam_evaluate evaluates whatever the model's mode */
  if (lam_evaluate(m, d, 2, &acc, &loss, conf) != LAM_OK) fail_msg("%s", lam_last_error());
  assert_true(fabs(acc - right / V) < 1e-12);
  if (fabs(loss - nll / V) > 1e-5) fail_msg("loss %.8f, by hand %.8f", loss, nll / V);
  assert_int_equal(conf[0] + conf[1] + conf[2] + conf[3], V); /* a video counted once */
  double probs[V * 2];
  uint8_t vl[V];
  assert_int_equal(lam_predict_clips(m, d, 4, probs, vl), LAM_OK);
  for (int v = 0; v < V; v++) {
    assert_true(fabs(probs[2 * v] - p[v][0]) < 1e-6 && fabs(probs[2 * v + 1] - p[v][1]) < 1e-6);
    assert_int_equal(vl[v], cls[v]);
  }
  /* the middle clip alone (test_clips 1): one sample a video, from last / 2 */
  lam_dataset *one = NULL;
  o.test_clips = 1;
  if (lam_dataset_load_opts(vf, 0, &o, &one) != LAM_OK) fail_msg("%s", lam_last_error());
  assert_int_equal(one->n, V), assert_int_equal(lam_dataset_clips(one), 1);
  uint8_t mid[V][T * SIDE * SIDE];
  assert_int_equal(lam_dataset_rows(one, idx, V, &mid[0][0], NULL), LAM_OK);
  const int middle[V] = {15, 0, 7};
  for (int v = 0; v < V; v++) {
    int want[T];
    for (int t = 0; t < T; t++) want[t] = middle[v] + t * S < len[v] ? middle[v] + t * S : len[v] - 1;
    assert_frames(mid[v], T, SIDE, SIDE, want);
  }
  o.test_clips = LAM_MAX_TEST_CLIPS + 1; /* out of range: an error naming it */
  lam_dataset *bad = NULL;
  assert_int_equal(lam_dataset_load_opts(vf, 0, &o, &bad), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "test_clips"));
  lam_dataset_free(one);
  lam_model_free(m);
  lam_ctx_free(ctx);
  lam_dataset_free(d);
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
  /* an FFmpeg without the WAV demuxer (scripts/ffmpeg-min's) cannot open it at all: said so, naming it */
  const char *why = "no video stream";
  assert_int_equal(video_probe(path, &n, &h, &w), LAM_ERR_IO);
  if (strstr(lam_last_error(), "cannot be opened")) why = "cannot be opened";
  assert_non_null(strstr(lam_last_error(), path)), assert_non_null(strstr(lam_last_error(), why));
  assert_int_equal(video_clip(path, 0, 1, 1, 1, VH, VW, out), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), why));
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
                                     cmocka_unit_test(test_colour_odd_rows), cmocka_unit_test(test_nvdec),
                                     cmocka_unit_test(test_csv_paths), cmocka_unit_test(test_csv_missing),
                                     cmocka_unit_test(test_csv_bad), cmocka_unit_test(test_kinetics),
                                     cmocka_unit_test(test_read_clip), cmocka_unit_test(test_clip_starts),
                                     cmocka_unit_test(test_test_clips)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
