/* maskfolder.c — segmentation folders as data sets: images and their masks, paired by file stem, read into a set of
 * a class per pixel. Three layouts, told apart by their folders (lam_dataset_mask_folder_layout):
 *   generic        DIR/train/images/NAME.png|jpg|jpeg + DIR/train/masks/NAME.png, and DIR/test/... or DIR/val/...
 *   mmsegmentation DIR/img_dir/{train,val}/NAME.jpg|png + DIR/ann_dir/{train,val}/NAME.png
 *   Pascal VOC     DIR/JPEGImages/NAME.jpg + DIR/SegmentationClass/NAME.png, the parts' stems listed in
 *                  DIR/ImageSets/Segmentation/{train,val}.txt
 * A mask is a palette PNG (the index is the class, VOC's way) or an 8-bit grey PNG (the value); 255 is "ignore"
 * (LAM_LABEL_IGNORE: the loss and the metrics skip it). Images and masks are decoded on all host threads, fitted to
 * --size as image folders fit (fit.h), masks by nearest neighbour so no class is blended into another. Unlike image
 * folders (folder.c) the decoded part is not cached: masks would need a third file and their options (label map,
 * reduce-zero-label) in the key. A part is decoded whole into memory, or, where it would not fit (or when asked),
 * streamed: each pair decoded when its sample is asked for (sample.c), the same arithmetic either way. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data.h"
#include "../internal.h"
#include "../status.h"

#define MASK_IGNORE 255 /* LAM_LABEL_IGNORE (prims.h): a pixel the loss and the metrics skip */
#define MASK_MAX_TEXT (1u << 20) /* classes.txt, a label map, a VOC split list: text files, a MiB at most */

static const char *const voc_names[] = {"background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus",
                                        "car", "cat", "chair", "cow", "diningtable", "dog", "horse", "motorbike",
                                        "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor", NULL};

static int dir_at(const char *dir, const char *sub, char *buf, size_t cap) {
  return (size_t)snprintf(buf, cap, "%s/%s", dir, sub) < cap && data_is_dir(buf);
}

int lam_dataset_mask_folder_layout(const char *dir) {
  char p[PATH_MAX];
  if (!dir || !*dir) return LAM_MASKS_NONE;
  if (dir_at(dir, "train/images", p, sizeof p) && dir_at(dir, "train/masks", p, sizeof p)) return LAM_MASKS_GENERIC;
  if (dir_at(dir, "img_dir/train", p, sizeof p) && dir_at(dir, "ann_dir/train", p, sizeof p)) return LAM_MASKS_MMSEG;
  if (dir_at(dir, "JPEGImages", p, sizeof p) && dir_at(dir, "SegmentationClass", p, sizeof p) &&
      (size_t)snprintf(p, sizeof p, "%s/ImageSets/Segmentation/train.txt", dir) < sizeof p && data_is_file(p))
    return LAM_MASKS_VOC;
  return LAM_MASKS_NONE;
}

/* Where a part's images and masks are (VOC: the folders, and *list the part's split file); 0 where the layout has no
 * such part. The test part is test/, else val/ (generic); val/, else test/ (mmsegmentation); val.txt (VOC). */
static int part_paths(const char *dir, int layout, int train, char *img, char *msk, char *list, size_t cap) {
  list[0] = '\0';
  if (layout == LAM_MASKS_VOC) {
    snprintf(img, cap, "%s/JPEGImages", dir), snprintf(msk, cap, "%s/SegmentationClass", dir);
    snprintf(list, cap, "%s/ImageSets/Segmentation/%s.txt", dir, train ? "train" : "val");
    return data_is_file(list);
  }
  const char *parts[2] = {"train", "train"};
  const int generic = layout == LAM_MASKS_GENERIC;
  if (!train) parts[0] = generic ? "test" : "val", parts[1] = generic ? "val" : "test";
  for (int k = 0; k < 2; k++) {
    if (layout == LAM_MASKS_GENERIC)
      snprintf(img, cap, "%s/%s/images", dir, parts[k]), snprintf(msk, cap, "%s/%s/masks", dir, parts[k]);
    else snprintf(img, cap, "%s/img_dir/%s", dir, parts[k]), snprintf(msk, cap, "%s/ann_dir/%s", dir, parts[k]);
    if (data_is_dir(img) && data_is_dir(msk)) return 1;
  }
  return 0;
}

int mask_folder_has_test(const char *dir) {
  char a[PATH_MAX], b[PATH_MAX], c[PATH_MAX];
  const int layout = lam_dataset_mask_folder_layout(dir);
  return layout != LAM_MASKS_NONE && part_paths(dir, layout, 0, a, b, c, sizeof a);
}

