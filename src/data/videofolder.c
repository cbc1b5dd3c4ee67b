/* videofolder.c — video sets as streamed sets of clips, in three layouts: folders, DIR/train/CLASS/NAME.{mp4,avi,
 * mkv,webm,mov} and DIR/test/CLASS/... or DIR/val/CLASS/... (the ImageFolder layout with videos), the classes the
 * training part's folder names in sorted order; or lists, DIR/train.csv and DIR/val.csv of path,label rows or of
 * Kinetics' columns (videolist.c). Each layout makes its part's (path, class) list; the rest is one: every file
 * probed on all host threads (a bad one an error, or with skip_bad left out), the size and channels settled, the
 * source made. A sample is a clip of T frames (lam_image_opts.frames, default 16), every S-th (frame_stride,
 * default 2): in training from a start drawn anew each epoch (lam_source_set_draw: the trainer's key of the epoch),
 * else the video's middle clip, or with test_clips K its K clips evenly spaced (lam_clip_start), K samples a video
 * in a row (lam_dataset_clips), whose softmax lam_evaluate averages. Nothing is decoded whole: every clip is decoded from its file when its sample is
 * asked for (video.c), so a set of any size trains in bounded memory; or, with a cache folder asked for
 * (lam_image_opts.cache), read from the video's decoded frames kept there (videocache.c: the same bytes). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data.h"
#include "../math/hash.h"
#include "../internal.h"
#include "../status.h"

int video_file_name(const char *name) {
  static const char *const ext[] = {".mp4", ".avi", ".mkv", ".webm", ".mov", NULL};
  const char *dot = strrchr(name, '.');
  for (int k = 0; dot && ext[k]; k++)
    if (!strcasecmp(dot, ext[k])) return 1;
  return 0;
}

int video_folder(const char *dir) {
  char t[PATH_MAX];
  char **classes = NULL;
  size_t nc = 0;
  if (dir && video_csv_layout(dir)) return 1; /* the lists first: Kinetics' folders are there too */
  if (!dir || (size_t)snprintf(t, sizeof t, "%s/train", dir) >= sizeof t || !data_is_dir(t) ||
      folder_list(t, 1, video_file_name, &classes, &nc) != LAM_OK)
    return 0;
  int found = 0;
  for (size_t k = 0; k < nc && !found; k++) { /* a class folder with a video file in it */
    char c[PATH_MAX];
    char **files = NULL;
    size_t nf = 0;
    if ((size_t)snprintf(c, sizeof c, "%s/%s", t, classes[k]) < sizeof c &&
        folder_list(c, 0, video_file_name, &files, &nf) == LAM_OK)
      found = nf > 0, folder_names_free(files, nf);
  }
  folder_names_free(classes, nc);
  return found;
}

lam_status video_list_add(video_list *l, const char *path, int cls) {
  if (l->n == l->cap) {
    const size_t cap = l->cap ? 2 * l->cap : 256;
    char **p = realloc(l->path, cap * sizeof *p);
    if (p) l->path = p;
    int *q = p ? realloc(l->cls, cap * sizeof *q) : NULL;
    if (!p || !q) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video set: no host memory for the list of files");
    l->cls = q, l->cap = cap;
  }
  if (!(l->path[l->n] = strdup(path))) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video set: no host memory");
  l->cls[l->n++] = cls;
  return LAM_OK;
}

void video_list_free(video_list *l) {
  for (size_t i = 0; i < l->n; i++) free(l->path[i]);
  free(l->path), free(l->cls);
  *l = (video_list){0};
}

int lam_video_file_name(const char *name) { return name && video_file_name(name); }
int lam_dataset_is_video_folder(const char *dir) { return video_folder(dir); }

typedef struct clip_src {
  video_list l;
  int64_t *frames;
  int T, S, C, H, W;
  video_cache *cache; /* NULL: every clip decoded from its file */
  int nvdec;          /* decoded by the GPU's video engines (lam_image_opts.decoder LAM_DECODE_GPU) */
  int K;              /* clips a video: sample i is clip i % K of video i / K */
} clip_src;

