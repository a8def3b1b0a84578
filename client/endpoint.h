/* endpoint.h: an endpoint's address, pure and shared by the fleet
 * (fleet.c) and the session pins (session_pins.c): the URLs a client is
 * given, the key that names one address ("tcp://1.2.3.4:7878"), the
 * rendezvous rule that places a session on a key, and sets of keys. No
 * socket, no name look-up, no lock. Internal to libsandbox-client. */
#ifndef SBXC_ENDPOINT_H
#define SBXC_ENDPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest endpoint key: nng's own limit on a URL (NNG_MAXADDRLEN, 128). */
#define SBXC_KEY_MAX 160

/* One URL as given. An ipc:// or inproc:// URL or an IP literal is one
 * fixed address; a host name is resolved (getaddrinfo) to its addresses. */
struct sbxc_target {
  char url[SBXC_KEY_MAX];
  bool is_name;
  bool tls;                /* tls+tcp:// */
  char host[SBXC_KEY_MAX]; /* tcp, tls: as written (an IPv6 address without brackets) */
  unsigned port;           /* tcp, tls */
  char fixed_key[SBXC_KEY_MAX];
};

/* Parses tcp://HOST:PORT and tls+tcp://HOST:PORT (HOST a name, an IPv4
 * address or [IPv6]), ipc://PATH or inproc://NAME. Returns 0, or -1 with
 * err. */
int sbxc_target_parse(const char *url, struct sbxc_target *out, char *err, size_t errlen);
/* "tls+tcp" or "tcp": the scheme of t's keys. */
const char *sbxc_target_scheme(const struct sbxc_target *t);

/* The key of one address, spelled as every client spells it:
 * "tcp://1.2.3.4:7878", "tls+tcp://[::1]:7878" (inet_ntop's form). scheme is
 * "tcp" or "tls+tcp", family AF_INET or AF_INET6, addr an in_addr or
 * in6_addr. Returns 0 or -1. */
int sbxc_address_key(const char *scheme, int family, const void *addr, unsigned port, char *out,
                     size_t len);

/* FNV-1a 32-bit (offset basis 0x811c9dc5, prime 0x01000193). */
uint32_t sbxc_fnv1a32(const void *data, size_t len);
/* The rendezvous score of an endpoint for a session: FNV-1a 32 over the
 * session id's bytes, one NUL byte and the key (docs/CLIENTS.md). */
uint32_t sbxc_session_score(const char *session_id, const char *key);
/* The index of the key holding the session: the highest score, equal
 * scores to the smallest key (strcmp). n must be > 0. */
size_t sbxc_session_home(const char *session_id, const char *const *keys, size_t n);
/* The rendezvous rule's order: true when (score_a, key_a) holds a session
 * before (score_b, key_b): a higher score first, then the smaller key. */
bool sbxc_home_before(uint32_t score_a, const char *key_a, uint32_t score_b, const char *key_b);

/* A set of endpoint keys: a name's addresses, or the endpoints one call
 * was answered RESOURCE_EXHAUSTED or UNAVAILABLE by, or could not send to
 * (its retries prefer others). Start from {0}. */
struct sbxc_key_set {
  char (*keys)[SBXC_KEY_MAX];
  size_t n;
};
bool sbxc_key_set_has(const struct sbxc_key_set *s, const char *key);
/* Returns 0, or -1 when out of memory. */
int sbxc_key_set_add(struct sbxc_key_set *s, const char *key);
void sbxc_key_set_free(struct sbxc_key_set *s);

#endif
