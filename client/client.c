/* client.c: the sandboxd client library: requests, calls and the
 * at-most-once rules of sandbox_client.h. Where each call goes is fleet.c's
 * business; this file sends it. Thread-safe: every call has its own nng
 * context and aio on the socket of the endpoint the fleet gave it. */
#include <errno.h>
#include <inttypes.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "envelope.h"
#include "calls.h"
#include "clock.h"
#include "client_internal.h"
#include "fleet.h"
#include "json.h"
#include "sandbox_client.h"
#include "status.h"
#include "text.h"

/* Beyond the run's own timeout: sandbox setup, teardown and transport. */
#define SBXC_REPLY_MARGIN_MS 5000
/* When the request leaves timeout_ms to the server: assume the largest a
 * default server allows, so a slow but legal run is not cut off. */
#define SBXC_UNKNOWN_TIMEOUT_MS 60000
#define SBXC_DEFAULT_MAX_REQUEST_BYTES ((size_t)8 << 20)

/* The smallest --max-message-bytes a server accepts: requests up to this
 * size never need the server's own cap. */
#define SBXC_SMALLEST_SERVER_CAP 4096

/* How long a send may wait for the connection of the endpoint it was given
 * (which may have gone since) before the call asks the fleet again. A send
 * that did not complete never left: asking again is safe. */
#define SBXC_SEND_SLICE_MS 500

/* Both open functions: tls NULL for plain endpoints. */
/* 64 random bits that start every request id of this client, so that two
 * processes started in the same second (each numbering its calls from 1)
 * never share one in the server's log. getrandom fails only before the
 * kernel's pool is ready: then the clock, the pid and an address, which
 * still differ between processes. */
static uint64_t request_id_prefix(const void *c) {
  uint64_t v;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v))
    return v;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 40) ^
         (uint64_t)(uintptr_t)c;
}

static int client_open(sbxc_client **out, const char *const *urls, size_t n,
                       const struct sbxc_tls *tls, char *err, size_t errlen) {
  sbxc_client *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return sbxc_fail(err, errlen, "out of memory");
  c->retries = 3;
  c->queue_wait_ms = 30000;
  c->connect_timeout_ms = SBXC_CONNECT_TIMEOUT_DEFAULT_MS;
  c->max_request_bytes = SBXC_DEFAULT_MAX_REQUEST_BYTES;
  c->request_id_prefix = request_id_prefix(c);
  c->fleet = sbxc_fleet_open(urls, n, tls, err, errlen);
  if (c->fleet == NULL) {
    free(c);
    return -1;
  }
  *out = c;
  return 0;
}

int sbxc_client_open_many(sbxc_client **out, const char *const *urls, size_t n, char *err,
                          size_t errlen) {
  return client_open(out, urls, n, NULL, err, errlen);
}

int sbxc_client_open_tls(sbxc_client **out, const char *const *urls, size_t n,
                         const struct sbxc_tls *tls, char *err, size_t errlen) {
  if (tls == NULL)
    return sbxc_fail(err, errlen, "sbxc_client_open_tls: no TLS settings given");
  return client_open(out, urls, n, tls, err, errlen);
}

int sbxc_client_open(sbxc_client **out, const char *url, char *err, size_t errlen) {
  return sbxc_client_open_many(out, &url, 1, err, errlen);
}

void sbxc_client_close(sbxc_client *c) {
  if (c == NULL)
    return;
  sbxc_fleet_close(c->fleet);
  free(c->api_key);
  free(c);
}

int sbxc_client_set_api_key(sbxc_client *c, const char *key) {
  if (key != NULL && key[0] != '\0') {
    size_t n = strnlen(key, SBXC_API_KEY_MAX + 1);
    if (n > SBXC_API_KEY_MAX || !text_graphic_ascii(key)) {
      errno = EINVAL;
      return -1;
    }
  }
  char *copy = NULL;
  if (key != NULL && key[0] != '\0' && (copy = strdup(key)) == NULL)
    return -1;
  /* Another key is another tenant: its session ids are other sessions. */
  if ((copy == NULL) != (c->api_key == NULL) || (copy != NULL && strcmp(copy, c->api_key) != 0))
    sbxc_fleet_forget_sessions(c->fleet);
  free(c->api_key);
  c->api_key = copy;
  return 0;
}

static _Thread_local const struct sbxc_caller *thread_caller;

void sbxc_thread_caller_set(const struct sbxc_caller *caller) {
  thread_caller = caller;
}

/* Who this call says it is: the thread's caller (a front's), else the
 * client's key. */
static void call_caller(const sbxc_client *c, struct sbx_caller *out) {
  const struct sbxc_caller *t = thread_caller;
  if (t != NULL) {
    *out = (struct sbx_caller){.credential = t->api_key,
                               .front = true,
                               .front_cert_identities = t->cert_identities,
                               .n_front_cert_identities = t->n_cert_identities,
                               .front_loopback = t->loopback};
    return;
  }
  *out = (struct sbx_caller){.credential = c->api_key};
}

