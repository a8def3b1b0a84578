/* io.c: see io.h. */
#include "io.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int sbx_write_all(int fd, const void *data, size_t len) {
  const char *p = data;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int wait_writable(int sock, int timeout_ms) {
  struct pollfd p = {.fd = sock, .events = POLLOUT};
  int r;
  do {
    r = poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  if (r == 0)
    errno = ETIMEDOUT;
  return r > 0 ? 0 : -1;
}

int sbx_send_with_fds(int sock, const void *data, size_t len, const int *fds, size_t n_fds,
                      int timeout_ms) {
  if (len == 0 || n_fds > SBX_SEND_FDS_MAX) {
    errno = EINVAL;
    return -1;
  }
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(SBX_SEND_FDS_MAX * sizeof(int))];
  } c;
  memset(&c, 0, sizeof c);
  const char *p = data;
  size_t off = 0;
  while (off < len) {
    struct iovec iov = {.iov_base = (void *)(p + off), .iov_len = len - off};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (off == 0 && n_fds > 0) {
      m.msg_control = c.buf;
      m.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
      struct cmsghdr *h = CMSG_FIRSTHDR(&m);
      h->cmsg_level = SOL_SOCKET;
      h->cmsg_type = SCM_RIGHTS;
      h->cmsg_len = CMSG_LEN(n_fds * sizeof(int));
      memcpy(CMSG_DATA(h), fds, n_fds * sizeof(int));
    }
    ssize_t w = sendmsg(sock, &m, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      if ((errno == EAGAIN || errno == EWOULDBLOCK) && wait_writable(sock, timeout_ms) == 0)
        continue;
      return -1;
    }
    off += (size_t)w;
  }
  return 0;
}
