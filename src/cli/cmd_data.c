/* cmd_data.c — `lamina data`: data sets anyone can rebuild, the same files for the same seed, from an
 * MNIST-layout set. `segment` makes segmentation scenes (lam_data_segment) and writes them as an IDX
 * folder that `lamina train --data DIR` reads; `images` writes the set as an image folder of PNG or JPEG
 * files in colour (lam_data_images_part), written into a temporary folder renamed into place when whole.
 * Every option, the source and the output folder are checked before any work. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: lamina data segment --out DIR [--from DATA] [--n N] [--test N] [--size HxW]\n"
          "                           [--format idx|npy|folder|folder-jpeg]\n"
          "                           [--seed S]\n"
          "       lamina data clips --out DIR [--frames T] [--from DATA] [--n N] [--test N] [--size HxW]\n"
          "                         [--format idx|npy|mp4] [--seconds MIN:MAX] [--seed S]\n"
          "       lamina data images --out DIR --format png|jpeg [--from DATA] [--n N] [--test N] [--seed S]\n"
          "       lamina data coco --annotations FILE --images DIR --out DIR [--part train|test] [--size HxW]\n"
          "Makes a data set anyone can rebuild (the same bytes for the same seed) from an MNIST-layout set, or\n"
          "(coco) a segmentation folder from a COCO instances file.\n"
          "  segment   M2NIST-style scenes for segmentation: one to three items of DATA placed at random\n"
          "            without their boxes overlapping, on black; a label per pixel, the item's class + 1\n"
          "            where the item is visible (a nonzero pixel), else 0 (11 classes from Fashion-MNIST).\n"
          "            Training scenes are made of DATA's training images, test scenes of its test images.\n"
          "            Writes DIR/train-images-idx3-ubyte, train-labels-idx3-ubyte (a class per pixel),\n"
          "            t10k-images-idx3-ubyte and t10k-labels-idx3-ubyte: 'lamina train --data DIR' reads them.\n"
          "            --format folder writes a mask folder instead: DIR/{train,test}/images/INDEX.png (folder-jpeg:\n"
          "            .jpg) and DIR/{train,test}/masks/INDEX.png (8-bit grey, the value the class).\n"
          "  clips     Moving-MNIST-style clips for video classification: T frames (default 16) of 64x64, two\n"
          "            items of different classes, one still, one moving 1 to 3 pixels a frame on each axis and\n"
          "            bouncing off the edges; the label is the moving item's class, which one frame does not\n"
          "            tell. Writes train-images-idx5-ubyte (N, T, H, W, 1), train-labels-idx1-ubyte and their\n"
          "            t10k- twins. With --format npy either set is NumPy files instead (the same bytes):\n"
          "            train-images.npy, train-labels.npy, t10k-images.npy, t10k-labels.npy.\n"
          "            With --format mp4, a video folder instead: DIR/{train,test}/CLASS/INDEX.mp4, each video 1 to\n"
          "            4 s (--seconds) at 25 frames a second (H.264, else MPEG-4 Part 2; needs FFmpeg's libraries).\n"
          "  images    the set as an image folder in colour (each image its own background and foreground\n"
          "            colour): DIR/train/CLASS/INDEX.png|jpg and DIR/test/CLASS/..., CLASS the class number.\n"
          "            DIR must not exist yet (or be empty): the set appears whole or not at all.\n"
          "  coco      a COCO instances file (--annotations) and its images (--images DIR) as a segmentation\n"
          "            folder: DIR/PART/images/NAME (copied as they are), DIR/PART/masks/STEM.png (8-bit grey:\n"
          "            0 background, the categories 1..K in increasing id order, 255 crowd regions, the smaller\n"
          "            instance on top; polygons as pycocotools rasterizes them) and DIR/classes.txt (background,\n"
          "            then the categories' names). DIR/PART must not exist yet (or be empty). With --size\n"
          "            each image is fitted to HxW (scaled to cover, the middle kept) as DIR/PART/images/STEM.jpg,\n"
          "            its mask alike (the class under each pixel's centre).\n"
          "  --out DIR     the folder to write (made if missing; its parent must exist)\n"
          "  --from DATA   the source set: fashion-mnist (default) or a folder, as 'lamina train --data'\n"
          "  --n N         training scenes (default 20000)\n"
          "  --test N      test scenes (default 2000)\n"
          "  --size HxW    the field's size (segment: default 64x84; clips: 64x64; coco: none, copies)\n"
          "  --frames T    frames a clip (clips; default 16)\n"
          "  --seconds MIN:MAX  clips --format mp4: each video's length, drawn from MIN to MAX seconds (whole,\n"
          "                1 to 60; default 1:4)\n"
          "  --format F    images: png or jpeg (jpeg at quality 90); segment, clips: idx (default) or npy;\n"
          "                segment also folder or folder-jpeg; clips also mp4\n"
          "  --seed S      the generator's seed (default 1)\n"
          "  --annotations FILE  coco: the COCO instances file (JSON)\n"
          "  --images DIR        coco: the folder of the images it names\n"
          "  --part P            coco: train (default) or test, the part of DIR to write\n"
          "Exit status: 0 ok, 1 failure, 2 bad usage.\n");
}

enum { FORMAT_PNG = 1, FORMAT_JPEG = 2, FORMAT_IDX, FORMAT_NPY, FORMAT_FOLDER, FORMAT_FOLDER_JPEG, FORMAT_MP4 }; /* PNG, JPEG: lam_data_images_part's kinds */
typedef struct data_opts {
  const char *out, *from;
  size_t n, test;
  int h, w;
  uint64_t seed;
  int format, size_set; /* FORMAT_*: images png or jpeg, segment and clips idx or npy */
  int frames, frames_set; /* clips */
  int min_s, max_s, seconds_set; /* clips --format mp4: the videos' lengths */
} data_opts;

