/* cmd_train.c — `lamina train` and `lamina eval`: train a model on a data set (IDX or .npy arrays, image, mask
 * or video folders, clips) with a live progress line and one summary line per epoch (or one JSON object), save
 * and resume checkpoints, and evaluate a saved model (a confusion matrix, or IoU per class). */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

typedef struct train_opts {
  const char *data, *model, *save, *resume, *load;
  int rank; /* of several processes (ranks.c): only rank 0 speaks and writes files */
  int gpus; /* --gpus N: start N ranks here, one a GPU (0: not given) */
  int sync_bn; /* --sync-bn: BatchNorm's statistics over all ranks */
  double bucket_mb; /* --bucket-mb: GPU ranks' gradient buckets, MiB (0: one sum after backward) */
  int epochs, batch, json, progress, threads;
  lam_opt_kind opt_kind;
  double lr, momentum, weight_decay;
  int lr_set, wd_set, momentum_set, smoothing_set; /* given (--resume applies each, saying so) */
  lam_device device;
  uint64_t seed;
  size_t max_memory;
  int profile;
  const char *trace;
  int stream; /* pinned buffers to stream batches through; 0: the data set resident on the device */
  lam_precision precision;
  int graph; /* 1: capture the step in a CUDA graph where the backend can (default) */
  int graph_set; /* --graph given */
  int classes;          /* --classes K: 0 from the data */
  const char *normalize; /* NULL or "default": 0.5/0.5 per channel; "auto": the training set's; "M,../S,.." */
  double smoothing;
  int aug_pad, aug_flip; /* --augment crop:P,flip */
  int model_set, opt_set, batch_set, seed_set; /* given on the command line (--resume refuses a different one) */
  const char *lr_schedule; /* --lr-schedule (NULL: constant) */
  double warmup;           /* --warmup E (epochs) */
  int warmup_set;
  double val_split;        /* --val-split F (0: no validation part) */
  const char *save_best, *log;
  int early_stop; /* --early-stop N (0: off) */
  int monitor_miou; /* --monitor miou: --save-best and --early-stop follow the validation mean IoU */
  lam_image_opts images; /* an image folder's --size, --cache, --skip-bad, --decode */
  int decode_set;        /* --decode given */
  lam_image_opts train_part; /* out: images as the training part's load left it (cache hit, decode seconds) */
  size_t replaced;           /* out: samples of a streamed set that failed to decode and were replaced (--skip-bad) */
  size_t video_hits, video_misses; /* out: a video folder's --cache: clips read from it, videos decoded into it */
  uint8_t label_map[256];    /* --label-map FILE's table (images.label_map points here) */
} train_opts;


static void train_usage(FILE *f) {
  fprintf(f,
          "usage: lamina train [options]\n"
          "Trains a model on an image data set (uint8 images go to the device once and are normalized\n"
          "there), printing a progress line and one summary line per epoch.\n"
          "\n"
          "  --data fashion-mnist|DIR  the data set: Debian's Fashion-MNIST, or a folder holding train-images*,\n"
          "                         train-labels*, t10k-images* (or test-images*), t10k-labels* (or test-labels*),\n"
          "                         each IDX (plain or .gz) or NumPy .npy: images N×H×W or N×H×W×C uint8, labels N\n"
          "                         (a class per image) or N×H×W (a class per pixel, 255 = ignore) (default\n"
          "                         fashion-mnist); or an image folder: DIR/train/CLASS/*.png|jpg|jpeg and\n"
          "                         DIR/test/CLASS/... (or DIR/val/CLASS/...), the classes the training folders\n"
          "                         in sorted order; or flat, DIR/CLASS/... (train needs --val-split: its part is\n"
          "                         the test part too; eval reads all of it). Grey and colour images are made the\n"
          "                         set's channels (most images': a tie is colour); or a mask folder (segmentation,\n"
          "                         a class per pixel; before class folders): DIR/{train,test|val}/{images,masks}/,\n"
          "                         mmsegmentation's DIR/{img_dir,ann_dir}/{train,val}/, or Pascal VOC's\n"
          "                         JPEGImages/ + SegmentationClass/ + ImageSets/Segmentation/{train,val}.txt: images\n"
          "                         and masks paired by name; a mask a palette PNG (the index is the class) or 8-bit\n"
          "                         grey PNG (the value), 255 ignored; classes DIR/classes.txt's names (a line each;\n"
          "                         VOC's 21 built in), else the largest value + 1; not cached\n"
          "  --reduce-zero-label    a mask folder's value 0 is ignored (255), the others one less (mmsegmentation's)\n"
          "  --label-map FILE       a mask folder's values mapped by FILE's lines 'RAW NEW' (0 to 255; after\n"
          "                         --reduce-zero-label); values it does not list become 255, ignored\n"
          "  --size HxW             fit an image folder's images to HxW (scaled to cover it, the middle kept);\n"
          "                         larger than 4096 a side too (a JPEG decoded smaller by DCT scaling); default:\n"
          "                         every image must be the size of the first, at most 4096 a side. The checkpoint\n"
          "                         keeps it and the class folders' names: eval, predict and --resume read at that size\n"
          "  --cache DIR            where an image folder's decoded images are kept for the next run (default\n"
          "                         DATA/.lamina-cache where it can be made; '' for none); a video folder's: none\n"
          "                         unless given, else every frame of each video at the clip size, kept in DIR\n"
          "                         when the video is first read (the same clips as decoding: for sets that fit\n"
          "                         on disk; a changed video is decoded again)\n"
          "  --skip-bad             leave out image files that cannot be decoded (and count them) instead of\n"
          "                         stopping at the first\n"
          "  --frames T             a video folder's clips: T frames each (default 16) ...\n"
          "  --frame-stride S       ... every S-th frame (default 2): in training from a start drawn each epoch,\n"
          "                         in testing the video's middle clip; DIR/train/CLASS/NAME.mp4|avi|mkv|webm|mov\n"
          "                         (the checkpoint keeps both: eval, predict and --resume take clips so)\n"
          "  --test-clips K         test a video folder on K clips of each video evenly spaced over it (1 to 64;\n"
          "                         default 1: the middle clip), its class from their softmax averaged\n"
          "  --decode auto|cpu|gpu  where an image folder's JPEG files are decoded: cpu through libjpeg on all host\n"
          "                         threads, gpu through nvJPEG (where the build has it); a video folder's videos:\n"
          "                         cpu through FFmpeg on all host threads, gpu by the GPU's video engines (NVDEC,\n"
          "                         where FFmpeg has them); auto (default): cpu, the faster on every set measured\n"
          "  --model SPEC|FILE      a preset (cnn, mlp), layers (grammar below), or a file of them: one layer per\n"
          "                         line or comma-separated, '#' comments (default cnn)\n"
          "  --classes K            classes (default: the largest label + 1)\n"
          "  --normalize default|auto|M1,M2,../S1,S2,..  pixel/255 normalization per channel: 0.5 and 0.5\n"
          "                         (default), the training set's mean and std (auto), or given; saved with the model\n"
          "  --label-smoothing S    cross-entropy's label smoothing, 0 <= S < 1 (default 0)\n"
          "  --augment crop:P,flip  augment every training batch on the device, inside the step: crop:P a random\n"
          "                         crop after padding P black pixels on each side, flip a left-right flip half the\n"
          "                         time (either or both; a clip's frames and a mask per pixel alike, padded\n"
          "                         labels ignored); 'none' (default). Evaluation never augments\n"
          "  --epochs N             train until N epochs are done (default 5; with --resume, in all)\n"
          "  --batch B              images per step (default 64)\n"
          "  --opt sgd|adam|adamw   optimizer (default adam)\n"
          "  --lr LR                learning rate (default: 1e-3 for adam/adamw, 0.01 for sgd)\n"
          "  --lr-schedule S        the rate over the run, stepped every batch inside the step's graph: constant\n"
          "                         (default), cosine (down to 0 at the last epoch), step:E:G (times G every E\n"
          "                         epochs, e.g. step:10:0.1) or onecycle (PyTorch's OneCycleLR, max_lr = --lr);\n"
          "                         saved in checkpoints, so --resume continues it\n"
          "  --warmup E             a linear warm-up over the first E epochs (fractions allowed, e.g. 0.5); with\n"
          "                         onecycle, its rise (default 0.3 of the run)\n"
          "  --val-split F          hold out the fraction F of the training images (0 < F < 1; the same images every\n"
          "                         run) as a validation part: each epoch reports its loss and accuracy instead of the\n"
          "                         test part's, which is measured once, at the end\n"
          "  --save-best FILE       write the model of the epoch with the best validation figure (--monitor; needs\n"
          "                         --val-split)\n"
          "  --early-stop N         stop when the validation figure (--monitor) has not improved for N epochs (needs\n"
          "                         --val-split)\n"
          "  --monitor loss|miou    the figure --save-best and --early-stop follow: the validation loss, lower is\n"
          "                         better (default), or the validation mean IoU, higher is better (a set with a\n"
          "                         label per pixel)\n"
          "  --log FILE.csv         a CSV row per epoch: loss, accuracy, validation, rate, seconds, images/s, mean IoU\n"
          "  --momentum M           SGD momentum (default 0)\n"
          "  --weight-decay W       (default 0; adamw 0.01)\n"
          "  --device auto|cpu|cuda backend (default auto)\n"
          "  --seed S               initialization and shuffling seed (default 1)\n"
          "  --threads N            threads of the CPU work (default: LAMINA_THREADS, OMP_NUM_THREADS, else\n"
          "                         the cores this process may use)\n"
          "  --save FILE            write a checkpoint after every epoch (atomically)\n"
          "  --resume FILE          continue from a checkpoint exactly where it stopped\n"
          "  --max-memory BYTES     cap the memory lamina may take (e.g. 2G; K/M/G are powers of 1000); going\n"
          "                         over it is an error with the numbers (default: on CUDA the device's memory,\n"
          "                         on the CPU the memory the machine has available at the start); the data set\n"
          "                         held in host memory counts: a set over the cap is refused (an image or\n"
          "                         mask folder streams from its files instead)\n"
          "  --profile              time every op of 100 steps of the first epoch (from step 10; the GPU's own\n"
          "                         clock on CUDA) and print a table per op, like torch.profiler's\n"
          "  --trace FILE           also write those steps as a Chrome trace (JSON; open in Perfetto)\n"
          "  --stream               stream batches instead of keeping the data set on the device: a loader thread\n"
          "                         fills pinned buffers, a copy stream overlaps compute (automatic when the set\n"
          "                         does not fit); prints how long the device waited for data. An image or mask\n"
          "                         folder then streams from its files: each batch decoded on the host threads a\n"
          "                         few steps ahead, in bounded memory (automatic where the decoded part would\n"
          "                         take more than half of --max-memory, or 3/4 of the memory available)\n"
          "  --buffers N            pinned buffers for --stream, 2 or 3 (default 3; batches smaller than twice\n"
          "                         the host threads take more, up to 8)\n"
          "  --precision fp32|tf32|bf16|fp16  matrix products in fp32 (default), in tf32 on tensor cores (CUDA),\n"
          "                         or with bf16 or fp16 operands and fp32 sums, weights kept in fp32 (tensor\n"
          "                         cores on CUDA, and 16-bit activations there for a model with convs of its\n"
          "                         own; emulated on the CPU: same numbers, slower); fp16 scales the loss as\n"
          "                         PyTorch's GradScaler (from 2^16; a step whose gradients overflow is skipped)\n"
          "  --graph on|off         replay the step from a CUDA graph (default on where there is a GPU)\n"
          "  --no-progress          no live progress line\n"
          "  --json                 print one JSON object at the end instead of text\n"
          "  --help                 this text\n"
          "  --gpus N               train on N GPUs of this machine: starts N ranks of itself, one a GPU\n"
          "  --sync-bn              with ranks: BatchNorm normalizes with the whole global batch's statistics\n"
          "                         (PyTorch's SyncBatchNorm; default: each rank's own share's)\n"
          "  --bucket-mb M          GPU ranks: sum the gradients in buckets of M MiB that start while backward\n"
          "                         runs (PyTorch DDP's bucket_cap_mb; default 0: one sum after backward)\n"
          "Several processes: each process is a rank that trains a replica on its share of every global batch\n"
          "of --batch images (B/N each, the first B%%N ranks one more); the gradients are summed over the ranks\n"
          "before each step (GPU ranks: NCCL, on the device, inside the step's graph; CPU ranks: MPI_Allreduce),\n"
          "so the run trains as one process would at that batch; rank 0 prints and writes the files. Started by\n"
          "  --gpus N                     on one machine;\n"
          "  mpirun -np N lamina train    GPU ranks (a GPU a local rank) or CPU ranks (--device cpu; the ranks\n"
          "                               on a machine share its cores: --threads is cores / ranks by default);\n"
          "  torchrun-style environment   RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (Slurm's\n"
          "                               SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID do too): GPU ranks; rank 0\n"
          "                               listens on MASTER_PORT (the one above under torchrun, whose agent\n"
          "                               holds it; LAMINA_PORT sets another) to hand out NCCL's id.\n"
          "Ranks do not --stream.\n"
          "Exit status: 0 ok, 1 failure, 2 bad usage.\n"
          "\n");
  cli_print_model_grammar(f);
}

