/* conv.c — convolution, transposed convolution, and the fused conv -> relu -> maxpool block the graph's
 * fusion pass makes. A conv on its own runs the backend's conv2d primitives in the model's format (cuDNN on
 * CUDA where built with it, else im2col + GEMM) and keeps its input for backward; in bfloat16 activations
 * the weights are rounded into params_lo at each forward (the float32 params stay the master copy). In
 * NCHW float32 with the bf16 precision, and in the fused block (NCHW only), it is im2col + one GEMM over the
 * batch that saves its im2col for backward (bfloat16 in bf16, where the weights are rounded into params_lo
 * so the GEMMs read half the bytes). A transposed conv is the conv's data gradient run forward:
 * conv2d_bwd_data forward, conv2d_fwd and conv2d_bwd_filter back. */
#include <math.h>
#include <stdio.h>

#include "../nn.h"
#include "../rng.h"

static lam_conv_geom conv_geom(const lam_model *m, const nn_node *n) {
  const nn_tensor *x = &m->tensor[n->in[0]], *y = &m->tensor[n->out];
  return (lam_conv_geom){x->c, x->h, x->w, n->a.conv.k, n->a.conv.stride, n->a.conv.pad, y->h, y->w};
}
/* The transposed conv as the conv it transposes: from its output (C, OH, OW) back to its input. */
static lam_conv_geom convt_geom(const lam_model *m, const nn_node *n) {
  const nn_tensor *x = &m->tensor[n->in[0]], *y = &m->tensor[n->out];
  return (lam_conv_geom){y->c, y->h, y->w, n->a.conv.k, n->a.conv.stride, n->a.conv.pad, x->h, x->w};
}
static lam_pool_geom pool_geom(const lam_model *m, const nn_node *pool) {
  const nn_tensor *x = &m->tensor[pool->in[0]], *y = &m->tensor[pool->out];
  return (lam_pool_geom){x->c, x->h, x->w, pool->a.pool.k, pool->a.pool.stride, y->h, y->w};
}
static size_t taps(const lam_model *m, const nn_node *n) { return (size_t)m->tensor[n->in[0]].c * n->a.conv.k * n->a.conv.k; }

/* conv OUT K [stride S] [pad P] [nobias]  and  convt OUT K [stride S] [pad P] [nobias] */
static lam_status parse_conv_like(nn_parse *p, lam_model *m, nn_node *n, int transposed) {
  LAM_TRY(nn_need_image(p, m, n));
  const char *use = transposed ? "convt takes OUT K [stride S] [pad P] [nobias], e.g. 'convt 64 2 stride 2'"
                               : "conv takes OUT K [stride S] [pad P] [nobias], e.g. 'conv 32 3'";
  if (p->nargs < 2) return nn_spec_error(p, 0, "%s", use);
  char what[64];
  snprintf(what, sizeof what, "%s's OUT (channels)", n->op->name);
  LAM_TRY(nn_word_int(p, 1, 1, 65536, what, &n->a.conv.oc));
  snprintf(what, sizeof what, "%s's K (kernel size)", n->op->name);
  LAM_TRY(nn_word_int(p, 2, 1, 64, what, &n->a.conv.k));
  n->a.conv.stride = 1;
  for (int j = 3; j <= p->nargs;) {
    if (nn_word_is(p, j, "nobias")) {
      n->a.conv.nobias = 1;
      j++;
      continue;
    }
    int is_pad = nn_word_is(p, j, "pad");
    if (!is_pad && !nn_word_is(p, j, "stride"))
      return nn_spec_error(p, j, "%s options are 'stride S', 'pad P' and 'nobias'", n->op->name);
    if (j + 1 > p->nargs)
      return nn_spec_error(p, j, "'%s' needs a whole number after it (stride 1..64, pad 0..64)", is_pad ? "pad" : "stride");
    LAM_TRY(nn_word_int(p, j + 1, is_pad ? 0 : 1, 64, is_pad ? "pad" : "stride", is_pad ? &n->a.conv.pad : &n->a.conv.stride));
    j += 2;
  }
  const nn_tensor *x = nn_in(m, n, 0);
  nn_tensor *y = nn_out(m, n);
  y->c = n->a.conv.oc;
  if (transposed) {
    y->h = (x->h - 1) * n->a.conv.stride - 2 * n->a.conv.pad + n->a.conv.k;
    y->w = (x->w - 1) * n->a.conv.stride - 2 * n->a.conv.pad + n->a.conv.k;
    if (y->h < 1 || y->w < 1)
      return nn_spec_error(p, 0, "convt's padding %d leaves no output from its %dx%d input", n->a.conv.pad, x->h, x->w);
  } else {
    if (x->h + 2 * n->a.conv.pad < n->a.conv.k || x->w + 2 * n->a.conv.pad < n->a.conv.k)
      return nn_spec_error(p, 2, "conv kernel %d is larger than its %dx%d input (with padding %d)", n->a.conv.k, x->h, x->w,
                           n->a.conv.pad);
    y->h = (x->h + 2 * n->a.conv.pad - n->a.conv.k) / n->a.conv.stride + 1;
    y->w = (x->w + 2 * n->a.conv.pad - n->a.conv.k) / n->a.conv.stride + 1;
  }
  n->nw = (size_t)n->a.conv.oc * x->c * n->a.conv.k * n->a.conv.k;
  n->nb = n->a.conv.nobias ? 0 : (size_t)n->a.conv.oc;
  return LAM_OK;
}
static lam_status conv_parse(nn_parse *p, lam_model *m, nn_node *n) { return parse_conv_like(p, m, n, 0); }
static lam_status convt_parse(nn_parse *p, lam_model *m, nn_node *n) { return parse_conv_like(p, m, n, 1); }

