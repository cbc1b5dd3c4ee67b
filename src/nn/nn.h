/* nn.h — the model's internals: a graph of nodes over named tensors, the op table every node kind
 * fills in (src/nn/ops/, one file per op family), the planner's arena, the flat buffers (parameters,
 * gradients, optimizer state, BatchNorm's running statistics) and the trainer's hooks. Ops are
 * written once over the backend primitives (prims.h); only the primitives have CPU and CUDA twins. */
#ifndef LAMINA_NN_H
#define LAMINA_NN_H

#include "../internal.h"

#define NN_MAX_NODES 256
#define NN_MAX_IN 2
#define NN_NAME_LEN 32
#define NN_MAX_SAMPLE 2147483647ull        /* values of one tensor per sample: the kernels index in 32 bits */
#define NN_MAX_PARAMS (1ull << 40)         /* parameters of a model: far above any memory, far below overflow */

/* A tensor per sample: (c, h, w); a batch of B lies in memory as the model's format says (m->fmt: (B, c, h, w),
 * or (B, h, w, c) in NHWC; float32 or bfloat16). */
typedef struct nn_tensor {
  char name[NN_NAME_LEN]; /* the spec's label, "input" for the model's input, else "" */
  int c, h, w;
  int t;         /* frames per sample: a model of clips' frames before its tpool (each frame a row of the batch,
                  * B*t rows), 1 after it and in a model of images */
  int producer;  /* the node that writes it; -1: the model's input (m->x) */
  int view_of;   /* -1, or the tensor whose memory this one is (flatten in NCHW: a new shape, no copy) */
  int need_grad; /* some parameter lies upstream: backward computes its gradient */
  int flat;      /* made flat by flatten or dense: no image ops after it */
  int fused_away; /* written by nobody: a fused node runs through it (conv -> relu -> maxpool) */
  void *data, *grad; /* (B, c, h, w) in the model's format, in the arena, set by the planner (views share their
                       * base's) */
} nn_tensor;

static inline size_t nn_size(const nn_tensor *t) { return (size_t)t->c * t->h * t->w; } /* per frame */
/* Values of a batch of B samples: every frame of each. */
static inline size_t nn_batch_size(const nn_tensor *t, int B) { return (size_t)B * t->t * nn_size(t); }

struct lam_model;
struct nn_node;
struct nn_parse;

/* An op kind. parse reads the node's words (after the name) and sets its attributes, its output shape
 * and its parameter counts from its input's shape, or returns a spec error; the rest are optional
 * (NULL: nothing to do). */
typedef struct nn_op {
  const char *name, *fwd_mark, *bwd_mark; /* "relu", "relu.fwd", "relu.bwd" (NN_NAMES) */
  lam_status (*parse)(struct nn_parse *p, struct lam_model *m, struct nn_node *n);
  /* PyTorch's default initialization of the node's parameters (host copy of the flat buffer) and state. */
  void (*init)(const struct lam_model *m, const struct nn_node *n, void *rng, float *params, float *state);
  lam_status (*fwd)(struct lam_model *m, struct nn_node *n, int B, int train);
  /* Gradients: += into the flat gradient buffer; each input that needs one gets it written (or, where
   * nn_din says so, added). */
  lam_status (*bwd)(struct lam_model *m, struct nn_node *n, int B);
  /* Bytes per batch of B that forward saves for backward (the node's aux buffer), and floats of the
   * shared scratch its forward or backward needs at batch B. */
  size_t (*aux_bytes)(const struct lam_model *m, const struct nn_node *n, int B);
  size_t (*scratch_floats)(const struct lam_model *m, const struct nn_node *n, int B);
  /* Multiply-adds per sample of the forward (lamina model's FLOPs are twice this). */
  double (*macs)(const struct lam_model *m, const struct nn_node *n);
  unsigned flags;
  /* What users read of it (lam_model_layers: the grammar in `lamina model --help`, spec errors): its words in a
   * spec ("conv OUT K [stride S] [pad P] [nobias]") and a line on what it does. */
  const char *usage, *about;
  /* Its settings as `lamina model` shows them after its name ("k3 s1 p1"), into buf; NULL: none. */
  void (*describe)(const struct lam_model *m, const struct nn_node *n, char *buf, size_t size);
  /* Its weight's shape as PyTorch's layer holds it (safetensors' "i.weight"), and the rank; NULL: no parameters.
   * torch_stats: BatchNorm's running_mean, running_var and num_batches_tracked are in the files too. */
  int (*torch_weight)(const struct lam_model *m, const struct nn_node *n, int64_t shape[4]);
  int torch_stats;
  /* The primitives its forward and backward may call (NN_PRIMS), which nn_graph_finish asks the backend about. */
  const int *prims;
} nn_op;
/* A list of LAM_PRIM_* ids for nn_op.prims and nn_fusion.prims, ended by -1. NN_RANKED marks one called only while
 * BatchNorm is synchronized over ranks (lam_trainer_set_sync_bn). */
