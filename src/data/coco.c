/* coco.c — a COCO instances file (JSON) read into per-image class masks, as mmsegmentation and pycocotools
 * users expect them: categories become 1..K in increasing id order (0 the background), crowd regions 255
 * (ignore), and where instances overlap the smaller one (by its mask's area) is on top. Polygons are
 * rasterized as pycocotools' rleFrPoly does (to the pixel: the same masks a pycocotools pipeline trains
 * on), RLE is taken in both forms (counts as numbers, or as pycocotools' compressed string).
 *
 * coco_parse checks the whole file up front — every key, type, id, polygon and RLE — so that rendering
 * (coco_mask) cannot fail on the file's content, and a bad file is refused before anything is written.
 * It works on bytes, not a path, so that tests and the fuzzer need no files.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "data.h"
#include "fit.h"
#include "../status.h"

#define COCO_MAX_SIDE 65535u
#define COCO_MAX_PIXELS (1ull << 28)
#define COCO_MAX_CLASSES 254 /* 1..254 in a byte, 255 the crowd's ignore value */
/* A polygon coordinate beyond this is garbage (no image is near it); it also keeps the scaled walk in int. */
#define COCO_MAX_COORD 1e6
/* The boundary walk of one polygon (sum of its upsampled edges): far above a real polygon's, low enough that
 * a hostile file cannot ask for minutes of work. */
#define COCO_MAX_WALK (1ull << 28)

enum { SEG_POLY, SEG_RLE };

typedef struct coco_ann {
  long long id;
  size_t image;   /* index into the set's images */
  uint8_t value;  /* the class 1..K, or 255 for a crowd */
  int kind;       /* SEG_POLY or SEG_RLE */
  size_t nparts;  /* polygons: how many; part_len[i] points each, their xy in xy (concatenated) */
  size_t *part_len;
  double *xy;
  uint32_t *counts; /* RLE: column-major runs, 0s first, summing to h * w */
  size_t ncounts;
} coco_ann;

struct coco_set {
  size_t n_images, n_classes, n_anns;
  coco_image *images;
  char **class_names; /* [n_classes], in id order */
  coco_ann *anns;     /* sorted by image (stable: the file's order within one image) */
  size_t *first;      /* [n_images + 1]: image i's annotations are anns[first[i] .. first[i + 1]) */
};

/* ---- reading the JSON ---- */

static lam_status get_int(json_t *obj, const char *key, const char *where, long long *out) {
  json_t *v = json_object_get(obj, key);
  if (!v) return LAM_FAIL(LAM_ERR_IO, "COCO file: %s has no \"%s\"", where, key);
  if (!json_is_integer(v)) return LAM_FAIL(LAM_ERR_IO, "COCO file: %s: \"%s\" is not an integer", where, key);
  *out = (long long)json_integer_value(v);
  return LAM_OK;
}

static json_t *get_array(json_t *root, const char *key, lam_status *s) {
  json_t *v = json_object_get(root, key);
  if (!v) *s = LAM_FAIL(LAM_ERR_IO, "COCO file: no \"%s\" at the top level", key);
  else if (!json_is_array(v)) *s = LAM_FAIL(LAM_ERR_IO, "COCO file: \"%s\" is not an array", key), v = NULL;
  return v;
}

static int cmp_ll(long long a, long long b) { return a < b ? -1 : a > b; }

typedef struct id_index {
  long long id;
  size_t index;
} id_index;
static int cmp_id_index(const void *a, const void *b) {
  return cmp_ll(((const id_index *)a)->id, ((const id_index *)b)->id);
}
/* The entry of id in the sorted table t[n], or NULL. */
static const id_index *find_id(const id_index *t, size_t n, long long id) {
  id_index key = {id, 0};
  return n ? bsearch(&key, t, n, sizeof *t, cmp_id_index) : NULL;
}

/* A file name that stays inside the images folder and yields a stem: no folders, not hidden. */
static int plain_name(const char *s) {
  return s[0] && s[0] != '.' && !strchr(s, '/') && !strchr(s, '\\');
}

