/* manifest.c: see manifest.h. Every key is handled by name; anything else
 * is refused, so a typo never silently drops a setting. */
#include "manifest.h"

#include <errno.h>
#include <jansson.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "text.h"

#define FAIL(...) sbx_error_set(err, SBX_INVALID_ARGUMENT, 0, __VA_ARGS__)

bool runtime_name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > RUNTIME_NAME_MAX ||
      !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
    return false;
  for (const char *c = s; *c != '\0'; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '.' || *c == '+' ||
          *c == '_' || *c == '-'))
      return false;
  return true;
}

/* A word of a command or an env value: printable UTF-8 without control
 * bytes, at most RUNTIME_WORD_MAX bytes. */
static bool word_ok(const char *s, size_t n) {
  if (n > RUNTIME_WORD_MAX || !text_utf8_valid(s, n))
    return false;
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
      return false;
  return true;
}

static int name_field(const json_t *v, const char *where, const char *key, char *out,
                      struct sbx_error *err) {
  if (!json_is_string(v) || !runtime_name_ok(json_string_value(v)))
    return FAIL("%s: %s must be a string of 1 to %d characters of [a-z0-9.+_-], starting with a "
                "letter or digit",
                where, key, RUNTIME_NAME_MAX);
  snprintf(out, RUNTIME_NAME_MAX + 1, "%s", json_string_value(v));
  return 0;
}

static int text_field(const json_t *v, const char *where, const char *key, size_t max, char **out,
                      struct sbx_error *err) {
  if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max ||
      !text_utf8_valid(json_string_value(v), json_string_length(v)) ||
      strlen(json_string_value(v)) != json_string_length(v))
    return FAIL("%s: %s must be a non-empty UTF-8 string of at most %zu bytes, without NUL", where,
                key, max);
  if ((*out = strdup(json_string_value(v))) == NULL)
    return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "%s", where);
  return 0;
}

/* A normalised absolute path: no "//", ".", ".." or trailing slash. */
static bool absolute_path_ok(const char *p) {
  if (p[0] != '/' || p[1] == '\0')
    return false;
  for (const char *c = p; *c != '\0'; c++) {
    if (*c != '/')
      continue;
    const char *next = c + 1;
    size_t n = strcspn(next, "/");
    if (n == 0 || (n == 1 && next[0] == '.') || (n == 2 && next[0] == '.' && next[1] == '.'))
      return false;
  }
  return true;
}

static int command_field(const json_t *v, const char *where, const char *key,
                         struct runtime_command *cmd, struct sbx_error *err) {
  if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > RUNTIME_ARGV_MAX)
    return FAIL("%s: %s must be an array of 1 to %d strings (the program, then its arguments)",
                where, key, RUNTIME_ARGV_MAX);
  size_t i;
  json_t *w;
  json_array_foreach(v, i, w) {
    if (!json_is_string(w) || json_string_length(w) == 0 ||
        strlen(json_string_value(w)) != json_string_length(w) ||
        !word_ok(json_string_value(w), json_string_length(w)))
      return FAIL("%s: %s[%zu] must be a non-empty printable string of at most %d bytes", where,
                  key, i, RUNTIME_WORD_MAX);
    if (i == 0 && !absolute_path_ok(json_string_value(w)))
      return FAIL("%s: %s[0] (\"%s\") must be an absolute, normalised path: the program", where,
                  key, json_string_value(w));
    if ((cmd->argv[i] = strdup(json_string_value(w))) == NULL)
      return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "%s", where);
    cmd->argc = i + 1;
  }
  return 0;
}

static void command_free(struct runtime_command *cmd) {
  for (size_t i = 0; i < cmd->argc; i++)
    free(cmd->argv[i]);
  *cmd = (struct runtime_command){0};
}

/* An object whose keys must all be in names. */
static int known_keys(const json_t *obj, const char *const *names, const char *where,
                      const char *what, struct sbx_error *err) {
  const char *key;
  json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    size_t i = 0;
    while (names[i] != NULL && strcmp(names[i], key) != 0)
      i++;
    if (names[i] == NULL) {
      char shown[72];
      text_printable(key, strlen(key), shown, sizeof shown, false);
      char known[256] = "";
      for (size_t k = 0, used = 0; names[k] != NULL && used < sizeof known; k++)
        used +=
            (size_t)snprintf(known + used, sizeof known - used, "%s%s", k ? ", " : "", names[k]);
      return FAIL("%s: unknown key \"%s\" in %s (known: %s)", where, shown, what, known);
    }
  }
  return 0;
}