/* ---- the part's files, paired by stem ---- */

typedef struct pair {
  char *img, *msk; /* one block: both paths */
} pair;
typedef struct pairs {
  pair *p;
  size_t n, cap;
} pairs;
static void pairs_free(pairs *l) {
  for (size_t i = 0; i < l->n; i++) free(l->p[i].img);
  free(l->p);
  l->p = NULL, l->n = l->cap = 0;
}
static lam_status pairs_add(pairs *l, const char *img, const char *msk) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 256;
    pair *t = realloc(l->p, cap * sizeof *t);
    if (!t) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "mask folder: no host memory for the list of files");
    l->p = t, l->cap = cap;
  }
  const size_t a = strlen(img) + 1, b = strlen(msk) + 1;
  char *m = malloc(a + b);
  if (!m) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "mask folder: no host memory for the list of files");
  memcpy(m, img, a), memcpy(m + a, msk, b);
  l->p[l->n++] = (pair){m, m + a};
  return LAM_OK;
}

typedef struct named {
  char *name; /* the file's name; stem ends at its last dot */
  size_t stem;
} named;
static int cmp_named(const void *a, const void *b) {
  const named *x = a, *y = b;
  const size_t n = x->stem < y->stem ? x->stem : y->stem;
  int c = memcmp(x->name, y->name, n);
  if (c) return c;
  if (x->stem != y->stem) return x->stem < y->stem ? -1 : 1;
  return strcmp(x->name, y->name);
}
static void named_free(named *v, size_t n) {
  for (size_t i = 0; i < n; i++) free(v[i].name);
  free(v);
}
/* The regular files of dir with an image name (png_only: .png alone), sorted by stem. */
static lam_status list_files(const char *dir, int png_only, named **out, size_t *count) {
  *out = NULL, *count = 0;
  DIR *d = opendir(dir);
  if (!d) return LAM_FAIL(LAM_ERR_IO, "mask folder: cannot list '%s': %s", dir, strerror(errno));
  named *v = NULL;
  size_t n = 0, cap = 0;
  lam_status s = LAM_OK;
  for (struct dirent *e; s == LAM_OK && (e = readdir(d)) != NULL;) {
    const char *dot = strrchr(e->d_name, '.');
    if (e->d_name[0] == '.' || !lam_image_file_name(e->d_name) || (png_only && strcasecmp(dot, ".png"))) continue;
    char full[PATH_MAX];
    if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= sizeof full || !data_is_file(full)) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 256;
      named *t = realloc(v, cap * sizeof *t);
      if (!t) {
        s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "mask folder: no host memory to list '%s'", dir);
        break;
      }
      v = t;
    }
    if (!(v[n].name = strdup(e->d_name)))
      s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "mask folder: no host memory to list '%s'", dir);
    else v[n].stem = (size_t)(strrchr(v[n].name, '.') - v[n].name), n++;
  }
  closedir(d);
  if (s != LAM_OK) {
    named_free(v, n);
    return s;
  }
  if (n) qsort(v, n, sizeof *v, cmp_named);
  *out = v, *count = n;
  return LAM_OK;
}

/* One file the pairing could not place: an error naming it and the file it lacks, or with skip_bad counted. */
static lam_status unpaired(int skip_bad, size_t *skipped, const char *fmt, const char *a, const char *b) {
  if (skip_bad) {
    (*skipped)++;
    return LAM_OK;
  }
  return LAM_FAIL(LAM_ERR_IO, fmt, a, b);
}

/* buf = dir/NAME (its first len bytes; len < 0: all) then ext; a path too long for buf cut (it then names no file,
 * and opening it says so). */
static void join(char *buf, size_t cap, const char *dir, const char *name, int len, const char *ext) {
  const int n = len < 0 ? (int)strlen(name) : len;
  if ((size_t)snprintf(buf, cap, "%s/%.*s%s", dir, n, name, ext) >= cap) buf[cap - 1] = '\0';
}

