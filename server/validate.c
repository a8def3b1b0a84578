/* validate.c: see validate.h. */
#include "validate.h"

#include "download.h"
#include "requirements.h"
#include "session.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

__attribute__((format(printf, 4, 5))) static sbx_code refuse(sbx_code code, char *msg,
                                                             size_t msglen, const char *fmt,
                                                             ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, msglen, fmt, ap);
  va_end(ap);
  return code;
}

int validate_run_id(const char *run_id) {
  size_t len = strlen(run_id);
  if (len == 0 || len > RUN_ID_MAX || strcmp(run_id, ".") == 0 || strcmp(run_id, "..") == 0)
    return 0;
  for (const char *c = run_id; *c != '\0'; c++) {
    bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '_' || *c == '-';
    if (!ok)
      return 0;
  }
  return 1;
}

int validate_relative_path(const char *path) {
  size_t len = strlen(path);
  if (len == 0 || len > 255 || path[0] == '/')
    return 0;
  const char *p = path;
  while (*p != '\0') {
    const char *slash = strchr(p, '/');
    size_t n = slash != NULL ? (size_t)(slash - p) : strlen(p);
    if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
      return 0;
    if (slash == NULL)
      break;
    p = slash + 1;
    if (*p == '\0')
      return 0; /* trailing slash */
  }
  return 1;
}

static int env_key_ok(const char *key) {
  size_t len = strlen(key);
  if (len == 0 || len > 128 || (key[0] >= '0' && key[0] <= '9'))
    return 0;
  for (const char *c = key; *c != '\0'; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '_'))
      return 0;
  return 1;
}

/* Smallest value that makes sense for each limit; 0 always means default. */
static const struct {
  const char *name;
  int64_t min;
} limit_fields[] = {
    {"timeout_ms", 1},      {"cpu_time_ms", 1},   {"memory_bytes", 8 << 20},
    {"output_bytes", 1},    {"max_processes", 1}, {"disk_bytes", 4096},
    {"open_files", 16},
};

