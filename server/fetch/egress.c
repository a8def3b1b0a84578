/* egress.c: see egress.h. One acceptor thread polls the slots' listeners;
 * each accepted connection gets a thread of its own (detached, counted, at
 * most --pip-tunnels per slot), which reads and checks one request head,
 * resolves the target once, connects to an address the policy allows, and
 * relays bytes both ways until either side ends, the idle timeout or the
 * byte cap. A thread per tunnel, not an event loop, because name resolution
 * (getaddrinfo) blocks and a tunnel's steps then read as one straight
 * sequence; the tunnels are few (pip opens one or two per host) and capped.
 * Every wait also polls stop_fd, so egress_stop ends them all. */
#include "egress.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "egress_head.h"
#include "log.h"
#include "netaddr.h"
#include "cleanup.h"
#include "sandbox/sandbox.h"
#include "settings.h"

#define EGRESS_CONNECT_MS 10000 /* below pip's own 15 s, so pip sees our answer */
#define EGRESS_STACK_BYTES (512u << 10)
#define EGRESS_MAX_ADDRESSES 16
#define RELAY_BUF 16384
/* Log lines per build for connections that relayed nothing: a build step
 * looping on refused requests must not flood the log (the failure message
 * and env_build still count them all). */
#define EGRESS_LOGGED_UNRELAYED 32

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
  return 0;
}

/* ---- the tunnel's steps ---- */

struct tunnel {
  struct egress *eg;
  unsigned slot, generation;
  int client, far;   /* far: the origin, or the upstream proxy */
  uint64_t start_ms; /* monotonic */
  const char *method;
  char target[EGRESS_HOST_MAX + 16];
  int status;        /* what the client was answered: 200 (relayed), or a refusal */
  char why[400];     /* the refusal's reason, or how the relay ended */
  uint64_t up, down; /* bytes relayed client -> far, far -> client */
};

/* Waits for events on fd or stop. 1 ready, 0 timeout, -1 stopping/error. */
static int wait_fd(const struct tunnel *t, int fd, short events, uint64_t timeout_ms) {
  struct pollfd p[2] = {{.fd = fd, .events = events}, {.fd = t->eg->stop_fd, .events = POLLIN}};
  int n;
  while ((n = poll(p, 2, (int)timeout_ms)) < 0 && errno == EINTR)
    ;
  if (n < 0 || p[1].revents != 0)
    return -1;
  return n;
}

/* Writes all of data to a non-blocking socket within timeout_ms. */
static int send_all(const struct tunnel *t, int fd, const char *data, size_t len,
                    uint64_t timeout_ms) {
  while (len > 0) {
    ssize_t w = send(fd, data, len, MSG_NOSIGNAL);
    if (w > 0) {
      data += w, len -= (size_t)w;
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR)
      return -1;
    if (wait_fd(t, fd, POLLOUT, timeout_ms) <= 0)
      return -1;
  }
  return 0;
}

/* Reads until the head is complete. 0 with *head_len, an HTTP status to
 * answer, or -1 when the client left (nothing to answer). */
static int read_head(struct tunnel *t, char *buf, size_t *got, size_t *head_len) {
  for (;;) {
    if ((*head_len = egress_head_end(buf, *got)) > 0)
      return 0;
    if (*got == EGRESS_HEAD_MAX) {
      snprintf(t->why, sizeof t->why, "request head larger than %d bytes", EGRESS_HEAD_MAX);
      return 431;
    }
    ssize_t r = recv(t->client, buf + *got, EGRESS_HEAD_MAX - *got, 0);
    if (r > 0) {
      *got += (size_t)r;
      continue;
    }
    if (r == 0 || (errno != EAGAIN && errno != EINTR))
      return -1;
    int w = wait_fd(t, t->client, POLLIN, t->eg->cfg.idle_ms);
    if (w < 0)
      return -1;
    if (w == 0) {
      snprintf(t->why, sizeof t->why, "no complete request head within %llu ms",
               (unsigned long long)t->eg->cfg.idle_ms);
      return 408;
    }
  }
}

/* The port allowlist and the name half of the policy; with an upstream
 * proxy, which resolves names itself, an IP literal's address half too. */
