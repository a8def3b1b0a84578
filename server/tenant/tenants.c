/* tenants.c: see tenants.h. The file is parsed into a staging copy, checked
 * whole, and only then swapped in under the lock, so a bad file leaves the
 * registry as it was. */
#include "tenants.h"

#include <errno.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cleanup.h"
#include "text.h"

#define TENANTS_FILE_MAX (4u << 20)
#define TENANT_KEYS_MAX 64       /* per tenant */
#define TENANT_IDENTITIES_MAX 64 /* per tenant */

struct tenant_key {
  uint8_t digest[TENANT_DIGEST_BYTES];
  struct tenant *tenant;
};

struct tenant_cert {
  char *identity;
  struct tenant *tenant;
};

/* One tenant as the file has it, before it is swapped in. */
struct staged_tenant {
  char name[TENANT_NAME_MAX + 1];
  struct tenant_policy policy;
  uint8_t (*digests)[TENANT_DIGEST_BYTES];
  size_t n_digests;
  char **identities;
  size_t n_identities;
};

struct staging {
  struct staged_tenant *tenants;
  size_t n;
};

static void staging_free(struct staging *s) {
  for (size_t i = 0; i < s->n; i++) {
    free(s->tenants[i].digests);
    for (size_t j = 0; j < s->tenants[i].n_identities; j++)
      free(s->tenants[i].identities[j]);
    free(s->tenants[i].identities);
  }
  free(s->tenants);
  *s = (struct staging){0};
}

static bool name_ok(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > TENANT_NAME_MAX)
    return false;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
      return false;
  }
  return true;
}

static bool parse_digest(const char *hex, uint8_t out[TENANT_DIGEST_BYTES]) {
  if (strlen(hex) != 2 * TENANT_DIGEST_BYTES)
    return false;
  for (size_t i = 0; i < TENANT_DIGEST_BYTES; i++) {
    int hi = text_hex_digit(hex[2 * i]), lo = text_hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    out[i] = (uint8_t)(hi << 4 | lo);
  }
  return true;
}

/* A count field: absent 0, else an integer in 0..max. */
static int read_count(json_t *obj, const char *key, uint32_t max, uint32_t *out, const char *tenant,
                      struct sbx_error *err) {
  json_t *v = json_object_get(obj, key);
  *out = 0;
  if (v == NULL)
    return 0;
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (json_int_t)max)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tenant \"%s\": %s must be an integer from 0 to %u", tenant, key, max);
  *out = (uint32_t)json_integer_value(v);
  return 0;
}

static int read_rate(json_t *obj, const char *key, double *out, const char *tenant,
                     struct sbx_error *err) {
  json_t *v = json_object_get(obj, key);
  *out = 0;
  if (v == NULL)
    return 0;
  if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1e6)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tenant \"%s\": %s must be a number from 0 to 1000000", tenant, key);
  *out = json_number_value(v);
  return 0;
}

static int read_limits_max(json_t *obj, struct settings_limits *out, const char *tenant,
                           struct sbx_error *err) {
  memset(out, 0, sizeof *out);
  json_t *lm = json_object_get(obj, "limits_max");
  if (lm == NULL)
    return 0;
  if (!json_is_object(lm))
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tenant \"%s\": limits_max must be an object", tenant);
  const char *key;
  json_t *v;
  json_object_foreach(lm, key, v) {
    int i = 0;
    while (i < LIMITS_N && strcmp(limit_defs[i].name, key) != 0)
      i++;
    if (i == LIMITS_N)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "tenant \"%s\": limits_max has no limit named \"%s\"", tenant, key);
    if (!json_is_integer(v) || json_integer_value(v) < limit_defs[i].min)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "tenant \"%s\": limits_max.%s must be an integer of at least %lld",
                           tenant, key, (long long)limit_defs[i].min);
    out->v[i] = json_integer_value(v);
  }
  return 0;
}

static const char *const tenant_keys[] = {"name",
                                          "api_keys_sha256",
                                          "cert_identities",
                                          "weight",
                                          "max_concurrent",
                                          "max_queued",
                                          "max_sessions",
                                          "max_interpreters",
                                          "rate_per_s",
                                          "burst",
                                          "limits_max",
                                          "egress_allow",
                                          NULL};

