/* conns.h: the server's view of its client connections (nng pipes).
 *
 * nng gives a REP socket no idle timeout and no connection cap: a peer that
 * finishes the SP handshake and then sends nothing, or half a message, keeps
 * its connection (and fd) forever, and a flood of them exhausts the server's
 * descriptors. This table, fed by nng's pipe events and by the calls, closes
 * connections that have no call in progress and were quiet for the idle
 * timeout, refuses connections past the per-listener cap, and tells a worker
 * whether the client of a queued call is still there (a call whose client
 * went away is dropped before it runs).
 *
 * Thread-safe: pipe events arrive on nng's threads, calls on nng's callbacks
 * and the workers, the idle sweep on the main thread. nng_pipe_close is
 * never called under the table's lock. */
#ifndef SBX_CONNS_H
#define SBX_CONNS_H

#include <nng/nng.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct conn {
  uint32_t pipe_id;
  uint32_t listener_id;
  unsigned calls;   /* calls received on it and not yet answered */
  uint64_t last_ms; /* last connect, request or reply (monotonic) */
};

struct conns {
  pthread_mutex_t lock;
  struct conn *items;
  size_t n, cap;
  unsigned max_per_listener;
  uint64_t idle_timeout_ms;
  uint64_t refused_total; /* connections closed at the cap */
  uint64_t idle_closed_total;
  uint64_t last_refusal_log_ms;
  uint32_t internal_listener; /* its pipes (the fronts' client) are never idle-closed */
  /* --tls-client-auth optional: connections served without a verified
   * client certificate are counted and logged (one line a second at most). */
  bool tls_log_unverified;
  uint64_t tls_unverified_total;
  uint64_t last_unverified_log_ms;
};

int conns_init(struct conns *c, unsigned max_per_listener, uint64_t idle_timeout_ms);
void conns_destroy(struct conns *c);
/* The listener of sandboxd's own fronts (inproc://): its connections live
 * as long as the server and are never closed for idleness. */
void conns_set_internal_listener(struct conns *c, uint32_t listener_id);
/* Registers the pipe callbacks on sock (before any listener starts). */
int conns_watch(struct conns *c, nng_socket sock);

/* The peer of pipe for the log: "10.0.0.7:51234", "[::1]:51234", "ipc",
 * "inproc", or "?" when nng cannot say. */
void conns_peer_name(nng_pipe pipe, char *buf, size_t len);
/* Where a pipe's peer is: this process (the fronts, on inproc://), this
 * machine (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104, ipc://) or elsewhere
 * (anything else, and a pipe whose address cannot be read). */
enum conns_origin { CONNS_REMOTE, CONNS_LOOPBACK, CONNS_INPROC };
enum conns_origin conns_peer_origin(nng_pipe pipe);

/* A request arrived on / its reply left for pipe (0: unknown, ignored). */
void conns_call_begin(struct conns *c, uint32_t pipe_id);
void conns_call_end(struct conns *c, uint32_t pipe_id);
/* Whether the connection a call came on is still open. */
bool conns_alive(struct conns *c, uint32_t pipe_id);
/* Closes connections without calls that were quiet for the idle timeout;
 * returns how many. */
size_t conns_close_idle(struct conns *c);
size_t conns_count(struct conns *c);
/* Open connections, and those closed at the cap and for idleness so far. */
struct conns_stats_read {
  size_t open;
  uint64_t refused_total, idle_closed_total;
};
void conns_stats_read(struct conns *c, struct conns_stats_read *out);

#endif
