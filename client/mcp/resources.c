/* resources.c: the files of sandboxd sessions as MCP resources:
 * resources/list (the files of the sessions this server ran code in),
 * resources/read (one file by its sandbox://sessions/ID/PATH URI, the URIs
 * run_code's results carry) and resources/templates/list.
 *
 * Every file is reached through the C client's ListFiles and ReadFile, the
 * calls list_session_files and preview_file make, so the server decides
 * what the caller may see (its tenant's sessions only) and checks each path
 * (no "..", nothing absolute, no symlink followed). Must never read the
 * host's filesystem, or take a URI's path without mcp_check_path. File
 * names and contents came out of a sandbox: names are decoded and checked
 * here, contents sent as text only when they are valid UTF-8. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "json.h"
#include "mcp_internal.h"
#include "text.h"

/* One resources/list page: whole sessions until it holds this many files. */
#define LIST_PAGE_FILES 100
/* The sessions one page looks at (closed ones cost a ListFiles each). */
#define LIST_PAGE_SESSIONS 32
/* What one session contributes: files, directories listed, their depth. */
#define LIST_SESSION_FILES 256
#define LIST_SESSION_DIRS 64
#define LIST_DEPTH 8

#define URI_PREFIX "sandbox://"
#define URI_TEMPLATE "sandbox://sessions/{session_id}/{+path}"

void mcp_sessions_note(mcp_server *s, const char *id) {
  if (id == NULL || id[0] == '\0' || strlen(id) >= sizeof(s->known[0].id))
    return;
  pthread_mutex_lock(&s->lock);
  size_t i = 0, oldest = 0;
  while (i < s->n_known && strcmp(s->known[i].id, id) != 0) {
    if (s->known[i].seq < s->known[oldest].seq)
      oldest = i;
    i++;
  }
  if (i == s->n_known) { /* new: a free slot, or the oldest one's */
    size_t slot = s->n_known < MCP_KNOWN_SESSIONS_MAX ? s->n_known++ : oldest;
    snprintf(s->known[slot].id, sizeof(s->known[slot].id), "%s", id);
    s->known[slot].seq = s->next_seq++;
  }
  pthread_mutex_unlock(&s->lock);
}

static int by_seq(const void *a, const void *b) {
  uint64_t x = ((const struct mcp_known_session *)a)->seq;
  uint64_t y = ((const struct mcp_known_session *)b)->seq;
  return x < y ? -1 : x > y;
}

/* The known sessions from seq on, oldest first (a copy: the calls below
 * run without the lock). */
static size_t known_from(mcp_server *s, uint64_t from, struct mcp_known_session *out) {
  size_t n = 0;
  pthread_mutex_lock(&s->lock);
  for (size_t i = 0; i < s->n_known; i++)
    if (s->known[i].seq >= from)
      out[n++] = s->known[i];
  pthread_mutex_unlock(&s->lock);
  qsort(out, n, sizeof(*out), by_seq);
  return n;
}

/* A call that failed for another reason than NOT_FOUND: the server is
 * unreachable or refused (err: the client's "STATUS: message"). */
static json_t *call_error(struct mcp_rpc_error *e, const char *method, const char *err) {
  return mcp_fail(e, MCP_INTERNAL_ERROR, "%s: sandboxd: %s", method, err);
}

static json_t *resource_entry(const char *session, const json_t *entry) {
  const char *path = json_string_value(json_object_get(entry, "relative_path"));
  char *uri = path != NULL ? mcp_uri("sessions", session, path) : NULL;
  if (uri == NULL)
    return NULL;
  char description[96];
  snprintf(description, sizeof(description), "a file of session %s", session);
  json_t *r = json_pack("{s:s, s:s, s:s, s:I}", "uri", uri, "name", path, "description",
                        description, "size", json_integer_value(json_object_get(entry, "size")));
  free(uri);
  return r;
}

/* Appends the files of session (directories walked breadth-first with
 * ListFiles; symlinks and special files left out) to list. 1 when the
 * server has no such session of the caller's, 0, or -1 with e. */