/* {"timeout_ms": N, ...} with the proto's limit names, each within
 * [its minimum, 2^40], and "why": the reason, required when any is set. */
static int limits_field(const json_t *v, const char *where, const char *key, int64_t out[LIMITS_N],
                        char **why, struct sbx_error *err) {
  if (!json_is_object(v))
    return FAIL("%s: %s must be an object", where, key);
  const char *k;
  json_t *x;
  json_object_foreach((json_t *)v, k, x) {
    if (strcmp(k, "why") == 0) {
      char why_key[32];
      snprintf(why_key, sizeof why_key, "%s.why", key);
      if (text_field(x, where, why_key, 1024, why, err) < 0)
        return -1;
      continue;
    }
    size_t i = 0;
    while (i < LIMITS_N && strcmp(limit_defs[i].name, k) != 0)
      i++;
    if (i == LIMITS_N) {
      char shown[72];
      text_printable(k, strlen(k), shown, sizeof shown, false);
      return FAIL("%s: %s: unknown limit \"%s\" (the names of RunCode's limits, and why)", where,
                  key, shown);
    }
    if (!json_is_integer(x) || json_integer_value(x) < limit_defs[i].min ||
        json_integer_value(x) > (1LL << 40))
      return FAIL("%s: %s.%s must be an integer from %lld to %lld", where, key, k,
                  (long long)limit_defs[i].min, 1LL << 40);
    out[i] = json_integer_value(x);
  }
  if (json_object_size(v) > 0 && *why == NULL)
    return FAIL("%s: %s: a runtime that needs other limits says why (%s.why)", where, key, key);
  return 0;
}

static int version_field(const json_t *v, const char *where, struct runtime_manifest *m,
                         struct sbx_error *err) {
  static const char *const keys[] = {"command", "pattern", NULL};
  if (!json_is_object(v))
    return FAIL("%s: version must be an object {command, pattern}", where);
  if (known_keys(v, keys, where, "version", err) < 0 ||
      command_field(json_object_get(v, "command"), where, "version.command", &m->version_command,
                    err) < 0 ||
      text_field(json_object_get(v, "pattern"), where, "version.pattern", 256, &m->version_pattern,
                 err) < 0)
    return -1;
  regex_t re;
  if (regcomp(&re, m->version_pattern, REG_EXTENDED) != 0)
    return FAIL("%s: version.pattern is not a POSIX extended regular expression", where);
  size_t groups = re.re_nsub;
  regfree(&re);
  if (groups != 1)
    return FAIL("%s: version.pattern must have exactly one group, the version (it has %zu)", where,
                groups);
  return 0;
}

static int compile_field(const json_t *v, const char *where, struct runtime_manifest *m,
                         struct sbx_error *err) {
  static const char *const keys[] = {"command", "limits", NULL};
  if (!json_is_object(v))
    return FAIL("%s: compile must be an object {command, limits}", where);
  if (known_keys(v, keys, where, "compile", err) < 0 ||
      command_field(json_object_get(v, "command"), where, "compile.command", &m->compile, err) < 0)
    return -1;
  const json_t *lim = json_object_get(v, "limits");
  if (lim != NULL && limits_field(lim, where, "compile.limits", m->compile_limits,
                                  &m->compile_limits_why, err) < 0)
    return -1;
  m->has_compile = true;
  return 0;
}

static int aliases_field(const json_t *v, const char *where, struct runtime_manifest *m,
                         struct sbx_error *err) {
  if (!json_is_array(v) || json_array_size(v) > RUNTIME_ALIASES_MAX)
    return FAIL("%s: aliases must be an array of at most %d names", where, RUNTIME_ALIASES_MAX);
  size_t i;
  json_t *a;
  json_array_foreach(v, i, a) {
    if (name_field(a, where, "aliases[]", m->aliases[i], err) < 0)
      return -1;
    m->n_aliases = i + 1;
  }
  return 0;
}

