/* test_checkpoint.c — checkpoints (src/nn/checkpoint.c) on the CPU backend.
 *
 * The essential property: a run interrupted by save / free / load and resumed gives the same epoch
 * losses and final parameters as an uninterrupted one, bit for bit — for SGD with momentum, Adam and
 * AdamW, saved after two epochs, before the first step, and after every epoch in turn. Then: the file
 * layout is the documented one (parsed here independently, with this file's own CRC-32); a model-only
 * round trip keeps parameters and lam_evaluate's accuracy; every bad file — truncated at every length,
 * any byte flipped, wrong magic, a future version, empty, missing, a directory, shapes that do not
 * match — is LAM_ERR_IO (or the stated status) with a message holding the key words, *model and
 * *trainer NULL and no backend memory left behind; saves replace files atomically and a failed save
 * leaves the old file intact with no temporary file behind;
 * lam_model_release_batch frees the batch buffers and the next evaluation or epoch plans them again; training
 * in NHWC holds no host-API copies and no added gradient's temporary outside the arena;
 * two ranks (threads with a shared-memory sum, lam_trainer_set_collective) train as one process, and
 * ranks started from different models are stopped by the replicas' check.
 *
 * The data is a small synthetic set built in memory: 300 images of 8×8 whose bright pixels depend on
 * the label, so the model learns and the losses move.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw, getpid: before any system header */
#include "testutil.h"

#include <dirent.h>
#include <ftw.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#define SPEC "conv 4 3, relu, maxpool 2, flatten, dense 10"
#define DROPOUT_SPEC "conv 4 3, relu, maxpool 2, flatten, dropout 0.3, dense 10"
#define IMG 8
#define NIMG 300
#define CLASSES 10
#define BATCH 32
#define MODEL_SEED 7u
#define TRAIN_SEED 11u
#define EPOCHS 4

static lam_ctx *g_ctx;
static char g_dir[64];
static lam_dataset g_set;
static uint8_t g_images[NIMG * IMG * IMG], g_labels[NIMG];

/* ---- files ------------------------------------------------------------------------------------ */

static const char *path_of(const char *name) {
  static char buf[8][256];
  static int next;
  char *p = buf[next++ % 8];
  snprintf(p, 256, "%s/%s", g_dir, name);
  return p;
}

static uint8_t *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("fopen(%s) failed", path);
  struct stat st;
  if (fstat(fileno(f), &st) != 0) fail_msg("fstat(%s) failed", path);
  size_t n = (size_t)st.st_size;
  uint8_t *p = malloc(n ? n : 1);
  assert_non_null(p);
  if (n && fread(p, 1, n, f) != n) fail_msg("fread(%s) failed", path);
  fclose(f);
  *len = n;
  return p;
}

static void write_all(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) fail_msg("fopen(%s) for writing failed", path);
  if (n && fwrite(p, 1, n, f) != n) fail_msg("fwrite(%s) failed", path);
  if (fclose(f) != 0) fail_msg("fclose(%s) failed", path);
}

/* Names in the test folder holding ".tmp.": what a save must never leave behind. */
static int tmp_files_left(void) {
  DIR *d = opendir(g_dir);
  if (!d) fail_msg("opendir(%s) failed", g_dir);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (strstr(e->d_name, ".tmp.")) {
      print_error("left behind: %s/%s\n", g_dir, e->d_name);
      n++;
    }
  closedir(d);
  return n;
}

/* CRC-32 as zlib computes it (reflected 0xEDB88320, init and final xor ~0), written out here so the
 * test checks the file against the standard, not against the library's own call. */
static uint32_t crc32_ref(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }
static void set_le32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void set_le64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
/* Where `needle` first occurs in p[0..n), or NULL. */
static uint8_t *find_bytes(uint8_t *p, size_t n, const char *needle) {
  size_t k = strlen(needle);
  for (size_t i = 0; i + k <= n; i++)
    if (!memcmp(p + i, needle, k)) return p + i;
  return NULL;
}

/* After editing a file's bytes, make its CRC right again (the last 4 bytes). */
static void fix_crc(uint8_t *p, size_t n) { set_le32(p + n - 4, crc32_ref(p, n - 4)); }

/* ---- models and trainers ---------------------------------------------------------------------- */

static lam_opt opt_for(lam_opt_kind kind) {
  lam_opt o = lam_opt_default(kind);
  if (kind == LAM_OPT_SGD) { /* every piece of SGD's state in play: momentum buffer, weight decay */
    o.lr = 0.05f;
    o.momentum = 0.9f;
    o.weight_decay = 1e-4f;
  } else {
    o.lr = 0.02f;
    if (kind == LAM_OPT_ADAM) o.weight_decay = 1e-4f;
  }
  return o;
}

static const char *g_spec = SPEC; /* the model of make() */

/* A model of spec in ctx and its trainer with kind's optimizer, from the tests' seeds, on the tests' set. */
static void make_in(lam_ctx *ctx, const char *spec, lam_opt_kind kind, lam_model **m, lam_trainer **t) {
  TU_OK(lam_model_create(ctx, spec, 1, IMG, IMG, MODEL_SEED, m));
  lam_opt o = opt_for(kind);
  TU_OK(lam_trainer_create(*m, &o, BATCH, TRAIN_SEED, &g_set, t));
}
static void make(lam_opt_kind kind, lam_model **m, lam_trainer **t) { make_in(g_ctx, g_spec, kind, m, t); }

static double epoch(lam_trainer *t) {
  lam_epoch_stats st;
  TU_OK(lam_trainer_epoch(t, NULL, NULL, 0, &st));
  return st.train_loss;
}

static float *params_of(lam_model *m) {
  size_t n = lam_model_param_count(m);
  float *p = malloc(n * sizeof *p);
  assert_non_null(p);
  TU_OK(lam_model_params_get(m, p, n));
  return p;
}

static size_t backend_in_use(void) {
  lam_mem_stats st;
  TU_OK(lam_mem_stats_get(g_ctx, &st));
  return st.in_use;
}

/* A checkpoint after `epochs` epochs of training with `kind`, at path. */
static void save_trained(const char *path, lam_opt_kind kind, int epochs, int with_trainer) {
  lam_model *m;
  lam_trainer *t;
  make(kind, &m, &t);
  for (int e = 0; e < epochs; e++) (void)epoch(t);
  TU_OK(lam_checkpoint_save(path, m, with_trainer ? t : NULL));
  lam_trainer_free(t);
  lam_model_free(m);
}

/* ---- failures --------------------------------------------------------------------------------- */

/* Loads path (with a trainer when `with_trainer`) and expects `want`, *model and *trainer NULL, no
 * backend memory kept, and a message holding every word of the NULL-terminated list. */
static void expect_load_fail(const char *what, const char *path, int with_trainer, lam_status want, ...) {
  lam_model *m = (lam_model *)&g_set; /* poison: a failing call must write NULL */
  lam_trainer *t = (lam_trainer *)&g_set;
  size_t before = backend_in_use();
  lam_status s = lam_checkpoint_load(g_ctx, path, &m, with_trainer ? &g_set : NULL, with_trainer ? &t : NULL);
  const char *msg = lam_last_error();
  if (s != want) fail_msg("%s: returned %s, want %s; last error: %s", what, lam_status_str(s), lam_status_str(want), msg);
  if (m) fail_msg("%s: failed but *model is not NULL", what);
  if (with_trainer && t) fail_msg("%s: failed but *trainer is not NULL", what);
  if (backend_in_use() != before)
    fail_msg("%s: %zu bytes of backend memory in use before, %zu after", what, before, backend_in_use());
  va_list ap;
  va_start(ap, want);
  for (const char *w; (w = va_arg(ap, const char *)) != NULL;)
    if (!strstr(msg, w)) fail_msg("%s: message does not mention '%s': \"%s\"", what, w, msg);
  va_end(ap);
}
#define EXPECT_LOAD_FAIL(what, path, with_trainer, want, ...) \
  expect_load_fail((what), (path), (with_trainer), (want), __VA_ARGS__, (const char *)NULL)

