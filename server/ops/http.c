/* http.c: see http.h. Everything HTTP (parsing, limits, idle timeouts,
 * keep-alive, chunked bodies, 100-continue, HEAD without a body) is
 * libmicrohttpd's; this file binds the socket, sets the limits in one place
 * (listener_options, with the TLS ones from http_tls.c for https://),
 * checks what MHD 0.9.75 lets through (a repeated Content-Length or Host,
 * Transfer-Encoding beside Content-Length, a missing Host: MHD takes the
 * first and goes on) and the Host's name (http_host.c), routes each
 * request, gathers a POST body within its cap, keeps the request clock of
 * every connection and counts the answers. It never parses HTTP itself.
 *
 * Why a thread per connection: the fronts call RunCode through the C
 * client, which blocks until the reply, and a run may take a minute. MHD's
 * suspend/resume would need threads of ours to block in the client instead
 * (one per run in flight, so just as many), plus the bookkeeping of resuming
 * and of a daemon stopped with suspended connections. With a thread per
 * connection the handler blocks where it is; the threads are bounded by the
 * connection cap (--http-max-connections), each with a small stack. */
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "buf.h"
#include "clock.h"
#include "http_tls.h"
#include "settings.h"

/* Each connection thread's stack: handlers parse JSON with jansson, whose
 * parser recurses up to 2048 levels (a few hundred bytes each). */
#define HTTP_THREAD_STACK_BYTES ((size_t)2 << 20)
/* What a streamed body's reader is asked for at most, each time. */
#define HTTP_STREAM_BLOCK_BYTES 4096

/* One TCP connection: MHD's socket context, on the listener's list while
 * open. reading_since_ms: when the request now arriving began to be
 * awaited (the connection's opening, or the previous response); 0 while a
 * handler has the request, or once the connection was cut off. */
struct http_conn {
  struct http_conn *prev, *next;
  int fd;
  uint64_t reading_since_ms;
};

/* One request: MHD's request context, from the first call of the access
 * handler to MHD_OPTION_NOTIFY_COMPLETED. */
struct http_exchange {
  struct http_route *route;
  bool takes_body;
  bool chunked;        /* no Content-Length: the cap is checked as the body comes */
  struct sbx_buf body; /* NUL-terminated past len once anything came */
};

static const unsigned counted_codes[] = {HTTP_COUNTED_CODES};
_Static_assert(sizeof(counted_codes) / sizeof(counted_codes[0]) + 1 == HTTP_CODE_SLOTS,
               "HTTP_CODE_SLOTS counts the codes and 'other'");

unsigned http_counted_code(size_t slot) {
  return slot >= 1 && slot < HTTP_CODE_SLOTS ? counted_codes[slot - 1] : 0;
}

size_t http_code_slot(unsigned status) {
  for (size_t i = 0; i < sizeof(counted_codes) / sizeof(counted_codes[0]); i++)
    if (counted_codes[i] == status)
      return i + 1;
  return 0;
}

int http_listener_route(struct http_listener *l, const char *path, unsigned methods,
                        http_handler_fn fn, void *ctx, struct sbx_error *err) {
  if (l->n_routes >= HTTP_ROUTES_MAX)
    return sbx_error_set(err, SBX_INTERNAL, 0, "http route %s: more than %d routes", path,
                         HTTP_ROUTES_MAX);
  if (path[0] != '/' || strlen(path) >= HTTP_ROUTE_PATH_MAX)
    return sbx_error_set(err, SBX_INTERNAL, 0, "http route %s: not a path of at most %d bytes",
                         path, HTTP_ROUTE_PATH_MAX - 1);
  if ((methods & (HTTP_GET | HTTP_HEAD | HTTP_POST | HTTP_DELETE)) == 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "http route %s: no method", path);
  for (size_t i = 0; i < l->n_routes; i++)
    if (strcmp(l->routes[i].path, path) == 0)
      return sbx_error_set(err, SBX_INTERNAL, 0, "http route %s: already routed", path);
  struct http_route *r = &l->routes[l->n_routes++];
  memset(r, 0, sizeof(*r));
  snprintf(r->path, sizeof(r->path), "%s", path);
  r->methods = methods;
  r->fn = fn;
  r->ctx = ctx;
  return 0;
}

