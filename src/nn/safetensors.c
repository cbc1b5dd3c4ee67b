/* safetensors.c — a model's weights in and out of the safetensors format (huggingface/safetensors), under
 * the names and in the layouts PyTorch gives the same layers, so that weights move between lamina and torch.
 *
 * The format: u64 little-endian N, N bytes of a JSON header, then the data. The header maps each tensor's
 * name to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]} (bytes from the start of the data,
 * C order, little-endian) and may hold "__metadata__", an object of strings.
 *
 * Names: layer i of the spec — every layer counts, from 0, relu, flatten, add and concat included; a label
 * 'NAME:' is not a layer — gives
 *   conv, convt, dense   i.weight, i.bias (none with nobias)
 *   bn                   i.weight, i.bias, i.running_mean, i.running_var, i.num_batches_tracked
 * For a plain stack these are the names nn.Sequential gives the same layers; for a graph, those of a module
 * that registers its layers as submodules "0", "1", ... in spec order (add_module(str(i), layer)). The
 * layouts are PyTorch's, and lamina's flat buffer holds them as they are: conv (out, in, k, k), convt
 * (in, out, k, k) as ConvTranspose2d, dense (out, in) over the input flattened in C, H, W order
 * (nn.Flatten of NCHW), bn (C). Nothing is transposed on the way.
 *
 * Export writes every tensor as F32 except num_batches_tracked, an I64 scalar 0 (lamina counts no batches;
 * with a momentum set, as lamina's bn always has, PyTorch does not use it), in layer order with no gaps,
 * the header padded with spaces to a multiple of 8 bytes as safetensors does, and __metadata__ {"format":
 * "pt", "lamina.spec", "lamina.input": "CxHxW", "lamina.normalize": "M1,../S1,.."}; written atomically.
 *
 * Import reads the header and checks the whole of it before it changes the model: the header length (2 to
 * 100 MB, safetensors' own limit, and within the file), valid JSON without duplicate names, each entry's
 * dtype, shape and data_offsets (in the file, the size the dtype and shape make, not overlapping another
 * tensor), that every tensor the model has is there and no other (num_batches_tracked may be missing and
 * is not read), dtypes lamina converts (F32; F64, F16 and BF16 are converted to float) and shapes equal to
 * the model's; then it reads the data of each tensor into host arrays, and only then sets the parameters,
 * the running statistics and, where the metadata has "lamina.normalize", the normalization. A damaged file
 * is LAM_ERR_IO; a file that does not fit the model is LAM_ERR_INVALID_ARG naming the tensor, what was
 * expected, what was found and the spec's layer.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "../math/half.h"
#include "nn.h"

#define ST_MAX_HEADER 100000000ull /* safetensors refuses longer headers (HeaderTooLarge) */
#define ST_MAX_DIMS 8
#define ST_LIST 6                  /* names listed in one message before "and N more" */

/* ---- the tensors a model has ----------------------------------------------------------------------- */

enum { ST_PARAM, ST_STATE, ST_COUNTER }; /* in m->params, in m->state, num_batches_tracked (not stored) */
typedef struct st_want {
  char name[40];
  int node, ndim, where;
  int64_t shape[4];
  size_t off, count; /* into the flat buffer */
} st_want;

static void want_add(st_want *w, int *n, int node, const char *what, int where, size_t off, int ndim,
                     const int64_t *shape) {
  st_want *t = &w[(*n)++];
  snprintf(t->name, sizeof t->name, "%d.%s", node, what);
  t->node = node, t->where = where, t->off = off, t->ndim = ndim, t->count = 1;
  for (int d = 0; d < ndim; d++) t->shape[d] = shape[d], t->count *= (size_t)shape[d];
}

