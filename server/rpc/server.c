/* server.c: the service's start and drain. Start: the run table and the
 * queue, the socket with its connection table and listeners, the contexts
 * of the aio loop (transport.c), the workers (worker.c). Drain: queued runs
 * refused, running ones finished, the last replies let out, the socket
 * closed. Never answers a call itself; never starts work after the drain
 * began. */
#include "server.h"

#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "handlers.h"
#include "runtime_check.h"
#include "transport.h"
#include "worker.h"

/* One listener of the socket on url, started (a tls+tcp:// one gets the
 * TLS configuration first); its id in *id. */
static int open_listener(struct server *srv, const char *url, uint32_t *id, struct sbx_error *err) {
  nng_listener l;
  int rv;
  if ((rv = nng_listener_create(&l, srv->sock, url)) != 0 ||
      (rv = nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, (size_t)srv->settings.max_message_bytes)) !=
          0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "listen %s: %s", url, nng_strerror(rv));
  if (settings_url_is_tls(url) && tls_listen_setup(&srv->tls_listen, &srv->tls, l, url, err) < 0)
    return -1;
  if ((rv = nng_listener_start(l, 0)) != 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "listen %s: %s", url, nng_strerror(rv));
  *id = (uint32_t)nng_listener_id(l);
  return 0;
}

static int open_socket(struct server *srv, struct sbx_error *err) {
  const struct server_settings *s = &srv->settings;
  int rv;
  if ((rv = nng_rep0_open(&srv->sock)) != 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "nng_rep0_open: %s", nng_strerror(rv));
  if (conns_init(&srv->conns, (unsigned)s->max_connections, (uint64_t)s->idle_timeout_ms) < 0 ||
      (rv = conns_watch(&srv->conns, srv->sock)) != 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "connection table: %s", nng_strerror(rv));
  srv->conns.tls_log_unverified = settings_tls_client_auth(s) == TLS_CLIENT_AUTH_OPTIONAL;
  uint32_t id = 0;
  for (unsigned i = 0; i < s->n_listen; i++)
    if (open_listener(srv, s->listen[i], &id, err) < 0)
      return -1;
  /* When HTTP fronts are served, theirs: in this process only, never
   * idle-closed. */
  if (s->http_fronts[0] != '\0') {
    if (open_listener(srv, SERVER_FRONTS_URL, &id, err) < 0)
      return -1;
    conns_set_internal_listener(&srv->conns, id);
  }
  return 0;
}

static int start_workers(struct server *srv, struct sbx_error *err) {
  srv->workers = calloc(srv->n_workers, sizeof(*srv->workers));
  if (srv->workers == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "workers");
  /* Counted down by each worker after its warm start (worker.c). */
  atomic_store(&srv->zygotes_warming, srv->settings.zygote ? srv->n_workers : 0);
  for (unsigned i = 0; i < srv->n_workers; i++) {
    struct worker_start *w = malloc(sizeof(*w));
    if (w == NULL)
      return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "workers");
    *w = (struct worker_start){srv, i};
    int rv = pthread_create(&srv->workers[i], NULL, worker_main, w);
    if (rv != 0) {
      free(w);
      return sbx_error_set(err, SBX_INTERNAL, rv, "worker thread");
    }
    atomic_fetch_add(&srv->workers_alive, 1); /* the worker takes it off when it ends */
  }
  return 0;
}

/* What the run table is given instead of the server: the queue it takes
 * a cancelled run out of, the counts, the send of the aio loop, and the
 * release of a run's session. */
static void release_session(void *arg, struct session *session) {
  struct runner *r = arg;
  session_release(&r->sessions, session);
}

int server_start(struct server *srv, struct sbx_error *err) {
  const struct server_settings *s = &srv->settings;
  struct run_table_deps deps = {
      .queue = &srv->queue,
      .stats = &srv->stats,
      .send = transport_send,
      .release_session = release_session,
      .session_arg = &srv->runner,
  };
  if (work_queue_init(&srv->queue, (size_t)s->queue, srv->n_workers) < 0 ||
      run_table_init(&srv->runs, &deps, (size_t)s->max_started_runs, (size_t)s->max_watchers,
                     (uint64_t)s->run_result_ttl_s * 1000u) < 0)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "queue");
  srv->runs_ready = true;
  if (run_table_start(&srv->runs, err) < 0)
    return -1;
  handlers_init(srv);
  runtime_check_all(srv); /* before anyone can call */
  if (open_socket(srv, err) < 0 || transport_open(srv, err) < 0 || start_workers(srv, err) < 0)
    return -1;
  transport_start(srv);
  return 0;
}

