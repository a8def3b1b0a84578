/* http_tls.h: https:// on the HTTP listener. libmicrohttpd does TLS with
 * GnuTLS (as Debian builds it); the certificate, key, key password and CA
 * are the ones the tls+tcp:// listeners use, read and checked once at
 * start (server/tls/tls_files.h). TLS 1.2 and 1.3 only.
 *
 * Client certificates: with --tls-client-auth optional or required, the
 * handshake asks for one. GnuTLS verifies nothing by itself there, so
 * http_tls_connection_started gives each connection a check that ends the
 * handshake when a certificate is shown that does not chain to --tls-ca or
 * is not valid now (expired): such a client never gets a request in. A
 * client that shows none gets through the handshake; then
 * http_tls_client_verified says, per request, whether the connection has a
 * verified certificate, and http_tls_client_identities what it names (for
 * the fronts' tenants). */
#ifndef SBX_OPS_HTTP_TLS_H
#define SBX_OPS_HTTP_TLS_H

#include <stdbool.h>
#include <stddef.h>

#include "tls_files.h"

struct MHD_Connection;
struct MHD_OptionItem;

/* The number of MHD options https:// adds at most. */
#define HTTP_TLS_OPTIONS_MAX 5

/* Writes the TLS options for f into o (at most HTTP_TLS_OPTIONS_MAX) and
 * returns how many. f's text must outlive MHD_start_daemon only. */
size_t http_tls_options(const struct tls_files *f, struct MHD_OptionItem *o);

/* MHD_CONNECTION_NOTIFY_STARTED of a TLS connection (before its
 * handshake): installs the check of a shown certificate. */
void http_tls_connection_started(struct MHD_Connection *conn);

/* The longest identity http_tls_client_identities gives (the tenants
 * file's TENANT_IDENTITY_MAX). */
#define HTTP_TLS_IDENTITY_MAX 512

/* What conn's verified client certificate names: each URI subjectAltName
 * (the form SPIFFE and other mesh identities take), then "CN=<common
 * name>", at most max in all (the CN always keeps its place), each
 * 1..HTTP_TLS_IDENTITY_MAX bytes of UTF-8 without control characters (others
 * are left out: no tenant can be known by them). 0 without a verified
 * certificate. */
size_t http_tls_client_identities(struct MHD_Connection *conn,
                                  char (*ids)[HTTP_TLS_IDENTITY_MAX + 1], size_t max);

/* Whether conn's peer showed a certificate that chains to --tls-ca and is
 * valid now (false on a connection without TLS or without a CA). */
bool http_tls_client_verified(struct MHD_Connection *conn);

#endif
