/* json.h: a small JSON writer for the CLIs and GetInfo. Strings are written
 * as text: invalid UTF-8 becomes U+FFFD, so output is always valid JSON. */
#ifndef SBXC_JSON_H
#define SBXC_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct json_buf {
  char *data;
  size_t len, cap;
  bool failed; /* out of memory: data is incomplete */
  bool need_comma;
};

void json_raw(struct json_buf *j, const char *s);
void json_begin(struct json_buf *j, char bracket); /* '{' or '[' */
void json_end(struct json_buf *j, char bracket);   /* '}' or ']' */
void json_key(struct json_buf *j, const char *key);
void json_string(struct json_buf *j, const char *s, size_t len);
void json_cstring(struct json_buf *j, const char *s);
void json_int(struct json_buf *j, int64_t v);
void json_uint(struct json_buf *j, uint64_t v);
void json_double(struct json_buf *j, double v);
void json_bool(struct json_buf *j, bool v);
/* Returns the NUL-terminated text (owned by caller) or NULL if it failed. */
char *json_finish(struct json_buf *j);

#endif
