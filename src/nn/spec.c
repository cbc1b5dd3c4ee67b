/* spec.c — models in one line of text: "conv 32 3, relu, maxpool 2, ..., dense 10", or a preset. Parses
 * the words, checks every shape, and on any error quotes the word that is wrong with its position and
 * a caret under it. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

#define MAX_LAYERS 64
#define MAX_WORDS 512

static const struct {
  const char *name, *spec;
} presets[] = {
    {"cnn", "conv 32 3, relu, maxpool 2, conv 64 3, relu, maxpool 2, flatten, dense 10"},
    {"mlp", "flatten, dense 256, tanh, dense 10"},
};

typedef struct word {
  const char *s; /* into the spec */
  int len, pos;  /* pos: offset in the spec */
  int comma;     /* a comma follows (the item ends) */
} word;

/* "at word 3 ('x3', column 9)" plus the spec with a caret under the word. */
static lam_status spec_error(const char *spec, const word *w, int wi, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static lam_status spec_error(const char *spec, const word *w, int wi, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  char caret[1100];
  int pos = w ? w->pos : (int)strlen(spec), len = w ? w->len : 1;
  if (pos > 1000) pos = 1000;
  memset(caret, ' ', (size_t)pos);
  memset(caret + pos, '^', (size_t)(len < 60 ? len : 60));
  caret[pos + (len < 60 ? len : 60)] = '\0';
  if (w)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "bad model spec at word %d ('%.*s', column %d): %s\n  %s\n  %s", wi + 1, w->len,
                    w->s, w->pos + 1, what, spec, caret);
  return LAM_FAIL(LAM_ERR_INVALID_ARG, "bad model spec at its end: %s\n  %s\n  %s", what, spec, caret);
}


static int word_is(const word *w, const char *s) { return (int)strlen(s) == w->len && !strncmp(w->s, s, (size_t)w->len); }

static int word_int(const word *w, int lo, int hi, int *out) {
  char buf[32];
  if (w->len >= (int)sizeof buf) return 0;
  memcpy(buf, w->s, (size_t)w->len);
  buf[w->len] = '\0';
  char *end;
  long v = strtol(buf, &end, 10);
  if (*end || end == buf || v < lo || v > hi) return 0;
  *out = (int)v;
  return 1;
}

static int split_words(const char *spec, word *w, int max) {
  int n = 0;
  for (const char *p = spec; *p;) {
    if (isspace((unsigned char)*p)) { p++; continue; }
    if (*p == ',') {
      if (n > 0) w[n - 1].comma = 1;
      p++;
      continue;
    }
    const char *s = p;
    while (*p && *p != ',' && !isspace((unsigned char)*p)) p++;
    if (n == max) return -1;
    w[n++] = (word){s, (int)(p - s), (int)(s - spec), 0};
  }
  return n;
}

