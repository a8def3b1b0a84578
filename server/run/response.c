/* response.c: the engine's result as a RunCodeResponse: the figures, the
 * output, the feedback lines and the artifacts left in output/ (hostile:
 * collected by artifacts.c, never followed). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "run_internal.h"
#include "safefs.h"
#include "text.h"

#define SAME_KILLED_BY(name)                                                                       \
  _Static_assert((int)SANDBOX_KILLED_BY_##name == (int)SANDBOX__V1__KILLED_BY__KILLED_BY_##name,   \
                 "engine and wire agree on killed_by " #name)
SAME_KILLED_BY(NONE);
SAME_KILLED_BY(TIMEOUT);
SAME_KILLED_BY(MEMORY);
SAME_KILLED_BY(OUTPUT_LIMIT);
SAME_KILLED_BY(SIGNAL);

static void artifact_feedback(const struct server_settings *s, const struct artifact_caps *caps,
                              const struct artifact_set *set, struct feedback *fb) {
  char a[32], b[32];
  if (set->omitted_per_file > 0) {
    const struct artifact *first = NULL;
    for (size_t i = 0; i < set->n && first == NULL; i++)
      if (set->items[i].omitted && set->items[i].size > caps->per_file)
        first = &set->items[i];
    text_format_bytes(caps->per_file, a, sizeof(a));
    text_format_bytes(first != NULL ? first->size : 0, b, sizeof(b));
    feedback_add(fb,
                 "%zu artifact(s) over the %s per-artifact cap sent without content "
                 "(content_omitted), e.g. output/%.60s (%s)",
                 set->omitted_per_file, a, first != NULL ? first->relative_path : "?", b);
  }
  if (set->omitted_total > 0) {
    text_format_bytes(caps->total, a, sizeof(a));
    feedback_add(fb,
                 "%zu artifact(s) sent without content (content_omitted): the response's %s "
                 "of artifact content was used up",
                 set->omitted_total, a);
  }
  if (set->skipped_special > 0)
    feedback_add(fb,
                 "%zu entries in output/ skipped: symlinks, FIFOs, sockets and devices are "
                 "not artifacts",
                 set->skipped_special);
  if (set->skipped_names > 0)
    feedback_add(fb, "%zu files in output/ skipped: name not valid UTF-8 or path over %d bytes",
                 set->skipped_names, ARTIFACT_PATH_MAX);
  if (set->skipped_depth > 0)
    feedback_add(fb, "%zu directories in output/ deeper than %lld levels skipped",
                 set->skipped_depth, (long long)s->artifact_depth);
  if (set->skipped_count > 0)
    feedback_add(fb, "more than %lld files in output/: the rest were not reported",
                 (long long)s->max_artifacts);
}

static int artifact_messages(struct run_scratch *sc, Sandbox__V1__RunCodeResponse *resp) {
  const struct artifact_set *set = &sc->artifacts;
  if (set->n == 0)
    return 0;
  sc->artifact_msgs = calloc(set->n, sizeof(*sc->artifact_msgs));
  sc->artifact_ptrs = calloc(set->n, sizeof(*sc->artifact_ptrs));
  if (sc->artifact_msgs == NULL || sc->artifact_ptrs == NULL)
    return -1;
  for (size_t i = 0; i < set->n; i++) {
    const struct artifact *a = &set->items[i];
    Sandbox__V1__Artifact *m = &sc->artifact_msgs[i];
    sandbox__v1__artifact__init(m);
    m->name = (char *)a->name;
    m->relative_path = a->relative_path;
    m->size = a->size;
    m->mime = (char *)a->mime;
    m->content = (ProtobufCBinaryData){a->content_len, a->content};
    m->content_omitted = a->omitted;
    sc->artifact_ptrs[i] = m;
  }
  resp->n_artifacts = set->n;
  resp->artifacts = sc->artifact_ptrs;
  return 0;
}

/* output/ as the response's artifacts, with feedback on what was left out. */
static void collect_artifacts(struct runner *r, int ws_fd, struct run_scratch *sc,
                              Sandbox__V1__RunCodeResponse *resp) {
  int out = openat(ws_fd, WORKSPACE_OUTPUT, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (out < 0) {
    if (errno != ENOENT)
      feedback_add(&sc->fb, "output/ is not a directory (a symlink?); no artifacts collected");
    return;
  }
  const struct server_settings *s = r->settings;
  struct artifact_caps caps = {
      .max_count = (size_t)s->max_artifacts,
      .max_depth = (size_t)s->artifact_depth,
      .per_file = (uint64_t)s->artifact_bytes,
      .total = (uint64_t)s->artifacts_total_bytes,
  };
  struct sbx_error err;
  int rv = artifacts_collect(out, &caps, &r->mime, &sc->artifacts, &err);
  close(out);
  if (rv < 0) {
    feedback_add(&sc->fb, "artifacts could not be collected: out of memory");
    return;
  }
  if (artifact_messages(sc, resp) < 0)
    feedback_add(&sc->fb, "artifacts could not be sent: out of memory");
  artifact_feedback(s, &caps, &sc->artifacts, &sc->fb);
}

/* A stateless or FILES run's result, as sandboxd_cell left it in the workspace
 * (hostile: a regular file, never followed, bounded), then removed. */
static void read_result(int ws_fd, struct run_scratch *sc) {
  struct stat st;
  struct sbx_error err;
  int fd = safefs_open_file(ws_fd, RUN_RESULT_FILE, &st, &err);
  if (fd < 0)
    return;
  uint8_t *data = NULL;
  size_t len = 0;
  if (st.st_size >= 1 && safefs_pread(fd, 0, RUN_RESULT_MAX + 1, &data, &len, &err) == 0 &&
      len >= 1) {
    sc->result_truncated = data[0] == 'T' || len - 1 > RUN_RESULT_MAX;
    len = len - 1 > RUN_RESULT_MAX ? RUN_RESULT_MAX : len - 1;
    /* Valid UTF-8 for the string field: what is not is replaced. */
    size_t fixed_len = 0;
    char *fixed = text_utf8_repair(data + 1, len, &fixed_len);
    if (fixed != NULL) {
      sc->result_text = (uint8_t *)fixed;
      sc->result_len = fixed_len;
    }
  }
  free(data);
  close(fd);
  unlinkat(ws_fd, RUN_RESULT_FILE, 0);
}

/* A cell that KeyboardInterrupt stopped at a limit, or whose process the
 * OOM killer took, was not killed with its interpreter: the wording of the
 * limit's line is corrected. */
static void interrupted_wording(struct feedback *fb, const char *what) {
  static const char *const killed[] = {"; the program was killed",
                                       "; every process of the run was killed"};
  for (size_t i = 0; fb->n > 0 && i < sizeof killed / sizeof killed[0]; i++) {
    char *line = fb->lines[0], *p = strstr(line, killed[i]);
    if (p == NULL)
      continue;
    char tail[FEEDBACK_LINE_MAX];
    snprintf(tail, sizeof tail, "%s", p + strlen(killed[i]));
    snprintf(p, FEEDBACK_LINE_MAX - (size_t)(p - line), "; %s%s", what, tail);
  }
}

/* An interpreter session's call: what happened to the session's state. */
static void interp_feedback(const struct run_call *call, struct run_scratch *sc) {
  const struct interp_outcome *o = &sc->interp;
  if (!o->ended && sc->result.killed_by != SANDBOX_KILLED_BY_NONE)
    interrupted_wording(&sc->fb, sc->result.killed_by == SANDBOX_KILLED_BY_MEMORY
                                     ? "a process of the cell was killed, the interpreter lives on"
                                     : "KeyboardInterrupt stopped the cell");
  if (o->lost[0] != '\0')
    feedback_add(&sc->fb,
                 "the interpreter's state was lost (%s); this call ran in a fresh one, files kept",
                 o->lost);
  if (o->ended)
    feedback_add(&sc->fb,
                 "the interpreter ended (%s); the next call starts a fresh one, files kept",
                 o->ended_why);
  else if (o->interrupted)
    feedback_add(&sc->fb,
                 "KeyboardInterrupt ended the cell; the interpreter and its state are kept");
}

/* How the run ended, in lines a person or an agent can act on. */
static void run_feedback(const struct run_call *call, struct run_scratch *sc) {
  const struct sandbox_result *res = &sc->result;
  struct feedback *fb = &sc->fb;
  /* The engine reports the limits in force; fall back to what we asked.
   * A compiler that exited non-zero has its own line (compile.c). */
  if (!sc->compile_failed)
    feedback_build(res, res->limits.timeout_ms != 0 ? &res->limits : &call->limits, "limits",
                   "the program", fb);
  else if (res->killed_by != SANDBOX_KILLED_BY_NONE)
    feedback_build(res, &res->limits, "compile_limits", "the compiler", fb);
  if (call->session_created)
    feedback_add(fb, "session %s is new: its workspace started empty", call->req->session_id);
  if (res->killed_by == SANDBOX_KILLED_BY_NONE && res->exit_code != 0)
    feedback_missing_module(res->stderr_data, res->stderr_len, fb);
  if (res->killed_by == SANDBOX_KILLED_BY_TIMEOUT ||
      (res->killed_by == SANDBOX_KILLED_BY_NONE && res->exit_code != 0))
    feedback_network_refused(res->stderr_data, res->stderr_len, fb);
  if (sc->env_built)
    feedback_add(fb,
                 "requirements: installed into a new environment in %.1f s; runs with the "
                 "same requirements reuse it",
                 (double)sc->env_ms / 1000.0);
  else if (sc->pkg_env != NULL && sc->env_ms >= 100)
    feedback_add(fb,
                 "requirements: waited %.1f s for another run's install of the same "
                 "requirements",
                 (double)sc->env_ms / 1000.0);
}

void run_build_response(struct runner *r, const struct run_call *call, int ws_fd,
                        struct run_scratch *sc, Sandbox__V1__RunCodeResponse *resp) {
  const struct sandbox_result *res = &sc->result;
  run_feedback(call, sc);
  run_compile_response(call, sc, resp);
  run_net_feedback(sc, &sc->fb);
  run_net_response(sc, resp);
  if (sc->interp_held) {
    interp_feedback(call, sc);
    resp->result = sc->interp.has_result ? sc->interp.result : "";
    resp->result_truncated = sc->interp.result_truncated;
    resp->state_lost = sc->interp.lost[0] != '\0';
    resp->interpreter_ended = sc->interp.ended;
  } else {
    read_result(ws_fd, sc);
    resp->result = sc->result_text != NULL ? (char *)sc->result_text : "";
    resp->result_truncated = sc->result_truncated;
  }
  if (call->session != NULL)
    resp->session_mode = call->session->interpreter
                             ? SANDBOX__V1__SESSION_MODE__SESSION_MODE_INTERPRETER
                             : SANDBOX__V1__SESSION_MODE__SESSION_MODE_FILES;
  collect_artifacts(r, ws_fd, sc, resp);
  for (size_t i = 0; i < sc->fb.n; i++)
    sc->fb_lines[i] = sc->fb.lines[i];
  resp->run_id = sc->run_id;
  resp->session_id = (char *)call->req->session_id;
  resp->session_created = call->session_created;
  resp->stdout = (ProtobufCBinaryData){res->stdout_len, res->stdout_data};
  resp->stderr = (ProtobufCBinaryData){res->stderr_len, res->stderr_data};
  resp->stdout_truncated = res->stdout_truncated;
  resp->stderr_truncated = res->stderr_truncated;
  resp->killed_by = (Sandbox__V1__KilledBy)res->killed_by; /* the same values: asserted above */
  resp->exit_code = res->exit_code;
  resp->signal = res->signal;
  resp->wall_time_ms = sbx_us_to_ms_ceil(res->wall_time_us);
  resp->cpu_time_ms = res->cpu_time_us / 1000;
  resp->peak_memory_bytes = res->peak_memory_bytes;
  resp->n_feedback = sc->fb.n;
  resp->feedback = sc->fb_lines;
}
