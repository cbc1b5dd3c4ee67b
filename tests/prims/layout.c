/* layout.c — test_prims' data movement: zero, add and (with mask_scale) test_elementwise, copy_rows, tcat both ways,
 * poison; and every primitive of activations in NHWC bfloat16 against itself in the format under test (test_fmt_bf16).
 * convert runs in every case of the NHWC runs (prims_test.h's fin and fout). */
#include "prims_test.h"

/* ---- zero ---- */

static void test_zero(void **state) {
  (void)state;
  static const size_t ns[] = {1, 13, 40003};
  for (size_t c = 0; c < 3; c++) {
    seed_case("zero", c);
    size_t n = ns[c], tot = n + 7;
    uint8_t *h = u8rand(tot, 1, 255), *got = xmalloc(tot);
    uint8_t *d = dput(g_ctx, h, tot);
    TU_OK(BE(g_ctx)->zero(g_ctx, d + 3, n)); /* an odd offset and length */
    dget(g_ctx, got, d, tot, "zero");
    for (size_t i = 0; i < tot; i++) {
      uint8_t want = i >= 3 && i < 3 + n ? 0 : h[i];
      if (got[i] != want) fail_msg("zero n=%zu: byte %zu is %d, want %d", n, i, got[i], want);
    }
    dfree(g_ctx, d);
    free(h), free(got);
  }
}

/* ---- add (and mask_scale: test_elementwise), copy_rows ---- */

void run_add(lam_ctx *ctx, size_t n, const float *a, const float *b, float *y, int alias) {
  float *da = dput(ctx, a, n * 4), *db = dput(ctx, b, n * 4);
  float *dy = alias == 1 ? da : alias == 2 ? db : dput(ctx, y, n * 4);
  void *fa = fin_flat(ctx, da, n), *fb = fin_flat(ctx, db, n), *fy = alias == 1 ? fa : alias == 2 ? fb : fin_flat(ctx, dy, n);
  TU_OK(BE(ctx)->add(ctx, g_fmt, n, fa, fb, fy));
  if (alias != 1) fout_flat(ctx, fa, da, n, "add a (format)");
  if (alias != 2) fout_flat(ctx, fb, db, n, "add b (format)");
  fout_flat(ctx, fy, dy, n, "add y (format)");
  dget(ctx, y, dy, n * 4, "add");
  dfree(ctx, da), dfree(ctx, db);
  if (!alias) dfree(ctx, dy);
}

static void test_elementwise(void **state) {
  (void)state;
  static const size_t ns[] = {1, 37, 40001};
  uint64_t k = 0;
  for (size_t c = 0; c < 3; c++)
    for (int alias = 0; alias < 3; alias++) {
      seed_case("elementwise", k++);
      size_t n = ns[c];
      char what[120];
      float *x = frand(n, -2, 2), *b = frand(n, -2, 2), scale = 1.0f / 0.7f;
      uint8_t *mask = u8rand(n, 0, 1);
      double *ref = dzero(n), *rs = dzero(n);
      /* mask_scale: y = mask ? x * scale : 0 (one rounded product; dropped: exactly 0) */
      for (size_t i = 0; i < n; i++) ref[i] = mask[i] ? (double)x[i] * scale : 0.0, rs[i] = fabs(ref[i]);
      float *got = alias ? fdup(x, n) : fnan(n), *cpu = g_cuda ? (alias ? fdup(x, n) : fnan(n)) : NULL;
      run_mask_scale(g_ctx, n, x, mask, scale, got, alias != 0);
      if (g_cuda) run_mask_scale(g_cpu, n, x, mask, scale, cpu, alias != 0);
      snprintf(what, sizeof what, "mask_scale n=%zu%s", n, alias ? " in place" : "");
      verify(what, n, got, ref, cpu, rs, 1e-7, 0.0);
      free(got), free(cpu);
      /* add: y = a + b, y separate, y = a or y = b (one rounded add) */
      for (size_t i = 0; i < n; i++) ref[i] = (double)x[i] + b[i], rs[i] = fabs(x[i]) + fabs(b[i]);
      const float *init = alias == 2 ? b : x;
      got = alias ? fdup(init, n) : fnan(n), cpu = g_cuda ? (alias ? fdup(init, n) : fnan(n)) : NULL;
      run_add(g_ctx, n, x, b, got, alias);
      if (g_cuda) run_add(g_cpu, n, x, b, cpu, alias);
      snprintf(what, sizeof what, "add n=%zu y=%s", n, alias == 0 ? "new" : alias == 1 ? "a" : "b");
      verify(what, n, got, ref, cpu, rs, 1e-7, 0.0);
      free(x), free(b), free(mask), free(ref), free(rs), free(got), free(cpu);
    }
}

