/* Unit tests of the engine's output/stdin pump (server/sandbox/pump.c):
 * output is kept up to the limit and no further, the stream is marked
 * truncated and the pump over (the caller ends the run), and the callback
 * sees only what was kept; one call reads a bounded amount of a stream
 * that never runs dry; stdin is written whole, or dropped when the
 * program closes its end, and closed either way; EOF closes an output; the
 * poll set answers by role. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pump.h"

struct seen {
  size_t bytes[3];
  int calls;
};

static void on_output(void *arg, int stream, const uint8_t *data, size_t len) {
  struct seen *s = arg;
  (void)data;
  s->bytes[stream] += len;
  s->calls++;
}

static void nonblocking_pipe(int p[2]) {
  assert_int_equal(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
}

static void output_kept_up_to_the_limit(void **state) {
  (void)state;
  int o[2], e[2];
  nonblocking_pipe(o);
  nonblocking_pipe(e);
  struct seen seen = {0};
  struct pump p = {.stdin_fd = -1,
                   .stdout_fd = o[0],
                   .stderr_fd = e[0],
                   .limit = 10,
                   .on_output = on_output,
                   .output_arg = &seen};
  assert_int_equal(write(o[1], "0123456", 7), 7);
  assert_int_equal(write(e[1], "err", 3), 3);
  pump_read(&p, PUMP_STDOUT);
  pump_read(&p, PUMP_STDERR);
  assert_false(p.over);
  assert_int_equal(write(o[1], "789abcdef", 9), 9);
  pump_read(&p, PUMP_STDOUT);
  assert_true(p.over);
  assert_true(p.out.truncated);
  assert_false(p.err.truncated);
  assert_int_equal(p.out.buf.len, 10);
  assert_memory_equal(p.out.buf.data, "0123456789", 10);
  assert_true(p.out.buf.cap <= 10);
  assert_int_equal(seen.bytes[PUMP_STDOUT], 10);
  assert_int_equal(seen.bytes[PUMP_STDERR], 3);
  /* Past the limit nothing more is kept or seen. */
  int calls = seen.calls;
  assert_int_equal(write(o[1], "more", 4), 4);
  pump_read(&p, PUMP_STDOUT);
  assert_int_equal(p.out.buf.len, 10);
  assert_int_equal(seen.calls, calls);
  /* EOF closes. */
  close(o[1]);
  pump_read(&p, PUMP_STDOUT);
  assert_int_equal(p.stdout_fd, -1);
  assert_int_not_equal(p.stderr_fd, -1);
  pump_free(&p);
  assert_int_equal(p.stderr_fd, -1);
  assert_null(p.out.buf.data);
  close(e[1]);
}

static void zero_limit_keeps_nothing(void **state) {
  (void)state;
  int o[2];
  nonblocking_pipe(o);
  struct pump p = {.stdin_fd = -1, .stdout_fd = o[0], .stderr_fd = -1, .limit = 0};
  assert_int_equal(write(o[1], "x", 1), 1);
  pump_read(&p, PUMP_STDOUT);
  assert_true(p.over);
  assert_true(p.out.truncated);
  assert_int_equal(p.out.buf.len, 0);
  pump_free(&p);
  close(o[1]);
}

/* A stream that always has more (here a file: read never says EAGAIN) is
 * read at most 16 times 64 KiB per call, so that one flooding stream
 * cannot keep the loop from the other fds and its deadlines; the rest
 * comes on the next calls, then EOF closes it. */
