/* interp_cell.c: one cell in a session's interpreter (interp_run), in
 * steps: the interpreter made ready (interp.c), the cell's frame sent with
 * fresh stdin/stdout/stderr pipes, a poll loop over a small table of fds
 * with named roles (the pipes through the engine's pump, the control
 * socket, the process's end, the call's cancel) until the kernel's done or
 * the process's end, then the call's result. A timeout, a cancel or output
 * past the cap raises KeyboardInterrupt in the cell; a cell still running
 * after the grace, or a control channel closed or garbled, ends the
 * interpreter. Everything from the sandbox is hostile: the pump caps the
 * output, the codec (interp_frame.c) checks every frame. Must never wait
 * without a deadline. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "clock.h"
#include "interp.h"
#include "interp_frame.h"
#include "interp_internal.h"
#include "pump.h"
#include "session.h"

/* The roles of the loop's fds besides the pump's pipes. */
enum { ROLE_DONE = PUMP_ROLE_CALLER, ROLE_CTL, ROLE_CANCEL };

struct cell_run {
  struct interp *ip;
  const struct interp_cell *cell;
  struct sandbox_result *res;
  struct interp_outcome *out;
  struct pump pump;
  uint64_t seq;
  uint64_t now, deadline, grace_end, drain_end, ctl_gone_end;
  enum sandbox_killed_by why; /* why the cell was interrupted or killed */
  bool done;                  /* the kernel answered this cell */
  bool ended;                 /* the process ended (or was killed) */
  bool killed;
  bool ctl_more; /* the last read stopped at its bound: read again at once */
  int cancel_fd; /* the call's, -1: none */
  struct timespec started;
};

/* Sends the cell's frame with the cell's ends of three fresh pipes; the
 * host's ends go to the pump. A kernel that does not take cells is of no
 * use: it is killed. */
static int cell_send(struct cell_run *c, struct sbx_error *err) {
  int in[2], o[2], e[2];
  if (pipe2(in, O_CLOEXEC) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "cell pipes");
  cleanup_close int in_r = in[0], in_w = in[1];
  if (pipe2(o, O_CLOEXEC) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "cell pipes");
  cleanup_close int o_r = o[0], o_w = o[1];
  if (pipe2(e, O_CLOEXEC) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "cell pipes");
  cleanup_close int e_r = e[0], e_w = e[1];
  c->seq = ++c->ip->seq;
  cleanup_free char *body = interp_frame_cell(c->cell, c->seq);
  int child_fds[3] = {in_r, o_w, e_w};
  bool sent = body != NULL && interp_frame_send(c->ip->ctl, body, strlen(body), child_fds, 3) == 0;
  c->pump = (struct pump){.stdin_fd = steal_fd(&in_w),
                          .stdout_fd = steal_fd(&o_r),
                          .stderr_fd = steal_fd(&e_r),
                          .stdin_data = c->cell->stdin_data,
                          .stdin_len = c->cell->stdin_len,
                          .limit = c->cell->limits.output_bytes};
  if (c->cell->stream != NULL) {
    c->pump.on_output = c->cell->stream->on_output;
    c->pump.output_arg = c->cell->stream->arg;
  }
  fcntl(c->pump.stdin_fd, F_SETFL, O_NONBLOCK);
  fcntl(c->pump.stdout_fd, F_SETFL, O_NONBLOCK);
  fcntl(c->pump.stderr_fd, F_SETFL, O_NONBLOCK);
  if (!sent) {
    c->ended = c->killed = true;
    c->why = SANDBOX_KILLED_BY_SIGNAL;
  }
  return 0;
}

/* Whether the loop is over: the process ended, or the cell is done and its
 * output drained (both pipes at EOF, or the drain's time up). */
static bool cell_finished(const struct cell_run *c) {
  bool drained = c->pump.stdout_fd < 0 && c->pump.stderr_fd < 0;
  return c->ended || (c->done && (drained || c->now >= c->drain_end));
}

/* The frames the kernel sent, a bounded number per wake-up (a cell that
 * floods the channel must not keep the loop from its deadlines): this
 * cell's done ends the cell. A channel gone or garbled means the kernel is
 * ending (the engine says how once it has reaped it) or can no longer
 * answer. */
static void cell_read_ctl(struct cell_run *c) {
  json_t *done = NULL;
  enum interp_recv r = interp_frame_recv_done(c->ip->ctl, &c->ip->frame, c->seq, &done);
  c->ctl_more = r == INTERP_RECV_MORE;
  if (r == INTERP_RECV_DONE) {
    interp_frame_take_done(done, c->res, c->out);
    json_decref(done);
    c->done = true;
    c->drain_end = sbx_monotonic_ms() + INTERP_DRAIN_MS;
  } else if (r == INTERP_RECV_GONE && c->ctl_gone_end == 0) {
    c->ctl_gone_end = sbx_monotonic_ms() + INTERP_CTL_GONE_MS;
  }
}

