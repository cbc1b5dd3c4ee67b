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



/* The nn primitives (prims.h), cpu_ prefix: cpu/nn.c, cpu/nn_ops.c, cpu/gemm.c. */
#define LAM_CPU_PRIM(name, params) lam_status cpu_##name params;
LAM_NN_PRIMS(LAM_CPU_PRIM)
#undef LAM_CPU_PRIM
lam_status cpu_set_precision(lam_ctx *ctx, int p);
#endif
