/* folder.c — image folders as data sets (the ImageFolder layout): DIR/train/CLASS/NAME.png|jpg|jpeg and
 * DIR/test/CLASS/... or DIR/val/CLASS/..., or flat DIR/CLASS/... (one part), the classes the training part's
 * folder names in sorted order. Every file is decoded (image.c) on all host threads into one uint8 array, made
 * the set's channels (most images'), fitted to a fixed size where asked, and kept as an IDX pair in a cache
 * folder under a key of every file's name, size and modification time (and the options), so a later run with
 * the files unchanged reads two IDX files instead of decoding again. A part whose decoded bytes would not fit in memory
 * (lam_image_opts.memory_cap), or one asked to, streams instead: each file is decoded when its sample is asked for
 * (sample.c), by the same code as the whole part's. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "../internal.h"
#include "../status.h"

#define FOLDER_MAX_CLASSES 256
#define FOLDER_CACHE_VERSION "lamina image cache 2" /* 2: 16-bit PNGs by the high byte, alpha dropped, grey/colour converted */

typedef struct entry {
  char *path;
  int cls;
  long long size, mtime_ns;
} entry;

typedef struct entries {
  entry *e;
  size_t n, cap;
} entries;

static void entries_free(entries *l) {
  for (size_t i = 0; i < l->n; i++) free(l->e[i].path);
  free(l->e);
  l->e = NULL, l->n = l->cap = 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The names in dir that are folders (folders = 1) or image files (0), sorted; *names malloc'd. */
static lam_status list(const char *dir, int folders, char ***names, size_t *count) {
  return folder_list(dir, folders, lam_image_file_name, names, count);
}

int data_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int data_is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

lam_status folder_list(const char *dir, int folders, int (*want)(const char *), char ***names, size_t *count) {
  *names = NULL, *count = 0;
  DIR *d = opendir(dir);
  if (!d) return LAM_FAIL(LAM_ERR_IO, "image folder: cannot list '%s': %s", dir, strerror(errno));
  size_t cap = 0, n = 0;
  char **v = NULL;
  lam_status s = LAM_OK;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue; /* ., .., hidden files and the cache */
    if (!folders && !want(e->d_name)) continue;
    /* the entry's type from the listing where the file system gives it (a stat per file costs a cached run
     * a third of its start on 70 000 files); a link or an unknown type is looked up */
    int is_dir = e->d_type == DT_DIR, is_reg = e->d_type == DT_REG;
    if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
      char full[PATH_MAX];
      struct stat st;
      if ((size_t)snprintf(full, sizeof full, "%s/%s", dir, e->d_name) >= sizeof full || stat(full, &st) != 0) continue;
      is_dir = S_ISDIR(st.st_mode), is_reg = S_ISREG(st.st_mode);
    }
    if (folders ? !is_dir : !is_reg) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      char **t = realloc(v, cap * sizeof *v);
      if (!t) {
        s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image folder: no host memory to list '%s'", dir);
        break;
      }
      v = t;
    }
    if (!(v[n] = strdup(e->d_name))) {
      s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image folder: no host memory to list '%s'", dir);
      break;
    }
    n++;
  }
  closedir(d);
  if (s != LAM_OK) {
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
    return s;
  }
  if (n) qsort(v, n, sizeof *v, cmp_str); /* v is NULL when nothing was listed */
  *names = v, *count = n;
  return LAM_OK;
}
static void names_free(char **v, size_t n) { folder_names_free(v, n); }
void folder_names_free(char **v, size_t n) {
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
}

static int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Whether dir holds a folder (not hidden) with an image file in it: a class folder of the flat layout. */
static int has_class_folder(const char *dir) {
  char **sub;
  size_t ns;
  if (list(dir, 1, &sub, &ns) != LAM_OK) return 0;
  int found = 0;
  for (size_t i = 0; i < ns && !found; i++) {
    char cdir[PATH_MAX];
    char **files;
    size_t nf;
    if ((size_t)snprintf(cdir, sizeof cdir, "%s/%s", dir, sub[i]) >= sizeof cdir || list(cdir, 0, &files, &nf) != LAM_OK)
      continue;
    found = nf > 0;
    names_free(files, nf);
  }
  names_free(sub, ns);
  return found;
}

/* Whether dir holds files of another kind of set (the MNIST layout's train-images*, t10k-*, test-*): then it is
 * not read as a flat image folder even where it has folders of images beside them. */
static int has_set_files(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return 0;
  int found = 0;
  for (struct dirent *e; !found && (e = readdir(d)) != NULL;)
    found = e->d_type != DT_DIR &&
            (!strncmp(e->d_name, "train-", 6) || !strncmp(e->d_name, "t10k-", 5) || !strncmp(e->d_name, "test-", 5));
  closedir(d);
  return found;
}

