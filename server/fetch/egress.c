/* egress.c: see egress.h. The settings, the doors (the installer's slots,
 * made at start, and the runs' leases, opened and closed per run) and the
 * one acceptor thread that polls their listeners; each accepted connection
 * becomes a tunnel (egress_tunnel.c). Every wait also polls stop_fd, so
 * egress_stop ends them all. */
#include "egress.h"

#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "cleanup.h"
#include "sandbox/sandbox.h"
#include "egress_tunnel.h"
#include "settings.h"

/* What the proxy needs of a configured URL, from libcurl's parser; parts
 * the URL lacks are NULL. */
struct url_parts {
  char *scheme, *host, *port, *user, *path, *query;
};

static void url_parts_free(struct url_parts *p) {
  char *parts[] = {p->scheme, p->host, p->port, p->user, p->path, p->query};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
    curl_free(parts[i]);
  memset(p, 0, sizeof *p);
}

/* default_port: the scheme's port when the URL names none. */
static int url_split(const char *url, bool default_port, struct url_parts *p) {
  memset(p, 0, sizeof *p);
  CURLU *u = curl_url();
  if (u == NULL || curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_SCHEME, &p->scheme, 0) != CURLUE_OK ||
      curl_url_get(u, CURLUPART_HOST, &p->host, 0) != CURLUE_OK) {
    curl_url_cleanup(u);
    url_parts_free(p);
    return -1;
  }
  /* Optional parts: absent ones stay NULL. */
  curl_url_get(u, CURLUPART_PORT, &p->port, default_port ? CURLU_DEFAULT_PORT : 0);
  curl_url_get(u, CURLUPART_USER, &p->user, 0);
  curl_url_get(u, CURLUPART_PATH, &p->path, 0);
  curl_url_get(u, CURLUPART_QUERY, &p->query, 0);
  curl_url_cleanup(u);
  return 0;
}

/* The host without an IPv6 literal's brackets, and the port. */
static int url_host_port(const struct url_parts *p, char *host, size_t hostlen, uint16_t *port) {
  size_t n = strlen(p->host);
  const char *start = p->host;
  if (n >= 2 && start[0] == '[' && start[n - 1] == ']')
    start++, n -= 2;
  long v = p->port != NULL ? strtol(p->port, NULL, 10) : 0;
  if (n == 0 || n >= hostlen || v < 1 || v > 65535)
    return -1;
  memcpy(host, start, n);
  host[n] = '\0';
  *port = (uint16_t)v;
  return 0;
}

/* Only the index URL's port matters to the proxy (the port allowlist). */
static int index_port(const char *url, uint16_t *port, struct sbx_error *err) {
  struct url_parts p;
  char host[256];
  if (url_split(url, true, &p) < 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "index-url: \"%s\" is not a URL", url);
  int rv = url_host_port(&p, host, sizeof host, port);
  url_parts_free(&p);
  return rv == 0 ? 0
                 : sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                                 "index-url: no host or port in \"%s\"", url);
}

/* --pip-proxy: http://host:port and nothing more (no credentials: the proxy
 * would have to send them, and they would show in logs and GetInfo). */
static int upstream(const char *url, struct egress_config *cfg, struct sbx_error *err) {
  struct url_parts p;
  if (url_split(url, false, &p) < 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "pip-proxy: \"%s\" is not a URL", url);
  bool plain = strcmp(p.scheme, "http") == 0 && p.user == NULL && p.query == NULL &&
               (p.path == NULL || strcmp(p.path, "/") == 0);
  int rv = plain && p.port != NULL ? url_host_port(&p, cfg->upstream_host,
                                                   sizeof cfg->upstream_host, &cfg->upstream_port)
                                   : -1;
  url_parts_free(&p);
  return rv == 0 ? 0
                 : sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                                 "pip-proxy: \"%s\" is not http://host:port (a port, and no "
                                 "credentials, path or query)",
                                 url);
}

