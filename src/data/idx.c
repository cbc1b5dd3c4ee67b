/* idx.c — MNIST-format image sets: reads an IDX image file and an IDX label file (each plain or
 * gzip) into a lam_dataset in host memory, and finds a set's four files by name or folder.
 *
 * IDX is a big-endian header — a magic 0x000008DD (08: unsigned bytes, DD: how many dimensions),
 * then one uint32 per dimension — followed by the values, row-major. Images are 0x00000803
 * (n, rows, cols), labels 0x00000801 (n).
 *
 * Both plain and gzip files go through zlib's gzFile: gzopen looks at the first two bytes itself
 * (1f 8b is gzip, anything else is read as it is), so one code path reads both, and the payload
 * goes in one gzread straight into its final buffer (in 1 GiB pieces only because gzread takes an
 * unsigned int). Everything that can be checked before allocating is: magic, dimensions, and
 * whether a file of that length can hold that many bytes. A bad file never costs a huge malloc.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "lamina.h"
#include "../status.h"

#define IDX_MAGIC_IMAGES 0x00000803u
#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_MAX_N 100000000u /* 100 M images: far above any real set, low enough to catch garbage */
#define IDX_MAX_SIDE 4096u
/* Deflate expands at most 1032:1, so a .gz file of B bytes holds at most 1032*B bytes of data:
 * a header that claims more is corrupt, and we can say so without trying to allocate it. */
#define GZIP_MAX_RATIO 1032u
#define IDX_READ_PIECE ((size_t)1 << 30)  /* gzread's length is an unsigned int */
#define IDX_GZ_BUFFER (256u * 1024u)      /* zlib's default 8 KiB makes inflate ~2x slower */
#define MNIST_CLASSES 10

/* What one file of a set is: how messages call it, its magic, its dimensions' names. */
typedef struct idx_kind {
  const char *what; /* "image" or "label" */
  uint32_t magic;
  int ndims;
  const char *dim_names[3];
} idx_kind;

static const idx_kind IDX_IMAGES = {"image", IDX_MAGIC_IMAGES, 3, {"n", "rows", "cols"}};
static const idx_kind IDX_LABELS = {"label", IDX_MAGIC_LABELS, 1, {"n", NULL, NULL}};

/* One file read whole: its dimensions and its payload (malloc'd, owned by the caller). */
typedef struct idx_file {
  uint32_t dims[3];
  uint8_t *data;
  size_t bytes;
} idx_file;

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Reads up to `bytes` into dst. Returns 0 with *got < bytes only at the end of the data; -1 on a
 * read or decompression error (gzerror says which). */
static int read_full(gzFile gz, void *dst, size_t bytes, size_t *got) {
  unsigned char *p = dst;
  *got = 0;
  while (*got < bytes) {
    size_t want = bytes - *got < IDX_READ_PIECE ? bytes - *got : IDX_READ_PIECE;
    int r = gzread(gz, p + *got, (unsigned)want);
    if (r < 0) return -1;
    if (r == 0) break;
    *got += (size_t)r;
  }
  return 0;
}

/* zlib's reason for the last failure on gz, with errno's text where the failure was a read(2).
 * zlib puts the path in front ("path: invalid code lengths set"); our messages name it already. */
