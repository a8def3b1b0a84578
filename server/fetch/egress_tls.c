/* egress_tls.c: see egress_tls.h. Reads the handshake records at the start
 * of a tunnel, gathers the ClientHello's bytes out of them (it may span
 * several records) and walks the ClientHello to its server_name extension.
 * The bytes come from the sandbox: every length is checked against the
 * length that holds it and against the bytes that have arrived, never
 * read past len, no allocation. A prefix is judged as far as it goes, so
 * MORE means "valid so far": a wrong field is refused as soon as it has
 * arrived, not after the proxy waited for the rest.
 *
 * EGRESS_TLS_HELLO_MAX counts bytes on the wire, record headers included:
 * a ClientHello that cannot end within the first EGRESS_TLS_HELLO_MAX bytes
 * is refused, so a proxy reading that many bytes always gets an answer
 * other than MORE. */
#include "egress_tls.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "dns_name.h"

#define RECORD_HEADER 5
#define RECORD_MAX 16384 /* a TLSPlaintext fragment's most (RFC 8446 5.1) */
#define CONTENT_HANDSHAKE 22
#define HANDSHAKE_CLIENT_HELLO 1
#define HANDSHAKE_HEADER 4
#define EXT_SERVER_NAME 0
#define NAME_TYPE_HOST_NAME 0

__attribute__((format(printf, 3, 4))) static enum egress_tls_sni malformed(char *why, size_t whylen,
                                                                           const char *fmt, ...) {
  if (why != NULL && whylen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
  }
  return EGRESS_TLS_MALFORMED;
}

/* The ClientHello's bytes gathered so far (its handshake header first),
 * and a cursor through them. */
struct hello {
  const uint8_t *b;
  size_t got;               /* bytes gathered */
  size_t pos;               /* the next byte to read; pos <= got */
  enum egress_tls_sni stop; /* why a step returned false: MORE or MALFORMED */
  char *why;
  size_t whylen;
  size_t name_off, name_len; /* the host_name, once seen */
  bool have_sni_ext, have_name;
};

/* Whether n more bytes lie within end (the bound of the field that holds
 * them: past it, the length fields lie) and have arrived (else: MORE). */
static bool need(struct hello *h, size_t end, size_t n, const char *what) {
  if (n > end - h->pos) {
    h->stop = malformed(h->why, h->whylen, "ClientHello: %s runs past its enclosing length", what);
    return false;
  }
  if (n > h->got - h->pos) {
    h->stop = EGRESS_TLS_MORE;
    return false;
  }
  return true;
}

static unsigned u8(struct hello *h) {
  return h->b[h->pos++];
}

static size_t u16(struct hello *h) {
  size_t v = (size_t)h->b[h->pos] << 8 | h->b[h->pos + 1];
  h->pos += 2;
  return v;
}

static bool fail(struct hello *h, const char *what) {
  h->stop = malformed(h->why, h->whylen, "ClientHello: %s", what);
  return false;
}

/* The server_name extension's body, [h->pos, end): a ServerNameList
 * (RFC 6066 3) holding one host_name. Other name types have no defined
 * encoding to skip over, and none is in use: refused. */
static bool server_name(struct hello *h, size_t end) {
  if (h->have_sni_ext)
    return fail(h, "more than one server_name extension");
  h->have_sni_ext = true;
  if (!need(h, end, 2, "server_name list length"))
    return false;
  size_t list = u16(h);
  if (list != end - h->pos)
    return fail(h, "server_name list length is not its extension's");
  if (list == 0)
    return fail(h, "empty server_name list");
  while (h->pos < end) {
    if (!need(h, end, 3, "server_name entry"))
      return false;
    unsigned type = u8(h);
    size_t n = u16(h);
    if (type != NAME_TYPE_HOST_NAME) {
      char what[64];
      snprintf(what, sizeof what, "server_name of type %u, not host_name", type);
      return fail(h, what);
    }
    if (h->have_name)
      return fail(h, "more than one host_name");
    if (!need(h, end, n, "host_name"))
      return false;
    const char *problem = dns_name_problem((const char *)h->b + h->pos, n);
    if (problem != NULL) {
      char what[160];
      snprintf(what, sizeof what, "the server name is not a DNS name: %s", problem);
      return fail(h, what);
    }
    h->have_name = true;
    h->name_off = h->pos;
    h->name_len = n;
    h->pos += n;
  }
  return true;
}

/* Walks the ClientHello (RFC 8446 4.1.2, RFC 5246 7.4.1.2) as far as its
 * bytes go; end is where its handshake length says it ends. */
