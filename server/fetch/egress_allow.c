/* egress_allow.c: see egress_allow.h. Reads at most EGRESS_ALLOW_ENTRY_MAX
 * + 1 bytes of an entry's text, at most 254 of a target's host and at most
 * EGRESS_ALLOW_MAX entries of a list; no allocation, no lookups. It must never let a name match
 * a CIDR entry or an address match a name entry, and never read one text
 * two ways: what is not a dotted-quad IPv4 address, an IPv6 address or a
 * plain DNS name is refused, not guessed at ("127.1", "0x7f.0.0.1" and
 * "2130706433" are addresses to getaddrinfo, so they are not names here). */
#include "egress_allow.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dns_name.h"

#define NAME_MAX_LEN DNS_NAME_TEXT_MAX /* a DNS name's text, without a trailing dot */

__attribute__((format(printf, 3, 4))) static int refuse(char *why, size_t whylen, const char *fmt,
                                                        ...) {
  if (why != NULL && whylen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* The entry's own text, quoted in a reason, is cut here: the caller quotes
 * the whole entry, and a reason fits 160 bytes. */
static int clip(size_t n) {
  return n < 40 ? (int)n : 40;
}

static const uint8_t v4_mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static char lower(char c) {
  return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

static bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

static bool is_hex(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f');
}

/* The last label is a number as getaddrinfo (inet_aton) or a browser would
 * read one: all digits, or 0x and hex digits. No real top-level domain is. */
static bool ends_in_number(const char *name, size_t n) {
  size_t start = n;
  while (start > 0 && name[start - 1] != '.')
    start--;
  const char *l = name + start;
  size_t ln = n - start;
  if (ln >= 2 && l[0] == '0' && l[1] == 'x') {
    for (size_t i = 2; i < ln; i++)
      if (!is_hex(l[i]))
        return false;
    return true;
  }
  for (size_t i = 0; i < ln; i++)
    if (!is_digit(l[i]))
      return false;
  return ln > 0;
}

/* A DNS name in lower case, n bytes: labels of 1-63 bytes of [a-z0-9_-],
 * not starting or ending with '-', 253 bytes in all, the last label not a
 * number. The charset is egress_head.c's host rule; '_' is allowed anywhere
 * in a label, as there. NULL when it is one, else why not. */
/* dns_name.h's rules (the name is lower case here), no trailing dot, and
 * a last label that is not a number (getaddrinfo would read an address). */
static const char *name_problem(const char *s, size_t n) {
  if (n > 0 && s[n - 1] == '.')
    return "a trailing dot (write the name without it)";
  const char *problem = dns_name_problem(s, n);
  if (problem != NULL)
    return problem;
  if (ends_in_number(s, n))
    return "neither an IPv4 address (four decimal numbers 0-255, no leading zeros) nor a DNS "
           "name (its last label is not a number)";
  return NULL;
}

/* Decimal, 1 to digits_max digits, no leading zero ("0" itself is), at
 * most max. 0, or -1 with *problem set. */
static int parse_number(const char *s, size_t n, unsigned max, size_t digits_max, unsigned *out,
                        const char **problem) {
  if (n == 0) {
    *problem = "empty";
    return -1;
  }
  for (size_t i = 0; i < n; i++)
    if (!is_digit(s[i])) {
      *problem = "not a decimal number";
      return -1;
    }
  if (n > 1 && s[0] == '0') {
    *problem = "a leading zero";
    return -1;
  }
  if (n > digits_max) {
    *problem = "out of range";
    return -1;
  }
  unsigned v = 0;
  for (size_t i = 0; i < n; i++)
    v = v * 10 + (unsigned)(s[i] - '0');
  if (v > max) {
    *problem = "out of range";
    return -1;
  }
  *out = v;
  return 0;
}

static int parse_port(const char *s, size_t n, uint16_t *port, char *why, size_t whylen) {
  unsigned v = 0;
  const char *problem = NULL;
  if (n == 0)
    return refuse(why, whylen, "':' without a port");
  if (parse_number(s, n, 65535, 5, &v, &problem) != 0 || v == 0) {
    if (problem != NULL && strcmp(problem, "a leading zero") == 0)
      return refuse(why, whylen, "port %.*s has a leading zero", clip(n), s);
    if (problem != NULL && strcmp(problem, "not a decimal number") == 0)
      return refuse(why, whylen, "port '%.*s' is not a decimal number", clip(n), s);
    return refuse(why, whylen, "port %.*s is out of range (1-65535)", clip(n), s);
  }
  *port = (uint16_t)v;
  return 0;
}

/* Whether the first bits of a and net agree. */
static bool prefix_match(const uint8_t *a, const uint8_t *net, unsigned bits) {
  unsigned bytes = bits / 8, rest = bits % 8;
  if (memcmp(a, net, bytes) != 0)
    return false;
  return rest == 0 || ((a[bytes] ^ net[bytes]) & (0xffu << (8 - rest)) & 0xffu) == 0;
}

static void mask_host_bits(uint8_t *a, size_t len, unsigned bits) {
  for (size_t i = 0; i < len; i++) {
    unsigned from = (unsigned)i * 8;
    if (bits <= from)
      a[i] = 0;
    else if (bits < from + 8)
      a[i] &= (uint8_t)(0xffu << (8 - (bits - from)));
  }
}

/* ":*" is any port (for a ceiling, mostly); else one port. */
static int parse_port_or_any(const char *s, size_t n, struct egress_allow_entry *e, char *why,
                             size_t whylen) {
  if (n == 1 && s[0] == '*') {
    e->any_port = true;
    return 0;
  }
  return parse_port(s, n, &e->port, why, whylen);
}

/* An address or CIDR (s, n bytes, no brackets, no port) into e. */
static int parse_cidr(const char *s, size_t n, struct egress_allow_entry *e, char *why,
                      size_t whylen) {
  const char *slash = memchr(s, '/', n);
  size_t an = slash != NULL ? (size_t)(slash - s) : n;
  char text[INET6_ADDRSTRLEN + 1];
  if (an == 0)
    return refuse(why, whylen, "no address before '/'");
  bool v6 = memchr(s, ':', an) != NULL;
  if (an >= sizeof text)
    return refuse(why, whylen, "'%.*s' is not an %s address", clip(an), s, v6 ? "IPv6" : "IPv4");
  memcpy(text, s, an);
  text[an] = '\0';
  e->family = v6 ? AF_INET6 : AF_INET;
  if (inet_pton(e->family, text, e->addr) != 1)
    return refuse(why, whylen, "'%s' is not an %s", text,
                  v6 ? "IPv6 address"
                     : "IPv4 address (four decimal numbers 0-255, no leading zeros)");
  unsigned max = v6 ? 128 : 32;
  size_t alen = v6 ? 16 : 4;
  e->prefix = max;
  if (slash != NULL) {
    const char *p = slash + 1;
    size_t pn = n - an - 1;
    const char *problem = NULL;
    unsigned v = 0;
    if (pn == 0)
      return refuse(why, whylen, "'/' without a prefix length");
    if (parse_number(p, pn, 999, 3, &v, &problem) != 0) {
      if (strcmp(problem, "a leading zero") == 0)
        return refuse(why, whylen, "CIDR prefix /%.*s has a leading zero", clip(pn), p);
      if (strcmp(problem, "not a decimal number") == 0 && memchr(p, ':', pn) != NULL)
        return refuse(why, whylen,
                      "CIDR prefix '%.*s' is not a number (an IPv6 CIDR with a port goes in "
                      "brackets: [2001:db8::/32]:443)",
                      clip(pn), p);
      if (strcmp(problem, "not a decimal number") == 0)
        return refuse(why, whylen, "CIDR prefix '%.*s' is not a number", clip(pn), p);
      return refuse(why, whylen, "CIDR prefix /%.*s is longer than %u", clip(pn), p, max);
    }
    if (v > max)
      return refuse(why, whylen, "CIDR prefix /%u is longer than %u", v, max);
    e->prefix = v;
  }
  /* One spelling per address: an IPv4 address is written as IPv4, and is
   * matched as IPv4 when it comes as an IPv4-mapped socket address. */
  if (v6 && e->prefix >= 96 && memcmp(e->addr, v4_mapped, 12) == 0) {
    char v4[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, e->addr + 12, v4, sizeof v4);
    if (e->prefix == 128)
      return refuse(why, whylen, "%s is an IPv4-mapped address: write the IPv4 address %s", text,
                    v4);
    return refuse(why, whylen, "%s/%u is IPv4-mapped: write the IPv4 CIDR %s/%u", text, e->prefix,
                  v4, e->prefix - 96);
  }
  uint8_t net[16];
  memcpy(net, e->addr, sizeof net);
  mask_host_bits(net, alen, e->prefix);
  if (memcmp(net, e->addr, alen) != 0) {
    char nettext[INET6_ADDRSTRLEN];
    inet_ntop(e->family, net, nettext, sizeof nettext);
    return refuse(why, whylen, "%s/%u: host bits set; did you mean %s/%u?", text, e->prefix,
                  nettext, e->prefix);
  }
  e->kind = EGRESS_ALLOW_CIDR;
  return 0;
}

static int refuse_star(char *why, size_t whylen) {
  return refuse(why, whylen,
                "'*' only as the whole first label (*.example.com) or as the whole entry");
}

/* A name entry (s, n bytes, no port): "*", "*.domain" or a host name. */
static int parse_name(const char *s, size_t n, struct egress_allow_entry *e, char *why,
                      size_t whylen) {
  char low[EGRESS_ALLOW_ENTRY_MAX + 1];
  for (size_t i = 0; i < n; i++)
    low[i] = lower(s[i]);
  low[n] = '\0';
  if (n == 1 && low[0] == '*') {
    e->kind = EGRESS_ALLOW_ANY;
    return 0;
  }
  const char *name = low;
  size_t nn = n;
  e->kind = EGRESS_ALLOW_HOST;
  if (n >= 2 && low[0] == '*' && low[1] == '.') {
    e->kind = EGRESS_ALLOW_DOMAIN;
    name = low + 2;
    nn = n - 2;
    if (nn == 0)
      return refuse(why, whylen, "'*.' without a domain after it");
  }
  if (memchr(name, '*', nn) != NULL)
    return refuse_star(why, whylen);
  const char *problem = name_problem(name, nn);
  if (problem != NULL)
    return refuse(why, whylen, "%s", problem);
  /* "*." and the domain are one name too: a name below the domain needs
   * room for a label of its own. */
  if (n > NAME_MAX_LEN)
    return refuse(why, whylen, "a name below the domain would be longer than 253 bytes");
  memcpy(e->name, name, nn + 1);
  return 0;
}

int egress_allow_parse(const char *text, struct egress_allow_entry *out, char *why, size_t whylen) {
  if (text == NULL || out == NULL)
    return refuse(why, whylen, "no entry");
  size_t n = strnlen(text, EGRESS_ALLOW_ENTRY_MAX + 1);
  if (n > EGRESS_ALLOW_ENTRY_MAX)
    return refuse(why, whylen, "longer than %d bytes", EGRESS_ALLOW_ENTRY_MAX);
  if (n == 0)
    return refuse(why, whylen, "an empty entry");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)text[i];
    if (c == ' ' || c == '\t')
      return refuse(why, whylen, "a space (an entry has none)");
    if (c < 0x21 || c > 0x7e)
      return refuse(why, whylen, "byte 0x%02x (an entry is printable ASCII)", c);
  }
  struct egress_allow_entry e;
  memset(&e, 0, sizeof e);
  const char *host = text;
  size_t hn = n;
  int rc;
  if (text[0] == '[') {
    const char *close = memchr(text, ']', n);
    if (close == NULL)
      return refuse(why, whylen, "'[' without ']'");
    host = text + 1;
    hn = (size_t)(close - host);
    size_t rest = n - hn - 2;
    if (rest > 0) {
      if (close[1] != ':')
        return refuse(why, whylen, "after ']' only ':' and a port");
      if (parse_port_or_any(close + 2, rest - 1, &e, why, whylen) != 0)
        return -1;
    }
    if (hn == 0)
      return refuse(why, whylen, "empty brackets");
    if (memchr(host, ':', hn) == NULL)
      return refuse(why, whylen, "brackets only around an IPv6 address or CIDR, not '%.*s'",
                    clip(hn), host);
    rc = parse_cidr(host, hn, &e, why, whylen);
  } else {
    /* One ':' is a port's. More are an IPv6 address's, never split on the
     * last: "2001:db8::1:443" is an address (a port needs brackets). */
    const char *colon = memchr(text, ':', n);
    if (colon != NULL && memchr(colon + 1, ':', n - (size_t)(colon + 1 - text)) == NULL) {
      hn = (size_t)(colon - text);
      if (hn == 0)
        return refuse(why, whylen, "no host before ':'");
      if (parse_port_or_any(colon + 1, n - hn - 1, &e, why, whylen) != 0)
        return -1;
    }
    bool number = true; /* only digits and dots: an IPv4 address or nothing */
    for (size_t i = 0; i < hn && number; i++)
      number = is_digit(host[i]) || host[i] == '.';
    if (number || memchr(host, ':', hn) != NULL || memchr(host, '/', hn) != NULL)
      rc = parse_cidr(host, hn, &e, why, whylen);
    else
      rc = parse_name(host, hn, &e, why, whylen);
  }
  if (rc != 0)
    return -1;
  *out = e;
  return 0;
}

static unsigned family_bits(int family) {
  return family == AF_INET ? 32 : family == AF_INET6 ? 128 : 0;
}

void egress_allow_format(const struct egress_allow_entry *e, char *out, size_t outlen) {
  if (out == NULL || outlen == 0)
    return;
  out[0] = '\0';
  if (e == NULL)
    return;
  char port[8] = "";
  if (e->any_port)
    snprintf(port, sizeof port, ":*");
  else if (e->port != 0)
    snprintf(port, sizeof port, ":%u", (unsigned)e->port);
  int nl = (int)strnlen(e->name, sizeof e->name - 1);
  switch (e->kind) {
  case EGRESS_ALLOW_HOST:
    snprintf(out, outlen, "%.*s%s", nl, e->name, port);
    return;
  case EGRESS_ALLOW_DOMAIN:
    snprintf(out, outlen, "*.%.*s%s", nl, e->name, port);
    return;
  case EGRESS_ALLOW_ANY:
    snprintf(out, outlen, "*%s", port);
    return;
  case EGRESS_ALLOW_CIDR:
    break;
  }
  unsigned max = family_bits(e->family);
  char addr[INET6_ADDRSTRLEN] = "?";
  if (max > 0)
    inet_ntop(e->family, e->addr, addr, sizeof addr);
  char bits[8] = "";
  if (e->prefix != max)
    snprintf(bits, sizeof bits, "/%u", e->prefix);
  if (e->family == AF_INET6 && (e->port != 0 || e->any_port))
    snprintf(out, outlen, "[%s%s]%s", addr, bits, port);
  else
    snprintf(out, outlen, "%s%s%s", addr, bits, port);
}

/* Ports: 0 stands for {80, 443}; any_port for all of them. */
static bool ports_within(const struct egress_allow_entry *entry,
                         const struct egress_allow_entry *ceiling) {
  if (ceiling->any_port)
    return true;
  if (entry->any_port)
    return false;
  if (ceiling->port == 0)
    return entry->port == 0 || entry->port == 80 || entry->port == 443;
  return entry->port == ceiling->port;
}

static bool port_allowed(const struct egress_allow_entry *e, uint16_t port) {
  if (e->any_port)
    return true;
  return e->port == 0 ? port == 80 || port == 443 : port == e->port;
}

static bool name_equal(const char *a, const char *b) {
  return strncmp(a, b, NAME_MAX_LEN + 1) == 0;
}

/* name ends in "." domain: a name strictly below the domain. */
static bool name_below(const char *name, const char *domain) {
  size_t n = strnlen(name, NAME_MAX_LEN + 1), d = strnlen(domain, NAME_MAX_LEN + 1);
  return n > d + 1 && name[n - d - 1] == '.' && memcmp(name + n - d, domain, d) == 0;
}

static bool cidr_contains(const struct egress_allow_entry *c, int family, const uint8_t *addr,
                          unsigned bits) {
  unsigned max = family_bits(c->family);
  return c->kind == EGRESS_ALLOW_CIDR && c->family == family && max > 0 && c->prefix <= max &&
         c->prefix <= bits && prefix_match(addr, c->addr, c->prefix);
}

bool egress_allow_entry_within(const struct egress_allow_entry *entry,
                               const struct egress_allow_entry *ceiling) {
  if (entry == NULL || ceiling == NULL || !ports_within(entry, ceiling))
    return false;
  switch (entry->kind) {
  case EGRESS_ALLOW_HOST:
    return ceiling->kind == EGRESS_ALLOW_ANY ||
           (ceiling->kind == EGRESS_ALLOW_HOST && name_equal(entry->name, ceiling->name)) ||
           (ceiling->kind == EGRESS_ALLOW_DOMAIN && name_below(entry->name, ceiling->name));
  case EGRESS_ALLOW_DOMAIN:
    return ceiling->kind == EGRESS_ALLOW_ANY ||
           (ceiling->kind == EGRESS_ALLOW_DOMAIN &&
            (name_equal(entry->name, ceiling->name) || name_below(entry->name, ceiling->name)));
  case EGRESS_ALLOW_ANY:
    return ceiling->kind == EGRESS_ALLOW_ANY;
  case EGRESS_ALLOW_CIDR:
    return family_bits(entry->family) > 0 && entry->prefix <= family_bits(entry->family) &&
           cidr_contains(ceiling, entry->family, entry->addr, entry->prefix);
  }
  return false;
}

/* A list's entries, never more than its array holds. */
static size_t list_len(const struct egress_allow *list) {
  return list->n < EGRESS_ALLOW_MAX ? list->n : EGRESS_ALLOW_MAX;
}

bool egress_allow_within(const struct egress_allow_entry *entry, const struct egress_allow *list) {
  if (entry == NULL || list == NULL)
    return false;
  for (size_t i = 0; i < list_len(list); i++)
    if (egress_allow_entry_within(entry, &list->e[i]))
      return true;
  return false;
}

static bool address_allowed(const struct egress_allow *list, int family, const uint8_t *addr,
                            uint16_t port) {
  for (size_t i = 0; i < list_len(list); i++)
    if (port_allowed(&list->e[i], port) &&
        cidr_contains(&list->e[i], family, addr, family_bits(family)))
      return true;
  return false;
}

/* An IPv6 address that carries an IPv4 one (::ffff:a.b.c.d) is that IPv4
 * address: the kernel connects to it over IPv4. */
static int unmap(uint8_t *addr) {
  if (memcmp(addr, v4_mapped, sizeof v4_mapped) != 0)
    return AF_INET6;
  memmove(addr, addr + 12, 4);
  return AF_INET;
}

bool egress_allow_target(const struct egress_allow *list, const char *host, uint16_t port) {
  if (list == NULL || host == NULL || port == 0)
    return false;
  size_t n = strnlen(host, NAME_MAX_LEN + 1);
  if (n == 0 || n > NAME_MAX_LEN)
    return false;
  uint8_t addr[16];
  if (memchr(host, ':', n) != NULL) {
    if (inet_pton(AF_INET6, host, addr) != 1)
      return false;
    return address_allowed(list, unmap(addr), addr, port);
  }
  if (inet_pton(AF_INET, host, addr) == 1)
    return address_allowed(list, AF_INET, addr, port);
  char name[NAME_MAX_LEN + 1];
  for (size_t i = 0; i < n; i++)
    name[i] = lower(host[i]);
  name[n] = '\0';
  if (name_problem(name, n) != NULL)
    return false;
  for (size_t i = 0; i < list_len(list); i++) {
    const struct egress_allow_entry *e = &list->e[i];
    if (!port_allowed(e, port))
      continue;
    if (e->kind == EGRESS_ALLOW_ANY ||
        (e->kind == EGRESS_ALLOW_HOST && name_equal(name, e->name)) ||
        (e->kind == EGRESS_ALLOW_DOMAIN && name_below(name, e->name)))
      return true;
  }
  return false;
}

bool egress_allow_address(const struct egress_allow *list, const struct sockaddr *sa,
                          socklen_t salen, uint16_t port) {
  if (list == NULL || sa == NULL || port == 0 || salen < (socklen_t)sizeof(sa_family_t))
    return false;
  uint8_t addr[16];
  if (sa->sa_family == AF_INET && salen >= (socklen_t)sizeof(struct sockaddr_in)) {
    memcpy(addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    return address_allowed(list, AF_INET, addr, port);
  }
  if (sa->sa_family == AF_INET6 && salen >= (socklen_t)sizeof(struct sockaddr_in6)) {
    memcpy(addr, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
    return address_allowed(list, unmap(addr), addr, port);
  }
  return false;
}
