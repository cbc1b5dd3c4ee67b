/* prof.h — the per-op profiler of the training step: a mark after every op of the steps it covers
 * (CUDA events on the GPU, the host clock on the CPU), resolved into a table per op name (calls, total,
 * mean, share of the step, like torch.profiler's key_averages) and a Chrome trace that Perfetto opens. */
#ifndef LAMINA_NN_PROF_H
#define LAMINA_NN_PROF_H

#include "../internal.h"

typedef struct prof_op {
  const char *name; /* a static string: "conv.fwd", "adam", ... */
  int layer;        /* 1-based layer index, 0 for the step's own ops */
  size_t mark;      /* the mark that ends it; it starts at the previous mark */
} prof_op;

typedef struct lam_prof { /* struct tag: nn.h refers to it before this header */
  lam_ctx *ctx;
  int active;              /* marking now */
  size_t nmarks, cap;      /* marks taken, pool size */
  prof_op *ops;            /* one per mark after the first */
  double *host_ms;         /* the host clock's marks, where the backend has no marks of its own */
  double *ms;              /* resolved mark times */
  int resolved;
} lam_prof;

lam_status prof_begin(lam_prof *p, lam_ctx *ctx, size_t max_marks); /* the first mark */
/* Marks the end of an op (no-op when inactive or the pool is full). */
lam_status prof_mark(struct lam_prof *p, const char *name, int layer);
lam_status prof_resolve(lam_prof *p);
void prof_free(lam_prof *p);

#endif