int lam_dataset_image_folder_layout(const char *dir) {
  /* mask folders first: a generic one's train/images would read as a class named "images" */
  if (lam_dataset_mask_folder_layout(dir) != LAM_MASKS_NONE)
    return mask_folder_has_test(dir) ? LAM_FOLDER_SPLIT : LAM_FOLDER_TRAIN_ONLY;
  /* then videos listed in DIR/train.csv: Kinetics' folders beside its lists would read as class folders */
  if (dir && video_csv_layout(dir)) return video_csv_has_test(dir) ? LAM_FOLDER_SPLIT : LAM_FOLDER_TRAIN_ONLY;
  char t[PATH_MAX];
  if (!dir || (size_t)snprintf(t, sizeof t, "%s/train", dir) >= sizeof t) return LAM_FOLDER_NONE;
  if (is_dir(t)) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/test", dir);
    if (is_dir(p)) return LAM_FOLDER_SPLIT;
    snprintf(p, sizeof p, "%s/val", dir);
    return is_dir(p) ? LAM_FOLDER_SPLIT : LAM_FOLDER_TRAIN_ONLY;
  }
  if (!is_dir(dir) || has_set_files(dir) || !has_class_folder(dir)) return LAM_FOLDER_NONE;
  return LAM_FOLDER_FLAT;
}

/* Where a part's class folders are: *cdir the folder whose subfolders name the classes (DIR/train, or DIR in the
 * flat layout), *pdir the part's (DIR/train; DIR/test, or DIR/val where test/ is not there or holds no class
 * folders, ImageNet's name; DIR for both parts of a flat folder, which is all one part). */
static lam_status part_dirs(const char *dir, int train, char *cdir, char *pdir, size_t cap) {
  const int layout = lam_dataset_image_folder_layout(dir);
  if (layout == LAM_FOLDER_FLAT) {
    snprintf(cdir, cap, "%s", dir), snprintf(pdir, cap, "%s", dir);
    return LAM_OK;
  }
  snprintf(cdir, cap, "%s/train", dir);
  if (train) {
    snprintf(pdir, cap, "%s/train", dir);
    return LAM_OK;
  }
  if (layout == LAM_FOLDER_TRAIN_ONLY)
    return LAM_FAIL(LAM_ERR_IO, "image folder '%s' has a train/ folder but neither test/ nor val/ beside it: add one "
                    "(test/CLASS/... as train/ is laid out), or train with --val-split F (lam_dataset_split), whose "
                    "held-out part is then the test part", dir);
  char t[PATH_MAX], v[PATH_MAX];
  snprintf(t, sizeof t, "%s/test", dir), snprintf(v, sizeof v, "%s/val", dir);
  char **sub = NULL;
  size_t ns = 0;
  const int test_has_classes = is_dir(t) && list(t, 1, &sub, &ns) == LAM_OK && ns > 0;
  if (sub) names_free(sub, ns);
  snprintf(pdir, cap, "%s", test_has_classes || !is_dir(v) ? t : v);
  return LAM_OK;
}

/* The part's files, class by class in the training part's order, each class's files sorted by name. A class
 * folder with no image file is an error naming it (as torchvision's ImageFolder: "Found no valid file for the
 * classes ..."): an empty folder is a copy that went wrong, not a class to learn. */
