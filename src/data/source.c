/* source.c — one data file read through zlib, for both formats (IDX and NumPy): opening it and peeking
 * its first bytes, reading, and the payload reader that every array ends in.
 *
 * Plain and gzip files go through zlib's gzFile: gzopen looks at the first two bytes itself (1f 8b is
 * gzip, anything else is read as it is), so one code path reads both, and a byte payload goes in one
 * gzread straight into its final buffer (in 1 GiB pieces only because gzread takes an unsigned int).
 * Wider integers (NumPy labels of int64 and the like) are read in pieces and narrowed to bytes as they
 * come, so an int64 label file never needs eight times its bytes in memory. Everything that can be
 * checked before allocating is: the header's sizes against the file's length. A bad file never costs a
 * huge malloc.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "../internal.h"
#include "../status.h"

/* Deflate expands at most 1032:1, so a .gz file of B bytes holds at most 1032*B bytes of data: a
 * header that claims more is corrupt, and we can say so without trying to allocate it. */
#define GZIP_MAX_RATIO 1032u
#define READ_PIECE ((size_t)1 << 30)  /* gzread's length is an unsigned int */
#define GZ_BUFFER (256u * 1024u)      /* zlib's default 8 KiB makes inflate ~2x slower */
#define WIDE_PIECE (64u * 1024u)      /* elements per piece when narrowing wide integers */

static int gz_read_full(gzFile gz, unsigned char *p, size_t bytes, size_t *got) {
  while (*got < bytes) {
    size_t want = bytes - *got < READ_PIECE ? bytes - *got : READ_PIECE;
    int r = gzread(gz, p + *got, (unsigned)want);
    if (r < 0) return -1;
    if (r == 0) break;
    *got += (size_t)r;
  }
  return 0;
}

int data_read(data_src *s, void *dst, size_t bytes, size_t *got) {
  unsigned char *p = dst;
  *got = 0;
  while (*got < bytes && s->peek_pos < s->peek_len) p[(*got)++] = s->peek[s->peek_pos++];
  return gz_read_full(s->gz, p, bytes, got);
}

const char *data_reason(data_src *s) {
  static _Thread_local char why[256];
  int err = Z_OK;
  const char *msg = gzerror(s->gz, &err);
  if (err == Z_ERRNO) return strerror(errno);
  if (!msg || !*msg) return "unknown zlib error";
  size_t n = strlen(s->path);
  if (strncmp(msg, s->path, n) == 0 && msg[n] == ':' && msg[n + 1] == ' ') msg += n + 2;
  if (err == Z_DATA_ERROR) { /* zlib's words for damage, said as what they mean */
    snprintf(why, sizeof why, "its gzip data cannot be decompressed (zlib: %s%s)", msg,
             strstr(msg, "incorrect data check") ? ": the CRC-32 of the decompressed data does not match the one "
                                                   "stored" : "");
    return why;
  }
  return msg;
}

const char *data_empty_note(const data_src *s, size_t got) {
  if (got > 0) return "";
  return s->gzip ? " (the gzip data is empty)" : " (the file is empty)";
}

/* True when the data ended because the gzip stream itself was cut off (not merely short). */
static int gz_cut_off(gzFile gz) {
  int err = Z_OK;
  (void)gzerror(gz, &err);
  return err == Z_BUF_ERROR;
}

lam_status data_open(const char *path, data_role role, data_src *s) {
  memset(s, 0, sizeof *s);
  s->path = path;
  s->role = role;
  s->what = role == DATA_IMAGES ? "image" : "label";
  struct stat st;
  if (stat(path, &st) != 0)
    return LAM_FAIL(LAM_ERR_IO, "cannot open %s file '%s': %s; check the path", s->what, path, strerror(errno));
  if (S_ISDIR(st.st_mode))
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s' is a folder, not a file; give the path of the IDX or .npy %s file in "
                    "it", s->what, path, s->what);
  s->regular = S_ISREG(st.st_mode);
  s->file_bytes = (uint64_t)st.st_size;

  char what[32];
  snprintf(what, sizeof what, "%s file", s->what);
  int fd;
  LAM_TRY(lam_input_open(path, what, LAM_FILE_NONE, 1, &fd)); /* files.c: a regular file, one of the run's inputs */
  s->gz = gzdopen(fd, "rb");
  if (!s->gz) {
    close(fd);
    return LAM_FAIL(LAM_ERR_IO, "cannot open %s file '%s': out of memory for zlib's state", s->what, path);
  }
  (void)gzbuffer(s->gz, GZ_BUFFER); /* before the first read, as zlib requires; failure only costs speed */
  size_t got = 0;
  if (gz_read_full(s->gz, s->peek, DATA_PEEK, &got) != 0) {
    lam_status st_ = LAM_FAIL(LAM_ERR_IO, "%s file '%s' is damaged: %s; fetch it again", s->what, path, data_reason(s));
    gzclose_r(s->gz);
    s->gz = NULL;
    return st_;
  }
  s->peek_len = got;
  s->gzip = !gzdirect(s->gz); /* known once the first read has looked at the data */
  return LAM_OK;
}