/* ---- fixture ---------------------------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* Label k lights the pixels whose index is k mod 10 (about 6 of the 64) over a dim noisy ground. */
static void make_set(void) {
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(0xc4e7));
  for (int i = 0; i < NIMG; i++) {
    int k = (int)(tu_next(&r) % CLASSES);
    g_labels[i] = (uint8_t)k;
    for (int p = 0; p < IMG * IMG; p++) {
      int v = (int)(tu_next(&r) % 60);
      if (p % CLASSES == k) v += 150 + (int)(tu_next(&r) % 50);
      g_images[i * IMG * IMG + p] = (uint8_t)v;
    }
  }
  g_set = (lam_dataset){.n = NIMG, .h = IMG, .w = IMG, .classes = CLASSES, .images = g_images, .labels = g_labels};
}

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/lamina_test_checkpoint_XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return -1;
  }
  if (lam_ctx_create(&g_ctx, LAM_DEVICE_CPU) != LAM_OK) {
    fprintf(stderr, "lam_ctx_create: %s\n", lam_last_error());
    return -1;
  }
  make_set();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  lam_ctx_free(g_ctx);
  return nftw(g_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- resuming is exact ------------------------------------------------------------------------ */

/* EPOCHS epochs of training with kind, without a break: the losses into want, the final parameters
 * returned (np of them). */
static float *uninterrupted(lam_opt_kind kind, double *want, size_t *np) {
  lam_model *m;
  lam_trainer *t;
  make(kind, &m, &t);
  for (int e = 0; e < EPOCHS; e++) want[e] = epoch(t);
  float *p = params_of(m);
  *np = lam_model_param_count(m);
  lam_trainer_free(t);
  lam_model_free(m);
  return p;
}

/* The interrupted run's losses and parameters are the uninterrupted one's, bit for bit. */
static void expect_same_run(const char *what, const double *want, const double *got, const float *want_p,
                            const float *got_p, size_t np) {
  for (int e = 0; e < EPOCHS; e++)
    print_message("%s: epoch %d loss %.17g (uninterrupted %.17g)\n", what, e + 1, got[e], want[e]);
  for (int e = 0; e < EPOCHS; e++)
    if (memcmp(&got[e], &want[e], sizeof(double)) != 0)
      fail_msg("%s: epoch %d loss %.17g, uninterrupted %.17g (differ by %.3g)", what, e + 1, got[e], want[e],
               got[e] - want[e]);
  for (size_t i = 0; i < np; i++)
    if (memcmp(&got_p[i], &want_p[i], sizeof(float)) != 0)
      fail_msg("%s: parameter %zu of %zu is %.9g, uninterrupted %.9g", what, i, np, got_p[i], want_p[i]);
}

/* Trains EPOCHS epochs without a break, then again from the same seeds with a save / free / load
 * before every epoch whose bit is set in reload_mask; losses and final parameters must be identical. */
static void check_resume(lam_opt_kind kind, unsigned reload_mask) {
  const char *names[] = {"sgd", "adam", "adamw"};
  char what[96];
  snprintf(what, sizeof what, "%s, reloads before epochs mask %#x", names[kind], reload_mask);
  const char *path = path_of("resume.ckpt");

  double want[EPOCHS], got[EPOCHS];
  size_t np;
  float *want_p = uninterrupted(kind, want, &np);
  lam_model *m;
  lam_trainer *t;
  if (!(want[EPOCHS - 1] < 0.8 * want[0]))
    fail_msg("%s: the model does not learn (losses %.6f .. %.6f): the test would prove little", what, want[0],
             want[EPOCHS - 1]);

  make(kind, &m, &t);
  for (int e = 0; e < EPOCHS; e++) {
    if (reload_mask & (1u << e)) {
      TU_OK(lam_checkpoint_save(path, m, t));
      lam_trainer_free(t);
      lam_model_free(m);
      m = NULL;
      t = NULL;
      TU_OK(lam_checkpoint_load(g_ctx, path, &m, &g_set, &t));
      assert_non_null(m);
      assert_non_null(t);
      if (lam_trainer_epochs_done(t) != e) fail_msg("%s: loaded %d epochs done, want %d", what, lam_trainer_epochs_done(t), e);
    }
    got[e] = epoch(t);
  }
  float *got_p = params_of(m);
  expect_same_run(what, want, got, want_p, got_p, np);
  assert_int_equal(lam_trainer_epochs_done(t), EPOCHS);
  free(want_p);
  free(got_p);
  lam_trainer_free(t);
  lam_model_free(m);
  assert_int_equal(tmp_files_left(), 0);
}

/* The case: Adam, interrupted after 2 of 4 epochs. */
static void test_resume_adam(void **state) {
  (void)state;
  check_resume(LAM_OPT_ADAM, 1u << 2);
}

static void test_resume_sgd_momentum(void **state) {
  (void)state;
  check_resume(LAM_OPT_SGD, 1u << 2);
}

static void test_resume_adamw(void **state) {
  (void)state;
  check_resume(LAM_OPT_ADAMW, 1u << 2);
}

/* Stopped in the middle of an epoch (lam_trainer_set_stop, as a signal handler would), saved, freed,
 * loaded and trained on: the same losses and parameters, bit for bit, as without the stop; the stop
 * comes from the progress callback after step `at` of epoch 2. */
static volatile int g_stop;
static int g_stop_at;
static void stop_cb(void *user, int step, int steps, double loss, double ips) {
  (void)user, (void)steps, (void)loss, (void)ips;
  if (step == g_stop_at) g_stop = 1;
}
static void check_stop_resume(lam_opt_kind kind, int at, int stream) {
  const char *path = path_of("stop.ckpt");
  char what[96];
  snprintf(what, sizeof what, "stopped after step %d of epoch 2%s", at, stream ? ", streaming" : "");
  double want[EPOCHS], got[EPOCHS];
  size_t np;
  float *want_p = uninterrupted(kind, want, &np);
  lam_model *m;
  lam_trainer *t;
  make(kind, &m, &t);
  if (stream) TU_OK(lam_trainer_set_stream(t, 2)); /* batches from the loader thread: it starts at the place */
  got[0] = epoch(t);
  g_stop = 0, g_stop_at = at;
  TU_OK(lam_trainer_set_stop(t, &g_stop));
  lam_epoch_stats st;
  lam_status s = lam_trainer_epoch(t, stop_cb, NULL, 1, &st);
  if (s != LAM_ERR_INTERRUPTED) fail_msg("stopped at step %d: returned %s, want interrupted", at, lam_status_str(s));
  assert_non_null(strstr(lam_last_error(), "after step"));
  assert_int_equal(lam_trainer_steps_in_epoch(t), at);
  assert_int_equal(lam_trainer_epochs_done(t), 1);
  TU_OK(lam_checkpoint_save(path, m, t));
  lam_trainer_free(t);
  lam_model_free(m);
  TU_OK(lam_checkpoint_load(g_ctx, path, &m, &g_set, &t));
  assert_int_equal(lam_trainer_steps_in_epoch(t), at);
  if (stream) TU_OK(lam_trainer_set_stream(t, 2));
  for (int e = 1; e < EPOCHS; e++) got[e] = epoch(t); /* epoch 2 continues from step at + 1 */
  assert_int_equal(lam_trainer_steps_in_epoch(t), 0);
  float *got_p = params_of(m);
  expect_same_run(what, want, got, want_p, got_p, np);
  free(want_p);
  free(got_p);
  lam_trainer_free(t);
  lam_model_free(m);
  assert_int_equal(tmp_files_left(), 0);
}
static void test_stop_mid_epoch(void **state) {
  (void)state;
  check_stop_resume(LAM_OPT_ADAM, 1, 0);
  check_stop_resume(LAM_OPT_SGD, 2, 0);
  check_stop_resume(LAM_OPT_ADAMW, (NIMG + BATCH - 1) / BATCH - 1, 0); /* the last step but one */
  check_stop_resume(LAM_OPT_ADAM, 3, 1); /* the streaming loader resumes at the place too */
}

/* Saved before the first step (no optimizer state yet), and reloaded before every epoch. */
static void test_resume_every_epoch(void **state) {
  (void)state;
  check_resume(LAM_OPT_ADAM, 0xfu);
  check_resume(LAM_OPT_SGD, 0xfu);
}

/* With dropout, whose masks change every step: resumed after two epochs and stopped mid-epoch, the same
 * losses and parameters as the uninterrupted run (its masks are keyed by the trainer's seed and the
 * steps taken, which the checkpoint keeps; the loaded model's own seed is 0). */
static void test_resume_dropout(void **state) {
  (void)state;
  g_spec = DROPOUT_SPEC;
  check_resume(LAM_OPT_ADAM, 1u << 2);
  check_stop_resume(LAM_OPT_SGD, 2, 0);
}
static int plain_spec(void **state) { /* the teardown: a failed check leaves the test early */
  (void)state;
  g_spec = SPEC;
  return 0;
}

/* ---- ranks (lam_trainer_set_collective) ------------------------------------------------------- */

/* Two ranks in one process: a thread each, with its own context, model and trainer, and a sum over
 * shared memory (the last to arrive adds both buffers into both and wakes the other). */
typedef struct fake_world {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;
  unsigned gen;
  double *buf[2];
} fake_world;
typedef struct fake_rank {
  fake_world *w;
  int rank;
  uint64_t model_seed;
  const char *spec; /* SPEC where NULL */
  int sync_bn;
  double loss[EPOCHS];
  lam_status status;
  char message[512];
} fake_rank;

static lam_status fake_sum(void *user, double *x, size_t n) {
  fake_rank *r = user;
  fake_world *w = r->w;
  pthread_mutex_lock(&w->mu);
  w->buf[r->rank] = x;
  if (++w->arrived == 2) {
    for (size_t i = 0; i < n; i++) w->buf[0][i] = w->buf[1][i] = w->buf[0][i] + w->buf[1][i];
    w->arrived = 0;
    w->gen++;
    pthread_cond_broadcast(&w->cv);
  } else {
    unsigned g = w->gen;
    while (w->gen == g) pthread_cond_wait(&w->cv, &w->mu);
  }
  pthread_mutex_unlock(&w->mu);
  return LAM_OK;
}

static void *fake_rank_run(void *arg) {
  fake_rank *r = arg;
  lam_ctx *ctx = NULL;
  lam_model *m = NULL;
  lam_trainer *t = NULL;
  lam_opt o = opt_for(LAM_OPT_SGD);
  lam_collective c = {.rank = r->rank, .world = 2, .sum = fake_sum, .user = r};
  r->status = lam_ctx_create(&ctx, LAM_DEVICE_CPU);
  if (r->status == LAM_OK) r->status = lam_ctx_set_threads(ctx, 1);
  if (r->status == LAM_OK) r->status = lam_model_create(ctx, r->spec ? r->spec : SPEC, 1, IMG, IMG, r->model_seed, &m);
  if (r->status == LAM_OK) r->status = lam_trainer_create(m, &o, BATCH, TRAIN_SEED, &g_set, &t);
  if (r->status == LAM_OK) r->status = lam_trainer_set_collective(t, &c);
  if (r->status == LAM_OK && r->sync_bn) r->status = lam_trainer_set_sync_bn(t, 1);
  for (int e = 0; e < EPOCHS && r->status == LAM_OK; e++) {
    lam_epoch_stats st;
    r->status = lam_trainer_epoch(t, NULL, NULL, 0, &st);
    r->loss[e] = st.train_loss;
  }
  if (r->status != LAM_OK) snprintf(r->message, sizeof r->message, "%s", lam_last_error());
  lam_trainer_free(t);
  lam_model_free(m);
  lam_ctx_free(ctx);
  return NULL;
}

static void run_two_ranks_of(fake_rank r[2], uint64_t seed0, uint64_t seed1, const char *spec, int sync_bn) {
  static fake_world w;
  w = (fake_world){.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) {
    r[i] = (fake_rank){.w = &w, .rank = i, .model_seed = i ? seed1 : seed0, .spec = spec, .sync_bn = sync_bn};
    assert_int_equal(pthread_create(&th[i], NULL, fake_rank_run, &r[i]), 0);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
}
static void run_two_ranks(fake_rank r[2], uint64_t seed0, uint64_t seed1) { run_two_ranks_of(r, seed0, seed1, NULL, 0); }

/* Two ranks at batch 32 train as one process does (SGD with momentum: its step scales with the
 * gradient, so a wrong weighting of the shares shows): the same epoch losses within a relative 1e-5. */
static void test_ranks_as_one(void **state) {
  (void)state;
  double want[EPOCHS];
  size_t np;
  free(uninterrupted(LAM_OPT_SGD, want, &np));
  fake_rank r[2];
  run_two_ranks(r, MODEL_SEED, MODEL_SEED);
  for (int i = 0; i < 2; i++)
    if (r[i].status != LAM_OK) fail_msg("rank %d: %s: %s", i, lam_status_str(r[i].status), r[i].message);
  for (int e = 0; e < EPOCHS; e++) {
    print_message("epoch %d: ranks %.9g / %.9g, one process %.9g\n", e + 1, r[0].loss[e], r[1].loss[e], want[e]);
    if (r[0].loss[e] != r[1].loss[e] || !(fabs(r[0].loss[e] - want[e]) <= 1e-5 * want[e]))
      fail_msg("epoch %d: ranks' losses %.9g and %.9g, one process %.9g", e + 1, r[0].loss[e], r[1].loss[e], want[e]);
  }
}

/* Ranks started from different models: the replicas' check stops both after the first epoch, saying so. */
static void test_ranks_replicas_differ(void **state) {
  (void)state;
  fake_rank r[2];
  run_two_ranks(r, MODEL_SEED, MODEL_SEED + 1);
  for (int i = 0; i < 2; i++) {
    if (r[i].status != LAM_ERR_INVALID_ARG || !strstr(r[i].message, "replicas' parameters differ after epoch 1"))
      fail_msg("rank %d: %s: '%s'; want invalid argument and 'replicas' parameters differ after epoch 1'", i,
               lam_status_str(r[i].status), r[i].message);
  }
}

/* BatchNorm over 2 ranks: with sync BN (each BatchNorm's statistics, and its backward's sums, summed over the
 * ranks) they train as one process at the same global batch, within a relative 1e-4 (the statistics come from
 * float sums of x and x^2, one process's from two passes in double); with each rank's own statistics (16
 * images of the 32) they do not — the check that this test can tell the two apart. */
#define BN_SPEC "conv 4 3, bn, relu, maxpool 2, flatten, dense 10"
static void test_ranks_sync_bn(void **state) {
  (void)state;
  double want[EPOCHS];
  {
    lam_ctx *ctx = NULL;
    lam_model *m = NULL;
    lam_trainer *t = NULL;
    TU_OK(lam_ctx_create(&ctx, LAM_DEVICE_CPU));
    TU_OK(lam_ctx_set_threads(ctx, 1));
    make_in(ctx, BN_SPEC, LAM_OPT_SGD, &m, &t);
    assert_int_equal(lam_trainer_set_sync_bn(t, 1), LAM_ERR_INVALID_ARG); /* no ranks */
    for (int e = 0; e < EPOCHS; e++) want[e] = epoch(t);
    lam_trainer_free(t);
    lam_model_free(m);
    lam_ctx_free(ctx);
  }
  fake_rank r[2];
  double worst_local = 0;
  for (int sync = 1; sync >= 0; sync--) {
    run_two_ranks_of(r, MODEL_SEED, MODEL_SEED, BN_SPEC, sync);
    for (int i = 0; i < 2; i++)
      if (r[i].status != LAM_OK) fail_msg("sync %d, rank %d: %s: %s", sync, i, lam_status_str(r[i].status), r[i].message);
    for (int e = 0; e < EPOCHS; e++) {
      const double d = fabs(r[0].loss[e] - want[e]) / want[e];
      print_message("%s: epoch %d: ranks %.9g / %.9g, one process %.9g (relative %.2g)\n", sync ? "sync BN" : "local BN",
                    e + 1, r[0].loss[e], r[1].loss[e], want[e], d);
      if (r[0].loss[e] != r[1].loss[e]) fail_msg("epoch %d: the ranks' losses differ", e + 1);
      if (sync && !(d <= 1e-4)) fail_msg("sync BN, epoch %d: ranks %.9g, one process %.9g", e + 1, r[0].loss[e], want[e]);
      if (!sync && d > worst_local) worst_local = d;
    }
  }
  if (!(worst_local > 1e-3)) fail_msg("local BN came within %.2g of one process: the test cannot tell", worst_local);
}

/* The collective's API on the CPU: an NCCL id is refused there (CPU ranks sum through the caller),
 * several CPU ranks without a sum are refused, and lam_trainer_sum without ranks leaves x as it is. */
static void test_ranks_api_errors(void **state) {
  (void)state;
  lam_ctx *ctx = NULL;
  lam_model *m = NULL;
  lam_trainer *t = NULL;
  TU_OK(lam_ctx_create(&ctx, LAM_DEVICE_CPU));
  make_in(ctx, SPEC, LAM_OPT_SGD, &m, &t);
  unsigned char id[LAM_NCCL_ID_BYTES] = {1};
  lam_collective c = {.rank = 0, .world = 2, .nccl_id = id};
  assert_int_equal(lam_trainer_set_collective(t, &c), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "nccl_id is for CUDA contexts"));
  c.nccl_id = NULL;
  assert_int_equal(lam_trainer_set_collective(t, &c), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "2 CPU ranks need a sum function"));
  assert_int_equal(lam_trainer_set_buckets(t, 1 << 20), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "buckets are for GPU ranks"));
  double x[2] = {1.5, -2.0};
  TU_OK(lam_trainer_sum(t, x, 2));
  assert_true(x[0] == 1.5 && x[1] == -2.0);
  lam_trainer_free(t);
  lam_model_free(m);
  lam_ctx_free(ctx);
}

