/* videolist.c — video sets listed in CSV files, for videofolder.c: DIR/train.csv and DIR/val.csv (or validate.csv,
 * Kinetics' name, or test.csv) of path,label rows (a path relative to DIR or absolute, an optional header row
 * path,label), or of Kinetics' own columns label,youtube_id,time_start,time_end,split (is_cc after them in the later
 * releases), whose files are found where Kinetics' download tools put them. The files are read as CSV (RFC 4180:
 * quoted fields, a quote inside one written twice, LF or CRLF lines); every error names the file and the line. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "data.h"
#include "../status.h"

#define CSV_MAX_FIELDS 8

/* ---- CSV records ---- */

typedef struct csv_reader {
  FILE *f;
  const char *path;
  long line; /* the line the reader is on, from 1 */
  char *buf; /* the record's fields, each NUL-terminated */
  size_t cap;
} csv_reader;

static lam_status csv_open(csv_reader *r, const char *path) {
  *r = (csv_reader){.path = path, .line = 1};
  if (!(r->f = fopen(path, "rb"))) return LAM_FAIL(LAM_ERR_IO, "video list '%s': cannot open it", path);
  unsigned char bom[3];
  if (fread(bom, 1, 3, r->f) != 3 || bom[0] != 0xEF || bom[1] != 0xBB || bom[2] != 0xBF) rewind(r->f); /* Excel's */
  return LAM_OK;
}

static void csv_close(csv_reader *r) {
  if (r->f) fclose(r->f);
  free(r->buf);
  r->f = NULL, r->buf = NULL;
}

static int csv_put(csv_reader *r, size_t *len, int c) {
  if (*len == r->cap) {
    size_t cap = r->cap ? 2 * r->cap : 256;
    char *b = realloc(r->buf, cap);
    if (!b) return -1;
    r->buf = b, r->cap = cap;
  }
  r->buf[(*len)++] = (char)c;
  return 0;
}

/* The next record: *nf fields (more than CSV_MAX_FIELDS are counted, not kept), field[k] each, *at the line it starts
 * on. 1: a record; 0: the end of the file; -1: an error (set). Blank lines are no records; spaces around an unquoted
 * field are not part of it. */
static int csv_next(csv_reader *r, char **field, int *nf, long *at) {
  size_t len = 0, off[CSV_MAX_FIELDS];
  int n = 0, c = getc(r->f);
  for (; c == '\n' || c == '\r'; c = getc(r->f)) r->line += c == '\n';
  if (c == EOF) return ferror(r->f) ? (LAM_FAIL(LAM_ERR_IO, "%s:%ld: a read failed", r->path, r->line), -1) : 0;
  *at = r->line;
  for (;;) { /* a field; c is its first character */
    const size_t start = len;
    while (c == ' ' || c == '\t') c = getc(r->f);
    if (c == '"') {
      for (;;) {
        c = getc(r->f);
        if (c == EOF) {
          LAM_FAIL(LAM_ERR_IO, "%s:%ld: a quoted field is not closed (its closing '\"' is missing)", r->path, *at);
          return -1;
        }
        if (c == '"' && (c = getc(r->f)) != '"') break; /* "" is a quote inside the field */
        r->line += c == '\n';
        if (csv_put(r, &len, c)) goto oom;
      }
      while (c == ' ' || c == '\t' || c == '\r') c = getc(r->f);
      if (c != ',' && c != '\n' && c != EOF) {
        LAM_FAIL(LAM_ERR_IO, "%s:%ld: '%c' after a quoted field's closing quote: a field holding a quote is quoted "
                 "whole, the quote written twice (\"a \"\"b\"\"\")", r->path, r->line, c);
        return -1;
      }
    } else {
      for (; c != ',' && c != '\n' && c != EOF; c = getc(r->f))
        if (c != '\r' && csv_put(r, &len, c)) goto oom;
      while (len > start && (r->buf[len - 1] == ' ' || r->buf[len - 1] == '\t')) len--;
    }
    if (csv_put(r, &len, 0)) goto oom;
    if (n < CSV_MAX_FIELDS) off[n] = start;
    n++;
    if (c != ',') break;
    c = getc(r->f);
  }
  r->line += c == '\n';
  for (int k = 0; k < n && k < CSV_MAX_FIELDS; k++) field[k] = r->buf + off[k];
  *nf = n;
  return 1;
oom:
  LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s:%ld: no host memory for a record", r->path, *at);
  return -1;
}

