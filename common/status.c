/* status.c: names for the wire enums, taken from the generated descriptors so
 * that the schema stays the single source of truth. */
#include "status.h"

#include <string.h>

const char *sbx_code_name(int code) {
  const ProtobufCEnumValue *v =
      protobuf_c_enum_descriptor_get_value(&sandbox__v1__code__descriptor, code);
  return v != NULL ? v->name : "UNKNOWN";
}