#define NN_PRIMS(...) ((const int[]){__VA_ARGS__, -1})
#define NN_RANKED 0x10000
#define NN_NAMES(s) .name = s, .fwd_mark = s ".fwd", .bwd_mark = s ".bwd"
enum {
  NN_IN_BWD = 1,   /* backward reads the input's data */
  NN_OUT_BWD = 2,  /* backward reads the output's data */
  NN_VIEW = 4,     /* the output is the input's memory in a new shape (where the format allows: nn_node.view) */
  NN_FLAT_OK = 8,  /* takes a flat input (c, 1, 1) */
  NN_OWN_MARKS = 16, /* marks its parts for the profiler itself */
  NN_ADDS_GRAD = 32, /* backward adds into an input's gradient itself where nn_adds says so (no temporary) */
  NN_ACT = 64,       /* an activation (act_fwd/act_bwd with n->a.act): BatchNorm may run it fused */
};

/* How a node runs: on its own; a conv with the relu and maxpool after it (fused after the GEMM, or as a
 * direct convolution at the model's input); a BatchNorm with the activation after it. */
enum { NN_FUSE_NONE = 0, NN_FUSE_POOL, NN_FUSE_DIRECT, NN_FUSE_ACT };

/* A fusion: nodes in a row that the first of them runs as one step. graph.c's fuse pass asks each fusion's match
 * of every node; the drivers run a matched node through fwd and bwd. */
typedef struct nn_fusion {
  const char *name, *fwd_mark, *bwd_mark; /* the profiler's marks (NULL: its steps mark their parts) */
  int kind;                               /* NN_FUSE_*: what nn_node.fuse says of a node that runs it */
  /* Whether node i heads the pattern in this model: the nodes after it that it runs, in order (the last is the
   * tail, whose output is the step's), and how many; 0: it does not. */
  int (*match)(const struct lam_model *m, int i, int absorbed[2]);
  /* Choices once matched (the conv block's direct path); NULL: none. */
  void (*setup)(struct lam_model *m, struct nn_node *n);
  lam_status (*fwd)(struct lam_model *m, struct nn_node *n, int B, int train);
  lam_status (*bwd)(struct lam_model *m, struct nn_node *n, int B);
  const int *prims; /* what its fwd and bwd may call (NN_PRIMS) */
} nn_fusion;

