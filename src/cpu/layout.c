/* layout.c — the CPU twins of the layout primitives (prims.h): convert (between formats), tcat, copy_rows, add,
 * zero and poison; the CUDA twins are in cuda/layout.cu under the same names. And the way the CPU's primitives
 * take activations in any format (prims.h: lam_fmt), NHWC and 16-bit floats: each converts its inputs to NCHW
 * float32, runs its plain NCHW float32 self and converts its outputs back, rounding once where it stores 16 bits.
 * That makes every format's CPU twin the plain one by construction: the oracle that the CUDA backend's NHWC
 * kernels and the graph's handling of formats are checked against. It is not meant to be fast: the CPU trains in
 * NCHW float32 unless told otherwise (LAMINA_LAYOUT, nn/model.c). */
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "kernels.h"
#include "../math/half.h"

static inline float load(int dt, const void *p, size_t i) {
  return dt == LAM_DT_F32 ? ((const float *)p)[i] : lam_half_to_f32(dt, ((const uint16_t *)p)[i]);
}
static inline void store(int dt, void *p, size_t i, float v) {
  if (dt == LAM_DT_F32) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = lam_f32_to_half(dt, v);
}
static inline size_t at(lam_fmt f, size_t C, size_t P, size_t b, size_t c, size_t p) {
  return f.nhwc ? (b * P + p) * C + c : (b * C + c) * P + p;
}

/* (B, C, P) from fs to fd; sizes in size_t, so a flat n (1, 1, n) of any length converts too. */
static void convert(size_t B, size_t C, size_t P, lam_fmt fs, const void *src, lam_fmt fd, void *dst) {
  if (fs.nhwc == fd.nhwc || C == 1 || P == 1) { /* the same order: a type change (or a copy) */
    const size_t n = B * C * P;
    if (fs.dt == fd.dt) {
      memcpy(dst, src, n * lam_dt_size(fs.dt));
      return;
    }
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) store(fd.dt, dst, i, load(fs.dt, src, i));
    return;
  }
#pragma omp parallel for collapse(2) schedule(static) if (B * C * P > PAR_MIN)
  for (size_t b = 0; b < B; b++)
    for (size_t c = 0; c < C; c++)
      for (size_t p = 0; p < P; p++) store(fd.dt, dst, at(fd, C, P, b, c, p), load(fs.dt, src, at(fs, C, P, b, c, p)));
}

lam_status cpu_convert(lam_ctx *ctx, int B, int C, int P, lam_fmt fs, const void *src, lam_fmt fd, void *dst) {
  (void)ctx;
  if (B > 0 && C > 0 && P > 0) convert((size_t)B, (size_t)C, (size_t)P, fs, src, fd, dst);
  return LAM_OK;
}

const float *cpu_fmt_in(cpu_fmt_job *j, size_t B, int C, size_t P, const void *src) {
  if (!src || lam_fmt_plain(j->f)) return src;
  if (j->status != LAM_OK) return NULL;
  if (j->n == CPU_FMT_MAX) { /* a programming error: the wrapper takes more buffers than the job holds */
    j->status = LAM_FAIL(LAM_ERR_INVALID_ARG, "cpu_fmt_in: more than %d buffers in one job", CPU_FMT_MAX);
    return NULL;
  }
  const size_t n = B * (size_t)C * P;
  float *t = malloc((n ? n : 1) * sizeof *t);
  if (!t) {
    j->status = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for a %zu-value float32 copy of a tensor", n);
    return NULL;
  }
  convert(B, (size_t)C, P, j->f, src, LAM_FMT_NCHW, t);
  j->t[j->n++] = (cpu_fmt_tmp){t, NULL, B, C, P};
  return t;
}

float *cpu_fmt_out(cpu_fmt_job *j, size_t B, int C, size_t P, void *dst, int load_it) {
  if (!dst || lam_fmt_plain(j->f)) return dst;
  if (j->status != LAM_OK) return NULL;
  float *t = (float *)cpu_fmt_in(j, B, C, P, load_it ? dst : NULL);
  if (!load_it && j->status == LAM_OK) {
    const size_t n = B * (size_t)C * P;
    if (j->n == CPU_FMT_MAX) {
      j->status = LAM_FAIL(LAM_ERR_INVALID_ARG, "cpu_fmt_out: more than %d buffers in one job", CPU_FMT_MAX);
      return NULL;
    }
    t = malloc((n ? n : 1) * sizeof *t);
    if (!t) {
      j->status = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for a %zu-value float32 copy of a tensor", n);
      return NULL;
    }
    j->t[j->n++] = (cpu_fmt_tmp){t, NULL, B, C, P};
  }
  if (t) j->t[j->n - 1].dst = dst;
  return t;
}

