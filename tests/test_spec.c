/* test_spec.c — model specs (lamina.h, lam_model_create): every kind of bad spec is LAM_ERR_INVALID_ARG,
 * leaves *out NULL, and its message quotes the word that is wrong ('x3') and its position as a word
 * number ("word 3", counting every word of the spec, commas not counted); the empty and NULL spec and
 * bad input shapes are rejected with a message; good specs build: the presets expand (lam_model_spec) to
 * the header's text, with PyTorch's parameter counts (cnn on 1x28x28: 34826, mlp: 203530), and every
 * spec's parameter count and outputs agree with the test's own reading of the grammar (nnutil.h); a backend
 * that refuses a primitive a layer calls (lam_prim_ops.supports) fails the model's creation, naming the layer and
 * the primitive, and a rank-only primitive is not asked for a model on one rank.
 */
#define _GNU_SOURCE /* strcasestr */
#include <strings.h>

#include "nnutil.h"
#include "../src/internal.h"
#include "../src/nn/nn.h"

static lam_ctx *g_ctx;

/* The message quotes `word` ('w', "w" or `w`) and gives its word number ("word N", any case). */
static int quotes_word(const char *msg, const char *word) {
  static const char *const q[][2] = {{"'", "'"}, {"\"", "\""}, {"`", "`"}, {"\xe2\x80\x98", "\xe2\x80\x99"}};
  char buf[128];
  for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
    snprintf(buf, sizeof buf, "%s%s%s", q[i][0], word, q[i][1]);
    if (strstr(msg, buf)) return 1;
  }
  return 0;
}

static int gives_word_number(const char *msg, int n) {
  for (const char *p = msg; *p; p++) {
    if (strncasecmp(p, "word", 4) != 0) continue;
    const char *s = p + 4;
    while (*s == ' ' || *s == '#' || *s == '\t') s++;
    if (!isdigit((unsigned char)*s)) continue;
    if (atoi(s) == n) return 1;
  }
  return 0;
}

typedef struct bad_spec {
  const char *spec;
  int c, h, w;
  const char *word; /* the word that is wrong, NULL when the problem is not one word */
  int word_no;      /* its position, 1-based */
  const char *hint; /* with word == NULL: a word the message must contain (case-insensitive) */
} bad_spec;

