/* backend.cu — the CUDA backend's tables (internal.h): device discovery, context set-up, device and pinned memory,
 * copies, queues, events and graphs, which primitives take which activation formats (cuda_supports), and the error
 * checks every CUDA call goes through. The ops are in the other .cu files by family (hidden.cu, gemm.cu, conv.cu,
 * pool.cu, norm.cu, act.cu, loss.cu, optim.cu, data.cu, layout.cu, jpeg.cu, comm.cu). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <nvtx3/nvToolsExtMemCudaRt.h>

#include "cuda.h"

#ifndef LAMINA_CUDA_ARCHS
#define LAMINA_CUDA_ARCHS "unknown"
#endif

extern "C" lam_status cuda_status(cudaError_t e, const char *expr, const char *file, int line) {
  if (e == cudaSuccess) return LAM_OK;
  cudaGetLastError(); /* clear a non-sticky error so the context stays usable */
  lam_status s = e == cudaErrorMemoryAllocation ? LAM_ERR_OUT_OF_MEMORY : LAM_ERR_CUDA;
  return lam_fail_at(s, file, line, "%s failed: %s (%s)", expr, cudaGetErrorString(e), cudaGetErrorName(e));
}

extern "C" void cuda_mark_written(cudaStream_t s, const void *p, size_t bytes) {
  static const nvtxDomainHandle_t dom = nvtxDomainCreateA("lamina"); /* C++: made once, thread-safe */
  nvtxMemVirtualRangeDesc_t range = {bytes, p};
  nvtxMemMarkInitializedBatch_t batch = {NVTX_EXT_COMPATID_MEM, sizeof batch, NVTX_MEM_TYPE_VIRTUAL_ADDRESS, 1,
                                         sizeof range, &range};
  nvtxMemCudaMarkInitialized(dom, s, 0, &batch);
}

extern "C" lam_status cuda_after_launch(cuda_state *st, cudaStream_t s, const char *kernel, const char *file,
                                        int line) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return lam_fail_at(LAM_ERR_CUDA, file, line, "launching %s failed: %s (%s)", kernel, cudaGetErrorString(e),
                       cudaGetErrorName(e));
  if (st->sync_debug && !st->capturing) {
    e = cudaStreamSynchronize(s);
    if (e != cudaSuccess)
      return lam_fail_at(LAM_ERR_CUDA, file, line, "%s failed while running: %s (%s)", kernel, cudaGetErrorString(e),
                         cudaGetErrorName(e));
  }
  return LAM_OK;
}

/* Whether an NVIDIA driver is installed: its kernel module (/proc/driver/nvidia) or its library
 * (libcuda.so.1, all WSL has). Without one the runtime answers cudaErrorInsufficientDriver ("CUDA driver
 * version is insufficient for CUDA runtime version") or cudaErrorNoDevice, which sent users to update a
 * driver that is not there. */
static int nvidia_driver_present(void) {
  if (access("/proc/driver/nvidia/version", F_OK) == 0) return 1;
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != NULL;
}

/* The driver's version line ("NVRM version: ..."), or "" where it cannot be read. */
static void nvidia_driver_version(char *out, size_t size) {
  out[0] = '\0';
  FILE *f = fopen("/proc/driver/nvidia/version", "r");
  if (!f) return;
  if (fgets(out, (int)size, f)) out[strcspn(out, "\n")] = '\0';
  fclose(f);
}

extern "C" int cuda_device_count(const char **why) {
  static thread_local char reason[384];
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if ((e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) && !nvidia_driver_present()) {
      snprintf(reason, sizeof reason, "no NVIDIA driver or GPU found");
    } else if (e == cudaErrorInsufficientDriver) {
      char drv[160];
      nvidia_driver_version(drv, sizeof drv);
      snprintf(reason, sizeof reason, "cudaGetDeviceCount: %s (the driver: %s; this lamina's CUDA runtime: %d.%d)",
               cudaGetErrorString(e), drv[0] ? drv : "its version unknown", CUDART_VERSION / 1000,
               CUDART_VERSION % 1000 / 10);
    } else {
      snprintf(reason, sizeof reason, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
    }
    if (why) *why = reason;
    return 0;
  }
  if (count == 0 && why) *why = "cudaGetDeviceCount found no device";
  return count;
}

extern "C" const char *cuda_archs(void) { return LAMINA_CUDA_ARCHS; }
extern "C" int cuda_runtime_version(void) { return CUDART_VERSION; }

