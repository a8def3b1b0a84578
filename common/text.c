/* text.c: see text.h. */
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t text_utf8_seq_len(const uint8_t *p, size_t n) {
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

bool text_utf8_valid(const char *s, size_t len) {
  const uint8_t *p = (const uint8_t *)s;
  for (size_t i = 0; i < len;) {
    size_t n = text_utf8_seq_len(p + i, len - i);
    if (n == 0)
      return false;
    i += n;
  }
  return true;
}

char *text_utf8_repair(const uint8_t *data, size_t len, size_t *out_len) {
  /* Each invalid byte becomes three (U+FFFD): at most 3 x len. */
  if (len > (SIZE_MAX - 1) / 3)
    return NULL;
  char *out = malloc(len * 3 + 1);
  if (out == NULL)
    return NULL;
  size_t o = 0;
  for (size_t i = 0; i < len;) {
    size_t n = data != NULL ? text_utf8_seq_len(data + i, len - i) : 0;
    if (n == 0) {
      memcpy(out + o, "\xef\xbf\xbd", 3);
      o += 3;
      i++;
    } else {
      memcpy(out + o, data + i, n);
      o += n;
      i += n;
    }
  }
  out[o] = '\0';
  if (out_len != NULL)
    *out_len = o;
  return out;
}

void text_printable(const char *in, size_t in_len, char *out, size_t out_len, bool keep_newlines) {
  if (out_len == 0)
    return;
  size_t o = 0;
  for (size_t i = 0; i < in_len && in[i] != '\0' && o + 1 < out_len; i++) {
    unsigned char c = (unsigned char)in[i];
    bool ok = (c >= 0x20 && c < 0x7f && c != '"') || (keep_newlines && (c == '\n' || c == '\t'));
    out[o++] = ok ? (char)c : '?';
  }
  out[o] = '\0';
}

void text_format_bytes(uint64_t bytes, char *buf, size_t len) {
  static const char *units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) {
    snprintf(buf, len, "%llu bytes", (unsigned long long)bytes);
    return;
  }
  double v = (double)bytes;
  size_t u = 0;
  for (v /= 1024; v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0]); v /= 1024)
    u++;
  if (v == (double)(unsigned long long)v)
    snprintf(buf, len, "%llu %s", (unsigned long long)v, units[u]);
  else
    snprintf(buf, len, "%.1f %s", v, units[u]);
}

bool text_graphic_ascii(const char *s) {
  for (; *s != '\0'; s++)
    if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f)
      return false;
  return true;
}

bool text_list_has(const char *list, const char *item) {
  size_t len = strlen(item);
  for (const char *p = list; *p != '\0';) {
    size_t n = strcspn(p, ",");
    if (n == len && memcmp(p, item, len) == 0)
      return true;
    p += n + (p[n] == ',');
  }
  return false;
}

int text_hex_digit(char c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}
