/* loss.c — test_prims' loss: the labels counted (label_count) and the softmax cross-entropy (xent: smoothing,
 * ignored labels, a count, its statistics and argmax). */
#include "prims_test.h"

/* ---- label_count ---- */

static void run_label_count(lam_ctx *ctx, size_t n, const uint8_t *labels, float *count) {
  uint8_t *dl = dput(ctx, labels, n);
  float *dc = dput(ctx, count, 4);
  TU_OK(BE(ctx)->label_count(ctx, n, dl, dc));
  dget(ctx, count, dc, 4, "label_count");
  dfree(ctx, dl), dfree(ctx, dc);
}

static void test_label_count(void **state) {
  (void)state;
  static const size_t ns[] = {1, 100, 70001, 300000};
  for (size_t c = 0; c < 4; c++) {
    seed_case("label_count", c);
    size_t n = ns[c], want = 0;
    uint8_t *l = u8rand(n, 0, 254);
    for (size_t i = 0; i < n; i++) {
      if (tu_next(&g_r) % 10 < 3) l[i] = LAM_LABEL_IGNORE;
      want += l[i] != LAM_LABEL_IGNORE;
    }
    float got = NAN, cpu = NAN;
    double ref = (double)(float)want, zero = 0;
    run_label_count(g_ctx, n, l, &got);
    if (g_cuda) run_label_count(g_cpu, n, l, &cpu);
    char what[80];
    snprintf(what, sizeof what, "label_count n=%zu", n);
    verify(what, 1, &got, &ref, &cpu, &zero, 0.0, 0.0); /* exact */
    free(l);
  }
}

/* ---- softmax cross-entropy ---- */

typedef struct xent_case {
  int B, C, P;
  double offset; /* added to every logit */
} xent_case;
static const xent_case k_xent[] = {{5, 10, 1, 0},  {1, 1, 1, 0},   {3, 3, 7, 0},    {4, 64, 5, 0}, {2, 21, 100, 0},
                                   {300, 10, 1, 0}, {3, 5, 1000, 0}, {4, 7, 3, 1000}, {1, 2, 1, 0}};

void run_xent(lam_ctx *ctx, int B, int C, int P, const float *logits, const uint8_t *labels, float scale,
              const float *lscale, const float *count, float s, xent_out *o) {
  size_t n = (size_t)B * C * P, np = (size_t)B * P;
  float *dlg = dput(ctx, logits, n * 4), *ddl = dput(ctx, o->dl, n * 4), *dc = dput(ctx, count, 4),
        *dst = dput(ctx, o->stats, 12), *dls = dput(ctx, lscale, 4);
  uint8_t *dlab = dput(ctx, labels, np), *dp = dput(ctx, o->pred, np);
  void *flg = fin(ctx, dlg, B, C, P), *fdl = fin(ctx, ddl, B, C, P);
  TU_OK(BE(ctx)->xent(ctx, g_fmt, B, C, P, flg, dlab, fdl, scale, dls, dc, s, dst, dp));
  fout(ctx, flg, dlg, B, C, P, "xent logits (format)"), fout(ctx, fdl, ddl, B, C, P, "xent dlogits (format)");
  if (o->dl) dget(ctx, o->dl, ddl, n * 4, "xent dlogits");
  if (o->pred) dget(ctx, o->pred, dp, np, "xent pred");
  dget(ctx, o->stats, dst, 12, "xent stats");
  dfree(ctx, dlg), dfree(ctx, ddl), dfree(ctx, dc), dfree(ctx, dst), dfree(ctx, dlab), dfree(ctx, dp), dfree(ctx, dls);
}

typedef struct xent_fd {
  int B, C, P;
  const uint8_t *labels;
  float scale, count, s;
} xent_fd;
static void xent_loss(const void *a, const float *logits, double *loss) {
  const xent_fd *f = a;
  float stats[3] = {0, 0, 0};
  TU_OK(BE(g_ctx)->xent(g_ctx, LAM_FMT_NCHW, f->B, f->C, f->P, logits, f->labels, NULL, 1.0f, NULL, NULL, f->s, stats, NULL));
  *loss = (double)stats[0] * f->scale / f->count;
}

