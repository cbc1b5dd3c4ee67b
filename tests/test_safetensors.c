/* test_safetensors.c — safetensors files (src/nn/safetensors.c) on the CPU backend: a round trip keeps
 * every parameter, running statistic and the normalization bit for bit; the file is what the format says
 * (8-byte length, a JSON header padded to 8 bytes, contiguous F32 data, __metadata__); and every bad file —
 * short, a header length out of range or past the end, not JSON, not an object, duplicate names, unknown or
 * integer dtypes, shapes that differ, offsets out of range, of the wrong size or overlapping, tensors
 * missing or unexpected, bad metadata, a directory, a missing file, and the exported file cut at every
 * length or with any header byte changed — is an error with a message holding the key words (the tensor,
 * the shapes, the layer), and leaves the model exactly as it was. tests/test_safetensors_torch.py checks the
 * names and layouts against PyTorch itself.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp */
#include "testutil.h"

#include <jansson.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#define SPEC "conv 2 3, bn, relu, flatten, dense 3"
/* its tensors: layer 0 conv (2,1,3,3) + (2); layer 1 bn (2) x 4 + num_batches_tracked; layer 4 dense (3,8) + (3) */

static lam_ctx *g_ctx;
static lam_model *g_m;
static char g_dir[64];

static const char *path_of(const char *name) {
  static char buf[4][256];
  static int next;
  char *p = buf[next++ % 4];
  snprintf(p, 256, "%s/%.160s", g_dir, name);
  return p;
}

/* A model with every parameter and statistic drawn at random. */
static lam_model *random_model(uint64_t seed) {
  lam_model *m = NULL;
  assert_int_equal(lam_model_create(g_ctx, SPEC, 1, 4, 4, seed, &m), LAM_OK);
  size_t np = lam_model_param_count(m), ns = lam_model_state_count(m);
  float *p = malloc(np * sizeof *p), *s = malloc(ns * sizeof *s);
  tu_rng r;
  tu_rng_seed(&r, tu_case_seed(seed));
  for (size_t i = 0; i < np; i++) p[i] = (float)tu_uniform(&r, -1, 1);
  for (size_t i = 0; i < ns; i++) s[i] = (float)tu_uniform(&r, 0.5, 1.5);
  assert_int_equal(lam_model_params_set(m, p, np), LAM_OK);
  assert_int_equal(lam_model_state_set(m, s, ns), LAM_OK);
  free(p);
  free(s);
  return m;
}

/* ---- a model's snapshot, to check that a failed load changed nothing -------------------------------- */

typedef struct snap {
  float p[64], s[8], mean[1], std[1];
} snap;
static void take(lam_model *m, snap *x) {
  assert_true(lam_model_param_count(m) <= 64 && lam_model_state_count(m) <= 8);
  memset(x, 0, sizeof *x);
  assert_int_equal(lam_model_params_get(m, x->p, lam_model_param_count(m)), LAM_OK);
  assert_int_equal(lam_model_state_get(m, x->s, lam_model_state_count(m)), LAM_OK);
  assert_int_equal(lam_model_normalization(m, x->mean, x->std), LAM_OK);
}

/* ---- files built here: a header (JSON) and data -------------------------------------------------------- */

/* The header of a good file for SPEC: contiguous F32 tensors (num_batches_tracked I64) from offset 0. */
static json_t *good_header(size_t *data_bytes) {
  static const struct {
    const char *name;
    int nd;
    int s[4];
  } t[] = {{"0.weight", 4, {2, 1, 3, 3}}, {"0.bias", 1, {2}},          {"1.weight", 1, {2}},
           {"1.bias", 1, {2}},            {"1.running_mean", 1, {2}},  {"1.running_var", 1, {2}},
           {"1.num_batches_tracked", 0, {0}}, {"4.weight", 2, {3, 8}}, {"4.bias", 1, {3}}};
  json_t *h = json_object();
  size_t off = 0;
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    json_t *shape = json_array();
    size_t n = 1;
    for (int d = 0; d < t[i].nd; d++) json_array_append_new(shape, json_integer(t[i].s[d])), n *= (size_t)t[i].s[d];
    int is_count = strstr(t[i].name, "num_batches") != NULL;
    size_t bytes = n * (is_count ? 8 : 4);
    json_object_set_new(h, t[i].name, json_pack("{s:s,s:o,s:[I,I]}", "dtype", is_count ? "I64" : "F32", "shape", shape,
                                                "data_offsets", (json_int_t)off, (json_int_t)(off + bytes)));
    off += bytes;
  }
  *data_bytes = off;
  return h;
}