typedef struct nn_node {
  const nn_op *op;
  int in[NN_MAX_IN], nin; /* input tensors */
  int out;                /* output tensor */
  int word;               /* the spec word that names it, for messages */
  /* The op's own attributes, set by its parse: the member named after it, read by its op file alone (and by a
   * fusion that runs the node: BatchNorm's reads its activation's act). */
  union {
    struct { int oc, k, stride, pad, nobias; } conv; /* conv, convt: outputs, kernel, stride, padding, no bias */
    struct { int oc; } dense;                        /* outputs */
    struct { int k, stride; } pool;                  /* maxpool, avgpool: window, stride */
    struct { int f; } upsample;                      /* factor */
    struct { int max; } tpool;                       /* max (1) or mean (0) over the frames */
    struct { int kind; float alpha; } act;           /* relu, tanh, ...: LAM_ACT_*; leakyrelu's slope */
    struct { float p; } dropout;                     /* probability of a zero */
    struct { float eps, momentum; } bn;
    struct { int groups; float eps; } groupnorm;     /* groupnorm, layernorm (1 group) */
  } a;
  size_t w_off, nw, b_off, nb; /* weight and bias (BatchNorm: gamma and beta) in the flat buffers */
  size_t s_off, ns;            /* state (BatchNorm: running mean and var) in m->state */
  /* planned */
  void *aux;          /* saved for backward (im2col, argmax, BatchNorm's mean and invstd, dropout's mask) */
  int accum[NN_MAX_IN]; /* the gradient of input i is added: a later reader wrote it first */
  void *gtmp[NN_MAX_IN]; /* where input i's gradient goes first when it is added by an op that cannot add itself
                          * (accum and not nn_adds): planned in the arena for the node's backward only */
  /* fusion */
  int fuse;      /* NN_FUSE_*: which fusion, and for a conv block whether direct */
  const nn_fusion *fusion; /* the fused step this node runs (NULL: its op's own) */
  int tail;      /* the node a fused node runs after itself: a fused conv's maxpool (its output and argmax are the
                  * block's), a fused BatchNorm's activation (its output is the pair's) */
  int absorbed;  /* run by another node's fused step (fused_by): skipped */
  int fused_by;
  const uint8_t *fixed_mask; /* dropout: a mask given by a test instead of drawn (lam_model_set_dropout_mask) */
  int keep_input; /* backward reads the input's data (besides NN_IN_BWD ops: a conv on its own) */
  int view;       /* an NN_VIEW op that is a view in the model's format (flatten of an image in NHWC is not) */
  int inplace;    /* an activation that writes over its input, and its input's gradient over its own */
  /* A conv whose output a training BatchNorm normalizes may compute that BatchNorm's statistics (m->conv_stats):
   * stats_for (on the conv) and stats_from (on the BatchNorm) are the other node's index + 1, else 0. The sums
   * (sum and sum of squares per channel) are the conv's aux; stats_one_pass: its last forward computed them in
   * the conv's own kernel (cuDNN's GenStats), not in a pass after it. */
  int stats_for, stats_from, stats_one_pass;
} nn_node;

