/* json.c: see json.h. */
#include "json.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put(struct json_buf *j, const char *s, size_t n) {
  if (j->failed)
    return;
  if (j->len + n + 1 > j->cap) {
    size_t cap = j->cap ? j->cap : 256;
    while (cap < j->len + n + 1)
      cap *= 2;
    char *p = realloc(j->data, cap);
    if (p == NULL) {
      j->failed = true;
      return;
    }
    j->data = p;
    j->cap = cap;
  }
  memcpy(j->data + j->len, s, n);
  j->len += n;
  j->data[j->len] = '\0';
}

static void value_prefix(struct json_buf *j) {
  if (j->need_comma)
    put(j, ",", 1);
  j->need_comma = true;
}

void json_raw(struct json_buf *j, const char *s) {
  put(j, s, strlen(s));
}

void json_begin(struct json_buf *j, char bracket) {
  value_prefix(j);
  put(j, &bracket, 1);
  j->need_comma = false;
}

void json_end(struct json_buf *j, char bracket) {
  put(j, &bracket, 1);
  j->need_comma = true;
}

void json_key(struct json_buf *j, const char *key) {
  json_cstring(j, key);
  put(j, ":", 1);
  j->need_comma = false;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
  unsigned char c = s[0];
  if (c < 0x80)
    return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF)
    need = 1;
  else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0)
      lo = 0xA0;
    if (c == 0xED)
      hi = 0x9F; /* no surrogates */
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0)
      lo = 0x90;
    if (c == 0xF4)
      hi = 0x8F;
  } else
    return 0;
  if (n < need + 1)
    return 0;
  if (s[1] < lo || s[1] > hi)
    return 0;
  for (size_t i = 2; i <= need; i++)
    if (s[i] < 0x80 || s[i] > 0xBF)
      return 0;
  return need + 1;
}

void json_string(struct json_buf *j, const char *str, size_t len) {
  const unsigned char *s = (const unsigned char *)str;
  value_prefix(j);
  put(j, "\"", 1);
  size_t i = 0;
  while (i < len) {
    unsigned char c = s[i];
    if (c == '"' || c == '\\') {
      char esc[2] = {'\\', (char)c};
      put(j, esc, 2);
      i++;
    } else if (c < 0x20) {
      char esc[8];
      switch (c) {
      case '\n':
        put(j, "\\n", 2);
        break;
      case '\t':
        put(j, "\\t", 2);
        break;
      case '\r':
        put(j, "\\r", 2);
        break;
      default:
        snprintf(esc, sizeof(esc), "\\u%04x", c);
        put(j, esc, 6);
      }
      i++;
    } else {
      size_t n = utf8_len(s + i, len - i);
      if (n == 0) {
        put(j, "\\ufffd", 6);
        i++;
      } else {
        put(j, (const char *)s + i, n);
        i += n;
      }
    }
  }
  put(j, "\"", 1);
}

void json_cstring(struct json_buf *j, const char *s) {
  json_string(j, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
}

void json_int(struct json_buf *j, int64_t v) {
  char buf[32];
  value_prefix(j);
  snprintf(buf, sizeof(buf), "%" PRId64, v);
  json_raw(j, buf);
}

void json_uint(struct json_buf *j, uint64_t v) {
  char buf[32];
  value_prefix(j);
  snprintf(buf, sizeof(buf), "%" PRIu64, v);
  json_raw(j, buf);
}

void json_double(struct json_buf *j, double v) {
  char buf[64];
  value_prefix(j);
  snprintf(buf, sizeof(buf), "%.3f", v);
  json_raw(j, buf);
}

void json_bool(struct json_buf *j, bool v) {
  value_prefix(j);
  json_raw(j, v ? "true" : "false");
}

char *json_finish(struct json_buf *j) {
  if (j->failed || j->data == NULL) {
    free(j->data);
    j->data = NULL;
    return NULL;
  }
  char *out = j->data;
  j->data = NULL;
  return out;
}