/* Every tensor of m in layer order (*out malloc'd, *count of them). */
static lam_status st_wanted(const lam_model *m, st_want **out, int *count) {
  st_want *w = calloc((size_t)5 * m->nnodes + 1, sizeof *w);
  if (!w) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "safetensors: no host memory for the list of tensors");
  int n = 0;
  for (int i = 0; i < m->nnodes; i++) {
    const nn_node *nd = &m->node[i];
    if (!nd->nw && !nd->nb && !nd->ns) continue;
    int64_t ws[4] = {0}, c = m->tensor[nd->in[0]].c;
    const int wd = nd->op->torch_weight ? nd->op->torch_weight(m, nd, ws) : 0, stats = nd->op->torch_stats;
    int64_t prod = 1;
    for (int d = 0; d < wd; d++) prod *= ws[d];
    if (!wd || (size_t)prod != nd->nw || (stats && (nd->ns != 2 * (size_t)c || nd->nb != (size_t)c))) {
      free(w);
      return LAM_FAIL(LAM_ERR_UNSUPPORTED, "safetensors: layer %d (%s) has parameters that lamina knows no PyTorch "
                      "layout for: this lamina cannot save or load it in safetensors files", i, nd->op->name);
    }
    want_add(w, &n, i, "weight", ST_PARAM, nd->w_off, wd, ws);
    if (nd->nb) want_add(w, &n, i, "bias", ST_PARAM, nd->b_off, 1, (int64_t[]){(int64_t)nd->nb});
    if (stats) {
      want_add(w, &n, i, "running_mean", ST_STATE, nd->s_off, 1, &c);
      want_add(w, &n, i, "running_var", ST_STATE, nd->s_off + (size_t)c, 1, &c);
      want_add(w, &n, i, "num_batches_tracked", ST_COUNTER, 0, 0, NULL);
    }
  }
  *out = w;
  *count = n;
  return LAM_OK;
}

/* Layer i's text in the spec (its i-th comma-separated item, label included), for messages. */
static void layer_text(const lam_model *m, int i, char *buf, size_t size) {
  int k = 0;
  for (const char *p = m->spec; *p;) {
    const char *e = strchr(p, ',');
    if (!e) e = p + strlen(p);
    const char *a = p, *b = e;
    while (a < b && isspace((unsigned char)*a)) a++;
    while (b > a && isspace((unsigned char)b[-1])) b--;
    if (a < b && k++ == i) {
      snprintf(buf, size, "%.*s", (int)(b - a > 60 ? 60 : b - a), a);
      return;
    }
    p = *e ? e + 1 : e;
  }
  snprintf(buf, size, "?");
}

static void shape_str(const int64_t *s, int nd, char *buf, size_t size) {
  size_t u = (size_t)snprintf(buf, size, "(");
  for (int d = 0; d < nd && u < size; d++) u += (size_t)snprintf(buf + u, size - u, "%s%lld", d ? ", " : "", (long long)s[d]);
  if (u < size) snprintf(buf + u, size - u, ")");
}

/* A name from the file as it can be printed: printable ASCII, at most 48 characters. */
static const char *shown(const char *s, char *buf, size_t size) {
  size_t i = 0;
  for (; s[i] && i + 4 < size && i < 48; i++) buf[i] = isprint((unsigned char)s[i]) ? s[i] : '?';
  if (s[i]) buf[i++] = '.', buf[i++] = '.';
  buf[i] = '\0';
  return buf;
}

lam_status lam_model_safetensors_names(const lam_model *m, char *buf, size_t size, size_t *needed) {
  LAM_CHECK_ARG(m && (buf || !size), "lam_model_safetensors_names: %s is NULL", m ? "buf" : "model");
  st_want *w;
  int n;
  LAM_TRY(st_wanted(m, &w, &n));
  size_t used = 0;
  if (size) buf[0] = '\0';
  for (int j = 0; j < n; j++) {
    char shp[96], text[64];
    shape_str(w[j].shape, w[j].ndim, shp, sizeof shp);
    layer_text(m, w[j].node, text, sizeof text);
    char line[256];
    int len = snprintf(line, sizeof line, "%-24s %-18s %-4s layer %d: %s\n", w[j].name, shp,
                       w[j].where == ST_COUNTER ? "I64" : "F32", w[j].node, text);
    if (used + (size_t)len < size) memcpy(buf + used, line, (size_t)len + 1);
    used += (size_t)len;
  }
  free(w);
  if (needed) *needed = used + 1;
  return LAM_OK;
}

