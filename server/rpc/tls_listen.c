/* tls_listen.c: see tls_listen.h. nng 1.5.2's tls+tcp transport with
 * sandboxd's GnuTLS engine (tls_engine.h, installed before the configuration
 * is made): TLS 1.2 only, the handshake done during nng's own SP header
 * exchange, so a
 * connection that fails it never becomes a pipe: no call can come from it,
 * and nothing in conns.c or the queue sees it. Never logs key material. */
#include "tls_listen.h"

#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "nngstat.h"
#include "tls_engine.h"

static nng_tls_auth_mode auth_mode(enum tls_client_auth mode) {
  switch (mode) {
  case TLS_CLIENT_AUTH_REQUIRED:
    return NNG_TLS_AUTH_MODE_REQUIRED;
  case TLS_CLIENT_AUTH_OPTIONAL:
    return NNG_TLS_AUTH_MODE_OPTIONAL;
  case TLS_CLIENT_AUTH_NONE:
    break;
  }
  return NNG_TLS_AUTH_MODE_NONE;
}

/* One server configuration from the checked files. nng_tls_config_own_cert
 * takes the certificate and the key as two PEM texts (its _file variant
 * wants both in one file). */
static int make_config(const struct tls_files *files, nng_tls_config **out, struct sbx_error *err) {
  if (tls_engine_install(err) < 0)
    return -1;
  nng_tls_config *cfg;
  int rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_SERVER);
  if (rv == NNG_ENOTSUP)
    return sbx_error_set(err, SBX_INTERNAL, 0,
                         "tls: this libnng has no TLS engine (Debian's libnng1 has mbedTLS)");
  if (rv != 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "tls: nng_tls_config_alloc: %s", nng_strerror(rv));
  const char *what = "certificate and key";
  rv = nng_tls_config_own_cert(cfg, files->cert_pem, files->key_pem, files->key_password);
  if (rv == 0 && files->ca_pem != NULL) {
    what = "CA bundle";
    rv = nng_tls_config_ca_chain(cfg, files->ca_pem, NULL);
  }
  if (rv == 0) {
    what = "client authentication mode";
    rv = nng_tls_config_auth_mode(cfg, auth_mode(files->client_auth));
  }
  if (rv != 0) {
    nng_tls_config_free(cfg);
    return sbx_error_set(err, SBX_INTERNAL, 0, "tls: nng refused the %s: %s", what,
                         nng_strerror(rv));
  }
  *out = cfg;
  return 0;
}

int tls_listen_setup(struct tls_listen *t, const struct tls_files *files, nng_listener l,
                     const char *url, struct sbx_error *err) {
  if (t->config == NULL && make_config(files, &t->config, err) < 0)
    return -1;
  int rv = nng_listener_set_ptr(l, NNG_OPT_TLS_CONFIG, t->config);
  if (rv != 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "listen %s: tls config: %s", url, nng_strerror(rv));
  if (t->n < SETTINGS_MAX_LISTEN)
    t->listeners[t->n++] = l;
  return 0;
}

/* nng counts a handshake that failed on a listener under "auth" (the
 * engine's NNG_EPEERAUTH and NNG_ECRYPTO: no client certificate, one that
 * did not verify, a fatal alert from a client that refused ours, bytes that
 * are not TLS). Its other
 * error counters ("other", "disconnect") also count established
 * connections that ended, so they say nothing here; a client that drops
 * the connection without an alert when it refuses our certificate (node:tls
 * does) is not counted: that client says why. */
static void log_listener(struct tls_listen *t, unsigned i, nng_stat *stats) {
  nng_stat *ls = sbx_nngstat_scope(stats, "listener", (uint32_t)nng_listener_id(t->listeners[i]));
  if (ls == NULL)
    return;
  uint64_t failed = sbx_nngstat_value(ls, "auth");
  if (failed == t->failed_seen[i])
    return;
  char *url = NULL;
  if (nng_listener_get_string(t->listeners[i], NNG_OPT_URL, &url) != 0)
    url = NULL;
  log_line("tls_handshake_failed",
           "listener=%s count=%llu total=%llu msg=\"TLS handshakes that failed, each closing its "
           "connection before anything was received: no client certificate, one that did not "
           "verify against --tls-ca (another CA, expired), a client that refused this server's "
           "certificate, or a peer not speaking TLS\"",
           url != NULL ? url : "?", (unsigned long long)(failed - t->failed_seen[i]),
           (unsigned long long)failed);
  nng_strfree(url);
  t->failed_seen[i] = failed;
}

void tls_listen_log_failures(struct tls_listen *t) {
  uint64_t now = sbx_monotonic_ms();
  if (t->n == 0 || now - t->last_poll_ms < 1000)
    return;
  t->last_poll_ms = now;
  nng_stat *stats;
  if (nng_stats_get(&stats) != 0)
    return;
  for (unsigned i = 0; i < t->n; i++)
    log_listener(t, i, stats);
  nng_stats_free(stats);
}

void tls_listen_free(struct tls_listen *t) {
  if (t->config != NULL)
    nng_tls_config_free(t->config);
  t->config = NULL;
}
