/* egress_head.c: see egress_head.h. Reads only within [buf, buf + len);
 * every length is checked before it is used; no allocation. */
#include "egress_head.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

__attribute__((format(printf, 4, 5))) static int refuse(char *why, size_t whylen, int status,
                                                        const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, whylen, fmt, ap);
  va_end(ap);
  return status;
}

size_t egress_head_end(const char *buf, size_t len) {
  const char *p = memmem(buf, len, "\r\n\r\n", 4);
  return p != NULL ? (size_t)(p - buf) + 4 : 0;
}

/* Printable ASCII, HTAB, and CR only as the first half of CRLF. */
static bool bytes_ok(const char *buf, size_t len) {
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)buf[i];
    if (c == '\r') {
      if (i + 1 >= len || buf[i + 1] != '\n')
        return false;
      i++;
    } else if (c != '\t' && (c < 0x20 || c > 0x7e)) {
      return false; /* NUL, a bare LF, other controls, DEL, bytes above ASCII */
    }
  }
  return true;
}

static bool is_tchar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static bool is_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* 1 to 5 digits, no leading zero, 1-65535. */
static bool parse_port(const char *s, size_t n, uint16_t *port) {
  if (n == 0 || n > 5 || s[0] == '0')
    return false;
  unsigned v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return false;
    v = v * 10 + (unsigned)(s[i] - '0');
  }
  if (v > 65535)
    return false;
  *port = (uint16_t)v;
  return true;
}

/* A DNS name or an IPv4 literal: [A-Za-z0-9._-], starting with a letter or
 * digit, no empty label. getaddrinfo also reads odd IPv4 spellings
 * ("127.1"); harmless, since the policy judges the address it yields. */
static bool name_ok(const char *s, size_t n) {
  if (n == 0 || n > EGRESS_HOST_MAX || !is_alnum(s[0]) || s[n - 1] == '.')
    return false;
  for (size_t i = 0; i < n; i++) {
    if (!is_alnum(s[i]) && s[i] != '.' && s[i] != '-' && s[i] != '_')
      return false;
    if (s[i] == '.' && s[i + 1] == '.')
      return false;
  }
  return true;
}

/* authority = host [":" port], host a name, IPv4 or "[IPv6]". */
static int parse_authority(const char *s, size_t n, bool need_port, struct egress_request *req,
                           char *why, size_t whylen) {
  size_t host_end, after;
  const char *host = s;
  if (n > 0 && s[0] == '[') {
    const char *close = memchr(s, ']', n);
    if (close == NULL)
      return refuse(why, whylen, 400, "unclosed '[' in the target");
    host = s + 1;
    host_end = (size_t)(close - host);
    after = (size_t)(close - s) + 1;
    char text[64];
    struct in6_addr a;
    if (host_end == 0 || host_end >= sizeof text)
      return refuse(why, whylen, 400, "not an IPv6 address in the target");
    memcpy(text, host, host_end);
    text[host_end] = '\0';
    if (inet_pton(AF_INET6, text, &a) != 1)
      return refuse(why, whylen, 400, "not an IPv6 address in the target");
    req->host_ipv6 = true;
  } else {
    const char *colon = memchr(s, ':', n);
    host_end = colon != NULL ? (size_t)(colon - s) : n;
    after = host_end;
    if (!name_ok(s, host_end))
      return refuse(why, whylen, 400, "the target's host is not a plain host name or address");
  }
  memcpy(req->host, host, host_end);
  req->host[host_end] = '\0';
  if (after == n) {
    if (need_port)
      return refuse(why, whylen, 400, "CONNECT needs host:port");
    req->port = 80;
    return 0;
  }
  if (s[after] != ':' || !parse_port(s + after + 1, n - after - 1, &req->port))
    return refuse(why, whylen, 400, "the target's port is not a number from 1 to 65535");
  return 0;
}

/* GET/HEAD target: http://authority[/path]. */
static int parse_absolute(const char *buf, size_t off, size_t n, struct egress_request *req,
                          char *why, size_t whylen) {
  const char *s = buf + off;
  if (n >= 8 && strncasecmp(s, "https://", 8) == 0)
    return refuse(why, whylen, 400, "https URLs go through CONNECT");
  if (n < 7 || strncasecmp(s, "http://", 7) != 0)
    return refuse(why, whylen, 400, "the target is not an absolute http:// URL");
  size_t a = 7, e = a;
  while (e < n && s[e] != '/' && s[e] != '?' && s[e] != '#')
    e++;
  if (e < n && s[e] != '/')
    return refuse(why, whylen, 400, "the URL's path must start with '/'");
  int st = parse_authority(s + a, e - a, false, req, why, whylen);
  if (st != 0)
    return st;
  req->path.off = (uint16_t)(off + e);
  req->path.len = (uint16_t)(n - e);
  return 0;
}