/* PyTorch's reset_parameters: weight and bias uniform(±1/sqrt(fan_in)), fan_in = the weight's size(1) *
 * K*K: in channels for a conv, out channels for a transposed conv. */
static void init_uniform(const nn_node *n, size_t fan_in, void *rng, float *params) {
  double bound = 1.0 / sqrt((double)fan_in);
  for (size_t j = 0; j < n->nw + n->nb; j++)
    params[n->w_off + j] = (float)((2.0 * lam_rng_uniform(rng) - 1.0) * bound);
}
static void conv_init(const lam_model *m, const nn_node *n, void *rng, float *params, float *state) {
  (void)state;
  init_uniform(n, taps(m, n), rng, params);
}
static void convt_init(const lam_model *m, const nn_node *n, void *rng, float *params, float *state) {
  (void)state, (void)m;
  init_uniform(n, (size_t)n->a.conv.oc * n->a.conv.k * n->a.conv.k, rng, params);
}

static size_t planes(const lam_model *m, const nn_node *n, int B) {
  const nn_tensor *y = &m->tensor[n->out];
  return (size_t)B * y->h * y->w;
}

/* The conv GEMM: G (OC, B*P) = W (OC, K) x col (K, B*P), col the im2col of the input (n->aux), into
 * scratch. bf16/fp16: col is written as 16-bit floats and W rounded into params_lo. */
static lam_status conv_gemm_fwd(lam_model *m, nn_node *n, int B) {
  const lam_backend *be = m->ctx->be;
  lam_conv_geom g = conv_geom(m, n);
  int K = (int)taps(m, n), BP = (int)planes(m, n, B), li = nn_index(m, n) + 1;
  LAM_TRY(be->prim->im2col(m->ctx, &g, B, (const float *)nn_in(m, n, 0)->data, n->aux, nn_half(m)));
  NN_PROF(m, "conv.im2col", li);
  if (nn_half(m)) {
    uint16_t *Wlo = m->params_lo + n->w_off;
    LAM_TRY(be->prim->to_half(m->ctx, nn_half(m), (size_t)n->a.conv.oc * K, m->params + n->w_off, Wlo));
    LAM_TRY(be->prim->gemm_half(m->ctx, nn_half(m), 0, 0, n->a.conv.oc, BP, K, 1.0f, Wlo, K, (const uint16_t *)n->aux, BP, 0.0f,
                          m->scratch, 0, BP));
  } else {
    LAM_TRY(be->prim->gemm(m->ctx, 0, 0, n->a.conv.oc, BP, K, 1.0f, m->params + n->w_off, K, n->aux, BP, 0.0f, m->scratch, BP));
  }
  NN_PROF(m, "conv.gemm", li);
  return LAM_OK;
}