static lam_status scan(const char *dir, int train, entries *out, char ***classes, size_t *nclasses) {
  char tdir[PATH_MAX], pdir[PATH_MAX];
  memset(out, 0, sizeof *out);
  *classes = NULL, *nclasses = 0;
  LAM_TRY(part_dirs(dir, train, tdir, pdir, sizeof tdir));
  LAM_TRY(list(tdir, 1, classes, nclasses));
  if (*nclasses == 0 || *nclasses > FOLDER_MAX_CLASSES) {
    size_t k = *nclasses;
    names_free(*classes, k);
    *classes = NULL;
    return LAM_FAIL(LAM_ERR_IO, "image folder '%s': '%s' holds %zu class folders; it needs 1 to %d (one folder per "
                    "class, the images in it)", dir, tdir, k, FOLDER_MAX_CLASSES);
  }
  char **parts;
  size_t nparts;
  lam_status s = list(pdir, 1, &parts, &nparts);
  for (size_t i = 0; i < nparts && s == LAM_OK; i++) { /* a test class must be a training class */
    int known = 0;
    for (size_t k = 0; k < *nclasses && !known; k++) known = !strcmp(parts[i], (*classes)[k]);
    if (!known)
      s = LAM_FAIL(LAM_ERR_IO, "image folder '%s': '%s/%s' is not one of the training classes (the folders of '%s'): "
                   "every class needs training images", dir, pdir, parts[i], tdir);
  }
  if (nparts) names_free(parts, nparts);
  char empty[512] = ""; /* the empty class folders' names, for the message */
  size_t nempty = 0;
  for (size_t k = 0; k < *nclasses && s == LAM_OK; k++) {
    char cdir[PATH_MAX];
    if ((size_t)snprintf(cdir, sizeof cdir, "%s/%s", pdir, (*classes)[k]) >= sizeof cdir) continue;
    struct stat st;
    if (stat(cdir, &st) != 0) continue; /* a class the test part has no images of */
    char **files;
    size_t nf;
    s = list(cdir, 0, &files, &nf);
    if (s == LAM_OK && nf == 0 && nempty++ < 8) {
      size_t at = strlen(empty);
      snprintf(empty + at, sizeof empty - at, "%s'%s'", at ? ", " : "", (*classes)[k]);
    }
    for (size_t i = 0; i < nf && s == LAM_OK; i++) {
      char full[PATH_MAX];
      if ((size_t)snprintf(full, sizeof full, "%s/%s", cdir, files[i]) >= sizeof full || stat(full, &st) != 0) continue;
      if (out->n == out->cap) {
        out->cap = out->cap ? 2 * out->cap : 1024;
        entry *t = realloc(out->e, out->cap * sizeof *t);
        if (!t) {
          s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image folder: no host memory for the list of files");
          break;
        }
        out->e = t;
      }
      entry *e = &out->e[out->n];
      if (!(e->path = strdup(full))) {
        s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image folder: no host memory for the list of files");
        break;
      }
      e->cls = (int)k, e->size = (long long)st.st_size;
      e->mtime_ns = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
      out->n++;
    }
    if (s == LAM_OK || nf) names_free(files, nf);
  }
  if (s == LAM_OK && nempty)
    s = LAM_FAIL(LAM_ERR_IO, "image folder '%s': found no .png, .jpg or .jpeg file in %zu class folder%s of '%s': %s%s; "
                 "every class needs images (remove the empty folder%s, or put its images in)", dir, nempty,
                 nempty == 1 ? "" : "s", pdir, empty, nempty > 8 ? ", ..." : "", nempty == 1 ? "" : "s");
  if (s == LAM_OK && out->n == 0)
    s = LAM_FAIL(LAM_ERR_IO, "image folder '%s': no .png, .jpg or .jpeg files in the class folders of '%s'", dir, pdir);
  if (s != LAM_OK) {
    entries_free(out);
    names_free(*classes, *nclasses);
    *classes = NULL;
  }
  return s;
}

/* FNV-1a over bytes. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}
/* The cache key: the format's version, the options, and every file's path, class, size and time. */
static uint64_t cache_key(const entries *l, const lam_image_opts *o) {
  uint64_t h = fnv(1469598103934665603ULL, FOLDER_CACHE_VERSION, sizeof FOLDER_CACHE_VERSION);
  const int opt[3] = {o->h, o->w, o->skip_bad != 0};
  h = fnv(h, opt, sizeof opt);
  for (size_t i = 0; i < l->n; i++) {
    const entry *e = &l->e[i];
    h = fnv(h, e->path, strlen(e->path) + 1);
    h = fnv(h, &e->cls, sizeof e->cls);
    h = fnv(h, &e->size, sizeof e->size);
    h = fnv(h, &e->mtime_ns, sizeof e->mtime_ns);
  }
  return h;
}

int lam_image_gpu_decode(void) {
#ifdef LAMINA_WITH_NVJPEG
  return 1;
#else
  return 0;
#endif
}

/* Files handed to nvJPEG at a time: large batches keep its engines busy; the bytes of a batch are held at
 * once (some MB for small images). */
#define FOLDER_GPU_BATCH 4096

/* Whether nvJPEG gets this file: a JPEG that ends in its end-of-image marker, of up to DATA_MAX_SIDE a side by its
 * header. A file cut short goes to libjpeg, which says so (nvJPEG would decode what is there); a larger one too,
 * whose bounds and DCT scaling are the host's (a header of 60000x60000 would be nvJPEG's to allocate). */
static int gpu_takes(const uint8_t *b, size_t n) {
  int h = 0, w = 0;
  return b && image_is_jpeg(b, n) && n >= 4 && b[n - 2] == 0xff && b[n - 1] == 0xd9 && image_jpeg_size(b, n, &h, &w) &&
         h >= 1 && w >= 1 && h <= (int)DATA_MAX_SIDE && w <= (int)DATA_MAX_SIDE;
}

