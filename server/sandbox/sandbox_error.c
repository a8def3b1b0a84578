/* sandbox_error.c: formatting of sandbox_error values. */
#include "sandbox_error.h"

#include <stdio.h>
#include <string.h>

int sandbox_error_set(struct sandbox_error *err, int errnum, const char *fmt, ...) {
  if (err == NULL)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  if (n < 0)
    n = 0;
  if (errnum != 0 && (size_t)n < sizeof err->msg)
    snprintf(err->msg + n, sizeof err->msg - (size_t)n, ": %s", strerror(errnum));
  err->errnum = errnum;
  return -1;
}

int sandbox_error_wrap(struct sandbox_error *err, const char *fmt, ...) {
  if (err == NULL)
    return -1;
  char prefix[256];
  char old[sizeof err->msg];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, err->msg, sizeof old);
  snprintf(err->msg, sizeof err->msg, "%s: %s", prefix, old);
  return -1;
}
