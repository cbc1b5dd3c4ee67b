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

#define LAMINA_VERSION "0.1.0"

typedef enum lam_status {
  LAM_OK = 0,
  LAM_ERR_INVALID_ARG,   /* a bad argument: NULL pointer, bad size, bad value */
  LAM_ERR_NO_DEVICE,     /* CUDA asked for where there is none (or built without CUDA) */
  LAM_ERR_CUDA,          /* a CUDA runtime call or kernel launch failed */
  LAM_ERR_OUT_OF_MEMORY, /* host or device memory exhausted, or over a cap */
  LAM_ERR_UNSUPPORTED,   /* valid, but not supported by this backend */
  LAM_ERR_IO             /* a file could not be read or written */
} lam_status;

typedef enum lam_device { LAM_DEVICE_AUTO = 0, LAM_DEVICE_CPU, LAM_DEVICE_CUDA } lam_device;

typedef enum lam_dtype { LAM_DTYPE_F32 = 0, LAM_DTYPE_U8 } lam_dtype;

typedef struct lam_ctx lam_ctx;

/* ---- errors ---------------------------------------------------------------------------------- */

/* The message of the last failure on this thread ("" if none): what failed, where, how to fix. */
const char *lam_last_error(void);
/* A short fixed name for a status ("invalid argument", ...). */
const char *lam_status_str(lam_status s);

/* ---- context and backend choice --------------------------------------------------------------- */

/* Creates a context on the wanted device. AUTO honours LAMINA_DEVICE, then picks CUDA if a device is
 * present, else the CPU. Asking for CUDA where there is none returns LAM_ERR_NO_DEVICE. */
lam_status lam_ctx_create(lam_ctx **ctx, lam_device want);
void lam_ctx_free(lam_ctx *ctx); /* NULL is fine */
lam_device lam_ctx_device(const lam_ctx *ctx);
/* Human-readable description of the backend, e.g. "cuda:0 NVIDIA H200 (sm_90, 132 SMs)" or
 * "cpu (2 OpenMP threads)". */
const char *lam_ctx_device_name(const lam_ctx *ctx);
/* Why AUTO chose what it chose, e.g. "auto: no CUDA device (cudaGetDeviceCount: no CUDA-capable
 * device is detected), using the CPU". Empty when the device was asked for explicitly. */
const char *lam_ctx_choice_reason(const lam_ctx *ctx);
/* Waits until all work queued on the context is done. */
lam_status lam_ctx_sync(lam_ctx *ctx);

/* Parses "cpu", "cuda" or "auto" (case-sensitive). */
lam_status lam_device_parse(const char *s, lam_device *out);
const char *lam_device_str(lam_device d);
/* Parses "f32" or "u8". */
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

/* Largest n the hidden layer accepts (2^40 values): larger sizes are rejected as invalid. */
#define LAM_HIDDEN_MAX_N ((size_t)1 << 40)

#ifdef __cplusplus
}
#endif
#endif /* LAMINA_H */
