/* fuzz_numbers.c — the CLI's number parsing (src/cli/args.c): counts with suffixes and exponents, whole
 * numbers in a range, 64-bit seeds. Each either parses to a value within its limits or is a usage error. */
#define _GNU_SOURCE /* memfd_create (fuzz_util.h) */
#include <string.h>

#include "../src/cli/cli.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
  if (n > 256) return 0;
  char s[257];
  memcpy(s, data, n);
  s[n] = '\0';
  size_t count = 0;
  if (cli_parse_count("fuzz", "--n", s, (size_t)1 << 40, &count) == 0 && count > ((size_t)1 << 40)) abort();
  long v = 0;
  if (cli_parse_int("fuzz", "--batch", s, 1, 65536, &v) == 0 && (v < 1 || v > 65536)) abort();
  uint64_t u = 0;
  cli_parse_u64("fuzz", "--seed", s, &u);
  return 0;
}
