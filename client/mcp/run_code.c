/* run_code.c: the run_code tool: its arguments, checked and turned into one
 * RunCode request of the C client, and the call. The server checks the
 * request again (sizes, limits, requirement syntax) and names what it
 * refuses; what is checked here is what the C client could not carry (NUL
 * bytes, wrong JSON types) and what a model should hear about without a
 * round trip (paths, session ids, unknown properties). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "cleanup.h"
#include "fail.h"
#include "mcp_internal.h"

#define MAX_FILES 256
#define MAX_LIST 256

static const char *const run_code_args[] = {
    "code", "requirements", "files",  "session_id", "session_mode", "stdin",   "stdin_encoding",
    "args", "env",          "limits", "allow_net",  "language",     "version", NULL};
/* session_mode's values and what each is on the wire. */
static const char *const session_modes[] = {"files", "interpreter", NULL};
static const int session_mode_wire[] = {SBXC_SESSION_MODE_FILES, SBXC_SESSION_MODE_INTERPRETER};
static const char *const file_args[] = {"path", "content", "url", "encoding", NULL};
static const char *const limit_args[] = {"timeout_ms", "cpu_time_ms",  "memory_bytes",
                                         "memory_mb",  "output_bytes", "max_processes",
                                         "disk_bytes", "open_files",   NULL};

/* One {path, content[, encoding]} or {path, url} into the request. */
static int add_file(sbxc_request *req, const json_t *f, const char *where, char *err,
                    size_t errlen) {
  const char *path, *content, *url, *enc;
  size_t path_len, content_len, url_len;
  if (!json_is_object(f))
    return sbxc_fail(err, errlen, "%s: expected an object {path, content} or {path, url}, got %s",
                     where, mcp_json_type(f));
  if (mcp_args_known(f, where, file_args, err, errlen) < 0 ||
      mcp_arg_string(f, where, "path", true, &path, &path_len, err, errlen) < 0 ||
      mcp_arg_string(f, where, "content", false, &content, &content_len, err, errlen) < 0 ||
      mcp_arg_string(f, where, "url", false, &url, &url_len, err, errlen) < 0 ||
      mcp_arg_string(f, where, "encoding", false, &enc, NULL, err, errlen) < 0)
    return -1;
  char path_where[MCP_WHERE_MAX];
  snprintf(path_where, sizeof(path_where), "%s.path", where);
  if (mcp_check_path(path_where, path, path_len, err, errlen) < 0)
    return -1;
  if ((content == NULL) == (url == NULL))
    return sbxc_fail(err, errlen, "%s: give exactly one of content (the file's text) and url",
                     where);
  if (url != NULL) {
    if (enc != NULL)
      return sbxc_fail(err, errlen, "%s.encoding: only with content, not with url", where);
    return mcp_check_no_nul(where, url, url_len, err, errlen) < 0 ||
                   sbxc_request_add_file_url(req, path, url) < 0
               ? -1
               : 0;
  }
  if (enc != NULL && strcmp(enc, "base64") != 0 && strcmp(enc, "utf-8") != 0)
    return sbxc_fail(err, errlen, "%s.encoding: \"utf-8\" (the default) or \"base64\"", where);
  if (enc == NULL || strcmp(enc, "utf-8") == 0)
    return sbxc_request_add_file(req, path, content, content_len);
  cleanup_free uint8_t *data = NULL;
  size_t len;
  if (mcp_base64_decode(content, content_len, &data, &len) < 0) {
    snprintf(err, errlen,
             "%s.content: not valid base64 (standard alphabet A-Z a-z 0-9 + /, padded with '=')",
             where);
    return -1;
  }
  return sbxc_request_add_file(req, path, data, len);
}

static int add_files(sbxc_request *req, const json_t *args, char *err, size_t errlen) {
  json_t *files;
  if (mcp_arg_array(args, "arguments", "files", MAX_FILES, &files, err, errlen) < 0)
    return -1;
  for (size_t i = 0; files != NULL && i < json_array_size(files); i++) {
    char where[MCP_WHERE_MAX];
    snprintf(where, sizeof(where), "arguments.files[%zu]", i);
    if (add_file(req, json_array_get(files, i), where, err, errlen) < 0)
      return -1;
  }
  return 0;
}

