/* Unit tests: the egress proxy's resolver (egress_dns.c). --egress-dns
 * parsing; then resolution against a DNS responder this test runs itself
 * (a thread with a UDP socket on 127.0.0.1 that echoes the query's header
 * and question and appends canned answer records): A and AAAA together,
 * M_NXDOMAIN, M_SERVFAIL, a truncated answer, a server that never answers (a
 * short timeout_ms), a reply with the wrong id before the right one,
 * more answers than EGRESS_DNS_MAX_ADDRESSES, M_CNAME chains and records
 * off the chain, IP literals answered without a query, and many threads
 * resolving at once. */
#include <arpa/inet.h>
#include <arpa/nameser.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "egress_dns.h"

#define DNS_HEADER_LEN 12

/* ---- parsing ---- */

static void test_parse(void **state) {
  (void)state;
  struct egress_dns d;
  char why[256];
  assert_int_equal(egress_dns_parse("", &d, why, sizeof why), 0);
  assert_int_equal(d.server_len, 0);
  assert_int_equal(d.timeout_ms, 0);
  assert_int_equal(egress_dns_parse("127.0.0.1", &d, why, sizeof why), 0);
  const struct sockaddr_in *s4 = (const struct sockaddr_in *)&d.server;
  assert_int_equal(d.server_len, sizeof *s4);
  assert_int_equal(s4->sin_family, AF_INET);
  assert_int_equal(ntohs(s4->sin_port), 53);
  assert_int_equal(ntohl(s4->sin_addr.s_addr), 0x7f000001);
  assert_int_equal(egress_dns_parse("127.0.0.1:5353", &d, why, sizeof why), 0);
  assert_int_equal(ntohs(s4->sin_port), 5353);
  assert_int_equal(egress_dns_parse("10.0.0.1:65535", &d, why, sizeof why), 0);
  assert_int_equal(ntohs(s4->sin_port), 65535);
  const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&d.server;
  assert_int_equal(egress_dns_parse("[::1]:53", &d, why, sizeof why), 0);
  assert_int_equal(d.server_len, sizeof *s6);
  assert_int_equal(s6->sin6_family, AF_INET6);
  assert_int_equal(ntohs(s6->sin6_port), 53);
  assert_true(IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr));
  assert_int_equal(egress_dns_parse("[2001:db8::53]", &d, why, sizeof why), 0);
  assert_int_equal(ntohs(s6->sin6_port), 53);
  /* IPv6 without brackets: refused, with the way to write it. */
  assert_int_equal(egress_dns_parse("::1", &d, why, sizeof why), -1);
  assert_non_null(strstr(why, "brackets"));
  assert_int_equal(d.server_len, 0);
  /* A name: refused (which resolver would resolve it?). */
  assert_int_equal(egress_dns_parse("host.name", &d, why, sizeof why), -1);
  assert_non_null(strstr(why, "not an IP address"));
  const char *bad[] = {
      "localhost:53",     "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:", "127.0.0.1:5x",   "127.1",
      "1.2.3.4.5",        "[::1",        "[::1]x",          "[::1]:0",    "[127.0.0.1]:53", "[]:53",
      "127.0.0.1:123456", " 127.0.0.1",  "[fe80::1%lo]"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    why[0] = '\0';
    if (egress_dns_parse(bad[i], &d, why, sizeof why) != -1)
      fail_msg("--egress-dns \"%s\" taken", bad[i]);
    assert_true(why[0] != '\0');
    assert_int_equal(d.server_len, 0);
  }
  assert_int_equal(egress_dns_parse("127.0.0.1:0", &d, why, sizeof why), -1);
  assert_non_null(strstr(why, "1-65535"));
}

/* ---- the responder ---- */

enum mode {
  M_ANSWER,         /* example.test: A 10.0.0.1, 10.0.0.2; AAAA 2001:db8::1 */
  M_NXDOMAIN,       /* rcode 3 */
  M_SERVFAIL,       /* rcode 2 */
  M_SILENT,         /* never answers */
  M_WRONG_ID,       /* first a reply with another id (6.6.6.6), then the right one */
  M_MANY,           /* 20 A records, 3 AAAA */
  M_CNAME,          /* example.test M_CNAME b.test M_CNAME c.test; A on c.test; A off the chain */
  M_TRUNCATED,      /* TC set, no records */
  M_AAAA_SILENT,    /* answers A only */
  M_OTHER_QUESTION, /* first replies with the right id to another question */
};

