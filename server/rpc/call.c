/* call.c: how a call is answered (call.h): the reply built on the call,
 * its message made valid UTF-8, the answer counted by method and status,
 * and a refused call's one log line. Sending is the aio loop's
 * (transport.c). Never sends, never blocks, never reads the request. */
#include "call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "envelope.h"
#include "text.h"

/* The refused calls a client can send at any rate: at most this many lines
 * a second, the rest counted in the next line written. */
#define CALL_LOG_PER_SECOND 20

/* One line for a call answered with an error before or without a run (a
 * run's own line, event=run, says how the run layer answered). */
static void log_call(struct server_call *call, sbx_code status, const char *message) {
  uint64_t suppressed = 0;
  if (!log_limit_take(call->call_log, CALL_LOG_PER_SECOND, &suppressed))
    return;
  char rid[72], msg[200];
  text_printable(call->request_id, strlen(call->request_id), rid, sizeof(rid), false);
  text_printable(message, strcspn(message, "\n"), msg, sizeof(msg), false);
  log_line("call",
           "request_id=\"%s\" method=%s tenant=%s peer=%s status=%s duration_ms=%llu msg=\"%s\" "
           "lines_suppressed=%llu",
           rid, sbx_method_name(call->method), call->tenant != NULL ? call->tenant->name : "-",
           call->peer, sbx_code_name(status),
           (unsigned long long)(sbx_monotonic_ms() - call->received_ms), msg,
           (unsigned long long)suppressed);
}

void call_reply(struct server_call *call, sbx_code status, const char *message,
                const ProtobufCMessage *payload) {
  if (status != SBX_OK && !call->logged)
    log_call(call, status, message);
  if (call->reply != NULL) {
    nng_msg_free(call->reply);
    call->reply = NULL;
  }
  rpc_stats_reply(call->stats, call->tenant != NULL ? (int)call->tenant->index : -1, call->method,
                  status);
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
