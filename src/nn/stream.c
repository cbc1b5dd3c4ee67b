/* stream.c — streaming batches. Per slot k (of nbuf): a pinned host buffer the loader thread fills,
 * a device buffer the copy queue fills from it, and two events: copied[k] (queue 1, the copy landed:
 * the host buffer may be refilled) and consumed[k] (queue 0, the batch was normalized into the
 * model's input: the device buffer may be overwritten). A slot's host buffer holds batch*sample
 * pixels then batch*label_size labels, so one copy moves both.
 *
 * Steady state: the loader runs up to nbuf batches ahead; the training loop queues copy i+1 on
 * queue 1 while queue 0 still computes step i, so the device finds each batch already there. The
 * device's wait is measured by a pair of events around queue 0's wait for each copy. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../math/hash.h"
#include "../internal.h"
#include "rng.h"
#include "stream.h"

/* Slots: the 2 or 3 asked for, more where batches are small (feed_create), up to MAX_BUF. */
#define MAX_BUF 8
#define EV_COPIED(k) ((size_t)(k))
#define EV_CONSUMED(k) ((size_t)MAX_BUF + (k))
#define EV_WAIT(i) ((size_t)2 * MAX_BUF + 2 * (size_t)(i)) /* and + 1: before and after queue 0's wait */

struct lam_feed {
  lam_ctx *ctx;
  int nbuf, batch;
  int asked; /* the buffers asked for (feed_buffers); nbuf may be more */
  int want;  /* batches a pass of the pool fills, when it need not hurry (loader) */
  size_t sample, label_size, slot_bytes;
  uint8_t *h_buf[MAX_BUF]; /* pinned: (batch, sample) pixels, then (batch, label_size) labels */
  uint8_t *d_buf[MAX_BUF];
  int32_t *d_iota;         /* 0 .. batch-1: the gather op reads a slot in order */
  /* this epoch */
  const lam_dataset *set;
  const int32_t *idx;
  size_t n;
  int steps, next;          /* batches in the epoch; the next one feed_next hands out */
  pthread_t thread;
  int running;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int filled[MAX_BUF];       /* the step whose batch the loader put in h_buf[k]; -1: free */
  int in_copy[MAX_BUF];      /* a copy from h_buf[k] was queued: sync copied[k] before refilling */
  int stop;                  /* the loop failed or finished early: the loader quits */
  lam_status loader_status;
  char loader_error[1024];
  double loader_wait_ms;
};

/* The loader's failure, said to the loop (which reports it at the batch it waits for). */
static void loader_fail(lam_feed *f, lam_status s) {
  pthread_mutex_lock(&f->mu);
  f->loader_status = s;
  snprintf(f->loader_error, sizeof f->loader_error, "%s", lam_last_error());
  f->stop = 1;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
}

/* Free slots in a row from batch i's (at most the batches left). */
static int free_from(const lam_feed *f, int i) {
  int g = 0;
  while (g < f->nbuf && i + g < f->steps && f->filled[(i + g) % f->nbuf] == -1) g++;
  return g;
}

/* Whether a batch waits in a slot for the loop. */
static int any_filled(const lam_feed *f) {
  for (int k = 0; k < f->nbuf; k++)
    if (f->filled[k] != -1) return 1;
  return 0;
}

/* Fills the batches in order. Every batch whose buffer is free by then is filled in the same pass of the pool (up
 * to nbuf): a streamed set's rows are decoded a batch's worth per thread wake-up, and one slow file holds up the
 * batches together, not each in turn. While the loop still has a batch to go on with, a pass waits until `want`
 * slots are free: else, decode-bound, each pass would find the one slot the loop just gave back, and a pass of one
 * small batch leaves most threads idle (8 clips on 16 threads: 3,087 clips/s where the decoder alone gave 7,206). */
