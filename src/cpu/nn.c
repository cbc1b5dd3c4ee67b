/* nn.c — the CPU twins of a dense layer's bias (prims.h: add_bias, bias_grad); the convolutions are in conv.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels.h"
#include "../math/act.h"
#include "../math/half.h"


lam_status cpu_add_bias(lam_ctx *ctx, int rows, int cols, float *y, const float *b) {
  (void)ctx;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) y[(size_t)r * cols + c] += b[c];
  return LAM_OK;
}

lam_status cpu_bias_grad(lam_ctx *ctx, int rows, int cols, const float *dy, float *db) {
  (void)ctx;
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++) db[c] += dy[(size_t)r * cols + c];
  return LAM_OK;
}
