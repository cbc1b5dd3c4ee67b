/* context.c — creating a context, and the one place where the backend is chosen: AUTO takes CUDA
 * when a device is present, else the CPU; LAMINA_DEVICE overrides AUTO. Also the memory API, which
 * routes through the context's caching allocator and backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "internal.h"

#ifdef LAMINA_WITH_CUDA
#define HAVE_CUDA 1
#else
#define HAVE_CUDA 0
/* Built without the CUDA backend: these answer "none" with a reason. */
int cuda_device_count(const char **why) {
  if (why) *why = "this lamina was built without CUDA (rebuild with the CUDA toolkit present, cmake -DLAMINA_CUDA=ON)";
  return 0;
}
lam_status cuda_ctx_init(lam_ctx *ctx) {
  (void)ctx;
  return LAM_FAIL(LAM_ERR_NO_DEVICE,
                  "CUDA was asked for, but this lamina was built without CUDA; rebuild with the CUDA toolkit "
                  "(cmake -DLAMINA_CUDA=ON) or use --device cpu");
}
lam_status cuda_device_info_get(int device, lam_cuda_device_info *info) {
  (void)device;
  (void)info;
  return LAM_FAIL(LAM_ERR_NO_DEVICE, "no CUDA device: this lamina was built without CUDA");
}
const char *cuda_archs(void) { return ""; }
int cuda_runtime_version(void) { return 0; }
lam_status cuda_nccl_unique_id(unsigned char *id, size_t bytes) {
  (void)id, (void)bytes;
  return LAM_FAIL(LAM_ERR_UNSUPPORTED, "GPU ranks need CUDA and NCCL, and this lamina was built without CUDA");
}
#endif

int lam_nccl_built(void) {
#if defined(LAMINA_WITH_CUDA) && defined(LAMINA_WITH_NCCL)
  return 1;
#else
  return 0;
#endif
}

lam_status lam_nccl_unique_id(unsigned char id[LAM_NCCL_ID_BYTES]) {
  LAM_CHECK_ARG(id, "lam_nccl_unique_id: id is NULL");
  return cuda_nccl_unique_id(id, LAM_NCCL_ID_BYTES);
}

static lam_status cache_raw_alloc(void *owner, void **p, size_t bytes) {
  lam_ctx *ctx = owner;
  return ctx->be->mem->raw_alloc(ctx, p, bytes);
}
static void cache_raw_free(void *owner, void *p) {
  lam_ctx *ctx = owner;
  ctx->be->mem->raw_free(ctx, p);
}

lam_status lam_device_parse(const char *s, lam_device *out) {
  LAM_CHECK_ARG(s && out, "lam_device_parse: NULL argument");
  if (!strcmp(s, "auto")) *out = LAM_DEVICE_AUTO;
  else if (!strcmp(s, "cpu")) *out = LAM_DEVICE_CPU;
  else if (!strcmp(s, "cuda")) *out = LAM_DEVICE_CUDA;
  else return LAM_FAIL(LAM_ERR_INVALID_ARG, "unknown device '%s': expected auto, cpu or cuda", s);
  return LAM_OK;
}

const char *lam_device_str(lam_device d) {
  switch (d) {
    case LAM_DEVICE_AUTO: return "auto";
    case LAM_DEVICE_CPU: return "cpu";
    case LAM_DEVICE_CUDA: return "cuda";
  }
  return "?";
}

static const struct {
  const char *name;
  size_t size;
} dtypes[] = {[LAM_DTYPE_F32] = {"f32", 4}, [LAM_DTYPE_U8] = {"u8", 1}, [LAM_DTYPE_I8] = {"i8", 1},
              [LAM_DTYPE_F16] = {"f16", 2}, [LAM_DTYPE_BF16] = {"bf16", 2}};
#define NDTYPES (int)(sizeof dtypes / sizeof dtypes[0])

lam_status lam_dtype_parse(const char *s, lam_dtype *out) {
  LAM_CHECK_ARG(s && out, "lam_dtype_parse: NULL argument");
  for (int i = 0; i < NDTYPES; i++)
    if (!strcmp(s, dtypes[i].name)) {
      *out = (lam_dtype)i;
      return LAM_OK;
    }
  return LAM_FAIL(LAM_ERR_INVALID_ARG, "unknown dtype '%s': expected f32, u8, i8, f16 or bf16", s);
}