static void run_copy_rows(lam_ctx *ctx, size_t rows, size_t cols, const float *src, size_t lds, float *dst, size_t ldd) {
  size_t ns = rows * lds, nd = rows * ldd;
  float *dsrc = dput(ctx, src, ns * 4), *ddst = dput(ctx, dst, nd * 4);
  void *fs = fin_flat(ctx, dsrc, ns), *fd = fin_flat(ctx, ddst, nd);
  TU_OK(BE(ctx)->copy_rows(ctx, g_fmt, rows, cols, fs, lds, fd, ldd));
  fout_flat(ctx, fs, dsrc, ns, "copy_rows src (format)"), fout_flat(ctx, fd, ddst, nd, "copy_rows dst (format)");
  dget(ctx, dst, ddst, nd * 4, "copy_rows");
  dfree(ctx, dsrc), dfree(ctx, ddst);
}

static void test_copy_rows(void **state) {
  (void)state;
  static const size_t k_cr[][4] = {{1, 1, 1, 1}, {3, 5, 8, 5}, {4, 7, 7, 20}, {64, 33, 100, 40}, {2, 1000, 1000, 3000},
                                   {70000, 2, 3, 5}};
  for (size_t s = 0; s < sizeof k_cr / sizeof k_cr[0]; s++) {
    seed_case("copy_rows", s);
    size_t rows = k_cr[s][0], cols = k_cr[s][1], lds = k_cr[s][2], ldd = k_cr[s][3], nd = rows * ldd;
    float *src = frand(rows * lds, -1, 1), *d0 = frand(nd, -1, 1);
    double *ref = dzero(nd), *zero = dzero(nd);
    for (size_t r = 0; r < rows; r++)
      for (size_t i = 0; i < ldd; i++) ref[r * ldd + i] = i < cols ? src[r * lds + i] : d0[r * ldd + i];
    float *got = fdup(d0, nd), *cpu = g_cuda ? fdup(d0, nd) : NULL;
    run_copy_rows(g_ctx, rows, cols, src, lds, got, ldd);
    if (g_cuda) run_copy_rows(g_cpu, rows, cols, src, lds, cpu, ldd);
    char what[120];
    snprintf(what, sizeof what, "copy_rows rows=%zu cols=%zu lds=%zu ldd=%zu", rows, cols, lds, ldd);
    verify(what, nd, got, ref, cpu, zero, 0.0, 0.0); /* copied exactly, the rest of dst untouched */
    free(src), free(d0), free(ref), free(zero), free(got), free(cpu);
  }
}

/* ---- tcat: a clip's frames as channels, x (B*T, C, P) -> y (B, T*C, P), channel t*C + k = frame t's k. Values
 * move unchanged, so in plain NCHW order y is x value for value; checked exactly, in every format and in bfloat16
 * NHWC (on values that bfloat16 holds), both ways. ---- */
static const int k_tc[][4] = {{1, 2, 1, 1}, {2, 16, 1, 4096}, {3, 4, 8, 49}, {2, 5, 3, 7}, {1, 3, 64, 1}};

