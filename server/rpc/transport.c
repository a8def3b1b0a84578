/* transport.c: the nng side. A pool of REP contexts, each driven by one aio
 * callback: receive, decode (decode.c), hand to its handler (handlers.c),
 * which answers at once or queues the call for a worker (worker.c); then
 * send the reply and receive the next request. Never blocks in a callback;
 * never queues without bound. Also the server's start and its drain. */
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "decode.h"
#include "envelope.h"
#include "handlers.h"
#include "log.h"
#include "server.h"
#include "text.h"
#include "worker.h"

/* The refused calls a client can send at any rate: at most this many lines
 * a second, the rest counted in the next line written. */
#define CALL_LOG_PER_SECOND 20

/* One line for a call answered with an error before or without a run (a
 * run's own line, event=run, says how the run layer answered). */
static void log_call(struct server_call *call, sbx_code status, const char *message) {
  uint64_t suppressed = 0;
  if (!log_limit_take(&call->srv->call_log, CALL_LOG_PER_SECOND, &suppressed))
    return;
  char rid[72], msg[200];
  text_printable(call->request_id, strlen(call->request_id), rid, sizeof(rid), false);
  text_printable(message, strcspn(message, "\n"), msg, sizeof(msg), false);
  log_line("call",
           "request_id=\"%s\" method=%s peer=%s status=%s duration_ms=%llu msg=\"%s\" "
           "lines_suppressed=%llu",
           rid, sbx_method_name(call->method), call->peer, sbx_code_name(status),
           (unsigned long long)(sbx_monotonic_ms() - call->received_ms), msg,
           (unsigned long long)suppressed);
}

void call_reply(struct server_call *call, sbx_code status, const char *message,
                const ProtobufCMessage *payload) {
  if (status != SBX_OK && !call->run_logged)
    log_call(call, status, message);
  if (call->reply != NULL) {
    nng_msg_free(call->reply);
    call->reply = NULL;
  }
  rpc_stats_reply(&call->srv->stats, call->method, status);
  /* The message is a proto3 string, which clients refuse to decode unless
   * it is UTF-8, and it may quote a zygote, pip or a cut in the middle of
   * a character: repaired here, where every answer passes. */
  char *repaired = NULL;
  if (message != NULL && !text_utf8_valid(message, strlen(message))) {
    size_t n;
    repaired = text_utf8_repair((const uint8_t *)message, strlen(message), &n);
    if (repaired != NULL)
      message = repaired;
  }
  int rc = sbx_reply_msg_new(status, message, call->request_id, payload, &call->reply);
  free(repaired);
  if (rc == 0)
    return;
  if (sbx_reply_msg_new(SBX_INTERNAL, "out of memory building the reply", call->request_id, NULL,
                        &call->reply) != 0)
    call->reply = NULL;
}

char *call_not_run_message(const struct sbx_error *err) {
  static const char suffix[] = "; nothing ran";
  size_t len = strlen(err->msg), first = strcspn(err->msg, "\n");
  char *msg = malloc(len + sizeof(suffix));
  if (msg == NULL)
    return NULL;
  memcpy(msg, err->msg, first);
  memcpy(msg + first, suffix, sizeof(suffix) - 1);
  memcpy(msg + first + sizeof(suffix) - 1, err->msg + first, len - first + 1);
  return msg;
}

void call_reply_not_run(struct server_call *call, const struct sbx_error *err) {
  char *msg = call_not_run_message(err);
  call_reply(call, err->code, msg != NULL ? msg : err->msg, NULL);
  free(msg);
}

static void call_recv(struct server_call *call) {
  atomic_store(&call->state, CALL_RECV);
  nng_ctx_recv(call->ctx, call->aio);
}

