/* files.c — what a run reads and writes, in one place, so that no output replaces an input or another output.
 *
 * Inputs are opened through lam_input_open: only a regular file is read (a FIFO, a device or a socket would
 * block the open or never end: refused before anything waits on it). Within a run (lam_run_begin .. _end:
 * the CLI makes each command one run) every input and every folder a reader takes files from is remembered,
 * by device and inode and by its canonical path.
 *
 * Outputs are claimed (lam_output_claim) before the work that makes them, and again when written
 * (outpath.c). A claim is refused when the path is
 *  - an input of the run (same file, or same canonical path), except a checkpoint resumed from, which the
 *    run's own checkpoint may replace (the new state continues the old one: what `--resume X --save X` asks);
 *  - another output of the run (same file, or the same path before either exists);
 *  - in a folder the run takes its input files from (an image folder's class folders, predict's --input);
 *  - an existing file that is not of the kind being written (its first bytes: a checkpoint replaces only a
 *    checkpoint, a PNG only a PNG, ...; an empty file holds nothing to lose).
 * The kind rule holds outside a run too (the library's writers called from Python, say). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

typedef struct run_file {
  char *canon;         /* canonical path: realpath, or realpath(folder) + "/" + name before it exists */
  dev_t dev;
  ino_t ino;
  int exists;          /* dev and ino are known */
  int output;          /* else an input */
  int folder;          /* an input folder: no output goes into it */
  lam_file_kind kind;  /* an output's kind; an input's, where its reader knows it */
  char what[96];       /* for messages: "checkpoint (--save)", "training images", ... */
} run_file;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static run_file *g_files;
static size_t g_n, g_cap;
static int g_open; /* a run is being recorded */

static void clear_files(void) {
  for (size_t i = 0; i < g_n; i++) free(g_files[i].canon);
  free(g_files);
  g_files = NULL, g_n = g_cap = 0;
}

void lam_run_begin(void) {
  pthread_mutex_lock(&g_lock);
  clear_files();
  g_open = 1;
  pthread_mutex_unlock(&g_lock);
}

void lam_run_end(void) {
  pthread_mutex_lock(&g_lock);
  clear_files();
  g_open = 0;
  pthread_mutex_unlock(&g_lock);
}

/* ---- kinds: what a file's first bytes say it is ---- */

static int is_checkpoint(const uint8_t *p, size_t n, uint64_t size) {
  (void)size;
  return n >= 8 && !memcmp(p, "LAMCKPT", 8);
}
static int is_safetensors(const uint8_t *p, size_t n, uint64_t size) {
  if (n < 9) return 0;
  uint64_t h = 0;
  for (int i = 7; i >= 0; i--) h = h << 8 | p[i];
  return h >= 2 && h <= size - 8 && p[8] == '{';
}
static int is_trace(const uint8_t *p, size_t n, uint64_t size) {
  (void)size;
  static const char head[] = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  return n >= sizeof head - 1 && !memcmp(p, head, sizeof head - 1);
}
static int is_log(const uint8_t *p, size_t n, uint64_t size) {
  (void)size;
  static const char head[] = "epoch,train_loss,";
  return n >= sizeof head - 1 && !memcmp(p, head, sizeof head - 1);
}
static int is_png(const uint8_t *p, size_t n, uint64_t size) {
  (void)size;
  return n >= 8 && !memcmp(p, "\x89PNG\r\n\x1a\n", 8);
}
static int is_idx(const uint8_t *p, size_t n, uint64_t size) {
  (void)size; /* 0 0, the element type (unsigned byte to double), the rank */
  return n >= 4 && p[0] == 0 && p[1] == 0 && (p[2] == 0x08 || (p[2] >= 0x09 && p[2] <= 0x0e && p[2] != 0x0a)) &&
         p[3] >= 1 && p[3] <= 8;
}
static int is_npy(const uint8_t *p, size_t n, uint64_t size) {
  (void)size;
  return n >= 6 && !memcmp(p, "\x93NUMPY", 6);
}