const char *lam_dtype_str(lam_dtype t) { return (int)t >= 0 && (int)t < NDTYPES ? dtypes[t].name : "?"; }
size_t lam_dtype_size(lam_dtype t) { return (int)t >= 0 && (int)t < NDTYPES ? dtypes[t].size : 0; }

int lam_cuda_device_count(const char **why) { return cuda_device_count(why); }

lam_status lam_cuda_device_info_get(int device, lam_cuda_device_info *info) {
  LAM_CHECK_ARG(info, "lam_cuda_device_info_get: info is NULL");
  return cuda_device_info_get(device, info);
}

/* The host memory available now (MemAvailable: free plus what the kernel can reclaim), or 0 when it
 * cannot be read (no cap then). */
static size_t host_available_bytes(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
  fclose(f);
  return (size_t)kb * 1024;
}

lam_model_options lam_model_options_default(void) { return (lam_model_options){.fuse = 3, .layout = 0, .conv_im2col = 0, .conv_stats = 1}; }

static int is(const char *v, const char *s) { return !strcmp(v, s); }

/* The defaults as LAMINA_FUSE, LAMINA_LAYOUT and LAMINA_CONV change them; a value they do not take is an error. */
static lam_status model_options_env(lam_model_options *o) {
  *o = lam_model_options_default();
  const char *v = getenv("LAMINA_FUSE");
  if (v && *v) {
    if (strlen(v) != 1 || v[0] < '0' || v[0] > '3')
      return LAM_FAIL(LAM_ERR_INVALID_ARG, "LAMINA_FUSE='%s' is not a fusion level: set it to 0 (the plain ops), 1, 2 "
                      "or 3 (the default), or unset it", v);
    o->fuse = v[0] - '0';
  }
  if ((v = getenv("LAMINA_LAYOUT")) && *v) {
    if (!is(v, "auto") && !is(v, "nchw") && !is(v, "nhwc"))
      return LAM_FAIL(LAM_ERR_INVALID_ARG, "LAMINA_LAYOUT='%s' is not a layout: set it to auto, nchw or nhwc, or unset "
                      "it", v);
    o->layout = is(v, "nchw") ? 1 : is(v, "nhwc") ? 2 : 0;
  }
  if ((v = getenv("LAMINA_CONV")) && *v) {
    if (!is(v, "im2col") && !is(v, "auto"))
      return LAM_FAIL(LAM_ERR_INVALID_ARG, "LAMINA_CONV='%s' is not a convolution path: set it to im2col or auto, or "
                      "unset it", v);
    o->conv_im2col = is(v, "im2col");
  }
  if ((v = getenv("LAMINA_CONV_STATS")) && *v) {
    if (strlen(v) != 1 || v[0] < '0' || v[0] > '2')
      return LAM_FAIL(LAM_ERR_INVALID_ARG, "LAMINA_CONV_STATS='%s' is not a choice: set it to 0 (each BatchNorm sums its "
                      "input), 1 (the default: the conv sums them where that is faster) or 2 (wherever it can), or unset it",
                      v);
    o->conv_stats = v[0] - '0';
  }
  return LAM_OK;
}

lam_status lam_ctx_set_model_options(lam_ctx *ctx, const lam_model_options *o) {
  LAM_CHECK_ARG(ctx && o, "lam_ctx_set_model_options: %s is NULL", ctx ? "o" : "ctx");
  LAM_CHECK_ARG(o->fuse >= 0 && o->fuse <= 3 && o->layout >= 0 && o->layout <= 2 && (o->conv_im2col == 0 || o->conv_im2col == 1) &&
                    o->conv_stats >= 0 && o->conv_stats <= 2,
                "lam_ctx_set_model_options: fuse %d (0 to 3), layout %d (0 auto, 1 NCHW, 2 NHWC), conv_im2col %d (0 or 1), "
                "conv_stats %d (0 to 2)", o->fuse, o->layout, o->conv_im2col, o->conv_stats);
  ctx->model_opts = *o;
  return LAM_OK;
}