struct lam_model {
  lam_ctx *ctx;
  char spec[4096];         /* as given, presets expanded */
  int in_c, in_h, in_w;
  int in_t;                /* frames per sample (lam_model_create_clip), 1 for images */
  int nnodes, ntensors;
  nn_node node[NN_MAX_NODES];
  nn_tensor tensor[NN_MAX_NODES + 1]; /* tensor 0 is the input */
  int output;              /* the last node's output tensor: the logits (classes, h, w) */
  size_t nparams, nstate;
  float *params, *grads;   /* flat, backend memory */
  uint16_t *params_lo;     /* bf16/fp16 precision: weights rounded to 16 bits for the GEMMs, refreshed at every
                            * forward from params (the fp32 master copy); same offsets */
  float *state;            /* BatchNorm's running statistics (flat; not optimized) */
  float *opt_m, *opt_v;    /* optimizer state (momentum / Adam moments), allocated at the first step */
  lam_opt_kind opt_kind;   /* what opt_m/opt_v hold */
  long opt_step;            /* optimizer steps run (with loss scaling, skipped ones too: the draws count them) */
  const float *lscale;      /* the trainer's loss scale (backend memory) while it queues a step; else NULL */
  uint64_t seed;           /* dropout's masks: the model's seed, the trainer's while a trainer runs it */
  lam_norm norm;           /* of the uint8 pixels, per channel (lam_model_set_normalization) */
  lam_fmt fmt;             /* how the activations and their gradients lie (nn_choose_fmt; the graph's passes and
                            * the plan are made for it) */
  int layout;              /* LAMINA_LAYOUT: 0 auto (nn_choose_fmt), 1 nchw, 2 nhwc */
  int training;            /* lam_model_forward's mode (lam_model_set_train) */
  float smoothing;         /* the loss's label smoothing */
  int fit_h, fit_w;        /* the size its image folder was fitted to (--size; 0, 0: none), kept in checkpoints */
  int fit_stride;          /* the frame stride of its video folder's clips (--frame-stride; 0: none), kept too */
  char **class_names;      /* its classes' names (lam_names_copy's block; NULL: none), kept in checkpoints */
  int aug_pad, aug_flip;   /* training's augmentation in the batch gather (lam_model_set_augment) */
  /* Batch buffers */
  int cap;                 /* batch capacity of the buffers below */
  void *x;                 /* input (B, in_c, in_h, in_w), in the model's format */
  float *x32, *logits32;   /* in another format than NCHW float32: the host API's input and logits as NCHW
                            * float32, converted from and to x and the output tensor; made at the host API's
                            * first use (training never needs them), else NULL */
  uint8_t *y;              /* labels of the batch (backend memory), label_size each */
  size_t label_size;       /* labels per sample: 1, or h*w of the output (per-pixel) */
  float *count;            /* backend memory: labels counted in the batch (the loss's mean) */
  void *arena;             /* activations, gradients and saved buffers, placed by liveness (plan.c) */
  size_t arena_bytes;
  float *scratch;          /* shared scratch of the ops (max over nodes of scratch_floats) */
  size_t scratch_bytes;
  lam_precision plan_precision; /* the precision the buffers were planned for (a conv's needs depend on it) */
  float *stats;            /* [loss sum, correct, counted]: accumulated on the device, read rarely */
  int32_t *rng_ctr;        /* backend memory: dropout's step counter ([1] counts training forwards); [3] counts
                            * the training steps that augmented their batch ([2] unused) */
  uint8_t *pred;           /* argmax per label of the last forward */
  size_t batch_bytes;      /* backend memory held by the batch buffers above */
  size_t planned_bytes;    /* the arena at the capacity: what the plan needs */
  int fuse;                /* conv -> relu -> maxpool: 0 op by op, 1 fused after the GEMM, 2 also direct at the
                            * input, 3 (default) direct where the backend prefers it (LAMINA_FUSE) */
  int conv_im2col;         /* LAMINA_CONV=im2col: a conv on its own is im2col + GEMM too, not conv2d (to compare) */
  int conv_stats;          /* lam_model_options.conv_stats (LAMINA_CONV_STATS): which convs sum the next BatchNorm's
                            * statistics */
  unsigned gen;            /* bumped whenever buffers a captured step uses move (a graph of them is then stale) */
  struct lam_prof *prof;   /* when profiling: a mark after every op (nn/prof.h) */
  /* Sync BN (lam_trainer_set_sync_bn) where sync_sum is set: a training BatchNorm's statistics, and its
   * backward's sums, are those of all ranks; sync_sum sums n floats (backend memory) over the ranks, each
   * rank's times weight, on the model's queue. sync_batch: the global batch of the step (the trainer sets it
   * before each). The BatchNorm is then not fused with its activation (its backward would need the
   * activation's sums). */
  lam_status (*sync_sum)(void *user, float *x, size_t n, float weight);
  void *sync_user;
  size_t sync_batch;
  /* Buckets (lam_trainer_set_buckets): after a node's backward, grad_ready(grad_user, its first parameter's
   * offset) — every gradient from there up is final. NULL: not called. */
  lam_status (*grad_ready)(void *user, size_t lo);
  void *grad_user;
};

static inline nn_tensor *nn_in(lam_model *m, const nn_node *n, int i) { return &m->tensor[n->in[i]]; }
/* The rows a node's ops see for a batch of B samples: B * its input's frames (ops are written per frame:
 * the frames of a clip are folded into the batch until a tpool). */
static inline int nn_rows(const lam_model *m, const nn_node *n, int B) { return B * m->tensor[n->in[0]].t; }
static inline nn_tensor *nn_out(lam_model *m, const nn_node *n) { return &m->tensor[n->out]; }
/* The 16-bit type the half precisions round GEMM operands (and NHWC activations) to: LAM_DT_BF16 or LAM_DT_F16;
 * LAM_DT_F32 (0) in fp32 and tf32. */
static inline int nn_half(const lam_model *m) {
  return m->ctx->precision == LAM_PRECISION_BF16 ? LAM_DT_BF16 : m->ctx->precision == LAM_PRECISION_FP16 ? LAM_DT_F16 : LAM_DT_F32;
}
/* Bytes of one activation value in the model's format; p advanced by n values of it. */
static inline size_t nn_esize(const lam_model *m) { return lam_dt_size(m->fmt.dt); }
static inline void *nn_at(const lam_model *m, void *p, size_t n) { return (char *)p + n * nn_esize(m); }
static inline int nn_index(const lam_model *m, const nn_node *n) { return (int)(n - m->node); }
/* Backward reads the node's input data. */
static inline int nn_reads_input_bwd(const nn_node *n) { return (n->op->flags & NN_IN_BWD) || n->keep_input; }

