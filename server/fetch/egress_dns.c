/* egress_dns.c: see egress_dns.h. With a configured server: one UDP socket
 * of its own per resolution, connected to the server (the kernel drops
 * datagrams from anyone else), an A and an AAAA query sent together and
 * resent once at half the time limit, answers parsed with libresolv's
 * ns_initparse/ns_parserr (never by hand). No resolver state is shared
 * (no res_init, no _res): many tunnels resolve at once. The queries are
 * built here, they are a header and one question; the name was checked to
 * be a plain DNS name first, so nothing in it is read as an escape.
 *
 * What the server says is trusted as far as names go (the operator chose
 * it), but not as far as bytes go: a reply with another id, another
 * question, or one that does not parse is ignored, and only A and AAAA
 * records of the answer section count, for the name asked or a name its
 * CNAME records in the same answer lead to. Every address is checked by
 * the caller (egress.c) before one is dialled. When one family's answer
 * gave addresses and the other's did not come, failed or was truncated,
 * the addresses are the answer; IPv4 ones first. */
#include "egress_dns.h"

#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <unistd.h>

#include "cleanup.h"
#include "clock.h"
#include "dns_name.h"

#define DNS_HEADER 12

#define QUERY_MAX (DNS_HEADER + DNS_NAME_TEXT_MAX + 2 + 4)
#define REPLY_MAX 4096 /* a UDP reply without EDNS has at most 512 */
#define CHAIN_MAX 8    /* names a CNAME chain may pass through */

__attribute__((format(printf, 3, 4))) static int fail(char *why, size_t whylen, const char *fmt,
                                                      ...) {
  if (why != NULL && whylen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* 1 to 5 digits, 1-65535. */
static bool parse_port(const char *s, uint16_t *port) {
  size_t n = strlen(s);
  if (n == 0 || n > 5)
    return false;
  unsigned v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return false;
    v = v * 10 + (unsigned)(s[i] - '0');
  }
  if (v == 0 || v > 65535)
    return false;
  *port = (uint16_t)v;
  return true;
}

int egress_dns_parse(const char *text, struct egress_dns *out, char *why, size_t whylen) {
  memset(out, 0, sizeof *out);
  if (text == NULL || text[0] == '\0')
    return 0;
  char addr[64];
  const char *port_text = NULL;
  if (text[0] == '[') {
    const char *close = strchr(text, ']');
    if (close == NULL || (size_t)(close - text - 1) >= sizeof addr)
      return fail(why, whylen, "--egress-dns %s: an IPv6 address in brackets, [::1]:53", text);
    memcpy(addr, text + 1, (size_t)(close - text - 1));
    addr[close - text - 1] = '\0';
    if (close[1] == ':')
      port_text = close + 2;
    else if (close[1] != '\0')
      return fail(why, whylen, "--egress-dns %s: after ']' only :PORT", text);
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&out->server;
    if (inet_pton(AF_INET6, addr, &a6->sin6_addr) != 1)
      return fail(why, whylen, "--egress-dns %s: %s is not an IPv6 address", text, addr);
    a6->sin6_family = AF_INET6;
    out->server_len = sizeof *a6;
  } else {
    const char *colon = strchr(text, ':');
    if (colon != NULL && strchr(colon + 1, ':') != NULL)
      return fail(why, whylen, "--egress-dns %s: an IPv6 address goes in brackets ([::1]:53)",
                  text);
    size_t n = colon != NULL ? (size_t)(colon - text) : strlen(text);
    if (n >= sizeof addr)
      return fail(why, whylen, "--egress-dns %s: not an IP address", text);
    memcpy(addr, text, n);
    addr[n] = '\0';
    if (colon != NULL)
      port_text = colon + 1;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&out->server;
    if (inet_pton(AF_INET, addr, &a4->sin_addr) != 1)
      return fail(why, whylen,
                  "--egress-dns %s: %s is not an IP address (the DNS server is given by its "
                  "address: no resolver would resolve its name)",
                  text, addr);
    a4->sin_family = AF_INET;
    out->server_len = sizeof *a4;
  }
  uint16_t port = 53;
  if (port_text != NULL && !parse_port(port_text, &port)) {
    out->server_len = 0;
    return fail(why, whylen, "--egress-dns %s: port %s is not 1-65535", text, port_text);
  }
  if (out->server.ss_family == AF_INET6)
    ((struct sockaddr_in6 *)&out->server)->sin6_port = htons(port);
  else
    ((struct sockaddr_in *)&out->server)->sin_port = htons(port);
  return 0;
}

/* "127.0.0.1:53", "[::1]:53": the server, for messages. */
static void server_text(const struct egress_dns *dns, char *buf, size_t size) {
  char a[INET6_ADDRSTRLEN] = "?";
  unsigned port = 0;
  if (dns->server.ss_family == AF_INET6) {
    const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&dns->server;
    inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof a);
    port = ntohs(s->sin6_port);
    snprintf(buf, size, "[%s]:%u", a, port);
  } else {
    const struct sockaddr_in *s = (const struct sockaddr_in *)&dns->server;
    inet_ntop(AF_INET, &s->sin_addr, a, sizeof a);
    port = ntohs(s->sin_port);
    snprintf(buf, size, "%s:%u", a, port);
  }
}

