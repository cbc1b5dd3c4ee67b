/* fuzz_safetensors.c — the safetensors reader (src/nn/safetensors.c): the input is the file, loaded into a
 * small model that has every kind of tensor (conv, bn with its statistics, convt, dense). Whatever the bytes,
 * the load is an error or a success, never a crash, and never a partial change (test_safetensors.c checks
 * that part). Memory is capped at 16 MB like the other targets. */
#define _GNU_SOURCE /* memfd_create (fuzz_util.h) */
#include "lamina.h"
#include "fuzz_util.h"

/* 1x4x4 -> conv 2x2x2 -> convt 2x4x4 -> dense 3: tensors 0.*, 1.* (bn), 3.* (convt (2, 2, 2, 2)), 5.* */
#define SPEC "conv 2 3, bn, relu, convt 2 2 stride 2, flatten, dense 3"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  static lam_ctx *ctx;
  static lam_model *m;
  if (!ctx) {
    if (lam_ctx_create(&ctx, LAM_DEVICE_CPU) != LAM_OK || lam_mem_set_limit(ctx, 16u << 20) != LAM_OK ||
        lam_model_create(ctx, SPEC, 1, 4, 4, 1, &m) != LAM_OK)
      abort();
  }
  char path[64];
  int fd = fuzz_file(data, n, path, sizeof path);
  if (fd < 0) return 0;
  lam_model_load_safetensors(m, path);
  close(fd);
  return 0;
}
