/* tls_peer.c: see tls_peer.h. */
#include "tls_peer.h"

#include <gnutls/x509.h>
#include <stdbool.h>
#include <string.h>

/* An identity as long as its size says (no NUL inside), with no control
 * character: anything else is left out. */
static bool printable(const char *s, size_t size) {
  if (size == 0 || strlen(s) != size)
    return false;
  for (size_t i = 0; i < size; i++)
    if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] == 0x7f)
      return false;
  return true;
}

static void add(struct tls_peer *out, const char *id) {
  if (out->n < TLS_PEER_IDS_MAX)
    memcpy(out->ids[out->n++], id, strlen(id) + 1);
}

/* Every URI subjectAltName. GnuTLS NUL-terminates what it returns and
 * leaves the terminator out of size; one too long for the buffer is
 * skipped (GNUTLS_E_SHORT_MEMORY_BUFFER) and the next one read. */
static void read_uris(gnutls_x509_crt_t crt, struct tls_peer *out) {
  char buf[TLS_PEER_ID_MAX + 1];
  /* The last place is kept for the CN. */
  for (unsigned seq = 0; seq < 64 && out->n < TLS_PEER_IDS_MAX - 1; seq++) {
    size_t size = sizeof buf;
    unsigned critical = 0;
    int type = gnutls_x509_crt_get_subject_alt_name(crt, seq, buf, &size, &critical);
    if (type == GNUTLS_E_REQUESTED_DATA_NOT_AVAILABLE)
      return;
    if (type == GNUTLS_SAN_URI && size < sizeof buf && printable(buf, size))
      add(out, buf);
    else if (type < 0 && type != GNUTLS_E_SHORT_MEMORY_BUFFER)
      return; /* unreadable: stop, keeping what was read */
  }
}

static void read_cn(gnutls_x509_crt_t crt, struct tls_peer *out) {
  char buf[TLS_PEER_ID_MAX + 1] = "CN=";
  size_t size = sizeof buf - 3;
  if (gnutls_x509_crt_get_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, 0, buf + 3, &size) == 0 &&
      size < sizeof buf - 3 && printable(buf + 3, size))
    add(out, buf);
}

void tls_peer_read(gnutls_session_t session, struct tls_peer *out) {
  out->n = 0;
  unsigned n = 0;
  const gnutls_datum_t *chain = gnutls_certificate_get_peers(session, &n);
  if (chain == NULL || n == 0)
    return;
  gnutls_x509_crt_t crt;
  if (gnutls_x509_crt_init(&crt) < 0)
    return;
  if (gnutls_x509_crt_import(crt, &chain[0], GNUTLS_X509_FMT_DER) == 0) {
    read_uris(crt, out);
    read_cn(crt, out);
  }
  gnutls_x509_crt_deinit(crt);
}
