/* Request validation: every bad input names its field and range. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "settings.h"
#include "ids.h"
#include "validate.h"
#include "wire_check.h"

static struct server_settings settings;
static Sandbox__V1__RunCodeRequest req;
static Sandbox__V1__Limits limits;
static struct sbx_error err;
static const char *const msg = err.msg;
static struct sandbox_limits out, compile_out;
static struct runtime_table table;
static const struct runtime *picked;

/* The built-in runtimes as a server with settings.zygote has them. */
static const struct runtime_table *runtimes_now(void) {
  struct sbx_error e;
  runtimes_free(&table);
  assert_int_equal(runtimes_load(&table, NULL, false, settings.zygote, &e), 0);
  runtimes_set_python(&table, "3.11.2");
  return &table;
}

static int setup(void **state) {
  settings_defaults(&settings);
  sandbox__v1__run_code_request__init(&req);
  sandbox__v1__limits__init(&limits);
  req.code = "print(1)";
  req.limits = &limits;
  memset(&err, 0, sizeof err);
  return 0;
}

static sbx_code check(void) {
  memset(&err, 0, sizeof err);
  if (validate_run_request(&req, &settings, runtimes_now(), NULL, "", NULL, &out, &compile_out,
                           &picked, &err) == 0)
    return SBX_OK;
  assert_true(err.msg[0] != '\0'); /* every refusal says why */
  return err.code;
}

static void defaults_fill_zero_limits(void **state) {
  assert_int_equal(check(), SBX_OK);
  assert_int_equal(out.timeout_ms, 5000);
  assert_int_equal(out.memory_bytes, 128 << 20);
  assert_int_equal(out.output_bytes, 64 << 10);
  req.limits = NULL;
  assert_int_equal(check(), SBX_OK);
  assert_int_equal(out.timeout_ms, 5000);
}

static void cpu_limit_never_above_wall_clock(void **state) {
  limits.timeout_ms = 1000;
  limits.cpu_time_ms = 30000;
  assert_int_equal(check(), SBX_OK);
  assert_int_equal(out.cpu_time_ms, 1000);
}

static void negative_and_too_large_limits_named(void **state) {
  struct {
    int64_t *field;
    int64_t value;
    const char *name;
  } cases[] = {
      {&limits.timeout_ms, -1, "limits.timeout_ms"},
      {&limits.timeout_ms, 60001, "limits.timeout_ms"},
      {&limits.cpu_time_ms, -1, "limits.cpu_time_ms"},
      {&limits.memory_bytes, 1024, "limits.memory_bytes"},
      {&limits.memory_bytes, (1LL << 30) + 1, "limits.memory_bytes"},
      {&limits.output_bytes, -64, "limits.output_bytes"},
      {&limits.max_processes, 257, "limits.max_processes"},
      {&limits.disk_bytes, -1, "limits.disk_bytes"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    setup(NULL);
    *cases[i].field = cases[i].value;
    assert_int_equal(check(), SBX_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, cases[i].name));
    assert_non_null(strstr(msg, "allowed"));
  }
  setup(NULL);
  limits.timeout_ms = 60000; /* the maximum itself is allowed */
  assert_int_equal(check(), SBX_OK);
}

static void bad_fields_refused(void **state) {
  req.code = "";
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "code"));
  setup(NULL);
  req.runtime = "ruby";
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  setup(NULL);
  req.run_id = "../x";
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  setup(NULL);
  req.session_id = "s-1.ok_X";
  assert_int_equal(check(), SBX_OK);
  const char *bad_sessions[] = {
      "..",  ".",   "a/b",
      "a b", "x\n", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
  for (size_t i = 0; i < sizeof(bad_sessions) / sizeof(bad_sessions[0]); i++) {
    setup(NULL);
    req.session_id = (char *)bad_sessions[i];
    assert_int_equal(check(), SBX_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "session_id"));
  }
}

/* python-zygote only on a server started with --zygote; the refusal names
 * the runtimes this server has. */
