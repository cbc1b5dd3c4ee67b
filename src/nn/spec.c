/* spec.c — models in text: "conv 32 3, relu, maxpool 2, ..., dense 10", a preset, or a graph with
 * labels ("e1: relu", "add @e1", "concat @e1"). Splits the words, hands each node's words to its op's
 * parse (src/nn/ops/), which checks them and the shapes; any error quotes the word that is wrong with its
 * position and a caret under it. */
#include <ctype.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn.h"

#define MAX_WORDS 2048

static const struct {
  const char *name, *spec;
} presets[] = {
    {"cnn", "conv 32 3, relu, maxpool 2, conv 64 3, relu, maxpool 2, flatten, dense 10"},
    {"mlp", "flatten, dense 256, tanh, dense 10"},
};

static const nn_op *const ops[] = {&nn_op_conv,    &nn_op_convt,    &nn_op_dense,  &nn_op_maxpool,  &nn_op_avgpool,
                                   &nn_op_gap,     &nn_op_upsample, &nn_op_relu,   &nn_op_tanh,     &nn_op_sigmoid,
                                   &nn_op_gelu,    &nn_op_leakyrelu, &nn_op_flatten, &nn_op_bn,     &nn_op_groupnorm,
                                   &nn_op_layernorm, &nn_op_dropout,
                                   &nn_op_add,     &nn_op_concat,   &nn_op_tpool,  &nn_op_tcat};

const nn_op *nn_op_at(int i) { return i >= 0 && (size_t)i < sizeof ops / sizeof ops[0] ? ops[i] : NULL; }

/* The layers' grammar, a line an op from ops[] ("  USAGE   ABOUT", ABOUT wrapped under itself), made once. */
static char layers_text[4096];
static void layers_make(void) {
  size_t used = 0, width = 0;
  for (int i = 0; nn_op_at(i); i++) width = strlen(nn_op_at(i)->usage) > width ? strlen(nn_op_at(i)->usage) : width;
  for (int i = 0; nn_op_at(i) && used < sizeof layers_text; i++) {
    const nn_op *op = nn_op_at(i);
    used += (size_t)snprintf(layers_text + used, sizeof layers_text - used, "  %-*s  ", (int)width, op->usage);
    /* the description in lines of at most 110 columns, each after the first under the first */
    const char *a = op->about;
    while (*a && used < sizeof layers_text) {
      size_t room = 110 - 4 - width, n = strlen(a);
      if (n > room) {
        n = room;
        while (n > 0 && a[n] != ' ') n--;
        if (n == 0) n = room;
      }
      used += (size_t)snprintf(layers_text + used, sizeof layers_text - used, "%.*s\n", (int)n, a);
      a += n;
      while (*a == ' ') a++;
      if (*a && used < sizeof layers_text)
        used += (size_t)snprintf(layers_text + used, sizeof layers_text - used, "  %-*s  ", (int)width, "");
    }
  }
}

const char *lam_model_layers(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, layers_make);
  return layers_text;
}

const nn_op *nn_op_find(const char *name, int len) {
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
    if ((int)strlen(ops[i]->name) == len && !strncmp(ops[i]->name, name, (size_t)len)) return ops[i];
  if (len == 6 && !strncmp(name, "linear", 6)) return &nn_op_dense;
  return NULL;
}

/* "at word 3 ('x3', column 9)" plus the spec with a caret under the word; w NULL: at the spec's end. */
static lam_status spec_error_at(const char *spec, const nn_word *w, int wi, const char *what) {
  char caret[1100];
  int pos = w ? w->pos : (int)strlen(spec), len = w ? w->len : 1;
  if (pos > 1000) pos = 1000;
  if (len > 60) len = 60;
  memset(caret, ' ', (size_t)pos);
  memset(caret + pos, '^', (size_t)len);
  caret[pos + len] = '\0';
  if (w)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "bad model spec at word %d ('%.*s', column %d): %s\n  %s\n  %s", wi + 1, w->len,
                    w->s, w->pos + 1, what, spec, caret);
  return LAM_FAIL(LAM_ERR_INVALID_ARG, "bad model spec at its end: %s\n  %s\n  %s", what, spec, caret);
}