/* Returns 0, -1 after --help, or an exit status. */
static int parse(int argc, char **argv, data_opts *o) {
  static const struct option longopts[] = {{"out", required_argument, 0, 'o'},  {"from", required_argument, 0, 'f'},
                                           {"n", required_argument, 0, 'n'},    {"test", required_argument, 0, 't'},
                                           {"size", required_argument, 0, 's'}, {"seed", required_argument, 0, 'S'},
                                           {"format", required_argument, 0, 'F'}, {"help", no_argument, 0, 'h'},
                                           {"frames", required_argument, 0, 'T'}, {"seconds", required_argument, 0, 'L'},
                                           {0, 0, 0, 0}};
  *o = (data_opts){NULL, "fashion-mnist", 20000, 2000, 64, 84, 1, 0, 0, 16, 0, 1, 4, 0};
  long v;
  int c, li = 0;
  opterr = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, ":", longopts, &li)) != -1) {
    const char *opt = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    switch (c) {
      case 'o': o->out = optarg; break;
      case 'f': o->from = optarg; break;
      case 'n':
        if (cli_parse_count("data", "--n", optarg, 10000000, &o->n)) return EXIT_USAGE;
        break;
      case 't':
        if (cli_parse_count("data", "--test", optarg, 10000000, &o->test)) return EXIT_USAGE;
        break;
      case 's': {
        char end;
        if (sscanf(optarg, "%dx%d%c", &o->h, &o->w, &end) != 2 || o->h < 1 || o->w < 1 || o->h > 4096 || o->w > 4096)
          return cli_usage_error("data", "--size: '%s' is not HxW (1 to 4096 each), e.g. 64x84", optarg);
        o->size_set = 1;
        break;
      }
      case 'T':
        if (cli_parse_int("data", "--frames", optarg, 1, 1024, &v)) return EXIT_USAGE;
        o->frames = (int)v, o->frames_set = 1;
        break;
      case 'L': {
        char end;
        if (sscanf(optarg, "%d:%d%c", &o->min_s, &o->max_s, &end) != 2 || o->min_s < 1 || o->max_s < o->min_s ||
            o->max_s > 60)
          return cli_usage_error("data", "--seconds: '%s' is not MIN:MAX, whole seconds from 1 to 60, the least first "
                                 "(e.g. 2:4)", optarg);
        o->seconds_set = 1;
        break;
      }
      case 'F':
        if (!strcmp(optarg, "png")) o->format = FORMAT_PNG;
        else if (!strcmp(optarg, "jpeg") || !strcmp(optarg, "jpg")) o->format = FORMAT_JPEG;
        else if (!strcmp(optarg, "idx")) o->format = FORMAT_IDX;
        else if (!strcmp(optarg, "npy")) o->format = FORMAT_NPY;
        else if (!strcmp(optarg, "folder")) o->format = FORMAT_FOLDER;
        else if (!strcmp(optarg, "folder-jpeg")) o->format = FORMAT_FOLDER_JPEG;
        else if (!strcmp(optarg, "mp4")) o->format = FORMAT_MP4;
        else return cli_usage_error("data", "--format: '%s' is not png or jpeg (images), idx or npy (segment, clips)",
                                    optarg);
        break;
      case 'S':
        if (cli_parse_u64("data", "--seed", optarg, &o->seed)) return EXIT_USAGE;
        break;
      case 'h': usage(stdout); return -1;
      case ':': return cli_usage_error("data", "option '%s' needs a value", opt);
      default: return cli_usage_error("data", "unknown option '%s'", opt);
    }
  }
  if (optind < argc) return cli_usage_error("data", "unexpected argument '%s'", argv[optind]);
  if (!o->out) return cli_usage_error("data", "--out DIR is required (the folder to write)");
  if (!o->n || !o->test) return cli_usage_error("data", "--n and --test must be at least 1");
  return 0;
}

