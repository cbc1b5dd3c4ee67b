/* json.c — the CLI's machine-readable output. JSON through Jansson: objects are built with json_* calls
 * and printed once, so strings (paths, specs, device names) are escaped and numbers that are not finite
 * become null (printf would write -nan, which no JSON reader takes). CSV fields quoted as RFC 4180 asks.
 *
 * Names are bytes on Linux, not always UTF-8, and JSON strings are Unicode: a byte that is not part of
 * valid UTF-8 is written as the lone surrogate \udcXX (XX the byte, 80 to ff), as Python's
 * 'surrogateescape' does, so nothing is lost: json.load gives the str that os.fsdecode gives for those
 * bytes, and os.fsencode turns it back into them. Jansson refuses such strings (it writes only valid
 * UTF-8), so cli_json_str keeps the bytes aside and cli_json_print writes those strings itself. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

json_t *cli_json_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

/* The length of the valid UTF-8 sequence at s (of n bytes), or 0: what Python's strict decoder takes (no
 * overlong forms, no surrogates, nothing above U+10FFFF). */
static size_t utf8_len(const unsigned char *s, size_t n) {
  if (s[0] < 0x80) return 1;
  size_t len = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
  if (!len || len > n) return 0;
  for (size_t i = 1; i < len; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  if (s[0] == 0xe0 && s[1] < 0xa0) return 0; /* overlong */
  if (s[0] == 0xed && s[1] >= 0xa0) return 0; /* a surrogate */
  if (s[0] == 0xf0 && s[1] < 0x90) return 0; /* overlong */
  if (s[0] == 0xf4 && s[1] >= 0x90) return 0; /* above U+10FFFF */
  return len;
}

static int is_utf8(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  for (size_t i = 0, k; i < n; i += k)
    if (!(k = utf8_len(p + i, n - i))) return 0;
  return 1;
}

/* The strings that are not UTF-8, made by cli_json_str since the last print (which they are part of: the
 * CLI builds an object, then prints it): the JSON string holds a placeholder until cli_json_print puts the
 * escaped bytes in its place. The CLI is one thread. */
typedef struct raw_str {
  json_t *j; /* a reference of our own: a row dropped before printing does not leave it dangling */
  char *bytes;
} raw_str;
static raw_str *g_raw;
static size_t g_nraw, g_capraw;

json_t *cli_json_str(const char *s) {
  s = s ? s : "";
  if (is_utf8(s)) {
    json_t *j = json_string(s);
    return j ? j : json_null();
  }
  json_t *j = json_string("");
  char *copy = strdup(s);
  if (g_nraw == g_capraw) {
    size_t cap = g_capraw ? 2 * g_capraw : 8;
    raw_str *v = realloc(g_raw, cap * sizeof *v);
    if (v) g_raw = v, g_capraw = cap;
  }
  if (!j || !copy || g_nraw == g_capraw) { /* out of memory: null rather than a name that is not the file's */
    json_decref(j);
    free(copy);
    return json_null();
  }
  g_raw[g_nraw++] = (raw_str){json_incref(j), copy};
  return j;
}

static void raw_clear(void) {
  for (size_t i = 0; i < g_nraw; i++) {
    json_decref(g_raw[i].j);
    free(g_raw[i].bytes);
  }
  g_nraw = 0;
}

/* s as a JSON string literal, quotes included, to f: valid UTF-8 as is (" \ and control characters
 * escaped, as Jansson does), any other byte as \udcXX. */
static void put_json_bytes(FILE *f, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  size_t n = strlen(s);
  fputc('"', f);
  for (size_t i = 0, k; i < n; i += k) {
    k = utf8_len(p + i, n - i);
    if (!k) {
      fprintf(f, "\\udc%02x", p[i]);
      k = 1;
    } else if (p[i] == '"' || p[i] == '\\') {
      fprintf(f, "\\%c", p[i]);
    } else if (p[i] < 0x20) {
      const char *esc = p[i] == '\n' ? "\\n" : p[i] == '\r' ? "\\r" : p[i] == '\t' ? "\\t" : p[i] == '\b' ? "\\b"
                        : p[i] == '\f' ? "\\f" : NULL;
      if (esc) fputs(esc, f);
      else fprintf(f, "\\u%04x", p[i]);
    } else {
      fwrite(p + i, 1, k, f);
    }
  }
  fputc('"', f);
}

/* Dumps obj with each raw string set to a placeholder "lamina-raw-<nonce>-<i>", the nonce one that occurs
 * nowhere in the text without them: so every placeholder found is one of ours, and no string of the
 * user's is mistaken for one. Returns the text, or NULL (out of memory). */
static char *dump_with_placeholders(json_t *obj, size_t flags, unsigned *nonce) {
  char *plain = json_dumps(obj, flags); /* the raw strings are "" here */
  if (!plain) return NULL;
  char tag[48];
  for (*nonce = 0;; (*nonce)++) {
    snprintf(tag, sizeof tag, "lamina-raw-%u-", *nonce);
    if (!strstr(plain, tag)) break;
  }
  free(plain);
  for (size_t i = 0; i < g_nraw; i++) {
    char ph[64];
    snprintf(ph, sizeof ph, "lamina-raw-%u-%zu", *nonce, i);
    if (json_string_set(g_raw[i].j, ph)) return NULL;
  }
  return json_dumps(obj, flags);
}

/* Writes text to stdout with each placeholder replaced by its string's bytes, escaped. */
static void put_replacing(const char *text, unsigned nonce) {
  char prefix[48];
  int plen = snprintf(prefix, sizeof prefix, "\"lamina-raw-%u-", nonce);
  const char *p = text;
  for (const char *hit; (hit = strstr(p, prefix));) {
    char *end;
    unsigned long i = strtoul(hit + plen, &end, 10);
    fwrite(p, 1, (size_t)(hit - p), stdout);
    if (i < g_nraw && *end == '"') {
      put_json_bytes(stdout, g_raw[i].bytes);
      p = end + 1;
    } else { /* cannot happen: the nonce occurs only in placeholders */
      fputs(prefix, stdout);
      p = hit + plen;
    }
  }
  fputs(p, stdout);
  fputc('\n', stdout);
}

int cli_json_print(json_t *obj) {
  if (!obj) {
    raw_clear();
    fprintf(stderr, "lamina: out of host memory making the JSON output\n");
    return 1;
  }
  /* 10 significant digits: a float's worth, without the noise of %.17g on every value */
  const size_t flags = JSON_COMPACT | JSON_REAL_PRECISION(10);
  unsigned nonce = 0;
  char *text = g_nraw ? dump_with_placeholders(obj, flags, &nonce) : json_dumps(obj, flags);
  json_decref(obj);
  if (!text) {
    raw_clear();
    fprintf(stderr, "lamina: out of host memory making the JSON output\n");
    return 1;
  }
  if (g_nraw) put_replacing(text, nonce);
  else puts(text);
  free(text);
  raw_clear();
  return fflush(stdout) ? 1 : 0;
}

void cli_csv_field(FILE *f, const char *s) {
  s = s ? s : "";
  if (!s[strcspn(s, ",\"\r\n")]) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}
