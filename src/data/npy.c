/* npy.c - NumPy's .npy format (what numpy.save writes): its header, parsed as untrusted text and
 * checked against what an image or label file may be.
 *
 * A .npy file is the magic "\x93NUMPY", a version (major, minor byte: 1.0, 2.0 or 3.0), the header's
 * length (uint16 little-endian in 1.0, uint32 in 2.0 and 3.0), then the header - a Python dict literal
 * such as {'descr': '|u1', 'fortran_order': False, 'shape': (7, 5, 3), } padded with spaces and a
 * newline - then the values. lamina takes C order only; images as uint8; labels as any integer type
 * (narrowed to bytes by data_payload, which checks 0..255).
 *
 * The header is parsed by a small recursive-descent reader over (pointer, end): every read checks the
 * end first, so no header, however malformed, makes it read outside the bytes it was given.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "../status.h"

#define NPY_MAX_HEADER 65536u /* numpy's own headers are < 1 KiB; more means a corrupt length */
#define NPY_MAX_RANK 8        /* parsed; the roles take at most 4 */

int npy_magic(const unsigned char *p, size_t n) { return n >= 6 && memcmp(p, "\x93NUMPY", 6) == 0; }

/* ---- the header dict ------------------------------------------------------------------------- */

typedef struct npy_header {
  char descr[32];
  int fortran; /* -1: key absent */
  int rank;    /* -1: key absent */
  uint64_t shape[NPY_MAX_RANK];
} npy_header;

typedef struct npy_parser {
  const char *p, *end;
  const char *start;
  char err[224]; /* what is wrong, set by the first failure */
} npy_parser;

static int perr(npy_parser *q, const char *fmt, const char *arg) {
  if (!q->err[0]) {
    char what[160];
    snprintf(what, sizeof what, fmt, arg ? arg : "");
    snprintf(q->err, sizeof q->err, "%s at byte %td of the header text", what, q->p - q->start);
  }
  return 0;
}

static void skip_ws(npy_parser *q) {
  while (q->p < q->end && (*q->p == ' ' || *q->p == '\t' || *q->p == '\n' || *q->p == '\r')) q->p++;
}

static int accept(npy_parser *q, char c) {
  skip_ws(q);
  if (q->p < q->end && *q->p == c) {
    q->p++;
    return 1;
  }
  return 0;
}

/* A quoted string ('...' or "...", no escapes: numpy's keys and dtype strings have none) into buf. */
static int parse_string(npy_parser *q, char *buf, size_t cap) {
  skip_ws(q);
  if (q->p >= q->end || (*q->p != '\'' && *q->p != '"')) return perr(q, "expected a quoted string", NULL);
  const char quote = *q->p++;
  const char *close = memchr(q->p, quote, (size_t)(q->end - q->p));
  if (!close) return perr(q, "unterminated string", NULL);
  const size_t n = (size_t)(close - q->p);
  if (memchr(q->p, '\\', n)) return perr(q, "escapes in strings are not supported", NULL);
  if (n >= cap) return perr(q, "string too long", NULL);
  memcpy(buf, q->p, n);
  q->p = close;
  q->p++;
  buf[n] = '\0';
  return 1;
}

static int parse_bool(npy_parser *q, int *v) {
  skip_ws(q);
  size_t left = (size_t)(q->end - q->p);
  if (left >= 4 && memcmp(q->p, "True", 4) == 0) {
    q->p += 4;
    *v = 1;
    return 1;
  }
  if (left >= 5 && memcmp(q->p, "False", 5) == 0) {
    q->p += 5;
    *v = 0;
    return 1;
  }
  return perr(q, "expected True or False", NULL);
}

/* A non-negative integer (Python 2's numpy wrote a trailing L), capped so that it cannot overflow. */
static int parse_uint(npy_parser *q, uint64_t *v) {
  skip_ws(q);
  if (q->p >= q->end || !isdigit((unsigned char)*q->p))
    return perr(q, q->p < q->end && *q->p == '-' ? "a negative dimension" : "expected a dimension (an integer)", NULL);
  uint64_t x = 0;
  while (q->p < q->end && isdigit((unsigned char)*q->p)) {
    if (x > ((uint64_t)1 << 50)) return perr(q, "a dimension too large", NULL);
    x = x * 10 + (uint64_t)(*q->p++ - '0');
  }
  if (q->p < q->end && *q->p == 'L') q->p++;
  *v = x;
  return 1;
}

