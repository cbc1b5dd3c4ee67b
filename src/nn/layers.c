/* layers.c — forward and backward of every layer kind, written once over the backend primitives
 * (internal.h), so the CPU and CUDA paths run the same sequence of steps. Forward saves what backward
 * needs (the im2col of a conv's input, a max-pool's argmax, each layer's output); backward accumulates
 * into the flat gradient buffer. Conv is im2col + one GEMM over the whole batch. */
#include "nn.h"

static lam_conv_geom conv_geom(const layer *l) {
  return (lam_conv_geom){l->in_c, l->in_h, l->in_w, l->k, l->stride, l->pad, l->out_h, l->out_w};
}
static lam_pool_geom pool_geom(const layer *l) {
  return (lam_pool_geom){l->in_c, l->in_h, l->in_w, l->k, l->stride, l->out_h, l->out_w};
}
static const char *fwd_name[] = {"conv.fwd", "dense.fwd", "maxpool.fwd", "relu.fwd", "tanh.fwd", "sigmoid.fwd", ""};
static const char *bwd_name[] = {"conv.bwd", "dense.bwd", "maxpool.bwd", "relu.bwd", "tanh.bwd", "sigmoid.bwd", ""};

static int act_of(layer_kind k) { return k == L_RELU ? LAM_ACT_RELU : k == L_TANH ? LAM_ACT_TANH : LAM_ACT_SIGMOID; }

/* Layers i, i+1, i+2 are conv -> relu -> maxpool with non-overlapping windows: they run as one fused
 * step (the backend's conv_pool_fwd/bwd) unless fusion is off (LAMINA_FUSE=0). The conv's and the
 * relu's own outputs are then never written; nothing else reads them. */
static int fused_block(const lam_model *m, int i) {
  return m->fuse && i + 2 < m->nlayers && m->L[i].kind == L_CONV && m->L[i + 1].kind == L_RELU &&
         m->L[i + 2].kind == L_MAXPOOL && m->L[i + 2].stride == m->L[i + 2].k;
}

/* A fused block at the model's input with few taps runs as a direct convolution (no im2col, no GEMMs:
 * its input needs no gradient) where the backend prefers it (the GPU), or always with LAMINA_FUSE=2;
 * never with LAMINA_FUSE=1 (the GEMM-epilogue fusion only) or 0. */
static int direct_block(const lam_model *m, int i) {
  const layer *l = &m->L[i];
  int want = m->fuse == 2 || (m->fuse == 3 && m->ctx->be->direct_first_conv);
  return want && i == 0 && fused_block(m, i) && l->in_c * l->k * l->k <= LAM_DIRECT_TAPS;
}

static int bf16(const lam_model *m) { return m->ctx->precision == LAM_PRECISION_BF16; }

/* The conv GEMM: G (OC, B*P) = W (OC, K) x col (K, B*P), col the im2col of the input, into scratch.
 * bf16: col is written as bfloat16 and W rounded into params_lo, so the GEMM reads half the bytes. */
static lam_status conv_gemm_fwd(lam_model *m, layer *l, int B, const float *in, int li) {
  const lam_backend *be = m->ctx->be;
  lam_conv_geom g = conv_geom(l);
  int P = l->out_h * l->out_w, K = l->in_c * l->k * l->k, BP = B * P;
  LAM_TRY(be->im2col(m->ctx, &g, B, in, l->col, bf16(m)));
  NN_PROF(m, "conv.im2col", li);
  if (bf16(m)) {
    uint16_t *Wlo = m->params_lo + l->w_off;
    LAM_TRY(be->to_bf16(m->ctx, (size_t)l->out_c * K, m->params + l->w_off, Wlo));
    LAM_TRY(be->gemm_bf16(m->ctx, 0, 0, l->out_c, BP, K, 1.0f, Wlo, K, (const uint16_t *)l->col, BP, 0.0f, m->scratch, 0,
                          BP));
  } else {
    LAM_TRY(be->gemm(m->ctx, 0, 0, l->out_c, BP, K, 1.0f, m->params + l->w_off, K, l->col, BP, 0.0f, m->scratch, BP));
  }
  NN_PROF(m, "conv.gemm", li);
  return LAM_OK;
}