extern "C" lam_status cuda_device_info_get(int device, lam_cuda_device_info *info) {
  int count = cuda_device_count(NULL);
  if (device < 0 || device >= count)
    return LAM_FAIL(LAM_ERR_NO_DEVICE, "no CUDA device %d (%d present)", device, count);
  cudaDeviceProp p;
  CUDA_TRY(cudaGetDeviceProperties(&p, device));
  snprintf(info->name, sizeof info->name, "%s", p.name);
  info->cc_major = p.major;
  info->cc_minor = p.minor;
  info->sm_count = p.multiProcessorCount;
  info->l2_bytes = (size_t)p.l2CacheSize;
  info->mem_total = p.totalGlobalMem;
  info->mem_free = 0;
  int cur = -1;
  CUDA_TRY(cudaGetDevice(&cur));
  if (cur == device) CUDA_TRY(cudaMemGetInfo(&info->mem_free, &info->mem_total));
  int clock_khz = 0, bus_bits = 0;
  CUDA_TRY(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, device));
  CUDA_TRY(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device));
  info->mem_bus_gbps = 2.0 * clock_khz * 1e3 * (bus_bits / 8) / 1e9; /* double data rate */
  return LAM_OK;
}

void *cuda_dlopen(const char *soname) {
  void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
#ifdef LAMINA_CUDA_LIBDIR
  if (!lib) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", LAMINA_CUDA_LIBDIR, soname);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
#endif
  return lib;
}

/* ---- memory ---- */

static lam_status cuda_raw_alloc(lam_ctx *ctx, void **p, size_t bytes) {
  (void)ctx;
  cudaError_t e = cudaMalloc(p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "cudaMalloc(%zu bytes) failed: the device has %zu of %zu bytes free", bytes,
                    free_b, total_b);
  }
  CUDA_TRY(e);
  return LAM_OK;
}

static void cuda_raw_free(lam_ctx *ctx, void *p) {
  (void)ctx;
  cudaFree(p); /* nothing to report to: freeing happens on release and teardown */
}

static lam_status cuda_upload(lam_ctx *ctx, void *dst, const void *src, size_t bytes) {
  cuda_state *st = cuda_st(ctx);
  CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st->stream));
  CUDA_TRY(cudaStreamSynchronize(st->stream));
  return LAM_OK;
}

static lam_status cuda_host_alloc(lam_ctx *ctx, void **p, size_t bytes) {
  (void)ctx;
  CUDA_TRY(cudaHostAlloc(p, bytes, cudaHostAllocMapped)); /* mapped: kernels may read it directly */
  return LAM_OK;
}

static lam_status cuda_host_free(lam_ctx *ctx, void *p) {
  (void)ctx;
  CUDA_TRY(cudaFreeHost(p));
  return LAM_OK;
}

static lam_status cuda_sync(lam_ctx *ctx) {
  cuda_state *st = cuda_st(ctx);
  CUDA_TRY(cudaStreamSynchronize(st->stream));
  CUDA_TRY(cudaStreamSynchronize(st->copy_stream));
  return cuda_hidden_sync(ctx);
}

/* ---- the profiler's clock: events on the context's stream ---- */

static lam_status cuda_mark(lam_ctx *ctx, size_t i) {
  cuda_state *st = cuda_st(ctx);
  if (i >= st->marks_cap) return LAM_FAIL(LAM_ERR_INVALID_ARG, "profiler mark %zu beyond the %zu reserved", i, st->marks_cap);
  CUDA_TRY(cudaEventRecord(st->marks[i], st->stream));
  return LAM_OK;
}

static lam_status cuda_mark_read(lam_ctx *ctx, size_t i, double *ms) {
  cuda_state *st = cuda_st(ctx);
  if (i >= st->marks_cap) return LAM_FAIL(LAM_ERR_INVALID_ARG, "profiler mark %zu beyond the %zu reserved", i, st->marks_cap);
  CUDA_TRY(cudaEventSynchronize(st->marks[i]));
  float f = 0;
  CUDA_TRY(cudaEventElapsedTime(&f, st->marks[0], st->marks[i]));
  *ms = f;
  return LAM_OK;
}

/* ---- two queues and events (internal.h) ---- */

static cudaStream_t queue_stream(cuda_state *st, int queue) { return queue ? st->copy_stream : st->stream; }

static lam_status cuda_copy_async(lam_ctx *ctx, int queue, void *dst, const void *src, size_t bytes) {
  cuda_state *st = cuda_st(ctx);
  CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, queue_stream(st, queue)));
  return LAM_OK;
}

