/* conns.c: see conns.h. A small array under one mutex: connections number
 * in the hundreds at most (max_per_listener per listener), and every
 * operation is a linear scan far cheaper than the run it accompanies. */
#include "conns.h"
#include "clock.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "envelope.h"
#include "log.h"

int conns_init(struct conns *c, unsigned max_per_listener, uint64_t idle_timeout_ms) {
  memset(c, 0, sizeof(*c));
  c->max_per_listener = max_per_listener;
  c->idle_timeout_ms = idle_timeout_ms;
  return pthread_mutex_init(&c->lock, NULL) == 0 ? 0 : -1;
}

void conns_destroy(struct conns *c) {
  pthread_mutex_destroy(&c->lock);
  free(c->items);
  c->items = NULL;
  c->n = c->cap = 0;
}

static struct conn *find(struct conns *c, uint32_t pipe_id) {
  for (size_t i = 0; i < c->n; i++)
    if (c->items[i].pipe_id == pipe_id)
      return &c->items[i];
  return NULL;
}

static size_t count_listener(const struct conns *c, uint32_t listener_id) {
  size_t n = 0;
  for (size_t i = 0; i < c->n; i++)
    n += c->items[i].listener_id == listener_id;
  return n;
}

/* Adds the pipe; false when its listener is at the cap (or out of memory). */
static bool add_pipe(struct conns *c, uint32_t pipe_id, uint32_t listener_id, bool *at_cap) {
  *at_cap = listener_id != 0 && count_listener(c, listener_id) >= c->max_per_listener;
  if (*at_cap)
    return false;
  if (c->n == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 64;
    struct conn *items = realloc(c->items, cap * sizeof(*items));
    if (items == NULL)
      return false;
    c->items = items;
    c->cap = cap;
  }
  c->items[c->n++] = (struct conn){pipe_id, listener_id, 0, sbx_monotonic_ms()};
  return true;
}

static void log_refusal(struct conns *c, nng_pipe p, size_t refused) {
  char *url = NULL;
  nng_listener l = nng_pipe_listener(p);
  if (nng_listener_get_string(l, NNG_OPT_URL, &url) != 0)
    url = NULL;
  log_line("connection_refused",
           "listener=%s max_connections=%u refused_total=%zu msg=\"the listener is at its "
           "connection cap (--max-connections); the connection was closed\"",
           url != NULL ? url : "?", c->max_per_listener, refused);
  nng_strfree(url);
}

/* A TLS connection served without a verified client certificate (none
 * given, or one that did not verify: nng 1.5.2 cannot tell which). Other
 * transports have no such option and are left alone. */
static void note_unverified(struct conns *c, nng_pipe p) {
  bool verified = false;
  if (nng_pipe_get_bool(p, NNG_OPT_TLS_VERIFIED, &verified) != 0 || verified)
    return;
  pthread_mutex_lock(&c->lock);
  uint64_t total = ++c->tls_unverified_total, now = sbx_monotonic_ms();
  bool log_it = c->last_unverified_log_ms == 0 || now - c->last_unverified_log_ms >= 1000;
  if (log_it)
    c->last_unverified_log_ms = now;
  pthread_mutex_unlock(&c->lock);
  if (!log_it)
    return;
  char *url = NULL;
  if (nng_listener_get_string(nng_pipe_listener(p), NNG_OPT_URL, &url) != 0)
    url = NULL;
  log_line("tls_client_unverified",
           "listener=%s unverified_total=%llu msg=\"a connection without a verified client "
           "certificate (none, or one that did not verify) is served: --tls-client-auth "
           "optional\"",
           url != NULL ? url : "?", (unsigned long long)total);
  nng_strfree(url);
}

void conns_peer_name(nng_pipe pipe, char *buf, size_t len) {
  nng_sockaddr sa;
  char addr[INET6_ADDRSTRLEN] = "";
  snprintf(buf, len, "?");
  if (nng_pipe_get_addr(pipe, NNG_OPT_REMADDR, &sa) != 0)
    return;
  switch (sa.s_family) {
  case NNG_AF_INET:
    if (inet_ntop(AF_INET, &sa.s_in.sa_addr, addr, sizeof(addr)) != NULL)
      snprintf(buf, len, "%s:%u", addr, (unsigned)ntohs(sa.s_in.sa_port));
    break;
  case NNG_AF_INET6:
    if (inet_ntop(AF_INET6, sa.s_in6.sa_addr, addr, sizeof(addr)) != NULL)
      snprintf(buf, len, "[%s]:%u", addr, (unsigned)ntohs(sa.s_in6.sa_port));
    break;
  case NNG_AF_IPC:
    snprintf(buf, len, "ipc");
    break;
  case NNG_AF_INPROC:
    snprintf(buf, len, "inproc");
    break;
  default:
    break;
  }
}

