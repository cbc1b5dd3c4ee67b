/* testutil.h — shared helpers for lamina's C tests: a seeded RNG (splitmix64 seeding xoshiro256**,
 * Box-Muller normals), input fillers, buffers that live in pageable, pinned or backend memory, and
 * the float64 reference checker for the hidden layer out[i] = tanh(grey[i] / 255 * w[i]).
 *
 * Include this instead of <cmocka.h>: it includes cmocka's prerequisites in the order cmocka needs.
 * Everything here is static inline, so each test file stays one translation unit and unused helpers
 * draw no warnings.
 */
#ifndef LAMINA_TESTUTIL_H
#define LAMINA_TESTUTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lamina.h"
#include "../src/nn/rng.h"

/* The one tolerance of the hidden layer: every element within 1e-6 of the float64 reference. */
#define TU_TOL 1e-6

/* ---- a scratch folder ------------------------------------------------------------------------ */

/* dir (cap bytes) becomes a new folder /tmp/lamina-NAME-XXXXXX: 0, or -1 (errno says why). */
static inline int tu_tmpdir(char *dir, size_t cap, const char *name) {
  if ((size_t)snprintf(dir, cap, "/tmp/lamina-%s-XXXXXX", name) >= cap) return -1;
  return mkdtemp(dir) ? 0 : -1;
}

/* dir and everything in it removed: 0, or -1. */
static inline int tu_rmdir_all(const char *dir) {
  char cmd[600];
  if ((size_t)snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir) >= sizeof cmd) return -1;
  return system(cmd) == 0 ? 0 : -1;
}

/* ---- RNG ------------------------------------------------------------------------------------- */

/* The library's own generator (xoshiro256** seeded through splitmix64), under the tests' names. */
typedef lam_rng tu_rng;
static inline uint64_t tu_splitmix64(uint64_t *x) { return lam_splitmix64(x); }

/* Base seed: fixed so failures reproduce; LAMINA_TEST_SEED=<number> tries other data. */
static inline uint64_t tu_base_seed(void) {
  const char *s = getenv("LAMINA_TEST_SEED");
  return (s && *s) ? strtoull(s, NULL, 0) : 0x6c616d696e61ULL; /* "lamina" */
}

/* Each case seeds its own stream from (base seed, case id) so the data is fresh per case but
 * reproducible; the seed is printed with any failure. */
static inline uint64_t tu_case_seed(uint64_t case_id) {
  uint64_t x = tu_base_seed() ^ (case_id * 0x2545f4914f6cdd1dULL);
  return tu_splitmix64(&x);
}

static inline void tu_rng_seed(tu_rng *r, uint64_t seed) { lam_rng_seed(r, seed); }
static inline uint64_t tu_next(tu_rng *r) { return lam_rng_next(r); }

/* Uniform in [a, b), 53 random bits. */
static inline double tu_uniform(tu_rng *r, double a, double b) { return a + (b - a) * lam_rng_uniform(r); }

