/* dense.c — the fully connected layer y (B, out) = x (B, in) W^T + b, and flatten, which makes an image
 * (c, h, w) the flat (c*h*w) a dense layer reads: a view of the same memory in NCHW, a copy in NCHW order
 * from NHWC (the order of PyTorch's weights). In the bf16 and fp16 precisions with float32 activations x and W are
 * rounded here (x kept in the node's aux for backward), so both backends round alike; with 16-bit
 * activations x is 16-bit already and W is params_lo (nn_forward rounds it). */
#include <math.h>

#include "../nn.h"
#include "../rng.h"

static lam_status dense_parse(nn_parse *p, lam_model *m, nn_node *n) {
  const nn_tensor *x = nn_in(m, n, 0);
  if (!x->flat && (x->h > 1 || x->w > 1))
    return nn_spec_error(p, 0, "dense needs a flat input, but it gets %dx%dx%d: put 'flatten' (or 'gap') before it",
                         x->c, x->h, x->w);
  if (p->nargs > 1)
    return nn_spec_error(p, 2, "dense takes one whole number, its outputs, e.g. 'dense 10' (missing a comma?)");
  if (p->nargs != 1) return nn_spec_error(p, 0, "dense takes one whole number, its outputs, e.g. 'dense 10'");
  LAM_TRY(nn_word_int(p, 1, 1, 1 << 24, "dense's outputs", &n->a.dense.oc));
  nn_tensor *y = nn_out(m, n);
  y->c = n->a.dense.oc, y->h = y->w = 1, y->flat = 1;
  n->nw = (size_t)n->a.dense.oc * nn_size(x);
  n->nb = (size_t)n->a.dense.oc;
  return LAM_OK;
}

static void dense_init(const lam_model *m, const nn_node *n, void *rng, float *params, float *state) {
  (void)state;
  double bound = 1.0 / sqrt((double)nn_size(&m->tensor[n->in[0]]));
  for (size_t j = 0; j < n->nw + n->nb; j++)
    params[n->w_off + j] = (float)((2.0 * lam_rng_uniform(rng) - 1.0) * bound);
}

/* 16-bit activations: y (16-bit) = x W^T + b; dW += dy^T x, db += the column sums of dy, dx = dy W. */
static lam_status dense16_fwd(lam_model *m, nn_node *n, int B) {
  lam_ctx *ctx = m->ctx;
  int in = (int)nn_size(nn_in(m, n, 0)), out = n->a.dense.oc;
  void *y = nn_out(m, n)->data;
  LAM_TRY(ctx->be->prim->gemm_half(ctx, m->fmt.dt, 0, 1, B, out, in, 1.0f, nn_in(m, n, 0)->data, in, m->params_lo + n->w_off,
                             in, 0.0f, y, 1, out));
  return ctx->be->prim->channel_bias_fwd(ctx, m->fmt, B, out, 1, y, m->params + n->b_off);
}
static lam_status dense16_bwd(lam_model *m, nn_node *n, int B) {
  lam_ctx *ctx = m->ctx;
  int in = (int)nn_size(nn_in(m, n, 0)), out = n->a.dense.oc;
  const void *dy = nn_out(m, n)->grad;
  void *din = nn_din(m, n, 0);
  LAM_TRY(ctx->be->prim->gemm_half(ctx, m->fmt.dt, 1, 0, out, in, B, 1.0f, dy, out, nn_in(m, n, 0)->data, in, 1.0f,
                             m->grads + n->w_off, 0, in));
  LAM_TRY(ctx->be->prim->channel_bias_bwd(ctx, m->fmt, B, out, 1, dy, m->grads + n->b_off));
  if (din)
    LAM_TRY(ctx->be->prim->gemm_half(ctx, m->fmt.dt, 0, 0, B, in, out, 1.0f, dy, out, m->params_lo + n->w_off, in, 0.0f, din, 1,
                               in));
  return LAM_OK;
}

static lam_status dense_fwd(lam_model *m, nn_node *n, int B, int train) {
  (void)train;
  if (m->fmt.dt != LAM_DT_F32) return dense16_fwd(m, n, B);
  lam_ctx *ctx = m->ctx;
  const lam_backend *be = ctx->be;
  const float *x = nn_in(m, n, 0)->data, *W = m->params + n->w_off;
  float *y = nn_out(m, n)->data;
  int in = (int)nn_size(nn_in(m, n, 0)), out = n->a.dense.oc;
  const int dt = nn_half(m);
  if (dt) {
    uint16_t *xlo = n->aux, *Wlo = m->params_lo + n->w_off;
    LAM_TRY(be->prim->to_half(ctx, dt, (size_t)B * in, x, xlo));
    LAM_TRY(be->prim->to_half(ctx, dt, (size_t)out * in, W, Wlo));
    LAM_TRY(be->prim->gemm_half(ctx, dt, 0, 1, B, out, in, 1.0f, xlo, in, Wlo, in, 0.0f, y, 0, out));
  } else {
    LAM_TRY(be->prim->gemm(ctx, 0, 1, B, out, in, 1.0f, x, in, W, in, 0.0f, y, out));
  }
  return be->prim->add_bias(ctx, B, out, y, m->params + n->b_off);
}