static int check_request(struct tunnel *t, const struct egress_request *req, size_t extra) {
  const struct egress_config *c = &t->eg->cfg;
  if (req->method != EGRESS_CONNECT && extra > 0) {
    snprintf(t->why, sizeof t->why, "bytes after a GET or HEAD head (no bodies, no pipelining)");
    return 400;
  }
  if (req->port != 80 && req->port != 443 && req->port != c->index_port) {
    snprintf(t->why, sizeof t->why, "port %u is not allowed (80, 443 and the index's %u only)",
             (unsigned)req->port, (unsigned)c->index_port);
    return 403;
  }
  struct sbx_error why;
  if (download_policy_host(&c->policy, req->host, &why) < 0) {
    snprintf(t->why, sizeof t->why, "%s", why.msg);
    return 403;
  }
  if (c->upstream_host[0] == '\0')
    return 0;
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  struct sockaddr_in *in = (struct sockaddr_in *)&ss;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
  socklen_t len = 0;
  if (inet_pton(AF_INET, req->host, &in->sin_addr) == 1)
    in->sin_family = AF_INET, len = sizeof *in;
  else if (inet_pton(AF_INET6, req->host, &in6->sin6_addr) == 1)
    in6->sin6_family = AF_INET6, len = sizeof *in6;
  if (len > 0 && download_policy_address(&c->policy, (struct sockaddr *)&ss, len, &why) < 0) {
    snprintf(t->why, sizeof t->why, "%s", why.msg);
    return 403;
  }
  return 0;
}

/* A non-blocking connect to one address within EGRESS_CONNECT_MS. The
 * socket, or -1 with errno (ETIMEDOUT on the deadline). */
static int connect_one(const struct tunnel *t, const struct addrinfo *ai) {
  cleanup_close int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return -1;
  if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
    return steal_fd(&fd);
  if (errno != EINPROGRESS)
    return -1;
  int w = wait_fd(t, fd, POLLOUT, EGRESS_CONNECT_MS);
  if (w <= 0) {
    errno = w == 0 ? ETIMEDOUT : ECANCELED;
    return -1;
  }
  int e = 0;
  socklen_t el = sizeof e;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e != 0) {
    errno = e != 0 ? e : errno;
    return -1;
  }
  return steal_fd(&fd);
}

/* Resolves host once and connects to the first address that passes the
 * policy (checked = true) and answers. The status to answer on failure. */
static int connect_host(struct tunnel *t, const char *host, uint16_t port, bool checked) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res = NULL;
  char service[8];
  snprintf(service, sizeof service, "%u", (unsigned)port);
  int rc = getaddrinfo(host, service, &hints, &res);
  if (rc != 0) {
    snprintf(t->why, sizeof t->why, "cannot resolve %s: %s", host,
             rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    return 502;
  }
  char refused[300] = "", failed[300] = "";
  bool timed_out = false;
  int n = 0;
  for (const struct addrinfo *ai = res; ai != NULL && n < EGRESS_MAX_ADDRESSES && t->far < 0;
       ai = ai->ai_next, n++) {
    struct sbx_error why;
    if (checked &&
        download_policy_address(&t->eg->cfg.policy, ai->ai_addr, ai->ai_addrlen, &why) < 0) {
      if (refused[0] == '\0')
        snprintf(refused, sizeof refused, "%s", why.msg);
      continue;
    }
    t->far = connect_one(t, ai);
    int e = errno;
    if (t->far < 0 && failed[0] == '\0') {
      timed_out = e == ETIMEDOUT;
      char text[64];
      netaddr_format(ai->ai_addr, ai->ai_addrlen, text, sizeof text);
      snprintf(failed, sizeof failed, "cannot connect to %s port %u: %s", text, (unsigned)port,
               strerror(e));
    }
  }
  freeaddrinfo(res);
  if (t->far >= 0)
    return 0;
  if (failed[0] != '\0') {
    snprintf(t->why, sizeof t->why, "%s", failed);
    return timed_out ? 504 : 502;
  }
  snprintf(t->why, sizeof t->why,
           "%s; the installer reaches public addresses only (set download-hosts or "
           "download-allow-private)",
           refused[0] != '\0' ? refused : "no address");
  return 403;
}

/* Connects to the far end and sends what opens the exchange: our 200 for a
 * CONNECT, the request head for a GET/HEAD, or the request to an upstream
 * proxy (whose own answer pip then reads). */