/* Where the half precisions keep a conv's transposed gradient as 16-bit floats, within scratch. */
static size_t dy16_offset(const nn_node *n, size_t BP) { return ((size_t)n->a.conv.oc * BP + 3) / 4 * 4; }
static uint16_t *conv_dy16(const lam_model *m, const nn_node *n, int B) {
  return (uint16_t *)(m->scratch + dy16_offset(n, planes(m, n, B)));
}

/* The conv's backward from dyT (OC, B*P) in scratch: dW += dyT col^T and, if the input needs it, its
 * gradient = col2im(W^T dyT). bf16/fp16: dyT rounded to 16 bits first (unless dy16_ready: the fused block
 * wrote it so); the column gradient is 16-bit too (col2im sums in fp32). */
static lam_status conv_gemm_bwd(lam_model *m, nn_node *n, int B, int dy16_ready) {
  lam_ctx *ctx = m->ctx;
  const lam_backend *be = ctx->be;
  lam_conv_geom g = conv_geom(m, n);
  int K = (int)taps(m, n), BP = (int)planes(m, n, B), li = nn_index(m, n) + 1;
  float *dyT = m->scratch, *dW = m->grads + n->w_off, *din = (float *)nn_din(m, n, 0);
  const int dt = nn_half(m);
  if (dt) {
    uint16_t *dy16 = conv_dy16(m, n, B), *dcol16 = dy16 + (size_t)n->a.conv.oc * BP;
    if (!dy16_ready) LAM_TRY(be->prim->to_half(ctx, dt, (size_t)n->a.conv.oc * BP, dyT, dy16));
    LAM_TRY(be->prim->gemm_half(ctx, dt, 0, 1, n->a.conv.oc, K, BP, 1.0f, dy16, BP, (const uint16_t *)n->aux, BP, 1.0f, dW, 0, K));
    NN_PROF(m, "conv.gemm_dw", li);
    if (!din) return LAM_OK;
    LAM_TRY(be->prim->gemm_half(ctx, dt, 1, 0, K, BP, n->a.conv.oc, 1.0f, m->params_lo + n->w_off, K, dy16, BP, 0.0f, dcol16, 1, BP));
    NN_PROF(m, "conv.gemm_dx", li);
    LAM_TRY(be->prim->col2im(ctx, &g, B, dcol16, dt, nn_adds(n, 0), din));
  } else {
    float *dcol = m->scratch + (size_t)n->a.conv.oc * BP;
    LAM_TRY(be->prim->gemm(ctx, 0, 1, n->a.conv.oc, K, BP, 1.0f, dyT, BP, n->aux, BP, 1.0f, dW, K));
    NN_PROF(m, "conv.gemm_dw", li);
    if (!din) return LAM_OK;
    LAM_TRY(be->prim->gemm(ctx, 1, 0, K, BP, n->a.conv.oc, 1.0f, m->params + n->w_off, K, dyT, BP, 0.0f, dcol, BP));
    NN_PROF(m, "conv.gemm_dx", li);
    LAM_TRY(be->prim->col2im(ctx, &g, B, dcol, LAM_DT_F32, nn_adds(n, 0), din));
  }
  NN_PROF(m, "conv.col2im", li);
  return LAM_OK;
}

static const float *bias_of(const lam_model *m, const nn_node *n) { return n->nb ? m->params + n->b_off : NULL; }
static float *dbias_of(const lam_model *m, const nn_node *n) { return n->nb ? m->grads + n->b_off : NULL; }

/* Whether this conv runs as the conv2d primitives: always in NHWC; in NCHW when not fused, not the half
 * precisions' own GEMMs and not LAMINA_CONV=im2col. */
static int whole_conv(const lam_model *m, const nn_node *n) {
  return m->fmt.nhwc || (!n->fuse && !nn_half(m) && !m->conv_im2col);
}

/* The weights as the conv2d primitives take them in the model's format: the float32 params, or (bfloat16
 * activations) params_lo, which nn_forward rounds from them. */