static void add_v4(struct egress_addresses *out, const void *addr, uint16_t port) {
  if (out->n >= EGRESS_DNS_MAX_ADDRESSES)
    return;
  struct sockaddr_in *s = (struct sockaddr_in *)&out->a[out->n];
  memset(&out->a[out->n], 0, sizeof out->a[out->n]);
  s->sin_family = AF_INET;
  s->sin_port = htons(port);
  memcpy(&s->sin_addr, addr, 4);
  out->len[out->n++] = sizeof *s;
}

static void add_v6(struct egress_addresses *out, const void *addr, uint16_t port) {
  if (out->n >= EGRESS_DNS_MAX_ADDRESSES)
    return;
  struct sockaddr_in6 *s = (struct sockaddr_in6 *)&out->a[out->n];
  memset(&out->a[out->n], 0, sizeof out->a[out->n]);
  s->sin6_family = AF_INET6;
  s->sin6_port = htons(port);
  memcpy(&s->sin6_addr, addr, 16);
  out->len[out->n++] = sizeof *s;
}

/* An IP literal: itself. */
static bool literal(const char *host, uint16_t port, struct egress_addresses *out) {
  unsigned char a[16];
  if (inet_pton(AF_INET, host, a) == 1) {
    add_v4(out, a, port);
    return true;
  }
  if (inet_pton(AF_INET6, host, a) == 1) {
    add_v6(out, a, port);
    return true;
  }
  return false;
}

static int resolve_system(const char *host, uint16_t port, struct egress_addresses *out, char *why,
                          size_t whylen) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc == EAI_NONAME || rc == EAI_NODATA)
    return fail(why, whylen, "no such name %s", host);
  if (rc != 0)
    return fail(why, whylen, "cannot resolve %s: %s", host,
                rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
  for (const struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
    if (ai->ai_family == AF_INET && ai->ai_addrlen >= sizeof(struct sockaddr_in))
      add_v4(out, &((const struct sockaddr_in *)ai->ai_addr)->sin_addr, port);
    else if (ai->ai_family == AF_INET6 && ai->ai_addrlen >= sizeof(struct sockaddr_in6))
      add_v6(out, &((const struct sockaddr_in6 *)ai->ai_addr)->sin6_addr, port);
  }
  freeaddrinfo(res);
  if (out->n == 0)
    return fail(why, whylen, "no address for %s", host);
  return 0;
}

/* A name as a sandboxed program may ask for one (dns_name.h), with one
 * trailing dot allowed. */
static bool dns_name_ok(const char *s) {
  size_t n = strlen(s);
  if (n > 0 && s[n - 1] == '.')
    n--;
  return dns_name_problem(s, n) == NULL;
}

/* A query: header (id, RD), one question (host, type, IN). */
static size_t build_query(const char *host, uint16_t id, uint16_t type, uint8_t *q) {
  memset(q, 0, DNS_HEADER);
  q[0] = (uint8_t)(id >> 8);
  q[1] = (uint8_t)id;
  q[2] = 0x01; /* RD */
  q[5] = 1;    /* QDCOUNT */
  size_t o = DNS_HEADER;
  const char *label = host;
  while (*label != '\0') {
    const char *dot = strchr(label, '.');
    size_t n = dot != NULL ? (size_t)(dot - label) : strlen(label);
    q[o++] = (uint8_t)n;
    memcpy(q + o, label, n);
    o += n;
    label += n;
    if (*label == '.')
      label++;
  }
  q[o++] = 0;
  q[o++] = (uint8_t)(type >> 8);
  q[o++] = (uint8_t)type;
  q[o++] = 0;
  q[o++] = ns_c_in;
  return o;
}