/* On a GPU, a collective of one rank over NCCL (the path GPU ranks take: the gradients' sum inside the
 * step's graph, the epoch's sums and the replica check through NCCL) trains exactly as no collective:
 * the same losses and the same parameters, bit for bit, the step in a graph every time; so does it with
 * the sum in buckets of 16 bytes (a bucket after every node with parameters, on the second stream). */
static void test_ranks_nccl_of_one(void **state) {
  (void)state;
  if (lam_cuda_device_count(NULL) == 0) skip();
  unsigned char id[LAM_NCCL_ID_BYTES];
  TU_OK(lam_nccl_unique_id(id));
  double loss[3][EPOCHS];
  float *params[3] = {NULL, NULL, NULL};
  size_t np = 0;
  for (int k = 0; k < 3; k++) {
    lam_ctx *ctx = NULL;
    lam_model *m = NULL;
    lam_trainer *t = NULL;
    TU_OK(lam_ctx_create(&ctx, LAM_DEVICE_CUDA));
    make_in(ctx, SPEC, LAM_OPT_SGD, &m, &t);
    if (k) {
      const lam_collective c = {.rank = 0, .world = 1, .nccl_id = id};
      if (k == 2) TU_OK(lam_nccl_unique_id(id)); /* a communicator of its own */
      TU_OK(lam_trainer_set_collective(t, &c));
      if (k == 2) TU_OK(lam_trainer_set_buckets(t, 16));
    }
    for (int e = 0; e < EPOCHS; e++) {
      lam_epoch_stats st;
      TU_OK(lam_trainer_epoch(t, NULL, NULL, 0, &st));
      loss[k][e] = st.train_loss;
    }
    int graph = 0;
    TU_OK(lam_trainer_graph(t, &graph));
    assert_true(graph);
    np = lam_model_param_count(m);
    params[k] = malloc(np * sizeof(float));
    assert_non_null(params[k]);
    TU_OK(lam_model_params_get(m, params[k], np));
    lam_trainer_free(t);
    lam_model_free(m);
    lam_ctx_free(ctx);
  }
  for (int e = 0; e < EPOCHS; e++) {
    print_message("epoch %d: NCCL of one %.9g, in buckets %.9g, alone %.9g\n", e + 1, loss[1][e], loss[2][e],
                  loss[0][e]);
    assert_true(loss[0][e] == loss[1][e] && loss[0][e] == loss[2][e]);
  }
  assert_memory_equal(params[0], params[1], np * sizeof(float));
  assert_memory_equal(params[0], params[2], np * sizeof(float));
  for (int k = 0; k < 3; k++) free(params[k]);
}

/* ---- learning-rate schedules ------------------------------------------------------------------- */

/* lam_lr_at against the formulas written out here in float64, and the parser. */
static void test_lr_schedule_values(void **state) {
  (void)state;
  lam_lr_schedule s;
  TU_OK(lam_lr_schedule_parse("cosine", &s));
  s.epochs = 4; /* 10 steps an epoch: T = 40 */
  assert_true(lam_lr_at(&s, 0.1, 0, 10) == 0.1);
  assert_true(fabs(lam_lr_at(&s, 0.1, 20, 10) - 0.05) < 1e-15);
  assert_true(fabs(lam_lr_at(&s, 0.1, 39, 10) - 0.1 * (1 + cos(M_PI * 39 / 40)) / 2) < 1e-15);
  assert_true(lam_lr_at(&s, 0.1, 500, 10) == lam_lr_at(&s, 0.1, 39, 10)); /* past the end: the last rate */
  s.warmup_epochs = 1; /* W = 10: (t + 1) / 10 of the rate, then the cosine over the other 30 steps */
  assert_true(fabs(lam_lr_at(&s, 0.1, 4, 10) - 0.05) < 1e-15);
  assert_true(fabs(lam_lr_at(&s, 0.1, 10, 10) - 0.1) < 1e-15);
  assert_true(fabs(lam_lr_at(&s, 0.1, 25, 10) - 0.05) < 1e-15);
  TU_OK(lam_lr_schedule_parse("step:2:0.5", &s));
  s.epochs = 6;
  assert_true(lam_lr_at(&s, 0.1, 19, 10) == 0.1 && lam_lr_at(&s, 0.1, 20, 10) == 0.05);
  assert_true(lam_lr_at(&s, 0.1, 59, 10) == 0.025);
  assert_true(lam_lr_at(&s, 0.1, 60, 10) == 0.0125); /* a step schedule goes on past the run it was set for */
  TU_OK(lam_lr_schedule_parse("onecycle", &s));
  s.epochs = 10; /* T = 100: up from lr/25 to lr by step 29, then down to lr/25/1e4 at step 99 */
  assert_true(fabs(lam_lr_at(&s, 1.0, 0, 10) - 0.04) < 1e-15);
  assert_true(fabs(lam_lr_at(&s, 1.0, 29, 10) - 1.0) < 1e-15);
  assert_true(fabs(lam_lr_at(&s, 1.0, 99, 10) - 0.04e-4) < 1e-15);
  double mid = 0.04e-4 + (1.0 - 0.04e-4) / 2 * (cos(M_PI * (64.0 - 29.0) / 70.0) + 1);
  assert_true(fabs(lam_lr_at(&s, 1.0, 64, 10) - mid) < 1e-15);
  const char *bad[] = {"cosin", "step", "step:0:0.5", "step:2:0", "step:2:1.5", "step:2:x", "step:2:0.5x", ""};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    if (lam_lr_schedule_parse(bad[i], &s) != LAM_ERR_INVALID_ARG) fail_msg("'%s' was accepted", bad[i]);
    assert_non_null(strstr(lam_last_error(), "schedule"));
  }
  lam_model *m;
  lam_trainer *t;
  make(LAM_OPT_SGD, &m, &t);
  lam_lr_schedule over = {.kind = LAM_LR_COSINE, .epochs = 2, .warmup_epochs = 2, .step_epochs = 1, .gamma = 1};
  assert_int_equal(lam_trainer_set_lr_schedule(t, &over), LAM_ERR_INVALID_ARG); /* warm-up as long as the run */
  lam_trainer_free(t);
  lam_model_free(m);
}

