/* fleet.c: the endpoints of one client and where each call goes (fleet.h).
 *
 * One list of endpoints; one that no target holds any more is marked
 * retired and its socket closed once no call is in flight on it. What this
 * file must never do: call into nng with f->lock held (nng_close waits for
 * pipe callbacks, which take it), or send a request: the at-most-once rules
 * live with the caller, which asks for an endpoint again only when nothing
 * was sent or a server said nothing ran. */
#include "fleet.h"

#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <nng/protocol/reqrep0/req.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fail.h"
#include "nngstat.h"
#include "session_pins.h"
#include "tls_config.h"

#define SBXC_MAX_REPLY_BYTES (1u << 30)
/* Pipes one endpoint may hold at once: its dialer keeps one, and a new one
 * may be added before nng has reported the old one's removal. */
#define MAX_PIPES 4

struct sbxc_endpoint {
  char key[SBXC_KEY_MAX];
  nng_socket sock;
  nng_dialer dialer; /* its statistics say why a tls+tcp one does not connect */
  bool tls;
  struct sbxc_fleet *fleet;
  _Atomic size_t server_max_bytes;
  /* Under fleet->lock: */
  uint32_t pipes[MAX_PIPES]; /* nng_pipe_id of each connection now */
  size_t n_pipes;
  unsigned in_flight;
  unsigned held; /* handles of runs started here (sbxc_run): they keep it open */
  uint64_t avoid_until_ms;
  bool retired; /* no target holds its key: no new calls, closed after the last call and hold */
  uint64_t tls_failed, refused; /* its dialer's failures, when a call last gave up */
};

/* One URL and the keys of its addresses now. */
struct target_state {
  struct sbxc_target t;
  nng_tls_config *tls; /* tls+tcp: its dialers' configuration; set at open, never changed */
  struct sbxc_key_set keys;
  char error[256]; /* the last look-up's or dial's failure, for messages */
  uint64_t next_resolve_ms;
  bool resolving; /* one caller looks a name up at a time */
};

struct sbxc_fleet {
  pthread_mutex_t lock;
  pthread_cond_t changed; /* a connection came or went, addresses changed, closed */
  struct target_state *targets;
  size_t n_targets;
  struct sbxc_endpoint **eps; /* in the order they were added */
  size_t n_eps, cap_eps;
  struct sbxc_pins *pins;
  struct sbxc_tls_configs *tls; /* NULL: no TLS settings */
  uint64_t resolve_interval_ms;
  unsigned rr;
  bool closed;
};

/* ---- one endpoint: its socket and its connections ---- */

static bool is_live(const struct sbxc_endpoint *ep) {
  return ep->n_pipes > 0 && !ep->retired;
}

static void pipe_added(struct sbxc_endpoint *ep, uint32_t id) {
  if (ep->n_pipes < MAX_PIPES)
    ep->pipes[ep->n_pipes++] = id;
}

static void pipe_removed(struct sbxc_endpoint *ep, uint32_t id) {
  for (size_t i = 0; i < ep->n_pipes; i++)
    if (ep->pipes[i] == id) {
      ep->pipes[i] = ep->pipes[--ep->n_pipes];
      return;
    }
}

/* On an nng thread: a connection of ep came or went. */
static void on_pipe(nng_pipe pipe, nng_pipe_ev ev, void *arg) {
  struct sbxc_endpoint *ep = arg;
  struct sbxc_fleet *f = ep->fleet;
  pthread_mutex_lock(&f->lock);
  if (ev == NNG_PIPE_EV_ADD_POST)
    pipe_added(ep, nng_pipe_id(pipe));
  else if (ev == NNG_PIPE_EV_REM_POST)
    pipe_removed(ep, nng_pipe_id(pipe));
  pthread_cond_broadcast(&f->changed);
  pthread_mutex_unlock(&f->lock);
}

/* The socket's options: no resend (a resent request would run the code a
 * second time), replies up to 1 GiB (artifacts), redial 100 ms to 2 s;
 * a tls+tcp dialer gets its TLS configuration before it starts. */
