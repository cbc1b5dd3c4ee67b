/* nnutil.h — helpers for the model tests (test_grad, test_nn_cuda, test_spec): the test's own reading
 * of a (valid) model spec — layer shapes and the flat parameter layout, written from lamina.h, not from
 * the library — so failures can name the tensor and the element ("L1 conv weight[o=2,i=0,kh=1,kw=2]");
 * a float64 forward interpreter and softmax cross-entropy as references; random data; and a per-tensor
 * comparison that prints the worst element.
 *
 * Include after testutil.h. Everything is static inline (one translation unit per test).
 */
#ifndef LAMINA_NNUTIL_H
#define LAMINA_NNUTIL_H

#include "testutil.h"

/* ---- the spec, as the header documents it ---------------------------------------------------- */

#define NU_MAX_LAYERS 32

typedef enum nu_kind { NU_CONV, NU_DENSE, NU_MAXPOOL, NU_RELU, NU_TANH, NU_SIGMOID, NU_FLATTEN } nu_kind;

static const char *const nu_kind_names[] = {"conv", "dense", "maxpool", "relu", "tanh", "sigmoid", "flatten"};

typedef struct nu_layer {
  nu_kind kind;
  int in_c, in_h, in_w;    /* per sample; dense: in_c = all input features, h = w = 1 */
  int out_c, out_h, out_w; /* per sample */
  int k, stride, pad;
  size_t w_off, nw, b_off, nb; /* in the flat parameter buffer: weight then bias */
} nu_layer;

typedef struct nu_net {
  int n;
  nu_layer L[NU_MAX_LAYERS];
  int in_c, in_h, in_w;
  size_t nparams;
} nu_net;

/* The presets as lamina.h spells them. */
static inline const char *nu_preset(const char *spec) {
  if (!strcmp(spec, "cnn")) return "conv 32 3, relu, maxpool 2, conv 64 3, relu, maxpool 2, flatten, dense 10";
  if (!strcmp(spec, "mlp")) return "flatten, dense 256, tanh, dense 10";
  return spec;
}

/* Parses a spec the test knows to be valid; fails the test on anything it cannot read. */
static inline void nu_parse(const char *spec_in, int c, int h, int w, nu_net *net) {
  memset(net, 0, sizeof *net);
  net->in_c = c, net->in_h = h, net->in_w = w;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", nu_preset(spec_in));
  size_t off = 0;
  char *save = NULL;
  for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    char *words[8];
    int nw = 0;
    char *save2 = NULL;
    for (char *t = strtok_r(item, " \t", &save2); t && nw < 8; t = strtok_r(NULL, " \t", &save2)) words[nw++] = t;
    if (nw == 0) fail_msg("nu_parse: empty item in '%s'", spec_in);
    if (net->n == NU_MAX_LAYERS) fail_msg("nu_parse: too many layers in '%s'", spec_in);
    nu_layer l;
    memset(&l, 0, sizeof l);
    l.in_c = c, l.in_h = h, l.in_w = w;
    l.stride = 1;
    if (!strcmp(words[0], "conv")) {
      l.kind = NU_CONV;
      l.out_c = atoi(words[1]);
      l.k = atoi(words[2]);
      for (int j = 3; j + 1 < nw; j += 2) {
        if (!strcmp(words[j], "stride")) l.stride = atoi(words[j + 1]);
        else if (!strcmp(words[j], "pad")) l.pad = atoi(words[j + 1]);
        else fail_msg("nu_parse: '%s' in '%s'", words[j], spec_in);
      }
      l.out_h = (h + 2 * l.pad - l.k) / l.stride + 1;
      l.out_w = (w + 2 * l.pad - l.k) / l.stride + 1;
      l.nw = (size_t)l.out_c * c * l.k * l.k;
      l.nb = (size_t)l.out_c;
    } else if (!strcmp(words[0], "dense")) {
      l.kind = NU_DENSE;
      l.in_c = c * h * w, l.in_h = l.in_w = 1;
      l.out_c = atoi(words[1]), l.out_h = l.out_w = 1;
      l.nw = (size_t)l.out_c * l.in_c;
      l.nb = (size_t)l.out_c;
    } else if (!strcmp(words[0], "maxpool")) {
      l.kind = NU_MAXPOOL;
      l.k = atoi(words[1]);
      l.stride = (nw >= 4 && !strcmp(words[2], "stride")) ? atoi(words[3]) : l.k;
      l.out_c = c;
      l.out_h = (h - l.k) / l.stride + 1;
      l.out_w = (w - l.k) / l.stride + 1;
    } else if (!strcmp(words[0], "flatten")) {
      l.kind = NU_FLATTEN;
      l.out_c = c * h * w, l.out_h = l.out_w = 1;
    } else {
      if (!strcmp(words[0], "relu")) l.kind = NU_RELU;
      else if (!strcmp(words[0], "tanh")) l.kind = NU_TANH;
      else if (!strcmp(words[0], "sigmoid")) l.kind = NU_SIGMOID;
      else fail_msg("nu_parse: unknown layer '%s' in '%s'", words[0], spec_in);
      l.out_c = c, l.out_h = h, l.out_w = w;
    }
    l.w_off = off;
    l.b_off = off + l.nw;
    off += l.nw + l.nb;
    net->L[net->n++] = l;
    c = l.out_c, h = l.out_h, w = l.out_w;
  }
  net->nparams = off;
}