lam_status data_close(data_src *s, lam_status so_far) {
  if (!s->gz) return so_far;
  int rc = gzclose_r(s->gz);
  s->gz = NULL;
  if (rc != Z_OK && so_far == LAM_OK)
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s': zlib reported error %d on closing it; the file is damaged, fetch it "
                    "again", s->what, s->path, rc);
  return so_far;
}

lam_status data_check_dim(const data_src *s, const char *format, const char *name, uint64_t v, uint64_t limit) {
  if (v == 0)
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s': dimension %s is 0 in the header; %s %s file needs every dimension "
                    "> 0 (the file is corrupt or holds an empty set)", s->what, s->path, name, format, s->what);
  if (v > limit)
    return LAM_FAIL(LAM_ERR_IO, "%s file '%s': dimension %s is %llu in the header, more than the %llu lamina "
                    "accepts; the header is most likely corrupt", s->what, s->path, name, (unsigned long long)v,
                    (unsigned long long)limit);
  return LAM_OK;
}

void data_where(uint64_t h, uint64_t w, size_t i, char *buf, size_t cap) {
  if (h && w)
    snprintf(buf, cap, " (image %zu, row %zu, col %zu)", i / (size_t)(h * w), i % (size_t)(h * w) / (size_t)w,
             i % (size_t)w);
  else if (cap)
    buf[0] = '\0';
}

/* Decodes one element of kind e at p. In 0..255: stores it in *out and returns 1. Otherwise writes
 * its value into text, sets *neg when it is negative, and returns 0. */
static int elem_byte(const unsigned char *p, const data_elem *e, uint8_t *out, char *text, size_t cap, int *neg) {
  uint64_t u = 0;
  for (int b = 0; b < e->size; b++) u = u << 8 | p[e->big_endian ? b : e->size - 1 - b];
  const int bits = 8 * e->size;
  *neg = e->is_signed && ((u >> (bits - 1)) & 1);
  if (!*neg && u <= 255) {
    *out = (uint8_t)u;
    return 1;
  }
  if (*neg) {
    if (bits < 64) u |= ~(uint64_t)0 << bits; /* sign-extend */
    snprintf(text, cap, "%lld", (long long)(int64_t)u);
  } else {
    snprintf(text, cap, "%llu", (unsigned long long)u);
  }
  return 0;
}

/* Reads count elements of kind e (size > 1) and narrows them into a->data, checking 0..255. */
static lam_status read_wide(data_src *s, uint64_t head_bytes, const data_elem *e, data_array *a, size_t want,
                            size_t *got_total) {
  unsigned char *raw = malloc((size_t)WIDE_PIECE * (size_t)e->size);
  if (!raw)
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s file '%s': no host memory for a %u-element read buffer", s->what,
                    s->path, WIDE_PIECE);
  lam_status st = LAM_OK;
  size_t done = 0; /* elements */
  *got_total = 0;
  while (done < a->count) {
    size_t n = a->count - done < WIDE_PIECE ? a->count - done : WIDE_PIECE;
    size_t got = 0;
    if (data_read(s, raw, n * (size_t)e->size, &got) != 0) {
      st = LAM_FAIL(LAM_ERR_IO, "%s file '%s': read failed after the header: %s; the %s is damaged, fetch it again",
                    s->what, s->path, data_reason(s), s->gzip ? "gzip data" : "file");
      break;
    }
    *got_total += got;
    if (got < n * (size_t)e->size) {
      st = LAM_FAIL(LAM_ERR_IO, "%s file '%s' is truncated: its header says %s, %zu bytes after the %llu-byte "
                    "header, but only %zu are there%s; fetch the file again", s->what, s->path, a->words, want,
                    (unsigned long long)head_bytes, *got_total,
                    s->gzip && gz_cut_off(s->gz) ? " (the gzip stream is cut off)" : s->gzip ? " (decompressed)" : "");
      break;
    }
    for (size_t i = 0; i < n && st == LAM_OK; i++) {
      char text[32], where[80];
      int neg = 0;
      if (elem_byte(raw + i * (size_t)e->size, e, &a->data[done + i], text, sizeof text, &neg)) continue;
      data_where(a->rank == 3 ? a->dims[1] : 0, a->dims[2], done + i, where, sizeof where);
      st = LAM_FAIL(LAM_ERR_IO, "%s file '%s': the label at index %zu%s is %s, out of range: labels must be 0..255, "
                    "with 255 meaning 'ignore' in per-pixel labels; %s", s->what, s->path, done + i, where, text,
                    neg ? "map ignored values to 255 (y[y < 0] = 255) and save as uint8"
                        : "renumber the classes 0..classes-1 and save as uint8");
    }
    if (st != LAM_OK) break;
    done += n;
  }
  free(raw);
  return st;
}

