/* fronts.h: the HTTP fronts of sandboxd (--http-fronts): other protocols
 * translated onto RunCode. Each front adds its routes on the HTTP listener
 * (server/ops/http.h) and calls RunCode through the C client on the
 * server's own inproc:// listener (SERVER_FRONTS_URL), so every run goes
 * through the same decoding, validation, queue, limits, sessions and
 * counters as a call from outside. A front never calls the engine, the
 * runner or the queue itself, and keeps no limits of its own. */
#ifndef SBX_FRONTS_H
#define SBX_FRONTS_H

#include <stdbool.h>

#include "error.h"
#include "http.h"
#include "sandbox_client.h"

struct server;

struct mcp_server;

struct fronts {
  struct server *srv;
  sbxc_client *client; /* to SERVER_FRONTS_URL; NULL when no front is served */
  char python_version[32];
  struct mcp_server *mcp; /* mcp.c's core (client/mcp/) when the MCP front is served */
};

/* Adds the routes of every front --http-fronts names on http (before the
 * listener starts; the RPC side must be started: the client dials its
 * inproc listener). 0, or -1 with err. */
int fronts_add_routes(struct fronts *f, struct server *srv, struct http_listener *http,
                      struct sbx_error *err);

/* After the HTTP listener stopped (no handler runs any more). */
void fronts_stop(struct fronts *f);

/* Whether the server drains: a front answers at once then (the RPC socket
 * closes at the end of the drain, and a call sent after it would wait). */
bool fronts_draining(const struct fronts *f);

/* piston.c: the Piston API v2 (/api/v2/runtimes, /api/v2/execute). */
int piston_add_routes(struct fronts *f, struct http_listener *http, struct sbx_error *err);

/* mcp.c: the Model Context Protocol, Streamable HTTP (/mcp). */
int mcp_front_add_routes(struct fronts *f, struct http_listener *http, struct sbx_error *err);
void mcp_front_stop(struct fronts *f);

#endif
