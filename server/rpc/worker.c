/* worker.c: a worker takes a call from the queue, checks it may still run
 * (not draining, its deadline not past, its client still connected), runs
 * it on its slot and answers it: results flow up from the run to here. */
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "envelope.h"
#include "log.h"
#include "server.h"
#include "text.h"
#include "worker.h"

/* Ends a call taken from the queue (run, refused or dropped): its session
 * and request are released and its reply sent. */
static void finish(struct server *srv, struct server_call *call) {
  if (call->session != NULL) {
    session_release(&srv->runner.sessions, call->session);
    call->session = NULL;
  }
  protobuf_c_message_free_unpacked(call->input, &call->alloc.base);
  call->input = NULL;
  call_send(call);
}

static void refuse(struct server_call *call, enum rpc_rejection reason, sbx_code code,
                   const char *why) {
  rpc_stats_reject(&call->srv->stats, reason);
  struct sbx_error err;
  sbx_error_set(&err, code, 0, "%s", why);
  call_reply_not_run(call, &err);
}

static void run(struct server *srv, unsigned slot, struct server_call *call) {
  struct run_call rc = {
      .req = (const Sandbox__V1__RunCodeRequest *)call->input,
      .limits = call->limits,
      .session = call->session,
      .session_created = call->session_created,
      .received_ms = call->received_ms,
      .request_id = call->request_id,
      .peer = call->peer,
  };
  call->run_logged = true;
  struct run_outcome out;
  run_code(&srv->runner, slot, &rc, &out);
  if (out.ok)
    call_reply(call, SBX_OK, "", &out.resp.base);
  else
    call_reply_not_run(call, &out.err);
  run_outcome_free(&out);
}

void *worker_main(void *arg) {
  struct worker_start *w = arg;
  struct server *srv = w->srv;
  unsigned slot = w->slot;
  free(w);
  struct server_call *call;
  while ((call = work_queue_pop(&srv->queue)) != NULL) {
    if (atomic_load(&srv->draining)) {
      refuse(call, RPC_REJECT_DRAINING, SBX_UNAVAILABLE, "server is shutting down");
    } else if (call->deadline_unix_ms != 0 && sbx_now_unix_ms() > call->deadline_unix_ms) {
      refuse(call, RPC_REJECT_DEADLINE, SBX_DEADLINE_EXCEEDED,
             "the call waited in the queue past its deadline");
    } else if (!conns_alive(&srv->conns, call->pipe_id)) {
      /* Nobody can read the answer: running it would only use a worker. */
      char rid[72];
      text_printable(call->request_id, strlen(call->request_id), rid, sizeof(rid), false);
      log_line("dropped",
               "request_id=\"%s\" method=%s peer=%s reason=client_gone msg=\"the client's "
               "connection closed while the call was queued; nothing ran\"",
               rid, sbx_method_name(call->method), call->peer);
      call->run_logged = true; /* this line says it */
      refuse(call, RPC_REJECT_CLIENT_GONE, SBX_UNAVAILABLE, "the client went away");
    } else {
      run(srv, slot, call);
    }
    work_queue_done(&srv->queue);
    finish(srv, call);
  }
  atomic_fetch_sub(&srv->workers_alive, 1);
  return NULL;
}

void worker_refuse_queued(struct server *srv) {
  void *queued[64];
  size_t n;
  while ((n = work_queue_take_queued(&srv->queue, queued, 64)) > 0)
    for (size_t i = 0; i < n; i++) {
      refuse(queued[i], RPC_REJECT_DRAINING, SBX_UNAVAILABLE, "server is shutting down");
      finish(srv, queued[i]);
    }
}