/* ---- export ---------------------------------------------------------------------------------------- */

static void put_le(uint8_t *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* "M1,M2,../S1,S2,.." as `lamina train --normalize` takes it, each float in the fewest digits that read
 * back to it exactly (0.1, not 0.100000001). */
static void normalize_str(const lam_model *m, char *buf, size_t size) {
  size_t u = 0;
  for (int k = 0; k < 2; k++)
    for (int c = 0; c < m->norm.c && u < size; c++) {
      float v = k ? m->norm.std[c] : m->norm.mean[c];
      char num[32];
      for (int digits = 6; digits <= 9; digits++) {
        snprintf(num, sizeof num, "%.*g", digits, (double)v);
        if (strtof(num, NULL) == v) break;
      }
      u += (size_t)snprintf(buf + u, size - u, "%s%s", c ? "," : k ? "/" : "", num);
    }
}

/* The header: the metadata, then each tensor at its place in the data (*data_bytes in all). */
static json_t *build_header(const lam_model *m, const st_want *w, int n, size_t *data_bytes) {
  char input[48], norm[64 * 2 * 18];
  snprintf(input, sizeof input, "%dx%dx%d", m->in_c, m->in_h, m->in_w);
  normalize_str(m, norm, sizeof norm);
  json_t *root = json_object();
  json_t *meta = json_pack("{s:s,s:s,s:s,s:s,s:s}", "format", "pt", "lamina.version", LAMINA_VERSION, "lamina.spec",
                           m->spec, "lamina.input", input, "lamina.normalize", norm);
  if (!root || !meta || json_object_set_new(root, "__metadata__", meta)) {
    json_decref(root);
    return NULL;
  }
  size_t off = 0;
  for (int j = 0; j < n; j++) {
    size_t bytes = w[j].count * (w[j].where == ST_COUNTER ? 8 : 4);
    json_t *shape = json_array();
    for (int d = 0; d < w[j].ndim && shape; d++)
      if (json_array_append_new(shape, json_integer(w[j].shape[d]))) json_decref(shape), shape = NULL;
    json_t *t = shape ? json_pack("{s:s,s:o,s:[I,I]}", "dtype", w[j].where == ST_COUNTER ? "I64" : "F32", "shape",
                                  shape, "data_offsets", (json_int_t)off, (json_int_t)(off + bytes))
                      : NULL;
    if (!t || json_object_set_new(root, w[j].name, t)) {
      json_decref(root);
      return NULL;
    }
    off += bytes;
  }
  *data_bytes = off;
  return root;
}

lam_status lam_model_save_safetensors(lam_model *m, const char *path) {
  LAM_CHECK_ARG(m && path, "lam_model_save_safetensors: %s is NULL", m ? "path" : "model");
  LAM_TRY(lam_output_recheck(path, "safetensors file", LAM_FILE_SAFETENSORS)); /* before the work, and again when writing */
  st_want *w;
  int n;
  LAM_TRY(st_wanted(m, &w, &n));
  float *params = malloc((m->nparams ? m->nparams : 1) * sizeof *params);
  float *state = malloc((m->nstate ? m->nstate : 1) * sizeof *state);
  json_t *root = NULL;
  char *hdr = NULL;
  uint8_t *img = NULL;
  size_t data = 0, total = 0;
  lam_status s = LAM_OK;
  if (!params || !state) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "saving '%s': no host memory for the parameters", path);
  if (s == LAM_OK) s = lam_model_params_get(m, params, m->nparams);
  if (s == LAM_OK) s = lam_model_state_get(m, state, m->nstate);
  if (s == LAM_OK && (!(root = build_header(m, w, n, &data)) || !(hdr = json_dumps(root, JSON_COMPACT))))
    s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "saving '%s': no host memory for the JSON header", path);
  size_t hl = hdr ? strlen(hdr) : 0, padded = (hl + 7) / 8 * 8; /* spaces to 8 bytes, as safetensors pads */
  if (s == LAM_OK) {
    total = 8 + padded + data;
    if (!(img = malloc(total))) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "saving '%s': no host memory for %zu bytes", path, total);
  }
  if (s == LAM_OK) {
    put_le(img, padded, 8);
    memcpy(img + 8, hdr, hl);
    memset(img + 8 + hl, ' ', padded - hl);
    uint8_t *p = img + 8 + padded;
    for (int j = 0; j < n; j++) {
      const float *src = w[j].where == ST_PARAM ? params + w[j].off : state + w[j].off;
      if (w[j].where == ST_COUNTER) {
        put_le(p, 0, 8);
        p += 8;
        continue;
      }
      for (size_t k = 0; k < w[j].count; k++, p += 4) {
        uint32_t u;
        memcpy(&u, &src[k], 4);
        put_le(p, u, 4);
      }
    }
    s = lam_output_write(path, "safetensors file", LAM_FILE_SAFETENSORS, img, total);
  }
  free(img);
  free(hdr);
  json_decref(root);
  free(params);
  free(state);
  free(w);
  return s;
}