static const void *conv_weights(const lam_model *m, const nn_node *n) {
  return m->fmt.dt == LAM_DT_F32 ? (const void *)(m->params + n->w_off) : (const void *)(m->params_lo + n->w_off);
}

int nn_conv_can_sum_stats(const lam_model *m, const nn_node *n) {
  return n->op == &nn_op_conv && !n->absorbed && !n->fuse && !n->nb && whole_conv(m, n);
}

static lam_status conv_fwd(lam_model *m, nn_node *n, int B, int train) {
  if (whole_conv(m, n)) {
    lam_conv_geom g = conv_geom(m, n);
    nn_tensor *y = nn_out(m, n);
    if (train && n->stats_for) { /* and the next BatchNorm's statistics, into this node's aux (no bias here) */
      LAM_TRY(m->ctx->be->prim->conv2d_fwd_stats(m->ctx, m->fmt, &g, n->a.conv.oc, B, nn_in(m, n, 0)->data,
                                                 conv_weights(m, n), y->data, (float *)n->aux, m->conv_stats == 2,
                                                 m->scratch, m->scratch_bytes, &n->stats_one_pass));
      NN_PROF(m, n->stats_one_pass ? "conv.conv2d_genstats" : "conv.conv2d_stats", nn_index(m, n) + 1);
      return LAM_OK;
    }
    LAM_TRY(m->ctx->be->prim->conv2d_fwd(m->ctx, m->fmt, &g, n->a.conv.oc, B, nn_in(m, n, 0)->data, conv_weights(m, n), y->data,
                                   m->scratch,
                                   m->scratch_bytes));
    NN_PROF(m, "conv.conv2d", nn_index(m, n) + 1);
    if (n->nb) {
      LAM_TRY(m->ctx->be->prim->channel_bias_fwd(m->ctx, m->fmt, B, n->a.conv.oc, y->h * y->w, y->data, m->params + n->b_off));
      NN_PROF(m, "conv.bias", nn_index(m, n) + 1);
    }
    return LAM_OK;
  }
  LAM_TRY(conv_gemm_fwd(m, n, B));
  const nn_tensor *y = nn_out(m, n);
  /* (OC, B*P) in scratch to (B, OC, P) with the bias */
  LAM_TRY(m->ctx->be->prim->cbp_to_bcp(m->ctx, B, n->a.conv.oc, y->h * y->w, m->scratch, bias_of(m, n), (float *)y->data));
  NN_PROF(m, "conv.bias_t", nn_index(m, n) + 1);
  return LAM_OK;
}

static lam_status conv_bwd(lam_model *m, nn_node *n, int B) {
  const nn_tensor *y = nn_out(m, n);
  if (whole_conv(m, n)) {
    lam_ctx *ctx = m->ctx;
    lam_conv_geom g = conv_geom(m, n);
    int li = nn_index(m, n) + 1;
    void *din = nn_din(m, n, 0);
    if (n->nb) LAM_TRY(ctx->be->prim->channel_bias_bwd(ctx, m->fmt, B, n->a.conv.oc, y->h * y->w, y->grad, m->grads + n->b_off));
    LAM_TRY(ctx->be->prim->conv2d_bwd_filter(ctx, m->fmt, &g, n->a.conv.oc, B, nn_in(m, n, 0)->data, y->grad, m->grads + n->w_off,
                                       m->scratch, m->scratch_bytes));
    NN_PROF(m, "conv.conv2d_dw", li);
    if (din) {
      LAM_TRY(ctx->be->prim->conv2d_bwd_data(ctx, m->fmt, &g, n->a.conv.oc, B, y->grad, conv_weights(m, n), din, nn_adds(n, 0),
                                       m->scratch, m->scratch_bytes));
      NN_PROF(m, "conv.conv2d_dx", li);
    }
    return LAM_OK;
  }
  LAM_TRY(m->ctx->be->prim->bcp_to_cbp(m->ctx, B, n->a.conv.oc, y->h * y->w, (const float *)y->grad, m->scratch, dbias_of(m, n)));
  NN_PROF(m, "conv.bias_t", nn_index(m, n) + 1);
  return conv_gemm_bwd(m, n, B, 0);
}

