/* The run table's state machine (server/rpc/run_table.c): a record from
 * add to its end, through publish, begin, output, finish, cancel, give
 * back and the watchers' answers. No server and no fakes: the table is
 * given its collaborators at init, here a real queue, real counters, a
 * send that reads the built reply back, and a session release that
 * remembers what it was handed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "call.h"
#include "envelope.h"
#include "run_table.h"

/* A reply as the send saw it: the envelope's status and message, and the
 * payload's bytes. */
struct sent {
  struct server_call *call;
  int status;
  char message[256];
  uint8_t payload[2 * RUN_TABLE_CHUNK_BYTES + 4096]; /* a watch's two chunks at most */
  size_t payload_len;
};

struct fx {
  struct run_table t;
  struct work_queue queue;
  struct rpc_stats stats;
  struct log_limit call_log;
  pthread_mutex_t lock; /* the timer thread sends too */
  struct sent sent[16];
  size_t n_sent;
  struct session *released[4];
  size_t n_released;
};

static struct fx *fx_now; /* the send has only the call */

static void send_reply(struct server_call *call) {
  struct fx *f = fx_now;
  assert_non_null(call->reply);
  Sandbox__V1__ReplyEnvelope *env = sandbox__v1__reply_envelope__unpack(
      NULL, nng_msg_len(call->reply), nng_msg_body(call->reply));
  assert_non_null(env);
  pthread_mutex_lock(&f->lock);
  assert_true(f->n_sent < 16);
  struct sent *s = &f->sent[f->n_sent];
  s->call = call;
  s->status = env->status;
  snprintf(s->message, sizeof(s->message), "%s", env->message);
  assert_true(env->payload.len <= sizeof(s->payload));
  if (env->payload.len > 0) /* an empty payload's data is NULL */
    memcpy(s->payload, env->payload.data, env->payload.len);
  s->payload_len = env->payload.len;
  f->n_sent++;
  pthread_mutex_unlock(&f->lock);
  sandbox__v1__reply_envelope__free_unpacked(env, NULL);
  nng_msg_free(call->reply);
  call->reply = NULL;
}

/* Set by a test: the run the handler publishes while run_table_finish
 * releases the session, as the handler's thread may. */
static struct live_run *publish_on_release;

static void release_session(void *arg, struct session *session) {
  struct fx *f = arg;
  f->released[f->n_released++] = session;
  if (publish_on_release != NULL) {
    struct live_run *run = publish_on_release;
    publish_on_release = NULL;
    run_table_publish(&f->t, run);
  }
}

static size_t n_sent(struct fx *f) {
  pthread_mutex_lock(&f->lock);
  size_t n = f->n_sent;
  pthread_mutex_unlock(&f->lock);
  return n;
}

static int setup(void **state) {
  struct fx *f = calloc(1, sizeof(*f));
  assert_non_null(f);
  pthread_mutex_init(&f->lock, NULL);
  assert_int_equal(work_queue_init(&f->queue, 4, 1), 0);
  struct run_table_deps deps = {
      .queue = &f->queue,
      .stats = &f->stats,
      .send = send_reply,
      .release_session = release_session,
      .session_arg = f,
  };
  /* At most 2 started runs, 2 waiting calls; outcomes kept 60 s. */
  assert_int_equal(run_table_init(&f->t, &deps, 2, 2, 60000), 0);
  fx_now = f;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  struct fx *f = *state;
  run_table_stop(&f->t);
  run_table_destroy(&f->t);
  work_queue_destroy(&f->queue);
  pthread_mutex_destroy(&f->lock);
  free(f);
  fx_now = NULL;
  return 0;
}

/* A call as the transport hands it over: its counters, and for a RunCode
 * or StartRun, the request decoded through the call's own allocator. */
