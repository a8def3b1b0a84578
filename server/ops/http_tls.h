/* http_tls.h: https:// on the HTTP listener. libmicrohttpd does TLS with
 * GnuTLS (as Debian builds it); the certificate, key, key password and CA
 * are the ones the tls+tcp:// listeners use, read and checked once at
 * start (server/tls/tls_files.h). TLS 1.2 and 1.3 only.
 *
 * Client certificates: with --tls-client-auth optional or required, the
 * handshake asks for one (GnuTLS verifies nothing by itself there), and
 * http_tls_client_verified checks, per request, that the connection's
 * certificate chains to --tls-ca and is valid now. */
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

/* Whether conn's peer showed a certificate that chains to --tls-ca and is
 * valid now (false on a connection without TLS or without a CA). */
bool http_tls_client_verified(struct MHD_Connection *conn);

#endif