/* The fused block: y = maxpool(relu(conv(x))) in one pass after the GEMM, or (direct) straight from the
 * model's input. The pool node's output and argmax are the block's. */
static lam_status conv_block_fwd(lam_model *m, nn_node *n, int B, int train) {
  (void)train;
  const lam_backend *be = m->ctx->be;
  nn_node *pool = &m->node[n->tail];
  lam_pool_geom pg = pool_geom(m, pool);
  nn_tensor *y = nn_out(m, pool);
  int li = nn_index(m, n) + 1;
  if (n->fuse == NN_FUSE_DIRECT) {
    lam_conv_geom cg = conv_geom(m, n);
    LAM_TRY(be->prim->conv_pool_direct_fwd(m->ctx, &cg, &pg, B, (const float *)nn_in(m, n, 0)->data, m->params + n->w_off,
                                     bias_of(m, n), (float *)y->data, pool->aux));
    NN_PROF(m, "conv_relu_pool.direct_fwd", li);
    return LAM_OK;
  }
  LAM_TRY(conv_gemm_fwd(m, n, B));
  LAM_TRY(be->prim->conv_pool_fwd(m->ctx, &pg, B, m->scratch, bias_of(m, n), (float *)y->data, pool->aux));
  NN_PROF(m, "conv_relu_pool.fwd", li);
  return LAM_OK;
}

static lam_status conv_block_bwd(lam_model *m, nn_node *n, int B) {
  const lam_backend *be = m->ctx->be;
  nn_node *pool = &m->node[n->tail];
  lam_pool_geom pg = pool_geom(m, pool);
  nn_tensor *y = nn_out(m, pool);
  int li = nn_index(m, n) + 1;
  if (n->fuse == NN_FUSE_DIRECT) { /* the input is the model's: no gradient for it */
    lam_conv_geom cg = conv_geom(m, n);
    LAM_TRY(be->prim->conv_pool_direct_bwd(m->ctx, &cg, &pg, B, (const float *)nn_in(m, n, 0)->data, (const float *)y->grad,
                                     (const float *)y->data, pool->aux, m->grads + n->w_off, m->grads + n->b_off,
                                     m->scratch));
    NN_PROF(m, "conv_relu_pool.direct_bwd", li);
    return LAM_OK;
  }
  void *dG = nn_half(m) ? (void *)conv_dy16(m, n, B) : (void *)m->scratch; /* 16-bit: straight into the GEMMs' form */
  LAM_TRY(be->prim->conv_pool_bwd(m->ctx, &pg, B, (const float *)y->grad, (const float *)y->data, pool->aux, dG, nn_half(m),
                            dbias_of(m, n)));
  NN_PROF(m, "conv_relu_pool.bwd", li);
  return conv_gemm_bwd(m, n, B, nn_half(m) != 0);
}
int nn_conv_block_shape(const lam_model *m, int i, int a[2]) {
  const nn_node *c = &m->node[i];
  if (c->op != &nn_op_conv || c->absorbed) return 0;
  if (nn_readers(m, c->out, &a[0]) != 1 || m->node[a[0]].op != &nn_op_relu) return 0;
  if (nn_readers(m, m->node[a[0]].out, &a[1]) != 1 || m->node[a[1]].op != &nn_op_maxpool) return 0;
  return m->node[a[1]].a.pool.stride == m->node[a[1]].a.pool.k ? 2 : 0;
}
/* the block's kernels are NCHW's */
static int conv_block_match(const lam_model *m, int i, int a[2]) { return m->fmt.nhwc ? 0 : nn_conv_block_shape(m, i, a); }
/* at the model's input with few taps, a direct convolution (LAMINA_FUSE=2: on any backend; 3: where it prefers it) */
static void conv_block_setup(lam_model *m, nn_node *c) {
  const nn_tensor *x = &m->tensor[c->in[0]];
  const int want_direct = m->fuse == 2 || (m->fuse == 3 && m->ctx->be->direct_first_conv);
  if (want_direct && c->in[0] == 0 && !c->a.conv.nobias && x->c * c->a.conv.k * c->a.conv.k <= LAM_DIRECT_TAPS) c->fuse = NN_FUSE_DIRECT;
}
const nn_fusion nn_fusion_conv_block = {.name = "conv_relu_pool", .kind = NN_FUSE_POOL, .match = conv_block_match,
                                        .setup = conv_block_setup, .fwd = conv_block_fwd, .bwd = conv_block_bwd,
                                        .prims = NN_PRIMS(LAM_PRIM_conv_pool_fwd, LAM_PRIM_conv_pool_bwd, LAM_PRIM_conv_pool_direct_fwd, LAM_PRIM_conv_pool_direct_bwd, LAM_PRIM_im2col, LAM_PRIM_col2im, LAM_PRIM_gemm, LAM_PRIM_gemm_half, LAM_PRIM_to_half)};