static void call_init(struct fx *f, struct server_call *c, const char *method) {
  memset(c, 0, sizeof(*c));
  c->stats = &f->stats;
  c->call_log = &f->call_log;
  c->method = sbx_method_index(method);
  snprintf(c->request_id, sizeof(c->request_id), "req-1");
  snprintf(c->peer, sizeof(c->peer), "test");
}

static void call_with_run(struct fx *f, struct server_call *c, const char *run_id) {
  call_init(f, c, SBX_METHOD_RUN_CODE);
  Sandbox__V1__RunCodeRequest req = SANDBOX__V1__RUN_CODE_REQUEST__INIT;
  req.code = "print(1)";
  req.run_id = (char *)run_id;
  uint8_t buf[256];
  size_t n = sandbox__v1__run_code_request__pack(&req, buf);
  sbx_bounded_alloc_init(&c->alloc, 1u << 20);
  c->input = (ProtobufCMessage *)sandbox__v1__run_code_request__unpack(&c->alloc.base, n, buf);
  assert_non_null(c->input);
  c->limits.output_bytes = 8;
}

/* A StartRun added and published (a worker has it when running). */
static struct live_run *published(struct fx *f, struct server_call *call, const char *run_id,
                                  bool running) {
  struct sbx_error err;
  call_with_run(f, call, run_id);
  struct live_run *run = run_table_add(&f->t, call, true, &err);
  assert_non_null(run);
  run_table_publish(&f->t, run);
  if (running)
    assert_true(run_table_begin(&f->t, run));
  return run;
}

static Sandbox__V1__WatchRunResponse *sent_watch(struct fx *f, size_t i) {
  assert_true(i < n_sent(f));
  assert_int_equal(f->sent[i].status, SBX_OK);
  Sandbox__V1__WatchRunResponse *w =
      sandbox__v1__watch_run_response__unpack(NULL, f->sent[i].payload_len, f->sent[i].payload);
  assert_non_null(w);
  return w;
}

static int sent_cancel_state(struct fx *f, size_t i) {
  assert_true(i < n_sent(f));
  assert_int_equal(f->sent[i].status, SBX_OK);
  Sandbox__V1__CancelRunResponse *c =
      sandbox__v1__cancel_run_response__unpack(NULL, f->sent[i].payload_len, f->sent[i].payload);
  assert_non_null(c);
  int state = c->state;
  sandbox__v1__cancel_run_response__free_unpacked(c, NULL);
  return state;
}

/* A WatchRun answered at once (wait_ms 0): the response built on call. */
static Sandbox__V1__WatchRunResponse *watch_now(struct fx *f, struct server_call *call,
                                                const char *run_id, uint64_t out_off) {
  struct run_table_watch_args in = {.out_off = out_off};
  snprintf(in.run_id, sizeof(in.run_id), "%s", run_id);
  struct sbx_error err;
  call_init(f, call, "/sandbox.v1.Sandbox/WatchRun");
  assert_int_equal(run_table_watch(&f->t, call, &in, &err), RUN_TABLE_REPLIED);
  send_reply(call);
  return sent_watch(f, n_sent(f) - 1);
}

static struct run_table_stats_read counts(struct fx *f) {
  struct run_table_stats_read st;
  run_table_stats_read(&f->t, &st);
  return st;
}

/* RunCode: queued, running, output, ended; its call answered with the
 * response, the record gone with the answer. */