/* requirements, args and allow_net: arrays of strings without NUL (the
 * server judges allow_net's entries against its --egress-allow). */
static int add_strings(sbxc_request *req, const json_t *args, const char *key,
                       int (*add)(sbxc_request *, const char *), char *err, size_t errlen) {
  json_t *list;
  if (mcp_arg_array(args, "arguments", key, MAX_LIST, &list, err, errlen) < 0)
    return -1;
  for (size_t i = 0; list != NULL && i < json_array_size(list); i++) {
    const json_t *v = json_array_get(list, i);
    char where[MCP_WHERE_MAX];
    snprintf(where, sizeof(where), "arguments.%s[%zu]", key, i);
    if (!json_is_string(v))
      return sbxc_fail(err, errlen, "%s: expected a string, got %s", where, mcp_json_type(v));
    if (mcp_check_no_nul(where, json_string_value(v), json_string_length(v), err, errlen) < 0 ||
        add(req, json_string_value(v)) < 0)
      return -1;
  }
  return 0;
}

static int add_env(sbxc_request *req, const json_t *args, char *err, size_t errlen) {
  const json_t *env = json_object_get(args, "env");
  if (env == NULL)
    return 0;
  if (!json_is_object(env))
    return sbxc_fail(err, errlen, "arguments.env: expected an object of strings, got %s",
                     mcp_json_type(env));
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)env, key, v) {
    char where[MCP_WHERE_MAX], q[80];
    mcp_quote(key, strlen(key), q, sizeof(q));
    snprintf(where, sizeof(where), "arguments.env[%s]", q);
    if (!json_is_string(v))
      return sbxc_fail(err, errlen, "%s: expected a string, got %s", where, mcp_json_type(v));
    if (mcp_check_no_nul(where, json_string_value(v), json_string_length(v), err, errlen) < 0 ||
        sbxc_request_add_env(req, key, json_string_value(v)) < 0)
      return -1;
  }
  return 0;
}

/* limits: each a positive integer; memory as bytes or MiB, not both. */
static int set_limits(sbxc_request *req, const json_t *args, char *err, size_t errlen) {
  const json_t *o = json_object_get(args, "limits");
  if (o == NULL)
    return 0;
  const char *w = "arguments.limits";
  if (!json_is_object(o))
    return sbxc_fail(err, errlen, "%s: expected an object, got %s", w, mcp_json_type(o));
  struct sbxc_limits l = {0};
  int64_t mb = 0;
  bool has_bytes, has_mb, present;
  const int64_t max = INT64_C(1) << 50;
  if (mcp_args_known(o, w, limit_args, err, errlen) < 0 ||
      mcp_arg_int(o, w, "timeout_ms", 1, max, &l.timeout_ms, &present, err, errlen) < 0 ||
      mcp_arg_int(o, w, "cpu_time_ms", 1, max, &l.cpu_time_ms, &present, err, errlen) < 0 ||
      mcp_arg_int(o, w, "memory_bytes", 1, max, &l.memory_bytes, &has_bytes, err, errlen) < 0 ||
      mcp_arg_int(o, w, "memory_mb", 1, max >> 20, &mb, &has_mb, err, errlen) < 0 ||
      mcp_arg_int(o, w, "output_bytes", 1, max, &l.output_bytes, &present, err, errlen) < 0 ||
      mcp_arg_int(o, w, "max_processes", 1, max, &l.max_processes, &present, err, errlen) < 0 ||
      mcp_arg_int(o, w, "disk_bytes", 1, max, &l.disk_bytes, &present, err, errlen) < 0 ||
      mcp_arg_int(o, w, "open_files", 1, max, &l.open_files, &present, err, errlen) < 0)
    return -1;
  if (has_bytes && has_mb)
    return sbxc_fail(err, errlen, "%s: give memory_bytes or memory_mb, not both", w);
  if (has_mb)
    l.memory_bytes = mb << 20;
  sbxc_request_set_limits(req, &l);
  return 0;
}