/* The images of imgdir and the masks of mskdir, paired by stem in stem order. */
static lam_status pair_folders(const char *imgdir, const char *mskdir, int skip_bad, pairs *out, size_t *skipped) {
  named *im = NULL, *mk = NULL;
  size_t ni = 0, nm = 0;
  lam_status s = list_files(imgdir, 0, &im, &ni);
  if (s == LAM_OK) s = list_files(mskdir, 1, &mk, &nm);
  for (size_t i = 1; i < ni && s == LAM_OK; i++) /* two images of one stem (a.png, a.jpg): which has the mask? */
    if (im[i].stem == im[i - 1].stem && !memcmp(im[i].name, im[i - 1].name, im[i].stem))
      s = LAM_FAIL(LAM_ERR_IO, "mask folder: '%s/%s' and '%s/%s' have one name: pairing by name needs one image a "
                   "name (remove one)", imgdir, im[i - 1].name, imgdir, im[i].name);
  char a[PATH_MAX], b[PATH_MAX];
  for (size_t i = 0, k = 0; s == LAM_OK && (i < ni || k < nm);) {
    const int c = i == ni ? 1 : k == nm ? -1
                  : im[i].stem == mk[k].stem && !memcmp(im[i].name, mk[k].name, im[i].stem) ? 0
                  : cmp_named(&im[i], &mk[k]);
    if (c == 0) {
      join(a, sizeof a, imgdir, im[i].name, -1, ""), join(b, sizeof b, mskdir, mk[k].name, -1, "");
      s = pairs_add(out, a, b), i++, k++;
    } else if (c < 0) {
      join(a, sizeof a, imgdir, im[i].name, -1, ""), join(b, sizeof b, mskdir, im[i].name, (int)im[i].stem, ".png");
      s = unpaired(skip_bad, skipped, "mask folder: the image '%s' has no mask ('%s' is not there): every image needs "
                   "its mask of the same name (or --skip-bad to leave it out)", a, b), i++;
    } else {
      join(a, sizeof a, mskdir, mk[k].name, -1, ""), join(b, sizeof b, imgdir, mk[k].name, (int)mk[k].stem, ".*");
      s = unpaired(skip_bad, skipped, "mask folder: the mask '%s' has no image ('%s' is not there): every mask needs "
                   "its image of the same name (or --skip-bad to leave it out)", a, b), k++;
    }
  }
  named_free(im, ni), named_free(mk, nm);
  return s;
}

/* A text file whole (NUL-terminated, at most MASK_MAX_TEXT bytes) into *text (malloc'd). */
static lam_status read_text(const char *path, const char *what, char **text) {
  *text = NULL;
  FILE *f;
  LAM_TRY(lam_input_fopen(path, what, LAM_FILE_NONE, 1, &f));
  char *b = malloc(MASK_MAX_TEXT + 1);
  if (!b) {
    fclose(f);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s '%s': no host memory", what, path);
  }
  const size_t n = fread(b, 1, MASK_MAX_TEXT + 1, f);
  const int err = ferror(f);
  fclose(f);
  if (err || n > MASK_MAX_TEXT) {
    free(b);
    return LAM_FAIL(LAM_ERR_IO, "%s '%s': %s", what, path, err ? "cannot read it" : "more than 1 MiB: not such a file");
  }
  b[n] = '\0';
  *text = b;
  return LAM_OK;
}

/* The next line of *at (its end cut, a '\r' before it too), or NULL at the end. */
static char *next_line(char **at) {
  if (!*at || !**at) return NULL;
  char *line = *at, *nl = strchr(line, '\n');
  *at = nl ? nl + 1 : NULL;
  if (nl) *nl = '\0';
  size_t len = strlen(line);
  if (len && line[len - 1] == '\r') line[len - 1] = '\0';
  return line;
}

/* VOC: the stems the split file lists, each image JPEGImages/STEM.jpg and mask SegmentationClass/STEM.png. */
static lam_status pair_list(const char *list, const char *imgdir, const char *mskdir, int skip_bad, pairs *out,
                            size_t *skipped) {
  char *text;
  LAM_TRY(read_text(list, "split list", &text));
  lam_status s = LAM_OK;
  char *at = text, a[PATH_MAX], b[PATH_MAX];
  for (char *line; s == LAM_OK && (line = next_line(&at)) != NULL;) {
    while (isspace((unsigned char)*line)) line++;
    char *end = line + strlen(line);
    while (end > line && isspace((unsigned char)end[-1])) *--end = '\0';
    if (!*line) continue;
    if ((size_t)snprintf(a, sizeof a, "%s/%s.jpg", imgdir, line) >= sizeof a ||
        (size_t)snprintf(b, sizeof b, "%s/%s.png", mskdir, line) >= sizeof b) {
      s = LAM_FAIL(LAM_ERR_IO, "split list '%s': the name '%.64s...' makes too long a path", list, line);
      break;
    }
    const int hi = data_is_file(a), hm = data_is_file(b);
    if (hi && hm) s = pairs_add(out, a, b);
    else if (!hi) s = unpaired(skip_bad, skipped, "mask folder: the image '%s' is not there, and the split list names it "
                               "(its mask '%s'): every listed name needs its image and mask (or --skip-bad)", a, b);
    else s = unpaired(skip_bad, skipped, "mask folder: the mask '%s' is not there, and the split list names its image "
                      "'%s': every listed name needs its image and mask (or --skip-bad)", b, a);
  }
  free(text);
  return s;
}

