/* perf_cases.c — test_prims --perf's table: every primitive of src/prims.h at least once (a few with variants), each
 * case its setup and its call (perf.h says how a case works). */
#include "perf.h"

/* ---- the cases, by family (the order of src/prims.h's list). Each counts the bytes it must move: every input read
 * once and every output written once, at the row's element size (parameters, statistics and indices as stored);
 * an output added into is read and written. Vectors of C or fewer values are left out where the tensors dwarf
 * them. ---- */

/* gemm: C = A B (M = N = K), fp32 (the run's precision); A, B read, C written. gemm_half: the same on 16-bit A and
 * B, C 16-bit too (the half precisions' forward). */
static lam_status gemm_setup(perf_run *r, size_t es) {
  static const int d[N_SIZES] = {256, 2048, 4096};
  const size_t kk = (size_t)d[r->size] * d[r->size];
  r->K = d[r->size];
  snprintf(r->shape, sizeof r->shape, "M=N=K %d", r->K);
  r->es = es, r->x = act(r, kk), r->w = act(r, kk), r->y = act(r, kk);
  r->bytes = 3.0 * es * kk, r->flops = 2.0 * kk * r->K;
  return LAM_OK;
}
static lam_status pc_gemm(perf_run *r) {
  if (r->setup) return gemm_setup(r, 4);
  const int k = r->K;
  return BEC->gemm(CTX, 0, 0, k, k, k, 1.0f, r->x, k, r->w, k, 0.0f, r->y, k);
}
static lam_status pc_gemm_half(perf_run *r) {
  if (r->setup) return gemm_setup(r, 2);
  const int k = r->K;
  return BEC->gemm_half(CTX, r->f.dt, 0, 0, k, k, k, 1.0f, r->x, k, r->w, k, 0.0f, r->y, 1, k);
}
/* to_half: n floats read, n 16-bit values written. */
static lam_status pc_to_half(perf_run *r) {
  if (r->setup) {
    flat(r), r->x = f32(r, r->n), r->y = act(r, r->n), r->bytes = 4.0 * r->n + NB(r->n);
    return LAM_OK;
  }
  return BEC->to_half(CTX, r->f.dt, r->n, r->x, r->y);
}
/* zero, poison: n floats' bytes written. */
static lam_status pc_zero(perf_run *r) {
  if (r->setup) {
    flat(r), r->y = f32(r, r->n), r->bytes = 4.0 * r->n;
    return LAM_OK;
  }
  return BEC->zero(CTX, r->y, r->n * 4);
}
static lam_status pc_poison(perf_run *r) {
  if (r->setup) return pc_zero(r);
  return BEC->poison(CTX, r->y, r->n * 4);
}

/* im2col / col2im: a 3x3 convolution's patches (pad 1) of (B, 64, 32, 32), B an eighth of the images' (col is 9
 * times x): x (float) read and col (of the row's type) written, or back (dx written). */
static lam_status im2col_setup(perf_run *r) {
  img(r);
  r->B = r->B >= 8 ? r->B / 8 : 1, r->n = (size_t)r->B * r->C * r->P;
  snprintf(r->shape, sizeof r->shape, "B%d C%d %dx%d K3", r->B, r->C, r->H, r->W);
  r->cg = (lam_conv_geom){r->C, r->H, r->W, 3, 1, 1, r->H, r->W};
  r->x = f32(r, r->n), r->y = act(r, 9 * r->n);
  r->bytes = 4.0 * r->n + NB(9 * r->n);
  return LAM_OK;
}
static lam_status pc_im2col(perf_run *r) {
  if (r->setup) return im2col_setup(r);
  return BEC->im2col(CTX, &r->cg, r->B, r->x, r->y, r->f.dt);
}
static lam_status pc_col2im(perf_run *r) {
  if (r->setup) return im2col_setup(r);
  return BEC->col2im(CTX, &r->cg, r->B, r->y, r->f.dt, 0, r->x);
}
/* cbp_to_bcp / bcp_to_cbp: the conv GEMM's (C, B*P) to (B, C, P) and back, with the bias (its gradient); n read, n
 * written. */
static lam_status pc_cbp_to_bcp(perf_run *r) {
  if (r->setup) {
    img(r), r->x = f32(r, r->n), r->y = f32(r, r->n), r->b = f32(r, r->C), r->bytes = 8.0 * r->n;
    return LAM_OK;
  }
  return BEC->cbp_to_bcp(CTX, r->B, r->C, r->P, r->x, r->b, r->y);
}
static lam_status pc_bcp_to_cbp(perf_run *r) {
  if (r->setup) return pc_cbp_to_bcp(r);
  return BEC->bcp_to_cbp(CTX, r->B, r->C, r->P, r->y, r->x, r->b);
}

/* conv2d_*: 64 -> 64 channels, 3x3, pad 1, on the images: x, W read and y written (fwd), dy, W read and dx written
 * (bwd_data), x, dy read and dW read and written (bwd_filter); 2 B OC P C 9 flops each. The workspace is
 * conv2d_workspace's for this geometry. */
