/* mcp_internal.h: what the files of the MCP core share: the server, the
 * argument checks (args.c), the content blocks (content.c), the tools
 * (tools.c, run_code.c, result.c, session_tools.c) and the resources
 * (resources.c). Not installed. */
#ifndef SBX_MCP_INTERNAL_H
#define SBX_MCP_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mcp.h"

/* The sessions resources/list shows: the ones run_code ran in (or
 * resources/read read) through this server, at most this many, the oldest
 * forgotten first. Ids only: whose they are, the server decides on each
 * ListFiles (another tenant's id answers NOT_FOUND and is not listed). */
#define MCP_KNOWN_SESSIONS_MAX 256

struct mcp_known_session {
  char id[65];
  uint64_t seq; /* the order they were first seen in: resources/list's cursor */
};

/* A tool call in progress (calls.c), on its handler's stack. Under the
 * server's calls_lock: next, run, cancelled, cancellers. */
struct mcp_call {
  json_t *id;             /* the request's id (a reference) */
  json_t *progress_token; /* params._meta.progressToken, or NULL */
  bool registered;        /* in the server's list: the transport has a notifier */
  void (*notify)(void *arg, const char *line); /* the server's, or the message's */
  void *notify_arg;
  bool cancellable;    /* a cancellation may reach it: stdio's, or one of scope */
  const char *scope;   /* whose (the message context's, borrowed); NULL on stdio */
  sbxc_run *run;       /* the run a cancel stops, while it is started */
  bool cancelled;      /* notifications/cancelled named it: no answer */
  unsigned cancellers; /* cancel threads using run */
  uint64_t progress;   /* output bytes reported so far */
  struct mcp_call *next;
};

struct mcp_server {
  sbxc_client *client;
  struct mcp_settings settings;
  json_t *tools;        /* the tools/list array, built once from tools.c's table */
  pthread_mutex_t lock; /* known, n_known, next_seq: tool calls run on several threads */
  struct mcp_known_session known[MCP_KNOWN_SESSIONS_MAX];
  size_t n_known;
  uint64_t next_seq;
  /* calls.c: where notifications go (NULL: a transport without them) and
   * the calls in progress. */
  void (*notify)(void *arg, const char *line);
  void *notify_arg;
  pthread_mutex_t calls_lock;
  pthread_cond_t calls_changed;
  struct mcp_call *calls;
};

/* A failed request: the JSON-RPC error's code, message and data (owned;
 * NULL: none). */
struct mcp_rpc_error {
  int code;
  char message[1024];
  json_t *data;
};

/* e filled (message from fmt); returns NULL, for "return mcp_fail(...)". */
json_t *mcp_fail(struct mcp_rpc_error *e, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* MCP's error for a resource that does not exist (or is not the caller's). */
#define MCP_RESOURCE_NOT_FOUND (-32002)
/* Ours: a resource over struct mcp_settings' max_read_bytes. */
#define MCP_RESOURCE_TOO_LARGE (-32003)

/* Messages for the model name the argument ("arguments.files[1].path"):
 * WHERE_MAX bounds those names, ERR_MAX the messages. */
#define MCP_WHERE_MAX 96
#define MCP_ERR_MAX 1024

/* --- args.c: tool arguments, checked before anything is sent --------- */

/* The JSON type of v as a schema names it ("string", "integer", ...). */
const char *mcp_json_type(const json_t *v);
/* -1 (err) when obj has a member not in known (NULL-terminated). */
int mcp_args_known(const json_t *obj, const char *where, const char *const *known, char *err,
                   size_t errlen);
/* The string obj[key] (*s NULL when absent and !required); -1 (err) when
 * required and absent, or not a string. */
int mcp_arg_string(const json_t *obj, const char *where, const char *key, bool required,
                   const char **s, size_t *len, char *err, size_t errlen);
/* The string obj[key] as its index in values (NULL-terminated), *index -1
 * when absent; -1 (err naming the allowed values) when it is another
 * string or not a string. */
int mcp_arg_enum(const json_t *obj, const char *where, const char *key, const char *const *values,
                 int *index, char *err, size_t errlen);
/* The integer obj[key] in lo..hi (a number with no fraction counts, as in
 * JSON Schema); *present false when absent. */
int mcp_arg_int(const json_t *obj, const char *where, const char *key, int64_t lo, int64_t hi,
                int64_t *out, bool *present, char *err, size_t errlen);
/* The array obj[key] (NULL when absent) of at most max items. */
int mcp_arg_array(const json_t *obj, const char *where, const char *key, size_t max, json_t **out,
                  char *err, size_t errlen);
/* A relative path as sandboxd takes it: 1..255 bytes, no NUL, not
 * absolute, no empty, "." or ".." component. */
int mcp_check_path(const char *where, const char *path, size_t len, char *err, size_t errlen);
/* The length of a session id run_code makes (a UUID's text form). */
#define MCP_SESSION_ID_LEN 36
/* A session id: [A-Za-z0-9._-]{1,64}, not "." or "..". */
int mcp_check_session_id(const char *where, const char *id, size_t len, char *err, size_t errlen);
/* A string without NUL bytes (C strings of the client stop at one). */
int mcp_check_no_nul(const char *where, const char *s, size_t len, char *err, size_t errlen);
/* s (len bytes, any) quoted for a message: printable ASCII, at most 64. */
void mcp_quote(const char *s, size_t len, char *buf, size_t buflen);

/* --- content.c: the blocks of a tool result --------------------------- */

