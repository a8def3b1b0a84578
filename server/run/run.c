/* run.c: one RunCode call on a worker slot, in order: the inputs (the
 * requirements' environment, files by URL), the workspace, the engine's
 * run, the response; one log line. Runs with privileges on a worker thread:
 * the workspace is hostile after the run (see workspace.c). Returns the
 * outcome; never answers the call itself. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "killed_by.h"
#include "dedent.h"
#include "log.h"
#include "run_internal.h"
#include "text.h"

static void scratch_free(struct run_scratch *sc) {
  if (sc == NULL)
    return;
  free(sc->argv);
  for (size_t i = 0; sc->env != NULL && i < sc->n_env; i++)
    free(sc->env[i]);
  free(sc->env);
  for (size_t i = 0; sc->downloads != NULL && i < sc->n_files; i++)
    free(sc->downloads[i]);
  free(sc->downloads);
  free(sc->files);
  free(sc->code);
  if (sc->have_result)
    sandbox_result_free(&sc->result);
  if (sc->have_compile)
    sandbox_result_free(&sc->compile);
  artifacts_free(&sc->artifacts);
  free(sc->artifact_msgs);
  free(sc->artifact_ptrs);
  if (sc->pkg_env != NULL)
    envstore_release(sc->store, sc->pkg_env);
  free(sc->result_text);
  interp_outcome_free(&sc->interp);
  free(sc);
}

void run_outcome_free(struct run_outcome *out) {
  scratch_free(out->scratch);
  out->scratch = NULL;
}

/* A Python run's argv: as "python3 main.py" runs outside, the workspace on
 * sys.path, the request's PYTHON* variables honoured. -u only for this
 * interpreter (not its children, as PYTHONUNBUFFERED would): what it
 * printed before a kill reaches the reply. A fresh interpreter runs the
 * script through sandboxd_cell (sandbox.h), which runs it as python3 would
 * and adds the rich results (the last expression's value, figures); a
 * zygote runs it through the same. */
static size_t python_argv(const struct run_call *call, const char **argv) {
  size_t a = 0;
  argv[a++] = "/usr/bin/python3";
  argv[a++] = "-u";
  if (!run_forks_zygote(call)) {
    argv[a++] = "-c";
    argv[a++] = SANDBOX_CELL_LOADER;
    argv[a++] = "script";
  }
  argv[a++] = "/workspace/" WORKSPACE_SCRIPT;
  return a;
}

/* Whether the request sets the variable of entry ("KEY=VALUE"). */
static bool request_sets(const Sandbox__V1__RunCodeRequest *req, const char *entry) {
  size_t n = strcspn(entry, "=");
  for (size_t i = 0; i < req->n_env; i++)
    if (strlen(req->env[i]->key) == n && strncmp(req->env[i]->key, entry, n) == 0)
      return true;
  return false;
}

/* The environment: a manifest runtime's own variables but those the
 * request sets itself (it overrides them), then the request's; for
 * Python, figures shown or left open come
 * back as artifacts (sandboxd_cell's backend) unless the request picks a
 * backend of its own. Nothing of the server's environment reaches a run
 * (the engine's minimum environment, docs/ENGINE.md). */
static int fill_env(const struct run_call *call, struct run_scratch *sc, struct sbx_error *err) {
  const Sandbox__V1__RunCodeRequest *req = call->req;
  const struct runtime *rt = call->runtime;
  bool python = runtime_is_python(rt), mpl_backend = false;
  for (size_t i = 0; !python && i < rt->manifest.n_env; i++)
    if (!request_sets(req, rt->manifest.env[i]) &&
        (sc->env[sc->n_env++] = strdup(rt->manifest.env[i])) == NULL)
      return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "run");
  for (size_t i = 0; i < req->n_env; i++, sc->n_env++) {
    mpl_backend |= strcmp(req->env[i]->key, "MPLBACKEND") == 0;
    if (asprintf(&sc->env[sc->n_env], "%s=%s", req->env[i]->key, req->env[i]->value) < 0) {
      sc->env[sc->n_env] = NULL;
      return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "run");
    }
  }
  if (python && !mpl_backend &&
      (sc->env[sc->n_env++] = strdup("MPLBACKEND=module://sandboxd_inline")) == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "run");
  return 0;
}

