/* service.c: transport and dispatch. A pool of nng REP contexts, each driven
 * by one aio callback: receive, decode the envelope (bounded), check the
 * method index against the generated service descriptor, decode the request
 * (bounded), invoke the handler through protobuf-c's service, then either
 * reply at once or hand the call to a worker through the bounded queue.
 * Never blocks in a callback; never queues without bound. */
#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/stat.h>

#include "decode.h"
#include "envelope.h"
#include "clock.h"
#include "log.h"
#include "safefs.h"
#include "server.h"
#include "validate.h"

#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* The handler tells the dispatcher through this (on its stack) whether it
 * handed the call to a worker: after that the dispatcher must not touch the
 * call, which a worker may already be replying to. */
struct dispatch {
  struct server_call *call;
  bool queued;
  sbx_code status;
  char message[512];
};

static void dispatch_closure(const ProtobufCMessage *response, void *data) {
  struct dispatch *d = data;
  if (response != NULL)
    call_set_reply(d->call, SBX_OK, "", response);
  else
    call_set_reply(d->call, d->status, d->message, NULL);
}

void call_set_reply(struct server_call *call, sbx_code status, const char *message,
                    const ProtobufCMessage *payload) {
  if (call->reply != NULL) {
    nng_msg_free(call->reply);
    call->reply = NULL;
  }
  if (status != SBX_OK)
    atomic_fetch_add(&call->srv->rejected_total, 1);
  if (sbx_reply_msg_new(status, message, call->request_id, payload, &call->reply) == 0)
    return;
  if (sbx_reply_msg_new(SBX_INTERNAL, "out of memory building the reply", call->request_id, NULL,
                        &call->reply) != 0)
    call->reply = NULL;
}

/* ---- handlers, invoked through protobuf_c_service's invoke ---- */

static struct server *server_of(Sandbox__V1__Sandbox_Service *service) {
  return container_of(service, struct server, service);
}