static void runtimes(void **state) {
  req.runtime = "python";
  assert_int_equal(check(), SBX_OK);
  req.runtime = "python-zygote";
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "runtime: \"python-zygote\" is not supported; supported: python ("));
  assert_non_null(strstr(msg, "--zygote"));
  req.runtime = "ruby";
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "supported: python"));
  assert_null(strstr(msg, "python-zygote"));
  settings.zygote = true;
  req.runtime = "python-zygote";
  assert_int_equal(check(), SBX_OK);
  req.runtime = "";
  assert_int_equal(check(), SBX_OK);
  req.runtime = "ruby";
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "supported: python, python-zygote"));
  req.runtime = "Python-Zygote";
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
}

/* session_mode: a known value; INTERPRETER only in a session, on a server
 * with interpreters, for runtime python, without requirements, with text. */
static void session_modes(void **state) {
  req.session_mode = SANDBOX__V1__SESSION_MODE__SESSION_MODE_FILES;
  assert_int_equal(check(), SBX_OK);
  req.session_mode = (Sandbox__V1__SessionMode)3;
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "session_mode: 3 is not a session mode"));
  req.session_mode = (Sandbox__V1__SessionMode)-1;
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  req.session_mode = SANDBOX__V1__SESSION_MODE__SESSION_MODE_INTERPRETER;
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "INTERPRETER needs a session_id"));
  req.session_id = "nb";
  assert_int_equal(check(), SBX_OK);
  /* An interpreter forked from its slot's zygote (docs/INTERPRETER.md). */
  settings.zygote = true;
  req.runtime = "python-zygote";
  assert_int_equal(check(), SBX_OK);
  req.runtime = "python";
  char *reqs[] = {"six"};
  req.n_requirements = 1;
  req.requirements = reqs;
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "requirements: not supported in an INTERPRETER session"));
  req.n_requirements = 0;
  req.code = "print('\xff')";
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "code: not valid UTF-8"));
  req.code = "print(1)";
  char *args[] = {"ok", "\xc3("};
  req.n_args = 2;
  req.args = args;
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "args[1]: not valid UTF-8"));
  req.n_args = 0;
  settings.max_interpreters = 0;
  assert_int_equal(check(), SBX_FAILED_PRECONDITION);
  assert_non_null(strstr(msg, "--max-interpreters 0"));
}

/* A runtime from a manifest (docs/RUNTIMES.md), made as the server makes
 * it: the file parsed and loaded from a directory, then marked available as
 * runtime_check.c would after its self-test. limits_json: its limits. */
static const struct runtime_table *manifest_runtimes(const char *limits_json) {
  char dir[] = "/tmp/unit_validate.XXXXXX", path[64];
  assert_non_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/tool.json", dir);
  char text[1024];
  snprintf(text, sizeof text,
           "{\"name\": \"tool\", \"language\": \"tool\", \"file\": \"main.sh\", "
           "\"version\": {\"command\": [\"/usr/bin/bash\", \"--version\"], \"pattern\": "
           "\"([0-9]+)\"}, \"run\": [\"/usr/bin/bash\", \"main.sh\"], "
           "\"self_test\": {\"code\": \"echo OK\", \"stdout\": \"OK\\n\"}%s%s}",
           limits_json != NULL ? ", \"limits\": " : "", limits_json != NULL ? limits_json : "");
  /* The text is a manifest on its own before it is a file. */
  struct runtime_manifest m;
  struct sbx_error e;
  if (runtime_manifest_parse(text, strlen(text), "tool.json", &m, &e) < 0)
    fail_msg("%s", e.msg);
  runtime_manifest_free(&m);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_true(fputs(text, f) >= 0);
  assert_int_equal(fclose(f), 0);
  runtimes_free(&table);
  int rv = runtimes_load(&table, dir, true, settings.zygote, &e);
  runtimes_set_python(&table, "3.11.2");
  unlink(path);
  rmdir(dir);
  if (rv < 0)
    fail_msg("%s", e.msg);
  struct runtime *rt = &table.v[table.n - 1];
  assert_string_equal(rt->name, "tool");
  snprintf(rt->version, sizeof rt->version, "5.2.15");
  rt->available = true;
  return &table;
}

static sbx_code check_runtime(const struct runtime_table *t,
                              const struct settings_limits *tenant_max) {
  memset(&err, 0, sizeof err);
  if (validate_run_request(&req, &settings, t, tenant_max, "acme", NULL, &out, &compile_out,
                           &picked, &err) == 0)
    return SBX_OK;
  assert_true(err.msg[0] != '\0');
  return err.code;
}

