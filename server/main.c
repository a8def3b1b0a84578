/* main.c: sandboxd. Reads the settings, creates the engine before any thread
 * exists (nng starts threads on first use, so the engine comes first), opens
 * the listeners and workers, then waits for SIGTERM or SIGINT and drains.
 * A start that fails undoes what it made (directories, mounts, cgroups), so
 * a retry starts from the same place. Only main decides to exit. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "download.h"
#include "log.h"
#include "server.h"
#include "workspace.h"

/* What a start made, undone in reverse when a later step fails. */
struct started {
  bool made_state_dir, made_workspace_root, engine, slots, sessions, store, egress;
};

static enum sandbox_backend backend_from_name(const char *name) {
  if (strcmp(name, "v2") == 0)
    return SANDBOX_BACKEND_CGROUP_V2;
  if (strcmp(name, "v1") == 0)
    return SANDBOX_BACKEND_CGROUP_V1;
  if (strcmp(name, "rlimit") == 0)
    return SANDBOX_BACKEND_RLIMIT;
  return SANDBOX_BACKEND_AUTO;
}

__attribute__((format(printf, 2, 3))) static int start_failed(char *err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, 1024, fmt, ap);
  va_end(ap);
  return -1;
}

/* Each client connection is a descriptor: take the hard limit as the soft
 * one (the default 1024 would run out before --max-connections), and say
 * so when even that is too small for the configured caps. */
static void raise_fd_limit(const struct server_settings *s) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
    return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0 && getrlimit(RLIMIT_NOFILE, &rl) < 0)
      return;
  }
  uint64_t need = (uint64_t)s->max_connections * s->n_listen + 16u * (uint64_t)s->workers + 256;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
    log_line("warning",
             "open_files=%llu needed=%llu msg=\"the descriptor limit is below what "
             "--max-connections on every listener may use; raise LimitNOFILE or lower "
             "--max-connections\"",
             (unsigned long long)rl.rlim_cur, (unsigned long long)need);
}

/* The state directory and its workspaces/, with what a crashed server left
 * there detached. */
static int open_state(struct server *srv, struct started *st, char *err) {
  const struct server_settings *s = &srv->settings;
  if (mkdir(s->state_dir, 0755) == 0)
    st->made_state_dir = true;
  else if (errno != EEXIST)
    return start_failed(err, "state dir %s: %s", s->state_dir, strerror(errno));
  if ((size_t)snprintf(srv->workspace_root, sizeof(srv->workspace_root), "%s/workspaces",
                       s->state_dir) >= sizeof(srv->workspace_root))
    return start_failed(err, "state dir %s: path too long", s->state_dir);
  struct stat before;
  bool existed = stat(srv->workspace_root, &before) == 0;
  srv->workspace_root_fd = workspace_root_open(srv->workspace_root);
  if (srv->workspace_root_fd < 0)
    return start_failed(err, "workspaces %s: %s", srv->workspace_root, strerror(errno));
  st->made_workspace_root = !existed;
  int stale = workspace_remove_stale(srv->workspace_root_fd, srv->workspace_root);
  if (stale > 0)
    log_line("stale_workspaces", "detached=%d", stale);
  return 0;
}

/* A session's memory group goes with it, once its tmpfs is gone. */
static void free_session_group(void *engine, uint64_t group) {
  sandbox_group_free(engine, group);
}

static int start_engine(struct server *srv, struct started *st, char *err) {
  const struct server_settings *s = &srv->settings;
  struct sandbox_engine_config config = {
      .state_dir = s->state_dir,
      .cgroup_parent = s->cgroup_parent[0] != '\0' ? s->cgroup_parent : NULL,
      .backend = backend_from_name(s->backend),
      .slots = (unsigned)s->workers,
      .uid_base = (uid_t)s->uid_base,
      .gid_base = (gid_t)s->uid_base,
  };
  struct sandbox_error engine_err = {0};
  if (sandbox_engine_new(&config, &srv->engine, &engine_err) < 0)
    return start_failed(err, "cannot isolate, refusing to start: %s", engine_err.msg);
  st->engine = true;
  srv->n_workers = (unsigned)s->workers;
  st->slots = true; /* run_slots_unmount undoes a partial mount too */
  char why[512];
  if (run_slots_mount(srv, why, sizeof(why)) < 0)
    return start_failed(err, "workspaces: %s", why);
  if (session_table_init(&srv->sessions, (size_t)s->max_sessions,
                         (uint64_t)s->session_ttl_s * 1000u) < 0)
    return start_failed(err, "sessions: out of memory");
  st->sessions = true;
  srv->sessions.on_end = free_session_group;
  srv->sessions.on_end_arg = srv->engine;
  return 0;
}

