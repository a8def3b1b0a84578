/* interp.c: see interp.h. The protocol with sandboxd_cell's kernel: frames of an
 * 8-byte little-endian length and JSON, both ways, on a stream socket that
 * is the interpreter's stdin. The kernel says {"op":"ready"} once (the
 * kernel attaches its credentials: its pid, pinned with a pidfd, is where
 * KeyboardInterrupt is sent); each cell goes with its stdin, stdout and
 * stderr on the frame's first byte, and ends with {"op":"done",...}.
 * Everything the kernel sends is hostile: frames are bounded and parsed,
 * the result is cut to its cap again here. */
#include "interp.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "session.h"

#define FRAME_MAX (1u << 20)        /* a done frame: the result (64 KiB) as JSON, and more */
#define RESULT_MAX 65536u           /* sandboxd_cell's cap, enforced again */
#define START_TIMEOUT_MS 30000      /* from the engine's start to the kernel's ready */
#define DRAIN_MS 100                /* output still coming after done (children) */
#define CTL_GONE_MS 1000            /* from the channel's end to the process's */
#define KERNEL_OUTPUT (64ull << 10) /* what the interpreter prints outside cells */

struct interp {
  struct interp_table *t;
  unsigned slot;
  /* Under t->lock. */
  struct session *owner;
  bool busy;
  atomic_bool alive; /* a process was started and not yet stopped */
  uint64_t started_ms, last_used_ms;
  /* The process, while alive (the busy holder's, or the stopper's). */
  pthread_t thread;
  int ctl, child_end, cancel, done, pidfd;
  int rc;
  bool joined; /* its thread is joined: stopping only frees */
  struct sandbox_result result;
  struct sandbox_error err;
  struct sandbox_spec spec;
  const char *argv[8];
  char **env;
  size_t n_env;
  char workspace_dir[PATH_MAX];
  struct sandbox_mount mounts[SANDBOX_MAX_EXTRA_MOUNTS];
  struct sandbox_stream stream;
  uint64_t seq;   /* the last cell's number, echoed in its done */
  uint8_t *frame; /* bytes received on ctl not yet parsed */
  size_t frame_len;
};

static void close_fd(int *fd) {
  if (*fd >= 0)
    close(*fd);
  *fd = -1;
}

int interp_table_init(struct interp_table *t, struct sandbox_engine *engine, unsigned first_slot,
                      unsigned n, uid_t uid_base, uint64_t idle_ms, uint64_t lifetime_ms,
                      uint64_t grace_ms) {
  memset(t, 0, sizeof(*t));
  t->engine = engine;
  t->first_slot = first_slot;
  t->n = n;
  t->uid_base = uid_base;
  t->idle_ms = idle_ms;
  t->lifetime_ms = lifetime_ms;
  t->grace_ms = grace_ms;
  t->items = calloc(n > 0 ? n : 1, sizeof(*t->items));
  if (t->items == NULL)
    return -1;
  for (unsigned i = 0; i < n; i++) {
    struct interp *ip = &t->items[i];
    ip->t = t;
    ip->slot = first_slot + i;
    ip->ctl = ip->child_end = ip->cancel = ip->done = ip->pidfd = -1;
  }
  pthread_mutex_init(&t->lock, NULL);
  pthread_cond_init(&t->changed, NULL);
  t->ready = true;
  return 0;
}

/* The interpreter's whole life: one sandbox_run, on a thread of its own. */
static void *interp_thread(void *arg) {
  struct interp *ip = arg;
  ip->rc = sandbox_run(ip->t->engine, ip->slot, &ip->spec, &ip->result, &ip->err);
  uint64_t one = 1;
  ssize_t w = write(ip->done, &one, sizeof one);
  (void)w;
  return NULL;
}

/* Kills the process (if still running) and frees what it held. Called by
 * the one thread that holds ip busy, without the lock. */
static void process_stop(struct interp *ip) {
  if (!ip->alive)
    return;
  if (!ip->joined) {
    uint64_t one = 1;
    ssize_t w = write(ip->cancel, &one, sizeof one);
    (void)w;
    pthread_join(ip->thread, NULL);
  }
  if (ip->rc == 0)
    sandbox_result_free(&ip->result);
  close_fd(&ip->ctl);
  close_fd(&ip->child_end);
  close_fd(&ip->cancel);
  close_fd(&ip->done);
  close_fd(&ip->pidfd);
  for (size_t i = 0; i < ip->n_env; i++)
    free(ip->env[i]);
  free(ip->env);
  ip->env = NULL;
  ip->n_env = 0;
  free(ip->frame);
  ip->frame = NULL;
  ip->frame_len = 0;
  ip->alive = false;
}