static const bad_spec k_bad[] = {
    {"conv 32 x3", 1, 28, 28, "x3", 3, NULL},                 /* not a number */
    {"conv", 1, 28, 28, "conv", 1, NULL},                     /* missing OUT and K */
    {"conv 32", 1, 28, 28, "conv", 1, NULL},                  /* missing K */
    {"dense", 10, 1, 1, "dense", 1, NULL},                    /* missing OUT */
    {"dense 10 20", 10, 1, 1, "20", 3, NULL},                 /* one word too many */
    {"dense 10x", 10, 1, 1, "10x", 2, NULL},
    {"dense 0", 10, 1, 1, "0", 2, NULL},
    {"maxpool 0", 1, 28, 28, "0", 2, NULL},
    {"maxpool 2 stride 0", 1, 28, 28, "0", 4, NULL},
    {"flurb 3", 1, 28, 28, "flurb", 1, NULL},                 /* unknown layer */
    {"relu 3", 1, 28, 28, "3", 2, NULL},                      /* takes no argument */
    {"flatten 2, dense 10", 1, 28, 28, "2", 2, NULL},
    {"conv 32 3 stride", 1, 28, 28, "stride", 4, NULL},       /* option without its number */
    {"conv 32 3 pad", 1, 28, 28, "pad", 4, NULL},
    {"conv 32 3 pad -1", 1, 28, 28, "-1", 5, NULL},           /* negative padding */
    {"conv 32 3 stride 0", 1, 28, 28, "0", 5, NULL},
    {"conv 0 3", 1, 28, 28, "0", 2, NULL},
    {"conv 32 3 relu", 1, 28, 28, "relu", 4, NULL},           /* a missing comma */
    {"conv 4 3, relu, maxpool 2, flurb", 1, 28, 28, "flurb", 7, NULL}, /* counting goes across commas */
    {"conv 32 30", 1, 28, 28, "30", 3, NULL},                 /* kernel larger than the 28x28 input */
    {"maxpool 40", 1, 28, 28, "40", 2, NULL},                 /* window larger than the input */
    {"dense 10", 1, 28, 28, "dense", 1, NULL},                /* an image into dense without flatten */
    {"flatten, conv 4 3, dense 10", 1, 28, 28, "conv", 2, NULL}, /* conv after the input went flat */
    {"flatten, maxpool 2, dense 10", 1, 28, 28, "maxpool", 2, NULL},
    /* (a model ending in an image is a per-pixel model now: checked against the data, not here) */
    {"conv 8 3, add @nope", 1, 28, 28, "@nope", 5, NULL},     /* an unknown label */
    {"a: relu, a: relu", 1, 28, 28, "a", 3, NULL},            /* a label used twice */
    {"s: conv 4 3, conv 8 3, add @s", 1, 28, 28, "@s", 9, NULL}, /* add of 8x24x24 and 4x26x26 */
    {"s: conv 4 3, maxpool 2, concat @s", 1, 28, 28, "@s", 8, NULL}, /* concat of 13x13 and 26x26 */
    {"conv 4 3, input: relu", 1, 28, 28, "input", 4, NULL},   /* 'input' names the model's input */
    {"bn momentum 2", 1, 28, 28, "2", 3, NULL},
    {"conv 8 3, groupnorm 3", 1, 28, 28, "3", 5, NULL},       /* 3 groups do not divide 8 channels */
    {"conv 8 3, groupnorm", 1, 28, 28, "groupnorm", 4, NULL}, /* missing G */
    {"conv 8 3, layernorm eps 0", 1, 28, 28, "0", 6, NULL},   /* eps out of range */
    {"conv 8 3, layernorm 4", 1, 28, 28, "4", 5, NULL},       /* layernorm has one group */
    {"dropout 1.5", 1, 28, 28, "1.5", 2, NULL},
    {"convt 4 2 stride", 1, 28, 28, "stride", 4, NULL},
    {"upsample 0", 1, 28, 28, "0", 2, NULL},
    {"flatten, gap", 1, 28, 28, "gap", 2, NULL},
    {"", 1, 28, 28, NULL, 0, "empty"},
    {"  ", 1, 28, 28, NULL, 0, "empty"},
    {"cnn", 1, 4, 4, NULL, 0, "conv 64 3"}, /* the preset's second conv meets a 1x1 input: show the expansion */
    /* sizes that overflowed 32-bit arithmetic (flatten of 65536x65536 became 0 values, dense 10 had 10
     * parameters); a tensor of more than 2^31 - 1 values per sample; more than 2^40 parameters */
    {"flatten, dense 10", 1, 65536, 65536, NULL, 0, "4294967296 values per sample"},
    {"conv 65536 3 pad 1, flatten, dense 10", 1, 256, 256, "conv", 1, NULL},
    {"flatten, dense 65536", 1, 46340, 46340, "dense", 2, NULL},
    {"flatten, dense 10", 65, 2, 2, NULL, 0, "channels 1 to 64"}, /* the normalization's 64 channels */
};
#define N_BAD (sizeof k_bad / sizeof k_bad[0])

static void test_bad_specs(void **state) {
  (void)state;
  size_t failures = 0;
  for (size_t i = 0; i < N_BAD; i++) {
    const bad_spec *b = &k_bad[i];
    lam_model *m = (lam_model *)&failures; /* not NULL: the call must set it to NULL */
    lam_status st = lam_model_create(g_ctx, b->spec, b->c, b->h, b->w, 1, &m);
    const char *msg = lam_last_error();
    char what[160];
    snprintf(what, sizeof what, "spec \"%s\" on %dx%dx%d", b->spec, b->c, b->h, b->w);
    if (st != LAM_ERR_INVALID_ARG) {
      print_error("%s: returned %s, want invalid argument (%s)\n", what, lam_status_str(st), msg);
      failures++;
      if (st == LAM_OK) lam_model_free(m);
      continue;
    }
    if (m != NULL) {
      print_error("%s: *out is not NULL after the failure\n", what);
      failures++;
    }
    if (!msg || !*msg) {
      print_error("%s: no message\n", what);
      failures++;
      continue;
    }
    if (b->word) {
      int q = quotes_word(msg, b->word), pos = gives_word_number(msg, b->word_no);
      if (!q || !pos) {
        print_error("%s: want the message to quote '%s' and say word %d%s%s; got: %s\n", what, b->word, b->word_no,
                    q ? "" : " (word not quoted)", pos ? "" : " (position missing or different)", msg);
        failures++;
      }
    } else if (!strcasestr(msg, b->hint)) {
      print_error("%s: want the message to mention '%s'; got: %s\n", what, b->hint, msg);
      failures++;
    }
  }
  if (failures) fail_msg("%zu of %zu bad specs without the right status or message", failures, N_BAD);
}

