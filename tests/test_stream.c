/* test_stream.c — the trainer's execution modes. Streaming batches (src/nn/stream.c): a trainer that
 * streams its batches (2 or 3 pinned buffers, a loader thread, a copy queue) trains exactly as one with
 * the data set resident — the same epoch losses and final parameters, bit for bit — including a short
 * last batch, several epochs, and switching between the modes between epochs. A set over the memory
 * cap streams by itself and says why. The step replayed from a CUDA graph trains as the step queued op
 * by op (on the CPU there is no graph, and the trainer says so); tf32 stays close to fp32. Bad
 * arguments are errors that name the problem.
 * Run with the argument "cuda" it checks the CUDA backend (CTest label gpu; exit 77 without a device). */
#include "testutil.h"

#define SPEC "conv 4 3, relu, maxpool 2, flatten, dense 10"
#define IMG 8
#define CLASSES 10
#define BATCH 32
#define EPOCHS 3

static lam_device g_dev = LAM_DEVICE_CPU;
static lam_ctx *g_ctx;

/* Label k lights the pixels whose index is k mod 10 over a dim noisy ground (as test_checkpoint). */
static lam_dataset make_set(size_t n, uint64_t seed) {
  uint8_t *img = malloc(n * IMG * IMG), *lab = malloc(n);
  assert_true(img && lab);
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(seed));
  for (size_t i = 0; i < n; i++) {
    int k = (int)(tu_next(&r) % CLASSES);
    lab[i] = (uint8_t)k;
    for (int p = 0; p < IMG * IMG; p++) {
      int v = (int)(tu_next(&r) % 60);
      if (p % CLASSES == k) v += 150 + (int)(tu_next(&r) % 50);
      img[i * IMG * IMG + p] = (uint8_t)v;
    }
  }
  return (lam_dataset){.n = n, .h = IMG, .w = IMG, .classes = CLASSES, .images = img, .labels = lab};
}

static void free_set(lam_dataset *d) {
  free(d->images);
  free(d->labels);
}

/* Parameters of SPEC's model. */
static size_t spec_params(void) {
  lam_model *probe;
  TU_OK(lam_model_create(g_ctx, SPEC, 1, IMG, IMG, 5, &probe));
  size_t np = lam_model_param_count(probe);
  lam_model_free(probe);
  return np;
}

static int g_graph = 1; /* run() captures the step in a graph where the backend can */
static int g_batch = BATCH;

/* Trains EPOCHS epochs; mode[e] is the buffers for epoch e (0 resident). Losses and parameters out. */
static void run(lam_ctx *ctx, const lam_dataset *d, const int *mode, double *loss, float *params, size_t np) {
  lam_model *m = NULL;
  lam_trainer *t = NULL;
  TU_OK(lam_model_create(ctx, SPEC, 1, IMG, IMG, 5, &m));
  assert_int_equal(lam_model_param_count(m), np);
  lam_opt opt = lam_opt_default(LAM_OPT_ADAM);
  TU_OK(lam_trainer_create(m, &opt, g_batch, 9, d, &t));
  TU_OK(lam_trainer_set_graph(t, g_graph));
  int on = -1;
  TU_OK(lam_trainer_graph(t, &on));
  const char *sync = getenv("LAMINA_CUDA_SYNC"); /* its debug mode runs op by op */
  assert_int_equal(on, g_graph && lam_ctx_device(ctx) == LAM_DEVICE_CUDA && !(sync && *sync && *sync != '0'));
  for (int e = 0; e < EPOCHS; e++) {
    TU_OK(lam_trainer_set_stream(t, mode[e]));
    lam_epoch_stats es;
    TU_OK(lam_trainer_epoch(t, NULL, NULL, 0, &es));
    loss[e] = es.train_loss;
    lam_stream_stats ss;
    TU_OK(lam_trainer_stream_stats(t, &ss));
    assert_int_equal(ss.buffers, mode[e]);
    assert_true(ss.epoch_ms > 0 && ss.data_wait_ms >= 0 && ss.loader_wait_ms >= 0);
    assert_true(ss.data_wait_ms <= ss.epoch_ms);
    if (mode[e]) assert_non_null(strstr(ss.why, "asked for"));
  }
  TU_OK(lam_model_params_get(m, params, np));
  lam_trainer_free(t);
  lam_model_free(m);
}

