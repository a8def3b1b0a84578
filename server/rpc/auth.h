/* auth.h: who a call is, between decoding and its method (transport.c
 * calls it for every call but Health). The proof is what the transport
 * knows (where the connection comes from) and what the envelope carries
 * (an API key's digest; a front's verified caller, believed only from the
 * in-process listener the fronts use). Must never: believe a front_caller
 * from a network connection, log a credential, or let an unauthenticated
 * call reach a method. */
#ifndef SBX_AUTH_H
#define SBX_AUTH_H

#include "call.h"
#include "conns.h"
#include "decode.h"
#include "tenants.h"

/* 0 with call->tenant and call->policy set, or -1 with err
 * (UNAUTHENTICATED, or INVALID_ARGUMENT for a front_caller from outside);
 * a failure is counted in the registry and logged (event=auth_failed, at
 * most a few lines a second, the rest counted in the next). */
int auth_call(struct tenants *tenants, struct log_limit *log, struct server_call *call,
              const struct decoded_caller *dc, enum conns_origin origin, struct sbx_error *err);

#endif
