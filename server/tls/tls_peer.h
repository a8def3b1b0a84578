/* tls_peer.h: the identities a verified client certificate carries, as the
 * tenants file names them (cert_identities): each URI subjectAltName (the
 * form SPIFFE mesh identities take, "spiffe://mesh.local/ns/a/sa/api") and
 * "CN=<the subject's first common name>". Read from a GnuTLS session after
 * its handshake: by the tls+tcp:// engine (tls_engine.c) and usable by the
 * https:// listeners (libmicrohttpd's sessions are GnuTLS's too).
 *
 * Must never be called for a certificate that did not verify: it reads what
 * the certificate says and checks nothing. Identities with a NUL or a
 * control character, or longer than TLS_PEER_ID_MAX, are left out (they
 * can match no tenant: the tenants file cannot hold them); past
 * TLS_PEER_IDS_MAX - 1 URIs the rest are left out too (the CN always keeps
 * its place). The https:// listener reads its clients' so too
 * (http_tls_client_identities). Leaving one out can only
 * make a call less authenticated, never more. */
#ifndef SBX_TLS_PEER_H
#define SBX_TLS_PEER_H

#include <gnutls/gnutls.h>
#include <stddef.h>

#define TLS_PEER_IDS_MAX 8
#define TLS_PEER_ID_MAX 512 /* bytes; the tenants file's TENANT_IDENTITY_MAX */

struct tls_peer {
  unsigned n;
  char ids[TLS_PEER_IDS_MAX][TLS_PEER_ID_MAX + 1];
};

/* The identities of the session's peer certificate (the first of the chain
 * it showed) into *out; out->n 0 when there is none or it cannot be read. */
void tls_peer_read(gnutls_session_t session, struct tls_peer *out);

#endif
