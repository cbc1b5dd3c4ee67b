/* train.c — training and evaluation. The data set goes to the backend once, as uint8; each step
 * gathers and normalizes its batch there (gather), runs forward, loss, backward and the optimizer (on
 * CUDA all of it one graph replay: the batch's offset and the optimizer's per-step scalars are read on
 * the device, from a cursor and a table filled each epoch), and never waits for the host: losses and
 * accuracy accumulate in m->stats and are read once per epoch (or when a progress callback asks). The shuffle is a seeded Fisher-Yates on the host, one
 * upload of the index order per epoch. A set that does not fit (or when asked) streams instead:
 * stream.c brings each batch in while the previous one computes, in the same shuffled order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../math/hash.h"
#include "nn.h"
#include "rng.h"
#include "train.h"

/* A sample's channels (1 for a set that does not say). */
static int channels(const lam_dataset *d) { return d->c > 0 ? d->c : 1; }
static int frames(const lam_dataset *d) { return d->t > 0 ? d->t : 1; }
static size_t labels_per_image(const lam_dataset *d) {
  return d->label_h > 0 && d->label_w > 0 ? (size_t)d->label_h * d->label_w : 1;
}

static lam_status check_data(const lam_model *m, const lam_dataset *d, const char *fn) {
  LAM_CHECK_ARG(d && ((d->images && d->labels) || d->source), "%s: the data set is NULL or empty", fn);
  LAM_CHECK_ARG(d->n > 0 && d->n <= (size_t)INT32_MAX, "%s: the data set has %zu images", fn, d->n);
  LAM_CHECK_ARG(m->in_c != channels(d) || (m->in_h == d->h && m->in_w == d->w),
                "%s: the model takes %dx%dx%d inputs but the images are %dx%dx%d: fit an image folder's images to the "
                "model with --size %dx%d", fn, m->in_c, m->in_h, m->in_w, channels(d), d->h, d->w, m->in_h, m->in_w);
  LAM_CHECK_ARG(m->in_c == channels(d), "%s: the model takes %dx%dx%d inputs but the images are %dx%dx%d", fn, m->in_c,
                m->in_h, m->in_w, channels(d), d->h, d->w);
  LAM_CHECK_ARG(m->in_t == frames(d), "%s: the model takes %d frame(s) a sample but the data set's samples have %d "
                "(clips need a model made for their length: lam_model_create_clip, or lamina train on the clips)", fn,
                m->in_t, frames(d));
  const nn_tensor *out = &m->tensor[m->output];
  LAM_CHECK_ARG(d->classes <= LAM_LABEL_IGNORE, "%s: %d classes: training takes at most %d (label %d means 'ignore')",
                fn, d->classes, LAM_LABEL_IGNORE, LAM_LABEL_IGNORE);
  LAM_CHECK_ARG(out->c == d->classes,
                "%s: the model gives %d outputs (classes) but the data set has %d classes (its largest label + 1, or "
                "--classes): end the model with a layer of %d outputs, or give --classes %d", fn, out->c, d->classes,
                d->classes, out->c);
  if (labels_per_image(d) == 1)
    LAM_CHECK_ARG(out->h == 1 && out->w == 1,
                  "%s: the model gives %dx%dx%d per image but the data has one label per image: end the model with "
                  "'flatten, dense %d' (or 'gap')", fn, out->c, out->h, out->w, d->classes);
  else
    LAM_CHECK_ARG(out->h == d->label_h && out->w == d->label_w,
                  "%s: the model gives %dx%dx%d per image but the labels are per pixel, %dx%d: its output must be "
                  "%dx%dx%d", fn, out->c, out->h, out->w, d->label_h, d->label_w, d->classes, d->label_h, d->label_w);
  LAM_CHECK_ARG(m->norm.c == channels(d), "%s: the model normalizes %d channels but the images have %d", fn, m->norm.c,
                channels(d));
  return LAM_OK;
}

/* Copies a data set to backend memory (uint8, as it is). */
static lam_status upload_set(lam_ctx *ctx, const lam_dataset *d, uint8_t **images, uint8_t **labels) {
  size_t bytes = d->n * lam_dataset_sample_bytes(d), lbytes = d->n * labels_per_image(d);
  *images = *labels = NULL;
  LAM_TRY(lam_mem_alloc(ctx, (void **)images, bytes));
  LAM_TRY(lam_mem_upload(ctx, *images, d->images, bytes));
  LAM_TRY(lam_mem_alloc(ctx, (void **)labels, lbytes));
  LAM_TRY(lam_mem_upload(ctx, *labels, d->labels, lbytes));
  return LAM_OK;
}

/* Training over ranks: several, or a GPU communicator of one (the same path, for tests). */
static int ranked(const lam_trainer *t) { return t->coll.world > 1 || t->comm; }

/* The fp16 precision scales its loss (prims.h: lam_scaler); the state is made at its first epoch. */
static int scaling(const lam_trainer *t) { return t->m->ctx->precision == LAM_PRECISION_FP16 && t->d_scaler; }

/* The scaler at an epoch's start: made (from 2^16, Adam's steps so far counted as taken) unless a checkpoint or an
 * earlier epoch left one, and put on the device with this step's found flag clear. */
static lam_status scaler_start(lam_trainer *t) {
  lam_model *m = t->m;
  if (m->ctx->precision != LAM_PRECISION_FP16) return LAM_OK;
  if (!t->d_scaler) {
    LAM_TRY(lam_mem_alloc(m->ctx, (void **)&t->d_scaler, sizeof *t->d_scaler));
    m->gen++; /* a step captured without it is stale */
  }
  if (!t->scaler_set) {
    t->scaler = (lam_scaler){.scale = LAM_SCALE_INIT, .inv = 1.0f / LAM_SCALE_INIT, .taken = (int32_t)m->opt_step};
    t->scaler_set = 1;
  }
  t->scaler.found = 0, t->scaler.stuck = 0;
  return lam_mem_upload(m->ctx, t->d_scaler, &t->scaler, sizeof t->scaler);
}

/* The scaler's state read back where the epoch's statistics are (its end, or a stop): no step waits for it. */
static lam_status scaler_read(lam_trainer *t) {
  if (!scaling(t)) return LAM_OK;
  return lam_mem_download(t->m->ctx, &t->scaler, t->d_scaler, sizeof t->scaler);
}

lam_status lam_trainer_loss_scale(const lam_trainer *t, double *scale, long *skipped) {
  LAM_CHECK_ARG(t && scale && skipped, "lam_trainer_loss_scale: NULL argument");
  *scale = t->scaler_set ? (double)t->scaler.scale : 0.0;
  *skipped = t->scaler_set ? (long)t->scaler.skipped : 0;
  return LAM_OK;
}

