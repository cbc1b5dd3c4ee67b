/* fit.c — the epoch loop, once: lam_fit trains epoch after epoch and does what a run does between two epochs
 * (evaluate, save, keep the best model, write the log, stop early), for `lamina train` and Python's Model.fit
 * alike; both only set it up and say what it measured. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../status.h"
#include "nn.h"
#include "train.h"

double lam_confusion_iou(const uint64_t *conf, int C, double *iou, int *present) {
  double sum = 0;
  int n = 0;
  for (int k = 0; k < C; k++) {
    uint64_t tp = conf[(size_t)k * C + k], fp = 0, fn = 0;
    for (int j = 0; j < C; j++)
      if (j != k) fp += conf[(size_t)j * C + k], fn += conf[(size_t)k * C + j];
    double v = tp + fp + fn ? (double)tp / (double)(tp + fp + fn) : -1.0;
    if (iou) iou[k] = v;
    if (v >= 0) sum += v, n++;
  }
  if (present) *present = n;
  return n ? sum / n : 0.0;
}

static int per_pixel(const lam_dataset *d) { return d->label_h > 1 || d->label_w > 1; }

/* lam_evaluate of m on d; for a set of a label per pixel its mean IoU too (else NAN). */
static lam_status evaluate(lam_model *m, const lam_dataset *d, int batch, double *acc, double *loss, double *miou) {
  *miou = NAN;
  if (!per_pixel(d)) return lam_evaluate(m, d, batch, acc, loss, NULL);
  /* the confusion matrix as wide as the model's outputs, so that every prediction has a column */
  lam_dataset wide = *d;
  int outs = lam_model_outputs(m);
  if (outs > wide.classes) wide.classes = outs;
  uint64_t *conf = calloc((size_t)wide.classes * wide.classes, sizeof *conf);
  if (!conf) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_fit: a %dx%d confusion matrix", wide.classes, wide.classes);
  lam_status s = lam_evaluate(m, &wide, batch, acc, loss, conf);
  if (s == LAM_OK) *miou = lam_confusion_iou(conf, wide.classes, NULL, NULL);
  free(conf);
  return s;
}

/* evaluate over the trainer's ranks: each its share of the set (lam_rank_share, as a batch is split), the sums
 * summed, so every rank gets the whole set's figures. A set of a label per pixel (its accuracy counts pixels) and a
 * streamed one (no images to share) are evaluated whole on every rank. */
static lam_status rank_evaluate(lam_trainer *t, const lam_dataset *d, double *acc, double *loss, double *miou) {
  const int world = t->coll.world, rank = t->coll.rank;
  if (world == 1 || per_pixel(d) || d->label_h > 0 || d->source) return evaluate(t->m, d, t->batch, acc, loss, miou);
  *miou = NAN;
  size_t lo, len;
  lam_rank_share(d->n, rank, world, &lo, &len);
  double v[3] = {0, 0, (double)len};
  if (len) {
    lam_dataset part = *d;
    part.n = len;
    part.images = d->images + lo * lam_dataset_sample_bytes(d);
    part.labels = d->labels + lo;
    double a = 0, l = 0;
    LAM_TRY(lam_evaluate(t->m, &part, t->batch, &a, &l, NULL));
    v[0] = a * (double)len, v[1] = l * (double)len;
  }
  LAM_TRY(lam_trainer_sum(t, v, 3));
  *acc = v[0] / (double)d->n, *loss = v[1] / (double)d->n;
  return LAM_OK;
}

/* The model save_best wrote, on d; with spec, a model of another spec is LAM_ERR_INVALID_ARG. */
static lam_status evaluate_saved(lam_trainer *t, const char *path, const char *spec, const lam_dataset *d, double *acc,
                                 double *loss, double *miou) {
  lam_model *b = NULL;
  lam_status s = lam_checkpoint_load(t->m->ctx, path, &b, NULL, NULL);
  if (s == LAM_OK && spec && strcmp(lam_model_spec(b), spec))
    s = LAM_FAIL(LAM_ERR_INVALID_ARG, "lam_fit: %s holds a model of another spec", path);
  if (s == LAM_OK) s = evaluate(b, d, t->batch, acc, loss, miou);
  lam_model_free(b);
  return s;
}

/* A field and its comma: empty where v was not measured; a value too wide for fmt (a loss of 1e300) in %.6e, so a
 * field takes at most CSV_FIELD bytes and the row's room is known. */
