/* tls_listen.h: nng's side of the tls+tcp:// listeners. One nng_tls_config
 * in server mode, made from the files tls_files.c read and checked, is set
 * on every TLS listener before it starts. nng reports no failed handshake to
 * its user: they are read from each TLS listener's statistics and logged,
 * at most once a second. */
#ifndef SBX_TLS_LISTEN_H
#define SBX_TLS_LISTEN_H

#include <nng/nng.h>
#include <nng/supplemental/tls/tls.h>
#include <stdint.h>

#include "error.h"
#include "settings.h"
#include "tls_files.h"

struct tls_listen {
  nng_tls_config *config; /* NULL until the first TLS listener */
  nng_listener listeners[SETTINGS_MAX_LISTEN];
  uint64_t failed_seen[SETTINGS_MAX_LISTEN]; /* failures when last logged */
  unsigned n;
  uint64_t last_poll_ms;
};

/* Sets the TLS configuration on listener l (made on first use from files)
 * and remembers it for tls_listen_log_failures. Before nng_listener_start. */
int tls_listen_setup(struct tls_listen *t, const struct tls_files *files, nng_listener l,
                     const char *url, struct sbx_error *err);
/* Logs the handshakes each TLS listener refused since the last line
 * (event=tls_handshake_failed); does nothing more than once a second. */
void tls_listen_log_failures(struct tls_listen *t);
/* Drops our hold on the configuration (listeners keep their own). */
void tls_listen_free(struct tls_listen *t);

#endif