/* ---- labels ---- */

lam_status lam_label_map_read(const char *path, uint8_t map[256]) {
  LAM_CHECK_ARG(path && map, "lam_label_map_read: %s is NULL", path ? "map" : "path");
  char *text;
  LAM_TRY(read_text(path, "label map", &text));
  uint8_t seen[256] = {0};
  memset(map, MASK_IGNORE, 256);
  lam_status s = LAM_OK;
  char *at = text;
  int ln = 0;
  for (char *line; s == LAM_OK && (line = next_line(&at)) != NULL;) {
    ln++;
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    long raw, to;
    char extra;
    int k = sscanf(line, "%ld %ld %c", &raw, &to, &extra);
    if (k <= 0) {
      const char *p = line;
      while (isspace((unsigned char)*p)) p++;
      if (!*p) continue; /* blank, or a comment */
    }
    if (k != 2 || raw < 0 || raw > 255 || to < 0 || to > 255)
      s = LAM_FAIL(LAM_ERR_INVALID_ARG, "label map '%s', line %d: '%.60s' is not 'RAW NEW' (two values 0 to 255)", path,
                   ln, line);
    else if (seen[raw]++)
      s = LAM_FAIL(LAM_ERR_INVALID_ARG, "label map '%s', line %d: the value %ld is mapped twice", path, ln, raw);
    else map[raw] = (uint8_t)to;
  }
  free(text);
  return s;
}

/* The table every mask value goes through: reduce_zero_label first (0 to 255, v to v - 1), then the map. */
static void label_table(const lam_image_opts *o, uint8_t t[256]) {
  for (int v = 0; v < 256; v++) {
    int u = v;
    if (o->reduce_zero_label) u = v == 0 || v == MASK_IGNORE ? MASK_IGNORE : v - 1;
    t[v] = o->label_map ? o->label_map[u] : (uint8_t)u;
  }
}

/* The classes' names: DIR/classes.txt (one a line) where it is there; else VOC's 21 for the VOC layout, where the
 * labels are VOC's own (no label map; --reduce-zero-label drops "background", which it makes 255). *names NULL when
 * there are none. */
static lam_status class_names(const char *dir, int layout, const lam_image_opts *o, char ***names) {
  *names = NULL;
  char p[PATH_MAX];
  snprintf(p, sizeof p, "%s/classes.txt", dir);
  if (!data_is_file(p)) {
    if (layout != LAM_MASKS_VOC || o->label_map) return LAM_OK;
    const char *const *v = voc_names + (o->reduce_zero_label ? 1 : 0);
    *names = lam_names_copy(v, lam_names_count(v));
    return *names ? LAM_OK : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "mask folder: no host memory for the class names");
  }
  char *text;
  LAM_TRY(read_text(p, "class names", &text));
  const char *v[LAM_FIT_MAX_CLASSES + 1];
  size_t n = 0;
  lam_status s = LAM_OK;
  char *at = text;
  for (char *line; s == LAM_OK && (line = next_line(&at)) != NULL;) {
    const size_t len = strlen(line);
    if (!len && (!at || !*at)) break; /* a blank last line */
    if (n == LAM_FIT_MAX_CLASSES)
      s = LAM_FAIL(LAM_ERR_IO, "class names '%s': more than %d lines (a class a line)", p, LAM_FIT_MAX_CLASSES - 1);
    else if (len < 1 || len > LAM_FIT_MAX_NAME)
      s = LAM_FAIL(LAM_ERR_IO, "class names '%s', line %zu: a name of %zu bytes (1 to %d, a class a line)", p, n + 1, len,
                   LAM_FIT_MAX_NAME);
    else v[n++] = line;
  }
  v[n] = NULL;
  if (s == LAM_OK && n) {
    *names = lam_names_copy(v, n);
    if (!*names) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "mask folder: no host memory for the class names");
  }
  free(text);
  return s;
}

/* ---- decoding ---- */

/* Reads pair i into img (H, W, C) and msk (H, W) (labels through t), fitted to the size where o has one; else the
 * pair must be H x W. *conv set where the image was converted to C channels; *top the largest label not 255. */
