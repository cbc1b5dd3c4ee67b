/* args.c — parsing option values for the CLI; every bad value names the option and what it accepts. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "lamina%s%s: ", cmd ? " " : "", cmd ? cmd : "");
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(see 'lamina%s%s --help')\n", cmd ? " " : "", cmd ? cmd : "");
  return EXIT_USAGE;
}

/* Digits, optionally a K/M/G suffix (powers of 1000) or an exponent (1e8). */
int cli_parse_count(const char *cmd, const char *opt, const char *s, size_t max, size_t *out) {
  const char *p = s;
  while (*p == ' ') p++;
  if (*p == '-' || *p == '+' || !*p) goto bad;
  errno = 0;
  char *end = NULL;
  double v;
  if (strpbrk(p, "eE.")) {
    v = strtod(p, &end);
    if (end == p || (errno && !(errno == ERANGE && v > 1))) goto bad;
    if (errno == ERANGE) goto big; /* 1e999 */
  } else {
    unsigned long long u = strtoull(p, &end, 10);
    if (end == p) goto bad; /* not digits at all: 'abc', 'nan', 'inf' */
    if (errno == ERANGE) goto big;
    v = (double)u;
    if (!*end && u <= max) { *out = (size_t)u; return 0; }
  }
  double mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1e3, end++;
  else if (*end == 'M' || *end == 'm') mult = 1e6, end++;
  else if (*end == 'G' || *end == 'g') mult = 1e9, end++;
  if (*end) goto bad;
  v *= mult;
  if (!(v >= 0) || v != floor(v)) goto bad;
  if (v > (double)max) goto big;
  *out = (size_t)v;
  return 0;
bad:
  cli_usage_error(cmd, "%s: '%s' is not a count (use digits, 1e8, or a K/M/G suffix such as 100M)", opt, s);
  return -1;
big:
  cli_usage_error(cmd, "%s: '%s' is larger than the maximum %zu", opt, s, max);
  return -1;
}

int cli_parse_int(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out) {
  errno = 0;
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno) {
    cli_usage_error(cmd, "%s: '%s' is not a whole number", opt, s);
    return -1;
  }
  if (v < lo || v > hi) {
    cli_usage_error(cmd, "%s: %ld is out of range (%ld to %ld)", opt, v, lo, hi);
    return -1;
  }
  *out = v;
  return 0;
}

/* Decimal (a leading 0 is not octal: --seed 010 is ten), or hexadecimal after 0x. */
int cli_parse_u64(const char *cmd, const char *opt, const char *s, uint64_t *out) {
  errno = 0;
  char *end = NULL;
  if (*s == '-' || *s == '+' || *s == ' ') goto bad;
  int hex = s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  unsigned long long v = strtoull(s, &end, hex ? 16 : 10);
  if (end == s || *end || errno) goto bad;
  *out = v;
  return 0;
bad:
  cli_usage_error(cmd, "%s: '%s' is not a non-negative whole number (decimal, or hexadecimal after 0x; at most "
                       "18446744073709551615)", opt, s);
  return -1;
}

/* --decode auto|cpu|gpu: LAM_DECODE_AUTO, _CPU or _GPU in *out (train, eval and bench data share it). */
int cli_parse_decode(const char *cmd, const char *s, int *out) {
  if (!strcmp(s, "auto")) *out = LAM_DECODE_AUTO;
  else if (!strcmp(s, "cpu")) *out = LAM_DECODE_CPU;
  else if (!strcmp(s, "gpu")) *out = LAM_DECODE_GPU;
  else return cli_usage_error(cmd, "--decode: '%s' is not auto, cpu or gpu", s), -1;
  return 0;
}

const char *cli_sub_names(const cli_sub *t, char *buf, size_t size) {
  size_t n = 0;
  buf[0] = '\0';
  for (int i = 0; t[i].name && n < size; i++) n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? ", " : "", t[i].name);
  return buf;
}