/* Where the bf16 precision keeps a conv's transposed gradient as bfloat16, within scratch. */
static uint16_t *conv_dy16(const lam_model *m, const layer *l, int B) {
  return (uint16_t *)(m->scratch + conv_bf16_offset(l, (size_t)B * l->out_h * l->out_w));
}

/* The conv's backward from dyT (OC, B*P) in scratch: dW += dyT col^T and, if din, din = col2im(W^T dyT).
 * bf16: dyT rounded to bfloat16 first (unless dy16_ready: the fused block wrote it so); the column
 * gradient is bfloat16 too (col2im sums in fp32). */
static lam_status conv_gemm_bwd(lam_model *m, layer *l, int B, float *din, int li, int dy16_ready) {
  lam_ctx *ctx = m->ctx;
  const lam_backend *be = ctx->be;
  lam_conv_geom g = conv_geom(l);
  int P = l->out_h * l->out_w, K = l->in_c * l->k * l->k, BP = B * P;
  float *dyT = m->scratch, *dW = m->grads + l->w_off;
  if (bf16(m)) {
    uint16_t *dy16 = conv_dy16(m, l, B), *dcol16 = dy16 + (size_t)l->out_c * BP;
    if (!dy16_ready) LAM_TRY(be->to_bf16(ctx, (size_t)l->out_c * BP, dyT, dy16));
    LAM_TRY(be->gemm_bf16(ctx, 0, 1, l->out_c, K, BP, 1.0f, dy16, BP, (const uint16_t *)l->col, BP, 1.0f, dW, 0, K));
    NN_PROF(m, "conv.gemm_dw", li);
    if (!din) return LAM_OK;
    LAM_TRY(be->gemm_bf16(ctx, 1, 0, K, BP, l->out_c, 1.0f, m->params_lo + l->w_off, K, dy16, BP, 0.0f, dcol16, 1, BP));
    NN_PROF(m, "conv.gemm_dx", li);
    LAM_TRY(be->col2im(ctx, &g, B, dcol16, 1, din));
    NN_PROF(m, "conv.col2im", li);
    return LAM_OK;
  }
  float *dcol = m->scratch + (size_t)l->out_c * BP;
  LAM_TRY(be->gemm(ctx, 0, 1, l->out_c, K, BP, 1.0f, dyT, BP, l->col, BP, 1.0f, dW, K));
  NN_PROF(m, "conv.gemm_dw", li);
  if (!din) return LAM_OK;
  LAM_TRY(be->gemm(ctx, 1, 0, K, BP, l->out_c, 1.0f, m->params + l->w_off, K, dyT, BP, 0.0f, dcol, BP));
  NN_PROF(m, "conv.gemm_dx", li);
  LAM_TRY(be->col2im(ctx, &g, B, dcol, 0, din));
  NN_PROF(m, "conv.col2im", li);
  return LAM_OK;
}

