/* cuda.h — the CUDA backend's state and its error checks. Every CUDA call goes through CUDA_TRY (or
 * cuda_status), every launch through CUDA_LAUNCH_TRY, so a failure names the call, file and line.
 * With LAMINA_CUDA_SYNC=1 in the environment each launch is followed by a synchronize, so an
 * asynchronous fault is reported at the kernel that caused it. */
#ifndef LAMINA_CUDA_H
#define LAMINA_CUDA_H

#include <cuda_runtime.h>

#include "../internal.h"

/* Streams (and staging slots) the host-array path cycles through: with 4 (the default), three chunks
 * are in flight on the GPU while the host threads stage the fourth. LAMINA_STREAMS (1..8) overrides. */
#define LAM_CUDA_SLOTS 8
#define LAM_CUDA_SLOTS_DEFAULT 4
/* Row sums of few long rows split each row into up to this many chunks of at least ROW_SUM_CHUNK. */
#define ROW_SUM_CHUNK 4096
#define ROW_SUM_MAX_CHUNKS 64
#define ROW_SUM_PART_FLOATS 8192
/* The NHWC per-channel reductions' partial sums (reduce.cuh): blocks x channels x 2, and 2 per channel after. */
#define NHWC_PART_FLOATS ((size_t)1 << 20)

/* The hidden layer's streams, pinned staging and events (hidden.cu's; nothing else reads them). */
typedef struct cuda_hidden_state cuda_hidden_state;

typedef struct cuda_state {
  int device;
  int sm_count;
  int max_threads_per_sm;
  cudaStream_t stream; /* the context's stream: device-resident ops are queued here */
  cuda_hidden_state *hidden; /* the hidden layer's (hidden.cu), made with the context */
  int sync_debug;
  void *cublas; /* cublasHandle_t, made at the first matrix product (gemm.cu) */
  void *cublas_ws; /* its workspace */
  int capturing;   /* queue 0 is being captured into a graph: launches must not synchronize */
  cudaEvent_t *marks; /* the profiler's clock (nn/prof.c), made on demand and kept */
  size_t marks_cap;
  cudaStream_t copy_stream; /* queue 1: host->device copies that overlap the work on `stream` */
  float *rowsum_part;       /* ROW_SUM_PART_FLOATS partial row sums (conv.cu's row_sum, reduce.cuh, loss.cu) */
  float *nhwc_part;         /* NHWC_PART_FLOATS partial sums of the NHWC reductions (reduce.cuh) */
  unsigned *xent_done;      /* xent's count of finished blocks (loss.cu), 0 between calls */
  void *cudnn;              /* conv.cu's cuDNN handle and plans, made at the first convolution */
  int cudnn_failed;         /* cuDNN could not be loaded: im2col + GEMM */
  cudaEvent_t *events;      /* the event slots of event_record & co., made on demand and kept */
  size_t events_cap;
} cuda_state;

#ifdef __cplusplus
extern "C" {
#endif
/* LAM_OK for cudaSuccess; else records "<expr> failed: <error>" at file:line and returns
 * LAM_ERR_CUDA (LAM_ERR_OUT_OF_MEMORY for an allocation failure). */
lam_status cuda_status(cudaError_t e, const char *expr, const char *file, int line);
/* A CUDA library loaded at its first use (cuBLAS, NCCL): dlopen of its soname, then from the toolkit folder the
 * build found. NULL when neither loads; dlerror() then says why. */
void *cuda_dlopen(const char *soname);
/* Checks the launch just made (and, in sync-debug mode, its execution). */
lam_status cuda_after_launch(cuda_state *st, cudaStream_t s, const char *kernel, const char *file, int line);
/* Tells compute-sanitizer's initcheck that a library call on stream s wrote [p, p + bytes): cuBLAS's and
 * cuDNN's Hopper kernels store through the tensor memory accelerator, stores initcheck does not see, so
 * lamina's kernels reading their outputs were reported as reading uninitialized memory. Only the range
 * the call is defined to write; a no-op (one NVTX call) when no tool is attached. */
void cuda_mark_written(cudaStream_t s, const void *p, size_t bytes);
/* comm.cu: the backend's collectives (internal.h's comm_*). */
lam_status cuda_comm_init(lam_ctx *ctx, void **comm, int rank, int world, const unsigned char *id);
void cuda_comm_free(lam_ctx *ctx, void *comm);
lam_status cuda_comm_sum(lam_ctx *ctx, void *comm, int queue, float *x, size_t n, float weight);
lam_status cuda_comm_sum_host(lam_ctx *ctx, void *comm, double *x, size_t n);
#ifdef __cplusplus
}
#endif

#define CUDA_TRY(expr) LAM_TRY(cuda_status((expr), #expr, __FILE__, __LINE__))
#define CUDA_LAUNCH_TRY(st, stream, kernel) LAM_TRY(cuda_after_launch((st), (stream), (kernel), __FILE__, __LINE__))