/* nvJPEG for --decode gpu (LAM_DECODE_GPU); an error where it cannot be had. */
static lam_status gpu_open(gpu_jpeg **g) {
  *g = NULL;
#ifdef LAMINA_WITH_NVJPEG
  lam_status s = gpu_jpeg_open(g);
  if (s == LAM_OK) return LAM_OK;
  return LAM_FAIL(s, "decoding JPEG on the GPU (--decode gpu): %s", lam_last_error());
#else
  return LAM_FAIL(LAM_ERR_UNSUPPORTED, "decoding JPEG on the GPU (--decode gpu): this lamina was built without nvJPEG "
                  "(the CUDA toolkit's libnvjpeg was not found when it was built); use --decode cpu");
#endif
}

/* Decodes every file into one (n, H, W, c) array; a file that cannot be decoded is an error naming it, or
 * with skip_bad left out (*kept the images kept, in order). Channels are want_c, or where 0 the first image's;
 * an image of the other count is converted (*converted counts them). The size is opts' or the first image's;
 * another size without opts' size is an error naming it and saying what to do. JPEG files go to nvJPEG in
 * batches where o asks: their bytes read on all host threads, decoded and fitted (fit.h, as the host fits) on
 * the GPU, straight into place. */
/* The part's geometry: the first file that decodes (*f0) gives its channels, and its size where o has none. */
static lam_status probe_first(const char *dir, const entries *l, const lam_image_opts *o, size_t *f0, int *C, int *H,
                              int *W) {
  data_image first;
  lam_status s = LAM_ERR_IO;
  for (*f0 = 0; *f0 < l->n; (*f0)++) {
    s = image_read_fit(l->e[*f0].path, o->h, o->w, &first);
    if (s == LAM_OK || !o->skip_bad || s != LAM_ERR_IO) break;
  }
  if (s != LAM_OK) return *f0 == l->n ? LAM_FAIL(LAM_ERR_IO, "image folder '%s': no file could be decoded", dir) : s;
  *C = first.c, *H = o->h ? o->h : first.h, *W = o->w ? o->w : first.w;
  free(first.px);
  return LAM_OK;
}

/* The host's decode of the file at path (its bytes where read already, else NULL) into out (H, W, C), fitted to
 * h x w where they are not 0 (else it must be H x W, as the part's first file, `first`, is); *converted set where
 * its channels were changed to C. The same arithmetic for a part decoded whole and for a streamed one. */
static lam_status decode_file(const char *path, const uint8_t *bytes, size_t len, int h, int w, int C, int H, int W,
                              const char *first, uint8_t *out, int *converted) {
  data_image im = {0};
  *converted = 0;
  lam_status st = bytes ? image_decode_fit(path, bytes, len, h, w, &im) : image_read_fit(path, h, w, &im);
  if (st == LAM_OK && im.c != C) /* a grey JPEG in a colour set: converted, as torchvision's loader does */
    st = image_to_channels(&im, C), *converted = 1;
  if (st == LAM_OK && !h && (im.h != H || im.w != W))
    st = LAM_FAIL(LAM_ERR_IO, "image file '%s' is %dx%d, but the set's first image ('%s') is %dx%d: give --size HxW "
                  "(size in the API) to fit every image to one size", path, im.w, im.h, first, W, H);
  if (st == LAM_OK) image_fit(&im, H, W, out);
  free(im.px);
  return st;
}