/* Writes u64 hlen (the header's padded length unless hlen_override), the header text padded with spaces,
 * and data_bytes of data: 0.25f everywhere. */
static void write_raw(const char *path, const char *text, size_t data_bytes, uint64_t hlen_override) {
  size_t tl = strlen(text), padded = (tl + 7) / 8 * 8;
  uint64_t hlen = hlen_override ? hlen_override : padded;
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  for (int i = 0; i < 8; i++) fputc((int)(hlen >> (8 * i)) & 0xff, f);
  fwrite(text, 1, tl, f);
  for (size_t i = tl; i < padded; i++) fputc(' ', f);
  const float q = 0.25f;
  for (size_t i = 0; i + 4 <= data_bytes; i += 4) fwrite(&q, 4, 1, f);
  assert_int_equal(fclose(f), 0);
}
static void write_st(const char *path, json_t *h, size_t data_bytes) {
  char *text = json_dumps(h, JSON_COMPACT);
  assert_non_null(text);
  write_raw(path, text, data_bytes, 0);
  free(text);
  json_decref(h);
}
static void set_field(json_t *h, const char *tensor, const char *field, json_t *v) {
  json_t *e = json_object_get(h, tensor);
  assert_non_null(e);
  json_object_set_new(e, field, v);
}

/* Loading path into g_m fails with status s and a message holding every key word; g_m is unchanged. */
static void expect_fail(const char *path, lam_status s, const char *k1, const char *k2, const char *k3) {
  snap before, after;
  take(g_m, &before);
  lam_status got = lam_model_load_safetensors(g_m, path);
  const char *msg = lam_last_error();
  if (got != s) fail_msg("loading %s: status %d, want %d; message: %s", path, got, s, msg);
  const char *keys[] = {k1, k2, k3};
  for (int i = 0; i < 3; i++)
    if (keys[i] && !strstr(msg, keys[i])) fail_msg("message lacks '%s': %s", keys[i], msg);
  take(g_m, &after);
  assert_memory_equal(&before, &after, sizeof before);
}

/* ---- the tests ------------------------------------------------------------------------------------------ */

static void test_roundtrip(void **state) {
  (void)state;
  lam_model *a = random_model(3), *b = random_model(4);
  float mean = 0.125f, std = 3.5f;
  assert_int_equal(lam_model_set_normalization(a, 1, &mean, &std), LAM_OK);
  assert_int_equal(lam_model_save_safetensors(a, path_of("a.safetensors")), LAM_OK);
  assert_int_equal(lam_model_load_safetensors(b, path_of("a.safetensors")), LAM_OK);
  snap sa, sb;
  take(a, &sa);
  take(b, &sb);
  assert_memory_equal(&sa, &sb, sizeof sa); /* parameters, statistics and normalization, bit for bit */
  lam_model_free(a);
  lam_model_free(b);
}

