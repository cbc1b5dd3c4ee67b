/* test_videocache.c — a video folder's decoded cache (src/data/videocache.c): a clip read from the cache is the clip
 * video_clip decodes from the file, byte for byte, for many first frames, strides, lengths (past the end too) and
 * sizes; a video folder's part read through a cache gives the same rows as streamed for several epochs' draws, the
 * first read decoding (misses) and later ones reading (hits); a changed video makes its entry stale, decoded again
 * and replaced under its name; a file in the cache folder that lamina did not write is never replaced. The videos are
 * written here, with detail in every frame (a moving gradient), so a wrong frame or offset shows. Skipped, not
 * passed, where the build has no FFmpeg. */
#define _XOPEN_SOURCE 700
#include "testutil.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/data/data.h"
#include "../src/internal.h"

#define VH 32
#define VW 48

static char dir[64];

static int setup(void **state) {
  (void)state;
  return tu_tmpdir(dir, sizeof dir, "vcache");
}

static int teardown(void **state) {
  (void)state;
  return tu_rmdir_all(dir);
}

/* n frames (VH, VW, c) of a gradient that moves with the frame (seed varies it), written as a video at path. */
static void write_video(const char *path, int n, int c, int seed) {
  uint8_t *px = malloc((size_t)n * VH * VW * c);
  assert_non_null(px);
  for (int i = 0; i < n; i++)
    for (int y = 0; y < VH; y++)
      for (int x = 0; x < VW; x++)
        for (int k = 0; k < c; k++)
          px[(((size_t)i * VH + y) * VW + x) * c + k] = (uint8_t)((x * 5 + y * 3 + i * 7 + k * 60 + seed * 40) % 256);
  lam_status s = video_write(path, px, n, VH, VW, c, 25);
  free(px);
  if (s != LAM_OK) fail_msg("video_write: %s", lam_last_error());
}

static void mkdirs(const char *p) {
  char cmd[512];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s'", p);
  assert_int_equal(system(cmd), 0);
}

/* Files in folder d (not . or ..); *tmp set where one is a temporary file left behind. */
static int count_files(const char *d, int *tmp) {
  DIR *o = opendir(d);
  assert_non_null(o);
  int n = 0;
  *tmp = 0;
  for (struct dirent *e; (e = readdir(o));)
    if (e->d_name[0] != '.') n++, *tmp |= strstr(e->d_name, ".tmp-") != NULL;
  closedir(o);
  return n;
}

/* The cached clip against the decoded one for every case; out buffers of the largest clip. */
static void same_clips(video_cache *vc, const char *path, int C, int H, int W) {
  static const int cases[][3] = {{0, 1, 8}, {3, 2, 6}, {17, 3, 5}, {30, 3, 5}, {39, 1, 4}, {45, 2, 3},
                                 {11, 4, 16}, {1, 1, 1}, {24, 2, 16}, {0, 7, 9}};
  const size_t max = (size_t)16 * H * W * C;
  uint8_t *a = malloc(max), *b = malloc(max);
  assert_non_null(a), assert_non_null(b);
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const int first = cases[k][0], S = cases[k][1], T = cases[k][2];
    const size_t bytes = (size_t)T * H * W * C;
    memset(a, 1, max), memset(b, 2, max);
    const lam_status sa = video_clip(path, first, S, T, C, H, W, a), sb = video_cache_clip(vc, path, first, S, T, C, H, W, b);
    if (sa != sb) fail_msg("from frame %d: decoded %d, cached %d (%s)", first, sa, sb, lam_last_error());
    if (sa != LAM_OK) { /* a clip that starts past the end: the same error */
      assert_non_null(strstr(lam_last_error(), "no frame could be decoded from frame"));
      continue;
    }
    if (memcmp(a, b, bytes)) fail_msg("%s: the cached clip from frame %d, every %d-th, %d frames at %dx%dx%d is not the "
                                      "decoded one", path, first, S, T, H, W, C);
  }
  free(a), free(b);
}

