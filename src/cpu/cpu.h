/* cpu.h — the CPU backend's ops, under the same names as their CUDA twins (cuda/cuda.h), cpu_ prefix. */
#ifndef LAMINA_CPU_H
#define LAMINA_CPU_H

#include <stdint.h>

#include "../internal.h"

void cpu_hidden_f32(size_t n, const float *g, const float *w, float *out);
void cpu_hidden_u8(size_t n, const uint8_t *g, const float *w, float *out);
lam_status cpu_hidden(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                      lam_hidden_timing *timing);
lam_status cpu_normalize(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, float *out);
lam_status cpu_weigh(lam_ctx *ctx, size_t n, const float *a, const float *w, float *out);
lam_status cpu_tanh(lam_ctx *ctx, size_t n, const float *x, float *out);



/* nn primitives (cpu/nn.c, cpu/gemm.c); see internal.h for what each does. */
lam_status cpu_gemm(lam_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                    const float *B, int ldb, float beta, float *C, int ldc);
lam_status cpu_zero(lam_ctx *ctx, void *p, size_t bytes);
lam_status cpu_gemm_bf16(lam_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                         const uint16_t *B, int ldb, float beta, void *C, int c_bf16, int ldc);
lam_status cpu_to_bf16(lam_ctx *ctx, size_t n, const float *src, uint16_t *dst);
lam_status cpu_set_precision(lam_ctx *ctx, int p);
lam_status cpu_im2col(lam_ctx *ctx, const lam_conv_geom *g, int B, const float *x, void *col, int bf16);
lam_status cpu_col2im(lam_ctx *ctx, const lam_conv_geom *g, int B, const void *col, int bf16, float *dx);
lam_status cpu_cbp_to_bcp(lam_ctx *ctx, int B, int C, int P, const float *src, const float *bias, float *dst);
lam_status cpu_bcp_to_cbp(lam_ctx *ctx, int B, int C, int P, const float *src, float *dst, float *bias_grad);
lam_status cpu_add_bias(lam_ctx *ctx, int rows, int cols, float *y, const float *b);
lam_status cpu_bias_grad(lam_ctx *ctx, int rows, int cols, const float *dy, float *db);
lam_status cpu_maxpool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *x, float *y, int32_t *arg);
lam_status cpu_maxpool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, const int32_t *arg, float *dx);
lam_status cpu_act_fwd(lam_ctx *ctx, int act, size_t n, const float *x, float *y);
lam_status cpu_act_bwd(lam_ctx *ctx, int act, size_t n, const float *y, const float *dy, float *dx);
lam_status cpu_xent(lam_ctx *ctx, int B, int C, const float *logits, const uint8_t *labels, float *dlogits, float scale,
                    float *stats, uint8_t *pred);
lam_status cpu_gather(lam_ctx *ctx, int B, size_t sample, const uint8_t *images, const uint8_t *labels,
                      const int32_t *idx, const int32_t *cursor, float mean, float std, float *x, uint8_t *y);
lam_status cpu_adam(lam_ctx *ctx, size_t n, float *p, const float *g, float *m, float *v, float lr, float b1, float b2,
                    float eps, float wd, int decoupled, long step, const float *sched,
                     const int32_t *k);
lam_status cpu_sgd(lam_ctx *ctx, size_t n, float *p, const float *g, float *buf, float lr, float momentum, float wd,
                   int first, const float *sched, const int32_t *k);
lam_status cpu_step_advance(lam_ctx *ctx, int32_t *state, int B);
lam_status cpu_normalize_images(lam_ctx *ctx, size_t n, int c, int h, int w, int nhwc, const uint8_t *in,
                                const float *mean, const float *std, int bf16, void *out);
lam_status cpu_conv_pool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *G, const float *bias, float *y,
                             int32_t *arg);
lam_status cpu_conv_pool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, const float *y,
                             const int32_t *arg, void *dG, int bf16, float *db);
lam_status cpu_conv_pool_direct_fwd(lam_ctx *ctx, const lam_conv_geom *cg, const lam_pool_geom *pg, int B,
                                    const float *x, const float *W, const float *bias, float *y, int32_t *arg);
lam_status cpu_conv_pool_direct_bwd(lam_ctx *ctx, const lam_conv_geom *cg, const lam_pool_geom *pg, int B,
                                    const float *x, const float *dy, const float *y, const int32_t *arg, float *dW,
                                    float *db, float *work);
lam_status cpu_backprop_step(lam_ctx *ctx, size_t n, const float *err, const float *in, float lr, float *w);
#endif