/* pycocotools' compressed counts (rleFrString): 6 bits a character from '0' (48), 5 of value, 0x20 "more
 * follows", the last character's 0x10 its sign; from the fourth count on, a count is the delta from the one two
 * before. */
static lam_status rle_from_string(const char *s, long long id, uint64_t total, uint32_t **out, size_t *n) {
  size_t len = strlen(s), m = 0;
  uint32_t *c = malloc((len ? len : 1) * sizeof *c);
  if (!c) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "COCO file: annotation %lld: no memory for its RLE", id);
  for (size_t p = 0; p < len;) {
    long long x = 0;
    int k = 0, more = 1;
    while (more) {
      if (p >= len || k >= 7) { /* 7 characters hold 35 bits: more than any count of 2^28 pixels needs */
        free(c);
        return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: its RLE string %s at character %zu", id,
                        p >= len ? "ends inside a count" : "has a count of more than 7 characters", p);
      }
      int ch = (unsigned char)s[p] - 48;
      if (ch < 0 || ch > 63) {
        free(c);
        return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: its RLE string has '%c' at character %zu (not "
                        "'0' to 'o')", id, s[p], p);
      }
      x |= (long long)(ch & 0x1f) << (5 * k);
      more = ch & 0x20;
      p++, k++;
      if (!more && (ch & 0x10)) x -= 1ll << (5 * k); /* the sign: the value's top bit set, extended */
    }
    if (m > 2) x += c[m - 2];
    if (x < 0 || (uint64_t)x > total) {
      free(c);
      return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: its RLE count %zu is %lld (0 to %llu, the image's "
                      "pixels)", id, m, x, (unsigned long long)total);
    }
    c[m++] = (uint32_t)x;
  }
  *out = c, *n = m;
  return LAM_OK;
}

static lam_status parse_rle(json_t *seg, long long id, const coco_image *im, coco_ann *a) {
  json_t *counts = json_object_get(seg, "counts"), *size = json_object_get(seg, "size");
  if (!counts || !size)
    return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: its RLE segmentation has no \"%s\"", id,
                    counts ? "size" : "counts");
  if (!json_is_array(size) || json_array_size(size) != 2 || !json_is_integer(json_array_get(size, 0)) ||
      !json_is_integer(json_array_get(size, 1)))
    return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: its RLE \"size\" is not [height, width]", id);
  long long h = json_integer_value(json_array_get(size, 0)), w = json_integer_value(json_array_get(size, 1));
  if (h != im->h || w != im->w)
    return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: its RLE is %lldx%lld (height x width), its image "
                    "'%s' %dx%d", id, h, w, im->file_name, im->h, im->w);
  const uint64_t total = (uint64_t)im->h * (uint64_t)im->w;
  a->kind = SEG_RLE;
  if (json_is_string(counts)) {
    LAM_TRY(rle_from_string(json_string_value(counts), id, total, &a->counts, &a->ncounts));
  } else if (json_is_array(counts)) {
    size_t n = json_array_size(counts);
    a->counts = malloc((n ? n : 1) * sizeof *a->counts);
    if (!a->counts) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "COCO file: annotation %lld: no memory for its RLE", id);
    a->ncounts = n;
    for (size_t i = 0; i < n; i++) {
      json_t *v = json_array_get(counts, i);
      long long x = json_is_integer(v) ? json_integer_value(v) : -1;
      if (x < 0 || (uint64_t)x > total)
        return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: its RLE count %zu is not an integer from 0 to %llu",
                        id, i, (unsigned long long)total);
      a->counts[i] = (uint32_t)x;
    }
  } else {
    return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: its RLE \"counts\" is neither numbers nor a string", id);
  }
  uint64_t sum = 0;
  for (size_t i = 0; i < a->ncounts; i++) sum += a->counts[i];
  if (sum != total)
    return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: its RLE counts sum to %llu, not %llu (its image's %dx%d "
                    "pixels)", id, (unsigned long long)sum, (unsigned long long)total, im->h, im->w);
  return LAM_OK;
}