/* Whether the process has ended on its own (the thread's sandbox_run came
 * back). */
static bool process_ended(const struct interp *ip) {
  struct pollfd p = {.fd = ip->done, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

/* Why a process that ended on its own did, in words for the session. */
static void ended_reason(const struct interp *ip, char *out, size_t len) {
  const struct sandbox_result *r = &ip->result;
  if (ip->rc < 0)
    snprintf(out, len, "could not run: %s", ip->err.msg);
  else if (r->killed_by == SANDBOX_KILLED_BY_MEMORY)
    snprintf(out, len, "killed at the session's memory cap of %llu bytes",
             (unsigned long long)r->limits.memory_bytes);
  else if (r->killed_by == SANDBOX_KILLED_BY_TIMEOUT)
    snprintf(out, len, "used up its %s", r->cpu_time_exceeded ? "CPU time" : "maximum lifetime");
  else if (r->signal != 0)
    snprintf(out, len, "killed by signal %d (%s)", r->signal,
             r->signal == SIGXCPU ? "a cell's CPU time limit" : strsignal(r->signal));
  else
    snprintf(out, len, "exited with status %d", r->exit_code);
}

/* Takes ip from its owner (lock held): the owner's next call is told why. */
static void disown(struct interp *ip, const char *why) {
  struct session *o = ip->owner;
  if (o != NULL) {
    if (why != NULL && ip->alive)
      snprintf(o->lost, sizeof(o->lost), "%s", why);
    o->interp = NULL;
  }
  ip->owner = NULL;
}

int interp_acquire(struct interp_table *t, struct session *s, unsigned *slot,
                   struct interp_outcome *out, struct sbx_error *err) {
  pthread_mutex_lock(&t->lock);
  /* Wait for a stop of this session's interpreter in progress. */
  while (s->interp != NULL && s->interp->busy)
    pthread_cond_wait(&t->changed, &t->lock);
  struct interp *ip = s->interp, *victim = NULL;
  if (ip == NULL) {
    for (unsigned i = 0; i < t->n && ip == NULL; i++)
      if (t->items[i].owner == NULL && !t->items[i].busy)
        ip = &t->items[i];
    if (ip == NULL) {
      for (unsigned i = 0; i < t->n; i++) {
        struct interp *c = &t->items[i];
        /* One whose process is gone already, else the least recently used. */
        uint64_t age = c->alive ? c->last_used_ms : 0;
        if (!c->busy && (victim == NULL || age < (victim->alive ? victim->last_used_ms : 0)))
          victim = c;
      }
      if (victim == NULL) {
        pthread_mutex_unlock(&t->lock);
        return sbx_error_set(err, SBX_RESOURCE_EXHAUSTED, 0,
                             "all %u interpreters (--max-interpreters) are running calls; retry "
                             "later",
                             t->n);
      }
      ip = victim;
      disown(ip, "evicted for another session, --max-interpreters");
      if (ip->alive)
        atomic_fetch_add(&t->evictions, 1);
    }
    ip->owner = s;
    s->interp = ip;
  }
  ip->busy = true;
  snprintf(out->lost, sizeof(out->lost), "%s", s->lost);
  s->lost[0] = '\0';
  *slot = ip->slot;
  pthread_mutex_unlock(&t->lock);
  if (victim != NULL) {
    if (victim->alive)
      atomic_fetch_add(&t->lost, 1);
    process_stop(victim);
  }
  return 0;
}

void interp_release(struct interp_table *t, struct session *s) {
  pthread_mutex_lock(&t->lock);
  struct interp *ip = s->interp;
  if (ip != NULL) {
    ip->busy = false;
    ip->last_used_ms = sbx_monotonic_ms();
  }
  pthread_cond_broadcast(&t->changed);
  pthread_mutex_unlock(&t->lock);
}

void interp_outcome_free(struct interp_outcome *out) {
  free(out->result);
  out->result = NULL;
}

/* ---- frames ---- */

/* Reads what ctl has; returns 1 with a complete frame's JSON in *obj, 0
 * when none is complete yet, -1 when the peer closed or sent nonsense.
 * With creds, the kernel's pid from the first message's credentials. */
static int frame_read(struct interp *ip, json_t **obj, pid_t *pid) {
  *obj = NULL;
  for (;;) {
    if (ip->frame_len >= 8) {
      uint64_t n = 0;
      for (int i = 7; i >= 0; i--)
        n = (n << 8) | ip->frame[i];
      if (n > FRAME_MAX)
        return -1;
      if (ip->frame_len >= 8 + n) {
        json_error_t je;
        *obj = json_loadb((const char *)ip->frame + 8, (size_t)n, 0, &je);
        memmove(ip->frame, ip->frame + 8 + n, ip->frame_len - 8 - (size_t)n);
        ip->frame_len -= 8 + (size_t)n;
        if (*obj != NULL && json_is_object(*obj))
          return 1;
        json_decref(*obj); /* valid JSON, but not a frame's object */
        *obj = NULL;
        return -1;
      }
    }
    uint8_t *grown = realloc(ip->frame, 8 + FRAME_MAX);
    if (grown == NULL)
      return -1;
    ip->frame = grown;
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(sizeof(struct ucred))];
    } c;
    struct iovec iov = {ip->frame + ip->frame_len, 8 + FRAME_MAX - ip->frame_len};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (pid != NULL) {
      m.msg_control = c.buf;
      m.msg_controllen = sizeof c.buf;
    }
    ssize_t got = recvmsg(ip->ctl, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (got < 0)
      return errno == EAGAIN || errno == EINTR ? 0 : -1;
    if (got == 0)
      return -1;
    for (struct cmsghdr *h = pid != NULL ? CMSG_FIRSTHDR(&m) : NULL; h != NULL;
         h = CMSG_NXTHDR(&m, h))
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_CREDENTIALS && *pid == 0) {
        struct ucred cr;
        memcpy(&cr, CMSG_DATA(h), sizeof cr);
        if (cr.uid == ip->t->uid_base + ip->slot)
          *pid = cr.pid;
      }
    ip->frame_len += (size_t)got;
  }
}

