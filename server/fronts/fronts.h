/* fronts.h: the HTTP fronts of sandboxd (--http-fronts): other protocols
 * translated onto RunCode. Each front adds its routes on the HTTP listener
 * (server/ops/http.h) and calls RunCode through the C client on the
 * server's own inproc:// listener (SERVER_FRONTS_URL), so every run goes
 * through the same decoding, validation, queue, limits, sessions and
 * counters as a call from outside. A front never calls the engine, the
 * runner or the queue itself, and keeps no limits of its own. */
#ifndef SBX_FRONTS_H
#define SBX_FRONTS_H

#include "error.h"
#include "fronts_state.h"
#include "http.h"

struct server;

/* Adds the routes of every front --http-fronts names on http (before the
 * listener starts; the RPC side must be started: the client dials its
 * inproc listener). 0, or -1 with err. */
int fronts_add_routes(struct fronts *f, struct server *srv, struct http_listener *http,
                      struct sbx_error *err);

/* After the HTTP listener stopped (no handler runs any more). */
void fronts_stop(struct fronts *f);

#endif
