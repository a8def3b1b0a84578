/* run.c: one RunCode call on a worker slot: make the workspace, build the
 * engine's spec, run, map the result to RunCodeResponse, remove the
 * workspace, log one line. Runs with privileges on a worker thread: the
 * workspace is hostile after the run (see workspace.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uuid/uuid.h>

#include "feedback.h"
#include "log.h"
#include "server.h"
#include "validate.h"
#include "workspace.h"

static uint64_t ms_since(const struct timespec *start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)(now.tv_sec - start->tv_sec) * 1000u +
         (uint64_t)((now.tv_nsec - start->tv_nsec) / 1000000);
}

static Sandbox__V1__KilledBy killed_by_to_proto(enum sandbox_killed_by k) {
  switch (k) {
  case SANDBOX_KILLED_BY_TIMEOUT:
    return SANDBOX__V1__KILLED_BY__KILLED_BY_TIMEOUT;
  case SANDBOX_KILLED_BY_MEMORY:
    return SANDBOX__V1__KILLED_BY__KILLED_BY_MEMORY;
  case SANDBOX_KILLED_BY_OUTPUT_LIMIT:
    return SANDBOX__V1__KILLED_BY__KILLED_BY_OUTPUT_LIMIT;
  case SANDBOX_KILLED_BY_SIGNAL:
    return SANDBOX__V1__KILLED_BY__KILLED_BY_SIGNAL;
  case SANDBOX_KILLED_BY_NONE:
  default:
    return SANDBOX__V1__KILLED_BY__KILLED_BY_NONE;
  }
}

/* Everything a run allocates, freed in one place. */
struct run_scratch {
  const char **argv;
  char **env;
  size_t n_env;
  struct workspace_file *files;
};

static void run_scratch_free(struct run_scratch *s) {
  free(s->argv);
  for (size_t i = 0; i < s->n_env; i++)
    free(s->env[i]);
  free(s->env);
  free(s->files);
}

static void fail_run(struct server_call *call, const char *run_id, unsigned slot, sbx_code code,
                     const char *message) {
  call_set_reply(call, code, message, NULL);
  log_line("run", "run_id=%s slot=%u status=%s duration_ms=%llu error=\"%s\"", run_id, slot,
           sbx_code_name(code), (unsigned long long)ms_since(&call->received), message);
}

