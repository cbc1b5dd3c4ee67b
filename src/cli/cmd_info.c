/* cmd_info.c — `lamina info`: what this build has, which devices are present, what auto would pick,
 * and the memory figures. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: lamina info [--json]\n"
          "Prints the build's features (CUDA, OpenMP), the CUDA devices present with their memory, the\n"
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

  if (json) {
    printf("{\"version\":\"%s\",\"cuda\":%s,\"cuda_runtime\":%d,\"cuda_archs\":\"%s\",\"openmp\":%s,\"omp_threads\":%d,"
           "\"devices\":[",
           bi.version, bi.with_cuda ? "true" : "false", bi.cuda_runtime, bi.cuda_archs, bi.with_openmp ? "true" : "false",
           bi.omp_max_threads);
    for (int d = 0; d < ndev; d++) {
      lam_cuda_device_info di;
      if (lam_cuda_device_info_get(d, &di) != LAM_OK) continue;
      printf("%s{\"index\":%d,\"name\":\"%s\",\"cc\":\"%d.%d\",\"sms\":%d,\"mem_total\":%zu,\"mem_free\":%zu,"
             "\"l2\":%zu,\"mem_bw_gbps\":%.0f}",
             d ? "," : "", d, di.name, di.cc_major, di.cc_minor, di.sm_count, di.mem_total, di.mem_free, di.l2_bytes,
             di.mem_bus_gbps);
    }
    printf("],\"auto\":\"%s\",\"memory\":{\"in_use\":%zu,\"reserved\":%zu,\"peak\":%zu,\"cached\":%zu,"
           "\"pinned_host\":%zu}}\n",
           s == LAM_OK ? lam_device_str(lam_ctx_device(ctx)) : "error", ms.in_use, ms.reserved, ms.peak, ms.cached,
           ms.pinned_host);
  } else {
    printf("lamina %s\n", bi.version);
    if (bi.with_cuda)
      printf("  CUDA backend: built (runtime %d.%d, architectures %s)\n", bi.cuda_runtime / 1000,
             bi.cuda_runtime % 1000 / 10, bi.cuda_archs);
    else printf("  CUDA backend: not built\n");
    printf("  OpenMP: %s, %d threads\n", bi.with_openmp ? "yes" : "no", bi.omp_max_threads);
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
  return s == LAM_OK ? 0 : 1;
}
