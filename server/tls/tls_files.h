/* tls_files.h: the server's TLS material (--tls-cert, --tls-key,
 * --tls-key-password-file, --tls-ca, --tls-client-auth), read and checked
 * in one place for every listener that speaks TLS: nng's tls+tcp:// ones
 * (rpc/tls_listen.c) and, later, an https:// operations listener, which
 * takes the same PEM text. Parsed with mbedTLS (the library Debian's libnng
 * does its TLS with; the tls+tcp:// listeners now use GnuTLS through
 * tls_engine.c, which loads the same text and fails the start on anything it
 * refuses): a file that cannot be used, a key that does not belong to the
 * certificate, a wrong password or an expired certificate fail the start
 * with a message naming the setting and the file. Knows nothing of nng. */
#ifndef SBX_TLS_FILES_H
#define SBX_TLS_FILES_H

#include <stdbool.h>
#include <stddef.h>

#include "error.h"
#include "settings.h"

/* The largest certificate, key or CA file read (a system CA bundle is
 * about 200 KiB). */
#define TLS_FILE_MAX_BYTES (4u << 20)

struct tls_files {
  char *cert_pem;     /* the certificate (and its chain), NUL-terminated PEM */
  char *key_pem;      /* its private key */
  char *key_password; /* NULL: the key is not encrypted */
  char *ca_pem;       /* NULL: no --tls-ca, client certificates not verified */
  enum tls_client_auth client_auth;
  char subject[256];  /* the certificate's subject, for the log */
  char not_after[32]; /* "2031-01-01T00:00:00Z" */
  unsigned ca_certs;  /* certificates in the CA bundle */
};

/* Reads and checks the files the settings name (s->tls_cert and s->tls_key
 * must be set). Returns 0 with *out filled (free it with tls_files_free),
 * or -1 with err (INVALID_ARGUMENT) and nothing held. */
int tls_files_load(const struct server_settings *s, struct tls_files *out, struct sbx_error *err);
void tls_files_free(struct tls_files *f);

#endif
