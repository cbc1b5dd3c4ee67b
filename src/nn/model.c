/* model.c — a model: its layers, its flat parameter and gradient buffers (tensors are views into
 * them), PyTorch's default initialization, the batch buffers, and the host-array API. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"
#include "rng.h"

static const char *kind_name(layer_kind k) {
  static const char *names[] = {"conv", "dense", "maxpool", "relu", "tanh", "sigmoid", "flatten"};
  return names[k];
}

/* PyTorch's reset_parameters for Conv2d and Linear: kaiming_uniform(a = sqrt(5)) for the weight, which
 * is uniform(±1/sqrt(fan_in)), and uniform(±1/sqrt(fan_in)) for the bias. */
static void init_params(const lam_model *m, uint64_t seed, float *host) {
  lam_rng r;
  lam_rng_seed(&r, seed);
  for (int i = 0; i < m->nlayers; i++) {
    const layer *l = &m->L[i];
    if (!l->nw) continue;
    size_t fan_in = l->kind == L_CONV ? (size_t)l->in_c * l->k * l->k : (size_t)l->in_c;
    double bound = 1.0 / sqrt((double)fan_in);
    for (size_t j = 0; j < l->nw + l->nb; j++) host[l->w_off + j] = (float)((2.0 * lam_rng_uniform(&r) - 1.0) * bound);
  }
}

lam_status lam_model_create(lam_ctx *ctx, const char *spec, int in_c, int in_h, int in_w, uint64_t seed,
                            lam_model **out) {
  LAM_CHECK_ARG(ctx && out, "lam_model_create: %s is NULL", ctx ? "out" : "ctx");
  *out = NULL;
  lam_model *m = calloc(1, sizeof *m);
  if (!m) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_model_create: no host memory");
  m->ctx = ctx;
  /* LAMINA_FUSE: 0 the plain ops, 1 the GEMM-epilogue fusion only, 2 also the direct first layer on
   * any backend; by default (3) the direct first layer where the backend prefers it. The lower levels
   * stay to compare against. */
  const char *fuse = getenv("LAMINA_FUSE");
  m->fuse = !fuse || !*fuse ? 3 : !strcmp(fuse, "0") ? 0 : !strcmp(fuse, "1") ? 1 : !strcmp(fuse, "2") ? 2 : 3;
  m->in_c = in_c, m->in_h = in_h, m->in_w = in_w;
  lam_status s = nn_parse_spec(spec, in_c, in_h, in_w, &m->L, &m->nlayers, m->spec, sizeof m->spec);
  if (s != LAM_OK) {
    free(m);
    return s;
  }
  const layer *last = &m->L[m->nlayers - 1];
  m->nparams = last->b_off + last->nb;
  float *host = malloc((m->nparams ? m->nparams : 1) * sizeof *host);
  if (!host) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_model_create: no host memory for %zu parameters", m->nparams);
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&m->params, m->nparams * sizeof(float));
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&m->grads, m->nparams * sizeof(float));
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&m->params_lo, m->nparams * sizeof(uint16_t));
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&m->stats, 4 * sizeof(float));
  if (s == LAM_OK) {
    init_params(m, seed, host);
    s = lam_mem_upload(ctx, m->params, host, m->nparams * sizeof(float));
  }
  if (s == LAM_OK) s = ctx->be->zero(ctx, m->grads, m->nparams * sizeof(float));
  free(host);
  if (s != LAM_OK) {
    lam_model_free(m);
    return s;
  }
  *out = m;
  return LAM_OK;
}

static void free_batch(lam_model *m) {
  lam_ctx *ctx = m->ctx;
  for (int i = 0; i < m->nlayers; i++) {
    layer *l = &m->L[i];
    if (l->kind != L_FLATTEN) {
      lam_mem_free(ctx, l->out);
      lam_mem_free(ctx, l->dout);
    }
    lam_mem_free(ctx, l->col);
    lam_mem_free(ctx, l->arg);
    l->out = l->dout = l->col = NULL;
    l->arg = NULL;
  }
  lam_mem_free(ctx, m->x);
  lam_mem_free(ctx, m->dx);
  lam_mem_free(ctx, m->y);
  lam_mem_free(ctx, m->pred);
  lam_mem_free(ctx, m->scratch);
  m->x = m->dx = m->scratch = NULL;
  m->y = m->pred = NULL;
  m->cap = 0;
  m->batch_bytes = 0;
}

