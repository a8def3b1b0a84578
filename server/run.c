/* run.c: one RunCode call on a worker slot: make the workspace, build the
 * engine's spec, run, map the result to RunCodeResponse, remove the
 * workspace, log one line. Runs with privileges on a worker thread: the
 * workspace is hostile after the run (see workspace.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <uuid/uuid.h>

#include <fcntl.h>
#include <unistd.h>

#include "artifacts.h"
#include "dedent.h"
#include "download.h"
#include "feedback.h"
#include "install.h"
#include "log.h"
#include "requirements.h"
#include "server.h"
#include "text.h"
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
  uint8_t **downloads; /* bodies of files by URL, index as files */
  size_t n_files;
  char *code;
  size_t code_len;
  struct artifact_set artifacts;
  Sandbox__V1__Artifact *artifact_msgs;
  Sandbox__V1__Artifact **artifact_ptrs;
  /* The requirements' environment, held from the store until the run is
   * over (an environment in use is never evicted). */
  struct envstore *store;
  struct envstore_env *pkg_env;
  char env_site[PATH_MAX];
  bool env_built;  /* this run built it */
  uint64_t env_ms; /* time spent building or waiting for another's build */
};

static void run_scratch_free(struct run_scratch *s) {
  free(s->argv);
  for (size_t i = 0; s->env != NULL && i < s->n_env; i++)
    free(s->env[i]);
  free(s->env);
  if (s->downloads != NULL)
    for (size_t i = 0; i < s->n_files; i++)
      free(s->downloads[i]);
  free(s->downloads);
  free(s->files);
  free(s->code);
  artifacts_free(&s->artifacts);
  free(s->artifact_msgs);
  free(s->artifact_ptrs);
  if (s->pkg_env != NULL)
    envstore_release(s->store, s->pkg_env);
  s->pkg_env = NULL;
}

static void fail_run(struct server_call *call, const char *run_id, unsigned slot, sbx_code code,
                     const char *message) {
  call_set_reply(call, code, message, NULL);
  log_line("run", "run_id=%s slot=%u status=%s duration_ms=%llu error=\"%s\"", run_id, slot,
           sbx_code_name(code), (unsigned long long)ms_since(&call->received), message);
}

/* For answers that hold pip's output: the reply gets all of it, the log line
 * the first line, quotes replaced, so it stays one logfmt line. */
static void fail_run_multiline(struct server_call *call, const char *run_id, unsigned slot,
                               sbx_code code, const char *message) {
  call_set_reply(call, code, message, NULL);
  char first[300];
  text_printable(message, strcspn(message, "\n"), first, sizeof(first), false);
  log_line("run", "run_id=%s slot=%u status=%s duration_ms=%llu error=\"%s\"", run_id, slot,
           sbx_code_name(code), (unsigned long long)ms_since(&call->received), first);
}

/* The environment for the request's requirements: from the store, or built
 * now on this slot (other runs asking for the same new set wait for this
 * build; see envstore.h). Returns SBX_OK with scratch->env set (NULL without
 * requirements), or the code to answer with msg. */
static sbx_code prepare_requirements(struct server *srv, unsigned slot,
                                     const Sandbox__V1__RunCodeRequest *req,
                                     struct run_scratch *scratch, char *msg, size_t msglen) {
  if (req->n_requirements == 0)
    return SBX_OK;
  struct requirement_set set;
  char why[512];
  if (requirement_set_build((const char *const *)req->requirements, req->n_requirements,
                            srv->settings.requirements_allow_urls != 0, &set, why,
                            sizeof(why)) < 0) {
    snprintf(msg, msglen, "%s", why); /* validation passed it: only out of memory */
    return SBX_INTERNAL;
  }
  char key[REQUIREMENT_KEY_HEX + 1];
  char *material = NULL;
  if (requirement_key(&set, srv->install.key_context, key, &material) < 0) {
    requirement_set_free(&set);
    snprintf(msg, msglen, "requirements: could not compute the environment's key");
    return SBX_INTERNAL;
  }
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  struct envstore_env *env = NULL;
  sbx_code code = SBX_OK;
  switch (envstore_acquire(&srv->store, key, &env, &code, msg, msglen)) {
  case ENVSTORE_USE:
    scratch->pkg_env = env;
    break;
  case ENVSTORE_BUILD:
    code = install_build(srv, slot, &set, env, material, msg, msglen);
    if (code == SBX_OK) {
      scratch->pkg_env = env;
      scratch->env_built = true;
    }
    break;
  case ENVSTORE_ERROR:
    break;
  }
  free(material);
  requirement_set_free(&set);
  if (scratch->pkg_env != NULL) {
    scratch->store = &srv->store;
    scratch->env_ms = ms_since(&t0);
    envstore_site_path(&srv->store, scratch->pkg_env, scratch->env_site, sizeof(scratch->env_site));
  }
  return code;
}