static lam_status conv_setup(perf_run *r) {
  img(r), r->OC = 64, r->K = 3;
  snprintf(r->shape, sizeof r->shape, "B%d %d->%d %dx%d K3", r->B, r->C, r->OC, r->H, r->W);
  r->cg = (lam_conv_geom){r->C, r->H, r->W, r->K, 1, 1, r->H, r->W};
  SETUP_CALL(BEC->conv2d_workspace(CTX, r->f, &r->cg, r->OC, r->B, &r->ws_bytes));
  r->ws = r->ws_bytes ? perf_alloc(r, r->ws_bytes) : NULL;
  const size_t nw = (size_t)r->OC * r->C * r->K * r->K;
  r->x = act(r, r->n), r->w = act(r, nw), r->y = act(r, r->n), r->dw = f32(r, nw);
  r->flops = 2.0 * r->B * r->OC * r->P * (double)nw / r->OC;
  r->bytes = NB(2 * r->n + nw);
  return LAM_OK;
}
static lam_status pc_conv2d_workspace(perf_run *r) { /* a host query (timed by the host clock): no bytes */
  if (r->setup) {
    lam_status s = conv_setup(r);
    r->bytes = r->flops = 0;
    return s;
  }
  size_t b;
  return BEC->conv2d_workspace(CTX, r->f, &r->cg, r->OC, r->B, &b);
}
static lam_status pc_conv2d_fwd(perf_run *r) {
  if (r->setup) return conv_setup(r);
  return BEC->conv2d_fwd(CTX, r->f, &r->cg, r->OC, r->B, r->x, r->w, r->y, r->ws, r->ws_bytes);
}
static lam_status pc_conv2d_fwd_stats(perf_run *r) { /* as measured (force 0): cuDNN's one graph or two steps */
  if (r->setup) {
    lam_status s = conv_setup(r);
    r->work = f32(r, 2 * (size_t)r->OC);
    return s;
  }
  int one_pass;
  return BEC->conv2d_fwd_stats(CTX, r->f, &r->cg, r->OC, r->B, r->x, r->w, r->y, r->work, 0, r->ws, r->ws_bytes,
                               &one_pass);
}
static lam_status pc_conv2d_bwd_data(perf_run *r) { /* y is dy, x is dx */
  if (r->setup) return conv_setup(r);
  return BEC->conv2d_bwd_data(CTX, r->f, &r->cg, r->OC, r->B, r->y, r->w, r->x, 0, r->ws, r->ws_bytes);
}
static lam_status pc_conv2d_bwd_filter(perf_run *r) {
  if (r->setup) {
    lam_status s = conv_setup(r);
    r->bytes = NB(2 * r->n) + 8.0 * r->OC * r->C * r->K * r->K;
    return s;
  }
  return BEC->conv2d_bwd_filter(CTX, r->f, &r->cg, r->OC, r->B, r->x, r->y, r->dw, r->ws, r->ws_bytes);
}

/* add_bias: y (rows, 512) += b, read and written; bias_grad: dy read. */
static lam_status pc_add_bias(perf_run *r) {
  if (r->setup) {
    flat(r), r->cols = 512, r->rows = r->n / r->cols;
    snprintf(r->shape, sizeof r->shape, "%zu x %zu", r->rows, r->cols);
    r->y = f32(r, r->n), r->b = f32(r, r->cols), r->bytes = 8.0 * r->n;
    return LAM_OK;
  }
  return BEC->add_bias(CTX, (int)r->rows, (int)r->cols, r->y, r->b);
}
static lam_status pc_bias_grad(perf_run *r) {
  if (r->setup) {
    pc_add_bias(r), r->bytes = 4.0 * r->n;
    return LAM_OK;
  }
  return BEC->bias_grad(CTX, (int)r->rows, (int)r->cols, r->y, r->b);
}
/* channel_bias_fwd: y += bias[c], read and written; channel_bias_bwd: dy read. */
static lam_status pc_channel_bias_fwd(perf_run *r) {
  if (r->setup) {
    img(r), r->y = act(r, r->n), r->b = f32(r, r->C), r->bytes = NB(2 * r->n);
    return LAM_OK;
  }
  return BEC->channel_bias_fwd(CTX, r->f, r->B, r->C, r->P, r->y, r->b);
}
static lam_status pc_channel_bias_bwd(perf_run *r) {
  if (r->setup) {
    pc_channel_bias_fwd(r), r->bytes = NB(r->n);
    return LAM_OK;
  }
  return BEC->channel_bias_bwd(CTX, r->f, r->B, r->C, r->P, r->y, r->b);
}

/* ---- pooling, upsampling ---- */

/* maxpool 2x2 stride 2 on the images: x read, y (n/4) and arg (n/4 int32) written; its backward dy and arg read, dx
 * written (arg from maxpool_fwd here). avgpool: the same without arg. */
static lam_status pool_setup(perf_run *r) {
  img(r), r->pg = (lam_pool_geom){r->C, r->H, r->W, 2, 2, r->H / 2, r->W / 2};
  r->x = act(r, r->n), r->y = act(r, r->n / 4), r->aux = perf_alloc(r, r->n);
  r->bytes = NB(r->n + r->n / 4);
  return LAM_OK;
}
static lam_status pc_maxpool_fwd(perf_run *r) {
  if (r->setup) {
    pool_setup(r), r->bytes += r->n;
    return LAM_OK;
  }
  return BEC->maxpool_fwd(CTX, r->f, &r->pg, r->B, r->x, r->y, r->aux);
}
static lam_status pc_maxpool_bwd(perf_run *r) { /* y is dy, x is dx */
  if (r->setup) {
    pool_setup(r), r->bytes += r->n;
    SETUP_CALL(BEC->maxpool_fwd(CTX, r->f, &r->pg, r->B, r->x, r->y, r->aux));
    return LAM_OK;
  }
  return BEC->maxpool_bwd(CTX, r->f, &r->pg, r->B, r->y, r->aux, r->x);
}
static lam_status pc_avgpool_fwd(perf_run *r) {
  if (r->setup) return pool_setup(r);
  return BEC->avgpool_fwd(CTX, r->f, &r->pg, r->B, r->x, r->y);
}
static lam_status pc_avgpool_bwd(perf_run *r) {
  if (r->setup) return pool_setup(r);
  return BEC->avgpool_bwd(CTX, r->f, &r->pg, r->B, r->y, r->x);
}
/* plane_mean: x read, y (B, C) written; backward dy (B, C) read, dx written. */
static lam_status pc_plane_mean_fwd(perf_run *r) {
  if (r->setup) {
    img(r), r->x = act(r, r->n), r->y = act(r, (size_t)r->B * r->C), r->bytes = NB(r->n + (size_t)r->B * r->C);
    return LAM_OK;
  }
  return BEC->plane_mean_fwd(CTX, r->f, r->B, r->C, r->P, r->x, r->y);
}
static lam_status pc_plane_mean_bwd(perf_run *r) {
  if (r->setup) return pc_plane_mean_fwd(r);
  return BEC->plane_mean_bwd(CTX, r->f, r->B, r->C, r->P, r->y, r->x);
}
/* upsample by 2 to the images: x (n/4) read, y written; backward dy read, dx (n/4) written. */
static lam_status pc_upsample_fwd(perf_run *r) {
  if (r->setup) {
    img(r), r->x = act(r, r->n / 4), r->y = act(r, r->n), r->bytes = NB(r->n + r->n / 4);
    return LAM_OK;
  }
  return BEC->upsample_fwd(CTX, r->f, r->B, r->C, r->H / 2, r->W / 2, 2, r->x, r->y);
}
static lam_status pc_upsample_bwd(perf_run *r) {
  if (r->setup) return pc_upsample_fwd(r);
  return BEC->upsample_bwd(CTX, r->f, r->B, r->C, r->H / 2, r->W / 2, 2, r->y, r->x);
}