static void test_format(void **state) {
  (void)state;
  lam_model *a = random_model(5);
  assert_int_equal(lam_model_save_safetensors(a, path_of("f.safetensors")), LAM_OK);
  FILE *f = fopen(path_of("f.safetensors"), "rb");
  assert_non_null(f);
  uint8_t q[8];
  assert_int_equal(fread(q, 1, 8, f), 8);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)q[i] << (8 * i);
  assert_int_equal(hlen % 8, 0);
  char *h = malloc(hlen);
  assert_int_equal(fread(h, 1, hlen, f), hlen);
  json_error_t err;
  json_t *root = json_loadb(h, hlen, 0, &err);
  if (!root) fail_msg("the header is not JSON: %s", err.text);
  assert_string_equal(json_string_value(json_object_get(json_object_get(root, "__metadata__"), "lamina.spec")), SPEC);
  assert_string_equal(json_string_value(json_object_get(json_object_get(root, "__metadata__"), "lamina.input")), "1x4x4");
  /* 0.weight first, F32 (2, 1, 3, 3) at [0, 72), equal to the model's first 18 parameters */
  json_t *w = json_object_get(root, "0.weight"), *nbt = json_object_get(root, "1.num_batches_tracked");
  assert_string_equal(json_string_value(json_object_get(w, "dtype")), "F32");
  assert_int_equal(json_array_size(json_object_get(w, "shape")), 4);
  assert_int_equal(json_integer_value(json_array_get(json_object_get(w, "data_offsets"), 0)), 0);
  assert_int_equal(json_integer_value(json_array_get(json_object_get(w, "data_offsets"), 1)), 72);
  assert_string_equal(json_string_value(json_object_get(nbt, "dtype")), "I64");
  assert_int_equal(json_array_size(json_object_get(nbt, "shape")), 0);
  float data[18], p[64];
  assert_int_equal(fread(data, 4, 18, f), 18);
  assert_int_equal(lam_model_params_get(a, p, lam_model_param_count(a)), LAM_OK);
  assert_memory_equal(data, p, sizeof data);
  /* the parameters and 4 statistics as F32, one I64: the data ends the file */
  struct stat st;
  assert_int_equal(fstat(fileno(f), &st), 0);
  assert_int_equal((size_t)st.st_size, 8 + hlen + (lam_model_param_count(a) + 4) * 4 + 8);
  fclose(f);
  free(h);
  json_decref(root);
  lam_model_free(a);
}

static void test_good_files(void **state) {
  (void)state;
  size_t db;
  json_t *good = good_header(&db);
  write_st(path_of("g.safetensors"), good, db);
  assert_int_equal(lam_model_load_safetensors(g_m, path_of("g.safetensors")), LAM_OK);
  float p[64];
  assert_int_equal(lam_model_params_get(g_m, p, lam_model_param_count(g_m)), LAM_OK);
  for (size_t i = 0; i < lam_model_param_count(g_m); i++) assert_true(p[i] == 0.25f);
  /* num_batches_tracked may be missing; lamina.normalize in the metadata sets the normalization */
  json_t *h = good_header(&db);
  json_object_del(h, "1.num_batches_tracked");
  json_object_set_new(h, "__metadata__", json_pack("{s:s,s:s}", "format", "pt", "lamina.normalize", "0.25/2"));
  write_st(path_of("g2.safetensors"), h, db);
  assert_int_equal(lam_model_load_safetensors(g_m, path_of("g2.safetensors")), LAM_OK);
  float mean, std;
  assert_int_equal(lam_model_normalization(g_m, &mean, &std), LAM_OK);
  assert_true(mean == 0.25f && std == 2.0f);
}

static void test_bad_headers(void **state) {
  (void)state;
  const char *p = path_of("bad.safetensors");
  FILE *f = fopen(p, "wb"); /* 4 bytes: not even the length */
  fwrite("abcd", 1, 4, f);
  fclose(f);
  expect_fail(p, LAM_ERR_IO, "fewer than the 8", p, NULL);
  write_raw(p, "{}", 0, 1ull << 40);
  expect_fail(p, LAM_ERR_IO, "header of 1099511627776 bytes", NULL, NULL);
  write_raw(p, "{}", 0, 1000);
  expect_fail(p, LAM_ERR_IO, "truncated", "1000", NULL);
  write_raw(p, "{\"0.weight\": ", 0, 0);
  expect_fail(p, LAM_ERR_IO, "not valid JSON", NULL, NULL);
  write_raw(p, "[1, 2]", 0, 0);
  expect_fail(p, LAM_ERR_IO, "not an object", NULL, NULL);
  write_raw(p, "{\"a\": 1, \"a\": 2}", 0, 0);
  expect_fail(p, LAM_ERR_IO, "duplicate", NULL, NULL);
  write_raw(p, "{\"0.weight\": 5}", 0, 0);
  expect_fail(p, LAM_ERR_IO, "'0.weight' is not {", NULL, NULL);
  expect_fail(g_dir, LAM_ERR_IO, "not a regular file", NULL, NULL);
  expect_fail(path_of("missing.safetensors"), LAM_ERR_IO, "cannot open", NULL, NULL);
}