/* Sends the whole of data (blocking, the kernel reads as we write), the
 * fds with its first byte. */
static int send_frame(int sock, const char *data, size_t len, const int *fds, int n_fds) {
  uint8_t head[8];
  for (int i = 0; i < 8; i++)
    head[i] = (uint8_t)((uint64_t)len >> (8 * i));
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(3 * sizeof(int))];
  } c;
  memset(&c, 0, sizeof c);
  struct iovec iov = {head, sizeof head};
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
  if (n_fds > 0) {
    m.msg_control = c.buf;
    m.msg_controllen = CMSG_SPACE((size_t)n_fds * sizeof(int));
    struct cmsghdr *h = CMSG_FIRSTHDR(&m);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN((size_t)n_fds * sizeof(int));
    memcpy(CMSG_DATA(h), fds, (size_t)n_fds * sizeof(int));
  }
  size_t off = 0;
  while (off < sizeof head) {
    ssize_t w = off == 0 ? sendmsg(sock, &m, MSG_NOSIGNAL)
                         : send(sock, head + off, sizeof head - off, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN) {
        struct pollfd p = {.fd = sock, .events = POLLOUT};
        if (poll(&p, 1, 5000) <= 0)
          return -1;
        continue;
      }
      return -1;
    }
    off += (size_t)w;
  }
  off = 0;
  while (off < len) {
    ssize_t w = send(sock, data + off, len - off, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN) {
        struct pollfd p = {.fd = sock, .events = POLLOUT};
        if (poll(&p, 1, 5000) <= 0)
          return -1;
        continue;
      }
      return -1;
    }
    off += (size_t)w;
  }
  return 0;
}

/* ---- start ---- */