static int dns_from(const struct server_settings *s, struct egress_config *cfg,
                    struct sbx_error *err) {
  char why[200];
  if (egress_dns_parse(s->egress_dns, &cfg->dns, why, sizeof why) < 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s", why); /* names the setting */
  return 0;
}

int egress_config_from(const struct server_settings *s, struct egress_config *cfg,
                       struct sbx_error *err) {
  memset(cfg, 0, sizeof *cfg);
  cfg->policy = download_policy_from(s, (uint64_t)s->pip_disk_bytes);
  cfg->tunnels_per_build = (unsigned)s->pip_tunnels;
  cfg->idle_ms = (uint64_t)s->pip_idle_timeout_ms;
  if (index_port(settings_index_url(s), &cfg->index_port, err) < 0)
    return -1;
  if (s->pip_proxy[0] != '\0' && upstream(s->pip_proxy, cfg, err) < 0)
    return -1;
  return dns_from(s, cfg, err);
}

int egress_run_config_from(const struct server_settings *s, unsigned leases,
                           struct egress_config *cfg, struct sbx_error *err) {
  memset(cfg, 0, sizeof *cfg);
  cfg->idle_ms = (uint64_t)s->pip_idle_timeout_ms;
  cfg->run_leases = leases;
  cfg->run_connections = (unsigned)s->egress_connections;
  cfg->run_bytes = (uint64_t)s->egress_bytes;
  return dns_from(s, cfg, err);
}

int egress_run_settings_check(const struct server_settings *s, struct sbx_error *err) {
  struct egress_allow ceiling, piston;
  struct egress_config cfg;
  if (egress_allow_parse_list(s->egress_allow, "egress-allow", &ceiling, err) < 0 ||
      egress_allow_parse_list(s->piston_allow_net, "piston-allow-net", &piston, err) < 0 ||
      dns_from(s, &cfg, err) < 0)
    return -1;
  for (size_t i = 0; i < piston.n; i++)
    if (!egress_allow_within(&piston.e[i], &ceiling)) {
      char text[EGRESS_ALLOW_ENTRY_MAX + 8];
      egress_allow_format(&piston.e[i], text, sizeof text);
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "piston-allow-net: \"%s\" is not within egress-allow", text);
    }
  return 0;
}

int egress_allow_parse_list(const char *text, const char *what, struct egress_allow *list,
                            struct sbx_error *err) {
  memset(list, 0, sizeof *list);
  const char *p = text;
  while (*p != '\0') {
    size_t n = strcspn(p, ",");
    char entry[EGRESS_ALLOW_ENTRY_MAX + 2], why[200];
    if (n == 0 || n > EGRESS_ALLOW_ENTRY_MAX)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: an entry of %zu bytes (1-%d)", what,
                           n, EGRESS_ALLOW_ENTRY_MAX);
    if (list->n == EGRESS_ALLOW_MAX)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: more than %d entries", what,
                           EGRESS_ALLOW_MAX);
    memcpy(entry, p, n);
    entry[n] = '\0';
    if (egress_allow_parse(entry, &list->e[list->n], why, sizeof why) < 0)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: \"%s\": %s", what, entry, why);
    list->n++;
    p += n;
    if (*p == ',' && *++p == '\0')
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "%s: an empty entry at the end", what);
  }
  return 0;
}

/* ---- accepting ---- */

static void accept_one(struct egress *eg, unsigned slot) {
  struct egress_slot *sl = &eg->slots[slot];
  int fd = accept4(sl->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0)
    return;
  if (atomic_fetch_add(&sl->tunnels, 1) >= eg->cfg.tunnels_per_build) {
    atomic_fetch_sub(&sl->tunnels, 1);
    char why[160];
    snprintf(why, sizeof why, "more than %u connections at once for one build (pip-tunnels)",
             eg->cfg.tunnels_per_build);
    egress_tunnel_refuse(eg, NULL, slot, fd, 503, why);
    return;
  }
  if (egress_tunnel_spawn(eg, NULL, slot, fd) < 0) {
    atomic_fetch_sub(&sl->tunnels, 1);
    egress_tunnel_refuse(eg, NULL, slot, fd, 503, "the proxy could not start a tunnel");
  }
}

/* A connection on a run's door: a tunnel, counted against the lease (and
 * its cap), while the lease is open. */
