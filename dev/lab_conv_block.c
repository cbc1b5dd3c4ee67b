/* lab_conv_block.c — the kernel lab for the CNN's hot block, conv -> relu -> maxpool(2), forward and
 * backward, at a given batch: numbered versions, each checked against the CPU backend's plain ops and
 * timed with the backend's events, printed with the achieved GB/s (of the block's minimum traffic) and
 * TFLOP/s against the H200's ceilings.
 *
 *   v1  plain ops:           im2col, GEMM, transpose + bias, relu, maxpool  /  maxpool_bwd, relu_bwd,
 *                            transpose + bias sum, GEMM dW (+ GEMM dcol, col2im for dx)
 *   v2  fused after the GEMM: im2col, GEMM, conv_pool_fwd  /  conv_pool_bwd, GEMM dW (+ dx as v1)
 *   v3  direct (first layer): conv_pool_direct_fwd  /  conv_pool_direct_bwd (no dx)
 *
 *   lab_conv_block [batch] [reps]      (build: cmake --build build --target lab_conv_block)
 * Notes of what each version changed and bought: dev/README.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/cpu/cpu.h"
#include "../src/internal.h"

#define PEAK_GBS 4140.0 /* device copy, read + write (../shared/peers/README.md, measured) */
#define PEAK_TFLOPS 67.0 /* H200 SXM dense fp32 (datasheet) */

typedef struct block {
  const char *name;
  int C, H, W, OC, K, need_dx; /* input (C, H, W); conv K x K stride 1 pad 0; pool 2 */
} block;

typedef struct bufs { /* one backend's */
  float *x, *W, *b, *col, *G, *conv, *act, *y, *dy, *dact, *dconv, *dG, *dW, *db, *dcol, *dx, *work;
  int32_t *arg;
} bufs;

static lam_conv_geom cgeom(const block *k) { return (lam_conv_geom){k->C, k->H, k->W, k->K, 1, 0, k->H - k->K + 1, k->W - k->K + 1}; }
static lam_pool_geom pgeom(const block *k) {
  int OH = k->H - k->K + 1, OW = k->W - k->K + 1;
  return (lam_pool_geom){k->OC, OH, OW, 2, 2, OH / 2, OW / 2};
}

