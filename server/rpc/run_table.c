/* run_table.c: see run_table.h. Replies are built here (call.c) under the
 * lock and sent through deps.send after it; never blocks on anything but
 * its own lock and the queue's. */
#include "run_table.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <uuid/uuid.h>

#include "clock.h"
#include "envelope.h"
#include "call.h"
#include "runner.h"

/* Calls answered under the lock, sent after it: linked through wait.next. */
struct outbox {
  struct server_call *head;
};

static void outbox_add(struct outbox *o, struct server_call *call) {
  call->wait.next = o->head;
  o->head = call;
}

static void outbox_send(struct run_table *t, struct outbox *o) {
  struct server_call *call = o->head;
  while (call != NULL) {
    struct server_call *next = call->wait.next;
    call->wait.next = NULL;
    t->deps.send(call);
    call = next;
  }
  o->head = NULL;
}

static uint64_t min_u64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

int run_table_init(struct run_table *t, const struct run_table_deps *deps, size_t max_started,
                   size_t max_waiting, uint64_t ttl_ms) {
  memset(t, 0, sizeof(*t));
  t->deps = *deps;
  t->max_started = max_started;
  t->max_waiting = max_waiting;
  t->ttl_ms = ttl_ms;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  int rv = pthread_cond_init(&t->wake, &ca);
  pthread_condattr_destroy(&ca);
  if (rv != 0)
    return -rv;
  pthread_mutex_init(&t->lock, NULL);
  return 0;
}

static void run_free(struct live_run *run) {
  if (run == NULL)
    return;
  if (run->cancel_fd >= 0)
    close(run->cancel_fd);
  sbx_buf_free(&run->out);
  sbx_buf_free(&run->err);
  free(run->message);
  free(run->result);
  free(run);
}

/* The tenant's run of that id: visible runs only, unless hidden_too (the
 * duplicate check). Another tenant's run of the same id is not found, by
 * the same walk. Under the lock. */
static struct live_run *find(struct run_table *t, const struct tenant *tenant, const char *run_id,
                             bool hidden_too) {
  for (struct live_run *r = t->runs; r != NULL; r = r->next)
    if ((hidden_too || !r->hidden) && r->tenant == tenant && strcmp(r->run_id, run_id) == 0)
      return r;
  return NULL;
}

static void unlink_run(struct run_table *t, struct live_run *run) {
  for (struct live_run **p = &t->runs; *p != NULL; p = &(*p)->next)
    if (*p == run) {
      *p = run->next;
      run->next = NULL;
      if (run->started)
        t->n_started--;
      return;
    }
}

/* A WatchRun reply for call, built on it. final: the response of a run
 * ending now (RunCode's, not kept); force: complete whatever the offsets
 * (a RunCode run's record goes with its answer). Under the lock. */
static void reply_watch(struct live_run *run, struct server_call *call,
                        const Sandbox__V1__RunCodeResponse *final, bool force) {
  Sandbox__V1__WatchRunResponse resp = SANDBOX__V1__WATCH_RUN_RESPONSE__INIT;
  resp.state = (Sandbox__V1__RunState)run->state;
  size_t oo = (size_t)min_u64(call->wait.out_off, run->out.len);
  size_t oe = (size_t)min_u64(call->wait.err_off, run->err.len);
  size_t no = (size_t)min_u64(run->out.len - oo, RUN_TABLE_CHUNK_BYTES);
  size_t ne = (size_t)min_u64(run->err.len - oe, RUN_TABLE_CHUNK_BYTES);
  resp.stdout = (ProtobufCBinaryData){.len = no, .data = no > 0 ? run->out.data + oo : NULL};
  resp.stderr = (ProtobufCBinaryData){.len = ne, .data = ne > 0 ? run->err.data + oe : NULL};
  resp.stdout_offset = oo;
  resp.stderr_offset = oe;
  resp.stdout_truncated = run->out_truncated;
  resp.stderr_truncated = run->err_truncated;
  Sandbox__V1__RunCodeResponse *kept = NULL;
  bool at_end = oo + no == run->out.len && oe + ne == run->err.len;
  if (run->state == RUN_DONE && (at_end || force)) {
    resp.complete = true;
    resp.status = (Sandbox__V1__Code)run->status;
    resp.message = run->message != NULL ? run->message : "";
    if (final != NULL) {
      resp.result = (Sandbox__V1__RunCodeResponse *) final;
    } else if (run->result != NULL) {
      kept = sandbox__v1__run_code_response__unpack(NULL, run->result_len, run->result);
      resp.result = kept;
      if (kept == NULL) {
        resp.status = SANDBOX__V1__CODE__INTERNAL;
        resp.message = "out of memory reading the run's result";
      }
    }
    if (run->started) {
      run->expires_ms = min_u64(run->expires_ms, sbx_monotonic_ms() + RUN_TABLE_KEEP_AFTER_READ_MS);
      run->delivered = true;
    }
  }
  call_reply(call, SBX_OK, "", &resp.base);
  if (kept != NULL)
    sandbox__v1__run_code_response__free_unpacked(kept, NULL);
}

