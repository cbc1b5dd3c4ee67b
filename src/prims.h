/* prims.h — the nn primitives, declared once. Each backend provides every one of them under its own
 * prefix (cpu_<name> in cpu/, cuda_<name> in cuda/); the backend table (internal.h), the CPU header
 * and the CUDA header are all made from the one list below, so a primitive's signature is written in
 * one place. Arguments are validated by the caller (nn/). Matrices are row-major; "+=" means the
 * primitive accumulates into that output, "=" that it overwrites it. Images are (B, C, P) with P = H*W the
 * pixels of a plane, laid out as the primitive's format f says (lam_fmt): NCHW float32 unless stated. */
#ifndef LAMINA_PRIMS_H
#define LAMINA_PRIMS_H

#include <stddef.h>
#include <stdint.h>

/* How the activations a primitive reads and writes lie in memory: their element type (dt: float32, or a 16-bit float
 * — bfloat16 or IEEE half — as uint16_t bit patterns, rounded to nearest even where written) and, for images, the layout: NCHW, (B, C, H, W),
 * or NHWC (nhwc = 1), (B, H, W, C): the channels of a pixel side by side, as cuDNN's tensor-core convolutions read
 * them. A flat tensor (P = 1) lies the same in both. Parameters, gradients of parameters, statistics and
 * running statistics are float32 whatever the format. Every primitive takes every format on the CPU; the CUDA
 * backend takes NCHW float32 and NHWC in all three types (elementwise ones: any), and says so where asked for
 * another. Where a primitive takes a bare `int dt` for a buffer, LAM_DT_F32 (0) means float and the others that
 * 16-bit type. */
enum { LAM_DT_F32 = 0, LAM_DT_BF16 = 1, LAM_DT_F16 = 2 };
typedef struct lam_fmt {
  int dt, nhwc;
} lam_fmt;
static inline lam_fmt lam_fmt_of(int dt, int nhwc) {
  lam_fmt f;
  f.dt = dt, f.nhwc = nhwc;
  return f;
}
#define LAM_FMT_NCHW lam_fmt_of(LAM_DT_F32, 0)
static inline size_t lam_dt_size(int dt) { return dt != LAM_DT_F32 ? 2 : 4; }
static inline int lam_fmt_plain(lam_fmt f) { return f.dt == LAM_DT_F32 && !f.nhwc; }
/* Index of value (b, c, p) of (B, C, P) images in format f. */
static inline size_t lam_fmt_at(lam_fmt f, int C, int P, size_t b, size_t c, size_t p) {
  return f.nhwc ? (b * (size_t)P + p) * (size_t)C + c : (b * (size_t)C + c) * (size_t)P + p;
}

/* Geometry of a convolution and of a pooling window, per sample (NCHW). */
typedef struct lam_conv_geom {
  int C, H, W;    /* input */
  int K, stride, pad;
  int OH, OW;     /* output */
} lam_conv_geom;
typedef struct lam_pool_geom {
  int C, H, W, K, stride, OH, OW;
} lam_pool_geom;

/* Normalization of uint8 pixels per channel: x = (pixel / 255 - mean[c]) / std[c]. */
#define LAM_NORM_MAX_CHANNELS 64
typedef struct lam_norm {
  int c;
  float mean[LAM_NORM_MAX_CHANNELS], std[LAM_NORM_MAX_CHANNELS];
} lam_norm;

/* Augmentation in the batch gather (training): each sample is cropped at random after padding pad pixels on every
 * side (the padding black, pixel 0, and a label per pixel there LAM_LABEL_IGNORE), and with flip flipped left to
 * right with probability 1/2 — torchvision's RandomCrop(padding=pad) then RandomHorizontalFlip, a clip's frames and
 * a sample's mask alike. Sample b's offsets and flip are a pure function of (seed, *ctr, b) (aug.h, the same on
 * the CPU and CUDA); ctr is backend memory read when the op runs, so a step captured in a graph draws anew when the
 * counter moves. */
typedef struct lam_aug {
  int h, w;      /* the image's size (h * w its pixels P) */
  int pad, flip; /* crop after padding pad (0: none); flip 1: at random */
  uint64_t seed;
  const int32_t *ctr;
} lam_aug;