struct query {
  uint16_t id, type;
  uint8_t bytes[QUERY_MAX];
  size_t len;
  bool answered;
  int rcode;
  bool truncated;
  /* The addresses it gave. */
  size_t n;
  uint8_t addr[EGRESS_DNS_MAX_ADDRESSES][16];
};

/* Two names in presentation form, the same but for case and a trailing dot
 * (ns_samename is deprecated in glibc). A name with an escape (\.) never
 * equals one of ours, which have none. */
static bool same_name(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  if (na > 0 && a[na - 1] == '.')
    na--;
  if (nb > 0 && b[nb - 1] == '.')
    nb--;
  return na == nb && strncasecmp(a, b, na) == 0;
}

/* Whether name is one of the chain's names. */
static bool in_chain(char chain[][NS_MAXDNAME], size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (same_name(chain[i], name))
      return true;
  return false;
}

/* Reads the answer's records into q: CNAMEs from host first (the chain),
 * then the A or AAAA records of a name on it. */
static void take_answers(ns_msg *msg, const char *host, struct query *q) {
  char chain[CHAIN_MAX][NS_MAXDNAME];
  size_t n_chain = 1;
  snprintf(chain[0], sizeof chain[0], "%s", host);
  int count = ns_msg_count(*msg, ns_s_an);
  ns_rr rr;
  /* Each pass adds at least one name, or stops: at most CHAIN_MAX. */
  for (bool grew = true; grew && n_chain < CHAIN_MAX;) {
    grew = false;
    for (int i = 0; i < count && n_chain < CHAIN_MAX; i++) {
      if (ns_parserr(msg, ns_s_an, i, &rr) < 0 || ns_rr_type(rr) != ns_t_cname ||
          ns_rr_class(rr) != ns_c_in || !in_chain(chain, n_chain, ns_rr_name(rr)))
        continue;
      char target[NS_MAXDNAME];
      if (ns_name_uncompress(ns_msg_base(*msg), ns_msg_end(*msg), ns_rr_rdata(rr), target,
                             sizeof target) < 0 ||
          in_chain(chain, n_chain, target))
        continue;
      snprintf(chain[n_chain++], sizeof chain[0], "%s", target);
      grew = true;
    }
  }
  size_t want = q->type == ns_t_a ? 4 : 16;
  for (int i = 0; i < count && q->n < EGRESS_DNS_MAX_ADDRESSES; i++) {
    if (ns_parserr(msg, ns_s_an, i, &rr) < 0)
      return;
    if (ns_rr_type(rr) != q->type || ns_rr_class(rr) != ns_c_in || ns_rr_rdlen(rr) != want ||
        !in_chain(chain, n_chain, ns_rr_name(rr)))
      continue;
    memcpy(q->addr[q->n++], ns_rr_rdata(rr), want);
  }
}

/* One datagram from the server: the answer to one of the queries, or
 * ignored (another id, not a response, another question, not parsed). */
static void take_reply(const uint8_t *buf, size_t len, const char *host, struct query *qs,
                       size_t n_qs) {
  ns_msg msg;
  if (ns_initparse(buf, (int)len, &msg) < 0)
    return;
  struct query *q = NULL;
  for (size_t i = 0; i < n_qs; i++)
    if (!qs[i].answered && qs[i].id == ns_msg_id(msg))
      q = &qs[i];
  if (q == NULL || !ns_msg_getflag(msg, ns_f_qr) || ns_msg_getflag(msg, ns_f_opcode) != 0)
    return;
  ns_rr rr;
  if (ns_msg_count(msg, ns_s_qd) != 1 || ns_parserr(&msg, ns_s_qd, 0, &rr) < 0 ||
      ns_rr_type(rr) != q->type || ns_rr_class(rr) != ns_c_in || !same_name(ns_rr_name(rr), host))
    return;
  q->answered = true;
  q->rcode = ns_msg_getflag(msg, ns_f_rcode);
  q->truncated = ns_msg_getflag(msg, ns_f_tc) != 0;
  if (q->rcode == ns_r_noerror && !q->truncated)
    take_answers(&msg, host, q);
}

static const char *rcode_name(int rcode) {
  switch (rcode) {
  case ns_r_formerr:
    return "FORMERR";
  case ns_r_servfail:
    return "SERVFAIL";
  case ns_r_nxdomain:
    return "NXDOMAIN";
  case ns_r_notimpl:
    return "NOTIMP";
  case ns_r_refused:
    return "REFUSED";
  default:
    return "an error";
  }
}