static void accept_run(struct egress *eg, struct egress_lease *l) {
  int fd = accept4(l->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0)
    return;
  pthread_mutex_lock(&eg->mu);
  bool open = l->state == EGRESS_LEASE_OPEN;
  bool room = open && l->tunnels < eg->cfg.run_connections;
  if (room)
    l->tunnels++;
  if (open) /* counted now: a call reading the summary has seen every connection it made */
    l->sum.connections++;
  pthread_mutex_unlock(&eg->mu);
  if (!open) {
    close(fd);
    return;
  }
  char why[200];
  if (!room) {
    snprintf(why, sizeof why,
             "connection refused: more than %u connections at once for one run "
             "(egress-connections)",
             eg->cfg.run_connections);
    egress_tunnel_refuse(eg, l, 0, fd, 503, why);
    return;
  }
  if (egress_tunnel_spawn(eg, l, 0, fd) < 0) {
    pthread_mutex_lock(&eg->mu);
    l->tunnels--;
    pthread_mutex_unlock(&eg->mu);
    egress_tunnel_refuse(eg, l, 0, fd, 503,
                         "connection refused: the proxy could not start a tunnel");
  }
}

/* The poll set: the installer's slots, the open leases, wake and stop.
 * Rebuilt under mu on every round, so a lease closed meanwhile is out of it
 * once the round that follows its close has begun (epoch). */
static size_t acceptor_set(struct egress *eg, struct pollfd *p, struct egress_lease **who) {
  size_t n = 0;
  for (unsigned i = 0; i < eg->n_slots; i++, n++) {
    p[n] = (struct pollfd){.fd = eg->slots[i].listen_fd, .events = POLLIN};
    who[n] = NULL;
  }
  pthread_mutex_lock(&eg->mu);
  for (unsigned i = 0; i < eg->n_leases; i++)
    if (eg->leases[i].state == EGRESS_LEASE_OPEN) {
      p[n] = (struct pollfd){.fd = eg->leases[i].listen_fd, .events = POLLIN};
      who[n++] = &eg->leases[i];
    }
  eg->epoch++;
  pthread_cond_broadcast(&eg->rebuilt);
  pthread_mutex_unlock(&eg->mu);
  p[n++] = (struct pollfd){.fd = eg->wake_fd, .events = POLLIN};
  p[n++] = (struct pollfd){.fd = eg->stop_fd, .events = POLLIN};
  return n;
}

static void *acceptor_main(void *arg) {
  struct egress *eg = arg;
  size_t cap = eg->n_slots + eg->n_leases + 2;
  cleanup_free struct pollfd *p = calloc(cap, sizeof *p);
  cleanup_free struct egress_lease **who = calloc(cap, sizeof *who);
  if (p == NULL || who == NULL) {
    log_line("egress_failed", "error=\"out of memory\"");
    return NULL;
  }
  for (;;) {
    size_t n = acceptor_set(eg, p, who);
    if (poll(p, n, -1) < 0 && errno != EINTR) {
      log_line("egress_failed", "error=\"poll: %s\"", strerror(errno));
      break;
    }
    if (p[n - 1].revents != 0)
      break;
    if (p[n - 2].revents != 0) {
      uint64_t v;
      ssize_t r = read(eg->wake_fd, &v, sizeof v);
      (void)r;
    }
    for (size_t i = 0; i + 2 < n; i++) {
      if (!(p[i].revents & POLLIN))
        continue;
      if (who[i] != NULL)
        accept_run(eg, who[i]);
      else
        accept_one(eg, (unsigned)i);
    }
  }
  return NULL;
}

/* ---- start and stop ---- */