/* ---- import: the header ---------------------------------------------------------------------------- */

static const struct {
  const char *name;
  int size, floating; /* floating: lamina converts it to float */
} k_dtypes[] = {{"F32", 4, 1}, {"F64", 8, 1}, {"F16", 2, 1}, {"BF16", 2, 1}, {"I64", 8, 0},     {"I32", 4, 0},
                {"I16", 2, 0}, {"I8", 1, 0},  {"U8", 1, 0},  {"U16", 2, 0},  {"U32", 4, 0},     {"U64", 8, 0},
                {"BOOL", 1, 0}, {"F8_E4M3", 1, 0}, {"F8_E5M2", 1, 0}};

typedef struct st_entry {
  const char *name; /* into the parsed header */
  int dtype;        /* into k_dtypes */
  int ndim;
  int64_t shape[ST_MAX_DIMS];
  uint64_t begin, end; /* bytes into the data */
  int used;
} st_entry;

typedef struct st_file {
  const char *path;
  FILE *f;
  uint64_t size, hlen, data; /* the file's bytes, the header's, and the data's (after both) */
  json_t *root;
  st_entry *e;
  int n;
  const char *normalize; /* __metadata__'s "lamina.normalize", or NULL */
} st_file;

#define DAMAGED(F, ...) st_damaged((F), __FILE__, __LINE__, __VA_ARGS__)
static lam_status st_damaged(const st_file *F, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static lam_status st_damaged(const st_file *F, const char *file, int line, const char *fmt, ...) {
  char what[700];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return lam_fail_at(LAM_ERR_IO, file, line, "safetensors file '%s' is damaged or not a safetensors file: %s", F->path,
                     what);
}

/* One tensor's entry: {"dtype": .., "shape": [..], "data_offsets": [begin, end]}, checked against the data. */
static lam_status parse_entry(st_file *F, const char *name, json_t *v, st_entry *e) {
  char nb[64];
  const char *nm = shown(name, nb, sizeof nb);
  json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"), *of = json_object_get(v, "data_offsets");
  if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(sh) || !json_is_array(of))
    return DAMAGED(F, "tensor '%s' is not {\"dtype\": string, \"shape\": [..], \"data_offsets\": [begin, end]}", nm);
  *e = (st_entry){.name = name, .dtype = -1};
  for (size_t k = 0; k < sizeof k_dtypes / sizeof k_dtypes[0]; k++)
    if (!strcmp(json_string_value(dt), k_dtypes[k].name)) e->dtype = (int)k;
  char db[24];
  if (e->dtype < 0) return DAMAGED(F, "tensor '%s' has dtype '%s', which safetensors does not define", nm,
                                   shown(json_string_value(dt), db, sizeof db));
  if (json_array_size(sh) > ST_MAX_DIMS)
    return DAMAGED(F, "tensor '%s' has %zu dimensions (at most %d here)", nm, json_array_size(sh), ST_MAX_DIMS);
  e->ndim = (int)json_array_size(sh);
  uint64_t count = 1, cap = (1ull << 62) / 8;
  for (int d = 0; d < e->ndim; d++) {
    json_t *x = json_array_get(sh, (size_t)d);
    if (!json_is_integer(x) || json_integer_value(x) < 0)
      return DAMAGED(F, "tensor '%s': shape[%d] is not a whole number >= 0", nm, d);
    e->shape[d] = json_integer_value(x);
    if (e->shape[d] && count > cap / (uint64_t)e->shape[d])
      return DAMAGED(F, "tensor '%s' has a shape of more than 2^59 elements", nm);
    count *= (uint64_t)e->shape[d];
  }
  json_t *b = json_array_get(of, 0), *en = json_array_get(of, 1);
  if (json_array_size(of) != 2 || !json_is_integer(b) || !json_is_integer(en) || json_integer_value(b) < 0 ||
      json_integer_value(en) < json_integer_value(b))
    return DAMAGED(F, "tensor '%s': data_offsets is not [begin, end] with 0 <= begin <= end", nm);
  e->begin = (uint64_t)json_integer_value(b), e->end = (uint64_t)json_integer_value(en);
  if (e->end > F->data)
    return DAMAGED(F, "tensor '%s' lies at bytes %llu..%llu of the data, but the file holds %llu bytes of data: "
                   "truncated?", nm, (unsigned long long)e->begin, (unsigned long long)e->end,
                   (unsigned long long)F->data);
  uint64_t want = count * (uint64_t)k_dtypes[e->dtype].size;
  if (e->end - e->begin != want) {
    char shp[128];
    shape_str(e->shape, e->ndim, shp, sizeof shp);
    return DAMAGED(F, "tensor '%s' has %llu bytes of data, but %s %s takes %llu", nm,
                   (unsigned long long)(e->end - e->begin), k_dtypes[e->dtype].name, shp, (unsigned long long)want);
  }
  return LAM_OK;
}