static void test_bad_entries(void **state) {
  (void)state;
  const char *p = path_of("bad.safetensors");
  size_t db;
  json_t *h = good_header(&db);
  set_field(h, "0.weight", "dtype", json_string("Q7"));
  write_st(p, h, db);
  expect_fail(p, LAM_ERR_IO, "'0.weight'", "'Q7'", NULL);
  h = good_header(&db);
  set_field(h, "0.bias", "dtype", json_string("I32")); /* 4 bytes, like F32: only the kind is wrong */
  write_st(p, h, db);
  expect_fail(p, LAM_ERR_UNSUPPORTED, "'0.bias'", "I32", "layer 0: conv 2 3");
  h = good_header(&db);
  set_field(h, "0.weight", "shape", json_pack("[i,i,i,i]", 1, 2, 3, 3)); /* 18 values, the wrong shape */
  write_st(p, h, db);
  expect_fail(p, LAM_ERR_INVALID_ARG, "(1, 2, 3, 3)", "(2, 1, 3, 3)", "layer 0 of the model (conv 2 3");
  h = good_header(&db);
  set_field(h, "4.weight", "shape", json_pack("[i,i]", 3, 7)); /* 21 values in 24 values' bytes */
  write_st(p, h, db);
  expect_fail(p, LAM_ERR_IO, "'4.weight' has 96 bytes", "(3, 7) takes 84", NULL);
  h = good_header(&db);
  set_field(h, "4.bias", "shape", json_pack("[i]", -3));
  write_st(p, h, db);
  expect_fail(p, LAM_ERR_IO, "'4.bias': shape[0]", NULL, NULL);
  h = good_header(&db);
  set_field(h, "4.bias", "data_offsets", json_pack("[I,I]", (json_int_t)db, (json_int_t)db + 12));
  write_st(p, h, db);
  expect_fail(p, LAM_ERR_IO, "'4.bias' lies at bytes", "truncated", NULL);
  h = good_header(&db);
  set_field(h, "4.bias", "data_offsets", json_pack("[i,i]", 12, 0));
  write_st(p, h, db);
  expect_fail(p, LAM_ERR_IO, "data_offsets is not [begin, end]", NULL, NULL);
  h = good_header(&db);
  set_field(h, "0.bias", "data_offsets", json_pack("[i,i]", 64, 72)); /* inside 0.weight's [0, 72) */
  write_st(p, h, db);
  expect_fail(p, LAM_ERR_IO, "overlap", "'0.weight'", "'0.bias'");
  h = good_header(&db);
  json_object_set_new(h, "__metadata__", json_pack("{s:i}", "format", 1));
  write_st(p, h, db);
  expect_fail(p, LAM_ERR_IO, "'format' is not a string", NULL, NULL);
  h = good_header(&db);
  json_object_set_new(h, "__metadata__", json_pack("{s:s}", "lamina.normalize", "0.5,0.5/0.5"));
  write_st(p, h, db);
  expect_fail(p, LAM_ERR_INVALID_ARG, "lamina.normalize", "1 means", NULL);
}

static void test_names(void **state) {
  (void)state;
  const char *p = path_of("names.safetensors");
  size_t db;
  json_t *h = good_header(&db);
  json_object_del(h, "4.bias");
  write_st(p, h, db);
  expect_fail(p, LAM_ERR_INVALID_ARG, "missing '4.bias'", "--list", NULL);
  h = good_header(&db); /* torch's names of a module with attributes, not layer indices */
  json_t *e = json_incref(json_object_get(h, "0.weight"));
  json_object_del(h, "0.weight");
  json_object_set_new(h, "conv1.weight", e);
  write_st(p, h, db);
  expect_fail(p, LAM_ERR_INVALID_ARG, "missing '0.weight'", "not in the model 'conv1.weight'", "counted from 0");
  h = good_header(&db); /* the state_dict of a module around the layers: a prefix */
  e = json_incref(json_object_get(h, "4.bias"));
  json_object_del(h, "4.bias");
  json_object_set_new(h, "model.layers.4.bias", e);
  write_st(p, h, db);
  expect_fail(p, LAM_ERR_INVALID_ARG, "missing '4.bias'", "'model.layers.4.bias'", "drop the prefix 'model.layers.'");
  /* the list names the model's tensors, their shapes and layers */
  size_t need = 0;
  assert_int_equal(lam_model_safetensors_names(g_m, NULL, 0, &need), LAM_OK);
  char *buf = malloc(need);
  assert_int_equal(lam_model_safetensors_names(g_m, buf, need, NULL), LAM_OK);
  assert_int_equal(strlen(buf) + 1, need);
  assert_non_null(strstr(buf, "4.weight"));
  assert_non_null(strstr(buf, "(3, 8)"));
  assert_non_null(strstr(buf, "layer 4: dense 3"));
  assert_non_null(strstr(buf, "1.running_var"));
  free(buf);
}

