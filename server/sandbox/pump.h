/* pump.h: one program's stdin, stdout and stderr, pumped by a poll loop:
 * stdin fed from a buffer without ever blocking, stdout and stderr
 * collected up to a limit each (common/buf.h), each stored chunk handed to
 * an optional callback as it comes. The engine's supervisor (supervise.c)
 * and an interpreter's cells (run/interp_cell.c) both use it.
 *
 * Everything read comes from inside a sandbox and is hostile: nothing past
 * the limit is ever stored. It fails closed: when memory runs out storing
 * a chunk, the stream counts as over its limit (truncated, and over set),
 * so the caller ends the run as at the output limit rather than going on
 * with silently missing output.
 *
 * Also here: a poll set whose entries have named roles, so a loop asks
 * "is stdout ready" instead of keeping indexes by hand. */
#ifndef SANDBOX_PUMP_H
#define SANDBOX_PUMP_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"

enum pump_stream_id { PUMP_STDOUT = 1, PUMP_STDERR = 2 };

struct pump_output {
  struct sbx_buf buf;
  bool truncated; /* bytes were dropped: past the limit, or no memory */
};

struct pump {
  /* The host's ends, non-blocking; -1: none or closed. The pump closes
   * each at its end (EOF, error, stdin all written or refused). */
  int stdin_fd, stdout_fd, stderr_fd;
  const uint8_t *stdin_data; /* what is left to write */
  size_t stdin_len;
  uint64_t limit; /* bytes kept per output stream */
  /* Optional: each stored chunk as it comes (stream PUMP_STDOUT/STDERR). */
  void (*on_output)(void *arg, int stream, const uint8_t *data, size_t len);
  void *output_arg;
  struct pump_output out, err;
  bool over; /* an output went over the limit: the caller ends the run */
};

/* Reads what the stream's fd has, at most 16 reads of 64 KiB (one flooding
 * stream cannot starve the loop); closes the fd at EOF or on an error. */
void pump_read(struct pump *p, int stream);
/* Writes what stdin takes without blocking; closes it once all is written
 * or the program refused it (EPIPE: the rest is dropped). */
void pump_write_stdin(struct pump *p);
/* Closes stdin (nothing to write, or the program is gone). */
void pump_close_stdin(struct pump *p);
/* Closes the fds still open; the outputs stay. */
void pump_close(struct pump *p);
/* Closes and frees everything. */
void pump_free(struct pump *p);

/* A poll set of at most PUMP_POLL_MAX fds, each under a role the caller
 * names (a small enum); an fd < 0 is left out. */
#define PUMP_POLL_MAX 8
struct pump_poll {
  struct pollfd pfd[PUMP_POLL_MAX];
  int role[PUMP_POLL_MAX];
  nfds_t n;
};
/* The roles the pump itself uses; a caller's own roles start at
 * PUMP_ROLE_CALLER. */
enum { PUMP_ROLE_STDIN = 0, PUMP_ROLE_STDOUT, PUMP_ROLE_STDERR, PUMP_ROLE_CALLER };

void pump_poll_clear(struct pump_poll *pp);
void pump_poll_add(struct pump_poll *pp, int role, int fd, short events);
/* Whether the fd of that role is in the set and had an event. */
bool pump_poll_ready(const struct pump_poll *pp, int role);
/* poll(2) over the set, EINTR counted as a wake-up with nothing ready. */
int pump_poll_wait(struct pump_poll *pp, int timeout_ms);
/* The pump's open fds, under PUMP_ROLE_STDIN/STDOUT/STDERR. */
void pump_poll_add_pipes(const struct pump *p, struct pump_poll *pp);
/* Serves the pump's fds that were ready: stdout, stderr, then stdin. */
void pump_serve(struct pump *p, const struct pump_poll *pp);

#endif
