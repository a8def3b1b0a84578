/* handlers.c: the service's methods. RunCode is checked against its
 * tenant's rate limit, validated, its session reserved and the call queued
 * for a worker (or refused at once: by the queue, or by its tenant's
 * max_queued); Health and GetInfo read counters; CloseSession, ListFiles
 * and ReadFile act on the session table and read a session's tmpfs in the
 * nng callback (bounded by the caps, never following the sandbox's
 * symlinks). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "handlers.h"
#include "cleanup.h"
#include "clock.h"
#include "safefs.h"
#include "server.h"
#include "server_state.h"
#include "validate.h"
#include "workspace.h"

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* The handler tells the dispatcher through this (on its stack) whether it
 * handed the call to a worker: after that the dispatcher must not touch the
 * call, which a worker may already be answering. */
struct dispatch {
  struct server_call *call;
  bool queued;
  bool answered;
  struct sbx_error err; /* why, when the handler answers without a response */
};

static void dispatch_closure(const ProtobufCMessage *response, void *data) {
  struct dispatch *d = data;
  d->answered = true;
  if (response != NULL)
    call_reply(d->call, SBX_OK, "", response);
  else if (d->call->input != NULL &&
           d->call->input->descriptor == &sandbox__v1__run_code_request__descriptor)
    call_reply_not_run(d->call, &d->err);
  else
    call_reply(d->call, d->err.code, d->err.msg, NULL);
}

static struct server *server_of(Sandbox__V1__Sandbox_Service *service) {
  return container_of(service, struct server, service);
}

/* The tenant's rate limit (rate_per_s, burst): false with err when it has
 * no token now. Taken before anything is reserved for the call. */
static bool rate_allows(struct server *srv, struct server_call *call, struct sbx_error *err) {
  uint64_t retry_ms = 0;
  if (call->tenant == NULL ||
      tenant_rate_take(&srv->tenants, call->tenant, sbx_monotonic_ms(), &retry_ms))
    return true;
  rpc_stats_reject(&srv->stats, RPC_REJECT_RATE_LIMITED);
  sbx_error_set(err, SBX_RESOURCE_EXHAUSTED, 0,
                "tenant %s: over its rate limit (rate_per_s %g, burst %g); retry in %llu ms",
                call->tenant->name, call->policy.rate_per_s, call->policy.burst,
                (unsigned long long)retry_ms);
  return false;
}

/* Why the queue took no more: the tenant's own max_queued, or the queue. */
static void queue_refusal(struct server *srv, const struct server_call *call,
                          enum work_queue_push_result why, struct sbx_error *err) {
  if (why == WORK_QUEUE_TENANT_FULL) {
    rpc_stats_reject(&srv->stats, RPC_REJECT_TENANT_QUEUE_FULL);
    sbx_error_set(err, SBX_RESOURCE_EXHAUSTED, 0,
                  "tenant %s: max_queued %u of its calls already wait for a worker; retry later",
                  call->tenant != NULL ? call->tenant->name : "?", call->policy.max_queued);
    return;
  }
  rpc_stats_reject(&srv->stats, RPC_REJECT_QUEUE_FULL);
  sbx_error_set(err, SBX_RESOURCE_EXHAUSTED, 0,
                "all %u workers busy and the queue of %lld is full; retry later", srv->n_workers,
                (long long)srv->settings.queue);
}

/* RunCode and StartRun: within the tenant's rate, validated, the session
 * reserved, a record of the run table made and queued in the tenant's flow;
 * or refused (nothing ran). Returns the record when it was queued (still
 * pinned: run_table_publish lets go), NULL when the call was answered
 * through closure. */
