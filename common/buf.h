/* buf.h: a growing byte buffer with a ceiling, the one every layer uses
 * for output, frames and bodies it collects (the engine's streams, the
 * zygote's packer, the interpreter's frames, the HTTP body, a download).
 * It never grows past the max its caller names: bytes from a sandbox or a
 * request are hostile and must never make the server allocate without
 * bound. Not thread-safe; an empty buffer is all zeroes. */
#ifndef SBX_BUF_H
#define SBX_BUF_H

#include <stddef.h>
#include <stdint.h>

struct sbx_buf {
  uint8_t *data;
  size_t len;
  size_t cap;
};

/* Makes room for n more bytes (doubling from 4 KiB, never past max).
 * 0, or -1 with errno (EMSGSIZE: len + n would pass max; ENOMEM), the
 * buffer unchanged. */
int sbx_buf_reserve(struct sbx_buf *b, size_t n, size_t max);
/* Appends n bytes, all or none: 0, or -1 with errno as sbx_buf_reserve. */
int sbx_buf_append(struct sbx_buf *b, const void *data, size_t n, size_t max);
/* Appends what fits below max and returns how many bytes that was (fewer
 * than n: the rest would pass max, or memory ran out). */
size_t sbx_buf_append_upto(struct sbx_buf *b, const void *data, size_t n, size_t max);
/* Hands the bytes to the caller (to free) and leaves b empty. */
uint8_t *sbx_buf_steal(struct sbx_buf *b, size_t *len);
void sbx_buf_free(struct sbx_buf *b);

#endif