/* ---- the lists ---- */

enum { LIST_PATHS = 1, LIST_KINETICS = 2 };

/* The kind a list's first record says: LIST_KINETICS for Kinetics' header (or a mistyped one: its first two
 * columns), LIST_PATHS for path,label's or a row whose file is a video; 0 where it says neither. */
static int first_record_kind(char **f, int n) {
  if (n >= 2 && !strcasecmp(f[0], "label") && !strcasecmp(f[1], "youtube_id")) return LIST_KINETICS;
  if (n == 2 && !strcasecmp(f[0], "path") && !strcasecmp(f[1], "label")) return LIST_PATHS;
  return n >= 1 && video_file_name(f[0]) ? LIST_PATHS : 0;
}

int video_csv_layout(const char *dir) {
  char p[PATH_MAX];
  if (!dir || (size_t)snprintf(p, sizeof p, "%s/train.csv", dir) >= sizeof p || !data_is_file(p)) return 0;
  csv_reader r;
  if (csv_open(&r, p) != LAM_OK) return 0;
  char *f[CSV_MAX_FIELDS];
  int n = 0;
  long at;
  const int got = csv_next(&r, f, &n, &at), kind = got == 1 ? first_record_kind(f, n) : 0;
  csv_close(&r);
  if (kind) return kind;
  /* a train.csv of another kind beside train/ folders is some other set's file; with nothing else there, it is a
   * list the reader will say what is wrong with */
  snprintf(p, sizeof p, "%s/train", dir);
  return data_is_dir(p) ? 0 : LIST_PATHS;
}

/* The test part's list: val.csv, Kinetics' validate.csv, or test.csv (Kinetics' own has no labels); "" where none. */
static void test_list(const char *dir, char *p, size_t cap) {
  static const char *const names[] = {"val.csv", "validate.csv", "test.csv"};
  for (int k = 0; k < 3; k++)
    if ((size_t)snprintf(p, cap, "%s/%s", dir, names[k]) < cap && data_is_file(p)) return;
  p[0] = 0;
}

int video_csv_has_test(const char *dir) {
  char p[PATH_MAX];
  test_list(dir, p, sizeof p);
  return p[0] != 0;
}

typedef struct row {
  char *label, *path; /* path: the file (NULL where it is missing or not looked for: the label is still a class) */
  long line;
} row;

typedef struct rows {
  row *r;
  size_t n, cap;
  size_t listed, missing; /* Kinetics: rows, and rows whose file is not there */
  char example[PATH_MAX]; /* the first missing file */
} rows;

static void rows_free(rows *v) {
  for (size_t i = 0; i < v->n; i++) free(v->r[i].label), free(v->r[i].path);
  free(v->r);
}

static lam_status rows_add(rows *v, const char *label, const char *path, long line, const char *file) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? 2 * v->cap : 256;
    row *t = realloc(v->r, cap * sizeof *t);
    if (!t) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s:%ld: no host memory for the list", file, line);
    v->r = t, v->cap = cap;
  }
  row *e = &v->r[v->n];
  e->line = line, e->label = strdup(label), e->path = path ? strdup(path) : NULL;
  if (!e->label || (path && !e->path)) {
    free(e->label), free(e->path);
    return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "%s:%ld: no host memory for the list", file, line);
  }
  v->n++;
  return LAM_OK;
}