/* The nn kernels' launches (cuda/<family>.cu): NT threads a block, blocks_for(n) blocks for n threads'
 * work (at most 2^30, at least 1; grid-stride loops cover the rest), and the check after each launch. */
#define NT 256
static inline unsigned blocks_for(size_t n) {
  size_t b = (n + NT - 1) / NT;
  if (b > 1u << 30) b = 1u << 30;
  return (unsigned)(b ? b : 1);
}
#define LAUNCH_CHECK(st, name) CUDA_LAUNCH_TRY((st), (st)->stream, name)

static inline cuda_state *cuda_st(lam_ctx *ctx) { return (cuda_state *)ctx->state; }

/* The CUDA twins of the CPU ops (cpu/cpu.h), cuda_ prefix. */
lam_status cuda_hidden(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                       lam_hidden_timing *timing);
int cuda_host_memory(lam_ctx *ctx, const void *p);
lam_status cuda_staging_floor(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                              double *ms);
lam_status cuda_normalize(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, float *out);
lam_status cuda_weigh(lam_ctx *ctx, size_t n, const float *a, const float *w, float *out);
lam_status cuda_tanh(lam_ctx *ctx, size_t n, const float *x, float *out);
/* The nn primitives (prims.h), cuda_ prefix: cuda/<family>.cu (gemm, conv, pool, norm, act, loss, optim, data,
 * layout). */
#define LAM_CUDA_PRIM(name, params) lam_status cuda_##name params;
LAM_NN_PRIMS(LAM_CUDA_PRIM)
#undef LAM_CUDA_PRIM
lam_status cuda_set_precision(lam_ctx *ctx, int p);
void cuda_nn_destroy(cuda_state *st);

/* The NHWC kernels behind the primitives (conv.cu's channel bias, norm.cu, pool.cu), for an NHWC format f (float32, bfloat16 or half); N = B*P rows
 * of C channels. nhwc_bn_* serve bn_* and bn_act_* (act BN_ACT_NONE, bn.cuh, for the plain BatchNorm);
 * nhwc_pool: kind 0 maxpool_fwd, 1 maxpool_bwd (in = dy), 2 avgpool_fwd, 3 avgpool_bwd. */
lam_status nhwc_channel_bias_fwd(lam_ctx *ctx, lam_fmt f, size_t N, int C, void *y, const float *bias);
lam_status nhwc_channel_bias_bwd(lam_ctx *ctx, lam_fmt f, size_t N, int C, const void *dy, float *db);
lam_status nhwc_bn_fwd(lam_ctx *ctx, lam_fmt f, size_t N, int C, int act, float alpha, const void *x, const void *r,
                       const float *gamma, const float *beta, void *y, float *mean, float *invstd, float *run_mean,
                       float *run_var, float momentum, float eps, int train);
lam_status nhwc_bn_bwd(lam_ctx *ctx, lam_fmt f, size_t N, int C, int act, float alpha, const void *x, const void *y,
                       const void *dy, const float *gamma, const float *beta, const float *mean, const float *invstd,
                       void *dx, void *dr, int dr_add, float *dgamma, float *dbeta);
lam_status nhwc_bn_sums(lam_ctx *ctx, lam_fmt f, size_t N, int C, const void *x, const void *dy, const float *mean,
                        const float *invstd, float *out, float *dgamma, float *dbeta);
lam_status nhwc_bn_sync_dx(lam_ctx *ctx, lam_fmt f, size_t N, int C, const void *x, const void *dy, const float *gamma,
                           const float *mean, const float *invstd, const float *sums, double n_local, void *dx);
lam_status nhwc_pool(lam_ctx *ctx, lam_fmt f, int kind, const lam_pool_geom *g, int B, const void *in, void *out,
                     int32_t *arg);
lam_status nhwc_plane_mean(lam_ctx *ctx, lam_fmt f, int bwd, int B, int C, int P, const void *in, void *out);
lam_status nhwc_upsample(lam_ctx *ctx, lam_fmt f, int bwd, int B, int C, int H, int W, int F, const void *in, void *out);
/* The error of a layout-aware primitive asked for NCHW bfloat16, which the CUDA backend does not run. */
#define nchw_bf16_unsupported(what)                                                                             \
  LAM_FAIL(LAM_ERR_UNSUPPORTED, "%s: NCHW bfloat16 activations are not a CUDA format (NHWC bfloat16 or NCHW " \
                                "float32 are)", what)
void cuda_conv_destroy(cuda_state *st); /* conv.cu */
int cuda_conv_stats_one_pass(lam_fmt f);  /* conv.cu: lam_backend.conv_stats_one_pass */

/* hidden.cu: the hidden layer's state — LAMINA_STREAMS and LAMINA_CHUNK read (a bad value is LAM_ERR_INVALID_ARG),
 * its streams and events made; its sync waits for its streams; its free (after that work) frees everything, pinned
 * staging included, and is a no-op for a context without one. */
lam_status cuda_hidden_state_create(lam_ctx *ctx);
lam_status cuda_hidden_sync(lam_ctx *ctx);
void cuda_hidden_state_free(lam_ctx *ctx);

#endif