void lam_trainer_free(lam_trainer *t) {
  if (!t) return;
  lam_ctx *ctx = t->m->ctx;
  ctx->be->queue->sync(ctx);
  feed_free(t->feed);
  if (t->graph) ctx->be->queue->graph_free(ctx, t->graph);
  t->m->prof = NULL;
  prof_free(&t->prof);
  lam_mem_free(ctx, t->d_images);
  lam_mem_free(ctx, t->d_labels);
  lam_mem_free(ctx, t->d_idx);
  lam_mem_free(ctx, t->d_state);
  lam_mem_free(ctx, t->d_sched);
  lam_mem_free(ctx, t->d_scaler);
  free(t->h_idx);
  free(t->h_sched);
  free(t->h_sum);
  if (t->comm) ctx->be->comm->free(ctx, t->comm);
  free(t);
}

static void free_resident(lam_trainer *t) {
  lam_ctx *ctx = t->m->ctx;
  ctx->be->queue->sync(ctx);
  lam_mem_free(ctx, t->d_images);
  lam_mem_free(ctx, t->d_labels);
  lam_mem_free(ctx, t->d_idx);
  t->d_images = t->d_labels = NULL;
  t->d_idx = NULL;
}

/* The set on the device: pixels, labels and the index order; on failure none of it is left. */
static lam_status make_resident(lam_trainer *t) {
  lam_ctx *ctx = t->m->ctx;
  lam_status s = upload_set(ctx, t->host, &t->d_images, &t->d_labels);
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&t->d_idx, t->n * sizeof(int32_t));
  if (s != LAM_OK) free_resident(t);
  return s;
}

/* Streams through `buffers` pinned buffers from now on; why is what lam_trainer_stream_stats reports. */
static lam_status make_streaming(lam_trainer *t, int buffers, const char *why) {
  free_resident(t); /* first, so the memory is there for the buffers */
  feed_free(t->feed);
  t->feed = NULL;
  snprintf(t->stream_why, sizeof t->stream_why, "%s", why);
  return feed_create(t->m->ctx, buffers, t->batch, t->sample, t->label_size, &t->feed);
}

lam_status lam_trainer_create(lam_model *m, const lam_opt *opt, int batch, uint64_t seed, const lam_dataset *train,
                              lam_trainer **out) {
  LAM_CHECK_ARG(m && opt && out, "lam_trainer_create: %s is NULL", !m ? "model" : !opt ? "opt" : "out");
  *out = NULL;
  LAM_TRY(check_data(m, train, "lam_trainer_create"));
  LAM_CHECK_ARG(batch >= 1 && batch <= 65536, "lam_trainer_create: batch %d is out of range (1 to 65536)", batch);
  lam_trainer *t = calloc(1, sizeof *t);
  if (!t) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_trainer_create: no host memory");
  t->m = m;
  t->opt = *opt;
  t->batch = batch;
  t->n = train->n;
  t->sample = lam_dataset_sample_bytes(train);
  t->label_size = labels_per_image(train);
  t->seed = seed;
  t->coll = (lam_collective){.rank = 0, .world = 1};
  lam_rng_seed(&t->rng, seed);
  t->host = train;
  lam_status s = LAM_OK;
  t->steps = (int)((t->n + (size_t)batch - 1) / (size_t)batch);
  t->h_idx = malloc(t->n * sizeof *t->h_idx);
  t->lr_sched = (lam_lr_schedule){.kind = LAM_LR_CONSTANT, .epochs = 1, .step_epochs = 1, .gamma = 1.0};
  t->h_sched = malloc((size_t)t->steps * NN_SCHED_COLS * sizeof *t->h_sched);
  if (!t->h_idx || !t->h_sched)
    s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_trainer_create: no host memory for %zu indices", t->n);
  if (s == LAM_OK) s = nn_opt_prepare(m, opt);
  if (s == LAM_OK) s = lam_mem_alloc(m->ctx, (void **)&t->d_state, 2 * sizeof(int32_t));
  if (s == LAM_OK) s = lam_mem_alloc(m->ctx, (void **)&t->d_sched, (size_t)t->steps * NN_SCHED_COLS * sizeof(float));
  if (s == LAM_OK) s = nn_model_reserve(m, batch);
  if (s == LAM_OK && train->source) {
    s = make_streaming(t, 3, "a streamed set: decoded from its files as it trains");
  } else if (s == LAM_OK) {
    s = make_resident(t);
    if (s == LAM_ERR_OUT_OF_MEMORY) { /* the set does not fit: stream it */
      /* A reason of its own, short enough for stream_why (and lam_stream_stats.why, 200 bytes): the allocator's
       * message, cut to fit, ended mid-sentence. */
      const lam_cache *c = &m->ctx->cache;
      char why[sizeof t->stream_why];
      const double mb = (double)t->n * (t->sample + t->label_size) / 1e6;
      if (c->limit && !c->limit_auto)
        snprintf(why, sizeof why, "the data set (%.1f MB) does not fit under the memory cap (%.1f MB, --max-memory) "
                 "beside the model%s", mb, (double)c->limit / 1e6, c->held ? " and the host's copy of the set" : "");
      else
        snprintf(why, sizeof why, "the data set (%.1f MB) does not fit in the %s memory left beside the model", mb,
                 m->ctx->device == LAM_DEVICE_CPU ? "host" : "device");
      s = make_streaming(t, 3, why);
    }
  }
  if (s != LAM_OK) {
    lam_trainer_free(t);
    return s;
  }
  *out = t;
  return LAM_OK;
}

/* Drops the captured step. A graph is tied to the data mode it was captured in: on the H200 (CUDA
 * 13.0) a graph captured while streaming failed to launch (cudaErrorInvalidValue) once the streaming
 * buffers had been freed, so every change of mode captures afresh. */
static void drop_graph(lam_trainer *t) {
  lam_ctx *ctx = t->m->ctx;
  if (!t->graph) return;
  ctx->be->queue->sync(ctx);
  ctx->be->queue->graph_free(ctx, t->graph);
  t->graph = NULL;
}

lam_status lam_trainer_set_stream(lam_trainer *t, int buffers) {
  LAM_CHECK_ARG(t, "lam_trainer_set_stream: trainer is NULL");
  LAM_CHECK_ARG(buffers == 0 || buffers == 2 || buffers == 3,
                "lam_trainer_set_stream: %d buffers (0: resident; 2 or 3: streaming)", buffers);
  LAM_CHECK_ARG(buffers == 0 || !ranked(t),
                "lam_trainer_set_stream: the trainer trains over %d ranks, which do not stream yet", t->coll.world);
  int now = t->feed ? feed_buffers(t->feed) : 0;
  if (buffers == now) return LAM_OK;
  drop_graph(t);
  if (buffers == 0) {
    LAM_CHECK_ARG(t->host && t->host->images, "lam_trainer_set_stream: the trainer's set %s",
                  t->host && t->host->source ? "is streamed from its files (lam_image_opts.stream): it is never held "
                                               "whole, so it cannot be resident"
                                             : "is not there to upload");
    feed_free(t->feed); /* first, so the memory is there for the set */
    t->feed = NULL;
    lam_status s = make_resident(t);
    if (s == LAM_OK) {
      t->stream_why[0] = 0;
      return LAM_OK;
    }
    /* the set does not fit: keep streaming, for the reason it streamed before, and say why the switch failed */
    char why[512], before[sizeof t->stream_why];
    snprintf(why, sizeof why, "%s", lam_last_error());
    memcpy(before, t->stream_why, sizeof before);
    if (make_streaming(t, now, before) != LAM_OK) t->feed = NULL;
    return LAM_FAIL(s, "lam_trainer_set_stream: the data set does not fit on the device (%s); the trainer %s", why,
                    t->feed ? "keeps streaming" : "has no data on the device now");
  }
  return make_streaming(t, buffers, "asked for");
}

