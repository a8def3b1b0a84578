/* error.c: see error.h. */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

__attribute__((format(printf, 3, 0))) static void format(char *buf, size_t len, const char *fmt,
                                                      va_list ap) {
  if (vsnprintf(buf, len, fmt, ap) < 0)
    buf[0] = '\0';
}

int sbx_error_set(struct sbx_error *e, sbx_code code, int errnum, const char *fmt, ...) {
  if (e == NULL)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  format(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  size_t n = strlen(e->msg);
  if (errnum != 0 && n < sizeof e->msg)
    snprintf(e->msg + n, sizeof e->msg - n, ": %s", strerror(errnum));
  e->code = code;
  e->errnum = errnum;
  return -1;
}

int sbx_error_wrap(struct sbx_error *e, const char *fmt, ...) {
  if (e == NULL)
    return -1;
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  format(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  size_t p = strlen(prefix), m = strlen(e->msg);
  if (p + 2 + m >= sizeof e->msg)
    m = sizeof e->msg - p - 3;
  memmove(e->msg + p + 2, e->msg, m);
  e->msg[p + 2 + m] = '\0';
  memcpy(e->msg, prefix, p);
  memcpy(e->msg + p, ": ", 2);
  return -1;
}

int sbx_error_from_engine(struct sbx_error *e, sbx_code code, const struct sandbox_error *se,
                          const char *fmt, ...) {
  if (e == NULL)
    return -1;
  char context[512];
  va_list ap;
  va_start(ap, fmt);
  format(context, sizeof context, fmt, ap);
  va_end(ap);
  snprintf(e->msg, sizeof e->msg, "%s: %s", context, se->msg);
  e->code = code;
  e->errnum = se->errnum;
  return -1;
}
