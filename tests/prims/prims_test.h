/* prims_test.h — what test_prims' files share: tests/test_prims.c (main) runs the cases of tests/prims/<family>.c,
 * a file per op family of src/prims.h. Here: the state of the run (the backend under test, the CPU oracle, the
 * format, the random stream, the 16-bit type; defined in test_prims.c), random data, backend buffers with guard
 * bytes, a primitive's buffers in the format under test and back, the checks and their tolerances, and the float64
 * references, central differences and bfloat16 helpers that several families use. The last part declares the
 * shapes, types and runners one family's tests borrow from another's (each defined in its family's file) and each
 * family's list of tests. */
#ifndef LAMINA_TEST_PRIMS_TEST_H
#define LAMINA_TEST_PRIMS_TEST_H

#include "../testutil.h"

#include "../../src/aug.h"
#include "../../src/math/half.h"
#include "../../src/math/hash.h"
#include "../../src/math/optim.h"
#include "../../src/internal.h"

extern int g_cuda;       /* the backend under test is CUDA (else the CPU) */
extern lam_fmt g_fmt;    /* the format the primitives of activations run in: NCHW float32, or with the argument
                          * "nhwc" NHWC float32 (inputs converted in, outputs back, by the backend's convert) */
extern lam_ctx *g_ctx;   /* the backend under test */
extern lam_ctx *g_cpu;   /* with "cuda": the CPU backend, the oracle */
extern tu_rng g_r;

/* ---- data ---- */

static inline void seed_case(const char *op, uint64_t k) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a of the op's name, then the case number */
  for (const char *c = op; *c; c++) h = (h ^ (uint8_t)*c) * 1099511628211ULL;
  tu_rng_seed(&g_r, tu_case_seed(h ^ (k * 0x9e3779b97f4a7c15ULL)));
}
static inline double U(double a, double b) { return tu_uniform(&g_r, a, b); }
static inline float fr(double a, double b) { /* uniform in [a, b), never exactly 0 */
  float v = (float)U(a, b);
  return v == 0.0f ? 0.125f : v;
}
static inline void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  assert_non_null(p);
  return p;
}
static inline float *frand(size_t n, double a, double b) {
  float *p = xmalloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = fr(a, b);
  return p;
}
static inline float *fnan(size_t n) {
  float *p = xmalloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = NAN;
  return p;
}
static inline float *fdup(const float *x, size_t n) {
  float *p = xmalloc(n * sizeof *p);
  memcpy(p, x, n * sizeof *p);
  return p;
}
static inline double *dzero(size_t n) {
  double *p = calloc(n ? n : 1, sizeof *p);
  assert_non_null(p);
  return p;
}
static inline uint8_t *u8rand(size_t n, int lo, int hi) { /* uniform integers in [lo, hi] */
  uint8_t *p = xmalloc(n);
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(lo + (int)(tu_next(&g_r) % (uint64_t)(hi - lo + 1)));
  return p;
}
static inline void *bdup(const void *x, size_t bytes) {
  void *p = xmalloc(bytes);
  memcpy(p, x, bytes);
  return p;
}
/* The 16-bit type the half-precision cases run in: bfloat16, and again IEEE half (the *_f16 tests). */
extern int g_half;
/* An output buffer poisoned with NaN: n floats, or n 16-bit values of type g_half (bf16 = 1). */
static inline void *poison(size_t n, int bf16) {
  if (!bf16) return fnan(n);
  uint16_t *p = xmalloc(n * 2);
  for (size_t i = 0; i < n; i++) p[i] = g_half == LAM_DT_F16 ? 0x7e00 : 0x7fc0;
  return p;
}
static inline const char *half_name(void) { return g_half == LAM_DT_F16 ? "f16" : "bf16"; }
static inline double half_ulp(void) { return g_half == LAM_DT_F16 ? 0x1p-11 : 0x1p-8; } /* a rounding's relative bound */
static inline uint16_t *bf16rand(size_t n, double a, double b) { /* of type g_half */
  uint16_t *p = xmalloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = lam_f32_to_half(g_half, fr(a, b));
  return p;
}

/* ---- backend memory, with GUARD bytes after each buffer ---- */

#define GUARD 64
#define GUARD_BYTE 0xA5

