/* cmd_bench_data.c — `lamina bench data`: the data path alone, as a streaming trainer feeds itself but with no
 * model: an image or mask folder streamed from its files (decoded and fitted on the host threads into pinned
 * batches a few ahead, copied to the device as uint8), epoch by epoch in a new seeded order. Prints images/s per
 * epoch and their median, and how much of each epoch the loop waited for the decoder (lam_data_bench). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: lamina bench data --data DIR [--size HxW] [--batch B] [--epochs E] [--buffers N] [--seed S]\n"
          "                         [--resident] [--skip-bad] [--reduce-zero-label] [--device D] [--threads N]\n"
          "                         [--frames T] [--frame-stride S] [--decode D] [--json]\n"
          "Times the data path alone: an image, mask or video folder's training part streamed from its files, as\n"
          "'lamina train --stream' reads it (each batch decoded and fitted on the host threads a few ahead into\n"
          "pinned buffers, and copied to the device as uint8 images and labels), with no model. Prints the\n"
          "images (and masks) delivered per second each epoch, their median, and the time the loop waited for\n"
          "the decoder.\n"
          "  --data DIR       an image, mask or video folder (as for train); an IDX/.npy set is read whole\n"
          "  --size HxW       fit every image (and mask) to HxW, as train --size\n"
          "  --frames T       a video folder's clips: T frames each (default 16) ...\n"
          "  --frame-stride S ... every S-th frame (default 2), from a start drawn each epoch as train draws it\n"
          "  --batch B        samples a batch (default 16)\n"
          "  --epochs E       epochs to time (default 3)\n"
          "  --buffers N      pinned buffers, 2 or 3 (default 3; batches smaller than twice the host threads\n"
          "                   take more, up to 8)\n"
          "  --seed S         the order's seed (default 1)\n"
          "  --resident       decode the part whole first (as train does when it fits) and time copying it\n"
          "  --skip-bad, --reduce-zero-label  as for train\n"
          "  --decode auto|cpu|gpu  a video folder's decoder (gpu: NVDEC) or an image folder's (gpu: nvJPEG), as\n"
          "                   for train\n"
          "  --device D       auto|cpu|cuda (default auto)\n"
          "  --threads N      host threads (default: as train)\n"
          "  --json           one JSON object instead of text\n"
          "Exit status: 0 ok, 1 failure, 2 bad usage.\n");
}

enum { O_DATA = 1, O_SIZE, O_BATCH, O_EPOCHS, O_BUFFERS, O_SEED, O_RESIDENT, O_SKIPBAD, O_REDUCE0, O_DEVICE, O_THREADS,
       O_FRAMES, O_STRIDE, O_DECODE, O_JSON, O_HELP };

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int bench_data(int argc, char **argv) {
  const char *cmd = "bench data", *data = NULL;
  lam_image_opts io = {.stream = LAM_STREAM_ON, .cache = ""};
  long batch = 16, epochs = 3, buffers = 3, threads = 0;
  uint64_t seed = 1;
  int json = 0;
  lam_device device = LAM_DEVICE_AUTO;
  static const struct option longopts[] = {
      {"data", required_argument, 0, O_DATA},       {"size", required_argument, 0, O_SIZE},
      {"frames", required_argument, 0, O_FRAMES},   {"frame-stride", required_argument, 0, O_STRIDE},
      {"batch", required_argument, 0, O_BATCH},     {"epochs", required_argument, 0, O_EPOCHS},
      {"buffers", required_argument, 0, O_BUFFERS}, {"seed", required_argument, 0, O_SEED},
      {"resident", no_argument, 0, O_RESIDENT},     {"skip-bad", no_argument, 0, O_SKIPBAD},
      {"reduce-zero-label", no_argument, 0, O_REDUCE0}, {"device", required_argument, 0, O_DEVICE},
      {"threads", required_argument, 0, O_THREADS}, {"json", no_argument, 0, O_JSON},
      {"decode", required_argument, 0, O_DECODE},
      {"help", no_argument, 0, O_HELP},             {0, 0, 0, 0}};
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    char tail;
    long v;
    switch (c) {
      case O_DATA: data = optarg; break;
      case O_SIZE:
        if (sscanf(optarg, "%dx%d%c", &io.h, &io.w, &tail) != 2 || io.h < 1 || io.w < 1 || io.h > 4096 || io.w > 4096)
          return cli_usage_error(cmd, "--size: '%s' is not HxW (1 to 4096 each)", optarg);
        break;
      case O_FRAMES: /* the ranges train takes */
        if (cli_parse_int(cmd, "--frames", optarg, 1, 255, &v)) return EXIT_USAGE;
        io.frames = (int)v;
        break;
      case O_STRIDE:
        if (cli_parse_int(cmd, "--frame-stride", optarg, 1, 1000, &v)) return EXIT_USAGE;
        io.frame_stride = (int)v;
        break;
      case O_BATCH:
        if (cli_parse_int(cmd, "--batch", optarg, 1, 65536, &batch)) return EXIT_USAGE;
        break;
      case O_EPOCHS:
        if (cli_parse_int(cmd, "--epochs", optarg, 1, 1000, &epochs)) return EXIT_USAGE;
        break;
      case O_BUFFERS:
        if (cli_parse_int(cmd, "--buffers", optarg, 2, 3, &buffers)) return EXIT_USAGE;
        break;
      case O_SEED:
        if (cli_parse_u64(cmd, "--seed", optarg, &seed)) return EXIT_USAGE;
        break;
      case O_RESIDENT: io.stream = LAM_STREAM_OFF; break;
      case O_SKIPBAD: io.skip_bad = 1; break;
      case O_REDUCE0: io.reduce_zero_label = 1; break;
      case O_DEVICE:
        if (lam_device_parse(optarg, &device) != LAM_OK)
          return cli_usage_error(cmd, "--device: '%s' is not auto, cpu or cuda", optarg);
        break;
      case O_THREADS:
        if (cli_parse_int(cmd, "--threads", optarg, 1, 4096, &threads)) return EXIT_USAGE;
        break;
      case O_DECODE:
        if (cli_parse_decode(cmd, optarg, &io.decoder)) return EXIT_USAGE;
        break;
      case O_JSON: json = 1; break;
      case O_HELP: usage(stdout); return 0;
      case ':': return cli_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
      default: return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
  if (!data) return cli_usage_error(cmd, "--data DIR is required (an image or mask folder)");

  lam_ctx *ctx = NULL;
  lam_dataset *d = NULL;
  double *secs = calloc((size_t)epochs, sizeof *secs);
  lam_data_bench_epoch *ep = calloc((size_t)epochs, sizeof *ep);
  int rc = 1;
  if (!secs || !ep) {
    fprintf(stderr, "lamina %s: no host memory\n", cmd);
    goto out;
  }
  if (lam_ctx_create(&ctx, device) != LAM_OK || (threads && lam_ctx_set_threads(ctx, (int)threads) != LAM_OK) ||
      lam_dataset_load_opts(data, 1, &io, &d) != LAM_OK) {
    fprintf(stderr, "lamina %s: %s\n", cmd, lam_last_error());
    goto out;
  }
  for (long e = 0; e < epochs; e++) {
    if (lam_data_bench(ctx, d, (int)batch, (int)buffers, seed, (int)e, &ep[e]) != LAM_OK) {
      fprintf(stderr, "lamina %s: epoch %ld: %s\n", cmd, e + 1, lam_last_error());
      goto out;
    }
    secs[e] = ep[e].images_per_s;
    if (!json)
      printf("epoch %ld: %zu samples in %.3f s, %.0f images/s; the loop waited %.1f ms for the decoder (%.1f%%), the "
             "device %.1f ms for copies\n", e + 1, d->n, ep[e].seconds, ep[e].images_per_s, ep[e].loader_wait_ms,
             100 * ep[e].loader_wait_ms / (1000 * ep[e].seconds), ep[e].copy_wait_ms);
  }
  qsort(secs, (size_t)epochs, sizeof *secs, cmp_double);
  const double median = epochs % 2 ? secs[epochs / 2] : (secs[epochs / 2 - 1] + secs[epochs / 2]) / 2;
  const int per_pixel = d->label_h > 1 || d->label_w > 1, T = d->t > 1 ? d->t : 1;
  if (!json) {
    if (d->t > 1) /* clips: a sample is T frames */
      printf("lamina bench data: %s, %zu clips of %d frames of %dx%dx%d, batch %ld, %s%s, on %s: median %.0f clips/s "
             "(%.0f frames/s)\n", data, d->n, d->t, d->c > 0 ? d->c : 1, d->h, d->w, batch,
             io.streamed ? "streamed from the files" : "resident", io.decoder == LAM_DECODE_GPU ? ", decoded by NVDEC" : "",
             lam_ctx_device_name(ctx), median, median * d->t);
    else
      printf("lamina bench data: %s, %zu samples of %dx%dx%d%s, batch %ld, %s, on %s: median %.0f images/s\n", data,
             d->n, d->c > 0 ? d->c : 1, d->h, d->w, per_pixel ? " with a mask each" : "", batch,
             io.streamed ? "streamed from the files" : "resident", lam_ctx_device_name(ctx), median);
    rc = 0;
    goto out;
  }
  json_t *root = json_object(), *list = json_array();
  int bad = !root || !list;
  bad |= json_object_set_new(root, "data", cli_json_str(data));
  bad |= json_object_set_new(root, "device_name", cli_json_str(lam_ctx_device_name(ctx)));
  bad |= json_object_set_new(root, "samples", json_integer((json_int_t)d->n));
  bad |= json_object_set_new(root, "shape", json_pack("[iii]", d->c > 0 ? d->c : 1, d->h, d->w));
  bad |= json_object_set_new(root, "frames", json_integer(T)); /* a sample's frames: a clip's T, else 1 */
  bad |= json_object_set_new(root, "frames_per_s", cli_json_num(median * T));
  bad |= json_object_set_new(root, "masks", json_boolean(per_pixel));
  bad |= json_object_set_new(root, "batch", json_integer(batch));
  bad |= json_object_set_new(root, "streamed", json_boolean(io.streamed));
  bad |= json_object_set_new(root, "images_per_s", cli_json_num(median));
  bad |= json_object_set_new(root, "decode", cli_json_str(io.decoder == LAM_DECODE_GPU ? "gpu" : io.decoder == LAM_DECODE_CPU ? "cpu" : "auto"));
  for (long e = 0; e < epochs && !bad; e++)
    bad |= json_array_append_new(list, json_pack("{s:f,s:f,s:f,s:f}", "seconds", ep[e].seconds, "images_per_s",
                                                 ep[e].images_per_s, "loader_wait_ms", ep[e].loader_wait_ms,
                                                 "copy_wait_ms", ep[e].copy_wait_ms));
  bad |= json_object_set_new(root, "epochs", list);
  if (bad) { /* cli_json_print takes the object (and frees it) */
    fprintf(stderr, "lamina %s: no memory for the JSON\n", cmd);
    json_decref(root);
  }
  rc = bad ? 1 : cli_json_print(root);
out:
  lam_dataset_free(d);
  lam_ctx_free(ctx);
  free(secs), free(ep);
  return rc;
}