enum { CSV_FIELD = 40, CSV_FIELDS = 13 };
static void csv_num(char **p, const char *end, double v, const char *fmt) {
  char f[400];
  int k = isfinite(v) ? snprintf(f, sizeof f, fmt, v) : 0;
  if (k >= CSV_FIELD) k = snprintf(f, sizeof f, "%.6e", v);
  if (k < 0 || *p + k + 1 > end) k = 0; /* cannot happen: the buffer has CSV_FIELD a field */
  memcpy(*p, f, (size_t)k);
  *p += k;
  *(*p)++ = ',';
}

/* The whole CSV, rewritten atomically (a reader never sees half a row); an empty field is a figure not measured. */
static lam_status write_log(const char *path, const lam_fit_epoch *rows, int n) {
  const char *head = "epoch,train_loss,train_acc,val_loss,val_acc,test_acc,lr,seconds,images_per_s,val_miou,"
                     "test_miou,loss_scale,skipped_steps\n";
  size_t cap = strlen(head) + (size_t)n * CSV_FIELDS * CSV_FIELD;
  char *buf = malloc(cap), *p = buf, *end = buf + cap;
  if (!buf) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_fit: the log of %d epochs", n);
  memcpy(p, head, strlen(head));
  p += strlen(head);
  for (int i = 0; i < n; i++) {
    const lam_fit_epoch *r = &rows[i];
    csv_num(&p, end, r->es.epoch, "%.0f");
    csv_num(&p, end, r->es.train_loss, "%.6f");
    csv_num(&p, end, r->es.train_acc, "%.6f");
    csv_num(&p, end, r->val_loss, "%.6f");
    csv_num(&p, end, r->val_acc, "%.6f");
    csv_num(&p, end, r->test_acc, "%.6f");
    csv_num(&p, end, r->lr, "%.6g");
    csv_num(&p, end, r->es.seconds, "%.4f");
    csv_num(&p, end, r->es.images_per_s, "%.1f");
    csv_num(&p, end, r->val_miou, "%.6f");
    csv_num(&p, end, r->test_miou, "%.6f");
    csv_num(&p, end, r->loss_scale, "%.0f");
    csv_num(&p, end, r->skipped_steps, "%.0f");
    p[-1] = '\n'; /* the last comma */
  }
  lam_status s = lam_output_write_atomic(path, "log", buf, (size_t)(p - buf));
  free(buf);
  return s;
}

lam_fit_opts lam_fit_opts_default(void) {
  return (lam_fit_opts){.epochs = 1, .monitor = LAM_FIT_MONITOR_LOSS, .best_loss = INFINITY, .best_miou = -INFINITY};
}

static lam_status check_opts(const lam_trainer *t, const lam_fit_opts *o) {
  LAM_CHECK_ARG(t && o, "lam_fit: the trainer or the options are NULL");
  LAM_CHECK_ARG(o->epochs >= 1, "lam_fit: %d epochs: give 1 or more", o->epochs);
  LAM_CHECK_ARG(o->monitor == LAM_FIT_MONITOR_LOSS || o->monitor == LAM_FIT_MONITOR_MIOU,
                "lam_fit: monitor %d is neither LAM_FIT_MONITOR_LOSS nor LAM_FIT_MONITOR_MIOU", (int)o->monitor);
  LAM_CHECK_ARG(o->patience >= 0, "lam_fit: patience %d is negative (0: never stop early)", o->patience);
  LAM_CHECK_ARG(o->val || (!o->save_best && !o->patience),
                "lam_fit: %s follows the validation figure: give a validation set (val)",
                o->save_best ? "save_best" : "patience");
  LAM_CHECK_ARG(o->monitor != LAM_FIT_MONITOR_MIOU || (o->val && per_pixel(o->val)),
                "lam_fit: the monitor is the validation mean IoU, which only a validation set of a label per pixel has");
  return LAM_OK;
}

/* After an epoch: the figures the loop decides by and reports. */
static lam_status measure(lam_trainer *t, const lam_fit_opts *o, lam_fit_epoch *r) {
  r->lr = lam_trainer_lr(t);
  double scale = 0;
  long skipped = 0;
  lam_trainer_loss_scale(t, &scale, &skipped);
  if (scale > 0) r->loss_scale = scale, r->skipped_steps = (double)skipped;
  if (o->val) LAM_TRY(rank_evaluate(t, o->val, &r->val_acc, &r->val_loss, &r->val_miou));
  else if (o->test) LAM_TRY(rank_evaluate(t, o->test, &r->test_acc, &r->test_loss, &r->test_miou));
  return lam_trainer_stream_stats(t, &r->stream);
}

