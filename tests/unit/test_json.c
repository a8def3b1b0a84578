/* The CLIs' JSON: always valid, invalid UTF-8 replaced by U+FFFD, and any
 * message of the schema rendered from its descriptor. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "sandbox.pb-c.h"

static void check_text(const char *in, size_t len, const char *want) {
  char *out = sbxc_json_dump(sbxc_json_text(in, len));
  assert_non_null(out);
  assert_string_equal(out, want);
  free(out);
}

static void strings(void **state) {
  check_text("hello", 5, "\"hello\"");
  check_text("a\"b\\c\n\t", 7, "\"a\\\"b\\\\c\\n\\t\"");
  check_text("\x01", 1, "\"\\u0001\"");
  check_text("caf\xc3\xa9", 5, "\"caf\xc3\xa9\"");                           /* valid UTF-8 kept */
  check_text("\xff ok", 4, "\"\xef\xbf\xbd ok\"");                           /* invalid byte */
  check_text("\xc3", 1, "\"\xef\xbf\xbd\"");                                 /* truncated */
  check_text("\xed\xa0\x80", 3, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\""); /* surrogate */
  check_text("\xc0\xaf", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"");                 /* overlong */
  check_text("\xf0\x9f\x98\x80", 4, "\"\xf0\x9f\x98\x80\"");                 /* emoji */
  check_text("a\0b", 3, "\"a\\u0000b\"");
  check_text(NULL, 0, "\"\"");
}

/* A stream decoded chunk by chunk holds back a sequence's first bytes. */
static void incomplete_tail(void **state) {
  assert_int_equal(sbxc_utf8_incomplete_tail("", 0), 0);
  assert_int_equal(sbxc_utf8_incomplete_tail("abc", 3), 0);
  assert_int_equal(sbxc_utf8_incomplete_tail("caf\xc3", 4), 1);
  assert_int_equal(sbxc_utf8_incomplete_tail("caf\xc3\xa9", 5), 0);
  assert_int_equal(sbxc_utf8_incomplete_tail("\xe2\x82", 2), 2);
  assert_int_equal(sbxc_utf8_incomplete_tail("\xe2\x82\xac", 3), 0);
  assert_int_equal(sbxc_utf8_incomplete_tail("x\xf0\x9f\x98", 4), 3);
  assert_int_equal(sbxc_utf8_incomplete_tail("\xf0\x9f\x98\x80", 4), 0);
  assert_int_equal(sbxc_utf8_incomplete_tail("\x80\x80\x80\x80", 4), 0); /* no lead: invalid */
  assert_int_equal(sbxc_utf8_incomplete_tail("\xff", 1), 0);
}

static void messages(void **state) {
  Sandbox__V1__Limits lim = SANDBOX__V1__LIMITS__INIT;
  lim.memory_bytes = 1 << 20;
  Sandbox__V1__IsolationReport iso = SANDBOX__V1__ISOLATION_REPORT__INIT;
  iso.backend = "cgroup v1";
  iso.seccomp = 1;
  char *runtimes[] = {"python", "\xff"};
  Sandbox__V1__GetInfoResponse info = SANDBOX__V1__GET_INFO_RESPONSE__INIT;
  info.version = "1.0";
  info.n_runtimes = 2;
  info.runtimes = runtimes;
  info.isolation = &iso;
  info.default_limits = &lim;
  info.max_message_bytes = UINT64_MAX; /* clamped, not wrapped */
  json_t *o = sbxc_json_message(&info.base);
  assert_non_null(o);
  assert_string_equal(json_string_value(json_object_get(o, "version")), "1.0");
  assert_string_equal(json_string_value(json_array_get(json_object_get(o, "runtimes"), 1)),
                      "\xef\xbf\xbd");
  json_t *i = json_object_get(o, "isolation");
  assert_string_equal(json_string_value(json_object_get(i, "backend")), "cgroup v1");
  assert_true(json_is_true(json_object_get(i, "seccomp")));
  assert_int_equal(
      json_integer_value(json_object_get(json_object_get(o, "default_limits"), "memory_bytes")),
      1 << 20);
  assert_true(json_is_null(json_object_get(o, "max_limits")));
  assert_int_equal(json_integer_value(json_object_get(o, "max_message_bytes")), INT64_MAX);
  json_decref(o);

  Sandbox__V1__FileEntry e = SANDBOX__V1__FILE_ENTRY__INIT, *ep = &e;
  e.name = "out.png";
  e.relative_path = "output/out.png";
  e.type = SANDBOX__V1__FILE_ENTRY__TYPE__FILE;
  Sandbox__V1__ListFilesResponse list = SANDBOX__V1__LIST_FILES_RESPONSE__INIT;
  list.n_entries = 1;
  list.entries = &ep;
  char *text = sbxc_json_dump(sbxc_json_message(&list.base));
  assert_string_equal(text, "{\"entries\":[{\"name\":\"out.png\",\"relative_path\":"
                            "\"output/out.png\",\"type\":\"file\",\"size\":0}],"
                            "\"truncated\":false}");
  free(text);
}

static void oneof(void **state) {
  Sandbox__V1__File f = SANDBOX__V1__FILE__INIT;
  f.path = "a.txt";
  f.source_case = SANDBOX__V1__FILE__SOURCE_URL;
  f.url = "https://example.org/a";
  char *text = sbxc_json_dump(sbxc_json_message(&f.base));
  assert_string_equal(text, "{\"path\":\"a.txt\",\"url\":\"https://example.org/a\"}");
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(strings), cmocka_unit_test(incomplete_tail),
                                     cmocka_unit_test(messages), cmocka_unit_test(oneof)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
