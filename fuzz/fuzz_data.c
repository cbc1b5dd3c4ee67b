/* fuzz_data.c — the data-set readers (src/data): the input is a file whose first bytes choose IDX or
 * NumPy, plain or gzip, read as images and as labels. A bad file must be an error, never a crash, a
 * read out of bounds or an allocation the header merely claims. */
#define _GNU_SOURCE /* memfd_create (fuzz_util.h) */
#include <string.h>

#include "../src/data/data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  char path[64];
  for (int role = 0; role < 2; role++) {
    int fd = fuzz_file(data, n, path, sizeof path);
    if (fd < 0) return 0;
    data_src s;
    if (data_open(path, role ? DATA_LABELS : DATA_IMAGES, &s) == LAM_OK) {
      data_array a;
      memset(&a, 0, sizeof a);
      lam_status st = npy_magic(s.peek, s.peek_len) ? npy_read(&s, &a) : idx_read(&s, &a);
      if (st == LAM_OK && a.count) { /* every byte it says it read is there */
        volatile uint8_t sum = 0;
        for (size_t i = 0; i < a.count; i++) sum ^= a.data[i];
      }
      free(a.data);
      data_close(&s, st);
    }
    close(fd);
  }
  return 0;
}