enum conns_origin conns_peer_origin(nng_pipe pipe) {
  nng_sockaddr sa;
  if (nng_pipe_get_addr(pipe, NNG_OPT_REMADDR, &sa) != 0)
    return CONNS_REMOTE;
  static const uint8_t v6_loopback[16] = {[15] = 1};
  static const uint8_t v4_mapped[12] = {[10] = 0xff, [11] = 0xff};
  switch (sa.s_family) {
  case NNG_AF_INET:
    return ((const uint8_t *)&sa.s_in.sa_addr)[0] == 127 ? CONNS_LOOPBACK : CONNS_REMOTE;
  case NNG_AF_INET6:
    if (memcmp(sa.s_in6.sa_addr, v6_loopback, 16) == 0 ||
        (memcmp(sa.s_in6.sa_addr, v4_mapped, 12) == 0 && sa.s_in6.sa_addr[12] == 127))
      return CONNS_LOOPBACK;
    return CONNS_REMOTE;
  case NNG_AF_IPC:
    return CONNS_LOOPBACK; /* a local socket: as near as loopback */
  case NNG_AF_INPROC:
    return CONNS_INPROC;
  default:
    return CONNS_REMOTE;
  }
}

static void pipe_event(nng_pipe p, nng_pipe_ev ev, void *arg) {
  struct conns *c = arg;
  uint32_t id = (uint32_t)nng_pipe_id(p);
  if (ev == NNG_PIPE_EV_REM_POST) {
    pthread_mutex_lock(&c->lock);
    struct conn *e = find(c, id);
    if (e != NULL)
      *e = c->items[--c->n];
    pthread_mutex_unlock(&c->lock);
    return;
  }
  /* NNG_PIPE_EV_ADD_PRE: closing the pipe here refuses the connection. */
  uint32_t listener = (uint32_t)nng_listener_id(nng_pipe_listener(p));
  bool at_cap = false;
  bool log_it = false;
  size_t refused = 0;
  pthread_mutex_lock(&c->lock);
  bool added = add_pipe(c, id, listener > 0 ? listener : 0, &at_cap);
  if (!added) {
    refused = (size_t)++c->refused_total;
    uint64_t now = sbx_monotonic_ms();
    /* One line a second at most: a flood must not flood the log too. */
    log_it = at_cap && (c->last_refusal_log_ms == 0 || now - c->last_refusal_log_ms >= 1000);
    if (log_it)
      c->last_refusal_log_ms = now;
  }
  pthread_mutex_unlock(&c->lock);
  if (added) {
    if (c->tls_log_unverified)
      note_unverified(c, p);
    return;
  }
  if (log_it)
    log_refusal(c, p, refused);
  nng_pipe_close(p);
}

void conns_set_internal_listener(struct conns *c, uint32_t listener_id) {
  pthread_mutex_lock(&c->lock);
  c->internal_listener = listener_id;
  pthread_mutex_unlock(&c->lock);
}

int conns_watch(struct conns *c, nng_socket sock) {
  int rv = nng_pipe_notify(sock, NNG_PIPE_EV_ADD_PRE, pipe_event, c);
  if (rv == 0)
    rv = nng_pipe_notify(sock, NNG_PIPE_EV_REM_POST, pipe_event, c);
  return rv;
}

void conns_call_begin(struct conns *c, uint32_t pipe_id) {
  pthread_mutex_lock(&c->lock);
  struct conn *e = find(c, pipe_id);
  if (e != NULL) {
    e->calls++;
    e->last_ms = sbx_monotonic_ms();
  }
  pthread_mutex_unlock(&c->lock);
}

void conns_call_end(struct conns *c, uint32_t pipe_id) {
  pthread_mutex_lock(&c->lock);
  struct conn *e = find(c, pipe_id);
  if (e != NULL) {
    if (e->calls > 0)
      e->calls--;
    e->last_ms = sbx_monotonic_ms();
  }
  pthread_mutex_unlock(&c->lock);
}

bool conns_alive(struct conns *c, uint32_t pipe_id) {
  pthread_mutex_lock(&c->lock);
  bool alive = find(c, pipe_id) != NULL;
  pthread_mutex_unlock(&c->lock);
  return alive;
}

size_t conns_close_idle(struct conns *c) {
  uint32_t idle[256];
  size_t n = 0;
  uint64_t now = sbx_monotonic_ms();
  pthread_mutex_lock(&c->lock);
  for (size_t i = 0; i < c->n && n < sizeof(idle) / sizeof(idle[0]); i++)
    if (c->items[i].calls == 0 && now - c->items[i].last_ms >= c->idle_timeout_ms &&
        (c->internal_listener == 0 || c->items[i].listener_id != c->internal_listener))
      idle[n++] = c->items[i].pipe_id;
  c->idle_closed_total += n;
  pthread_mutex_unlock(&c->lock);
  /* Outside the lock: closing runs the REM_POST event, which takes it. The
   * rest, if more than a batch, go on the next tick. */
  for (size_t i = 0; i < n; i++) {
    nng_pipe p = NNG_PIPE_INITIALIZER;
    p.id = idle[i];
    nng_pipe_close(p);
  }
  return n;
}

size_t conns_count(struct conns *c) {
  pthread_mutex_lock(&c->lock);
  size_t n = c->n;
  pthread_mutex_unlock(&c->lock);
  return n;
}

void conns_stats_read(struct conns *c, struct conns_stats_read *out) {
  pthread_mutex_lock(&c->lock);
  out->open = c->n;
  out->refused_total = c->refused_total;
  out->idle_closed_total = c->idle_closed_total;
  pthread_mutex_unlock(&c->lock);
}
