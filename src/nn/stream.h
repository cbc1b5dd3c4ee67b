/* stream.h — streaming batches (stream.c): a loader thread gathers (or decodes) shuffled uint8 batches into pinned
 * buffers, a copy queue moves them to the device while the previous batch computes, events order the
 * two. The trainer (train.c) asks for one batch at a time. */
#ifndef LAMINA_NN_STREAM_H
#define LAMINA_NN_STREAM_H

#include "nn.h"

typedef struct lam_feed lam_feed;

/* Buffers for batches of up to `batch` samples of `sample` pixels and label_size labels, nbuf (2 or 3) of them. */
lam_status feed_create(lam_ctx *ctx, int nbuf, int batch, size_t sample, size_t label_size, lam_feed **out);
void feed_free(lam_feed *f);
size_t feed_device_bytes(const lam_feed *f);
int feed_buffers(const lam_feed *f);
/* Starts the loader on an epoch: samples idx[0..n) of d, in batches (lam_dataset_rows: copied from memory, or
 * decoded from the files of a streamed set on all host threads). */
lam_status feed_start(lam_feed *f, const lam_dataset *d, const int32_t *idx, size_t n);
/* Queues the next batch's copy and its normalize into x (B, C, P) and y (B, label_size), after the copy lands. */
lam_status feed_next(lam_feed *f, int T, int C, size_t P, const lam_norm *norm, const lam_aug *aug, lam_fmt fmt, void *x,
                     uint8_t *y);
/* Joins the loader; gives the epoch's time the device waited for copies and the loop for the loader. */
lam_status feed_finish(lam_feed *f, double *data_wait_ms, double *loader_wait_ms);

#endif