/* im2col (K, B*P) as float; the half precisions use the first half. None for the direct block; for a whole conv
 * (which keeps its input instead) only the sums of the BatchNorm it computes statistics for (2 OC floats; they
 * live from this forward to that BatchNorm's). */
static size_t conv_aux(const lam_model *m, const nn_node *n, int B) {
  if (whole_conv(m, n)) return n->stats_for ? 2 * (size_t)n->a.conv.oc * sizeof(float) : 0;
  return n->fuse == NN_FUSE_DIRECT ? 0 : taps(m, n) * planes(m, n, B) * sizeof(float);
}
/* fp32: dyT (OC, BP) then dcol (K, BP); bf16/fp16: dyT, then (16-byte aligned) dyT and dcol as 16-bit;
 * the direct block's partial sums. */
static size_t conv_scratch(const lam_model *m, const nn_node *n, int B) {
  if (whole_conv(m, n)) {
    lam_conv_geom g = conv_geom(m, n);
    size_t bytes = 0;
    if (m->ctx->be->prim->conv2d_workspace(m->ctx, m->fmt, &g, n->a.conv.oc, B, &bytes) != LAM_OK) return (size_t)-1; /* reserve says why */
    return (bytes + sizeof(float) - 1) / sizeof(float);
  }
  size_t K = taps(m, n), BP = planes(m, n, B);
  size_t f32 = ((size_t)n->a.conv.oc + K) * BP, f16 = dy16_offset(n, BP) + (((size_t)n->a.conv.oc + K) * BP + 1) / 2;
  size_t need = f32 > f16 ? f32 : f16;
  if (n->fuse == NN_FUSE_DIRECT) {
    const nn_tensor *y = &m->tensor[m->node[n->tail].out];
    need = lam_direct_work_floats(n->a.conv.oc, (int)K, (size_t)B * y->h * y->w);
  }
  return need;
}
static double conv_macs(const lam_model *m, const nn_node *n) {
  const nn_tensor *y = &m->tensor[n->out];
  return (double)n->a.conv.oc * y->h * y->w * (double)taps(m, n);
}

/* ---- transposed convolution: y = col2im(W^T x) + bias; W (IC, OC*K*K) as PyTorch stores it ---- */
static lam_status convt_fwd(lam_model *m, nn_node *n, int B, int train) {
  (void)train;
  lam_ctx *ctx = m->ctx;
  nn_tensor *y = nn_out(m, n);
  lam_conv_geom g = convt_geom(m, n);
  /* y is the "input" of the conv it transposes, x that conv's "output" of IC channels */
  LAM_TRY(ctx->be->prim->conv2d_bwd_data(ctx, m->fmt, &g, nn_in(m, n, 0)->c, B, nn_in(m, n, 0)->data, conv_weights(m, n),
                                   y->data, 0, m->scratch, m->scratch_bytes));
  if (n->nb) LAM_TRY(ctx->be->prim->channel_bias_fwd(ctx, m->fmt, B, n->a.conv.oc, y->h * y->w, y->data, m->params + n->b_off));
  return LAM_OK;
}

