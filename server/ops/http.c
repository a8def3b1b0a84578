/* http.c: see http.h. Everything HTTP (parsing, limits, timeouts,
 * keep-alive, HEAD without a body) is libmicrohttpd's; this file binds the
 * socket, sets the limits in one place (listener_options, with the TLS
 * ones from http_tls.c for https://) and routes each request. Never reads a request
 * body and never blocks MHD's thread. */
#include "http.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_tls.h"
#include "settings.h"

int http_listener_route(struct http_listener *l, const char *path, unsigned methods,
                        http_handler_fn fn, void *ctx, struct sbx_error *err) {
  if (l->n_routes >= HTTP_ROUTES_MAX)
    return sbx_error_set(err, SBX_INTERNAL, 0, "http route %s: more than %d routes", path,
                         HTTP_ROUTES_MAX);
  if (path[0] != '/' || strlen(path) >= HTTP_ROUTE_PATH_MAX)
    return sbx_error_set(err, SBX_INTERNAL, 0, "http route %s: not a path of at most %d bytes",
                         path, HTTP_ROUTE_PATH_MAX - 1);
  for (size_t i = 0; i < l->n_routes; i++)
    if (strcmp(l->routes[i].path, path) == 0)
      return sbx_error_set(err, SBX_INTERNAL, 0, "http route %s: already routed", path);
  struct http_route *r = &l->routes[l->n_routes++];
  snprintf(r->path, sizeof(r->path), "%s", path);
  r->methods = methods;
  r->fn = fn;
  r->ctx = ctx;
  return 0;
}

const struct http_route *http_route_match(const struct http_route *routes, size_t n,
                                          const char *path) {
  const struct http_route *best = NULL;
  size_t best_len = 0;
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(routes[i].path);
    bool prefix = len > 0 && routes[i].path[len - 1] == '/';
    bool hit = prefix ? strncmp(path, routes[i].path, len) == 0 : strcmp(path, routes[i].path) == 0;
    if (hit && (best == NULL || len > best_len)) {
      best = &routes[i];
      best_len = len;
    }
  }
  return best;
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
  if (strcmp(method, MHD_HTTP_METHOD_GET) == 0)
    return HTTP_GET;
  if (strcmp(method, MHD_HTTP_METHOD_HEAD) == 0)
    return HTTP_HEAD;
  return 0;
}

static void allow_header(unsigned methods, char *buf, size_t len) {
  snprintf(buf, len, "%s%s%s", methods & HTTP_GET ? "GET" : "",
           (methods & HTTP_GET) && (methods & HTTP_HEAD) ? ", " : "",
           methods & HTTP_HEAD ? "HEAD" : "");
}

/* Whether the request announces a body (none is accepted). */
static bool has_body(struct MHD_Connection *conn) {
  const char *cl =
      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
  const char *te =
      MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
  return te != NULL || (cl != NULL && strspn(cl, "0") != strlen(cl));
}

/* Hands resp to MHD (which frees the body). */
static enum MHD_Result send_response(struct MHD_Connection *conn, struct http_response *resp,
                                     const char *allow) {
  struct MHD_Response *r =
      resp->body != NULL
          ? MHD_create_response_from_buffer(resp->len, resp->body, MHD_RESPMEM_MUST_FREE)
          : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
  if (r == NULL) {
    free(resp->body);
    return MHD_NO; /* MHD closes the connection */
  }
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                          resp->content_type != NULL ? resp->content_type
                                                     : "text/plain; charset=utf-8");
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
  if (allow != NULL)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
  enum MHD_Result rv = MHD_queue_response(conn, resp->status != 0 ? resp->status : 500, r);
  MHD_destroy_response(r);
  return rv;
}

/* Why a request cannot be served, into resp (and its Allow header into
 * allow): no route (404), a method the route does not take (405), a body
 * (413). NULL route when refused. */