static const char *gz_reason(gzFile gz, const char *path) {
  int err = Z_OK;
  const char *msg = gzerror(gz, &err);
  if (err == Z_ERRNO) return strerror(errno);
  if (!msg || !*msg) return "unknown zlib error";
  size_t n = strlen(path);
  if (strncmp(msg, path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ') msg += n + 2;
  return msg;
}

/* True when the data ended because the gzip stream itself was cut off (not merely short). */
static int gz_cut_off(gzFile gz) {
  int err = Z_OK;
  (void)gzerror(gz, &err);
  return err == Z_BUF_ERROR;
}

/* A wrong magic number, explained: what the file most likely is and what to do about it. */
static void magic_hint(const unsigned char raw[4], const idx_kind *k, char *buf, size_t cap) {
  uint32_t got = be32(raw);
  uint32_t swapped = (uint32_t)raw[3] << 24 | (uint32_t)raw[2] << 16 | (uint32_t)raw[1] << 8 | raw[0];
  const idx_kind *other = k == &IDX_IMAGES ? &IDX_LABELS : &IDX_IMAGES;
  if (raw[0] == 0xfd && raw[1] == '7' && raw[2] == 'z' && raw[3] == 'X')
    snprintf(buf, cap, "this is an xz file: decompress it (unxz) or recompress it with gzip");
  else if (raw[0] == 'B' && raw[1] == 'Z' && raw[2] == 'h')
    snprintf(buf, cap, "this is a bzip2 file: decompress it (bunzip2) or recompress it with gzip");
  else if (raw[0] == 'P' && raw[1] == 'K' && raw[2] == 3 && raw[3] == 4)
    snprintf(buf, cap, "this is a zip archive: extract the IDX file from it");
  else if (got == other->magic)
    snprintf(buf, cap, "that is an IDX %s file: are the image and label paths swapped?", other->what);
  else if (swapped == k->magic)
    snprintf(buf, cap, "the header was written little-endian; IDX is big-endian");
  else if ((got >> 16) == 0 && ((got >> 8) & 0xff) != 0x08 && ((got >> 8) & 0xff) >= 0x09)
    snprintf(buf, cap, "an IDX file of type 0x%02x; lamina reads unsigned bytes (type 0x08)", (got >> 8) & 0xff);
  else if ((got >> 8) == 0x08)
    snprintf(buf, cap, "an IDX file of unsigned bytes with %u dimensions, where an %s file has %d", got & 0xff,
             k->what, k->ndims);
  else
    snprintf(buf, cap, "this is not an IDX file");
}

/* The header's shape in words, for messages: "10 images of 28x28" or "10 labels". */
static void shape_words(const idx_kind *k, const uint32_t *dims, char *buf, size_t cap) {
  if (k->ndims == 3)
    snprintf(buf, cap, "%u images of %ux%u", dims[0], dims[1], dims[2]);
  else
    snprintf(buf, cap, "%u labels", dims[0]);
}

/* Checks the dimensions the header gives: non-zero, and within what lamina takes. */
static lam_status check_dims(const char *path, const idx_kind *k, const uint32_t *dims) {
  for (int d = 0; d < k->ndims; d++) {
    uint32_t limit = d == 0 ? IDX_MAX_N : IDX_MAX_SIDE;
    if (dims[d] == 0)
      return LAM_FAIL(LAM_ERR_IO, "%s file '%s': dimension %s is 0 in the header; an IDX %s file needs every "
                      "dimension > 0 (the file is corrupt or holds an empty set)", k->what, path, k->dim_names[d], k->what);
    if (dims[d] > limit)
      return LAM_FAIL(LAM_ERR_IO, "%s file '%s': dimension %s is %u in the header, more than the %u lamina "
                      "accepts; the header is most likely corrupt", k->what, path, k->dim_names[d], dims[d], limit);
  }
  return LAM_OK;
}

/* Reads one IDX file of kind k whole, or fails with a message naming the file and the problem.
 * On failure nothing is left allocated and f->data is NULL. */
static lam_status idx_read(const char *path, const idx_kind *k, idx_file *f) {
  memset(f, 0, sizeof *f);
  struct stat st;
  if (stat(path, &st) != 0)
    return LAM_FAIL(LAM_ERR_IO, "cannot open %s file '%s': %s; check the path", k->what, path, strerror(errno));
  if (S_ISDIR(st.st_mode))
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s' is a folder, not a file; give the path of the IDX %s file in it",
                    k->what, path, k->what);

  gzFile gz = gzopen(path, "rb");
  if (!gz)
    return LAM_FAIL(LAM_ERR_IO, "cannot open %s file '%s': %s", k->what, path,
                    errno ? strerror(errno) : "out of memory for zlib's state");
  (void)gzbuffer(gz, IDX_GZ_BUFFER); /* before the first read, as zlib requires; failure only costs speed */

  lam_status s = LAM_OK;
  char hint[160], shape[96];
  unsigned char head[16];
  const size_t head_bytes = 4 + 4 * (size_t)k->ndims;
  size_t got = 0;
  if (read_full(gz, head, head_bytes, &got) != 0) {
    s = LAM_FAIL(LAM_ERR_IO, "%s file '%s': cannot read the header: %s; the file is damaged, fetch it again",
                 k->what, path, gz_reason(gz, path));
    goto done;
  }
  if (got >= 4 && be32(head) != k->magic) {
    magic_hint(head, k, hint, sizeof hint);
    s = LAM_FAIL(LAM_ERR_IO, "%s file '%s': magic number is 0x%08x, expected 0x%08x (IDX %s file); %s", k->what,
                 path, be32(head), k->magic, k->what, hint);
    goto done;
  }
  if (got < head_bytes) {
    s = LAM_FAIL(LAM_ERR_IO, "%s file '%s' is truncated: it ends after %zu bytes, inside the %zu-byte IDX header%s",
                 k->what, path, got, head_bytes,
                 got > 0 ? "" : gzdirect(gz) ? " (the file is empty)" : " (the gzip data is empty)");
    goto done;
  }
  for (int d = 0; d < k->ndims; d++) f->dims[d] = be32(head + 4 + 4 * d);
  s = check_dims(path, k, f->dims);
  if (s != LAM_OK) goto done;

  /* n*rows*cols <= 1e8 * 4096 * 4096 < 2^64: no overflow in 64 bits. */
  uint64_t want = 1;
  for (int d = 0; d < k->ndims; d++) want *= f->dims[d];
  shape_words(k, f->dims, shape, sizeof shape);
  const int gzip = !gzdirect(gz);
  if (S_ISREG(st.st_mode)) {
    const uint64_t file_bytes = (uint64_t)st.st_size;
    if (!gzip && file_bytes != head_bytes + want) {
      /* Plain: the length says it all, before anything is allocated. */
      if (file_bytes < head_bytes + want)
        s = LAM_FAIL(LAM_ERR_IO, "%s file '%s' is truncated: its header says %s, %llu bytes after the %zu-byte "
                     "header, but only %llu are there; fetch the file again", k->what, path, shape,
                     (unsigned long long)want, head_bytes, (unsigned long long)(file_bytes - head_bytes));
      else
        s = LAM_FAIL(LAM_ERR_IO, "%s file '%s' has %llu trailing bytes: its header says %s, %llu bytes after the "
                     "%zu-byte header, but %llu are there; the header or the file is wrong", k->what, path,
                     (unsigned long long)(file_bytes - head_bytes - want), shape, (unsigned long long)want,
                     head_bytes, (unsigned long long)(file_bytes - head_bytes));
      goto done;
    }
    if (gzip && (head_bytes + want) / GZIP_MAX_RATIO > file_bytes) {
      s = LAM_FAIL(LAM_ERR_IO, "%s file '%s': its header says %s (%llu bytes), more than a %llu-byte gzip file can "
                   "hold; the file is truncated or its header corrupt", k->what, path, shape,
                   (unsigned long long)want, (unsigned long long)file_bytes);
      goto done;
    }
  }
  if (want > SIZE_MAX) {
    s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s file '%s': %s do not fit in this machine's address space", k->what,
                 path, shape);
    goto done;
  }
  f->bytes = (size_t)want;
  f->data = malloc(f->bytes);
  if (!f->data) {
    s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s file '%s': no host memory for %s (%zu bytes)", k->what, path, shape,
                 f->bytes);
    goto done;
  }

  if (read_full(gz, f->data, f->bytes, &got) != 0) {
    s = LAM_FAIL(LAM_ERR_IO, "%s file '%s': read failed after the header: %s; the %s is damaged, fetch it again",
                 k->what, path, gz_reason(gz, path), gzip ? "gzip data" : "file");
    goto done;
  }
  if (got < f->bytes) {
    s = LAM_FAIL(LAM_ERR_IO, "%s file '%s' is truncated: its header says %s, %zu bytes after the %zu-byte header, "
                 "but only %zu are there%s; fetch the file again", k->what, path, shape, f->bytes, head_bytes, got,
                 gzip && gz_cut_off(gz) ? " (the gzip stream is cut off)" : gzip ? " (decompressed)" : "");
    goto done;
  }

  /* Anything after the payload means the header and the file disagree. Counting it costs nothing
   * on a good file (one read that returns 0) and makes the message exact on a bad one. */
  unsigned char tail[4096];
  size_t extra = 0;
  for (;;) {
    int r = gzread(gz, tail, sizeof tail);
    if (r < 0) {
      s = LAM_FAIL(LAM_ERR_IO, "%s file '%s': the %s is damaged after the data: %s; fetch the file again", k->what,
                   path, gzip ? "gzip stream" : "file", gz_reason(gz, path));
      goto done;
    }
    if (r == 0) break;
    extra += (size_t)r;
  }
  if (gzip && gz_cut_off(gz)) {
    /* All the data came out, but the stream's end (and its checksum) is missing. */
    s = LAM_FAIL(LAM_ERR_IO, "%s file '%s': the gzip stream is cut off after the data (no end-of-stream and "
                 "checksum); the file is truncated, fetch it again", k->what, path);
    goto done;
  }
  if (extra) {
    s = LAM_FAIL(LAM_ERR_IO, "%s file '%s' has %zu trailing byte%s%s: its header says %s, %zu bytes after the "
                 "%zu-byte header; the header or the file is wrong", k->what, path, extra, extra == 1 ? "" : "s",
                 gzip ? " (decompressed)" : "", shape, f->bytes, head_bytes);
    goto done;
  }

