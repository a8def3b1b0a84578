/* visible.c: see visible.h. */
#include "visible.h"

#include <stdlib.h>
#include <string.h>

/* cat -v's form of one byte: ^X for the C0 controls, ^? for DEL, M- and
 * the same for bytes with the high bit. Returns the length written. */
static size_t cat_v(uint8_t b, char *out) {
  size_t n = 0;
  if (b >= 0x80) {
    out[n++] = 'M';
    out[n++] = '-';
    b = (uint8_t)(b - 0x80);
  }
  if (b < 0x20) {
    out[n++] = '^';
    out[n++] = (char)(b + 0x40);
  } else if (b == 0x7f) {
    out[n++] = '^';
    out[n++] = '?';
  } else
    out[n++] = (char)b;
  return n;
}

/* The length of the valid UTF-8 character at p (of at most avail bytes),
 * 0 when it is not one, or -1 when it is cut short by the end. */
static int utf8_char(const uint8_t *p, size_t avail) {
  int need;
  uint32_t min;
  if (p[0] >= 0xc2 && p[0] <= 0xdf)
    need = 2, min = 0x80;
  else if (p[0] >= 0xe0 && p[0] <= 0xef)
    need = 3, min = 0x800;
  else if (p[0] >= 0xf0 && p[0] <= 0xf4)
    need = 4, min = 0x10000;
  else
    return 0;
  uint32_t cp = p[0] & (0x7f >> need);
  for (int i = 1; i < need; i++) {
    if ((size_t)i >= avail)
      return -1;
    if ((p[i] & 0xc0) != 0x80)
      return 0;
    cp = (cp << 6) | (p[i] & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return need;
}

static size_t encode(const uint8_t *p, size_t len, bool final, char *out, size_t *used) {
  size_t n = 0, i = 0;
  while (i < len) {
    uint8_t b = p[i];
    if (b == '\n' || b == '\t' || (b >= 0x20 && b < 0x7f)) {
      out[n++] = (char)b;
      i++;
      continue;
    }
    if (b < 0x80) {
      n += cat_v(b, out + n);
      i++;
      continue;
    }
    int c = utf8_char(p + i, len - i);
    if (c < 0 && !final)
      break; /* cut: held for the next chunk */
    if (c == 2 && b == 0xc2 && p[i + 1] < 0xa0) {
      n += cat_v(p[i + 1], out + n); /* a C1 control, U+0080..U+009F */
      i += 2;
    } else if (c > 0) {
      memcpy(out + n, p + i, (size_t)c);
      n += (size_t)c;
      i += (size_t)c;
    } else {
      n += cat_v(b, out + n);
      i++;
    }
  }
  *used = i;
  return n;
}

char *visible_encode(struct visible *v, const uint8_t *data, size_t len, bool final,
                     size_t *out_len) {
  size_t total = v->n_held + len, used;
  uint8_t *in = malloc(total > 0 ? total : 1);
  char *out = malloc(4 * total + 1);
  if (in == NULL || out == NULL) {
    free(in);
    free(out);
    return NULL;
  }
  memcpy(in, v->held, v->n_held);
  if (len > 0)
    memcpy(in + v->n_held, data, len);
  *out_len = encode(in, total, final, out, &used);
  /* Only a character cut by the end is left: at most 3 bytes. */
  v->n_held = total - used;
  memcpy(v->held, in + used, v->n_held);
  free(in);
  return out;
}