static lam_status parse_polygons(json_t *seg, long long id, coco_ann *a) {
  size_t np = json_array_size(seg), total = 0;
  if (!np) return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: its segmentation is an empty list", id);
  for (size_t i = 0; i < np; i++) {
    json_t *p = json_array_get(seg, i);
    if (!json_is_array(p))
      return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: polygon %zu is not a list of numbers", id, i);
    size_t n = json_array_size(p);
    if (n % 2) return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: polygon %zu has %zu numbers, not x, y pairs",
                               id, i, n);
    if (n < 6)
      return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: polygon %zu has %zu points (a polygon needs 3)", id, i,
                      n / 2);
    total += n;
  }
  a->kind = SEG_POLY;
  a->nparts = np;
  a->part_len = malloc(np * sizeof *a->part_len);
  a->xy = malloc(total * sizeof *a->xy);
  if (!a->part_len || !a->xy)
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "COCO file: annotation %lld: no memory for its polygons", id);
  size_t k = 0;
  for (size_t i = 0; i < np; i++) {
    json_t *p = json_array_get(seg, i);
    a->part_len[i] = json_array_size(p) / 2;
    for (size_t j = 0; j < json_array_size(p); j++) {
      json_t *v = json_array_get(p, j);
      double x = json_is_number(v) ? json_number_value(v) : NAN;
      if (!(fabs(x) <= COCO_MAX_COORD))
        return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: polygon %zu, number %zu is not a coordinate (a "
                        "number within +-%g)", id, i, j, COCO_MAX_COORD);
      a->xy[k++] = x;
    }
  }
  return LAM_OK;
}

static lam_status parse_categories(json_t *cats, coco_set *s, id_index **cat_ids) {
  size_t n = json_array_size(cats);
  if (n > COCO_MAX_CLASSES)
    return LAM_FAIL(LAM_ERR_IO, "COCO file: %zu categories; a mask of bytes holds at most %d (255 is the crowd's "
                    "ignore value)", n, COCO_MAX_CLASSES);
  id_index *t = calloc(n ? n : 1, sizeof *t);
  s->class_names = calloc(n ? n : 1, sizeof *s->class_names);
  if (!t || !s->class_names) {
    free(t);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "COCO file: no memory for %zu categories", n);
  }
  *cat_ids = t;
  s->n_classes = n; /* coco_free frees the names made so far (the others NULL) */
  char where[64];
  for (size_t i = 0; i < n; i++) {
    json_t *c = json_array_get(cats, i);
    snprintf(where, sizeof where, "category %zu (of the list)", i);
    if (!json_is_object(c)) return LAM_FAIL(LAM_ERR_IO, "COCO file: %s is not an object", where);
    LAM_TRY(get_int(c, "id", where, &t[i].id));
    t[i].index = i;
  }
  qsort(t, n, sizeof *t, cmp_id_index);
  for (size_t i = 0; i < n; i++) {
    if (i && t[i].id == t[i - 1].id) return LAM_FAIL(LAM_ERR_IO, "COCO file: two categories have the id %lld", t[i].id);
    json_t *name = json_object_get(json_array_get(cats, t[i].index), "name");
    if (!json_is_string(name))
      return LAM_FAIL(LAM_ERR_IO, "COCO file: category %lld has no \"name\" string", t[i].id);
    const char *nm = json_string_value(name);
    if (!nm[0] || strchr(nm, '\n') || strchr(nm, '\r'))
      return LAM_FAIL(LAM_ERR_IO, "COCO file: category %lld: its name is empty or holds a line break (classes.txt "
                      "has one name a line)", t[i].id);
    if (!(s->class_names[i] = strdup(nm))) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "COCO file: no memory");
    t[i].index = i + 1; /* from here on: the class the id maps to */
  }
  return LAM_OK;
}

