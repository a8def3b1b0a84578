/* runtime_check.c: see runtime_check.h. Each check is a RunCode of the
 * server's own, validated and run as a caller's would be (the same
 * validation, workspace, limits and engine), so a runtime that passes it
 * works through the whole path, and one that does not is never offered. */
#include "runtime_check.h"

#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "killed_by.h"
#include "log.h"
#include "text.h"
#include "validate.h"

/* One check run on slot 0: 0 with out filled (run_outcome_free it), or -1
 * with why. */
static int check_run(struct server *srv, const struct runtime *rt, enum run_check check,
                     struct run_outcome *out, char *why, size_t len) {
  Sandbox__V1__RunCodeRequest req = SANDBOX__V1__RUN_CODE_REQUEST__INIT;
  req.code = rt->manifest.self_test_code;
  req.runtime = (char *)rt->name;
  const struct runtime *resolved = NULL;
  struct sandbox_limits limits, compile;
  struct sbx_error err = {0};
  if (validate_run_request(&req, &srv->settings, srv->runner.runtimes, NULL, "-", NULL, &limits,
                           &compile, &resolved, &err) < 0) {
    snprintf(why, len, "%s", err.msg);
    return -1;
  }
  char run_id[64];
  snprintf(run_id, sizeof run_id, "runtime-%s-%s", rt->name,
           check == RUN_CHECK_VERSION ? "version" : "self-test");
  struct run_call call = {
      .req = &req,
      .run_id = run_id,
      .method = "RuntimeCheck",
      .limits = limits,
      .compile_limits = compile,
      .runtime = resolved,
      .received_ms = sbx_monotonic_ms(),
      .request_id = "",
      .peer = "start",
      .check = check,
  };
  run_code(&srv->runner, 0, &call, out);
  if (out->ok)
    return 0;
  const struct runtime_command *cmd =
      check == RUN_CHECK_VERSION ? &rt->manifest.version_command : &rt->manifest.run;
  snprintf(why, len, "%s: %s: %s", check == RUN_CHECK_VERSION ? "version" : "self-test",
           cmd->argv[0], out->err.msg);
  run_outcome_free(out);
  return -1;
}

/* "5.2.15" from what the version command printed: the pattern's group,
 * with ".0" added for each missing part (Piston's versions are semver). */
static int probe_version(struct server *srv, struct runtime *rt, char *why, size_t len) {
  struct run_outcome out;
  if (check_run(srv, rt, RUN_CHECK_VERSION, &out, why, len) < 0)
    return -1;
  char text[2048];
  snprintf(text, sizeof text, "%.*s\n%.*s", (int)out.resp.stdout.len,
           (const char *)out.resp.stdout.data, (int)out.resp.stderr.len,
           (const char *)out.resp.stderr.data);
  run_outcome_free(&out);
  regex_t re;
  regmatch_t m[2];
  int rv = -1;
  if (regcomp(&re, rt->manifest.version_pattern, REG_EXTENDED) != 0) {
    snprintf(why, len, "version.pattern does not compile");
    return -1;
  }
  if (regexec(&re, text, 2, m, 0) == 0 && m[1].rm_so >= 0) {
    char v[32];
    int n = (int)(m[1].rm_eo - m[1].rm_so);
    snprintf(v, sizeof v, "%.*s", n, text + m[1].rm_so);
    /* One to three numbers of at most 9 digits, dot-separated. */
    int dots = 0, digits = 0;
    bool ok = v[0] != '\0';
    for (const char *c = v; ok && *c != '\0'; c++) {
      bool dot = *c == '.';
      ok = (dot && digits > 0 && ++dots <= 2) || (*c >= '0' && *c <= '9' && digits < 9);
      digits = dot ? 0 : digits + 1;
    }
    if (ok && digits > 0) {
      snprintf(rt->version, sizeof rt->version, "%s%s", v,
               dots == 0   ? ".0.0"
               : dots == 1 ? ".0"
                           : "");
      rv = 0;
    }
  }
  regfree(&re);
  if (rv < 0) {
    char shown[120];
    text_printable(text, strlen(text) < 100 ? strlen(text) : 100, shown, sizeof shown, false);
    snprintf(why, len,
             "version: %s printed no MAJOR[.MINOR[.PATCH]] that version.pattern finds (it "
             "printed \"%s\")",
             rt->manifest.version_command.argv[0], shown);
  }
  return rv;
}