static struct live_run *dispatch_run(struct server *srv, struct dispatch *d,
                                     const Sandbox__V1__RunCodeRequest *input, bool started,
                                     void (*closure)(const ProtobufCMessage *, void *)) {
  void *closure_data = d;
  struct server_call *call = d->call;
  call->session = NULL;
  call->session_created = false;
  if (!rate_allows(srv, call, &d->err)) {
    closure(NULL, closure_data);
    return NULL;
  }
  if (validate_run_request(input, &srv->settings, srv->runner.runtimes, &call->policy.limits_max,
                           call->tenant->name,
                           call->policy.has_egress_allow ? &call->policy.egress_allow : NULL,
                           &call->limits, &call->compile_limits, &call->runtime, &d->err) < 0) {
    closure(NULL, closure_data);
    return NULL;
  }
  const struct install_info *info = &srv->runner.installer.info;
  if (input->n_requirements > 0 && !info->available) {
    sbx_error_set(&d->err, SBX_FAILED_PRECONDITION, 0,
                  "requirements: this server cannot install packages: %s", info->why_unavailable);
    closure(NULL, closure_data);
    return NULL;
  }
  if (input->session_id[0] != '\0' &&
      session_reserve(&srv->runner.sessions, call->tenant, call->policy.max_sessions,
                      input->session_id, &call->session, &call->session_created, &d->err) < 0) {
    closure(NULL, closure_data);
    return NULL;
  }
  struct live_run *run = run_table_add(&srv->runs, call, started, &d->err);
  enum work_queue_push_result pushed =
      run != NULL ? work_queue_push(&srv->queue, run, call->tenant, &call->policy)
                  : WORK_QUEUE_FULL;
  if (pushed == WORK_QUEUE_PUSHED)
    return run;
  if (run != NULL) {
    run_table_give_back(&srv->runs, run, call);
    queue_refusal(srv, call, pushed, &d->err);
  }
  if (call->session != NULL) {
    session_release(&srv->runner.sessions, call->session);
    call->session = NULL;
  }
  closure(NULL, closure_data);
  return NULL;
}

/* RunCode: the worker's end of the run answers it (run_table_finish). */
static void handle_run_code(Sandbox__V1__Sandbox_Service *service,
                            const Sandbox__V1__RunCodeRequest *input,
                            Sandbox__V1__RunCodeResponse_Closure closure, void *closure_data) {
  struct server *srv = server_of(service);
  struct dispatch *d = closure_data;
  struct live_run *run =
      dispatch_run(srv, d, input, false, (void (*)(const ProtobufCMessage *, void *))closure);
  if (run == NULL)
    return;
  d->queued = true; /* the run table answers it */
  run_table_publish(&srv->runs, run);
}

/* StartRun: answered with the run id once the run is queued. */
static void handle_start_run(Sandbox__V1__Sandbox_Service *service,
                             const Sandbox__V1__RunCodeRequest *input,
                             Sandbox__V1__StartRunResponse_Closure closure, void *closure_data) {
  struct server *srv = server_of(service);
  struct dispatch *d = closure_data;
  struct live_run *run =
      dispatch_run(srv, d, input, true, (void (*)(const ProtobufCMessage *, void *))closure);
  if (run == NULL)
    return;
  char run_id[ID_MAX + 1];
  memcpy(run_id, run->run_id, sizeof(run_id));
  run_table_publish(&srv->runs, run);
  Sandbox__V1__StartRunResponse resp = SANDBOX__V1__START_RUN_RESPONSE__INIT;
  resp.run_id = run_id;
  closure(&resp, closure_data);
}

/* WatchRun and CancelRun: the run table answers now or when there is news. */
static void answer_from_run_table(struct dispatch *d, enum run_table_answer a,
                                  void (*closure)(const ProtobufCMessage *, void *)) {
  if (a == RUN_TABLE_WAITING)
    d->queued = true;
  else if (a == RUN_TABLE_REPLIED)
    d->answered = true; /* the reply is built on the call */
  else
    closure(NULL, d);
}