static void run_code_from_add_to_answer(void **state) {
  struct fx *f = *state;
  struct server_call call, watcher;
  struct sbx_error err;
  call_with_run(f, &call, "run-a");
  struct live_run *run = run_table_add(&f->t, &call, false, &err);
  assert_non_null(run);
  assert_null(call.input); /* the request moved to the record */
  assert_int_equal(run->state, RUN_QUEUED);
  /* Added, not yet published: nobody finds it. */
  struct run_table_watch_args in = {.run_id = "run-a"};
  call_init(f, &watcher, "/sandbox.v1.Sandbox/WatchRun");
  assert_int_equal(run_table_watch(&f->t, &watcher, &in, &err), RUN_TABLE_REFUSED);
  assert_int_equal(err.code, SBX_NOT_FOUND);
  run_table_publish(&f->t, run);
  Sandbox__V1__WatchRunResponse *w = watch_now(f, &watcher, "run-a", 0);
  assert_int_equal(w->state, SANDBOX__V1__RUN_STATE__RUN_STATE_QUEUED);
  assert_false(w->complete);
  sandbox__v1__watch_run_response__free_unpacked(w, NULL);

  assert_true(run_table_begin(&f->t, run));
  assert_int_equal(run->state, RUN_RUNNING);
  run_table_on_output(run, 1, (const uint8_t *)"hello", 5);
  run_table_on_output(run, 2, (const uint8_t *)"oops", 4);
  w = watch_now(f, &watcher, "run-a", 0);
  assert_int_equal(w->state, SANDBOX__V1__RUN_STATE__RUN_STATE_RUNNING);
  assert_int_equal(w->stdout.len, 5);
  assert_memory_equal(w->stdout.data, "hello", 5);
  assert_int_equal(w->stderr.len, 4);
  sandbox__v1__watch_run_response__free_unpacked(w, NULL);
  /* From an offset: only what follows it. */
  w = watch_now(f, &watcher, "run-a", 3);
  assert_int_equal(w->stdout_offset, 3);
  assert_int_equal(w->stdout.len, 2);
  sandbox__v1__watch_run_response__free_unpacked(w, NULL);

  size_t before = n_sent(f);
  Sandbox__V1__RunCodeResponse resp = SANDBOX__V1__RUN_CODE_RESPONSE__INIT;
  resp.exit_code = 3;
  run_table_finish(&f->t, run, &resp, NULL);
  assert_int_equal(n_sent(f), before + 1);
  assert_ptr_equal(f->sent[before].call, &call);
  assert_int_equal(f->sent[before].status, SBX_OK);
  Sandbox__V1__RunCodeResponse *got = sandbox__v1__run_code_response__unpack(
      NULL, f->sent[before].payload_len, f->sent[before].payload);
  assert_non_null(got);
  assert_int_equal(got->exit_code, 3);
  sandbox__v1__run_code_response__free_unpacked(got, NULL);
  /* A RunCode run keeps nothing: its id is free again. */
  assert_int_equal(run_table_watch(&f->t, &watcher, &in, &err), RUN_TABLE_REFUSED);
  assert_int_equal(err.code, SBX_NOT_FOUND);
  assert_int_equal(counts(f).started, 0);
}

/* The engine's limit applies: the copy never grows past output_bytes. */
static void output_capped_at_the_limit(void **state) {
  struct fx *f = *state;
  struct server_call call, watcher;
  struct live_run *run = published(f, &call, "run-cap", true);
  run_table_on_output(run, 1, (const uint8_t *)"0123456", 7);
  run_table_on_output(run, 1, (const uint8_t *)"789abc", 6);
  Sandbox__V1__WatchRunResponse *w = watch_now(f, &watcher, "run-cap", 0);
  assert_int_equal(w->stdout.len, 8);
  assert_memory_equal(w->stdout.data, "01234567", 8);
  sandbox__v1__watch_run_response__free_unpacked(w, NULL);
  run_table_finish(&f->t, run, NULL, &(struct sbx_error){.code = SBX_INTERNAL, .msg = "x"});
}

/* A WatchRun reply carries at most RUN_TABLE_CHUNK_BYTES of each stream,
 * from the offsets asked for: output of any size comes over several
 * watches, never one reply the size of the whole output. */
