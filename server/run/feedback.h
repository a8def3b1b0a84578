/* feedback.h: short hints about how a run ended, for a person or an LLM
 * agent to act on ("output truncated at 64 KiB", "timed out after 5 s"). */
#ifndef SBX_FEEDBACK_H
#define SBX_FEEDBACK_H

#include <stddef.h>

#include "sandbox/sandbox.h"

#define FEEDBACK_MAX_LINES 16
#define FEEDBACK_LINE_MAX 160

struct feedback {
  char lines[FEEDBACK_MAX_LINES][FEEDBACK_LINE_MAX];
  size_t n;
};

/* Appends one line (dropped when the list is full). */
void feedback_add(struct feedback *fb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* How the run ended, in lines: field names the limits in the request
 * ("limits", or "compile_limits" for a compile stage), who what was
 * killed ("the program", "the compiler"). */
void feedback_build(const struct sandbox_result *result, const struct sandbox_limits *limits,
                    const char *field, const char *who, struct feedback *fb);

/* "add 'X' to requirements" when stderr (hostile bytes) ends in
 * ModuleNotFoundError: No module named 'X' (X's top-level package; the
 * distribution's name where it is known to differ, e.g. yaml -> pyyaml). */
void feedback_missing_module(const uint8_t *stderr_data, size_t len, struct feedback *fb);

/* Points at the network policy when stderr (hostile bytes) shows a socket
 * the sandbox refused (Python's PermissionError from socket.py): a thread
 * that died of it often leaves the program waiting until the timeout. */
void feedback_network_refused(const uint8_t *stderr_data, size_t len, struct feedback *fb);

#endif