/* Downloads every file given by URL. Returns SBX_OK or FAILED_PRECONDITION
 * with msg naming the URL and the reason. */
static sbx_code fetch_files(struct server *srv, const Sandbox__V1__RunCodeRequest *req,
                            const struct sandbox_limits *limits, struct run_scratch *scratch,
                            char *msg, size_t msglen) {
  uint64_t total = 0;
  for (size_t i = 0; i < req->n_files; i++)
    if (req->files[i]->source_case == SANDBOX__V1__FILE__SOURCE_CONTENT)
      total += req->files[i]->content.len;
  for (size_t i = 0; i < req->n_files; i++) {
    const Sandbox__V1__File *f = req->files[i];
    if (f->source_case != SANDBOX__V1__FILE__SOURCE_URL)
      continue;
    uint64_t room = limits->tmp_bytes > total ? limits->tmp_bytes - total : 0;
    uint64_t cap = (uint64_t)srv->settings.max_file_bytes;
    struct download_policy policy = download_policy_from(&srv->settings, cap < room ? cap : room);
    char reason[512], url[300];
    size_t len;
    if (download_fetch(&policy, f->url, &scratch->downloads[i], &len, reason, sizeof(reason)) < 0) {
      text_printable(f->url, strlen(f->url), url, sizeof(url), false);
      snprintf(msg, msglen, "files[%zu].url %s: download failed: %s; nothing ran", i, url, reason);
      return SBX_FAILED_PRECONDITION;
    }
    scratch->files[i].data = scratch->downloads[i];
    scratch->files[i].len = len;
    total += len;
  }
  return SBX_OK;
}

/* The interpreter needs this much beside a session's files to start. */
#define SESSION_MEMORY_HEADROOM (16ull << 20)

/* A session's files live in memory and count against its runs' memory
 * limit (its group): refuse a run that could not even start beside them. */
static int session_memory_check(struct server *srv, const struct server_call *call, char *msg,
                                size_t msglen) {
  uint64_t used = 0, limit = call->limits.memory_bytes;
  struct sandbox_error err = {0};
  if (sandbox_group_memory(srv->engine, call->session->group, &used, &err) < 0)
    return 0; /* no figure: the run's own limit still holds */
  if (used + SESSION_MEMORY_HEADROOM <= limit)
    return 0;
  char u[32], l[32], h[32];
  feedback_format_bytes(used, u, sizeof(u));
  feedback_format_bytes(limit, l, sizeof(l));
  feedback_format_bytes(SESSION_MEMORY_HEADROOM, h, sizeof(h));
  snprintf(msg, msglen,
           "limits.memory_bytes: the session's files take %s of memory (a session's workspace "
           "lives in memory and counts against its runs' memory), which leaves less than %s of "
           "the %s this run asks for; ask for more memory_bytes or remove files; nothing ran",
           u, h, l);
  return -1;
}

/* The workspace of this run: the slot's tmpfs, or the session's (mounted
 * by its first run, handed to this slot's uid when another slot ran it
 * last). Returns its fd (owned by the slot or the session) or -1 with
 * *code and msg. */
