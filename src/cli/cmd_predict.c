/* cmd_predict.c — `lamina predict`: a saved model on images. Image files (or a data set's test part) are
 * fitted to the model's input and normalized as training normalizes them (lam_model_forward_u8); a model
 * with a class per image prints each image's class and probabilities (CSV, or JSON), a model of clips each video
 * file's over --test-clips clips, their softmax averaged (lam_predict_clips); one with a class per
 * pixel writes a mask per image (PNG, the class as the grey value) and, with --grid, a picture of a few
 * test images: input | truth | prediction, each class its colour. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: lamina predict --load MODEL --input FILE|DIR [--out DIR] [--batch B] [--device D] [--json]\n"
          "                      [--test-clips K] [--frame-stride S]\n"
          "       lamina predict --load MODEL --data DATA [--out DIR] [--grid FILE.png] [--count N] ...\n"
          "Runs a saved model (lamina train --save) in evaluation mode on images.\n"
          "  --load MODEL     the checkpoint (required)\n"
          "  --input FILE|DIR a PNG or JPEG file, or a folder of them (and its subfolders' files, one level\n"
          "                   down: an image folder's part); each fitted to the model's input as image folders\n"
          "                   are (scaled to cover it, the middle kept) and made grey or colour as it takes;\n"
          "                   for a model of clips, a video file (.mp4, .avi, .mkv, .webm, .mov) or a folder of\n"
          "                   them, each video's row its probabilities over --test-clips clips\n"
          "  --test-clips K   clips of each video, evenly spaced over it, their softmax averaged (1 to 64;\n"
          "                   default 1: the middle clip); also for --data of a video folder\n"
          "  --frame-stride S a clip's every S-th frame (default: the model's, kept in its checkpoint, else 2);\n"
          "                   its frames are the model's\n"
          "  --data DATA      instead: the test part of a data set, as 'lamina train --data' reads it\n"
          "  --out DIR        where a model with a class per pixel writes its masks, DIR/NAME.png, each pixel's\n"
          "                   class as its grey value (required for such a model; made if missing)\n"
          "  --grid FILE.png  with --data and a class per pixel: a picture of the first --count test images,\n"
          "                   each a row of input | truth | prediction, each class its colour (0 black, 255 grey)\n"
          "  --count N        images in the grid (default 8)\n"
          "  --batch B        images per forward (default 256)\n"
          "  --device D       auto (default), cpu or cuda\n"
          "  --threads N      threads of the CPU work\n"
          "  --json           one JSON array instead of CSV\n"          "  --reduce-zero-label, --label-map FILE  with --data of a mask folder: its values as train reads them\n"
          "Output for a class per image: CSV on stdout, a header then one row an image: name,class,p0,p1,...\n"
          "(name: the file, or the image's index in --data's test part; p: the softmax probabilities); a model\n"
          "trained on an image folder adds class_name after class (the class's folder; JSON: \"class_name\").\n"
          "--data reads an image folder at the size the model was trained at (train --size, kept in it).\n"
          "Exit status: 0 ok, 1 failure, 2 bad usage.\n");
}

typedef struct predict_opts {
  int reduce_zero_label;
  const uint8_t *label_map; /* --label-map's table, or NULL */
  uint8_t map[256];
  const char *load, *input, *data, *out, *grid;
  int count, batch, json, threads;
  int test_clips, frame_stride; /* videos: clips a video, and a clip's stride (0: the model's) */
  lam_device device;
} predict_opts;