lam_status lam_fit(lam_trainer *t, const lam_fit_opts *o, lam_fit_result *res) {
  LAM_TRY(check_opts(t, o));
  lam_fit_result r = {.best_loss = o->best_loss, .best_miou = o->best_miou, .best_test_acc = NAN, .test_acc = NAN,
                      .test_miou = NAN};
  if (o->resume_best && o->save_best) { /* the model it holds is the one to beat, if it is this run's */
    double acc = 0, loss = 0, miou = 0;
    if (evaluate_saved(t, o->save_best, lam_model_spec(t->m), o->val, &acc, &loss, &miou) == LAM_OK)
      r.best_loss = loss, r.best_miou = miou, r.resumed_best = 1;
    else
      lam_clear_error(); /* none, or not this run's model: the first epoch replaces it */
  }
  const int todo = o->epochs - lam_trainer_epochs_done(t);
  lam_fit_epoch *rows = o->history;
  if (!rows && todo > 0 && o->log && !(rows = calloc((size_t)todo, sizeof *rows))) /* the log rewrites them all */
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_fit: the rows of %d epochs", todo);
  lam_fit_epoch one, *last = NULL; /* one: the row of each epoch where the caller keeps none and no log needs them */
  const int miou = o->monitor == LAM_FIT_MONITOR_MIOU;
  int since_best = 0;
  lam_status s = LAM_OK;
  while (lam_trainer_epochs_done(t) < o->epochs) {
    if (t->stop && *t->stop) { /* came while evaluating or saving */
      s = LAM_FAIL(LAM_ERR_INTERRUPTED, "training stopped as asked after epoch %d; the trainer holds its place",
                   lam_trainer_epochs_done(t));
      break;
    }
    lam_fit_epoch *e = rows ? &rows[r.epochs] : &one;
    *e = (lam_fit_epoch){.val_loss = NAN, .val_acc = NAN, .val_miou = NAN, .test_loss = NAN, .test_acc = NAN,
                         .test_miou = NAN, .loss_scale = NAN, .skipped_steps = NAN, .lr = NAN};
    int every = o->step_every > 0 ? o->step_every : t->steps / 50 > 0 ? t->steps / 50 : 1;
    if ((s = lam_trainer_epoch(t, o->on_step, o->user, every, &e->es)) != LAM_OK) break;
    e->es.epoch += o->epoch_offset;
    if ((s = measure(t, o, e)) != LAM_OK) break;
    r.epochs++, last = e;
    e->improved = o->val && (miou ? e->val_miou > r.best_miou : e->val_loss < r.best_loss);
    if (o->save && (s = lam_checkpoint_save(o->save, t->m, t)) != LAM_OK) break;
    if (e->improved) {
      r.best_loss = e->val_loss, r.best_miou = e->val_miou, r.best_epoch = e->es.epoch, since_best = 0;
      if (o->save_best && (s = lam_checkpoint_save(o->save_best, t->m, NULL)) != LAM_OK) break;
    } else if (o->val) {
      since_best++;
    }
    if (o->log && (s = write_log(o->log, rows, r.epochs)) != LAM_OK) break;
    if (o->on_epoch && o->on_epoch(o->user, e)) {
      r.stopped = 1;
      break;
    }
    if (o->patience && since_best >= o->patience) {
      r.stopped_early = 1;
      break;
    }
  }
  if (s == LAM_OK && last && o->val && o->test) { /* the test part, once, for the model the run ends with */
    s = rank_evaluate(t, o->test, &last->test_acc, &last->test_loss, &last->test_miou);
    if (s == LAM_OK && o->log) s = write_log(o->log, rows, r.epochs);
    if (s == LAM_OK && o->save_best && r.best_epoch) {
      double loss = 0, miou = 0;
      s = evaluate_saved(t, o->save_best, NULL, o->test, &r.best_test_acc, &loss, &miou);
    }
  }
  if (last) r.test_acc = last->test_acc, r.test_miou = last->test_miou;
  if (rows != o->history) free(rows);
  if (res) *res = r;
  return s;
}
