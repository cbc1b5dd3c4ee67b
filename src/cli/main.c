/* main.c — the lamina CLI: subcommands with long options; a bad option is a message and exit code 2. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* Every command, in the order --help lists them: the help, the dispatch and the unknown-command message
 * are all made from this table (data's and bench's own kinds from theirs, cli_data_kinds and
 * cli_benchmarks: --help once listed only 'data segment'). */
static const cli_sub commands[] = {
    {"hidden", "the hidden layer out = tanh(grey / 255 * w): run, check, time", cmd_hidden},
    {"train", "train a model (e.g. the reference CNN on Fashion-MNIST)", cmd_train},
    {"eval", "evaluate a saved model: accuracy and confusion matrix", cmd_eval},
    {"predict", "a saved model on image files: classes and probabilities, or masks and a picture", cmd_predict},
    {"model", "a model spec's graph: shapes, parameters, FLOPs and planned memory", cmd_model},
    {"export", "a saved model's weights to a safetensors file, in PyTorch's names and layouts", cmd_export},
    {"import", "a safetensors file of weights (e.g. from PyTorch) to a saved model", cmd_import},
    {"data", "make a data set anyone can rebuild (the same bytes for the same seed):", cmd_data},
    {"bench", "benchmarks:", cmd_bench},
    {"info", "build features, devices and memory", cmd_info},
    {NULL, NULL, NULL},
};

static void usage(FILE *f) {
  fprintf(f,
          "usage: lamina <command> [options]\n"
          "lamina %s — a neural-network engine in C and CUDA.\n"
          "\n"
          "commands:\n",
          LAMINA_VERSION);
  for (const cli_sub *c = commands; c->name; c++) {
    fprintf(f, "  %-8s %s\n", c->name, c->summary);
    const cli_sub *kinds = !strcmp(c->name, "data") ? cli_data_kinds : !strcmp(c->name, "bench") ? cli_benchmarks : NULL;
    for (const cli_sub *k = kinds; k && k->name; k++) fprintf(f, "    %-9s %s\n", k->name, k->summary);
  }
  fprintf(f,
          "\n"
          "'lamina <command> --help' shows a command's options. Global: --help, --version.\n"
          "The device is chosen by --device or LAMINA_DEVICE (auto|cpu|cuda); auto takes CUDA when present.\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return EXIT_USAGE;
  }
  const char *cmd = argv[1];
  if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "--version")) {
    printf("lamina %s\n", LAMINA_VERSION);
    return 0;
  }
  /* OMP_NUM_THREADS is bounded as the library loads, before the first parallel region: say so once */
  const char *threads_note = lam_threads_note();
  if (threads_note) fprintf(stderr, "lamina: note: %s\n", threads_note);
  lam_run_begin(); /* the command is one run: no output may replace its inputs or other outputs (files.c) */
  for (const cli_sub *c = commands; c->name; c++)
    if (!strcmp(cmd, c->name)) return c->run(argc - 1, argv + 1);
  char names[256];
  return cli_usage_error(NULL, "unknown command '%s' (commands: %s)", cmd, cli_sub_names(commands, names, sizeof names));
}
