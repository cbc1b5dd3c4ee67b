/* model.c — a model: its graph (spec.c, graph.c), its flat parameter, gradient and state buffers
 * (tensors are views into them), PyTorch's default initialization, the planned batch buffers
 * (plan.c), and the host-array API. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"
#include "rng.h"

lam_status lam_model_create(lam_ctx *ctx, const char *spec, int in_c, int in_h, int in_w, uint64_t seed,
                            lam_model **out) {
  return lam_model_create_clip(ctx, spec, 1, in_c, in_h, in_w, seed, out);
}

int lam_model_input_frames(const lam_model *m) { return m ? m->in_t : 0; }

lam_status lam_model_create_clip(lam_ctx *ctx, const char *spec, int T, int in_c, int in_h, int in_w, uint64_t seed,
                                 lam_model **out) {
  LAM_CHECK_ARG(ctx && out, "lam_model_create: %s is NULL", ctx ? "out" : "ctx");
  *out = NULL;
  /* tpool's backward keeps the frame of each maximum in a byte */
  LAM_CHECK_ARG(T >= 1 && T <= 255, "lam_model_create_clip: %d frames per clip; lamina takes 1 to 255", T);
  lam_model *m = calloc(1, sizeof *m);
  if (!m) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_model_create: no host memory");
  m->ctx = ctx;
  m->seed = seed;
  /* the context's paths (lam_model_options): the fusion level (the lower ones stay to compare against), the conv
   * as im2col + GEMM (bit for bit the fused block's arithmetic: test_fused compares the two) instead of the
   * backend's conv2d, and a layout forced for every model instead of nn_choose_fmt's */
  const lam_model_options *mo = &ctx->model_opts;
  m->fuse = mo->fuse, m->conv_im2col = mo->conv_im2col, m->layout = mo->layout, m->conv_stats = mo->conv_stats;
  m->in_c = in_c, m->in_h = in_h, m->in_w = in_w, m->in_t = T;
  /* as torchvision's ToTensor + Normalize(0.5, 0.5) per channel, until the caller says otherwise */
  m->norm.c = in_c;
  for (int c = 0; c < LAM_NORM_MAX_CHANNELS; c++) m->norm.mean[c] = m->norm.std[c] = 0.5f;
  lam_status s = nn_parse_spec(m, spec);
  if (s != LAM_OK) {
    free(m);
    return s;
  }
  if ((s = nn_graph_finish(m, nn_choose_fmt(m))) != LAM_OK) {
    free(m);
    return s;
  }
  size_t np = m->nparams ? m->nparams : 1, ns = m->nstate ? m->nstate : 1;
  float *host = NULL, *hstate = NULL;
  /* the backend buffers first: a model over the memory cap fails there, before any host staging */
  s = lam_mem_alloc(ctx, (void **)&m->params, np * sizeof(float));
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&m->grads, np * sizeof(float));
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&m->params_lo, np * sizeof(uint16_t));
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&m->state, ns * sizeof(float));
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&m->stats, 4 * sizeof(float));
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&m->count, sizeof(float));
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&m->rng_ctr, 4 * sizeof(int32_t));
  if (s == LAM_OK) s = ctx->be->prim->zero(ctx, m->rng_ctr, 4 * sizeof(int32_t));
  if (s == LAM_OK) {
    host = malloc(np * sizeof *host), hstate = malloc(ns * sizeof *hstate);
    if (!host || !hstate) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_model_create: no host memory for %zu parameters", np);
  }
  if (s == LAM_OK) {
    lam_rng r;
    lam_rng_seed(&r, seed);
    for (int i = 0; i < m->nnodes; i++)
      if (m->node[i].op->init) m->node[i].op->init(m, &m->node[i], &r, host, hstate);
    s = lam_mem_upload(ctx, m->params, host, m->nparams * sizeof(float));
  }
  if (s == LAM_OK && m->nstate) s = lam_mem_upload(ctx, m->state, hstate, m->nstate * sizeof(float));
  if (s == LAM_OK) s = ctx->be->prim->zero(ctx, m->grads, np * sizeof(float));
  free(host);
  free(hstate);
  if (s != LAM_OK) {
    lam_model_free(m);
    return s;
  }
  *out = m;
  return LAM_OK;
}

