/* status.h — how lamina reports failures: a status code plus a thread-local message that names what
 * failed and where (file:line). Every failure path in the library goes through LAM_FAIL. */
#ifndef LAMINA_STATUS_H
#define LAMINA_STATUS_H

#include "lamina.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Records "<message> [file:line]" as this thread's last error and returns s. */
lam_status lam_fail_at(lam_status s, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
void lam_clear_error(void);

#define LAM_FAIL(status, ...) lam_fail_at((status), __FILE__, __LINE__, __VA_ARGS__)
#define LAM_TRY(expr)                       \
  do {                                      \
    lam_status lam_try_s_ = (expr);         \
    if (lam_try_s_ != LAM_OK) return lam_try_s_; \
  } while (0)
#define LAM_CHECK_ARG(cond, ...) \
  do {                           \
    if (!(cond)) return LAM_FAIL(LAM_ERR_INVALID_ARG, __VA_ARGS__); \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