static int parse(int argc, char **argv, predict_opts *o) {
  static const struct option longopts[] = {
      {"load", required_argument, 0, 'l'},  {"input", required_argument, 0, 'i'}, {"data", required_argument, 0, 'd'},
      {"out", required_argument, 0, 'o'},   {"grid", required_argument, 0, 'g'},  {"count", required_argument, 0, 'n'},
      {"batch", required_argument, 0, 'b'}, {"device", required_argument, 0, 'D'}, {"threads", required_argument, 0, 't'},
      {"json", no_argument, 0, 'j'},        {"help", no_argument, 0, 'h'},        {"reduce-zero-label", no_argument, 0, 'z'},
      {"label-map", required_argument, 0, 'm'}, {"test-clips", required_argument, 0, 'K'},
      {"frame-stride", required_argument, 0, 'S'}, {0, 0, 0, 0}};
  *o = (predict_opts){.count = 8, .batch = 256, .device = LAM_DEVICE_AUTO};
  int c, li = 0;
  long v;
  opterr = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, ":", longopts, &li)) != -1) {
    const char *opt = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    switch (c) {
      case 'l': o->load = optarg; break;
      case 'i': o->input = optarg; break;
      case 'd': o->data = optarg; break;
      case 'o': o->out = optarg; break;
      case 'g': o->grid = optarg; break;
      case 'n':
        if (cli_parse_int("predict", "--count", optarg, 1, 1000, &v)) return EXIT_USAGE;
        o->count = (int)v;
        break;
      case 'b':
        if (cli_parse_int("predict", "--batch", optarg, 1, 65536, &v)) return EXIT_USAGE;
        o->batch = (int)v;
        break;
      case 't':
        if (cli_parse_int("predict", "--threads", optarg, 1, LAM_MAX_THREADS, &v)) return EXIT_USAGE;
        o->threads = (int)v;
        break;
      case 'D':
        if (lam_device_parse(optarg, &o->device) != LAM_OK)
          return cli_usage_error("predict", "--device: '%s' is not a device (use auto, cpu or cuda)", optarg);
        break;
      case 'K':
        if (cli_parse_int("predict", "--test-clips", optarg, 1, LAM_MAX_TEST_CLIPS, &v)) return EXIT_USAGE;
        o->test_clips = (int)v;
        break;
      case 'S':
        if (cli_parse_int("predict", "--frame-stride", optarg, 1, 1000, &v)) return EXIT_USAGE;
        o->frame_stride = (int)v;
        break;
      case 'j': o->json = 1; break;
      case 'z': o->reduce_zero_label = 1; break;
      case 'm':
        if (lam_label_map_read(optarg, o->map) != LAM_OK) {
          fprintf(stderr, "lamina predict: --label-map: %s\n", lam_last_error());
          return 1;
        }
        o->label_map = o->map;
        break;
      case 'h': usage(stdout); return -1;
      case ':': return cli_usage_error("predict", "option '%s' needs a value", opt);
      default: return cli_usage_error("predict", "unknown option '%s'", opt);
    }
  }
  if (optind < argc) return cli_usage_error("predict", "unexpected argument '%s'", argv[optind]);
  if (!o->load) return cli_usage_error("predict", "--load MODEL is required (a checkpoint from lamina train --save)");
  if (!o->input == !o->data) return cli_usage_error("predict", "give one of --input FILE|DIR and --data DATA");
  if (o->grid && !o->data) return cli_usage_error("predict", "--grid needs --data (the test images' true classes)");
  if ((o->reduce_zero_label || o->label_map) && !(o->data && lam_dataset_mask_folder_layout(o->data)))
    return cli_usage_error("predict", "--reduce-zero-label and --label-map are for --data of a mask folder");
  return 0;
}

