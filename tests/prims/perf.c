/* perf.c — test_prims --perf, the kernel lab over every primitive of src/prims.h (what dev/lab_conv_block.c does for
 * one block): each case of its table (perf_cases.c) run in each format it takes and at each size asked, timed with the
 * backend's own clock, printed as the median time of a call and the GB/s of the bytes that call must move.
 *
 *   test_prims [cuda] [nhwc] --perf [--sizes small,mid,large] [--only NAME,...] [--reps N]
 *
 * Here: the sizes, the formats' names, the random data, the timing, the rows and the arguments; the cases, one
 * table for all families (they share the sizes, buffers and timing, and each is a few lines), in perf_cases.c;
 * perf.h what the two share. Neither is among LAMINA_TEST_PRIMS_SRC (tests/CMakeLists.txt): a perf case is not a
 * correctness test; test_prims' own check test_every_prim_has_a_perf_case (via prims_perf_covers) fails for a
 * primitive without one.
 *
 * Timing: warm-up calls, then N calls; on CUDA a profiler mark (an event on the stream) before the first and after
 * each, on the CPU the host clock (its primitives run on the calling thread); one synchronisation at the end of the
 * batch, and per call the median of the N intervals. */
#include "perf.h"

/* ---- sizes: a small one (launch- and cache-bound on a GPU) and two that stream through the device's memory (the
 * main tensor ~32 MB and ~256 MB in float32, past an H100's 50 MB L2 at the large one) ---- */

static const char *const k_size_name[N_SIZES] = {"small", "mid", "large"};
static const size_t k_flat[N_SIZES] = {(size_t)1 << 18, (size_t)1 << 23, (size_t)1 << 26}; /* values of a flat tensor */
static const int k_batch[N_SIZES] = {4, 128, 1024}; /* images (B, 64, 32, 32): the same counts as k_flat */

/* ---- the formats' names ---- */

typedef struct perf_fmt {
  const char *name;
  lam_fmt f;
} perf_fmt;
static const perf_fmt k_fmts[N_FMTS] = {
    {"nchw f32", {LAM_DT_F32, 0}},  {"nhwc f32", {LAM_DT_F32, 1}},  {"nchw bf16", {LAM_DT_BF16, 0}},
    {"nhwc bf16", {LAM_DT_BF16, 1}}, {"nhwc f16", {LAM_DT_F16, 1}}, {"f32", {LAM_DT_F32, 0}},
    {"bf16", {LAM_DT_BF16, 1}},      {"f16", {LAM_DT_F16, 1}}};
/* (a flat tensor's 16-bit rows say NHWC, as the models that run in 16 bits lay out everything: the same bytes) */

_Noreturn void perf_die(const perf_run *r, const char *what) {
  fprintf(stderr, "test_prims --perf: %s: %s failed: %s\n", r && r->what ? r->what : "setup", what, lam_last_error());
  exit(1);
}

/* The random data every buffer gets: host pools, made once, uploaded tile by tile. */
#define POOL_BYTES ((size_t)16 << 20)
static uint8_t *g_pool[N_POOLS];
static size_t g_pool_turn; /* each buffer starts elsewhere in the pool */

static void pools_make(void) {
  if (g_pool[0]) return;
  seed_case("perf", 0);
  for (int k = 0; k < N_POOLS; k++) {
    g_pool[k] = xmalloc(POOL_BYTES);
    for (size_t i = 0; i < POOL_BYTES / 4; i++) {
      float *f = (float *)g_pool[k];
      uint16_t *h = (uint16_t *)g_pool[k];
      switch (k) {
        case R_F32: f[i] = fr(-1, 1); break;
        case R_POS: f[i] = fr(0.5, 2); break;
        case R_BF16:
        case R_F16: {
          const int dt = k == R_BF16 ? LAM_DT_BF16 : LAM_DT_F16;
          h[2 * i] = lam_f32_to_half(dt, fr(-1, 1)), h[2 * i + 1] = lam_f32_to_half(dt, fr(-1, 1));
          break;
        }
        default: memcpy(g_pool[k] + 4 * i, (uint32_t[]){(uint32_t)tu_next(&g_r)}, 4);
      }
    }
  }
}

