/* log.h: one line per event on stderr, written with one write(2) so lines
 * from several threads never interleave. Every caller writes its fields
 * once, logfmt style ("run_id=... killed_by=none error=\"...\""); the
 * format chosen at start (--log-format) decides how the line goes out:
 *
 *   logfmt  ts=2024-05-01T12:00:00.000Z event=run run_id=... killed_by=none
 *   json    {"time":"2024-05-01T12:00:00.000Z","level":"info","event":"run",
 *            "run_id":"...","killed_by":"none",...}
 *
 * JSON is read from the logfmt fields, so both formats carry every event
 * and field: key=value and key="quoted value" become members (a quoted
 * value ends at the last quote before the next " key=" or the line's end);
 * a bare value that is a decimal integer becomes a number, true and false
 * booleans, except for identifiers (keys ending in _id, and session, key,
 * env, name, version), which stay strings; words outside any field are
 * gathered into "text". "level" is info, warning or error, by the event. */
#ifndef SBX_LOG_H
#define SBX_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum log_format { LOG_FORMAT_LOGFMT, LOG_FORMAT_JSON };

/* Called by main once, before any thread starts (the one setting of the
 * log, read by every thread afterwards). */
void log_set_format(enum log_format format);

void log_line(const char *event, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The line log_line writes (ending in a newline) for a time stamp, an event
 * and its logfmt fields: malloc'd, NULL when out of memory. Pure: for the
 * unit tests. */
char *log_render(enum log_format format, const char *ts, const char *event, const char *fields);

/* A cap on how many lines of one kind are written a second, for events a
 * client can cause at any rate (refused calls). Zeroed = ready. */
struct log_limit {
  _Atomic uint64_t second; /* the monotonic second being counted */
  _Atomic uint64_t written;
  _Atomic uint64_t suppressed; /* lines not written since the last one that was */
};

/* Whether one more line may be written this second (at most per_second);
 * when so, *suppressed is how many were held back before it (and is reset).
 * Lock-free; a few lines over the cap when threads race are allowed. */
bool log_limit_take(struct log_limit *l, unsigned per_second, uint64_t *suppressed);

/* "info", "warning" or "error": the level of an event, by its name. */
const char *log_level(const char *event);

#endif
