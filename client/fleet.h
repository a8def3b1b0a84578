/* fleet.h: the endpoints of one client, which of them are connected, and
 * which one takes a call. Internal to libsandbox-client (client.c sends the
 * calls; this module never sends one).
 *
 * Every URL given is one endpoint, except a tcp:// host name, which counts as
 * one endpoint per address it resolves to (a Kubernetes headless Service).
 * Each endpoint address has its own nng REQ socket and dialer, so the client
 * always knows where a call went; nng redials a lost server by itself, and
 * pipe events keep the count of connections per endpoint. No thread of its
 * own: nng's threads run the pipe callbacks, names are resolved on the
 * calling thread. One mutex and one condition variable guard everything
 * below; nng is never called with the mutex held (nng_close waits for pipe
 * callbacks, which take it). The URLs and keys themselves, and the
 * rendezvous rule, are endpoint.h's (pure). */
#ifndef SBXC_FLEET_H
#define SBXC_FLEET_H

#include <nng/nng.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "endpoint.h"
#include "sandbox_client.h"

#define SBXC_RECONNECT_MIN_MS 100
#define SBXC_RECONNECT_MAX_MS 2000
#define SBXC_RESOLVE_INTERVAL_MS 30000
/* A name that resolved to nothing yet is looked up again this often. */
#define SBXC_RESOLVE_RETRY_MS 1000
#define SBXC_MAX_REMEMBERED_SESSIONS 4096
/* An endpoint that answered UNAVAILABLE (draining) is avoided this long. */
#define SBXC_DRAINING_AVOID_MS 1000

/* ---- the fleet ---- */

struct sbxc_fleet;
struct sbxc_endpoint;

/* Opens the fleet of urls (n > 0): parses them, resolves host names and
 * starts dialing every address. A name that does not resolve now is not an
 * error (it is looked up again); a bad URL is. tls (NULL: none) is for
 * tls+tcp:// URLs: with it every URL must be one, without it none may.
 * Returns NULL with err. */
struct sbxc_fleet *sbxc_fleet_open(const char *const *urls, size_t n, const struct sbxc_tls *tls,
                                   char *err, size_t errlen);
/* Closes every socket. No call may be in flight. */
void sbxc_fleet_close(struct sbxc_fleet *f);
/* How often host names are looked up again (default 30 s). */
void sbxc_fleet_set_resolve_interval_ms(struct sbxc_fleet *f, uint64_t ms);

/* Where one call (one attempt) goes. */
struct sbxc_route {
  const char *session_id;           /* NULL or "": no session */
  const struct sbxc_key_set *tried; /* may be NULL */
  uint64_t wait_until_ms;           /* monotonic: how long to wait for a connection */
  uint64_t wait_ms;                 /* the wait granted (the connect timeout), for errors */
};

/* Chooses the endpoint for one attempt and counts the call on it; release
 * it with sbxc_fleet_release. Without a session: a connected endpoint,
 * preferring ones not tried and not draining, then the fewest calls in
 * flight, then round-robin. With one: the endpoint holding the session
 * (sbxc_fleet_session_home), only once it is connected. Waits for a
 * connection until route->wait_until_ms; then -1 with err (nothing was
 * sent). Host names due for a look-up are resolved here first. */
int sbxc_fleet_acquire(struct sbxc_fleet *f, const struct sbxc_route *route,
                       struct sbxc_endpoint **out, char *err, size_t errlen);
void sbxc_fleet_release(struct sbxc_fleet *f, struct sbxc_endpoint *ep);

/* Runs (docs/STREAMING.md): a started run lives on the server that
 * started it, so its WatchRun and CancelRun calls go to that endpoint
 * only. A run handle holds its endpoint: a held endpoint whose name no
 * longer resolves to it stays open (retired: no other call goes there)
 * until the last hold and call are gone. Holds are not calls in flight. */
/* ep is acquired (the StartRun that went there): hold it too. */
void sbxc_fleet_hold(struct sbxc_fleet *f, struct sbxc_endpoint *ep);
/* Holds the current endpoint whose key is key, or with key NULL the only
 * endpoint of the fleet. Returns 0, or -1 with err (no such endpoint;
 * several when key is NULL). */
int sbxc_fleet_hold_key(struct sbxc_fleet *f, const char *key, struct sbxc_endpoint **out,
                        char *err, size_t errlen);
void sbxc_fleet_unhold(struct sbxc_fleet *f, struct sbxc_endpoint *ep);
/* Acquires the held ep itself for one call once it is connected, waiting
 * until route->wait_until_ms; release it with sbxc_fleet_release. Returns
 * 0, or -1 with err (nothing was sent). */
int sbxc_fleet_acquire_held(struct sbxc_fleet *f, struct sbxc_endpoint *ep,
                            const struct sbxc_route *route, char *err, size_t errlen);

/* True when a connected endpoint is not in tried. */
bool sbxc_fleet_untried_live(struct sbxc_fleet *f, const struct sbxc_key_set *tried);
/* ep answered UNAVAILABLE: it is draining; avoid it for a second. */
void sbxc_fleet_avoid_draining(struct sbxc_fleet *f, struct sbxc_endpoint *ep);

/* Sessions: where this client last got an answer for a session id (the
 * last SBXC_MAX_REMEMBERED_SESSIONS of them). Returns 0, or -1 when out of
 * memory (then the rendezvous rule decides, as for another client). */
int sbxc_fleet_remember_session(struct sbxc_fleet *f, const char *session_id, const char *key);
void sbxc_fleet_forget_session(struct sbxc_fleet *f, const char *session_id);
/* Forgets every session: the client's API key changed, and a session id
 * now means another tenant's session (docs/CLIENTS.md, "API keys"). */
void sbxc_fleet_forget_sessions(struct sbxc_fleet *f);
/* The key of the endpoint holding session_id now: the remembered one while
 * it is an endpoint, else the rendezvous rule over every endpoint,
 * connected or not. Returns 0, or -1 when the fleet has no endpoint. */
int sbxc_fleet_session_home(struct sbxc_fleet *f, const char *session_id, char *key, size_t len);

/* Waits until at least count endpoints are connected (0: all of them),
 * until the monotonic time until_ms. Returns 0, or -1 on time out. */
int sbxc_fleet_wait_connected(struct sbxc_fleet *f, size_t count, uint64_t until_ms);

/* One endpoint as sbxc_fleet_endpoints reports it. */
struct sbxc_endpoint_view {
  char key[SBXC_KEY_MAX];
  bool live;
};
/* Every current endpoint, in the order of the URLs given: a malloc'd array
 * in *out (free it), its length in *n. Returns 0, or -1 out of memory. */
int sbxc_fleet_endpoints(struct sbxc_fleet *f, struct sbxc_endpoint_view **out, size_t *n);

/* An acquired endpoint's socket and key. */
nng_socket sbxc_endpoint_socket(const struct sbxc_endpoint *ep);
const char *sbxc_endpoint_key(const struct sbxc_endpoint *ep);
/* The server's --max-message-bytes, learnt with GetInfo: 0 not asked yet,
 * SIZE_MAX unknown (GetInfo failed: the request decides). */
size_t sbxc_endpoint_server_max_bytes(const struct sbxc_endpoint *ep);
void sbxc_endpoint_set_server_max_bytes(struct sbxc_endpoint *ep, size_t bytes);

#endif
