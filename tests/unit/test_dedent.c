/* dedent: the rules of Python's textwrap.dedent. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "dedent.h"

static void expect(const char *in, const char *want) {
  size_t n;
  char *out = dedent(in, strlen(in), &n);
  assert_non_null(out);
  assert_string_equal(out, want);
  assert_int_equal(n, strlen(want));
  free(out);
}

static void common_margin_removed(void **state) {
  expect("    import os\n    print(1)\n", "import os\nprint(1)\n");
  expect("    if x:\n        y()\n", "if x:\n    y()\n");
  expect("\tif x:\n\t\ty()", "if x:\n\ty()");
}

static void nothing_to_remove(void **state) {
  expect("print(1)\n  x = 2\n", "print(1)\n  x = 2\n");
  expect("", "");
  expect("\n\n", "\n\n");
}

static void blank_lines_ignored_and_emptied(void **state) {
  /* Lines of only spaces/tabs do not count for the margin, and become empty. */
  expect("    a = 1\n\n  \n    b = 2\n", "a = 1\n\n\nb = 2\n");
  expect("  a\n        \n  b", "a\n\nb");
}

static void tabs_and_spaces_differ(void **state) {
  /* "\t" and " " are different characters: no common margin. */
  expect("\ta\n    b\n", "\ta\n    b\n");
  /* Common prefix of mixed indents only. */
  expect("  \ta\n  b\n", "\ta\nb\n");
}

static void carriage_returns_and_no_trailing_newline(void **state) {
  expect("  a\r\n  b\r\n", "a\r\nb\r\n");
  expect("  x", "x");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(common_margin_removed),
      cmocka_unit_test(nothing_to_remove),
      cmocka_unit_test(blank_lines_ignored_and_emptied),
      cmocka_unit_test(tabs_and_spaces_differ),
      cmocka_unit_test(carriage_returns_and_no_trailing_newline),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