void call_send(struct server_call *call) {
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
  if (rc < 0) {
    call_reply(call, err.code, err.msg, NULL);
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
  call->run_logged = false;
  conns_call_begin(&call->srv->conns, call->pipe_id);
  atomic_store(&call->state, CALL_BUSY);
  if (!call_handle(call, msg))
    call_send(call);
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

/* One listener; a tls+tcp:// one gets the TLS configuration first. */
/* One listener of the socket on url, started; its id in *id. */
static int open_listener(struct server *srv, const char *url, uint32_t *id, struct sbx_error *err) {
  nng_listener l;
  int rv;
  if ((rv = nng_listener_create(&l, srv->sock, url)) != 0 ||
      (rv = nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, (size_t)srv->settings.max_message_bytes)) !=
          0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "listen %s: %s", url, nng_strerror(rv));
  if (settings_url_is_tls(url) && tls_listen_setup(&srv->tls_listen, &srv->tls, l, url, err) < 0)
    return -1;
  if ((rv = nng_listener_start(l, 0)) != 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "listen %s: %s", url, nng_strerror(rv));
  *id = (uint32_t)nng_listener_id(l);
  return 0;
}

static int open_socket(struct server *srv, struct sbx_error *err) {
  const struct server_settings *s = &srv->settings;
  int rv;
  if ((rv = nng_rep0_open(&srv->sock)) != 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "nng_rep0_open: %s", nng_strerror(rv));
  if (conns_init(&srv->conns, (unsigned)s->max_connections, (uint64_t)s->idle_timeout_ms) < 0 ||
      (rv = conns_watch(&srv->conns, srv->sock)) != 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "connection table: %s", nng_strerror(rv));
  srv->conns.tls_log_unverified = settings_tls_client_auth(s) == TLS_CLIENT_AUTH_OPTIONAL;
  uint32_t id = 0;
  for (unsigned i = 0; i < s->n_listen; i++)
    if (open_listener(srv, s->listen[i], &id, err) < 0)
      return -1;
  /* When HTTP fronts are served, theirs: in this process only, never
   * idle-closed. */
  if (s->http_fronts[0] != '\0') {
    if (open_listener(srv, SERVER_FRONTS_URL, &id, err) < 0)
      return -1;
    conns_set_internal_listener(&srv->conns, id);
  }
  return 0;
}

static int open_contexts(struct server *srv, struct sbx_error *err) {
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
    if ((rv = nng_aio_alloc(&call->aio, call_cb, call)) != 0 ||
        (rv = nng_ctx_open(&call->ctx, srv->sock)) != 0)
      return sbx_error_set(err, SBX_INTERNAL, 0, "nng context: %s", nng_strerror(rv));
  }
  return 0;
}

static int start_workers(struct server *srv, struct sbx_error *err) {
  srv->workers = calloc(srv->n_workers, sizeof(*srv->workers));
  if (srv->workers == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "workers");
  /* Counted down by each worker after its warm start (worker.c). */
  atomic_store(&srv->zygotes_warming, srv->settings.zygote ? srv->n_workers : 0);
  for (unsigned i = 0; i < srv->n_workers; i++) {
    struct worker_start *w = malloc(sizeof(*w));
    if (w == NULL)
      return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "workers");
    *w = (struct worker_start){srv, i};
    int rv = pthread_create(&srv->workers[i], NULL, worker_main, w);
    if (rv != 0) {
      free(w);
      return sbx_error_set(err, SBX_INTERNAL, rv, "worker thread");
    }
    atomic_fetch_add(&srv->workers_alive, 1); /* the worker takes it off when it ends */
  }
  return 0;
}

int server_start(struct server *srv, struct sbx_error *err) {
  const struct server_settings *s = &srv->settings;
  if (work_queue_init(&srv->queue, (size_t)s->queue, srv->n_workers) < 0 ||
      runs_init(&srv->runs, (size_t)s->max_started_runs, (size_t)s->max_watchers,
                (uint64_t)s->run_result_ttl_s * 1000u) < 0)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "queue");
  srv->runs_ready = true;
  if (runs_start(&srv->runs, err) < 0)
    return -1;
  handlers_init(srv);
  if (open_socket(srv, err) < 0 || open_contexts(srv, err) < 0 || start_workers(srv, err) < 0)
    return -1;
  for (size_t i = 0; i < srv->n_calls; i++)
    call_recv(&srv->calls[i]);
  return 0;
}

static size_t calls_in_flight(struct server *srv) {
  size_t n = 0;
  for (size_t i = 0; i < srv->n_calls; i++) {
    int st = atomic_load(&srv->calls[i].state);
    n += st == CALL_BUSY || st == CALL_SEND;
  }
  return n;
}

void server_drain(struct server *srv) {
  atomic_store(&srv->draining, true);
  /* What is still queued is answered now, UNAVAILABLE (it did not run);
   * workers finish the run they are in, then exit. */
  work_queue_close(&srv->queue);
  worker_refuse_queued(srv);
  for (unsigned i = 0; i < srv->n_workers; i++)
    pthread_join(srv->workers[i], NULL);
  /* Every run has ended: nothing waits on one any more. */
  runs_stop(&srv->runs);
  /* Let the last replies reach their pipes before closing the socket. */
  for (int i = 0; i < 200 && calls_in_flight(srv) > 0; i++)
    usleep(10 * 1000);
  usleep(100 * 1000);
  nng_close(srv->sock);
  tls_listen_free(&srv->tls_listen);
}

void server_free(struct server *srv) {
  for (size_t i = 0; i < srv->n_calls; i++) {
    nng_aio_free(srv->calls[i].aio); /* waits for a running callback */
    if (srv->calls[i].reply != NULL)
      nng_msg_free(srv->calls[i].reply);
  }
  free(srv->calls);
  free(srv->workers);
  work_queue_destroy(&srv->queue);
  if (srv->runs_ready) {
    runs_stop(&srv->runs);
    runs_destroy(&srv->runs);
  }
  conns_destroy(&srv->conns);
}
