/* netaddr.h: is an address on the public internet? For the download guard
 * (download.c): a client must not make the server fetch from loopback, the
 * host's private networks or the cloud metadata service. */
#ifndef SBX_NETADDR_H
#define SBX_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

/* True for a globally routable unicast address. Otherwise false, with the
 * kind in why ("loopback", "private", "link-local", ...). IPv4 addresses
 * carried in IPv6 (mapped, compatible, NAT64 64:ff9b::/96, 6to4) are judged
 * as the IPv4 address they carry. Any other family is not public. */
bool netaddr_is_public(const struct sockaddr *sa, socklen_t len, const char **why);

/* The address as text ("127.0.0.1", "::1"), for messages. */
void netaddr_format(const struct sockaddr *sa, socklen_t len, char *buf, size_t size);

#endif