static int acquire_workspace(struct server *srv, unsigned slot, struct server_call *call,
                             uid_t uid, char *dir_name, size_t dir_len, sbx_code *code, char *msg,
                             size_t msglen) {
  uint64_t quota = call->limits.tmp_bytes; /* disk_bytes: every tmpfs of the run */
  uint64_t inodes = (uint64_t)srv->settings.workspace_inodes;
  struct session *s = call->session;
  *code = SBX_INTERNAL;
  if (s == NULL) {
    struct slot_workspace *w = &srv->slot_ws[slot];
    if (w->fd < 0) { /* an earlier remount failed: try again */
      w->fd = workspace_mount(srv->workspace_root_fd, srv->workspace_root, w->name, quota, inodes,
                              uid, (gid_t)uid, msg, msglen);
      if (w->fd < 0)
        return -1;
      w->size = quota;
    }
    if (w->size != quota) {
      if (workspace_resize(srv->workspace_root, w->name, quota, inodes, msg, msglen) < 0)
        return -1;
      w->size = quota;
    }
    snprintf(dir_name, dir_len, "%s", w->name);
    return w->fd;
  }
  snprintf(dir_name, dir_len, "%s", s->dir);
  if (s->fd < 0) {
    /* Ended sessions first: their memory is what this one may need. */
    session_reap(&srv->sessions, srv->workspace_root_fd, srv->workspace_root);
    struct sandbox_error gerr = {0};
    uint64_t group = 0;
    if (sandbox_group_new(srv->engine, &group, &gerr) < 0) {
      snprintf(msg, msglen, "session memory group: %s", gerr.msg);
      return -1;
    }
    int fd = workspace_mount(srv->workspace_root_fd, srv->workspace_root, s->dir, quota, inodes,
                             uid, (gid_t)uid, msg, msglen);
    if (fd < 0) {
      sandbox_group_free(srv->engine, group);
      return -1;
    }
    s->group = group;
    session_set_workspace(&srv->sessions, s, fd, uid, quota);
    return fd;
  }

  /* A run that asks for a quota gets it: the session's tmpfs is resized,
   * unless its files already use more. Without disk_bytes it stays. */
  const Sandbox__V1__RunCodeRequest *req = (const Sandbox__V1__RunCodeRequest *)call->input;
  if (req != NULL && req->limits != NULL && req->limits->disk_bytes > 0 && s->quota != quota) {
    struct statvfs st;
    if (fstatvfs(s->fd, &st) < 0) {
      snprintf(msg, msglen, "session workspace: %s", strerror(errno));
      return -1;
    }
    uint64_t used = (uint64_t)(st.f_blocks - st.f_bfree) * st.f_frsize;
    if (used > quota) {
      char want[32], have[32];
      feedback_format_bytes(quota, want, sizeof(want));
      feedback_format_bytes(used, have, sizeof(have));
      *code = SBX_FAILED_PRECONDITION;
      snprintf(msg, msglen,
               "limits.disk_bytes: the session's files already use %s, more than the %s this "
               "run asks for; ask for more, or remove files first; nothing ran",
               have, want);
      return -1;
    }
    if (workspace_resize(srv->workspace_root, s->dir, quota, inodes, msg, msglen) < 0)
      return -1;
    session_set_workspace(&srv->sessions, s, s->fd, s->uid, quota);
  }
  if (s->uid != uid) {
    if (workspace_chown_tree(s->fd, uid, (gid_t)uid, msg, msglen) < 0) {
      *code = errno == ELOOP ? SBX_FAILED_PRECONDITION : SBX_INTERNAL;
      return -1;
    }
    session_set_workspace(&srv->sessions, s, s->fd, uid, s->quota);
  }
  return s->fd;
}

/* Empties the slot's workspace; if that fails (a tree it cannot remove),
 * replaces the tmpfs with a fresh one so the next run starts clean. */
static void release_slot_workspace(struct server *srv, unsigned slot, uid_t uid) {
  struct slot_workspace *w = &srv->slot_ws[slot];
  char msg[512];
  if (workspace_empty(w->fd, msg, sizeof(msg)) == 0)
    return;
  log_line("workspace_empty_failed", "slot=%u error=\"%s\"; remounting", slot, msg);
  close(w->fd);
  w->fd = -1;
  if (workspace_unmount(srv->workspace_root_fd, srv->workspace_root, w->name, msg, sizeof(msg)) <
          0 ||
      (w->fd = workspace_mount(srv->workspace_root_fd, srv->workspace_root, w->name, w->size,
                               (uint64_t)srv->settings.workspace_inodes, uid, (gid_t)uid, msg,
                               sizeof(msg))) < 0)
    log_line("workspace_remount_failed", "slot=%u error=\"%s\"", slot, msg);
}

