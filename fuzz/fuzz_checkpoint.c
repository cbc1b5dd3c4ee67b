/* fuzz_checkpoint.c — the checkpoint loader (src/nn/checkpoint.c). The input is a checkpoint without its
 * last four bytes: the harness appends the CRC-32 that makes it hold, so the fuzzer gets past the CRC
 * check into the structure (the part a damaged file never reaches); the first input byte chooses whether
 * the CRC is added at all. Memory is capped at 16 MB: a header that claims a huge model is an error. */
#define _GNU_SOURCE /* memfd_create (fuzz_util.h) */
#include <string.h>
#include <zlib.h>

#include "lamina.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  static lam_ctx *ctx;
  if (!ctx) {
    if (lam_ctx_create(&ctx, LAM_DEVICE_CPU) != LAM_OK || lam_mem_set_limit(ctx, 16u << 20) != LAM_OK) abort();
  }
  if (n < 1) return 0;
  int add_crc = !(data[0] & 1);
  data++, n--;
  uint8_t *file = malloc(n + 4);
  if (!file) return 0;
  memcpy(file, data, n);
  size_t len = n;
  if (add_crc) {
    uint32_t c = (uint32_t)crc32(crc32(0L, Z_NULL, 0), file, (uInt)n);
    for (int i = 0; i < 4; i++) file[n + i] = (uint8_t)(c >> (8 * i));
    len += 4;
  }
  char path[64];
  int fd = fuzz_file(file, len, path, sizeof path);
  free(file);
  if (fd < 0) return 0;
  lam_model *m = NULL;
  if (lam_checkpoint_load(ctx, path, &m, NULL, NULL) == LAM_OK) lam_model_free(m);
  close(fd);
  return 0;
}
