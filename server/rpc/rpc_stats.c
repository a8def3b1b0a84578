/* rpc_stats.c: see rpc_stats.h. */
#include "rpc_stats.h"

#include "status.h"

void rpc_stats_reply(struct rpc_stats *s, int tenant, int method, int code) {
  size_t row = method >= 0 && method < RPC_STATS_METHODS ? (size_t)method : RPC_STATS_METHODS;
  size_t col =
      code >= 0 && code < RPC_STATS_CODES ? (size_t)code : (size_t)SANDBOX__V1__CODE__UNKNOWN;
  if (!tenant_counts_add(&s->by_tenant, RPC_STATS_TENANT_ROW, tenant, row * RPC_STATS_CODES + col))
    atomic_fetch_add_explicit(&s->replies[row][col], 1, memory_order_relaxed);
}

void rpc_stats_destroy(struct rpc_stats *s) {
  tenant_counts_destroy(&s->by_tenant);
}

void rpc_stats_reject(struct rpc_stats *s, enum rpc_rejection why) {
  if (why < RPC_REJECT_N)
    atomic_fetch_add_explicit(&s->rejections[why], 1, memory_order_relaxed);
}

uint64_t rpc_stats_rejections_total(const struct rpc_stats *s) {
  uint64_t sum = 0;
  for (int r = 0; r < RPC_REJECT_N; r++)
    sum += atomic_load_explicit(&s->rejections[r], memory_order_relaxed);
  return sum;
}

void rpc_stats_read(const struct rpc_stats *s, struct rpc_stats_read *out) {
  for (size_t m = 0; m <= RPC_STATS_METHODS; m++)
    for (size_t c = 0; c < RPC_STATS_CODES; c++)
      out->replies[m][c] = atomic_load_explicit(&s->replies[m][c], memory_order_relaxed);
  for (int r = 0; r < RPC_REJECT_N; r++)
    out->rejections[r] = atomic_load_explicit(&s->rejections[r], memory_order_relaxed);
}

const char *rpc_rejection_name(enum rpc_rejection why) {
  static const char *const names[RPC_REJECT_N] = {
      [RPC_REJECT_QUEUE_FULL] = "queue_full",
      [RPC_REJECT_DRAINING] = "draining",
      [RPC_REJECT_CLIENT_GONE] = "client_gone",
      [RPC_REJECT_DEADLINE] = "deadline_exceeded",
      [RPC_REJECT_CANCELLED] = "cancelled",
      [RPC_REJECT_TENANT_QUEUE_FULL] = "tenant_queue_full",
      [RPC_REJECT_RATE_LIMITED] = "rate_limited",
  };
  return why < RPC_REJECT_N ? names[why] : "unknown";
}