static const struct http_route *route_or_refuse(const struct http_listener *l,
                                                struct MHD_Connection *conn, const char *url,
                                                const char *method, struct http_response *resp,
                                                char *allow, size_t allow_len) {
  const struct http_route *route = http_route_match(l->routes, l->n_routes, url);
  if (route == NULL) {
    http_response_text(resp, MHD_HTTP_NOT_FOUND, "no such path\n");
    return NULL;
  }
  if (l->client_cert_required && (route->methods & HTTP_ANY_CLIENT) == 0 &&
      !http_tls_client_verified(conn)) {
    http_response_text(resp, MHD_HTTP_FORBIDDEN,
                       "a client certificate from the server's --tls-ca, valid now, is required\n");
    return NULL;
  }
  if ((route->methods & method_bit(method)) == 0) {
    allow_header(route->methods, allow, allow_len);
    http_response_text(resp, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed; allowed: %s\n",
                       allow);
    return NULL;
  }
  if (has_body(conn)) {
    http_response_text(resp, MHD_HTTP_CONTENT_TOO_LARGE, "no request body is accepted\n");
    return NULL;
  }
  return route;
}

/* MHD's access handler. The first call comes once the request line and
 * headers are in: a request that cannot be served is refused there (MHD
 * then reads no body and closes the connection). Any other is answered on
 * the second call, which MHD makes at once, so the connection may be kept
 * alive (a response queued on the first call always closes it). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  const struct http_listener *l = cls;
  struct http_response resp = {0};
  char allow[32] = "";
  const struct http_route *route =
      route_or_refuse(l, conn, url, method, &resp, allow, sizeof(allow));
  if (route != NULL && *con_cls == NULL) {
    *con_cls = (void *)route; /* served on the next call */
    return MHD_YES;
  }
  /* Body bytes without Content-Length or Transfer-Encoding cannot be
   * framed (RFC 9112, 6.3), so MHD never hands any: were it to, the
   * connection is closed. */
  if (*upload_data_size != 0) {
    free(resp.body);
    return MHD_NO;
  }
  if (route != NULL) {
    size_t len = strlen(route->path);
    struct http_request req = {method, url, route->path[len - 1] == '/' ? url + len : ""};
    route->fn(route->ctx, &req, &resp);
  }
  return send_response(conn, &resp, allow[0] != '\0' ? allow : NULL);
}

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

/* Every limit of the listener, in one place, and https://'s certificate,
 * key and CA (MHD_USE_TLS in the flags). */
static void listener_options(const struct http_config *cfg, int fd, struct MHD_OptionItem *o) {
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
  o[i] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

int http_listener_start(struct http_listener *l, const struct http_config *cfg,
                        struct sbx_error *err) {
  char host[SETTINGS_URL_MAX];
  unsigned port;
  if (settings_http_listen_parts(cfg->url, host, sizeof(host), &port, err) < 0)
    return -1;
  int fd = bind_socket(cfg->url, host, port, err);
  if (fd < 0)
    return -1;
  l->port = bound_port(fd);
  struct MHD_OptionItem opts[8 + HTTP_TLS_OPTIONS_MAX];
  listener_options(cfg, fd, opts);
  l->tls = cfg->tls != NULL;
  l->client_cert_required = l->tls && cfg->tls->client_auth == TLS_CLIENT_AUTH_REQUIRED;
  /* MHD's own thread, with epoll (MHD_USE_AUTO); no error log: a hostile
   * client must not be able to fill ours. */
  l->daemon = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | (l->tls ? MHD_USE_TLS : 0), 0, NULL,
                               NULL, on_request, l, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
  if (l->daemon == NULL) {
    int e = errno;
    close(fd);
    return sbx_error_set(err, SBX_INTERNAL, e, "http listen %s: libmicrohttpd did not start",
                         cfg->url);
  }
  return 0;
}

void http_listener_stop(struct http_listener *l) {
  if (l->daemon == NULL)
    return;
  MHD_stop_daemon(l->daemon); /* joins its thread; closes the connections and the socket */
  l->daemon = NULL;
}
