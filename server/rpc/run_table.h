/* run_table.h: the run table (docs/STREAMING.md), rpc's record of every
 * run (server/run/ carries a run out; this only keeps track of it). Every run from its dispatch
 * to its end has a record here, found by its run_id: RunCode and StartRun
 * runs alike. The record owns the request (moved out of the call that
 * brought it), the output as it grows, a cancel eventfd, the WatchRun and
 * CancelRun calls waiting for news, and, for a started run, its outcome
 * until it has been read or its TTL passed. The queue (queue.h) carries
 * records to the workers.
 *
 * One mutex guards the table, its records and the waiting calls. Replies
 * are built under it (they copy what they need) and sent after it is
 * released. A thread of the table's own answers watches whose wait_ms
 * passed and frees outcomes past their TTL. Lock order: the table, then
 * the queue's lock (a cancel takes a queued run out of the queue).
 *
 * The table is given its collaborators at init (struct run_table_deps),
 * never the server: it must not start, run or decode anything. */
#ifndef SBX_RUN_TABLE_H
#define SBX_RUN_TABLE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bounded_alloc.h"
#include "buf.h"
#include "error.h"
#include "ids.h"
#include "sandbox.pb-c.h"
#include "queue.h"
#include "rpc_stats.h"
#include "sandbox/sandbox.h"

struct server_call;
struct session;
struct tenant;

/* The values of sandbox.v1.RunState. */
enum run_state { RUN_QUEUED = 1, RUN_RUNNING = 2, RUN_DONE = 3 };

/* Output of each stream a reply carries at most. */
#define RUN_TABLE_CHUNK_BYTES (256u << 10)
/* WatchRun's largest wait_ms. */
#define RUN_TABLE_MAX_WAIT_MS 60000u
/* A started run's outcome, once sent complete, is kept this much longer
 * (a lost reply can be read again). */
#define RUN_TABLE_KEEP_AFTER_READ_MS 5000u
/* How long a CancelRun waits for the run to end before it answers with
 * the state then (the kill itself is at once; this bounds a stuck end). */
#define RUN_TABLE_CANCEL_WAIT_MS 10000u

struct run_table;

struct live_run {
  struct live_run *next;
  struct run_table *table;
  /* Whose run (the call's tenant): its id is found only by that tenant's
   * calls, and the same id may be another tenant's other run. */
  struct tenant *tenant;
  uint32_t max_interpreters; /* its policy's, when the call came (interp.h) */
  char run_id[ID_MAX + 1];
  enum run_state state;
  int method; /* the service's method index: RunCode or StartRun */
  bool started;
  bool hidden; /* added, not yet queued: not found by WatchRun or CancelRun */
  bool pinned; /* the handler still holds it (until run_table_publish) */
  bool let_go; /* run_table_finish is done with it (run_table_publish may free it) */
  bool cancel_requested;
  bool logged;    /* run_code ran it, and wrote its event=run line */
  bool delivered; /* its outcome went out in a complete reply: kept only for a lost reply */
  /* run_table_finish still reads it after its outcome went out: a started
   * run is then not expired, and a StartRun that would evict it waits. */
  bool finishing;
  int cancel_fd; /* eventfd, readable once cancelled */
  /* The request, as the handler validated it (moved from the call). */
  struct sbx_bounded_alloc alloc;
  Sandbox__V1__RunCodeRequest *req;
  struct sandbox_limits limits;
  const struct runtime *runtime;
  struct sandbox_limits compile_limits;
  struct session *session;
  bool session_created;
  uint64_t deadline_unix_ms;
  uint64_t received_ms;
  uint32_t pipe_id;
  char request_id[128];
  char peer[64];
  struct server_call *call;    /* RunCode: answered with the outcome */
  struct server_call *waiters; /* WatchRun and CancelRun calls waiting */
  struct sbx_buf out, err;     /* the output so far, up to the run's output limit */
  /* Done, started runs only: the outcome until read or expired. */
  bool out_truncated, err_truncated;
  sbx_code status;
  char *message;
  uint8_t *result; /* packed RunCodeResponse (status OK) */
  size_t result_len;
  uint64_t expires_ms; /* monotonic; 0 while not done */
};

