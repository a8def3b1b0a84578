/* main.c: sandboxd. Reads the settings, creates the engine before any thread
 * exists (nng starts threads on first use, so the engine comes first), opens
 * the listeners and workers, then waits for SIGTERM or SIGINT and drains.
 * Only main decides to exit. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "server.h"
#include "download.h"
#include "workspace.h"

static enum sandbox_backend backend_from_name(const char *name) {
  if (strcmp(name, "v2") == 0)
    return SANDBOX_BACKEND_CGROUP_V2;
  if (strcmp(name, "v1") == 0)
    return SANDBOX_BACKEND_CGROUP_V1;
  if (strcmp(name, "rlimit") == 0)
    return SANDBOX_BACKEND_RLIMIT;
  return SANDBOX_BACKEND_AUTO;
}

/* With an index in force, pip's only way out: the egress proxy, serving
 * one installer namespace per worker slot. Logs what requirements use. */
static int start_egress(struct server *srv, const struct egress_config *cfg, char *err,
                        size_t errlen) {
  const struct server_settings *s = &srv->settings;
  char index[SETTINGS_URL_MAX], upstream[SETTINGS_URL_MAX + 16] = "";
  install_describe_index(s, index, sizeof index);
  if (index[0] != '\0') {
    if (egress_start(&srv->egress, cfg, srv->n_workers, err, errlen) < 0)
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
  const struct server_settings *s = &srv.settings;

  /* Before any thread: the engine writes to pipes (SIGPIPE must not kill
   * us) and only the main thread takes SIGTERM/SIGINT, with sigwait. */
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);

  if (mkdir(s->state_dir, 0755) < 0 && errno != EEXIST) {
    fprintf(stderr, "sandboxd: state dir %s: %s\n", s->state_dir, strerror(errno));
    return 1;
  }
  if ((size_t)snprintf(srv.workspace_root, sizeof(srv.workspace_root), "%s/workspaces",
                       s->state_dir) >= sizeof(srv.workspace_root)) {
    fprintf(stderr, "sandboxd: state dir %s: path too long\n", s->state_dir);
    return 1;
  }
  srv.workspace_root_fd = workspace_root_open(srv.workspace_root);
  if (srv.workspace_root_fd < 0) {
    fprintf(stderr, "sandboxd: workspaces %s: %s\n", srv.workspace_root, strerror(errno));
    return 1;
  }
  /* Workspaces of a server that crashed: nothing owns them any more. */
  int stale = workspace_remove_stale(srv.workspace_root_fd, srv.workspace_root);
  if (stale > 0)
    log_line("stale_workspaces", "detached=%d", stale);
  if (mime_db_load(&srv.mime, s->mime_types) < 0)
    log_line("warning", "mime_types=%s error=\"%s\" artifacts get application/octet-stream",
             s->mime_types, strerror(errno));
  if (download_global_init() < 0) {
    fprintf(stderr, "sandboxd: libcurl initialisation failed\n");
    return 1;
  }
  /* The egress proxy's settings are checked before anything is set up. */
  struct egress_config egress_cfg;
  if (settings_index_url(s)[0] != '\0' &&
      egress_config_from(s, &egress_cfg, err, sizeof(err)) < 0) {
    fprintf(stderr, "sandboxd: %s\n", err);
    return 2;
  }

  struct sandbox_engine_config config = {
      .state_dir = s->state_dir,
      .cgroup_parent = s->cgroup_parent[0] != '\0' ? s->cgroup_parent : NULL,
      .backend = backend_from_name(s->backend),
      .slots = (unsigned)s->workers,
      .uid_base = (uid_t)s->uid_base,
      .gid_base = (gid_t)s->uid_base,
  };
  struct sandbox_error engine_err = {0};
  if (sandbox_engine_new(&config, &srv.engine, &engine_err) < 0) {
    fprintf(stderr, "sandboxd: cannot isolate, refusing to start: %s\n", engine_err.msg);
    return 1;
  }
  const struct sandbox_report *rep = sandbox_engine_report(srv.engine);

  srv.n_workers = (unsigned)s->workers;
  if (run_slots_mount(&srv, err, sizeof(err)) < 0) {
    fprintf(stderr, "sandboxd: workspaces: %s\n", err);
    run_slots_unmount(&srv);
    return 1;
  }
  if (session_table_init(&srv.sessions, (size_t)s->max_sessions,
                         (uint64_t)s->session_ttl_s * 1000u) < 0) {
    fprintf(stderr, "sandboxd: sessions: out of memory\n");
    return 1;
  }
  /* Requirements: without pip or a package source the server still runs
   * code, and answers requirements with FAILED_PRECONDITION saying why. */
  install_probe(s, &srv.install);
  if (srv.install.available) {
    char envs[PATH_MAX + 16];
    snprintf(envs, sizeof(envs), "%s/envs", s->state_dir);
    if (envstore_open(&srv.store, envs, (uint64_t)s->requirements_store_bytes, err,
                      sizeof(err)) < 0) {
      fprintf(stderr, "sandboxd: requirements store: %s\n", err);
      return 1;
    }
    srv.store.max_building = s->max_concurrent_builds > 0 ? (unsigned)s->max_concurrent_builds
                             : s->workers >= 2           ? (unsigned)s->workers / 2
                                                         : 1;
    if (start_egress(&srv, &egress_cfg, err, sizeof(err)) < 0) {
      fprintf(stderr, "sandboxd: %s\n", err);
      run_slots_unmount(&srv);
      return 1;
    }
  } else {
    srv.store.dir_fd = -1;
    log_line("requirements", "available=false reason=\"%s\"", srv.install.why_unavailable);
  }
  service_init(&srv);
  if (server_start(&srv, err, sizeof(err)) < 0) {
    fprintf(stderr, "sandboxd: %s\n", err);
    return 1;
  }
  for (unsigned i = 0; i < s->n_listen; i++)
    log_line("listening", "url=%s", s->listen[i]);
  log_line("ready",
           "version=%s workers=%u queue=%lld contexts=%zu backend=\"%s\" seccomp=%s "
           "namespaces=\"%s\" cpu_share_per_slot=%s uid_base=%u state_dir=%s",
           SANDBOXD_VERSION, srv.n_workers, (long long)s->queue, srv.n_calls,
           rep->backend_name != NULL ? rep->backend_name : "?", rep->seccomp ? "true" : "false",
           rep->namespaces != NULL ? rep->namespaces : "?", rep->cpu_share ? "true" : "false",
           (unsigned)rep->uid_base, s->state_dir);
  if (!rep->cpu_share)
    log_line("warning",
             "msg=\"no cpu controller: runs share CPU per process, so a run with many "
             "processes can slow the runs beside it\"");

  /* The main thread waits for SIGTERM/SIGINT and, every tick, ends idle
   * sessions past their TTL and detaches the workspaces of ended ones. */
  int sig = 0;
  for (;;) {
    struct timespec tick = {0, 250 * 1000 * 1000};
    sig = sigtimedwait(&stop_signals, NULL, &tick);
    if (sig == SIGTERM || sig == SIGINT)
      break;
    session_expire(&srv.sessions);
    session_reap(&srv.sessions, srv.workspace_root_fd, srv.workspace_root);
  }
  log_line("draining", "signal=%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  server_drain_and_stop(&srv);
  egress_stop(&srv.egress); /* no build runs any more */
  session_table_destroy(&srv.sessions, srv.workspace_root_fd, srv.workspace_root);
  run_slots_unmount(&srv);
  envstore_close(&srv.store);
  mime_db_free(&srv.mime);
  sandbox_engine_free(srv.engine);
  close(srv.workspace_root_fd);
  log_line("stopped", "requests_total=%llu runs_total=%llu rejected_total=%llu",
           (unsigned long long)atomic_load(&srv.requests_total),
           (unsigned long long)atomic_load(&srv.runs_total),
           (unsigned long long)atomic_load(&srv.rejected_total));
  return 0;
}
