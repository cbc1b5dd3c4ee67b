/* lamina.h — the public C API of liblamina.
 *
 * lamina is a neural-network engine in C with CUDA. Every call returns a lam_status; on failure
 * lam_last_error() gives a message that says what failed and where (the call, file and line).
 * The library never exits or aborts the process.
 *
 * A context (lam_ctx) owns one backend — CPU (OpenMP) or CUDA — chosen in one place: LAM_DEVICE_AUTO
 * takes CUDA when a device is present, else the CPU; the environment variable LAMINA_DEVICE
 * (cpu|cuda|auto) overrides AUTO. A context also owns a caching allocator for backend memory and, on
 * CUDA, pinned host staging buffers and streams. A context is used by one thread at a time.
 */
#ifndef LAMINA_H
#define LAMINA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LAMINA_VERSION "0.2.0"

typedef enum lam_status {
  LAM_OK = 0,
  LAM_ERR_INVALID_ARG,   /* a bad argument: NULL pointer, bad size, bad value */
  LAM_ERR_NO_DEVICE,     /* CUDA asked for where there is none (or built without CUDA) */
  LAM_ERR_CUDA,          /* a CUDA runtime call or kernel launch failed */
  LAM_ERR_OUT_OF_MEMORY, /* host or device memory exhausted, or over a cap */
  LAM_ERR_UNSUPPORTED,   /* valid, but not supported by this backend */
  LAM_ERR_IO,            /* a file could not be read or written */
  LAM_ERR_DIVERGED,      /* training produced a loss that is NaN or infinite: the parameters are lost */
  LAM_ERR_INTERRUPTED    /* stopped on request (lam_trainer_set_stop) between two steps; it can resume */
} lam_status;

typedef enum lam_device { LAM_DEVICE_AUTO = 0, LAM_DEVICE_CPU, LAM_DEVICE_CUDA } lam_device;

/* Element types. The hidden layer takes F32 or U8 greys; the image normalize op writes F32 or BF16; the
 * transfer benchmark moves any of them. */
typedef enum lam_dtype { LAM_DTYPE_F32 = 0, LAM_DTYPE_U8, LAM_DTYPE_I8, LAM_DTYPE_F16, LAM_DTYPE_BF16 } lam_dtype;

typedef struct lam_ctx lam_ctx;

/* ---- errors ---------------------------------------------------------------------------------- */

/* The message of the last failure on this thread ("" if none): what failed, where, how to fix. */
const char *lam_last_error(void);
/* A short fixed name for a status ("invalid argument", ...). */
const char *lam_status_str(lam_status s);

/* ---- context and backend choice --------------------------------------------------------------- */

/* Creates a context on the wanted device. AUTO honours LAMINA_DEVICE, then picks CUDA if a device is
 * present, else the CPU. Asking for CUDA where there is none returns LAM_ERR_NO_DEVICE. A CUDA context
 * takes the GPU that LAMINA_CUDA_DEVICE numbers (0, 1, ...), else the first. */
lam_status lam_ctx_create(lam_ctx **ctx, lam_device want);
void lam_ctx_free(lam_ctx *ctx); /* NULL is fine */
lam_device lam_ctx_device(const lam_ctx *ctx);
/* Human-readable description of the backend, e.g. "cuda:0 NVIDIA H200 (sm_90, 132 SMs)" or
 * "cpu (2 OpenMP threads)". */
const char *lam_ctx_device_name(const lam_ctx *ctx);
/* Why AUTO chose what it chose, e.g. "auto: no NVIDIA driver or GPU found; running on the CPU". Empty
 * when the device was asked for explicitly. */
const char *lam_ctx_choice_reason(const lam_ctx *ctx);
/* Waits until all work queued on the context is done. */
lam_status lam_ctx_sync(lam_ctx *ctx);
/* Threads of the host-side work (the CPU backend's ops; on CUDA the host copies, and the hidden layer
 * when lam_hidden runs it on the host). By default: LAMINA_THREADS if set, else OMP_NUM_THREADS if set,
 * else the cores this process may use: its CPU affinity cut to its cgroup's CPU quota (cpu.max or
 * cpu.cfs_quota_us). A count past those cores is cut to them. A core that another process keeps busy is
 * not left out: the work is handed out in small chunks, so the thread that shares it does less of it.
 * OpenMP's count applies to the thread that calls it (and made the context), the pool's (the hidden
 * layer, host copies, the CPU convolutions) to the process: the last count set. lam_ctx_device_name says
 * the count and why. */
lam_status lam_ctx_set_threads(lam_ctx *ctx, int threads);
int lam_ctx_threads(const lam_ctx *ctx);

/* How the models made on a context run their graph: the paths lamina keeps to compare against (the defaults are
 * the fastest measured). */
typedef struct lam_model_options {
  int fuse;        /* 0 the plain ops; 1 conv -> relu -> maxpool fused after the GEMM; 2 also the first layer as a
                    * direct convolution on any backend; 3 (default) the direct first layer where the backend prefers
                    * it */
  int layout;      /* 0 (default) the graph's choice; 1 NCHW; 2 NHWC */
  int conv_im2col; /* 1: a conv on its own runs im2col + GEMM as the fused block does, not the backend's conv2d */
  int conv_stats;  /* a conv whose output a BatchNorm normalizes in training computes that BatchNorm's batch
                    * statistics with the conv: 0 never (each BatchNorm sums its own input); 1 (default) where the
                    * backend can do it in the conv's own kernel (CUDA with cuDNN, float16 NHWC: its conv + GenStats
                    * graph, taken where it measures faster than the conv and a separate sum); 2 on every backend and
                    * format, and on CUDA in float16 cuDNN's graph wherever it has an engine, untimed (the route's
                    * tests) */
} lam_model_options;
lam_model_options lam_model_options_default(void);
/* A context starts with the defaults as the environment changes them: LAMINA_FUSE=0|1|2|3, LAMINA_LAYOUT=auto|nchw|
 * nhwc, LAMINA_CONV=im2col|auto, LAMINA_CONV_STATS=0|1|2 (a value other than these makes lam_ctx_create fail, naming it). The models made
 * on ctx from then on (lam_model_create, a checkpoint's, a safetensors file's) take o; models made before keep
 * theirs. */
lam_status lam_ctx_set_model_options(lam_ctx *ctx, const lam_model_options *o);
lam_model_options lam_ctx_model_options(const lam_ctx *ctx);
/* The default count as above, without a context; why (size bytes) says where it came from. */
int lam_default_threads(char *why, size_t size);
/* The most threads lamina runs: lam_ctx_set_threads's and LAMINA_THREADS's bound (a bad LAMINA_THREADS
 * makes lam_ctx_create fail), and OMP_NUM_THREADS past the cores is cut to them (libgomp, which reads that
 * variable itself, overflowed its stack starting a team of 100000). lam_threads_note says what lamina
 * did with OMP_NUM_THREADS when it was cut or refused (NULL when it was used as given, or unset). */
#define LAM_MAX_THREADS 4096
const char *lam_threads_note(void);

/* Parses "cpu", "cuda" or "auto" (case-sensitive). */
lam_status lam_device_parse(const char *s, lam_device *out);
const char *lam_device_str(lam_device d);
/* Precision of the matrix products (GEMMs, and so dense and conv layers). FP32 is IEEE single
 * everywhere; TF32 runs them on tensor cores with inputs rounded to 10-bit mantissas and fp32
 * accumulation (CUDA only); BF16 rounds the operands of the dense and conv GEMMs to bfloat16 (8-bit
 * mantissas) and sums in fp32: on CUDA on tensor cores. A model with a conv of its own keeps its
 * activations NHWC on CUDA (LAMINA_LAYOUT to force NCHW or NHWC), and in BF16 they and their gradients
 * are bfloat16 too (half the bytes); in NCHW a conv's im2col and column gradient are stored as bf16 and
 * the activations stay fp32. FP16 is BF16 with IEEE half (11-bit mantissas, range ±65504) in place of
 * bfloat16; its trainer scales the loss dynamically, as PyTorch's GradScaler does (lam_trainer_loss_scale),
 * so that small gradients keep their bits and a step whose gradients overflow is skipped. On the CPU the
 * 16-bit precisions are emulated (same rounding, no faster), to check the GPU against. The GPU's direct
 * first-layer conv (no GEMM) stays fp32. Parameters (the master weights), gradients and optimizer state
 * stay fp32 in every precision. */
typedef enum lam_precision { LAM_PRECISION_FP32 = 0, LAM_PRECISION_TF32, LAM_PRECISION_BF16, LAM_PRECISION_FP16 } lam_precision;
lam_status lam_ctx_set_precision(lam_ctx *ctx, lam_precision p);
lam_status lam_precision_parse(const char *s, lam_precision *out); /* "fp32", "tf32", "bf16", "fp16" */
const char *lam_precision_str(lam_precision p);

/* Parses "f32", "u8", "i8", "f16" or "bf16". */
lam_status lam_dtype_parse(const char *s, lam_dtype *out);
const char *lam_dtype_str(lam_dtype t);
size_t lam_dtype_size(lam_dtype t);

/* ---- build and machine ----------------------------------------------------------------------- */

typedef struct lam_build_info {
  const char *version;
  int with_cuda;          /* compiled with the CUDA backend */
  int cuda_runtime;       /* CUDA runtime version compiled against, e.g. 13000; 0 without CUDA */
  const char *cuda_archs; /* architectures compiled for, e.g. "90"; "" without CUDA */
  int with_openmp;
  int omp_max_threads;
} lam_build_info;
void lam_build_info_get(lam_build_info *info);

typedef struct lam_cuda_device_info {
  char name[256];
  int cc_major, cc_minor;
  int sm_count;
  size_t mem_total, mem_free;
  size_t l2_bytes;
  double mem_bus_gbps;  /* theoretical memory bandwidth from clock and bus width, GB/s */
} lam_cuda_device_info;
/* Number of CUDA devices visible (0 without a driver, a device or CUDA support). Never fails;
 * *why, if not NULL, says why there are none. */
int lam_cuda_device_count(const char **why);
lam_status lam_cuda_device_info_get(int device, lam_cuda_device_info *info);

/* ---- memory ---------------------------------------------------------------------------------- */

/* Figures of the context's caching allocator, in bytes. On CUDA these are device memory; on the CPU,
 * host memory handed out through lam_mem_alloc. */
