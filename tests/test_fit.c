/* test_fit.c — lam_fit, the epoch loop `lamina train` and Python's Model.fit share: its figures against the
 * same trainer run by hand (lam_trainer_epoch, lam_evaluate), its files (log, checkpoint, best model) against
 * what they must hold, early stopping, the ways to stop it, bad options, and the mean IoU of a confusion matrix
 * against one worked by hand. On the CPU (deterministic: figures compared exactly); on CUDA too where present. */
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"

#define SPEC "conv 4 3, relu, maxpool 2, flatten, dense 10"
#define IMG 8
#define NTRAIN 256
#define NVAL 96
#define CLASSES 10
#define BATCH 32
#define MODEL_SEED 5u
#define TRAIN_SEED 9u

static char g_dir[64];
static uint8_t g_img[NTRAIN * IMG * IMG], g_lab[NTRAIN], g_vimg[NVAL * IMG * IMG], g_vlab[NVAL];
static lam_dataset g_train, g_val;

/* Label k lights the pixels whose index is k mod 10 over a dim noisy ground: learnable, so losses move. */
static void fill(uint8_t *img, uint8_t *lab, int n, uint64_t seed) {
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(seed));
  for (int i = 0; i < n; i++) {
    int k = (int)(tu_next(&r) % CLASSES);
    lab[i] = (uint8_t)k;
    for (int p = 0; p < IMG * IMG; p++) {
      int v = (int)(tu_next(&r) % 60);
      if (p % CLASSES == k) v += 120 + (int)(tu_next(&r) % 80);
      img[i * IMG * IMG + p] = (uint8_t)v;
    }
  }
}

static int setup(void **state) {
  (void)state;
  if (tu_tmpdir(g_dir, sizeof g_dir, "fit")) return -1;
  fill(g_img, g_lab, NTRAIN, 0xf17);
  fill(g_vimg, g_vlab, NVAL, 0x7a1);
  g_train = (lam_dataset){.n = NTRAIN, .h = IMG, .w = IMG, .classes = CLASSES, .images = g_img, .labels = g_lab};
  g_val = (lam_dataset){.n = NVAL, .h = IMG, .w = IMG, .classes = CLASSES, .images = g_vimg, .labels = g_vlab};
  return 0;
}
static int teardown(void **state) {
  (void)state;
  return tu_rmdir_all(g_dir);
}

static const char *path_of(const char *name) {
  static char buf[4][256];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, 256, "%s/%s", g_dir, name);
  return p;
}

/* The devices to run on: the CPU, and CUDA where there is a GPU. */
static int devices(lam_device *dev) {
  int n = 0;
  dev[n++] = LAM_DEVICE_CPU;
  if (lam_cuda_device_count(NULL) > 0) dev[n++] = LAM_DEVICE_CUDA;
  return n;
}

static void make(lam_ctx *ctx, float lr, lam_model **m, lam_trainer **t) {
  TU_OK(lam_model_create(ctx, SPEC, 1, IMG, IMG, MODEL_SEED, m));
  lam_opt o = lam_opt_default(LAM_OPT_ADAM);
  o.lr = lr;
  TU_OK(lam_trainer_create(*m, &o, BATCH, TRAIN_SEED, &g_train, t));
}

/* A context on the CPU with a model and its trainer at rate lr; closed by close_cpu. */
typedef struct { lam_ctx *ctx; lam_model *m; lam_trainer *t; } cpu_run;
static cpu_run open_cpu(float lr) {
  cpu_run r = {0};
  TU_OK(lam_ctx_create(&r.ctx, LAM_DEVICE_CPU));
  make(r.ctx, lr, &r.m, &r.t);
  return r;
}
static void close_cpu(cpu_run *r) {
  lam_trainer_free(r->t);
  lam_model_free(r->m);
  lam_ctx_free(r->ctx);
}

