/* tls_engine.c: see tls_engine.h. nng calls every function here with its
 * lock of the connection (or configuration) held, from its own threads:
 * nothing here may block or call back into nng other than through
 * nng_tls_engine_send/recv. */
#include "tls_engine.h"

#include "clock.h"

#include <errno.h>
#include <gnutls/gnutls.h>
#include <nng/supplemental/tls/engine.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

/* TLS 1.2 only: what nng's mbedTLS engine spoke, and what Debian's libnng
 * clients speak. */
#define TLS_ENGINE_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.2"
/* A handshake still going this long after the connection came ends at its
 * next step (nng's own 10 s negotiation timeout does not reach a handshake
 * waiting for the peer's bytes: see conn_handshake). */
#define TLS_ENGINE_HANDSHAKE_MS 10000
/* Non-fatal errors (a warning alert) taken in a row before giving up. */
#define TLS_ENGINE_RETRIES 8

struct nng_tls_engine_config {
  gnutls_certificate_credentials_t cred;
  gnutls_priority_t prio;
  nng_tls_auth_mode auth;
};

struct nng_tls_engine_conn {
  void *nng; /* nng's connection, for nng_tls_engine_send/recv */
  gnutls_session_t session;
  nng_tls_auth_mode auth;
  bool done;            /* the handshake completed */
  int failed;           /* the nng error it failed with, once it did */
  uint64_t started_ms;  /* monotonic, at init */
  bool first_read;      /* a byte came from the peer */
  bool not_tls;         /* and it was not a TLS handshake record's */
  bool verified;        /* set once, when it did */
  struct tls_peer peer; /* its identities when verified */
};

/* The slot tls_engine_pipe_peer sets around its read of the option. */
struct capture {
  bool seen, verified;
  struct tls_peer *peer;
};
static _Thread_local struct capture *capture;

/* ---- configuration ---- */

static int config_init(nng_tls_engine_config *cfg, nng_tls_mode mode) {
  if (mode != NNG_TLS_MODE_SERVER)
    return NNG_ENOTSUP;
  cfg->auth = NNG_TLS_AUTH_MODE_NONE;
  if (gnutls_certificate_allocate_credentials(&cfg->cred) < 0)
    return NNG_ENOMEM;
  if (gnutls_priority_init(&cfg->prio, TLS_ENGINE_PRIORITIES, NULL) < 0) {
    gnutls_certificate_free_credentials(cfg->cred);
    return NNG_ENOMEM;
  }
  return 0;
}

static void config_fini(nng_tls_engine_config *cfg) {
  gnutls_priority_deinit(cfg->prio);
  gnutls_certificate_free_credentials(cfg->cred);
}

static int config_server(nng_tls_engine_config *cfg, const char *name) {
  (void)cfg;
  (void)name; /* a client's business (SNI, the name it checks) */
  return 0;
}

static int config_auth(nng_tls_engine_config *cfg, nng_tls_auth_mode mode) {
  if (mode != NNG_TLS_AUTH_MODE_NONE && mode != NNG_TLS_AUTH_MODE_OPTIONAL &&
      mode != NNG_TLS_AUTH_MODE_REQUIRED)
    return NNG_EINVAL;
  cfg->auth = mode;
  return 0;
}

static gnutls_datum_t datum(const char *pem) {
  return (gnutls_datum_t){(unsigned char *)pem, (unsigned)strlen(pem)};
}

static int config_ca_chain(nng_tls_engine_config *cfg, const char *ca, const char *crl) {
  gnutls_datum_t d = datum(ca);
  if (gnutls_certificate_set_x509_trust_mem(cfg->cred, &d, GNUTLS_X509_FMT_PEM) <= 0)
    return NNG_EINVAL; /* none read */
  if (crl != NULL) {
    d = datum(crl);
    if (gnutls_certificate_set_x509_crl_mem(cfg->cred, &d, GNUTLS_X509_FMT_PEM) < 0)
      return NNG_EINVAL;
  }
  return 0;
}

static int config_own_cert(nng_tls_engine_config *cfg, const char *cert, const char *key,
                           const char *pass) {
  gnutls_datum_t c = datum(cert), k = datum(key);
  if (gnutls_certificate_set_x509_key_mem2(cfg->cred, &c, &k, GNUTLS_X509_FMT_PEM, pass, 0) < 0)
    return NNG_EINVAL;
  return 0;
}

static int config_version(nng_tls_engine_config *cfg, nng_tls_version min, nng_tls_version max) {
  (void)cfg;
  return min <= NNG_TLS_1_2 && max >= NNG_TLS_1_2 ? 0 : NNG_ENOTSUP;
}