void *perf_alloc(perf_run *r, size_t bytes) {
  void *d = NULL;
  if (r->nbufs == PERF_MAX_BUFS) perf_die(r, "more buffers than PERF_MAX_BUFS");
  if (lam_mem_alloc(r->ctx, &d, bytes ? bytes : 4) != LAM_OK) perf_die(r, "lam_mem_alloc");
  return r->bufs[r->nbufs++] = d;
}
void *perf_rnd(perf_run *r, size_t bytes, int kind) {
  uint8_t *d = perf_alloc(r, bytes);
  const size_t half = POOL_BYTES / 2;
  for (size_t done = 0; done < bytes;) {
    size_t off = (g_pool_turn++ * 4099 * 4) % half, len = bytes - done < half ? bytes - done : half;
    if (lam_mem_upload(r->ctx, d + done, g_pool[kind] + off, len) != LAM_OK) perf_die(r, "lam_mem_upload");
    done += len;
  }
  return d;
}
void *perf_put(perf_run *r, const void *host, size_t bytes) {
  void *d = perf_alloc(r, bytes);
  if (lam_mem_upload(r->ctx, d, host, bytes) != LAM_OK) perf_die(r, "lam_mem_upload");
  return d;
}
void perf_img(perf_run *r) {
  r->B = k_batch[r->size], r->C = 64, r->H = r->W = 32, r->P = r->H * r->W, r->n = (size_t)r->B * r->C * r->P;
  snprintf(r->shape, sizeof r->shape, "B%d C%d %dx%d", r->B, r->C, r->H, r->W);
}
void perf_flat(perf_run *r) {
  r->n = k_flat[r->size];
  snprintf(r->shape, sizeof r->shape, "n %zu", r->n);
}

int prims_perf_covers(const char *prim) {
  for (size_t i = 0; i < n_perf; i++)
    if (!strcmp(k_perf[i].prim, prim)) return 1;
  return 0;
}

/* ---- timing ---- */

enum { PERF_WARMUP = 2 };

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median milliseconds of one call over reps calls after the warm-up: on the backend's marks where it has them
 * (unless host), else the host clock; the backend synchronised once, after the last call. A failed call: its status. */
static lam_status perf_time(perf_run *r, perf_fn fn, int host, int reps, double *ms) {
  const lam_backend *be = r->ctx->be;
  lam_status s;
  for (int i = 0; i < PERF_WARMUP; i++)
    if ((s = fn(r)) != LAM_OK) return s;
  const int marks = be->queue->mark && !host;
  double *t = xmalloc(((size_t)reps + 1) * sizeof *t);
  if (marks ? be->queue->mark(r->ctx, 0) != LAM_OK : be->queue->sync(r->ctx) != LAM_OK) perf_die(r, "the first mark");
  t[0] = lam_now_ms();
  for (int i = 0; i < reps; i++) {
    if ((s = fn(r)) != LAM_OK) {
      free(t);
      return s;
    }
    if (marks) {
      if (be->queue->mark(r->ctx, (size_t)i + 1) != LAM_OK) perf_die(r, "mark");
    } else t[i + 1] = lam_now_ms();
  }
  if (be->queue->sync(r->ctx) != LAM_OK) perf_die(r, "the batch's synchronisation");
  if (marks) {
    t[0] = 0;
    for (int i = 1; i <= reps; i++)
      if (be->queue->mark_read(r->ctx, (size_t)i, &t[i]) != LAM_OK) perf_die(r, "mark_read");
  }
  for (int i = 0; i < reps; i++) t[i] = t[i + 1] - t[i];
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  *ms = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
  free(t);
  return LAM_OK;
}

/* One row: set up, time, print, free. 1 where the backend does not take this format (said in the row). */
static int perf_row(lam_ctx *ctx, const perf_case *c, int fmt, int size, int reps) {
  perf_run r;
  memset(&r, 0, sizeof r);
  r.ctx = ctx, r.f = fmt < 0 ? LAM_FMT_NCHW : k_fmts[fmt].f, r.es = lam_dt_size(r.f.dt), r.size = size, r.setup = 1;
  const char *fname = fmt < 0 ? "-" : k_fmts[fmt].name, *sname = c->flags & P_ONE ? "-" : k_size_name[size];
  char what[128];
  snprintf(what, sizeof what, "%s%s%s (%s, %s)", c->prim, *c->variant ? " " : "", c->variant, fname, sname);
  r.what = what;
  printf("%-20s %-9s %-9s %-5s ", c->prim, c->variant, fname, sname);
  fflush(stdout);
  double ms = 0;
  lam_status s = c->fn(&r);
  r.setup = 0;
  if (s == LAM_OK) s = perf_time(&r, c->fn, c->flags & P_HOST, reps, &ms);
  if (s != LAM_OK && s != LAM_ERR_UNSUPPORTED) perf_die(&r, "the call");
  if (s == LAM_ERR_UNSUPPORTED) printf("%-22s unsupported here: %.80s\n", r.shape, lam_last_error());
  else {
    const double us = ms * 1e3;
    printf("%-22s %9.2f %10.1f", r.shape, r.bytes / 1e6, us);
    if (r.bytes > 0 && us > 0) printf(" %8.1f", r.bytes / (us * 1e3));
    else printf(" %8s", "-");
    if (r.flops > 0 && us > 0) printf(" %9.1f", r.flops / (us * 1e3));
    printf("\n");
  }
  fflush(stdout);
  for (size_t i = 0; i < r.nbufs; i++)
    if (lam_mem_free(ctx, r.bufs[i]) != LAM_OK) perf_die(&r, "lam_mem_free");
  lam_mem_release_cached(ctx, NULL); /* the next row's sizes differ: give the memory back */
  return s == LAM_ERR_UNSUPPORTED;
}