lam_status nn_spec_error(const nn_parse *p, int wi, const char *fmt, ...) {
  char what[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  int at = p->first + (wi > p->nargs ? p->nargs : wi);
  return spec_error_at(p->spec, &p->w[at], at, what);
}

int nn_word_is(const nn_parse *p, int wi, const char *s) {
  if (wi > p->nargs) return 0;
  const nn_word *w = &p->w[p->first + wi];
  return (int)strlen(s) == w->len && !strncmp(w->s, s, (size_t)w->len);
}

static int word_text(const nn_parse *p, int wi, char *buf, size_t size) {
  const nn_word *w = &p->w[p->first + wi];
  if (wi > p->nargs || w->len >= (int)size) return 0;
  memcpy(buf, w->s, (size_t)w->len);
  buf[w->len] = '\0';
  return 1;
}

lam_status nn_word_int(const nn_parse *p, int wi, int lo, int hi, const char *what, int *out) {
  char buf[32], *end;
  if (wi > p->nargs) return nn_spec_error(p, p->nargs, "%s is missing after it", what);
  long v = 0;
  int ok = word_text(p, wi, buf, sizeof buf);
  if (ok) v = strtol(buf, &end, 10);
  if (!ok || *end || end == buf || v < lo || v > hi)
    return nn_spec_error(p, wi, "%s must be a whole number from %d to %d", what, lo, hi);
  *out = (int)v;
  return LAM_OK;
}

lam_status nn_word_float(const nn_parse *p, int wi, double lo, double hi, const char *what, float *out) {
  char buf[32], *end;
  if (wi > p->nargs) return nn_spec_error(p, p->nargs, "%s is missing after it", what);
  double v = 0;
  int ok = word_text(p, wi, buf, sizeof buf);
  if (ok) v = strtod(buf, &end);
  if (!ok || *end || end == buf || !(v >= lo && v <= hi))
    return nn_spec_error(p, wi, "%s must be a number from %g to %g", what, lo, hi);
  *out = (float)v;
  return LAM_OK;
}

lam_status nn_need_image(const nn_parse *p, const lam_model *m, const nn_node *n) {
  const nn_tensor *t = &m->tensor[n->in[0]];
  if (t->flat)
    return nn_spec_error(p, 0, "%s needs an image input, but an earlier 'flatten' or 'dense' made it flat here",
                         n->op->name);
  return LAM_OK;
}

lam_status nn_word_ref(const nn_parse *p, const lam_model *m, int wi, int *tensor) {
  if (wi > p->nargs)
    return nn_spec_error(p, 0, "'%.*s' takes @NAME, the label of an earlier layer's output", p->w[p->first].len,
                         p->w[p->first].s);
  const nn_word *w = &p->w[p->first + wi];
  if (w->len < 2 || w->s[0] != '@')
    return nn_spec_error(p, wi, "expected @NAME, the label of an earlier layer's output (label a layer as 'NAME: layer')");
  for (int t = 0; t < m->ntensors; t++)
    if ((int)strlen(m->tensor[t].name) == w->len - 1 && !strncmp(m->tensor[t].name, w->s + 1, (size_t)w->len - 1)) {
      *tensor = t;
      return LAM_OK;
    }
  return nn_spec_error(p, wi, "no earlier layer is labelled '%.*s' (labels are 'NAME:' before a layer; 'input' is the "
                              "model's input)", w->len - 1, w->s + 1);
}

/* Words split at spaces and commas; 'NAME:' (or 'NAME:layer') is a label. */
static int split_words(const char *spec, nn_word *w, int max) {
  int n = 0;
  for (const char *p = spec; *p;) {
    if (isspace((unsigned char)*p)) { p++; continue; }
    if (*p == ',') {
      if (n > 0) w[n - 1].comma = 1;
      p++;
      continue;
    }
    const char *s = p;
    while (*p && *p != ',' && *p != ':' && !isspace((unsigned char)*p)) p++;
    if (n == max) return -1;
    w[n] = (nn_word){s, (int)(p - s), (int)(s - spec), 0, 0};
    if (*p == ':') {
      w[n].label = 1;
      p++;
    }
    n++;
  }
  return n;
}

static int valid_label(const nn_word *w) {
  if (w->len < 1 || w->len >= NN_NAME_LEN || !(isalpha((unsigned char)w->s[0]) || w->s[0] == '_')) return 0;
  for (int i = 0; i < w->len; i++)
    if (!isalnum((unsigned char)w->s[i]) && w->s[i] != '_') return 0;
  return 1;
}

lam_status nn_parse_spec(lam_model *m, const char *spec_in) {
  if (!spec_in) return LAM_FAIL(LAM_ERR_INVALID_ARG, "model spec is NULL");
  if (m->in_t < 1) m->in_t = 1;
  if (m->in_c < 1 || m->in_h < 1 || m->in_w < 1 || m->in_c > LAM_NORM_MAX_CHANNELS || m->in_h > 65536 ||
      m->in_w > 65536)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "model input shape (%d, %d, %d) is not a valid (channels, height, width): "
                    "channels 1 to %d, height and width 1 to 65536", m->in_c, m->in_h, m->in_w, LAM_NORM_MAX_CHANNELS);
  if ((uint64_t)m->in_c * m->in_h * m->in_w > NN_MAX_SAMPLE)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "model input shape (%d, %d, %d) is %llu values per sample, more than lamina's "
                    "limit of %llu", m->in_c, m->in_h, m->in_w,
                    (unsigned long long)((uint64_t)m->in_c * m->in_h * m->in_w), (unsigned long long)NN_MAX_SAMPLE);
  const char *spec = spec_in;
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (!strcmp(spec_in, presets[i].name)) spec = presets[i].spec;
  if (strlen(spec) >= sizeof m->spec)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "model spec is too long (%zu characters, at most %zu)", strlen(spec),
                    sizeof m->spec - 1);
  snprintf(m->spec, sizeof m->spec, "%s", spec);
  spec = m->spec;

  static _Thread_local nn_word w[MAX_WORDS];
  int nw = split_words(spec, w, MAX_WORDS);
  if (nw < 0) return LAM_FAIL(LAM_ERR_INVALID_ARG, "model spec has more than %d words", MAX_WORDS);
  if (nw == 0)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "model spec is empty: give layers such as 'conv 32 3, relu, maxpool 2, "
                                         "flatten, dense 10', or a preset (cnn, mlp)");
  m->ntensors = 1;
  m->tensor[0] = (nn_tensor){.name = "input", .c = m->in_c, .h = m->in_h, .w = m->in_w, .t = m->in_t, .producer = -1,
                             .view_of = -1};
  m->nnodes = 0;
  int cur = 0;
  size_t off = 0, soff = 0;
  for (int i = 0; i < nw;) {
    const nn_word *label = NULL;
    if (w[i].label) {
      label = &w[i];
      if (!valid_label(label))
        return spec_error_at(spec, label, i, "a label is a name of letters, digits and '_' (at most 31, not starting "
                                             "with a digit) followed by ':'");
      for (int t = 0; t < m->ntensors; t++)
        if ((int)strlen(m->tensor[t].name) == label->len && !strncmp(m->tensor[t].name, label->s, (size_t)label->len))
          return spec_error_at(spec, label, i, "this label is already used ('input' is the model's input)");
      if (label->comma || i + 1 == nw) return spec_error_at(spec, label, i, "a label must be followed by a layer");
      i++;
    }
    int end = i;
    while (end < nw - 1 && !w[end].comma) end++;
    nn_parse p = {spec, w, i, end - i};
    for (int j = i + 1; j <= end; j++)
      if (w[j].label) return spec_error_at(spec, &w[j], j, "a label goes before a layer's name (missing a comma?)");
    if (m->nnodes == NN_MAX_NODES) return spec_error_at(spec, &w[i], i, "too many layers (at most 256)");
    const nn_op *op = nn_op_find(w[i].s, w[i].len);
    if (!op) {
      char what[400];
      size_t used = (size_t)snprintf(what, sizeof what, "unknown layer; layers are");
      for (int k = 0; nn_op_at(k) && used < sizeof what; k++)
        used += (size_t)snprintf(what + used, sizeof what - used, "%s %s", k ? "," : "", nn_op_at(k)->name);
      if (used < sizeof what)
        snprintf(what + used, sizeof what - used, " (presets: cnn, mlp); see 'lamina model --help'");
      return spec_error_at(spec, &w[i], i, what);
    }
    nn_node *n = &m->node[m->nnodes];
    *n = (nn_node){.op = op, .in = {cur, -1}, .nin = 1, .out = m->ntensors, .word = i, .tail = -1};
    nn_tensor *t = &m->tensor[m->ntensors];
    *t = (nn_tensor){.t = m->tensor[cur].t, .producer = m->nnodes, .view_of = -1}; /* tpool, tcat set t = 1 */
    m->ntensors++; /* before parse: add/concat look labels up among the earlier tensors only */
    m->nnodes++;
    lam_status s = op->parse(&p, m, n);
    if (s != LAM_OK) return s;
    /* sizes in 64 bits: a sample's values must fit the kernels' 32-bit indexing, and the parameters the
     * 64-bit offsets (the memory cap then says whether they fit the machine) */
    uint64_t vals = (uint64_t)(t->c > 0 ? t->c : 0) * (uint64_t)(t->h > 0 ? t->h : 0) * (uint64_t)(t->w > 0 ? t->w : 0);
    if (vals == 0 || vals > NN_MAX_SAMPLE)
      return nn_spec_error(&p, 0, "this layer's output is %dx%dx%d = %llu values per sample; lamina takes 1 to "
                           "%llu", t->c, t->h, t->w, (unsigned long long)vals, (unsigned long long)NN_MAX_SAMPLE);
    if (n->nw > NN_MAX_PARAMS || n->nb > NN_MAX_PARAMS || off + n->nw + n->nb > NN_MAX_PARAMS)
      return nn_spec_error(&p, 0, "the model has more than %llu parameters by this layer (%zu in it)",
                           (unsigned long long)NN_MAX_PARAMS, n->nw + n->nb);
    if (label) snprintf(t->name, sizeof t->name, "%.*s", label->len, label->s);
    n->w_off = off;
    n->b_off = off + n->nw;
    off += n->nw + n->nb;
    n->s_off = soff;
    soff += n->ns;
    cur = n->out;
    i = end + 1;
  }
  if (m->tensor[cur].t > 1) {
    nn_parse p = {spec, w, m->node[m->nnodes - 1].word, 0};
    return nn_spec_error(&p, 0, "the model's input is clips of %d frames, so its output must be one per clip: put "
                         "'tpool mean' (or 'tpool max') after the per-frame layers, or 'tcat' (the frames as channels)",
                         m->tensor[cur].t);
  }
  m->output = cur;
  m->nparams = off;
  m->nstate = soff;
  return LAM_OK;
}
