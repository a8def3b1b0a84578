/* ops.c: see ops.h. The routes of operations and the listener's life:
 * started after the RPC side, stopped in the drain. */
#include "ops.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log.h"
#include "metrics.h"
#include "server.h"
#include "tenants.h"

/* With --metrics-auth: whether the request carries "Authorization: Bearer
 * KEY" with the key of a tenant in the file now. Anything else (no header,
 * another scheme, a key too long, a key nobody has, no tenants file) is
 * no: the check fails closed, and never logs the key. */
static bool metrics_caller_ok(struct server *srv, const struct http_request *req) {
  const char *auth = http_request_header(req, "Authorization");
  if (auth == NULL || strncasecmp(auth, "Bearer ", 7) != 0)
    return false;
  const char *key = auth + 7;
  while (*key == ' ')
    key++;
  size_t len = strlen(key);
  while (len > 0 && key[len - 1] == ' ')
    len--;
  if (len == 0 || len > TENANT_KEY_MAX)
    return false;
  return tenants_by_key(&srv->tenants, key, len) != NULL;
}

static void handle_metrics(void *ctx, const struct http_request *req, struct http_response *resp) {
  struct ops *ops = ctx;
  if (ops->srv->settings.metrics_auth && !metrics_caller_ok(ops->srv, req)) {
    http_response_text(resp, 401, "/metrics wants Authorization: Bearer KEY, a tenant's API key\n");
    http_response_header(resp, "WWW-Authenticate", "Bearer realm=\"sandboxd metrics\"");
    return;
  }
  size_t len = 0;
  char *text = ops_metrics_text(ops->srv, &ops->http, &len);
  if (text == NULL) {
    http_response_text(resp, 500, "out of memory\n");
    return;
  }
  resp->status = 200;
  resp->content_type = METRICS_CONTENT_TYPE;
  resp->body = text;
  resp->len = len;
}

int ops_add_routes(struct ops *ops, struct server *srv, struct sbx_error *err) {
  ops->srv = srv;
  const unsigned get = HTTP_GET | HTTP_HEAD;
  /* The probes answer any client (a kubelet shows no certificate); the
   * metrics only a verified one when client certificates are required. */
  const unsigned probe = get | HTTP_ANY_CLIENT;
  if (http_listener_route(&ops->http, "/metrics", get, handle_metrics, ops, err) < 0 ||
      http_listener_route(&ops->http, "/healthz", probe, ops_handle_healthz, srv, err) < 0 ||
      http_listener_route(&ops->http, "/readyz", probe, ops_handle_readyz, srv, err) < 0)
    return -1;
  return 0;
}

int ops_start_listener(struct ops *ops, struct sbx_error *err) {
  const struct server_settings *s = &ops->srv->settings;
  if (s->http_listen[0] == '\0')
    return 0;
  struct http_config cfg = {
      .url = s->http_listen,
      .max_connections = (unsigned)s->http_max_connections,
      .max_connections_per_ip = (unsigned)s->http_max_connections_per_ip,
      .timeout_s = (unsigned)s->http_timeout_s,
      .request_timeout_s = (unsigned)s->http_request_timeout_s,
      .max_request_bytes = (size_t)s->http_max_request_bytes,
      .max_body_bytes = (size_t)s->http_max_body_bytes,
      .allowed_hosts = s->http_allowed_hosts,
      .tls = settings_http_listen_is_tls(s->http_listen) ? &ops->srv->tls : NULL,
  };
  if (http_listener_start(&ops->http, &cfg, err) < 0)
    return -1;
  log_line("http_listening",
           "url=%s port=%u tls=%s routes=%zu max_connections=%u max_connections_per_ip=%u "
           "timeout_s=%u request_timeout_s=%u max_request_bytes=%zu max_body_bytes=%zu",
           s->http_listen, ops->http.port,
           cfg.tls == NULL                  ? "off"
           : ops->http.client_cert_required ? "on client_certificates=required_but_probes"
                                            : "on",
           ops->http.n_routes, cfg.max_connections, cfg.max_connections_per_ip, cfg.timeout_s,
           cfg.request_timeout_s, cfg.max_request_bytes, cfg.max_body_bytes);
  return 0;
}

void ops_tick(struct ops *ops) {
  size_t cut = http_listener_sweep(&ops->http);
  if (cut > 0)
    log_line("http_slow_requests_cut", "count=%zu request_timeout_s=%lld", cut,
             (long long)ops->srv->settings.http_request_timeout_s);
}

void ops_stop(struct ops *ops) {
  http_listener_stop(&ops->http);
}