static lam_status decode_all(const char *dir, const entries *l, lam_image_opts *o, int want_c, uint8_t **px, int *H,
                             int *W, int *C, uint8_t **keep, size_t *kept, size_t *converted) {
  size_t f0 = 0;
  lam_status s = probe_first(dir, l, o, &f0, C, H, W);
  if (s != LAM_OK) return s;
  if (want_c) *C = want_c;
  size_t n_conv = 0;
  const size_t img = (size_t)*H * *W * *C;
  *px = malloc(l->n * img);
  *keep = calloc(l->n, 1);
  if (!*px || !*keep) {
    free(*px), free(*keep);
    *px = *keep = NULL;
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image folder '%s': no host memory for %zu images of %dx%dx%d", dir, l->n,
                    *C, *H, *W);
  }
  /* The GPU only where o asks for it (LAM_DECODE_GPU) and the first file is a JPEG (a set is one format in
   * practice; a PNG folder never starts the GPU). Auto is the host's libjpeg, measured faster on the H200
   * machine (16 cores) for every set tried — 60 000 JPEGs of 28x28 and 4 000 of 64 to 512 a side
   * (docs/bench/JOURNAL.md, "Image folders"): nvJPEG's start costs about a second and each small image some
   * 40 us more. */
  gpu_jpeg *g = NULL;
  int want_gpu = o->decoder == LAM_DECODE_GPU && image_formats() & IMAGE_JPEG;
  if (want_gpu) {
    uint8_t *b0 = NULL;
    size_t n0 = 0;
    want_gpu = image_file_bytes(l->e[f0].path, &b0, &n0) == LAM_OK && image_is_jpeg(b0, n0);
    free(b0);
  }
  if (want_gpu && (s = gpu_open(&g)) != LAM_OK) {
    free(*px), free(*keep);
    *px = *keep = NULL;
    return s;
  }
  const size_t batch = g ? FOLDER_GPU_BATCH : (l->n > f0 ? l->n - f0 : 1);
  uint8_t **bytes = g ? calloc(batch, sizeof *bytes) : NULL;
  size_t *lens = g ? calloc(batch, sizeof *lens) : NULL;
  const uint8_t **gin = g ? calloc(batch, sizeof *gin) : NULL;
  size_t *glen = g ? calloc(batch, sizeof *glen) : NULL, *gat = g ? calloc(batch, sizeof *gat) : NULL;
  uint8_t **gdst = g ? calloc(batch, sizeof *gdst) : NULL;
  int *gdone = g ? calloc(batch, sizeof *gdone) : NULL, *ongpu = g ? calloc(batch, sizeof *ongpu) : NULL;
  if (g && (!bytes || !lens || !gin || !glen || !gat || !gdst || !gdone || !ongpu))
    s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image folder '%s': no host memory for a batch of files", dir);
  size_t bad_at = (size_t)-1; /* the first file (in order) that failed, for its message */
  lam_status bad_status = LAM_OK;
  char bad_msg[1024] = "";
  size_t on_gpu = 0;
  for (size_t a = f0; a < l->n && s == LAM_OK && bad_at == (size_t)-1; a += batch) {
    const size_t m = l->n - a < batch ? l->n - a : batch;
    if (g) { /* the batch's bytes on all host threads; nvJPEG takes the JPEGs that end as one should */
#pragma omp parallel for schedule(dynamic, 16)
      for (size_t j = 0; j < m; j++)
        if (image_file_bytes(l->e[a + j].path, &bytes[j], &lens[j]) != LAM_OK) bytes[j] = NULL; /* read again below */
      int k = 0;
      for (size_t j = 0; j < m; j++) {
        ongpu[j] = 0;
        if (gpu_takes(bytes[j], lens[j]))
          gin[k] = bytes[j], glen[k] = lens[j], gdst[k] = *px + (a + j) * img, gat[k++] = j;
      }
#ifdef LAMINA_WITH_NVJPEG
      if (k) s = gpu_jpeg_decode(g, k, gin, glen, *C, *H, *W, o->h != 0, gdst, gdone);
#else
      s = LAM_FAIL(LAM_ERR_UNSUPPORTED, "image folder: built without nvJPEG"); /* never: g is NULL in such a build */
#endif
      if (s != LAM_OK) {
        for (size_t j = 0; j < m; j++) free(bytes[j]);
        break;
      }
      for (int q = 0; q < k; q++)
        if (gdone[q]) ongpu[gat[q]] = 1, on_gpu++;
    }
#pragma omp parallel for schedule(dynamic, 16)
    for (size_t j = 0; j < m; j++) {
      const size_t i = a + j;
      if (g && ongpu[j]) { /* decoded and fitted into its place by nvJPEG's path */
        free(bytes[j]);
        (*keep)[i] = 1;
        continue;
      }
      int conv = 0; /* the host's; or a read that failed (bytes NULL: read again), for its message */
      lam_status st = decode_file(l->e[i].path, g ? bytes[j] : NULL, g ? lens[j] : 0, o->h, o->w, *C, *H, *W,
                                  l->e[f0].path, *px + i * img, &conv);
      if (g) free(bytes[j]);
      if (conv && st == LAM_OK) {
#pragma omp atomic
        n_conv++;
      }
      if (st == LAM_ERR_IO && o->skip_bad) continue; /* a damaged or unreadable file: left out, counted */
      if (st == LAM_OK) {
        (*keep)[i] = 1;
      } else {
#pragma omp critical(folder_bad)
        if (i < bad_at) { /* lam_last_error is this thread's: its message is this file's */
          bad_at = i, bad_status = st;
          snprintf(bad_msg, sizeof bad_msg, "%s", lam_last_error());
        }
      }
    }
  }
  free(bytes), free(lens), free(gin), free(glen), free(gat), free(gdst), free(gdone), free(ongpu);
#ifdef LAMINA_WITH_NVJPEG
  if (g) gpu_jpeg_close(g);
