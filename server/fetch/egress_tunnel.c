/* egress_tunnel.c: one connection through the egress proxy (egress.h), on
 * a thread of its own (detached, counted against its door): it reads and
 * checks one request head, against the installer's policy or a run's allow
 * list, resolves the target once, connects to an address that passed, for
 * a run's CONNECT checks the TLS ClientHello's name, and relays bytes both
 * ways (splice through a pipe) until either side ends, the idle timeout,
 * the byte cap or stop. A thread per tunnel, not an event loop, because
 * name resolution blocks and a tunnel's steps then read as one straight
 * sequence; the tunnels are few and capped. Must never connect to an
 * address the policy refused, resolve a name twice for one tunnel, or relay
 * before its checks passed. */
#include "egress_tunnel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "clock.h"
#include "egress_head.h"
#include "egress_tls.h"
#include "log.h"
#include "netaddr.h"

#define EGRESS_CONNECT_MS 10000 /* below pip's own 15 s, so pip sees our answer */
#define EGRESS_STACK_BYTES (512u << 10)
/* A relay's pipe per direction (flow_open): 1 MiB, the default
 * fs.pipe-max-size, so a fast transfer moves in large splices. */
#define RELAY_PIPE_BYTES (1 << 20)
/* Log lines per build for connections that relayed nothing: a build step
 * looping on refused requests must not flood the log (the failure message
 * and env_build still count them all). */
#define EGRESS_LOGGED_UNRELAYED 32

/* ---- the tunnel's steps ---- */

struct tunnel {
  struct egress *eg;
  struct egress_lease *lease; /* a run's door; NULL: the installer's slot */
  unsigned slot, generation;
  atomic_uint_fast64_t own_left; /* the installer's per-tunnel byte cap */
  atomic_uint_fast64_t *left;    /* own_left, or the run's bytes_left */
  bool cut;                      /* a run's tunnel ended by a check after it opened */
  unsigned refusal_nth;          /* a run's: counted as its lease's n-th refusal (0: not) */
  int client, far;               /* far: the origin, or the upstream proxy */
  uint64_t start_ms;             /* monotonic */
  const char *method;
  char target[EGRESS_HOST_MAX + 16];
  int status;        /* what the client was answered: 200 (relayed), or a refusal */
  char why[400];     /* the refusal's reason, or how the relay ended */
  uint64_t up, down; /* bytes relayed client -> far, far -> client */
};

/* Waits for events on fd or stop. 1 ready, 0 timeout, -1 stopping/error. */
static int wait_fd(const struct tunnel *t, int fd, short events, uint64_t timeout_ms) {
  struct pollfd p[3] = {{.fd = fd, .events = events},
                        {.fd = t->eg->stop_fd, .events = POLLIN},
                        {.fd = t->lease != NULL ? t->lease->stop_fd : -1, .events = POLLIN}};
  int n;
  while ((n = poll(p, 3, (int)timeout_ms)) < 0 && errno == EINTR)
    ;
  if (n < 0 || p[1].revents != 0 || p[2].revents != 0)
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

/* A run's request against its allow list, by name (or literal) and port;
 * the addresses are checked once resolved (connect_host). */
static int check_run_request(struct tunnel *t, const struct egress_request *req, size_t extra) {
  if (req->method != EGRESS_CONNECT && extra > 0) {
    snprintf(t->why, sizeof t->why,
             "connection to %s refused: bytes after a GET or HEAD head (no bodies, no "
             "pipelining: use https)",
             t->target);
    return 400;
  }
  if (egress_allow_target(&t->lease->allow, req->host, req->port))
    return 0;
  /* An IP literal no CIDR entry contains, at any port: say how a literal
   * is matched (one on another port of an entry's range needs no hint). */
  unsigned char a[16];
  bool literal = inet_pton(AF_INET, req->host, a) == 1 || inet_pton(AF_INET6, req->host, a) == 1;
  bool in_range = false;
  if (literal) {
    struct egress_allow *any = malloc(sizeof *any);
    if (any != NULL) {
      *any = t->lease->allow;
      for (size_t i = 0; i < any->n; i++)
        any->e[i].any_port = true;
      in_range = egress_allow_target(any, req->host, req->port);
      free(any);
    }
  }
  snprintf(t->why, sizeof t->why, "connection to %s refused: not in the run's allow list%s",
           t->target, literal && !in_range ? " (an address matches CIDR entries only)" : "");
  return 403;
}

/* The port allowlist and the name half of the policy; with an upstream
 * proxy, which resolves names itself, an IP literal's address half too. */
static int check_request(struct tunnel *t, const struct egress_request *req, size_t extra) {
  if (t->lease != NULL)
    return check_run_request(t, req, extra);
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

/* Whether sa is one of the addresses of the server's own interfaces (in the
 * host's namespace, where the proxy runs): a public one is still the
 * server's, and a run must not reach its ports. */
static bool own_address(const struct sockaddr *sa) {
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) < 0)
    return true; /* cannot tell: fail closed */
  bool own = false;
  for (const struct ifaddrs *i = ifs; i != NULL && !own; i = i->ifa_next) {
    const struct sockaddr *a = i->ifa_addr;
    if (a == NULL || a->sa_family != sa->sa_family)
      continue;
    if (a->sa_family == AF_INET)
      own = ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
            ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
    else if (a->sa_family == AF_INET6)
      own = memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                   &((const struct sockaddr_in6 *)sa)->sin6_addr, 16) == 0;
  }
  freeifaddrs(ifs);
  return own;
}