static int is_bench_csv(const uint8_t *p, size_t n, uint64_t size) {
  (void)size;
  static const char head[] = "device,label,n,c,h,w,";
  return n >= sizeof head - 1 && !memcmp(p, head, sizeof head - 1);
}
static int is_svg(const uint8_t *p, size_t n, uint64_t size) {
  (void)size; /* an XML declaration or a DOCTYPE before the <svg> element: look for its name */
  for (size_t i = 0; i + 4 <= n; i++)
    if (!memcmp(p + i, "<svg", 4) || (i + 11 <= n && !memcmp(p + i, "DOCTYPE svg", 11))) return 1;
  return 0;
}

static const struct {
  const char *name; /* "a lamina checkpoint": how a message names a file of this kind */
  int (*is)(const uint8_t *p, size_t n, uint64_t size);
} kinds[LAM_FILE_KINDS] = {
    [LAM_FILE_CHECKPOINT] = {"a lamina checkpoint", is_checkpoint},
    [LAM_FILE_SAFETENSORS] = {"a safetensors file", is_safetensors},
    [LAM_FILE_TRACE] = {"a lamina trace", is_trace},
    [LAM_FILE_LOG] = {"a lamina training log (CSV)", is_log},
    [LAM_FILE_PNG] = {"a PNG image", is_png},
    [LAM_FILE_IDX] = {"an IDX data file", is_idx},
    [LAM_FILE_NPY] = {"a NumPy .npy file", is_npy},
    [LAM_FILE_BENCH_CSV] = {"a lamina bench CSV", is_bench_csv},
    [LAM_FILE_SVG] = {"an SVG picture", is_svg},
};

lam_file_kind lam_file_kind_of(const uint8_t *p, size_t n) {
  for (int k = LAM_FILE_NONE + 1; k < LAM_FILE_KINDS; k++)
    if (kinds[k].is(p, n < 256 ? n : 256, n)) return (lam_file_kind)k;
  return LAM_FILE_NONE;
}

const char *lam_file_kind_name(lam_file_kind k) {
  return k > LAM_FILE_NONE && k < LAM_FILE_KINDS ? kinds[k].name : "a file";
}

/* What the first bytes look like, for a message: one of the kinds, or a few common others. */
static void describe(const uint8_t *p, size_t n, uint64_t size, char *buf, size_t cap) {
  for (int k = LAM_FILE_NONE + 1; k < LAM_FILE_KINDS; k++)
    if (kinds[k].is(p, n, size)) {
      snprintf(buf, cap, "it is %s", kinds[k].name);
      return;
    }
  if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b) snprintf(buf, cap, "it is gzip data");
  else if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) snprintf(buf, cap, "it is a JPEG image");
  else {
    size_t t = 0;
    while (t < n && t < 24 && ((p[t] >= 0x20 && p[t] < 0x7f) || p[t] == '\t')) t++;
    if (t >= 4) snprintf(buf, cap, "it starts with the text '%.*s'", (int)t, (const char *)p);
    else snprintf(buf, cap, "its first bytes are no kind lamina writes");
  }
}

lam_status lam_file_kind_check(const char *path, const char *what, lam_file_kind kind) {
  if (kind <= LAM_FILE_NONE || kind >= LAM_FILE_KINDS) return LAM_OK;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return LAM_OK; /* none yet, or unreadable: the write itself says why, if it fails */
  struct stat st;
  uint8_t head[256];
  ssize_t got = 0;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) got = pread(fd, head, sizeof head, 0);
  close(fd);
  if (got <= 0 || kinds[kind].is(head, (size_t)got, (uint64_t)st.st_size)) return LAM_OK;
  char looks[96];
  describe(head, (size_t)got, (uint64_t)st.st_size, looks, sizeof looks);
  return LAM_FAIL(LAM_ERR_INVALID_ARG, "the %s path '%s' is an existing file that is not %s (%s): lamina replaces only a "
                  "file of the kind it writes, so that no data is lost to a mistyped name; give another name, or move "
                  "that file away first", what, path, kinds[kind].name, looks);
}

/* ---- the run's files ---- */

