/* result_json.c: a RunCode result as sandbox-run --json prints it. */
#include <stdbool.h>
#include <stddef.h>

#include "client_internal.h"
#include "json.h"

static json_t *artifacts_json(const struct sbxc_result *r) {
  json_t *a = json_array();
  for (size_t i = 0; a != NULL && i < r->n_artifacts; i++) {
    const struct sbxc_artifact *x = &r->artifacts[i];
    json_t *o =
        json_pack("{s:o, s:o, s:I, s:o, s:b, s:I}", "name", sbxc_json_cstring(x->name),
                  "relative_path", sbxc_json_cstring(x->relative_path), "size", (json_int_t)x->size,
                  "mime", sbxc_json_cstring(x->mime), "content_omitted", x->content_omitted,
                  "content_bytes", (json_int_t)x->content_len);
    if (json_array_append_new(a, o) < 0) {
      json_decref(a);
      return NULL;
    }
  }
  return a;
}

static json_t *feedback_json(const struct sbxc_result *r) {
  json_t *a = json_array();
  for (size_t i = 0; a != NULL && i < r->n_feedback; i++)
    if (json_array_append_new(a, sbxc_json_cstring(r->feedback[i])) < 0) {
      json_decref(a);
      return NULL;
    }
  return a;
}

/* {"connections", "refused", "bytes_up", "bytes_down"} of a run with
 * allow_net; NULL (the key left out) when the reply has no summary. */
static json_t *egress_json(const struct sbxc_result *r) {
  if (r->status != SBXC_OK || r->egress == NULL)
    return NULL;
  const struct sbxc_egress *e = r->egress;
  return json_pack("{s:I, s:I, s:I, s:I}", "connections", (json_int_t)e->connections, "refused",
                   (json_int_t)e->refused, "bytes_up", (json_int_t)e->bytes_up, "bytes_down",
                   (json_int_t)e->bytes_down);
}

/* A compiled runtime's compile stage; NULL (the key left out) for the
 * others. */
static json_t *compile_json(const struct sbxc_result *r) {
  if (r->status != SBXC_OK || r->compile == NULL)
    return NULL;
  const struct sbxc_compile *k = r->compile;
  return json_pack("{s:o, s:o, s:b, s:b, s:s, s:i, s:i, s:I, s:I, s:I, s:b}", "stdout",
                   sbxc_json_text(k->stdout_data, k->stdout_len), "stderr",
                   sbxc_json_text(k->stderr_data, k->stderr_len), "stdout_truncated",
                   k->stdout_truncated, "stderr_truncated", k->stderr_truncated, "killed_by",
                   sbxc_killed_by_name(k->killed_by), "exit_code", k->exit_code, "signal",
                   k->signal, "wall_time_ms", (json_int_t)k->wall_time_ms, "cpu_time_ms",
                   (json_int_t)k->cpu_time_ms, "peak_memory_bytes",
                   (json_int_t)k->peak_memory_bytes, "failed", k->failed);
}

char *sbxc_result_json(const struct sbxc_result *r) {
  bool ok = r->status == SBXC_OK;
  return sbxc_json_dump(json_pack(
      "{s:o, s:s, s:o, s:o, s:o, s:b, s:b, s:s, s:i, s:i, s:I, s:I, s:I, s:o, s:o, s:b, s:o, s:o, "
      "s:I, s:o, s:b, s:b, s:b, s:s, s:o*, s:o*}",
      "run_id", sbxc_json_cstring(ok ? r->run_id : ""), "status", sbxc_status_name(r->status),
      "error", sbxc_json_cstring(ok ? "" : r->message), "stdout",
      sbxc_json_text(r->stdout_data, r->stdout_len), "stderr",
      sbxc_json_text(r->stderr_data, r->stderr_len), "stdout_truncated", r->stdout_truncated,
      "stderr_truncated", r->stderr_truncated, "killed_by", sbxc_killed_by_name(r->killed_by),
      "exit_code", r->exit_code, "signal", r->signal, "wall_time_ms", (json_int_t)r->wall_time_ms,
      "cpu_time_ms", (json_int_t)r->cpu_time_ms, "peak_memory_bytes",
      (json_int_t)r->peak_memory_bytes, "artifacts", artifacts_json(r), "session_id",
      sbxc_json_cstring(ok ? r->session_id : ""), "session_created", r->session_created, "feedback",
      feedback_json(r), "endpoint", sbxc_json_cstring(sbxc_result_endpoint(r)), "attempts",
      (json_int_t)r->attempts, "result", sbxc_json_cstring(ok && r->result ? r->result : ""),
      "result_truncated", ok && r->result_truncated, "state_lost", ok && r->state_lost,
      "interpreter_ended", ok && r->interpreter_ended, "session_mode",
      !ok                    ? ""
      : r->session_mode == 2 ? "interpreter"
      : r->session_mode == 1 ? "files"
                             : "",
      "egress", egress_json(r), "compile", compile_json(r)));
}
