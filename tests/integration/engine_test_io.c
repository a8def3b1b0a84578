/* engine_test_io.c: the bytes of a run: stdin delivered and stdout and
 * stderr returned byte for byte (binary, not UTF-8), output seen as it
 * comes (sandbox_stream.on_output) and a run cancelled through cancel_fd,
 * its whole process tree with it. A cancelled run must never go on past
 * the cancel, nor a run cancelled before it started run at all. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "engine_test_common.h"

/* ---- bytes in, bytes out ---- */

static void test_stdin_delivered_byte_exact(void **state) {
  size_t n = 1u << 20;
  uint8_t *in = malloc(n);
  for (size_t i = 0; i < n; i++)
    in[i] = (uint8_t)(i * 131 + (i >> 8));
  struct sandbox_limits l = {.output_bytes = 2u << 20};
  struct run run;
  run_py_limits("import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())", &l, in, n, &run);
  assert_int_equal(run.rc, 0);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_NONE);
  assert_int_equal(run.r.stdout_len, n);
  assert_memory_equal(run.r.stdout_data, in, n);
  free(in);
  sandbox_result_free(&run.r);
}

static void test_non_utf8_output_preserved(void **state) {
  struct run run;
  run_py("import sys\n"
         "sys.stdout.buffer.write(bytes([0xff, 0xfe, 0x00, 0xc3, 0x28, 0x80]))\n"
         "sys.stderr.buffer.write(b'\\xed\\xa0\\x80')\n",
         &run);
  assert_int_equal(run.rc, 0);
  static const uint8_t out[] = {0xff, 0xfe, 0x00, 0xc3, 0x28, 0x80};
  static const uint8_t err[] = {0xed, 0xa0, 0x80};
  assert_int_equal(run.r.stdout_len, sizeof out);
  assert_memory_equal(run.r.stdout_data, out, sizeof out);
  assert_int_equal(run.r.stderr_len, sizeof err);
  assert_memory_equal(run.r.stderr_data, err, sizeof err);
  sandbox_result_free(&run.r);
}

/* ---- watching a run: on_output as it goes, cancel_fd ---- */

static void test_stream_output_as_it_goes(void **state) {
  struct stream_log log = {.cancel_fd = -1};
  struct sandbox_stream st = {.on_output = stream_collect, .arg = &log, .cancel_fd = -1};
  const char *argv[] = {PY, "-I", "-c",
                        "import sys, time\n"
                        "print('first', flush=True)\n"
                        "sys.stderr.write('on stderr\\n'); sys.stderr.flush()\n"
                        "time.sleep(0.5)\n"
                        "print('second')\n",
                        NULL};
  struct run_opts o = {.stream = &st};
  struct run run;
  clock_gettime(CLOCK_MONOTONIC, &log.start);
  run_opts_in_slot(0, argv, &o, &run);
  double end_ms = ms_since(&log.start);
  assert_stdout(&run, "first\nsecond\n");
  /* What on_output saw is what the result holds, and the first line came
   * while the program still ran, not at its end. */
  assert_int_equal(log.out_len, run.r.stdout_len);
  assert_memory_equal(log.out, run.r.stdout_data, log.out_len);
  assert_int_equal(log.err_len, run.r.stderr_len);
  assert_memory_equal(log.err, "on stderr\n", log.err_len);
  fprintf(stderr, "# first output after %.0f ms, the run returned after %.0f ms (%d pieces)\n",
          log.first_ms, end_ms, log.pieces);
  assert_true(log.first_ms < end_ms - 300);
  sandbox_result_free(&run.r);
}

static void test_cancel_kills_the_whole_tree(void **state) {
  int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  assert_true(efd >= 0);
  struct stream_log log = {.cancel_fd = efd, .cancel_on = "ready"};
  struct sandbox_stream st = {.on_output = stream_collect, .arg = &log, .cancel_fd = efd};
  const char *argv[] = {PY, "-I", "-c",
                        PY_START_SLEEPERS "time.sleep(0.1)\n"
                                          "print('ready', flush=True)\n"
                                          "time.sleep(60)\n",
                        NULL};
  struct sandbox_limits l = {.timeout_ms = scaled_ms(20000)};
  struct run_opts o = {.stream = &st, .limits = &l};
  struct run run;
  clock_gettime(CLOCK_MONOTONIC, &log.start);
  run_opts_in_slot(0, argv, &o, &run);
  double end_ms = ms_since(&log.start);
  close(efd);
  assert_int_equal(run.rc, 0);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_CANCELLED);
  assert_int_equal(run.r.signal, SIGKILL);
  /* "ready" (its newline may be a write of its own that the cancel, made
   * on seeing "ready", came before: python3 -u, as zygote runs are). */
  assert_true(run.r.stdout_len >= 5);
  assert_memory_equal(run.r.stdout_data, "ready", 5);
  /* At once, not at the timeout; run_opts_in_slot checked that none of the
   * sleepers is left. */
  fprintf(stderr, "# cancelled %.0f ms after the program said ready\n", end_ms - log.first_ms);
  assert_true(end_ms - log.first_ms < scaled_ms(1000));
  sandbox_result_free(&run.r);
}

static void test_cancel_before_start_runs_nothing(void **state) {
  int efd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
  assert_true(efd >= 0);
  struct sandbox_stream st = {.cancel_fd = efd};
  char ws[WS_PATH];
  make_workspace(0, ws, sizeof ws);
  const char *argv[] = {PY, "-I", "-c", "open('/workspace/ran', 'w').write('1'); print('ran')",
                        NULL};
  struct run_opts o = {.stream = &st, .workspace = ws};
  struct run run;
  run_opts_in_slot(0, argv, &o, &run);
  close(efd);
  char ran[FILE_PATH];
  snprintf(ran, sizeof ran, "%s/ran", ws);
  bool ran_exists = access(ran, F_OK) == 0;
  remove_workspace(ws);
  assert_int_equal(run.rc, 0);
  assert_int_equal(run.r.killed_by, SANDBOX_KILLED_BY_CANCELLED);
  assert_int_equal(run.r.stdout_len, 0);
  assert_false(ran_exists);
  sandbox_result_free(&run.r);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup(test_stdin_delivered_byte_exact, test_setup),
    cmocka_unit_test_setup(test_non_utf8_output_preserved, test_setup),
    cmocka_unit_test_setup(test_stream_output_as_it_goes, test_setup),
    cmocka_unit_test_setup(test_cancel_kills_the_whole_tree, test_setup),
    cmocka_unit_test_setup(test_cancel_before_start_runs_nothing, test_setup),
};
const struct engine_tests engine_io_tests = ENGINE_TESTS(tests);