static void eval_usage(FILE *f) {
  fprintf(f,
          "usage: lamina eval --load FILE [--data fashion-mnist|DIR] [--batch B] [--device D] [--threads N]\n"
          "                   [--size HxW] [--cache DIR] [--skip-bad] [--decode D] [--reduce-zero-label]\n"
          "                   [--label-map FILE] [--stream] [--max-memory BYTES] [--frames T]\n"
          "                   [--frame-stride S] [--test-clips K] [--json]\n"
          "Evaluates a saved model on the test part of the data set: accuracy, loss and the confusion matrix\n"
          "(rows: true class, columns: predicted); for labels per pixel also each class's IoU and the mean IoU.\n"
          "  --load FILE   a checkpoint from lamina train --save (required)\n"
          "  --data        as for train (default fashion-mnist)\n"
          "  --size, --cache, --skip-bad, --decode  an image folder's, as for train (--size: by default the\n"
          "                size the model was trained at, kept in its checkpoint; another one is refused)\n"
"  --reduce-zero-label, --label-map FILE  a mask folder's, as for train (give what training had)\n"
          "  --frames T, --frame-stride S  a video folder's clips (default: as the model was trained, kept in its\n"
          "                checkpoint; else 16 and 2)\n"
          "  --test-clips K  K clips of each video, evenly spaced over it (1 to 64; default 1: the middle clip):\n"
          "                a video's class is the argmax of its clips' softmax averaged, its loss the negative log\n"
          "                of that average's probability of its label; accuracy and loss are per video\n"
          "  --stream      decode an image or mask folder's test part batch by batch, a few ahead, in bounded\n"
          "                memory (automatic where it would take more than half of --max-memory, or 3/4 of\n"
          "                the memory available)\n"
          "  --max-memory BYTES  cap the memory lamina may take, as for train\n"
          "  --batch B     images per step (default 1000)\n"
          "  --device      auto|cpu|cuda (default auto)\n"
          "  --threads N   threads of the CPU work (default: LAMINA_THREADS, OMP_NUM_THREADS, else the\n"
          "                cores this process may use)\n"
          "  --json        one JSON object instead of text\n"
          "  --help        this text\n");
}

enum { O_DATA = 1, O_MODEL, O_EPOCHS, O_BATCH, O_OPT, O_LR, O_MOMENTUM, O_WD, O_DEVICE, O_SEED, O_SAVE, O_RESUME,
       O_LOAD, O_JSON, O_NOPROGRESS, O_MAXMEM, O_PROFILE, O_TRACE, O_STREAM, O_BUFFERS, O_PRECISION, O_GRAPH, O_HELP, O_THREADS,
       O_CLASSES, O_NORMALIZE, O_SMOOTHING, O_SCHEDULE, O_WARMUP, O_VALSPLIT, O_SAVEBEST, O_EARLYSTOP, O_LOG,
       O_SIZE, O_CACHE, O_SKIPBAD, O_AUGMENT, O_DECODE, O_GPUS, O_SYNCBN, O_BUCKET, O_REDUCE0, O_LABELMAP, O_MONITOR,
       O_FRAMES, O_FSTRIDE, O_TESTCLIPS };

