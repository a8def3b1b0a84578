/* errmsg.c: see errmsg.h. */
#include "errmsg.h"

#include <stdio.h>
#include <string.h>

void errmsg_vset(char *msg, size_t len, int errnum, const char *fmt, va_list ap) {
  if (len == 0)
    return;
  int n = vsnprintf(msg, len, fmt, ap);
  if (n < 0) {
    msg[0] = '\0';
    n = 0;
  }
  if (errnum != 0 && (size_t)n < len)
    snprintf(msg + n, len - (size_t)n, ": %s", strerror(errnum));
}

void errmsg_vwrap(char *msg, size_t len, const char *fmt, va_list ap) {
  char prefix[512];
  if (len == 0)
    return;
  if (vsnprintf(prefix, sizeof prefix, fmt, ap) < 0)
    prefix[0] = '\0';
  size_t p = strlen(prefix), m = strnlen(msg, len - 1);
  if (p + 3 > len) /* not even the prefix fits: keep the old message */
    return;
  if (p + 2 + m >= len)
    m = len - p - 3;
  memmove(msg + p + 2, msg, m);
  msg[p + 2 + m] = '\0';
  memcpy(msg, prefix, p);
  memcpy(msg + p, ": ", 2);
}
