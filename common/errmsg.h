/* errmsg.h: the text of an error value, shared by the engine's
 * sandbox_error and the server's sbx_error: what failed, then the cause's
 * strerror; context added in front as the error travels up. Both cut at
 * the buffer's end, never overflow, and always leave it terminated. */
#ifndef SBX_ERRMSG_H
#define SBX_ERRMSG_H

#include <stdarg.h>
#include <stddef.h>

/* msg = fmt's text, then ": strerror(errnum)" when errnum != 0. */
void errmsg_vset(char *msg, size_t len, int errnum, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* msg = "<fmt's text>: <msg as it was>". */
void errmsg_vwrap(char *msg, size_t len, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
