/* coco_write.c — lam_data_coco: a COCO instances file and its images written as a segmentation folder of the
 * generic layout (OUT/<part>/images/<stem>.<ext>, OUT/<part>/masks/<stem>.png, OUT/classes.txt). The part
 * is built in a temporary folder beside it and renamed into place when whole, so an output never replaces a
 * user's files and a failure leaves nothing half-written. The masks come from coco.c. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <ftw.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "../internal.h"
#include "../status.h"

#define COCO_MAX_FILE_BYTES (4ull << 30) /* COCO's own train2017 instances file is 450 MB */

static lam_status read_all(const char *path, char **buf, size_t *len) {
  FILE *f;
  LAM_TRY(lam_input_fopen(path, "COCO annotations file", LAM_FILE_NONE, 1, &f));
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    fclose(f);
    return LAM_FAIL(LAM_ERR_IO, "COCO annotations file '%s': fstat failed: %s", path, strerror(errno));
  }
  if ((uint64_t)st.st_size > COCO_MAX_FILE_BYTES) {
    fclose(f);
    return LAM_FAIL(LAM_ERR_IO, "COCO annotations file '%s': larger than 4 GiB, more than lamina reads", path);
  }
  size_t n = (size_t)st.st_size;
  char *b = malloc(n ? n : 1);
  if (!b) {
    fclose(f);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "COCO annotations file '%s': no memory for its %zu bytes", path, n);
  }
  size_t got = fread(b, 1, n, f);
  int err = ferror(f);
  fclose(f);
  if (err || got != n) {
    free(b);
    return LAM_FAIL(LAM_ERR_IO, "COCO annotations file '%s': read %zu of its %zu bytes", path, got, n);
  }
  *buf = b, *len = n;
  return LAM_OK;
}

/* 1 when dir is missing or an empty folder; 0 when it has entries; -1 when it is not a folder. */
static int empty_or_missing(const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0) return 1;
  if (!S_ISDIR(st.st_mode)) return -1;
  DIR *d = opendir(dir);
  int empty = d != NULL;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
  if (d) closedir(d);
  return empty;
}

/* The length of name's stem (without its last extension). */
static size_t stem_len(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot && dot != name ? (size_t)(dot - name) : strlen(name);
}
static const coco_set *g_sort_set; /* for cmp_stem: qsort has no user pointer */
static int cmp_stem(const void *x, const void *y) {
  const char *a = coco_get_image(g_sort_set, *(const size_t *)x)->file_name;
  const char *b = coco_get_image(g_sort_set, *(const size_t *)y)->file_name;
  size_t la = stem_len(a), lb = stem_len(b);
  int c = memcmp(a, b, la < lb ? la : lb);
  return c ? c : la < lb ? -1 : la > lb;
}
/* Two images whose masks would have the same name (a.jpg, a.png) are refused. */
static lam_status check_stems(const coco_set *s) {
  size_t n = coco_n_images(s);
  size_t *ix = malloc((n ? n : 1) * sizeof *ix);
  if (!ix) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no memory for %zu image names", n);
  for (size_t i = 0; i < n; i++) ix[i] = i;
  g_sort_set = s;
  qsort(ix, n, sizeof *ix, cmp_stem);
  lam_status st = LAM_OK;
  for (size_t i = 1; i < n && st == LAM_OK; i++)
    if (!cmp_stem(&ix[i - 1], &ix[i]))
      st = LAM_FAIL(LAM_ERR_IO, "COCO file: images '%s' and '%s' would have the same mask file (their names differ "
                    "only by extension)", coco_get_image(s, ix[i - 1])->file_name, coco_get_image(s, ix[i])->file_name);
  free(ix);
  return st;
}

/* The image file's size from its header (PNG's IHDR, JPEG's frame), checked against the annotations': a mask
 * of another size than its image would train on the wrong pixels. */
static lam_status check_image_size(const char *path, const uint8_t *b, size_t n, const coco_image *im) {
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  int h = 0, w = 0;
  if (n >= 24 && !memcmp(b, png_sig, 8) && !memcmp(b + 12, "IHDR", 4)) {
    w = (int)((uint32_t)b[16] << 24 | (uint32_t)b[17] << 16 | (uint32_t)b[18] << 8 | b[19]);
    h = (int)((uint32_t)b[20] << 24 | (uint32_t)b[21] << 16 | (uint32_t)b[22] << 8 | b[23]);
  } else if (!image_is_jpeg(b, n) || !image_jpeg_size(b, n, &h, &w)) {
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': not a PNG or JPEG file whose size lamina can read", path);
  }
  if (h != im->h || w != im->w)
    return LAM_FAIL(LAM_ERR_IO, "image file '%s' is %dx%d (height x width), but the COCO file says %dx%d (image %lld)",
                    path, h, w, im->h, im->w, im->id);
  return LAM_OK;
}