#define T(expr)                                                                     \
  do {                                                                              \
    if ((expr) != LAM_OK) {                                                         \
      fprintf(stderr, "lab: %s failed: %s\n", #expr, lam_last_error());             \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

static void *dalloc(lam_ctx *ctx, size_t bytes) {
  void *p;
  T(lam_mem_alloc(ctx, &p, bytes));
  return p;
}

static void make(lam_ctx *ctx, const block *k, int B, bufs *u) {
  lam_conv_geom g = cgeom(k);
  size_t P = (size_t)g.OH * g.OW, taps = (size_t)k->C * k->K * k->K, BP = (size_t)B * P;
  lam_pool_geom pg = pgeom(k);
  size_t pooled = (size_t)B * k->OC * pg.OH * pg.OW, in = (size_t)B * k->C * k->H * k->W;
  u->x = dalloc(ctx, in * 4), u->W = dalloc(ctx, k->OC * taps * 4), u->b = dalloc(ctx, k->OC * 4);
  u->col = dalloc(ctx, taps * BP * 4), u->G = dalloc(ctx, k->OC * BP * 4), u->conv = dalloc(ctx, k->OC * BP * 4);
  u->act = dalloc(ctx, k->OC * BP * 4), u->y = dalloc(ctx, pooled * 4), u->arg = dalloc(ctx, pooled * 4);
  u->dy = dalloc(ctx, pooled * 4), u->dact = dalloc(ctx, k->OC * BP * 4), u->dconv = dalloc(ctx, k->OC * BP * 4);
  u->dG = dalloc(ctx, k->OC * BP * 4), u->dW = dalloc(ctx, k->OC * taps * 4), u->db = dalloc(ctx, k->OC * 4);
  u->dcol = dalloc(ctx, taps * BP * 4), u->dx = dalloc(ctx, in * 4);
  u->work = dalloc(ctx, lam_direct_work_floats(k->OC, (int)taps, (size_t)B * pg.OH * pg.OW) * 4 + 256);
}

/* Fresh inputs (the same on both backends): x, W, b uniform, dy uniform. */
static void fill(lam_ctx *ctx, const block *k, int B, bufs *u, unsigned seed) {
  lam_pool_geom pg = pgeom(k);
  size_t in = (size_t)B * k->C * k->H * k->W, taps = (size_t)k->C * k->K * k->K;
  size_t pooled = (size_t)B * k->OC * pg.OH * pg.OW, n = in > pooled ? in : pooled;
  float *h = malloc(n * 4);
  srand(seed);
#define RAND(ptr, count, lo, hi)                                                      \
  do {                                                                                \
    for (size_t i_ = 0; i_ < (count); i_++) h[i_] = (float)((lo) + ((hi) - (lo)) * (rand() / (double)RAND_MAX)); \
    T(lam_mem_upload(ctx, ptr, h, (count) * 4));                                      \
  } while (0)
  RAND(u->x, in, -1, 1);
  RAND(u->W, k->OC * taps, -0.3, 0.3);
  RAND(u->b, (size_t)k->OC, -0.1, 0.1);
  RAND(u->dy, pooled, -1, 1);
  free(h);
}

static void fwd(lam_ctx *ctx, const block *k, int B, bufs *u, int v) {
  const lam_backend *be = ctx->be;
  lam_conv_geom g = cgeom(k);
  lam_pool_geom pg = pgeom(k);
  int P = g.OH * g.OW, taps = k->C * k->K * k->K, BP = B * P;
  if (v == 3) {
    T(be->prim->conv_pool_direct_fwd(ctx, &g, &pg, B, u->x, u->W, u->b, u->y, u->arg));
    return;
  }
  T(be->prim->im2col(ctx, &g, B, u->x, u->col, 0));
  T(be->prim->gemm(ctx, 0, 0, k->OC, BP, taps, 1.0f, u->W, taps, u->col, BP, 0.0f, u->G, BP));
  if (v == 2) {
    T(be->prim->conv_pool_fwd(ctx, &pg, B, u->G, u->b, u->y, u->arg));
    return;
  }
  T(be->prim->cbp_to_bcp(ctx, B, k->OC, P, u->G, u->b, u->conv));
  T(be->prim->act_fwd(ctx, lam_fmt_of(LAM_DT_F32, 0), LAM_ACT_RELU, 0.0f, (size_t)k->OC * BP, u->conv, u->act));
  T(be->prim->maxpool_fwd(ctx, lam_fmt_of(LAM_DT_F32, 0), &pg, B, u->act, u->y, u->arg));
}

static void bwd(lam_ctx *ctx, const block *k, int B, bufs *u, int v) {
  const lam_backend *be = ctx->be;
  lam_conv_geom g = cgeom(k);
  lam_pool_geom pg = pgeom(k);
  int P = g.OH * g.OW, taps = k->C * k->K * k->K, BP = B * P;
  T(be->prim->zero(ctx, u->dW, (size_t)k->OC * taps * 4));
  T(be->prim->zero(ctx, u->db, (size_t)k->OC * 4));
  if (v == 3) {
    T(be->prim->conv_pool_direct_bwd(ctx, &g, &pg, B, u->x, u->dy, u->y, u->arg, u->dW, u->db, u->work));
    return;
  }
  if (v == 2) T(be->prim->conv_pool_bwd(ctx, &pg, B, u->dy, u->y, u->arg, u->dG, 0, u->db));
  else {
    T(be->prim->maxpool_bwd(ctx, lam_fmt_of(LAM_DT_F32, 0), &pg, B, u->dy, u->arg, u->dact));
    T(be->prim->act_bwd(ctx, lam_fmt_of(LAM_DT_F32, 0), LAM_ACT_RELU, 0.0f, (size_t)k->OC * BP, NULL, u->act, u->dact, u->dconv));
    T(be->prim->bcp_to_cbp(ctx, B, k->OC, P, u->dconv, u->dG, u->db));
  }
  T(be->prim->gemm(ctx, 0, 1, k->OC, taps, BP, 1.0f, u->dG, BP, u->col, BP, 1.0f, u->dW, taps));
  if (k->need_dx) {
    T(be->prim->gemm(ctx, 1, 0, taps, BP, k->OC, 1.0f, u->W, taps, u->dG, BP, 0.0f, u->dcol, BP));
    T(be->prim->col2im(ctx, &g, B, u->dcol, 0, 0, u->dx));
  }
}

/* Largest |a - ref| against 1e-4 of ref's scale. */
static int check(const char *what, lam_ctx *dev, const float *dp, lam_ctx *cpu, const float *cp, size_t n) {
  float *a = malloc(n * 4), *r = malloc(n * 4);
  T(lam_mem_download(dev, a, dp, n * 4));
  T(lam_mem_download(cpu, r, cp, n * 4));
  double scale = 0, worst = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(r[i])), worst = fmax(worst, fabs((double)a[i] - r[i]));
  free(a);
  free(r);
  int ok = worst <= 1e-4 * fmax(scale, 1e-3);
  if (!ok) printf("    CHECK FAILED: %s max diff %.3g (scale %.3g)\n", what, worst, scale);
  return ok;
}

static double time_us(lam_ctx *ctx, const block *k, int B, bufs *u, int v, int backward, int reps) {
  const lam_backend *be = ctx->be;
  T(be->queue->event_reserve(ctx, 2));
  for (int i = 0; i < 3; i++) backward ? bwd(ctx, k, B, u, v) : fwd(ctx, k, B, u, v);
  T(be->queue->event_record(ctx, 0, 0));
  for (int i = 0; i < reps; i++) backward ? bwd(ctx, k, B, u, v) : fwd(ctx, k, B, u, v);
  T(be->queue->event_record(ctx, 1, 0));
  T(be->queue->event_sync(ctx, 1));
  double ms;
  T(be->queue->event_ms(ctx, 0, 1, &ms));
  return ms * 1e3 / reps;
}

int main(int argc, char **argv) {
  int B = argc > 1 ? atoi(argv[1]) : 512, reps = argc > 2 ? atoi(argv[2]) : 50;
  lam_ctx *dev, *cpu;
  T(lam_ctx_create(&dev, LAM_DEVICE_AUTO));
  T(lam_ctx_create(&cpu, LAM_DEVICE_CPU));
  printf("lab_conv_block on %s, batch %d, %d reps (events); checked against the CPU's v1\n", lam_ctx_device_name(dev), B,
         reps);
  const block blocks[] = {{"block 1: conv 1->32 3x3 on 28x28, relu, maxpool 2", 1, 28, 28, 32, 3, 0},
                          {"block 2: conv 32->64 3x3 on 13x13, relu, maxpool 2", 32, 13, 13, 64, 3, 1}};
  int bad = 0;
  for (int bi = 0; bi < 2; bi++) {
    const block *k = &blocks[bi];
    lam_conv_geom g = cgeom(k);
    lam_pool_geom pg = pgeom(k);
    size_t taps = (size_t)k->C * k->K * k->K, P = (size_t)g.OH * g.OW, in = (size_t)B * k->C * k->H * k->W;
    size_t pooled = (size_t)B * k->OC * pg.OH * pg.OW;
    double flop_f = 2.0 * B * k->OC * P * taps, flop_b = flop_f * (k->need_dx ? 2 : 1);
    double bytes_f = 4.0 * in + 8.0 * pooled, bytes_b = 4.0 * in + 12.0 * pooled + (k->need_dx ? 4.0 * in : 0);
    bufs d, c;
    make(dev, k, B, &d);
    make(cpu, k, B, &c);
    fill(dev, k, B, &d, 7 + bi);
    fill(cpu, k, B, &c, 7 + bi);
    fwd(cpu, k, B, &c, 1);
    bwd(cpu, k, B, &c, 1);
    printf("\n%s (taps %zu)\n  minimum traffic: forward %.1f MB, backward %.1f MB; %.2f / %.2f GFLOP\n", k->name, taps,
           bytes_f / 1e6, bytes_b / 1e6, flop_f / 1e9, flop_b / 1e9);
    printf("  %-4s %-9s %10s %12s %8s %10s %8s  %s\n", "ver", "pass", "us", "GB/s (min)", "% copy", "TFLOP/s", "% fp32", "check");
    for (int v = 1; v <= 3; v++) {
      if (v == 3 && (bi != 0 || taps > LAM_DIRECT_TAPS)) continue;
      for (int pass = 0; pass < 2; pass++) {
        pass ? bwd(dev, k, B, &d, v) : fwd(dev, k, B, &d, v);
        T(lam_ctx_sync(dev));
        int ok = pass ? check("dW", dev, d.dW, cpu, c.dW, (size_t)k->OC * taps) &&
                            check("db", dev, d.db, cpu, c.db, (size_t)k->OC) &&
                            (!k->need_dx || check("dx", dev, d.dx, cpu, c.dx, in))
                      : check("y", dev, d.y, cpu, c.y, pooled);
        bad += !ok;
        double us = time_us(dev, k, B, &d, v, pass, reps), by = pass ? bytes_b : bytes_f, fl = pass ? flop_b : flop_f;
        printf("  v%-3d %-9s %10.1f %12.0f %7.1f%% %10.2f %7.1f%%  %s\n", v, pass ? "backward" : "forward", us,
               by / (us * 1e3), 100 * by / (us * 1e3) / PEAK_GBS, fl / (us * 1e6), 100 * fl / (us * 1e6) / PEAK_TFLOPS,
               ok ? "ok" : "FAILED");
      }
    }
  }
  lam_ctx_free(dev);
  lam_ctx_free(cpu);
  printf("\n%s\n", bad ? "SOME CHECKS FAILED" : "all versions agree with the CPU");
  return bad ? 1 : 0;
}
