/* sample.c — streamed sets: a set whose samples are decoded from their files when they are asked for, so that a
 * set larger than memory trains in bounded memory (../shared/design/sample-sources.md). A source is anything that
 * can write sample i into a row (fill); an image folder (folder.c) and a mask folder (maskfolder.c) are sources.
 * The set (lam_dataset.source) holds a view of it: the samples of its part (all, or a split's rows), so a split
 * shares one source. lam_dataset_rows is the one way in: rows of a resident set are copied, rows of a streamed set
 * are decoded on all host threads (the pool), each into its place, so what a batch holds never depends on which
 * thread was quicker. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "../internal.h"
#include "../status.h"

typedef struct shared {
  _Atomic int refs;
  size_t n;
  lam_fill_fn fill;
  void (*drop)(void *state);
  void *state;
  int skip_bad;
  int c, h, w; /* a frame's channels and size: fill writes frames interleaved, the set keeps them planar */
  _Atomic size_t replaced;
} shared;

struct lam_source {
  shared *sh;
  size_t n;
  uint64_t draw; /* what fill gets: 0, or the trainer's key of the epoch */
  size_t *map; /* the part's samples of the source; NULL: all of them, in order */
  int clips;   /* 0 or 1: samples stand alone; K: K clips of a video in a row (a video folder's test part) */
};

lam_status lam_source_make(size_t n, int c, int h, int w, lam_fill_fn fill, void (*drop)(void *), void *state,
                           int skip_bad, lam_source **out) {
  *out = NULL;
  shared *sh = calloc(1, sizeof *sh);
  lam_source *s = calloc(1, sizeof *s);
  if (!sh || !s) {
    free(sh), free(s);
    drop(state);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "streamed set: no host memory");
  }
  atomic_init(&sh->refs, 1);
  atomic_init(&sh->replaced, 0);
  sh->n = n, sh->fill = fill, sh->drop = drop, sh->state = state, sh->skip_bad = skip_bad;
  sh->c = c, sh->h = h, sh->w = w;
  s->sh = sh, s->n = n;
  *out = s;
  return LAM_OK;
}

void lam_source_free(lam_source *s) {
  if (!s) return;
  if (atomic_fetch_sub(&s->sh->refs, 1) == 1) {
    s->sh->drop(s->sh->state);
    free(s->sh);
  }
  free(s->map);
  free(s);
}

lam_status lam_source_subset(const lam_source *s, const uint8_t *pick, uint8_t want, size_t n, lam_source **out) {
  *out = NULL;
  lam_source *v = calloc(1, sizeof *v);
  size_t *map = malloc((n ? n : 1) * sizeof *map);
  if (!v || !map) {
    free(v), free(map);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "streamed set: no host memory for a part of %zu samples", n);
  }
  for (size_t i = 0, j = 0; i < s->n && j < n; i++)
    if (pick[i] == want) map[j++] = s->map ? s->map[i] : i;
  atomic_fetch_add(&s->sh->refs, 1);
  v->sh = s->sh, v->n = n, v->map = map;
  *out = v;
  return LAM_OK;
}

void lam_source_set_draw(lam_source *s, uint64_t draw) {
  if (s) s->draw = draw;
}

void lam_source_set_clips(lam_source *s, int K) {
  if (s) s->clips = K;
}

int lam_source_clips(const lam_source *s) { return s && s->clips > 1 ? s->clips : 1; }

int lam_dataset_clips(const lam_dataset *d) { return d ? lam_source_clips(d->source) : 1; }

size_t lam_source_replaced(const lam_source *s) { return s ? atomic_load(&s->sh->replaced) : 0; }

void *lam_source_state(const lam_source *s, lam_fill_fn fill) { return s && s->sh->fill == fill ? s->sh->state : NULL; }

/* Sample k of the part into px and lab. With skip_bad a sample whose files fail (LAM_ERR_IO) is replaced by the
 * next one of the part that decodes, and counted; in a view of K clips a video, by the same clip of the next video,
 * so a video's K samples stay one video's. */
static lam_status fill_one(const lam_source *s, size_t k, uint8_t *px, uint8_t *lab) {
  lam_status st = LAM_OK;
  const size_t K = (size_t)lam_source_clips(s);
  for (size_t t = 0; t < s->n / K; t++) {
    const size_t at = (k + t * K) % s->n, j = s->map ? s->map[at] : at;
    st = s->sh->fill(s->sh->state, j, s->draw, px, lab);
    if (st == LAM_OK) {
      if (t) atomic_fetch_add(&s->sh->replaced, t);
      return LAM_OK;
    }
    if (!s->sh->skip_bad || st != LAM_ERR_IO) return st;
  }
  return LAM_FAIL(LAM_ERR_IO, "streamed set: none of its %zu samples could be decoded (--skip-bad left every one out)",
                  s->n);
}

typedef struct rows_job {
  const lam_source *s;
  const int32_t *idx;
  size_t per;                 /* rows a block: row r goes to block r / per, at place r % per */
  uint8_t *const *px, *const *lab;
  size_t sample, lsize;
  pthread_mutex_t mu;
  size_t bad_row; /* the first row (in order) that failed: its message is the one said */
  lam_status bad;
  char msg[1024];
} rows_job;

/* Row r: its sample filled, frames as the decoders give them (h, w, c), and made the set's (c, h, w): one frame
 * at a time through scratch where there are several channels, straight into place where there is one. */