static int parse_shape(npy_parser *q, npy_header *h) {
  if (!accept(q, '(')) return perr(q, "expected a tuple for 'shape'", NULL);
  h->rank = 0;
  if (accept(q, ')')) return 1;
  for (;;) {
    if (h->rank == NPY_MAX_RANK) return perr(q, "a shape of more than 8 dimensions", NULL);
    if (!parse_uint(q, &h->shape[h->rank++])) return 0;
    if (accept(q, ')')) return 1;
    if (!accept(q, ',')) return perr(q, "expected ',' or ')' in 'shape'", NULL);
    if (accept(q, ')')) return 1; /* (7,) */
  }
}

/* The dict: exactly the keys descr, fortran_order and shape, in any order, a trailing comma allowed,
 * then only padding. */
static int parse_header(npy_parser *q, npy_header *h) {
  memset(h, 0, sizeof *h);
  h->fortran = h->rank = -1;
  if (!accept(q, '{')) return perr(q, "expected '{'", NULL);
  int have_descr = 0;
  while (!accept(q, '}')) {
    char key[32];
    if (!parse_string(q, key, sizeof key)) return 0;
    if (!accept(q, ':')) return perr(q, "expected ':' after '%s'", key);
    if (strcmp(key, "descr") == 0) {
      if (have_descr) return perr(q, "key '%s' given twice", key);
      skip_ws(q);
      if (q->p < q->end && *q->p == '[')
        return perr(q, "a structured dtype (a list of fields, where lamina reads plain arrays)", NULL);
      if (!parse_string(q, h->descr, sizeof h->descr)) return 0;
      have_descr = 1;
    } else if (strcmp(key, "fortran_order") == 0) {
      if (h->fortran != -1) return perr(q, "key '%s' given twice", key);
      if (!parse_bool(q, &h->fortran)) return 0;
    } else if (strcmp(key, "shape") == 0) {
      if (h->rank != -1) return perr(q, "key '%s' given twice", key);
      if (!parse_shape(q, h)) return 0;
    } else {
      return perr(q, "unknown key '%s' (a .npy header holds descr, fortran_order and shape)", key);
    }
    if (accept(q, '}')) break;
    if (!accept(q, ',')) return perr(q, "expected ',' or '}'", NULL);
  }
  skip_ws(q);
  if (q->p != q->end) return perr(q, "text after the closing '}'", NULL);
  if (!have_descr) return perr(q, "no key 'descr'", NULL);
  if (h->fortran == -1) return perr(q, "no key 'fortran_order'", NULL);
  if (h->rank == -1) return perr(q, "no key 'shape'", NULL);
  return 1;
}

/* ---- dtypes ---------------------------------------------------------------------------------- */

/* Parses a simple descr ('<i8', '|u1', '>f4', ...): byte order, kind, size. 0 if it is not one. */
static int parse_descr(const char *d, char *order, char *kind, int *size) {
  *order = '=';
  if (*d == '<' || *d == '>' || *d == '|' || *d == '=') *order = *d++;
  if (!*d || !isalpha((unsigned char)*d)) return 0;
  *kind = *d++;
  *size = 0;
  if (!isdigit((unsigned char)*d)) return 0;
  while (isdigit((unsigned char)*d)) {
    if (*size > 1000) return 0;
    *size = *size * 10 + (*d++ - '0');
  }
  return *d == '\0';
}

/* numpy's name of a descr, for messages: "int64", "float32"; the descr itself when unusual. */
static const char *dtype_name(const char *descr, char *buf, size_t cap) {
  char order, kind;
  int size;
  if (!parse_descr(descr, &order, &kind, &size)) return descr;
  const char *base = kind == 'u'   ? "uint"
                     : kind == 'i' ? "int"
                     : kind == 'f' ? "float"
                     : kind == 'c' ? "complex"
                                   : NULL;
  if (kind == 'b' && size == 1) return "bool";
  if (kind == 'S' || kind == 'a') return "bytes";
  if (kind == 'U') return "str";
  if (!base) return descr;
  snprintf(buf, cap, "%s%d", base, 8 * size);
  return buf;
}