/* Activations (act_fwd/act_bwd); alpha is leaky relu's slope (>= 0), unused by the others. GELU is
 * the exact (erf) form, PyTorch's default. */
enum { LAM_ACT_RELU = 0, LAM_ACT_TANH, LAM_ACT_SIGMOID, LAM_ACT_GELU, LAM_ACT_LEAKY };

/* A function that both the host and CUDA kernels call (act.h, hash.h): one definition for both twins. */
#ifdef __CUDACC__
#define LAM_HD __host__ __device__ __forceinline__
#else
#define LAM_HD static inline
#endif

/* Dynamic loss scaling (the fp16 precision's trainer), as torch.amp.GradScaler with its defaults: the loss's gradient
 * is multiplied by the scale (from 2^16), a step whose gradients hold an inf or NaN is skipped and halves the scale,
 * and LAM_SCALE_GROWTH clean steps in a row double it. Decided on the device (grad_check, scaler_update), so a step
 * needs no host synchronisation and sits in a captured graph. One struct in backend memory, its layout the same on
 * the host and the device. */
typedef struct lam_scaler {
  float scale;     /* the loss's gradient is multiplied by it (xent's lscale) */
  float inv;       /* 1 / the scale this step's gradients were made at: adam and sgd unscale by it */
  float coef[3];   /* this step's optimizer scalars: Adam's step size and bias correction (SGD: first), the rate */
  int32_t found;   /* this step's gradients hold an inf or NaN: the optimizer skips the step */
  int32_t clean;   /* steps in a row without one, since the scale last changed */
  int32_t skipped; /* steps skipped, all told */
  int32_t taken;   /* optimizer steps taken, all told (Adam's bias correction counts these) */
  int32_t stuck;   /* the first step (the trainer's row + 1) whose gradients overflowed at LAM_SCALE_FLOOR; 0: none */
} lam_scaler;
#define LAM_SCALE_INIT 65536.0f
#define LAM_SCALE_GROWTH 2000
/* The scale goes no lower: at 1 the gradients are fp16's own, and one that overflows there overflows unscaled. */
#define LAM_SCALE_FLOOR 1.0f

/* Labels of this value are ignored by the loss (per-pixel labels), as PyTorch's ignore_index. */
#define LAM_LABEL_IGNORE 255

