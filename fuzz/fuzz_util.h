/* fuzz_util.h — what the fuzz targets share: the input as a file (the readers take paths) in memory
 * (memfd), so that the readers see it as a path. */
#ifndef LAMINA_FUZZ_UTIL_H
#define LAMINA_FUZZ_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Writes data to a fresh in-memory file and puts its path in path (size bytes); returns its fd (close it
 * when done), or -1. */
static inline int fuzz_file(const uint8_t *data, size_t n, char *path, size_t size) {
  int fd = memfd_create("lamina-fuzz", 0);
  if (fd < 0) return -1;
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, data + done, n - done);
    if (w <= 0) {
      close(fd);
      return -1;
    }
    done += (size_t)w;
  }
  snprintf(path, size, "/proc/self/fd/%d", fd);
  return fd;
}

#endif
