/* checkpoint.c — saving a model (and, optionally, its trainer) to a file and reading it back, so
 * that an interrupted training run resumes exactly where it stopped: on the CPU the resumed run's
 * losses and parameters equal an uninterrupted run's bit for bit.
 *
 * File format, version 8 (older files load: version 7 lacks the part marked v8, version 6 also the part marked v7, version 5 also the part marked v6, version 4 also the part marked
 * v5, version 3 also the part marked v4, version 2 also the part marked v3, version 1 also the part marked v2; a
 * trainer from them has a constant rate). A model is written at the lowest version that holds it, which older
 * builds read: 4, 5 for a model of clips, 6 for one that remembers its fit (lam_model_set_fit: the --size and
 * the class names of an image folder), 7 for one that remembers a video folder's frame stride, 8 for a trainer that
 * scales its loss (fp16). Every number is little-endian; floats are IEEE-754 binary32 bit
 * patterns.
 *
 *   offset  type            field
 *   0       char[8]         magic "LAMCKPT\0"
 *   8       u32             version (4; 5 for a model of clips; 6 for a model with its fit; 7 with a frame stride)
 *   12      u32             L: length of the model spec in bytes (no terminating NUL; < 4096, v1 < 1024)
 *           char[L]         the model spec, presets expanded (lam_model_spec): the graph, with its labels
 *           i32 × 3         in_c, in_h, in_w
 *           u64             nparams
 *           u32             nlayers (the graph's nodes)
 *           (u64, u64) × nlayers   each node's weight and bias counts (0, 0 for nodes without)
 *           f32 × nparams   the parameters, in lam_model_params_get's order
 *   v2:     u32             C: channels the normalization covers (the model's input channels)
 *           f32 × C, f32 × C   its mean and std per channel (lam_model_set_normalization)
 *           u64             nstate
 *           f32 × nstate    BatchNorm's running statistics (lam_model_state_get)
 *           f32             the loss's label smoothing
 *           u32             training state follows: 0 (the model alone) or 1
 *   when it is 1:
 *           u32             optimizer kind (lam_opt_kind: 0 sgd, 1 adam, 2 adamw)
 *           f32 × 6         lr, momentum, weight_decay, beta1, beta2, eps (the trainer's lam_opt)
 *           i64             optimizer steps taken (the model's opt_step; Adam's bias correction)
 *           f32 × nparams   optimizer state m (SGD's momentum buffer, Adam's first moment)
 *           f32 × nparams   Adam's second moment v (adam and adamw only)
 *           i32             batch
 *           u64             the trainer's seed
 *           i32             epochs done
 *           u64 × 4         the shuffle generator's state (xoshiro256**)
 *   v3:     i32             steps done of an interrupted epoch (lam_trainer_set_stop; 0: at an epoch's end)
 *           u64 × 4         the generator's state before that epoch's shuffle
 *           f32 × 3         that epoch's loss sum, correct and counted labels so far
 *   v4:     u32             the rate's schedule (lam_lr_kind: 0 constant, 1 cosine, 2 step, 3 onecycle)
 *           i32             the epochs it spans
 *           f64             its warm-up in epochs
 *           i32, f64        step: epochs between steps, the factor
 *   v5:     u32             frames per sample (a model of clips, lam_model_create_clip)
 *   v6:     u32, u32        the fit's size h, w (--size; 0, 0: none given)
 *           u32             K: class names (0 to 256)
 *           (u32, char[])   × K   each name's length (1 to 255) and bytes (no NUL)
 *   v7:     u32             the video folder's frame stride its clips were taken at (--frame-stride; 1 to 1000;
 *                           from v8 also 0: none)
 *   v8:     u32             a loss scaler follows: 0 or 1 (1 only with the training state)
 *           f32             its scale
 *           i32 × 3         its clean steps in a row, steps skipped, optimizer steps taken (prims.h: lam_scaler)
 *   always:
 *           u32             CRC-32 (zlib's crc32) of every byte before it
 *
 * Every version ends with that CRC, and it is checked right after the magic, before the version: a
 * damaged byte is reported as damage, never read as a newer version or an impossible length.
 *
 * When the model holds no optimizer state for the trainer's kind yet (no step taken, or state for
 * another kind that the next step would discard), the state is written as zeros with 0 steps: the
 * next step then does exactly what it would have done (Adam from zero moments; SGD's first step
 * copies the gradient into the momentum buffer).
 *
 * Saving builds the whole file in host memory, writes it to "<path>.tmp.<pid>" in the same folder,
 * flushes and fsyncs it, and renames it over path: a reader sees the old file or the new one, never
 * half of one, and a failed save leaves any file at path untouched and no temporary file behind. Only a
 * regular file is replaced; a symbolic link is followed (outpath.c says what is refused and why).
 * Loading reads the whole file and checks, in order: the magic, the version, the length against what
 * the header says the file holds, and the CRC; only then does it build anything.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "nn.h"
#include "rng.h"
#include "train.h"

#define CKPT_MAGIC "LAMCKPT" /* with its NUL: 8 bytes */
#define CKPT_MAGIC_LEN 8
#define CKPT_VERSION 8u
#define CKPT_MAX_LAYERS 4096u /* far above any spec that fits in 1024 characters */