/* A manifest's limits raise the server's defaults for its runtime only,
 * never lower them, within the server's maxima and a tenant's limits_max;
 * what a request asks still wins within those. */
static void manifest_limits_raise_defaults_within_maxima(void **state) {
  const struct runtime_table *t = manifest_runtimes(
      "{\"memory_bytes\": 536870912, \"timeout_ms\": 20000, \"max_processes\": 1, \"why\": \"a "
      "JIT\"}");
  req.runtime = "tool";
  assert_int_equal(check_runtime(t, NULL), SBX_OK);
  assert_string_equal(picked->name, "tool");
  assert_int_equal(out.memory_bytes, 512 << 20);
  assert_int_equal(out.timeout_ms, 20000);
  assert_int_equal(out.max_processes,
                   settings.default_limits.v[LIMIT_MAX_PROCESSES]); /* not lowered */
  assert_int_equal(out.output_bytes, 64 << 10);
  /* Only its runtime's. */
  req.runtime = "python";
  assert_int_equal(check_runtime(t, NULL), SBX_OK);
  assert_int_equal(out.memory_bytes, 128 << 20);
  assert_int_equal(out.timeout_ms, 5000);
  req.runtime = "tool";
  /* A request's own value, lower or higher, within the maximum. */
  limits.memory_bytes = 64 << 20;
  assert_int_equal(check_runtime(t, NULL), SBX_OK);
  assert_int_equal(out.memory_bytes, 64 << 20);
  limits.memory_bytes = 1 << 30;
  assert_int_equal(check_runtime(t, NULL), SBX_OK);
  assert_int_equal(out.memory_bytes, 1 << 30);
  limits.memory_bytes = (1LL << 30) + 1;
  assert_int_equal(check_runtime(t, NULL), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "limits.memory_bytes: 1073741825 is out of range; allowed: 8388608 "
                              "to 1073741824 (0 = default 536870912)"));
  limits.memory_bytes = 0;
  /* A tenant's limits_max caps the raised default. */
  struct settings_limits tenant_max = {0};
  tenant_max.v[LIMIT_MEMORY_BYTES] = 256 << 20;
  assert_int_equal(check_runtime(t, &tenant_max), SBX_OK);
  assert_int_equal(out.memory_bytes, 256 << 20);
  assert_int_equal(out.timeout_ms, 20000);
  /* The server's maximum caps it too. */
  settings.max_limits.v[LIMIT_TIMEOUT_MS] = 10000;
  assert_int_equal(check_runtime(t, NULL), SBX_OK);
  assert_int_equal(out.timeout_ms, 10000);
  assert_int_equal(out.memory_bytes, 512 << 20);
  /* A manifest may ask past the maxima (up to 2^40); the server's win. */
  t = manifest_runtimes("{\"memory_bytes\": 1099511627776, \"why\": \"big\"}");
  assert_int_equal(check_runtime(t, NULL), SBX_OK);
  assert_int_equal(out.memory_bytes, 1 << 30);
  /* None: the server's defaults. */
  t = manifest_runtimes(NULL);
  assert_int_equal(check_runtime(t, NULL), SBX_OK);
  assert_int_equal(out.memory_bytes, 128 << 20);
  runtimes_free(&table);
}

/* An INTERPRETER session is Python's: a manifest runtime is refused by
 * name, by runtime or by language; a FILES session is any runtime's. */