/* A copy of host in the backend's memory (NULL for NULL). */
static inline void *dput(lam_ctx *ctx, const void *host, size_t bytes) {
  if (!host) return NULL;
  uint8_t *t = xmalloc(bytes + GUARD);
  memcpy(t, host, bytes);
  memset(t + bytes, GUARD_BYTE, GUARD);
  void *d = NULL;
  TU_OK(lam_mem_alloc(ctx, &d, bytes + GUARD));
  TU_OK(lam_mem_upload(ctx, d, t, bytes + GUARD));
  free(t);
  return d;
}
/* Waits for the backend, reads bytes back into host and checks the guard. */
static inline void dget(lam_ctx *ctx, void *host, const void *d, size_t bytes, const char *what) {
  uint8_t *t = xmalloc(bytes + GUARD);
  TU_OK(lam_ctx_sync(ctx));
  TU_OK(lam_mem_download(ctx, t, d, bytes + GUARD));
  for (size_t i = 0; i < GUARD; i++)
    if (t[bytes + i] != GUARD_BYTE) fail_msg("%s: wrote past the end of its %zu bytes (guard byte %zu)", what, bytes, i);
  memcpy(host, t, bytes);
  free(t);
}
static inline void dfree(lam_ctx *ctx, void *d) {
  if (d) TU_OK(lam_mem_free(ctx, d));
}
#define BE(ctx) ((ctx)->be->prim)

/* ---- the format under test: a primitive's device buffers in g_fmt, made from and read back into the plain
 * (NCHW float32) ones the checks use ---- */

/* d (plain, B x C x P) as a new buffer in g_fmt (with guard bytes), or d itself where g_fmt is plain. */
static inline void *fin(lam_ctx *ctx, void *d, int B, int C, size_t P) {
  if (!d || lam_fmt_plain(g_fmt)) return d;
  size_t bytes = (size_t)B * C * P * lam_dt_size(g_fmt.dt);
  uint8_t *guard = xmalloc(bytes + GUARD);
  memset(guard, GUARD_BYTE, bytes + GUARD);
  void *f = dput(ctx, guard, bytes); /* its guard is checked when fout reads it back */
  free(guard);
  TU_OK(BE(ctx)->convert(ctx, B, C, (int)P, LAM_FMT_NCHW, d, g_fmt, f));
  return f;
}
/* f (from fin) back into d, and freed, checking its guard bytes; nothing where f is d. */
static inline void fout(lam_ctx *ctx, void *f, void *d, int B, int C, size_t P, const char *what) {
  if (!f || f == d) return;
  size_t bytes = (size_t)B * C * P * lam_dt_size(g_fmt.dt);
  uint8_t *t = xmalloc(bytes);
  dget(ctx, t, f, bytes, what); /* the guard */
  free(t);
  TU_OK(BE(ctx)->convert(ctx, B, C, (int)P, g_fmt, f, LAM_FMT_NCHW, d));
  dfree(ctx, f);
}
/* n values with no layout (elementwise primitives, weights): only g_fmt's type. */
static inline void *fin_flat(lam_ctx *ctx, void *d, size_t n) {
  lam_fmt keep = g_fmt;
  g_fmt = lam_fmt_of(keep.dt, 0);
  void *f = fin(ctx, d, 1, 1, n);
  g_fmt = keep;
  return f;
}
static inline void fout_flat(lam_ctx *ctx, void *f, void *d, size_t n, const char *what) {
  lam_fmt keep = g_fmt;
  g_fmt = lam_fmt_of(keep.dt, 0);
  fout(ctx, f, d, 1, 1, n, what);
  g_fmt = keep;
}
/* An int32 buffer per value (a maxpool's argmax) moves as float32 values do: its layout, never its type. */
static inline lam_fmt fmt_i32(void) { return lam_fmt_of(LAM_DT_F32, g_fmt.nhwc); }
static inline void *fin_i32(lam_ctx *ctx, void *d, int B, int C, size_t P) {
  lam_fmt keep = g_fmt;
  g_fmt = fmt_i32();
  void *f = fin(ctx, d, B, C, P);
  g_fmt = keep;
  return f;
}
static inline void fout_i32(lam_ctx *ctx, void *f, void *d, int B, int C, size_t P, const char *what) {
  lam_fmt keep = g_fmt;
  g_fmt = fmt_i32();
  fout(ctx, f, d, B, C, P, what);
  g_fmt = keep;
}

/* ---- checks ---- */

