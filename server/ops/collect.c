/* collect.c: every metric sandboxd exposes, declared once in one table
 * (name, type, help, how to read it), in the order /metrics lists them;
 * docs/OPERATIONS.md lists the same names. Each is read from what the
 * layers keep anyway, copied once per scrape by server_stats_read
 * (rpc/server.h: the RPC layer's answers and refusals, the queue, the run
 * table, the connection table; the runs' counts and histograms, the
 * installer's builds, the sessions, the store, the zygotes and the
 * interpreters), from /proc/self, and from each zygote's
 * /proc/PID/smaps_rollup (server_zygote_memory). Never reaches into struct
 * server. The
 * tenant label has one value per tenant ever loaded (tenants_count): the
 * tenants file bounds the series; calls of no tenant (Health, refused at
 * authentication) carry no tenant label. A
 * scrape takes no lock on anyone's hot path beyond the brief ones those
 * layers' own count functions take (the zygotes': a few fields copied per
 * slot). */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "envelope.h"
#include "metrics.h"
#include "ops.h"
#include "process.h"
#include "server.h"
#include "tenants.h"

struct collect {
  FILE *out;
  struct server_stats_read st; /* read once per scrape */
  struct http_listener *http;
  struct process_figures proc;
  /* Each ready zygote's memory (server_zygote_memory), read once per
   * scrape for both families. */
  struct sandbox_zygote_memory *zygote_memory;
  size_t n_zygote_memory;
};

struct metric_def {
  const char *name;
  const char *type; /* counter, gauge, histogram */
  const char *help;
  /* One of the two: a single unlabelled sample, or the samples written. */
  double (*value)(struct collect *c);
  void (*write)(struct collect *c, const char *name);
};

static void write_build_info(struct collect *c, const char *name) {
  struct metric_label l[] = {{"version", SANDBOXD_VERSION}};
  metrics_sample_u64(c->out, name, l, 1, 1);
}

static void write_isolation_info(struct collect *c, const char *name) {
  const struct sandbox_report *rep = c->st.isolation;
  if (rep == NULL)
    return;
  struct metric_label l[] = {
      {"backend", rep->backend_name != NULL ? rep->backend_name : "unknown"},
      {"seccomp", rep->seccomp ? "true" : "false"},
      {"cpu_share_per_slot", rep->cpu_share ? "true" : "false"},
  };
  metrics_sample_u64(c->out, name, l, 3, 1);
}

/* One tenant's answers (tenant NULL: the calls of no tenant), only the
 * pairs that happened: methods x codes is mostly zeros. */
static void write_replies(struct collect *c, const char *name, const struct tenant *tn,
                          const atomic_uint_fast64_t *counts) {
  const ProtobufCServiceDescriptor *desc = &sandbox__v1__sandbox__descriptor;
  for (size_t m = 0; m <= RPC_STATS_METHODS; m++) {
    if (m < RPC_STATS_METHODS && m >= desc->n_methods)
      continue;
    for (int code = 0; code < RPC_STATS_CODES; code++) {
      uint64_t v =
          atomic_load_explicit(&counts[m * RPC_STATS_CODES + (size_t)code], memory_order_relaxed);
      if (v == 0)
        continue;
      struct metric_label l[] = {
          {"tenant", tn != NULL ? tn->name : ""},
          {"method", sbx_method_name(m < RPC_STATS_METHODS ? (int)m : -1)},
          {"code", sbx_code_name(code)},
      };
      metrics_sample_u64(c->out, name, tn != NULL ? l : l + 1, tn != NULL ? 3 : 2, v);
    }
  }
}

static void write_requests(struct collect *c, const char *name) {
  write_replies(c, name, NULL, &c->st.rpc_live->replies[0][0]);
  size_t n = tenants_count(c->st.tenants);
  for (size_t i = 0; i < n; i++) {
    struct tenant *tn = tenants_at(c->st.tenants, i);
    const atomic_uint_fast64_t *row =
        tn != NULL ? tenant_counts_row(&c->st.rpc_live->by_tenant, tn->index) : NULL;
    if (row != NULL)
      write_replies(c, name, tn, row);
  }
}

