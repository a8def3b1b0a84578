/* transport.h: the aio loop (transport.c): the server's REP contexts, each
 * receiving a request, handing it to handlers.c and sending the reply. */
#ifndef SBX_TRANSPORT_H
#define SBX_TRANSPORT_H

#include <stddef.h>

#include "error.h"

struct server;
struct server_call;

/* The contexts on srv->sock (the socket open, no listener needed yet). */
int transport_open(struct server *srv, struct sbx_error *err);
/* Every context receives its first request. */
void transport_start(struct server *srv);
/* Contexts with a request in hand or a reply on its way (the drain waits
 * for 0 before it closes the socket). */
size_t transport_in_flight(struct server *srv);
/* After the socket closed: waits for running callbacks, frees the contexts. */
void transport_free(struct server *srv);

/* Hands call's reply to nng and receives the next request on its context
 * (nothing built: the request is dropped and the context receives). The
 * run table is given this at init to send what it answered. */
void transport_send(struct server_call *call);

#endif