static lam_status parse_images(json_t *imgs, coco_set *s, id_index **img_ids) {
  size_t n = json_array_size(imgs);
  s->images = calloc(n ? n : 1, sizeof *s->images);
  id_index *t = calloc(n ? n : 1, sizeof *t);
  if (!t || !s->images) {
    free(t);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "COCO file: no memory for %zu images", n);
  }
  *img_ids = t;
  s->n_images = n;
  char where[64];
  for (size_t i = 0; i < n; i++) {
    json_t *o = json_array_get(imgs, i);
    long long id = 0, h = 0, w = 0;
    snprintf(where, sizeof where, "image %zu (of the list)", i);
    if (!json_is_object(o)) return LAM_FAIL(LAM_ERR_IO, "COCO file: %s is not an object", where);
    LAM_TRY(get_int(o, "id", where, &id));
    snprintf(where, sizeof where, "image %lld", id);
    LAM_TRY(get_int(o, "height", where, &h));
    LAM_TRY(get_int(o, "width", where, &w));
    if (h < 1 || w < 1 || h > COCO_MAX_SIDE || w > COCO_MAX_SIDE || (uint64_t)h * (uint64_t)w > COCO_MAX_PIXELS)
      return LAM_FAIL(LAM_ERR_IO, "COCO file: image %lld is %lldx%lld (height x width): 1 to %u a side and at most "
                      "%llu pixels", id, h, w, COCO_MAX_SIDE, COCO_MAX_PIXELS);
    json_t *fn = json_object_get(o, "file_name");
    if (!json_is_string(fn)) return LAM_FAIL(LAM_ERR_IO, "COCO file: image %lld has no \"file_name\" string", id);
    if (!plain_name(json_string_value(fn)))
      return LAM_FAIL(LAM_ERR_IO, "COCO file: image %lld: file_name '%s' is not a plain file name (no folders, not "
                      "starting with '.')", id, json_string_value(fn));
    s->images[i] = (coco_image){id, strdup(json_string_value(fn)), (int)h, (int)w};
    if (!s->images[i].file_name) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "COCO file: no memory");
    t[i] = (id_index){id, i};
  }
  qsort(t, n, sizeof *t, cmp_id_index);
  for (size_t i = 1; i < n; i++)
    if (t[i].id == t[i - 1].id) return LAM_FAIL(LAM_ERR_IO, "COCO file: two images have the id %lld", t[i].id);
  return LAM_OK;
}

static lam_status parse_annotation(json_t *o, size_t i, const coco_set *s, const id_index *img_ids,
                                   const id_index *cat_ids, coco_ann *a) {
  char where[64];
  long long id = 0, image_id = 0, cat_id = 0, crowd = 0;
  snprintf(where, sizeof where, "annotation %zu (of the list)", i);
  if (!json_is_object(o)) return LAM_FAIL(LAM_ERR_IO, "COCO file: %s is not an object", where);
  LAM_TRY(get_int(o, "id", where, &id));
  a->id = id;
  snprintf(where, sizeof where, "annotation %lld", id);
  LAM_TRY(get_int(o, "image_id", where, &image_id));
  LAM_TRY(get_int(o, "category_id", where, &cat_id));
  if (json_object_get(o, "iscrowd")) LAM_TRY(get_int(o, "iscrowd", where, &crowd));
  const id_index *im = find_id(img_ids, s->n_images, image_id);
  if (!im) return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: image_id %lld is not among the images", id, image_id);
  const id_index *cat = find_id(cat_ids, s->n_classes, cat_id);
  if (!cat)
    return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: category_id %lld is not among the categories", id, cat_id);
  a->image = im->index;
  a->value = crowd ? 255 : (uint8_t)cat->index;
  json_t *seg = json_object_get(o, "segmentation");
  if (!seg) return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld has no \"segmentation\"", id);
  if (json_is_array(seg)) return parse_polygons(seg, id, a);
  if (json_is_object(seg)) return parse_rle(seg, id, &s->images[im->index], a);
  return LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: its segmentation is neither polygons (a list) nor RLE (an "
                  "object)", id);
}

static int cmp_ann_image(const void *x, const void *y) {
  const coco_ann *a = x, *b = y;
  if (a->image != b->image) return a->image < b->image ? -1 : 1;
  return cmp_ll(a->id, b->id);
}

