/* interp.c: the table of interpreters (see interp.h): which session owns
 * which, acquiring one (evicting the least recently used idle one when all
 * are taken), starting a process and waiting for its kernel's ready,
 * stopping it, and the ends (idle, lifetime, session's end). A cell's own
 * steps are in interp_cell.c, the control socket's frames in interp_frame.c.
 * Everything the kernel sends is hostile (interp_frame.h). Must never hold
 * the table's lock while waiting on a process. */
#include "interp.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cleanup.h"
#include "clock.h"
#include "interp_frame.h"
#include "interp_internal.h"
#include "log.h"
#include "session.h"
#include "tenants.h"

#define START_TIMEOUT_MS 30000      /* from the engine's start to the kernel's ready */
#define KERNEL_OUTPUT (64ull << 10) /* what the interpreter prints outside cells */

static void close_fd(int *fd) {
  if (*fd >= 0)
    close(*fd);
  *fd = -1;
}

/* The slot's zygote, started or replaced now when it is not ready (on
 * this thread: the zygote dies with the thread that started it). */
static void slot_warm_zygote(struct interp *ip) {
  struct interp_table *t = ip->t;
  pthread_mutex_lock(&t->warm_lock);
  t->warm_zygote(t->warm_arg, ip->slot);
  pthread_mutex_unlock(&t->warm_lock);
}

/* The slot's whole life: each interpreter is one sandbox_run, here; in
 * between, the slot's zygote is kept ready (once zygotes_wanted). */
static void *slot_thread(void *arg) {
  struct interp *ip = arg;
  pthread_mutex_lock(&ip->mu);
  for (;;) {
    while (!ip->go && !ip->warm && !ip->quit)
      pthread_cond_wait(&ip->cv, &ip->mu);
    if (ip->go) {
      ip->go = false;
      pthread_mutex_unlock(&ip->mu);
      struct sandbox_result result = {0};
      struct sandbox_error se = {0};
      int rc = sandbox_run(ip->t->engine, ip->slot, &ip->spec, &result, &se);
      uint64_t one = 1;
      ssize_t w = write(ip->done, &one, sizeof one);
      (void)w;
      pthread_mutex_lock(&ip->mu);
      ip->rc = rc;
      ip->result = result;
      ip->err = se;
      ip->ran = true;
      pthread_cond_broadcast(&ip->cv);
      ip->warm = ip->warm || atomic_load(&ip->t->zygotes_wanted);
    } else if (ip->quit) {
      break;
    } else {
      ip->warm = false;
      pthread_mutex_unlock(&ip->mu);
      slot_warm_zygote(ip);
      pthread_mutex_lock(&ip->mu);
    }
  }
  pthread_mutex_unlock(&ip->mu);
  return NULL;
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
  pthread_mutex_init(&t->lock, NULL);
  pthread_cond_init(&t->changed, NULL);
  pthread_mutex_init(&t->warm_lock, NULL);
  t->ready = true;
  for (unsigned i = 0; i < n; i++) {
    struct interp *ip = &t->items[i];
    ip->t = t;
    ip->slot = first_slot + i;
    ip->ctl = ip->child_end = ip->cancel = ip->done = ip->pidfd = -1;
    pthread_mutex_init(&ip->mu, NULL);
    pthread_cond_init(&ip->cv, NULL);
  }
  for (unsigned i = 0; i < n; i++) {
    struct interp *ip = &t->items[i];
    if (pthread_create(&ip->thread, NULL, slot_thread, ip) != 0) {
      interp_table_destroy(t);
      return -1;
    }
    ip->thread_up = true;
  }
  return 0;
}

/* The first python-zygote interpreter: from now on every slot keeps a
 * zygote ready (each on its own thread, one at a time). */
static void want_zygotes(struct interp_table *t) {
  if (atomic_exchange(&t->zygotes_wanted, true))
    return;
  for (unsigned i = 0; i < t->n; i++) {
    struct interp *ip = &t->items[i];
    pthread_mutex_lock(&ip->mu);
    ip->warm = true;
    pthread_cond_signal(&ip->cv);
    pthread_mutex_unlock(&ip->mu);
  }
}

bool interp_process_ended(const struct interp *ip) {
  struct pollfd p = {.fd = ip->done, .events = POLLIN};
  return poll(&p, 1, 0) > 0;
}

void interp_process_join(struct interp *ip, bool kill) {
  if (ip->joined)
    return;
  if (kill) {
    uint64_t one = 1;
    ssize_t w = write(ip->cancel, &one, sizeof one);
    (void)w;
  }
  pthread_mutex_lock(&ip->mu);
  while (!ip->ran)
    pthread_cond_wait(&ip->cv, &ip->mu);
  pthread_mutex_unlock(&ip->mu);
  ip->joined = true;
}

