/* fronts_state.h: what every front reads (struct fronts), filled by
 * fronts.c before any front adds its routes. A front sees the server only
 * through this: whether it drains, the client on the inproc listener, the
 * runtimes, the body cap, the tenants registry (caller.h). Header only: the fronts
 * include it, fronts.c fills it, and no front calls back into fronts.c. */
#ifndef SBX_FRONTS_STATE_H
#define SBX_FRONTS_STATE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "log.h"
#include "sandbox_client.h"

struct mcp_server;
struct runtime_table;
struct tenants;

struct fronts {
  const atomic_bool *draining; /* the server's (struct server) */
  sbxc_client *client;         /* to SERVER_FRONTS_URL; NULL when no front is served */
  /* The server's runtimes (runtimes.h): checked before the fronts start,
   * read-only after. */
  const struct runtime_table *runtimes;
  size_t http_max_body_bytes; /* --http-max-body-bytes */
  const char
      *piston_allow_net;     /* --piston-allow-net: every Piston run's allow_net, comma-separated */
  struct mcp_server *mcp;    /* mcp.c's core (client/mcp/) when the MCP front is served */
  struct tenants *tenants;   /* the server's registry (caller.c), never NULL once routed */
  struct log_limit auth_log; /* caller.c's event=auth_failed lines */
};

/* Whether the server drains: a front answers at once then (the RPC socket
 * closes at the end of the drain, and a call sent after it would wait). */
static inline bool fronts_draining(const struct fronts *f) {
  return atomic_load(f->draining);
}

#endif