/* Normal(mean, sd) by Box-Muller (one value per call; u1 kept away from 0 so log is finite). */
static inline double tu_normal(tu_rng *r, double mean, double sd) {
  double u1 = ((double)(tu_next(r) >> 11) + 1.0) * 0x1.0p-53;
  double u2 = (double)(tu_next(r) >> 11) * 0x1.0p-53;
  return mean + sd * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- inputs ---------------------------------------------------------------------------------- */

typedef enum tu_wdist {
  TU_W_NORMAL, /* normal(0.5, 0.1): the CLI's and the course's weights */
  TU_W_WIDE    /* uniform(-40, 40): negative values and deep tanh saturation */
} tu_wdist;

/* greys = floor(uniform(0, 255)) in the given dtype. */
static inline void tu_fill_greys(tu_rng *r, void *grey, lam_dtype dt, size_t n) {
  for (size_t i = 0; i < n; i++) {
    double g = floor(tu_uniform(r, 0.0, 255.0));
    if (dt == LAM_DTYPE_U8)
      ((uint8_t *)grey)[i] = (uint8_t)g;
    else
      ((float *)grey)[i] = (float)g;
  }
}

static inline void tu_fill_weights(tu_rng *r, float *w, size_t n, tu_wdist d) {
  for (size_t i = 0; i < n; i++)
    w[i] = (float)(d == TU_W_WIDE ? tu_uniform(r, -40.0, 40.0) : tu_normal(r, 0.5, 0.1));
}

static inline void tu_fill_nan(float *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = NAN;
}

static inline double tu_grey_at(const void *grey, lam_dtype dt, size_t i) {
  return dt == LAM_DTYPE_U8 ? (double)((const uint8_t *)grey)[i] : (double)((const float *)grey)[i];
}

static inline double tu_ref_hidden(double g, double w) { return tanh(g / 255.0 * w); }

static const char *tu_dt_name(lam_dtype dt) { return dt == LAM_DTYPE_U8 ? "u8" : "f32"; }

/* ---- checking -------------------------------------------------------------------------------- */

/* Compares got[0..n) with ref(i) for every element. A NaN (the poison left in an element the
 * library never wrote) or an error > tol fails. Prints the first few bad elements and the worst. */
typedef double (*tu_ref_fn)(const void *ctx, size_t i, double *in1, double *in2);

typedef struct tu_ref_hidden_args {
  const void *grey;
  lam_dtype dt;
  const float *w;
} tu_ref_hidden_args;

static inline double tu_ref_hidden_at(const void *c, size_t i, double *g, double *w) {
  const tu_ref_hidden_args *a = (const tu_ref_hidden_args *)c;
  *g = tu_grey_at(a->grey, a->dt, i);
  *w = (double)a->w[i];
  return tu_ref_hidden(*g, *w);
}

/* Returns the number of bad elements (0 = pass); *max_err gets the largest error (inf for NaN). */
static inline size_t tu_compare(const char *what, size_t n, const float *got, tu_ref_fn ref, const void *c,
                         double tol, double *max_err) {
  size_t bad = 0, worst = 0;
  double maxe = 0.0;
  for (size_t i = 0; i < n; i++) {
    double in1 = 0, in2 = 0, want = ref(c, i, &in1, &in2), v = (double)got[i];
    double e;
    if (isnan(want))
      e = isnan(v) ? 0.0 : INFINITY; /* NaN expected: only NaN matches */
    else if (isnan(v))
      e = INFINITY;
    else if (isinf(want) || isinf(v))
      e = (v == want) ? 0.0 : INFINITY;
    else
      e = fabs(v - want);
    if (e > maxe) {
      maxe = e;
      worst = i;
    }
    if (e > tol) {
      if (bad < 5)
        print_error("%s: element %zu of %zu: got %.9g, want %.9g (inputs %.9g, %.9g), err %.3g > %.0e\n",
                    what, i, n, v, want, in1, in2, e, tol);
      bad++;
    }
  }
  if (bad)
    print_error("%s: %zu of %zu elements wrong; max abs err %.3g at %zu\n", what, bad, n, maxe, worst);
  if (max_err) *max_err = maxe;
  return bad;
}

/* Fails the test unless every out[i] is within TU_TOL of tanh((double)grey[i]/255*(double)w[i]). */
static inline void tu_assert_hidden(const char *what, size_t n, const void *grey, lam_dtype dt, const float *w,
                             const float *out) {
  tu_ref_hidden_args a = {grey, dt, w};
  double maxe = 0;
  size_t bad = tu_compare(what, n, out, tu_ref_hidden_at, &a, TU_TOL, &maxe);
  if (bad) fail_msg("%s: %zu wrong elements (max abs err %.3g, tolerance %.0e)", what, bad, maxe, TU_TOL);
}

/* Fails unless the status is the expected one; prints lam_last_error() on a mismatch. */
#define TU_EXPECT_STATUS(call, want)                                                              \
  do {                                                                                            \
    lam_status tu_st_ = (call);                                                                   \
    if (tu_st_ != (want))                                                                         \
      fail_msg("%s returned %d (%s), want %d (%s); last error: %s", #call, (int)tu_st_,           \
               lam_status_str(tu_st_), (int)(want), lam_status_str(want), lam_last_error());      \
  } while (0)
#define TU_OK(call) TU_EXPECT_STATUS(call, LAM_OK)

/* ---- buffers in pageable, pinned or backend memory ------------------------------------------- */

typedef enum tu_mem {
  TU_PAGEABLE, /* malloc */
  TU_PINNED,   /* lam_host_alloc (pinned on CUDA, aligned host memory on the CPU) */
  TU_BACKEND   /* lam_mem_alloc (device memory on CUDA), filled and read by upload/download */
} tu_mem;

static const char *tu_mem_name(tu_mem m) {
  return m == TU_PAGEABLE ? "pageable" : m == TU_PINNED ? "pinned" : "backend";
}

/* Guard elements after each array (and `lead` before it) hold a sentinel so overruns are seen. */
#define TU_GUARD 64
#define TU_SENTINEL 12345.0f
#define TU_SENTINEL_U8 0xA5

typedef struct tu_buf {
  tu_mem mem;
  char *base;   /* start of the allocation */
  size_t bytes; /* whole allocation */
} tu_buf;

static inline void tu_buf_alloc(lam_ctx *ctx, tu_buf *b, tu_mem mem, size_t bytes) {
  b->mem = mem;
  b->bytes = bytes;
  b->base = NULL;
  void *p = NULL;
  if (mem == TU_PAGEABLE) {
    p = malloc(bytes);
    assert_non_null(p);
  } else if (mem == TU_PINNED) {
    TU_OK(lam_host_alloc(ctx, &p, bytes));
  } else {
    TU_OK(lam_mem_alloc(ctx, &p, bytes));
  }
  assert_non_null(p);
  b->base = (char *)p;
}

static inline void tu_buf_put(lam_ctx *ctx, tu_buf *b, const void *src, size_t bytes) {
  assert_true(bytes <= b->bytes);
  if (b->mem == TU_BACKEND)
    TU_OK(lam_mem_upload(ctx, b->base, src, bytes));
  else
    memcpy(b->base, src, bytes);
}

static inline void tu_buf_get(lam_ctx *ctx, const tu_buf *b, void *dst, size_t bytes) {
  assert_true(bytes <= b->bytes);
  if (b->mem == TU_BACKEND)
    TU_OK(lam_mem_download(ctx, dst, b->base, bytes));
  else
    memcpy(dst, b->base, bytes);
}

static inline void tu_buf_free(lam_ctx *ctx, tu_buf *b) {
  if (!b->base) return;
  if (b->mem == TU_PAGEABLE)
    free(b->base);
  else if (b->mem == TU_PINNED)
    TU_OK(lam_host_free(ctx, b->base));
  else
    TU_OK(lam_mem_free(ctx, b->base));
  b->base = NULL;
}

/* ---- one hidden-layer case, end to end ------------------------------------------------------- */

typedef struct tu_case {
  size_t n;
  lam_dtype dt;
  tu_wdist wdist;
  tu_mem grey_mem, w_mem, out_mem;
  size_t lead;  /* elements before each array: 0 = block start (aligned), 1 = misaligned */
  int inplace;  /* out == w */
  uint64_t id;  /* distinguishes the data of otherwise equal cases */
} tu_case;

/* Checks that guard floats/bytes kept their sentinel. */
static inline void tu_assert_guards_f32(const char *what, const float *a, size_t lead, size_t n) {
  for (size_t i = 0; i < lead; i++)
    if (a[i] != TU_SENTINEL) fail_msg("%s: guard before the array changed at -%zu: %g", what, lead - i, a[i]);
  for (size_t i = 0; i < TU_GUARD; i++)
    if (a[lead + n + i] != TU_SENTINEL)
      fail_msg("%s: wrote past the end: element n+%zu = %g", what, i, a[lead + n + i]);
}

/* Runs lam_hidden on freshly drawn inputs in the requested memories, then checks every element
 * against the float64 reference and the guards around out. Returns the timing it got. */
static inline lam_hidden_timing tu_run_hidden(lam_ctx *ctx, const tu_case *c) {
  const size_t n = c->n, lead = c->lead, tot = lead + n + TU_GUARD, gsz = lam_dtype_size(c->dt);
  const uint64_t seed = tu_case_seed((uint64_t)n * 131 + (uint64_t)c->dt * 7 + c->wdist * 3 + lead * 11 +
                                     (uint64_t)c->inplace * 5 + c->id * 1000003);
  char what[256];
  snprintf(what, sizeof what, "lam_hidden n=%zu %s weights=%s grey=%s w=%s out=%s%s%s seed=%#llx", n,
           tu_dt_name(c->dt), c->wdist == TU_W_WIDE ? "wide" : "normal", tu_mem_name(c->grey_mem),
           tu_mem_name(c->w_mem), tu_mem_name(c->out_mem), lead ? " misaligned" : "",
           c->inplace ? " in-place(out==w)" : "", (unsigned long long)seed);
  assert_int_equal(gsz, c->dt == LAM_DTYPE_U8 ? 1 : 4);

  /* Host images of the three arrays, guards included. */
  void *hg = malloc(tot * gsz);
  float *hw = malloc(tot * sizeof(float)), *ho = malloc(tot * sizeof(float));
  float *res = malloc(tot * sizeof(float));
  assert_true(hg && hw && ho && res);
  tu_rng r;
  tu_rng_seed(&r, seed);
  if (c->dt == LAM_DTYPE_U8)
    memset(hg, TU_SENTINEL_U8, tot);
  else
    for (size_t i = 0; i < tot; i++) ((float *)hg)[i] = TU_SENTINEL;
  for (size_t i = 0; i < tot; i++) hw[i] = ho[i] = TU_SENTINEL;
  tu_fill_greys(&r, (char *)hg + lead * gsz, c->dt, n);
  tu_fill_weights(&r, hw + lead, n, c->wdist);
  tu_fill_nan(ho + lead, n); /* poison: an element never written stays NaN and fails */
  tu_fill_nan(res, tot);

  tu_buf bg, bw, bo;
  tu_buf_alloc(ctx, &bg, c->grey_mem, tot * gsz);
  tu_buf_alloc(ctx, &bw, c->w_mem, tot * sizeof(float));
  tu_buf_put(ctx, &bg, hg, tot * gsz);
  tu_buf_put(ctx, &bw, hw, tot * sizeof(float));
  if (c->inplace) {
    /* out == w: w's array is poisoned nowhere; the result overwrites the weights. */
    bo = bw;
  } else {
    tu_buf_alloc(ctx, &bo, c->out_mem, tot * sizeof(float));
    tu_buf_put(ctx, &bo, ho, tot * sizeof(float));
  }

  lam_hidden_timing t;
  memset(&t, 0, sizeof t);
  t.total = t.kernel = t.staging = t.copy_in = t.copy_out = -1.0;
  t.chunks = -1;
  float *w_ptr = (float *)bw.base + lead, *o_ptr = (float *)bo.base + lead;
  lam_status st = lam_hidden(ctx, n, bg.base + lead * gsz, c->dt, w_ptr, o_ptr, &t);
  if (st != LAM_OK) fail_msg("%s: returned %s: %s", what, lam_status_str(st), lam_last_error());
  /* The call is complete on return when any array is host memory; only the all-backend case is
   * queued without waiting, and needs lam_ctx_sync before reading. */
  int all_backend = c->grey_mem == TU_BACKEND && c->w_mem == TU_BACKEND &&
                    (c->inplace || c->out_mem == TU_BACKEND);
  if (all_backend) TU_OK(lam_ctx_sync(ctx));
  tu_buf_get(ctx, &bo, res, tot * sizeof(float));

  tu_assert_hidden(what, n, (char *)hg + lead * gsz, c->dt, hw + lead, res + lead);
  tu_assert_guards_f32(what, res, lead, n);
  /* The inputs are const: they must come back unchanged (w only when it is not also out). */
  if (!c->inplace) {
    float *w_back = malloc(tot * sizeof(float));
    assert_non_null(w_back);
    tu_buf_get(ctx, &bw, w_back, tot * sizeof(float));
    if (memcmp(w_back, hw, tot * sizeof(float)) != 0) fail_msg("%s: the weights were modified", what);
    free(w_back);
  }
  void *g_back = malloc(tot * gsz);
  assert_non_null(g_back);
  tu_buf_get(ctx, &bg, g_back, tot * gsz);
  if (memcmp(g_back, hg, tot * gsz) != 0) fail_msg("%s: the greys were modified", what);
  free(g_back);

  if (!c->inplace) tu_buf_free(ctx, &bo);
  tu_buf_free(ctx, &bw);
  tu_buf_free(ctx, &bg);
  free(hg);
  free(hw);
  free(ho);
  free(res);
  return t;
}

/* ---- the three separate ops, chained over backend memory ------------------------------------ */

typedef struct tu_ref_norm_args {
  const void *grey;
  lam_dtype dt;
} tu_ref_norm_args;
static inline double tu_ref_norm_at(const void *c, size_t i, double *g, double *unused) {
  const tu_ref_norm_args *a = (const tu_ref_norm_args *)c;
  *g = tu_grey_at(a->grey, a->dt, i);
  *unused = 0;
  return *g / 255.0;
}
typedef struct tu_ref_weigh_args {
  const float *a, *w;
} tu_ref_weigh_args;
static inline double tu_ref_weigh_at(const void *c, size_t i, double *a, double *w) {
  const tu_ref_weigh_args *x = (const tu_ref_weigh_args *)c;
  *a = x->a[i];
  *w = x->w[i];
  return *a * *w;
}
static inline double tu_ref_tanh_at(const void *c, size_t i, double *x, double *unused) {
  *x = ((const float *)c)[i];
  *unused = 0;
  return tanh(*x);
}

/* normalize -> weigh -> tanh on backend memory (device memory on CUDA); each step's output is
 * checked against float64 of its own float inputs (<= 1e-6: the values are at most ~1 in size for
 * normal(0.5,0.1) weights), and the chain's result against the fused reference (<= 1e-6). */
static inline void tu_run_ops_chain(lam_ctx *ctx, size_t n, lam_dtype dt, size_t lead, uint64_t id) {
  const size_t tot = lead + n + TU_GUARD, gsz = lam_dtype_size(dt);
  const uint64_t seed = tu_case_seed(0x0b5 + (uint64_t)n * 17 + (uint64_t)dt * 3 + lead + id * 7919);
  char what[160];
  snprintf(what, sizeof what, "ops chain n=%zu %s%s seed=%#llx", n, tu_dt_name(dt), lead ? " misaligned" : "",
           (unsigned long long)seed);
  void *hg = malloc(tot * gsz);
  float *hw = malloc(tot * 4), *ha = malloc(tot * 4), *hb = malloc(tot * 4), *hc = malloc(tot * 4);
  assert_true(hg && hw && ha && hb && hc);
  memset(hg, TU_SENTINEL_U8, tot * gsz);
  tu_rng r;
  tu_rng_seed(&r, seed);
  tu_fill_greys(&r, (char *)hg + lead * gsz, dt, n);
  for (size_t i = 0; i < tot; i++) hw[i] = ha[i] = TU_SENTINEL;
  tu_fill_weights(&r, hw + lead, n, TU_W_NORMAL);
  tu_fill_nan(ha + lead, n);

  tu_buf bg, bw, ba, bb, bc;
  tu_buf_alloc(ctx, &bg, TU_BACKEND, tot * gsz);
  tu_buf_alloc(ctx, &bw, TU_BACKEND, tot * 4);
  tu_buf_alloc(ctx, &ba, TU_BACKEND, tot * 4);
  tu_buf_alloc(ctx, &bb, TU_BACKEND, tot * 4);
  tu_buf_alloc(ctx, &bc, TU_BACKEND, tot * 4);
  tu_buf_put(ctx, &bg, hg, tot * gsz);
  tu_buf_put(ctx, &bw, hw, tot * 4);
  tu_buf_put(ctx, &ba, ha, tot * 4); /* NaN-poisoned, sentinel guards */
  tu_buf_put(ctx, &bb, ha, tot * 4);
  tu_buf_put(ctx, &bc, ha, tot * 4);

  const void *g = bg.base + lead * gsz;
  float *w = (float *)bw.base + lead, *a = (float *)ba.base + lead, *b = (float *)bb.base + lead,
        *o = (float *)bc.base + lead;
  TU_OK(lam_normalize(ctx, n, g, dt, a));
  TU_OK(lam_weigh(ctx, n, a, w, b));
  TU_OK(lam_tanh(ctx, n, b, o));
  TU_OK(lam_ctx_sync(ctx)); /* the ops are asynchronous on CUDA */
  tu_buf_get(ctx, &ba, ha, tot * 4);
  tu_buf_get(ctx, &bb, hb, tot * 4);
  tu_buf_get(ctx, &bc, hc, tot * 4);

  char step[200];
  const void *hgl = (char *)hg + lead * gsz;
  tu_ref_norm_args na = {hgl, dt};
  snprintf(step, sizeof step, "%s: lam_normalize", what);
  if (tu_compare(step, n, ha + lead, tu_ref_norm_at, &na, TU_TOL, NULL)) fail_msg("%s wrong", step);
  tu_assert_guards_f32(step, ha, lead, n);
  tu_ref_weigh_args wa = {ha + lead, hw + lead};
  snprintf(step, sizeof step, "%s: lam_weigh", what);
  if (tu_compare(step, n, hb + lead, tu_ref_weigh_at, &wa, TU_TOL, NULL)) fail_msg("%s wrong", step);
  tu_assert_guards_f32(step, hb, lead, n);
  snprintf(step, sizeof step, "%s: lam_tanh", what);
  if (tu_compare(step, n, hc + lead, tu_ref_tanh_at, hb + lead, TU_TOL, NULL)) fail_msg("%s wrong", step);
  tu_assert_guards_f32(step, hc, lead, n);
  snprintf(step, sizeof step, "%s: chain vs fused reference", what);
  tu_assert_hidden(step, n, hgl, dt, hw + lead, hc + lead);

  tu_buf_free(ctx, &bc);
  tu_buf_free(ctx, &bb);
  tu_buf_free(ctx, &ba);
  tu_buf_free(ctx, &bw);
  tu_buf_free(ctx, &bg);
  free(hg);
  free(hw);
  free(ha);
  free(hb);
  free(hc);
}

/* lam_tanh alone, on backend memory: a fine grid over [-20, 20] (step 1e-4, so every region of a piecewise
 * approximation is hit), then special values. Each within 1e-6 of tanh(); NaN stays NaN. */
static inline void tu_check_tanh_values(lam_ctx *ctx) {
  static const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-30f, -1e-30f, 1e-40f /* denormal */,
                                  -1e-40f, FLT_MIN, FLT_MAX, -FLT_MAX, 20.0f, -20.0f, 44.0f, -89.0f, 1e10f};
  const size_t ngrid = 400001, nsp = sizeof special / sizeof special[0], n = ngrid + nsp;
  float *x = malloc(n * 4), *y = malloc(n * 4);
  assert_true(x && y);
  for (size_t i = 0; i < ngrid; i++) x[i] = (float)(-20.0 + 40.0 * (double)i / (double)(ngrid - 1));
  memcpy(x + ngrid, special, sizeof special);
  tu_fill_nan(y, n);
  void *dx, *dy;
  TU_OK(lam_mem_alloc(ctx, &dx, n * 4));
  TU_OK(lam_mem_alloc(ctx, &dy, n * 4));
  TU_OK(lam_mem_upload(ctx, dx, x, n * 4));
  TU_OK(lam_mem_upload(ctx, dy, y, n * 4));
  TU_OK(lam_tanh(ctx, n, dx, dy));
  TU_OK(lam_ctx_sync(ctx));
  TU_OK(lam_mem_download(ctx, y, dy, n * 4));
  if (tu_compare("lam_tanh", n, y, tu_ref_tanh_at, x, TU_TOL, NULL)) fail_msg("lam_tanh wrong");
  /* Spelled out so a regression names the value: tanh(+-inf) = +-1 exactly is what tanh() gives. */
  const float *ys = y + ngrid;
  assert_true(fabsf(ys[0]) <= 1e-6f && fabsf(ys[1]) <= 1e-6f);
  assert_true(fabsf(ys[2] - 1.0f) <= 1e-6f);
  assert_true(fabsf(ys[3] + 1.0f) <= 1e-6f);
  assert_true(isnan(ys[4]));
  TU_OK(lam_mem_free(ctx, dx));
  TU_OK(lam_mem_free(ctx, dy));
  free(x);
  free(y);
}

