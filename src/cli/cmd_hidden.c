/* cmd_hidden.c — `lamina hidden`: the course's hidden layer on drawn inputs, every element checked
 * against a float64 reference, with the timing breakdown (medians over the repeats). */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The largest error a float32 result may have against the float64 reference. */
#define MAX_ABS_ERR 1e-6

enum resident { RES_NONE, RES_ALL, RES_WEIGHTS };
static const char *resident_str[] = {"none", "all", "weights"};

typedef struct hidden_opts {
  size_t n;
  lam_dtype dtype;
  lam_device device;
  enum resident resident;
  int pinned, unfused, json, threads;
  uint64_t seed;
  long repeat, warmup;
} hidden_opts;

static void usage(FILE *f) {
  fprintf(f,
          "usage: lamina hidden [options]\n"
          "Runs out = tanh(grey / 255 * w) over n values drawn as the course draws them (greys =\n"
          "floor(uniform(0, 255)), weights = normal(0.5, 0.1)), checks every element against a float64\n"
          "reference (max abs error <= 1e-6) and prints the device, the error and the time per call.\n"
          "\n"
          "  --n N                  values (default 10M; digits, 1e8 or K/M/G suffix, up to 2^40)\n"
          "  --dtype f32|u8         greys as float32 or uint8 (default f32)\n"
          "  --device auto|cpu|cuda backend (default auto: CUDA if present; env LAMINA_DEVICE)\n"
          "  --resident[=all|weights]  arrays in device memory, uploaded once (default: none, host arrays;\n"
          "                         =weights: only the weights on the device)\n"
          "  --pinned               host arrays in pinned memory (default pageable, as NumPy makes them)\n"
          "  --unfused              the course's three separate ops (normalize, weigh, activate) instead of\n"
          "                         the fused kernel; implies --resident\n"
          "  --seed S               input seed (default 42)\n"
          "  --threads N            threads of the CPU work (default: LAMINA_THREADS, OMP_NUM_THREADS, else\n"
          "                         the cores this process may use)\n"
          "  --repeat R             timed calls (default 10)\n"
          "  --warmup W             untimed calls first (default 1)\n"
          "  --json                 print one JSON object instead of text\n"
          "  --help                 this text\n"
          "Exit status: 0 ok, 1 failure (including a failed check), 2 bad usage.\n");
}