/* NULL spec, context or out; input shapes with a zero or negative dimension. */
static void test_bad_arguments(void **state) {
  (void)state;
  lam_model *m = (lam_model *)&m;
  TU_EXPECT_STATUS(lam_model_create(g_ctx, NULL, 1, 28, 28, 1, &m), LAM_ERR_INVALID_ARG);
  assert_null(m);
  assert_true(strcasestr(lam_last_error(), "spec") != NULL);
  TU_EXPECT_STATUS(lam_model_create(NULL, "cnn", 1, 28, 28, 1, &m), LAM_ERR_INVALID_ARG);
  assert_true(*lam_last_error());
  TU_EXPECT_STATUS(lam_model_create(g_ctx, "cnn", 1, 28, 28, 1, NULL), LAM_ERR_INVALID_ARG);
  assert_true(*lam_last_error());
  static const int shapes[][3] = {{0, 28, 28}, {1, 0, 28}, {1, 28, 0}, {-1, 28, 28}, {1, -28, 28}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    m = (lam_model *)&m;
    lam_status st = lam_model_create(g_ctx, "mlp", shapes[i][0], shapes[i][1], shapes[i][2], 1, &m);
    if (st != LAM_ERR_INVALID_ARG)
      fail_msg("input shape (%d, %d, %d): returned %s, want invalid argument", shapes[i][0], shapes[i][1],
               shapes[i][2], lam_status_str(st));
    assert_null(m);
    const char *msg = lam_last_error();
    char dims[64];
    snprintf(dims, sizeof dims, "%d", shapes[i][0] < 1 ? shapes[i][0] : shapes[i][1] < 1 ? shapes[i][1] : shapes[i][2]);
    if (!tu_mentions(msg, dims[0] == '-' ? dims + 1 : dims) || !(strcasestr(msg, "shape") || strcasestr(msg, "channel")))
      fail_msg("input shape (%d, %d, %d): the message should name the shape and the bad value: %s", shapes[i][0],
               shapes[i][1], shapes[i][2], msg);
  }
}

/* The presets: expansion as the header spells it, PyTorch's parameter counts, 10 outputs. */
static void test_presets(void **state) {
  (void)state;
  static const struct {
    const char *name, *expanded;
    size_t params;
  } presets[] = {
      /* 32*9+32 + 64*32*9+64 + 1600*10+10 */
      {"cnn", "conv 32 3, relu, maxpool 2, conv 64 3, relu, maxpool 2, flatten, dense 10", 34826},
      /* 784*256+256 + 256*10+10 */
      {"mlp", "flatten, dense 256, tanh, dense 10", 203530},
  };
  for (size_t i = 0; i < 2; i++) {
    lam_model *m = NULL;
    TU_OK(lam_model_create(g_ctx, presets[i].name, 1, 28, 28, 42, &m));
    assert_non_null(m);
    assert_string_equal(lam_model_spec(m), presets[i].expanded);
    assert_int_equal(lam_model_param_count(m), presets[i].params);
    assert_int_equal(lam_model_outputs(m), 10);
    char desc[2048];
    TU_OK(lam_model_describe(m, desc, sizeof desc));
    assert_true(strlen(desc) > 0);
    /* The expanded text builds the same model. */
    lam_model *m2 = NULL;
    TU_OK(lam_model_create(g_ctx, presets[i].expanded, 1, 28, 28, 42, &m2));
    assert_int_equal(lam_model_param_count(m2), presets[i].params);
    /* Same seed, same spec: the same parameters. */
    const size_t n = presets[i].params;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    assert_true(a && b);
    TU_OK(lam_model_params_get(m, a, n));
    TU_OK(lam_model_params_get(m2, b, n));
    if (memcmp(a, b, n * 4)) fail_msg("%s: the preset and its expansion, same seed, give different parameters", presets[i].name);
    free(a);
    free(b);
    lam_model_free(m);
    lam_model_free(m2);
  }
}