/* A call that may wait lets go of its request first (run_table.h). */
static void free_request(struct server_call *call) {
  protobuf_c_message_free_unpacked(call->input, &call->alloc.base);
  call->input = NULL;
}

static void handle_watch_run(Sandbox__V1__Sandbox_Service *service,
                             const Sandbox__V1__WatchRunRequest *input,
                             Sandbox__V1__WatchRunResponse_Closure closure, void *closure_data) {
  struct server *srv = server_of(service);
  struct dispatch *d = closure_data;
  struct run_table_watch_args args = {
      .out_off = input->stdout_offset,
      .err_off = input->stderr_offset,
      .wait_ms = input->wait_ms,
  };
  snprintf(args.run_id, sizeof(args.run_id), "%s", input->run_id);
  free_request(d->call);
  answer_from_run_table(d, run_table_watch(&srv->runs, d->call, &args, &d->err),
                        (void (*)(const ProtobufCMessage *, void *))closure);
}

static void handle_cancel_run(Sandbox__V1__Sandbox_Service *service,
                              const Sandbox__V1__CancelRunRequest *input,
                              Sandbox__V1__CancelRunResponse_Closure closure, void *closure_data) {
  struct server *srv = server_of(service);
  struct dispatch *d = closure_data;
  char run_id[ID_MAX + 2];
  snprintf(run_id, sizeof(run_id), "%s", input->run_id);
  free_request(d->call);
  answer_from_run_table(d, run_table_cancel(&srv->runs, d->call, run_id, &d->err),
                        (void (*)(const ProtobufCMessage *, void *))closure);
}

static void handle_health(Sandbox__V1__Sandbox_Service *service,
                          const Sandbox__V1__HealthRequest *input,
                          Sandbox__V1__HealthResponse_Closure closure, void *closure_data) {
  struct server *srv = server_of(service);
  Sandbox__V1__HealthResponse resp = SANDBOX__V1__HEALTH_RESPONSE__INIT;
  resp.status = atomic_load(&srv->draining)
                    ? SANDBOX__V1__HEALTH_RESPONSE__SERVING_STATUS__NOT_SERVING
                    : SANDBOX__V1__HEALTH_RESPONSE__SERVING_STATUS__SERVING;
  closure(&resp, closure_data);
}

static void isolation_report(const struct sandbox_report *rep, Sandbox__V1__IsolationReport *iso) {
  iso->backend = (char *)(rep->backend_name != NULL ? rep->backend_name : "");
  iso->cgroup_path = (char *)rep->cgroup_path;
  iso->seccomp = rep->seccomp;
  iso->namespaces = (char *)(rep->namespaces != NULL ? rep->namespaces : "");
  iso->uid_base = (uint32_t)rep->uid_base;
  iso->slots = rep->slots;
  iso->memory_per_process = rep->backend == SANDBOX_BACKEND_RLIMIT;
  iso->cpu_share_per_slot = rep->cpu_share;
}

/* What requirements can do here, into resp; index holds the index URL. */
static void requirements_info(struct installer *in, Sandbox__V1__GetInfoResponse *resp, char *index,
                              size_t index_len) {
  index[0] = '\0';
  resp->requirements_available = in->info.available;
  if (!in->info.available)
    return;
  install_describe_index(in->settings, index, index_len);
  resp->requirements_wheelhouse = in->settings->wheelhouse[0] != '\0';
  size_t envs;
  uint64_t bytes;
  envstore_counts(&in->store, &envs, &bytes);
  resp->environments = (uint32_t)envs;
  resp->environment_bytes = bytes;
  resp->environment_builds_total = atomic_load(&in->store.builds_total);
  resp->environment_build_failures_total = atomic_load(&in->store.build_failures_total);
}

/* The preload list, split at its commas into names (which point into
 * buf); the zygote figures from the engine. */