/* Within the log's printed digits (%.6f), or both unmeasured (an empty field, NAN). */
static void assert_field(const char *field, double want, const char *what, int epoch) {
  if (!isfinite(want)) {
    if (*field && *field != ',' && *field != '\n') fail_msg("log: %s of epoch %d is '%.12s', want empty", what, epoch, field);
    return;
  }
  double got = strtod(field, NULL);
  if (fabs(got - want) > 5e-7 * (1 + fabs(want))) fail_msg("log: %s of epoch %d is %.9g, want %.9g", what, epoch, got, want);
}
/* The n-th comma-separated field of line. */
static const char *field_at(const char *line, int n) {
  for (int i = 0; i < n; i++) {
    line = strchr(line, ',');
    assert_non_null(line);
    line++;
  }
  return line;
}

/* lam_fit's rows, result and files are those of the same loop run by hand on a twin trainer. */
static void test_fit_matches_hand_loop(void **state) {
  (void)state;
  lam_device dev[2];
  for (int di = 0, nd = devices(dev); di < nd; di++) {
    lam_ctx *ctx = NULL;
    TU_OK(lam_ctx_create(&ctx, dev[di]));
    lam_model *m = NULL, *h = NULL;
    lam_trainer *t = NULL, *ht = NULL;
    make(ctx, 3e-3f, &m, &t);
    make(ctx, 3e-3f, &h, &ht);
    enum { EPOCHS = 4 };
    lam_fit_epoch rows[EPOCHS];
    memset(rows, 0xff, sizeof rows); /* every field lam_fit leaves unwritten shows */
    lam_fit_opts o = lam_fit_opts_default();
    o.epochs = EPOCHS, o.val = &g_val, o.test = &g_train, o.history = rows;
    o.save = path_of("run.lamina"), o.save_best = path_of("best.lamina"), o.log = path_of("run.csv");
    lam_fit_result r;
    TU_OK(lam_fit(t, &o, &r));
    assert_int_equal(r.epochs, EPOCHS);
    assert_int_equal(lam_trainer_epochs_done(t), EPOCHS);
    assert_false(r.stopped_early || r.stopped || r.resumed_best);
    /* by hand: the same epochs, and the best of their validation losses */
    double best = INFINITY, vacc[EPOCHS], vloss[EPOCHS];
    int best_epoch = 0;
    const double tol = dev[di] == LAM_DEVICE_CPU ? 0 : 1e-6;
    for (int e = 0; e < EPOCHS; e++) {
      lam_epoch_stats st;
      TU_OK(lam_trainer_epoch(ht, NULL, NULL, 0, &st));
      TU_OK(lam_evaluate(h, &g_val, BATCH, &vacc[e], &vloss[e], NULL));
      assert_int_equal(rows[e].es.epoch, e + 1);
      assert_true(fabs(rows[e].es.train_loss - st.train_loss) <= tol * (1 + st.train_loss));
      assert_true(fabs(rows[e].val_loss - vloss[e]) <= tol * (1 + vloss[e]));
      assert_true(fabs(rows[e].val_acc - vacc[e]) <= tol);
      assert_true(isnan(rows[e].val_miou)); /* a label per image: no IoU */
      assert_true(fabs(rows[e].lr - lam_trainer_lr(ht)) <= 1e-12);
      assert_int_equal(rows[e].improved, vloss[e] < best);
      if (vloss[e] < best) best = vloss[e], best_epoch = e + 1;
      if (e < EPOCHS - 1) assert_true(isnan(rows[e].test_acc) && isnan(rows[e].test_loss));
    }
    assert_int_equal(r.best_epoch, best_epoch);
    assert_true(fabs(r.best_loss - best) <= tol * (1 + best));
    /* the test part once, for the last model; the saved best one, for it */
    double acc = 0, loss = 0;
    TU_OK(lam_evaluate(h, &g_train, BATCH, &acc, &loss, NULL));
    assert_true(fabs(r.test_acc - acc) <= tol && fabs(rows[EPOCHS - 1].test_acc - acc) <= tol);
    assert_true(fabs(rows[EPOCHS - 1].test_loss - loss) <= tol * (1 + loss));
    lam_model *b = NULL;
    TU_OK(lam_checkpoint_load(ctx, o.save_best, &b, NULL, NULL));
    double bacc = 0, bloss = 0;
    TU_OK(lam_evaluate(b, &g_val, BATCH, &bacc, &bloss, NULL));
    assert_true(fabs(bloss - best) <= 1e-6 * (1 + best)); /* the model of the best epoch */
    TU_OK(lam_evaluate(b, &g_train, BATCH, &bacc, NULL, NULL));
    assert_true(fabs(r.best_test_acc - bacc) <= tol);
    lam_model_free(b);
    /* the checkpoint: the trainer after the last epoch */
    lam_model *cm = NULL;
    lam_trainer *ct = NULL;
    TU_OK(lam_checkpoint_load(ctx, o.save, &cm, &g_train, &ct));
    assert_int_equal(lam_trainer_epochs_done(ct), EPOCHS);
    lam_trainer_free(ct);
    lam_model_free(cm);
    /* the log: a header and a row an epoch, as the rows say */
    FILE *f = fopen(o.log, "r");
    assert_non_null(f);
    char line[1024];
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "epoch,train_loss,train_acc,val_loss,val_acc,test_acc,lr,seconds,images_per_s,val_miou,"
                              "test_miou,loss_scale,skipped_steps\n");
    for (int e = 0; e < EPOCHS; e++) {
      assert_non_null(fgets(line, sizeof line, f));
      assert_int_equal(atoi(line), e + 1);
      assert_field(field_at(line, 1), rows[e].es.train_loss, "train_loss", e + 1);
      assert_field(field_at(line, 3), rows[e].val_loss, "val_loss", e + 1);
      assert_field(field_at(line, 4), rows[e].val_acc, "val_acc", e + 1);
      assert_field(field_at(line, 5), rows[e].test_acc, "test_acc", e + 1);
      assert_field(field_at(line, 9), rows[e].val_miou, "val_miou", e + 1);
      assert_field(field_at(line, 11), rows[e].loss_scale, "loss_scale", e + 1);
    }
    assert_null(fgets(line, sizeof line, f));
    fclose(f);
    /* resuming with the best model there: its validation loss is the one to beat */
    lam_model *m2 = NULL;
    lam_trainer *t2 = NULL;
    make(ctx, 0, &m2, &t2); /* lr 0: the first epoch's model is the first one's, no better than the best */
    lam_fit_opts o2 = o;
    o2.epochs = 1, o2.history = NULL, o2.save = NULL, o2.log = NULL, o2.resume_best = 1;
    TU_OK(lam_fit(t2, &o2, &r));
    assert_true(r.resumed_best);
    assert_int_equal(r.best_epoch, 0);
    assert_true(fabs(r.best_loss - best) <= 1e-6 * (1 + best));
    lam_trainer_free(t2), lam_model_free(m2);
    lam_trainer_free(t), lam_trainer_free(ht);
    lam_model_free(m), lam_model_free(h);
    lam_ctx_free(ctx);
  }
}

