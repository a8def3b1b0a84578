/* validate.c: see validate.h. Each part of a request has its check; the
 * first that fails answers, naming the field. */
#include "validate.h"

#include <inttypes.h>
#include <string.h>
#include <strings.h>

#include "download.h"
#include "ids.h"
#include "requirements.h"
#include "runtimes.h"
#include "text.h"

#define ID_RULE "must be 1 to 64 characters of [A-Za-z0-9._-], not \".\" or \"..\""

bool validate_relative_path(const char *path) {
  size_t len = strlen(path);
  if (len == 0 || len > 255 || path[0] == '/')
    return false;
  const char *p = path;
  while (*p != '\0') {
    const char *slash = strchr(p, '/');
    size_t n = slash != NULL ? (size_t)(slash - p) : strlen(p);
    if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
      return false;
    if (slash == NULL)
      break;
    p = slash + 1;
    if (*p == '\0')
      return false; /* trailing slash */
  }
  return true;
}

int validate_session_id(const char *id, struct sbx_error *err) {
  return id_valid(id) ? 0 : sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, "session_id: " ID_RULE);
}

static bool env_key_ok(const char *key) {
  size_t len = strlen(key);
  if (len == 0 || len > 128 || (key[0] >= '0' && key[0] <= '9'))
    return false;
  for (const char *c = key; *c != '\0'; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '_'))
      return false;
  return true;
}

#define REFUSE(...) sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, __VA_ARGS__)

static int check_code_and_ids(const Sandbox__V1__RunCodeRequest *req,
                              const struct server_settings *s, struct sbx_error *err) {
  size_t code_len = strlen(req->code);
  if (code_len == 0)
    return REFUSE("code: must not be empty");
  if ((int64_t)code_len > s->max_code_bytes)
    return REFUSE("code: %zu bytes; allowed: 1 to %" PRId64 " bytes", code_len, s->max_code_bytes);
  if (req->run_id[0] != '\0' && !id_valid(req->run_id))
    return REFUSE("run_id: " ID_RULE);
  if (req->session_id[0] != '\0')
    return validate_session_id(req->session_id, err);
  return 0;
}

static int check_requirements(const Sandbox__V1__RunCodeRequest *req,
                              const struct server_settings *s, struct sbx_error *err) {
  if ((int64_t)req->n_requirements > s->max_requirements)
    return REFUSE("requirements: %zu requirements; allowed: 0 to %" PRId64, req->n_requirements,
                  s->max_requirements);
  for (size_t i = 0; i < req->n_requirements; i++) {
    char canonical[REQUIREMENT_MAX + 1];
    size_t len = strlen(req->requirements[i]);
    if ((int64_t)len > s->max_requirement_bytes || len == 0)
      return REFUSE("requirements[%zu]: %zu bytes; allowed: 1 to %" PRId64 " bytes", i, len,
                    s->max_requirement_bytes);
    if (requirement_normalize(req->requirements[i], s->requirements_allow_urls != 0, canonical,
                              sizeof(canonical), err) < 0)
      return sbx_error_wrap(err, "requirements[%zu]", i);
  }
  return 0;
}

/* One file: its path, its source, its size. */
static int check_file(const Sandbox__V1__RunCodeRequest *req, size_t i,
                      const struct server_settings *s, struct sbx_error *err) {
  const Sandbox__V1__File *f = req->files[i];
  if (!validate_relative_path(f->path))
    return REFUSE("files[%zu].path: " VALIDATE_RELATIVE_PATH_RULE, i);
  for (size_t j = 0; j < i; j++)
    if (strcmp(req->files[j]->path, f->path) == 0)
      return REFUSE("files[%zu].path: duplicate of files[%zu]", i, j);
  if (f->source_case == SANDBOX__V1__FILE__SOURCE_URL)
    return download_url_syntax_ok(f->url)
               ? 0
               : REFUSE("files[%zu].url: must be an http:// or https:// URL of at most %d bytes "
                        "of printable ASCII (no spaces or control characters; percent-encode the "
                        "rest)",
                        i, DOWNLOAD_URL_MAX);
  if (f->source_case != SANDBOX__V1__FILE__SOURCE_CONTENT)
    return REFUSE("files[%zu]: needs content or url", i);
  if ((int64_t)f->content.len > s->max_file_bytes)
    return REFUSE("files[%zu].content: %zu bytes; allowed: at most %" PRId64
                  " bytes (max-file-bytes)",
                  i, f->content.len, s->max_file_bytes);
  return 0;
}

