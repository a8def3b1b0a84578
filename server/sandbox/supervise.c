/* supervise.c: one run's event loop. Everything read here comes from inside
 * the sandbox and is hostile: output is capped at the limit before it is
 * stored (pump.c: stdin out, stdout and stderr in), and a report is only
 * trusted for its fixed-size fields. The
 * program can stop reading stdin, flood its outputs or never exit; none of
 * that may block this loop. */
#include "supervise.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pump.h"

uint64_t supervise_elapsed_us(const struct timespec *start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)(now.tv_sec - start->tv_sec) * 1000000u +
         (uint64_t)((now.tv_nsec - start->tv_nsec) / 1000);
}

static void kill_run(struct supervise *s, enum supervise_cause cause) {
  if (s->cause == SUPERVISE_CAUSE_NONE)
    s->cause = cause;
  /* SIGKILL to the namespace's init takes every process in it down. */
  syscall(SYS_pidfd_send_signal, s->pidfd, SIGKILL, NULL, 0);
  s->cgroups->backend->kill_all(s->cgroups, s->slot);
}

static void read_reports(struct supervise *s) {
  for (;;) {
    struct child_report r;
    ssize_t n = read(s->report_fd, &r, sizeof r);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && errno == EAGAIN)
      return;
    if (n != (ssize_t)sizeof r) {
      close(s->report_fd);
      s->report_fd = -1;
      return;
    }
    if (r.kind == CHILD_REPORT_SETUP_ERROR && !s->have_setup_error) {
      s->have_setup_error = true;
      s->setup_error = r;
    } else if (r.kind == CHILD_REPORT_EXIT) {
      s->have_exit = true;
      s->exit_status = r.status;
    }
  }
}

static long ncpus(void) {
  static long n;
  if (n <= 0) {
    n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0)
      n = 1;
  }
  return n;
}

/* When the tree's CPU time is next read: only then, not on every wake-up
 * (a chatty program wakes the loop for each chunk of output). */
struct cpu_watch {
  bool known; /* false on the rlimit backend: RLIMIT_CPU per process instead */
  uint64_t next_check_ms;
};

/* Milliseconds until the next deadline, killing the run when one passed. */
static int next_timeout_ms(struct supervise *s, struct cpu_watch *cpu) {
  if (s->cause != SUPERVISE_CAUSE_NONE)
    return 1000; /* already killed: waiting for init to go */
  uint64_t elapsed_ms = supervise_elapsed_us(&s->start) / 1000;
  if (elapsed_ms >= s->timeout_ms) {
    kill_run(s, SUPERVISE_CAUSE_WALL_TIMEOUT);
    return 1000;
  }
  uint64_t wait = s->timeout_ms - elapsed_ms;
  if (cpu->known && elapsed_ms >= cpu->next_check_ms) {
    uint64_t used_ns;
    if (s->cgroups->backend->cpu_usage_ns(s->cgroups, s->slot, &used_ns) < 0) {
      cpu->known = false;
    } else {
      uint64_t used_ms = used_ns / 1000000u;
      if (used_ms >= s->cpu_limit_ms) {
        kill_run(s, SUPERVISE_CAUSE_CPU_TIMEOUT);
        return 1000;
      }
      /* The tree burns at most ncpus CPU-ms per wall ms: check again when
       * it could first have reached the limit. */
      uint64_t cpu_wait = (s->cpu_limit_ms - used_ms) / (uint64_t)ncpus();
      cpu->next_check_ms = elapsed_ms + (cpu_wait < 5 ? 5 : cpu_wait);
    }
  }
  if (cpu->known && cpu->next_check_ms - elapsed_ms < wait)
    wait = cpu->next_check_ms - elapsed_ms;
  return wait > 60000 ? 60000 : (int)wait + 1;
}

/* The roles of supervise's own fds in its poll set, after the pump's. */
enum { ROLE_PID = PUMP_ROLE_CALLER, ROLE_REPORT, ROLE_CANCEL };

/* Ends the run at the output limit the first time a stream goes over it
 * (or could not be stored: the pump fails closed). */
static void check_output(struct supervise *s, const struct pump *p, bool *over_seen) {
  if (p->over && !*over_seen) {
    *over_seen = true;
    kill_run(s, SUPERVISE_CAUSE_OUTPUT_LIMIT);
  }
}