static void test_same_as_resident(void **state) {
  (void)state;
  lam_dataset d = make_set(300, 1); /* 9 full batches and one of 12 */
  size_t np = spec_params();
  float *p0 = malloc(np * sizeof *p0), *p1 = malloc(np * sizeof *p1);
  assert_true(p0 && p1);
  double l0[EPOCHS], l1[EPOCHS];
  static const int resident[EPOCHS] = {0, 0, 0};
  static const int modes[][EPOCHS] = {{3, 3, 3}, {2, 2, 2}, {3, 0, 2}, {0, 3, 0}, {2, 3, 2}};
  /* batch 32, and batch 3: smaller than twice the host threads, so the feed takes more slots and fills several a
   * pass (stream.c's loader) */
  for (int small = 0; small < 2; small++) {
    g_batch = small ? 3 : BATCH;
    run(g_ctx, &d, resident, l0, p0, np);
    assert_true(l0[EPOCHS - 1] < l0[0]); /* it learns */
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
      run(g_ctx, &d, modes[k], l1, p1, np);
      for (int e = 0; e < EPOCHS; e++) {
        if (l1[e] != l0[e]) fail_msg("batch %d, modes {%d,%d,%d}: epoch %d loss %.9g, resident %.9g", g_batch,
                                     modes[k][0], modes[k][1], modes[k][2], e + 1, l1[e], l0[e]);
      }
      assert_memory_equal(p0, p1, np * sizeof *p0);
    }
    print_message("  batch %d: streamed = resident over %d epochs (losses %.4f -> %.4f), 5 mode patterns\n", g_batch,
                  EPOCHS, l0[0], l0[EPOCHS - 1]);
  }
  g_batch = BATCH;
  free(p0);
  free(p1);
  free_set(&d);
}

/* A set over the allocator's cap streams by itself, says why, and trains as the resident set does. */
static void test_streams_when_it_does_not_fit(void **state) {
  (void)state;
  lam_dataset d = make_set(8000, 2); /* 512 KB of pixels: small, so the test stays quick under compute-sanitizer */
  lam_ctx *capped;
  TU_OK(lam_ctx_create(&capped, g_dev));
  TU_OK(lam_mem_set_limit(capped, 400000));
  lam_model *m;
  lam_trainer *t;
  TU_OK(lam_model_create(capped, SPEC, 1, IMG, IMG, 5, &m));
  lam_opt opt = lam_opt_default(LAM_OPT_ADAM);
  TU_OK(lam_trainer_create(m, &opt, BATCH, 9, &d, &t));
  lam_stream_stats ss;
  TU_OK(lam_trainer_stream_stats(t, &ss));
  assert_int_equal(ss.buffers, 3);
  print_message("  over the cap: %s\n", ss.why);
  assert_non_null(strstr(ss.why, "does not fit"));
  lam_model_memory mm;
  TU_OK(lam_model_memory_get(m, t, &mm));
  assert_true(mm.data < 100000); /* the buffers, not the set */
  lam_epoch_stats es;
  TU_OK(lam_trainer_epoch(t, NULL, NULL, 0, &es));
  /* going back to resident does not fit either: an out-of-memory error, and the trainer still streams */
  assert_int_equal(lam_trainer_set_stream(t, 0), LAM_ERR_OUT_OF_MEMORY);
  assert_non_null(strstr(lam_last_error(), "keeps streaming"));
  TU_OK(lam_trainer_stream_stats(t, &ss));
  assert_int_equal(ss.buffers, 3);
  lam_epoch_stats es_more;
  TU_OK(lam_trainer_epoch(t, NULL, NULL, 0, &es_more));
  lam_trainer_free(t);
  lam_model_free(m);

  /* the same epoch on an uncapped context, resident */
  lam_model *m2;
  lam_trainer *t2;
  TU_OK(lam_model_create(g_ctx, SPEC, 1, IMG, IMG, 5, &m2));
  TU_OK(lam_trainer_create(m2, &opt, BATCH, 9, &d, &t2));
  TU_OK(lam_trainer_stream_stats(t2, &ss));
  assert_int_equal(ss.buffers, 0);
  lam_epoch_stats es2;
  TU_OK(lam_trainer_epoch(t2, NULL, NULL, 0, &es2));
  assert_true(es.train_loss == es2.train_loss);
  lam_trainer_free(t2);
  lam_model_free(m2);
  lam_ctx_free(capped);
  free_set(&d);
}