/* A time of a Kinetics row: whole seconds (written 14 or 14.0), 0 to 999999. */
static int kinetics_time(const char *s, long *t) {
  char *end;
  const double v = strtod(s, &end);
  if (end == s || *end || !(v >= 0 && v <= 999999) || v != floor(v)) return 0;
  *t = (long)v;
  return 1;
}

/* Where Kinetics' file for a row is: DIR/SPLIT/LABEL/ID_START_END.mp4, START and END 6 digits (the ActivityNet
 * crawler's and torchvision's name), LABEL the label as written or as torchvision names its folder (spaces to '_',
 * ' ( ) dropped), or DIR/SPLIT/ID_... as CVDF's archives unpack; the split "validate" (Kinetics-700's) also as val.
 * 1 with the file in found; 0 with the first place looked in found. */
static int kinetics_file(const char *dir, const char *label, const char *id, long t0, long t1, const char *split,
                         char *found, size_t cap) {
  char tv[PATH_MAX], name[PATH_MAX], first[PATH_MAX] = "";
  size_t k = 0;
  for (const char *s = label; *s && k + 1 < sizeof tv; s++)
    if (*s != '\'' && *s != '(' && *s != ')') tv[k++] = *s == ' ' ? '_' : *s;
  tv[k] = 0;
  snprintf(name, sizeof name, "%s_%06ld_%06ld.mp4", id, t0, t1);
  const char *splits[2] = {split, !strcmp(split, "validate") ? "val" : NULL};
  for (int a = 0; a < 2 && splits[a]; a++) {
    const char *sub[3] = {label, tv, ""};
    for (int b = 0; b < 3; b++) {
      if ((size_t)snprintf(found, cap, "%s/%s/%s%s%s", dir, splits[a], sub[b], *sub[b] ? "/" : "", name) >= cap)
        continue;
      if (!first[0]) snprintf(first, sizeof first, "%s", found);
      if (data_is_file(found)) return 1;
    }
  }
  snprintf(found, cap, "%s", first);
  return 0;
}

/* A Kinetics row (its header checked): its label and file. */
static lam_status kinetics_row(const char *dir, const csv_reader *r, long at, char **f, rows *v, int files) {
  long t0, t1;
  if (!f[0][0] || !f[1][0] || !f[4][0])
    return LAM_FAIL(LAM_ERR_IO, "%s:%ld: the %s is empty", r->path, at, !f[0][0] ? "label" : !f[1][0] ? "youtube_id" : "split");
  if (!kinetics_time(f[2], &t0) || !kinetics_time(f[3], &t1))
    return LAM_FAIL(LAM_ERR_IO, "%s:%ld: time_start '%s' and time_end '%s' must be whole seconds (0 to 999999)",
                    r->path, at, f[2], f[3]);
  if (!files) return rows_add(v, f[0], NULL, at, r->path);
  char p[PATH_MAX];
  v->listed++;
  if (kinetics_file(dir, f[0], f[1], t0, t1, f[4], p, sizeof p)) return rows_add(v, f[0], p, at, r->path);
  if (!v->missing++) snprintf(v->example, sizeof v->example, "%s", p);
  return rows_add(v, f[0], NULL, at, r->path);
}

/* A path,label row: its label and file (a missing one an error naming the line, or with skip_bad counted). */
static lam_status paths_row(const char *dir, const csv_reader *r, long at, char **f, rows *v, int files, int skip_bad,
                            size_t *skipped) {
  if (!f[0][0] || !f[1][0])
    return LAM_FAIL(LAM_ERR_IO, "%s:%ld: the %s is empty; a row is path,label", r->path, at, !f[0][0] ? "path" : "label");
  if (!files) return rows_add(v, f[1], NULL, at, r->path);
  char p[PATH_MAX];
  if ((size_t)snprintf(p, sizeof p, "%s%s%s", f[0][0] == '/' ? "" : dir, f[0][0] == '/' ? "" : "/", f[0]) >= sizeof p)
    return LAM_FAIL(LAM_ERR_IO, "%s:%ld: the path is longer than a path can be", r->path, at);
  if (data_is_file(p)) return rows_add(v, f[1], p, at, r->path);
  if (skip_bad) return ++*skipped, rows_add(v, f[1], NULL, at, r->path);
  return LAM_FAIL(LAM_ERR_IO, "%s:%ld: no video file '%s' (a path is relative to '%s' or absolute); fix the row, or "
                  "leave such rows out with --skip-bad", r->path, at, p, dir);
}

