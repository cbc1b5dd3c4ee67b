/* pool.c — the ops that change an image's size: max and average pooling over K×K windows, the global
 * average pool (gap: one value per channel), nearest upsampling by a whole factor, the pool over a
 * clip's frames (tpool) and the frames joined as channels (tcat). */
#include "../nn.h"

static lam_pool_geom pool_geom(const lam_model *m, const nn_node *n) {
  const nn_tensor *x = &m->tensor[n->in[0]], *y = &m->tensor[n->out];
  return (lam_pool_geom){x->c, x->h, x->w, n->a.pool.k, n->a.pool.stride, y->h, y->w};
}

/* maxpool K [stride S]  and  avgpool K [stride S] */
static lam_status pool_parse(nn_parse *p, lam_model *m, nn_node *n) {
  LAM_TRY(nn_need_image(p, m, n));
  if (p->nargs < 1) return nn_spec_error(p, 0, "%s takes K [stride S], e.g. '%s 2'", n->op->name, n->op->name);
  LAM_TRY(nn_word_int(p, 1, 1, 64, "the window K", &n->a.pool.k));
  n->a.pool.stride = n->a.pool.k;
  if (p->nargs == 3 && nn_word_is(p, 2, "stride")) {
    LAM_TRY(nn_word_int(p, 3, 1, 64, "stride", &n->a.pool.stride));
  } else if (p->nargs != 1) {
    return nn_spec_error(p, 2, "%s takes K [stride S]", n->op->name);
  }
  const nn_tensor *x = nn_in(m, n, 0);
  if (n->a.pool.k > x->h || n->a.pool.k > x->w)
    return nn_spec_error(p, 1, "%s window %d is larger than its %dx%d input", n->op->name, n->a.pool.k, x->h, x->w);
  nn_tensor *y = nn_out(m, n);
  y->c = x->c;
  y->h = (x->h - n->a.pool.k) / n->a.pool.stride + 1;
  y->w = (x->w - n->a.pool.k) / n->a.pool.stride + 1;
  return LAM_OK;
}

static lam_status maxpool_fwd(lam_model *m, nn_node *n, int B, int train) {
  (void)train;
  lam_pool_geom g = pool_geom(m, n);
  return m->ctx->be->prim->maxpool_fwd(m->ctx, m->fmt, &g, B, nn_in(m, n, 0)->data, nn_out(m, n)->data, n->aux);
}
static lam_status maxpool_bwd(lam_model *m, nn_node *n, int B) {
  lam_pool_geom g = pool_geom(m, n);
  return m->ctx->be->prim->maxpool_bwd(m->ctx, m->fmt, &g, B, nn_out(m, n)->grad, n->aux, nn_din(m, n, 0));
}
/* the argmax of every output: its index in the input plane, or (run by bn_act_pool) its offset in the window, a byte */
static size_t maxpool_aux(const lam_model *m, const nn_node *n, int B) {
  const int in_window = n->absorbed && m->node[n->fused_by].fusion == &nn_fusion_bn_act_pool;
  return (size_t)B * nn_size(&m->tensor[n->out]) * (in_window ? sizeof(uint8_t) : sizeof(int32_t));
}
static double pool_macs(const lam_model *m, const nn_node *n) {
  return (double)nn_size(&m->tensor[n->out]) * n->a.pool.k * n->a.pool.k;
}
static void pool_describe(const lam_model *m, const nn_node *n, char *buf, size_t size) {
  (void)m;
  snprintf(buf, size, "k%d s%d", n->a.pool.k, n->a.pool.stride);
}
const nn_op nn_op_maxpool = {NN_NAMES("maxpool"), .parse = pool_parse, .fwd = maxpool_fwd, .bwd = maxpool_bwd,
                             .aux_bytes = maxpool_aux, .macs = pool_macs, .usage = "maxpool K [stride S]",
                             .about = "the maximum of each K×K window (stride K unless said)",
                             .describe = pool_describe, .prims = NN_PRIMS(LAM_PRIM_maxpool_fwd, LAM_PRIM_maxpool_bwd)};

static lam_status avgpool_fwd(lam_model *m, nn_node *n, int B, int train) {
  (void)train;
  lam_pool_geom g = pool_geom(m, n);
  return m->ctx->be->prim->avgpool_fwd(m->ctx, m->fmt, &g, B, nn_in(m, n, 0)->data, nn_out(m, n)->data);
}
static lam_status avgpool_bwd(lam_model *m, nn_node *n, int B) {
  lam_pool_geom g = pool_geom(m, n);
  return m->ctx->be->prim->avgpool_bwd(m->ctx, m->fmt, &g, B, nn_out(m, n)->grad, nn_din(m, n, 0));
}
const nn_op nn_op_avgpool = {NN_NAMES("avgpool"), .parse = pool_parse, .fwd = avgpool_fwd, .bwd = avgpool_bwd,
                             .macs = pool_macs, .usage = "avgpool K [stride S]",
                             .about = "the mean of each K×K window (stride K unless said)", .describe = pool_describe,
                             .prims = NN_PRIMS(LAM_PRIM_avgpool_fwd, LAM_PRIM_avgpool_bwd)};