/* Whether path is pattern (an exact path) or under it (a prefix ending in
 * '/'); *len is the pattern's length, for the longest match. */
static bool path_matches(const char *pattern, const char *path, size_t *len) {
  *len = strlen(pattern);
  bool prefix = *len > 0 && pattern[*len - 1] == '/';
  return prefix ? strncmp(path, pattern, *len) == 0 : strcmp(path, pattern) == 0;
}

const struct http_route *http_route_match(const struct http_route *routes, size_t n,
                                          const char *path) {
  const struct http_route *best = NULL;
  size_t best_len = 0, len;
  for (size_t i = 0; i < n; i++)
    if (path_matches(routes[i].path, path, &len) && (best == NULL || len > best_len)) {
      best = &routes[i];
      best_len = len;
    }
  return best;
}

int http_listener_errors(struct http_listener *l, const char *path, http_error_fn fn,
                         struct sbx_error *err) {
  if (l->n_error_shapes >= HTTP_ERROR_SHAPES_MAX)
    return sbx_error_set(err, SBX_INTERNAL, 0, "http errors of %s: more than %d paths", path,
                         HTTP_ERROR_SHAPES_MAX);
  if (path[0] != '/' || strlen(path) >= HTTP_ROUTE_PATH_MAX)
    return sbx_error_set(err, SBX_INTERNAL, 0, "http errors of %s: not a path of at most %d bytes",
                         path, HTTP_ROUTE_PATH_MAX - 1);
  struct http_error_shape *e = &l->error_shapes[l->n_error_shapes++];
  snprintf(e->path, sizeof(e->path), "%s", path);
  e->fn = fn;
  return 0;
}

/* How the refusals on path are written: the longest match's function, or
 * NULL for text. */
static http_error_fn error_shape(const struct http_listener *l, const char *path) {
  http_error_fn fn = NULL;
  size_t best_len = 0, len;
  for (size_t i = 0; i < l->n_error_shapes; i++)
    if (path_matches(l->error_shapes[i].path, path, &len) && (fn == NULL || len > best_len)) {
      fn = l->error_shapes[i].fn;
      best_len = len;
    }
  return fn;
}

const char *http_request_header(const struct http_request *req, const char *name) {
  return req->conn != NULL ? MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name) : NULL;
}

bool http_request_loopback(const struct http_request *req) {
  const union MHD_ConnectionInfo *info =
      req->conn != NULL ? MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS)
                        : NULL;
  const struct sockaddr *sa = info != NULL ? info->client_addr : NULL;
  if (sa == NULL)
    return false;
  if (sa->sa_family == AF_INET)
    return ((const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr)[0] == 127;
  if (sa->sa_family != AF_INET6)
    return false;
  const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
}

size_t http_request_client_identities(const struct http_request *req,
                                      char (*ids)[HTTP_TLS_IDENTITY_MAX + 1], size_t max) {
  return req->conn != NULL ? http_tls_client_identities(req->conn, ids, max) : 0;
}

int http_response_header(struct http_response *resp, const char *name, const char *value) {
  if (resp->n_headers >= HTTP_RESPONSE_HEADERS_MAX || strlen(value) >= HTTP_HEADER_VALUE_MAX ||
      strpbrk(value, "\r\n") != NULL)
    return -1;
  struct http_header *h = &resp->headers[resp->n_headers++];
  h->name = name;
  snprintf(h->value, sizeof(h->value), "%s", value);
  return 0;
}

void http_response_text(struct http_response *resp, unsigned status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *body = NULL;
  int n = vasprintf(&body, fmt, ap);
  va_end(ap);
  free(resp->body);
  resp->status = status;
  resp->content_type = NULL;
  resp->body = n >= 0 ? body : NULL;
  resp->len = n >= 0 ? (size_t)n : 0;
}

static unsigned method_bit(const char *method) {
  static const struct {
    const char *name;
    unsigned bit;
  } methods[] = {{MHD_HTTP_METHOD_GET, HTTP_GET},
                 {MHD_HTTP_METHOD_HEAD, HTTP_HEAD},
                 {MHD_HTTP_METHOD_POST, HTTP_POST},
                 {MHD_HTTP_METHOD_DELETE, HTTP_DELETE}};
  for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
    if (strcmp(method, methods[i].name) == 0)
      return methods[i].bit;
  return 0;
}