static lam_status convt_bwd(lam_model *m, nn_node *n, int B) {
  lam_ctx *ctx = m->ctx;
  const nn_tensor *x = nn_in(m, n, 0);
  nn_tensor *y = nn_out(m, n);
  lam_conv_geom g = convt_geom(m, n);
  void *din = nn_din(m, n, 0);
  if (n->nb) LAM_TRY(ctx->be->prim->channel_bias_bwd(ctx, m->fmt, B, n->a.conv.oc, y->h * y->w, y->grad, m->grads + n->b_off));
  LAM_TRY(ctx->be->prim->conv2d_bwd_filter(ctx, m->fmt, &g, x->c, B, y->grad, x->data, m->grads + n->w_off, m->scratch,
                                     m->scratch_bytes));
  if (!din) return LAM_OK;
  return ctx->be->prim->conv2d_fwd(ctx, m->fmt, &g, x->c, B, y->grad, conv_weights(m, n), din, m->scratch,
                             m->scratch_bytes);
}

static size_t convt_scratch(const lam_model *m, const nn_node *n, int B) {
  lam_conv_geom g = convt_geom(m, n);
  size_t bytes = 0;
  if (m->ctx->be->prim->conv2d_workspace(m->ctx, m->fmt, &g, m->tensor[n->in[0]].c, B, &bytes) != LAM_OK) return (size_t)-1;
  return (bytes + sizeof(float) - 1) / sizeof(float);
}
static double convt_macs(const lam_model *m, const nn_node *n) {
  const nn_tensor *x = &m->tensor[n->in[0]];
  return (double)x->c * x->h * x->w * (double)n->a.conv.oc * n->a.conv.k * n->a.conv.k;
}

static void conv_describe(const lam_model *m, const nn_node *n, char *buf, size_t size) {
  (void)m;
  snprintf(buf, size, "k%d s%d p%d%s", n->a.conv.k, n->a.conv.stride, n->a.conv.pad, n->a.conv.nobias ? " nobias" : "");
}
/* nn.Conv2d's (out, in, k, k); nn.ConvTranspose2d's (in, out, k, k) */
static int conv_torch(const lam_model *m, const nn_node *n, int64_t s[4]) {
  s[0] = n->a.conv.oc, s[1] = m->tensor[n->in[0]].c, s[2] = s[3] = n->a.conv.k;
  return 4;
}
static int convt_torch(const lam_model *m, const nn_node *n, int64_t s[4]) {
  s[0] = m->tensor[n->in[0]].c, s[1] = n->a.conv.oc, s[2] = s[3] = n->a.conv.k;
  return 4;
}
#define CONV_PRIMS                                                                                        \
  NN_PRIMS(LAM_PRIM_conv2d_workspace, LAM_PRIM_conv2d_fwd, LAM_PRIM_conv2d_bwd_data, LAM_PRIM_conv2d_bwd_filter, LAM_PRIM_channel_bias_fwd, LAM_PRIM_channel_bias_bwd, LAM_PRIM_cbp_to_bcp, LAM_PRIM_bcp_to_cbp, LAM_PRIM_im2col, LAM_PRIM_col2im, LAM_PRIM_gemm, LAM_PRIM_gemm_half, LAM_PRIM_to_half)
const nn_op nn_op_conv = {NN_NAMES("conv"), .parse = conv_parse, .init = conv_init, .fwd = conv_fwd, .bwd = conv_bwd,
                          .aux_bytes = conv_aux, .scratch_floats = conv_scratch, .macs = conv_macs,
                          .flags = NN_OWN_MARKS | NN_ADDS_GRAD, .usage = "conv OUT K [stride S] [pad P] [nobias]",
                          .about = "2-D convolution, K×K kernel", .describe = conv_describe, .torch_weight = conv_torch,
                          .prims = CONV_PRIMS};
const nn_op nn_op_convt = {NN_NAMES("convt"), .parse = convt_parse, .init = convt_init, .fwd = convt_fwd,
                           .bwd = convt_bwd, .scratch_floats = convt_scratch, .macs = convt_macs,
                           .usage = "convt OUT K [stride S] [pad P] [nobias]",
                           .about = "transposed convolution (e.g. 'convt 64 2 stride 2' doubles H, W)",
                           .describe = conv_describe, .torch_weight = convt_torch, .prims = CONV_PRIMS};
