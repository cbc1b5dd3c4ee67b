/* norm.c — the normalizations. BatchNorm over each channel (PyTorch's BatchNorm2d, or BatchNorm1d on a flat input): batch
 * statistics in training (the running ones updated with PyTorch's momentum and unbiased variance),
 * running statistics in evaluation. gamma and beta are its parameters (initialized to 1 and 0), the
 * running mean and variance its state (0 and 1). Forward saves the batch's mean and 1/std (aux). With sync
 * BN (m->sync_sum) the statistics are all ranks' (PyTorch's SyncBatchNorm): forward sums x and x^2 over
 * the ranks and normalizes with those (bn_fwd's evaluation path, given them as the running statistics);
 * backward sums dy and dy xhat over the ranks before dx — aux then also holds those sums and the var. */
#include "../nn.h"

/* bn [momentum M] [eps E] */
static lam_status bn_parse(nn_parse *p, lam_model *m, nn_node *n) {
  n->a.bn.momentum = 0.1f, n->a.bn.eps = 1e-5f;
  for (int j = 1; j <= p->nargs; j += 2) {
    int is_eps = nn_word_is(p, j, "eps");
    if (!is_eps && !nn_word_is(p, j, "momentum"))
      return nn_spec_error(p, j, "bn's options are 'momentum M' (default 0.1) and 'eps E' (default 1e-5)");
    LAM_TRY(nn_word_float(p, j + 1, is_eps ? 1e-12 : 0.0, is_eps ? 1.0 : 1.0, is_eps ? "eps" : "momentum",
                          is_eps ? &n->a.bn.eps : &n->a.bn.momentum));
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
/* Sync BN's forward: this rank's sum(x), sum(x^2) summed over the ranks, the statistics of the global batch
 * from them (the running ones updated alike on every rank), then the normalization with those. */
static lam_status bn_sync_fwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *x = nn_in(m, n, 0);
  const lam_backend *be = m->ctx->be;
  const int C = x->c, P = x->h * x->w;
  float *mean = n->aux, *invstd = mean + C, *sums = invstd + C, *var = sums + 2 * C, *run = m->state + n->s_off;
  LAM_TRY(be->prim->bn_sums(m->ctx, m->fmt, B, C, P, x->data, NULL, NULL, NULL, sums, NULL, NULL));
  LAM_TRY(m->sync_sum(m->sync_user, sums, 2 * (size_t)C, 1.0f));
  const double rows = (double)m->sync_batch * x->t; /* the global batch's rows: frames of clips are rows */
  LAM_TRY(be->prim->bn_sync_stats(m->ctx, C, rows * P, sums, n->a.bn.eps, n->a.bn.momentum, mean, invstd, var, run,
                            run + C));
  return be->prim->bn_fwd(m->ctx, m->fmt, B, C, P, x->data, m->params + n->w_off, m->params + n->b_off, nn_out(m, n)->data,
                    NULL, NULL, mean, var, n->a.bn.momentum, n->a.bn.eps, 0);
}
/* Its backward: dgamma, dbeta from this rank's sums (the gradients are summed over the ranks later, as every
 * parameter's); dx from the sums of all ranks, each weighted by its share of the batch as its loss is. */
static lam_status bn_sync_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *x = nn_in(m, n, 0);
  const lam_backend *be = m->ctx->be;
  const int C = x->c, P = x->h * x->w;
  const float *mean = n->aux, *invstd = mean + C, *gamma = m->params + n->w_off;
  float *sums = (float *)invstd + C;
  const void *dy = nn_out(m, n)->grad;
  void *din = nn_din(m, n, 0);
  LAM_TRY(be->prim->bn_sums(m->ctx, m->fmt, B, C, P, x->data, dy, mean, invstd, sums, m->grads + n->w_off,
                      m->grads + n->b_off));
  if (!din) return LAM_OK; /* alike on every rank: the same graph */
  const double rows = (double)m->sync_batch * x->t; /* B is this rank's rows */
  LAM_TRY(m->sync_sum(m->sync_user, sums, 2 * (size_t)C, (float)((double)B / rows)));
  return be->prim->bn_sync_dx(m->ctx, m->fmt, B, C, P, x->data, dy, gamma, mean, invstd, sums, (double)B * P, din);
}

