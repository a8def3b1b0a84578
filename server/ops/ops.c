/* ops.c: see ops.h. The routes of operations and the listener's life:
 * started after the RPC side, stopped in the drain. */
#include "ops.h"

#include <stdlib.h>

#include "log.h"
#include "metrics.h"
#include "server.h"

static void handle_metrics(void *ctx, const struct http_request *req, struct http_response *resp) {
  struct ops *ops = ctx;
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
