/* cmd_export.c — weights in and out of lamina: `lamina export` writes a checkpoint's weights as a
 * safetensors file under PyTorch's names and layouts, `lamina import` makes a checkpoint (the model alone,
 * as `lamina eval --load` reads it) from a spec, an input shape and such a file. The names, layouts and
 * checks are the library's (src/nn/safetensors.c); this file is options and messages. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char naming_help[] =
    "Names: layer i of the spec, every layer counted from 0 (relu, flatten, add, concat too; a label\n"
    "'NAME:' is not a layer), holds 'i.weight' and 'i.bias' (conv, convt, dense; no bias with nobias);\n"
    "bn also 'i.running_mean', 'i.running_var' and 'i.num_batches_tracked' (written as an int64 0: lamina\n"
    "counts no batches; import ignores it). A plain stack has the names of nn.Sequential over the same\n"
    "layers: 'conv 8 3, relu, maxpool 2, flatten, dense 10' is 0.weight, 0.bias, 4.weight, 4.bias. A graph\n"
    "(labels, add, concat) has those of a torch module that registers its layers as submodules \"0\",\n"
    "\"1\", ... in spec order (self.add_module(str(i), layer)) and wires them in forward().\n"
    "Layouts are PyTorch's: conv (out, in, k, k), convt (in, out, k, k) as ConvTranspose2d, dense\n"
    "(out, in) over inputs flattened C, H, W (nn.Flatten), bn (C).\n";

static int fail(const char *cmd, const char *what) {
  fprintf(stderr, "lamina %s: %s%s%s\n", cmd, what ? what : "", what ? ": " : "", lam_last_error());
  return 1;
}

/* The tensors of m, one a line (--list). */
static int list_names(const char *cmd, const lam_model *m) {
  size_t need = 0;
  if (lam_model_safetensors_names(m, NULL, 0, &need) != LAM_OK) return fail(cmd, NULL);
  char *buf = malloc(need);
  if (!buf || lam_model_safetensors_names(m, buf, need, NULL) != LAM_OK) {
    free(buf);
    return buf ? fail(cmd, NULL) : (fprintf(stderr, "lamina %s: out of host memory\n", cmd), 1);
  }
  printf("# the tensors of \"%s\" in safetensors files: name, shape, dtype, layer\n%s", lam_model_spec(m), buf);
  free(buf);
  return 0;
}

static void export_usage(FILE *f) {
  fprintf(f,
          "usage: lamina export --load MODEL --out FILE.safetensors [--device D]\n"
          "       lamina export --load MODEL --list\n"
          "Writes the weights of a lamina checkpoint (lamina train --save) as a safetensors file that PyTorch\n"
          "loads (safetensors.torch.load_file, then module.load_state_dict), atomically. Every tensor is\n"
          "float32; __metadata__ holds lamina.spec, lamina.input (CxHxW) and lamina.normalize.\n"
          "  --load MODEL      the checkpoint (required)\n"
          "  --out FILE        the safetensors file to write\n"
          "  --list            print the tensors' names, shapes and layers instead\n"
          "  --device D        cpu (default: nothing here needs a GPU), cuda or auto\n"
          "\n%s",
          naming_help);
}

static void import_usage(FILE *f) {
  fprintf(f,
          "usage: lamina import FILE.safetensors --model SPEC|FILE --input CxHxW --out MODEL\n"
          "                     [--normalize M1,../S1,..] [--device D]\n"
          "       lamina import --model SPEC|FILE --input CxHxW --list\n"
          "Makes a lamina checkpoint of the model alone (no training state), the file 'lamina eval --load'\n"
          "and 'lamina export --load' read, from a model spec, an input shape and a safetensors file of its\n"
          "weights (e.g. safetensors.torch.save_file(module.state_dict(), FILE)). The whole file is checked first:\n"
          "its header, each tensor's dtype (float32; float64, float16 and bfloat16 are converted), shape and\n"
          "data offsets, that every tensor of the model is there and no other; any mismatch names the tensor,\n"
          "the shapes and the spec's layer, and nothing is written.\n"
          "  --model SPEC|FILE the model (see 'lamina model --help'; required)\n"
          "  --input CxHxW     the input per sample, e.g. 1x28x28 (required)\n"
          "  --out MODEL       the checkpoint to write (atomically)\n"
          "  --normalize M../S..  pixel/255 normalization per channel, as 'lamina train' takes it; default:\n"
          "                    the file's __metadata__ lamina.normalize if it has one, else 0.5/0.5\n"
          "  --list            print the tensors the model takes (names, shapes, layers) and exit\n"
          "  --device D        cpu (default), cuda or auto\n"
          "\n%s",
          naming_help);
}

typedef struct port_opts {
  const char *load, *out, *model, *normalize, *file;
  int C, H, W, list;
  lam_device device;
} port_opts;