static int check_files(const Sandbox__V1__RunCodeRequest *req, const struct server_settings *s,
                       uint64_t *inline_total, struct sbx_error *err) {
  if ((int64_t)req->n_files > s->max_files)
    return REFUSE("files: %zu files; allowed: 0 to %" PRId64, req->n_files, s->max_files);
  *inline_total = 0;
  for (size_t i = 0; i < req->n_files; i++) {
    if (check_file(req, i, s, err) < 0)
      return -1;
    if (req->files[i]->source_case == SANDBOX__V1__FILE__SOURCE_CONTENT)
      *inline_total += req->files[i]->content.len;
  }
  return 0;
}

/* What execve takes: each string below the kernel's MAX_ARG_STRLEN and all
 * of them below a quarter of the sandbox's 8 MiB stack. Past that the exec
 * would fail inside the sandbox, reported as an internal error. */
static int check_exec_sizes(const Sandbox__V1__RunCodeRequest *req, struct sbx_error *err) {
  size_t exec_bytes = 0;
  for (size_t i = 0; i < req->n_args; i++) {
    size_t len = strlen(req->args[i]) + 1;
    if (len > VALIDATE_MAX_EXEC_STRING)
      return REFUSE("args[%zu]: %zu bytes; allowed: at most %d", i, len - 1,
                    VALIDATE_MAX_EXEC_STRING - 1);
    exec_bytes += len + sizeof(char *); /* the kernel counts the pointer too */
  }
  for (size_t i = 0; i < req->n_env; i++) {
    size_t len = strlen(req->env[i]->key) + strlen(req->env[i]->value) + 2;
    if (len > VALIDATE_MAX_EXEC_STRING)
      return REFUSE("env[%zu] (%.64s): %zu bytes; allowed: at most %d", i, req->env[i]->key,
                    len - 2, VALIDATE_MAX_EXEC_STRING - 2);
    exec_bytes += len + sizeof(char *);
  }
  if (exec_bytes > VALIDATE_MAX_EXEC_BYTES)
    return REFUSE("args and env: %zu bytes in all; allowed: at most %d", exec_bytes,
                  VALIDATE_MAX_EXEC_BYTES);
  return 0;
}

static int check_args_and_env(const Sandbox__V1__RunCodeRequest *req,
                              const struct server_settings *s, struct sbx_error *err) {
  if ((int64_t)req->n_args > s->max_args)
    return REFUSE("args: %zu args; allowed: 0 to %" PRId64, req->n_args, s->max_args);
  if ((int64_t)req->n_env > s->max_env)
    return REFUSE("env: %zu entries; allowed: 0 to %" PRId64, req->n_env, s->max_env);
  for (size_t i = 0; i < req->n_env; i++)
    if (!env_key_ok(req->env[i]->key))
      return REFUSE("env: key \"%.64s\" must be 1 to 128 characters of [A-Za-z0-9_], not "
                    "starting with a digit",
                    req->env[i]->key);
  return check_exec_sizes(req, err);
}

/* The limits asked for, each within its range, defaults for the rest. A
 * tenant's limits_max (tenant_max, 0 for none) lowers a limit's ceiling,
 * and its default with it. */
static int effective_limits(const Sandbox__V1__Limits *in, const char *field,
                            const struct server_settings *s,
                            const struct settings_limits *tenant_max, const char *tenant,
                            const int64_t *raise, int64_t eff[LIMITS_N], struct sbx_error *err) {
  int64_t asked[LIMITS_N];
  limits_from_proto(in, asked);
  for (size_t i = 0; i < LIMITS_N; i++) {
    int64_t v = asked[i], max = s->max_limits.v[i], def = s->default_limits.v[i];
    /* A runtime that needs more than the server's default (its manifest's
     * limits, docs/RUNTIMES.md) gets it by default, within the maxima. */
    if (raise != NULL && raise[i] > def)
      def = raise[i];
    bool capped = tenant_max != NULL && tenant_max->v[i] > 0 && tenant_max->v[i] < max;
    if (capped)
      max = tenant_max->v[i];
    if (def > max)
      def = max;
    if (v != 0 && (v < limit_defs[i].min || v > max))
      return REFUSE("%s.%s: %" PRId64 " is out of range; allowed: %" PRId64 " to %" PRId64
                    "%s%s%s (0 = default %" PRId64 ")",
                    field, limit_defs[i].name, v, limit_defs[i].min, max,
                    capped ? " for tenant " : "", capped ? tenant : "",
                    capped ? " (its limits_max)" : "", def);
    eff[i] = v != 0 ? v : def;
  }
  return 0;
}

/* session_mode (docs/INTERPRETER.md): a known value; INTERPRETER only in a
 * session, on a server with interpreters, for runtime python, without
 * requirements, with code, args and env the interpreter's JSON can carry. */
