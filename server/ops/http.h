/* http.h: the HTTP listener of sandboxd, and the routes served on it: the
 * operations routes (/metrics, /healthz, /readyz) and the fronts
 * (server/fronts/: the Piston API, MCP), which take request bodies and wait
 * for runs.
 *
 * libmicrohttpd parses HTTP, with one thread per connection (MHD's
 * MHD_USE_THREAD_PER_CONNECTION): a handler may block for as long as a run
 * takes without holding up any other client, and the number of such
 * threads is the connection cap. Requests are capped (request line and
 * headers within a per-connection memory limit: 414 or 431 past it; a body
 * only to a route that takes POST, within max_body_bytes: 413 past it,
 * answered before the body is read), connections too (in total and per
 * address: past either, closed at once). Two clocks cut a connection off:
 * one that sends or reads nothing for timeout_s (MHD's own idle timeout),
 * and one whose request (line, headers, body) has not all arrived within
 * request_timeout_s of the connection's opening or its previous response
 * (http_listener_sweep: a client sending one byte a second is not idle, but
 * it is cut off). While a handler works, neither clock runs: the client is
 * waiting for us.
 *
 * Routes map a path to a handler: an exact path ("/metrics"), or a prefix
 * when the path ends in '/' ("/api/v2/" serves "/api/v2/execute"); the
 * longest match wins. Before any route is served, the request's framing
 * and its Host are checked (RFC 9112): more than one Content-Length, or
 * Transfer-Encoding with Content-Length, is 400 (a request two servers
 * could read two ways); a Transfer-Encoding other than chunked is 501; an
 * HTTP/1.1 request without Host, or with two, or with one that is not
 * host[:port], is 400; a Host that is none of the listener's names and
 * addresses (http_host.h: DNS rebinding) is 421, on every route. Then a
 * path no route matches is 404; a method the route does not take is 405
 * with an Allow header; a POST carrying an Origin header (a browser's
 * cross-origin or DNS-rebinding request: the fronts serve no pages and no
 * CORS) is 403; a POST whose body is not labelled application/json is 415
 * (a browser's form cannot send that type). Each of these refusals is
 * written in the protocol of the path's front (http_listener_errors: a
 * Piston {"message"}, a JSON-RPC error), text elsewhere. Routes are added
 * before the listener starts and never change while it serves, so its
 * threads read them without a lock. Answers are counted per route and
 * status (http_route_counts). */
#ifndef SBX_OPS_HTTP_H
#define SBX_OPS_HTTP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"
#include "http_host.h"
#include "http_tls.h"

#define HTTP_ROUTES_MAX 32
#define HTTP_ERROR_SHAPES_MAX 8
#define HTTP_ROUTE_PATH_MAX 64
#define HTTP_RESPONSE_HEADERS_MAX 8
#define HTTP_HEADER_VALUE_MAX 128

/* The methods a route takes: a mask. A route that takes POST takes a body
 * (the only method that does), of type application/json. Two flags are not
 * methods: HTTP_ANY_CLIENT: on an https:// listener with --tls-client-auth
 * required, such a route also serves clients without a verified
 * certificate (the probes: a kubelet shows none); every other route
 * answers them 403. HTTP_TEXT_PLAIN_JSON: a POST body labelled text/plain
 * is taken too (as JSON), but only from a client that is no browser: the
 * request has none of the Sec-Fetch-* headers every current browser sends
 * (and no Origin, refused on every POST). For a client that labels its
 * JSON so (the npm piston-client: node-fetch calls a string body
 * text/plain;charset=UTF-8). */
enum {
  HTTP_GET = 1u << 0,
  HTTP_HEAD = 1u << 1,
  HTTP_POST = 1u << 2,
  HTTP_DELETE = 1u << 3,
  HTTP_TEXT_PLAIN_JSON = 1u << 14,
  HTTP_ANY_CLIENT = 1u << 15
};

struct MHD_Connection;

struct http_request {
  const char *method; /* as the client sent it: "GET", "POST" */
  const char *path;   /* the URL's path, without its query */
  const char *rest;   /* what follows the route's path ("" for an exact route) */
  const char *body;   /* POST: the whole body, NUL-terminated (it may hold NULs); else "" */
  size_t body_len;
  struct MHD_Connection *conn; /* for http_request_header */
  unsigned idle_timeout_s;     /* the connection's idle clock (0: none), for a streamed body */
};

/* A request header (name case-insensitive), NULL when absent. */
const char *http_request_header(const struct http_request *req, const char *name);

/* Whether the client's address (the TCP peer's, never a header such as
 * X-Forwarded-For) is on 127.0.0.0/8 or ::1 (or ::ffff:127.0.0.0/104). */
bool http_request_loopback(const struct http_request *req);

/* What the client's verified certificate names on https:// (URI
 * subjectAltNames, then "CN=<cn>"; http_tls.h); 0 on http://, or without
 * a verified certificate. */
size_t http_request_client_identities(const struct http_request *req,
                                      char (*ids)[HTTP_TLS_IDENTITY_MAX + 1], size_t max);

struct http_header {
  const char *name; /* a string that outlives the response (a literal) */
  char value[HTTP_HEADER_VALUE_MAX];
};

/* A body made while it is sent (a stream of events): read fills buf with
 * up to max bytes and returns how many (it may block, on the connection's
 * own thread, but should give something within the connection's idle
 * timeout), or -1 at the end (-2: cut off). done is called once, on that
 * thread, when the response is over: sent, or the client gone, or never
 * sent at all. Same shape as libmicrohttpd's content reader. */
typedef ssize_t (*http_stream_read_fn)(void *arg, uint64_t pos, char *buf, size_t max);
typedef void (*http_stream_done_fn)(void *arg);