static void free_batch(lam_model *m) {
  lam_ctx *ctx = m->ctx;
  lam_mem_free(ctx, m->arena);
  lam_mem_free(ctx, m->x);
  lam_mem_free(ctx, m->x32);
  lam_mem_free(ctx, m->logits32);
  lam_mem_free(ctx, m->y);
  lam_mem_free(ctx, m->pred);
  lam_mem_free(ctx, m->scratch);
  m->arena = NULL;
  m->x = NULL;
  m->scratch = m->x32 = m->logits32 = NULL;
  m->y = m->pred = NULL;
  m->cap = 0;
  m->batch_bytes = m->planned_bytes = m->scratch_bytes = 0;
}

void lam_model_free(lam_model *m) {
  if (!m) return;
  if (m->ctx->be->queue->sync) m->ctx->be->queue->sync(m->ctx);
  free_batch(m);
  lam_mem_free(m->ctx, m->params);
  lam_mem_free(m->ctx, m->grads);
  lam_mem_free(m->ctx, m->params_lo);
  lam_mem_free(m->ctx, m->state);
  lam_mem_free(m->ctx, m->opt_m);
  lam_mem_free(m->ctx, m->opt_v);
  lam_mem_free(m->ctx, m->stats);
  lam_mem_free(m->ctx, m->count);
  lam_mem_free(m->ctx, m->rng_ctr);
  free(m->class_names);
  free(m);
}

/* A batch buffer: counted in m->batch_bytes (the memory figures' "activations"). */
static lam_status batch_alloc(lam_model *m, void **p, size_t bytes) {
  LAM_TRY(lam_mem_alloc(m->ctx, p, bytes));
  m->batch_bytes += lam_cache_round(bytes);
  return LAM_OK;
}

/* Labels per sample: one per output pixel (1 for a classifier). */
static size_t label_size(const lam_model *m) { return (size_t)m->tensor[m->output].h * m->tensor[m->output].w; }

lam_status nn_model_reserve(lam_model *m, int B) {
  if (B <= m->cap && m->plan_precision == m->ctx->precision) return LAM_OK;
  if (B < m->cap) B = m->cap; /* a new precision: the same capacity, planned again */
  if (B < 1 || B > (1 << 20)) return LAM_FAIL(LAM_ERR_INVALID_ARG, "batch %d is out of range (1 to 1048576)", B);
  lam_ctx *ctx = m->ctx;
  LAM_TRY(ctx->be->queue->sync(ctx)); /* queued work may still use the old buffers */
  free_batch(m);
  m->gen++; /* a captured graph that used the old buffers is stale */
  lam_fmt f = nn_choose_fmt(m); /* a new precision can mean another format: the graph's passes again */
  if (f.dt != m->fmt.dt || f.nhwc != m->fmt.nhwc) {
    const lam_fmt before = m->fmt;
    lam_status s = nn_graph_finish(m, f);
    if (s != LAM_OK) {
      nn_graph_finish(m, before); /* passed before */
      return s;
    }
  }
  size_t arena = 0, in = nn_batch_size(&m->tensor[0], 1);
  m->label_size = label_size(m);
  lam_status s = nn_plan(m, B, NULL, &arena);
  if (s == LAM_OK) s = batch_alloc(m, &m->arena, arena);
  if (s == LAM_OK) s = batch_alloc(m, (void **)&m->x, (size_t)B * in * nn_esize(m));
  if (s == LAM_OK) {
    m->tensor[0].data = m->x;
    s = nn_plan(m, B, m->arena, &arena);
  }
  if (s == LAM_OK) s = batch_alloc(m, (void **)&m->y, (size_t)B * m->label_size);
  if (s == LAM_OK) s = batch_alloc(m, (void **)&m->pred, (size_t)B * m->label_size);
  size_t scratch = 0;
  if (s == LAM_OK) s = nn_scratch_floats(m, B, &scratch);
  if (s == LAM_OK) s = batch_alloc(m, (void **)&m->scratch, scratch * sizeof(float));
  m->scratch_bytes = scratch * sizeof(float);
  if (s != LAM_OK) {
    free_batch(m);
    return s;
  }
  m->planned_bytes = arena;
  m->cap = B;
  m->plan_precision = m->ctx->precision;
  return LAM_OK;
}