lam_status coco_parse(const char *json, size_t len, coco_set **out) {
  LAM_CHECK_ARG(json && out, "coco_parse: %s is NULL", json ? "out" : "json");
  *out = NULL;
  json_error_t err;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
  if (!root)
    return LAM_FAIL(LAM_ERR_IO, "COCO file: not JSON: %s (line %d, column %d)", err.text, err.line, err.column);
  coco_set *s = calloc(1, sizeof *s);
  id_index *img_ids = NULL, *cat_ids = NULL;
  lam_status st = s ? LAM_OK : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "COCO file: no memory");
  json_t *imgs = NULL, *anns = NULL, *cats = NULL;
  if (st == LAM_OK && !json_is_object(root)) st = LAM_FAIL(LAM_ERR_IO, "COCO file: the top level is not an object");
  if (st == LAM_OK) imgs = get_array(root, "images", &st);
  if (st == LAM_OK) anns = get_array(root, "annotations", &st);
  if (st == LAM_OK) cats = get_array(root, "categories", &st);
  if (st == LAM_OK) st = parse_categories(cats, s, &cat_ids);
  if (st == LAM_OK) st = parse_images(imgs, s, &img_ids);
  if (st == LAM_OK) {
    size_t n = json_array_size(anns);
    s->anns = calloc(n ? n : 1, sizeof *s->anns);
    s->first = calloc(s->n_images + 1, sizeof *s->first);
    if (!s->anns || !s->first) st = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "COCO file: no memory for %zu annotations", n);
    for (size_t i = 0; i < n && st == LAM_OK; i++) {
      st = parse_annotation(json_array_get(anns, i), i, s, img_ids, cat_ids, &s->anns[i]);
      s->n_anns = i + 1; /* freed by coco_free, the failing one's parts too */
    }
  }
  if (st == LAM_OK) {
    qsort(s->anns, s->n_anns, sizeof *s->anns, cmp_ann_image);
    for (size_t i = 1; i < s->n_anns && st == LAM_OK; i++) /* an id is the order of equal areas: one each */
      if (s->anns[i].image == s->anns[i - 1].image && s->anns[i].id == s->anns[i - 1].id)
        st = LAM_FAIL(LAM_ERR_IO, "COCO file: two annotations of image %lld have the id %lld",
                      s->images[s->anns[i].image].id, s->anns[i].id);
  }
  if (st == LAM_OK) {
    for (size_t i = 0; i < s->n_anns; i++) s->first[s->anns[i].image + 1]++;
    for (size_t i = 0; i < s->n_images; i++) s->first[i + 1] += s->first[i];
  }
  free(img_ids), free(cat_ids);
  json_decref(root);
  if (st != LAM_OK) {
    coco_free(s);
    return st;
  }
  *out = s;
  return LAM_OK;
}

void coco_free(coco_set *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n_images; i++) free(s->images[i].file_name);
  for (size_t i = 0; i < s->n_classes; i++) free(s->class_names[i]);
  for (size_t i = 0; i < s->n_anns; i++) free(s->anns[i].part_len), free(s->anns[i].xy), free(s->anns[i].counts);
  free(s->images), free(s->class_names), free(s->anns), free(s->first), free(s);
}

size_t coco_n_images(const coco_set *s) { return s->n_images; }
const coco_image *coco_get_image(const coco_set *s, size_t i) { return &s->images[i]; }
size_t coco_n_classes(const coco_set *s) { return s->n_classes; }
const char *coco_class_name(const coco_set *s, size_t k) { return s->class_names[k]; }

/* ---- rasterizing ---- */

/* Sets bits[i] = 1 over the runs of 1s of column-major counts (0s first) into a row-major h x w bitmap. */
static void or_runs(const uint32_t *counts, size_t n, int h, int w, uint8_t *bits) {
  uint64_t pos = 0;
  for (size_t j = 0; j < n; j++) {
    if (j % 2)
      for (uint64_t p = pos; p < pos + counts[j]; p++) bits[(size_t)(p % (uint64_t)h) * w + (size_t)(p / (uint64_t)h)] = 1;
    pos += counts[j];
  }
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

/* One point of the boundary walk: where it crosses a pixel-centre column (between u0 and u1 on the 5x grid), the
 * column-major index of the first pixel inside below the crossing goes into cross[]. */
typedef struct walk {
  int h, w;
  int have_prev, pu, pv;
  uint32_t *cross;
  size_t n, cap;
  int oom;
} walk;

static void walk_point(walk *k, int u, int v) {
  const double scale = 5;
  if (k->have_prev && u != k->pu) {
    /* the crossing's column: the walk's x on the 5x grid back at pixel scale; only pixel centres count */
    double xd = (double)(u < k->pu ? u : u - 1);
    xd = (xd + .5) / scale - .5;
    if (floor(xd) == xd && xd >= 0 && xd <= k->w - 1) {
      double yd = (double)(v < k->pv ? v : k->pv);
      yd = (yd + .5) / scale - .5;
      yd = yd < 0 ? 0 : yd > k->h ? k->h : yd;
      yd = ceil(yd);
      if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 64;
        uint32_t *c = realloc(k->cross, cap * sizeof *c);
        if (!c) {
          k->oom = 1;
          return;
        }
        k->cross = c, k->cap = cap;
      }
      k->cross[k->n++] = (uint32_t)((int)xd * k->h + (int)yd);
    }
  }
  k->have_prev = 1, k->pu = u, k->pv = v;
}