static int parse_request_line(const char *buf, size_t n, struct egress_request *req, char *why,
                              size_t whylen) {
  const char *sp1 = memchr(buf, ' ', n);
  const char *sp2 = sp1 != NULL ? memchr(sp1 + 1, ' ', n - (size_t)(sp1 + 1 - buf)) : NULL;
  if (sp1 == NULL || sp2 == NULL || sp2 == sp1 + 1)
    return refuse(why, whylen, 400, "not a request line (METHOD target HTTP/1.1)");
  size_t mlen = (size_t)(sp1 - buf), toff = mlen + 1, tlen = (size_t)(sp2 - sp1 - 1);
  const char *version = sp2 + 1;
  size_t vlen = n - (size_t)(version - buf);
  if (!(vlen == 8 && (memcmp(version, "HTTP/1.1", 8) == 0 || memcmp(version, "HTTP/1.0", 8) == 0)))
    return refuse(why, whylen, 400, "not HTTP/1.0 or HTTP/1.1");
  if (mlen == 7 && memcmp(buf, "CONNECT", 7) == 0)
    req->method = EGRESS_CONNECT;
  else if (mlen == 3 && memcmp(buf, "GET", 3) == 0)
    req->method = EGRESS_GET;
  else if (mlen == 4 && memcmp(buf, "HEAD", 4) == 0)
    req->method = EGRESS_HEAD;
  else {
    for (size_t i = 0; i < mlen; i++)
      if (!is_tchar(buf[i]))
        return refuse(why, whylen, 400, "not a request line (METHOD target HTTP/1.1)");
    return refuse(why, whylen, 405, "method %.*s is not allowed (CONNECT, GET and HEAD only)",
                  (int)(mlen > 20 ? 20 : mlen), buf);
  }
  if (req->method == EGRESS_CONNECT)
    return parse_authority(buf + toff, tlen, true, req, why, whylen);
  return parse_absolute(buf, toff, tlen, req, why, whylen);
}

static bool name_is(const char *line, size_t nlen, const char *name) {
  return strlen(name) == nlen && strncasecmp(line, name, nlen) == 0;
}

/* Headers the proxy sets itself or that concern only this hop. */
static bool hop_header(const char *line, size_t nlen) {
  static const char *const drop[] = {"host",
                                     "connection",
                                     "proxy-connection",
                                     "keep-alive",
                                     "proxy-authorization",
                                     "proxy-authenticate",
                                     "te",
                                     "trailer",
                                     "upgrade",
                                     "content-length"};
  for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
    if (name_is(line, nlen, drop[i]))
      return true;
  return false;
}

/* One "Name: value" line (no CRLF) at buf + off. */
static int parse_header(const char *buf, size_t off, size_t n, struct egress_request *req,
                        char *why, size_t whylen) {
  const char *line = buf + off;
  if (line[0] == ' ' || line[0] == '\t')
    return refuse(why, whylen, 400, "folded header lines are not accepted");
  size_t nlen = 0;
  while (nlen < n && is_tchar(line[nlen]))
    nlen++;
  if (nlen == 0 || nlen == n || line[nlen] != ':')
    return refuse(why, whylen, 400, "a header line is not \"Name: value\"");
  const char *v = line + nlen + 1, *end = line + n;
  while (v < end && (*v == ' ' || *v == '\t'))
    v++;
  while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
    end--;
  bool body_header = name_is(line, nlen, "transfer-encoding") ||
                     (name_is(line, nlen, "content-length") && !(end - v == 1 && *v == '0'));
  if (body_header && req->method != EGRESS_CONNECT)
    return refuse(why, whylen, 400, "a request body is not accepted");
  if (hop_header(line, nlen))
    return 0;
  if (req->n_headers == EGRESS_MAX_HEADERS)
    return refuse(why, whylen, 431, "more than %d header lines", EGRESS_MAX_HEADERS);
  req->headers[req->n_headers++] = (struct egress_span){(uint16_t)off, (uint16_t)n};
  return 0;
}

