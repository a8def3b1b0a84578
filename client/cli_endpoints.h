/* cli_endpoints.h: how sandbox-run, sandbox-bench and sandbox-mcp reach
 * sandboxd, alike: -e URL or --endpoint URL (repeatable: a fleet; the long
 * form because the MCP Inspector takes -e for itself), else $SANDBOX_URL
 * (comma-separated), else tcp://127.0.0.1:7878; and the TLS flags of
 * tls+tcp:// endpoints (--tls-ca, --tls-cert, --tls-key,
 * --tls-server-name); and the API key of a server with --tenants
 * (--api-key KEY, else $SANDBOX_API_KEY: docs/TENANTS.md). Each tool adds CLI_ENDPOINT_LONG_OPTIONS
 * to its getopt_long table and hands every option to cli_endpoints_option. */
#ifndef SBX_CLI_ENDPOINTS_H
#define SBX_CLI_ENDPOINTS_H

#include <getopt.h>
#include <stddef.h>

#include "sandbox_client.h"

#define CLI_MAX_URLS 64

/* getopt values of the TLS flags: above any tool's own. */
enum {
  CLI_OPT_TLS_CA = 0x1000,
  CLI_OPT_TLS_CERT,
  CLI_OPT_TLS_KEY,
  CLI_OPT_TLS_SERVER_NAME,
  CLI_OPT_API_KEY
};

#define CLI_ENDPOINT_LONG_OPTIONS                                                                  \
  {"endpoint", required_argument, NULL, 'e'}, {"tls-ca", required_argument, NULL, CLI_OPT_TLS_CA}, \
      {"tls-cert", required_argument, NULL, CLI_OPT_TLS_CERT},                                     \
      {"tls-key", required_argument, NULL, CLI_OPT_TLS_KEY},                                       \
      {"api-key", required_argument, NULL, CLI_OPT_API_KEY}, {                                     \
    "tls-server-name", required_argument, NULL, CLI_OPT_TLS_SERVER_NAME                            \
  }

struct cli_endpoints {
  const char *urls[CLI_MAX_URLS];
  size_t n;
  char *env_copy; /* $SANDBOX_URL, split in place */
  struct sbxc_tls tls;
  const char *api_key; /* --api-key, else $SANDBOX_API_KEY; NULL: none */
};

/* Takes -e or a TLS flag: 0 when opt was one of them, 1 when it is not, -1
 * after printing why it is refused (prog: the tool's name). */
int cli_endpoints_option(struct cli_endpoints *e, const char *prog, int opt, const char *arg);
/* After the options: $SANDBOX_URL or the default when no -e was given. 0,
 * or -1 after printing why. */
int cli_endpoints_finish(struct cli_endpoints *e, const char *prog);
/* Opens the client of the endpoints, with TLS when any TLS flag was given,
 * and its API key. 0, or -1 with err. */
int cli_endpoints_open(const struct cli_endpoints *e, sbxc_client **out, char *err, size_t len);
void cli_endpoints_free(struct cli_endpoints *e);

#endif
