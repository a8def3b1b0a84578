/* mcp.h: sandboxd as a Model Context Protocol server (JSON-RPC 2.0, MCP
 * revision 2025-11-25; 2025-06-18, 2025-03-26 and 2024-11-05 negotiated).
 *
 * The core is transport-free: one message's text in, the response's text
 * out (or none, for a notification). It serves the tools run_code,
 * list_session_files, preview_file and close_session, and the files of
 * sessions as resources (resources/list, resources/read,
 * resources/templates/list), by calling a sandboxd through the C client
 * (sandbox_client.h), so it runs wherever a client does: in sandbox-mcp
 * (stdio) and behind the server's HTTP listener (/mcp, mcp_http_handle).
 * No message needs an earlier one (no initialize handshake is required
 * before tools/call, which makes the HTTP front stateless); the one thing
 * it remembers is which session ids it has run code in, for
 * resources/list. It may be called from several threads at once.
 *
 * Everything a run produced is hostile: output is capped and made valid
 * UTF-8 before it becomes text, artifact names are escaped where they are
 * shown and percent-encoded in URIs, and a file is an image only when its
 * bytes say so. This library never runs code itself: every tool is one
 * call of the C client. */
#ifndef SBX_MCP_H
#define SBX_MCP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "sandbox_client.h"

/* The newest revision this server speaks, and every one it accepts. */
#define MCP_LATEST_PROTOCOL_VERSION "2025-11-25"
extern const char *const mcp_protocol_versions[];
extern const size_t mcp_n_protocol_versions;

/* The version the server answers a client that asked for requested: the
 * same when supported, else the latest. */
const char *mcp_negotiate_version(const char *requested);
bool mcp_version_supported(const char *version);

/* What one tool result may carry (bytes before base64). */
struct mcp_settings {
  size_t max_stream_text_bytes; /* stdout, stderr each: head and tail kept */
  size_t max_image_bytes;       /* one image artifact sent as image content */
  size_t max_resource_bytes;    /* one other artifact sent as an embedded resource */
  size_t max_attached_bytes;    /* all images and resources of one result */
  size_t preview_default_bytes; /* preview_file without max_bytes */
  size_t preview_max_bytes;     /* the largest max_bytes preview_file takes */
  size_t max_read_bytes;        /* one file resources/read sends */
};

/* The defaults: 64 KiB per stream, 1 MiB per image, 256 KiB per resource,
 * 4 MiB in all, previews of 16 KiB up to 1 MiB, 4 MiB per resources/read. */
void mcp_settings_default(struct mcp_settings *s);

typedef struct mcp_server mcp_server;

/* A server calling sandboxd through client (borrowed: it must outlive the
 * server). NULL with err when out of memory. */
mcp_server *mcp_server_new(sbxc_client *client, const struct mcp_settings *settings, char *err,
                           size_t errlen);
void mcp_server_free(mcp_server *s);

/* A transport that keeps a connection (stdio) gives the server a way to
 * send notifications (notify gets one JSON-RPC message, without its
 * newline; it may be called from any thread, so it serializes writes).
 * Then tools/call requests with params._meta.progressToken get
 * notifications/progress with the run's output as it comes, and
 * notifications/cancelled cancels a call's run and drops its answer. */
void mcp_server_set_notify(mcp_server *s, void (*notify)(void *arg, const char *line), void *arg);
/* On the transport's reading thread, before a message is queued: true when
 * text was a notifications/cancelled, now taken (the call's run is being
 * cancelled; an unknown or finished request id is ignored). */
bool mcp_take_cancel(mcp_server *s, const char *text, size_t len);

/* A transport that answers each request on a stream of its own
 * (Streamable HTTP's SSE: http_stream.c) gives the message it hands over
 * its own notifier and says whose it is: notify (NULL: none) gets the
 * request's notifications (progress, when it carries a progressToken);
 * the call is cancelled only by mcp_take_cancel_scoped with the same scope
 * (NULL: by none). */
struct mcp_message_context {
  void (*notify)(void *arg, const char *line);
  void *notify_arg;
  const char *scope; /* who sent it, within what session: any text */
};

/* mcp_take_cancel for a transport without a connection: a
 * notifications/cancelled reaches only a call of the same scope (another
 * caller's or session's call of the same request id is never touched),
 * and its CancelRun is sent on this thread before it returns (the caller
 * of the request set, as for the request's own calls). true when text was
 * a notifications/cancelled (taken, or ignored: nothing of that scope and
 * id runs here). */
bool mcp_take_cancel_scoped(mcp_server *s, const char *scope, const char *text, size_t len);

/* How a message was taken. */
enum mcp_outcome {
  MCP_ANSWERED,  /* a request: *response holds its result or error */
  MCP_NO_ANSWER, /* a notification or a response: nothing to send */
  MCP_REFUSED,   /* not a message (parse error, invalid request without an
                    id): *response holds a JSON-RPC error with id null */
};

/* Handles one JSON-RPC message (len bytes of text; need not be
 * NUL-terminated). *response is a malloc'd JSON text on one line (no
 * newline) or NULL for MCP_NO_ANSWER. Returns 0, or -1 when out of memory
 * (then *response is NULL). Tool calls block for the call to sandboxd. */
