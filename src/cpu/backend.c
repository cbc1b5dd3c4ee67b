/* backend.c — the CPU backend's table: its memory is host memory, its copies are (parallel) memcpy,
 * and its ops are in the other files of this folder. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#define CPU_ALIGN 256

static lam_status cpu_raw_alloc(lam_ctx *ctx, void **p, size_t bytes) {
  (void)ctx;
  if (bytes > SIZE_MAX - CPU_ALIGN) /* the round-up below would wrap to a tiny block */
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of host memory", bytes);
  size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
  *p = aligned_alloc(CPU_ALIGN, rounded);
  if (!*p) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "aligned_alloc(%d, %zu) failed: out of host memory", CPU_ALIGN, rounded);
  return LAM_OK;
}
static void cpu_raw_free(lam_ctx *ctx, void *p) {
  (void)ctx;
  free(p);
}
static lam_status cpu_copy(lam_ctx *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  lam_copy_job job = {dst, src, bytes};
  lam_parallel_copy(&job, 1);
  return LAM_OK;
}
static lam_status cpu_host_free(lam_ctx *ctx, void *p) {
  cpu_raw_free(ctx, p);
  return LAM_OK;
}
static lam_status cpu_sync(lam_ctx *ctx) {
  (void)ctx;
  return LAM_OK;
}
static void cpu_destroy(lam_ctx *ctx) { (void)ctx; }

const lam_backend lam_cpu_backend = {
    .name = "cpu",
    .raw_alloc = cpu_raw_alloc,
    .raw_free = cpu_raw_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .host_alloc = cpu_raw_alloc,
    .host_free = cpu_host_free,
    .sync = cpu_sync,
    .destroy = cpu_destroy,
    .hidden = cpu_hidden,
    .staging_floor = NULL,
    .normalize = cpu_normalize,
    .weigh = cpu_weigh,
    .tanh_ = cpu_tanh,
    .gemm = cpu_gemm,
    .zero = cpu_zero,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .cbp_to_bcp = cpu_cbp_to_bcp,
    .bcp_to_cbp = cpu_bcp_to_cbp,
    .add_bias = cpu_add_bias,
    .bias_grad = cpu_bias_grad,
    .maxpool_fwd = cpu_maxpool_fwd,
    .maxpool_bwd = cpu_maxpool_bwd,
    .act_fwd = cpu_act_fwd,
    .act_bwd = cpu_act_bwd,
    .xent = cpu_xent,
    .gather = cpu_gather,
    .adam = cpu_adam,
    .sgd = cpu_sgd,
    .backprop_step = cpu_backprop_step,
    .normalize_images = cpu_normalize_images,
};

lam_status cpu_ctx_init(lam_ctx *ctx) {
  ctx->be = &lam_cpu_backend;
  int nt = lam_omp_max_threads();
  snprintf(ctx->name, sizeof ctx->name, "cpu (%d OpenMP thread%s)", nt, nt == 1 ? "" : "s");
  return LAM_OK;
}