typedef struct lam_mem_stats {
  size_t in_use;      /* handed out and not yet freed */
  size_t reserved;    /* held from the system: in use plus cached */
  size_t peak;        /* highest in_use since the context was created */
  size_t cached;      /* reserved - in_use: free blocks kept for reuse */
  size_t pinned_host; /* pinned host staging buffers owned by the context */
  uint64_t allocs, cache_hits; /* lam_mem_alloc calls and how many were served from the cache */
} lam_mem_stats;
lam_status lam_mem_stats_get(const lam_ctx *ctx, lam_mem_stats *out);
/* Backend memory (device memory on CUDA), at least 256-byte aligned, from the caching allocator. */
lam_status lam_mem_alloc(lam_ctx *ctx, void **ptr, size_t bytes);
/* Returns a block to the cache. NULL is fine; a pointer not from lam_mem_alloc is an error. */
lam_status lam_mem_free(lam_ctx *ctx, void *ptr);
/* Caps the bytes the context's allocator may hold (0: no cap). Going over it is LAM_ERR_OUT_OF_MEMORY
 * with the numbers, like running out of device memory; a cap below what is reserved now is an error.
 * A CPU context starts capped at the host memory available when it is made (/proc/meminfo's
 * MemAvailable), so a model too big for the machine is that error, not the kernel's OOM killer. */
lam_status lam_mem_set_limit(lam_ctx *ctx, size_t bytes);
/* Counts bytes the caller holds in this context's memory outside the allocator (the CLI's decoded data set, on a
 * CPU context) against the cap: blocks then fit in the cap less them, and the cap's message names them. Replaces
 * the count before (0: none); LAM_ERR_OUT_OF_MEMORY where they and what the allocator holds pass the cap. */
lam_status lam_mem_hold(lam_ctx *ctx, size_t bytes);
/* The process's resident host memory now and at its peak, in bytes (/proc/self/statm, getrusage); 0 where unknown.
 * Either pointer may be NULL. */
void lam_host_memory(size_t *resident, size_t *peak);
/* Gives every cached (free) block back to the system; returns the bytes released in *released. */
lam_status lam_mem_release_cached(lam_ctx *ctx, size_t *released);
/* Copies between host memory and backend memory (a plain memcpy on the CPU). Synchronous. */
lam_status lam_mem_upload(lam_ctx *ctx, void *dst, const void *src_host, size_t bytes);
lam_status lam_mem_download(lam_ctx *ctx, void *dst_host, const void *src, size_t bytes);
/* Pinned (page-locked) host memory on CUDA, ordinary aligned host memory on the CPU. */
lam_status lam_host_alloc(lam_ctx *ctx, void **ptr, size_t bytes);
lam_status lam_host_free(lam_ctx *ctx, void *ptr);

/* ---- the hidden layer: out[i] = tanh(grey[i] / 255 * w[i]) ---------------------------------- */

/* Where the time of one call went, in milliseconds. On CUDA the stages of the host path overlap,
 * so the parts can add up to more than total: each part is the summed time of that stage. */
typedef struct lam_hidden_timing {
  double staging;  /* host threads copying between pageable and pinned memory */
  double copy_in;  /* host->device copies (CUDA events) */
  double kernel;   /* the kernel(s) (CUDA events); the compute pass on the CPU */
  double copy_out; /* device->host copies (CUDA events) */
  double total;    /* wall clock of the whole call, until the result is ready */
  int chunks;      /* pieces the host path was cut into (1 for device-resident and CPU) */
  int device;      /* where the call ran: LAM_DEVICE_CPU or LAM_DEVICE_CUDA (an AUTO context chooses) */
} lam_hidden_timing;

/* The fused hidden layer over n values. grey is float32 (0..255) or uint8 per grey_dtype; w and out
 * are float32. On CUDA each pointer may be pageable host memory, pinned host memory (lam_host_alloc or
 * cudaHostAlloc/cudaHostRegister) or device memory, in any mix: host arrays are streamed through
 * pinned staging buffers in chunks on several streams; when all three are device memory this is one
 * kernel, queued on the context's stream without waiting (lam_ctx_sync waits). Whenever any array
 * is in host memory the call returns with out complete. timing may be NULL. out must not overlap
 * the inputs unless it is the same pointer as w. */
lam_status lam_hidden(lam_ctx *ctx, size_t n, const void *grey, lam_dtype grey_dtype, const float *w,
                      float *out, lam_hidden_timing *timing);

/* On a context made with LAM_DEVICE_AUTO that runs on CUDA, lam_hidden chooses per call: arrays in device
 * memory always run on the GPU; when grey, w and out are all host memory the call runs where it is
 * expected to be faster — on the host threads (the fused pass reads and writes each byte once) or through
 * the GPU's staging pipeline (which moves every byte over PCIe and through pinned buffers) — by a cost
 * model measured on this machine at the first such call (lam_hidden_calibrate, ~0.1 s) and corrected by
 * the calls it times. Contexts made for LAM_DEVICE_CPU or _CUDA never choose. lam_hidden_timing.device
 * and lam_hidden_choice say where a call ran and why. */
typedef struct lam_hidden_costs {
  double cpu_ms, cpu_ms_per_gb;   /* the host threads: fixed cost, and per GB of inputs and output */
  double cuda_ms, cuda_ms_per_gb; /* the GPU from host arrays (staging, PCIe both ways, the kernel) */
  int calibrated;                 /* 0 until measured (or set) */
} lam_hidden_costs;
lam_status lam_hidden_calibrate(lam_ctx *ctx);
lam_status lam_hidden_costs_get(const lam_ctx *ctx, lam_hidden_costs *costs);
/* Fixes the model's costs (no calibration, no correction after): to test the choice, or to pin it. */
lam_status lam_hidden_costs_set(lam_ctx *ctx, const lam_hidden_costs *costs);
/* Where the context's last lam_hidden ran and why, e.g. "cpu (auto: host arrays; host ~14.2 ms, GPU ~29.0
 * ms)". "" before the first call. */
const char *lam_hidden_choice(const lam_ctx *ctx);
/* The floor under lam_hidden on the host: a pass on the host threads that reads grey and w and writes out
 * (out = w + grey, no tanh), timed into *ms: what the host's memory allows this op. On any context; out is
 * overwritten with meaningless values. */
lam_status lam_hidden_memory_floor(lam_ctx *ctx, size_t n, const void *grey, lam_dtype grey_dtype, const float *w,
                                   float *out, double *ms);

/* The course's three separate steps, each a pass of its own over backend memory (device memory on
 * CUDA): normalize out = grey / 255, weigh out = a * w, activate out = tanh(x). Asynchronous on CUDA. */
lam_status lam_normalize(lam_ctx *ctx, size_t n, const void *grey, lam_dtype grey_dtype, float *out);
lam_status lam_weigh(lam_ctx *ctx, size_t n, const float *a, const float *w, float *out);
lam_status lam_tanh(lam_ctx *ctx, size_t n, const float *x, float *out);

/* A measurement aid for the host-array path on CUDA: runs only its host side — the same chunks copied
 * by the same threads between the caller's pageable arrays and the pinned staging buffers — with no GPU
 * work, and puts the wall time in *ms: the floor that staging puts under lam_hidden for these arrays.
 * out is overwritten with meaningless values. LAM_ERR_UNSUPPORTED on the CPU backend. */
lam_status lam_hidden_staging_floor(lam_ctx *ctx, size_t n, const void *grey, lam_dtype grey_dtype, const float *w,
                                    float *out, double *ms);

/* ---- images and video: uint8 to normalized float32 (or bfloat16) NCHW ------------------------------ */

typedef enum lam_layout { LAM_LAYOUT_NCHW = 0, LAM_LAYOUT_NHWC } lam_layout;
#define LAM_NORMALIZE_MAX_CHANNELS 64
/* out (n, c, h, w) = (in / 255 - mean[ch]) / std[ch], in one pass that also changes the layout from in's
 * (NCHW or NHWC) to NCHW. out_dtype is LAM_DTYPE_F32 or LAM_DTYPE_BF16 (rounded to nearest even). n counts
 * images; a batch of video clips (N, T, H, W, C) is n = N, h = T*H (channels first: (N, C, T, H, W)).
 * in and out are backend memory (device memory on CUDA); mean and std are c host floats (std > 0),
 * c <= LAM_NORMALIZE_MAX_CHANNELS. Asynchronous on CUDA. */
lam_status lam_normalize_images(lam_ctx *ctx, size_t n, int c, int h, int w, lam_layout layout, const uint8_t *in,
                                const float *mean, const float *std, lam_dtype out_dtype, void *out);

/* ---- the transfer benchmark (lamina bench transfer) ------------------------------------------------ */

/* What one measurement moves: a batch of n images (c, h, w) in `layout`, as uint8 on the host. */
typedef enum lam_xfer_method {
  LAM_XFER_COPY = 0,       /* copy the batch, already in `dtype`, host -> device */
  LAM_XFER_CPU_NORMALIZE,  /* normalize on the host to float32 NCHW, then copy the floats */
  LAM_XFER_GPU_NORMALIZE   /* copy the uint8 batch, then normalize on the device to `dtype` (f32 or bf16) */
} lam_xfer_method;
typedef struct lam_xfer_case {
  size_t n;
  int c, h, w;
  lam_layout layout;
  lam_xfer_method method;
  lam_dtype dtype;  /* COPY: the dtype moved; GPU_NORMALIZE: its output (f32 or bf16); CPU_NORMALIZE: f32 */
  int pinned;       /* the host buffer is pinned (page-locked); else pageable malloc memory */
  int reps, warmup; /* timed repetitions (median taken) and untimed ones before them */
  double max_ms;    /* stop repeating once this much time is spent (>= 10 reps); 0: no limit */
} lam_xfer_case;
typedef struct lam_xfer_result {
  int reps;                          /* repetitions timed */
  double median_us, p10_us, p90_us;  /* CUDA events around the whole pipeline (host clock on the CPU) */
  double wall_median_us;             /* host clock around the pipeline and its synchronize */
  size_t bytes_host;                 /* bytes that cross from host to device */
  size_t bytes_device;               /* bytes of the batch as the device ends up holding it */
  int copies_on_host;                /* 1 on the CPU backend: the "copy" is a host memcpy, not PCIe */
} lam_xfer_result;
/* Times one case on fresh random pixels. Every output value of the last repetition is checked against
 * the CPU's normalization (a mismatch is an error). On the CPU backend the copies are host memcpy
 * (copies_on_host = 1): what it measures is staging and normalization. */
lam_status lam_bench_transfer(lam_ctx *ctx, const lam_xfer_case *c, lam_xfer_result *r);

/* Largest n the hidden layer accepts (2^40 values): larger sizes are rejected as invalid. */
#define LAM_HIDDEN_MAX_N ((size_t)1 << 40)


/* ==== data, models, training ================================================================ */

/* ---- data: image sets of any channel count (IDX or NumPy .npy, plain or gzip) ------------------- */

