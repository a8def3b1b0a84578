/* json_text.c: bytes to a JSON string literal, replacing invalid UTF-8. */
#include "json_text.h"

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if invalid. */
static size_t utf8_seq_len(const uint8_t *p, size_t n) {
  uint8_t c = p[0];
  size_t len;
  uint32_t cp;
  if (c < 0x80)
    return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (n < len)
    return 0;
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80)
      return 0;
    cp = (cp << 6) | (p[i] & 0x3f);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0; /* overlong, out of range, or a surrogate */
  return len;
}

void json_write_string(FILE *out, const uint8_t *data, size_t len) {
  fputc('"', out);
  for (size_t i = 0; i < len;) {
    uint8_t c = data[i];
    size_t n = utf8_seq_len(data + i, len - i);
    if (n == 0) {
      fputs("\\ufffd", out);
      i++;
      continue;
    }
    if (n > 1) {
      fwrite(data + i, 1, n, out);
      i += n;
      continue;
    }
    switch (c) {
    case '"':
      fputs("\\\"", out);
      break;
    case '\\':
      fputs("\\\\", out);
      break;
    case '\n':
      fputs("\\n", out);
      break;
    case '\r':
      fputs("\\r", out);
      break;
    case '\t':
      fputs("\\t", out);
      break;
    default:
      if (c < 0x20 || c == 0x7f)
        fprintf(out, "\\u%04x", c);
      else
        fputc(c, out);
    }
    i++;
  }
  fputc('"', out);
}