/* May a run's tunnel connect to this address its name (or literal)
 * resolved to? Public and not the server's own, or inside a CIDR entry of
 * the run's list. 0, or -1 with why. */
static int run_address_allowed(const struct tunnel *t, const struct sockaddr *sa, socklen_t len,
                               uint16_t port, char *why, size_t whylen) {
  const char *kind = NULL;
  bool pub = netaddr_is_public(sa, len, &kind);
  if (pub && own_address(sa))
    pub = false, kind = "an address of the server itself";
  if (pub || egress_allow_address(&t->lease->allow, sa, len, port))
    return 0;
  char text[64];
  netaddr_format(sa, len, text, sizeof text);
  snprintf(why, whylen, "%s, %s", text, kind);
  return -1;
}

/* Resolves host once (egress_dns.h) and connects to the first address that
 * passes the policy (checked = true) and answers. For a run every address
 * must pass, or none is tried: a name that answers with one public and one
 * private address is a rebinding attempt. The status to answer on failure. */
static int connect_host(struct tunnel *t, const char *host, uint16_t port, bool checked) {
  struct egress_addresses res;
  char why[300];
  if (egress_dns_resolve(&t->eg->cfg.dns, host, port, &res, why, sizeof why) < 0) {
    if (t->lease != NULL && checked)
      snprintf(t->why, sizeof t->why, "connection to %s refused: cannot resolve %s: %s", t->target,
               host, why);
    else
      snprintf(t->why, sizeof t->why, "cannot resolve %s: %s", host, why);
    return 502;
  }
  if (t->lease != NULL && checked) {
    for (size_t i = 0; i < res.n; i++)
      if (run_address_allowed(t, (struct sockaddr *)&res.a[i], res.len[i], port, why, sizeof why) <
          0) {
        snprintf(t->why, sizeof t->why,
                 "connection to %s refused: %s resolves to %s; only a CIDR entry allows it",
                 t->target, host, why);
        return 403;
      }
  }
  char refused[300] = "", failed[300] = "";
  bool timed_out = false;
  for (size_t i = 0; i < res.n && t->far < 0; i++) {
    const struct sockaddr *sa = (const struct sockaddr *)&res.a[i];
    struct sbx_error e;
    if (checked && t->lease == NULL &&
        download_policy_address(&t->eg->cfg.policy, sa, res.len[i], &e) < 0) {
      if (refused[0] == '\0')
        snprintf(refused, sizeof refused, "%s", e.msg);
      continue;
    }
    struct addrinfo ai = {
        .ai_family = sa->sa_family, .ai_addr = (struct sockaddr *)sa, .ai_addrlen = res.len[i]};
    t->far = connect_one(t, &ai);
    int err = errno;
    if (t->far < 0 && failed[0] == '\0') {
      timed_out = err == ETIMEDOUT;
      char text[64];
      netaddr_format(sa, res.len[i], text, sizeof text);
      snprintf(failed, sizeof failed, "cannot connect to %s port %u: %s", text, (unsigned)port,
               strerror(err));
    }
  }
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
  bool upstream = t->lease == NULL && c->upstream_host[0] != '\0';
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
  t->up += n;
  return 0;
}