static void allow_header(unsigned methods, char *buf, size_t len) {
  static const char *const names[] = {"GET", "HEAD", "POST", "DELETE"};
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if ((methods & (1u << i)) != 0 && used < len)
      used += (size_t)snprintf(buf + used, len - used, "%s%s", used > 0 ? ", " : "", names[i]);
}

/* ---- the connections' request clock ---- */

static struct http_conn *conn_of(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  return info != NULL ? info->socket_context : NULL;
}

/* Starts (since > 0) or stops (0) the clock of conn's request. */
static void conn_reading(struct http_listener *l, struct MHD_Connection *conn, uint64_t since) {
  struct http_conn *c = conn_of(conn);
  if (c == NULL)
    return;
  pthread_mutex_lock(&l->conns_lock);
  c->reading_since_ms = since;
  pthread_mutex_unlock(&l->conns_lock);
}

/* MHD_OPTION_NOTIFY_CONNECTION: the list follows the connections. MHD
 * calls CLOSED before it closes the socket, so a socket on the list (under
 * the lock) is still the connection's own. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
  struct http_listener *l = cls;
  struct http_conn *c = *socket_context;
  pthread_mutex_lock(&l->conns_lock);
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    if (l->tls)
      http_tls_connection_started(conn); /* before its handshake, which runs on its thread */
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    c = calloc(1, sizeof(*c));
    if (c != NULL) { /* out of memory: only the idle clock guards it */
      c->fd = info != NULL ? info->connect_fd : -1;
      c->reading_since_ms = sbx_monotonic_ms();
      c->next = l->conns;
      if (l->conns != NULL)
        l->conns->prev = c;
      l->conns = c;
      l->n_conns++;
    }
    *socket_context = c;
    atomic_fetch_add(&l->connections_total, 1);
  } else if (c != NULL) {
    if (c->prev != NULL)
      c->prev->next = c->next;
    else
      l->conns = c->next;
    if (c->next != NULL)
      c->next->prev = c->prev;
    l->n_conns--;
    free(c);
    *socket_context = NULL;
  }
  pthread_mutex_unlock(&l->conns_lock);
}

size_t http_listener_sweep(struct http_listener *l) {
  if (l->daemon == NULL)
    return 0;
  size_t cut = 0;
  uint64_t now = sbx_monotonic_ms();
  pthread_mutex_lock(&l->conns_lock);
  for (struct http_conn *c = l->conns; c != NULL; c = c->next)
    if (c->reading_since_ms != 0 && now - c->reading_since_ms > l->request_timeout_ms &&
        c->fd >= 0) {
      shutdown(c->fd, SHUT_RDWR); /* its thread sees the end and closes it */
      c->reading_since_ms = 0;
      cut++;
    }
  pthread_mutex_unlock(&l->conns_lock);
  atomic_fetch_add(&l->cut_slow_total, cut);
  return cut;
}

size_t http_listener_connections(struct http_listener *l) {
  if (l->daemon == NULL)
    return 0;
  pthread_mutex_lock(&l->conns_lock);
  size_t n = l->n_conns;
  pthread_mutex_unlock(&l->conns_lock);
  return n;
}

/* ---- requests ---- */

/* Hands resp to MHD (which frees the body) and counts it. */
static enum MHD_Result send_response(struct MHD_Connection *conn, struct http_response *resp,
                                     struct http_counts *counts, const char *allow) {
  unsigned status = resp->status != 0 ? resp->status : 500;
  atomic_fetch_add(&counts->by_code[http_code_slot(status)], 1);
  struct MHD_Response *r;
  if (resp->stream_read != NULL) {
    free(resp->body);
    resp->body = NULL;
    /* MHD calls stream_done when it destroys the response, from here on. */
    r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, HTTP_STREAM_BLOCK_BYTES,
                                          resp->stream_read, resp->stream_arg, resp->stream_done);
    if (r == NULL) {
      resp->stream_done(resp->stream_arg);
      return MHD_NO;
    }
  } else {
    r = resp->body != NULL
            ? MHD_create_response_from_buffer(resp->len, resp->body, MHD_RESPMEM_MUST_FREE)
            : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
  }
  if (r == NULL) {
    free(resp->body);
    return MHD_NO; /* MHD closes the connection */
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                          resp->content_type != NULL ? resp->content_type
                                                     : "text/plain; charset=utf-8");
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  if (allow != NULL)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
  for (size_t i = 0; i < resp->n_headers; i++)
    MHD_add_response_header(r, resp->headers[i].name, resp->headers[i].value);
  enum MHD_Result rv = MHD_queue_response(conn, status, r);
  MHD_destroy_response(r);
  return rv;
}