static inline size_t nu_out_size(const nu_layer *l) { return (size_t)l->out_c * l->out_h * l->out_w; }
static inline size_t nu_in_size(const nu_net *n) { return (size_t)n->in_c * n->in_h * n->in_w; }
static inline int nu_classes(const nu_net *n) { return n->L[n->n - 1].out_c * n->L[n->n - 1].out_h * n->L[n->n - 1].out_w; }

/* The spec of layers [0, upto) of net, rewritten as text (used to build prefix models). */
static inline void nu_prefix_spec(const nu_net *net, int upto, char *out, size_t size) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < upto; i++) {
    const nu_layer *l = &net->L[i];
    char item[96];
    switch (l->kind) {
      case NU_CONV: snprintf(item, sizeof item, "conv %d %d stride %d pad %d", l->out_c, l->k, l->stride, l->pad); break;
      case NU_DENSE: snprintf(item, sizeof item, "dense %d", l->out_c); break;
      case NU_MAXPOOL: snprintf(item, sizeof item, "maxpool %d stride %d", l->k, l->stride); break;
      default: snprintf(item, sizeof item, "%s", nu_kind_names[l->kind]); break;
    }
    used += (size_t)snprintf(out + used, size - used, "%s%s", i ? ", " : "", item);
  }
}

/* One parameter tensor: a layer's weight or bias. */
typedef struct nu_tensor {
  char name[48]; /* "L1 conv weight" */
  int layer, is_bias;
  size_t off, n;
} nu_tensor;

static inline int nu_tensors(const nu_net *net, nu_tensor *t, int max) {
  int nt = 0;
  for (int i = 0; i < net->n; i++) {
    const nu_layer *l = &net->L[i];
    if (!l->nw) continue;
    for (int b = 0; b < 2 && nt < max; b++, nt++) {
      snprintf(t[nt].name, sizeof t[nt].name, "L%d %s %s", i + 1, nu_kind_names[l->kind], b ? "bias" : "weight");
      t[nt].layer = i;
      t[nt].is_bias = b;
      t[nt].off = b ? l->b_off : l->w_off;
      t[nt].n = b ? l->nb : l->nw;
    }
  }
  return nt;
}

/* "L1 conv weight[o=2,i=0,kh=1,kw=2]" for flat parameter index p. */
static inline void nu_param_name(const nu_net *net, size_t p, char *out, size_t size) {
  for (int i = 0; i < net->n; i++) {
    const nu_layer *l = &net->L[i];
    if (!l->nw || p < l->w_off || p >= l->b_off + l->nb) continue;
    if (p >= l->b_off) {
      snprintf(out, size, "L%d %s bias[%zu] (flat %zu)", i + 1, nu_kind_names[l->kind], p - l->b_off, p);
    } else if (l->kind == NU_CONV) {
      size_t j = p - l->w_off, kk = (size_t)l->k * l->k, ci = (size_t)l->in_c * kk;
      snprintf(out, size, "L%d conv weight[o=%zu,i=%zu,kh=%zu,kw=%zu] (flat %zu)", i + 1, j / ci, j % ci / kk,
               j % kk / (size_t)l->k, j % (size_t)l->k, p);
    } else {
      size_t j = p - l->w_off;
      snprintf(out, size, "L%d dense weight[o=%zu,i=%zu] (flat %zu)", i + 1, j / (size_t)l->in_c, j % (size_t)l->in_c, p);
    }
    return;
  }
  snprintf(out, size, "flat %zu (beyond the parameters)", p);
}

/* ---- float64 references ---------------------------------------------------------------------- */

/* Forward of one sample through the net in float64, from the float parameters. x: (in_c, in_h, in_w);
 * logits: the last layer's output. */
