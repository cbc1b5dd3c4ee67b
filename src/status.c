/* status.c — the thread-local last-error message and the names of status codes. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char g_last_error[1024];

const char *lam_last_error(void) { return g_last_error; }

void lam_clear_error(void) { g_last_error[0] = '\0'; }

/* file (a __FILE__) from the repository's root: "src/data/dataset.c". The build names the root
 * (LAMINA_SOURCE_DIR, CMake's source folder); elsewhere (a build by hand, a moved tree) the part from the
 * last folder named src on. The first "src/" was wrong wherever the checkout's own path held one:
 * /home/me/src/src/... printed [src/src/data/dataset.c:445]. */
static const char *source_relative(const char *file) {
#ifdef LAMINA_SOURCE_DIR
  size_t root = strlen(LAMINA_SOURCE_DIR);
  if (root && strncmp(file, LAMINA_SOURCE_DIR, root) == 0 && file[root] == '/') return file + root + 1;
#endif
  const char *last = NULL;
  for (const char *p = file; (p = strstr(p, "src/")); p++)
    if (p == file || p[-1] == '/') last = p;
  return last ? last : file;
}

/* A message too long for the buffer ends at its last word that fits, with "...", leaving room for the location:
 * not mid-word, and never without saying where it came from. Returns the new length. */
static int cut_at_word(char *msg, size_t room) {
  size_t end = room - 4; /* "..." and its NUL */
  while (end > room / 2 && msg[end] != ' ') end--;
  memcpy(msg + end, "...", 4);
  return (int)end + 3;
}

lam_status lam_fail_at(lam_status s, const char *file, int line, const char *fmt, ...) {
  const char *short_file = source_relative(file);
  va_list ap;
  va_start(ap, fmt);
  int len = vsnprintf(g_last_error, sizeof g_last_error, fmt, ap);
  va_end(ap);
  if (len < 0) len = 0;
  if ((size_t)len >= sizeof g_last_error - 64) len = cut_at_word(g_last_error, sizeof g_last_error - 64);
  snprintf(g_last_error + len, sizeof g_last_error - (size_t)len, " [%s:%d]", short_file, line);
  return s;
}

const char *lam_status_str(lam_status s) {
  switch (s) {
    case LAM_OK: return "ok";
    case LAM_ERR_INVALID_ARG: return "invalid argument";
    case LAM_ERR_NO_DEVICE: return "no CUDA device";
    case LAM_ERR_CUDA: return "CUDA error";
    case LAM_ERR_OUT_OF_MEMORY: return "out of memory";
    case LAM_ERR_UNSUPPORTED: return "unsupported";
    case LAM_ERR_IO: return "I/O error";
    case LAM_ERR_DIVERGED: return "diverged";
    case LAM_ERR_INTERRUPTED: return "interrupted";
  }
  return "unknown status";
}
