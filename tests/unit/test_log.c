/* The log's two formats (server/log.c): logfmt byte for byte as the
 * callers write it, and JSON read from the same fields: quoted values
 * (with quotes inside), numbers, booleans, identifiers kept as strings,
 * words outside fields, invalid UTF-8, names that would clash with the
 * line's own members, and the level by event. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define TS "2024-05-01T12:00:00.000Z"

static void expect(enum log_format f, const char *event, const char *fields, const char *want) {
  char *line = log_render(f, TS, event, fields);
  assert_non_null(line);
  assert_string_equal(line, want);
  free(line);
}

static void logfmt_unchanged(void **state) {
  expect(LOG_FORMAT_LOGFMT, "run", "run_id=abc killed_by=none wall_ms=12",
         "ts=" TS " event=run run_id=abc killed_by=none wall_ms=12\n");
  expect(LOG_FORMAT_LOGFMT, "stopped", "", "ts=" TS " event=stopped \n");
}

static void json_run_event(void **state) {
  expect(
      LOG_FORMAT_JSON, "run",
      "run_id=123 tenant=42 slot=0 session=- status=OK killed_by=timeout exit_code=-1 signal=9 "
      "wall_ms=509 env=000000000042 seccomp=true error=\"a \"quoted\" word\" duration_ms=511",
      "{\"time\":\"" TS "\",\"level\":\"info\",\"event\":\"run\",\"run_id\":\"123\","
      "\"tenant\":\"42\",\"slot\":0,\"session\":\"-\",\"status\":\"OK\",\"killed_by\":\"timeout\","
      "\"exit_code\":-1,\"signal\":9,\"wall_ms\":509,\"env\":\"000000000042\","
      "\"seccomp\":true,\"error\":\"a \\\"quoted\\\" word\",\"duration_ms\":511}\n");
}

static void json_odd_lines(void **state) {
  /* Words after a field, a quote closed before punctuation, a value that is
   * not a plain integer, a name the line itself uses. */
  expect(LOG_FORMAT_JSON, "workspace_empty_failed", "slot=1 error=\"busy\"; remounting",
         "{\"time\":\"" TS "\",\"level\":\"error\",\"event\":\"workspace_empty_failed\","
         "\"slot\":1,\"error\":\"busy\",\"text\":\"; remounting\"}\n");
  expect(LOG_FORMAT_JSON, "env_store_unknown_entry", "dir=/s name=\"x y\" left alone",
         "{\"time\":\"" TS "\",\"level\":\"warning\",\"event\":\"env_store_unknown_entry\","
         "\"dir\":\"/s\",\"name\":\"x y\",\"text\":\"left alone\"}\n");
  expect(LOG_FORMAT_JSON, "x", "a=007 b=1.5 c=99999999999999999999 event=oops msg=\"unclosed",
         "{\"time\":\"" TS "\",\"level\":\"info\",\"event\":\"x\",\"a\":\"007\",\"b\":\"1.5\","
         "\"c\":\"99999999999999999999\",\"field_event\":\"oops\",\"msg\":\"unclosed\"}\n");
}

static void json_invalid_utf8(void **state) {
  expect(LOG_FORMAT_JSON, "warning", "path=/tmp/\xff\xfe ok=\"\xc3\xa9t\xc3\xa9\"",
         "{\"time\":\"" TS "\",\"level\":\"warning\",\"event\":\"warning\","
         "\"path\":\"/tmp/??\",\"ok\":\"\xc3\xa9t\xc3\xa9\"}\n");
}

static void levels(void **state) {
  assert_string_equal(log_level("run"), "info");
  assert_string_equal(log_level("warning"), "warning");
  assert_string_equal(log_level("dropped"), "warning");
  assert_string_equal(log_level("recv_error"), "error");
  assert_string_equal(log_level("egress_failed"), "error");
}

/* log_limit: per_second lines, then none until the next second, whose first
 * line learns how many were held back. */
static void limit(void **state) {
  (void)state;
  struct log_limit l = {0};
  uint64_t suppressed = 99;
  for (int i = 0; i < 3; i++) {
    assert_true(log_limit_take(&l, 3, &suppressed));
    assert_int_equal(suppressed, 0);
  }
  assert_false(log_limit_take(&l, 3, &suppressed));
  assert_false(log_limit_take(&l, 3, &suppressed));
  atomic_store(&l.second, 0); /* as when the clock moved on */
  assert_true(log_limit_take(&l, 3, &suppressed));
  assert_int_equal(suppressed, 2);
  assert_true(log_limit_take(&l, 3, &suppressed));
  assert_int_equal(suppressed, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(logfmt_unchanged), cmocka_unit_test(json_run_event),
      cmocka_unit_test(json_odd_lines),   cmocka_unit_test(json_invalid_utf8),
      cmocka_unit_test(levels),           cmocka_unit_test(limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