/* 1 where name is in the comma-separated list */
static int in_list(const char *list, const char *name) {
  const size_t len = strlen(name);
  for (const char *p = list; *p;) {
    const size_t l = strcspn(p, ",");
    if (l == len && !strncmp(p, name, len)) return 1;
    p += l + (p[l] == ',');
  }
  return 0;
}

static int perf_usage(const char *why) {
  fprintf(stderr,
          "test_prims --perf: %s\n"
          "usage: test_prims [cuda] [nhwc] --perf [--sizes small,mid,large] [--only NAME,...] [--reps N]\n"
          "  cuda     on the CUDA backend (else the CPU)\n"
          "  nhwc     only the NHWC rows of the primitives of images (flat and formatless ones all)\n"
          "  --sizes  which sizes (default: all three on CUDA, small on the CPU)\n"
          "  --only   only these primitives (prims.h's names)\n"
          "  --reps   timed calls per row, after %d warm-up ones (default: 20 on CUDA, 5 on the CPU)\n",
          why, PERF_WARMUP);
  return 2;
}

int prims_perf(lam_ctx *ctx, int argc, char **argv) {
  const int cuda = ctx->device == LAM_DEVICE_CUDA;
  const char *sizes = cuda ? "small,mid,large" : "small", *only = NULL;
  int reps = cuda ? 20 : 5, nhwc_only = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "cuda") || !strcmp(a, "--perf")) continue;
    if (!strcmp(a, "nhwc")) nhwc_only = 1;
    else if (!strcmp(a, "--sizes") && i + 1 < argc) sizes = argv[++i];
    else if (!strcmp(a, "--only") && i + 1 < argc) only = argv[++i];
    else if (!strcmp(a, "--reps") && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 100000) return perf_usage("--reps wants a count from 1 to 100000");
      reps = (int)v;
    } else {
      char why[160];
      snprintf(why, sizeof why, "unknown argument %.100s", a);
      return perf_usage(why);
    }
  }
  int want[N_SIZES] = {0}, any = 0;
  for (int s = 0; s < N_SIZES; s++) any |= want[s] = in_list(sizes, k_size_name[s]);
  for (const char *p = sizes; *p;) { /* every name given is a size */
    const size_t l = strcspn(p, ",");
    int ok = 0;
    for (int s = 0; s < N_SIZES; s++) ok |= strlen(k_size_name[s]) == l && !strncmp(p, k_size_name[s], l);
    if (!ok) return perf_usage("--sizes takes small, mid and large");
    p += l + (p[l] == ',');
  }
  if (!any) return perf_usage("--sizes names no size");
  if (only)
    for (const char *p = only; *p;) {
      const size_t l = strcspn(p, ",");
      char name[64];
      snprintf(name, sizeof name, "%.*s", (int)(l < 63 ? l : 63), p);
      if (!prims_perf_covers(name)) {
        char why[128];
        snprintf(why, sizeof why, "--only: no primitive %s in the perf table (prims.h's names)", name);
        return perf_usage(why);
      }
      p += l + (p[l] == ',');
    }
  if (ctx->be->queue->mark_reserve && ctx->be->queue->mark_reserve(ctx, (size_t)reps + 1) != LAM_OK) perf_die(NULL, "mark_reserve");
  pools_make();
  printf("test_prims --perf on %s; fp32 matrix products\n", lam_ctx_device_name(ctx));
  printf("each row: the median of %d calls after %d warm-up, timed by %s; MB: the bytes one call must read + write\n"
         "at the least (tests/prims/perf_cases.c: what each case counts), GB/s those over the time, GFLOP/s where it\n"
         "computes\n\n",
         reps, PERF_WARMUP, ctx->be->queue->mark ? "the backend's marks (events on the stream)" : "the host clock");
  printf("%-20s %-9s %-9s %-5s %-22s %9s %10s %8s %9s\n", "primitive", "variant", "format", "size", "shape", "MB", "us",
         "GB/s", "GFLOP/s");
  int rows = 0, unsupported = 0;
  for (size_t i = 0; i < n_perf; i++) {
    const perf_case *c = &k_perf[i];
    if (only && !in_list(only, c->prim)) continue;
    for (int fmt = c->fmts ? 0 : -1; fmt < (c->fmts ? N_FMTS : 0); fmt++) {
      if (fmt >= 0 && (!(c->fmts & FM(fmt)) || (nhwc_only && !strncmp(k_fmts[fmt].name, "nchw", 4)))) continue;
      for (int s = 0; s < N_SIZES; s++) {
        if (!want[s]) continue;
        unsupported += perf_row(ctx, c, fmt, s, reps), rows++;
        if (c->flags & P_ONE) break;
      }
    }
  }
  printf("\n%d rows, %d of them in a format this backend does not take\n", rows, unsupported);
  for (int k = 0; k < N_POOLS; k++) free(g_pool[k]), g_pool[k] = NULL;
  return 0;
}
