/* act.c — elementwise ops: the activations (relu, leakyrelu, gelu, tanh, sigmoid) and dropout. Each
 * activation's backward reads what it needs: its output (relu, leakyrelu, tanh, sigmoid) or its input
 * (gelu). Dropout draws a keep mask per training step from a counter on the device (so a captured step
 * draws anew at every replay) and scales what it keeps by 1 / (1 - p); in evaluation it is a copy. */
#include <stdlib.h>

#include "../nn.h"

static lam_status act_parse(nn_parse *p, lam_model *m, nn_node *n) {
  if (n->op == &nn_op_leakyrelu) {
    n->a.act.alpha = 0.01f; /* PyTorch's default slope */
    if (p->nargs > 1) return nn_spec_error(p, 2, "leakyrelu takes [SLOPE], e.g. 'leakyrelu 0.1' (missing a comma?)");
    if (p->nargs == 1) LAM_TRY(nn_word_float(p, 1, 0.0, 1.0, "leakyrelu's SLOPE", &n->a.act.alpha));
  } else if (p->nargs) {
    return nn_spec_error(p, 1, "'%s' takes no arguments (missing a comma?)", n->op->name);
  }
  n->a.act.kind = n->op == &nn_op_relu ? LAM_ACT_RELU : n->op == &nn_op_tanh ? LAM_ACT_TANH : n->op == &nn_op_sigmoid ? LAM_ACT_SIGMOID
         : n->op == &nn_op_gelu ? LAM_ACT_GELU : LAM_ACT_LEAKY;
  const nn_tensor *x = nn_in(m, n, 0);
  nn_tensor *y = nn_out(m, n);
  y->c = x->c, y->h = x->h, y->w = x->w, y->flat = x->flat;
  return LAM_OK;
}
static lam_status act_fwd(lam_model *m, nn_node *n, int B, int train) {
  (void)train;
  const nn_tensor *x = nn_in(m, n, 0);
  return m->ctx->be->prim->act_fwd(m->ctx, m->fmt, n->a.act.kind, n->a.act.alpha, (size_t)B * nn_size(x), x->data, nn_out(m, n)->data);
}
static lam_status act_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *x = nn_in(m, n, 0), *y = nn_out(m, n);
  void *din = nn_din(m, n, 0);
  if (!din) return LAM_OK;
  return m->ctx->be->prim->act_bwd(m->ctx, m->fmt, n->a.act.kind, n->a.act.alpha, (size_t)B * nn_size(x), n->a.act.kind == LAM_ACT_GELU ? x->data : NULL,
                             n->a.act.kind == LAM_ACT_GELU ? NULL : y->data, y->grad, din);
}
static double act_macs(const lam_model *m, const nn_node *n) { return (double)nn_size(&m->tensor[n->out]); }

#define ACT_OP(var, str, fl, use, what)                                                                       \
  const nn_op var = {NN_NAMES(str), .parse = act_parse, .fwd = act_fwd, .bwd = act_bwd, .macs = act_macs, \
                     .flags = (fl) | NN_FLAT_OK | NN_ACT, .usage = use, .about = what,                   \
                     .prims = NN_PRIMS(LAM_PRIM_act_fwd, LAM_PRIM_act_bwd)}
ACT_OP(nn_op_relu, "relu", NN_OUT_BWD, "relu", "max(x, 0)");
ACT_OP(nn_op_tanh, "tanh", NN_OUT_BWD, "tanh", "the hyperbolic tangent");
ACT_OP(nn_op_sigmoid, "sigmoid", NN_OUT_BWD, "sigmoid", "1 / (1 + exp(-x))");
ACT_OP(nn_op_leakyrelu, "leakyrelu", NN_OUT_BWD, "leakyrelu [SLOPE]", "x, or SLOPE·x below 0 (SLOPE 0.01 unless said)");
ACT_OP(nn_op_gelu, "gelu", NN_IN_BWD, "gelu", "x·Φ(x) (PyTorch's exact GELU)");

/* ---- dropout P ---- */
static lam_status dropout_parse(nn_parse *p, lam_model *m, nn_node *n) {
  if (p->nargs != 1) return nn_spec_error(p, p->nargs ? 2 : 0, "dropout takes one number P in [0, 1), e.g. 'dropout 0.1'");
  LAM_TRY(nn_word_float(p, 1, 0.0, 0.999, "dropout's P", &n->a.dropout.p));
  const nn_tensor *x = nn_in(m, n, 0);
  nn_tensor *y = nn_out(m, n);
  y->c = x->c, y->h = x->h, y->w = x->w, y->flat = x->flat;
  return LAM_OK;
}
/* A mask given by a test, in NCHW order as PyTorch's, laid out as the activations are. */
static lam_status upload_mask(lam_model *m, const nn_node *n, int B) {
  const nn_tensor *x = nn_in(m, n, 0);
  const size_t count = (size_t)B * nn_size(x), P = (size_t)x->h * x->w;
  if (!m->fmt.nhwc || P == 1 || x->c == 1) return lam_mem_upload(m->ctx, n->aux, n->fixed_mask, count);
  uint8_t *t = malloc(count);
  if (!t) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "dropout: no host memory for the given mask's %zu bytes", count);
  for (size_t b = 0; b < (size_t)B; b++)
    for (size_t c = 0; c < (size_t)x->c; c++)
      for (size_t p = 0; p < P; p++) t[(b * P + p) * x->c + c] = n->fixed_mask[(b * x->c + c) * P + p];
  lam_status s = lam_mem_upload(m->ctx, n->aux, t, count);
  free(t);
  return s;
}

static lam_status dropout_fwd(lam_model *m, nn_node *n, int B, int train) {
  lam_ctx *ctx = m->ctx;
  const nn_tensor *x = nn_in(m, n, 0);
  size_t count = (size_t)B * nn_size(x);
  if (!train) return ctx->be->prim->copy_rows(ctx, m->fmt, 1, count, x->data, count, nn_out(m, n)->data, count);
  if (n->fixed_mask) LAM_TRY(upload_mask(m, n, B));
  else LAM_TRY(ctx->be->prim->dropout_mask(ctx, count, n->a.dropout.p, m->seed + (uint64_t)nn_index(m, n) * 0x9E3779B97F4A7C15ull,
                                     m->rng_ctr + 1, n->aux));
  return ctx->be->prim->mask_scale(ctx, m->fmt, count, x->data, n->aux, 1.0f / (1.0f - n->a.dropout.p), nn_out(m, n)->data);
}
static lam_status dropout_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *y = nn_out(m, n);
  void *din = nn_din(m, n, 0);
  if (!din) return LAM_OK;
  return m->ctx->be->prim->mask_scale(m->ctx, m->fmt, (size_t)B * nn_size(y), y->grad, n->aux, 1.0f / (1.0f - n->a.dropout.p), din);
}
static size_t dropout_aux(const lam_model *m, const nn_node *n, int B) { return (size_t)B * nn_size(&m->tensor[n->out]); }
const nn_op nn_op_dropout = {NN_NAMES("dropout"), .parse = dropout_parse, .fwd = dropout_fwd, .bwd = dropout_bwd,
                             .aux_bytes = dropout_aux, .macs = act_macs, .flags = NN_FLAT_OK, .usage = "dropout P",
                             .about = "in training, each value zeroed with probability P, the rest scaled by "
                                      "1/(1-P)",
                             .prims = NN_PRIMS(LAM_PRIM_dropout_mask, LAM_PRIM_mask_scale, LAM_PRIM_copy_rows)};
