/* Unit tests of the interpreter's frame codec (server/run/interp_frame.c):
 * frames of an 8-byte little-endian length and a JSON object. Good frames
 * come out whole and in order, one at a time; a truncated frame waits for
 * its bytes; a length past the cap, bytes that are not JSON and JSON that
 * is not an object end the channel; the kernel's credentials give its pid
 * only for the slot's uid; fds ride with a sent frame's first byte, and
 * fds the kernel passes are closed, never kept; a reader waiting for a
 * done takes a bounded number of frames per call; a done's result is cut
 * to its cap on a character's boundary. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "interp_frame.h"

static void put_frame(struct sbx_buf *b, uint64_t n, const char *body, size_t body_len) {
  uint8_t head[8];
  for (int i = 0; i < 8; i++)
    head[i] = (uint8_t)(n >> (8 * i));
  assert_int_equal(sbx_buf_append(b, head, 8, SIZE_MAX), 0);
  assert_int_equal(sbx_buf_append(b, body, body_len, SIZE_MAX), 0);
}

static void put_json(struct sbx_buf *b, const char *json) {
  put_frame(b, strlen(json), json, strlen(json));
}

static void parse_good_frames_in_order(void **state) {
  (void)state;
  struct sbx_buf b = {0};
  put_json(&b, "{\"op\":\"ready\"}");
  put_json(&b, "{\"op\":\"done\",\"seq\":7}");
  json_t *obj = NULL;
  assert_int_equal(interp_frame_parse(&b, &obj), 1);
  assert_true(interp_frame_is_ready(obj));
  assert_false(interp_frame_is_done(obj, 7));
  json_decref(obj);
  assert_int_equal(interp_frame_parse(&b, &obj), 1);
  assert_true(interp_frame_is_done(obj, 7));
  assert_false(interp_frame_is_done(obj, 8));
  assert_false(interp_frame_is_ready(obj));
  json_decref(obj);
  assert_int_equal(b.len, 0);
  assert_int_equal(interp_frame_parse(&b, &obj), 0);
  assert_null(obj);
  sbx_buf_free(&b);
}

static void parse_truncated_waits(void **state) {
  (void)state;
  struct sbx_buf whole = {0}, b = {0};
  put_json(&whole, "{\"op\":\"done\",\"seq\":1,\"result\":\"2\"}");
  json_t *obj = NULL;
  /* Every prefix is "not yet", and leaves the bytes alone. */
  for (size_t i = 0; i < whole.len; i++) {
    assert_int_equal(sbx_buf_append(&b, whole.data + i, 1, SIZE_MAX), 0);
    if (i + 1 < whole.len) {
      assert_int_equal(interp_frame_parse(&b, &obj), 0);
      assert_null(obj);
      assert_int_equal(b.len, i + 1);
    }
  }
  assert_int_equal(interp_frame_parse(&b, &obj), 1);
  assert_true(interp_frame_is_done(obj, 1));
  json_decref(obj);
  sbx_buf_free(&b);
  sbx_buf_free(&whole);
}

static void parse_refuses_bad_lengths(void **state) {
  (void)state;
  json_t *obj = NULL;
  uint64_t bad[] = {INTERP_FRAME_MAX + 1ull, 1ull << 32, UINT64_MAX, 1ull << 63};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct sbx_buf b = {0};
    put_frame(&b, bad[i], "{}", 2);
    assert_int_equal(interp_frame_parse(&b, &obj), -1);
    assert_null(obj);
    sbx_buf_free(&b);
  }
  /* At the cap: waits for the bytes (nothing is allocated for them). */
  struct sbx_buf b = {0};
  put_frame(&b, INTERP_FRAME_MAX, "{}", 2);
  size_t cap = b.cap;
  assert_int_equal(interp_frame_parse(&b, &obj), 0);
  assert_int_equal(b.cap, cap);
  sbx_buf_free(&b);
  /* Zero bytes of JSON is no frame. */
  put_frame(&b, 0, "", 0);
  assert_int_equal(interp_frame_parse(&b, &obj), -1);
  sbx_buf_free(&b);
}

