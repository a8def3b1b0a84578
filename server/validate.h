/* validate.h: checks a RunCodeRequest against the settings before it is
 * queued, so that every bad input gets a clear answer naming the field and
 * the allowed range, and nothing runs. Pure: no I/O, no engine. */
#ifndef SBX_VALIDATE_H
#define SBX_VALIDATE_H

#include <stddef.h>

#include "sandbox.pb-c.h"
#include "sandbox/sandbox.h"
#include "settings.h"
#include "status.h"

#define RUN_ID_MAX 64
/* execve limits: one string (the kernel's MAX_ARG_STRLEN, 32 pages) and all
 * of args and env together (a quarter of the 8 MiB stack limit less 64 KiB,
 * leaving room for the interpreter's own argv and the minimum environment). */
#define VALIDATE_MAX_EXEC_STRING (128 * 1024)
#define VALIDATE_MAX_EXEC_BYTES (2 * 1024 * 1024 - 64 * 1024)

/* Returns SBX_OK and fills limits (defaults applied) or another code with a
 * message in msg. */
sbx_code validate_run_request(const Sandbox__V1__RunCodeRequest *req,
                              const struct server_settings *s, struct sandbox_limits *limits,
                              char *msg, size_t msglen);

/* [A-Za-z0-9._-]{1,64}, not "." or "..": safe as one path component. */
int validate_run_id(const char *run_id);

/* Relative path, components not empty, ".", ".."; at most 255 bytes. */
int validate_relative_path(const char *path);

#endif
