/* fuzz_video.c — video files (src/data/video.c, through FFmpeg's libraries): the input is a file's bytes, given to
 * the reader as a path (an in-memory file; FFmpeg picks the container by its content, so every demuxer the library
 * has is reached), probed as a video folder probes its files and read as clips: from the start, from the middle
 * with a stride, past the end, grey and colour, fitted to small sizes. A damaged file must be an error naming the
 * file, never a crash, a read out of bounds, an allocation the file merely claims, or a hang (libFuzzer's -timeout
 * catches a decode that makes no progress). FFmpeg's own bugs are not lamina's: its libraries are not instrumented
 * (fuzz/lsan-video.supp says which leaks are theirs). */
#define _GNU_SOURCE /* memfd_create (fuzz_util.h) */
#include <string.h>

#include "../src/data/data.h"
#include "fuzz_util.h"
#include "lamina.h"

/* frames larger than this are decoded by the probe only: a valid frame of 8192 x 8192 is slow, not wrong */
#define FUZZ_MAX_PIXELS (1 << 20)

/* An error must name the file; a clip read must have written every byte (ASan sees a short write as garbage read). */
static void check(lam_status s, const char *path, const uint8_t *out, size_t n) {
  if (s != LAM_OK) {
    if (!strstr(lam_last_error(), path)) abort();
    return;
  }
  volatile uint8_t sum = 0;
  for (size_t i = 0; i < n; i++) sum ^= out[i];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  char path[64];
  int fd = fuzz_file(data, n, path, sizeof path);
  if (fd < 0) return 0;
  int64_t frames = 0;
  int h = 0, w = 0;
  lam_status s = video_probe(path, &frames, &h, &w);
  check(s, path, NULL, 0);
  if (s == LAM_OK && (frames < 1 || frames > VIDEO_MAX_FRAMES || h < 1 || w < 1 || (int64_t)h * w > VIDEO_MAX_PIXELS))
    abort(); /* what the probe promises */
  if (s != LAM_OK || (int64_t)h * w <= FUZZ_MAX_PIXELS) {
    static uint8_t out[8 * 3 * 12 * 10];
    const int64_t mid = s == LAM_OK ? frames / 2 : 3;
    check(video_clip(path, 0, 1, 4, 1, 8, 8, out), path, out, 4 * 8 * 8);            /* the first frames, grey */
    check(video_clip(path, mid, 2, 3, 3, 12, 10, out), path, out, 3 * 3 * 12 * 10); /* the middle, colour, strided */
    check(video_clip(path, s == LAM_OK ? frames - 1 : 40, 3, 8, 3, 5, 7, out), path, out, 8 * 3 * 5 * 7); /* the end */
  }
  close(fd);
  return 0;
}
