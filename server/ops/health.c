/* health.c: the probes. /healthz answers 200 while the process serves HTTP
 * at all (liveness: a restart would not help otherwise); /readyz answers
 * 200 only when a call sent now would be taken: not draining, every worker
 * slot running, with --zygote every slot's first zygote start over
 * (started or failed: python runs are served either way), the queue not
 * full; else 503 with the reason on one line
 * (readiness: the endpoint is taken out of the Service until it passes). */
#include <stdio.h>

#include "ops.h"
#include "server.h"

bool ops_ready(const struct server_stats_read *st, char *why, size_t len) {
  if (st->draining) {
    snprintf(why, len, "draining: the server is shutting down");
    return false;
  }
  if (st->isolation == NULL || st->workers_alive < st->workers) {
    snprintf(why, len, "engine not ready: %u of %u workers running", st->workers_alive,
             st->workers);
    return false;
  }
  if (st->zygotes_warming > 0) {
    snprintf(why, len, "zygotes starting: %u of %u workers still importing --zygote-preload",
             st->zygotes_warming, st->workers);
    return false;
  }
  if (st->queue_full) {
    snprintf(why, len, "queue full: all %u workers busy and %lld calls queued", st->workers,
             (long long)st->queue_capacity);
    return false;
  }
  return true;
}

void ops_handle_healthz(void *ctx, const struct http_request *req, struct http_response *resp) {
  http_response_text(resp, 200, "ok\n");
}

void ops_handle_readyz(void *ctx, const struct http_request *req, struct http_response *resp) {
  struct server_stats_read st;
  server_stats_read(ctx, &st);
  char why[160];
  if (ops_ready(&st, why, sizeof(why)))
    http_response_text(resp, 200, "ready\n");
  else
    http_response_text(resp, 503, "%s\n", why);
}
