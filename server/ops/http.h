/* http.h: the operations HTTP listener, and the routes served on it.
 *
 * libmicrohttpd parses HTTP and runs the listener on its own polling thread
 * (MHD's internal thread: no thread per connection, no thread of ours).
 * Requests are capped (request line and headers within a per-connection
 * memory limit: 414 or 431 past it; no body: 413), connections too (in
 * total and per address: past either, closed at once), and a connection
 * that sends or reads nothing for the timeout (a stalled request, an idle
 * keep-alive) is closed.
 *
 * Routes map a path to a handler: an exact path ("/metrics"), or a prefix
 * when the path ends in '/' ("/api/v2/" serves "/api/v2/execute"); the
 * longest match wins. A path no route matches is 404; a method the route
 * does not take is 405 with an Allow header. Routes are added before the
 * listener starts and never change while it serves, so the listener's
 * thread reads them without a lock. A handler runs on that thread: it must
 * answer quickly and never wait on a run (a front that queues work answers
 * from what the queue gives back, as the RPC handlers do). */
#ifndef SBX_OPS_HTTP_H
#define SBX_OPS_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define HTTP_ROUTES_MAX 32
#define HTTP_ROUTE_PATH_MAX 64

/* The methods a route takes: a mask. HTTP_ANY_CLIENT is not a method: on
 * an https:// listener with --tls-client-auth required, such a route also
 * serves clients without a verified certificate (the probes: a kubelet
 * shows none); every other route answers them 403. */
enum { HTTP_GET = 1u << 0, HTTP_HEAD = 1u << 1, HTTP_ANY_CLIENT = 1u << 15 };

struct http_request {
  const char *method; /* as the client sent it: "GET", "HEAD" */
  const char *path;   /* the URL's path, without its query */
  const char *rest;   /* what follows the route's path ("" for an exact route) */
};

struct http_response {
  unsigned status;          /* 0: the handler said nothing (500) */
  const char *content_type; /* NULL: text/plain; charset=utf-8 */
  char *body;               /* malloc'd, freed by the listener; NULL: empty */
  size_t len;
};

typedef void (*http_handler_fn)(void *ctx, const struct http_request *req,
                                struct http_response *resp);

struct http_route {
  char path[HTTP_ROUTE_PATH_MAX];
  unsigned methods;
  http_handler_fn fn;
  void *ctx;
};

struct tls_files;

struct http_config {
  const char *url;             /* http:// or https://host:port (settings_http_listen_parts) */
  const struct tls_files *tls; /* https://: the server's TLS files; NULL for http:// */
  unsigned max_connections;
  unsigned max_connections_per_ip;
  unsigned timeout_s;
  size_t max_request_bytes; /* MHD's memory per connection: request line and headers */
};

struct MHD_Daemon;

struct http_listener {
  struct MHD_Daemon *daemon;
  struct http_route routes[HTTP_ROUTES_MAX];
  size_t n_routes;
  unsigned port; /* bound (the configured one, or the kernel's pick for port 0) */
  bool tls;
  bool client_cert_required; /* https:// with --tls-client-auth required */
};

/* Adds a route (before http_listener_start). 0, or -1 with err (too many,
 * path too long or not starting with '/', or already routed). */
int http_listener_route(struct http_listener *l, const char *path, unsigned methods,
                        http_handler_fn fn, void *ctx, struct sbx_error *err);

/* Binds cfg->url and starts serving the routes on MHD's thread. 0, or -1
 * with err (the address, and why it could not be bound). */
int http_listener_start(struct http_listener *l, const struct http_config *cfg,
                        struct sbx_error *err);

/* Stops serving: open connections are closed, MHD's thread joined. Safe on
 * a listener that never started. */
void http_listener_stop(struct http_listener *l);

/* The route serving path, NULL for none (exact match, or the longest
 * prefix route that path starts with). */
const struct http_route *http_route_match(const struct http_route *routes, size_t n,
                                          const char *path);

/* A text body (the format's expansion) with status. */
void http_response_text(struct http_response *resp, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