static inline void nu_forward_ref1(const nu_net *net, const float *P, const float *x, double *logits) {
  size_t maxsz = nu_in_size(net);
  for (int i = 0; i < net->n; i++)
    if (nu_out_size(&net->L[i]) > maxsz) maxsz = nu_out_size(&net->L[i]);
  double *a = malloc(maxsz * sizeof *a), *b = malloc(maxsz * sizeof *b);
  assert_true(a && b);
  for (size_t i = 0; i < nu_in_size(net); i++) a[i] = x[i];
  for (int li = 0; li < net->n; li++) {
    const nu_layer *l = &net->L[li];
    const float *W = P + l->w_off, *bias = P + l->b_off;
    size_t on = nu_out_size(l);
    switch (l->kind) {
      case NU_CONV:
        for (int o = 0; o < l->out_c; o++)
          for (int oh = 0; oh < l->out_h; oh++)
            for (int ow = 0; ow < l->out_w; ow++) {
              double s = bias[o];
              for (int c = 0; c < l->in_c; c++)
                for (int ki = 0; ki < l->k; ki++)
                  for (int kj = 0; kj < l->k; kj++) {
                    int ih = oh * l->stride - l->pad + ki, iw = ow * l->stride - l->pad + kj;
                    if (ih < 0 || ih >= l->in_h || iw < 0 || iw >= l->in_w) continue;
                    s += (double)W[((size_t)(o * l->in_c + c) * l->k + ki) * l->k + kj] *
                         a[((size_t)c * l->in_h + ih) * l->in_w + iw];
                  }
              b[((size_t)o * l->out_h + oh) * l->out_w + ow] = s;
            }
        break;
      case NU_DENSE:
        for (int o = 0; o < l->out_c; o++) {
          double s = bias[o];
          for (int i = 0; i < l->in_c; i++) s += (double)W[(size_t)o * l->in_c + i] * a[i];
          b[o] = s;
        }
        break;
      case NU_MAXPOOL:
        for (int c = 0; c < l->out_c; c++)
          for (int oh = 0; oh < l->out_h; oh++)
            for (int ow = 0; ow < l->out_w; ow++) {
              double m = -INFINITY;
              for (int ki = 0; ki < l->k; ki++)
                for (int kj = 0; kj < l->k; kj++) {
                  double v = a[((size_t)c * l->in_h + oh * l->stride + ki) * l->in_w + ow * l->stride + kj];
                  if (v > m) m = v;
                }
              b[((size_t)c * l->out_h + oh) * l->out_w + ow] = m;
            }
        break;
      case NU_RELU: for (size_t i = 0; i < on; i++) b[i] = a[i] > 0 ? a[i] : 0.0; break;
      case NU_TANH: for (size_t i = 0; i < on; i++) b[i] = tanh(a[i]); break;
      case NU_SIGMOID: for (size_t i = 0; i < on; i++) b[i] = 1.0 / (1.0 + exp(-a[i])); break;
      case NU_FLATTEN: for (size_t i = 0; i < on; i++) b[i] = a[i]; break;
    }
    double *t = a;
    a = b;
    b = t;
  }
  for (int i = 0; i < nu_classes(net); i++) logits[i] = a[i];
  free(a);
  free(b);
}

/* Softmax cross-entropy of one sample in float64 (log-sum-exp with the max taken out). */
static inline double nu_xent_ref1(int C, const double *logits, int label) {
  double mx = logits[0], s = 0.0;
  for (int c = 1; c < C; c++)
    if (logits[c] > mx) mx = logits[c];
  for (int c = 0; c < C; c++) s += exp(logits[c] - mx);
  return mx + log(s) - logits[label];
}

/* ---- data ------------------------------------------------------------------------------------ */

static inline void nu_fill_normal(tu_rng *r, float *x, size_t n, double sd) {
  for (size_t i = 0; i < n; i++) x[i] = (float)tu_normal(r, 0.0, sd);
}

static inline void nu_fill_labels(tu_rng *r, uint8_t *y, int n, int classes) {
  for (int i = 0; i < n; i++) y[i] = (uint8_t)(tu_next(r) % (uint64_t)classes);
}

/* ---- comparison ------------------------------------------------------------------------------ */

static inline double nu_max_abs(const float *a, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++)
    if (fabs((double)a[i]) > m) m = fabs((double)a[i]);
  return m;
}

/* Compares got[0..n) with want[0..n) with the absolute tolerance tol (the caller derives it, e.g. from
 * the tensor's max abs). NaN/inf in got fails. Returns the number of elements over tol, prints the
 * first few and the worst; *worst_err gets the max error. `name_of` (may be NULL) names an element. */
typedef void (*nu_name_fn)(const void *ctx, size_t i, char *out, size_t size);

static inline size_t nu_compare(const char *what, size_t n, const float *got, const float *want, double tol,
                                nu_name_fn name_of, const void *name_ctx, double *worst_err) {
  size_t bad = 0, worst = 0;
  double maxe = 0.0;
  char nm[160];
  for (size_t i = 0; i < n; i++) {
    double e = isfinite(got[i]) ? fabs((double)got[i] - (double)want[i]) : INFINITY;
    if (!(e <= maxe)) maxe = e, worst = i; /* also takes a NaN error */
    if (e > tol) {
      if (bad < 3) {
        if (name_of) name_of(name_ctx, i, nm, sizeof nm);
        else snprintf(nm, sizeof nm, "[%zu]", i);
        print_error("%s: %s: got %.9g, want %.9g, err %.3g > tol %.3g\n", what, nm, got[i], want[i], e, tol);
      }
      bad++;
    }
  }
  if (bad) {
    if (name_of) name_of(name_ctx, worst, nm, sizeof nm);
    else snprintf(nm, sizeof nm, "[%zu]", worst);
    print_error("%s: %zu of %zu elements over tol %.3g; worst %s: got %.9g, want %.9g (err %.3g)\n", what, bad, n,
                tol, nm, got[worst], want[worst], maxe);
  }
  if (worst_err) *worst_err = maxe;
  return bad;
}

#endif /* LAMINA_NNUTIL_H */
