/* lamref.h — reads the PyTorch reference files ("LAMREF1", written by tests/ref/make_torch_ref.py) and
 * compares lamina's results with them: ref_load / ref_get / ref_text / ref_free, and check_rel, the one
 * measure of the model tests (max|got - want| / scale, printed with its headroom). Used by
 * test_model_torch.c and test_graph_torch.c; include after testutil.h (cmocka).
 *
 * Format (integers little-endian int32/uint32, data C order little-endian):
 *   magic "LAMREF1\0" (8 bytes) | count int32 | count records | crc32 uint32 of every byte before it
 *   record: name_len int32 | name (ASCII, no NUL) | dtype int32 (0 f32, 1 u8, 2 i32) | ndim int32 (0..4)
 *           | dims int32 × ndim | data (product of dims elements; 1 when ndim = 0)
 * Everything here is static inline, so each test stays one translation unit and unused helpers draw no
 * warnings.
 */
#ifndef LAMINA_TEST_LAMREF_H
#define LAMINA_TEST_LAMREF_H

#include "testutil.h"

#ifndef LAMINA_TEST_REF_DIR
#error "LAMINA_TEST_REF_DIR must name the folder of the reference files (tests/CMakeLists.txt sets it)"
#endif

#define REF_MAX_RECORDS 32

typedef enum { REF_F32 = 0, REF_U8 = 1, REF_I32 = 2 } ref_dtype;

typedef struct ref_tensor {
  char name[65];
  ref_dtype dtype;
  int ndim;
  int dims[4];
  size_t count; /* elements */
  void *data;   /* host copy: float, uint8_t or int32_t */
} ref_tensor;

typedef struct ref_file {
  char path[1024];
  int n;
  ref_tensor t[REF_MAX_RECORDS];
} ref_file;