static int session_files(mcp_server *s, const char *session, json_t *list,
                         struct mcp_rpc_error *e) {
  json_t *dirs = json_pack("[s]", ""); /* to list, with their depth below */
  json_t *depth = json_pack("[i]", 0);
  size_t files = 0, done = 0;
  int rc = dirs != NULL && depth != NULL ? 0 : -1;
  if (rc < 0)
    mcp_fail(e, MCP_INTERNAL_ERROR, "out of memory");
  for (; rc == 0 && done < json_array_size(dirs) && done < LIST_SESSION_DIRS; done++) {
    const char *dir = json_string_value(json_array_get(dirs, done));
    json_int_t level = json_integer_value(json_array_get(depth, done));
    cleanup_free char *text = NULL;
    char err[MCP_ERR_MAX];
    int status = SBXC_OK;
    if (sbxc_list_files_json(s->client, session, dir, &text, &status, err, sizeof(err)) < 0) {
      if (status == SBXC_NOT_FOUND) /* the session, or a directory gone meanwhile */
        rc = done == 0 ? 1 : 0;
      else
        rc = (call_error(e, "resources/list", err), -1);
      break;
    }
    json_t *listing = json_loads(text, 0, NULL);
    json_t *entries = json_object_get(listing, "entries");
    size_t i;
    json_t *entry;
    json_array_foreach(entries, i, entry) {
      const char *type = json_string_value(json_object_get(entry, "type"));
      const char *path = json_string_value(json_object_get(entry, "relative_path"));
      if (type == NULL || path == NULL)
        continue;
      if (strcmp(type, "directory") == 0 && level + 1 < LIST_DEPTH) {
        if (json_array_append_new(dirs, json_string(path)) < 0 ||
            json_array_append_new(depth, json_integer(level + 1)) < 0)
          rc = -1;
      } else if (strcmp(type, "file") == 0 && files < LIST_SESSION_FILES) {
        files++;
        if (json_array_append_new(list, resource_entry(session, entry)) < 0)
          rc = -1;
      }
    }
    json_decref(listing);
    if (rc < 0 && e->code == 0)
      mcp_fail(e, MCP_INTERNAL_ERROR, "out of memory");
  }
  json_decref(dirs);
  json_decref(depth);
  return rc;
}

/* params.cursor: the seq to start from (decimal, as nextCursor gave it). */
static int list_cursor(const json_t *params, uint64_t *from, struct mcp_rpc_error *e) {
  const json_t *c = json_object_get(params, "cursor");
  *from = 0;
  if (c == NULL)
    return 0;
  const char *t = json_string_value(c);
  char *end = NULL;
  if (t != NULL && t[0] >= '0' && t[0] <= '9' && strlen(t) == json_string_length(c))
    *from = strtoull(t, &end, 10);
  if (end == NULL || *end != '\0' || end - t > 19) {
    char q[80];
    if (t != NULL)
      mcp_quote(t, json_string_length(c), q, sizeof(q));
    mcp_fail(e, MCP_INVALID_PARAMS,
             "resources/list: params.cursor %s is not a cursor this server gave (pass "
             "nextCursor as it came, or no cursor for the first page)",
             t != NULL ? q : mcp_json_type(c));
    return -1;
  }
  return 0;
}

json_t *mcp_resources_list(mcp_server *s, const json_t *params, struct mcp_rpc_error *e) {
  uint64_t from;
  if (list_cursor(params, &from, e) < 0)
    return NULL;
  struct mcp_known_session *known = malloc(sizeof(s->known));
  json_t *list = json_array();
  if (known == NULL || list == NULL) {
    free(known);
    json_decref(list);
    return mcp_fail(e, MCP_INTERNAL_ERROR, "out of memory");
  }
  size_t n = known_from(s, from, known), i = 0;
  for (; i < n && i < LIST_PAGE_SESSIONS && json_array_size(list) < LIST_PAGE_FILES; i++)
    if (session_files(s, known[i].id, list, e) < 0) {
      free(known);
      json_decref(list);
      return NULL;
    }
  char cursor[24];
  if (i < n)
    snprintf(cursor, sizeof(cursor), "%" PRIu64, known[i].seq);
  free(known);
  json_t *r = json_pack("{s:o, s:s*}", "resources", list, "nextCursor", i < n ? cursor : NULL);
  return r != NULL ? r : mcp_fail(e, MCP_INTERNAL_ERROR, "out of memory");
}

json_t *mcp_resource_templates_list(void) {
  return json_pack(
      "{s:[{s:s, s:s, s:s, s:s}]}", "resourceTemplates", "uriTemplate", URI_TEMPLATE, "name",
      "session_file", "title", "A file of a session's workspace", "description",
      "A file of a sandboxd session (session_id: the one run_code returned; path: relative to "
      "/workspace, e.g. output/plot.png): text as text, images and other files as base64 blobs.");
}