/* ---- activations, dropout ---- */

/* act_fwd: x read, y written; act_bwd: dy and y (relu: the output) or x (gelu) read, dx written. */
static lam_status act_setup(perf_run *r) {
  flat(r), r->x = act(r, r->n), r->y = act(r, r->n), r->dy = act(r, r->n), r->dx = act(r, r->n);
  r->bytes = NB(2 * r->n);
  return LAM_OK;
}
static lam_status pc_act_fwd_relu(perf_run *r) {
  if (r->setup) return act_setup(r);
  return BEC->act_fwd(CTX, r->f, LAM_ACT_RELU, 0.0f, r->n, r->x, r->y);
}
static lam_status pc_act_fwd_gelu(perf_run *r) {
  if (r->setup) return act_setup(r);
  return BEC->act_fwd(CTX, r->f, LAM_ACT_GELU, 0.0f, r->n, r->x, r->y);
}
static lam_status pc_act_bwd_relu(perf_run *r) {
  if (r->setup) {
    act_setup(r), r->bytes = NB(3 * r->n);
    return LAM_OK;
  }
  return BEC->act_bwd(CTX, r->f, LAM_ACT_RELU, 0.0f, r->n, NULL, r->y, r->dy, r->dx);
}
static lam_status pc_act_bwd_gelu(perf_run *r) {
  if (r->setup) return pc_act_bwd_relu(r);
  return BEC->act_bwd(CTX, r->f, LAM_ACT_GELU, 0.0f, r->n, r->x, NULL, r->dy, r->dx);
}
/* dropout_mask: n mask bytes written; mask_scale: x and the mask read, y written. */
static lam_status pc_dropout_mask(perf_run *r) {
  if (r->setup) {
    flat(r), r->aux = u8(r, r->n), r->bytes = (double)r->n;
    return LAM_OK;
  }
  return BEC->dropout_mask(CTX, r->n, 0.5f, 12345u, NULL, r->aux);
}
static lam_status pc_mask_scale(perf_run *r) {
  if (r->setup) {
    act_setup(r), r->aux = u8(r, r->n), r->bytes = NB(2 * r->n) + (double)r->n;
    return LAM_OK;
  }
  return BEC->mask_scale(CTX, r->f, r->n, r->x, r->aux, 2.0f, r->y);
}

/* ---- normalization (training mode; C = 64 channels of 32x32 images) ---- */

static void norm_bufs(perf_run *r) {
  img(r), r->x = act(r, r->n), r->y = act(r, r->n), r->dy = act(r, r->n), r->dx = act(r, r->n);
  r->gamma = pos(r, r->C), r->beta = f32(r, r->C), r->mean = f32(r, r->C), r->invstd = pos(r, r->C);
  r->rm = f32(r, r->C), r->rv = pos(r, r->C), r->dw = f32(r, r->C), r->db = f32(r, r->C), r->work = f32(r, 2 * (size_t)r->C);
}
/* bn_fwd: x read, y written (a kernel that reads x twice, statistics then y, moves a third more) */
static lam_status pc_bn_fwd(perf_run *r) {
  if (r->setup) {
    norm_bufs(r), r->bytes = NB(2 * r->n);
    return LAM_OK;
  }
  return BEC->bn_fwd(CTX, r->f, r->B, r->C, r->P, r->x, r->gamma, r->beta, r->y, r->mean, r->invstd, r->rm, r->rv, 0.1f,
                     1e-5f, 1);
}
static lam_status pc_bn_fwd_eval(perf_run *r) {
  if (r->setup) return pc_bn_fwd(r);
  return BEC->bn_fwd(CTX, r->f, r->B, r->C, r->P, r->x, r->gamma, r->beta, r->y, NULL, NULL, r->rm, r->rv, 0.1f, 1e-5f, 0);
}
/* bn_bwd: x and dy read, dx written */
static lam_status pc_bn_bwd(perf_run *r) {
  if (r->setup) {
    norm_bufs(r), r->bytes = NB(3 * r->n);
    return LAM_OK;
  }
  return BEC->bn_bwd(CTX, r->f, r->B, r->C, r->P, r->x, r->dy, r->gamma, r->mean, r->invstd, r->dx, r->dw, r->db);
}
/* bn_act_fwd relu: x read, y written; with the residual r (aux) read as well */
static lam_status pc_bn_act_fwd(perf_run *r) {
  if (r->setup) {
    norm_bufs(r), r->bytes = NB(2 * r->n);
    return LAM_OK;
  }
  return BEC->bn_act_fwd(CTX, r->f, r->B, r->C, r->P, LAM_ACT_RELU, 0.0f, r->x, NULL, r->gamma, r->beta, r->y, r->mean,
                         r->invstd, r->rm, r->rv, 0.1f, 1e-5f, 1);
}
static lam_status pc_bn_act_fwd_res(perf_run *r) {
  if (r->setup) {
    norm_bufs(r), r->aux = act(r, r->n), r->bytes = NB(3 * r->n);
    return LAM_OK;
  }
  return BEC->bn_act_fwd(CTX, r->f, r->B, r->C, r->P, LAM_ACT_RELU, 0.0f, r->x, r->aux, r->gamma, r->beta, r->y, r->mean,
                         r->invstd, r->rm, r->rv, 0.1f, 1e-5f, 1);
}
/* bn_act_bwd relu: x, y, dy read, dx written */
static lam_status pc_bn_act_bwd(perf_run *r) {
  if (r->setup) {
    norm_bufs(r), r->bytes = NB(4 * r->n);
    return LAM_OK;
  }
  return BEC->bn_act_bwd(CTX, r->f, r->B, r->C, r->P, LAM_ACT_RELU, 0.0f, r->x, r->y, r->dy, r->gamma, r->beta, r->mean,
                         r->invstd, r->dx, NULL, 0, r->dw, r->db);
}
/* bn_act_pool relu, 2x2 stride 2: x read, y (n/4) and arg (n/4 bytes) written; its backward x, dy (n/4) and arg
 * read, dx written (arg from the forward here) */
