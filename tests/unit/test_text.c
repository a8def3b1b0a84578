/* common/text: the one UTF-8 decoder and the one printable copy. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"

static void utf8(void **state) {
  assert_true(text_utf8_valid("caf\xc3\xa9", 5));
  assert_true(text_utf8_valid("\xf0\x9f\x98\x80", 4));
  assert_true(text_utf8_valid("a\0b", 3));
  assert_false(text_utf8_valid("\xff", 1));
  assert_false(text_utf8_valid("\xc0\xaf", 2));         /* overlong "/" */
  assert_false(text_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
  assert_false(text_utf8_valid("\xf4\x90\x80\x80", 4)); /* past U+10FFFF */
  assert_false(text_utf8_valid("\xe2\x82", 2));         /* cut short */
}

static void repair(void **state) {
  size_t n;
  char *s = text_utf8_repair((const uint8_t *)"\xff" "a\xe2\x82", 4, &n);
  assert_int_equal(n, 3 + 1 + 3 + 3);
  assert_memory_equal(s, "\xef\xbf\xbd" "a" "\xef\xbf\xbd\xef\xbf\xbd", n);
  assert_true(text_utf8_valid(s, n));
  free(s);
  s = text_utf8_repair(NULL, 0, &n);
  assert_string_equal(s, "");
  free(s);
}

static void printable(void **state) {
  char out[16];
  text_printable("a\"b\n\tc\x01\xff", 9, out, sizeof(out), false);
  assert_string_equal(out, "a?b??c??");
  text_printable("a\"b\n\tc", 6, out, sizeof(out), true);
  assert_string_equal(out, "a?b\n\tc");
  text_printable("0123456789abcdefXYZ", 19, out, sizeof(out), false);
  assert_string_equal(out, "0123456789abcde"); /* cut, always terminated */
  text_printable("stop\0here", 9, out, sizeof(out), false);
  assert_string_equal(out, "stop");
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(utf8), cmocka_unit_test(repair),
                                     cmocka_unit_test(printable)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
