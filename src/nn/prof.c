/* prof.c — the profiler (prof.h) and its public face: lam_trainer_profile, the table and the trace. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prof.h"
#include "train.h"

static lam_status take_mark(lam_prof *p, size_t i) {
  const lam_backend *be = p->ctx->be;
  if (be->queue->mark) return be->queue->mark(p->ctx, i);
  p->host_ms[i] = lam_now_ms();
  return LAM_OK;
}

lam_status prof_begin(lam_prof *p, lam_ctx *ctx, size_t max_marks) {
  prof_free(p);
  p->ctx = ctx;
  p->cap = max_marks;
  p->ops = calloc(max_marks, sizeof *p->ops);
  p->host_ms = calloc(max_marks, sizeof *p->host_ms);
  p->ms = calloc(max_marks, sizeof *p->ms);
  if (!p->ops || !p->host_ms || !p->ms) {
    prof_free(p);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "profiler: no host memory for %zu marks", max_marks);
  }
  if (ctx->be->queue->mark_reserve) LAM_TRY(ctx->be->queue->mark_reserve(ctx, max_marks));
  p->active = 1;
  p->nmarks = 1;
  return take_mark(p, 0);
}

lam_status prof_mark(lam_prof *p, const char *name, int layer) {
  if (!p->active || p->nmarks >= p->cap) return LAM_OK;
  size_t i = p->nmarks++;
  p->ops[i] = (prof_op){name, layer, i};
  return take_mark(p, i);
}

lam_status prof_resolve(lam_prof *p) {
  if (p->resolved || !p->nmarks) return LAM_OK;
  p->active = 0;
  const lam_backend *be = p->ctx->be;
  for (size_t i = 0; i < p->nmarks; i++) {
    if (be->queue->mark_read) LAM_TRY(be->queue->mark_read(p->ctx, i, &p->ms[i]));
    else p->ms[i] = p->host_ms[i] - p->host_ms[0];
  }
  p->resolved = 1;
  return LAM_OK;
}

void prof_free(lam_prof *p) {
  free(p->ops);
  free(p->host_ms);
  free(p->ms);
  memset(p, 0, sizeof *p);
}

/* ---- public ---- */

lam_status lam_trainer_profile(lam_trainer *t, int first_step, int steps) {
  LAM_CHECK_ARG(t, "lam_trainer_profile: trainer is NULL");
  LAM_CHECK_ARG(first_step >= 0 && steps >= 0 && steps <= 100000,
                "lam_trainer_profile: first step %d and steps %d must be >= 0 (steps at most 100000)", first_step, steps);
  t->prof_first = first_step;
  t->prof_steps = steps;
  prof_free(&t->prof);
  return LAM_OK;
}

static int cmp_rows(const void *a, const void *b) {
  double x = ((const lam_prof_row *)a)->total_ms, y = ((const lam_prof_row *)b)->total_ms;
  return (x < y) - (x > y);
}

lam_status lam_trainer_profile_table(lam_trainer *t, lam_prof_row *rows, int max_rows, int *nrows, int *steps) {
  LAM_CHECK_ARG(t && rows && nrows, "lam_trainer_profile_table: NULL argument");
  *nrows = 0;
  if (steps) *steps = t->prof_done;
  LAM_TRY(prof_resolve(&t->prof));
  double all = 0;
  int n = 0;
  for (size_t i = 1; i < t->prof.nmarks; i++) {
    const prof_op *o = &t->prof.ops[i];
    double d = t->prof.ms[i] - t->prof.ms[i - 1];
    all += d;
    int r = 0;
    while (r < n && strcmp(rows[r].name, o->name)) r++;
    if (r == n) {
      if (n == max_rows) continue;
      memset(&rows[n], 0, sizeof rows[n]);
      snprintf(rows[n].name, sizeof rows[n].name, "%s", o->name);
      n++;
    }
    rows[r].calls++;
    rows[r].total_ms += d;
  }
  for (int r = 0; r < n; r++) {
    rows[r].mean_ms = rows[r].calls ? rows[r].total_ms / rows[r].calls : 0;
    rows[r].share = all > 0 ? rows[r].total_ms / all : 0;
  }
  qsort(rows, (size_t)n, sizeof *rows, cmp_rows);
  *nrows = n;
  return LAM_OK;
}

lam_status lam_trainer_profile_trace(lam_trainer *t, const char *path) {
  LAM_CHECK_ARG(t && path, "lam_trainer_profile_trace: %s is NULL", t ? "path" : "trainer");
  LAM_TRY(prof_resolve(&t->prof));
  LAM_TRY(lam_output_recheck(path, "trace", LAM_FILE_TRACE)); /* before the document is built */
  char *doc = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&doc, &len); /* the document in memory, then one atomic write (outpath.c) */
  if (!f) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "writing the trace '%s': no host memory", path);
  const char *dev = lam_device_str(t->m->ctx->device);
  fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
  fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"lamina %s\"}}", dev);
  for (size_t i = 1; i < t->prof.nmarks; i++) {
    const prof_op *o = &t->prof.ops[i];
    double ts = t->prof.ms[i - 1] * 1e3, dur = (t->prof.ms[i] - t->prof.ms[i - 1]) * 1e3;
    fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":%.3f,\"dur\":%.3f,"
               "\"args\":{\"layer\":%d}}",
            o->name, ts, dur, o->layer);
  }
  fprintf(f, "\n]}\n");
  int bad = ferror(f);
  bad |= fclose(f) != 0;
  lam_status s = bad ? LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "writing the trace '%s': no host memory for the document", path)
                     : lam_output_write(path, "trace", LAM_FILE_TRACE, doc, len);
  free(doc);
  return s;
}