/* Training with the statistics its conv summed (stats_from: the conv's aux holds sum(x), sum(x^2)): mean, invstd
 * and the biased var (aux) from them, the running ones updated, as sync BN does with the ranks' sums; the
 * normalization is then the evaluation path's with those. */
static lam_status bn_given_stats(lam_model *m, nn_node *n, int B, float **mean, float **var) {
  const nn_tensor *x = nn_in(m, n, 0);
  const int C = x->c;
  float *run = m->state + n->s_off;
  *mean = n->aux, *var = *mean + 2 * C;
  return m->ctx->be->prim->bn_sync_stats(m->ctx, C, (double)B * x->h * x->w, m->node[n->stats_from - 1].aux,
                                         n->a.bn.eps, n->a.bn.momentum, *mean, *mean + C, *var, run, run + C);
}
static lam_status bn_fwd(lam_model *m, nn_node *n, int B, int train) {
  if (train && m->sync_sum) return bn_sync_fwd(m, n, B);
  const nn_tensor *x = nn_in(m, n, 0);
  float *mean = n->aux, *invstd = mean + x->c, *run = m->state + n->s_off;
  if (train && n->stats_from) {
    float *mu, *var;
    LAM_TRY(bn_given_stats(m, n, B, &mu, &var));
    return m->ctx->be->prim->bn_fwd(m->ctx, m->fmt, B, x->c, x->h * x->w, x->data, m->params + n->w_off,
                                    m->params + n->b_off, nn_out(m, n)->data, NULL, NULL, mu, var, n->a.bn.momentum,
                                    n->a.bn.eps, 0);
  }
  return m->ctx->be->prim->bn_fwd(m->ctx, m->fmt, B, x->c, x->h * x->w, x->data, m->params + n->w_off, m->params + n->b_off,
                            nn_out(m, n)->data, mean, invstd, run, run + x->c, n->a.bn.momentum, n->a.bn.eps, train);
}
static lam_status bn_bwd(lam_model *m, nn_node *n, int B) {
  if (m->sync_sum) return bn_sync_bwd(m, n, B);
  const nn_tensor *x = nn_in(m, n, 0);
  const float *mean = n->aux, *invstd = mean + x->c;
  void *din = nn_din(m, n, 0);
  /* the input gradient is needed for dgamma's and dbeta's sums anyway: without one, use scratch */
  return m->ctx->be->prim->bn_bwd(m->ctx, m->fmt, B, x->c, x->h * x->w, x->data, nn_out(m, n)->grad, m->params + n->w_off, mean,
                            invstd, din ? din : m->scratch, m->grads + n->w_off, m->grads + n->b_off);
}
/* With the activation after it (the graph's fusion pass): y = act(bn(x)) in one pass, the BatchNorm's own
 * output never stored; backward recomputes what it needs from x and y. */
/* y = act(bn(x) [+ r]): its own statistics, or (stats_from) those its conv summed */
static lam_status bn_act_run(lam_model *m, nn_node *n, int B, int train, const void *r) {
  const nn_tensor *x = nn_in(m, n, 0);
  const nn_node *act = &m->node[n->tail];
  float *mean = n->aux, *invstd = mean + x->c, *run = m->state + n->s_off, *run_var = run + x->c;
  if (train && n->stats_from) {
    LAM_TRY(bn_given_stats(m, n, B, &run, &run_var));
    mean = invstd = NULL, train = 0;
  }
  return m->ctx->be->prim->bn_act_fwd(m->ctx, m->fmt, B, x->c, x->h * x->w, act->a.act.kind, act->a.act.alpha, x->data, r,
                                m->params + n->w_off, m->params + n->b_off, nn_out(m, act)->data, mean, invstd, run, run_var,
                                n->a.bn.momentum, n->a.bn.eps, train);
}
static lam_status bn_act_fwd(lam_model *m, nn_node *n, int B, int train) { return bn_act_run(m, n, B, train, NULL); }