static lam_status decode_pair(const pair *p, const lam_image_opts *o, int C, int H, int W, const uint8_t t[256],
                              uint8_t *img, uint8_t *msk, int *conv, int *top) {
  data_image im = {0}, mk = {0};
  uint8_t *buf = NULL;
  size_t len = 0;
  int ih = 0, iw = 0; /* the image's size in its file: a large JPEG is decoded smaller (DCT scaling) to be fitted */
  lam_status s = image_file_bytes(p->img, &buf, &len);
  if (s == LAM_OK && !(image_is_jpeg(buf, len) && image_jpeg_size(buf, len, &ih, &iw))) ih = iw = 0;
  if (s == LAM_OK) s = image_decode_fit(p->img, buf, len, o->h, o->w, &im);
  free(buf);
  buf = NULL;
  if (s == LAM_OK && !ih) ih = im.h, iw = im.w;
  if (s == LAM_OK) s = image_file_bytes(p->msk, &buf, &len);
  if (s == LAM_OK) s = image_decode_mask(p->msk, buf, len, o->h > 0, &mk);
  free(buf);
  if (s == LAM_OK && (ih != mk.h || iw != mk.w))
    s = LAM_FAIL(LAM_ERR_IO, "mask folder: the image '%s' is %dx%d and its mask '%s' %dx%d: a mask must be its image's "
                 "size", p->img, iw, ih, p->msk, mk.w, mk.h);
  if (s == LAM_OK && !o->h && (im.h != H || im.w != W))
    s = LAM_FAIL(LAM_ERR_IO, "mask folder: the image '%s' is %dx%d, but the part's first image is %dx%d: give --size HxW "
                 "(size in the API) to fit every image and mask to one size", p->img, im.w, im.h, W, H);
  *conv = 0;
  if (s == LAM_OK && im.c != C) s = image_to_channels(&im, C), *conv = 1;
  if (s == LAM_OK) {
    image_fit(&im, H, W, img);
    image_fit_nearest(&mk, H, W, msk);
    int top_ = -1;
    for (size_t q = 0; q < (size_t)H * W; q++) {
      msk[q] = t[msk[q]];
      if (msk[q] != MASK_IGNORE && msk[q] > top_) top_ = msk[q];
    }
    *top = top_;
  }
  free(im.px), free(mk.px);
  return s;
}

/* Every pair decoded into px (n, H, W, C) and lab (n, H, W), on all host threads; a pair that fails is an error
 * naming its files (the first in order), or with skip_bad left out (keep[i] 0). */
static lam_status decode_pairs(const pairs *l, const lam_image_opts *o, int C, int H, int W, const uint8_t t[256],
                               uint8_t *px, uint8_t *lab, uint8_t *keep, int *top, size_t *converted) {
  const size_t img = (size_t)H * W * C, P = (size_t)H * W;
  size_t bad_at = (size_t)-1, conv = 0;
  lam_status bad_status = LAM_OK;
  char bad_msg[1024] = "";
#pragma omp parallel for schedule(dynamic, 8) reduction(+ : conv)
  for (size_t i = 0; i < l->n; i++) {
    int c = 0;
    top[i] = -1;
    lam_status st = decode_pair(&l->p[i], o, C, H, W, t, px + i * img, lab + i * P, &c, &top[i]);
    conv += (size_t)c;
    keep[i] = st == LAM_OK;
    if (st != LAM_OK && !(o->skip_bad && st == LAM_ERR_IO)) {
#pragma omp critical(maskfolder_bad)
      if (i < bad_at) { /* lam_last_error is this thread's: its message is this pair's */
        bad_at = i, bad_status = st;
        snprintf(bad_msg, sizeof bad_msg, "%s", lam_last_error());
      }
    }
  }
  *converted = conv;
  if (bad_at != (size_t)-1) return LAM_FAIL(bad_status, "%s", bad_msg);
  return LAM_OK;
}

/* ---- streamed: each pair decoded when its sample is asked for ---- */

typedef struct mask_src {
  pairs l;
  lam_image_opts o; /* the fit (h, w); the labels go through t */
  uint8_t t[256];
  int C, H, W, classes;
  const char *bound; /* what sets classes, for messages */
} mask_src;

static void mask_src_drop(void *state) {
  mask_src *m = state;
  pairs_free(&m->l);
  free(m);
}

/* lam_fill_fn: pair i decoded as decode_pairs decodes it; a label at or over the classes is an error naming the mask
 * (the masks were counted when the set was read: a file changed since). */
static lam_status mask_fill(void *state, size_t i, uint64_t draw, uint8_t *px, uint8_t *lab) {
  (void)draw; /* an image is the same every epoch */
  const mask_src *m = state;
  int conv, top = -1;
  LAM_TRY(decode_pair(&m->l.p[i], &m->o, m->C, m->H, m->W, m->t, px, lab, &conv, &top));
  if (top >= m->classes)
    return LAM_FAIL(LAM_ERR_IO, "mask folder: the mask '%s' has the class %d, and the set has %d classes (%s): a "
                    "mask's values must be below it (or 255, ignored)", m->l.p[i].msk, top, m->classes, m->bound);
  return LAM_OK;
}