static int check_known_keys(json_t *obj, const char *tenant, struct sbx_error *err) {
  const char *key;
  json_t *v;
  json_object_foreach(obj, key, v) {
    size_t i = 0;
    while (tenant_keys[i] != NULL && strcmp(tenant_keys[i], key) != 0)
      i++;
    if (tenant_keys[i] == NULL)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "tenant \"%s\": unknown key \"%s\"",
                           tenant, key);
  }
  return 0;
}

static int read_strings(json_t *obj, const char *key, size_t max, const char *tenant, json_t **out,
                        struct sbx_error *err) {
  *out = json_object_get(obj, key);
  if (*out == NULL)
    return 0;
  if (!json_is_array(*out) || json_array_size(*out) > max)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tenant \"%s\": %s must be an array of at most %zu strings", tenant, key,
                         max);
  size_t i;
  json_t *v;
  json_array_foreach(*out, i, v) {
    if (!json_is_string(v))
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "tenant \"%s\": %s[%zu] is not a string",
                           tenant, key, i);
  }
  return 0;
}

static int stage_credentials(json_t *obj, struct staged_tenant *st, struct sbx_error *err) {
  json_t *keys, *ids;
  if (read_strings(obj, "api_keys_sha256", TENANT_KEYS_MAX, st->name, &keys, err) < 0 ||
      read_strings(obj, "cert_identities", TENANT_IDENTITIES_MAX, st->name, &ids, err) < 0)
    return -1;
  size_t nk = keys != NULL ? json_array_size(keys) : 0;
  size_t ni = ids != NULL ? json_array_size(ids) : 0;
  st->digests = calloc(nk ? nk : 1, TENANT_DIGEST_BYTES);
  st->identities = calloc(ni ? ni : 1, sizeof(char *));
  if (st->digests == NULL || st->identities == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "tenants");
  for (size_t i = 0; i < nk; i++) {
    if (!parse_digest(json_string_value(json_array_get(keys, i)), st->digests[i]))
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "tenant \"%s\": api_keys_sha256[%zu] is not 64 hex digits (the "
                           "SHA-256 of the key: sha256sum)",
                           st->name, i);
    st->n_digests++;
  }
  for (size_t i = 0; i < ni; i++) {
    const char *id = json_string_value(json_array_get(ids, i));
    size_t n = strlen(id);
    if (n == 0 || n > TENANT_IDENTITY_MAX)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "tenant \"%s\": cert_identities[%zu] must have 1 to %d bytes", st->name,
                           i, TENANT_IDENTITY_MAX);
    if ((st->identities[i] = strdup(id)) == NULL)
      return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "tenants");
    st->n_identities++;
  }
  return 0;
}

/* egress_allow: allow entries (egress_allow.h), at most EGRESS_ALLOW_MAX. */
static int read_egress_allow(json_t *obj, struct tenant_policy *p, const char *tenant,
                             struct sbx_error *err) {
  json_t *list;
  if (read_strings(obj, "egress_allow", EGRESS_ALLOW_MAX, tenant, &list, err) < 0)
    return -1;
  p->has_egress_allow = list != NULL;
  p->egress_allow.n = 0;
  for (size_t i = 0; list != NULL && i < json_array_size(list); i++) {
    const char *text = json_string_value(json_array_get(list, i));
    char why[200];
    if (strlen(text) > EGRESS_ALLOW_ENTRY_MAX ||
        egress_allow_parse(text, &p->egress_allow.e[i], why, sizeof why) < 0)
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "tenant \"%s\": egress_allow[%zu]: %s",
                           tenant, i,
                           strlen(text) > EGRESS_ALLOW_ENTRY_MAX ? "longer than 300 bytes" : why);
    p->egress_allow.n++;
  }
  return 0;
}