/* The optimizer takes each step's rate from the schedule: plain SGD on whole-set batches (one step an
 * epoch) under step:1:0.5 ends where lam_model_step ends with the rates 0.1, 0.05, 0.025 by hand (up to
 * the batch's summation order), and far from where a constant rate ends. */
static void test_lr_schedule_applied(void **state) {
  (void)state;
  lam_opt o = lam_opt_default(LAM_OPT_SGD);
  o.lr = 0.1f;
  lam_model *ms, *mh, *mc;
  lam_trainer *ts, *tc;
  TU_OK(lam_model_create(g_ctx, SPEC, 1, IMG, IMG, MODEL_SEED, &ms));
  TU_OK(lam_model_create(g_ctx, SPEC, 1, IMG, IMG, MODEL_SEED, &mh));
  TU_OK(lam_model_create(g_ctx, SPEC, 1, IMG, IMG, MODEL_SEED, &mc));
  TU_OK(lam_trainer_create(ms, &o, NIMG, TRAIN_SEED, &g_set, &ts));
  TU_OK(lam_trainer_create(mc, &o, NIMG, TRAIN_SEED, &g_set, &tc));
  lam_lr_schedule ls;
  TU_OK(lam_lr_schedule_parse("step:1:0.5", &ls));
  ls.epochs = 3;
  TU_OK(lam_trainer_set_lr_schedule(ts, &ls));
  float *x = malloc((size_t)NIMG * IMG * IMG * sizeof *x);
  assert_non_null(x);
  for (size_t i = 0; i < (size_t)NIMG * IMG * IMG; i++) x[i] = ((float)g_set.images[i] / 255.0f - 0.5f) / 0.5f;
  for (int e = 0; e < 3; e++) {
    (void)epoch(ts);
    (void)epoch(tc);
    lam_opt oh = o;
    oh.lr = (float)(0.1 * pow(0.5, e));
    float loss;
    TU_OK(lam_model_loss_backward(mh, NIMG, x, g_set.labels, &loss));
    TU_OK(lam_model_step(mh, &oh));
    double want = oh.lr, got = lam_trainer_lr(ts);
    if (fabs(got - want) > 1e-9) fail_msg("epoch %d: the trainer says its rate is %g, want %g", e + 1, got, want);
  }
  float *ps = params_of(ms), *ph = params_of(mh), *pc = params_of(mc);
  size_t np = lam_model_param_count(ms);
  double d_hand = 0, d_const = 0;
  for (size_t i = 0; i < np; i++) {
    d_hand = fmax(d_hand, fabs((double)ps[i] - ph[i]));
    d_const = fmax(d_const, fabs((double)ps[i] - pc[i]));
  }
  print_message("schedule vs by hand: max |diff| %.3g; vs a constant rate %.3g\n", d_hand, d_const);
  if (!(d_hand < 1e-5)) fail_msg("the scheduled run is %g from the run by hand", d_hand);
  if (!(d_const > 1e-3)) fail_msg("the scheduled run is only %g from a constant rate's: the schedule did nothing", d_const);
  free(x);
  free(ps);
  free(ph);
  free(pc);
  lam_trainer_free(ts);
  lam_trainer_free(tc);
  lam_model_free(ms);
  lam_model_free(mh);
  lam_model_free(mc);
}

/* ---- the file is the documented format --------------------------------------------------------- */

static void test_format(void **state) {
  (void)state;
  const char *path = path_of("format.ckpt");
  lam_model *m;
  lam_trainer *t;
  make(LAM_OPT_ADAM, &m, &t);
  const lam_lr_schedule ls = {.kind = LAM_LR_STEP, .epochs = 3, .warmup_epochs = 0.25, .step_epochs = 2, .gamma = 0.3};
  TU_OK(lam_trainer_set_lr_schedule(t, &ls));
  (void)epoch(t);
  TU_OK(lam_checkpoint_save(path, m, t));
  size_t len, np = lam_model_param_count(m);
  uint8_t *f = read_all(path, &len);
  float *p = params_of(m);
  const char *spec = lam_model_spec(m);
  size_t sl = strlen(spec);

  /* conv 4 3 on 1x8x8: 4*9 + 4; maxpool to 4x3x3; dense 10: 36*10 + 10. */
  const uint64_t layers[5][2] = {{36, 4}, {0, 0}, {0, 0}, {0, 0}, {360, 10}};
  assert_int_equal(np, 410);
  /* v2: normalization of 1 channel (4 + 8), no running statistics (8), label smoothing (4) */
  /* v3: the interrupted epoch's place (4 + 32 + 12); v4: the rate's schedule (4 + 4 + 8 + 4 + 8) */
  size_t want_len =
      8 + 4 + 4 + sl + 12 + 8 + 4 + 5 * 16 + np * 4 + 24 + 4 + (4 + 24 + 8 + 2 * np * 4 + 4 + 8 + 4 + 32 + 48 + 28) + 4;
  if (len != want_len) fail_msg("the file has %zu bytes, the documented layout %zu", len, want_len);

  size_t o = 0;
  assert_memory_equal(f, "LAMCKPT\0", 8);
  o += 8;
  assert_int_equal(le32(f + o), 4); /* version */
  o += 4;
  assert_int_equal(le32(f + o), sl);
  o += 4;
  assert_memory_equal(f + o, spec, sl);
  o += sl;
  assert_int_equal(le32(f + o), 1);
  assert_int_equal(le32(f + o + 4), IMG);
  assert_int_equal(le32(f + o + 8), IMG);
  o += 12;
  assert_int_equal(le64(f + o), np);
  o += 8;
  assert_int_equal(le32(f + o), 5);
  o += 4;
  for (int i = 0; i < 5; i++, o += 16) {
    assert_int_equal(le64(f + o), layers[i][0]);
    assert_int_equal(le64(f + o + 8), layers[i][1]);
  }
  for (size_t i = 0; i < np; i++, o += 4) {
    uint32_t u;
    memcpy(&u, &p[i], 4);
    if (le32(f + o) != u) fail_msg("parameter %zu: file has %08x, model %08x", i, le32(f + o), u);
  }
  assert_int_equal(le32(f + o), 1); /* normalized channels */
  float nm, ns;
  uint32_t un = le32(f + o + 4), us = le32(f + o + 8);
  memcpy(&nm, &un, 4);
  memcpy(&ns, &us, 4);
  assert_true(nm == 0.5f && ns == 0.5f); /* the default mean and std */
  assert_int_equal(le64(f + o + 12), 0); /* no running statistics */
  assert_int_equal(le32(f + o + 20), 0); /* no label smoothing: 0.0f */
  o += 24;
  assert_int_equal(le32(f + o), 1); /* training state follows */
  o += 4;
  assert_int_equal(le32(f + o), LAM_OPT_ADAM);
  float lr;
  uint32_t u = le32(f + o + 4);
  memcpy(&lr, &u, 4);
  assert_true(lr == 0.02f);
  o += 4 + 24;
  int64_t steps = (int64_t)le64(f + o);
  assert_int_equal(steps, (NIMG + BATCH - 1) / BATCH); /* one epoch of steps */
  o += 8 + 2 * np * 4;
  assert_int_equal(le32(f + o), BATCH);
  assert_int_equal(le64(f + o + 4), TRAIN_SEED);
  assert_int_equal(le32(f + o + 12), 1); /* epochs done */
  o += 16 + 32;
  assert_int_equal(le32(f + o), 0); /* v3: not interrupted */
  o += 48;
  assert_int_equal(le32(f + o), LAM_LR_STEP); /* v4: the schedule */
  assert_int_equal(le32(f + o + 4), 3);
  double wu, gm;
  uint64_t u64 = le64(f + o + 8);
  memcpy(&wu, &u64, 8);
  assert_int_equal(le32(f + o + 16), 2);
  u64 = le64(f + o + 20);
  memcpy(&gm, &u64, 8);
  assert_true(wu == 0.25 && gm == 0.3);
  o += 28;
  assert_int_equal(o, len - 4);
  if (le32(f + o) != crc32_ref(f, o)) fail_msg("stored CRC %08x, CRC-32 of the file %08x", le32(f + o), crc32_ref(f, o));

  /* A model-only save: the flag is 0 and nothing but the CRC follows the parameters and the v2 block. */
  const char *path2 = path_of("format-model.ckpt");
  TU_OK(lam_checkpoint_save(path2, m, NULL));
  size_t len2;
  uint8_t *g = read_all(path2, &len2);
  size_t flag_at = 8 + 4 + 4 + sl + 12 + 8 + 4 + 5 * 16 + np * 4 + 24;
  assert_int_equal(len2, flag_at + 4 + 4);
  assert_int_equal(le32(g + flag_at), 0);
  assert_memory_equal(g, f, flag_at); /* same header and parameters */
  assert_int_equal(le32(g + len2 - 4), crc32_ref(g, len2 - 4));
  free(g);
  free(f);
  free(p);
  lam_trainer_free(t);
  lam_model_free(m);
}

/* ---- model alone ------------------------------------------------------------------------------ */

