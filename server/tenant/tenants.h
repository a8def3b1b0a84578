/* tenants.h: who a call is (docs/TENANTS.md). The tenants file
 * (--tenants FILE, JSON) names each tenant, the SHA-256 digests of its API
 * keys, the client-certificate identities it is known by, its weight in the
 * queue and its quotas. Without a file there is one tenant, "default", and
 * every call is it: the server behaves as before tenants existed.
 *
 * A struct tenant lives as long as the registry: sessions, runs and queue
 * entries hold plain pointers to it, and compare those pointers to tell
 * tenants apart. A reload (SIGHUP) updates the policies of the tenants it
 * keeps, adds new ones and retires those no longer in the file (their
 * credentials stop working at once; what they have running ends normally).
 * A file that does not load changes nothing.
 *
 * Must never: keep or log an API key (only its digest, compared in constant
 * time), trust an identity a caller merely claims, or let a bad file leave
 * a half-loaded registry. */
#ifndef SBX_TENANTS_H
#define SBX_TENANTS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "egress_allow.h"
#include "error.h"
#include "settings.h"

#define TENANT_NAME_MAX 64
#define TENANT_DEFAULT_NAME "default"
#define TENANTS_MAX 1024
#define TENANT_KEY_MAX 512 /* bytes of an API key on the wire */
#define TENANT_IDENTITY_MAX 512
#define TENANT_DIGEST_BYTES 32

/* What the file says of a tenant; 0 in a count: no quota of its own. */
struct tenant_policy {
  uint32_t weight; /* 1..1000 */
  uint32_t max_concurrent, max_queued, max_sessions, max_interpreters;
  double rate_per_s, burst;          /* rate 0: no rate limit */
  struct settings_limits limits_max; /* 0: the server's --max-* */
  /* What its runs' allow_net may ask, within the server's --egress-allow
   * (docs/EGRESS.md); without the key, the server's alone. */
  bool has_egress_allow;
  struct egress_allow egress_allow;
};

struct tenant {
  char name[TENANT_NAME_MAX + 1];
  unsigned index; /* 0.. in the order tenants were first loaded: stable */
  /* Under the registry's lock. */
  bool active; /* in the file now */
  struct tenant_policy policy;
  double tokens; /* the rate limit's bucket */
  uint64_t tokens_at_ms;
  /* What it uses now, kept by the layers that own each thing. */
  atomic_uint sessions, interpreters, queued, running;
};

/* How a call proved who it is, from the transport and the envelope. */
struct tenant_proof {
  bool has_key;
  uint8_t key_digest[TENANT_DIGEST_BYTES];
  const char *const *cert_identities; /* a verified client certificate's */
  size_t n_cert_identities;
  bool loopback; /* from 127.0.0.0/8, ::1 or a local socket */
};

enum tenant_auth_failure {
  TENANT_AUTH_NO_CREDENTIAL,
  TENANT_AUTH_UNKNOWN_KEY,
  TENANT_AUTH_UNKNOWN_CERT,
  TENANT_AUTH_FAILURES_N
};

struct tenants {
  pthread_mutex_t lock;
  bool enabled; /* a tenants file is in use */
  char path[4096];
  char anonymous[TENANT_NAME_MAX + 1]; /* --anonymous-tenant, "" none */
  struct tenant **all;                 /* every tenant ever loaded, by index */
  size_t n_all;
  struct tenant_key *keys; /* the active tenants' credentials */
  size_t n_keys;
  struct tenant_cert *certs;
  size_t n_certs;
  struct tenant *anonymous_tenant; /* NULL: anonymous callers are refused */
  atomic_uint_fast64_t auth_failures[TENANT_AUTH_FAILURES_N];
  atomic_uint_fast64_t reloads, reload_failures;
};

/* path NULL or "": the one tenant "default" (anonymous must then be "" or
 * "default"). Else the file is loaded and checked; anonymous, when given,
 * must name a tenant in it. -1 with err naming the file and the problem. */
int tenants_init(struct tenants *t, const char *path, const char *anonymous, struct sbx_error *err);
void tenants_destroy(struct tenants *t);
/* Reads the file again: 0 when it replaced the registry's contents, -1
 * with err when it did not load (the registry is unchanged). */
int tenants_reload(struct tenants *t, struct sbx_error *err);

/* SHA-256 of an API key, as the file stores it. */
void tenants_key_digest(const char *key, size_t len, uint8_t out[TENANT_DIGEST_BYTES]);
/* The tenant a call is, or NULL with err UNAUTHENTICATED (a fixed message
 * per failure, never the credential) and *why. Without a file: "default". */
struct tenant *tenants_authenticate(struct tenants *t, const struct tenant_proof *proof,
                                    enum tenant_auth_failure *why, struct sbx_error *err);
const char *tenant_auth_failure_name(enum tenant_auth_failure why);
/* The tenant an API key belongs to, or NULL (for HTTP paths that check a
 * Bearer key themselves, such as /metrics). */
struct tenant *tenants_by_key(struct tenants *t, const char *key, size_t len);

/* A copy of the tenant's policy now. */
void tenant_policy_read(struct tenants *t, const struct tenant *tn, struct tenant_policy *out);
/* The rate limit: true when a call may go now (a token taken); false with
 * *retry_ms, how long until the next token. */
bool tenant_rate_take(struct tenants *t, struct tenant *tn, uint64_t now_ms, uint64_t *retry_ms);
/* Tenants ever loaded (for metrics: one label each), and the i-th. */
size_t tenants_count(struct tenants *t);
struct tenant *tenants_at(struct tenants *t, size_t i);

#endif