lam_model_options lam_ctx_model_options(const lam_ctx *ctx) {
  return ctx ? ctx->model_opts : lam_model_options_default();
}

lam_status lam_ctx_create(lam_ctx **out, lam_device want) {
  LAM_CHECK_ARG(out, "lam_ctx_create: ctx is NULL");
  *out = NULL;
  LAM_CHECK_ARG(want == LAM_DEVICE_AUTO || want == LAM_DEVICE_CPU || want == LAM_DEVICE_CUDA,
                "lam_ctx_create: device %d is not one of LAM_DEVICE_AUTO, _CPU, _CUDA", (int)want);
  LAM_TRY(lam_cpu_threads_env_check());
  lam_ctx *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_ctx_create: no host memory for a context");

  lam_device d = want;
  if (d == LAM_DEVICE_AUTO) {
    const char *env = getenv("LAMINA_DEVICE");
    if (env && *env) {
      if (lam_device_parse(env, &d) != LAM_OK) {
        free(ctx);
        return LAM_FAIL(LAM_ERR_INVALID_ARG, "LAMINA_DEVICE='%s' is not a device: set it to auto, cpu or cuda", env);
      }
      if (d != LAM_DEVICE_AUTO) snprintf(ctx->reason, sizeof ctx->reason, "LAMINA_DEVICE=%s", env);
    }
  }
  ctx->want = d;
  ctx->threads = lam_cpu_default_threads(ctx->threads_why, sizeof ctx->threads_why);
  lam_cpu_use_threads(ctx->threads);
  if (d == LAM_DEVICE_AUTO) {
    const char *why = NULL;
    if (cuda_device_count(&why) > 0) {
      d = LAM_DEVICE_CUDA;
      snprintf(ctx->reason, sizeof ctx->reason, "auto: a CUDA device is present");
    } else {
      d = LAM_DEVICE_CPU;
      snprintf(ctx->reason, sizeof ctx->reason, "auto: %s; running on the CPU", why ? why : "no CUDA device found");
    }
  }
  lam_status s = d == LAM_DEVICE_CUDA ? cuda_ctx_init(ctx) : cpu_ctx_init(ctx);
  if (s != LAM_OK) {
    free(ctx);
    return s;
  }
  ctx->device = d;
  lam_cache_init(&ctx->cache, ctx, cache_raw_alloc, cache_raw_free,
                 d == LAM_DEVICE_CUDA ? "device memory" : "host memory");
  if ((s = model_options_env(&ctx->model_opts)) != LAM_OK) {
    lam_ctx_free(ctx);
    return s;
  }
  const char *poison = getenv("LAMINA_POISON");
  ctx->poison = poison && !strcmp(poison, "1");
  if (d == LAM_DEVICE_CPU) { /* more than the machine has would end in the kernel's OOM killer, without a word */
    ctx->cache.limit = host_available_bytes();
    ctx->cache.limit_auto = ctx->cache.limit != 0;
  }
  *out = ctx;
  return LAM_OK;
}

void lam_ctx_free(lam_ctx *ctx) {
  if (!ctx) return;
  if (ctx->be->queue->sync) ctx->be->queue->sync(ctx); /* nothing may still be using the memory we free */
  lam_cache_destroy(&ctx->cache);
  ctx->be->destroy(ctx);
  free(ctx);
}

lam_device lam_ctx_device(const lam_ctx *ctx) { return ctx ? ctx->device : LAM_DEVICE_AUTO; }

lam_status lam_ctx_set_threads(lam_ctx *ctx, int threads) {
  LAM_CHECK_ARG(ctx, "lam_ctx_set_threads: ctx is NULL");
  LAM_CHECK_ARG(threads >= 1 && threads <= LAM_MAX_THREADS, "lam_ctx_set_threads: %d threads is out of range (1 to %d)",
                threads, LAM_MAX_THREADS);
  ctx->threads = lam_cpu_bound_threads(threads, "as asked", ctx->threads_why, sizeof ctx->threads_why);
  lam_cpu_use_threads(ctx->threads);
  if (ctx->device == LAM_DEVICE_CPU) lam_cpu_name(ctx);
  return LAM_OK;
}