void lam_model_free(lam_model *m) {
  if (!m) return;
  if (m->ctx->be->sync) m->ctx->be->sync(m->ctx);
  free_batch(m);
  lam_mem_free(m->ctx, m->params);
  lam_mem_free(m->ctx, m->grads);
  lam_mem_free(m->ctx, m->params_lo);
  lam_mem_free(m->ctx, m->opt_m);
  lam_mem_free(m->ctx, m->opt_v);
  lam_mem_free(m->ctx, m->stats);
  free(m->L);
  free(m);
}

/* A batch buffer: counted in m->batch_bytes (the memory figures' "activations"). */
static lam_status batch_alloc(lam_model *m, void **p, size_t bytes) {
  LAM_TRY(lam_mem_alloc(m->ctx, p, bytes));
  m->batch_bytes += lam_cache_round(bytes);
  return LAM_OK;
}

lam_status nn_model_reserve(lam_model *m, int B) {
  if (B <= m->cap) return LAM_OK;
  if (B < 1 || B > (1 << 20)) return LAM_FAIL(LAM_ERR_INVALID_ARG, "batch %d is out of range (1 to 1048576)", B);
  lam_ctx *ctx = m->ctx;
  LAM_TRY(ctx->be->sync(ctx)); /* queued work may still use the old buffers */
  free_batch(m);
  m->buffers_gen++; /* a captured graph that used the old buffers is stale */
  size_t in = (size_t)m->in_c * m->in_h * m->in_w, scratch = 1;
  lam_status s = batch_alloc(m, (void **)&m->x, (size_t)B * in * sizeof(float));
  if (s == LAM_OK) s = batch_alloc(m, (void **)&m->dx, (size_t)B * in * sizeof(float));
  if (s == LAM_OK) s = batch_alloc(m, (void **)&m->y, (size_t)B);
  if (s == LAM_OK) s = batch_alloc(m, (void **)&m->pred, (size_t)B);
  const float *prev_out = m->x;
  float *prev_dout = m->dx;
  for (int i = 0; i < m->nlayers && s == LAM_OK; i++) {
    layer *l = &m->L[i];
    size_t bytes = (size_t)B * layer_out_size(l) * sizeof(float);
    if (l->kind == L_FLATTEN) { /* a view: same memory, new shape */
      l->out = (float *)prev_out;
      l->dout = prev_dout;
    } else {
      s = batch_alloc(m, (void **)&l->out, bytes);
      if (s == LAM_OK) s = batch_alloc(m, (void **)&l->dout, bytes);
    }
    if (s == LAM_OK && l->kind == L_CONV) {
      size_t K = (size_t)l->in_c * l->k * l->k, BP = (size_t)B * l->out_h * l->out_w;
      s = batch_alloc(m, (void **)&l->col, K * BP * sizeof(float));
      size_t need = conv_scratch_floats(l, B); /* the transposed gradient, then the column gradient */
      if (need > scratch) scratch = need;
    }
    if (s == LAM_OK && l->kind == L_DENSE) {
      s = batch_alloc(m, (void **)&l->col, (size_t)B * l->in_c * sizeof(uint16_t));
      if (dense_scratch_floats(l, B) > scratch) scratch = dense_scratch_floats(l, B);
    }
    if (s == LAM_OK && l->kind == L_MAXPOOL) s = batch_alloc(m, (void **)&l->arg, (size_t)B * layer_out_size(l) * 4);
    prev_out = l->out;
    prev_dout = l->dout;
  }
  if (s == LAM_OK) s = batch_alloc(m, (void **)&m->scratch, scratch * sizeof(float));
  if (s != LAM_OK) {
    free_batch(m);
    return s;
  }
  m->cap = B;
  return LAM_OK;
}

const char *lam_model_spec(const lam_model *m) { return m ? m->spec : ""; }
size_t lam_model_param_count(const lam_model *m) { return m ? m->nparams : 0; }
int lam_model_outputs(const lam_model *m) { return m ? m->L[m->nlayers - 1].out_c : 0; }

