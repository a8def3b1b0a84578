/* error.c: see error.h; the text is made by common/errmsg.c, as the
 * engine's is. */
#include "error.h"

#include <stdio.h>

#include "errmsg.h"

int sbx_error_set(struct sbx_error *e, sbx_code code, int errnum, const char *fmt, ...) {
  if (e == NULL)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  errmsg_vset(e->msg, sizeof e->msg, errnum, fmt, ap);
  va_end(ap);
  e->code = code;
  e->errnum = errnum;
  return -1;
}

int sbx_error_wrap(struct sbx_error *e, const char *fmt, ...) {
  if (e == NULL)
    return -1;
  va_list ap;
  va_start(ap, fmt);
  errmsg_vwrap(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  return -1;
}

int sbx_error_from_engine(struct sbx_error *e, sbx_code code, const struct sandbox_error *se,
                          const char *fmt, ...) {
  if (e == NULL)
    return -1;
  snprintf(e->msg, sizeof e->msg, "%s", se->msg);
  va_list ap;
  va_start(ap, fmt);
  errmsg_vwrap(e->msg, sizeof e->msg, fmt, ap);
  va_end(ap);
  e->code = code;
  e->errnum = se->errnum;
  return -1;
}