/* An image set in host memory: n images of c×h×w uint8 pixels, NCHW, and their labels — one per image
 * (a class) or one per pixel (a class map, 255 = ignore). A set of clips holds n samples of t frames
 * each, (n, t, c, h, w), and a label per clip.
 *
 * Fields after `labels` were added later; a struct built with designated initializers that leaves
 * them 0 is a one-channel set with one label per image, as before. The loaders set c >= 1 and
 * label_h, label_w to 1, 1 (one label per image) or to h, w (one label per pixel). */
typedef struct lam_dataset {
  size_t n;
  int h, w;
  int classes;     /* labels are 0 .. classes-1 (and 255, "ignore", in per-pixel labels) */
  uint8_t *images; /* (n, c, h, w); clips (n, t, c, h, w) */
  uint8_t *labels; /* (n, label_h, label_w): (n) when one label per image */
  int c;           /* channels; 0 reads as 1 */
  int label_h, label_w; /* 0,0 or 1,1: one label per image; else h, w: one label per pixel */
  int t;                /* frames per sample (clips); 0 reads as 1 */
  char **class_names;   /* NULL, or the classes' names, NULL-terminated (an image folder's class folders, class 0
                         * first); lam_dataset_free frees them with the set */
  struct lam_source *source; /* NULL: the samples are images and labels above. Else a streamed set (an image or mask
                              * folder read with lam_image_opts.stream): images and labels are NULL and each sample
                              * is decoded from its files when it is asked for (lam_dataset_rows), by the trainer a
                              * few batches ahead of the device, so the set never lies whole in memory */
} lam_dataset;
/* 1: every sample of d stands alone. K > 1: the samples are K clips of each video, a video's K one after another
 * (n = videos x K; a video folder's test part read with lam_image_opts.test_clips K): lam_evaluate and
 * lam_predict_clips average the softmax over a video's clips and count the video once. (Kept with the streamed
 * set's source, not as a field, so that lam_dataset's layout, which the Python package mirrors, stays as it was.) */
int lam_dataset_clips(const lam_dataset *d);
/* Samples idx[0..n) of d into rows: images (n, sample bytes) and labels (n, labels a sample); for a streamed set
 * decoded from their files on all host threads (a file that fails is an error naming it, or with skip_bad the next
 * sample of the set in its place, counted by lam_dataset_replaced). Either pointer may be NULL. */
lam_status lam_dataset_rows(const lam_dataset *d, const int32_t *idx, size_t n, uint8_t *images, uint8_t *labels);
/* Samples of a streamed set that failed to decode and were replaced (skip_bad), so far; 0 for others. */
size_t lam_dataset_replaced(const lam_dataset *d);
/* A video folder's cache (lam_image_opts.cache), so far: clips read from its entries (hits), and videos decoded into
 * an entry (misses); 0, 0 for a set without one. */
void lam_dataset_video_cache(const lam_dataset *d, size_t *hits, size_t *misses);
/* Class k's name (an image folder's folder name), or NULL where the set has none for k. */
const char *lam_dataset_class_name(const lam_dataset *d, int k);
/* Bytes of one sample's pixels: t * c * h * w. */
size_t lam_dataset_sample_bytes(const lam_dataset *d);

/* How lam_dataset_load_images reads a folder. */
typedef struct lam_image_opts {
  int h, w;          /* every image fitted to h x w (scaled to cover it, the middle kept: the mean of the covered
                      * pixels where it shrinks, bilinear where it grows); 0, 0: every image must be the size of
                      * the part's first one */
  const char *cache; /* the folder of the decoded cache: NULL for DIR/.lamina-cache (left out where it cannot be
                      * made), "" for no cache; a video folder's: NULL or "" for none, else every video's frames at
                      * the clip size kept there (made where it is not there) */
  int skip_bad;      /* a file that cannot be read or decoded is left out and counted, not an error */
  size_t skipped;    /* out: files left out */
  int cache_hit;     /* out: 1 when the part came from the cache */
  int cache_written; /* out: 1 when the decoded part was written to the cache */
  int decoder;       /* JPEG decoding: LAM_DECODE_AUTO (0) and LAM_DECODE_CPU: libjpeg on all host threads (the
                      * faster on every set measured, docs/bench/JOURNAL.md "Image folders"); LAM_DECODE_GPU:
                      * nvJPEG (an error where this build lacks it or no CUDA device is present) */
  size_t decoded_gpu; /* out: files decoded by nvJPEG (the rest on the host: PNG, and what nvJPEG did not take) */
  double decode_s;    /* out: seconds spent reading and decoding the files (0 on a cache hit) */
  size_t converted;   /* out: images converted to the set's channels (grey ones in a colour set, or the other way;
                       * 0 on a cache hit) */
  /* mask folders (lam_dataset_load_masks) only: */
  int reduce_zero_label;    /* mmsegmentation's: mask value 0 becomes 255 (ignored), every other v - 1 (255 stays) */
  const uint8_t *label_map; /* NULL, or 256 entries: mask value (after reduce_zero_label) -> class, 255 ignored
                             * (lam_label_map_read makes one) */
  /* streaming (image and mask folders): */
  int stream;         /* LAM_STREAM_AUTO (0): streamed where the decoded part would take more than memory_cap, else
                       * decoded whole (or read from the cache); LAM_STREAM_ON: always streamed; LAM_STREAM_OFF: never */
  size_t memory_cap;  /* bytes the decoded part may take in host memory; 0: three quarters of the memory the machine
                       * has available (MemAvailable, and the cgroup's limit where lower) */
  int streamed;       /* out: 1 when the set is streamed (lam_dataset.source) */
  size_t part_bytes;  /* out: the decoded part's bytes (pixels and labels), streamed or not */
  /* video sets (DIR/train/CLASS/NAME.mp4 ..., or DIR/train.csv listing them; always streamed): a sample is a clip of
   * `frames` frames (0: 16), every `frame_stride`-th (0: 2), in training from a start drawn each epoch, else the
   * video's middle clip */
  int frames, frame_stride;
  size_t missing;          /* out: videos a Kinetics list names that are not there, left out (Kinetics sets always
                            * lack some; not skip_bad's) */
  char missing_note[1024]; /* out: "N of M videos listed in FILE are missing, e.g. PATH" where missing, else "" */
  /* a video folder's test part: test_clips K clips of each video (0 or 1: the middle one), evenly spaced over it
   * (lam_clip_start), each its own sample, K a video in a row (lam_dataset_clips = K); 1 to LAM_MAX_TEST_CLIPS */
  int test_clips;
} lam_image_opts;
#define LAM_MAX_TEST_CLIPS 64
/* The first frame of clip k (0 .. K-1) of the K test clips of a video of `frames` frames, each clip T frames every
 * S-th (a span of (T-1)*S + 1 frames). With last = frames - span (0 where the video is shorter than the span: the
 * clip repeats the video's last frame), K = 1 is the middle clip, last / 2 (rounded down), and K > 1 spaces the
 * starts evenly from the first frame to the last clip that fits: round(k * last / (K - 1)) (halves up) — SlowFast's
 * uniform test clips (its use_offset spacing, endpoints included, the step rounded rather than floored). */
int64_t lam_clip_start(int64_t frames, int T, int S, int K, int k);
/* 1 when dir is a folder of videos (DIR/train/CLASS/NAME.mp4|avi|mkv|webm|mov ...). */
int lam_dataset_is_video_folder(const char *dir);
/* 1 when a file's name ends in a video's extension: .mp4, .avi, .mkv, .webm or .mov (any case). */
int lam_video_file_name(const char *name);
/* Video files as a set to predict on: paths[0..n) (read with opts: frames, frame_stride, test_clips, size h x w,
 * which must be given, skip_bad), each frame made c channels (1 grey, 3 colour), every label 0 and 1 class. Streamed
 * as a video folder is, test_clips clips a video (lam_dataset_clips). */
lam_status lam_dataset_load_videos(const char *const *paths, size_t n, int c, lam_image_opts *opts, lam_dataset **out);
enum { LAM_DECODE_AUTO = 0, LAM_DECODE_CPU = 1, LAM_DECODE_GPU = 2 };
enum { LAM_STREAM_AUTO = 0, LAM_STREAM_ON = 1, LAM_STREAM_OFF = 2 };
/* 1 when this build decodes JPEG on the GPU (nvJPEG found when it was built). */
int lam_image_gpu_decode(void);
/* Reads an image file and a label file into a new set. Each file is IDX or NumPy .npy (told apart by
 * content: .npy starts with "\x93NUMPY"), plain or gzip-compressed (also by content).
 *   images: IDX 0x00000803 (n, h, w) or 0x00000804 (n, h, w, c), unsigned bytes; or .npy of dtype
 *           uint8 ('|u1'), C order, of shape (n, h, w) or 4-d by this rule: (n, h, w, c) with the last
 *           dimension <= 4 is channels-last (NHWC); else (n, c, h, w) with the second dimension <= 4 is
 *           channels-first (NCHW); a 4-d shape with both > 4 is refused as ambiguous (write it as IDX
 *           0x00000804, which is always n, h, w, c). Channels-last sources are transposed once, here.
 *           Clips: IDX 0x00000805 or .npy of shape (n, t, h, w, c): t frames each (lam_dataset.t), a label
 *           per clip.
 *   labels: IDX 0x00000801 (n: a class per image) or 0x00000803 (n, h, w: a class per pixel, 255 =
 *           ignore); or .npy of any integer dtype (u1 i1 u2 i2 u4 i4 u8 i8, either byte order), C order,
 *           of shape (n) or (n, h, w), every value 0..255 (stored as uint8).
 * classes > 0: every label must be < classes (255 in per-pixel labels aside); per-pixel sets take at
 * most 255 classes. classes == 0: classes = the largest label + 1 (255 in per-pixel labels aside; a
 * per-image label 255 then is refused: pass classes = 256 when 255 is a class; training takes at most
 * 255). Checks headers, shapes, sizes against the file length, that both files count the same n (and
 * per-pixel labels the images' h×w) and every label; any mismatch is LAM_ERR_IO/LAM_ERR_INVALID_ARG naming the file, what was
 * expected and how to fix it. */
lam_status lam_dataset_load_idx(const char *images_path, const char *labels_path, int classes, lam_dataset **out);
/* Loads the training (train = 1) or test (train = 0) part of a set given by name or folder:
 * "fashion-mnist" is Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist, or
 * $LAMINA_DATA_DIR/fashion-mnist), 10 classes. Any other value is a folder holding, for the training
 * part, train-images* and train-labels*, for the test part t10k-images* or test-images* and
 * t10k-labels* or test-labels* — each IDX (plain or .gz) or .npy (or .npy.gz), read as
 * lam_dataset_load_idx reads them (the MNIST layout, train-images-idx3-ubyte[.gz] ..., is one case).
 * Two files for one role is an error that lists them (a file and its .gz twin count as one: the plain
 * file is read); checksum files (.md5, .sha1, .sha256, .sha512) and backups (~) are not candidates.
 * classes = the largest label in the folder's training and test label files + 1 (255 in per-pixel
 * labels aside), so both parts agree; a caller that knows better (the CLI's --classes K) raises it
 * with lam_dataset_set_classes. */
