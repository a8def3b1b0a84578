/* tls_config.h: the nng_tls_config objects of one client (internal to
 * libsandbox-client). The files of struct sbxc_tls are read once, when the
 * client opens; every tls+tcp dialer of the fleet gets one of these
 * configurations before it starts.
 *
 * One per server name, not one per client: in nng 1.5.2 the name a server
 * certificate is checked against lives in the nng_tls_config, and the
 * dialer option NNG_OPT_TLS_SERVER_NAME writes into the configuration the
 * dialer holds, so dialers sharing one configuration would overwrite each
 * other's name (and race a handshake reading it). With --tls-server-name,
 * or every URL naming the same host, that is one configuration per client.
 * Made before any dialer starts and never changed afterwards, so the
 * fleet's threads read them without a lock. */
#ifndef SBXC_TLS_CONFIG_H
#define SBXC_TLS_CONFIG_H

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <stddef.h>

#include "sandbox_client.h"

struct sbxc_tls_configs;

/* Reads the files of tls (ca_file required; cert_file and key_file both or
 * neither). Returns NULL with err naming the file and what is wrong. */
struct sbxc_tls_configs *sbxc_tls_configs_new(const struct sbxc_tls *tls, char *err, size_t errlen);
/* The configuration for a URL whose host is url_host: the one of
 * tls->server_name when set, else of url_host; made on first use. NULL
 * with err when nng will not take the files. */
nng_tls_config *sbxc_tls_configs_get(struct sbxc_tls_configs *c, const char *url_host, char *err,
                                     size_t errlen);
/* Drops the client's holds (dialers keep their own). */
void sbxc_tls_configs_free(struct sbxc_tls_configs *c);

#endif