/* ---- little-endian packing --------------------------------------------------------------------- */

/* A byte buffer sized up front; put_* never run past it (the size is computed from the same fields). */
/* The file being built: writes past cap are counted in len but not made (build_image then reports the
 * size it got wrong instead of overrunning the buffer). */
typedef struct wbuf {
  uint8_t *p;
  size_t len, cap;
} wbuf;

static void put_bytes(wbuf *b, const void *src, size_t n) {
  if (b->len <= b->cap && n <= b->cap - b->len) memcpy(b->p + b->len, src, n);
  b->len += n;
}
static void put_u32(wbuf *b, uint32_t v) {
  uint8_t q[4];
  for (int i = 0; i < 4; i++) q[i] = (uint8_t)(v >> (8 * i));
  put_bytes(b, q, 4);
}
static void put_u64(wbuf *b, uint64_t v) {
  uint8_t q[8];
  for (int i = 0; i < 8; i++) q[i] = (uint8_t)(v >> (8 * i));
  put_bytes(b, q, 8);
}
static void put_f32(wbuf *b, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  put_u32(b, u);
}
static void put_f64(wbuf *b, double f) {
  uint64_t u;
  memcpy(&u, &f, 8);
  put_u64(b, u);
}
static void put_f32s(wbuf *b, const float *f, size_t n) {
  for (size_t i = 0; i < n; i++) put_f32(b, f[i]);
}

static uint32_t get_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }
static float get_f32(const uint8_t *p) {
  uint32_t u = get_u32(p);
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static double get_f64(const uint8_t *p) {
  uint64_t u = get_u64(p);
  double f;
  memcpy(&f, &u, 8);
  return f;
}
static void get_f32s(const uint8_t *p, float *f, size_t n) {
  for (size_t i = 0; i < n; i++) f[i] = get_f32(p + 4 * i);
}

/* zlib's crc32 takes an unsigned int length: feed it in 1 GiB pieces. */
static uint32_t crc32_of(const uint8_t *p, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n) {
    size_t piece = n < ((size_t)1 << 30) ? n : ((size_t)1 << 30);
    crc = crc32(crc, p, (uInt)piece);
    p += piece;
    n -= piece;
  }
  return (uint32_t)crc;
}

/* ---- saving ----------------------------------------------------------------------------------- */

static int opt_has_v(lam_opt_kind k) { return k == LAM_OPT_ADAM || k == LAM_OPT_ADAMW; }

