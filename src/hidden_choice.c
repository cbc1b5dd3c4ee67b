/* hidden_choice.c — where lam_hidden runs on a context made for LAM_DEVICE_AUTO that has a GPU.
 *
 * The hidden layer is memory-bound. When its arrays are in host memory, the host threads read each input
 * byte and write each output byte once, while the GPU's path moves every byte through pinned staging
 * (a host copy each way) and over PCIe: on the H200 machine, 100M values took 15.5 ms on 16 host threads
 * against 29.5 ms through the GPU (2026-12-03). A host with few cores, or a slow tanh, turns that around,
 * so the choice is measured, not assumed: each side's cost is fixed + per-GB, fitted from two sizes run on
 * both sides at the first call that has a choice (lam_hidden_calibrate), then corrected by the calls that
 * run. Device arrays always stay on the GPU: moving them would cost more than the op. */
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "internal.h"

#define CAL_BIG ((size_t)1 << 24)   /* 16 Mi values: 192 MB of arrays, past any cache */
#define CAL_SMALL ((size_t)1 << 18) /* 256 Ki: the fixed costs show */
#define CAL_REPS 3                  /* the best of these (the first of a side pays its one-time set-up) */
#define UPDATE_MIN_BYTES ((size_t)64 << 20) /* calls this big correct the model (smaller ones are noise) */
#define UPDATE_WEIGHT 0.3                    /* of the newest call against the estimate so far */

static size_t call_bytes(size_t n, lam_dtype gt) { return n * (lam_dtype_size(gt) + 2 * sizeof(float)); }

static double estimate(double fixed, double per_gb, size_t bytes) { return fixed + per_gb * (double)bytes / 1e9; }

typedef struct cal_arrays {
  float *g, *w, *out;
} cal_arrays;

/* Greys 0..255 and weights around 0.5 from a hash of the index: no zeros, nothing the kernel could skip.
 * On the calling thread alone, not the pool: calibration may run beside the caller's own calls (Python
 * calibrates on a background thread while its first calls run on the host threads), and the pool runs one
 * job at a time. */
static void cal_fill(cal_arrays *a, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t h = (uint32_t)i * 2654435761u;
    a->g[i] = (float)(h >> 24);
    a->w[i] = 0.25f + (float)((h >> 8) & 1023) / 2048.0f;
    a->out[i] = 1.0f;
  }
}

/* The best wall time of CAL_REPS calls on n values, on the host threads (cpu) or the context's GPU. */
static lam_status best_ms(lam_ctx *ctx, int cpu, size_t n, const cal_arrays *a, double *ms) {
  *ms = 0;
  for (int r = 0; r < CAL_REPS; r++) {
    double t0 = lam_now_ms();
    LAM_TRY((cpu ? &lam_cpu_backend : ctx->be)->hidden->run(ctx, n, a->g, LAM_DTYPE_F32, a->w, a->out, NULL));
    double t = lam_now_ms() - t0;
    if (r == 0 || t < *ms) *ms = t;
  }
  return LAM_OK;
}

/* fixed and per-GB through the two points (small, big). */
static void fit(double t_small, double t_big, size_t b_small, size_t b_big, double *fixed, double *per_gb) {
  *per_gb = (t_big - t_small) / ((double)(b_big - b_small) / 1e9);
  if (*per_gb < 0) *per_gb = 0;
  *fixed = t_small - *per_gb * (double)b_small / 1e9;
  if (*fixed < 0) *fixed = 0;
}

lam_status lam_hidden_calibrate(lam_ctx *ctx) {
  LAM_CHECK_ARG(ctx, "lam_hidden_calibrate: ctx is NULL");
  if (ctx->device != LAM_DEVICE_CUDA || !ctx->be->mem->host_memory)
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "lam_hidden_calibrate: a %s context has one place to run the hidden layer, "
                    "nothing to choose", lam_device_str(ctx->device));
  if (ctx->hidden.fixed) return LAM_OK;
  size_t n = CAL_BIG;
  cal_arrays a = {0};
  for (; n >= CAL_SMALL * 4; n /= 4) { /* pageable, as the arrays of the calls it models */
    a.g = malloc(n * sizeof(float)), a.w = malloc(n * sizeof(float)), a.out = malloc(n * sizeof(float));
    if (a.g && a.w && a.out) break;
    free(a.g), free(a.w), free(a.out);
    a = (cal_arrays){0};
  }
  if (!a.g)
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_hidden_calibrate: no host memory for its arrays (%zu MB)",
                    3 * CAL_SMALL * 4 * sizeof(float) >> 20);
  cal_fill(&a, n);
  double gs = 0, gb = 0, cs = 0, cb = 0;
  lam_status s = ctx->be->queue->sync(ctx);
  if (s == LAM_OK) s = best_ms(ctx, 0, CAL_SMALL, &a, &gs);
  if (s == LAM_OK) s = best_ms(ctx, 0, n, &a, &gb);
  if (s == LAM_OK) s = best_ms(ctx, 1, CAL_SMALL, &a, &cs);
  if (s == LAM_OK) s = best_ms(ctx, 1, n, &a, &cb);
  free(a.g), free(a.w), free(a.out);
  if (s != LAM_OK) return s;
  lam_hidden_costs *c = &ctx->hidden.c;
  size_t bs = call_bytes(CAL_SMALL, LAM_DTYPE_F32), bb = call_bytes(n, LAM_DTYPE_F32);
  fit(cs, cb, bs, bb, &c->cpu_ms, &c->cpu_ms_per_gb);
  fit(gs, gb, bs, bb, &c->cuda_ms, &c->cuda_ms_per_gb);
  c->calibrated = 1;
  return LAM_OK;
}

