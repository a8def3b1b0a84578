/* calls.h: what the library's calls are made of (client.c), for the parts
 * of it that make calls of their own (stream.c: StartRun, WatchRun,
 * CancelRun). Internal to libsandbox-client: not installed. */
#ifndef SBXC_CALLS_H
#define SBXC_CALLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fleet.h"
#include "sandbox.pb-c.h"
#include "sandbox_client.h"

struct sbxc_client {
  struct sbxc_fleet *fleet;
  unsigned retries;
  uint64_t queue_wait_ms;
  uint64_t connect_timeout_ms; /* SBXC_CONNECT_TIMEOUT_CALL: the call's own timeout */
  size_t max_request_bytes;
  _Atomic unsigned long requests; /* numbers the request ids */
  uint64_t request_id_prefix;     /* random per client: ids unique across processes */
  char *api_key;                  /* sbxc_client_set_api_key: NULL when none */
};

struct sbxc_request {
  Sandbox__V1__RunCodeRequest msg;
  Sandbox__V1__Limits limits;
  Sandbox__V1__Limits compile_limits; /* msg.compile_limits points here once set */
};

/* One call and its retries: what it sends, where it went, how it ended. */
struct call {
  const char *method;
  const ProtobufCMessage *payload;
  uint64_t run_timeout_ms;
  uint64_t reply_ms;            /* 0: the queue budget + run_timeout_ms + a margin */
  const char *session_id;       /* NULL: none */
  struct sbxc_endpoint *pinned; /* held: the call goes there and nowhere else */
  bool keep_endpoint;           /* an OK answer holds its endpoint in held */
  struct sbxc_endpoint *held;   /* the endpoint kept (sbxc_fleet_unhold it) */
  struct sbxc_key_set tried;    /* endpoints that refused it or never got it */
  char endpoint[SBXC_KEY_MAX];  /* where the last attempt went; "" before */
  unsigned attempts;
  int code; /* why there is no reply */
  char *err;
  size_t errlen;
};

/* The call as every method makes it, with the client's retries of answers
 * that prove nothing ran; a session is remembered where it was answered.
 * The reply envelope (any status), or NULL with call->code and call->err. */
Sandbox__V1__ReplyEnvelope *sbxc_call_method(sbxc_client *c, struct call *call);

/* What a struct sbxc_result points into (its internal_). */
struct result_storage {
  Sandbox__V1__ReplyEnvelope *reply;
  Sandbox__V1__RunCodeResponse *resp;
  struct sbxc_artifact *artifacts;
  struct sbxc_egress egress;   /* out->egress points here when the reply has one */
  struct sbxc_compile compile; /* out->compile points here when the reply has one */
  char *text;                  /* a message or run id of its own (malloc'd), or NULL */
  char message[512];
  char endpoint[SBXC_KEY_MAX];
};

/* Zeroes an answer (a struct sbxc_result or sbxc_watch: answer_size
 * bytes) and gives it calloc'd storage of storage_size bytes in *internal,
 * which it returns; NULL when out of memory, with *status SBXC_INTERNAL
 * and *message saying so. status, message and internal point into answer. */
void *sbxc_answer_init(void *answer, size_t answer_size, size_t storage_size, int *status,
                       const char **message, void **internal);
/* Zeroes out and gives it its storage; NULL (out says why) when out of
 * memory. out->message starts as the storage's message buffer. */
struct result_storage *sbxc_result_init(struct sbxc_result *out);
/* Fills out from st->resp (an OK outcome, owned by st). Returns 0, or -1
 * with out->status INTERNAL when out of memory. */
int sbxc_result_fill(struct result_storage *st, struct sbxc_result *out);

/* An OK answer's output, as a RunCodeResponse and a WatchRunResponse (r)
 * both carry it, into a struct sbxc_result or a struct sbxc_watch (out):
 * the two pairs of types name these fields alike. The bytes stay r's. */
#define SBXC_COPY_OUTPUT(out, r)                                                                   \
  do {                                                                                             \
    (out)->status = SBXC_OK;                                                                       \
    (out)->stdout_data = (r)->stdout.data;                                                         \
    (out)->stdout_len = (r)->stdout.len;                                                           \
    (out)->stdout_truncated = (r)->stdout_truncated;                                               \
    (out)->stderr_data = (r)->stderr.data;                                                         \
    (out)->stderr_len = (r)->stderr.len;                                                           \
    (out)->stderr_truncated = (r)->stderr_truncated;                                               \
  } while (0)

#endif