lam_status lam_dataset_load(const char *name_or_dir, int train, lam_dataset **out);
/* The same, where the folder is an image folder (lam_dataset_is_image_folder), read with these options
 * (NULL: the defaults of lam_image_opts); else as lam_dataset_load. */
lam_status lam_dataset_load_opts(const char *name_or_dir, int train, lam_image_opts *opts, lam_dataset **out);
/* Sets d->classes = k after checking that k is 1..256 (1..255 for per-pixel labels) and that every
 * label is < k (255 in per-pixel labels aside); otherwise LAM_ERR_INVALID_ARG naming the first label
 * that is not, and its index. */
lam_status lam_dataset_set_classes(lam_dataset *d, int k);
/* Splits d into a training part and a validation part holding round(fraction × n) images (at least 1,
 * and at least 1 left to train on), picked by a shuffle drawn from seed; each part keeps d's order.
 * d is unchanged; free both parts with lam_dataset_free. */
lam_status lam_dataset_split(const lam_dataset *d, double fraction, uint64_t seed, lam_dataset **train,
                             lam_dataset **val);
/* The seed `lamina train --val-split` and Python's fit(val_split=) split with: not the training seed, so
 * runs with different seeds (and a resumed run) compare on the same validation images. */
#define LAM_VAL_SPLIT_SEED 0x76616c69ULL
/* Per-channel mean and population standard deviation of pixel / 255 over the whole set (accumulated
 * exactly, from per-channel histograms): mean and std each receive max(d->c, 1) values. For
 * --normalize auto. */
lam_status lam_dataset_channel_stats(const lam_dataset *d, float *mean, float *std);
void lam_dataset_free(lam_dataset *d); /* NULL is fine */

/* ---- image folders (src/data/folder.c, image.c) ---- */
/* Reads the training (train = 1) or test part of an image folder in the ImageFolder layout:
 * DIR/train/CLASS/NAME.png|.jpg|.jpeg and DIR/test/CLASS/... or DIR/val/CLASS/..., or flat, DIR/CLASS/... (both
 * parts are then all of it); lam_dataset_image_folder_layout says which (each class a folder; hidden files and
 * other names are not read). The classes are the training part's folders in sorted (strcmp) order, class 0
 * first; a test class must be one of them; a class folder without an image file is an error naming it. PNG (libpng) and JPEG (libjpeg), told apart by content, decoded on all
 * host threads as Pillow reads them (16-bit samples by their high byte, alpha dropped keeping the colour);
 * grey (1 channel) or colour (3) as most of the part's images are (a tie: colour), the others converted (grey to
 * colour the value thrice, colour to grey ITU-R 601-2 luma as Pillow's convert("L")). A damaged, truncated or unreadable file is an error
 * naming it (LAM_ERR_IO), or with skip_bad left out. JPEG files go to nvJPEG in batches where opts->decoder
 * asks (what it does not take, or cannot decode, to libjpeg, whose messages name the file). The decoded part is cached as two IDX files under a key
 * of every file's path, class, size and modification time and the options: a later load of unchanged files
 * reads them instead (cache_hit), and the other keys' files of the part are removed. opts may be NULL. */
lam_status lam_dataset_load_images(const char *dir, int train, lam_image_opts *opts, lam_dataset **out);
/* 1 when dir is an image folder (lam_dataset_image_folder_layout is not LAM_FOLDER_NONE), for lam_dataset_load and
 * --data. */
int lam_dataset_is_image_folder(const char *dir);
/* An image folder's layout: LAM_FOLDER_SPLIT, DIR/train/CLASS/... with DIR/test/CLASS/... or DIR/val/CLASS/...
 * (ImageNet's name; test/ is read where both are there and it holds class folders); LAM_FOLDER_TRAIN_ONLY, DIR/train
 * alone; LAM_FOLDER_FLAT, DIR/CLASS/... with no train/ (and no train-*, t10k-* or test-* files: those are the MNIST
 * layout), one part that is both the training and the test part (lamina train holds out --val-split's part of it).
 * A set of videos listed in DIR/train.csv (docs/guide/video.md, "Layouts") is LAM_FOLDER_SPLIT with a DIR/val.csv,
 * validate.csv or test.csv beside it, else LAM_FOLDER_TRAIN_ONLY. LAM_FOLDER_NONE where dir is none of these. */
enum { LAM_FOLDER_NONE = 0, LAM_FOLDER_SPLIT = 1, LAM_FOLDER_TRAIN_ONLY = 2, LAM_FOLDER_FLAT = 3 };
int lam_dataset_image_folder_layout(const char *dir);
/* ---- mask folders (src/data/maskfolder.c): segmentation images and their masks ---- */
/* A mask folder's layout, checked by lam_dataset_image_folder_layout before the class-folder layouts (a generic
 * folder's train/images is not a class): LAM_MASKS_GENERIC, DIR/{train,test|val}/{images,masks}/NAME.ext;
 * LAM_MASKS_MMSEG, DIR/img_dir/{train,val}/NAME.ext + DIR/ann_dir/{train,val}/NAME.png; LAM_MASKS_VOC, Pascal VOC
 * 2012's DIR/JPEGImages/NAME.jpg + DIR/SegmentationClass/NAME.png, the parts DIR/ImageSets/Segmentation/{train,val}.txt
 * (a stem a line). LAM_MASKS_NONE where dir is none of these. */
enum { LAM_MASKS_NONE = 0, LAM_MASKS_GENERIC = 1, LAM_MASKS_MMSEG = 2, LAM_MASKS_VOC = 3 };
int lam_dataset_mask_folder_layout(const char *dir);
/* Reads the training (train = 1) or test part of a mask folder into a set of a class per pixel (label_h, label_w =
 * h, w). Images (.png, .jpg, .jpeg) and masks (.png) are paired by file stem; an image without its mask, a mask
 * without its image, or a pair of two sizes is an error naming both files (with opts->skip_bad: left out and
 * counted in opts->skipped). A mask is a palette PNG (the palette index is the class; the palette is not
 * expanded) or an 8-bit grey PNG (the value); another kind (RGB, 16-bit) is an error saying what it is. 255 is
 * ignored by the loss and the metrics. opts->reduce_zero_label, then opts->label_map, change the values. Images
 * and masks are fitted to opts' size as image folders fit, masks by nearest neighbour. classes: the number of
 * DIR/classes.txt's lines (a name a line) where it is there, else VOC's 21 names for the VOC layout (20 with
 * reduce_zero_label, none with a label map), else the largest value (255 aside) + 1; a value at or over the
 * names' count is an error naming the mask. The names are the set's class_names. Not cached (cache is not used).
 * opts may be NULL. */
lam_status lam_dataset_load_masks(const char *dir, int train, lam_image_opts *opts, lam_dataset **out);
/* Reads a label map file into map (256 entries): a line "RAW NEW" maps mask value RAW to class NEW (both 0..255,
 * 255 = ignore); '#' starts a comment. A value the file does not list becomes 255, ignored: as mmsegmentation's
 * label_map from its classes and Cityscapes' trainId tables (whose unlisted ids are 255). A value mapped twice, or
 * a line that is not two values 0..255, is an error naming the line. */
lam_status lam_label_map_read(const char *path, uint8_t map[256]);
/* Writes n scenes (h, w) of one channel and their masks as a mask folder's part: dir/images/INDEX.png (kind 1) or
 * .jpg (kind 2, quality 90) and dir/masks/INDEX.png (8-bit grey, the value the class). dir must exist. */
lam_status lam_data_mask_folder_part(const uint8_t *images, const uint8_t *labels, size_t n, int h, int w, int kind,
                                     const char *dir);
/* The image file formats this build reads: 1 PNG, 2 JPEG (bits). */
int lam_image_formats(void);
/* 1 when a file of this name is an image file to image folders and lamina predict: .png, .jpg or .jpeg,
 * in any case. */
int lam_image_file_name(const char *name);
/* Reads a PNG or JPEG file as out (c, h, w) uint8 — NCHW, c 1 or 3 — fitted to h x w as image folders fit
 * (lam_image_opts) and converted to c channels (colour to grey: BT.601 luma; grey to colour: the value in
 * each). Errors name the file. */
lam_status lam_image_load(const char *path, int c, int h, int w, uint8_t *out);
/* Writes px (h, w, c) — interleaved, c 1 or 3 — as a PNG file, atomically, where lam_output_path_check
 * allows. */
lam_status lam_image_save_png(const char *path, const uint8_t *px, int h, int w, int c);

/* ---- data sets anyone can rebuild (src/data/make.c; `lamina data`) ---- */
/* Segmentation scenes, M2NIST-style, from src (one channel, square items, a class per image): n scenes of
 * h x w, each holding one to three of src's images placed at random where their boxes do not overlap
 * (fewer where 100 tries find no room), on 0. labels: per pixel the item's class + 1 where the item is
 * visible (a nonzero pixel), else 0 — src->classes + 1 classes. images and labels hold n*h*w bytes each.
 * The same seed gives the same bytes. */
lam_status lam_data_segment(const lam_dataset *src, size_t n, int h, int w, uint64_t seed, uint8_t *images,
                            uint8_t *labels);
/* Clips for video classification, Moving-MNIST-style, from src (square one-channel images of at least 2
 * classes): n clips of `frames` frames of h x w, clips[((i * frames) + t) * h * w ...], each holding two of
 * src's images of different classes on 0 — one still, one moving 1 to 3 pixels a frame on each axis and
 * bouncing off the edges (the brighter pixel where they overlap) — and labels[i] the moving one's class: a
 * question one frame cannot answer. The same seed gives the same bytes. */
lam_status lam_data_clips(const lam_dataset *src, size_t n, int frames, int h, int w, uint64_t seed, uint8_t *clips,
                          uint8_t *labels);
/* Writes the first n images of src (one channel, a class each) into dir as an image folder's part:
 * dir/CLASS/INDEX.png (kind 1) or .jpg (kind 2, quality 90), CLASS the class's number (zero-padded, so
 * that names sort as numbers), in colour: image i blends a background and a foreground colour drawn from
 * (seed, i) by its grey value. dir must exist; the folders of the classes these n images have are made (an empty
 * class folder is an error to lam_dataset_load_images). */