/* The program's argv and environment, the code (a Python script
 * dedented; another runtime's as it came), the inline files. */
static int scratch_fill(const struct run_call *call, struct run_scratch *sc,
                        struct sbx_error *err) {
  const Sandbox__V1__RunCodeRequest *req = call->req;
  const struct runtime *rt = call->runtime;
  bool python = runtime_is_python(rt);
  size_t n_code = strlen(req->code);
  sc->n_files = req->n_files;
  sc->argv = calloc(req->n_args + 7 + RUNTIME_ARGV_MAX, sizeof(char *));
  sc->env = calloc(req->n_env + 2 + RUNTIME_ENV_MAX + run_net_env_count(call), sizeof(char *));
  sc->files = calloc(req->n_files + 1, sizeof(*sc->files));
  sc->downloads = calloc(req->n_files + 1, sizeof(*sc->downloads));
  sc->code = python ? dedent(req->code, n_code, &sc->code_len) : strndup(req->code, n_code);
  if (!python)
    sc->code_len = n_code;
  if (sc->argv == NULL || sc->env == NULL || sc->files == NULL || sc->downloads == NULL ||
      sc->code == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "run");
  size_t a = 0;
  if (python)
    a = python_argv(call, sc->argv);
  const struct runtime_command *cmd =
      call->check == RUN_CHECK_VERSION ? &rt->manifest.version_command : &rt->manifest.run;
  for (size_t i = 0; !python && i < cmd->argc; i++)
    sc->argv[a++] = cmd->argv[i];
  for (size_t i = 0; i < req->n_args; i++)
    sc->argv[a++] = req->args[i];
  if (fill_env(call, sc, err) < 0)
    return -1;
  if (run_net_env(call, sc, err) < 0)
    return -1;
  for (size_t i = 0; i < req->n_files; i++)
    sc->files[i] = (struct workspace_file){req->files[i]->path, req->files[i]->content.data,
                                           req->files[i]->content.len};
  return 0;
}

/* A run carried out: by what ended it, under the caller's tenant (its
 * row; the unlabelled counts when it has none). */
static void count_run(struct runner *r, const struct run_call *call,
                      const struct sandbox_result *res) {
  if (call->check != RUN_CHECK_NONE) /* the server's own, at start */
    return;
  struct run_stats *st = &r->stats;
  atomic_fetch_add(&r->runs_total, 1);
  unsigned k = (unsigned)res->killed_by;
  int tenant = call->tenant != NULL ? (int)call->tenant->index : -1;
  if (k < KILLED_BY_N && !tenant_counts_add(&st->by_tenant, KILLED_BY_N, tenant, k))
    atomic_fetch_add_explicit(&st->by_killed_by[k], 1, memory_order_relaxed);
  stats_histogram_observe_us(&st->wall, res->wall_time_us);
  stats_histogram_observe_us(&st->cpu, res->cpu_time_us);
}

/* An INTERPRETER session's call: the code as a cell of its living
 * interpreter, started now over the session's workspace when it has none. */
static int run_in_interpreter(struct runner *r, const struct run_call *call, struct run_scratch *sc,
                              const char *workspace_dir, struct sbx_error *err) {
  const Sandbox__V1__RunCodeRequest *req = call->req;
  struct interp_start start = {
      .workspace_dir = workspace_dir,
      .env = (const char *const *)sc->env,
      .n_env = sc->n_env,
      .limits = call->limits,
      .group = call->session->group,
      .allow = call->session->egress_allow,
      .run_id = sc->run_id,
      .tenant = call->tenant != NULL ? call->tenant->name : "-",
      .tenant_index = call->tenant != NULL ? (int)call->tenant->index : -1,
      .zygote = run_runtime_is_zygote(call),
  };
  struct interp_cell cell = {
      .code = sc->code,
      .code_len = sc->code_len,
      .args = (const char *const *)req->args,
      .n_args = req->n_args,
      .env = (const char *const *)sc->env,
      .n_env = sc->n_env,
      .stdin_data = req->stdin.data,
      .stdin_len = req->stdin.len,
      .limits = call->limits,
      .stream = call->stream,
  };
  if (interp_run(&r->interps, call->session, &start, &cell, &sc->result, &sc->interp, err) < 0)
    return -1;
  sc->have_result = true;
  /* Started fresh, not from the zygote: a door to the proxy is its own
   * network namespace (interp.c). */
  sc->zygote_as_cold =
      start.zygote && sc->interp.started && start.allow != NULL && start.allow->n > 0;
  sc->has_egress = sc->interp.has_egress;
  sc->egress = sc->interp.egress;
  count_run(r, call, &sc->result);
  return 0;
}