/* Before the cell is done: interrupts it at the output cap, a cancel or
 * the timeout; kills the process after the grace, or when the channel has
 * been gone too long. */
static void cell_decide(struct cell_run *c, bool cancelled) {
  if (c->why == SANDBOX_KILLED_BY_NONE) {
    if (c->pump.over)
      c->why = SANDBOX_KILLED_BY_OUTPUT_LIMIT;
    else if (cancelled)
      c->why = SANDBOX_KILLED_BY_CANCELLED;
    else if (c->now >= c->deadline)
      c->why = SANDBOX_KILLED_BY_TIMEOUT;
    if (c->why != SANDBOX_KILLED_BY_NONE) {
      if (c->ip->pidfd >= 0)
        syscall(SYS_pidfd_send_signal, c->ip->pidfd, SIGINT, NULL, 0);
      c->grace_end = c->now + c->ip->t->grace_ms;
    }
  } else if (!c->killed && c->grace_end != 0 && c->now >= c->grace_end) {
    c->killed = true;
  }
  if (!c->killed && !c->ended && c->ctl_gone_end != 0 && c->now >= c->ctl_gone_end) {
    c->killed = true;
    if (c->why == SANDBOX_KILLED_BY_NONE)
      c->why = SANDBOX_KILLED_BY_SIGNAL;
  }
  if (c->killed) {
    interp_process_join(c->ip, true);
    c->ended = true;
  }
}

/* When the loop must wake at the latest. */
static int cell_wait_ms(const struct cell_run *c) {
  if (c->ctl_more && !c->done && c->ctl_gone_end == 0)
    return 0; /* frames may wait in the buffer, where poll does not see them */
  uint64_t wake = c->done ? c->drain_end : c->grace_end != 0 ? c->grace_end : c->deadline;
  if (c->ctl_gone_end != 0 && c->ctl_gone_end < wake)
    wake = c->ctl_gone_end;
  return wake > c->now ? (int)(wake - c->now) : 0;
}

/* One wake-up of the loop; -1 when poll itself failed. */
static int cell_step(struct cell_run *c) {
  struct pump_poll pp;
  pump_poll_clear(&pp);
  pump_poll_add(&pp, ROLE_DONE, c->ip->done, POLLIN);
  if (!c->done && c->ctl_gone_end == 0)
    pump_poll_add(&pp, ROLE_CTL, c->ip->ctl, POLLIN);
  pump_poll_add_pipes(&c->pump, &pp);
  if (c->why == SANDBOX_KILLED_BY_NONE)
    pump_poll_add(&pp, ROLE_CANCEL, c->cancel_fd, POLLIN);
  if (pump_poll_wait(&pp, cell_wait_ms(c)) < 0)
    return -1;
  pump_serve(&c->pump, &pp);
  if ((pump_poll_ready(&pp, ROLE_CTL) || c->ctl_more) && !c->done && c->ctl_gone_end == 0)
    cell_read_ctl(c);
  if (pump_poll_ready(&pp, ROLE_DONE))
    c->ended = true;
  c->now = sbx_monotonic_ms();
  if (!c->done)
    cell_decide(c, pump_poll_ready(&pp, ROLE_CANCEL));
  return 0;
}

/* What is left in the pipes, without waiting; the outputs into res. */
static void cell_collect(struct cell_run *c) {
  if (c->pump.stdout_fd >= 0)
    pump_read(&c->pump, PUMP_STDOUT);
  if (c->pump.stderr_fd >= 0)
    pump_read(&c->pump, PUMP_STDERR);
  pump_close(&c->pump);
  struct sandbox_result *res = c->res;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  res->wall_time_us = (uint64_t)((now.tv_sec - c->started.tv_sec) * 1000000 +
                                 (now.tv_nsec - c->started.tv_nsec) / 1000);
  res->stdout_truncated = c->pump.out.truncated;
  res->stdout_data = sbx_buf_steal(&c->pump.out.buf, &res->stdout_len);
  res->stderr_truncated = c->pump.err.truncated;
  res->stderr_data = sbx_buf_steal(&c->pump.err.buf, &res->stderr_len);
  res->killed_by = c->why;
  res->limits = c->cell->limits;
  /* The cap in force is the one the interpreter started with, not this
   * call's (which applies to the next interpreter). */
  res->limits.memory_bytes = c->ip->spec.limits.memory_bytes;
  res->backend = sandbox_engine_report(c->ip->t->engine)->backend;
}