struct responder {
  int fd;
  uint16_t port;
  _Atomic int mode;
  atomic_int queries;
  atomic_bool stop;
  pthread_t thread;
};

static struct responder rsp;

static size_t put_name(uint8_t *p, const char *name) {
  size_t o = 0;
  while (*name != '\0') {
    const char *dot = strchr(name, '.');
    size_t n = dot != NULL ? (size_t)(dot - name) : strlen(name);
    p[o++] = (uint8_t)n;
    memcpy(p + o, name, n);
    o += n;
    name += n + (dot != NULL);
  }
  p[o++] = 0;
  return o;
}

/* One record; owner NULL: a pointer to the question's name. */
static size_t put_rr(uint8_t *p, const char *owner, uint16_t type, const void *rdata,
                     size_t rdlen) {
  size_t o = 0;
  if (owner == NULL) {
    p[o++] = 0xc0;
    p[o++] = DNS_HEADER_LEN;
  } else {
    o += put_name(p, owner);
  }
  const uint8_t fixed[8] = {(uint8_t)(type >> 8), (uint8_t)type, 0, 1, 0, 0, 0, 60};
  memcpy(p + o, fixed, 8);
  o += 8;
  p[o++] = (uint8_t)(rdlen >> 8);
  p[o++] = (uint8_t)rdlen;
  memcpy(p + o, rdata, rdlen);
  return o + rdlen;
}

static size_t put_a(uint8_t *p, const char *owner, const char *text) {
  uint8_t a[4];
  inet_pton(AF_INET, text, a);
  return put_rr(p, owner, ns_t_a, a, 4);
}

static size_t put_aaaa(uint8_t *p, const char *owner, const char *text) {
  uint8_t a[16];
  inet_pton(AF_INET6, text, a);
  return put_rr(p, owner, ns_t_aaaa, a, 16);
}

/* The reply to query q (len bytes, one question) in mode m. */
static size_t reply(enum mode m, const uint8_t *q, size_t len, uint8_t *r) {
  memcpy(r, q, len);
  uint16_t qtype = (uint16_t)(q[len - 4] << 8 | q[len - 3]);
  r[2] = 0x81; /* QR, RD */
  r[3] = 0x80; /* RA */
  size_t o = len, an = 0;
  switch (m) {
  case M_NXDOMAIN:
    r[3] |= 3;
    break;
  case M_SERVFAIL:
    r[3] |= 2;
    break;
  case M_TRUNCATED:
    r[2] |= 0x02;
    break;
  case M_ANSWER:
  case M_WRONG_ID:
  case M_AAAA_SILENT:
  case M_OTHER_QUESTION:
    if (qtype == ns_t_a) {
      o += put_a(r + o, NULL, "10.0.0.1");
      an = 1;
      if (m != M_WRONG_ID) {
        o += put_a(r + o, NULL, "10.0.0.2");
        an = 2;
      }
    } else {
      o += put_aaaa(r + o, NULL, "2001:db8::1");
      an = 1;
    }
    break;
  case M_MANY:
    for (int i = 0; i < (qtype == ns_t_a ? 20 : 3); i++) {
      char text[64];
      if (qtype == ns_t_a)
        snprintf(text, sizeof text, "10.0.1.%d", i + 1);
      else
        snprintf(text, sizeof text, "2001:db8::%d", i + 1);
      o += qtype == ns_t_a ? put_a(r + o, NULL, text) : put_aaaa(r + o, NULL, text);
      an++;
    }
    break;
  case M_CNAME: {
    uint8_t target[64];
    o += put_a(r + o, "evil.test", "6.6.6.6"); /* off the chain */
    o += put_rr(r + o, "b.test", ns_t_cname, target, put_name(target, "c.test"));
    o += put_rr(r + o, NULL, ns_t_cname, target, put_name(target, "b.test"));
    o += put_rr(r + o, "c.test", ns_t_cname, target, put_name(target, "example.test")); /* loop */
    if (qtype == ns_t_a)
      o += put_a(r + o, "C.Test", "10.0.0.9");
    else
      o += put_aaaa(r + o, "c.test", "2001:db8::9");
    an = 5;
    break;
  }
  case M_SILENT:
    break;
  }
  r[6] = (uint8_t)(an >> 8);
  r[7] = (uint8_t)an;
  return o;
}

