/* The HTTP listener's Host check (server/ops/http_host.c): what a Host
 * value names, and which names the listener answers to. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "http_host.h"

static void parse(void **state) {
  (void)state;
  static const struct {
    const char *value, *name;
  } good[] = {
      {"localhost", "localhost"},
      {"LocalHost:8080", "localhost"},
      {"localhost.:80", "localhost"}, /* an absolute name */
      {"127.0.0.1:9090", "127.0.0.1"},
      {"10.1.2.3", "10.1.2.3"},
      {"[::1]:9090", "::1"},
      {"[0:0:0:0:0:0:0:1]", "::1"}, /* addresses compared in their canonical text */
      {"[FD00::7]:1", "fd00::7"},
      {"sandboxd.sandboxd.svc.cluster.local:9090", "sandboxd.sandboxd.svc.cluster.local"},
      {"host:", "host"}, /* port = *DIGIT */
      {"my_host-1", "my_host-1"},
  };
  char name[HTTP_HOST_NAME_MAX];
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    assert_true(http_host_parse(good[i].value, name, sizeof(name)));
    assert_string_equal(name, good[i].name);
  }
  static const char *const bad[] = {
      "",           "::1",           "[::1",        "[::1]x",    "[::1]:99999", "[127.0.0.1]",
      "[name]",     "a:b:c",         "host:80a",    "host:-1",   "ho st",       "evil/x",
      "user@host",  "host:123456",   "[::1]:8 0",   "h\xc3\xa9", ":80",         "[]",
      "host:80:80", "evil.example#", "a%2eexample", "\t",
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    assert_false(http_host_parse(bad[i], name, sizeof(name)));
}

static void allowed(void **state) {
  (void)state;
  struct http_host_names n;
  struct sbx_error err;
  assert_int_equal(http_host_names_init(&n, "0.0.0.0", "Sbx.Example.,10.9.8.7,[FD00::7]", &err), 0);
  char hostname[256] = "";
  assert_int_equal(gethostname(hostname, sizeof(hostname) - 1), 0);
  char name[HTTP_HOST_NAME_MAX];
  assert_true(http_host_normalize(hostname, strlen(hostname), name, sizeof(name)));
  const char *const ours[] = {"localhost", "sbx.example", "10.9.8.7", "fd00::7",
                              "127.0.0.1", "127.0.0.53",  "::1",      name};
  for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
    assert_true(http_host_allowed(&n, ours[i]));
  /* A wildcard listen address is no name; names are whole, not suffixes. */
  const char *const not_ours[] = {"0.0.0.0",       "evil.example",     "example",
                                  "x.sbx.example", "sbx.example.evil", "198.51.100.254",
                                  "2001:db8::1",   "localhost2"};
  for (size_t i = 0; i < sizeof(not_ours) / sizeof(not_ours[0]); i++)
    assert_false(http_host_allowed(&n, not_ours[i]));
  /* The listen host is one of the names. */
  assert_int_equal(http_host_names_init(&n, "sbx-listen.example", "", &err), 0);
  assert_true(http_host_allowed(&n, "sbx-listen.example"));
  assert_int_equal(http_host_names_init(&n, "::", "", &err), 0);
  assert_false(http_host_allowed(&n, "::"));
  /* An entry that is not a name or an address is refused, naming it. */
  assert_int_equal(http_host_names_init(&n, "127.0.0.1", "ok.example,bad:80", &err), -1);
  assert_non_null(strstr(err.msg, "\"bad:80\""));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(parse),
      cmocka_unit_test(allowed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