int lam_default_threads(char *why, size_t size) {
  char buf[224];
  int n = lam_cpu_default_threads(buf, sizeof buf);
  if (why && size) snprintf(why, size, "%s", buf);
  return n;
}
int lam_ctx_threads(const lam_ctx *ctx) { return ctx ? ctx->threads : 0; }
const char *lam_ctx_device_name(const lam_ctx *ctx) { return ctx ? ctx->name : ""; }
const char *lam_ctx_choice_reason(const lam_ctx *ctx) { return ctx ? ctx->reason : ""; }

lam_status lam_ctx_sync(lam_ctx *ctx) {
  LAM_CHECK_ARG(ctx, "lam_ctx_sync: ctx is NULL");
  return ctx->be->queue->sync(ctx);
}

void lam_build_info_get(lam_build_info *info) {
  if (!info) return;
  info->version = LAMINA_VERSION;
  info->with_cuda = HAVE_CUDA;
  info->cuda_runtime = cuda_runtime_version();
  info->cuda_archs = cuda_archs();
#ifdef _OPENMP
  info->with_openmp = 1;
#else
  info->with_openmp = 0;
#endif
  info->omp_max_threads = lam_omp_max_threads();
}

/* ---- memory ---- */

lam_status lam_mem_stats_get(const lam_ctx *ctx, lam_mem_stats *out) {
  LAM_CHECK_ARG(ctx && out, "lam_mem_stats_get: %s is NULL", ctx ? "out" : "ctx");
  const lam_cache *c = &ctx->cache;
  *out = (lam_mem_stats){.in_use = c->in_use,
                         .reserved = c->reserved,
                         .peak = c->peak,
                         .cached = c->reserved - c->in_use,
                         .pinned_host = ctx->pinned_staging,
                         .allocs = c->allocs,
                         .cache_hits = c->hits};
  return LAM_OK;
}

lam_status lam_mem_alloc(lam_ctx *ctx, void **ptr, size_t bytes) {
  LAM_CHECK_ARG(ctx && ptr, "lam_mem_alloc: %s is NULL", ctx ? "ptr" : "ctx");
  LAM_TRY(lam_cache_alloc(&ctx->cache, ptr, bytes));
  return ctx->poison && bytes ? ctx->be->prim->poison(ctx, *ptr, bytes) : LAM_OK;
}

lam_status lam_mem_free(lam_ctx *ctx, void *ptr) {
  LAM_CHECK_ARG(ctx, "lam_mem_free: ctx is NULL");
  return lam_cache_free(&ctx->cache, ptr);
}

lam_status lam_mem_set_limit(lam_ctx *ctx, size_t bytes) {
  LAM_CHECK_ARG(ctx, "lam_mem_set_limit: ctx is NULL");
  ctx->cache.limit_auto = 0;
  if (bytes && ctx->cache.reserved > bytes) lam_cache_release(&ctx->cache);
  if (bytes && ctx->cache.reserved > bytes)
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_mem_set_limit: %zu bytes are already in use, more than the cap of %zu",
                    ctx->cache.reserved, bytes);
  ctx->cache.limit = bytes;
  return LAM_OK;
}

lam_status lam_mem_hold(lam_ctx *ctx, size_t bytes) {
  LAM_CHECK_ARG(ctx, "lam_mem_hold: ctx is NULL");
  const lam_cache *c = &ctx->cache;
  if (c->limit && bytes && c->reserved + bytes > c->limit)
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_mem_hold: %zu bytes held besides the %zu the allocator holds pass the "
                    "memory cap of %zu", bytes, c->reserved, c->limit);
  ctx->cache.held = bytes;
  return LAM_OK;
}

void lam_host_memory(size_t *resident, size_t *peak) {
  if (resident) {
    unsigned long long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%llu %llu", &pages, &rss) != 2) rss = 0;
    if (f) fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    *resident = (size_t)rss * (size_t)(page > 0 ? page : 4096);
  }
  if (peak) {
    struct rusage ru;
    *peak = getrusage(RUSAGE_SELF, &ru) == 0 ? (size_t)ru.ru_maxrss * 1024 : 0; /* Linux: kilobytes */
  }
}

