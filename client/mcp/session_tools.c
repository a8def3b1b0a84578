/* session_tools.c: the tools on a session's workspace: list_session_files
 * (ListFiles), preview_file (ReadFile) and close_session (CloseSession).
 * Names and contents come from the sandbox: names are shown JSON-quoted,
 * contents in blocks of their own, text only when it is valid UTF-8 and an
 * image only when its bytes say so. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "json.h"
#include "mcp_internal.h"
#include "text.h"

static const char *const list_args[] = {"session_id", "path", NULL};
static const char *const preview_args[] = {"session_id", "path", "max_bytes", "offset", NULL};
static const char *const close_args[] = {"session_id", NULL};

/* Checks session_id (required) and the other known properties. */
static int session_args(const json_t *args, const char *const *known, const char **session,
                        char *err, size_t errlen) {
  size_t len;
  if (mcp_args_known(args, "arguments", known, err, errlen) < 0 ||
      mcp_arg_string(args, "arguments", "session_id", true, session, &len, err, errlen) < 0)
    return -1;
  return mcp_check_session_id("arguments.session_id", *session, len, err, errlen);
}

/* err is the client's "STATUS: message" (a server's answer) or its own
 * reason. */
static json_t *call_failed(const char *tool, int status, const char *err) {
  const char *hint = status == SBXC_NOT_FOUND
                         ? "\nThe session or the path does not exist: a session ends with "
                           "close_session or after a while without calls, and its files go "
                           "with it; run_code with a session_id starts one, and "
                           "list_session_files shows what is there."
                         : "";
  const char *name = sbxc_status_name(status);
  bool named = strncmp(err, name, strlen(name)) == 0;
  return mcp_tool_error("%s failed: %s%s%s%s", tool, named ? "" : name, named ? "" : ": ", err,
                        hint);
}

/* One line: "- "output/a.txt" file, 12 bytes". */
static void write_entry(FILE *f, const json_t *e) {
  char *name = sbxc_json_dump(json_incref(json_object_get(e, "relative_path")));
  const char *type = json_string_value(json_object_get(e, "type"));
  fprintf(f, "- %s %s", name != NULL ? name : "?", type != NULL ? type : "other");
  if (type != NULL && strcmp(type, "file") == 0) {
    char size[32];
    text_format_bytes((uint64_t)json_integer_value(json_object_get(e, "size")), size, sizeof(size));
    fprintf(f, ", %s", size);
  }
  fputc('\n', f);
  free(name);
}