/* One wake-up: waits for the pipes, the pidfd or the next deadline, and
 * serves what is ready. Returns 1 once init has exited, 0 to go on, -1 when
 * poll itself failed (the run is killed). */
static int supervise_step(struct supervise *s, struct pump *p, struct cpu_watch *cpu,
                          bool *over_seen, struct sandbox_error *err) {
  int timeout = next_timeout_ms(s, cpu);
  struct pump_poll pp;
  pump_poll_clear(&pp);
  pump_poll_add(&pp, ROLE_PID, s->pidfd, POLLIN);
  pump_poll_add_pipes(p, &pp);
  pump_poll_add(&pp, ROLE_REPORT, s->report_fd, POLLIN);
  /* Until the run is killed: a cancel fd stays readable. */
  if (s->cause == SUPERVISE_CAUSE_NONE)
    pump_poll_add(&pp, ROLE_CANCEL, s->cancel_fd, POLLIN);
  if (pump_poll_wait(&pp, timeout) < 0) {
    int e = errno;
    kill_run(s, SUPERVISE_CAUSE_WALL_TIMEOUT);
    return sandbox_error_set(err, e, "poll");
  }
  pump_serve(p, &pp);
  check_output(s, p, over_seen);
  if (pump_poll_ready(&pp, ROLE_REPORT))
    read_reports(s);
  if (pump_poll_ready(&pp, ROLE_CANCEL))
    kill_run(s, SUPERVISE_CAUSE_CANCELLED);
  return pump_poll_ready(&pp, ROLE_PID) ? 1 : 0;
}

/* Every process of the namespace is gone once its init is: the pipes hold
 * what is left, then EOF. The bound only guards against a writer outside
 * the namespace, such as another run's child in the instant after clone. */
static void supervise_drain(struct supervise *s, struct pump *p, bool *over_seen) {
  struct timespec drain_start;
  clock_gettime(CLOCK_MONOTONIC, &drain_start);
  while ((p->stdout_fd >= 0 || p->stderr_fd >= 0 || s->report_fd >= 0) &&
         supervise_elapsed_us(&drain_start) < 1000000) {
    struct pump_poll pp;
    pump_poll_clear(&pp);
    pump_poll_add(&pp, PUMP_ROLE_STDOUT, p->stdout_fd, POLLIN);
    pump_poll_add(&pp, PUMP_ROLE_STDERR, p->stderr_fd, POLLIN);
    pump_poll_add(&pp, ROLE_REPORT, s->report_fd, POLLIN);
    if (pump_poll_wait(&pp, 100) < 0)
      break;
    pump_serve(p, &pp);
    check_output(s, p, over_seen);
    if (pump_poll_ready(&pp, ROLE_REPORT))
      read_reports(s);
  }
}

/* The pipes go to a pump for the loop and come back to s after it (the
 * engine closes what is still open and takes the outputs). */
static void pump_from(struct supervise *s, struct pump *p) {
  *p = (struct pump){.stdin_fd = s->stdin_fd,
                     .stdout_fd = s->stdout_fd,
                     .stderr_fd = s->stderr_fd,
                     .stdin_data = s->stdin_data,
                     .stdin_len = s->stdin_len,
                     .limit = s->output_limit,
                     .on_output = s->on_output,
                     .output_arg = s->output_arg};
  s->stdin_fd = s->stdout_fd = s->stderr_fd = -1;
}

static void output_back(struct pump_output *o, struct supervise_stream *st) {
  st->truncated = o->truncated;
  st->cap = o->buf.cap;
  st->data = sbx_buf_steal(&o->buf, &st->len);
}

static void pump_back(struct supervise *s, struct pump *p) {
  s->stdin_fd = p->stdin_fd;
  s->stdout_fd = p->stdout_fd;
  s->stderr_fd = p->stderr_fd;
  output_back(&p->out, &s->out);
  output_back(&p->err, &s->err);
}

int supervise_run(struct supervise *s, struct sandbox_error *err) {
  struct cpu_watch cpu = {.known = true, .next_check_ms = 0};
  struct pump p;
  pump_from(s, &p);
  bool over_seen = false;
  if (p.stdin_len == 0)
    pump_close_stdin(&p);
  int rc;
  while ((rc = supervise_step(s, &p, &cpu, &over_seen, err)) == 0)
    ;
  if (rc > 0) {
    pump_close_stdin(&p);
    supervise_drain(s, &p, &over_seen);
  }
  pump_back(s, &p);
  return rc < 0 ? -1 : 0;
}
