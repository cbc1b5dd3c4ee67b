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
  if (a->t != b->t)
    return nn_spec_error(p, 1, "%s joins tensors of one clip length, but the current tensor has %d frames a sample and "
                         "'%s' %d (one is after a tpool or tcat)", n->op->name, a->t, b->name, b->t);
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
  return m->ctx->be->prim->add(m->ctx, m->fmt, count, nn_in(m, n, 0)->data, nn_in(m, n, 1)->data, nn_out(m, n)->data);
}
static lam_status add_bwd(lam_model *m, nn_node *n, int B) {
  size_t count = (size_t)B * nn_size(nn_out(m, n));
  for (int i = 0; i < 2; i++) {
    void *din = nn_din(m, n, i), *dy = nn_out(m, n)->grad;
    if (din && nn_adds(n, i)) LAM_TRY(m->ctx->be->prim->add(m->ctx, m->fmt, count, din, dy, din));
    else if (din) LAM_TRY(m->ctx->be->prim->copy_rows(m->ctx, m->fmt, 1, count, dy, count, din, count));
  }
  return LAM_OK;
}
static double join_macs(const lam_model *m, const nn_node *n) { return (double)nn_size(&m->tensor[n->out]); }
/* "@NAME": the tensor joined */
static void join_describe(const lam_model *m, const nn_node *n, char *buf, size_t size) {
  snprintf(buf, size, "@%s", m->tensor[n->in[1]].name);
}
const nn_op nn_op_add = {NN_NAMES("add"), .parse = join_parse, .fwd = add_fwd, .bwd = add_bwd, .macs = join_macs,
                         .flags = NN_FLAT_OK | NN_ADDS_GRAD, .usage = "add @NAME",
                         .about = "the current tensor plus NAME (a residual)", .describe = join_describe,
                         .prims = NN_PRIMS(LAM_PRIM_add, LAM_PRIM_copy_rows)};

/* A concat's copies: rows of a's values, then of b's, in y's rows. NCHW: a row is a sample (a's channels,
 * then b's, whole planes each); NHWC: a pixel (a's channels, then b's). */
typedef struct concat_rows {
  size_t rows, a, b, y; /* values of a row of a, b and y */
} concat_rows;
static concat_rows concat_shape(const lam_model *m, const nn_node *n, int B) {
  const nn_tensor *a = &m->tensor[n->in[0]], *b = &m->tensor[n->in[1]], *y = &m->tensor[n->out];
  if (m->fmt.nhwc) return (concat_rows){(size_t)B * y->h * y->w, (size_t)a->c, (size_t)b->c, (size_t)y->c};
  return (concat_rows){(size_t)B, nn_size(a), nn_size(b), nn_size(y)};
}

static lam_status concat_fwd(lam_model *m, nn_node *n, int B, int train) {
  (void)train;
  const concat_rows r = concat_shape(m, n, B);
  void *y = nn_out(m, n)->data;
  LAM_TRY(m->ctx->be->prim->copy_rows(m->ctx, m->fmt, r.rows, r.a, nn_in(m, n, 0)->data, r.a, y, r.y));
  return m->ctx->be->prim->copy_rows(m->ctx, m->fmt, r.rows, r.b, nn_in(m, n, 1)->data, r.b, nn_at(m, y, r.a), r.y);
}
static lam_status concat_bwd(lam_model *m, nn_node *n, int B) {
  const concat_rows r = concat_shape(m, n, B);
  void *dy = nn_out(m, n)->grad, *da = nn_din(m, n, 0), *db = nn_din(m, n, 1);
  if (da) LAM_TRY(m->ctx->be->prim->copy_rows(m->ctx, m->fmt, r.rows, r.a, dy, r.y, da, r.a));
  if (db) LAM_TRY(m->ctx->be->prim->copy_rows(m->ctx, m->fmt, r.rows, r.b, nn_at(m, dy, r.a), r.y, db, r.b));
  return LAM_OK;
}
const nn_op nn_op_concat = {NN_NAMES("concat"), .parse = join_parse, .fwd = concat_fwd, .bwd = concat_bwd,
                            .macs = join_macs, .flags = NN_FLAT_OK, .usage = "concat @NAME",
                            .about = "NAME's channels after the current tensor's (a skip)", .describe = join_describe,
                            .prims = NN_PRIMS(LAM_PRIM_copy_rows)};
