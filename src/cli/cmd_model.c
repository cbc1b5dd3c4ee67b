/* cmd_model.c — model specs in the CLI: the grammar (shown by `lamina train --help` and `lamina model
 * --help`), a model read from a file (--model FILE: one layer per line or comma-separated, '#'
 * comments), and `lamina model`, which prints each node of a spec's graph with its shape, parameters and
 * FLOPs, and the memory its batch buffers are planned to take. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

void cli_print_model_grammar(FILE *f) {
  fprintf(f, "Model specs: layers separated by commas, each reading the output of the one before.\n%s"
             "  NAME: LAYER                              labels the layer's output ('input' is the model's input)\n"
             "Presets: cnn (conv 32 3, relu, maxpool 2, conv 64 3, relu, maxpool 2, flatten, dense 10), mlp.\n"
             "The last layer gives the class scores: CLASSES×1×1, or CLASSES×H×W for labels per pixel.\n"
             "Example (a residual block): conv 64 3 pad 1 nobias, bn, r: relu, conv 64 3 pad 1 nobias, bn, relu,\n"
             "  conv 64 3 pad 1 nobias, bn, add @r, relu, gap, dense 10\n",
          lam_model_layers());
}

/* A file's text as one spec line: lines joined with ", " where they do not end in a comma, '#' to
 * the line's end dropped. *out is malloc'ed. */
static int read_model_file(const char *path, char **out, char *why, size_t why_size) {
  if (lam_input_check(path, "model file") != LAM_OK) { /* a regular file, one of the run's inputs */
    snprintf(why, why_size, "%s", lam_last_error());
    return -1;
  }
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(why, why_size, "cannot open %s: %s", path, strerror(errno));
    return -1;
  }
  size_t cap = 4096, len = 0;
  char *s = malloc(cap), line[4096];
  if (!s) {
    fclose(f);
    snprintf(why, why_size, "out of host memory");
    return -1;
  }
  s[0] = '\0';
  while (fgets(line, sizeof line, f)) {
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    size_t a = 0, b = strlen(line);
    while (a < b && (line[a] == ' ' || line[a] == '\t')) a++;
    while (b > a && (line[b - 1] == '\n' || line[b - 1] == '\r' || line[b - 1] == ' ' || line[b - 1] == '\t')) b--;
    if (a == b) continue;
    if (len + (b - a) + 3 >= cap) {
      cap = 2 * (len + (b - a) + 3);
      char *t = realloc(s, cap);
      if (!t) {
        free(s);
        fclose(f);
        snprintf(why, why_size, "out of host memory");
        return -1;
      }
      s = t;
    }
    if (len && s[len - 1] != ',' && line[a] != ',') s[len++] = ',';
    if (len) s[len++] = ' ';
    memcpy(s + len, line + a, b - a);
    len += b - a;
    s[len] = '\0';
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    free(s);
    snprintf(why, why_size, "reading %s failed", path);
    return -1;
  }
  *out = s;
  return 0;
}

int cli_model_spec(const char *cmd, const char *arg, char **spec) {
  struct stat st;
  char why[512];
  *spec = NULL;
  if (stat(arg, &st) == 0) { /* a file of that name: the model is in it */
    if (!S_ISREG(st.st_mode)) return cli_usage_error(cmd, "--model: %s is not a regular file", arg);
    if (read_model_file(arg, spec, why, sizeof why)) {
      fprintf(stderr, "lamina %s: --model: %s\n", cmd, why);
      return 1;
    }
    return 0;
  }
  *spec = strdup(arg);
  if (!*spec) {
    fprintf(stderr, "lamina %s: out of host memory\n", cmd);
    return 1;
  }
  return 0;
}

/* A FLOP count (a double) as a JSON integer, as it was printed (%.0f); null if it is not finite. */
static json_t *count_json(double v) { return isfinite(v) ? json_integer((json_int_t)llround(v)) : json_null(); }

/* [C, H, W]; NULL when out of memory. */
static json_t *shape_json(int c, int h, int w) {
  json_t *a = json_array();
  if (json_array_append_new(a, json_integer(c)) || json_array_append_new(a, json_integer(h)) ||
      json_array_append_new(a, json_integer(w))) {
    json_decref(a);
    return NULL;
  }
  return a;
}