struct http_response {
  unsigned status;          /* 0: the handler said nothing (500) */
  const char *content_type; /* NULL: text/plain; charset=utf-8 */
  char *body;               /* malloc'd, freed by the listener; NULL: empty */
  size_t len;
  http_stream_read_fn stream_read; /* non-NULL: the body is streamed (chunked), not body */
  http_stream_done_fn stream_done;
  void *stream_arg;
  struct http_header headers[HTTP_RESPONSE_HEADERS_MAX]; /* besides Content-Type */
  size_t n_headers;
};

/* Adds a header to resp (name a literal); -1 when the table is full or the
 * value longer than HTTP_HEADER_VALUE_MAX - 1 bytes or not one line. */
int http_response_header(struct http_response *resp, const char *name, const char *value);

/* A handler: fills resp. It runs on its connection's own thread and may
 * block (a front waits for its run here); it must not keep req or resp. A
 * streamed body (stream_read) keeps the connection, and its thread, until
 * stream_done: a stream counts against the connection cap like any
 * request, and the idle clock runs while it is sent. */
typedef void (*http_handler_fn)(void *ctx, const struct http_request *req,
                                struct http_response *resp);

/* Answers counted by status: the codes a listener gives, then any other. */
#define HTTP_COUNTED_CODES                                                                         \
  200, 201, 202, 204, 400, 401, 403, 404, 405, 406, 409, 411, 413, 415, 421, 422, 429, 500, 501,   \
      502, 503, 504
enum { HTTP_CODE_SLOTS = 23 }; /* the codes above and "other" */
struct http_counts {
  _Atomic uint64_t by_code[HTTP_CODE_SLOTS];
};
/* The status of slot i (0 for "other"), and the slot of a status. */
unsigned http_counted_code(size_t slot);
size_t http_code_slot(unsigned status);

struct http_route {
  char path[HTTP_ROUTE_PATH_MAX];
  unsigned methods;
  http_handler_fn fn;
  void *ctx;
  struct http_counts answers;
};

/* How the listener's own refusals (400, 403, 404, 405, 413, 415, 421, 501)
 * are written for the paths of a front: message is one line, without a
 * final newline. */
typedef void (*http_error_fn)(struct http_response *resp, unsigned status, const char *message);

struct http_error_shape {
  char path[HTTP_ROUTE_PATH_MAX]; /* matched as a route's path is */
  http_error_fn fn;
};

struct tls_files;

struct http_config {
  const char *url;             /* http:// or https://host:port (settings_http_listen_parts) */
  const struct tls_files *tls; /* https://: the server's TLS files; NULL for http:// */
  unsigned max_connections;
  unsigned max_connections_per_ip;
  unsigned timeout_s;         /* idle: nothing sent or read */
  unsigned request_timeout_s; /* a whole request, however slowly it trickles */
  size_t max_request_bytes;   /* MHD's memory per connection: request line and headers */
  size_t max_body_bytes;      /* a POST body */
  const char *allowed_hosts;  /* names besides the listener's own (http_host.h); "" for none */
};

struct MHD_Daemon;
struct http_conn;

struct http_listener {
  struct MHD_Daemon *daemon;
  struct http_route routes[HTTP_ROUTES_MAX];
  size_t n_routes;
  struct http_error_shape error_shapes[HTTP_ERROR_SHAPES_MAX];
  size_t n_error_shapes;
  struct http_host_names hosts; /* what Host may name */
  unsigned port;                /* bound (the configured one, or the kernel's pick for port 0) */
  size_t max_body_bytes;
  uint64_t request_timeout_ms;
  /* The open connections, for the request clock (http_listener_sweep). */
  pthread_mutex_t conns_lock;
  struct http_conn *conns;
  size_t n_conns;
  struct http_counts unrouted;        /* answers to paths no route takes (404) */
  _Atomic uint64_t cut_slow_total;    /* request not in within request_timeout_s */
  _Atomic uint64_t cut_body_total;    /* a chunked body past max_body_bytes */
  _Atomic uint64_t connections_total; /* accepted, all time */
  bool tls;
  bool client_cert_required; /* https:// with --tls-client-auth required */
};

/* Adds a route (before http_listener_start). 0, or -1 with err (too many,
 * path too long or not starting with '/', already routed, or no method). */
int http_listener_route(struct http_listener *l, const char *path, unsigned methods,
                        http_handler_fn fn, void *ctx, struct sbx_error *err);

/* The listener's refusals on path (an exact path, or a prefix ending in
 * '/', as for routes) are written by fn (before http_listener_start); the
 * rest are text. 0, or -1 with err (too many, or a bad path). */
int http_listener_errors(struct http_listener *l, const char *path, http_error_fn fn,
                         struct sbx_error *err);

/* Binds cfg->url and starts serving the routes. 0, or -1 with err (the
 * address, and why it could not be bound; an allowed host that is not a
 * name or an address). */
int http_listener_start(struct http_listener *l, const struct http_config *cfg,
                        struct sbx_error *err);

/* Cuts off the connections whose request has not arrived within the
 * request timeout (a shutdown of their socket, which their thread sees at
 * once); returns how many. Called every tick by the main thread. Safe on a
 * listener that never started. */
size_t http_listener_sweep(struct http_listener *l);

/* Open connections now. */
size_t http_listener_connections(struct http_listener *l);

/* Stops serving: open connections are closed, every connection thread
 * joined (a handler still working is waited for). Safe on a listener that
 * never started. */
void http_listener_stop(struct http_listener *l);

/* The route serving path, NULL for none (exact match, or the longest
 * prefix route that path starts with). */
const struct http_route *http_route_match(const struct http_route *routes, size_t n,
                                          const char *path);

/* A text body (the format's expansion) with status. */
void http_response_text(struct http_response *resp, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