static void bn_pool_bufs(perf_run *r) {
  norm_bufs(r), r->pg = (lam_pool_geom){r->C, r->H, r->W, 2, 2, r->H / 2, r->W / 2}, r->aux = perf_alloc(r, r->n / 4);
}
static lam_status pc_bn_act_pool_fwd(perf_run *r) {
  if (r->setup) {
    bn_pool_bufs(r), r->bytes = NB(r->n + r->n / 4) + r->n / 4;
    return LAM_OK;
  }
  return BEC->bn_act_pool_fwd(CTX, r->f, &r->pg, r->B, LAM_ACT_RELU, 0.0f, r->x, r->gamma, r->beta, r->y, r->aux,
                              r->mean, r->invstd, r->rm, r->rv, 0.1f, 1e-5f, 1);
}
static lam_status pc_bn_act_pool_bwd(perf_run *r) { /* y is the pooled dy */
  if (r->setup) {
    bn_pool_bufs(r), r->bytes = NB(2 * r->n + r->n / 4) + r->n / 4;
    SETUP_CALL(BEC->bn_act_pool_fwd(CTX, r->f, &r->pg, r->B, LAM_ACT_RELU, 0.0f, r->x, r->gamma, r->beta, r->y, r->aux,
                                    r->mean, r->invstd, r->rm, r->rv, 0.1f, 1e-5f, 1));
    return LAM_OK;
  }
  return BEC->bn_act_pool_bwd(CTX, r->f, &r->pg, r->B, LAM_ACT_RELU, 0.0f, r->x, r->y, r->aux, r->gamma, r->beta,
                              r->mean, r->invstd, r->dx, r->dw, r->db);
}
/* bn_sums of x (sum, sum of squares): x read; of dy: x and dy read */
static lam_status pc_bn_sums_x(perf_run *r) {
  if (r->setup) {
    norm_bufs(r), r->bytes = NB(r->n);
    return LAM_OK;
  }
  return BEC->bn_sums(CTX, r->f, r->B, r->C, r->P, r->x, NULL, NULL, NULL, r->work, NULL, NULL);
}
static lam_status pc_bn_sums_dy(perf_run *r) {
  if (r->setup) {
    norm_bufs(r), r->bytes = NB(2 * r->n);
    return LAM_OK;
  }
  return BEC->bn_sums(CTX, r->f, r->B, r->C, r->P, r->x, r->dy, r->mean, r->invstd, r->work, r->dw, r->db);
}
/* bn_sync_stats: per channel only (2C sums read, 5C written): one size, C = 64 */
static lam_status pc_bn_sync_stats(perf_run *r) {
  if (r->setup) {
    norm_bufs(r), snprintf(r->shape, sizeof r->shape, "C%d", r->C);
    r->aux = pos(r, 2 * (size_t)r->C), r->bytes = 7.0 * 4 * r->C;
    return LAM_OK;
  }
  return BEC->bn_sync_stats(CTX, r->C, (double)r->B * r->P, r->aux, 1e-5f, 0.1f, r->mean, r->invstd, r->work, r->rm, r->rv);
}
/* bn_sync_dx: x and dy read, dx written */
static lam_status pc_bn_sync_dx(perf_run *r) {
  if (r->setup) {
    norm_bufs(r), r->aux = f32(r, 2 * (size_t)r->C), r->bytes = NB(3 * r->n);
    return LAM_OK;
  }
  return BEC->bn_sync_dx(CTX, r->f, r->B, r->C, r->P, r->x, r->dy, r->gamma, r->mean, r->invstd, r->aux,
                         (double)r->B * r->P, r->dx);
}
/* groupnorm, 32 groups: forward x read, y written; backward x and dy read, dx written */
static lam_status pc_groupnorm_fwd(perf_run *r) {
  if (r->setup) {
    norm_bufs(r), r->G = 32;
    r->mean = f32(r, (size_t)r->B * r->G), r->invstd = pos(r, (size_t)r->B * r->G), r->work = f32(r, 2 * (size_t)r->B * r->C);
    snprintf(r->shape, sizeof r->shape, "B%d C%d %dx%d G%d", r->B, r->C, r->H, r->W, r->G);
    r->bytes = NB(2 * r->n);
    return LAM_OK;
  }
  return BEC->groupnorm_fwd(CTX, r->f, r->B, r->C, r->P, r->G, r->x, r->gamma, r->beta, r->y, r->mean, r->invstd, 1e-5f);
}
static lam_status pc_groupnorm_bwd(perf_run *r) {
  if (r->setup) {
    pc_groupnorm_fwd(r), r->bytes = NB(3 * r->n);
    return LAM_OK;
  }
  return BEC->groupnorm_bwd(CTX, r->f, r->B, r->C, r->P, r->G, r->x, r->dy, r->gamma, r->mean, r->invstd, r->dx, r->dw,
                            r->db, r->work);
}