static int env_field(const json_t *v, const char *where, struct runtime_manifest *m,
                     struct sbx_error *err) {
  if (!json_is_object(v) || json_object_size(v) > RUNTIME_ENV_MAX)
    return FAIL("%s: env must be an object of at most %d variables", where, RUNTIME_ENV_MAX);
  const char *k;
  json_t *x;
  json_object_foreach((json_t *)v, k, x) {
    bool key_ok =
        k[0] != '\0' && strlen(k) <= 128 && !(k[0] >= '0' && k[0] <= '9') &&
        strspn(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_") == strlen(k);
    if (!key_ok || !json_is_string(x) || strlen(json_string_value(x)) != json_string_length(x) ||
        !word_ok(json_string_value(x), json_string_length(x)))
      return FAIL("%s: env: each key [A-Za-z_][A-Za-z0-9_]* with a printable string value of at "
                  "most %d bytes",
                  where, RUNTIME_WORD_MAX);
    if (asprintf(&m->env[m->n_env], "%s=%s", k, json_string_value(x)) < 0) {
      m->env[m->n_env] = NULL;
      return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "%s", where);
    }
    m->n_env++;
  }
  return 0;
}

/* Read-only binds, each an existing host directory below /opt, at the
 * same path (the root already binds /usr, /bin and /lib*; /etc is the
 * sandbox's own and the engine refuses a bind over it or any system
 * directory: rootfs_check_mount_target). */
static int mounts_field(const json_t *v, const char *where, struct runtime_manifest *m,
                        struct sbx_error *err) {
  if (!json_is_array(v) || json_array_size(v) > RUNTIME_MOUNTS_MAX)
    return FAIL("%s: mounts must be an array of at most %d paths", where, RUNTIME_MOUNTS_MAX);
  size_t i;
  json_t *p;
  json_array_foreach(v, i, p) {
    const char *s = json_is_string(p) ? json_string_value(p) : "";
    if (strncmp(s, "/opt/", 5) != 0 || !absolute_path_ok(s) || strlen(s) > 255 ||
        !word_ok(s, strlen(s)))
      return FAIL("%s: mounts[%zu] must be a normalised absolute path below /opt of at most 255 "
                  "bytes",
                  where, i);
    struct stat st;
    if (stat(s, &st) < 0)
      return FAIL("%s: mounts[%zu] (\"%s\"): %s", where, i, s, strerror(errno));
    if (!S_ISDIR(st.st_mode))
      return FAIL("%s: mounts[%zu] (\"%s\"): not a directory", where, i, s);
    if ((m->mounts[i] = strdup(s)) == NULL)
      return sbx_error_set(err, SBX_INTERNAL, ENOMEM, "%s", where);
    m->n_mounts = i + 1;
  }
  return 0;
}

static int file_field(const json_t *v, const char *where, struct runtime_manifest *m,
                      struct sbx_error *err) {
  const char *s = json_is_string(v) ? json_string_value(v) : "";
  size_t n = strlen(s);
  if (n == 0 || n > RUNTIME_FILE_MAX || strcmp(s, ".") == 0 || strcmp(s, "..") == 0 ||
      strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != n ||
      strcmp(s, "output") == 0 || strcmp(s, "mounts") == 0)
    return FAIL("%s: file must be a file name of 1 to %d characters of [A-Za-z0-9._-] (not "
                "output or mounts)",
                where, RUNTIME_FILE_MAX);
  snprintf(m->file, sizeof m->file, "%s", s);
  return 0;
}

static int self_test_field(const json_t *v, const char *where, struct runtime_manifest *m,
                           struct sbx_error *err) {
  static const char *const keys[] = {"code", "stdout", NULL};
  if (!json_is_object(v))
    return FAIL("%s: self_test must be an object {code, stdout}", where);
  return known_keys(v, keys, where, "self_test", err) < 0 ||
                 text_field(json_object_get(v, "code"), where, "self_test.code",
                            RUNTIME_SELF_TEST_MAX, &m->self_test_code, err) < 0 ||
                 text_field(json_object_get(v, "stdout"), where, "self_test.stdout",
                            RUNTIME_SELF_TEST_MAX, &m->self_test_stdout, err) < 0
             ? -1
             : 0;
}