/* DIR made if missing (its parent must exist); an existing path must be a folder. */
/* --out must be a new folder, or an empty one: a set is written whole, into a folder of its own (writing into
 * a set already there would leave a mix of two sets, or replace a user's files). */
static int check_new_folder(const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0) return 0;
  DIR *d = S_ISDIR(st.st_mode) ? opendir(dir) : NULL;
  int empty = d != NULL;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
  if (d) closedir(d);
  if (empty) return 0;
  fprintf(stderr, "lamina data: --out '%s' exists%s: give a new folder (the set is written whole, into a folder of "
                  "its own)\n", dir, S_ISDIR(st.st_mode) ? " and is not empty" : " and is not a folder");
  return 1;
}

static int make_folder(const char *dir) {
  if (check_new_folder(dir)) return 1;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "lamina data: cannot make the folder '%s': %s (its parent must exist and be writable)\n", dir,
            strerror(errno));
    return 1;
  }
  return 0;
}

static int fail(const char *what) {
  fprintf(stderr, "lamina data: %s: %s\n", what, lam_last_error());
  return 1;
}

/* A data file's bytes: the header for `rank` dims (IDX, or with npy NumPy's), then the data (generated in place,
 * after it). */
#define NPY_HEAD_MAX 256
typedef struct idx_buf {
  uint8_t *p;
  size_t head, count;
  int npy;
} idx_buf;
static int idx_alloc(idx_buf *b, int npy, int rank, const uint64_t *dims) {
  b->npy = npy, b->count = 1;
  for (int i = 0; i < rank; i++) b->count *= dims[i];
  const size_t room = npy ? NPY_HEAD_MAX : 4 + 4 * (size_t)rank;
  b->p = malloc(room + b->count);
  if (!b->p) {
    fprintf(stderr, "lamina data: out of host memory for %zu bytes\n", room + b->count);
    return 1;
  }
  if (npy) {
    return lam_npy_header(rank, dims, b->p, room, &b->head) != LAM_OK ? fail("the .npy header") : 0;
  }
  b->head = room;
  b->p[0] = b->p[1] = 0, b->p[2] = 0x08, b->p[3] = (uint8_t)rank; /* unsigned bytes, big-endian sizes */
  for (int i = 0; i < rank; i++)
    for (int k = 0; k < 4; k++) b->p[4 + 4 * i + k] = (uint8_t)(dims[i] >> (24 - 8 * k));
  return 0;
}
static int idx_save(const idx_buf *b, const char *path) {
  return lam_output_write_atomic(path, b->npy ? "NumPy file" : "IDX file", b->p, b->head + b->count) != LAM_OK
             ? fail(path)
             : 0;
}