static const char *header(struct MHD_Connection *conn, const char *name) {
  return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, name);
}

/* A refusal of the listener's, in the shape of the path's front (text
 * when shape is NULL); always false, for admit's returns. */
static bool refuse(struct http_response *resp, http_error_fn shape, unsigned status,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static bool refuse(struct http_response *resp, http_error_fn shape, unsigned status,
                   const char *fmt, ...) {
  char message[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof(message), fmt, ap);
  va_end(ap);
  if (shape != NULL)
    shape(resp, status, message);
  else
    http_response_text(resp, status, "%s\n", message);
  return false;
}

/* The request's header fields that decide how it is framed and whom it is
 * for, counted: a field sent twice may be read one way here and another
 * way by a proxy in front (request smuggling), so each must come once. */
struct request_heads {
  unsigned n_host, n_length, n_transfer, n_sec_fetch;
  const char *host, *transfer;
};

static enum MHD_Result count_head(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value) {
  (void)kind;
  struct request_heads *h = cls;
  if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0) {
    h->host = h->n_host++ == 0 ? value : h->host;
  } else if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0) {
    h->n_length++;
  } else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
    h->transfer = h->n_transfer++ == 0 ? value : h->transfer;
  } else if (strncasecmp(key, "Sec-Fetch-", 10) == 0) {
    h->n_sec_fetch++;
  }
  return MHD_YES;
}

/* RFC 9112, 6.3: a length sent twice, or with a transfer coding, leaves
 * the body's end to the reader's choice: 400, and the connection closes
 * (MHD reads no body after an early answer). A coding other than chunked
 * is not one MHD decodes: 501. */
static bool framing_ok(const struct request_heads *h, http_error_fn shape,
                       struct http_response *resp) {
  if (h->n_length > 1)
    return refuse(resp, shape, 400,
                  "more than one Content-Length header: the body's length is ambiguous "
                  "(RFC 9112, 6.3)");
  if (h->n_transfer > 0 && h->n_length > 0)
    return refuse(resp, shape, 400,
                  "both Transfer-Encoding and Content-Length: the body's length is ambiguous "
                  "(RFC 9112, 6.3)");
  if (h->n_transfer > 1 || (h->n_transfer == 1 && strcasecmp(h->transfer, "chunked") != 0))
    return refuse(resp, shape, 501, "Transfer-Encoding: only one coding, chunked, is implemented");
  return true;
}

/* RFC 9112, 3.2: an HTTP/1.1 request has one Host, host[:port] (400
 * otherwise); and it must name this server (421: DNS rebinding). An
 * HTTP/1.0 request may have none (no browser sends one so). */
static bool host_ok(const struct http_listener *l, const struct request_heads *h,
                    const char *version, http_error_fn shape, struct http_response *resp) {
  if (h->n_host == 0 && strcmp(version, MHD_HTTP_VERSION_1_0) == 0)
    return true;
  if (h->n_host == 0)
    return refuse(resp, shape, 400, "an HTTP/1.1 request needs a Host header (RFC 9112, 3.2)");
  if (h->n_host > 1)
    return refuse(resp, shape, 400, "more than one Host header (RFC 9112, 3.2)");
  char name[HTTP_HOST_NAME_MAX];
  if (!http_host_parse(h->host, name, sizeof(name)))
    return refuse(resp, shape, 400,
                  "the Host header is not a host name or address with an optional port "
                  "(RFC 9112, 3.2)");
  if (!http_host_allowed(&l->hosts, name))
    return refuse(resp, shape, 421,
                  "this server does not answer to the name \"%s\" (Host): only to its own names "
                  "and addresses and those of --http-allowed-hosts (a web page whose name was "
                  "pointed at this machine is refused: DNS rebinding)",
                  name);
  return true;
}