/* The whole file in host memory (malloc'd into *out, *out_len bytes). */
static lam_status build_image(const char *path, lam_model *m, const lam_trainer *t, uint8_t **out, size_t *out_len) {
  lam_ctx *ctx = m->ctx;
  const size_t np = m->nparams, spec_len = strlen(m->spec);
  const int nstate = t ? 1 + opt_has_v(t->opt.kind) : 0;
  /* Does the model hold state for the trainer's optimizer? If not, the next step starts it from zero. */
  const int have_state = t && m->opt_m && m->opt_kind == t->opt.kind && (!opt_has_v(t->opt.kind) || m->opt_v);
  size_t size = CKPT_MAGIC_LEN + 4 + 4 + spec_len + 3 * 4 + 8 + 4 + (size_t)m->nnodes * 16 + np * 4 + 4;
  size += 4 + 8 * (size_t)m->norm.c + 8 + 4 * m->nstate + 4; /* v2 */
  if (t) size += 4 + 6 * 4 + 8 + (size_t)nstate * np * 4 + 4 + 8 + 4 + 4 * 8;
  if (t) size += 4 + 4 * 8 + 3 * 4; /* v3 */
  if (t) size += 4 + 4 + 8 + 4 + 8;  /* v4 */
  const size_t nnames = lam_names_count((const char *const *)m->class_names);
  const int scaler = t && t->scaler_set;
  const uint32_t version = scaler ? 8u : m->fit_stride ? 7u : m->fit_h || nnames ? 6u : m->in_t > 1 ? 5u : 4u;
  if (version >= 5) size += 4;
  if (version >= 6) {
    size += 4 + 4 + 4;
    for (size_t k = 0; k < nnames; k++) size += 4 + strlen(m->class_names[k]);
  }
  if (version >= 7) size += 4;
  if (version >= 8) size += 4 + 4 + 3 * 4;
  size += 4; /* CRC */

  size_t nhost = np > m->nstate ? np : m->nstate;
  float *host = malloc((nhost ? nhost : 1) * sizeof *host);
  wbuf b = {malloc(size), 0, size};
  if (!host || !b.p) {
    free(host);
    free(b.p);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "saving checkpoint '%s': no host memory for %zu bytes", path, size);
  }
  lam_status s = LAM_OK;
  put_bytes(&b, CKPT_MAGIC, CKPT_MAGIC_LEN);
  put_u32(&b, version);
  put_u32(&b, (uint32_t)spec_len);
  put_bytes(&b, m->spec, spec_len);
  put_u32(&b, (uint32_t)m->in_c);
  put_u32(&b, (uint32_t)m->in_h);
  put_u32(&b, (uint32_t)m->in_w);
  put_u64(&b, np);
  put_u32(&b, (uint32_t)m->nnodes);
  for (int i = 0; i < m->nnodes; i++) {
    put_u64(&b, m->node[i].nw);
    put_u64(&b, m->node[i].nb);
  }
  s = lam_mem_download(ctx, host, m->params, np * sizeof(float)); /* waits for queued steps */
  char where[160];
  if (s == LAM_OK && nn_nonfinite(m, 0, host, np, where, sizeof where)) /* never kept silently: it cannot train on */
    s = LAM_FAIL(LAM_ERR_DIVERGED, "saving checkpoint '%s': refused, %s: the model diverged and would predict NaN; "
                 "keep the last good checkpoint and train again with a lower learning rate", path, where);
  if (s == LAM_OK) put_f32s(&b, host, np);
  if (s == LAM_OK) {
    put_u32(&b, (uint32_t)m->norm.c);
    put_f32s(&b, m->norm.mean, (size_t)m->norm.c);
    put_f32s(&b, m->norm.std, (size_t)m->norm.c);
    put_u64(&b, m->nstate);
    if (m->nstate) s = lam_mem_download(ctx, host, m->state, m->nstate * sizeof(float));
  }
  if (s == LAM_OK && nn_nonfinite(m, 1, host, m->nstate, where, sizeof where))
    s = LAM_FAIL(LAM_ERR_DIVERGED, "saving checkpoint '%s': refused, %s: the model diverged and would predict NaN; "
                 "keep the last good checkpoint and train again with a lower learning rate", path, where);
  if (s == LAM_OK) {
    put_f32s(&b, host, m->nstate);
    put_f32(&b, m->smoothing);
    put_u32(&b, t ? 1u : 0u);
  }
  if (s == LAM_OK && t) {
    put_u32(&b, (uint32_t)t->opt.kind);
    put_f32(&b, t->opt.lr);
    put_f32(&b, t->opt.momentum);
    put_f32(&b, t->opt.weight_decay);
    put_f32(&b, t->opt.beta1);
    put_f32(&b, t->opt.beta2);
    put_f32(&b, t->opt.eps);
    put_u64(&b, have_state ? (uint64_t)(int64_t)m->opt_step : 0u);
    float *bufs[2] = {m->opt_m, m->opt_v};
    for (int k = 0; k < nstate && s == LAM_OK; k++) {
      if (have_state) s = lam_mem_download(ctx, host, bufs[k], np * sizeof(float));
      else memset(host, 0, np * sizeof(float));
      if (s == LAM_OK) put_f32s(&b, host, np);
    }
    if (s == LAM_OK) {
      put_u32(&b, (uint32_t)t->batch);
      put_u64(&b, t->seed);
      put_u32(&b, (uint32_t)t->epochs_done);
      for (int i = 0; i < 4; i++) put_u64(&b, t->rng.s[i]);
      put_u32(&b, (uint32_t)t->step_done);
      for (int i = 0; i < 4; i++) put_u64(&b, t->epoch_rng.s[i]);
      for (int i = 0; i < 3; i++) put_f32(&b, t->part[i]);
      put_u32(&b, (uint32_t)t->lr_sched.kind);
      put_u32(&b, (uint32_t)t->lr_sched.epochs);
      put_f64(&b, t->lr_sched.warmup_epochs);
      put_u32(&b, (uint32_t)t->lr_sched.step_epochs);
      put_f64(&b, t->lr_sched.gamma);
    }
  }
  free(host);
  if (s != LAM_OK) {
    free(b.p);
    return s;
  }
  if (version >= 5) put_u32(&b, (uint32_t)m->in_t);
  if (version >= 6) {
    put_u32(&b, (uint32_t)m->fit_h);
    put_u32(&b, (uint32_t)m->fit_w);
    put_u32(&b, (uint32_t)nnames);
    for (size_t k = 0; k < nnames; k++) {
      const size_t len = strlen(m->class_names[k]);
      put_u32(&b, (uint32_t)len);
      put_bytes(&b, m->class_names[k], len);
    }
  }
  if (version >= 7) put_u32(&b, (uint32_t)m->fit_stride);
  if (version >= 8) {
    const lam_scaler z = {0}, *ls = scaler ? &t->scaler : &z;
    put_u32(&b, scaler ? 1u : 0u);
    put_f32(&b, ls->scale);
    put_u32(&b, (uint32_t)ls->clean);
    put_u32(&b, (uint32_t)ls->skipped);
    put_u32(&b, (uint32_t)ls->taken);
  }
  if (b.len + 4 == b.cap) put_u32(&b, crc32_of(b.p, b.len));
  if (b.len != b.cap) { /* the size computed above and the fields written disagree: a bug here */
    free(b.p);
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "saving checkpoint '%s': internal error, wrote %zu bytes for %zu", path, b.len,
                    b.cap);
  }
  *out = b.p;
  *out_len = b.len;
  return LAM_OK;
}