static void watch_replies_carry_a_chunk_at_most(void **state) {
  struct fx *f = *state;
  struct server_call call, watcher;
  struct sbx_error err;
  call_with_run(f, &call, "run-big");
  call.limits.output_bytes = 1u << 20;
  struct live_run *run = run_table_add(&f->t, &call, true, &err);
  assert_non_null(run);
  run_table_publish(&f->t, run);
  assert_true(run_table_begin(&f->t, run));
  size_t out_len = 2 * RUN_TABLE_CHUNK_BYTES + 1000, err_len = RUN_TABLE_CHUNK_BYTES + 1;
  uint8_t *out = malloc(out_len), *errs = malloc(err_len);
  assert_non_null(out);
  assert_non_null(errs);
  for (size_t i = 0; i < out_len; i++)
    out[i] = (uint8_t)(i * 31);
  memset(errs, 'e', err_len);
  run_table_on_output(run, 1, out, out_len);
  run_table_on_output(run, 2, errs, err_len);
  run_table_finish(&f->t, run, NULL, &(struct sbx_error){.code = SBX_INTERNAL, .msg = "x"});
  size_t at = 0;
  for (int i = 0; i < 3; i++) {
    Sandbox__V1__WatchRunResponse *w = watch_now(f, &watcher, "run-big", at);
    size_t want = out_len - at < RUN_TABLE_CHUNK_BYTES ? out_len - at : RUN_TABLE_CHUNK_BYTES;
    assert_int_equal(w->stdout_offset, at);
    assert_int_equal(w->stdout.len, want);
    assert_memory_equal(w->stdout.data, out + at, want);
    assert_int_equal(w->stderr.len, RUN_TABLE_CHUNK_BYTES); /* from 0 each time */
    assert_false(w->complete); /* stderr's last byte is never reached */
    at += want;
    sandbox__v1__watch_run_response__free_unpacked(w, NULL);
  }
  assert_int_equal(at, out_len);
  free(out);
  free(errs);
}

/* StartRun: the outcome is kept until read, the started count held. */
static void started_run_keeps_its_outcome(void **state) {
  struct fx *f = *state;
  struct server_call call, watcher;
  struct sbx_error err;
  call_with_run(f, &call, "run-s");
  struct live_run *run = run_table_add(&f->t, &call, true, &err);
  assert_non_null(run);
  run_table_publish(&f->t, run);
  assert_int_equal(counts(f).started, 1);
  assert_true(run_table_begin(&f->t, run));
  run_table_on_output(run, 1, (const uint8_t *)"out", 3);
  Sandbox__V1__RunCodeResponse resp = SANDBOX__V1__RUN_CODE_RESPONSE__INIT;
  resp.exit_code = 7;
  run_table_finish(&f->t, run, &resp, NULL);
  assert_int_equal(n_sent(f), 0); /* no call to answer: a watcher reads it */
  assert_int_equal(counts(f).started, 1);
  Sandbox__V1__WatchRunResponse *w = watch_now(f, &watcher, "run-s", 0);
  assert_int_equal(w->state, SANDBOX__V1__RUN_STATE__RUN_STATE_DONE);
  assert_true(w->complete);
  assert_int_equal(w->status, SANDBOX__V1__CODE__OK);
  assert_non_null(w->result);
  assert_int_equal(w->result->exit_code, 7);
  assert_int_equal(w->stdout.len, 3);
  sandbox__v1__watch_run_response__free_unpacked(w, NULL);
  /* Read again (a lost reply): still there, complete. */
  w = watch_now(f, &watcher, "run-s", 3);
  assert_true(w->complete);
  sandbox__v1__watch_run_response__free_unpacked(w, NULL);
}

/* The same id twice is refused; past max_started too, unless an outcome
 * already read gives way. */
