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
 * a name twice for one tunnel, or relay before its checks passed.
 *
 * The same proxy is user code's only way out (RunCodeRequest.allow_net,
 * docs/EGRESS.md): a run with an allow list gets a door of its own, a
 * lease (egress_lease_open): a fresh namespace whose lo holds this proxy's
 * socket and nothing else, checked against the run's list instead of the
 * installer's policy (egress_allow.h): names match name entries, IP
 * literals CIDR entries, and every address a name resolves to (resolved
 * here only, egress_dns.h) must be public and not the server's own unless a
 * CIDR entry of the run's list contains it. A CONNECT tunnel's TLS
 * ClientHello must name the CONNECT host (egress_tls.h), else the tunnel is
 * cut. Each run's connections at once and bytes in all are capped. */
#ifndef SBX_EGRESS_H
#define SBX_EGRESS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "download.h"
#include "egress_allow.h"
#include "egress_dns.h"
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
  struct egress_dns dns;      /* how names are resolved */
  /* Runs' doors (egress_lease_open): how many at once (0: none), and each
   * run's caps. */
  unsigned run_leases;
  unsigned run_connections; /* open at once per run; past it 503 */
  uint64_t run_bytes;       /* relayed per run, both ways; past it the connection is cut */
  /* Told of every run connection as it ends (for /metrics); may be NULL. */
  void (*on_connection)(void *arg, int tenant_index, bool allowed, uint64_t up, uint64_t down);
  void *on_connection_arg;
};

/* What a run did through its door so far. */
struct egress_summary {
  uint32_t connections, refused;
  uint64_t up, down;
  char first_refusal[320]; /* "connection to x:443 refused: ..." ("" when none) */
};

enum egress_lease_state { EGRESS_LEASE_FREE, EGRESS_LEASE_OPEN, EGRESS_LEASE_CLOSING };

struct egress_lease {
  enum egress_lease_state state; /* under mu */
  unsigned index;
  int netns_fd;  /* for sandbox_spec.netns_fd */
  int listen_fd; /* 127.0.0.1:EGRESS_PORT inside it; closed by egress_lease_close */
  int stop_fd;   /* an eventfd, readable once closing: ends the lease's tunnels */
  struct egress_allow allow;
  char run_id[72], tenant[72]; /* for the log */
  int tenant_index;            /* for on_connection; -1: none */
  unsigned tunnels;            /* alive now (under mu) */
  struct egress_summary sum;   /* under mu */
  atomic_uint_fast64_t bytes_left;
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
  unsigned n_leases;
  struct egress_lease *leases;
  int stop_fd;    /* an eventfd, readable once stopping; in every wait */
  int wake_fd;    /* an eventfd: the set of doors changed */
  uint64_t epoch; /* under mu: the acceptor's rebuilds of its poll set */
  pthread_cond_t rebuilt;
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

/* The configuration of the runs' proxy (--egress-*): leases for the
 * workers and the interpreters at once. -1 with err for a bad --egress-dns. */
int egress_run_config_from(const struct server_settings *s, unsigned leases,
                           struct egress_config *cfg, struct sbx_error *err);

/* --egress-allow, --piston-allow-net (within it) and --egress-dns, before
 * anything starts: 0, or -1 with err (INVALID_ARGUMENT naming the setting). */
int egress_run_settings_check(const struct server_settings *s, struct sbx_error *err);

/* Parses a comma-separated list of allow entries (--egress-allow, the
 * Piston front's default) into list; what names it in messages. */
int egress_allow_parse_list(const char *text, const char *what, struct egress_allow *list,
                            struct sbx_error *err);

/* Makes one installer namespace and listener per slot, then starts the
 * thread that accepts on them (and on the leases, cfg->run_leases of them,
 * opened later). 0, or -1 with err (nothing left running). */
int egress_start(struct egress *eg, const struct egress_config *cfg, unsigned slots,
                 struct sbx_error *err);

/* The namespace pip of slot runs in; -1 when the proxy is not running. */
int egress_netns_fd(const struct egress *eg, unsigned slot);

/* Before a build in slot: forgets the refusals of the last one. */
void egress_build_begin(struct egress *eg, unsigned slot);

/* After a build in slot: how many of its requests the proxy refused or
 * could not serve, with the first one's "METHOD target: reason" in first. */
unsigned egress_build_refusals(struct egress *eg, unsigned slot, char *first, size_t len);

/* A door for one run: a fresh namespace with this proxy's socket on its
 * lo, checking connections against allow. 0 with *out, or -1 with err
 * (RESOURCE_EXHAUSTED when every lease is taken, INTERNAL when the
 * namespace could not be made). */
int egress_lease_open(struct egress *eg, const struct egress_allow *allow, const char *run_id,
                      const char *tenant, int tenant_index, struct egress_lease **out,
                      struct sbx_error *err);
/* Before an interpreter's call: the lease's connections are logged under
 * run_id from now on, and the next refusal is the first again; out gets
 * the counts so far (to subtract). */
void egress_lease_mark(struct egress *eg, struct egress_lease *l, const char *run_id,
                       struct egress_summary *out);
/* What the lease's connections did so far. */
void egress_lease_read(struct egress *eg, struct egress_lease *l, struct egress_summary *out);
/* Closes the door, cuts its tunnels (waiting a moment for their counts),
 * and gives the summary (out may be NULL). The run's processes must be
 * gone. */
void egress_lease_close(struct egress *eg, struct egress_lease *l, struct egress_summary *out);

/* Ends every tunnel and the acceptor, and waits for their threads. Safe on
 * a zeroed struct egress that never started. */
void egress_stop(struct egress *eg);

#endif