/* Good specs: parameter count and outputs as the test reads the grammar (plus one count by hand), the
 * spec returned as given, spaces around words and commas ignored. */
static void test_good_specs(void **state) {
  (void)state;
  static const struct {
    const char *spec;
    int c, h, w;
  } good[] = {
      {"conv 8 3 stride 2 pad 1, relu, maxpool 3 stride 2, flatten, dense 7", 3, 17, 17},
      {"flatten, dense 256, tanh, dense 7", 1, 28, 28},
      {"dense 5", 6, 1, 1},
      {"conv 3 1, sigmoid, conv 2 2 stride 3 pad 1, tanh, flatten, dense 4", 2, 8, 8},
      {"conv 4 5 pad 2, relu, maxpool 2, conv 6 3, relu, maxpool 2 stride 1, flatten, dense 3", 3, 12, 10},
      {"maxpool 2, flatten, dense 3", 2, 4, 4},
      {"cnn", 3, 32, 32},
      {"mlp", 1, 8, 8},
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    lam_model *m = NULL;
    lam_status st = lam_model_create(g_ctx, good[i].spec, good[i].c, good[i].h, good[i].w, 3, &m);
    if (st != LAM_OK) fail_msg("'%s' on %dx%dx%d: %s: %s", good[i].spec, good[i].c, good[i].h, good[i].w, lam_status_str(st), lam_last_error());
    nu_net net;
    nu_parse(good[i].spec, good[i].c, good[i].h, good[i].w, &net);
    if (lam_model_param_count(m) != net.nparams || lam_model_outputs(m) != nu_classes(&net))
      fail_msg("'%s': %zu parameters and %d outputs, want %zu and %d", good[i].spec, lam_model_param_count(m),
               lam_model_outputs(m), net.nparams, nu_classes(&net));
    if (strcmp(good[i].spec, "cnn") && strcmp(good[i].spec, "mlp")) assert_string_equal(lam_model_spec(m), good[i].spec);
    lam_model_free(m);
  }
  /* By hand: conv (17+2-3)/2+1 = 9 -> maxpool (9-3)/2+1 = 4 -> 8*4*4 = 128 features;
   * 8*3*3*3+8 + 128*7+7 = 224 + 903. */
  lam_model *m = NULL;
  TU_OK(lam_model_create(g_ctx, good[0].spec, 3, 17, 17, 3, &m));
  assert_int_equal(lam_model_param_count(m), 1127);
  assert_int_equal(lam_model_outputs(m), 7);
  lam_model_free(m);
  /* Spaces and tabs around words and commas. */
  TU_OK(lam_model_create(g_ctx, "  conv 4 3 ,relu,\tflatten ,  dense 3 ", 1, 6, 6, 3, &m));
  assert_int_equal(lam_model_param_count(m), 4 * 9 + 4 + 64 * 3 + 3);
  assert_int_equal(lam_model_outputs(m), 3);
  lam_model_free(m);
  /* NULL model: the accessors do not crash. */
  assert_int_equal(lam_model_outputs(NULL), 0);
  assert_int_equal(lam_model_param_count(NULL), 0);
  lam_model_free(NULL);
}

/* The layer list (lam_model_layers, made from the ops): every layer it names is one the spec reader knows (a spec of
 * that word alone fails, if it does, for its arguments, not as an unknown layer), and the unknown-layer error names
 * each of them. */