/* X(name, (parameters)) for every primitive. */
#define LAM_NN_PRIMS(X)                                                                                              \
  /* C = alpha * op(A) * op(B) + beta * C, op(A) is M×K, op(B) is K×N; ta/tb: 1 = transposed. In tf32 on tensor     \
   * cores when the context's precision says so (CUDA); else fp32 (the bf16 and fp16 precisions' layers round    \
   * their operands and call gemm_half). */                                                                             \
  X(gemm, (lam_ctx * ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,  \
           int ldb, float beta, float *C, int ldc))                                                                 \
  /* The same with A and B stored as 16-bit floats of type dt (LAM_DT_BF16 or LAM_DT_F16, uint16_t bit patterns),  \
   * summed in fp32; C is float, or of type dt (c_half = 1, rounded once at the end; then beta must be 0). */      \
  X(gemm_half, (lam_ctx * ctx, int dt, int ta, int tb, int M, int N, int K, float alpha, const uint16_t *A, int lda, \
                const uint16_t *B, int ldb, float beta, void *C, int c_half, int ldc))                               \
  /* dst = src rounded to the 16-bit type dt (to nearest even; fp16: beyond its range to infinity), n values. */    \
  X(to_half, (lam_ctx * ctx, int dt, size_t n, const float *src, uint16_t *dst))                                           \
  X(zero, (lam_ctx * ctx, void *p, size_t bytes))                                                                   \
  /* Every byte 0xFF: NaN as float and as bfloat16 (LAMINA_POISON=1 fills each block lam_mem_alloc hands out). */     \
  X(poison, (lam_ctx * ctx, void *p, size_t bytes))                                                                 \
  /* x (B, C, H, W) -> col (C*K*K, B*OH*OW): column b*OH*OW + p holds the patch of output p of sample b; col is     \
   * of type dt (float, or a 16-bit float). */                                                                      \
  X(im2col, (lam_ctx * ctx, const lam_conv_geom *g, int B, const float *x, void *col, int dt))                      \
  /* dx (B, C, H, W) = the patches of col (of type dt) summed back into place in fp32; with                         \
   * accumulate, dx += that sum (a gradient that adds to another reader's). */                                      \
  X(col2im, (lam_ctx * ctx, const lam_conv_geom *g, int B, const void *col, int dt, int accumulate, float *dx))     \
  /* dst (B, C, P) = src (C, B*P) transposed per sample, plus bias[c] (bias may be NULL). */                       \
  X(cbp_to_bcp, (lam_ctx * ctx, int B, int C, int P, const float *src, const float *bias, float *dst))             \
  /* dst (C, B*P) = src (B, C, P); and bias_grad[c] += the sum of src over b and p (may be NULL). */               \
  X(bcp_to_cbp, (lam_ctx * ctx, int B, int C, int P, const float *src, float *dst, float *bias_grad))              \
  /* ---- a whole 2-D convolution (no bias) in format f, x (B, g->C, g->H, g->W) -> y (B, OC, g->OH, g->OW), W   \
   * (OC, g->C, K, K) always in PyTorch's order, of type f.dt (16-bit: the rounded weights): cuDNN where the     \
   * CUDA backend has it, else im2col + GEMM (conv_im2col.h). Sums are float32. ws is scratch of at least           \
   * conv2d_workspace's bytes (at this format, geometry, OC and B). ---- */                                       \
  X(conv2d_workspace, (lam_ctx * ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, size_t *bytes))           \
  /* y = conv(x, W) */                                                                                              \
  X(conv2d_fwd, (lam_ctx * ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *x, const void *W,      \
                 void *y, void *ws, size_t ws_bytes))                                                               \
  /* y = conv(x, W) and its statistics per channel o over the B x OH x OW values: sums[o] = sum(y), sums[OC + o] =   \
   * sum(y^2) (float32; bn_sums's layout, of the values before or after y's rounding to 16 bits). CUDA: in one      \
   * cuDNN graph (conv + GenStats) where conv_stats_one_pass says so, it has an engine, and the engine measured       \
   * faster than the conv and a pass after it (with force: wherever it has an engine); *one_pass says whether it did. \
   * Else, as the CPU, conv2d_fwd then bn_sums. */                                                                  \
  X(conv2d_fwd_stats, (lam_ctx * ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *x,               \
                       const void *W, void *y, float *sums, int force, void *ws, size_t ws_bytes, int *one_pass))  \
  /* dx = the input gradient from dy (B, OC, OH, OW); with accumulate, dx += it (in bfloat16 rounded once, twice  \
   * where the CUDA backend pads the input's channels to its kernels' multiple) */                               \
  X(conv2d_bwd_data, (lam_ctx * ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *dy, const void *W, \
                      void *dx, int accumulate, void *ws, size_t ws_bytes))                                         \
  /* dW (float32) += the weight gradient from x and dy */                                                           \
  X(conv2d_bwd_filter, (lam_ctx * ctx, lam_fmt f, const lam_conv_geom *g, int OC, int B, const void *x,              \
                        const void *dy, float *dW, void *ws, size_t ws_bytes))                                      \
  /* y (rows, cols) += b[c] on every row; db[c] += the sum of dy over the rows. */                                 \
  X(add_bias, (lam_ctx * ctx, int rows, int cols, float *y, const float *b))                                       \
  X(bias_grad, (lam_ctx * ctx, int rows, int cols, const float *dy, float *db))                                    \
  /* y (B, C, P) += bias[c]; db[c] += the sum of dy (B, C, P) over b and p. */                                     \
  X(channel_bias_fwd, (lam_ctx * ctx, lam_fmt f, int B, int C, int P, void *y, const float *bias))                 \
  X(channel_bias_bwd, (lam_ctx * ctx, lam_fmt f, int B, int C, int P, const void *dy, float *db))                  \
  /* y = the max of each window, arg = the index of that max within its H*W plane (the first maximum in row       \
   * order; NaN wins). maxpool_bwd: dx = the gradient routed to each max (dx zeroed first). */                     \
  X(maxpool_fwd, (lam_ctx * ctx, lam_fmt f, const lam_pool_geom *g, int B, const void *x, void *y, int32_t *arg)) \
  X(maxpool_bwd, (lam_ctx * ctx, lam_fmt f, const lam_pool_geom *g, int B, const void *dy, const int32_t *arg,     \
                  void *dx))                                                                                        \
  /* y = the mean of each K×K window (stride g->stride, no padding); avgpool_bwd: dx = dy / (K*K) spread over     \
   * each window, summed where windows overlap, 0 where none covers. */                                            \
  X(avgpool_fwd, (lam_ctx * ctx, lam_fmt f, const lam_pool_geom *g, int B, const void *x, void *y))               \
  X(avgpool_bwd, (lam_ctx * ctx, lam_fmt f, const lam_pool_geom *g, int B, const void *dy, void *dx))             \
  /* Global average pool: y (B, C) = the mean of each plane of x (B, C, P); plane_mean_bwd: dx (B, C, P) = dy / P   \
   * spread over each plane. */                                                                                     \
  X(plane_mean_fwd, (lam_ctx * ctx, lam_fmt f, int B, int C, int P, const void *x, void *y))                       \
  X(plane_mean_bwd, (lam_ctx * ctx, lam_fmt f, int B, int C, int P, const void *dy, void *dx))                     \
  /* Nearest upsampling by F: y (B, C, H*F, W*F) from x (B, C, H, W); upsample_bwd: dx (B, C, H, W) = the sum of   \
   * dy over each F×F block. */                                                                                    \
  X(upsample_fwd, (lam_ctx * ctx, lam_fmt f, int B, int C, int H, int W, int F, const void *x, void *y))         \
  X(upsample_bwd, (lam_ctx * ctx, lam_fmt f, int B, int C, int H, int W, int F, const void *dy, void *dx))       \
  /* y = act(x) elementwise (x and y may be the same buffer). act_bwd: dx = dy * act'(x), from the output y where   \
   * that is enough (relu: y > 0; leaky: y > 0 ? 1 : alpha; tanh: 1 - y^2; sigmoid: y (1 - y)) and from the input  \
   * x for gelu; the one not needed may be NULL. */                                                                \
  X(act_fwd, (lam_ctx * ctx, lam_fmt f, int act, float alpha, size_t n, const void *x, void *y))                  \
  X(act_bwd, (lam_ctx * ctx, lam_fmt f, int act, float alpha, size_t n, const void *x, const void *y,              \
              const void *dy, void *dx))                                                                            \
  /* BatchNorm over (B, C, P), per channel c. train = 1: mean and invstd = 1/sqrt(var + eps) of x over b and p      \
   * (biased variance) are computed and saved (C each), and the running statistics updated as PyTorch does:     \
   * run_mean = (1 - momentum) run_mean + momentum mean, run_var likewise with the unbiased variance (N/(N-1),   \
   * N = B*P); train = 0: the running statistics are used (mean, invstd may be NULL, nothing updated).           \
   * y = (x - mean) invstd gamma[c] + beta[c]. y may be x. */                                                       \
  X(bn_fwd, (lam_ctx * ctx, lam_fmt f, int B, int C, int P, const void *x, const float *gamma, const float *beta,  \
             void *y,                                                                                               \
             float *mean, float *invstd, float *run_mean, float *run_var, float momentum, float eps, int train))    \
  /* The training-mode backward from the saved mean and invstd: dgamma[c] += sum(dy xhat), dbeta[c] += sum(dy),     \
   * dx = gamma invstd (dy - mean(dy) - xhat mean(dy xhat)) with xhat = (x - mean) invstd (dx overwritten). */     \
  X(bn_bwd, (lam_ctx * ctx, lam_fmt f, int B, int C, int P, const void *x, const void *dy, const float *gamma,     \
             const float *mean, const float *invstd, void *dx, float *dgamma, float *dbeta))                        \
  /* BatchNorm then an activation, fused: y = act(z), z = (x - mean) invstd gamma[c] + beta[c], with the statistics \
   * and running statistics of bn_fwd (train: computed, saved and updated exactly as bn_fwd does; eval: the         \
   * running ones) and act, alpha as act_fwd. z is never stored. y must not be x: the backward re-reads x. With a    \
   * residual r (x's shape and format; may be NULL), y = act(z + r): BatchNorm, a residual add and its activation   \
   * in one pass (then act must be one whose backward reads y: not gelu). */                                        \
  X(bn_act_fwd, (lam_ctx * ctx, lam_fmt f, int B, int C, int P, int act, float alpha, const void *x, const void *r, \
                 const float *gamma, const float *beta, void *y, float *mean, float *invstd, float *run_mean,         \
                 float *run_var, float momentum, float eps, int train))                                             \
  /* Its training-mode backward: dz = dy act'(.) formed on the fly (from y for tanh, sigmoid, and relu and leaky   \
   * where y is given or with a residual, as act_bwd; from z recomputed out of x, mean, invstd, gamma and beta for  \
   * gelu, and for relu and leaky where y is NULL and there is no residual: the same dz as from the y stored), then \
   * bn_bwd's math on dz: dgamma[c] += sum(dz xhat), dbeta[c] += sum(dz), dx = gamma invstd (dz - mean(dz) - xhat   \
   * mean(dz xhat)) (dx overwritten; dx may be dy). dz is never stored, but where dr is not NULL (the residual's   \
   * gradient, of a forward with r) it is dz: written, or with dr_add added to dr's values. */                       \
  X(bn_act_bwd, (lam_ctx * ctx, lam_fmt f, int B, int C, int P, int act, float alpha, const void *x, const void *y, \
                 const void *dy, const float *gamma, const float *beta, const float *mean, const float *invstd,     \
                 void *dx, void *dr, int dr_add, float *dgamma, float *dbeta))                                      \
  /* BatchNorm, its activation and a K×K maxpool of stride K after them, fused (graph fusion bn_act_pool): y =       \
   * maxpool(act(z)), z as bn_act_fwd's (statistics, running ones and train alike), act(z) rounded to f's type as   \
   * the stored activation would be, and never stored. x (B, C, H, W) as g gives it (g->stride == g->K, K*K <= 255); \
   * y (B, C, OH, OW); arg one byte per output value: the max's offset kh K + kw in its window (the first maximum   \
   * in row order, NaN wins, as maxpool_fwd picks it). act: relu, leaky or gelu (the backward recomputes z). */     \
  X(bn_act_pool_fwd, (lam_ctx * ctx, lam_fmt f, const lam_pool_geom *g, int B, int act, float alpha, const void *x, \
                      const float *gamma, const float *beta, void *y, uint8_t *arg, float *mean, float *invstd,      \
                      float *run_mean, float *run_var, float momentum, float eps, int train))                        \
  /* Its training-mode backward: act(z)'s gradient is dy routed to each window's max (arg; 0 elsewhere and outside   \
   * every window), formed on the fly, then bn_act_bwd's from z: dgamma, dbeta added, dx overwritten. */            \
  X(bn_act_pool_bwd, (lam_ctx * ctx, lam_fmt f, const lam_pool_geom *g, int B, int act, float alpha, const void *x, \
                      const void *dy, const uint8_t *arg, const float *gamma, const float *beta, const float *mean,  \
                      const float *invstd, void *dx, float *dgamma, float *dbeta))                                   \
  /* BatchNorm whose statistics are those of all ranks (sync BN: nn/ops/norm.c sums between these). bn_sums:      \
   * per channel, dy NULL: out[c] = sum(x), out[C + c] = sum(x^2); else out[c] = sum(dy), out[C + c] =             \
   * sum(dy xhat), xhat = (x - mean) invstd, also added into dbeta and dgamma where given. bn_sync_stats: from       \
   * the summed sum(x) and sum(x^2) over N values, mean, invstd = 1/sqrt(var + eps) and the biased var (C each),   \
   * and the running statistics updated as bn_fwd does (unbiased: N/(N-1)). bn_sync_dx: dx = gamma invstd (dy -     \
   * sums[c]/N - xhat sums[C + c]/N) with the summed sum(dy), sum(dy xhat) and this rank's N (dx overwritten). */   \
  X(bn_sums, (lam_ctx * ctx, lam_fmt f, int B, int C, int P, const void *x, const void *dy, const float *mean,     \
              const float *invstd, float *out, float *dgamma, float *dbeta))                                        \
  X(bn_sync_stats, (lam_ctx * ctx, int C, double N, const float *sums, float eps, float momentum, float *mean,      \
                    float *invstd, float *var, float *run_mean, float *run_var))                                    \
  X(bn_sync_dx, (lam_ctx * ctx, lam_fmt f, int B, int C, int P, const void *x, const void *dy, const float *gamma, \
                 const float *mean, const float *invstd, const float *sums, double N, void *dx))                   \
  /* GroupNorm over (B, C, P) in format f (PyTorch's GroupNorm; LayerNorm is its one group): each sample's C      \
   * channels in G groups of C/G, each group normalized over its C/G x P values with their mean and biased       \
   * variance, y = (x - mean) invstd gamma[c] + beta[c] (gamma, beta may be NULL: 1 and 0); mean and invstd       \
   * (B*G each, sample-major) saved for the backward. The same in training and evaluation (no running ones). */   \
  X(groupnorm_fwd, (lam_ctx * ctx, lam_fmt f, int B, int C, int P, int G, const void *x, const float *gamma,        \
                    const float *beta, void *y, float *mean, float *invstd, float eps))                              \
  /* Its backward from the saved statistics: dgamma[c] += sum(dy xhat), dbeta[c] += sum(dy) over the samples and    \
   * pixels (each sample's part summed, then the samples in order: deterministic; work holds 2*B*C floats), and   \
   * dx = invstd (g - mean(g) - xhat mean(g xhat)) over each group, g = dy gamma[c] (dx overwritten; not dy). */    \
  X(groupnorm_bwd, (lam_ctx * ctx, lam_fmt f, int B, int C, int P, int G, const void *x, const void *dy,             \
                    const float *gamma, const float *mean, const float *invstd, void *dx, float *dgamma,             \
                    float *dbeta, float *work))                                                                      \
  /* Dropout's keep mask: mask[i] = 1 (keep) or 0 with probability p, from a counter-based hash of (seed, *ctr, i)   \
   * that the CPU and CUDA compute alike (ctr is backend memory read when the op runs, NULL reads as 0: a step     \
   * captured in a graph draws a new mask when the counter moves). */                                              \
  X(dropout_mask, (lam_ctx * ctx, size_t n, float p, uint64_t seed, const int32_t *ctr, uint8_t *mask))             \
  /* y = mask[i] ? x * scale : 0 (dropout's forward and backward; y may be x). */                                   \
  X(mask_scale, (lam_ctx * ctx, lam_fmt f, size_t n, const void *x, const uint8_t *mask, float scale, void *y))    \
  /* Pooling over a clip's frames: y (B, S) = the mean, or with max = 1 the maximum, over t of x (B*T, S) rows    \
   * b*T + t (a row is a frame's S values in the format's own order, so any layout pools alike); arg (B, S) = the  \
   * frame of each maximum (the first; max only). tpool_bwd: dx (B*T, S) = dy / T on every frame, or dy at the   \
   * frame of the maximum and 0 elsewhere. */                                                                     \
  X(tpool_fwd, (lam_ctx * ctx, lam_fmt f, int B, int T, size_t S, int max, const void *x, void *y, uint8_t *arg))   \
  X(tpool_bwd, (lam_ctx * ctx, lam_fmt f, int B, int T, size_t S, int max, const void *dy, const uint8_t *arg,      \
                void *dx))                                                                                          \
  /* A clip's frames joined as channels: y (B, T*C, P) in format f, channel t*C + k = channel k of x's row b*T + t  \
   * (x (B*T, C, P), format f): the same bytes in NCHW, a transpose of each sample's (T, P, C) in NHWC. tcat_bwd:   \
   * dx = dy moved back, the inverse. Element type f.dt, nothing converted; y and x do not overlap. */             \
  X(tcat_fwd, (lam_ctx * ctx, lam_fmt f, int B, int T, int C, size_t P, const void *x, void *y))                   \
  X(tcat_bwd, (lam_ctx * ctx, lam_fmt f, int B, int T, int C, size_t P, const void *dy, void *dx))                 \
  /* y = a + b elementwise (y may be a or b). */                                                                    \
  X(add, (lam_ctx * ctx, lam_fmt f, size_t n, const void *a, const void *b, void *y))                              \
  /* dst[r*ldd + i] = src[r*lds + i] for i < cols, r < rows (the slices of a channel concat). */                    \
  X(copy_rows, (lam_ctx * ctx, lam_fmt f, size_t rows, size_t cols, const void *src, size_t lds, void *dst,        \
                size_t ldd))                                                                                        \
  /* *count = the number of the n labels that are not LAM_LABEL_IGNORE, as a float. */                              \
  X(label_count, (lam_ctx * ctx, size_t n, const uint8_t *labels, float *count))                                  \
  /* Softmax cross-entropy of logits (B, C, P) in format f (class c of pixel p of sample b) against labels        \
   * (B, P); labels equal to LAM_LABEL_IGNORE are skipped. With label smoothing s the target is (1 - s) onehot +   \
   * s / C (PyTorch's). stats[0] += the loss summed over the labels counted, stats[1] += those predicted right,     \
   * stats[2] += those counted; pred[b*P + p] = the argmax (first maximum; pred may be NULL); unless dlogits is     \
   * NULL, dlogits (format f) = (softmax - target) * scale * *lscale / *count (lscale, count: backend memory, read   \
   * when the op runs; NULL reads as 1), and 0 for ignored labels. The loss is computed in float32 from the logits  \
   * as stored. */                                                                                                  \
  X(xent, (lam_ctx * ctx, lam_fmt f, int B, int C, int P, const void *logits, const uint8_t *labels, void *dlogits, \
           float scale, const float *lscale, const float *count, float smoothing, float *stats, uint8_t *pred))                        \
  /* x (B*T, C, P), format f = normalized images[idx[b]] (each sample T frames of C*P uint8, NCHW, frame t       \
   * becoming x's row b*T + t; T = 1 for images; norm->c == C); y (B, label_size) = labels[idx[b]] (label_size bytes per image). With cursor (backend memory, may be NULL) idx starts *cursor      \
   * entries further: read when the op runs, so a step captured in a graph gathers the batch of the step it       \
   * replays. aug (may be NULL: none) crops and flips each sample as it is gathered, and its labels where there is  \
   * one per pixel (label_size == P == aug->h * aug->w). */                                                        \
  X(gather, (lam_ctx * ctx, int B, int T, int C, size_t P, const uint8_t *images, size_t label_size, const uint8_t *labels, \
             const int32_t *idx, const int32_t *cursor, const lam_norm *norm, const lam_aug *aug, lam_fmt f, void *x,  \
             uint8_t *y))                                                                                           \
  /* dst (B, C, P) in format fd = src (B, C, P) in format fs: re-laid out and re-typed (to bfloat16: rounded to      \
   * nearest even). src and dst do not overlap. */                                                                  \
  X(convert, (lam_ctx * ctx, int B, int C, int P, lam_fmt fs, const void *src, lam_fmt fd, void *dst))              \
  /* ---- fused conv -> relu -> maxpool (stride = K): the plain ops cbp_to_bcp + act_fwd(relu) + maxpool_fwd, and   \
   * maxpool_bwd + act_bwd(relu) + bcp_to_cbp, in one pass each. g is the pool's geometry over the conv's output   \
   * planes (C, H, W). ---- */                                                                                      \
  /* y (B, C, OH, OW) = maxpool(relu(G + bias)) from the conv GEMM's output G (C, B*H*W); arg = the index of each  \
   * max within its H*W plane (the first maximum in row order, as maxpool_fwd); bias may be NULL. */               \
  X(conv_pool_fwd, (lam_ctx * ctx, const lam_pool_geom *g, int B, const float *G, const float *bias, float *y,       \
                    int32_t *arg))                                                                                  \
  /* dG (C, B*H*W) = dy at each window's argmax where y > 0, else 0, of type dt (16-bit: the half precisions'      \
   * GEMMs read it so); db[c] += the sum of row c of dG as stored (db may be NULL). */                             \
  X(conv_pool_bwd, (lam_ctx * ctx, const lam_pool_geom *g, int B, const float *dy, const float *y,                  \
                    const int32_t *arg, void *dG, int dt, float *db))                                               \
  /* ---- the same block as the first layer, without im2col and GEMMs: a direct convolution for few input taps     \
   * (C*K*K <= LAM_DIRECT_TAPS), whose input needs no gradient. cg is the conv's geometry, pg the pool's over the  \
   * conv's output. ---- */                                                                                         \
  /* y, arg as conv_pool_fwd, from x (B, C, H, W), W (OC, C*K*K) and bias, each conv output summed over its taps    \
   * in (c, kh, kw) order. */                                                                                       \
  X(conv_pool_direct_fwd, (lam_ctx * ctx, const lam_conv_geom *cg, const lam_pool_geom *pg, int B, const float *x, \
                           const float *W, const float *bias, float *y, int32_t *arg))                              \
  /* dW += and db += the gradients through the pool's argmax and the relu, straight from x; work holds              \
   * lam_direct_work_floats(...) floats (partial sums, added up in a fixed order: deterministic). */               \
  X(conv_pool_direct_bwd, (lam_ctx * ctx, const lam_conv_geom *cg, const lam_pool_geom *pg, int B, const float *x, \
                           const float *dy, const float *y, const int32_t *arg, float *dW, float *db, float *work)) \
  /* One fused pass over the flat buffers. step is 1-based (bias correction): Adam's step size and second-moment    \
   * correction are lam_adam_coef(step). With sched (backend memory, may be NULL) they are read when the op runs    \
   * from sched[3 * *k], sched[3 * *k + 1] and the rate from sched[3 * *k + 2] instead (a table the trainer fills  \
   * for an epoch, so the optimizer can sit in the captured step); for SGD, first is sched[3 * *k] != 0. With ls     \
   * (loss scaling; backend memory, may be NULL) the step does nothing where ls->found, else takes the gradient     \
   * times ls->inv and its scalars from ls->coef (scaler_update's), sched and k unread. */                          \
  X(adam, (lam_ctx * ctx, size_t n, float *p, const float *g, float *m, float *v, float lr, float b1, float b2,      \
           float eps, float wd, int decoupled, long step, const float *sched, const int32_t *k, const lam_scaler *ls)) \
  X(sgd, (lam_ctx * ctx, size_t n, float *p, const float *g, float *buf, float lr, float momentum, float wd,         \
          int first, const float *sched, const int32_t *k, const lam_scaler *ls))                                   \
  /* s->found = 1 where any of the n values of g is not finite (else left as it was: the trainer zeroes it first). */ \
  X(grad_check, (lam_ctx * ctx, size_t n, const float *g, lam_scaler *s))                                           \
  /* The step's decision from s->found (lam_scaler_decide in math/optim.h, the same on both backends): inv = 1 /    \
   * scale; found: the step is skipped, the scale halved (not below LAM_SCALE_FLOOR: there stuck is noted as        \
   * *k + 1); else taken += 1 and coef = the optimizer's scalars of step `taken` (adam = 1: lam_adam_coef of the    \
   * rate sched[3 * *k + 2], b1, b2; 0: SGD's first-step flag, the rate), and the scale doubled after              \
   * LAM_SCALE_GROWTH clean steps. */                                                                               \
  X(scaler_update, (lam_ctx * ctx, lam_scaler * s, int adam, float b1, float b2, const float *sched, const int32_t *k))                                                    \
  /* The trainer's device-side step: state[0] += B (the gather's cursor), state[1] += 1 (the row of sched); and   \
   * where stats is not NULL, holds a loss sum (stats[0]) that is no longer finite and no step yet (stats[3] 0),   \
   * stats[3] = state[1] after the increment: the first step of the epoch whose loss was NaN or infinite. */       \
  X(step_advance, (lam_ctx * ctx, int32_t *state, int B, float *stats))                                             \
  /* gradient = error * input; w -= lr * gradient. */                                                               \
  X(backprop_step, (lam_ctx * ctx, size_t n, const float *err, const float *in, float lr, float *w))                \
  /* out (n, c, h, w) = (in / 255 - mean[ch]) / std[ch] as float (bf16 = 0) or bfloat16 (bf16 = 1), from NCHW or   \
   * NHWC (nhwc = 1). */                                                                                            \
  X(normalize_images, (lam_ctx * ctx, size_t n, int c, int h, int w, int nhwc, const uint8_t *in, const float *mean, \
                       const float *std, int bf16, void *out))

#endif
