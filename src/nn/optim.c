/* optim.c — SGD (momentum, weight decay) and Adam/AdamW as one fused pass over the flat parameter
 * buffer; the optimizer state is one or two more flat buffers of the same length. */
#include <math.h>
#include <string.h>

#include "nn.h"
#include "../math/optim.h"

lam_opt lam_opt_default(lam_opt_kind kind) {
  lam_opt o = {.kind = kind, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
  if (kind == LAM_OPT_SGD) o.lr = 0.01f;
  else o.lr = 1e-3f;
  if (kind == LAM_OPT_ADAMW) o.weight_decay = 0.01f;
  return o;
}

lam_status lam_opt_parse(const char *s, lam_opt_kind *out) {
  LAM_CHECK_ARG(s && out, "lam_opt_parse: NULL argument");
  if (!strcmp(s, "sgd")) *out = LAM_OPT_SGD;
  else if (!strcmp(s, "adam")) *out = LAM_OPT_ADAM;
  else if (!strcmp(s, "adamw")) *out = LAM_OPT_ADAMW;
  else return LAM_FAIL(LAM_ERR_INVALID_ARG, "unknown optimizer '%s': expected sgd, adam or adamw", s);
  return LAM_OK;
}

/* The state buffers for `kind`, zeroed, (re)made when the kind changes. */
static lam_status opt_state(lam_model *m, lam_opt_kind kind, int need_v) {
  lam_ctx *ctx = m->ctx;
  size_t bytes = m->nparams * sizeof(float);
  if (m->opt_m && m->opt_kind == kind) return LAM_OK;
  lam_mem_free(ctx, m->opt_m);
  lam_mem_free(ctx, m->opt_v);
  m->opt_m = m->opt_v = NULL;
  m->opt_step = 0;
  m->gen++; /* a captured step that used the old state is stale */
  LAM_TRY(lam_mem_alloc(ctx, (void **)&m->opt_m, bytes));
  LAM_TRY(ctx->be->prim->zero(ctx, m->opt_m, bytes));
  if (need_v) {
    LAM_TRY(lam_mem_alloc(ctx, (void **)&m->opt_v, bytes));
    LAM_TRY(ctx->be->prim->zero(ctx, m->opt_v, bytes));
  }
  m->opt_kind = kind;
  return LAM_OK;
}

/* The one bound on an optimizer's settings, for every caller (the CLI's --lr, Python's fit(lr=), a checkpoint's
 * trainer): an infinite or NaN rate would make every weight NaN at the first step. */
lam_status lam_opt_check(const lam_opt *o) {
  LAM_CHECK_ARG(o, "lam_opt_check: opt is NULL");
  LAM_CHECK_ARG(o->kind == LAM_OPT_SGD || o->kind == LAM_OPT_ADAM || o->kind == LAM_OPT_ADAMW,
                "the optimizer kind %d is not sgd, adam or adamw", (int)o->kind);
  const float v[3] = {o->lr, o->momentum, o->weight_decay};
  static const char *what[3] = {"the learning rate (lr)", "the momentum", "the weight decay"};
  for (int i = 0; i < 3; i++)
    LAM_CHECK_ARG(v[i] >= 0 && v[i] <= LAM_OPT_MAX, "%s %g is not a number from 0 to %g (finite): give e.g. %s", what[i],
                  (double)v[i], (double)LAM_OPT_MAX, i == 0 ? "1e-3" : i == 1 ? "0.9" : "1e-4");
  LAM_CHECK_ARG(o->beta1 >= 0 && o->beta1 < 1 && o->beta2 >= 0 && o->beta2 < 1,
                "Adam's betas %g and %g must each be in [0, 1) (PyTorch's defaults: 0.9 and 0.999)", (double)o->beta1,
                (double)o->beta2);
  LAM_CHECK_ARG(o->eps > 0 && isfinite(o->eps), "Adam's eps %g must be a finite number > 0 (PyTorch's default: 1e-8)",
                (double)o->eps);
  return LAM_OK;
}

static lam_status check_opt(const char *fn, const lam_model *m, const lam_opt *o) {
  LAM_CHECK_ARG(m && o, "%s: %s is NULL", fn, m ? "opt" : "model");
  return lam_opt_check(o);
}

/* One optimizer step of o over the flat buffers: the scalars of step m->opt_step + 1 by value (and
 * counted here), or (sched, k non-NULL) read on the device from the trainer's table (the trainer counts
 * its steps: a captured step is queued once and replayed many times). */
static lam_status opt_apply(lam_model *m, const lam_opt *o, const float *sched, const int32_t *k, const lam_scaler *ls) {
  lam_ctx *ctx = m->ctx;
  LAM_TRY(opt_state(m, o->kind, o->kind != LAM_OPT_SGD));
  if (!sched) m->opt_step++;
  if (o->kind == LAM_OPT_SGD)
    return ctx->be->prim->sgd(ctx, m->nparams, m->params, m->grads, m->opt_m, o->lr, o->momentum, o->weight_decay,
                        m->opt_step == 1, sched, k, ls);
  return ctx->be->prim->adam(ctx, m->nparams, m->params, m->grads, m->opt_m, m->opt_v, o->lr, o->beta1, o->beta2, o->eps,
                       o->weight_decay, o->kind == LAM_OPT_ADAMW, m->opt_step, sched, k, ls);
}

lam_status lam_model_step(lam_model *m, const lam_opt *o) {
  LAM_TRY(check_opt("lam_model_step", m, o));
  return opt_apply(m, o, NULL, NULL, NULL);
}

lam_status nn_opt_prepare(lam_model *m, const lam_opt *o) {
  LAM_TRY(check_opt("lam_trainer", m, o));
  return opt_state(m, o->kind, o->kind != LAM_OPT_SGD);
}

void nn_opt_schedule(const lam_model *m, const lam_opt *o, const lam_lr_schedule *ls, long t0, long steps_per_epoch,
                     int steps, float *sched) {
  for (int k = 0; k < steps; k++) {
    long step = m->opt_step + 1 + k;
    float lr = ls ? (float)lam_lr_at(ls, o->lr, t0 + k, steps_per_epoch) : o->lr, *row = sched + NN_SCHED_COLS * k;
    if (o->kind == LAM_OPT_SGD) row[0] = step == 1 ? 1.0f : 0.0f, row[1] = 0.0f;
    else lam_adam_coef(lr, o->beta1, o->beta2, step, row);
    row[2] = lr;
  }
}

lam_status nn_opt_step_sched(lam_model *m, const lam_opt *o, const float *sched, const int32_t *k, const lam_scaler *ls) {
  return opt_apply(m, o, sched, k, ls);
}

lam_status lam_backprop_step(lam_ctx *ctx, size_t n, const float *error, const float *input, float lr, float *w) {
  LAM_CHECK_ARG(ctx, "lam_backprop_step: ctx is NULL");
  if (n == 0) return LAM_OK;
  LAM_CHECK_ARG(error && input && w, "lam_backprop_step: %s is NULL", !error ? "error" : !input ? "input" : "w");
  return ctx->be->prim->backprop_step(ctx, n, error, input, lr, w);
}