#define MAX_PRELOAD_NAMES (sizeof(((struct server_settings *)0)->zygote_preload) / 2)
static void zygote_info(struct server *srv, Sandbox__V1__GetInfoResponse *resp, char *buf,
                        size_t buf_len, char **names) {
  const struct server_settings *s = &srv->settings;
  resp->zygote_enabled = s->zygote;
  resp->zygote_max_forks = (uint64_t)s->zygote_max_forks;
  resp->zygote_max_age_s = (uint64_t)s->zygote_max_age_s;
  snprintf(buf, buf_len, "%s", s->zygote_preload);
  size_t n = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL && n < MAX_PRELOAD_NAMES;
       tok = strtok_r(NULL, ",", &save))
    names[n++] = tok;
  resp->n_zygote_preload = n;
  resp->zygote_preload = names;
  struct sandbox_zygote_stats st;
  sandbox_zygote_stats(srv->engine, &st);
  resp->zygotes = st.running;
  resp->zygote_memory_bytes = st.have_memory ? st.memory_bytes : 0;
  resp->zygote_starts_total = st.starts;
  resp->zygote_start_failures_total = st.start_failures;
  resp->zygote_forks_total = st.forks;
  resp->zygote_recycled_total = st.recycled;
}

/* Each ready zygote's memory, as GetInfo lists it: the engine's figures
 * and their messages, freed once the reply is packed
 * (zygote_memory_release). Without memory for them, the list is empty. */
struct zygote_memory_list {
  struct sandbox_zygote_memory *figures;
  Sandbox__V1__ZygoteMemory *msgs;
  Sandbox__V1__ZygoteMemory **ptrs;
};

static void zygote_memory_info(struct server *srv, Sandbox__V1__GetInfoResponse *resp,
                               struct zygote_memory_list *l) {
  size_t n = runner_zygote_memory(&srv->runner, &l->figures);
  if (n == 0)
    return;
  l->msgs = calloc(n, sizeof(*l->msgs));
  l->ptrs = calloc(n, sizeof(*l->ptrs));
  if (l->msgs == NULL || l->ptrs == NULL)
    return;
  for (size_t i = 0; i < n; i++) {
    const struct sandbox_zygote_memory *f = &l->figures[i];
    Sandbox__V1__ZygoteMemory *m = &l->msgs[i];
    sandbox__v1__zygote_memory__init(m);
    m->slot = f->slot;
    m->environment = (char *)f->environment;
    m->rss_bytes = f->rss_bytes;
    m->pss_bytes = f->pss_bytes;
    m->forks = f->forks;
    m->age_ms = f->age_ms;
    l->ptrs[i] = m;
  }
  resp->n_zygote_memory = n;
  resp->zygote_memory = l->ptrs;
}

static void zygote_memory_release(struct zygote_memory_list *l) {
  free(l->ptrs);
  free(l->msgs);
  free(l->figures);
}

/* Interpreter sessions (docs/INTERPRETER.md). */
static void interpreter_info(struct server *srv, Sandbox__V1__GetInfoResponse *resp) {
  const struct server_settings *s = &srv->settings;
  struct interp_table *t = &srv->runner.interps;
  resp->max_interpreters = (uint32_t)s->max_interpreters;
  resp->interpreters = interp_count(t);
  resp->interpreter_starts_total = atomic_load(&t->starts);
  resp->interpreter_evictions_total = atomic_load(&t->evictions);
  resp->interpreter_lost_total = atomic_load(&t->lost);
  resp->interpreter_idle_s = (uint64_t)s->interpreter_idle_s;
  resp->interpreter_max_lifetime_s = (uint64_t)s->interpreter_max_lifetime_s;
}

/* The runtimes (docs/RUNTIMES.md): the available ones' names, and each
 * with its language, version, aliases and state. The table is read-only
 * after start, so its strings are pointed to, not copied. */