/* ---- a clip's frames, layout ---- */

/* tpool over T = 8 frames of S = 4096 values: x (B*T, S) read, y (B, S) written (max: and arg, a byte each);
 * backward the other way (max: arg read, from tpool_fwd here). */
static lam_status tpool_setup(perf_run *r, int max) {
  flat(r), r->T = 8, r->S = 4096, r->B = (int)(r->n / (r->T * r->S));
  snprintf(r->shape, sizeof r->shape, "B%d T%d S%zu", r->B, r->T, r->S);
  r->x = act(r, r->n), r->y = act(r, r->n / r->T), r->aux = u8(r, r->n / r->T);
  r->bytes = NB(r->n + r->n / r->T) + (max ? (double)(r->n / r->T) : 0.0);
  return LAM_OK;
}
static lam_status pc_tpool_fwd(perf_run *r) {
  if (r->setup) return tpool_setup(r, 0);
  return BEC->tpool_fwd(CTX, r->f, r->B, r->T, r->S, 0, r->x, r->y, r->aux);
}
static lam_status pc_tpool_fwd_max(perf_run *r) {
  if (r->setup) return tpool_setup(r, 1);
  return BEC->tpool_fwd(CTX, r->f, r->B, r->T, r->S, 1, r->x, r->y, r->aux);
}
static lam_status pc_tpool_bwd(perf_run *r) {
  if (r->setup) return tpool_setup(r, 0);
  return BEC->tpool_bwd(CTX, r->f, r->B, r->T, r->S, 0, r->y, r->aux, r->x);
}
static lam_status pc_tpool_bwd_max(perf_run *r) {
  if (r->setup) {
    tpool_setup(r, 1);
    SETUP_CALL(BEC->tpool_fwd(CTX, r->f, r->B, r->T, r->S, 1, r->x, r->y, r->aux));
    return LAM_OK;
  }
  return BEC->tpool_bwd(CTX, r->f, r->B, r->T, r->S, 1, r->y, r->aux, r->x);
}
/* tcat: T = 4 frames of (64, 32, 32) joined as channels: n read, n written */
static lam_status pc_tcat_fwd(perf_run *r) {
  if (r->setup) {
    img(r), r->T = 4, r->B = r->B >= 4 ? r->B / 4 : 1, r->n = (size_t)r->B * r->T * r->C * r->P;
    snprintf(r->shape, sizeof r->shape, "B%d T%d C%d %dx%d", r->B, r->T, r->C, r->H, r->W);
    r->x = act(r, r->n), r->y = act(r, r->n), r->bytes = NB(2 * r->n);
    return LAM_OK;
  }
  return BEC->tcat_fwd(CTX, r->f, r->B, r->T, r->C, (size_t)r->P, r->x, r->y);
}
static lam_status pc_tcat_bwd(perf_run *r) {
  if (r->setup) return pc_tcat_fwd(r);
  return BEC->tcat_bwd(CTX, r->f, r->B, r->T, r->C, (size_t)r->P, r->y, r->x);
}
/* add: a and b read, y written */
static lam_status pc_add(perf_run *r) {
  if (r->setup) {
    act_setup(r), r->bytes = NB(3 * r->n);
    return LAM_OK;
  }
  return BEC->add(CTX, r->f, r->n, r->x, r->dy, r->y);
}
/* copy_rows: rows of 1024 values into every other slot of 2048 (a concat's half): n read, n written */
static lam_status pc_copy_rows(perf_run *r) {
  if (r->setup) {
    flat(r), r->cols = 1024, r->rows = r->n / r->cols;
    snprintf(r->shape, sizeof r->shape, "%zu x %zu", r->rows, r->cols);
    r->x = act(r, r->n), r->y = act(r, 2 * r->n), r->bytes = NB(2 * r->n);
    return LAM_OK;
  }
  return BEC->copy_rows(CTX, r->f, r->rows, r->cols, r->x, r->cols, r->y, 2 * r->cols);
}
/* convert: the row's format to NCHW float32 (for nchw f32 itself: to NHWC float32); n read, n written */
static lam_status pc_convert(perf_run *r) {
  if (r->setup) {
    img(r), r->x = act(r, r->n), r->y = f32(r, r->n), r->bytes = NB(r->n) + 4.0 * r->n;
    return LAM_OK;
  }
  const lam_fmt to = lam_fmt_plain(r->f) ? lam_fmt_of(LAM_DT_F32, 1) : LAM_FMT_NCHW;
  return BEC->convert(CTX, r->B, r->C, r->P, r->f, r->x, to, r->y);
}

/* ---- loss ---- */

/* label_count: n label bytes read */
static lam_status pc_label_count(perf_run *r) {
  if (r->setup) {
    flat(r), r->aux = u8(r, r->n), r->y = f32(r, 1), r->bytes = (double)r->n;
    return LAM_OK;
  }
  return BEC->label_count(CTX, r->n, r->aux, r->y);
}
/* xent over 16 classes of 64x64 pixels (segmentation's shape): logits and labels read, dlogits and pred written */
static lam_status pc_xent(perf_run *r) {
  if (r->setup) {
    flat(r), r->C = 16, r->P = 4096, r->B = (int)(r->n / ((size_t)r->C * r->P));
    snprintf(r->shape, sizeof r->shape, "B%d C%d P%d", r->B, r->C, r->P);
    const size_t np = (size_t)r->B * r->P;
    uint8_t *lab = xmalloc(np);
    for (size_t i = 0; i < np; i++) lab[i] = i % 19 == 7 ? LAM_LABEL_IGNORE : (uint8_t)(tu_next(&g_r) % (uint64_t)r->C);
    r->aux = put(r, lab, np), free(lab);
    r->x = act(r, r->n), r->dx = act(r, r->n), r->aux2 = u8(r, np), r->y = f32(r, 3);
    r->bytes = NB(2 * r->n) + 2.0 * np;
    return LAM_OK;
  }
  return BEC->xent(CTX, r->f, r->B, r->C, r->P, r->x, r->aux, r->dx, 1.0f / (float)((size_t)r->B * r->P), NULL, NULL, 0.1f,
                   r->y, r->aux2);
}