static int process_start(struct interp *ip, const struct interp_start *st, struct sbx_error *err) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "interpreter socket");
  int one = 1;
  setsockopt(sv[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
  fcntl(sv[0], F_SETFL, O_NONBLOCK);
  ip->ctl = sv[0];
  ip->child_end = sv[1];
  ip->cancel = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ip->done = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ip->env = calloc(st->n_env + 2, sizeof(char *));
  if (ip->cancel < 0 || ip->done < 0 || ip->env == NULL) {
    close_fd(&ip->ctl);
    close_fd(&ip->child_end);
    close_fd(&ip->cancel);
    close_fd(&ip->done);
    free(ip->env);
    ip->env = NULL;
    return sbx_error_set(err, SBX_INTERNAL, errno ? errno : ENOMEM, "interpreter");
  }
  for (size_t i = 0; i < st->n_env; i++)
    if ((ip->env[ip->n_env] = strdup(st->env[i])) != NULL)
      ip->n_env++;
  snprintf(ip->workspace_dir, sizeof(ip->workspace_dir), "%s", st->workspace_dir);
  size_t n_mounts = st->n_mounts < SANDBOX_MAX_EXTRA_MOUNTS ? st->n_mounts : 0;
  for (size_t i = 0; i < n_mounts; i++)
    ip->mounts[i] = st->mounts[i];
  ip->argv[0] = "/usr/bin/python3";
  ip->argv[1] = "-u";
  ip->argv[2] = "-c";
  ip->argv[3] = SANDBOX_CELL_LOADER;
  ip->argv[4] = "kernel";
  ip->argv[5] = NULL;
  ip->stream = (struct sandbox_stream){.on_output = NULL, .cancel_fd = ip->cancel};
  struct sandbox_limits l = st->limits;
  /* The call's limits bound each cell; the process lives up to the
   * lifetime, with the session's memory cap. */
  l.timeout_ms = ip->t->lifetime_ms;
  l.cpu_time_ms = ip->t->lifetime_ms;
  l.output_bytes = KERNEL_OUTPUT;
  ip->spec = (struct sandbox_spec){
      .argv = ip->argv,
      .env = (const char *const *)ip->env,
      .workspace_dir = ip->workspace_dir,
      .mounts = n_mounts > 0 ? ip->mounts : NULL,
      .n_mounts = n_mounts,
      .limits = l,
      .group = st->group,
      .stream = &ip->stream,
      .stdin_fd = ip->child_end,
  };
  memset(&ip->result, 0, sizeof ip->result);
  memset(&ip->err, 0, sizeof ip->err);
  ip->rc = 0;
  int e = pthread_create(&ip->thread, NULL, interp_thread, ip);
  if (e != 0) {
    close_fd(&ip->ctl);
    close_fd(&ip->child_end);
    close_fd(&ip->cancel);
    close_fd(&ip->done);
    return sbx_error_set(err, SBX_INTERNAL, e, "interpreter thread");
  }
  ip->joined = false;
  ip->alive = true;
  ip->started_ms = sbx_monotonic_ms();
  atomic_fetch_add(&ip->t->starts, 1);
  /* The kernel's ready, with its credentials. */
  pid_t pid = 0;
  uint64_t deadline = ip->started_ms + START_TIMEOUT_MS;
  for (;;) {
    json_t *obj = NULL;
    int fr = frame_read(ip, &obj, &pid);
    if (fr > 0) {
      const char *op = json_string_value(json_object_get(obj, "op"));
      bool ready = op != NULL && strcmp(op, "ready") == 0;
      json_decref(obj);
      if (ready && pid > 0)
        break;
      fr = -1;
    }
    uint64_t now = sbx_monotonic_ms();
    if (fr < 0 || process_ended(ip) || now >= deadline) {
      char why[300];
      bool ended = process_ended(ip);
      if (!ended) {
        uint64_t kill_one = 1;
        ssize_t w = write(ip->cancel, &kill_one, sizeof kill_one);
        (void)w;
      }
      pthread_join(ip->thread, NULL);
      ip->joined = true;
      if (ip->rc < 0)
        snprintf(why, sizeof why, "sandbox setup failed: %s", ip->err.msg);
      else if (!ended)
        snprintf(why, sizeof why, "no answer from the interpreter in %d s",
                 START_TIMEOUT_MS / 1000);
      else
        snprintf(why, sizeof why, "it ended at start (exit %d, signal %d): %.*s",
                 ip->result.exit_code, ip->result.signal,
                 (int)(ip->result.stderr_len < 200 ? ip->result.stderr_len : 200),
                 ip->result.stderr_data != NULL ? (const char *)ip->result.stderr_data : "");
      process_stop(ip);
      return sbx_error_set(err, SBX_INTERNAL, 0, "the interpreter could not start: %s", why);
    }
    struct pollfd p[2] = {{.fd = ip->ctl, .events = POLLIN}, {.fd = ip->done, .events = POLLIN}};
    poll(p, 2, (int)(deadline - now));
  }
  close_fd(&ip->child_end);
  ip->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  return 0;
}

/* ---- a cell ---- */

struct cell_io {
  int in, out, err; /* host ends, -1 once done */
  const uint8_t *stdin_data;
  size_t stdin_left;
  struct sandbox_result *res;
  uint64_t cap;
  const struct sandbox_stream *stream;
  bool over; /* an output went over the cap */
};

static void take_output(struct cell_io *io, int *fd, int stream) {
  uint8_t buf[65536];
  for (;;) {
    ssize_t n = read(*fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0 || errno != EAGAIN)
        close_fd(fd);
      return;
    }
    uint8_t **data = stream == 1 ? &io->res->stdout_data : &io->res->stderr_data;
    size_t *len = stream == 1 ? &io->res->stdout_len : &io->res->stderr_len;
    bool *trunc = stream == 1 ? &io->res->stdout_truncated : &io->res->stderr_truncated;
    size_t keep = (size_t)n;
    if (*len + keep > io->cap) {
      keep = *len < io->cap ? (size_t)(io->cap - *len) : 0;
      *trunc = true;
      io->over = true;
    }
    if (keep > 0) {
      uint8_t *g = realloc(*data, *len + keep);
      if (g == NULL) {
        *trunc = true;
        continue;
      }
      memcpy(g + *len, buf, keep);
      *data = g;
      if (io->stream != NULL && io->stream->on_output != NULL)
        io->stream->on_output(io->stream->arg, stream, g + *len, keep);
      *len += keep;
    }
  }
}