void sbxc_client_set_retries(sbxc_client *c, unsigned retries) {
  c->retries = retries;
}

void sbxc_client_set_max_request_bytes(sbxc_client *c, size_t bytes) {
  c->max_request_bytes = bytes;
}

void sbxc_client_set_queue_wait_ms(sbxc_client *c, uint64_t ms) {
  c->queue_wait_ms = ms;
}

void sbxc_client_set_connect_timeout_ms(sbxc_client *c, uint64_t ms) {
  c->connect_timeout_ms = ms;
}

void sbxc_client_set_resolve_interval_ms(sbxc_client *c, uint64_t ms) {
  sbxc_fleet_set_resolve_interval_ms(c->fleet, ms);
}

int sbxc_client_wait_connected(sbxc_client *c, size_t count, uint64_t timeout_ms) {
  uint64_t now = sbx_monotonic_ms();
  uint64_t until = timeout_ms > UINT64_MAX - now ? UINT64_MAX : now + timeout_ms;
  return sbxc_fleet_wait_connected(c->fleet, count, until);
}

int sbxc_client_endpoints_json(sbxc_client *c, char **json, char *err, size_t errlen) {
  struct sbxc_endpoint_view *views;
  size_t n;
  if (sbxc_fleet_endpoints(c->fleet, &views, &n) < 0)
    return sbxc_fail(err, errlen, "out of memory");
  json_t *o = json_object();
  for (size_t i = 0; o != NULL && i < n; i++)
    if (json_object_set_new(o, views[i].key, json_boolean(views[i].live)) < 0) {
      json_decref(o);
      o = NULL;
    }
  free(views);
  *json = sbxc_json_dump(o);
  return *json != NULL ? 0 : sbxc_fail(err, errlen, "out of memory");
}

/* ---- requests ---- */

sbxc_request *sbxc_request_new(void) {
  sbxc_request *r = calloc(1, sizeof(*r));
  if (r == NULL)
    return NULL;
  sandbox__v1__run_code_request__init(&r->msg);
  sandbox__v1__limits__init(&r->limits);
  r->msg.limits = &r->limits;
  r->msg.code = strdup("");
  r->msg.run_id = strdup("");
  r->msg.session_id = strdup("");
  r->msg.runtime = strdup("python");
  r->msg.language = strdup("");
  r->msg.version = strdup("");
  sandbox__v1__limits__init(&r->compile_limits);
  if (r->msg.code == NULL || r->msg.run_id == NULL || r->msg.session_id == NULL ||
      r->msg.runtime == NULL || r->msg.language == NULL || r->msg.version == NULL) {
    sbxc_request_free(r);
    return NULL;
  }
  return r;
}

void sbxc_request_free(sbxc_request *r) {
  if (r == NULL)
    return;
  Sandbox__V1__RunCodeRequest *m = &r->msg;
  free(m->code);
  free(m->run_id);
  free(m->session_id);
  free(m->runtime);
  free(m->language);
  free(m->version);
  free(m->stdin.data);
  for (size_t i = 0; i < m->n_args; i++)
    free(m->args[i]);
  free(m->args);
  for (size_t i = 0; i < m->n_requirements; i++)
    free(m->requirements[i]);
  free(m->requirements);
  for (size_t i = 0; i < m->n_allow_net; i++)
    free(m->allow_net[i]);
  free(m->allow_net);
  for (size_t i = 0; i < m->n_files; i++) {
    free(m->files[i]->path);
    if (m->files[i]->source_case == SANDBOX__V1__FILE__SOURCE_URL)
      free(m->files[i]->url);
    else
      free(m->files[i]->content.data);
    free(m->files[i]);
  }
  free(m->files);
  for (size_t i = 0; i < m->n_env; i++) {
    free(m->env[i]->key);
    free(m->env[i]->value);
    free(m->env[i]);
  }
  free(m->env);
  free(r);
}

static int replace_string(char **field, const char *value, size_t len) {
  char *s = malloc(len + 1);
  if (s == NULL)
    return -1;
  memcpy(s, value, len);
  s[len] = '\0';
  free(*field);
  *field = s;
  return 0;
}

/* Appends item to a protobuf-c repeated field (array + count). */
static int append(void ***array, size_t *n, void *item) {
  void **p = realloc(*array, (*n + 1) * sizeof(void *));
  if (p == NULL)
    return -1;
  p[(*n)++] = item;
  *array = p;
  return 0;
}

int sbxc_request_set_code(sbxc_request *r, const char *code, size_t len) {
  return replace_string(&r->msg.code, code, len);
}

int sbxc_request_set_stdin(sbxc_request *r, const void *data, size_t len) {
  uint8_t *copy = malloc(len > 0 ? len : 1);
  if (copy == NULL)
    return -1;
  memcpy(copy, data, len);
  free(r->msg.stdin.data);
  r->msg.stdin = (ProtobufCBinaryData){len, copy};
  return 0;
}

static int append_string(char ***array, size_t *n, const char *value) {
  char *s = strdup(value);
  if (s == NULL || append((void ***)array, n, s) < 0) {
    free(s);
    return -1;
  }
  return 0;
}

