/* The tenants registry (server/tenant/tenants.c): the file's checks, each
 * refusal's message, a reload that keeps the old registry on a bad file,
 * revoked keys, stable tenant pointers across reloads, the anonymous
 * tenant, the rate limit's bucket. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tenants.h"

static char path[] = "/tmp/unit_tenants_XXXXXX";
static struct sbx_error err;

/* sha256("key-a"), sha256("key-b"), sha256("key-c") */
static char da[65], db[65], dc[65];

static void hex(const char *key, char out[65]) {
  uint8_t d[TENANT_DIGEST_BYTES];
  tenants_key_digest(key, strlen(key), d);
  for (int i = 0; i < TENANT_DIGEST_BYTES; i++)
    snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void write_file(const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static int setup(void **state) {
  int fd = mkstemp(path);
  if (fd < 0)
    return -1;
  close(fd);
  hex("key-a", da);
  hex("key-b", db);
  hex("key-c", dc);
  return 0;
}

static int teardown(void **state) {
  unlink(path);
  return 0;
}

static struct tenant *by_key(struct tenants *t, const char *key) {
  struct tenant_proof p = {.has_key = true};
  tenants_key_digest(key, strlen(key), p.key_digest);
  enum tenant_auth_failure why;
  return tenants_authenticate(t, &p, &why, &err);
}

static void two_tenants(char *buf, size_t len, const char *extra_b) {
  snprintf(buf, len,
           "{\"tenants\": [{\"name\": \"a\", \"api_keys_sha256\": [\"%s\"], "
           "\"cert_identities\": [\"spiffe://mesh.local/ns/a/sa/api\"], \"weight\": 2},"
           " {\"name\": \"b\", \"api_keys_sha256\": [\"%s\"]%s}]}",
           da, db, extra_b);
}

static void without_a_file_everyone_is_default(void **state) {
  struct tenants t;
  assert_int_equal(tenants_init(&t, NULL, NULL, &err), 0);
  assert_false(t.enabled);
  struct tenant_proof none = {0};
  enum tenant_auth_failure why;
  struct tenant *tn = tenants_authenticate(&t, &none, &why, &err);
  assert_non_null(tn);
  assert_string_equal(tn->name, "default");
  assert_ptr_equal(by_key(&t, "anything"), tn); /* a key is not looked at */
  tenants_destroy(&t);
  assert_int_equal(tenants_init(&t, "", "billing", &err), -1);
  assert_non_null(strstr(err.msg, "--anonymous-tenant billing needs --tenants"));
}

static void keys_and_identities(void **state) {
  char buf[1024];
  two_tenants(buf, sizeof buf, "");
  write_file(buf);
  struct tenants t;
  assert_int_equal(tenants_init(&t, path, NULL, &err), 0);
  struct tenant *a = by_key(&t, "key-a"), *b = by_key(&t, "key-b");
  assert_non_null(a);
  assert_non_null(b);
  assert_string_equal(a->name, "a");
  assert_string_equal(b->name, "b");
  assert_int_equal(a->policy.weight, 2);
  assert_int_equal(b->policy.weight, 1); /* the default */
  assert_null(by_key(&t, "key-c"));
  assert_int_equal(err.code, SBX_UNAUTHENTICATED);
  assert_string_equal(err.msg, "the API key belongs to no tenant of this server");
  assert_ptr_equal(tenants_by_key(&t, "key-b", 5), b);
  const char *ids[] = {"CN=x", "spiffe://mesh.local/ns/a/sa/api"};
  struct tenant_proof cert = {.cert_identities = ids, .n_cert_identities = 2};
  enum tenant_auth_failure why;
  assert_ptr_equal(tenants_authenticate(&t, &cert, &why, &err), a);
  /* A key decides alone: a good certificate does not save a wrong key. */
  cert.has_key = true;
  tenants_key_digest("key-c", 5, cert.key_digest);
  assert_null(tenants_authenticate(&t, &cert, &why, &err));
  assert_int_equal(why, TENANT_AUTH_UNKNOWN_KEY);
  /* Nothing, from the network or from loopback without --anonymous-tenant. */
  struct tenant_proof none = {.loopback = true};
  assert_null(tenants_authenticate(&t, &none, &why, &err));
  assert_int_equal(why, TENANT_AUTH_NO_CREDENTIAL);
  assert_non_null(strstr(err.msg, "this server needs an API key"));
  assert_int_equal(atomic_load(&t.auth_failures[TENANT_AUTH_UNKNOWN_KEY]), 2);
  assert_int_equal(atomic_load(&t.auth_failures[TENANT_AUTH_NO_CREDENTIAL]), 1);
  tenants_destroy(&t);
}

/* egress_allow: a tenant's own ceiling for allow_net, parsed; absent is
 * not the same as empty. */
static void egress_allow_per_tenant(void **state) {
  char buf[1024];
  two_tenants(buf, sizeof buf, ", \"egress_allow\": [\"*.example.com\", \"10.0.0.0/8:5432\"]");
  write_file(buf);
  struct tenants t;
  assert_int_equal(tenants_init(&t, path, NULL, &err), 0);
  struct tenant *a = by_key(&t, "key-a"), *b = by_key(&t, "key-b");
  assert_false(a->policy.has_egress_allow);
  assert_true(b->policy.has_egress_allow);
  assert_int_equal(b->policy.egress_allow.n, 2);
  assert_int_equal(b->policy.egress_allow.e[1].port, 5432);
  tenants_destroy(&t);
  two_tenants(buf, sizeof buf, ", \"egress_allow\": []");
  write_file(buf);
  assert_int_equal(tenants_init(&t, path, NULL, &err), 0);
  b = by_key(&t, "key-b");
  assert_true(b->policy.has_egress_allow);
  assert_int_equal(b->policy.egress_allow.n, 0);
  tenants_destroy(&t);
}

static void anonymous_tenant_is_for_loopback_only(void **state) {
  char buf[1024];
  two_tenants(buf, sizeof buf, "");
  write_file(buf);
  struct tenants t;
  assert_int_equal(tenants_init(&t, path, "nobody", &err), -1);
  assert_non_null(strstr(err.msg, "--anonymous-tenant nobody: no such tenant"));
  assert_int_equal(tenants_init(&t, path, "b", &err), 0);
  enum tenant_auth_failure why;
  struct tenant_proof local = {.loopback = true}, remote = {0};
  struct tenant *tn = tenants_authenticate(&t, &local, &why, &err);
  assert_non_null(tn);
  assert_string_equal(tn->name, "b");
  assert_null(tenants_authenticate(&t, &remote, &why, &err));
  tenants_destroy(&t);
}

/* Each bad file: refused with a message naming what is wrong. */
static void bad_files_are_refused(void **state) {
  char a_key[128];
  snprintf(a_key, sizeof a_key, "\"%s\"", da);
  struct {
    const char *text, *want;
  } cases[] = {
      {"{\"tenants\": []}", "want {\"tenants\": [1 to 1024 tenants]}"},
      {"{\"tenants\": [{\"name\": \"a\"}], \"x\": 1}", "want {\"tenants\""},
      {"{\"tenants\": [{\"name\": \"A b\"}]}", "name must be 1 to 64 of a-z 0-9 . _ -"},
      {"{\"tenants\": [{\"name\": \"a\", \"wieght\": 2}]}", "unknown key \"wieght\""},
      {"{\"tenants\": [{\"name\": \"a\", \"weight\": 0}]}", "weight must be an integer from 1"},
      {"{\"tenants\": [{\"name\": \"a\", \"max_queued\": -1}]}", "max_queued must be an integer"},
      {"{\"tenants\": [{\"name\": \"a\", \"rate_per_s\": \"fast\"}]}",
       "rate_per_s must be a number"},
      {"{\"tenants\": [{\"name\": \"a\", \"api_keys_sha256\": [\"abc\"]}]}",
       "is not 64 hex digits"},
      {"{\"tenants\": [{\"name\": \"a\", \"limits_max\": {\"memory\": 1}}]}",
       "limits_max has no limit named \"memory\""},
      {"{\"tenants\": [{\"name\": \"a\", \"limits_max\": {\"memory_bytes\": 1}}]}",
       "limits_max.memory_bytes must be an integer of at least"},
      {"{\"tenants\": [{\"name\": \"a\"}, {\"name\": \"a\"}]}", "tenant \"a\" is named twice"},
      {"{\"tenants\": [{\"name\": \"a\", \"egress_allow\": \"x.test\"}]}",
       "egress_allow must be an array of at most 32 strings"},
      {"{\"tenants\": [{\"name\": \"a\", \"egress_allow\": [\"x.test:0\"]}]}",
       "tenant \"a\": egress_allow[0]: port"},
      {"{\"tenants\": [{\"name\": \"a\", \"name\": \"b\"}]}", "duplicate object key"},
      {"{\"tenants\": [{\"name\": \"a\", \"cert_identities\": [\"CN=x\"]}, {\"name\": \"b\", "
       "\"cert_identities\": [\"CN=x\"]}]}",
       "cert identity \"CN=x\" is also one of \"a\""},
      {"not json", "line 1"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    write_file(cases[i].text);
    struct tenants t;
    memset(&err, 0, sizeof err);
    assert_int_equal(tenants_init(&t, path, NULL, &err), -1);
    if (strstr(err.msg, cases[i].want) == NULL)
      fail_msg("case %zu: \"%s\" not in \"%s\"", i, cases[i].want, err.msg);
    assert_non_null(strstr(err.msg, "tenants file"));
  }
  /* The same key for two tenants. */
  char buf[1024];
  snprintf(buf, sizeof buf,
           "{\"tenants\": [{\"name\": \"a\", \"api_keys_sha256\": [%s]}, {\"name\": \"b\", "
           "\"api_keys_sha256\": [%s]}]}",
           a_key, a_key);
  write_file(buf);
  struct tenants t;
  assert_int_equal(tenants_init(&t, path, NULL, &err), -1);
  assert_non_null(strstr(err.msg, "api_keys_sha256[0] is also a key of \"a\""));
  assert_int_equal(tenants_init(&t, "/nonexistent/tenants.json", NULL, &err), -1);
  assert_non_null(strstr(err.msg, "tenants file /nonexistent/tenants.json"));
}

/* The file's own bounds: its size, keys and identities per tenant, an
 * identity's length. */
static void file_bounds(void **state) {
  struct tenants t;
  size_t len = (4u << 20) + 64;
  char *buf = malloc(len);
  assert_non_null(buf);
  /* Over 4 MiB: refused before it is parsed. */
  memset(buf, ' ', len - 1);
  buf[len - 1] = '\0';
  static const char head[] = "{\"tenants\": [{\"name\": \"a\"}]}";
  memcpy(buf, head, sizeof head - 1);
  write_file(buf);
  assert_int_equal(tenants_init(&t, path, NULL, &err), -1);
  assert_non_null(strstr(err.msg, "not a regular file of at most 4194304 bytes"));
  /* 64 keys of one tenant load; 65 do not. */
  for (int n = 64; n <= 65; n++) {
    size_t off =
        (size_t)snprintf(buf, len, "{\"tenants\": [{\"name\": \"a\", \"api_keys_sha256\": [");
    for (int i = 0; i < n; i++)
      off += (size_t)snprintf(buf + off, len - off, "%s\"%064x\"", i ? "," : "", i);
    snprintf(buf + off, len - off, "]}]}");
    write_file(buf);
    int rc = tenants_init(&t, path, NULL, &err);
    if (n == 64) {
      assert_int_equal(rc, 0);
      tenants_destroy(&t);
    } else {
      assert_int_equal(rc, -1);
      assert_non_null(strstr(err.msg, "api_keys_sha256 must be an array of at most 64 strings"));
    }
  }
  /* 64 identities load; 65 do not; one of 513 bytes does not. */
  for (int n = 64; n <= 65; n++) {
    size_t off =
        (size_t)snprintf(buf, len, "{\"tenants\": [{\"name\": \"a\", \"cert_identities\": [");
    for (int i = 0; i < n; i++)
      off += (size_t)snprintf(buf + off, len - off, "%s\"CN=%d\"", i ? "," : "", i);
    snprintf(buf + off, len - off, "]}]}");
    write_file(buf);
    int rc = tenants_init(&t, path, NULL, &err);
    if (n == 64) {
      assert_int_equal(rc, 0);
      tenants_destroy(&t);
    } else {
      assert_int_equal(rc, -1);
      assert_non_null(strstr(err.msg, "cert_identities must be an array of at most 64 strings"));
    }
  }
  for (int n = 512; n <= 513; n++) {
    size_t off =
        (size_t)snprintf(buf, len, "{\"tenants\": [{\"name\": \"a\", \"cert_identities\": [\"");
    memset(buf + off, 'x', (size_t)n);
    off += (size_t)n;
    snprintf(buf + off, len - off, "\"]}]}");
    write_file(buf);
    int rc = tenants_init(&t, path, NULL, &err);
    if (n == 512) {
      assert_int_equal(rc, 0);
      tenants_destroy(&t);
    } else {
      assert_int_equal(rc, -1);
      assert_non_null(strstr(err.msg, "cert_identities[0] must have 1 to 512 bytes"));
    }
  }
  free(buf);
}

/* SIGHUP's reload: a revoked key stops at once, a tenant keeps its pointer
 * (what it has running still counts against it), a bad file keeps the old
 * registry whole. */
static void reload_revokes_and_keeps(void **state) {
  char buf[1024];
  two_tenants(buf, sizeof buf, "");
  write_file(buf);
  struct tenants t;
  assert_int_equal(tenants_init(&t, path, NULL, &err), 0);
  struct tenant *a = by_key(&t, "key-a"), *b = by_key(&t, "key-b");
  atomic_store(&b->running, 3);
  /* b's key replaced by key-c; a gone from the file. */
  snprintf(buf, sizeof buf,
           "{\"tenants\": [{\"name\": \"b\", \"api_keys_sha256\": [\"%s\"], \"max_sessions\": 5}]}",
           dc);
  write_file(buf);
  assert_int_equal(tenants_reload(&t, &err), 0);
  assert_null(by_key(&t, "key-b"));
  assert_null(by_key(&t, "key-a"));
  assert_ptr_equal(by_key(&t, "key-c"), b);
  assert_int_equal(atomic_load(&b->running), 3);
  assert_int_equal(b->policy.max_sessions, 5);
  assert_false(a->active);
  assert_int_equal(tenants_count(&t), 2); /* a stays, retired: pointers to it stay valid */
  write_file("{\"tenants\": [");
  assert_int_equal(tenants_reload(&t, &err), -1);
  assert_ptr_equal(by_key(&t, "key-c"), b); /* the old registry, whole */
  assert_int_equal(atomic_load(&t.reload_failures), 1);
  assert_int_equal(atomic_load(&t.reloads), 1);
  tenants_destroy(&t);
}

/* Retired names still count (their tenants are held): at most TENANTS_MAX
 * names since the start, or the reload is refused and changes nothing. */
static void names_since_start_are_bounded(void **state) {
  size_t len = 32 * TENANTS_MAX + 64;
  char *buf = malloc(len);
  assert_non_null(buf);
  size_t off = (size_t)snprintf(buf, len, "{\"tenants\": [");
  for (int i = 0; i < TENANTS_MAX; i++)
    off += (size_t)snprintf(buf + off, len - off, "%s{\"name\": \"t%d\"}", i ? "," : "", i);
  snprintf(buf + off, len - off, "]}");
  write_file(buf);
  struct tenants t;
  assert_int_equal(tenants_init(&t, path, NULL, &err), 0);
  assert_int_equal(tenants_count(&t), TENANTS_MAX);
  write_file("{\"tenants\": [{\"name\": \"t0\"}, {\"name\": \"brand-new\"}]}");
  assert_int_equal(tenants_reload(&t, &err), -1);
  assert_non_null(strstr(err.msg, "1 new tenant names would make 1025 since the start"));
  assert_int_equal(tenants_count(&t), TENANTS_MAX);
  write_file("{\"tenants\": [{\"name\": \"t5\"}]}"); /* a known name: fine */
  assert_int_equal(tenants_reload(&t, &err), 0);
  tenants_destroy(&t);
  free(buf);
}

static void rate_limit_bucket(void **state) {
  char buf[1024];
  two_tenants(buf, sizeof buf, ", \"rate_per_s\": 10, \"burst\": 2");
  write_file(buf);
  struct tenants t;
  assert_int_equal(tenants_init(&t, path, NULL, &err), 0);
  struct tenant *a = by_key(&t, "key-a"), *b = by_key(&t, "key-b");
  uint64_t retry = 0, now = 1000000;
  assert_true(tenant_rate_take(&t, b, now, &retry));
  assert_true(tenant_rate_take(&t, b, now, &retry));
  assert_false(tenant_rate_take(&t, b, now, &retry)); /* the burst is spent */
  assert_true(retry > 0 && retry <= 101);
  assert_true(tenant_rate_take(&t, b, now + 100, &retry)); /* 10/s: one more after 100 ms */
  assert_false(tenant_rate_take(&t, b, now + 100, &retry));
  for (int i = 0; i < 100; i++) /* a has no rate limit */
    assert_true(tenant_rate_take(&t, a, now, &retry));
  tenants_destroy(&t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(without_a_file_everyone_is_default),
      cmocka_unit_test(keys_and_identities),
      cmocka_unit_test(egress_allow_per_tenant),
      cmocka_unit_test(anonymous_tenant_is_for_loopback_only),
      cmocka_unit_test(bad_files_are_refused),
      cmocka_unit_test(file_bounds),
      cmocka_unit_test(reload_revokes_and_keeps),
      cmocka_unit_test(names_since_start_are_bounded),
      cmocka_unit_test(rate_limit_bucket),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