lam_status lam_data_images_part(const lam_dataset *src, size_t n, uint64_t seed, int kind, const char *dir);
/* Writes n Moving-MNIST-style videos made from src (lam_data_clips' scenes, h x w, even sides) into dir as a video
 * folder's part: dir/CLASS/INDEX.mp4 (CLASS the moving item's class number, zero-padded), each min_s to max_s
 * seconds (1 <= min_s <= max_s <= 60; `lamina data clips` takes 1 to 4) at 25 frames a second, its length in frames
 * drawn uniformly from (seed, INDEX), H.264 where libavcodec has an encoder for it, else MPEG-4 Part 2. dir must
 * exist. LAM_ERR_UNSUPPORTED where this build has no FFmpeg libraries. */
lam_status lam_data_videos_part(const lam_dataset *src, size_t n, int h, int w, int min_s, int max_s, uint64_t seed,
                                const char *dir);
/* 1 when this lamina reads and writes video files (built with FFmpeg's headers, and its libraries load); else 0 and
 * *why (where not NULL) says what to install. */
int lam_video_supported(const char **why);
/* Reads one clip from a video file: T frames, every stride-th from frame `first` (-1: the video's middle clip, as a
 * video folder's test part takes it), each fitted to H x W as image folders fit images (cover, centre crop), grey
 * (C = 1) or RGB (C = 3), into out (T, H, W, C); past the video's end its last frame again. A file that is not a
 * readable video is LAM_ERR_IO naming it; LAM_ERR_UNSUPPORTED where this lamina reads no video (lam_video_supported).
 * For predicting on video files (Python's Model.predict(path)). */
lam_status lam_video_read_clip(const char *path, int64_t first, int stride, int T, int C, int H, int W, uint8_t *out);
/* 1 when a file of this name is read as a video (.mp4, .avi, .mkv, .webm, .mov, any case), else 0. */
int lam_video_file_name(const char *name);
/* 1 when dir is a video folder (DIR/train/CLASS/ holding video files), which lam_dataset_load_opts reads as a streamed
 * set of clips (lam_image_opts.frames, frame_stride), else 0. */
int lam_dataset_is_video_folder(const char *dir);
/* Writes a COCO instances file (annotations, JSON) and the images it names (in images_dir) as a segmentation
 * folder: out_dir/<part>/images/<file_name> (each image copied byte for byte), out_dir/<part>/masks/<stem>.png
 * (8-bit grey, the image's size: 0 background, categories 1..K in increasing id order, 255 crowd regions, the
 * smaller instance on top, polygons rasterized as pycocotools does) and out_dir/classes.txt ("background", then
 * the categories' names; kept when another part wrote the same). part is "train" or "test"; out_dir/<part>
 * must not exist or be empty: it appears whole or not at all. n_images, n_classes (may be NULL): what it wrote.
 * With fit_h, fit_w (1 to 4096; 0, 0: copies) each image is fitted to that size as image folders' --size
 * fits (scaled to cover, the middle kept) and written as <stem>.jpg, its mask alike (nearest: the class under
 * each pixel's centre). A bad file is LAM_ERR_IO naming what is wrong and where (an annotation by its id),
 * before anything is written. */
lam_status lam_data_coco(const char *annotations, const char *images_dir, const char *out_dir, const char *part,
                         int fit_h, int fit_w, size_t *n_images, size_t *n_classes);
/* Writes data (unsigned bytes, row-major) as an IDX file of `rank` dimensions (1 to 5; magic 0x000008rr,
 * big-endian uint32 sizes), atomically, where lam_output_path_check allows. */
lam_status lam_idx_write(const char *path, int rank, const uint64_t *dims, const uint8_t *data);
/* The header numpy.save writes (version 1.0) before unsigned bytes in C order of shape dims[0..rank): the magic,
 * the version, its length and the dict, space-padded to a multiple of 64 bytes, a newline last; into out (cap
 * bytes), *len its length. rank 1 to 8. */
lam_status lam_npy_header(int rank, const uint64_t *dims, uint8_t *out, size_t cap, size_t *len);

/* ---- models ----------------------------------------------------------------------------------- */

typedef struct lam_model lam_model;

/* Builds a model from a spec: layers separated by commas, each reading the output of the one before (the
 * layers and their words: lam_model_layers), where 'NAME:' before a layer labels its output, 'add @NAME' sums the current tensor with it and
 * 'concat @NAME' joins its channels after the current tensor's ('input' names the model's input); or a
 * preset: "cnn" (conv 32 3, relu, maxpool 2, conv 64 3, relu, maxpool 2, flatten, dense 10) or "mlp"
 * (flatten, dense 256, tanh, dense 10). The last layer's output is the class scores: (classes, 1, 1),
 * or (classes, H, W) for a model that labels every pixel. Inputs are (in_c, in_h, in_w) per sample.
 * A model of clips (lam_model_create_clip) takes T frames of (in_c, in_h, in_w) per sample: the layers
 * before 'tpool' run on every frame (the frames folded into the batch: a batch of B clips is B*T
 * images to them, BatchNorm's statistics included), 'tpool mean|max' pools each channel over the frames,
 * and the layers after it run once per clip; 'tcat' instead joins the frames as channels (T*in_c of them,
 * frame t's at t*in_c), so the layer after it sees every frame at once; the output must come after one
 * of them.
 * Parameters are initialized as PyTorch's defaults (uniform(±1/sqrt(fan_in)) for weights and biases;
 * BatchNorm 1 and 0) from seed. A bad spec is LAM_ERR_INVALID_ARG with a message that quotes the word
 * that is wrong and its position. */
lam_status lam_model_create(lam_ctx *ctx, const char *spec, int in_c, int in_h, int in_w, uint64_t seed,
                            lam_model **out);
/* A model of clips: T frames of (in_c, in_h, in_w) per sample, (B, T, in_c, in_h, in_w) in memory;
 * T = 1 is lam_model_create. */
lam_status lam_model_create_clip(lam_ctx *ctx, const char *spec, int T, int in_c, int in_h, int in_w, uint64_t seed,
                                 lam_model **out);
/* Frames per sample: T of lam_model_create_clip, 1 for a model of images. */
int lam_model_input_frames(const lam_model *m);
void lam_model_free(lam_model *m); /* NULL is fine */
const char *lam_model_spec(const lam_model *m); /* the spec, presets expanded */
size_t lam_model_param_count(const lam_model *m);
int lam_model_outputs(const lam_model *m); /* features of the last layer (the classes) */
/* One line per layer: kind, output shape, parameters. */
lam_status lam_model_describe(const lam_model *m, char *buf, size_t size);
/* The layers a spec may use, a line each: its words and what it does (`lamina model --help` prints it), made from
 * the ops themselves. Static text; never NULL. */
const char *lam_model_layers(void);
/* The output per sample: classes c and, for a model that labels every pixel, h × w (else 1 × 1). */
lam_status lam_model_output_shape(const lam_model *m, int *c, int *h, int *w);
/* The input per sample: channels, height, width (as created). */
lam_status lam_model_input_shape(const lam_model *m, int *c, int *h, int *w);
/* One node of the graph, for `lamina model`: its label (or ""), op, the label it reads besides the
 * tensor before it (add, concat), output shape, parameters and forward FLOPs per sample; fused: 1 when
 * the node runs inside another's fused kernel, 2 when it runs the fused block, and fusion that block's
 * name ("bn_act", "bn_add_act", "conv_relu_pool"; "" when fused is 0): the path the node takes, as the
 * profile's marks name it. */
typedef struct lam_node_info {
  char name[32], op[16], reads[32];
  int c, h, w;
  size_t params;
  double flops;
  int fused;
  char fusion[24];
  int stats; /* 1: a conv whose training forward sums the batch statistics of the BatchNorm after it (model option
              * conv_stats) with a pass after the conv, or not run yet; 2: its last one summed them in the conv's
              * own kernel (cuDNN's conv + GenStats); 3: that BatchNorm, which takes them from the conv */
} lam_node_info;
/* Fills up to max nodes (nodes may be NULL to count) and *count; *planned_bytes (may be NULL) is the
 * backend memory the batch buffers take at this batch: the planned arena (activations, gradients,
 * saved buffers), the scratch and the input. */
lam_status lam_model_nodes(const lam_model *m, int batch, lam_node_info *nodes, int max, int *count,
                           size_t *planned_bytes);
/* How the trainer and lam_evaluate turn uint8 pixels into the model's input, per channel:
 * x = (pixel / 255 - mean[c]) / std[c]; c must be the model's input channels (at most 64). By default
 * mean = std = 0.5 for every channel (torchvision's Normalize((0.5,), (0.5,))). Saved in checkpoints. */
lam_status lam_model_set_normalization(lam_model *m, int c, const float *mean, const float *std);
lam_status lam_model_normalization(const lam_model *m, float *mean, float *std); /* in_c values each */
/* "M1,M2,../S1,S2,.." (c means, '/', c stds, comma-separated, finite, std > 0, no spaces) into mean and
 * std: the form of lamina train/import --normalize and of safetensors metadata. A string of another form
 * is LAM_ERR_INVALID_ARG saying what is expected. */
lam_status lam_normalization_parse(const char *s, int c, float *mean, float *std);
/* BatchNorm's running statistics: one flat buffer (per bn node: running mean, then running var). */
size_t lam_model_state_count(const lam_model *m);
lam_status lam_model_state_get(lam_model *m, float *host, size_t count);
lam_status lam_model_state_set(lam_model *m, const float *host, size_t count);
/* The mode of lam_model_forward: 0 (the default) evaluation — BatchNorm's running statistics, no
 * dropout; 1 training — batch statistics (running ones updated) and dropout. */
lam_status lam_model_set_train(lam_model *m, int train);
/* Augmentation of the training batches, on the device as each batch is gathered (inside the step's CUDA graph):
 * a random crop after padding pad pixels on every side (0: none; the padding black, and where labels are per pixel,
 * ignored by the loss), and with flip = 1 a left-right flip with probability 1/2 — torchvision's
 * RandomCrop(size, padding=pad) then RandomHorizontalFlip, applied alike to a clip's frames and to a sample's mask.
 * Evaluation and prediction never augment. The draws follow the trainer's seed and the optimizer steps taken, so
 * a run resumed from a checkpoint (given the same augmentation again) draws as the whole run.
 * pad in 0..min(in_h, in_w); none by default. */
lam_status lam_model_set_augment(lam_model *m, int pad, int flip);
/* An augmentation as `lamina train --augment` and Model.fit(augment=) write it: "none", or comma-separated
 * "crop:P" (P in 0..255) and "flip", into *pad and *flip. A bad one is LAM_ERR_INVALID_ARG saying which part. */