lam_status lam_model_release_batch(lam_model *m) {
  LAM_CHECK_ARG(m, "lam_model_release_batch: model is NULL");
  if (!m->cap) return LAM_OK; /* nothing planned (or already released) */
  LAM_TRY(m->ctx->be->queue->sync(m->ctx)); /* queued work may still use the buffers */
  free_batch(m);                     /* cap 0: the next nn_model_reserve plans again */
  m->tensor[0].data = NULL;
  m->gen++; /* a captured graph that used the buffers is stale */
  return LAM_OK;
}

const char *lam_model_spec(const lam_model *m) { return m ? m->spec : ""; }
size_t lam_model_param_count(const lam_model *m) { return m ? m->nparams : 0; }
int lam_model_outputs(const lam_model *m) { return m ? m->tensor[m->output].c : 0; }

lam_status lam_model_input_shape(const lam_model *m, int *c, int *h, int *w) {
  LAM_CHECK_ARG(m && c && h && w, "lam_model_input_shape: NULL argument");
  *c = m->in_c, *h = m->in_h, *w = m->in_w;
  return LAM_OK;
}

lam_status lam_model_output_shape(const lam_model *m, int *c, int *h, int *w) {
  LAM_CHECK_ARG(m && c && h && w, "lam_model_output_shape: NULL argument");
  *c = m->tensor[m->output].c, *h = m->tensor[m->output].h, *w = m->tensor[m->output].w;
  return LAM_OK;
}

static size_t node_params(const nn_node *n) { return n->nw + n->nb; }

lam_status lam_model_describe(const lam_model *m, char *buf, size_t size) {
  LAM_CHECK_ARG(m && buf && size, "lam_model_describe: NULL argument");
  size_t used = 0;
  buf[0] = '\0';
  if (m->in_t > 1) used += (size_t)snprintf(buf, size, "input %d frames of %dx%dx%d\n", m->in_t, m->in_c, m->in_h, m->in_w);
  else used += (size_t)snprintf(buf, size, "input %dx%dx%d\n", m->in_c, m->in_h, m->in_w);
  for (int i = 0; i < m->nnodes && used < size; i++) {
    const nn_node *n = &m->node[i];
    const nn_tensor *t = &m->tensor[n->out];
    char extra[96] = "";
    if (n->op->describe) extra[0] = ' ', n->op->describe(m, n, extra + 1, sizeof extra - 1);
    used += (size_t)snprintf(buf + used, size - used, "%2d %-10s%-14s -> %dx%dx%d  params %zu%s%s\n", i + 1, n->op->name,
                             extra, t->c, t->h, t->w, node_params(n), t->name[0] ? "  " : "", t->name);
  }
  if (used < size) snprintf(buf + used, size - used, "parameters: %zu\n", m->nparams);
  return LAM_OK;
}