/* A text block of len bytes of data, invalid UTF-8 replaced by U+FFFD. */
json_t *mcp_text_block_bytes(const void *data, size_t len);
/* The same of a NUL-terminated text; _take frees it (NULL gives NULL). */
json_t *mcp_text_block_take(char *text);
json_t *mcp_text_block(const char *text);
json_t *mcp_image_block(const uint8_t *data, size_t len, const char *mime);
/* An embedded resource: text when as_text (data must be valid UTF-8),
 * else a base64 blob. */
json_t *mcp_resource_block(const char *uri, const char *mime, const uint8_t *data, size_t len,
                           bool as_text);
/* {content, isError} (content taken); NULL when out of memory. */
json_t *mcp_tool_result(json_t *content, bool is_error);
/* A result with isError and one text block: what the model is told when a
 * call cannot be made as asked, so that it can correct the call. */
json_t *mcp_tool_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* base64 (OpenSSL's EVP_EncodeBlock), malloc'd and NUL-terminated. */
char *mcp_base64(const uint8_t *data, size_t len);
/* Strict base64 (RFC 4648 alphabet, padding, newlines allowed) into a
 * malloc'd buffer; -1 when it is not base64 or out of memory. */
int mcp_base64_decode(const char *in, size_t len, uint8_t **out, size_t *out_len);

/* The image type of data by its bytes (PNG, JPEG, GIF, WebP; SVG when the
 * name says SVG and the text has an <svg element), or NULL. */
const char *mcp_image_type(const uint8_t *data, size_t len, const char *mime);
/* A name ending in .svg (any case): what lets mcp_image_type call text
 * an SVG image. */
bool mcp_svg_name(const char *path);
/* Valid UTF-8 with no NUL byte. */
bool mcp_is_text(const uint8_t *data, size_t len);
/* sandbox://KIND/ID/PATH with ID and every byte of PATH that is not
 * unreserved or '/' percent-encoded; malloc'd. */
char *mcp_uri(const char *kind, const char *id, const char *path);
/* The last up-to-3 bytes of data that start an unfinished UTF-8 sequence
 * (a preview cut mid-character): how many to drop. */
size_t mcp_utf8_cut(const uint8_t *data, size_t len);

/* --- tools ------------------------------------------------------------ */

/* The tools/list array; NULL when out of memory (or a schema in tools.c
 * does not parse, which the unit tests rule out). */
json_t *mcp_tools_list(void);
/* tools/call: the CallToolResult of tool name, or NULL with *unknown when
 * there is no such tool (a protocol error) or out of memory. */
json_t *mcp_tools_call(mcp_server *s, struct mcp_call *call, const char *name, size_t name_len,
                       const json_t *args, bool *unknown);

/* Each tool: call is the request's (calls.c; only run_code uses it). */
json_t *mcp_tool_run_code(mcp_server *s, struct mcp_call *call, const json_t *args);
json_t *mcp_tool_list_session_files(mcp_server *s, struct mcp_call *call, const json_t *args);
json_t *mcp_tool_preview_file(mcp_server *s, struct mcp_call *call, const json_t *args);
json_t *mcp_tool_close_session(mcp_server *s, struct mcp_call *call, const json_t *args);

/* --- calls in progress (calls.c) --------------------------------------- */

/* run_code.c: 122 random bits from getrandom(2) as a UUID version 4 (36
 * characters); -1 (err) when the kernel gives no randomness. */
int mcp_random_uuid(char out[MCP_SESSION_ID_LEN + 1], char *err, size_t errlen);

/* Registers the call of request id (params: the request's, for its
 * progressToken) when the server or the message context (ctx, NULL: none)
 * has a notifier; else c stays unregistered and the calls below do
 * nothing. */
void mcp_call_begin(mcp_server *s, struct mcp_call *c, const struct mcp_message_context *ctx,
                    const json_t *id, const json_t *params);
/* Unregisters it: true when it was cancelled (no answer may be sent). */
bool mcp_call_end(mcp_server *s, struct mcp_call *c);
/* Whether the call's run should be started and followed (StartRun and
 * WatchRun: progress and cancel) rather than one RunCode. */
bool mcp_call_streams(const mcp_server *s, const struct mcp_call *c);
/* The call's run, started: false when it was cancelled before (the caller
 * cancels it now). */
bool mcp_call_set_run(mcp_server *s, struct mcp_call *c, sbxc_run *run);
/* Before the run's handle is freed: waits for cancels using it. */
void mcp_call_drop_run(mcp_server *s, struct mcp_call *c);
/* A chunk of the run's output: a progress notification when the request
 * asked for them. */
void mcp_call_progress(mcp_server *s, struct mcp_call *c, int stream, const uint8_t *data,
                       size_t len);

/* The scope of an HTTP request's cancellations: its caller (a tenant's
 * name), a newline and its Mcp-Session-Id. */
#define MCP_HTTP_SCOPE_MAX (MCP_HTTP_SESSION_ID_MAX + 128)

/* http_stream.c: a stream for message (copied), whose call cancellations
 * of scope (copied; NULL: none) reach; NULL when out of memory. */
struct mcp_http_stream *mcp_http_stream_new(mcp_server *s, const char *scope, const char *message,
                                            size_t len);

/* result.c: a RunCode result (any status) as a CallToolResult. */
json_t *mcp_run_result(const mcp_server *s, const struct sbxc_result *r);

/* --- resources.c: the files of sessions as resources ------------------ */

/* Remembers session id (NULL or "" : nothing) for resources/list. */
void mcp_sessions_note(mcp_server *s, const char *id);
json_t *mcp_resources_list(mcp_server *s, const json_t *params, struct mcp_rpc_error *e);
json_t *mcp_resources_read(mcp_server *s, const json_t *params, struct mcp_rpc_error *e);
json_t *mcp_resource_templates_list(void);

#endif