/* It died in the cell: how, from the engine's classification. */
static void cell_died(struct cell_run *c) {
  const struct interp *ip = c->ip;
  const struct sandbox_result *r = &ip->result;
  struct sandbox_result *res = c->res;
  bool ran = ip->rc == 0;
  if (c->why == SANDBOX_KILLED_BY_NONE && ran)
    res->killed_by =
        r->killed_by == SANDBOX_KILLED_BY_CANCELLED ? SANDBOX_KILLED_BY_SIGNAL : r->killed_by;
  if (ran && res->killed_by == SANDBOX_KILLED_BY_TIMEOUT && c->why == SANDBOX_KILLED_BY_NONE)
    res->cpu_time_exceeded = true;
  res->exit_code = ran && r->signal == 0 && !c->killed ? r->exit_code : -1;
  res->signal = c->killed ? SIGKILL : ran ? r->signal : SIGKILL;
  if (ran && r->signal == SIGXCPU) {
    res->killed_by = SANDBOX_KILLED_BY_TIMEOUT;
    res->cpu_time_exceeded = true;
  }
}

/* The process ended during the call: the result says how, the session's
 * next call that it is gone. */
static void cell_ended(struct cell_run *c, struct session *s) {
  struct interp *ip = c->ip;
  struct interp_table *t = ip->t;
  /* Killed (a kernel that took no cell): not joined yet. */
  interp_process_join(ip, c->killed);
  /* The interpreter's own peak (the group holds little once it is gone). */
  if (ip->rc == 0)
    c->res->peak_memory_bytes = ip->result.peak_memory_bytes;
  if (!c->done)
    cell_died(c);
  struct interp_outcome *out = c->out;
  out->ended = true;
  if (c->killed && c->why != SANDBOX_KILLED_BY_NONE && c->why != SANDBOX_KILLED_BY_SIGNAL)
    snprintf(out->ended_why, sizeof(out->ended_why),
             "killed: KeyboardInterrupt did not end the cell within %llu ms",
             (unsigned long long)t->grace_ms);
  else if (c->killed)
    snprintf(out->ended_why, sizeof(out->ended_why),
             "killed: its control channel was closed or garbled");
  else
    interp_ended_reason(ip, out->ended_why, sizeof(out->ended_why));
  atomic_fetch_add(&t->lost, 1);
  interp_process_stop(ip); /* joined: frees only */
  pthread_mutex_lock(&t->lock);
  snprintf(s->lost, sizeof(s->lost), "the previous call ended it");
  pthread_mutex_unlock(&t->lock);
}

/* The session's memory: a process of the cell the OOM killer took while
 * the interpreter lives on (v1 kills one process; v2 the whole group,
 * which ends the run), and the group's use as the call's peak. */
static void cell_memory(struct cell_run *c, uint64_t group, bool have_oom, uint64_t oom_before) {
  struct sandbox_engine *engine = c->ip->t->engine;
  struct sandbox_result *res = c->res;
  uint64_t oom_after = 0, used = 0;
  struct sandbox_error se;
  if (have_oom && !c->ended && res->killed_by == SANDBOX_KILLED_BY_NONE &&
      sandbox_group_oom_kills(engine, group, &oom_after, &se) == 0 && oom_after > oom_before)
    res->killed_by = SANDBOX_KILLED_BY_MEMORY;
  if (group != 0 && sandbox_group_memory(engine, group, &used, &se) == 0 &&
      used > res->peak_memory_bytes)
    res->peak_memory_bytes = used;
}

int interp_run(struct interp_table *t, struct session *s, const struct interp_start *start,
               const struct interp_cell *cell, struct sandbox_result *res,
               struct interp_outcome *out, struct sbx_error *err) {
  struct interp *ip = s->interp;
  memset(res, 0, sizeof(*res));
  if (interp_ready(ip, start, out, err) < 0)
    return -1;
  struct egress_summary before = {0};
  if (ip->lease != NULL)
    egress_lease_mark(t->egress, ip->lease, start->run_id, &before);
  struct cell_run c = {.ip = ip,
                       .cell = cell,
                       .res = res,
                       .out = out,
                       .cancel_fd = cell->stream != NULL ? cell->stream->cancel_fd : -1};
  clock_gettime(CLOCK_MONOTONIC, &c.started);
  uint64_t oom_before = 0;
  struct sandbox_error oom_err;
  bool have_oom = start->group != 0 &&
                  sandbox_group_oom_kills(t->engine, start->group, &oom_before, &oom_err) == 0;
  if (cell_send(&c, err) < 0)
    return -1;
  c.now = sbx_monotonic_ms();
  c.deadline = c.now + cell->limits.timeout_ms;
  while (!cell_finished(&c))
    if (cell_step(&c) < 0)
      break;
  cell_collect(&c);
  pump_free(&c.pump);
  if (c.ended)
    cell_ended(&c, s);
  cell_memory(&c, start->group, have_oom, oom_before);
  if (ip->lease != NULL) {
    struct egress_summary after;
    egress_lease_read(t->egress, ip->lease, &after);
    out->has_egress = true;
    out->egress = (struct egress_summary){.connections = after.connections - before.connections,
                                          .refused = after.refused - before.refused,
                                          .up = after.up - before.up,
                                          .down = after.down - before.down};
    snprintf(out->egress.first_refusal, sizeof out->egress.first_refusal, "%s",
             after.first_refusal);
  }
  return 0;
}
