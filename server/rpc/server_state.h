/* server_state.h: struct server, the one context struct of sandboxd. All
 * mutable state of the server lives here or in the calls it owns; no other
 * globals. The rpc modules that act for the whole server (transport.c,
 * handlers.c, worker.c, server.c) read it; the run table and the calls are
 * given only what they use (run_table.h, call.h). Other layers read its
 * numbers through server_stats_read (server.h). The path of a request,
 * through the folders:
 *   rpc/transport.c  receive (nng contexts, aio callbacks), send
 *   rpc/decode.c     the envelope and the request, bounded
 *   rpc/handlers.c   each method; RunCode and StartRun validated
 *                    (rpc/validate.c), made a record of the run table
 *                    (rpc/run_table.c) and queued (rpc/queue.c); WatchRun
 *                    and CancelRun answered or left waiting by the run table
 *   rpc/worker.c     a worker takes the run, runs it (run/) and ends it in
 *                    the run table, which answers the RunCode call and the
 *                    watchers (rpc/call.c builds each reply)
 *   run/             the run: inputs (requirements/, fetch/), workspace
 *                    (workspace/), the engine (sandbox/), the response */
#ifndef SBX_SERVER_STATE_H
#define SBX_SERVER_STATE_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "call.h"
#include "conns.h"
#include "error.h"
#include "log.h"
#include "queue.h"
#include "rpc_stats.h"
#include "run_table.h"
#include "runner.h"
#include "sandbox.pb-c.h"
#include "settings.h"
#include "tenants.h"
#include "tls_files.h"
#include "tls_listen.h"

/* The fronts (server/fronts/) call RunCode through the C client on this
 * listener of the same socket: the same decoding, validation, queue, limits
 * and counters as any call, and no port. */
#define SERVER_FRONTS_URL "inproc://sandboxd-fronts"

struct server {
  struct server_settings settings;
  struct tenants tenants; /* who calls (auth.c); made first, freed last */
  struct sandbox_engine *engine;
  struct runner runner;                 /* what the runs share: workspaces, sessions, installer */
  Sandbox__V1__Sandbox_Service service; /* the handlers (handlers.c) */
  nng_socket sock;
  struct tls_files tls;         /* checked at start when a tls+tcp:// listener is set */
  struct tls_listen tls_listen; /* the nng side of the tls+tcp:// listeners */
  struct conns conns;
  struct server_call *calls;
  size_t n_calls;
  struct work_queue queue; /* of struct live_run, for the workers */
  struct run_table runs;   /* every run from dispatch to end; started ones' outcomes */
  bool runs_ready;
  pthread_t *workers;
  unsigned n_workers;
  atomic_bool draining;
  atomic_uint workers_alive; /* worker threads created and not yet ended */
  /* With --zygote: workers whose slot's first zygote start has not ended
   * yet (success or failure); /readyz waits for 0. */
  atomic_uint zygotes_warming;
  /* Our own counters: nng's socket statistics stay 0 for REQ/REP. The
   * calls refused before they ran are counted by reason in stats only
   * (rpc_stats_rejections_total), one source for GetInfo and /metrics. */
  atomic_uint_fast64_t requests_total;
  struct rpc_stats stats;    /* answers by method and status, refusals by reason */
  struct log_limit call_log; /* event=call lines (refused calls), a second */
  struct log_limit auth_log; /* event=auth_failed lines, a second */
};

#endif
