/* internal.h — the context and the backend: what every backend provides, in a table per concern (memory, queue,
 * primitives with their supports check, communication, the hidden layer), and what a context holds. The backend
 * is chosen once, in context.c; nothing else in the library asks which it is. */
#ifndef LAMINA_INTERNAL_H
#define LAMINA_INTERNAL_H

#include <math.h>
#include <stdio.h>

#include "cache.h"
#include "lamina.h"
#include "prims.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Adam's step size lr / (1 - b1^step) and sqrt(1 - b2^step), as torch.optim.Adam computes them: in
 * double precision, then rounded to float. One function, so the host's table and each backend agree. */
/* Class names (an image folder's class folders, kept by its set and by a model's checkpoint): n strings in one
 * block, the n pointers, a NULL, then the bytes, so one free() frees it all. NULL for n = 0 or no memory
 * (dataset.c). lam_names_count: the strings before the NULL (0 for NULL). */
char **lam_names_copy(const char *const *names, size_t n);
size_t lam_names_count(const char *const *names);

/* The direct first-layer path (conv_pool_direct_*): at most this many taps (C*K*K) per output, and
 * pooled outputs per block of its backward's partial sums. */
#define LAM_DIRECT_TAPS 32
#define LAM_DIRECT_CHUNK 2048
static inline size_t lam_direct_work_floats(int OC, int taps, size_t pooled_per_channel) {
  return (size_t)OC * ((pooled_per_channel + LAM_DIRECT_CHUNK - 1) / LAM_DIRECT_CHUNK) * (size_t)(taps + 1);
}

/* lam_hidden's per-call choice on AUTO contexts (hidden_choice.c): a call on host arrays is expected to
 * take fixed + bytes * per_gb / 1e9 ms on each side, bytes being its inputs' and output's. */
typedef struct lam_hidden_model {
  lam_hidden_costs c;
  int fixed; /* set by lam_hidden_costs_set: not calibrated nor updated */
} lam_hidden_model;
lam_status lam_hidden_auto(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                           lam_hidden_timing *timing);

/* The backend, by concern: each part a table of its own (designated initializers in each backend's backend.c/.cu),
 * so a reader finds memory, the queue, the primitives, the ranks' sums and the course's hidden layer apart. */

/* Raw backend memory (behind the caching allocator, cache.c), pinned host memory and the copies that wait. */
typedef struct lam_mem_ops {
  lam_status (*raw_alloc)(lam_ctx *ctx, void **ptr, size_t bytes);
  void (*raw_free)(lam_ctx *ctx, void *ptr);
  lam_status (*upload)(lam_ctx *ctx, void *dst, const void *src_host, size_t bytes);
  lam_status (*download)(lam_ctx *ctx, void *dst_host, const void *src, size_t bytes);
  lam_status (*host_alloc)(lam_ctx *ctx, void **ptr, size_t bytes);
  lam_status (*host_free)(lam_ctx *ctx, void *ptr);
  /* 1 where p is host memory (pageable or pinned), 0 where it is the device's. NULL: all memory is host. */
  int (*host_memory)(lam_ctx *ctx, const void *p);
} lam_mem_ops;

/* Two queues and events, so host->device copies overlap compute (streaming batches, the transfer benchmark).
 * Queue 0 is where every primitive runs; queue 1 is for copies. Events are numbered slots, reserved before use
 * (event_reserve only grows the pool; do not call it while another thread may sync on an event). On the CPU
 * everything runs at once on the calling thread: copies are memcpy, an event is the host clock when recorded, waits
 * return at once. */
