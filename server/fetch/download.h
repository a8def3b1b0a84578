/* download.h: fetches an input file by URL, in the server, before the run.
 * http and https only, at every hop; redirects followed by hand so that
 * each target's scheme and host are checked against the allowlist; a
 * timeout for the whole chain; a size cap enforced while receiving (a
 * Content-Length is not trusted). The body stays in memory: the caller
 * writes it into the workspace only when every download has succeeded, so
 * a failure leaves nothing behind and nothing runs. */
#ifndef SBX_DOWNLOAD_H
#define SBX_DOWNLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "error.h"

#define DOWNLOAD_URL_MAX 2048
#define DOWNLOAD_MAX_REDIRECTS 5

struct download_policy {
  const char *allowed_hosts; /* comma-separated, case-insensitive; "" = any */
  /* Connecting to an address that is not public (loopback, private,
   * link-local such as the cloud metadata service: netaddr.h) is refused
   * unless this is set or the host is named in allowed_hosts. Checked on the
   * address curl actually connects to, at every hop, so neither a name that
   * resolves inward nor a redirect gets around it. */
  bool allow_private;
  uint64_t timeout_ms;
  uint64_t max_bytes;
};

struct server_settings;
/* The policy the settings give (download-hosts, download-allow-private,
 * download-timeout-ms), with max_bytes as the size cap. */
struct download_policy download_policy_from(const struct server_settings *s, uint64_t max_bytes);

/* The policy itself, in two steps, for everything the server reaches on a
 * request's behalf: its own downloads and the installer's egress proxy
 * (egress.c). One copy, so the two can never disagree.
 * download_policy_host: may host (a name or an IP literal, as written) be
 * contacted at all? 0, or -1 with err, FAILED_PRECONDITION ("host x is not
 * in download-hosts"). download_policy_address: may one address that host
 * resolved to be connected to? Called only for a host that passed the first
 * step, on the address actually connected to, never on a name; 0, or -1
 * with err ("address 10.0.0.1 is private (10.0.0.0/8)"). */
int download_policy_host(const struct download_policy *policy, const char *host,
                         struct sbx_error *err);
int download_policy_address(const struct download_policy *policy, const struct sockaddr *sa,
                            socklen_t salen, struct sbx_error *err);

/* Once, before any thread. */
int download_global_init(void);

/* Checks a URL before anything is fetched: http:// or https://, at most
 * DOWNLOAD_URL_MAX bytes, no control characters or spaces. */
int download_url_syntax_ok(const char *url);

/* Fetches url. Returns 0 with a malloc'd body, or -1 with err,
 * FAILED_PRECONDITION saying why ("HTTP status 404", "larger than 1 MiB", "timed out after 2 s",
 * "host example.com is not in download-hosts", "address 127.0.0.1 is loopback (127.0.0.0/8) ...",
 * ...). Proxies from the environment are not used: the address check must see the real destination.
 */
int download_fetch(const struct download_policy *policy, const char *url, uint8_t **body,
                   size_t *len, struct sbx_error *err);

#endif