/* One polygon (k points of xy) OR'd into bits (h x w), as pycocotools' rleFrPoly makes its mask: the points
 * upsampled 5x and rounded, each edge walked one step of the 5x grid at a time along its longer axis (walked
 * from the lower end, so both directions round alike), every crossing of a pixel-centre column recorded at the
 * first pixel centre below the boundary; the sorted crossings' gaps are the RLE (a pair at the same pixel
 * cancels), decoded as 0s first. */
static lam_status rasterize_polygon(const double *xy, size_t k, int h, int w, long long id, uint8_t *bits) {
  const double scale = 5;
  int *x = malloc((k + 1) * sizeof *x), *y = malloc((k + 1) * sizeof *y);
  walk wk = {h, w, 0, 0, 0, NULL, 0, 0, 0};
  lam_status st = LAM_OK;
  if (!x || !y) st = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "annotation %lld: no memory for its polygon", id);
  uint64_t steps = 0;
  for (size_t j = 0; j < k && st == LAM_OK; j++) {
    x[j] = (int)(scale * xy[2 * j] + .5), y[j] = (int)(scale * xy[2 * j + 1] + .5); /* C's cast: toward 0 */
  }
  if (st == LAM_OK) {
    x[k] = x[0], y[k] = y[0];
    for (size_t j = 0; j < k; j++) {
      int dx = abs(x[j + 1] - x[j]), dy = abs(y[j + 1] - y[j]);
      steps += (uint64_t)(dx > dy ? dx : dy) + 1;
    }
    if (steps > COCO_MAX_WALK)
      st = LAM_FAIL(LAM_ERR_IO, "COCO file: annotation %lld: its polygon's boundary is %llu steps of 1/5 pixel (at "
                    "most %llu)", id, (unsigned long long)steps, COCO_MAX_WALK);
  }
  for (size_t j = 0; j < k && st == LAM_OK && !wk.oom; j++) {
    int xs = x[j], xe = x[j + 1], ys = y[j], ye = y[j + 1];
    const int dx = abs(xe - xs), dy = abs(ye - ys);
    const int flip = (dx >= dy && xs > xe) || (dx < dy && ys > ye);
    if (flip) {
      int t = xs;
      xs = xe, xe = t, t = ys, ys = ye, ye = t;
    }
    if (dx >= dy) {
      const double s = dx ? (double)(ye - ys) / dx : 0; /* dx = dy = 0: one point, s unused */
      for (int d = 0; d <= dx; d++) {
        const int t = flip ? dx - d : d;
        walk_point(&wk, t + xs, (int)(ys + s * t + .5));
      }
    } else {
      const double s = (double)(xe - xs) / dy;
      for (int d = 0; d <= dy; d++) {
        const int t = flip ? dy - d : d;
        walk_point(&wk, (int)(xs + s * t + .5), t + ys);
      }
    }
  }
  if (st == LAM_OK && wk.oom) st = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "annotation %lld: no memory for its polygon", id);
  if (st == LAM_OK) {
    /* the crossings sorted, the image's end last; their gaps are the runs, a zero gap merging its neighbours */
    uint32_t *a = realloc(wk.cross, (wk.n + 1) * sizeof *a);
    if (!a) st = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "annotation %lld: no memory for its polygon", id);
    else {
      wk.cross = a;
      a[wk.n++] = (uint32_t)((uint64_t)h * w);
      qsort(a, wk.n, sizeof *a, cmp_u32);
      uint32_t prev = 0;
      for (size_t j = 0; j < wk.n; j++) {
        uint32_t t = a[j];
        a[j] -= prev, prev = t;
      }
      size_t m = 0, j = 0;
      a[m++] = a[j++]; /* in place: m <= j throughout */
      while (j < wk.n) {
        if (a[j] > 0) a[m++] = a[j++];
        else if (++j < wk.n) a[m - 1] += a[j++];
      }
      or_runs(a, m, h, w, bits);
    }
  }
  free(x), free(y), free(wk.cross);
  return st;
}