static void clip_src_drop(void *state) {
  clip_src *c = state;
  video_list_free(&c->l);
  free(c->frames), video_cache_free(c->cache), free(c);
}

int64_t lam_clip_start(int64_t frames, int T, int S, int K, int k) {
  const int64_t span = (int64_t)(T - 1) * S + 1, last = frames > span ? frames - span : 0;
  if (K <= 1) return last / 2;
  if (k <= 0) return 0;
  if (k >= K - 1) return last;
  return (2 * (int64_t)k * last + (K - 1)) / (2 * (int64_t)(K - 1)); /* round(k * last / (K - 1)), halves up */
}

/* lam_fill_fn: sample i, clip i % K of video i / K (T, H, W, C), and its class; the start drawn from draw (training:
 * K is 1), else the clip's evenly spaced start (lam_clip_start). */
static lam_status clip_fill(void *state, size_t i, uint64_t draw, uint8_t *px, uint8_t *lab) {
  const clip_src *c = state;
  const size_t v = i / (size_t)c->K;
  const int64_t span = (int64_t)(c->T - 1) * c->S + 1, last = c->frames[v] > span ? c->frames[v] - span : 0;
  int64_t start = lam_clip_start(c->frames[v], c->T, c->S, c->K, (int)(i % (size_t)c->K));
  if (draw) {
    start = (int64_t)(lam_draw_uniform(draw, i) * (float)(last + 1));
    if (start > last) start = last;
  }
  lab[0] = (uint8_t)c->l.cls[v];
  if (c->cache) return video_cache_clip(c->cache, c->l.path[v], start, c->S, c->T, c->C, c->H, c->W, px);
  return (c->nvdec ? video_clip_nvdec : video_clip)(c->l.path[v], start, c->S, c->T, c->C, c->H, c->W, px);
}

/* The folder layout's part: its videos class by class (the training part's classes, sorted), each class's files
 * sorted. */