static void test_clips_equal(void **state) {
  (void)state;
  if (!video_supported()) skip();
  char p[128], cache[128], q[128];
  snprintf(p, sizeof p, "%s/colour.mp4", dir), write_video(p, 40, 3, 0);
  snprintf(q, sizeof q, "%s/grey.mkv", dir), write_video(q, 33, 1, 1);
  snprintf(cache, sizeof cache, "%s/cache", dir); /* made by the open */
  video_cache *vc = NULL;
  assert_int_equal(video_cache_open(dir, cache, &vc), LAM_OK);
  size_t hits, misses;
  same_clips(vc, p, 3, VH, VW); /* as it is */
  video_cache_counts(vc, &hits, &misses);
  assert_int_equal(misses, 1), assert_int_equal(hits, 8); /* decoded once, then read (the clip past the end: none) */
  same_clips(vc, p, 3, 20, 20); /* fitted: another entry */
  same_clips(vc, p, 1, 16, 24); /* grey from colour: another */
  same_clips(vc, q, 1, VH, VW);
  same_clips(vc, q, 3, 40, 60); /* grown */
  video_cache_counts(vc, &hits, &misses);
  assert_int_equal(misses, 5), assert_int_equal(hits, 3 * 8 + 2 * 7); /* grey.mkv: 2 clips past its 33 frames */
  int tmp;
  assert_int_equal(count_files(cache, &tmp), 5);
  assert_false(tmp);
  video_cache_free(vc);
}

static void test_changed_file(void **state) {
  (void)state;
  if (!video_supported()) skip();
  char p[128], cache[128], entry[PATH_MAX + 64];
  snprintf(p, sizeof p, "%s/changing.mp4", dir), write_video(p, 30, 3, 2);
  snprintf(cache, sizeof cache, "%s/cache2", dir);
  video_cache *vc = NULL;
  assert_int_equal(video_cache_open(dir, cache, &vc), LAM_OK);
  const size_t bytes = (size_t)4 * VH * VW * 3;
  uint8_t *a = malloc(bytes), *b = malloc(bytes), *old = malloc(bytes);
  assert_non_null(a), assert_non_null(b), assert_non_null(old);
  assert_int_equal(video_cache_clip(vc, p, 5, 2, 4, 3, VH, VW, old), LAM_OK);
  size_t hits, misses;
  video_cache_counts(vc, &hits, &misses);
  assert_int_equal(misses, 1);
  /* the same file written again with other frames (its time moved on, in case the size is the same) */
  write_video(p, 30, 3, 3);
  struct timespec t[2] = {{0, UTIME_OMIT}, {0, 0}};
  struct stat st;
  assert_int_equal(stat(p, &st), 0);
  t[1].tv_sec = st.st_mtim.tv_sec + 5;
  assert_int_equal(utimensat(AT_FDCWD, p, t, 0), 0);
  assert_int_equal(video_clip(p, 5, 2, 4, 3, VH, VW, a), LAM_OK);
  assert_int_equal(video_cache_clip(vc, p, 5, 2, 4, 3, VH, VW, b), LAM_OK);
  assert_memory_equal(a, b, bytes); /* the new frames, not the old entry's */
  assert_memory_not_equal(a, old, bytes);
  video_cache_counts(vc, &hits, &misses);
  assert_int_equal(misses, 2), assert_int_equal(hits, 0);
  assert_int_equal(video_cache_clip(vc, p, 5, 2, 4, 3, VH, VW, b), LAM_OK); /* and now read */
  video_cache_counts(vc, &hits, &misses);
  assert_int_equal(misses, 2), assert_int_equal(hits, 1);
  int tmp;
  assert_int_equal(count_files(cache, &tmp), 1); /* replaced under its name: nothing left behind */
  assert_false(tmp);
  /* a file at an entry's name that lamina did not write: an error naming it, and the file as it was */
  video_cache_entry_path(vc, p, 1, VH, VW, entry, sizeof entry);
  FILE *f = fopen(entry, "wb");
  assert_non_null(f), fputs("a user's notes\n", f), fclose(f);
  assert_int_equal(video_cache_clip(vc, p, 0, 1, 1, 1, VH, VW, b), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), entry));
  char line[64] = "";
  f = fopen(entry, "rb");
  assert_non_null(f), assert_non_null(fgets(line, sizeof line, f)), fclose(f);
  assert_string_equal(line, "a user's notes\n");
  assert_int_equal(count_files(cache, &tmp), 2);
  assert_false(tmp);
  /* a cache folder that cannot be made: an error naming it */
  video_cache *bad = NULL;
  char no[160];
  snprintf(no, sizeof no, "%s/none/deeper", dir);
  assert_int_equal(video_cache_open(dir, no, &bad), LAM_ERR_IO);
  assert_non_null(strstr(lam_last_error(), no));
  free(a), free(b), free(old);
  video_cache_free(vc);
}