/* The workspace written (code, input files, output/), the engine's run. */
static int run_in_workspace(struct runner *r, unsigned slot, const struct run_call *call,
                            struct run_scratch *sc, int ws_fd, const char *dir_name,
                            struct sbx_error *err) {
  /* An interpreter session's files belong to its interpreter's uid. */
  uid_t uid = (uid_t)(r->settings->uid_base + (sc->interp_held ? sc->interp_slot : slot));
  /* A stale result (an earlier run's, in a session) is never this run's. */
  unlinkat(ws_fd, RUN_RESULT_FILE, 0);
  const struct runtime *rt = call->runtime;
  if (workspace_prepare(ws_fd, uid, (gid_t)uid,
                        runtime_is_python(rt) ? WORKSPACE_SCRIPT : rt->manifest.file, sc->code,
                        sc->code_len, sc->files, call->req->n_files, err) < 0) {
    int e = err->errnum;
    if (e == ENOSPC || e == EDQUOT || e == EFBIG)
      return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                           "%s (the files do not fit in the workspace's quota, "
                           "limits.disk_bytes)",
                           err->msg);
    return -1;
  }
  /* The inputs are in the workspace now: drop the downloaded copies. */
  for (size_t i = 0; i < sc->n_files; i++) {
    free(sc->downloads[i]);
    sc->downloads[i] = NULL;
  }
  char workspace_dir[PATH_MAX + 64];
  snprintf(workspace_dir, sizeof(workspace_dir), "%s/%s", r->workspace_root, dir_name);
  /* The runtime's read-only binds (its manifest's), then the requirements'
   * environment: read-only over the interpreter's /usr/local site
   * directory, before Debian's own packages on sys.path. */
  struct sandbox_mount mounts[RUNTIME_MOUNTS_MAX + 1];
  size_t n_mounts = 0;
  for (size_t i = 0; !runtime_is_python(rt) && i < rt->manifest.n_mounts; i++)
    mounts[n_mounts++] = (struct sandbox_mount){rt->manifest.mounts[i], rt->manifest.mounts[i]};
  if (sc->pkg_env != NULL)
    mounts[n_mounts++] =
        (struct sandbox_mount){.source = sc->env_site, .target = r->installer.info.site_dir};
  /* The environment's id as event=run's env= shows it: GetInfo shows it
   * with the zygote started for the environment. */
  char env_id[13];
  snprintf(env_id, sizeof(env_id), "%.12s", sc->pkg_env != NULL ? sc->pkg_env->key : "");
  struct sandbox_spec spec = {
      .argv = sc->argv,
      .env = (const char *const *)sc->env,
      .workspace_dir = workspace_dir,
      .stdin_data = call->req->stdin.data,
      .stdin_len = call->req->stdin.len,
      .mounts = n_mounts > 0 ? mounts : NULL,
      .n_mounts = n_mounts,
      .limits = call->limits,
      .group = call->session != NULL ? call->session->group : 0,
      .stream = call->stream,
      .zygote = run_forks_zygote(call),
      .environment = env_id,
  };
  if (sc->interp_held)
    return run_in_interpreter(r, call, sc, workspace_dir, err);
  /* allow_net: the run's own namespace, with only the proxy in it. A
   * zygote's runs share the zygote's namespace, so such a run is a fresh
   * interpreter (its feedback says so). */
  if (call->req->n_allow_net > 0) {
    if (run_net_open(r, call, sc, err) < 0)
      return -1;
    sc->zygote_as_cold = run_runtime_is_zygote(call);
    spec.network = SANDBOX_NETWORK_PROXY;
    spec.netns_fd = sc->lease->netns_fd;
  }
  struct sandbox_error se = {0};
  /* The slot's zygote for runs without extra mounts, started here when it
   * is not running: when it cannot start (a --zygote-preload module that
   * does not import), that is the server's state, not a fault of the run,
   * and the engine's message says why. A requirements run's zygote is
   * started by sandbox_run, for its environment. */
  if (spec.zygote && spec.n_mounts == 0 && sandbox_zygote_warm(r->engine, slot, &se) < 0)
    return sbx_error_from_engine(err, SBX_FAILED_PRECONDITION, &se,
                                 "runtime " RUNTIME_PYTHON_ZYGOTE
                                 ": the zygote could not start, the code did not run");
  if (run_compiles(call) && run_compile(r, slot, call, sc, &spec, err) < 0) {
    run_net_close(r, sc);
    return -1;
  }
  if (sc->compile_failed) { /* nothing more to run: the reply says why */
    run_net_close(r, sc);
    count_run(r, call, &sc->result);
    return 0;
  }
  int rc = sandbox_run(r->engine, slot, &spec, &sc->result, &se);
  run_net_close(r, sc); /* every process of the run is gone */
  if (rc < 0)
    return sbx_error_from_engine(err, SBX_INTERNAL, &se,
                                 "sandbox setup failed, the code did not run");
  sc->have_result = true;
  count_run(r, call, &sc->result);
  return 0;
}

