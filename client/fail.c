/* fail.c: see fail.h. */
#include "fail.h"

#include <stdarg.h>

#include "errmsg.h"

int sbxc_fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    errmsg_vset(err, errlen, 0, fmt, ap);
    va_end(ap);
  }
  return -1;
}