lam_status lam_checkpoint_save(const char *path, lam_model *m, const lam_trainer *t) {
  LAM_CHECK_ARG(path && m, "lam_checkpoint_save: %s is NULL", path ? "model" : "path");
  LAM_CHECK_ARG(*path, "lam_checkpoint_save: the path is empty");
  LAM_CHECK_ARG(!t || t->m == m, "lam_checkpoint_save: the trainer trains another model than the one given");
  LAM_CHECK_ARG(!t || t->opt.kind == LAM_OPT_SGD || t->opt.kind == LAM_OPT_ADAM || t->opt.kind == LAM_OPT_ADAMW,
                "lam_checkpoint_save: the trainer's optimizer kind %d is not sgd, adam or adamw", t ? (int)t->opt.kind : 0);
  uint8_t *img = NULL;
  size_t len = 0;
  LAM_TRY(build_image(path, m, t, &img, &len));
  lam_status s = lam_output_write(path, "checkpoint", LAM_FILE_CHECKPOINT, img, len); /* outpath.c */
  free(img);
  return s;
}

/* ---- loading ---------------------------------------------------------------------------------- */

/* Reads the whole file into malloc'd memory. */
static lam_status read_file(const char *path, uint8_t **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  FILE *f;
  LAM_TRY(lam_input_fopen(path, "checkpoint", LAM_FILE_CHECKPOINT, 1, &f)); /* files.c: a regular file */
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    int err = errno;
    fclose(f);
    return LAM_FAIL(LAM_ERR_IO, "cannot read checkpoint '%s': fstat failed: %s", path, strerror(err));
  }
  size_t n = (size_t)st.st_size;
  uint8_t *p = malloc(n ? n : 1);
  if (!p) {
    fclose(f);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "cannot read checkpoint '%s': no host memory for its %zu bytes", path, n);
  }
  size_t got = n ? fread(p, 1, n, f) : 0;
  int err = ferror(f) ? errno : 0;
  fclose(f);
  if (got != n) {
    free(p);
    if (err)
      return LAM_FAIL(LAM_ERR_IO, "cannot read checkpoint '%s': fread failed after %zu of %zu bytes: %s", path, got, n,
                      strerror(err));
    return LAM_FAIL(LAM_ERR_IO, "cannot read checkpoint '%s': it shrank while being read (%zu of %zu bytes)", path, got, n);
  }
  *out = p;
  *out_len = n;
  return LAM_OK;
}

/* What a checkpoint holds, with pointers into the file's bytes for the big arrays. */
typedef struct ckpt {
  uint32_t version;
  char spec[4096];
  int32_t in_c, in_h, in_w, in_t;
  uint64_t nparams;
  uint32_t nlayers;
  const uint8_t *layers; /* (nw, nb) u64 pairs */
  const uint8_t *params;
  lam_norm norm;         /* v2; c = 0 in v1 files */
  uint64_t nstate;
  const uint8_t *state;
  float smoothing;
  int train;             /* training state follows */
  lam_opt opt;
  int64_t opt_step;
  const uint8_t *opt_m, *opt_v; /* opt_v NULL for SGD */
  int32_t batch;
  uint64_t seed;
  int32_t epochs_done;
  lam_rng rng;
  int32_t step_done; /* v3: an interrupted epoch's place */
  lam_rng epoch_rng;
  float part[3];
  lam_lr_schedule lr_sched; /* v4 (constant before) */
  int32_t fit_h, fit_w;     /* v6 (0, 0 before) */
  int32_t fit_stride;       /* v7 (0 before) */
  int scaler;               /* v8: a loss scaler's state, in ls */
  lam_scaler ls;
  uint32_t nnames;          /* v6: class names, at names (u32 length, bytes each) */
  const uint8_t *names;
} ckpt;

/* A cursor over the file: take() hands out the next n bytes, or NULL when the file ends first. */
typedef struct rd {
  const uint8_t *p;
  size_t len, off;
  size_t want; /* on failure: the length the file would need */
} rd;

static const uint8_t *take(rd *r, size_t n) {
  if (n > r->len - r->off) {
    r->want = (n > SIZE_MAX - r->off) ? SIZE_MAX : r->off + n;
    return NULL;
  }
  const uint8_t *q = r->p + r->off;
  r->off += n;
  return q;
}

#define TRUNCATED(path, r)                                                                                          \
  LAM_FAIL(LAM_ERR_IO, "checkpoint '%s' is truncated: expected at least %zu bytes, file has %zu; the save was cut " \
           "short or the copy is incomplete: save it again or use an older checkpoint", (path), (r)->want, (r)->len)
#define CORRUPTED(path, fmt, ...) LAM_FAIL(LAM_ERR_IO, "checkpoint '%s' is corrupted: " fmt, (path), __VA_ARGS__)

/* Checks magic, CRC, version and length, and reads the fields. The CRC comes right after the magic: a
 * damaged byte anywhere must be reported as damage, not read as a version or a length first. */
