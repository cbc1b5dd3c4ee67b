/* data.c — test_prims' input pipeline: gather (the batch's samples, normalized, and their labels; with the
 * augmentation's crops and flips too) and normalize_images. */
#include "prims_test.h"

/* ---- gather ---- */

typedef struct gather_case {
  int B, C;
  size_t P, label_size;
  int cursor;
  int T; /* frames of a clip */
} gather_case;
static const gather_case k_gather[] = {{1, 1, 1, 1, 0, 1},   {3, 3, 10, 1, 1, 1}, {4, 1, 784, 1, 0, 1},
                                       {5, 3, 64, 64, 1, 1}, {2, 64, 9, 3, 0, 1}, {7, 2, 1, 5, 1, 1},
                                       {3, 3, 10, 1, 1, 4}, {2, 1, 49, 1, 0, 16}, {4, 2, 7, 1, 1, 3}};
static int gather_frames(const gather_case *g) { return g->T; }

static void run_gather(lam_ctx *ctx, const gather_case *g, size_t nimg, const uint8_t *images, const uint8_t *labels,
                       const int32_t *idx, size_t nidx, const lam_norm *norm, const lam_aug *aug, float *x, uint8_t *y) {
  const int T = gather_frames(g);
  size_t sample = (size_t)T * g->C * g->P;
  int32_t cur = 3;
  uint8_t *di = dput(ctx, images, nimg * sample), *dl = dput(ctx, labels, nimg * g->label_size);
  int32_t *dx_idx = dput(ctx, idx, nidx * 4), *dc = g->cursor ? dput(ctx, &cur, 4) : NULL;
  float *dx = dput(ctx, x, (size_t)g->B * sample * 4);
  uint8_t *dy = dput(ctx, y, (size_t)g->B * g->label_size);
  void *fx = fin(ctx, dx, g->B * T, g->C, g->P);
  lam_aug da;
  int32_t *dctr = NULL;
  if (aug) { /* its counter in the backend's memory, as the trainer's */
    da = *aug;
    dctr = dput(ctx, aug->ctr, 4);
    da.ctr = dctr;
  }
  TU_OK(BE(ctx)->gather(ctx, g->B, T, g->C, g->P, di, g->label_size, dl, dx_idx, dc, norm, aug ? &da : NULL, g_fmt, fx,
                        dy));
  dfree(ctx, dctr);
  fout(ctx, fx, dx, g->B * T, g->C, g->P, "gather x (format)");
  dget(ctx, x, dx, (size_t)g->B * sample * 4, "gather x");
  dget(ctx, y, dy, (size_t)g->B * g->label_size, "gather y");
  dfree(ctx, di), dfree(ctx, dl), dfree(ctx, dx_idx), dfree(ctx, dc), dfree(ctx, dx), dfree(ctx, dy);
}

static void test_gather(void **state) {
  (void)state;
  for (size_t s = 0; s < sizeof k_gather / sizeof k_gather[0]; s++) {
    seed_case("gather", s);
    const gather_case *g = &k_gather[s];
    const int T = gather_frames(g);
    size_t nimg = (size_t)g->B + 6, sample = (size_t)T * g->C * g->P, nidx = (size_t)g->B + 3, nx = (size_t)g->B * sample;
    uint8_t *images = u8rand(nimg * sample, 0, 255), *labels = u8rand(nimg * g->label_size, 0, 255);
    int32_t *idx = xmalloc(nidx * 4);
    for (size_t i = 0; i < nidx; i++) idx[i] = (int32_t)(tu_next(&g_r) % nimg);
    lam_norm norm = {g->C, {0}, {0}};
    for (int c = 0; c < g->C; c++) norm.mean[c] = (float)U(0.2, 0.8), norm.std[c] = (float)U(0.1, 0.5);
    const int32_t *id = idx + (g->cursor ? 3 : 0); /* the cursor starts the batch 3 entries further */
    double *xref = dzero(nx), *xscale = dzero(nx);
    uint8_t *yref = xmalloc((size_t)g->B * g->label_size);
    for (int b = 0; b < g->B; b++) {
      for (int tc = 0; tc < T * g->C; tc++) /* frame t = tc / C, channel c: row b*T + t of x, as in the image */
        for (size_t p = 0; p < g->P; p++) {
          const int c = tc % g->C;
          double u = images[(size_t)id[b] * sample + (size_t)tc * g->P + p];
          size_t o = (size_t)b * sample + (size_t)tc * g->P + p;
          xref[o] = (u / 255.0 - norm.mean[c]) / norm.std[c];
          xscale[o] = (u / 255.0 + norm.mean[c]) / norm.std[c]; /* u a + k in float: a few ulps of its terms */
        }
      memcpy(yref + (size_t)b * g->label_size, labels + (size_t)id[b] * g->label_size, g->label_size);
    }
    float *x = fnan(nx), *xc = g_cuda ? fnan(nx) : NULL;
    size_t ny = (size_t)g->B * g->label_size;
    uint8_t *y = xmalloc(ny), *yc = xmalloc(ny);
    for (size_t i = 0; i < ny; i++) y[i] = yc[i] = (uint8_t)~yref[i]; /* every byte wrong first */
    run_gather(g_ctx, g, nimg, images, labels, idx, nidx, &norm, NULL, x, y);
    if (g_cuda) run_gather(g_cpu, g, nimg, images, labels, idx, nidx, &norm, NULL, xc, yc);
    char what[160];
    snprintf(what, sizeof what, "gather x B=%d T=%d C=%d P=%zu label_size=%zu cursor=%d", g->B, T, g->C, g->P,
             g->label_size, g->cursor);
    verify(what, nx, x, xref, xc, xscale, 1e-6, 1e-6);
    snprintf(what, sizeof what, "gather y B=%d C=%d P=%zu label_size=%zu cursor=%d", g->B, g->C, g->P, g->label_size,
             g->cursor);
    verify_bytes(what, (size_t)g->B * g->label_size, 1, y, yref, yc);
    free(images), free(labels), free(idx), free(xref), free(xscale), free(yref), free(x), free(xc), free(y), free(yc);
  }
}

