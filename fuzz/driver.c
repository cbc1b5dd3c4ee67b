/* driver.c — runs a fuzz target over files (and the files of folders) given as arguments, without
 * libFuzzer: how `make test` replays the seed corpora and every input that once crashed a target. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "driver: cannot open %s\n", path);
    return 1;
  }
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 4096;
      uint8_t *b = realloc(buf, cap);
      if (!b) {
        fclose(f);
        free(buf);
        return 1;
      }
      buf = b;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0, bad = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) continue; /* a folder with no inputs yet */
    if (!S_ISDIR(st.st_mode)) {
      bad |= run_file(argv[i]), files++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) return 1;
    for (struct dirent *e; (e = readdir(d));) {
      if (e->d_name[0] == '.') continue;
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
      bad |= run_file(p), files++;
    }
    closedir(d);
  }
  printf("ran %d inputs\n", files);
  return bad;
}