lam_status lam_model_nodes(const lam_model *m, int batch, lam_node_info *nodes, int max, int *count,
                           size_t *planned_bytes) {
  LAM_CHECK_ARG(m && count, "lam_model_nodes: %s is NULL", m ? "count" : "model");
  LAM_CHECK_ARG(batch >= 1 && batch <= (1 << 20), "lam_model_nodes: batch %d is out of range (1 to 1048576)", batch);
  *count = m->nnodes;
  for (int i = 0; i < m->nnodes && i < max && nodes; i++) {
    const nn_node *n = &m->node[i];
    const nn_tensor *t = &m->tensor[n->out];
    lam_node_info *o = &nodes[i];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", t->name[0] ? t->name : "");
    snprintf(o->op, sizeof o->op, "%s", n->op->name);
    if (n->nin == 2) snprintf(o->reads, sizeof o->reads, "%s", m->tensor[n->in[1]].name);
    o->c = t->c, o->h = t->h, o->w = t->w;
    o->params = node_params(n);
    o->flops = 2.0 * (n->op->macs ? n->op->macs(m, n) : 0.0) * m->tensor[n->in[0]].t; /* every frame */
    o->fused = n->absorbed ? 1 : n->fuse ? 2 : 0;
    const nn_fusion *f = n->absorbed ? m->node[n->fused_by].fusion : n->fusion;
    snprintf(o->fusion, sizeof o->fusion, "%s", o->fused && f ? f->name : "");
    o->stats = n->stats_for ? 1 + n->stats_one_pass : n->stats_from ? 3 : 0;
  }
  if (planned_bytes) {
    /* the plan is made on a copy: the model's own buffers stay as they are */
    lam_model *c = malloc(sizeof *c);
    if (!c) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_model_nodes: no host memory");
    memcpy(c, m, sizeof *c);
    size_t arena = 0;
    lam_status s = nn_plan(c, batch, NULL, &arena);
    size_t scratch = 0;
    if (s == LAM_OK) s = nn_scratch_floats(m, batch, &scratch);
    *planned_bytes = arena + scratch * sizeof(float) + nn_batch_size(&m->tensor[0], batch) * nn_esize(m);
    free(c);
    LAM_TRY(s);
  }
  return LAM_OK;
}

static lam_status check_count(const char *fn, const lam_model *m, const float *host, size_t count, size_t want) {
  LAM_CHECK_ARG(m && host, "%s: %s is NULL", fn, m ? "host" : "model");
  LAM_CHECK_ARG(count == want, "%s: count %zu does not match the model's %zu", fn, count, want);
  return LAM_OK;
}

lam_status lam_model_params_get(lam_model *m, float *host, size_t count) {
  LAM_TRY(check_count("lam_model_params_get", m, host, count, m ? m->nparams : 0));
  return lam_mem_download(m->ctx, host, m->params, count * sizeof(float));
}

lam_status lam_model_params_set(lam_model *m, const float *host, size_t count) {
  LAM_TRY(check_count("lam_model_params_set", m, host, count, m ? m->nparams : 0));
  return lam_mem_upload(m->ctx, m->params, host, count * sizeof(float));
}

/* The first value of v (the flat parameters, state = 0, or BatchNorm's running statistics, state = 1; n of them)
 * that is NaN or infinite, said as "parameter 12 (the weight of layer 2, dense) is NaN" into where; 0 when
 * every value is finite. One pass, where the values are on the host anyway (an epoch's end, a save). */
int nn_nonfinite(const lam_model *m, int state, const float *v, size_t n, char *where, size_t size) {
  size_t i = 0;
  while (i < n && isfinite(v[i])) i++;
  if (i == n) return 0;
  const char *part = state ? "a running statistic" : "a parameter", *layer_name = "?";
  int layer = 0;
  for (int k = 0; k < m->nnodes && !layer; k++) {
    const nn_node *nd = &m->node[k];
    if (state ? i >= nd->s_off && i < nd->s_off + nd->ns : i >= nd->w_off && i < nd->w_off + nd->nw)
      layer = k + 1, layer_name = nd->op->name, part = state ? "a running statistic" : "the weight";
    else if (!state && i >= nd->b_off && i < nd->b_off + nd->nb)
      layer = k + 1, layer_name = nd->op->name, part = "the bias";
  }
  snprintf(where, size, "%s %zu (%s of layer %d, %s) is %s", state ? "running statistic" : "parameter", i, part, layer,
           layer_name, isnan(v[i]) ? "NaN" : "infinite");
  return 1;
}

