/* main.c — the lamina CLI: subcommands with long options; a bad option is a message and exit code 2. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: lamina <command> [options]\n"
          "lamina %s — a neural-network engine in C and CUDA.\n"
          "\n"
          "commands:\n"
          "  hidden   the hidden layer out = tanh(grey / 255 * w): run, check, time\n"
          "  train    train a model (e.g. the reference CNN on Fashion-MNIST)\n"
          "  eval     evaluate a saved model: accuracy and confusion matrix\n"
          "  predict  a saved model on image files: classes and probabilities, or masks and a picture\n"
          "  model    a model spec's graph: shapes, parameters, FLOPs and planned memory\n"
          "  export   a saved model's weights to a safetensors file, in PyTorch's names and layouts\n"
          "  import   a safetensors file of weights (e.g. from PyTorch) to a saved model\n"
          "  data     make a data set anyone can rebuild: 'data segment' (scenes, a class per pixel)\n"
          "  bench    benchmarks: 'bench transfer' times image batches from host to device\n"
          "  info     build features, devices and memory\n"
          "\n"
          "'lamina <command> --help' shows a command's options. Global: --help, --version.\n"
          "The device is chosen by --device or LAMINA_DEVICE (auto|cpu|cuda); auto takes CUDA when present.\n",
          LAMINA_VERSION);
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
  if (!strcmp(cmd, "hidden")) return cmd_hidden(argc - 1, argv + 1);
  if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
  if (!strcmp(cmd, "train")) return cmd_train(argc - 1, argv + 1);
  if (!strcmp(cmd, "eval")) return cmd_eval(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) return cmd_bench(argc - 1, argv + 1);
  if (!strcmp(cmd, "model")) return cmd_model(argc - 1, argv + 1);
  if (!strcmp(cmd, "export")) return cmd_export(argc - 1, argv + 1);
  if (!strcmp(cmd, "import")) return cmd_import(argc - 1, argv + 1);
  if (!strcmp(cmd, "data")) return cmd_data(argc - 1, argv + 1);
  if (!strcmp(cmd, "predict")) return cmd_predict(argc - 1, argv + 1);
  return cli_usage_error(NULL, "unknown command '%s' (commands: hidden, train, eval, predict, model, export, import, data, bench, "
                         "info)",
                         cmd);
}
