/* mcp_front.h: the Model Context Protocol front (mcp.c): /mcp, Streamable
 * HTTP, onto the client/mcp/ core. */
#ifndef SBX_MCP_FRONT_H
#define SBX_MCP_FRONT_H

#include "error.h"
#include "fronts_state.h"
#include "http.h"

/* Its core (f->mcp) and its route on http (before the listener starts). */
int mcp_front_add_routes(struct fronts *f, struct http_listener *http, struct sbx_error *err);
/* After the HTTP listener stopped. */
void mcp_front_stop(struct fronts *f);

#endif
