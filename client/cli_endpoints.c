/* cli_endpoints.c: see cli_endpoints.h. */
#include "cli_endpoints.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int add_url(struct cli_endpoints *e, const char *prog, const char *from, const char *url) {
  if (e->n == CLI_MAX_URLS) {
    fprintf(stderr, "%s: %s: at most %d endpoints\n", prog, from, CLI_MAX_URLS);
    return -1;
  }
  e->urls[e->n++] = url;
  return 0;
}

int cli_endpoints_option(struct cli_endpoints *e, const char *prog, int opt, const char *arg) {
  switch (opt) {
  case 'e':
    return add_url(e, prog, "-e", arg);
  case CLI_OPT_TLS_CA:
    e->tls.ca_file = arg;
    return 0;
  case CLI_OPT_TLS_CERT:
    e->tls.cert_file = arg;
    return 0;
  case CLI_OPT_TLS_KEY:
    e->tls.key_file = arg;
    return 0;
  case CLI_OPT_TLS_SERVER_NAME:
    e->tls.server_name = arg;
    return 0;
  case CLI_OPT_API_KEY:
    e->api_key = arg;
    return 0;
  default:
    return 1;
  }
}

int cli_endpoints_finish(struct cli_endpoints *e, const char *prog) {
  if (e->api_key == NULL)
    e->api_key = getenv("SANDBOX_API_KEY");
  const char *env = getenv("SANDBOX_URL");
  if (e->n > 0)
    return 0;
  if (env == NULL || env[0] == '\0')
    return add_url(e, prog, "default", "tcp://127.0.0.1:7878");
  if ((e->env_copy = strdup(env)) == NULL) {
    fprintf(stderr, "%s: out of memory\n", prog);
    return -1;
  }
  char *save = NULL;
  for (char *u = strtok_r(e->env_copy, ",", &save); u != NULL; u = strtok_r(NULL, ",", &save))
    if (add_url(e, prog, "SANDBOX_URL", u) < 0)
      return -1;
  if (e->n == 0) {
    fprintf(stderr, "%s: SANDBOX_URL: no endpoint in \"%s\"\n", prog, env);
    return -1;
  }
  return 0;
}

int cli_endpoints_open(const struct cli_endpoints *e, sbxc_client **out, char *err, size_t len) {
  const struct sbxc_tls *t = &e->tls;
  bool tls =
      t->ca_file != NULL || t->cert_file != NULL || t->key_file != NULL || t->server_name != NULL;
  int rc = tls ? sbxc_client_open_tls(out, e->urls, e->n, t, err, len)
               : sbxc_client_open_many(out, e->urls, e->n, err, len);
  if (rc == 0 && sbxc_client_set_api_key(*out, e->api_key) < 0) {
    snprintf(err, len, "--api-key/SANDBOX_API_KEY: %s",
             errno == EINVAL ? "at most 512 bytes of printable ASCII without spaces"
                             : "out of memory");
    sbxc_client_close(*out);
    *out = NULL;
    return -1;
  }
  return rc;
}

void cli_endpoints_free(struct cli_endpoints *e) {
  free(e->env_copy);
  e->env_copy = NULL;
}
