/* call.h: one nng context and what it is doing, and how it is answered
 * (call.c builds the reply; transport.c sends it). A call is owned by
 * exactly one party at a time: the aio callback (transport.c), the run
 * table while the call waits for a run (run_table.c), or the worker that
 * ends the run it brought (worker.c). */
#ifndef SBX_CALL_H
#define SBX_CALL_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stdint.h>

#include "bounded_alloc.h"
#include "error.h"
#include "log.h"
#include "rpc_stats.h"
#include "sandbox.pb-c.h"
#include "sandbox/sandbox.h"
#include "tenants.h"

struct server;
struct session;
struct live_run;

enum call_state { CALL_IDLE, CALL_RECV, CALL_BUSY, CALL_SEND };

struct server_call {
  struct server *srv; /* for the aio loop (transport.c) only */
  /* What every answer counts into and logs through (call.c). */
  struct rpc_stats *stats;
  struct log_limit *call_log;
  nng_ctx ctx;
  nng_aio *aio;
  _Atomic int state;
  char request_id[128];
  int method;       /* the service's method index, -1 when the request named none */
  uint32_t pipe_id; /* the connection the request came on (conns.h) */
  char peer[64];    /* its remote address, for the log (conns_peer_name) */
  int origin;       /* enum conns_origin: inproc, loopback or remote */
  bool logged;      /* its layer logged this call (event=run, event=auth_failed) */
  /* Who the call is (auth.c), and its tenant's policy as it was then. */
  struct tenant *tenant;
  struct tenant_policy policy;
  uint64_t deadline_unix_ms;
  uint64_t received_ms; /* monotonic */
  struct sbx_bounded_alloc alloc;
  ProtobufCMessage *input;              /* the decoded request, freed through alloc */
  struct sandbox_limits limits;         /* RunCode: validated, defaults applied */
  const struct runtime *runtime;        /* RunCode: the one it names (runtimes_resolve) */
  struct sandbox_limits compile_limits; /* RunCode of a compiled runtime: its compile stage's */
  struct session *session;              /* RunCode with session_id: reserved at dispatch */
  bool session_created;
  nng_msg *reply;
  /* WatchRun and CancelRun while they wait for news of a run (run_table.c),
   * under the run table's lock. */
  struct {
    struct live_run *run; /* NULL: not waiting */
    struct server_call *next;
    uint64_t deadline_ms; /* monotonic */
    uint64_t out_off, err_off;
    bool cancel;
  } wait;
};

/* Builds call->reply; when it cannot be built, a minimal INTERNAL reply. */
void call_reply(struct server_call *call, sbx_code status, const char *message,
                const ProtobufCMessage *payload);
/* A refused RunCode: its message with "; nothing ran" added to the first
 * line, here and nowhere else (every refusal of a RunCode means the code
 * never started). */
void call_reply_not_run(struct server_call *call, const struct sbx_error *err);
/* That message, malloc'd (NULL when out of memory): also a started run's
 * outcome (run_table.c). */
char *call_not_run_message(const struct sbx_error *err);

#endif