enum { KIND_SEGMENT, KIND_CLIPS };

/* One part of the set (train = 1: the training part), made from src (the same part of the source) and
 * written as the image and label files named: scenes (n, h, w) with labels (n, h, w), or clips (n, T, h, w, 1)
 * with labels (n). */
static int idx_part(int kind, const data_opts *o, const lam_dataset *src, int train, const char *img_path,
                    const char *lab_path) {
  const size_t n = train ? o->n : o->test;
  const uint64_t seed = train ? o->seed : o->seed ^ 0x7465737473636e65ULL; /* the test part: another stream */
  if (o->format == FORMAT_MP4) { /* a video folder's part: img_path is the part's folder */
    if (mkdir(img_path, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "lamina data: cannot make '%s': %s\n", img_path, strerror(errno));
      return 1;
    }
    return lam_data_videos_part(src, n, o->h, o->w, o->min_s, o->max_s, seed, img_path) != LAM_OK
               ? fail("writing the videos")
               : 0;
  }
  const uint64_t scene[3] = {n, (uint64_t)o->h, (uint64_t)o->w}, clip[5] = {n, (uint64_t)o->frames, (uint64_t)o->h,
                                                                             (uint64_t)o->w, 1};
  idx_buf im = {0}, lb = {0};
  const int npy = o->format == FORMAT_NPY;
  int rc = kind == KIND_SEGMENT ? idx_alloc(&im, npy, 3, scene) || idx_alloc(&lb, npy, 3, scene)
                                : idx_alloc(&im, npy, 5, clip) || idx_alloc(&lb, npy, 1, clip);
  if (!rc) {
    lam_status st = kind == KIND_SEGMENT
                        ? lam_data_segment(src, n, o->h, o->w, seed, im.p + im.head, lb.p + lb.head)
                        : lam_data_clips(src, n, o->frames, o->h, o->w, seed, im.p + im.head, lb.p + lb.head);
    if (st != LAM_OK) rc = fail(kind == KIND_SEGMENT ? "making the scenes" : "making the clips");
  }
  if (!rc && o->format >= FORMAT_FOLDER) { /* a mask folder's part: img_path is the part's folder */
    if (mkdir(img_path, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "lamina data: cannot make '%s': %s\n", img_path, strerror(errno));
      rc = 1;
    } else if (lam_data_mask_folder_part(im.p + im.head, lb.p + lb.head, n, o->h, o->w,
                                         o->format == FORMAT_FOLDER ? FORMAT_PNG : FORMAT_JPEG, img_path) != LAM_OK)
      rc = fail("writing the mask folder");
    free(im.p), free(lb.p);
    return rc;
  }
  if (!rc) rc = idx_save(&im, img_path);
  if (!rc) rc = idx_save(&lb, lab_path);
  free(im.p), free(lb.p);
  return rc;
}

