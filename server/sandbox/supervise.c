/* supervise.c: one run's event loop. Everything read here comes from inside
 * the sandbox and is hostile: output is capped at the limit before it is
 * stored, and a report is only trusted for its fixed-size fields. The
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

/* Appends up to the limit; returns false when the stream went over it.
 * *took: how many bytes of buf were stored. */
static bool stream_append(struct supervise_stream *st, const uint8_t *buf, size_t n, uint64_t limit,
                          size_t *took) {
  *took = 0;
  if (st->truncated)
    return true;
  size_t room = st->len < limit ? (size_t)(limit - st->len) : 0;
  size_t take = n < room ? n : room;
  if (take > 0) {
    if (st->len + take > st->cap) {
      size_t cap = st->cap ? st->cap : 16384;
      while (cap < st->len + take)
        cap *= 2;
      if (cap > limit)
        cap = (size_t)limit;
      uint8_t *d = realloc(st->data, cap);
      if (d == NULL)
        return false; /* treated as over the limit: never store unbounded */
      st->data = d;
      st->cap = cap;
    }
    memcpy(st->data + st->len, buf, take);
    st->len += take;
    *took = take;
  }
  if (n > take) {
    st->truncated = true;
    return false;
  }
  return true;
}

/* Reads what is there; closes *fd at EOF. */
static void read_stream(struct supervise *s, int *fd, struct supervise_stream *st) {
  uint8_t buf[65536];
  for (int i = 0; i < 16; i++) {
    ssize_t n = read(*fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN)
        return;
      n = 0; /* treat errors as EOF */
    }
    if (n == 0) {
      close(*fd);
      *fd = -1;
      return;
    }
    size_t took;
    bool within = stream_append(st, buf, (size_t)n, s->output_limit, &took);
    if (took > 0 && s->on_output != NULL)
      s->on_output(s->output_arg, st == &s->out ? 1 : 2, buf, took);
    if (!within)
      kill_run(s, SUPERVISE_CAUSE_OUTPUT_LIMIT);
  }
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

static void write_stdin(struct supervise *s) {
  while (s->stdin_len > 0) {
    size_t chunk = s->stdin_len < 65536 ? s->stdin_len : 65536;
    ssize_t n = write(s->stdin_fd, s->stdin_data, chunk);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN)
        return;
      s->stdin_len = 0; /* EPIPE: the program closed stdin; the rest is dropped */
      break;
    }
    s->stdin_data += n;
    s->stdin_len -= (size_t)n;
  }
  close(s->stdin_fd);
  s->stdin_fd = -1;
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

static void close_fd(int *fd) {
  if (*fd >= 0) {
    close(*fd);
    *fd = -1;
  }
}

/* This round's poll set: the pidfd always, the pipes still open, and where
 * each sits in pfd (-1: not polled). */
struct poll_set {
  struct pollfd pfd[6];
  int n, i_pid, i_out, i_err, i_in, i_rep, i_cancel;
};

static void poll_set_build(const struct supervise *s, struct poll_set *ps) {
  ps->n = 0;
  ps->i_out = ps->i_err = ps->i_in = ps->i_rep = ps->i_cancel = -1;
  ps->pfd[ps->n] = (struct pollfd){.fd = s->pidfd, .events = POLLIN};
  ps->i_pid = ps->n++;
  if (s->stdout_fd >= 0) {
    ps->pfd[ps->n] = (struct pollfd){.fd = s->stdout_fd, .events = POLLIN};
    ps->i_out = ps->n++;
  }
  if (s->stderr_fd >= 0) {
    ps->pfd[ps->n] = (struct pollfd){.fd = s->stderr_fd, .events = POLLIN};
    ps->i_err = ps->n++;
  }
  if (s->stdin_fd >= 0) {
    ps->pfd[ps->n] = (struct pollfd){.fd = s->stdin_fd, .events = POLLOUT};
    ps->i_in = ps->n++;
  }
  if (s->report_fd >= 0) {
    ps->pfd[ps->n] = (struct pollfd){.fd = s->report_fd, .events = POLLIN};
    ps->i_rep = ps->n++;
  }
  /* Until the run is killed: a cancel fd stays readable. */
  if (s->cancel_fd >= 0 && s->cause == SUPERVISE_CAUSE_NONE) {
    ps->pfd[ps->n] = (struct pollfd){.fd = s->cancel_fd, .events = POLLIN};
    ps->i_cancel = ps->n++;
  }
}

/* One wake-up: waits for the pipes, the pidfd or the next deadline, and
 * serves what is ready. Returns 1 once init has exited, 0 to go on, -1 when
 * poll itself failed (the run is killed). */
static int supervise_step(struct supervise *s, struct cpu_watch *cpu, struct sandbox_error *err) {
  int timeout = next_timeout_ms(s, cpu);
  struct poll_set ps;
  poll_set_build(s, &ps);
  int rc = poll(ps.pfd, (nfds_t)ps.n, timeout);
  if (rc < 0) {
    if (errno == EINTR)
      return 0;
    int e = errno;
    kill_run(s, SUPERVISE_CAUSE_WALL_TIMEOUT);
    return sandbox_error_set(err, e, "poll");
  }
  if (ps.i_out >= 0 && ps.pfd[ps.i_out].revents)
    read_stream(s, &s->stdout_fd, &s->out);
  if (ps.i_err >= 0 && ps.pfd[ps.i_err].revents)
    read_stream(s, &s->stderr_fd, &s->err);
  if (ps.i_in >= 0 && ps.pfd[ps.i_in].revents)
    write_stdin(s);
  if (ps.i_rep >= 0 && ps.pfd[ps.i_rep].revents)
    read_reports(s);
  if (ps.i_cancel >= 0 && ps.pfd[ps.i_cancel].revents)
    kill_run(s, SUPERVISE_CAUSE_CANCELLED);
  return ps.pfd[ps.i_pid].revents ? 1 : 0;
}

/* Every process of the namespace is gone once its init is: the pipes hold
 * what is left, then EOF. The bound only guards against a writer outside
 * the namespace, such as another run's child in the instant after clone. */
static void supervise_drain(struct supervise *s) {
  struct timespec drain_start;
  clock_gettime(CLOCK_MONOTONIC, &drain_start);
  while ((s->stdout_fd >= 0 || s->stderr_fd >= 0 || s->report_fd >= 0) &&
         supervise_elapsed_us(&drain_start) < 1000000) {
    struct pollfd pfd[3];
    int fds[3] = {s->stdout_fd, s->stderr_fd, s->report_fd};
    for (int i = 0; i < 3; i++)
      pfd[i] = (struct pollfd){.fd = fds[i], .events = POLLIN};
    if (poll(pfd, 3, 100) < 0 && errno != EINTR)
      break;
    if (s->stdout_fd >= 0 && pfd[0].revents)
      read_stream(s, &s->stdout_fd, &s->out);
    if (s->stderr_fd >= 0 && pfd[1].revents)
      read_stream(s, &s->stderr_fd, &s->err);
    if (s->report_fd >= 0 && pfd[2].revents)
      read_reports(s);
  }
}

int supervise_run(struct supervise *s, struct sandbox_error *err) {
  struct cpu_watch cpu = {.known = true, .next_check_ms = 0};
  if (s->stdin_len == 0)
    close_fd(&s->stdin_fd);
  int rc;
  while ((rc = supervise_step(s, &cpu, err)) == 0)
    ;
  if (rc < 0)
    return -1;
  close_fd(&s->stdin_fd);
  supervise_drain(s);
  return 0;
}