struct runtime_list {
  Sandbox__V1__RuntimeInfo info[RUNTIMES_MAX];
  Sandbox__V1__RuntimeInfo *ptrs[RUNTIMES_MAX];
  char *names[RUNTIMES_MAX];
  char *aliases[RUNTIMES_MAX][RUNTIME_ALIASES_MAX];
};

static void runtime_info(struct server *srv, Sandbox__V1__GetInfoResponse *resp,
                         struct runtime_list *l) {
  struct runtime_table *t = srv->runner.runtimes;
  for (size_t i = 0; i < t->n; i++) {
    struct runtime *rt = &t->v[i];
    Sandbox__V1__RuntimeInfo *ri = &l->info[i];
    sandbox__v1__runtime_info__init(ri);
    ri->name = rt->name;
    ri->language = rt->language;
    ri->version = rt->version;
    for (size_t a = 0; a < rt->n_aliases; a++)
      l->aliases[i][a] = rt->aliases[a];
    ri->aliases = l->aliases[i];
    ri->n_aliases = rt->n_aliases;
    ri->available = rt->available;
    ri->unavailable_reason = rt->available ? "" : rt->why_unavailable;
    ri->compiled = rt->kind == RUNTIME_KIND_MANIFEST && rt->manifest.has_compile;
    ri->file = rt->kind == RUNTIME_KIND_MANIFEST ? rt->manifest.file : WORKSPACE_SCRIPT;
    l->ptrs[i] = ri;
    if (rt->available)
      l->names[resp->n_runtimes++] = rt->name;
  }
  resp->runtime_info = l->ptrs;
  resp->n_runtime_info = t->n;
  resp->runtimes = l->names;
}

/* The caller's own tenant: the policy its call runs under (read at
 * authentication) and what it uses now. Never another tenant's. */
/* An allow list as GetInfo shows it: each entry in the parser's spelling. */
struct allow_text {
  char text[EGRESS_ALLOW_MAX][EGRESS_ALLOW_ENTRY_MAX + 8];
  char *ptrs[EGRESS_ALLOW_MAX];
};

static size_t allow_text(const struct egress_allow *list, struct allow_text *out) {
  for (size_t i = 0; i < list->n; i++) {
    egress_allow_format(&list->e[i], out->text[i], sizeof out->text[i]);
    out->ptrs[i] = out->text[i];
  }
  return list->n;
}

static void tenant_info(const struct server_call *call, Sandbox__V1__TenantInfo *ti,
                        Sandbox__V1__Limits *limits_max, struct allow_text *egress) {
  const struct tenant *tn = call->tenant;
  const struct tenant_policy *p = &call->policy;
  ti->name = (char *)tn->name;
  ti->weight = p->weight;
  ti->max_concurrent = p->max_concurrent;
  ti->max_queued = p->max_queued;
  ti->max_sessions = p->max_sessions;
  ti->max_interpreters = p->max_interpreters;
  ti->rate_per_s = p->rate_per_s;
  ti->burst = p->burst;
  limits_to_proto(&p->limits_max, limits_max);
  ti->limits_max = limits_max;
  ti->running = atomic_load(&tn->running);
  ti->queued = atomic_load(&tn->queued);
  ti->sessions = atomic_load(&tn->sessions);
  ti->interpreters = atomic_load(&tn->interpreters);
  if (p->has_egress_allow && egress != NULL) {
    ti->n_egress_allow = allow_text(&p->egress_allow, egress);
    ti->egress_allow = egress->ptrs;
  }
}

