/* graph.c — the graph's passes and drivers: which tensors need gradients, which gradient writes add
 * rather than store (a tensor read by several nodes gets the sum), the fusion pass (conv -> relu ->
 * maxpool where each intermediate has one reader), and forward, loss and backward over the nodes in
 * topological order (the spec's order). */
#include <string.h>

#include "nn.h"

static int root(const lam_model *m, int t) {
  while (m->tensor[t].view_of >= 0) t = m->tensor[t].view_of;
  return t;
}

int nn_readers(const lam_model *m, int t, int *last) {
  int r = 0;
  for (int i = 0; i < m->nnodes; i++)
    for (int j = 0; j < m->node[i].nin; j++)
      if (m->node[i].in[j] == t) {
        r++;
        if (last) *last = i;
      }
  return r;
}

static int is_act(const nn_op *op) { return (op->flags & NN_ACT) != 0; }

lam_fmt nn_choose_fmt(const lam_model *m) {
  if (m->layout == 1) return LAM_FMT_NCHW;
  int nhwc = m->layout == 2;
  /* a conv of its own, by the graph's shape (whatever LAMINA_FUSE says: the blocks' kernels are NCHW, and a
   * model that has only blocks keeps that layout to compare them with the plain ops); LAMINA_CONV=im2col is
   * an NCHW path */
  if (!m->layout && m->ctx->be->nhwc_convs && !m->conv_im2col)
    for (int i = 0, a[2]; i < m->nnodes && !nhwc; i++)
      nhwc = m->node[i].op == &nn_op_convt || (m->node[i].op == &nn_op_conv && !nn_conv_block_shape(m, i, a));
  return lam_fmt_of(nhwc ? nn_half(m) : LAM_DT_F32, nhwc);
}

/* The fusions, in the order they are tried (a node that one takes is not offered to the next). */
static const nn_fusion *const fusions[] = {&nn_fusion_bn_add_act, &nn_fusion_bn_act_pool, &nn_fusion_bn_act,
                                           &nn_fusion_conv_block};

/* Each node that heads a fusion's pattern (its match) runs the nodes it absorbs, unless LAMINA_FUSE=0: their
 * outputs but the last are never stored. */
static void fuse(lam_model *m) {
  if (!m->fuse) return;
  for (size_t f = 0; f < sizeof fusions / sizeof fusions[0]; f++)
    for (int i = 0; i < m->nnodes; i++) {
      nn_node *n = &m->node[i];
      int a[2], k;
      if (n->absorbed || n->fusion || !(k = fusions[f]->match(m, i, a))) continue;
      n->fusion = fusions[f], n->fuse = fusions[f]->kind, n->tail = a[k - 1];
      for (int j = 0; j < k; j++) {
        m->node[a[j]].absorbed = 1, m->node[a[j]].fused_by = i;
        m->tensor[j ? m->node[a[j - 1]].out : n->out].fused_away = 1;
      }
      if (fusions[f]->setup) fusions[f]->setup(m, n);
    }
}

/* A training BatchNorm whose input a conv wrote takes its batch statistics from that conv (m->conv_stats: 1 where
 * the backend can sum them in the conv's own kernel in this format, 2 wherever it runs conv2d_fwd_stats): the
 * BatchNorm's pass over its input for them is then not run. Not with sync BN, whose sums come from every rank. */
static void pair_conv_stats(lam_model *m) {
  const lam_backend *be = m->ctx->be;
  const char *why = "";
  if (!m->fuse || !m->conv_stats || m->sync_sum) return;
  if (m->conv_stats == 1 && !(be->conv_stats_one_pass && be->conv_stats_one_pass(m->fmt))) return;
  if (be->prim->supports && !be->prim->supports(LAM_PRIM_conv2d_fwd_stats, m->fmt, &why)) return;
  for (int i = 0; i < m->nnodes; i++) {
    nn_node *bn = &m->node[i];
    const nn_tensor *x = &m->tensor[bn->in[0]];
    if (bn->op != &nn_op_bn || bn->absorbed || bn->in[0] == 0 || x->view_of >= 0 || x->fused_away) continue;
    nn_node *c = &m->node[x->producer];
    if (c->out != bn->in[0] || c->stats_for || !nn_conv_can_sum_stats(m, c)) continue;
    c->stats_for = i + 1, bn->stats_from = x->producer + 1;
  }
}

/* An activation whose backward reads only its output (relu, leakyrelu, tanh, sigmoid) runs in place where
 * its input has no other reader and nobody else needs that input's values: its output is the input's memory,
 * its backward turns the output's gradient into the input's in the same buffer. */
static void run_in_place(lam_model *m) {
  if (!m->fuse) return;
  for (int i = 0; i < m->nnodes; i++) {
    nn_node *n = &m->node[i];
    nn_tensor *x = &m->tensor[n->in[0]];
    if (n->absorbed || !is_act(n->op) || !(n->op->flags & NN_OUT_BWD) || n->in[0] == 0 || x->view_of >= 0 ||
        x->fused_away || n->in[0] == m->output || nn_readers(m, n->in[0], NULL) != 1)
      continue;
    const nn_node *p = &m->node[x->producer];
    if (p->absorbed || p->fuse || p->op->flags & NN_OUT_BWD) continue; /* its backward reads x's values */
    n->inplace = 1;
    m->tensor[n->out].view_of = n->in[0];
  }
}