int mcp_handle_message(mcp_server *s, const char *text, size_t len, char **response,
                       enum mcp_outcome *outcome);
/* The same with a message context (NULL: as mcp_handle_message). */
int mcp_handle_message_in(mcp_server *s, const struct mcp_message_context *ctx, const char *text,
                          size_t len, char **response, enum mcp_outcome *outcome);

/* A JSON-RPC error response with id null (for a message a transport could
 * not hand over whole, e.g. one over its size cap); malloc'd, NULL when out
 * of memory. code: MCP_PARSE_ERROR etc. */
char *mcp_error_text(int code, const char *message);

#define MCP_PARSE_ERROR (-32700)
#define MCP_INVALID_REQUEST (-32600)
#define MCP_METHOD_NOT_FOUND (-32601)
#define MCP_INVALID_PARAMS (-32602)
#define MCP_INTERNAL_ERROR (-32603)

/* Streamable HTTP (the MCP endpoint, stateless): the part that is HTTP
 * semantics, as a function, so that any HTTP server can host it. The
 * caller passes the headers named here (NULL when absent). */
struct mcp_http_request {
  const char *method;           /* "POST", "GET", ... */
  const char *origin;           /* Origin */
  const char *protocol_version; /* MCP-Protocol-Version */
  const char *content_type;     /* Content-Type */
  const char *accept;           /* Accept */
  const char *session_id;       /* Mcp-Session-Id */
  const char *caller;           /* who the host says sent it (a tenant's name; NULL or "": all
                                   callers alike): with the session id, whose calls its
                                   cancellations may reach */
  const char *body;
  size_t body_len;
};

/* The Mcp-Session-Id issued at initialize: a UUID version 4 (122 random
 * bits, the form run_code's session ids take). One a
 * client sends back is taken when it is 1 to MCP_HTTP_SESSION_ID_MAX
 * visible ASCII characters (else 400); the server keeps none. */
#define MCP_HTTP_SESSION_ID_LEN 36
#define MCP_HTTP_SESSION_ID_MAX 128

/* An SSE response's body in the making (http_stream.c). */
struct mcp_http_stream;

struct mcp_http_response {
  unsigned status;
  const char *content_type; /* static; NULL when there is no body */
  const char *allow;        /* the Allow header of a 405, else NULL */
  char *body;               /* malloc'd (the caller frees it); NULL: no body */
  size_t len;
  char session_id[MCP_HTTP_SESSION_ID_LEN + 1]; /* an Mcp-Session-Id header to send, or "" */
  struct mcp_http_stream *stream;               /* non-NULL: the body is this stream (below) */
};

struct mcp_http_settings {
  size_t max_body_bytes; /* 413 past it (the listener should cap first) */
};

/* Answers one HTTP request to the MCP endpoint: POST with one JSON-RPC
 * message -> 200 application/json (a request's response), 202 (a
 * notification or response), 400 (not a message, an unsupported
 * MCP-Protocol-Version, an Mcp-Session-Id that is not 1 to 128 visible
 * ASCII characters), 403 (any Origin header: browsers are not served,
 * against DNS rebinding), 406 (Accept without JSON), 413, 415 (not
 * application/json); GET and DELETE -> 405 (no server stream; sessions are
 * not ended, there is nothing to end). initialize's answer carries a new
 * Mcp-Session-Id; requests without one are served all the same.
 *
 * One kind of request is answered as a stream (200 text/event-stream, resp->stream
 * set): a tools/call of run_code with params._meta.progressToken from a
 * client whose Accept takes text/event-stream. Its events are the run's
 * notifications/progress, then the response; a call cancelled meanwhile
 * ends the stream without one. A notifications/cancelled (202) cancels the
 * call of its requestId among the streamed calls of the same caller and
 * Mcp-Session-Id on this server; a call without a session id is never
 * cancelled that way, and a cancellation naming nothing (another replica's
 * call, a finished one) is ignored. resp is filled in every case; 500 when
 * out of memory. */
void mcp_http_handle(mcp_server *s, const struct mcp_http_settings *hs,
                     const struct mcp_http_request *req, struct mcp_http_response *resp);

/* Progress events waiting for the client past this are dropped (the next
 * one's progress counts what was left out); the response is always kept. */
#define MCP_HTTP_STREAM_PENDING_MAX ((size_t)256 << 10)

/* The streamed call, run to its end: blocks for the run. The host calls it
 * on a thread of its own (with the request's caller set, as for any tool
 * call), while the connection's thread sends what mcp_http_stream_read
 * gives. */
void mcp_http_stream_run(struct mcp_http_stream *st);
/* The stream's next bytes (at most max, at least 3), waiting up to wait_ms
 * for some: when none came, an SSE comment (":\n\n", a keep-alive: it lets
 * the host see a client that is gone, and keeps a quiet run within the
 * connection's idle clock). -1 at the end: the call ended and everything
 * was read. */
ssize_t mcp_http_stream_read(struct mcp_http_stream *st, char *buf, size_t max, unsigned wait_ms);
/* Frees the stream, once mcp_http_stream_run returned (or never ran). A
 * client gone before the end loses the answer: the run is not cancelled
 * (a disconnection is no cancellation). */
void mcp_http_stream_free(struct mcp_http_stream *st);

#endif