static int parse(const char *cmd, int argc, char **argv, train_opts *o) {
  *o = (train_opts){.data = "fashion-mnist", .model = "cnn", .epochs = 5, .batch = 64, .opt_kind = LAM_OPT_ADAM,
                    .seed = 1, .progress = 1, .graph = 1};
  int is_eval = !strcmp(cmd, "eval");
  if (is_eval) o->batch = 1000;
  static const struct option longopts[] = {
      {"data", required_argument, 0, O_DATA},         {"model", required_argument, 0, O_MODEL},
      {"epochs", required_argument, 0, O_EPOCHS},     {"batch", required_argument, 0, O_BATCH},
      {"opt", required_argument, 0, O_OPT},           {"lr", required_argument, 0, O_LR},
      {"momentum", required_argument, 0, O_MOMENTUM}, {"weight-decay", required_argument, 0, O_WD},
      {"device", required_argument, 0, O_DEVICE},     {"seed", required_argument, 0, O_SEED},
      {"save", required_argument, 0, O_SAVE},         {"resume", required_argument, 0, O_RESUME},
      {"load", required_argument, 0, O_LOAD},         {"json", no_argument, 0, O_JSON},
      {"no-progress", no_argument, 0, O_NOPROGRESS},  {"help", no_argument, 0, O_HELP},
      {"max-memory", required_argument, 0, O_MAXMEM},  {"threads", required_argument, 0, O_THREADS},  {"profile", no_argument, 0, O_PROFILE},
      {"trace", required_argument, 0, O_TRACE},        {"stream", no_argument, 0, O_STREAM},
      {"buffers", required_argument, 0, O_BUFFERS},  {"precision", required_argument, 0, O_PRECISION},
      {"graph", required_argument, 0, O_GRAPH},      {"classes", required_argument, 0, O_CLASSES},
      {"normalize", required_argument, 0, O_NORMALIZE}, {"label-smoothing", required_argument, 0, O_SMOOTHING},
      {"augment", required_argument, 0, O_AUGMENT},
      {"lr-schedule", required_argument, 0, O_SCHEDULE}, {"warmup", required_argument, 0, O_WARMUP},
      {"val-split", required_argument, 0, O_VALSPLIT},   {"save-best", required_argument, 0, O_SAVEBEST},
      {"early-stop", required_argument, 0, O_EARLYSTOP}, {"log", required_argument, 0, O_LOG},
      {"size", required_argument, 0, O_SIZE},            {"cache", required_argument, 0, O_CACHE},
      {"skip-bad", no_argument, 0, O_SKIPBAD},       {"decode", required_argument, 0, O_DECODE},
      {"frames", required_argument, 0, O_FRAMES},     {"frame-stride", required_argument, 0, O_FSTRIDE},
      {"test-clips", required_argument, 0, O_TESTCLIPS},
      {"gpus", required_argument, 0, O_GPUS},         {"sync-bn", no_argument, 0, O_SYNCBN},
      {"bucket-mb", required_argument, 0, O_BUCKET},
      {"reduce-zero-label", no_argument, 0, O_REDUCE0}, {"label-map", required_argument, 0, O_LABELMAP},
      {"monitor", required_argument, 0, O_MONITOR},
      {0, 0, 0, 0}};
  opterr = 0;
  optind = 1;
  int c;
  long v;
  char *end;
  int li = 0;
  while ((c = getopt_long(argc, argv, ":", longopts, &li)) != -1) {
    /* eval takes only some of the options */
    if (is_eval && (c == O_MODEL || c == O_EPOCHS || c == O_OPT || c == O_LR || c == O_MOMENTUM || c == O_WD ||
                    c == O_SEED || c == O_SAVE || c == O_RESUME || c == O_NOPROGRESS || c == O_PROFILE ||
                    c == O_TRACE || c == O_BUFFERS || c == O_GRAPH ||
                    c == O_NORMALIZE || c == O_SMOOTHING || c == O_AUGMENT || c == O_SCHEDULE || c == O_WARMUP || c == O_VALSPLIT ||
                    c == O_SAVEBEST || c == O_EARLYSTOP || c == O_LOG || c == O_MONITOR))
      return cli_usage_error(cmd, "--%s is a 'lamina train' option, not one of eval's", longopts[li].name);
    if (!is_eval && c == O_LOAD) return cli_usage_error(cmd, "--load is for 'lamina eval'; to continue training use --resume");
    switch (c) {
      case O_DATA: o->data = optarg; break;
      case O_SIZE: {
        char tail;
        if (sscanf(optarg, "%dx%d%c", &o->images.h, &o->images.w, &tail) != 2 || o->images.h < 1 || o->images.w < 1 ||
            o->images.h > 4096 || o->images.w > 4096)
          return cli_usage_error(cmd, "--size: '%s' is not HxW (1 to 4096 each), e.g. 32x32", optarg);
        break;
      }
      case O_CACHE: o->images.cache = optarg; break;
      case O_REDUCE0: o->images.reduce_zero_label = 1; break;
      case O_LABELMAP:
        if (lam_label_map_read(optarg, o->label_map) != LAM_OK) {
          fprintf(stderr, "lamina %s: --label-map: %s\n", cmd, lam_last_error());
          return 1;
        }
        o->images.label_map = o->label_map;
        break;
      case O_SKIPBAD: o->images.skip_bad = 1; break;
      case O_FRAMES:
        if (cli_parse_int(cmd, "--frames", optarg, 1, 255, &v)) return EXIT_USAGE;
        o->images.frames = (int)v;
        break;
      case O_FSTRIDE:
        if (cli_parse_int(cmd, "--frame-stride", optarg, 1, 1000, &v)) return EXIT_USAGE;
        o->images.frame_stride = (int)v;
        break;
      case O_TESTCLIPS:
        if (cli_parse_int(cmd, "--test-clips", optarg, 1, LAM_MAX_TEST_CLIPS, &v)) return EXIT_USAGE;
        o->images.test_clips = (int)v;
        break;
      case O_DECODE:
        if (cli_parse_decode(cmd, optarg, &o->images.decoder)) return EXIT_USAGE;
        o->decode_set = 1;
        break;
      case O_MODEL: o->model = optarg, o->model_set = 1; break;
      case O_CLASSES:
        if (cli_parse_int(cmd, "--classes", optarg, 1, 255, &v)) return EXIT_USAGE;
        o->classes = (int)v;
        break;
      case O_NORMALIZE: o->normalize = optarg; break;
      case O_SMOOTHING: {
        double d = strtod(optarg, &end);
        if (end == optarg || *end || !(d >= 0 && d < 1))
          return cli_usage_error(cmd, "--label-smoothing: '%s' is not a number in [0, 1)", optarg);
        o->smoothing = d, o->smoothing_set = 1;
        break;
      }
      case O_AUGMENT:
        if (lam_augment_parse(optarg, &o->aug_pad, &o->aug_flip) != LAM_OK)
          return cli_usage_error(cmd, "--augment: %s", lam_last_error());
        break;
      case O_SCHEDULE: {
        lam_lr_schedule ls;
        if (lam_lr_schedule_parse(optarg, &ls) != LAM_OK) return cli_usage_error(cmd, "--lr-schedule: %s", lam_last_error());
        o->lr_schedule = optarg;
        break;
      }
      case O_WARMUP:
      case O_VALSPLIT: {
        double d = strtod(optarg, &end);
        int warm = c == O_WARMUP;
        if (end == optarg || *end || !(warm ? d >= 0 && d <= 100000 : d > 0 && d < 1))
          return cli_usage_error(cmd, warm ? "--warmup: '%s' is not a number of epochs (0 or more, fractions allowed)"
                                           : "--val-split: '%s' is not a fraction between 0 and 1 (e.g. 0.1)", optarg);
        if (warm) o->warmup = d, o->warmup_set = 1;
        else o->val_split = d;
        break;
      }
      case O_SAVEBEST: o->save_best = optarg; break;
      case O_LOG: o->log = optarg; break;
      case O_MONITOR:
        if (!strcmp(optarg, "loss")) o->monitor_miou = 0;
        else if (!strcmp(optarg, "miou")) o->monitor_miou = 1;
        else return cli_usage_error(cmd, "--monitor: '%s' is not loss or miou", optarg);
        break;
      case O_EARLYSTOP:
        if (cli_parse_int(cmd, "--early-stop", optarg, 1, 100000, &v)) return EXIT_USAGE;
        o->early_stop = (int)v;
        break;
      case O_EPOCHS:
        if (cli_parse_int(cmd, "--epochs", optarg, 1, 100000, &v)) return EXIT_USAGE;
        o->epochs = (int)v;
        break;
      case O_BATCH:
        if (cli_parse_int(cmd, "--batch", optarg, 1, 65536, &v)) return EXIT_USAGE;
        o->batch = (int)v, o->batch_set = 1;
        break;
      case O_OPT:
        if (lam_opt_parse(optarg, &o->opt_kind) != LAM_OK)
          return cli_usage_error(cmd, "--opt: '%s' is not an optimizer (use sgd, adam or adamw)", optarg);
        o->opt_set = 1;
        break;
      case O_LR:
      case O_MOMENTUM:
      case O_WD: {
        double d = strtod(optarg, &end);
        const char *name = c == O_LR ? "--lr" : c == O_MOMENTUM ? "--momentum" : "--weight-decay";
        if (end == optarg || *end) return cli_usage_error(cmd, "%s: '%s' is not a number", name, optarg);
        lam_opt bound = lam_opt_default(LAM_OPT_SGD); /* the library's bound, which Python's fit() shares */
        *(c == O_LR ? &bound.lr : c == O_MOMENTUM ? &bound.momentum : &bound.weight_decay) = (float)d;
        if (!(d <= LAM_OPT_MAX) || lam_opt_check(&bound) != LAM_OK)
          return cli_usage_error(cmd, "%s: '%s' is not a number from 0 to %g", name, optarg, LAM_OPT_MAX);
        if (c == O_LR) o->lr = d, o->lr_set = 1;
        else if (c == O_MOMENTUM) o->momentum = d, o->momentum_set = 1;
        else o->weight_decay = d, o->wd_set = 1;
        break;
      }
      case O_DEVICE:
        if (lam_device_parse(optarg, &o->device) != LAM_OK)
          return cli_usage_error(cmd, "--device: '%s' is not a device (use auto, cpu or cuda)", optarg);
        break;
      case O_SEED:
        if (cli_parse_u64(cmd, "--seed", optarg, &o->seed)) return EXIT_USAGE;
        o->seed_set = 1;
        break;
      case O_SAVE: o->save = optarg; break;
      case O_RESUME: o->resume = optarg; break;
      case O_LOAD: o->load = optarg; break;
      case O_JSON: o->json = 1; break;
      case O_STREAM:
        if (!o->stream) o->stream = 3;
        break;
      case O_PRECISION: {
        lam_status ps = lam_precision_parse(optarg, &o->precision);
        if (ps != LAM_OK) return cli_usage_error(cmd, "--precision: %s", lam_last_error());
        break;
      }
      case O_GRAPH:
        o->graph_set = 1;
        if (!strcmp(optarg, "on")) o->graph = 1;
        else if (!strcmp(optarg, "off")) o->graph = 0;
        else return cli_usage_error(cmd, "--graph: '%s' is not on or off", optarg);
        break;
      case O_BUFFERS:
        if (cli_parse_int(cmd, "--buffers", optarg, 2, 3, &v)) return EXIT_USAGE;
        o->stream = (int)v;
        break;
      case O_NOPROGRESS: o->progress = 0; break;
      case O_BUCKET: {
        if (is_eval) return cli_usage_error(cmd, "unknown option '--bucket-mb'");
        double d = strtod(optarg, &end);
        if (end == optarg || *end || !(d >= 0 && d <= 4096))
          return cli_usage_error(cmd, "--bucket-mb: '%s' is not a number of MiB from 0 to 4096", optarg);
        o->bucket_mb = d;
        break;
      }
      case O_SYNCBN:
        if (is_eval) return cli_usage_error(cmd, "unknown option '--sync-bn'");
        o->sync_bn = 1;
        break;
      case O_GPUS:
        if (is_eval) return cli_usage_error(cmd, "unknown option '--gpus'");
        if (cli_parse_int(cmd, "--gpus", optarg, 1, 1024, &v)) return EXIT_USAGE;
        o->gpus = (int)v;
        break;
      case O_THREADS:
        if (cli_parse_int(cmd, "--threads", optarg, 1, LAM_MAX_THREADS, &v)) return EXIT_USAGE;
        o->threads = (int)v;
        break;
      case O_PROFILE: o->profile = 1; break;
      case O_TRACE: o->trace = optarg, o->profile = 1; break;
      case O_MAXMEM:
        if (cli_parse_count(cmd, "--max-memory", optarg, (size_t)1 << 50, &o->max_memory)) return EXIT_USAGE;
        if (o->max_memory == 0) return cli_usage_error(cmd, "--max-memory: the cap must be more than 0 bytes");
        break;
      case O_HELP: is_eval ? eval_usage(stdout) : train_usage(stdout); return -1;
      case ':': return cli_usage_error(cmd, "%s needs a value", argv[optind - 1]);
      default: return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
    }
  }
  if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
  if ((o->images.reduce_zero_label || o->images.label_map) && !lam_dataset_mask_folder_layout(o->data))
    return cli_usage_error(cmd, "--reduce-zero-label and --label-map are for mask folders (DATA/train/images + "
                           "DATA/train/masks, DATA/img_dir + DATA/ann_dir, or Pascal VOC's), and '%s' is not one", o->data);
  if ((o->images.h || o->images.cache || o->images.skip_bad || o->decode_set) && !lam_dataset_is_image_folder(o->data))
    return cli_usage_error(cmd, "--size, --cache, --skip-bad and --decode are for image folders (DATA/train/CLASS/... or DATA/CLASS/..., "
                           "or a mask folder), "
                           "and '%s' is not one", o->data);
  if (o->images.test_clips > 1 && !lam_dataset_is_video_folder(o->data))
    return cli_usage_error(cmd, "--test-clips %d is for video folders (DATA/train/CLASS/NAME.mp4 ...), and '%s' is not "
                           "one", o->images.test_clips, o->data);
  if (o->gpus && o->device == LAM_DEVICE_CPU)
    return cli_usage_error(cmd, "--gpus %d trains on GPUs, and --device cpu asks for the CPU: CPU ranks start under "
                           "mpirun -np N", o->gpus);
  if (is_eval && !o->load) return cli_usage_error(cmd, "--load FILE is required (a checkpoint from lamina train --save)");
  if ((o->save_best || o->early_stop) && !o->val_split)
    return cli_usage_error(cmd, "%s chooses by the validation loss: give --val-split F (e.g. 0.1) too",
                           o->save_best ? "--save-best" : "--early-stop");
  if (o->monitor_miou && !o->val_split)
    return cli_usage_error(cmd, "--monitor miou follows the validation mean IoU: give --val-split F (e.g. 0.1) too");
  if (o->warmup >= o->epochs && !o->resume)
    return cli_usage_error(cmd, "--warmup %g does not fit in --epochs %d: the warm-up must end before the run does",
                           o->warmup, o->epochs);
  return 0;
}

/* What the CLI's lam_fit callbacks print from. */
typedef struct fit_state {
  const struct train_opts *o;
  lam_ctx *ctx;
  lam_model *m;
  lam_trainer *t;
  int val, show_lr, epochs; /* a validation part; the rate is printed; epochs reported so far */
  double t0;                /* the epoch's start (the progress line's ETA) */
} fit_state;

static void progress(void *user, int step, int steps, double loss, double ips) {
  fit_state *p = user;
  double elapsed = (cli_now_ms() - p->t0) / 1e3, eta = step ? elapsed * (steps - step) / step : 0;
  int width = 30, filled = steps ? width * step / steps : 0;
  char bar[64];
  for (int i = 0; i < width; i++) bar[i] = i < filled ? '#' : '.';
  bar[width] = '\0';
  fprintf(stderr, "\r  epoch %d/%d [%s] %3d%%  loss %.4f  %7.0f img/s  ETA %4.0fs ", lam_trainer_epochs_done(p->t) + 1,
          p->o->epochs, bar, steps ? 100 * step / steps : 0, loss, ips, eta);
  if (step == steps) fprintf(stderr, "\r%*s\r", 100, "");
  fflush(stderr);
}

static void print_memory(lam_ctx *ctx, lam_model *m, lam_trainer *t) {
  lam_model_memory mm;
  lam_mem_stats ms;
  if (lam_model_memory_get(m, t, &mm) != LAM_OK || lam_mem_stats_get(ctx, &ms) != LAM_OK) return;
  const double MB = 1e6;
  printf("  memory (%s): parameters %.2f MB, gradients %.2f MB, optimizer %.2f MB, activations %.2f MB (scratch "
         "%.2f MB), data %.2f MB; in use %.2f MB, reserved %.2f MB, peak %.2f MB\n",
         lam_device_str(lam_ctx_device(ctx)), mm.params / MB, mm.grads / MB, mm.optimizer / MB, mm.activations / MB,
         mm.scratch / MB, mm.data / MB, ms.in_use / MB, ms.reserved / MB, ms.peak / MB);
}