static void test_model_only_roundtrip(void **state) {
  (void)state;
  const char *path = path_of("model.ckpt");
  lam_model *m;
  lam_trainer *t;
  make(LAM_OPT_ADAM, &m, &t);
  (void)epoch(t);
  (void)epoch(t);
  TU_OK(lam_checkpoint_save(path, m, NULL));
  double acc0, loss0;
  TU_OK(lam_evaluate(m, &g_set, 64, &acc0, &loss0, NULL));
  float *p0 = params_of(m);

  lam_model *m2 = NULL;
  TU_OK(lam_checkpoint_load(g_ctx, path, &m2, NULL, NULL));
  assert_non_null(m2);
  assert_string_equal(lam_model_spec(m2), lam_model_spec(m));
  assert_int_equal(lam_model_param_count(m2), lam_model_param_count(m));
  float *p1 = params_of(m2);
  assert_memory_equal(p0, p1, lam_model_param_count(m) * sizeof(float));
  double acc1, loss1;
  TU_OK(lam_evaluate(m2, &g_set, 64, &acc1, &loss1, NULL));
  print_message("model alone: accuracy %.4f loss %.6f, reloaded %.4f %.6f\n", acc0, loss0, acc1, loss1);
  assert_true(acc0 > 0.5); /* it learned something */
  assert_memory_equal(&acc0, &acc1, sizeof acc0);
  assert_memory_equal(&loss0, &loss1, sizeof loss0);
  lam_model_free(m2);

  /* A model-only file cannot resume training: a clear error, nothing made. */
  EXPECT_LOAD_FAIL("model-only file with a trainer", path, 1, LAM_ERR_INVALID_ARG, path, "no training state",
                   "trainer = NULL");

  /* A full checkpoint loads as a model alone too. */
  const char *full = path_of("full.ckpt");
  TU_OK(lam_checkpoint_save(full, m, t));
  m2 = NULL;
  TU_OK(lam_checkpoint_load(g_ctx, full, &m2, NULL, NULL));
  free(p1);
  p1 = params_of(m2);
  assert_memory_equal(p0, p1, lam_model_param_count(m) * sizeof(float));
  lam_model_free(m2);

  free(p0);
  free(p1);
  lam_trainer_free(t);
  lam_model_free(m);
}

/* ---- batch buffers ---------------------------------------------------------------------------- */

static size_t activations_of(const lam_model *m) {
  lam_model_memory mm;
  TU_OK(lam_model_memory_get(m, NULL, &mm));
  return mm.activations;
}

/* In a format other than NCHW float32 (NHWC, forced here), training makes no host-API copies: the float
 * input and logits are made at lam_model_forward's first call, by their size. A gradient added through a
 * temporary (e1 is read by maxpool, whose backward cannot add, and by concat) has it in the arena, planned
 * for that backward alone: the batch buffers are the plan (arena, scratch, input) plus a label and a
 * prediction a sample, each rounded to the allocator's 512 bytes. Before, both copies and two slots of
 * e1's size stayed allocated through training. */
static void test_host_buffers_lazy(void **state) {
  (void)state;
  lam_model_options mo = lam_model_options_default();
  mo.layout = 2; /* NHWC */
  TU_OK(lam_ctx_set_model_options(g_ctx, &mo));
  lam_model *m;
  lam_status s = lam_model_create(g_ctx, "conv 4 3 pad 1, e1: relu, maxpool 2, upsample 2, concat @e1, flatten, dense 10",
                                  1, IMG, IMG, MODEL_SEED, &m);
  mo = lam_model_options_default();
  TU_OK(lam_ctx_set_model_options(g_ctx, &mo));
  TU_OK(s);
  lam_opt o = opt_for(LAM_OPT_ADAM);
  lam_trainer *t;
  TU_OK(lam_trainer_create(m, &o, BATCH, TRAIN_SEED, &g_set, &t));
  double loss0 = epoch(t), loss1 = epoch(t);
  assert_true(isfinite(loss0) && loss1 < loss0); /* the added gradient arrives: it learns */
  size_t trained = activations_of(m), planned = 0;
  int count = 0;
  TU_OK(lam_model_nodes(m, BATCH, NULL, 0, &count, &planned));
  print_message("nhwc: trained with %zu bytes of batch buffers, planned %zu\n", trained, planned);
  assert_true(trained >= planned + 2 * BATCH);
  assert_true(trained <= planned + 2 * BATCH + 5 * 512);
  float x[BATCH * IMG * IMG], logits[BATCH * CLASSES];
  for (int i = 0; i < BATCH * IMG * IMG; i++) x[i] = (float)(i % 17) / 8.0f - 1.0f;
  TU_OK(lam_model_forward(m, BATCH, x, logits));
  const size_t grown = activations_of(m) - trained, copies = sizeof x + sizeof logits;
  assert_true(grown >= copies && grown < copies + 2 * 512);
  for (int i = 0; i < BATCH * CLASSES; i++) assert_true(isfinite(logits[i]));
  lam_trainer_free(t);
  lam_model_free(m);
}

/* lam_model_release_batch gives back what lam_evaluate and training planned (the memory figures'
 * "activations", all of it: in_use drops back to the model's own), and the next call plans again:
 * lam_evaluate gives the same figures, and a trainer, resident or streaming, whose buffers are released
 * after every epoch trains as one whose are not, bit for bit. */
static void test_release_batch(void **state) {
  (void)state;
  lam_model *m;
  TU_OK(lam_model_create(g_ctx, SPEC, 1, IMG, IMG, MODEL_SEED, &m));
  size_t idle = backend_in_use();
  assert_int_equal(activations_of(m), 0);
  TU_OK(lam_model_release_batch(m)); /* nothing planned: nothing to do */
  double acc0, loss0, acc1, loss1;
  TU_OK(lam_evaluate(m, &g_set, 64, &acc0, &loss0, NULL));
  size_t planned = activations_of(m);
  assert_true(planned > 0);
  assert_int_equal(backend_in_use() - idle, planned); /* lam_evaluate's own buffers are gone */
  TU_OK(lam_model_release_batch(m));
  assert_int_equal(activations_of(m), 0);
  assert_int_equal(backend_in_use(), idle);
  TU_OK(lam_model_release_batch(m)); /* twice is fine */
  TU_OK(lam_evaluate(m, &g_set, 64, &acc1, &loss1, NULL));
  assert_memory_equal(&acc0, &acc1, sizeof acc0);
  assert_memory_equal(&loss0, &loss1, sizeof loss0);
  assert_int_equal(activations_of(m), planned);
  TU_OK(lam_model_release_batch(m));

  /* A batch larger than the set plans for the set: 1000 over NIMG images plans as NIMG does. */
  TU_OK(lam_evaluate(m, &g_set, NIMG, &acc1, &loss1, NULL));
  size_t whole = activations_of(m);
  TU_OK(lam_model_release_batch(m));
  TU_OK(lam_evaluate(m, &g_set, 1000, &acc1, &loss1, NULL));
  print_message("release: batch 64 plans %zu bytes, %d %zu, 1000 %zu\n", planned, NIMG, whole, activations_of(m));
  assert_int_equal(activations_of(m), whole);
  TU_OK(lam_model_release_batch(m));
  assert_int_equal(backend_in_use(), idle);
  lam_model_free(m);
  TU_EXPECT_STATUS(lam_model_release_batch(NULL), LAM_ERR_INVALID_ARG);

  for (int stream = 0; stream <= 1; stream++) {
    double want[EPOCHS], got[EPOCHS];
    size_t np;
    float *want_p = uninterrupted(LAM_OPT_ADAM, want, &np);
    lam_trainer *t;
    make(LAM_OPT_ADAM, &m, &t);
    if (stream) TU_OK(lam_trainer_set_stream(t, 2)); /* the loader writes into the batch buffers */
    for (int e = 0; e < EPOCHS; e++) {
      got[e] = epoch(t);
      TU_OK(lam_model_release_batch(m));
      assert_int_equal(activations_of(m), 0);
    }
    float *got_p = params_of(m);
    expect_same_run(stream ? "released after every epoch, streaming" : "released after every epoch", want, got,
                    want_p, got_p, np);
    free(want_p);
    free(got_p);
    lam_trainer_free(t);
    lam_model_free(m);
  }
}

/* ---- bad files -------------------------------------------------------------------------------- */

static void test_truncated(void **state) {
  (void)state;
  const char *good = path_of("trunc-good.ckpt"), *cut = path_of("trunc.ckpt");
  save_trained(good, LAM_OPT_ADAM, 1, 1);
  size_t len;
  uint8_t *f = read_all(good, &len);
  char what[96], has[48];
  /* Every length through the header and the first parameters, then every 13th, then every one of the
   * last 64 (the trainer's fields and the CRC): cuts in the magic, the header, the spec, the
   * parameters, the optimizer state, the trainer's fields and the CRC. */
  for (size_t n = 1; n < len; n += (n < 256 || n + 64 >= len) ? 1 : 13) {
    write_all(cut, f, n);
    snprintf(what, sizeof what, "cut to %zu of %zu bytes", n, len);
    snprintf(has, sizeof has, "file has %zu bytes", n);
    EXPECT_LOAD_FAIL(what, cut, n % 2, LAM_ERR_IO, cut, "truncated", has);
  }
  /* A cut past the header fails the CRC, checked first: the message says damaged or truncated. */
  write_all(cut, f, len - 1);
  snprintf(what, sizeof what, "file has %zu bytes", len - 1);
  EXPECT_LOAD_FAIL("one byte short", cut, 0, LAM_ERR_IO, "CRC-32 mismatch", "damaged or truncated", what);
  print_message("truncated: %s\n", lam_last_error());
  free(f);
}

