/* cmd_bench.c — `lamina bench transfer`: host->device time of image batches by dtype, batch size and
 * host memory (pageable or pinned), and the two pipelines end to end (normalize on the CPU and copy
 * float32, or copy uint8 and normalize on the GPU); a table, a CSV and a plot (through matplotlib). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

#define MAX_COLS 32 /* batch sizes or shapes */
#define MAX_ROWS 32 /* methods */

static void usage(FILE *f) {
  fprintf(f,
          "usage: lamina bench transfer [options]\n"
          "Times getting a batch of uint8 images from host memory into device memory: copies by dtype and by\n"
          "host memory (pageable, pinned), and the two pipelines — normalize on the CPU then copy float32, or\n"
          "copy uint8 then normalize on the GPU. CUDA events, median of many repetitions; every result is\n"
          "checked. On the CPU backend the copies are host memcpy: it times staging and normalization only.\n"
          "  --batch LIST        batch sizes of 1x28x28 images (default 32,64,128,256,512,4096,60000)\n"
          "  --shape SHAPE       a batch shape instead, repeatable: NxHxWxC (images) or NxTxHxWxC (video\n"
          "                      clips), channels last as decoders write them; see --layout\n"
          "  --layout nhwc|nchw  the layout of --shape (default nhwc; nchw reads NxCxHxW / NxCxTxHxW)\n"
          "  --dtypes LIST       dtypes of the plain copies (default u8,i8,f16,f32)\n"
          "  --memory LIST       host memory kinds: pageable,pinned (default both)\n"
          "  --reps N            timed repetitions per case (default 200), median reported\n"
          "  --warmup N          untimed repetitions first (default 10)\n"
          "  --max-ms MS         stop a case's repetitions after this long, at least 10 (default 1000)\n"
          "  --csv FILE          write every measurement as CSV (atomically)\n"
          "  --plot FILE         draw time against batch size, one line per method, log axes, as FILE.png\n"
          "                      and FILE.svg (needs Python 3 with matplotlib; --python or LAMINA_PYTHON)\n"
          "  --python PATH       the Python to plot with (default: python3, then /usr/bin/python3)\n"
          "  --from-csv FILE     measure nothing: draw --plot from a CSV this command wrote (e.g. on another\n"
          "                      machine that has no matplotlib)\n"
          "  --device D          auto|cpu|cuda (default auto)\n"
          "  --help              this text\n");
}

typedef struct col { /* one batch */
  size_t n;
  int c, h, w;
  lam_layout layout;
  char label[64];
} col;

typedef struct row { /* one method */
  lam_xfer_method method;
  lam_dtype dtype;
  int pinned;
  char label[40];
} row;

typedef struct opts {
  col cols[MAX_COLS];
  int ncols, shapes;
  lam_layout layout;
  lam_dtype dtypes[8];
  int ndtypes;
  int pageable, pinned;
  long reps, warmup, max_ms;
  const char *csv, *plot, *python, *from_csv;
  lam_device device;
} opts;

/* "NxHxWxC" or "NxTxHxWxC" (or the nchw orders) into a batch; 0 or -1 with a message. */
static int parse_shape(const char *s, lam_layout layout, col *out) {
  long d[6];
  int k = 0;
  const char *p = s;
  while (*p && k < 6) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 1 || v > 1L << 30) goto bad;
    d[k++] = v;
    if (*end == 'x' || *end == 'X') p = end + 1;
    else if (!*end) p = end;
    else goto bad;
    if (!*p && (end[0] == 'x' || end[0] == 'X')) goto bad; /* a trailing 'x' */
  }
  if (*p || (k != 4 && k != 5)) goto bad;
  /* images: (N, H, W, C) / (N, C, H, W); clips: (N, T, H, W, C) / (N, C, T, H, W), T folded into h */
  out->n = (size_t)d[0];
  out->layout = layout;
  if (layout == LAM_LAYOUT_NHWC) {
    out->c = (int)d[k - 1];
    out->w = (int)d[k - 2];
    out->h = (int)(k == 5 ? d[1] * d[2] : d[1]);
  } else {
    out->c = (int)d[1];
    out->w = (int)d[k - 1];
    out->h = (int)(k == 5 ? d[2] * d[3] : d[2]);
  }
  if (out->c > LAM_NORMALIZE_MAX_CHANNELS) {
    cli_usage_error("bench transfer", "--shape '%s': %d channels is more than the %d supported (is --layout right?)", s,
                    out->c, LAM_NORMALIZE_MAX_CHANNELS);
    return -1;
  }
  snprintf(out->label, sizeof out->label, "%s", s);
  return 0;