/* CRC-32 as zlib computes it (reflected, polynomial 0xEDB88320). */
static inline uint32_t ref_crc32(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

static inline uint32_t ref_u32le(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Reads a little-endian int32 at *off, failing the test if the file ends first. */
static inline int32_t ref_i32_at(const ref_file *f, const uint8_t *buf, size_t len, size_t *off) {
  if (len - *off < 4) fail_msg("%s: truncated at byte %zu (wanted 4 more bytes)", f->path, *off);
  int32_t v = (int32_t)ref_u32le(buf + *off);
  *off += 4;
  return v;
}

/* Loads tests/ref/<name>.lamref; any inconsistency fails the test with what is wrong. */
static inline void ref_load(ref_file *f, const char *name) {
  memset(f, 0, sizeof *f);
  snprintf(f->path, sizeof f->path, "%s/%s.lamref", LAMINA_TEST_REF_DIR, name);
  FILE *fp = fopen(f->path, "rb");
  if (!fp) fail_msg("%s: cannot open (rerun /usr/bin/python3 tests/ref/make_torch_ref.py)", f->path);
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0, got;
  do {
    if (len == cap) {
      cap = cap ? 2 * cap : 65536;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
    got = fread(buf + len, 1, cap - len, fp);
    len += got;
  } while (got > 0);
  int rerr = ferror(fp);
  fclose(fp);
  if (rerr) fail_msg("%s: read error", f->path);
  if (len < 16 || memcmp(buf, "LAMREF1\0", 8) != 0) fail_msg("%s: not a LAMREF1 file (bad magic)", f->path);
  uint32_t want_crc = ref_u32le(buf + len - 4), crc = ref_crc32(buf, len - 4);
  if (crc != want_crc)
    fail_msg("%s: CRC-32 %08x, the file says %08x: the file is corrupted", f->path, crc, want_crc);
  len -= 4; /* the records end where the CRC starts */
  size_t off = 8;
  int32_t count = ref_i32_at(f, buf, len, &off);
  if (count < 1 || count > REF_MAX_RECORDS) fail_msg("%s: %d records (1..%d allowed)", f->path, count, REF_MAX_RECORDS);
  for (int r = 0; r < count; r++) {
    ref_tensor *t = &f->t[r];
    int32_t nl = ref_i32_at(f, buf, len, &off);
    if (nl < 1 || nl > 64 || len - off < (size_t)nl) fail_msg("%s: record %d: bad name length %d", f->path, r, nl);
    memcpy(t->name, buf + off, (size_t)nl);
    t->name[nl] = '\0';
    off += (size_t)nl;
    int32_t dt = ref_i32_at(f, buf, len, &off), nd = ref_i32_at(f, buf, len, &off);
    if (dt < REF_F32 || dt > REF_I32 || nd < 0 || nd > 4)
      fail_msg("%s: record %s: bad dtype %d or ndim %d", f->path, t->name, dt, nd);
    t->dtype = (ref_dtype)dt;
    t->ndim = nd;
    t->count = 1;
    for (int d = 0; d < nd; d++) {
      t->dims[d] = ref_i32_at(f, buf, len, &off);
      if (t->dims[d] < 0 || t->dims[d] > (1 << 24)) fail_msg("%s: record %s: bad dim %d", f->path, t->name, t->dims[d]);
      t->count *= (size_t)t->dims[d];
    }
    size_t esz = t->dtype == REF_U8 ? 1 : 4, bytes = t->count * esz;
    if (len - off < bytes) fail_msg("%s: record %s: data truncated", f->path, t->name);
    t->data = malloc(bytes ? bytes : 1);
    assert_non_null(t->data);
    if (t->dtype == REF_U8) {
      memcpy(t->data, buf + off, bytes);
    } else {
      for (size_t i = 0; i < t->count; i++) { /* little-endian bits to the host's order */
        uint32_t u = ref_u32le(buf + off + 4 * i);
        memcpy((char *)t->data + 4 * i, &u, 4);
      }
    }
    off += bytes;
    f->n = r + 1;
  }
  if (off != len) fail_msg("%s: %zu bytes after the last record", f->path, len - off);
  free(buf);
}

static inline void ref_free(ref_file *f) {
  for (int i = 0; i < f->n; i++) free(f->t[i].data);
  f->n = 0;
}

/* The record `name`, checked for dtype and (if ndim >= 0) rank. */
static inline const ref_tensor *ref_get(const ref_file *f, const char *name, ref_dtype dtype, int ndim) {
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->t[i].name, name) == 0) {
      const ref_tensor *t = &f->t[i];
      if (t->dtype != dtype || (ndim >= 0 && t->ndim != ndim))
        fail_msg("%s: record %s has dtype %d ndim %d, want dtype %d ndim %d", f->path, name, t->dtype, t->ndim,
                 dtype, ndim);
      return t;
    }
  fail_msg("%s: no record named %s", f->path, name);
  return NULL;
}

/* Text record as a NUL-terminated string (caller frees). */
static inline char *ref_text(const ref_file *f, const char *name) {
  const ref_tensor *t = ref_get(f, name, REF_U8, 1);
  char *s = malloc(t->count + 1);
  assert_non_null(s);
  memcpy(s, t->data, t->count);
  s[t->count] = '\0';
  return s;
}

/* ---- comparing ------------------------------------------------------------------------------- */

/* max|got - want| / scale over n elements; scale <= 0 means max|want|. A NaN or inf in got (the outputs
 * are poisoned with NaN first) fails. On failure prints the first few elements beyond the tolerance and
 * the worst one (index, got, want); on success one line with the error, to see the headroom. */
static inline void check_rel(const char *what, const float *got, const float *want, size_t n, double scale,
                             double tol) {
  if (scale <= 0.0)
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)want[i]));
  if (scale == 0.0) scale = 1.0; /* an all-zero reference: compare absolutely */
  double worst = -1.0;
  size_t wi = 0, bad = 0;
  for (size_t i = 0; i < n; i++) {
    double e = isfinite(got[i]) ? fabs((double)got[i] - (double)want[i]) : INFINITY;
    if (e > worst) {
      worst = e;
      wi = i;
    }
    if (e > tol * scale) {
      if (bad < 4)
        print_error("%s: element %zu of %zu: got %.9g, want %.9g (|diff| %.3g, scale %.3g)\n", what, i, n,
                    (double)got[i], (double)want[i], e, scale);
      bad++;
    }
  }
  if (n == 0) return;
  double rel = worst / scale;
  if (bad)
    fail_msg("%s: %zu of %zu elements beyond tolerance; worst at index %zu: got %.9g, want %.9g, "
             "relative error %.3g > %.0e (scale %.4g)",
             what, bad, n, wi, (double)got[wi], (double)want[wi], rel, tol, scale);
  print_message("  %-40s rel err %.2e (tol %.0e)\n", what, rel, tol);
}

static inline void check_scalar(const char *what, float got, float want, double tol) {
  check_rel(what, &got, &want, 1, 0.0, tol);
}

/* The parameters after the Adam steps (got, flat) against the reference (want), tensor by tensor (tsz[i]
 * values named tname[i]), each within tol of how far Adam moved it from its start p0. */
static inline void check_moved(const char *name, const float *got, const float *p0, const float *want, size_t T,
                               const int32_t *tsz, char *const *tname, size_t steps, double tol) {
  char what[160];
  for (size_t i = 0, off = 0; i < T; off += (size_t)tsz[i], i++) {
    double moved = 0.0;
    for (size_t k = off; k < off + (size_t)tsz[i]; k++) moved = fmax(moved, fabs((double)want[k] - (double)p0[k]));
    snprintf(what, sizeof what, "%s %s after %zu Adam steps", name, tname[i], steps);
    check_rel(what, got + off, want + off, (size_t)tsz[i], moved, tol);
  }
}

/* The float32 record `name` of rank ndim (-1: any), as a pointer to its data. */
static inline const float *ref_f32(const ref_file *f, const char *name, int ndim) {
  return (const float *)ref_get(f, name, REF_F32, ndim)->data;
}

#endif /* LAMINA_TEST_LAMREF_H */
