/* pump.c: see pump.h. Never blocks (every fd is non-blocking) and never
 * stores past the limit; a failed allocation ends the run (fail closed). */
#include "pump.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define PUMP_CHUNK 65536
#define PUMP_READS 16 /* per call: 1 MiB, then the loop serves the others */

static void close_fd(int *fd) {
  if (*fd >= 0)
    close(*fd);
  *fd = -1;
}

/* Stores what fits below the limit; a stream that went over, or whose
 * bytes could not be stored, is truncated and sets over. */
static void pump_store(struct pump *p, int stream, const uint8_t *data, size_t n) {
  struct pump_output *o = stream == PUMP_STDOUT ? &p->out : &p->err;
  if (o->truncated)
    return;
  size_t max = p->limit < SIZE_MAX ? (size_t)p->limit : SIZE_MAX;
  size_t took = sbx_buf_append_upto(&o->buf, data, n, max);
  if (took > 0 && p->on_output != NULL)
    p->on_output(p->output_arg, stream, data, took);
  if (took < n) {
    o->truncated = true;
    p->over = true;
  }
}

void pump_read(struct pump *p, int stream) {
  int *fd = stream == PUMP_STDOUT ? &p->stdout_fd : &p->stderr_fd;
  uint8_t buf[PUMP_CHUNK];
  for (int i = 0; i < PUMP_READS && *fd >= 0; i++) {
    ssize_t n = read(*fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return;
    if (n <= 0) { /* EOF; an error counts as one */
      close_fd(fd);
      return;
    }
    pump_store(p, stream, buf, (size_t)n);
  }
}

void pump_write_stdin(struct pump *p) {
  while (p->stdin_fd >= 0 && p->stdin_len > 0) {
    size_t chunk = p->stdin_len < PUMP_CHUNK ? p->stdin_len : PUMP_CHUNK;
    ssize_t n = write(p->stdin_fd, p->stdin_data, chunk);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return;
      p->stdin_len = 0; /* EPIPE: the program closed its stdin */
      break;
    }
    p->stdin_data += n;
    p->stdin_len -= (size_t)n;
  }
  close_fd(&p->stdin_fd);
}

void pump_close_stdin(struct pump *p) {
  close_fd(&p->stdin_fd);
}

void pump_close(struct pump *p) {
  close_fd(&p->stdin_fd);
  close_fd(&p->stdout_fd);
  close_fd(&p->stderr_fd);
}

void pump_free(struct pump *p) {
  pump_close(p);
  sbx_buf_free(&p->out.buf);
  sbx_buf_free(&p->err.buf);
}

void pump_poll_clear(struct pump_poll *pp) {
  pp->n = 0;
}

void pump_poll_add(struct pump_poll *pp, int role, int fd, short events) {
  if (fd < 0 || pp->n >= PUMP_POLL_MAX)
    return;
  pp->pfd[pp->n] = (struct pollfd){.fd = fd, .events = events};
  pp->role[pp->n] = role;
  pp->n++;
}

bool pump_poll_ready(const struct pump_poll *pp, int role) {
  for (nfds_t i = 0; i < pp->n; i++)
    if (pp->role[i] == role)
      return pp->pfd[i].revents != 0;
  return false;
}

int pump_poll_wait(struct pump_poll *pp, int timeout_ms) {
  int rv = poll(pp->pfd, pp->n, timeout_ms);
  if (rv < 0 && errno == EINTR) {
    for (nfds_t i = 0; i < pp->n; i++)
      pp->pfd[i].revents = 0;
    return 0;
  }
  return rv;
}

void pump_poll_add_pipes(const struct pump *p, struct pump_poll *pp) {
  pump_poll_add(pp, PUMP_ROLE_STDOUT, p->stdout_fd, POLLIN);
  pump_poll_add(pp, PUMP_ROLE_STDERR, p->stderr_fd, POLLIN);
  pump_poll_add(pp, PUMP_ROLE_STDIN, p->stdin_fd, POLLOUT);
}

void pump_serve(struct pump *p, const struct pump_poll *pp) {
  if (pump_poll_ready(pp, PUMP_ROLE_STDOUT))
    pump_read(p, PUMP_STDOUT);
  if (pump_poll_ready(pp, PUMP_ROLE_STDERR))
    pump_read(p, PUMP_STDERR);
  if (pump_poll_ready(pp, PUMP_ROLE_STDIN))
    pump_write_stdin(p);
}
