/* nn.h — the model's internals: layers with their shapes, the flat buffers (parameters, gradients,
 * optimizer state, activations) and the trainer. Layers are written once (nn/layers.c) over the
 * backend primitives declared in internal.h; only the primitives have CPU and CUDA twins. */
#ifndef LAMINA_NN_H
#define LAMINA_NN_H

#include "../internal.h"

typedef enum layer_kind { L_CONV, L_DENSE, L_MAXPOOL, L_RELU, L_TANH, L_SIGMOID, L_FLATTEN } layer_kind;

typedef struct layer {
  layer_kind kind;
  int in_c, in_h, in_w;    /* input per sample */
  int out_c, out_h, out_w; /* output per sample (dense: out_c features, h = w = 1) */
  int k, stride, pad;      /* conv and maxpool */
  size_t w_off, b_off;     /* offsets of weight and bias in the flat parameter buffer */
  size_t nw, nb;
  /* Per-batch buffers (backend memory), sized for the model's batch capacity. */
  float *out;    /* (B, out_c, out_h, out_w) */
  float *dout;   /* gradient of the loss w.r.t. out */
  float *col;    /* conv: im2col of the input, (in_c*k*k, B*out_h*out_w), kept for backward (bf16: as
                  * bfloat16); dense: the input as bfloat16 (bf16 precision only) */
  int32_t *arg;  /* maxpool: index of the max within the input sample, per output */
} layer;

static inline size_t layer_in_size(const layer *l) { return (size_t)l->in_c * l->in_h * l->in_w; }
static inline size_t layer_out_size(const layer *l) { return (size_t)l->out_c * l->out_h * l->out_w; }

struct lam_model {
  lam_ctx *ctx;
  char spec[1024];
  int in_c, in_h, in_w;
  int nlayers;
  layer *L;
  size_t nparams;
  float *params, *grads;   /* flat, backend memory */
  uint16_t *params_lo;     /* bf16 precision: the conv weights rounded to bfloat16 for the GEMMs, refreshed at
                            * every forward from params (the fp32 master copy); same offsets */
  float *opt_m, *opt_v;    /* optimizer state (momentum / Adam moments), allocated at the first step */
  lam_opt_kind opt_kind;   /* what opt_m/opt_v hold */
  long opt_step;
  /* Batch buffers */
  int cap;                 /* batch capacity of the buffers below */
  float *x, *dx;           /* input (B, in_c, in_h, in_w); dx is scratch for the first layer's input gradient */
  uint8_t *y;              /* labels of the batch (backend memory) */
  float *scratch;          /* conv backward: transposed gradient and the column gradient (bf16: the transposed
                            * gradient, then bf16 copies of it and of the column gradient; conv_scratch_floats) */
  float *stats;            /* [loss sum, correct, samples]: accumulated on the device, read rarely */
  uint8_t *pred;           /* argmax per sample of the last forward, (cap) */
  size_t batch_bytes;      /* backend memory held by the batch buffers above and the layers' */
  int fuse;                /* conv -> relu -> maxpool: 0 op by op, 1 fused after the GEMM, 2 also direct at the
                            * input, 3 (default) direct where the backend prefers it (LAMINA_FUSE) */
  unsigned buffers_gen;    /* bumped whenever the batch buffers move (a graph of them is then stale) */
  struct lam_prof *prof;   /* when profiling: a mark after every op (nn/prof.h) */
};

/* Floats of scratch a conv's backward needs at batch B: fp32 dyT (OC, BP) and dcol (K, BP), or in bf16
 * dyT, then (at a 16-byte boundary) dyT and dcol as bfloat16. */
static inline size_t conv_bf16_offset(const layer *l, size_t BP) { return ((size_t)l->out_c * BP + 3) / 4 * 4; }
static inline size_t dense_scratch_floats(const layer *l, int B) { /* bf16: the output gradient as bfloat16 */
  return ((size_t)B * l->out_c + 1) / 2;
}
static inline size_t conv_scratch_floats(const layer *l, int B) {
  size_t K = (size_t)l->in_c * l->k * l->k, BP = (size_t)B * l->out_h * l->out_w;
  size_t f32 = ((size_t)l->out_c + K) * BP, bf16 = conv_bf16_offset(l, BP) + (((size_t)l->out_c + K) * BP + 1) / 2;
  return f32 > bf16 ? f32 : bf16;
}

/* Marks the end of an op for the profiler; free when not profiling. */
lam_status prof_mark(struct lam_prof *p, const char *name, int layer);
#define NN_PROF(m, name, layer) \
  do {                          \
    if ((m)->prof) LAM_TRY(prof_mark((m)->prof, (name), (layer))); \
  } while (0)

/* The trainer's optimizer in a captured step (nn/optim.c): prepare makes the state buffers (before a
 * graph records their addresses); schedule fills sched (2 floats a step) for the next `steps` steps
 * from m->opt_step, with the same scalars lam_model_step would use; step_sched queues a step that reads
 * row *k of it on the device (the caller adds it to m->opt_step when it has run). */
lam_status nn_opt_prepare(lam_model *m, const lam_opt *o);
void nn_opt_schedule(const lam_model *m, const lam_opt *o, int steps, float *sched);
lam_status nn_opt_step_sched(lam_model *m, const lam_opt *o, const float *sched, const int32_t *k);

/* Builds the layer list from the spec (nn/spec.c). */
lam_status nn_parse_spec(const char *spec, int in_c, int in_h, int in_w, layer **out, int *nlayers, char *expanded,
                         size_t expanded_size);
/* Makes sure the batch buffers hold `batch` samples. */
lam_status nn_model_reserve(lam_model *m, int batch);
/* Forward of the whole model on m->x (batch samples); logits end in the last layer's out. */
lam_status nn_forward(lam_model *m, int batch);
/* Softmax cross-entropy on the logits against m->y: adds to m->stats, writes predictions; with
 * backward, the gradient of the mean loss over `mean_over` samples into the last layer's dout. */
lam_status nn_loss(lam_model *m, int batch, int backward, float mean_over, uint8_t *pred);
/* Backward of the whole model from the last layer's dout, accumulating into m->grads. */
lam_status nn_backward(lam_model *m, int batch);

#endif