static void duplicates_and_the_started_cap(void **state) {
  struct fx *f = *state;
  struct server_call c1, c2, c3, c4, watcher;
  struct sbx_error err;
  call_with_run(f, &c1, "one");
  struct live_run *r1 = run_table_add(&f->t, &c1, true, &err);
  assert_non_null(r1);
  call_with_run(f, &c2, "one");
  assert_null(run_table_add(&f->t, &c2, true, &err));
  assert_int_equal(err.code, SBX_ALREADY_EXISTS);
  assert_non_null(c2.input); /* nothing moved */
  call_with_run(f, &c3, "two");
  struct live_run *r2 = run_table_add(&f->t, &c3, true, &err);
  assert_non_null(r2);
  call_with_run(f, &c4, "three");
  assert_null(run_table_add(&f->t, &c4, true, &err));
  assert_int_equal(err.code, SBX_RESOURCE_EXHAUSTED);
  /* one ends and its outcome is read: it gives way to three. */
  run_table_publish(&f->t, r1);
  run_table_publish(&f->t, r2);
  assert_true(run_table_begin(&f->t, r1));
  Sandbox__V1__RunCodeResponse resp = SANDBOX__V1__RUN_CODE_RESPONSE__INIT;
  run_table_finish(&f->t, r1, &resp, NULL);
  sandbox__v1__watch_run_response__free_unpacked(watch_now(f, &watcher, "one", 0), NULL);
  struct live_run *r3 = run_table_add(&f->t, &c4, true, &err);
  assert_non_null(r3);
  assert_int_equal(counts(f).started, 2);
  run_table_publish(&f->t, r3);
  protobuf_c_message_free_unpacked(c2.input, &c2.alloc.base);
  run_table_finish(&f->t, r2, NULL, &(struct sbx_error){.code = SBX_UNAVAILABLE, .msg = "x"});
  run_table_finish(&f->t, r3, NULL, &(struct sbx_error){.code = SBX_UNAVAILABLE, .msg = "x"});
}

/* A RunCode run a worker ends before its handler publishes it (a run
 * refused at once: draining, cancelled, past its deadline), the handler
 * publishing while run_table_finish is still releasing the session and
 * freeing the request: the record is freed once, by whichever lets go
 * second (ASan in test-sanitize: a use after free when publish freed it
 * under finish). The other order, finish wholly before publish, too. */
static void run_code_ended_before_publish(void **state) {
  struct fx *f = *state;
  static int session_token;
  for (int publish_during_finish = 1; publish_during_finish >= 0; publish_during_finish--) {
    struct server_call call;
    struct sbx_error err;
    call_with_run(f, &call, "run-e");
    call.session = (struct session *)&session_token;
    struct live_run *run = run_table_add(&f->t, &call, false, &err);
    assert_non_null(run);
    size_t before = n_sent(f);
    publish_on_release = publish_during_finish ? run : NULL;
    run_table_finish(&f->t, run, NULL, &(struct sbx_error){.code = SBX_UNAVAILABLE, .msg = "x"});
    assert_null(publish_on_release);
    assert_int_equal(n_sent(f), before + 1);
    assert_int_equal(f->sent[before].status, SBX_UNAVAILABLE);
    if (!publish_during_finish)
      run_table_publish(&f->t, run);
    /* The record is gone: its id is free again. */
    struct server_call again;
    call_with_run(f, &again, "run-e");
    struct live_run *next = run_table_add(&f->t, &again, false, &err);
    assert_non_null(next);
    run_table_give_back(&f->t, next, &again);
    protobuf_c_message_free_unpacked(again.input, &again.alloc.base);
  }
}

/* The queue refused it: the request and the session go back to the call,
 * and the id is free. */
static void give_back_restores_the_call(void **state) {
  struct fx *f = *state;
  struct server_call call;
  struct sbx_error err;
  int marker;
  call_with_run(f, &call, "back");
  ProtobufCMessage *input = call.input;
  call.session = (struct session *)&marker;
  struct live_run *run = run_table_add(&f->t, &call, true, &err);
  assert_non_null(run);
  assert_null(call.session);
  run_table_give_back(&f->t, run, &call);
  assert_ptr_equal(call.input, input);
  assert_ptr_equal(call.session, (struct session *)&marker);
  assert_int_equal(f->n_released, 0); /* the caller releases it */
  assert_int_equal(counts(f).started, 0);
  run = run_table_add(&f->t, &call, true, &err);
  assert_non_null(run);
  run_table_publish(&f->t, run);
  /* Its end releases the session, once. */
  run_table_finish(&f->t, run, NULL, &(struct sbx_error){.code = SBX_UNAVAILABLE, .msg = "x"});
  assert_int_equal(f->n_released, 1);
  assert_ptr_equal(f->released[0], (struct session *)&marker);
}

