/* buf.c: see buf.h. */
#include "buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int sbx_buf_reserve(struct sbx_buf *b, size_t n, size_t max) {
  if (n > max || b->len > max - n) {
    errno = EMSGSIZE;
    return -1;
  }
  size_t need = b->len + n;
  if (need <= b->cap)
    return 0;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < need)
    cap = cap > SIZE_MAX / 2 ? need : cap * 2;
  if (cap > max)
    cap = max;
  uint8_t *d = realloc(b->data, cap);
  if (d == NULL) {
    errno = ENOMEM;
    return -1;
  }
  b->data = d;
  b->cap = cap;
  return 0;
}

int sbx_buf_append(struct sbx_buf *b, const void *data, size_t n, size_t max) {
  if (n == 0)
    return 0;
  if (sbx_buf_reserve(b, n, max) < 0)
    return -1;
  memcpy(b->data + b->len, data, n);
  b->len += n;
  return 0;
}

size_t sbx_buf_append_upto(struct sbx_buf *b, const void *data, size_t n, size_t max) {
  size_t room = b->len < max ? max - b->len : 0;
  size_t take = n < room ? n : room;
  return sbx_buf_append(b, data, take, max) == 0 ? take : 0;
}

uint8_t *sbx_buf_steal(struct sbx_buf *b, size_t *len) {
  uint8_t *d = b->data;
  if (len != NULL)
    *len = b->len;
  *b = (struct sbx_buf){0};
  return d;
}

void sbx_buf_free(struct sbx_buf *b) {
  free(b->data);
  *b = (struct sbx_buf){0};
}
