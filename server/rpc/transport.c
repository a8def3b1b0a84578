/* transport.c: the aio loop. A pool of REP contexts on the server's
 * socket, each driven by one aio callback: receive, decode (decode.c), hand
 * to its handler (handlers.c), which answers at once (call.c builds the
 * reply) or leaves the call to the run table or a worker; then send the
 * reply and receive the next request. Never blocks in a callback; never
 * queues without bound. The socket and its listeners are server.c's. */
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "auth.h"
#include "decode.h"
#include "handlers.h"
#include "log.h"
#include "server_state.h"
#include "transport.h"

static void call_recv(struct server_call *call) {
  atomic_store(&call->state, CALL_RECV);
  nng_ctx_recv(call->ctx, call->aio);
}

void transport_send(struct server_call *call) {
  if (call->reply == NULL) { /* nothing could be built: drop, keep serving */
    conns_call_end(&call->srv->conns, call->pipe_id);
    call_recv(call);
    return;
  }
  atomic_store(&call->state, CALL_SEND);
  nng_aio_set_msg(call->aio, call->reply);
  call->reply = NULL;
  nng_ctx_send(call->ctx, call->aio);
}

/* Decodes and dispatches one request. Returns true when the call went to a
 * worker (the caller must then leave it alone). */
static bool call_handle(struct server_call *call, nng_msg *msg) {
  struct server *srv = call->srv;
  atomic_fetch_add(&srv->requests_total, 1);
  call->received_ms = sbx_monotonic_ms();
  /* Everything that parses the request's bytes is decode_request, the
   * function the fuzzer drives. */
  struct decoded_request req;
  struct sbx_error err;
  int rc = decode_request(nng_msg_body(msg), nng_msg_len(msg), &call->alloc, &req, &err);
  nng_msg_free(msg);
  snprintf(call->request_id, sizeof(call->request_id), "%s", req.request_id);
  call->method = req.method != NULL ? (int)req.method_index : -1;
  call->deadline_unix_ms = req.deadline_unix_ms;
  call->input = req.input;
  /* Health answers anyone (a load balancer's probe carries no key). */
  if (rc == 0 && (req.method == NULL || strcmp(req.method->name, "Health") != 0))
    rc = auth_call(&srv->tenants, &srv->auth_log, call, &req.caller, call->origin, &err);
  if (rc < 0) {
    if (call->input != NULL &&
        call->input->descriptor == &sandbox__v1__run_code_request__descriptor)
      call_reply_not_run(call, &err);
    else
      call_reply(call, err.code, err.msg, NULL);
    protobuf_c_message_free_unpacked(call->input, &call->alloc.base);
    call->input = NULL;
    return false;
  }
  if (handlers_dispatch(srv, call, req.method_index))
    return true;
  protobuf_c_message_free_unpacked(call->input, &call->alloc.base);
  call->input = NULL;
  return false;
}

/* A receive finished: the request is handled, and answered unless it went
 * to a worker. */
static void call_received(struct server_call *call, int rv) {
  if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
    atomic_store(&call->state, CALL_IDLE);
    return;
  }
  if (rv != 0) {
    log_line("recv_error", "error=\"%s\"", nng_strerror(rv));
    call_recv(call);
    return;
  }
  nng_msg *msg = nng_aio_get_msg(call->aio);
  nng_aio_set_msg(call->aio, NULL);
  call->pipe_id = (uint32_t)nng_pipe_id(nng_msg_get_pipe(msg));
  conns_peer_name(nng_msg_get_pipe(msg), call->peer, sizeof(call->peer));
  call->origin = conns_peer_origin(nng_msg_get_pipe(msg));
  call->logged = false;
  conns_call_begin(&call->srv->conns, call->pipe_id);
  atomic_store(&call->state, CALL_BUSY);
  if (!call_handle(call, msg))
    transport_send(call);
}

static void call_cb(void *arg) {
  struct server_call *call = arg;
  int rv = nng_aio_result(call->aio);
  switch (atomic_load(&call->state)) {
  case CALL_RECV:
    call_received(call, rv);
    return;
  case CALL_SEND:
    conns_call_end(&call->srv->conns, call->pipe_id);
    if (rv != 0) {
      if (nng_aio_get_msg(call->aio) != NULL)
        nng_msg_free(nng_aio_get_msg(call->aio));
      nng_aio_set_msg(call->aio, NULL);
      if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
        atomic_store(&call->state, CALL_IDLE);
        return;
      }
    }
    call_recv(call);
    return;
  default:
    return;
  }
}

int transport_open(struct server *srv, struct sbx_error *err) {
  const struct server_settings *s = &srv->settings;
  srv->n_calls =
      (size_t)(s->contexts > 0 ? s->contexts : s->workers + s->queue + 16 + s->max_watchers);
  srv->calls = calloc(srv->n_calls, sizeof(*srv->calls));
  if (srv->calls == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "contexts");
  for (size_t i = 0; i < srv->n_calls; i++) {
    struct server_call *call = &srv->calls[i];
    int rv;
    call->srv = srv;
    call->stats = &srv->stats;
    call->call_log = &srv->call_log;
    if ((rv = nng_aio_alloc(&call->aio, call_cb, call)) != 0 ||
        (rv = nng_ctx_open(&call->ctx, srv->sock)) != 0)
      return sbx_error_set(err, SBX_INTERNAL, 0, "nng context: %s", nng_strerror(rv));
  }
  return 0;
}

void transport_start(struct server *srv) {
  for (size_t i = 0; i < srv->n_calls; i++)
    call_recv(&srv->calls[i]);
}

size_t transport_in_flight(struct server *srv) {
  size_t n = 0;
  for (size_t i = 0; i < srv->n_calls; i++) {
    int st = atomic_load(&srv->calls[i].state);
    n += st == CALL_BUSY || st == CALL_SEND;
  }
  return n;
}

void transport_free(struct server *srv) {
  for (size_t i = 0; i < srv->n_calls; i++) {
    nng_aio_free(srv->calls[i].aio); /* waits for a running callback */
    if (srv->calls[i].reply != NULL)
      nng_msg_free(srv->calls[i].reply);
  }
  free(srv->calls);
  srv->calls = NULL;
  srv->n_calls = 0;
}
