/* dataset.c - image sets in host memory: an image file and a label file (IDX or .npy, each plain or
 * gzip, told apart by content) made into a lam_dataset, checked against each other; a set's files found
 * by name or folder; its number of classes; and per-channel statistics for normalization.
 *
 * Images are kept (n, c, h, w) uint8. A channels-last source (IDX 0x00000804, or a .npy of shape
 * (n, h, w, c) with c <= 4) is transposed here, once, one image at a time in place, so the peak memory
 * is the set plus one image.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"
#include "../internal.h"
#include "../nn/rng.h"
#include "../status.h"

#define MNIST_CLASSES 10
#define LABEL_IGNORE 255 /* in per-pixel labels: a pixel that counts for nothing */

/* ---- reading the two files ------------------------------------------------------------------- */

/* Reads one file whole as role, whichever format it is. */
static lam_status read_array(const char *path, data_role role, data_array *a) {
  memset(a, 0, sizeof *a);
  data_src s;
  LAM_TRY(data_open(path, role, &s));
  lam_status st = npy_magic(s.peek, s.peek_len) ? npy_read(&s, a) : idx_read(&s, a);
  st = data_close(&s, st);
  if (st != LAM_OK) {
    free(a->data);
    a->data = NULL;
  }
  return st;
}

/* The images' geometry from their array: (n, h, w), (n, h, w, c), (n, c, h, w) or clips (n, t, h, w, c). */
static void image_geometry(const data_array *im, int *t, int *c, int *h, int *w) {
  *t = 1;
  if (im->rank == 5) {
    *t = (int)im->dims[1], *h = (int)im->dims[2], *w = (int)im->dims[3], *c = (int)im->dims[4];
  } else if (im->rank == 3) {
    *c = 1, *h = (int)im->dims[1], *w = (int)im->dims[2];
  } else if (im->channels_last) {
    *h = (int)im->dims[1], *w = (int)im->dims[2], *c = (int)im->dims[3];
  } else {
    *c = (int)im->dims[1], *h = (int)im->dims[2], *w = (int)im->dims[3];
  }
}

/* The largest label (255 in per-pixel labels aside) into *max, -1 when every one is ignored. A
 * per-image 255 is refused: it is a class only when the caller says there are 256. */
static lam_status labels_max(const data_array *lb, const char *path, int *max) {
  const int per_pixel = lb->rank == 3;
  int m = -1;
  for (size_t i = 0; i < lb->count; i++) {
    const int v = lb->data[i];
    if (v == LABEL_IGNORE) {
      if (per_pixel) continue;
      return LAM_FAIL(LAM_ERR_IO, "label file '%s': the label at index %zu is 255; with one label per image 255 is "
                      "a class, not 'ignore' (that is for per-pixel labels), and lamina takes it for one only when "
                      "told (lam_dataset_load_idx with classes = 256), which training does not take: it takes at "
                      "most 255 classes, 255 meaning 'ignore' to the loss. Relabel the set to 0..254",
                      path, i);
    }
    if (v > m) m = v;
  }
  *max = m;
  return LAM_OK;
}

/* Checks every label against classes (255 in per-pixel labels aside). */
static lam_status labels_check(const data_array *lb, const char *path, int classes) {
  const int per_pixel = lb->rank == 3;
  for (size_t i = 0; i < lb->count; i++) {
    const int v = lb->data[i];
    if (v < classes || (per_pixel && v == LABEL_IGNORE)) continue;
    char where[80];
    data_where(per_pixel ? lb->dims[1] : 0, lb->dims[2], i, where, sizeof where);
    return LAM_FAIL(LAM_ERR_IO, "label file '%s': the label at index %zu%s is %u, but with %d classes labels must be "
                    "0..%d%s; wrong file, or pass the set's number of classes", path, i, where, v, classes,
                    classes - 1, per_pixel ? " (or 255: ignore)" : "");
  }
  return LAM_OK;
}

