/* hidden.cu — the hidden layer on CUDA, out = tanh(grey / 255 * w), and the course's three separate
 * steps. Device-resident arrays: one fused, grid-stride kernel with 16-byte loads. Host arrays: the
 * call cuts the work into chunks that cycle through several streams (4 by default), so that host threads
 * staging pageable data, copies in, the kernel and copies out of different chunks overlap. Those streams, their
 * pinned staging and events are this module's own state (cuda_hidden_state, made with the context); the nn core's
 * cuda_state only points at it. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda.h"

#define THREADS 256

/* ---- kernels ---- */

__device__ __forceinline__ float hidden1(float g, float w) { return tanhf(g / 255.0f * w); }

__device__ __forceinline__ float4 hidden4(float4 g, float4 w) {
  return make_float4(hidden1(g.x, w.x), hidden1(g.y, w.y), hidden1(g.z, w.z), hidden1(g.w, w.w));
}

/* All three pointers 16-byte aligned: float4 loads and stores; the n % 4 tail by the first threads.
 * Loads go through __ldg: inputs are read once, and out may alias w element for element. */
__global__ void hidden_f32_vec(const float *g, const float *w, float *out, size_t n) {
  size_t n4 = n / 4, stride = (size_t)gridDim.x * blockDim.x;
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (size_t i = tid; i < n4; i += stride)
    reinterpret_cast<float4 *>(out)[i] =
        hidden4(__ldg(reinterpret_cast<const float4 *>(g) + i), __ldg(reinterpret_cast<const float4 *>(w) + i));
  if (tid < n - n4 * 4) out[n4 * 4 + tid] = hidden1(__ldg(g + n4 * 4 + tid), __ldg(w + n4 * 4 + tid));
}

/* uint8 greys: 4 greys (one 4-byte load) per float4 of weights, so each warp reads 128 contiguous
 * bytes of greys and 512 of weights per step. */
__global__ void hidden_u8_vec(const uint8_t *g, const float *w, float *out, size_t n) {
  size_t n4 = n / 4, stride = (size_t)gridDim.x * blockDim.x;
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (size_t i = tid; i < n4; i += stride) {
    uchar4 a = __ldg(reinterpret_cast<const uchar4 *>(g) + i);
    float4 b = __ldg(reinterpret_cast<const float4 *>(w) + i);
    reinterpret_cast<float4 *>(out)[i] = hidden4(make_float4(a.x, a.y, a.z, a.w), b);
  }
  if (tid < n - n4 * 4) out[n4 * 4 + tid] = hidden1((float)__ldg(g + n4 * 4 + tid), __ldg(w + n4 * 4 + tid));
}

/* Any alignment: one element per thread and step. */
template <typename G>
__global__ void hidden_scalar(const G *g, const float *w, float *out, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = hidden1((float)g[i], w[i]);
}

template <typename G>
__global__ void normalize_kernel(const G *g, float *out, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = (float)g[i] / 255.0f;
}

__global__ void weigh_kernel(const float *a, const float *w, float *out, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = a[i] * w[i];
}

__global__ void tanh_kernel(const float *x, float *out, size_t n) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    out[i] = tanhf(x[i]);
}

/* ---- launching ---- */

/* Enough blocks to fill every SM (a resident grid), fewer when there is less work than that. */
static unsigned grid_for(const cuda_state *st, size_t items) {
  size_t full = (size_t)st->sm_count * (size_t)(st->max_threads_per_sm / THREADS);
  size_t need = (items + THREADS - 1) / THREADS;
  size_t g = need < full ? need : full;
  return (unsigned)(g ? g : 1);
}

static int aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

static lam_status launch_hidden(cuda_state *st, cudaStream_t s, size_t n, const void *g, lam_dtype gt,
                                const float *w, float *out) {
  int vec = aligned(w, 16) && aligned(out, 16) && aligned(g, gt == LAM_DTYPE_U8 ? 4 : 16);
  if (gt == LAM_DTYPE_U8) {
    if (vec) hidden_u8_vec<<<grid_for(st, n / 4 + 1), THREADS, 0, s>>>((const uint8_t *)g, w, out, n);
    else hidden_scalar<uint8_t><<<grid_for(st, n), THREADS, 0, s>>>((const uint8_t *)g, w, out, n);
  } else {
    if (vec) hidden_f32_vec<<<grid_for(st, n / 4 + 1), THREADS, 0, s>>>((const float *)g, w, out, n);
    else hidden_scalar<float><<<grid_for(st, n), THREADS, 0, s>>>((const float *)g, w, out, n);
  }
  CUDA_LAUNCH_TRY(st, s, vec ? "hidden kernel (vectorized)" : "hidden kernel (scalar)");
  return LAM_OK;
}