/* One sample per tenant ever loaded: what it uses now (tenants.h). */
static void write_tenant_gauge(struct collect *c, const char *name,
                               unsigned (*use)(struct tenant *tn)) {
  size_t n = tenants_count(c->st.tenants);
  for (size_t i = 0; i < n; i++) {
    struct tenant *tn = tenants_at(c->st.tenants, i);
    if (tn == NULL)
      continue;
    struct metric_label l[] = {{"tenant", tn->name}};
    metrics_sample_u64(c->out, name, l, 1, use(tn));
  }
}

#define TENANT_GAUGE(fn, field)                                                                    \
  static unsigned fn##_use(struct tenant *tn) {                                                    \
    return atomic_load(&tn->field);                                                                \
  }                                                                                                \
  static void fn(struct collect *c, const char *name) {                                            \
    write_tenant_gauge(c, name, fn##_use);                                                         \
  }
TENANT_GAUGE(write_tenant_running, running)
TENANT_GAUGE(write_tenant_queued, queued)
TENANT_GAUGE(write_tenant_sessions, sessions)
TENANT_GAUGE(write_tenant_interpreters, interpreters)
#undef TENANT_GAUGE

static void write_auth_failures(struct collect *c, const char *name) {
  for (int r = 0; r < TENANT_AUTH_FAILURES_N; r++) {
    struct metric_label l[] = {{"reason", tenant_auth_failure_name((enum tenant_auth_failure)r)}};
    metrics_sample_u64(c->out, name, l, 1, atomic_load(&c->st.tenants->auth_failures[r]));
  }
}

static void write_tenants_reloads(struct collect *c, const char *name) {
  struct metric_label ok[] = {{"result", "ok"}}, failed[] = {{"result", "failed"}};
  metrics_sample_u64(c->out, name, ok, 1, atomic_load(&c->st.tenants->reloads));
  metrics_sample_u64(c->out, name, failed, 1, atomic_load(&c->st.tenants->reload_failures));
}

static void write_rejections(struct collect *c, const char *name) {
  for (int r = 0; r < RPC_REJECT_N; r++) {
    struct metric_label l[] = {{"reason", rpc_rejection_name((enum rpc_rejection)r)}};
    metrics_sample_u64(c->out, name, l, 1, c->st.rpc.rejections[r]);
  }
}

/* Every tenant's, zeros too (a rate over a series that appears late
 * misses its first runs); the runs of no tenant only when there are any. */
static void write_runs(struct collect *c, const char *name) {
  for (int k = 0; k < KILLED_BY_N; k++) {
    struct metric_label l[] = {{"killed_by", killed_by_name(k)}};
    if (c->st.runs_by_killed_by[k] > 0)
      metrics_sample_u64(c->out, name, l, 1, c->st.runs_by_killed_by[k]);
  }
  size_t n = tenants_count(c->st.tenants);
  for (size_t i = 0; i < n; i++) {
    struct tenant *tn = tenants_at(c->st.tenants, i);
    if (tn == NULL)
      continue;
    const atomic_uint_fast64_t *row = tenant_counts_row(c->st.runs_by_tenant, tn->index);
    for (int k = 0; k < KILLED_BY_N; k++) {
      struct metric_label l[] = {{"tenant", tn->name}, {"killed_by", killed_by_name(k)}};
      metrics_sample_u64(c->out, name, l, 2,
                         row != NULL ? atomic_load_explicit(&row[k], memory_order_relaxed) : 0);
    }
  }
}

/* One egress family: the columns first..first+1 of each row under the
 * label key with the two values' names. Every tenant's, zeros too; the
 * connections of no tenant only when there are any. */
static void write_egress_pair(struct collect *c, const char *name, int first, const char *key,
                              const char *const values[2]) {
  for (int k = 0; k < 2; k++) {
    struct metric_label l[] = {{key, values[k]}};
    if (c->st.egress[first + k] > 0)
      metrics_sample_u64(c->out, name, l, 1, c->st.egress[first + k]);
  }
  size_t n = tenants_count(c->st.tenants);
  for (size_t i = 0; i < n; i++) {
    struct tenant *tn = tenants_at(c->st.tenants, i);
    if (tn == NULL)
      continue;
    const atomic_uint_fast64_t *row = tenant_counts_row(c->st.egress_by_tenant, tn->index);
    for (int k = 0; k < 2; k++) {
      struct metric_label l[] = {{"tenant", tn->name}, {key, values[k]}};
      metrics_sample_u64(c->out, name, l, 2,
                         row != NULL ? atomic_load_explicit(&row[first + k], memory_order_relaxed)
                                     : 0);
    }
  }
}

static void write_egress_connections(struct collect *c, const char *name) {
  static const char *const decisions[2] = {"allowed", "refused"};
  write_egress_pair(c, name, EGRESS_COUNT_ALLOWED, "decision", decisions);
}

static void write_egress_bytes(struct collect *c, const char *name) {
  static const char *const directions[2] = {"up", "down"};
  write_egress_pair(c, name, EGRESS_COUNT_BYTES_UP, "direction", directions);
}

static void write_run_wall(struct collect *c, const char *name) {
  metrics_histogram_seconds(c->out, name, NULL, 0, &c->st.run_wall);
}

static void write_run_cpu(struct collect *c, const char *name) {
  metrics_histogram_seconds(c->out, name, NULL, 0, &c->st.run_cpu);
}

static void write_queue_wait(struct collect *c, const char *name) {
  metrics_histogram_seconds(c->out, name, NULL, 0, &c->st.queue_wait);
}

static void write_build_time(struct collect *c, const char *name) {
  metrics_histogram_seconds(c->out, name, NULL, 0, &c->st.build_time);
}

/* The single values: each one figure of the read. */
#define FIGURE(fn, expr)                                                                           \
  static double fn(struct collect *c) {                                                            \
    return (double)(expr);                                                                         \
  }
FIGURE(queue_depth, c->st.queued)
FIGURE(runs_in_progress, c->st.running)
FIGURE(queue_capacity, c->st.queue_capacity)
FIGURE(workers, c->st.workers)
FIGURE(sessions, c->st.sessions)
FIGURE(sessions_limit, c->st.sessions_limit)
FIGURE(started_runs, c->st.run_table.started)
FIGURE(watchers, c->st.run_table.waiting)
FIGURE(environments, c->st.environments)
FIGURE(environments_bytes, c->st.environments_bytes)
FIGURE(environments_limit_bytes, c->st.environments_limit_bytes)
FIGURE(builds_total, c->st.builds_total)
FIGURE(build_failures_total, c->st.build_failures_total)
FIGURE(evictions_total, c->st.evictions_total)
FIGURE(zygotes, c->st.zygotes.running)
FIGURE(zygote_starts, c->st.zygotes.starts)
FIGURE(zygote_start_failures, c->st.zygotes.start_failures)
FIGURE(zygote_forks, c->st.zygotes.forks)
FIGURE(interpreters, c->st.interpreters)
FIGURE(interpreters_limit, c->st.interpreters_limit)
FIGURE(interpreter_starts, c->st.interpreter_starts)
FIGURE(interpreter_evictions, c->st.interpreter_evictions)
FIGURE(interpreter_lost, c->st.interpreter_lost)
FIGURE(zygote_recycled, c->st.zygotes.recycled)
FIGURE(connections, c->st.conns.open)
FIGURE(connections_refused, c->st.conns.refused_total)
FIGURE(connections_idle_closed, c->st.conns.idle_closed_total)
#undef FIGURE

/* No sample when the backend cannot say (a family without samples is
 * valid): 0 would read as "nothing held". */
static void write_zygote_memory(struct collect *c, const char *name) {
  if (c->st.zygotes.have_memory)
    metrics_sample_u64(c->out, name, NULL, 0, c->st.zygotes.memory_bytes);
}

/* One sample per ready zygote, by worker slot (one zygote per slot at
 * most: no environment label); none without --zygote. */
static void write_zygote_bytes(struct collect *c, const char *name, bool pss) {
  for (size_t i = 0; i < c->n_zygote_memory; i++) {
    const struct sandbox_zygote_memory *z = &c->zygote_memory[i];
    char slot[16];
    snprintf(slot, sizeof(slot), "%u", z->slot);
    struct metric_label l[] = {{"slot", slot}};
    metrics_sample_u64(c->out, name, l, 1, pss ? z->pss_bytes : z->rss_bytes);
  }
}

static void write_zygote_rss(struct collect *c, const char *name) {
  write_zygote_bytes(c, name, false);
}

static void write_zygote_pss(struct collect *c, const char *name) {
  write_zygote_bytes(c, name, true);
}

/* Only the pairs that happened, per route ("none": no route took the path). */
static void write_http_counts(struct collect *c, const char *name, const char *route,
                              const struct http_counts *counts) {
  for (size_t slot = 0; slot < HTTP_CODE_SLOTS; slot++) {
    uint64_t v = atomic_load_explicit(&counts->by_code[slot], memory_order_relaxed);
    if (v == 0)
      continue;
    char code[8];
    unsigned status = http_counted_code(slot);
    if (status != 0)
      snprintf(code, sizeof(code), "%u", status);
    else
      snprintf(code, sizeof(code), "other");
    struct metric_label l[] = {{"route", route}, {"code", code}};
    metrics_sample_u64(c->out, name, l, 2, v);
  }
}

static void write_http_requests(struct collect *c, const char *name) {
  for (size_t i = 0; i < c->http->n_routes; i++)
    write_http_counts(c, name, c->http->routes[i].path, &c->http->routes[i].answers);
  write_http_counts(c, name, "none", &c->http->unrouted);
}

static void write_http_cut(struct collect *c, const char *name) {
  struct metric_label slow[] = {{"reason", "request_timeout"}};
  struct metric_label body[] = {{"reason", "body_too_large"}};
  metrics_sample_u64(c->out, name, slow, 1, atomic_load(&c->http->cut_slow_total));
  metrics_sample_u64(c->out, name, body, 1, atomic_load(&c->http->cut_body_total));
}

static double http_connections(struct collect *c) {
  return (double)http_listener_connections(c->http);
}

static double http_connections_total(struct collect *c) {
  return (double)atomic_load(&c->http->connections_total);
}

static double draining(struct collect *c) {
  return c->st.draining ? 1 : 0;
}

static double ready(struct collect *c) {
  char why[160];
  return ops_ready(&c->st, why, sizeof(why)) ? 1 : 0;
}

static double proc_cpu(struct collect *c) {
  return c->proc.cpu_seconds;
}
static double proc_rss(struct collect *c) {
  return (double)c->proc.resident_bytes;
}
static double proc_vsize(struct collect *c) {
  return (double)c->proc.virtual_bytes;
}
static double proc_fds(struct collect *c) {
  return (double)c->proc.open_fds;
}
static double proc_max_fds(struct collect *c) {
  return (double)c->proc.max_fds;
}
static double proc_start(struct collect *c) {
  return c->proc.start_time_seconds;
}

#define VALUE(f) f, NULL
#define WRITE(f) NULL, f

static const struct metric_def metric_defs[] = {
    {"sandboxd_build_info", "gauge", "Always 1; the label says which sandboxd this is.",
     WRITE(write_build_info)},
    {"sandboxd_isolation_info", "gauge",
     "Always 1; the labels say how runs are isolated (the resource backend, seccomp, a CPU "
     "share per slot).",
     WRITE(write_isolation_info)},
    {"sandboxd_requests_total", "counter",
     "RPC calls answered, by the caller's tenant, method and status code (method unknown: the "
     "request named no method of the service or did not decode; no tenant label: Health, and "
     "calls refused before or at authentication).",
     WRITE(write_requests)},
    {"sandboxd_rejections_total", "counter",
     "RunCode calls refused before they ran, by reason: queue_full (every worker busy, the "
     "queue full), draining (shutting down), client_gone (the client left while queued), "
     "deadline_exceeded (the deadline passed while queued).",
     WRITE(write_rejections)},
    {"sandboxd_runs_total", "counter",
     "Runs the engine carried out, by the caller's tenant and what ended them (none: the program "
     "exited by itself).",
     WRITE(write_runs)},
    {"sandboxd_egress_connections_total", "counter",
     "Connections runs opened through the egress proxy (allow_net), by the caller's tenant and "
     "the proxy's decision (refused: by the run's allow list, an address check, the TLS server "
     "name or a cap).",
     WRITE(write_egress_connections)},
    {"sandboxd_egress_bytes_total", "counter",
     "Bytes relayed for runs by the egress proxy, by the caller's tenant and direction (up: from "
     "the run).",
     WRITE(write_egress_bytes)},
    {"sandboxd_run_wall_seconds", "histogram", "Wall-clock time of each run in the sandbox.",
     WRITE(write_run_wall)},
    {"sandboxd_run_cpu_seconds", "histogram",
     "CPU time of each run, every process of it, user and system.", WRITE(write_run_cpu)},
    {"sandboxd_queue_wait_seconds", "histogram",
     "Time from a RunCode call's arrival to a worker taking it, for the calls a worker ran.",
     WRITE(write_queue_wait)},
    {"sandboxd_environment_build_seconds", "histogram",
     "Time to build a requirements environment (pip in the sandbox, then the commit), failed "
     "builds included.",
     WRITE(write_build_time)},
    {"sandboxd_environment_builds_total", "counter", "Requirements environments built.",
     VALUE(builds_total)},
    {"sandboxd_environment_build_failures_total", "counter",
     "Requirements environment builds that failed.", VALUE(build_failures_total)},
    {"sandboxd_environment_evictions_total", "counter",
     "Environments evicted from the store (least recently used, past its byte cap).",
     VALUE(evictions_total)},
    {"sandboxd_environments", "gauge", "Environments ready in the requirements store.",
     VALUE(environments)},
    {"sandboxd_environments_bytes", "gauge", "Disk the environments in the store use.",
     VALUE(environments_bytes)},
    {"sandboxd_environments_limit_bytes", "gauge",
     "The store's byte cap (--requirements-store-bytes).", VALUE(environments_limit_bytes)},
    {"sandboxd_queue_depth", "gauge", "RunCode calls waiting for a worker.", VALUE(queue_depth)},
    {"sandboxd_queue_capacity", "gauge",
     "Calls that may wait for a worker (--queue); past it RESOURCE_EXHAUSTED.",
     VALUE(queue_capacity)},
    {"sandboxd_runs_in_progress", "gauge", "RunCode calls a worker is carrying out now.",
     VALUE(runs_in_progress)},
    {"sandboxd_workers", "gauge", "Worker slots (--workers), each one engine slot.",
     VALUE(workers)},
    {"sandboxd_sessions", "gauge", "Sessions open (each holds a workspace).", VALUE(sessions)},
    {"sandboxd_sessions_limit", "gauge", "Sessions kept at most (--max-sessions).",
     VALUE(sessions_limit)},
    {"sandboxd_started_runs", "gauge",
     "StartRun runs in the run table: queued, running, or ended with the outcome not yet read.",
     VALUE(started_runs)},
    {"sandboxd_watchers", "gauge", "WatchRun and CancelRun calls waiting for news of a run.",
     VALUE(watchers)},
    {"sandboxd_zygotes", "gauge", "Zygotes running now (--zygote; at most one per worker slot).",
     VALUE(zygotes)},
    {"sandboxd_zygote_memory_bytes", "gauge",
     "Memory charged to the zygotes' cgroup: what their preloaded imports hold, shared by the "
     "runs forked from them.",
     WRITE(write_zygote_memory)},
    {"sandboxd_zygote_rss_bytes", "gauge",
     "Resident memory of each ready zygote's process, by worker slot (/proc/PID/smaps_rollup: "
     "pages shared with other processes counted whole).",
     WRITE(write_zygote_rss)},
    {"sandboxd_zygote_pss_bytes", "gauge",
     "Proportional memory of each ready zygote's process, by worker slot: each page divided by "
     "the processes mapping it (the other zygotes, its live runs), so the sum over the slots is "
     "about what the zygotes cost together.",
     WRITE(write_zygote_pss)},
    {"sandboxd_zygote_starts_total", "counter", "Zygotes started.", VALUE(zygote_starts)},
    {"sandboxd_zygote_start_failures_total", "counter",
     "Zygote starts that failed (a --zygote-preload module that does not import, among others).",
     VALUE(zygote_start_failures)},
    {"sandboxd_zygote_forks_total", "counter", "Runs forked from a zygote (runtime python-zygote).",
     VALUE(zygote_forks)},
    {"sandboxd_zygote_recycled_total", "counter",
     "Zygotes replaced: due after --zygote-max-forks runs or --zygote-max-age-s, or needed for "
     "another requirements environment.",
     VALUE(zygote_recycled)},
    {"sandboxd_interpreters", "gauge",
     "Living interpreters of INTERPRETER sessions (each holds memory, not a worker).",
     VALUE(interpreters)},
    {"sandboxd_interpreters_limit", "gauge", "Living interpreters at most (--max-interpreters).",
     VALUE(interpreters_limit)},
    {"sandboxd_interpreter_starts_total", "counter", "Interpreters started.",
     VALUE(interpreter_starts)},
    {"sandboxd_interpreter_evictions_total", "counter",
     "Idle interpreters ended to make room for another session's (least recently used first).",
     VALUE(interpreter_evictions)},
    {"sandboxd_interpreter_lost_total", "counter",
     "Interpreters that ended with their session's state lost: evicted, idle, lifetime, timeout, "
     "memory cap, or exit.",
     VALUE(interpreter_lost)},
    {"sandboxd_connections", "gauge", "RPC client connections open.", VALUE(connections)},
    {"sandboxd_connections_refused_total", "counter",
     "RPC connections closed at once because their listener was at --max-connections.",
     VALUE(connections_refused)},
    {"sandboxd_connections_idle_closed_total", "counter",
     "RPC connections closed after --idle-timeout-ms without a call.",
     VALUE(connections_idle_closed)},
    {"sandboxd_http_requests_total", "counter",
     "HTTP requests answered by the listener's routes (operations and fronts), by route (its "
     "path or prefix; none: no route took the path) and status code; the listener's own "
     "refusals of malformed requests (400, 414, 431) are not counted.",
     WRITE(write_http_requests)},
    {"sandboxd_http_connections", "gauge", "HTTP connections open (each holds one thread).",
     VALUE(http_connections)},
    {"sandboxd_http_connections_total", "counter", "HTTP connections accepted.",
     VALUE(http_connections_total)},
    {"sandboxd_http_connections_cut_total", "counter",
     "HTTP connections cut off, by reason: request_timeout (a request not in within "
     "--http-request-timeout-s), body_too_large (a chunked body past --http-max-body-bytes).",
     WRITE(write_http_cut)},
    {"sandboxd_tenant_running", "gauge",
     "RunCode and StartRun calls a worker carries out now, "
     "by tenant.",
     WRITE(write_tenant_running)},
    {"sandboxd_tenant_queued", "gauge", "Calls waiting for a worker, by tenant.",
     WRITE(write_tenant_queued)},
    {"sandboxd_tenant_sessions", "gauge", "Sessions open, by tenant.",
     WRITE(write_tenant_sessions)},
    {"sandboxd_tenant_interpreters", "gauge",
     "Interpreters held by INTERPRETER sessions, by tenant (max_interpreters bounds them).",
     WRITE(write_tenant_interpreters)},
    {"sandboxd_auth_failures_total", "counter",
     "Calls refused UNAUTHENTICATED, by reason: no_credential, unknown_key (a key too long "
     "included), unknown_certificate.",
     WRITE(write_auth_failures)},
    {"sandboxd_tenants_reloads_total", "counter",
     "Reloads of the tenants file (SIGHUP), by result: ok, failed (the old registry kept).",
     WRITE(write_tenants_reloads)},
    {"sandboxd_draining", "gauge", "1 while the server drains after SIGTERM or SIGINT.",
     VALUE(draining)},
    {"sandboxd_ready", "gauge", "1 when /readyz answers 200.", VALUE(ready)},
    {"process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
     VALUE(proc_cpu)},
    {"process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", VALUE(proc_rss)},
    {"process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", VALUE(proc_vsize)},
    {"process_open_fds", "gauge", "Number of open file descriptors.", VALUE(proc_fds)},
    {"process_max_fds", "gauge", "Maximum number of open file descriptors.", VALUE(proc_max_fds)},
    {"process_start_time_seconds", "gauge",
     "Start time of the process since unix epoch in seconds.", VALUE(proc_start)},
};

char *ops_metrics_text(struct server *srv, struct http_listener *http, size_t *len) {
  char *text = NULL;
  FILE *out = open_memstream(&text, len);
  if (out == NULL)
    return NULL;
  struct collect c = {.out = out, .http = http};
  server_stats_read(srv, &c.st);
  process_figures_read(&c.proc);
  c.n_zygote_memory = server_zygote_memory(srv, &c.zygote_memory);
  for (size_t i = 0; i < sizeof(metric_defs) / sizeof(metric_defs[0]); i++) {
    const struct metric_def *d = &metric_defs[i];
    metrics_family(out, d->name, d->type, d->help);
    if (d->value != NULL)
      metrics_sample_f64(out, d->name, NULL, 0, d->value(&c));
    else
      d->write(&c, d->name);
  }
  free(c.zygote_memory);
  if (ferror(out) != 0) {
    fclose(out);
    free(text);
    return NULL;
  }
  fclose(out);
  return text;
}