static void *loader(void *arg) {
  lam_feed *f = arg;
  const lam_backend *be = f->ctx->be;
  for (int i = 0; i < f->steps;) {
    pthread_mutex_lock(&f->mu);
    const int want = f->want < f->steps - i ? f->want : f->steps - i;
    while (!f->stop && (f->filled[i % f->nbuf] != -1 || (free_from(f, i) < want && any_filled(f))))
      pthread_cond_wait(&f->cv, &f->mu);
    int g = f->stop ? 0 : free_from(f, i), stop = f->stop, in_copy[MAX_BUF];
    for (int q = 0; q < g; q++) in_copy[q] = f->in_copy[(i + q) % f->nbuf];
    pthread_mutex_unlock(&f->mu);
    if (stop) break;
    lam_status s = LAM_OK;
    uint8_t *px[MAX_BUF], *lb[MAX_BUF];
    for (int q = 0; q < g && s == LAM_OK; q++) {
      const int k = (i + q) % f->nbuf;
      if (in_copy[q]) s = be->queue->event_sync(f->ctx, EV_COPIED(k)); /* the copy out of it must be done first */
      px[q] = f->h_buf[k], lb[q] = f->h_buf[k] + (size_t)f->batch * f->sample;
    }
    const size_t off = (size_t)i * f->batch, end = off + (size_t)g * f->batch < f->n ? off + (size_t)g * f->batch : f->n;
    if (s == LAM_OK) s = lam_dataset_rows_blocks(f->set, f->idx + off, end - off, (size_t)f->batch, px, lb);
    if (s != LAM_OK) { /* a file that does not decode: the loop says so at this batch */
      loader_fail(f, s);
      break;
    }
    pthread_mutex_lock(&f->mu);
    for (int q = 0; q < g; q++) f->filled[(i + q) % f->nbuf] = i + q, f->in_copy[(i + q) % f->nbuf] = 0;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    i += g;
  }
  return NULL;
}

void feed_free(lam_feed *f) {
  if (!f) return;
  if (f->running) {
    double a, b;
    feed_finish(f, &a, &b);
  }
  f->ctx->be->queue->sync(f->ctx);
  for (int k = 0; k < f->nbuf; k++) {
    if (f->h_buf[k]) f->ctx->be->mem->host_free(f->ctx, f->h_buf[k]);
    lam_mem_free(f->ctx, f->d_buf[k]);
  }
  lam_mem_free(f->ctx, f->d_iota);
  pthread_mutex_destroy(&f->mu);
  pthread_cond_destroy(&f->cv);
  free(f);
}

lam_status feed_create(lam_ctx *ctx, int nbuf, int batch, size_t sample, size_t label_size, lam_feed **out) {
  LAM_CHECK_ARG(nbuf >= 2 && nbuf <= 3, "streaming: %d buffers (use 2 or 3)", nbuf);
  LAM_CHECK_ARG(batch >= 1, "streaming: batches of %d samples", batch);
  *out = NULL;
  lam_feed *f = calloc(1, sizeof *f);
  if (!f) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "streaming: no host memory");
  f->ctx = ctx;
  f->asked = nbuf;
  /* a pass of the pool wants rows for every thread twice over (a slow file's row then holds up half the threads,
   * not all): batches smaller than that get more slots, one more than a pass fills so the loop has one meanwhile.
   * Small batches make small slots (8 clips of 16 frames at 112x112: 1.6 MB). */
  const int rows = 2 * lam_pool_threads(), passes = (rows + batch - 1) / batch;
  f->want = passes < 1 ? 1 : passes > MAX_BUF - 1 ? MAX_BUF - 1 : passes;
  if (f->want > nbuf - 1) nbuf = f->want + 1;
  if (f->want > nbuf - 1) f->want = nbuf - 1;
  f->nbuf = nbuf;
  f->batch = batch;
  f->sample = sample;
  f->label_size = label_size;
  f->slot_bytes = (size_t)batch * (sample + label_size);
  pthread_mutex_init(&f->mu, NULL);
  pthread_cond_init(&f->cv, NULL);
  lam_status s = LAM_OK;
  for (int k = 0; k < nbuf && s == LAM_OK; k++) {
    s = ctx->be->mem->host_alloc(ctx, (void **)&f->h_buf[k], f->slot_bytes);
    if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&f->d_buf[k], f->slot_bytes);
    if (s == LAM_OK) memset(f->h_buf[k], 0, f->slot_bytes); /* a short last batch copies defined bytes */
  }
  int32_t *iota = malloc((size_t)batch * sizeof *iota);
  if (s == LAM_OK && !iota) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "streaming: no host memory");
  if (s == LAM_OK) {
    for (int i = 0; i < batch; i++) iota[i] = i;
    s = lam_mem_alloc(ctx, (void **)&f->d_iota, (size_t)batch * sizeof *iota);
  }
  if (s == LAM_OK) s = lam_mem_upload(ctx, f->d_iota, iota, (size_t)batch * sizeof *iota);
  free(iota);
  if (s != LAM_OK) {
    feed_free(f);
    return s;
  }
  *out = f;
  return LAM_OK;
}