static int parse_object(const json_t *root, const char *where, struct runtime_manifest *m,
                        struct sbx_error *err) {
  static const char *const keys[] = {"name",      "language",    "aliases", "version", "file",
                                     "compile",   "run",         "env",     "mounts",  "limits",
                                     "self_test", "description", NULL};
  if (!json_is_object(root))
    return FAIL("%s: a manifest is a JSON object", where);
  if (known_keys(root, keys, where, "the manifest", err) < 0)
    return -1;
  static const char *const required[] = {"name", "language",  "version", "file",
                                         "run",  "self_test", NULL};
  for (size_t i = 0; required[i] != NULL; i++)
    if (json_object_get(root, required[i]) == NULL)
      return FAIL("%s: %s is required", where, required[i]);
  const json_t *v;
  char *description = NULL;
  if (name_field(json_object_get(root, "name"), where, "name", m->name, err) < 0 ||
      name_field(json_object_get(root, "language"), where, "language", m->language, err) < 0 ||
      version_field(json_object_get(root, "version"), where, m, err) < 0 ||
      file_field(json_object_get(root, "file"), where, m, err) < 0 ||
      command_field(json_object_get(root, "run"), where, "run", &m->run, err) < 0 ||
      self_test_field(json_object_get(root, "self_test"), where, m, err) < 0)
    return -1;
  if (((v = json_object_get(root, "aliases")) != NULL && aliases_field(v, where, m, err) < 0) ||
      ((v = json_object_get(root, "compile")) != NULL && compile_field(v, where, m, err) < 0) ||
      ((v = json_object_get(root, "env")) != NULL && env_field(v, where, m, err) < 0) ||
      ((v = json_object_get(root, "mounts")) != NULL && mounts_field(v, where, m, err) < 0) ||
      ((v = json_object_get(root, "limits")) != NULL &&
       limits_field(v, where, "limits", m->limits, &m->limits_why, err) < 0) ||
      ((v = json_object_get(root, "description")) != NULL &&
       text_field(v, where, "description", 1024, &description, err) < 0))
    return -1;
  free(description); /* for the reader of the file */
  return 0;
}

static int parse_root(json_t *root, const json_error_t *jerr, const char *where,
                      struct runtime_manifest *m, struct sbx_error *err) {
  memset(m, 0, sizeof *m);
  if (root == NULL)
    return FAIL("%s: line %d: %s", where, jerr->line, jerr->text);
  int rv = parse_object(root, where, m, err);
  json_decref(root);
  if (rv < 0)
    runtime_manifest_free(m);
  return rv;
}

int runtime_manifest_parse(const char *text, size_t len, const char *where,
                           struct runtime_manifest *m, struct sbx_error *err) {
  json_error_t jerr;
  return parse_root(json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr), &jerr, where, m, err);
}

int runtime_manifest_load(const char *path, struct runtime_manifest *m, struct sbx_error *err) {
  memset(m, 0, sizeof *m);
  struct stat st;
  if (lstat(path, &st) < 0)
    return FAIL("%s: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode) || st.st_size > RUNTIME_MANIFEST_MAX)
    return FAIL("%s: not a regular file of at most %d bytes", path, RUNTIME_MANIFEST_MAX);
  json_error_t jerr;
  return parse_root(json_load_file(path, JSON_REJECT_DUPLICATES, &jerr), &jerr, path, m, err);
}

void runtime_manifest_free(struct runtime_manifest *m) {
  command_free(&m->version_command);
  command_free(&m->compile);
  command_free(&m->run);
  for (size_t i = 0; i < m->n_env; i++)
    free(m->env[i]);
  for (size_t i = 0; i < m->n_mounts; i++)
    free(m->mounts[i]);
  free(m->version_pattern);
  free(m->limits_why);
  free(m->compile_limits_why);
  free(m->self_test_code);
  free(m->self_test_stdout);
  memset(m, 0, sizeof *m);
}