lam_status lam_model_grads_get(lam_model *m, float *host, size_t count) {
  LAM_TRY(check_count("lam_model_grads_get", m, host, count, m ? m->nparams : 0));
  return lam_mem_download(m->ctx, host, m->grads, count * sizeof(float));
}

size_t lam_model_state_count(const lam_model *m) { return m ? m->nstate : 0; }

lam_status lam_model_state_get(lam_model *m, float *host, size_t count) {
  LAM_TRY(check_count("lam_model_state_get", m, host, count, m ? m->nstate : 0));
  return count ? lam_mem_download(m->ctx, host, m->state, count * sizeof(float)) : LAM_OK;
}

lam_status lam_model_state_set(lam_model *m, const float *host, size_t count) {
  LAM_TRY(check_count("lam_model_state_set", m, host, count, m ? m->nstate : 0));
  return count ? lam_mem_upload(m->ctx, m->state, host, count * sizeof(float)) : LAM_OK;
}

lam_status lam_model_set_train(lam_model *m, int train) {
  LAM_CHECK_ARG(m, "lam_model_set_train: model is NULL");
  m->training = train != 0;
  return LAM_OK;
}

lam_status lam_model_set_dropout_mask(lam_model *m, int node, const uint8_t *mask) {
  LAM_CHECK_ARG(m, "lam_model_set_dropout_mask: model is NULL");
  LAM_CHECK_ARG(node >= 1 && node <= m->nnodes && m->node[node - 1].op == &nn_op_dropout,
                "lam_model_set_dropout_mask: node %d is not a dropout layer (nodes count from 1)", node);
  m->node[node - 1].fixed_mask = mask;
  return LAM_OK;
}

static lam_status upload_batch(lam_model *m, const char *fn, int B, const float *x) {
  LAM_CHECK_ARG(m, "%s: model is NULL", fn);
  LAM_CHECK_ARG(B >= 1, "%s: batch %d must be at least 1", fn, B);
  LAM_CHECK_ARG(x, "%s: x is NULL", fn);
  LAM_TRY(nn_model_reserve(m, B));
  const size_t bytes = (size_t)B * m->in_t * m->in_c * m->in_h * m->in_w * sizeof(float);
  if (lam_fmt_plain(m->fmt)) return lam_mem_upload(m->ctx, m->x, x, bytes);
  if (!m->x32) LAM_TRY(batch_alloc(m, (void **)&m->x32, (size_t)m->cap * nn_batch_size(&m->tensor[0], 1) * sizeof(float)));
  LAM_TRY(lam_mem_upload(m->ctx, m->x32, x, bytes));
  return m->ctx->be->prim->convert(m->ctx, B * m->in_t, m->in_c, m->in_h * m->in_w, LAM_FMT_NCHW, m->x32, m->fmt, m->x);
}

/* Forward of the batch in m->x, and its logits to the host as NCHW float32. */
static lam_status forward_out(lam_model *m, int B, float *logits) {
  LAM_TRY(nn_forward(m, B, m->training));
  const nn_tensor *out = &m->tensor[m->output];
  const size_t bytes = (size_t)B * nn_size(out) * sizeof(float);
  if (lam_fmt_plain(m->fmt)) return lam_mem_download(m->ctx, logits, out->data, bytes);
  if (!m->logits32) LAM_TRY(batch_alloc(m, (void **)&m->logits32, (size_t)m->cap * nn_size(out) * sizeof(float)));
  LAM_TRY(m->ctx->be->prim->convert(m->ctx, B, out->c, out->h * out->w, m->fmt, out->data, LAM_FMT_NCHW, m->logits32));
  return lam_mem_download(m->ctx, logits, m->logits32, bytes);
}