static void finish(lam_model *m, lam_fmt f) {
  m->fmt = f;
  for (int t = 1; t < m->ntensors; t++) m->tensor[t].view_of = -1, m->tensor[t].fused_away = 0;
  for (int i = 0; i < m->nnodes; i++) {
    nn_node *n = &m->node[i];
    n->fuse = n->tail = n->absorbed = n->fused_by = n->inplace = 0;
    n->fusion = NULL;
    n->accum[0] = n->accum[1] = 0;
    n->stats_for = n->stats_from = n->stats_one_pass = 0;
    int need = n->nw + n->nb > 0;
    for (int j = 0; j < n->nin; j++) need |= m->tensor[n->in[j]].need_grad;
    m->tensor[n->out].need_grad = need;
    /* flatten is its input's memory, unless that is an NHWC image: it then lays it out in NCHW order, as a
     * dense layer's weights (PyTorch's) read it */
    const nn_tensor *x = &m->tensor[n->in[0]];
    n->view = (n->op->flags & NN_VIEW) && !(f.nhwc && x->c > 1 && x->h * x->w > 1);
    if (n->view) m->tensor[n->out].view_of = n->in[0];
  }
  fuse(m);
  pair_conv_stats(m);
  for (int i = 0; i < m->nnodes; i++) /* conv2d_bwd_filter reads the input of a conv on its own */
    m->node[i].keep_input = (m->node[i].op == &nn_op_conv || m->node[i].op == &nn_op_convt) && !m->node[i].fuse;
  run_in_place(m);
  /* Backward runs the nodes last to first, each writing its inputs' gradients in slot order: the first
   * write into a tensor's gradient (views and in-place outputs share their base's) stores, every later one
   * adds. */
  int written[NN_MAX_NODES + 1] = {0};
  for (int i = m->nnodes - 1; i >= 0; i--) {
    nn_node *n = &m->node[i];
    if (n->view || n->inplace) continue; /* its gradient is its input's memory */
    for (int j = 0; j < n->nin; j++) {
      int r = root(m, n->in[j]);
      n->accum[j] = written[r];
      written[r] = 1;
    }
  }
}

/* The primitives the graph itself calls beside its nodes': the batch in (on the input's planes), the loss (on the
 * output's), and the step's own (the gradient adds, the 16-bit weights, zeroing, dropout's counter). */
static const int *const input_prims = NN_PRIMS(LAM_PRIM_gather, LAM_PRIM_convert);
static const int *const loss_prims = NN_PRIMS(LAM_PRIM_xent, LAM_PRIM_label_count);
static const int *const step_prims = NN_PRIMS(LAM_PRIM_zero, LAM_PRIM_add, LAM_PRIM_to_half, LAM_PRIM_step_advance);

/* Whether the backend runs each primitive of list in format f on a tensor of P pixels a plane (one pixel: NCHW and
 * NHWC lie alike, so it is asked as NHWC); the error names who calls it. */
static lam_status check_prims(const lam_model *m, const int *list, lam_fmt f, int P, const char *who, int layer,
                              int word) {
  const lam_prim_ops *po = m->ctx->be->prim;
  if (!list || !po->supports) return LAM_OK;
  if (P == 1) f.nhwc = 1;
  for (; *list >= 0; list++) {
    if ((*list & NN_RANKED) && !m->sync_sum) continue;
    const int prim = *list & ~NN_RANKED;
    const char *why = "";
    if (po->supports(prim, f, &why)) continue;
    const char *dt = f.dt == LAM_DT_F32 ? "float32" : f.dt == LAM_DT_BF16 ? "bfloat16" : "float16";
    if (layer >= 0)
      return LAM_FAIL(LAM_ERR_UNSUPPORTED,
                      "layer %d (%s, word %d of the spec): the %s backend does not run %s on %s %s activations: %s",
                      layer + 1, who, word + 1, m->ctx->be->name, lam_prim_name(prim), f.nhwc ? "NHWC" : "NCHW", dt, why);
    return LAM_FAIL(LAM_ERR_UNSUPPORTED, "%s: the %s backend does not run %s on %s %s activations: %s", who,
                    m->ctx->be->name, lam_prim_name(prim), f.nhwc ? "NHWC" : "NCHW", dt, why);
  }
  return LAM_OK;
}