lam_status lam_trainer_stream_stats(const lam_trainer *t, lam_stream_stats *out) {
  LAM_CHECK_ARG(t && out, "lam_trainer_stream_stats: %s is NULL", t ? "out" : "trainer");
  *out = (lam_stream_stats){.epoch_ms = t->epoch_ms, .data_wait_ms = t->data_wait_ms, .loader_wait_ms = t->loader_wait_ms};
  if (t->feed) {
    out->buffers = feed_buffers(t->feed);
    snprintf(out->why, sizeof out->why, "%s", t->stream_why);
  }
  return LAM_OK;
}

int lam_trainer_epochs_done(const lam_trainer *t) { return t ? t->epochs_done : 0; }
int lam_trainer_steps_in_epoch(const lam_trainer *t) { return t ? t->step_done : 0; }
lam_status lam_trainer_set_stop(lam_trainer *t, const volatile int *flag) {
  LAM_CHECK_ARG(t, "lam_trainer_set_stop: trainer is NULL");
  t->stop = flag;
  return LAM_OK;
}

lam_status lam_trainer_set_lr_schedule(lam_trainer *t, const lam_lr_schedule *s) {
  LAM_CHECK_ARG(t, "lam_trainer_set_lr_schedule: trainer is NULL");
  LAM_TRY(nn_lr_schedule_check(s, "lam_trainer_set_lr_schedule"));
  t->lr_sched = *s;
  return LAM_OK;
}

lam_status lam_trainer_lr_schedule(const lam_trainer *t, lam_lr_schedule *s) {
  LAM_CHECK_ARG(t && s, "lam_trainer_lr_schedule: NULL argument");
  *s = t->lr_sched;
  return LAM_OK;
}

double lam_trainer_lr(const lam_trainer *t) {
  if (!t) return 0.0;
  long last = (long)t->epochs_done * t->steps + t->step_done - 1;
  return (float)lam_lr_at(&t->lr_sched, t->opt.lr, last < 0 ? 0 : last, t->steps); /* as the table holds it */
}

lam_status lam_trainer_config(const lam_trainer *t, lam_opt *opt, int *batch) {
  LAM_CHECK_ARG(t && opt && batch, "lam_trainer_config: NULL argument");
  *opt = t->opt;
  *batch = t->batch;
  return LAM_OK;
}

lam_status lam_trainer_set_opt(lam_trainer *t, const lam_opt *opt) {
  LAM_CHECK_ARG(t && opt, "lam_trainer_set_opt: %s is NULL", t ? "opt" : "trainer");
  LAM_TRY(lam_opt_check(opt));
  LAM_CHECK_ARG(opt->kind == t->opt.kind, "lam_trainer_set_opt: the optimizer kind %d differs from the trainer's %d: "
                "its state (momentum, moments) is of that kind; make a new trainer to change it", (int)opt->kind,
                (int)t->opt.kind);
  t->opt = *opt;
  drop_graph(t); /* a captured step holds momentum and weight decay by value */
  return LAM_OK;
}

/* ---- data-parallel over ranks (lam_trainer_set_collective) ---- */

void lam_rank_share(size_t n, int rank, int world, size_t *lo, size_t *len) {
  size_t W = (size_t)world, r = (size_t)rank, base = n / W, extra = n % W;
  *len = base + (r < extra);
  *lo = r * base + (r < extra ? r : extra);
}
static size_t share_of(const lam_trainer *t, size_t G) {
  size_t lo, len;
  lam_rank_share(G, t->coll.rank, t->coll.world, &lo, &len);
  return len;
}
static size_t global_batch(const lam_trainer *t, int step) {
  size_t off = (size_t)step * t->batch;
  return t->n - off < (size_t)t->batch ? t->n - off : (size_t)t->batch;
}

lam_status lam_trainer_set_collective(lam_trainer *t, const lam_collective *c) {
  LAM_CHECK_ARG(t && c, "lam_trainer_set_collective: %s is NULL", t ? "c" : "trainer");
  lam_ctx *ctx = t->m->ctx;
  const lam_backend *be = ctx->be;
  const int gpu = c->nccl_id != NULL;
  LAM_CHECK_ARG(c->world >= 1 && c->rank >= 0 && c->rank < c->world,
                "lam_trainer_set_collective: rank %d of %d ranks is out of range", c->rank, c->world);
  LAM_CHECK_ARG(!gpu || be->comm, "lam_trainer_set_collective: an nccl_id is for CUDA contexts, and this one is "
                "on the %s; CPU ranks sum through the caller's `sum`", be->name);
  LAM_CHECK_ARG(gpu || c->world == 1 || ctx->device == LAM_DEVICE_CPU,
                "lam_trainer_set_collective: GPU ranks sum through NCCL: give the collective NCCL's unique id "
                "(nccl_id, from lam_nccl_unique_id on rank 0)");
  LAM_CHECK_ARG(gpu || c->world == 1 || c->sum, "lam_trainer_set_collective: %d CPU ranks need a sum function", c->world);
  LAM_CHECK_ARG((c->world == 1 && !gpu) || !t->feed,
                "lam_trainer_set_collective: the trainer streams its data set (%s), which several ranks do not do yet",
                t->stream_why);
  LAM_CHECK_ARG(c->world <= t->batch, "lam_trainer_set_collective: %d ranks share a batch of %d: give each at least one "
                "image (a batch of %d or more)", c->world, t->batch, c->world);
  size_t np = t->m->nparams;
  if (c->world > 1 && !gpu && !t->h_sum) {
    t->h_sum = malloc((np + 1) * sizeof *t->h_sum); /* and one slot for the stop flag */
    if (!t->h_sum)
      return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_trainer_set_collective: no host memory for %zu gradients", np);
  }
  drop_graph(t);
  if (t->comm) {
    be->comm->free(ctx, t->comm);
    t->comm = NULL;
  }
  t->coll = (lam_collective){.rank = 0, .world = 1};
  t->bucket = 0, t->m->grad_ready = NULL, t->m->grad_user = NULL; /* buckets are the old communicator's */
  if (gpu) LAM_TRY(be->comm->init(ctx, &t->comm, c->rank, c->world, c->nccl_id));
  t->coll = *c;
  t->coll.nccl_id = NULL; /* the caller's bytes; the communicator is made */
  return LAM_OK;
}

