/* status.c: names for the wire enums, taken from the generated descriptors so
 * that the schema stays the single source of truth. */
#include "status.h"

#include <string.h>

const char *sbx_code_name(int code) {
  const ProtobufCEnumValue *v =
      protobuf_c_enum_descriptor_get_value(&sandbox__v1__code__descriptor, code);
  return v != NULL ? v->name : "UNKNOWN";
}

const char *sbx_killed_by_name(int killed_by) {
  switch (killed_by) {
  case SANDBOX__V1__KILLED_BY__KILLED_BY_NONE:
    return "none";
  case SANDBOX__V1__KILLED_BY__KILLED_BY_TIMEOUT:
    return "timeout";
  case SANDBOX__V1__KILLED_BY__KILLED_BY_MEMORY:
    return "memory";
  case SANDBOX__V1__KILLED_BY__KILLED_BY_OUTPUT_LIMIT:
    return "output_limit";
  case SANDBOX__V1__KILLED_BY__KILLED_BY_SIGNAL:
    return "signal";
  default:
    return "unknown";
  }
}