/* A video folder's training part: rows through the cache equal streamed rows for three epochs' draws and the test
 * part's middle clips; the first epoch decodes every video (misses), the next read (hits). */
static void test_folder_equal(void **state) {
  (void)state;
  if (!video_supported()) skip();
  char root[128], p[256], cache[160];
  snprintf(root, sizeof root, "%s/set", dir);
  const char *cls[2] = {"a", "b"};
  for (int k = 0; k < 2; k++) {
    for (int part = 0; part < 2; part++) {
      snprintf(p, sizeof p, "%s/%s/%s", root, part ? "test" : "train", cls[k]), mkdirs(p);
      for (int v = 0; v < 3; v++) {
        snprintf(p, sizeof p, "%s/%s/%s/v%d.mp4", root, part ? "test" : "train", cls[k], v);
        write_video(p, 20 + 7 * v + k, 3, 4 + v + 3 * k + 10 * part);
      }
    }
  }
  snprintf(cache, sizeof cache, "%s/cache3", dir);
  for (int train = 1; train >= 0; train--) {
    lam_image_opts so = {.frames = 6, .frame_stride = 2, .h = 24, .w = 24}, co = so;
    co.cache = cache;
    lam_dataset *streamed = NULL, *cached = NULL;
    assert_int_equal(lam_dataset_load_images(root, train, &so, &streamed), LAM_OK);
    if (lam_dataset_load_images(root, train, &co, &cached) != LAM_OK) fail_msg("%s", lam_last_error());
    assert_int_equal(streamed->n, 6), assert_int_equal(cached->n, 6);
    const size_t sample = lam_dataset_sample_bytes(streamed), n = streamed->n;
    assert_int_equal(sample, lam_dataset_sample_bytes(cached));
    uint8_t *a = malloc(n * sample), *b = malloc(n * sample), la[6], lb[6];
    assert_non_null(a), assert_non_null(b);
    int32_t idx[6] = {4, 0, 5, 2, 1, 3};
    const uint64_t draws[3] = {0x1234567ULL, 0xfeedbeefULL, 0x42ULL};
    for (int e = 0; e < (train ? 3 : 1); e++) {
      if (train) lam_source_set_draw(streamed->source, draws[e]), lam_source_set_draw(cached->source, draws[e]);
      assert_int_equal(lam_dataset_rows(streamed, idx, n, a, la), LAM_OK);
      assert_int_equal(lam_dataset_rows(cached, idx, n, b, lb), LAM_OK);
      assert_memory_equal(a, b, n * sample);
      assert_memory_equal(la, lb, n);
      size_t hits, misses;
      lam_dataset_video_cache(cached, &hits, &misses);
      assert_int_equal(misses, 6), assert_int_equal(hits, 6 * e);
      lam_dataset_video_cache(streamed, &hits, &misses);
      assert_int_equal(hits + misses, 0);
    }
    if (train) { /* the draws differ: the epochs' clips are not all one */
      lam_source_set_draw(streamed->source, draws[0]);
      assert_int_equal(lam_dataset_rows(streamed, idx, n, b, lb), LAM_OK);
      assert_memory_not_equal(a, b, n * sample);
    }
    free(a), free(b);
    lam_dataset_free(streamed), lam_dataset_free(cached);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_clips_equal), cmocka_unit_test(test_changed_file),
                                     cmocka_unit_test(test_folder_equal)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