/* How content is encoded: "utf-8" (default) or "base64" (*base64). */
static int encoding_of(const json_t *obj, const char *where, const char *key, bool *base64,
                       char *err, size_t errlen) {
  const char *enc;
  if (mcp_arg_string(obj, where, key, false, &enc, NULL, err, errlen) < 0)
    return -1;
  if (enc != NULL && strcmp(enc, "base64") != 0 && strcmp(enc, "utf-8") != 0)
    return sbxc_fail(err, errlen, "%s.%s: \"utf-8\" (the default) or \"base64\"", where, key);
  *base64 = enc != NULL && strcmp(enc, "base64") == 0;
  return 0;
}

/* stdin, as text or (stdin_encoding "base64") binary data. */
static int set_stdin(sbxc_request *req, const json_t *args, const char *in, size_t in_len,
                     char *err, size_t errlen) {
  bool base64 = false;
  if (encoding_of(args, "arguments", "stdin_encoding", &base64, err, errlen) < 0)
    return -1;
  if (!base64)
    return sbxc_request_set_stdin(req, in, in_len);
  cleanup_free uint8_t *data = NULL;
  size_t len;
  if (mcp_base64_decode(in, in_len, &data, &len) < 0) {
    snprintf(err, errlen,
             "arguments.stdin: not valid base64 (standard alphabet A-Z a-z 0-9 + /, "
             "padded with '=')");
    return -1;
  }
  snprintf(err, errlen, "out of memory");
  return sbxc_request_set_stdin(req, data, len);
}

/* A new session's id (mcp_internal.h): ids a model makes up ("nb",
 * "demo") are the ones another caller guesses; this one is not. Never a
 * weaker id when the kernel gives no randomness. */
int mcp_random_uuid(char out[MCP_SESSION_ID_LEN + 1], char *err, size_t errlen) {
  uint8_t b[16];
  if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
    return sbxc_fail(err, errlen, "no randomness for a new session id: %s", strerror(errno));
  b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
  b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
  static const char hex[] = "0123456789abcdef";
  size_t o = 0;
  for (size_t i = 0; i < sizeof(b); i++) {
    if (i == 4 || i == 6 || i == 8 || i == 10)
      out[o++] = '-';
    out[o++] = hex[b[i] >> 4];
    out[o++] = hex[b[i] & 15];
  }
  out[o] = '\0';
  return 0;
}

/* code, session_id, session_mode and stdin. session_mode without a
 * session_id starts a new session under an id made here (mcp_random_uuid),
 * which the result gives back; the server checks the rest of what a mode
 * needs. */
static int set_scalars(sbxc_request *req, const json_t *args, char *err, size_t errlen) {
  const char *code, *session, *in;
  size_t code_len, session_len, in_len;
  int mode;
  if (mcp_arg_enum(args, "arguments", "session_mode", session_modes, &mode, err, errlen) < 0)
    return -1;
  if (mode >= 0)
    sbxc_request_set_session_mode(req, session_mode_wire[mode]);
  if (mcp_arg_string(args, "arguments", "code", true, &code, &code_len, err, errlen) < 0 ||
      mcp_check_no_nul("arguments.code", code, code_len, err, errlen) < 0 ||
      mcp_arg_string(args, "arguments", "session_id", false, &session, &session_len, err, errlen) <
          0 ||
      mcp_arg_string(args, "arguments", "stdin", false, &in, &in_len, err, errlen) < 0)
    return -1;
  if (session != NULL &&
      (mcp_check_session_id("arguments.session_id", session, session_len, err, errlen) < 0 ||
       sbxc_request_set_session_id(req, session) < 0))
    return -1;
  char made[MCP_SESSION_ID_LEN + 1];
  if (session == NULL && mode >= 0 &&
      (mcp_random_uuid(made, err, errlen) < 0 || sbxc_request_set_session_id(req, made) < 0))
    return -1;
  if (in != NULL && set_stdin(req, args, in, in_len, err, errlen) < 0)
    return -1;
  return sbxc_request_set_code(req, code, code_len);
}