/* (n, h, w, c) -> (n, c, h, w) in place, through one image of scratch. */
static lam_status to_nchw(uint8_t *images, size_t n, int c, int h, int w, const char *path) {
  const size_t hw = (size_t)h * (size_t)w, chw = hw * (size_t)c;
  uint8_t *tmp = malloc(chw);
  if (!tmp)
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image file '%s': no host memory for one image (%zu bytes) to transpose "
                    "channels-last to channels-first", path, chw);
  for (size_t i = 0; i < n; i++) {
    uint8_t *img = images + i * chw;
    memcpy(tmp, img, chw);
    for (size_t p = 0; p < hw; p++)
      for (int ch = 0; ch < c; ch++) img[(size_t)ch * hw + p] = tmp[p * (size_t)c + (size_t)ch];
  }
  free(tmp);
  return LAM_OK;
}

lam_status lam_dataset_load_idx(const char *images_path, const char *labels_path, int classes, lam_dataset **out) {
  LAM_CHECK_ARG(out, "lam_dataset_load_idx: out is NULL");
  *out = NULL;
  LAM_CHECK_ARG(images_path, "lam_dataset_load_idx: images_path is NULL");
  LAM_CHECK_ARG(labels_path, "lam_dataset_load_idx: labels_path is NULL");
  /* Labels are bytes, so 256 classes is the most a label file can name. */
  LAM_CHECK_ARG(classes >= 0 && classes <= 256,
                "lam_dataset_load_idx: classes is %d; it must be 1..256 (labels are bytes), 10 for MNIST, or 0 to "
                "take it from the labels", classes);

  data_array im, lb;
  LAM_TRY(read_array(images_path, DATA_IMAGES, &im));
  lam_status s = read_array(labels_path, DATA_LABELS, &lb);
  if (s != LAM_OK) {
    free(im.data);
    return s;
  }
  const int per_pixel = lb.rank == 3;
  int t, c, h, w;
  image_geometry(&im, &t, &c, &h, &w);
  if (im.dims[0] != lb.dims[0]) {
    s = LAM_FAIL(LAM_ERR_IO, "image file '%s' has %llu images but label file '%s' has %llu %s; the two must be "
                 "the same set (train-* with train-*, t10k-* with t10k-*)", images_path,
                 (unsigned long long)im.dims[0], labels_path, (unsigned long long)lb.dims[0],
                 per_pixel ? "label maps" : "labels");
    goto fail;
  }
  if (per_pixel && im.rank == 5) {
    s = LAM_FAIL(LAM_ERR_IO, "label file '%s' holds a label per pixel, but '%s' holds clips (%s); clips take one "
                 "label per clip: labels of shape (n,) (IDX magic 0x00000801)", labels_path, images_path, im.words);
    goto fail;
  }
  if (per_pixel && (lb.dims[1] != (uint64_t)h || lb.dims[2] != (uint64_t)w)) {
    if (lb.npy)
      s = LAM_FAIL(LAM_ERR_IO, "label file '%s' holds per-pixel labels of %llux%llu (shape (n, h, w)), but the images "
                   "in '%s' are %dx%d; expected labels of shape (%llu,) - a class per image - or (%llu, %d, %d) - a "
                   "class per pixel", labels_path, (unsigned long long)lb.dims[1], (unsigned long long)lb.dims[2],
                   images_path, h, w, (unsigned long long)lb.dims[0], (unsigned long long)lb.dims[0], h, w);
    else
      s = LAM_FAIL(LAM_ERR_IO, "label file '%s': magic 0x00000803 makes it per-pixel labels, of %llux%llu, but the "
                   "images in '%s' are %dx%d; expected 0x00000801 (n: a class per image) or 0x00000803 of %llu x %d "
                   "x %d (a class per pixel). Is it an image file given as labels?", labels_path,
                   (unsigned long long)lb.dims[1], (unsigned long long)lb.dims[2], images_path, h, w,
                   (unsigned long long)lb.dims[0], h, w);
    goto fail;
  }
  if (per_pixel && classes == 256) {
    s = LAM_FAIL(LAM_ERR_INVALID_ARG, "lam_dataset_load_idx: classes is 256, but label file '%s' holds per-pixel "
                 "labels, where 255 means 'ignore': per-pixel sets take at most 255 classes", labels_path);
    goto fail;
  }
  if (classes > 0) {
    s = labels_check(&lb, labels_path, classes);
  } else {
    int max = -1;
    s = labels_max(&lb, labels_path, &max);
    if (s == LAM_OK && max < 0)
      s = LAM_FAIL(LAM_ERR_IO, "label file '%s': every label is 255 ('ignore'), so the number of classes cannot be "
                   "taken from it; pass the number of classes", labels_path);
    classes = max + 1;
  }
  if (s != LAM_OK) goto fail;
  if (im.channels_last && c > 1) {
    s = to_nchw(im.data, im.dims[0] * (size_t)t, c, h, w, images_path); /* a clip: frame by frame */
    if (s != LAM_OK) goto fail;
  }

  lam_dataset *d = malloc(sizeof *d);
  if (!d) {
    s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_dataset_load_idx: no host memory for the dataset struct");
    goto fail;
  }
  *d = (lam_dataset){.n = (size_t)im.dims[0], .h = h, .w = w, .classes = classes, .images = im.data,
                     .labels = lb.data, .c = c, .label_h = per_pixel ? h : 1, .label_w = per_pixel ? w : 1, .t = t};
  *out = d;
  return LAM_OK;

fail:
  free(im.data);
  free(lb.data);
  return s;
}