int egress_start(struct egress *eg, const struct egress_config *cfg, unsigned slots,
                 struct sbx_error *err) {
  memset(eg, 0, sizeof *eg);
  eg->cfg = *cfg;
  eg->stop_fd = eg->wake_fd = -1;
  pthread_mutex_init(&eg->mu, NULL);
  pthread_cond_init(&eg->idle, NULL);
  pthread_cond_init(&eg->rebuilt, NULL);
  eg->initialized = true;
  eg->slots = calloc(slots + 1, sizeof *eg->slots);
  eg->leases = calloc(cfg->run_leases + 1, sizeof *eg->leases);
  eg->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  eg->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (eg->slots == NULL || eg->leases == NULL || eg->stop_fd < 0 || eg->wake_fd < 0) {
    egress_stop(eg);
    return sbx_error_set(err, SBX_INTERNAL, errno, "egress proxy");
  }
  eg->n_leases = cfg->run_leases;
  for (unsigned i = 0; i < eg->n_leases; i++)
    eg->leases[i] = (struct egress_lease){
        .index = i, .netns_fd = -1, .listen_fd = -1, .stop_fd = -1, .tenant_index = -1};
  eg->n_slots = slots;
  for (unsigned i = 0; i < slots; i++)
    eg->slots[i].netns_fd = eg->slots[i].listen_fd = -1;
  for (unsigned i = 0; i < slots; i++) {
    struct sandbox_error e = {0};
    eg->slots[i].netns_fd = sandbox_netns_create(EGRESS_PORT, &eg->slots[i].listen_fd, &e);
    if (eg->slots[i].netns_fd < 0) {
      egress_stop(eg);
      return sbx_error_set(err, SBX_INTERNAL, 0, "egress proxy: installer namespace of slot %u: %s",
                           i, e.msg);
    }
  }
  int rc = pthread_create(&eg->acceptor, NULL, acceptor_main, eg);
  if (rc != 0) {
    egress_stop(eg);
    return sbx_error_set(err, SBX_INTERNAL, rc, "egress proxy: thread");
  }
  eg->running = true;
  return 0;
}

void egress_build_begin(struct egress *eg, unsigned slot) {
  if (!eg->running || slot >= eg->n_slots)
    return;
  pthread_mutex_lock(&eg->mu);
  eg->slots[slot].generation++;
  eg->slots[slot].refusals = 0;
  eg->slots[slot].unrelayed = 0;
  eg->slots[slot].first_refusal[0] = '\0';
  pthread_mutex_unlock(&eg->mu);
}

unsigned egress_build_refusals(struct egress *eg, unsigned slot, char *first, size_t len) {
  if (len > 0)
    first[0] = '\0';
  if (!eg->running || slot >= eg->n_slots)
    return 0;
  pthread_mutex_lock(&eg->mu);
  unsigned n = eg->slots[slot].refusals;
  snprintf(first, len, "%s", eg->slots[slot].first_refusal);
  pthread_mutex_unlock(&eg->mu);
  return n;
}

int egress_netns_fd(const struct egress *eg, unsigned slot) {
  return eg->running && slot < eg->n_slots ? eg->slots[slot].netns_fd : -1;
}

void egress_stop(struct egress *eg) {
  if (!eg->initialized)
    return;
  if (eg->stop_fd >= 0) {
    uint64_t one = 1;
    ssize_t w = write(eg->stop_fd, &one, sizeof one);
    (void)w;
  }
  if (eg->running)
    pthread_join(eg->acceptor, NULL);
  pthread_mutex_lock(&eg->mu);
  while (eg->active > 0)
    pthread_cond_wait(&eg->idle, &eg->mu);
  pthread_mutex_unlock(&eg->mu);
  for (unsigned i = 0; i < eg->n_leases; i++) {
    struct egress_lease *l = &eg->leases[i];
    int fds[] = {l->listen_fd, l->netns_fd, l->stop_fd};
    for (size_t k = 0; k < 3; k++)
      if (fds[k] >= 0)
        close(fds[k]);
  }
  free(eg->leases);
  if (eg->wake_fd >= 0)
    close(eg->wake_fd);
  pthread_cond_destroy(&eg->rebuilt);
  for (unsigned i = 0; i < eg->n_slots; i++) {
    if (eg->slots[i].listen_fd >= 0)
      close(eg->slots[i].listen_fd);
    if (eg->slots[i].netns_fd >= 0)
      close(eg->slots[i].netns_fd);
  }
  free(eg->slots);
  if (eg->stop_fd >= 0)
    close(eg->stop_fd);
  pthread_mutex_destroy(&eg->mu);
  pthread_cond_destroy(&eg->idle);
  memset(eg, 0, sizeof *eg);
}

/* ---- runs' doors ---- */

static void wake_acceptor(struct egress *eg) {
  uint64_t one = 1;
  ssize_t w = write(eg->wake_fd, &one, sizeof one);
  (void)w;
}