/* ---- the transport under GnuTLS: nng's buffers, never blocking ---- */

/* The first byte from a client must open a TLS handshake record (content
 * type 22): GnuTLS would wait for the rest of a "record" made of other
 * bytes (nng's SP header, a plain tcp:// client) until nng's 10 s
 * negotiation timeout; mbedTLS refused them at once, and so does this. */
#define TLS_RECORD_HANDSHAKE 22

static ssize_t pull(gnutls_transport_ptr_t p, void *buf, size_t len) {
  struct nng_tls_engine_conn *ec = p;
  size_t n = len;
  int rv = nng_tls_engine_recv(ec->nng, buf, &n);
  if (rv == 0 && n > 0 && !ec->first_read) {
    ec->first_read = true;
    ec->not_tls = ((const uint8_t *)buf)[0] != TLS_RECORD_HANDSHAKE;
  }
  if (rv == 0 && ec->not_tls)
    rv = NNG_EPROTO;
  if (rv == 0)
    return (ssize_t)n;
  gnutls_transport_set_errno(ec->session, rv == NNG_EAGAIN ? EAGAIN : ECONNRESET);
  return -1;
}

static ssize_t push(gnutls_transport_ptr_t p, const void *buf, size_t len) {
  struct nng_tls_engine_conn *ec = p;
  size_t n = len;
  int rv = nng_tls_engine_send(ec->nng, buf, &n);
  if (rv == 0)
    return (ssize_t)n;
  gnutls_transport_set_errno(ec->session, rv == NNG_EAGAIN ? EAGAIN : ECONNRESET);
  return -1;
}

/* GnuTLS wants one beside a custom pull (else it would select() on the
 * pointer as if it were a descriptor). "Data may be there": the pull that
 * follows says EAGAIN when it is not. */
static int pull_timeout(gnutls_transport_ptr_t p, unsigned ms) {
  (void)p;
  (void)ms;
  return 1;
}

/* A GnuTLS error as nng's: the connection went away, the peer's
 * certificate was the problem, or anything else the TLS layer refused.
 * EPEERAUTH and ECRYPTO both count as a listener's "auth" failures. Never
 * NNG_ECLOSED: an error of the handshake or of the SP header exchange ends
 * nng's accept, and nng 1.5.2's listener stops accepting for good after an
 * accept that failed with ECLOSED (listener_accept_cb); ECONNRESET makes it
 * accept the next connection at once. */
static int nng_error(int rv) {
  switch (rv) {
  case GNUTLS_E_AGAIN:
  case GNUTLS_E_INTERRUPTED:
    return NNG_EAGAIN;
  case GNUTLS_E_PULL_ERROR:
  case GNUTLS_E_PUSH_ERROR:
  case GNUTLS_E_PREMATURE_TERMINATION:
    return NNG_ECONNRESET;
  case GNUTLS_E_MEMORY_ERROR:
    return NNG_ENOMEM;
  case GNUTLS_E_NO_CERTIFICATE_FOUND:
  case GNUTLS_E_CERTIFICATE_REQUIRED:
  case GNUTLS_E_CERTIFICATE_ERROR:
  case GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR:
    return NNG_EPEERAUTH;
  default:
    return NNG_ECRYPTO;
  }
}

/* ---- connections ---- */

static int conn_init(nng_tls_engine_conn *ec, void *nng, nng_tls_engine_config *cfg) {
  ec->nng = nng;
  ec->auth = cfg->auth;
  ec->started_ms = sbx_monotonic_ms();
  if (gnutls_init(&ec->session, GNUTLS_SERVER | GNUTLS_NONBLOCK | GNUTLS_NO_SIGNAL) < 0)
    return NNG_ENOMEM;
  if (gnutls_priority_set(ec->session, cfg->prio) < 0 ||
      gnutls_credentials_set(ec->session, GNUTLS_CRD_CERTIFICATE, cfg->cred) < 0) {
    gnutls_deinit(ec->session);
    ec->session = NULL;
    return NNG_ENOMEM;
  }
  switch (cfg->auth) {
  case NNG_TLS_AUTH_MODE_REQUIRED:
    gnutls_certificate_server_set_request(ec->session, GNUTLS_CERT_REQUIRE);
    /* Verified in the handshake (no name: a client's is not checked). */
    gnutls_session_set_verify_cert(ec->session, NULL, 0);
    break;
  case NNG_TLS_AUTH_MODE_OPTIONAL:
    gnutls_certificate_server_set_request(ec->session, GNUTLS_CERT_REQUEST);
    break;
  default:
    gnutls_certificate_server_set_request(ec->session, GNUTLS_CERT_IGNORE);
    break;
  }
  /* GnuTLS's own timer is off: conn_handshake bounds the handshake. */
  gnutls_handshake_set_timeout(ec->session, 0);
  gnutls_transport_set_ptr(ec->session, ec);
  gnutls_transport_set_pull_function(ec->session, pull);
  gnutls_transport_set_pull_timeout_function(ec->session, pull_timeout);
  gnutls_transport_set_push_function(ec->session, push);
  return 0;
}