static int resolve_server(const struct egress_dns *dns, const char *host, uint16_t port,
                          struct egress_addresses *out, char *why, size_t whylen) {
  char server[80];
  server_text(dns, server, sizeof server);
  if (!dns_name_ok(host))
    return fail(why, whylen, "cannot resolve %s: not a DNS name", host);
  int timeout = dns->timeout_ms > 0 ? dns->timeout_ms : EGRESS_DNS_TIMEOUT_MS;
  struct query qs[2] = {{.type = ns_t_a}, {.type = ns_t_aaaa}};
  uint16_t ids[2];
  if (getrandom(ids, sizeof ids, 0) != (ssize_t)sizeof ids)
    return fail(why, whylen, "cannot resolve %s: getrandom: %s", host, strerror(errno));
  if (ids[1] == ids[0])
    ids[1] ^= 1;
  for (size_t i = 0; i < 2; i++) {
    qs[i].id = ids[i];
    qs[i].len = build_query(host, ids[i], qs[i].type, qs[i].bytes);
  }
  cleanup_close int fd =
      socket(dns->server.ss_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return fail(why, whylen, "cannot resolve %s: socket: %s", host, strerror(errno));
  if (connect(fd, (const struct sockaddr *)&dns->server, dns->server_len) < 0)
    return fail(why, whylen, "cannot resolve %s: the DNS server %s: %s", host, server,
                strerror(errno));
  uint64_t start = sbx_monotonic_ms(), deadline = start + (uint64_t)timeout;
  uint64_t resend = start + (uint64_t)timeout / 2;
  bool resent = false;
  for (size_t i = 0; i < 2; i++)
    if (send(fd, qs[i].bytes, qs[i].len, 0) < 0)
      return fail(why, whylen, "cannot resolve %s: the DNS server %s: %s", host, server,
                  strerror(errno));
  while (!qs[0].answered || !qs[1].answered) {
    uint64_t now = sbx_monotonic_ms();
    if (now >= deadline)
      break;
    if (!resent && now >= resend) {
      resent = true;
      for (size_t i = 0; i < 2; i++)
        if (!qs[i].answered)
          (void)send(fd, qs[i].bytes, qs[i].len, 0); /* a lost resend is a timeout */
    }
    uint64_t until = resent ? deadline : resend;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int rc = poll(&p, 1, (int)(until - now));
    if (rc < 0 && errno != EINTR)
      return fail(why, whylen, "cannot resolve %s: poll: %s", host, strerror(errno));
    if (rc <= 0)
      continue;
    uint8_t buf[REPLY_MAX];
    ssize_t got = recv(fd, buf, sizeof buf, 0);
    if (got < 0 && errno == ECONNREFUSED)
      return fail(why, whylen, "cannot resolve %s: the DNS server %s refused (nothing listens)",
                  host, server);
    if (got > 0)
      take_reply(buf, (size_t)got, host, qs, 2);
  }
  for (size_t i = 0; i < 2; i++)
    for (size_t k = 0; k < qs[i].n; k++)
      (qs[i].type == ns_t_a ? add_v4 : add_v6)(out, qs[i].addr[k], port);
  if (out->n > 0)
    return 0;
  if (qs[0].rcode == ns_r_nxdomain || qs[1].rcode == ns_r_nxdomain)
    return fail(why, whylen, "no such name %s", host);
  for (size_t i = 0; i < 2; i++) {
    if (!qs[i].answered)
      return fail(why, whylen, "cannot resolve %s: the DNS server %s did not answer within %d ms",
                  host, server, timeout);
    if (qs[i].truncated)
      return fail(why, whylen,
                  "cannot resolve %s: the DNS server %s sent a truncated answer (TC; DNS over TCP "
                  "is not supported)",
                  host, server);
    if (qs[i].rcode != ns_r_noerror)
      return fail(why, whylen, "cannot resolve %s: the DNS server %s answered %s (rcode %d)", host,
                  server, rcode_name(qs[i].rcode), qs[i].rcode);
  }
  return fail(why, whylen, "no address for %s (no A or AAAA record)", host);
}

int egress_dns_resolve(const struct egress_dns *dns, const char *host, uint16_t port,
                       struct egress_addresses *out, char *why, size_t whylen) {
  out->n = 0;
  if (why != NULL && whylen > 0)
    why[0] = '\0';
  if (literal(host, port, out))
    return 0;
  if (dns == NULL || dns->server_len == 0)
    return resolve_system(host, port, out, why, whylen);
  return resolve_server(dns, host, port, out, why, whylen);
}
