/* internal.h — the context and the backend table: what every backend provides and what a context
 * holds. The backend is chosen once, in context.c; nothing else in the library asks which it is. */
#ifndef LAMINA_INTERNAL_H
#define LAMINA_INTERNAL_H

#include <math.h>

#include "cache.h"
#include "lamina.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Geometry of a convolution and of a max-pool, per sample (NCHW). */
typedef struct lam_conv_geom {
  int C, H, W;    /* input */
  int K, stride, pad;
  int OH, OW;     /* output */
} lam_conv_geom;
typedef struct lam_pool_geom {
  int C, H, W, K, stride, OH, OW;
} lam_pool_geom;
/* Adam's step size lr / (1 - b1^step) and sqrt(1 - b2^step), as torch.optim.Adam computes them: in
 * double precision, then rounded to float. One function, so the host's table and each backend agree. */
static inline void lam_adam_coef(float lr, float b1, float b2, long step, float out[2]) {
  out[0] = (float)(lr / (1.0 - pow(b1, (double)step)));
  out[1] = (float)sqrt(1.0 - pow(b2, (double)step));
}
/* The direct first-layer path (conv_pool_direct_*): at most this many taps (C*K*K) per output, and
 * pooled outputs per block of its backward's partial sums. */
#define LAM_DIRECT_TAPS 32
#define LAM_DIRECT_CHUNK 2048
static inline size_t lam_direct_work_floats(int OC, int taps, size_t pooled_per_channel) {
  return (size_t)OC * ((pooled_per_channel + LAM_DIRECT_CHUNK - 1) / LAM_DIRECT_CHUNK) * (size_t)(taps + 1);
}
enum { LAM_ACT_RELU = 0, LAM_ACT_TANH, LAM_ACT_SIGMOID };