static void parse_refuses_bad_json(void **state) {
  (void)state;
  const char *bad[] = {"{",    "{\"op\":}",  "[1,2]",    "\"ready\"",          "42",
                       "null", "{\"a\":1}x", "\xff\xfe", "{\"s\":\"\\u0000\"}"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    struct sbx_buf b = {0};
    put_json(&b, bad[i]);
    json_t *obj = NULL;
    assert_int_equal(interp_frame_parse(&b, &obj), -1);
    assert_null(obj);
    sbx_buf_free(&b);
  }
}

static int count_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 1024; fd++)
    if (fcntl(fd, F_GETFD) >= 0)
      n++;
  return n;
}

static void send_carries_fds_with_first_byte(void **state) {
  (void)state;
  int sv[2], p[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(pipe(p), 0);
  const char *json = "{\"code\":\"1\"}";
  int fds[1] = {p[1]};
  assert_int_equal(interp_frame_send(sv[0], json, strlen(json), fds, 1), 0);
  uint8_t got[64];
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(4 * sizeof(int))];
  } c;
  struct iovec iov = {got, sizeof got};
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf};
  ssize_t n = recvmsg(sv[1], &m, 0);
  assert_true(n >= 8);
  struct cmsghdr *h = CMSG_FIRSTHDR(&m);
  assert_non_null(h);
  assert_int_equal(h->cmsg_type, SCM_RIGHTS);
  assert_int_equal(h->cmsg_len, CMSG_LEN(sizeof(int)));
  int passed;
  memcpy(&passed, CMSG_DATA(h), sizeof passed);
  assert_int_equal(write(passed, "x", 1), 1);
  char x = 0;
  assert_int_equal(read(p[0], &x, 1), 1);
  assert_int_equal(x, 'x');
  close(passed);
  /* The rest of the frame follows; as a whole it parses. */
  struct sbx_buf b = {0};
  assert_int_equal(sbx_buf_append(&b, got, (size_t)n, SIZE_MAX), 0);
  while (b.len < 8 + strlen(json)) {
    ssize_t more = read(sv[1], got, sizeof got);
    assert_true(more > 0);
    assert_int_equal(sbx_buf_append(&b, got, (size_t)more, SIZE_MAX), 0);
  }
  json_t *obj = NULL;
  assert_int_equal(interp_frame_parse(&b, &obj), 1);
  assert_string_equal(json_string_value(json_object_get(obj, "code")), "1");
  json_decref(obj);
  sbx_buf_free(&b);
  close(p[0]), close(p[1]), close(sv[0]), close(sv[1]);
}