static int stage_tenant(json_t *obj, size_t index, struct staged_tenant *st,
                        struct sbx_error *err) {
  if (!json_is_object(obj))
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "tenants[%zu] is not an object", index);
  const char *name = json_string_value(json_object_get(obj, "name"));
  if (name == NULL || !name_ok(name))
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tenants[%zu]: name must be 1 to %d of a-z 0-9 . _ -", index,
                         TENANT_NAME_MAX);
  snprintf(st->name, sizeof st->name, "%s", name);
  struct tenant_policy *p = &st->policy;
  if (check_known_keys(obj, name, err) < 0 ||
      read_count(obj, "weight", 1000, &p->weight, name, err) < 0 ||
      read_count(obj, "max_concurrent", 1u << 20, &p->max_concurrent, name, err) < 0 ||
      read_count(obj, "max_queued", 1u << 20, &p->max_queued, name, err) < 0 ||
      read_count(obj, "max_sessions", 1u << 20, &p->max_sessions, name, err) < 0 ||
      read_count(obj, "max_interpreters", 1u << 20, &p->max_interpreters, name, err) < 0 ||
      read_rate(obj, "rate_per_s", &p->rate_per_s, name, err) < 0 ||
      read_rate(obj, "burst", &p->burst, name, err) < 0 ||
      read_limits_max(obj, &p->limits_max, name, err) < 0 ||
      read_egress_allow(obj, p, name, err) < 0)
    return -1;
  if (json_object_get(obj, "weight") != NULL && p->weight == 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tenant \"%s\": weight must be an integer from 1 to 1000", name);
  if (p->weight == 0)
    p->weight = 1;
  if (p->rate_per_s > 0 && p->burst < 1)
    p->burst = p->rate_per_s < 1 ? 1 : p->rate_per_s;
  return stage_credentials(obj, st, err);
}

/* No name, key digest or identity twice in the whole file: a credential
 * must mean one tenant. */
static int check_unique(const struct staging *s, struct sbx_error *err) {
  for (size_t i = 0; i < s->n; i++)
    for (size_t j = 0; j < i; j++) {
      const struct staged_tenant *a = &s->tenants[i], *b = &s->tenants[j];
      if (strcmp(a->name, b->name) == 0)
        return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "tenant \"%s\" is named twice", a->name);
    }
  for (size_t i = 0; i < s->n; i++)
    for (size_t k = 0; k < s->tenants[i].n_digests; k++)
      for (size_t j = 0; j <= i; j++)
        for (size_t l = 0; l < (j == i ? k : s->tenants[j].n_digests); l++)
          if (memcmp(s->tenants[i].digests[k], s->tenants[j].digests[l], TENANT_DIGEST_BYTES) == 0)
            return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                                 "tenant \"%s\": api_keys_sha256[%zu] is also a key of \"%s\"",
                                 s->tenants[i].name, k, s->tenants[j].name);
  for (size_t i = 0; i < s->n; i++)
    for (size_t k = 0; k < s->tenants[i].n_identities; k++)
      for (size_t j = 0; j <= i; j++)
        for (size_t l = 0; l < (j == i ? k : s->tenants[j].n_identities); l++)
          if (strcmp(s->tenants[i].identities[k], s->tenants[j].identities[l]) == 0)
            return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                                 "tenant \"%s\": cert identity \"%s\" is also one of \"%s\"",
                                 s->tenants[i].name, s->tenants[i].identities[k],
                                 s->tenants[j].name);
  return 0;
}

static int stage_file(const char *path, const char *anonymous, struct staging *s,
                      struct sbx_error *err) {
  struct stat st;
  if (stat(path, &st) < 0)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, errno, "tenants file %s", path);
  if (!S_ISREG(st.st_mode) || st.st_size > (off_t)TENANTS_FILE_MAX)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tenants file %s: not a regular file of at most %u bytes", path,
                         TENANTS_FILE_MAX);
  json_error_t jerr;
  json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
  if (root == NULL)
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "tenants file %s: line %d: %s", path,
                         jerr.line, jerr.text);
  int rc = 0;
  json_t *list = json_object_get(root, "tenants");
  if (!json_is_object(root) || json_object_size(root) != 1 || !json_is_array(list) ||
      json_array_size(list) == 0 || json_array_size(list) > TENANTS_MAX) {
    rc = sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                       "tenants file %s: want {\"tenants\": [1 to %d tenants]} and nothing else",
                       path, TENANTS_MAX);
  } else if ((s->tenants = calloc(json_array_size(list), sizeof *s->tenants)) == NULL) {
    rc = sbx_error_set(err, SBX_INTERNAL, ENOMEM, "tenants file %s", path);
  } else {
    for (size_t i = 0; rc == 0 && i < json_array_size(list); i++) {
      s->n++;
      rc = stage_tenant(json_array_get(list, i), i, &s->tenants[i], err);
    }
    if (rc == 0)
      rc = check_unique(s, err);
  }
  json_decref(root);
  if (rc == 0 && anonymous[0] != '\0') {
    size_t i = 0;
    while (i < s->n && strcmp(s->tenants[i].name, anonymous) != 0)
      i++;
    if (i == s->n)
      rc = sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "--anonymous-tenant %s: no such tenant in %s", anonymous, path);
  }
  if (rc < 0 && err->msg[0] != '\0' && strncmp(err->msg, "tenants file", 12) != 0 &&
      strncmp(err->msg, "--anonymous", 11) != 0) {
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    snprintf(err->msg, sizeof err->msg, "tenants file %s: %s", path, msg);
  }
  return rc;
}