lam_status data_payload(data_src *s, uint64_t head_bytes, const data_elem *e, data_array *a) {
  a->data = NULL;
  const uint64_t count = a->count;
  if (count > UINT64_MAX / (uint64_t)e->size || count > SIZE_MAX)
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s file '%s': %s do not fit in this machine's address space", s->what,
                    s->path, a->words);
  const uint64_t want = count * (uint64_t)e->size;
  if (s->regular) {
    if (!s->gzip && s->file_bytes != head_bytes + want) {
      /* Plain: the length says it all, before anything is allocated. */
      if (s->file_bytes < head_bytes + want)
        return LAM_FAIL(LAM_ERR_IO, "%s file '%s' is truncated: its header says %s, %llu bytes after the %llu-byte "
                        "header, but only %llu are there; fetch the file again", s->what, s->path, a->words,
                        (unsigned long long)want, (unsigned long long)head_bytes,
                        (unsigned long long)(s->file_bytes - head_bytes));
      return LAM_FAIL(LAM_ERR_IO, "%s file '%s' has %llu trailing bytes: its header says %s, %llu bytes after the "
                      "%llu-byte header, but %llu are there; the header or the file is wrong", s->what, s->path,
                      (unsigned long long)(s->file_bytes - head_bytes - want), a->words, (unsigned long long)want,
                      (unsigned long long)head_bytes, (unsigned long long)(s->file_bytes - head_bytes));
    }
    if (s->gzip && (head_bytes + want) / GZIP_MAX_RATIO > s->file_bytes)
      return LAM_FAIL(LAM_ERR_IO, "%s file '%s': its header says %s (%llu bytes), more than a %llu-byte gzip file "
                      "can hold; the file is truncated or its header corrupt", s->what, s->path, a->words,
                      (unsigned long long)want, (unsigned long long)s->file_bytes);
  }
  if (want > SIZE_MAX)
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s file '%s': %s do not fit in this machine's address space", s->what,
                    s->path, a->words);
  a->data = malloc(a->count ? a->count : 1);
  if (!a->data)
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s file '%s': no host memory for %s (%zu bytes)", s->what, s->path,
                    a->words, a->count);

  lam_status st = LAM_OK;
  size_t got = 0;
  if (e->size == 1) {
    if (data_read(s, a->data, a->count, &got) != 0)
      st = LAM_FAIL(LAM_ERR_IO, "%s file '%s': read failed after the header: %s; the %s is damaged, fetch it again",
                    s->what, s->path, data_reason(s), s->gzip ? "gzip data" : "file");
    else if (got < a->count)
      st = LAM_FAIL(LAM_ERR_IO, "%s file '%s' is truncated: its header says %s, %zu bytes after the %llu-byte "
                    "header, but only %zu are there%s; fetch the file again", s->what, s->path, a->words, a->count,
                    (unsigned long long)head_bytes, got,
                    s->gzip && gz_cut_off(s->gz) ? " (the gzip stream is cut off)" : s->gzip ? " (decompressed)" : "");
  } else {
    st = read_wide(s, head_bytes, e, a, (size_t)want, &got);
  }
  if (st != LAM_OK) goto fail;

  /* Anything after the payload means the header and the file disagree. Counting it costs nothing on
   * a good file (one read that returns 0) and makes the message exact on a bad one. */
  unsigned char tail[4096];
  size_t extra = 0;
  for (;;) {
    int r = gzread(s->gz, tail, sizeof tail);
    if (r < 0) {
      st = LAM_FAIL(LAM_ERR_IO, "%s file '%s': the %s is damaged after the data: %s; fetch the file again", s->what,
                    s->path, s->gzip ? "gzip stream" : "file", data_reason(s));
      goto fail;
    }
    if (r == 0) break;
    extra += (size_t)r;
  }
  if (s->gzip && gz_cut_off(s->gz)) {
    /* All the data came out, but the stream's end (and its checksum) is missing. */
    st = LAM_FAIL(LAM_ERR_IO, "%s file '%s': the gzip stream is cut off after the data (no end-of-stream and "
                  "checksum); the file is truncated, fetch it again", s->what, s->path);
    goto fail;
  }
  if (extra) {
    st = LAM_FAIL(LAM_ERR_IO, "%s file '%s' has %zu trailing byte%s%s: its header says %s, %llu bytes after the "
                  "%llu-byte header; the header or the file is wrong", s->what, s->path, extra, extra == 1 ? "" : "s",
                  s->gzip ? " (decompressed)" : "", a->words, (unsigned long long)want, (unsigned long long)head_bytes);
    goto fail;
  }
  return LAM_OK;

fail:
  free(a->data);
  a->data = NULL;
  return st;
}