done:
  {
    int rc = gzclose_r(gz);
    if (rc != Z_OK && s == LAM_OK)
      s = LAM_FAIL(LAM_ERR_IO, "%s file '%s': zlib reported error %d on closing it; the file is damaged, fetch it "
                   "again", k->what, path, rc);
  }
  if (s != LAM_OK) {
    free(f->data);
    f->data = NULL;
    f->bytes = 0;
  }
  return s;
}

lam_status lam_dataset_load_idx(const char *images_path, const char *labels_path, int classes, lam_dataset **out) {
  LAM_CHECK_ARG(out, "lam_dataset_load_idx: out is NULL");
  *out = NULL;
  LAM_CHECK_ARG(images_path, "lam_dataset_load_idx: images_path is NULL");
  LAM_CHECK_ARG(labels_path, "lam_dataset_load_idx: labels_path is NULL");
  /* Labels are bytes, so 256 classes is the most a label file can name. */
  LAM_CHECK_ARG(classes >= 1 && classes <= 256,
                "lam_dataset_load_idx: classes is %d; it must be 1..256 (labels are bytes), 10 for MNIST", classes);

  idx_file im, lb;
  LAM_TRY(idx_read(images_path, &IDX_IMAGES, &im));
  lam_status s = idx_read(labels_path, &IDX_LABELS, &lb);
  if (s != LAM_OK) {
    free(im.data);
    return s;
  }
  if (im.dims[0] != lb.dims[0]) {
    s = LAM_FAIL(LAM_ERR_IO, "image file '%s' has %u images but label file '%s' has %u labels; the two must be "
                 "the same set (train-* with train-*, t10k-* with t10k-*)", images_path, im.dims[0], labels_path,
                 lb.dims[0]);
    goto fail;
  }
  for (size_t i = 0; i < lb.bytes; i++) {
    if (lb.data[i] >= classes) {
      s = LAM_FAIL(LAM_ERR_IO, "label file '%s': the label at index %zu is %u, but with %d classes labels must be "
                   "0..%d; wrong file, or pass the set's number of classes", labels_path, i, lb.data[i], classes,
                   classes - 1);
      goto fail;
    }
  }
  lam_dataset *d = malloc(sizeof *d);
  if (!d) {
    s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_dataset_load_idx: no host memory for the dataset struct");
    goto fail;
  }
  d->n = im.dims[0];
  d->h = (int)im.dims[1];
  d->w = (int)im.dims[2];
  d->classes = classes;
  d->images = im.data;
  d->labels = lb.data;
  *out = d;
  return LAM_OK;

fail:
  free(im.data);
  free(lb.data);
  return s;
}