/* The largest label (255 aside) of every mask, fitted and mapped as decode_pair does, on all host threads: a
 * streamed set's classes without decoding its images. A mask that fails is an error naming it (the first in
 * order), or with skip_bad passed over (its pair fails again when it is asked for, and is replaced). */
static lam_status mask_top(const mask_src *m, int skip_bad, int *top) {
  const size_t P = (size_t)m->H * m->W;
  size_t bad_at = (size_t)-1;
  lam_status bad_status = LAM_OK;
  char bad_msg[1024] = "";
  int most = -1;
#pragma omp parallel reduction(max : most)
  {
    uint8_t *fit = malloc(P);
#pragma omp for schedule(dynamic, 8)
    for (size_t i = 0; i < m->l.n; i++) {
      data_image mk = {0};
      uint8_t *buf = NULL;
      size_t len = 0;
      lam_status st = fit ? image_file_bytes(m->l.p[i].msk, &buf, &len)
                          : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "mask folder: no host memory for a mask of %zu pixels", P);
      if (st == LAM_OK) st = image_decode_mask(m->l.p[i].msk, buf, len, m->o.h > 0, &mk);
      free(buf);
      if (st == LAM_OK) {
        image_fit_nearest(&mk, m->H, m->W, fit);
        for (size_t q = 0; q < P; q++) {
          const int v = m->t[fit[q]];
          if (v != MASK_IGNORE && v > most) most = v;
        }
      } else if (!(skip_bad && st == LAM_ERR_IO)) {
#pragma omp critical(maskfolder_top)
        if (i < bad_at) bad_at = i, bad_status = st, snprintf(bad_msg, sizeof bad_msg, "%s", lam_last_error());
      }
      free(mk.px);
    }
    free(fit);
  }
  if (bad_at != (size_t)-1) return LAM_FAIL(bad_status, "%s", bad_msg);
  *top = most;
  return LAM_OK;
}

/* The part as a streamed set over the pairs of l (moved into its source); classes from the names where there are
 * some, else from every mask's largest label (mask_top). */
static lam_status stream_masks(const char *dir, pairs *l, const lam_image_opts *o, const uint8_t t[256], char **names,
                               int C, int H, int W, lam_dataset **out) {
  mask_src *m = calloc(1, sizeof *m);
  lam_dataset *d = calloc(1, sizeof *d);
  if (!m || !d) {
    free(m), free(d), free(names);
    pairs_free(l);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "mask folder '%s': no host memory", dir);
  }
  m->l = *l, memset(l, 0, sizeof *l);
  m->o = (lam_image_opts){.h = o->h, .w = o->w};
  memcpy(m->t, t, sizeof m->t);
  m->C = C, m->H = H, m->W = W;
  const size_t nnames = lam_names_count((const char *const *)names);
  char txt[PATH_MAX];
  const int have_txt = (size_t)snprintf(txt, sizeof txt, "%s/classes.txt", dir) < sizeof txt && data_is_file(txt);
  m->bound = !nnames ? "the largest value of its masks + 1" : have_txt ? "DIR/classes.txt" : "VOC's 21";
  int top = -1;
  lam_status s = nnames ? LAM_OK : mask_top(m, o->skip_bad, &top);
  m->classes = nnames ? (int)nnames : top + 1 > 1 ? top + 1 : 1;
  const size_t n = m->l.n;
  lam_source *src = NULL;
  if (s == LAM_OK) s = lam_source_make(n, C, H, W, mask_fill, mask_src_drop, m, o->skip_bad, &src); /* m: the source's */
  else mask_src_drop(m);
  if (s != LAM_OK) {
    free(d), free(names);
    return s;
  }
  *d = (lam_dataset){.n = n, .h = H, .w = W, .classes = src ? m->classes : 0, .c = C, .label_h = H, .label_w = W,
                     .class_names = names, .source = src};
  *out = d;
  return LAM_OK;
}

static const char *layout_name(int layout) {
  return layout == LAM_MASKS_GENERIC ? "DIR/train/{images,masks}/"
         : layout == LAM_MASKS_MMSEG ? "DIR/img_dir/train/ + DIR/ann_dir/train/"
                                     : "DIR/JPEGImages/ + DIR/SegmentationClass/";
}

