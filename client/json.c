/* json.c: see json.h. */
#include "json.h"

#include <ctype.h>
#include <string.h>

#include "cleanup.h"
#include "text.h"

json_t *sbxc_json_text(const void *data, size_t len) {
  size_t n;
  cleanup_free char *text = text_utf8_repair(data, len, &n);
  return text != NULL ? json_stringn_nocheck(text, n) : NULL;
}

size_t sbxc_utf8_incomplete_tail(const void *data, size_t len) {
  const unsigned char *p = data;
  for (size_t back = 1; back <= 3 && back <= len; back++) {
    unsigned char b = p[len - back];
    if ((b & 0xC0) == 0x80)
      continue; /* a continuation byte: its lead is further back */
    if (b >= 0xF5)
      return 0; /* never a lead: the repair replaces it */
    size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

json_t *sbxc_json_cstring(const char *s) {
  return s != NULL ? sbxc_json_text(s, strlen(s)) : json_string("");
}

static json_t *enum_json(const ProtobufCEnumDescriptor *d, int value) {
  const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(d, value);
  if (v == NULL)
    return json_integer(value); /* a value newer than this client */
  char name[64];
  size_t i = 0;
  for (; v->name[i] != '\0' && i + 1 < sizeof name; i++)
    name[i] = (char)tolower((unsigned char)v->name[i]);
  name[i] = '\0';
  return json_string(name);
}

/* One value of field f stored at p. */
static json_t *value_json(const ProtobufCFieldDescriptor *f, const void *p) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    return json_integer(*(const int32_t *)p);
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    return json_integer(*(const uint32_t *)p);
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    return json_integer(*(const int64_t *)p);
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64: {
    uint64_t v = *(const uint64_t *)p;
    return json_integer(v > INT64_MAX ? INT64_MAX : (json_int_t)v);
  }
  case PROTOBUF_C_TYPE_FLOAT:
    return json_real(*(const float *)p);
  case PROTOBUF_C_TYPE_DOUBLE:
    return json_real(*(const double *)p);
  case PROTOBUF_C_TYPE_BOOL:
    return json_boolean(*(const protobuf_c_boolean *)p);
  case PROTOBUF_C_TYPE_ENUM:
    return enum_json(f->descriptor, *(const int *)p);
  case PROTOBUF_C_TYPE_STRING:
    return sbxc_json_cstring(*(char *const *)p);
  case PROTOBUF_C_TYPE_BYTES: {
    const ProtobufCBinaryData *b = p;
    return sbxc_json_text(b->data, b->len);
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    const ProtobufCMessage *m = *(ProtobufCMessage *const *)p;
    return m != NULL ? sbxc_json_message(m) : json_null();
  }
  }
  return json_null();
}

static size_t value_size(const ProtobufCFieldDescriptor *f) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    return 8;
  case PROTOBUF_C_TYPE_DOUBLE:
    return sizeof(double);
  case PROTOBUF_C_TYPE_BOOL:
    return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_MESSAGE:
    return sizeof(void *);
  case PROTOBUF_C_TYPE_BYTES:
    return sizeof(ProtobufCBinaryData);
  default:
    return 4; /* 32-bit integers, float, enum */
  }
}

static json_t *repeated_json(const ProtobufCFieldDescriptor *f, const char *base) {
  size_t n = *(const size_t *)(base + f->quantifier_offset);
  const char *items = *(char *const *)(base + f->offset);
  json_t *array = json_array();
  for (size_t i = 0; array != NULL && i < n; i++)
    if (json_array_append_new(array, value_json(f, items + i * value_size(f))) < 0) {
      json_decref(array);
      array = NULL;
    }
  return array;
}

json_t *sbxc_json_message(const ProtobufCMessage *m) {
  const ProtobufCMessageDescriptor *d = m->descriptor;
  const char *base = (const char *)m;
  json_t *o = json_object();
  for (unsigned i = 0; o != NULL && i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    json_t *v;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      v = repeated_json(f, base);
    } else if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) != 0) {
      if (*(const uint32_t *)(base + f->quantifier_offset) != f->id)
        continue; /* another member of the oneof is set */
      v = value_json(f, base + f->offset);
    } else {
      v = value_json(f, base + f->offset);
    }
    if (json_object_set_new(o, f->name, v) < 0) {
      json_decref(o);
      o = NULL;
    }
  }
  return o;
}

char *sbxc_json_dump(json_t *value) {
  if (value == NULL)
    return NULL;
  char *text = json_dumps(value, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(12));
  json_decref(value);
  return text;
}
