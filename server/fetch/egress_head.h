/* egress_head.h: the request heads the egress proxy (egress.c) accepts from
 * pip's sandbox, parsed strictly, and the heads it sends on. Pure functions
 * over bytes, so they are unit-tested and fuzzed (tests/fuzz/fuzz_egress.c).
 *
 * Every byte comes from the installer's sandbox, where a package's build
 * step is hostile code. So the parser is small, bounded and strict rather
 * than lenient: one request line (CONNECT host:port, or GET/HEAD with an
 * absolute http:// URL) and header lines up to CRLFCRLF, at most
 * EGRESS_HEAD_MAX bytes and EGRESS_MAX_HEADERS lines; printable ASCII only,
 * CRLF line ends only, no folded lines, no request bodies. Anything else is
 * refused with a status and a reason, never guessed at.
 *
 * Why our own: no library at hand serves CONNECT well. libmicrohttpd's
 * connection upgrade is built for "101 Switching Protocols" and answers
 * CONNECT through the same path; libcurl is a client. A proxy needs only
 * the request line and the header lines, so this is smaller than adapting
 * either. It never parses what comes back from the far end: that is relayed
 * as bytes. */
#ifndef SBX_EGRESS_HEAD_H
#define SBX_EGRESS_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EGRESS_HEAD_MAX 8192
#define EGRESS_HOST_MAX 253
#define EGRESS_MAX_HEADERS 64
/* Room for a forwarded head: the request's, plus what the proxy adds. */
#define EGRESS_FORWARD_MAX (EGRESS_HEAD_MAX + 512)

enum egress_method { EGRESS_CONNECT, EGRESS_GET, EGRESS_HEAD };

struct egress_span {
  uint16_t off, len; /* into the head's bytes */
};

struct egress_request {
  enum egress_method method;
  /* A DNS name ([A-Za-z0-9._-], starting with a letter or digit) or an IPv4
   * or IPv6 literal (without its brackets), NUL-terminated. */
  char host[EGRESS_HOST_MAX + 1];
  bool host_ipv6;
  uint16_t port;           /* 1-65535; GET/HEAD without one: 80 */
  struct egress_span path; /* GET/HEAD: starts with '/'; empty means "/" */
  /* Header lines kept for forwarding ("Name: value", no CRLF): those the
   * proxy sets itself (Host, Connection) and hop-by-hop ones are left out. */
  struct egress_span headers[EGRESS_MAX_HEADERS];
  size_t n_headers;
};

/* The length of the head at the start of buf (through the first CRLFCRLF),
 * or 0 when it has not all arrived. */
size_t egress_head_end(const char *buf, size_t len);

/* Parses a whole head (len bytes, ending in CRLFCRLF, as egress_head_end
 * measured it). Returns 0, or the HTTP status to answer (400, 405, 431)
 * with why filled. */
int egress_parse_head(const char *buf, size_t len, struct egress_request *req, char *why,
                      size_t whylen);

/* "host", "host:port", "[v6]:port": for Host headers, CONNECT lines, logs. */
void egress_authority(const struct egress_request *req, bool with_port, char *out, size_t outlen);

/* The GET/HEAD head sent on: origin-form ("GET /path HTTP/1.1") to the
 * origin, or absolute-form to an upstream proxy; Host from the request
 * line, the kept headers, "Connection: close" (one request per tunnel).
 * buf is the parsed head. Returns its length, or 0 if out is too small
 * (EGRESS_FORWARD_MAX always suffices). */
size_t egress_forward_head(const struct egress_request *req, const char *buf, bool absolute,
                           char *out, size_t outlen);

/* "CONNECT host:port HTTP/1.1" with its Host header, for an upstream proxy. */
size_t egress_connect_head(const struct egress_request *req, char *out, size_t outlen);

/* A whole refusal: "HTTP/1.1 <status> sandboxd egress: <why>", a text body
 * saying the same, Connection: close. pip shows the reason phrase in its
 * errors. why is reduced to printable ASCII and 400 bytes. */
size_t egress_refusal(int status, const char *why, char *out, size_t outlen);

#define EGRESS_REASON_PREFIX "sandboxd egress: "

#endif