int sbxc_request_add_arg(sbxc_request *r, const char *arg) {
  return append_string(&r->msg.args, &r->msg.n_args, arg);
}

int sbxc_request_add_requirement(sbxc_request *r, const char *spec) {
  return append_string(&r->msg.requirements, &r->msg.n_requirements, spec);
}

int sbxc_request_add_allow_net(sbxc_request *r, const char *entry) {
  return append_string(&r->msg.allow_net, &r->msg.n_allow_net, entry);
}

static Sandbox__V1__File *new_file(const char *path) {
  Sandbox__V1__File *f = malloc(sizeof(*f));
  if (f == NULL)
    return NULL;
  sandbox__v1__file__init(f);
  f->path = strdup(path);
  if (f->path == NULL) {
    free(f);
    return NULL;
  }
  return f;
}

int sbxc_request_add_file(sbxc_request *r, const char *path, const void *data, size_t len) {
  Sandbox__V1__File *f = new_file(path);
  if (f == NULL)
    return -1;
  f->source_case = SANDBOX__V1__FILE__SOURCE_CONTENT;
  f->content.data = malloc(len > 0 ? len : 1);
  f->content.len = len;
  if (f->content.data == NULL || append((void ***)&r->msg.files, &r->msg.n_files, f) < 0) {
    free(f->content.data);
    free(f->path);
    free(f);
    return -1;
  }
  memcpy(f->content.data, data, len);
  return 0;
}

int sbxc_request_add_file_url(sbxc_request *r, const char *path, const char *url) {
  Sandbox__V1__File *f = new_file(path);
  if (f == NULL)
    return -1;
  f->source_case = SANDBOX__V1__FILE__SOURCE_URL;
  f->url = strdup(url);
  if (f->url == NULL || append((void ***)&r->msg.files, &r->msg.n_files, f) < 0) {
    free(f->url);
    free(f->path);
    free(f);
    return -1;
  }
  return 0;
}

int sbxc_request_add_env(sbxc_request *r, const char *key, const char *value) {
  Sandbox__V1__RunCodeRequest__EnvEntry *e = malloc(sizeof(*e));
  if (e == NULL)
    return -1;
  sandbox__v1__run_code_request__env_entry__init(e);
  e->key = strdup(key);
  e->value = strdup(value);
  if (e->key == NULL || e->value == NULL || append((void ***)&r->msg.env, &r->msg.n_env, e) < 0) {
    free(e->key);
    free(e->value);
    free(e);
    return -1;
  }
  return 0;
}

int sbxc_request_set_run_id(sbxc_request *r, const char *id) {
  return replace_string(&r->msg.run_id, id, strlen(id));
}

int sbxc_request_set_session_id(sbxc_request *r, const char *id) {
  return replace_string(&r->msg.session_id, id, strlen(id));
}

int sbxc_request_set_runtime(sbxc_request *r, const char *runtime) {
  return replace_string(&r->msg.runtime, runtime, strlen(runtime));
}

int sbxc_request_set_language(sbxc_request *r, const char *language, const char *version) {
  if (version == NULL)
    version = "";
  return replace_string(&r->msg.language, language, strlen(language)) < 0 ||
                 replace_string(&r->msg.version, version, strlen(version)) < 0 ||
                 replace_string(&r->msg.runtime, "", 0) < 0
             ? -1
             : 0;
}

static void limits_copy(Sandbox__V1__Limits *m, const struct sbxc_limits *l) {
  m->timeout_ms = l->timeout_ms;
  m->cpu_time_ms = l->cpu_time_ms;
  m->memory_bytes = l->memory_bytes;
  m->output_bytes = l->output_bytes;
  m->max_processes = l->max_processes;
  m->disk_bytes = l->disk_bytes;
  m->open_files = l->open_files;
}

void sbxc_request_set_compile_limits(sbxc_request *r, const struct sbxc_limits *l) {
  limits_copy(&r->compile_limits, l);
  r->msg.compile_limits = &r->compile_limits;
}

void sbxc_request_set_session_mode(sbxc_request *r, int mode) {
  r->msg.session_mode = (Sandbox__V1__SessionMode)mode;
}

void sbxc_request_set_limits(sbxc_request *r, const struct sbxc_limits *l) {
  limits_copy(&r->limits, l);
}

/* ---- calls ---- */

static size_t server_max_bytes(sbxc_client *c, struct sbxc_endpoint *ep);

static Sandbox__V1__ReplyEnvelope *unpack_reply(const uint8_t *buf, size_t len) {
  return sandbox__v1__reply_envelope__unpack(NULL, len, buf);
}

/* A request too big for the endpoint's server (its --max-message-bytes,
 * from GetInfo) or for this client's own cap is refused before it is sent:
 * 0, or -1 with *code INVALID_ARGUMENT. */