void run_code_execute(struct server *srv, unsigned slot, struct server_call *call) {
  const Sandbox__V1__RunCodeRequest *req = (const Sandbox__V1__RunCodeRequest *)call->input;
  uint64_t queue_ms = ms_since(&call->received);
  char run_id[RUN_ID_MAX + 1];
  if (req->run_id[0] != '\0') {
    snprintf(run_id, sizeof(run_id), "%s", req->run_id);
  } else {
    uuid_t uu;
    uuid_generate_random(uu);
    uuid_unparse_lower(uu, run_id);
  }

  struct run_scratch scratch = {0};
  scratch.argv = calloc(req->n_args + 4, sizeof(char *));
  scratch.env = calloc(req->n_env + 1, sizeof(char *));
  scratch.files = calloc(req->n_files + 1, sizeof(*scratch.files));
  if (scratch.argv == NULL || scratch.env == NULL || scratch.files == NULL) {
    run_scratch_free(&scratch);
    fail_run(call, run_id, slot, SBX_INTERNAL, "out of memory");
    return;
  }
  scratch.argv[0] = "/usr/bin/python3";
  scratch.argv[1] = "-I";
  scratch.argv[2] = "/workspace/main.py";
  for (size_t i = 0; i < req->n_args; i++)
    scratch.argv[3 + i] = req->args[i];
  for (size_t i = 0; i < req->n_env; i++) {
    if (asprintf(&scratch.env[i], "%s=%s", req->env[i]->key, req->env[i]->value) < 0) {
      scratch.env[i] = NULL;
      run_scratch_free(&scratch);
      fail_run(call, run_id, slot, SBX_INTERNAL, "out of memory");
      return;
    }
    scratch.n_env++;
  }
  for (size_t i = 0; i < req->n_files; i++)
    scratch.files[i] = (struct workspace_file){req->files[i]->path, req->files[i]->content.data,
                                               req->files[i]->content.len};

  uid_t uid = (uid_t)(srv->settings.uid_base + slot);
  char msg[512];
  if (workspace_create(srv->workspace_root_fd, run_id, uid, (gid_t)uid, req->code, scratch.files,
                       req->n_files, msg, sizeof(msg)) < 0) {
    bool in_use = errno == EEXIST;
    run_scratch_free(&scratch);
    if (in_use) {
      snprintf(msg, sizeof(msg), "run_id %s is in use by another run; nothing ran", run_id);
      fail_run(call, run_id, slot, SANDBOX__V1__CODE__ALREADY_EXISTS, msg);
    } else {
      fail_run(call, run_id, slot, SBX_INTERNAL, msg);
    }
    return;
  }
  char workspace_dir[PATH_MAX + RUN_ID_MAX + 2];
  snprintf(workspace_dir, sizeof(workspace_dir), "%s/%s", srv->workspace_root, run_id);

  struct sandbox_spec spec = {
      .argv = scratch.argv,
      .env = (const char *const *)scratch.env,
      .workspace_dir = workspace_dir,
      .cwd = NULL,
      .stdin_data = req->stdin.data,
      .stdin_len = req->stdin.len,
      .mounts = NULL,
      .n_mounts = 0,
      .limits = call->limits,
  };
  struct sandbox_result result;
  memset(&result, 0, sizeof(result));
  struct sandbox_error err = {0};
  int rc = sandbox_run(srv->engine, slot, &spec, &result, &err);

  char rm_msg[512];
  if (workspace_remove(srv->workspace_root_fd, run_id, rm_msg, sizeof(rm_msg)) < 0)
    log_line("workspace_remove_failed", "run_id=%s error=\"%s\"", run_id, rm_msg);
  run_scratch_free(&scratch);

  if (rc < 0) {
    char failure[sizeof(err.msg) + 64];
    snprintf(failure, sizeof(failure), "sandbox setup failed, the code did not run: %s", err.msg);
    fail_run(call, run_id, slot, SBX_INTERNAL, failure);
    return;
  }
  atomic_fetch_add(&srv->runs_total, 1);

  struct feedback fb;
  /* The engine reports the limits in force; fall back to what we asked. */
  feedback_build(&result, result.limits.timeout_ms != 0 ? &result.limits : &call->limits, &fb);
  char *fb_lines[FEEDBACK_MAX_LINES];
  for (size_t i = 0; i < fb.n; i++)
    fb_lines[i] = fb.lines[i];

  Sandbox__V1__RunCodeResponse resp = SANDBOX__V1__RUN_CODE_RESPONSE__INIT;
  resp.run_id = run_id;
  resp.session_id = (char *)req->session_id;
  resp.stdout = (ProtobufCBinaryData){result.stdout_len, result.stdout_data};
  resp.stderr = (ProtobufCBinaryData){result.stderr_len, result.stderr_data};
  resp.stdout_truncated = result.stdout_truncated;
  resp.stderr_truncated = result.stderr_truncated;
  resp.killed_by = killed_by_to_proto(result.killed_by);
  resp.exit_code = result.exit_code;
  resp.signal = result.signal;
  resp.wall_time_ms = result.wall_time_us / 1000;
  resp.cpu_time_ms = result.cpu_time_us / 1000;
  resp.peak_memory_bytes = result.peak_memory_bytes;
  resp.n_feedback = fb.n;
  resp.feedback = fb_lines;
  call_set_reply(call, SBX_OK, "", &resp.base);

  log_line("run",
           "run_id=%s slot=%u status=OK killed_by=%s exit_code=%d signal=%d wall_ms=%llu "
           "cpu_ms=%llu peak_memory_bytes=%llu stdout_bytes=%zu stderr_bytes=%zu queue_ms=%llu "
           "duration_ms=%llu",
           run_id, slot, sandbox_killed_by_name(result.killed_by), result.exit_code, result.signal,
           (unsigned long long)(result.wall_time_us / 1000),
           (unsigned long long)(result.cpu_time_us / 1000),
           (unsigned long long)result.peak_memory_bytes, result.stdout_len, result.stderr_len,
           (unsigned long long)queue_ms, (unsigned long long)ms_since(&call->received));
  sandbox_result_free(&result);
}