static int fail(const char *what) {
  fprintf(stderr, "lamina predict: %s%s%s\n", what ? what : "", what ? ": " : "", lam_last_error());
  return 1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The files of --input (input_files). */
typedef struct files {
  char **v;
  size_t n, cap;
} files;
static int files_add(files *f, const char *path) {
  if (f->n == f->cap) {
    size_t cap = f->cap ? 2 * f->cap : 256;
    char **t = realloc(f->v, cap * sizeof *t);
    if (!t) return -1;
    f->v = t, f->cap = cap;
  }
  return (f->v[f->n] = strdup(path)) ? (int)(f->n++, 0) : -1;
}
static int scan(const char *dir, int depth, int videos, files *f) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "lamina predict: --input: cannot list '%s': %s\n", dir, strerror(errno));
    return 1;
  }
  /* no output of the run goes there */
  if (lam_input_folder(dir, videos ? "videos (--input)" : "images (--input)") != LAM_OK) {
    closedir(d);
    return fail("--input");
  }
  int rc = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL && !rc;) {
    if (e->d_name[0] == '.') continue;
    char p[4096];
    struct stat st;
    if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= sizeof p || stat(p, &st) != 0) continue;
    if (S_ISDIR(st.st_mode) && depth == 0) rc = scan(p, 1, videos, f);
    else if (S_ISREG(st.st_mode) && (videos ? lam_video_file_name(e->d_name) : lam_image_file_name(e->d_name)) &&
             files_add(f, p))
      rc = 1;
  }
  closedir(d);
  return rc;
}

/* --input's files into f, sorted by path: the file itself (a regular one), or its folder's video files (videos) or
 * image files and its subfolders'. 0, or 1 after saying why; none found is 0 with f->n 0 (the caller says what kind
 * it wanted). */
static int input_files(const char *input, int videos, files *f) {
  struct stat st;
  if (stat(input, &st) != 0) {
    fprintf(stderr, "lamina predict: --input '%s': %s\n", input, strerror(errno));
    return 1;
  }
  if (S_ISDIR(st.st_mode)) {
    if (scan(input, 0, videos, f)) return 1;
  } else if (lam_input_check(input, videos ? "video (--input)" : "image (--input)") != LAM_OK) {
    return fail("--input");
  } else if (files_add(f, input)) {
    fprintf(stderr, "lamina predict: out of host memory for the list of --input's files\n");
    return 1;
  }
  qsort(f->v, f->n, sizeof *f->v, cmp_str);
  return 0;
}

static void files_free(files *f) {
  for (size_t i = 0; i < f->n; i++) free(f->v[i]);
  free(f->v);
}

/* Makes folder dir if it is missing (its parent must exist). */
static int make_dir(const char *dir) {
  struct stat st;
  if (stat(dir, &st) == 0 || mkdir(dir, 0777) == 0 || errno == EEXIST) return 0;
  fprintf(stderr, "lamina predict: cannot make the folder '%s': %s\n", dir, strerror(errno));
  return 1;
}

/* Where each mask goes: --out/NAME.png, NAME the input's path under --input less its extension (a subfolder's
 * image in the same subfolder of --out), or the test image's index with --data. Two inputs that would write one
 * mask (a.jpg and a.png) are an error naming both, and --out may not be inside --input: the masks would be read
 * as images by the next run. All before any work. */