#endif
  o->decoded_gpu = on_gpu;
  *converted = n_conv;
  if (s == LAM_OK && bad_at != (size_t)-1) s = LAM_FAIL(bad_status, "%s", bad_msg);
  if (s != LAM_OK) {
    free(*px), free(*keep);
    *px = *keep = NULL;
    return s;
  }
  size_t k = 0; /* the kept images moved together, in order */
  for (size_t i = 0; i < l->n; i++)
    if ((*keep)[i]) {
      if (k != i) memmove(*px + k * img, *px + i * img, img);
      k++;
    }
  *kept = k;
  return LAM_OK;
}

/* The cache's two files for this part and key. */
static void cache_paths(const char *cache, int train, uint64_t key, int C, char *img, char *lab, size_t cap) {
  const char *part = train ? "train" : "t10k";
  snprintf(img, cap, "%s/%s-%016llx-images-idx%d-ubyte", cache, part, (unsigned long long)key, C > 1 ? 4 : 3);
  snprintf(lab, cap, "%s/%s-%016llx-labels-idx1-ubyte", cache, part, (unsigned long long)key);
}

/* A name cache_paths makes for this part: PART-<16 hex digits>-{images-idx3,images-idx4,labels-idx1}-ubyte, and
 * nothing else (Fashion-MNIST's own train-images-idx3-ubyte is not one). */
static int cache_name(const char *name, const char *part) {
  size_t n = strlen(part);
  if (strncmp(name, part, n)) return 0;
  for (int i = 0; i < 16; i++)
    if (!((name[n + i] >= '0' && name[n + i] <= '9') || (name[n + i] >= 'a' && name[n + i] <= 'f'))) return 0;
  const char *rest = name + n + 16;
  return !strcmp(rest, "-images-idx3-ubyte") || !strcmp(rest, "-images-idx4-ubyte") ||
         !strcmp(rest, "-labels-idx1-ubyte");
}

/* Removes this part's cache files of other keys from the cache folder (each run with changed files would
 * otherwise leave its set behind): only files of cache_name's pattern that are IDX files, as lamina wrote
 * them. The cache folder may be one the user keeps other files in (--cache DIR): nothing else is touched. */
static void cache_prune(const char *cache, int train, uint64_t key) {
  const char *part = train ? "train-" : "t10k-";
  char keep[40];
  snprintf(keep, sizeof keep, "%s%016llx-", part, (unsigned long long)key);
  DIR *d = opendir(cache);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    const char *name = e->d_name;
    if (!cache_name(name, part) || !strncmp(name, keep, strlen(keep))) continue;
    char full[PATH_MAX];
    struct stat st;
    if ((size_t)snprintf(full, sizeof full, "%s/%s", cache, name) >= sizeof full || lstat(full, &st) != 0 ||
        !S_ISREG(st.st_mode) || lam_file_kind_check(full, "cache file", LAM_FILE_IDX) != LAM_OK)
      continue;
    unlink(full);
  }
  closedir(d);
}

/* Writes the part (px still (n, h, w[, c])) as the cache's IDX pair. The default cache beside the data is
 * left out where that folder cannot be made (a read-only set): one asked for must work. */
static lam_status cache_write(const char *dir, const char *cache, int by_default, int train, uint64_t key,
                              const uint8_t *px, const lam_dataset *d, int *written) {
  struct stat st;
  *written = 0;
  if (stat(cache, &st) != 0 && mkdir(cache, 0777) != 0 && errno != EEXIST) {
    if (by_default) return LAM_OK;
    return LAM_FAIL(LAM_ERR_IO, "image folder '%s': cannot make the cache folder '%s': %s (give another, or '' for "
                    "none)", dir, cache, strerror(errno));
  }
  if (by_default && access(cache, W_OK) != 0) return LAM_OK;
  char img[PATH_MAX + 64], lab[PATH_MAX + 64];
  cache_paths(cache, train, key, d->c, img, lab, sizeof img);
  const uint64_t dims[4] = {d->n, (uint64_t)d->h, (uint64_t)d->w, (uint64_t)d->c};
  LAM_TRY(lam_idx_write(img, d->c > 1 ? 4 : 3, dims, px));
  LAM_TRY(lam_idx_write(lab, 1, dims, d->labels));
  cache_prune(cache, train, key);
  *written = 1;
  return LAM_OK;
}

/* The folders the images are in, each once (the entries are sorted by path: a folder's files are together),
 * as the run's input folders (files.c). */
