/* train.h — the trainer's state (train.c; checkpoint.c saves and restores it). */
#ifndef LAMINA_NN_TRAIN_H
#define LAMINA_NN_TRAIN_H

#include "nn.h"
#include "prof.h"
#include "rng.h"
#include "stream.h"

struct lam_trainer {
  lam_model *m;
  lam_opt opt;
  int batch;
  size_t n, sample;        /* images, pixels per image (all channels) */
  size_t label_size;       /* labels per image: 1, or one per pixel */
  uint64_t seed;
  lam_rng rng;             /* the shuffle's generator: the next epoch's order depends only on it */
  int epochs_done;
  const volatile int *stop;     /* lam_trainer_set_stop: read after every step */
  int step_done;                /* an interrupted epoch: its steps done (0: none) */
  lam_rng epoch_rng;            /* the generator before this epoch's shuffle: resuming redoes the same order */
  float part[3];                /* an interrupted epoch's loss sum, correct and counted labels so far */
  uint8_t *d_images, *d_labels; /* the training set in backend memory, uint8 */
  int32_t *h_idx, *d_idx;       /* this epoch's order */
  int steps;                    /* per epoch */
  int32_t *d_state;             /* backend memory: the batch cursor into d_idx, the step within the epoch */
  float *h_sched, *d_sched;     /* the optimizer's scalars for each step of the epoch (nn_opt_schedule) */
  lam_lr_schedule lr_sched;     /* the rate's schedule (constant by default; saved in checkpoints) */
  const lam_dataset *host;      /* the caller's set: read by the loader while streaming */
  lam_feed *feed;               /* streaming batches (stream.c); NULL: the set is resident */
  char stream_why[200];
  double epoch_ms, data_wait_ms, loader_wait_ms; /* the last epoch */
  int graph_off;                /* lam_trainer_set_graph(t, 0) */
  void *graph;                  /* the captured step (gather, zero_grad, forward, loss, backward, optimizer), or NULL */
  unsigned graph_gen;           /* the model's gen it was captured with */
  int eager_full_steps;         /* full-batch steps run without the graph (one warms cuBLAS up first) */
  lam_prof prof;                /* the per-op profile of steps [prof_first, prof_first + prof_steps) */
  int prof_first, prof_steps, prof_done;
  lam_collective coll;          /* world > 1: data-parallel over ranks (lam_trainer_set_collective) */
  double *h_sum;                /* host buffer of the gradients' sum, nparams doubles and the stop flag */
  int stop_all;                 /* a rank was asked to stop at the last step's sum */
  void *comm;                   /* GPU ranks: the backend's communicator (NCCL), made from coll.nccl_id */
  size_t bucket;                /* GPU ranks: gradients a bucket (lam_trainer_set_buckets); 0: one sum after backward */
  size_t sent;                  /* this step's gradients from here up are summed (or being summed) */
  size_t bucket_ev;             /* the next event slot of this step */
  double weight;                /* this step's gradients' weight: the rank's share of the global batch */
  lam_scaler *d_scaler;         /* fp16: the loss scaler in backend memory (prims.h), made at the first epoch */
  lam_scaler scaler;            /* its host copy: as of the last epoch's end or stop, or a checkpoint's */
  int scaler_set;               /* scaler holds a state (else the first fp16 epoch starts one) */
};

#endif
