/* log.h: one line per event on stderr, logfmt style
 * ("ts=... event=run run_id=... killed_by=none"), written with one write(2)
 * so lines from several threads never interleave. */
#ifndef SBX_LOG_H
#define SBX_LOG_H

void log_line(const char *event, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