/* Image i and its mask into tmp: the image copied as it is, or with fit_h, fit_w fitted to that size as image
 * folders' --size fits (scaled to cover, the middle kept) and written as JPEG, its mask alike (nearest). */
static lam_status write_image(const coco_set *s, size_t i, const char *images_dir, const char *tmp, int fit_h,
                              int fit_w, uint8_t *mask, uint8_t *fitted) {
  const coco_image *im = coco_get_image(s, i);
  const int stem = (int)stem_len(im->file_name);
  char src[4096], dst[8192 + 64];
  if ((size_t)snprintf(src, sizeof src, "%s/%s", images_dir, im->file_name) >= sizeof src)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "the path of image '%s' is too long", im->file_name);
  uint8_t *b = NULL, *enc = NULL;
  size_t n = 0, en = 0;
  data_image pic = {0, 0, 0, NULL};
  LAM_TRY(image_file_bytes(src, &b, &n));
  lam_status st = check_image_size(src, b, n, im);
  if (st == LAM_OK && !fit_h) {
    snprintf(dst, sizeof dst, "%s/images/%s", tmp, im->file_name);
    st = lam_output_write_atomic(dst, "image (a copy)", b, n);
  } else if (st == LAM_OK) {
    st = image_decode_fit(src, b, n, fit_h, fit_w, &pic);
    uint8_t *px = st == LAM_OK ? malloc((size_t)fit_h * fit_w * pic.c) : NULL;
    if (st == LAM_OK && !px) st = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no memory for image '%s' fitted", src);
    if (st == LAM_OK) {
      image_fit(&pic, fit_h, fit_w, px);
      st = image_encode(IMAGE_JPEG, px, fit_h, fit_w, pic.c, &enc, &en);
    }
    free(px), free(pic.px);
    if (st == LAM_OK) {
      snprintf(dst, sizeof dst, "%s/images/%.*s.jpg", tmp, stem, im->file_name);
      st = lam_output_write_atomic(dst, "image (fitted)", enc, en);
    }
    free(enc), enc = NULL;
  }
  free(b);
  if (st == LAM_OK) st = coco_mask(s, i, mask);
  if (st == LAM_OK && fit_h) coco_fit_mask(mask, im->h, im->w, fit_h, fit_w, fitted);
  if (st == LAM_OK)
    st = fit_h ? image_encode(IMAGE_PNG, fitted, fit_h, fit_w, 1, &enc, &en)
               : image_encode(IMAGE_PNG, mask, im->h, im->w, 1, &enc, &en);
  if (st == LAM_OK) {
    snprintf(dst, sizeof dst, "%s/masks/%.*s.png", tmp, stem, im->file_name);
    st = lam_output_write_atomic(dst, "mask", enc, en);
  }
  free(enc);
  return st;
}

/* classes.txt: "background", then the classes' names. Kept where it is when the same (another part of the
 * same set wrote it); a different one is refused (the parts would disagree on what a value means). */
