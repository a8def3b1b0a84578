/* egress.h: the installer's only way out. pip runs in a network namespace
 * of its own per worker slot (made at start: lo up, nothing else), where
 * the only thing to reach is this proxy's socket on 127.0.0.1:EGRESS_PORT;
 * pip is given --proxy http://127.0.0.1:EGRESS_PORT. The proxy, in the
 * server and the host's namespace, serves CONNECT host:port (https) and
 * absolute-form GET/HEAD (plain-http indexes), and applies to every target
 * the policy of the server's own downloads (download.h: download-hosts,
 * public addresses only unless allowed) on the addresses it connects to,
 * and a port allowlist (80, 443, the index URL's port). With --pip-proxy it
 * hands each checked request to that upstream proxy instead of connecting
 * itself.
 *
 * Everything from the namespace is hostile (a package's build step runs
 * there): request heads are parsed strictly (egress_head.h), and each
 * tunnel has caps: head size, tunnels per build, an idle timeout, bytes
 * relayed. It must never connect to an address the policy refused, resolve
 * a name twice for one tunnel, or relay before its checks passed. */
#ifndef SBX_EGRESS_H
#define SBX_EGRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "download.h"
#include "error.h"

#define EGRESS_PORT 3128 /* inside each installer namespace: nothing else listens there */
#define EGRESS_PROXY_URL "http://127.0.0.1:3128" /* what pip is given as --proxy */

struct server_settings;

struct egress_config {
  struct download_policy policy; /* who may be reached; max_bytes: per tunnel, both ways */
  uint16_t index_port;           /* allowed besides 80 and 443 */
  char upstream_host[256];       /* --pip-proxy's host (IPv6 without brackets); "" = direct */
  uint16_t upstream_port;
  unsigned tunnels_per_build; /* open at once per slot; past it 503 */
  uint64_t idle_ms;           /* no byte either way for this long ends a tunnel */
};

struct egress_slot {
  int netns_fd;        /* the slot's installer namespace, for sandbox_spec.netns_fd */
  int listen_fd;       /* 127.0.0.1:EGRESS_PORT inside it */
  atomic_uint tunnels; /* open now */
  /* What the proxy refused during the slot's current build (under mu):
   * pip shows a refused CONNECT's reason, but logs a refused GET's only at
   * debug level, so the server tells the client itself. */
  unsigned generation; /* one per build: a straggler of the last one is not counted */
  unsigned refusals;
  unsigned unrelayed; /* refused, or left before a request: logged up to a cap */
  char first_refusal[320];
};

struct egress {
  bool initialized; /* by egress_start, even when it failed half way */
  struct egress_config cfg;
  unsigned n_slots;
  struct egress_slot *slots;
  int stop_fd; /* an eventfd, readable once stopping; in every wait */
  pthread_t acceptor;
  bool running;
  pthread_mutex_t mu;
  pthread_cond_t idle; /* signalled when a tunnel thread ends */
  unsigned active;     /* tunnel threads alive */
};

/* The configuration the settings give when an index is in force: checks
 * --pip-proxy (http://host:port, no credentials) and the index URL. -1 with
 * err for a setting the proxy cannot honour. */
int egress_config_from(const struct server_settings *s, struct egress_config *cfg,
                       struct sbx_error *err);

/* Makes one installer namespace and listener per slot, then starts the
 * thread that accepts on them. 0, or -1 with err (nothing left running). */
int egress_start(struct egress *eg, const struct egress_config *cfg, unsigned slots,
                 struct sbx_error *err);

/* The namespace pip of slot runs in; -1 when the proxy is not running. */
int egress_netns_fd(const struct egress *eg, unsigned slot);

/* Before a build in slot: forgets the refusals of the last one. */
void egress_build_begin(struct egress *eg, unsigned slot);

/* After a build in slot: how many of its requests the proxy refused or
 * could not serve, with the first one's "METHOD target: reason" in first. */
unsigned egress_build_refusals(struct egress *eg, unsigned slot, char *first, size_t len);

/* Ends every tunnel and the acceptor, and waits for their threads. Safe on
 * a zeroed struct egress that never started. */
void egress_stop(struct egress *eg);

#endif