static void conn_fini(nng_tls_engine_conn *ec) {
  if (ec->session != NULL)
    gnutls_deinit(ec->session);
  ec->session = NULL;
}

static void conn_close(nng_tls_engine_conn *ec) {
  /* After a handshake, a close_notify if it fits nng's buffer now (as
   * mbedTLS: none before); nng closes the TCP side. */
  if (ec->session != NULL && ec->done)
    (void)gnutls_bye(ec->session, GNUTLS_SHUT_WR);
}

/* After a completed handshake: whether a client certificate verified
 * against --tls-ca (GnuTLS checks the chain and the validity period), and
 * its identities when it did. */
static void settle_peer(nng_tls_engine_conn *ec) {
  unsigned status = 1, n = 0;
  ec->verified = ec->auth != NNG_TLS_AUTH_MODE_NONE &&
                 gnutls_certificate_get_peers(ec->session, &n) != NULL && n > 0 &&
                 gnutls_certificate_verify_peers2(ec->session, &status) == GNUTLS_E_SUCCESS &&
                 status == 0;
  ec->peer.n = 0;
  if (ec->verified)
    tls_peer_read(ec->session, &ec->peer);
}

/* Why a client certificate did not verify, as the alert a client can show
 * its user (what mbedTLS sent: "unknown ca", "certificate expired"). */
static gnutls_alert_description_t verify_alert(gnutls_session_t session) {
  unsigned status = gnutls_session_get_verify_cert_status(session);
  if (status & GNUTLS_CERT_REVOKED)
    return GNUTLS_A_CERTIFICATE_REVOKED;
  if (status & (GNUTLS_CERT_SIGNER_NOT_FOUND | GNUTLS_CERT_SIGNER_NOT_CA))
    return GNUTLS_A_UNKNOWN_CA;
  if (status & (GNUTLS_CERT_EXPIRED | GNUTLS_CERT_NOT_ACTIVATED))
    return GNUTLS_A_CERTIFICATE_EXPIRED;
  return GNUTLS_A_BAD_CERTIFICATE;
}

static int handshake_step(nng_tls_engine_conn *ec) {
  int rv = gnutls_handshake(ec->session);
  for (int i = 0; i < TLS_ENGINE_RETRIES && rv < 0 && rv != GNUTLS_E_AGAIN &&
                  rv != GNUTLS_E_INTERRUPTED && !gnutls_error_is_fatal(rv);
       i++)
    rv = gnutls_handshake(ec->session);
  if (rv == 0) {
    settle_peer(ec);
    /* required: GnuTLS verified it already; fail closed all the same. */
    return ec->auth == NNG_TLS_AUTH_MODE_REQUIRED && !ec->verified ? NNG_EPEERAUTH : 0;
  }
  if (rv == GNUTLS_E_AGAIN || rv == GNUTLS_E_INTERRUPTED)
    return NNG_EAGAIN; /* nng calls again when bytes came or left */
  if (ec->not_tls)
    return NNG_ECRYPTO; /* a peer not speaking TLS: counted with the rest */
  if (!gnutls_error_is_fatal(rv))
    return NNG_ECRYPTO; /* warnings past TLS_ENGINE_RETRIES */
  int err = nng_error(rv);
  if (rv == GNUTLS_E_CERTIFICATE_VERIFICATION_ERROR)
    (void)gnutls_alert_send(ec->session, GNUTLS_AL_FATAL, verify_alert(ec->session));
  else if (err != NNG_ECONNRESET)
    (void)gnutls_alert_send_appropriate(ec->session, rv); /* best effort: why, to the client */
  return err;
}

/* Once done it stays done; once failed it stays failed. A handshake past
 * TLS_ENGINE_HANDSHAKE_MS fails at its next step (a peer dripping bytes):
 * nng 1.5.2's negotiation timeout cancels its send, which aborts only an
 * active TCP send (tls_cancel), so it does not end a handshake waiting
 * for bytes. A peer that sends nothing more is not reached by either. */