/* Grows one pool of events (the profiler's marks or the event slots) to n. */
static lam_status grow_events(cudaEvent_t **pool, size_t *cap, size_t n, const char *what) {
  if (*cap >= n) return LAM_OK;
  cudaEvent_t *m = (cudaEvent_t *)realloc(*pool, n * sizeof *m);
  if (!m) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for %zu %s", n, what);
  *pool = m;
  for (size_t i = *cap; i < n; i++) {
    cudaError_t e = cudaEventCreate(&m[i]);
    if (e != cudaSuccess) {
      *cap = i;
      return cuda_status(e, "cudaEventCreate", __FILE__, __LINE__);
    }
  }
  *cap = n;
  return LAM_OK;
}

static lam_status cuda_event_reserve(lam_ctx *ctx, size_t n) {
  cuda_state *st = cuda_st(ctx);
  return grow_events(&st->events, &st->events_cap, n, "events");
}

#define EVENT_CHECK(st, ev) \
  LAM_CHECK_ARG((ev) < (st)->events_cap, "event %zu beyond the %zu reserved", (size_t)(ev), (st)->events_cap)

static lam_status cuda_event_record(lam_ctx *ctx, size_t ev, int queue) {
  cuda_state *st = cuda_st(ctx);
  EVENT_CHECK(st, ev);
  CUDA_TRY(cudaEventRecord(st->events[ev], queue_stream(st, queue)));
  return LAM_OK;
}

static lam_status cuda_queue_wait(lam_ctx *ctx, int queue, size_t ev) {
  cuda_state *st = cuda_st(ctx);
  EVENT_CHECK(st, ev);
  CUDA_TRY(cudaStreamWaitEvent(queue_stream(st, queue), st->events[ev], 0));
  return LAM_OK;
}

static lam_status cuda_event_sync(lam_ctx *ctx, size_t ev) {
  cuda_state *st = cuda_st(ctx);
  EVENT_CHECK(st, ev);
  CUDA_TRY(cudaEventSynchronize(st->events[ev]));
  return LAM_OK;
}

static lam_status cuda_event_ms(lam_ctx *ctx, size_t a, size_t b, double *ms) {
  cuda_state *st = cuda_st(ctx);
  EVENT_CHECK(st, a);
  EVENT_CHECK(st, b);
  float f = 0;
  CUDA_TRY(cudaEventElapsedTime(&f, st->events[a], st->events[b]));
  *ms = f;
  return LAM_OK;
}

/* ---- graphs ---- */

static lam_status cuda_graph_begin(lam_ctx *ctx) {
  cuda_state *st = cuda_st(ctx);
  /* Thread-local: a streaming loader thread may wait on events meanwhile. */
  CUDA_TRY(cudaStreamBeginCapture(st->stream, cudaStreamCaptureModeThreadLocal));
  st->capturing = 1;
  return LAM_OK;
}

static lam_status cuda_graph_end(lam_ctx *ctx, void **graph) {
  cuda_state *st = cuda_st(ctx);
  cudaGraph_t g = NULL;
  cudaGraphExec_t ex = NULL;
  *graph = NULL;
  st->capturing = 0;
  cudaError_t e = cudaStreamEndCapture(st->stream, &g);
  if (e == cudaSuccess) e = cudaGraphInstantiate(&ex, g, 0);
  if (g) cudaGraphDestroy(g);
  if (e != cudaSuccess) {
    cudaGetLastError(); /* a failed capture leaves its error behind; it is reported here */
    return cuda_status(e, "capturing the training step (cudaStreamEndCapture / cudaGraphInstantiate)", __FILE__, __LINE__);
  }
  *graph = ex;
  return LAM_OK;
}

static lam_status cuda_graph_launch(lam_ctx *ctx, void *graph) {
  cuda_state *st = cuda_st(ctx);
  CUDA_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, st->stream));
  return LAM_OK;
}

static void cuda_graph_free(lam_ctx *ctx, void *graph) {
  (void)ctx;
  if (graph && cudaGraphExecDestroy((cudaGraphExec_t)graph) != cudaSuccess)
    cudaGetLastError(); /* nothing to do about it, and the next launch check must not report it */
}

static lam_status cuda_mark_reserve(lam_ctx *ctx, size_t n) {
  cuda_state *st = cuda_st(ctx);
  return grow_events(&st->marks, &st->marks_cap, n, "profiler marks");
}

static void cuda_destroy(lam_ctx *ctx) {
  cuda_state *st = cuda_st(ctx);
  if (!st) return;
  cuda_nn_destroy(st);
  cuda_conv_destroy(st);
  for (size_t i = 0; i < st->marks_cap; i++) cudaEventDestroy(st->marks[i]);
  free(st->marks);
  for (size_t i = 0; i < st->events_cap; i++) cudaEventDestroy(st->events[i]);
  free(st->events);
  if (st->copy_stream) cudaStreamDestroy(st->copy_stream);
  if (st->rowsum_part) cudaFree(st->rowsum_part);
  if (st->nhwc_part) cudaFree(st->nhwc_part);
  if (st->xent_done) cudaFree(st->xent_done);
  cuda_hidden_state_free(ctx);
  if (st->stream) cudaStreamDestroy(st->stream);
  free(st);
  ctx->state = NULL;
}