/* Every element: |got - want| <= tol * scale[i] (scale NULL: |want|); a NaN fails. */
static inline void cmp_f(const char *what, size_t n, const float *got, const double *want, const double *scale, double tol) {
  size_t bad = 0, worst = 0;
  double worst_r = -1.0;
  for (size_t i = 0; i < n; i++) {
    double g = got[i], w = want[i], lim = tol * (scale ? scale[i] : fabs(w)), e = fabs(g - w);
    int ok = !isnan(g) && !isnan(w) && e <= lim;
    double r = ok ? (lim > 0 ? e / lim : 0.0) : INFINITY;
    if (r > worst_r) worst_r = r, worst = i;
    if (!ok) {
      if (bad < 5)
        print_error("%s: element %zu of %zu: got %.9g, want %.9g, |diff| %.3g > %.3g (tol %.1e x scale %.3g)\n", what,
                    i, n, g, w, e, lim, tol, scale ? scale[i] : fabs(w));
      bad++;
    }
  }
  if (getenv("LAMINA_TEST_VERBOSE")) /* how close each check came to its tolerance */
    printf("  %-100.100s worst |diff| / tolerance = %.3g\n", what, worst_r);
  if (bad)
    fail_msg("%s: %zu of %zu elements outside the tolerance (worst at %zu: got %.9g, want %.9g)", what, bad, n, worst,
             (double)got[worst], want[worst]);
}

/* The backend's float output: on the CPU against the float64 reference ref (tolerance tol_ref), with
 * "cuda" against the CPU backend's output cpu (tolerance tol_cpu), each on the element's scale. */
static inline void verify(const char *what, size_t n, const float *got, const double *ref, const float *cpu,
                          const double *scale, double tol_ref, double tol_cpu) {
  if (!g_cuda) {
    cmp_f(what, n, got, ref, scale, tol_ref);
    return;
  }
  double *w = dzero(n);
  for (size_t i = 0; i < n; i++) w[i] = cpu[i];
  char buf[320];
  snprintf(buf, sizeof buf, "%s [cuda vs cpu]", what);
  cmp_f(buf, n, got, w, scale, tol_cpu);
  free(w);
}

/* Exact outputs (bytes, indices, bit patterns): equal to the reference, or with "cuda" to the CPU's. */
static inline void verify_bytes(const char *what, size_t n, size_t size, const void *got, const void *ref, const void *cpu) {
  const uint8_t *g = got, *w = g_cuda ? cpu : ref;
  for (size_t i = 0; i < n; i++)
    if (memcmp(g + i * size, w + i * size, size)) {
      long long gv = 0, wv = 0;
      memcpy(&gv, g + i * size, size < 8 ? size : 8);
      memcpy(&wv, w + i * size, size < 8 ? size : 8);
      fail_msg("%s%s: element %zu of %zu: got %lld, want %lld", what, g_cuda ? " [cuda vs cpu]" : "", i, n, gv, wv);
    }
}

static inline float *as_float_bf16(const uint16_t *h, size_t n) { /* of type g_half */
  float *p = xmalloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) p[i] = lam_half_to_f32(g_half, h[i]);
  return p;
}

/* ---- float64 references, central differences and bfloat16 helpers that several families use ---- */

/* Round to nearest even, by comparing the two neighbouring bfloat16 values (not the library's bit trick); for IEEE
 * half, the compiler's own conversion (_Float16, libgcc's soft-float rounding). */
