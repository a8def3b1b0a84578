/* Settings: defaults, then file, then environment, then flags. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "settings.h"

static char config_path[64];

static int setup(void **state) {
  unsetenv("SANDBOXD_WORKERS");
  unsetenv("SANDBOXD_QUEUE");
  unsetenv("SANDBOXD_LISTEN");
  unsetenv("SANDBOXD_CONFIG");
  snprintf(config_path, sizeof(config_path), "/tmp/sbx-settings-XXXXXX");
  int fd = mkstemp(config_path);
  FILE *f = fdopen(fd, "w");
  fprintf(f, "# comment\nworkers = 3\nqueue = 10 # trailing\nlisten = ipc:///tmp/x.sock\n"
             "max-timeout-ms = 20000\n");
  fclose(f);
  return 0;
}

static int teardown(void **state) {
  unlink(config_path);
  return 0;
}

static struct sbx_error err;

static int load(struct server_settings *s, int argc, char **argv) {
  memset(&err, 0, sizeof err);
  int rv = settings_load(s, argc, argv, &err);
  if (rv < 0)
    print_message("settings_load: %s\n", err.msg);
  return rv;
}

static void defaults(void **state) {
  struct server_settings s;
  char *argv[] = {"sandboxd", NULL};
  assert_int_equal(load(&s, 1, argv), 0);
  assert_int_equal(s.n_listen, 1);
  assert_string_equal(s.listen[0], "tcp://127.0.0.1:7878");
  assert_string_equal(s.state_dir, "/var/lib/sandboxd");
  assert_true(s.workers >= 1);
  assert_int_equal(s.default_limits.v[LIMIT_TIMEOUT_MS], 5000);
}

static void layers_in_order(void **state) {
  struct server_settings s;
  char *argv[] = {"sandboxd", "--config", config_path, "--queue", "7", NULL};
  setenv("SANDBOXD_WORKERS", "5", 1);
  setenv("SANDBOXD_QUEUE", "9", 1);
  assert_int_equal(load(&s, 5, argv), 0);
  assert_int_equal(s.workers, 5);                            /* env beats file */
  assert_int_equal(s.queue, 7);                              /* flag beats env */
  assert_int_equal(s.max_limits.v[LIMIT_TIMEOUT_MS], 20000); /* file beats default */
  assert_int_equal(s.n_listen, 1);                           /* file replaced the default listen */
  assert_string_equal(s.listen[0], "ipc:///tmp/x.sock");
}

static void listen_repeatable(void **state) {
  struct server_settings s;
  char *argv[] = {"sandboxd", "--listen", "tcp://0.0.0.0:1", "--listen=ipc:///tmp/y", NULL};
  assert_int_equal(load(&s, 4, argv), 0);
  assert_int_equal(s.n_listen, 2);
  assert_string_equal(s.listen[1], "ipc:///tmp/y");
}

static void bad_values_refused(void **state) {
  struct server_settings s;
  char *a1[] = {"sandboxd", "--workers", "0", NULL};
  assert_int_equal(load(&s, 3, a1), -1);
  assert_int_equal(err.code, SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(err.msg, "workers")); /* names the setting */
  char *a2[] = {"sandboxd", "--workers", "2x", NULL};
  assert_int_equal(load(&s, 3, a2), -1);
  assert_non_null(strstr(err.msg, "workers"));
  char *a3[] = {"sandboxd", "--listen", "http://x", NULL};
  assert_int_equal(load(&s, 3, a3), -1);
  char *a4[] = {"sandboxd", "--default-timeout-ms", "90000", NULL}; /* above max */
  assert_int_equal(load(&s, 3, a4), -1);
  assert_non_null(strstr(err.msg, "timeout"));
  char *a5[] = {"sandboxd", "--no-such-flag", "1", NULL};
  assert_int_equal(load(&s, 3, a5), -1);
  char *a6[] = {"sandboxd", "--config", "/nonexistent/file", NULL};
  assert_int_equal(load(&s, 3, a6), -1);
}

/* Requirements come from pip's default index unless the operator says
 * otherwise; offline turns every network source off. */