/* CPU ranks: n floats (host memory: their ops have run by now) times w, summed over the ranks in float64
 * through the caller's sum, together with `extra` doubles the caller put after them in h_sum. */
static lam_status host_sum(lam_trainer *t, float *x, size_t n, double w, size_t extra) {
  for (size_t i = 0; i < n; i++) t->h_sum[i] = w * x[i];
  LAM_TRY(t->coll.sum(t->coll.user, t->h_sum, n + extra));
  for (size_t i = 0; i < n; i++) x[i] = (float)t->h_sum[i];
  return LAM_OK;
}

/* Sync BN's sums (m->sync_sum): on the model's queue through NCCL for GPU ranks; host_sum for CPU ranks. */
static lam_status bn_sync_sum(void *user, float *x, size_t n, float weight) {
  lam_trainer *t = user;
  lam_ctx *ctx = t->m->ctx;
  if (t->comm) return ctx->be->comm->sum(ctx, t->comm, 0, x, n, weight);
  return host_sum(t, x, n, weight, 0); /* n = 2C <= the parameters: h_sum holds it */
}

lam_status lam_trainer_set_sync_bn(lam_trainer *t, int on) {
  LAM_CHECK_ARG(t, "lam_trainer_set_sync_bn: trainer is NULL");
  lam_model *m = t->m;
  on = on != 0;
  LAM_CHECK_ARG(!on || ranked(t), "lam_trainer_set_sync_bn: BatchNorm synchronized over ranks needs ranks: call "
                "lam_trainer_set_collective first");
  LAM_CHECK_ARG(!on || !t->bucket, "lam_trainer_set_sync_bn: not with buckets (lam_trainer_set_buckets(t, 0) first)");
  const size_t last = t->n % (size_t)t->batch;
  LAM_CHECK_ARG(!on || last == 0 || last >= (size_t)t->coll.world,
                "lam_trainer_set_sync_bn: the last batch of an epoch has %zu image%s for %d ranks, and with "
                "BatchNorm synchronized every rank needs one; choose a batch that leaves none or at least %d over "
                "(the set has %zu images)", last, last == 1 ? "" : "s", t->coll.world, t->coll.world, t->n);
  if ((m->sync_sum != NULL) == on) return LAM_OK;
  drop_graph(t);
  LAM_TRY(lam_model_release_batch(m)); /* the graph's passes and the plan change: planned again at the next step */
  m->sync_sum = on ? bn_sync_sum : NULL;
  m->sync_user = on ? t : NULL;
  lam_status s = nn_graph_finish(m, m->fmt);
  if (s != LAM_OK) { /* the backend cannot sync this model's BatchNorm: it trains as it did */
    m->sync_sum = NULL, m->sync_user = NULL;
    nn_graph_finish(m, m->fmt);
  }
  return s;
}

/* n doubles summed over the ranks: NCCL's for GPU ranks, the caller's for CPU ones. */
static lam_status coll_sum(lam_trainer *t, double *x, size_t n) {
  if (t->comm) return t->m->ctx->be->comm->sum_host(t->m->ctx, t->comm, x, n);
  return t->coll.sum(t->coll.user, x, n);
}

lam_status lam_trainer_sum(lam_trainer *t, double *x, size_t n) {
  LAM_CHECK_ARG(t && (x || !n), "lam_trainer_sum: %s is NULL", t ? "x" : "trainer");
  return ranked(t) && n ? coll_sum(t, x, n) : LAM_OK;
}

/* ---- buckets: the gradients' sum in pieces that start while backward still runs (PyTorch DDP's) ----
 * Parameters lie in node order and backward runs the nodes last to first, so when a node's backward is done
 * every gradient from its first parameter up is final. A bucket of them is summed on queue 1 (NCCL, in the
 * step's graph too) after an event on queue 0; after backward the rest is, and queue 0 waits for queue 1. */
static lam_status bucket_send(lam_trainer *t, size_t lo) {
  lam_model *m = t->m;
  lam_ctx *ctx = m->ctx;
  const lam_backend *be = ctx->be;
  const size_t ev = t->bucket_ev++;
  LAM_TRY(be->queue->event_record(ctx, ev, 0));
  LAM_TRY(be->queue->queue_wait(ctx, 1, ev));
  LAM_TRY(be->comm->sum(ctx, t->comm, 1, m->grads + lo, t->sent - lo, (float)t->weight));
  t->sent = lo;
  return LAM_OK;
}
static lam_status bucket_ready(void *user, size_t lo) {
  lam_trainer *t = user;
  return t->sent - lo >= t->bucket ? bucket_send(t, lo) : LAM_OK;
}
static lam_status bucket_flush(lam_trainer *t) {
  if (t->sent > 0) LAM_TRY(bucket_send(t, 0));
  lam_ctx *ctx = t->m->ctx;
  const size_t ev = t->bucket_ev++;
  LAM_TRY(ctx->be->queue->event_record(ctx, ev, 1));
  return ctx->be->queue->queue_wait(ctx, 0, ev);
}

lam_status lam_trainer_set_buckets(lam_trainer *t, size_t bytes) {
  LAM_CHECK_ARG(t, "lam_trainer_set_buckets: trainer is NULL");
  lam_model *m = t->m;
  LAM_CHECK_ARG(!bytes || t->comm, "lam_trainer_set_buckets: buckets are for GPU ranks (NCCL): call "
                "lam_trainer_set_collective with an nccl_id first");
  LAM_CHECK_ARG(!bytes || !m->sync_sum, "lam_trainer_set_buckets: not with sync BN, whose sums run on the step's "
                "own queue between the buckets' (lam_trainer_set_sync_bn(t, 0) first)");
  LAM_CHECK_ARG(!bytes || bytes >= sizeof(float), "lam_trainer_set_buckets: %zu bytes is less than one gradient",
                bytes);
  if (bytes) LAM_TRY(m->ctx->be->queue->event_reserve(m->ctx, (size_t)m->nnodes + 2)); /* a bucket a node at most, the join */
  drop_graph(t);
  t->bucket = bytes / sizeof(float);
  m->grad_ready = bytes ? bucket_ready : NULL;
  m->grad_user = bytes ? t : NULL;
  return LAM_OK;
}

/* The gradients summed over the ranks, each rank's weighted by its share of the global batch (its loss
 * is the mean over its own images). GPU ranks: NCCL on the device, in the step's queue (and graph).
 * CPU ranks: in float64 through the caller's sum, with the stop flags in the same call, so that every
 * rank stops after the same step (GPU ranks exchange theirs every STOP_EVERY steps: epoch_steps). */
