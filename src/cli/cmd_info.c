/* cmd_info.c — `lamina info`: what this build has, which devices are present, what auto would pick,
 * and the memory figures. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: lamina info [--json]\n"
          "Prints the build's features (CUDA, OpenMP, image files), the CUDA devices present with their memory, the\n"
          "device 'auto' picks, and the memory figures of a context on it.\n"
          "  --json   one JSON object instead of text\n"
          "  --help   this text\n");
}

int cmd_info(int argc, char **argv) {
  int json = 0;
  static const struct option longopts[] = {{"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  opterr = 0;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    if (c == 'j') json = 1;
    else if (c == 'h') {
      usage(stdout);
      return 0;
    } else return cli_usage_error("info", "unknown option '%s'", argv[optind - 1]);
  }
  if (optind < argc) return cli_usage_error("info", "unexpected argument '%s'", argv[optind]);

  lam_build_info bi;
  lam_build_info_get(&bi);
  const char *why = NULL;
  int ndev = lam_cuda_device_count(&why);
  lam_ctx *ctx = NULL;
  lam_status s = lam_ctx_create(&ctx, LAM_DEVICE_AUTO);
  lam_mem_stats ms = {0};
  if (s == LAM_OK) lam_mem_stats_get(ctx, &ms);

  char threads_why[224];
  int threads = lam_default_threads(threads_why, sizeof threads_why);
  const char *video_why = NULL;
  const int video = lam_video_supported(&video_why);
  int print_rc = 0;
  if (json) {
    json_t *j = json_object(), *devs = json_array(), *mem = json_object();
    int bad = !j || !devs || !mem;
    bad |= json_object_set_new(j, "version", cli_json_str(bi.version));
    bad |= json_object_set_new(j, "cuda", json_boolean(bi.with_cuda));
    bad |= json_object_set_new(j, "cuda_runtime", json_integer(bi.cuda_runtime));
    bad |= json_object_set_new(j, "cuda_archs", cli_json_str(bi.cuda_archs));
    bad |= json_object_set_new(j, "openmp", json_boolean(bi.with_openmp));
    bad |= json_object_set_new(j, "omp_threads", json_integer(bi.omp_max_threads));
    bad |= json_object_set_new(j, "threads", json_integer(threads));
    bad |= json_object_set_new(j, "threads_why", cli_json_str(threads_why));
    bad |= json_object_set_new(j, "png", json_boolean(lam_image_formats() & 1));
    bad |= json_object_set_new(j, "jpeg", json_boolean(lam_image_formats() & 2));
    bad |= json_object_set_new(j, "nvjpeg", json_boolean(lam_image_gpu_decode()));
    bad |= json_object_set_new(j, "video", json_boolean(video));
    if (!video) bad |= json_object_set_new(j, "video_why", cli_json_str(video_why ? video_why : ""));
    bad |= json_object_set_new(j, "mpi", json_boolean(cli_ranks_mpi()));
    bad |= json_object_set_new(j, "nccl", json_boolean(lam_nccl_built()));
    for (int d = 0; d < ndev; d++) {
      lam_cuda_device_info di;
      if (lam_cuda_device_info_get(d, &di) != LAM_OK) continue;
      char cc[24];
      snprintf(cc, sizeof cc, "%d.%d", di.cc_major, di.cc_minor);
      json_t *dj = json_object();
      bad |= !dj;
      bad |= json_object_set_new(dj, "index", json_integer(d));
      bad |= json_object_set_new(dj, "name", cli_json_str(di.name));
      bad |= json_object_set_new(dj, "cc", cli_json_str(cc));
      bad |= json_object_set_new(dj, "sms", json_integer(di.sm_count));
      bad |= json_object_set_new(dj, "mem_total", json_integer((json_int_t)di.mem_total));
      bad |= json_object_set_new(dj, "mem_free", json_integer((json_int_t)di.mem_free));
      bad |= json_object_set_new(dj, "l2", json_integer((json_int_t)di.l2_bytes));
      double bw = di.mem_bus_gbps; /* whole GB/s, an integer as before */
      bad |= json_object_set_new(dj, "mem_bw_gbps", isfinite(bw) ? json_integer((json_int_t)llround(bw)) : json_null());
      bad |= json_array_append_new(devs, dj);
    }
    bad |= json_object_set_new(j, "devices", devs);
    bad |= json_object_set_new(j, "auto", cli_json_str(s == LAM_OK ? lam_device_str(lam_ctx_device(ctx)) : "error"));
    bad |= json_object_set_new(mem, "in_use", json_integer((json_int_t)ms.in_use));
    bad |= json_object_set_new(mem, "reserved", json_integer((json_int_t)ms.reserved));
    bad |= json_object_set_new(mem, "peak", json_integer((json_int_t)ms.peak));
    bad |= json_object_set_new(mem, "cached", json_integer((json_int_t)ms.cached));
    bad |= json_object_set_new(mem, "pinned_host", json_integer((json_int_t)ms.pinned_host));
    bad |= json_object_set_new(j, "memory", mem);
    if (bad) {
      json_decref(j);
      j = NULL; /* cli_json_print says: out of host memory */
    }
    print_rc = cli_json_print(j);
  } else {
    printf("lamina %s\n", bi.version);
    if (bi.with_cuda)
      printf("  CUDA backend: built (runtime %d.%d, architectures %s)\n", bi.cuda_runtime / 1000,
             bi.cuda_runtime % 1000 / 10, bi.cuda_archs);
    else printf("  CUDA backend: not built\n");
    printf("  host threads: %d (%s); OpenMP: %s\n", threads, threads_why, bi.with_openmp ? "yes" : "no");
    const int img = lam_image_formats();
    printf("  image files: %s\n", img == 3 ? "PNG and JPEG" : img == 1 ? "PNG (no libjpeg)" : img == 2 ? "JPEG (no libpng)"
                                                                                              : "none (no libpng, no libjpeg)");
    printf("  JPEG on the GPU: %s\n", lam_image_gpu_decode() ? "nvJPEG" : "no (built without nvJPEG)");
    printf("  video files: %s\n", video ? "MP4, AVI, MKV, WebM and MOV (FFmpeg's libraries)" : video_why);
    printf("  ranks: GPU %s; CPU %s\n",
           lam_nccl_built() ? "over NCCL (--gpus N, mpirun, torchrun-style)" : "no (built without NCCL)",
           cli_ranks_mpi() ? "over MPI (mpirun -np N ... --device cpu)" : "no (built without MPI)");
    if (ndev == 0) printf("  CUDA devices: none (%s)\n", why ? why : "none found");
    for (int d = 0; d < ndev; d++) {
      lam_cuda_device_info di;
      if (lam_cuda_device_info_get(d, &di) != LAM_OK) {
        printf("  cuda:%d: %s\n", d, lam_last_error());
        continue;
      }
      printf("  cuda:%d: %s, sm_%d%d, %d SMs, L2 %.0f MiB, memory %.1f GiB (%.1f GiB free), ~%.0f GB/s peak\n", d,
             di.name, di.cc_major, di.cc_minor, di.sm_count, di.l2_bytes / 1048576.0, di.mem_total / 1073741824.0,
             di.mem_free / 1073741824.0, di.mem_bus_gbps);
    }
    if (s == LAM_OK) {
      printf("  auto picks: %s (%s)\n", lam_ctx_device_name(ctx), lam_ctx_choice_reason(ctx));
      printf("  memory of a new context: in use %zu, reserved %zu, peak %zu, cached %zu, pinned staging %zu bytes\n",
             ms.in_use, ms.reserved, ms.peak, ms.cached, ms.pinned_host);
    } else {
      printf("  auto: %s\n", lam_last_error());
    }
  }
  lam_ctx_free(ctx);
  return s == LAM_OK && !print_rc ? 0 : 1;
}