static lam_status write_classes(const coco_set *s, const char *path) {
  size_t cap = 16;
  for (size_t k = 0; k < coco_n_classes(s); k++) cap += strlen(coco_class_name(s, k)) + 1;
  char *text = malloc(cap);
  if (!text) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no memory for classes.txt");
  size_t len = (size_t)sprintf(text, "background\n");
  for (size_t k = 0; k < coco_n_classes(s); k++) len += (size_t)sprintf(text + len, "%s\n", coco_class_name(s, k));
  lam_status st = LAM_OK;
  FILE *f = fopen(path, "rb");
  if (f) {
    char *old = malloc(len + 1);
    size_t got = old ? fread(old, 1, len + 1, f) : 0;
    if (!old || got != len || memcmp(old, text, len))
      st = LAM_FAIL(LAM_ERR_IO, "'%s' is there and lists other classes than this COCO file's: give another --out "
                    "(the parts of one folder share their classes)", path);
    free(old);
    fclose(f);
  } else {
    st = lam_output_write_atomic(path, "classes.txt", text, len);
  }
  free(text);
  return st;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

lam_status lam_data_coco(const char *annotations, const char *images_dir, const char *out_dir, const char *part,
                         int fit_h, int fit_w, size_t *n_images, size_t *n_classes) {
  LAM_CHECK_ARG(annotations && images_dir && out_dir && part, "lam_data_coco: an argument is NULL");
  LAM_CHECK_ARG((!fit_h && !fit_w) || (fit_h >= 1 && fit_w >= 1 && fit_h <= 4096 && fit_w <= 4096),
                "lam_data_coco: a fit of %dx%d (1 to 4096 a side, or 0x0 to copy the images)", fit_h, fit_w);
  if (fit_h && !(image_formats() & IMAGE_JPEG))
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "this lamina was built without libjpeg: it cannot write fitted images");
  LAM_CHECK_ARG(!strcmp(part, "train") || !strcmp(part, "test"), "lam_data_coco: part '%s' is not train or test", part);
  if (!(image_formats() & IMAGE_PNG))
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "this lamina was built without libpng: it cannot write the masks");
  char dest[4096], tmp[4096 + 64], sub[4096 + 80], classes[4096 + 16];
  if ((size_t)snprintf(dest, sizeof dest, "%s/%s", out_dir, part) >= sizeof dest)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "the output folder's path '%s' is too long", out_dir);
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp.%ld", out_dir, part, (long)getpid());
  snprintf(classes, sizeof classes, "%s/classes.txt", out_dir);
  int e = empty_or_missing(dest);
  if (e != 1)
    return LAM_FAIL(LAM_ERR_IO, "'%s' %s: give another --out or --part (an output never replaces files there)", dest,
                    e < 0 ? "is there and is not a folder" : "is there and is not empty");
  if (empty_or_missing(out_dir) < 0) return LAM_FAIL(LAM_ERR_IO, "--out '%s' is not a folder", out_dir);
  char *json = NULL;
  size_t len = 0;
  coco_set *s = NULL;
  LAM_TRY(read_all(annotations, &json, &len));
  lam_status st = coco_parse(json, len, &s);
  free(json);
  if (st != LAM_OK) {
    char why[1024]; /* the message is rewritten below: copied first */
    snprintf(why, sizeof why, "%s", lam_last_error());
    return LAM_FAIL(st, "'%s': %s", annotations, why);
  }
  st = check_stems(s);
  int made_out = 0, made_tmp = 0; /* a folder made here and left empty by a failure goes again */
  if (st == LAM_OK) {
    made_out = mkdir(out_dir, 0777) == 0;
    if (!made_out && errno != EEXIST)
      st = LAM_FAIL(LAM_ERR_IO, "cannot make the folder '%s': %s (its parent must exist)", out_dir, strerror(errno));
  }
  if (st == LAM_OK) {
    made_tmp = mkdir(tmp, 0777) == 0;
    if (!made_tmp) st = LAM_FAIL(LAM_ERR_IO, "cannot make the folder '%s': %s", tmp, strerror(errno));
  }
  for (int k = 0; k < 2 && st == LAM_OK; k++) {
    snprintf(sub, sizeof sub, "%s/%s", tmp, k ? "masks" : "images");
    if (mkdir(sub, 0777) != 0) st = LAM_FAIL(LAM_ERR_IO, "cannot make the folder '%s': %s", sub, strerror(errno));
  }
  size_t max_px = 1;
  for (size_t i = 0; i < coco_n_images(s); i++)
    if ((size_t)coco_get_image(s, i)->h * coco_get_image(s, i)->w > max_px)
      max_px = (size_t)coco_get_image(s, i)->h * coco_get_image(s, i)->w;
  uint8_t *mask = st == LAM_OK ? malloc(max_px) : NULL;
  uint8_t *fitted = st == LAM_OK && fit_h ? malloc((size_t)fit_h * fit_w) : NULL;
  if (st == LAM_OK && (!mask || (fit_h && !fitted)))
    st = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no memory for a mask of %zu pixels", max_px);
  for (size_t i = 0; i < coco_n_images(s) && st == LAM_OK; i++)
    st = write_image(s, i, images_dir, tmp, fit_h, fit_w, mask, fitted);
  free(mask), free(fitted);
  if (st == LAM_OK) st = write_classes(s, classes);
  if (st == LAM_OK && empty_or_missing(dest) == 1 && rmdir(dest) != 0 && errno != ENOENT)
    st = LAM_FAIL(LAM_ERR_IO, "cannot replace the empty folder '%s': %s", dest, strerror(errno));
  if (st == LAM_OK && rename(tmp, dest) != 0)
    st = LAM_FAIL(LAM_ERR_IO, "cannot move '%s' to '%s': %s", tmp, dest, strerror(errno));
  if (st != LAM_OK && made_tmp) nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (st != LAM_OK && made_out) rmdir(out_dir); /* only if empty: classes.txt is written last */
  if (st == LAM_OK && n_images) *n_images = coco_n_images(s);
  if (st == LAM_OK && n_classes) *n_classes = coco_n_classes(s);
  coco_free(s);
  return st;
}
