/* wire_check.h: finds NUL bytes in the string fields of a packed message.
 * protobuf-c hands strings to C as NUL-terminated copies, so "a\0/../x"
 * would silently become "a" (and code "print(1)\0..." would run cut short):
 * such requests are refused before anything else looks at them. Walks the
 * wire format with the generated descriptors; the schema has no recursive
 * messages, and the depth is bounded anyway. */
#ifndef SBX_WIRE_CHECK_H
#define SBX_WIRE_CHECK_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

/* Returns 1 and the field's name in *field when a string field holds a NUL
 * byte, 0 when none does, -1 when the bytes are not well-formed. */
int wire_find_nul_string(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                         const char **field);

#endif