static int mask_paths(const predict_opts *o, const files *fl, size_t n, files *mp) {
  struct stat st;
  const int dir_in = o->input && stat(o->input, &st) == 0 && S_ISDIR(st.st_mode);
  if (dir_in && lam_path_inside(o->out, o->input))
    return cli_usage_error("predict", "--out '%s' is inside --input '%s': the masks would be taken for images next "
                           "time; give a folder outside it", o->out, o->input);
  if (make_dir(o->out)) return 1;
  const size_t skip = dir_in ? strlen(o->input) + 1 : 0;
  for (size_t i = 0; i < n; i++) {
    char rel[4200], path[8400];
    if (o->data) snprintf(rel, sizeof rel, "%06zu", i);
    else {
      const char *name = fl->v[i] + skip;
      if (!dir_in) {
        const char *slash = strrchr(name, '/');
        name = slash ? slash + 1 : name;
      }
      snprintf(rel, sizeof rel, "%s", name);
      char *dot = strrchr(rel, '.'), *slash = strrchr(rel, '/');
      if (dot && (!slash || dot > slash)) *dot = '\0';
    }
    if ((size_t)snprintf(path, sizeof path, "%s/%s.png", o->out, rel) >= sizeof path) {
      fprintf(stderr, "lamina predict: the mask path for '%s' is too long\n", o->data ? rel : fl->v[i]);
      return 1;
    }
    if (files_add(mp, path)) {
      fprintf(stderr, "lamina predict: out of host memory\n");
      return 1;
    }
  }
  const char **by = malloc((n ? n : 1) * sizeof *by); /* the paths in order, to find two alike */
  if (!by) {
    fprintf(stderr, "lamina predict: out of host memory\n");
    return 1;
  }
  for (size_t i = 0; i < n; i++) by[i] = mp->v[i];
  qsort(by, n, sizeof *by, cmp_str);
  int rc = 0;
  for (size_t i = 1; i < n && !rc; i++)
    if (!strcmp(by[i - 1], by[i])) {
      size_t a = 0, b; /* the two inputs: the first and the next with this mask */
      while (strcmp(mp->v[a], by[i])) a++;
      for (b = a + 1; strcmp(mp->v[b], by[i]); b++) {}
      fprintf(stderr, "lamina predict: '%s' and '%s' would both write the mask '%s': rename one of them, or predict "
              "them apart\n", fl->v[a], fl->v[b], by[i]);
      rc = 1;
    }
  free(by);
  return rc;
}

/* Makes the masks' subfolders and claims each mask as an output of the run (files.c: not an input, not another
 * file's kind), before any work. */
static int claim_masks(const predict_opts *o, const files *mp) {
  const size_t base = strlen(o->out) + 1;
  for (size_t i = 0; i < mp->n; i++) {
    char *slash = strrchr(mp->v[i] + base, '/');
    if (slash) {
      *slash = '\0';
      int rc = make_dir(mp->v[i]);
      *slash = '/';
      if (rc) return 1;
    }
    if (lam_output_check(mp->v[i], "mask (--out)", LAM_FILE_PNG) != LAM_OK) return fail("--out");
  }
  return 0;
}

/* Class k's name, "" where the model names fewer classes than it has (--classes raised them). */
static const char *class_name(const lam_model *m, int k) {
  const char *s = lam_model_class_name(m, k);
  return s ? s : "";
}

/* One row of a class per image (or video): its name, class (and class name) and probabilities pr[0..K), into the
 * JSON array arr, or as a CSV line. */
static void print_row(json_t *arr, const lam_model *m, int named, int K, const char *name, const double *pr) {
  int best = 0;
  for (int k = 1; k < K; k++)
    if (pr[k] > pr[best]) best = k;
  if (arr) {
    json_t *row = json_object(), *ps = json_array();
    for (int k = 0; k < K; k++) json_array_append_new(ps, cli_json_num(pr[k]));
    json_object_set_new(row, "name", cli_json_str(name));
    json_object_set_new(row, "class", json_integer(best));
    if (named) json_object_set_new(row, "class_name", cli_json_str(class_name(m, best)));
    json_object_set_new(row, "probabilities", ps);
    json_array_append_new(arr, row);
  } else {
    cli_csv_field(stdout, name);
    printf(",%d", best);
    if (named) putchar(','), cli_csv_field(stdout, class_name(m, best));
    for (int k = 0; k < K; k++) printf(",%.6f", pr[k]);
    printf("\n");
  }
}

/* A set of videos' clips (lam_dataset_clips a video; video files, or --data's streamed test part): each video's row
 * of its probabilities, its clips' softmax averaged (lam_predict_clips), named by names[v] or its index. */