static lam_status record_folders(const entries *l) {
  char last[PATH_MAX] = "", dir[PATH_MAX];
  for (size_t i = 0; i < l->n; i++) {
    const char *p = l->e[i].path, *slash = strrchr(p, '/');
    if (!slash || (size_t)(slash - p) >= sizeof dir) continue;
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - p), p);
    if (!strcmp(dir, last)) continue;
    LAM_TRY(lam_input_folder(dir, "images"));
    snprintf(last, sizeof last, "%s", dir);
  }
  return LAM_OK;
}

static int exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

lam_status lam_image_opts_check(lam_image_opts *o) {
  LAM_CHECK_ARG((o->h == 0) == (o->w == 0) && o->h >= 0 && o->w >= 0 && o->h <= (int)DATA_MAX_SIDE &&
                    o->w <= (int)DATA_MAX_SIDE,
                "lam_image_opts: size %dx%d (both 0, or 1 to %u)", o->w, o->h, DATA_MAX_SIDE);
  LAM_CHECK_ARG(o->stream >= LAM_STREAM_AUTO && o->stream <= LAM_STREAM_OFF,
                "lam_image_opts: stream %d (LAM_STREAM_AUTO, LAM_STREAM_ON or LAM_STREAM_OFF)", o->stream);
  o->skipped = 0, o->cache_hit = o->cache_written = 0, o->decoded_gpu = 0, o->decode_s = 0, o->converted = 0;
  o->streamed = 0, o->part_bytes = 0, o->missing = 0, o->missing_note[0] = 0;
  return LAM_OK;
}

/* ---- streamed: each file decoded when its sample is asked for ---- */

typedef struct folder_src {
  entries l;
  int h, w;    /* the fit (0, 0: none) */
  int C, H, W; /* the part's geometry, from its first file that decodes */
  size_t f0;   /* that file */
} folder_src;

static void folder_src_drop(void *state) {
  folder_src *f = state;
  entries_free(&f->l);
  free(f);
}

/* lam_fill_fn: file i decoded as decode_all decodes it (the part's channels are its first file's). */
static lam_status folder_fill(void *state, size_t i, uint64_t draw, uint8_t *px, uint8_t *lab) {
  (void)draw; /* an image is the same every epoch */
  const folder_src *f = state;
  int conv;
  lab[0] = (uint8_t)f->l.e[i].cls;
  return decode_file(f->l.e[i].path, NULL, 0, f->h, f->w, f->C, f->H, f->W, f->l.e[f->f0].path, px, &conv);
}

/* Whether the part streams: asked for, or (auto) its decoded bytes over the cap. The geometry is probed here. */
static lam_status want_stream(const char *dir, const entries *l, lam_image_opts *o, folder_src *f, int *stream) {
  *stream = 0;
  if (o->stream == LAM_STREAM_OFF) return LAM_OK;
  LAM_TRY(probe_first(dir, l, o, &f->f0, &f->C, &f->H, &f->W));
  *stream = lam_stream_wanted(o, l->n * ((size_t)f->H * f->W * f->C + 1));
  return LAM_OK;
}

