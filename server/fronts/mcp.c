/* mcp.c: the Model Context Protocol at /mcp (Streamable HTTP, stateless,
 * JSON answers). The protocol is client/mcp/ (mcp.h), the same core that
 * sandbox-mcp serves over stdio; this file only hands it the request's
 * method, headers and body and turns its answer into the listener's
 * response. Every tool is one call of the fronts' C client on the inproc
 * listener, so a run from here meets the same validation, queue, limits and
 * sessions as any other, under the HTTP caller's identity (caller.h: with
 * --tenants a request without valid credentials is 401 before its message
 * is read). It never runs anything itself. */
#include <stdlib.h>
#include <string.h>

#include "caller.h"
#include "http_json.h"
#include "mcp.h"
#include "mcp_front.h"

/* A refusal of the transport (the listener's own: 404, 405, 413, 415,
 * 421, ...; or a drain): a JSON-RPC error with id null, as the transport's
 * specification writes them. */
static void mcp_error(struct http_response *resp, unsigned status, const char *message) {
  char *text = mcp_error_text(-32000, message);
  free(resp->body);
  resp->status = text != NULL ? status : 500;
  resp->content_type = "application/json";
  resp->body = text;
  resp->len = text != NULL ? strlen(text) : 0;
}

static void handle_mcp(void *ctx, const struct http_request *req, struct http_response *resp) {
  struct fronts *f = ctx;
  if (fronts_draining(f)) {
    mcp_error(resp, 503, "the server is shutting down; nothing ran");
    return;
  }
  /* Before the message is read, whatever its method: the authorization
   * specification's 401 with WWW-Authenticate for a request without valid
   * credentials (caller.h). */
  struct front_caller fc;
  struct front_refusal why;
  if (front_caller_establish(f, req, &fc, &why) < 0) {
    mcp_error(resp, why.status, why.message);
    if (front_refusal_header(resp, &why) < 0)
      mcp_error(resp, 500, "the WWW-Authenticate header did not fit");
    return;
  }
  struct mcp_http_settings hs = {
      .max_body_bytes = f->http_max_body_bytes,
  };
  struct mcp_http_request in = {
      .method = req->method,
      .origin = http_request_header(req, "Origin"),
      .protocol_version = http_request_header(req, "MCP-Protocol-Version"),
      .content_type = http_request_header(req, "Content-Type"),
      .accept = http_request_header(req, "Accept"),
      .body = req->body,
      .body_len = req->body_len,
  };
  struct mcp_http_response out;
  front_caller_enter(&fc); /* the core's tool calls run on this thread */
  mcp_http_handle(f->mcp, &hs, &in, &out);
  front_caller_leave();
  resp->status = out.status;
  resp->content_type = out.content_type;
  resp->body = out.body;
  resp->len = out.len;
  if (out.allow != NULL && http_response_header(resp, "Allow", out.allow) < 0)
    resp->status = 500;
}

int mcp_front_add_routes(struct fronts *f, struct http_listener *http, struct sbx_error *err) {
  struct mcp_settings caps;
  char why[256];
  mcp_settings_default(&caps);
  if ((f->mcp = mcp_server_new(f->client, &caps, why, sizeof(why))) == NULL)
    return sbx_error_set(err, SBX_INTERNAL, 0, "http-fronts: mcp: %s", why);
  /* GET and DELETE reach the handler, which answers them as the transport
   * says a server without streams or sessions does (405, Allow: POST),
   * after the Origin check that applies to every request. */
  if (http_listener_errors(http, "/mcp", mcp_error, err) < 0)
    return -1;
  return http_listener_route(http, "/mcp", HTTP_POST | HTTP_GET | HTTP_DELETE, handle_mcp, f, err);
}

void mcp_front_stop(struct fronts *f) {
  mcp_server_free(f->mcp);
  f->mcp = NULL;
}