bad:
  cli_usage_error("bench transfer",
                  "--shape: '%s' is not a batch shape; write NxHxWxC for images or NxTxHxWxC for video clips, "
                  "whole numbers >= 1 joined by 'x' (e.g. 16x480x640x3)",
                  s);
  return -1;
}

static int parse_list(const char *opt, const char *s, int (*one)(opts *, const char *), opts *o) {
  char buf[512];
  if (strlen(s) >= sizeof buf) return cli_usage_error("bench transfer", "%s: the list is too long", opt), -1;
  strcpy(buf, s);
  int any = 0;
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save), any = 1)
    if (one(o, t) != 0) return -1;
  if (!any) return cli_usage_error("bench transfer", "%s: the list is empty", opt), -1;
  return 0;
}

static int one_batch(opts *o, const char *t) {
  size_t n;
  if (cli_parse_count("bench transfer", "--batch", t, (size_t)1 << 24, &n) != 0) return -1;
  if (n == 0) return cli_usage_error("bench transfer", "--batch: a batch of 0 images"), -1;
  if (o->ncols == MAX_COLS) return cli_usage_error("bench transfer", "--batch: at most %d sizes", MAX_COLS), -1;
  col *c = &o->cols[o->ncols++];
  *c = (col){.n = n, .c = 1, .h = 28, .w = 28, .layout = LAM_LAYOUT_NCHW};
  snprintf(c->label, sizeof c->label, "%zu", n);
  return 0;
}

static int one_dtype(opts *o, const char *t) {
  lam_dtype d;
  if (lam_dtype_parse(t, &d) != LAM_OK)
    return cli_usage_error("bench transfer", "--dtypes: '%s' is not a dtype (u8, i8, f16, bf16, f32)", t), -1;
  if (o->ndtypes < 8) o->dtypes[o->ndtypes++] = d;
  return 0;
}

static int one_memory(opts *o, const char *t) {
  if (!strcmp(t, "pageable")) o->pageable = 1;
  else if (!strcmp(t, "pinned")) o->pinned = 1;
  else return cli_usage_error("bench transfer", "--memory: '%s' is not pageable or pinned", t), -1;
  return 0;
}

/* A file the command will write (opt names it for the message), with suffix appended (may be ""). */
static int check_writable(const char *opt, const char *path, const char *suffix, lam_file_kind kind) {
  char full[4096];
  snprintf(full, sizeof full, "%s%s", path, suffix);
  if (lam_output_check(full, opt, kind) == LAM_OK) return 0;
  fprintf(stderr, "lamina bench transfer: %s\n", lam_last_error());
  return -1;
}

/* Single-quotes s for /bin/sh. */
static void shell_quote(const char *s, char *out, size_t size) {
  size_t k = 0;
  out[k++] = '\'';
  for (; *s && k + 5 < size; s++) {
    if (*s == '\'') memcpy(out + k, "'\\''", 4), k += 4;
    else out[k++] = *s;
  }
  out[k++] = '\'';
  out[k] = 0;
}

/* A Python with matplotlib: --python, LAMINA_PYTHON, python3, /usr/bin/python3. */
static const char *find_python(const char *asked, char *why, size_t size) {
  const char *env = getenv("LAMINA_PYTHON");
  const char *cands[] = {asked, env && *env ? env : NULL, "python3", "/usr/bin/python3"};
  char cmd[1200], q[1100];
  for (int i = 0; i < 4; i++) {
    if (!cands[i]) continue;
    shell_quote(cands[i], q, sizeof q);
    snprintf(cmd, sizeof cmd, "%s -c 'import matplotlib' >/dev/null 2>&1", q);
    if (system(cmd) == 0) return cands[i];
    if (i < 2) break; /* one that was asked for by name is the only one tried */
  }
  snprintf(why, size, "%s", asked ? asked : env && *env ? env : "python3 and /usr/bin/python3");
  return NULL;
}

/* Draws the CSV: one line per method, time against batch size (or against the batch's raw megabytes
 * when the batches have different image shapes), log axes, x ticks at the batches measured, one line
 * style and marker per dtype and one colour per method and host memory (pinned: filled markers). On
 * the CPU backend (copies_on_host) the copies are host memcpy and the labels say "host copy". Written
 * to a temporary name and renamed. tests/python/test_bench_plot.py checks the axes it draws. */