static lam_status sum_grads(lam_trainer *t) {
  lam_model *m = t->m;
  size_t n = m->nparams;
  if (t->comm && t->bucket) return bucket_flush(t); /* the last bucket, and the join */
  if (t->comm) return m->ctx->be->comm->sum(m->ctx, t->comm, 0, m->grads, n, (float)t->weight);
  t->h_sum[n] = t->stop && *t->stop ? 1.0 : 0.0;
  LAM_TRY(host_sum(t, m->grads, n, t->weight, 1));
  t->stop_all = t->h_sum[n] > 0;
  return LAM_OK;
}

/* An epoch's loss sum, correct and counted labels (m->stats' first three) summed over the ranks. */
static lam_status sum_stats(lam_trainer *t, float st[3]) {
  double v[3] = {st[0], st[1], st[2]};
  LAM_TRY(coll_sum(t, v, 3));
  st[0] = (float)v[0], st[1] = (float)v[1], st[2] = (float)v[2];
  return LAM_OK;
}

/* The replicas are the same model: a 64-bit FNV-1a of the parameters' bytes, in four 16-bit pieces, and
 * their squares, summed over the ranks — the sum of squares is world x the square of the mean exactly
 * when every rank holds the same pieces. */
static lam_status check_replicas(lam_trainer *t) {
  lam_model *m = t->m;
  const size_t bytes = m->nparams * sizeof(float);
  unsigned char *b = malloc(bytes);
  if (!b) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for a copy of the %zu parameters", m->nparams);
  lam_status s = lam_mem_download(m->ctx, b, m->params, bytes);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes && s == LAM_OK; i++) h = (h ^ b[i]) * 1099511628211ull;
  free(b);
  LAM_TRY(s);
  double v[8];
  for (int j = 0; j < 4; j++) {
    double piece = (double)((h >> (16 * j)) & 0xffff);
    v[j] = piece, v[4 + j] = piece * piece;
  }
  LAM_TRY(coll_sum(t, v, 8));
  for (int j = 0; j < 4; j++)
    if (v[4 + j] * t->coll.world != v[j] * v[j])
      return LAM_FAIL(LAM_ERR_INVALID_ARG, "the %d replicas' parameters differ after epoch %d (rank %d): the ranks were "
                      "not started alike — give every rank the same model, seed, options and data", t->coll.world,
                      t->epochs_done, t->coll.rank);
  return LAM_OK;
}

/* Opens the profile at its first step (of the first epoch that reaches it) and closes it after its last:
 * from then on the model's ops mark nothing. */
static lam_status profile_window(lam_trainer *t, int step) {
  lam_model *m = t->m;
  if (!t->prof_steps) return LAM_OK;
  if (step == t->prof_first && !t->prof.nmarks) {
    size_t per_step = 6 * (size_t)m->nnodes + 8; /* a conv marks up to 5 parts */
    LAM_TRY(prof_begin(&t->prof, m->ctx, per_step * (size_t)t->prof_steps + 1));
    m->prof = &t->prof;
    t->prof_done = 0;
  } else if (m->prof) {
    t->prof_done++;
    if (t->prof_done == t->prof_steps || step == (int)((t->n + (size_t)t->batch - 1) / (size_t)t->batch)) {
      t->prof.active = 0;
      m->prof = NULL;
    }
  }
  return LAM_OK;
}

static lam_status epoch_steps(lam_trainer *t, lam_progress_fn cb, void *user, int every, double t0, int first);

/* One training step of B, queued op by op: the batch's gather (when resident: at the device-side
 * cursor), zeroing the gradients, forward, loss, backward, the optimizer (its scalars from the epoch's
 * table, row = the device-side step) and the advance of both counters. Nothing here changes host state,
 * so the same calls can be captured once and replayed. */
static lam_status step_ops(lam_trainer *t, int B, size_t G) {
  lam_model *m = t->m;
  lam_ctx *ctx = m->ctx;
  const lam_backend *be = ctx->be;
  lam_aug aug;
  const lam_aug *a = nn_aug(m, t->seed, &aug);
  if (a && !t->feed) LAM_TRY(be->prim->step_advance(ctx, m->rng_ctr + 2, 0, NULL)); /* new crops and flips every step */
  if (!t->feed && B > 0) {
    LAM_TRY(be->prim->gather(ctx, B, m->in_t, m->in_c, (size_t)m->in_h * m->in_w, t->d_images, t->label_size, t->d_labels, t->d_idx,
                       t->d_state, &m->norm, a, m->fmt, m->x, m->y));
    NN_PROF(m, "gather_normalize", 0);
  }
  LAM_TRY(be->prim->zero(ctx, m->grads, m->nparams * sizeof(float)));
  NN_PROF(m, "zero_grad", 0);
  lam_scaler *ls = scaling(t) ? t->d_scaler : NULL;
  m->sync_batch = G; /* sync BN's global batch (a graph is captured for full batches only: G is theirs) */
  t->weight = (double)B / (double)G;            /* this rank's share of the batch: its gradients' weight */
  t->sent = m->nparams, t->bucket_ev = 0;       /* buckets: none sent yet */
  if (B > 0) {
    LAM_TRY(nn_forward(m, B, 1));
    m->lscale = ls ? &ls->scale : NULL; /* the loss's gradient scaled */
    lam_status s = nn_loss(m, B, 1, m->smoothing, NULL);
    m->lscale = NULL;
    LAM_TRY(s);
    LAM_TRY(nn_backward(m, B));
  } else if (nn_has_dropout(m)) {
    /* A rank's empty share of a short last batch: no gradient of its own, but the same step as the
     * others; dropout's counter moves as a forward would have moved it. */
    LAM_TRY(be->prim->step_advance(ctx, m->rng_ctr, 0, NULL));
  }
  if (ranked(t)) {
    LAM_TRY(sum_grads(t));
    NN_PROF(m, "allreduce", 0);
  }
  if (ls) { /* the step taken or skipped, decided on the device */
    LAM_TRY(be->prim->zero(ctx, &ls->found, sizeof ls->found));
    LAM_TRY(be->prim->grad_check(ctx, m->nparams, m->grads, ls));
    LAM_TRY(be->prim->scaler_update(ctx, ls, t->opt.kind != LAM_OPT_SGD, t->opt.beta1, t->opt.beta2, t->d_sched, t->d_state + 1));
    NN_PROF(m, "loss_scale", 0);
  }
  LAM_TRY(nn_opt_step_sched(m, &t->opt, t->d_sched, t->d_state + 1, ls));
  NN_PROF(m, t->opt.kind == LAM_OPT_SGD ? "sgd" : "adam", 0);
  return be->prim->step_advance(ctx, t->d_state, B, m->stats); /* and notes the first step with a non-finite loss */
}

static int graph_wanted(const lam_trainer *t) {
  const lam_backend *be = t->m->ctx->be;
  return !t->graph_off && be->queue->graph_begin && !t->m->ctx->no_graphs && !t->m->prof &&
         (t->coll.world == 1 || t->comm); /* CPU ranks sum on the host */
}

