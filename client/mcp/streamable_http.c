/* streamable_http.c: the HTTP semantics of MCP's Streamable HTTP transport
 * for a server that keeps no state between requests: the checks the
 * transport's specification asks of the server (Origin against DNS
 * rebinding: every request that carries one is refused, as the HTTP
 * listener refuses every POST with one; MCP-Protocol-Version,
 * Mcp-Session-Id's form, the media types, POST only), then one message
 * through the core. Answers are JSON, except a run_code call with a
 * progress token from a client that takes text/event-stream, which is
 * answered as a stream (http_stream.c); a notifications/cancelled reaches
 * only such calls of the same caller and Mcp-Session-Id. The session id is
 * a random token made at initialize and never remembered: it only scopes
 * cancellations. Knows no HTTP library: the listener that hosts it passes
 * the method, the headers named in mcp.h and the body. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"
#include "text.h"

#define JSON_TYPE "application/json"
#define SSE_TYPE "text/event-stream"

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

/* Whether an Accept header admits type ("type/subtype"; the ranges
 * "type/" "*" and "*" "/" "*" do too). */
static bool accepts(const char *accept, const char *type) {
  char any[64];
  snprintf(any, sizeof(any), "%.*s/*", (int)strcspn(type, "/"), type);
  for (const char *p = accept;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
    if (media_type_is(p, len, type) || media_type_is(p, len, any) || media_type_is(p, len, "*/*"))
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
           "Method Not Allowed: this MCP endpoint takes POST only (no server stream; a session "
           "needs no ending)");
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
  if (req->accept != NULL && !accepts(req->accept, JSON_TYPE)) {
    refuse(resp, 406, "Not Acceptable: this server answers application/json");
    return false;
  }
  if (req->session_id != NULL &&
      (req->session_id[0] == '\0' || strlen(req->session_id) > MCP_HTTP_SESSION_ID_MAX ||
       !text_graphic_ascii(req->session_id))) {
    refuse(resp, 400,
           "Bad Request: the Mcp-Session-Id header must be 1 to %d visible ASCII characters "
           "(the one initialize's answer gave)",
           MCP_HTTP_SESSION_ID_MAX);
    return false;
  }
  if (req->body_len > hs->max_body_bytes) {
    refuse(resp, 413, "Content Too Large: the body is over %zu bytes", hs->max_body_bytes);
    return false;
  }
  return true;
}

/* What a message is, as far as the HTTP side cares: whether it changes
 * how the POST is answered. The body is parsed here only when it names
 * one of these (a plain tools/call costs three memmem). */
enum http_kind { PLAIN, INITIALIZE, STREAMED_CALL, CANCELLATION };

static bool is_string(const json_t *v, const char *want) {
  return json_is_string(v) && strcmp(json_string_value(v), want) == 0;
}

static enum http_kind kind_of(const char *body, size_t len, bool sse) {
  static const char init[] = "initialize", token[] = "progressToken",
                    cancel[] = "notifications/cancelled";
  if (memmem(body, len, init, sizeof(init) - 1) == NULL &&
      (!sse || memmem(body, len, token, sizeof(token) - 1) == NULL) &&
      memmem(body, len, cancel, sizeof(cancel) - 1) == NULL)
    return PLAIN;
  json_t *msg = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
  const json_t *method = json_object_get(msg, "method"), *id = json_object_get(msg, "id");
  const json_t *params = json_object_get(msg, "params");
  const json_t *progress = json_object_get(json_object_get(params, "_meta"), "progressToken");
  enum http_kind kind = PLAIN;
  if (is_string(method, "initialize") && id != NULL)
    kind = INITIALIZE;
  else if (is_string(method, cancel) && id == NULL)
    kind = CANCELLATION;
  else if (sse && is_string(method, "tools/call") && (json_is_string(id) || json_is_integer(id)) &&
           is_string(json_object_get(params, "name"), "run_code") &&
           (json_is_string(progress) || json_is_integer(progress)))
    kind = STREAMED_CALL;
  json_decref(msg);
  return kind;
}

/* The scope of the request's cancellations into buf: its caller and
 * session id; false (no scope: nothing cancels its calls) without a
 * session id. */
static bool scope_of(const struct mcp_http_request *req, char *buf, size_t len) {
  if (req->session_id == NULL)
    return false;
  int n = snprintf(buf, len, "%s\n%s", req->caller != NULL ? req->caller : "", req->session_id);
  return n > 0 && (size_t)n < len;
}

void mcp_http_handle(mcp_server *s, const struct mcp_http_settings *hs,
                     const struct mcp_http_request *req, struct mcp_http_response *resp) {
  *resp = (struct mcp_http_response){0};
  if (!request_acceptable(hs, req, resp))
    return;
  const char *body = req->body != NULL ? req->body : "";
  char scope[MCP_HTTP_SCOPE_MAX];
  bool scoped = scope_of(req, scope, sizeof(scope));
  enum http_kind kind =
      kind_of(body, req->body_len, req->accept != NULL && accepts(req->accept, SSE_TYPE));
  if (kind == CANCELLATION) {
    /* Taken here (its CancelRun sent before the 202), or ignored. */
    mcp_take_cancel_scoped(s, scoped ? scope : NULL, body, req->body_len);
    resp->status = 202;
    return;
  }
  if (kind == STREAMED_CALL) {
    resp->stream = mcp_http_stream_new(s, scoped ? scope : NULL, body, req->body_len);
    resp->status = resp->stream != NULL ? 200 : 500;
    resp->content_type = resp->stream != NULL ? SSE_TYPE : NULL;
    return;
  }
  enum mcp_outcome outcome;
  char *text = NULL;
  if (mcp_handle_message(s, body, req->body_len, &text, &outcome) < 0) {
    resp->status = 500;
    return;
  }
  if (outcome == MCP_NO_ANSWER) {
    resp->status = 202;
    return;
  }
  char err[128];
  if (kind == INITIALIZE && outcome == MCP_ANSWERED &&
      mcp_random_uuid(resp->session_id, err, sizeof(err)) < 0)
    resp->session_id[0] = '\0'; /* served without one: nothing to cancel with */
  resp->status = outcome == MCP_ANSWERED ? 200 : 400;
  resp->content_type = JSON_TYPE;
  resp->body = text;
  resp->len = strlen(text);
}