static void one_read_call_is_bounded(void **state) {
  (void)state;
  size_t total = 4u << 20;
  FILE *f = tmpfile();
  assert_non_null(f);
  char *data = malloc(total);
  assert_non_null(data);
  memset(data, 'o', total);
  assert_int_equal(fwrite(data, 1, total, f), total);
  assert_int_equal(fflush(f), 0);
  int fd = dup(fileno(f));
  assert_true(fd >= 0);
  assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
  struct pump p = {.stdin_fd = -1, .stdout_fd = fd, .stderr_fd = -1, .limit = total};
  pump_read(&p, PUMP_STDOUT);
  assert_true(p.out.buf.len > 0 && p.out.buf.len <= (1u << 20));
  assert_true(p.stdout_fd >= 0);
  int calls = 1;
  while (p.stdout_fd >= 0) {
    pump_read(&p, PUMP_STDOUT);
    calls++;
  }
  assert_true(calls > 4);
  assert_int_equal(p.out.buf.len, total);
  assert_false(p.over);
  pump_free(&p);
  free(data);
  fclose(f);
}

static void stdin_written_whole_then_closed(void **state) {
  (void)state;
  int in[2];
  nonblocking_pipe(in);
  size_t n = 200000; /* more than a pipe holds: written over several calls */
  uint8_t *data = malloc(n);
  assert_non_null(data);
  memset(data, 'i', n);
  struct pump p = {
      .stdin_fd = in[1], .stdout_fd = -1, .stderr_fd = -1, .stdin_data = data, .stdin_len = n};
  size_t got = 0;
  uint8_t buf[65536];
  while (p.stdin_fd >= 0) {
    pump_write_stdin(&p);
    ssize_t r;
    while ((r = read(in[0], buf, sizeof buf)) > 0)
      got += (size_t)r;
  }
  ssize_t r;
  while ((r = read(in[0], buf, sizeof buf)) > 0)
    got += (size_t)r;
  assert_int_equal(got, n);
  assert_int_equal(p.stdin_len, 0);
  assert_int_equal(read(in[0], buf, 1), 0); /* closed: EOF */
  close(in[0]);
  free(data);
}

static void stdin_dropped_when_refused(void **state) {
  (void)state;
  signal(SIGPIPE, SIG_IGN);
  int in[2];
  nonblocking_pipe(in);
  close(in[0]);
  struct pump p = {.stdin_fd = in[1],
                   .stdout_fd = -1,
                   .stderr_fd = -1,
                   .stdin_data = (const uint8_t *)"abc",
                   .stdin_len = 3};
  pump_write_stdin(&p);
  assert_int_equal(p.stdin_fd, -1);
  assert_int_equal(p.stdin_len, 0);
}

static void poll_answers_by_role(void **state) {
  (void)state;
  int o[2], e[2];
  nonblocking_pipe(o);
  nonblocking_pipe(e);
  struct pump p = {.stdin_fd = -1, .stdout_fd = o[0], .stderr_fd = e[0], .limit = 100};
  enum { ROLE_OTHER = PUMP_ROLE_CALLER };
  struct pump_poll pp;
  pump_poll_clear(&pp);
  pump_poll_add_pipes(&p, &pp);
  pump_poll_add(&pp, ROLE_OTHER, -1, POLLIN); /* left out */
  assert_int_equal(pp.n, 2);
  assert_int_equal(write(e[1], "e", 1), 1);
  assert_int_equal(pump_poll_wait(&pp, 1000), 1);
  assert_false(pump_poll_ready(&pp, PUMP_ROLE_STDOUT));
  assert_true(pump_poll_ready(&pp, PUMP_ROLE_STDERR));
  assert_false(pump_poll_ready(&pp, PUMP_ROLE_STDIN));
  assert_false(pump_poll_ready(&pp, ROLE_OTHER));
  pump_serve(&p, &pp);
  assert_int_equal(p.err.buf.len, 1);
  assert_int_equal(p.out.buf.len, 0);
  pump_free(&p);
  close(o[1]), close(e[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(output_kept_up_to_the_limit),
      cmocka_unit_test(zero_limit_keeps_nothing),
      cmocka_unit_test(one_read_call_is_bounded),
      cmocka_unit_test(stdin_written_whole_then_closed),
      cmocka_unit_test(stdin_dropped_when_refused),
      cmocka_unit_test(poll_answers_by_role),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