/* ---- the input pipeline ---- */

/* gather of B samples of 3 x 32 x 32 bytes from a set of B (idx a random draw): the samples' bytes, idx and labels
 * read, x (the row's format) and the labels written; with crop and flip, the training's augmentation */
static lam_status gather_setup(perf_run *r, int aug) {
  flat(r), r->C = 3, r->P = 1024, r->T = 1, r->B = (int)(r->n / ((size_t)r->C * r->P));
  snprintf(r->shape, sizeof r->shape, "B%d C%d 32x32", r->B, r->C);
  int32_t *idx = xmalloc((size_t)r->B * 4);
  for (int i = 0; i < r->B; i++) idx[i] = (int32_t)(tu_next(&g_r) % (uint64_t)r->B);
  r->aux = put(r, idx, (size_t)r->B * 4), free(idx);
  r->n = (size_t)r->B * r->C * r->P;
  r->x = u8(r, r->n), r->b = u8(r, (size_t)r->B), r->y = act(r, r->n), r->db = u8(r, (size_t)r->B);
  r->norm.c = r->C;
  for (int c = 0; c < r->C; c++) r->norm.mean[c] = 0.5f, r->norm.std[c] = 0.25f;
  if (aug) {
    const int32_t ctr = 3;
    r->aug = (lam_aug){32, 32, 4, 1, 99u, put(r, &ctr, 4)};
  }
  r->bytes = (double)r->n + NB(r->n) + 6.0 * r->B;
  return LAM_OK;
}
static lam_status pc_gather(perf_run *r) {
  if (r->setup) return gather_setup(r, 0);
  return BEC->gather(CTX, r->B, r->T, r->C, (size_t)r->P, r->x, 1, r->b, r->aux, NULL, &r->norm, NULL, r->f, r->y, r->db);
}
static lam_status pc_gather_aug(perf_run *r) {
  if (r->setup) return gather_setup(r, 1);
  return BEC->gather(CTX, r->B, r->T, r->C, (size_t)r->P, r->x, 1, r->b, r->aux, NULL, &r->norm, &r->aug, r->f, r->y, r->db);
}
/* normalize_images of 3 x 32 x 32 bytes (NCHW or NHWC in) to float or bfloat16: the bytes read, the values written */
static lam_status pc_normalize_images(perf_run *r) {
  if (r->setup) {
    flat(r), r->C = 3, r->H = r->W = 32, r->B = (int)(r->n / (3 * 1024)), r->n = (size_t)r->B * 3 * 1024;
    snprintf(r->shape, sizeof r->shape, "B%d C3 32x32", r->B);
    for (int c = 0; c < 3; c++) r->norm.mean[c] = 0.5f, r->norm.std[c] = 0.25f;
    r->x = u8(r, r->n), r->y = act(r, r->n), r->bytes = (double)r->n + NB(r->n);
    return LAM_OK;
  }
  return BEC->normalize_images(CTX, (size_t)r->B, 3, 32, 32, r->f.nhwc, r->x, r->norm.mean, r->norm.std,
                               r->f.dt == LAM_DT_BF16, r->y);
}

/* ---- fused conv -> relu -> maxpool ---- */

/* conv_pool_fwd on the conv GEMM's output G (64, B*32*32) of the images: G read, y (n/4) and arg (n/4 int32)
 * written; conv_pool_bwd: dy, y, arg read (from conv_pool_fwd here), dG (n, of the row's type) written */
static lam_status cp_setup(perf_run *r) {
  img(r), r->pg = (lam_pool_geom){r->C, r->H, r->W, 2, 2, r->H / 2, r->W / 2};
  r->x = f32(r, r->n), r->b = f32(r, r->C), r->y = f32(r, r->n / 4), r->aux = perf_alloc(r, r->n);
  r->dy = f32(r, r->n / 4), r->dx = act(r, r->n), r->db = f32(r, r->C);
  r->bytes = 4.0 * r->n + 2.0 * r->n;
  return LAM_OK;
}
static lam_status pc_conv_pool_fwd(perf_run *r) {
  if (r->setup) return cp_setup(r);
  return BEC->conv_pool_fwd(CTX, &r->pg, r->B, r->x, r->b, r->y, r->aux);
}
static lam_status pc_conv_pool_bwd(perf_run *r) {
  if (r->setup) {
    cp_setup(r), r->bytes = 3.0 * r->n + NB(r->n);
    SETUP_CALL(BEC->conv_pool_fwd(CTX, &r->pg, r->B, r->x, r->b, r->y, r->aux));
    return LAM_OK;
  }
  return BEC->conv_pool_bwd(CTX, &r->pg, r->B, r->dy, r->y, r->aux, r->dx, r->f.dt, r->db);
}
/* the direct first layer, MNIST's: x (B, 1, 28, 28), conv 1 -> 32 3x3, relu, maxpool 2: x read, y and arg
 * (B, 32, 13, 13) written; backward x, dy, y, arg read (from the forward here), dW and db tiny */