/* A rate of 0 leaves the model as it is: the validation loss never improves on the first epoch's, and patience
 * ends the fit after patience more; epoch_offset numbers the epochs. */
static void test_fit_early_stop(void **state) {
  (void)state;
  cpu_run run = open_cpu(0);
  lam_trainer *t = run.t;
  lam_fit_epoch rows[10];
  lam_fit_opts o = lam_fit_opts_default();
  o.epochs = 10, o.val = &g_val, o.patience = 2, o.history = rows, o.epoch_offset = 7;
  lam_fit_result r;
  TU_OK(lam_fit(t, &o, &r));
  assert_int_equal(r.epochs, 3);
  assert_true(r.stopped_early);
  assert_int_equal(r.best_epoch, 8);
  assert_int_equal(rows[0].es.epoch, 8);
  assert_int_equal(rows[2].es.epoch, 10);
  assert_true(rows[0].improved && !rows[1].improved && !rows[2].improved);
  assert_true(rows[1].val_loss == rows[0].val_loss);
  assert_true(isnan(r.test_acc)); /* no test part given */
  close_cpu(&run);
}

static int g_calls, g_stop_at;
static volatile int g_flag;
static int stop_at(void *user, const lam_fit_epoch *e) {
  (void)user;
  g_calls++;
  return e->es.epoch >= g_stop_at;
}
static int raise_flag(void *user, const lam_fit_epoch *e) {
  (void)user;
  (void)e;
  g_calls++;
  g_flag = 1; /* as a signal handler would, between two epochs */
  return 0;
}

