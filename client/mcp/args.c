/* args.c: checks of tool arguments, each failing with a message that names
 * the argument and says what was expected, so that a model can correct its
 * call; and mcp_fail, the JSON-RPC error of a request whose params fail
 * such a check (jsonrpc.c's methods, resources.c's). Everything here runs
 * before a request is sent: an argument refused here never reaches
 * sandboxd, and nothing runs. */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fail.h"
#include "mcp_internal.h"
#include "text.h"

json_t *mcp_fail(struct mcp_rpc_error *e, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof(e->message), fmt, ap);
  va_end(ap);
  e->code = code;
  return NULL;
}

const char *mcp_json_type(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return "object";
  case JSON_ARRAY:
    return "array";
  case JSON_STRING:
    return "string";
  case JSON_INTEGER:
    return "integer";
  case JSON_REAL:
    return "number";
  case JSON_TRUE:
  case JSON_FALSE:
    return "boolean";
  case JSON_NULL:
    return "null";
  }
  return "value";
}

void mcp_quote(const char *s, size_t len, char *buf, size_t buflen) {
  char tmp[68];
  size_t n = len > 64 ? 64 : len;
  text_printable(s, n, tmp, sizeof(tmp), false);
  snprintf(buf, buflen, "\"%s%s\"", tmp, len > 64 ? "..." : "");
}

int mcp_args_known(const json_t *obj, const char *where, const char *const *known, char *err,
                   size_t errlen) {
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    size_t i = 0;
    while (known[i] != NULL && strcmp(known[i], key) != 0)
      i++;
    if (known[i] != NULL)
      continue;
    char q[80], names[256] = "";
    mcp_quote(key, strlen(key), q, sizeof(q));
    for (i = 0; known[i] != NULL; i++)
      snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? ", " : "",
               known[i]);
    return sbxc_fail(err, errlen, "%s: unknown property %s; the properties are: %s", where, q,
                     names);
  }
  return 0;
}

int mcp_arg_string(const json_t *obj, const char *where, const char *key, bool required,
                   const char **s, size_t *len, char *err, size_t errlen) {
  const json_t *v = json_object_get(obj, key);
  *s = NULL;
  if (len != NULL)
    *len = 0;
  if (v == NULL) {
    if (required)
      return sbxc_fail(err, errlen, "%s.%s is required (a string)", where, key);
    return 0;
  }
  if (!json_is_string(v))
    return sbxc_fail(err, errlen, "%s.%s: expected a string, got %s", where, key, mcp_json_type(v));
  *s = json_string_value(v);
  if (len != NULL)
    *len = json_string_length(v);
  return 0;
}

int mcp_arg_enum(const json_t *obj, const char *where, const char *key, const char *const *values,
                 int *index, char *err, size_t errlen) {
  const char *s;
  size_t len;
  *index = -1;
  if (mcp_arg_string(obj, where, key, false, &s, &len, err, errlen) < 0)
    return -1;
  if (s == NULL)
    return 0;
  for (int i = 0; values[i] != NULL; i++)
    if (strlen(values[i]) == len && memcmp(values[i], s, len) == 0) {
      *index = i;
      return 0;
    }
  char q[80], names[256] = "";
  mcp_quote(s, len, q, sizeof(q));
  for (size_t i = 0; values[i] != NULL; i++)
    snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s\"%s\"", i ? ", " : "",
             values[i]);
  return sbxc_fail(err, errlen, "%s.%s: %s is not one of the allowed values: %s", where, key, q,
                   names);
}

/* A JSON number as an integer: integers, and reals without a fraction. */
static bool integral(const json_t *v, int64_t *out) {
  if (json_is_integer(v)) {
    *out = json_integer_value(v);
    return true;
  }
  double d = json_is_real(v) ? json_real_value(v) : NAN;
  if (!isfinite(d) || d != floor(d) || d < -9.2e18 || d > 9.2e18)
    return false;
  *out = (int64_t)d;
  return true;
}

int mcp_arg_int(const json_t *obj, const char *where, const char *key, int64_t lo, int64_t hi,
                int64_t *out, bool *present, char *err, size_t errlen) {
  const json_t *v = json_object_get(obj, key);
  *present = v != NULL;
  if (v == NULL)
    return 0;
  if (!integral(v, out))
    return sbxc_fail(err, errlen, "%s.%s: expected an integer, got %s", where, key,
                     mcp_json_type(v));
  if (*out < lo || *out > hi)
    return sbxc_fail(err, errlen, "%s.%s: %" PRId64 " is out of range (%" PRId64 " to %" PRId64 ")",
                     where, key, *out, lo, hi);
  return 0;
}

int mcp_arg_array(const json_t *obj, const char *where, const char *key, size_t max, json_t **out,
                  char *err, size_t errlen) {
  json_t *v = json_object_get(obj, key);
  *out = NULL;
  if (v == NULL)
    return 0;
  if (!json_is_array(v))
    return sbxc_fail(err, errlen, "%s.%s: expected an array, got %s", where, key, mcp_json_type(v));
  if (json_array_size(v) > max)
    return sbxc_fail(err, errlen, "%s.%s: %zu items, at most %zu", where, key, json_array_size(v),
                     max);
  *out = v;
  return 0;
}

int mcp_check_no_nul(const char *where, const char *s, size_t len, char *err, size_t errlen) {
  if (memchr(s, '\0', len) != NULL)
    return sbxc_fail(err, errlen,
                     "%s: contains a NUL character (\\u0000), which is not allowed here", where);
  return 0;
}

int mcp_check_path(const char *where, const char *path, size_t len, char *err, size_t errlen) {
  char q[80];
  mcp_quote(path, len, q, sizeof(q));
  if (mcp_check_no_nul(where, path, len, err, errlen) < 0)
    return -1;
  if (len == 0 || len > 255)
    return sbxc_fail(err, errlen, "%s: %s must be 1 to 255 bytes long", where, q);
  if (path[0] == '/')
    return sbxc_fail(err, errlen, "%s: %s is absolute; give a path relative to the workspace",
                     where, q);
  for (size_t start = 0; start <= len;) {
    const char *p = path + start;
    const char *slash = memchr(p, '/', len - start);
    size_t n = slash != NULL ? (size_t)(slash - p) : len - start;
    const char *bad = n == 0                                 ? "an empty"
                      : n == 1 && p[0] == '.'                ? "a \".\""
                      : n == 2 && p[0] == '.' && p[1] == '.' ? "a \"..\""
                                                             : NULL;
    if (bad != NULL)
      return sbxc_fail(err, errlen,
                       "%s: %s has %s component; a path stays inside the workspace, relative, "
                       "without \".\" or \"..\" (e.g. \"data/input.csv\")",
                       where, q, bad);
    start += n + 1;
  }
  return 0;
}

int mcp_check_session_id(const char *where, const char *id, size_t len, char *err, size_t errlen) {
  char q[80];
  mcp_quote(id, len, q, sizeof(q));
  bool ok = len >= 1 && len <= 64 && strcmp(id, ".") != 0 && strcmp(id, "..") != 0;
  for (size_t i = 0; ok && i < len; i++)
    ok = isalnum((unsigned char)id[i]) || id[i] == '.' || id[i] == '_' || id[i] == '-';
  if (!ok)
    return sbxc_fail(err, errlen,
                     "%s: %s is not a session id: 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' "
                     "and '-'",
                     where, q);
  return 0;
}