/* Collects output/ and turns it into response artifacts and feedback. */
static void collect_artifacts(struct server *srv, int ws_fd, struct run_scratch *scratch,
                              struct feedback *fb, Sandbox__V1__RunCodeResponse *resp) {
  int out = openat(ws_fd, WORKSPACE_OUTPUT, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (out < 0) {
    if (errno != ENOENT)
      feedback_add(fb, "output/ is not a directory (a symlink?); no artifacts collected");
    return;
  }
  struct artifact_caps caps = {
      .max_count = (size_t)srv->settings.max_artifacts,
      .max_depth = (size_t)srv->settings.artifact_depth,
      .per_file = (uint64_t)srv->settings.artifact_bytes,
      .total = (uint64_t)srv->settings.artifacts_total_bytes,
  };
  struct artifact_set *set = &scratch->artifacts;
  int rv = artifacts_collect(out, &caps, &srv->mime, set);
  close(out);
  if (rv < 0) {
    feedback_add(fb, "artifacts could not be collected: out of memory");
    return;
  }
  if (set->n > 0) {
    scratch->artifact_msgs = calloc(set->n, sizeof(*scratch->artifact_msgs));
    scratch->artifact_ptrs = calloc(set->n, sizeof(*scratch->artifact_ptrs));
    if (scratch->artifact_msgs == NULL || scratch->artifact_ptrs == NULL) {
      feedback_add(fb, "artifacts could not be sent: out of memory");
      return;
    }
    for (size_t i = 0; i < set->n; i++) {
      const struct artifact *a = &set->items[i];
      Sandbox__V1__Artifact *m = &scratch->artifact_msgs[i];
      sandbox__v1__artifact__init(m);
      m->name = (char *)a->name;
      m->relative_path = a->relative_path;
      m->size = a->size;
      m->mime = (char *)a->mime;
      m->content = (ProtobufCBinaryData){a->content_len, a->content};
      m->content_omitted = a->omitted;
      scratch->artifact_ptrs[i] = m;
    }
    resp->n_artifacts = set->n;
    resp->artifacts = scratch->artifact_ptrs;
  }
  char a[32], b[32];
  if (set->omitted_per_file > 0) {
    const struct artifact *first = NULL;
    for (size_t i = 0; i < set->n && first == NULL; i++)
      if (set->items[i].omitted && set->items[i].size > caps.per_file)
        first = &set->items[i];
    feedback_format_bytes(caps.per_file, a, sizeof(a));
    feedback_format_bytes(first != NULL ? first->size : 0, b, sizeof(b));
    feedback_add(fb,
                 "%zu artifact(s) over the %s per-artifact cap sent without content "
                 "(content_omitted), e.g. output/%.60s (%s)",
                 set->omitted_per_file, a, first != NULL ? first->relative_path : "?", b);
  }
  if (set->omitted_total > 0) {
    feedback_format_bytes(caps.total, a, sizeof(a));
    feedback_add(fb,
                 "%zu artifact(s) sent without content (content_omitted): the response's %s "
                 "of artifact content was used up",
                 set->omitted_total, a);
  }
  if (set->skipped_special > 0)
    feedback_add(fb, "%zu entries in output/ skipped: symlinks, FIFOs, sockets and devices are "
                     "not artifacts",
                 set->skipped_special);
  if (set->skipped_names > 0)
    feedback_add(fb, "%zu files in output/ skipped: name not valid UTF-8 or path over %d bytes",
                 set->skipped_names, ARTIFACT_PATH_MAX);
  if (set->skipped_depth > 0)
    feedback_add(fb, "%zu directories in output/ deeper than %lld levels skipped",
                 set->skipped_depth, (long long)srv->settings.artifact_depth);
  if (set->skipped_count > 0)
    feedback_add(fb, "more than %lld files in output/: the rest were not reported",
                 (long long)srv->settings.max_artifacts);
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
  scratch.n_files = req->n_files;
  scratch.argv = calloc(req->n_args + 4, sizeof(char *));
  scratch.env = calloc(req->n_env + 1, sizeof(char *));
  scratch.files = calloc(req->n_files + 1, sizeof(*scratch.files));
  scratch.downloads = calloc(req->n_files + 1, sizeof(*scratch.downloads));
  scratch.code = dedent(req->code, strlen(req->code), &scratch.code_len);
  if (scratch.argv == NULL || scratch.env == NULL || scratch.files == NULL ||
      scratch.downloads == NULL || scratch.code == NULL) {
    run_scratch_free(&scratch);
    fail_run(call, run_id, slot, SBX_INTERNAL, "out of memory");
    return;
  }
  /* As "python3 main.py" runs outside: the workspace on sys.path, the
   * request's PYTHON* variables honoured. -u only for this interpreter (not
   * its children, as PYTHONUNBUFFERED would): what it printed before a kill
   * reaches the reply. Nothing of the server's environment reaches a run
   * (the engine's minimum environment, docs/ENGINE.md). */
  scratch.argv[0] = "/usr/bin/python3";
  scratch.argv[1] = "-u";
  scratch.argv[2] = "/workspace/" WORKSPACE_SCRIPT;
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

  /* Before anything is downloaded or written: when the install fails,
   * nothing else happens. */
  char req_msg[4096];
  sbx_code code = prepare_requirements(srv, slot, req, &scratch, req_msg, sizeof(req_msg));
  if (code != SBX_OK) {
    run_scratch_free(&scratch);
    fail_run_multiline(call, run_id, slot, code, req_msg);
    return;
  }

  char msg[1024];
  code = fetch_files(srv, req, &call->limits, &scratch, msg, sizeof(msg));
  if (code != SBX_OK) {
    run_scratch_free(&scratch);
    fail_run(call, run_id, slot, code, msg);
    return;
  }

  if (call->session != NULL && call->session->group != 0 &&
      session_memory_check(srv, call, msg, sizeof(msg)) < 0) {
    run_scratch_free(&scratch);
    fail_run(call, run_id, slot, SBX_FAILED_PRECONDITION, msg);
    return;
  }
  uid_t uid = (uid_t)(srv->settings.uid_base + slot);
  char dir_name[32];
  int ws_fd = acquire_workspace(srv, slot, call, uid, dir_name, sizeof(dir_name), &code, msg,
                                sizeof(msg));
  if (ws_fd < 0) {
    run_scratch_free(&scratch);
    char failure[sizeof(msg) + 64];
    snprintf(failure, sizeof(failure), "workspace: %s; nothing ran", msg);
    fail_run(call, run_id, slot, code, failure);
    return;
  }
  if (workspace_prepare(ws_fd, uid, (gid_t)uid, scratch.code, scratch.code_len, scratch.files,
                        req->n_files, msg, sizeof(msg)) < 0) {
    bool full = errno == ENOSPC || errno == EDQUOT || errno == EFBIG;
    if (call->session == NULL)
      release_slot_workspace(srv, slot, uid);
    run_scratch_free(&scratch);
    char failure[sizeof(msg) + 128];
    snprintf(failure, sizeof(failure), "%s%s; nothing ran", msg,
             full ? " (the files do not fit in the workspace's quota, limits.disk_bytes)" : "");
    fail_run(call, run_id, slot, full ? SBX_FAILED_PRECONDITION : SBX_INTERNAL, failure);
    return;
  }
  /* The inputs are in the workspace now: drop the downloaded copies. */
  for (size_t i = 0; i < scratch.n_files; i++) {
    free(scratch.downloads[i]);
    scratch.downloads[i] = NULL;
  }
  char workspace_dir[PATH_MAX + 64];
  snprintf(workspace_dir, sizeof(workspace_dir), "%s/%s", srv->workspace_root, dir_name);

  /* Read-only over the interpreter's /usr/local site directory: on sys.path
   * even with -I, before Debian's own packages. */
  struct sandbox_mount env_mount = {.source = scratch.env_site, .target = srv->install.site_dir};
  struct sandbox_spec spec = {
      .argv = scratch.argv,
      .env = (const char *const *)scratch.env,
      .workspace_dir = workspace_dir,
      .cwd = NULL,
      .stdin_data = req->stdin.data,
      .stdin_len = req->stdin.len,
      .mounts = scratch.pkg_env != NULL ? &env_mount : NULL,
      .n_mounts = scratch.pkg_env != NULL ? 1 : 0,
      .limits = call->limits,
      .group = call->session != NULL ? call->session->group : 0,
  };
  struct sandbox_result result;
  memset(&result, 0, sizeof(result));
  struct sandbox_error err = {0};
  int rc = sandbox_run(srv->engine, slot, &spec, &result, &err);

  if (rc < 0) {
    if (call->session == NULL)
      release_slot_workspace(srv, slot, uid);
    run_scratch_free(&scratch);
    char failure[sizeof(err.msg) + 64];
    snprintf(failure, sizeof(failure), "sandbox setup failed, the code did not run: %s", err.msg);
    fail_run(call, run_id, slot, SBX_INTERNAL, failure);
    return;
  }
  atomic_fetch_add(&srv->runs_total, 1);

  struct feedback fb;
  /* The engine reports the limits in force; fall back to what we asked. */
  feedback_build(&result, result.limits.timeout_ms != 0 ? &result.limits : &call->limits, &fb);
  if (call->session_created)
    feedback_add(&fb, "session %s is new: its workspace started empty", req->session_id);
  if (result.killed_by == SANDBOX_KILLED_BY_NONE && result.exit_code != 0)
    feedback_missing_module(result.stderr_data, result.stderr_len, &fb);
  if (result.killed_by == SANDBOX_KILLED_BY_TIMEOUT ||
      (result.killed_by == SANDBOX_KILLED_BY_NONE && result.exit_code != 0))
    feedback_network_refused(result.stderr_data, result.stderr_len, &fb);
  if (scratch.env_built)
    feedback_add(&fb, "requirements: installed into a new environment in %.1f s; runs with the "
                      "same requirements reuse it",
                 (double)scratch.env_ms / 1000.0);
  else if (scratch.pkg_env != NULL && scratch.env_ms >= 100)
    feedback_add(&fb, "requirements: waited %.1f s for another run's install of the same "
                      "requirements",
                 (double)scratch.env_ms / 1000.0);

  Sandbox__V1__RunCodeResponse resp = SANDBOX__V1__RUN_CODE_RESPONSE__INIT;
  /* Every process of the run is gone: output/ holds what it left. */
  collect_artifacts(srv, ws_fd, &scratch, &fb, &resp);
  /* Before the reply, so nothing of a session-less run outlives it. */
  if (call->session == NULL)
    release_slot_workspace(srv, slot, uid);

  char *fb_lines[FEEDBACK_MAX_LINES];
  for (size_t i = 0; i < fb.n; i++)
    fb_lines[i] = fb.lines[i];
  resp.run_id = run_id;
  resp.session_id = (char *)req->session_id;
  resp.session_created = call->session_created;
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
           "run_id=%s slot=%u session=%s status=OK killed_by=%s exit_code=%d signal=%d "
           "wall_ms=%llu cpu_ms=%llu peak_memory_bytes=%llu stdout_bytes=%zu stderr_bytes=%zu "
           "artifacts=%zu env=%.12s env_ms=%llu queue_ms=%llu duration_ms=%llu",
           run_id, slot, req->session_id[0] != '\0' ? req->session_id : "-",
           sandbox_killed_by_name(result.killed_by), result.exit_code, result.signal,
           (unsigned long long)(result.wall_time_us / 1000),
           (unsigned long long)(result.cpu_time_us / 1000),
           (unsigned long long)result.peak_memory_bytes, result.stdout_len, result.stderr_len,
           scratch.artifacts.n, scratch.pkg_env != NULL ? scratch.pkg_env->key : "-",
           (unsigned long long)scratch.env_ms, (unsigned long long)queue_ms,
           (unsigned long long)ms_since(&call->received));
  sandbox_result_free(&result);
  run_scratch_free(&scratch);
}