/* ---- gap: (c, h, w) -> (c, 1, 1), the mean of each plane ---- */
static lam_status gap_parse(nn_parse *p, lam_model *m, nn_node *n) {
  LAM_TRY(nn_need_image(p, m, n));
  if (p->nargs) return nn_spec_error(p, 1, "'gap' takes no arguments (missing a comma?)");
  nn_tensor *y = nn_out(m, n);
  y->c = nn_in(m, n, 0)->c, y->h = y->w = 1;
  return LAM_OK;
}
static lam_status gap_fwd(lam_model *m, nn_node *n, int B, int train) {
  (void)train;
  const nn_tensor *x = nn_in(m, n, 0);
  return m->ctx->be->prim->plane_mean_fwd(m->ctx, m->fmt, B, x->c, x->h * x->w, x->data, nn_out(m, n)->data);
}
static lam_status gap_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *x = nn_in(m, n, 0);
  return m->ctx->be->prim->plane_mean_bwd(m->ctx, m->fmt, B, x->c, x->h * x->w, nn_out(m, n)->grad, nn_din(m, n, 0));
}
static double gap_macs(const lam_model *m, const nn_node *n) { return (double)nn_size(&m->tensor[n->in[0]]); }
const nn_op nn_op_gap = {NN_NAMES("gap"), .parse = gap_parse, .fwd = gap_fwd, .bwd = gap_bwd, .macs = gap_macs,
                         .usage = "gap", .about = "global average pooling: C×H×W -> C×1×1",
                         .prims = NN_PRIMS(LAM_PRIM_plane_mean_fwd, LAM_PRIM_plane_mean_bwd)};

/* ---- upsample F: nearest, (c, h, w) -> (c, h*F, w*F) ---- */
static lam_status upsample_parse(nn_parse *p, lam_model *m, nn_node *n) {
  LAM_TRY(nn_need_image(p, m, n));
  if (p->nargs != 1) return nn_spec_error(p, p->nargs ? 2 : 0, "upsample takes one whole number F, e.g. 'upsample 2'");
  LAM_TRY(nn_word_int(p, 1, 1, 64, "upsample's factor F", &n->a.upsample.f));
  const nn_tensor *x = nn_in(m, n, 0);
  if ((long)x->h * n->a.upsample.f > 65536 || (long)x->w * n->a.upsample.f > 65536)
    return nn_spec_error(p, 1, "upsampling %dx%d by %d makes an image larger than 65536", x->h, x->w, n->a.upsample.f);
  nn_tensor *y = nn_out(m, n);
  y->c = x->c, y->h = x->h * n->a.upsample.f, y->w = x->w * n->a.upsample.f;
  return LAM_OK;
}
static lam_status upsample_fwd(lam_model *m, nn_node *n, int B, int train) {
  (void)train;
  const nn_tensor *x = nn_in(m, n, 0);
  return m->ctx->be->prim->upsample_fwd(m->ctx, m->fmt, B, x->c, x->h, x->w, n->a.upsample.f, x->data, nn_out(m, n)->data);
}
static lam_status upsample_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *x = nn_in(m, n, 0);
  return m->ctx->be->prim->upsample_bwd(m->ctx, m->fmt, B, x->c, x->h, x->w, n->a.upsample.f, nn_out(m, n)->grad, nn_din(m, n, 0));
}
static double upsample_macs(const lam_model *m, const nn_node *n) { return (double)nn_size(&m->tensor[n->out]); }
const nn_op nn_op_upsample = {NN_NAMES("upsample"), .parse = upsample_parse, .fwd = upsample_fwd,
                              .bwd = upsample_bwd, .macs = upsample_macs, .usage = "upsample F",
                              .about = "nearest-neighbour upsampling: H, W times F",
                              .prims = NN_PRIMS(LAM_PRIM_upsample_fwd, LAM_PRIM_upsample_bwd)};