static void reply_cancel(struct live_run *run, struct server_call *call) {
  Sandbox__V1__CancelRunResponse resp = SANDBOX__V1__CANCEL_RUN_RESPONSE__INIT;
  resp.state = (Sandbox__V1__RunState)run->state;
  call_reply(call, SBX_OK, "", &resp.base);
}

/* call, just taken off run's waiters, answered into o: a CancelRun with
 * the state, a WatchRun with what it has not seen (final, force: as
 * reply_watch). Under the lock. */
static void answer(struct run_table *t, struct live_run *run, struct server_call *call,
                   const Sandbox__V1__RunCodeResponse *final, bool force, struct outbox *o) {
  call->wait.run = NULL;
  t->n_waiting--;
  if (call->wait.cancel)
    reply_cancel(run, call);
  else
    reply_watch(run, call, final, force);
  outbox_add(o, call);
}

/* Every waiting call of run answered into o (watches: only those with
 * news, unless all). Under the lock. */
static void answer_waiters(struct run_table *t, struct live_run *run, bool all,
                           const Sandbox__V1__RunCodeResponse *final, struct outbox *o) {
  struct server_call **p = &run->waiters;
  while (*p != NULL) {
    struct server_call *call = *p;
    bool news = call->wait.out_off < run->out.len || call->wait.err_off < run->err.len;
    if (!all && (call->wait.cancel || !news)) {
      p = &call->wait.next;
      continue;
    }
    *p = call->wait.next;
    answer(t, run, call, final, !run->started, o);
  }
}

/* run's waiting calls past their deadline answered into o with the state
 * now; the next deadline of the others lowers *next. Under the lock. */
static void answer_expired(struct run_table *t, struct live_run *run, uint64_t now, uint64_t *next,
                           struct outbox *o) {
  for (struct server_call **w = &run->waiters; *w != NULL;) {
    struct server_call *call = *w;
    if (call->wait.deadline_ms > now) {
      *next = min_u64(*next, call->wait.deadline_ms);
      w = &call->wait.next;
      continue;
    }
    *w = call->wait.next;
    answer(t, run, call, NULL, false, o);
  }
}

/* The table's own thread: watches past their wait, outcomes past their
 * TTL. */
static void *timer_main(void *arg) {
  struct run_table *t = arg;
  pthread_mutex_lock(&t->lock);
  while (!t->stopping) {
    uint64_t now = sbx_monotonic_ms(), next = now + 1000;
    struct outbox o = {NULL};
    struct live_run *expired = NULL;
    for (struct live_run **p = &t->runs; *p != NULL;) {
      struct live_run *run = *p;
      answer_expired(t, run, now, &next, &o);
      if (run->state == RUN_DONE && run->started && !run->pinned && !run->finishing &&
          run->expires_ms <= now) {
        *p = run->next;
        t->n_started--;
        run->next = expired;
        expired = run;
        continue;
      }
      if (run->state == RUN_DONE && run->started && !run->finishing)
        next = min_u64(next, run->expires_ms);
      p = &run->next;
    }
    if (o.head != NULL || expired != NULL) {
      pthread_mutex_unlock(&t->lock);
      outbox_send(t, &o);
      while (expired != NULL) {
        struct live_run *n = expired->next;
        run_free(expired);
        expired = n;
      }
      pthread_mutex_lock(&t->lock);
      continue;
    }
    struct timespec until = {.tv_sec = (time_t)(next / 1000),
                             .tv_nsec = (long)(next % 1000) * 1000000L};
    pthread_cond_timedwait(&t->wake, &t->lock, &until);
  }
  pthread_mutex_unlock(&t->lock);
  return NULL;
}