static lam_status parse(const char *path, const uint8_t *p, size_t len, ckpt *c) {
  memset(c, 0, sizeof *c);
  if (len == 0)
    return LAM_FAIL(LAM_ERR_IO, "checkpoint '%s' is empty (0 bytes), not a lamina checkpoint: check the path (lamina's "
                    "saves are atomic and never leave an empty file)", path);
  size_t head = len < CKPT_MAGIC_LEN ? len : CKPT_MAGIC_LEN;
  if (memcmp(p, CKPT_MAGIC, head) != 0)
    return LAM_FAIL(LAM_ERR_IO, "'%s' is not a lamina checkpoint: it does not start with the magic \"LAMCKPT\"", path);
  if (len < CKPT_MAGIC_LEN + 4 + 4)
    return LAM_FAIL(LAM_ERR_IO, "checkpoint '%s' is truncated: the file has %zu bytes, less than any checkpoint's header "
                    "and CRC; the save was cut short or the copy is incomplete: use another copy or an older checkpoint",
                    path, len);
  uint32_t want = get_u32(p + len - 4), got = crc32_of(p, len - 4);
  if (want != got)
    return CORRUPTED(path, "CRC-32 mismatch (stored %08x, computed %08x): damaged or truncated after it was written (the "
                     "file has %zu bytes); use another copy or an older checkpoint", want, got, len);
  rd r = {p, len, 0, 0};
  const uint8_t *q;
  if (!(q = take(&r, CKPT_MAGIC_LEN + 4))) return TRUNCATED(path, &r);
  uint32_t version = get_u32(q + CKPT_MAGIC_LEN);
  if (version > CKPT_VERSION)
    return LAM_FAIL(LAM_ERR_IO, "checkpoint '%s' was written by a newer lamina: version %u, this build reads %u; "
                    "update lamina to load it", path, version, CKPT_VERSION);
  if (version < 1) return CORRUPTED(path, "version %u is not one lamina ever wrote", version);
  c->version = version;

  /* The structure, far enough to know the length; values are checked once the CRC holds. */
  if (!(q = take(&r, 4))) return TRUNCATED(path, &r);
  uint32_t spec_len = get_u32(q);
  size_t spec_max = version == 1 ? 1023 : sizeof c->spec - 1;
  if (spec_len > spec_max)
    return CORRUPTED(path, "its model spec is %u bytes long, more than the %zu a spec can have", spec_len, spec_max);
  if (!(q = take(&r, spec_len))) return TRUNCATED(path, &r);
  memcpy(c->spec, q, spec_len);
  c->spec[spec_len] = '\0';
  if (!(q = take(&r, 3 * 4 + 8 + 4))) return TRUNCATED(path, &r);
  c->in_c = (int32_t)get_u32(q);
  c->in_h = (int32_t)get_u32(q + 4);
  c->in_w = (int32_t)get_u32(q + 8);
  c->nparams = get_u64(q + 12);
  c->nlayers = get_u32(q + 20);
  if (c->nlayers == 0 || c->nlayers > CKPT_MAX_LAYERS)
    return CORRUPTED(path, "it says the model has %u layers (1 to %u expected)", c->nlayers, CKPT_MAX_LAYERS);
  if (c->nparams > (SIZE_MAX - 1024) / 16)
    return CORRUPTED(path, "it says the model has %llu parameters", (unsigned long long)c->nparams);
  const size_t pbytes = (size_t)c->nparams * 4;
  if (!(c->layers = take(&r, (size_t)c->nlayers * 16))) return TRUNCATED(path, &r);
  if (!(c->params = take(&r, pbytes))) return TRUNCATED(path, &r);
  if (version >= 2) {
    if (!(q = take(&r, 4))) return TRUNCATED(path, &r);
    uint32_t nc = get_u32(q);
    if (nc == 0 || nc > LAM_NORM_MAX_CHANNELS)
      return CORRUPTED(path, "its normalization covers %u channels (1 to %d expected)", nc, LAM_NORM_MAX_CHANNELS);
    c->norm.c = (int)nc;
    if (!(q = take(&r, 8 * (size_t)nc + 8))) return TRUNCATED(path, &r);
    get_f32s(q, c->norm.mean, nc);
    get_f32s(q + 4 * nc, c->norm.std, nc);
    c->nstate = get_u64(q + 8 * nc);
    if (c->nstate > (SIZE_MAX - 1024) / 16)
      return CORRUPTED(path, "it says the model has %llu running statistics", (unsigned long long)c->nstate);
    if (!(c->state = take(&r, (size_t)c->nstate * 4))) return TRUNCATED(path, &r);
    if (!(q = take(&r, 4))) return TRUNCATED(path, &r);
    c->smoothing = get_f32(q);
  }
  if (!(q = take(&r, 4))) return TRUNCATED(path, &r);
  uint32_t train = get_u32(q);
  if (train > 1) return CORRUPTED(path, "the training-state flag is %u (0 or 1 expected)", train);
  c->train = (int)train;
  if (train) {
    if (!(q = take(&r, 4 + 6 * 4 + 8))) return TRUNCATED(path, &r);
    uint32_t kind = get_u32(q);
    if (kind > LAM_OPT_ADAMW)
      return CORRUPTED(path, "optimizer kind %u is not sgd (0), adam (1) or adamw (2)", kind);
    c->opt.kind = (lam_opt_kind)kind;
    c->opt.lr = get_f32(q + 4);
    c->opt.momentum = get_f32(q + 8);
    c->opt.weight_decay = get_f32(q + 12);
    c->opt.beta1 = get_f32(q + 16);
    c->opt.beta2 = get_f32(q + 20);
    c->opt.eps = get_f32(q + 24);
    c->opt_step = (int64_t)get_u64(q + 28);
    if (!(c->opt_m = take(&r, pbytes))) return TRUNCATED(path, &r);
    if (opt_has_v(c->opt.kind) && !(c->opt_v = take(&r, pbytes))) return TRUNCATED(path, &r);
    if (!(q = take(&r, 4 + 8 + 4 + 4 * 8))) return TRUNCATED(path, &r);
    c->batch = (int32_t)get_u32(q);
    c->seed = get_u64(q + 4);
    c->epochs_done = (int32_t)get_u32(q + 12);
    for (int i = 0; i < 4; i++) c->rng.s[i] = get_u64(q + 16 + 8 * i);
    if (version >= 3) {
      if (!(q = take(&r, 4 + 4 * 8 + 3 * 4))) return TRUNCATED(path, &r);
      c->step_done = (int32_t)get_u32(q);
      for (int i = 0; i < 4; i++) c->epoch_rng.s[i] = get_u64(q + 4 + 8 * i);
      for (int i = 0; i < 3; i++) c->part[i] = get_f32(q + 36 + 4 * i);
    }
    c->lr_sched = (lam_lr_schedule){.kind = LAM_LR_CONSTANT, .epochs = 1, .step_epochs = 1, .gamma = 1.0};
    if (version >= 4) {
      if (!(q = take(&r, 4 + 4 + 8 + 4 + 8))) return TRUNCATED(path, &r);
      c->lr_sched.kind = (lam_lr_kind)get_u32(q);
      c->lr_sched.epochs = (int32_t)get_u32(q + 4);
      c->lr_sched.warmup_epochs = get_f64(q + 8);
      c->lr_sched.step_epochs = (int32_t)get_u32(q + 16);
      c->lr_sched.gamma = get_f64(q + 20);
    }
  }
  c->in_t = 1;
  if (version >= 5) {
    if (!(q = take(&r, 4))) return TRUNCATED(path, &r);
    c->in_t = (int32_t)get_u32(q);
  }
  if (version >= 6) {
    if (!(q = take(&r, 12))) return TRUNCATED(path, &r);
    c->fit_h = (int32_t)get_u32(q), c->fit_w = (int32_t)get_u32(q + 4), c->nnames = get_u32(q + 8);
    if (c->nnames > LAM_FIT_MAX_CLASSES)
      return CORRUPTED(path, "it says the model has %u class names (at most %d)", c->nnames, LAM_FIT_MAX_CLASSES);
    c->names = r.p + r.off;
    for (uint32_t k = 0; k < c->nnames; k++) {
      if (!(q = take(&r, 4))) return TRUNCATED(path, &r);
      const uint32_t len = get_u32(q);
      if (len < 1 || len > LAM_FIT_MAX_NAME)
        return CORRUPTED(path, "class name %u is %u bytes long (1 to %d expected)", k, len, LAM_FIT_MAX_NAME);
      if (!take(&r, len)) return TRUNCATED(path, &r);
    }
  }
  c->fit_stride = 0;
  if (version >= 7) {
    if (!(q = take(&r, 4))) return TRUNCATED(path, &r);
    c->fit_stride = (int32_t)get_u32(q);
    if (c->fit_stride < (version >= 8 ? 0 : 1) || c->fit_stride > 1000)
      return CORRUPTED(path, "its frame stride %d is out of range (1 to 1000)", c->fit_stride);
  }
  c->scaler = 0;
  if (version >= 8) {
    if (!(q = take(&r, 4 + 4 + 3 * 4))) return TRUNCATED(path, &r);
    c->scaler = get_u32(q) != 0;
    c->ls = (lam_scaler){.scale = get_f32(q + 4), .clean = (int32_t)get_u32(q + 8), .skipped = (int32_t)get_u32(q + 12),
                         .taken = (int32_t)get_u32(q + 16)};
    if (c->scaler && (!c->train || !(c->ls.scale >= LAM_SCALE_FLOOR && isfinite(c->ls.scale)) || c->ls.clean < 0 ||
                      c->ls.clean >= LAM_SCALE_GROWTH || c->ls.skipped < 0 || c->ls.taken < 0 ||
                      (int64_t)c->ls.taken + c->ls.skipped > c->opt_step))
      return CORRUPTED(path, "its loss scaler (scale %g, %d clean steps, %d skipped, %d taken) is out of range",
                       (double)c->ls.scale, c->ls.clean, c->ls.skipped, c->ls.taken);
    c->ls.inv = 1.0f / c->ls.scale;
  }
  if (!take(&r, 4)) return TRUNCATED(path, &r);
  if (r.off != len)
    return CORRUPTED(path, "it has %zu bytes where its header describes %zu (%zu bytes of trailing data)", len,
                     r.off, len - r.off);

  /* The CRC holds: the values are what was written; check the ones that must make sense. */
  if ((c->fit_h == 0) != (c->fit_w == 0) || c->fit_h < 0 || c->fit_w < 0 || c->fit_h > LAM_FIT_MAX_SIDE ||
      c->fit_w > LAM_FIT_MAX_SIDE)
    return CORRUPTED(path, "its fit's size %dx%d is out of range (0x0, or 1 to %d a side)", c->fit_h, c->fit_w,
                     LAM_FIT_MAX_SIDE);
  for (uint32_t k = 0, at = 0; k < c->nnames; k++) { /* a name holds no NUL: it is a C string once read */
    const uint32_t len = get_u32(c->names + at);
    if (memchr(c->names + at + 4, 0, len)) return CORRUPTED(path, "class name %u holds a NUL byte", k);
    at += 4 + len;
  }
  if (train) {
    if (c->batch < 1 || c->opt_step < 0 || c->epochs_done < 0 || c->step_done < 0 || c->step_done > c->opt_step)
      return CORRUPTED(path, "training state out of range (batch %d, %lld optimizer steps, %d epochs done, %d steps "
                       "into the next)", c->batch, (long long)c->opt_step, c->epochs_done, c->step_done);
  }
  return LAM_OK;
}