/* CancelRun of a queued run: out of the queue, counted, ended CANCELLED
 * with "nothing ran"; the RunCode call answered with that. */
static void cancel_in_the_queue(void **state) {
  struct fx *f = *state;
  struct server_call call, canceller;
  struct sbx_error err;
  call_with_run(f, &call, "q");
  struct live_run *run = run_table_add(&f->t, &call, false, &err);
  assert_non_null(run);
  assert_int_equal(work_queue_push(&f->queue, run, run->tenant, NULL), WORK_QUEUE_PUSHED);
  run_table_publish(&f->t, run);
  call_init(f, &canceller, "/sandbox.v1.Sandbox/CancelRun");
  assert_int_equal(run_table_cancel(&f->t, &canceller, "q", &err), RUN_TABLE_REPLIED);
  assert_int_equal(n_sent(f), 1); /* the RunCode call */
  assert_ptr_equal(f->sent[0].call, &call);
  assert_int_equal(f->sent[0].status, SBX_CANCELLED);
  assert_non_null(strstr(f->sent[0].message, "; nothing ran"));
  send_reply(&canceller);
  assert_int_equal(sent_cancel_state(f, 1), SANDBOX__V1__RUN_STATE__RUN_STATE_DONE);
  assert_int_equal(atomic_load(&f->stats.rejections[RPC_REJECT_CANCELLED]), 1);
  size_t queued, running;
  work_queue_counts(&f->queue, &queued, &running);
  assert_int_equal(queued, 0);
}

/* CancelRun of a run a worker has: the kill is signalled (cancel_fd), the
 * call waits for the end; one taken but not begun never begins. */
static void cancel_while_running_waits_for_the_end(void **state) {
  struct fx *f = *state;
  struct server_call call, canceller;
  struct sbx_error err;
  struct live_run *run = published(f, &call, "r", false);
  call_init(f, &canceller, "/sandbox.v1.Sandbox/CancelRun");
  assert_int_equal(run_table_cancel(&f->t, &canceller, "r", &err), RUN_TABLE_WAITING);
  assert_int_equal(counts(f).waiting, 1);
  uint64_t v = 0;
  assert_int_equal(read(run->cancel_fd, &v, sizeof v), (ssize_t)sizeof v);
  assert_int_equal(v, 1);
  assert_false(run_table_begin(&f->t, run)); /* cancelled while being taken */
  assert_int_equal(n_sent(f), 0);
  run_table_finish(&f->t, run, NULL,
                   &(struct sbx_error){.code = SBX_CANCELLED, .msg = "cancelled"});
  assert_int_equal(n_sent(f), 1);
  assert_ptr_equal(f->sent[0].call, &canceller);
  assert_int_equal(sent_cancel_state(f, 0), SANDBOX__V1__RUN_STATE__RUN_STATE_DONE);
  assert_int_equal(counts(f).waiting, 0);
}

/* A WatchRun without news waits; output answers it; past max_waiting and
 * past the longest wait it is refused. */