typedef struct lam_backend {
  const char *name; /* "cpu" or "cuda" */
  int direct_first_conv; /* 1: conv_pool_direct_* beat im2col + GEMM here (the GPU); the CPU's GEMMs win */
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

  /* ---- nn primitives over backend memory (nn/ builds the layers from these). Matrices are
   * row-major; "+=" means the primitive accumulates into its output. ---- */
  /* C = alpha * op(A) * op(B) + beta * C, op(A) is M×K, op(B) is K×N; ta/tb: 1 = transposed. In tf32 on
   * tensor cores when the context's precision says so (CUDA); else fp32 (the bf16 precision's layers
   * round their operands and call gemm_bf16). */
  lam_status (*gemm)(lam_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc);
  /* The same with A and B stored as bfloat16 (uint16_t bit patterns), summed in fp32; C is float, or
   * bfloat16 (c_bf16 = 1, rounded once at the end; then beta must be 0). */
  lam_status (*gemm_bf16)(lam_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda,
                          const uint16_t *B, int ldb, float beta, void *C, int c_bf16, int ldc);
  /* dst = src rounded to bfloat16 (to nearest even), n values. */
  lam_status (*to_bf16)(lam_ctx *ctx, size_t n, const float *src, uint16_t *dst);
  lam_status (*zero)(lam_ctx *ctx, void *p, size_t bytes);
  /* x (B, C, H, W) -> col (C*K*K, B*OH*OW): column b*OH*OW + p holds the patch of output p of sample b;
   * col is float, or bfloat16 (bf16 = 1). */
  lam_status (*im2col)(lam_ctx *ctx, const lam_conv_geom *g, int B, const float *x, void *col, int bf16);
  /* dx (B, C, H, W) = the patches of col (float, or bfloat16: bf16 = 1) summed back into place in fp32
   * (dx is overwritten). */
  lam_status (*col2im)(lam_ctx *ctx, const lam_conv_geom *g, int B, const void *col, int bf16, float *dx);
  /* dst (B, C, P) = src (C, B*P) transposed per sample, plus bias[c] (bias may be NULL). */
  lam_status (*cbp_to_bcp)(lam_ctx *ctx, int B, int C, int P, const float *src, const float *bias, float *dst);
  /* dst (C, B*P) = src (B, C, P); and bias_grad[c] += the sum of src over b and p (may be NULL). */
  lam_status (*bcp_to_cbp)(lam_ctx *ctx, int B, int C, int P, const float *src, float *dst, float *bias_grad);
  /* y (rows, cols) += b[c] on every row; db[c] += the sum of dy over the rows. */
  lam_status (*add_bias)(lam_ctx *ctx, int rows, int cols, float *y, const float *b);
  lam_status (*bias_grad)(lam_ctx *ctx, int rows, int cols, const float *dy, float *db);
  lam_status (*maxpool_fwd)(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *x, float *y, int32_t *arg);
  /* dx (B, C, H, W) = the gradient routed to each max (dx is zeroed here). */
  lam_status (*maxpool_bwd)(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, const int32_t *arg, float *dx);
  lam_status (*act_fwd)(lam_ctx *ctx, int act, size_t n, const float *x, float *y);
  /* dx = dy * act'(x), from the output y (relu: y > 0; tanh: 1 - y^2; sigmoid: y (1 - y)). */
  lam_status (*act_bwd)(lam_ctx *ctx, int act, size_t n, const float *y, const float *dy, float *dx);
  /* Softmax cross-entropy per sample of logits (B, C): stats[0] += loss, stats[1] += correct,
   * stats[2] += B; pred[b] = argmax (pred may be NULL); dlogits = scale * (softmax - onehot) unless NULL. */
  lam_status (*xent)(lam_ctx *ctx, int B, int C, const float *logits, const uint8_t *labels, float *dlogits,
                     float scale, float *stats, uint8_t *pred);
  /* x (B, sample) = (images[idx[b]] / 255 - mean) / std as float; y[b] = labels[idx[b]]. With cursor
   * (backend memory, may be NULL) idx starts *cursor entries further: read when the op runs, so a step
   * captured in a graph gathers the batch of the step it replays. */
  lam_status (*gather)(lam_ctx *ctx, int B, size_t sample, const uint8_t *images, const uint8_t *labels,
                       const int32_t *idx, const int32_t *cursor, float mean, float std, float *x, uint8_t *y);
  /* ---- fused conv -> relu -> maxpool (stride = K): the plain ops cbp_to_bcp + act_fwd(relu) +
   * maxpool_fwd, and maxpool_bwd + act_bwd(relu) + bcp_to_cbp, in one pass each. g is the pool's
   * geometry over the conv's output planes (C, H, W). ---- */
  /* y (B, C, OH, OW) = maxpool(relu(G + bias)) from the conv GEMM's output G (C, B*H*W); arg = the
   * index of each max within its H*W plane (the first maximum in row order, as maxpool_fwd). */
  lam_status (*conv_pool_fwd)(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *G, const float *bias, float *y,
                              int32_t *arg);
  /* dG (C, B*H*W) = dy at each window's argmax where y > 0, else 0, as float or bfloat16 (bf16 = 1: the
   * bf16 precision's GEMMs read it so); db[c] += the sum of row c of dG as stored. */
  lam_status (*conv_pool_bwd)(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, const float *y,
                              const int32_t *arg, void *dG, int bf16, float *db);
  /* ---- the same block as the first layer, without im2col and GEMMs: a direct convolution for few
   * input taps (C*K*K <= LAM_DIRECT_TAPS), whose input needs no gradient. cg is the conv's geometry,
   * pg the pool's over the conv's output. ---- */
  /* y, arg as conv_pool_fwd, from x (B, C, H, W), W (OC, C*K*K) and bias, each conv output summed over
   * its taps in (c, kh, kw) order. */
  lam_status (*conv_pool_direct_fwd)(lam_ctx *ctx, const lam_conv_geom *cg, const lam_pool_geom *pg, int B,
                                     const float *x, const float *W, const float *bias, float *y, int32_t *arg);
  /* dW += and db += the gradients through the pool's argmax and the relu, straight from x; work holds
   * lam_direct_work_floats(...) floats (partial sums, added up in a fixed order: deterministic). */
  lam_status (*conv_pool_direct_bwd)(lam_ctx *ctx, const lam_conv_geom *cg, const lam_pool_geom *pg, int B,
                                     const float *x, const float *dy, const float *y, const int32_t *arg, float *dW,
                                     float *db, float *work);
  /* One fused pass over the flat buffers. step is 1-based (bias correction): Adam's step size and
   * second-moment correction are lam_adam_coef(step). With sched (backend memory, may be NULL) they
   * are read when the op runs from sched[2 * *k], sched[2 * *k + 1] instead (a table the trainer fills
   * for an epoch, so the optimizer can sit in the captured step); for SGD, first is sched[2 * *k] != 0. */
  lam_status (*adam)(lam_ctx *ctx, size_t n, float *p, const float *g, float *m, float *v, float lr, float b1,
                     float b2, float eps, float wd, int decoupled, long step, const float *sched, const int32_t *k);
  lam_status (*sgd)(lam_ctx *ctx, size_t n, float *p, const float *g, float *buf, float lr, float momentum, float wd,
                    int first, const float *sched, const int32_t *k);
  /* The trainer's device-side step: state[0] += B (the gather's cursor), state[1] += 1 (the row of sched). */
  lam_status (*step_advance)(lam_ctx *ctx, int32_t *state, int B);
  /* gradient = error * input; w -= lr * gradient. */
  lam_status (*backprop_step)(lam_ctx *ctx, size_t n, const float *err, const float *in, float lr, float *w);

  /* out (n, c, h, w) = (in / 255 - mean[ch]) / std[ch] as float (bf16 = 0) or bfloat16 (bf16 = 1), from
   * NCHW or NHWC (nhwc = 1). */
  lam_status (*normalize_images)(lam_ctx *ctx, size_t n, int c, int h, int w, int nhwc, const uint8_t *in,
                                 const float *mean, const float *std, int bf16, void *out);

  /* ---- two queues and events, so host->device copies overlap compute (streaming batches, the
   * transfer benchmark). Queue 0 is where every op above runs; queue 1 is for copies. Events are
   * numbered slots, reserved before use (event_reserve only grows the pool; do not call it while
   * another thread may sync on an event). On the CPU everything runs at once on the calling thread:
   * copies are memcpy, an event is the host clock when recorded, waits return at once. ---- */
  lam_status (*copy_async)(lam_ctx *ctx, int queue, void *dst, const void *src, size_t bytes);
  lam_status (*event_reserve)(lam_ctx *ctx, size_t n);
  lam_status (*event_record)(lam_ctx *ctx, size_t ev, int queue);
  lam_status (*queue_wait)(lam_ctx *ctx, int queue, size_t ev); /* later work on queue waits for ev */
  lam_status (*event_sync)(lam_ctx *ctx, size_t ev);             /* the host waits for ev; any thread */
  lam_status (*event_ms)(lam_ctx *ctx, size_t a, size_t b, double *ms); /* from a to b, both done */

  /* ---- graphs: queue 0's work from graph_begin to graph_end is captured once (nothing runs) and
   * replayed by graph_launch with the same pointers (CUDA graphs). NULL on backends without them. ---- */
  lam_status (*graph_begin)(lam_ctx *ctx);
  lam_status (*graph_end)(lam_ctx *ctx, void **graph); /* ends the capture even on failure (*graph NULL) */
  lam_status (*graph_launch)(lam_ctx *ctx, void *graph);
  void (*graph_free)(lam_ctx *ctx, void *graph);
  /* Matrix products in precision p (lam_precision): LAM_ERR_UNSUPPORTED for one the backend lacks. */
  lam_status (*set_precision)(lam_ctx *ctx, int p);

  /* The profiler's clock: marks are numbered slots of a pool. mark records "now" in the order the
   * backend executes its work (an event on the stream on CUDA); mark_read gives the milliseconds from
   * slot 0 to slot i once that work is done. NULL on backends whose ops run synchronously on the host:
   * there the profiler reads the host clock itself. */
  lam_status (*mark_reserve)(lam_ctx *ctx, size_t n);
  lam_status (*mark)(lam_ctx *ctx, size_t i);
  lam_status (*mark_read)(lam_ctx *ctx, size_t i, double *ms);
} lam_backend;

struct lam_ctx {
  lam_device device;
  const lam_backend *be;
  char name[320];   /* lam_ctx_device_name */
  char reason[400]; /* lam_ctx_choice_reason */
  lam_cache cache;  /* backend memory handed out by lam_mem_alloc */
  size_t pinned_staging; /* bytes of pinned staging buffers the backend holds */
  lam_precision precision; /* of the matrix products (lam_ctx_set_precision) */
  int no_graphs;           /* graphs would hide what a debug mode wants to see (LAMINA_CUDA_SYNC=1) */
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