static int print_videos(const predict_opts *o, lam_model *m, const lam_dataset *set, char *const *names) {
  const int K = lam_model_outputs(m), named = lam_model_class_name(m, 0) != NULL;
  const size_t videos = set->n / (size_t)lam_dataset_clips(set);
  double *probs = malloc(videos * K * sizeof *probs);
  if (!probs) {
    fprintf(stderr, "lamina predict: out of host memory for %zu videos' probabilities\n", videos);
    return 1;
  }
  if (lam_predict_clips(m, set, o->batch, probs, NULL) != LAM_OK) {
    free(probs);
    return fail(NULL);
  }
  json_t *arr = o->json ? json_array() : NULL;
  if (!o->json) {
    printf(named ? "name,class,class_name" : "name,class");
    for (int k = 0; k < K; k++) printf(",p%d", k);
    printf("\n");
  }
  for (size_t v = 0; v < videos; v++) {
    char name[32];
    snprintf(name, sizeof name, "%zu", v);
    print_row(arr, m, named, K, names ? names[v] : name, probs + v * K);
  }
  free(probs);
  return arr && cli_json_print(arr) ? 1 : 0;
}

/* Each class its colour: 0 (the background of a segmentation) black, 255 (ignored) grey, the others a
 * fixed palette of well-separated hues. */
static void class_colour(int k, uint8_t rgb[3]) {
  static const uint8_t pal[12][3] = {{230, 25, 75},  {60, 180, 75},  {255, 225, 25}, {0, 130, 200},
                                     {245, 130, 48}, {145, 30, 180}, {70, 240, 240}, {240, 50, 230},
                                     {210, 245, 60}, {250, 190, 212}, {0, 128, 128}, {170, 110, 40}};
  if (k == 0) rgb[0] = rgb[1] = rgb[2] = 0;
  else if (k == 255) rgb[0] = rgb[1] = rgb[2] = 128;
  else memcpy(rgb, pal[(k - 1) % 12], 3);
}

/* The grid: a row per image of three h x w cells (input, truth, prediction) with 2-pixel white gaps. */
static int write_grid(const char *path, int rows, int c, int h, int w, const uint8_t *images, const uint8_t *truth,
                      const uint8_t *pred) {
  const int gap = 2, W = 3 * w + 4 * gap, H = rows * h + (rows + 1) * gap;
  uint8_t *px = malloc((size_t)H * W * 3);
  if (!px) {
    fprintf(stderr, "lamina predict: out of host memory for the grid\n");
    return 1;
  }
  memset(px, 255, (size_t)H * W * 3);
  const size_t P = (size_t)h * w;
  for (int r = 0; r < rows; r++)
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) {
        const int Y = gap + r * (h + gap) + y;
        uint8_t *cell = px + ((size_t)Y * W + gap + x) * 3;
        const uint8_t *im = images + (size_t)r * c * P + (size_t)y * w + x;
        for (int q = 0; q < 3; q++) cell[q] = im[(c == 3 ? q : 0) * P];
        class_colour(truth[(size_t)r * P + (size_t)y * w + x], cell + (size_t)(w + gap) * 3);
        class_colour(pred[(size_t)r * P + (size_t)y * w + x], cell + (size_t)2 * (w + gap) * 3);
      }
  int rc = lam_image_save_png(path, px, H, W, 3) != LAM_OK ? fail(path) : 0;
  free(px);
  return rc;
}

