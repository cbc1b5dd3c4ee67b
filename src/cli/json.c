/* json.c — the CLI's --json output through Jansson: objects are built with json_* calls and printed
 * once, so strings (paths, specs, device names) are escaped and numbers that are not finite become
 * null (printf would write -nan, which no JSON reader takes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

json_t *cli_json_num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

json_t *cli_json_str(const char *s) {
  json_t *j = json_string(s ? s : "");
  return j ? j : json_null(); /* not UTF-8: Jansson refuses it; null rather than a broken document */
}

int cli_json_print(json_t *obj) {
  if (!obj) {
    fprintf(stderr, "lamina: out of host memory making the JSON output\n");
    return 1;
  }
  /* 10 significant digits: a float's worth, without the noise of %.17g on every value */
  char *text = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(10));
  json_decref(obj);
  if (!text) {
    fprintf(stderr, "lamina: out of host memory making the JSON output\n");
    return 1;
  }
  puts(text);
  free(text);
  return fflush(stdout) ? 1 : 0;
}
