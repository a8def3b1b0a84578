/* Feedback lines a person or an agent can act on. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <signal.h>
#include <string.h>

#include "feedback.h"
#include "text.h"

static struct sandbox_limits limits = {
    .timeout_ms = 5000, .cpu_time_ms = 5000, .memory_bytes = 128 << 20, .output_bytes = 64 << 10};

static void bytes(void **state) {
  char b[32];
  text_format_bytes(64 << 10, b, sizeof(b));
  assert_string_equal(b, "64 KiB");
  text_format_bytes(128 << 20, b, sizeof(b));
  assert_string_equal(b, "128 MiB");
  text_format_bytes(1536ULL << 20, b, sizeof(b));
  assert_string_equal(b, "1.5 GiB");
  text_format_bytes(100, b, sizeof(b));
  assert_string_equal(b, "100 bytes");
}

static void lines(void **state) {
  struct feedback fb;
  struct sandbox_result r = {0};
  r.killed_by = SANDBOX_KILLED_BY_TIMEOUT;
  feedback_build(&r, &limits, "limits", "the program", &fb);
  assert_int_equal(fb.n, 1);
  assert_non_null(strstr(fb.lines[0], "timed out after 5 s"));

  /* The CPU limit equal to the wall limit, reached first by two threads. */
  r.cpu_time_exceeded = true;
  r.cpu_time_us = 5000 * 1000;
  feedback_build(&r, &limits, "limits", "the program", &fb);
  assert_int_equal(fb.n, 1);
  assert_non_null(strstr(fb.lines[0], "CPU time limit of 5 s reached"));

  memset(&r, 0, sizeof(r));
  r.killed_by = SANDBOX_KILLED_BY_MEMORY;
  feedback_build(&r, &limits, "limits", "the program", &fb);
  assert_non_null(strstr(fb.lines[0], "memory limit of 128 MiB reached"));

  memset(&r, 0, sizeof(r));
  r.stdout_truncated = true;
  feedback_build(&r, &limits, "limits", "the program", &fb);
  assert_int_equal(fb.n, 1);
  assert_non_null(strstr(fb.lines[0], "stdout truncated at 64 KiB"));

  memset(&r, 0, sizeof(r));
  r.killed_by = SANDBOX_KILLED_BY_SIGNAL;
  r.signal = SIGSEGV;
  feedback_build(&r, &limits, "limits", "the program", &fb);
  assert_non_null(strstr(fb.lines[0], "SIGSEGV"));

  memset(&r, 0, sizeof(r));
  feedback_build(&r, &limits, "limits", "the program", &fb);
  assert_int_equal(fb.n, 0); /* a clean run needs no advice */
}

static void network_refused(void **state) {
  static const char thread_died[] =
      "Exception in thread Thread-1 (serve):\nTraceback (most recent call last):\n"
      "  File \"/workspace/main.py\", line 4, in serve\n"
      "    s = socket.socket()\n"
      "  File \"/usr/lib/python3.11/socket.py\", line 232, in __init__\n"
      "    _socket.socket.__init__(self, family, type, proto, fileno)\n"
      "PermissionError: [Errno 13] Permission denied\n";
  struct feedback fb = {0};
  feedback_network_refused((const uint8_t *)thread_died, sizeof(thread_died) - 1, &fb);
  assert_int_equal(fb.n, 1);
  assert_non_null(strstr(fb.lines[0], "the network, which the sandbox refuses"));
  assert_true(strlen(fb.lines[0]) < FEEDBACK_LINE_MAX - 1); /* not cut short */

  /* A file it may not open is not the network. */
  static const char file[] = "Traceback (most recent call last):\n"
                             "  File \"/workspace/main.py\", line 1, in <module>\n"
                             "    open('/etc/shadow')\n"
                             "PermissionError: [Errno 13] Permission denied: '/etc/shadow'\n";
  fb.n = 0;
  feedback_network_refused((const uint8_t *)file, sizeof(file) - 1, &fb);
  assert_int_equal(fb.n, 0);
  feedback_network_refused(NULL, 0, &fb);
  assert_int_equal(fb.n, 0);
}

static void missing_module_hint(void **state) {
  static const char *const cases[][2] = {
      {"Traceback...\nModuleNotFoundError: No module named 'sbx_x'\n",
       "add 'sbx_x' to requirements"},
      {"ModuleNotFoundError: No module named 'pkg.sub'", "add 'pkg' to requirements"},
      {"ModuleNotFoundError: No module named 'yaml'",
       "add 'pyyaml' to requirements (it provides the module yaml)"},
      {"ModuleNotFoundError: No module named 'a'\nModuleNotFoundError: No "
       "module named 'b'",
       "add 'b' to requirements"},
      {"ModuleNotFoundError: No module named 'bad name'", NULL},
      {"ModuleNotFoundError: No module named '9x'", NULL},
      {"ModuleNotFoundError: No module named '", NULL},
      {"ImportError: cannot import name 'x'", NULL},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    struct feedback fb = {.n = 0};
    feedback_missing_module((const uint8_t *)cases[i][0], strlen(cases[i][0]), &fb);
    if (cases[i][1] == NULL) {
      assert_int_equal(fb.n, 0);
    } else {
      assert_int_equal(fb.n, 1);
      assert_string_equal(fb.lines[0], cases[i][1]);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(bytes), cmocka_unit_test(lines),
                                     cmocka_unit_test(network_refused),
                                     cmocka_unit_test(missing_module_hint)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