/* The v6 fit into m: the size and the class names (copied out of the file's bytes). */
static lam_status set_fit(const char *path, lam_model *m, const ckpt *c) {
  char *names[LAM_FIT_MAX_CLASSES + 1] = {NULL};
  lam_status s = LAM_OK;
  for (uint32_t k = 0, at = 0; k < c->nnames && s == LAM_OK; k++) {
    const uint32_t len = get_u32(c->names + at);
    if (!(names[k] = malloc(len + 1u)))
      s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "loading checkpoint '%s': no host memory for its class names", path);
    else memcpy(names[k], c->names + at + 4, len), names[k][len] = '\0';
    at += 4 + len;
  }
  if (s == LAM_OK) s = lam_model_set_fit(m, c->fit_h, c->fit_w, (const char *const *)names);
  for (uint32_t k = 0; k < c->nnames; k++) free(names[k]);
  return s;
}

/* Builds the model the file describes and checks it has the file's shapes. */
static lam_status make_model(lam_ctx *ctx, const char *path, const ckpt *c, lam_model **out) {
  lam_model *m = NULL;
  lam_status s = lam_model_create_clip(ctx, c->spec, c->in_t, c->in_c, c->in_h, c->in_w, 0, &m);
  if (s != LAM_OK && s != LAM_ERR_INVALID_ARG) return s; /* out of memory, CUDA: not the file's fault */
  if (s != LAM_OK) {
    char why[512];
    snprintf(why, sizeof why, "%s", lam_last_error());
    return LAM_FAIL(LAM_ERR_IO, "checkpoint '%s' is mismatched: this build cannot make its model \"%s\" on %dx%dx%d "
                    "inputs: %s", path, c->spec, c->in_c, c->in_h, c->in_w, why);
  }
  if (m->nparams != c->nparams || (uint32_t)m->nnodes != c->nlayers) {
    s = LAM_FAIL(LAM_ERR_IO, "checkpoint '%s' is mismatched: its model \"%s\" has %llu parameters in %u layers in the "
                 "file but %zu in %d layers in this build; it was written by an incompatible lamina", path, c->spec,
                 (unsigned long long)c->nparams, c->nlayers, m->nparams, m->nnodes);
  }
  for (int i = 0; i < m->nnodes && s == LAM_OK; i++) {
    uint64_t nw = get_u64(c->layers + 16 * i), nb = get_u64(c->layers + 16 * i + 8);
    if (nw != m->node[i].nw || nb != m->node[i].nb)
      s = LAM_FAIL(LAM_ERR_IO, "checkpoint '%s' is mismatched: layer %d of \"%s\" has %llu weights and %llu biases in the "
                   "file but %zu and %zu in this build; it was written by an incompatible lamina", path, i + 1, c->spec,
                   (unsigned long long)nw, (unsigned long long)nb, m->node[i].nw, m->node[i].nb);
  }
  if (s == LAM_OK && c->version >= 2 && (c->nstate != m->nstate || c->norm.c != m->in_c))
    s = LAM_FAIL(LAM_ERR_IO, "checkpoint '%s' is mismatched: its model \"%s\" has %llu running statistics and normalizes "
                 "%d channels in the file but %zu and %d in this build", path, c->spec, (unsigned long long)c->nstate,
                 c->norm.c, m->nstate, m->in_c);
  if (s == LAM_OK && c->version >= 2) s = lam_model_set_normalization(m, c->norm.c, c->norm.mean, c->norm.std);
  if (s == LAM_OK && c->version >= 2) s = lam_model_set_label_smoothing(m, c->smoothing);
  if (s == LAM_OK && c->version >= 6) s = set_fit(path, m, c);
  if (s == LAM_OK && c->version >= 7 && c->fit_stride) s = lam_model_set_frame_stride(m, c->fit_stride);
  float *host = NULL;
  size_t nhost = m->nparams > m->nstate ? m->nparams : m->nstate;
  if (s == LAM_OK) {
    host = malloc((nhost ? nhost : 1) * sizeof *host);
    if (!host) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "loading checkpoint '%s': no host memory for %zu parameters", path,
                            m->nparams);
  }
  if (s == LAM_OK) {
    get_f32s(c->params, host, m->nparams);
    s = lam_model_params_set(m, host, m->nparams);
  }
  if (s == LAM_OK && c->version >= 2 && m->nstate) {
    get_f32s(c->state, host, m->nstate);
    s = lam_model_state_set(m, host, m->nstate);
  }
  free(host);
  if (s != LAM_OK) {
    lam_model_free(m);
    return s;
  }
  *out = m;
  return LAM_OK;
}