static void handle_get_info(Sandbox__V1__Sandbox_Service *service,
                            const Sandbox__V1__GetInfoRequest *input,
                            Sandbox__V1__GetInfoResponse_Closure closure, void *closure_data) {
  struct server *srv = server_of(service);
  Sandbox__V1__GetInfoResponse resp = SANDBOX__V1__GET_INFO_RESPONSE__INIT;
  Sandbox__V1__IsolationReport iso = SANDBOX__V1__ISOLATION_REPORT__INIT;
  Sandbox__V1__Limits def = SANDBOX__V1__LIMITS__INIT, max = SANDBOX__V1__LIMITS__INIT;
  resp.version = SANDBOXD_VERSION;
  struct runtime_list *rl = calloc(1, sizeof *rl);
  if (rl == NULL) {
    struct dispatch *dd = closure_data;
    sbx_error_set(&dd->err, SBX_INTERNAL, ENOMEM, "GetInfo");
    closure(NULL, closure_data);
    return;
  }
  runtime_info(srv, &resp, rl);
  isolation_report(sandbox_engine_report(srv->engine), &iso);
  resp.isolation = &iso;
  limits_to_proto(&srv->settings.default_limits, &def);
  limits_to_proto(&srv->settings.max_limits, &max);
  resp.default_limits = &def;
  resp.max_limits = &max;
  size_t queued, running;
  work_queue_counts(&srv->queue, &queued, &running);
  resp.workers = srv->n_workers;
  resp.queue_capacity = (uint32_t)srv->settings.queue;
  resp.queue_depth = (uint32_t)queued;
  resp.running = (uint32_t)running;
  resp.max_message_bytes = (uint64_t)srv->settings.max_message_bytes;
  resp.requests_total = atomic_load(&srv->requests_total);
  resp.runs_total = atomic_load(&srv->runner.runs_total);
  resp.rejected_total = rpc_stats_rejections_total(&srv->stats);
  resp.sessions = (uint32_t)session_count(&srv->runner.sessions);
  char index[SETTINGS_URL_MAX];
  requirements_info(&srv->runner.installer, &resp, index, sizeof index);
  resp.requirements_index_url = index;
  resp.python_version = srv->runner.installer.info.python_version;
  struct run_table_stats_read rt;
  run_table_stats_read(&srv->runs, &rt);
  resp.started_runs = (uint32_t)rt.started;
  resp.watchers = (uint32_t)rt.waiting;
  char preload[sizeof(srv->settings.zygote_preload)];
  char *preload_names[MAX_PRELOAD_NAMES];
  zygote_info(srv, &resp, preload, sizeof preload, preload_names);
  struct zygote_memory_list zmem = {0};
  zygote_memory_info(srv, &resp, &zmem);
  interpreter_info(srv, &resp);
  Sandbox__V1__TenantInfo ti = SANDBOX__V1__TENANT_INFO__INIT;
  Sandbox__V1__Limits tmax = SANDBOX__V1__LIMITS__INIT;
  struct dispatch *d = closure_data;
  struct allow_text *egress = calloc(2, sizeof *egress);
  struct egress_allow ceiling;
  struct sbx_error perr;
  if (egress != NULL &&
      egress_allow_parse_list(srv->settings.egress_allow, "egress-allow", &ceiling, &perr) == 0) {
    resp.n_egress_allow = allow_text(&ceiling, &egress[0]);
    resp.egress_allow = egress[0].ptrs;
  }
  if (d->call->tenant != NULL) {
    tenant_info(d->call, &ti, &tmax, egress != NULL ? &egress[1] : NULL);
    resp.tenant = &ti;
  }
  closure(&resp, closure_data);
  free(egress);
  free(rl);
  zygote_memory_release(&zmem);
}

static void handle_close_session(Sandbox__V1__Sandbox_Service *service,
                                 const Sandbox__V1__CloseSessionRequest *input,
                                 Sandbox__V1__CloseSessionResponse_Closure closure,
                                 void *closure_data) {
  struct server *srv = server_of(service);
  struct dispatch *d = closure_data;
  struct runner *r = &srv->runner;
  if (validate_session_id(input->session_id, &d->err) < 0 ||
      session_close(&r->sessions, d->call->tenant, input->session_id, &d->err) < 0) {
    closure(NULL, closure_data);
    return;
  }
  /* Its tmpfs and memory are released before the answer: a client that
   * closes a session to make room finds the room there. A detach of a tmpfs
   * nothing else holds is quick. */
  session_reap(&r->sessions, r->workspace_root_fd, r->workspace_root);
  Sandbox__V1__CloseSessionResponse resp = SANDBOX__V1__CLOSE_SESSION_RESPONSE__INIT;
  closure(&resp, closure_data);
}