static void package_sources(void **state) {
  struct server_settings s;
  char *a0[] = {"sandboxd", NULL};
  assert_int_equal(load(&s, 1, a0), 0);
  assert_string_equal(settings_index_url(&s), "https://pypi.org/simple");
  assert_int_equal(s.offline, 0);
  char *a1[] = {"sandboxd", "--offline", "1", "--wheelhouse", "/srv/wheels", NULL};
  assert_int_equal(load(&s, 5, a1), 0);
  assert_string_equal(settings_index_url(&s), "");
  char *a2[] = {"sandboxd", "--index-url", "http://10.0.0.5:8080/simple/", NULL};
  assert_int_equal(load(&s, 3, a2), 0);
  assert_string_equal(settings_index_url(&s), "http://10.0.0.5:8080/simple/");
  char *a3[] = {"sandboxd", "--pip-proxy", "http://proxy.internal:3128", NULL};
  assert_int_equal(load(&s, 3, a3), 0);
  char *bad[][4] = {
      {"sandboxd", "--index-url", "", NULL}, /* off is --offline 1 */
      {"sandboxd", "--index-url", "file:///srv/simple", NULL},
      {"sandboxd", "--offline", "2", NULL},
      {"sandboxd", "--pip-proxy", "https://proxy:3128", NULL},
      {"sandboxd", "--pip-proxy", "http://u:p@proxy:3128", NULL}, /* no credentials */
      {"sandboxd", "--pip-tunnels", "0", NULL},
      {"sandboxd", "--pip-idle-timeout-ms", "10", NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal(load(&s, 3, bad[i]), -1);
  char *a4[] = {"sandboxd", "--offline", "1", "--pip-proxy", "http://p:3128", NULL};
  assert_int_equal(load(&s, 5, a4), -1); /* a proxy for a pip with no network */
}

/* One table maps the limits to the proto's fields: every one round-trips,
 * and the built-in defaults lie within the built-in maxima. */
static void limits_table(void **state) {
  struct settings_limits in, back;
  for (int i = 0; i < LIMITS_N; i++)
    in.v[i] = 1000 + i;
  Sandbox__V1__Limits proto = SANDBOX__V1__LIMITS__INIT;
  limits_to_proto(&in, &proto);
  assert_int_equal(proto.timeout_ms, 1000 + LIMIT_TIMEOUT_MS);
  assert_int_equal(proto.memory_bytes, 1000 + LIMIT_MEMORY_BYTES);
  assert_int_equal(proto.open_files, 1000 + LIMIT_OPEN_FILES);
  limits_from_proto(&proto, back.v);
  assert_memory_equal(in.v, back.v, sizeof in.v);
  limits_from_proto(NULL, back.v);
  for (int i = 0; i < LIMITS_N; i++)
    assert_int_equal(back.v[i], 0);
  struct server_settings s;
  settings_defaults(&s);
  for (int i = 0; i < LIMITS_N; i++) {
    assert_true(s.default_limits.v[i] >= limit_defs[i].min);
    assert_true(s.default_limits.v[i] <= s.max_limits.v[i]);
  }
  assert_int_equal(settings_check(&s, &err), 0);
}

/* --http-listen: http:// or https://host:port, checked at load (https://
 * without --tls-cert and --tls-key too); --log-format. */
static void operations(void **state) {
  struct server_settings s;
  char *a1[] = {"sandboxd", "--http-listen", "http://127.0.0.1:9090", "--log-format", "json", NULL};
  assert_int_equal(load(&s, 5, a1), 0);
  assert_string_equal(s.http_listen, "http://127.0.0.1:9090");
  assert_string_equal(s.log_format, "json");
  char host[64];
  unsigned port = 0;
  assert_int_equal(settings_http_listen_parts("http://[::1]:80/", host, sizeof host, &port, &err),
                   0);
  assert_string_equal(host, "::1");
  assert_int_equal(port, 80);
  assert_int_equal(settings_http_listen_parts("http://localhost:0", host, sizeof host, &port, &err),
                   0);
  assert_string_equal(host, "localhost");
  assert_int_equal(port, 0);
  assert_int_equal(settings_http_listen_parts("https://[::1]:9443", host, sizeof host, &port, &err),
                   0);
  assert_string_equal(host, "::1");
  assert_int_equal(port, 9443);
  char *a3[] = {
      "sandboxd", "--http-listen", "https://127.0.0.1:9443", "--tls-cert", "/c", "--tls-key", "/k",
      NULL};
  assert_int_equal(load(&s, 7, a3), 0);
  assert_true(settings_http_listen_is_tls(s.http_listen));
  char *a4[] = {"sandboxd", "--http-listen", "https://127.0.0.1:9443", NULL};
  assert_int_equal(load(&s, 3, a4), -1);
  assert_non_null(strstr(err.msg, "https:// needs --tls-cert"));
  const char *bad[] = {"https://127.0.0.1", "tcp://127.0.0.1:9090", "http://127.0.0.1",
                       "http://:9090",      "http://h:99999",       "http://h:90/metrics",
                       "http://u@h:90",     "http://[::1]90"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char *a[] = {"sandboxd", "--http-listen", (char *)bad[i], NULL};
    assert_int_equal(load(&s, 3, a), -1);
    assert_non_null(strstr(err.msg, "http-listen"));
  }
  char *a2[] = {"sandboxd", "--log-format", "xml", NULL};
  assert_int_equal(load(&s, 3, a2), -1);
  assert_non_null(strstr(err.msg, "log-format"));
  settings_defaults(&s);
  assert_string_equal(s.http_listen, "");
  assert_string_equal(s.log_format, "logfmt");
}

/* --http-allowed-hosts: from flags, the environment and the file; names
 * and addresses only (no port, no empty entry), and only with a listener. */
static void http_allowed_hosts(void **state) {
  struct server_settings s;
  char *a1[] = {"sandboxd",
                "--http-listen",
                "http://0.0.0.0:9090",
                "--http-allowed-hosts",
                "sandboxd.sandboxd.svc,10.0.0.7,[fd00::7],fd00::8,Sbx_1.example.",
                NULL};
  assert_int_equal(load(&s, 5, a1), 0);
  assert_string_equal(s.http_allowed_hosts,
                      "sandboxd.sandboxd.svc,10.0.0.7,[fd00::7],fd00::8,Sbx_1.example.");
  setenv("SANDBOXD_HTTP_ALLOWED_HOSTS", "from-env.example", 1);
  char *a2[] = {"sandboxd", "--http-listen", "http://0.0.0.0:9090", NULL};
  assert_int_equal(load(&s, 3, a2), 0);
  assert_string_equal(s.http_allowed_hosts, "from-env.example");
  unsetenv("SANDBOXD_HTTP_ALLOWED_HOSTS");
  FILE *f = fopen(config_path, "a");
  fprintf(f, "http-allowed-hosts = from-file.example\n");
  fclose(f);
  char *a3[] = {"sandboxd", "--config", config_path, "--http-listen", "http://0.0.0.0:9090", NULL};
  assert_int_equal(load(&s, 5, a3), 0);
  assert_string_equal(s.http_allowed_hosts, "from-file.example");
  const char *bad[] = {"a.example:80", "a.example,", ",a",     "a,,b",     "a b",
                       "[a.example]",  "a/b",        "user@a", "[::1]:80", "*"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char *a[] = {
        "sandboxd", "--http-listen", "http://0.0.0.0:9090", "--http-allowed-hosts", (char *)bad[i],
        NULL};
    assert_int_equal(load(&s, 5, a), -1);
    assert_non_null(strstr(err.msg, "http-allowed-hosts"));
    assert_non_null(strstr(err.msg, "is not a host name or an IP address"));
  }
  char *a4[] = {"sandboxd", "--http-allowed-hosts", "a.example", NULL};
  assert_int_equal(load(&s, 3, a4), -1);
  assert_non_null(strstr(err.msg, "needs --http-listen"));
  settings_defaults(&s);
  assert_string_equal(s.http_allowed_hosts, "");
}

/* Zygotes: off by default; --zygote alone, --zygote 0/1, the environment
 * and the file; the preload list checked as dotted module names. */
static void zygote(void **state) {
  struct server_settings s;
  char *a0[] = {"sandboxd", NULL};
  assert_int_equal(load(&s, 1, a0), 0);
  assert_false(s.zygote);
  assert_string_equal(s.zygote_preload, "numpy,matplotlib.pyplot");
  assert_int_equal(s.zygote_max_forks, 1000);
  assert_int_equal(s.zygote_max_age_s, 600);
  char *a1[] = {"sandboxd", "--zygote", "--workers", "2", NULL};
  assert_int_equal(load(&s, 4, a1), 0);
  assert_true(s.zygote);
  assert_int_equal(s.workers, 2);
  char *a2[] = {"sandboxd", "--zygote", "0", "--zygote-preload", "", NULL};
  assert_int_equal(load(&s, 5, a2), 0);
  assert_false(s.zygote);
  assert_string_equal(s.zygote_preload, "");
  char *a3[] = {"sandboxd", "--zygote=yes",     "--zygote-max-forks", "3", "--zygote-max-age-s",
                "9",        "--zygote-preload", "a.b_c,_x,json",      NULL};
  assert_int_equal(load(&s, 8, a3), 0);
  assert_true(s.zygote);
  assert_int_equal(s.zygote_max_forks, 3);
  assert_int_equal(s.zygote_max_age_s, 9);
  setenv("SANDBOXD_ZYGOTE", "true", 1);
  assert_int_equal(load(&s, 1, a0), 0);
  assert_true(s.zygote);
  char *a4[] = {"sandboxd", "--zygote=off", NULL};
  assert_int_equal(load(&s, 2, a4), 0); /* flag beats env */
  assert_false(s.zygote);
  setenv("SANDBOXD_ZYGOTE", "maybe", 1);
  assert_int_equal(load(&s, 1, a0), -1);
  assert_non_null(strstr(err.msg, "SANDBOXD_ZYGOTE: zygote: \"maybe\""));
  unsetenv("SANDBOXD_ZYGOTE");
  const char *bad[] = {"numpy,", ",numpy", "numpy,,os", "numpy os", "a..b",     "a.",
                       ".a",     "1abc",   "a.1b",      "os;x",     "numpy, os"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    char *a[] = {"sandboxd", "--zygote-preload", (char *)bad[i], NULL};
    assert_int_equal(load(&s, 3, a), -1);
    assert_int_equal(err.code, SBX_INVALID_ARGUMENT);
    assert_non_null(strstr(err.msg, "zygote-preload"));
  }
  char *a5[] = {"sandboxd", "--zygote-preload", "numpy;import os", NULL};
  assert_int_equal(load(&s, 3, a5), -1);
  assert_non_null(strstr(err.msg, "\"numpy;import os\" is not a module name"));
  char *a6[] = {"sandboxd", "--zygote", "--backend", "rlimit", NULL};
  assert_int_equal(load(&s, 4, a6), -1);
  assert_non_null(strstr(err.msg, "cgroup backend"));
  FILE *f = fopen(config_path, "w");
  fprintf(f, "zygote = on\nzygote-preload = json,xml.dom\n");
  fclose(f);
  char *a8[] = {"sandboxd", "--config", config_path, NULL};
  assert_int_equal(load(&s, 3, a8), 0);
  assert_true(s.zygote);
  assert_string_equal(s.zygote_preload, "json,xml.dom");
  char *a7[] = {"sandboxd", "--zygote-max-forks", "0", NULL};
  assert_int_equal(load(&s, 3, a7), -1);
  assert_non_null(strstr(err.msg, "zygote-max-forks"));
}

/* --uid-base 410000 once failed at the engine's start with "uid/gid range
 * 410000+6 is out of bounds": the refusal and --help name the range. */
static void uid_range_is_named(void **state) {
  struct server_settings s;
  char *far[] = {"sandboxd", "--uid-base", "410000", NULL};
  assert_int_equal(load(&s, 3, far), -1);
  assert_non_null(strstr(err.msg, "uid-base"));
  assert_non_null(strstr(err.msg, "between 1000 and 65533"));

  char *edge[] = {"sandboxd", "--uid-base",         "65529", "--workers",
                  "2",        "--max-interpreters", "4",     NULL};
  assert_int_equal(load(&s, 7, edge), -1);
  assert_non_null(strstr(err.msg, "uid-base: 65529 + 2 workers + 4 interpreters passes uid 65533"));
  assert_non_null(strstr(err.msg, "uid-base is from 1000 to 65528"));
  char *fits[] = {"sandboxd", "--uid-base",         "65528", "--workers",
                  "2",        "--max-interpreters", "4",     NULL};
  assert_int_equal(load(&s, 7, fits), 0);
  assert_int_equal(s.uid_base, 65528);

  char *text = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&text, &len);
  assert_non_null(out);
  settings_usage(out, "sandboxd");
  fclose(out);
  const char *line = strstr(text, "--uid-base N");
  assert_non_null(line);
  assert_non_null(
      strstr(line, "from 1000, and uid-base + workers + max-interpreters at most 65534"));
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(defaults, setup, teardown),
      cmocka_unit_test_setup_teardown(layers_in_order, setup, teardown),
      cmocka_unit_test_setup_teardown(listen_repeatable, setup, teardown),
      cmocka_unit_test_setup_teardown(bad_values_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(package_sources, setup, teardown),
      cmocka_unit_test(limits_table),
      cmocka_unit_test_setup_teardown(operations, setup, teardown),
      cmocka_unit_test_setup_teardown(http_allowed_hosts, setup, teardown),
      cmocka_unit_test_setup_teardown(zygote, setup, teardown),
      cmocka_unit_test_setup_teardown(uid_range_is_named, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