/* The graph replays the very kernels the eager step queues: the same losses and parameters. */
static void test_graph_same_as_eager(void **state) {
  (void)state;
  lam_dataset d = make_set(300, 4);
  size_t np = spec_params();
  float *p0 = malloc(np * sizeof *p0), *p1 = malloc(np * sizeof *p1);
  assert_true(p0 && p1);
  double l0[EPOCHS], l1[EPOCHS];
  static const int resident[EPOCHS] = {0, 0, 0}, streamed[EPOCHS] = {3, 3, 3};
  g_graph = 0;
  run(g_ctx, &d, resident, l0, p0, np);
  g_graph = 1;
  run(g_ctx, &d, resident, l1, p1, np);
  for (int e = 0; e < EPOCHS; e++)
    if (l1[e] != l0[e]) fail_msg("graph: epoch %d loss %.9g, op by op %.9g", e + 1, l1[e], l0[e]);
  assert_memory_equal(p0, p1, np * sizeof *p0);
  run(g_ctx, &d, streamed, l1, p1, np); /* a graph behind streamed batches, too */
  for (int e = 0; e < EPOCHS; e++)
    if (l1[e] != l0[e]) fail_msg("graph + stream: epoch %d loss %.9g, op by op %.9g", e + 1, l1[e], l0[e]);
  assert_memory_equal(p0, p1, np * sizeof *p0);
  print_message("  %s: graph = op by op, resident and streamed, over %d epochs\n",
                lam_ctx_device(g_ctx) == LAM_DEVICE_CUDA ? "cuda" : "cpu (no graphs: both op by op)", EPOCHS);

  /* tf32 (CUDA): the same training within tf32's rounding; the CPU refuses it by name */
  if (lam_ctx_device(g_ctx) == LAM_DEVICE_CUDA) {
    lam_ctx *tc;
    TU_OK(lam_ctx_create(&tc, LAM_DEVICE_CUDA));
    TU_OK(lam_ctx_set_precision(tc, LAM_PRECISION_TF32));
    run(tc, &d, resident, l1, p1, np);
    double worst = 0;
    for (size_t i = 0; i < np; i++) {
      double e = fabs((double)p1[i] - p0[i]);
      if (e > worst) worst = e;
    }
    print_message("  tf32: losses %.5f %.5f %.5f (fp32 %.5f %.5f %.5f), params max diff %.2e\n", l1[0], l1[1], l1[2],
                  l0[0], l0[1], l0[2], worst);
    for (int e = 0; e < EPOCHS; e++) assert_true(fabs(l1[e] - l0[e]) <= 0.01 * fabs(l0[e]));
    assert_true(worst < 0.01);
    lam_ctx_free(tc);
  } else {
    assert_int_equal(lam_ctx_set_precision(g_ctx, LAM_PRECISION_TF32), LAM_ERR_UNSUPPORTED);
    assert_non_null(strstr(lam_last_error(), "tf32"));
  }
  free(p0);
  free(p1);
  free_set(&d);
}

static void test_bad_args(void **state) {
  (void)state;
  lam_dataset d = make_set(100, 3);
  lam_model *m;
  lam_trainer *t;
  TU_OK(lam_model_create(g_ctx, SPEC, 1, IMG, IMG, 5, &m));
  lam_opt opt = lam_opt_default(LAM_OPT_SGD);
  TU_OK(lam_trainer_create(m, &opt, BATCH, 9, &d, &t));
  assert_int_equal(lam_trainer_set_stream(t, 1), LAM_ERR_INVALID_ARG);
  assert_non_null(strstr(lam_last_error(), "1 buffers"));
  assert_int_equal(lam_trainer_set_stream(t, 4), LAM_ERR_INVALID_ARG);
  assert_int_equal(lam_trainer_set_stream(NULL, 3), LAM_ERR_INVALID_ARG);
  assert_int_equal(lam_trainer_stream_stats(t, NULL), LAM_ERR_INVALID_ARG);
  assert_int_equal(lam_trainer_graph(t, NULL), LAM_ERR_INVALID_ARG);
  assert_int_equal(lam_ctx_set_precision(g_ctx, (lam_precision)9), LAM_ERR_INVALID_ARG);
  lam_precision p;
  assert_int_equal(lam_precision_parse("fp64", &p), LAM_ERR_INVALID_ARG);
  assert_int_equal(lam_precision_parse("fp8", &p), LAM_ERR_INVALID_ARG); /* bf16 and fp16: test_half */
  lam_trainer_free(t);
  lam_model_free(m);
  free_set(&d);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "cuda")) {
    const char *why = NULL;
    if (lam_cuda_device_count(&why) == 0) {
      printf("test_stream cuda: no CUDA device (%s): skipping\n", why ? why : "none");
      return 77;
    }
    g_dev = LAM_DEVICE_CUDA;
  }
  if (lam_ctx_create(&g_ctx, g_dev) != LAM_OK) {
    fprintf(stderr, "test_stream: %s\n", lam_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_same_as_resident),
                                     cmocka_unit_test(test_streams_when_it_does_not_fit),
                                     cmocka_unit_test(test_graph_same_as_eager),
                                     cmocka_unit_test(test_bad_args)};
  int failed = TU_RUN_GROUP(g_dev == LAM_DEVICE_CUDA ? "stream_cuda" : "stream", tests, NULL, NULL);
  lam_ctx_free(g_ctx);
  return failed ? 1 : 0;
}
