/* cpu.h — the CPU backend's ops, under the same names as their CUDA twins (cuda/cuda.h), cpu_ prefix. */
#ifndef LAMINA_CPU_H
#define LAMINA_CPU_H

#include <stdint.h>
#include <string.h>

#include "../internal.h"

void cpu_hidden_f32(size_t n, const float *g, const float *w, float *out);
void cpu_hidden_u8(size_t n, const uint8_t *g, const float *w, float *out);
/* lam_hidden_memory_floor's pass: the hidden layer's bytes read and written on the pool, no math. */
void cpu_memory_floor(size_t n, const void *grey, lam_dtype gt, const float *w, float *out);
lam_status cpu_hidden(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                      lam_hidden_timing *timing);
lam_status cpu_normalize(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, float *out);
lam_status cpu_weigh(lam_ctx *ctx, size_t n, const float *a, const float *w, float *out);
lam_status cpu_tanh(lam_ctx *ctx, size_t n, const float *x, float *out);



/* A loop of n items on the pool (threadpool.c): fn(arg, begin, end) over chunks of about an eighth of a thread's
 * share, so that a thread whose core another process holds does less of it and no call waits for a thread
 * that has not been scheduled (an OpenMP region's join does). One thread where the loop's work (values
 * touched) is at most min_work. Each item must write only its own outputs: the results then do not depend
 * on how the items fall into chunks or threads. */
static inline void cpu_par(size_t n, size_t work, size_t min_work, lam_pool_fn fn, void *arg) {
  if (n < 2 || work <= min_work) {
    if (n) fn(arg, 0, n);
    return;
  }
  size_t chunk = n / (8 * (size_t)lam_pool_threads());
  lam_pool_for(n, chunk ? chunk : 1, fn, arg);
}

/* The nn primitives (prims.h), cpu_ prefix: cpu/<family>.c (gemm, conv, pool, norm, act, loss, optim, data,
 * layout). */
#define LAM_CPU_PRIM(name, params) lam_status cpu_##name params;
LAM_NN_PRIMS(LAM_CPU_PRIM)
#undef LAM_CPU_PRIM
lam_status cpu_set_precision(lam_ctx *ctx, int p);

/* cpu/layout.c: a primitive's buffers in a format other than NCHW float32, as float32 NCHW copies for its plain
 * twin. A job converts inputs (cpu_fmt_in) and makes output buffers (cpu_fmt_out; load_it: with dst's values,
 * for an output that is added to); cpu_fmt_end writes the outputs back in the job's format (when the status is
 * LAM_OK) and frees the copies. With a plain format the buffers are passed through. A failure sets the job's
 * status and returns NULL: the wrapper skips its call and cpu_fmt_end returns that status. */
#define CPU_FMT_MAX 6
typedef struct cpu_fmt_tmp {
  float *p;
  void *dst; /* an output's destination; NULL for an input */
  size_t B;
  int C;
  size_t P;
} cpu_fmt_tmp;
typedef struct cpu_fmt_job {
  lam_fmt f;
  lam_status status;
  int n;
  cpu_fmt_tmp t[CPU_FMT_MAX];
} cpu_fmt_job;
static inline cpu_fmt_job cpu_fmt_begin(lam_fmt f) {
  cpu_fmt_job j;
  memset(&j, 0, sizeof j);
  j.f = f;
  return j;
}
const float *cpu_fmt_in(cpu_fmt_job *j, size_t B, int C, size_t P, const void *src);
float *cpu_fmt_out(cpu_fmt_job *j, size_t B, int C, size_t P, void *dst, int load_it);
lam_status cpu_fmt_end(cpu_fmt_job *j, lam_status s);
/* dst = src, int32 values (B, C, P) re-laid out from NCHW (0) or NHWC (1) to the other (a maxpool's argmax). */
void cpu_relayout_i32(int B, int C, int P, int src_nhwc, const int32_t *src, int dst_nhwc, int32_t *dst);
#endif