static int host_big_endian(void) {
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 0;
}

/* Checks the dtype against the role; fills e. */
static lam_status check_dtype(const data_src *s, const char *descr, data_elem *e) {
  char order, kind, nbuf[24];
  int size;
  const char *name = dtype_name(descr, nbuf, sizeof nbuf);
  const int simple = parse_descr(descr, &order, &kind, &size);
  if (s->role == DATA_IMAGES) {
    if (simple && kind == 'u' && size == 1) {
      *e = (data_elem){1, 0, 0};
      return LAM_OK;
    }
    if (simple && (kind == 'f' || kind == 'c'))
      return LAM_FAIL(LAM_ERR_IO, "image file '%s': dtype '%s' (%s); lamina reads images as uint8 ('|u1', 0..255): "
                      "save (x * 255).round().astype(np.uint8), or x.astype(np.uint8) if the values are 0..255 "
                      "already", s->path, descr, name);
    return LAM_FAIL(LAM_ERR_IO, "image file '%s': dtype '%s' (%s); lamina reads images as uint8 ('|u1', 0..255): "
                    "save x.astype(np.uint8) once the values are 0..255", s->path, descr, name);
  }
  if (simple && (kind == 'u' || kind == 'i') && (size == 1 || size == 2 || size == 4 || size == 8)) {
    e->size = size;
    e->is_signed = kind == 'i';
    e->big_endian = order == '>' || (order == '=' && host_big_endian());
    return LAM_OK;
  }
  if (simple && (kind == 'f' || kind == 'c'))
    return LAM_FAIL(LAM_ERR_IO, "label file '%s': dtype '%s' (%s); labels must be integers (classes 0..254, 255: "
                    "ignore): save y.astype(np.uint8) or y.astype(np.int64)", s->path, descr, name);
  return LAM_FAIL(LAM_ERR_IO, "label file '%s': dtype '%s' (%s); labels must be integers (uint8, int8, int16, "
                  "uint16, int32, uint32, int64, uint64): save y.astype(np.int64)", s->path, descr, name);
}

/* ---- shapes ---------------------------------------------------------------------------------- */

static void shape_text(const npy_header *h, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "(");
  for (int d = 0; d < h->rank && n < cap; d++)
    n += (size_t)snprintf(buf + n, cap - n, "%s%llu", d ? ", " : "", (unsigned long long)h->shape[d]);
  if (n < cap) snprintf(buf + n, cap - n, h->rank == 1 ? ",)" : ")");
}