lam_status lam_model_forward(lam_model *m, int B, const float *x, float *logits) {
  LAM_TRY(upload_batch(m, "lam_model_forward", B, x));
  LAM_CHECK_ARG(logits, "lam_model_forward: logits is NULL");
  return forward_out(m, B, logits);
}

lam_status lam_model_forward_u8(lam_model *m, int B, const uint8_t *images, float *logits) {
  LAM_CHECK_ARG(m && images && logits, "lam_model_forward_u8: %s is NULL", !m ? "model" : !images ? "images" : "logits");
  LAM_CHECK_ARG(B >= 1, "lam_model_forward_u8: batch %d must be at least 1", B);
  LAM_TRY(nn_model_reserve(m, B));
  lam_ctx *ctx = m->ctx;
  const size_t sample = (size_t)m->in_t * m->in_c * m->in_h * m->in_w;
  uint8_t *d_img = NULL;
  int32_t *d_idx = NULL, *idx = malloc((size_t)B * sizeof *idx);
  lam_status s = idx ? LAM_OK : LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_model_forward_u8: no host memory");
  for (int i = 0; s == LAM_OK && i < B; i++) idx[i] = i;
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&d_img, (size_t)B * sample);
  if (s == LAM_OK) s = lam_mem_alloc(ctx, (void **)&d_idx, (size_t)B * sizeof *d_idx);
  if (s == LAM_OK) s = lam_mem_upload(ctx, d_img, images, (size_t)B * sample);
  if (s == LAM_OK) s = lam_mem_upload(ctx, d_idx, idx, (size_t)B * sizeof *idx);
  /* no labels: none are gathered (label_size 0), the images stand in for the pointer */
  if (s == LAM_OK)
    s = ctx->be->prim->gather(ctx, B, m->in_t, m->in_c, (size_t)m->in_h * m->in_w, d_img, 0, d_img, d_idx, NULL, &m->norm, NULL,
                        m->fmt, m->x, m->y);
  if (s == LAM_OK) s = forward_out(m, B, logits);
  if (d_img || d_idx) ctx->be->queue->sync(ctx); /* the gather has read them before they go back to the cache */
  lam_mem_free(ctx, d_img);
  lam_mem_free(ctx, d_idx);
  free(idx);
  return s;
}

lam_status lam_model_loss_backward(lam_model *m, int B, const float *x, const uint8_t *labels, float *loss) {
  LAM_TRY(upload_batch(m, "lam_model_loss_backward", B, x));
  LAM_CHECK_ARG(labels && loss, "lam_model_loss_backward: %s is NULL", labels ? "loss" : "labels");
  int C = lam_model_outputs(m);
  size_t n = (size_t)B * m->label_size;
  for (size_t i = 0; i < n; i++)
    LAM_CHECK_ARG(labels[i] < C || (m->label_size > 1 && labels[i] == LAM_LABEL_IGNORE),
                  "lam_model_loss_backward: label %d at %zu (sample %zu) is not below the %d outputs", labels[i], i,
                  i / m->label_size, C);
  lam_ctx *ctx = m->ctx;
  LAM_TRY(lam_mem_upload(ctx, m->y, labels, n));
  LAM_TRY(ctx->be->prim->zero(ctx, m->grads, m->nparams * sizeof(float)));
  LAM_TRY(ctx->be->prim->zero(ctx, m->stats, 4 * sizeof(float)));
  LAM_TRY(nn_forward(m, B, 1));
  LAM_TRY(nn_loss(m, B, 1, m->smoothing, NULL));
  LAM_TRY(nn_backward(m, B));
  float st[4];
  LAM_TRY(lam_mem_download(ctx, st, m->stats, sizeof st));
  *loss = st[2] > 0 ? st[0] / st[2] : 0.0f;
  return LAM_OK;
}