/* language and version (a node-semver range): the server picks the
 * runtime and names what it refuses (an unknown language, a range nothing
 * satisfies). Neither: the request's runtime, python. */
static int set_language(sbxc_request *req, const json_t *args, char *err, size_t errlen) {
  const char *language, *version;
  size_t language_len, version_len;
  if (mcp_arg_string(args, "arguments", "language", false, &language, &language_len, err, errlen) <
          0 ||
      mcp_arg_string(args, "arguments", "version", false, &version, &version_len, err, errlen) < 0)
    return -1;
  if (language == NULL && version == NULL)
    return 0;
  if (language == NULL)
    return sbxc_fail(err, errlen, "arguments.version: only with language");
  if (mcp_check_no_nul("arguments.language", language, language_len, err, errlen) < 0 ||
      (version != NULL &&
       mcp_check_no_nul("arguments.version", version, version_len, err, errlen) < 0))
    return -1;
  snprintf(err, errlen, "out of memory");
  return sbxc_request_set_language(req, language, version != NULL ? version : "");
}

/* The request the arguments ask for, or NULL with err. */
static sbxc_request *request_from_args(const json_t *args, char *err, size_t errlen) {
  sbxc_request *req = sbxc_request_new();
  if (req == NULL) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  snprintf(err, errlen, "out of memory"); /* what a -1 without a message means */
  if (mcp_args_known(args, "arguments", run_code_args, err, errlen) < 0 ||
      set_scalars(req, args, err, errlen) < 0 || set_language(req, args, err, errlen) < 0 ||
      add_files(req, args, err, errlen) < 0 ||
      add_strings(req, args, "requirements", sbxc_request_add_requirement, err, errlen) < 0 ||
      add_strings(req, args, "args", sbxc_request_add_arg, err, errlen) < 0 ||
      add_strings(req, args, "allow_net", sbxc_request_add_allow_net, err, errlen) < 0 ||
      add_env(req, args, err, errlen) < 0 || set_limits(req, args, err, errlen) < 0) {
    sbxc_request_free(req);
    return NULL;
  }
  return req;
}

struct follow {
  mcp_server *s;
  struct mcp_call *call;
};

static void on_output(void *user, int stream, const uint8_t *data, size_t len) {
  struct follow *f = user;
  mcp_call_progress(f->s, f->call, stream, data, len);
}

/* The run started (StartRun) and followed (WatchRun) to its end, its
 * output reported as progress; a cancellation of the call cancels it. r is
 * filled as sbxc_run_code fills it. */
static void start_and_follow(mcp_server *s, struct mcp_call *call, const sbxc_request *req,
                             struct sbxc_result *r) {
  sbxc_run *run = NULL;
  if (sbxc_start_run(s->client, req, &run, r) < 0)
    return;
  sbxc_result_free(r);
  char err[256];
  if (!mcp_call_set_run(s, call, run)) /* cancelled before the run started */
    sbxc_cancel_run(s->client, run, NULL, NULL, err, sizeof(err));
  struct follow f = {s, call};
  sbxc_follow_run(s->client, run, 1000, on_output, &f, r);
  mcp_call_drop_run(s, call);
  sbxc_run_free(run);
}

json_t *mcp_tool_run_code(mcp_server *s, struct mcp_call *call, const json_t *args) {
  char err[MCP_ERR_MAX];
  sbxc_request *req = request_from_args(args, err, sizeof(err));
  if (req == NULL)
    return mcp_tool_error("run_code was not called (nothing ran): %s", err);
  struct sbxc_result r;
  if (mcp_call_streams(s, call))
    start_and_follow(s, call, req, &r);
  else
    sbxc_run_code(s->client, req, &r);
  sbxc_request_free(req);
  if (r.status == SBXC_OK)
    mcp_sessions_note(s, r.session_id); /* for resources/list */
  json_t *out = mcp_run_result(s, &r);
  sbxc_result_free(&r);
  return out;
}
