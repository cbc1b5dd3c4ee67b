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

static int readers(const lam_model *m, int t, int *last) {
  int r = 0;
  for (int i = 0; i < m->nnodes; i++)
    for (int j = 0; j < m->node[i].nin; j++)
      if (m->node[i].in[j] == t) {
        r++;
        if (last) *last = i;
      }
  return r;
}

static int is_act(const nn_op *op) {
  return op == &nn_op_relu || op == &nn_op_leakyrelu || op == &nn_op_gelu || op == &nn_op_tanh || op == &nn_op_sigmoid;
}

/* Fuses conv -> relu -> maxpool (windows that do not overlap) into the conv node, unless LAMINA_FUSE=0;
 * at the model's input with few taps as a direct convolution where the backend prefers it. Then
 * BatchNorm -> activation where the BatchNorm's output has that one reader: its output is never stored. */
static void fuse(lam_model *m) {
  if (!m->fuse) return;
  for (int i = 0; i + 1 < m->nnodes; i++) {
    nn_node *bn = &m->node[i];
    int r;
    if (bn->op != &nn_op_bn || readers(m, bn->out, &r) != 1 || !is_act(m->node[r].op) || bn->out == m->output) continue;
    nn_node *act = &m->node[r];
    bn->fuse = NN_FUSE_ACT;
    bn->pool = r;
    act->absorbed = 1;
    act->fused_by = i;
    m->tensor[bn->out].fused_away = 1;
  }
  for (int i = 0; i + 2 < m->nnodes; i++) {
    nn_node *c = &m->node[i];
    if (c->op != &nn_op_conv || c->absorbed) continue;
    int r1, r2;
    if (readers(m, c->out, &r1) != 1 || m->node[r1].op != &nn_op_relu) continue;
    nn_node *relu = &m->node[r1];
    if (readers(m, relu->out, &r2) != 1 || m->node[r2].op != &nn_op_maxpool) continue;
    nn_node *pool = &m->node[r2];
    if (pool->stride != pool->k) continue;
    c->fuse = NN_FUSE_POOL;
    const nn_tensor *x = &m->tensor[c->in[0]];
    int want_direct = m->fuse == 2 || (m->fuse == 3 && m->ctx->be->direct_first_conv);
    if (want_direct && c->in[0] == 0 && !c->nobias && x->c * c->k * c->k <= LAM_DIRECT_TAPS) c->fuse = NN_FUSE_DIRECT;
    c->pool = r2;
    c->keep_input = 0; /* the block keeps its im2col (or reads the model's input) */
    relu->absorbed = pool->absorbed = 1;
    relu->fused_by = pool->fused_by = i;
    m->tensor[c->out].fused_away = m->tensor[relu->out].fused_away = 1;
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
        x->fused_away || n->in[0] == m->output || readers(m, n->in[0], NULL) != 1)
      continue;
    const nn_node *p = &m->node[x->producer];
    if (p->absorbed || p->fuse || p->op->flags & NN_OUT_BWD) continue; /* its backward reads x's values */
    n->inplace = 1;
    m->tensor[n->out].view_of = n->in[0];
  }
}

void nn_graph_finish(lam_model *m) {
  for (int i = 0; i < m->nnodes; i++) {
    nn_node *n = &m->node[i];
    int need = n->nw + n->nb > 0;
    for (int j = 0; j < n->nin; j++) need |= m->tensor[n->in[j]].need_grad;
    m->tensor[n->out].need_grad = need;
  }
  fuse(m);
  run_in_place(m);
  /* Backward runs the nodes last to first, each writing its inputs' gradients in slot order: the first
   * write into a tensor's gradient (views and in-place outputs share their base's) stores, every later one
   * adds. */
  int written[NN_MAX_NODES + 1] = {0};
  for (int i = m->nnodes - 1; i >= 0; i--) {
    nn_node *n = &m->node[i];
    if (n->op->flags & NN_VIEW || n->inplace) continue; /* its gradient is its input's memory */
    for (int j = 0; j < n->nin; j++) {
      int r = root(m, n->in[j]);
      n->accum[j] = written[r];
      written[r] = 1;
    }
  }
}

float *nn_din(lam_model *m, const nn_node *n, int i) {
  const nn_tensor *t = &m->tensor[n->in[i]];
  if (!t->need_grad) return NULL;
  return n->accum[i] && !nn_adds(n, i) ? m->gtmp + (size_t)i * m->gtmp_stride : t->grad;
}

lam_status nn_din_done(lam_model *m, const nn_node *n, int i, int B) {
  nn_tensor *t = &m->tensor[n->in[i]];
  if (!t->need_grad || !n->accum[i] || nn_adds(n, i)) return LAM_OK;
  size_t count = (size_t)B * nn_size(t);
  LAM_TRY(m->ctx->be->add(m->ctx, count, t->grad, m->gtmp + (size_t)i * m->gtmp_stride, t->grad));
  NN_PROF(m, "grad_add", nn_index(m, n) + 1);
  return LAM_OK;
}

static int has_dropout(const lam_model *m) {
  for (int i = 0; i < m->nnodes; i++)
    if (m->node[i].op == &nn_op_dropout) return 1;
  return 0;
}

lam_status nn_forward(lam_model *m, int B, int train) {
  if (train && has_dropout(m)) LAM_TRY(m->ctx->be->step_advance(m->ctx, m->rng_ctr, 0, NULL)); /* a new mask per step */
  for (int i = 0; i < m->nnodes; i++) {
    nn_node *n = &m->node[i];
    if (n->absorbed) continue;
    if (n->fuse == NN_FUSE_ACT) {
      LAM_TRY(nn_bn_act_fwd(m, n, B, train));
      NN_PROF(m, "bn_act.fwd", i + 1);
      continue;
    }
    if (n->fuse) {
      LAM_TRY(nn_conv_block_fwd(m, n, B));
      continue; /* each part marked itself */
    }
    LAM_TRY(n->op->fwd(m, n, B, train));
    if (!(n->op->flags & (NN_VIEW | NN_OWN_MARKS))) NN_PROF(m, n->op->fwd_mark, i + 1);
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
  if (backward && count) LAM_TRY(ctx->be->label_count(ctx, (size_t)B * P, m->y, m->count));
  LAM_TRY(ctx->be->xent(ctx, B, out->c, P, out->data, m->y, backward ? out->grad : NULL, scale, count, smoothing,
                        m->stats, pred));
  NN_PROF(m, "softmax_xent", 0);
  return LAM_OK;
}

lam_status nn_backward(lam_model *m, int B) {
  for (int i = m->nnodes - 1; i >= 0; i--) {
    nn_node *n = &m->node[i];
    if (n->absorbed || n->op->flags & NN_VIEW) continue;
    int any = n->nw + n->nb > 0;
    for (int j = 0; j < n->nin; j++) any |= m->tensor[n->in[j]].need_grad;
    if (!any) continue;
    if (n->fuse == NN_FUSE_ACT) {
      LAM_TRY(nn_bn_act_bwd(m, n, B));
      NN_PROF(m, "bn_act.bwd", i + 1);
    } else if (n->fuse) {
      LAM_TRY(nn_conv_block_bwd(m, n, B));
    } else {
      LAM_TRY(n->op->bwd(m, n, B));
      if (!(n->op->flags & NN_OWN_MARKS)) NN_PROF(m, n->op->bwd_mark, i + 1);
    }
    for (int j = 0; j < n->nin; j++) LAM_TRY(nn_din_done(m, n, j, B));
  }
  return LAM_OK;
}