int run_table_start(struct run_table *t, struct sbx_error *err) {
  int rv = pthread_create(&t->timer, NULL, timer_main, t);
  if (rv != 0)
    return sbx_error_set(err, SBX_INTERNAL, rv, "run table thread");
  t->timer_started = true;
  return 0;
}

void run_table_stop(struct run_table *t) {
  if (!t->timer_started)
    return;
  pthread_mutex_lock(&t->lock);
  t->stopping = true;
  /* Nothing runs any more: whoever still waits gets the state now. */
  struct outbox o = {NULL};
  for (struct live_run *run = t->runs; run != NULL; run = run->next)
    answer_waiters(t, run, true, NULL, &o);
  pthread_cond_signal(&t->wake);
  pthread_mutex_unlock(&t->lock);
  outbox_send(t, &o);
  pthread_join(t->timer, NULL);
  t->timer_started = false;
}

void run_table_destroy(struct run_table *t) {
  while (t->runs != NULL) {
    struct live_run *n = t->runs->next;
    run_free(t->runs);
    t->runs = n;
  }
  pthread_mutex_destroy(&t->lock);
  pthread_cond_destroy(&t->wake);
}

struct live_run *run_table_add(struct run_table *t, struct server_call *call, bool started,
                               struct sbx_error *err) {
  const Sandbox__V1__RunCodeRequest *req = (const Sandbox__V1__RunCodeRequest *)call->input;
  struct live_run *run = calloc(1, sizeof(*run));
  if (run == NULL) {
    sbx_error_set(err, SBX_INTERNAL, ENOMEM, "run table");
    return NULL;
  }
  run->table = t;
  run->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (run->cancel_fd < 0) {
    sbx_error_set(err, SBX_INTERNAL, errno, "run table: eventfd");
    run_free(run);
    return NULL;
  }
  if (req->run_id[0] != '\0') {
    snprintf(run->run_id, sizeof(run->run_id), "%s", req->run_id);
  } else {
    uuid_t uu;
    uuid_generate_random(uu);
    uuid_unparse_lower(uu, run->run_id);
  }
  run->tenant = call->tenant;
  run->max_interpreters = call->policy.max_interpreters;
  run->state = RUN_QUEUED;
  run->method = call->method;
  run->started = started;
  run->hidden = run->pinned = true;
  pthread_mutex_lock(&t->lock);
  if (find(t, run->tenant, run->run_id, true) != NULL) {
    pthread_mutex_unlock(&t->lock);
    sbx_error_set(err, SBX_ALREADY_EXISTS, 0,
                  "run_id: a run with this id is queued, running, or holds an outcome not yet "
                  "read; choose another id, or leave run_id empty for a new UUID");
    run_free(run);
    return NULL;
  }
  /* Outcomes already read are only kept for a lost reply: they give way.
   * One whose worker is still finishing with it (a few calls, no I/O but
   * nng's asynchronous sends) is waited for, then taken. */
  struct live_run *evicted = NULL;
  while (started && t->n_started >= t->max_started) {
    bool finishing = false;
    for (struct live_run *r = t->runs; r != NULL; r = r->next)
      if (r->started && r->delivered && !r->pinned && r->waiters == NULL) {
        finishing |= r->finishing;
        if (!r->finishing)
          evicted = r;
      }
    if (evicted != NULL) {
      unlink_run(t, evicted);
      break;
    }
    if (!finishing)
      break;
    pthread_cond_wait(&t->wake, &t->lock);
  }
  if (started && t->n_started >= t->max_started) {
    pthread_mutex_unlock(&t->lock);
    sbx_error_set(err, SBX_RESOURCE_EXHAUSTED, 0,
                  "%zu started runs are queued, running or waiting for their outcome to be read "
                  "(--max-started-runs); read or cancel some, or retry later",
                  t->max_started);
    run_free(run);
    return NULL;
  }
  run->next = t->runs;
  t->runs = run;
  t->n_started += started;
  pthread_mutex_unlock(&t->lock);
  run_free(evicted);
  /* The request and what the handler reserved move to the record. */
  run->alloc = call->alloc;
  run->alloc.base.allocator_data = &run->alloc;
  run->req = (Sandbox__V1__RunCodeRequest *)call->input;
  call->input = NULL;
  run->limits = call->limits;
  run->runtime = call->runtime;
  run->compile_limits = call->compile_limits;
  run->session = call->session;
  run->session_created = call->session_created;
  call->session = NULL;
  run->deadline_unix_ms = call->deadline_unix_ms;
  run->received_ms = call->received_ms;
  run->pipe_id = call->pipe_id;
  memcpy(run->request_id, call->request_id, sizeof(run->request_id));
  memcpy(run->peer, call->peer, sizeof(run->peer));
  run->call = started ? NULL : call;
  return run;
}