lam_status nn_forward(lam_model *m, int B) {
  lam_ctx *ctx = m->ctx;
  const lam_backend *be = ctx->be;
  const float *in = m->x;
  for (int i = 0; i < m->nlayers; i++) {
    layer *l = &m->L[i];
    const float *W = m->params + l->w_off, *b = m->params + l->b_off;
    switch (l->kind) {
      case L_CONV: {
        if (direct_block(m, i)) {
          layer *pool = &m->L[i + 2];
          lam_conv_geom cg = conv_geom(l);
          lam_pool_geom pg = pool_geom(pool);
          LAM_TRY(be->conv_pool_direct_fwd(ctx, &cg, &pg, B, in, W, b, pool->out, pool->arg));
          NN_PROF(m, "conv_relu_pool.direct_fwd", i + 1);
          in = pool->out;
          i += 2;
          continue;
        }
        LAM_TRY(conv_gemm_fwd(m, l, B, in, i + 1));
        if (fused_block(m, i)) { /* + relu + maxpool, straight from the GEMM's output */
          layer *pool = &m->L[i + 2];
          lam_pool_geom g = pool_geom(pool);
          LAM_TRY(be->conv_pool_fwd(ctx, &g, B, m->scratch, b, pool->out, pool->arg));
          NN_PROF(m, "conv_relu_pool.fwd", i + 1);
          in = pool->out;
          i += 2;
          continue;
        }
        /* (OC, B*P) in scratch to (B, OC, P) with the bias. */
        LAM_TRY(be->cbp_to_bcp(ctx, B, l->out_c, l->out_h * l->out_w, m->scratch, b, l->out));
        NN_PROF(m, "conv.bias_t", i + 1);
        in = l->out;
        continue; /* each part marked itself */
      }
      case L_DENSE: /* y (B, out) = x (B, in) W^T + b */
        if (bf16(m)) { /* x and W rounded here (x kept for backward), so both backends round alike */
          uint16_t *xlo = (uint16_t *)l->col, *Wlo = m->params_lo + l->w_off;
          LAM_TRY(be->to_bf16(ctx, (size_t)B * l->in_c, in, xlo));
          LAM_TRY(be->to_bf16(ctx, (size_t)l->out_c * l->in_c, W, Wlo));
          LAM_TRY(be->gemm_bf16(ctx, 0, 1, B, l->out_c, l->in_c, 1.0f, xlo, l->in_c, Wlo, l->in_c, 0.0f, l->out, 0,
                                l->out_c));
        } else {
          LAM_TRY(be->gemm(ctx, 0, 1, B, l->out_c, l->in_c, 1.0f, in, l->in_c, W, l->in_c, 0.0f, l->out, l->out_c));
        }
        LAM_TRY(be->add_bias(ctx, B, l->out_c, l->out, b));
        break;
      case L_MAXPOOL: {
        lam_pool_geom g = pool_geom(l);
        LAM_TRY(be->maxpool_fwd(ctx, &g, B, in, l->out, l->arg));
        break;
      }
      case L_RELU:
      case L_TANH:
      case L_SIGMOID: LAM_TRY(be->act_fwd(ctx, act_of(l->kind), (size_t)B * layer_out_size(l), in, l->out)); break;
      case L_FLATTEN: break; /* out aliases the input */
    }
    if (l->kind != L_FLATTEN) NN_PROF(m, fwd_name[l->kind], i + 1);
    in = l->out;
  }
  return LAM_OK;
}

lam_status nn_loss(lam_model *m, int B, int backward, float mean_over, uint8_t *pred) {
  layer *last = &m->L[m->nlayers - 1];
  LAM_TRY(m->ctx->be->xent(m->ctx, B, last->out_c, last->out, m->y, backward ? last->dout : NULL, 1.0f / mean_over,
                           m->stats, pred));
  NN_PROF(m, "softmax_xent", 0);
  return LAM_OK;
}