static int endpoint_configure(struct sbxc_endpoint *ep, nng_dialer *d, nng_tls_config *tls) {
  int rv;
  if ((rv = nng_socket_set_ms(ep->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0 ||
      (rv = nng_socket_set_size(ep->sock, NNG_OPT_RECVMAXSZ, SBXC_MAX_REPLY_BYTES)) != 0 ||
      (rv = nng_pipe_notify(ep->sock, NNG_PIPE_EV_ADD_POST, on_pipe, ep)) != 0 ||
      (rv = nng_pipe_notify(ep->sock, NNG_PIPE_EV_REM_POST, on_pipe, ep)) != 0 ||
      (rv = nng_dialer_create(d, ep->sock, ep->key)) != 0 ||
      (rv = nng_dialer_set_ms(*d, NNG_OPT_RECONNMINT, SBXC_RECONNECT_MIN_MS)) != 0 ||
      (rv = nng_dialer_set_ms(*d, NNG_OPT_RECONNMAXT, SBXC_RECONNECT_MAX_MS)) != 0)
    return rv;
  if (tls != NULL && (rv = nng_dialer_set_ptr(*d, NNG_OPT_TLS_CONFIG, tls)) != 0)
    return rv;
  return 0;
}

/* A socket dialing key; the dialer keeps trying in the background. NULL
 * with err when nng will not have it. */
static struct sbxc_endpoint *endpoint_open(struct sbxc_fleet *f, const char *key,
                                           nng_tls_config *tls, char *err, size_t errlen) {
  struct sbxc_endpoint *ep = calloc(1, sizeof(*ep));
  if (ep == NULL) {
    sbxc_fail(err, errlen, "%s: out of memory", key);
    return NULL;
  }
  snprintf(ep->key, sizeof(ep->key), "%s", key);
  ep->fleet = f;
  int rv = nng_req0_open(&ep->sock);
  if (rv != 0) {
    free(ep);
    sbxc_fail(err, errlen, "%s: nng_req0_open: %s", key, nng_strerror(rv));
    return NULL;
  }
  if ((rv = endpoint_configure(ep, &ep->dialer, tls)) != 0 ||
      (rv = nng_dialer_start(ep->dialer, NNG_FLAG_NONBLOCK)) != 0) {
    nng_close(ep->sock);
    free(ep);
    sbxc_fail(err, errlen, "%s: %s", key, nng_strerror(rv));
    return NULL;
  }
  ep->tls = tls != NULL;
  return ep;
}

/* Never with f->lock held: nng_close waits for the pipe callbacks. */
static void endpoint_close(struct sbxc_endpoint *ep) {
  nng_close(ep->sock);
  free(ep);
}

nng_socket sbxc_endpoint_socket(const struct sbxc_endpoint *ep) {
  return ep->sock;
}

const char *sbxc_endpoint_key(const struct sbxc_endpoint *ep) {
  return ep->key;
}

size_t sbxc_endpoint_server_max_bytes(const struct sbxc_endpoint *ep) {
  return atomic_load(&ep->server_max_bytes);
}

void sbxc_endpoint_set_server_max_bytes(struct sbxc_endpoint *ep, size_t bytes) {
  atomic_store(&ep->server_max_bytes, bytes);
}

/* ---- the endpoint list (f->lock held) ---- */

static struct sbxc_endpoint *find_current(struct sbxc_fleet *f, const char *key) {
  for (size_t i = 0; i < f->n_eps; i++)
    if (!f->eps[i]->retired && strcmp(f->eps[i]->key, key) == 0)
      return f->eps[i];
  return NULL;
}

static bool key_wanted(const struct sbxc_fleet *f, const char *key) {
  for (size_t i = 0; i < f->n_targets; i++)
    if (sbxc_key_set_has(&f->targets[i].keys, key))
      return true;
  return false;
}

static int list_append(struct sbxc_fleet *f, struct sbxc_endpoint *ep) {
  if (f->n_eps == f->cap_eps) {
    size_t cap = f->cap_eps ? f->cap_eps * 2 : 8;
    struct sbxc_endpoint **p = realloc(f->eps, cap * sizeof(*p));
    if (p == NULL)
      return -1;
    f->eps = p;
    f->cap_eps = cap;
  }
  f->eps[f->n_eps++] = ep;
  return 0;
}

/* A retired endpoint nothing uses any more: no call in flight, no run
 * handle holding it. */
static bool idle_retired(const struct sbxc_endpoint *ep) {
  return ep->retired && ep->in_flight == 0 && ep->held == 0;
}

/* Removes and returns an idle retired endpoint (any retired one once the
 * fleet is closed), or NULL. */
static struct sbxc_endpoint *take_idle_retired(struct sbxc_fleet *f) {
  for (size_t i = 0; i < f->n_eps; i++) {
    struct sbxc_endpoint *ep = f->eps[i];
    if (ep->retired && (idle_retired(ep) || f->closed)) {
      memmove(&f->eps[i], &f->eps[i + 1], (f->n_eps - i - 1) * sizeof(*f->eps));
      f->n_eps--;
      return ep;
    }
  }
  return NULL;
}

/* Closes the retired endpoints that no call uses, one at a time, each
 * without the lock. */
static void fleet_reap(struct sbxc_fleet *f) {
  for (;;) {
    pthread_mutex_lock(&f->lock);
    struct sbxc_endpoint *ep = take_idle_retired(f);
    pthread_mutex_unlock(&f->lock);
    if (ep == NULL)
      return;
    endpoint_close(ep);
  }
}

/* Notes why key got no socket on every target that holds it. */
static void note_error(struct sbxc_fleet *f, const char *key, const char *why) {
  pthread_mutex_lock(&f->lock);
  for (size_t i = 0; i < f->n_targets; i++)
    if (sbxc_key_set_has(&f->targets[i].keys, key))
      snprintf(f->targets[i].error, sizeof(f->targets[i].error), "%s", why);
  pthread_mutex_unlock(&f->lock);
}

static void note_target_error(struct sbxc_fleet *f, size_t i, const char *why) {
  pthread_mutex_lock(&f->lock);
  snprintf(f->targets[i].error, sizeof(f->targets[i].error), "%s", why);
  pthread_mutex_unlock(&f->lock);
}

/* Retires the endpoints no target holds; the keys still without one go to
 * missing. Returns -1 when out of memory (some keys left out this time). */
static int plan_sync(struct sbxc_fleet *f, struct sbxc_key_set *missing) {
  int rv = 0;
  pthread_mutex_lock(&f->lock);
  for (size_t i = 0; i < f->n_eps; i++)
    if (!key_wanted(f, f->eps[i]->key))
      f->eps[i]->retired = true;
  for (size_t i = 0; i < f->n_targets; i++)
    for (size_t k = 0; k < f->targets[i].keys.n; k++)
      if (find_current(f, f->targets[i].keys.keys[k]) == NULL &&
          sbxc_key_set_add(missing, f->targets[i].keys.keys[k]) < 0)
        rv = -1;
  pthread_cond_broadcast(&f->changed);
  pthread_mutex_unlock(&f->lock);
  return rv;
}

/* Adds ep unless the fleet closed, another caller added the key first or
 * no target wants it any more; then ep is the caller's to close. */
static bool adopt(struct sbxc_fleet *f, struct sbxc_endpoint *ep) {
  pthread_mutex_lock(&f->lock);
  bool taken = !f->closed && find_current(f, ep->key) == NULL && key_wanted(f, ep->key) &&
               list_append(f, ep) == 0;
  if (taken)
    pthread_cond_broadcast(&f->changed);
  pthread_mutex_unlock(&f->lock);
  return taken;
}

/* The TLS configuration of the targets holding key: a tls+tcp:// key is
 * only ever held by tls+tcp:// targets. NULL for a plain one. */
static nng_tls_config *key_tls(struct sbxc_fleet *f, const char *key) {
  nng_tls_config *cfg = NULL;
  pthread_mutex_lock(&f->lock);
  for (size_t i = 0; i < f->n_targets && cfg == NULL; i++)
    if (sbxc_key_set_has(&f->targets[i].keys, key))
      cfg = f->targets[i].tls;
  pthread_mutex_unlock(&f->lock);
  return cfg;
}

/* Makes the endpoints match the targets' keys: a socket for each new key,
 * the ones no target holds retired (and closed once idle). Returns 0, or
 * -1 with err naming a key that got no socket (noted on its targets). */
static int fleet_sync(struct sbxc_fleet *f, char *err, size_t errlen) {
  struct sbxc_key_set missing = {0};
  int rv = plan_sync(f, &missing) < 0 ? sbxc_fail(err, errlen, "out of memory") : 0;
  for (size_t i = 0; i < missing.n; i++) {
    char why[256];
    struct sbxc_endpoint *ep =
        endpoint_open(f, missing.keys[i], key_tls(f, missing.keys[i]), why, sizeof(why));
    if (ep == NULL) {
      note_error(f, missing.keys[i], why);
      rv = sbxc_fail(err, errlen, "%s", why);
    } else if (!adopt(f, ep)) {
      endpoint_close(ep);
    }
  }
  sbxc_key_set_free(&missing);
  fleet_reap(f);
  return rv;
}

/* ---- host names ---- */

/* The addresses of a name now, in the resolver's order, without duplicates. */
static int resolve_target(const struct sbxc_target *t, struct sbxc_key_set *keys, char *err,
                          size_t errlen) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  int rv = getaddrinfo(t->host, NULL, &hints, &res);
  if (rv != 0)
    return sbxc_fail(err, errlen, "resolving %s: %s", t->host, gai_strerror(rv));
  for (struct addrinfo *a = res; a != NULL; a = a->ai_next) {
    char key[SBXC_KEY_MAX];
    const void *addr = a->ai_family == AF_INET
                           ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                           : (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
    if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
        sbxc_address_key(sbxc_target_scheme(t), a->ai_family, addr, t->port, key, sizeof(key)) ==
            0 &&
        sbxc_key_set_add(keys, key) < 0) {
      freeaddrinfo(res);
      return sbxc_fail(err, errlen, "resolving %s: out of memory", t->host);
    }
  }
  freeaddrinfo(res);
  return keys->n > 0 ? 0 : sbxc_fail(err, errlen, "resolving %s: no IPv4 or IPv6 address", t->host);
}

static uint64_t next_resolve_after(const struct sbxc_fleet *f, const struct target_state *ts,
                                   uint64_t now) {
  return now + (ts->keys.n > 0 ? f->resolve_interval_ms : SBXC_RESOLVE_RETRY_MS);
}

/* Claims target i's look-up when it is due (f->lock held). */
static bool claim_resolution(struct sbxc_fleet *f, size_t i, uint64_t now) {
  struct target_state *ts = &f->targets[i];
  if (!ts->t.is_name || ts->resolving || ts->next_resolve_ms > now || f->closed)
    return false;
  ts->resolving = true;
  return true;
}

/* A successful look-up (keys not NULL) replaces the addresses; a failed one
 * keeps them (a resolver's hiccup must not empty the fleet). */
static void finish_resolution(struct sbxc_fleet *f, size_t i, struct sbxc_key_set *keys,
                              const char *error) {
  pthread_mutex_lock(&f->lock);
  struct target_state *ts = &f->targets[i];
  if (keys != NULL) {
    sbxc_key_set_free(&ts->keys);
    ts->keys = *keys;
    *keys = (struct sbxc_key_set){0};
  }
  snprintf(ts->error, sizeof(ts->error), "%s", error);
  ts->next_resolve_ms = next_resolve_after(f, ts, sbx_monotonic_ms());
  ts->resolving = false;
  pthread_cond_broadcast(&f->changed);
  pthread_mutex_unlock(&f->lock);
}

/* Looks up, on the calling thread, every name that is due. */
static void resolve_due(struct sbxc_fleet *f) {
  for (size_t i = 0; i < f->n_targets; i++) {
    pthread_mutex_lock(&f->lock);
    bool mine = claim_resolution(f, i, sbx_monotonic_ms());
    pthread_mutex_unlock(&f->lock);
    if (!mine)
      continue;
    struct sbxc_key_set keys = {0};
    char error[256] = "";
    int found = resolve_target(&f->targets[i].t, &keys, error, sizeof(error));
    finish_resolution(f, i, found == 0 ? &keys : NULL, error);
    sbxc_key_set_free(&keys);
    if (fleet_sync(f, error, sizeof(error)) < 0)
      note_target_error(f, i, error); /* shown when no endpoint can take a call */
  }
}

/* The soonest a name is due for a look-up (f->lock held); UINT64_MAX for none. */
static uint64_t next_resolution(const struct sbxc_fleet *f) {
  uint64_t next = UINT64_MAX;
  for (size_t i = 0; i < f->n_targets; i++)
    if (f->targets[i].t.is_name && !f->targets[i].resolving && f->targets[i].next_resolve_ms < next)
      next = f->targets[i].next_resolve_ms;
  return next;
}

/* Waits (f->lock held) for a change until until_ms, or until a name is due;
 * then looks names up, without the lock. */
static void wait_for_change(struct sbxc_fleet *f, uint64_t until_ms) {
  uint64_t wake = next_resolution(f);
  if (wake > until_ms)
    wake = until_ms;
  if (wake > sbx_monotonic_ms()) {
    struct timespec ts = {(time_t)(wake / 1000), (long)(wake % 1000) * 1000000L};
    pthread_cond_timedwait(&f->changed, &f->lock, &ts); /* ETIMEDOUT is an answer too */
  }
  if (next_resolution(f) <= sbx_monotonic_ms()) {
    pthread_mutex_unlock(&f->lock);
    resolve_due(f);
    pthread_mutex_lock(&f->lock);
  }
}

/* ---- opening and closing ---- */

static unsigned random_start(void) {
  unsigned seed;
  if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
    seed = (unsigned)sbx_monotonic_ms() ^ (unsigned)getpid();
  return seed;
}

static int fleet_init_sync(struct sbxc_fleet *f) {
  pthread_condattr_t attr;
  if (pthread_condattr_init(&attr) != 0)
    return -1;
  int rv = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
                   pthread_cond_init(&f->changed, &attr) == 0
               ? 0
               : -1;
  pthread_condattr_destroy(&attr);
  if (rv == 0 && pthread_mutex_init(&f->lock, NULL) != 0) {
    pthread_cond_destroy(&f->changed);
    rv = -1;
  }
  return rv;
}

/* TLS settings and tls+tcp:// URLs go together: a plain endpoint in a
 * fleet given TLS settings would be a silent downgrade, a tls+tcp:// one
 * without them cannot verify anything. */
static int target_tls(struct sbxc_fleet *f, struct target_state *ts, char *err, size_t errlen) {
  if (ts->t.tls && f->tls == NULL)
    return sbxc_fail(err, errlen,
                     "endpoint %s: a tls+tcp:// endpoint needs TLS settings (sbxc_client_open_tls; "
                     "sandbox-run --tls-ca FILE)",
                     ts->t.url);
  if (!ts->t.tls && f->tls != NULL)
    return sbxc_fail(err, errlen,
                     "endpoint %s: TLS settings are given, so every endpoint must be "
                     "tls+tcp://HOST:PORT",
                     ts->t.url);
  if (ts->t.tls && (ts->tls = sbxc_tls_configs_get(f->tls, ts->t.host, err, errlen)) == NULL)
    return -1;
  return 0;
}

/* Parses every URL; a fixed one holds its one key from the start. */
static int fleet_parse(struct sbxc_fleet *f, const char *const *urls, size_t n, char *err,
                       size_t errlen) {
  f->targets = calloc(n, sizeof(*f->targets));
  if (f->targets == NULL)
    return sbxc_fail(err, errlen, "out of memory");
  f->n_targets = n;
  for (size_t i = 0; i < n; i++) {
    struct target_state *ts = &f->targets[i];
    if (sbxc_target_parse(urls[i], &ts->t, err, errlen) < 0 || target_tls(f, ts, err, errlen) < 0)
      return -1;
    if (!ts->t.is_name && sbxc_key_set_add(&ts->keys, ts->t.fixed_key) < 0)
      return sbxc_fail(err, errlen, "out of memory");
  }
  return 0;
}

static void fleet_free(struct sbxc_fleet *f) {
  for (size_t i = 0; i < f->n_targets; i++)
    sbxc_key_set_free(&f->targets[i].keys);
  free(f->targets);
  free(f->eps);
  sbxc_pins_free(f->pins);
  sbxc_tls_configs_free(f->tls); /* after the sockets: each dialer holds its own */
  pthread_cond_destroy(&f->changed);
  pthread_mutex_destroy(&f->lock);
  free(f);
}

struct sbxc_fleet *sbxc_fleet_open(const char *const *urls, size_t n, const struct sbxc_tls *tls,
                                   char *err, size_t errlen) {
  if (n == 0) {
    sbxc_fail(err, errlen, "no endpoint: give at least one URL");
    return NULL;
  }
  struct sbxc_fleet *f = calloc(1, sizeof(*f));
  if (f == NULL || fleet_init_sync(f) < 0) {
    free(f);
    sbxc_fail(err, errlen, "out of memory");
    return NULL;
  }
  f->resolve_interval_ms = SBXC_RESOLVE_INTERVAL_MS;
  f->rr = random_start(); /* one-shot processes must not all start on the first */
  f->pins = sbxc_pins_new(SBXC_MAX_REMEMBERED_SESSIONS);
  if (f->pins == NULL) {
    sbxc_fail(err, errlen, "out of memory");
    fleet_free(f);
    return NULL;
  }
  if ((tls != NULL && (f->tls = sbxc_tls_configs_new(tls, err, errlen)) == NULL) ||
      fleet_parse(f, urls, n, err, errlen) < 0) {
    fleet_free(f);
    return NULL;
  }
  resolve_due(f); /* every name is due: a failed look-up is noted, and tried again */
  if (fleet_sync(f, err, errlen) < 0) {
    sbxc_fleet_close(f); /* an address nng will not dial: the caller's mistake */
    return NULL;
  }
  return f;
}

void sbxc_fleet_close(struct sbxc_fleet *f) {
  if (f == NULL)
    return;
  pthread_mutex_lock(&f->lock);
  f->closed = true;
  for (size_t i = 0; i < f->n_eps; i++)
    f->eps[i]->retired = true;
  pthread_cond_broadcast(&f->changed);
  pthread_mutex_unlock(&f->lock);
  fleet_reap(f);
  fleet_free(f);
}

void sbxc_fleet_set_resolve_interval_ms(struct sbxc_fleet *f, uint64_t ms) {
  pthread_mutex_lock(&f->lock);
  f->resolve_interval_ms = ms;
  for (size_t i = 0; i < f->n_targets; i++)
    if (f->targets[i].t.is_name)
      f->targets[i].next_resolve_ms = next_resolve_after(f, &f->targets[i], sbx_monotonic_ms());
  pthread_mutex_unlock(&f->lock);
}

/* ---- choosing ---- */

/* 0: not tried and not draining, 1: not tried, 2: not draining, 3: any. */
static unsigned preference(const struct sbxc_endpoint *ep, const struct sbxc_key_set *tried,
                           uint64_t now) {
  return (sbxc_key_set_has(tried, ep->key) ? 2u : 0u) + (ep->avoid_until_ms > now ? 1u : 0u);
}

/* A connected endpoint: the best preference, then the fewest calls in
 * flight, then round-robin among equals (f->lock held). */
static struct sbxc_endpoint *pick_connected(struct sbxc_fleet *f,
                                            const struct sbxc_key_set *tried) {
  uint64_t now = sbx_monotonic_ms();
  unsigned best = UINT_MAX, fewest = UINT_MAX;
  size_t ties = 0;
  for (size_t i = 0; i < f->n_eps; i++) {
    struct sbxc_endpoint *ep = f->eps[i];
    unsigned p = is_live(ep) ? preference(ep, tried, now) : UINT_MAX;
    if (p < best || (p == best && p != UINT_MAX && ep->in_flight < fewest)) {
      best = p;
      fewest = ep->in_flight;
      ties = 1;
    } else if (p == best && p != UINT_MAX && ep->in_flight == fewest) {
      ties++;
    }
  }
  if (ties == 0)
    return NULL;
  size_t nth = f->rr++ % ties;
  for (size_t i = 0; i < f->n_eps; i++) {
    struct sbxc_endpoint *ep = f->eps[i];
    if (is_live(ep) && preference(ep, tried, now) == best && ep->in_flight == fewest && nth-- == 0)
      return ep;
  }
  return NULL;
}

/* The endpoint holding session_id, connected or not (f->lock held). */
static struct sbxc_endpoint *session_home(struct sbxc_fleet *f, const char *session_id) {
  const char *pinned = sbxc_pins_get(f->pins, session_id);
  struct sbxc_endpoint *home = pinned != NULL ? find_current(f, pinned) : NULL;
  if (home != NULL)
    return home;
  uint32_t best_score = 0;
  for (size_t i = 0; i < f->n_eps; i++) {
    struct sbxc_endpoint *ep = f->eps[i];
    if (ep->retired)
      continue;
    uint32_t s = sbxc_session_score(session_id, ep->key);
    if (home == NULL || sbxc_home_before(s, ep->key, best_score, home->key)) {
      home = ep;
      best_score = s;
    }
  }
  return home;
}

/* Appends to err at *used, as far as it goes. */
__attribute__((format(printf, 4, 5))) static void append(char *err, size_t errlen, size_t *used,
                                                         const char *fmt, ...) {
  if (err == NULL || *used >= errlen)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(err + *used, errlen - *used, fmt, ap);
  va_end(ap);
  if (n > 0)
    *used += (size_t)n;
}

/* One endpoint's state, and for a tls+tcp one that never connected, why. */
static void describe_endpoint(const struct sbxc_endpoint *ep, char *err, size_t errlen,
                              size_t *used) {
  if (is_live(ep) || !ep->tls || (ep->tls_failed == 0 && ep->refused == 0))
    append(err, errlen, used, "%s (%s)", ep->key, is_live(ep) ? "connected" : "not connected");
  else if (ep->tls_failed == 0)
    append(err, errlen, used, "%s (not connected: connection refused)", ep->key);
  else
    append(err, errlen, used,
           "%s (not connected: %llu TLS handshakes failed: the server's certificate does not "
           "verify against the CA file or does not carry the server name (--tls-server-name, "
           "else the URL's host), or the server refused this client's certificate (none, "
           "another CA, expired))",
           ep->key, (unsigned long long)ep->tls_failed);
}

/* Every endpoint and whether it is connected, every target's last error. */
static void describe(struct sbxc_fleet *f, char *err, size_t errlen, size_t *used) {
  const char *sep = "";
  for (size_t i = 0; i < f->n_eps; i++)
    if (!f->eps[i]->retired) {
      append(err, errlen, used, "%s", sep);
      describe_endpoint(f->eps[i], err, errlen, used);
      sep = ", ";
    }
  for (size_t i = 0; i < f->n_targets; i++)
    if (f->targets[i].error[0] != '\0' || f->targets[i].keys.n == 0) {
      append(err, errlen, used, "%s%s (%s)", sep, f->targets[i].t.url,
             f->targets[i].error[0] ? f->targets[i].error : "no address");
      sep = ", ";
    }
}

/* Why no endpoint could take the call (f->lock held). waited_ms: the wait
 * granted, not the time measured, so that the message names the setting. */
static int no_endpoint(struct sbxc_fleet *f, const char *session_id, uint64_t waited_ms, char *err,
                       size_t errlen) {
  size_t used = 0;
  struct sbxc_endpoint *home = session_id != NULL ? session_home(f, session_id) : NULL;
  if (home != NULL)
    append(err, errlen, &used, "session %s lives on %s, which was not connected within %llu ms",
           session_id, home->key, (unsigned long long)waited_ms);
  else
    append(err, errlen, &used,
           "no endpoint connected within %llu ms: ", (unsigned long long)waited_ms);
  if (home == NULL)
    describe(f, err, errlen, &used);
  append(err, errlen, &used, "; nothing was sent");
  return -1;
}

/* nng reports a failed dial to no callback: the failures of each tls+tcp
 * dialer are read from nng's statistics into its endpoint: "auth" (a
 * handshake that failed here, or was refused with an alert), "other",
 * "disconnect", "proto" (the server closed the connection during it),
 * less "connect": those error counters also count the end of a connection
 * that had been made. Called without f->lock: nng_stats_get takes nng's
 * locks; under it only the snapshot, plain memory, is read. A dialer gone
 * since is not found. */
static void read_tls_failures(struct sbxc_fleet *f) {
  static const char *const failures[] = {"auth", "other", "disconnect", "proto"};
  nng_stat *stats;
  if (f->tls == NULL || nng_stats_get(&stats) != 0)
    return;
  pthread_mutex_lock(&f->lock);
  for (size_t i = 0; i < f->n_eps; i++) {
    struct sbxc_endpoint *ep = f->eps[i];
    nng_stat *ds =
        ep->tls ? sbx_nngstat_scope(stats, "dialer", (uint32_t)nng_dialer_id(ep->dialer)) : NULL;
    if (ds == NULL)
      continue;
    uint64_t errors = 0, made = sbx_nngstat_value(ds, "connect");
    for (size_t k = 0; k < sizeof(failures) / sizeof(failures[0]); k++)
      errors += sbx_nngstat_value(ds, failures[k]);
    ep->tls_failed = errors > made ? errors - made : 0;
    ep->refused = sbx_nngstat_value(ds, "refused");
  }
  pthread_mutex_unlock(&f->lock);
  nng_stats_free(stats);
}

int sbxc_fleet_acquire(struct sbxc_fleet *f, const struct sbxc_route *route,
                       struct sbxc_endpoint **out, char *err, size_t errlen) {
  const char *session =
      route->session_id != NULL && route->session_id[0] != '\0' ? route->session_id : NULL;
  resolve_due(f);
  pthread_mutex_lock(&f->lock);
  for (;;) {
    if (f->closed) {
      pthread_mutex_unlock(&f->lock);
      return sbxc_fail(err, errlen, "the client is closed; nothing was sent");
    }
    struct sbxc_endpoint *ep =
        session != NULL ? session_home(f, session) : pick_connected(f, route->tried);
    if (ep != NULL && is_live(ep)) {
      ep->in_flight++;
      pthread_mutex_unlock(&f->lock);
      *out = ep;
      return 0;
    }
    if (sbx_monotonic_ms() >= route->wait_until_ms)
      break;
    wait_for_change(f, route->wait_until_ms);
  }
  pthread_mutex_unlock(&f->lock);
  read_tls_failures(f);
  pthread_mutex_lock(&f->lock);
  no_endpoint(f, session, route->wait_ms, err, errlen);
  pthread_mutex_unlock(&f->lock);
  return -1;
}

/* One use of ep ends: a call in flight or a hold (*uses, one of its
 * counts under f->lock). A retired endpoint nothing uses any more is
 * closed, without the lock. */
static void end_use(struct sbxc_fleet *f, struct sbxc_endpoint *ep, unsigned *uses) {
  pthread_mutex_lock(&f->lock);
  (*uses)--;
  bool idle = idle_retired(ep);
  pthread_mutex_unlock(&f->lock);
  if (idle)
    fleet_reap(f);
}

void sbxc_fleet_release(struct sbxc_fleet *f, struct sbxc_endpoint *ep) {
  end_use(f, ep, &ep->in_flight);
}

/* ---- runs: held endpoints ---- */

void sbxc_fleet_hold(struct sbxc_fleet *f, struct sbxc_endpoint *ep) {
  pthread_mutex_lock(&f->lock);
  ep->held++;
  pthread_mutex_unlock(&f->lock);
}

int sbxc_fleet_hold_key(struct sbxc_fleet *f, const char *key, struct sbxc_endpoint **out,
                        char *err, size_t errlen) {
  struct sbxc_endpoint *found = NULL;
  size_t n = 0;
  pthread_mutex_lock(&f->lock);
  for (size_t i = 0; i < f->n_eps; i++) {
    struct sbxc_endpoint *ep = f->eps[i];
    if (ep->retired || (key != NULL && strcmp(ep->key, key) != 0))
      continue;
    found = ep;
    n++;
  }
  if (found != NULL && n == 1)
    found->held++;
  pthread_mutex_unlock(&f->lock);
  if (found != NULL && n == 1) {
    *out = found;
    return 0;
  }
  if (key != NULL)
    return sbxc_fail(err, errlen, "%s is not an endpoint of this client", key);
  return sbxc_fail(err, errlen,
                   "this client has %zu endpoints: name the one the run lives on (it lives on the "
                   "server that started it)",
                   n);
}

void sbxc_fleet_unhold(struct sbxc_fleet *f, struct sbxc_endpoint *ep) {
  end_use(f, ep, &ep->held);
}

int sbxc_fleet_acquire_held(struct sbxc_fleet *f, struct sbxc_endpoint *ep,
                            const struct sbxc_route *route, char *err, size_t errlen) {
  uint64_t wait_until_ms = route->wait_until_ms;
  pthread_mutex_lock(&f->lock);
  for (;;) {
    if (f->closed) {
      pthread_mutex_unlock(&f->lock);
      return sbxc_fail(err, errlen, "the client is closed; nothing was sent");
    }
    if (ep->n_pipes > 0) { /* retired or not: the run lives there */
      ep->in_flight++;
      pthread_mutex_unlock(&f->lock);
      return 0;
    }
    if (sbx_monotonic_ms() >= wait_until_ms)
      break;
    wait_for_change(f, wait_until_ms);
  }
  pthread_mutex_unlock(&f->lock);
  return sbxc_fail(err, errlen,
                   "the run lives on %s, which was not connected within %llu ms; nothing was sent",
                   ep->key, (unsigned long long)route->wait_ms);
}

bool sbxc_fleet_untried_live(struct sbxc_fleet *f, const struct sbxc_key_set *tried) {
  bool found = false;
  pthread_mutex_lock(&f->lock);
  for (size_t i = 0; i < f->n_eps && !found; i++)
    found = is_live(f->eps[i]) && !sbxc_key_set_has(tried, f->eps[i]->key);
  pthread_mutex_unlock(&f->lock);
  return found;
}

void sbxc_fleet_avoid_draining(struct sbxc_fleet *f, struct sbxc_endpoint *ep) {
  pthread_mutex_lock(&f->lock);
  ep->avoid_until_ms = sbx_monotonic_ms() + SBXC_DRAINING_AVOID_MS;
  pthread_mutex_unlock(&f->lock);
}

/* ---- sessions ---- */

int sbxc_fleet_remember_session(struct sbxc_fleet *f, const char *session_id, const char *key) {
  pthread_mutex_lock(&f->lock);
  int rv = sbxc_pins_put(f->pins, session_id, key);
  pthread_mutex_unlock(&f->lock);
  return rv;
}

void sbxc_fleet_forget_session(struct sbxc_fleet *f, const char *session_id) {
  pthread_mutex_lock(&f->lock);
  sbxc_pins_remove(f->pins, session_id);
  pthread_mutex_unlock(&f->lock);
}

void sbxc_fleet_forget_sessions(struct sbxc_fleet *f) {
  pthread_mutex_lock(&f->lock);
  sbxc_pins_clear(f->pins);
  pthread_mutex_unlock(&f->lock);
}

int sbxc_fleet_session_home(struct sbxc_fleet *f, const char *session_id, char *key, size_t len) {
  pthread_mutex_lock(&f->lock);
  struct sbxc_endpoint *home = session_home(f, session_id);
  if (home != NULL)
    snprintf(key, len, "%s", home->key);
  pthread_mutex_unlock(&f->lock);
  return home != NULL ? 0 : -1;
}

/* ---- reporting ---- */

static size_t count_endpoints(const struct sbxc_fleet *f, bool live_only) {
  size_t n = 0;
  for (size_t i = 0; i < f->n_eps; i++)
    if (!f->eps[i]->retired && (!live_only || is_live(f->eps[i])))
      n++;
  return n;
}

int sbxc_fleet_wait_connected(struct sbxc_fleet *f, size_t count, uint64_t until_ms) {
  pthread_mutex_lock(&f->lock);
  for (;;) {
    size_t want = count > 0 ? count : count_endpoints(f, false);
    if (f->closed || (want > 0 && count_endpoints(f, true) >= want))
      break;
    if (sbx_monotonic_ms() >= until_ms)
      break;
    wait_for_change(f, until_ms);
  }
  size_t want = count > 0 ? count : count_endpoints(f, false);
  int rv = !f->closed && want > 0 && count_endpoints(f, true) >= want ? 0 : -1;
  pthread_mutex_unlock(&f->lock);
  return rv;
}

int sbxc_fleet_endpoints(struct sbxc_fleet *f, struct sbxc_endpoint_view **out, size_t *n) {
  pthread_mutex_lock(&f->lock);
  size_t total = count_endpoints(f, false), j = 0;
  struct sbxc_endpoint_view *v = calloc(total > 0 ? total : 1, sizeof(*v));
  for (size_t i = 0; v != NULL && i < f->n_eps; i++)
    if (!f->eps[i]->retired) {
      snprintf(v[j].key, sizeof(v[j].key), "%s", f->eps[i]->key);
      v[j++].live = is_live(f->eps[i]);
    }
  pthread_mutex_unlock(&f->lock);
  if (v == NULL)
    return -1;
  *out = v;
  *n = j;
  return 0;
}