static int by_begin(const void *a, const void *b) {
  const st_entry *x = *(st_entry *const *)a, *y = *(st_entry *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* Opens the file, reads and checks the header: its length, the JSON, every entry, no overlaps. */
static lam_status read_header(st_file *F) {
  LAM_TRY(lam_input_fopen(F->path, "safetensors file", LAM_FILE_SAFETENSORS, 1, &F->f)); /* files.c: regular */
  struct stat st;
  if (fstat(fileno(F->f), &st) != 0)
    return LAM_FAIL(LAM_ERR_IO, "cannot read safetensors file '%s': fstat failed: %s", F->path, strerror(errno));
  F->size = (uint64_t)st.st_size;
  uint8_t q[8];
  if (F->size < 8 || fread(q, 1, 8, F->f) != 8)
    return DAMAGED(F, "it has %llu bytes, fewer than the 8 of the header length it starts with",
                   (unsigned long long)F->size);
  F->hlen = 0;
  for (int i = 0; i < 8; i++) F->hlen |= (uint64_t)q[i] << (8 * i);
  if (F->hlen < 2 || F->hlen > ST_MAX_HEADER)
    return DAMAGED(F, "its first 8 bytes give a header of %llu bytes (2 to %llu expected)",
                   (unsigned long long)F->hlen, ST_MAX_HEADER);
  if (F->hlen > F->size - 8)
    return DAMAGED(F, "its header is %llu bytes, but only %llu follow the length: truncated?",
                   (unsigned long long)F->hlen, (unsigned long long)(F->size - 8));
  F->data = F->size - 8 - F->hlen;
  char *h = malloc(F->hlen);
  if (!h) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "reading '%s': no host memory for its header", F->path);
  size_t got = fread(h, 1, F->hlen, F->f);
  json_error_t jerr;
  F->root = got == F->hlen ? json_loadb(h, F->hlen, JSON_REJECT_DUPLICATES, &jerr) : NULL;
  free(h);
  if (got != F->hlen)
    return LAM_FAIL(LAM_ERR_IO, "cannot read the header of safetensors file '%s': %s", F->path,
                    ferror(F->f) ? strerror(errno) : "the file got shorter while being read");
  if (!F->root) return DAMAGED(F, "its header is not valid JSON: %s (byte %d of the header)", jerr.text, jerr.position);
  if (!json_is_object(F->root)) return DAMAGED(F, "its header is JSON but not an object");
  F->e = calloc(json_object_size(F->root) + 1, sizeof *F->e);
  if (!F->e) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "reading '%s': no host memory for its header", F->path);
  const char *key;
  json_t *v;
  json_object_foreach(F->root, key, v) {
    if (strcmp(key, "__metadata__")) {
      LAM_TRY(parse_entry(F, key, v, &F->e[F->n]));
      F->n++;
      continue;
    }
    if (!json_is_object(v)) return DAMAGED(F, "__metadata__ is not an object of strings");
    const char *mk;
    json_t *mv;
    json_object_foreach(v, mk, mv) {
      char kb[64];
      if (!json_is_string(mv)) return DAMAGED(F, "__metadata__'s '%s' is not a string", shown(mk, kb, sizeof kb));
    }
    F->normalize = json_string_value(json_object_get(v, "lamina.normalize"));
  }
  st_entry **order = malloc(((size_t)F->n + 1) * sizeof *order);
  if (!order) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "reading '%s': no host memory", F->path);
  for (int i = 0; i < F->n; i++) order[i] = &F->e[i];
  qsort(order, (size_t)F->n, sizeof *order, by_begin);
  /* in order of where they begin, each non-empty tensor must begin at or after the furthest end so far */
  lam_status s = LAM_OK;
  const st_entry *far = NULL;
  for (int i = 0; i < F->n && s == LAM_OK; i++) {
    const st_entry *e = order[i];
    if (e->begin == e->end) continue; /* an empty tensor overlaps nothing */
    if (far && e->begin < far->end) {
      char a[64], b[64];
      s = DAMAGED(F, "the data of tensors '%s' (bytes %llu..%llu) and '%s' (bytes %llu..%llu) overlap",
                  shown(far->name, a, sizeof a), (unsigned long long)far->begin, (unsigned long long)far->end,
                  shown(e->name, b, sizeof b), (unsigned long long)e->begin, (unsigned long long)e->end);
    }
    if (!far || e->end > far->end) far = e;
  }
  free(order);
  return s;
}

