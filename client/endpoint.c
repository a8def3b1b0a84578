/* endpoint.c: an endpoint's address as every client spells it: parsing
 * the URLs given (see endpoint.h), the key of one resolved address, the
 * rendezvous rule that places a session, and sets of keys. Pure: no
 * socket, no look-up, no lock; unit-tested in tests/unit/test_client.c.
 * What it must never do: accept a URL it cannot spell back as one key, or
 * let the rule depend on anything but the session id and the keys (every
 * client, in every language, must place a session on the same server). */
#include "endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "fail.h"

static int parse_port(const char *s, unsigned *port) {
  unsigned long v = 0;
  if (*s == '\0')
    return -1;
  for (; *s != '\0'; s++) {
    if (*s < '0' || *s > '9' || (v = v * 10 + (unsigned long)(*s - '0')) > 65535)
      return -1;
  }
  if (v == 0)
    return -1;
  *port = (unsigned)v;
  return 0;
}

static bool is_host_name(const char *h) {
  if (*h == '\0')
    return false;
  for (; *h != '\0'; h++)
    if (!((*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') || (*h >= '0' && *h <= '9') ||
          *h == '-' || *h == '.' || *h == '_'))
      return false;
  return true;
}

const char *sbxc_target_scheme(const struct sbxc_target *t) {
  return t->tls ? "tls+tcp" : "tcp";
}

/* tcp://[IPv6]:PORT */
static int parse_bracketed(const char *hp, struct sbxc_target *out, char *err, size_t errlen) {
  const char *close = strchr(hp, ']');
  struct in6_addr a6;
  if (close == NULL || close[1] != ':' || (size_t)(close - hp) >= sizeof(out->host))
    return sbxc_fail(err, errlen, "endpoint %s: expected %s://[IPv6]:PORT", out->url,
                     sbxc_target_scheme(out));
  memcpy(out->host, hp + 1, (size_t)(close - hp - 1));
  out->host[close - hp - 1] = '\0';
  if (inet_pton(AF_INET6, out->host, &a6) != 1)
    return sbxc_fail(err, errlen, "endpoint %s: %s is not an IPv6 address", out->url, out->host);
  if (parse_port(close + 2, &out->port) < 0)
    return sbxc_fail(err, errlen, "endpoint %s: the port must be 1 to 65535", out->url);
  if (sbxc_address_key(sbxc_target_scheme(out), AF_INET6, &a6, out->port, out->fixed_key,
                       sizeof(out->fixed_key)) < 0)
    return sbxc_fail(err, errlen, "endpoint %s: too long", out->url);
  return 0;
}

/* tcp://HOST:PORT with HOST an IPv4 address or a name. */
static int parse_host_port(const char *hp, struct sbxc_target *out, char *err, size_t errlen) {
  const char *colon = strrchr(hp, ':');
  struct in_addr a4;
  if (colon == NULL || (size_t)(colon - hp) >= sizeof(out->host))
    return sbxc_fail(err, errlen, "endpoint %s: expected %s://HOST:PORT", out->url,
                     sbxc_target_scheme(out));
  memcpy(out->host, hp, (size_t)(colon - hp));
  out->host[colon - hp] = '\0';
  if (parse_port(colon + 1, &out->port) < 0)
    return sbxc_fail(err, errlen, "endpoint %s: the port must be 1 to 65535", out->url);
  if (inet_pton(AF_INET, out->host, &a4) == 1) {
    if (sbxc_address_key(sbxc_target_scheme(out), AF_INET, &a4, out->port, out->fixed_key,
                         sizeof(out->fixed_key)) < 0)
      return sbxc_fail(err, errlen, "endpoint %s: too long", out->url);
    return 0;
  }
  if (!is_host_name(out->host))
    return sbxc_fail(err, errlen, "endpoint %s: expected %s://HOST:PORT", out->url,
                     sbxc_target_scheme(out));
  out->is_name = true;
  return 0;
}

int sbxc_target_parse(const char *url, struct sbxc_target *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  if (strlen(url) >= sizeof(out->url))
    return sbxc_fail(err, errlen, "endpoint %.40s...: longer than %d bytes", url, SBXC_KEY_MAX - 1);
  snprintf(out->url, sizeof(out->url), "%s", url);
  /* ipc://PATH and inproc://NAME (a server in this very process: the
   * fronts of sandboxd) are one fixed address each, keyed as given. */
  if (strncmp(url, "ipc://", 6) == 0 || strncmp(url, "inproc://", 9) == 0) {
    if (url[strlen(url) - 1] == '/')
      return sbxc_fail(err, errlen, "endpoint %s: needs a socket path or name", url);
    snprintf(out->fixed_key, sizeof(out->fixed_key), "%s", url);
    return 0;
  }
  size_t skip = 6;
  if (strncmp(url, "tls+tcp://", 10) == 0) {
    out->tls = true;
    skip = 10;
  } else if (strncmp(url, "tcp://", 6) != 0) {
    return sbxc_fail(
        err, errlen,
        "endpoint %s: tcp://HOST:PORT, tls+tcp://HOST:PORT, ipc://PATH or inproc://NAME "
        "only",
        url);
  }
  return url[skip] == '[' ? parse_bracketed(url + skip, out, err, errlen)
                          : parse_host_port(url + skip, out, err, errlen);
}

int sbxc_address_key(const char *scheme, int family, const void *addr, unsigned port, char *out,
                     size_t len) {
  char ip[INET6_ADDRSTRLEN];
  if (inet_ntop(family, addr, ip, sizeof(ip)) == NULL)
    return -1;
  int n = family == AF_INET6 ? snprintf(out, len, "%s://[%s]:%u", scheme, ip, port)
                             : snprintf(out, len, "%s://%s:%u", scheme, ip, port);
  return n < 0 || (size_t)n >= len ? -1 : 0;
}

static uint32_t fnv1a32_more(uint32_t h, const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 0x01000193u;
  }
  return h;
}