static int check_session_mode(const Sandbox__V1__RunCodeRequest *req,
                              const struct server_settings *s, const struct runtime *rt,
                              struct sbx_error *err) {
  int mode = (int)req->session_mode;
  if (mode < 0 || mode > SANDBOX__V1__SESSION_MODE__SESSION_MODE_INTERPRETER)
    return REFUSE("session_mode: %d is not a session mode (0 UNSPECIFIED, 1 FILES, "
                  "2 INTERPRETER)",
                  mode);
  if (mode != SANDBOX__V1__SESSION_MODE__SESSION_MODE_INTERPRETER)
    return 0;
  if (req->session_id[0] == '\0')
    return REFUSE("session_mode: INTERPRETER needs a session_id (the interpreter lives in the "
                  "session)");
  if (!runtime_is_python(rt))
    return REFUSE("session_mode: INTERPRETER sessions are Python's (runtime python or "
                  "python-zygote), not runtime %s's; a FILES session keeps the files of any "
                  "runtime",
                  rt->name);
  if (s->max_interpreters == 0)
    return sbx_error_set(err, SBX_FAILED_PRECONDITION, 0,
                         "session_mode: INTERPRETER sessions are off on this server "
                         "(--max-interpreters 0)");
  if (req->n_requirements > 0)
    return REFUSE("requirements: not supported in an INTERPRETER session yet (docs/"
                  "INTERPRETER.md); use a FILES session or a stateless run");
  if (!text_utf8_valid(req->code, strlen(req->code)))
    return REFUSE("code: not valid UTF-8 (an INTERPRETER cell is text)");
  for (size_t i = 0; i < req->n_args; i++)
    if (!text_utf8_valid(req->args[i], strlen(req->args[i])))
      return REFUSE("args[%zu]: not valid UTF-8 (an INTERPRETER cell's argv is text)", i);
  for (size_t i = 0; i < req->n_env; i++)
    if (!text_utf8_valid(req->env[i]->value, strlen(req->env[i]->value)))
      return REFUSE("env[%.64s]: not valid UTF-8 (an INTERPRETER cell's environment is text)",
                    req->env[i]->key);
  return 0;
}

/* The proxy variables a run with allow_net gets from the server. */
static bool proxy_variable(const char *key) {
  static const char *const names[] = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcasecmp(key, names[i]) == 0)
      return true;
  return false;
}

/* allow_net: each entry well-formed and within the server's --egress-allow
 * and the tenant's egress_allow (NULL: none of its own). */
static int check_allow_net(const Sandbox__V1__RunCodeRequest *req, const struct server_settings *s,
                           const struct egress_allow *tenant_egress, const char *tenant,
                           struct sbx_error *err) {
  if (req->n_allow_net == 0)
    return 0;
  if (req->n_allow_net > EGRESS_ALLOW_MAX)
    return REFUSE("allow_net: %zu entries; allowed: at most %d", req->n_allow_net,
                  EGRESS_ALLOW_MAX);
  if (s->egress_allow[0] == '\0')
    return REFUSE("allow_net[0] (\"%.64s\"): this server gives runs no network (--egress-allow "
                  "is empty)",
                  req->allow_net[0]);
  struct egress_allow ceiling;
  struct sbx_error perr;
  if (egress_allow_parse_list(s->egress_allow, "egress-allow", &ceiling, &perr) < 0)
    return sbx_error_set(err, SBX_INTERNAL, 0, "%s", perr.msg); /* checked at start */
  for (size_t i = 0; i < req->n_allow_net; i++) {
    const char *text = req->allow_net[i];
    struct egress_allow_entry e;
    char why[200];
    if (strlen(text) > EGRESS_ALLOW_ENTRY_MAX)
      return REFUSE("allow_net[%zu]: %zu bytes; allowed: 1 to %d", i, strlen(text),
                    EGRESS_ALLOW_ENTRY_MAX);
    if (egress_allow_parse(text, &e, why, sizeof why) < 0) {
      char shown[EGRESS_ALLOW_ENTRY_MAX + 1]; /* control bytes and quotes as '?' */
      text_printable(text, strlen(text), shown, sizeof shown, false);
      return REFUSE("allow_net[%zu] (\"%s\"): %s", i, shown, why);
    }
    if (!egress_allow_within(&e, &ceiling))
      return REFUSE("allow_net[%zu] (\"%s\"): not within this server's --egress-allow", i, text);
    if (tenant_egress != NULL && !egress_allow_within(&e, tenant_egress))
      return REFUSE("allow_net[%zu] (\"%s\"): not within tenant %s's egress_allow", i, text,
                    tenant);
  }
  for (size_t i = 0; i < req->n_env; i++)
    if (proxy_variable(req->env[i]->key))
      return REFUSE("env[%.64s]: set by the server for a run with allow_net (its egress proxy)",
                    req->env[i]->key);
  return 0;
}