/* The graph's bn_act_pool fusion on CUDA: written and checked against its CPU twin on a machine without a GPU
 * (2026-12-07), its kernels not yet run on one, so taken only with LAMINA_BN_POOL=1 (test_prims calls its kernels
 * directly either way). */
static int bn_pool_wanted(void) {
  const char *e = getenv("LAMINA_BN_POOL");
  return e && !strcmp(e, "1");
}

/* What the kernels run on, by format: NCHW activations in float32 only for the primitives that know the layout (the
 * 16-bit types are NHWC's: cuDNN's tensor cores want them so, and nn_choose_fmt never asks for NCHW bf16), and
 * BatchNorm synchronized over ranks on NHWC rows only (or a plane of one pixel, which lies alike in both). The
 * primitives give the same errors themselves; this is the check nn_graph_finish makes before any work. */
static int cuda_supports(int prim, lam_fmt f, const char **why) {
  if ((prim == LAM_PRIM_bn_act_pool_fwd || prim == LAM_PRIM_bn_act_pool_bwd) && !bn_pool_wanted()) {
    *why = "BatchNorm + activation + maxpool in one pass is opt-in on CUDA (LAMINA_BN_POOL=1) until its kernels have "
           "run on a GPU (the graph runs the nodes apart)";
    return 0;
  }
  if (f.nhwc) return 1;
  switch (prim) {
  case LAM_PRIM_bn_sums:
  case LAM_PRIM_bn_sync_dx:
    *why = "BatchNorm synchronized over ranks runs on NHWC activations on CUDA (the default layout for models with "
           "convs; unset LAMINA_LAYOUT=nchw)";
    return 0;
  case LAM_PRIM_bn_act_pool_fwd:
  case LAM_PRIM_bn_act_pool_bwd:
    *why = "BatchNorm + activation + maxpool in one pass runs on NHWC activations on CUDA (the graph then runs them "
           "apart)";
    return 0;
  case LAM_PRIM_conv2d_fwd_stats:
    *why = "a conv summing the next BatchNorm's statistics runs on NHWC activations on CUDA (the default layout for "
           "models with convs; unset LAMINA_LAYOUT=nchw, or LAMINA_CONV_STATS=0)";
    return 0;
  case LAM_PRIM_conv2d_workspace: case LAM_PRIM_conv2d_fwd: case LAM_PRIM_conv2d_bwd_data:
  case LAM_PRIM_conv2d_bwd_filter: case LAM_PRIM_channel_bias_fwd: case LAM_PRIM_channel_bias_bwd:
  case LAM_PRIM_maxpool_fwd: case LAM_PRIM_maxpool_bwd: case LAM_PRIM_avgpool_fwd: case LAM_PRIM_avgpool_bwd:
  case LAM_PRIM_plane_mean_fwd: case LAM_PRIM_plane_mean_bwd: case LAM_PRIM_upsample_fwd: case LAM_PRIM_upsample_bwd:
  case LAM_PRIM_bn_fwd: case LAM_PRIM_bn_bwd: case LAM_PRIM_bn_act_fwd: case LAM_PRIM_bn_act_bwd:
  case LAM_PRIM_gather: case LAM_PRIM_xent:
    if (f.dt == LAM_DT_F32) return 1;
    *why = "NCHW 16-bit activations are not a CUDA format (NHWC 16-bit or NCHW float32 are)";
    return 0;
  default:
    return 1;
  }
}

