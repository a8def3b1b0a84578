/* log.c: see log.h. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

void log_line(const char *event, const char *fmt, ...) {
  char buf[2048];
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(buf, sizeof(buf), "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ event=%s ",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   ts.tv_nsec / 1000000, event);
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
  va_end(ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > sizeof(buf) - 2)
    len = sizeof(buf) - 2;
  buf[len++] = '\n';
  ssize_t ignored = write(STDERR_FILENO, buf, len);
  (void)ignored;
}