static int parse(int argc, char **argv, hidden_opts *o) {
  *o = (hidden_opts){.n = 10000000, .seed = 42, .repeat = 10, .warmup = 1};
  enum { O_N = 1, O_DTYPE, O_DEVICE, O_RESIDENT, O_PINNED, O_UNFUSED, O_SEED, O_REPEAT, O_WARMUP, O_JSON, O_HELP, O_THREADS };
  static const struct option longopts[] = {
      {"n", required_argument, 0, O_N},           {"dtype", required_argument, 0, O_DTYPE},
      {"device", required_argument, 0, O_DEVICE}, {"resident", optional_argument, 0, O_RESIDENT},
      {"pinned", no_argument, 0, O_PINNED},       {"unfused", no_argument, 0, O_UNFUSED},
      {"seed", required_argument, 0, O_SEED},     {"repeat", required_argument, 0, O_REPEAT},
      {"warmup", required_argument, 0, O_WARMUP}, {"json", no_argument, 0, O_JSON},
      {"help", no_argument, 0, O_HELP},           {"threads", required_argument, 0, O_THREADS},
      {0, 0, 0, 0}};
  opterr = 0;
  optind = 1;
  int c;
  long v;
  while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    switch (c) {
      case O_N:
        if (cli_parse_count("hidden", "--n", optarg, LAM_HIDDEN_MAX_N, &o->n)) return EXIT_USAGE;
        break;
      case O_DTYPE:
        if (lam_dtype_parse(optarg, &o->dtype) != LAM_OK || (o->dtype != LAM_DTYPE_F32 && o->dtype != LAM_DTYPE_U8))
          return cli_usage_error("hidden", "--dtype: '%s' is not a dtype (use f32 or u8)", optarg);
        break;
      case O_DEVICE:
        if (lam_device_parse(optarg, &o->device) != LAM_OK)
          return cli_usage_error("hidden", "--device: '%s' is not a device (use auto, cpu or cuda)", optarg);
        break;
      case O_RESIDENT:
        if (!optarg || !strcmp(optarg, "all")) o->resident = RES_ALL;
        else if (!strcmp(optarg, "weights")) o->resident = RES_WEIGHTS;
        else return cli_usage_error("hidden", "--resident: '%s' is not all or weights", optarg);
        break;
      case O_PINNED: o->pinned = 1; break;
      case O_UNFUSED: o->unfused = 1; break;
      case O_SEED:
        if (cli_parse_u64("hidden", "--seed", optarg, &o->seed)) return EXIT_USAGE;
        break;
      case O_REPEAT:
        if (cli_parse_int("hidden", "--repeat", optarg, 1, 1000000, &v)) return EXIT_USAGE;
        o->repeat = v;
        break;
      case O_WARMUP:
        if (cli_parse_int("hidden", "--warmup", optarg, 0, 1000000, &v)) return EXIT_USAGE;
        o->warmup = v;
        break;
      case O_JSON: o->json = 1; break;
      case O_THREADS:
        if (cli_parse_int("hidden", "--threads", optarg, 1, LAM_MAX_THREADS, &v)) return EXIT_USAGE;
        o->threads = (int)v;
        break;
      case O_HELP: usage(stdout); return -1;
      case ':': return cli_usage_error("hidden", "%s needs a value", argv[optind - 1]);
      default: return cli_usage_error("hidden", "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) return cli_usage_error("hidden", "unexpected argument '%s'", argv[optind]);
  if (o->unfused) {
    if (o->resident == RES_WEIGHTS)
      return cli_usage_error("hidden", "--unfused runs on device memory: use it with --resident (all), not =weights");
    o->resident = RES_ALL;
  }
  return 0;
}

/* What the run holds: host originals (for the reference check) and what the call is given. */
typedef struct bufs {
  float *hg32, *hw, *hout;
  uint8_t *hg8;
  int hg_pinned, hw_pinned, hout_pinned;
  void *dg;              /* device copy of the greys (resident all) */
  float *dw, *dout, *dtmp; /* device weights (resident), output (resident all), scratch (unfused) */
} bufs;

static lam_status host_buf(lam_ctx *ctx, int pinned, size_t bytes, void **p) {
  if (pinned) return lam_host_alloc(ctx, p, bytes);
  *p = malloc(bytes ? bytes : 1);
  if (!*p) {
    fprintf(stderr, "lamina hidden: out of host memory allocating %zu bytes\n", bytes);
    return LAM_ERR_OUT_OF_MEMORY;
  }
  return LAM_OK;
}

static void host_unbuf(lam_ctx *ctx, int pinned, void *p) {
  if (pinned) lam_host_free(ctx, p);
  else free(p);
}

static void free_bufs(lam_ctx *ctx, bufs *b) {
  host_unbuf(ctx, b->hg_pinned, b->hg32);
  host_unbuf(ctx, b->hg_pinned, b->hg8);
  host_unbuf(ctx, b->hw_pinned, b->hw);
  host_unbuf(ctx, b->hout_pinned, b->hout);
  lam_mem_free(ctx, b->dg);
  lam_mem_free(ctx, b->dw);
  lam_mem_free(ctx, b->dout);
  lam_mem_free(ctx, b->dtmp);
}

#define RETURN_IF(expr)                     \
  do {                                      \
    lam_status st_ = (expr);                \
    if (st_ != LAM_OK) return st_;          \
  } while (0)
#define TRY(expr)                  \
  do {                             \
    s = (expr);                    \
    if (s != LAM_OK) goto fail;    \
  } while (0)

static lam_status setup(lam_ctx *ctx, const hidden_opts *o, bufs *b) {
  lam_status s = LAM_OK;
  size_t n = o->n, gb = n * lam_dtype_size(o->dtype), fb = n * sizeof(float);
  b->hg_pinned = b->hw_pinned = b->hout_pinned = o->pinned;
  if (o->dtype == LAM_DTYPE_U8) TRY(host_buf(ctx, b->hg_pinned, gb, (void **)&b->hg8));
  else TRY(host_buf(ctx, b->hg_pinned, gb, (void **)&b->hg32));
  TRY(host_buf(ctx, b->hw_pinned, fb, (void **)&b->hw));
  TRY(host_buf(ctx, b->hout_pinned, fb, (void **)&b->hout));
  cli_make_inputs(o->seed, n, b->hg32, b->hg8, b->hw);
  if (o->resident != RES_NONE) {
    TRY(lam_mem_alloc(ctx, (void **)&b->dw, fb));
    TRY(lam_mem_upload(ctx, b->dw, b->hw, fb));
  }
  if (o->resident == RES_ALL) {
    TRY(lam_mem_alloc(ctx, &b->dg, gb));
    TRY(lam_mem_upload(ctx, b->dg, b->hg32 ? (void *)b->hg32 : (void *)b->hg8, gb));
    TRY(lam_mem_alloc(ctx, (void **)&b->dout, fb));
  }
  if (o->unfused) TRY(lam_mem_alloc(ctx, (void **)&b->dtmp, fb));
fail:
  return s;
}

/* One call as the options say; fills t (total is the wall clock until the result is ready). */
static lam_status run_once(lam_ctx *ctx, const hidden_opts *o, bufs *b, lam_hidden_timing *t) {
  const void *g = b->dg ? b->dg : b->hg32 ? (void *)b->hg32 : (void *)b->hg8;
  const float *w = b->dw ? b->dw : b->hw;
  float *out = b->dout ? b->dout : b->hout;
  if (!o->unfused) {
    RETURN_IF(lam_hidden(ctx, o->n, g, o->dtype, w, out, t));
    return lam_ctx_sync(ctx);
  }
  double t0 = cli_now_ms();
  RETURN_IF(lam_normalize(ctx, o->n, g, o->dtype, b->dtmp));
  RETURN_IF(lam_weigh(ctx, o->n, b->dtmp, w, b->dtmp));
  RETURN_IF(lam_tanh(ctx, o->n, b->dtmp, out));
  RETURN_IF(lam_ctx_sync(ctx));
  *t = (lam_hidden_timing){.chunks = 1};
  t->total = t->kernel = cli_now_ms() - t0;
  return LAM_OK;
}

/* Back-to-back calls on device-resident arrays, one wait at the end: the cost per call when a caller
 * queues many (launch overhead included, no per-call synchronization). */
static lam_status back_to_back(lam_ctx *ctx, const hidden_opts *o, bufs *b, double *ms_per_call) {
  const int calls = 200;
  RETURN_IF(lam_ctx_sync(ctx));
  double t0 = cli_now_ms();
  for (int i = 0; i < calls; i++) RETURN_IF(lam_hidden(ctx, o->n, b->dg, o->dtype, b->dw, b->dout, NULL));
  RETURN_IF(lam_ctx_sync(ctx));
  *ms_per_call = (cli_now_ms() - t0) / calls;
  return LAM_OK;
}

static const char *where_str(int device, int pinned) { return device ? "device" : pinned ? "pinned host" : "pageable host"; }

int cmd_hidden(int argc, char **argv) {
  hidden_opts o;
  int rc = parse(argc, argv, &o);
  if (rc) return rc < 0 ? 0 : rc;

  lam_ctx *ctx = NULL;
  lam_status s = lam_ctx_create(&ctx, o.device);
  if (s == LAM_OK && o.threads) s = lam_ctx_set_threads(ctx, o.threads);
  if (s != LAM_OK) {
    fprintf(stderr, "lamina hidden: %s\n", lam_last_error());
    return 1;
  }
  bufs b = {0};
  int R = (int)o.repeat;
  double *tt = calloc((size_t)R * 5, sizeof *tt);
  double *t_total = tt, *t_stage = tt + R, *t_in = tt + 2 * R, *t_kern = tt + 3 * R, *t_out = tt + 4 * R;
  lam_hidden_timing t = {0};
  double err = NAN, floor_ms = -1, b2b_ms = -1, mem_floor_ms = -1;
  int chunks = 1;
  if (!tt) {
    fprintf(stderr, "lamina hidden: out of host memory\n");
    lam_ctx_free(ctx);
    return 1;
  }
  TRY(setup(ctx, &o, &b));
  for (long i = 0; i < o.warmup; i++) TRY(run_once(ctx, &o, &b, &t));
  for (int r = 0; r < R; r++) {
    /* Poison the output before the checked (last) run, so an element nothing wrote fails. */
    if (r == R - 1) {
      cli_poison(b.hout, o.n);
      if (b.dout) TRY(lam_mem_upload(ctx, b.dout, b.hout, o.n * sizeof(float)));
    }
    TRY(run_once(ctx, &o, &b, &t));
    t_total[r] = t.total, t_stage[r] = t.staging, t_in[r] = t.copy_in, t_kern[r] = t.kernel, t_out[r] = t.copy_out;
    chunks = t.chunks;
  }
  if (b.dout) TRY(lam_mem_download(ctx, b.hout, b.dout, o.n * sizeof(float)));
  err = o.n ? cli_max_abs_err(o.n, b.hg32, b.hg8, b.hw, b.hout) : 0.0;

  /* Floors that explain the numbers: host staging alone (pageable arrays on CUDA), and the per-call
   * cost of back-to-back device-resident calls. */
  if (lam_ctx_device(ctx) == LAM_DEVICE_CUDA && o.n && !o.unfused && !o.pinned && o.resident != RES_ALL) {
    const void *g = b.hg32 ? (void *)b.hg32 : (void *)b.hg8;
    double f[5];
    int nf = 0;
    for (; nf < 5; nf++) TRY(lam_hidden_staging_floor(ctx, o.n, g, o.dtype, b.dw ? b.dw : b.hw, b.hout, &f[nf]));
    floor_ms = cli_median(f, nf);
  }
  if (lam_ctx_device(ctx) == LAM_DEVICE_CUDA && o.n && !o.unfused && o.resident == RES_ALL)
    TRY(back_to_back(ctx, &o, &b, &b2b_ms));
  /* What the host's memory allows: the same bytes read and written by the host threads, no math. */
  if (o.n && !o.unfused && o.resident == RES_NONE) {
    const void *g = b.hg32 ? (void *)b.hg32 : (void *)b.hg8;
    double f[5];
    int nf = 0;
    for (; nf < 5; nf++) TRY(lam_hidden_memory_floor(ctx, o.n, g, o.dtype, b.hw, b.hout, &f[nf]));
    mem_floor_ms = cli_median(f, nf);
  }

  double med_total = cli_median(t_total, R), min_total = cli_min(t_total, R);
  double m_stage = cli_median(t_stage, R), m_in = cli_median(t_in, R), m_kern = cli_median(t_kern, R),
         m_out = cli_median(t_out, R);
  int ok = err <= MAX_ABS_ERR; /* false for NaN */
  /* where the calls ran: an AUTO context chooses per call (the last call's choice) */
  const char *dev = o.unfused ? lam_device_str(lam_ctx_device(ctx)) : lam_device_str((lam_device)t.device);
  int gdev = o.resident == RES_ALL, wdev = o.resident != RES_NONE, print_rc = 0;
  if (o.json) {
    /* max_abs_err is null where a result was NaN (ok is then false) */
    json_t *j = json_object(), *ms = json_object();
    int bad = !j || !ms;
    bad |= json_object_set_new(j, "device", cli_json_str(dev));
    bad |= json_object_set_new(j, "device_name", cli_json_str(lam_ctx_device_name(ctx)));
    bad |= json_object_set_new(j, "threads", json_integer(lam_ctx_threads(ctx)));
    bad |= json_object_set_new(j, "choice", cli_json_str(o.unfused ? "" : lam_hidden_choice(ctx)));
    bad |= json_object_set_new(j, "n", json_integer((json_int_t)o.n));
    bad |= json_object_set_new(j, "dtype", cli_json_str(lam_dtype_str(o.dtype)));
    bad |= json_object_set_new(j, "resident", cli_json_str(resident_str[o.resident]));
    bad |= json_object_set_new(j, "pinned", json_boolean(o.pinned));
    bad |= json_object_set_new(j, "fused", json_boolean(!o.unfused));
    bad |= json_object_set_new(j, "repeat", json_integer(R));
    bad |= json_object_set_new(j, "warmup", json_integer(o.warmup));
    bad |= json_object_set_new(j, "chunks", json_integer(chunks));
    bad |= json_object_set_new(j, "max_abs_err", cli_json_num(err));
    bad |= json_object_set_new(j, "ok", json_boolean(ok));
    bad |= json_object_set_new(ms, "total", cli_json_num(med_total));
    bad |= json_object_set_new(ms, "staging", cli_json_num(m_stage));
    bad |= json_object_set_new(ms, "copy_in", cli_json_num(m_in));
    bad |= json_object_set_new(ms, "kernel", cli_json_num(m_kern));
    bad |= json_object_set_new(ms, "copy_out", cli_json_num(m_out));
    bad |= json_object_set_new(ms, "total_min", cli_json_num(min_total));
    if (floor_ms >= 0) bad |= json_object_set_new(ms, "staging_floor", cli_json_num(floor_ms));
    if (b2b_ms >= 0) bad |= json_object_set_new(ms, "back_to_back", cli_json_num(b2b_ms));
    if (mem_floor_ms >= 0) bad |= json_object_set_new(ms, "memory_floor", cli_json_num(mem_floor_ms));
    bad |= json_object_set_new(j, "ms", ms); /* j takes ms (and releases it with j) */
    if (bad) {
      json_decref(j);
      j = NULL; /* cli_json_print says: out of host memory */
    }
    print_rc = cli_json_print(j);
  } else {
    printf("lamina hidden: n = %zu, greys %s, on %s\n", o.n, lam_dtype_str(o.dtype), lam_ctx_device_name(ctx));
    if (*lam_ctx_choice_reason(ctx)) printf("  device choice: %s\n", lam_ctx_choice_reason(ctx));
    if (!o.unfused) printf("  the calls ran on: %s\n", lam_hidden_choice(ctx));
    printf("  arrays: grey in %s, w in %s, out in %s; %s; %d chunk%s\n", where_str(gdev, o.pinned),
           where_str(wdev, o.pinned), where_str(gdev, o.pinned), o.unfused ? "three separate ops" : "fused", chunks,
           chunks == 1 ? "" : "s");
    printf("  check: max abs error %.3e over all %zu values against float64 (bound %.0e): %s\n", err, o.n,
           MAX_ABS_ERR, ok ? "ok" : "FAILED");
    printf("  time per call, median of %d (ms): total %.4f (min %.4f) | staging %.4f | copy in %.4f | kernel %.4f | "
           "copy out %.4f\n",
           R, med_total, min_total, m_stage, m_in, m_kern, m_out);
    if (floor_ms >= 0)
      printf("  host staging floor (the same copies, no GPU work): %.4f ms; the call is %.2fx that\n", floor_ms,
             floor_ms > 0 ? med_total / floor_ms : 0.0);
    if (mem_floor_ms >= 0)
      printf("  host memory floor (the same bytes read and written by the %d host threads, no math): %.4f ms\n",
             lam_ctx_threads(ctx), mem_floor_ms);
    if (b2b_ms >= 0) printf("  back-to-back calls, one wait at the end: %.4f ms (%.1f us) per call\n", b2b_ms, b2b_ms * 1e3);
    double bytes = (double)o.n * (lam_dtype_size(o.dtype) + 8);
    if (med_total > 0) printf("  throughput: %.1f GB/s of inputs and output\n", bytes / med_total / 1e6);
  }
  if (!ok) fprintf(stderr, "lamina hidden: check FAILED: max abs error %.3e > %.0e\n", err, MAX_ABS_ERR);
  free_bufs(ctx, &b);
  free(tt);
  lam_ctx_free(ctx);
  return ok && !print_rc ? 0 : 1;
fail:
  if (*lam_last_error()) fprintf(stderr, "lamina hidden: %s\n", lam_last_error());
  free_bufs(ctx, &b);
  free(tt);
  lam_ctx_free(ctx);
  return 1;
}