size_t lam_dataset_sample_bytes(const lam_dataset *d) {
  return (size_t)(d->t > 0 ? d->t : 1) * (size_t)(d->c > 0 ? d->c : 1) * (size_t)d->h * (size_t)d->w;
}

void lam_dataset_free(lam_dataset *d) {
  if (!d) return;
  free(d->images);
  free(d->labels);
  free(d->class_names);
  lam_source_free(d->source);
  free(d);
}

char **lam_names_copy(const char *const *names, size_t n) {
  if (!names || !n) return NULL;
  size_t bytes = (n + 1) * sizeof(char *);
  for (size_t i = 0; i < n; i++) bytes += strlen(names[i]) + 1;
  char **v = malloc(bytes);
  if (!v) return NULL;
  char *p = (char *)(v + n + 1);
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(names[i]) + 1;
    memcpy(p, names[i], len);
    v[i] = p, p += len;
  }
  v[n] = NULL;
  return v;
}

size_t lam_names_count(const char *const *names) {
  size_t n = 0;
  while (names && names[n]) n++;
  return n;
}

const char *lam_dataset_class_name(const lam_dataset *d, int k) {
  if (!d || k < 0 || (size_t)k >= lam_names_count((const char *const *)d->class_names)) return NULL;
  return d->class_names[k];
}

/* ---- classes and statistics ------------------------------------------------------------------ */

lam_status lam_dataset_set_classes(lam_dataset *d, int k) {
  LAM_CHECK_ARG(d, "lam_dataset_set_classes: d is NULL");
  const size_t lh = d->label_h > 0 ? (size_t)d->label_h : 1, lw = d->label_w > 0 ? (size_t)d->label_w : 1;
  const int per_pixel = lh * lw > 1;
  const int most = per_pixel ? 255 : 256;
  LAM_CHECK_ARG(k >= 1 && k <= most, "lam_dataset_set_classes: k is %d; it must be 1..%d%s", k, most,
                per_pixel ? " (per-pixel labels: 255 means 'ignore')" : " (labels are bytes)");
  if (d->source) { /* a streamed set's labels are in its files: its classes were counted when it was read */
    LAM_CHECK_ARG(k >= d->classes, "lam_dataset_set_classes: the set's labels go up to %d, so it has at least %d "
                  "classes; k = %d is too few", d->classes - 1, d->classes, k);
    d->classes = k;
    return LAM_OK;
  }
  const size_t count = d->n * lh * lw;
  LAM_CHECK_ARG(d->labels || count == 0, "lam_dataset_set_classes: the set has %zu images but no labels", d->n);
  for (size_t i = 0; i < count; i++) {
    const int v = d->labels[i];
    if (v < k || (per_pixel && v == LABEL_IGNORE)) continue;
    char where[80];
    data_where(per_pixel ? lh : 0, lw, i, where, sizeof where);
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "lam_dataset_set_classes: the label at index %zu%s is %d, so the set has at "
                    "least %d classes; k = %d is too few", i, where, v, v + 1, k);
  }
  d->classes = k;
  return LAM_OK;
}

