/* server.h: the service's start and drain (server.c), and the figures the
 * operations side reads (server_stats_read). struct server itself is in
 * server_state.h; main.c owns the one instance. */
#ifndef SBX_SERVER_H
#define SBX_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conns.h"
#include "error.h"
#include "killed_by.h"
#include "rpc_stats.h"
#include "run_table.h"
#include "sandbox/sandbox.h"
#include "server_state.h"
#include "stats.h"

/* server.c: the listeners, contexts and workers started; the drain on
 * SIGTERM (queued calls answered UNAVAILABLE at once, running ones
 * finished, the socket closed); then what the calls, the queue and the
 * connection table hold is freed. Between the two, readers of the counts
 * (the operations listener, server/ops/) may still read them, and see
 * draining. */
int server_start(struct server *srv, struct sbx_error *err);
void server_drain(struct server *srv);
void server_free(struct server *srv);

/* Every number the server keeps about itself and the layers under it, as
 * plain values: what /metrics and /readyz read (server/ops/), which never
 * reach into struct server. Each value is exact, the set no snapshot. */
struct server_stats_read {
  /* rpc/ */
  struct rpc_stats_read rpc; /* answers by method and status, refusals by reason */
  uint64_t requests_total;
  size_t queued, running; /* the queue: waiting for a worker, with one */
  bool queue_full;        /* a RunCode now would be refused (or closed) */
  int64_t queue_capacity;
  unsigned workers, workers_alive, zygotes_warming; /* worker threads */
  bool draining;
  struct run_table_stats_read run_table;
  /* Walked by /metrics for the tenant label (not copied: rows by tenant
   * index, see rpc_stats.h; the registry's tenants, tenants.h). */
  const struct rpc_stats *rpc_live;
  const struct tenant_counts *runs_by_tenant;   /* rows of KILLED_BY_N */
  const struct tenant_counts *egress_by_tenant; /* rows of EGRESS_COUNTS_N (runner.h) */
  uint64_t egress[EGRESS_COUNTS_N];             /* runs of no tenant */
  struct tenants *tenants;
  struct conns_stats_read conns;
  /* run/ (sessions, interpreters), requirements/ and sandbox/, through the
   * runner and the engine */
  const struct sandbox_report *isolation; /* NULL before the engine started */
  uint64_t runs_by_killed_by[KILLED_BY_N];
  struct stats_histogram_read run_wall, run_cpu, queue_wait, build_time;
  size_t sessions;
  int64_t sessions_limit;
  size_t environments; /* 0 when requirements are unavailable */
  uint64_t environments_bytes;
  int64_t environments_limit_bytes;
  uint64_t builds_total, build_failures_total, evictions_total;
  struct sandbox_zygote_stats zygotes;
  unsigned interpreters;
  int64_t interpreters_limit;
  uint64_t interpreter_starts, interpreter_evictions, interpreter_lost;
};
void server_stats_read(struct server *srv, struct server_stats_read *out);

/* runner_zygote_memory, for /metrics: not in server_stats_read, which
 * /readyz reads too: this reads /proc once per zygote. */
size_t server_zygote_memory(struct server *srv, struct sandbox_zygote_memory **out);

#endif
