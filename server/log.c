/* log.c: see log.h. The JSON form is built with jansson from the logfmt
 * fields every caller writes; its values may hold any byte a caller
 * formatted, so strings that are not UTF-8 are sent with those bytes
 * replaced by '?' (the output is always valid JSON). */
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io.h"

/* Written once by main before any thread exists, read-only afterwards. */
static enum log_format log_format_in_force = LOG_FORMAT_LOGFMT;

void log_set_format(enum log_format format) {
  log_format_in_force = format;
  /* jansson seeds its hash function on first use: do it now, single-threaded. */
  json_object_seed(0);
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

const char *log_level(const char *event) {
  static const char *const warnings[] = {
      "warning", "connection_refused",  "dropped",
      "call",    "env_skipped_entries", "env_store_unknown_entry"};
  if (ends_with(event, "_failed") || ends_with(event, "_error"))
    return "error";
  for (size_t i = 0; i < sizeof(warnings) / sizeof(warnings[0]); i++)
    if (strcmp(event, warnings[i]) == 0)
      return "warning";
  return "info";
}

static bool is_key_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.';
}

/* Length of the key at p when "key=" starts there, else 0. */
static size_t key_at(const char *p) {
  size_t n = 0;
  while (is_key_char(p[n]))
    n++;
  return n > 0 && p[n] == '=' ? n : 0;
}

/* The closing quote of a value opened just before p: the first quote
 * followed by the end or by " key=", else the last quote, else none (the
 * value runs to the end). */
static const char *closing_quote(const char *p) {
  const char *last = NULL;
  for (const char *q = strchr(p, '"'); q != NULL; q = strchr(q + 1, '"')) {
    if (q[1] == '\0' || (q[1] == ' ' && key_at(q + 2) > 0))
      return q;
    last = q;
  }
  return last != NULL ? last : p + strlen(p);
}

/* A JSON string of len bytes at s; bytes of invalid UTF-8 become '?'. */
static json_t *json_text(const char *s, size_t len) {
  json_t *j = json_stringn(s, len);
  if (j != NULL)
    return j;
  char *copy = malloc(len + 1);
  if (copy == NULL)
    return NULL;
  for (size_t i = 0; i < len; i++)
    copy[i] = (unsigned char)s[i] < 0x80 && s[i] != '\0' ? s[i] : '?';
  j = json_stringn(copy, len);
  free(copy);
  return j;
}

static bool is_identifier_key(const char *key) {
  static const char *const ids[] = {"session", "key", "env", "name", "version", "tenant"};
  if (ends_with(key, "_id"))
    return true;
  for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
    if (strcmp(key, ids[i]) == 0)
      return true;
  return false;
}

/* A bare (unquoted) value: a number, a boolean or a string, by its text. */
static json_t *bare_value(const char *key, const char *v, size_t len) {
  if (!is_identifier_key(key)) {
    if (len == 4 && memcmp(v, "true", 4) == 0)
      return json_true();
    if (len == 5 && memcmp(v, "false", 5) == 0)
      return json_false();
    char buf[24];
    if (len > 0 && len < sizeof(buf)) {
      memcpy(buf, v, len);
      buf[len] = '\0';
      const char *digits = buf[0] == '-' ? buf + 1 : buf;
      char *end;
      errno = 0;
      long long n = strtoll(buf, &end, 10);
      if (*digits != '\0' && isdigit((unsigned char)*digits) &&
          (digits[0] != '0' || digits[1] == '\0') && *end == '\0' && errno == 0)
        return json_integer(n);
    }
  }
  return json_text(v, len);
}

/* Sets key (len bytes) in obj; the members the line itself has are
 * never overwritten by a field of the same name. */
static void set_member(json_t *obj, const char *key, size_t key_len, json_t *value) {
  char name[72];
  bool reserved = (key_len == 4 && memcmp(key, "time", 4) == 0) ||
                  (key_len == 5 && memcmp(key, "level", 5) == 0) ||
                  (key_len == 5 && memcmp(key, "event", 5) == 0);
  snprintf(name, sizeof(name), "%s%.*s", reserved ? "field_" : "", (int)key_len, key);
  json_object_set_new(obj, name, value);
}

/* Parses one field or word at p into obj (words into text); returns where
 * the next one starts. */
static const char *parse_field(const char *p, json_t *obj, char *text, size_t text_len) {
  size_t klen = key_at(p);
  if (klen == 0) { /* a word outside any field */
    size_t n = strcspn(p, " ");
    size_t used = strlen(text);
    snprintf(text + used, text_len - used, "%s%.*s", used > 0 ? " " : "", (int)n, p);
    return p + n;
  }
  char key[64];
  snprintf(key, sizeof(key), "%.*s", (int)(klen < 63 ? klen : 63), p);
  const char *v = p + klen + 1;
  if (*v == '"') {
    const char *close = closing_quote(v + 1);
    set_member(obj, p, klen, json_text(v + 1, (size_t)(close - v - 1)));
    return *close == '"' ? close + 1 : close;
  }
  size_t n = strcspn(v, " ");
  set_member(obj, p, klen, bare_value(key, v, n));
  return v + n;
}