/* ---- a run's TLS gate ---- */

/* Cuts a run's tunnel that opened: why says so; the client sees it closed. */
static int cut(struct tunnel *t, const char *what) {
  snprintf(t->why, sizeof t->why, "connection to %s cut: %s", t->target, what);
  t->cut = true;
  return -1;
}

/* A run's CONNECT tunnel: when the program's first bytes are TLS, its
 * ClientHello must name the CONNECT host (an address target: name none),
 * so that a tunnel to an allowed host cannot ask the same address for
 * another name; on port 443 they must be TLS. buf holds *len bytes already
 * read (after the CONNECT head) and gets the rest of the ClientHello, all
 * relayed afterwards. A far end that speaks first (not on 443) opens the
 * tunnel without a look: its protocol is not TLS. 0 to relay, -1 cut or
 * gone (t->why). */
static int tls_gate(struct tunnel *t, const struct egress_request *req, char *buf, size_t *len) {
  for (;;) {
    if (*len > 0) {
      char sni[256], why[200] = "", what[600];
      struct in_addr v4;
      bool literal = req->host_ipv6 || inet_pton(AF_INET, req->host, &v4) == 1;
      switch (egress_tls_sni((const uint8_t *)buf, *len, sni, sizeof sni, why, sizeof why)) {
      case EGRESS_TLS_MORE:
        if (*len < EGRESS_TLS_HELLO_MAX)
          break;
        snprintf(what, sizeof what, "a TLS ClientHello larger than %d bytes", EGRESS_TLS_HELLO_MAX);
        return cut(t, what);
      case EGRESS_TLS_NOT_TLS:
        return req->port == 443 ? cut(t, "not TLS on port 443") : 0;
      case EGRESS_TLS_MALFORMED:
        snprintf(what, sizeof what, "a malformed TLS ClientHello: %s", why);
        return cut(t, what);
      case EGRESS_TLS_NO_SNI:
        if (literal)
          return 0;
        snprintf(what, sizeof what, "the TLS ClientHello names no server (the CONNECT host is %s)",
                 req->host);
        return cut(t, what);
      case EGRESS_TLS_SNI:
        if (!literal && strcasecmp(sni, req->host) == 0)
          return 0;
        snprintf(what, sizeof what, "TLS server name %s is not %s", sni, req->host);
        return cut(t, what);
      }
    }
    struct pollfd p[4] = {{.fd = t->client, .events = POLLIN},
                          {.fd = t->far, .events = *len == 0 && req->port != 443 ? POLLIN : 0},
                          {.fd = t->eg->stop_fd, .events = POLLIN},
                          {.fd = t->lease->stop_fd, .events = POLLIN}};
    int n = poll(p, 4, (int)t->eg->cfg.idle_ms);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || p[2].revents != 0 || p[3].revents != 0) {
      snprintf(t->why, sizeof t->why, n == 0 ? "idle before the first bytes" : "stopped");
      return -1;
    }
    if (*len == 0 && (p[1].revents & (POLLIN | POLLHUP)))
      return 0;
    if (p[0].revents == 0)
      continue;
    ssize_t r = recv(t->client, buf + *len, EGRESS_TLS_HELLO_MAX - *len, 0);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
      snprintf(t->why, sizeof t->why, "the client left before its first bytes");
      return -1;
    }
    if (r > 0)
      *len += (size_t)r;
  }
}

/* ---- relaying ---- */

