/* common/text: the one UTF-8 decoder and the one printable copy. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>

#include "errmsg.h"
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

static void hex_digits(void **state) {
  assert_int_equal(text_hex_digit('0'), 0);
  assert_int_equal(text_hex_digit('9'), 9);
  assert_int_equal(text_hex_digit('a'), 10);
  assert_int_equal(text_hex_digit('F'), 15);
  assert_int_equal(text_hex_digit('g'), -1);
  assert_int_equal(text_hex_digit('/'), -1);
  assert_int_equal(text_hex_digit('\0'), -1);
}

static void repair(void **state) {
  size_t n;
  char *s = text_utf8_repair((const uint8_t *)"\xff"
                                              "a\xe2\x82",
                             4, &n);
  assert_int_equal(n, 3 + 1 + 3 + 3);
  assert_memory_equal(s,
                      "\xef\xbf\xbd"
                      "a"
                      "\xef\xbf\xbd\xef\xbf\xbd",
                      n);
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

static void set(char *msg, size_t len, int errnum, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  errmsg_vset(msg, len, errnum, fmt, ap);
  va_end(ap);
}

static void wrap(char *msg, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  errmsg_vwrap(msg, len, fmt, ap);
  va_end(ap);
}

/* Error text: the cause's strerror after what failed, context in front,
 * cut at the buffer's end and always terminated. */
static void error_text(void **state) {
  char msg[64];
  set(msg, sizeof msg, ENOENT, "open %s", "/x");
  assert_string_equal(msg, "open /x: No such file or directory");
  set(msg, sizeof msg, 0, "refused");
  assert_string_equal(msg, "refused");
  wrap(msg, sizeof msg, "session %d", 3);
  assert_string_equal(msg, "session 3: refused");
  memset(msg, 'a', sizeof msg - 1);
  msg[sizeof msg - 1] = '\0';
  wrap(msg, sizeof msg, "ctx");
  assert_int_equal(strlen(msg), sizeof msg - 1);
  assert_memory_equal(msg, "ctx: aaa", 8);
  char small[8];
  set(small, sizeof small, ENOENT, "a long message");
  assert_int_equal(strlen(small), sizeof small - 1);
  wrap(small, sizeof small, "a prefix longer than the buffer");
  assert_int_equal(strlen(small), sizeof small - 1); /* kept as it was */
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(utf8), cmocka_unit_test(hex_digits),
                                     cmocka_unit_test(repair), cmocka_unit_test(printable),
                                     cmocka_unit_test(error_text)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