lam_status lam_augment_parse(const char *s, int *pad, int *flip);

/* The loss's label smoothing s in [0, 1) (PyTorch's label_smoothing); 0 by default. */
lam_status lam_model_set_label_smoothing(lam_model *m, float s);
float lam_model_label_smoothing(const lam_model *m); /* the model's s (0 for NULL) */
/* What the model was fitted with, kept in its checkpoint (lam_checkpoint_save) so eval and predict need not be told
 * again: the size an image folder's images were fitted to (--size; 0, 0: none given) and the classes' names
 * (NULL-terminated, e.g. a lam_dataset's class_names; NULL: none; copied). At most LAM_FIT_MAX_CLASSES names of 1 to
 * LAM_FIT_MAX_NAME bytes; a side at most LAM_FIT_MAX_SIDE. safetensors files (export, import) do not carry them. */
#define LAM_FIT_MAX_SIDE 65535
#define LAM_FIT_MAX_CLASSES 256
#define LAM_FIT_MAX_NAME 255
lam_status lam_model_set_fit(lam_model *m, int h, int w, const char *const *class_names);
lam_status lam_model_fit(const lam_model *m, int *h, int *w);
/* Class k's name, or NULL where the model has none for k. */
const char *lam_model_class_name(const lam_model *m, int k);
/* The fit's size kept in the checkpoint at path (0, 0: none, or a file from before version 6), read without making
 * the model: for a caller that loads an image folder at the model's size before it loads the model. The file is
 * checked as lam_checkpoint_load checks it. */
lam_status lam_checkpoint_fit(const char *path, int *h, int *w);
/* The frame stride a model of a video folder's clips was trained at (--frame-stride), kept in its checkpoint (version
 * 7) so eval and predict take clips as training did: 0 none (an older file, or no video folder), else 1 to 1000. */
lam_status lam_model_set_frame_stride(lam_model *m, int frame_stride);
int lam_model_frame_stride(const lam_model *m);
/* The clip geometry kept in the checkpoint at path, read without making the model: its frames a sample (1 for a
 * model of images) and its frame stride (0: none kept). Checked as lam_checkpoint_load checks it. */
lam_status lam_checkpoint_clip(const char *path, int *frames, int *frame_stride);
/* For tests against a reference: dropout node `node` (1-based) uses mask (its output's size × the batch,
 * 1 = keep; the caller keeps it alive) instead of drawing one; NULL draws again. */
lam_status lam_model_set_dropout_mask(lam_model *m, int node, const uint8_t *mask);

/* Parameters and gradients are each one flat float32 buffer: layer by layer, weight then bias, in
 * PyTorch's layouts (conv weight (out, in, k, k), dense weight (out, in)). These copy to and from host. */
lam_status lam_model_params_get(lam_model *m, float *host, size_t count);
lam_status lam_model_params_set(lam_model *m, const float *host, size_t count);
lam_status lam_model_grads_get(lam_model *m, float *host, size_t count);

/* Host-array forms for tests and small uses. x is (batch, in_c, in_h, in_w) float32.
 * forward: logits (batch, outputs, out_h, out_w) in lam_model_set_train's mode. loss_backward (training
 * mode): zeroes the gradients, runs forward, the mean softmax cross-entropy over the batch's labels
 * (batch × out_h × out_w of them; for per-pixel models 255 is ignored) into *loss, and backward
 * (gradients of the mean loss). */
lam_status lam_model_forward(lam_model *m, int batch, const float *x, float *logits);
/* The same from uint8 images (batch, in_c, in_h, in_w), normalized as training and lam_evaluate normalize
 * them (the model's normalization, by the backend's own gather): what `lamina predict` runs. */
lam_status lam_model_forward_u8(lam_model *m, int batch, const uint8_t *images, float *logits);
lam_status lam_model_loss_backward(lam_model *m, int batch, const float *x, const uint8_t *labels, float *loss);
/* Frees the model's batch buffers (activations and their gradients, the input batch, scratch: the
 * memory figures' "activations"), which forward, lam_evaluate and training plan for their batch and
 * otherwise keep until the model is freed. The next call that needs them plans them again, a trainer
 * included. For a model kept between uses: the Python package calls it after evaluate and predict. The
 * blocks go back to the context's cache (lam_mem_release_cached gives them to the system). */
lam_status lam_model_release_batch(lam_model *m);

/* Where a model's (and, if t is not NULL, its trainer's) backend memory goes, in bytes. */
typedef struct lam_model_memory {
  size_t params, grads, optimizer; /* the flat buffers */
  size_t activations;              /* per-batch buffers: layer outputs and their gradients, im2col, scratch */
  size_t scratch;                  /* of activations: the ops' shared scratch (cuDNN's workspace, GEMM columns) */
  size_t data;                     /* the trainer's resident data set (uint8) and its index order */
} lam_model_memory;
typedef struct lam_trainer lam_trainer;
lam_status lam_model_memory_get(const lam_model *m, const lam_trainer *t, lam_model_memory *out);

/* ---- optimizers ------------------------------------------------------------------------------- */

typedef enum lam_opt_kind { LAM_OPT_SGD = 0, LAM_OPT_ADAM, LAM_OPT_ADAMW } lam_opt_kind;
typedef struct lam_opt {
  lam_opt_kind kind;
  float lr;
  float momentum;     /* SGD */
  float weight_decay; /* SGD and Adam: L2 added to the gradient; AdamW: decoupled */
  float beta1, beta2, eps;
} lam_opt;
/* PyTorch's defaults for the kind (SGD lr 0.01; Adam/AdamW lr 1e-3, betas 0.9/0.999, eps 1e-8,
 * AdamW weight decay 0.01). */
lam_opt lam_opt_default(lam_opt_kind kind);
lam_status lam_opt_parse(const char *s, lam_opt_kind *out); /* "sgd", "adam", "adamw" */
/* The bound every optimizer is checked against (lam_trainer_create, lam_model_step; the CLI's --lr, --momentum and
 * --weight-decay and Python's fit() call it first): lr, momentum and weight_decay finite and in [0, LAM_OPT_MAX];
 * beta1, beta2 in [0, 1); eps finite and > 0. Otherwise LAM_ERR_INVALID_ARG naming the value. */
#define LAM_OPT_MAX 1000.0
lam_status lam_opt_check(const lam_opt *o);
/* One optimizer step over the flat parameter buffer from the current gradients (one fused kernel);
 * the optimizer state (momentum, Adam moments, step count) lives in the model. */
lam_status lam_model_step(lam_model *m, const lam_opt *opt);

/* The textbook elementwise backprop step as an op of its own: gradient = error · input;
 * w -= lr · gradient, over n values of backend memory. */
lam_status lam_backprop_step(lam_ctx *ctx, size_t n, const float *error, const float *input, float lr, float *w);

/* ---- training and evaluation ------------------------------------------------------------------ */

typedef struct lam_epoch_stats {
  int epoch;          /* 1-based */
  double train_loss;  /* mean over the epoch's samples */
  double train_acc;
  double seconds;
  double images_per_s;
} lam_epoch_stats;
/* Called after every `every` steps (from lam_trainer_epoch, on the calling thread) with the steps done
 * and in all; loss is the running mean so far (reading it waits for the device: keep `every` large). */
typedef void (*lam_progress_fn)(void *user, int step, int steps, double loss, double images_per_s);

/* A trainer owns the data on the device (uint8, the whole set when it fits), the batch buffers, and
 * the shuffling generator; nothing is allocated per step. */
lam_status lam_trainer_create(lam_model *m, const lam_opt *opt, int batch, uint64_t seed, const lam_dataset *train,
                              lam_trainer **out);
void lam_trainer_free(lam_trainer *t);
lam_status lam_trainer_epoch(lam_trainer *t, lam_progress_fn cb, void *user, int every, lam_epoch_stats *out);
int lam_trainer_epochs_done(const lam_trainer *t);
/* A flag the trainer reads after every step (a signal handler's, say): when it is non-zero,
 * lam_trainer_epoch stops after the step in flight and returns LAM_ERR_INTERRUPTED. The trainer then
 * holds the epoch's place (the steps done, the shuffle, the loss so far): lam_checkpoint_save keeps it, and
 * the next lam_trainer_epoch (after a load, too) continues that epoch where it stopped, as if it never had
 * (on the CPU, bit for bit). NULL: no flag. */
lam_status lam_trainer_set_stop(lam_trainer *t, const volatile int *flag);
/* Steps of the current epoch done when it was interrupted (0: at an epoch's end). */
int lam_trainer_steps_in_epoch(const lam_trainer *t);

/* Data-parallel training over several processes ("ranks"), each with its own context, model and trainer
 * built alike (same spec, same seed, same options, the whole training set): every rank shuffles the same
 * permutation, takes its share of each global batch of `batch` (lam_trainer_create's batch is the global
 * one; a batch of G splits as G / world images a rank, the first G % world ranks one more), and before
 * each optimizer step the ranks' gradients, each weighted by its share of the batch, are summed — so
 * every replica takes the same step as one process would on the whole batch, up to the order of the
 * sum. The epoch's loss and accuracy are summed over the ranks too, and at each epoch's end the
 * replicas' parameters are compared (a checksum, summed) — a difference is an error. BatchNorm keeps
 * each rank's own batch statistics (lam_trainer_set_sync_bn: the global batch's). Ranks do not stream (lam_trainer_set_stream).
 *   CPU contexts: lamina brings no transport of its own; `sum` is the caller's (the CLI's is
 * MPI_Allreduce): it must sum `n` doubles in place across all ranks, every rank calling it in the same
 * order.
 *   CUDA contexts (one GPU a rank: LAMINA_CUDA_DEVICE picks it): the sums go through NCCL, the
 * gradients' straight from the flat buffer on the device, inside the step's CUDA graph. `nccl_id` is
 * NCCL's unique id, LAM_NCCL_ID_BYTES made by lam_nccl_unique_id on rank 0 and sent to every rank by the
 * caller (the CLI: MPI_Bcast, or TCP under a torchrun-style launcher); `sum` is then not used.
 * lam_trainer_set_collective returns once every rank has called it (NCCL's communicator is made).
 * world 1 turns it off, except with an nccl_id (a communicator of one: the same path, for tests). */