lam_status cuda_normalize(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, float *out) {
  cuda_state *st = cuda_st(ctx);
  if (gt == LAM_DTYPE_U8) normalize_kernel<uint8_t><<<grid_for(st, n), THREADS, 0, st->stream>>>((const uint8_t *)grey, out, n);
  else normalize_kernel<float><<<grid_for(st, n), THREADS, 0, st->stream>>>((const float *)grey, out, n);
  CUDA_LAUNCH_TRY(st, st->stream, "normalize_kernel");
  return LAM_OK;
}

lam_status cuda_weigh(lam_ctx *ctx, size_t n, const float *a, const float *w, float *out) {
  cuda_state *st = cuda_st(ctx);
  weigh_kernel<<<grid_for(st, n), THREADS, 0, st->stream>>>(a, w, out, n);
  CUDA_LAUNCH_TRY(st, st->stream, "weigh_kernel");
  return LAM_OK;
}

lam_status cuda_tanh(lam_ctx *ctx, size_t n, const float *x, float *out) {
  cuda_state *st = cuda_st(ctx);
  tanh_kernel<<<grid_for(st, n), THREADS, 0, st->stream>>>(x, out, n);
  CUDA_LAUNCH_TRY(st, st->stream, "tanh_kernel");
  return LAM_OK;
}

/* ---- where an array lives ---- */

typedef enum mem_kind { MEM_PAGEABLE, MEM_PINNED, MEM_DEVICE } mem_kind;

