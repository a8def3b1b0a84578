/* result.c: a RunCode result as an MCP tool result. The first text block is
 * ours (how the run ended, ids and timings, the server's hints, what became
 * of each artifact); stdout and stderr follow in blocks of their own, so
 * that nothing a program prints can pose as a line of ours; then images
 * and embedded resources, within the caps of struct mcp_settings. A call
 * that failed, or a run that did not exit 0, is a result with isError. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "mcp_internal.h"
#include "text.h"

/* What the attachments of one result may still take. */
struct attach {
  const struct mcp_settings *caps;
  size_t left;
  const struct sbxc_result *r;
  json_t *blocks;
};

static bool run_failed(const struct sbxc_result *r) {
  return r->killed_by != SBXC_KILLED_BY_NONE || r->exit_code != 0 || r->signal != 0;
}

static void write_outcome(FILE *f, const struct sbxc_result *r) {
  char mem[32];
  text_format_bytes(r->peak_memory_bytes, mem, sizeof(mem));
  if (r->killed_by == SBXC_KILLED_BY_SIGNAL || (r->killed_by == SBXC_KILLED_BY_NONE && r->signal)) {
    const char *name = sigabbrev_np(r->signal);
    fprintf(f, "status: killed (signal %d, SIG%s)\n", r->signal, name != NULL ? name : "?");
  } else if (r->killed_by != SBXC_KILLED_BY_NONE) {
    fprintf(f, "status: killed (%s: the sandbox stopped the program at its limit)\n",
            sbxc_killed_by_name(r->killed_by));
  } else {
    fprintf(f, "status: %s (exit code %d)\n", r->exit_code == 0 ? "ok" : "error", r->exit_code);
  }
  fprintf(f, "run_id: %s\n", r->run_id);
  if (r->session_id != NULL && r->session_id[0] != '\0')
    fprintf(f, "session_id: %s%s\n", r->session_id,
            r->session_created ? " (new: created by this run)" : "");
  fprintf(f, "wall time %llu ms, CPU time %llu ms, peak memory %s\n",
          (unsigned long long)r->wall_time_ms, (unsigned long long)r->cpu_time_ms, mem);
}

static void write_stream_line(FILE *f, const char *name, size_t len, bool truncated) {
  if (len == 0)
    fprintf(f, "%s: empty\n", name);
  else
    fprintf(f, "%s: %zu bytes%s (in the %s block below)\n", name, len,
            truncated ? ", truncated by the server at limits.output_bytes" : "", name);
}

static void write_hints(FILE *f, const struct sbxc_result *r) {
  if (r->n_feedback == 0)
    return;
  fprintf(f, "hints:\n");
  for (size_t i = 0; i < r->n_feedback; i++)
    fprintf(f, "- %s\n", r->feedback[i]);
}

/* A block "NAME:\n" + data, its middle left out past cap (whole UTF-8
 * characters kept on both sides). */
static json_t *stream_block(const char *name, const uint8_t *d, size_t len, size_t cap) {
  char *text = NULL;
  size_t text_len = 0;
  FILE *f = open_memstream(&text, &text_len);
  if (f == NULL)
    return NULL;
  fprintf(f, "%s:\n", name);
  if (len <= cap) {
    fwrite(d, 1, len, f);
  } else {
    size_t head = cap / 2 - mcp_utf8_cut(d, cap / 2), tail = len - cap / 2;
    while (tail < len && (d[tail] & 0xc0) == 0x80)
      tail++;
    fwrite(d, 1, head, f);
    fprintf(f, "\n[... %zu bytes left out here: the middle of %zu bytes ...]\n", tail - head,
            len);
    fwrite(d + tail, 1, len - tail, f);
  }
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  json_t *t = sbxc_json_text(text, text_len);
  free(text);
  return t != NULL ? json_pack("{s:s, s:o}", "type", "text", "text", t) : NULL;
}

/* The resource URI of an artifact: readable later only in a session. */
static char *artifact_uri(const struct sbxc_result *r, const struct sbxc_artifact *a) {
  char path[1024];
  snprintf(path, sizeof(path), "output/%s", a->relative_path);
  bool session = r->session_id != NULL && r->session_id[0] != '\0';
  return mcp_uri(session ? "sessions" : "runs", session ? r->session_id : r->run_id, path);
}

/* Attaches artifact a when it fits: as an image, else as a resource.
 * Returns what was done, for the listing; NULL when out of memory. */