static lam_status bn_act_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *x = nn_in(m, n, 0);
  const nn_node *act = &m->node[n->tail];
  const nn_tensor *y = nn_out(m, act);
  const float *mean = n->aux, *invstd = mean + x->c;
  void *din = nn_din(m, n, 0);
  return m->ctx->be->prim->bn_act_bwd(m->ctx, m->fmt, B, x->c, x->h * x->w, act->a.act.kind, act->a.act.alpha, x->data, y->data, y->grad,
                                m->params + n->w_off, m->params + n->b_off, mean, invstd, din ? din : m->scratch, NULL,
                                0, m->grads + n->w_off, m->grads + n->b_off);
}
/* A BatchNorm whose output one activation reads, and is not the model's (nor sync BN's: its statistics come in
 * parts) */
static int bn_act_match(const lam_model *m, int i, int a[1]) {
  const nn_node *bn = &m->node[i];
  return bn->op == &nn_op_bn && !m->sync_sum && bn->out != m->output && nn_readers(m, bn->out, &a[0]) == 1 &&
         (m->node[a[0]].op->flags & NN_ACT);
}
const nn_fusion nn_fusion_bn_act = {.name = "bn_act", .fwd_mark = "bn_act.fwd", .bwd_mark = "bn_act.bwd",
                                    .kind = NN_FUSE_ACT, .match = bn_act_match, .fwd = bn_act_fwd, .bwd = bn_act_bwd,
                                    .prims = NN_PRIMS(LAM_PRIM_bn_act_fwd, LAM_PRIM_bn_act_bwd)};

/* A BatchNorm, the residual add after it and that sum's activation (a residual block's end: "bn, add @r, relu"):
 * y = act(bn(x) + r) in one pass, neither the BatchNorm's output nor the sum stored. Backward forms dz = dy act'(y),
 * hands it to r's gradient (the add's: written or added as the add would) and runs BatchNorm's backward on it. The
 * three nodes follow each other (so the add's gradient writes keep their order among the other readers of r), and the
 * activation reads y in its backward (not gelu, which would need r again). */
static const nn_node *fused_add(const lam_model *m, const nn_node *n) { return &m->node[n->tail - 1]; }
static int residual_slot(const lam_model *m, const nn_node *n) { return fused_add(m, n)->in[0] == n->out ? 1 : 0; }
static lam_status bn_add_act_fwd(lam_model *m, nn_node *n, int B, int train) {
  return bn_act_run(m, n, B, train, m->tensor[fused_add(m, n)->in[residual_slot(m, n)]].data);
}
static lam_status bn_add_act_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *x = nn_in(m, n, 0);
  const nn_node *act = &m->node[n->tail], *add = fused_add(m, n);
  const nn_tensor *y = nn_out(m, act);
  const int j = residual_slot(m, n);
  const float *mean = n->aux, *invstd = mean + x->c;
  void *din = nn_din(m, n, 0), *dr = nn_din(m, add, j); /* the add writes its gradients itself (NN_ADDS_GRAD) */
  return m->ctx->be->prim->bn_act_bwd(m->ctx, m->fmt, B, x->c, x->h * x->w, act->a.act.kind, act->a.act.alpha, x->data, y->data, y->grad,
                                m->params + n->w_off, m->params + n->b_off, mean, invstd, din ? din : m->scratch, dr,
                                dr ? nn_adds(add, j) : 0, m->grads + n->w_off, m->grads + n->b_off);
}
static int bn_add_act_match(const lam_model *m, int i, int a[2]) {
  const nn_node *bn = &m->node[i];
  if (bn->op != &nn_op_bn || m->sync_sum || bn->out == m->output || i + 2 >= m->nnodes) return 0;
  if (nn_readers(m, bn->out, &a[0]) != 1 || a[0] != i + 1 || m->node[a[0]].op != &nn_op_add) return 0;
  const nn_node *add = &m->node[a[0]];
  if (add->out == m->output || nn_readers(m, add->out, &a[1]) != 1 || a[1] != i + 2) return 0;
  const nn_node *act = &m->node[a[1]];
  return (act->op->flags & NN_ACT) && act->a.act.kind != LAM_ACT_GELU ? 2 : 0;
}
const nn_fusion nn_fusion_bn_add_act = {.name = "bn_add_act", .fwd_mark = "bn_add_act.fwd",
                                        .bwd_mark = "bn_add_act.bwd", .kind = NN_FUSE_ACT, .match = bn_add_act_match,
                                        .fwd = bn_add_act_fwd, .bwd = bn_add_act_bwd,
                                        .prims = NN_PRIMS(LAM_PRIM_bn_act_fwd, LAM_PRIM_bn_act_bwd)};