/* Called by the one thread that holds ip busy, without the lock. */
void interp_process_stop(struct interp *ip) {
  if (!ip->alive)
    return;
  interp_process_join(ip, true);
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
  sbx_buf_free(&ip->frame);
  egress_lease_close(ip->t->egress, ip->lease, NULL); /* the process is gone */
  ip->lease = NULL;
  ip->alive = false;
}

void interp_ended_reason(const struct interp *ip, char *out, size_t len) {
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

/* ip becomes s's (lock held): s's tenant holds one interpreter more. */
static void own(struct interp *ip, struct session *s) {
  ip->owner = s;
  s->interp = ip;
  atomic_fetch_add(&s->tenant->interpreters, 1);
}

/* Takes ip from its owner (lock held): the owner's next call is told why,
 * and its tenant holds one interpreter fewer. */
static void disown(struct interp *ip, const char *why) {
  struct session *o = ip->owner;
  if (o != NULL) {
    if (why != NULL && ip->alive)
      snprintf(o->lost, sizeof(o->lost), "%s", why);
    o->interp = NULL;
    atomic_fetch_sub(&o->tenant->interpreters, 1);
  }
  ip->owner = NULL;
}

int interp_acquire(struct interp_table *t, struct session *s, uint32_t tenant_max, unsigned *slot,
                   struct interp_outcome *out, struct sbx_error *err) {
  pthread_mutex_lock(&t->lock);
  /* Wait for a stop of this session's interpreter in progress. */
  while (s->interp != NULL && s->interp->busy)
    pthread_cond_wait(&t->changed, &t->lock);
  struct interp *ip = s->interp, *victim = NULL;
  /* The tenant's own cap, before anyone's interpreter is evicted for it. */
  if (ip == NULL && tenant_max > 0 && atomic_load(&s->tenant->interpreters) >= tenant_max) {
    pthread_mutex_unlock(&t->lock);
    return sbx_error_set(err, SBX_RESOURCE_EXHAUSTED, 0,
                         "tenant %s has its %u interpreters (max_interpreters); close one of its "
                         "interpreter sessions (CloseSession) or wait for one to expire",
                         s->tenant->name, tenant_max);
  }
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
    own(ip, s);
  }
  ip->busy = true;
  snprintf(out->lost, sizeof(out->lost), "%s", s->lost);
  s->lost[0] = '\0';
  *slot = ip->slot;
  pthread_mutex_unlock(&t->lock);
  if (victim != NULL) {
    if (victim->alive)
      atomic_fetch_add(&t->lost, 1);
    interp_process_stop(victim);
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

/* ---- start ---- */

/* The control socket (ours non-blocking, with the peer's credentials), the
 * cancel and done eventfds, and a copy of the environment. */
static int process_channels(struct interp *ip, const struct interp_start *st,
                            struct sbx_error *err) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    return sbx_error_set(err, SBX_INTERNAL, errno, "interpreter socket");
  cleanup_close int ctl = sv[0], child_end = sv[1];
  int one = 1;
  setsockopt(ctl, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
  fcntl(ctl, F_SETFL, O_NONBLOCK);
  cleanup_close int cancel = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  cleanup_close int done = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  cleanup_free char **env = calloc(st->n_env + 2, sizeof(char *));
  if (cancel < 0 || done < 0 || env == NULL)
    return sbx_error_set(err, SBX_INTERNAL, errno ? errno : ENOMEM, "interpreter");
  size_t n_env = 0;
  for (size_t i = 0; i < st->n_env; i++)
    if ((env[n_env] = strdup(st->env[i])) != NULL)
      n_env++;
  ip->ctl = steal_fd(&ctl);
  ip->child_end = steal_fd(&child_end);
  ip->cancel = steal_fd(&cancel);
  ip->done = steal_fd(&done);
  ip->env = steal_pointer(&env);
  ip->n_env = n_env;
  return 0;
}

/* The kernel's run: sandboxd_cell's kernel over the session's workspace,
 * its stdin the control socket. The call's limits bound each cell; the
 * process lives up to the lifetime, with the session's memory cap. */
static void process_spec(struct interp *ip, const struct interp_start *st) {
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
      .network = ip->lease != NULL ? SANDBOX_NETWORK_PROXY : SANDBOX_NETWORK_NONE,
      .netns_fd = ip->lease != NULL ? ip->lease->netns_fd : -1,
      /* A zygote's runs share its network namespace and its mounts. */
      .zygote = st->zygote && ip->t->warm_zygote != NULL && ip->lease == NULL && n_mounts == 0,
  };
  memset(&ip->result, 0, sizeof ip->result);
  memset(&ip->err, 0, sizeof ip->err);
  ip->rc = 0;
}

/* The start failed: the process is killed (unless it ended), joined and
 * freed; err says why. */
static int process_start_failed(struct interp *ip, struct sbx_error *err) {
  char why[300];
  bool ended = interp_process_ended(ip);
  interp_process_join(ip, !ended);
  if (ip->rc < 0)
    snprintf(why, sizeof why, "sandbox setup failed: %s", ip->err.msg);
  else if (!ended)
    snprintf(why, sizeof why, "no answer from the interpreter in %d s", START_TIMEOUT_MS / 1000);
  else
    snprintf(why, sizeof why, "it ended at start (exit %d, signal %d): %.*s", ip->result.exit_code,
             ip->result.signal, (int)(ip->result.stderr_len < 200 ? ip->result.stderr_len : 200),
             ip->result.stderr_data != NULL ? (const char *)ip->result.stderr_data : "");
  interp_process_stop(ip);
  return sbx_error_set(err, SBX_INTERNAL, 0, "the interpreter could not start: %s", why);
}

/* Waits for the kernel's ready with its credentials (its pid, pinned with a
 * pidfd, is where KeyboardInterrupt is sent). */
static int process_wait_ready(struct interp *ip, struct sbx_error *err) {
  pid_t pid = 0;
  uint64_t deadline = ip->started_ms + START_TIMEOUT_MS;
  uid_t uid = ip->t->uid_base + ip->slot;
  for (;;) {
    json_t *obj = NULL;
    int fr = interp_frame_recv(ip->ctl, &ip->frame, &obj, &pid, uid);
    if (fr > 0) {
      bool ready = interp_frame_is_ready(obj);
      json_decref(obj);
      if (ready && pid > 0)
        break;
      fr = -1;
    }
    uint64_t now = sbx_monotonic_ms();
    if (fr < 0 || interp_process_ended(ip) || now >= deadline)
      return process_start_failed(ip, err);
    struct pollfd p[2] = {{.fd = ip->ctl, .events = POLLIN}, {.fd = ip->done, .events = POLLIN}};
    poll(p, 2, (int)(deadline - now));
  }
  close_fd(&ip->child_end);
  ip->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  return 0;
}

static int process_start(struct interp *ip, const struct interp_start *st, struct sbx_error *err) {
  if (process_channels(ip, st, err) < 0)
    return -1;
  if (st->allow != NULL && st->allow->n > 0 &&
      egress_lease_open(ip->t->egress, st->allow, st->run_id, st->tenant, st->tenant_index,
                        &ip->lease, err) < 0) {
    ip->alive = true; /* what process_channels took, freed as a stopped process's */
    ip->joined = true;
    ip->rc = -1;
    interp_process_stop(ip);
    return -1;
  }
  process_spec(ip, st);
  if (ip->spec.zygote)
    want_zygotes(ip->t);
  /* The slot's thread runs it (and may first finish starting the slot's
   * zygote: the wait for ready covers that too). */
  pthread_mutex_lock(&ip->mu);
  ip->ran = false;
  ip->go = true;
  pthread_cond_signal(&ip->cv);
  pthread_mutex_unlock(&ip->mu);
  ip->joined = false;
  ip->alive = true;
  ip->started_ms = sbx_monotonic_ms();
  atomic_fetch_add(&ip->t->starts, 1);
  return process_wait_ready(ip, err);
}

int interp_ready(struct interp *ip, const struct interp_start *st, struct interp_outcome *out,
                 struct sbx_error *err) {
  struct interp_table *t = ip->t;
  /* One that ended on its own since the last call: the session is told. */
  if (ip->alive && interp_process_ended(ip)) {
    interp_process_join(ip, false); /* its result is complete */
    if (out->lost[0] == '\0')
      interp_ended_reason(ip, out->lost, sizeof(out->lost));
    atomic_fetch_add(&t->lost, 1);
    interp_process_stop(ip);
  }
  if (ip->alive && sbx_monotonic_ms() - ip->started_ms >= t->lifetime_ms) {
    if (out->lost[0] == '\0')
      snprintf(out->lost, sizeof(out->lost), "reached its maximum lifetime");
    atomic_fetch_add(&t->lost, 1);
    interp_process_stop(ip);
  }
  if (!ip->alive) {
    if (process_start(ip, st, err) < 0)
      return -1;
    out->started = true;
  }
  return 0;
}

/* ---- ends ---- */

/* Stops ip, marked busy by the caller to hold it, and lets it go. */
static void stop_held(struct interp *ip) {
  struct interp_table *t = ip->t;
  interp_process_stop(ip);
  pthread_mutex_lock(&t->lock);
  ip->busy = false;
  pthread_cond_broadcast(&t->changed);
  pthread_mutex_unlock(&t->lock);
}

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
  if (ip != NULL)
    stop_held(ip);
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
    stop_held(ip);
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
    interp_process_stop(ip);
    if (ip->thread_up) {
      pthread_mutex_lock(&ip->mu);
      ip->quit = true;
      pthread_cond_signal(&ip->cv);
      pthread_mutex_unlock(&ip->mu);
      pthread_join(ip->thread, NULL);
    }
    pthread_mutex_destroy(&ip->mu);
    pthread_cond_destroy(&ip->cv);
  }
  free(t->items);
  pthread_mutex_destroy(&t->warm_lock);
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