static void feed_stdin(struct cell_io *io) {
  while (io->stdin_left > 0) {
    size_t chunk = io->stdin_left < 65536 ? io->stdin_left : 65536;
    ssize_t n = write(io->in, io->stdin_data, chunk);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN)
        return;
      io->stdin_left = 0; /* EPIPE: the cell closed its stdin */
      break;
    }
    io->stdin_data += n;
    io->stdin_left -= (size_t)n;
  }
  close_fd(&io->in);
}

static char *cell_json(const struct interp_cell *c, uint64_t seq) {
  json_t *o = json_object();
  json_t *args = json_array(), *env = json_object();
  json_object_set_new(o, "code", json_stringn(c->code, c->code_len));
  for (size_t i = 0; i < c->n_args; i++)
    json_array_append_new(args, json_string(c->args[i]));
  for (size_t i = 0; i < c->n_env; i++) {
    const char *eq = strchr(c->env[i], '=');
    if (eq == NULL)
      continue;
    char key[256];
    snprintf(key, sizeof key, "%.*s", (int)(eq - c->env[i]), c->env[i]);
    json_object_set_new(env, key, json_string(eq + 1));
  }
  json_object_set_new(o, "args", args);
  json_object_set_new(o, "env", env);
  json_object_set_new(o, "cpu_s", json_integer((json_int_t)((c->limits.cpu_time_ms + 999) / 1000)));
  json_object_set_new(o, "seq", json_integer((json_int_t)seq));
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  return s;
}

/* The done frame's figures into res and out (hostile: checked). */
static void take_done(json_t *obj, struct sandbox_result *res, struct interp_outcome *out) {
  json_t *code = json_object_get(obj, "exit_code");
  res->exit_code = json_is_integer(code) ? (int)(json_integer_value(code) & 0xff) : 1;
  json_t *cpu = json_object_get(obj, "cpu_us");
  if (json_is_integer(cpu) && json_integer_value(cpu) > 0)
    res->cpu_time_us = (uint64_t)json_integer_value(cpu);
  const char *status = json_string_value(json_object_get(obj, "status"));
  out->interrupted = status != NULL && strcmp(status, "interrupted") == 0;
  json_t *result = json_object_get(obj, "result");
  if (json_is_string(result)) {
    size_t len = json_string_length(result);
    out->result_truncated = json_is_true(json_object_get(obj, "truncated"));
    if (len > RESULT_MAX) {
      len = RESULT_MAX;
      while (len > 0 && ((uint8_t)json_string_value(result)[len] & 0xc0) == 0x80)
        len--; /* never half a character */
      out->result_truncated = true;
    }
    out->result = strndup(json_string_value(result), len);
    if (out->result != NULL) {
      out->has_result = true;
      out->result_len = len;
    }
  }
}

static void interrupt(struct interp *ip) {
  if (ip->pidfd >= 0)
    syscall(SYS_pidfd_send_signal, ip->pidfd, SIGINT, NULL, 0);
}