/* The canonical path of path: realpath where it exists, else realpath of its folder + "/" + its name. */
static int canonical(const char *path, char *out) {
  if (realpath(path, out)) return 0;
  char dir[PATH_MAX];
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  if (!slash) snprintf(dir, sizeof dir, ".");
  else if (slash == path) snprintf(dir, sizeof dir, "/");
  else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  char real[PATH_MAX];
  if (!realpath(dir, real) || strlen(real) + 1 + strlen(name) >= PATH_MAX) {
    snprintf(out, PATH_MAX, "%s", path); /* a missing folder: the write's own checks say so */
    return 0;
  }
  size_t r = strlen(real);
  if (strcmp(real, "/")) real[r++] = '/';
  memcpy(out, real, r);
  memcpy(out + r, name, strlen(name) + 1); /* fits: checked above */
  return 0;
}

static lam_status remember(const char *canon, const struct stat *st, int output, int folder, lam_file_kind kind,
                           const char *what) {
  if (g_n == g_cap) {
    size_t cap = g_cap ? 2 * g_cap : 32;
    run_file *f = realloc(g_files, cap * sizeof *f);
    if (!f) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory to remember the run's files (%zu)", cap);
    g_files = f, g_cap = cap;
  }
  char *c = strdup(canon);
  if (!c) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory to remember the run's files");
  run_file *f = &g_files[g_n++];
  *f = (run_file){.canon = c, .exists = st != NULL, .output = output, .folder = folder, .kind = kind};
  if (st) f->dev = st->st_dev, f->ino = st->st_ino;
  snprintf(f->what, sizeof f->what, "%s", what);
  return LAM_OK;
}

static int same(const run_file *f, const char *canon, const struct stat *st) {
  if (f->exists && st && f->dev == st->st_dev && f->ino == st->st_ino) return 1;
  return !strcmp(f->canon, canon);
}

/* Records an input of the run (its stat known), unless it is recorded already. */
static lam_status record_input(const char *path, const struct stat *st, int folder, lam_file_kind kind,
                               const char *what) {
  char canon[PATH_MAX];
  canonical(path, canon);
  lam_status s = LAM_OK;
  pthread_mutex_lock(&g_lock);
  int known = 0;
  for (size_t i = 0; g_open && i < g_n && !known && s == LAM_OK; i++) {
    const run_file *f = &g_files[i];
    if (folder && f->output) { /* an output claimed before its folder was known to be read */
      const char *slash = strrchr(f->canon, '/');
      if (slash && (size_t)(slash - f->canon) == strlen(canon) && !strncmp(f->canon, canon, strlen(canon)))
        s = LAM_FAIL(LAM_ERR_INVALID_ARG, "the %s '%s' would be in '%s', a folder this run reads its %s from: an "
                     "output there would be taken for an input next time; write it elsewhere", f->what, f->canon,
                     canon, what);
      continue;
    }
    if (f->folder != folder || !same(f, canon, st)) continue;
    if (!f->output) known = 1;
    else if (!(kind == LAM_FILE_CHECKPOINT && f->kind == LAM_FILE_CHECKPOINT)) /* claimed before it was read */
      s = LAM_FAIL(LAM_ERR_INVALID_ARG, "%s '%s' is also this run's %s: an output may not replace an input of the "
                   "same run; give the output another name", what, path, f->what);
  }
  if (s == LAM_OK && g_open && !known) s = remember(canon, st, 0, folder, kind, what);
  pthread_mutex_unlock(&g_lock);
  return s;
}