static struct tenant *find_or_add(struct tenants *t, const char *name) {
  for (size_t i = 0; i < t->n_all; i++)
    if (strcmp(t->all[i]->name, name) == 0)
      return t->all[i];
  struct tenant **all = realloc(t->all, (t->n_all + 1) * sizeof *all);
  if (all == NULL)
    return NULL;
  t->all = all;
  struct tenant *tn = calloc(1, sizeof *tn);
  if (tn == NULL)
    return NULL;
  snprintf(tn->name, sizeof tn->name, "%s", name);
  tn->index = (unsigned)t->n_all;
  t->all[t->n_all++] = tn;
  return tn;
}

static void free_credentials(struct tenant_key *keys, struct tenant_cert *certs, size_t n_certs) {
  free(keys);
  for (size_t i = 0; i < n_certs; i++)
    free(certs[i].identity);
  free(certs);
}

/* Swaps the staged file in; the lock is held. */
static int apply(struct tenants *t, struct staging *s, struct sbx_error *err) {
  size_t nk = 0, nc = 0;
  for (size_t i = 0; i < s->n; i++) {
    nk += s->tenants[i].n_digests;
    nc += s->tenants[i].n_identities;
  }
  struct tenant_key *keys = calloc(nk ? nk : 1, sizeof *keys);
  struct tenant_cert *certs = calloc(nc ? nc : 1, sizeof *certs);
  struct tenant **targets = calloc(s->n ? s->n : 1, sizeof *targets);
  if (keys == NULL || certs == NULL || targets == NULL) {
    free(keys);
    free(certs);
    free(targets);
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "tenants");
  }
  /* Tenants are never forgotten while the server runs (their pointers are
   * held): the names ever loaded are bounded, as the metrics' labels are. */
  size_t fresh = 0;
  for (size_t i = 0; i < s->n; i++) {
    size_t j = 0;
    while (j < t->n_all && strcmp(t->all[j]->name, s->tenants[i].name) != 0)
      j++;
    fresh += j == t->n_all;
  }
  if (t->n_all + fresh > TENANTS_MAX) {
    free(keys);
    free(certs);
    free(targets);
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                         "tenants file %s: %zu new tenant names would make %zu since the start, "
                         "more than %d (retired names count until a restart)",
                         t->path, fresh, t->n_all + fresh, TENANTS_MAX);
  }
  for (size_t i = 0; i < s->n; i++)
    if ((targets[i] = find_or_add(t, s->tenants[i].name)) == NULL) {
      free(keys);
      free(certs);
      free(targets);
      return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "tenants");
    }
  /* Nothing can fail from here on. */
  for (size_t i = 0; i < t->n_all; i++)
    t->all[i]->active = false;
  size_t k = 0, c = 0;
  for (size_t i = 0; i < s->n; i++) {
    struct tenant *tn = targets[i];
    struct staged_tenant *st = &s->tenants[i];
    bool was_limited = tn->policy.rate_per_s > 0;
    tn->policy = st->policy;
    tn->active = true;
    if (!was_limited || tn->tokens > tn->policy.burst)
      tn->tokens = tn->policy.burst;
    for (size_t j = 0; j < st->n_digests; j++, k++) {
      memcpy(keys[k].digest, st->digests[j], TENANT_DIGEST_BYTES);
      keys[k].tenant = tn;
    }
    for (size_t j = 0; j < st->n_identities; j++, c++) {
      certs[c].identity = steal_pointer(&st->identities[j]);
      certs[c].tenant = tn;
    }
  }
  free_credentials(t->keys, t->certs, t->n_certs);
  t->keys = keys;
  t->n_keys = nk;
  t->certs = certs;
  t->n_certs = nc;
  t->anonymous_tenant = NULL;
  for (size_t i = 0; i < s->n && t->anonymous[0] != '\0'; i++)
    if (strcmp(targets[i]->name, t->anonymous) == 0)
      t->anonymous_tenant = targets[i];
  free(targets);
  return 0;
}

