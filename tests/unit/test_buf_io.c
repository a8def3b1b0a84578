/* Unit tests of common/buf.c and common/io.c: the bounded buffer never
 * passes its max and leaves itself unchanged on a refused append; whole
 * writes survive short writes (a pipe read a little at a time); fds ride
 * with the first byte of a message, as many as the cap and no more; and a
 * non-blocking socket that stays full times out instead of spinning. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "buf.h"
#include "io.h"

static void buf_appends_and_grows(void **state) {
  (void)state;
  struct sbx_buf b = {0};
  char chunk[1000];
  memset(chunk, 'x', sizeof chunk);
  for (int i = 0; i < 100; i++)
    assert_int_equal(sbx_buf_append(&b, chunk, sizeof chunk, 1 << 20), 0);
  assert_int_equal(b.len, 100000);
  assert_true(b.cap >= b.len && b.cap <= 1 << 20);
  assert_int_equal(b.data[99999], 'x');
  size_t n;
  uint8_t *d = sbx_buf_steal(&b, &n);
  assert_int_equal(n, 100000);
  assert_null(b.data);
  assert_int_equal(b.len, 0);
  free(d);
}

static void buf_refuses_past_max_unchanged(void **state) {
  (void)state;
  struct sbx_buf b = {0};
  assert_int_equal(sbx_buf_append(&b, "abcdef", 6, 10), 0);
  errno = 0;
  assert_int_equal(sbx_buf_append(&b, "ghijk", 5, 10), -1);
  assert_int_equal(errno, EMSGSIZE);
  assert_int_equal(b.len, 6);
  assert_true(b.cap <= 10);
  assert_int_equal(sbx_buf_append(&b, "ghij", 4, 10), 0);
  assert_memory_equal(b.data, "abcdefghij", 10);
  /* n near SIZE_MAX must not wrap the check */
  assert_int_equal(sbx_buf_reserve(&b, SIZE_MAX - 2, SIZE_MAX), -1);
  assert_int_equal(errno, EMSGSIZE);
  sbx_buf_free(&b);
  assert_null(b.data);
}

static void buf_append_upto_takes_what_fits(void **state) {
  (void)state;
  struct sbx_buf b = {0};
  assert_int_equal(sbx_buf_append_upto(&b, "0123456789", 10, 4), 4);
  assert_int_equal(sbx_buf_append_upto(&b, "abc", 3, 4), 0);
  assert_int_equal(b.len, 4);
  assert_memory_equal(b.data, "0123", 4);
  sbx_buf_free(&b);
}

static void write_all_through_short_writes(void **state) {
  (void)state;
  int p[2];
  assert_int_equal(pipe(p), 0);
  size_t len = 1 << 20; /* far more than a pipe holds: the writer blocks */
  char *data = malloc(len);
  for (size_t i = 0; i < len; i++)
    data[i] = (char)(i * 7);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    _exit(sbx_write_all(p[1], data, len) == 0 ? 0 : 1);
  }
  close(p[1]);
  char *got = malloc(len);
  size_t have = 0;
  ssize_t n;
  while ((n = read(p[0], got + have, len - have > 4000 ? 4000 : len - have)) > 0)
    have += (size_t)n;
  assert_int_equal(have, len);
  assert_memory_equal(got, data, len);
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(p[0]);
  free(got);
  free(data);
}

static void send_with_fds_passes_descriptors(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  int fds[2] = {open("/dev/null", O_RDONLY | O_CLOEXEC), open("/", O_RDONLY | O_CLOEXEC)};
  assert_int_equal(sbx_send_with_fds(sv[0], "hello", 5, fds, 2, 1000), 0);
  char buf[16];
  char cbuf[CMSG_SPACE(4 * sizeof(int))];
  struct iovec iov = {buf, sizeof buf};
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
  ssize_t n = recvmsg(sv[1], &m, MSG_CMSG_CLOEXEC);
  assert_int_equal(n, 5);
  assert_memory_equal(buf, "hello", 5);
  struct cmsghdr *h = CMSG_FIRSTHDR(&m);
  assert_non_null(h);
  assert_int_equal(h->cmsg_type, SCM_RIGHTS);
  assert_int_equal((h->cmsg_len - CMSG_LEN(0)) / sizeof(int), 2);
  int got[2];
  memcpy(got, CMSG_DATA(h), sizeof got);
  struct stat a, b;
  assert_int_equal(fstat(got[1], &a), 0);
  assert_int_equal(stat("/", &b), 0);
  assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
  for (int i = 0; i < 2; i++) {
    close(got[i]);
    close(fds[i]);
  }
  errno = 0;
  assert_int_equal(sbx_send_with_fds(sv[0], "x", 1, fds, SBX_SEND_FDS_MAX + 1, 0), -1);
  assert_int_equal(errno, EINVAL);
  close(sv[0]);
  close(sv[1]);
}

/* The cap itself: SBX_SEND_FDS_MAX fds (a zygote run's stdio, memfd,
 * report socket and one tree per mount) all arrive, one more is refused
 * before anything is sent. */
static void send_with_fds_at_the_cap(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  int fds[SBX_SEND_FDS_MAX + 1];
  for (int i = 0; i <= SBX_SEND_FDS_MAX; i++)
    fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
  assert_int_equal(sbx_send_with_fds(sv[0], "r", 1, fds, SBX_SEND_FDS_MAX, 1000), 0);
  char buf[4];
  union {
    struct cmsghdr h;
    char c[CMSG_SPACE((SBX_SEND_FDS_MAX + 8) * sizeof(int))];
  } cbuf;
  struct iovec iov = {buf, sizeof buf};
  struct msghdr m = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf.c, .msg_controllen = sizeof cbuf.c};
  assert_int_equal(recvmsg(sv[1], &m, MSG_CMSG_CLOEXEC), 1);
  assert_false(m.msg_flags & MSG_CTRUNC);
  struct cmsghdr *h = CMSG_FIRSTHDR(&m);
  assert_non_null(h);
  size_t n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
  assert_int_equal(n, SBX_SEND_FDS_MAX);
  for (size_t i = 0; i < n; i++) {
    int fd;
    memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
    assert_true(fd >= 0);
    close(fd);
  }
  errno = 0;
  assert_int_equal(sbx_send_with_fds(sv[0], "r", 1, fds, SBX_SEND_FDS_MAX + 1, 1000), -1);
  assert_int_equal(errno, EINVAL);
  assert_int_equal(recv(sv[1], buf, sizeof buf, MSG_DONTWAIT), -1); /* nothing was sent */
  for (int i = 0; i <= SBX_SEND_FDS_MAX; i++)
    close(fds[i]);
  close(sv[0]);
  close(sv[1]);
}

static void send_with_fds_times_out_when_full(void **state) {
  (void)state;
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  size_t len = 8 << 20; /* more than the socket buffers hold; nobody reads */
  char *data = calloc(1, len);
  errno = 0;
  assert_int_equal(sbx_send_with_fds(sv[0], data, len, NULL, 0, 50), -1);
  assert_int_equal(errno, ETIMEDOUT);
  free(data);
  close(sv[0]);
  close(sv[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(buf_appends_and_grows),
      cmocka_unit_test(buf_refuses_past_max_unchanged),
      cmocka_unit_test(buf_append_upto_takes_what_fits),
      cmocka_unit_test(write_all_through_short_writes),
      cmocka_unit_test(send_with_fds_passes_descriptors),
      cmocka_unit_test(send_with_fds_at_the_cap),
      cmocka_unit_test(send_with_fds_times_out_when_full),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