/* Checks the shape against the role, decides a 4-d image array's layout, and fills a's dims. */
static lam_status check_shape(const data_src *s, const npy_header *h, data_array *a) {
  char shp[128];
  shape_text(h, shp, sizeof shp);
  const uint64_t *d = h->shape;
  if (s->role == DATA_IMAGES) {
    if (h->rank == 2)
      return LAM_FAIL(LAM_ERR_IO, "image file '%s': shape %s has 2 dimensions; images are (n, h, w), (n, h, w, c) "
                      "or (n, c, h, w): reshape flat images first, e.g. x.reshape(-1, 28, 28)", s->path, shp);
    if (h->rank < 3 || h->rank > 5)
      return LAM_FAIL(LAM_ERR_IO, "image file '%s': shape %s has %d dimensions; images are (n, h, w), (n, h, w, c) "
                      "or (n, c, h, w), clips (n, t, h, w, c)", s->path, shp, h->rank);
    const char *names[5] = {"n", "rows", "cols", "channels", ""};
    uint64_t limits[5] = {DATA_MAX_N, DATA_MAX_SIDE, DATA_MAX_SIDE, DATA_MAX_CHANNELS, 0};
    if (h->rank == 5) { /* clips: (n, frames, h, w, c), always channels-last */
      a->channels_last = 1;
      names[1] = "frames", names[2] = "rows", names[3] = "cols", names[4] = "channels";
      limits[1] = DATA_MAX_FRAMES, limits[2] = limits[3] = DATA_MAX_SIDE, limits[4] = DATA_MAX_CHANNELS;
    }
    if (h->rank == 4) {
      if (d[3] <= 4 && d[3] > 0) {
        a->channels_last = 1;
      } else if (d[1] <= 4 && d[1] > 0) {
        a->channels_last = 0; /* (n, c, h, w) */
        names[1] = "channels", names[2] = "rows", names[3] = "cols";
        limits[1] = DATA_MAX_CHANNELS, limits[3] = DATA_MAX_SIDE;
      } else if (d[1] > 4 && d[3] > 4) {
        return LAM_FAIL(LAM_ERR_IO, "image file '%s': shape %s is ambiguous: a 4-d .npy image array is (n, h, w, c) "
                        "when its last dimension is <= 4 (channels-last) and (n, c, h, w) when only its second is "
                        "<= 4 (channels-first); here both are > 4. Save it channels-last with at most 4 channels, "
                        "or as an IDX file of magic 0x00000804 (always n, h, w, c, any channel count)", s->path, shp);
      }
    }
    for (int i = 0; i < h->rank; i++) LAM_TRY(data_check_dim(s, "a .npy", names[i], d[i], limits[i]));
  } else {
    if (h->rank == 2 && d[1] == 1)
      return LAM_FAIL(LAM_ERR_IO, "label file '%s': shape %s; labels are (n) - a class per image - or (n, h, w) - "
                      "a class per pixel: save y.reshape(-1)", s->path, shp);
    if (h->rank == 4 && d[3] == 1)
      return LAM_FAIL(LAM_ERR_IO, "label file '%s': shape %s; labels are (n) - a class per image - or (n, h, w) - "
                      "a class per pixel: save y[..., 0]", s->path, shp);
    if (h->rank != 1 && h->rank != 3)
      return LAM_FAIL(LAM_ERR_IO, "label file '%s': shape %s has %d dimensions; labels are (n) - a class per image "
                      "- or (n, h, w) - a class per pixel", s->path, shp, h->rank);
    const char *names[3] = {"n", "rows", "cols"};
    for (int i = 0; i < h->rank; i++)
      LAM_TRY(data_check_dim(s, "a .npy", names[i], d[i], i == 0 ? DATA_MAX_N : DATA_MAX_SIDE));
  }
  a->rank = h->rank;
  for (int i = 0; i < h->rank; i++) a->dims[i] = d[i];
  return LAM_OK;
}

/* ---- the reader ------------------------------------------------------------------------------ */