/* --- resources/read ------------------------------------------------------ */

static int hex_value(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* The n bytes at p percent-decoded into out (outlen bytes, NUL-terminated);
 * -1 for a bad escape, a byte a URI does not hold raw ('?', '#', spaces,
 * controls, non-ASCII), or too long. NUL bytes stay in: the checks after
 * refuse them. */
static int percent_decode(const char *p, size_t n, char *out, size_t outlen, size_t *len) {
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c == '%') {
      int hi = i + 2 < n ? hex_value(p[i + 1]) : -1;
      int lo = i + 2 < n ? hex_value(p[i + 2]) : -1;
      if (hi < 0 || lo < 0)
        return -1;
      c = (unsigned char)(hi * 16 + lo);
      i += 2;
    } else if (c <= ' ' || c >= 0x7f || c == '?' || c == '#') {
      return -1;
    }
    if (o + 1 >= outlen)
      return -1;
    out[o++] = (char)c;
  }
  out[o] = '\0';
  *len = o;
  return 0;
}

/* What a URI names. */
struct file_uri {
  char session[256], path[1024];
  size_t session_len, path_len;
  bool run; /* sandbox://runs/...: a run's files, gone with the run */
};

static const char uri_form[] = "sandbox://sessions/SESSION_ID/PATH, as run_code's results "
                               "give them (PATH relative to /workspace, percent-encoded)";

/* Splits and decodes uri; -1 with e (-32602) when it is not one of ours. */
static int parse_uri(const char *uri, size_t len, struct file_uri *u, struct mcp_rpc_error *e) {
  char q[80], why[MCP_ERR_MAX] = "";
  mcp_quote(uri, len, q, sizeof(q));
  size_t prefix = strlen(URI_PREFIX);
  const char *kind = uri + prefix, *end = uri + len;
  const char *slash = len > prefix ? memchr(kind, '/', (size_t)(end - kind)) : NULL;
  const char *id = slash != NULL ? slash + 1 : NULL;
  const char *slash2 = id != NULL ? memchr(id, '/', (size_t)(end - id)) : NULL;
  if (len <= prefix || strncmp(uri, URI_PREFIX, prefix) != 0 || slash2 == NULL)
    return mcp_fail(e, MCP_INVALID_PARAMS, "resources/read: %s is not a URI of this server: %s", q,
                    uri_form),
           -1;
  size_t kind_len = (size_t)(slash - kind);
  u->run = kind_len == 4 && memcmp(kind, "runs", 4) == 0;
  if (!u->run && !(kind_len == 8 && memcmp(kind, "sessions", 8) == 0))
    return mcp_fail(e, MCP_INVALID_PARAMS, "resources/read: %s is not a URI of this server: %s", q,
                    uri_form),
           -1;
  const char *path = slash2 + 1;
  if (percent_decode(id, (size_t)(slash2 - id), u->session, sizeof(u->session), &u->session_len) <
          0 ||
      percent_decode(path, (size_t)(end - path), u->path, sizeof(u->path), &u->path_len) < 0)
    return mcp_fail(e, MCP_INVALID_PARAMS,
                    "resources/read: %s is malformed: a bad %%-escape, a character a URI holds "
                    "only %%-encoded, or too long; the form is %s",
                    q, uri_form),
           -1;
  if (mcp_check_session_id("the URI's session id", u->session, u->session_len, why, sizeof(why)) <
          0 ||
      mcp_check_path("the URI's path", u->path, u->path_len, why, sizeof(why)) < 0)
    return mcp_fail(e, MCP_INVALID_PARAMS, "resources/read: %s is refused: %s", q, why), -1;
  return 0;
}

/* -32002 with {"uri"} (and why, the server's words) in data. */
static json_t *not_found(struct mcp_rpc_error *e, const char *uri, const char *why) {
  mcp_fail(e, MCP_RESOURCE_NOT_FOUND, "Resource not found");
  e->data = json_pack("{s:s, s:s}", "uri", uri, "reason", why);
  return NULL;
}