static const char *plot_script =
    "import csv, os, sys\n"
    "import matplotlib\n"
    "matplotlib.use('Agg')\n"
    "import matplotlib.pyplot as plt\n"
    "from matplotlib.ticker import FixedLocator, FixedFormatter, NullLocator\n"
    "path, stem = sys.argv[1], sys.argv[2]\n"
    "with open(path, newline='', encoding='utf-8', errors='replace') as f:\n"
    "    rows = list(csv.DictReader(f))\n"
    "r0 = rows[0]\n"
    "# the CPU backend copies host to host: say 'host copy' (CSVs without the column: the device name)\n"
    "host = r0.get('copies_on_host', '1' if r0['device'].startswith('cpu') else '0') == '1'\n"
    "same = len({(r['c'], r['h'], r['w']) for r in rows}) == 1\n"
    "def name(r):\n"
    "    if not host:\n"
    "        return r['method_label']\n"
    "    if r['method'] == 'copy':\n"
    "        return 'host copy ' + r['dtype']\n"
    "    if r['method'] == 'cpu_normalize':\n"
    "        return 'normalize, host copy f32'\n"
    "    return 'host copy u8, normalize to ' + r['dtype']\n"
    "lines, ticks = {}, {}\n"
    "for r in rows:\n"
    "    x = int(r['n']) if same else int(r['n']) * int(r['c']) * int(r['h']) * int(r['w']) / 1e6\n"
    "    ticks.setdefault(x, r['label'] if same else '%s\\n%.3g MB' % (r['label'], x))\n"
    "    key = (name(r), r['method'], r['dtype'], r['memory'])\n"
    "    lines.setdefault(key, []).append((x, float(r['median_us'])))\n"
    "# one line style and marker per dtype, one colour per method and memory; pinned markers filled\n"
    "styles = {'u8': (':', '^'), 'i8': ((0, (3, 1, 1, 1, 1, 1)), 'v'), 'f16': ('--', 's'), 'bf16': ('-.', 'D'),\n"
    "          'f32': ('-', 'o')}\n"
    "colours = {}\n"
    "fig, ax = plt.subplots(figsize=(9, 6))\n"
    "for (label, method, dtype, memory), pts in lines.items():\n"
    "    pts.sort()\n"
    "    ls, marker = styles.get(dtype, ('-', 'x'))\n"
    "    c = colours.setdefault((method, memory), 'C%d' % len(colours))\n"
    "    ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=ls, marker=marker, color=c, label=label,\n"
    "            markerfacecolor=c if memory == 'pinned' else 'none')\n"
    "ax.set_xscale('log'); ax.set_yscale('log')\n"
    "xs = sorted(ticks)\n"
    "ax.xaxis.set_major_locator(FixedLocator(xs))\n"
    "ax.xaxis.set_major_formatter(FixedFormatter([ticks[x] for x in xs]))\n"
    "ax.xaxis.set_minor_locator(NullLocator())\n"
    "if not same:\n"
    "    plt.setp(ax.get_xticklabels(), rotation=30, ha='right')\n"
    "ax.set_xlabel('batch size (images of %sx%sx%s)' % (r0['c'], r0['h'], r0['w']) if same else 'batch shape (raw uint8 MB)')\n"
    "ax.set_ylabel('host copy (no GPU), median (us)' if host else 'host to device, median (us)')\n"
    "ax.set_title('lamina bench transfer on ' + r0['device'] + (': host copies only' if host else ''))\n"
    "ax.grid(True, which='major', alpha=0.3)\n"
    "ax.legend(fontsize=8)\n"
    "fig.tight_layout()\n"
    "for ext in ('png', 'svg'):\n"
    "    tmp = '%s.%s.tmp' % (stem, ext)\n"
    "    fig.savefig(tmp, format=ext, dpi=120)\n"
    "    os.replace(tmp, '%s.%s' % (stem, ext))\n"
    "print('wrote %s.png and %s.svg' % (stem, stem))\n";

/* ---- --from-csv: the file is read here before Python is given it ----
 * so that what would hang the plot or eat the machine's memory (a FIFO, /dev/zero, gigabytes without a
 * line break) or end in a traceback (another CSV, a truncated one) is a message instead. A CSV this
 * command wrote is a few KiB: a header naming the columns, a row per batch and method (at most
 * MAX_COLS * MAX_ROWS). */