/* ---- gather with augmentation: each sample cropped after padding and flipped (prims.h, lam_aug). The draws are
 * aug.h's (the random stream is its definition); where they send each pixel is worked out here again. ---- */
typedef struct aug_case {
  int B, T, C, h, w, per_pixel, pad, flip;
} aug_case;
static const aug_case k_aug[] = {{8, 1, 1, 5, 7, 1, 2, 1}, {6, 3, 2, 4, 4, 0, 1, 0}, {16, 1, 3, 6, 5, 1, 0, 1},
                                 {5, 2, 1, 3, 9, 0, 3, 1}, {12, 1, 1, 28, 28, 1, 4, 1}};

static void test_gather_aug(void **state) {
  (void)state;
  int flips[2] = {0, 0}, moved = 0;
  for (size_t s = 0; s < sizeof k_aug / sizeof k_aug[0]; s++) {
    seed_case("gather_aug", s);
    const aug_case *ac = &k_aug[s];
    const size_t P = (size_t)ac->h * ac->w, L = ac->per_pixel ? P : 1;
    const gather_case g = {ac->B, ac->C, P, L, 0, ac->T};
    const size_t nimg = (size_t)ac->B + 4, sample = (size_t)ac->T * ac->C * P, nx = (size_t)ac->B * sample;
    uint8_t *images = u8rand(nimg * sample, 1, 255), *labels = u8rand(nimg * L, 0, 10); /* no 0: padding shows */
    int32_t *idx = xmalloc((size_t)ac->B * 4);
    for (int i = 0; i < ac->B; i++) idx[i] = (int32_t)(tu_next(&g_r) % nimg);
    lam_norm norm = {ac->C, {0}, {0}};
    for (int c = 0; c < ac->C; c++) norm.mean[c] = (float)U(0.2, 0.8), norm.std[c] = (float)U(0.1, 0.5);
    const int32_t ctr = (int32_t)(tu_next(&g_r) % 100000);
    const lam_aug aug = {ac->h, ac->w, ac->pad, ac->flip, tu_next(&g_r), &ctr};
    double *xref = dzero(nx), *xscale = dzero(nx);
    uint8_t *yref = xmalloc((size_t)ac->B * L);
    for (int b = 0; b < ac->B; b++) {
      const lam_aug_draw d = lam_aug_sample(&aug, ctr, b);
      assert_true(d.oy >= 0 && d.oy <= 2 * ac->pad && d.ox >= 0 && d.ox <= 2 * ac->pad && (d.flip == 0 || ac->flip));
      flips[d.flip]++, moved += d.oy != ac->pad || d.ox != ac->pad;
      for (int y = 0; y < ac->h; y++)
        for (int x = 0; x < ac->w; x++) {
          const int cx = d.flip ? ac->w - 1 - x : x; /* the crop's column the flip shows here */
          const int sy = y + d.oy - ac->pad, sx = cx + d.ox - ac->pad;
          const int in = sy >= 0 && sy < ac->h && sx >= 0 && sx < ac->w;
          const size_t p = (size_t)y * ac->w + x, q = in ? (size_t)sy * ac->w + sx : 0;
          for (int tc = 0; tc < ac->T * ac->C; tc++) {
            const int c = tc % ac->C;
            const double u = in ? images[(size_t)idx[b] * sample + (size_t)tc * P + q] : 0.0;
            const size_t o = (size_t)b * sample + (size_t)tc * P + p;
            xref[o] = (u / 255.0 - norm.mean[c]) / norm.std[c];
            xscale[o] = (u / 255.0 + norm.mean[c]) / norm.std[c];
          }
          if (ac->per_pixel) yref[(size_t)b * P + p] = in ? labels[(size_t)idx[b] * P + q] : LAM_LABEL_IGNORE;
        }
      if (!ac->per_pixel) yref[b] = labels[idx[b]];
    }
    float *x = fnan(nx), *xc = g_cuda ? fnan(nx) : NULL;
    const size_t ny = (size_t)ac->B * L;
    uint8_t *y = xmalloc(ny), *yc = xmalloc(ny);
    for (size_t i = 0; i < ny; i++) y[i] = yc[i] = (uint8_t)~yref[i];
    run_gather(g_ctx, &g, nimg, images, labels, idx, (size_t)ac->B, &norm, &aug, x, y);
    if (g_cuda) run_gather(g_cpu, &g, nimg, images, labels, idx, (size_t)ac->B, &norm, &aug, xc, yc);
    char what[160];
    snprintf(what, sizeof what, "gather augmented x B=%d T=%d C=%d %dx%d pad=%d flip=%d", ac->B, ac->T, ac->C, ac->h,
             ac->w, ac->pad, ac->flip);
    verify(what, nx, x, xref, xc, xscale, 1e-6, 1e-6);
    snprintf(what, sizeof what, "gather augmented labels B=%d %dx%d per_pixel=%d pad=%d flip=%d", ac->B, ac->h, ac->w,
             ac->per_pixel, ac->pad, ac->flip);
    verify_bytes(what, ny, 1, y, yref, yc);
    free(images), free(labels), free(idx), free(xref), free(xscale), free(yref), free(x), free(xc), free(y), free(yc);
  }
  /* the draws do something: some samples flipped and some not, most crops off the centre */
  if (!flips[0] || !flips[1] || moved < 20)
    fail_msg("augmentation's draws: %d flipped, %d not, %d crops off the centre of 47 samples", flips[1], flips[0], moved);
}