static int conn_handshake(nng_tls_engine_conn *ec) {
  if (ec->done)
    return 0;
  if (ec->failed == 0 && sbx_monotonic_ms() - ec->started_ms > TLS_ENGINE_HANDSHAKE_MS)
    ec->failed = NNG_ETIMEDOUT;
  if (ec->failed != 0)
    return ec->failed;
  int rv = handshake_step(ec);
  if (rv == 0)
    ec->done = true;
  else if (rv != NNG_EAGAIN)
    ec->failed = rv;
  return rv;
}

/* nng sends and receives before it knows the handshake is done (its
 * mbedTLS engine's reads and writes do the handshake first): so do these. */
static int conn_recv(nng_tls_engine_conn *ec, uint8_t *buf, size_t *szp) {
  int hs = conn_handshake(ec);
  if (hs != 0)
    return hs;
  ssize_t rv = gnutls_record_recv(ec->session, buf, *szp);
  for (int i = 0;
       i < TLS_ENGINE_RETRIES && rv < 0 && rv != GNUTLS_E_AGAIN && rv != GNUTLS_E_INTERRUPTED &&
       rv != GNUTLS_E_REHANDSHAKE && !gnutls_error_is_fatal((int)rv);
       i++)
    rv = gnutls_record_recv(ec->session, buf, *szp);
  if (rv > 0) {
    *szp = (size_t)rv;
    return 0;
  }
  if (rv == 0)
    return NNG_ECONNSHUT; /* the peer's close_notify: as TCP's end (never ECLOSED) */
  /* GNUTLS_E_REHANDSHAKE among the rest: a renegotiation could change the
   * certificate under a pipe already authenticated, so it ends the
   * connection (nng's clients never ask for one). */
  return nng_error((int)rv);
}

static int conn_send(nng_tls_engine_conn *ec, const uint8_t *buf, size_t *szp) {
  int hs = conn_handshake(ec);
  if (hs != 0)
    return hs;
  /* After EAGAIN nng calls again with the same bytes, as GnuTLS needs. */
  ssize_t rv = gnutls_record_send(ec->session, buf, *szp);
  if (rv >= 0) {
    *szp = (size_t)rv;
    return 0;
  }
  return nng_error((int)rv);
}

static bool conn_verified(nng_tls_engine_conn *ec) {
  if (capture != NULL) {
    capture->seen = true;
    capture->verified = ec->verified;
    capture->peer->n = 0;
    if (ec->verified)
      *capture->peer = ec->peer;
  }
  return ec->verified;
}

static nng_tls_engine_config_ops config_ops = {
    .size = sizeof(struct nng_tls_engine_config),
    .init = config_init,
    .fini = config_fini,
    .server = config_server,
    .auth = config_auth,
    .ca_chain = config_ca_chain,
    .own_cert = config_own_cert,
    .version = config_version,
};

static nng_tls_engine_conn_ops conn_ops = {
    .size = sizeof(struct nng_tls_engine_conn),
    .init = conn_init,
    .fini = conn_fini,
    .close = conn_close,
    .handshake = conn_handshake,
    .recv = conn_recv,
    .send = conn_send,
    .verified = conn_verified,
};

static const nng_tls_engine engine = {
    .version = NNG_TLS_ENGINE_VERSION,
    .config_ops = &config_ops,
    .conn_ops = &conn_ops,
    .name = "sandboxd-gnutls",
    .description = "GnuTLS, sandboxd's tls+tcp:// server engine (reads client certificates)",
    .fips_mode = false,
};

int tls_engine_install(struct sbx_error *err) {
  /* nng_tls_engine_register does not initialise nng (and nng's
   * initialisation registers mbedTLS): this call does it first. */
  (void)nng_tls_engine_name();
  int rv = nng_tls_engine_register(&engine);
  if (rv != 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "tls: nng_tls_engine_register: %s",
                         nng_strerror(rv));
  return 0;
}

bool tls_engine_pipe_peer(nng_pipe p, bool *verified, struct tls_peer *peer) {
  struct capture c = {.peer = peer};
  bool v = false;
  peer->n = 0;
  capture = &c;
  int rv = nng_pipe_get_bool(p, NNG_OPT_TLS_VERIFIED, &v);
  capture = NULL;
  *verified = rv == 0 && c.seen && c.verified && v;
  if (!*verified)
    peer->n = 0;
  return rv == 0 && c.seen;
}