int cmd_predict(int argc, char **argv) {
  predict_opts o;
  int rc = parse(argc, argv, &o);
  if (rc) return rc < 0 ? 0 : rc;
  lam_ctx *ctx = NULL;
  lam_model *m = NULL;
  lam_dataset *set = NULL;
  files fl = {0}, mp = {0}; /* the input files; the masks' paths, in the same order */
  uint8_t *images = NULL, *masks = NULL;
  float *logits = NULL;
  rc = 1;
  if (lam_ctx_create(&ctx, o.device) != LAM_OK || (o.threads && lam_ctx_set_threads(ctx, o.threads) != LAM_OK) ||
      lam_checkpoint_load(ctx, o.load, &m, NULL, NULL) != LAM_OK || lam_model_set_train(m, 0) != LAM_OK) {
    rc = fail(NULL);
    goto out;
  }
  int C, H, W, K, OH, OW;
  lam_model_input_shape(m, &C, &H, &W);
  lam_model_output_shape(m, &K, &OH, &OW);
  const int per_pixel = OH * OW > 1;
  if (per_pixel && !o.out && !o.grid) {
    rc = cli_usage_error("predict", "the model gives a class per pixel: give --out DIR for its masks (or --grid)");
    goto out;
  }
  if (o.grid && !per_pixel) {
    rc = cli_usage_error("predict", "--grid draws a class per pixel, and this model gives a class per image");
    goto out;
  }
  if (o.grid && (OH != H || OW != W)) {
    rc = cli_usage_error("predict", "--grid: the model's %dx%d output is not its %dx%d input", OH, OW, H, W);
    goto out;
  }
  if (o.grid && lam_output_check(o.grid, "grid picture (--grid)", LAM_FILE_PNG) != LAM_OK) {
    rc = fail("--grid");
    goto out;
  }
  /* the images, (n, C, H, W) uint8; a model of clips, (n, T, C, H, W) */
  size_t n = 0;
  const int T = lam_model_input_frames(m);
  const size_t sample = (size_t)T * C * H * W;
  /* video files and video folders: clips as the model was trained on (its frames, its kept stride) */
  const int stride = o.frame_stride ? o.frame_stride : lam_model_frame_stride(m) ? lam_model_frame_stride(m) : 2;
  if ((o.test_clips || o.frame_stride) && (T == 1 || per_pixel || (o.data && !lam_dataset_is_video_folder(o.data)))) {
    rc = cli_usage_error("predict", "--test-clips and --frame-stride are for a model of clips with a class a clip, on "
                         "video files (--input) or a video folder (--data)");
    goto out;
  }
  if (T > 1 && !o.data) { /* video files: each video's clips, streamed as a video folder's are */
    if (input_files(o.input, 1, &fl)) goto out;
    if (!fl.n) {
      fprintf(stderr, "lamina predict: --input '%s' holds no video files (.mp4, .avi, .mkv, .webm, .mov); the model "
              "takes clips of %d frames\n", o.input, T);
      goto out;
    }
    lam_image_opts vo = {.h = H, .w = W, .frames = T, .frame_stride = stride, .test_clips = o.test_clips};
    if (lam_dataset_load_videos((const char *const *)fl.v, fl.n, C, &vo, &set) != LAM_OK) {
      rc = fail("--input");
      goto out;
    }
    rc = print_videos(&o, m, set, fl.v);
    goto out;
  }
  if (o.data) {
    /* an image folder at the size the model was fitted to (its checkpoint's --size), as training read it */
    lam_image_opts fit = {.reduce_zero_label = o.reduce_zero_label, .label_map = o.label_map, .frames = T > 1 ? T : 0,
                          .frame_stride = stride, .test_clips = o.test_clips};
    lam_model_fit(m, &fit.h, &fit.w);
    if (lam_dataset_load_opts(o.data, 0, &fit, &set) != LAM_OK) {
      rc = fail("--data");
      goto out;
    }
    const int sc = set->c > 0 ? set->c : 1, st = set->t > 0 ? set->t : 1;
    if (st != T) {
      fprintf(stderr, "lamina predict: --data's test samples have %d frame(s), the model takes %d\n", st, T);
      goto out;
    }
    if (sc != C || set->h != H || set->w != W) {
      fprintf(stderr, "lamina predict: --data's test images are %dx%dx%d, the model takes %dx%dx%d\n", sc, set->h,
              set->w, C, H, W);
      goto out;
    }
    if (set->source && !per_pixel) { /* streamed (a video folder's clips): decoded a batch at a time */
      rc = print_videos(&o, m, set, NULL);
      goto out;
    }
    n = o.grid && !o.out && set->n > (size_t)o.count ? (size_t)o.count : set->n;
    images = set->images;
  } else {
    if (input_files(o.input, 0, &fl)) goto out;
    if (!fl.n) {
      fprintf(stderr, "lamina predict: --input '%s' holds no .png, .jpg or .jpeg files\n", o.input);
      goto out;
    }
    n = fl.n;
    images = malloc(n * sample);
    if (!images) {
      fprintf(stderr, "lamina predict: out of host memory for %zu images\n", n);
      goto out;
    }
    for (size_t i = 0; i < n; i++)
      if (lam_image_load(fl.v[i], C, H, W, images + i * sample) != LAM_OK) {
        rc = fail(NULL);
        goto out;
      }
  }
  if (o.out && per_pixel && (mask_paths(&o, &fl, n, &mp) || claim_masks(&o, &mp))) goto out;
  const size_t out_per = (size_t)K * OH * OW, P = (size_t)OH * OW;
  logits = malloc((size_t)o.batch * out_per * sizeof *logits);
  masks = per_pixel ? malloc(n * P) : NULL;
  if (!logits || (per_pixel && !masks)) {
    fprintf(stderr, "lamina predict: out of host memory\n");
    goto out;
  }
  json_t *arr = o.json && !per_pixel ? json_array() : NULL;
  const int named = lam_model_class_name(m, 0) != NULL; /* an image folder's class names, from the checkpoint */
  if (!per_pixel && !o.json) {
    printf(named ? "name,class,class_name" : "name,class");
    for (int k = 0; k < K; k++) printf(",p%d", k);
    printf("\n");
  }
  for (size_t off = 0; off < n; off += (size_t)o.batch) {
    const int B = (int)(n - off < (size_t)o.batch ? n - off : (size_t)o.batch);
    if (lam_model_forward_u8(m, B, images + off * sample, logits) != LAM_OK) {
      rc = fail(NULL);
      json_decref(arr);
      goto out;
    }
    for (int b = 0; b < B; b++) {
      const size_t i = off + (size_t)b;
      const float *l = logits + (size_t)b * out_per;
      char name[4200];
      if (o.data) snprintf(name, sizeof name, "%zu", i);
      else snprintf(name, sizeof name, "%s", fl.v[i]);
      if (per_pixel) {
        for (size_t p = 0; p < P; p++) { /* the first largest score, as the loss's argmax */
          int best = 0;
          for (int k = 1; k < K; k++)
            if (l[(size_t)k * P + p] > l[(size_t)best * P + p]) best = k;
          masks[i * P + p] = (uint8_t)best;
        }
        continue;
      }
      double mx = l[0], sum = 0.0, pr[256];
      for (int k = 1; k < K; k++) mx = l[k] > mx ? l[k] : mx;
      for (int k = 0; k < K; k++) sum += pr[k] = exp((double)l[k] - mx);
      for (int k = 0; k < K; k++) pr[k] /= sum;
      print_row(arr, m, named, K, name, pr);
    }
  }
  if (arr && cli_json_print(arr)) goto out;
  if (per_pixel && o.out) {
    for (size_t i = 0; i < n; i++) {
      if (lam_image_save_png(mp.v[i], masks + i * P, OH, OW, 1) != LAM_OK) {
        rc = fail(NULL);
        goto out;
      }
    }
    if (!o.json) printf("lamina predict: %zu masks of %dx%d (%d classes) written to %s\n", n, OH, OW, K, o.out); /* HxW, as sizes are everywhere */
  }
  if (o.grid) {
    const int rows = (int)(n < (size_t)o.count ? n : (size_t)o.count);
    if (write_grid(o.grid, rows, C, H, W, images, set->labels, masks)) goto out;
    if (!o.json) printf("lamina predict: a grid of %d test images (input | truth | prediction) written to %s\n", rows, o.grid);
  }
  rc = 0;
out:
  if (!set) free(images);
  files_free(&fl), files_free(&mp);
  free(masks);
  free(logits);
  lam_dataset_free(set);
  lam_model_free(m);
  lam_ctx_free(ctx);
  return rc;
}