/* A new set of d's images where pick[i] == want, in d's order. */
static lam_status subset(const lam_dataset *d, const uint8_t *pick, uint8_t want, size_t n, lam_dataset **out) {
  const size_t sample = lam_dataset_sample_bytes(d);
  const size_t lsize = (size_t)(d->label_h > 0 ? d->label_h : 1) * (d->label_w > 0 ? d->label_w : 1);
  lam_dataset *s = calloc(1, sizeof *s);
  const size_t nnames = lam_names_count((const char *const *)d->class_names);
  if (s && d->source) { /* a streamed set: a view of its source */
    *s = *d, s->n = n, s->class_names = lam_names_copy((const char *const *)d->class_names, nnames);
    s->source = NULL;
    lam_status st = LAM_OK;
    if (nnames && !s->class_names) st = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_dataset_split: no host memory");
    else st = lam_source_subset(d->source, pick, want, n, &s->source);
    if (st != LAM_OK) {
      free(s->class_names), free(s);
      return st;
    }
    *out = s;
    return LAM_OK;
  }
  if (s) *s = *d, s->n = n, s->images = malloc(n * sample), s->labels = malloc(n * lsize),
         s->class_names = lam_names_copy((const char *const *)d->class_names, nnames); /* each part its own */
  if (!s || !s->images || !s->labels || (nnames && !s->class_names)) {
    if (s) free(s->images), free(s->labels), free(s->class_names);
    free(s);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_dataset_split: no host memory for %zu images of %zu bytes", n, sample);
  }
  for (size_t i = 0, j = 0; i < d->n; i++) {
    if (pick[i] != want) continue;
    memcpy(s->images + j * sample, d->images + i * sample, sample);
    memcpy(s->labels + j * lsize, d->labels + i * lsize, lsize);
    j++;
  }
  *out = s;
  return LAM_OK;
}

lam_status lam_dataset_split(const lam_dataset *d, double fraction, uint64_t seed, lam_dataset **train,
                             lam_dataset **val) {
  LAM_CHECK_ARG(d && train && val, "lam_dataset_split: NULL argument");
  *train = *val = NULL;
  LAM_CHECK_ARG(fraction > 0 && fraction < 1, "lam_dataset_split: the validation fraction %g is not between 0 and 1",
                fraction);
  LAM_CHECK_ARG(d->n >= 2 && ((d->images && d->labels) || d->source),
                "lam_dataset_split: a set of %zu images cannot be split into training and validation parts", d->n);
  size_t nv = (size_t)llround(fraction * (double)d->n);
  if (nv < 1) nv = 1;
  if (nv > d->n - 1) nv = d->n - 1;
  uint8_t *pick = calloc(d->n, 1);
  size_t *idx = malloc(d->n * sizeof *idx);
  if (!pick || !idx) {
    free(pick), free(idx);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_dataset_split: no host memory for %zu indices", d->n);
  }
  /* the first nv places of a Fisher-Yates shuffle by the trainer's generator */
  lam_rng r;
  lam_rng_seed(&r, seed);
  for (size_t i = 0; i < d->n; i++) idx[i] = i;
  for (size_t i = 0; i < nv; i++) {
    size_t j = i + (size_t)lam_rng_below(&r, d->n - i);
    size_t tmp = idx[i];
    idx[i] = idx[j], idx[j] = tmp;
    pick[idx[i]] = 1;
  }
  free(idx);
  lam_status s = subset(d, pick, 0, d->n - nv, train);
  if (s == LAM_OK) s = subset(d, pick, 1, nv, val);
  free(pick);
  if (s != LAM_OK) {
    lam_dataset_free(*train);
    *train = NULL;
  }
  return s;
}

/* Adds the pixels of `count` frames of c channels of hw pixels (images, frame-major) to hist (c x 256), on all host
 * threads; 0, or -1 where a thread's histogram could not be had. */