void run_table_publish(struct run_table *t, struct live_run *run) {
  pthread_mutex_lock(&t->lock);
  run->hidden = run->pinned = false;
  /* A RunCode run that ended before the handler let go: freed here once
   * run_table_finish has let go of it too, else by run_table_finish (it
   * still reads the request after the state says done). */
  bool gone = run->let_go && !run->started;
  if (gone)
    unlink_run(t, run);
  pthread_mutex_unlock(&t->lock);
  if (gone)
    run_free(run);
}

void run_table_give_back(struct run_table *t, struct live_run *run, struct server_call *call) {
  pthread_mutex_lock(&t->lock);
  unlink_run(t, run); /* hidden: nobody waits on it */
  pthread_mutex_unlock(&t->lock);
  call->alloc = run->alloc;
  call->alloc.base.allocator_data = &call->alloc;
  call->input = &run->req->base;
  call->session = run->session;
  call->session_created = run->session_created;
  run_free(run);
}

bool run_table_begin(struct run_table *t, struct live_run *run) {
  pthread_mutex_lock(&t->lock);
  bool go = !run->cancel_requested;
  if (go)
    run->state = RUN_RUNNING;
  pthread_mutex_unlock(&t->lock);
  return go;
}

/* Appends what the engine stored (it applies the output limit; the cap
 * here only guards the copy). Out of memory, the watcher misses it; the
 * result still has it. */
static void stream_add(struct sbx_buf *s, const uint8_t *data, size_t len, uint64_t limit) {
  (void)sbx_buf_append_upto(s, data, len, limit < SIZE_MAX ? (size_t)limit : SIZE_MAX);
}

void run_table_on_output(void *arg, int stream, const uint8_t *data, size_t len) {
  struct live_run *run = arg;
  struct run_table *t = run->table;
  struct outbox o = {NULL};
  pthread_mutex_lock(&t->lock);
  stream_add(stream == 1 ? &run->out : &run->err, data, len, run->limits.output_bytes);
  if (run->waiters != NULL)
    answer_waiters(t, run, false, NULL, &o);
  pthread_mutex_unlock(&t->lock);
  outbox_send(t, &o);
}