static void run_tcat(lam_ctx *ctx, int bwd, int B, int T, int C, size_t P, const float *in, float *out) {
  const size_t n = (size_t)B * T * C * P;
  float *di = dput(ctx, in, n * 4), *dout = dput(ctx, out, n * 4);
  const int ib = bwd ? B : B * T, ic = bwd ? T * C : C, ob = bwd ? B * T : B, oc = bwd ? C : T * C;
  void *fi = fin(ctx, di, ib, ic, P), *fo = fin(ctx, dout, ob, oc, P);
  if (bwd) TU_OK(BE(ctx)->tcat_bwd(ctx, g_fmt, B, T, C, P, fi, fo));
  else TU_OK(BE(ctx)->tcat_fwd(ctx, g_fmt, B, T, C, P, fi, fo));
  fout(ctx, fi, di, ib, ic, P, "tcat in (format)"), fout(ctx, fo, dout, ob, oc, P, "tcat out (format)");
  dget(ctx, out, dout, n * 4, bwd ? "tcat_bwd" : "tcat_fwd");
  dfree(ctx, di), dfree(ctx, dout);
}
static void tcat_case(int B, int T, int C, size_t P, int bf16) {
  const size_t n = (size_t)B * T * C * P;
  float *x = frand(n, -2, 2);
  if (bf16) round_bf16(x, n);
  double *ref = dzero(n);
  for (size_t i = 0; i < n; i++) ref[i] = x[i];
  for (int bwd = 0; bwd < 2; bwd++) {
    char what[120];
    snprintf(what, sizeof what, "tcat_%s%s B=%d T=%d C=%d P=%zu", bwd ? "bwd" : "fwd", bf16 ? " bf16" : "", B, T, C, P);
    float *y = fnan(n), *yc = g_cuda ? fnan(n) : NULL;
    if (bf16) IN_BF16(run_tcat(g_ctx, bwd, B, T, C, P, x, y));
    else run_tcat(g_ctx, bwd, B, T, C, P, x, y);
    if (g_cuda && bf16) IN_BF16(run_tcat(g_cpu, bwd, B, T, C, P, x, yc));
    else if (g_cuda) run_tcat(g_cpu, bwd, B, T, C, P, x, yc);
    verify(what, n, y, ref, yc, NULL, 0.0, 0.0);
    if (g_cuda) cmp_f(what, n, y, ref, NULL, 0.0); /* and the values themselves */
    free(y), free(yc);
  }
  free(x), free(ref);
}
static void test_tcat(void **state) {
  (void)state;
  for (size_t s = 0; s < sizeof k_tc / sizeof k_tc[0]; s++) {
    seed_case("tcat", s);
    tcat_case(k_tc[s][0], k_tc[s][1], k_tc[s][2], (size_t)k_tc[s][3], 0);
    tcat_case(k_tc[s][0], k_tc[s][1], k_tc[s][2], (size_t)k_tc[s][3], 1);
  }
}

/* ---- bfloat16 activations: each primitive in NHWC bfloat16 against itself in the format under test, on the
 * same inputs (bfloat16 values, so both formats read the same numbers) ---- */