int interp_run(struct interp_table *t, struct session *s, const struct interp_start *start,
               const struct interp_cell *cell, struct sandbox_result *res,
               struct interp_outcome *out, struct sbx_error *err) {
  struct interp *ip = s->interp;
  memset(res, 0, sizeof(*res));
  /* One that ended on its own since the last call: the session is told. */
  if (ip->alive && process_ended(ip)) {
    pthread_join(ip->thread, NULL); /* its result is complete */
    ip->joined = true;
    if (out->lost[0] == '\0')
      ended_reason(ip, out->lost, sizeof(out->lost));
    atomic_fetch_add(&t->lost, 1);
    process_stop(ip);
  }
  if (ip->alive && sbx_monotonic_ms() - ip->started_ms >= t->lifetime_ms) {
    if (out->lost[0] == '\0')
      snprintf(out->lost, sizeof(out->lost), "reached its maximum lifetime");
    atomic_fetch_add(&t->lost, 1);
    process_stop(ip);
  }
  if (!ip->alive) {
    if (process_start(ip, start, err) < 0)
      return -1;
    out->started = true;
  }
  struct timespec ts0;
  clock_gettime(CLOCK_MONOTONIC, &ts0);
  /* A process of the cell the OOM killer took while the interpreter lives
   * on (v1 kills one process; v2 the whole group, which ends the run). */
  uint64_t oom_before = 0, oom_after = 0;
  struct sandbox_error oom_err;
  bool have_oom = start->group != 0 &&
                  sandbox_group_oom_kills(t->engine, start->group, &oom_before, &oom_err) == 0;
  int in[2] = {-1, -1}, o[2] = {-1, -1}, e[2] = {-1, -1};
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(o, O_CLOEXEC) < 0 || pipe2(e, O_CLOEXEC) < 0) {
    int en = errno;
    close_fd(&in[0]), close_fd(&in[1]), close_fd(&o[0]), close_fd(&o[1]), close_fd(&e[0]);
    return sbx_error_set(err, SBX_INTERNAL, en, "cell pipes");
  }
  uint64_t seq = ++ip->seq;
  char *body = cell_json(cell, seq);
  int child_fds[3] = {in[0], o[1], e[1]};
  int sent = body != NULL ? send_frame(ip->ctl, body, strlen(body), child_fds, 3) : -1;
  free(body);
  for (int i = 0; i < 3; i++)
    close(child_fds[i]);
  struct cell_io io = {.in = in[1],
                       .out = o[0],
                       .err = e[0],
                       .stdin_data = cell->stdin_data,
                       .stdin_left = cell->stdin_len,
                       .res = res,
                       .cap = cell->limits.output_bytes,
                       .stream = cell->stream};
  fcntl(io.in, F_SETFL, O_NONBLOCK);
  fcntl(io.out, F_SETFL, O_NONBLOCK);
  fcntl(io.err, F_SETFL, O_NONBLOCK);
  uint64_t now = sbx_monotonic_ms();
  uint64_t deadline = now + cell->limits.timeout_ms, grace_end = 0, drain_end = 0;
  uint64_t ctl_gone_end = 0;
  enum sandbox_killed_by why = SANDBOX_KILLED_BY_NONE;
  bool done = false, ended = sent < 0, killed = false;
  int cancel_fd = cell->stream != NULL ? cell->stream->cancel_fd : -1;
  if (sent < 0) {
    killed = true; /* a kernel that does not take cells is of no use */
    why = SANDBOX_KILLED_BY_SIGNAL;
  }
  while (!ended && !(done && ((io.out < 0 && io.err < 0) || now >= drain_end))) {
    struct pollfd p[6];
    int np = 0;
    int i_ctl = -1, i_done, i_in = -1, i_out = -1, i_err = -1, i_cancel = -1;
    p[np] = (struct pollfd){.fd = ip->done, .events = POLLIN};
    i_done = np++;
    if (!done && ctl_gone_end == 0) {
      p[np] = (struct pollfd){.fd = ip->ctl, .events = POLLIN};
      i_ctl = np++;
    }
    if (io.in >= 0) {
      p[np] = (struct pollfd){.fd = io.in, .events = POLLOUT};
      i_in = np++;
    }
    if (io.out >= 0) {
      p[np] = (struct pollfd){.fd = io.out, .events = POLLIN};
      i_out = np++;
    }
    if (io.err >= 0) {
      p[np] = (struct pollfd){.fd = io.err, .events = POLLIN};
      i_err = np++;
    }
    if (cancel_fd >= 0 && why == SANDBOX_KILLED_BY_NONE) {
      p[np] = (struct pollfd){.fd = cancel_fd, .events = POLLIN};
      i_cancel = np++;
    }
    uint64_t wake = done ? drain_end : grace_end != 0 ? grace_end : deadline;
    if (ctl_gone_end != 0 && ctl_gone_end < wake)
      wake = ctl_gone_end;
    int rv = poll(p, (nfds_t)np, wake > now ? (int)(wake - now) : 0);
    if (rv < 0 && errno != EINTR)
      break;
    if (i_in >= 0 && p[i_in].revents)
      feed_stdin(&io);
    if (i_out >= 0 && p[i_out].revents)
      take_output(&io, &io.out, 1);
    if (i_err >= 0 && p[i_err].revents)
      take_output(&io, &io.err, 2);
    if (i_ctl >= 0 && p[i_ctl].revents && ctl_gone_end == 0) {
      json_t *obj = NULL;
      int fr;
      while ((fr = frame_read(ip, &obj, NULL)) > 0) {
        const char *op = json_string_value(json_object_get(obj, "op"));
        json_t *jseq = json_object_get(obj, "seq");
        /* A done of another cell (an earlier one's, or one a cell forged)
         * is not this call's answer. */
        if (op != NULL && strcmp(op, "done") == 0 && !done && json_is_integer(jseq) &&
            (uint64_t)json_integer_value(jseq) == seq) {
          take_done(obj, res, out);
          done = true;
          drain_end = sbx_monotonic_ms() + DRAIN_MS;
        }
        json_decref(obj);
      }
      /* The kernel's channel is gone or garbled: it is ending (the engine
       * says how once it has reaped it), or it can no longer answer. */
      if (fr < 0 && !done && ctl_gone_end == 0)
        ctl_gone_end = sbx_monotonic_ms() + CTL_GONE_MS;
    }
    if (p[i_done].revents)
      ended = true;
    now = sbx_monotonic_ms();
    if (done)
      continue;
    if (why == SANDBOX_KILLED_BY_NONE) {
      if (io.over)
        why = SANDBOX_KILLED_BY_OUTPUT_LIMIT;
      else if (i_cancel >= 0 && p[i_cancel].revents)
        why = SANDBOX_KILLED_BY_CANCELLED;
      else if (now >= deadline)
        why = SANDBOX_KILLED_BY_TIMEOUT;
      if (why != SANDBOX_KILLED_BY_NONE) {
        interrupt(ip);
        grace_end = now + t->grace_ms;
      }
    } else if (!killed && grace_end != 0 && now >= grace_end) {
      killed = true;
    }
    if (!killed && !ended && ctl_gone_end != 0 && now >= ctl_gone_end) {
      killed = true;
      if (why == SANDBOX_KILLED_BY_NONE)
        why = SANDBOX_KILLED_BY_SIGNAL;
    }
    if (killed) {
      uint64_t one = 1;
      ssize_t w = write(ip->cancel, &one, sizeof one);
      (void)w;
      pthread_join(ip->thread, NULL);
      ip->joined = true;
      ended = true;
    }
  }
  /* What is left in the pipes, without waiting. */
  if (io.out >= 0)
    take_output(&io, &io.out, 1);
  if (io.err >= 0)
    take_output(&io, &io.err, 2);
  close_fd(&io.in);
  close_fd(&io.out);
  close_fd(&io.err);
  struct timespec ts1;
  clock_gettime(CLOCK_MONOTONIC, &ts1);
  res->wall_time_us =
      (uint64_t)((ts1.tv_sec - ts0.tv_sec) * 1000000 + (ts1.tv_nsec - ts0.tv_nsec) / 1000);
  res->killed_by = why;
  res->limits = cell->limits;
  /* The cap in force is the one the interpreter started with, not this
   * call's (which applies to the next interpreter). */
  res->limits.memory_bytes = ip->spec.limits.memory_bytes;
  res->backend = sandbox_engine_report(t->engine)->backend;
  if (ended) {
    if (!ip->joined) {
      pthread_join(ip->thread, NULL);
      ip->joined = true;
    }
    const struct sandbox_result *r = &ip->result;
    /* The interpreter's own peak (the group holds little once it is gone). */
    if (ip->rc == 0)
      res->peak_memory_bytes = r->peak_memory_bytes;
    if (!done) {
      /* It died in the cell: how, from the engine's classification. */
      if (why == SANDBOX_KILLED_BY_NONE && ip->rc == 0)
        res->killed_by =
            r->killed_by == SANDBOX_KILLED_BY_CANCELLED ? SANDBOX_KILLED_BY_SIGNAL : r->killed_by;
      if (ip->rc == 0 && res->killed_by == SANDBOX_KILLED_BY_TIMEOUT &&
          why == SANDBOX_KILLED_BY_NONE)
        res->cpu_time_exceeded = true;
      res->exit_code = ip->rc == 0 && r->signal == 0 && !killed ? r->exit_code : -1;
      res->signal = killed ? SIGKILL : ip->rc == 0 ? r->signal : SIGKILL;
      if (ip->rc == 0 && r->signal == SIGXCPU) {
        res->killed_by = SANDBOX_KILLED_BY_TIMEOUT;
        res->cpu_time_exceeded = true;
      }
    }
    out->ended = true;
    if (killed && why == SANDBOX_KILLED_BY_TIMEOUT)
      snprintf(out->ended_why, sizeof(out->ended_why),
               "killed: KeyboardInterrupt did not end the cell within %llu ms",
               (unsigned long long)t->grace_ms);
    else if (killed && why != SANDBOX_KILLED_BY_NONE && why != SANDBOX_KILLED_BY_SIGNAL)
      snprintf(out->ended_why, sizeof(out->ended_why),
               "killed: KeyboardInterrupt did not end the cell within %llu ms",
               (unsigned long long)t->grace_ms);
    else if (killed)
      snprintf(out->ended_why, sizeof(out->ended_why),
               "killed: its control channel was closed or garbled");
    else
      ended_reason(ip, out->ended_why, sizeof(out->ended_why));
    atomic_fetch_add(&t->lost, 1);
    process_stop(ip); /* joined: frees only */
    /* The session's next call says so. */
    pthread_mutex_lock(&t->lock);
    snprintf(s->lost, sizeof(s->lost), "the previous call ended it");
    pthread_mutex_unlock(&t->lock);
  }
  if (have_oom && !ended && res->killed_by == SANDBOX_KILLED_BY_NONE &&
      sandbox_group_oom_kills(t->engine, start->group, &oom_after, &oom_err) == 0 &&
      oom_after > oom_before)
    res->killed_by = SANDBOX_KILLED_BY_MEMORY;
  uint64_t used = 0;
  struct sandbox_error se;
  if (start->group != 0 && sandbox_group_memory(t->engine, start->group, &used, &se) == 0 &&
      used > res->peak_memory_bytes)
    res->peak_memory_bytes = used;
  return 0;
}

