/* result.c: a RunCode result as an MCP tool result. The first text block is
 * ours (how the run ended, ids and timings, what became of an interpreter
 * session's state, the server's hints, what became of each artifact);
 * stdout, stderr and the last expression's value (result) follow in blocks
 * of their own, so that nothing a program prints can pose as a line of
 * ours; then images and embedded resources, within the caps of struct
 * mcp_settings. A call that failed, or a run that did not exit 0, is a
 * result with isError. */
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
  } else if (r->killed_by == SBXC_KILLED_BY_TIMEOUT &&
             r->session_mode == SBXC_SESSION_MODE_INTERPRETER && !r->interpreter_ended) {
    /* The timeout raised KeyboardInterrupt and it ended the cell in time:
     * nothing was killed, and the model may go on with the state. */
    fprintf(f, "status: killed (timeout: the cell was stopped with KeyboardInterrupt at its "
               "limit; the interpreter and its state are kept)\n");
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
  if (r->session_mode == SBXC_SESSION_MODE_INTERPRETER)
    fprintf(f, "session_mode: interpreter (one live Python: variables, imports and data persist "
               "between calls)\n");
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

/* An interpreter session's state, when it did not simply live on: the
 * model must not rely on variables that are gone. */
static void write_state(FILE *f, const struct sbxc_result *r) {
  if (r->state_lost)
    fprintf(f, "state lost: this call ran in a fresh interpreter; the variables, imports and "
               "data of earlier calls are gone (files are kept; the hints say why)\n");
  if (r->interpreter_ended)
    fprintf(f, "interpreter ended: this call ended the session's interpreter; the next call "
               "starts a fresh one without the variables, imports and data of this one (files "
               "are kept)\n");
}

/* A run with allow_net: what it did on the network (the hints name the
 * first refusal). */
static void write_egress(FILE *f, const struct sbxc_result *r) {
  if (r->egress == NULL)
    return;
  char up[32], down[32];
  text_format_bytes(r->egress->bytes_up, up, sizeof(up));
  text_format_bytes(r->egress->bytes_down, down, sizeof(down));
  fprintf(f, "network (allow_net): %u connection%s, %u refused; %s sent, %s received\n",
          (unsigned)r->egress->connections, r->egress->connections == 1 ? "" : "s",
          (unsigned)r->egress->refused, up, down);
}

static void write_result_line(FILE *f, const char *result, bool truncated) {
  if (result[0] != '\0')
    fprintf(f,
            "result: the value of the last expression, %zu bytes%s (in the result block "
            "below)\n",
            strlen(result), truncated ? ", truncated by the server at 64 KiB" : "");
}

static void write_hints(FILE *f, const struct sbxc_result *r) {
  if (r->n_feedback == 0)
    return;
  fprintf(f, "hints:\n");
  for (size_t i = 0; i < r->n_feedback; i++)
    fprintf(f, "- %s\n", r->feedback[i]);
}

/* "NAME:\n" and data as text, the data's middle left out past cap (whole
 * UTF-8 characters kept on both sides): a malloc'd buffer of *out_len
 * bytes, not yet UTF-8 checked. */
static char *capped_stream(const char *name, const uint8_t *d, size_t len, size_t cap,
                           size_t *out_len) {
  char *text = NULL;
  FILE *f = open_memstream(&text, out_len);
  if (f == NULL)
    return NULL;
  fprintf(f, "%s:\n", name);
  if (len <= cap) {
    if (len > 0) /* d may be NULL then */
      fwrite(d, 1, len, f);
  } else {
    size_t head = cap / 2 - mcp_utf8_cut(d, cap / 2), tail = len - cap / 2;
    while (tail < len && (d[tail] & 0xc0) == 0x80)
      tail++;
    fwrite(d, 1, head, f);
    fprintf(f, "\n[... %zu bytes left out here: the middle of %zu bytes ...]\n", tail - head, len);
    fwrite(d + tail, 1, len - tail, f);
  }
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  return text;
}

/* One stream as it is shown: *block "NAME:\n" + the capped text (a text
 * content block), *text the capped text alone (for structuredContent). */
static int stream_parts(const char *name, const uint8_t *d, size_t len, size_t cap, json_t **block,
                        json_t **text) {
  size_t n = 0, label = strlen(name) + 2;
  char *capped = capped_stream(name, d, len, cap, &n);
  *block = *text = NULL;
  if (capped != NULL) {
    json_t *t = sbxc_json_text(capped, n);
    *block = t != NULL ? json_pack("{s:s, s:o}", "type", "text", "text", t) : NULL;
    *text = sbxc_json_text(capped + label, n - label);
  }
  free(capped);
  if (*block == NULL || *text == NULL) {
    json_decref(*block);
    json_decref(*text);
    return -1;
  }
  return 0;
}

/* The resource URI of an artifact: readable later only in a session. */
static char *artifact_uri(const struct sbxc_result *r, const struct sbxc_artifact *a) {
  char path[1024];
  snprintf(path, sizeof(path), "output/%s", a->relative_path);
  bool session = r->session_id != NULL && r->session_id[0] != '\0';
  return mcp_uri(session ? "sessions" : "runs", session ? r->session_id : r->run_id, path);
}

/* What became of an artifact: its word in structuredContent and its line. */
enum attached { ATT_IMAGE, ATT_TEXT, ATT_BINARY, ATT_OMITTED, ATT_OVER_CAP, ATT_FAILED };
static const char *const attached_word[] = {"image", "text", "binary", "omitted", "over_cap"};
static const char *const attached_line[] = {
    "attached as an image",
    "attached as a text resource",
    "attached as a binary resource (base64)",
    "not attached: over the server's artifact cap",
    "not attached: over this result's size caps",
};

/* Attaches artifact a when it fits: as an image, else as a resource.
 * ATT_FAILED when out of memory. */
static enum attached attach_artifact(struct attach *at, const struct sbxc_artifact *a) {
  size_t len = a->content_len;
  if (a->content_omitted)
    return ATT_OMITTED;
  const char *image = mcp_image_type(a->content, len, a->mime);
  json_t *block = NULL;
  enum attached what;
  if (image != NULL && len <= at->caps->max_image_bytes && len <= at->left) {
    block = mcp_image_block(a->content, len, image);
    what = ATT_IMAGE;
  } else if (len <= at->caps->max_resource_bytes && len <= at->left) {
    bool text = mcp_is_text(a->content, len);
    const char *mime = a->mime != NULL && a->mime[0] != '\0' ? a->mime : "application/octet-stream";
    if (text && strcmp(mime, "application/octet-stream") == 0)
      mime = "text/plain";
    char *uri = artifact_uri(at->r, a);
    block = uri != NULL ? mcp_resource_block(uri, mime, a->content, len, text) : NULL;
    free(uri);
    what = text ? ATT_TEXT : ATT_BINARY;
  } else {
    return ATT_OVER_CAP;
  }
  if (block == NULL || json_array_append_new(at->blocks, block) < 0)
    return ATT_FAILED;
  at->left -= len;
  return what;
}

/* One line per artifact, the attachments into at->blocks and one object
 * per artifact into list (structuredContent). */
static int write_artifacts(FILE *f, struct attach *at, json_t *list) {
  const struct sbxc_result *r = at->r;
  if (r->n_artifacts == 0)
    return 0;
  fprintf(f, "artifacts (files in output/ after the run):\n");
  for (size_t i = 0; i < r->n_artifacts; i++) {
    const struct sbxc_artifact *a = &r->artifacts[i];
    enum attached what = attach_artifact(at, a);
    char path[1024], size[32];
    snprintf(path, sizeof(path), "output/%s", a->relative_path);
    char *name = sbxc_json_dump(sbxc_json_cstring(path)); /* quoted, escaped: names are hostile */
    text_format_bytes(a->size, size, sizeof(size));
    json_t *entry = what == ATT_FAILED
                        ? NULL
                        : json_pack("{s:o, s:o, s:I, s:s}", "path", sbxc_json_cstring(path), "mime",
                                    sbxc_json_cstring(a->mime), "size", (json_int_t)a->size,
                                    "attached", attached_word[what]);
    if (entry == NULL || name == NULL || json_array_append_new(list, entry) < 0) {
      free(name);
      return -1;
    }
    fprintf(f, "- %s (%s, %s): %s\n", name, a->mime, size, attached_line[what]);
    free(name);
  }
  bool session = r->session_id != NULL && r->session_id[0] != '\0';
  fprintf(f, "%s\n",
          session ? "Files of this session stay until close_session: read any with preview_file."
                  : "Without a session_id the workspace is gone after the run: pass a "
                    "session_id to keep files and read them with preview_file.");
  return 0;
}

static const char *status_word(const struct sbxc_result *r) {
  if (r->killed_by != SBXC_KILLED_BY_NONE || r->signal != 0)
    return "killed";
  return r->exit_code == 0 ? "ok" : "error";
}

static const char *session_mode_word(const struct sbxc_result *r) {
  switch (r->session_mode) {
  case SBXC_SESSION_MODE_FILES:
    return "files";
  case SBXC_SESSION_MODE_INTERPRETER:
    return "interpreter";
  }
  return NULL;
}

/* structuredContent (tools.c's output schema of run_code): the run's
 * outcome as data; stdout, stderr and result (taken) capped as in the
 * blocks. */
static json_t *run_structured(const struct sbxc_result *r, json_t *out, json_t *err, json_t *result,
                              json_t *artifacts) {
  json_t *feedback = json_array();
  for (size_t i = 0; feedback != NULL && i < r->n_feedback; i++)
    if (json_array_append_new(feedback, sbxc_json_cstring(r->feedback[i])) < 0) {
      json_decref(feedback);
      feedback = NULL;
    }
  bool session = r->session_id != NULL && r->session_id[0] != '\0';
  const char *mode = session ? session_mode_word(r) : NULL;
  json_t *egress = r->egress == NULL ? NULL
                                     : json_pack("{s:I, s:I, s:I, s:I}", "connections",
                                                 (json_int_t)r->egress->connections, "refused",
                                                 (json_int_t)r->egress->refused, "bytes_up",
                                                 (json_int_t)r->egress->bytes_up, "bytes_down",
                                                 (json_int_t)r->egress->bytes_down);
  json_t *o = json_pack(
      "{s:s, s:s, s:i, s:i, s:o, s:o*, s:b, s:s*, s:I, s:I, s:I, s:o, s:b, s:o, s:b, s:o, s:b, "
      "s:b, s:b, s:o*, s:o, s:o*}",
      "status", status_word(r), "killed_by", sbxc_killed_by_name(r->killed_by), "exit_code",
      r->exit_code, "signal", r->signal, "run_id", sbxc_json_cstring(r->run_id), "session_id",
      session ? sbxc_json_cstring(r->session_id) : NULL, "session_created", r->session_created,
      "session_mode", mode, "wall_time_ms", (json_int_t)r->wall_time_ms, "cpu_time_ms",
      (json_int_t)r->cpu_time_ms, "peak_memory_bytes", (json_int_t)r->peak_memory_bytes, "stdout",
      out, "stdout_truncated", r->stdout_truncated, "stderr", err, "stderr_truncated",
      r->stderr_truncated, "result", result, "result_truncated", r->result_truncated, "state_lost",
      r->state_lost, "interpreter_ended", r->interpreter_ended, "feedback", feedback, "artifacts",
      artifacts, "egress", egress);
  return o;
}

/* The CallToolResult of a run: the summary block, then stdout, stderr and
 * the attachments, and structuredContent. */
static json_t *run_content(const mcp_server *s, const struct sbxc_result *r) {
  struct attach at = {&s->settings, s->settings.max_attached_bytes, r, json_array()};
  json_t *artifacts = json_array();
  char *text = NULL;
  size_t text_len = 0;
  FILE *f = at.blocks != NULL && artifacts != NULL ? open_memstream(&text, &text_len) : NULL;
  if (f == NULL) {
    json_decref(at.blocks);
    json_decref(artifacts);
    return NULL;
  }
  const char *value = r->result != NULL ? r->result : "";
  size_t value_len = strlen(value);
  write_outcome(f, r);
  write_state(f, r);
  write_egress(f, r);
  write_stream_line(f, "stdout", r->stdout_len, r->stdout_truncated);
  write_stream_line(f, "stderr", r->stderr_len, r->stderr_truncated);
  /* A failed compile ran nothing: the compiler's errors are the answer
   * (gcc and g++ write them to stderr). */
  const struct sbxc_compile *k = r->compile != NULL && r->compile->failed ? r->compile : NULL;
  if (k != NULL)
    write_stream_line(f, "compiler", k->stderr_len, k->stderr_truncated);
  write_result_line(f, value, r->result_truncated);
  write_hints(f, r);
  int rc = write_artifacts(f, &at, artifacts);
  json_t *out_block = NULL, *out_text = NULL, *err_block = NULL, *err_text = NULL;
  json_t *value_block = NULL, *value_text = NULL, *cc_block = NULL, *cc_text = NULL;
  size_t cap = s->settings.max_stream_text_bytes;
  if (fclose(f) != 0 || rc < 0 ||
      (k != NULL &&
       stream_parts("compiler", k->stderr_data, k->stderr_len, cap, &cc_block, &cc_text) < 0) ||
      stream_parts("stdout", r->stdout_data, r->stdout_len, cap, &out_block, &out_text) < 0 ||
      stream_parts("stderr", r->stderr_data, r->stderr_len, cap, &err_block, &err_text) < 0 ||
      stream_parts("result", (const uint8_t *)value, value_len, cap, &value_block, &value_text) <
          0) {
    free(text);
    json_decref(cc_block);
    json_decref(cc_text);
    json_decref(out_block);
    json_decref(out_text);
    json_decref(err_block);
    json_decref(err_text);
    json_decref(at.blocks);
    json_decref(artifacts);
    return NULL;
  }
  json_t *content = json_array();
  bool ok = content != NULL && json_array_append_new(content, mcp_text_block_take(text)) == 0;
  /* Empty streams are said so in the summary; no block of their own. */
  ok = ok && (r->stdout_len == 0 || json_array_append(content, out_block) == 0);
  ok = ok && (r->stderr_len == 0 || json_array_append(content, err_block) == 0);
  ok = ok && (k == NULL || k->stderr_len == 0 || json_array_append(content, cc_block) == 0);
  /* After the output, as a notebook shows a cell's Out[]. */
  ok = ok && (value_len == 0 || json_array_append(content, value_block) == 0);
  ok = ok && json_array_extend(content, at.blocks) == 0;
  json_decref(out_block);
  json_decref(err_block);
  json_decref(cc_block);
  json_decref(value_block);
  json_decref(at.blocks);
  json_t *structured = run_structured(r, out_text, err_text, value_text, artifacts);
  if (structured != NULL && cc_text != NULL &&
      json_object_set_new(structured, "compiler", cc_text) < 0) {
    json_decref(structured);
    structured = NULL;
  } else if (structured == NULL) {
    json_decref(cc_text);
  }
  json_t *result = ok ? mcp_tool_result(content, run_failed(r)) : NULL;
  if (!ok)
    json_decref(content);
  if (result == NULL || structured == NULL) {
    json_decref(result);
    json_decref(structured);
    return NULL;
  }
  if (json_object_set_new(result, "structuredContent", structured) < 0) {
    json_decref(result);
    return NULL;
  }
  return result;
}

/* A call that did not run the code as asked (or may not have). */
static json_t *call_failed(const struct sbxc_result *r) {
  bool busy = r->status == SBXC_RESOURCE_EXHAUSTED || r->status == SBXC_UNAVAILABLE;
  bool unknown = r->status == SBXC_UNKNOWN || r->status == SBXC_DEADLINE_EXCEEDED;
  return mcp_tool_error("run_code failed: %s: %s%s", sbxc_status_name(r->status), r->message,
                        busy      ? "\nThe code did not run; call run_code again in a few seconds."
                        : unknown ? "\nThe code may or may not have run: the answer was lost."
                                  : "");
}

json_t *mcp_run_result(const mcp_server *s, const struct sbxc_result *r) {
  if (r->status != SBXC_OK)
    return call_failed(r);
  return run_content(s, r);
}