static void interpreter_refused_for_manifest_runtimes(void **state) {
  const struct runtime_table *t = manifest_runtimes(NULL);
  req.session_id = "s1";
  req.session_mode = SANDBOX__V1__SESSION_MODE__SESSION_MODE_INTERPRETER;
  req.runtime = "tool";
  assert_int_equal(check_runtime(t, NULL), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "session_mode: INTERPRETER sessions are Python's (runtime python "
                              "or python-zygote), not runtime tool's"));
  req.runtime = "";
  req.language = "tool";
  assert_int_equal(check_runtime(t, NULL), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "not runtime tool's"));
  /* Before the server's own switch: the answer is the same with
   * interpreters off. */
  settings.max_interpreters = 0;
  assert_int_equal(check_runtime(t, NULL), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "not runtime tool's"));
  req.session_mode = SANDBOX__V1__SESSION_MODE__SESSION_MODE_FILES;
  assert_int_equal(check_runtime(t, NULL), SBX_OK);
  assert_string_equal(picked->name, "tool");
  req.language = "python";
  req.session_mode = SANDBOX__V1__SESSION_MODE__SESSION_MODE_INTERPRETER;
  assert_int_equal(check_runtime(t, NULL), SBX_FAILED_PRECONDITION);
  req.language = "";
  runtimes_free(&table);
}

static void args_and_env_within_exec_limits(void **state) {
  /* execve refuses a string over 128 KiB and argv+envp over 2 MiB: refused
   * here by name instead of failing inside the sandbox. */
  static char big[VALIDATE_MAX_EXEC_STRING + 1];
  memset(big, 'a', sizeof(big) - 1);
  char *args[] = {big};
  req.n_args = 1;
  req.args = args;
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "args[0]"));
  big[VALIDATE_MAX_EXEC_STRING - 2] = '\0'; /* just fits */
  assert_int_equal(check(), SBX_OK);
  /* Many strings that fit one by one, too many bytes together. */
  static char mid[100 * 1024];
  memset(mid, 'b', sizeof(mid) - 1);
  char *many[24];
  for (size_t i = 0; i < 24; i++)
    many[i] = mid;
  req.n_args = 24;
  req.args = many;
  settings.max_args = 64;
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "args and env"));
  /* An environment value counts the same way. */
  setup(NULL);
  Sandbox__V1__RunCodeRequest__EnvEntry e = SANDBOX__V1__RUN_CODE_REQUEST__ENV_ENTRY__INIT;
  Sandbox__V1__RunCodeRequest__EnvEntry *envs[] = {&e};
  e.key = "BIG";
  e.value = big;
  big[VALIDATE_MAX_EXEC_STRING - 2] = 'a';
  req.n_env = 1;
  req.env = envs;
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "env[0] (BIG)"));
}

static void file_sources_and_sizes_checked(void **state) {
  static uint8_t data[4096];
  Sandbox__V1__File a = SANDBOX__V1__FILE__INIT, b = SANDBOX__V1__FILE__INIT;
  Sandbox__V1__File *files[] = {&a, &b};
  a.path = "a.bin";
  a.source_case = SANDBOX__V1__FILE__SOURCE_CONTENT;
  a.content = (ProtobufCBinaryData){sizeof(data), data};
  b.path = "b.bin";
  b.source_case = SANDBOX__V1__FILE__SOURCE_URL;
  b.url = "https://example.com/b.bin";
  req.n_files = 2;
  req.files = files;
  assert_int_equal(check(), SBX_OK);
  /* Per file. */
  settings.max_file_bytes = 4095;
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "files[0].content"));
  settings.max_file_bytes = 1 << 20;
  /* In total, against the run's disk quota. */
  limits.disk_bytes = 4096;
  b.source_case = SANDBOX__V1__FILE__SOURCE_CONTENT;
  b.content = (ProtobufCBinaryData){1, data};
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "disk_bytes"));
  limits.disk_bytes = 0;
  /* Duplicates. */
  b.path = "a.bin";
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "duplicate"));
  b.path = "b.bin";
  /* URLs: http and https only, no spaces or control characters. */
  const char *bad_urls[] = {"file:///etc/passwd",  "ftp://h/x", "gopher://h/",  "http://a b/",
                            "javascript:alert(1)", "",          "http://x/\x01"};
  b.source_case = SANDBOX__V1__FILE__SOURCE_URL;
  for (size_t i = 0; i < sizeof(bad_urls) / sizeof(bad_urls[0]); i++) {
    b.url = (char *)bad_urls[i];
    assert_int_equal(check(), SBX_INVALID_ARGUMENT);
    assert_non_null(strstr(msg, "files[1].url"));
  }
  b.url = "HTTP://127.0.0.1:8000/x";
  assert_int_equal(check(), SBX_OK);
}