/* ---- tpool mean|max: a clip's T frames (each (c, h, w), a row of the batch) -> one (c, h, w) per clip ---- */
static lam_status tpool_parse(nn_parse *p, lam_model *m, nn_node *n) {
  const nn_tensor *x = nn_in(m, n, 0);
  if (p->nargs != 1 || !(nn_word_is(p, 1, "mean") || nn_word_is(p, 1, "max")))
    return nn_spec_error(p, p->nargs ? 1 : 0, "tpool takes 'mean' or 'max': the pool over a clip's frames, e.g. "
                         "'tpool mean'");
  if (x->t < 2)
    return nn_spec_error(p, 0, "tpool pools over a clip's frames, but here a sample is one %s (the model's input is "
                         "not clips, or a tpool or tcat came before)", m->in_t > 1 ? "pooled clip" : "image");
  n->a.tpool.max = nn_word_is(p, 1, "max");
  nn_tensor *y = nn_out(m, n);
  y->c = x->c, y->h = x->h, y->w = x->w, y->flat = x->flat, y->t = 1;
  return LAM_OK;
}
/* R: the rows of the node's input, clips * frames */
static lam_status tpool_fwd(lam_model *m, nn_node *n, int R, int train) {
  (void)train;
  const nn_tensor *x = nn_in(m, n, 0);
  return m->ctx->be->prim->tpool_fwd(m->ctx, m->fmt, R / x->t, x->t, nn_size(x), n->a.tpool.max, x->data, nn_out(m, n)->data, n->aux);
}
static lam_status tpool_bwd(lam_model *m, nn_node *n, int R) {
  const nn_tensor *x = nn_in(m, n, 0);
  void *dx = nn_din(m, n, 0);
  if (!dx) return LAM_OK;
  return m->ctx->be->prim->tpool_bwd(m->ctx, m->fmt, R / x->t, x->t, nn_size(x), n->a.tpool.max, nn_out(m, n)->grad, n->aux, dx);
}
static size_t tpool_aux(const lam_model *m, const nn_node *n, int R) { /* max: the frame of every maximum */
  const nn_tensor *x = &m->tensor[n->in[0]];
  return n->a.tpool.max ? (size_t)(R / x->t) * nn_size(x) : 0;
}
static double tpool_macs(const lam_model *m, const nn_node *n) { /* per frame, as the other ops' */
  return (double)nn_size(&m->tensor[n->in[0]]);
}
/* "max of 16": the pool and the frames it pools */
static void tpool_describe(const lam_model *m, const nn_node *n, char *buf, size_t size) {
  snprintf(buf, size, "%s of %d", n->a.tpool.max ? "max" : "mean", m->tensor[n->in[0]].t);
}
const nn_op nn_op_tpool = {NN_NAMES("tpool"), .parse = tpool_parse, .fwd = tpool_fwd, .bwd = tpool_bwd,
                           .aux_bytes = tpool_aux, .macs = tpool_macs, .flags = NN_FLAT_OK, .usage = "tpool mean|max",
                           .about = "clips: pools each value over the frames; layers before it run on every frame (the "
                                    "frames folded into the batch), after it once per clip; a model of clips needs "
                                    "one (or a tcat) before its output",
                           .describe = tpool_describe, .prims = NN_PRIMS(LAM_PRIM_tpool_fwd, LAM_PRIM_tpool_bwd)};

/* ---- tcat: a clip's T frames (each (c, h, w), a row of the batch) -> one (T*c, h, w) per clip, frame t's channels
 * at t*c.. (early fusion: the next conv sees every frame at once, as PyTorch's reshape of (B, T, C, H, W) to
 * (B, T*C, H, W)) ---- */
static lam_status tcat_parse(nn_parse *p, lam_model *m, nn_node *n) {
  const nn_tensor *x = nn_in(m, n, 0);
  if (p->nargs) return nn_spec_error(p, 1, "'tcat' takes no arguments (missing a comma?)");
  if (x->t < 2)
    return nn_spec_error(p, 0, "tcat joins a clip's frames, but here a sample is one %s (the model's input is not "
                         "clips, or a tpool or tcat came before)", m->in_t > 1 ? "pooled clip" : "image");
  if ((int64_t)x->c * x->t > 65536)
    return nn_spec_error(p, 0, "tcat makes %d frames x %d channels = %lld channels; lamina takes at most 65536", x->t,
                         x->c, (long long)x->c * x->t);
  nn_tensor *y = nn_out(m, n);
  y->c = x->c * x->t, y->h = x->h, y->w = x->w, y->flat = x->flat, y->t = 1;
  return LAM_OK;
}
/* R: the rows of the node's input, clips * frames */
static lam_status tcat_fwd(lam_model *m, nn_node *n, int R, int train) {
  (void)train;
  const nn_tensor *x = nn_in(m, n, 0);
  return m->ctx->be->prim->tcat_fwd(m->ctx, m->fmt, R / x->t, x->t, x->c, (size_t)x->h * x->w, x->data, nn_out(m, n)->data);
}
static lam_status tcat_bwd(lam_model *m, nn_node *n, int R) {
  const nn_tensor *x = nn_in(m, n, 0);
  void *dx = nn_din(m, n, 0);
  if (!dx) return LAM_OK;
  return m->ctx->be->prim->tcat_bwd(m->ctx, m->fmt, R / x->t, x->t, x->c, (size_t)x->h * x->w, nn_out(m, n)->grad, dx);
}
static void tcat_describe(const lam_model *m, const nn_node *n, char *buf, size_t size) {
  snprintf(buf, size, "of %d", m->tensor[n->in[0]].t);
}
const nn_op nn_op_tcat = {NN_NAMES("tcat"), .parse = tcat_parse, .fwd = tcat_fwd, .bwd = tcat_bwd,
                          .flags = NN_FLAT_OK, /* moves values: no multiply-adds */
                          .usage = "tcat",
                          .about = "clips: the frames as channels (T×C×H×W -> T·C×H×W, frame t's channels "
                                   "first-to-last), so the next layer sees every frame",
                          .describe = tcat_describe, .prims = NN_PRIMS(LAM_PRIM_tcat_fwd, LAM_PRIM_tcat_bwd)};