int egress_lease_open(struct egress *eg, const struct egress_allow *allow, const char *run_id,
                      const char *tenant, int tenant_index, struct egress_lease **out,
                      struct sbx_error *err) {
  *out = NULL;
  if (!eg->running || eg->n_leases == 0)
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                         "allow_net: this server's egress proxy for runs is not running");
  /* The namespace first, outside the lock (a thread of its own makes it). */
  struct sandbox_error e = {0};
  int listen_fd = -1;
  int netns_fd = sandbox_netns_create(EGRESS_PORT, &listen_fd, &e);
  if (netns_fd < 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "allow_net: the run's network namespace: %s", e.msg);
  int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd < 0) {
    int saved = errno;
    close(listen_fd);
    close(netns_fd);
    return sbx_error_set(err, SBX_INTERNAL, saved, "allow_net: eventfd");
  }
  pthread_mutex_lock(&eg->mu);
  struct egress_lease *l = NULL;
  for (unsigned i = 0; i < eg->n_leases && l == NULL; i++)
    if (eg->leases[i].state == EGRESS_LEASE_FREE)
      l = &eg->leases[i];
  if (l != NULL) {
    unsigned index = l->index;
    *l = (struct egress_lease){.state = EGRESS_LEASE_OPEN,
                               .index = index,
                               .netns_fd = netns_fd,
                               .listen_fd = listen_fd,
                               .stop_fd = stop_fd,
                               .allow = *allow,
                               .tenant_index = tenant_index};
    snprintf(l->run_id, sizeof l->run_id, "%s", run_id);
    snprintf(l->tenant, sizeof l->tenant, "%s", tenant != NULL ? tenant : "-");
    atomic_init(&l->bytes_left, eg->cfg.run_bytes);
  }
  pthread_mutex_unlock(&eg->mu);
  if (l == NULL) {
    close(stop_fd);
    close(listen_fd);
    close(netns_fd);
    return sbx_error_set(err, SBX_RESOURCE_EXHAUSTED, 0,
                         "allow_net: every one of the egress proxy's %u doors for runs is in use",
                         eg->n_leases);
  }
  wake_acceptor(eg);
  *out = l;
  return 0;
}

void egress_lease_mark(struct egress *eg, struct egress_lease *l, const char *run_id,
                       struct egress_summary *out) {
  pthread_mutex_lock(&eg->mu);
  snprintf(l->run_id, sizeof l->run_id, "%s", run_id);
  l->sum.first_refusal[0] = '\0';
  *out = l->sum;
  pthread_mutex_unlock(&eg->mu);
}

void egress_lease_read(struct egress *eg, struct egress_lease *l, struct egress_summary *out) {
  pthread_mutex_lock(&eg->mu);
  *out = l->sum;
  pthread_mutex_unlock(&eg->mu);
}

/* How long a close waits for its tunnels to end and count (they were
 * told to stop; one still resolving a name may take longer). */
#define EGRESS_LEASE_DRAIN_MS 2000

void egress_lease_close(struct egress *eg, struct egress_lease *l, struct egress_summary *out) {
  if (l == NULL)
    return;
  uint64_t one = 1;
  ssize_t w = write(l->stop_fd, &one, sizeof one);
  (void)w;
  pthread_mutex_lock(&eg->mu);
  l->state = EGRESS_LEASE_CLOSING;
  uint64_t e0 = eg->epoch;
  pthread_mutex_unlock(&eg->mu);
  wake_acceptor(eg);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += EGRESS_LEASE_DRAIN_MS / 1000;
  pthread_mutex_lock(&eg->mu);
  /* The acceptor's next round leaves the listener out: then it is ours. */
  while (eg->epoch == e0 && pthread_cond_timedwait(&eg->rebuilt, &eg->mu, &until) == 0)
    ;
  while (l->tunnels > 0 && pthread_cond_timedwait(&eg->idle, &eg->mu, &until) == 0)
    ;
  if (out != NULL)
    *out = l->sum;
  close(l->listen_fd);
  close(l->netns_fd);
  l->listen_fd = l->netns_fd = -1;
  /* Tunnels still alive hold the lease (and its stop fd) until they end:
   * the last one frees it (tunnel_main). */
  if (l->tunnels == 0) {
    close(l->stop_fd);
    l->stop_fd = -1;
    l->state = EGRESS_LEASE_FREE;
  }
  pthread_mutex_unlock(&eg->mu);
}