static void watchers_wait_for_news(void **state) {
  struct fx *f = *state;
  struct server_call call, w1, w2, w3;
  struct sbx_error err;
  struct live_run *run = published(f, &call, "w", true);
  struct run_table_watch_args in = {.run_id = "w", .wait_ms = 30000};
  call_init(f, &w1, "/sandbox.v1.Sandbox/WatchRun");
  call_init(f, &w2, "/sandbox.v1.Sandbox/WatchRun");
  call_init(f, &w3, "/sandbox.v1.Sandbox/WatchRun");
  assert_int_equal(run_table_watch(&f->t, &w1, &in, &err), RUN_TABLE_WAITING);
  assert_int_equal(run_table_watch(&f->t, &w2, &in, &err), RUN_TABLE_WAITING);
  assert_int_equal(run_table_watch(&f->t, &w3, &in, &err), RUN_TABLE_REFUSED);
  assert_int_equal(err.code, SBX_RESOURCE_EXHAUSTED);
  in.wait_ms = RUN_TABLE_MAX_WAIT_MS + 1;
  assert_int_equal(run_table_watch(&f->t, &w3, &in, &err), RUN_TABLE_REFUSED);
  assert_int_equal(err.code, SBX_INVALID_ARGUMENT);
  assert_int_equal(counts(f).waiting, 2);
  run_table_on_output(run, 1, (const uint8_t *)"hi", 2);
  assert_int_equal(n_sent(f), 2);
  for (size_t i = 0; i < 2; i++) {
    Sandbox__V1__WatchRunResponse *w = sent_watch(f, i);
    assert_int_equal(w->stdout.len, 2);
    assert_false(w->complete);
    sandbox__v1__watch_run_response__free_unpacked(w, NULL);
  }
  assert_int_equal(counts(f).waiting, 0);
  run_table_finish(&f->t, run, NULL, &(struct sbx_error){.code = SBX_INTERNAL, .msg = "x"});
}

/* The table's thread answers a watch past its wait with the state then;
 * stopping answers whoever still waits. */
static void the_timer_and_the_stop_answer_waiters(void **state) {
  struct fx *f = *state;
  struct server_call call, w1, w2;
  struct sbx_error err;
  assert_int_equal(run_table_start(&f->t, &err), 0);
  struct live_run *run = published(f, &call, "t", true);
  struct run_table_watch_args in = {.run_id = "t", .wait_ms = 50};
  call_init(f, &w1, "/sandbox.v1.Sandbox/WatchRun");
  assert_int_equal(run_table_watch(&f->t, &w1, &in, &err), RUN_TABLE_WAITING);
  for (int i = 0; i < 400 && n_sent(f) == 0; i++)
    usleep(5000);
  assert_int_equal(n_sent(f), 1);
  Sandbox__V1__WatchRunResponse *w = sent_watch(f, 0);
  assert_int_equal(w->state, SANDBOX__V1__RUN_STATE__RUN_STATE_RUNNING);
  assert_false(w->complete);
  sandbox__v1__watch_run_response__free_unpacked(w, NULL);
  in.wait_ms = 30000;
  call_init(f, &w2, "/sandbox.v1.Sandbox/WatchRun");
  assert_int_equal(run_table_watch(&f->t, &w2, &in, &err), RUN_TABLE_WAITING);
  run_table_stop(&f->t);
  assert_int_equal(n_sent(f), 2);
  assert_ptr_equal(f->sent[1].call, &w2);
  run_table_finish(&f->t, run, NULL, &(struct sbx_error){.code = SBX_INTERNAL, .msg = "x"});
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(run_code_from_add_to_answer, setup, teardown),
      cmocka_unit_test_setup_teardown(output_capped_at_the_limit, setup, teardown),
      cmocka_unit_test_setup_teardown(watch_replies_carry_a_chunk_at_most, setup, teardown),
      cmocka_unit_test_setup_teardown(started_run_keeps_its_outcome, setup, teardown),
      cmocka_unit_test_setup_teardown(duplicates_and_the_started_cap, setup, teardown),
      cmocka_unit_test_setup_teardown(run_code_ended_before_publish, setup, teardown),
      cmocka_unit_test_setup_teardown(give_back_restores_the_call, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_in_the_queue, setup, teardown),
      cmocka_unit_test_setup_teardown(cancel_while_running_waits_for_the_end, setup, teardown),
      cmocka_unit_test_setup_teardown(watchers_wait_for_news, setup, teardown),
      cmocka_unit_test_setup_teardown(the_timer_and_the_stop_answer_waiters, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