static void test_corrupted(void **state) {
  (void)state;
  const char *good = path_of("crc-good.ckpt"), *bad = path_of("crc.ckpt");
  save_trained(good, LAM_OPT_ADAM, 1, 1);
  size_t len;
  uint8_t *f = read_all(good, &len);
  size_t spec_at = 16, params_at = 16 + le32(f + 12) + 12 + 8 + 4 + 5 * 16;
  /* Bytes no length depends on: a spec character, parameters, Adam's moments, the rng, the CRC. */
  const size_t where[] = {spec_at + 2, params_at, params_at + 777, len - 1000, len - 20, len - 4, len - 1};
  for (size_t i = 0; i < sizeof where / sizeof where[0]; i++) {
    f[where[i]] ^= 0x10;
    write_all(bad, f, len);
    f[where[i]] ^= 0x10;
    char what[96];
    snprintf(what, sizeof what, "byte %zu of %zu flipped", where[i], len);
    EXPECT_LOAD_FAIL(what, bad, (int)(i % 2), LAM_ERR_IO, bad, "corrupted", "CRC-32 mismatch");
  }
  print_message("flipped: %s\n", lam_last_error());
  /* Any byte, low or high bit: never accepted (some land on lengths and read as truncated or trailing
   * data, the version field as a newer version, the magic as not a checkpoint). Every byte of the
   * header and the first parameters, every 7th after, every one of the last 64. */
  for (size_t at = 0; at < len; at += (at < 256 || at + 64 >= len) ? 1 : 7) {
    for (int bit = 0; bit < 8; bit += 7) {
      f[at] ^= (uint8_t)(1u << bit);
      write_all(bad, f, len);
      f[at] ^= (uint8_t)(1u << bit);
      char what[96];
      snprintf(what, sizeof what, "bit %d of byte %zu of %zu flipped", bit, at, len);
      /* the magic: not a checkpoint; anywhere else, the CRC (checked first) says damage, never a newer
       * version, an impossible length or trailing data */
      EXPECT_LOAD_FAIL(what, bad, (int)(at % 2), LAM_ERR_IO, bad, at < 8 ? "not a lamina checkpoint" : "CRC-32 mismatch");
    }
  }
  /* Trailing bytes after a good file. */
  uint8_t *longer = malloc(len + 3);
  assert_non_null(longer);
  memcpy(longer, f, len);
  memset(longer + len, 0, 3);
  write_all(bad, longer, len + 3);
  EXPECT_LOAD_FAIL("3 bytes appended", bad, 0, LAM_ERR_IO, bad, "corrupted", "CRC-32 mismatch");
  fix_crc(longer, len + 3); /* a CRC that holds over the longer file: the structure says what is wrong */
  write_all(bad, longer, len + 3);
  EXPECT_LOAD_FAIL("3 bytes appended, CRC fixed", bad, 0, LAM_ERR_IO, bad, "corrupted", "trailing");
  free(longer);
  free(f);
}

static void test_wrong_magic(void **state) {
  (void)state;
  const char *bad = path_of("magic.ckpt");
  const char gif[] = "GIF89a\x01\x00\x01\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00!";
  write_all(bad, gif, sizeof gif);
  EXPECT_LOAD_FAIL("a GIF", bad, 0, LAM_ERR_IO, bad, "not a lamina checkpoint");
  write_all(bad, "Q", 1); /* shorter than the magic and not its start */
  EXPECT_LOAD_FAIL("one wrong byte", bad, 0, LAM_ERR_IO, bad, "not a lamina checkpoint");

  const char *good = path_of("magic-good.ckpt");
  save_trained(good, LAM_OPT_SGD, 0, 0);
  size_t len;
  uint8_t *f = read_all(good, &len);
  f[3] = 'X';
  fix_crc(f, len);
  write_all(bad, f, len);
  EXPECT_LOAD_FAIL("a checkpoint with its magic changed", bad, 0, LAM_ERR_IO, bad, "not a lamina checkpoint");
  print_message("wrong magic: %s\n", lam_last_error());
  free(f);
}

static void test_future_version(void **state) {
  (void)state;
  const char *good = path_of("version-good.ckpt"), *bad = path_of("version.ckpt");
  save_trained(good, LAM_OPT_ADAM, 1, 1);
  size_t len;
  uint8_t *f = read_all(good, &len);
  assert_int_equal(f[8], 4); /* a model of images is written as version 4, which older builds read */
  set_le32(f + 8, 9);
  fix_crc(f, len);
  write_all(bad, f, len);
  EXPECT_LOAD_FAIL("version 9", bad, 1, LAM_ERR_IO, bad, "newer lamina", "version 9", "reads 8");
  print_message("future version: %s\n", lam_last_error());
  /* Every version ends with its CRC, checked before the version: a header alone is a truncated file. */
  write_all(bad, f, 12);
  EXPECT_LOAD_FAIL("version 9, header only", bad, 0, LAM_ERR_IO, "truncated", "file has 12 bytes");
  set_le32(f + 8, 0);
  write_all(bad, f, len);
  EXPECT_LOAD_FAIL("version 0, CRC not fixed", bad, 0, LAM_ERR_IO, "CRC-32 mismatch");
  fix_crc(f, len);
  write_all(bad, f, len);
  EXPECT_LOAD_FAIL("version 0", bad, 0, LAM_ERR_IO, "corrupted", "version 0");
  free(f);
}

/* A model of clips is written as version 5 with its frames, and loads as the same model: frames, parameters,
 * and the same logits on the same clips. */
static void test_clip_roundtrip(void **state) {
  (void)state;
  const char *path = path_of("clip.ckpt");
  const int T = 3, B = 2;
  lam_model *m = NULL, *back = NULL;
  TU_OK(lam_model_create_clip(g_ctx, "conv 3 3, relu, gap, tpool max, dense 4", T, 1, 6, 6, 7, &m));
  TU_OK(lam_checkpoint_save(path, m, NULL));
  size_t len;
  uint8_t *f = read_all(path, &len);
  assert_int_equal(f[8], 5);
  free(f);
  TU_OK(lam_checkpoint_load(g_ctx, path, &back, NULL, NULL));
  assert_int_equal(lam_model_input_frames(back), T);
  const size_t n = lam_model_param_count(m);
  assert_int_equal(lam_model_param_count(back), n);
  float x[B * T * 36], a[B * 4], b[B * 4];
  for (int i = 0; i < B * T * 36; i++) x[i] = (float)((i * 37) % 23) / 11.0f - 1.0f;
  TU_OK(lam_model_forward(m, B, x, a));
  TU_OK(lam_model_forward(back, B, x, b));
  assert_memory_equal(a, b, sizeof a);
  int frames = 0, stride = -1;
  TU_OK(lam_checkpoint_clip(path, &frames, &stride));
  assert_int_equal(frames, T), assert_int_equal(stride, 0); /* version 5: no stride kept */
  lam_model_free(back);
  /* with a video folder's frame stride: version 7, the stride read back (and the v6 fit, empty, before it) */
  TU_OK(lam_model_set_frame_stride(m, 3));
  TU_OK(lam_checkpoint_save(path, m, NULL));
  f = read_all(path, &len);
  assert_int_equal(f[8], 7);
  free(f);
  TU_OK(lam_checkpoint_clip(path, &frames, &stride));
  assert_int_equal(frames, T), assert_int_equal(stride, 3);
  TU_OK(lam_checkpoint_load(g_ctx, path, &back, NULL, NULL));
  assert_int_equal(lam_model_frame_stride(back), 3), assert_int_equal(lam_model_input_frames(back), T);
  TU_OK(lam_model_forward(back, B, x, b));
  assert_memory_equal(a, b, sizeof a);
  assert_int_equal(lam_model_set_frame_stride(m, 1001), LAM_ERR_INVALID_ARG);
  lam_model_free(m), lam_model_free(back);
}

/* A version-1 file (the v2, v3 and v4 fields cut out, version 1, CRC fixed), a version-2 file (the v3
 * and v4 fields cut out) and a version-3 file (the v4 fields cut out) still load: same parameters, the
 * default normalization (v1), the epochs done, a constant rate. */
static void test_v1_loads(void **state) {
  (void)state;
  const char *v3 = path_of("v3.ckpt"), *v1 = path_of("v1.ckpt"), *v2 = path_of("v2.ckpt");
  lam_model *m;
  lam_trainer *t;
  make(LAM_OPT_ADAM, &m, &t);
  (void)epoch(t);
  const lam_lr_schedule cos = {.kind = LAM_LR_COSINE, .epochs = 4, .step_epochs = 1, .gamma = 1};
  TU_OK(lam_trainer_set_lr_schedule(t, &cos));
  TU_OK(lam_checkpoint_save(v3, m, t));
  size_t len, np = lam_model_param_count(m), sl = strlen(lam_model_spec(m));
  uint8_t *f = read_all(v3, &len);
  { /* this version's file keeps the schedule */
    lam_model *m4 = NULL;
    lam_trainer *t4 = NULL;
    lam_lr_schedule got;
    TU_OK(lam_checkpoint_load(g_ctx, v3, &m4, &g_set, &t4));
    TU_OK(lam_trainer_lr_schedule(t4, &got));
    assert_int_equal(got.kind, LAM_LR_COSINE);
    assert_int_equal(got.epochs, 4);
    lam_trainer_free(t4);
    lam_model_free(m4);
  }
  /* v3: the last 28 bytes before the CRC (the schedule) go */
  memmove(f + len - 4 - 28, f + len - 4, 4);
  len -= 28;
  set_le32(f + 8, 3);
  fix_crc(f, len);
  write_all(v3, f, len);
  {
    lam_model *m3 = NULL;
    lam_trainer *t3 = NULL;
    lam_lr_schedule got;
    TU_OK(lam_checkpoint_load(g_ctx, v3, &m3, &g_set, &t3));
    TU_OK(lam_trainer_lr_schedule(t3, &got));
    assert_int_equal(got.kind, LAM_LR_CONSTANT);
    assert_int_equal(lam_trainer_epochs_done(t3), 1);
    lam_trainer_free(t3);
    lam_model_free(m3);
  }
  /* v2: the last 48 bytes before the CRC (the interrupted epoch's place) go */
  memmove(f + len - 4 - 48, f + len - 4, 4);
  len -= 48;
  set_le32(f + 8, 2);
  fix_crc(f, len);
  write_all(v2, f, len);
  lam_model *m2 = NULL;
  lam_trainer *t2 = NULL;
  TU_OK(lam_checkpoint_load(g_ctx, v2, &m2, &g_set, &t2));
  assert_int_equal(lam_trainer_epochs_done(t2), 1);
  assert_int_equal(lam_trainer_steps_in_epoch(t2), 0);
  lam_trainer_free(t2);
  lam_model_free(m2);
  size_t cut = 8 + 4 + 4 + sl + 12 + 8 + 4 + 5 * 16 + np * 4; /* where the v2 block starts: 24 bytes here */
  memmove(f + cut, f + cut + 24, len - cut - 24);
  len -= 24;
  set_le32(f + 8, 1);
  fix_crc(f, len);
  write_all(v1, f, len);
  free(f);
  lam_model *m1 = NULL;
  lam_trainer *t1 = NULL;
  TU_OK(lam_checkpoint_load(g_ctx, v1, &m1, &g_set, &t1));
  float *p0 = params_of(m), *p1 = params_of(m1);
  assert_memory_equal(p0, p1, np * sizeof(float));
  float mean, std;
  TU_OK(lam_model_normalization(m1, &mean, &std));
  assert_true(mean == 0.5f && std == 0.5f);
  assert_int_equal(lam_trainer_epochs_done(t1), 1);
  (void)epoch(t1); /* and it trains on */
  free(p0);
  free(p1);
  lam_trainer_free(t1);
  lam_model_free(m1);
  lam_trainer_free(t);
  lam_model_free(m);
}