static int check_request_size(sbxc_client *c, struct sbxc_endpoint *ep, const char *method,
                              size_t len, int *code, char *err, size_t errlen) {
  size_t server_cap = SIZE_MAX;
  if (len > SBXC_SMALLEST_SERVER_CAP && strcmp(method, SBX_METHOD_GET_INFO) != 0)
    server_cap = server_max_bytes(c, ep);
  *code = SBXC_INVALID_ARGUMENT;
  if (len > server_cap)
    return sbxc_fail(err, errlen,
                     "the request is %zu bytes, more than the %zu the server accepts (its "
                     "--max-message-bytes, from GetInfo); nothing was sent",
                     len, server_cap);
  if (len > c->max_request_bytes)
    return sbxc_fail(err, errlen,
                     "the request is %zu bytes, more than this client's cap of %zu (sandbox-run "
                     "--max-request-bytes; the server's default --max-message-bytes); nothing was "
                     "sent",
                     len, c->max_request_bytes);
  *code = SBXC_OK;
  return 0;
}

/* Sends msg on ctx and waits for the reply. The reply envelope, or NULL
 * with *code: UNAVAILABLE and *not_sent when the request did not leave
 * within the send slice (nothing ran); once it left it may have run, so a
 * broken connection is UNKNOWN and a missing reply DEADLINE_EXCEEDED
 * (UNAVAILABLE would invite a retry that runs it twice). */
static Sandbox__V1__ReplyEnvelope *exchange(nng_ctx ctx, nng_aio *aio, nng_msg *msg,
                                            const char *key, nng_duration timeout_ms,
                                            bool *not_sent, int *code, char *err, size_t errlen) {
  nng_aio_set_timeout(aio, timeout_ms < SBXC_SEND_SLICE_MS ? timeout_ms : SBXC_SEND_SLICE_MS);
  nng_aio_set_msg(aio, msg);
  nng_ctx_send(ctx, aio);
  nng_aio_wait(aio);
  int rv = nng_aio_result(aio);
  if (rv != 0) {
    nng_msg_free(msg); /* a send that failed hands the message back */
    *not_sent = true;
    *code = SBXC_UNAVAILABLE;
    sbxc_fail(err, errlen, "sending the request to %s: %s; nothing was sent", key,
              nng_strerror(rv));
    return NULL;
  }
  nng_aio_set_timeout(aio, timeout_ms);
  nng_ctx_recv(ctx, aio);
  nng_aio_wait(aio);
  if ((rv = nng_aio_result(aio)) != 0) {
    *code = rv == NNG_ETIMEDOUT ? SBXC_DEADLINE_EXCEEDED : SBXC_UNKNOWN;
    sbxc_fail(err, errlen, "no reply%s from %s: %s; the code may or may not have run",
              rv == NNG_ETIMEDOUT ? " in time" : "", key, nng_strerror(rv));
    return NULL;
  }
  msg = nng_aio_get_msg(aio);
  Sandbox__V1__ReplyEnvelope *reply = unpack_reply(nng_msg_body(msg), nng_msg_len(msg));
  nng_msg_free(msg);
  if (reply == NULL) {
    *code = SBXC_INTERNAL;
    sbxc_fail(err, errlen, "the reply from %s is not a valid sandbox.v1.ReplyEnvelope", key);
  }
  return reply;
}

/* How long to wait for the reply: the call's own (WatchRun, CancelRun), or
 * the queue budget, the run's own time and a margin (nng counts in int32
 * ms). */
static nng_duration reply_timeout_ms(const sbxc_client *c, const struct call *call) {
  uint64_t ms = call->reply_ms != 0
                    ? call->reply_ms
                    : c->queue_wait_ms + call->run_timeout_ms + SBXC_REPLY_MARGIN_MS;
  return ms > INT32_MAX ? INT32_MAX : (nng_duration)ms;
}

/* One request to ep on a context of its own: the reply, or NULL with
 * call->code and call->err, and *not_sent when it never left. */