static char *render_json(const char *ts, const char *event, const char *fields) {
  json_t *obj = json_object();
  if (obj == NULL)
    return NULL;
  json_object_set_new(obj, "time", json_text(ts, strlen(ts)));
  json_object_set_new(obj, "level", json_string(log_level(event)));
  json_object_set_new(obj, "event", json_text(event, strlen(event)));
  size_t text_len = strlen(fields) + 1;
  char *text = calloc(1, text_len);
  for (const char *p = fields; text != NULL && *p != '\0';) {
    while (*p == ' ')
      p++;
    if (*p != '\0')
      p = parse_field(p, obj, text, text_len);
  }
  if (text != NULL && text[0] != '\0')
    json_object_set_new(obj, "text", json_text(text, strlen(text)));
  free(text);
  char *out = json_dumps(obj, JSON_COMPACT);
  json_decref(obj);
  if (out == NULL)
    return NULL;
  size_t n = strlen(out);
  char *line = realloc(out, n + 2);
  if (line == NULL) {
    free(out);
    return NULL;
  }
  memcpy(line + n, "\n", 2);
  return line;
}

#define LOG_LINE_MAX 2048

/* The logfmt line, byte for byte as it has always been: at most
 * LOG_LINE_MAX - 1 bytes with its newline. Returns the length without the
 * newline, which is written after it; *fields_at gets where the fields
 * start. */
__attribute__((format(printf, 5, 0))) static size_t logfmt_line(char *buf, const char *ts,
                                                                const char *event,
                                                                size_t *fields_at, const char *fmt,
                                                                va_list ap) {
  int n = snprintf(buf, LOG_LINE_MAX, "ts=%s event=%s ", ts, event);
  if (n < 0)
    n = 0;
  if (n > LOG_LINE_MAX - 2)
    n = LOG_LINE_MAX - 2;
  int m = vsnprintf(buf + n, LOG_LINE_MAX - (size_t)n - 1, fmt, ap);
  size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
  if (len > LOG_LINE_MAX - 2)
    len = LOG_LINE_MAX - 2;
  buf[len] = '\n';
  buf[len + 1] = '\0';
  *fields_at = (size_t)n;
  return len;
}

__attribute__((format(printf, 4, 0))) static char *
render_va(enum log_format format, const char *ts, const char *event, const char *fmt, va_list ap) {
  char buf[LOG_LINE_MAX];
  size_t fields_at;
  size_t len = logfmt_line(buf, ts, event, &fields_at, fmt, ap);
  if (format == LOG_FORMAT_LOGFMT)
    return strdup(buf);
  buf[len] = '\0';
  char *line = render_json(ts, event, buf + fields_at);
  if (line != NULL)
    return line;
  buf[len] = '\n'; /* out of memory: the logfmt line rather than nothing */
  return strdup(buf);
}

__attribute__((format(printf, 4, 5))) static char *render(enum log_format format, const char *ts,
                                                          const char *event, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *line = render_va(format, ts, event, fmt, ap);
  va_end(ap);
  return line;
}

char *log_render(enum log_format format, const char *ts, const char *event, const char *fields) {
  return render(format, ts, event, "%s", fields);
}

/* A line in one write when it can be (lines of threads do not mix), the
 * rest after a short write; a failed write loses the line, nothing else. */
static void write_line(const char *buf, size_t len) {
  (void)sbx_write_all(STDERR_FILENO, buf, len);
}

void log_line(const char *event, const char *fmt, ...) {
  char ts[32];
  struct timespec now;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &now);
  gmtime_r(&now.tv_sec, &tm);
  snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
           tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, now.tv_nsec / 1000000);
  va_list ap;
  va_start(ap, fmt);
  if (log_format_in_force == LOG_FORMAT_LOGFMT) {
    /* No allocation: the line is written from the stack, as always. */
    char buf[LOG_LINE_MAX];
    size_t fields_at;
    size_t len = logfmt_line(buf, ts, event, &fields_at, fmt, ap);
    write_line(buf, len + 1);
  } else {
    char *line = render_va(log_format_in_force, ts, event, fmt, ap);
    if (line != NULL)
      write_line(line, strlen(line));
    free(line);
  }
  va_end(ap);
}

bool log_limit_take(struct log_limit *l, unsigned per_second, uint64_t *suppressed) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  uint64_t sec = (uint64_t)now.tv_sec, seen = atomic_load(&l->second);
  if (seen != sec && atomic_compare_exchange_strong(&l->second, &seen, sec))
    atomic_store(&l->written, 0);
  if (atomic_fetch_add(&l->written, 1) >= per_second) {
    atomic_fetch_add(&l->suppressed, 1);
    return false;
  }
  *suppressed = atomic_exchange(&l->suppressed, 0);
  return true;
}