static void test_fmt_bf16(void **state) {
  (void)state;
  static const int shapes[][4] = {{3, 16, 7, 9}, {2, 3, 5, 6}, {4, 64, 4, 4}, {2, 8, 1, 1}}; /* B, C, H, W */
  for (int si = 0; si < 4; si++) {
    const int B = shapes[si][0], C = shapes[si][1], H = shapes[si][2], W = shapes[si][3], P = H * W;
    const size_t n = (size_t)B * C * P;
    char what[160], geo[64];
    snprintf(geo, sizeof geo, "B=%d C=%d %dx%d", B, C, H, W);
    seed_case("fmt_bf16", (uint64_t)si);
    float *x = frand16(n, -2, 2), *dy = frand16(n, -1, 1), *bias = frand(C, -1, 1), *gamma = frand(C, 0.5, 1.5),
          *beta = frand(C, -0.5, 0.5);
    /* channel bias, both ways */
    float *y32 = fdup(x, n), *y16 = fdup(x, n), *db32 = frand(C, -1, 1), *db16 = fdup(db32, C), *db0 = fdup(db32, C);
    run_channel_bias_fwd(g_ctx, B, C, P, y32, bias);
    IN_BF16(run_channel_bias_fwd(g_ctx, B, C, P, y16, bias));
    snprintf(what, sizeof what, "bf16 channel_bias_fwd %s", geo), cmp_bf16(what, n, y16, y32);
    run_channel_bias_bwd(g_ctx, B, C, P, dy, db32);
    IN_BF16(run_channel_bias_bwd(g_ctx, B, C, P, dy, db16));
    snprintf(what, sizeof what, "bf16 channel_bias_bwd %s", geo), cmp_bf16_added(what, C, db16, db32, db0);
    free(y32), free(y16), free(db32), free(db16), free(db0);
    /* activations: gelu and relu, forward and backward */
    for (int a = 0; a < 2; a++) {
      const int act = a ? LAM_ACT_RELU : LAM_ACT_GELU;
      float *o32 = fnan(n), *o16 = fnan(n), *g32 = fnan(n), *g16 = fnan(n);
      run_act(g_ctx, 0, act, 0.0f, n, x, NULL, NULL, o32, 0);
      IN_BF16(run_act(g_ctx, 0, act, 0.0f, n, x, NULL, NULL, o16, 0));
      snprintf(what, sizeof what, "bf16 act_fwd %s %s", act_name(act), geo), cmp_bf16(what, n, o16, o32);
      round_bf16(o32, n); /* relu's backward reads y: the same y for both */
      run_act(g_ctx, 1, act, 0.0f, n, x, o32, dy, g32, 0);
      IN_BF16(run_act(g_ctx, 1, act, 0.0f, n, x, o32, dy, g16, 0));
      snprintf(what, sizeof what, "bf16 act_bwd %s %s", act_name(act), geo), cmp_bf16(what, n, g16, g32);
      free(o32), free(o16), free(g32), free(g16);
    }
    /* BatchNorm alone and with gelu: training forward (y and the statistics), then backward */
    for (int fused = 0; fused < 2; fused++) {
      bn_bufs o32 = {fnan(n), fnan(C), fnan(C), frand(C, -1, 1), frand(C, 0.5, 2)}, o16;
      o16 = (bn_bufs){fnan(n), fnan(C), fnan(C), fdup(o32.rm, C), fdup(o32.rv, C)};
      if (fused) {
        run_bn_act_fwd(g_ctx, B, C, P, LAM_ACT_GELU, 0.0f, x, gamma, beta, &o32, 0.1f, 1e-5f, 1);
        IN_BF16(run_bn_act_fwd(g_ctx, B, C, P, LAM_ACT_GELU, 0.0f, x, gamma, beta, &o16, 0.1f, 1e-5f, 1));
      } else {
        run_bn_fwd(g_ctx, B, C, P, x, gamma, beta, &o32, 0.1f, 1e-5f, 1, 0);
        IN_BF16(run_bn_fwd(g_ctx, B, C, P, x, gamma, beta, &o16, 0.1f, 1e-5f, 1, 0));
      }
      const char *op = fused ? "bn_act(gelu)" : "bn";
      snprintf(what, sizeof what, "bf16 %s_fwd y %s", op, geo), cmp_bf16(what, n, o16.y, o32.y);
      snprintf(what, sizeof what, "bf16 %s_fwd mean %s", op, geo), cmp_bf16(what, C, o16.mean, o32.mean);
      snprintf(what, sizeof what, "bf16 %s_fwd invstd %s", op, geo), cmp_bf16(what, C, o16.invstd, o32.invstd);
      snprintf(what, sizeof what, "bf16 %s_fwd run_var %s", op, geo), cmp_bf16(what, C, o16.rv, o32.rv);
      float *dx32 = fnan(n), *dx16 = fnan(n), *dg32 = frand(C, -1, 1), *dg16 = fdup(dg32, C), *dbt32 = frand(C, -1, 1),
            *dbt16 = fdup(dbt32, C), *dg0 = fdup(dg32, C), *dbt0 = fdup(dbt32, C);
      if (fused) {
        run_bn_act_bwd(g_ctx, B, C, P, LAM_ACT_GELU, 0.0f, x, NULL, dy, gamma, beta, o32.mean, o32.invstd, dx32, dg32,
                       dbt32);
        IN_BF16(run_bn_act_bwd(g_ctx, B, C, P, LAM_ACT_GELU, 0.0f, x, NULL, dy, gamma, beta, o32.mean, o32.invstd, dx16,
                               dg16, dbt16));
      } else {
        run_bn_bwd(g_ctx, B, C, P, x, dy, gamma, o32.mean, o32.invstd, dx32, dg32, dbt32, 0);
        IN_BF16(run_bn_bwd(g_ctx, B, C, P, x, dy, gamma, o32.mean, o32.invstd, dx16, dg16, dbt16, 0));
      }
      snprintf(what, sizeof what, "bf16 %s_bwd dx %s", op, geo), cmp_bf16(what, n, dx16, dx32);
      snprintf(what, sizeof what, "bf16 %s_bwd dgamma %s", op, geo), cmp_bf16_added(what, C, dg16, dg32, dg0);
      snprintf(what, sizeof what, "bf16 %s_bwd dbeta %s", op, geo), cmp_bf16_added(what, C, dbt16, dbt32, dbt0);
      free(o32.y), free(o32.mean), free(o32.invstd), free(o32.rm), free(o32.rv);
      free(o16.y), free(o16.mean), free(o16.invstd), free(o16.rm), free(o16.rv);
      free(dx32), free(dx16), free(dg32), free(dg16), free(dbt32), free(dbt16), free(dg0), free(dbt0);
    }
    /* pooling: max (windows apart and overlapping) and average, both ways */
    for (int pk = 0; pk < 2 && H >= 2 && W >= 2; pk++) {
      const int K = 2 + pk * (H >= 3 && W >= 3), stride = 2;
      lam_pool_geom g = {C, H, W, K, stride, (H - K) / stride + 1, (W - K) / stride + 1};
      const size_t ny = (size_t)B * C * g.OH * g.OW;
      float *py32 = fnan(ny), *py16 = fnan(ny), *pdy = frand16(ny, -1, 1), *pdx32 = fnan(n), *pdx16 = fnan(n);
      int32_t *arg32 = xmalloc(ny * 4), *arg16 = xmalloc(ny * 4);
      run_maxpool_fwd(g_ctx, &g, B, x, py32, arg32);
      IN_BF16(run_maxpool_fwd(g_ctx, &g, B, x, py16, arg16));
      snprintf(what, sizeof what, "bf16 maxpool_fwd K=%d %s", K, geo), cmp_bf16(what, ny, py16, py32);
      snprintf(what, sizeof what, "bf16 maxpool_fwd arg K=%d %s", K, geo);
      verify_bytes(what, ny, 4, arg16, arg32, arg32);
      run_maxpool_bwd(g_ctx, &g, B, pdy, arg32, pdx32);
      IN_BF16(run_maxpool_bwd(g_ctx, &g, B, pdy, arg32, pdx16));
      snprintf(what, sizeof what, "bf16 maxpool_bwd K=%d %s", K, geo), cmp_bf16(what, n, pdx16, pdx32);
      run_avgpool_fwd(g_ctx, &g, B, x, py32);
      IN_BF16(run_avgpool_fwd(g_ctx, &g, B, x, py16));
      snprintf(what, sizeof what, "bf16 avgpool_fwd K=%d %s", K, geo), cmp_bf16(what, ny, py16, py32);
      run_avgpool_bwd(g_ctx, &g, B, pdy, pdx32);
      IN_BF16(run_avgpool_bwd(g_ctx, &g, B, pdy, pdx16));
      snprintf(what, sizeof what, "bf16 avgpool_bwd K=%d %s", K, geo), cmp_bf16(what, n, pdx16, pdx32);
      free(py32), free(py16), free(pdy), free(pdx32), free(pdx16), free(arg32), free(arg16);
    }
    /* global average pool and nearest upsampling, both ways */
    {
      float *m32 = fnan((size_t)B * C), *m16 = fnan((size_t)B * C), *mdy = frand16((size_t)B * C, -1, 1);
      float *g32 = fnan(n), *g16 = fnan(n), *u32 = fnan(n * 4), *u16 = fnan(n * 4), *udy = frand16(n * 4, -1, 1);
      run_plane_mean_fwd(g_ctx, B, C, P, x, m32);
      IN_BF16(run_plane_mean_fwd(g_ctx, B, C, P, x, m16));
      snprintf(what, sizeof what, "bf16 plane_mean_fwd %s", geo), cmp_bf16(what, (size_t)B * C, m16, m32);
      run_plane_mean_bwd(g_ctx, B, C, P, mdy, g32);
      IN_BF16(run_plane_mean_bwd(g_ctx, B, C, P, mdy, g16));
      snprintf(what, sizeof what, "bf16 plane_mean_bwd %s", geo), cmp_bf16(what, n, g16, g32);
      run_upsample(g_ctx, 0, B, C, H, W, 2, x, u32);
      IN_BF16(run_upsample(g_ctx, 0, B, C, H, W, 2, x, u16));
      snprintf(what, sizeof what, "bf16 upsample_fwd %s", geo), cmp_bf16(what, n * 4, u16, u32);
      run_upsample(g_ctx, 1, B, C, H, W, 2, udy, g32);
      IN_BF16(run_upsample(g_ctx, 1, B, C, H, W, 2, udy, g16));
      snprintf(what, sizeof what, "bf16 upsample_bwd %s", geo), cmp_bf16(what, n, g16, g32);
      free(m32), free(m16), free(mdy), free(g32), free(g16), free(u32), free(u16), free(udy);
    }
    /* elementwise: add, mask_scale, copy_rows (a concat's copies in NHWC: rows of pixels) */
    {
      float *a32 = fnan(n), *a16 = fnan(n), *s32 = fnan(n), *s16 = fnan(n);
      uint8_t *mask = u8rand(n, 0, 1);
      run_add(g_ctx, n, x, dy, a32, 0);
      IN_BF16(run_add(g_ctx, n, x, dy, a16, 0));
      snprintf(what, sizeof what, "bf16 add %s", geo), cmp_bf16(what, n, a16, a32);
      run_mask_scale(g_ctx, n, x, mask, 1.25f, s32, 0);
      IN_BF16(run_mask_scale(g_ctx, n, x, mask, 1.25f, s16, 0));
      snprintf(what, sizeof what, "bf16 mask_scale %s", geo), cmp_bf16(what, n, s16, s32);
      const size_t rows = (size_t)B * P, ld = (size_t)C + 5;
      float *dst32 = frand16(rows * ld, -1, 1), *dst16 = fdup(dst32, rows * ld);
      run_copy_rows(g_ctx, rows, (size_t)C, x, (size_t)C, dst32, ld);
      IN_BF16(run_copy_rows(g_ctx, rows, (size_t)C, x, (size_t)C, dst16, ld));
      snprintf(what, sizeof what, "bf16 copy_rows %s", geo);
      verify_bytes(what, rows * ld, 4, dst16, dst32, dst32); /* copies: exact */
      free(a32), free(a16), free(s32), free(s16), free(mask), free(dst32), free(dst16);
    }
    /* per-pixel cross-entropy: the loss's sums and dlogits */
    {
      uint8_t *labels = u8rand((size_t)B * P, 0, (unsigned)(C - 1));
      labels[0] = LAM_LABEL_IGNORE;
      float count = 0;
      for (size_t i = 0; i < (size_t)B * P; i++) count += labels[i] != LAM_LABEL_IGNORE;
      xent_out o32 = {fnan(n), {0, 0, 0}, xmalloc((size_t)B * P)}, o16 = {fnan(n), {0, 0, 0}, xmalloc((size_t)B * P)};
      run_xent(g_ctx, B, C, P, x, labels, 1.0f, NULL, &count, 0.1f, &o32);
      IN_BF16(run_xent(g_ctx, B, C, P, x, labels, 1.0f, NULL, &count, 0.1f, &o16));
      snprintf(what, sizeof what, "bf16 xent dlogits %s", geo), cmp_bf16(what, n, o16.dl, o32.dl);
      snprintf(what, sizeof what, "bf16 xent stats %s", geo), cmp_bf16(what, 3, o16.stats, o32.stats);
      snprintf(what, sizeof what, "bf16 xent pred %s", geo);
      verify_bytes(what, (size_t)B * P, 1, o16.pred, o32.pred, o32.pred); /* the same logits: the same argmax */
      free(labels), free(o32.dl), free(o32.pred), free(o16.dl), free(o16.pred);
    }
    /* convolutions: 3x3 padded, and 1x1 (whose NHWC filter is PyTorch's order) */
    for (int kk = 0; kk < 2; kk++) {
      const int K = kk ? 1 : 3, OC = C == 3 ? 8 : C;
      lam_conv_geom g = {C, H, W, K, 1, K / 2, H, W};
      const size_t ny = (size_t)B * OC * P, nw = (size_t)OC * C * K * K;
      float *Wt = frand16(nw, -0.5, 0.5), *cdy = frand16(ny, -1, 1);
      conv_io io32 = {x, Wt, cdy, fnan(ny), fnan(n), frand(nw, -1, 1), 0}, io16 = io32;
      io16.y = fnan(ny), io16.dx = fnan(n), io16.dW = fdup(io32.dW, nw);
      float *dW0 = fdup(io32.dW, nw);
      run_conv2d(g_ctx, &g, OC, B, &io32, 0);
      IN_BF16(run_conv2d(g_ctx, &g, OC, B, &io16, 0));
      snprintf(what, sizeof what, "bf16 conv2d_fwd K=%d %s", K, geo), cmp_bf16(what, ny, io16.y, io32.y);
      snprintf(what, sizeof what, "bf16 conv2d_bwd_data K=%d %s", K, geo), cmp_bf16(what, n, io16.dx, io32.dx);
      snprintf(what, sizeof what, "bf16 conv2d_bwd_filter K=%d %s", K, geo);
      cmp_bf16_added(what, nw, io16.dW, io32.dW, dW0);
      free(dW0), free(Wt), free(cdy), free(io32.y), free(io32.dx), free(io32.dW), free(io16.y), free(io16.dx), free(io16.dW);
    }
    free(x), free(dy), free(bias), free(gamma), free(beta);
  }
}