lam_status nn_parse_spec(const char *spec_in, int in_c, int in_h, int in_w, layer **out, int *nlayers, char *expanded,
                         size_t expanded_size) {
  if (!spec_in) return LAM_FAIL(LAM_ERR_INVALID_ARG, "model spec is NULL");
  if (in_c < 1 || in_h < 1 || in_w < 1 || in_c > 65536 || in_h > 65536 || in_w > 65536)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "model input shape (%d, %d, %d) is not a valid (channels, height, width)", in_c,
                    in_h, in_w);
  const char *spec = spec_in;
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (!strcmp(spec_in, presets[i].name)) spec = presets[i].spec;
  if (strlen(spec) >= expanded_size)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "model spec is too long (%zu characters, at most %zu)", strlen(spec), expanded_size - 1);
  snprintf(expanded, expanded_size, "%s", spec);

  word w[MAX_WORDS];
  int nw = split_words(spec, w, MAX_WORDS);
  if (nw < 0) return LAM_FAIL(LAM_ERR_INVALID_ARG, "model spec has more than %d words", MAX_WORDS);
  if (nw == 0)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "model spec is empty: give layers such as 'conv 32 3, relu, maxpool 2, "
                                         "flatten, dense 10', or a preset (cnn, mlp)");
  layer *L = calloc(MAX_LAYERS, sizeof *L);
  if (!L) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "no host memory for the layer table");
  int nl = 0, c = in_c, h = in_h, wd = in_w, flat = 0;
  size_t off = 0;
  lam_status s = LAM_OK;
  for (int i = 0; i < nw && s == LAM_OK;) {
    int first = i;
    /* The words of this item: up to and including the one followed by a comma. */
    int end = i;
    while (end < nw - 1 && !w[end].comma) end++;
    int nargs = end - first; /* words after the layer name */
    if (nl == MAX_LAYERS) {
      s = spec_error(spec, &w[first], first, "more than %d layers", MAX_LAYERS);
      break;
    }
    layer l = {0};
    l.in_c = c, l.in_h = h, l.in_w = wd;
    const word *name = &w[first];
    if (word_is(name, "conv")) {
      if (flat) { s = spec_error(spec, name, first, "conv needs an image input, but an earlier 'flatten' or 'dense' made it flat"); break; }
      l.kind = L_CONV;
      l.stride = 1;
      if (nargs < 2) { s = spec_error(spec, name, first, "conv takes OUT K [stride S] [pad P], e.g. 'conv 32 3'"); break; }
      if (!word_int(&w[first + 1], 1, 65536, &l.out_c)) { s = spec_error(spec, &w[first + 1], first + 1, "conv's OUT must be a whole number of channels from 1 to 65536"); break; }
      if (!word_int(&w[first + 2], 1, 64, &l.k)) { s = spec_error(spec, &w[first + 2], first + 2, "conv's K (kernel size) must be a whole number from 1 to 64"); break; }
      for (int j = first + 3; j <= end && s == LAM_OK; j += 2) {
        int *dst = word_is(&w[j], "stride") ? &l.stride : word_is(&w[j], "pad") ? &l.pad : NULL;
        if (!dst) { s = spec_error(spec, &w[j], j, "conv options are 'stride S' and 'pad P'"); break; }
        if (j + 1 > end)
          s = spec_error(spec, &w[j], j, "'%.*s' needs a whole number after it (stride 1..64, pad 0..64)", w[j].len, w[j].s);
        else if (!word_int(&w[j + 1], word_is(&w[j], "pad") ? 0 : 1, 64, dst))
          s = spec_error(spec, &w[j + 1], j + 1, "%s must be a whole number from %d to 64", word_is(&w[j], "pad") ? "pad" : "stride",
                         word_is(&w[j], "pad") ? 0 : 1);
      }
      if (s != LAM_OK) break;
      l.out_h = (h + 2 * l.pad - l.k) / l.stride + 1;
      l.out_w = (wd + 2 * l.pad - l.k) / l.stride + 1;
      if (h + 2 * l.pad < l.k || wd + 2 * l.pad < l.k) {
        s = spec_error(spec, &w[first + 2], first + 2, "conv kernel %d is larger than its %dx%d input (with padding %d)", l.k,
                       h, wd, l.pad);
        break;
      }
      l.nw = (size_t)l.out_c * c * l.k * l.k;
      l.nb = (size_t)l.out_c;
    } else if (word_is(name, "dense") || word_is(name, "linear")) {
      l.kind = L_DENSE;
      if (!flat && (h > 1 || wd > 1)) {
        s = spec_error(spec, name, first, "dense needs a flat input, but it gets %dx%dx%d: put 'flatten' before it", c, h, wd);
        break;
      }
      if (nargs > 1) {
        s = spec_error(spec, &w[first + 2], first + 2, "dense takes one whole number, its outputs, e.g. 'dense 10' "
                                                       "(missing a comma?)");
        break;
      }
      if (nargs != 1 || !word_int(&w[first + 1], 1, 1 << 24, &l.out_c)) {
        s = spec_error(spec, nargs >= 1 ? &w[first + 1] : name, nargs >= 1 ? first + 1 : first,
                       "dense takes one whole number, its outputs, e.g. 'dense 10'");
        break;
      }
      l.in_c = c * h * wd, l.in_h = l.in_w = 1;
      l.out_h = l.out_w = 1;
      l.nw = (size_t)l.out_c * l.in_c;
      l.nb = (size_t)l.out_c;
      flat = 1;
    } else if (word_is(name, "maxpool")) {
      if (flat) { s = spec_error(spec, name, first, "maxpool needs an image input, but it is flat here"); break; }
      l.kind = L_MAXPOOL;
      if (nargs < 1 || !word_int(&w[first + 1], 1, 64, &l.k)) {
        s = spec_error(spec, nargs >= 1 ? &w[first + 1] : name, nargs >= 1 ? first + 1 : first,
                       "maxpool takes K [stride S], e.g. 'maxpool 2'");
        break;
      }
      l.stride = l.k;
      if (nargs == 3 && word_is(&w[first + 2], "stride")) {
        if (!word_int(&w[first + 3], 1, 64, &l.stride)) { s = spec_error(spec, &w[first + 3], first + 3, "stride must be a whole number from 1 to 64"); break; }
      } else if (nargs != 1) {
        s = spec_error(spec, &w[first + 2], first + 2, "maxpool takes K [stride S]");
        break;
      }
      if (l.k > h || l.k > wd) {
        s = spec_error(spec, &w[first + 1], first + 1, "maxpool window %d is larger than its %dx%d input", l.k, h, wd);
        break;
      }
      l.out_c = c;
      l.out_h = (h - l.k) / l.stride + 1;
      l.out_w = (wd - l.k) / l.stride + 1;
    } else if (word_is(name, "relu") || word_is(name, "tanh") || word_is(name, "sigmoid") || word_is(name, "flatten")) {
      if (nargs) { s = spec_error(spec, &w[first + 1], first + 1, "'%.*s' takes no arguments (missing a comma?)", name->len, name->s); break; }
      l.kind = word_is(name, "relu") ? L_RELU : word_is(name, "tanh") ? L_TANH : word_is(name, "sigmoid") ? L_SIGMOID : L_FLATTEN;
      if (l.kind == L_FLATTEN) {
        l.out_c = c * h * wd, l.out_h = l.out_w = 1;
        flat = 1;
      } else {
        l.out_c = c, l.out_h = h, l.out_w = wd;
      }
    } else {
      s = spec_error(spec, name, first, "unknown layer; layers are conv, dense, maxpool, relu, tanh, sigmoid, flatten "
                                         "(presets: cnn, mlp)");
      break;
    }
    l.w_off = off;
    l.b_off = off + l.nw;
    off += l.nw + l.nb;
    L[nl++] = l;
    c = l.out_c, h = l.out_h, wd = l.out_w;
    i = end + 1;
  }
  if (s == LAM_OK && L[nl - 1].kind != L_DENSE && !(L[nl - 1].out_h == 1 && L[nl - 1].out_w == 1))
    s = spec_error(spec, NULL, nw, "the last layer gives %dx%dx%d per sample; end with 'flatten, dense CLASSES' so it "
                                   "gives one score per class", c, h, wd);
  if (s != LAM_OK) {
    free(L);
    return s;
  }
  *out = L;
  *nlayers = nl;
  return LAM_OK;
}