int tenants_init(struct tenants *t, const char *path, const char *anonymous,
                 struct sbx_error *err) {
  memset(t, 0, sizeof *t);
  pthread_mutex_init(&t->lock, NULL);
  snprintf(t->anonymous, sizeof t->anonymous, "%s", anonymous != NULL ? anonymous : "");
  if (path == NULL || path[0] == '\0') {
    if (t->anonymous[0] != '\0' && strcmp(t->anonymous, TENANT_DEFAULT_NAME) != 0) {
      pthread_mutex_destroy(&t->lock);
      return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0,
                           "--anonymous-tenant %s needs --tenants (without it every caller is "
                           "the tenant \"default\")",
                           t->anonymous);
    }
    struct tenant *tn = find_or_add(t, TENANT_DEFAULT_NAME);
    if (tn == NULL) {
      pthread_mutex_destroy(&t->lock);
      return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "tenants");
    }
    tn->active = true;
    tn->policy.weight = 1;
    t->anonymous_tenant = tn;
    return 0;
  }
  if (strlen(path) >= sizeof t->path) {
    pthread_mutex_destroy(&t->lock);
    return sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "--tenants: the path is too long");
  }
  snprintf(t->path, sizeof t->path, "%s", path);
  t->enabled = true;
  if (tenants_reload(t, err) < 0) {
    tenants_destroy(t);
    return -1;
  }
  atomic_store(&t->reloads, 0);
  return 0;
}

void tenants_destroy(struct tenants *t) {
  free_credentials(t->keys, t->certs, t->n_certs);
  for (size_t i = 0; i < t->n_all; i++)
    free(t->all[i]);
  free(t->all);
  pthread_mutex_destroy(&t->lock);
  memset(t, 0, sizeof *t);
}

int tenants_reload(struct tenants *t, struct sbx_error *err) {
  if (!t->enabled)
    return 0;
  struct staging s = {0};
  int rc = stage_file(t->path, t->anonymous, &s, err);
  if (rc == 0) {
    pthread_mutex_lock(&t->lock);
    rc = apply(t, &s, err);
    pthread_mutex_unlock(&t->lock);
  }
  staging_free(&s);
  atomic_fetch_add(rc == 0 ? &t->reloads : &t->reload_failures, 1);
  return rc;
}

void tenants_key_digest(const char *key, size_t len, uint8_t out[TENANT_DIGEST_BYTES]) {
  SHA256((const unsigned char *)key, len, out);
}

/* Every entry is compared, whatever matched: the time taken does not depend
 * on which key, if any, it was. The lock is held. */
static struct tenant *by_digest(struct tenants *t, const uint8_t digest[TENANT_DIGEST_BYTES]) {
  struct tenant *found = NULL;
  for (size_t i = 0; i < t->n_keys; i++)
    if (CRYPTO_memcmp(t->keys[i].digest, digest, TENANT_DIGEST_BYTES) == 0)
      found = t->keys[i].tenant;
  return found;
}

static struct tenant *by_identity(struct tenants *t, const char *const *ids, size_t n) {
  for (size_t j = 0; j < n; j++)
    for (size_t i = 0; i < t->n_certs; i++)
      if (strcmp(t->certs[i].identity, ids[j]) == 0)
        return t->certs[i].tenant;
  return NULL;
}