/* poison: every byte 0xFF (NaN as float and as bfloat16), and nothing past the bytes asked (dget checks the guard). */
static void test_poison(void **state) {
  (void)state;
  static const size_t sizes[] = {1, 3, 64, 1000, 4099};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    uint8_t *h = xmalloc(sizes[k]), *back = xmalloc(sizes[k]);
    for (size_t i = 0; i < sizes[k]; i++) h[i] = (uint8_t)i;
    void *d = dput(g_ctx, h, sizes[k]);
    TU_OK(BE(g_ctx)->poison(g_ctx, d, sizes[k]));
    dget(g_ctx, back, d, sizes[k], "poison");
    for (size_t i = 0; i < sizes[k]; i++)
      if (back[i] != 0xFF) fail_msg("poison of %zu bytes: byte %zu is 0x%02x, want 0xFF", sizes[k], i, back[i]);
    dfree(g_ctx, d);
    free(h), free(back);
  }
}

IN_F16_TEST(test_tcat)
IN_F16_TEST(test_fmt_bf16)

const struct CMUnitTest *prims_layout_tests(size_t *n) {
  static const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_zero),
      cmocka_unit_test(test_tcat),
      cmocka_unit_test(test_elementwise),
      cmocka_unit_test(test_copy_rows),
      cmocka_unit_test(test_fmt_bf16),
      cmocka_unit_test(test_poison),
      cmocka_unit_test(test_tcat_f16),
      cmocka_unit_test(test_fmt_bf16_f16),
  };
  *n = sizeof tests / sizeof tests[0];
  return tests;
}