lam_status lam_dataset_load_masks(const char *dir, int train, lam_image_opts *opts, lam_dataset **out) {
  LAM_CHECK_ARG(out, "lam_dataset_load_masks: out is NULL");
  *out = NULL;
  LAM_CHECK_ARG(dir && *dir, "lam_dataset_load_masks: dir is %s", dir ? "empty" : "NULL");
  lam_image_opts def = {.stream = LAM_STREAM_OFF};
  lam_image_opts *o = opts ? opts : &def;
  LAM_TRY(lam_image_opts_check(o));
  const int layout = lam_dataset_mask_folder_layout(dir);
  if (layout == LAM_MASKS_NONE)
    return LAM_FAIL(LAM_ERR_IO, "'%s' is not a mask folder (DIR/train/images + DIR/train/masks, mmsegmentation's "
                    "DIR/img_dir + DIR/ann_dir, or Pascal VOC's JPEGImages + SegmentationClass + ImageSets/Segmentation)",
                    dir);
  char imgdir[PATH_MAX], mskdir[PATH_MAX], list[PATH_MAX];
  if (!part_paths(dir, layout, train, imgdir, mskdir, list, sizeof imgdir))
    return LAM_FAIL(LAM_ERR_IO, "mask folder '%s' (%s) has no %s part: add %s, or train with --val-split F, whose "
                    "held-out part is then the test part", dir, layout_name(layout), train ? "training" : "test",
                    layout == LAM_MASKS_GENERIC ? "test/images and test/masks (or val/)"
                    : layout == LAM_MASKS_MMSEG ? "img_dir/val and ann_dir/val"
                                                : "ImageSets/Segmentation/val.txt");
  pairs l = {0};
  size_t skipped = 0;
  lam_status s = list[0] ? pair_list(list, imgdir, mskdir, o->skip_bad, &l, &skipped)
                         : pair_folders(imgdir, mskdir, o->skip_bad, &l, &skipped);
  if (s == LAM_OK && l.n == 0)
    s = LAM_FAIL(LAM_ERR_IO, "mask folder '%s': no image with its mask in '%s' and '%s'%s", dir, imgdir, mskdir,
                 skipped ? " (every one was left out)" : "");
  if (s == LAM_OK) s = lam_input_folder(imgdir, "images"); /* no output of the run may be written there */
  if (s == LAM_OK) s = lam_input_folder(mskdir, "masks");
  char **names = NULL;
  if (s == LAM_OK) s = class_names(dir, layout, o, &names);
  if (s != LAM_OK) {
    pairs_free(&l);
    return s;
  }
  uint8_t t[256];
  label_table(o, t);
  const double t0 = lam_now_ms();
  /* the geometry: --size, else the first pair that decodes; the channels most images' (as image folders) */
  int H = o->h, W = o->w, C = 0;
  size_t f0 = 0;
  for (; f0 < l.n && !C; f0++) {
    data_image first;
    lam_status st = image_read_fit(l.p[f0].img, o->h, o->w, &first);
    if (st == LAM_OK) {
      C = first.c;
      if (!H) H = first.h, W = first.w;
      free(first.px);
    } else if (!o->skip_bad || st != LAM_ERR_IO) {
      s = st;
      break;
    }
  }
  if (s == LAM_OK && !C) s = LAM_FAIL(LAM_ERR_IO, "mask folder '%s': no image could be decoded", dir);
  const size_t P = (size_t)H * W;
  if (s == LAM_OK && o->stream != LAM_STREAM_OFF) { /* the channels of a streamed part are its first image's */
    if (lam_stream_wanted(o, l.n * P * (size_t)(C + 1))) {
      o->skipped = skipped;
      s = stream_masks(dir, &l, o, t, names, C, H, W, out);
      o->streamed = s == LAM_OK;
      o->decode_s = (lam_now_ms() - t0) / 1000;
      return s;
    }
  }
  uint8_t *px = NULL, *lab = NULL, *keep = NULL;
  int *top = NULL;
  size_t conv = 0, n = 0;
  if (s == LAM_OK) {
    px = malloc(l.n * P * 3), lab = malloc(l.n * P), keep = calloc(l.n, 1), top = calloc(l.n, sizeof *top);
    if (!px || !lab || !keep || !top)
      s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "mask folder '%s': no host memory for %zu images and masks of %dx%d", dir,
                   l.n, W, H);
  }
  if (s == LAM_OK) s = decode_pairs(&l, o, C, H, W, t, px, lab, keep, top, &conv);
  size_t kept = 0;
  for (size_t i = 0; s == LAM_OK && i < l.n; i++) kept += keep[i];
  /* most images the other channel count (the first was an odd one): once more, as image folders do */
  if (s == LAM_OK && conv && (2 * conv > kept || (2 * conv == kept && C == 1))) {
    C = C == 1 ? 3 : 1;
    s = decode_pairs(&l, o, C, H, W, t, px, lab, keep, top, &conv);
  }
  o->decode_s = (lam_now_ms() - t0) / 1000;
  o->converted = conv;
  int classes = 0;
  const size_t nnames = lam_names_count((const char *const *)names);
  char txt[PATH_MAX];
  const int have_txt = (size_t)snprintf(txt, sizeof txt, "%s/classes.txt", dir) < sizeof txt && data_is_file(txt);
  for (size_t i = 0; s == LAM_OK && i < l.n; i++) {
    if (!keep[i]) continue;
    if (nnames && top[i] >= (int)nnames)
      s = LAM_FAIL(LAM_ERR_IO, "mask folder '%s': the mask '%s' has the class %d, and the set names %zu classes (%s): "
                   "a mask's values must be below it (or 255, ignored)%s", dir, l.p[i].msk, top[i], nnames,
                   have_txt ? "DIR/classes.txt" : "VOC's 21",
                   o->reduce_zero_label || o->label_map ? ", after --reduce-zero-label and --label-map" : "");
    if (top[i] + 1 > classes) classes = top[i] + 1;
  }
  if (nnames) classes = (int)nnames;
  if (classes < 1) classes = 1; /* every pixel 255: one class, nothing to learn from, but a set */
  lam_dataset *d = NULL;
  if (s == LAM_OK) { /* the kept pairs together, (n, H, W, C) to the set's (n, C, H, W) */
    uint8_t *tmp = malloc(P * C);
    d = calloc(1, sizeof *d);
    if (!tmp || !d) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "mask folder '%s': no host memory for the set", dir);
    for (size_t i = 0; s == LAM_OK && i < l.n; i++) {
      if (!keep[i]) continue;
      image_planar(px + i * P * C, H, W, C, tmp);
      memcpy(px + n * P * C, tmp, P * C);
      if (n != i) memmove(lab + n * P, lab + i * P, P);
      n++;
    }
    free(tmp);
  }
  o->skipped = skipped + (l.n - n);
  free(keep), free(top);
  pairs_free(&l);
  if (s != LAM_OK) {
    free(px), free(lab), free(d), free(names);
    return s;
  }
  *d = (lam_dataset){.n = n, .h = H, .w = W, .classes = classes, .images = px, .labels = lab, .c = C, .label_h = H,
                     .label_w = W, .class_names = names};
  o->part_bytes = n * P * (size_t)(C + 1);
  *out = d;
  return LAM_OK;
}

