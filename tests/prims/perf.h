/* perf.h — what test_prims --perf's two files share: perf.c (the sizes, the random data, the timing, the rows and the
 * arguments) and perf_cases.c (the table of cases, one or more per primitive of src/prims.h). A case is one function:
 * called with r->setup set it allocates the row's buffers (random data, never zeros; the inputs a primitive needs
 * valid, such as a max pool's argmax, made by running the forward there), says the row's shape and the bytes one call
 * must read and write at the least — each case's comment says what it counts — and returns; called again it makes
 * the call being timed. */
#ifndef LAMINA_TEST_PRIMS_PERF_H
#define LAMINA_TEST_PRIMS_PERF_H

#include "prims_test.h"

enum { N_SIZES = 3 }; /* small, mid, large (perf.c) */

/* ---- the formats a row runs in (their names: perf.c) ---- */

enum { F_NCHW, F_NHWC, F_NCHW_BF16, F_NHWC_BF16, F_NHWC_F16, F_F32, F_BF16, F_F16, N_FMTS };
#define FM(x) (1u << (x))
#define FM_NONE 0u                                                        /* no format: one row, "-" */
#define FM_IMG (FM(F_NCHW) | FM(F_NHWC) | FM(F_NHWC_BF16) | FM(F_NHWC_F16)) /* images: CUDA's NCHW f32 and NHWC */
#define FM_FLAT (FM(F_F32) | FM(F_BF16) | FM(F_F16)) /* flat tensors (a layout changes nothing), or a bare dt */
#define FM_HALF (FM(F_BF16) | FM(F_F16))

/* ---- a row: its context, format, size, buffers and what it moves ---- */

#define PERF_MAX_BUFS 24
typedef struct perf_run {
  lam_ctx *ctx;
  lam_fmt f;   /* the row's format; f.dt the type of a bare-dt primitive */
  size_t es;   /* bytes of one activation value in f */
  int size;    /* index into k_size_name */
  int setup;   /* 1: allocate and describe, 0: make the call */
  char shape[48];
  double bytes, flops; /* of one call: the minimum read + write, and its arithmetic (0: not reported) */
  /* shapes and geometries */
  int B, C, P, H, W, T, G, OC, K;
  size_t n, S, rows, cols;
  lam_conv_geom cg;
  lam_pool_geom pg;
  lam_norm norm;
  lam_aug aug;
  size_t ws_bytes;
  /* the buffers, by their role in the call */
  void *x, *y, *dx, *dy, *w, *dw, *b, *db, *gamma, *beta, *mean, *invstd, *rm, *rv, *work, *ws, *aux, *aux2;
  void *bufs[PERF_MAX_BUFS]; /* every buffer above, freed after the row */
  size_t nbufs;
  const char *what; /* the prim, variant, format and size: for a message */
} perf_run;

/* The row's failure: the message, exit 1. */
_Noreturn void perf_die(const perf_run *r, const char *what);
/* Backend buffers freed after the row: `bytes` of them; of random data of a pool (R_*); host's bytes as they are
 * (labels of a range, indices, a scaler). */
enum { R_F32, R_POS, R_BF16, R_F16, R_U8, N_POOLS }; /* [-1, 1) never 0; [0.5, 2) (a variance); both 16-bit; bytes */
void *perf_alloc(perf_run *r, size_t bytes);
void *perf_rnd(perf_run *r, size_t bytes, int kind);
void *perf_put(perf_run *r, const void *host, size_t bytes);
/* The row's shape: images (B, 64, 32, 32), B by the size (n = B*C*P values); or a flat tensor of n values. */
void perf_img(perf_run *r);
void perf_flat(perf_run *r);

/* the cases' short names for those */
static inline void *act(perf_run *r, size_t n) { /* n values in r->f.dt */
  return perf_rnd(r, n * r->es, r->f.dt == LAM_DT_BF16 ? R_BF16 : r->f.dt == LAM_DT_F16 ? R_F16 : R_F32);
}
static inline void *f32(perf_run *r, size_t n) { return perf_rnd(r, n * 4, R_F32); }
static inline void *pos(perf_run *r, size_t n) { return perf_rnd(r, n * 4, R_POS); }
static inline void *u8(perf_run *r, size_t n) { return perf_rnd(r, n, R_U8); }
static inline void *put(perf_run *r, const void *host, size_t bytes) { return perf_put(r, host, bytes); }
static inline void img(perf_run *r) { perf_img(r); }
static inline void flat(perf_run *r) { perf_flat(r); }
#define NB(count) ((double)(count) * r->es) /* bytes of count activation values */
#define BEC (r->ctx->be->prim)
#define CTX (r->ctx)
/* A primitive run while setting up (a forward that makes what the timed call reads): unsupported in this format,
 * the row says so; any other failure ends the run. */
#define SETUP_CALL(call)                                      \
  do {                                                        \
    lam_status s_ = (call);                                   \
    if (s_ == LAM_ERR_UNSUPPORTED) return s_;                 \
    if (s_ != LAM_OK) perf_die(r, #call);                     \
  } while (0)

/* ---- the table (perf_cases.c) ---- */

typedef lam_status (*perf_fn)(perf_run *r);
typedef struct perf_case {
  const char *prim, *variant;
  unsigned fmts; /* FM_*: the formats it runs in */
  int flags;
  perf_fn fn;
} perf_case;
#define P_ONE 1  /* the same work at every size: one row, at the first size asked, its size "-" */
#define P_HOST 2 /* a query the host answers: timed by the host clock on every backend */

extern const perf_case k_perf[];
extern const size_t n_perf;

#endif /* LAMINA_TEST_PRIMS_PERF_H */