/* The step: replayed from a graph for full batches where the backend has graphs (captured at the
 * second full batch, after one eager step has made cuBLAS's handle and picked its kernels), else
 * queued op by op. The caller counts it in m->opt_step. */
static lam_status step_body(lam_trainer *t, int B, size_t G) {
  lam_model *m = t->m;
  lam_ctx *ctx = m->ctx;
  const lam_backend *be = ctx->be;
  LAM_TRY(nn_model_reserve(m, t->batch)); /* nothing to do unless the precision changed since the plan */
  if (B != t->batch || !graph_wanted(t)) return step_ops(t, B, G);
  if (t->graph && t->graph_gen != m->gen) { /* buffers it uses moved */
    be->queue->graph_free(ctx, t->graph);
    t->graph = NULL;
  }
  if (!t->graph) {
    if (t->eager_full_steps++ == 0) return step_ops(t, B, G);
    LAM_TRY(be->queue->graph_begin(ctx));
    lam_status s = step_ops(t, B, G);
    lam_status e = be->queue->graph_end(ctx, &t->graph); /* ends the capture whatever happened */
    if (s != LAM_OK) return s;
    LAM_TRY(e);
    t->graph_gen = m->gen;
  }
  return be->queue->graph_launch(ctx, t->graph);
}

lam_status lam_trainer_set_graph(lam_trainer *t, int on) {
  LAM_CHECK_ARG(t, "lam_trainer_set_graph: trainer is NULL");
  t->graph_off = !on;
  if (!on) drop_graph(t);
  return LAM_OK;
}

lam_status lam_trainer_graph(const lam_trainer *t, int *on) {
  LAM_CHECK_ARG(t && on, "lam_trainer_graph: %s is NULL", t ? "on" : "trainer");
  *on = graph_wanted(t);
  return LAM_OK;
}

/* The parameters at the epoch's end, read once (a download of the flat buffer, nothing per step): a NaN or
 * infinity that the loss did not show (made by the epoch's last step, or where no output reads it) stops the
 * run as a NaN loss does, before a checkpoint could keep it. */
static lam_status check_params(const lam_trainer *t) {
  lam_model *m = t->m;
  float *host = malloc((m->nparams ? m->nparams : 1) * sizeof *host);
  if (!host) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "checking the parameters: no host memory for %zu values", m->nparams);
  lam_status s = lam_mem_download(m->ctx, host, m->params, m->nparams * sizeof *host);
  char where[160];
  if (s == LAM_OK && nn_nonfinite(m, 0, host, m->nparams, where, sizeof where))
    s = LAM_FAIL(LAM_ERR_DIVERGED, "training diverged in epoch %d: %s though the loss stayed finite, so this model "
                 "cannot train on; start again (or from the last checkpoint) with a lower learning rate or momentum",
                 t->epochs_done, where);
  free(host);
  return s;
}

lam_status lam_trainer_epoch(lam_trainer *t, lam_progress_fn cb, void *user, int every, lam_epoch_stats *out) {
  LAM_CHECK_ARG(t && out, "lam_trainer_epoch: %s is NULL", t ? "out" : "trainer");
  lam_model *m = t->m;
  lam_ctx *ctx = m->ctx;
  double t0 = lam_now_ms();
  /* An interrupted epoch continues: the same shuffle (from the generator's state before it), the steps
   * done skipped, the loss so far kept. */
  const int first = t->step_done;
  if (first) t->rng = t->epoch_rng;
  else t->epoch_rng = t->rng;
  for (size_t i = 0; i < t->n; i++) t->h_idx[i] = (int32_t)i;
  for (size_t i = t->n - 1; i > 0; i--) { /* Fisher-Yates */
    size_t j = (size_t)lam_rng_below(&t->rng, i + 1);
    int32_t tmp = t->h_idx[i];
    t->h_idx[i] = t->h_idx[j];
    t->h_idx[j] = tmp;
  }
  size_t n_local = t->n; /* the images of this rank's order */
  if (ranked(t)) { /* this rank's share of each global batch, in order: the local order */
    n_local = 0;
    for (int k = 0; k < t->steps; k++) {
      size_t lo, len;
      lam_rank_share(global_batch(t, k), t->coll.rank, t->coll.world, &lo, &len);
      memmove(t->h_idx + n_local, t->h_idx + (size_t)k * t->batch + lo, len * sizeof *t->h_idx);
      n_local += len;
    }
  }
  /* the steps done, in this rank's order (all but the last global batch share alike) */
  const size_t skip = (size_t)first * share_of(t, (size_t)t->batch);
  /* a streamed set's random choices of the epoch (a video's clip): from the seed and the epoch, so a resumed
   * epoch draws them again */
  if (t->host->source) lam_source_set_draw(t->host->source, lam_draw_key(t->seed ^ 0x636c6970ULL, t->epochs_done) | 1);
  if (t->feed) LAM_TRY(feed_start(t->feed, t->host, t->h_idx + skip, t->n - skip));
  else LAM_TRY(lam_mem_upload(ctx, t->d_idx, t->h_idx, n_local * sizeof(int32_t)));
  /* the optimizer's scalars for this epoch's steps (row k is the epoch's step k: the table starts where
   * the epoch did), and both device-side counters at the first step */
  LAM_TRY(nn_opt_prepare(m, &t->opt));
  LAM_TRY(scaler_start(t));
  m->opt_step -= first;
  nn_opt_schedule(m, &t->opt, &t->lr_sched, (long)t->epochs_done * t->steps, t->steps, t->steps, t->h_sched);
  m->opt_step += first;
  LAM_TRY(lam_mem_upload(ctx, t->d_sched, t->h_sched, (size_t)t->steps * NN_SCHED_COLS * sizeof(float)));
  const int32_t cursor[2] = {(int32_t)skip, first};
  LAM_TRY(lam_mem_upload(ctx, t->d_state, cursor, sizeof cursor));
  /* Dropout's and augmentation's draws are keyed by the trainer's seed and counted in steps taken, both
   * of which a checkpoint keeps, so a resumed run draws as the whole run did (a loaded model's own seed
   * is 0, and its counters restart at 0). */
  m->seed = t->seed ^ (uint64_t)t->coll.rank * 0xD1B54A32D192ED03ull; /* ranks: masks of their own */
  const int32_t step = (int32_t)(uint32_t)m->opt_step, ctr[4] = {0, step, 0, step}; /* dropout's, augmentation's */
  LAM_TRY(lam_mem_upload(ctx, m->rng_ctr, ctr, sizeof ctr));
  lam_status s = epoch_steps(t, cb, user, every, t0, first);
  if (t->feed) { /* joins the loader whatever happened */
    lam_status fs = feed_finish(t->feed, &t->data_wait_ms, &t->loader_wait_ms);
    if (s == LAM_OK) s = fs;
  }
  if (s != LAM_OK) return s;
  float st[4];
  LAM_TRY(lam_mem_download(ctx, st, m->stats, sizeof st)); /* waits for the epoch's last step */
  LAM_TRY(scaler_read(t));
  if (ranked(t)) LAM_TRY(sum_stats(t, st)); /* the epoch's sums over all ranks */
  double secs = (lam_now_ms() - t0) / 1e3;
  t->epoch_ms = secs * 1e3;
  t->epochs_done++;
  t->step_done = 0;
  *out = (lam_epoch_stats){.epoch = t->epochs_done,
                           .train_loss = st[2] > 0 ? st[0] / st[2] : 0.0,
                           .train_acc = st[2] > 0 ? st[1] / st[2] : 0.0,
                           .seconds = secs,
                           .images_per_s = secs > 0 ? (double)(t->n - (size_t)first * t->batch) / secs : 0.0};
  /* Read once an epoch, where the statistics are read anyway: no step waits for a check. */
  if (!isfinite(out->train_loss)) {
    char at[64] = "";
    if (st[3] >= 1.0f) snprintf(at, sizeof at, " at step %d of %d", (int)st[3], t->steps);
    return LAM_FAIL(LAM_ERR_DIVERGED, "training diverged in epoch %d%s: its loss became %s, so the parameters are no "
                    "longer finite and this model cannot train on; start again (or from the last checkpoint) with a "
                    "lower learning rate or momentum", t->epochs_done, at, isnan(out->train_loss) ? "NaN" : "infinite");
  }
  if (scaling(t) && t->scaler.stuck)
    return LAM_FAIL(LAM_ERR_DIVERGED, "training diverged in epoch %d at step %d of %d: its gradients overflowed fp16 "
                    "even at loss scale %g, the lowest, so every step from there was skipped; train in bf16 (same speed, "
                    "fp32's range) or start again with a lower learning rate", t->epochs_done, t->scaler.stuck, t->steps,
                    (double)LAM_SCALE_FLOOR);
  LAM_TRY(check_params(t));
  if (ranked(t)) LAM_TRY(check_replicas(t));
  return LAM_OK;
}