static void *responder_main(void *arg) {
  (void)arg;
  while (!atomic_load(&rsp.stop)) {
    struct pollfd p = {.fd = rsp.fd, .events = POLLIN};
    if (poll(&p, 1, 20) <= 0)
      continue;
    uint8_t q[512], r[2048];
    struct sockaddr_storage from;
    socklen_t fl = sizeof from;
    ssize_t n = recvfrom(rsp.fd, q, sizeof q, 0, (struct sockaddr *)&from, &fl);
    if (n < DNS_HEADER_LEN + 5)
      continue;
    atomic_fetch_add(&rsp.queries, 1);
    enum mode m = (enum mode)atomic_load(&rsp.mode);
    uint16_t qtype = (uint16_t)(q[n - 4] << 8 | q[n - 3]);
    if (m == M_SILENT || (m == M_AAAA_SILENT && qtype == ns_t_aaaa))
      continue;
    if (m == M_WRONG_ID) {
      /* The question with another id, and an address of its own. */
      uint8_t stray[512];
      memcpy(stray, q, (size_t)n);
      stray[1] ^= 0x5a;
      stray[2] = 0x81;
      stray[3] = 0x80;
      stray[7] = 1;
      size_t sl = (size_t)n + put_a(stray + n, NULL, "6.6.6.6");
      sendto(rsp.fd, stray, sl, 0, (struct sockaddr *)&from, fl);
    }
    if (m == M_OTHER_QUESTION) {
      /* The other type asked (no record), then another name (6.6.6.6). */
      uint8_t stray[512];
      memcpy(stray, q, (size_t)n);
      stray[2] = 0x81;
      stray[3] = 0x80;
      stray[n - 3] = (uint8_t)(qtype == ns_t_a ? ns_t_aaaa : ns_t_a);
      sendto(rsp.fd, stray, (size_t)n, 0, (struct sockaddr *)&from, fl);
      stray[n - 3] = (uint8_t)qtype;
      stray[DNS_HEADER_LEN + 3] = 'b'; /* example.test: exbmple.test */
      stray[7] = 1;
      size_t sl = (size_t)n + put_a(stray + n, NULL, "6.6.6.6");
      sendto(rsp.fd, stray, sl, 0, (struct sockaddr *)&from, fl);
    }
    size_t rl = reply(m, q, (size_t)n, r);
    sendto(rsp.fd, r, rl, 0, (struct sockaddr *)&from, fl);
  }
  return NULL;
}

static int responder_start(void **state) {
  (void)state;
  rsp.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  assert_true(rsp.fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(rsp.fd, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t al = sizeof a;
  assert_int_equal(getsockname(rsp.fd, (struct sockaddr *)&a, &al), 0);
  rsp.port = ntohs(a.sin_port);
  atomic_store(&rsp.stop, false);
  assert_int_equal(pthread_create(&rsp.thread, NULL, responder_main, NULL), 0);
  return 0;
}

static int responder_stop(void **state) {
  (void)state;
  atomic_store(&rsp.stop, true);
  pthread_join(rsp.thread, NULL);
  close(rsp.fd);
  return 0;
}

static struct egress_dns server(enum mode m, int timeout_ms) {
  struct egress_dns d;
  char text[64], why[256];
  snprintf(text, sizeof text, "127.0.0.1:%u", (unsigned)rsp.port);
  assert_int_equal(egress_dns_parse(text, &d, why, sizeof why), 0);
  d.timeout_ms = timeout_ms;
  atomic_store(&rsp.mode, m);
  atomic_store(&rsp.queries, 0);
  return d;
}

static void address(const struct egress_addresses *out, size_t i, char *text, size_t size,
                    unsigned *port) {
  const struct sockaddr_storage *s = &out->a[i];
  if (s->ss_family == AF_INET) {
    assert_int_equal(out->len[i], sizeof(struct sockaddr_in));
    inet_ntop(AF_INET, &((const struct sockaddr_in *)s)->sin_addr, text, (socklen_t)size);
    *port = ntohs(((const struct sockaddr_in *)s)->sin_port);
  } else {
    assert_int_equal(s->ss_family, AF_INET6);
    assert_int_equal(out->len[i], sizeof(struct sockaddr_in6));
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)s)->sin6_addr, text, (socklen_t)size);
    *port = ntohs(((const struct sockaddr_in6 *)s)->sin6_port);
  }
}