static void test_layer_list(void **state) {
  (void)state;
  const char *text = lam_model_layers();
  assert_non_null(text);
  lam_model *m = NULL;
  assert_int_equal(lam_model_create(g_ctx, "flurb", 1, 8, 8, 1, &m), LAM_ERR_INVALID_ARG);
  char unknown[2048];
  snprintf(unknown, sizeof unknown, "%s", lam_last_error());
  int layers = 0;
  for (const char *line = text; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : line + strlen(line)) {
    if (line[0] != ' ' || line[1] != ' ' || line[2] == ' ') continue; /* a description's second line */
    char name[32];
    assert_int_equal(sscanf(line + 2, "%31[a-z]", name), 1);
    layers++;
    lam_status s = lam_model_create(g_ctx, name, 1, 8, 8, 1, &m);
    if (s == LAM_OK) lam_model_free(m), m = NULL;
    else if (strstr(lam_last_error(), "unknown layer"))
      fail_msg("'%s' is in the layer list but unknown: %s", name, lam_last_error());
    char listed[40];
    snprintf(listed, sizeof listed, " %s,", name);
    if (!strstr(unknown, listed) && !strstr(unknown, (snprintf(listed, sizeof listed, " %s (", name), listed)))
      fail_msg("the unknown-layer error does not name '%s': %s", name, unknown);
  }
  print_message("  %d layers in lam_model_layers, each known to the spec reader and named by its errors\n", layers);
  assert_true(layers >= 19);
}

/* A CPU backend that takes everything but maxpool's forward and BatchNorm's rank sums. */
static int refusing_supports(int prim, lam_fmt f, const char **why) {
  (void)f;
  if (prim != LAM_PRIM_maxpool_fwd && prim != LAM_PRIM_bn_sums) return 1;
  *why = "refused by the test";
  return 0;
}

static void test_backend_refusal(void **state) {
  (void)state;
  lam_prim_ops prim = *lam_cpu_backend.prim;
  prim.supports = refusing_supports;
  lam_backend be = lam_cpu_backend;
  be.prim = &prim;
  const lam_backend *saved = g_ctx->be;
  g_ctx->be = &be;
  lam_model *m = (lam_model *)1;
  lam_status s = lam_model_create(g_ctx, "conv 4 3, relu, maxpool 2, flatten, dense 10", 1, 8, 8, 10, &m);
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", lam_last_error());
  lam_model *ok = NULL, *bn = NULL;
  lam_status s_ok = lam_model_create(g_ctx, "conv 4 3, relu, avgpool 2, flatten, dense 10", 1, 8, 8, 10, &ok);
  lam_status s_bn = lam_model_create(g_ctx, "conv 4 3, bn, relu, gap, dense 10", 1, 8, 8, 10, &bn);
  g_ctx->be = saved;
  lam_model_free(ok), lam_model_free(bn);
  assert_int_equal(s, LAM_ERR_UNSUPPORTED);
  assert_null(m);
  if (!strstr(msg, "layer 3 (maxpool, word 5 of the spec)") || !strstr(msg, "maxpool_fwd") || !strstr(msg, "refused by the test"))
    fail_msg("the refusal does not name the layer, the primitive and the reason: %s", msg);
  assert_int_equal(s_ok, LAM_OK);
  assert_int_equal(s_bn, LAM_OK); /* bn_sums runs only when BatchNorm is synchronized over ranks */
  print_message("  refused at creation: %s\n", msg);
  for (int i = 0; nn_op_at(i); i++) { /* an op without its list would never be asked about */
    const nn_op *op = nn_op_at(i);
    if (!op->prims) fail_msg("op '%s' lists no primitives (nn_op.prims)", op->name);
    for (const int *p = op->prims; *p >= 0; p++)
      if ((*p & ~NN_RANKED) >= LAM_PRIM_COUNT) fail_msg("op '%s' lists primitive %d, not one of prims.h", op->name, *p);
  }
}

int main(void) {
  lam_status st = lam_ctx_create(&g_ctx, LAM_DEVICE_CPU);
  if (st != LAM_OK || !g_ctx) {
    fprintf(stderr, "lam_ctx_create(CPU) failed: %s: %s\n", lam_status_str(st), lam_last_error());
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_specs),
      cmocka_unit_test(test_bad_arguments),
      cmocka_unit_test(test_presets),
      cmocka_unit_test(test_good_specs),
      cmocka_unit_test(test_layer_list),
      cmocka_unit_test(test_backend_refusal),
  };
  int failed = TU_RUN_GROUP("spec", tests, NULL, NULL);
  lam_ctx_free(g_ctx);
  return failed ? 1 : 0;
}
