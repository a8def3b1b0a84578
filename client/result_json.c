/* result_json.c: a RunCode result as sandbox-run --json prints it. */
#include <stdbool.h>
#include <stddef.h>

#include "client_internal.h"
#include "json.h"

char *sbxc_result_json(const struct sbxc_result *r) {
  struct json_buf j = {0};
  bool ok = r->status == SBXC_OK;
  json_begin(&j, '{');
  json_key(&j, "run_id"), json_cstring(&j, ok ? r->run_id : "");
  json_key(&j, "status"), json_cstring(&j, sbxc_status_name(r->status));
  json_key(&j, "error"), json_cstring(&j, ok ? "" : r->message);
  json_key(&j, "stdout"), json_string(&j, (const char *)r->stdout_data, r->stdout_len);
  json_key(&j, "stderr"), json_string(&j, (const char *)r->stderr_data, r->stderr_len);
  json_key(&j, "stdout_truncated"), json_bool(&j, r->stdout_truncated);
  json_key(&j, "stderr_truncated"), json_bool(&j, r->stderr_truncated);
  json_key(&j, "killed_by"), json_cstring(&j, sbxc_killed_by_name(r->killed_by));
  json_key(&j, "exit_code"), json_int(&j, r->exit_code);
  json_key(&j, "signal"), json_int(&j, r->signal);
  json_key(&j, "wall_time_ms"), json_uint(&j, r->wall_time_ms);
  json_key(&j, "cpu_time_ms"), json_uint(&j, r->cpu_time_ms);
  json_key(&j, "peak_memory_bytes"), json_uint(&j, r->peak_memory_bytes);
  json_key(&j, "artifacts"), json_begin(&j, '[');
  for (size_t i = 0; i < r->n_artifacts; i++) {
    json_begin(&j, '{');
    json_key(&j, "name"), json_cstring(&j, r->artifacts[i].name);
    json_key(&j, "relative_path"), json_cstring(&j, r->artifacts[i].relative_path);
    json_key(&j, "size"), json_uint(&j, r->artifacts[i].size);
    json_key(&j, "mime"), json_cstring(&j, r->artifacts[i].mime);
    json_key(&j, "content_omitted"), json_bool(&j, r->artifacts[i].content_omitted);
    json_key(&j, "content_bytes"), json_uint(&j, r->artifacts[i].content_len);
    json_end(&j, '}');
  }
  json_end(&j, ']');
  json_key(&j, "session_id"), json_cstring(&j, ok && r->session_id != NULL ? r->session_id : "");
  json_key(&j, "session_created"), json_bool(&j, r->session_created);
  json_key(&j, "feedback"), json_begin(&j, '[');
  for (size_t i = 0; i < r->n_feedback; i++)
    json_cstring(&j, r->feedback[i]);
  json_end(&j, ']');
  json_end(&j, '}');
  return json_finish(&j);
}