static const char *const failure_names[TENANT_AUTH_FAILURES_N] = {
    [TENANT_AUTH_NO_CREDENTIAL] = "no_credential",
    [TENANT_AUTH_UNKNOWN_KEY] = "unknown_key",
    [TENANT_AUTH_UNKNOWN_CERT] = "unknown_certificate",
};

const char *tenant_auth_failure_name(enum tenant_auth_failure why) {
  return (unsigned)why < TENANT_AUTH_FAILURES_N ? failure_names[why] : "unknown";
}

struct tenant *tenants_authenticate(struct tenants *t, const struct tenant_proof *proof,
                                    enum tenant_auth_failure *why, struct sbx_error *err) {
  if (!t->enabled)
    return t->all[0];
  pthread_mutex_lock(&t->lock);
  struct tenant *tn = NULL;
  if (proof->has_key) {
    /* A key decides alone: a wrong key is refused even with a good
     * certificate or from loopback (it is a mistake worth hearing of). */
    tn = by_digest(t, proof->key_digest);
    *why = TENANT_AUTH_UNKNOWN_KEY;
  } else if (proof->n_cert_identities > 0) {
    tn = by_identity(t, proof->cert_identities, proof->n_cert_identities);
    if (tn == NULL && proof->loopback)
      tn = t->anonymous_tenant;
    *why = TENANT_AUTH_UNKNOWN_CERT;
  } else {
    if (proof->loopback)
      tn = t->anonymous_tenant;
    *why = TENANT_AUTH_NO_CREDENTIAL;
  }
  pthread_mutex_unlock(&t->lock);
  if (tn != NULL)
    return tn;
  atomic_fetch_add(&t->auth_failures[*why], 1);
  if (*why == TENANT_AUTH_NO_CREDENTIAL)
    sbx_error_set(err, SBX_UNAUTHENTICATED, 0,
                  "this server needs an API key (RequestEnvelope.credential, Authorization: "
                  "Bearer) or a client certificate of a tenant");
  else if (*why == TENANT_AUTH_UNKNOWN_KEY)
    sbx_error_set(err, SBX_UNAUTHENTICATED, 0, "the API key belongs to no tenant of this server");
  else
    sbx_error_set(err, SBX_UNAUTHENTICATED, 0,
                  "the client certificate names no tenant of this server");
  return NULL;
}

struct tenant *tenants_by_key(struct tenants *t, const char *key, size_t len) {
  uint8_t digest[TENANT_DIGEST_BYTES];
  tenants_key_digest(key, len, digest);
  pthread_mutex_lock(&t->lock);
  struct tenant *tn = by_digest(t, digest);
  pthread_mutex_unlock(&t->lock);
  return tn;
}

void tenant_policy_read(struct tenants *t, const struct tenant *tn, struct tenant_policy *out) {
  pthread_mutex_lock(&t->lock);
  *out = tn->policy;
  pthread_mutex_unlock(&t->lock);
}

bool tenant_rate_take(struct tenants *t, struct tenant *tn, uint64_t now_ms, uint64_t *retry_ms) {
  bool ok = true;
  pthread_mutex_lock(&t->lock);
  double rate = tn->policy.rate_per_s;
  if (rate > 0) {
    if (now_ms > tn->tokens_at_ms) {
      tn->tokens += (double)(now_ms - tn->tokens_at_ms) * rate / 1000.0;
      if (tn->tokens > tn->policy.burst)
        tn->tokens = tn->policy.burst;
    }
    tn->tokens_at_ms = now_ms;
    if (tn->tokens >= 1) {
      tn->tokens -= 1;
    } else {
      ok = false;
      *retry_ms = (uint64_t)((1 - tn->tokens) * 1000.0 / rate) + 1;
    }
  }
  pthread_mutex_unlock(&t->lock);
  return ok;
}

size_t tenants_count(struct tenants *t) {
  pthread_mutex_lock(&t->lock);
  size_t n = t->n_all;
  pthread_mutex_unlock(&t->lock);
  return n;
}

struct tenant *tenants_at(struct tenants *t, size_t i) {
  pthread_mutex_lock(&t->lock);
  struct tenant *tn = i < t->n_all ? t->all[i] : NULL;
  pthread_mutex_unlock(&t->lock);
  return tn;
}