lam_status lam_model_describe(const lam_model *m, char *buf, size_t size) {
  LAM_CHECK_ARG(m && buf && size, "lam_model_describe: NULL argument");
  size_t used = 0;
  buf[0] = '\0';
  used += (size_t)snprintf(buf, size, "input %dx%dx%d\n", m->in_c, m->in_h, m->in_w);
  for (int i = 0; i < m->nlayers && used < size; i++) {
    const layer *l = &m->L[i];
    char extra[64] = "";
    if (l->kind == L_CONV) snprintf(extra, sizeof extra, " k%d s%d p%d", l->k, l->stride, l->pad);
    if (l->kind == L_MAXPOOL) snprintf(extra, sizeof extra, " k%d s%d", l->k, l->stride);
    used += (size_t)snprintf(buf + used, size - used, "%2d %-8s%-12s -> %dx%dx%d  params %zu\n", i + 1, kind_name(l->kind),
                             extra, l->out_c, l->out_h, l->out_w, l->nw + l->nb);
  }
  if (used < size) snprintf(buf + used, size - used, "parameters: %zu\n", m->nparams);
  return LAM_OK;
}

static lam_status check_count(const char *fn, const lam_model *m, const float *host, size_t count) {
  LAM_CHECK_ARG(m && host, "%s: %s is NULL", fn, m ? "host" : "model");
  LAM_CHECK_ARG(count == m->nparams, "%s: count %zu does not match the model's %zu parameters", fn, count, m->nparams);
  return LAM_OK;
}

lam_status lam_model_params_get(lam_model *m, float *host, size_t count) {
  LAM_TRY(check_count("lam_model_params_get", m, host, count));
  return lam_mem_download(m->ctx, host, m->params, count * sizeof(float));
}

lam_status lam_model_params_set(lam_model *m, const float *host, size_t count) {
  LAM_TRY(check_count("lam_model_params_set", m, host, count));
  return lam_mem_upload(m->ctx, m->params, host, count * sizeof(float));
}

lam_status lam_model_grads_get(lam_model *m, float *host, size_t count) {
  LAM_TRY(check_count("lam_model_grads_get", m, host, count));
  return lam_mem_download(m->ctx, host, m->grads, count * sizeof(float));
}

static lam_status upload_batch(lam_model *m, const char *fn, int B, const float *x) {
  LAM_CHECK_ARG(m, "%s: model is NULL", fn);
  LAM_CHECK_ARG(B >= 1, "%s: batch %d must be at least 1", fn, B);
  LAM_CHECK_ARG(x, "%s: x is NULL", fn);
  LAM_TRY(nn_model_reserve(m, B));
  return lam_mem_upload(m->ctx, m->x, x, (size_t)B * m->in_c * m->in_h * m->in_w * sizeof(float));
}

lam_status lam_model_forward(lam_model *m, int B, const float *x, float *logits) {
  LAM_TRY(upload_batch(m, "lam_model_forward", B, x));
  LAM_CHECK_ARG(logits, "lam_model_forward: logits is NULL");
  LAM_TRY(nn_forward(m, B));
  const layer *last = &m->L[m->nlayers - 1];
  return lam_mem_download(m->ctx, logits, last->out, (size_t)B * last->out_c * sizeof(float));
}

lam_status lam_model_loss_backward(lam_model *m, int B, const float *x, const uint8_t *labels, float *loss) {
  LAM_TRY(upload_batch(m, "lam_model_loss_backward", B, x));
  LAM_CHECK_ARG(labels && loss, "lam_model_loss_backward: %s is NULL", labels ? "loss" : "labels");
  int C = lam_model_outputs(m);
  for (int b = 0; b < B; b++)
    LAM_CHECK_ARG(labels[b] < C, "lam_model_loss_backward: label %d of sample %d is not below the %d outputs", labels[b], b, C);
  lam_ctx *ctx = m->ctx;
  LAM_TRY(lam_mem_upload(ctx, m->y, labels, (size_t)B));
  LAM_TRY(ctx->be->zero(ctx, m->grads, m->nparams * sizeof(float)));
  LAM_TRY(ctx->be->zero(ctx, m->stats, 4 * sizeof(float)));
  LAM_TRY(nn_forward(m, B));
  LAM_TRY(nn_loss(m, B, 1, (float)B, NULL));
  LAM_TRY(nn_backward(m, B));
  float st[4];
  LAM_TRY(lam_mem_download(ctx, st, m->stats, sizeof st));
  *loss = st[0] / (float)B;
  return LAM_OK;
}