/* True when the message mentions `word` as a whole identifier (so "w" does not match "what"). */
static inline int tu_mentions(const char *msg, const char *word) {
  size_t k = strlen(word);
  for (const char *p = msg; (p = strstr(p, word)) != NULL; p++) {
    int before = (p == msg) || !(isalnum((unsigned char)p[-1]) || p[-1] == '_');
    int after = !(isalnum((unsigned char)p[k]) || p[k] == '_');
    if (before && after) return 1;
  }
  return 0;
}

/* LAMINA_TEST_SHARD=k/n: a test that loops over cases checks only the cases i with i % n == k (the others
 * are skipped, not passed: the test prints how many it took). Unset: all cases. */
static inline int tu_shard_take(size_t i) {
  const char *s = getenv("LAMINA_TEST_SHARD");
  unsigned k = 0, n = 1;
  if (!s || sscanf(s, "%u/%u", &k, &n) != 2 || n == 0 || k >= n) return 1;
  return i % n == k;
}

/* Runs a group as cmocka_run_group_tests_name does. LAMINA_TEST_FILTER=<pattern> (cmocka's * and ? wildcards)
 * runs only the matching tests; with LAMINA_TEST_LIST set it only prints the group's test names, a line each
 * (scripts/gpu-sanitize runs the slow files test by test under compute-sanitizer, in parallel). */
static inline int tu_run_group(const char *name, const struct CMUnitTest *tests, size_t n, CMFixtureFunction setup,
                               CMFixtureFunction teardown) {
  if (getenv("LAMINA_TEST_LIST")) {
    for (size_t i = 0; i < n; i++) printf("%s\n", tests[i].name);
    return 0;
  }
  const char *f = getenv("LAMINA_TEST_FILTER");
  if (f && *f) cmocka_set_test_filter(f);
  return _cmocka_run_group_tests(name, tests, n, setup, teardown);
}
#define TU_RUN_GROUP(name, tests, setup, teardown) tu_run_group(name, tests, sizeof(tests) / sizeof((tests)[0]), setup, teardown)

#endif /* LAMINA_TESTUTIL_H */
