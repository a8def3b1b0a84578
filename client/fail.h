/* fail.h: the one way libsandbox-client (and the CLIs and the MCP core
 * over it) puts an error's text into a caller's err buffer. It never
 * writes past errlen, and a NULL err or a zero errlen is allowed: the
 * caller did not want the text. */
#ifndef SBXC_FAIL_H
#define SBXC_FAIL_H

#include <stddef.h>

/* err = fmt's text (when err is not NULL); returns -1. */
int sbxc_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
