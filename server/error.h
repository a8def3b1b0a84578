/* error.h: the server's errors as values, the engine's sandbox_error with a
 * status: what failed ("mount workspace s-3: No space left on device"), the
 * errno of the cause, and the status a call is answered with. Every
 * fallible function of the server returns -1 and fills one; the caller adds
 * context (sbx_error_wrap) or decides the status from errnum; only main
 * decides to exit. The suffix "; nothing ran" is never written here: it
 * is added once, where every refused RunCode is answered, by
 * call_not_run_message (rpc/call.c: the handler's refusals and the run
 * table's ends of runs that never ran alike). */
#ifndef SBX_ERROR_H
#define SBX_ERROR_H

#include "sandbox/sandbox_error.h"
#include "status.h"

#define SBX_ERROR_MAX 4096 /* room for a failed install's output tail */

struct sbx_error {
  sbx_code code; /* the status to answer with; INTERNAL unless the setter knows better */
  int errnum;    /* errno of the cause, 0 if none */
  char msg[SBX_ERROR_MAX];
};

/* Fills e (may be NULL) with code, errnum and the message, to which
 * ": strerror(errnum)" is added when errnum != 0. Returns -1. */
int sbx_error_set(struct sbx_error *e, sbx_code code, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Prefixes e->msg with context: "<context>: <old message>". Returns -1. */
int sbx_error_wrap(struct sbx_error *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* From an engine error: "<context>: <engine message>", its errnum. */
int sbx_error_from_engine(struct sbx_error *e, sbx_code code, const struct sandbox_error *se,
                          const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
