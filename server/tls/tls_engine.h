/* tls_engine.h: the TLS of sandboxd's tls+tcp:// listeners, done by GnuTLS
 * through nng's TLS engine interface (nng/supplemental/tls/engine.h) in
 * place of Debian's libnng's own mbedTLS engine. Why: nng 1.5.2 tells its
 * user nothing of a peer's certificate but NNG_OPT_TLS_VERIFIED, and a
 * tenant is known by its client certificate's identities (tls_peer.h).
 *
 * The tie between a pipe and its certificate: reading NNG_OPT_TLS_VERIFIED
 * on a tls+tcp pipe calls this engine's verified() on the calling thread,
 * under nng's lock of that connection, while nng holds the pipe.
 * tls_engine_pipe_peer asks for that option with a thread-local slot set,
 * and verified() copies the connection's identities into it: no address, no
 * table, no lookup by anything a peer chooses.
 *
 * Everything else is as nng's mbedTLS engine was: TLS 1.2 (what Debian's
 * libnng clients speak), the handshake done inside nng's SP negotiation
 * (one still going 10 s after its connection came fails at its next step;
 * one whose peer went silent waits for TCP, as with mbedTLS), client
 * certificates asked for and
 * verified against --tls-ca as --tls-client-auth says (required: in the
 * handshake, which fails without a certificate that verifies; optional:
 * served either way, verified() false unless it verified; none: not asked
 * for), a failed handshake returned as NNG_EPEERAUTH or NNG_ECRYPTO (which
 * nng counts under the listener's "auth" statistic, read by
 * tls_listen_log_failures). Never blocks: GnuTLS reads and writes through
 * nng's buffers and answers EAGAIN. Server mode only: a client TLS
 * configuration made in this process after tls_engine_install fails with
 * NNG_ENOTSUP (sandboxd dials nothing over TLS). Never logs key material
 * or certificate contents. */
#ifndef SBX_TLS_ENGINE_H
#define SBX_TLS_ENGINE_H

#include <nng/nng.h>
#include <stdbool.h>

#include "error.h"
#include "tls_peer.h"

/* Makes this engine the one every nng TLS configuration made from now on
 * uses (process-wide; idempotent). Before the first nng_tls_config_alloc. */
int tls_engine_install(struct sbx_error *err);

/* What the certificate on pipe p proved: false when p did not come through
 * this engine (tcp://, ipc://, inproc://, a closed pipe); else true with
 * *verified (a client certificate that verified against --tls-ca) and, when
 * verified, its identities in *peer (peer->n 0 otherwise). */
bool tls_engine_pipe_peer(nng_pipe p, bool *verified, struct tls_peer *peer);

#endif
