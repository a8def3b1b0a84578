/* streamable_http.c: the HTTP semantics of MCP's Streamable HTTP transport
 * for a stateless server that answers with JSON (never SSE): the checks
 * the transport's specification asks of the server (Origin against DNS
 * rebinding: every request that carries one is refused, as the HTTP
 * listener refuses every POST with one; MCP-Protocol-Version, the media
 * types, POST only), then one
 * message through the core. Knows no HTTP library: the listener that hosts
 * it passes the method, the headers named in mcp.h and the body. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"
#include "text.h"

#define JSON_TYPE "application/json"

/* A transport-level refusal: status and a JSON-RPC error with id null
 * (JSON-RPC 2.0: the id of a request that could not be read; the
 * transport specification's form for these). */
static void refuse(struct mcp_http_response *resp, unsigned status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void refuse(struct mcp_http_response *resp, unsigned status, const char *fmt, ...) {
  char message[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof(message), fmt, ap);
  va_end(ap);
  json_t *body = json_pack("{s:s, s:n, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", "error", "code",
                           -32000, "message", message);
  resp->body = body != NULL ? json_dumps(body, JSON_COMPACT) : NULL;
  json_decref(body);
  resp->status = resp->body != NULL ? status : 500;
  resp->content_type = resp->body != NULL ? JSON_TYPE : NULL;
  resp->len = resp->body != NULL ? strlen(resp->body) : 0;
}

/* The media type of a header value (before ';', trimmed) equals want,
 * ignoring case. */
static bool media_type_is(const char *value, size_t len, const char *want) {
  while (len > 0 && isspace((unsigned char)*value)) {
    value++;
    len--;
  }
  const char *semi = memchr(value, ';', len);
  if (semi != NULL)
    len = (size_t)(semi - value);
  while (len > 0 && isspace((unsigned char)value[len - 1]))
    len--;
  return len == strlen(want) && strncasecmp(value, want, len) == 0;
}

/* Whether an Accept header admits application/json. */
static bool accepts_json(const char *accept) {
  for (const char *p = accept;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
    if (media_type_is(p, len, JSON_TYPE) || media_type_is(p, len, "application/*") ||
        media_type_is(p, len, "*/*"))
      return true;
    if (comma == NULL)
      return false;
    p = comma + 1;
  }
}

/* Every check before the body is read as a message; false with resp
 * filled when one fails. */
static bool request_acceptable(const struct mcp_http_settings *hs,
                               const struct mcp_http_request *req, struct mcp_http_response *resp) {
  char q[80];
  if (req->origin != NULL) {
    mcp_quote(req->origin, strlen(req->origin), q, sizeof(q));
    refuse(resp, 403,
           "Forbidden: a request with an Origin header (%s: a browser's) is refused: this "
           "endpoint serves MCP clients, not web pages (DNS rebinding)",
           q);
    return false;
  }
  if (strcmp(req->method, "POST") != 0) {
    refuse(resp, 405,
           "Method Not Allowed: this MCP endpoint takes POST only (no SSE stream, no sessions)");
    resp->allow = "POST";
    return false;
  }
  if (req->protocol_version != NULL && !mcp_version_supported(req->protocol_version)) {
    mcp_quote(req->protocol_version, strlen(req->protocol_version), q, sizeof(q));
    refuse(resp, 400,
           "Bad Request: unsupported MCP-Protocol-Version %s (supported: 2025-11-25, 2025-06-18, "
           "2025-03-26, 2024-11-05)",
           q);
    return false;
  }
  if (req->content_type == NULL ||
      !media_type_is(req->content_type, strlen(req->content_type), JSON_TYPE)) {
    refuse(resp, 415, "Unsupported Media Type: the body must be application/json");
    return false;
  }
  if (req->accept != NULL && !accepts_json(req->accept)) {
    refuse(resp, 406, "Not Acceptable: this server answers application/json");
    return false;
  }
  if (req->body_len > hs->max_body_bytes) {
    refuse(resp, 413, "Content Too Large: the body is over %zu bytes", hs->max_body_bytes);
    return false;
  }
  return true;
}

void mcp_http_handle(mcp_server *s, const struct mcp_http_settings *hs,
                     const struct mcp_http_request *req, struct mcp_http_response *resp) {
  *resp = (struct mcp_http_response){0};
  if (!request_acceptable(hs, req, resp))
    return;
  enum mcp_outcome outcome;
  char *text = NULL;
  if (mcp_handle_message(s, req->body != NULL ? req->body : "", req->body_len, &text, &outcome) <
      0) {
    resp->status = 500;
    return;
  }
  if (outcome == MCP_NO_ANSWER) {
    resp->status = 202;
    return;
  }
  resp->status = outcome == MCP_ANSWERED ? 200 : 400;
  resp->content_type = JSON_TYPE;
  resp->body = text;
  resp->len = strlen(text);
}