/* protobuf-c would cut "a\0/../x" to "a": such requests are refused before
 * decoding, whichever string field holds the NUL, nested ones included. */
static void nul_bytes_in_strings_found_on_the_wire(void **state) {
  Sandbox__V1__File f = SANDBOX__V1__FILE__INIT, *files[] = {&f};
  f.path = "placeholder";
  f.source_case = SANDBOX__V1__FILE__SOURCE_CONTENT;
  f.content = (ProtobufCBinaryData){3, (uint8_t *)"a\0b"};
  req.n_files = 1;
  req.files = files;
  uint8_t buf[512];
  size_t len = sandbox__v1__run_code_request__pack(&req, buf);
  const char *field = NULL;
  /* Bytes fields may hold NUL. */
  assert_int_equal(
      wire_find_nul_string(&sandbox__v1__run_code_request__descriptor, buf, len, &field), 0);
  /* Patch the path's 'c' (of "placeholder") into a NUL on the wire. */
  uint8_t *p = memmem(buf, len, "placeholder", 11);
  assert_non_null(p);
  p[5] = 0;
  assert_int_equal(
      wire_find_nul_string(&sandbox__v1__run_code_request__descriptor, buf, len, &field), 1);
  assert_string_equal(field, "path");
  p[5] = 'h';
  p = memmem(buf, len, "print(1)", 8);
  p[5] = 0;
  assert_int_equal(
      wire_find_nul_string(&sandbox__v1__run_code_request__descriptor, buf, len, &field), 1);
  assert_string_equal(field, "code");
  p[5] = '1';
  /* Truncated input is not well-formed. */
  assert_int_equal(
      wire_find_nul_string(&sandbox__v1__run_code_request__descriptor, buf, len - 3, &field), -1);
}

static void file_paths_checked(void **state) {
  assert_true(validate_relative_path("a.txt"));
  assert_true(validate_relative_path("dir/sub/a.txt"));
  assert_false(validate_relative_path(""));
  assert_false(validate_relative_path("/etc/passwd"));
  assert_false(validate_relative_path("../x"));
  assert_false(validate_relative_path("a/../../x"));
  assert_false(validate_relative_path("a//b"));
  assert_false(validate_relative_path("a/./b"));
  assert_false(validate_relative_path("a/"));
  Sandbox__V1__File f = SANDBOX__V1__FILE__INIT, *files[] = {&f};
  f.path = "../escape";
  f.source_case = SANDBOX__V1__FILE__SOURCE_CONTENT;
  req.n_files = 1;
  req.files = files;
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "files[0].path"));
  f.path = "ok.txt";
  assert_int_equal(check(), SBX_OK);
  settings.max_files = 0;
  assert_int_equal(check(), SBX_INVALID_ARGUMENT);
}

static void run_ids(void **state) {
  assert_true(id_valid("abc-123_X.y"));
  assert_false(id_valid("."));
  assert_false(id_valid(".."));
  assert_false(id_valid("a/b"));
  assert_false(id_valid(""));
  char long_id[80];
  memset(long_id, 'a', 65);
  long_id[65] = '\0';
  assert_false(id_valid(long_id));
}

/* allow_net: against the server's --egress-allow and the tenant's
 * egress_allow, each refusal naming the entry; the proxy variables are the
 * server's. */
static sbx_code check_net(const char *const *entries, size_t n, const struct egress_allow *tenant) {
  req.allow_net = (char **)entries;
  req.n_allow_net = n;
  memset(&err, 0, sizeof err);
  int rc = validate_run_request(&req, &settings, runtimes_now(), NULL, "acme", tenant, &out,
                                &compile_out, &picked, &err);
  req.allow_net = NULL;
  req.n_allow_net = 0;
  return rc == 0 ? SBX_OK : err.code;
}

