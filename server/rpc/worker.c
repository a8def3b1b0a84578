/* worker.c: a worker takes a run from the queue, checks it may still start
 * (not draining, its deadline not past, a RunCode's client still
 * connected, not cancelled), runs it on its slot with its output and
 * cancel wired to the run table, and ends it there: the table answers the
 * RunCode call and whoever watches. Results flow up from the run to here. */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "envelope.h"
#include "log.h"
#include "server_state.h"
#include "text.h"
#include "worker.h"

/* A run that never started: counted, and why into out. */
static void refuse(struct server *srv, struct run_outcome *out, enum rpc_rejection reason,
                   sbx_code code, const char *why) {
  rpc_stats_reject(&srv->stats, reason);
  sbx_error_set(&out->err, code, 0, "%s", why);
}

static void run(struct server *srv, unsigned slot, struct live_run *lr, struct run_outcome *out) {
  struct sandbox_stream stream = {
      .on_output = run_table_on_output,
      .arg = lr,
      .cancel_fd = lr->cancel_fd,
  };
  struct run_call rc = {
      .req = lr->req,
      .run_id = lr->run_id,
      .method = sbx_method_name(lr->method),
      .limits = lr->limits,
      .runtime = lr->runtime,
      .compile_limits = lr->compile_limits,
      .session = lr->session,
      .session_created = lr->session_created,
      .received_ms = lr->received_ms,
      .request_id = lr->request_id,
      .peer = lr->peer,
      .tenant = lr->tenant,
      .max_interpreters = lr->max_interpreters,
      .stream = &stream,
  };
  if (lr->call != NULL)
    lr->call->logged = true;
  lr->logged = true;
  run_code(&srv->runner, slot, &rc, out);
}

/* A RunCode whose client went away while it was queued: nobody can read
 * the answer, and running it would only use a worker. */
static void drop_client_gone(struct server *srv, struct live_run *lr, struct run_outcome *out) {
  char rid[72];
  text_printable(lr->request_id, strlen(lr->request_id), rid, sizeof(rid), false);
  log_line("dropped",
           "request_id=\"%s\" method=%s peer=%s reason=client_gone msg=\"the client's "
           "connection closed while the call was queued; nothing ran\"",
           rid, sbx_method_name(lr->method), lr->peer);
  lr->call->logged = true; /* this line says it */
  refuse(srv, out, RPC_REJECT_CLIENT_GONE, SBX_UNAVAILABLE, "the client went away");
}

void *worker_main(void *arg) {
  struct worker_start *w = arg;
  struct server *srv = w->srv;
  unsigned slot = w->slot;
  free(w);
  /* The zygote first, on this thread (the engine wants the slot's own):
   * runs queued meanwhile wait for it, and /readyz says so. */
  if (srv->settings.zygote) {
    runner_warm_zygote(&srv->runner, slot);
    atomic_fetch_sub(&srv->zygotes_warming, 1);
  }
  struct live_run *lr;
  while ((lr = work_queue_pop(&srv->queue)) != NULL) {
    struct run_outcome out;
    memset(&out, 0, sizeof(out));
    if (atomic_load(&srv->draining)) {
      refuse(srv, &out, RPC_REJECT_DRAINING, SBX_UNAVAILABLE, "server is shutting down");
    } else if (lr->deadline_unix_ms != 0 && sbx_now_unix_ms() > lr->deadline_unix_ms) {
      refuse(srv, &out, RPC_REJECT_DEADLINE, SBX_DEADLINE_EXCEEDED,
             "the call waited in the queue past its deadline");
    } else if (lr->call != NULL && !conns_alive(&srv->conns, lr->pipe_id)) {
      drop_client_gone(srv, lr, &out);
    } else if (!run_table_begin(&srv->runs, lr)) {
      refuse(srv, &out, RPC_REJECT_CANCELLED, SBX_CANCELLED,
             "the run was cancelled (CancelRun) before it started");
    } else {
      run(srv, slot, lr, &out);
    }
    /* Not running any more before anyone hears of it (GetInfo's count). */
    work_queue_done(&srv->queue, lr->tenant);
    run_table_finish(&srv->runs, lr, out.ok ? &out.resp : NULL, out.ok ? NULL : &out.err);
    run_outcome_free(&out);
  }
  atomic_fetch_sub(&srv->workers_alive, 1);
  return NULL;
}

void worker_refuse_queued(struct server *srv) {
  void *queued[64];
  size_t n;
  while ((n = work_queue_take_queued(&srv->queue, queued, 64)) > 0)
    for (size_t i = 0; i < n; i++) {
      struct run_outcome out;
      memset(&out, 0, sizeof(out));
      refuse(srv, &out, RPC_REJECT_DRAINING, SBX_UNAVAILABLE, "server is shutting down");
      run_table_finish(&srv->runs, queued[i], NULL, &out.err);
    }
}