static inline uint16_t ref_bf16_only(float f) {
  uint32_t u, lo, hi;
  memcpy(&u, &f, 4);
  lo = u & 0xffff0000u, hi = lo + 0x10000u;
  float flo, fhi;
  memcpy(&flo, &lo, 4), memcpy(&fhi, &hi, 4);
  double dl = fabs((double)f - flo), dh = fabs((double)fhi - f);
  if (dl != dh) return (uint16_t)((dl < dh ? lo : hi) >> 16);
  return (uint16_t)(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}
static inline uint16_t ref_bf16(float f) { /* of type g_half */
  if (g_half != LAM_DT_F16) return ref_bf16_only(f);
  _Float16 h = (_Float16)f;
  uint16_t u;
  memcpy(&u, &h, 2);
  if (f != f) u = 0x7e00; /* any NaN: the library's quiet NaN */
  return u;
}

/* Central differences of L = sum(w * f(x)) over every x[i] (steps of h, as the floats round them), f
 * run by `fwd` on the CPU backend, against the analytic gradient g: |g - fd| <= atol + rtol |fd|. */
typedef void (*fwd_fn)(const void *args, const float *x, double *loss);
static inline void check_fd(const char *what, size_t n, float *x, const float *g, fwd_fn fwd, const void *args, double h,
                            double atol, double rtol) {
  for (size_t i = 0; i < n; i++) {
    float x0 = x[i];
    double lp, lm, hh = h;
    x[i] = (float)(x0 + hh);
    double up = (double)x[i] - x0;
    fwd(args, x, &lp);
    x[i] = (float)(x0 - hh);
    double dn = x0 - (double)x[i];
    fwd(args, x, &lm);
    x[i] = x0;
    double fd = (lp - lm) / (up + dn);
    if (!(fabs(g[i] - fd) <= atol + rtol * fabs(fd)))
      fail_msg("%s: d/dx[%zu]: backward %.9g, central difference %.9g (tolerance %.2g + %.2g |fd|)", what, i,
               (double)g[i], fd, atol, rtol);
  }
}

/* the activations' float64 references */
static inline const char *act_name(int a) {
  static const char *n[] = {"relu", "tanh", "sigmoid", "gelu", "leaky"};
  return n[a];
}
static inline double act_ref(int a, double alpha, double x) {
  switch (a) {
    case LAM_ACT_RELU: return x > 0 ? x : 0;
    case LAM_ACT_TANH: return tanh(x);
    case LAM_ACT_SIGMOID: return 1 / (1 + exp(-x));
    case LAM_ACT_GELU: return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    default: return x > 0 ? x : alpha * x;
  }
}
/* act'(x); and the magnitude its float evaluation works with, for the tolerance */
static inline double act_grad_ref(int a, double alpha, double x) {
  switch (a) {
    case LAM_ACT_RELU: return x > 0 ? 1 : 0;
    case LAM_ACT_TANH: return 1 - tanh(x) * tanh(x);
    case LAM_ACT_SIGMOID: {
      double s = 1 / (1 + exp(-x));
      return s * (1 - s);
    }
    case LAM_ACT_GELU: return 0.5 * (1 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI);
    default: return x > 0 ? 1 : alpha;
  }
}

/* bfloat16 (g_half) values and checks, for the cases that run a primitive in 16 bits against itself in float32 */
static inline void round_bf16(float *x, size_t n) { /* to g_half */
  for (size_t i = 0; i < n; i++) x[i] = lam_half_to_f32(g_half, lam_f32_to_half(g_half, x[i]));
}
static inline float *frand16(size_t n, double a, double b) {
  float *p = frand(n, a, b);
  round_bf16(p, n);
  return p;
}
/* got (the bfloat16 run) against want (float32): within twice the output's rounding, 2^-8 |want|, and 2e-4 of
 * the largest |want| for sums that the two runs take in other orders or through another algorithm. */
static inline void cmp_bf16(const char *what, size_t n, const float *got, const float *want) {
  double big = 0.0;
  for (size_t i = 0; i < n; i++) big = fmax(big, fabs(want[i]));
  double *w = dzero(n), *sc = dzero(n);
  for (size_t i = 0; i < n; i++) w[i] = want[i], sc[i] = fabs(want[i]) + 0.05 * big;
  cmp_f(what, n, got, w, sc, 1.0 / 256);
  free(w), free(sc);
}
/* The same for an output the primitive adds into (a parameter's gradient): its increment over base, the
 * value before, is compared (a bfloat16 gradient's rounding is relative to the gradient, not to the sum). */
static inline void cmp_bf16_added(const char *what, size_t n, const float *got, const float *want, const float *base) {
  float *g = xmalloc(n * sizeof *g), *w = xmalloc(n * sizeof *w);
  for (size_t i = 0; i < n; i++) g[i] = (float)((double)got[i] - base[i]), w[i] = (float)((double)want[i] - base[i]);
  cmp_bf16(what, n, g, w);
  free(g), free(w);
}
#define IN_BF16(stmt)                          \
  do {                                         \
    lam_fmt keep_ = g_fmt;                     \
    g_fmt = lam_fmt_of(g_half, 1);             \
    stmt;                                      \
    g_fmt = keep_;                             \
  } while (0)

/* A 16-bit case again in IEEE half (the fp16 precision): name##_f16, listed after its family's other cases, which
 * run in bfloat16. */
#define IN_F16_TEST(name)                 \
  static void name##_f16(void **state) { \
    g_half = LAM_DT_F16;                  \
    name(state);                          \
    g_half = LAM_DT_BF16;                 \
  }

/* ---- shared between families: shapes, the types of some outputs, runners (each defined in its family's file:
 * it puts the host inputs in the backend's memory and the format under test, calls the primitive and reads the
 * outputs back, checking the guard bytes) ---- */