/* lam_fit's epoch callback: the epoch's line (the best so far starred), the data path's waits, the memory once. */
static int epoch_done(void *user, const lam_fit_epoch *r) {
  fit_state *p = user;
  const train_opts *o = p->o;
  p->epochs++;
  if (!o->json) {
    const lam_epoch_stats *es = &r->es;
    printf("epoch %d/%d  train loss %.4f  train acc %.2f%%  ", es->epoch, o->epochs, es->train_loss, 100 * es->train_acc);
    if (p->val) printf("val loss %.4f%s  val acc %.2f%%  ", r->val_loss, r->improved ? "*" : " ", 100 * r->val_acc);
    else printf("test acc %.2f%%  ", 100 * r->test_acc);
    if (isfinite(p->val ? r->val_miou : r->test_miou))
      printf("%s mIoU %.2f%%  ", p->val ? "val" : "test", 100 * (p->val ? r->val_miou : r->test_miou));
    if (p->show_lr) printf("lr %.3g  ", r->lr);
    if (isfinite(r->loss_scale)) printf("loss scale %.0f (%.0f steps skipped)  ", r->loss_scale, r->skipped_steps);
    printf("%.2f s  %.0f img/s\n", es->seconds, es->images_per_s);
    if (r->stream.buffers)
      printf("  streaming (%d pinned buffers; %s): the device waited for data %.2f ms (%.2f%% of the epoch), "
             "the loop for the loader %.2f ms\n",
             r->stream.buffers, r->stream.why, r->stream.data_wait_ms, 100 * r->stream.data_wait_ms / r->stream.epoch_ms,
             r->stream.loader_wait_ms);
    if (p->epochs == 1) print_memory(p->ctx, p->m, p->t);
    fflush(stdout);
  }
  p->t0 = cli_now_ms();
  return 0;
}

static lam_status print_profile(lam_trainer *t, FILE *f) {
  lam_prof_row rows[64];
  int n = 0, steps = 0;
  lam_status s = lam_trainer_profile_table(t, rows, 64, &n, &steps);
  if (s != LAM_OK) return s;
  double all = 0;
  for (int i = 0; i < n; i++) all += rows[i].total_ms;
  fprintf(f, "profile of %d training steps (%.3f ms a step), by op:\n", steps, steps ? all / steps : 0.0);
  fprintf(f, "  %-20s %8s %12s %12s %8s\n", "op", "calls", "total ms", "mean us", "% step");
  for (int i = 0; i < n; i++)
    fprintf(f, "  %-20s %8ld %12.3f %12.2f %7.1f%%\n", rows[i].name, rows[i].calls, rows[i].total_ms,
            rows[i].mean_ms * 1e3, 100 * rows[i].share);
  return LAM_OK;
}

/* SIGINT and SIGTERM during training: the first finishes the step in flight, saves (with --save) and
 * exits 130 or 143; a second SIGINT exits at once (130), removing a checkpoint's temporary file if a
 * save is being written. */
static volatile sig_atomic_t g_signal;
static void on_signal(int sig) {
  if (g_signal && sig == SIGINT) {
    lam_checkpoint_abort_cleanup();
    _exit(130);
  }
  g_signal = sig;
}
static void catch_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
}

static int fail(const char *cmd, const char *what) {
  fprintf(stderr, "lamina %s: %s%s%s\n", cmd, what ? what : "", what ? ": " : "", lam_last_error());
  return 1;
}

/* After a signal: the checkpoint (with --save) holds the place in the epoch; exit 128 + the signal. */
static int stopped(const train_opts *o, lam_model *m, lam_trainer *t) {
  int sig = (int)g_signal, step = lam_trainer_steps_in_epoch(t), epoch = lam_trainer_epochs_done(t);
  char where[96];
  if (step) snprintf(where, sizeof where, "after step %d of epoch %d", step, epoch + 1);
  else snprintf(where, sizeof where, "after epoch %d", epoch);
  const char *name = sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
  if (o->rank > 0) return 128 + sig; /* stopped with rank 0, after the same step; rank 0 says so and saves */
  if (!o->save) {
    fprintf(stderr, "lamina train: stopped by %s %s; nothing saved (give --save FILE to keep the place)\n", name,
            where);
  } else if (lam_checkpoint_save(o->save, m, t) != LAM_OK) {
    fprintf(stderr, "lamina train: stopped by %s %s, but saving failed: %s\n", name, where, lam_last_error());
  } else {
    fprintf(stderr, "lamina train: stopped by %s %s; saved %s: continue with --resume %s\n", name, where, o->save,
            o->save);
  }
  return 128 + sig;
}

/* Options taken but without effect here are said to be (on stderr, once): --graph on where the backend has
 * no graphs, --sync-bn and --bucket-mb in one process (no other rank to share statistics or sums with). */
static void note_ignored(const train_opts *o, const cli_ranks *rk, const lam_trainer *t) {
  int graph = 0;
  lam_trainer_graph(t, &graph);
  if (rk->rank != 0) return;
  if (o->graph_set && o->graph && !graph)
    fprintf(stderr, "lamina train: note: --graph on has no effect here: this backend has no CUDA graphs (the step runs "
                    "op by op)\n");
  if (o->sync_bn && rk->world == 1)
    fprintf(stderr, "lamina train: note: --sync-bn has no effect in one process: its BatchNorm statistics are already "
                    "the whole batch's (it is for ranks: --gpus N, mpirun)\n");
  if (o->bucket_mb > 0 && rk->world == 1)
    fprintf(stderr, "lamina train: note: --bucket-mb has no effect in one process: there are no gradients to sum "
                    "over ranks (it is for GPU ranks: --gpus N)\n");
}

/* --classes: raises the classes of both parts (each label must be below it). */
static int set_classes(const train_opts *o, lam_dataset *train, lam_dataset *test) {
  if (!o->classes) { /* both parts as many as the larger says */
    int k = train->classes > test->classes ? train->classes : test->classes;
    return lam_dataset_set_classes(train, k) != LAM_OK || lam_dataset_set_classes(test, k) != LAM_OK;
  }
  return lam_dataset_set_classes(train, o->classes) != LAM_OK || lam_dataset_set_classes(test, o->classes) != LAM_OK;
}

/* The model remembers the size its image folder was fitted to (its checkpoint's fit): eval and a resumed train
 * read the folder at that size unless --size is given, and one given that differs is a usage error (the model
 * takes that size only). Nothing to do for other data or a checkpoint without a size. */
static int fit_from_checkpoint(const char *cmd, train_opts *o, const char *ckpt) {
  int h = 0, w = 0;
  if (!lam_dataset_is_image_folder(o->data)) return 0;
  if (lam_checkpoint_fit(ckpt, &h, &w) != LAM_OK) return fail(cmd, NULL);
  if (!h) return 0;
  if (!o->images.h) {
    o->images.h = h, o->images.w = w;
    return 0;
  }
  if (o->images.h != h || o->images.w != w)
    return cli_usage_error(cmd, "--size %dx%d differs from the size the model was trained at, %dx%d (%s): leave --size "
                           "out to read the images at it", o->images.h, o->images.w, h, w, ckpt);
  return 0;
}

/* The model remembers its clips (its checkpoint's frames and frame stride): eval and a resumed train read a video
 * folder's clips so unless --frames or --frame-stride are given; --frames that differ from the model's is a usage
 * error (the model takes that many only). Nothing to do for other data. */
static int clip_from_checkpoint(const char *cmd, train_opts *o, const char *ckpt) {
  int frames = 1, stride = 0;
  if (!lam_dataset_is_video_folder(o->data)) return 0;
  if (lam_checkpoint_clip(ckpt, &frames, &stride) != LAM_OK) return fail(cmd, NULL);
  if (frames > 1 && o->images.frames && o->images.frames != frames)
    return cli_usage_error(cmd, "--frames %d differs from the clips the model was trained on, %d frames (%s): leave "
                           "--frames out to take its", o->images.frames, frames, ckpt);
  if (frames > 1 && !o->images.frames) o->images.frames = frames;
  if (stride && !o->images.frame_stride) o->images.frame_stride = stride;
  return 0;
}

/* "1020 bytes", "47.1 MB", "4.00 GB" (powers of 1000, as --max-memory reads them). */
static void bytes_str(size_t n, char *buf, size_t size) {
  if (n < 100000) snprintf(buf, size, "%zu bytes", n);
  else if (n < (size_t)10000000000ull) snprintf(buf, size, "%.1f MB", (double)n / 1e6);
  else snprintf(buf, size, "%.2f GB", (double)n / 1e9);
}

/* The host memory a set holds: its pixels and its labels. */
static size_t set_bytes(const lam_dataset *d) {
  if (!d || d->source) return 0; /* a streamed set holds a few batches, in the trainer's buffers */
  size_t labels = d->label_h > 1 || d->label_w > 1 ? (size_t)d->label_h * d->label_w : 1;
  return d->n * (lam_dataset_sample_bytes(d) + labels);
}

/* How an image or mask folder is read: --stream streams it from its files; else a part streams where its decoded
 * bytes would take more than half of --max-memory (the other half is the model's), or without a cap more than three
 * quarters of the memory the machine has available (lam_image_opts.memory_cap 0); the test part streams where the
 * training part does. */
static void stream_opts(train_opts *o) {
  o->images.stream = o->stream ? LAM_STREAM_ON : LAM_STREAM_AUTO;
  o->images.memory_cap = o->max_memory / 2;
}

/* --max-memory caps the memory lamina takes, and the data set it holds in host memory (the decoded images and their
 * labels) is part of it: a set over the cap is refused before any training, saying both sizes (it was left out,
 * and a 4 GB set trained under a 1 GB cap). On the CPU, where the set and the allocator share the machine's memory,
 * the allocator holds what the set leaves (lam_mem_hold). */
static int cap_data(const train_opts *o, lam_ctx *ctx, const lam_dataset *train, const lam_dataset *test,
                    const lam_dataset *val) {
  if (!o->max_memory) return 0;
  const size_t bytes = set_bytes(train) + set_bytes(test) + set_bytes(val);
  char have[32], cap[48] = "";
  bytes_str(bytes, have, sizeof have);
  if (o->max_memory >= 100000) bytes_str(o->max_memory, cap + 1, sizeof cap - 1), cap[0] = ' '; /* " 5.0 MB" */
  if (bytes >= o->max_memory) {
    fprintf(stderr, "lamina train: the data set '%s' takes %s of host memory (%zu training and %zu test images of %dx%dx%d "
            "with their labels), more than the memory cap of %zu bytes (--max-memory%s): raise the cap, or train on a "
            "smaller set%s\n", o->data, have, train->n + (val ? val->n : 0), test->n, train->c > 0 ? train->c : 1,
            train->h, train->w, o->max_memory, cap, lam_dataset_is_image_folder(o->data) ? " or smaller images (--size)" : "");
    return 1;
  }
  if (lam_ctx_device(ctx) == LAM_DEVICE_CPU && lam_mem_hold(ctx, bytes) != LAM_OK) return fail("train", "--max-memory");
  return 0;
}

/* --normalize's values for C channels: "default" (0.5 and 0.5), "auto" (the training set's statistics) or
 * "M1,M2,../S1,S2,.."; a usage error or 1 (said) when they cannot be had. */
static int normalization_of(const train_opts *o, const lam_dataset *train, int C, float *mean, float *std) {
  if (!o->normalize || !strcmp(o->normalize, "default")) {
    for (int c = 0; c < C; c++) mean[c] = 0.5f, std[c] = 0.5f;
    return 0;
  }
  if (!strcmp(o->normalize, "auto")) {
    if (lam_dataset_channel_stats(train, mean, std) != LAM_OK) return fail("train", "--normalize auto");
  } else if (lam_normalization_parse(o->normalize, C, mean, std) != LAM_OK) {
    return cli_usage_error("train", "--normalize: %s; or 'auto' or 'default'", lam_last_error());
  }
  return 0;
}

