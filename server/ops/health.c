/* health.c: the probes. /healthz answers 200 while the process serves HTTP
 * at all (liveness: a restart would not help otherwise); /readyz answers
 * 200 only when a call sent now would be taken: not draining, every worker
 * slot running, with --zygote every slot's first zygote start over
 * (started or failed: python runs are served either way), the queue not
 * full; else 503 with the reason on one line
 * (readiness: the endpoint is taken out of the Service until it passes). */
#include <stdatomic.h>
#include <stdio.h>

#include "ops.h"
#include "server.h"

bool ops_ready(struct server *srv, char *why, size_t len) {
  if (atomic_load(&srv->draining)) {
    snprintf(why, len, "draining: the server is shutting down");
    return false;
  }
  unsigned alive = atomic_load(&srv->workers_alive);
  if (srv->engine == NULL || alive < srv->n_workers) {
    snprintf(why, len, "engine not ready: %u of %u workers running", alive, srv->n_workers);
    return false;
  }
  unsigned warming = atomic_load(&srv->zygotes_warming);
  if (warming > 0) {
    snprintf(why, len, "zygotes starting: %u of %u workers still importing --zygote-preload",
             warming, srv->n_workers);
    return false;
  }
  if (work_queue_full(&srv->queue)) {
    snprintf(why, len, "queue full: all %u workers busy and %lld calls queued", srv->n_workers,
             (long long)srv->settings.queue);
    return false;
  }
  return true;
}

void ops_handle_healthz(void *ctx, const struct http_request *req, struct http_response *resp) {
  http_response_text(resp, 200, "ok\n");
}

void ops_handle_readyz(void *ctx, const struct http_request *req, struct http_response *resp) {
  char why[160];
  if (ops_ready(ctx, why, sizeof(why)))
    http_response_text(resp, 200, "ready\n");
  else
    http_response_text(resp, 503, "%s\n", why);
}