typedef struct bcp_case {
  int B, C, P;
} bcp_case;
/* test_layout's shapes (conv.c), over which the BatchNorm cases (norm.c) run too */
extern const bcp_case k_bcp[];
extern const size_t n_bcp;
#define N_BCP n_bcp

/* conv.c */
typedef struct conv_io {
  const float *x, *W, *dy; /* inputs */
  float *y, *dx, *dW;      /* outputs: y overwritten, dx overwritten or (acc) added to, dW accumulated */
  int acc;
} conv_io;
void run_conv2d(lam_ctx *ctx, const lam_conv_geom *g, int OC, int B, conv_io *io, int tight);
void run_channel_bias_fwd(lam_ctx *ctx, int B, int C, int P, float *y, const float *bias);
void run_channel_bias_bwd(lam_ctx *ctx, int B, int C, int P, const float *dy, float *db);

/* pool.c */
void run_maxpool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *x, float *y, int32_t *arg);
void run_maxpool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, const int32_t *arg, float *dx);
void run_avgpool_fwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *x, float *y);
void run_avgpool_bwd(lam_ctx *ctx, const lam_pool_geom *g, int B, const float *dy, float *dx);
void run_plane_mean_fwd(lam_ctx *ctx, int B, int C, int P, const float *x, float *y);
void run_plane_mean_bwd(lam_ctx *ctx, int B, int C, int P, const float *dy, float *dx);
void run_upsample(lam_ctx *ctx, int bwd, int B, int C, int H, int W, int F, const float *in, float *out);

/* norm.c */
typedef struct bn_bufs { /* host copies of every output */
  float *y, *mean, *invstd, *rm, *rv;
} bn_bufs;
void run_bn_fwd(lam_ctx *ctx, int B, int C, int P, const float *x, const float *gamma, const float *beta,
                bn_bufs *o, float momentum, float eps, int train, int inplace);
void run_bn_bwd(lam_ctx *ctx, int B, int C, int P, const float *x, const float *dy, const float *gamma,
                const float *mean, const float *invstd, float *dx, float *dgamma, float *dbeta, int inplace);
void run_bn_act_fwd(lam_ctx *ctx, int B, int C, int P, int act, float alpha, const float *x, const float *gamma,
                    const float *beta, bn_bufs *o, float momentum, float eps, int train);
/* y may be NULL (gelu); dx, dgamma, dbeta are read back. */
void run_bn_act_bwd(lam_ctx *ctx, int B, int C, int P, int act, float alpha, const float *x, const float *y,
                    const float *dy, const float *gamma, const float *beta, const float *mean, const float *invstd,
                    float *dx, float *dgamma, float *dbeta);

/* act.c */
void run_act(lam_ctx *ctx, int bwd, int act, float alpha, size_t n, const float *x, const float *y,
             const float *dy, float *out, int inplace);
void run_mask_scale(lam_ctx *ctx, size_t n, const float *x, const uint8_t *mask, float scale, float *y,
                    int inplace);

/* loss.c */
typedef struct xent_out {
  float *dl, stats[3];
  uint8_t *pred;
} xent_out;
void run_xent(lam_ctx *ctx, int B, int C, int P, const float *logits, const uint8_t *labels, float scale,
              const float *lscale, const float *count, float s, xent_out *o);

/* layout.c */
void run_add(lam_ctx *ctx, size_t n, const float *a, const float *b, float *y, int alias);

/* ---- each family's cases, in the order they run (test_prims.c runs them all as one group) ---- */

const struct CMUnitTest *prims_gemm_tests(size_t *n);
const struct CMUnitTest *prims_conv_tests(size_t *n);
const struct CMUnitTest *prims_pool_tests(size_t *n);
const struct CMUnitTest *prims_norm_tests(size_t *n);
const struct CMUnitTest *prims_act_tests(size_t *n);
const struct CMUnitTest *prims_loss_tests(size_t *n);
const struct CMUnitTest *prims_optim_tests(size_t *n);
const struct CMUnitTest *prims_data_tests(size_t *n);
const struct CMUnitTest *prims_layout_tests(size_t *n);

/* perf.c: test_prims --perf on ctx (its arguments: the usage there), the exit status; and whether its table has a
 * case of the primitive named (test_every_prim_has_a_perf_case). */
int prims_perf(lam_ctx *ctx, int argc, char **argv);
int prims_perf_covers(const char *prim);

#endif /* LAMINA_TEST_PRIMS_TEST_H */