void server_drain(struct server *srv) {
  atomic_store(&srv->draining, true);
  /* What is still queued is answered now, UNAVAILABLE (it did not run);
   * workers finish the run they are in, then exit. */
  work_queue_close(&srv->queue);
  worker_refuse_queued(srv);
  for (unsigned i = 0; i < srv->n_workers; i++)
    pthread_join(srv->workers[i], NULL);
  /* Every run has ended: nothing waits on one any more. */
  run_table_stop(&srv->runs);
  /* Let the last replies reach their pipes before closing the socket. */
  for (int i = 0; i < 200 && transport_in_flight(srv) > 0; i++)
    usleep(10 * 1000);
  usleep(100 * 1000);
  nng_close(srv->sock);
  tls_listen_free(&srv->tls_listen);
}

void server_free(struct server *srv) {
  transport_free(srv);
  free(srv->workers);
  work_queue_destroy(&srv->queue);
  if (srv->runs_ready) {
    run_table_stop(&srv->runs);
    run_table_destroy(&srv->runs);
  }
  conns_destroy(&srv->conns);
  rpc_stats_destroy(&srv->stats);
}

/* The runner's layers (run/, requirements/, sandbox/) have no reader of
 * their own: their numbers are copied here, one place. */
static void runner_figures(struct server *srv, struct server_stats_read *out) {
  struct runner *r = &srv->runner;
  for (int k = 0; k < KILLED_BY_N; k++)
    out->runs_by_killed_by[k] = atomic_load(&r->stats.by_killed_by[k]);
  stats_histogram_read(&r->stats.wall, &out->run_wall);
  stats_histogram_read(&r->stats.cpu, &out->run_cpu);
  stats_histogram_read(&r->stats.queue_wait, &out->queue_wait);
  stats_histogram_read(&r->installer.build_time, &out->build_time);
  out->sessions = session_count(&r->sessions);
  struct installer *in = &r->installer;
  if (in->info.available)
    envstore_counts(&in->store, &out->environments, &out->environments_bytes);
  out->builds_total = atomic_load(&in->store.builds_total);
  out->build_failures_total = atomic_load(&in->store.build_failures_total);
  out->evictions_total = atomic_load(&in->store.evictions_total);
  out->interpreters = interp_count(&r->interps);
  out->interpreter_starts = atomic_load(&r->interps.starts);
  out->interpreter_evictions = atomic_load(&r->interps.evictions);
  out->interpreter_lost = atomic_load(&r->interps.lost);
  if (srv->engine != NULL) {
    out->isolation = sandbox_engine_report(srv->engine);
    sandbox_zygote_stats(srv->engine, &out->zygotes);
  }
}

size_t server_zygote_memory(struct server *srv, struct sandbox_zygote_memory **out) {
  return runner_zygote_memory(&srv->runner, out);
}

void server_stats_read(struct server *srv, struct server_stats_read *out) {
  const struct server_settings *s = &srv->settings;
  memset(out, 0, sizeof(*out));
  rpc_stats_read(&srv->stats, &out->rpc);
  out->rpc_live = &srv->stats;
  out->tenants = &srv->tenants;
  out->runs_by_tenant = &srv->runner.stats.by_tenant;
  out->egress_by_tenant = &srv->runner.stats.egress_by_tenant;
  for (int k = 0; k < EGRESS_COUNTS_N; k++)
    out->egress[k] = atomic_load(&srv->runner.stats.egress[k]);
  out->requests_total = atomic_load(&srv->requests_total);
  work_queue_counts(&srv->queue, &out->queued, &out->running);
  out->queue_full = work_queue_full(&srv->queue);
  out->queue_capacity = s->queue;
  out->workers = srv->n_workers;
  out->workers_alive = atomic_load(&srv->workers_alive);
  out->zygotes_warming = atomic_load(&srv->zygotes_warming);
  out->draining = atomic_load(&srv->draining);
  run_table_stats_read(&srv->runs, &out->run_table);
  conns_stats_read(&srv->conns, &out->conns);
  out->sessions_limit = s->max_sessions;
  out->environments_limit_bytes = s->requirements_store_bytes;
  out->interpreters_limit = s->max_interpreters;
  runner_figures(srv, out);
}