int run_slots_mount(struct server *srv, char *err, size_t errlen) {
  srv->slot_ws = calloc(srv->n_workers, sizeof(*srv->slot_ws));
  if (srv->slot_ws == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (unsigned i = 0; i < srv->n_workers; i++) {
    struct slot_workspace *w = &srv->slot_ws[i];
    uid_t uid = (uid_t)(srv->settings.uid_base + i);
    char msg[512];
    snprintf(w->name, sizeof(w->name), "slot-%u", i);
    w->size = (uint64_t)srv->settings.default_limits.disk_bytes;
    w->fd = workspace_mount(srv->workspace_root_fd, srv->workspace_root, w->name, w->size,
                            (uint64_t)srv->settings.workspace_inodes, uid, (gid_t)uid, msg,
                            sizeof(msg));
    if (w->fd < 0) {
      snprintf(err, errlen, "%s", msg);
      return -1;
    }
  }
  return 0;
}

void run_slots_unmount(struct server *srv) {
  if (srv->slot_ws == NULL)
    return;
  for (unsigned i = 0; i < srv->n_workers; i++) {
    struct slot_workspace *w = &srv->slot_ws[i];
    char msg[512];
    if (w->fd >= 0)
      close(w->fd);
    if (w->name[0] != '\0' &&
        workspace_unmount(srv->workspace_root_fd, srv->workspace_root, w->name, msg,
                          sizeof(msg)) < 0)
      log_line("workspace_unmount_failed", "slot=%u error=\"%s\"", i, msg);
  }
  free(srv->slot_ws);
  srv->slot_ws = NULL;
}