/* Puts the file's optimizer state into m, as lam_model_step left it: the buffers for the kind, the
 * step count. */
static lam_status restore_opt(const char *path, lam_model *m, const ckpt *c) {
  lam_ctx *ctx = m->ctx;
  const size_t np = m->nparams, bytes = np * sizeof(float);
  float *host = malloc((np ? np : 1) * sizeof *host);
  if (!host) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "loading checkpoint '%s': no host memory for %zu values", path, np);
  /* A fresh model holds no state; free anything there all the same. */
  lam_mem_free(ctx, m->opt_m);
  lam_mem_free(ctx, m->opt_v);
  m->opt_m = m->opt_v = NULL;
  lam_status s = lam_mem_alloc(ctx, (void **)&m->opt_m, bytes);
  if (s == LAM_OK) {
    get_f32s(c->opt_m, host, np);
    s = lam_mem_upload(ctx, m->opt_m, host, bytes);
  }
  if (s == LAM_OK && c->opt_v) s = lam_mem_alloc(ctx, (void **)&m->opt_v, bytes);
  if (s == LAM_OK && c->opt_v) {
    get_f32s(c->opt_v, host, np);
    s = lam_mem_upload(ctx, m->opt_v, host, bytes);
  }
  free(host);
  if (s != LAM_OK) return s; /* the caller frees the model, and with it whatever was allocated */
  m->opt_kind = c->opt.kind;
  m->opt_step = (long)c->opt_step;
  return LAM_OK;
}