static const char *attach_artifact(struct attach *at, const struct sbxc_artifact *a) {
  size_t len = a->content_len;
  if (a->content_omitted)
    return "not attached: over the server's artifact cap";
  const char *image = mcp_image_type(a->content, len, a->mime);
  json_t *block = NULL;
  const char *what = NULL;
  if (image != NULL && len <= at->caps->max_image_bytes && len <= at->left) {
    block = mcp_image_block(a->content, len, image);
    what = "attached as an image";
  } else if (len <= at->caps->max_resource_bytes && len <= at->left) {
    bool text = mcp_is_text(a->content, len);
    const char *mime = a->mime != NULL && a->mime[0] != '\0' ? a->mime : "application/octet-stream";
    if (text && strcmp(mime, "application/octet-stream") == 0)
      mime = "text/plain";
    char *uri = artifact_uri(at->r, a);
    block = uri != NULL ? mcp_resource_block(uri, mime, a->content, len, text) : NULL;
    free(uri);
    what = text ? "attached as a text resource" : "attached as a binary resource (base64)";
  } else {
    return "not attached: over this result's size caps";
  }
  if (block == NULL || json_array_append_new(at->blocks, block) < 0)
    return NULL;
  at->left -= len;
  return what;
}

/* One line per artifact; the attachments into at->blocks. */
static int write_artifacts(FILE *f, struct attach *at) {
  const struct sbxc_result *r = at->r;
  if (r->n_artifacts == 0)
    return 0;
  fprintf(f, "artifacts (files in output/ after the run):\n");
  for (size_t i = 0; i < r->n_artifacts; i++) {
    const struct sbxc_artifact *a = &r->artifacts[i];
    const char *what = attach_artifact(at, a);
    char path[1024], size[32];
    snprintf(path, sizeof(path), "output/%s", a->relative_path);
    char *name = sbxc_json_dump(sbxc_json_cstring(path)); /* quoted, escaped: names are hostile */
    text_format_bytes(a->size, size, sizeof(size));
    if (what == NULL || name == NULL) {
      free(name);
      return -1;
    }
    fprintf(f, "- %s (%s, %s): %s\n", name, a->mime, size, what);
    free(name);
  }
  bool session = r->session_id != NULL && r->session_id[0] != '\0';
  fprintf(f, "%s\n",
          session ? "Files of this session stay until close_session: read any with preview_file."
                  : "Without a session_id the workspace is gone after the run: pass a "
                    "session_id to keep files and read them with preview_file.");
  return 0;
}

static int append_stream(json_t *content, const char *name, const uint8_t *d, size_t len,
                         size_t cap) {
  return len == 0 ? 0 : json_array_append_new(content, stream_block(name, d, len, cap));
}

/* The summary block, then stdout, stderr and the attachments. */
static json_t *run_content(const mcp_server *s, const struct sbxc_result *r) {
  struct attach at = {&s->settings, s->settings.max_attached_bytes, r, json_array()};
  char *text = NULL;
  size_t text_len = 0;
  FILE *f = at.blocks != NULL ? open_memstream(&text, &text_len) : NULL;
  if (f == NULL) {
    json_decref(at.blocks);
    return NULL;
  }
  write_outcome(f, r);
  write_stream_line(f, "stdout", r->stdout_len, r->stdout_truncated);
  write_stream_line(f, "stderr", r->stderr_len, r->stderr_truncated);
  write_hints(f, r);
  int rc = write_artifacts(f, &at);
  if (fclose(f) != 0 || rc < 0) {
    free(text);
    json_decref(at.blocks);
    return NULL;
  }
  json_t *content = json_array();
  size_t cap = s->settings.max_stream_text_bytes;
  if (content == NULL || json_array_append_new(content, mcp_text_block_take(text)) < 0 ||
      append_stream(content, "stdout", r->stdout_data, r->stdout_len, cap) < 0 ||
      append_stream(content, "stderr", r->stderr_data, r->stderr_len, cap) < 0 ||
      json_array_extend(content, at.blocks) < 0) {
    json_decref(content);
    content = NULL;
  }
  json_decref(at.blocks);
  return content;
}

/* A call that did not run the code as asked (or may not have). */
static json_t *call_failed(const struct sbxc_result *r) {
  bool busy = r->status == SBXC_RESOURCE_EXHAUSTED || r->status == SBXC_UNAVAILABLE;
  return mcp_tool_error("run_code failed: %s: %s%s", sbxc_status_name(r->status),
                        r->message,
                        busy ? "\nThe code did not run; call run_code again in a few seconds."
                             : "");
}

json_t *mcp_run_result(const mcp_server *s, const struct sbxc_result *r) {
  if (r->status != SBXC_OK)
    return call_failed(r);
  return mcp_tool_result(run_content(s, r), run_failed(r));
}