/* Where backward puts the gradient of input i: NULL when it needs none; else its grad buffer, or, when
 * the gradient is to be added (accum) by an op that cannot add itself, the node's gtmp — nn_din_done then
 * adds it in. An NN_ADDS_GRAD op gets the grad buffer always, and adds into it where nn_adds is 1. */
void *nn_din(lam_model *m, const nn_node *n, int i);
static inline int nn_adds(const nn_node *n, int i) { return n->accum[i] && (n->op->flags & NN_ADDS_GRAD); }
lam_status nn_din_done(lam_model *m, const nn_node *n, int i, int B);
/* The augmentation of the model's training batches (filled in *a), or NULL where there is none. Its draws are
 * keyed by seed: the trainer's, which a checkpoint keeps (a loaded model's own seed is not). */
const lam_aug *nn_aug(const lam_model *m, uint64_t seed, lam_aug *a);
int nn_has_dropout(const lam_model *m); /* a training forward advances dropout's counter */

/* Marks the end of an op for the profiler; free when not profiling. */
lam_status prof_mark(struct lam_prof *p, const char *name, int layer);
#define NN_PROF(m, name, layer) \
  do {                          \
    if ((m)->prof) LAM_TRY(prof_mark((m)->prof, (name), (layer))); \
  } while (0)

/* The parser's view of one node's words, for the ops' parse functions (spec.c). */
typedef struct nn_word {
  const char *s; /* into the spec */
  int len, pos;  /* pos: offset in the spec */
  int comma;     /* a comma (or a line's end) follows: the item ends */
  int label;     /* the word is a label: 'NAME:' */
} nn_word;
typedef struct nn_parse {
  const char *spec;
  const nn_word *w;
  int first, nargs; /* the node's name is w[first]; its arguments w[first+1 .. first+nargs] */
} nn_parse;
/* "bad model spec at word 3 ('x3', column 9): <what>" and the spec with a caret under the word (wi
 * counts from the node's name: 0 is the name, 1 its first argument). */