lam_status lam_checkpoint_load(lam_ctx *ctx, const char *path, lam_model **model, const lam_dataset *train,
                               lam_trainer **trainer) {
  LAM_CHECK_ARG(ctx && path && model, "lam_checkpoint_load: %s is NULL", !ctx ? "ctx" : !path ? "path" : "model");
  *model = NULL;
  if (trainer) *trainer = NULL;
  LAM_CHECK_ARG(!trainer || train, "lam_checkpoint_load: a trainer was asked for but the training set is NULL");
  uint8_t *bytes = NULL;
  size_t len = 0;
  LAM_TRY(read_file(path, &bytes, &len));
  ckpt c;
  lam_status s = parse(path, bytes, len, &c);
  if (s == LAM_OK && trainer && !c.train)
    s = LAM_FAIL(LAM_ERR_INVALID_ARG, "checkpoint '%s' holds the model alone, no training state, so training cannot resume "
                 "from it: load it with trainer = NULL and make a new trainer, or save with the trainer "
                 "(lam_checkpoint_save(path, model, trainer)) to be able to resume", path);
  lam_model *m = NULL;
  lam_trainer *t = NULL;
  if (s == LAM_OK) s = make_model(ctx, path, &c, &m);
  if (s == LAM_OK && trainer) {
    s = lam_trainer_create(m, &c.opt, c.batch, c.seed, train, &t);
    if (s == LAM_OK) {
      t->rng = c.rng;
      t->epochs_done = c.epochs_done;
      t->step_done = c.step_done;
      t->epoch_rng = c.epoch_rng;
      memcpy(t->part, c.part, sizeof t->part);
      if (nn_lr_schedule_check(&c.lr_sched, "schedule") != LAM_OK) {
        char why[256]; /* the message is read before LAM_FAIL writes over it */
        snprintf(why, sizeof why, "%s", lam_last_error());
        s = CORRUPTED(path, "its learning-rate schedule is out of range: %s", why);
      } else {
        t->lr_sched = c.lr_sched;
      }
      if (c.step_done >= t->steps)
        s = LAM_FAIL(LAM_ERR_INVALID_ARG, "checkpoint '%s' stopped %d steps into an epoch, but an epoch of this data "
                     "set at batch %d has %d steps: resume on the data it was trained on", path, c.step_done, t->batch,
                     t->steps);
      if (s == LAM_OK) s = restore_opt(path, m, &c);
      if (s == LAM_OK && c.scaler) t->scaler = c.ls, t->scaler_set = 1;
    }
  }
  free(bytes);
  if (s != LAM_OK) {
    lam_trainer_free(t);
    lam_model_free(m);
    return s;
  }
  *model = m;
  if (trainer) *trainer = t;
  return LAM_OK;
}

/* The file at path parsed for its numbers alone: c's pointers into the file's bytes are gone on return. */
static lam_status parse_numbers(const char *path, ckpt *c) {
  uint8_t *bytes = NULL;
  size_t len = 0;
  LAM_TRY(read_file(path, &bytes, &len));
  lam_status s = parse(path, bytes, len, c);
  free(bytes);
  return s;
}

lam_status lam_checkpoint_fit(const char *path, int *h, int *w) {
  LAM_CHECK_ARG(path && h && w, "lam_checkpoint_fit: NULL argument");
  *h = *w = 0;
  ckpt c;
  lam_status s = parse_numbers(path, &c);
  if (s == LAM_OK) *h = c.fit_h, *w = c.fit_w;
  return s;
}

lam_status lam_checkpoint_clip(const char *path, int *frames, int *frame_stride) {
  LAM_CHECK_ARG(path && frames && frame_stride, "lam_checkpoint_clip: NULL argument");
  *frames = 1, *frame_stride = 0;
  ckpt c;
  lam_status s = parse_numbers(path, &c);
  if (s == LAM_OK) *frames = c.in_t, *frame_stride = c.fit_stride;
  return s;
}