static lam_status direct_setup(perf_run *r) {
  static const int b[N_SIZES] = {64, 2048, 16384};
  r->B = b[r->size], r->C = 1, r->H = r->W = 28, r->OC = 32, r->K = 3;
  snprintf(r->shape, sizeof r->shape, "B%d 1->32 28x28 K3", r->B);
  r->cg = (lam_conv_geom){1, 28, 28, 3, 1, 0, 26, 26};
  r->pg = (lam_pool_geom){32, 26, 26, 2, 2, 13, 13};
  const size_t nx = (size_t)r->B * 28 * 28, ny = (size_t)r->B * 32 * 13 * 13;
  r->x = f32(r, nx), r->w = f32(r, 32 * 9), r->b = f32(r, 32), r->y = f32(r, ny), r->aux = perf_alloc(r, ny * 4);
  r->dy = f32(r, ny), r->dw = f32(r, 32 * 9), r->db = f32(r, 32);
  r->work = f32(r, lam_direct_work_floats(32, 9, (size_t)r->B * 13 * 13));
  r->bytes = 4.0 * nx + 8.0 * ny, r->flops = 2.0 * r->B * 32 * 26 * 26 * 9;
  return LAM_OK;
}
static lam_status pc_conv_pool_direct_fwd(perf_run *r) {
  if (r->setup) return direct_setup(r);
  return BEC->conv_pool_direct_fwd(CTX, &r->cg, &r->pg, r->B, r->x, r->w, r->b, r->y, r->aux);
}
static lam_status pc_conv_pool_direct_bwd(perf_run *r) {
  if (r->setup) {
    direct_setup(r), r->bytes = 4.0 * r->B * 28 * 28 + 12.0 * r->B * 32 * 13 * 13;
    SETUP_CALL(BEC->conv_pool_direct_fwd(CTX, &r->cg, &r->pg, r->B, r->x, r->w, r->b, r->y, r->aux));
    return LAM_OK;
  }
  return BEC->conv_pool_direct_bwd(CTX, &r->cg, &r->pg, r->B, r->x, r->dy, r->y, r->aux, r->dw, r->db, r->work);
}

/* ---- optimizers, the trainer's step ---- */

/* adam: p, g, m, v read, p, m, v written (28 bytes a parameter); sgd with momentum: p, g, buf read, p, buf written */
static lam_status pc_adam(perf_run *r) {
  if (r->setup) {
    flat(r), r->x = f32(r, r->n), r->dx = f32(r, r->n), r->mean = f32(r, r->n), r->rv = pos(r, r->n);
    r->bytes = 28.0 * r->n;
    return LAM_OK;
  }
  return BEC->adam(CTX, r->n, r->x, r->dx, r->mean, r->rv, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 10, NULL, NULL, NULL);
}
static lam_status pc_sgd(perf_run *r) {
  if (r->setup) {
    pc_adam(r), r->bytes = 20.0 * r->n;
    return LAM_OK;
  }
  return BEC->sgd(CTX, r->n, r->x, r->dx, r->mean, 0.01f, 0.9f, 5e-4f, 0, NULL, NULL, NULL);
}
/* grad_check: g read */
static lam_status pc_grad_check(perf_run *r) {
  if (r->setup) {
    flat(r), r->dx = f32(r, r->n);
    lam_scaler s;
    memset(&s, 0, sizeof s), s.scale = s.inv = 1.0f;
    r->aux = put(r, &s, sizeof s), r->bytes = 4.0 * r->n;
    return LAM_OK;
  }
  return BEC->grad_check(CTX, r->n, r->dx, r->aux);
}
/* scaler_update and step_advance: a few scalars (one size) */
static lam_status pc_scaler_update(perf_run *r) {
  if (r->setup) {
    snprintf(r->shape, sizeof r->shape, "1 scaler");
    lam_scaler s;
    memset(&s, 0, sizeof s), s.scale = LAM_SCALE_INIT, s.inv = 1.0f / LAM_SCALE_INIT;
    const int32_t k = 0;
    r->aux = put(r, &s, sizeof s), r->mean = pos(r, 3), r->aux2 = put(r, &k, 4), r->bytes = 2.0 * sizeof s + 16;
    return LAM_OK;
  }
  return BEC->scaler_update(CTX, r->aux, 1, 0.9f, 0.999f, r->mean, r->aux2);
}
static lam_status pc_step_advance(perf_run *r) {
  if (r->setup) {
    snprintf(r->shape, sizeof r->shape, "2 counters");
    const int32_t st[2] = {0, 0};
    const float stats[4] = {1.5f, 2, 3, 0};
    r->aux = put(r, st, sizeof st), r->y = put(r, stats, sizeof stats), r->bytes = 16.0 + 16.0;
    return LAM_OK;
  }
  return BEC->step_advance(CTX, r->aux, 64, r->y);
}
/* backprop_step: err, in, w read, w written */
static lam_status pc_backprop_step(perf_run *r) {
  if (r->setup) {
    flat(r), r->x = f32(r, r->n), r->dy = f32(r, r->n), r->w = f32(r, r->n), r->bytes = 16.0 * r->n;
    return LAM_OK;
  }
  return BEC->backprop_step(CTX, r->n, r->dy, r->x, 1e-3f, r->w);
}

/* ---- the table: every primitive of prims.h at least once, in its list's order ---- */