static void recv_takes_creds_and_closes_passed_fds(void **state) {
  (void)state;
  int sv[2], p[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  int one = 1;
  assert_int_equal(setsockopt(sv[1], SOL_SOCKET, SO_PASSCRED, &one, sizeof one), 0);
  assert_int_equal(pipe(p), 0);
  struct sbx_buf b = {0};
  json_t *obj = NULL;
  pid_t pid = 0;
  /* Nothing there yet. */
  assert_int_equal(interp_frame_recv(sv[1], &b, &obj, &pid, getuid()), 0);
  int before = count_fds();
  const char *json = "{\"op\":\"ready\"}";
  int fds[2] = {p[0], p[1]};
  assert_int_equal(interp_frame_send(sv[0], json, strlen(json), fds, 2), 0);
  assert_int_equal(interp_frame_recv(sv[1], &b, &obj, &pid, getuid()), 1);
  assert_true(interp_frame_is_ready(obj));
  json_decref(obj);
  assert_int_equal(pid, getpid());
  assert_int_equal(count_fds(), before); /* the passed fds were not kept */
  /* Another uid's credentials give no pid. */
  pid = 0;
  assert_int_equal(interp_frame_send(sv[0], json, strlen(json), NULL, 0), 0);
  assert_int_equal(interp_frame_recv(sv[1], &b, &obj, &pid, getuid() + 1), 1);
  json_decref(obj);
  assert_int_equal(pid, 0);
  /* Garbage on the wire, then the peer's end: the channel is over. */
  assert_int_equal(write(sv[0], "\xff\xff\xff\xff\xff\xff\xff\xff", 8), 8);
  assert_int_equal(interp_frame_recv(sv[1], &b, &obj, NULL, 0), -1);
  b.len = 0;
  close(sv[0]);
  assert_int_equal(interp_frame_recv(sv[1], &b, &obj, NULL, 0), -1);
  sbx_buf_free(&b);
  close(sv[1]), close(p[0]), close(p[1]);
}

static void recv_buffer_stays_bounded(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  assert_int_equal(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
  /* A frame at the cap, its bytes flowing in as the reader reads. */
  size_t n = INTERP_FRAME_MAX;
  char *body = malloc(n);
  assert_non_null(body);
  memset(body, ' ', n);
  body[0] = '{';
  body[n - 1] = '}';
  struct sbx_buf b = {0};
  json_t *obj = NULL;
  uint8_t head[8] = {0};
  for (int i = 0; i < 8; i++)
    head[i] = (uint8_t)((uint64_t)n >> (8 * i));
  assert_int_equal(write(sv[0], head, 8), 8);
  size_t off = 0;
  int fr = 0;
  while (fr == 0) {
    ssize_t w = off < n ? write(sv[0], body + off, n - off) : 0;
    if (w > 0)
      off += (size_t)w;
    fr = interp_frame_recv(sv[1], &b, &obj, NULL, 0);
    assert_true(b.cap <= INTERP_FRAME_HEAD + INTERP_FRAME_MAX);
  }
  assert_int_equal(fr, 1);
  assert_int_equal(json_object_size(obj), 0);
  json_decref(obj);
  free(body);
  sbx_buf_free(&b);
  close(sv[0]), close(sv[1]);
}

/* A channel kept full of frames that are not the answer (a cell flooding
 * the kernel's socket) gives the reader back after a bounded number, so
 * that its loop gets to its deadlines; the answer still comes through
 * behind them. They were all received in one go: poll no longer sees them,
 * which is why MORE means "again, without waiting". */
static void recv_done_bounded_per_call(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  struct sbx_buf frames = {0};
  int stale = 40; /* more than one read takes */
  for (int i = 0; i < stale; i++)
    put_json(&frames, "{\"op\":\"done\",\"seq\":1}");
  put_json(&frames, "{\"op\":\"done\",\"seq\":2,\"exit_code\":3}");
  assert_int_equal(write(sv[0], frames.data, frames.len), (ssize_t)frames.len);
  struct sbx_buf b = {0};
  json_t *done = NULL;
  assert_int_equal(interp_frame_recv_done(sv[1], &b, 2, &done), INTERP_RECV_MORE);
  assert_null(done);
  struct pollfd p = {.fd = sv[1], .events = POLLIN};
  assert_int_equal(poll(&p, 1, 0), 0);
  int more = 1; /* a MORE for each whole batch of stale frames */
  enum interp_recv r;
  while ((r = interp_frame_recv_done(sv[1], &b, 2, &done)) == INTERP_RECV_MORE)
    more++;
  assert_int_equal(r, INTERP_RECV_DONE);
  assert_int_equal(more, stale / INTERP_FRAMES_PER_READ);
  assert_true(interp_frame_is_done(done, 2));
  assert_int_equal(json_integer_value(json_object_get(done, "exit_code")), 3);
  json_decref(done);
  assert_int_equal(interp_frame_recv_done(sv[1], &b, 3, &done), INTERP_RECV_NONE);
  close(sv[0]);
  assert_int_equal(interp_frame_recv_done(sv[1], &b, 3, &done), INTERP_RECV_GONE);
  assert_null(done);
  sbx_buf_free(&b);
  sbx_buf_free(&frames);
  close(sv[1]);
}

static void done_figures_checked(void **state) {
  (void)state;
  json_t *obj = json_loads("{\"op\":\"done\",\"seq\":3,\"exit_code\":257,\"cpu_us\":-5,"
                           "\"status\":\"interrupted\",\"result\":\"42\",\"truncated\":true}",
                           0, NULL);
  assert_non_null(obj);
  struct sandbox_result res = {0};
  struct interp_outcome out = {0};
  interp_frame_take_done(obj, &res, &out);
  assert_int_equal(res.exit_code, 1); /* 257 & 0xff */
  assert_int_equal(res.cpu_time_us, 0);
  assert_true(out.interrupted);
  assert_true(out.has_result);
  assert_string_equal(out.result, "42");
  assert_true(out.result_truncated);
  interp_outcome_free(&out);
  json_decref(obj);
  /* No figures: exit code 1, no result. */
  obj = json_loads("{\"op\":\"done\",\"exit_code\":\"0\",\"result\":5}", 0, NULL);
  memset(&res, 0, sizeof res);
  memset(&out, 0, sizeof out);
  interp_frame_take_done(obj, &res, &out);
  assert_int_equal(res.exit_code, 1);
  assert_false(out.has_result);
  assert_false(out.interrupted);
  json_decref(obj);
  /* seq must be this cell's integer. */
  obj = json_loads("{\"op\":\"done\",\"seq\":\"3\"}", 0, NULL);
  assert_false(interp_frame_is_done(obj, 3));
  json_decref(obj);
}

static void done_result_cut_on_a_character(void **state) {
  (void)state;
  /* "a" then two-byte characters: byte 65536 is the middle of one. */
  size_t n = INTERP_RESULT_MAX + 100;
  char *text = malloc(n + 1);
  assert_non_null(text);
  text[0] = 'a';
  for (size_t i = 1; i + 1 < n; i += 2)
    text[i] = (char)0xc3, text[i + 1] = (char)0xa9;
  text[n - (n % 2 == 0 ? 1 : 0)] = '\0';
  json_t *obj = json_object();
  json_object_set_new(obj, "result", json_string(text));
  struct sandbox_result res = {0};
  struct interp_outcome out = {0};
  interp_frame_take_done(obj, &res, &out);
  assert_true(out.has_result);
  assert_true(out.result_truncated);
  assert_true(out.result_len <= INTERP_RESULT_MAX);
  assert_int_equal(out.result_len, INTERP_RESULT_MAX - 1);
  assert_int_equal(strlen(out.result), out.result_len);
  json_t *valid = json_stringn(out.result, out.result_len); /* NULL unless valid UTF-8 */
  assert_non_null(valid);
  json_decref(valid);
  interp_outcome_free(&out);
  json_decref(obj);
  free(text);
}

static void cell_frame_round_trips(void **state) {
  (void)state;
  const char *args[] = {"one", "two"};
  const char *env[] = {"A=1", "NOEQUALS", "B=x=y"};
  struct interp_cell cell = {.code = "print(1)\n",
                             .code_len = 9,
                             .args = args,
                             .n_args = 2,
                             .env = env,
                             .n_env = 3,
                             .limits = {.cpu_time_ms = 1500}};
  char *s = interp_frame_cell(&cell, 9);
  assert_non_null(s);
  json_t *o = json_loads(s, 0, NULL);
  assert_non_null(o);
  assert_string_equal(json_string_value(json_object_get(o, "code")), "print(1)\n");
  assert_int_equal(json_array_size(json_object_get(o, "args")), 2);
  json_t *e = json_object_get(o, "env");
  assert_int_equal(json_object_size(e), 2);
  assert_string_equal(json_string_value(json_object_get(e, "B")), "x=y");
  assert_int_equal(json_integer_value(json_object_get(o, "cpu_s")), 2);
  assert_int_equal(json_integer_value(json_object_get(o, "seq")), 9);
  json_decref(o);
  free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(parse_good_frames_in_order),
      cmocka_unit_test(parse_truncated_waits),
      cmocka_unit_test(parse_refuses_bad_lengths),
      cmocka_unit_test(parse_refuses_bad_json),
      cmocka_unit_test(send_carries_fds_with_first_byte),
      cmocka_unit_test(recv_takes_creds_and_closes_passed_fds),
      cmocka_unit_test(recv_buffer_stays_bounded),
      cmocka_unit_test(recv_done_bounded_per_call),
      cmocka_unit_test(done_figures_checked),
      cmocka_unit_test(done_result_cut_on_a_character),
      cmocka_unit_test(cell_frame_round_trips),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
