/* mcp.c: the Model Context Protocol at /mcp (Streamable HTTP, no state
 * between requests). The protocol is client/mcp/ (mcp.h), the same core
 * that sandbox-mcp serves over stdio; this file only hands it the
 * request's method, headers and body and turns its answer into the
 * listener's response. Every tool is one call of the fronts' C client on
 * the inproc listener, so a run from here meets the same validation,
 * queue, limits and sessions as any other, under the HTTP caller's
 * identity (caller.h: with --tenants a request without valid credentials
 * is 401 before its message is read). It never runs anything itself.
 *
 * A streamed call (a run_code with a progress token, answered as
 * text/event-stream) runs on a thread started here, with the caller set,
 * while the connection's thread sends its events; the response is over
 * (stream_done) only once that thread has ended, so a stream holds its
 * connection, within the listener's cap, until its run ends, even when the
 * client is gone. */
#include <pthread.h>
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

/* A streamed call: its stream, the caller its thread runs as. */
struct mcp_stream_job {
  struct mcp_http_stream *st;
  struct front_caller fc;
  unsigned keep_alive_ms;
  pthread_t thread;
  bool threaded; /* else the call already ran on the connection's thread */
};

/* The stack of a streamed call's thread: as the listener's own threads. */
#define MCP_STREAM_STACK_BYTES ((size_t)2 << 20)

static void *stream_thread(void *arg) {
  struct mcp_stream_job *j = arg;
  front_caller_enter(&j->fc);
  mcp_http_stream_run(j->st);
  front_caller_leave();
  return NULL;
}

static ssize_t stream_read(void *arg, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  struct mcp_stream_job *j = arg;
  return mcp_http_stream_read(j->st, buf, max, j->keep_alive_ms);
}

/* The response is over: the call's thread is waited for (its run goes on
 * to its end when the client left: a disconnection is no cancellation). */
static void stream_done(void *arg) {
  struct mcp_stream_job *j = arg;
  if (j->threaded)
    pthread_join(j->thread, NULL);
  mcp_http_stream_free(j->st);
  free(j);
}

/* resp streams st; its call started on a thread of its own (or, when no
 * thread starts, run here and then sent whole). */
static void stream_response(const struct front_caller *fc, const struct http_request *req,
                            struct mcp_http_stream *st, struct http_response *resp) {
  struct mcp_stream_job *j = calloc(1, sizeof(*j));
  if (j == NULL) {
    mcp_http_stream_free(st);
    mcp_error(resp, 500, "out of memory");
    return;
  }
  j->st = st;
  front_caller_copy(&j->fc, fc);
  /* A keep-alive well within the idle clock, at most every 15 s. */
  unsigned third_ms = req->idle_timeout_s * 1000u / 3;
  j->keep_alive_ms = third_ms == 0 || third_ms > 15000 ? 15000 : third_ms;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, MCP_STREAM_STACK_BYTES);
  j->threaded = pthread_create(&j->thread, &attr, stream_thread, j) == 0;
  pthread_attr_destroy(&attr);
  if (!j->threaded)
    stream_thread(j);
  resp->stream_read = stream_read;
  resp->stream_done = stream_done;
  resp->stream_arg = j;
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
      .session_id = http_request_header(req, "Mcp-Session-Id"),
      .caller = fc.tenant,
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
  if (out.stream != NULL)
    stream_response(&fc, req, out.stream, resp);
  if (out.allow != NULL && http_response_header(resp, "Allow", out.allow) < 0)
    resp->status = 500;
  if (out.session_id[0] != '\0' && http_response_header(resp, "Mcp-Session-Id", out.session_id) < 0)
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
