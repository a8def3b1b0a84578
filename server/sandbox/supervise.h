/* supervise.h: the event loop that watches one run, from the clone until its
 * init is gone: stdin out, stdout/stderr in (capped), the child's reports,
 * the wall deadline and the tree's CPU time. Poll over the pipes and a pidfd,
 * with timeouts computed from deadlines: no sleep loops. */
#ifndef SANDBOX_SUPERVISE_H
#define SANDBOX_SUPERVISE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "cgroup.h"
#include "child.h"

enum supervise_cause {
  SUPERVISE_CAUSE_NONE = 0,
  SUPERVISE_CAUSE_WALL_TIMEOUT,
  SUPERVISE_CAUSE_CPU_TIMEOUT,
  SUPERVISE_CAUSE_OUTPUT_LIMIT,
  SUPERVISE_CAUSE_CANCELLED,
};

struct supervise_stream {
  uint8_t *data;
  size_t len, cap;
  bool truncated;
};

struct supervise {
  /* In: the parent's pipe ends (non-blocking) and the init's pidfd. */
  int stdin_fd, stdout_fd, stderr_fd, report_fd, pidfd;
  const uint8_t *stdin_data;
  size_t stdin_len;
  uint64_t output_limit;
  uint64_t timeout_ms, cpu_limit_ms;
  struct cgroup_manager *cgroups;
  unsigned slot;
  struct timespec start;
  /* Optional: output as it is stored, and the cancel fd (-1: none). */
  void (*on_output)(void *arg, int stream, const uint8_t *data, size_t len);
  void *output_arg;
  int cancel_fd;
  /* Out. */
  struct supervise_stream out, err;
  enum supervise_cause cause; /* the first reason the supervisor killed the run */
  bool have_setup_error;
  struct child_report setup_error;
  bool have_exit;
  int exit_status; /* wait status of the program, as reported by init */
};

/* Returns when the init has exited (not yet reaped) and the pipes are drained.
 * Returns -1 only on an internal failure of poll itself (the run is killed). */
int supervise_run(struct supervise *s, struct sandbox_error *err);

uint64_t supervise_elapsed_us(const struct timespec *start);

#endif