const char *lam_file_mode_name(unsigned m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

lam_status lam_input_open(const char *path, const char *what, lam_file_kind kind, int record, int *fd_out) {
  LAM_CHECK_ARG(path && what && fd_out, "lam_input_open: NULL argument");
  *fd_out = -1;
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return LAM_FAIL(LAM_ERR_IO, "cannot open %s '%s': %s; check the path", what, path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return LAM_FAIL(LAM_ERR_IO, "cannot read %s '%s': fstat failed: %s", what, path, strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return LAM_FAIL(LAM_ERR_IO, "%s '%s' is %s, not a regular file: lamina reads only regular files (a pipe or device may never end); "
                    "save the data to a file and give its path", what, path, lam_file_mode_name(st.st_mode));
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  if (record) {
    lam_status s = record_input(path, &st, 0, kind, what);
    if (s != LAM_OK) {
      close(fd);
      return s;
    }
  }
  *fd_out = fd;
  return LAM_OK;
}

lam_status lam_input_fopen(const char *path, const char *what, lam_file_kind kind, int record, FILE **f) {
  LAM_CHECK_ARG(f, "lam_input_fopen: f is NULL");
  *f = NULL;
  int fd;
  LAM_TRY(lam_input_open(path, what, kind, record, &fd));
  *f = fdopen(fd, "rb");
  if (!*f) {
    int err = errno;
    close(fd);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "cannot read %s '%s': fdopen failed: %s", what, path, strerror(err));
  }
  return LAM_OK;
}

lam_status lam_input_check(const char *path, const char *what) {
  int fd;
  LAM_TRY(lam_input_open(path, what ? what : "input", LAM_FILE_NONE, 1, &fd));
  close(fd);
  return LAM_OK;
}

lam_status lam_input_folder(const char *dir, const char *what) {
  LAM_CHECK_ARG(dir && what, "lam_input_folder: NULL argument");
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return LAM_OK; /* the reader says what is wrong with it */
  return record_input(dir, &st, 1, LAM_FILE_NONE, what);
}

lam_status lam_output_claim(const char *path, const char *what, lam_file_kind kind, int again) {
  LAM_CHECK_ARG(path && what, "lam_output_claim: NULL argument");
  LAM_TRY(lam_file_kind_check(path, what, kind));
  char canon[PATH_MAX], parent[PATH_MAX];
  canonical(path, canon);
  struct stat st, pst;
  const int exists = stat(canon, &st) == 0;
  snprintf(parent, sizeof parent, "%s", canon);
  char *slash = strrchr(parent, '/');
  if (slash) *(slash == parent ? slash + 1 : slash) = '\0';
  const int has_parent = slash && stat(parent, &pst) == 0;
  lam_status s = LAM_OK;
  pthread_mutex_lock(&g_lock);
  int mine = 0; /* claimed before, by this output */
  for (size_t i = 0; g_open && i < g_n && s == LAM_OK; i++) {
    const run_file *f = &g_files[i];
    if (f->folder) {
      if (has_parent && ((f->exists && f->dev == pst.st_dev && f->ino == pst.st_ino) || !strcmp(f->canon, parent)))
        s = LAM_FAIL(LAM_ERR_INVALID_ARG, "the %s path '%s' is in '%s', a folder this run reads its %s from: an output "
                     "there would be taken for an input next time; write it elsewhere", what, path, f->canon, f->what);
      continue;
    }
    if (!same(f, canon, exists ? &st : NULL)) continue;
    if (!f->output) {
      if (kind == LAM_FILE_CHECKPOINT && f->kind == LAM_FILE_CHECKPOINT) continue; /* a resumed run's own */
      s = LAM_FAIL(LAM_ERR_INVALID_ARG, "the %s path '%s' is this run's %s: an output may not replace an input of "
                   "the same run; give the output another name", what, path, f->what);
    } else if (again ? f->kind == kind : !strcmp(f->what, what)) {
      mine = 1;
    } else {
      s = LAM_FAIL(LAM_ERR_INVALID_ARG, "the %s path '%s' is also this run's %s: one would replace the other; give "
                   "each output its own file", what, path, f->what);
    }
  }
  if (s == LAM_OK && g_open && !mine) s = remember(canon, exists ? &st : NULL, 1, 0, kind, what);
  pthread_mutex_unlock(&g_lock);
  return s;
}

int lam_path_inside(const char *path, const char *dir) {
  char a[PATH_MAX], b[PATH_MAX];
  canonical(path, a);
  canonical(dir, b);
  size_t n = strlen(b);
  if (n == 1 && b[0] == '/') return 1;
  return !strncmp(a, b, n) && (a[n] == '/' || a[n] == '\0');
}