size_t feed_device_bytes(const lam_feed *f) {
  return (size_t)f->nbuf * lam_cache_round(f->slot_bytes) + lam_cache_round((size_t)f->batch * sizeof(int32_t));
}

int feed_buffers(const lam_feed *f) { return f->asked; }

lam_status feed_start(lam_feed *f, const lam_dataset *d, const int32_t *idx, size_t n) {
  LAM_CHECK_ARG(!f->running, "streaming: an epoch is already running");
  f->set = d;
  f->idx = idx;
  f->n = n;
  f->steps = (int)((n + (size_t)f->batch - 1) / (size_t)f->batch);
  f->next = 0;
  f->stop = 0;
  f->loader_status = LAM_OK;
  f->loader_wait_ms = 0;
  for (int k = 0; k < f->nbuf; k++) f->filled[k] = -1;
  /* in_copy[] carries over: a buffer's last copy of the previous epoch may still be in flight */
  LAM_TRY(f->ctx->be->queue->event_reserve(f->ctx, EV_WAIT(f->steps) + 2));
  int e = pthread_create(&f->thread, NULL, loader, f);
  if (e) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "streaming: could not start the loader thread (error %d)", e);
  f->running = 1;
  return LAM_OK;
}

lam_status feed_next(lam_feed *f, int T, int C, size_t P, const lam_norm *norm, const lam_aug *aug, lam_fmt fmt, void *x,
                     uint8_t *y) {
  lam_ctx *ctx = f->ctx;
  const lam_backend *be = ctx->be;
  int i = f->next, k = i % f->nbuf;
  LAM_CHECK_ARG(f->running && i < f->steps, "streaming: no batch %d in this epoch", i);
  double t0 = lam_now_ms();
  pthread_mutex_lock(&f->mu);
  while (f->filled[k] != i && !f->stop) pthread_cond_wait(&f->cv, &f->mu);
  lam_status ls = f->loader_status;
  pthread_mutex_unlock(&f->mu);
  f->loader_wait_ms += lam_now_ms() - t0;
  if (ls != LAM_OK) return LAM_FAIL(ls, "streaming: the loader thread failed: %s", f->loader_error);
  size_t off = (size_t)i * f->batch;
  int B = (int)(f->n - off < (size_t)f->batch ? f->n - off : (size_t)f->batch);
  /* the device buffer is free once the batch it held (i - nbuf) was normalized */
  if (i >= f->nbuf) LAM_TRY(be->queue->queue_wait(ctx, 1, EV_CONSUMED(k)));
  LAM_TRY(be->queue->copy_async(ctx, 1, f->d_buf[k], f->h_buf[k], f->slot_bytes));
  LAM_TRY(be->queue->event_record(ctx, EV_COPIED(k), 1));
  pthread_mutex_lock(&f->mu);
  f->filled[k] = -1;
  f->in_copy[k] = 1;
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  LAM_TRY(be->queue->event_record(ctx, EV_WAIT(i), 0));
  LAM_TRY(be->queue->queue_wait(ctx, 0, EV_COPIED(k)));
  LAM_TRY(be->queue->event_record(ctx, EV_WAIT(i) + 1, 0));
  if (x) /* else only the copy (lam_data_bench: the data path alone) */
    LAM_TRY(be->prim->gather(ctx, B, T, C, P, f->d_buf[k], f->label_size, f->d_buf[k] + (size_t)f->batch * f->sample,
                       f->d_iota, NULL, norm, aug, fmt, x, y));
  LAM_TRY(be->queue->event_record(ctx, EV_CONSUMED(k), 0));
  f->next++;
  return LAM_OK;
}