/* The exported file cut at every length, and every header byte set to each of a few values: an error
 * or (where a change leaves a valid file) success, never a crash; the model changes only on success. */
static void test_damage(void **state) {
  (void)state;
  lam_model *a = random_model(9);
  assert_int_equal(lam_model_save_safetensors(a, path_of("d.safetensors")), LAM_OK);
  FILE *f = fopen(path_of("d.safetensors"), "rb");
  uint8_t buf[4096];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  assert_true(n > 100 && n < sizeof buf);
  const char *p = path_of("cut.safetensors");
  for (size_t len = 0; len < n; len++) {
    FILE *g = fopen(p, "wb");
    fwrite(buf, 1, len, g);
    fclose(g);
    snap before, after;
    take(g_m, &before);
    assert_int_not_equal(lam_model_load_safetensors(g_m, p), LAM_OK);
    take(g_m, &after);
    assert_memory_equal(&before, &after, sizeof before);
  }
  uint64_t hlen = 0;
  for (int i = 0; i < 8; i++) hlen |= (uint64_t)buf[i] << (8 * i);
  const uint8_t vals[] = {0, '"', '{', '}', '[', ']', ',', ':', '1', '9', '-', 'x', 0xff};
  for (size_t at = 0; at < 8 + hlen; at++)
    for (size_t v = 0; v < sizeof vals; v++) {
      uint8_t keep = buf[at];
      buf[at] = vals[v];
      FILE *g = fopen(p, "wb");
      fwrite(buf, 1, n, g);
      fclose(g);
      buf[at] = keep;
      snap before, after;
      take(g_m, &before);
      if (lam_model_load_safetensors(g_m, p) != LAM_OK) {
        take(g_m, &after);
        assert_memory_equal(&before, &after, sizeof before);
      }
    }
  lam_model_free(a);
}

static void test_save_errors(void **state) {
  (void)state;
  assert_int_not_equal(lam_model_save_safetensors(g_m, g_dir), LAM_OK); /* a directory */
  assert_non_null(strstr(lam_last_error(), "directory"));
  assert_int_not_equal(lam_model_save_safetensors(g_m, path_of("no/such/folder.safetensors")), LAM_OK);
  assert_int_equal(lam_model_save_safetensors(NULL, "x"), LAM_ERR_INVALID_ARG);
  assert_int_equal(lam_model_load_safetensors(g_m, NULL), LAM_ERR_INVALID_ARG);
  DIR *d = opendir(g_dir); /* no temporary file left behind by any save */
  for (struct dirent *e; (e = readdir(d)) != NULL;) assert_null(strstr(e->d_name, ".tmp."));
  closedir(d);
}

static int setup(void **state) {
  (void)state;
  snprintf(g_dir, sizeof g_dir, "/tmp/lamina-st-XXXXXX");
  if (!mkdtemp(g_dir)) return -1;
  if (lam_ctx_create(&g_ctx, LAM_DEVICE_CPU) != LAM_OK) return -1;
  g_m = random_model(1);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  lam_model_free(g_m);
  lam_ctx_free(g_ctx);
  DIR *d = opendir(g_dir);
  for (struct dirent *e; d && (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') unlink(path_of(e->d_name));
  if (d) closedir(d);
  rmdir(g_dir);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roundtrip),   cmocka_unit_test(test_format), cmocka_unit_test(test_good_files),
      cmocka_unit_test(test_bad_headers), cmocka_unit_test(test_bad_entries), cmocka_unit_test(test_names),
      cmocka_unit_test(test_damage),      cmocka_unit_test(test_save_errors),
  };
  return TU_RUN_GROUP("safetensors", tests, setup, teardown);
}