/* The media type of a Content-Type value is type "/" subtype up to ';' or
 * white space, case-insensitive (RFC 9110, 8.3.1). */
static bool media_type_is(const char *value, const char *type) {
  size_t n = strlen(type);
  value += strspn(value, " \t");
  return strncasecmp(value, type, n) == 0 &&
         (value[n] == '\0' || value[n] == ';' || value[n] == ' ' || value[n] == '\t');
}

/* A POST body is JSON, labelled so: a browser's form can send only
 * text/plain, urlencoded or multipart, so it cannot reach a route without
 * a preflight that we never answer. text/plain only where the route takes
 * it (HTTP_TEXT_PLAIN_JSON), from a client that is no browser. */
static bool body_type_ok(const struct http_route *route, struct MHD_Connection *conn,
                         const struct request_heads *h, http_error_fn shape,
                         struct http_response *resp) {
  const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
  if (ct != NULL && media_type_is(ct, "application/json"))
    return true;
  bool plain = ct != NULL && media_type_is(ct, "text/plain");
  if (plain && (route->methods & HTTP_TEXT_PLAIN_JSON) != 0 && h->n_sec_fetch == 0)
    return true;
  if (plain && (route->methods & HTTP_TEXT_PLAIN_JSON) != 0)
    return refuse(resp, shape, 415,
                  "requests must be of type application/json (text/plain is taken only from "
                  "clients that are not browsers, and this request has Sec-Fetch-* headers)");
  return refuse(resp, shape, 415, "requests must be of type application/json");
}

