/* internal.h — the context and the backend table: what every backend provides and what a context
 * holds. The backend is chosen once, in context.c; nothing else in the library asks which it is. */
#ifndef LAMINA_INTERNAL_H
#define LAMINA_INTERNAL_H

#include "cache.h"
#include "lamina.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct lam_backend {
  const char *name; /* "cpu" or "cuda" */
  /* Raw backend memory, behind the caching allocator. */
  lam_status (*raw_alloc)(lam_ctx *ctx, void **ptr, size_t bytes);
  void (*raw_free)(lam_ctx *ctx, void *ptr);
  lam_status (*upload)(lam_ctx *ctx, void *dst, const void *src_host, size_t bytes);
  lam_status (*download)(lam_ctx *ctx, void *dst_host, const void *src, size_t bytes);
  lam_status (*host_alloc)(lam_ctx *ctx, void **ptr, size_t bytes);
  lam_status (*host_free)(lam_ctx *ctx, void *ptr);
  lam_status (*sync)(lam_ctx *ctx);
  void (*destroy)(lam_ctx *ctx); /* frees the backend state, not the cache */
  /* Ops: arguments are validated by the caller (ops.c). */
  lam_status (*hidden)(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w,
                       float *out, lam_hidden_timing *timing);
  /* NULL where the backend has no host staging (the CPU). */
  lam_status (*staging_floor)(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                              double *ms);
  lam_status (*normalize)(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, float *out);
  lam_status (*weigh)(lam_ctx *ctx, size_t n, const float *a, const float *w, float *out);
  lam_status (*tanh_)(lam_ctx *ctx, size_t n, const float *x, float *out);
} lam_backend;

struct lam_ctx {
  lam_device device;
  const lam_backend *be;
  char name[320];   /* lam_ctx_device_name */
  char reason[400]; /* lam_ctx_choice_reason */
  lam_cache cache;  /* backend memory handed out by lam_mem_alloc */
  size_t pinned_staging; /* bytes of pinned staging buffers the backend holds */
  void *state;      /* the backend's own state */
};

/* The backends. cuda_ctx_init fills ctx->be, ctx->state and ctx->name, or fails (no device). */
extern const lam_backend lam_cpu_backend;
lam_status cpu_ctx_init(lam_ctx *ctx);
lam_status cuda_ctx_init(lam_ctx *ctx);
int cuda_device_count(const char **why);
lam_status cuda_device_info_get(int device, lam_cuda_device_info *info);
const char *cuda_archs(void);
int cuda_runtime_version(void);

/* Host-side helpers shared by the backends (cpu/hostcopy.c). */
double lam_now_ms(void); /* a monotonic clock, milliseconds */
int lam_omp_max_threads(void); /* OpenMP threads a parallel region gets (1 without OpenMP) */
/* Copies several (dst, src, bytes) pieces using all OpenMP threads; the pieces are split evenly. */
typedef struct lam_copy_job {
  void *dst;
  const void *src;
  size_t bytes;
} lam_copy_job;
void lam_parallel_copy(const lam_copy_job *jobs, int njobs);

#ifdef __cplusplus
}
#endif
#endif