static int histogram(const uint8_t *images, size_t count, int c, size_t hw, uint64_t *hist) {
  int oom = 0;
#pragma omp parallel
  {
    uint64_t *local = calloc((size_t)c * 256, sizeof *local);
    if (!local) {
#pragma omp atomic write
      oom = 1;
    }
#pragma omp for schedule(static)
    for (long long i = 0; i < (long long)count; i++) {
      if (!local) continue;
      for (int ch = 0; ch < c; ch++) {
        const uint8_t *p = images + ((size_t)i * (size_t)c + (size_t)ch) * hw;
        uint64_t *hc = local + (size_t)ch * 256;
        for (size_t k = 0; k < hw; k++) hc[p[k]]++;
      }
    }
    if (local) {
#pragma omp critical(lam_channel_stats)
      for (size_t k = 0; k < (size_t)c * 256; k++) hist[k] += local[k];
      free(local);
    }
  }
  return oom ? -1 : 0;
}

#define STATS_ROWS 256 /* a streamed set's samples decoded at a time for its statistics */
#define STATS_OOM "lam_dataset_channel_stats: no host memory for per-thread histograms"

lam_status lam_dataset_channel_stats(const lam_dataset *d, float *mean, float *std) {
  LAM_CHECK_ARG(d, "lam_dataset_channel_stats: d is NULL");
  LAM_CHECK_ARG(mean && std, "lam_dataset_channel_stats: mean or std is NULL");
  const int c = d->c > 0 ? d->c : 1;
  LAM_CHECK_ARG(d->n > 0 && d->h > 0 && d->w > 0 && (d->images || d->source),
                "lam_dataset_channel_stats: the set is empty (n=%zu, h=%d, w=%d, images %s)", d->n, d->h, d->w,
                d->images ? "set" : "NULL");
  const size_t hw = (size_t)d->h * (size_t)d->w, frames = d->t > 0 ? (size_t)d->t : 1;
  /* Pixels are bytes: a histogram per channel is exact, and mean and variance come from it in two
   * passes without the cancellation of sum-of-squares. */
  uint64_t *hist = calloc((size_t)c * 256, sizeof *hist);
  if (!hist) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_dataset_channel_stats: no host memory for %d histograms", c);
  lam_status s = LAM_OK;
  if (d->images) {
    if (histogram(d->images, d->n * frames, c, hw, hist)) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s", STATS_OOM);
  } else { /* a streamed set: decoded a few hundred samples at a time, in bounded memory */
    const size_t sample = lam_dataset_sample_bytes(d);
    uint8_t *buf = malloc(STATS_ROWS * sample);
    int32_t idx[STATS_ROWS];
    if (!buf) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_dataset_channel_stats: no host memory for %d samples", STATS_ROWS);
    for (size_t at = 0; at < d->n && s == LAM_OK; at += STATS_ROWS) {
      const size_t m = d->n - at < STATS_ROWS ? d->n - at : STATS_ROWS;
      for (size_t r = 0; r < m; r++) idx[r] = (int32_t)(at + r);
      s = lam_dataset_rows(d, idx, m, buf, NULL);
      if (s == LAM_OK && histogram(buf, m * frames, c, hw, hist)) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s", STATS_OOM);
    }
    free(buf);
  }
  if (s != LAM_OK) {
    free(hist);
    return s;
  }
  const double count = (double)d->n * (double)frames * (double)hw;
  for (int ch = 0; ch < c; ch++) {
    const uint64_t *hc = hist + (size_t)ch * 256;
    double sum = 0.0;
    for (int v = 0; v < 256; v++) sum += (double)hc[v] * (v / 255.0);
    const double m = sum / count;
    double var = 0.0;
    for (int v = 0; v < 256; v++) var += (double)hc[v] * (v / 255.0 - m) * (v / 255.0 - m);
    mean[ch] = (float)m;
    std[ch] = (float)sqrt(var / count);
  }
  free(hist);
  return LAM_OK;
}

/* ---- finding a set's files ------------------------------------------------------------------- */

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
#define MNIST_LAYOUT "a folder in the MNIST layout: train-images*, train-labels*, t10k-images* (or test-images*), " \
                     "t10k-labels* (or test-labels*), each IDX (plain or .gz) or NumPy .npy[.gz] - e.g. " \
                     "train-images-idx3-ubyte.gz"