/* ---- normalize_images ---- */

static void test_normalize_images(void **state) {
  (void)state;
  uint64_t k = 0;
  for (int c = 1; c <= 3; c += 2)
    for (int nhwc = 0; nhwc < 2; nhwc++)
      for (int bf16 = 0; bf16 < 2; bf16++) {
        seed_case("normalize_images", k++);
        size_t n = 2, h = 3, w = 5, tot = n * c * h * w;
        uint8_t *in = u8rand(tot, 0, 255);
        float mean[3], std[3];
        for (int i = 0; i < c; i++) mean[i] = (float)U(0.2, 0.8), std[i] = (float)U(0.1, 0.5);
        double *ref = dzero(tot), *scale = dzero(tot);
        for (size_t img = 0; img < n; img++)
          for (int ch = 0; ch < c; ch++)
            for (size_t p = 0; p < h * w; p++) {
              size_t o = (img * c + ch) * h * w + p, src = nhwc ? (img * h * w + p) * c + ch : o;
              ref[o] = (in[src] / 255.0 - mean[ch]) / std[ch];
              /* float: a few ulps of the terms; bfloat16: half an ulp of the value (2^-9) on top */
              scale[o] = 1e-6 * (in[src] / 255.0 + mean[ch]) / std[ch] + (bf16 ? 0x1p-8 * fabs(ref[o]) : 0.0);
            }
        void *got = poison(tot, bf16), *cpu = g_cuda ? poison(tot, bf16) : NULL;
        for (int pass = 0; pass < 1 + g_cuda; pass++) {
          lam_ctx *ctx = pass ? g_cpu : g_ctx;
          void *out = pass ? cpu : got;
          uint8_t *di = dput(ctx, in, tot);
          void *dout = dput(ctx, out, tot * (bf16 ? 2 : 4));
          TU_OK(BE(ctx)->normalize_images(ctx, n, c, (int)h, (int)w, nhwc, di, mean, std, bf16, dout));
          dget(ctx, out, dout, tot * (bf16 ? 2 : 4), "normalize_images");
          dfree(ctx, di), dfree(ctx, dout);
        }
        float *gf = bf16 ? as_float_bf16((uint16_t *)got, tot) : fdup(got, tot);
        float *cf = !cpu ? NULL : bf16 ? as_float_bf16((uint16_t *)cpu, tot) : fdup(cpu, tot);
        char what[120];
        snprintf(what, sizeof what, "normalize_images c=%d nhwc=%d bf16=%d", c, nhwc, bf16);
        verify(what, tot, gf, ref, cf, scale, 1.0, 2.0); /* tol 1 on the scale above; 2: two roundings apart */
        free(in), free(ref), free(scale), free(got), free(cpu), free(gf), free(cf);
      }
}

const struct CMUnitTest *prims_data_tests(size_t *n) {
  static const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_gather),
      cmocka_unit_test(test_gather_aug),
      cmocka_unit_test(test_normalize_images),
  };
  *n = sizeof tests / sizeof tests[0];
  return tests;
}