static char *listing_text(const char *session, const char *path, const json_t *list) {
  const json_t *entries = json_object_get(list, "entries");
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (f == NULL)
    return NULL;
  char *dir = sbxc_json_dump(sbxc_json_cstring(path[0] != '\0' ? path : "."));
  fprintf(f, "session %s, directory %s (relative to /workspace): %zu entries\n", session,
          dir != NULL ? dir : "?", json_array_size(entries));
  free(dir);
  for (size_t i = 0; i < json_array_size(entries); i++)
    write_entry(f, json_array_get(entries, i));
  if (json_is_true(json_object_get(list, "truncated")))
    fprintf(f, "(more entries, or names that are not UTF-8, were left out)\n");
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

json_t *mcp_tool_list_session_files(mcp_server *s, struct mcp_call *call, const json_t *args) {
  (void)call;
  char err[MCP_ERR_MAX];
  const char *session, *path;
  size_t path_len;
  if (session_args(args, list_args, &session, err, sizeof(err)) < 0 ||
      mcp_arg_string(args, "arguments", "path", false, &path, &path_len, err, sizeof(err)) < 0 ||
      (path != NULL && path_len > 0 && strcmp(path, ".") != 0 &&
       mcp_check_path("arguments.path", path, path_len, err, sizeof(err)) < 0))
    return mcp_tool_error("list_session_files was not called: %s", err);
  if (path == NULL || strcmp(path, ".") == 0)
    path = "";
  cleanup_free char *json = NULL;
  int status = SBXC_OK;
  if (sbxc_list_files_json(s->client, session, path, &json, &status, err, sizeof(err)) < 0)
    return call_failed("list_session_files", status, err);
  json_t *list = json_loads(json, 0, NULL);
  char *text = list != NULL ? listing_text(session, path, list) : NULL;
  json_decref(list);
  if (text == NULL)
    return NULL;
  return mcp_tool_result(json_pack("[o]", mcp_text_block_take(text)), false);
}

json_t *mcp_tool_close_session(mcp_server *s, struct mcp_call *call, const json_t *args) {
  (void)call;
  char err[MCP_ERR_MAX];
  const char *session;
  if (session_args(args, close_args, &session, err, sizeof(err)) < 0)
    return mcp_tool_error("close_session was not called: %s", err);
  int status = SBXC_OK;
  if (sbxc_close_session(s->client, session, &status, err, sizeof(err)) < 0)
    return call_failed("close_session", status, err);
  char text[160];
  snprintf(text, sizeof(text), "session %s closed: its workspace and files are gone", session);
  return mcp_tool_result(json_pack("[o]", mcp_text_block(text)), false);
}

/* What preview_file read. */
struct preview {
  const char *session, *path;
  char *quoted; /* path, JSON-quoted for our lines */
  uint64_t offset, size;
  uint8_t *data;
  size_t len;
  bool eof;
};

/* Reads length bytes at p->offset into p (freeing what it held). */
static int read_part(mcp_server *s, struct preview *p, uint64_t length, int *status, char *err,
                     size_t errlen) {
  free(p->data);
  p->data = NULL;
  p->len = 0;
  return sbxc_read_file(s->client, p->session, p->path, p->offset, length, &p->data, &p->len,
                        &p->size, &p->eof, status, err, errlen);
}

/* An image within the cap, read whole; NULL when it is not one (or the
 * second read failed: *failed). */
static json_t *preview_image(mcp_server *s, struct preview *p, int *status, char *err,
                             size_t errlen, bool *failed) {
  const char *mime = mcp_svg_name(p->path) ? "image/svg+xml" : NULL;
  if (p->offset != 0 || p->size > s->settings.max_image_bytes)
    return NULL;
  const char *type = mcp_image_type(p->data, p->len, mime);
  if (type == NULL && (mime == NULL || p->eof))
    return NULL; /* an SVG's <svg may lie past the first read */
  if (!p->eof && read_part(s, p, p->size, status, err, errlen) < 0) {
    *failed = true;
    return NULL;
  }
  if (!p->eof || (type = mcp_image_type(p->data, p->len, mime)) == NULL)
    return NULL; /* grew or changed between the reads: shown as what it is now */
  char line[256];
  snprintf(line, sizeof(line), "%s: %s, %" PRIu64 " bytes (the image follows)", p->quoted, type,
           p->size);
  return json_pack("[o, o]", mcp_text_block(line), mcp_image_block(p->data, p->len, type));
}

/* Text (its last character kept whole) or a description of binary data. */
static json_t *preview_text(const mcp_server *s, const struct preview *p) {
  size_t n = p->len - (p->eof ? 0 : mcp_utf8_cut(p->data, p->len));
  char line[512];
  if (!mcp_is_text(p->data, n)) {
    const char *image = mcp_image_type(p->data, p->len, NULL);
    char cap[32];
    text_format_bytes(s->settings.max_image_bytes, cap, sizeof(cap));
    if (image != NULL && p->offset == 0)
      snprintf(line, sizeof(line),
               "%s: %s of %" PRIu64 " bytes, over the %s cap for images: not "
               "shown",
               p->quoted, image, p->size, cap);
    else
      snprintf(line, sizeof(line),
               "%s: binary data, %" PRIu64 " bytes in all (not UTF-8 text, "
               "not an image): not shown; inspect it with run_code (open(path, 'rb'))",
               p->quoted, p->size);
    return json_pack("[o]", mcp_text_block(line));
  }
  snprintf(line, sizeof(line),
           "%s: %" PRIu64 " bytes in all; bytes %" PRIu64 " to %" PRIu64
           " follow in the next block%s",
           p->quoted, p->size, p->offset, p->offset + n,
           p->offset + n < p->size ? " (ask with a larger max_bytes, or an offset, for more)" : "");
  return json_pack("[o, o]", mcp_text_block(line), mcp_text_block_bytes(p->data, n));
}

static int preview_args_of(const mcp_server *s, const json_t *args, struct preview *p,
                           int64_t *max_bytes, char *err, size_t errlen) {
  size_t path_len;
  int64_t offset = 0;
  bool has_max, has_offset;
  if (session_args(args, preview_args, &p->session, err, errlen) < 0 ||
      mcp_arg_string(args, "arguments", "path", true, &p->path, &path_len, err, errlen) < 0 ||
      mcp_check_path("arguments.path", p->path, path_len, err, errlen) < 0 ||
      mcp_arg_int(args, "arguments", "max_bytes", 1, (int64_t)s->settings.preview_max_bytes,
                  max_bytes, &has_max, err, errlen) < 0 ||
      mcp_arg_int(args, "arguments", "offset", 0, INT64_MAX, &offset, &has_offset, err, errlen) < 0)
    return -1;
  if (!has_max)
    *max_bytes = (int64_t)s->settings.preview_default_bytes;
  p->offset = (uint64_t)offset;
  return 0;
}

json_t *mcp_tool_preview_file(mcp_server *s, struct mcp_call *call, const json_t *args) {
  (void)call;
  char err[MCP_ERR_MAX];
  struct preview p = {0};
  int64_t max_bytes;
  if (preview_args_of(s, args, &p, &max_bytes, err, sizeof(err)) < 0)
    return mcp_tool_error("preview_file was not called: %s", err);
  p.quoted = sbxc_json_dump(sbxc_json_cstring(p.path));
  if (p.quoted == NULL)
    return NULL;
  int status = SBXC_OK;
  bool failed = read_part(s, &p, (uint64_t)max_bytes, &status, err, sizeof(err)) < 0;
  json_t *content = failed ? NULL : preview_image(s, &p, &status, err, sizeof(err), &failed);
  if (!failed && content == NULL)
    content = preview_text(s, &p);
  free(p.data);
  free(p.quoted);
  if (failed)
    return call_failed("preview_file", status, err);
  return mcp_tool_result(content, false);
}