/* With an index in force, pip's only way out: the egress proxy, serving
 * one installer namespace per worker slot. Logs what requirements use. */
static int start_egress(struct server *srv, const struct egress_config *cfg, char *err) {
  const struct server_settings *s = &srv->settings;
  char index[SETTINGS_URL_MAX], upstream[SETTINGS_URL_MAX + 16] = "";
  install_describe_index(s, index, sizeof index);
  if (index[0] != '\0') {
    if (egress_start(&srv->egress, cfg, srv->n_workers, err, 1024) < 0)
      return -1;
    if (s->pip_proxy[0] != '\0')
      snprintf(upstream, sizeof upstream, " upstream=%s", s->pip_proxy);
  }
  log_line("requirements",
           "available=true site_dir=%s offline=%s index_url=%s wheelhouse=%s urls=%s egress=%s%s",
           srv->install.site_dir, index[0] != '\0' ? "false" : "true",
           index[0] != '\0' ? index : "-", s->wheelhouse[0] != '\0' ? s->wheelhouse : "-",
           s->requirements_allow_urls != 0 ? "true" : "false",
           index[0] != '\0' ? EGRESS_PROXY_URL : "-", upstream);
  return 0;
}

/* Requirements: without pip or a package source the server still runs
 * code, and answers requirements with FAILED_PRECONDITION saying why. */
static int start_requirements(struct server *srv, struct started *st,
                              const struct egress_config *egress_cfg, char *err) {
  const struct server_settings *s = &srv->settings;
  install_probe(s, &srv->install);
  srv->store.dir_fd = -1;
  if (!srv->install.available) {
    log_line("requirements", "available=false reason=\"%s\"", srv->install.why_unavailable);
    return 0;
  }
  char envs[PATH_MAX + 16], why[512];
  snprintf(envs, sizeof(envs), "%s/envs", s->state_dir);
  if (envstore_open(&srv->store, envs, (uint64_t)s->requirements_store_bytes, why,
                    sizeof(why)) < 0)
    return start_failed(err, "requirements store: %s", why);
  st->store = true;
  srv->store.max_building = s->max_concurrent_builds > 0 ? (unsigned)s->max_concurrent_builds
                            : s->workers >= 2           ? (unsigned)s->workers / 2
                                                        : 1;
  st->egress = true; /* egress_stop undoes a partial start too */
  return start_egress(srv, egress_cfg, err);
}

/* Undoes a start, in reverse; also the end of a normal stop, which keeps
 * the directories. */
static void undo_start(struct server *srv, const struct started *st, bool failed) {
  if (st->egress)
    egress_stop(&srv->egress); /* no build runs any more */
  if (st->sessions)
    session_table_destroy(&srv->sessions, srv->workspace_root_fd, srv->workspace_root);
  if (st->slots)
    run_slots_unmount(srv);
  if (st->store)
    envstore_close(&srv->store);
  if (st->engine)
    sandbox_engine_free(srv->engine);
  if (srv->workspace_root_fd >= 0)
    close(srv->workspace_root_fd);
  /* After a failed start, what it made, and only when empty (rmdir). */
  if (failed && st->made_workspace_root)
    rmdir(srv->workspace_root);
  if (failed && st->made_state_dir)
    rmdir(srv->settings.state_dir);
}