/* The tables, by concern (internal.h). nvcc's C++ takes designated initializers only in the fields' order. */
static const lam_mem_ops cuda_mem = {
    .raw_alloc = cuda_raw_alloc,
    .raw_free = cuda_raw_free,
    .upload = cuda_upload,
    .download = cuda_upload,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .host_memory = cuda_host_memory,
};
static const lam_queue_ops cuda_queue = {
    .sync = cuda_sync,
    .copy_async = cuda_copy_async,
    .event_reserve = cuda_event_reserve,
    .event_record = cuda_event_record,
    .queue_wait = cuda_queue_wait,
    .event_sync = cuda_event_sync,
    .event_ms = cuda_event_ms,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
    .mark_reserve = cuda_mark_reserve,
    .mark = cuda_mark,
    .mark_read = cuda_mark_read,
};
#define LAM_CUDA_ENTRY(name, params) .name = cuda_##name,
static const lam_prim_ops cuda_prim = {
    .set_precision = cuda_set_precision,
    .supports = cuda_supports,
    LAM_NN_PRIMS(LAM_CUDA_ENTRY)
};
#undef LAM_CUDA_ENTRY
static const lam_comm_ops cuda_comm = {
    .init = cuda_comm_init,
    .free = cuda_comm_free,
    .sum = cuda_comm_sum,
    .sum_host = cuda_comm_sum_host,
};
static const lam_hidden_ops cuda_hidden_ops = {
    .run = cuda_hidden,
    .staging_floor = cuda_staging_floor,
    .normalize = cuda_normalize,
    .weigh = cuda_weigh,
    .tanh_ = cuda_tanh,
};
static const lam_backend cuda_backend = {
    .name = "cuda",
    .direct_first_conv = 1,
    .nhwc_convs = 1,
    .conv_stats_one_pass = cuda_conv_stats_one_pass,
    .mem = &cuda_mem,
    .queue = &cuda_queue,
    .prim = &cuda_prim,
    .comm = &cuda_comm,
    .hidden = &cuda_hidden_ops,
    .destroy = cuda_destroy,
};

extern "C" lam_status cuda_ctx_init(lam_ctx *ctx) {
  const char *why = NULL;
  if (cuda_device_count(&why) == 0)
    return LAM_FAIL(LAM_ERR_NO_DEVICE,
                    "CUDA was asked for, but there is no CUDA device (%s); use --device cpu (or LAMINA_DEVICE=cpu), "
                    "or run on a machine with an NVIDIA GPU and driver",
                    why);
  cuda_state *st = (cuda_state *)calloc(1, sizeof *st);
  if (!st) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for the CUDA backend state");
  ctx->state = st;
  ctx->be = &cuda_backend;
  const char *dbg = getenv("LAMINA_CUDA_SYNC");
  st->sync_debug = dbg && *dbg && *dbg != '0';
  ctx->no_graphs = st->sync_debug; /* each launch is to be checked as it runs */
  /* Which GPU: LAMINA_CUDA_DEVICE (a rank's, set by the CLI from its local rank), else the first. */
  st->device = 0;
  const char *dev = getenv("LAMINA_CUDA_DEVICE");
  if (dev && *dev) {
    char *end;
    long v = strtol(dev, &end, 10);
    int count = cuda_device_count(NULL);
    if (*end || v < 0 || v >= count) {
      ctx->state = NULL;
      free(st);
      return LAM_FAIL(LAM_ERR_NO_DEVICE, "LAMINA_CUDA_DEVICE='%s' is not a device here: expected 0 to %d (%d CUDA "
                      "device%s present)", dev, count - 1, count, count == 1 ? "" : "s");
    }
    st->device = (int)v;
  }
  lam_status s = LAM_OK;
  cudaDeviceProp p;
#define INIT_TRY(expr)                                             \
  do {                                                             \
    s = cuda_status((expr), #expr, __FILE__, __LINE__);            \
    if (s != LAM_OK) goto fail;                                    \
  } while (0)
  INIT_TRY(cudaSetDevice(st->device));
  INIT_TRY(cudaFree(0)); /* creates the CUDA context now, not inside the first timed call */
  INIT_TRY(cudaGetDeviceProperties(&p, st->device));
  st->sm_count = p.multiProcessorCount;
  st->max_threads_per_sm = p.maxThreadsPerMultiProcessor;
  INIT_TRY(cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking));
  INIT_TRY(cudaStreamCreateWithFlags(&st->copy_stream, cudaStreamNonBlocking));
  INIT_TRY(cudaMalloc((void **)&st->rowsum_part, ROW_SUM_PART_FLOATS * sizeof(float)));
  INIT_TRY(cudaMalloc((void **)&st->nhwc_part, NHWC_PART_FLOATS * sizeof(float)));
  INIT_TRY(cudaMalloc((void **)&st->xent_done, sizeof(unsigned)));
  INIT_TRY(cudaMemset(st->xent_done, 0, sizeof(unsigned)));
#undef INIT_TRY
  if ((s = cuda_hidden_state_create(ctx)) != LAM_OK) goto fail;
  snprintf(ctx->name, sizeof ctx->name, "cuda:%d %s (sm_%d%d, %d SMs, %.0f GiB)", st->device, p.name, p.major, p.minor,
           p.multiProcessorCount, p.totalGlobalMem / 1073741824.0);
  return LAM_OK;
fail:
  cuda_destroy(ctx);
  return s;
}
