/* semver: node-semver's satisfies() for the ranges Piston's clients send,
 * against the version of our one runtime. Each expectation is what
 * node-semver answers for the same pair. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdbool.h>

#include "semver.h"

#define V "3.11.2"

static void expect(const char *range, bool want) {
  if (semver_satisfies(V, range) != want)
    fail_msg("satisfies(%s, \"%s\") should be %s", V, range, want ? "true" : "false");
}

static void wildcards_and_partials(void **state) {
  (void)state;
  expect("*", true);
  expect("x", true);
  expect("", true); /* node-semver: the empty range is "*" */
  expect("3", true);
  expect("3.x", true);
  expect("3.11", true);
  expect("3.11.x", true);
  expect("3.11.*", true);
  expect("2.x", false);
  expect("4", false);
  expect("3.10", false);
  expect("3.12.x", false);
}

static void exact_versions(void **state) {
  (void)state;
  expect("3.11.2", true);
  expect("=3.11.2", true);
  expect("v3.11.2", true);
  expect("3.11.2+build.5", true);
  expect("3.11.1", false);
  expect("3.11.3", false);
}

static void operators(void **state) {
  (void)state;
  expect(">=3.8 <4", true);
  expect(">=3.12", false);
  expect(">3.11.1", true);
  expect(">3.11", false); /* >3.11 is >=3.12.0 */
  expect(">3", false);
  expect("<3.12", true);
  expect("<=3.11", true); /* <=3.11 is <3.12.0 */
  expect("<3.11", false);
  expect("<=3.11.2", true);
  expect("<3.11.2", false);
  expect(">= 3.10.0", true);
}

static void tilde_and_caret(void **state) {
  (void)state;
  expect("^3.10", true);
  expect("^3.10.4", true);
  expect("^3.12", false);
  expect("^2.7", false);
  expect("~3.11.0", true);
  expect("~3.11", true);
  expect("~3", true);
  expect("~3.11.3", false);
  expect("~3.10", false);
  expect("~>3.11.1", true);
}

static void alternatives_and_hyphens(void **state) {
  (void)state;
  expect("3.9 || 3.11", true);
  expect("3.9 || 3.10", false);
  expect("1.2.3 - 3.11.2", true);
  expect("3.0 - 3.11", true);
  expect("3.11.3 - 4", false);
  expect("2 - 3.10", false);
}

static void malformed_ranges_match_nothing(void **state) {
  (void)state;
  expect("latest", false);
  expect("3.11.02", false);
  expect("3.11.2-beta", false);
  expect(">=", false);
  expect("3..11", false);
  expect("3.11 ||| 3", false);
  expect("3.11.2.1", false);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(wildcards_and_partials),
      cmocka_unit_test(exact_versions),
      cmocka_unit_test(operators),
      cmocka_unit_test(tilde_and_caret),
      cmocka_unit_test(alternatives_and_hyphens),
      cmocka_unit_test(malformed_ranges_match_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