const perf_case k_perf[] = {
    {"gemm", "NN", FM_NONE, 0, pc_gemm},
    {"gemm_half", "NN", FM_HALF, 0, pc_gemm_half},
    {"to_half", "", FM_HALF, 0, pc_to_half},
    {"zero", "", FM_NONE, 0, pc_zero},
    {"poison", "", FM_NONE, 0, pc_poison},
    {"im2col", "3x3", FM_FLAT, 0, pc_im2col},
    {"col2im", "3x3", FM_FLAT, 0, pc_col2im},
    {"cbp_to_bcp", "bias", FM_NONE, 0, pc_cbp_to_bcp},
    {"bcp_to_cbp", "bias", FM_NONE, 0, pc_bcp_to_cbp},
    {"conv2d_workspace", "3x3", FM_IMG, P_HOST, pc_conv2d_workspace},
    {"conv2d_fwd", "3x3", FM_IMG, 0, pc_conv2d_fwd},
    {"conv2d_fwd_stats", "3x3", FM_IMG, 0, pc_conv2d_fwd_stats},
    {"conv2d_bwd_data", "3x3", FM_IMG, 0, pc_conv2d_bwd_data},
    {"conv2d_bwd_filter", "3x3", FM_IMG, 0, pc_conv2d_bwd_filter},
    {"add_bias", "", FM_NONE, 0, pc_add_bias},
    {"bias_grad", "", FM_NONE, 0, pc_bias_grad},
    {"channel_bias_fwd", "", FM_IMG, 0, pc_channel_bias_fwd},
    {"channel_bias_bwd", "", FM_IMG, 0, pc_channel_bias_bwd},
    {"maxpool_fwd", "2/2", FM_IMG, 0, pc_maxpool_fwd},
    {"maxpool_bwd", "2/2", FM_IMG, 0, pc_maxpool_bwd},
    {"avgpool_fwd", "2/2", FM_IMG, 0, pc_avgpool_fwd},
    {"avgpool_bwd", "2/2", FM_IMG, 0, pc_avgpool_bwd},
    {"plane_mean_fwd", "", FM_IMG, 0, pc_plane_mean_fwd},
    {"plane_mean_bwd", "", FM_IMG, 0, pc_plane_mean_bwd},
    {"upsample_fwd", "x2", FM_IMG, 0, pc_upsample_fwd},
    {"upsample_bwd", "x2", FM_IMG, 0, pc_upsample_bwd},
    {"act_fwd", "relu", FM_FLAT, 0, pc_act_fwd_relu},
    {"act_fwd", "gelu", FM_FLAT, 0, pc_act_fwd_gelu},
    {"act_bwd", "relu", FM_FLAT, 0, pc_act_bwd_relu},
    {"act_bwd", "gelu", FM_FLAT, 0, pc_act_bwd_gelu},
    {"bn_fwd", "train", FM_IMG, 0, pc_bn_fwd},
    {"bn_fwd", "eval", FM_IMG, 0, pc_bn_fwd_eval},
    {"bn_bwd", "", FM_IMG, 0, pc_bn_bwd},
    {"bn_act_fwd", "relu", FM_IMG, 0, pc_bn_act_fwd},
    {"bn_act_fwd", "relu+res", FM_IMG, 0, pc_bn_act_fwd_res},
    {"bn_act_bwd", "relu", FM_IMG, 0, pc_bn_act_bwd},
    {"bn_act_pool_fwd", "relu 2/2", FM_IMG, 0, pc_bn_act_pool_fwd},
    {"bn_act_pool_bwd", "relu 2/2", FM_IMG, 0, pc_bn_act_pool_bwd},
    {"bn_sums", "x", FM_IMG, 0, pc_bn_sums_x},
    {"bn_sums", "dy", FM_IMG, 0, pc_bn_sums_dy},
    {"bn_sync_stats", "", FM_NONE, P_ONE, pc_bn_sync_stats},
    {"bn_sync_dx", "", FM_IMG, 0, pc_bn_sync_dx},
    {"groupnorm_fwd", "", FM_IMG, 0, pc_groupnorm_fwd},
    {"groupnorm_bwd", "", FM_IMG, 0, pc_groupnorm_bwd},
    {"dropout_mask", "p=0.5", FM_NONE, 0, pc_dropout_mask},
    {"mask_scale", "", FM_FLAT, 0, pc_mask_scale},
    {"tpool_fwd", "mean", FM_FLAT, 0, pc_tpool_fwd},
    {"tpool_fwd", "max", FM_FLAT, 0, pc_tpool_fwd_max},
    {"tpool_bwd", "mean", FM_FLAT, 0, pc_tpool_bwd},
    {"tpool_bwd", "max", FM_FLAT, 0, pc_tpool_bwd_max},
    {"tcat_fwd", "", FM_IMG, 0, pc_tcat_fwd},
    {"tcat_bwd", "", FM_IMG, 0, pc_tcat_bwd},
    {"add", "", FM_FLAT, 0, pc_add},
    {"copy_rows", "", FM_FLAT, 0, pc_copy_rows},
    {"label_count", "", FM_NONE, 0, pc_label_count},
    {"xent", "", FM_IMG, 0, pc_xent},
    {"gather", "", FM_IMG, 0, pc_gather},
    {"gather", "crop+flip", FM_IMG, 0, pc_gather_aug},
    {"convert", "to nchw", FM_IMG, 0, pc_convert}, /* nchw f32's row: to nhwc f32 */
    {"conv_pool_fwd", "", FM_NONE, 0, pc_conv_pool_fwd},
    {"conv_pool_bwd", "", FM_FLAT, 0, pc_conv_pool_bwd},
    {"conv_pool_direct_fwd", "", FM_NONE, 0, pc_conv_pool_direct_fwd},
    {"conv_pool_direct_bwd", "", FM_NONE, 0, pc_conv_pool_direct_bwd},
    {"adam", "", FM_NONE, 0, pc_adam},
    {"sgd", "momentum", FM_NONE, 0, pc_sgd},
    {"grad_check", "", FM_NONE, 0, pc_grad_check},
    {"scaler_update", "", FM_NONE, P_ONE, pc_scaler_update},
    {"step_advance", "", FM_NONE, P_ONE, pc_step_advance},
    {"backprop_step", "", FM_NONE, 0, pc_backprop_step},
    /* the format's nhwc is the bytes' layout in; its type the output's (float or bfloat16) */
    {"normalize_images", "", FM(F_NCHW) | FM(F_NHWC) | FM(F_NCHW_BF16) | FM(F_NHWC_BF16), 0, pc_normalize_images},
};
const size_t n_perf = sizeof k_perf / sizeof k_perf[0];