/* Classifies p; for pinned host memory *dev gets the address the GPU reads it by (NULL if unmapped). */
static lam_status where_is(cuda_state *st, const void *p, const char *name, mem_kind *k, const void **dev) {
  cudaPointerAttributes a;
  LAM_TRY(cuda_status(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes", __FILE__, __LINE__));
  if (dev) *dev = NULL;
  switch (a.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged:
      if (a.device != st->device)
        return LAM_FAIL(LAM_ERR_INVALID_ARG, "lam_hidden: %s is memory of CUDA device %d, but the context uses device %d",
                        name, a.device, st->device);
      *k = MEM_DEVICE;
      return LAM_OK;
    case cudaMemoryTypeHost:
      *k = MEM_PINNED;
      if (dev) *dev = a.devicePointer;
      return LAM_OK;
    default: *k = MEM_PAGEABLE; return LAM_OK;
  }
}

/* Host memory, pinned or not (lam_hidden's choice on AUTO contexts); 0 for device and managed memory,
 * and where CUDA cannot say (the GPU's path then reports what is wrong). */
int cuda_host_memory(lam_ctx *ctx, const void *p) {
  (void)ctx;
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeUnregistered;
}

/* ---- the module's state: streams, pinned staging, events ---- */

typedef struct cuda_slot {
  cudaStream_t stream;
  void *h_grey; /* pinned staging, staging_cap elements of up to 4 bytes */
  float *h_w, *h_out;
} cuda_slot;

struct cuda_hidden_state {
  cudaEvent_t ev_start, ev_stop;
  cuda_slot slot[LAM_CUDA_SLOTS];
  int slots;            /* slots in use, LAM_CUDA_SLOTS_DEFAULT or LAMINA_STREAMS */
  size_t chunk_env;     /* LAMINA_CHUNK (values per chunk), 0: chosen by size */
  size_t staging_cap;   /* elements per pinned staging buffer (0: none yet) */
  void *staging_base;   /* the one registered host region the slots' staging buffers lie in */
  size_t staging_bytes;
  int staging_same_address; /* the device reads the region at its host addresses (zero-copy may use it) */
  /* Four events per chunk of the host path (before copy in, after copy in, after the kernel, after
   * copy out), kept between calls and grown as needed: chunks may all be in flight at once. */
  cudaEvent_t *ev_pool;
  size_t ev_pool_chunks;
};

static cuda_hidden_state *hid(lam_ctx *ctx) { return cuda_st(ctx)->hidden; }

lam_status cuda_hidden_state_create(lam_ctx *ctx) {
  cuda_state *st = cuda_st(ctx);
  int slots = LAM_CUDA_SLOTS_DEFAULT;
  size_t chunk = 0;
  const char *e = getenv("LAMINA_STREAMS");
  if (e && *e) {
    char *end;
    long v = strtol(e, &end, 10);
    if (*end || v < 1 || v > LAM_CUDA_SLOTS)
      return LAM_FAIL(LAM_ERR_INVALID_ARG, "LAMINA_STREAMS='%s': expected a whole number from 1 to %d", e, LAM_CUDA_SLOTS);
    slots = (int)v;
  }
  e = getenv("LAMINA_CHUNK");
  if (e && *e) {
    char *end;
    long long v = strtoll(e, &end, 10);
    if (*end || v < 4096 || v > (1LL << 28))
      return LAM_FAIL(LAM_ERR_INVALID_ARG, "LAMINA_CHUNK='%s': expected values per chunk from 4096 to 2^28", e);
    chunk = (size_t)(v + 4095) / 4096 * 4096;
  }
  cuda_hidden_state *h = (cuda_hidden_state *)calloc(1, sizeof *h);
  if (!h) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for the hidden layer's state");
  st->hidden = h;
  h->slots = slots;
  h->chunk_env = chunk;
  CUDA_TRY(cudaEventCreate(&h->ev_start)); /* on failure the context's destroy frees what was made */
  CUDA_TRY(cudaEventCreate(&h->ev_stop));
  for (int i = 0; i < LAM_CUDA_SLOTS; i++) CUDA_TRY(cudaStreamCreateWithFlags(&h->slot[i].stream, cudaStreamNonBlocking));
  return LAM_OK;
}

lam_status cuda_hidden_sync(lam_ctx *ctx) {
  cuda_hidden_state *h = hid(ctx);
  for (int i = 0; h && i < LAM_CUDA_SLOTS; i++)
    if (h->slot[i].stream) CUDA_TRY(cudaStreamSynchronize(h->slot[i].stream));
  return LAM_OK;
}

/* ---- pinned staging ---- */

static void staging_free(lam_ctx *ctx) {
  cuda_hidden_state *h = hid(ctx);
  for (int i = 0; i < LAM_CUDA_SLOTS; i++) {
    cuda_slot *sl = &h->slot[i];
    if (sl->stream) cudaStreamSynchronize(sl->stream);
    sl->h_grey = sl->h_w = sl->h_out = NULL;
  }
  if (h->staging_base) {
    cudaHostUnregister(h->staging_base);
    munmap(h->staging_base, h->staging_bytes);
  }
  h->staging_base = NULL;
  h->staging_bytes = 0;
  h->staging_cap = 0;
  ctx->pinned_staging = 0;
}

void cuda_hidden_state_free(lam_ctx *ctx) {
  cuda_hidden_state *h = hid(ctx);
  if (!h) return;
  staging_free(ctx);
  for (size_t i = 0; i < 4 * h->ev_pool_chunks; i++) cudaEventDestroy(h->ev_pool[i]);
  free(h->ev_pool);
  for (int i = 0; i < LAM_CUDA_SLOTS; i++)
    if (h->slot[i].stream) cudaStreamDestroy(h->slot[i].stream);
  if (h->ev_start) cudaEventDestroy(h->ev_start);
  if (h->ev_stop) cudaEventDestroy(h->ev_stop);
  free(h);
  cuda_st(ctx)->hidden = NULL;
}

#define HUGE_PAGE ((size_t)2 << 20)

/* Pinned buffers for `elems` values in every slot; kept for later calls, grown when too small.
 * All of them lie in one region that is mapped here, asked for in transparent huge pages, first
 * touched on all host threads and then registered with CUDA: cudaHostAlloc pins and zeroes 4 KB
 * pages one after another in the driver, 82 ms for 192 MB on the H200 machine against 16 ms this
 * way (7 touch + 9 register, 2026-12-02) — and it was most of what a fresh process's first call
 * spent outside the CUDA context itself. */
static lam_status staging_reserve(lam_ctx *ctx, size_t elems) {
  cuda_hidden_state *h = hid(ctx);
  if (h->staging_cap >= elems) return LAM_OK;
  staging_free(ctx);
  size_t bytes = (elems * sizeof(float) + 4095) / 4096 * 4096; /* each buffer page-aligned */
  size_t total = 3 * bytes * (size_t)h->slots, mapped = (total + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
  /* Over-map by a huge page so the region can start on a huge-page boundary; the ends are unmapped. */
  char *raw = (char *)mmap(NULL, mapped + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for %zu bytes of pinned staging (mmap: %s)", total,
                    strerror(errno));
  char *base = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  if (base > raw) munmap(raw, (size_t)(base - raw));
  if (raw + HUGE_PAGE > base) munmap(base + mapped, (size_t)(raw + HUGE_PAGE - base));
  madvise(base, mapped, MADV_HUGEPAGE); /* a hint: where the kernel has THP off, 4 KB pages do */
  lam_parallel_touch(base, mapped);
  cudaError_t e = cudaHostRegister(base, mapped, cudaHostRegisterMapped);
  if (e != cudaSuccess) {
    munmap(base, mapped);
    return cuda_status(e, "cudaHostRegister(staging)", __FILE__, __LINE__);
  }
  h->staging_base = base;
  h->staging_bytes = mapped;
  /* Zero-copy kernels take the staging's host addresses as device addresses (true where the device can
   * use host pointers of registered memory, as every 64-bit UVA system can); checked, not assumed. */
  void *dev = NULL;
  h->staging_same_address = cudaHostGetDevicePointer(&dev, base, 0) == cudaSuccess && dev == base;
  cudaGetLastError();
  for (int i = 0; i < h->slots; i++) {
    char *p = base + 3 * bytes * (size_t)i;
    h->slot[i].h_grey = p;
    h->slot[i].h_w = (float *)(p + bytes);
    h->slot[i].h_out = (float *)(p + 2 * bytes);
  }
  h->staging_cap = elems;
  ctx->pinned_staging = total;
  return LAM_OK;
}

/* Events for `chunks` chunks (four each), created once and kept. */
static lam_status events_reserve(cuda_hidden_state *h, size_t chunks) {
  if (h->ev_pool_chunks >= chunks) return LAM_OK;
  cudaEvent_t *pool = (cudaEvent_t *)realloc(h->ev_pool, 4 * chunks * sizeof *pool);
  if (!pool) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for %zu CUDA events", 4 * chunks);
  h->ev_pool = pool;
  for (size_t i = 4 * h->ev_pool_chunks; i < 4 * chunks; i++) {
    lam_status s = cuda_status(cudaEventCreate(&pool[i]), "cudaEventCreate", __FILE__, __LINE__);
    if (s != LAM_OK) {
      h->ev_pool_chunks = i / 4; /* whole chunk-sets only; a partial set is destroyed */
      for (size_t j = 4 * (i / 4); j < i; j++) cudaEventDestroy(pool[j]);
      return s;
    }
  }
  h->ev_pool_chunks = chunks;
  return LAM_OK;
}

/* Chunk size: about n/16 so the pipeline fills and drains quickly, at least 256 Ki values so each copy
 * runs near full PCIe speed, at most 4 Mi so the staging stays small (48 MiB a slot). A multiple of
 * 4096 values keeps every chunk's pointers as aligned as the arrays themselves. */
static size_t chunk_elems(const cuda_hidden_state *h, size_t n) {
  if (h->chunk_env) return h->chunk_env;
  size_t c = n / 16;
  if (c < ((size_t)1 << 18)) c = (size_t)1 << 18;
  if (c > ((size_t)1 << 22)) c = (size_t)1 << 22;
  return (c + 4095) / 4096 * 4096;
}

/* ---- the host-array pipeline ---- */

typedef struct pipe {
  lam_ctx *ctx;
  cuda_state *st;
  cuda_hidden_state *h;
  size_t n, c, gsz;
  const char *grey;
  const float *w;
  float *out;
  mem_kind kg, kw, ko;
  int nslots;
  int dry; /* staging only: the host copies, no GPU work (lam_hidden_staging_floor) */
  /* Zero-copy: the kernel reads and writes pinned host memory itself over PCIe (no copy engines, no
   * device buffers); gdev/wdev/odev are the device-side addresses of pinned arrays. */
  int zero_copy;
  const char *gdev;
  const float *wdev;
  float *odev;
  void *dg[LAM_CUDA_SLOTS];
  float *dw[LAM_CUDA_SLOTS], *dout[LAM_CUDA_SLOTS];
  double staging, copy_in, kernel, copy_out;
} pipe;

#define PIPE_TRY(expr)                                   \
  do {                                                   \
    s = cuda_status((expr), #expr, __FILE__, __LINE__);  \
    if (s != LAM_OK) return s;                           \
  } while (0)

/* Queues chunk k on its slot's stream: copies in (where an input is on the host), the kernel, the copy
 * out (where out is on the host). Pageable inputs must already be staged in the slot. */
static lam_status enqueue_chunk(pipe *p, size_t k) {
  lam_status s;
  int i = (int)(k % (size_t)p->nslots);
  cuda_slot *sl = &p->h->slot[i];
  size_t off = k * p->c, len = p->n - off < p->c ? p->n - off : p->c;
  const void *g = p->grey + off * p->gsz;
  const float *w = p->w + off;
  float *o = p->out + off;
  cudaEvent_t *ev = p->h->ev_pool + 4 * k;
  PIPE_TRY(cudaEventRecord(ev[0], sl->stream));
  if (p->zero_copy) {
    float *dst = p->ko == MEM_DEVICE ? o : p->ko == MEM_PINNED ? p->odev + off : sl->h_out;
    if (p->kg != MEM_DEVICE) g = p->kg == MEM_PINNED ? (const void *)(p->gdev + off * p->gsz) : sl->h_grey;
    if (p->kw != MEM_DEVICE) w = p->kw == MEM_PINNED ? p->wdev + off : sl->h_w;
    PIPE_TRY(cudaEventRecord(ev[1], sl->stream));
    LAM_TRY(launch_hidden(p->st, sl->stream, len, g, p->gsz == 1 ? LAM_DTYPE_U8 : LAM_DTYPE_F32, w, dst));
    PIPE_TRY(cudaEventRecord(ev[2], sl->stream));
    PIPE_TRY(cudaEventRecord(ev[3], sl->stream));
    return LAM_OK;
  }
  if (p->kg != MEM_DEVICE) {
    PIPE_TRY(cudaMemcpyAsync(p->dg[i], p->kg == MEM_PINNED ? g : sl->h_grey, len * p->gsz, cudaMemcpyHostToDevice, sl->stream));
    g = p->dg[i];
  }
  if (p->kw != MEM_DEVICE) {
    PIPE_TRY(cudaMemcpyAsync(p->dw[i], p->kw == MEM_PINNED ? w : sl->h_w, len * 4, cudaMemcpyHostToDevice, sl->stream));
    w = p->dw[i];
  }
  PIPE_TRY(cudaEventRecord(ev[1], sl->stream));
  LAM_TRY(launch_hidden(p->st, sl->stream, len, g, p->gsz == 1 ? LAM_DTYPE_U8 : LAM_DTYPE_F32, w,
                        p->ko == MEM_DEVICE ? o : p->dout[i]));
  PIPE_TRY(cudaEventRecord(ev[2], sl->stream));
  if (p->ko != MEM_DEVICE)
    PIPE_TRY(cudaMemcpyAsync(p->ko == MEM_PINNED ? o : sl->h_out, p->dout[i], len * 4, cudaMemcpyDeviceToHost, sl->stream));
  PIPE_TRY(cudaEventRecord(ev[3], sl->stream));
  return LAM_OK;
}

/* Waits for chunk k, adds its event times, and (pageable out) adds the copy of its result to jobs. */
static lam_status finish_chunk(pipe *p, size_t k, lam_copy_job *jobs, int *njobs) {
  lam_status s;
  cuda_slot *sl = &p->h->slot[k % (size_t)p->nslots];
  float a = 0, b = 0, c = 0;
  if (!p->dry) {
    cudaEvent_t *ev = p->h->ev_pool + 4 * k;
    PIPE_TRY(cudaEventSynchronize(ev[3]));
    PIPE_TRY(cudaEventElapsedTime(&a, ev[0], ev[1]));
    PIPE_TRY(cudaEventElapsedTime(&b, ev[1], ev[2]));
    PIPE_TRY(cudaEventElapsedTime(&c, ev[2], ev[3]));
  }
  p->copy_in += a;
  p->kernel += b;
  p->copy_out += c;
  if (p->ko == MEM_PAGEABLE) {
    size_t off = k * p->c, len = p->n - off < p->c ? p->n - off : p->c;
    jobs[(*njobs)++] = (lam_copy_job){p->out + off, sl->h_out, len * 4};
  }
  return LAM_OK;
}

static void stage_inputs(pipe *p, size_t k, lam_copy_job *jobs, int *njobs) {
  cuda_slot *sl = &p->h->slot[k % (size_t)p->nslots];
  size_t off = k * p->c, len = p->n - off < p->c ? p->n - off : p->c;
  if (p->kg == MEM_PAGEABLE) jobs[(*njobs)++] = (lam_copy_job){sl->h_grey, p->grey + off * p->gsz, len * p->gsz};
  if (p->kw == MEM_PAGEABLE) jobs[(*njobs)++] = (lam_copy_job){sl->h_w, p->w + off, len * 4};
}

static void run_copies(pipe *p, lam_copy_job *jobs, int njobs) {
  if (!njobs) return;
  double t0 = lam_now_ms();
  lam_parallel_copy(jobs, njobs);
  p->staging += lam_now_ms() - t0;
}

static lam_status pipeline_run(pipe *p) {
  lam_status s;
  size_t nchunks = (p->n + p->c - 1) / p->c;
  /* With pageable arrays the host must wait for a slot's previous chunk before it restages the slot;
   * otherwise every chunk is queued at once (a slot's device buffers are reused in stream order), so
   * the copy engines never wait for the host. */
  int paced = p->kg == MEM_PAGEABLE || p->kw == MEM_PAGEABLE || p->ko == MEM_PAGEABLE;
  size_t window = paced ? (size_t)p->nslots : nchunks;
  if (!p->dry) LAM_TRY(events_reserve(p->h, nchunks));
  /* Work queued earlier on the context's stream (an upload, an op writing an input) comes first. */
  PIPE_TRY(cudaEventRecord(p->h->ev_start, p->st->stream));
  for (int i = 0; i < p->nslots; i++) PIPE_TRY(cudaStreamWaitEvent(p->h->slot[i].stream, p->h->ev_start, 0));
  for (size_t k = 0; k < nchunks; k++) {
    lam_copy_job jobs[3];
    int njobs = 0;
    /* The slot's previous chunk must be done before its staging buffers are reused; its result
     * leaves the slot in the same parallel copy that stages this chunk's inputs. */
    if (k >= window) LAM_TRY(finish_chunk(p, k - window, jobs, &njobs));
    stage_inputs(p, k, jobs, &njobs);
    run_copies(p, jobs, njobs);
    if (!p->dry) LAM_TRY(enqueue_chunk(p, k));
  }
  for (size_t k = nchunks > window ? nchunks - window : 0; k < nchunks; k++) {
    lam_copy_job jobs[1];
    int njobs = 0;
    LAM_TRY(finish_chunk(p, k, jobs, &njobs));
    run_copies(p, jobs, njobs);
  }
  return LAM_OK;
}

/* Which way host arrays travel: LAMINA_HOST_PATH=copy (copy engines, the default) or zerocopy (the
 * kernel reads and writes pinned memory over PCIe). Zero-copy needs every pinned array mapped. */
static int want_zero_copy(void) {
  const char *e = getenv("LAMINA_HOST_PATH");
  return e && !strcmp(e, "zerocopy");
}

typedef struct host_arrays {
  mem_kind kg, kw, ko;
  const void *gdev, *wdev, *odev; /* device-side addresses of pinned arrays */
} host_arrays;

static lam_status hidden_host(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                              const host_arrays *ha, int dry, lam_hidden_timing *timing) {
  cuda_state *st = cuda_st(ctx);
  cuda_hidden_state *h = st->hidden;
  mem_kind kg = ha->kg, kw = ha->kw, ko = ha->ko;
  pipe p;
  memset(&p, 0, sizeof p);
  p.zero_copy = want_zero_copy() && (kg != MEM_PINNED || ha->gdev) && (kw != MEM_PINNED || ha->wdev) &&
                (ko != MEM_PINNED || ha->odev);
  p.gdev = (const char *)ha->gdev;
  p.wdev = (const float *)ha->wdev;
  p.odev = (float *)ha->odev;
  p.ctx = ctx;
  p.st = st;
  p.h = h;
  p.n = n;
  p.c = chunk_elems(h, n);
  p.gsz = lam_dtype_size(gt);
  p.grey = (const char *)grey;
  p.w = w;
  p.out = out;
  p.kg = kg;
  p.kw = kw;
  p.ko = ko;
  p.dry = dry;
  size_t nchunks = (n + p.c - 1) / p.c;
  p.nslots = nchunks < (size_t)h->slots ? (int)nchunks : h->slots;
  if (kg == MEM_PAGEABLE || kw == MEM_PAGEABLE || ko == MEM_PAGEABLE) {
    LAM_TRY(staging_reserve(ctx, p.c));
    if (!h->staging_same_address) p.zero_copy = 0;
  }

  lam_status s = LAM_OK;
  for (int i = 0; i < p.nslots && s == LAM_OK && !dry && !p.zero_copy; i++) {
    if (kg != MEM_DEVICE) s = lam_cache_alloc(&ctx->cache, &p.dg[i], p.c * p.gsz);
    if (s == LAM_OK && kw != MEM_DEVICE) s = lam_cache_alloc(&ctx->cache, (void **)&p.dw[i], p.c * 4);
    if (s == LAM_OK && ko != MEM_DEVICE) s = lam_cache_alloc(&ctx->cache, (void **)&p.dout[i], p.c * 4);
  }
  if (s == LAM_OK) s = pipeline_run(&p);
  if (s != LAM_OK) /* nothing queued may outlive the call: it would touch the caller's arrays */
    for (int i = 0; i < p.nslots; i++) cudaStreamSynchronize(h->slot[i].stream);
  for (int i = 0; i < p.nslots; i++) {
    lam_cache_free(&ctx->cache, p.dg[i]);
    lam_cache_free(&ctx->cache, p.dw[i]);
    lam_cache_free(&ctx->cache, p.dout[i]);
  }
  if (timing) {
    timing->staging = p.staging;
    timing->copy_in = p.copy_in;
    timing->kernel = p.kernel;
    timing->copy_out = p.copy_out;
    timing->chunks = (int)nchunks;
  }
  return s;
}

static lam_status classify(cuda_state *st, const void *grey, const float *w, const float *out, host_arrays *ha) {
  LAM_TRY(where_is(st, grey, "grey", &ha->kg, &ha->gdev));
  LAM_TRY(where_is(st, w, "w", &ha->kw, &ha->wdev));
  LAM_TRY(where_is(st, out, "out", &ha->ko, &ha->odev));
  return LAM_OK;
}

lam_status cuda_hidden(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                       lam_hidden_timing *timing) {
  cuda_state *st = cuda_st(ctx);
  double t0 = lam_now_ms();
  host_arrays ha;
  LAM_TRY(classify(st, grey, w, out, &ha));
  if (ha.kg == MEM_DEVICE && ha.kw == MEM_DEVICE && ha.ko == MEM_DEVICE) {
    if (!timing) return launch_hidden(st, st->stream, n, grey, gt, w, out);
    /* Timed: events around the kernel, and wait, so the figures are complete on return. */
    cuda_hidden_state *h = st->hidden;
    CUDA_TRY(cudaEventRecord(h->ev_start, st->stream));
    LAM_TRY(launch_hidden(st, st->stream, n, grey, gt, w, out));
    CUDA_TRY(cudaEventRecord(h->ev_stop, st->stream));
    CUDA_TRY(cudaEventSynchronize(h->ev_stop));
    float ms = 0;
    CUDA_TRY(cudaEventElapsedTime(&ms, h->ev_start, h->ev_stop));
    timing->kernel = ms;
    timing->chunks = 1;
    timing->total = lam_now_ms() - t0;
    return LAM_OK;
  }
  LAM_TRY(hidden_host(ctx, n, grey, gt, w, out, &ha, 0, timing));
  if (timing) timing->total = lam_now_ms() - t0;
  return LAM_OK;
}

lam_status cuda_staging_floor(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                              double *ms) {
  cuda_state *st = cuda_st(ctx);
  host_arrays ha;
  LAM_TRY(classify(st, grey, w, out, &ha));
  LAM_TRY(ctx->be->queue->sync(ctx)); /* the staging buffers must be idle */
  double t0 = lam_now_ms();
  LAM_TRY(hidden_host(ctx, n, grey, gt, w, out, &ha, 1, NULL));
  *ms = lam_now_ms() - t0;
  return LAM_OK;
}