static lam_status folder_scan(const char *dir, int train, video_list *l, char ***names, size_t *nclasses) {
  char tdir[PATH_MAX], pdir[PATH_MAX];
  snprintf(tdir, sizeof tdir, "%s/train", dir);
  if (train) snprintf(pdir, sizeof pdir, "%s", tdir);
  else if ((size_t)snprintf(pdir, sizeof pdir, "%s/test", dir) < sizeof pdir && !data_is_dir(pdir))
    snprintf(pdir, sizeof pdir, "%s/val", dir);
  if (!data_is_dir(pdir))
    return LAM_FAIL(LAM_ERR_IO, "video folder '%s' has a train/ folder but neither test/ nor val/ beside it: add one "
                    "(test/CLASS/... as train/ is laid out)", dir);
  LAM_TRY(folder_list(tdir, 1, video_file_name, names, nclasses));
  if (*nclasses == 0 || *nclasses > VIDEO_MAX_CLASSES)
    return LAM_FAIL(LAM_ERR_IO, "video folder '%s': '%s' holds %zu class folders; it needs 1 to %d", dir, tdir,
                    *nclasses, VIDEO_MAX_CLASSES);
  lam_status s = LAM_OK;
  for (size_t k = 0; k < *nclasses && s == LAM_OK; k++) {
    char cdir[PATH_MAX];
    char **files = NULL;
    size_t nf = 0;
    if ((size_t)snprintf(cdir, sizeof cdir, "%s/%s", pdir, (*names)[k]) >= sizeof cdir || !data_is_dir(cdir)) continue;
    s = folder_list(cdir, 0, video_file_name, &files, &nf);
    for (size_t f = 0; f < nf && s == LAM_OK; f++) {
      char full[PATH_MAX];
      if ((size_t)snprintf(full, sizeof full, "%s/%s", cdir, files[f]) < sizeof full) s = video_list_add(l, full, (int)k);
    }
    folder_names_free(files, nf);
  }
  if (s == LAM_OK && l->n == 0) s = LAM_FAIL(LAM_ERR_IO, "video folder '%s': no video files in the class folders of '%s'", dir, pdir);
  return s;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* No output of the run may be written where the videos are: dir, and every folder holding one of them (each once:
 * a list may name them in any order). */
static lam_status record_folders(const char *dir, const video_list *l) {
  LAM_TRY(lam_input_folder(dir, "videos"));
  char **v = l->n ? malloc(l->n * sizeof *v) : NULL;
  if (l->n && !v) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video set: no host memory");
  size_t n = 0;
  for (size_t i = 0; i < l->n; i++) /* the path cut at its last '/', in place, for the sort; put back below */
    if (strrchr(l->path[i], '/')) *strrchr(l->path[i], '/') = 0, v[n++] = l->path[i];
  qsort(v, n, sizeof *v, cmp_str);
  lam_status s = LAM_OK;
  for (size_t i = 0; i < n && s == LAM_OK; i++)
    if (!i || strcmp(v[i], v[i - 1])) s = lam_input_folder(v[i], "videos");
  for (size_t i = 0; i < n; i++) v[i][strlen(v[i])] = '/';
  free(v);
  return s;
}

lam_status video_folder_load(const char *dir, int train, lam_image_opts *o, lam_dataset **out) {
  *out = NULL;
  LAM_CHECK_ARG(o->frames >= 0 && o->frames <= (int)DATA_MAX_FRAMES && o->frame_stride >= 0 && o->frame_stride <= 1000,
                "lam_image_opts: %d frames (1 to %u) every %d-th (1 to 1000)", o->frames, DATA_MAX_FRAMES,
                o->frame_stride);
  LAM_CHECK_ARG(o->test_clips >= 0 && o->test_clips <= LAM_MAX_TEST_CLIPS,
                "lam_image_opts: test_clips %d is out of range (1 to %d clips a video; 0 reads as 1)", o->test_clips,
                LAM_MAX_TEST_CLIPS);
  if (!video_supported())
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "'%s' is a folder of videos, and this lamina reads none: %s", dir,
                    video_unsupported_why());
  clip_src *c = calloc(1, sizeof *c);
  char **names = NULL;
  size_t nclasses = 0;
  lam_status s = !c ? LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video folder: no memory")
                 : video_csv_layout(dir) ? video_csv_scan(dir, train, o, &c->l, &names, &nclasses)
                                         : folder_scan(dir, train, &c->l, &names, &nclasses);
  if (s == LAM_OK) s = record_folders(dir, &c->l);
  const size_t listed_bad = o->skipped; /* a list's rows without their file (skip_bad) */
  if (s == LAM_OK && o->cache && *o->cache) s = video_cache_open(dir, o->cache, &c->cache); /* asked for: else none */
  const char *no_nvdec = NULL;
  if (s == LAM_OK && o->decoder == LAM_DECODE_GPU && !video_nvdec(&no_nvdec))
    s = LAM_FAIL(LAM_ERR_UNSUPPORTED, "video folder '%s': --decode gpu: %s", dir, no_nvdec);
  /* auto: the host's threads (measured faster: docs/bench/JOURNAL.md, "Video folders streamed from their files") */
  if (s == LAM_OK) c->nvdec = o->decoder == LAM_DECODE_GPU;
  if (s == LAM_OK && !(c->frames = calloc(c->l.n, sizeof *c->frames)))
    s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video folder: no host memory");
  int *h = s == LAM_OK ? calloc(c->l.n, sizeof *h) : NULL, *w = s == LAM_OK ? calloc(c->l.n, sizeof *w) : NULL;
  if (s == LAM_OK && (!h || !w)) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video folder: no host memory");
  /* every file's frame count and size, from its header, on all host threads: a bad file is said (or left out) now */
  size_t bad_at = (size_t)-1;
  lam_status bad_status = LAM_OK;
  char bad_msg[1024] = "";
  if (s == LAM_OK) {
#pragma omp parallel for schedule(dynamic, 4)
    for (size_t i = 0; i < c->l.n; i++) {
      lam_status st = video_probe(c->l.path[i], &c->frames[i], &h[i], &w[i]);
      if (st != LAM_OK) {
        c->frames[i] = -1;
        if (!(o->skip_bad && st == LAM_ERR_IO)) {
#pragma omp critical(videofolder_bad)
          if (i < bad_at) bad_at = i, bad_status = st, snprintf(bad_msg, sizeof bad_msg, "%s", lam_last_error());
        }
      }
    }
    if (bad_at != (size_t)-1) s = LAM_FAIL(bad_status, "%s", bad_msg);
  }
  size_t kept = 0;
  for (size_t i = 0; s == LAM_OK && i < c->l.n; i++) { /* the bad ones left out (skip_bad), the rest in order */
    if (c->frames[i] < 0) {
      free(c->l.path[i]);
      continue;
    }
    c->l.path[kept] = c->l.path[i], c->l.cls[kept] = c->l.cls[i], c->frames[kept] = c->frames[i], h[kept] = h[i], w[kept] = w[i];
    kept++;
  }
  if (s == LAM_OK) {
    o->skipped = listed_bad + c->l.n - kept;
    c->l.n = kept;
    if (!kept) s = LAM_FAIL(LAM_ERR_IO, "video folder '%s': no video file could be read", dir);
  }
  if (s == LAM_OK) {
    c->T = o->frames ? o->frames : 16, c->S = o->frame_stride ? o->frame_stride : 2;
    c->K = !train && o->test_clips > 1 ? o->test_clips : 1; /* training draws one clip a video */
    c->H = o->h ? o->h : h[0], c->W = o->w ? o->w : w[0];
    for (size_t i = 0; s == LAM_OK && !o->h && i < c->l.n; i++)
      if (h[i] != c->H || w[i] != c->W)
        s = LAM_FAIL(LAM_ERR_IO, "video file '%s' is %dx%d, but the part's first ('%s') is %dx%d: give --size HxW to "
                     "fit every frame to one size", c->l.path[i], w[i], h[i], c->l.path[0], c->W, c->H);
  }
  if (s == LAM_OK) { /* grey where the first video's middle frame is (every pixel R = G = B), else colour */
    uint8_t *rgb = malloc((size_t)c->H * c->W * 3);
    s = rgb ? video_clip(c->l.path[0], c->frames[0] / 2, 1, 1, 3, c->H, c->W, rgb)
            : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video folder: no host memory");
    int grey = s == LAM_OK;
    for (size_t p = 0; grey && p < (size_t)c->H * c->W; p++) grey = rgb[3 * p] == rgb[3 * p + 1] && rgb[3 * p] == rgb[3 * p + 2];
    c->C = grey ? 1 : 3;
    free(rgb);
  }
  free(h), free(w);
  char **cn = s == LAM_OK ? lam_names_copy((const char *const *)names, nclasses) : NULL;
  if (names) folder_names_free(names, nclasses);
  lam_dataset *d = s == LAM_OK ? calloc(1, sizeof *d) : NULL;
  if (s == LAM_OK && (!d || !cn)) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video folder: no host memory");
  lam_source *src = NULL;
  if (s == LAM_OK) {
    const clip_src g = *c;
    const size_t n = g.l.n * (size_t)g.K; /* K samples a video */
    s = lam_source_make(n, c->C, c->H, c->W, clip_fill, clip_src_drop, c, o->skip_bad, &src); /* c: the source's */
    c = NULL;
    if (s == LAM_OK) {
      *d = (lam_dataset){.n = n, .h = g.H, .w = g.W, .classes = (int)nclasses, .c = g.C, .t = g.T, .label_h = 1,
                         .label_w = 1, .class_names = cn, .source = src};
      lam_source_set_clips(src, g.K);
      o->streamed = 1, o->part_bytes = n * ((size_t)g.T * g.C * g.H * g.W + 1);
      *out = d;
      return LAM_OK;
    }
  }
  if (c) clip_src_drop(c);
  free(d), free(cn);
  return s;
}