/* Checks session_id and path and opens the session's workspace: its fd, or
 * -1 with err. ListFiles and ReadFile run in the nng callback: tmpfs reads,
 * bounded by the caps. */
static int open_session_path(struct server *srv, const struct tenant *tenant,
                             const char *session_id, const char *path, bool allow_empty,
                             struct sbx_error *err) {
  if (validate_session_id(session_id, err) < 0)
    return -1;
  if (!(allow_empty && path[0] == '\0') && !validate_relative_path(path))
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "path: must be a relative path of at most 255 bytes without empty, "
                         "\".\" or \"..\" components");
  return session_open_workspace(&srv->runner.sessions, tenant, session_id, err);
}

/* The listing as FileEntry messages; rels holds their relative paths. */
static size_t file_entries(const struct safefs_listing *l, const char *dir,
                           Sandbox__V1__FileEntry *entries, Sandbox__V1__FileEntry **ptrs,
                           char **rels, bool *truncated) {
  size_t n = 0;
  for (size_t i = 0; i < l->n; i++) {
    const struct safefs_entry *se = &l->entries[i];
    if ((dir[0] != '\0' ? asprintf(&rels[n], "%s/%s", dir, se->name)
                        : asprintf(&rels[n], "%s", se->name)) < 0) {
      rels[n] = NULL;
      *truncated = true;
      continue;
    }
    sandbox__v1__file_entry__init(&entries[n]);
    entries[n].name = se->name;
    entries[n].relative_path = rels[n];
    entries[n].type = (Sandbox__V1__FileEntry__Type)se->type;
    entries[n].size = se->size;
    ptrs[n] = &entries[n];
    n++;
  }
  return n;
}

static void answer_listing(const struct safefs_listing *l, const char *dir,
                           Sandbox__V1__ListFilesResponse_Closure closure, struct dispatch *d) {
  size_t cap = l->n > 0 ? l->n : 1;
  cleanup_free Sandbox__V1__FileEntry *entries = calloc(cap, sizeof(*entries));
  cleanup_free Sandbox__V1__FileEntry **ptrs = calloc(cap, sizeof(*ptrs));
  cleanup_free char **rels = calloc(cap, sizeof(*rels));
  if (entries == NULL || ptrs == NULL || rels == NULL) {
    sbx_error_set(&d->err, SBX_INTERNAL, ENOMEM, "list files");
    closure(NULL, d);
    return;
  }
  Sandbox__V1__ListFilesResponse resp = SANDBOX__V1__LIST_FILES_RESPONSE__INIT;
  bool truncated = l->truncated;
  resp.n_entries = file_entries(l, dir, entries, ptrs, rels, &truncated);
  resp.entries = ptrs;
  resp.truncated = truncated;
  closure(&resp, d);
  for (size_t i = 0; i < resp.n_entries; i++)
    free(rels[i]);
}

static void handle_list_files(Sandbox__V1__Sandbox_Service *service,
                              const Sandbox__V1__ListFilesRequest *input,
                              Sandbox__V1__ListFilesResponse_Closure closure, void *closure_data) {
  struct server *srv = server_of(service);
  struct dispatch *d = closure_data;
  struct safefs_listing l = {0};
  int ws = open_session_path(srv, d->call->tenant, input->session_id, input->path, true, &d->err);
  int dir = ws >= 0 ? safefs_open_dir(ws, input->path, &d->err) : -1;
  if (ws >= 0)
    close(ws);
  int rv = dir >= 0 ? safefs_list(dir, (size_t)srv->settings.max_artifacts, &l, &d->err) : -1;
  if (dir >= 0)
    close(dir);
  if (rv < 0)
    closure(NULL, closure_data);
  else
    answer_listing(&l, input->path, closure, d);
  safefs_listing_free(&l);
}