typedef struct lam_queue_ops {
  lam_status (*sync)(lam_ctx *ctx); /* the host waits for all of the context's work */
  lam_status (*copy_async)(lam_ctx *ctx, int queue, void *dst, const void *src, size_t bytes);
  lam_status (*event_reserve)(lam_ctx *ctx, size_t n);
  lam_status (*event_record)(lam_ctx *ctx, size_t ev, int queue);
  lam_status (*queue_wait)(lam_ctx *ctx, int queue, size_t ev); /* later work on queue waits for ev */
  lam_status (*event_sync)(lam_ctx *ctx, size_t ev);             /* the host waits for ev; any thread */
  lam_status (*event_ms)(lam_ctx *ctx, size_t a, size_t b, double *ms); /* from a to b, both done */
  /* Graphs: queue 0's work from graph_begin to graph_end is captured once (nothing runs) and replayed by
   * graph_launch with the same pointers (CUDA graphs). NULL on backends without them. */
  lam_status (*graph_begin)(lam_ctx *ctx);
  lam_status (*graph_end)(lam_ctx *ctx, void **graph); /* ends the capture even on failure (*graph NULL) */
  lam_status (*graph_launch)(lam_ctx *ctx, void *graph);
  void (*graph_free)(lam_ctx *ctx, void *graph);
  /* The profiler's clock: marks are numbered slots of a pool. mark records "now" in the order the backend executes
   * its work (an event on the stream on CUDA); mark_read gives the milliseconds from slot 0 to slot i once that work
   * is done. NULL on backends whose ops run synchronously on the host: there the profiler reads the host clock. */
  lam_status (*mark_reserve)(lam_ctx *ctx, size_t n);
  lam_status (*mark)(lam_ctx *ctx, size_t i);
  lam_status (*mark_read)(lam_ctx *ctx, size_t i, double *ms);
} lam_queue_ops;

/* The nn primitives (prims.h), which nn/ builds the model's ops from; arguments are validated by the caller. */
#define LAM_PRIM_ID(name, params) LAM_PRIM_##name,
enum { LAM_NN_PRIMS(LAM_PRIM_ID) LAM_PRIM_COUNT };
#undef LAM_PRIM_ID
const char *lam_prim_name(int prim); /* "gemm" for LAM_PRIM_gemm (context.c) */
typedef struct lam_prim_ops {
  /* Matrix products in precision p (lam_precision): LAM_ERR_UNSUPPORTED for one the backend lacks. */
  lam_status (*set_precision)(lam_ctx *ctx, int p);
  /* Whether primitive prim (LAM_PRIM_*) runs on activations in format f here: 1, or 0 with *why (a sentence) set.
   * nn_graph_check asks it of every primitive a model's nodes call, so a format the backend lacks fails when the
   * model is made, not in its first step. Shape limits (a kernel's grid) are the primitives' own errors. */
  int (*supports)(int prim, lam_fmt f, const char **why);
#define LAM_PRIM_FIELD(name, params) lam_status(*name) params;
  LAM_NN_PRIMS(LAM_PRIM_FIELD)
#undef LAM_PRIM_FIELD
} lam_prim_ops;

/* Sums over data-parallel ranks (nn/train.c), NCCL's on CUDA (cuda/comm.cu); the CPU has none (lam_backend.comm
 * NULL): its ranks sum through the caller's lam_collective. init blocks until every rank has joined; sum
 * sums weight * x over the ranks on the queue (0 or 1; capturable); sum_host sums host doubles in place and
 * waits for queue 0. */
typedef struct lam_comm_ops {
  lam_status (*init)(lam_ctx *ctx, void **comm, int rank, int world, const unsigned char *id);
  void (*free)(lam_ctx *ctx, void *comm);
  lam_status (*sum)(lam_ctx *ctx, void *comm, int queue, float *x, size_t n, float weight);
  lam_status (*sum_host)(lam_ctx *ctx, void *comm, double *x, size_t n);
} lam_comm_ops;