/* A BatchNorm, its activation and a maxpool of stride K after them ("bn, relu, maxpool 2": a block's end where the
 * image shrinks): y = maxpool(act(bn(x))) in one pass, neither act(bn(x)) nor its gradient ever stored; the pool's
 * aux holds each max's offset in its window, a byte. The three nodes follow each other; the activation is one whose
 * backward the BatchNorm's can form from x (relu, leaky, gelu); not where the backend runs the pair apart (CUDA in
 * NCHW). */
static lam_pool_geom bn_pool_geom(const lam_model *m, const nn_node *pool) {
  const nn_tensor *x = &m->tensor[pool->in[0]], *y = &m->tensor[pool->out];
  return (lam_pool_geom){x->c, x->h, x->w, pool->a.pool.k, pool->a.pool.stride, y->h, y->w};
}
static lam_status bn_act_pool_fwd(lam_model *m, nn_node *n, int B, int train) {
  const nn_tensor *x = nn_in(m, n, 0);
  const nn_node *act = &m->node[n->tail - 1], *pool = &m->node[n->tail];
  const lam_pool_geom g = bn_pool_geom(m, pool);
  float *mean = n->aux, *invstd = mean + x->c, *run = m->state + n->s_off, *run_var = run + x->c;
  if (train && n->stats_from) {
    LAM_TRY(bn_given_stats(m, n, B, &run, &run_var));
    mean = invstd = NULL, train = 0;
  }
  return m->ctx->be->prim->bn_act_pool_fwd(m->ctx, m->fmt, &g, B, act->a.act.kind, act->a.act.alpha, x->data,
                                           m->params + n->w_off, m->params + n->b_off, nn_out(m, pool)->data, pool->aux,
                                           mean, invstd, run, run_var, n->a.bn.momentum, n->a.bn.eps, train);
}
static lam_status bn_act_pool_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *x = nn_in(m, n, 0);
  const nn_node *act = &m->node[n->tail - 1], *pool = &m->node[n->tail];
  const lam_pool_geom g = bn_pool_geom(m, pool);
  const float *mean = n->aux, *invstd = mean + x->c;
  void *din = nn_din(m, n, 0);
  return m->ctx->be->prim->bn_act_pool_bwd(m->ctx, m->fmt, &g, B, act->a.act.kind, act->a.act.alpha, x->data,
                                           nn_out(m, pool)->grad, pool->aux, m->params + n->w_off, m->params + n->b_off,
                                           mean, invstd, din ? din : m->scratch, m->grads + n->w_off,
                                           m->grads + n->b_off);
}
static int bn_act_pool_match(const lam_model *m, int i, int a[2]) {
  const nn_node *bn = &m->node[i];
  const char *why = "";
  if (bn->op != &nn_op_bn || m->sync_sum || bn->out == m->output || i + 2 >= m->nnodes) return 0;
  if (nn_readers(m, bn->out, &a[0]) != 1 || a[0] != i + 1) return 0;
  const nn_node *act = &m->node[a[0]];
  const int kind = act->a.act.kind;
  if (!(act->op->flags & NN_ACT) || (kind != LAM_ACT_RELU && kind != LAM_ACT_LEAKY && kind != LAM_ACT_GELU)) return 0;
  if (act->out == m->output || nn_readers(m, act->out, &a[1]) != 1 || a[1] != i + 2) return 0;
  const nn_node *pool = &m->node[a[1]];
  if (pool->op != &nn_op_maxpool || pool->a.pool.stride != pool->a.pool.k || pool->a.pool.k > 15) return 0;
  const lam_backend *be = m->ctx->be;
  return !be->prim->supports || be->prim->supports(LAM_PRIM_bn_act_pool_fwd, m->fmt, &why) ? 2 : 0;
}
const nn_fusion nn_fusion_bn_act_pool = {.name = "bn_act_pool", .fwd_mark = "bn_act_pool.fwd",
                                         .bwd_mark = "bn_act_pool.bwd", .kind = NN_FUSE_ACT, .match = bn_act_pool_match,
                                         .fwd = bn_act_pool_fwd, .bwd = bn_act_pool_bwd,
                                         .prims = NN_PRIMS(LAM_PRIM_bn_act_pool_fwd, LAM_PRIM_bn_act_pool_bwd)};