#define CSV_MAX_BYTES ((size_t)4 << 20)
#define CSV_MAX_FIELDS 64

/* Splits line (one CSV record, no line break) into fields in place: "..." quoted with "" for a quote.
 * Returns the count, or -1 for a quote left open or more than max fields. */
static int csv_split(char *line, char **field, int max) {
  int n = 0;
  char *r = line, *w = line;
  for (;;) {
    if (n == max) return -1;
    field[n++] = w;
    if (*r == '"') {
      for (r++;; r++) {
        if (!*r) return -1;
        if (*r == '"' && r[1] != '"') break;
        if (*r == '"') r++;
        *w++ = *r;
      }
      r++;
      if (*r && *r != ',') return -1;
    } else {
      while (*r && *r != ',') *w++ = *r++;
    }
    int more = *r == ',';
    *w++ = '\0';
    if (!more) return n;
    r++;
  }
}

static int csv_column(char **head, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (!strcmp(head[i], name)) return i;
  return -1;
}

/* 0 when path is a CSV the plot can draw; else says why and returns 1. */
static int check_csv(const char *path) {
  const char *fix = "give a CSV that 'lamina bench transfer --csv FILE' wrote";
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* O_NONBLOCK: opening a FIFO does not wait for a writer */
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    fprintf(stderr, "lamina bench transfer: --from-csv %s: %s\n", path, strerror(errno));
    if (fd >= 0) close(fd);
    return 1;
  }
  if (!S_ISREG(st.st_mode) || (size_t)st.st_size > CSV_MAX_BYTES) {
    if (!S_ISREG(st.st_mode))
      fprintf(stderr, "lamina bench transfer: --from-csv %s is not a regular file (%s): %s\n", path,
              S_ISDIR(st.st_mode) ? "a folder" : S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISCHR(st.st_mode) ? "a character device"
              : "a device or socket", fix);
    else
      fprintf(stderr, "lamina bench transfer: --from-csv %s is %lld bytes, more than a CSV of this command (at most "
              "%zu MiB): %s\n", path, (long long)st.st_size, CSV_MAX_BYTES >> 20, fix);
    close(fd);
    return 1;
  }
  size_t size = (size_t)st.st_size, got = 0;
  char *text = malloc(size + 1);
  while (text && got < size) {
    ssize_t k = read(fd, text + got, size - got);
    if (k <= 0) break; /* a file that shrank: checked below with what was read */
    got += (size_t)k;
  }
  close(fd);
  if (!text) {
    fprintf(stderr, "lamina bench transfer: --from-csv %s: no host memory for %zu bytes\n", path, size);
    return 1;
  }
  text[got] = '\0';
  char why[512] = "";
  if (memchr(text, '\0', got)) snprintf(why, sizeof why, "it holds a NUL byte (not text)");
  static const char *const need[] = {"device", "label", "n", "c", "h", "w", "method", "method_label", "dtype", "memory",
                                     "median_us"};
  enum { NEED = sizeof need / sizeof need[0] };
  int col[NEED], ncol = 0, rows = 0, line_no = 0;
  char *head[CSV_MAX_FIELDS], *f[CSV_MAX_FIELDS];
  for (char *line = text, *next; !why[0] && line && *line; line = next) {
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    line_no++;
    size_t L = strlen(line);
    if (L && line[L - 1] == '\r') line[--L] = '\0';
    if (!L) continue;
    if (!ncol) { /* the header */
      ncol = csv_split(line, head, CSV_MAX_FIELDS);
      for (int i = 0; i < (int)NEED && ncol > 0 && !why[0]; i++)
        if ((col[i] = csv_column(head, ncol, need[i])) < 0)
          snprintf(why, sizeof why, "its first line has no column '%s' (it wants device, label, n, c, h, w, method, "
                   "method_label, dtype, memory and median_us)", need[i]);
      if (ncol <= 0) snprintf(why, sizeof why, "its first line is not a CSV header");
      continue;
    }
    int n = csv_split(line, f, CSV_MAX_FIELDS);
    if (n < 0) {
      snprintf(why, sizeof why, "line %d is not a CSV record (a quote left open, or over %d fields)", line_no, CSV_MAX_FIELDS);
      break;
    }
    if (n != ncol) {
      snprintf(why, sizeof why, "line %d has %d fields, the header %d", line_no, n, ncol);
      break;
    }
    if (++rows > MAX_COLS * MAX_ROWS) {
      snprintf(why, sizeof why, "it has more than %d rows", MAX_COLS * MAX_ROWS);
      break;
    }
    for (int i = 2; i <= 5; i++) { /* n, c, h, w */
      char *end;
      errno = 0;
      long v = strtol(f[col[i]], &end, 10);
      if (errno || end == f[col[i]] || *end || v < 1)
        snprintf(why, sizeof why, "line %d: %s is '%.40s', not a whole number >= 1", line_no, need[i], f[col[i]]);
    }
    char *end;
    double us = strtod(f[col[NEED - 1]], &end);
    if (!why[0] && (end == f[col[NEED - 1]] || *end || !isfinite(us) || us < 0))
      snprintf(why, sizeof why, "line %d: median_us is '%.40s', not a time >= 0", line_no, f[col[NEED - 1]]);
  }
  if (!why[0] && !ncol) snprintf(why, sizeof why, "it is empty");
  else if (!why[0] && !rows) snprintf(why, sizeof why, "it has a header but no rows");
  free(text);
  if (!why[0]) return 0;
  fprintf(stderr, "lamina bench transfer: --from-csv %s: %s: %s\n", path, why, fix);
  return 1;
}