/* The course's hidden layer, out = tanh(grey / 255 * w) (ops.c validates; hidden.c / hidden.cu run it). */
typedef struct lam_hidden_ops {
  lam_status (*run)(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                    lam_hidden_timing *timing);
  /* The host copies of a call on host arrays without the device's work; NULL where there is no host staging. */
  lam_status (*staging_floor)(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                              double *ms);
  /* Its three steps as separate calls (the course's way, for comparison). */
  lam_status (*normalize)(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, float *out);
  lam_status (*weigh)(lam_ctx *ctx, size_t n, const float *a, const float *w, float *out);
  lam_status (*tanh_)(lam_ctx *ctx, size_t n, const float *x, float *out);
} lam_hidden_ops;

typedef struct lam_backend {
  const char *name; /* "cpu" or "cuda" */
  int direct_first_conv; /* 1: conv_pool_direct_* beat im2col + GEMM here (the GPU); the CPU's GEMMs win */
  /* Convolutions run fastest on NHWC activations here (cuDNN's tensor-core kernels): 1 on CUDA, where
   * nn_choose_fmt then lays out models with a conv of their own in NHWC; 0 on the CPU (its twins convert). */
  int nhwc_convs;
  /* Whether conv2d_fwd_stats may sum in the conv's own kernel in format f: on CUDA with cuDNN, NHWC float16 (its
   * conv + GenStats graph: cuDNN has no such engine for bfloat16 or float32); never on the CPU (a pass after). */
  int (*conv_stats_one_pass)(lam_fmt f);
  const lam_mem_ops *mem;
  const lam_queue_ops *queue;
  const lam_prim_ops *prim;
  const lam_comm_ops *comm; /* NULL: no collective of its own */
  const lam_hidden_ops *hidden;
  void (*destroy)(lam_ctx *ctx); /* frees the backend state, not the cache */
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
  int poison;              /* LAMINA_POISON=1: every block lam_mem_alloc hands out starts as NaNs (a read of what
                            * nothing wrote shows in the results; compute-sanitizer's initcheck misses writes made
                            * by cuDNN's and cuBLAS's Hopper kernels) */
  int threads;             /* threads of the host-side work (cpu/threads.c; lam_ctx_set_threads) */
  lam_model_options model_opts; /* the models made on it (lam_ctx_set_model_options) */
  char threads_why[224];   /* where that count came from, for the device name and `lamina info` */
  lam_device want;         /* the device asked for: AUTO lets lam_hidden choose per call (hidden_choice.c) */
  lam_hidden_model hidden; /* that choice's costs */
  char hidden_choice[240]; /* lam_hidden_choice: where the last lam_hidden ran and why */
  void *state;      /* the backend's own state */
};

/* The backends. cuda_ctx_init fills ctx->be, ctx->state and ctx->name, or fails (no device). */
extern const lam_backend lam_cpu_backend;
/* What a run reads and writes (files.c; the run and the kinds are lamina.h's).
 * Opens path for reading: only a regular file (a FIFO or device is refused before the open could wait);
 * recorded as an input of the run when record is set. what names it in messages ("checkpoint"). */
lam_status lam_input_open(const char *path, const char *what, lam_file_kind kind, int record, int *fd);
/* What a file that is not a regular one is, for a message: "a directory", "a FIFO (named pipe)", ... (st_mode) */
const char *lam_file_mode_name(unsigned mode);
lam_status lam_input_fopen(const char *path, const char *what, lam_file_kind kind, int record, FILE **f);
/* Claims path as an output of this kind: refused where it is an input, another output (again = 0: another
 * claim with another what; again = 1, the writer's own: one of another kind), in an input folder, or an
 * existing file of another kind. */
lam_status lam_output_claim(const char *path, const char *what, lam_file_kind kind, int again);
/* An existing file at path is empty or of this kind (its first bytes), or no file is there. */
lam_status lam_file_kind_check(const char *path, const char *what, lam_file_kind kind);
/* lam_output_path_check, and where to write: path, or the file its symbolic link points to (out, size
 * bytes; outpath.c). */