void run_table_finish(struct run_table *t, struct live_run *run,
                      const Sandbox__V1__RunCodeResponse *resp, const struct sbx_error *err) {
  /* What is kept is made before the lock: packing a large result takes a
   * while. */
  uint8_t *packed = NULL;
  size_t packed_len = 0;
  char *message = err != NULL ? call_not_run_message(err) : NULL;
  if (run->started && resp != NULL) {
    packed_len = protobuf_c_message_get_packed_size(&resp->base);
    packed = malloc(packed_len > 0 ? packed_len : 1);
    if (packed != NULL)
      protobuf_c_message_pack(&resp->base, packed);
  }
  struct outbox o = {NULL};
  pthread_mutex_lock(&t->lock);
  /* Its outcome may reach a watcher below, whose next StartRun could evict
   * it (or the reaper expire it) while this still reads it. */
  bool started = run->started;
  run->finishing = started;
  run->state = RUN_DONE;
  run->status = err != NULL ? err->code : SBX_OK;
  run->message = message;
  if (resp != NULL) {
    run->out_truncated = resp->stdout_truncated;
    run->err_truncated = resp->stderr_truncated;
  }
  if (resp != NULL && run->started && packed == NULL) {
    run->status = SBX_INTERNAL;
    free(run->message);
    run->message = strdup("out of memory keeping the run's result");
  }
  run->result = packed;
  run->result_len = packed_len;
  answer_waiters(t, run, true, resp, &o);
  bool gone = !run->started && !run->pinned;
  if (gone)
    unlink_run(t, run);
  if (run->started) {
    run->expires_ms = sbx_monotonic_ms() + t->ttl_ms;
    pthread_cond_signal(&t->wake);
  }
  struct server_call *call = run->call;
  run->call = NULL;
  pthread_mutex_unlock(&t->lock);
  /* A started run that never ran: its one line (a RunCode call's refusal
   * is its call's line). */
  if (err != NULL && call == NULL && !run->logged) {
    struct run_call rc = {.req = run->req,
                          .run_id = run->run_id,
                          .method = sbx_method_name(run->method),
                          .received_ms = run->received_ms,
                          .request_id = run->request_id,
                          .peer = run->peer,
                          .tenant = run->tenant};
    run_log_failure(&rc, -1, err);
  }
  /* The session is free for its next call before anyone hears of the end. */
  if (run->session != NULL) {
    t->deps.release_session(t->deps.session_arg, run->session);
    run->session = NULL;
  }
  if (call != NULL) {
    if (err == NULL)
      call_reply(call, SBX_OK, "", &resp->base);
    else
      call_reply_not_run(call, err);
    outbox_add(&o, call);
  }
  /* Only now: resp points into the request (its session_id). */
  protobuf_c_message_free_unpacked(&run->req->base, &run->alloc.base);
  run->req = NULL;
  outbox_send(t, &o);
  if (started) { /* the last read of it here */
    pthread_mutex_lock(&t->lock);
    run->finishing = false;
    pthread_cond_broadcast(&t->wake); /* a StartRun waiting to evict it; the timer */
    pthread_mutex_unlock(&t->lock);
    return;
  }
  if (!gone) {
    /* Pinned when it ended: whichever of this and run_table_publish comes
     * second frees it. */
    pthread_mutex_lock(&t->lock);
    run->let_go = true;
    gone = !run->pinned;
    if (gone)
      unlink_run(t, run);
    pthread_mutex_unlock(&t->lock);
  }
  if (gone)
    run_free(run);
}

/* Whether an id can be in the table; anything else is NOT_FOUND too. */
static struct live_run *find_for_call(struct run_table *t, const struct server_call *call,
                                      const char *run_id, struct sbx_error *err) {
  struct live_run *run = id_valid(run_id) ? find(t, call->tenant, run_id, false) : NULL;
  if (run == NULL)
    sbx_error_set(err, SBX_NOT_FOUND, 0,
                  "run_id: no such run here (never started on this server, its outcome "
                  "already read, or expired after --run-result-ttl-s)");
  return run;
}

static void wait_on(struct run_table *t, struct live_run *run, struct server_call *call,
                    uint64_t wait_ms, bool cancel) {
  call->wait.run = run;
  call->wait.cancel = cancel;
  call->wait.deadline_ms = sbx_monotonic_ms() + wait_ms;
  call->wait.next = run->waiters;
  run->waiters = call;
  t->n_waiting++;
  pthread_cond_signal(&t->wake);
}