int egress_parse_head(const char *buf, size_t len, struct egress_request *req, char *why,
                      size_t whylen) {
  memset(req, 0, sizeof *req);
  if (len > EGRESS_HEAD_MAX)
    return refuse(why, whylen, 431, "request head larger than %d bytes", EGRESS_HEAD_MAX);
  if (len < 4 || memcmp(buf + len - 4, "\r\n\r\n", 4) != 0 || egress_head_end(buf, len) != len)
    return refuse(why, whylen, 400, "the request head does not end in an empty line");
  if (!bytes_ok(buf, len))
    return refuse(why, whylen, 400, "bytes outside printable ASCII, or a line not ended by CRLF");
  const char *eol = memmem(buf, len, "\r\n", 2); /* found: the head ends in CRLFCRLF */
  int st = parse_request_line(buf, (size_t)(eol - buf), req, why, whylen);
  size_t lines = 0;
  for (size_t off = (size_t)(eol - buf) + 2; st == 0 && off < len - 2;) {
    const char *next = memmem(buf + off, len - off, "\r\n", 2);
    size_t n = (size_t)(next - (buf + off));
    if (++lines > EGRESS_MAX_HEADERS)
      return refuse(why, whylen, 431, "more than %d header lines", EGRESS_MAX_HEADERS);
    st = parse_header(buf, off, n, req, why, whylen);
    off += n + 2;
  }
  return st;
}

void egress_authority(const struct egress_request *req, bool with_port, char *out, size_t outlen) {
  const char *l = req->host_ipv6 ? "[" : "", *r = req->host_ipv6 ? "]" : "";
  if (with_port)
    snprintf(out, outlen, "%s%s%s:%u", l, req->host, r, (unsigned)req->port);
  else
    snprintf(out, outlen, "%s%s%s", l, req->host, r);
}

/* Appends to out at *n; false when it does not fit. */
__attribute__((format(printf, 4, 5))) static bool put(char *out, size_t outlen, size_t *n,
                                                      const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = *n < outlen ? vsnprintf(out + *n, outlen - *n, fmt, ap) : -1;
  va_end(ap);
  if (k < 0 || (size_t)k >= outlen - *n)
    return false;
  *n += (size_t)k;
  return true;
}

size_t egress_forward_head(const struct egress_request *req, const char *buf, bool absolute,
                           char *out, size_t outlen) {
  char authority[EGRESS_HOST_MAX + 16];
  egress_authority(req, req->port != 80, authority, sizeof authority);
  const char *method = req->method == EGRESS_HEAD ? "HEAD" : "GET";
  const char *path = req->path.len > 0 ? buf + req->path.off : "/";
  int plen = req->path.len > 0 ? (int)req->path.len : 1;
  size_t n = 0;
  bool ok = absolute ? put(out, outlen, &n, "%s http://%s%.*s HTTP/1.1\r\n", method, authority,
                           plen, path)
                     : put(out, outlen, &n, "%s %.*s HTTP/1.1\r\n", method, plen, path);
  ok = ok && put(out, outlen, &n, "Host: %s\r\n", authority);
  for (size_t i = 0; ok && i < req->n_headers; i++)
    ok = put(out, outlen, &n, "%.*s\r\n", (int)req->headers[i].len, buf + req->headers[i].off);
  ok = ok && put(out, outlen, &n, "Connection: close\r\n\r\n");
  return ok ? n : 0;
}

size_t egress_connect_head(const struct egress_request *req, char *out, size_t outlen) {
  char authority[EGRESS_HOST_MAX + 16];
  egress_authority(req, true, authority, sizeof authority);
  size_t n = 0;
  return put(out, outlen, &n, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority) ? n
                                                                                               : 0;
}

size_t egress_refusal(int status, const char *why, char *out, size_t outlen) {
  char text[401];
  size_t k = 0;
  for (const char *c = why; *c != '\0' && k < sizeof text - 1; c++)
    text[k++] = (*c >= 0x20 && *c <= 0x7e) ? *c : '?';
  text[k] = '\0';
  size_t n = 0;
  bool ok = put(out, outlen, &n,
                "HTTP/1.1 %d " EGRESS_REASON_PREFIX "%s\r\nContent-Type: text/plain\r\n"
                "Content-Length: %zu\r\nConnection: close\r\n\r\n" EGRESS_REASON_PREFIX "%s\n",
                status, text, strlen(EGRESS_REASON_PREFIX) + k + 1, text);
  return ok ? n : 0;
}