#define LAM_NCCL_ID_BYTES 128
typedef struct lam_collective {
  int rank, world;
  lam_status (*sum)(void *user, double *x, size_t n);
  void *user;
  const unsigned char *nccl_id; /* CUDA contexts: NCCL's unique id (LAM_NCCL_ID_BYTES); NULL on the CPU */
} lam_collective;
/* BatchNorm synchronized over the ranks (PyTorch's SyncBatchNorm): in training, each BatchNorm normalizes
 * with the mean and variance of the whole global batch (this rank's sums of x and x^2 summed over the
 * ranks), updates its running statistics with them (alike on every rank), and its backward sums dy and
 * dy·xhat over the ranks too — so N ranks train a net with BatchNorm as one process at that batch. Costs
 * two small all-reduces per BatchNorm a step; the BatchNorm is then not fused with its activation. After
 * lam_trainer_set_collective; on CUDA for NHWC activations (the default layout of models with convs). Every
 * rank must hold images of every batch: a last batch of fewer images than ranks is an error here. */
lam_status lam_trainer_set_sync_bn(lam_trainer *t, int on);
/* GPU ranks: sum the gradients in buckets of about `bytes` that start while backward still runs (PyTorch
 * DDP's bucket_cap_mb), each on a second stream after the nodes whose gradients it holds, all inside the
 * step's graph; 0 (the default): one all-reduce after backward. The sums are the same numbers either way
 * (each value is summed over the ranks alike). After lam_trainer_set_collective with an nccl_id; not with
 * sync BN. */
lam_status lam_trainer_set_buckets(lam_trainer *t, size_t bytes);
/* Makes NCCL's unique id for a collective of GPU ranks (on rank 0; every rank then gets its bytes).
 * LAM_ERR_UNSUPPORTED where lamina was built without CUDA or NCCL, or NCCL cannot be loaded. */
lam_status lam_nccl_unique_id(unsigned char id[LAM_NCCL_ID_BYTES]);
/* 1 where lamina was built with CUDA and NCCL's header (GPU ranks; NCCL itself is loaded at their first
 * collective), else 0. */
int lam_nccl_built(void);
/* n doubles summed in place over the trainer's ranks, by its collective (e.g. a caller's evaluation of
 * its share of a test set); without ranks it leaves x as it is. Every rank must call it alike. */
lam_status lam_trainer_sum(lam_trainer *t, double *x, size_t n);
lam_status lam_trainer_set_collective(lam_trainer *t, const lam_collective *c);
/* The share of n items that rank `rank` of `world` takes, as the trainer splits a batch: [lo, lo + len),
 * n / world each, the first n % world ranks one more (for a caller sharding other work alike). */
void lam_rank_share(size_t n, int rank, int world, size_t *lo, size_t *len);
/* The optimizer and batch the trainer was made with (or restored from a checkpoint). */
lam_status lam_trainer_config(const lam_trainer *t, lam_opt *opt, int *batch);
/* Changes the settings of the trainer's optimizer (lr, momentum, weight decay, betas, eps) from the next epoch on:
 * fine-tuning a resumed run at another rate. The kind must stay (its state is the kind's); checked as
 * lam_opt_check. A learning-rate schedule scales the new lr as it did the old. */
lam_status lam_trainer_set_opt(lam_trainer *t, const lam_opt *opt);

/* Learning-rate schedules: the rate of every step, from the optimizer's lr (the base) and the step's
 * place in the run, taken by the optimizer on the device from the trainer's per-step table (so a
 * captured step follows it without leaving the graph). t is the step (0-based) of T = epochs × steps
 * in all, W = warmup_epochs × steps warm-up steps:
 *   constant  lr (after the warm-up)
 *   cosine    lr · (1 + cos(π (t − W) / (T − W))) / 2 after the warm-up: down to 0 at the run's end
 *             (torch's CosineAnnealingLR stepped every batch, eta_min 0)
 *   step      lr · gamma^floor(epoch / step_epochs) (torch's StepLR stepped every epoch)
 *   onecycle  torch's OneCycleLR (max_lr lr, pct_start 0.3, or warmup_epochs / epochs when given;
 *             div_factor 25, final_div_factor 1e4, cosine annealing, cycle_momentum off)
 * The warm-up (not onecycle's, which is its own) multiplies the rate by (t + 1) / W for t < W. Past the
 * run's end cosine and onecycle keep their last rate; constant and step go on as they are. */
typedef enum { LAM_LR_CONSTANT = 0, LAM_LR_COSINE = 1, LAM_LR_STEP = 2, LAM_LR_ONECYCLE = 3 } lam_lr_kind;
typedef struct lam_lr_schedule {
  lam_lr_kind kind;
  int epochs;           /* the run the schedule spans (at least 1) */
  double warmup_epochs; /* 0: none; may be fractional */
  int step_epochs;      /* step: every this many epochs ... */
  double gamma;         /* ... the rate is multiplied by gamma */
} lam_lr_schedule;
/* "constant", "cosine", "step:E:G" (e.g. step:10:0.1) or "onecycle" into *out (epochs and warm-up 0:
 * the caller sets them). A bad string is LAM_ERR_INVALID_ARG saying what is accepted. */
lam_status lam_lr_schedule_parse(const char *s, lam_lr_schedule *out);
/* "cosine", "step:10:0.1", ... (buf of at least 48 bytes). */
void lam_lr_schedule_str(const lam_lr_schedule *s, char *buf, size_t size);
/* The rate of step t (0-based) of a run of steps_per_epoch steps an epoch. */
double lam_lr_at(const lam_lr_schedule *s, double lr, long t, long steps_per_epoch);
/* Sets the trainer's schedule (checked: epochs >= 1, 0 <= warm-up < epochs, step_epochs >= 1 and
 * 0 < gamma <= 1 for step); it takes effect from the next epoch and is saved in checkpoints. By default
 * a trainer's rate is constant. */
lam_status lam_trainer_set_lr_schedule(lam_trainer *t, const lam_lr_schedule *s);
lam_status lam_trainer_lr_schedule(const lam_trainer *t, lam_lr_schedule *s);
/* The rate of the last step taken (of the first step, before any). */
double lam_trainer_lr(const lam_trainer *t);

/* Streaming batches: instead of keeping the data set on the device, a host thread gathers each shuffled
 * batch (uint8 pixels and labels) into one of `buffers` pinned buffers (2 or 3), a copy stream moves it
 * to the device while the previous batch computes, and events order the two, so in steady state the
 * device does not wait for the loader. The shuffle is the same as resident training's: a seed trains
 * the same either way. lam_trainer_create streams by itself when the set does not fit (device memory
 * or the allocator's cap); lam_trainer_set_stream(t, 2 or 3) asks for it, (t, 0) goes back to resident.
 * While streaming the trainer reads the data set's host arrays: keep it alive until lam_trainer_free. */
lam_status lam_trainer_set_stream(lam_trainer *t, int buffers);
typedef struct lam_stream_stats {
  int buffers;           /* 0: the data set is resident on the device */
  double epoch_ms;       /* of the last epoch (0 before the first) */
  double data_wait_ms;   /* time the device waited for batch copies in the last epoch (CUDA events) */
  double loader_wait_ms; /* time the training loop waited for the loader thread in the last epoch */
  char why[200];         /* why it streams: "asked for" or "the data set does not fit: ..." */
} lam_stream_stats;
lam_status lam_trainer_stream_stats(const lam_trainer *t, lam_stream_stats *out);
/* The fp16 precision's dynamic loss scaling (as torch.amp.GradScaler: the loss's gradient multiplied by a scale from
 * 2^16, a step whose gradients hold an inf or NaN skipped and the scale halved, doubled after 2,000 clean steps; all
 * decided on the device inside the step), as of the last epoch's end or stop: the scale and the steps skipped so
 * far. Both 0 where the trainer has not scaled (another precision). A checkpoint keeps them; --resume continues. */
lam_status lam_trainer_loss_scale(const lam_trainer *t, double *scale, long *skipped);
/* The data path alone, as a streaming trainer feeds itself (no model): one epoch of d in a new seeded order (seed
 * and epoch), batches of `batch` samples gathered (a streamed set: decoded from its files on all host threads) into
 * `buffers` (2 or 3) pinned buffers a few ahead and copied to the device, as uint8 (pixels and labels). */
typedef struct lam_data_bench_epoch {
  double seconds;        /* the epoch, up to its last batch on the device */
  double images_per_s;
  double loader_wait_ms; /* the time the loop waited for the loader (decode-bound where it is most of the epoch) */
  double copy_wait_ms;   /* the time the device waited for the copies (CUDA events) */
} lam_data_bench_epoch;
lam_status lam_data_bench(lam_ctx *ctx, const lam_dataset *d, int batch, int buffers, uint64_t seed, int epoch,
                          lam_data_bench_epoch *out);

/* CUDA graphs: on backends that have them (CUDA) a trainer captures its step — zeroing the gradients,
 * forward, loss and backward — once and replays it for every full batch, so a step costs three
 * launches (batch in, the graph, the optimizer) instead of dozens. On by default; off while profiling
 * (the profiler times each op) and with LAMINA_CUDA_SYNC=1. lam_trainer_set_graph(t, 0) turns it off;
 * *on tells whether the trainer uses one (0 where the backend has none). */
lam_status lam_trainer_set_graph(lam_trainer *t, int on);
lam_status lam_trainer_graph(const lam_trainer *t, int *on);

/* Profiling: per-op times of steps [first_step, first_step + steps) of the next epochs (CUDA events on
 * the GPU, the host clock on the CPU; steps 0 turns it off). The table aggregates by op name, sorted by
 * total time; the trace is Chrome-trace JSON that Perfetto (ui.perfetto.dev) or chrome://tracing opens,
 * written atomically. */
typedef struct lam_prof_row {
  char name[32];
  long calls;
  double total_ms, mean_ms;
  double share; /* of the profiled steps' time */
} lam_prof_row;
lam_status lam_trainer_profile(lam_trainer *t, int first_step, int steps);
lam_status lam_trainer_profile_table(lam_trainer *t, lam_prof_row *rows, int max_rows, int *nrows, int *steps);
lam_status lam_trainer_profile_trace(lam_trainer *t, const char *path);

/* Accuracy (and mean loss, and a classes×classes confusion matrix, rows = true label) of the model on a
 * data set; confusion and loss may be NULL. */
lam_status lam_evaluate(lam_model *m, const lam_dataset *d, int batch, double *accuracy, double *loss,
                        uint64_t *confusion);
/* For a set of clips of videos (lam_dataset_clips K > 1), lam_evaluate counts videos: a video's probabilities are the mean
 * of the softmax over its K clips, its class their argmax (the first of equals), its loss the negative log of the
 * mean probability of its label (the NLL of the averaged probabilities, not the mean of the clips' losses), and
 * accuracy and loss are over the n / K videos. */
/* The model's class probabilities (evaluation mode) per video of d: probs (n / K, classes), each row the mean of the
 * softmax over the video's K = lam_dataset_clips(d) clips (K = 1: each sample's own); labels (n / K), the videos' labels, may be
 * NULL. The model's input must be the set's samples; its output a class per sample. */
