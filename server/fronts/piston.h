/* piston.h: the Piston API v2 front (piston.c): /api/v2/runtimes and
 * /api/v2/execute onto RunCode. */
#ifndef SBX_PISTON_H
#define SBX_PISTON_H

#include "error.h"
#include "fronts_state.h"
#include "http.h"

/* Its routes on http (before the listener starts). 0, or -1 with err. */
int piston_add_routes(struct fronts *f, struct http_listener *http, struct sbx_error *err);

#endif