/* One direction of a tunnel: bytes move from one socket to the other
 * through a pipe with splice(2), never through the proxy's memory (a copy
 * through a 16 KiB buffer cost a core for 0.7 GB/s). pipe_len: bytes in
 * the pipe, not yet sent on. */
struct flow {
  int from, to;
  int pipe_r, pipe_w;
  size_t pipe_len, pipe_cap;
  bool eof, shut;
  uint64_t *count;
};

/* Takes n bytes from what is left (shared by a run's tunnels); false when
 * fewer are left. */
static bool take_bytes(atomic_uint_fast64_t *left, uint64_t n) {
  uint_fast64_t have = atomic_load(left);
  while (have >= n)
    if (atomic_compare_exchange_weak(left, &have, have - n))
      return true;
  return false;
}

/* A non-blocking pipe for a flow, as large as the system lets a pipe be
 * made without privilege (up to RELAY_PIPE_BYTES; the default 64 KiB
 * otherwise). */
static int flow_open(struct flow *f) {
  int p[2];
  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
    return -1;
  f->pipe_r = p[0], f->pipe_w = p[1];
  int cap = fcntl(p[1], F_SETPIPE_SZ, RELAY_PIPE_BYTES);
  if (cap < 0)
    cap = fcntl(p[1], F_GETPIPE_SZ);
  f->pipe_cap = cap > 0 ? (size_t)cap : 65536;
  return 0;
}

static void flow_close(struct flow *f) {
  if (f->pipe_r >= 0)
    close(f->pipe_r);
  if (f->pipe_w >= 0)
    close(f->pipe_w);
  f->pipe_r = f->pipe_w = -1;
}

/* Moves what is ready in one direction, within *left bytes (the tunnel's,
 * or the run's). 0, 1 past the byte cap, -1 on a socket error. */