static int open_exchange(struct tunnel *t, const struct egress_request *req, const char *head) {
  const struct egress_config *c = &t->eg->cfg;
  bool upstream = c->upstream_host[0] != '\0';
  int st = upstream ? connect_host(t, c->upstream_host, c->upstream_port, false)
                    : connect_host(t, req->host, req->port, true);
  if (st != 0) {
    if (upstream) {
      char inner[sizeof t->why];
      snprintf(inner, sizeof inner, "%s", t->why);
      snprintf(t->why, sizeof t->why, "the upstream proxy (pip-proxy): %.300s", inner);
    }
    return st;
  }
  char out[EGRESS_FORWARD_MAX];
  size_t n;
  if (req->method == EGRESS_CONNECT && !upstream) {
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    if (send_all(t, t->client, ok, sizeof ok - 1, c->idle_ms) < 0) {
      snprintf(t->why, sizeof t->why, "the client left before the tunnel opened");
      return -1;
    }
    return 0;
  }
  n = req->method == EGRESS_CONNECT ? egress_connect_head(req, out, sizeof out)
                                    : egress_forward_head(req, head, upstream, out, sizeof out);
  if (n == 0 || send_all(t, t->far, out, n, c->idle_ms) < 0) {
    snprintf(t->why, sizeof t->why, "could not send the request to %s", t->target);
    return 502;
  }
  return 0;
}

/* ---- relaying ---- */

struct flow {
  int from, to;
  char buf[RELAY_BUF];
  size_t off, len;
  bool eof, shut;
  uint64_t *count;
};

/* Moves what is ready in one direction, within *left bytes for the tunnel.
 * 0, 1 past the byte cap, -1 on a socket error. */
static int flow_step(struct flow *f, short rev_from, short rev_to, uint64_t *left) {
  if (f->len == 0 && !f->eof && (rev_from & (POLLIN | POLLHUP | POLLERR))) {
    /* One byte more than is left tells a transfer of exactly the cap from
     * one past it. */
    size_t want = *left < sizeof f->buf ? (size_t)*left + 1 : sizeof f->buf;
    ssize_t r = recv(f->from, f->buf, want, 0);
    if (r > 0) {
      if ((uint64_t)r > *left)
        return 1;
      *left -= (uint64_t)r;
      f->off = 0, f->len = (size_t)r, *f->count += (uint64_t)r;
    } else if (r == 0) {
      f->eof = true;
    } else if (errno != EAGAIN && errno != EINTR) {
      return -1;
    }
  }
  if (f->len > 0 && (rev_to & (POLLOUT | POLLERR | POLLHUP))) {
    ssize_t w = send(f->to, f->buf + f->off, f->len, MSG_NOSIGNAL);
    if (w > 0)
      f->off += (size_t)w, f->len -= (size_t)w;
    else if (w < 0 && errno != EAGAIN && errno != EINTR)
      return -1;
  }
  if (f->eof && f->len == 0 && !f->shut) {
    shutdown(f->to, SHUT_WR); /* pass the end on: the other direction may go on */
    f->shut = true;
  }
  return 0;
}

/* The poll set for both directions. A socket nothing is wanted from is left
 * out (negative fd): its hang-up would otherwise wake poll at once, again
 * and again, while the other direction waits. */
static void relay_events(const struct tunnel *t, const struct flow *f, struct pollfd p[3]) {
  p[0] = (struct pollfd){.fd = t->client};
  p[1] = (struct pollfd){.fd = t->far};
  p[2] = (struct pollfd){.fd = t->eg->stop_fd, .events = POLLIN};
  for (int k = 0; k < 2; k++) {
    if (f[k].len == 0 && !f[k].eof)
      p[k].events |= POLLIN;
    if (f[k].len > 0)
      p[1 - k].events |= POLLOUT;
  }
  for (int k = 0; k < 2; k++)
    if (p[k].events == 0)
      p[k].fd = -1;
}

/* Relays until both directions ended, the idle timeout, the byte cap, an
 * error or stop; pre is what the client sent after its CONNECT head. */