uint32_t sbxc_fnv1a32(const void *data, size_t len) {
  return fnv1a32_more(0x811c9dc5u, data, len);
}

uint32_t sbxc_session_score(const char *session_id, const char *key) {
  uint32_t h = fnv1a32_more(0x811c9dc5u, session_id, strlen(session_id));
  h = fnv1a32_more(h, "", 1); /* the NUL between them */
  return fnv1a32_more(h, key, strlen(key));
}

bool sbxc_home_before(uint32_t score_a, const char *key_a, uint32_t score_b, const char *key_b) {
  return score_a > score_b || (score_a == score_b && strcmp(key_a, key_b) < 0);
}

size_t sbxc_session_home(const char *session_id, const char *const *keys, size_t n) {
  size_t best = 0;
  uint32_t best_score = sbxc_session_score(session_id, keys[0]);
  for (size_t i = 1; i < n; i++) {
    uint32_t s = sbxc_session_score(session_id, keys[i]);
    if (sbxc_home_before(s, keys[i], best_score, keys[best])) {
      best = i;
      best_score = s;
    }
  }
  return best;
}

bool sbxc_key_set_has(const struct sbxc_key_set *s, const char *key) {
  for (size_t i = 0; s != NULL && i < s->n; i++)
    if (strcmp(s->keys[i], key) == 0)
      return true;
  return false;
}

int sbxc_key_set_add(struct sbxc_key_set *s, const char *key) {
  if (sbxc_key_set_has(s, key))
    return 0;
  char(*keys)[SBXC_KEY_MAX] = realloc(s->keys, (s->n + 1) * sizeof(*keys));
  if (keys == NULL)
    return -1;
  snprintf(keys[s->n], sizeof(keys[s->n]), "%s", key);
  s->keys = keys;
  s->n++;
  return 0;
}

void sbxc_key_set_free(struct sbxc_key_set *s) {
  free(s->keys);
  s->keys = NULL;
  s->n = 0;
}