lam_status lam_mem_release_cached(lam_ctx *ctx, size_t *released) {
  LAM_CHECK_ARG(ctx, "lam_mem_release_cached: ctx is NULL");
  LAM_TRY(ctx->be->queue->sync(ctx)); /* a cached block may still be read by queued work */
  size_t r = lam_cache_release(&ctx->cache);
  if (released) *released = r;
  return LAM_OK;
}

lam_status lam_mem_upload(lam_ctx *ctx, void *dst, const void *src_host, size_t bytes) {
  LAM_CHECK_ARG(ctx, "lam_mem_upload: ctx is NULL");
  if (bytes == 0) return LAM_OK;
  LAM_CHECK_ARG(dst && src_host, "lam_mem_upload: %s is NULL", dst ? "src_host" : "dst");
  return ctx->be->mem->upload(ctx, dst, src_host, bytes);
}

lam_status lam_mem_download(lam_ctx *ctx, void *dst_host, const void *src, size_t bytes) {
  LAM_CHECK_ARG(ctx, "lam_mem_download: ctx is NULL");
  if (bytes == 0) return LAM_OK;
  LAM_CHECK_ARG(dst_host && src, "lam_mem_download: %s is NULL", dst_host ? "src" : "dst_host");
  return ctx->be->mem->download(ctx, dst_host, src, bytes);
}

lam_status lam_host_alloc(lam_ctx *ctx, void **ptr, size_t bytes) {
  LAM_CHECK_ARG(ctx && ptr, "lam_host_alloc: %s is NULL", ctx ? "ptr" : "ctx");
  *ptr = NULL;
  return ctx->be->mem->host_alloc(ctx, ptr, bytes ? bytes : 1);
}

lam_status lam_host_free(lam_ctx *ctx, void *ptr) {
  LAM_CHECK_ARG(ctx, "lam_host_free: ctx is NULL");
  if (!ptr) return LAM_OK;
  return ctx->be->mem->host_free(ctx, ptr);
}

lam_status lam_precision_parse(const char *s, lam_precision *out) {
  LAM_CHECK_ARG(s && out, "lam_precision_parse: NULL argument");
  if (!strcmp(s, "fp32")) *out = LAM_PRECISION_FP32;
  else if (!strcmp(s, "tf32")) *out = LAM_PRECISION_TF32;
  else if (!strcmp(s, "bf16")) *out = LAM_PRECISION_BF16;
  else if (!strcmp(s, "fp16")) *out = LAM_PRECISION_FP16;
  else return LAM_FAIL(LAM_ERR_INVALID_ARG, "unknown precision '%s': expected fp32, tf32, bf16 or fp16", s);
  return LAM_OK;
}

const char *lam_precision_str(lam_precision p) {
  return p == LAM_PRECISION_FP32   ? "fp32"
         : p == LAM_PRECISION_TF32 ? "tf32"
         : p == LAM_PRECISION_BF16 ? "bf16"
         : p == LAM_PRECISION_FP16 ? "fp16"
                                   : "?";
}

lam_status lam_ctx_set_precision(lam_ctx *ctx, lam_precision p) {
  LAM_CHECK_ARG(ctx, "lam_ctx_set_precision: ctx is NULL");
  LAM_CHECK_ARG(p == LAM_PRECISION_FP32 || p == LAM_PRECISION_TF32 || p == LAM_PRECISION_BF16 || p == LAM_PRECISION_FP16,
                "lam_ctx_set_precision: precision %d is not known", (int)p);
  if (p != LAM_PRECISION_FP32 && !ctx->be->prim->set_precision)
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "lam_ctx_set_precision: %s needs tensor cores; the %s backend computes in fp32",
                    lam_precision_str(p), ctx->be->name);
  if (ctx->be->prim->set_precision) LAM_TRY(ctx->be->prim->set_precision(ctx, (int)p));
  ctx->precision = p;
  return LAM_OK;
}

const char *lam_prim_name(int prim) {
#define LAM_PRIM_NAME(name, params) #name,
  static const char *const names[] = {LAM_NN_PRIMS(LAM_PRIM_NAME)};
#undef LAM_PRIM_NAME
  return prim >= 0 && prim < LAM_PRIM_COUNT ? names[prim] : "an unknown primitive";
}