/* Finds dir/base, else dir/base.gz, into path; fails naming the folder and both names. */
static lam_status find_file(const char *set, const char *dir, const char *base, char *path, size_t cap) {
  if ((size_t)snprintf(path, cap, "%s/%s", dir, base) < cap && is_file(path)) return LAM_OK;
  if ((size_t)snprintf(path, cap, "%s/%s.gz", dir, base) < cap && is_file(path)) return LAM_OK;
  path[0] = '\0';
  return LAM_FAIL(LAM_ERR_IO, "%s: folder '%s' has neither %s nor %s.gz; %s", set, dir, base, base,
                  FASHION_HOW_TO_GET);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Files that sit next to data but are never data: checksums and editors' backups. */
static int never_data(const char *name) {
  static const char *const skip[] = {".md5", ".sha1", ".sha256", ".sha512", "~"};
  for (size_t i = 0; i < sizeof skip / sizeof *skip; i++)
    if (ends_with(name, skip[i])) return 1;
  return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* One role of a part: "training images" is train-images*; "test labels" t10k-labels* or test-labels*. */
typedef struct role_files {
  const char *role;        /* "training images" */
  const char *prefixes[2]; /* names that start with one of these */
  const char *classic;     /* the MNIST name, for messages: "train-images-idx3-ubyte" */
} role_files;

#define FIND_MAX 16 /* candidates listed; more are counted */

/* Finds the one file of a role in dir, into path. Absent: an error when need, else LAM_OK with path "".
 * Two or more: an error that lists them. A file and its .gz twin count as one: the plain one. */
static lam_status find_role(const char *set, const char *dir, const role_files *r, int need, char *path, size_t cap) {
  path[0] = '\0';
  DIR *dh = opendir(dir);
  if (!dh) return LAM_FAIL(LAM_ERR_IO, "%s: cannot list folder '%s': %s", set, dir, strerror(errno));
  char *names[FIND_MAX];
  int found = 0, total = 0;
  lam_status s = LAM_OK;
  for (struct dirent *e; (e = readdir(dh)) != NULL;) {
    const char *name = e->d_name;
    int match = 0;
    for (int p = 0; p < 2 && r->prefixes[p]; p++) match |= strncmp(name, r->prefixes[p], strlen(r->prefixes[p])) == 0;
    if (!match || never_data(name)) continue;
    char full[PATH_MAX];
    if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, name) >= sizeof full || !is_file(full)) continue;
    total++;
    if (found < FIND_MAX) {
      names[found] = strdup(name);
      if (!names[found]) {
        s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s: no host memory to list folder '%s'", set, dir);
        break;
      }
      found++;
    }
  }
  closedir(dh);
  if (s != LAM_OK) goto done;
  qsort(names, (size_t)found, sizeof *names, cmp_names);
  /* Drop X.gz where X is there too. */
  int kept = 0;
  for (int i = 0; i < found; i++) {
    int twin = 0;
    size_t len = strlen(names[i]);
    if (ends_with(names[i], ".gz"))
      for (int j = 0; j < found && !twin; j++)
        twin = j != i && strlen(names[j]) == len - 3 && strncmp(names[j], names[i], len - 3) == 0;
    if (twin) {
      free(names[i]);
      total--;
    } else {
      names[kept++] = names[i];
    }
  }
  found = kept;
  const char *other = r->prefixes[1] ? " or " : "";
  const char *second = r->prefixes[1] ? r->prefixes[1] : "";
  if (total == 0) {
    if (need)
      s = LAM_FAIL(LAM_ERR_IO, "%s: folder '%s' has neither %s nor %s.gz, nor any other %s*%s%s%s file for the %s; "
                   "lam_dataset_load wants %s", set, dir, r->classic, r->classic, r->prefixes[0], other, second,
                   r->prefixes[1] ? "*" : "", r->role, MNIST_LAYOUT);
  } else if (total > 1) {
    char list[1024];
    size_t n = 0;
    for (int i = 0; i < found && n < sizeof list; i++)
      n += (size_t)snprintf(list + n, sizeof list - n, "%s'%s'", i ? ", " : "", names[i]);
    if (total > found && n < sizeof list) snprintf(list + n, sizeof list - n, " and %d more", total - found);
    s = LAM_FAIL(LAM_ERR_IO, "%s: folder '%s' has %d files for the %s (%s*%s%s%s): %s; keep one of them (move the "
                 "others out of the folder)", set, dir, total, r->role, r->prefixes[0], other, second,
                 r->prefixes[1] ? "*" : "", list);
  } else if ((size_t)snprintf(path, cap, "%s/%s", dir, names[0]) >= cap) {
    path[0] = '\0';
    s = LAM_FAIL(LAM_ERR_INVALID_ARG, "%s: the path '%s/%s' is longer than a path can be", set, dir, names[0]);
  }
done:
  for (int i = 0; i < found; i++) free(names[i]);
  return s;
}

