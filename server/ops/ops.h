/* ops.h: the operations side of sandboxd: the HTTP listener (http.h) with
 * /metrics (collect.c), /healthz and /readyz (health.c). Operations read,
 * never act: every handler here reads counters and gauges the other layers
 * keep (server_stats_read, rpc/server.h) and starts no work. The fronts
 * (server/fronts/: the Piston API, MCP) add their routes on the same
 * listener (ops->http) before ops_start_listener, and go through RunCode. */
#ifndef SBX_OPS_H
#define SBX_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "http.h"

struct server;
struct server_stats_read;

struct ops {
  struct server *srv;
  struct http_listener http;
};

/* The operations routes on ops->http (for srv), before the listener starts. */
int ops_add_routes(struct ops *ops, struct server *srv, struct sbx_error *err);
/* Starts the listener when --http-listen is set (a no-op otherwise): after
 * the RPC listeners, so a ready probe never sees a server that cannot take
 * calls. Logs event=http_listening. 0, or -1 with err. */
int ops_start_listener(struct ops *ops, struct sbx_error *err);
/* Every tick of the main thread: cuts off HTTP connections whose request
 * did not arrive within --http-request-timeout-s (logged when any). */
void ops_tick(struct ops *ops);
/* In the drain, after the RPC side has drained (the probes say draining
 * until here) and before what the counters live in is freed. */
void ops_stop(struct ops *ops);

/* collect.c: the whole exposition (every family of sandboxd, of its HTTP
 * listener http and of the process), malloc'd; NULL when out of memory. */
char *ops_metrics_text(struct server *srv, struct http_listener *http, size_t *len);

/* health.c: whether the server should get traffic, from its figures
 * (server_stats_read): not draining, every worker (engine slot) running,
 * its zygote's first start over (--zygote), the queue not full. When not,
 * why (one line). */
bool ops_ready(const struct server_stats_read *st, char *why, size_t len);
void ops_handle_healthz(void *ctx, const struct http_request *req, struct http_response *resp);
void ops_handle_readyz(void *ctx, const struct http_request *req, struct http_response *resp);

#endif