static int set_normalization(const train_opts *o, const lam_dataset *train, lam_model *m) {
  int C = train->c > 0 ? train->c : 1, rc;
  float mean[LAM_NORMALIZE_MAX_CHANNELS], std[LAM_NORMALIZE_MAX_CHANNELS];
  if (!o->normalize || !strcmp(o->normalize, "default")) return 0;
  if ((rc = normalization_of(o, train, C, mean, std)) != 0) return rc;
  if (lam_model_set_normalization(m, C, mean, std) != LAM_OK) return cli_usage_error("train", "--normalize: %s", lam_last_error());
  return 0;
}

/* "0.5,0.5,0.5/0.25,0.25,0.25" (buf of at least 32 * C bytes). */
static void normalization_str(int C, const float *mean, const float *std, char *buf, size_t size) {
  size_t k = 0;
  for (int i = 0; i < 2 * C && k < size; i++)
    k += (size_t)snprintf(buf + k, size - k, "%s%g", i == 0 ? "" : i == C ? "/" : ",", (double)(i < C ? mean[i] : std[i - C]));
}

/* --resume with settings that change how the run goes on. The optimizer's rate, momentum and weight decay and the
 * loss's label smoothing are applied, each said in notes (printed with the run's header: stdout, stderr under
 * --json) with the checkpoint's value it replaces: fine-tuning at a new rate is what a user means. --normalize is
 * refused where it differs from the checkpoint's: the model learned on inputs normalized so, and another
 * normalization changes what they mean. */
static int apply_resume(const train_opts *o, const lam_dataset *train, lam_model *m, lam_trainer *t, char *notes,
                        size_t size) {
  size_t k = 0;
#define SAY(...) (k += k < size ? (size_t)snprintf(notes + k, size - k, __VA_ARGS__) : 0)
  if (o->normalize) {
    const int C = train->c > 0 ? train->c : 1;
    float mean[LAM_NORMALIZE_MAX_CHANNELS], std[LAM_NORMALIZE_MAX_CHANNELS], hm[LAM_NORMALIZE_MAX_CHANNELS],
        hs[LAM_NORMALIZE_MAX_CHANNELS];
    int rc = normalization_of(o, train, C, mean, std);
    if (rc) return rc;
    if (lam_model_normalization(m, hm, hs) != LAM_OK) return fail("train", "--resume");
    if (memcmp(mean, hm, (size_t)C * sizeof *hm) || memcmp(std, hs, (size_t)C * sizeof *hs)) {
      char want[32 * LAM_NORMALIZE_MAX_CHANNELS], have[32 * LAM_NORMALIZE_MAX_CHANNELS];
      normalization_str(C, mean, std, want, sizeof want);
      normalization_str(C, hm, hs, have, sizeof have);
      return cli_usage_error("train", "--normalize %s (%s) differs from the normalization the checkpoint's model "
                             "learned with, %s (%s): another one changes what its inputs mean; leave --normalize out "
                             "to resume, or start a new run", o->normalize, want, have, o->resume);
    }
  }
  lam_opt opt;
  int batch = 0;
  lam_trainer_config(t, &opt, &batch);
  const lam_opt was = opt;
  if (o->lr_set) opt.lr = (float)o->lr;
  if (o->momentum_set) opt.momentum = (float)o->momentum;
  if (o->wd_set) opt.weight_decay = (float)o->weight_decay;
  if (lam_trainer_set_opt(t, &opt) != LAM_OK) return cli_usage_error("train", "--resume: %s", lam_last_error());
  const struct { int given; const char *name; float now, before; } said[] = {
      {o->lr_set, "--lr", opt.lr, was.lr},
      {o->momentum_set && opt.kind == LAM_OPT_SGD, "--momentum", opt.momentum, was.momentum},
      {o->wd_set, "--weight-decay", opt.weight_decay, was.weight_decay},
  };
  for (size_t i = 0; i < sizeof said / sizeof said[0]; i++)
    if (said[i].given && said[i].now != said[i].before)
      SAY("  %s %g replaces the checkpoint's %g\n", said[i].name, (double)said[i].now, (double)said[i].before);
  if (o->momentum_set && opt.kind != LAM_OPT_SGD)
    SAY("  note: --momentum is SGD's; the checkpoint's optimizer is %s, which does not use it\n",
        opt.kind == LAM_OPT_ADAM ? "adam" : "adamw");
  if (o->smoothing_set) {
    const float before = lam_model_label_smoothing(m);
    if (lam_model_set_label_smoothing(m, (float)o->smoothing) != LAM_OK)
      return cli_usage_error("train", "--label-smoothing: %s", lam_last_error());
    if ((float)o->smoothing != before)
      SAY("  --label-smoothing %g replaces the checkpoint's %g\n", o->smoothing, (double)before);
  }
#undef SAY
  return 0;
}

/* --resume takes the model, optimizer and batch from the checkpoint: a different one given is an error. */
static int check_resume(const train_opts *o, lam_ctx *ctx, const lam_dataset *train, lam_model *m, lam_trainer *t,
                        const char *spec) {
  lam_opt saved;
  int batch = 0;
  lam_trainer_config(t, &saved, &batch);
  if (o->batch_set && o->batch != batch)
    return cli_usage_error("train", "--batch %d differs from the checkpoint's batch %d (%s): leave --batch out to resume, "
                                    "or start a new run", o->batch, batch, o->resume);
  if (o->seed_set) /* it was ignored: the checkpoint's generator goes on, so a resumed run is the whole run */
    return cli_usage_error("train", "--seed: a resumed run goes on with the checkpoint's generator (%s: its shuffles, "
                           "dropout and augmentation continue as the whole run would): leave --seed out to resume, or "
                           "start a new run", o->resume);
  if (o->opt_set && o->opt_kind != saved.kind) {
    const char *names[] = {"sgd", "adam", "adamw"};
    return cli_usage_error("train", "--opt %s differs from the checkpoint's optimizer %s (%s): leave --opt out to resume",
                           names[o->opt_kind], names[saved.kind], o->resume);
  }
  if (o->model_set) { /* compare the specs as expanded (presets) */
    lam_model *given = NULL;
    int C = train->c > 0 ? train->c : 1;
    if (lam_model_create_clip(ctx, spec, train->t > 0 ? train->t : 1, C, train->h, train->w, 1, &given) != LAM_OK)
      return cli_usage_error("train", "--model: %s", lam_last_error());
    int same = !strcmp(lam_model_spec(given), lam_model_spec(m));
    if (!same)
      fprintf(stderr, "lamina train: --model \"%s\" differs from the checkpoint's model \"%s\" (%s): leave --model out "
                      "to resume, or start a new run\n", lam_model_spec(given), lam_model_spec(m), o->resume);
    lam_model_free(given);
    if (!same) return EXIT_USAGE;
  }
  return 0;
}

/* --lr-schedule and --warmup into the trainer: a new run takes them (spanning --epochs); a resumed one
 * keeps the checkpoint's, and one given that differs is refused, as --opt is. */
static int set_schedule(const train_opts *o, lam_trainer *t) {
  lam_lr_schedule want = {.kind = LAM_LR_CONSTANT, .step_epochs = 1, .gamma = 1.0}, have;
  if (o->lr_schedule) lam_lr_schedule_parse(o->lr_schedule, &want); /* checked while parsing */
  want.epochs = o->epochs;
  want.warmup_epochs = o->warmup;
  lam_trainer_lr_schedule(t, &have);
  if (!o->resume) {
    if (lam_trainer_set_lr_schedule(t, &want) != LAM_OK) return cli_usage_error("train", "%s", lam_last_error());
    return 0;
  }
  char a[48], b[48];
  lam_lr_schedule_str(&want, a, sizeof a);
  lam_lr_schedule_str(&have, b, sizeof b);
  if ((o->lr_schedule && strcmp(a, b)) || (o->warmup_set && o->warmup != have.warmup_epochs))
    return cli_usage_error("train", "--lr-schedule %s --warmup %g differs from the checkpoint's schedule %s, warm-up %g "
                           "(%s): leave them out to resume", a, o->warmup, b, have.warmup_epochs, o->resume);
  if ((have.kind == LAM_LR_COSINE || have.kind == LAM_LR_ONECYCLE) && o->epochs > have.epochs)
    fprintf(stderr, "lamina train: note: the checkpoint's %s schedule spans %d epochs; epochs %d to %d keep its last "
                    "rate\n", b, have.epochs, have.epochs + 1, o->epochs);
  return 0;
}