static const char *const KINETICS_HEADER = "label,youtube_id,time_start,time_end,split";

/* The rows of the list at path (files: each row's file looked for; else the labels only). */
static lam_status read_list(const char *dir, const char *path, int files, int skip_bad, rows *v, size_t *skipped) {
  csv_reader r;
  LAM_TRY(csv_open(&r, path));
  char *f[CSV_MAX_FIELDS];
  int n, got, kind = 0, want = 2;
  long at;
  lam_status s = LAM_OK;
  while (s == LAM_OK && (got = csv_next(&r, f, &n, &at)) == 1) {
    if (!kind) { /* the first record: a header, or (path,label) the first row */
      kind = first_record_kind(f, n);
      if (kind == LIST_KINETICS) {
        want = n == 6 ? 6 : 5;
        if ((n != 5 && n != 6) || strcasecmp(f[2], "time_start") || strcasecmp(f[3], "time_end") ||
            strcasecmp(f[4], "split") || (n == 6 && strcasecmp(f[5], "is_cc")))
          s = LAM_FAIL(LAM_ERR_IO, "%s:%ld: a header of %d columns beginning label,youtube_id; Kinetics' is %s (is_cc "
                       "may follow)", path, at, n, KINETICS_HEADER);
        continue;
      }
      if (n >= 1 && !strcasecmp(f[0], "youtube_id")) {
        s = LAM_FAIL(LAM_ERR_IO, "%s:%ld: a Kinetics list without a label column (Kinetics' test list): lamina needs "
                     "the labels; give the validation list (validate.csv or val.csv) as the test part", path, at);
        continue;
      }
      kind = LIST_PATHS;
      if (n == 2 && !strcasecmp(f[0], "path") && !strcasecmp(f[1], "label")) continue;
      if (n == 2 && !video_file_name(f[0])) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s%s%s", f[0][0] == '/' ? "" : dir, f[0][0] == '/' ? "" : "/", f[0]);
        if (!data_is_file(p)) {
          s = LAM_FAIL(LAM_ERR_IO, "%s:%ld: '%s,%s' is neither the header path,label nor a row of a video file and its "
                       "class (nor Kinetics' header %s)", path, at, f[0], f[1], KINETICS_HEADER);
          continue;
        }
      }
    }
    if (n != want)
      s = LAM_FAIL(LAM_ERR_IO, "%s:%ld: %d field%s; a row of this list is %s (a field holding a comma is quoted: "
                   "\"a,b\")", path, at, n, n == 1 ? "" : "s", kind == LIST_KINETICS ? KINETICS_HEADER : "path,label");
    else if (kind == LIST_KINETICS)
      s = kinetics_row(dir, &r, at, f, v, files);
    else
      s = paths_row(dir, &r, at, f, v, files, skip_bad, skipped);
  }
  if (s == LAM_OK && got < 0) s = LAM_ERR_IO; /* csv_next set the message */
  csv_close(&r);
  return s;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The training list's labels, sorted, each once: the classes (missing files' rows' too, so that both parts have
 * one set of classes). */