/* ---- ends ---- */

void interp_session_end(struct interp_table *t, struct session *s) {
  if (!t->ready)
    return;
  pthread_mutex_lock(&t->lock);
  while (s->interp != NULL && s->interp->busy)
    pthread_cond_wait(&t->changed, &t->lock);
  struct interp *ip = s->interp;
  if (ip != NULL) {
    disown(ip, NULL);
    ip->busy = true;
  }
  pthread_mutex_unlock(&t->lock);
  if (ip == NULL)
    return;
  process_stop(ip);
  pthread_mutex_lock(&t->lock);
  ip->busy = false;
  pthread_cond_broadcast(&t->changed);
  pthread_mutex_unlock(&t->lock);
}

void interp_expire(struct interp_table *t) {
  if (!t->ready)
    return;
  uint64_t now = sbx_monotonic_ms();
  for (unsigned i = 0; i < t->n; i++) {
    struct interp *ip = &t->items[i];
    char why[160] = "";
    pthread_mutex_lock(&t->lock);
    if (!ip->busy && ip->alive && ip->owner != NULL) {
      if (now - ip->last_used_ms >= t->idle_ms)
        snprintf(why, sizeof why, "stopped after %llu s without a call",
                 (unsigned long long)(t->idle_ms / 1000));
      else if (now - ip->started_ms >= t->lifetime_ms)
        snprintf(why, sizeof why, "reached its maximum lifetime of %llu s",
                 (unsigned long long)(t->lifetime_ms / 1000));
    }
    if (why[0] != '\0') {
      /* The session keeps its slot (its files stay owned by the slot's
       * uid): only the process goes. */
      snprintf(ip->owner->lost, sizeof(ip->owner->lost), "%s", why);
      ip->busy = true;
    }
    pthread_mutex_unlock(&t->lock);
    if (why[0] == '\0')
      continue;
    atomic_fetch_add(&t->lost, 1);
    log_line("interpreter_end", "slot=%u reason=\"%s\"", ip->slot, why);
    process_stop(ip);
    pthread_mutex_lock(&t->lock);
    ip->busy = false;
    pthread_cond_broadcast(&t->changed);
    pthread_mutex_unlock(&t->lock);
  }
}

void interp_table_destroy(struct interp_table *t) {
  if (!t->ready)
    return;
  for (unsigned i = 0; i < t->n; i++) {
    struct interp *ip = &t->items[i];
    pthread_mutex_lock(&t->lock);
    while (ip->busy)
      pthread_cond_wait(&t->changed, &t->lock);
    disown(ip, NULL);
    pthread_mutex_unlock(&t->lock);
    process_stop(ip);
  }
  free(t->items);
  pthread_mutex_destroy(&t->lock);
  pthread_cond_destroy(&t->changed);
  t->ready = false;
}

unsigned interp_count(struct interp_table *t) {
  if (!t->ready)
    return 0;
  unsigned n = 0;
  pthread_mutex_lock(&t->lock);
  for (unsigned i = 0; i < t->n; i++)
    n += t->items[i].alive ? 1 : 0;
  pthread_mutex_unlock(&t->lock);
  return n;
}
