/* test_files.c — what a run reads and writes (src/files.c) through the public API: an existing file is
 * replaced only by one of its own kind (each kind against each other and against a user's text), an empty
 * file may be replaced, an output may not be an input, another output or a file in an input folder within a
 * run (but may outside one), a resumed checkpoint may be replaced by the run's checkpoint, a FIFO as an input
 * is refused at once, and lam_path_inside. The CLI's writers are checked one by one in test_cli.sh.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, mkfifo */
#include "testutil.h"

#include <sys/stat.h>
#include <unistd.h>

static char g_dir[64];

static void path_of(char *buf, size_t cap, const char *name) { snprintf(buf, cap, "%s/%s", g_dir, name); }

static void put(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) fail_msg("cannot write %s", path);
  fclose(f);
}

/* A file of each kind, as lamina writes its first bytes. */
static const struct {
  lam_file_kind kind;
  const char *name;
  const char *bytes;
  size_t n;
} g_kinds[] = {
    {LAM_FILE_CHECKPOINT, "a.ckpt", "LAMCKPT\0\1\2\3\4", 12},
    {LAM_FILE_SAFETENSORS, "a.safetensors", "\x02\0\0\0\0\0\0\0{}", 10},
    {LAM_FILE_TRACE, "a.json", "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n]}\n", 44},
    {LAM_FILE_LOG, "a.csv", "epoch,train_loss,train_acc\n", 27},
    {LAM_FILE_PNG, "a.png", "\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16},
    {LAM_FILE_IDX, "a-idx1-ubyte", "\0\0\x08\x01\0\0\0\x01\x07", 9},
    {LAM_FILE_NPY, "a.npy", "\x93NUMPY\x01\0", 8},
    {LAM_FILE_BENCH_CSV, "bench.csv", "device,label,n,c,h,w,layout\n", 28},
    {LAM_FILE_SVG, "a.svg", "<?xml version=\"1.0\"?>\n<!DOCTYPE svg PUBLIC>\n<svg>", 49},
};
#define NKINDS (sizeof g_kinds / sizeof g_kinds[0])

static void test_kinds(void **state) {
  (void)state;
  lam_run_end(); /* the kind rule holds outside a run */
  char path[512], user[512];
  path_of(user, sizeof user, "notes.txt");
  put(user, "my notes\n", 9);
  for (size_t i = 0; i < NKINDS; i++) {
    path_of(path, sizeof path, g_kinds[i].name);
    put(path, g_kinds[i].bytes, g_kinds[i].n);
    for (size_t j = 0; j < NKINDS; j++) {
      lam_status s = lam_output_check(path, "output", g_kinds[j].kind);
      if ((s == LAM_OK) != (i == j))
        fail_msg("a file of kind %s checked as an output of kind %s: %s", lam_file_kind_name(g_kinds[i].kind),
                 lam_file_kind_name(g_kinds[j].kind), s == LAM_OK ? "allowed" : lam_last_error());
      if (s != LAM_OK && !strstr(lam_last_error(), lam_file_kind_name(g_kinds[i].kind)))
        fail_msg("the message does not say what the file is: %s", lam_last_error());
    }
    if (lam_output_check(user, "output", g_kinds[i].kind) == LAM_OK)
      fail_msg("a user's text file may be replaced by %s", lam_file_kind_name(g_kinds[i].kind));
    if (!strstr(lam_last_error(), "'my notes"))
      fail_msg("the message does not quote the text: %s", lam_last_error());
  }
  /* the public writer takes the kind from the bytes: a log may not replace a user's text, a PNG may replace one */
  const char *log = "epoch,train_loss,x\n1,2,3\n";
  assert_int_not_equal(lam_output_write_atomic(user, "log", log, strlen(log)), LAM_OK);
  char png[512];
  path_of(png, sizeof png, "a.png");
  assert_int_equal(lam_output_write_atomic(png, "picture", g_kinds[4].bytes, g_kinds[4].n), LAM_OK);
  char empty[512];
  path_of(empty, sizeof empty, "empty.ckpt");
  put(empty, "", 0);
  assert_int_equal(lam_output_check(empty, "checkpoint", LAM_FILE_CHECKPOINT), LAM_OK); /* nothing to lose */
  struct stat st;
  assert_int_equal(stat(user, &st), 0);
  assert_int_equal((int)st.st_size, 9); /* the user's file as it was */
}

static void test_run(void **state) {
  (void)state;
  char in[512], out[512], ck[512];
  path_of(in, sizeof in, "a-idx1-ubyte");
  path_of(out, sizeof out, "new-output");
  path_of(ck, sizeof ck, "a.ckpt");
  lam_run_begin();
  assert_int_equal(lam_input_check(in, "training labels"), LAM_OK);
  if (lam_output_check(in, "log", LAM_FILE_NONE) == LAM_OK) fail_msg("an input may be an output of its run");
  if (!strstr(lam_last_error(), "training labels")) fail_msg("the message does not name the input: %s", lam_last_error());
  assert_int_equal(lam_output_check(out, "checkpoint (--save)", LAM_FILE_CHECKPOINT), LAM_OK);
  assert_int_equal(lam_output_check(out, "checkpoint (--save)", LAM_FILE_CHECKPOINT), LAM_OK); /* the same, again */
  if (lam_output_check(out, "log (--log)", LAM_FILE_LOG) == LAM_OK) fail_msg("two outputs may share a path");
  if (!strstr(lam_last_error(), "checkpoint (--save)")) fail_msg("the message does not name the other: %s", lam_last_error());
  /* the same path written through another name of it */
  char other[600];
  snprintf(other, sizeof other, "%s/./new-output", g_dir);
  if (lam_output_check(other, "trace", LAM_FILE_NONE) == LAM_OK) fail_msg("./new-output is not new-output");
  /* a checkpoint resumed from may be replaced by the run's own checkpoint */
  assert_int_equal(lam_input_check(ck, "checkpoint (--resume)"), LAM_OK);
  /* (lam_input_check records no kind: a resume records its checkpoint through the loader) */
  if (lam_output_check(ck, "checkpoint (--save)", LAM_FILE_CHECKPOINT) == LAM_OK)
    fail_msg("a checkpoint read as an unknown input may be replaced");
  /* a folder the run reads: no output goes in it */
  char sub[512], inside[600];
  path_of(sub, sizeof sub, "class0");
  mkdir(sub, 0777);
  snprintf(inside, sizeof inside, "%s/model.ckpt", sub);
  assert_int_equal(lam_input_folder(sub, "images"), LAM_OK);
  if (lam_output_check(inside, "checkpoint", LAM_FILE_CHECKPOINT) == LAM_OK) fail_msg("an output in an input folder");
  lam_run_end();
  /* a new run forgets the last one's files */
  lam_run_begin();
  assert_int_equal(lam_output_check(out, "log (--log)", LAM_FILE_LOG), LAM_OK);
  assert_int_equal(lam_output_check(inside, "checkpoint", LAM_FILE_CHECKPOINT), LAM_OK);
  /* an output claimed first, its path read as an input after */
  if (lam_input_check(in, "data") != LAM_OK) fail_msg("%s", lam_last_error());
  char later[512];
  path_of(later, sizeof later, "a.npy");
  assert_int_equal(lam_output_check(later, "numbers", LAM_FILE_NPY), LAM_OK);
  if (lam_input_check(later, "data") == LAM_OK) fail_msg("an input may be an output claimed before it was read");
  lam_run_end();
}

static void test_fifo(void **state) {
  (void)state;
  char fifo[512];
  path_of(fifo, sizeof fifo, "pipe");
  if (mkfifo(fifo, 0600) != 0) skip(); /* a file system without FIFOs */
  if (lam_input_check(fifo, "data file") == LAM_OK) fail_msg("a FIFO was taken as an input");
  if (!strstr(lam_last_error(), "FIFO")) fail_msg("the message does not say FIFO: %s", lam_last_error());
  lam_model *m = NULL;
  lam_ctx *ctx = NULL;
  assert_int_equal(lam_ctx_create(&ctx, LAM_DEVICE_CPU), LAM_OK);
  if (lam_checkpoint_load(ctx, fifo, &m, NULL, NULL) == LAM_OK) fail_msg("a checkpoint loaded from a FIFO");
  lam_dataset *d = NULL;
  if (lam_dataset_load_idx(fifo, fifo, 0, &d) == LAM_OK) fail_msg("a data set loaded from a FIFO");
  lam_ctx_free(ctx);
}

static void test_inside(void **state) {
  (void)state;
  char a[512], b[600];
  path_of(a, sizeof a, "x");
  snprintf(b, sizeof b, "%s/x/y/z", g_dir);
  assert_true(lam_path_inside(b, a));
  assert_true(lam_path_inside(a, a));
  assert_false(lam_path_inside(a, b));
  snprintf(b, sizeof b, "%s/xy", g_dir); /* a prefix of the name is not inside */
  assert_false(lam_path_inside(b, a));
}

int main(void) {
  if (tu_tmpdir(g_dir, sizeof g_dir, "test-files")) {
    perror("mkdtemp");
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kinds),
      cmocka_unit_test(test_run),
      cmocka_unit_test(test_fifo),
      cmocka_unit_test(test_inside),
  };
  int failed = TU_RUN_GROUP("files", tests, NULL, NULL);
  tu_rmdir_all(g_dir);
  return failed ? 1 : 0;
}