/* Annotation a's pixels as 0/1 in bits (h x w, cleared first). */
static lam_status ann_bits(const coco_ann *a, int h, int w, uint8_t *bits) {
  memset(bits, 0, (size_t)h * w);
  if (a->kind == SEG_RLE) {
    or_runs(a->counts, a->ncounts, h, w, bits);
    return LAM_OK;
  }
  const double *xy = a->xy;
  for (size_t p = 0; p < a->nparts; xy += 2 * a->part_len[p], p++)
    LAM_TRY(rasterize_polygon(xy, a->part_len[p], h, w, a->id, bits));
  return LAM_OK;
}

typedef struct by_area {
  uint64_t area;
  size_t ann;
} by_area;
static int cmp_area_desc(const void *x, const void *y) {
  const by_area *a = x, *b = y;
  if (a->area != b->area) return a->area > b->area ? -1 : 1;
  return a->ann < b->ann ? -1 : a->ann > b->ann; /* equal areas: the file's order (sorted by id) */
}

lam_status coco_mask(const coco_set *s, size_t i, uint8_t *mask) {
  LAM_CHECK_ARG(s && mask && i < s->n_images, "coco_mask: no image %zu (of %zu)", i, s ? s->n_images : 0);
  const coco_image *im = &s->images[i];
  const size_t P = (size_t)im->h * im->w, a0 = s->first[i], na = s->first[i + 1] - a0;
  memset(mask, 0, P);
  if (!na) return LAM_OK;
  uint8_t *bits = malloc(P);
  by_area *order = malloc(na * sizeof *order);
  lam_status st = bits && order ? LAM_OK
                                : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "COCO image '%s': no memory for its masks",
                                           im->file_name);
  /* two passes, each instance rasterized twice, so that memory stays one image's whatever the count */
  for (size_t j = 0; j < na && st == LAM_OK; j++) {
    st = ann_bits(&s->anns[a0 + j], im->h, im->w, bits);
    uint64_t area = 0;
    for (size_t p = 0; p < P; p++) area += bits[p];
    order[j] = (by_area){area, a0 + j};
  }
  if (st == LAM_OK) qsort(order, na, sizeof *order, cmp_area_desc);
  for (size_t j = 0; j < na && st == LAM_OK; j++) { /* largest first: the smaller drawn over it */
    const coco_ann *a = &s->anns[order[j].ann];
    st = ann_bits(a, im->h, im->w, bits);
    for (size_t p = 0; p < P && st == LAM_OK; p++)
      if (bits[p]) mask[p] = a->value;
  }
  free(bits), free(order);
  return st;
}

void coco_fit_mask(const uint8_t *m, int h, int w, int H, int W, uint8_t *out) {
  double scale, oy, ox;
  fit_geometry(h, w, H, W, &scale, &oy, &ox);
  for (int y = 0; y < H; y++) {
    int sy = (int)floor((y + oy + 0.5) / scale); /* the source pixel under the output pixel's centre */
    sy = sy < 0 ? 0 : sy > h - 1 ? h - 1 : sy;
    for (int x = 0; x < W; x++) {
      int sx = (int)floor((x + ox + 0.5) / scale);
      sx = sx < 0 ? 0 : sx > w - 1 ? w - 1 : sx;
      out[(size_t)y * W + x] = m[(size_t)sy * w + sx];
    }
  }
}