static int print_json(const train_opts *o, lam_ctx *ctx, lam_model *m, lam_trainer *t, int batch,
                      const lam_fit_epoch *rows, const lam_fit_result *fr) {
  const int n = fr->epochs;
  int graph = 0;
  lam_trainer_graph(t, &graph);
  lam_lr_schedule ls;
  char sched[48];
  lam_trainer_lr_schedule(t, &ls);
  lam_lr_schedule_str(&ls, sched, sizeof sched);
  json_t *root = json_object(), *epochs = json_array(), *mem = json_object();
  int bad = !root || !epochs || !mem;
  bad |= json_object_set_new(root, "device", cli_json_str(lam_device_str(lam_ctx_device(ctx))));
  bad |= json_object_set_new(root, "device_name", cli_json_str(lam_ctx_device_name(ctx)));
  bad |= json_object_set_new(root, "model", cli_json_str(lam_model_spec(m)));
  bad |= json_object_set_new(root, "params", json_integer((json_int_t)lam_model_param_count(m)));
  bad |= json_object_set_new(root, "batch", json_integer(batch));
  bad |= json_object_set_new(root, "data", cli_json_str(o->data));
  bad |= json_object_set_new(root, "precision", cli_json_str(lam_precision_str(o->precision)));
  bad |= json_object_set_new(root, "graph", json_boolean(graph));
  bad |= json_object_set_new(root, "lr_schedule", cli_json_str(sched));
  bad |= json_object_set_new(root, "warmup_epochs", json_real(ls.warmup_epochs));
  bad |= json_object_set_new(root, "classes", json_integer(lam_model_outputs(m)));
  if (lam_model_class_name(m, 0)) { /* an image or mask folder's class names, as the checkpoint keeps them */
    json_t *names = json_array();
    bad |= !names;
    for (int k = 0; lam_model_class_name(m, k) && !bad; k++)
      bad |= json_array_append_new(names, cli_json_str(lam_model_class_name(m, k)));
    bad |= json_object_set_new(root, "class_names", names);
  }
  if (o->val_split) bad |= json_object_set_new(root, "val_split", json_real(o->val_split));
  if (lam_dataset_is_image_folder(o->data)) { /* the training part's decoding */
    json_t *f = json_object();
    bad |= !f;
    bad |= json_object_set_new(f, "cache_hit", json_boolean(o->train_part.cache_hit));
    bad |= json_object_set_new(f, "decode_s", json_real(o->train_part.decode_s));
    bad |= json_object_set_new(f, "decoded_gpu", json_integer((json_int_t)o->train_part.decoded_gpu));
    bad |= json_object_set_new(f, "streamed", json_boolean(o->train_part.streamed));
    bad |= json_object_set_new(f, "part_bytes", json_integer((json_int_t)o->train_part.part_bytes));
    bad |= json_object_set_new(f, "replaced", json_integer((json_int_t)o->replaced));
    if (o->images.cache && *o->images.cache && o->video_hits + o->video_misses) { /* a video folder's cache */
      json_t *v = json_object();
      bad |= !v;
      bad |= json_object_set_new(v, "dir", cli_json_str(o->images.cache));
      bad |= json_object_set_new(v, "hits", json_integer((json_int_t)o->video_hits));
      bad |= json_object_set_new(v, "misses", json_integer((json_int_t)o->video_misses));
      bad |= json_object_set_new(f, "video_cache", v);
    }
    bad |= json_object_set_new(root, "image_folder", f);
  }
  for (int i = 0; i < n && !bad; i++) {
    const lam_fit_epoch *r = &rows[i];
    json_t *e = json_object();
    bad |= !e;
    bad |= json_object_set_new(e, "epoch", json_integer(r->es.epoch));
    bad |= json_object_set_new(e, "train_loss", cli_json_num(r->es.train_loss));
    bad |= json_object_set_new(e, "train_acc", cli_json_num(r->es.train_acc));
    if (o->val_split) {
      bad |= json_object_set_new(e, "val_loss", cli_json_num(r->val_loss));
      bad |= json_object_set_new(e, "val_acc", cli_json_num(r->val_acc));
    }
    bad |= json_object_set_new(e, "test_acc", cli_json_num(r->test_acc));
    if (isfinite(r->val_miou)) bad |= json_object_set_new(e, "val_miou", cli_json_num(r->val_miou));
    if (isfinite(r->test_miou)) bad |= json_object_set_new(e, "test_miou", cli_json_num(r->test_miou));
    bad |= json_object_set_new(e, "lr", cli_json_num(r->lr));
    bad |= json_object_set_new(e, "seconds", cli_json_num(r->es.seconds));
    bad |= json_object_set_new(e, "images_per_s", cli_json_num(r->es.images_per_s));
    bad |= json_object_set_new(e, "stream_buffers", json_integer(r->stream.buffers));
    bad |= json_object_set_new(e, "data_wait_ms", cli_json_num(r->stream.data_wait_ms));
    bad |= json_object_set_new(e, "loader_wait_ms", cli_json_num(r->stream.loader_wait_ms));
    if (isfinite(r->loss_scale)) {
      bad |= json_object_set_new(e, "loss_scale", cli_json_num(r->loss_scale));
      bad |= json_object_set_new(e, "skipped_steps", json_integer((json_int_t)r->skipped_steps));
    }
    bad |= json_array_append_new(epochs, e);
  }
  bad |= json_object_set_new(root, "epochs", epochs);
  bad |= json_object_set_new(root, "test_acc", cli_json_num(fr->test_acc));
  if (isfinite(fr->test_miou)) bad |= json_object_set_new(root, "test_miou", cli_json_num(fr->test_miou));
  size_t peak = 0;
  lam_host_memory(NULL, &peak);
  bad |= json_object_set_new(root, "host_peak_bytes", json_integer((json_int_t)peak));
  if (o->val_split) {
    bad |= json_object_set_new(root, "best_epoch", fr->best_epoch ? json_integer(fr->best_epoch) : json_null());
    bad |= json_object_set_new(root, "best_val_loss", cli_json_num(fr->best_loss));
    if (o->monitor_miou) bad |= json_object_set_new(root, "best_val_miou", cli_json_num(fr->best_miou));
    bad |= json_object_set_new(root, "monitor", cli_json_str(o->monitor_miou ? "miou" : "loss"));
    if (o->save_best) bad |= json_object_set_new(root, "best_test_acc", cli_json_num(fr->best_test_acc));
    bad |= json_object_set_new(root, "early_stopped", json_boolean(fr->stopped_early));
  }
  lam_model_memory mm = {0};
  lam_mem_stats ms = {0};
  lam_model_memory_get(m, t, &mm);
  lam_mem_stats_get(ctx, &ms);
  const char *names[] = {"params", "grads", "optimizer", "activations", "scratch", "data", "in_use", "reserved", "peak"};
  const size_t vals[] = {mm.params, mm.grads, mm.optimizer, mm.activations, mm.scratch, mm.data, ms.in_use, ms.reserved,
                         ms.peak};
  for (int i = 0; i < 9; i++) bad |= json_object_set_new(mem, names[i], json_integer((json_int_t)vals[i]));
  bad |= json_object_set_new(root, "memory", mem);
  if (bad) {
    json_decref(root);
    root = NULL;
  }
  return cli_json_print(root);
}

static int per_pixel_set(const lam_dataset *d) { return d->label_h > 1 || d->label_w > 1; }

/* LAMINA_SHARE_GPU=1: ranks may share a GPU (tests on a machine of one). */
static int share_gpu(void) {
  const char *share = getenv("LAMINA_SHARE_GPU");
  return share && !strcmp(share, "1");
}

/* --gpus N: N CUDA devices here (or fewer, shared: share_gpu). */
static int check_gpus(int n) {
  const char *why = NULL;
  int have = lam_cuda_device_count(&why);
  if (have == 0)
    return cli_usage_error("train", "--gpus %d: there is no CUDA device here (%s); CPU ranks start under mpirun -np N "
                           "... --device cpu", n, why);
  if (have < n && !share_gpu())
    return cli_usage_error("train", "--gpus %d: this machine has %d CUDA device%s: give --gpus %d or fewer", n, have,
                           have == 1 ? "" : "s", have);
  return 0;
}

/* The trainer's collective over the ranks: NCCL for GPU ranks (rank 0's id shared by the launcher's way),
 * MPI_Allreduce for CPU ranks. 0, or an exit status after saying why. */
static int set_ranks(const cli_ranks *rk, lam_ctx *ctx, lam_trainer *t) {
  lam_collective c = {.rank = rk->rank, .world = rk->world};
  unsigned char id[LAM_NCCL_ID_BYTES] = {0};
  if (lam_ctx_device(ctx) == LAM_DEVICE_CUDA) {
    if (share_gpu() && !getenv("NCCL_HOSTID")) {
      /* Ranks sharing a GPU (tests on a machine of one): NCCL refuses two ranks of one host on one
       * device, so each rank names a host of its own, and they talk over sockets. */
      char host[64];
      snprintf(host, sizeof host, "lamina-shared-gpu-rank-%d", rk->rank);
      setenv("NCCL_HOSTID", host, 1);
    }
    int ok = 1;
    if (rk->rank == 0 && lam_nccl_unique_id(id) != LAM_OK) {
      ok = 0;
      fail("train", "GPU ranks");
    }
    if (cli_ranks_share_id(rk, ok, id)) return 1;
    c.nccl_id = id;
  } else if (rk->mpi) {
    c.sum = cli_ranks_sum;
  } else {
    fprintf(stderr, "lamina train: %d ranks on the CPU: CPU ranks sum through MPI, and these were started by the %s "
            "launcher; start them with mpirun -np %d, or train on GPUs\n", rk->world, rk->launcher, rk->world);
    return EXIT_USAGE;
  }
  if (lam_trainer_set_collective(t, &c) != LAM_OK) return fail("train", "ranks");
  return 0;
}