static void handle_run_code(Sandbox__V1__Sandbox_Service *service,
                            const Sandbox__V1__RunCodeRequest *input,
                            Sandbox__V1__RunCodeResponse_Closure closure, void *closure_data) {
  struct server *srv = server_of(service);
  struct dispatch *d = closure_data;
  d->status = validate_run_request(input, &srv->settings, &d->call->limits, d->message,
                                   sizeof(d->message));
  if (d->status != SBX_OK) {
    closure(NULL, closure_data);
    return;
  }
  if (input->n_requirements > 0 && !srv->install.available) {
    d->status = SBX_FAILED_PRECONDITION;
    snprintf(d->message, sizeof(d->message),
             "requirements: this server cannot install packages: %s; nothing ran",
             srv->install.why_unavailable);
    closure(NULL, closure_data);
    return;
  }
  d->call->session = NULL;
  d->call->session_created = false;
  if (input->session_id[0] != '\0') {
    d->status = session_reserve(&srv->sessions, input->session_id, &d->call->session,
                                &d->call->session_created, d->message, sizeof(d->message));
    if (d->status != SBX_OK) {
      closure(NULL, closure_data);
      return;
    }
  }
  d->queued = true;
  if (!work_queue_push(&srv->queue, d->call)) {
    d->queued = false;
    if (d->call->session != NULL) {
      session_release(&srv->sessions, d->call->session);
      d->call->session = NULL;
    }
    d->status = SBX_RESOURCE_EXHAUSTED;
    snprintf(d->message, sizeof(d->message),
             "all %u workers busy and the queue of %lld is full; nothing ran, retry later",
             srv->n_workers, (long long)srv->settings.queue);
    closure(NULL, closure_data);
  }
  /* Queued: a worker calls run_code_execute and replies. */
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

static void limits_to_proto(const struct settings_limits *in, Sandbox__V1__Limits *out) {
  out->timeout_ms = in->timeout_ms;
  out->cpu_time_ms = in->cpu_time_ms;
  out->memory_bytes = in->memory_bytes;
  out->output_bytes = in->output_bytes;
  out->max_processes = in->max_processes;
  out->disk_bytes = in->disk_bytes;
  out->open_files = in->open_files;
}

static void handle_get_info(Sandbox__V1__Sandbox_Service *service,
                            const Sandbox__V1__GetInfoRequest *input,
                            Sandbox__V1__GetInfoResponse_Closure closure, void *closure_data) {
  struct server *srv = server_of(service);
  const struct sandbox_report *rep = sandbox_engine_report(srv->engine);
  Sandbox__V1__GetInfoResponse resp = SANDBOX__V1__GET_INFO_RESPONSE__INIT;
  Sandbox__V1__IsolationReport iso = SANDBOX__V1__ISOLATION_REPORT__INIT;
  Sandbox__V1__Limits def = SANDBOX__V1__LIMITS__INIT, max = SANDBOX__V1__LIMITS__INIT;
  static char *runtimes[] = {"python"};
  resp.version = SANDBOXD_VERSION;
  resp.n_runtimes = 1;
  resp.runtimes = runtimes;
  iso.backend = (char *)(rep->backend_name != NULL ? rep->backend_name : "");
  iso.cgroup_path = (char *)rep->cgroup_path;
  iso.seccomp = rep->seccomp;
  iso.namespaces = (char *)(rep->namespaces != NULL ? rep->namespaces : "");
  iso.uid_base = (uint32_t)rep->uid_base;
  iso.slots = rep->slots;
  iso.memory_per_process = rep->backend == SANDBOX_BACKEND_RLIMIT;
  iso.cpu_share_per_slot = rep->cpu_share;
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
  resp.runs_total = atomic_load(&srv->runs_total);
  resp.rejected_total = atomic_load(&srv->rejected_total);
  resp.sessions = (uint32_t)session_count(&srv->sessions);
  resp.requirements_available = srv->install.available;
  char index[SETTINGS_URL_MAX] = "";
  if (srv->install.available)
    install_describe_index(&srv->settings, index, sizeof index);
  resp.requirements_index_url = index;
  resp.requirements_wheelhouse = srv->install.available && srv->settings.wheelhouse[0] != '\0';
  if (srv->install.available) {
    size_t envs;
    uint64_t bytes;
    envstore_counts(&srv->store, &envs, &bytes);
    resp.environments = (uint32_t)envs;
    resp.environment_bytes = bytes;
    resp.environment_builds_total = atomic_load(&srv->store.builds_total);
    resp.environment_build_failures_total = atomic_load(&srv->store.build_failures_total);
  }
  closure(&resp, closure_data);
}

static void handle_close_session(Sandbox__V1__Sandbox_Service *service,
                                 const Sandbox__V1__CloseSessionRequest *input,
                                 Sandbox__V1__CloseSessionResponse_Closure closure,
                                 void *closure_data) {
  struct server *srv = server_of(service);
  struct dispatch *d = closure_data;
  if (!session_id_valid(input->session_id)) {
    d->status = SBX_INVALID_ARGUMENT;
    snprintf(d->message, sizeof(d->message),
             "session_id: must be 1 to %d characters of [A-Za-z0-9._-], not \".\" or \"..\"",
             SESSION_ID_MAX);
    closure(NULL, closure_data);
    return;
  }
  if (session_close(&srv->sessions, input->session_id) < 0) {
    bool busy = errno == EBUSY;
    d->status = busy ? SBX_FAILED_PRECONDITION : SANDBOX__V1__CODE__NOT_FOUND;
    snprintf(d->message, sizeof(d->message),
             busy ? "session %s has a run queued or running; close it after the run answered"
                  : "no session %s (never created, closed, expired or evicted)",
             input->session_id);
    closure(NULL, closure_data);
    return;
  }
  /* Its tmpfs and memory are released before the answer: a client that
   * closes a session to make room finds the room there. A detach of a tmpfs
   * nothing else holds is quick. */
  session_reap(&srv->sessions, srv->workspace_root_fd, srv->workspace_root);
  Sandbox__V1__CloseSessionResponse resp = SANDBOX__V1__CLOSE_SESSION_RESPONSE__INIT;
  closure(&resp, closure_data);
}

/* Checks session_id and path and opens the session's workspace; fills d
 * and returns -1 when the call must be answered with an error. ListFiles
 * and ReadFile run in the nng callback: tmpfs reads, bounded by the caps. */
static int open_session_path(struct server *srv, struct dispatch *d, const char *session_id,
                             const char *path, bool allow_empty) {
  if (!session_id_valid(session_id)) {
    d->status = SBX_INVALID_ARGUMENT;
    snprintf(d->message, sizeof(d->message),
             "session_id: must be 1 to %d characters of [A-Za-z0-9._-], not \".\" or \"..\"",
             SESSION_ID_MAX);
    return -1;
  }
  if (!(allow_empty && path[0] == '\0') && !validate_relative_path(path)) {
    d->status = SBX_INVALID_ARGUMENT;
    snprintf(d->message, sizeof(d->message),
             "path: must be a relative path of at most 255 bytes without empty, \".\" or \"..\" "
             "components");
    return -1;
  }
  int fd = session_open_workspace(&srv->sessions, session_id);
  if (fd < 0) {
    d->status = SANDBOX__V1__CODE__NOT_FOUND;
    snprintf(d->message, sizeof(d->message), "no session %s with files", session_id);
    return -1;
  }
  return fd;
}

static void path_error(struct dispatch *d, const char *path, int err) {
  char safe[300];
  size_t i = 0;
  for (; path[i] != '\0' && i + 1 < sizeof(safe); i++)
    safe[i] = (path[i] >= 0x20 && path[i] < 0x7f) ? path[i] : '?';
  safe[i] = '\0';
  if (err == ENOENT) {
    d->status = SANDBOX__V1__CODE__NOT_FOUND;
    snprintf(d->message, sizeof(d->message), "path %s: no such file or directory", safe);
  } else if (err == ELOOP || err == ENOTDIR || err == EINVAL || err == EISDIR) {
    d->status = SBX_FAILED_PRECONDITION;
    snprintf(d->message, sizeof(d->message), "path %s: %s", safe,
             err == ELOOP     ? "is or goes through a symlink (never followed)"
             : err == ENOTDIR ? "goes through something that is not a directory"
             : err == EISDIR  ? "is a directory"
                              : "is not a regular file (FIFO, socket or device)");
  } else {
    d->status = SBX_INTERNAL;
    snprintf(d->message, sizeof(d->message), "path %s: %s", safe, strerror(err));
  }
}

static void handle_list_files(Sandbox__V1__Sandbox_Service *service,
                              const Sandbox__V1__ListFilesRequest *input,
                              Sandbox__V1__ListFilesResponse_Closure closure, void *closure_data) {
  struct server *srv = server_of(service);
  struct dispatch *d = closure_data;
  int ws = open_session_path(srv, d, input->session_id, input->path, true);
  if (ws < 0) {
    closure(NULL, closure_data);
    return;
  }
  int dir = safefs_open_dir(ws, input->path);
  int e = errno;
  close(ws);
  if (dir < 0) {
    path_error(d, input->path, e);
    closure(NULL, closure_data);
    return;
  }
  struct safefs_listing l;
  int rv = safefs_list(dir, (size_t)srv->settings.max_artifacts, &l);
  e = errno;
  close(dir);
  if (rv < 0) {
    path_error(d, input->path, e);
    closure(NULL, closure_data);
    return;
  }
  Sandbox__V1__FileEntry *entries = calloc(l.n > 0 ? l.n : 1, sizeof(*entries));
  Sandbox__V1__FileEntry **ptrs = calloc(l.n > 0 ? l.n : 1, sizeof(*ptrs));
  char **rels = calloc(l.n > 0 ? l.n : 1, sizeof(*rels));
  Sandbox__V1__ListFilesResponse resp = SANDBOX__V1__LIST_FILES_RESPONSE__INIT;
  if (entries == NULL || ptrs == NULL || rels == NULL) {
    d->status = SBX_INTERNAL;
    snprintf(d->message, sizeof(d->message), "out of memory");
    closure(NULL, closure_data);
  } else {
    size_t n = 0;
    for (size_t i = 0; i < l.n; i++) {
      const struct safefs_entry *se = &l.entries[i];
      if ((input->path[0] != '\0' ? asprintf(&rels[n], "%s/%s", input->path, se->name)
                                   : asprintf(&rels[n], "%s", se->name)) < 0) {
        rels[n] = NULL;
        resp.truncated = true;
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
    resp.n_entries = n;
    resp.entries = ptrs;
    resp.truncated = resp.truncated || l.truncated;
    closure(&resp, closure_data);
    for (size_t i = 0; i < n; i++)
      free(rels[i]);
  }
  free(rels);
  free(ptrs);
  free(entries);
  safefs_listing_free(&l);
}

static void handle_read_file(Sandbox__V1__Sandbox_Service *service,
                             const Sandbox__V1__ReadFileRequest *input,
                             Sandbox__V1__ReadFileResponse_Closure closure, void *closure_data) {
  struct server *srv = server_of(service);
  struct dispatch *d = closure_data;
  int ws = open_session_path(srv, d, input->session_id, input->path, false);
  if (ws < 0) {
    closure(NULL, closure_data);
    return;
  }
  struct stat st;
  int fd = safefs_open_file(ws, input->path, &st);
  int e = errno;
  close(ws);
  if (fd < 0) {
    path_error(d, input->path, e);
    closure(NULL, closure_data);
    return;
  }
  uint64_t size = (uint64_t)st.st_size;
  uint64_t cap = (uint64_t)srv->settings.artifact_bytes;
  uint64_t want = input->length == 0 || input->length > cap ? cap : input->length;
  uint64_t offset = input->offset < size ? input->offset : size;
  if (want > size - offset)
    want = size - offset;
  uint8_t *buf = NULL;
  size_t got = 0;
  if (safefs_pread(fd, offset, (size_t)want, &buf, &got) < 0) {
    e = errno;
    close(fd);
    path_error(d, input->path, e);
    closure(NULL, closure_data);
    return;
  }
  close(fd);
  Sandbox__V1__ReadFileResponse resp = SANDBOX__V1__READ_FILE_RESPONSE__INIT;
  resp.content = (ProtobufCBinaryData){got, buf};
  resp.size = size;
  resp.eof = offset + got >= size;
  closure(&resp, closure_data);
  free(buf);
}

void service_init(struct server *srv) {
  sandbox__v1__sandbox__init(&srv->service, NULL);
  srv->service.run_code = handle_run_code;
  srv->service.health = handle_health;
  srv->service.get_info = handle_get_info;
  srv->service.close_session = handle_close_session;
  srv->service.list_files = handle_list_files;
  srv->service.read_file = handle_read_file;
}

/* ---- the call state machine ---- */

static void call_recv(struct server_call *call) {
  atomic_store(&call->state, CALL_RECV);
  nng_ctx_recv(call->ctx, call->aio);
}

static void call_send(struct server_call *call) {
  if (call->reply == NULL) { /* nothing could be built: drop, keep serving */
    conns_call_end(&call->srv->conns, call->pipe_id);
    call_recv(call);
    return;
  }
  atomic_store(&call->state, CALL_SEND);
  nng_aio_set_msg(call->aio, call->reply);
  call->reply = NULL;
  nng_ctx_send(call->ctx, call->aio);
}

/* Decodes and dispatches one request. Returns true when the call went to a
 * worker (the caller must then leave it alone). */
static bool call_handle(struct server_call *call, nng_msg *msg) {
  struct server *srv = call->srv;
  atomic_fetch_add(&srv->requests_total, 1);
  clock_gettime(CLOCK_MONOTONIC, &call->received);

  /* Everything that parses the request's bytes is service_decode_request
   * (decode.c), the function the fuzzer drives. */
  struct decoded_request req;
  char message[512];
  sbx_code status = service_decode_request(nng_msg_body(msg), nng_msg_len(msg), &call->alloc,
                                           &req, message, sizeof(message));
  nng_msg_free(msg);
  snprintf(call->request_id, sizeof(call->request_id), "%s", req.request_id);
  call->deadline_unix_ms = req.deadline_unix_ms;
  call->input = req.input;
  if (status != SBX_OK) {
    call_set_reply(call, status, message, NULL);
    return false;
  }
  unsigned index = req.method_index;
  if (atomic_load(&srv->draining) && strcmp(req.method->name, "Health") != 0) {
    call_set_reply(call, SBX_UNAVAILABLE, "server is shutting down; nothing ran", NULL);
    protobuf_c_message_free_unpacked(call->input, &call->alloc.base);
    call->input = NULL;
    return false;
  }

  struct dispatch d = {.call = call, .queued = false, .status = SBX_INTERNAL};
  snprintf(d.message, sizeof(d.message), "handler gave no answer");
  ProtobufCService *service = &srv->service.base;
  /* index was checked against n_methods in decode.c: protobuf-c asserts on it. */
  service->invoke(service, index, call->input, dispatch_closure, &d);
  if (d.queued)
    return true;
  protobuf_c_message_free_unpacked(call->input, &call->alloc.base);
  call->input = NULL;
  if (call->reply == NULL)
    call_set_reply(call, d.status, d.message, NULL);
  return false;
}

static void call_cb(void *arg) {
  struct server_call *call = arg;
  int rv = nng_aio_result(call->aio);
  switch (atomic_load(&call->state)) {
  case CALL_RECV: {
    if (rv != 0) {
      if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
        atomic_store(&call->state, CALL_IDLE);
        return;
      }
      log_line("recv_error", "error=\"%s\"", nng_strerror(rv));
      call_recv(call);
      return;
    }
    nng_msg *msg = nng_aio_get_msg(call->aio);
    nng_aio_set_msg(call->aio, NULL);
    call->pipe_id = (uint32_t)nng_pipe_id(nng_msg_get_pipe(msg));
    conns_call_begin(&call->srv->conns, call->pipe_id);
    atomic_store(&call->state, CALL_BUSY);
    if (call_handle(call, msg))
      return;
    call_send(call);
    return;
  }
  case CALL_SEND:
    conns_call_end(&call->srv->conns, call->pipe_id);
    if (rv != 0) {
      if (nng_aio_get_msg(call->aio) != NULL)
        nng_msg_free(nng_aio_get_msg(call->aio));
      nng_aio_set_msg(call->aio, NULL);
      if (rv == NNG_ECLOSED || rv == NNG_ECANCELED) {
        atomic_store(&call->state, CALL_IDLE);
        return;
      }
    }
    call_recv(call);
    return;
  default:
    return;
  }
}

/* ---- workers ---- */

struct worker_arg {
  struct server *srv;
  unsigned slot;
};

/* Ends a call taken from the queue (run, refused or dropped): its session
 * and request are released and its reply sent. */
static void queued_call_finish(struct server *srv, struct server_call *call) {
  if (call->session != NULL) {
    session_release(&srv->sessions, call->session);
    call->session = NULL;
  }
  protobuf_c_message_free_unpacked(call->input, &call->alloc.base);
  call->input = NULL;
  call_send(call);
}

static void *worker_main(void *arg) {
  struct worker_arg *w = arg;
  struct server *srv = w->srv;
  unsigned slot = w->slot;
  free(w);
  struct server_call *call;
  while ((call = work_queue_pop(&srv->queue)) != NULL) {
    if (atomic_load(&srv->draining)) {
      call_set_reply(call, SBX_UNAVAILABLE, "server is shutting down; nothing ran", NULL);
    } else if (call->deadline_unix_ms != 0 && sbx_now_unix_ms() > call->deadline_unix_ms) {
      call_set_reply(call, SBX_DEADLINE_EXCEEDED,
                     "the call waited in the queue past its deadline; nothing ran", NULL);
    } else if (!conns_alive(&srv->conns, call->pipe_id)) {
      /* Nobody can read the answer: running it would only use a worker. */
      log_line("dropped", "request_id=\"%.64s\" reason=client_gone msg=\"the client's connection "
               "closed while the call was queued; nothing ran\"", call->request_id);
      call_set_reply(call, SBX_UNAVAILABLE, "the client went away; nothing ran", NULL);
    } else {
      run_code_execute(srv, slot, call);
    }
    work_queue_done(&srv->queue);
    queued_call_finish(srv, call);
  }
  return NULL;
}

int server_start(struct server *srv, char *err, size_t errlen) {
  const struct server_settings *s = &srv->settings;
  int rv;
  srv->n_workers = (unsigned)s->workers;
  if (work_queue_init(&srv->queue, (size_t)s->queue, srv->n_workers) < 0) {
    snprintf(err, errlen, "queue: out of memory");
    return -1;
  }
  if ((rv = nng_rep0_open(&srv->sock)) != 0) {
    snprintf(err, errlen, "nng_rep0_open: %s", nng_strerror(rv));
    return -1;
  }
  if (conns_init(&srv->conns, (unsigned)s->max_connections, (uint64_t)s->idle_timeout_ms) < 0 ||
      (rv = conns_watch(&srv->conns, srv->sock)) != 0) {
    snprintf(err, errlen, "connection table: %s", nng_strerror(rv));
    return -1;
  }
  for (unsigned i = 0; i < s->n_listen; i++) {
    nng_listener l;
    if ((rv = nng_listener_create(&l, srv->sock, s->listen[i])) != 0 ||
        (rv = nng_listener_set_size(l, NNG_OPT_RECVMAXSZ, (size_t)s->max_message_bytes)) != 0 ||
        (rv = nng_listener_start(l, 0)) != 0) {
      snprintf(err, errlen, "listen %s: %s", s->listen[i], nng_strerror(rv));
      return -1;
    }
  }
  srv->n_calls = (size_t)(s->contexts > 0 ? s->contexts : s->workers + s->queue + 16);
  srv->calls = calloc(srv->n_calls, sizeof(*srv->calls));
  srv->workers = calloc(srv->n_workers, sizeof(*srv->workers));
  if (srv->calls == NULL || srv->workers == NULL) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  for (size_t i = 0; i < srv->n_calls; i++) {
    struct server_call *call = &srv->calls[i];
    call->srv = srv;
    if ((rv = nng_aio_alloc(&call->aio, call_cb, call)) != 0 ||
        (rv = nng_ctx_open(&call->ctx, srv->sock)) != 0) {
      snprintf(err, errlen, "nng context: %s", nng_strerror(rv));
      return -1;
    }
  }
  for (unsigned i = 0; i < srv->n_workers; i++) {
    struct worker_arg *w = malloc(sizeof(*w));
    if (w == NULL) {
      snprintf(err, errlen, "out of memory");
      return -1;
    }
    *w = (struct worker_arg){srv, i};
    if ((rv = pthread_create(&srv->workers[i], NULL, worker_main, w)) != 0) {
      free(w);
      snprintf(err, errlen, "worker thread: %s", strerror(rv));
      return -1;
    }
  }
  for (size_t i = 0; i < srv->n_calls; i++)
    call_recv(&srv->calls[i]);
  return 0;
}

static size_t calls_in_flight(struct server *srv) {
  size_t n = 0;
  for (size_t i = 0; i < srv->n_calls; i++) {
    int st = atomic_load(&srv->calls[i].state);
    n += st == CALL_BUSY || st == CALL_SEND;
  }
  return n;
}

void server_drain_and_stop(struct server *srv) {
  atomic_store(&srv->draining, true);
  /* What is still queued is answered now, UNAVAILABLE (it did not run);
   * workers finish the run they are in, then exit. */
  work_queue_close(&srv->queue);
  void *queued[64];
  size_t n;
  while ((n = work_queue_take_queued(&srv->queue, queued, 64)) > 0)
    for (size_t i = 0; i < n; i++) {
      struct server_call *call = queued[i];
      call_set_reply(call, SBX_UNAVAILABLE, "server is shutting down; nothing ran", NULL);
      queued_call_finish(srv, call);
    }
  for (unsigned i = 0; i < srv->n_workers; i++)
    pthread_join(srv->workers[i], NULL);
  /* Let the last replies reach their pipes before closing the socket. */
  for (int i = 0; i < 200 && calls_in_flight(srv) > 0; i++)
    usleep(10 * 1000);
  usleep(100 * 1000);
  nng_close(srv->sock);
  for (size_t i = 0; i < srv->n_calls; i++) {
    nng_aio_free(srv->calls[i].aio); /* waits for a running callback */
    if (srv->calls[i].reply != NULL)
      nng_msg_free(srv->calls[i].reply);
  }
  free(srv->calls);
  free(srv->workers);
  work_queue_destroy(&srv->queue);
  conns_destroy(&srv->conns);
}
