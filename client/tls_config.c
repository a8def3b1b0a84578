/* tls_config.c: see tls_config.h. The PEM texts are kept while the client
 * is open (a configuration for another name may still be made from them);
 * the key's copy is wiped when it is freed. */
#include "tls_config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fail.h"

#define SBXC_TLS_FILE_MAX (4u << 20)

struct named_config {
  char *name;
  nng_tls_config *cfg;
};

struct sbxc_tls_configs {
  char *ca_pem, *cert_pem, *key_pem; /* NULL: not given */
  char *ca_file, *cert_file, *key_file, *server_name;
  struct named_config *items;
  size_t n;
};

/* A whole PEM file as a string, at most SBXC_TLS_FILE_MAX bytes. */
static int read_pem(const char *what, const char *path, char **out, char *err, size_t errlen) {
  FILE *f = fopen(path, "re");
  if (f == NULL)
    return sbxc_fail(err, errlen, "tls %s %s: %s", what, path, strerror(errno));
  struct stat st;
  char *buf = NULL;
  size_t n = 0;
  if (fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= SBXC_TLS_FILE_MAX &&
      (buf = malloc((size_t)st.st_size + 1)) != NULL)
    n = fread(buf, 1, (size_t)st.st_size, f);
  bool ok = buf != NULL && n == (size_t)st.st_size && !ferror(f);
  fclose(f);
  if (!ok) {
    free(buf);
    return sbxc_fail(err, errlen, "tls %s %s: not a readable regular file of at most %u bytes",
                     what, path, SBXC_TLS_FILE_MAX);
  }
  buf[n] = '\0';
  *out = buf;
  return 0;
}

static char *dup_or_null(const char *s, bool *oom) {
  if (s == NULL || s[0] == '\0')
    return NULL;
  char *d = strdup(s);
  *oom |= d == NULL;
  return d;
}

static int load(struct sbxc_tls_configs *c, const struct sbxc_tls *tls, char *err, size_t errlen) {
  bool oom = false;
  c->ca_file = dup_or_null(tls->ca_file, &oom);
  c->cert_file = dup_or_null(tls->cert_file, &oom);
  c->key_file = dup_or_null(tls->key_file, &oom);
  c->server_name = dup_or_null(tls->server_name, &oom);
  if (oom)
    return sbxc_fail(err, errlen, "out of memory");
  if (c->ca_file == NULL)
    return sbxc_fail(err, errlen,
                     "tls: a CA file is needed to verify the server's certificate (ca_file, "
                     "sandbox-run --tls-ca); nng reads no system CA store");
  if ((c->cert_file == NULL) != (c->key_file == NULL))
    return sbxc_fail(err, errlen,
                     "tls: give this client's certificate and its key together (cert_file and "
                     "key_file, --tls-cert and --tls-key), or neither");
  if (read_pem("ca_file", c->ca_file, &c->ca_pem, err, errlen) < 0)
    return -1;
  if (c->cert_file != NULL && (read_pem("cert_file", c->cert_file, &c->cert_pem, err, errlen) < 0 ||
                               read_pem("key_file", c->key_file, &c->key_pem, err, errlen) < 0))
    return -1;
  return 0;
}

struct sbxc_tls_configs *sbxc_tls_configs_new(const struct sbxc_tls *tls, char *err,
                                              size_t errlen) {
  struct sbxc_tls_configs *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    sbxc_fail(err, errlen, "out of memory");
    return NULL;
  }
  if (load(c, tls, err, errlen) < 0) {
    sbxc_tls_configs_free(c);
    return NULL;
  }
  return c;
}

/* A client configuration verifying the server against the CA and name. */
static nng_tls_config *make(const struct sbxc_tls_configs *c, const char *name, char *err,
                            size_t errlen) {
  nng_tls_config *cfg;
  int rv = nng_tls_config_alloc(&cfg, NNG_TLS_MODE_CLIENT);
  if (rv != 0) {
    sbxc_fail(err, errlen, "tls: nng_tls_config_alloc: %s%s", nng_strerror(rv),
              rv == NNG_ENOTSUP ? " (this libnng has no TLS engine; Debian's libnng1 has mbedTLS)"
                                : "");
    return NULL;
  }
  if ((rv = nng_tls_config_ca_chain(cfg, c->ca_pem, NULL)) != 0)
    sbxc_fail(err, errlen, "tls ca_file %s: not a PEM certificate bundle nng can use: %s",
              c->ca_file, nng_strerror(rv));
  else if (c->cert_pem != NULL &&
           (rv = nng_tls_config_own_cert(cfg, c->cert_pem, c->key_pem, NULL)) != 0)
    sbxc_fail(
        err, errlen,
        "tls cert_file %s, key_file %s: not a PEM certificate and its unencrypted key nng can "
        "use: %s",
        c->cert_file, c->key_file, nng_strerror(rv));
  else if ((rv = nng_tls_config_server_name(cfg, name)) != 0 ||
           (rv = nng_tls_config_auth_mode(cfg, NNG_TLS_AUTH_MODE_REQUIRED)) != 0)
    sbxc_fail(err, errlen, "tls: server name %s: %s", name, nng_strerror(rv));
  if (rv != 0) {
    nng_tls_config_free(cfg);
    return NULL;
  }
  return cfg;
}

nng_tls_config *sbxc_tls_configs_get(struct sbxc_tls_configs *c, const char *url_host, char *err,
                                     size_t errlen) {
  const char *name = c->server_name != NULL ? c->server_name : url_host;
  for (size_t i = 0; i < c->n; i++)
    if (strcmp(c->items[i].name, name) == 0)
      return c->items[i].cfg;
  struct named_config *items = realloc(c->items, (c->n + 1) * sizeof(*items));
  if (items == NULL) {
    sbxc_fail(err, errlen, "out of memory");
    return NULL;
  }
  c->items = items;
  char *dup = strdup(name);
  nng_tls_config *cfg = dup != NULL ? make(c, name, err, errlen) : NULL;
  if (cfg == NULL) {
    if (dup == NULL)
      sbxc_fail(err, errlen, "out of memory");
    free(dup);
    return NULL;
  }
  c->items[c->n++] = (struct named_config){dup, cfg};
  return cfg;
}

static void wipe_free(char *s) {
  if (s != NULL)
    explicit_bzero(s, strlen(s));
  free(s);
}

void sbxc_tls_configs_free(struct sbxc_tls_configs *c) {
  if (c == NULL)
    return;
  for (size_t i = 0; i < c->n; i++) {
    nng_tls_config_free(c->items[i].cfg);
    free(c->items[i].name);
  }
  free(c->items);
  free(c->ca_pem);
  free(c->cert_pem);
  wipe_free(c->key_pem);
  free(c->ca_file);
  free(c->cert_file);
  free(c->key_file);
  free(c->server_name);
  free(c);
}
