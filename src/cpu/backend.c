/* backend.c — the CPU backend's tables (internal.h): its memory is host memory, its copies are (parallel) memcpy,
 * it supports every primitive in every format, it has no collective, and its ops are in the other files of this
 * folder. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

#define CPU_ALIGN 256

static lam_status cpu_raw_alloc(lam_ctx *ctx, void **p, size_t bytes) {
  (void)ctx;
  if (bytes > SIZE_MAX - CPU_ALIGN) /* the round-up below would wrap to a tiny block */
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes of host memory", bytes);
  size_t rounded = (bytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
  *p = aligned_alloc(CPU_ALIGN, rounded);
  if (!*p) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "aligned_alloc(%d, %zu) failed: out of host memory", CPU_ALIGN, rounded);
  return LAM_OK;
}
static void cpu_raw_free(lam_ctx *ctx, void *p) {
  (void)ctx;
  free(p);
}
static lam_status cpu_copy(lam_ctx *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  lam_copy_job job = {dst, src, bytes};
  lam_parallel_copy(&job, 1);
  return LAM_OK;
}
static lam_status cpu_host_free(lam_ctx *ctx, void *p) {
  cpu_raw_free(ctx, p);
  return LAM_OK;
}
static lam_status cpu_sync(lam_ctx *ctx) {
  (void)ctx;
  return LAM_OK;
}
/* The CPU's "events": the host clock when each was recorded (its work is done by then). */
typedef struct cpu_state {
  double *events;
  size_t events_cap;
} cpu_state;

static lam_status cpu_copy_async(lam_ctx *ctx, int queue, void *dst, const void *src, size_t bytes) {
  (void)queue;
  return cpu_copy(ctx, dst, src, bytes);
}
static lam_status cpu_event_reserve(lam_ctx *ctx, size_t n) {
  cpu_state *st = ctx->state;
  if (st->events_cap >= n) return LAM_OK;
  double *e = realloc(st->events, n * sizeof *e);
  if (!e) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for %zu events", n);
  for (size_t i = st->events_cap; i < n; i++) e[i] = 0;
  st->events = e;
  st->events_cap = n;
  return LAM_OK;
}
static lam_status cpu_event_record(lam_ctx *ctx, size_t ev, int queue) {
  cpu_state *st = ctx->state;
  (void)queue;
  LAM_CHECK_ARG(ev < st->events_cap, "event %zu beyond the %zu reserved", ev, st->events_cap);
  st->events[ev] = lam_now_ms();
  return LAM_OK;
}
static lam_status cpu_queue_wait(lam_ctx *ctx, int queue, size_t ev) {
  cpu_state *st = ctx->state;
  (void)queue;
  LAM_CHECK_ARG(ev < st->events_cap, "event %zu beyond the %zu reserved", ev, st->events_cap);
  return LAM_OK;
}
static lam_status cpu_event_sync(lam_ctx *ctx, size_t ev) { return cpu_queue_wait(ctx, 0, ev); }
static lam_status cpu_event_ms(lam_ctx *ctx, size_t a, size_t b, double *ms) {
  cpu_state *st = ctx->state;
  LAM_CHECK_ARG(a < st->events_cap && b < st->events_cap, "event %zu or %zu beyond the %zu reserved", a, b,
                st->events_cap);
  *ms = st->events[b] - st->events[a];
  return LAM_OK;
}

static void cpu_destroy(lam_ctx *ctx) {
  cpu_state *st = ctx->state;
  if (!st) return;
  free(st->events);
  free(st);
  ctx->state = NULL;
}

/* Every primitive in every format: the twins of the other formats convert to NCHW float32 and back (layout.c). */
static int cpu_supports(int prim, lam_fmt f, const char **why) {
  (void)prim, (void)f, (void)why;
  return 1;
}

static const lam_mem_ops cpu_mem = {
    .raw_alloc = cpu_raw_alloc,
    .raw_free = cpu_raw_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .host_alloc = cpu_raw_alloc,
    .host_free = cpu_host_free,
    .host_memory = NULL,
};
static const lam_queue_ops cpu_queue = {
    .sync = cpu_sync,
    .copy_async = cpu_copy_async,
    .event_reserve = cpu_event_reserve,
    .event_record = cpu_event_record,
    .queue_wait = cpu_queue_wait,
    .event_sync = cpu_event_sync,
    .event_ms = cpu_event_ms,
    /* no graphs; the profiler reads the host clock */
};
static const lam_prim_ops cpu_prim = {
    .set_precision = cpu_set_precision,
    .supports = cpu_supports,
#define LAM_CPU_ENTRY(name, params) .name = cpu_##name,
    LAM_NN_PRIMS(LAM_CPU_ENTRY)
#undef LAM_CPU_ENTRY
};
static const lam_hidden_ops cpu_hidden_ops = {
    .run = cpu_hidden,
    .staging_floor = NULL,
    .normalize = cpu_normalize,
    .weigh = cpu_weigh,
    .tanh_ = cpu_tanh,
};

const lam_backend lam_cpu_backend = {
    .name = "cpu",
    .direct_first_conv = 0, /* its twin is the oracle of the CUDA one (test_fused, LAMINA_FUSE=2) */
    .nhwc_convs = 0,
    .conv_stats_one_pass = NULL, /* the conv, then bn_sums's pass */
    .mem = &cpu_mem,
    .queue = &cpu_queue,
    .prim = &cpu_prim,
    .comm = NULL, /* CPU ranks sum through the caller's lam_collective */
    .hidden = &cpu_hidden_ops,
    .destroy = cpu_destroy,
};

void lam_cpu_name(lam_ctx *ctx) {
  snprintf(ctx->name, sizeof ctx->name, "cpu (%d thread%s: %s)", ctx->threads, ctx->threads == 1 ? "" : "s",
           ctx->threads_why);
}

lam_status cpu_ctx_init(lam_ctx *ctx) {
  ctx->state = calloc(1, sizeof(cpu_state));
  if (!ctx->state) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for the CPU backend state");
  ctx->be = &lam_cpu_backend;
  lam_cpu_name(ctx);
  return LAM_OK;
}
