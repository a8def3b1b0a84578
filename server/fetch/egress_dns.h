/* egress_dns.h: name resolution for the egress proxy (egress.c), the only
 * place a sandboxed program's names are resolved (a sandbox has no
 * resolver). The system's (getaddrinfo), or with --egress-dns IP[:PORT] a
 * DNS server asked directly for A and AAAA records (split horizon, and the
 * tests' own resolver on loopback). Each name is resolved once per
 * connection; every address it gave is checked by the caller before one is
 * dialled. */
#ifndef SBX_EGRESS_DNS_H
#define SBX_EGRESS_DNS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define EGRESS_DNS_MAX_ADDRESSES 16
#define EGRESS_DNS_TIMEOUT_MS 5000 /* for the whole resolution */

struct egress_dns {
  /* "" = the system's resolver; else a DNS server's address and port. */
  struct sockaddr_storage server;
  socklen_t server_len; /* 0: the system's resolver */
  /* The whole resolution's limit with a server (the system's resolver has
   * its own): 0 = EGRESS_DNS_TIMEOUT_MS. For tests; parse sets 0. */
  int timeout_ms;
};

struct egress_addresses {
  size_t n;
  struct sockaddr_storage a[EGRESS_DNS_MAX_ADDRESSES]; /* port set to the target's */
  socklen_t len[EGRESS_DNS_MAX_ADDRESSES];
};

/* Parses --egress-dns: "IPv4", "IPv4:port", "[IPv6]", "[IPv6]:port" (port
 * 53 by default, 1-65535); "" = the system's. An address only: a name
 * would need a resolver to find the resolver. IPv6 without brackets
 * ("::1") is refused, as in allow_net: "::1:53" would be ambiguous.
 * 0, or -1 with why. */
int egress_dns_parse(const char *text, struct egress_dns *out, char *why, size_t whylen);

/* Resolves host (a DNS name; an IP literal is returned as itself) to at
 * most EGRESS_DNS_MAX_ADDRESSES addresses, IPv4 and IPv6, each with port.
 * 0 with at least one address, or -1 with why ("no such name",
 * "the DNS server 127.0.0.1:5353 did not answer within 5000 ms", ...). */
int egress_dns_resolve(const struct egress_dns *dns, const char *host, uint16_t port,
                       struct egress_addresses *out, char *why, size_t whylen);

#endif