lam_status lam_hidden_costs_get(const lam_ctx *ctx, lam_hidden_costs *costs) {
  LAM_CHECK_ARG(ctx && costs, "lam_hidden_costs_get: %s is NULL", ctx ? "costs" : "ctx");
  *costs = ctx->hidden.c;
  return LAM_OK;
}

lam_status lam_hidden_costs_set(lam_ctx *ctx, const lam_hidden_costs *costs) {
  LAM_CHECK_ARG(ctx && costs, "lam_hidden_costs_set: %s is NULL", ctx ? "costs" : "ctx");
  const double v[4] = {costs->cpu_ms, costs->cpu_ms_per_gb, costs->cuda_ms, costs->cuda_ms_per_gb};
  for (int i = 0; i < 4; i++)
    LAM_CHECK_ARG(v[i] >= 0 && v[i] < 1e12, "lam_hidden_costs_set: cost %d is %g; costs are milliseconds >= 0", i, v[i]);
  ctx->hidden.c = *costs;
  ctx->hidden.c.calibrated = 1;
  ctx->hidden.fixed = 1;
  return LAM_OK;
}

const char *lam_hidden_choice(const lam_ctx *ctx) { return ctx ? ctx->hidden_choice : ""; }

/* The newest call's cost, folded into its side's per-GB estimate. */
static void correct(double fixed, double *per_gb, size_t bytes, double ms) {
  double seen = (ms - fixed) / ((double)bytes / 1e9);
  if (seen > 0) *per_gb = (1 - UPDATE_WEIGHT) * *per_gb + UPDATE_WEIGHT * seen;
}

lam_status lam_hidden_auto(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                           lam_hidden_timing *timing) {
  lam_hidden_timing local;
  lam_hidden_timing *t = timing ? timing : &local;
  int host = ctx->be->mem->host_memory(ctx, grey) && ctx->be->mem->host_memory(ctx, w) && ctx->be->mem->host_memory(ctx, out);
  if (!host) {
    snprintf(ctx->hidden_choice, sizeof ctx->hidden_choice, "cuda (auto: an array is in device memory)");
    LAM_TRY(ctx->be->hidden->run(ctx, n, grey, gt, w, out, timing));
    if (timing) timing->device = LAM_DEVICE_CUDA;
    return LAM_OK;
  }
  lam_hidden_model *m = &ctx->hidden;
  if (!m->c.calibrated) LAM_TRY(lam_hidden_calibrate(ctx));
  size_t bytes = call_bytes(n, gt);
  double cpu = estimate(m->c.cpu_ms, m->c.cpu_ms_per_gb, bytes), gpu = estimate(m->c.cuda_ms, m->c.cuda_ms_per_gb, bytes);
  int on_cpu = cpu <= gpu;
  double t0 = lam_now_ms();
  if (on_cpu) {
    LAM_TRY(ctx->be->queue->sync(ctx)); /* work queued before the call comes first, as on the GPU's path */
    LAM_TRY(lam_cpu_backend.hidden->run(ctx, n, grey, gt, w, out, t));
  } else {
    LAM_TRY(ctx->be->hidden->run(ctx, n, grey, gt, w, out, t));
  }
  t->total = lam_now_ms() - t0;
  t->device = on_cpu ? LAM_DEVICE_CPU : LAM_DEVICE_CUDA;
  snprintf(ctx->hidden_choice, sizeof ctx->hidden_choice,
           "%s (auto: host arrays; expected %.3g ms on the %d host threads, %.3g ms through the GPU)",
           on_cpu ? "cpu" : "cuda", cpu, ctx->threads, gpu);
  if (!m->fixed && bytes >= UPDATE_MIN_BYTES) {
    if (on_cpu) correct(m->c.cpu_ms, &m->c.cpu_ms_per_gb, bytes, t->total);
    else correct(m->c.cuda_ms, &m->c.cuda_ms_per_gb, bytes, t->total);
  }
  return LAM_OK;
}