/* ---- import: against the model --------------------------------------------------------------------- */

/* "a, b, c and 4 more" of the names picked (list of n; pick(i) says whether i is one). */
static void name_list(char *buf, size_t size, int n, const char *(*name)(const void *, int), const void *arg,
                      int (*pick)(const void *, int), int *count) {
  size_t u = 0;
  int k = 0;
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (!pick(arg, i)) continue;
    char nb[64];
    if (k < ST_LIST && u < size) u += (size_t)snprintf(buf + u, size - u, "%s'%s'", k ? ", " : "", shown(name(arg, i), nb, sizeof nb));
    k++;
  }
  if (k > ST_LIST && u < size) snprintf(buf + u, size - u, " and %d more", k - ST_LIST);
  *count = k;
}
typedef struct { const st_want *w; const int *match; } want_arg;
static const char *want_name(const void *a, int i) { return ((const want_arg *)a)->w[i].name; }
static int want_missing(const void *a, int i) {
  const want_arg *x = a;
  return x->match[i] < 0 && x->w[i].where != ST_COUNTER;
}
static const char *entry_name(const void *a, int i) { return ((const st_file *)a)->e[i].name; }
static int entry_unused(const void *a, int i) { return !((const st_file *)a)->e[i].used; }

/* Every tensor of the model found, no other, each of a dtype lamina reads and the model's shape. */
static lam_status match(const lam_model *m, st_file *F, const st_want *w, int n, int *idx) {
  for (int j = 0; j < n; j++) {
    idx[j] = -1;
    for (int i = 0; i < F->n && idx[j] < 0; i++)
      if (!strcmp(F->e[i].name, w[j].name)) idx[j] = i, F->e[i].used = 1;
  }
  char miss[400], extra[400];
  int nmiss, nextra;
  want_arg wa = {w, idx};
  name_list(miss, sizeof miss, n, want_name, &wa, want_missing, &nmiss);
  name_list(extra, sizeof extra, F->n, entry_name, F, entry_unused, &nextra);
  /* A name that is a wanted one behind a prefix ("model.0.weight"): the state_dict of an enclosing module. */
  char prefix[96] = "";
  for (int i = 0; i < F->n && !prefix[0]; i++)
    for (int j = 0; j < n && !F->e[i].used && !prefix[0]; j++) {
      size_t ln = strlen(F->e[i].name), lw = strlen(w[j].name);
      if (ln > lw && F->e[i].name[ln - lw - 1] == '.' && !strcmp(F->e[i].name + ln - lw, w[j].name)) {
        char pb[64], nb[64];
        snprintf(nb, sizeof nb, "%.*s", (int)(ln - lw > 40 ? 40 : ln - lw), F->e[i].name);
        snprintf(prefix, sizeof prefix, " (drop the prefix '%s')", shown(nb, pb, sizeof pb));
      }
    }
  if (nmiss || nextra)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "safetensors file '%s' does not hold this model's tensors:%s%s%s%s%s%s. lamina "
                    "names them by the layer's index in the spec, every layer counted from 0 ('i.weight', 'i.bias'; bn "
                    "also 'i.running_mean', 'i.running_var'); check that the spec is the saved network's. 'lamina import "
                    "--model SPEC --input CxHxW --list' shows the names this model takes", F->path,
                    nmiss ? " missing " : "", nmiss ? miss : "", nmiss && nextra ? ";" : "",
                    nextra ? " not in the model " : "", nextra ? extra : "", prefix);
  for (int j = 0; j < n; j++) {
    if (idx[j] < 0 || w[j].where == ST_COUNTER) continue; /* num_batches_tracked: not read */
    const st_entry *e = &F->e[idx[j]];
    char text[64], want[96], got[160];
    layer_text(m, w[j].node, text, sizeof text);
    if (!k_dtypes[e->dtype].floating)
      return LAM_FAIL(LAM_ERR_UNSUPPORTED, "safetensors file '%s': tensor '%s' (layer %d: %s) is %s; lamina reads F32, "
                      "F64, F16 and BF16 weights: save it as floating point (tensor.float())", F->path, w[j].name,
                      w[j].node, text, k_dtypes[e->dtype].name);
    int same = e->ndim == w[j].ndim;
    for (int d = 0; d < e->ndim && same; d++) same = e->shape[d] == w[j].shape[d];
    if (!same) {
      shape_str(w[j].shape, w[j].ndim, want, sizeof want);
      shape_str(e->shape, e->ndim, got, sizeof got);
      return LAM_FAIL(LAM_ERR_INVALID_ARG, "safetensors file '%s': tensor '%s' has shape %s, but layer %d of the model "
                      "(%s, on %dx%dx%d inputs) takes %s: the spec or the input shape differs from the network the "
                      "file was saved from", F->path, w[j].name, got, w[j].node, text, m->in_c, m->in_h, m->in_w, want);
    }
  }
  return LAM_OK;
}