static json_t *too_large(struct mcp_rpc_error *e, const char *uri, uint64_t size, size_t cap) {
  char c[32];
  text_format_bytes(cap, c, sizeof(c));
  mcp_fail(e, MCP_RESOURCE_TOO_LARGE,
           "resources/read: %s is %" PRIu64 " bytes, over this server's cap of %zu bytes (%s) "
           "for one resource; read parts of it with the preview_file tool (offset, max_bytes)",
           uri, size, cap, c);
  e->data = json_pack("{s:s, s:I, s:I}", "uri", uri, "size", (json_int_t)size, "max_bytes",
                      (json_int_t)cap);
  return NULL;
}

/* The whole file into *data (malloc'd), read in the parts ReadFile gives
 * (at most --artifact-bytes each); refused past s->settings.max_read_bytes
 * before more than that is read. NULL with e, else a marker to drop. */
static json_t *read_whole(mcp_server *s, const char *uri, const struct file_uri *u, uint8_t **data,
                          size_t *len, struct mcp_rpc_error *e) {
  size_t cap = s->settings.max_read_bytes;
  uint64_t size = 0;
  bool eof = false;
  *data = NULL;
  *len = 0;
  while (!eof) {
    uint8_t *part = NULL;
    size_t part_len = 0;
    int status = SBXC_OK;
    char err[MCP_ERR_MAX];
    if (sbxc_read_file(s->client, u->session, u->path, *len, cap + 1 - *len, &part, &part_len,
                       &size, &eof, &status, err, sizeof(err)) < 0) {
      free(*data);
      if (status == SBXC_NOT_FOUND)
        return not_found(e, uri, err);
      if (status == SBXC_FAILED_PRECONDITION || status == SBXC_INVALID_ARGUMENT)
        return mcp_fail(e, MCP_INVALID_PARAMS, "resources/read: %s: %s", uri, err);
      return call_error(e, "resources/read", err);
    }
    uint8_t *grown = NULL;
    bool over = size > cap || *len + part_len > cap;
    if (!over && (grown = realloc(*data, *len + part_len + 1)) != NULL) {
      if (part_len > 0)
        memcpy(grown + *len, part, part_len);
      *data = grown;
      *len += part_len;
    }
    free(part);
    if (over || grown == NULL) {
      free(*data);
      return over ? too_large(e, uri, size > *len + part_len ? size : *len + part_len, cap)
                  : mcp_fail(e, MCP_INTERNAL_ERROR, "resources/read: out of memory");
    }
    if (part_len == 0)
      break; /* shrunk meanwhile: what there is */
  }
  return json_true();
}

/* The ReadResourceResult of the file's bytes: images by their bytes as
 * blobs of their type, other valid UTF-8 as text, the rest as blobs. */
static json_t *read_contents(const char *uri, const struct file_uri *u, const uint8_t *data,
                             size_t len) {
  const char *svg = mcp_svg_name(u->path) ? "image/svg+xml" : NULL;
  const char *image = mcp_image_type(data, len, svg);
  bool text = mcp_is_text(data, len) && (image == NULL || svg != NULL);
  const char *mime = image != NULL ? image : text ? "text/plain" : "application/octet-stream";
  /* A tool result's embedded resource holds the same {uri, mimeType,
   * text|blob}. */
  json_t *block = mcp_resource_block(uri, mime, data, len, text);
  json_t *r =
      block != NULL ? json_pack("{s:[O]}", "contents", json_object_get(block, "resource")) : NULL;
  json_decref(block);
  return r;
}

json_t *mcp_resources_read(mcp_server *s, const json_t *params, struct mcp_rpc_error *e) {
  const json_t *v = json_object_get(params, "uri");
  if (!json_is_string(v))
    return mcp_fail(e, MCP_INVALID_PARAMS, "resources/read: params.uri must be a string (%s)",
                    uri_form);
  const char *uri = json_string_value(v);
  struct file_uri u;
  if (parse_uri(uri, json_string_length(v), &u, e) < 0)
    return NULL;
  if (u.run)
    return not_found(e, uri,
                     "a run without a session keeps no files: its workspace is gone after the "
                     "run (run_code with session_mode keeps them)");
  uint8_t *data;
  size_t len;
  json_t *ok = read_whole(s, uri, &u, &data, &len, e);
  if (ok == NULL)
    return NULL;
  mcp_sessions_note(s, u.session);
  json_t *r = read_contents(uri, &u, data, len);
  free(data);
  return r != NULL ? r : mcp_fail(e, MCP_INTERNAL_ERROR, "resources/read: out of memory");
}
