/* jsonrpc.c: one JSON-RPC 2.0 message in, its answer out: parsing
 * (jansson, duplicate keys refused), telling requests, notifications and
 * responses apart, the errors of JSON-RPC, and MCP's methods: initialize
 * (version negotiation), ping, tools/list, tools/call, resources/list,
 * resources/read, resources/templates/list. No message needs an earlier
 * one, so the same server answers a stdio session and unrelated HTTP
 * requests alike (resources/list shows what earlier calls ran in). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp_internal.h"
#include "text.h"

const char *const mcp_protocol_versions[] = {MCP_LATEST_PROTOCOL_VERSION, "2025-06-18",
                                             "2025-03-26", "2024-11-05"};
const size_t mcp_n_protocol_versions = sizeof(mcp_protocol_versions) / sizeof(char *);

static const char instructions[] =
    "sandboxd runs Python 3 code in isolated sandboxes. Call run_code with the program; files it "
    "saves under output/ come back (images as images). To keep files between calls, start a "
    "session with run_code and session_mode (no session_id): pass the session_id it returns "
    "to later run_code calls, inspect the files with list_session_files and preview_file, and "
    "end the session with close_session. With session_mode 'interpreter' "
    "the session also keeps one live Python: variables and imports persist between calls, "
    "each call is a notebook cell, and its last expression's value comes back as result.";

bool mcp_version_supported(const char *version) {
  for (size_t i = 0; version != NULL && i < mcp_n_protocol_versions; i++)
    if (strcmp(version, mcp_protocol_versions[i]) == 0)
      return true;
  return false;
}

const char *mcp_negotiate_version(const char *requested) {
  for (size_t i = 0; requested != NULL && i < mcp_n_protocol_versions; i++)
    if (strcmp(requested, mcp_protocol_versions[i]) == 0)
      return mcp_protocol_versions[i];
  return MCP_LATEST_PROTOCOL_VERSION;
}

void mcp_settings_default(struct mcp_settings *s) {
  *s = (struct mcp_settings){
      .max_stream_text_bytes = 64 << 10,
      .max_image_bytes = 1 << 20,
      .max_resource_bytes = 256 << 10,
      .max_attached_bytes = 4 << 20,
      .preview_default_bytes = 16 << 10,
      .preview_max_bytes = 1 << 20,
      .max_read_bytes = 4 << 20,
  };
}

mcp_server *mcp_server_new(sbxc_client *client, const struct mcp_settings *settings, char *err,
                           size_t errlen) {
  mcp_server *s = calloc(1, sizeof(*s));
  if (s == NULL || (s->tools = mcp_tools_list()) == NULL) {
    free(s);
    snprintf(err, errlen, "mcp: out of memory");
    return NULL;
  }
  s->client = client;
  s->settings = *settings;
  pthread_mutex_init(&s->lock, NULL);
  pthread_mutex_init(&s->calls_lock, NULL);
  pthread_cond_init(&s->calls_changed, NULL);
  return s;
}

void mcp_server_free(mcp_server *s) {
  if (s == NULL)
    return;
  json_decref(s->tools);
  pthread_mutex_destroy(&s->lock);
  pthread_mutex_destroy(&s->calls_lock);
  pthread_cond_destroy(&s->calls_changed);
  free(s);
}

/* {"jsonrpc":"2.0","id":id,"error":{code,message,data}}; id NULL: null;
 * data (borrowed) NULL: none. */
static json_t *error_response(const json_t *id, int code, const char *message, json_t *data) {
  return json_pack("{s:s, s:O, s:{s:i, s:s, s:O*}}", "jsonrpc", "2.0", "id",
                   id != NULL ? id : json_null(), "error", "code", code, "message", message, "data",
                   data);
}

char *mcp_error_text(int code, const char *message) {
  json_t *r = error_response(NULL, code, message, NULL);
  char *text = r != NULL ? json_dumps(r, JSON_COMPACT) : NULL;
  json_decref(r);
  return text;
}