lam_status lam_dataset_load_images(const char *dir, int train, lam_image_opts *opts, lam_dataset **out) {
  LAM_CHECK_ARG(out, "lam_dataset_load_images: out is NULL");
  *out = NULL;
  LAM_CHECK_ARG(dir && *dir, "lam_dataset_load_images: dir is %s", dir ? "empty" : "NULL");
  if (lam_dataset_mask_folder_layout(dir) != LAM_MASKS_NONE) return lam_dataset_load_masks(dir, train, opts, out);
  lam_image_opts def = {.stream = LAM_STREAM_OFF};
  lam_image_opts *o = opts ? opts : &def;
  LAM_TRY(lam_image_opts_check(o));
  if (video_folder(dir)) return video_folder_load(dir, train, o, out);
  LAM_CHECK_ARG(o->decoder >= LAM_DECODE_AUTO && o->decoder <= LAM_DECODE_GPU,
                "lam_image_opts: decoder %d (LAM_DECODE_AUTO, LAM_DECODE_CPU or LAM_DECODE_GPU)", o->decoder);
  entries l;
  char **classes;
  size_t nclasses;
  LAM_TRY(scan(dir, train, &l, &classes, &nclasses));
  /* the class folders' names go with the set (and from it into a checkpoint: predict prints them) */
  char **names = lam_names_copy((const char *const *)classes, nclasses);
  names_free(classes, nclasses);
  if (!names && nclasses) {
    entries_free(&l);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image folder '%s': no host memory for its class names", dir);
  }
  lam_status s = record_folders(&l); /* no output of the run may be written where the images are */
  if (s != LAM_OK) {
    entries_free(&l);
    free(names); /* lam_names_copy: one block */
    return s;
  }
  folder_src *f = calloc(1, sizeof *f);
  int stream = 0;
  s = f ? want_stream(dir, &l, o, f, &stream)
        : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image folder '%s': no host memory", dir);
  if (s == LAM_OK && stream) { /* the list goes to the source, which the set holds */
    lam_dataset *d = calloc(1, sizeof *d);
    f->l = l, f->h = o->h, f->w = o->w;
    memset(&l, 0, sizeof l);
    const size_t n = f->l.n;
    const int C = f->C, H = f->H, W = f->W;
    lam_source *src = NULL;
    s = lam_source_make(n, C, H, W, folder_fill, folder_src_drop, f, o->skip_bad, &src); /* f: the source's now */
    if (s == LAM_OK && !d) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image folder '%s': no host memory", dir);
    if (s != LAM_OK) {
      lam_source_free(src);
      free(d), free(names);
      return s;
    }
    *d = (lam_dataset){.n = n, .h = H, .w = W, .classes = (int)nclasses, .c = C, .label_h = 1, .label_w = 1,
                       .class_names = names, .source = src};
    o->streamed = 1;
    *out = d;
    return LAM_OK;
  }
  free(f);
  if (s != LAM_OK) {
    entries_free(&l);
    free(names);
    return s;
  }
  char cache[PATH_MAX] = "";
  if (!o->cache) snprintf(cache, sizeof cache, "%s/.lamina-cache", dir);
  else snprintf(cache, sizeof cache, "%s", o->cache);
  const uint64_t key = cache_key(&l, o);
  char img[PATH_MAX + 64], lab[PATH_MAX + 64];
  for (int C = 1; C <= 3 && cache[0]; C += 2) { /* a cached part of either channel count */
    cache_paths(cache, train, key, C, img, lab, sizeof img);
    if (!exists(img) || !exists(lab)) continue;
    s = lam_dataset_load_idx(img, lab, (int)nclasses, out);
    if (s == LAM_OK) {
      (*out)->class_names = names;
      o->cache_hit = 1;
      entries_free(&l);
      return LAM_OK;
    }
  }
  uint8_t *px = NULL, *keep = NULL;
  int H = 0, W = 0, C = 0;
  size_t n = 0, conv = 0;
  const double t0 = lam_now_ms();
  s = decode_all(dir, &l, o, 0, &px, &H, &W, &C, &keep, &n, &conv);
  /* The set's channels are most of its images' (a tie: colour, as torchvision's loader makes every image RGB).
   * Decoded first as the first image's; where most are the other count (the first was an odd one), once more. */
  if (s == LAM_OK && conv && (2 * conv > n || (2 * conv == n && C == 1))) {
    free(px), free(keep);
    px = keep = NULL;
    s = decode_all(dir, &l, o, C == 1 ? 3 : 1, &px, &H, &W, &C, &keep, &n, &conv);
  }
  o->converted = conv;
  o->decode_s = (lam_now_ms() - t0) / 1000;
  lam_dataset *d = NULL;
  if (s == LAM_OK) {
    o->skipped = l.n - n;
    d = calloc(1, sizeof *d);
    uint8_t *labels = malloc(n ? n : 1);
    if (!d || !labels) {
      free(d), free(labels);
      d = NULL;
      s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image folder '%s': no host memory for the set", dir);
    } else {
      for (size_t i = 0, k = 0; i < l.n; i++)
        if (keep[i]) labels[k++] = (uint8_t)l.e[i].cls;
      *d = (lam_dataset){.n = n, .h = H, .w = W, .classes = (int)nclasses, .images = NULL, .labels = labels, .c = C,
                         .label_h = 1, .label_w = 1};
      o->part_bytes = n * ((size_t)H * W * C + 1);
    }
  }
  if (s == LAM_OK && cache[0] && n) s = cache_write(dir, cache, !o->cache, train, key, px, d, &o->cache_written);
  if (s == LAM_OK && C > 1) { /* (n, h, w, c) to the set's (n, c, h, w), one image at a time */
    const size_t P = (size_t)H * W;
    uint8_t *t = malloc(P * C);
    if (!t) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "image folder '%s': no host memory", dir);
    for (size_t i = 0; i < n && s == LAM_OK; i++) {
      image_planar(px + i * P * C, H, W, C, t);
      memcpy(px + i * P * C, t, P * C);
    }
    free(t);
  }
  free(keep);
  entries_free(&l);
  if (s == LAM_OK) d->class_names = names, names = NULL;
  free(names);
  if (s != LAM_OK) {
    free(px);
    lam_dataset_free(d);
    return s;
  }
  d->images = px;
  *out = d;
  return LAM_OK;
}

int lam_dataset_is_image_folder(const char *dir) { return lam_dataset_image_folder_layout(dir) != LAM_FOLDER_NONE; }