static void relay(struct tunnel *t, const char *pre, size_t prelen) {
  struct flow f[2] = {{.from = t->client, .to = t->far, .count = &t->up},
                      {.from = t->far, .to = t->client, .count = &t->down}};
  uint64_t left = t->eg->cfg.policy.max_bytes;
  memcpy(f[0].buf, pre, prelen); /* prelen < EGRESS_HEAD_MAX < RELAY_BUF */
  f[0].len = prelen;
  t->up = prelen;
  left -= prelen < left ? prelen : left;
  snprintf(t->why, sizeof t->why, "closed");
  while (!(f[0].shut && f[1].shut)) {
    struct pollfd p[3];
    relay_events(t, f, p);
    int n = poll(p, 3, (int)t->eg->cfg.idle_ms);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || p[2].revents != 0) {
      if (n == 0)
        snprintf(t->why, sizeof t->why, "idle for %llu ms (pip-idle-timeout-ms)",
                 (unsigned long long)t->eg->cfg.idle_ms);
      else
        snprintf(t->why, sizeof t->why, "stopped");
      return;
    }
    int a = flow_step(&f[0], p[0].revents, p[1].revents, &left);
    int b = a == 0 ? flow_step(&f[1], p[1].revents, p[0].revents, &left) : 0;
    if (a > 0 || b > 0) {
      snprintf(t->why, sizeof t->why, "more than %llu bytes (pip-disk-bytes)",
               (unsigned long long)t->eg->cfg.policy.max_bytes);
      return;
    }
    if (a < 0 || b < 0) {
      snprintf(t->why, sizeof t->why, "connection error: %s", strerror(errno));
      return;
    }
  }
}

/* ---- one tunnel, start to end ---- */

/* Sends a refusal and lets the client read it: half-close, then drain what
 * it still sends for a moment, since closing with unread bytes would reset
 * the connection and lose the answer. */
static void answer_refusal(struct tunnel *t, int status) {
  char out[1024];
  size_t n = egress_refusal(status, t->why, out, sizeof out);
  if (n == 0 || send_all(t, t->client, out, n, 1000) < 0)
    return;
  shutdown(t->client, SHUT_WR);
  char sink[4096];
  for (int i = 0; i < 16 && wait_fd(t, t->client, POLLIN, 500) > 0; i++)
    if (recv(t->client, sink, sizeof sink, 0) <= 0)
      break;
}

static const char *method_name(enum egress_method m) {
  return m == EGRESS_CONNECT ? "CONNECT" : m == EGRESS_GET ? "GET" : "HEAD";
}

static void tunnel_serve(struct tunnel *t) {
  char head[EGRESS_HEAD_MAX];
  size_t got = 0, head_len = 0;
  struct egress_request req;
  int st = read_head(t, head, &got, &head_len);
  if (st < 0) {
    snprintf(t->why, sizeof t->why, "the client left before its request");
    return;
  }
  if (st == 0 && (st = egress_parse_head(head, head_len, &req, t->why, sizeof t->why)) == 0) {
    t->method = method_name(req.method);
    egress_authority(&req, true, t->target, sizeof t->target);
    st = check_request(t, &req, got - head_len);
  }
  if (st == 0)
    st = open_exchange(t, &req, head);
  t->status = st == 0 ? 200 : st;
  if (st > 0)
    answer_refusal(t, st);
  if (st != 0)
    return;
  relay(t, req.method == EGRESS_CONNECT ? head + head_len : "",
        req.method == EGRESS_CONNECT ? got - head_len : 0);
}

static void tunnel_log(const struct tunnel *t) {
  char why[sizeof t->why];
  size_t k = 0;
  for (const char *c = t->why; *c != '\0' && k < sizeof why - 1; c++)
    why[k++] = *c == '"' ? '\'' : *c;
  why[k] = '\0';
  log_line("egress",
           "slot=%u method=%s target=%s status=%d up_bytes=%llu down_bytes=%llu "
           "duration_ms=%llu %s=\"%s\"",
           t->slot, t->method, t->target[0] != '\0' ? t->target : "-", t->status,
           (unsigned long long)t->up, (unsigned long long)t->down,
           (unsigned long long)(sbx_monotonic_ms() - t->start_ms),
           t->status == 200 ? "end" : "reason", why);
}

/* Counts a connection that relayed nothing against the build that made it
 * (and a refusal as such), then logs it unless the build has had more than
 * EGRESS_LOGGED_UNRELAYED of them. A relayed one is always logged. */
static void note_and_log(const struct tunnel *t) {
  struct egress_slot *sl = &t->eg->slots[t->slot];
  unsigned nth = 0;
  if (t->status != 200) {
    pthread_mutex_lock(&t->eg->mu);
    if (sl->generation == t->generation) {
      nth = ++sl->unrelayed;
      if (t->status >= 400 && sl->refusals++ == 0)
        snprintf(sl->first_refusal, sizeof sl->first_refusal, "%s %s: %s", t->method,
                 t->target[0] != '\0' ? t->target : "-", t->why);
    }
    pthread_mutex_unlock(&t->eg->mu);
  }
  if (nth <= EGRESS_LOGGED_UNRELAYED)
    tunnel_log(t);
}