/* Asks the backend about every primitive the finished graph calls (its nodes', its fusions', its own). */
static lam_status check_graph(const lam_model *m) {
  const lam_fmt f = m->fmt;
  for (int i = 0; i < m->nnodes; i++) {
    const nn_node *n = &m->node[i];
    const nn_tensor *x = &m->tensor[n->in[0]];
    const int P = x->h * x->w;
    if (n->fusion) LAM_TRY(check_prims(m, n->fusion->prims, f, P, n->fusion->name, i, n->word));
    if (!n->absorbed || !n->fusion) LAM_TRY(check_prims(m, n->op->prims, f, P, n->op->name, i, n->word));
  }
  const nn_tensor *out = &m->tensor[m->output];
  LAM_TRY(check_prims(m, input_prims, f, m->tensor[0].h * m->tensor[0].w, "the model's input", -1, -1));
  LAM_TRY(check_prims(m, loss_prims, f, out->h * out->w, "the model's loss", -1, -1));
  return check_prims(m, step_prims, f, out->h * out->w, "the training step", -1, -1);
}

lam_status nn_graph_finish(lam_model *m, lam_fmt f) {
  finish(m, f);
  return check_graph(m);
}

void *nn_din(lam_model *m, const nn_node *n, int i) {
  const nn_tensor *t = &m->tensor[n->in[i]];
  if (!t->need_grad) return NULL;
  return n->accum[i] && !nn_adds(n, i) ? n->gtmp[i] : t->grad;
}

lam_status nn_din_done(lam_model *m, const nn_node *n, int i, int B) {
  nn_tensor *t = &m->tensor[n->in[i]];
  if (!t->need_grad || !n->accum[i] || nn_adds(n, i)) return LAM_OK;
  size_t count = (size_t)B * nn_size(t); /* B: the node's rows */
  LAM_TRY(m->ctx->be->prim->add(m->ctx, m->fmt, count, t->grad, n->gtmp[i], t->grad));
  NN_PROF(m, "grad_add", nn_index(m, n) + 1);
  return LAM_OK;
}

int nn_has_dropout(const lam_model *m) {
  for (int i = 0; i < m->nnodes; i++)
    if (m->node[i].op == &nn_op_dropout) return 1;
  return 0;
}

lam_status nn_forward(lam_model *m, int B, int train) {
  if (train && nn_has_dropout(m)) LAM_TRY(m->ctx->be->prim->step_advance(m->ctx, m->rng_ctr, 0, NULL)); /* a new mask per step */
  if (m->fmt.dt != LAM_DT_F32) { /* the weights as 16-bit activations' layers read them, rounded once a step */
    LAM_TRY(m->ctx->be->prim->to_half(m->ctx, m->fmt.dt, m->nparams, m->params, m->params_lo));
    NN_PROF(m, "weights_half", 0);
  }
  for (int i = 0; i < m->nnodes; i++) {
    nn_node *n = &m->node[i];
    if (n->absorbed) continue;
    const int R = nn_rows(m, n, B);
    if (n->fusion) {
      LAM_TRY(n->fusion->fwd(m, n, R, train));
      if (n->fusion->fwd_mark) NN_PROF(m, n->fusion->fwd_mark, i + 1); /* else each part marked itself */
      continue;
    }
    LAM_TRY(n->op->fwd(m, n, R, train));
    if (!n->view && !(n->op->flags & NN_OWN_MARKS)) NN_PROF(m, n->op->fwd_mark, i + 1);
  }
  return LAM_OK;
}

lam_status nn_loss(lam_model *m, int B, int backward, float smoothing, uint8_t *pred) {
  lam_ctx *ctx = m->ctx;
  nn_tensor *out = &m->tensor[m->output];
  int P = out->h * out->w;
  /* the mean over the labels counted: B for a class per image; per pixel, those not ignored (counted on the
   * device first, so a captured step needs no host value) */
  float scale = P == 1 ? 1.0f / (float)B : 1.0f;
  const float *count = P == 1 ? NULL : m->count;
  if (backward && count) LAM_TRY(ctx->be->prim->label_count(ctx, (size_t)B * P, m->y, m->count));
  LAM_TRY(ctx->be->prim->xent(ctx, m->fmt, B, out->c, P, out->data, m->y, backward ? out->grad : NULL, scale,
                        backward ? m->lscale : NULL, count, smoothing, m->stats, pred));
  NN_PROF(m, "softmax_xent", 0);
  return LAM_OK;
}

lam_status nn_backward(lam_model *m, int B) {
  for (int i = m->nnodes - 1; i >= 0; i--) {
    nn_node *n = &m->node[i];
    if (n->absorbed || n->view) continue;
    int any = n->nw + n->nb > 0;
    for (int j = 0; j < n->nin; j++) any |= m->tensor[n->in[j]].need_grad;
    if (!any) continue;
    const int R = nn_rows(m, n, B);
    if (n->fusion) {
      LAM_TRY(n->fusion->bwd(m, n, R));
      if (n->fusion->bwd_mark) NN_PROF(m, n->fusion->bwd_mark, i + 1);
    } else {
      LAM_TRY(n->op->bwd(m, n, R));
      if (!(n->op->flags & NN_OWN_MARKS)) NN_PROF(m, n->op->bwd_mark, i + 1);
    }
    for (int j = 0; j < n->nin; j++) LAM_TRY(nn_din_done(m, n, j, R));
    if (m->grad_ready && n->nw + n->nb > 0) LAM_TRY(m->grad_ready(m->grad_user, n->w_off));
  }
  return LAM_OK;
}