/* ---- writing one (`lamina data segment --format folder`) ---- */

lam_status lam_data_mask_folder_part(const uint8_t *images, const uint8_t *labels, size_t n, int h, int w, int kind,
                                     const char *dir) {
  LAM_CHECK_ARG(images && labels && dir, "lam_data_mask_folder_part: a NULL argument");
  LAM_CHECK_ARG(kind == IMAGE_PNG || kind == IMAGE_JPEG, "lam_data_mask_folder_part: kind %d (1 PNG, 2 JPEG)", kind);
  LAM_CHECK_ARG((image_formats() & (kind | IMAGE_PNG)) == (kind | IMAGE_PNG),
                "lam_data_mask_folder_part: this lamina was built without %s",
                !(image_formats() & IMAGE_PNG) ? "libpng (install libpng-dev)" : "libjpeg (install libjpeg62-turbo-dev)");
  LAM_CHECK_ARG(h >= 1 && w >= 1, "lam_data_mask_folder_part: %dx%d", h, w);
  char p[PATH_MAX];
  for (int k = 0; k < 2; k++) {
    snprintf(p, sizeof p, "%s/%s", dir, k ? "masks" : "images");
    if (mkdir(p, 0777) != 0 && errno != EEXIST) return LAM_FAIL(LAM_ERR_IO, "cannot make '%s': %s", p, strerror(errno));
  }
  const size_t P = (size_t)h * w;
  lam_status st = LAM_OK;
#pragma omp parallel for schedule(dynamic, 64)
  for (size_t i = 0; i < n; i++) {
    lam_status s = LAM_OK;
    for (int k = 0; k < 2 && s == LAM_OK; k++) { /* the scene, then its mask (grey PNG: the value is the class) */
      uint8_t *buf = NULL;
      size_t len = 0;
      char f[PATH_MAX];
      s = image_encode(k ? IMAGE_PNG : kind, (k ? labels : images) + i * P, h, w, 1, &buf, &len);
      snprintf(f, sizeof f, "%s/%s/%06zu.%s", dir, k ? "masks" : "images", i, k || kind == IMAGE_PNG ? "png" : "jpg");
      if (s == LAM_OK) s = lam_data_write_plain(f, buf, len); /* a folder of its own: cmd_data.c checks it first */
      free(buf);
    }
    if (s != LAM_OK) {
#pragma omp critical(mask_part)
      if (st == LAM_OK) st = s;
    }
  }
  return st;
}