/* v2 carries BatchNorm's running statistics, the normalization and the label smoothing: a model with
 * all three set reloads to the same evaluation. */
static void test_v2_state_roundtrip(void **state) {
  (void)state;
  const char *path = path_of("bn.ckpt");
  lam_model *m;
  TU_OK(lam_model_create(g_ctx, "conv 4 3 nobias, bn, r: relu, conv 4 3 pad 1, bn momentum 0.3, add @r, gap, dense 10", 1,
                         IMG, IMG, MODEL_SEED, &m));
  const float mean = 0.25f, std = 0.3f;
  TU_OK(lam_model_set_normalization(m, 1, &mean, &std));
  TU_OK(lam_model_set_label_smoothing(m, 0.1f));
  lam_opt o = opt_for(LAM_OPT_ADAM);
  lam_trainer *t;
  TU_OK(lam_trainer_create(m, &o, BATCH, TRAIN_SEED, &g_set, &t));
  (void)epoch(t); /* moves the running statistics off 0 and 1 */
  size_t ns = lam_model_state_count(m);
  assert_int_equal(ns, 16);
  float st0[16], st1[16];
  TU_OK(lam_model_state_get(m, st0, ns));
  assert_true(st0[0] != 0.0f && st0[4] != 1.0f);
  TU_OK(lam_checkpoint_save(path, m, t));
  double acc0, loss0, acc1, loss1;
  TU_OK(lam_evaluate(m, &g_set, 64, &acc0, &loss0, NULL));
  lam_model *m1 = NULL;
  TU_OK(lam_checkpoint_load(g_ctx, path, &m1, NULL, NULL));
  TU_OK(lam_model_state_get(m1, st1, ns));
  assert_memory_equal(st0, st1, sizeof st0);
  float mean1, std1;
  TU_OK(lam_model_normalization(m1, &mean1, &std1));
  assert_true(mean1 == mean && std1 == std);
  TU_OK(lam_evaluate(m1, &g_set, 64, &acc1, &loss1, NULL));
  assert_memory_equal(&acc0, &acc1, sizeof acc0);
  assert_memory_equal(&loss0, &loss1, sizeof loss0);
  lam_model_free(m1);
  lam_trainer_free(t);
  lam_model_free(m);
}

static void test_empty_missing_directory(void **state) {
  (void)state;
  const char *empty = path_of("empty.ckpt");
  write_all(empty, "", 0);
  EXPECT_LOAD_FAIL("empty file", empty, 0, LAM_ERR_IO, empty, "empty", "not a lamina checkpoint");
  EXPECT_LOAD_FAIL("empty file, with trainer", empty, 1, LAM_ERR_IO, "empty");
  print_message("empty: %s\n", lam_last_error());

  const char *missing = path_of("no-such.ckpt");
  EXPECT_LOAD_FAIL("missing file", missing, 0, LAM_ERR_IO, missing, "cannot open", "No such file or directory");
  print_message("missing: %s\n", lam_last_error());

  EXPECT_LOAD_FAIL("a directory", g_dir, 0, LAM_ERR_IO, g_dir, "directory");
  print_message("directory: %s\n", lam_last_error());
}

/* A file whose CRC holds but whose shapes do not match what this build makes of its spec: what a
 * checkpoint from an incompatible lamina would look like. */
static void test_mismatched(void **state) {
  (void)state;
  const char *good = path_of("mismatch-good.ckpt"), *bad = path_of("mismatch.ckpt");
  save_trained(good, LAM_OPT_ADAM, 1, 1);
  size_t len;
  uint8_t *f = read_all(good, &len);
  size_t layers_at = 16 + le32(f + 12) + 12 + 8 + 4;

  set_le64(f + layers_at + 4 * 16, 350); /* the dense layer's weight count */
  fix_crc(f, len);
  write_all(bad, f, len);
  EXPECT_LOAD_FAIL("a layer's weight count", bad, 1, LAM_ERR_IO, bad, "mismatched", "layer 5", "350");
  print_message("mismatched layer: %s\n", lam_last_error());
  set_le64(f + layers_at + 4 * 16, 360);

  /* The spec edited in place to another valid one with fewer parameters: "dense 10" -> "dense 9". */
  uint8_t *d = find_bytes(f, len, "dense 10");
  assert_non_null(d);
  memcpy(d, "dense 9 ", 8);
  fix_crc(f, len);
  write_all(bad, f, len);
  EXPECT_LOAD_FAIL("spec with fewer parameters", bad, 0, LAM_ERR_IO, bad, "mismatched", "parameters");
  print_message("mismatched spec: %s\n", lam_last_error());

  /* A spec this build does not know. */
  memcpy(d, "dinse 10", 8);
  fix_crc(f, len);
  write_all(bad, f, len);
  EXPECT_LOAD_FAIL("unknown spec", bad, 0, LAM_ERR_IO, bad, "mismatched", "dinse");
  print_message("unknown spec: %s\n", lam_last_error());
  free(f);

  /* A trainer on a data set the model cannot take: lam_trainer_create's error, nothing left over. */
  lam_dataset other = g_set;
  other.classes = 5;
  lam_model *m = NULL;
  lam_trainer *t = NULL;
  size_t before = backend_in_use();
  lam_status s = lam_checkpoint_load(g_ctx, good, &m, &other, &t);
  if (s != LAM_ERR_INVALID_ARG) fail_msg("wrong data set: returned %s: %s", lam_status_str(s), lam_last_error());
  assert_null(m);
  assert_null(t);
  assert_int_equal(backend_in_use(), before);
  print_message("wrong data set: %s\n", lam_last_error());
}

/* ---- saving ----------------------------------------------------------------------------------- */

static void test_save_replaces_atomically(void **state) {
  (void)state;
  const char *path = path_of("replace.ckpt");
  lam_model *m;
  lam_trainer *t;
  make(LAM_OPT_SGD, &m, &t);
  TU_OK(lam_checkpoint_save(path, m, t));
  size_t len0;
  uint8_t *old = read_all(path, &len0);
  (void)epoch(t);
  TU_OK(lam_checkpoint_save(path, m, t)); /* over the old one */
  assert_int_equal(tmp_files_left(), 0);
  lam_model *m2 = NULL;
  lam_trainer *t2 = NULL;
  TU_OK(lam_checkpoint_load(g_ctx, path, &m2, &g_set, &t2));
  assert_int_equal(lam_trainer_epochs_done(t2), 1);
  float *p = params_of(m), *p2 = params_of(m2);
  assert_memory_equal(p, p2, lam_model_param_count(m) * sizeof(float));
  lam_trainer_free(t2);
  lam_model_free(m2);

  /* A failed save leaves the file at path as it was: the temporary file's name is taken by a folder,
   * so its fopen fails (as a full disk or a read-only folder would fail a write). */
  size_t len1;
  uint8_t *cur = read_all(path, &len1);
  char tmp[300];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  assert_int_equal(mkdir(tmp, 0700), 0);
  (void)epoch(t);
  lam_status s = lam_checkpoint_save(path, m, t);
  if (s != LAM_ERR_IO) fail_msg("save with the temporary name blocked: returned %s", lam_status_str(s));
  const char *msg = lam_last_error();
  print_message("blocked save: %s\n", msg);
  if (!strstr(msg, path) || !strstr(msg, "fopen") || !strstr(msg, "Is a directory"))
    fail_msg("the message should name the path, the call and the reason: \"%s\"", msg);
  size_t len2;
  uint8_t *after = read_all(path, &len2);
  assert_int_equal(len2, len1);
  assert_memory_equal(after, cur, len1);
  assert_int_equal(rmdir(tmp), 0);
  free(after);

  /* The target is a folder (not empty): refused before anything is written (only regular files are
   * replaced), the folder and its file kept, no temporary file. */
  const char *dir = path_of("a-folder.ckpt");
  assert_int_equal(mkdir(dir, 0700), 0);
  char inside[300];
  snprintf(inside, sizeof inside, "%s/keep", dir);
  write_all(inside, "x", 1);
  s = lam_checkpoint_save(dir, m, t);
  if (s != LAM_ERR_INVALID_ARG) fail_msg("save over a folder: returned %s", lam_status_str(s));
  msg = lam_last_error();
  print_message("save over a folder: %s\n", msg);
  if (!strstr(msg, "a directory") || !strstr(msg, dir)) fail_msg("the message should say directory and the path: \"%s\"", msg);
  assert_int_equal(tmp_files_left(), 0);
  struct stat st;
  assert_int_equal(stat(inside, &st), 0);

  /* A folder that does not exist. */
  char nowhere[300];
  snprintf(nowhere, sizeof nowhere, "%s/no-such-folder/x.ckpt", g_dir);
  s = lam_checkpoint_save(nowhere, m, NULL);
  if (s != LAM_ERR_IO) fail_msg("save into a missing folder: returned %s", lam_status_str(s));
  msg = lam_last_error();
  print_message("missing folder: %s\n", msg);
  if (!strstr(msg, nowhere) || !strstr(msg, "No such file or directory"))
    fail_msg("the message should name the path and the reason: \"%s\"", msg);
  assert_int_equal(stat(nowhere, &st), -1);

  free(old);
  free(cur);
  free(p);
  free(p2);
  lam_trainer_free(t);
  lam_model_free(m);
}

static void test_null_args(void **state) {
  (void)state;
  lam_model *m, *m2;
  lam_trainer *t, *t2;
  make(LAM_OPT_ADAM, &m, &t);
  make(LAM_OPT_ADAM, &m2, &t2);
  const char *path = path_of("args.ckpt");
  TU_EXPECT_STATUS(lam_checkpoint_save(NULL, m, t), LAM_ERR_INVALID_ARG);
  TU_EXPECT_STATUS(lam_checkpoint_save(path, NULL, NULL), LAM_ERR_INVALID_ARG);
  TU_EXPECT_STATUS(lam_checkpoint_save("", m, NULL), LAM_ERR_INVALID_ARG);
  TU_EXPECT_STATUS(lam_checkpoint_save(path, m, t2), LAM_ERR_INVALID_ARG); /* another model's trainer */
  assert_true(strstr(lam_last_error(), "another model") != NULL);
  TU_OK(lam_checkpoint_save(path, m, t));
  lam_model *out = NULL;
  lam_trainer *tout = NULL;
  TU_EXPECT_STATUS(lam_checkpoint_load(NULL, path, &out, NULL, NULL), LAM_ERR_INVALID_ARG);
  TU_EXPECT_STATUS(lam_checkpoint_load(g_ctx, NULL, &out, NULL, NULL), LAM_ERR_INVALID_ARG);
  TU_EXPECT_STATUS(lam_checkpoint_load(g_ctx, path, NULL, NULL, NULL), LAM_ERR_INVALID_ARG);
  TU_EXPECT_STATUS(lam_checkpoint_load(g_ctx, path, &out, NULL, &tout), LAM_ERR_INVALID_ARG); /* no data set */
  assert_null(out);
  assert_null(tout);
  lam_trainer_free(t);
  lam_model_free(m);
  lam_trainer_free(t2);
  lam_model_free(m2);
}

