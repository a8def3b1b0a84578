/* http_json.c: see http_json.h. jansson does the parsing and the writing;
 * this file only says what went wrong in words a client can act on. */
#include "http_json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_CONTENT_TYPE "application/json; charset=utf-8"

json_t *http_json_body_object(const struct http_request *req, char *why, size_t len) {
  json_error_t jerr;
  json_t *v = json_loadb(req->body, req->body_len,
                         JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_ANY, &jerr);
  if (v == NULL) {
    if (req->body_len == 0)
      snprintf(why, len, "the request body is empty; a JSON object is expected");
    else
      snprintf(why, len, "invalid JSON at line %d, column %d: %s", jerr.line, jerr.column,
               jerr.text);
    return NULL;
  }
  if (!json_is_object(v)) {
    snprintf(why, len, "the request body is %s, not a JSON object", http_json_type_name(v));
    json_decref(v);
    return NULL;
  }
  return v;
}

const char *http_json_type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "an array";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
  case JSON_REAL:
    return "a number";
  case JSON_TRUE:
  case JSON_FALSE:
    return "a boolean";
  case JSON_NULL:
    return "null";
  }
  return "a value";
}

const char *http_json_unknown_key(const json_t *obj, const char *const *names) {
  const char *key;
  json_t *value;
  json_object_foreach((json_t *)obj, key, value) {
    size_t i = 0;
    while (names[i] != NULL && strcmp(names[i], key) != 0)
      i++;
    if (names[i] == NULL)
      return key;
  }
  return NULL;
}

void http_json_names(const char *const *names, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; names[i] != NULL && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%s", i > 0 ? ", " : "", names[i]);
}

bool http_json_integer(const json_t *v, long long *out) {
  if (json_is_integer(v)) {
    *out = json_integer_value(v);
    return true;
  }
  if (!json_is_real(v))
    return false;
  double d = json_real_value(v);
  if (!(d >= -9007199254740992.0 && d <= 9007199254740992.0) || d != floor(d))
    return false;
  *out = (long long)d;
  return true;
}

void http_response_json(struct http_response *resp, unsigned status, json_t *value) {
  char *text = value != NULL ? json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
  json_decref(value);
  free(resp->body);
  if (text == NULL) {
    resp->body = NULL;
    http_response_text(resp, 500, "out of memory writing the answer\n");
    return;
  }
  resp->status = status;
  resp->content_type = JSON_CONTENT_TYPE;
  resp->body = text;
  resp->len = strlen(text);
}

void http_response_json_message(struct http_response *resp, unsigned status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *msg = NULL;
  int n = vasprintf(&msg, fmt, ap);
  va_end(ap);
  /* A message may quote request bytes: never invalid UTF-8 in the answer. */
  json_t *m = n >= 0 ? json_stringn(msg, (size_t)n) : NULL;
  if (m == NULL && n >= 0)
    m = json_string("the message could not be written as UTF-8");
  free(msg);
  http_response_json(resp, status, m != NULL ? json_pack("{s:o}", "message", m) : NULL);
}