lam_status feed_finish(lam_feed *f, double *data_wait_ms, double *loader_wait_ms) {
  *data_wait_ms = *loader_wait_ms = 0;
  if (!f->running) return LAM_OK;
  pthread_mutex_lock(&f->mu);
  f->stop = 1; /* a loop that ended early leaves the loader waiting for a slot */
  pthread_cond_broadcast(&f->cv);
  pthread_mutex_unlock(&f->mu);
  pthread_join(f->thread, NULL);
  f->running = 0;
  lam_status s = f->ctx->be->queue->sync(f->ctx);
  double sum = 0;
  for (int i = 0; i < f->next && s == LAM_OK; i++) {
    double ms = 0;
    s = f->ctx->be->queue->event_ms(f->ctx, EV_WAIT(i), EV_WAIT(i) + 1, &ms);
    sum += ms;
  }
  *data_wait_ms = sum;
  *loader_wait_ms = f->loader_wait_ms;
  return s;
}

lam_status lam_data_bench(lam_ctx *ctx, const lam_dataset *d, int batch, int buffers, uint64_t seed, int epoch,
                          lam_data_bench_epoch *out) {
  LAM_CHECK_ARG(ctx && d && out, "lam_data_bench: %s is NULL", !ctx ? "ctx" : !d ? "the set" : "out");
  LAM_CHECK_ARG(d->n > 0 && d->n <= (size_t)INT32_MAX && ((d->images && d->labels) || d->source),
                "lam_data_bench: the set is empty");
  LAM_CHECK_ARG(batch >= 1 && batch <= 65536, "lam_data_bench: batch %d is out of range (1 to 65536)", batch);
  const size_t L = d->label_h > 0 && d->label_w > 0 ? (size_t)d->label_h * d->label_w : 1;
  int32_t *idx = malloc(d->n * sizeof *idx);
  if (!idx) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_data_bench: no host memory for %zu indices", d->n);
  lam_rng r; /* a Fisher-Yates order as the trainer's */
  lam_rng_seed(&r, seed ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(epoch + 1)));
  for (size_t i = 0; i < d->n; i++) idx[i] = (int32_t)i;
  for (size_t i = d->n - 1; i > 0; i--) {
    size_t j = (size_t)lam_rng_below(&r, i + 1);
    int32_t t = idx[i];
    idx[i] = idx[j], idx[j] = t;
  }
  /* a streamed set's random choices of the epoch (a video's clip start) as the trainer draws them for this seed and
   * epoch: a video folder's epoch decodes the clips training would, not the middle clip each time */
  if (d->source) lam_source_set_draw(d->source, lam_draw_key(seed ^ 0x636c6970ULL, epoch) | 1);
  lam_feed *f = NULL;
  lam_status s = feed_create(ctx, buffers, batch, lam_dataset_sample_bytes(d), L, &f);
  const double t0 = lam_now_ms();
  if (s == LAM_OK) s = feed_start(f, d, idx, d->n);
  for (size_t off = 0; off < d->n && s == LAM_OK; off += (size_t)batch)
    s = feed_next(f, 1, 1, 1, NULL, NULL, LAM_FMT_NCHW, NULL, NULL); /* the copy alone: no model to feed */
  double copy_ms = 0, loader_ms = 0;
  if (f) {
    lam_status fs = feed_finish(f, &copy_ms, &loader_ms); /* synchronizes: the last copy has landed */
    if (s == LAM_OK) s = fs;
  }
  const double secs = (lam_now_ms() - t0) / 1e3;
  feed_free(f);
  free(idx);
  if (s != LAM_OK) return s;
  *out = (lam_data_bench_epoch){.seconds = secs, .images_per_s = secs > 0 ? (double)d->n / secs : 0,
                                .loader_wait_ms = loader_ms, .copy_wait_ms = copy_ms};
  return LAM_OK;
}