/* Whether the request announces a body. */
static bool has_body(struct MHD_Connection *conn) {
  const char *cl = header(conn, MHD_HTTP_HEADER_CONTENT_LENGTH);
  return header(conn, MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL ||
         (cl != NULL && strspn(cl, "0") != strlen(cl));
}

/* A body for a route that takes one: refused (413) when its announced
 * length is over the cap; a chunked one is checked as it comes. */
static bool body_fits(const struct http_listener *l, struct MHD_Connection *conn,
                      struct http_exchange *x, http_error_fn shape, struct http_response *resp) {
  const char *cl = header(conn, MHD_HTTP_HEADER_CONTENT_LENGTH);
  x->chunked = cl == NULL;
  if (cl == NULL)
    return true;
  errno = 0;
  char *end;
  unsigned long long n = strtoull(cl, &end, 10);
  if (errno == 0 && *end == '\0' && n <= l->max_body_bytes)
    return true;
  return refuse(resp, shape, 413,
                "the request body is %s bytes, more than the %zu this server takes "
                "(--http-max-body-bytes)",
                cl, l->max_body_bytes);
}

/* Why a request for url to route (NULL: no route matched) cannot be
 * served, into resp (and its Allow header into allow), in the shape of the
 * path's front: ambiguous framing (400, 501), a missing or bad Host (400)
 * or one not ours (421), no route (404), no verified client certificate
 * where one is required (403), a method the route does not take (405), a
 * cross-origin POST (403), a POST body not labelled JSON (415), a body
 * where none is taken or one over the cap (413). False when refused. */
static bool admit(const struct http_listener *l, const struct http_route *route,
                  struct MHD_Connection *conn, const char *url, const char *method,
                  const char *version, struct http_exchange *x, struct http_response *resp,
                  char *allow, size_t allow_len) {
  http_error_fn shape = error_shape(l, url);
  struct request_heads h = {0};
  MHD_get_connection_values(conn, MHD_HEADER_KIND, count_head, &h);
  if (!framing_ok(&h, shape, resp) || !host_ok(l, &h, version, shape, resp))
    return false;
  unsigned bit = method_bit(method);
  if (route == NULL)
    return refuse(resp, shape, 404, "no such path");
  if (l->client_cert_required && (route->methods & HTTP_ANY_CLIENT) == 0 &&
      !http_tls_client_verified(conn))
    return refuse(resp, shape, 403,
                  "a client certificate from the server's --tls-ca, valid now, is required");
  if ((route->methods & bit) == 0) {
    allow_header(route->methods, allow, allow_len);
    return refuse(resp, shape, 405, "method not allowed; allowed: %s", allow);
  }
  x->takes_body = bit == HTTP_POST;
  if (x->takes_body && header(conn, "Origin") != NULL)
    return refuse(resp, shape, 403,
                  "a request with an Origin header (from a web page) is refused: this server "
                  "runs code and answers no cross-origin request");
  if (x->takes_body && !body_type_ok(route, conn, &h, shape, resp))
    return false;
  if (!x->takes_body && has_body(conn))
    return refuse(resp, shape, 413, "no request body is accepted");
  return !x->takes_body || body_fits(l, conn, x, shape, resp);
}

/* The first call, once the request line and headers are in: a request that
 * cannot be served is refused here (MHD then reads no body and closes the
 * connection); any other gets its exchange and is served on a later call. */
static enum MHD_Result begin_request(struct http_listener *l, struct MHD_Connection *conn,
                                     const char *url, const char *method, const char *version,
                                     void **con_cls) {
  struct http_exchange *x = calloc(1, sizeof(*x));
  if (x == NULL)
    return MHD_NO;
  *con_cls = x;
  struct http_route *route = (struct http_route *)http_route_match(l->routes, l->n_routes, url);
  struct http_response resp = {0};
  char allow[40] = "";
  if (admit(l, route, conn, url, method, version, x, &resp, allow, sizeof(allow))) {
    x->route = route;
    return MHD_YES;
  }
  return send_response(conn, &resp, route != NULL ? &route->answers : &l->unrouted,
                       allow[0] != '\0' ? allow : NULL);
}

/* A piece of the body: kept while within the cap. A chunked body past it
 * cannot be answered any more (MHD takes no response mid-body): the
 * connection is closed, and counted. */
static enum MHD_Result take_body(struct http_listener *l, struct http_exchange *x, const char *data,
                                 size_t *size) {
  size_t n = *size;
  *size = 0;
  if (!x->takes_body) /* a body without framing headers: never handed, never taken */
    return MHD_NO;
  if (n > l->max_body_bytes - x->body.len) {
    atomic_fetch_add(&l->cut_body_total, 1);
    return MHD_NO;
  }
  /* Room for the terminating NUL too (the cap is on the body). */
  if (sbx_buf_reserve(&x->body, n + 1, l->max_body_bytes + 1) < 0 ||
      sbx_buf_append(&x->body, data, n, l->max_body_bytes) < 0)
    return MHD_NO;
  x->body.data[x->body.len] = '\0';
  return MHD_YES;
}

/* The last call, with the whole request: the handler runs with the
 * connection's clocks stopped (the client waits for us), then the idle
 * clock starts again from now, so a long run does not time the answer out. */
static enum MHD_Result serve_request(struct http_listener *l, struct MHD_Connection *conn,
                                     struct http_exchange *x, const char *url, const char *method) {
  struct http_route *route = x->route;
  size_t len = strlen(route->path);
  struct http_request req = {
      .method = method,
      .path = url,
      .rest = route->path[len - 1] == '/' ? url + len : "",
      .body = x->body.data != NULL ? (const char *)x->body.data : "",
      .body_len = x->body.len,
      .conn = conn,
  };
  struct http_response resp = {0};
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_TIMEOUT);
  unsigned timeout_s = info != NULL ? info->connection_timeout : 0;
  req.idle_timeout_s = timeout_s;
  conn_reading(l, conn, 0);
  MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
  route->fn(route->ctx, &req, &resp);
  MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, timeout_s);
  return send_response(conn, &resp, &route->answers, NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  struct http_listener *l = cls;
  struct http_exchange *x = *con_cls;
  if (x == NULL)
    return begin_request(l, conn, url, method, version, con_cls);
  if (x->route == NULL) /* refused and answered: its body is never read */
    return *upload_data_size != 0 ? MHD_NO : MHD_YES;
  if (*upload_data_size != 0)
    return take_body(l, x, upload_data, upload_data_size);
  return serve_request(l, conn, x, url, method);
}

/* MHD_OPTION_NOTIFY_COMPLETED: the request is over (answered or not); the
 * next one on a kept-alive connection is awaited from now. */
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  struct http_exchange *x = *con_cls;
  if (x != NULL) {
    sbx_buf_free(&x->body);
    free(x);
    *con_cls = NULL;
  }
  if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
    conn_reading(cls, conn, sbx_monotonic_ms());
}

/* ---- the listener ---- */