/* Draws csv into plot.png and plot.svg (plot may end in .png or .svg: one name for both). */
static int draw(const char *python, const char *csv, const char *plot) {
  char q1[1100], q2[1100], q3[1100], cmd[3400], stem[1024];
  snprintf(stem, sizeof stem, "%s", plot);
  size_t L = strlen(stem);
  if (L > 4 && (!strcmp(stem + L - 4, ".png") || !strcmp(stem + L - 4, ".svg"))) stem[L - 4] = 0;
  shell_quote(python, q1, sizeof q1);
  shell_quote(csv, q2, sizeof q2);
  shell_quote(stem, q3, sizeof q3);
  snprintf(cmd, sizeof cmd, "%s - %s %s", q1, q2, q3);
  FILE *p = popen(cmd, "w");
  if (!p) {
    fprintf(stderr, "lamina bench transfer: --plot: could not start %s (%s)\n", python, strerror(errno));
    return -1;
  }
  fputs(plot_script, p);
  int rc = pclose(p);
  if (rc != 0) {
    fprintf(stderr, "lamina bench transfer: --plot: %s failed to draw %s.png / .svg (exit %d; its message is above)\n",
            python, stem, rc);
    return -1;
  }
  return 0;
}

static int parse(int argc, char **argv, opts *o) {
  enum { O_BATCH = 1, O_SHAPE, O_LAYOUT, O_DTYPES, O_MEMORY, O_REPS, O_WARMUP, O_MAXMS, O_CSV, O_PLOT, O_PY, O_DEV, O_FROM, O_HELP };
  static const struct option lo[] = {
      {"batch", required_argument, 0, O_BATCH},   {"shape", required_argument, 0, O_SHAPE},
      {"layout", required_argument, 0, O_LAYOUT}, {"dtypes", required_argument, 0, O_DTYPES},
      {"memory", required_argument, 0, O_MEMORY}, {"reps", required_argument, 0, O_REPS},
      {"warmup", required_argument, 0, O_WARMUP}, {"max-ms", required_argument, 0, O_MAXMS},
      {"csv", required_argument, 0, O_CSV},       {"plot", required_argument, 0, O_PLOT},
      {"python", required_argument, 0, O_PY},     {"device", required_argument, 0, O_DEV},
      {"from-csv", required_argument, 0, O_FROM}, {"help", no_argument, 0, O_HELP},
      {0, 0, 0, 0}};
  *o = (opts){.layout = LAM_LAYOUT_NHWC, .reps = 200, .warmup = 10, .max_ms = 1000};
  const char *batches = NULL, *shapes[MAX_COLS];
  int nshapes = 0;
  opterr = 0;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, ":", lo, NULL)) != -1) {
    switch (c) {
    case O_BATCH: batches = optarg; break;
    case O_SHAPE:
      if (nshapes == MAX_COLS) return cli_usage_error("bench transfer", "--shape: at most %d shapes", MAX_COLS);
      shapes[nshapes++] = optarg;
      break;
    case O_LAYOUT:
      if (!strcmp(optarg, "nhwc")) o->layout = LAM_LAYOUT_NHWC;
      else if (!strcmp(optarg, "nchw")) o->layout = LAM_LAYOUT_NCHW;
      else return cli_usage_error("bench transfer", "--layout: '%s' is not nhwc or nchw", optarg);
      break;
    case O_DTYPES:
      if (parse_list("--dtypes", optarg, one_dtype, o)) return EXIT_USAGE;
      break;
    case O_MEMORY:
      if (parse_list("--memory", optarg, one_memory, o)) return EXIT_USAGE;
      break;
    case O_REPS:
      if (cli_parse_int("bench transfer", "--reps", optarg, 1, 1000000, &o->reps)) return EXIT_USAGE;
      break;
    case O_WARMUP:
      if (cli_parse_int("bench transfer", "--warmup", optarg, 0, 100000, &o->warmup)) return EXIT_USAGE;
      break;
    case O_MAXMS:
      if (cli_parse_int("bench transfer", "--max-ms", optarg, 1, 3600000, &o->max_ms)) return EXIT_USAGE;
      break;
    case O_CSV: o->csv = optarg; break;
    case O_PLOT: o->plot = optarg; break;
    case O_PY: o->python = optarg; break;
    case O_FROM: o->from_csv = optarg; break;
    case O_DEV:
      if (lam_device_parse(optarg, &o->device) != LAM_OK)
        return cli_usage_error("bench transfer", "--device: '%s' is not auto, cpu or cuda", optarg);
      break;
    case O_HELP: usage(stdout); return -1;
    case ':': return cli_usage_error("bench transfer", "option '%s' needs a value", argv[optind - 1]);
    default: return cli_usage_error("bench transfer", "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) return cli_usage_error("bench transfer", "unexpected argument '%s'", argv[optind]);
  if (batches && nshapes) return cli_usage_error("bench transfer", "give --batch or --shape, not both");
  for (int i = 0; i < nshapes; i++)
    if (parse_shape(shapes[i], o->layout, &o->cols[o->ncols++]) != 0) return EXIT_USAGE;
  o->shapes = nshapes > 0;
  if (!nshapes && parse_list("--batch", batches ? batches : "32,64,128,256,512,4096,60000", one_batch, o))
    return EXIT_USAGE;
  if (!o->ndtypes) {
    static const lam_dtype def[] = {LAM_DTYPE_U8, LAM_DTYPE_I8, LAM_DTYPE_F16, LAM_DTYPE_F32};
    memcpy(o->dtypes, def, sizeof def);
    o->ndtypes = 4;
  }
  if (!o->pageable && !o->pinned) o->pageable = o->pinned = 1;
  return 0;
}

static int add_row(row *rows, int *nrows, lam_xfer_method m, lam_dtype d, int pinned) {
  if (*nrows == MAX_ROWS) return 0;
  row *r = &rows[(*nrows)++];
  *r = (row){.method = m, .dtype = d, .pinned = pinned};
  const char *mem = pinned ? "pinned" : "pageable";
  if (m == LAM_XFER_CPU_NORMALIZE) snprintf(r->label, sizeof r->label, "CPU normalize + f32 %s", mem);
  else if (m == LAM_XFER_GPU_NORMALIZE) snprintf(r->label, sizeof r->label, "u8 %s + GPU normalize%s", mem, d == LAM_DTYPE_BF16 ? " bf16" : "");
  else snprintf(r->label, sizeof r->label, "copy %s %s", lam_dtype_str(d), mem);
  return 0;
}

static int bench_transfer(int argc, char **argv);

const cli_sub cli_benchmarks[] = {
    {"transfer", "times image batches from host to device (by dtype, batch size and host memory)", bench_transfer},
    {"data", "times the data path alone: an image or mask folder streamed from its files to the device", bench_data},
    {NULL, NULL, NULL},
};

int cmd_bench(int argc, char **argv) {
  if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    usage(stdout);
    return 0;
  }
  for (const cli_sub *b = cli_benchmarks; argc >= 2 && b->name; b++)
    if (!strcmp(argv[1], b->name)) return b->run(argc - 1, argv + 1);
  char names[128];
  cli_sub_names(cli_benchmarks, names, sizeof names);
  if (argc < 2) return cli_usage_error("bench", "which benchmark? (benchmarks: %s)", names);
  return cli_usage_error("bench", "unknown benchmark '%s' (benchmarks: %s)", argv[1], names);
}

/* argv[0] is "transfer" */
static int bench_transfer(int argc, char **argv) {
  opts o;
  int pr = parse(argc, argv, &o);
  if (pr) return pr < 0 ? 0 : pr;

  /* Fail before measuring: a plot or CSV that could not be written, or no Python to draw with. */
  char why[1200];
  const char *python = NULL;
  if (o.csv && check_writable("--csv", o.csv, "", LAM_FILE_BENCH_CSV)) return 1;
  if (o.plot) {
    if (check_writable("--plot", o.plot, ".png", LAM_FILE_PNG) || check_writable("--plot", o.plot, ".svg", LAM_FILE_SVG)) return 1;
    python = find_python(o.python, why, sizeof why);
    if (!python) {
      fprintf(stderr, "lamina bench transfer: --plot needs Python 3 with matplotlib; %s has none. Install it "
                      "(Debian: apt-get install python3-matplotlib) or name one with --python or LAMINA_PYTHON\n", why);
      return 1;
    }
  }
  if (o.from_csv) {
    if (!o.plot) return cli_usage_error("bench transfer", "--from-csv draws a plot: give --plot FILE too");
    if (check_csv(o.from_csv)) return 1;
    return draw(python, o.from_csv, o.plot) == 0 ? 0 : 1;
  }
  lam_ctx *ctx = NULL;
  if (lam_ctx_create(&ctx, o.device) != LAM_OK) {
    fprintf(stderr, "lamina bench transfer: %s\n", lam_last_error());
    return 1;
  }
  int on_cpu = lam_ctx_device(ctx) == LAM_DEVICE_CPU;
  row rows[MAX_ROWS];
  int nrows = 0;
  int mems[2], nm = 0;
  if (o.pageable) mems[nm++] = 0;
  if (o.pinned && !on_cpu) mems[nm++] = 1; /* pinned means nothing without a GPU */
  for (int k = 0; k < nm; k++) add_row(rows, &nrows, LAM_XFER_CPU_NORMALIZE, LAM_DTYPE_F32, mems[k]);
  for (int d = 0; d < o.ndtypes; d++)
    for (int k = 0; k < nm; k++) add_row(rows, &nrows, LAM_XFER_COPY, o.dtypes[d], mems[k]);
  for (int k = 0; k < nm; k++) add_row(rows, &nrows, LAM_XFER_GPU_NORMALIZE, LAM_DTYPE_F32, mems[k]);
  add_row(rows, &nrows, LAM_XFER_GPU_NORMALIZE, LAM_DTYPE_BF16, mems[nm - 1]);

  printf("lamina bench transfer on %s\n", lam_ctx_device_name(ctx));
  if (on_cpu)
    printf("  no GPU: the copies below are host memcpy (staging) and 'GPU normalize' runs on the CPU;\n"
           "  the host-to-device copies themselves need a GPU (--device cuda on a machine with one).\n");
  printf("  median of up to %ld repetitions (%s), microseconds; every result checked\n", o.reps,
         on_cpu ? "host clock" : "CUDA events");
  static lam_xfer_result res[MAX_ROWS][MAX_COLS];
  int rc = 0;
  for (int j = 0; j < o.ncols && !rc; j++)
    for (int i = 0; i < nrows && !rc; i++) {
      const col *cl = &o.cols[j];
      lam_xfer_case xc = {.n = cl->n, .c = cl->c, .h = cl->h, .w = cl->w, .layout = cl->layout,
                          .method = rows[i].method, .dtype = rows[i].dtype, .pinned = rows[i].pinned,
                          .reps = (int)o.reps, .warmup = (int)o.warmup, .max_ms = (double)o.max_ms};
      if (lam_bench_transfer(ctx, &xc, &res[i][j]) != LAM_OK) {
        fprintf(stderr, "lamina bench transfer: %s (batch %s): %s\n", rows[i].label, cl->label, lam_last_error());
        rc = 1;
      }
    }
  if (rc) {
    lam_ctx_free(ctx);
    return rc;
  }
  /* the table: methods down, batches across */
  int lw = 30, cw = o.shapes ? 18 : 10;
  printf("\n%-*s", lw, o.shapes ? "shape" : "batch (1x28x28 images)");
  for (int j = 0; j < o.ncols; j++) printf("%*s", cw, o.cols[j].label);
  printf("\n%-*s", lw, "  raw batch, uint8 (KB)");
  for (int j = 0; j < o.ncols; j++) printf("%*.1f", cw, o.cols[j].n * (double)o.cols[j].c * o.cols[j].h * o.cols[j].w / 1e3);
  printf("\n%-*s", lw, "  normalized, float32 (KB)");
  for (int j = 0; j < o.ncols; j++)
    printf("%*.1f", cw, o.cols[j].n * (double)o.cols[j].c * o.cols[j].h * o.cols[j].w * 4 / 1e3);
  printf("\n");
  for (int i = 0; i < nrows; i++) {
    printf("%-*s", lw, rows[i].label);
    for (int j = 0; j < o.ncols; j++) printf("%*.1f", cw, res[i][j].median_us);
    printf("\n");
  }
  /* the article's claim: u8 pinned + GPU normalize against CPU normalize + f32 pageable */
  int a = -1, b = -1;
  for (int i = 0; i < nrows; i++) {
    if (rows[i].method == LAM_XFER_CPU_NORMALIZE && !rows[i].pinned) a = i;
    if (rows[i].method == LAM_XFER_GPU_NORMALIZE && rows[i].dtype == LAM_DTYPE_F32 && (rows[i].pinned || on_cpu)) b = i;
  }
  if (a >= 0 && b >= 0) {
    printf("%-*s", lw, on_cpu ? "speed-up u8 + normalize" : "speed-up u8 pinned + GPU norm");
    for (int j = 0; j < o.ncols; j++) printf("%*.2fx", cw - 1, res[a][j].median_us / res[b][j].median_us);
    printf("\n  (over CPU normalize + f32 pageable, the usual DataLoader way)\n");
  }

  /* the CSV (the plot reads it; without --csv it goes to a temporary file) */
  char tmpcsv[64] = "", csvtmp[1100];
  const char *csv = o.csv;
  if (!csv && o.plot) {
    snprintf(tmpcsv, sizeof tmpcsv, "/tmp/lamina-transfer-XXXXXX");
    int fd = mkstemp(tmpcsv);
    if (fd < 0) {
      fprintf(stderr, "lamina bench transfer: could not make a temporary CSV for the plot (%s)\n", strerror(errno));
      lam_ctx_free(ctx);
      return 1;
    }
    close(fd);
    csv = tmpcsv;
  }
  if (csv) {
    snprintf(csvtmp, sizeof csvtmp, "%s.tmp", csv);
    FILE *f = fopen(tmpcsv[0] ? csv : csvtmp, "w");
    if (!f) {
      fprintf(stderr, "lamina bench transfer: cannot write %s: %s\n", csv, strerror(errno));
      rc = 1;
    } else {
      fprintf(f, "device,label,n,c,h,w,layout,method,method_label,dtype,memory,reps,bytes_host,bytes_device,median_us,"
                 "p10_us,p90_us,wall_median_us,gbps,copies_on_host\n");
      static const char *mname[] = {"copy", "cpu_normalize", "gpu_normalize"};
      for (int j = 0; j < o.ncols; j++)
        for (int i = 0; i < nrows; i++) {
          const lam_xfer_result *r = &res[i][j];
          const col *cl = &o.cols[j];
          fprintf(f, "\"%s\",%s,%zu,%d,%d,%d,%s,%s,%s,%s,%s,%d,%zu,%zu,%.3f,%.3f,%.3f,%.3f,%.3f,%d\n", lam_ctx_device_name(ctx),
                  cl->label, cl->n, cl->c, cl->h, cl->w, cl->layout == LAM_LAYOUT_NHWC ? "nhwc" : "nchw",
                  mname[rows[i].method], rows[i].label, lam_dtype_str(rows[i].dtype),
                  rows[i].pinned ? "pinned" : "pageable", r->reps, r->bytes_host, r->bytes_device, r->median_us,
                  r->p10_us, r->p90_us, r->wall_median_us, r->bytes_host / (r->median_us * 1e3), r->copies_on_host);
        }
      if (fflush(f) != 0 || ferror(f)) rc = 1;
      if (fclose(f) != 0) rc = 1;
      if (rc) fprintf(stderr, "lamina bench transfer: writing %s failed: %s\n", csv, strerror(errno));
      else if (!tmpcsv[0] && rename(csvtmp, csv) != 0) {
        fprintf(stderr, "lamina bench transfer: cannot rename %s to %s: %s\n", csvtmp, csv, strerror(errno));
        rc = 1;
      } else if (!tmpcsv[0]) printf("wrote %s\n", csv);
    }
  }
  if (!rc && o.plot) {
    if (draw(python, csv, o.plot) != 0) rc = 1;
  }
  if (tmpcsv[0]) remove(tmpcsv);
  lam_ctx_free(ctx);
  return rc;
}
