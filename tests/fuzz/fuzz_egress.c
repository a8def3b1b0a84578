/* fuzz_egress: libFuzzer harness over the egress proxy's request heads
 * (server/egress_head.c), the bytes a hostile package build sends the
 * proxy: egress_head_end, egress_parse_head on the measured head, and for
 * an accepted head the heads sent on (egress_forward_head in both forms,
 * egress_connect_head); then egress_refusal with the parser's reason and
 * with the input itself as a reason. Built with clang, ASan and UBSan by
 * scripts/fuzz; any crash, sanitizer report or broken invariant aborts. */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "egress_head.h"

static void require(int cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_egress: invariant broken: %s\n", what);
    abort();
  }
}

static int host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '-' || c == '_';
}

/* What a head sent on must be: one head (a single CRLFCRLF, at its end),
 * printable ASCII lines, and one request per connection. */
static void check_sent_head(const char *out, size_t n) {
  require(n >= 4 && memcmp(out + n - 4, "\r\n\r\n", 4) == 0, "a sent head ends in CRLFCRLF");
  require(egress_head_end(out, n) == n, "a sent head holds one head only");
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)out[i];
    require((c >= 0x20 && c <= 0x7e) || c == '\t' || (c == '\r' && out[i + 1] == '\n') ||
                (c == '\n' && i > 0 && out[i - 1] == '\r'),
            "a sent head is printable ASCII with CRLF line ends");
  }
}

static void check_accepted(const char *head, size_t len, const struct egress_request *r) {
  size_t hl = strlen(r->host);
  require(hl > 0 && hl <= EGRESS_HOST_MAX, "an accepted host has 1 to 253 bytes");
  if (r->host_ipv6) {
    unsigned char a[16];
    require(inet_pton(AF_INET6, r->host, a) == 1, "an accepted IPv6 host is an address");
  } else {
    for (size_t i = 0; i < hl; i++)
      require(host_char(r->host[i]), "an accepted host name has only [A-Za-z0-9._-]");
  }
  require(r->port >= 1, "an accepted port is 1-65535");
  require((size_t)r->path.off + r->path.len <= len, "the path lies within the head");
  if (r->method != EGRESS_CONNECT && r->path.len > 0)
    require(head[r->path.off] == '/', "a path starts with '/'");
  require(r->n_headers <= EGRESS_MAX_HEADERS, "at most 64 headers kept");
  for (size_t i = 0; i < r->n_headers; i++) {
    require((size_t)r->headers[i].off + r->headers[i].len <= len, "a header lies within the head");
    require(memchr(head + r->headers[i].off, '\n', r->headers[i].len) == NULL &&
                memchr(head + r->headers[i].off, '\r', r->headers[i].len) == NULL,
            "a kept header is one line");
  }
  char out[EGRESS_FORWARD_MAX];
  size_t n;
  if (r->method == EGRESS_CONNECT) {
    n = egress_connect_head(r, out, sizeof out);
    require(n > 0, "a CONNECT head always fits");
    check_sent_head(out, n);
    return;
  }
  for (int absolute = 0; absolute < 2; absolute++) {
    n = egress_forward_head(r, head, absolute != 0, out, sizeof out);
    require(n > 0, "a forwarded head always fits EGRESS_FORWARD_MAX");
    check_sent_head(out, n);
    require(memmem(out, n, "\r\nConnection: close\r\n\r\n", 23) != NULL,
            "a forwarded head asks for one request per connection");
  }
}

static void check_refusal(int status, const char *why) {
  char out[1024];
  size_t n = egress_refusal(status, why, out, sizeof out);
  require(n > 0, "a refusal fits 1 KiB");
  const char *eol = memmem(out, n, "\r\n", 2);
  char prefix[64];
  int k = snprintf(prefix, sizeof prefix, "HTTP/1.1 %d " EGRESS_REASON_PREFIX, status);
  require(eol != NULL && memcmp(out, prefix, (size_t)k) == 0, "a refusal's status line");
  for (const char *c = out; c < eol; c++)
    require(*c >= 0x20 && *c <= 0x7e, "a refusal's status line is printable: no header injection");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *buf = (const char *)data;
  size_t end = egress_head_end(buf, size);
  require(end <= size, "a head ends within the bytes");
  if (end > 0)
    require(memcmp(buf + end - 4, "\r\n\r\n", 4) == 0, "a head ends in CRLFCRLF");
  size_t len = end > 0 ? end : size;
  /* A copy of exactly len bytes, so that ASan sees any read past it. */
  char *head = malloc(len > 0 ? len : 1);
  if (head == NULL)
    return 0;
  memcpy(head, buf, len);
  struct egress_request req;
  char why[256];
  why[0] = '\0';
  int st = egress_parse_head(head, len, &req, why, sizeof why);
  require(st == 0 || st == 400 || st == 405 || st == 431, "a refusal is 400, 405 or 431");
  if (st == 0)
    check_accepted(head, len, &req);
  else
    check_refusal(st, why);
  free(head);
  /* Any bytes as a reason (up to a NUL), as a DNS or socket error might be. */
  char reason[512];
  size_t rl = size < sizeof reason - 1 ? size : sizeof reason - 1;
  memcpy(reason, data, rl);
  reason[rl] = '\0';
  check_refusal(403, reason);
  return 0;
}