/* segment and clips: an IDX folder that 'lamina train --data DIR' reads. */
static int cmd_idx_set(int kind, int argc, char **argv) {
  data_opts o;
  int rc = parse(argc, argv, &o);
  if (rc) return rc < 0 ? 0 : rc;
  if (kind == KIND_CLIPS && !o.size_set) o.h = o.w = 64;
  if (kind == KIND_SEGMENT && o.frames_set) return cli_usage_error("data", "segment: --frames is clips'");
  const int folder = (kind == KIND_SEGMENT && (o.format == FORMAT_FOLDER || o.format == FORMAT_FOLDER_JPEG)) ||
                     (kind == KIND_CLIPS && o.format == FORMAT_MP4);
  if (o.format && o.format != FORMAT_IDX && o.format != FORMAT_NPY && !folder)
    return cli_usage_error("data", "--format: %s writes idx (default) or npy%s", kind == KIND_SEGMENT ? "segment" : "clips",
                           kind == KIND_SEGMENT ? ", folder or folder-jpeg" : ", or mp4 (a folder of video files)");
  if (o.format == FORMAT_MP4 && o.frames_set)
    return cli_usage_error("data", "clips --format mp4: --frames is not for videos (their length is --seconds; train's "
                           "--frames chooses the clips)");
  if (o.seconds_set && o.format != FORMAT_MP4)
    return cli_usage_error("data", "--seconds is for clips --format mp4 (the videos' lengths)");
  if (o.format == FORMAT_MP4 && (o.h % 2 || o.w % 2))
    return cli_usage_error("data", "clips --format mp4: --size %dx%d: video encoders take even sides", o.h, o.w);
  const char *why = NULL;
  if (o.format == FORMAT_MP4 && !lam_video_supported(&why)) { /* before anything is made */
    fprintf(stderr, "lamina data: clips --format mp4: %s\n", why);
    return 1;
  }
  static const char *const seg_names[4] = {"train-images-idx3-ubyte", "train-labels-idx3-ubyte",
                                           "t10k-images-idx3-ubyte", "t10k-labels-idx3-ubyte"};
  static const char *const clip_names[4] = {"train-images-idx5-ubyte", "train-labels-idx1-ubyte",
                                            "t10k-images-idx5-ubyte", "t10k-labels-idx1-ubyte"};
  static const char *const npy_names[4] = {"train-images.npy", "train-labels.npy", "t10k-images.npy",
                                           "t10k-labels.npy"};
  static const char *const folder_names[4] = {"train", "train", "test", "test"};
  const char *const *names = folder ? folder_names : o.format == FORMAT_NPY ? npy_names
                             : kind == KIND_SEGMENT ? seg_names : clip_names;
  char path[4][4096];
  for (int i = 0; i < 4; i++)
    if ((size_t)snprintf(path[i], sizeof path[i], "%s/%s", o.out, names[i]) >= sizeof path[i])
      return cli_usage_error("data", "--out: the path '%s' is too long", o.out);
  if (check_new_folder(o.out)) return 1; /* before the source is read; made only after, so a bad --from leaves nothing */
  lam_dataset *src[2] = {NULL, NULL};
  if (lam_dataset_load(o.from, 1, &src[0]) != LAM_OK) return fail("--from (its training part)");
  if (lam_dataset_load(o.from, 0, &src[1]) != LAM_OK) {
    lam_dataset_free(src[0]);
    return fail("--from (its test part)");
  }
  rc = make_folder(o.out);
  for (int i = 0; i < 4 && !rc && !folder; i++) /* before any work: the files may be written there */
    if (lam_output_check(path[i], "data file", o.format == FORMAT_NPY ? LAM_FILE_NPY : LAM_FILE_IDX) != LAM_OK) rc = fail("--out");
  if (!rc) rc = idx_part(kind, &o, src[0], 1, path[0], path[1]);
  if (!rc) rc = idx_part(kind, &o, src[1], 0, path[2], path[3]);
  if (!rc && kind == KIND_SEGMENT)
    printf("lamina data segment: %zu training and %zu test scenes of %dx%d from %s, %d classes (0 the background, an "
           "item's class + 1 where it is visible), seed %llu, in %s\n",
           o.n, o.test, o.h, o.w, o.from, src[0]->classes + 1, (unsigned long long)o.seed, o.out);
  else if (!rc && o.format == FORMAT_MP4)
    printf("lamina data clips: %zu training and %zu test videos of %d to %d s at %d frames a second, %dx%d, from %s, "
           "%d classes (the moving item's), seed %llu, in %s/{train,test}/CLASS/\n", o.n, o.test, o.min_s, o.max_s, 25,
           o.h, o.w, o.from, src[0]->classes, (unsigned long long)o.seed, o.out);
  else if (!rc)
    printf("lamina data clips: %zu training and %zu test clips of %d frames of %dx%d from %s, %d classes (the moving "
           "item's), seed %llu, in %s\n",
           o.n, o.test, o.frames, o.h, o.w, o.from, src[0]->classes, (unsigned long long)o.seed, o.out);
  lam_dataset_free(src[0]), lam_dataset_free(src[1]);
  return rc;
}