lam_status nn_spec_error(const nn_parse *p, int wi, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int nn_word_is(const nn_parse *p, int wi, const char *s);
/* The argument wi as a whole number in [lo, hi]; else a spec error naming `what`. */
lam_status nn_word_int(const nn_parse *p, int wi, int lo, int hi, const char *what, int *out);
lam_status nn_word_float(const nn_parse *p, int wi, double lo, double hi, const char *what, float *out);
/* Checks that the node's input is an image (not flat) / flat or 1x1, with a message naming the op. */
lam_status nn_need_image(const nn_parse *p, const lam_model *m, const nn_node *n);
/* The argument wi as '@NAME': the labelled tensor, which must exist already. */
lam_status nn_word_ref(const nn_parse *p, const lam_model *m, int wi, int *tensor);

/* The op table (src/nn/ops/). */
extern const nn_op nn_op_conv, nn_op_convt, nn_op_dense, nn_op_maxpool, nn_op_avgpool, nn_op_gap, nn_op_upsample,
    nn_op_relu, nn_op_tanh, nn_op_sigmoid, nn_op_gelu, nn_op_leakyrelu, nn_op_flatten, nn_op_bn, nn_op_dropout,
    nn_op_add, nn_op_concat, nn_op_tpool, nn_op_tcat, nn_op_groupnorm, nn_op_layernorm;
const nn_op *nn_op_find(const char *name, int len);
/* The i-th op of the spec grammar (spec.c's ops[]), or NULL past the last: the one list of layers. */
const nn_op *nn_op_at(int i);
/* The fusions: conv -> relu -> maxpool (ops/conv.c), BatchNorm -> activation (ops/norm.c). */
extern const nn_fusion nn_fusion_conv_block, nn_fusion_bn_act, nn_fusion_bn_add_act, nn_fusion_bn_act_pool;
/* The nodes that read tensor t (*last: the last of them, where not NULL). */
int nn_readers(const lam_model *m, int t, int *last);
/* Whether conv node i heads conv -> relu -> maxpool (windows that do not overlap, each intermediate with one reader):
 * 2, with the relu and pool in a; else 0 (nn_choose_fmt keeps such models NCHW). */
int nn_conv_block_shape(const lam_model *m, int i, int a[2]);
/* Whether conv node n can sum its output's statistics for a BatchNorm (conv.c): a whole conv without bias. */
int nn_conv_can_sum_stats(const lam_model *m, const nn_node *n);

/* Builds the graph from the spec (spec.c): nodes, tensors, shapes, parameter and state offsets. */
lam_status nn_parse_spec(lam_model *m, const char *spec);
/* The format the activations take on this backend at this precision (graph.c): NCHW float32, or NHWC (float32,
 * or the 16-bit type of the bf16 and fp16 precisions) where the backend's convolutions prefer it and the model has a conv that
 * runs on its own; LAMINA_LAYOUT (m->layout) forces a layout. */
lam_fmt nn_choose_fmt(const lam_model *m);
/* For the format f: gradients needed, views, fusion, in-place activations, and which gradient writes add
 * (graph.c). Done again whenever the format changes (nn_model_reserve) or BatchNorm's sync does. Fails (naming the
 * node, the primitive and the format) where the backend does not run a primitive a node calls in that format
 * (lam_prim_ops.supports): the model is then left as it was finished before, or unusable at its creation. */
lam_status nn_graph_finish(lam_model *m, lam_fmt f);
/* Plans the arena for `batch` samples (plan.c): offsets of every tensor's data and gradient and every
 * node's aux buffer by liveness over forward + backward; *bytes is the arena's size. With base non-NULL
 * the pointers are set into it. */
lam_status nn_plan(lam_model *m, int batch, void *base, size_t *bytes);
/* Largest scratch any node needs at batch B (floats); an op that cannot say fails with its reason. */
lam_status nn_scratch_floats(const lam_model *m, int B, size_t *floats);
/* Makes sure the batch buffers hold `batch` samples. */
lam_status nn_model_reserve(lam_model *m, int batch);
/* The first non-finite value of the host copy v of the parameters (state = 0) or running statistics (1), as
 * "parameter I (the weight of layer L, OP) is NaN" into where; 0 when all n are finite (model.c). */
int nn_nonfinite(const lam_model *m, int state, const float *v, size_t n, char *where, size_t size);
/* Forward of the whole graph on m->x (batch samples); the logits end in the output tensor's data. train:
 * batch statistics and dropout (and running statistics updated); else evaluation. */
lam_status nn_forward(lam_model *m, int batch, int train);
/* lam_evaluate of a set of several clips a video (lam_dataset_clips > 1): per video, the softmax averaged (clips.c). */
lam_status nn_evaluate_clips(lam_model *m, const lam_dataset *d, int batch, double *accuracy, double *loss,
                             uint64_t *confusion);
/* Softmax cross-entropy on the logits against m->y: adds to m->stats, writes predictions; with
 * backward, the gradient of the mean loss over the batch's counted labels into the output's grad. */
lam_status nn_loss(lam_model *m, int batch, int backward, float smoothing, uint8_t *pred);
/* Backward of the whole graph from the output's grad, accumulating into m->grads. */
lam_status nn_backward(lam_model *m, int batch);

/* The trainer's optimizer in a captured step (nn/optim.c): prepare makes the state buffers (before a
 * graph records their addresses); schedule fills sched (2 floats a step) for the next `steps` steps
 * from m->opt_step, with the same scalars lam_model_step would use; step_sched queues a step that reads
 * row *k of it on the device (the caller adds it to m->opt_step when it has run). */
lam_status nn_opt_prepare(lam_model *m, const lam_opt *o);
/* The optimizer's scalars of `steps` steps into sched (NN_SCHED_COLS floats a row): Adam's step size
 * (SGD: 1 on the first step), Adam's sqrt of its second bias correction, the rate; row k is optimizer
 * step m->opt_step + 1 + k and step t0 + k of the run for the rate schedule ls (NULL: constant). */
#define NN_SCHED_COLS 3
void nn_opt_schedule(const lam_model *m, const lam_opt *o, const lam_lr_schedule *ls, long t0, long steps_per_epoch,
                     int steps, float *sched);
lam_status nn_lr_schedule_check(const lam_lr_schedule *s, const char *fn);
lam_status nn_opt_step_sched(lam_model *m, const lam_opt *o, const float *sched, const int32_t *k, const lam_scaler *ls);

#endif