static void *tunnel_main(void *arg) {
  struct tunnel *t = arg;
  struct egress *eg = t->eg;
  tunnel_serve(t);
  note_and_log(t);
  close(t->client);
  if (t->far >= 0)
    close(t->far);
  atomic_fetch_sub(&eg->slots[t->slot].tunnels, 1);
  free(t);
  pthread_mutex_lock(&eg->mu);
  eg->active--;
  pthread_cond_broadcast(&eg->idle); /* last touch of eg: egress_stop may free it next */
  pthread_mutex_unlock(&eg->mu);
  return NULL;
}

/* ---- accepting ---- */

static void refuse_now(struct egress *eg, unsigned slot, int fd, int status, const char *why) {
  struct tunnel t = {
      .eg = eg, .slot = slot, .client = fd, .far = -1, .method = "-", .status = status};
  pthread_mutex_lock(&eg->mu);
  t.generation = eg->slots[slot].generation;
  pthread_mutex_unlock(&eg->mu);
  t.start_ms = sbx_monotonic_ms();
  snprintf(t.why, sizeof t.why, "%s", why);
  char out[1024];
  size_t n = egress_refusal(status, why, out, sizeof out);
  /* A fresh connection's send buffer takes this at once; never wait here. */
  if (n > 0 && send(fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
    snprintf(t.why, sizeof t.why, "%s (not delivered)", why);
  note_and_log(&t);
  close(fd);
}

static int spawn_tunnel(struct egress *eg, unsigned slot, int fd) {
  struct tunnel *t = calloc(1, sizeof *t);
  if (t == NULL)
    return -1;
  *t = (struct tunnel){.eg = eg, .slot = slot, .client = fd, .far = -1, .method = "-"};
  t->start_ms = sbx_monotonic_ms();
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, EGRESS_STACK_BYTES);
  pthread_mutex_lock(&eg->mu);
  eg->active++;
  t->generation = eg->slots[slot].generation;
  pthread_t th;
  int rc = pthread_create(&th, &attr, tunnel_main, t);
  if (rc != 0)
    eg->active--;
  pthread_mutex_unlock(&eg->mu);
  pthread_attr_destroy(&attr);
  if (rc != 0)
    free(t);
  return rc == 0 ? 0 : -1;
}

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
    refuse_now(eg, slot, fd, 503, why);
    return;
  }
  if (spawn_tunnel(eg, slot, fd) < 0) {
    atomic_fetch_sub(&sl->tunnels, 1);
    refuse_now(eg, slot, fd, 503, "the proxy could not start a tunnel");
  }
}

static void *acceptor_main(void *arg) {
  struct egress *eg = arg;
  size_t n = eg->n_slots + 1;
  cleanup_free struct pollfd *p = calloc(n, sizeof *p);
  if (p == NULL) {
    log_line("egress_failed", "error=\"out of memory\"");
    return NULL;
  }
  for (unsigned i = 0; i < eg->n_slots; i++)
    p[i] = (struct pollfd){.fd = eg->slots[i].listen_fd, .events = POLLIN};
  p[eg->n_slots] = (struct pollfd){.fd = eg->stop_fd, .events = POLLIN};
  for (;;) {
    if (poll(p, n, -1) < 0 && errno != EINTR) {
      log_line("egress_failed", "error=\"poll: %s\"", strerror(errno));
      break;
    }
    if (p[eg->n_slots].revents != 0)
      break;
    for (unsigned i = 0; i < eg->n_slots; i++)
      if (p[i].revents & POLLIN)
        accept_one(eg, i);
  }
  return NULL;
}

/* ---- start and stop ---- */

int egress_start(struct egress *eg, const struct egress_config *cfg, unsigned slots,
                 struct sbx_error *err) {
  memset(eg, 0, sizeof *eg);
  eg->cfg = *cfg;
  eg->stop_fd = -1;
  pthread_mutex_init(&eg->mu, NULL);
  pthread_cond_init(&eg->idle, NULL);
  eg->initialized = true;
  eg->slots = calloc(slots, sizeof *eg->slots);
  eg->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (eg->slots == NULL || eg->stop_fd < 0) {
    egress_stop(eg);
    return sbx_error_set(err, SBX_INTERNAL, errno, "egress proxy");
  }
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