static void allow_net_within_ceilings(void **state) {
  const char *one[] = {"api.example.com"};
  assert_int_equal(check_net(one, 1, NULL), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "allow_net[0] (\"api.example.com\")"));
  assert_non_null(strstr(msg, "--egress-allow is empty"));
  snprintf(settings.egress_allow, sizeof settings.egress_allow, "*.example.com,10.0.0.0/8:5432");
  assert_int_equal(check_net(one, 1, NULL), SBX_OK);
  const char *outside[] = {"api.example.com", "example.com"};
  assert_int_equal(check_net(outside, 2, NULL), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "allow_net[1] (\"example.com\"): not within this server's"));
  const char *port[] = {"10.1.2.0/24:5432", "10.1.2.3"};
  assert_int_equal(check_net(port, 1, NULL), SBX_OK);
  assert_int_equal(check_net(port, 2, NULL), SBX_INVALID_ARGUMENT); /* 80 and 443: not 5432 */
  assert_non_null(strstr(msg, "allow_net[1]"));
  const char *bad[] = {"exa mple.com"};
  assert_int_equal(check_net(bad, 1, NULL), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "allow_net[0]"));
  /* The tenant's ceiling narrows the server's. */
  struct egress_allow tenant = {0};
  char why[200];
  assert_int_equal(egress_allow_parse("api.example.com:443", &tenant.e[0], why, sizeof why), 0);
  tenant.n = 1;
  const char *t443[] = {"api.example.com:443"};
  assert_int_equal(check_net(t443, 1, &tenant), SBX_OK);
  assert_int_equal(check_net(one, 1, &tenant), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "not within tenant acme's egress_allow"));
  tenant.n = 0; /* "egress_allow": [] */
  assert_int_equal(check_net(t443, 1, &tenant), SBX_INVALID_ARGUMENT);
}

static void allow_net_bounds_and_proxy_variables(void **state) {
  snprintf(settings.egress_allow, sizeof settings.egress_allow, "*");
  const char *many[EGRESS_ALLOW_MAX + 1];
  for (size_t i = 0; i <= EGRESS_ALLOW_MAX; i++)
    many[i] = "a.example.com";
  assert_int_equal(check_net(many, EGRESS_ALLOW_MAX, NULL), SBX_OK);
  assert_int_equal(check_net(many, EGRESS_ALLOW_MAX + 1, NULL), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "at most 32"));
  char longest[EGRESS_ALLOW_ENTRY_MAX + 2];
  memset(longest, 'a', sizeof longest - 1);
  longest[sizeof longest - 1] = '\0';
  const char *too_long[] = {longest};
  assert_int_equal(check_net(too_long, 1, NULL), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "301 bytes"));
  const char *ctl[] = {"a.example.com\x01"};
  assert_int_equal(check_net(ctl, 1, NULL), SBX_INVALID_ARGUMENT);
  Sandbox__V1__RunCodeRequest__EnvEntry e = SANDBOX__V1__RUN_CODE_REQUEST__ENV_ENTRY__INIT;
  Sandbox__V1__RunCodeRequest__EnvEntry *env[] = {&e};
  e.key = "https_proxy";
  e.value = "http://elsewhere:3128";
  req.env = env;
  req.n_env = 1;
  assert_int_equal(check_net(many, 1, NULL), SBX_INVALID_ARGUMENT);
  assert_non_null(strstr(msg, "env[https_proxy]"));
  assert_int_equal(check(), SBX_OK); /* without allow_net it is the run's own business */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(defaults_fill_zero_limits, setup),
      cmocka_unit_test_setup(cpu_limit_never_above_wall_clock, setup),
      cmocka_unit_test_setup(negative_and_too_large_limits_named, setup),
      cmocka_unit_test_setup(bad_fields_refused, setup),
      cmocka_unit_test_setup(runtimes, setup),
      cmocka_unit_test_setup(session_modes, setup),
      cmocka_unit_test_setup(manifest_limits_raise_defaults_within_maxima, setup),
      cmocka_unit_test_setup(interpreter_refused_for_manifest_runtimes, setup),
      cmocka_unit_test_setup(args_and_env_within_exec_limits, setup),
      cmocka_unit_test_setup(file_paths_checked, setup),
      cmocka_unit_test_setup(file_sources_and_sizes_checked, setup),
      cmocka_unit_test_setup(nul_bytes_in_strings_found_on_the_wire, setup),
      cmocka_unit_test_setup(run_ids, setup),
      cmocka_unit_test_setup(allow_net_within_ceilings, setup),
      cmocka_unit_test_setup(allow_net_bounds_and_proxy_variables, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
