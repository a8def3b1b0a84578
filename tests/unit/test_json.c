/* The CLI's JSON: always valid, invalid UTF-8 replaced by U+FFFD. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static char *encode(const char *s, size_t len) {
  struct json_buf j = {0};
  json_string(&j, s, len);
  return json_finish(&j);
}

static void strings(void **state) {
  struct {
    const char *in;
    size_t len;
    const char *out;
  } cases[] = {
      {"hello", 5, "\"hello\""},
      {"a\"b\\c\n\t", 7, "\"a\\\"b\\\\c\\n\\t\""},
      {"\x01", 1, "\"\\u0001\""},
      {"caf\xc3\xa9", 5, "\"caf\xc3\xa9\""},           /* valid UTF-8 kept */
      {"\xff ok", 4, "\"\\ufffd ok\""},                /* invalid byte */
      {"\xc3", 1, "\"\\ufffd\""},                      /* truncated sequence */
      {"\xed\xa0\x80", 3, "\"\\ufffd\\ufffd\\ufffd\""}, /* surrogate */
      {"\xc0\xaf", 2, "\"\\ufffd\\ufffd\""},           /* overlong */
      {"\xf0\x9f\x98\x80", 4, "\"\xf0\x9f\x98\x80\""}, /* emoji */
      {"a\0b", 3, "\"a\\u0000b\""},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char *out = encode(cases[i].in, cases[i].len);
    assert_string_equal(out, cases[i].out);
    free(out);
  }
}

static void objects(void **state) {
  struct json_buf j = {0};
  json_begin(&j, '{');
  json_key(&j, "a"), json_int(&j, -1);
  json_key(&j, "b"), json_begin(&j, '[');
  json_bool(&j, true);
  json_uint(&j, 2);
  json_end(&j, ']');
  json_key(&j, "c"), json_begin(&j, '{');
  json_end(&j, '}');
  json_end(&j, '}');
  char *out = json_finish(&j);
  assert_string_equal(out, "{\"a\":-1,\"b\":[true,2],\"c\":{}}");
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(strings), cmocka_unit_test(objects)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
