/* sandbox_error.c: formatting of sandbox_error values (common/errmsg.c). */
#include "sandbox_error.h"

#include "errmsg.h"

int sandbox_error_set(struct sandbox_error *err, int errnum, const char *fmt, ...) {
  if (err == NULL)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  errmsg_vset(err->msg, sizeof err->msg, errnum, fmt, ap);
  va_end(ap);
  err->errnum = errnum;
  return -1;
}

int sandbox_error_wrap(struct sandbox_error *err, const char *fmt, ...) {
  if (err == NULL)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  errmsg_vwrap(err->msg, sizeof err->msg, fmt, ap);
  va_end(ap);
  return -1;
}