/* dW (out, in) += dy^T x; db += column sums of dy; dx (B, in) = dy W */
static lam_status dense_bwd(lam_model *m, nn_node *n, int B) {
  if (m->fmt.dt != LAM_DT_F32) return dense16_bwd(m, n, B);
  lam_ctx *ctx = m->ctx;
  const lam_backend *be = ctx->be;
  const float *x = nn_in(m, n, 0)->data, *W = m->params + n->w_off, *dy = nn_out(m, n)->grad;
  float *dW = m->grads + n->w_off, *db = m->grads + n->b_off, *din = (float *)nn_din(m, n, 0);
  int in = (int)nn_size(nn_in(m, n, 0)), out = n->a.dense.oc;
  const int dt = nn_half(m);
  if (dt) { /* dy rounded; x and W as the forward rounded them */
    uint16_t *dylo = (uint16_t *)m->scratch, *xlo = n->aux, *Wlo = m->params_lo + n->w_off;
    LAM_TRY(be->prim->to_half(ctx, dt, (size_t)B * out, dy, dylo));
    LAM_TRY(be->prim->gemm_half(ctx, dt, 1, 0, out, in, B, 1.0f, dylo, out, xlo, in, 1.0f, dW, 0, in));
    LAM_TRY(be->prim->bias_grad(ctx, B, out, dy, db));
    if (din) LAM_TRY(be->prim->gemm_half(ctx, dt, 0, 0, B, in, out, 1.0f, dylo, out, Wlo, in, 0.0f, din, 0, in));
    return LAM_OK;
  }
  LAM_TRY(be->prim->gemm(ctx, 1, 0, out, in, B, 1.0f, dy, out, x, in, 1.0f, dW, in));
  LAM_TRY(be->prim->bias_grad(ctx, B, out, dy, db));
  if (din) LAM_TRY(be->prim->gemm(ctx, 0, 0, B, in, out, 1.0f, dy, out, W, in, 0.0f, din, in));
  return LAM_OK;
}

static size_t dense_aux(const lam_model *m, const nn_node *n, int B) { /* x as 16-bit (half precisions) */
  return m->fmt.dt != LAM_DT_F32 ? 0 : (size_t)B * nn_size(&m->tensor[n->in[0]]) * sizeof(uint16_t);
}
static size_t dense_scratch(const lam_model *m, const nn_node *n, int B) { /* half precisions: dy as 16-bit */
  (void)m;
  return ((size_t)B * n->a.dense.oc + 1) / 2;
}
static double dense_macs(const lam_model *m, const nn_node *n) {
  (void)m;
  return (double)n->nw;
}

/* nn.Linear's (out, in), over the input flattened in C, H, W order */
static int dense_torch(const lam_model *m, const nn_node *n, int64_t s[4]) {
  s[0] = n->a.dense.oc, s[1] = (int64_t)nn_size(&m->tensor[n->in[0]]);
  return 2;
}
const nn_op nn_op_dense = {NN_NAMES("dense"), .parse = dense_parse, .init = dense_init, .fwd = dense_fwd,
                           .bwd = dense_bwd, .aux_bytes = dense_aux, .scratch_floats = dense_scratch,
                           .macs = dense_macs, .flags = NN_IN_BWD | NN_FLAT_OK, .usage = "dense OUT",
                           .about = "fully connected (after flatten or gap; 'linear OUT' too)",
                           .torch_weight = dense_torch,
                           .prims = NN_PRIMS(LAM_PRIM_gemm, LAM_PRIM_gemm_half, LAM_PRIM_to_half, LAM_PRIM_add_bias, LAM_PRIM_bias_grad, LAM_PRIM_channel_bias_fwd, LAM_PRIM_channel_bias_bwd)};

/* ---- flatten: (c, h, w) -> (c*h*w, 1, 1): the same memory (nn_node.view), or from NHWC to NCHW order ---- */
static lam_status flatten_parse(nn_parse *p, lam_model *m, nn_node *n) {
  if (p->nargs) return nn_spec_error(p, 1, "'flatten' takes no arguments (missing a comma?)");
  nn_tensor *y = nn_out(m, n);
  y->c = (int)nn_size(nn_in(m, n, 0)), y->h = y->w = 1, y->flat = 1;
  return LAM_OK;
}
static lam_status flatten_fwd(lam_model *m, nn_node *n, int B, int train) {
  (void)train;
  if (n->view) return LAM_OK;
  const nn_tensor *x = nn_in(m, n, 0);
  return m->ctx->be->prim->convert(m->ctx, B, x->c, x->h * x->w, m->fmt, x->data, lam_fmt_of(m->fmt.dt, 0), nn_out(m, n)->data);
}
static lam_status flatten_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *x = nn_in(m, n, 0);
  void *din = nn_din(m, n, 0);
  if (n->view || !din) return LAM_OK;
  return m->ctx->be->prim->convert(m->ctx, B, x->c, x->h * x->w, lam_fmt_of(m->fmt.dt, 0), nn_out(m, n)->grad, m->fmt, din);
}
const nn_op nn_op_flatten = {NN_NAMES("flatten"), .parse = flatten_parse, .fwd = flatten_fwd, .bwd = flatten_bwd,
                             .flags = NN_VIEW | NN_FLAT_OK, .usage = "flatten",
                             .about = "C×H×W as C·H·W×1×1 (before dense)", .prims = NN_PRIMS(LAM_PRIM_convert)};
