/* Feedback lines a person or an agent can act on. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <signal.h>
#include <string.h>

#include "feedback.h"

static struct sandbox_limits limits = {.timeout_ms = 5000, .cpu_time_ms = 5000,
                                       .memory_bytes = 128 << 20, .output_bytes = 64 << 10};

static void bytes(void **state) {
  char b[32];
  feedback_format_bytes(64 << 10, b, sizeof(b));
  assert_string_equal(b, "64 KiB");
  feedback_format_bytes(128 << 20, b, sizeof(b));
  assert_string_equal(b, "128 MiB");
  feedback_format_bytes(1536ULL << 20, b, sizeof(b));
  assert_string_equal(b, "1.5 GiB");
  feedback_format_bytes(100, b, sizeof(b));
  assert_string_equal(b, "100 bytes");
}

static void lines(void **state) {
  struct feedback fb;
  struct sandbox_result r = {0};
  r.killed_by = SANDBOX_KILLED_BY_TIMEOUT;
  feedback_build(&r, &limits, &fb);
  assert_int_equal(fb.n, 1);
  assert_non_null(strstr(fb.lines[0], "timed out after 5 s"));

  memset(&r, 0, sizeof(r));
  r.killed_by = SANDBOX_KILLED_BY_MEMORY;
  feedback_build(&r, &limits, &fb);
  assert_non_null(strstr(fb.lines[0], "memory limit of 128 MiB reached"));

  memset(&r, 0, sizeof(r));
  r.stdout_truncated = true;
  feedback_build(&r, &limits, &fb);
  assert_int_equal(fb.n, 1);
  assert_non_null(strstr(fb.lines[0], "stdout truncated at 64 KiB"));

  memset(&r, 0, sizeof(r));
  r.killed_by = SANDBOX_KILLED_BY_SIGNAL;
  r.signal = SIGSEGV;
  feedback_build(&r, &limits, &fb);
  assert_non_null(strstr(fb.lines[0], "SIGSEGV"));

  memset(&r, 0, sizeof(r));
  feedback_build(&r, &limits, &fb);
  assert_int_equal(fb.n, 0); /* a clean run needs no advice */
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(bytes), cmocka_unit_test(lines)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