lam_status lam_predict_clips(lam_model *m, const lam_dataset *d, int batch, double *probs, uint8_t *labels);

/* The mean IoU over the classes present of a C x C confusion matrix (rows true, columns predicted), TP / (TP + FP +
 * FN) per class: into iou each class's (NULL: not wanted; -1 for a class neither true nor predicted anywhere), into
 * present how many classes count (NULL: not wanted). */
double lam_confusion_iou(const uint64_t *confusion, int C, double *iou, int *present);

/* ---- the epoch loop: lam_fit ---------------------------------------------------------------------- */

/* What lam_fit follows to keep the best model and to stop early: the validation loss (lower is better) or the
 * validation mean IoU (higher is better; a set of a label per pixel). */
typedef enum lam_fit_monitor { LAM_FIT_MONITOR_LOSS = 0, LAM_FIT_MONITOR_MIOU = 1 } lam_fit_monitor;
/* One epoch of lam_fit: NAN where a figure was not measured. */
typedef struct lam_fit_epoch {
  lam_epoch_stats es;                     /* the training part's */
  double lr;                              /* of the epoch's last step */
  double val_loss, val_acc, val_miou;     /* after the epoch, with a validation set (mIoU: a label per pixel) */
  double test_loss, test_acc, test_miou;  /* without one after every epoch; with one once, in the last epoch's row */
  double loss_scale, skipped_steps;       /* fp16: the loss scale at the epoch's end, the steps skipped so far */
  lam_stream_stats stream;                /* the data path of the epoch */
  int improved;                           /* the monitored figure is the best so far (save_best written) */
} lam_fit_epoch;
/* Called after each epoch (its figures measured, its files written), on the calling thread; non-zero stops the
 * fit after this epoch (lam_fit_result.stopped). */
typedef int (*lam_fit_epoch_fn)(void *user, const lam_fit_epoch *e);
typedef struct lam_fit_opts {
  int epochs;               /* train until the trainer has done this many (a resumed one continues its count) */
  const lam_dataset *val;   /* evaluated after every epoch; NULL: none, and test is evaluated after every epoch */
  const lam_dataset *test;  /* with val: evaluated once, at the end (the last model, and the one save_best kept) */
  lam_fit_monitor monitor;
  int patience;             /* stop when the monitored figure has not improved for this many epochs (0: never) */
  double best_loss, best_miou; /* the figures to beat; the default: none */
  int resume_best;          /* save_best's file, where it holds a model of this spec, is the one to beat (resuming) */
  const char *save;         /* a checkpoint (model and trainer) after every epoch, or NULL */
  const char *save_best;    /* the model of the best epoch (needs val), or NULL */
  const char *log;          /* a CSV of every epoch so far, rewritten atomically after each, or NULL */
  lam_progress_fn on_step;  /* lam_trainer_epoch's progress, every step_every steps (0: 50 reports an epoch) */
  int step_every;
  lam_fit_epoch_fn on_epoch;
  void *user;               /* for on_step and on_epoch */
  lam_fit_epoch *history;   /* room for epochs - lam_trainer_epochs_done(t) rows, or NULL */
  int epoch_offset;         /* added to the epochs' numbers (rows, log, best_epoch): the caller's epochs before t's */
} lam_fit_opts;
typedef struct lam_fit_result {
  int epochs;                   /* run by this call (rows of history) */
  int best_epoch;               /* 0: no epoch beat the best (or no validation set) */
  double best_loss, best_miou;  /* the best epoch's validation figures (or those to beat, where none beat them) */
  int resumed_best;             /* resume_best found save_best's model and its figures are the ones to beat */
  double best_test_acc;         /* save_best's model on the test part, NAN where not measured */
  double test_acc, test_miou;   /* the last model on the test part (NAN where not measured) */
  int stopped_early;            /* patience ran out */
  int stopped;                  /* on_epoch asked */
} lam_fit_result;
lam_fit_opts lam_fit_opts_default(void);
/* Trains t's model epoch after epoch, as `lamina train` and Python's Model.fit do: after each epoch the validation
 * set is evaluated (over the trainer's ranks, each its share, where it has several), the checkpoint saved, the best
 * model kept by the monitored figure, the log rewritten, on_epoch called; patience stops it early; at the end the
 * test part is evaluated for the last model and for the best one. The trainer's stop flag (lam_trainer_set_stop),
 * seen during an epoch or between two, returns LAM_ERR_INTERRUPTED with the trainer holding its place (save it to
 * resume) and *r as far as it got. On ranks other than 0, give no files (rank 0 writes them). Every batch is the
 * trainer's: evaluation at a larger one would grow the model's batch buffers for the rest of the run. */
lam_status lam_fit(lam_trainer *t, const lam_fit_opts *o, lam_fit_result *r);

/* ---- checkpoints ------------------------------------------------------------------------------ */

/* ---- files: what a run reads and writes ---------------------------------------------------------- */

/* The kinds of file lamina writes: an existing file is replaced only by a file of its own kind (its first
 * bytes say which), so a mistyped output name cannot destroy a data set or another kind of file. */
typedef enum lam_file_kind {
  LAM_FILE_NONE = 0, /* any: no kind check */
  LAM_FILE_CHECKPOINT,
  LAM_FILE_SAFETENSORS,
  LAM_FILE_TRACE,
  LAM_FILE_LOG,      /* a training log, CSV (lamina train --log) */
  LAM_FILE_PNG,
  LAM_FILE_IDX,
  LAM_FILE_NPY,
  LAM_FILE_BENCH_CSV, /* lamina bench transfer --csv */
  LAM_FILE_SVG,
  LAM_FILE_KINDS
} lam_file_kind;
const char *lam_file_kind_name(lam_file_kind k); /* "a lamina checkpoint", ... */

/* A run: between lam_run_begin and lam_run_end every input lamina reads (data files, checkpoints, spec files,
 * folders of images) and every output claimed or written is remembered, and an output that would replace an
 * input, another output of the run, or land in a folder the run reads its files from is refused with a
 * message naming both. (A checkpoint resumed from may be replaced by the run's own checkpoint.) Outside a
 * run only the kind rule and the path checks hold. lam_run_begin forgets any earlier run. */
void lam_run_begin(void);
void lam_run_end(void);
/* lam_output_path_check for an output of this kind, claimed for the run (what: "checkpoint (--save)", ...):
 * call it for each output before the work that makes it. */
lam_status lam_output_check(const char *path, const char *what, lam_file_kind kind);
/* An input the caller reads itself: a regular file (a FIFO, device or socket is refused: it might never
 * end), remembered for the run. */
lam_status lam_input_check(const char *path, const char *what);
/* A folder whose files the run reads: no output may be written into it. */
lam_status lam_input_folder(const char *dir, const char *what);
/* 1 when path is dir or lies inside it (canonical paths: links followed; either may not exist yet). */
int lam_path_inside(const char *path, const char *dir);

/* Whether lamina may write the file `path` names (what: "checkpoint", "trace", ... for the message):
 * LAM_OK, or the reason it would refuse — an empty path, a missing or unwritable folder, a directory, a
 * device node, FIFO or socket, a dangling symbolic link, an existing file this user cannot write. Files are
 * only ever written as regular files, atomically (a temporary file renamed over the old one); a symbolic
 * link is followed and the file it points to replaced, the link kept. Call it before work that would be
 * lost to a bad path. */
lam_status lam_output_path_check(const char *path, const char *what);
/* Writes n bytes to path that way: checked as above, written to "<path>.tmp.<pid>" in the same folder,
 * flushed, fsync'd and renamed over it; on failure the file at path is as it was and no temporary file
 * is left. */
lam_status lam_output_write_atomic(const char *path, const char *what, const void *data, size_t n);

/* Writes model spec, input shape, parameters, optimizer (kind, hyper-parameters, state, step), epochs
 * done and the shuffling generator's state, with a CRC-32, atomically (temporary file, fsync, rename).
 * t may be NULL to save the model alone. */
lam_status lam_checkpoint_save(const char *path, lam_model *m, const lam_trainer *t);
/* Removes the temporary file of an atomic write in progress right now (a checkpoint, a safetensors
 * file, a log: lam_output_write_atomic), if any: for a signal handler that is about to exit
 * (async-signal-safe: one unlink). */
void lam_checkpoint_abort_cleanup(void);
/* Reads a checkpoint into a new model on ctx. A truncated, corrupted (CRC) or wrong-version file is
 * LAM_ERR_IO with a message saying which. If trainer is not NULL and the file has training state, a
 * trainer on `train` continues exactly where the saved one stopped (batch from the file). */
lam_status lam_checkpoint_load(lam_ctx *ctx, const char *path, lam_model **model, const lam_dataset *train,
                               lam_trainer **trainer);

/* ---- PyTorch weights: safetensors files (huggingface/safetensors) ----------------------------- */

/* A model's weights under the names and in the layouts PyTorch gives the same layers. Layer i of the spec
 * (every layer counts, from 0; a label is not a layer) gives 'i.weight' and 'i.bias' (conv, convt, dense;
 * no bias with nobias) and, for bn, also 'i.running_mean', 'i.running_var' and 'i.num_batches_tracked':
 * for a plain stack the names of nn.Sequential over the same layers, for a graph those of a module that
 * registers its layers as submodules "0", "1", ... in spec order. Layouts: conv (out, in, k, k), convt
 * (in, out, k, k) as ConvTranspose2d, dense (out, in) over the input flattened C, H, W, bn (C).
 * save: F32 tensors (num_batches_tracked an I64 scalar 0: lamina does not count batches) and __metadata__
 * "lamina.spec", "lamina.input" (CxHxW), "lamina.normalize" (M1,../S1,..); written atomically.
 * load: checks the whole file before it changes anything — the header, each tensor's dtype (F32; F64, F16
 * and BF16 are converted), shape and data offsets, that every tensor of the model is there and no other
 * (num_batches_tracked may be absent and is never read) — and then sets the parameters, the running
 * statistics and, when the metadata has "lamina.normalize", the normalization. A damaged file is
 * LAM_ERR_IO; one that does not fit the model LAM_ERR_INVALID_ARG, naming the tensor, the shapes and the
 * spec's layer. */
lam_status lam_model_save_safetensors(lam_model *m, const char *path);
lam_status lam_model_load_safetensors(lam_model *m, const char *path);
/* The tensors those files hold for m, one line each: name, shape, dtype, the spec's layer. Writes at most
 * size bytes (NUL-terminated; buf may be NULL when size is 0); *needed (may be NULL): the size it takes. */
lam_status lam_model_safetensors_names(const lam_model *m, char *buf, size_t size, size_t *needed);

#ifdef __cplusplus
}
#endif
#endif /* LAMINA_H */
