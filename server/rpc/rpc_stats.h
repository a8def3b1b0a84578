/* rpc_stats.h: what the RPC layer counts about its calls, for operations
 * (server/ops/ reads it for /metrics): every answer by method and status,
 * and the calls refused before they ran, by reason. Recording is one
 * relaxed atomic add, from nng's callbacks and the workers alike; this
 * layer reads the counts back only for GetInfo's rejected_total, which is
 * their sum (so it always agrees with sandboxd_rejections_total).
 *
 * Answers are counted by the caller's tenant (the tenant label of
 * sandboxd_requests_total: one row per tenant, tenant_counts.h). Calls of
 * no tenant (Health, a request that did not decode or failed
 * authentication) keep the unlabelled rows. */
#ifndef SBX_RPC_STATS_H
#define SBX_RPC_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "tenant_counts.h"

#define RPC_STATS_METHODS 16 /* methods counted by index; the row after: unknown */
#define RPC_STATS_CODES 17   /* sandbox.v1.Code (gRPC's) 0..16 */

/* Why a RunCode was refused without running (besides validation). */
enum rpc_rejection {
  RPC_REJECT_QUEUE_FULL,        /* every worker busy and the queue full */
  RPC_REJECT_DRAINING,          /* the server is shutting down */
  RPC_REJECT_CLIENT_GONE,       /* the client's connection closed while queued */
  RPC_REJECT_DEADLINE,          /* the call's deadline passed while queued */
  RPC_REJECT_CANCELLED,         /* CancelRun took it out of the queue */
  RPC_REJECT_TENANT_QUEUE_FULL, /* its tenant had max_queued calls waiting */
  RPC_REJECT_RATE_LIMITED,      /* its tenant's rate_per_s/burst: no token */
  RPC_REJECT_N
};

/* A tenant's row: its answers by method (the row after: unknown) and
 * status, counter m * RPC_STATS_CODES + code. */
#define RPC_STATS_TENANT_ROW ((RPC_STATS_METHODS + 1) * RPC_STATS_CODES)

struct rpc_stats {
  /* The answers to calls of no tenant (see above). */
  atomic_uint_fast64_t replies[RPC_STATS_METHODS + 1][RPC_STATS_CODES];
  struct tenant_counts by_tenant; /* rows of RPC_STATS_TENANT_ROW */
  atomic_uint_fast64_t rejections[RPC_REJECT_N];
};

/* The counts as plain values (each exact, the set no snapshot). */
struct rpc_stats_read {
  uint64_t replies[RPC_STATS_METHODS + 1][RPC_STATS_CODES];
  uint64_t rejections[RPC_REJECT_N];
};
void rpc_stats_read(const struct rpc_stats *s, struct rpc_stats_read *out);

/* One answer: tenant is the caller's tenant's index, -1 for none (a
 * tenant without a row, tenant_counts_add false, counts as none);
 * method is the service's method index, -1 when the request named none the
 * service has (or did not decode). */
void rpc_stats_reply(struct rpc_stats *s, int tenant, int method, int code);
/* Frees the tenants' rows (at the server's end). */
void rpc_stats_destroy(struct rpc_stats *s);
void rpc_stats_reject(struct rpc_stats *s, enum rpc_rejection why);
/* The refusals of every reason: GetInfo's rejected_total, the sum of the
 * sandboxd_rejections_total series, and the stopped line's. */
uint64_t rpc_stats_rejections_total(const struct rpc_stats *s);
/* "queue_full", "draining", "client_gone", "deadline_exceeded",
 * "cancelled", "tenant_queue_full", "rate_limited". */
const char *rpc_rejection_name(enum rpc_rejection why);

#endif