static lam_status fill_row(const rows_job *j, size_t r, uint8_t *scratch) {
  const shared *sh = j->s->sh;
  const size_t b = r / j->per, at = r % j->per, frame = (size_t)sh->c * sh->h * sh->w;
  uint8_t *px = j->px[b] + at * j->sample;
  LAM_TRY(fill_one(j->s, (size_t)j->idx[r], sh->c > 1 ? scratch : px, j->lab[b] + at * j->lsize));
  for (size_t f = 0; sh->c > 1 && f < j->sample / frame; f++)
    image_planar(scratch + f * frame, sh->h, sh->w, sh->c, px + f * frame);
  return LAM_OK;
}

static void rows_chunk(void *arg, size_t begin, size_t end) {
  rows_job *j = arg;
  uint8_t *scratch = j->s->sh->c > 1 ? malloc(j->sample) : NULL;
  for (size_t r = begin; r < end; r++) {
    lam_status st = j->s->sh->c > 1 && !scratch
                        ? LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "streamed set: no host memory for a sample of %zu bytes",
                                   j->sample)
                        : fill_row(j, r, scratch);
    if (st == LAM_OK) continue;
    pthread_mutex_lock(&j->mu);
    if (r < j->bad_row) { /* lam_last_error is this thread's */
      j->bad_row = r, j->bad = st;
      snprintf(j->msg, sizeof j->msg, "%s", lam_last_error());
    }
    pthread_mutex_unlock(&j->mu);
  }
  free(scratch);
}

lam_status lam_dataset_rows_blocks(const lam_dataset *d, const int32_t *idx, size_t n, size_t per,
                                   uint8_t *const *images, uint8_t *const *labels) {
  LAM_CHECK_ARG(d && (idx || !n) && per >= 1, "lam_dataset_rows: %s", !d ? "the set is NULL" : per ? "idx is NULL"
                                                                                                  : "0 rows a block");
  const size_t sample = lam_dataset_sample_bytes(d);
  const size_t lsize = d->label_h > 0 && d->label_w > 0 ? (size_t)d->label_h * d->label_w : 1;
  for (size_t r = 0; r < n; r++)
    LAM_CHECK_ARG(idx[r] >= 0 && (size_t)idx[r] < d->n, "lam_dataset_rows: row %zu asks for sample %d of %zu", r,
                  idx[r], d->n);
  if (!d->source) {
    LAM_CHECK_ARG(d->images && d->labels, "lam_dataset_rows: the set has no images");
    for (size_t r = 0; r < n; r++) {
      const size_t b = r / per, at = r % per;
      if (images) memcpy(images[b] + at * sample, d->images + (size_t)idx[r] * sample, sample);
      if (labels) memcpy(labels[b] + at * lsize, d->labels + (size_t)idx[r] * lsize, lsize);
    }
    return LAM_OK;
  }
  /* a source writes both: what the caller does not want goes to scratch rows */
  const size_t blocks = (n + per - 1) / per;
  uint8_t *scratch_px = images ? NULL : malloc(per * sample + 1), *scratch_lab = labels ? NULL : malloc(per * lsize + 1);
  uint8_t **px = malloc((blocks + 1) * sizeof *px), **lab = malloc((blocks + 1) * sizeof *lab);
  lam_status s = LAM_OK;
  if (!px || !lab || (!images && !scratch_px) || (!labels && !scratch_lab))
    s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_dataset_rows: no host memory for %zu rows", n);
  for (size_t b = 0; s == LAM_OK && b < blocks; b++) /* scratch rows are shared: written, never read */
    px[b] = images ? images[b] : scratch_px, lab[b] = labels ? labels[b] : scratch_lab;
  if (s == LAM_OK && n) {
    rows_job j = {.s = d->source, .idx = idx, .per = per, .px = px, .lab = lab, .sample = sample, .lsize = lsize,
                  .bad_row = (size_t)-1};
    pthread_mutex_init(&j.mu, NULL);
    lam_pool_for(n, 1, rows_chunk, &j);
    pthread_mutex_destroy(&j.mu);
    if (j.bad_row != (size_t)-1) s = LAM_FAIL(j.bad, "%s", j.msg);
  }
  free(px), free(lab), free(scratch_px), free(scratch_lab);
  return s;
}

lam_status lam_dataset_rows(const lam_dataset *d, const int32_t *idx, size_t n, uint8_t *images, uint8_t *labels) {
  return lam_dataset_rows_blocks(d, idx, n, n ? n : 1, images ? &images : NULL, labels ? &labels : NULL);
}

size_t lam_dataset_replaced(const lam_dataset *d) { return d ? lam_source_replaced(d->source) : 0; }

/* /proc/meminfo's MemAvailable, and the cgroup v2 limit less its use where that is lower; 0 where neither is known. */
size_t lam_mem_available(void) {
  unsigned long long avail = 0, v;
  char line[256];
  FILE *f = fopen("/proc/meminfo", "r");
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %llu kB", &v) == 1) avail = v * 1024;
  if (f) fclose(f);
  unsigned long long max = 0, cur = 0;
  f = fopen("/sys/fs/cgroup/memory.max", "r");
  if (f && fscanf(f, "%llu", &max) != 1) max = 0; /* "max": no limit */
  if (f) fclose(f);
  f = fopen("/sys/fs/cgroup/memory.current", "r");
  if (f && fscanf(f, "%llu", &cur) != 1) cur = 0;
  if (f) fclose(f);
  if (max && max > cur && (!avail || max - cur < avail)) avail = max - cur;
  return (size_t)avail;
}

int lam_stream_wanted(lam_image_opts *o, size_t part_bytes) {
  o->part_bytes = part_bytes;
  if (o->stream != LAM_STREAM_AUTO) return o->stream == LAM_STREAM_ON;
  return part_bytes > (o->memory_cap ? o->memory_cap : lam_mem_available() / 4 * 3);
}
