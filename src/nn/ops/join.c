/* join.c — the ops that read a second, labelled tensor: add @NAME (a residual: the current tensor plus
 * NAME, same shapes) and concat @NAME (channels of the current tensor, then NAME's: a U-Net's skip).
 * Their backward hands each input its part of the gradient. */
#include "../nn.h"

static lam_status join_parse(nn_parse *p, lam_model *m, nn_node *n) {
  int concat = n->op == &nn_op_concat;
  if (p->nargs != 1)
    return nn_spec_error(p, p->nargs ? 2 : 0, "%s takes @NAME, the label of an earlier layer's output, e.g. '%s @skip'",
                         n->op->name, n->op->name);
  LAM_TRY(nn_word_ref(p, m, 1, &n->in[1]));
  n->nin = 2;
  const nn_tensor *a = nn_in(m, n, 0), *b = nn_in(m, n, 1);
  nn_tensor *y = nn_out(m, n);
  if (concat) {
    if (a->h != b->h || a->w != b->w || a->flat != b->flat)
      return nn_spec_error(p, 1, "concat joins channels of images of one size, but the current tensor is %dx%dx%d and "
                                 "'%s' is %dx%dx%d", a->c, a->h, a->w, b->name, b->c, b->h, b->w);
    y->c = a->c + b->c;
  } else {
    if (a->c != b->c || a->h != b->h || a->w != b->w)
      return nn_spec_error(p, 1, "add needs equal shapes, but the current tensor is %dx%dx%d and '%s' is %dx%dx%d",
                           a->c, a->h, a->w, b->name, b->c, b->h, b->w);
    y->c = a->c;
  }
  y->h = a->h, y->w = a->w, y->flat = a->flat;
  return LAM_OK;
}

static lam_status add_fwd(lam_model *m, nn_node *n, int B, int train) {
  (void)train;
  size_t count = (size_t)B * nn_size(nn_out(m, n));
  return m->ctx->be->add(m->ctx, count, nn_in(m, n, 0)->data, nn_in(m, n, 1)->data, nn_out(m, n)->data);
}
static lam_status add_bwd(lam_model *m, nn_node *n, int B) {
  size_t count = (size_t)B * nn_size(nn_out(m, n));
  for (int i = 0; i < 2; i++) {
    float *din = nn_din(m, n, i), *dy = nn_out(m, n)->grad;
    if (din && nn_adds(n, i)) LAM_TRY(m->ctx->be->add(m->ctx, count, din, dy, din));
    else if (din) LAM_TRY(m->ctx->be->copy_rows(m->ctx, 1, count, dy, count, din, count));
  }
  return LAM_OK;
}
static double join_macs(const lam_model *m, const nn_node *n) { return (double)nn_size(&m->tensor[n->out]); }
const nn_op nn_op_add = {NN_NAMES("add"), .parse = join_parse, .fwd = add_fwd, .bwd = add_bwd, .macs = join_macs,
                         .flags = NN_FLAT_OK | NN_ADDS_GRAD};

/* y (B, ca + cb, P): per sample, a's channels then b's */
static lam_status concat_fwd(lam_model *m, nn_node *n, int B, int train) {
  (void)train;
  const nn_tensor *a = nn_in(m, n, 0), *b = nn_in(m, n, 1);
  nn_tensor *y = nn_out(m, n);
  size_t sa = nn_size(a), sb = nn_size(b), sy = nn_size(y);
  LAM_TRY(m->ctx->be->copy_rows(m->ctx, (size_t)B, sa, a->data, sa, y->data, sy));
  return m->ctx->be->copy_rows(m->ctx, (size_t)B, sb, b->data, sb, y->data + sa, sy);
}
static lam_status concat_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *a = nn_in(m, n, 0), *b = nn_in(m, n, 1);
  const nn_tensor *y = nn_out(m, n);
  size_t sa = nn_size(a), sb = nn_size(b), sy = nn_size(y);
  float *da = nn_din(m, n, 0), *db = nn_din(m, n, 1);
  if (da) LAM_TRY(m->ctx->be->copy_rows(m->ctx, (size_t)B, sa, y->grad, sy, da, sa));
  if (db) LAM_TRY(m->ctx->be->copy_rows(m->ctx, (size_t)B, sb, y->grad + sa, sy, db, sb));
  return LAM_OK;
}
const nn_op nn_op_concat = {NN_NAMES("concat"), .parse = join_parse, .fwd = concat_fwd, .bwd = concat_bwd,
                            .macs = join_macs, .flags = NN_FLAT_OK};