lam_status nn_backward(lam_model *m, int B) {
  lam_ctx *ctx = m->ctx;
  const lam_backend *be = ctx->be;
  for (int i = m->nlayers - 1; i >= 0; i--) {
    if (i >= 2 && direct_block(m, i - 2)) { /* the first layer's block, from its input directly */
      layer *conv = &m->L[i - 2], *pool = &m->L[i];
      lam_conv_geom cg = conv_geom(conv);
      lam_pool_geom pg = pool_geom(pool);
      LAM_TRY(be->conv_pool_direct_bwd(ctx, &cg, &pg, B, m->x, pool->dout, pool->out, pool->arg,
                                       m->grads + conv->w_off, m->grads + conv->b_off, m->scratch));
      NN_PROF(m, "conv_relu_pool.direct_bwd", i - 1);
      i -= 2;
      continue;
    }
    if (i >= 2 && fused_block(m, i - 2)) { /* maxpool + relu + the conv's bias and GEMMs, from the pool's dout */
      layer *conv = &m->L[i - 2], *pool = &m->L[i];
      lam_pool_geom g = pool_geom(pool);
      void *dG = bf16(m) ? (void *)conv_dy16(m, conv, B) : (void *)m->scratch; /* bf16: straight into the GEMMs' form */
      LAM_TRY(be->conv_pool_bwd(ctx, &g, B, pool->dout, pool->out, pool->arg, dG, bf16(m), m->grads + conv->b_off));
      NN_PROF(m, "conv_relu_pool.bwd", i - 1);
      LAM_TRY(conv_gemm_bwd(m, conv, B, i > 2 ? m->L[i - 3].dout : NULL, i - 1, bf16(m)));
      i -= 2;
      continue;
    }
    layer *l = &m->L[i];
    const float *in = i ? m->L[i - 1].out : m->x;
    float *din = i ? m->L[i - 1].dout : NULL; /* the model's input needs no gradient */
    const float *W = m->params + l->w_off;
    float *dW = m->grads + l->w_off, *db = m->grads + l->b_off;
    switch (l->kind) {
      case L_CONV:
        LAM_TRY(be->bcp_to_cbp(ctx, B, l->out_c, l->out_h * l->out_w, l->dout, m->scratch, db)); /* db += sums */
        NN_PROF(m, "conv.bias_t", i + 1);
        LAM_TRY(conv_gemm_bwd(m, l, B, din, i + 1, 0));
        continue; /* each part marked itself */
      case L_DENSE:
        /* dW (out, in) += dy^T x; db += column sums of dy; dx (B, in) = dy W */
        if (bf16(m)) { /* dy rounded; x and W as the forward rounded them */
          uint16_t *dylo = (uint16_t *)m->scratch, *xlo = (uint16_t *)l->col, *Wlo = m->params_lo + l->w_off;
          LAM_TRY(be->to_bf16(ctx, (size_t)B * l->out_c, l->dout, dylo));
          LAM_TRY(be->gemm_bf16(ctx, 1, 0, l->out_c, l->in_c, B, 1.0f, dylo, l->out_c, xlo, l->in_c, 1.0f, dW, 0, l->in_c));
          LAM_TRY(be->bias_grad(ctx, B, l->out_c, l->dout, db));
          if (din)
            LAM_TRY(be->gemm_bf16(ctx, 0, 0, B, l->in_c, l->out_c, 1.0f, dylo, l->out_c, Wlo, l->in_c, 0.0f, din, 0, l->in_c));
          break;
        }
        LAM_TRY(be->gemm(ctx, 1, 0, l->out_c, l->in_c, B, 1.0f, l->dout, l->out_c, in, l->in_c, 1.0f, dW, l->in_c));
        LAM_TRY(be->bias_grad(ctx, B, l->out_c, l->dout, db));
        if (din) LAM_TRY(be->gemm(ctx, 0, 0, B, l->in_c, l->out_c, 1.0f, l->dout, l->out_c, W, l->in_c, 0.0f, din, l->in_c));
        break;
      case L_MAXPOOL: {
        lam_pool_geom g = pool_geom(l);
        if (din) LAM_TRY(be->maxpool_bwd(ctx, &g, B, l->dout, l->arg, din));
        break;
      }
      case L_RELU:
      case L_TANH:
      case L_SIGMOID:
        if (din) LAM_TRY(be->act_bwd(ctx, act_of(l->kind), (size_t)B * layer_out_size(l), l->out, l->dout, din));
        break;
      case L_FLATTEN: break; /* dout aliases the input's gradient */
    }
    if (l->kind != L_FLATTEN && (din || l->nw)) NN_PROF(m, bwd_name[l->kind], i + 1);
  }
  return LAM_OK;
}