/* GPU ranks agree to stop every this many steps: each time the host waits for the queue to drain, which a
 * step in a graph of ~0.1 ms pays once in 32 (about a percent). */
#define STOP_EVERY 32

static lam_status epoch_steps(lam_trainer *t, lam_progress_fn cb, void *user, int every, double t0, int first) {
  lam_model *m = t->m;
  lam_ctx *ctx = m->ctx;
  const lam_backend *be = ctx->be;
  if (first && t->coll.rank == 0) { /* an interrupted epoch's sums so far (over all ranks: rank 0 holds them) */
    const float st[4] = {t->part[0], t->part[1], t->part[2], 0.0f};
    LAM_TRY(lam_mem_upload(ctx, m->stats, st, sizeof st));
  } else {
    LAM_TRY(be->prim->zero(ctx, m->stats, 4 * sizeof(float)));
  }
  /* The streaming feed writes into m->x before step_body plans: after lam_model_release_batch the
   * buffers must exist first. */
  LAM_TRY(nn_model_reserve(m, t->batch));
  const int steps = t->steps;
  for (int step = first; step < steps; step++) {
    const size_t G = global_batch(t, step);
    int B = (int)share_of(t, G); /* G itself when alone */
    LAM_TRY(profile_window(t, step));
    if (t->feed) {
      lam_aug aug;
      const lam_aug *a = nn_aug(m, t->seed, &aug);
      /* the step's draw advanced before its batch is gathered, as step_body does for a resident set: the same crops
       * and flips either way */
      if (a) LAM_TRY(ctx->be->prim->step_advance(ctx, m->rng_ctr + 2, 0, NULL));
      LAM_TRY(feed_next(t->feed, m->in_t, m->in_c, (size_t)m->in_h * m->in_w, &m->norm, a, m->fmt, m->x, m->y));
      NN_PROF(m, "gather_normalize", 0);
    }
    LAM_TRY(step_body(t, B, G)); /* resident: its own gather, at the device's cursor (the step's offset) */
    m->opt_step++;           /* the optimizer's step, taken on the device from the table's row */
    if (cb && every > 0 && ((step + 1) % every == 0 || step + 1 == steps)) {
      float st[4];
      LAM_TRY(lam_mem_download(ctx, st, m->stats, sizeof st));
      double secs = (lam_now_ms() - t0) / 1e3;
      cb(user, step + 1, steps, st[2] > 0 ? st[0] / st[2] : 0.0, secs > 0 ? st[2] / secs : 0.0);
    }
    int stop = t->stop && *t->stop;
    if (t->comm) { /* GPU ranks: the flags summed every STOP_EVERY steps (a wait for the queue each time) */
      if ((step + 1) % STOP_EVERY == 0 && step + 1 < steps) {
        double f = stop;
        LAM_TRY(coll_sum(t, &f, 1));
        stop = f > 0;
      } else {
        stop = 0;
      }
    } else if (ranked(t)) {
      stop = t->stop_all; /* CPU ranks: summed with the gradients; if any was asked, all stop */
    }
    if (stop && step + 1 < steps) { /* asked to stop: hold the epoch's place */
      float st[4];
      LAM_TRY(lam_mem_download(ctx, st, m->stats, sizeof st)); /* waits for the step in flight */
      LAM_TRY(scaler_read(t));
      if (ranked(t)) LAM_TRY(sum_stats(t, st));
      memcpy(t->part, st, sizeof t->part);
      t->step_done = step + 1;
      LAM_TRY(profile_window(t, steps));
      return LAM_FAIL(LAM_ERR_INTERRUPTED, "training stopped as asked after step %d of %d of epoch %d; the trainer "
                      "holds its place: save it (lam_checkpoint_save) or train on to continue the epoch", step + 1,
                      steps, t->epochs_done + 1);
    }
  }
  return profile_window(t, steps); /* a window that runs to the epoch's end closes here */
}

/* lam_evaluate of a streamed set: its batches decoded a few ahead by a feed (stream.c), in order, and the predictions
 * counted batch by batch, so memory holds a few batches, never the set. */