lam_status lam_output_path_resolve(const char *path, const char *what, char *out, size_t size);
/* lam_output_check for a writer's own early check: a claim of this kind made before (the caller's, under
 * another name) is this output. */
lam_status lam_output_recheck(const char *path, const char *what, lam_file_kind kind);
/* lam_output_write_atomic (lamina.h: temporary file, fsync, rename) of an output of this kind, checked and
 * claimed as above (outpath.c). */
lam_status lam_output_write(const char *path, const char *what, lam_file_kind kind, const void *data, size_t n);
/* The kind of the bytes p (n of them), LAM_FILE_NONE if none lamina writes. */
lam_file_kind lam_file_kind_of(const uint8_t *p, size_t n);

lam_status cpu_ctx_init(lam_ctx *ctx);
void lam_cpu_name(lam_ctx *ctx); /* "cpu (N threads: why)" from ctx->threads and threads_why */
lam_status cuda_ctx_init(lam_ctx *ctx);
int cuda_device_count(const char **why);
lam_status cuda_device_info_get(int device, lam_cuda_device_info *info);
const char *cuda_archs(void);
int cuda_runtime_version(void);
lam_status cuda_nccl_unique_id(unsigned char *id, size_t bytes); /* cuda/comm.cu */

/* Host-side helpers shared by the backends (cpu/hostcopy.c). */
double lam_now_ms(void); /* a monotonic clock, milliseconds */
int lam_omp_max_threads(void); /* OpenMP threads a parallel region gets (1 without OpenMP) */
/* cpu/threads.c: the default thread count (LAMINA_THREADS, OMP_NUM_THREADS, else the cores this process
 * may use; why says which), those cores (affinity cut to the cgroup's CPU quota; why says which bound),
 * a count asked for by `by` cut to them (why says so when it was), and the count the calling thread's
 * OpenMP regions and the pool use from now. */
int lam_cpu_default_threads(char *why, size_t size);
int lam_cpu_allowed_cores(char *why, size_t size);
int lam_cpu_bound_threads(int asked, const char *by, char *why, size_t size);
/* The CPU quota (cores, e.g. 2.5) of the cgroups a process is in, read from its /proc/self/cgroup and
 * /proc/self/mountinfo, with root (NULL: none) put before the mount points: the smallest on the way up
 * from its cgroup to the mount's; 0 where none is set. src names the file that set it. */
double lam_cgroup_cpu_quota(const char *proc_cgroup, const char *mountinfo, const char *root, char *src, size_t size);
/* A bad LAMINA_THREADS is an error; OMP_NUM_THREADS past the cores is cut to them on the calling thread. */
lam_status lam_cpu_threads_env_check(void);
void lam_cpu_use_threads(int n);
/* ---- streamed sets (data/sample.c) ---- */
/* What a streamed set's samples come from: fill(state, i, draw, px, labels) writes sample i of the source, its
 * pixels frame by frame as decoders give them, (t, h, w, c) interleaved (lam_dataset_rows makes them the set's
 * planar (t, c, h, w)), and its labels; draw is the view's (lam_source_set_draw); reentrant (called from every pool
 * thread at once; decoder state on its stack). */
typedef struct lam_source lam_source;
typedef lam_status (*lam_fill_fn)(void *state, size_t i, uint64_t draw, uint8_t *px, uint8_t *labels);
/* A source of n samples of frames of c channels of h x w (drop(state) frees it when the last view goes; on failure
 * too). skip_bad: a sample whose fill fails with LAM_ERR_IO is replaced by the next of its part and counted
 * (lam_source_replaced). */
lam_status lam_source_make(size_t n, int c, int h, int w, lam_fill_fn fill, void (*drop)(void *), void *state,
                           int skip_bad, lam_source **out);