/* Removes the tree at path (a half-written set's temporary folder). */
static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static int cmd_images(int argc, char **argv) {
  data_opts o;
  int rc = parse(argc, argv, &o);
  if (rc) return rc < 0 ? 0 : rc;
  if (o.format != FORMAT_PNG && o.format != FORMAT_JPEG)
    return cli_usage_error("data", "images: --format png|jpeg is required");
  if (o.size_set || o.frames_set || o.seconds_set)
    return cli_usage_error("data", "images: --%s is not for images (they keep the source's size)",
                           o.size_set ? "size" : o.frames_set ? "frames" : "seconds");
  if (check_new_folder(o.out)) return 1;
  struct stat st;
  lam_dataset *src[2] = {NULL, NULL};
  if (lam_dataset_load(o.from, 1, &src[0]) != LAM_OK) return fail("--from (its training part)");
  if (lam_dataset_load(o.from, 0, &src[1]) != LAM_OK) {
    lam_dataset_free(src[0]);
    return fail("--from (its test part)");
  }
  size_t want[2] = {o.n, o.test};
  for (int k = 0; k < 2; k++)
    if (want[k] > src[k]->n) {
      fprintf(stderr, "lamina data: %s %zu images, but %s's %s part has %zu\n", k ? "--test" : "--n", want[k], o.from,
              k ? "test" : "training", src[k]->n);
      lam_dataset_free(src[0]), lam_dataset_free(src[1]);
      return 1;
    }
  char tmp[4096], part[4096 + 16];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", o.out, (long)getpid());
  rc = 0;
  if (mkdir(tmp, 0777) != 0) {
    fprintf(stderr, "lamina data: cannot make '%s': %s (the parent of --out must exist and be writable)\n", tmp,
            strerror(errno));
    rc = 1;
  }
  for (int k = 0; k < 2 && !rc; k++) {
    snprintf(part, sizeof part, "%s/%s", tmp, k ? "test" : "train");
    if (mkdir(part, 0777) != 0) {
      fprintf(stderr, "lamina data: cannot make '%s': %s\n", part, strerror(errno));
      rc = 1;
    } else if (lam_data_images_part(src[k], want[k], k ? o.seed ^ 0x7465737473636e65ULL : o.seed, o.format, part) !=
               LAM_OK) {
      rc = fail("writing the images");
    }
  }
  if (!rc && stat(o.out, &st) == 0 && rmdir(o.out) != 0) { /* the empty folder given: replaced by the whole set */
    fprintf(stderr, "lamina data: cannot replace the empty folder '%s': %s\n", o.out, strerror(errno));
    rc = 1;
  }
  if (!rc && rename(tmp, o.out) != 0) {
    fprintf(stderr, "lamina data: cannot move '%s' to '%s': %s\n", tmp, o.out, strerror(errno));
    rc = 1;
  }
  if (rc) nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  else
    printf("lamina data images: %zu training and %zu test images of %dx%d in colour, %d classes, as %s files from %s, "
           "seed %llu, in %s\n",
           o.n, o.test, src[0]->h, src[0]->w, src[0]->classes, o.format == FORMAT_PNG ? "PNG" : "JPEG", o.from,
           (unsigned long long)o.seed, o.out);
  lam_dataset_free(src[0]), lam_dataset_free(src[1]);
  return rc;
}