static lam_status evaluate_streamed(lam_model *m, const lam_dataset *d, int batch, float st[4], uint64_t *confusion) {
  lam_ctx *ctx = m->ctx;
  const size_t L = labels_per_image(d);
  lam_feed *f = NULL;
  uint8_t *pred = NULL, *h_pred = malloc((size_t)batch * L), *h_lab = malloc((size_t)batch * L);
  int32_t *idx = malloc(d->n * sizeof *idx);
  lam_status s = h_pred && h_lab && idx ? LAM_OK : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_evaluate: no host memory");
  for (size_t i = 0; s == LAM_OK && i < d->n; i++) idx[i] = (int32_t)i;
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&pred, (size_t)batch * L);
  if (s == LAM_OK) s = feed_create(ctx, 2, batch, lam_dataset_sample_bytes(d), L, &f);
  if (s == LAM_OK) s = ctx->be->prim->zero(ctx, m->stats, 4 * sizeof(float));
  if (s == LAM_OK) s = feed_start(f, d, idx, d->n);
  for (size_t off = 0; off < d->n && s == LAM_OK; off += (size_t)batch) {
    int B = (int)(d->n - off < (size_t)batch ? d->n - off : (size_t)batch);
    s = feed_next(f, m->in_t, m->in_c, (size_t)d->h * d->w, &m->norm, NULL, m->fmt, m->x, m->y);
    if (s == LAM_OK) s = nn_forward(m, B, 0);
    if (s == LAM_OK) s = nn_loss(m, B, 0, 0.0f, pred);
    if (s == LAM_OK && confusion) s = lam_mem_download(ctx, h_pred, pred, (size_t)B * L);
    if (s == LAM_OK && confusion) s = lam_mem_download(ctx, h_lab, m->y, (size_t)B * L);
    for (size_t i = 0; s == LAM_OK && confusion && i < (size_t)B * L; i++)
      if (h_lab[i] != LAM_LABEL_IGNORE) confusion[(size_t)h_lab[i] * d->classes + h_pred[i]]++;
  }
  if (f) {
    double a, b;
    lam_status fs = feed_finish(f, &a, &b);
    if (s == LAM_OK) s = fs;
  }
  if (s == LAM_OK) s = lam_mem_download(ctx, st, m->stats, 4 * sizeof(float));
  feed_free(f);
  lam_mem_free(ctx, pred);
  free(h_pred), free(h_lab), free(idx);
  return s;
}

lam_status lam_evaluate(lam_model *m, const lam_dataset *d, int batch, double *accuracy, double *loss,
                        uint64_t *confusion) {
  LAM_CHECK_ARG(m && accuracy, "lam_evaluate: %s is NULL", m ? "accuracy" : "model");
  LAM_TRY(check_data(m, d, "lam_evaluate"));
  LAM_CHECK_ARG(batch >= 1 && batch <= 65536, "lam_evaluate: batch %d is out of range (1 to 65536)", batch);
  if (lam_dataset_clips(d) > 1) { /* several clips a video: counted per video, their softmax averaged */
    LAM_CHECK_ARG(labels_per_image(d) == 1, "lam_evaluate: a set of %d clips a video must have a label per clip",
                  lam_dataset_clips(d));
    return nn_evaluate_clips(m, d, batch, accuracy, loss, confusion);
  }
  if (d->source) {
    LAM_TRY(nn_model_reserve(m, d->n < (size_t)batch ? (int)d->n : batch));
    float st[4];
    if (confusion) memset(confusion, 0, (size_t)d->classes * d->classes * sizeof *confusion);
    LAM_TRY(evaluate_streamed(m, d, d->n < (size_t)batch ? (int)d->n : batch, st, confusion));
    *accuracy = st[2] > 0 ? st[1] / (double)st[2] : 0.0;
    if (loss) *loss = st[2] > 0 ? st[0] / (double)st[2] : 0.0;
    return LAM_OK;
  }
  lam_ctx *ctx = m->ctx;
  const lam_backend *be = ctx->be;
  /* Buffers for the batches there are: 400 images at batch 1000 plan for 400. */
  LAM_TRY(nn_model_reserve(m, d->n < (size_t)batch ? (int)d->n : batch));
  uint8_t *images = NULL, *labels = NULL, *pred = NULL, *h_pred = NULL;
  int32_t *idx = NULL, *h_idx = NULL;
  lam_status s = upload_set(ctx, d, &images, &labels);
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&idx, d->n * sizeof(int32_t));
  const size_t L = labels_per_image(d), nl = d->n * L;
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&pred, nl);
  h_idx = malloc(d->n * sizeof *h_idx);
  h_pred = malloc(nl);
  if (s == LAM_OK && (!h_idx || !h_pred)) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_evaluate: no host memory");
  if (s == LAM_OK) {
    for (size_t i = 0; i < d->n; i++) h_idx[i] = (int32_t)i;
    s = lam_mem_upload(ctx, idx, h_idx, d->n * sizeof(int32_t));
  }
  if (s == LAM_OK) s = be->prim->zero(ctx, m->stats, 4 * sizeof(float));
  for (size_t off = 0; off < d->n && s == LAM_OK; off += (size_t)batch) {
    int B = (int)(d->n - off < (size_t)batch ? d->n - off : (size_t)batch);
    s = be->prim->gather(ctx, B, m->in_t, m->in_c, (size_t)d->h * d->w, images, L, labels, idx + off, NULL, &m->norm, NULL, m->fmt, m->x, m->y);
    if (s == LAM_OK) s = nn_forward(m, B, 0);
    if (s == LAM_OK) s = nn_loss(m, B, 0, 0.0f, pred + off * L);
  }
  float st[4];
  if (s == LAM_OK) s = lam_mem_download(ctx, st, m->stats, sizeof st);
  if (s == LAM_OK) s = lam_mem_download(ctx, h_pred, pred, nl);
  if (s == LAM_OK) { /* over the labels counted: images, or pixels not ignored */
    *accuracy = st[2] > 0 ? st[1] / (double)st[2] : 0.0;
    if (loss) *loss = st[2] > 0 ? st[0] / (double)st[2] : 0.0;
    if (confusion) {
      memset(confusion, 0, (size_t)d->classes * d->classes * sizeof *confusion);
      for (size_t i = 0; i < nl; i++)
        if (d->labels[i] != LAM_LABEL_IGNORE) confusion[(size_t)d->labels[i] * d->classes + h_pred[i]]++;
    }
  }
  lam_mem_free(ctx, images);
  lam_mem_free(ctx, labels);
  lam_mem_free(ctx, idx);
  lam_mem_free(ctx, pred);
  free(h_idx);
  free(h_pred);
  return s;
}

lam_status lam_model_memory_get(const lam_model *m, const lam_trainer *t, lam_model_memory *out) {
  LAM_CHECK_ARG(m && out, "lam_model_memory_get: %s is NULL", m ? "out" : "model");
  LAM_CHECK_ARG(!t || t->m == m, "lam_model_memory_get: the trainer belongs to another model");
  size_t flat = lam_cache_round(m->nparams * sizeof(float));
  *out = (lam_model_memory){.params = flat + lam_cache_round(m->nparams * sizeof(uint16_t)), /* + the bf16 copy */
                            .grads = flat,
                            .optimizer = (m->opt_m ? flat : 0) + (m->opt_v ? flat : 0),
                            .activations = m->batch_bytes,
                            .scratch = m->scratch_bytes,
                            .data = !t       ? 0
                                    : (t->feed ? feed_device_bytes(t->feed)
                                               : lam_cache_round(t->n * t->sample) + lam_cache_round(t->n) +
                                                     lam_cache_round(t->n * sizeof(int32_t))) +
                                          /* the step's counters and the optimizer's table */
                                          lam_cache_round(2 * sizeof(int32_t)) +
                                          lam_cache_round((size_t)t->steps * 2 * sizeof(float))};
  return LAM_OK;
}