float lam_model_label_smoothing(const lam_model *m) { return m ? m->smoothing : 0.0f; }

lam_status lam_model_set_fit(lam_model *m, int h, int w, const char *const *class_names) {
  LAM_CHECK_ARG(m, "lam_model_set_fit: model is NULL");
  LAM_CHECK_ARG((h == 0) == (w == 0) && h >= 0 && w >= 0 && h <= LAM_FIT_MAX_SIDE && w <= LAM_FIT_MAX_SIDE,
                "lam_model_set_fit: size %dx%d (both 0, or 1 to %d)", h, w, LAM_FIT_MAX_SIDE);
  const size_t n = lam_names_count(class_names);
  LAM_CHECK_ARG(n <= LAM_FIT_MAX_CLASSES, "lam_model_set_fit: %zu class names, more than %d", n, LAM_FIT_MAX_CLASSES);
  for (size_t k = 0; k < n; k++) {
    const size_t len = strlen(class_names[k]);
    LAM_CHECK_ARG(len >= 1 && len <= LAM_FIT_MAX_NAME, "lam_model_set_fit: class %zu's name is %zu bytes (1 to %d)", k,
                  len, LAM_FIT_MAX_NAME);
  }
  char **names = lam_names_copy(class_names, n);
  if (n && !names) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "lam_model_set_fit: no host memory for %zu names", n);
  free(m->class_names);
  m->class_names = names;
  m->fit_h = h, m->fit_w = w;
  return LAM_OK;
}

lam_status lam_model_set_frame_stride(lam_model *m, int s) {
  LAM_CHECK_ARG(m, "lam_model_set_frame_stride: the model is NULL");
  LAM_CHECK_ARG(s >= 0 && s <= 1000, "lam_model_set_frame_stride: %d is out of range (0: none, or 1 to 1000)", s);
  m->fit_stride = s;
  return LAM_OK;
}

int lam_model_frame_stride(const lam_model *m) { return m ? m->fit_stride : 0; }

lam_status lam_model_fit(const lam_model *m, int *h, int *w) {
  LAM_CHECK_ARG(m && h && w, "lam_model_fit: NULL argument");
  *h = m->fit_h, *w = m->fit_w;
  return LAM_OK;
}

const char *lam_model_class_name(const lam_model *m, int k) {
  if (!m || k < 0 || (size_t)k >= lam_names_count((const char *const *)m->class_names)) return NULL;
  return m->class_names[k];
}

lam_status lam_model_set_label_smoothing(lam_model *m, float s) {
  LAM_CHECK_ARG(m, "lam_model_set_label_smoothing: model is NULL");
  LAM_CHECK_ARG(s >= 0.0f && s < 1.0f, "lam_model_set_label_smoothing: %g is not in [0, 1)", (double)s);
  m->smoothing = s;
  m->gen++; /* a captured step has the old value baked in */
  return LAM_OK;
}

lam_status lam_augment_parse(const char *s, int *pad, int *flip) {
  LAM_CHECK_ARG(s && pad && flip, "lam_augment_parse: NULL argument");
  int p = 0, f = 0;
  if (strcmp(s, "none")) {
    for (const char *part = s;; part += strcspn(part, ",") + 1) {
      const int len = (int)strcspn(part, ",");
      if (len == 4 && !strncmp(part, "flip", 4)) {
        f = 1;
      } else if (len > 5 && !strncmp(part, "crop:", 5)) {
        long v = 0;
        int digits = 0;
        for (const char *q = part + 5; q < part + len && isdigit((unsigned char)*q) && v <= 255; q++, digits++)
          v = v * 10 + (*q - '0');
        if (digits != len - 5 || v > 255)
          return LAM_FAIL(LAM_ERR_INVALID_ARG, "'%.*s' is not crop:P with P a whole number in 0..255", len, part);
        p = (int)v;
      } else {
        return LAM_FAIL(LAM_ERR_INVALID_ARG, "'%.*s' is not one of crop:P (P in 0..255), flip (e.g. crop:4,flip)",
                        len, part);
      }
      if (!part[len]) break;
    }
  }
  *pad = p, *flip = f;
  return LAM_OK;
}

