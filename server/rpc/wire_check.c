/* wire_check.c: see wire_check.h. */
#include "wire_check.h"

#include <string.h>

#define WIRE_MAX_DEPTH 8

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (*p >= end)
      return -1;
    uint8_t b = *(*p)++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if ((b & 0x80) == 0) {
      *out = v;
      return 0;
    }
  }
  return -1;
}

static int scan(const ProtobufCMessageDescriptor *desc, const uint8_t *p, const uint8_t *end,
                int depth, const char **field) {
  if (depth > WIRE_MAX_DEPTH)
    return -1;
  while (p < end) {
    uint64_t key, v;
    if (read_varint(&p, end, &key) < 0)
      return -1;
    unsigned wire = (unsigned)(key & 7);
    uint64_t tag = key >> 3;
    switch (wire) {
    case 0:
      if (read_varint(&p, end, &v) < 0)
        return -1;
      break;
    case 1:
      if (end - p < 8)
        return -1;
      p += 8;
      break;
    case 5:
      if (end - p < 4)
        return -1;
      p += 4;
      break;
    case 2: {
      if (read_varint(&p, end, &v) < 0 || v > (uint64_t)(end - p))
        return -1;
      const ProtobufCFieldDescriptor *f =
          tag <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(desc, (unsigned)tag) : NULL;
      if (f != NULL && f->type == PROTOBUF_C_TYPE_STRING && memchr(p, 0, (size_t)v) != NULL) {
        *field = f->name;
        return 1;
      }
      if (f != NULL && f->type == PROTOBUF_C_TYPE_MESSAGE) {
        int r = scan(f->descriptor, p, p + v, depth + 1, field);
        if (r != 0)
          return r;
      }
      p += v;
      break;
    }
    default:
      return -1;
    }
  }
  return 0;
}

int wire_find_nul_string(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                         const char **field) {
  *field = NULL;
  if (len == 0) /* an empty payload has data == NULL: NULL + 0 is undefined */
    return 0;
  return scan(desc, data, data + len, 0, field);
}