void lam_dataset_free(lam_dataset *d) {
  if (!d) return;
  free(d->images);
  free(d->labels);
  free(d);
}

/* ---- finding a set's files ------------------------------------------------------------------- */

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && !S_ISDIR(st.st_mode);
}

/* Why path is not a folder, for messages: strerror of stat, or "it is a file". */
static const char *errno_or_file(const char *path) {
  struct stat st;
  return stat(path, &st) != 0 ? strerror(errno) : "it is a file";
}

/* Where Debian's dataset-fashion-mnist puts the set, and how to get it: said wherever it is missing. */
#define FASHION_SYSTEM_DIR "/usr/share/datasets/fashion-mnist"
#define FASHION_HOW_TO_GET "install Debian's package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) " \
                           "or set LAMINA_DATA_DIR to a folder that holds fashion-mnist/"
#define MNIST_LAYOUT "a folder in the MNIST layout (train-images-idx3-ubyte, train-labels-idx1-ubyte, " \
                     "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each plain or .gz)"

/* Finds dir/base, else dir/base.gz, into path; fails naming the folder and both names. */
static lam_status find_file(const char *set, const char *dir, const char *base, int fashion, char *path,
                            size_t cap) {
  if ((size_t)snprintf(path, cap, "%s/%s", dir, base) < cap && is_file(path)) return LAM_OK;
  if ((size_t)snprintf(path, cap, "%s/%s.gz", dir, base) < cap && is_file(path)) return LAM_OK;
  path[0] = '\0';
  return LAM_FAIL(LAM_ERR_IO, "%s: folder '%s' has neither %s nor %s.gz; %s", set, dir, base, base,
                  fashion ? FASHION_HOW_TO_GET : "lam_dataset_load wants " MNIST_LAYOUT);
}