/* The engine's limits from effective values; tmp_bytes is the run's disk
 * quota (disk). */
static void to_sandbox_limits(const int64_t eff[LIMITS_N], int64_t disk,
                              struct sandbox_limits *limits) {
  memset(limits, 0, sizeof(*limits));
  limits->timeout_ms = (uint64_t)eff[LIMIT_TIMEOUT_MS];
  /* A CPU limit above the wall-clock limit can never be reached. */
  limits->cpu_time_ms =
      (uint64_t)(eff[LIMIT_CPU_TIME_MS] < eff[LIMIT_TIMEOUT_MS] ? eff[LIMIT_CPU_TIME_MS]
                                                                : eff[LIMIT_TIMEOUT_MS]);
  limits->memory_bytes = (uint64_t)eff[LIMIT_MEMORY_BYTES];
  limits->output_bytes = (uint64_t)eff[LIMIT_OUTPUT_BYTES];
  limits->max_processes = (uint64_t)eff[LIMIT_MAX_PROCESSES];
  /* The disk quota is each tmpfs's size (the workspace's, /tmp's and
   * /dev/shm's), which caps the blocks written: no RLIMIT_FSIZE on top, so
   * a sparse file may be larger than the quota, as on any filesystem. */
  limits->file_size_bytes = SANDBOX_UNLIMITED;
  limits->tmp_bytes = (uint64_t)disk;
  limits->open_files = (uint64_t)eff[LIMIT_OPEN_FILES];
}

/* compile_limits: only for a runtime with a compile stage; its defaults
 * are the manifest's compile limits over the server's; the disk is the
 * run's (one workspace). */
static int compile_limits(const Sandbox__V1__RunCodeRequest *req, const struct server_settings *s,
                          const struct settings_limits *tenant_max, const char *tenant,
                          const struct runtime *rt, int64_t disk, struct sandbox_limits *out,
                          struct sbx_error *err) {
  bool compiled = rt->kind == RUNTIME_KIND_MANIFEST && rt->manifest.has_compile;
  memset(out, 0, sizeof(*out));
  if (!compiled) {
    if (req->compile_limits != NULL)
      return REFUSE("compile_limits: runtime %s has no compile stage", rt->name);
    return 0;
  }
  if (req->compile_limits != NULL && req->compile_limits->disk_bytes != 0)
    return REFUSE("compile_limits.disk_bytes: the compile stage shares the run's workspace; set "
                  "limits.disk_bytes");
  int64_t eff[LIMITS_N] = {0};
  if (effective_limits(req->compile_limits, "compile_limits", s, tenant_max, tenant,
                       rt->manifest.compile_limits, eff, err) < 0)
    return -1;
  to_sandbox_limits(eff, disk, out);
  return 0;
}

int validate_run_request(const Sandbox__V1__RunCodeRequest *req, const struct server_settings *s,
                         const struct runtime_table *runtimes,
                         const struct settings_limits *tenant_max, const char *tenant,
                         const struct egress_allow *tenant_egress, struct sandbox_limits *limits,
                         struct sandbox_limits *compile, const struct runtime **runtime,
                         struct sbx_error *err) {
  uint64_t inline_total = 0;
  int64_t eff[LIMITS_N] = {0};
  if (runtimes_resolve(runtimes, req->runtime, req->language, req->version, runtime, err) < 0)
    return -1;
  if (check_code_and_ids(req, s, err) < 0 || check_session_mode(req, s, *runtime, err) < 0 ||
      check_requirements(req, s, err) < 0 || check_files(req, s, &inline_total, err) < 0 ||
      check_args_and_env(req, s, err) < 0 ||
      check_allow_net(req, s, tenant_egress, tenant, err) < 0 ||
      effective_limits(req->limits, "limits", s, tenant_max, tenant,
                       (*runtime)->kind == RUNTIME_KIND_MANIFEST ? (*runtime)->manifest.limits
                                                                 : NULL,
                       eff, err) < 0)
    return -1;
  if (inline_total > (uint64_t)eff[LIMIT_DISK_BYTES])
    return REFUSE("files: %" PRIu64 " bytes in all; allowed: at most the disk quota of %" PRId64
                  " bytes (limits.disk_bytes)",
                  inline_total, eff[LIMIT_DISK_BYTES]);
  to_sandbox_limits(eff, eff[LIMIT_DISK_BYTES], limits);
  return compile_limits(req, s, tenant_max, tenant, *runtime, eff[LIMIT_DISK_BYTES], compile, err);
}
