/* egress_tunnel.h: the egress proxy's connections (egress_tunnel.c), as
 * its acceptor (egress.c) hands them over. Internal to fetch/. */
#ifndef SBX_EGRESS_TUNNEL_H
#define SBX_EGRESS_TUNNEL_H

#include "egress.h"

/* A thread serving fd (accepted on the slot's listener, or the lease's
 * when lease is not NULL; counted by the caller against its door). 0, or
 * -1 when no thread could start (fd still the caller's). */
int egress_tunnel_spawn(struct egress *eg, struct egress_lease *lease, unsigned slot, int fd);

/* Answers fd with status and why at once, counts and logs it as a
 * refusal of its door, and closes it. Never waits. */
void egress_tunnel_refuse(struct egress *eg, struct egress_lease *lease, unsigned slot, int fd,
                          int status, const char *why);

#endif
