/* ffmpeg_probe.c — opens FFmpeg's libraries as video.c does (the same sonames, RTLD_NOW) and exits 0; nothing
 * else. valgrind_ffmpeg.sh runs it under valgrind before a video test to tell valgrind's own limits on this CPU
 * (a library's start-up code that valgrind cannot execute) from an error of lamina's. */
#include <dlfcn.h>
#include <stdio.h>

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libswscale/swscale.h>

int main(void) {
  static const char *const so[4] = {"libavformat.so." AV_STRINGIFY(LIBAVFORMAT_VERSION_MAJOR),
                                    "libavcodec.so." AV_STRINGIFY(LIBAVCODEC_VERSION_MAJOR),
                                    "libavutil.so." AV_STRINGIFY(LIBAVUTIL_VERSION_MAJOR),
                                    "libswscale.so." AV_STRINGIFY(LIBSWSCALE_VERSION_MAJOR)};
  for (int k = 0; k < 4; k++)
    if (!dlopen(so[k], RTLD_NOW | RTLD_LOCAL)) {
      fprintf(stderr, "ffmpeg_probe: %s: %s\n", so[k], dlerror());
      return 2;
    }
  return 0;
}