static json_t *initialize(const json_t *params, struct mcp_rpc_error *e) {
  const json_t *v = json_object_get(params, "protocolVersion");
  if (!json_is_string(v))
    return mcp_fail(e, MCP_INVALID_PARAMS, "initialize: params.protocolVersion must be a string");
  const char *version = mcp_negotiate_version(json_string_value(v));
  return json_pack("{s:s, s:{s:{s:b}, s:{s:b, s:b}}, s:{s:s, s:s, s:s}, s:s}", "protocolVersion",
                   version, "capabilities", "tools", "listChanged", 0, "resources", "subscribe", 0,
                   "listChanged", 0, "serverInfo", "name", "sandboxd", "title",
                   "sandboxd code sandbox", "version", SANDBOXD_VERSION, "instructions",
                   instructions);
}

static json_t *tools_call(mcp_server *s, struct mcp_call *call, const json_t *params,
                          struct mcp_rpc_error *e) {
  const json_t *name = json_object_get(params, "name");
  const json_t *args = json_object_get(params, "arguments");
  if (!json_is_string(name))
    return mcp_fail(e, MCP_INVALID_PARAMS, "tools/call: params.name must be a string (the tool)");
  if (args != NULL && !json_is_object(args))
    return mcp_fail(e, MCP_INVALID_PARAMS, "tools/call: params.arguments must be an object, not %s",
                    mcp_json_type(args));
  json_t *empty = args == NULL ? json_object() : NULL;
  bool unknown;
  json_t *result = mcp_tools_call(s, call, json_string_value(name), json_string_length(name),
                                  args != NULL ? args : empty, &unknown);
  json_decref(empty);
  if (unknown) {
    char q[80];
    mcp_quote(json_string_value(name), json_string_length(name), q, sizeof(q));
    return mcp_fail(e, MCP_INVALID_PARAMS,
                    "Unknown tool: %s (the tools are run_code, list_session_files, preview_file, "
                    "close_session)",
                    q);
  }
  return result != NULL ? result : mcp_fail(e, MCP_INTERNAL_ERROR, "out of memory");
}

static bool method_is(const json_t *method, const char *name) {
  return json_string_length(method) == strlen(name) &&
         memcmp(json_string_value(method), name, strlen(name)) == 0;
}

/* The result of request method (a JSON string: it may hold a NUL), or
 * NULL with e. */
static json_t *dispatch(mcp_server *s, struct mcp_call *call, const json_t *method,
                        const json_t *params, struct mcp_rpc_error *e) {
  json_t *r;
  if (params != NULL && !json_is_object(params))
    return mcp_fail(e, MCP_INVALID_PARAMS, "Invalid params: \"params\" must be an object, not %s",
                    mcp_json_type(params));
  if (method_is(method, "initialize"))
    r = initialize(params, e);
  else if (method_is(method, "ping"))
    r = json_object();
  else if (method_is(method, "tools/list"))
    r = json_pack("{s:O}", "tools", s->tools);
  else if (method_is(method, "tools/call"))
    return tools_call(s, call, params, e);
  else if (method_is(method, "resources/list"))
    return mcp_resources_list(s, params, e);
  else if (method_is(method, "resources/read"))
    return mcp_resources_read(s, params, e);
  else if (method_is(method, "resources/templates/list"))
    r = mcp_resource_templates_list();
  else {
    char q[80];
    mcp_quote(json_string_value(method), json_string_length(method), q, sizeof(q));
    return mcp_fail(e, MCP_METHOD_NOT_FOUND, "Method not found: %s", q);
  }
  return r != NULL || e->code != 0 ? r : mcp_fail(e, MCP_INTERNAL_ERROR, "out of memory");
}

static enum mcp_outcome refuse(struct mcp_rpc_error *e, const char *message) {
  e->code = MCP_INVALID_REQUEST;
  snprintf(e->message, sizeof(e->message), "Invalid Request: %s", message);
  return MCP_REFUSED;
}