/* ---- the fit a model remembers (issue 30, finding 16) ------------------------------------------------------- */

/* A model with its fit (lam_model_set_fit: an image folder's --size and class names) is written as version 6 with
 * the v6 part as documented (after the v5 frames, before the CRC), loads with the same fit (with a trainer too),
 * and lam_checkpoint_fit reads the size without making the model; one without is still version 4 (older builds
 * read it) and reads as no fit. A name count or a name length out of range, and a NUL in a name, are corrupt. */
static void test_fit_roundtrip(void **state) {
  (void)state;
  const char *path = path_of("fit.ckpt"), *plain = path_of("nofit.ckpt"), *bad = path_of("fit-bad.ckpt");
  lam_model *m;
  lam_trainer *t;
  make(LAM_OPT_ADAM, &m, &t);
  static const char *names[] = {"cat", "dog", "a zebra, striped", NULL};
  TU_OK(lam_model_set_fit(m, IMG, IMG, names));
  TU_OK(lam_checkpoint_save(path, m, t));
  size_t len;
  uint8_t *f = read_all(path, &len);
  assert_int_equal(le32(f + 8), 6);
  const size_t tail = 4 + 4 + 4 + 4 + (4 + 3) + (4 + 3) + (4 + 16); /* frames, h, w, K, names */
  uint8_t *v6 = f + len - 4 - tail;
  assert_int_equal(le32(v6), 1);
  assert_int_equal(le32(v6 + 4), IMG);
  assert_int_equal(le32(v6 + 8), IMG);
  assert_int_equal(le32(v6 + 12), 3);
  assert_int_equal(le32(v6 + 16), 3);
  assert_memory_equal(v6 + 20, "cat", 3);
  assert_int_equal(le32(v6 + 30), 16);
  assert_memory_equal(v6 + 34, "a zebra, striped", 16);
  lam_model *back = NULL;
  lam_trainer *tb = NULL;
  TU_OK(lam_checkpoint_load(g_ctx, path, &back, &g_set, &tb));
  int h = -1, w = -1;
  TU_OK(lam_model_fit(back, &h, &w));
  assert_int_equal(h, IMG), assert_int_equal(w, IMG);
  for (int k = 0; k < 3; k++) assert_string_equal(lam_model_class_name(back, k), names[k]);
  assert_null(lam_model_class_name(back, 3));
  h = w = -1;
  TU_OK(lam_checkpoint_fit(path, &h, &w));
  assert_int_equal(h, IMG), assert_int_equal(w, IMG);
  lam_trainer_free(tb), lam_model_free(back);
  /* out of range and NUL: corrupt (the CRC made right, so the values themselves are checked) */
  set_le32(v6 + 12, 300);
  fix_crc(f, len);
  write_all(bad, f, len);
  EXPECT_LOAD_FAIL("300 class names", bad, 0, LAM_ERR_IO, "corrupted", "300 class names");
  set_le32(v6 + 12, 3), set_le32(v6 + 16, 0);
  fix_crc(f, len);
  write_all(bad, f, len);
  EXPECT_LOAD_FAIL("a class name of 0 bytes", bad, 0, LAM_ERR_IO, "corrupted", "class name 0 is 0 bytes");
  set_le32(v6 + 16, 3), v6[21] = 0;
  fix_crc(f, len);
  write_all(bad, f, len);
  EXPECT_LOAD_FAIL("a NUL in a class name", bad, 0, LAM_ERR_IO, "corrupted", "NUL");
  free(f);
  /* no fit: version 4, and no size */
  lam_model *m2;
  lam_trainer *t2;
  make(LAM_OPT_ADAM, &m2, &t2);
  TU_OK(lam_checkpoint_save(plain, m2, NULL));
  f = read_all(plain, &len);
  assert_int_equal(le32(f + 8), 4);
  free(f);
  h = w = -1;
  TU_OK(lam_checkpoint_fit(plain, &h, &w));
  assert_int_equal(h, 0), assert_int_equal(w, 0);
  TU_EXPECT_STATUS(lam_model_set_fit(m2, 8, 0, NULL), LAM_ERR_INVALID_ARG);
  static const char *empty[] = {"", NULL};
  TU_EXPECT_STATUS(lam_model_set_fit(m2, 0, 0, empty), LAM_ERR_INVALID_ARG);
  lam_trainer_free(t2), lam_model_free(m2);
  lam_trainer_free(t), lam_model_free(m);
}

/* ---- NaN parameters stop training and are never saved (issue 30, finding 9) ---------------------------- */

/* A NaN weight behind a relu (the fused conv -> relu -> maxpool of SPEC) reaches the loss: the epoch stops with
 * the divergence error (a relu that gave 0 for NaN hid it, and the run trained on and saved it). A save of that
 * model is refused and writes nothing; so is one whose last layer's bias is NaN. */
static void test_nan_weight_stops(void **state) {
  (void)state;
  lam_model *m;
  lam_trainer *t;
  make(LAM_OPT_SGD, &m, &t);
  float *p = params_of(m);
  p[1] = NAN; /* the first conv's weight */
  TU_OK(lam_model_params_set(m, p, lam_model_param_count(m)));
  lam_epoch_stats st;
  TU_EXPECT_STATUS(lam_trainer_epoch(t, NULL, NULL, 0, &st), LAM_ERR_DIVERGED);
  assert_non_null(strstr(lam_last_error(), "training diverged in epoch 1"));
  const char *path = path_of("nan.ckpt");
  TU_EXPECT_STATUS(lam_checkpoint_save(path, m, t), LAM_ERR_DIVERGED);
  assert_non_null(strstr(lam_last_error(), "refused"));
  assert_non_null(strstr(lam_last_error(), "of layer 1, conv) is NaN"));
  assert_int_equal(access(path, F_OK), -1);
  /* a finite model, then one NaN bias in the last layer: refused by name */
  free(p);
  lam_trainer_free(t);
  lam_model_free(m);
  make(LAM_OPT_SGD, &m, &t);
  p = params_of(m);
  const size_t n = lam_model_param_count(m);
  p[n - 1] = INFINITY;
  TU_OK(lam_model_params_set(m, p, n));
  TU_EXPECT_STATUS(lam_checkpoint_save(path, m, NULL), LAM_ERR_DIVERGED);
  assert_non_null(strstr(lam_last_error(), "(the bias of layer 5, dense) is infinite"));
  assert_int_equal(access(path, F_OK), -1);
  assert_int_equal(tmp_files_left(), 0);
  free(p);
  lam_trainer_free(t);
  lam_model_free(m);
}

/* A NaN the loss cannot show (every label ignored: the loss of no labels is 0) is still found at the epoch's
 * end, where the loss is checked: the parameters are read once an epoch. */
static void test_nan_weight_finite_loss(void **state) {
  (void)state;
  enum { N = 8, S = 4 };
  static uint8_t img[N * S * S], lab[N * S * S];
  for (int i = 0; i < N * S * S; i++) img[i] = (uint8_t)(i * 37), lab[i] = 255; /* ignored */
  lam_dataset d = {.n = N, .h = S, .w = S, .classes = 3, .images = img, .labels = lab, .c = 1, .label_h = S, .label_w = S};
  lam_model *m;
  lam_trainer *t;
  TU_OK(lam_model_create(g_ctx, "conv 3 1", 1, S, S, MODEL_SEED, &m));
  lam_opt o = opt_for(LAM_OPT_SGD);
  TU_OK(lam_trainer_create(m, &o, 4, TRAIN_SEED, &d, &t));
  float *p = params_of(m);
  p[0] = NAN;
  TU_OK(lam_model_params_set(m, p, lam_model_param_count(m)));
  lam_epoch_stats st;
  TU_EXPECT_STATUS(lam_trainer_epoch(t, NULL, NULL, 0, &st), LAM_ERR_DIVERGED);
  assert_non_null(strstr(lam_last_error(), "parameter 0 (the weight of layer 1, conv) is NaN though the loss stayed "
                                           "finite"));
  free(p);
  lam_trainer_free(t);
  lam_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_resume_adam),          cmocka_unit_test(test_resume_sgd_momentum),
      cmocka_unit_test(test_resume_adamw),         cmocka_unit_test(test_resume_every_epoch),
      cmocka_unit_test_teardown(test_resume_dropout, plain_spec), cmocka_unit_test(test_stop_mid_epoch),
      cmocka_unit_test(test_ranks_as_one),         cmocka_unit_test(test_ranks_replicas_differ),
      cmocka_unit_test(test_ranks_api_errors),      cmocka_unit_test(test_ranks_nccl_of_one),
      cmocka_unit_test(test_ranks_sync_bn),
      cmocka_unit_test(test_lr_schedule_values), cmocka_unit_test(test_lr_schedule_applied),
      cmocka_unit_test(test_format),               cmocka_unit_test(test_model_only_roundtrip),
      cmocka_unit_test(test_truncated),            cmocka_unit_test(test_corrupted),
      cmocka_unit_test(test_wrong_magic),          cmocka_unit_test(test_future_version),
      cmocka_unit_test(test_clip_roundtrip),
      cmocka_unit_test(test_v1_loads),             cmocka_unit_test(test_v2_state_roundtrip),
      cmocka_unit_test(test_empty_missing_directory), cmocka_unit_test(test_mismatched),
      cmocka_unit_test(test_save_replaces_atomically), cmocka_unit_test(test_null_args),
      cmocka_unit_test(test_release_batch),        cmocka_unit_test(test_host_buffers_lazy),
      cmocka_unit_test(test_nan_weight_stops),     cmocka_unit_test(test_nan_weight_finite_loss),
      cmocka_unit_test(test_fit_roundtrip),
  };
  return TU_RUN_GROUP("checkpoint", tests, setup, teardown) ? 1 : 0;
}