/* The addresses as "a b c", each checked to carry port. */
static const char *listed(const struct egress_addresses *out, uint16_t port) {
  static char all[2048];
  all[0] = '\0';
  for (size_t i = 0; i < out->n; i++) {
    char text[64];
    unsigned p;
    address(out, i, text, sizeof text, &p);
    assert_int_equal(p, port);
    if (i > 0)
      strcat(all, " ");
    strcat(all, text);
  }
  return all;
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- resolution ---- */

static void test_a_and_aaaa(void **state) {
  (void)state;
  struct egress_dns d = server(M_ANSWER, 0);
  struct egress_addresses out;
  char why[256];
  assert_int_equal(egress_dns_resolve(&d, "example.test", 443, &out, why, sizeof why), 0);
  assert_int_equal(out.n, 3);
  assert_string_equal(listed(&out, 443), "10.0.0.1 10.0.0.2 2001:db8::1");
  assert_int_equal(atomic_load(&rsp.queries), 2); /* one A, one AAAA, nothing more */
  /* Case and a trailing dot: the same name. */
  assert_int_equal(egress_dns_resolve(&d, "Example.TEST.", 80, &out, why, sizeof why), 0);
  assert_string_equal(listed(&out, 80), "10.0.0.1 10.0.0.2 2001:db8::1");
}

static void test_nxdomain_and_errors(void **state) {
  (void)state;
  struct egress_addresses out;
  char why[256];
  struct egress_dns d = server(M_NXDOMAIN, 0);
  assert_int_equal(egress_dns_resolve(&d, "nope.test", 443, &out, why, sizeof why), -1);
  assert_string_equal(why, "no such name nope.test");
  assert_int_equal(out.n, 0);
  d = server(M_SERVFAIL, 0);
  assert_int_equal(egress_dns_resolve(&d, "example.test", 443, &out, why, sizeof why), -1);
  assert_non_null(strstr(why, "SERVFAIL"));
  d = server(M_TRUNCATED, 0);
  assert_int_equal(egress_dns_resolve(&d, "example.test", 443, &out, why, sizeof why), -1);
  assert_non_null(strstr(why, "truncated"));
  /* Not a DNS name: not asked. */
  d = server(M_ANSWER, 0);
  assert_int_equal(egress_dns_resolve(&d, "a\\.b", 443, &out, why, sizeof why), -1);
  assert_non_null(strstr(why, "not a DNS name"));
  assert_int_equal(egress_dns_resolve(&d, "a..b", 443, &out, why, sizeof why), -1);
  assert_int_equal(atomic_load(&rsp.queries), 0);
}

static void test_timeout(void **state) {
  (void)state;
  struct egress_addresses out;
  char why[256], expect[256];
  struct egress_dns d = server(M_SILENT, 300);
  uint64_t t0 = now_ms();
  assert_int_equal(egress_dns_resolve(&d, "example.test", 443, &out, why, sizeof why), -1);
  uint64_t took = now_ms() - t0;
  snprintf(expect, sizeof expect,
           "cannot resolve example.test: the DNS server 127.0.0.1:%u did not answer within 300 ms",
           (unsigned)rsp.port);
  assert_string_equal(why, expect);
  assert_true(took >= 300 && took < 2000);
  /* Sent once, resent once: A and AAAA twice. */
  assert_int_equal(atomic_load(&rsp.queries), 4);
  /* The AAAA answer never comes: the A answer's addresses, at the limit. */
  d = server(M_AAAA_SILENT, 300);
  assert_int_equal(egress_dns_resolve(&d, "example.test", 443, &out, why, sizeof why), 0);
  assert_string_equal(listed(&out, 443), "10.0.0.1 10.0.0.2");
  /* Nothing listens: said at once (ICMP port unreachable). */
  struct egress_dns none;
  assert_int_equal(egress_dns_parse("127.0.0.1:1", &none, why, sizeof why), 0);
  none.timeout_ms = 5000;
  t0 = now_ms();
  assert_int_equal(egress_dns_resolve(&none, "example.test", 443, &out, why, sizeof why), -1);
  assert_true(now_ms() - t0 < 2000);
  assert_non_null(strstr(why, "refused"));
}

static void test_wrong_id_ignored(void **state) {
  (void)state;
  struct egress_dns d = server(M_WRONG_ID, 0);
  struct egress_addresses out;
  char why[256];
  assert_int_equal(egress_dns_resolve(&d, "example.test", 443, &out, why, sizeof why), 0);
  assert_string_equal(listed(&out, 443), "10.0.0.1 2001:db8::1");
}

/* Replies with the right id to another question (the other type, another
 * name) first: ignored, the right one taken. */
static void test_other_question_ignored(void **state) {
  (void)state;
  struct egress_dns d = server(M_OTHER_QUESTION, 0);
  struct egress_addresses out;
  char why[256];
  assert_int_equal(egress_dns_resolve(&d, "example.test", 443, &out, why, sizeof why), 0);
  assert_string_equal(listed(&out, 443), "10.0.0.1 10.0.0.2 2001:db8::1");
}

static void test_many_capped(void **state) {
  (void)state;
  struct egress_dns d = server(M_MANY, 0);
  struct egress_addresses out;
  char why[256];
  assert_int_equal(egress_dns_resolve(&d, "example.test", 443, &out, why, sizeof why), 0);
  assert_int_equal(out.n, EGRESS_DNS_MAX_ADDRESSES);
  char text[64];
  unsigned port;
  address(&out, 15, text, sizeof text, &port);
  assert_string_equal(text, "10.0.1.16");
}

static void test_cname_chain(void **state) {
  (void)state;
  struct egress_dns d = server(M_CNAME, 0);
  struct egress_addresses out;
  char why[256];
  assert_int_equal(egress_dns_resolve(&d, "example.test", 443, &out, why, sizeof why), 0);
  assert_string_equal(listed(&out, 443), "10.0.0.9 2001:db8::9"); /* not 6.6.6.6 */
  assert_int_equal(atomic_load(&rsp.queries), 2);                 /* not asked again */
}

static void test_literals(void **state) {
  (void)state;
  struct egress_dns d = server(M_ANSWER, 0);
  struct egress_addresses out;
  char why[256];
  assert_int_equal(egress_dns_resolve(&d, "192.0.2.7", 8443, &out, why, sizeof why), 0);
  assert_string_equal(listed(&out, 8443), "192.0.2.7");
  assert_int_equal(egress_dns_resolve(&d, "2001:db8::7", 443, &out, why, sizeof why), 0);
  assert_string_equal(listed(&out, 443), "2001:db8::7");
  assert_int_equal(egress_dns_resolve(NULL, "127.0.0.1", 80, &out, why, sizeof why), 0);
  assert_string_equal(listed(&out, 80), "127.0.0.1");
  assert_int_equal(atomic_load(&rsp.queries), 0);
}

static void test_system_resolver(void **state) {
  (void)state;
  struct egress_dns d;
  char why[256];
  assert_int_equal(egress_dns_parse("", &d, why, sizeof why), 0);
  struct egress_addresses out;
  /* localhost comes from /etc/hosts: no network needed. */
  assert_int_equal(egress_dns_resolve(&d, "localhost", 3128, &out, why, sizeof why), 0);
  assert_true(out.n >= 1 && out.n <= EGRESS_DNS_MAX_ADDRESSES);
  listed(&out, 3128);
}

struct worker {
  struct egress_dns d;
  int ok;
};

static void *worker_main(void *arg) {
  struct worker *w = arg;
  for (int i = 0; i < 25; i++) {
    struct egress_addresses out;
    char why[256];
    if (egress_dns_resolve(&w->d, "example.test", (uint16_t)(1000 + i), &out, why, sizeof why) ==
            0 &&
        out.n == 3 && ntohs(((struct sockaddr_in *)&out.a[0])->sin_port) == 1000 + i)
      w->ok++;
  }
  return NULL;
}

static void test_many_threads(void **state) {
  (void)state;
  struct worker w[8];
  pthread_t th[8];
  struct egress_dns d = server(M_ANSWER, 0);
  for (int i = 0; i < 8; i++) {
    w[i] = (struct worker){.d = d};
    assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
  }
  for (int i = 0; i < 8; i++) {
    pthread_join(th[i], NULL);
    assert_int_equal(w[i].ok, 25);
  }
  assert_int_equal(atomic_load(&rsp.queries), 8 * 25 * 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),
      cmocka_unit_test(test_a_and_aaaa),
      cmocka_unit_test(test_nxdomain_and_errors),
      cmocka_unit_test(test_timeout),
      cmocka_unit_test(test_wrong_id_ignored),
      cmocka_unit_test(test_other_question_ignored),
      cmocka_unit_test(test_many_capped),
      cmocka_unit_test(test_cname_chain),
      cmocka_unit_test(test_literals),
      cmocka_unit_test(test_system_resolver),
      cmocka_unit_test(test_many_threads),
  };
  return cmocka_run_group_tests(tests, responder_start, responder_stop);
}
