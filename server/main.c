/* main.c: sandboxd. Reads the settings, creates the engine before any thread
 * exists (nng starts threads on first use, so the engine comes first), opens
 * the listeners and workers, then the operations listener (server/ops/),
 * then waits for SIGTERM or SIGINT and drains: the RPC side first, while
 * /readyz says draining, then the operations listener.
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
#include "fronts.h"
#include "log.h"
#include "ops.h"
#include "server.h"

/* What a start made, undone in reverse when a later step fails. */
struct started {
  bool made_state_dir, engine, runner, tls, tenants, runtimes;
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

static int make_state_dir(const struct server_settings *s, struct started *st,
                          struct sbx_error *err) {
  if (mkdir(s->state_dir, 0755) == 0)
    st->made_state_dir = true;
  else if (errno != EEXIST)
    return sbx_error_set(err, SBX_INTERNAL, errno, "state dir %s", s->state_dir);
  return 0;
}

static int start_engine(struct server *srv, struct started *st, struct sbx_error *err) {
  const struct server_settings *s = &srv->settings;
  struct sandbox_engine_config config = {
      .state_dir = s->state_dir,
      .cgroup_parent = s->cgroup_parent[0] != '\0' ? s->cgroup_parent : NULL,
      .backend = backend_from_name(s->backend),
      /* The workers' slots, then one per living interpreter (interp.h). */
      .slots = (unsigned)(s->workers + s->max_interpreters),
      .uid_base = (uid_t)s->uid_base,
      .gid_base = (gid_t)s->uid_base,
      .zygote = {.enabled = s->zygote,
                 .preload = s->zygote_preload,
                 .max_forks = (uint64_t)s->zygote_max_forks,
                 .max_age_ms = (uint64_t)s->zygote_max_age_s * 1000u},
  };
  struct sandbox_error engine_err = {0};
  if (sandbox_engine_new(&config, &srv->engine, &engine_err) < 0)
    return sbx_error_from_engine(err, SBX_INTERNAL, &engine_err,
                                 "cannot isolate, refusing to start");
  st->engine = true;
  srv->n_workers = (unsigned)s->workers;
  return 0;
}

/* Undoes a start, in reverse; also the end of a normal stop, which keeps
 * the directories. */
static void undo_start(struct server *srv, const struct started *st, bool failed) {
  if (st->runner)
    runner_stop(&srv->runner, failed);
  if (st->runtimes)
    runner_free_runtimes(&srv->runner); /* after the runs that point at them */
  if (st->engine)
    sandbox_engine_free(srv->engine);
  if (failed && st->made_state_dir)
    rmdir(srv->settings.state_dir); /* only when empty */
  if (st->tls)
    tls_files_free(&srv->tls);
  if (st->tenants)
    tenants_destroy(&srv->tenants); /* last: sessions and runs point at tenants */
}

static bool has_tls_listener(const struct server_settings *s) {
  for (unsigned i = 0; i < s->n_listen; i++)
    if (settings_url_is_tls(s->listen[i]))
      return true;
  return settings_http_listen_is_tls(s->http_listen);
}

/* The TLS material, read and checked before anything is made: a file that
 * cannot work fails the start here, naming the setting and the file. */
static int load_tls(struct server *srv, struct started *st, struct sbx_error *err) {
  if (!has_tls_listener(&srv->settings))
    return 0;
  if (tls_files_load(&srv->settings, &srv->tls, err) < 0)
    return -1;
  st->tls = true;
  return 0;
}

/* What the TLS listeners ask of clients, or why TLS settings go unused. */
static void log_tls(const struct server *srv) {
  const struct server_settings *s = &srv->settings;
  if (!has_tls_listener(s)) {
    if (s->tls_cert[0] != '\0' || s->tls_ca[0] != '\0')
      log_line("warning", "msg=\"--tls-cert/--tls-ca are set but no --listen is tls+tcp:// and "
                          "--http-listen is not https://: they are not used\"");
    return;
  }
  const struct tls_files *t = &srv->tls;
  log_line("tls",
           "client_auth=%s ca=\"%s\" ca_certs=%u cert_subject=\"%s\" cert_not_after=%s "
           "key_encrypted=%s",
           tls_client_auth_name(t->client_auth), s->tls_ca[0] != '\0' ? s->tls_ca : "none",
           t->ca_certs, t->subject, t->not_after, t->key_password != NULL ? "true" : "false");
  if (t->client_auth == TLS_CLIENT_AUTH_NONE && s->tls_ca[0] != '\0')
    log_line("warning", "msg=\"--tls-ca is set but --tls-client-auth is none: client "
                        "certificates are not asked for\"");
  if (t->client_auth == TLS_CLIENT_AUTH_OPTIONAL)
    log_line("warning", "msg=\"--tls-client-auth optional: clients without a verified "
                        "certificate are served too (event=tls_client_unverified)\"");
}

static void log_ready(const struct server *srv) {
  const struct server_settings *s = &srv->settings;
  const struct sandbox_report *rep = sandbox_engine_report(srv->engine);
  for (unsigned i = 0; i < s->n_listen; i++)
    log_line("listening", "url=%s tls=%s", s->listen[i],
             settings_url_is_tls(s->listen[i]) ? "on" : "off");
  log_tls(srv);
  char tls[64] = "off";
  if (has_tls_listener(s))
    snprintf(tls, sizeof(tls), "on tls_client_auth=%s", tls_client_auth_name(srv->tls.client_auth));
  log_line("ready",
           "version=%s workers=%u queue=%lld contexts=%zu backend=\"%s\" seccomp=%s "
           "namespaces=\"%s\" cpu_share_per_slot=%s uid_base=%u state_dir=%s tls=%s zygote=%s",
           SANDBOXD_VERSION, srv->n_workers, (long long)s->queue, srv->n_calls,
           rep->backend_name != NULL ? rep->backend_name : "?", rep->seccomp ? "true" : "false",
           rep->namespaces != NULL ? rep->namespaces : "?", rep->cpu_share ? "true" : "false",
           (unsigned)rep->uid_base, s->state_dir, tls, rep->zygote ? "true" : "false");
  if (!rep->cpu_share)
    log_line("warning", "msg=\"no cpu controller: runs share CPU per process, so a run with many "
                        "processes can slow the runs beside it\"");
}

/* SIGHUP: the tenants file again; calls go on meanwhile (the registry is
 * swapped under its lock), and a bad file keeps the old one. */
static void reload_tenants(struct server *srv) {
  if (!srv->tenants.enabled) {
    log_line("tenants_reload", "result=ignored msg=\"SIGHUP without --tenants: nothing to read\"");
    return;
  }
  struct sbx_error err = {0};
  if (tenants_reload(&srv->tenants, &err) < 0) {
    log_line("tenants_reload_failed",
             "file=\"%s\" error=\"%s\" msg=\"the tenants loaded before "
             "stay in use\"",
             srv->settings.tenants, err.msg);
    return;
  }
  log_line("tenants_reload", "result=ok file=\"%s\" tenants=%zu", srv->settings.tenants,
           tenants_count(&srv->tenants));
}

/* The main thread waits for SIGTERM/SIGINT (SIGHUP: reload_tenants) and, every tick, ends idle
 * sessions past their TTL, detaches the workspaces of ended ones, closes
 * idle connections and cuts off HTTP requests that trickle in too slowly. */
static int wait_for_stop(struct server *srv, struct ops *ops, const sigset_t *stop_signals) {
  for (;;) {
    struct timespec tick = {0, 250 * 1000 * 1000};
    int sig = sigtimedwait(stop_signals, NULL, &tick);
    if (sig == SIGTERM || sig == SIGINT)
      return sig;
    if (sig == SIGHUP)
      reload_tenants(srv);
    runner_tick(&srv->runner);
    tls_listen_log_failures(&srv->tls_listen);
    size_t idle = conns_close_idle(&srv->conns);
    if (idle > 0)
      log_line("idle_connections_closed", "count=%zu idle_timeout_ms=%lld", idle,
               (long long)srv->settings.idle_timeout_ms);
    ops_tick(ops);
  }
}

/* The operations listener, after the RPC side: when it cannot start, the
 * RPC side is drained again (nothing has been received yet) and the start
 * fails. */
static int start_ops(struct server *srv, struct ops *ops, struct fronts *fronts,
                     struct sbx_error *err) {
  if (ops_add_routes(ops, srv, err) == 0 && fronts_add_routes(fronts, srv, &ops->http, err) == 0 &&
      ops_start_listener(ops, err) == 0)
    return 0;
  fronts_stop(fronts);
  server_drain(srv);
  server_free(srv);
  return -1;
}

/* Returns 0, -1 with err, or -2 for settings that cannot work together. */
static int start(struct server *srv, struct started *st, struct sbx_error *err) {
  /* The egress proxy's settings are checked before anything is set up. */
  struct egress_config egress_cfg;
  if (settings_index_url(&srv->settings)[0] != '\0' &&
      egress_config_from(&srv->settings, &egress_cfg, err) < 0)
    return -2;
  if (egress_run_settings_check(&srv->settings, err) < 0)
    return -2;
  if (tenants_init(&srv->tenants, srv->settings.tenants, srv->settings.anonymous_tenant, err) < 0)
    return -2;
  st->tenants = true;
  st->runtimes = true;
  if (runner_load_runtimes(&srv->runner, &srv->settings, err) < 0)
    return -2;
  if (load_tls(srv, st, err) < 0)
    return -1;
  raise_fd_limit(&srv->settings);
  if (download_global_init() < 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "libcurl initialisation failed");
  if (make_state_dir(&srv->settings, st, err) < 0 || start_engine(srv, st, err) < 0)
    return -1;
  st->runner = true; /* runner_stop undoes a partial start too */
  if (runner_start(&srv->runner, &srv->settings, srv->engine, &egress_cfg, err) < 0)
    return -1;
  return server_start(srv, err);
}

static void log_stopped(struct server *srv) {
  log_line("stopped", "requests_total=%llu runs_total=%llu rejected_total=%llu",
           (unsigned long long)atomic_load(&srv->requests_total),
           (unsigned long long)atomic_load(&srv->runner.runs_total),
           (unsigned long long)rpc_stats_rejections_total(&srv->stats));
}

int main(int argc, char **argv) {
  static struct server srv; /* the one context; static only for its size */
  struct sbx_error err = {0};
  int rv = settings_load(&srv.settings, argc, argv, &err);
  if (rv == 1)
    return 0;
  if (rv < 0) {
    fprintf(stderr, "sandboxd: %s\n", err.msg);
    return 2;
  }
  log_set_format(strcmp(srv.settings.log_format, "json") == 0 ? LOG_FORMAT_JSON
                                                              : LOG_FORMAT_LOGFMT);
  /* Before any thread: the engine writes to pipes (SIGPIPE must not kill
   * us) and only the main thread takes SIGTERM/SIGINT, with sigwait. */
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);

  struct started st = {0};
  struct ops ops = {0};
  struct fronts fronts = {0};
  rv = start(&srv, &st, &err);
  if (rv == 0 && start_ops(&srv, &ops, &fronts, &err) < 0)
    rv = -1;
  if (rv < 0) {
    fprintf(stderr, "sandboxd: %s\n", err.msg);
    undo_start(&srv, &st, true);
    return rv == -2 ? 2 : 1;
  }
  log_ready(&srv);
  int sig = wait_for_stop(&srv, &ops, &stop_signals);
  log_line("draining", "signal=%s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  server_drain(&srv);
  ops_stop(&ops);
  fronts_stop(&fronts);
  server_free(&srv);
  undo_start(&srv, &st, false);
  log_stopped(&srv);
  return 0;
}
