/* fuzz_spec.c — the model spec parser (src/nn/spec.c and each op's parse): any text, on a colour
 * 32x32 input or a 28x28 grey one (the first byte chooses), must become a model or a spec error — never
 * a crash, an overflow or an allocation it cannot make (memory capped at 16 MB, so a huge model is the
 * cap's clear error). A model that is made also gets its node table and memory plan at batch 2. */
#define _GNU_SOURCE /* memfd_create (fuzz_util.h) */
#include <string.h>

#include "lamina.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  static lam_ctx *ctx;
  if (!ctx) {
    if (lam_ctx_create(&ctx, LAM_DEVICE_CPU) != LAM_OK || lam_mem_set_limit(ctx, 16u << 20) != LAM_OK) abort();
  }
  if (n < 1 || n > 8192) return 0;
  char *spec = malloc(n);
  if (!spec) return 0;
  memcpy(spec, data + 1, n - 1);
  spec[n - 1] = '\0';
  int grey = data[0] & 1;
  lam_model *m = NULL;
  if (lam_model_create(ctx, spec, grey ? 1 : 3, grey ? 28 : 32, grey ? 28 : 32, 1, &m) == LAM_OK) {
    int count = 0;
    size_t planned = 0;
    if (lam_model_nodes(m, 2, NULL, 0, &count, NULL) == LAM_OK && count > 0) {
      lam_node_info *nodes = calloc((size_t)count, sizeof *nodes);
      if (nodes) lam_model_nodes(m, 2, nodes, count, &count, &planned);
      free(nodes);
    }
    lam_model_free(m);
  }
  free(spec);
  return 0;
}