enum run_table_answer run_table_watch(struct run_table *t, struct server_call *call,
                                      const struct run_table_watch_args *in,
                                      struct sbx_error *err) {
  if (in->wait_ms > RUN_TABLE_MAX_WAIT_MS) {
    sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "wait_ms: at most %u", RUN_TABLE_MAX_WAIT_MS);
    return RUN_TABLE_REFUSED;
  }
  pthread_mutex_lock(&t->lock);
  struct live_run *run = find_for_call(t, call, in->run_id, err);
  if (run == NULL) {
    pthread_mutex_unlock(&t->lock);
    return RUN_TABLE_REFUSED;
  }
  call->wait.out_off = in->out_off;
  call->wait.err_off = in->err_off;
  bool news = in->out_off < run->out.len || in->err_off < run->err.len;
  if (news || run->state == RUN_DONE || in->wait_ms == 0 || t->stopping) {
    reply_watch(run, call, NULL, false);
    pthread_mutex_unlock(&t->lock);
    return RUN_TABLE_REPLIED;
  }
  if (t->n_waiting >= t->max_waiting) {
    pthread_mutex_unlock(&t->lock);
    sbx_error_set(err, SBX_RESOURCE_EXHAUSTED, 0,
                  "%zu calls are waiting for runs already (--max-watchers); retry, or watch with "
                  "wait_ms 0",
                  t->max_waiting);
    return RUN_TABLE_REFUSED;
  }
  wait_on(t, run, call, in->wait_ms, false);
  pthread_mutex_unlock(&t->lock);
  return RUN_TABLE_WAITING;
}

enum run_table_answer run_table_cancel(struct run_table *t, struct server_call *call,
                                       const char *run_id, struct sbx_error *err) {
  pthread_mutex_lock(&t->lock);
  struct live_run *run = find_for_call(t, call, run_id, err);
  if (run == NULL) {
    pthread_mutex_unlock(&t->lock);
    return RUN_TABLE_REFUSED;
  }
  if (run->state == RUN_DONE) {
    reply_cancel(run, call);
    pthread_mutex_unlock(&t->lock);
    return RUN_TABLE_REPLIED;
  }
  if (!run->cancel_requested) {
    run->cancel_requested = true;
    uint64_t one = 1;
    ssize_t w = write(run->cancel_fd, &one, sizeof one);
    (void)w; /* an eventfd's counter cannot overflow from one write */
  }
  /* Still in the queue: out of it, never to start. */
  if (run->state == RUN_QUEUED && work_queue_remove(t->deps.queue, run)) {
    pthread_mutex_unlock(&t->lock);
    struct sbx_error why;
    sbx_error_set(&why, SBX_CANCELLED, 0, "the run was cancelled (CancelRun) before it started");
    rpc_stats_reject(t->deps.stats, RPC_REJECT_CANCELLED);
    run_table_finish(t, run, NULL, &why); /* a RunCode run's record is gone after it */
    Sandbox__V1__CancelRunResponse resp = SANDBOX__V1__CANCEL_RUN_RESPONSE__INIT;
    resp.state = SANDBOX__V1__RUN_STATE__RUN_STATE_DONE;
    call_reply(call, SBX_OK, "", &resp.base);
    return RUN_TABLE_REPLIED;
  }
  /* Running (or being taken by a worker): the kill is on its way; the
   * answer comes when the run has ended. Past the cap on waiting calls,
   * the answer is the state now. */
  if (t->n_waiting >= t->max_waiting || t->stopping) {
    reply_cancel(run, call);
    pthread_mutex_unlock(&t->lock);
    return RUN_TABLE_REPLIED;
  }
  wait_on(t, run, call, RUN_TABLE_CANCEL_WAIT_MS, true);
  pthread_mutex_unlock(&t->lock);
  return RUN_TABLE_WAITING;
}

void run_table_stats_read(struct run_table *t, struct run_table_stats_read *out) {
  pthread_mutex_lock(&t->lock);
  out->started = t->n_started;
  out->waiting = t->n_waiting;
  pthread_mutex_unlock(&t->lock);
}