static size_t bn_aux(const lam_model *m, const nn_node *n, int B) {
  (void)B;
  /* mean, invstd; sync: and sums, var; statistics from its conv: and var */
  return (m->sync_sum ? 5 : n->stats_from ? 3 : 2) * (size_t)m->tensor[n->in[0]].c * sizeof(float);
}
static size_t bn_scratch(const lam_model *m, const nn_node *n, int B) { /* room for an unwanted dx */
  return m->tensor[n->in[0]].need_grad ? 0 : ((size_t)B * nn_size(&m->tensor[n->in[0]]) * nn_esize(m) + 3) / 4;
}
static double bn_macs(const lam_model *m, const nn_node *n) { return 2.0 * nn_size(&m->tensor[n->out]); }
/* nn.BatchNorm2d's (C) (BatchNorm1d's after flatten or dense), and its running statistics */
static int bn_torch(const lam_model *m, const nn_node *n, int64_t s[4]) {
  s[0] = m->tensor[n->in[0]].c;
  return 1;
}
const nn_op nn_op_bn = {NN_NAMES("bn"), .parse = bn_parse, .init = bn_init, .fwd = bn_fwd, .bwd = bn_bwd,
                        .aux_bytes = bn_aux, .scratch_floats = bn_scratch, .macs = bn_macs,
                        .flags = NN_IN_BWD | NN_FLAT_OK, .usage = "bn [momentum M] [eps E]",
                        .about = "BatchNorm (batch statistics in training, running ones in eval; momentum 0.1, eps "
                                 "1e-5 as PyTorch's)",
                        .torch_weight = bn_torch, .torch_stats = 1,
                        .prims = NN_PRIMS(LAM_PRIM_bn_fwd, LAM_PRIM_bn_bwd, LAM_PRIM_bn_sums | NN_RANKED, LAM_PRIM_bn_sync_stats | NN_RANKED, LAM_PRIM_bn_sync_dx | NN_RANKED)};

/* ---- GroupNorm (PyTorch's GroupNorm(G, C)) and LayerNorm, its one group: each sample normalized over each group of
 * C/G channels and all its pixels, then a per-channel scale and shift (gamma, beta: 1 and 0). No batch statistics:
 * the same in training and evaluation, whatever the batch. On a flat input (after dense) layernorm is PyTorch's
 * LayerNorm(C). Forward saves each (sample, group)'s mean and 1/std (aux). ---- */