/* coco: its own options (the makers' --n, --seed... mean nothing to it); the work is lam_data_coco's. */
static int cmd_coco(int argc, char **argv) {
  static const struct option longopts[] = {{"annotations", required_argument, 0, 'a'}, {"images", required_argument, 0, 'i'},
                                           {"out", required_argument, 0, 'o'},         {"part", required_argument, 0, 'p'},
                                           {"size", required_argument, 0, 's'},        {"help", no_argument, 0, 'h'},
                                           {0, 0, 0, 0}};
  const char *ann = NULL, *images = NULL, *out = NULL, *part = "train";
  int fit_h = 0, fit_w = 0;
  int c, li = 0;
  opterr = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, ":", longopts, &li)) != -1) {
    const char *opt = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    switch (c) {
      case 'a': ann = optarg; break;
      case 'i': images = optarg; break;
      case 'o': out = optarg; break;
      case 'p':
        if (strcmp(optarg, "train") && strcmp(optarg, "test"))
          return cli_usage_error("data", "--part: '%s' is not train or test", optarg);
        part = optarg;
        break;
      case 's': {
        char end;
        if (sscanf(optarg, "%dx%d%c", &fit_h, &fit_w, &end) != 2 || fit_h < 1 || fit_w < 1 || fit_h > 4096 || fit_w > 4096)
          return cli_usage_error("data", "--size: '%s' is not HxW (1 to 4096 each), e.g. 256x256", optarg);
        break;
      }
      case 'h': usage(stdout); return 0;
      case ':': return cli_usage_error("data", "option '%s' needs a value", opt);
      default: return cli_usage_error("data", "coco: unknown option '%s'", opt);
    }
  }
  if (optind < argc) return cli_usage_error("data", "unexpected argument '%s'", argv[optind]);
  if (!ann || !images || !out)
    return cli_usage_error("data", "coco: --%s is required", !ann ? "annotations FILE" : !images ? "images DIR" : "out DIR");
  size_t n = 0, k = 0;
  if (lam_data_coco(ann, images, out, part, fit_h, fit_w, &n, &k) != LAM_OK) return fail("coco");
  printf("lamina data coco: %zu images and their masks (%zu classes and the background) from %s, in %s/%s\n", n, k, ann,
         out, part);
  return 0;
}

static int cmd_segment(int argc, char **argv) { return cmd_idx_set(KIND_SEGMENT, argc, argv); }
static int cmd_clips(int argc, char **argv) { return cmd_idx_set(KIND_CLIPS, argc, argv); }

const cli_sub cli_data_kinds[] = {
    {"segment", "scenes for segmentation, a class per pixel (M2NIST-style)", cmd_segment},
    {"clips", "clips of a moving and a still item, a class per clip (Moving-MNIST-style)", cmd_clips},
    {"images", "an image folder of PNG or JPEG files in colour", cmd_images},
    {"coco", "a segmentation folder (images, masks) from a COCO instances file", cmd_coco},
    {NULL, NULL, NULL},
};

int cmd_data(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? EXIT_USAGE : 0;
  }
  for (const cli_sub *k = cli_data_kinds; k->name; k++)
    if (!strcmp(argv[1], k->name)) return k->run(argc - 1, argv + 1);
  char names[128];
  return cli_usage_error("data", "unknown kind '%s' (data sets: %s)", argv[1], cli_sub_names(cli_data_kinds, names, sizeof names));
}
