/* netaddr.c: see netaddr.h. The ranges are IANA's special-purpose registries
 * (RFC 6890 and its updates) for IPv4 and IPv6. */
#include "netaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct v4_range {
  uint32_t net;
  int bits;
  const char *why;
};

static const struct v4_range v4_special[] = {
    {0x00000000, 8, "this network (0.0.0.0/8)"},
    {0x0a000000, 8, "private (10.0.0.0/8)"},
    {0x64400000, 10, "shared address space (100.64.0.0/10)"},
    {0x7f000000, 8, "loopback (127.0.0.0/8)"},
    {0xa9fe0000, 16, "link-local (169.254.0.0/16, cloud metadata)"},
    {0xac100000, 12, "private (172.16.0.0/12)"},
    {0xc0000000, 24, "IETF protocol assignments (192.0.0.0/24)"},
    {0xc0000200, 24, "documentation (192.0.2.0/24)"},
    {0xc0586300, 24, "6to4 relay anycast (192.88.99.0/24)"},
    {0xc0a80000, 16, "private (192.168.0.0/16)"},
    {0xc6120000, 15, "benchmarking (198.18.0.0/15)"},
    {0xc6336400, 24, "documentation (198.51.100.0/24)"},
    {0xcb007100, 24, "documentation (203.0.113.0/24)"},
    {0xe0000000, 4, "multicast (224.0.0.0/4)"},
    {0xf0000000, 4, "reserved (240.0.0.0/4)"},
};

static bool v4_public(uint32_t a, const char **why) {
  for (size_t i = 0; i < sizeof v4_special / sizeof v4_special[0]; i++) {
    uint32_t mask = v4_special[i].bits == 0 ? 0 : 0xffffffffu << (32 - v4_special[i].bits);
    if ((a & mask) == v4_special[i].net) {
      *why = v4_special[i].why;
      return false;
    }
  }
  return true;
}

static uint32_t v4_at(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static bool prefix(const uint8_t *a, const uint8_t *p, int bits) {
  int bytes = bits / 8, rest = bits % 8;
  if (memcmp(a, p, (size_t)bytes) != 0)
    return false;
  return rest == 0 || ((a[bytes] ^ p[bytes]) & (0xff << (8 - rest))) == 0;
}

static bool v6_public(const uint8_t *a, const char **why) {
  static const uint8_t zero[16] = {0};
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  static const uint8_t nat64[12] = {0x00, 0x64, 0xff, 0x9b};
  static const uint8_t six_to_four[2] = {0x20, 0x02};
  if (memcmp(a, zero, 15) == 0 && (a[15] == 0 || a[15] == 1)) {
    *why = a[15] == 1 ? "loopback (::1)" : "unspecified (::)";
    return false;
  }
  /* IPv4 carried in IPv6: judged as that IPv4 address. */
  if (memcmp(a, mapped, 12) == 0 || memcmp(a, zero, 12) == 0 || memcmp(a, nat64, 12) == 0)
    return v4_public(v4_at(a + 12), why);
  if (memcmp(a, six_to_four, 2) == 0)
    return v4_public(v4_at(a + 2), why);
  static const struct {
    uint8_t net[16];
    int bits;
    const char *why;
  } special[] = {
      {{0x01, 0x00}, 64, "discard-only (100::/64)"},
      {{0x20, 0x01, 0x00, 0x00}, 32, "Teredo (2001::/32)"},
      {{0x20, 0x01, 0x00, 0x20}, 28, "ORCHIDv2 (2001:20::/28)"},
      {{0x20, 0x01, 0x0d, 0xb8}, 32, "documentation (2001:db8::/32)"},
      {{0xfc, 0x00}, 7, "unique local (fc00::/7)"},
      {{0xfe, 0x80}, 10, "link-local (fe80::/10)"},
      {{0xfe, 0xc0}, 10, "site-local (fec0::/10)"},
      {{0xff, 0x00}, 8, "multicast (ff00::/8)"},
  };
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
    if (prefix(a, special[i].net, special[i].bits)) {
      *why = special[i].why;
      return false;
    }
  /* Global unicast is 2000::/3; the rest is unassigned or reserved. */
  if ((a[0] & 0xe0) != 0x20) {
    *why = "not global unicast (outside 2000::/3)";
    return false;
  }
  return true;
}

bool netaddr_is_public(const struct sockaddr *sa, socklen_t len, const char **why) {
  const char *dummy;
  if (why == NULL)
    why = &dummy;
  *why = "not an IP address";
  if (sa == NULL)
    return false;
  if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
    return v4_public(ntohl(in->sin_addr.s_addr), why);
  }
  if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
    return v6_public(in6->sin6_addr.s6_addr, why);
  }
  return false;
}

void netaddr_format(const struct sockaddr *sa, socklen_t len, char *buf, size_t size) {
  if (size == 0)
    return;
  buf[0] = '\0';
  if (sa != NULL && sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in))
    inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)size);
  else if (sa != NULL && sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6))
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf, (socklen_t)size);
  else
    snprintf(buf, size, "(family %d)", sa != NULL ? sa->sa_family : -1);
}
