/* handlers.h: the service's methods (RunCode, StartRun, WatchRun,
 * CancelRun, Health, GetInfo, CloseSession, ListFiles, ReadFile), invoked
 * through protobuf-c's generated service with the method index decode.c
 * checked. */
#ifndef SBX_HANDLERS_H
#define SBX_HANDLERS_H

#include <stdbool.h>

struct server;
struct server_call;

void handlers_init(struct server *srv);

/* Runs the handler of method_index for call (call->input decoded). Returns
 * true when the call went to a worker: the caller must leave it alone;
 * otherwise call->reply is set. */
bool handlers_dispatch(struct server *srv, struct server_call *call, unsigned method_index);

#endif