static int train_run(int argc, char **argv, const cli_ranks *rk) {
  train_opts o;
  int rc = parse("train", argc, argv, &o);
  if (rc) return rc < 0 ? 0 : rc;
  if (o.gpus && rk->world > 1 && o.gpus != rk->world)
    return cli_usage_error("train", "--gpus %d, but the %s launcher started %d ranks: give one or the other",
                           o.gpus, rk->launcher, rk->world);
  if (o.gpus > 1 && rk->world == 1) { /* this process only starts the ranks */
    if ((rc = check_gpus(o.gpus)) != 0) return rc;
    return cli_ranks_spawn(o.gpus, argc, argv);
  }
  o.rank = rk->rank;
  if (rk->rank > 0) { /* rank 0 speaks and writes the files; the others train alike, silently */
    o.save = o.save_best = o.log = o.trace = NULL;
    o.progress = 0, o.json = 0;
    if (!freopen("/dev/null", "w", stdout)) return fail("train", "rank's stdout");
  }
  /* the files it will write, checked before any work that a bad path would throw away */
  if ((o.save && lam_output_check(o.save, "checkpoint (--save)", LAM_FILE_CHECKPOINT) != LAM_OK) ||
      (o.trace && lam_output_check(o.trace, "trace (--trace)", LAM_FILE_TRACE) != LAM_OK) ||
      (o.save_best && lam_output_check(o.save_best, "best model (--save-best)", LAM_FILE_CHECKPOINT) != LAM_OK) ||
      (o.log && lam_output_check(o.log, "log (--log)", LAM_FILE_LOG) != LAM_OK))
    return fail("train", NULL);
  lam_dataset *train = NULL, *test = NULL, *val = NULL;
  lam_ctx *ctx = NULL;
  lam_model *m = NULL;
  lam_trainer *t = NULL;
  lam_fit_epoch *rows = calloc((size_t)o.epochs, sizeof *rows);
  lam_fit_result fr = {0};
  char *spec = NULL, resume_notes[1024] = "";
  int ret = 1, batch = o.batch;
  if (!rows) {
    fprintf(stderr, "lamina train: out of host memory\n");
    goto out;
  }
  size_t skipped = 0;
  /* An image folder without a test part of its own (flat DIR/CLASS/..., or train/ alone): --val-split's held-out
   * part is its test part, measured as the validation part is. */
  const int layout = lam_dataset_image_folder_layout(o.data);
  const int no_test = layout == LAM_FOLDER_FLAT || layout == LAM_FOLDER_TRAIN_ONLY;
  if (no_test && !o.val_split) {
    ret = cli_usage_error("train", "image folder '%s' has no test part (%s): give --val-split F (e.g. 0.1) to hold out "
                          "that part of its images to validate and test on", o.data,
                          layout == LAM_FOLDER_FLAT ? "its class folders are all one part" : "train/ without test/ or val/");
    goto out;
  }
  if (o.resume && (ret = fit_from_checkpoint("train", &o, o.resume)) != 0) goto out;
  if (o.resume && (ret = clip_from_checkpoint("train", &o, o.resume)) != 0) goto out;
  ret = 1;
  stream_opts(&o);
  if (lam_dataset_load_opts(o.data, 1, &o.images, &train) != LAM_OK) {
    ret = fail("train", "loading the data");
    goto out;
  }
  skipped = o.images.skipped;
  if (o.images.missing) /* a Kinetics list's videos not there: said once, a line (to stderr under --json) */
    fprintf(o.json ? stderr : stdout, "  %s (left out)\n", o.images.missing_note);
  const int train_cached = o.images.cache_hit, train_written = o.images.cache_written;
  o.train_part = o.images;
  if (o.images.streamed) /* the test part too: evaluated resident it would be held twice (read, and uploaded) */
    o.images.stream = LAM_STREAM_ON;
  else if (o.images.memory_cap) /* the test part gets what the training part left of the cap */
    o.images.memory_cap = o.images.memory_cap > o.images.part_bytes ? o.images.memory_cap - o.images.part_bytes : 1;
  if (no_test) {
    test = train; /* the same set until the split below: its checks pass, its classes are the training part's */
  } else if (lam_dataset_load_opts(o.data, 0, &o.images, &test) != LAM_OK) {
    ret = fail("train", "loading the data");
    goto out;
  }
  if (!no_test) skipped += o.images.skipped; /* else o.images is the training part's, counted */
  if (!no_test && o.images.missing) fprintf(o.json ? stderr : stdout, "  %s (left out)\n", o.images.missing_note);
  if (skipped && !o.json)
    printf("  %zu %s file%s could not be %s, left out (--skip-bad)\n", skipped, train->t > 1 ? "video" : "image",
           skipped == 1 ? "" : "s", lam_dataset_mask_folder_layout(o.data) ? "paired with a mask or decoded" : "decoded");
  { /* the test part must fit the model the training part makes: said now, not after an epoch */
    int tc = train->c > 0 ? train->c : 1, ec = test->c > 0 ? test->c : 1;
    int tl = train->label_h > 1 || train->label_w > 1, el = test->label_h > 1 || test->label_w > 1;
    int tt = train->t > 0 ? train->t : 1, et = test->t > 0 ? test->t : 1;
    if (tt != et) {
      fprintf(stderr, "lamina train: the data set's parts differ: training clips have %d frames, test samples %d; both "
                      "parts of '%s' must have one clip length\n", tt, et, o.data);
      goto out;
    }
    if (tc != ec || train->h != test->h || train->w != test->w || tl != el) {
      fprintf(stderr, "lamina train: the data set's parts differ: training images are %dx%dx%d with %s, test images "
                      "%dx%dx%d with %s; both parts of '%s' must have one image size and one kind of label\n",
              tc, train->h, train->w, tl ? "a label per pixel" : "a label per image", ec, test->h, test->w,
              el ? "a label per pixel" : "a label per image", o.data);
      goto out;
    }
  }
  if (o.monitor_miou && !per_pixel_set(train)) {
    ret = cli_usage_error("train", "--monitor miou follows the validation mean IoU, which only a set of a label per "
                          "pixel has, and '%s' has a label per image: use --monitor loss", o.data);
    goto out;
  }
  if (set_classes(&o, train, test)) {
    ret = o.classes ? cli_usage_error("train", "--classes: %s", lam_last_error()) : fail("train", "the classes");
    goto out;
  }
  if (o.val_split) { /* after the classes: both parts keep the whole set's */
    lam_dataset *part = NULL;
    if (lam_dataset_split(train, o.val_split, LAM_VAL_SPLIT_SEED, &part, &val) != LAM_OK) {
      ret = fail("train", "--val-split");
      goto out;
    }
    lam_dataset_free(train);
    train = part;
    if (no_test) test = val;
  }
  if ((ret = cli_model_spec("train", o.model, &spec)) != 0) goto out;
  ret = 1;
  if (!o.threads && rk->world > 1 && !getenv("LAMINA_THREADS") && !getenv("OMP_NUM_THREADS")) {
    /* the ranks on this machine share its cores */
    lam_build_info bi;
    lam_build_info_get(&bi);
    int here = rk->local_world > 0 ? rk->local_world : rk->world, most = bi.omp_max_threads;
    o.threads = most / here > 1 ? most / here : 1;
  }
  if (rk->world > 1 && o.device != LAM_DEVICE_CPU && !getenv("LAMINA_CUDA_DEVICE")) {
    int gpus = lam_cuda_device_count(NULL); /* a GPU a rank on this machine, by local rank */
    if (gpus > 0) {
      char dev[16];
      snprintf(dev, sizeof dev, "%d", rk->local_rank % gpus);
      setenv("LAMINA_CUDA_DEVICE", dev, 1);
    }
  }
  if (lam_ctx_create(&ctx, o.device) != LAM_OK || (o.threads && lam_ctx_set_threads(ctx, o.threads) != LAM_OK) ||
      (o.max_memory && lam_mem_set_limit(ctx, o.max_memory) != LAM_OK) ||
      lam_ctx_set_precision(ctx, o.precision) != LAM_OK) {
    ret = fail("train", NULL);
    goto out;
  }
  if (cap_data(&o, ctx, train, test, val)) goto out;
  lam_opt opt = lam_opt_default(o.opt_kind);
  if (o.lr_set) opt.lr = (float)o.lr;
  opt.momentum = (float)o.momentum;
  if (o.wd_set) opt.weight_decay = (float)o.weight_decay;
  if (o.resume) {
    if (lam_checkpoint_load(ctx, o.resume, &m, train, &t) != LAM_OK) {
      ret = fail("train", "resuming");
      goto out;
    }
    if ((ret = check_resume(&o, ctx, train, m, t, spec)) != 0) goto out;
    if ((ret = apply_resume(&o, train, m, t, resume_notes, sizeof resume_notes)) != 0) goto out;
    int fh = 0, fw = 0;
    lam_model_fit(m, &fh, &fw);
    if (!fh && !lam_model_class_name(m, 0) && lam_dataset_is_image_folder(o.data) && /* from before version 6 */
        lam_model_set_fit(m, o.images.h, o.images.w, (const char *const *)train->class_names) != LAM_OK) {
      ret = fail("train", NULL);
      goto out;
    }
    /* the stride this run takes its clips at (the checkpoint's unless --frame-stride is given), kept from now on */
    if (lam_dataset_is_video_folder(o.data) &&
        lam_model_set_frame_stride(m, o.images.frame_stride ? o.images.frame_stride : 2) != LAM_OK) {
      ret = fail("train", NULL);
      goto out;
    }
    ret = 1;
    lam_trainer_config(t, &opt, &batch); /* the checkpoint's, with what --resume applied (its header prints it) */
  } else {
    lam_status s = lam_model_create_clip(ctx, spec, train->t > 0 ? train->t : 1, train->c > 0 ? train->c : 1, train->h,
                                         train->w, o.seed, &m);
    if (s == LAM_ERR_INVALID_ARG) { /* a bad --model is a bad value: usage */
      fprintf(stderr, "lamina train: --model: %s\n(see 'lamina train --help')\n", lam_last_error());
      ret = EXIT_USAGE;
      goto out;
    }
    if (s == LAM_OK && (ret = set_normalization(&o, train, m)) != 0) goto out;
    ret = 1;
    if (s == LAM_OK) s = lam_model_set_label_smoothing(m, (float)o.smoothing);
    /* the fit it remembers in its checkpoints: an image folder's --size and class names */
    if (s == LAM_OK && lam_dataset_is_image_folder(o.data))
      s = lam_model_set_fit(m, o.images.h, o.images.w, (const char *const *)train->class_names);
    if (s == LAM_OK && lam_dataset_is_video_folder(o.data)) /* and a video folder's frame stride (its frames: in_t) */
      s = lam_model_set_frame_stride(m, o.images.frame_stride ? o.images.frame_stride : 2);
    if (s != LAM_OK || lam_trainer_create(m, &opt, o.batch, o.seed, train, &t) != LAM_OK) {
      ret = fail("train", NULL);
      goto out;
    }
  }
  if ((ret = set_schedule(&o, t)) != 0) goto out;
  ret = 1;
  if (rk->world > 1 && (ret = set_ranks(rk, ctx, t)) != 0) goto out;
  ret = 1;
  if (o.sync_bn && rk->world > 1 && lam_trainer_set_sync_bn(t, 1) != LAM_OK) { /* one rank: its statistics are all */
    ret = fail("train", "--sync-bn");
    goto out;
  }
  if (o.bucket_mb > 0 && rk->world > 1 && lam_trainer_set_buckets(t, (size_t)(o.bucket_mb * 1048576.0)) != LAM_OK) {
    ret = fail("train", "--bucket-mb");
    goto out;
  }
  if ((o.aug_pad || o.aug_flip) && lam_model_set_augment(m, o.aug_pad, o.aug_flip) != LAM_OK) {
    fprintf(stderr, "lamina train: --augment: %s\n(see 'lamina train --help')\n", lam_last_error());
    ret = EXIT_USAGE;
    goto out;
  }
  lam_trainer_set_graph(t, o.graph);
  note_ignored(&o, rk, t);
  catch_signals();
  lam_trainer_set_stop(t, (const volatile int *)&g_signal);
  if (o.stream && lam_trainer_set_stream(t, o.stream) != LAM_OK) {
    ret = fail("train", "--stream");
    goto out;
  }
  int show = o.progress && !o.json && isatty(2);
  if (o.profile) {
    int steps_per_epoch = (int)((train->n + (size_t)batch - 1) / (size_t)batch);
    int first = steps_per_epoch > 110 ? 10 : 0; /* skip the warm-up steps where there are enough */
    if (lam_trainer_profile(t, first, steps_per_epoch - first < 100 ? steps_per_epoch - first : 100) != LAM_OK) {
      ret = fail("train", "profiling");
      goto out;
    }
  }
  lam_lr_schedule ls;
  lam_trainer_lr_schedule(t, &ls);
  const int show_lr = ls.kind != LAM_LR_CONSTANT || ls.warmup_epochs > 0;
  if (!o.json) {
    printf("lamina train: %s on %s\n", lam_model_spec(m), lam_ctx_device_name(ctx));
    int graph = 0;
    lam_trainer_graph(t, &graph);
    char frames[32] = "";
    if (train->t > 1) snprintf(frames, sizeof frames, "clips of %d frames of ", train->t);
    printf("  data %s: %zu training, %zu test %s%dx%dx%d, %d classes%s; %zu parameters; batch %d; %s; %s\n",
           o.data, train->n, test->n / (size_t)lam_dataset_clips(test), train->t > 1 ? frames : "images of ", train->c > 0 ? train->c : 1, train->h,
           train->w, train->classes,
           train->label_h > 1 || train->label_w > 1 ? " per pixel" : "", lam_model_param_count(m), batch,
           lam_precision_str(o.precision),
           graph ? "step in a CUDA graph" : "step op by op");
    if (lam_dataset_is_image_folder(o.data)) {
      char cache[4096];
      snprintf(cache, sizeof cache, o.images.cache ? "%s" : "%s/.lamina-cache", o.images.cache ? o.images.cache : o.data);
      const int masks = lam_dataset_mask_folder_layout(o.data) != LAM_MASKS_NONE;
      if (o.train_part.streamed && train->t > 1 && o.images.cache && *o.images.cache)
        printf("  video folder: streamed from its cache in %s, each video decoded into it when first read (a clip "
               "of %d frames, every %d-th, from each video an epoch)\n", o.images.cache, train->t,
               o.images.frame_stride ? o.images.frame_stride : 2);
      else if (o.train_part.streamed && train->t > 1)
        printf("  video folder: streamed, each clip decoded on the host threads as its batch is needed (a clip of %d "
               "frames, every %d-th, from each video an epoch; tested on %d clip%s a video)\n", train->t,
               o.images.frame_stride ? o.images.frame_stride : 2, lam_dataset_clips(test),
               lam_dataset_clips(test) > 1 ? "s" : "");
      else if (o.train_part.streamed)
        printf("  %s folder: streamed, each file decoded on the host threads as its batch is needed (decoded whole it "
               "would take %.1f MB%s)\n", masks ? "mask" : "image", (double)o.train_part.part_bytes / 1e6,
               o.stream ? "; --stream" : o.max_memory ? ", more than half of --max-memory" : ", more than memory has");
      else if (train_cached && o.images.cache_hit) printf("  image folder: read from its cache in %s\n", cache);
      else {
        char how[160] = "";
        const lam_image_opts *tp = &o.train_part;
        if (tp->decode_s > 0) {
          const double rate = (double)(train->n + skipped) / tp->decode_s;
          if (tp->decoded_gpu)
            snprintf(how, sizeof how, " (%.2f s, %.0f files/s; %zu JPEG files by nvJPEG on the GPU)", tp->decode_s,
                     rate, tp->decoded_gpu);
          else snprintf(how, sizeof how, " (%.2f s, %.0f files/s)", tp->decode_s, rate);
        }
        if (train_written && o.images.cache_written) printf("  image folder: decoded, kept in %s for the next run%s\n", cache, how);
        else printf("  %s folder: decoded, not cached%s\n", masks ? "mask" : "image", how);
      }
    }
    if (val) printf("  validation: %zu of the training images (--val-split %g), not trained on\n", val->n, o.val_split);
    if (show_lr) {
      char name[48];
      lam_lr_schedule_str(&ls, name, sizeof name);
      printf("  learning rate %g, %s schedule over %d epochs, warm-up %g epochs\n", (double)opt.lr, name, ls.epochs,
             ls.warmup_epochs);
    }
    if (o.resume && lam_trainer_steps_in_epoch(t))
      printf("  resumed from %s at step %d of epoch %d\n", o.resume, lam_trainer_steps_in_epoch(t) + 1,
             lam_trainer_epochs_done(t) + 1);
    else if (o.resume)
      printf("  resumed from %s after epoch %d\n", o.resume, lam_trainer_epochs_done(t));
    fputs(resume_notes, stdout);
    fflush(stdout);
  } else {
    fputs(resume_notes, stderr); /* stdout is the JSON document */
  }
  const char *monitored = o.monitor_miou ? "validation mean IoU" : "validation loss";
  fit_state fs = {.o = &o, .ctx = ctx, .m = m, .t = t, .val = val != NULL, .show_lr = show_lr, .t0 = cli_now_ms()};
  lam_fit_opts fo = lam_fit_opts_default();
  fo.epochs = o.epochs, fo.val = val, fo.test = test, fo.patience = o.early_stop;
  fo.monitor = o.monitor_miou ? LAM_FIT_MONITOR_MIOU : LAM_FIT_MONITOR_LOSS;
  fo.save = o.save, fo.save_best = o.save_best, fo.log = o.log, fo.resume_best = o.resume != NULL;
  fo.on_step = show ? progress : NULL, fo.on_epoch = epoch_done, fo.user = &fs, fo.history = rows;
  lam_status fit_s = lam_fit(t, &fo, &fr);
  if (fit_s == LAM_ERR_INTERRUPTED) {
    if (show) fprintf(stderr, "\n");
    ret = stopped(&o, m, t);
    goto out;
  }
  if (fit_s != LAM_OK) {
    ret = fail("train", NULL);
    goto out;
  }
  if (fr.stopped_early && !o.json)
    printf("early stop: the %s has not improved for %d epochs (best %.4f, epoch %d)\n", monitored, o.early_stop,
           o.monitor_miou ? fr.best_miou : fr.best_loss, fr.best_epoch);
  o.replaced = lam_dataset_replaced(train) + (test != train ? lam_dataset_replaced(test) : 0);
  for (int k = 0; k < 2; k++) { /* a video folder's cache, both parts (a split's share one) */
    size_t h = 0, mi = 0;
    if (k == 0 || (test != train && test != val)) lam_dataset_video_cache(k ? test : train, &h, &mi);
    o.video_hits += h, o.video_misses += mi;
  }
  if (o.replaced && !o.json)
    printf("  %zu time%s a sample could not be decoded and the next of its part took its place (--skip-bad)\n",
           o.replaced, o.replaced == 1 ? "" : "s");
  if (val && fr.epochs && !o.json) { /* lam_fit measured the test part once, for the model the run ends with */
    const lam_fit_epoch *last = &rows[fr.epochs - 1];
    if (isfinite(fr.test_miou))
      printf("test acc %.2f%%, mIoU %.2f%% (the model after epoch %d)\n", 100 * fr.test_acc, 100 * fr.test_miou,
             last->es.epoch);
    else printf("test acc %.2f%% (the model after epoch %d)\n", 100 * fr.test_acc, last->es.epoch);
    if (o.save_best && fr.best_epoch)
      printf("best epoch %d (%s %.4f): test acc %.2f%%, saved %s\n", fr.best_epoch, monitored,
             o.monitor_miou ? fr.best_miou : fr.best_loss, 100 * fr.best_test_acc, o.save_best);
    else if (o.save_best && fr.resumed_best)
      printf("the best model stays %s, from before --resume (%s %.4f)\n", o.save_best, monitored,
             o.monitor_miou ? fr.best_miou : fr.best_loss);
  }
  if (o.profile && print_profile(t, o.json ? stderr : stdout) != LAM_OK) {
    ret = fail("train", "the profile");
    goto out;
  }
  if (o.trace) {
    if (lam_trainer_profile_trace(t, o.trace) != LAM_OK) {
      ret = fail("train", NULL);
      goto out;
    }
    if (!o.json) printf("trace written to %s (open it in Perfetto: ui.perfetto.dev)\n", o.trace);
  }
  if (o.json) {
    if (print_json(&o, ctx, m, t, batch, rows, &fr)) goto out;
  } else if (o.save) {
    printf("saved %s\n", o.save);
  }
  ret = 0;
out:
  lam_trainer_free(t);
  lam_model_free(m);
  lam_ctx_free(ctx);
  if (test != train && test != val) lam_dataset_free(test); /* an image folder without a test part: one of them */
  lam_dataset_free(train);
  lam_dataset_free(val);
  free(rows);
  free(spec);
  return ret;
}