/* A view of the n samples i of s where pick[i] == want (lam_dataset_split's parts), sharing s's source. */
lam_status lam_source_subset(const lam_source *s, const uint8_t *pick, uint8_t want, size_t n, lam_source **out);
void lam_source_free(lam_source *s);
/* The draw fill gets from now on for this view: 0 (the default) a sample's fixed choice (a video's middle clip), else
 * a key the sample's random choices come from (a training clip's start: the trainer sets one an epoch). */
void lam_source_set_draw(lam_source *s, uint64_t draw);
/* The view's samples are K clips of each video, K in a row (lam_dataset_clips); a subset's view is 1 again. */
void lam_source_set_clips(lam_source *s, int K);
int lam_source_clips(const lam_source *s);
/* lam_dataset_rows into blocks of `per` rows: row r to images[r / per] at row r % per (a streaming feed's slots,
 * several batches decoded in one pass of the pool); either array may be NULL. */
lam_status lam_dataset_rows_blocks(const lam_dataset *d, const int32_t *idx, size_t n, size_t per,
                                   uint8_t *const *images, uint8_t *const *labels);
size_t lam_source_replaced(const lam_source *s);
/* The state the source was made with, where its fill is `fill` (so the caller knows its type); else NULL. */
void *lam_source_state(const lam_source *s, lam_fill_fn fill);
/* Host memory the machine has available now (MemAvailable, or the cgroup's limit less its use where lower); 0
 * unknown. */
size_t lam_mem_available(void);
/* Whether a part whose decoded bytes are part_bytes streams, by o's rule: asked for (on, off), or (auto) those bytes
 * over o->memory_cap, or without one over three quarters of the memory available; notes them in o->part_bytes. */
int lam_stream_wanted(lam_image_opts *o, size_t part_bytes);

/* cpu/threadpool.c: fn(arg, begin, end) over [0, n) in chunks of `chunk` items, taken from a shared counter by
 * the calling thread and the pool's workers (lam_pool_set_threads of them in all); returns when every
 * chunk is done. A thread that is not scheduled takes no chunk and so holds nothing up. */
typedef void (*lam_pool_fn)(void *arg, size_t begin, size_t end);
void lam_pool_for(size_t n, size_t chunk, lam_pool_fn fn, void *arg);
void lam_pool_set_threads(int n);
int lam_pool_threads(void);
/* Copies several (dst, src, bytes) pieces using all OpenMP threads; the pieces are split evenly. */
typedef struct lam_copy_job {
  void *dst;
  const void *src;
  size_t bytes;
} lam_copy_job;
void lam_parallel_copy(const lam_copy_job *jobs, int njobs);
/* With LAMINA_PREFAULT=1, maps in the pages wholly inside [p, p + bytes) for writing, in one call
 * (hostcopy.c: where that pays and where it does not). */
void lam_prefault(void *p, size_t bytes);
/* The first touch of fresh memory (one write per page) on all threads: mapping and zeroing the pages
 * is the cost, and it divides over the cores. */
void lam_parallel_touch(void *p, size_t bytes);

/* What bn_act_pool_fwd/bwd take (prims.h), checked alike by both twins: a K×K window of stride K with its offset in a
 * byte (K <= 15) and the floor's output size, and an activation whose backward can come from z. */
static inline lam_status lam_bn_act_pool_check(const char *what, const lam_pool_geom *g, int act) {
  if (g->stride != g->K || g->K * g->K > 255 || g->OH != g->H / g->K || g->OW != g->W / g->K)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "%s: the window must be K×K with stride K (K <= 15, output H/K × W/K); got K %d, "
                    "stride %d, %dx%d -> %dx%d", what, g->K, g->stride, g->H, g->W, g->OH, g->OW);
  if (act != LAM_ACT_RELU && act != LAM_ACT_LEAKY && act != LAM_ACT_GELU)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "%s: the activation must be relu, leaky or gelu (its backward recomputes z), not %d",
                    what, act);
  return LAM_OK;
}

#ifdef __cplusplus
}
#endif
#endif
