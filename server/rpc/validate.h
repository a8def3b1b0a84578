/* validate.h: checks a RunCodeRequest against the settings before it is
 * queued, so that every bad input gets a clear answer naming the field and
 * the allowed range, and nothing runs. Pure: no I/O, no engine. */
#ifndef SBX_VALIDATE_H
#define SBX_VALIDATE_H

#include <stdbool.h>
#include <stddef.h>

#include "egress.h"
#include "error.h"
#include "sandbox.pb-c.h"
#include "sandbox/sandbox.h"
#include "runtimes.h"
#include "settings.h"

/* execve limits: one string (the kernel's MAX_ARG_STRLEN, 32 pages) and all
 * of args and env together (a quarter of the 8 MiB stack limit less 64 KiB,
 * leaving room for the interpreter's own argv and the minimum environment). */
#define VALIDATE_MAX_EXEC_STRING (128 * 1024)
#define VALIDATE_MAX_EXEC_BYTES (2 * 1024 * 1024 - 64 * 1024)

/* Returns 0 and fills limits (defaults applied: the server's, or the
 * runtime's where its manifest needs more), compile (a compiled runtime's
 * compile stage's, the same way; zeros for the others) and *runtime
 * (available, from
 * runtimes), or -1 with err (INVALID_ARGUMENT naming the field and what is
 * allowed; FAILED_PRECONDITION for an unavailable runtime). */
int validate_run_request(const Sandbox__V1__RunCodeRequest *req, const struct server_settings *s,
                         const struct runtime_table *runtimes,
                         const struct settings_limits *tenant_max, const char *tenant,
                         const struct egress_allow *tenant_egress, struct sandbox_limits *limits,
                         struct sandbox_limits *compile, const struct runtime **runtime,
                         struct sbx_error *err);

/* A session id from a request: 0, or -1 with err (INVALID_ARGUMENT). */
int validate_session_id(const char *id, struct sbx_error *err);

/* Relative path, components not empty, ".", ".."; at most 255 bytes. */
bool validate_relative_path(const char *path);
/* What validate_relative_path requires, in the words of its refusals. */
#define VALIDATE_RELATIVE_PATH_RULE                                                                \
  "must be a relative path (below mounts/) of at most 255 bytes without empty, \".\" or \"..\" "   \
  "components"

#endif