static lam_status classes_of(const rows *v, const char *path, char ***names, size_t *nclasses) {
  char **u = malloc((v->n ? v->n : 1) * sizeof *u);
  if (!u) return LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video list '%s': no host memory for its classes", path);
  for (size_t i = 0; i < v->n; i++) u[i] = v->r[i].label;
  qsort(u, v->n, sizeof *u, cmp_str);
  size_t k = 0;
  for (size_t i = 0; i < v->n; i++)
    if (!k || strcmp(u[k - 1], u[i])) u[k++] = u[i];
  lam_status s = LAM_OK;
  if (k == 0 || k > VIDEO_MAX_CLASSES)
    s = LAM_FAIL(LAM_ERR_IO, "video list '%s' names %zu classes; it needs 1 to %d", path, k, VIDEO_MAX_CLASSES);
  for (size_t i = 0; s == LAM_OK && i < k; i++) /* copies: the rows go, the names stay */
    if (!(u[i] = strdup(u[i]))) {
      for (size_t j = 0; j < i; j++) free(u[j]);
      s = LAM_FAIL(LAM_ERR_OUT_OF_MEMORY, "video list '%s': no host memory for its classes", path);
    }
  if (s != LAM_OK) {
    free(u);
    return s;
  }
  *names = u, *nclasses = k;
  return LAM_OK;
}

lam_status video_csv_scan(const char *dir, int train, lam_image_opts *o, video_list *l, char ***names,
                          size_t *nclasses) {
  char tpath[PATH_MAX], ppath[PATH_MAX];
  *names = NULL, *nclasses = 0;
  if ((size_t)snprintf(tpath, sizeof tpath, "%s/train.csv", dir) >= sizeof tpath)
    return LAM_FAIL(LAM_ERR_INVALID_ARG, "video list: the folder name '%s' is too long", dir);
  if (train) snprintf(ppath, sizeof ppath, "%s", tpath);
  else test_list(dir, ppath, sizeof ppath);
  if (!ppath[0])
    return LAM_FAIL(LAM_ERR_IO, "video list '%s' has train.csv but no val.csv, validate.csv or test.csv beside it: add "
                    "one (rows as train.csv's), or train with --val-split F, whose held-out part is then the test part",
                    tpath);
  rows tr = {0}, pr = {0};
  size_t skipped = 0;
  lam_status s = read_list(dir, tpath, train, o->skip_bad, &tr, &skipped);
  if (s == LAM_OK) s = classes_of(&tr, tpath, names, nclasses);
  if (s == LAM_OK && !train) s = read_list(dir, ppath, 1, o->skip_bad, &pr, &skipped);
  const rows *p = train ? &tr : &pr;
  for (size_t i = 0; s == LAM_OK && i < p->n; i++) {
    const row *e = &p->r[i];
    const char *const key = e->label;
    char **hit = bsearch(&key, *names, *nclasses, sizeof **names, cmp_str);
    if (!hit)
      s = LAM_FAIL(LAM_ERR_IO, "%s:%ld: label '%s' is not a class of the training list '%s' (which names %zu: '%s' to "
                   "'%s')", ppath, e->line, e->label, tpath, *nclasses, (*names)[0], (*names)[*nclasses - 1]);
    else if (e->path)
      s = video_list_add(l, e->path, (int)(hit - *names));
  }
  if (s == LAM_OK && p->missing) { /* Kinetics sets always lack some videos: said once, not an error */
    o->missing = p->missing;
    snprintf(o->missing_note, sizeof o->missing_note, "%zu of %zu videos listed in %.400s are missing, e.g. %.400s",
             p->missing, p->listed, ppath, p->example);
  }
  if (s == LAM_OK && l->n == 0)
    s = LAM_FAIL(LAM_ERR_IO, "video list '%s': no video file of it is there%s%s", ppath, p->missing ? ": " : "",
                 p->missing ? o->missing_note : "");
  o->skipped += skipped;
  rows_free(&tr), rows_free(&pr);
  if (s != LAM_OK && *names) folder_names_free(*names, *nclasses), *names = NULL, *nclasses = 0;
  return s;
}