/* The session's mode: the creating run's, and no other for later runs. */
static int run_session_mode(const struct run_call *call, struct sbx_error *err) {
  struct session *s = call->session;
  Sandbox__V1__SessionMode want = call->req->session_mode;
  if (s == NULL)
    return 0;
  bool interp = want == SANDBOX__V1__SESSION_MODE__SESSION_MODE_INTERPRETER;
  if (call->session_created) {
    s->interpreter = interp;
    return 0;
  }
  if (want == SANDBOX__V1__SESSION_MODE__SESSION_MODE_UNSPECIFIED || s->interpreter == interp)
    return 0;
  return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                       "session_mode: session %s is a%s session (the run that created it chose "
                       "so); leave session_mode unset, or close the session first",
                       s->id, s->interpreter ? "n INTERPRETER" : " FILES");
}

/* Whether the run was cancelled (its cancel fd is readable). */
static bool cancel_pending(const struct run_call *call) {
  if (call->stream == NULL || call->stream->cancel_fd < 0)
    return false;
  struct pollfd p = {.fd = call->stream->cancel_fd, .events = POLLIN};
  return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

/* The run itself, from inputs to response; -1 with err when it could not
 * start. */
static int run_steps(struct runner *r, unsigned slot, const struct run_call *call,
                     struct run_scratch *sc, Sandbox__V1__RunCodeResponse *resp,
                     struct sbx_error *err) {
  /* The requirements first: when the install fails, nothing else happens. */
  if (scratch_fill(call, sc, err) < 0 || run_session_mode(call, err) < 0 ||
      run_prepare_requirements(r, slot, call, sc, err) < 0 ||
      run_fetch_files(r, call, sc, err) < 0 ||
      ((call->session == NULL || !call->session->interpreter) &&
       run_check_session_memory(r, call, err) < 0))
    return -1;
  /* Installing and downloading take a while: a cancel during them ends the
   * run here, before its code starts. */
  if (cancel_pending(call))
    return sbx_error_set(err, SBX_CANCELLED, 0,
                         "the run was cancelled (CancelRun) before its code started");
  /* An interpreter session's call runs in its interpreter's slot (its uid
   * owns the session's files). */
  if (call->session != NULL && call->session->interpreter) {
    if (run_net_session(call, err) < 0)
      return -1;
    if (interp_acquire(&r->interps, call->session, call->max_interpreters, &sc->interp_slot,
                       &sc->interp, err) < 0)
      return -1;
    sc->interp_held = true;
  }
  char dir_name[32];
  int ws_fd = run_acquire_workspace(r, sc->interp_held ? sc->interp_slot : slot, call, dir_name,
                                    sizeof(dir_name), err);
  if (ws_fd < 0) {
    if (sc->interp_held)
      interp_release(&r->interps, call->session);
    return sbx_error_wrap(err, "workspace");
  }
  int rc = run_in_workspace(r, slot, call, sc, ws_fd, dir_name, err);
  if (sc->interp_held)
    interp_release(&r->interps, call->session);
  if (rc == 0) /* every process of the run is gone: output/ holds what it left */
    run_build_response(r, call, ws_fd, sc, resp);
  /* Before the reply, so nothing of a session-less run outlives it. */
  if (call->session == NULL)
    run_release_slot_workspace(r, slot);
  return rc;
}

/* The caller's request id as the log may carry it (printable, no quotes). */
static void log_request_id(const struct run_call *call, char *out, size_t len) {
  const char *id = call->request_id != NULL ? call->request_id : "";
  text_printable(id, strlen(id), out, len, false);
}

/* The tenant's name (a-z 0-9 . _ -: safe unquoted), "-" when none. */
static const char *log_tenant(const struct run_call *call) {
  return call->tenant != NULL ? call->tenant->name : "-";
}

static void log_success(const struct run_call *call, unsigned slot, const struct run_scratch *sc,
                        uint64_t queue_ms) {
  const struct sandbox_result *res = &sc->result;
  char rid[72];
  log_request_id(call, rid, sizeof(rid));
  log_line("run",
           "run_id=%s tenant=%s request_id=\"%s\" method=%s runtime=%s peer=%s slot=%u session=%s "
           "status=OK "
           "killed_by=%s exit_code=%d signal=%d "
           "wall_ms=%llu cpu_ms=%llu peak_memory_bytes=%llu stdout_bytes=%zu stderr_bytes=%zu "
           "artifacts=%zu env=%.12s env_ms=%llu queue_ms=%llu duration_ms=%llu",
           sc->run_id, log_tenant(call), rid, call->method, call->runtime->name,
           call->peer != NULL ? call->peer : "?", slot,
           call->req->session_id[0] != '\0' ? call->req->session_id : "-",
           killed_by_name(res->killed_by), res->exit_code, res->signal,
           (unsigned long long)sbx_us_to_ms_ceil(res->wall_time_us),
           (unsigned long long)(res->cpu_time_us / 1000),
           (unsigned long long)res->peak_memory_bytes, res->stdout_len, res->stderr_len,
           sc->artifacts.n, sc->pkg_env != NULL ? sc->pkg_env->key : "-",
           (unsigned long long)sc->env_ms, (unsigned long long)queue_ms,
           (unsigned long long)(sbx_monotonic_ms() - call->received_ms));
}

/* The log gets the message's first line, printable, so it stays one logfmt
 * line (a failed install's message holds pip's output). */
void run_log_failure(const struct run_call *call, int slot, const struct sbx_error *err) {
  char first[300], slot_text[16] = "-";
  if (slot >= 0)
    snprintf(slot_text, sizeof(slot_text), "%d", slot);
  text_printable(err->msg, strcspn(err->msg, "\n"), first, sizeof(first), false);
  char rid[72];
  log_request_id(call, rid, sizeof(rid));
  log_line("run",
           "run_id=%s tenant=%s request_id=\"%s\" method=%s runtime=%s peer=%s slot=%s status=%s "
           "duration_ms=%llu error=\"%s\"",
           call->run_id, log_tenant(call), rid, call->method,
           call->runtime != NULL ? call->runtime->name : "-", call->peer != NULL ? call->peer : "?",
           slot_text, sbx_code_name(err->code),
           (unsigned long long)(sbx_monotonic_ms() - call->received_ms), first);
}

void run_code(struct runner *r, unsigned slot, const struct run_call *call,
              struct run_outcome *out) {
  uint64_t queue_ms = sbx_monotonic_ms() - call->received_ms;
  /* The server's own checks at start are neither counted nor logged as
   * runs: runtime_check.c logs each runtime's outcome. */
  bool user = call->check == RUN_CHECK_NONE;
  if (user)
    stats_histogram_observe_us(&r->stats.queue_wait, queue_ms * 1000u);
  memset(out, 0, sizeof(*out));
  sandbox__v1__run_code_response__init(&out->resp);
  struct run_scratch *sc = calloc(1, sizeof(*sc));
  const char *run_id = call->run_id;
  if (sc == NULL) {
    sbx_error_set(&out->err, SBX_INTERNAL, ENOMEM, "run");
    run_log_failure(call, (int)slot, &out->err);
    return;
  }
  snprintf(sc->run_id, sizeof(sc->run_id), "%s", run_id);
  out->scratch = sc;
  if (run_steps(r, slot, call, sc, &out->resp, &out->err) < 0) {
    if (user)
      run_log_failure(call, (int)slot, &out->err);
    run_outcome_free(out);
    return;
  }
  out->ok = true;
  if (user)
    log_success(call, slot, sc, queue_ms);
}