/* What the table works with, given at init. */
struct run_table_deps {
  struct work_queue *queue; /* the runs queued: a cancel takes one out */
  struct rpc_stats *stats;  /* a run cancelled in the queue is counted */
  /* A call whose reply the table built (call.h), handed on to be sent:
   * called after the table's lock is released. */
  void (*send)(struct server_call *call);
  /* The end of a run's hold on its session (before anyone hears of the
   * end, so its next call finds it free). */
  void (*release_session)(void *arg, struct session *session);
  void *session_arg;
};

struct run_table {
  struct run_table_deps deps;
  pthread_mutex_t lock;
  pthread_cond_t wake; /* the timer thread's */
  struct live_run *runs;
  size_t n_started; /* started runs in the table, any state */
  size_t n_waiting; /* calls waiting */
  size_t max_started, max_waiting;
  uint64_t ttl_ms;
  pthread_t timer;
  bool timer_started, stopping;
};

int run_table_init(struct run_table *t, const struct run_table_deps *deps, size_t max_started,
                   size_t max_waiting, uint64_t ttl_ms);
/* The timer thread (after the socket is up) and its end (once no call can
 * arrive or wait any more). */
int run_table_start(struct run_table *t, struct sbx_error *err);
void run_table_stop(struct run_table *t);
/* Frees what is left (the outcomes nobody read). */
void run_table_destroy(struct run_table *t);

/* A validated RunCode or StartRun call becomes a record in the table:
 * the request moves from the call to the record (call->input is NULL
 * after), with the call's session, limits and addressing; a RunCode call
 * is remembered to be answered at the end. run_id is the request's or a
 * new UUID. Refused (nothing moved) when the id is in the table
 * (ALREADY_EXISTS) or, started, when max_started are there
 * (RESOURCE_EXHAUSTED). */
struct live_run *run_table_add(struct run_table *t, struct server_call *call, bool started,
                               struct sbx_error *err);
/* Queued: it can be watched and cancelled from now on. The handler must not
 * touch run after this. */
void run_table_publish(struct run_table *t, struct live_run *run);
/* The queue refused it: the request goes back to the call and the record
 * is gone. */
void run_table_give_back(struct run_table *t, struct live_run *run, struct server_call *call);

/* A worker took it. false when it must not start (cancelled while it was
 * being taken): then the worker ends it with run_table_finish and an error. */
bool run_table_begin(struct run_table *t, struct live_run *run);
/* The engine's output callback (sandbox_stream.on_output), arg the run. */
void run_table_on_output(void *arg, int stream, const uint8_t *data, size_t len);
/* The end of a run that ran (resp, status OK) or did not (err): the RunCode
 * call and every waiting call are answered, the session is released, the
 * request freed; a started run keeps its outcome, any other is freed. */
void run_table_finish(struct run_table *t, struct live_run *run,
                      const Sandbox__V1__RunCodeResponse *resp, const struct sbx_error *err);

/* WatchRun and CancelRun, from the handlers: answered at once (REPLIED:
 * the reply is built on the call, to be sent; REFUSED: err says why), or
 * WAITING: the table answers it later and the caller must not touch the
 * call again. */
enum run_table_answer { RUN_TABLE_REPLIED, RUN_TABLE_REFUSED, RUN_TABLE_WAITING };
/* What a WatchRun asks, copied out of its request: a waiting call must not
 * hold its request (the context's allocator is the next request's once the
 * call is answered). */
struct run_table_watch_args {
  char run_id[ID_MAX + 2]; /* one more: a longer id is seen as too long */
  uint64_t out_off, err_off;
  uint32_t wait_ms;
};
enum run_table_answer run_table_watch(struct run_table *t, struct server_call *call,
                                      const struct run_table_watch_args *in, struct sbx_error *err);
enum run_table_answer run_table_cancel(struct run_table *t, struct server_call *call,
                                       const char *run_id, struct sbx_error *err);

/* Started runs in the table (any state) and calls waiting, now. */
struct run_table_stats_read {
  size_t started, waiting;
};
void run_table_stats_read(struct run_table *t, struct run_table_stats_read *out);

#endif