static int flow_step(struct flow *f, short rev_from, short rev_to, atomic_uint_fast64_t *left) {
  if (f->pipe_len < f->pipe_cap && !f->eof && (rev_from & (POLLIN | POLLHUP | POLLERR))) {
    /* One byte more than is left tells a transfer of exactly the cap from
     * one past it. */
    uint64_t now = atomic_load(left);
    size_t room = f->pipe_cap - f->pipe_len;
    size_t want = now < room ? (size_t)now + 1 : room;
    ssize_t r = splice(f->from, NULL, f->pipe_w, NULL, want, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (r > 0) {
      if (!take_bytes(left, (uint64_t)r))
        return 1;
      f->pipe_len += (size_t)r, *f->count += (uint64_t)r;
    } else if (r == 0) {
      f->eof = true;
    } else if (errno != EAGAIN && errno != EINTR) {
      return -1;
    }
  }
  if (f->pipe_len > 0 && (rev_to & (POLLOUT | POLLERR | POLLHUP))) {
    ssize_t w =
        splice(f->pipe_r, NULL, f->to, NULL, f->pipe_len, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (w > 0)
      f->pipe_len -= (size_t)w;
    else if (w < 0 && errno != EAGAIN && errno != EINTR)
      return -1;
  }
  if (f->eof && f->pipe_len == 0 && !f->shut) {
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
    if (f[k].pipe_len < f[k].pipe_cap && !f[k].eof)
      p[k].events |= POLLIN;
    if (f[k].pipe_len > 0)
      p[1 - k].events |= POLLOUT;
  }
  for (int k = 0; k < 2; k++)
    if (p[k].events == 0)
      p[k].fd = -1;
}

static void relay_loop(struct tunnel *t, struct flow f[2]) {
  snprintf(t->why, sizeof t->why, "closed");
  while (!(f[0].shut && f[1].shut)) {
    struct pollfd p[4];
    relay_events(t, f, p);
    p[3] = (struct pollfd){.fd = t->lease != NULL ? t->lease->stop_fd : -1, .events = POLLIN};
    int n = poll(p, 4, (int)t->eg->cfg.idle_ms);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0 || p[2].revents != 0 || p[3].revents != 0) {
      if (n == 0)
        snprintf(t->why, sizeof t->why, "idle for %llu ms (pip-idle-timeout-ms)",
                 (unsigned long long)t->eg->cfg.idle_ms);
      else
        snprintf(t->why, sizeof t->why, "stopped");
      return;
    }
    int a = flow_step(&f[0], p[0].revents, p[1].revents, t->left);
    int b = a == 0 ? flow_step(&f[1], p[1].revents, p[0].revents, t->left) : 0;
    if ((a > 0 || b > 0) && t->lease != NULL) {
      char what[120];
      snprintf(what, sizeof what, "more than %llu bytes for one run (egress-bytes)",
               (unsigned long long)t->eg->cfg.run_bytes);
      cut(t, what);
      return;
    }
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

/* Relays until both directions ended, the idle timeout, the byte cap, an
 * error or stop; pre is what the client sent after its CONNECT head (and,
 * for a run, the rest of its ClientHello), put in the first pipe. */
static void relay(struct tunnel *t, const char *pre, size_t prelen) {
  struct flow f[2] = {
      {.from = t->client, .to = t->far, .pipe_r = -1, .pipe_w = -1, .count = &t->up},
      {.from = t->far, .to = t->client, .pipe_r = -1, .pipe_w = -1, .count = &t->down}};
  _Static_assert(EGRESS_TLS_HELLO_MAX <= 65536 && EGRESS_HEAD_MAX <= 65536,
                 "what was read before relaying fits an empty pipe of the smallest size");
  if (flow_open(&f[0]) < 0 || flow_open(&f[1]) < 0) {
    snprintf(t->why, sizeof t->why, "pipes for the relay: %s", strerror(errno));
  } else if (prelen > 0 && write(f[0].pipe_w, pre, prelen) != (ssize_t)prelen) {
    snprintf(t->why, sizeof t->why, "the first bytes into the relay: %s", strerror(errno));
  } else {
    f[0].pipe_len = prelen;
    t->up += prelen;
    if (!take_bytes(t->left, prelen))
      atomic_store(t->left, 0);
    relay_loop(t, f);
  }
  flow_close(&f[0]);
  flow_close(&f[1]);
}

/* A run's refusal, in the lease's summary before the program is answered
 * (an interpreter's call reads the summary as soon as its cell ends): once
 * per connection. The caller holds eg->mu. */
static void count_refusal_locked(struct tunnel *t) {
  struct egress_lease *l = t->lease;
  if (t->refusal_nth != 0)
    return;
  t->refusal_nth = ++l->sum.refused;
  if (l->sum.first_refusal[0] == '\0')
    snprintf(l->sum.first_refusal, sizeof l->sum.first_refusal, "%s", t->why);
}

static void count_refusal(struct tunnel *t) {
  if (t->lease == NULL)
    return;
  pthread_mutex_lock(&t->eg->mu);
  count_refusal_locked(t);
  pthread_mutex_unlock(&t->eg->mu);
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
  if (st > 0) {
    count_refusal(t);
    answer_refusal(t, st);
  }
  if (st != 0)
    return;
  if (t->lease != NULL && req.method == EGRESS_CONNECT) {
    char hello[EGRESS_TLS_HELLO_MAX];
    size_t len = got - head_len;
    memcpy(hello, head + head_len, len);
    if (tls_gate(t, &req, hello, &len) < 0)
      return;
    relay(t, hello, len);
    return;
  }
  relay(t, req.method == EGRESS_CONNECT ? head + head_len : "",
        req.method == EGRESS_CONNECT ? got - head_len : 0);
}

static void tunnel_log(const struct tunnel *t) {
  char why[sizeof t->why];
  size_t k = 0;
  for (const char *c = t->why; *c != '\0' && k < sizeof why - 1; c++)
    why[k++] = *c == '"' ? '\'' : *c;
  why[k] = '\0';
  if (t->lease != NULL) {
    char run_id[sizeof t->lease->run_id];
    pthread_mutex_lock(&t->eg->mu); /* an interpreter's lease is relabelled per call */
    snprintf(run_id, sizeof run_id, "%s", t->lease->run_id);
    pthread_mutex_unlock(&t->eg->mu);
    log_line("egress",
             "run_id=%s tenant=%s method=%s target=%s status=%d up_bytes=%llu down_bytes=%llu "
             "duration_ms=%llu %s=\"%s\"",
             run_id, t->lease->tenant, t->method, t->target[0] != '\0' ? t->target : "-", t->status,
             (unsigned long long)t->up, (unsigned long long)t->down,
             (unsigned long long)(sbx_monotonic_ms() - t->start_ms),
             t->status == 200 && !t->cut ? "end" : "reason", why);
    return;
  }
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
/* A run's connection, as it ends: in the lease's summary (a refusal's
 * reason as the first when it is), for /metrics, and in the log up to
 * EGRESS_LOGGED_UNRELAYED refusals per lease. */
/* The connection itself was counted when it was accepted (egress.c). */
static void note_run(struct tunnel *t) {
  struct egress_lease *l = t->lease;
  bool refused = t->status != 200 || t->cut;
  pthread_mutex_lock(&t->eg->mu);
  l->sum.up += t->up;
  l->sum.down += t->down;
  if (refused)
    count_refusal_locked(t);
  unsigned nth = t->refusal_nth;
  pthread_mutex_unlock(&t->eg->mu);
  if (t->eg->cfg.on_connection != NULL)
    t->eg->cfg.on_connection(t->eg->cfg.on_connection_arg, l->tenant_index, !refused, t->up,
                             t->down);
  if (nth <= EGRESS_LOGGED_UNRELAYED)
    tunnel_log(t);
}

static void note_and_log(struct tunnel *t) {
  if (t->lease != NULL) {
    note_run(t);
    return;
  }
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
  if (t->lease == NULL)
    atomic_fetch_sub(&eg->slots[t->slot].tunnels, 1);
  pthread_mutex_lock(&eg->mu);
  struct egress_lease *l = t->lease;
  if (l != NULL && --l->tunnels == 0 && l->state == EGRESS_LEASE_CLOSING && l->listen_fd < 0) {
    close(l->stop_fd);
    l->stop_fd = -1;
    l->state = EGRESS_LEASE_FREE;
  }
  free(t);
  eg->active--;
  pthread_cond_broadcast(&eg->idle); /* last touch of eg: egress_stop may free it next */
  pthread_mutex_unlock(&eg->mu);
  return NULL;
}

void egress_tunnel_refuse(struct egress *eg, struct egress_lease *lease, unsigned slot, int fd,
                          int status, const char *why) {
  struct tunnel t = {.eg = eg,
                     .lease = lease,
                     .slot = slot,
                     .client = fd,
                     .far = -1,
                     .method = "-",
                     .status = status};
  pthread_mutex_lock(&eg->mu);
  if (lease == NULL)
    t.generation = eg->slots[slot].generation;
  pthread_mutex_unlock(&eg->mu);
  t.start_ms = sbx_monotonic_ms();
  snprintf(t.why, sizeof t.why, "%s", why);
  count_refusal(&t);
  char out[1024];
  size_t n = egress_refusal(status, why, out, sizeof out);
  /* A fresh connection's send buffer takes this at once; never wait here. */
  if (n > 0 && send(fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
    snprintf(t.why, sizeof t.why, "%s (not delivered)", why);
  note_and_log(&t);
  close(fd);
}

int egress_tunnel_spawn(struct egress *eg, struct egress_lease *lease, unsigned slot, int fd) {
  struct tunnel *t = calloc(1, sizeof *t);
  if (t == NULL)
    return -1;
  *t = (struct tunnel){
      .eg = eg, .lease = lease, .slot = slot, .client = fd, .far = -1, .method = "-"};
  atomic_init(&t->own_left, eg->cfg.policy.max_bytes);
  t->left = lease != NULL ? &lease->bytes_left : &t->own_left;
  t->start_ms = sbx_monotonic_ms();
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, EGRESS_STACK_BYTES);
  pthread_mutex_lock(&eg->mu);
  eg->active++;
  if (lease == NULL)
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