int cmd_train(int argc, char **argv) {
  cli_ranks rk;
  int rc = cli_ranks_start("train", &rk);
  if (rc) return rc;
  rc = train_run(argc, argv, &rk);
  cli_ranks_finish(&rk, rc);
  return rc;
}

int cmd_eval(int argc, char **argv) {
  train_opts o;
  int rc = parse("eval", argc, argv, &o);
  if (rc) return rc < 0 ? 0 : rc;
  lam_dataset *test = NULL;
  lam_ctx *ctx = NULL;
  lam_model *m = NULL;
  uint64_t *conf = NULL;
  int ret = 1;
  if ((ret = fit_from_checkpoint("eval", &o, o.load)) != 0) goto out;
  if ((ret = clip_from_checkpoint("eval", &o, o.load)) != 0) goto out;
  ret = 1;
  stream_opts(&o);
  if (lam_dataset_load_opts(o.data, 0, &o.images, &test) != LAM_OK) {
    ret = fail("eval", "loading the data");
    goto out;
  }
  if (o.images.skipped && !o.json)
    printf("%zu %s file%s could not be decoded, left out (--skip-bad)\n", o.images.skipped,
           test->t > 1 ? "video" : "image", o.images.skipped == 1 ? "" : "s");
  if (o.images.missing) fprintf(o.json ? stderr : stdout, "%s (left out)\n", o.images.missing_note);
  if (lam_ctx_create(&ctx, o.device) != LAM_OK || (o.threads && lam_ctx_set_threads(ctx, o.threads) != LAM_OK) ||
      lam_checkpoint_load(ctx, o.load, &m, NULL, NULL) != LAM_OK) {
    ret = fail("eval", NULL);
    goto out;
  }
  if (lam_dataset_set_classes(test, lam_model_outputs(m)) != LAM_OK) { /* the model's classes, if the labels fit */
    ret = fail("eval", NULL);
    goto out;
  }
  int C = test->classes;
  conf = calloc((size_t)C * C, sizeof *conf);
  double acc = 0, loss = 0;
  if (!conf || lam_evaluate(m, test, o.batch, &acc, &loss, conf) != LAM_OK) {
    ret = fail("eval", NULL);
    goto out;
  }
  int per_pixel = per_pixel_set(test);
  const int clips = lam_dataset_clips(test); /* a video folder's test clips a video: counted per video */
  double *iou = calloc((size_t)C, sizeof *iou), miou = 0;
  int nvalid = 0;
  if (iou) miou = lam_confusion_iou(conf, C, iou, &nvalid); /* classes absent from both are left out */
  if (o.json) {
    json_t *root = json_object(), *rowsj = json_array(), *ious = per_pixel && iou ? json_array() : NULL;
    int bad = !root || !rowsj || (per_pixel && iou && !ious);
    bad |= json_object_set_new(root, "device", cli_json_str(lam_device_str(lam_ctx_device(ctx))));
    bad |= json_object_set_new(root, "model", cli_json_str(lam_model_spec(m)));
    bad |= json_object_set_new(root, "n", json_integer((json_int_t)(test->n / (size_t)clips))); /* videos, of clips */
    if (clips > 1) bad |= json_object_set_new(root, "test_clips", json_integer(clips));
    bad |= json_object_set_new(root, "accuracy", cli_json_num(acc));
    bad |= json_object_set_new(root, "loss", cli_json_num(loss));
    if (ious) {
      bad |= json_object_set_new(root, "mean_iou", cli_json_num(miou));
      for (int k = 0; k < C; k++) bad |= json_array_append_new(ious, iou[k] >= 0 ? json_real(iou[k]) : json_null());
      bad |= json_object_set_new(root, "iou", ious);
      if (lam_model_class_name(m, 0)) { /* the names the IoU's classes have, where the model keeps them */
        json_t *names = json_array();
        bad |= !names;
        for (int k = 0; k < C && !bad; k++)
          bad |= json_array_append_new(names, lam_model_class_name(m, k) ? cli_json_str(lam_model_class_name(m, k))
                                                                         : json_null());
        bad |= json_object_set_new(root, "class_names", names);
      }
    }
    for (int r = 0; r < C && !bad; r++) {
      json_t *row = json_array();
      bad |= !row;
      for (int c = 0; c < C && !bad; c++) bad |= json_array_append_new(row, json_integer((json_int_t)conf[(size_t)r * C + c]));
      bad |= json_array_append_new(rowsj, row);
    }
    bad |= json_object_set_new(root, "confusion", rowsj);
    if (bad) json_decref(root), root = NULL;
    if (cli_json_print(root)) {
      free(iou);
      goto out;
    }
  } else {
    printf("lamina eval: %s on %s\n", lam_model_spec(m), lam_ctx_device_name(ctx));
    char what[64] = "images";
    if (lam_dataset_is_video_folder(o.data)) snprintf(what, sizeof what, "videos (%d clip%s each)", clips, clips > 1 ? "s" : "");
    printf("  %zu test %s: %saccuracy %.2f%%, loss %.4f\n", test->n / (size_t)clips, what, per_pixel ? "pixel " : "",
           100 * acc, loss);
    if (per_pixel && iou) {
      printf("  IoU per class:");
      for (int k = 0; k < C; k++) { /* by name where the model keeps its classes' names (a mask folder's) */
        const char *name = lam_model_class_name(m, k);
        if (name) printf(iou[k] >= 0 ? " %d %s:%.3f" : " %d %s:-", k, name, iou[k]);
        else printf(iou[k] >= 0 ? " %d:%.3f" : " %d:-", k, iou[k]);
      }
      printf("\n  mean IoU %.4f (over %d classes present)\n", miou, nvalid);
    }
    printf("  confusion (rows: true class, columns: predicted)\n        ");
    for (int c = 0; c < C; c++) printf("%6d", c);
    printf("\n");
    for (int r = 0; r < C; r++) {
      printf("  %4d  ", r);
      for (int c = 0; c < C; c++) printf("%6llu", (unsigned long long)conf[(size_t)r * C + c]);
      printf("\n");
    }
  }
  free(iou);
  ret = 0;
out:
  free(conf);
  lam_model_free(m);
  lam_ctx_free(ctx);
  lam_dataset_free(test);
  return ret;
}