static uint64_t get_le(const uint8_t *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Tensor e's data, converted to float, into out (its element count). */
static lam_status read_data(st_file *F, const st_entry *e, uint8_t *raw, float *out, size_t count) {
  size_t bytes = (size_t)(e->end - e->begin);
  if (fseeko(F->f, (off_t)(8 + F->hlen + e->begin), SEEK_SET) != 0 || fread(raw, 1, bytes, F->f) != bytes)
    return LAM_FAIL(LAM_ERR_IO, "cannot read tensor '%s' of safetensors file '%s': %s", e->name, F->path,
                    ferror(F->f) ? strerror(errno) : "the file got shorter while being read");
  const char *dt = k_dtypes[e->dtype].name;
  for (size_t k = 0; k < count; k++) {
    if (!strcmp(dt, "F32")) {
      uint32_t u = (uint32_t)get_le(raw + 4 * k, 4);
      memcpy(&out[k], &u, 4);
    } else if (!strcmp(dt, "F64")) {
      uint64_t u = get_le(raw + 8 * k, 8);
      double d;
      memcpy(&d, &u, 8);
      out[k] = (float)d;
    } else if (!strcmp(dt, "F16")) {
      out[k] = lam_f16_to_f32((uint16_t)get_le(raw + 2 * k, 2));
    } else {
      out[k] = lam_bf16_to_f32((uint16_t)get_le(raw + 2 * k, 2));
    }
  }
  return LAM_OK;
}

lam_status lam_model_load_safetensors(lam_model *m, const char *path) {
  LAM_CHECK_ARG(m && path, "lam_model_load_safetensors: %s is NULL", m ? "path" : "model");
  st_file F = {.path = path};
  st_want *w = NULL;
  int n = 0, *idx = NULL;
  float *params = NULL, *state = NULL, mean[LAM_NORM_MAX_CHANNELS], std[LAM_NORM_MAX_CHANNELS];
  uint8_t *raw = NULL;
  lam_status s = read_header(&F);
  if (s == LAM_OK) s = st_wanted(m, &w, &n);
  if (s == LAM_OK && !(idx = malloc(((size_t)n + 1) * sizeof *idx)))
    s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "loading '%s': no host memory", path);
  if (s == LAM_OK) s = match(m, &F, w, n, idx);
  if (s == LAM_OK && F.normalize && lam_normalization_parse(F.normalize, m->in_c, mean, std) != LAM_OK) {
    char nb[64];
    s = LAM_FAIL(LAM_ERR_INVALID_ARG, "safetensors file '%s': its __metadata__ 'lamina.normalize' is '%s', not %d means, "
                 "'/' and %d stds (> 0) for the model's %d input channels", path, shown(F.normalize, nb, sizeof nb),
                 m->in_c, m->in_c, m->in_c);
  }
  /* The data, into host copies of the flat buffers: the model changes only once all of it is read. */
  size_t most = 8;
  for (int j = 0; j < n && s == LAM_OK; j++)
    if (idx[j] >= 0 && F.e[idx[j]].end - F.e[idx[j]].begin > most) most = (size_t)(F.e[idx[j]].end - F.e[idx[j]].begin);
  if (s == LAM_OK) {
    params = malloc((m->nparams ? m->nparams : 1) * sizeof *params);
    state = malloc((m->nstate ? m->nstate : 1) * sizeof *state);
    raw = malloc(most);
    if (!params || !state || !raw) s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "loading '%s': no host memory for %zu parameters",
                                                path, m->nparams);
  }
  if (s == LAM_OK) s = lam_model_params_get(m, params, m->nparams); /* every value is overwritten below */
  if (s == LAM_OK) s = lam_model_state_get(m, state, m->nstate);
  for (int j = 0; j < n && s == LAM_OK; j++)
    if (idx[j] >= 0 && w[j].where != ST_COUNTER)
      s = read_data(&F, &F.e[idx[j]], raw, (w[j].where == ST_PARAM ? params : state) + w[j].off, w[j].count);
  if (s == LAM_OK) s = lam_model_params_set(m, params, m->nparams);
  if (s == LAM_OK) s = lam_model_state_set(m, state, m->nstate);
  if (s == LAM_OK && F.normalize) s = lam_model_set_normalization(m, m->in_c, mean, std);
  free(raw);
  free(params);
  free(state);
  free(idx);
  free(w);
  free(F.e);
  json_decref(F.root);
  if (F.f) fclose(F.f);
  return s;
}