lam_status cpu_fmt_end(cpu_fmt_job *j, lam_status s) {
  if (s == LAM_OK) s = j->status;
  for (int i = 0; i < j->n; i++) {
    const cpu_fmt_tmp *t = &j->t[i];
    if (s == LAM_OK && t->dst) convert(t->B, (size_t)t->C, t->P, LAM_FMT_NCHW, t->p, j->f, t->dst);
    free(t->p);
  }
  j->n = 0;
  return s;
}

void cpu_relayout_i32(int B, int C, int P, int src_nhwc, const int32_t *src, int dst_nhwc, int32_t *dst) {
  const lam_fmt fs = lam_fmt_of(LAM_DT_F32, src_nhwc), fd = lam_fmt_of(LAM_DT_F32, dst_nhwc);
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)B * C * P > PAR_MIN)
  for (int b = 0; b < B; b++)
    for (int c = 0; c < C; c++)
      for (int p = 0; p < P; p++)
        dst[at(fd, (size_t)C, (size_t)P, (size_t)b, (size_t)c, (size_t)p)] =
            src[at(fs, (size_t)C, (size_t)P, (size_t)b, (size_t)c, (size_t)p)];
}

lam_status cpu_zero(lam_ctx *ctx, void *p, size_t bytes) {
  (void)ctx;
  memset(p, 0, bytes);
  return LAM_OK;
}

lam_status cpu_poison(lam_ctx *ctx, void *p, size_t bytes) {
  (void)ctx;
  memset(p, 0xFF, bytes);
  return LAM_OK;
}

static lam_status plain_add(lam_ctx *ctx, size_t n, const float *a, const float *b, float *y) {
  (void)ctx;
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
  for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
  return LAM_OK;
}

/* tcat: values move, none changes, so the element type is only a size. In NCHW a clip's rows already are its
 * T*C channels; in NHWC each sample's (T, P, C) becomes (P, T, C). back = 0: x -> y, 1: y -> x. */
static lam_status tcat_move(lam_fmt f, int B, int T, int C, size_t P, const void *from, void *to, int back) {
  const size_t es = lam_dt_size(f.dt), row = (size_t)C * es, n = (size_t)B * T * P;
  if (!f.nhwc) {
    memcpy(to, from, n * row);
    return LAM_OK;
  }
  const uint8_t *src = from;
  uint8_t *dst = to;
#pragma omp parallel for schedule(static) if (n * C > PAR_MIN)
  for (size_t r = 0; r < n; r++) { /* r: x's (b, t, p), a run of C values in both */
    const size_t p = r % P, bt = r / P, t = bt % (size_t)T, b = bt / (size_t)T;
    const size_t yo = ((b * P + p) * (size_t)T + t) * row, xo = r * row;
    memcpy(dst + (back ? xo : yo), src + (back ? yo : xo), row);
  }
  return LAM_OK;
}
lam_status cpu_tcat_fwd(lam_ctx *ctx, lam_fmt f, int B, int T, int C, size_t P, const void *x, void *y) {
  (void)ctx;
  return tcat_move(f, B, T, C, P, x, y, 0);
}
lam_status cpu_tcat_bwd(lam_ctx *ctx, lam_fmt f, int B, int T, int C, size_t P, const void *dy, void *dx) {
  (void)ctx;
  return tcat_move(f, B, T, C, P, dy, dx, 1);
}

/* Elementwise: n values, only the type matters. */
lam_status cpu_add(lam_ctx *ctx, lam_fmt f, size_t n, const void *a, const void *b, void *y) {
  cpu_fmt_job j = cpu_fmt_begin(lam_fmt_of(f.dt, 0));
  const float *ta = cpu_fmt_in(&j, 1, 1, n, a), *tb = cpu_fmt_in(&j, 1, 1, n, b);
  float *ty = cpu_fmt_out(&j, 1, 1, n, y, 0);
  return cpu_fmt_end(&j, j.status ? j.status : plain_add(ctx, n, ta, tb, ty));
}
/* A copy needs no conversion: rows of cols values of the format's size. */
lam_status cpu_copy_rows(lam_ctx *ctx, lam_fmt f, size_t rows, size_t cols, const void *src, size_t lds, void *dst,
                         size_t ldd) {
  (void)ctx;
  const size_t es = lam_dt_size(f.dt);
  const char *s = src;
  char *d = dst;
#pragma omp parallel for schedule(static) if (rows * cols > PAR_MIN)
  for (size_t r = 0; r < rows; r++) memcpy(d + r * ldd * es, s + r * lds * es, cols * es);
  return LAM_OK;
}