static bool walk(struct hello *h, size_t end) {
  h->pos = HANDSHAKE_HEADER;
  if (!need(h, end, 2, "legacy_version"))
    return false;
  unsigned major = u8(h), minor = u8(h);
  if (major != 3 || minor < 1 || minor > 4)
    return fail(h, "legacy_version is not TLS 1.0 to 1.3");
  if (!need(h, end, 32, "random"))
    return false;
  h->pos += 32;
  if (!need(h, end, 1, "session_id length"))
    return false;
  size_t n = u8(h);
  if (n > 32)
    return fail(h, "session_id longer than 32 bytes");
  if (!need(h, end, n, "session_id"))
    return false;
  h->pos += n;
  if (!need(h, end, 2, "cipher_suites length"))
    return false;
  n = u16(h);
  if (n < 2 || n % 2 != 0)
    return fail(h, "cipher_suites length is not an even number of at least 2");
  if (!need(h, end, n, "cipher_suites"))
    return false;
  h->pos += n;
  if (!need(h, end, 1, "compression_methods length"))
    return false;
  n = u8(h);
  if (n < 1)
    return fail(h, "no compression_methods");
  if (!need(h, end, n, "compression_methods"))
    return false;
  h->pos += n;
  if (h->pos == end)
    return true; /* no extensions (TLS 1.2 and before allow that) */
  if (!need(h, end, 2, "extensions length"))
    return false;
  n = u16(h);
  if (n != end - h->pos)
    return fail(h, "extensions length is not the ClientHello's remaining bytes");
  while (h->pos < end) {
    if (!need(h, end, 4, "extension header"))
      return false;
    size_t type = u16(h);
    size_t len = u16(h);
    if (!need(h, end, len, "extension"))
      return false;
    if (type == EXT_SERVER_NAME) {
      if (!server_name(h, h->pos + len))
        return false;
    } else {
      h->pos += len;
    }
  }
  return true;
}

static enum egress_tls_sni too_big(char *why, size_t whylen) {
  return malformed(why, whylen, "ClientHello larger than %d bytes (records included)",
                   EGRESS_TLS_HELLO_MAX);
}

enum egress_tls_sni egress_tls_sni(const uint8_t *buf, size_t len, char *sni, size_t snilen,
                                   char *why, size_t whylen) {
  if (why != NULL && whylen > 0)
    why[0] = '\0';
  if (sni != NULL && snilen > 0)
    sni[0] = '\0';
  if (len == 0)
    return EGRESS_TLS_MORE;
  if (buf[0] != CONTENT_HANDSHAKE)
    return EGRESS_TLS_NOT_TLS;

  /* Gather the handshake message out of the records. */
  uint8_t hs[EGRESS_TLS_HELLO_MAX];
  size_t got = 0, want = HANDSHAKE_HEADER; /* want: 4 + its length, once known */
  size_t p = 0;                            /* wire position */
  size_t rec_left = 0;                     /* bytes left in the current record */
  size_t partial_header = 0;               /* bytes of a record header that ended len */
  while (got < want && p < len) {
    if (rec_left == 0) {
      size_t avail = len - p;
      if (buf[p] != CONTENT_HANDSHAKE)
        return malformed(why, whylen, "record of type %u inside the ClientHello", buf[p]);
      if (avail >= 2 && buf[p + 1] != 3)
        return malformed(why, whylen, "record version %u.x is not TLS", buf[p + 1]);
      if (avail >= 3 && (buf[p + 2] < 1 || buf[p + 2] > 4))
        return malformed(why, whylen, "record version 3.%u is not TLS 1.0 to 1.3", buf[p + 2]);
      if (avail < RECORD_HEADER) {
        partial_header = avail;
        p = len;
        break;
      }
      rec_left = (size_t)buf[p + 3] << 8 | buf[p + 4];
      if (rec_left == 0 || rec_left > RECORD_MAX)
        return malformed(why, whylen, "handshake record of %zu bytes (1 to %d)", rec_left,
                         RECORD_MAX);
      p += RECORD_HEADER;
      continue;
    }
    size_t chunk = rec_left;
    if (chunk > len - p)
      chunk = len - p;
    if (chunk > want - got)
      chunk = want - got;
    memcpy(hs + got, buf + p, chunk);
    if (got == 0 && hs[0] != HANDSHAKE_CLIENT_HELLO)
      return malformed(why, whylen, "handshake message of type %u, not ClientHello", hs[0]);
    got += chunk;
    p += chunk;
    rec_left -= chunk;
    if (want == HANDSHAKE_HEADER && got == HANDSHAKE_HEADER) {
      size_t body = (size_t)hs[1] << 16 | (size_t)hs[2] << 8 | hs[3];
      if (HANDSHAKE_HEADER + body > EGRESS_TLS_HELLO_MAX - RECORD_HEADER)
        return too_big(why, whylen);
      want = HANDSHAKE_HEADER + body;
    }
  }

  /* The wire bytes the ClientHello needs at the least: those so far, the
   * rest of the message, and another record header if this one (or the
   * partial one) cannot hold it. */
  size_t rest = want - got;
  size_t wire_end = p + rest;
  if (partial_header > 0)
    wire_end += RECORD_HEADER - partial_header;
  else if (rest > rec_left)
    wire_end += RECORD_HEADER;
  if (wire_end > EGRESS_TLS_HELLO_MAX)
    return too_big(why, whylen);
  if (got < HANDSHAKE_HEADER)
    return EGRESS_TLS_MORE;

  struct hello h = {.b = hs, .got = got, .why = why, .whylen = whylen};
  if (!walk(&h, want))
    return h.stop;
  /* walk read every byte up to want: the whole ClientHello is here. */
  if (!h.have_name)
    return EGRESS_TLS_NO_SNI; /* an extension-less hello cannot have had one */
  if (sni == NULL || snilen <= h.name_len)
    return malformed(why, whylen, "no room for the server name (%zu bytes)", h.name_len);
  for (size_t i = 0; i < h.name_len; i++) {
    uint8_t c = hs[h.name_off + i];
    sni[i] = (char)(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  }
  sni[h.name_len] = '\0';
  return EGRESS_TLS_SNI;
}