/* A listening socket bound to host:port, non-blocking; -1 with err. */
static int bind_socket(const char *url, const char *host, unsigned port, struct sbx_error *err) {
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
  struct addrinfo *ai = NULL;
  char service[8];
  snprintf(service, sizeof(service), "%u", port);
  int rc = getaddrinfo(host, service, &hints, &ai);
  if (rc != 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "http listen %s: %s", url, gai_strerror(rc));
  int fd = -1, e = 0;
  for (struct addrinfo *a = ai; a != NULL && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
                    bind(fd, a->ai_addr, a->ai_addrlen) < 0 || listen(fd, 64) < 0)) {
      e = errno;
      close(fd);
      fd = -1;
    } else if (fd < 0) {
      e = errno;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0)
    return sbx_error_set(err, SBX_INTERNAL, e, "http listen %s", url);
  return fd;
}

static unsigned bound_port(int fd) {
  struct sockaddr_storage ss = {0};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
    return 0;
  if (ss.ss_family == AF_INET)
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
  if (ss.ss_family == AF_INET6)
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  return 0;
}

/* Every limit and callback of the listener, in one place, and https://'s
 * certificate, key and CA (MHD_USE_TLS in the flags). */
static void listener_options(struct http_listener *l, const struct http_config *cfg, int fd,
                             struct MHD_OptionItem *o) {
  size_t i = 0;
  if (cfg->tls != NULL)
    i += http_tls_options(cfg->tls, o);
  o[i++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_SOCKET, fd, NULL};
  o[i++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections, NULL};
  o[i++] = (struct MHD_OptionItem){MHD_OPTION_PER_IP_CONNECTION_LIMIT, cfg->max_connections_per_ip,
                                   NULL};
  o[i++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, cfg->timeout_s, NULL};
  o[i++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                                   (intptr_t)cfg->max_request_bytes, NULL};
  o[i++] = (struct MHD_OptionItem){MHD_OPTION_LISTEN_BACKLOG_SIZE, 64, NULL};
  o[i++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_STACK_SIZE, HTTP_THREAD_STACK_BYTES, NULL};
  o[i++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, l};
  o[i++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, l};
  o[i] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

int http_listener_start(struct http_listener *l, const struct http_config *cfg,
                        struct sbx_error *err) {
  char host[SETTINGS_URL_MAX];
  unsigned port;
  if (settings_http_listen_parts(cfg->url, host, sizeof(host), &port, err) < 0)
    return -1;
  if (http_host_names_init(&l->hosts, host, cfg->allowed_hosts != NULL ? cfg->allowed_hosts : "",
                           err) < 0)
    return -1;
  int fd = bind_socket(cfg->url, host, port, err);
  if (fd < 0)
    return -1;
  l->port = bound_port(fd);
  l->max_body_bytes = cfg->max_body_bytes;
  l->request_timeout_ms = (uint64_t)cfg->request_timeout_s * 1000;
  int rc = pthread_mutex_init(&l->conns_lock, NULL);
  if (rc != 0) {
    close(fd);
    return sbx_error_set(err, SBX_INTERNAL, rc, "http listen %s", cfg->url);
  }
  struct MHD_OptionItem opts[12 + HTTP_TLS_OPTIONS_MAX];
  listener_options(l, cfg, fd, opts);
  l->tls = cfg->tls != NULL;
  l->client_cert_required = l->tls && cfg->tls->client_auth == TLS_CLIENT_AUTH_REQUIRED;
  /* A thread per connection, polled with poll(); no error log: a hostile
   * client must not be able to fill ours. */
  l->daemon =
      MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                           MHD_USE_POLL | (l->tls ? MHD_USE_TLS : 0),
                       0, NULL, NULL, on_request, l, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
  if (l->daemon == NULL) {
    int e = errno;
    close(fd);
    pthread_mutex_destroy(&l->conns_lock);
    return sbx_error_set(err, SBX_INTERNAL, e, "http listen %s: libmicrohttpd did not start",
                         cfg->url);
  }
  return 0;
}

void http_listener_stop(struct http_listener *l) {
  if (l->daemon == NULL)
    return;
  MHD_stop_daemon(l->daemon); /* joins every thread; closes the connections and the socket */
  l->daemon = NULL;
  pthread_mutex_destroy(&l->conns_lock);
}