static int self_test(struct server *srv, const struct runtime *rt, char *why, size_t len) {
  struct run_outcome out;
  if (check_run(srv, rt, RUN_CHECK_SELF_TEST, &out, why, len) < 0)
    return -1;
  const Sandbox__V1__RunCodeResponse *r = &out.resp;
  const char *want = rt->manifest.self_test_stdout;
  char got[160], err_text[240];
  text_printable((const char *)r->stdout.data, r->stdout.len < 150 ? r->stdout.len : 150, got,
                 sizeof got, false);
  text_printable((const char *)r->stderr.data, r->stderr.len < 230 ? r->stderr.len : 230, err_text,
                 sizeof err_text, false);
  int rv = 0;
  if (r->killed_by != SANDBOX__V1__KILLED_BY__KILLED_BY_NONE || r->exit_code != 0)
    rv = snprintf(why, len, "self-test: killed_by %s, exit code %d; stderr \"%s\"",
                  killed_by_name((enum sandbox_killed_by)r->killed_by), r->exit_code, err_text);
  else if (r->stdout.len != strlen(want) || memcmp(r->stdout.data, want, r->stdout.len) != 0)
    rv = snprintf(why, len,
                  "self-test: printed \"%s\", not what the manifest expects; stderr \"%s\"", got,
                  err_text);
  run_outcome_free(&out);
  return rv > 0 ? -1 : 0;
}

static void *check_all(void *arg) {
  struct server *srv = arg;
  struct runtime_table *t = srv->runner.runtimes;
  for (size_t i = 0; i < t->n; i++) {
    struct runtime *rt = &t->v[i];
    if (rt->kind != RUNTIME_KIND_MANIFEST)
      continue;
    uint64_t t0 = sbx_monotonic_ms();
    char why[sizeof rt->why_unavailable] = "";
    rt->available = true; /* for its own checks' validation; no worker runs yet */
    if (probe_version(srv, rt, why, sizeof why) < 0 || self_test(srv, rt, why, sizeof why) < 0) {
      rt->available = false;
      snprintf(rt->why_unavailable, sizeof rt->why_unavailable, "%s", why);
      char shown[sizeof why];
      text_printable(why, strlen(why), shown, sizeof shown, false);
      log_line("runtime_unavailable", "name=%s manifest=%s ms=%llu error=\"%s\"", rt->name,
               rt->source, (unsigned long long)(sbx_monotonic_ms() - t0), shown);
      continue;
    }
    rt->why_unavailable[0] = '\0';
    log_line("runtime", "name=%s language=%s version=%s manifest=%s ms=%llu", rt->name,
             rt->language, rt->version, rt->source, (unsigned long long)(sbx_monotonic_ms() - t0));
  }
  return NULL;
}

/* On a thread of their own, which ends with them: a run moves the thread
 * that starts it into its slot's cgroups on cgroup v1 (as a worker's
 * thread lives in its slot), and the main thread must not stay there, nor
 * the threads it starts afterwards (they would count against slot 0's
 * pids and memory). */
void runtime_check_all(struct server *srv) {
  pthread_t th;
  if (pthread_create(&th, NULL, check_all, srv) == 0) {
    pthread_join(th, NULL);
    return;
  }
  struct runtime_table *t = srv->runner.runtimes;
  for (size_t i = 0; i < t->n; i++) /* fail closed: none offered unchecked */
    if (t->v[i].kind == RUNTIME_KIND_MANIFEST)
      snprintf(t->v[i].why_unavailable, sizeof t->v[i].why_unavailable,
               "the check at start could not get a thread");
}
