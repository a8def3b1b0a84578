/* http_tls.c: see http_tls.h. */
#include "http_tls.h"
#include "tls_peer.h"

#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* No TLS before 1.2, no 1.3-less fallbacks beyond GnuTLS's defaults. */
#define HTTP_TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

size_t http_tls_options(const struct tls_files *f, struct MHD_OptionItem *o) {
  size_t i = 0;
  o[i++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, f->cert_pem};
  o[i++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, f->key_pem};
  if (f->key_password != NULL)
    o[i++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_KEY_PASSWORD, 0, f->key_password};
  /* A trust list makes MHD ask for a client certificate in the handshake;
   * without one none is asked for (--tls-client-auth none). */
  if (f->ca_pem != NULL && f->client_auth != TLS_CLIENT_AUTH_NONE)
    o[i++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, f->ca_pem};
  o[i++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, (void *)HTTP_TLS_PRIORITIES};
  return i;
}

bool http_tls_client_verified(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (info == NULL || info->tls_session == NULL)
    return false;
  gnutls_session_t session = (gnutls_session_t)info->tls_session;
  unsigned list_size = 0;
  if (gnutls_certificate_get_peers(session, &list_size) == NULL || list_size == 0)
    return false; /* none shown */
  unsigned status = 0;
  /* Against the trust list MHD set from --tls-ca, with the validity
   * period checked (GnuTLS's default). */
  return gnutls_certificate_verify_peers2(session, &status) == GNUTLS_E_SUCCESS && status == 0;
}

/* The handshake's own check of a certificate the client shows: one that
 * does not chain to --tls-ca or is not valid now (expired, not yet valid,
 * revoked by nothing we know of but signed by a stranger) ends the
 * handshake, so no request is ever read from such a connection. A client
 * that shows none goes on; whether a route serves it is the route's rule
 * (HTTP_ANY_CLIENT, 403 where a certificate is required). */
static int verify_shown_certificate(gnutls_session_t session) {
  unsigned list_size = 0;
  if (gnutls_certificate_get_peers(session, &list_size) == NULL || list_size == 0)
    return 0;
  unsigned status = 0;
  if (gnutls_certificate_verify_peers2(session, &status) != GNUTLS_E_SUCCESS || status != 0)
    return -1;
  return 0;
}

void http_tls_connection_started(struct MHD_Connection *conn) {
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  if (info != NULL && info->tls_session != NULL)
    gnutls_session_set_verify_function((gnutls_session_t)info->tls_session,
                                       verify_shown_certificate);
}

size_t http_tls_client_identities(struct MHD_Connection *conn,
                                  char (*ids)[HTTP_TLS_IDENTITY_MAX + 1], size_t max) {
  if (max == 0 || !http_tls_client_verified(conn))
    return 0;
  const union MHD_ConnectionInfo *info =
      MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
  /* The same reading as the tls+tcp:// listeners' (tls_peer.c). */
  struct tls_peer peer;
  tls_peer_read((gnutls_session_t)info->tls_session, &peer);
  size_t n = peer.n < max ? peer.n : max;
  for (size_t i = 0; i < n; i++)
    snprintf(ids[i], HTTP_TLS_IDENTITY_MAX + 1, "%s", peer.ids[i]);
  return n;
}