static Sandbox__V1__ReplyEnvelope *call_on(sbxc_client *c, struct sbxc_endpoint *ep,
                                           struct call *call, bool *not_sent) {
  nng_ctx ctx;
  nng_aio *aio = NULL;
  nng_msg *msg = NULL;
  Sandbox__V1__ReplyEnvelope *reply = NULL;
  const char *key = sbxc_endpoint_key(ep);
  char request_id[40];
  snprintf(request_id, sizeof(request_id), "%016" PRIx64 "-%lu", c->request_id_prefix,
           atomic_fetch_add(&c->requests, 1) + 1);
  int rv = nng_ctx_open(&ctx, sbxc_endpoint_socket(ep));
  if (rv != 0) {
    *not_sent = true;
    call->code = SBXC_UNAVAILABLE;
    sbxc_fail(call->err, call->errlen, "%s: nng_ctx_open: %s; nothing was sent", key,
              nng_strerror(rv));
    return NULL;
  }
  uint64_t deadline = sbx_now_unix_ms() + c->queue_wait_ms;
  struct sbx_caller caller;
  call_caller(c, &caller);
  if ((rv = nng_ctx_set_ms(ctx, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0 ||
      (rv = nng_aio_alloc(&aio, NULL, NULL)) != 0 ||
      (rv = sbx_request_msg_new(call->method, request_id, deadline, &caller, call->payload,
                                &msg)) != 0) {
    call->code = SBXC_INTERNAL;
    sbxc_fail(call->err, call->errlen, "building the request: %s", nng_strerror(rv));
  } else if (check_request_size(c, ep, call->method, nng_msg_len(msg), &call->code, call->err,
                                call->errlen) < 0) {
    nng_msg_free(msg);
  } else {
    reply = exchange(ctx, aio, msg, key, reply_timeout_ms(c, call), not_sent, &call->code,
                     call->err, call->errlen);
  }
  nng_aio_free(aio);
  nng_ctx_close(ctx);
  return reply;
}

static void backoff(unsigned attempt) {
  /* 50 ms, 100 ms, 200 ms, ... up to 2 s, with up to 50% jitter. */
  uint64_t ms = 50ull << (attempt < 6 ? attempt : 6);
  if (ms > 2000)
    ms = 2000;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  ms += (uint64_t)now.tv_nsec % (ms / 2 + 1);
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* RESOURCE_EXHAUSTED and UNAVAILABLE, answered by a server: nothing ran. */
static bool retriable(const Sandbox__V1__ReplyEnvelope *reply) {
  return reply->status == SANDBOX__V1__CODE__RESOURCE_EXHAUSTED ||
         reply->status == SANDBOX__V1__CODE__UNAVAILABLE;
}

/* The endpoint for one attempt: the run's own (pinned), or the fleet's
 * choice by route. */
static int acquire(sbxc_client *c, const struct call *call, const struct sbxc_route *route,
                   struct sbxc_endpoint **ep) {
  if (call->pinned == NULL)
    return sbxc_fleet_acquire(c->fleet, route, ep, call->err, call->errlen);
  *ep = call->pinned;
  return sbxc_fleet_acquire_held(c->fleet, call->pinned, route, call->err, call->errlen);
}

/* One attempt: an endpoint from the fleet and the request to it. A request
 * that never left is given to the fleet again (elsewhere when it can) while
 * the wait for a connection lasts; one that left is never sent elsewhere. */
static Sandbox__V1__ReplyEnvelope *attempt(sbxc_client *c, struct call *call) {
  uint64_t wait = (uint64_t)reply_timeout_ms(c, call);
  if (c->connect_timeout_ms < wait)
    wait = c->connect_timeout_ms;
  struct sbxc_route route = {call->session_id, &call->tried, sbx_monotonic_ms() + wait, wait};
  for (;;) {
    struct sbxc_endpoint *ep;
    if (acquire(c, call, &route, &ep) < 0) {
      call->code = SBXC_UNAVAILABLE;
      call->endpoint[0] = '\0'; /* this attempt went nowhere */
      return NULL;
    }
    snprintf(call->endpoint, sizeof(call->endpoint), "%s", sbxc_endpoint_key(ep));
    bool not_sent = false;
    Sandbox__V1__ReplyEnvelope *reply = call_on(c, ep, call, &not_sent);
    if (reply != NULL && reply->status == SANDBOX__V1__CODE__UNAVAILABLE)
      sbxc_fleet_avoid_draining(c->fleet, ep);
    if (reply != NULL && call->keep_endpoint && reply->status == SANDBOX__V1__CODE__OK) {
      sbxc_fleet_hold(c->fleet, ep); /* before the release: never reaped between */
      call->held = ep;
    }
    sbxc_fleet_release(c->fleet, ep);
    if (not_sent || (reply != NULL && retriable(reply)))
      (void)sbxc_key_set_add(&call->tried, call->endpoint); /* out of memory: a preference lost */
    if (!not_sent || sbx_monotonic_ms() >= route.wait_until_ms)
      return reply;
  }
}

/* The call with retries of the answers that prove nothing ran: on an
 * endpoint it has not tried when there is one (then at once), else (and
 * always for a session or a run, which stay where they live) after a
 * pause. */
static Sandbox__V1__ReplyEnvelope *call_with_retries(sbxc_client *c, struct call *call) {
  for (unsigned n = 0;; n++) {
    call->attempts = n + 1;
    Sandbox__V1__ReplyEnvelope *reply = attempt(c, call);
    if (reply == NULL || !retriable(reply) || n >= c->retries)
      return reply;
    sandbox__v1__reply_envelope__free_unpacked(reply, NULL);
    if (call->session_id != NULL || call->pinned != NULL ||
        !sbxc_fleet_untried_live(c->fleet, &call->tried))
      backoff(n);
  }
}

Sandbox__V1__ReplyEnvelope *sbxc_call_method(sbxc_client *c, struct call *call) {
  if (call->session_id != NULL && call->session_id[0] == '\0')
    call->session_id = NULL;
  Sandbox__V1__ReplyEnvelope *reply = call_with_retries(c, call);
  if (reply != NULL && reply->status == SANDBOX__V1__CODE__OK && call->session_id != NULL)
    (void)sbxc_fleet_remember_session(c->fleet, call->session_id,
                                      call->endpoint); /* out of memory: the rule decides */
  sbxc_key_set_free(&call->tried);
  return reply;
}

/* Fills out from a RunCode reply (st->reply, owned by st). Every byte of it
 * came from the network: a malformed payload is an error, never a crash
 * (tests/fuzz/fuzz_reply.c). */
static int result_from_reply(struct result_storage *st, struct sbxc_result *out) {
  out->status = st->reply->status;
  if (st->reply->status != SANDBOX__V1__CODE__OK) {
    /* The server's whole message (a failed install's carries pip's output
     * tail), owned by the reply, freed with the result. */
    out->message = st->reply->message;
    return -1;
  }
  st->resp =
      sandbox__v1__run_code_response__unpack(NULL, st->reply->payload.len, st->reply->payload.data);
  if (st->resp == NULL) {
    out->status = SBXC_INTERNAL;
    snprintf(st->message, sizeof(st->message), "the reply is not a valid RunCodeResponse");
    return -1;
  }
  return sbxc_result_fill(st, out);
}

int sbxc_result_fill(struct result_storage *st, struct sbxc_result *out) {
  Sandbox__V1__RunCodeResponse *r = st->resp;
  SBXC_COPY_OUTPUT(out, r);
  out->run_id = r->run_id;
  out->session_id = r->session_id;
  out->killed_by = r->killed_by;
  out->exit_code = r->exit_code;
  out->signal = r->signal;
  out->wall_time_ms = r->wall_time_ms;
  out->cpu_time_ms = r->cpu_time_ms;
  out->peak_memory_bytes = r->peak_memory_bytes;
  out->feedback = (const char *const *)r->feedback;
  out->n_feedback = r->n_feedback;
  out->session_created = r->session_created;
  out->result = r->result;
  out->result_truncated = r->result_truncated;
  out->state_lost = r->state_lost;
  out->interpreter_ended = r->interpreter_ended;
  out->session_mode = (int)r->session_mode;
  if (r->egress != NULL) {
    st->egress = (struct sbxc_egress){r->egress->connections, r->egress->refused,
                                      r->egress->bytes_up, r->egress->bytes_down};
    out->egress = &st->egress;
  }
  if (r->compile != NULL) {
    const Sandbox__V1__CompileResult *c = r->compile;
    st->compile = (struct sbxc_compile){
        .stdout_data = c->stdout.data,
        .stdout_len = c->stdout.len,
        .stdout_truncated = c->stdout_truncated,
        .stderr_data = c->stderr.data,
        .stderr_len = c->stderr.len,
        .stderr_truncated = c->stderr_truncated,
        .killed_by = c->killed_by,
        .exit_code = c->exit_code,
        .signal = c->signal,
        .wall_time_ms = c->wall_time_ms,
        .cpu_time_ms = c->cpu_time_ms,
        .peak_memory_bytes = c->peak_memory_bytes,
        .failed = c->failed,
    };
    out->compile = &st->compile;
  }
  if (r->n_artifacts > 0) {
    st->artifacts = calloc(r->n_artifacts, sizeof(*st->artifacts));
    if (st->artifacts == NULL) {
      out->status = SBXC_INTERNAL;
      out->message = st->message;
      snprintf(st->message, sizeof(st->message), "out of memory");
      return -1;
    }
    for (size_t i = 0; i < r->n_artifacts; i++)
      st->artifacts[i] =
          (struct sbxc_artifact){r->artifacts[i]->name,           r->artifacts[i]->relative_path,
                                 r->artifacts[i]->size,           r->artifacts[i]->mime,
                                 r->artifacts[i]->content.data,   r->artifacts[i]->content.len,
                                 r->artifacts[i]->content_omitted};
    out->artifacts = st->artifacts;
    out->n_artifacts = r->n_artifacts;
  }
  return 0;
}

void *sbxc_answer_init(void *answer, size_t answer_size, size_t storage_size, int *status,
                       const char **message, void **internal) {
  memset(answer, 0, answer_size);
  void *storage = calloc(1, storage_size);
  if (storage == NULL) {
    *status = SBXC_INTERNAL;
    *message = "out of memory";
  }
  *internal = storage;
  return storage;
}

struct result_storage *sbxc_result_init(struct sbxc_result *out) {
  struct result_storage *st = sbxc_answer_init(out, sizeof(*out), sizeof(*st), &out->status,
                                               &out->message, &out->internal_);
  if (st != NULL)
    out->message = st->message;
  return st;
}

int sbxc_run_code(sbxc_client *c, const sbxc_request *req, struct sbxc_result *out) {
  struct result_storage *st = sbxc_result_init(out);
  if (st == NULL)
    return -1;
  uint64_t run_timeout =
      req->limits.timeout_ms > 0 ? (uint64_t)req->limits.timeout_ms : SBXC_UNKNOWN_TIMEOUT_MS;
  struct call call = {.method = SBX_METHOD_RUN_CODE,
                      .payload = &req->msg.base,
                      .run_timeout_ms = run_timeout,
                      .session_id = req->msg.session_id,
                      .code = SBXC_INTERNAL,
                      .err = st->message,
                      .errlen = sizeof(st->message)};
  st->reply = sbxc_call_method(c, &call);
  out->attempts = call.attempts;
  snprintf(st->endpoint, sizeof(st->endpoint), "%s", call.endpoint);
  if (st->reply == NULL) {
    out->status = call.code;
    return -1;
  }
  return result_from_reply(st, out);
}

const char *sbxc_result_endpoint(const struct sbxc_result *result) {
  const struct result_storage *st = result->internal_;
  return st != NULL ? st->endpoint : "";
}

int sbxc_result_from_reply_bytes(const uint8_t *buf, size_t len, struct sbxc_result *out) {
  struct result_storage *st = sbxc_result_init(out);
  if (st == NULL)
    return -1;
  st->reply = unpack_reply(buf, len);
  if (st->reply == NULL) {
    out->status = SBXC_INTERNAL;
    snprintf(st->message, sizeof(st->message), "the reply is not a valid sandbox.v1.ReplyEnvelope");
    return -1;
  }
  return result_from_reply(st, out);
}

void sbxc_result_free(struct sbxc_result *result) {
  struct result_storage *st = result->internal_;
  if (st != NULL) {
    if (st->resp != NULL)
      sandbox__v1__run_code_response__free_unpacked(st->resp, NULL);
    if (st->reply != NULL)
      sandbox__v1__reply_envelope__free_unpacked(st->reply, NULL);
    free(st->artifacts);
    free(st->text);
    free(st);
  }
  memset(result, 0, sizeof(*result));
}

/* Calls a method (with the client's retries) and returns the decoded
 * payload of an OK reply; *status (when not NULL) is the outcome. */
static ProtobufCMessage *simple_call_status(sbxc_client *c, const char *method,
                                            const ProtobufCMessage *payload, const char *session_id,
                                            const ProtobufCMessageDescriptor *out_desc, int *status,
                                            char *err, size_t errlen) {
  struct call call = {.method = method,
                      .payload = payload,
                      .session_id = session_id,
                      .code = SBXC_INTERNAL,
                      .err = err,
                      .errlen = errlen};
  if (status != NULL)
    *status = SBXC_INTERNAL;
  Sandbox__V1__ReplyEnvelope *reply = sbxc_call_method(c, &call);
  if (reply == NULL) {
    if (status != NULL)
      *status = call.code;
    return NULL;
  }
  if (status != NULL)
    *status = reply->status;
  ProtobufCMessage *out = NULL;
  if (reply->status != SANDBOX__V1__CODE__OK)
    sbxc_fail(err, errlen, "%s: %s", sbx_code_name(reply->status), reply->message);
  else if ((out = protobuf_c_message_unpack(out_desc, NULL, reply->payload.len,
                                            reply->payload.data)) == NULL)
    sbxc_fail(err, errlen, "the reply is not a valid %s", out_desc->name);
  sandbox__v1__reply_envelope__free_unpacked(reply, NULL);
  return out;
}

static ProtobufCMessage *simple_call(sbxc_client *c, const char *method,
                                     const ProtobufCMessage *payload,
                                     const ProtobufCMessageDescriptor *out_desc, char *err,
                                     size_t errlen) {
  return simple_call_status(c, method, payload, NULL, out_desc, NULL, err, errlen);
}

/* The --max-message-bytes of ep's server, asked once with GetInfo on ep
 * itself: nng drops an oversized message with its connection, and the
 * caller would see only UNKNOWN. SIZE_MAX when unknown (an older or
 * failing server): the request decides. */
static size_t server_max_bytes(sbxc_client *c, struct sbxc_endpoint *ep) {
  size_t known = sbxc_endpoint_server_max_bytes(ep);
  if (known != 0)
    return known;
  Sandbox__V1__GetInfoRequest req = SANDBOX__V1__GET_INFO_REQUEST__INIT;
  char err[256];
  struct call info = {.method = SBX_METHOD_GET_INFO,
                      .payload = &req.base,
                      .code = SBXC_INTERNAL,
                      .err = err,
                      .errlen = sizeof(err)};
  bool not_sent = false;
  Sandbox__V1__ReplyEnvelope *reply = call_on(c, ep, &info, &not_sent);
  Sandbox__V1__GetInfoResponse *r = NULL;
  if (reply != NULL && reply->status == SANDBOX__V1__CODE__OK)
    r = sandbox__v1__get_info_response__unpack(NULL, reply->payload.len, reply->payload.data);
  known = SIZE_MAX;
  if (r != NULL && r->max_message_bytes >= SBXC_SMALLEST_SERVER_CAP &&
      r->max_message_bytes <= SIZE_MAX)
    known = (size_t)r->max_message_bytes;
  if (r != NULL)
    sandbox__v1__get_info_response__free_unpacked(r, NULL);
  if (reply != NULL)
    sandbox__v1__reply_envelope__free_unpacked(reply, NULL);
  if (!not_sent) /* several threads may ask at once: the same answer */
    sbxc_endpoint_set_server_max_bytes(ep, known);
  return known;
}

int sbxc_close_session(sbxc_client *c, const char *session_id, int *status, char *err,
                       size_t errlen) {
  Sandbox__V1__CloseSessionRequest req = SANDBOX__V1__CLOSE_SESSION_REQUEST__INIT;
  req.session_id = (char *)session_id;
  int code;
  ProtobufCMessage *resp =
      simple_call_status(c, SBX_METHOD_CLOSE_SESSION, &req.base, session_id,
                         &sandbox__v1__close_session_response__descriptor, &code, err, errlen);
  if (status != NULL)
    *status = code;
  if (code == SBXC_OK || code == SBXC_NOT_FOUND)
    sbxc_fleet_forget_session(c->fleet, session_id);
  if (resp == NULL)
    return -1;
  protobuf_c_message_free_unpacked(resp, NULL);
  return 0;
}

/* A reply message (NULL: the call failed, err says why) as a malloc'd JSON
 * object in *json; frees r. */
static int reply_json(ProtobufCMessage *r, char **json, char *err, size_t errlen) {
  if (r == NULL)
    return -1;
  *json = sbxc_json_dump(sbxc_json_message(r));
  protobuf_c_message_free_unpacked(r, NULL);
  if (*json == NULL)
    return sbxc_fail(err, errlen, "out of memory");
  return 0;
}

int sbxc_list_files_json(sbxc_client *c, const char *session_id, const char *path, char **json,
                         int *status, char *err, size_t errlen) {
  Sandbox__V1__ListFilesRequest req = SANDBOX__V1__LIST_FILES_REQUEST__INIT;
  req.session_id = (char *)session_id;
  req.path = (char *)path;
  ProtobufCMessage *r =
      simple_call_status(c, SBX_METHOD_LIST_FILES, &req.base, session_id,
                         &sandbox__v1__list_files_response__descriptor, status, err, errlen);
  return reply_json(r, json, err, errlen);
}

int sbxc_read_file(sbxc_client *c, const char *session_id, const char *path, uint64_t offset,
                   uint64_t length, uint8_t **data, size_t *len, uint64_t *size, bool *eof,
                   int *status, char *err, size_t errlen) {
  Sandbox__V1__ReadFileRequest req = SANDBOX__V1__READ_FILE_REQUEST__INIT;
  req.session_id = (char *)session_id;
  req.path = (char *)path;
  req.offset = offset;
  req.length = length;
  Sandbox__V1__ReadFileResponse *r = (Sandbox__V1__ReadFileResponse *)simple_call_status(
      c, SBX_METHOD_READ_FILE, &req.base, session_id, &sandbox__v1__read_file_response__descriptor,
      status, err, errlen);
  if (r == NULL)
    return -1;
  *data = malloc(r->content.len > 0 ? r->content.len : 1);
  if (*data == NULL) {
    sandbox__v1__read_file_response__free_unpacked(r, NULL);
    return sbxc_fail(err, errlen, "out of memory");
  }
  if (r->content.len > 0)
    memcpy(*data, r->content.data, r->content.len);
  *len = r->content.len;
  *size = r->size;
  *eof = r->eof;
  sandbox__v1__read_file_response__free_unpacked(r, NULL);
  return 0;
}

int sbxc_health(sbxc_client *c, bool *serving, char *err, size_t errlen) {
  Sandbox__V1__HealthRequest req = SANDBOX__V1__HEALTH_REQUEST__INIT;
  Sandbox__V1__HealthResponse *resp = (Sandbox__V1__HealthResponse *)simple_call(
      c, SBX_METHOD_HEALTH, &req.base, &sandbox__v1__health_response__descriptor, err, errlen);
  if (resp == NULL)
    return -1;
  *serving = resp->status == SANDBOX__V1__HEALTH_RESPONSE__SERVING_STATUS__SERVING;
  sandbox__v1__health_response__free_unpacked(resp, NULL);
  return 0;
}

int sbxc_get_info_json(sbxc_client *c, char **json, char *err, size_t errlen) {
  Sandbox__V1__GetInfoRequest req = SANDBOX__V1__GET_INFO_REQUEST__INIT;
  ProtobufCMessage *r = simple_call(c, SBX_METHOD_GET_INFO, &req.base,
                                    &sandbox__v1__get_info_response__descriptor, err, errlen);
  return reply_json(r, json, err, errlen);
}

const char *sbxc_status_name(int status) {
  return sbx_code_name(status);
}

#define SAME_KILLED_BY(name)                                                                       \
  _Static_assert((int)SBXC_KILLED_BY_##name == (int)SANDBOX__V1__KILLED_BY__KILLED_BY_##name,      \
                 "client and wire agree on killed_by " #name)
SAME_KILLED_BY(NONE);
SAME_KILLED_BY(TIMEOUT);
SAME_KILLED_BY(MEMORY);
SAME_KILLED_BY(OUTPUT_LIMIT);
SAME_KILLED_BY(SIGNAL);
SAME_KILLED_BY(CANCELLED);

const char *sbxc_killed_by_name(int killed_by) {
  return killed_by_name(killed_by);
}