lam_status npy_read(data_src *s, data_array *a) {
  memset(a, 0, sizeof *a);
  a->npy = 1;
  unsigned char pre[12];
  size_t got = 0;
  if (data_read(s, pre, 10, &got) != 0)
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s': cannot read the header: %s; the file is damaged, fetch it again",
                    s->what, s->path, data_reason(s));
  if (got < 10)
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s' is truncated: it ends after %zu bytes, inside the .npy header",
                    s->what, s->path, got);
  const int major = pre[6], minor = pre[7];
  if (major < 1 || major > 3 || minor != 0)
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s': NumPy format version %d.%d; lamina reads versions 1.0, 2.0 and 3.0 "
                    "(what numpy.save writes): save the array again with numpy.save", s->what, s->path, major, minor);
  size_t prefix = 10;
  uint32_t len = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
  if (major >= 2) {
    size_t more = 0;
    if (data_read(s, pre + 10, 2, &more) != 0)
      return LAM_FAIL(LAM_ERR_IO, "%s file '%s': cannot read the header: %s; the file is damaged, fetch it again",
                      s->what, s->path, data_reason(s));
    if (more < 2)
      return LAM_FAIL(LAM_ERR_IO, "%s file '%s' is truncated: it ends after %zu bytes, inside the .npy header",
                      s->what, s->path, 10 + more);
    prefix = 12;
    len |= (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
  }
  if (len == 0 || len > NPY_MAX_HEADER)
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s': the .npy header's length is %u bytes, where numpy writes 1..%u; the "
                    "file is corrupt, save it again", s->what, s->path, len, NPY_MAX_HEADER);
  const uint64_t head_bytes = prefix + len;
  char *text = malloc(len);
  if (!text)
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s file '%s': no host memory for a %u-byte header", s->what, s->path, len);
  if (data_read(s, text, len, &got) != 0) {
    free(text);
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s': cannot read the header: %s; the file is damaged, fetch it again",
                    s->what, s->path, data_reason(s));
  }
  if (got < len) {
    free(text);
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s' is truncated: it ends after %zu bytes, inside the %llu-byte .npy "
                    "header", s->what, s->path, prefix + got, (unsigned long long)head_bytes);
  }
  npy_parser q = {text, text + len, text, {0}};
  npy_header h;
  const int ok = parse_header(&q, &h);
  free(text);
  if (!ok)
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s': malformed .npy header: %s; expected a dict such as {'descr': '|u1', "
                    "'fortran_order': False, 'shape': (n, h, w), }: save the array again with numpy.save", s->what,
                    s->path, q.err);
  if (h.fortran)
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s' is in Fortran order (fortran_order: True); lamina reads C order: save "
                    "np.ascontiguousarray(x) instead", s->what, s->path);
  data_elem e;
  LAM_TRY(check_dtype(s, h.descr, &e));
  LAM_TRY(check_shape(s, &h, a));

  uint64_t count = 1;
  for (int i = 0; i < a->rank; i++) count *= a->dims[i]; /* each dimension checked: < 2^61 */
  char nbuf[24], shp[64];
  const char *type = e.size > 1 || e.is_signed ? dtype_name(h.descr, nbuf, sizeof nbuf) : NULL;
  shape_text(&h, shp, sizeof shp);
  const unsigned long long n = a->dims[0];
  if (s->role == DATA_IMAGES)
    snprintf(a->words, sizeof a->words, "%llu images of shape %s", n, shp);
  else if (a->rank == 1)
    snprintf(a->words, sizeof a->words, "%llu labels%s%s", n, type ? " of " : "", type ? type : "");
  else
    snprintf(a->words, sizeof a->words, "%llu label maps of %llux%llu%s%s", n, (unsigned long long)a->dims[1],
             (unsigned long long)a->dims[2], type ? " of " : "", type ? type : "");
  if (count > SIZE_MAX)
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s file '%s': %s do not fit in this machine's address space", s->what,
                    s->path, a->words);
  a->count = (size_t)count;
  return data_payload(s, head_bytes, &e, a);
}

lam_status lam_npy_header(int rank, const uint64_t *dims, uint8_t *out, size_t cap, size_t *len) {
  LAM_CHECK_ARG(dims && out && len, "lam_npy_header: NULL argument");
  LAM_CHECK_ARG(rank >= 1 && rank <= 8, "lam_npy_header: rank %d (1 to 8 here)", rank);
  char dict[256];
  int k = snprintf(dict, sizeof dict, "{'descr': '|u1', 'fortran_order': False, 'shape': (");
  for (int i = 0; i < rank && k > 0 && (size_t)k < sizeof dict; i++)
    k += snprintf(dict + k, sizeof dict - (size_t)k, i ? ", %llu" : "%llu", (unsigned long long)dims[i]);
  if (k > 0 && (size_t)k < sizeof dict) k += snprintf(dict + k, sizeof dict - (size_t)k, rank == 1 ? ",), }" : "), }");
  if (k <= 0 || (size_t)k >= sizeof dict)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "lam_npy_header: the shape does not fit a header of %zu bytes", sizeof dict);
  const size_t total = (10 + (size_t)k + 1 + 63) / 64 * 64, hl = total - 10; /* the dict, spaces, '\n' */
  if (total > cap)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "lam_npy_header: the header of this shape takes %zu bytes, more than %zu", total,
                    cap);
  memcpy(out, "\x93NUMPY\x01\x00", 8);
  out[8] = (uint8_t)(hl & 0xff), out[9] = (uint8_t)(hl >> 8); /* little-endian uint16 */
  memcpy(out + 10, dict, (size_t)k);
  memset(out + 10 + k, ' ', hl - (size_t)k - 1);
  out[total - 1] = '\n';
  *len = total;
  return LAM_OK;
}