static void model_usage(FILE *f) {
  fprintf(f,
          "usage: lamina model SPEC|FILE --input [Tx]CxHxW [--classes K] [--batch B] [--json]\n"
          "Prints the model's graph: every node's label, op, output shape, parameters and forward FLOPs per\n"
          "sample, and the memory its batch buffers are planned to take at batch B (activations, gradients\n"
          "and saved buffers placed by liveness, plus scratch and the input).\n"
          "  --input CxHxW   the input per sample, e.g. 3x32x32 (required); TxCxHxW: clips of T frames,\n"
          "                  e.g. 16x1x64x64 (FLOPs then count every frame)\n"
          "  --classes K     check that the model gives K class scores\n"
          "  --batch B       for the memory plan (default 64)\n"
          "  --json          one JSON object instead of the table\n"
          "\n");
  cli_print_model_grammar(f);
}

int cmd_model(int argc, char **argv) {
  static const struct option longopts[] = {{"input", required_argument, 0, 'i'}, {"classes", required_argument, 0, 'k'},
                                           {"batch", required_argument, 0, 'b'}, {"json", no_argument, 0, 'j'},
                                           {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
  int c, li = 0, json = 0, T = 1, C = 0, H = 0, W = 0;
  long classes = 0, batch = 64;
  opterr = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, ":", longopts, &li)) != -1) {
    switch (c) {
      case 'i':
      { /* TxCxHxW, else CxHxW (T = 1); nothing may follow */
        char end;
        int got = sscanf(optarg, "%dx%dx%dx%d%c", &T, &C, &H, &W, &end) == 4;
        if (!got) T = 1, got = sscanf(optarg, "%dx%dx%d%c", &C, &H, &W, &end) == 3;
        if (!got || C < 1 || H < 1 || W < 1 || T < 1)
          return cli_usage_error("model", "--input: '%s' is not CxHxW or TxCxHxW, e.g. 1x28x28", optarg);
        break;
      }
      case 'k':
        if (cli_parse_int("model", "--classes", optarg, 1, 255, &classes)) return EXIT_USAGE;
        break;
      case 'b':
        if (cli_parse_int("model", "--batch", optarg, 1, 65536, &batch)) return EXIT_USAGE;
        break;
      case 'j': json = 1; break;
      case 'h': model_usage(stdout); return 0;
      case ':': return cli_usage_error("model", "%s needs a value", argv[optind - 1]);
      default: return cli_usage_error("model", "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind != argc - 1) return cli_usage_error("model", "give one SPEC or FILE (see 'lamina model --help')");
  if (!C) return cli_usage_error("model", "--input CxHxW is required");
  char *spec = NULL;
  int rc = cli_model_spec("model", argv[optind], &spec);
  if (rc) return rc;
  lam_ctx *ctx = NULL;
  lam_model *m = NULL;
  lam_node_info *nodes = NULL;
  int ret = 1, n = 0;
  size_t planned = 0;
  if (lam_ctx_create(&ctx, LAM_DEVICE_CPU) != LAM_OK) goto fail;
  lam_status s = lam_model_create_clip(ctx, spec, T, C, H, W, 1, &m);
  if (s == LAM_ERR_INVALID_ARG) {
    fprintf(stderr, "lamina model: %s\n", lam_last_error());
    ret = EXIT_USAGE;
    goto out;
  }
  if (s != LAM_OK || lam_model_nodes(m, (int)batch, NULL, 0, &n, NULL) != LAM_OK) goto fail;
  nodes = calloc((size_t)n, sizeof *nodes);
  if (!nodes || lam_model_nodes(m, (int)batch, nodes, n, &n, &planned) != LAM_OK) goto fail;
  int oc, oh, ow;
  lam_model_output_shape(m, &oc, &oh, &ow);
  if (classes && oc != classes) {
    fprintf(stderr, "lamina model: the model gives %d class scores but --classes is %ld: end it with a layer of %ld "
                    "outputs\n", oc, classes, classes);
    ret = EXIT_USAGE;
    goto out;
  }
  double flops = 0;
  for (int i = 0; i < n; i++) flops += nodes[i].flops;
  if (json) {
    json_t *j = json_object(), *jn = json_array();
    int bad = !j || !jn;
    bad |= json_object_set_new(j, "spec", cli_json_str(lam_model_spec(m)));
    bad |= json_object_set_new(j, "input", shape_json(C, H, W));
    bad |= json_object_set_new(j, "frames", json_integer(T));
    bad |= json_object_set_new(j, "output", shape_json(oc, oh, ow));
    bad |= json_object_set_new(j, "params", json_integer((json_int_t)lam_model_param_count(m)));
    bad |= json_object_set_new(j, "flops", count_json(flops));
    bad |= json_object_set_new(j, "batch", json_integer(batch));
    bad |= json_object_set_new(j, "planned_bytes", json_integer((json_int_t)planned));
    for (int i = 0; i < n; i++) {
      json_t *nj = json_object();
      bad |= !nj;
      bad |= json_object_set_new(nj, "name", cli_json_str(nodes[i].name));
      bad |= json_object_set_new(nj, "op", cli_json_str(nodes[i].op));
      bad |= json_object_set_new(nj, "reads", cli_json_str(nodes[i].reads));
      bad |= json_object_set_new(nj, "shape", shape_json(nodes[i].c, nodes[i].h, nodes[i].w));
      bad |= json_object_set_new(nj, "params", json_integer((json_int_t)nodes[i].params));
      bad |= json_object_set_new(nj, "flops", count_json(nodes[i].flops));
      bad |= json_object_set_new(nj, "fused", json_integer(nodes[i].fused));
      bad |= json_object_set_new(nj, "fusion", cli_json_str(nodes[i].fusion));
      bad |= json_object_set_new(nj, "stats", json_integer(nodes[i].stats));
      bad |= json_array_append_new(jn, nj);
    }
    bad |= json_object_set_new(j, "nodes", jn);
    if (bad) {
      json_decref(j);
      j = NULL; /* cli_json_print says: out of host memory */
    }
    if (cli_json_print(j)) goto out; /* ret is 1: it said why */
  } else {
    if (T > 1) printf("model %s\ninput clips of %d frames of %dx%dx%d\n", lam_model_spec(m), T, C, H, W);
    else printf("model %s\ninput %dx%dx%d\n", lam_model_spec(m), C, H, W);
    printf("  %3s %-12s %-10s %-12s %14s %10s %14s\n", "#", "name", "op", "reads", "output", "params", "MFLOPs/sample");
    for (int i = 0; i < n; i++) {
      char shape[48], path[64] = "";
      snprintf(shape, sizeof shape, "%dx%dx%d", nodes[i].c, nodes[i].h, nodes[i].w);
      if (nodes[i].fused) snprintf(path, sizeof path, "  (%s %s)", nodes[i].fused == 2 ? "runs" : "in", nodes[i].fusion);
      if (nodes[i].stats) /* the conv that sums a BatchNorm's statistics, and that BatchNorm */
        snprintf(path + strlen(path), sizeof path - strlen(path), "  (%s)",
                 nodes[i].stats == 3 ? "statistics from the conv" : "sums the BatchNorm's statistics");
      printf("  %3d %-12s %-10s %-12s %14s %10zu %14.3f%s\n", i + 1, nodes[i].name, nodes[i].op,
             nodes[i].reads[0] ? nodes[i].reads : "", shape, nodes[i].params, nodes[i].flops / 1e6, path);
    }
    printf("parameters %zu (%.2f MB), forward %.3f GFLOPs per sample\n", lam_model_param_count(m),
           lam_model_param_count(m) * 4 / 1e6, flops / 1e9);
    printf("planned memory at batch %ld: %.2f MB for activations, gradients, saved buffers, scratch and input\n", batch,
           planned / 1e6);
  }
  ret = 0;
  goto out;
fail:
  fprintf(stderr, "lamina model: %s\n", lam_last_error());
out:
  free(nodes);
  free(spec);
  lam_model_free(m);
  lam_ctx_free(ctx);
  return ret;
}
