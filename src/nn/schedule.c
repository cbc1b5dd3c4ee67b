/* schedule.c — learning-rate schedules: the rate of each step of a run, filled into the trainer's
 * per-step table with the optimizer's other scalars (optim.c), so that the step the CUDA graph replays
 * reads its rate from the device like Adam's bias corrections. Computed in double, rounded once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

lam_status lam_lr_schedule_parse(const char *s, lam_lr_schedule *out) {
  LAM_CHECK_ARG(s && out, "lam_lr_schedule_parse: NULL argument");
  lam_lr_schedule r = {.kind = LAM_LR_CONSTANT, .step_epochs = 1, .gamma = 1.0};
  if (!strcmp(s, "constant")) r.kind = LAM_LR_CONSTANT;
  else if (!strcmp(s, "cosine")) r.kind = LAM_LR_COSINE;
  else if (!strcmp(s, "onecycle")) r.kind = LAM_LR_ONECYCLE;
  else if (!strncmp(s, "step:", 5)) {
    char *end;
    long e = strtol(s + 5, &end, 10);
    double g = *end == ':' ? strtod(end + 1, &end) : NAN;
    if (end == s + 5 || *end || e < 1 || e > 100000 || !(g > 0 && g <= 1))
      return LAM_FAIL(LAM_ERR_INVALID_ARG, "learning-rate schedule '%s': step takes step:E:G, E epochs (1 or more) "
                      "between steps and G the factor, 0 < G <= 1 (e.g. step:10:0.1)", s);
    r.kind = LAM_LR_STEP, r.step_epochs = (int)e, r.gamma = g;
  } else {
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "unknown learning-rate schedule '%s': expected constant, cosine, step:E:G "
                    "(e.g. step:10:0.1) or onecycle", s);
  }
  *out = r;
  return LAM_OK;
}

void lam_lr_schedule_str(const lam_lr_schedule *s, char *buf, size_t size) {
  if (!s || !buf || !size) return;
  const char *names[] = {"constant", "cosine", "step", "onecycle"};
  if (s->kind == LAM_LR_STEP) snprintf(buf, size, "step:%d:%g", s->step_epochs, s->gamma);
  else snprintf(buf, size, "%s", (unsigned)s->kind < 4 ? names[s->kind] : "?");
}

/* torch's OneCycleLR _annealing_cos: from start to end as pct goes 0 -> 1 */
static double anneal_cos(double start, double end, double pct) { return end + (start - end) / 2.0 * (cos(M_PI * pct) + 1.0); }

double lam_lr_at(const lam_lr_schedule *s, double lr, long t, long steps_per_epoch) {
  if (!s || steps_per_epoch < 1) return lr;
  const long T = (long)(s->epochs > 0 ? s->epochs : 1) * steps_per_epoch;
  if (t > T - 1 && (s->kind == LAM_LR_COSINE || s->kind == LAM_LR_ONECYCLE)) t = T - 1; /* past the run: its last rate */
  if (t < 0) t = 0;
  long W = (long)floor(s->warmup_epochs * (double)steps_per_epoch + 0.5);
  if (W > T) W = T;
  if (s->kind == LAM_LR_ONECYCLE) { /* torch.optim.lr_scheduler.OneCycleLR, three_phase False */
    double initial = lr / 25.0, min_lr = initial / 1e4;
    double pct = s->warmup_epochs > 0 ? s->warmup_epochs / (s->epochs > 0 ? s->epochs : 1) : 0.3;
    double end1 = pct * (double)T - 1.0, end2 = (double)T - 1.0;
    if ((double)t <= end1) return anneal_cos(initial, lr, end1 > 0 ? (double)t / end1 : 1.0);
    return anneal_cos(lr, min_lr, end2 > end1 ? ((double)t - end1) / (end2 - end1) : 1.0);
  }
  double r = lr;
  if (s->kind == LAM_LR_COSINE && t >= W) r = lr * (1.0 + cos(M_PI * (double)(t - W) / (double)(T - W))) / 2.0;
  else if (s->kind == LAM_LR_STEP) r = lr * pow(s->gamma, (double)(t / steps_per_epoch / s->step_epochs));
  if (t < W) r *= (double)(t + 1) / (double)W;
  return r;
}

lam_status nn_lr_schedule_check(const lam_lr_schedule *s, const char *fn) {
  LAM_CHECK_ARG(s, "%s: schedule is NULL", fn);
  LAM_CHECK_ARG((unsigned)s->kind <= LAM_LR_ONECYCLE, "%s: schedule kind %d is not constant, cosine, step or onecycle",
                fn, (int)s->kind);
  LAM_CHECK_ARG(s->epochs >= 1 && s->epochs <= 100000, "%s: the schedule spans %d epochs (1 to 100000)", fn, s->epochs);
  LAM_CHECK_ARG(s->warmup_epochs >= 0 && s->warmup_epochs < s->epochs,
                "%s: a warm-up of %g epochs does not fit a run of %d (0 <= warm-up < epochs)", fn, s->warmup_epochs,
                s->epochs);
  LAM_CHECK_ARG(s->kind != LAM_LR_STEP || (s->step_epochs >= 1 && s->gamma > 0 && s->gamma <= 1),
                "%s: step schedule needs step_epochs >= 1 and 0 < gamma <= 1 (got %d and %g)", fn, s->step_epochs,
                s->gamma);
  return LAM_OK;
}