/* Reads what the request asks of the open file fd: at most --artifact-bytes. */
static void answer_read(struct server *srv, const Sandbox__V1__ReadFileRequest *input, int fd,
                        const struct stat *st, Sandbox__V1__ReadFileResponse_Closure closure,
                        struct dispatch *d) {
  uint64_t size = (uint64_t)st->st_size;
  uint64_t cap = (uint64_t)srv->settings.artifact_bytes;
  uint64_t want = input->length == 0 || input->length > cap ? cap : input->length;
  uint64_t offset = input->offset < size ? input->offset : size;
  if (want > size - offset)
    want = size - offset;
  cleanup_free uint8_t *buf = NULL;
  size_t got = 0;
  if (safefs_pread(fd, offset, (size_t)want, &buf, &got, &d->err) < 0) {
    closure(NULL, d);
    return;
  }
  Sandbox__V1__ReadFileResponse resp = SANDBOX__V1__READ_FILE_RESPONSE__INIT;
  resp.content = (ProtobufCBinaryData){.len = got, .data = buf};
  resp.size = size;
  resp.eof = offset + got >= size;
  closure(&resp, d);
}

static void handle_read_file(Sandbox__V1__Sandbox_Service *service,
                             const Sandbox__V1__ReadFileRequest *input,
                             Sandbox__V1__ReadFileResponse_Closure closure, void *closure_data) {
  struct server *srv = server_of(service);
  struct dispatch *d = closure_data;
  struct stat st;
  int ws = open_session_path(srv, d->call->tenant, input->session_id, input->path, false, &d->err);
  cleanup_close int fd = ws >= 0 ? safefs_open_file(ws, input->path, &st, &d->err) : -1;
  if (ws >= 0)
    close(ws);
  if (fd < 0)
    closure(NULL, closure_data);
  else
    answer_read(srv, input, fd, &st, closure, d);
}

void handlers_init(struct server *srv) {
  sandbox__v1__sandbox__init(&srv->service, NULL);
  srv->service.run_code = handle_run_code;
  srv->service.health = handle_health;
  srv->service.get_info = handle_get_info;
  srv->service.close_session = handle_close_session;
  srv->service.list_files = handle_list_files;
  srv->service.read_file = handle_read_file;
  srv->service.start_run = handle_start_run;
  srv->service.watch_run = handle_watch_run;
  srv->service.cancel_run = handle_cancel_run;
}

bool handlers_dispatch(struct server *srv, struct server_call *call, unsigned method_index) {
  struct dispatch d = {.call = call};
  const ProtobufCMethodDescriptor *m = &srv->service.base.descriptor->methods[method_index];
  /* Draining: the runs in progress end, and may be watched and cancelled
   * until they do; nothing new starts. */
  if (atomic_load(&srv->draining) && strcmp(m->name, "Health") != 0 &&
      strcmp(m->name, "WatchRun") != 0 && strcmp(m->name, "CancelRun") != 0) {
    rpc_stats_reject(&srv->stats, RPC_REJECT_DRAINING);
    sbx_error_set(&d.err, SBX_UNAVAILABLE, 0, "server is shutting down");
    dispatch_closure(NULL, &d);
    return false;
  }
  sbx_error_set(&d.err, SBX_INTERNAL, 0, "the handler gave no answer");
  ProtobufCService *service = &srv->service.base;
  /* method_index was checked against n_methods in decode.c: protobuf-c
   * asserts on it. */
  service->invoke(service, method_index, call->input, dispatch_closure, &d);
  if (d.queued)
    return true;
  if (!d.answered)
    dispatch_closure(NULL, &d);
  return false;
}