sbx_code validate_run_request(const Sandbox__V1__RunCodeRequest *req,
                              const struct server_settings *s, struct sandbox_limits *limits,
                              char *msg, size_t msglen) {
  if (req->runtime[0] != '\0' && strcmp(req->runtime, "python") != 0)
    return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                  "runtime: \"%.64s\" is not supported; supported: python", req->runtime);
  size_t code_len = strlen(req->code);
  if (code_len == 0)
    return refuse(SBX_INVALID_ARGUMENT, msg, msglen, "code: must not be empty");
  if ((int64_t)code_len > s->max_code_bytes)
    return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                  "code: %zu bytes; allowed: 1 to %" PRId64 " bytes", code_len, s->max_code_bytes);
  if (req->run_id[0] != '\0' && !validate_run_id(req->run_id))
    return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                  "run_id: must be 1 to %d characters of [A-Za-z0-9._-], not \".\" or \"..\"",
                  RUN_ID_MAX);
  if (req->session_id[0] != '\0' && !session_id_valid(req->session_id))
    return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                  "session_id: must be 1 to %d characters of [A-Za-z0-9._-], not \".\" or \"..\"",
                  SESSION_ID_MAX);
  if ((int64_t)req->n_requirements > s->max_requirements)
    return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                  "requirements: %zu requirements; allowed: 0 to %" PRId64, req->n_requirements,
                  s->max_requirements);
  for (size_t i = 0; i < req->n_requirements; i++) {
    char canonical[REQUIREMENT_MAX + 1], why[256];
    size_t len = strlen(req->requirements[i]);
    if ((int64_t)len > s->max_requirement_bytes || len == 0)
      return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                    "requirements[%zu]: %zu bytes; allowed: 1 to %" PRId64 " bytes", i, len,
                    s->max_requirement_bytes);
    if (requirement_normalize(req->requirements[i], s->requirements_allow_urls != 0, canonical,
                              sizeof(canonical), why, sizeof(why)) < 0)
      return refuse(SBX_INVALID_ARGUMENT, msg, msglen, "requirements[%zu]: %s", i, why);
  }

  if ((int64_t)req->n_files > s->max_files)
    return refuse(SBX_INVALID_ARGUMENT, msg, msglen, "files: %zu files; allowed: 0 to %" PRId64,
                  req->n_files, s->max_files);
  uint64_t inline_total = 0;
  for (size_t i = 0; i < req->n_files; i++) {
    const Sandbox__V1__File *f = req->files[i];
    if (!validate_relative_path(f->path))
      return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                    "files[%zu].path: must be a relative path (below mounts/) of at most 255 "
                    "bytes without empty, \".\" or \"..\" components",
                    i);
    for (size_t j = 0; j < i; j++)
      if (strcmp(req->files[j]->path, f->path) == 0)
        return refuse(SBX_INVALID_ARGUMENT, msg, msglen, "files[%zu].path: duplicate of files[%zu]",
                      i, j);
    if (f->source_case == SANDBOX__V1__FILE__SOURCE_URL) {
      if (!download_url_syntax_ok(f->url))
        return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                      "files[%zu].url: must be an http:// or https:// URL of at most %d bytes "
                      "without spaces or control characters",
                      i, DOWNLOAD_URL_MAX);
      continue;
    }
    if (f->source_case != SANDBOX__V1__FILE__SOURCE_CONTENT)
      return refuse(SBX_INVALID_ARGUMENT, msg, msglen, "files[%zu]: needs content or url", i);
    if ((int64_t)f->content.len > s->max_file_bytes)
      return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                    "files[%zu].content: %zu bytes; allowed: at most %" PRId64
                    " bytes (max-file-bytes)",
                    i, f->content.len, s->max_file_bytes);
    inline_total += f->content.len;
  }

  if ((int64_t)req->n_args > s->max_args)
    return refuse(SBX_INVALID_ARGUMENT, msg, msglen, "args: %zu args; allowed: 0 to %" PRId64,
                  req->n_args, s->max_args);
  if ((int64_t)req->n_env > s->max_env)
    return refuse(SBX_INVALID_ARGUMENT, msg, msglen, "env: %zu entries; allowed: 0 to %" PRId64,
                  req->n_env, s->max_env);
  for (size_t i = 0; i < req->n_env; i++)
    if (!env_key_ok(req->env[i]->key))
      return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                    "env: key \"%.64s\" must be 1 to 128 characters of [A-Za-z0-9_], not "
                    "starting with a digit",
                    req->env[i]->key);
  /* What execve takes: each string below the kernel's MAX_ARG_STRLEN and all
   * of them below a quarter of the sandbox's 8 MiB stack (less 64 KiB for the
   * interpreter's own argv and the minimum environment). Past that the exec
   * would fail inside the sandbox, reported as an internal error. */
  size_t exec_bytes = 0;
  for (size_t i = 0; i < req->n_args; i++) {
    size_t len = strlen(req->args[i]) + 1;
    if (len > VALIDATE_MAX_EXEC_STRING)
      return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                    "args[%zu]: %zu bytes; allowed: at most %d", i, len - 1,
                    VALIDATE_MAX_EXEC_STRING - 1);
    exec_bytes += len + sizeof(char *); /* the kernel counts the pointer too */
  }
  for (size_t i = 0; i < req->n_env; i++) {
    size_t len = strlen(req->env[i]->key) + strlen(req->env[i]->value) + 2;
    if (len > VALIDATE_MAX_EXEC_STRING)
      return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                    "env[%zu] (%.64s): %zu bytes; allowed: at most %d", i, req->env[i]->key,
                    len - 2, VALIDATE_MAX_EXEC_STRING - 2);
    exec_bytes += len + sizeof(char *);
  }
  if (exec_bytes > VALIDATE_MAX_EXEC_BYTES)
    return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                  "args and env: %zu bytes in all; allowed: at most %d", exec_bytes,
                  VALIDATE_MAX_EXEC_BYTES);

  const Sandbox__V1__Limits empty = SANDBOX__V1__LIMITS__INIT;
  const Sandbox__V1__Limits *in = req->limits != NULL ? req->limits : &empty;
  const int64_t asked[SETTINGS_N_LIMITS] = {in->timeout_ms,    in->cpu_time_ms,
                                            in->memory_bytes,  in->output_bytes,
                                            in->max_processes, in->disk_bytes,
                                            in->open_files};
  int64_t def[SETTINGS_N_LIMITS], max[SETTINGS_N_LIMITS];
  settings_limits_array(&s->default_limits, def);
  settings_limits_array(&s->max_limits, max);
  int64_t eff[SETTINGS_N_LIMITS];
  for (size_t i = 0; i < SETTINGS_N_LIMITS; i++) {
    int64_t v = asked[i];
    if (v != 0 && (v < limit_fields[i].min || v > max[i]))
      return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                    "limits.%s: %" PRId64 " is out of range; allowed: %" PRId64 " to %" PRId64
                    " (0 = default %" PRId64 ")",
                    limit_fields[i].name, v, limit_fields[i].min, max[i], def[i]);
    eff[i] = v != 0 ? v : def[i];
  }
  if (inline_total > (uint64_t)eff[5])
    return refuse(SBX_INVALID_ARGUMENT, msg, msglen,
                  "files: %" PRIu64 " bytes in all; allowed: at most the disk quota of %" PRId64
                  " bytes (limits.disk_bytes)",
                  inline_total, eff[5]);
  memset(limits, 0, sizeof(*limits));
  limits->timeout_ms = (uint64_t)eff[0];
  /* A CPU limit above the wall-clock limit can never be reached. */
  limits->cpu_time_ms = (uint64_t)(eff[1] < eff[0] ? eff[1] : eff[0]);
  limits->memory_bytes = (uint64_t)eff[2];
  limits->output_bytes = (uint64_t)eff[3];
  limits->max_processes = (uint64_t)eff[4];
  /* The disk quota is each tmpfs's size (the workspace's, /tmp's and
   * /dev/shm's), which caps the blocks written: no RLIMIT_FSIZE on top, so
   * a sparse file may be larger than the quota, as on any filesystem. */
  limits->file_size_bytes = SANDBOX_UNLIMITED;
  limits->tmp_bytes = (uint64_t)eff[5];
  limits->open_files = (uint64_t)eff[6];
  return SBX_OK;
}