/* What a parsed message is: a request (*method, *params set), or not, with
 * the outcome and (for MCP_REFUSED) the error in e. */
static enum mcp_outcome classify(const json_t *msg, const json_t **method, const json_t **params,
                                 struct mcp_rpc_error *e) {
  const json_t *id = json_object_get(msg, "id"), *m = json_object_get(msg, "method");
  const json_t *version = json_object_get(msg, "jsonrpc");
  *params = json_object_get(msg, "params");
  if (!json_is_string(version) || strcmp(json_string_value(version), "2.0") != 0)
    return refuse(e, "\"jsonrpc\" must be \"2.0\"");
  if (m == NULL && id != NULL &&
      (json_object_get(msg, "result") != NULL || json_object_get(msg, "error") != NULL))
    return MCP_NO_ANSWER; /* a response: this server sends no requests to answer */
  if (!json_is_string(m))
    return refuse(e, "\"method\" must be a string");
  if (id == NULL)
    return MCP_NO_ANSWER; /* a notification (initialized, cancelled, ...) */
  if (!json_is_string(id) && !json_is_integer(id))
    return refuse(e, "\"id\" must be a string or an integer");
  *method = m;
  return MCP_ANSWERED;
}

/* The answer to a parsed message (NULL for none), and the outcome. */
static json_t *answer(mcp_server *s, const struct mcp_message_context *ctx, const json_t *msg,
                      enum mcp_outcome *outcome) {
  struct mcp_rpc_error e = {0};
  const json_t *method = NULL;
  const json_t *params = NULL, *id = json_object_get(msg, "id");
  if (!json_is_object(msg)) {
    *outcome = MCP_REFUSED;
    return error_response(NULL, MCP_INVALID_REQUEST,
                          json_is_array(msg) ? "Invalid Request: batches are not supported (one "
                                               "message per line or POST)"
                                             : "Invalid Request: a message is a JSON object",
                          NULL);
  }
  *outcome = classify(msg, &method, &params, &e);
  if (*outcome == MCP_NO_ANSWER)
    return NULL;
  bool id_ok = json_is_string(id) || json_is_integer(id);
  if (*outcome == MCP_REFUSED)
    return error_response(id_ok ? id : NULL, e.code, e.message, NULL);
  struct mcp_call call;
  mcp_call_begin(s, &call, ctx, id, params);
  json_t *result = dispatch(s, &call, method, params, &e);
  if (mcp_call_end(s, &call)) {
    /* Cancelled (notifications/cancelled): no answer, as the spec asks. */
    json_decref(result);
    json_decref(e.data);
    *outcome = MCP_NO_ANSWER;
    return NULL;
  }
  if (result == NULL) {
    json_t *reply = error_response(id, e.code, e.message, e.data);
    json_decref(e.data);
    return reply;
  }
  return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

int mcp_handle_message(mcp_server *s, const char *text, size_t len, char **response,
                       enum mcp_outcome *outcome) {
  return mcp_handle_message_in(s, NULL, text, len, response, outcome);
}

int mcp_handle_message_in(mcp_server *s, const struct mcp_message_context *ctx, const char *text,
                          size_t len, char **response, enum mcp_outcome *outcome) {
  json_error_t jerr;
  json_t *msg =
      json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
  json_t *reply;
  *response = NULL;
  if (msg == NULL) {
    char why[200], message[256];
    text_printable(jerr.text, strlen(jerr.text), why, sizeof(why), false);
    snprintf(message, sizeof(message), "Parse error: %s (at byte %d)", why, jerr.position);
    *outcome = MCP_REFUSED;
    reply = error_response(NULL, MCP_PARSE_ERROR, message, NULL);
  } else {
    reply = answer(s, ctx, msg, outcome);
    json_decref(msg);
  }
  if (*outcome == MCP_NO_ANSWER)
    return 0;
  *response = reply != NULL ? json_dumps(reply, JSON_COMPACT) : NULL;
  json_decref(reply);
  return *response != NULL ? 0 : -1;
}
