/* transfer.c — lam_bench_transfer: how long it takes to get a batch of images from host memory into
 * device memory, ready for a model, three ways: copy it as it is (in some dtype), normalize it on the
 * host and copy the floats, or copy the uint8 pixels and normalize on the device. Timed with the
 * backend's events (CUDA events on the GPU) over many repetitions; the last result is checked. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../cpu/cpu.h"
#include "../math/half.h"
#include "../internal.h"
#include "../nn/rng.h"

/* Uploads of at least this many bytes go in chunks on the copy queue, each normalized on the compute
 * queue as soon as it lands, so the device's normalize hides behind the next chunk's copy. */
#define CHUNKED_BYTES ((size_t)4 << 20)
#define CHUNKS 4
#define EV_START 0
#define EV_STOP 1
#define EV_CHUNK 2 /* EV_CHUNK + j: chunk j has landed */

typedef struct bench {
  lam_ctx *ctx;
  const lam_xfer_case *c;
  size_t elems, image;    /* values in the batch, per image */
  float mean[LAM_NORMALIZE_MAX_CHANNELS], std[LAM_NORMALIZE_MAX_CHANNELS];
  uint8_t *raw;           /* the batch as a decoder leaves it: uint8, pageable */
  void *host;             /* what crosses the bus (COPY: the dtype's values; CPU_NORMALIZE: floats; GPU: uint8) */
  int host_pinned;
  void *dev_in, *dev_out; /* device copies: what arrives, and (GPU_NORMALIZE) the normalized batch */
  size_t host_bytes, out_bytes;
} bench;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static lam_status host_buffer(bench *b, size_t bytes) {
  b->host_pinned = b->c->pinned;
  if (b->host_pinned) return b->ctx->be->mem->host_alloc(b->ctx, &b->host, bytes);
  b->host = malloc(bytes);
  if (!b->host) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_bench_transfer: no host memory for %zu bytes", bytes);
  memset(b->host, 0, bytes); /* touch every page now, not inside the first timed copy */
  return LAM_OK;
}

static void bench_free(bench *b) {
  free(b->raw);
  if (b->host && b->host_pinned) b->ctx->be->mem->host_free(b->ctx, b->host);
  else free(b->host);
  lam_mem_free(b->ctx, b->dev_in);
  lam_mem_free(b->ctx, b->dev_out);
}

/* Fills the host side for the case: random pixels, and what COPY moves made from them. */
static lam_status bench_setup(bench *b) {
  const lam_xfer_case *c = b->c;
  lam_ctx *ctx = b->ctx;
  b->raw = malloc(b->elems);
  if (!b->raw) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_bench_transfer: no host memory for %zu pixels", b->elems);
  lam_rng r;
  lam_rng_seed(&r, 0x7a11c0de ^ b->elems);
  for (size_t i = 0; i < b->elems; i += 8) { /* eight pixels per draw */
    uint64_t v = lam_rng_next(&r);
    for (size_t k = 0; k < 8 && i + k < b->elems; k++) b->raw[i + k] = (uint8_t)(v >> (8 * k));
  }
  size_t esz = lam_dtype_size(c->dtype);
  switch (c->method) {
  case LAM_XFER_COPY:
    b->host_bytes = b->out_bytes = b->elems * esz;
    LAM_TRY(host_buffer(b, b->host_bytes));
    for (size_t i = 0; i < b->elems; i++) {
      float x = (b->raw[i] / 255.0f - 0.5f) / 0.5f;
      switch (c->dtype) {
      case LAM_DTYPE_U8: ((uint8_t *)b->host)[i] = b->raw[i]; break;
      case LAM_DTYPE_I8: ((int8_t *)b->host)[i] = (int8_t)(b->raw[i] - 128); break;
      case LAM_DTYPE_F16: ((uint16_t *)b->host)[i] = lam_f32_to_f16(x); break;
      case LAM_DTYPE_BF16: ((uint16_t *)b->host)[i] = lam_f32_to_bf16(x); break;
      case LAM_DTYPE_F32: ((float *)b->host)[i] = x; break;
      }
    }
    return lam_mem_alloc(ctx, &b->dev_in, b->host_bytes);
  case LAM_XFER_CPU_NORMALIZE:
    b->host_bytes = b->out_bytes = b->elems * sizeof(float);
    LAM_TRY(host_buffer(b, b->host_bytes));
    return lam_mem_alloc(ctx, &b->dev_in, b->host_bytes);
  case LAM_XFER_GPU_NORMALIZE:
    b->host_bytes = b->elems;
    b->out_bytes = b->elems * esz;
    LAM_TRY(host_buffer(b, b->host_bytes));
    memcpy(b->host, b->raw, b->elems);
    LAM_TRY(lam_mem_alloc(ctx, &b->dev_in, b->host_bytes));
    return lam_mem_alloc(ctx, &b->dev_out, b->out_bytes);
  }
  return LAM_FAIL(LAM_ERR_INVALID_ARG, "lam_bench_transfer: method %d is not known", (int)c->method);
}