static void test_xent(void **state) {
  (void)state;
  uint64_t k = 0;
  for (size_t s = 0; s < sizeof k_xent / sizeof k_xent[0]; s++)
    for (int v = 0; v < 4; v++) { /* v: smoothing 0.1 (odd), ignored labels and a count (>= 2) */
      seed_case("xent", k++);
      int B = k_xent[s].B, C = k_xent[s].C, P = k_xent[s].P, ign = v >= 2;
      float sm = v & 1 ? 0.1f : 0.0f, scale = ign ? 0.5f : 1.0f;
      size_t n = (size_t)B * C * P, np = (size_t)B * P;
      char what[160], geo[120];
      float *logits = frand(n, -4, 4);
      for (size_t i = 0; i < n; i++) logits[i] += (float)k_xent[s].offset;
      uint8_t *labels = u8rand(np, 0, C - 1);
      size_t counted = 0;
      for (size_t i = 0; i < np; i++) {
        if (ign && tu_next(&g_r) % 5 == 0) labels[i] = LAM_LABEL_IGNORE;
        counted += labels[i] != LAM_LABEL_IGNORE;
      }
      float count = (float)(counted ? counted : 1), *countp = ign ? &count : NULL;
      double f = scale / (countp ? (double)count : 1.0);
      snprintf(geo, sizeof geo, "B=%d C=%d P=%d offset=%g smoothing=%g ignore=%d", B, C, P, k_xent[s].offset, sm, ign);
      /* float64 reference: loss = -(1 - s) log p_y - (s / C) sum_c log p_c; dlogits = (p - target) f */
      double *dref = dzero(n), *dscale = dzero(n), st[3] = {0.5, 1.5, 2.5}, loss_mag = 0;
      uint8_t *pref = xmalloc(np);
      for (int b = 0; b < B; b++)
        for (int p = 0; p < P; p++) {
          const float *l = logits + (size_t)b * C * P + p;
          int am = 0;
          for (int c = 1; c < C; c++)
            if (l[(size_t)c * P] > l[(size_t)am * P]) am = c;
          pref[(size_t)b * P + p] = (uint8_t)am;
          int y = labels[(size_t)b * P + p];
          if (y == LAM_LABEL_IGNORE) continue; /* dlogits 0, exactly */
          double mx = l[(size_t)am * P], se = 0, slp = 0, sd = 0;
          for (int c = 0; c < C; c++) se += exp(l[(size_t)c * P] - mx);
          double lse = log(se) + mx;
          for (int c = 0; c < C; c++) slp += l[(size_t)c * P] - lse, sd += fabs(mx - l[(size_t)c * P]);
          st[0] += -(1 - sm) * (l[(size_t)y * P] - lse) - sm / C * slp;
          /* the float sum of C exponentials and its log: an error of about one (C eps at worst) */
          loss_mag += fabs(mx - l[(size_t)y * P]) + fabs(log(se)) + 1 + sm * sd;
          st[1] += am == y, st[2] += 1;
          for (int c = 0; c < C; c++) {
            double pc = exp(l[(size_t)c * P] - lse), t = (c == y ? 1 - sm : 0) + sm / C;
            size_t o = (size_t)b * C * P + (size_t)c * P + p;
            dref[o] = (pc - t) * f, dscale[o] = (pc + t) * fabs(f);
          }
        }
      double stscale[3] = {0.5 + loss_mag, 0, 0}; /* the counts exactly */
      int with_dl = v != 1, with_pred = v != 2;
      xent_out o = {with_dl ? fnan(n) : NULL, {0.5f, 1.5f, 2.5f}, with_pred ? u8rand(np, 200, 254) : NULL},
               oc = {0};
      run_xent(g_ctx, B, C, P, logits, labels, scale, NULL, countp, sm, &o);
      if (g_cuda) {
        oc = (xent_out){with_dl ? fnan(n) : NULL, {0.5f, 1.5f, 2.5f}, with_pred ? u8rand(np, 200, 254) : NULL};
        run_xent(g_cpu, B, C, P, logits, labels, scale, NULL, countp, sm, &oc);
      }
      snprintf(what, sizeof what, "xent stats %s", geo);
      /* each pixel's loss in float from exact differences; summed in double (CPU) or fp32 blocks (CUDA) */
      verify(what, 3, o.stats, st, oc.stats, stscale, 2e-6, 1e-5);
      snprintf(what, sizeof what, "xent dlogits %s", geo);
      /* p = expf(l - max) / sum: a few ulps, and the sum's C roundings at worst */
      if (with_dl) verify(what, n, o.dl, dref, oc.dl, dscale, 2e-6, 4e-6);
      snprintf(what, sizeof what, "xent pred %s", geo);
      if (with_pred) verify_bytes(what, np, 1, o.pred, pref, oc.pred);
      if (!g_cuda && with_dl && n <= 100) { /* dlogits against central differences of the loss sum * f */
        xent_fd xf = {B, C, P, labels, scale, countp ? count : 1.0f, sm};
        float *lg = fdup(logits, n);
        snprintf(what, sizeof what, "xent dlogits %s (finite differences)", geo);
        check_fd(what, n, lg, o.dl, xent_loss, &xf, 1e-2, 5e-4, 2e-3);
        free(lg);
      }
      free(logits), free(labels), free(dref), free(dscale), free(pref), free(o.dl), free(o.pred), free(oc.dl);
      free(oc.pred);
    }
}

const struct CMUnitTest *prims_loss_tests(size_t *n) {
  static const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_label_count),
      cmocka_unit_test(test_xent),
  };
  *n = sizeof tests / sizeof tests[0];
  return tests;
}