lam_status lam_dataset_load(const char *name_or_dir, int train, lam_dataset **out) {
  LAM_CHECK_ARG(out, "lam_dataset_load: out is NULL");
  *out = NULL;
  LAM_CHECK_ARG(name_or_dir, "lam_dataset_load: name_or_dir is NULL; give \"fashion-mnist\" or a folder");
  LAM_CHECK_ARG(*name_or_dir, "lam_dataset_load: name_or_dir is empty; give \"fashion-mnist\" or a folder");

  char dir[PATH_MAX];
  const int fashion = strcmp(name_or_dir, "fashion-mnist") == 0;
  if (fashion) {
    const char *root = getenv("LAMINA_DATA_DIR");
    if (root && *root) {
      if ((size_t)snprintf(dir, sizeof dir, "%s/fashion-mnist", root) >= sizeof dir)
        return LAM_FAIL(LAM_ERR_INVALID_ARG, "LAMINA_DATA_DIR is longer than a path can be (%zu bytes)", sizeof dir);
    } else {
      snprintf(dir, sizeof dir, "%s", FASHION_SYSTEM_DIR);
    }
  } else {
    if (strlen(name_or_dir) >= sizeof dir)
      return LAM_FAIL(LAM_ERR_INVALID_ARG, "lam_dataset_load: the folder name is longer than a path can be");
    snprintf(dir, sizeof dir, "%s", name_or_dir);
  }

  const char *part = train ? "train" : "t10k";
  char set[64];
  snprintf(set, sizeof set, "%s %s set", fashion ? "fashion-mnist" : "MNIST-layout", train ? "training" : "test");
  if (!is_dir(dir)) {
    if (fashion)
      return LAM_FAIL(LAM_ERR_IO, "%s: no folder '%s' (looked for %s-images-idx3-ubyte[.gz] and "
                      "%s-labels-idx1-ubyte[.gz] in it); %s", set, dir, part, part, FASHION_HOW_TO_GET);
    return LAM_FAIL(LAM_ERR_IO, "lam_dataset_load: '%s' is neither \"fashion-mnist\" nor a folder (%s), so there is "
                    "no %s-images-idx3-ubyte[.gz] to read; give \"fashion-mnist\" or %s", dir,
                    errno_or_file(dir), part, MNIST_LAYOUT);
  }

  char base[64], images[PATH_MAX], labels[PATH_MAX];
  snprintf(base, sizeof base, "%s-images-idx3-ubyte", part);
  LAM_TRY(find_file(set, dir, base, fashion, images, sizeof images));
  snprintf(base, sizeof base, "%s-labels-idx1-ubyte", part);
  LAM_TRY(find_file(set, dir, base, fashion, labels, sizeof labels));
  return lam_dataset_load_idx(images, labels, MNIST_CLASSES, out);
}