/* Options of export (import = 0) or import; returns 0, -1 after --help, or an exit status. */
static int parse(const char *cmd, int argc, char **argv, port_opts *o) {
  static const struct option longopts[] = {
      {"load", required_argument, 0, 'l'},  {"out", required_argument, 0, 'o'},   {"model", required_argument, 0, 'm'},
      {"input", required_argument, 0, 'i'}, {"normalize", required_argument, 0, 'n'}, {"device", required_argument, 0, 'd'},
      {"list", no_argument, 0, 'L'},        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
  const int import = !strcmp(cmd, "import");
  memset(o, 0, sizeof *o);
  o->device = LAM_DEVICE_CPU;
  int c, li = 0;
  opterr = 0;
  optind = 1;
  while ((c = getopt_long(argc, argv, ":", longopts, &li)) != -1) {
    const char *opt = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
    if (!import && (c == 'm' || c == 'i' || c == 'n')) return cli_usage_error(cmd, "unknown option '%s'", opt);
    if (import && c == 'l') return cli_usage_error(cmd, "unknown option '%s' (import reads FILE.safetensors)", opt);
    switch (c) {
      case 'l': o->load = optarg; break;
      case 'o': o->out = optarg; break;
      case 'm': o->model = optarg; break;
      case 'n': o->normalize = optarg; break;
      case 'L': o->list = 1; break;
      case 'i': {
        char end;
        if (sscanf(optarg, "%dx%dx%d%c", &o->C, &o->H, &o->W, &end) != 3 || o->C < 1 || o->H < 1 || o->W < 1)
          return cli_usage_error(cmd, "--input: '%s' is not CxHxW, e.g. 1x28x28", optarg);
        break;
      }
      case 'd':
        if (lam_device_parse(optarg, &o->device) != LAM_OK)
          return cli_usage_error(cmd, "--device: '%s' is not cpu, cuda or auto", optarg);
        break;
      case 'h':
        if (import) import_usage(stdout);
        else export_usage(stdout);
        return -1;
      case ':': return cli_usage_error(cmd, "%s needs a value", opt);
      default: return cli_usage_error(cmd, "unknown option '%s'", opt);
    }
  }
  if (import) {
    if (optind < argc) o->file = argv[optind++];
    if (optind < argc) return cli_usage_error(cmd, "one FILE.safetensors, not also '%s'", argv[optind]);
    if (!o->model) return cli_usage_error(cmd, "--model SPEC|FILE is required");
    if (!o->C) return cli_usage_error(cmd, "--input CxHxW is required");
    if (!o->list && !o->file) return cli_usage_error(cmd, "give the FILE.safetensors to read");
    if (!o->list && !o->out) return cli_usage_error(cmd, "--out MODEL is required (the checkpoint to write)");
    if (o->list && (o->file || o->out || o->normalize))
      return cli_usage_error(cmd, "--list prints the model's tensor names: it takes no FILE, --out or --normalize");
  } else {
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s' (the checkpoint goes after --load)", argv[optind]);
    if (!o->load) return cli_usage_error(cmd, "--load MODEL is required");
    if (!o->list && !o->out) return cli_usage_error(cmd, "--out FILE.safetensors is required");
    if (o->list && o->out) return cli_usage_error(cmd, "--list prints the tensor names: it writes no --out");
  }
  return 0;
}

int cmd_export(int argc, char **argv) {
  port_opts o;
  int rc = parse("export", argc, argv, &o);
  if (rc) return rc < 0 ? 0 : rc;
  if (o.out && lam_output_check(o.out, "safetensors file", LAM_FILE_SAFETENSORS) != LAM_OK) return fail("export", "--out");
  lam_ctx *ctx = NULL;
  lam_model *m = NULL;
  int ret = 1;
  if (lam_ctx_create(&ctx, o.device) != LAM_OK || lam_checkpoint_load(ctx, o.load, &m, NULL, NULL) != LAM_OK) {
    ret = fail("export", NULL);
  } else if (o.list) {
    ret = list_names("export", m);
  } else if (lam_model_save_safetensors(m, o.out) != LAM_OK) {
    ret = fail("export", NULL);
  } else {
    printf("lamina export: wrote %s: %zu parameters of \"%s\" (the names: lamina export --load %s --list)\n", o.out,
           lam_model_param_count(m), lam_model_spec(m), o.load);
    ret = 0;
  }
  lam_model_free(m);
  lam_ctx_free(ctx);
  return ret;
}

int cmd_import(int argc, char **argv) {
  port_opts o;
  int rc = parse("import", argc, argv, &o);
  if (rc) return rc < 0 ? 0 : rc;
  if (o.out && lam_output_check(o.out, "checkpoint", LAM_FILE_CHECKPOINT) != LAM_OK) return fail("import", "--out");
  char *spec = NULL;
  if ((rc = cli_model_spec("import", o.model, &spec))) return rc;
  lam_ctx *ctx = NULL;
  lam_model *m = NULL;
  int ret = 1;
  float mean[64], std[64];
  if (lam_ctx_create(&ctx, o.device) != LAM_OK) {
    ret = fail("import", NULL);
    goto out;
  }
  lam_status s = lam_model_create(ctx, spec, o.C, o.H, o.W, 1, &m);
  if (s == LAM_ERR_INVALID_ARG) {
    fprintf(stderr, "lamina import: --model: %s\n", lam_last_error());
    ret = EXIT_USAGE;
    goto out;
  }
  if (s != LAM_OK) {
    ret = fail("import", NULL);
    goto out;
  }
  if (o.normalize && (o.C > 64 || lam_normalization_parse(o.normalize, o.C, mean, std) != LAM_OK)) {
    ret = cli_usage_error("import", "--normalize: '%s' is not %d means, '/', %d stds (> 0), comma-separated",
                          o.normalize, o.C, o.C);
    goto out;
  }
  if (o.list) {
    ret = list_names("import", m);
    goto out;
  }
  if (lam_model_load_safetensors(m, o.file) != LAM_OK ||
      (o.normalize && lam_model_set_normalization(m, o.C, mean, std) != LAM_OK) ||
      lam_checkpoint_save(o.out, m, NULL) != LAM_OK) {
    ret = fail("import", NULL);
    goto out;
  }
  printf("lamina import: wrote %s: %zu parameters of \"%s\" on %dx%dx%d inputs from %s\n", o.out,
         lam_model_param_count(m), lam_model_spec(m), o.C, o.H, o.W, o.file);
  ret = 0;
out:
  lam_model_free(m);
  lam_ctx_free(ctx);
  free(spec);
  return ret;
}