/* on_epoch's non-zero stops after that epoch; the trainer's stop flag raised between two epochs returns
 * LAM_ERR_INTERRUPTED before the next, the trainer holding its place. */
static void test_fit_stops(void **state) {
  (void)state;
  cpu_run run = open_cpu(1e-3f);
  lam_trainer *t = run.t;
  lam_fit_opts o = lam_fit_opts_default();
  o.epochs = 5, o.test = &g_val, o.on_epoch = stop_at;
  g_calls = 0, g_stop_at = 2;
  lam_fit_result r;
  TU_OK(lam_fit(t, &o, &r));
  assert_int_equal(r.epochs, 2);
  assert_int_equal(g_calls, 2);
  assert_true(r.stopped && !r.stopped_early);
  assert_true(isfinite(r.test_acc)); /* without a validation part the test part is measured every epoch */
  /* the same trainer goes on: epochs counts the trainer's, so 3 more */
  o.on_epoch = raise_flag;
  g_calls = 0, g_flag = 0;
  TU_OK(lam_trainer_set_stop(t, &g_flag));
  TU_EXPECT_STATUS(lam_fit(t, &o, &r), LAM_ERR_INTERRUPTED);
  assert_int_equal(r.epochs, 1);
  assert_int_equal(g_calls, 1);
  assert_int_equal(lam_trainer_epochs_done(t), 3);
  assert_non_null(strstr(lam_last_error(), "stopped"));
  close_cpu(&run);
}

/* Options that cannot work fail before any epoch, saying which. */
static void test_fit_bad_opts(void **state) {
  (void)state;
  cpu_run run = open_cpu(1e-3f);
  lam_trainer *t = run.t;
  lam_fit_opts o = lam_fit_opts_default();
  lam_fit_result r;
  o.save_best = path_of("never.lamina");
  TU_EXPECT_STATUS(lam_fit(t, &o, &r), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "save_best"));
  o = lam_fit_opts_default();
  o.patience = 3;
  TU_EXPECT_STATUS(lam_fit(t, &o, &r), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "patience"));
  o = lam_fit_opts_default();
  o.val = &g_val, o.monitor = LAM_FIT_MONITOR_MIOU;
  TU_EXPECT_STATUS(lam_fit(t, &o, &r), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "IoU"));
  o = lam_fit_opts_default();
  o.epochs = 0;
  TU_EXPECT_STATUS(lam_fit(t, &o, &r), LAM_ERR_INVALID_ARG);
  TU_EXPECT_STATUS(lam_fit(NULL, &o, &r), LAM_ERR_INVALID_ARG);
  assert_int_equal(lam_trainer_epochs_done(t), 0);
  struct stat st;
  assert_int_not_equal(stat(path_of("never.lamina"), &st), 0);
  close_cpu(&run);
}

/* The mean IoU of a 3-class confusion matrix worked by hand, a class absent from both left out. */
static void test_confusion_iou(void **state) {
  (void)state;
  /* rows true, columns predicted: class 0: tp 5, fp 1 (true 1), fn 2 (predicted 1); class 1: tp 3, fp 2, fn 1;
   * class 2 never true nor predicted */
  const uint64_t conf[9] = {5, 2, 0, 1, 3, 0, 0, 0, 0};
  double iou[3];
  int present = 0;
  double miou = lam_confusion_iou(conf, 3, iou, &present);
  assert_int_equal(present, 2);
  assert_true(fabs(iou[0] - 5.0 / 8.0) < 1e-15);
  assert_true(fabs(iou[1] - 3.0 / 6.0) < 1e-15);
  assert_true(iou[2] == -1.0);
  assert_true(fabs(miou - (5.0 / 8.0 + 0.5) / 2) < 1e-15);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fit_matches_hand_loop), cmocka_unit_test(test_fit_early_stop),
      cmocka_unit_test(test_fit_stops),             cmocka_unit_test(test_fit_bad_opts),
      cmocka_unit_test(test_confusion_iou),
  };
  return TU_RUN_GROUP("fit", tests, setup, teardown) ? 1 : 0;
}
