/* egress_allow.h: a run's network policy (RunCodeRequest.allow_net,
 * docs/EGRESS.md): the entries it may reach, parsed from text, checked
 * against a ceiling (the operator's --egress-allow, a tenant's
 * egress_allow), and matched by the egress proxy (egress.c) against each
 * connection's target and every address its name resolved to. Pure
 * functions over bytes: unit-tested (tests/unit/test_egress_allow.c) and
 * fuzzed (tests/fuzz/fuzz_egress_allow.c).
 *
 * Entries, case-insensitive, no spaces:
 *   host           a DNS name: example.com
 *   *.domain       any name below domain (any depth), not domain itself
 *   *              any DNS name (a ceiling for operators; public addresses
 *                  only, as for every name)
 *   CIDR           198.51.100.0/24, 2001:db8::/32; a bare address is /32 or
 *                  /128
 *   X:*            any of the above on every port (an operator's ceiling,
 *                  mostly: "127.0.0.0/8:*")
 *   X:port         any of the above with one port (1-65535); an IPv6
 *                  address or CIDR with a port in brackets: [2001:db8::1]:443
 *                  or [2001:db8::/32]:443; without a port: 80 and 443.
 * A name matches name entries only; an IP literal (a target written as an
 * address) matches CIDR entries only. An address a name resolved to that is
 * not public (netaddr.h), or is one of the server's own, is allowed only by
 * a CIDR entry containing it. Never parses anything but the entry: no
 * lookups, no allocation. */
#ifndef SBX_EGRESS_ALLOW_H
#define SBX_EGRESS_ALLOW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define EGRESS_ALLOW_MAX 32        /* entries in one list */
#define EGRESS_ALLOW_ENTRY_MAX 300 /* bytes of one entry's text */

enum egress_allow_kind {
  EGRESS_ALLOW_HOST,   /* name: exactly this name */
  EGRESS_ALLOW_DOMAIN, /* name: any name ending in "." name */
  EGRESS_ALLOW_ANY,    /* "*": any DNS name */
  EGRESS_ALLOW_CIDR,   /* addr/prefix */
};

struct egress_allow_entry {
  enum egress_allow_kind kind;
  char name[254];   /* HOST, DOMAIN (without "*."): lower case, no trailing dot */
  int family;       /* CIDR: AF_INET or AF_INET6 */
  uint8_t addr[16]; /* CIDR: network address (host bits zero), 4 or 16 bytes used */
  unsigned prefix;  /* CIDR: 0-32 or 0-128 */
  uint16_t port;    /* 0: 80 and 443 (unless any_port) */
  bool any_port;    /* ":*": every port */
};

struct egress_allow {
  size_t n; /* entries used; never more than EGRESS_ALLOW_MAX are read */
  struct egress_allow_entry e[EGRESS_ALLOW_MAX];
};

/* Parses one entry (at most EGRESS_ALLOW_ENTRY_MAX bytes; no more are
 * read). 0, or -1 with why, at most 160 bytes with its NUL ("port 0 is out
 * of range (1-65535)", "CIDR prefix /33 is longer than 32", "'*' only as
 * the whole first label (*.example.com) or as the whole entry", "'1.2.3' is
 * not an IPv4 address (...)", ...); a refused entry leaves out as it was.
 * Host bits of a CIDR's address must be zero ("10.0.0.1/8: host bits set;
 * did you mean 10.0.0.0/8?"). Text of only digits and dots is an IPv4 address
 * or refused, never a name; a name whose last label is a number
 * ("0x7f.1", "example.123": getaddrinfo reads such text as an address) is
 * refused too. So are a trailing dot and an IPv4-mapped IPv6 address
 * (::ffff:a.b.c.d: written as IPv4, the one spelling of that address). */
int egress_allow_parse(const char *text, struct egress_allow_entry *out, char *why, size_t whylen);

/* The entry as text, in the parser's own spelling (round-trips). */
void egress_allow_format(const struct egress_allow_entry *e, char *out, size_t outlen);

/* Whether everything entry allows, ceiling allows too: the same or a
 * narrower name (a HOST within a DOMAIN or ANY, a DOMAIN within a wider
 * DOMAIN or ANY), a CIDR within a CIDR; its ports among the ceiling's. */
bool egress_allow_entry_within(const struct egress_allow_entry *entry,
                               const struct egress_allow_entry *ceiling);
/* Within any entry of the list. */
bool egress_allow_within(const struct egress_allow_entry *entry, const struct egress_allow *list);

/* Does the list allow a connection to this target as the program wrote it
 * (host: a name, or an IP literal without brackets) on port? A name is
 * checked against name entries (case-insensitively), an IP literal against
 * CIDR entries (an IPv4-mapped IPv6 one as the IPv4 address it carries).
 * A host that is neither (by the entries' rules) is not allowed. */
bool egress_allow_target(const struct egress_allow *list, const char *host, uint16_t port);

/* Does a CIDR entry of the list contain this address, for port? For an
 * address a name resolved to that is not public (or is the server's own).
 * An IPv4-mapped IPv6 address (AF_INET6 ::ffff:a.b.c.d) is matched as the
 * IPv4 address it carries, against IPv4 entries only. */
bool egress_allow_address(const struct egress_allow *list, const struct sockaddr *sa,
                          socklen_t salen, uint16_t port);

#endif
