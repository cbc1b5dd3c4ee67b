/* norm.c — BatchNorm over each channel (PyTorch's BatchNorm2d, or BatchNorm1d on a flat input): batch
 * statistics in training (the running ones updated with PyTorch's momentum and unbiased variance),
 * running statistics in evaluation. gamma and beta are its parameters (initialized to 1 and 0), the
 * running mean and variance its state (0 and 1). Forward saves the batch's mean and 1/std (aux). */
#include "../nn.h"

/* bn [momentum M] [eps E] */
static lam_status bn_parse(nn_parse *p, lam_model *m, nn_node *n) {
  n->momentum = 0.1f, n->eps = 1e-5f;
  for (int j = 1; j <= p->nargs; j += 2) {
    int is_eps = nn_word_is(p, j, "eps");
    if (!is_eps && !nn_word_is(p, j, "momentum"))
      return nn_spec_error(p, j, "bn's options are 'momentum M' (default 0.1) and 'eps E' (default 1e-5)");
    LAM_TRY(nn_word_float(p, j + 1, is_eps ? 1e-12 : 0.0, is_eps ? 1.0 : 1.0, is_eps ? "eps" : "momentum",
                          is_eps ? &n->eps : &n->momentum));
  }
  const nn_tensor *x = nn_in(m, n, 0);
  nn_tensor *y = nn_out(m, n);
  y->c = x->c, y->h = x->h, y->w = x->w, y->flat = x->flat;
  n->nw = n->nb = (size_t)x->c;
  n->ns = 2 * (size_t)x->c;
  return LAM_OK;
}
static void bn_init(const lam_model *m, const nn_node *n, void *rng, float *params, float *state) {
  (void)m, (void)rng;
  for (size_t c = 0; c < n->nw; c++) {
    params[n->w_off + c] = 1.0f, params[n->b_off + c] = 0.0f;
    state[n->s_off + c] = 0.0f, state[n->s_off + n->nw + c] = 1.0f;
  }
}
static lam_status bn_fwd(lam_model *m, nn_node *n, int B, int train) {
  const nn_tensor *x = nn_in(m, n, 0);
  float *mean = n->aux, *invstd = mean + x->c, *run = m->state + n->s_off;
  return m->ctx->be->bn_fwd(m->ctx, m->fmt, B, x->c, x->h * x->w, x->data, m->params + n->w_off, m->params + n->b_off,
                            nn_out(m, n)->data, mean, invstd, run, run + x->c, n->momentum, n->eps, train);
}
static lam_status bn_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *x = nn_in(m, n, 0);
  const float *mean = n->aux, *invstd = mean + x->c;
  void *din = nn_din(m, n, 0);
  /* the input gradient is needed for dgamma's and dbeta's sums anyway: without one, use scratch */
  return m->ctx->be->bn_bwd(m->ctx, m->fmt, B, x->c, x->h * x->w, x->data, nn_out(m, n)->grad, m->params + n->w_off, mean,
                            invstd, din ? din : m->scratch, m->grads + n->w_off, m->grads + n->b_off);
}
/* With the activation after it (the graph's fusion pass): y = act(bn(x)) in one pass, the BatchNorm's own
 * output never stored; backward recomputes what it needs from x and y. */
lam_status nn_bn_act_fwd(lam_model *m, nn_node *n, int B, int train) {
  const nn_tensor *x = nn_in(m, n, 0);
  const nn_node *act = &m->node[n->pool];
  float *mean = n->aux, *invstd = mean + x->c, *run = m->state + n->s_off;
  return m->ctx->be->bn_act_fwd(m->ctx, m->fmt, B, x->c, x->h * x->w, act->act, act->alpha, x->data, m->params + n->w_off,
                                m->params + n->b_off, nn_out(m, act)->data, mean, invstd, run, run + x->c, n->momentum,
                                n->eps, train);
}

lam_status nn_bn_act_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *x = nn_in(m, n, 0);
  const nn_node *act = &m->node[n->pool];
  const nn_tensor *y = nn_out(m, act);
  const float *mean = n->aux, *invstd = mean + x->c;
  void *din = nn_din(m, n, 0);
  return m->ctx->be->bn_act_bwd(m->ctx, m->fmt, B, x->c, x->h * x->w, act->act, act->alpha, x->data, y->data, y->grad,
                                m->params + n->w_off, m->params + n->b_off, mean, invstd, din ? din : m->scratch,
                                m->grads + n->w_off, m->grads + n->b_off);
}

static size_t bn_aux(const lam_model *m, const nn_node *n, int B) {
  (void)B;
  return 2 * (size_t)m->tensor[n->in[0]].c * sizeof(float);
}
static size_t bn_scratch(const lam_model *m, const nn_node *n, int B) { /* room for an unwanted dx */
  return m->tensor[n->in[0]].need_grad ? 0 : ((size_t)B * nn_size(&m->tensor[n->in[0]]) * nn_esize(m) + 3) / 4;
}
static double bn_macs(const lam_model *m, const nn_node *n) { return 2.0 * nn_size(&m->tensor[n->out]); }
const nn_op nn_op_bn = {NN_NAMES("bn"), .parse = bn_parse, .init = bn_init, .fwd = bn_fwd, .bwd = bn_bwd,
                        .aux_bytes = bn_aux, .scratch_floats = bn_scratch, .macs = bn_macs,
                        .flags = NN_IN_BWD | NN_FLAT_OK};