static void log_ready(const struct server *srv) {
  const struct server_settings *s = &srv->settings;
  const struct sandbox_report *rep = sandbox_engine_report(srv->engine);
  for (unsigned i = 0; i < s->n_listen; i++)
    log_line("listening", "url=%s", s->listen[i]);
  log_line("ready",
           "version=%s workers=%u queue=%lld contexts=%zu backend=\"%s\" seccomp=%s "
           "namespaces=\"%s\" cpu_share_per_slot=%s uid_base=%u state_dir=%s",
           SANDBOXD_VERSION, srv->n_workers, (long long)s->queue, srv->n_calls,
           rep->backend_name != NULL ? rep->backend_name : "?", rep->seccomp ? "true" : "false",
           rep->namespaces != NULL ? rep->namespaces : "?", rep->cpu_share ? "true" : "false",
           (unsigned)rep->uid_base, s->state_dir);
  if (!rep->cpu_share)
    log_line("warning",
             "msg=\"no cpu controller: runs share CPU per process, so a run with many "
             "processes can slow the runs beside it\"");
}

/* The main thread waits for SIGTERM/SIGINT and, every tick, ends idle
 * sessions past their TTL, detaches the workspaces of ended ones and closes
 * idle connections. */
static int wait_for_stop(struct server *srv, const sigset_t *stop_signals) {
  for (;;) {
    struct timespec tick = {0, 250 * 1000 * 1000};
    int sig = sigtimedwait(stop_signals, NULL, &tick);
    if (sig == SIGTERM || sig == SIGINT)
      return sig;
    session_expire(&srv->sessions);
    session_reap(&srv->sessions, srv->workspace_root_fd, srv->workspace_root);
    size_t idle = conns_close_idle(&srv->conns);
    if (idle > 0)
      log_line("idle_connections_closed", "count=%zu idle_timeout_ms=%lld", idle,
               (long long)srv->settings.idle_timeout_ms);
  }
}

/* Returns 0, -1 with err, or -2 for settings that cannot work together. */
static int start(struct server *srv, struct started *st, char *err) {
  /* The egress proxy's settings are checked before anything is set up. */
  struct egress_config egress_cfg;
  if (settings_index_url(&srv->settings)[0] != '\0' &&
      egress_config_from(&srv->settings, &egress_cfg, err, 1024) < 0)
    return -2;
  raise_fd_limit(&srv->settings);
  if (open_state(srv, st, err) < 0)
    return -1;
  if (mime_db_load(&srv->mime, srv->settings.mime_types) < 0)
    log_line("warning", "mime_types=%s error=\"%s\" artifacts get application/octet-stream",
             srv->settings.mime_types, strerror(errno));
  if (download_global_init() < 0)
    return start_failed(err, "libcurl initialisation failed");
  if (start_engine(srv, st, err) < 0 || start_requirements(srv, st, &egress_cfg, err) < 0)
    return -1;
  service_init(srv);
  return server_start(srv, err, 1024);
}

int main(int argc, char **argv) {
  static struct server srv; /* the one context; static only for its size */
  char err[1024];
  int rv = settings_load(&srv.settings, argc, argv, err, sizeof(err));
  if (rv == 1)
    return 0;
  if (rv < 0) {
    fprintf(stderr, "sandboxd: %s\n", err);
    return 2;
  }
  /* Before any thread: the engine writes to pipes (SIGPIPE must not kill
   * us) and only the main thread takes SIGTERM/SIGINT, with sigwait. */
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);

  struct started st = {0};
  srv.workspace_root_fd = -1;
  rv = start(&srv, &st, err);
  if (rv < 0) {
    fprintf(stderr, "sandboxd: %s\n", err);
    undo_start(&srv, &st, true);
    return rv == -2 ? 2 : 1;
  }
  log_ready(&srv);
  int sig = wait_for_stop(&srv, &stop_signals);
  log_line("draining", "signal=%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  server_drain_and_stop(&srv);
  undo_start(&srv, &st, false);
  mime_db_free(&srv.mime);
  log_line("stopped", "requests_total=%llu runs_total=%llu rejected_total=%llu",
           (unsigned long long)atomic_load(&srv.requests_total),
           (unsigned long long)atomic_load(&srv.runs_total),
           (unsigned long long)atomic_load(&srv.rejected_total));
  return 0;
}