/* One repetition, between the start and stop events on queue 0. */
static lam_status bench_once(bench *b) {
  const lam_xfer_case *c = b->c;
  lam_ctx *ctx = b->ctx;
  const lam_backend *be = ctx->be;
  int nhwc = c->layout == LAM_LAYOUT_NHWC;
  LAM_TRY(be->queue->event_record(ctx, EV_START, 0));
  switch (c->method) {
  case LAM_XFER_COPY:
    LAM_TRY(be->queue->copy_async(ctx, 0, b->dev_in, b->host, b->host_bytes));
    break;
  case LAM_XFER_CPU_NORMALIZE: /* the host's threads normalize, then the floats cross */
    LAM_TRY(cpu_normalize_images(ctx, c->n, c->c, c->h, c->w, nhwc, b->raw, b->mean, b->std, 0, b->host));
    LAM_TRY(be->queue->copy_async(ctx, 0, b->dev_in, b->host, b->host_bytes));
    break;
  case LAM_XFER_GPU_NORMALIZE: {
    int chunks = b->host_bytes >= CHUNKED_BYTES && c->n >= CHUNKS ? CHUNKS : 1;
    size_t per = (c->n + chunks - 1) / chunks;
    size_t osz = lam_dtype_size(c->dtype);
    LAM_TRY(be->queue->queue_wait(ctx, 1, EV_START)); /* the copies start no earlier than the clock */
    for (int j = 0; j < chunks; j++) {
      size_t first = (size_t)j * per, count = c->n - first < per ? c->n - first : per;
      if (count == 0) break;
      const uint8_t *src = (const uint8_t *)b->host + first * b->image;
      uint8_t *din = (uint8_t *)b->dev_in + first * b->image;
      LAM_TRY(be->queue->copy_async(ctx, 1, din, src, count * b->image));
      LAM_TRY(be->queue->event_record(ctx, EV_CHUNK + (size_t)j, 1));
      LAM_TRY(be->queue->queue_wait(ctx, 0, EV_CHUNK + (size_t)j));
      LAM_TRY(be->prim->normalize_images(ctx, count, c->c, c->h, c->w, nhwc, din, b->mean, b->std,
                                   c->dtype == LAM_DTYPE_BF16, (char *)b->dev_out + first * b->image * osz));
    }
    break;
  }
  }
  LAM_TRY(be->queue->event_record(ctx, EV_STOP, 0));
  return be->queue->event_sync(ctx, EV_STOP);
}

/* Every value the last repetition left on the device, against the host's own. */
static lam_status bench_check(bench *b) {
  const lam_xfer_case *c = b->c;
  lam_status s = LAM_OK;
  void *got = malloc(b->out_bytes);
  float *ref = c->method == LAM_XFER_COPY ? NULL : malloc(b->elems * sizeof(float));
  if (!got || (c->method != LAM_XFER_COPY && !ref)) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_bench_transfer: no host memory to check the result");
  if (s == LAM_OK) s = lam_mem_download(b->ctx, got, c->method == LAM_XFER_GPU_NORMALIZE ? b->dev_out : b->dev_in, b->out_bytes);
  if (s == LAM_OK && c->method == LAM_XFER_COPY) {
    if (memcmp(got, b->host, b->out_bytes) != 0)
      s = LAM_FAIL(LAM_ERR_CUDA, "lam_bench_transfer: the copied batch differs from the host's (%zu bytes)", b->out_bytes);
  } else if (s == LAM_OK) {
    s = cpu_normalize_images(b->ctx, c->n, c->c, c->h, c->w, c->layout == LAM_LAYOUT_NHWC, b->raw, b->mean, b->std, 0, ref);
    int bf = c->method == LAM_XFER_GPU_NORMALIZE && c->dtype == LAM_DTYPE_BF16;
    for (size_t i = 0; s == LAM_OK && i < b->elems; i++) {
      float v = bf ? lam_bf16_to_f32(((uint16_t *)got)[i]) : ((float *)got)[i];
      /* fp32: one rounding apart (the device fuses the multiply-add); bf16: one of its 8-bit ulps */
      float tol = bf ? fabsf(ref[i]) * 0x1p-8f + 1e-6f : fabsf(ref[i]) * 1e-6f + 1e-6f;
      if (!(fabsf(v - ref[i]) <= tol))
        s = LAM_FAIL(LAM_ERR_CUDA, "lam_bench_transfer: value %zu of the normalized batch is %.9g, expected %.9g", i,
                     (double)v, (double)ref[i]);
    }
  }
  free(got);
  free(ref);
  return s;
}

