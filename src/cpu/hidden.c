/* hidden.c — the hidden layer on the CPU: out = tanh(grey / 255 * w) in one fused pass, SIMD within a
 * thread, and the course's three separate steps. The loops run on the pool (threadpool.c): chunks taken from a
 * shared counter, so a thread whose core another process holds does less of the work instead of making
 * the others wait for it, and each chunk's output pages are faulted in by the thread that writes them,
 * on all threads at once (with LAMINA_PREFAULT=1 in one call a chunk: lam_prefault). The CUDA twins are in
 * cuda/hidden.cu under the same names. */
#include "../internal.h"
#include "cpu.h"
#include "tanh.h"

/* Below this many values, one thread: waking the pool costs a few microseconds. */
#define PAR_MIN 65536

/* Values per chunk: about 8 chunks a thread, so the threads finish together, from 16 Ki (64 KB of
 * floats) to 256 Ki (1 MB), and a multiple of 4096 so chunks keep the arrays' alignment and no two
 * threads write one page of out. */
static size_t chunk_for(size_t n) {
  size_t c = n / (8 * (size_t)lam_pool_threads());
  c = c < ((size_t)1 << 14) ? (size_t)1 << 14 : c > ((size_t)1 << 18) ? (size_t)1 << 18 : c;
  return c / 4096 * 4096;
}

typedef struct elementwise {
  const void *a; /* grey (float or uint8), or the first operand */
  const float *b; /* w */
  float *out;
  int u8;
} elementwise;

static void for_each(size_t n, lam_pool_fn fn, elementwise *e) {
  if (n <= PAR_MIN) fn(e, 0, n);
  else lam_pool_for(n, chunk_for(n), fn, e);
}

/* out may be w itself (lam_hidden allows exact aliasing): each element is read before it is written. */
static void hidden_chunk(void *arg, size_t lo, size_t hi) {
  const elementwise *e = arg;
  const float *w = e->b;
  float *out = e->out;
  lam_prefault(out + lo, (hi - lo) * sizeof *out); /* chunks are at least 64 KB of out */
  if (e->u8) {
    const uint8_t *restrict g = e->a;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) out[i] = lam_tanhf((float)g[i] / 255.0f * w[i]);
  } else {
    const float *restrict g = e->a;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) out[i] = lam_tanhf(g[i] / 255.0f * w[i]);
  }
}

void cpu_hidden_f32(size_t n, const float *g, const float *w, float *out) {
  elementwise e = {g, w, out, 0};
  for_each(n, hidden_chunk, &e);
}

void cpu_hidden_u8(size_t n, const uint8_t *g, const float *w, float *out) {
  elementwise e = {g, w, out, 1};
  for_each(n, hidden_chunk, &e);
}

lam_status cpu_hidden(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, const float *w, float *out,
                      lam_hidden_timing *timing) {
  (void)ctx;
  double t0 = lam_now_ms();
  if (gt == LAM_DTYPE_U8) cpu_hidden_u8(n, grey, w, out);
  else cpu_hidden_f32(n, grey, w, out);
  if (timing) {
    timing->total = timing->kernel = lam_now_ms() - t0;
    timing->chunks = 1;
  }
  return LAM_OK;
}

/* The floor under the fused pass: the same bytes read and written on the same threads, no math (out =
 * w + grey): what the host's memory gives this op (lam_hidden_memory_floor). */
static void floor_chunk(void *arg, size_t lo, size_t hi) {
  const elementwise *e = arg;
  const float *w = e->b;
  float *out = e->out;
  if (e->u8) {
    const uint8_t *restrict g = e->a;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) out[i] = w[i] + (float)g[i];
  } else {
    const float *restrict g = e->a;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) out[i] = w[i] + g[i];
  }
}

void cpu_memory_floor(size_t n, const void *grey, lam_dtype gt, const float *w, float *out) {
  elementwise e = {grey, w, out, gt == LAM_DTYPE_U8};
  for_each(n, floor_chunk, &e);
}

static void normalize_chunk(void *arg, size_t lo, size_t hi) {
  const elementwise *e = arg;
  float *restrict out = e->out;
  if (e->u8) {
    const uint8_t *restrict g = e->a;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) out[i] = (float)g[i] / 255.0f;
  } else {
    const float *restrict g = e->a;
#pragma omp simd
    for (size_t i = lo; i < hi; i++) out[i] = g[i] / 255.0f;
  }
}

lam_status cpu_normalize(lam_ctx *ctx, size_t n, const void *grey, lam_dtype gt, float *out) {
  (void)ctx;
  elementwise e = {grey, NULL, out, gt == LAM_DTYPE_U8};
  for_each(n, normalize_chunk, &e);
  return LAM_OK;
}

static void weigh_chunk(void *arg, size_t lo, size_t hi) {
  const elementwise *e = arg;
  const float *a = e->a, *w = e->b;
  float *out = e->out; /* the course's steps weigh in place (out == a) */
#pragma omp simd
  for (size_t i = lo; i < hi; i++) out[i] = a[i] * w[i];
}

lam_status cpu_weigh(lam_ctx *ctx, size_t n, const float *a, const float *w, float *out) {
  (void)ctx;
  elementwise e = {a, w, out, 0};
  for_each(n, weigh_chunk, &e);
  return LAM_OK;
}

static void tanh_chunk(void *arg, size_t lo, size_t hi) {
  const elementwise *e = arg;
  const float *x = e->a;
  float *out = e->out;
#pragma omp simd
  for (size_t i = lo; i < hi; i++) out[i] = lam_tanhf(x[i]);
}

lam_status cpu_tanh(lam_ctx *ctx, size_t n, const float *x, float *out) {
  (void)ctx;
  elementwise e = {x, NULL, out, 0};
  for_each(n, tanh_chunk, &e);
  return LAM_OK;
}