/* groupnorm G [eps E]; layernorm [eps E] */
static lam_status groupnorm_parse(nn_parse *p, lam_model *m, nn_node *n) {
  const int layer = n->op == &nn_op_layernorm, first = layer ? 1 : 2;
  const nn_tensor *x = nn_in(m, n, 0);
  n->a.groupnorm.eps = 1e-5f, n->a.groupnorm.groups = 1;
  if (!layer) {
    if (p->nargs < 1) return nn_spec_error(p, 0, "groupnorm takes its number of groups, e.g. 'groupnorm 8'");
    LAM_TRY(nn_word_int(p, 1, 1, 1 << 16, "groupnorm's groups", &n->a.groupnorm.groups));
    if (x->c % n->a.groupnorm.groups)
      return nn_spec_error(p, 1, "groupnorm %d needs channels that %d divides, but its input has %d", n->a.groupnorm.groups,
                           n->a.groupnorm.groups, x->c);
  }
  for (int j = first; j <= p->nargs; j += 2) {
    if (!nn_word_is(p, j, "eps"))
      return nn_spec_error(p, j, "%s's option is 'eps E' (default 1e-5)", n->op->name);
    LAM_TRY(nn_word_float(p, j + 1, 1e-12, 1.0, "eps", &n->a.groupnorm.eps));
  }
  nn_tensor *y = nn_out(m, n);
  y->c = x->c, y->h = x->h, y->w = x->w, y->flat = x->flat;
  n->nw = n->nb = (size_t)x->c;
  return LAM_OK;
}
static void groupnorm_init(const lam_model *m, const nn_node *n, void *rng, float *params, float *state) {
  (void)m, (void)rng, (void)state;
  for (size_t c = 0; c < n->nw; c++) params[n->w_off + c] = 1.0f, params[n->b_off + c] = 0.0f;
}
static lam_status groupnorm_fwd(lam_model *m, nn_node *n, int B, int train) {
  (void)train;
  const nn_tensor *x = nn_in(m, n, 0);
  float *mean = n->aux, *invstd = mean + (size_t)B * n->a.groupnorm.groups;
  return m->ctx->be->prim->groupnorm_fwd(m->ctx, m->fmt, B, x->c, x->h * x->w, n->a.groupnorm.groups, x->data, m->params + n->w_off,
                                   m->params + n->b_off, nn_out(m, n)->data, mean, invstd, n->a.groupnorm.eps);
}
static lam_status groupnorm_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *x = nn_in(m, n, 0);
  const float *mean = n->aux, *invstd = mean + (size_t)B * n->a.groupnorm.groups;
  void *din = nn_din(m, n, 0);
  float *work = m->scratch, *dx = din ? din : (void *)(m->scratch + 2 * (size_t)B * x->c); /* an unwanted dx: scratch */
  return m->ctx->be->prim->groupnorm_bwd(m->ctx, m->fmt, B, x->c, x->h * x->w, n->a.groupnorm.groups, x->data, nn_out(m, n)->grad,
                                   m->params + n->w_off, mean, invstd, dx, m->grads + n->w_off, m->grads + n->b_off,
                                   work);
}
static size_t groupnorm_aux(const lam_model *m, const nn_node *n, int B) {
  (void)m;
  return 2 * (size_t)B * n->a.groupnorm.groups * sizeof(float);
}
/* the backward's per-sample channel sums, and room for an unwanted dx */
static size_t groupnorm_scratch(const lam_model *m, const nn_node *n, int B) {
  const nn_tensor *x = &m->tensor[n->in[0]];
  const size_t dx = x->need_grad ? 0 : ((size_t)B * nn_size(x) * nn_esize(m) + 3) / 4;
  return 2 * (size_t)B * x->c + dx;
}
static double groupnorm_macs(const lam_model *m, const nn_node *n) { return 2.0 * nn_size(&m->tensor[n->out]); }
/* nn.GroupNorm's weight and bias (C) (LayerNorm(C)'s on a flat input) */
static int groupnorm_torch(const lam_model *m, const nn_node *n, int64_t s[4]) {
  s[0] = m->tensor[n->in[0]].c;
  return 1;
}
static void groupnorm_describe(const lam_model *m, const nn_node *n, char *buf, size_t size) {
  (void)m;
  snprintf(buf, size, "G%d", n->a.groupnorm.groups);
}
const nn_op nn_op_groupnorm = {NN_NAMES("groupnorm"), .parse = groupnorm_parse, .init = groupnorm_init,
                               .fwd = groupnorm_fwd, .bwd = groupnorm_bwd, .aux_bytes = groupnorm_aux,
                               .scratch_floats = groupnorm_scratch, .macs = groupnorm_macs,
                               .flags = NN_IN_BWD | NN_FLAT_OK, .usage = "groupnorm G [eps E]",
                               .about = "GroupNorm: each sample over G groups of channels (PyTorch's GroupNorm(G, C), "
                                        "eps 1e-5)",
                               .describe = groupnorm_describe, .torch_weight = groupnorm_torch,
                               .prims = NN_PRIMS(LAM_PRIM_groupnorm_fwd, LAM_PRIM_groupnorm_bwd)};
const nn_op nn_op_layernorm = {NN_NAMES("layernorm"), .parse = groupnorm_parse, .init = groupnorm_init,
                               .fwd = groupnorm_fwd, .bwd = groupnorm_bwd, .aux_bytes = groupnorm_aux,
                               .scratch_floats = groupnorm_scratch, .macs = groupnorm_macs,
                               .flags = NN_IN_BWD | NN_FLAT_OK, .usage = "layernorm [eps E]",
                               .about = "LayerNorm: each sample over all its channels and pixels, a scale and shift "
                                        "per channel (GroupNorm(1, C); LayerNorm(C) on a flat input)",
                               .torch_weight = groupnorm_torch, .prims = NN_PRIMS(LAM_PRIM_groupnorm_fwd, LAM_PRIM_groupnorm_bwd)};