lam_status lam_bench_transfer(lam_ctx *ctx, const lam_xfer_case *c, lam_xfer_result *r) {
  LAM_CHECK_ARG(ctx && c && r, "lam_bench_transfer: %s is NULL", !ctx ? "ctx" : !c ? "case" : "result");
  LAM_CHECK_ARG(c->n >= 1 && c->c >= 1 && c->c <= LAM_NORMALIZE_MAX_CHANNELS && c->h >= 1 && c->w >= 1,
                "lam_bench_transfer: batch %zu x %d x %d x %d is not valid (n, h, w >= 1; 1 <= c <= %d)", c->n, c->c,
                c->h, c->w, LAM_NORMALIZE_MAX_CHANNELS);
  size_t image = (size_t)c->c * c->h * c->w;
  LAM_CHECK_ARG(c->n <= ((size_t)1 << 36) / image, "lam_bench_transfer: %zu images of %zu values is more than 2^36 values",
                c->n, image);
  LAM_CHECK_ARG(c->layout == LAM_LAYOUT_NCHW || c->layout == LAM_LAYOUT_NHWC, "lam_bench_transfer: layout %d is not known",
                (int)c->layout);
  LAM_CHECK_ARG(c->method != LAM_XFER_COPY || lam_dtype_size(c->dtype) > 0, "lam_bench_transfer: dtype %d is not known",
                (int)c->dtype);
  LAM_CHECK_ARG(c->method != LAM_XFER_CPU_NORMALIZE || c->dtype == LAM_DTYPE_F32,
                "lam_bench_transfer: normalizing on the host writes f32, not %s", lam_dtype_str(c->dtype));
  LAM_CHECK_ARG(c->method != LAM_XFER_GPU_NORMALIZE || c->dtype == LAM_DTYPE_F32 || c->dtype == LAM_DTYPE_BF16,
                "lam_bench_transfer: normalizing on the device writes f32 or bf16, not %s", lam_dtype_str(c->dtype));
  LAM_CHECK_ARG((unsigned)c->method <= LAM_XFER_GPU_NORMALIZE, "lam_bench_transfer: method %d is not known", (int)c->method);
  LAM_CHECK_ARG(c->reps >= 1 && c->warmup >= 0, "lam_bench_transfer: reps %d / warmup %d (reps >= 1, warmup >= 0)",
                c->reps, c->warmup);
  *r = (lam_xfer_result){.copies_on_host = ctx->device == LAM_DEVICE_CPU};
  bench b = {.ctx = ctx, .c = c, .elems = c->n * image, .image = image};
  for (int i = 0; i < c->c; i++) { /* ImageNet's statistics for RGB; 0.5 / 0.5 (as the trainer) otherwise */
    static const float im_mean[3] = {0.485f, 0.456f, 0.406f}, im_std[3] = {0.229f, 0.224f, 0.225f};
    b.mean[i] = c->c == 3 ? im_mean[i] : 0.5f;
    b.std[i] = c->c == 3 ? im_std[i] : 0.5f;
  }
  double *ev = malloc((size_t)c->reps * sizeof *ev), *wall = malloc((size_t)c->reps * sizeof *wall);
  lam_status s = ev && wall ? LAM_OK : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_bench_transfer: no host memory");
  if (s == LAM_OK) s = ctx->be->queue->event_reserve(ctx, EV_CHUNK + CHUNKS);
  if (s == LAM_OK) s = bench_setup(&b);
  for (int i = 0; i < c->warmup && s == LAM_OK; i++) s = bench_once(&b);
  double spent = 0;
  int done = 0;
  for (; done < c->reps && s == LAM_OK; done++) {
    if (c->max_ms > 0 && spent > c->max_ms && done >= 10) break;
    double t0 = lam_now_ms();
    s = bench_once(&b);
    wall[done] = (lam_now_ms() - t0) * 1e3;
    spent += wall[done] / 1e3;
    if (s == LAM_OK) s = ctx->be->queue->event_ms(ctx, EV_START, EV_STOP, &ev[done]);
    ev[done] *= 1e3;
  }
  if (s == LAM_OK) s = bench_check(&b);
  if (s == LAM_OK) {
    qsort(ev, (size_t)done, sizeof *ev, cmp_double);
    qsort(wall, (size_t)done, sizeof *wall, cmp_double);
    r->reps = done;
    r->median_us = ev[done / 2];
    r->p10_us = ev[done / 10];
    r->p90_us = ev[done - 1 - done / 10];
    r->wall_median_us = wall[done / 2];
    r->bytes_host = b.host_bytes;
    r->bytes_device = b.out_bytes;
  }
  bench_free(&b);
  free(ev);
  free(wall);
  return s;
}