static const role_files ROLE_TRAIN_IMAGES = {"training images", {"train-images", NULL}, "train-images-idx3-ubyte"};
static const role_files ROLE_TRAIN_LABELS = {"training labels", {"train-labels", NULL}, "train-labels-idx1-ubyte"};
static const role_files ROLE_TEST_IMAGES = {"test images", {"t10k-images", "test-images"}, "t10k-images-idx3-ubyte"};
static const role_files ROLE_TEST_LABELS = {"test labels", {"t10k-labels", "test-labels"}, "t10k-labels-idx1-ubyte"};

/* A set in a folder: this part's two files; classes from both parts' labels, so that they agree. */
static lam_status load_folder(const char *set, const char *dir, int train, lam_dataset **out) {
  char images[PATH_MAX], labels[PATH_MAX], other[PATH_MAX];
  LAM_TRY(find_role(set, dir, train ? &ROLE_TRAIN_IMAGES : &ROLE_TEST_IMAGES, 1, images, sizeof images));
  LAM_TRY(find_role(set, dir, train ? &ROLE_TRAIN_LABELS : &ROLE_TEST_LABELS, 1, labels, sizeof labels));
  LAM_TRY(find_role(set, dir, train ? &ROLE_TEST_LABELS : &ROLE_TRAIN_LABELS, 0, other, sizeof other));
  lam_dataset *d = NULL;
  LAM_TRY(lam_dataset_load_idx(images, labels, 0, &d));
  if (other[0]) {
    data_array lb;
    lam_status s = read_array(other, DATA_LABELS, &lb);
    int max = -1;
    if (s == LAM_OK) s = labels_max(&lb, other, &max);
    free(lb.data);
    if (s == LAM_OK && max + 1 > d->classes) s = lam_dataset_set_classes(d, max + 1);
    if (s != LAM_OK) {
      lam_dataset_free(d);
      return s;
    }
  }
  *out = d;
  return LAM_OK;
}

lam_status lam_dataset_load(const char *name_or_dir, int train, lam_dataset **out) {
  return lam_dataset_load_opts(name_or_dir, train, NULL, out);
}

lam_status lam_dataset_load_opts(const char *name_or_dir, int train, lam_image_opts *opts, lam_dataset **out) {
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
  if (!data_is_dir(dir)) {
    if (fashion)
      return LAM_FAIL(LAM_ERR_IO, "%s: no folder '%s' (looked for %s-images-idx3-ubyte[.gz] and "
                      "%s-labels-idx1-ubyte[.gz] in it); %s", set, dir, part, part, FASHION_HOW_TO_GET);
    return LAM_FAIL(LAM_ERR_IO, "lam_dataset_load: '%s' is neither \"fashion-mnist\" nor a folder (%s), so there is "
                    "no %s-images* file (such as %s-images-idx3-ubyte[.gz]) to read; give \"fashion-mnist\" or %s",
                    dir, errno_or_file(dir), part, part, MNIST_LAYOUT);
  }
  if (!fashion) return lam_dataset_is_image_folder(dir) ? lam_dataset_load_images(dir, train, opts, out)
                                                         : load_folder(set, dir, train, out);

  char base[64], images[PATH_MAX], labels[PATH_MAX];
  snprintf(base, sizeof base, "%s-images-idx3-ubyte", part);
  LAM_TRY(find_file(set, dir, base, images, sizeof images));
  snprintf(base, sizeof base, "%s-labels-idx1-ubyte", part);
  LAM_TRY(find_file(set, dir, base, labels, sizeof labels));
  return lam_dataset_load_idx(images, labels, MNIST_CLASSES, out);
}