lam_status lam_model_set_augment(lam_model *m, int pad, int flip) {
  LAM_CHECK_ARG(m, "lam_model_set_augment: model is NULL");
  LAM_CHECK_ARG(pad >= 0 && pad <= m->in_h && pad <= m->in_w,
                "lam_model_set_augment: crop padding %d is not in 0..%d (the model's input is %dx%d)", pad,
                m->in_h < m->in_w ? m->in_h : m->in_w, m->in_h, m->in_w);
  LAM_CHECK_ARG(flip == 0 || flip == 1, "lam_model_set_augment: flip is %d, not 0 or 1", flip);
  m->aug_pad = pad, m->aug_flip = flip;
  m->gen++; /* a captured step has the old gather baked in */
  return LAM_OK;
}

/* The augmentation of the model's training batches, or NULL where there is none. */
const lam_aug *nn_aug(const lam_model *m, uint64_t seed, lam_aug *a) {
  if (!m->aug_pad && !m->aug_flip) return NULL;
  a->h = m->in_h, a->w = m->in_w, a->pad = m->aug_pad, a->flip = m->aug_flip;
  a->seed = seed, a->ctr = m->rng_ctr + 3;
  return a;
}

lam_status lam_model_set_normalization(lam_model *m, int c, const float *mean, const float *std) {
  LAM_CHECK_ARG(m && mean && std, "lam_model_set_normalization: NULL argument");
  LAM_CHECK_ARG(c == m->in_c, "lam_model_set_normalization: %d channels given but the model takes %d", c, m->in_c);
  LAM_CHECK_ARG(c <= LAM_NORM_MAX_CHANNELS, "lam_model_set_normalization: %d channels, at most %d", c,
                LAM_NORM_MAX_CHANNELS);
  for (int i = 0; i < c; i++)
    LAM_CHECK_ARG(isfinite(mean[i]) && std[i] > 0 && isfinite(std[i]),
                  "lam_model_set_normalization: channel %d: mean %g, std %g (std must be > 0, both finite)", i,
                  (double)mean[i], (double)std[i]);
  for (int i = 0; i < c; i++) m->norm.mean[i] = mean[i], m->norm.std[i] = std[i];
  m->gen++; /* a captured step has the old values baked in */
  return LAM_OK;
}

lam_status lam_normalization_parse(const char *s, int c, float *mean, float *std) {
  LAM_CHECK_ARG(s && mean && std, "lam_normalization_parse: NULL argument");
  LAM_CHECK_ARG(c >= 1 && c <= LAM_NORM_MAX_CHANNELS, "lam_normalization_parse: %d channels (1 to %d)", c,
                LAM_NORM_MAX_CHANNELS);
  const char *p = s;
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < c; i++) {
      char *end;
      errno = 0;
      float v = strtof(p, &end);
      char sep = i + 1 < c ? ',' : k ? '\0' : '/';
      if (end == p || errno || !isfinite(v) || *end != sep || (k && !(v > 0)) || isspace((unsigned char)*p))
        return LAM_FAIL(LAM_ERR_INVALID_ARG, "'%.200s' is not %d means, '/', %d stds (> 0), comma-separated", s, c, c);
      (k ? std : mean)[i] = v;
      p = end + (sep ? 1 : 0);
    }
  return LAM_OK;
}

lam_status lam_model_normalization(const lam_model *m, float *mean, float *std) {
  LAM_CHECK_ARG(m && mean && std, "lam_model_normalization: NULL argument");
  for (int i = 0; i < m->norm.c; i++) mean[i] = m->norm.mean[i], std[i] = m->norm.std[i];
  return LAM_OK;
}
