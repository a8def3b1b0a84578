/* sandbox_error.h: errors as values with context, crun-style.
 *
 * Every fallible function returns a negative value and fills a
 * struct sandbox_error with errno and a message that names what failed
 * ("mount /workspace: Permission denied"). Only main decides to exit. */
#ifndef SANDBOX_ERROR_H
#define SANDBOX_ERROR_H

#include <stdarg.h>

struct sandbox_error {
  int errnum;    /* errno of the cause, 0 if none */
  char msg[512]; /* context and, when errnum != 0, strerror(errnum) */
};

/* Fills err (may be NULL) and returns -1. */
int sandbox_error_set(struct sandbox_error *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes err->msg with more context: "while X: <old message>". Returns -1. */
int sandbox_error_wrap(struct sandbox_error *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
