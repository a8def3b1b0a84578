/* visible_encode (client/visible.h): what sandbox-run shows a terminal of a
 * program's output. Control characters as cat -v shows them, \n, \t and
 * valid UTF-8 as they are, a character cut between chunks kept whole. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "visible.h"

static void expect(struct visible *v, const char *in, size_t len, bool final, const char *want) {
  size_t n;
  char *out = visible_encode(v, (const uint8_t *)in, len, final, &n);
  assert_non_null(out);
  assert_int_equal(n, strlen(want));
  assert_memory_equal(out, want, n);
  free(out);
}

static void controls_shown_as_cat_v(void **state) {
  (void)state;
  struct visible v = {0};
  expect(&v, "a\tb\n", 4, true, "a\tb\n");
  expect(&v, "\x1b]52;c;aGk=\x07", 12, true, "^[]52;c;aGk=^G");
  expect(&v, "\r\x7f", 2, true, "^M^?");
  expect(&v, "\0z", 2, true, "^@z");
  expect(&v, "\xc3\xa9\xe2\x9c\x93\xf0\x9f\x98\x80", 9, true,
         "\xc3\xa9\xe2\x9c\x93\xf0\x9f\x98\x80");
  expect(&v,
         "\xc2\x9b"
         "1m",
         4, true, "M-^[1m");                         /* C1 CSI */
  expect(&v, "\xc2\x85", 2, true, "M-^E");           /* C1 NEL */
  expect(&v, "\xff\xe9x", 3, true, "M-^?M-ix");      /* not UTF-8 */
  expect(&v, "\xed\xa0\x80", 3, true, "M-mM- M-^@"); /* a surrogate */
  assert_int_equal(v.n_held, 0);
}

static void characters_cut_between_chunks(void **state) {
  (void)state;
  struct visible v = {0};
  expect(&v, "x\xe2\x9c", 3, false, "x");
  assert_int_equal(v.n_held, 2);
  expect(&v, "\x93y", 2, false, "\xe2\x9c\x93y");
  expect(&v, "\xc2", 1, false, "");
  expect(&v, "\x9b", 1, false, "M-^[");
  expect(&v, "\xf0\x9f", 2, false, "");
  expect(&v, "\x98", 1, false, "");
  expect(&v, "\x80", 1, false, "\xf0\x9f\x98\x80");
  /* The end comes with a character still cut: its bytes, as cat -v. */
  expect(&v, "\xe2\x9c", 2, false, "");
  expect(&v, NULL, 0, true, "M-bM-^\\");
  assert_int_equal(v.n_held, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(controls_shown_as_cat_v),
      cmocka_unit_test(characters_cut_between_chunks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