void lam_dataset_video_cache(const lam_dataset *d, size_t *hits, size_t *misses) {
  const clip_src *c = d ? lam_source_state(d->source, clip_fill) : NULL;
  video_cache_counts(c ? c->cache : NULL, hits, misses);
}

lam_status lam_dataset_load_videos(const char *const *paths, size_t n, int ch, lam_image_opts *o, lam_dataset **out) {
  LAM_CHECK_ARG(out && o && (paths || !n), "lam_dataset_load_videos: %s is NULL", !out ? "out" : !o ? "opts" : "paths");
  *out = NULL;
  LAM_CHECK_ARG(n >= 1 && (ch == 1 || ch == 3) && o->h >= 1 && o->w >= 1,
                "lam_dataset_load_videos: %zu videos (at least 1) of %d channels (1 or 3) at %dx%d (give the size)", n,
                ch, o->h, o->w);
  LAM_CHECK_ARG(o->frames >= 0 && o->frames <= (int)DATA_MAX_FRAMES && o->frame_stride >= 0 && o->frame_stride <= 1000 &&
                o->test_clips >= 0 && o->test_clips <= LAM_MAX_TEST_CLIPS,
                "lam_dataset_load_videos: %d frames (1 to %u) every %d-th (1 to 1000), %d test clips (1 to %d)",
                o->frames, DATA_MAX_FRAMES, o->frame_stride, o->test_clips, LAM_MAX_TEST_CLIPS);
  if (!video_supported())
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "'%s' is a video file, and this lamina reads none: %s", paths[0],
                    video_unsupported_why());
  clip_src *c = calloc(1, sizeof *c);
  lam_status s = LAM_OK;
  if (!c || !(c->frames = calloc(n, sizeof *c->frames)))
    s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_dataset_load_videos: no host memory for %zu videos", n);
  o->skipped = 0;
  for (size_t i = 0; s == LAM_OK && i < n; i++) { /* each file's frame count, from its header: a bad one said now */
    int h, w;
    int64_t frames;
    lam_status st = video_probe(paths[i], &frames, &h, &w);
    if (st == LAM_ERR_IO && o->skip_bad) o->skipped++;
    else if (st != LAM_OK) s = st;
    else if ((s = video_list_add(&c->l, paths[i], 0)) == LAM_OK) c->frames[c->l.n - 1] = frames;
  }
  if (s == LAM_OK && !c->l.n) s = LAM_FAIL(LAM_ERR_IO, "none of the %zu video files could be read (--skip-bad)", n);
  lam_dataset *d = s == LAM_OK ? calloc(1, sizeof *d) : NULL;
  if (s == LAM_OK && !d) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_dataset_load_videos: no host memory");
  if (s != LAM_OK) {
    if (c) clip_src_drop(c);
    return s;
  }
  c->T = o->frames ? o->frames : 16, c->S = o->frame_stride ? o->frame_stride : 2;
  c->K = o->test_clips > 1 ? o->test_clips : 1, c->C = ch, c->H = o->h, c->W = o->w;
  const clip_src g = *c;
  const size_t rows = g.l.n * (size_t)g.K;
  lam_source *src = NULL;
  s = lam_source_make(rows, g.C, g.H, g.W, clip_fill, clip_src_drop, c, o->skip_bad, &src); /* c: the source's */
  if (s != LAM_OK) {
    free(d);
    return s;
  }
  *d = (lam_dataset){.n = rows, .h = g.H, .w = g.W, .classes = 1, .c = g.C, .t = g.T, .label_h = 1, .label_w = 1,
                     .source = src};
  lam_source_set_clips(src, g.K);
  o->streamed = 1, o->part_bytes = rows * ((size_t)g.T * g.C * g.H * g.W + 1);
  *out = d;
  return LAM_OK;
}
